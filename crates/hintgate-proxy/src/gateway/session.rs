//! A host session: who the host is (its era and capabilities) and what it
//! has done (its taint and the tools it approved for the session).
//!
//! The gateway keeps its sessions apart from its upstreams: several
//! sessions may share one set of servers (the HTTP host side serves many),
//! and each keeps its own taint, remembered approvals and questions. Over
//! stdio there is one session, [`SessionId::FIRST`].
//!
//! Each session's lines to its host wait in a queue whose size is counted
//! ([`QueueGauge`]) and bounded ([`HOST_QUEUE_BYTES`](crate::conn::HOST_QUEUE_BYTES)): a host that stops
//! reading loses notifications (counted, and a missed list change told
//! later), never an answer without being told.
//!
//! What is sent to the hosts goes through the turn's outbox
//! ([`super::outbox::Outbox`]): [`Sessions::reply`] answers a request, and
//! [`Sessions::notify_all`] tells each host of a list change once, in its
//! own era, with nothing but the sessions and the outbox.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use hintgate_policy::decide::Scope;
use serde_json::Value;
use tokio::sync::mpsc;

use super::outbox::Outbox;
use super::request::{HostRequest, ServerIdx, SessionId};
use crate::conn::QueueGauge;

/// Every host session, by number. Over HTTP sessions come and go: a
/// closed one is removed at the end of the turn it closed in.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    list: BTreeMap<u32, HostSession>,
}

/// The protocol era a host speaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Era {
    /// Not known yet: neither `initialize` nor a modern request came.
    Unknown,
    /// The legacy era, at this protocol version.
    Legacy(String),
    /// 2026-07-28.
    Modern,
}

/// Which lists a host was told changed and has not asked for since. A
/// host is told once, however many changes the servers announce until it
/// lists again: a server's flood of `list_changed` is not a flood for the
/// host.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Told {
    tools: bool,
    prompts: bool,
    resources: bool,
    /// Changes whose notification was dropped (the host was not reading):
    /// told once it reads again.
    owed: [bool; 3],
}

/// The change notifications [`Told`] keeps track of, in its order.
const LIST_CHANGED: [&str; 3] = [
    "notifications/tools/list_changed",
    "notifications/prompts/list_changed",
    "notifications/resources/list_changed",
];

/// One host session.
#[derive(Debug)]
pub(crate) struct HostSession {
    /// Lines to the host.
    out: mpsc::UnboundedSender<String>,
    /// What waits in `out` for the host to read.
    gauge: Arc<QueueGauge>,
    /// Where a line goes first, while nothing waits in `out` (a transport
    /// that places lines from the loop itself).
    pub sink: Option<Arc<dyn crate::event::HostSink>>,
    /// What the gateway holds of the host's requests.
    pub requests: Arc<QueueGauge>,
    /// The era it speaks.
    pub era: Era,
    /// What it said of itself: the params of its `initialize` (for a modern
    /// host, the same made from its first request's `_meta`).
    pub init: Option<Value>,
    /// It declared form elicitation: the gateway can ask it a person.
    pub elicitation: bool,
    /// A modern host's `subscriptions/listen` request id (raw JSON).
    pub listen: Option<String>,
    /// The lowest level of log messages a legacy host asked for with
    /// `logging/setLevel`; sent to 2026-07-28 servers in each request's
    /// `_meta` on its behalf.
    pub log_level: Option<String>,
    /// Private data reached the host: a result of a private-data tool, or a
    /// resource, resource update or prompt of a private-data server (design
    /// §4.4).
    pub tainted: bool,
    /// Tools approved for the rest of the session.
    pub remembered: HashSet<(ServerIdx, String)>,
    /// The lists it was told changed and has not asked for since.
    pub told: Told,
    /// Notifications dropped since it last drained its queue.
    pub dropped_notes: u64,
    /// Its `initialize`, waiting for the servers to start.
    pub initialize_pending: Option<HostRequest>,
    /// A modern host's `server/discover`, waiting for the servers to start.
    pub discover_pending: Option<HostRequest>,
    /// The host closed its side.
    pub closed: bool,
    /// What its credentials let it do: over stdio, [`Scope::Write`]; over
    /// HTTP, what its token's scopes give.
    pub scope: Scope,
    /// Who it is, when its transport authenticated it (over HTTP, its
    /// token's name); named in its calls' audit records.
    pub principal: Option<String>,
}

// === impl Sessions ===

