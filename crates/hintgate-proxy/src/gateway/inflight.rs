//! Every request the gateway waits on, each with a deadline.
//!
//! Requests the gateway sends a server (a host's request forwarded, a
//! `tools/call`, and its own: the era probe, `initialize`, pages of
//! `tools/list`, the pages of a merged list) are keyed by the server and the
//! numeric id the gateway gave them; requests it sends a host (questions,
//! a server's own requests relayed) by the session and a number. Nothing
//! enters the table without a deadline, so no answer that never comes can
//! hold a call, or a host, forever: when a deadline passes, the loop takes
//! the entry out and fails what waited on it with a clear error.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use foldhash::fast::RandomState;
use tokio::time::Instant;

use super::call::CallContext;
use super::request::{HostRequest, ServerIdx, SessionId};

/// A deadline's key in the ordered map.
pub(crate) type DeadlineKey = (Instant, u64);

/// What a request sent to a server was for.
#[derive(Debug)]
pub(crate) enum UpPurpose {
    /// The era probe (`server/discover`).
    Discover,
    /// The era probe after its time ran out and `initialize` went out: a
    /// slow 2026-07-28 server may still answer it.
    LateDiscover,
    /// The legacy handshake.
    Initialize,
    /// A page of the server's tool list.
    ListTools,
    /// A host request forwarded: its answer goes back under the host's id.
    Forward(Box<HostRequest>),
    /// A tool call forwarded.
    Call(Box<CallContext>),
    /// A trusted server's dry run of a call a person is to be asked about
    /// (`dry_run`): the call waits here for it.
    DryRun(Box<CallContext>),
    /// A page of a list merged across servers.
    Fanout {
        /// The merge it belongs to.
        aggregate: u64,
        /// The list's method.
        method: String,
    },
    /// A request whose answer nobody needs (`logging/setLevel` sent on).
    Quiet,
    /// A 2026-07-28 listen stream opened for a host's resource
    /// subscription, until the server acknowledges it.
    Subscribe {
        /// The resource's URI.
        uri: String,
    },
    /// A legacy server's `resources/subscribe`, sent again for the hosts'
    /// subscription after the server stopped and started.
    Resubscribe {
        /// The resource's URI.
        uri: String,
    },
}

/// What a request sent to a host was for.
#[derive(Debug)]
pub(crate) enum HostPurpose {
    /// A question to a person about a held call.
    Ask(Box<CallContext>),
    /// One question of a 2026-07-28 server, asked of a legacy host.
    Gather {
        /// The gathering it belongs to.
        gather: u64,
        /// The server's key of the question.
        key: String,
    },
    /// A server's own request (elicitation, sampling, roots), relayed.
    Relay {
        /// The server.
        server: ServerIdx,
        /// Which start of it.
        generation: u64,
        /// Its own id (raw JSON).
        upstream_id: String,
    },
}

/// A deadline that passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expired {
    /// A request to a server.
    Up(ServerIdx, u64),
    /// A request to a host.
    Host(SessionId, u64),
    /// A call waiting in the approval queue.
    Queue(u64),
    /// A call waiting for the decision hook's answer to question N.
    Hook(u64),
    /// Something waiting for a server to start or list its tools may have
    /// waited long enough.
    Waiting,
}

#[derive(Debug)]
struct Waiting<P> {
    deadline: DeadlineKey,
    purpose: P,
}

/// The in-flight table.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    up: HashMap<(ServerIdx, u64), Waiting<UpPurpose>, RandomState>,
    host: HashMap<(SessionId, u64), Waiting<HostPurpose>, RandomState>,
    deadlines: BTreeMap<DeadlineKey, Expired>,
    next_deadline: u64,
    next_host_id: u64,
    /// How many of each server's own requests wait for a host (kept as
    /// entries come and go, so the bound on them costs no scan).
    relays: HashMap<ServerIdx, usize>,
    /// How many of the host entries are questions to a person (kept as
    /// entries come and go, for the metrics' gauge).
    asks: usize,
}

// === impl InFlight ===

impl InFlight {
    /// Waits `timeout` for the answer to request `id` sent to `server`.
    pub fn wait_up(&mut self, server: ServerIdx, id: u64, purpose: UpPurpose, timeout: Duration) {
        let deadline = self.deadline(timeout, Expired::Up(server, id));
        if let Some(old) = self.up.insert((server, id), Waiting { deadline, purpose }) {
            self.deadlines.remove(&old.deadline);
        }
    }

