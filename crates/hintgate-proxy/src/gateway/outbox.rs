//! What a turn produced, in order: the lines for hosts and servers and the
//! calls to send, applied by the end of the turn once the turn's records
//! are durable ([`super::Gateway`]'s `end_turn`).
//!
//! A part that has something to send puts it here instead of reaching for
//! a host's queue or a server's link: the part needs only `&mut Outbox`,
//! and nothing leaves before the turn's records are written.
//!
//! What a part leaves the gateway to do with a call it held ([`Then`]: run
//! it through the pipeline again, record a person's approval, end it on
//! record) is not sent: it is applied by the gateway as soon as the part's
//! step returns, in the order the part left it, before anything else.

use std::sync::Arc;

use hintgate_store::Remember;

use super::call::{CallContext, CallEnd, Outcome};
use super::request::{ServerIdx, SessionId};
use super::retry::Failure;
use crate::frame;

/// Something the turn produced, sent once the turn's records are durable.
#[derive(Debug)]
pub(crate) enum Outgoing {
    /// A line to a host that it must get (an answer, a question).
    Host(SessionId, String),
    /// A notification to a host, dropped when the host is not reading; a
    /// change to a list (`Some` of its notification) is told later then.
    HostNote(SessionId, String, Option<&'static str>),
    /// A line to a server (dropped when the server restarted meanwhile),
    /// and the `--listen` principal it is sent for (`None`: the gateway's
    /// own, or a stdio host's).
    Upstream(ServerIdx, u64, String, Option<Arc<str>>),
    /// A call to send upstream once its record (at this place in the turn's
    /// batch) is durable.
    Call(Box<CallContext>, Option<usize>),
}

/// What a part leaves the gateway to do with a call it held: the part can
/// neither run the pipeline nor write a record, so it says which, and the
/// gateway does it once the part's step has returned (`Gateway::then`).
#[derive(Debug)]
pub(crate) enum Then {
    /// The call goes through the pipeline again, from the top (a hook
    /// answered, a person edited it).
    Run(Box<CallContext>),
    /// A person approved the call: the approval is recorded (the
    /// definition pinned, and remembered for the session or always where
    /// the decision allows it), then the call goes through the pipeline
    /// again.
    Approved(Box<CallContext>, Remember),
    /// The call ends at the gateway: its record, then its answer.
    End(Box<CallContext>, CallEnd),
    /// A forwarded call failed, or was not sent (why): retried or answered
    /// as design §4.5 says.
    Failed(Box<CallContext>, Failure, String),
    /// A forwarded call is answered with this line, its outcome on record.
    Answer(Box<CallContext>, String, Outcome),
    /// The server's dry run of a call will not be answered (why): the
    /// person is asked without it.
    NoDryRun(Box<CallContext>, String),
    /// A server finished its part of merged list `aggregate` (or failed it,
    /// why).
    Fanned(u64, ServerIdx, Option<String>),
    /// A server's state changed: what waited for it is tried again.
    Wake,
}

/// What the turn produced, in order.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    items: Vec<Outgoing>,
}

impl Outbox {
    /// An empty outbox with room for a busy turn.
    pub fn new() -> Self {
        Self {
            items: Vec::with_capacity(64),
        }
    }

    /// A line for a host, sent at the end of the turn.
    pub fn host(&mut self, session: SessionId, line: String) {
        self.items.push(Outgoing::Host(session, line));
    }

    /// A JSON-RPC error answering a host's request `id`.
    pub fn error(&mut self, session: SessionId, id: &str, code: i64, message: &str) {
        self.host(session, frame::error_response(id, code, message));
    }

    /// A notification for a host, sent at the end of the turn unless the
    /// host is not reading; `list` is the list change it tells, told again
    /// later if it is dropped.
    pub fn host_note(&mut self, session: SessionId, line: String, list: Option<&'static str>) {
        self.items.push(Outgoing::HostNote(session, line, list));
    }

    /// A line for a start (`generation`) of a server, sent at the end of the
    /// turn on behalf of `principal` (`None`: the gateway's own, or a stdio
    /// host's).
    pub fn upstream(
        &mut self,
        idx: ServerIdx,
        generation: u64,
        line: String,
        principal: Option<Arc<str>>,
    ) {
        self.items
            .push(Outgoing::Upstream(idx, generation, line, principal));
    }

    /// A call to send once its record (at `place` in the turn's batch) is
    /// durable.
    pub fn call(&mut self, cx: Box<CallContext>, place: Option<usize>) {
        self.items.push(Outgoing::Call(cx, place));
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Everything that waits, in order, leaving the outbox empty.
    pub fn take(&mut self) -> Vec<Outgoing> {
        std::mem::take(&mut self.items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_turn_produced_leaves_in_the_order_it_was_put_in() {
        let mut outbox = Outbox::new();
        assert!(outbox.is_empty());
        outbox.upstream(1, 2, "up".to_owned(), None);
        outbox.error(SessionId(0), "7", -32602, "no");
        outbox.host_note(SessionId(0), "note".to_owned(), Some("x"));
        let taken = outbox.take();
        assert!(outbox.is_empty());
        assert!(matches!(&taken[0], Outgoing::Upstream(1, 2, line, None) if line == "up"));
        assert!(
            matches!(&taken[1], Outgoing::Host(_, line) if line.contains("\"code\":-32602") && line.contains("\"id\":7"))
        );
        assert!(matches!(&taken[2], Outgoing::HostNote(_, line, Some("x")) if line == "note"));
    }
}