impl Sessions {
    /// Private data from `server` (`what` says how it came) reached the
    /// host of `session`: from now on, open-world tools ask (design §4.4).
    pub(super) fn taint(&mut self, session: SessionId, server: &str, what: &str) {
        if let Some(host) = self.get_mut(&session)
            && !host.tainted
        {
            tracing::info!(server.id = %server, "the session has read private data ({what}): open-world tools now ask");
            host.tainted = true;
        }
    }

    /// The `--listen` principal whose upstream logins serve the requests of
    /// the host of `session` (`None`: a stdio host, whose requests go with
    /// the command line's logins).
    pub fn principal(&self, session: SessionId) -> Option<Arc<str>> {
        self.get(&session)
            .and_then(|host| host.principal.as_deref())
            .map(Arc::from)
    }

    /// A host's `logging/setLevel`: the level is kept for its session (and
    /// sent in the `_meta` of its requests to 2026-07-28 servers). Returns
    /// false, having answered with an error (into the outbox), for a level
    /// MCP does not name.
    pub fn set_log_level(&mut self, outbox: &mut Outbox, request: &HostRequest) -> bool {
        let params = request.params();
        let level = params.get("level").and_then(Value::as_str).unwrap_or("");
        if super::era::log_rank(level).is_none() {
            let text = format!(
                "`logging/setLevel` takes one of {}; not `{}`",
                super::era::LOG_LEVELS.join(", "),
                hintgate_policy::sanitize::escape_line(level)
            );
            outbox.error(request.session, request.id(), -32602, &text);
            return false;
        }
        if let Some(host) = self.get_mut(&request.session) {
            host.log_level = Some(level.to_owned());
        }
        true
    }

    /// The log level the host of `session` set with `logging/setLevel`.
    pub fn log_level(&self, session: SessionId) -> Option<&str> {
        self.get(&session)?.log_level.as_deref()
    }

    /// A result for a host's request, with what a 2026-07-28 host requires,
    /// into the outbox.
    pub fn reply(&self, outbox: &mut Outbox, session: SessionId, id: &str, result: &Value) {
        outbox.host(session, self.result_line(session, id, result));
    }

    /// Sends notification `line` to session `id` unless its host is not
    /// reading: then it is dropped and counted, and a list change (`list`,
    /// its notification) is told again later.
    pub fn deliver_note(
        &mut self,
        id: SessionId,
        line: String,
        list: Option<&'static str>,
        metrics: Option<&crate::metrics::Metrics>,
    ) {
        if let Some(host) = self.get_mut(&id)
            && !host.notify(line)
        {
            if let Some(metrics) = metrics {
                metrics.dropped_notification();
            }
            if let Some(method) = list {
                host.told.dropped(method);
            }
        }
    }

    /// A notification for every host session, into the outbox.
    pub fn note_every(&self, outbox: &mut Outbox, line: &str) {
        for session in self.keys() {
            outbox.host_note(session, line.to_owned(), None);
        }
    }

    /// The host reads again after its queue was past its bound: the count
    /// of what was dropped is logged, and the changes it was not told of
    /// are told now.
    pub fn drained(&mut self, outbox: &mut Outbox, session: SessionId) {
        let Some(host) = self.get_mut(&session) else {
            return;
        };
        let dropped = std::mem::take(&mut host.dropped_notes);
        let owed = host.told.take_owed();
        let modern = host.modern();
        if dropped > 0 {
            tracing::warn!(
                dropped,
                "the host reads again: {dropped} notification(s) to it were dropped while it was not reading"
            );
        }
        for method in owed {
            let line = crate::frame::notification(method, &serde_json::json!({}));
            self.notify(outbox, session, modern, method, &line);
        }
    }

    /// A change notification (`method`; `line` for a legacy host) to every
    /// host that was not told already, into the outbox.
    pub fn notify_all(&mut self, outbox: &mut Outbox, method: &str, line: &str) {
        let sessions: Vec<(SessionId, bool)> = self
            .keys()
            .map(|id| (id, self.get(&id).is_some_and(HostSession::modern)))
            .collect();
        for (session, modern) in sessions {
            self.notify(outbox, session, modern, method, line);
        }
    }

