//! What waits for a server to start or list its tools: host requests and
//! tool calls, each with how long it may wait in all.
//!
//! A request or a call that needs a server that is not ready is parked
//! here, and tried again (taken back whole, [`Parked::take_all`]) whenever
//! a server's state changes; one that has waited
//! [`super::Limits::wait_timeout`] in all is taken back to be answered with
//! an error ([`Parked::take_expired`]), and those of a session that ends or
//! of a request its host cancels are taken back to be ended
//! ([`Parked::take_of`]). The deadline it waits for is in the in-flight
//! table ([`InFlight::deadline`]), so the loop wakes for it.

use std::time::Duration;

use tokio::time::Instant;

use super::Waiting;
use super::inflight::{Expired, InFlight};
use super::request::{HostRequest, SessionId};

/// What waits for a server, in the order it came.
#[derive(Debug, Default)]
pub(crate) struct Parked {
    items: Vec<Waiting>,
}

impl Parked {
    /// `item` waits for a server; the first time it does, it may wait
    /// `wait` in all from now (a deadline in `inflight` wakes the loop
    /// then). Tried again, it keeps the deadline it had.
    pub fn park(&mut self, mut item: Waiting, wait: Duration, inflight: &mut InFlight) {
        let request = request_of_mut(&mut item);
        if request.wait_until.is_none() {
            request.wait_until = Some(Instant::now() + wait);
            inflight.deadline(wait, Expired::Waiting);
        }
        self.items.push(item);
    }

    /// Everything that waits, to try again; none is left.
    pub fn take_all(&mut self) -> Vec<Waiting> {
        std::mem::take(&mut self.items)
    }

    /// What has waited its whole time by `now`, taken out; the rest waits
    /// on, in its order.
    pub fn take_expired(&mut self, now: Instant) -> Vec<Waiting> {
        self.take_if(|request| request.wait_until.is_some_and(|until| until <= now))
    }

    /// What session `session` has waiting (only its request `id`, when
    /// given), taken out; the rest waits on, in its order.
    pub fn take_of(&mut self, session: SessionId, id: Option<&str>) -> Vec<Waiting> {
        self.take_if(|request| request.session == session && id.is_none_or(|id| request.id() == id))
    }

    /// How many tool calls wait.
    pub fn calls(&self) -> usize {
        self.items
            .iter()
            .filter(|item| matches!(item, Waiting::Call(_)))
            .count()
    }

    fn take_if(&mut self, mut taken: impl FnMut(&HostRequest) -> bool) -> Vec<Waiting> {
        let (out, kept) = std::mem::take(&mut self.items)
            .into_iter()
            .partition(|item| taken(request_of(item)));
        self.items = kept;
        out
    }
}

fn request_of(item: &Waiting) -> &HostRequest {
    match item {
        Waiting::Request(request) => request,
        Waiting::Call(cx) => &cx.request,
    }
}

fn request_of_mut(item: &mut Waiting) -> &mut HostRequest {
    match item {
        Waiting::Request(request) => request,
        Waiting::Call(cx) => &mut cx.request,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::request::Method;

    fn request(session: u32, id: u64) -> Waiting {
        let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"prompts/list"}}"#);
        let message = crate::frame::Message::parse(&line).unwrap();
        Waiting::Request(Box::new(HostRequest::new(
            SessionId(session),
            line.clone(),
            message.spans(),
            Method::of(message.method()),
        )))
    }

    fn ids(items: &[Waiting]) -> Vec<String> {
        items
            .iter()
            .map(|item| request_of(item).id().to_owned())
            .collect()
    }

    #[test]
    fn what_waits_keeps_its_first_deadline_and_leaves_once_it_passed() {
        let mut parked = Parked::default();
        let mut inflight = InFlight::default();
        parked.park(request(0, 1), Duration::from_secs(10), &mut inflight);
        parked.park(request(0, 2), Duration::from_secs(30), &mut inflight);
        let now = Instant::now();
        assert!(parked.take_expired(now).is_empty());
        // Tried again, each keeps the deadline it had.
        for item in parked.take_all() {
            parked.park(item, Duration::from_secs(600), &mut inflight);
        }
        let expired = parked.take_expired(now + Duration::from_secs(20));
        assert_eq!(ids(&expired), ["1"]);
        assert_eq!(ids(&parked.take_all()), ["2"]);
        assert_eq!(parked.calls(), 0);
    }

    #[test]
    fn a_sessions_waiting_requests_leave_together_or_one_by_its_id() {
        let mut parked = Parked::default();
        let mut inflight = InFlight::default();
        for (session, id) in [(0, 1), (1, 2), (0, 3), (1, 4)] {
            parked.park(request(session, id), Duration::from_secs(10), &mut inflight);
        }
        assert_eq!(ids(&parked.take_of(SessionId(1), Some("4"))), ["4"]);
        assert!(parked.take_of(SessionId(1), Some("1")).is_empty());
        assert_eq!(ids(&parked.take_of(SessionId(0), None)), ["1", "3"]);
        assert_eq!(ids(&parked.take_all()), ["2"]);
    }
}