    /// Takes the entry of request `id` sent to `server` (its answer came,
    /// or it is given up).
    pub fn take_up(&mut self, server: ServerIdx, id: u64) -> Option<UpPurpose> {
        let waiting = self.up.remove(&(server, id))?;
        self.deadlines.remove(&waiting.deadline);
        Some(waiting.purpose)
    }

    /// The entry of request `id` sent to `server`, left in place.
    pub fn peek_up_mut(&mut self, server: ServerIdx, id: u64) -> Option<&mut UpPurpose> {
        self.up
            .get_mut(&(server, id))
            .map(|waiting| &mut waiting.purpose)
    }

    /// The ids of the requests to `server` whose purpose matches.
    pub fn up_ids(&self, server: ServerIdx, matches: impl Fn(&UpPurpose) -> bool) -> Vec<u64> {
        let mut ids: Vec<u64> = self
            .up
            .iter()
            .filter(|((owner, _), waiting)| *owner == server && matches(&waiting.purpose))
            .map(|((_, id), _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Every request to `server`, taken out (the server failed).
    pub fn drain_up(&mut self, server: ServerIdx) -> Vec<(u64, UpPurpose)> {
        let ids = self.up_ids(server, |_| true);
        ids.into_iter()
            .filter_map(|id| self.take_up(server, id).map(|purpose| (id, purpose)))
            .collect()
    }

    /// Every forwarded call and request of `session`, taken out (the host
    /// went away).
    pub fn drain_session_up(&mut self, session: SessionId) -> Vec<(ServerIdx, u64, UpPurpose)> {
        let mut keys: Vec<(ServerIdx, u64)> = self
            .up
            .iter()
            .filter(|(_, waiting)| match &waiting.purpose {
                UpPurpose::Call(cx) | UpPurpose::DryRun(cx) => cx.request.session == session,
                UpPurpose::Forward(request) => request.session == session,
                _ => false,
            })
            .map(|(key, _)| *key)
            .collect();
        keys.sort_unstable();
        keys.into_iter()
            .filter_map(|(server, id)| {
                self.take_up(server, id)
                    .map(|purpose| (server, id, purpose))
            })
            .collect()
    }

    /// The sessions with a host request in flight on `server`, in order.
    pub fn sessions_on(&self, server: ServerIdx) -> impl Iterator<Item = SessionId> {
        let sessions: std::collections::BTreeSet<SessionId> = self
            .up
            .iter()
            .filter(|((owner, _), _)| *owner == server)
            .filter_map(|(_, waiting)| match &waiting.purpose {
                UpPurpose::Call(cx) | UpPurpose::DryRun(cx) => Some(cx.request.session),
                UpPurpose::Forward(request) => Some(request.session),
                _ => None,
            })
            .collect();
        sessions.into_iter()
    }

    /// The host session whose request (a call or a forwarded request) is
    /// request `id` in flight on `server`.
    pub fn session_of(&self, server: ServerIdx, id: u64) -> Option<SessionId> {
        match &self.up.get(&(server, id))?.purpose {
            UpPurpose::Call(cx) => Some(cx.request.session),
            UpPurpose::Forward(request) => Some(request.session),
            _ => None,
        }
    }

    /// The host requests in flight on `server` (forwarded requests and
    /// calls).
    pub fn requests_on(&self, server: ServerIdx) -> impl Iterator<Item = &HostRequest> {
        self.up
            .iter()
            .filter(move |((owner, _), _)| *owner == server)
            .filter_map(|(_, waiting)| match &waiting.purpose {
                UpPurpose::Call(cx) | UpPurpose::DryRun(cx) => Some(&cx.request),
                UpPurpose::Forward(request) => Some(&**request),
                _ => None,
            })
    }

    /// Finds the request to a server that a host request became (to cancel it).
    pub fn find_host_request(&self, session: SessionId, host_id: &str) -> Option<(ServerIdx, u64)> {
        self.up.iter().find_map(|(key, waiting)| {
            let request = match &waiting.purpose {
                UpPurpose::Call(cx) | UpPurpose::DryRun(cx) => &cx.request,
                UpPurpose::Forward(request) => request,
                _ => return None,
            };
            (request.session == session && request.id() == host_id).then_some(*key)
        })
    }

    /// Sends a request to a host: returns its number (`"hintgate-N"`).
    pub fn wait_host(
        &mut self,
        session: SessionId,
        purpose: HostPurpose,
        timeout: Duration,
    ) -> u64 {
        self.next_host_id += 1;
        let n = self.next_host_id;
        let deadline = self.deadline(timeout, Expired::Host(session, n));
        if let HostPurpose::Relay { server, .. } = &purpose {
            *self.relays.entry(*server).or_default() += 1;
        }
        if matches!(purpose, HostPurpose::Ask(_)) {
            self.asks += 1;
        }
        self.host
            .insert((session, n), Waiting { deadline, purpose });
        n
    }

    /// Takes the entry of request `n` sent to a host.
    pub fn take_host(&mut self, session: SessionId, n: u64) -> Option<HostPurpose> {
        let waiting = self.host.remove(&(session, n))?;
        self.deadlines.remove(&waiting.deadline);
        if matches!(waiting.purpose, HostPurpose::Ask(_)) {
            self.asks = self.asks.saturating_sub(1);
        }
        if let HostPurpose::Relay { server, .. } = &waiting.purpose
            && let Some(count) = self.relays.get_mut(server)
        {
            *count = count.saturating_sub(1);
        }
        Some(waiting.purpose)
    }

    /// How many questions about a held call wait for a person's answer.
    pub fn asks(&self) -> usize {
        self.asks
    }

    /// How many of `server`'s own requests wait for a host.
    pub fn relays_from(&self, server: ServerIdx) -> usize {
        self.relays.get(&server).copied().unwrap_or(0)
    }

    /// The numbers of the requests to a host whose purpose matches.
    pub fn host_ids(&self, session: SessionId, matches: impl Fn(&HostPurpose) -> bool) -> Vec<u64> {
        let mut ids: Vec<u64> = self
            .host
            .iter()
            .filter(|((owner, _), waiting)| *owner == session && matches(&waiting.purpose))
            .map(|((_, n), _)| *n)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Every request to any host whose purpose matches, taken out.
    pub fn take_host_where(
        &mut self,
        matches: impl Fn(&HostPurpose) -> bool,
    ) -> Vec<(SessionId, u64, HostPurpose)> {
        let mut keys: Vec<(SessionId, u64)> = self
            .host
            .iter()
            .filter(|(_, waiting)| matches(&waiting.purpose))
            .map(|(key, _)| *key)
            .collect();
        keys.sort_unstable();
        keys.into_iter()
            .filter_map(|(session, n)| {
                self.take_host(session, n)
                    .map(|purpose| (session, n, purpose))
            })
            .collect()
    }

    /// A deadline for something held elsewhere (a queued call); returns its key.
    pub fn deadline(&mut self, after: Duration, what: Expired) -> DeadlineKey {
        self.next_deadline += 1;
        let key = (Instant::now() + after, self.next_deadline);
        self.deadlines.insert(key, what);
        key
    }

    /// Forgets a deadline.
    pub fn cancel_deadline(&mut self, key: &DeadlineKey) {
        self.deadlines.remove(key);
    }

    /// When the next deadline passes.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.keys().next().map(|(at, _)| *at)
    }

    /// Takes every deadline that has passed at `now`, oldest first. The
    /// entries they guard stay in the table for the caller to take.
    pub fn expired(&mut self, now: Instant) -> Vec<Expired> {
        let mut due = Vec::new();
        while let Some(entry) = self.deadlines.first_entry() {
            if entry.key().0 > now {
                break;
            }
            due.push(entry.remove());
        }
        due
    }

    /// How many requests wait (for tests and logs).
    pub fn len(&self) -> usize {
        self.up.len() + self.host.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn every_entry_has_a_deadline_and_taking_it_cancels_the_deadline() {
        let mut table = InFlight::default();
        table.wait_up(0, 1, UpPurpose::ListTools, Duration::from_secs(5));
        table.wait_up(0, 2, UpPurpose::Quiet, Duration::from_secs(1));
        let n = table.wait_host(
            SessionId::FIRST,
            HostPurpose::Gather {
                gather: 1,
                key: "k".into(),
            },
            Duration::from_secs(3),
        );
        assert_eq!(table.len(), 3);
        assert!(matches!(table.take_up(0, 1), Some(UpPurpose::ListTools)));
        tokio::time::advance(Duration::from_secs(10)).await;
        // The taken entry's deadline went with it.
        assert_eq!(
            table.expired(Instant::now()),
            vec![Expired::Up(0, 2), Expired::Host(SessionId::FIRST, n)]
        );
        assert!(table.take_up(0, 2).is_some());
        assert!(table.take_host(SessionId::FIRST, n).is_some());
        assert_eq!(table.len(), 0);
        assert_eq!(table.next_deadline(), None);
    }
}