    /// A change notification to one host, unless it was told already: a
    /// legacy host gets `line`, a 2026-07-28 host the notification on its
    /// listen stream (and, without one, cannot be told yet).
    pub fn notify(
        &mut self,
        outbox: &mut Outbox,
        session: SessionId,
        modern: bool,
        method: &str,
        line: &str,
    ) {
        let Some(host) = self.get_mut(&session) else {
            return;
        };
        if !((!modern || host.listen.is_some()) && host.told.tell(method)) {
            return;
        }
        let list = Told::list_changed(method);
        if !modern {
            outbox.host_note(session, line.to_owned(), list);
            return;
        }
        let Some(subscription) = host.listen.as_deref() else {
            return;
        };
        let id: Value = serde_json::from_str(subscription).unwrap_or(Value::Null);
        let line = crate::frame::notification(
            method,
            &serde_json::json!({"_meta": {super::era::META_SUBSCRIPTION: id}}),
        );
        outbox.host_note(session, line, list);
    }

    /// The protocol version the host of `session` speaks ("" for none yet).
    pub fn protocol_version(&self, session: SessionId) -> String {
        self.get(&session)
            .map(|host| host.protocol_version().to_owned())
            .unwrap_or_default()
    }

    /// A result line for a host, with what a 2026-07-28 host requires.
    pub fn result_line(&self, session: SessionId, id: &str, result: &Value) -> String {
        let modern = self.get(&session).is_some_and(HostSession::modern);
        if modern
            && let Some(object) = result.as_object()
            && !object.contains_key("resultType")
        {
            // What `era::modernize` adds to a result no cacheable method
            // gave: said here, so a session does not reach back into the era
            // module that reads sessions.
            let mut object = object.clone();
            object.insert("resultType".to_owned(), Value::from("complete"));
            return crate::frame::response(id, &Value::Object(object));
        }
        crate::frame::response(id, result)
    }

    /// A host session opens, as the host side describes it.
    pub fn open(&mut self, open: crate::event::OpenSession) {
        let crate::event::OpenSession {
            session,
            out,
            gauge,
            requests,
            scope,
            principal,
            sink,
        } = open;
        let mut host = HostSession::new(out, gauge, requests);
        host.sink = sink;
        host.scope = scope;
        host.principal = principal;
        tracing::debug!(session, ?scope, "a host session opens");
        self.insert(SessionId(session), host);
    }

    /// Adds a session under its number.
    pub fn insert(&mut self, id: SessionId, session: HostSession) {
        self.list.insert(id.0, session);
    }

    /// A session.
    pub fn get(&self, id: &SessionId) -> Option<&HostSession> {
        self.list.get(&id.0)
    }

    /// A session, to change.
    pub fn get_mut(&mut self, id: &SessionId) -> Option<&mut HostSession> {
        self.list.get_mut(&id.0)
    }

    /// How many sessions are open.
    pub fn count(&self) -> usize {
        self.list.len()
    }

    /// The numbers of every session, in order.
    pub fn keys(&self) -> impl Iterator<Item = SessionId> + '_ {
        self.list.keys().copied().map(SessionId)
    }

    /// Every session.
    pub fn values(&self) -> impl Iterator<Item = &HostSession> {
        self.list.values()
    }

    /// Forgets the sessions whose host closed its side (their calls have
    /// ended on record already).
    pub fn remove_closed(&mut self) {
        self.list.retain(|_, session| !session.closed);
    }
}

// === impl HostSession ===

impl HostSession {
    /// A new session writing to `out`, counting what waits in `gauge` and
    /// the requests held in `requests`.
    pub fn new(
        out: mpsc::UnboundedSender<String>,
        gauge: Arc<QueueGauge>,
        requests: Arc<QueueGauge>,
    ) -> Self {
        Self {
            out,
            gauge,
            sink: None,
            requests,
            era: Era::Unknown,
            init: None,
            elicitation: false,
            listen: None,
            log_level: None,
            tainted: false,
            remembered: HashSet::new(),
            told: Told::default(),
            dropped_notes: 0,
            initialize_pending: None,
            discover_pending: None,
            closed: false,
            scope: Scope::Write,
            principal: None,
        }
    }

    /// Sends a line the host must get: an answer, or a question. Past the
    /// queue's hard bound (the host has not been reading), an answer is
    /// replaced by an error that says why, and a question is dropped (it
    /// then times out, and its call is refused).
    pub fn send(&self, line: String) {
        let waiting = self.gauge.bytes();
        if waiting + line.len() < self.gauge.hard_limit() {
            self.queue(line);
            return;
        }
        self.gauge.count_dropped();
        let message = crate::frame::Message::parse(&line).ok();
        match message
            .as_ref()
            .map(|message| (message.kind(), message.id_text()))
        {
            Some((crate::frame::Kind::Response, id)) => {
                let text = format!(
                    "hintgate dropped this answer ({} bytes): the host was not reading what hintgate wrote to it ({waiting} bytes were waiting)",
                    line.len()
                );
                tracing::warn!("{text}");
                self.queue(crate::frame::error_response(id, -32603, &text));
            }
            _ => tracing::warn!(
                "the host was not reading what hintgate wrote to it ({waiting} bytes were waiting): a message to it was dropped"
            ),
        }
    }

    /// Sends a notification, unless the host's queue is past its soft
    /// bound: then it is dropped (and counted). Returns whether it was sent.
    pub fn notify(&mut self, line: String) -> bool {
        if self.gauge.bytes() + line.len() < self.gauge.soft_limit() {
            self.queue(line);
            return true;
        }
        self.gauge.count_dropped();
        self.dropped_notes += 1;
        if self.dropped_notes == 1 {
            tracing::warn!(
                "the host is not reading what hintgate writes to it: notifications to it are dropped until it reads again"
            );
        }
        false
    }

    fn queue(&self, line: String) {
        // INVARIANT: the sink is offered a line only while nothing waits in
        // `out`, so no line overtakes one queued before it.
        let line = match &self.sink {
            Some(sink) if self.gauge.bytes() == 0 => match sink.offer(line) {
                None => return,
                Some(line) => line,
            },
            _ => line,
        };
        let len = line.len();
        self.gauge.queued(len);
        // A closed channel means the host is gone; its reader says so.
        if self.out.send(line).is_err() {
            self.gauge.withdrawn(len);
        }
    }

    /// The host speaks 2026-07-28.
    pub fn modern(&self) -> bool {
        self.era == Era::Modern
    }

    /// The session started (an `initialize` or a first modern request).
    pub fn started(&self) -> bool {
        self.init.is_some()
    }

    /// The protocol version agreed with the host.
    pub fn protocol_version(&self) -> &str {
        match &self.era {
            Era::Legacy(version) => version,
            Era::Modern => crate::versions::MODERN_VERSION,
            Era::Unknown => "",
        }
    }

    /// Whether the tool was approved for the rest of the session.
    pub fn remembers(&self, server: ServerIdx, tool: &str) -> bool {
        // Most sessions remember nothing: skip building the key.
        !self.remembered.is_empty() && self.remembered.contains(&(server, tool.to_owned()))
    }
}

// === impl Told ===

impl Told {
    /// The change notification that `method` is, in the gateway's own
    /// spelling.
    pub fn list_changed(method: &str) -> Option<&'static str> {
        LIST_CHANGED.iter().copied().find(|known| *known == method)
    }

    /// The notification of a change, `method`, was dropped: the host was
    /// not told, and is once it reads again.
    pub fn dropped(&mut self, method: &str) {
        if let Some(idx) = LIST_CHANGED.iter().position(|known| *known == method)
            && let Some(owed) = self.owed.get_mut(idx)
        {
            *owed = true;
            if let Some(told) = self.slot(method) {
                *told = false;
            }
        }
    }

    /// The changes whose notification was dropped, to tell now; forgotten.
    pub fn take_owed(&mut self) -> Vec<&'static str> {
        let owed = std::mem::take(&mut self.owed);
        LIST_CHANGED
            .iter()
            .zip(owed)
            .filter(|(_, owed)| *owed)
            .map(|(method, _)| *method)
            .collect()
    }

    fn slot(&mut self, method: &str) -> Option<&mut bool> {
        match method {
            "notifications/tools/list_changed" | "tools/list" => Some(&mut self.tools),
            "notifications/prompts/list_changed" | "prompts/list" => Some(&mut self.prompts),
            "notifications/resources/list_changed"
            | "resources/list"
            | "resources/templates/list" => Some(&mut self.resources),
            _ => None,
        }
    }

    /// A change notified with `method` is to be told: returns whether it
    /// must be sent (the host was not told of a change to that list since
    /// it last asked for it), and notes that it was.
    pub fn tell(&mut self, method: &str) -> bool {
        match self.slot(method) {
            Some(told) => !std::mem::replace(told, true),
            None => true,
        }
    }

    /// The host asks for a list (`method`): the next change to it is told.
    pub fn listed(&mut self, method: &str) {
        if let Some(told) = self.slot(method) {
            *told = false;
        }
    }
}

/// Whether a host's declared elicitation capability includes form mode
/// (`elicitation: {}` means form; `{url: {}}` alone does not).
pub(crate) fn declares_form_elicitation(capabilities: Option<&Value>) -> bool {
    capabilities
        .and_then(|caps| caps.get("elicitation"))
        .and_then(Value::as_object)
        .is_some_and(|caps| caps.is_empty() || caps.contains_key("form"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Takes lines while `open`, and keeps what it took.
    #[derive(Debug, Default)]
    struct Gate {
        open: std::sync::atomic::AtomicBool,
        took: std::sync::Mutex<Vec<String>>,
    }

    impl crate::event::HostSink for Gate {
        fn offer(&self, line: String) -> Option<String> {
            if !self.open.load(std::sync::atomic::Ordering::Relaxed) {
                return Some(line);
            }
            self.took.lock().unwrap().push(line);
            None
        }
    }

    #[test]
    fn no_line_overtakes_one_waiting_in_the_channel_when_a_sink_takes_lines() {
        let (out, mut lines) = mpsc::unbounded_channel();
        let gauge = Arc::new(QueueGauge::default());
        gauge.set_limits(1 << 20, 1 << 21);
        let mut host = HostSession::new(out, Arc::clone(&gauge), Arc::default());
        let gate = Arc::new(Gate::default());
        host.sink = Some(Arc::clone(&gate) as Arc<dyn crate::event::HostSink>);
        // The sink cannot take `a`: it waits in the channel, counted.
        host.send("a".to_owned());
        assert_eq!(gauge.lines(), 1);
        // The sink could take `b` now, but `a` still waits: `b` queues
        // behind it rather than overtake it.
        gate.open.store(true, std::sync::atomic::Ordering::Relaxed);
        host.send("b".to_owned());
        assert!(gate.took.lock().unwrap().is_empty());
        assert_eq!(lines.try_recv().unwrap(), "a");
        assert_eq!(lines.try_recv().unwrap(), "b");
        // Both delivered: the channel is empty, and the sink takes `c` at
        // once, uncounted.
        gauge.written(1);
        gauge.written(1);
        host.send("c".to_owned());
        assert_eq!(*gate.took.lock().unwrap(), ["c"]);
        assert_eq!(gauge.bytes(), 0);
        assert!(lines.try_recv().is_err());
    }

    #[test]
    fn a_host_is_told_of_a_change_once_until_it_lists_again() {
        let mut told = Told::default();
        assert!(told.tell("notifications/tools/list_changed"));
        assert!(!told.tell("notifications/tools/list_changed"));
        // Each list on its own.
        assert!(told.tell("notifications/prompts/list_changed"));
        assert!(told.tell("notifications/resources/list_changed"));
        told.listed("tools/list");
        assert!(told.tell("notifications/tools/list_changed"));
        assert!(!told.tell("notifications/resources/list_changed"));
        told.listed("resources/templates/list");
        assert!(told.tell("notifications/resources/list_changed"));
        // Other notifications are never held back.
        assert!(told.tell("notifications/message"));
        assert!(told.tell("notifications/message"));
    }

    #[test]
    fn private_data_taints_only_the_session_it_reached_and_for_good() {
        let mut sessions = three_sessions(serde_json::json!({}));
        sessions.taint(SessionId(1), "mail", "`resources/read`");
        let tainted = |sessions: &Sessions, n| sessions.get(&SessionId(n)).unwrap().tainted;
        assert!(tainted(&sessions, 1));
        assert!(!tainted(&sessions, 0) && !tainted(&sessions, 2));
        // Tainted again, or a session that is gone: nothing changes.
        sessions.taint(SessionId(1), "mail", "a tool result");
        sessions.taint(SessionId(9), "mail", "a tool result");
        assert!(tainted(&sessions, 1));
        assert!(!tainted(&sessions, 0) && !tainted(&sessions, 2));
    }

    /// Sessions 0 (a legacy host that declared `capabilities`), 1 (a
    /// 2026-07-28 host listening on stream `"s1"`) and 2 (a 2026-07-28 host
    /// without a listen stream).
    fn three_sessions(capabilities: Value) -> Sessions {
        let mut sessions = Sessions::default();
        for (n, era, listen) in [
            (0, Era::Legacy("2025-11-25".to_owned()), None),
            (1, Era::Modern, Some("\"s1\"".to_owned())),
            (2, Era::Modern, None),
        ] {
            let (out, _) = mpsc::unbounded_channel();
            let mut host = HostSession::new(out, Arc::default(), Arc::default());
            host.era = era;
            host.listen = listen;
            host.init = Some(serde_json::json!({"capabilities": capabilities.clone()}));
            sessions.insert(SessionId(n), host);
        }
        sessions
    }

    #[test]
    fn a_list_change_reaches_each_host_once_in_its_own_era() {
        use super::super::outbox::{Outbox, Outgoing};
        let mut sessions = three_sessions(Value::Null);
        let mut outbox = Outbox::new();
        let method = "notifications/tools/list_changed";
        let legacy = r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#;
        sessions.notify_all(&mut outbox, method, legacy);
        // Told already: nothing more until the hosts list again.
        sessions.notify_all(&mut outbox, method, legacy);
        let sent = outbox.take();
        assert_eq!(sent.len(), 2, "{sent:?}");
        assert!(
            matches!(&sent[0], Outgoing::HostNote(SessionId(0), line, Some(_)) if line == legacy)
        );
        let Outgoing::HostNote(SessionId(1), line, Some(_)) = &sent[1] else {
            panic!("{sent:?}");
        };
        let line: Value = serde_json::from_str(line).unwrap();
        assert_eq!(line["method"], method);
        assert_eq!(
            line["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            "s1"
        );
        // A note for every host goes to every host, told or not.
        sessions.note_every(&mut outbox, "n");
        assert_eq!(outbox.take().len(), 3);
    }

    #[test]
    fn a_server_asks_a_host_only_what_it_declared() {
        use super::super::relay::host_takes;
        let sessions = three_sessions(serde_json::json!({"sampling": {}}));
        assert_eq!(
            host_takes(&sessions, SessionId(0), "sampling/createMessage"),
            Ok(())
        );
        assert!(host_takes(&sessions, SessionId(0), "roots/list").is_err());
        assert!(host_takes(&sessions, SessionId(0), "ping").is_err());
        assert!(host_takes(&sessions, SessionId(0), "tools/call").is_err());
        assert!(host_takes(&sessions, SessionId(9), "sampling/createMessage").is_err());
    }

    #[test]
    fn a_host_that_reads_again_is_told_the_changes_it_missed() {
        use super::super::outbox::{Outbox, Outgoing};
        let mut sessions = three_sessions(Value::Null);
        if let Some(host) = sessions.get_mut(&SessionId(0)) {
            host.dropped_notes = 2;
            host.told.dropped("notifications/prompts/list_changed");
        }
        let mut outbox = Outbox::new();
        sessions.drained(&mut outbox, SessionId(0));
        let sent = outbox.take();
        assert_eq!(sent.len(), 1, "{sent:?}");
        assert!(
            matches!(&sent[0], Outgoing::HostNote(SessionId(0), line, Some(_)) if line.contains("notifications/prompts/list_changed"))
        );
        assert_eq!(
            sessions.get(&SessionId(0)).map(|host| host.dropped_notes),
            Some(0)
        );
        // Told once: reading again owes nothing more.
        sessions.drained(&mut outbox, SessionId(0));
        assert!(outbox.is_empty());
    }

    #[test]
    fn a_log_level_is_kept_for_its_session_only_when_mcp_names_it() {
        use super::super::outbox::{Outbox, Outgoing};
        use super::super::request::Method;
        let mut sessions = three_sessions(Value::Null);
        let set = |level: &str| {
            let line = format!(
                r#"{{"jsonrpc":"2.0","id":4,"method":"logging/setLevel","params":{{"level":"{level}"}}}}"#
            );
            let message = crate::frame::Message::parse(&line).unwrap();
            HostRequest::new(
                SessionId(0),
                line.clone(),
                message.spans(),
                Method::of(message.method()),
            )
        };
        let mut outbox = Outbox::new();
        assert!(sessions.set_log_level(&mut outbox, &set("debug")));
        assert!(outbox.is_empty());
        assert_eq!(sessions.log_level(SessionId(0)), Some("debug"));
        assert_eq!(sessions.log_level(SessionId(1)), None);
        assert!(!sessions.set_log_level(&mut outbox, &set("loud")));
        assert_eq!(sessions.log_level(SessionId(0)), Some("debug"));
        let sent = outbox.take();
        assert!(
            matches!(&sent[..], [Outgoing::Host(SessionId(0), line)] if line.contains("-32602") && line.contains("takes one of debug") && line.contains("not `loud`"))
        );
    }
}
