//! The gateway's event loop and session state.
//!
//! One task owns everything: the upstreams, the requests in flight in both
//! directions, the held calls waiting for a person, the session's taint,
//! remembered approvals and pins. Events arrive on one channel (host lines,
//! upstream lines, processes ending) and timers are kept in one ordered map,
//! so no state is shared and no lock is taken on the hot path.
//!
//! Ids: requests the gateway sends upstream get numeric ids from a counter
//! per server; requests it sends the host get string ids `"hintgate-N"`. A
//! response is routed back by those ids, and the original id is spliced back
//! into the original line.

pub(crate) mod modern;
mod pins;
mod queue;
mod relay;
mod routing;
mod tools;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use hintgate_policy::config::{ServerConfig, Transport};
use hintgate_policy::decide::Policy;
use hintgate_policy::pin::PinDigest;
use hintgate_policy::sanitize::sanitize;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::conn::{LineRead, read_line, write_lines};
use crate::event::{Event, HostEvent, UpstreamEvent};
use crate::frame::{self, Kind, Message};
use crate::upstream::{Link, Process, Spawn};
use crate::upstream_http::HttpLink;

pub(crate) use tools::ToolEntry;

/// How long the era probe (`server/discover`) waits before a server is taken
/// for a legacy one.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// The protocol versions of the legacy era the gateway speaks, newest first.
pub const LEGACY_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// How tool names are shown to the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// One server; its tool names unchanged.
    Wrap,
    /// Every configured server; tool and prompt names prefixed with the
    /// server's name and the separator (`fs__read_file`).
    Gateway,
}

/// What the gateway runs with: a policy over a configuration whose `${VAR}`
/// references are already expanded, and the mode.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The policy, and through it the configuration.
    pub policy: Policy,
    /// Wrap or gateway mode.
    pub mode: Mode,
    /// Where to report each decision and each answer to a question, for
    /// whoever watches (the demo prints them; the audit log will store them).
    pub observer: Option<mpsc::UnboundedSender<Observed>>,
    /// Where pins and standing approvals outlive the session; `None` keeps
    /// them for the session only.
    pub store: Option<std::sync::Arc<dyn hintgate_store::Store>>,
}

/// Something the gateway decided or was told about a tool call.
#[derive(Debug, Clone)]
pub enum Observed {
    /// The policy's decision on a call.
    Decided {
        /// The server's configured name.
        server: String,
        /// The server's own tool name.
        tool: String,
        /// The decision.
        decision: hintgate_policy::decide::Decision,
    },
    /// A call waits in the approval queue (the host cannot ask a person).
    Queued {
        /// Its number in the queue (`hintgate approvals approve ID`).
        id: u64,
        /// The server's configured name.
        server: String,
        /// The server's own tool name.
        tool: String,
    },
    /// A person answered the question about a call.
    Answered {
        /// The server's configured name.
        server: String,
        /// The server's own tool name.
        tool: String,
        /// The call may run.
        approved: bool,
        /// What was answered, in words.
        answer: String,
    },
}

/// Why the gateway stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The configuration has no server to run.
    #[error("the configuration has no server")]
    NoServers,
    /// Wrap mode needs exactly one server.
    #[error("wrap mode runs exactly one server, not {0}")]
    WrapNeedsOne(usize),
    /// The operating system gave no randomness for the sealing key.
    #[error("no randomness for the sealing key: {0}")]
    NoRandomness(String),
}

/// Runs the gateway between a host on `host_in`/`host_out` and the
/// configured servers, until the host closes its side.
///
/// # Errors
///
/// [`RunError`] when the settings cannot run at all; everything that goes
/// wrong once running is answered on the protocol and logged instead.
pub async fn run<R, W>(settings: Settings, host_in: R, host_out: W) -> Result<(), RunError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let servers: Vec<ServerConfig> = settings.policy.config().servers.values().cloned().collect();
    if servers.is_empty() {
        return Err(RunError::NoServers);
    }
    if settings.mode == Mode::Wrap && servers.len() != 1 {
        return Err(RunError::WrapNeedsOne(servers.len()));
    }
    let gateway_settings = settings.policy.config().gateway.clone();
    let max_line = usize::try_from(gateway_settings.max_message_bytes).unwrap_or(usize::MAX);
    let (events_tx, mut events_rx) = mpsc::unbounded_channel();
    let (host_tx, host_rx) = mpsc::unbounded_channel();
    let writer = tokio::spawn(write_lines(host_out, host_rx));
    tokio::spawn(read_host(host_in, max_line, events_tx.clone()));

    let sealer =
        crate::seal::Sealer::new().map_err(|err| RunError::NoRandomness(err.to_string()))?;
    let audit = settings
        .store
        .clone()
        .map(|store| crate::audit::AuditWriter::spawn(store, events_tx.clone()));
    let session = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis())
    );
    let redactor = hintgate_policy::redact::Redactor::new(&settings.policy.config().audit);
    let mut gateway = Gateway {
        audit,
        redactor,
        held_for_audit: HashMap::new(),
        held_lines: HashMap::new(),
        next_token: 0,
        session,
        sealer,
        separator: gateway_settings.separator.clone(),
        call_timeout: Duration::from_secs(gateway_settings.call_timeout_s),
        ask_timeout: Duration::from_secs(gateway_settings.ask_timeout_s),
        max_line,
        policy: settings.policy,
        mode: settings.mode,
        observer: settings.observer,
        store: settings.store,
        events_tx,
        host_tx,
        upstreams: servers.into_iter().map(Upstream::new).collect(),
        host: HostSession::default(),
        next_host_request: 0,
        pending_up: HashMap::new(),
        pending_host: HashMap::new(),
        host_to_up: HashMap::new(),
        waiting: Vec::new(),
        aggregates: HashMap::new(),
        gathers: HashMap::new(),
        next_aggregate: 0,
        deadlines: BTreeMap::new(),
        next_deadline: 0,
        resource_owners: HashMap::new(),
        template_owners: HashMap::new(),
        queued: HashMap::new(),
        queue_watcher: None,
        closed: false,
    };
    while !gateway.closed {
        let next = gateway.deadlines.keys().next().map(|(at, _)| *at);
        tokio::select! {
            event = events_rx.recv() => match event {
                Some(event) => gateway.handle(event),
                None => break,
            },
            () = sleep_until(next) => gateway.expire(Instant::now()),
        }
    }
    gateway.shutdown().await;
    drop(gateway);
    let _ = writer.await;
    Ok(())
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn read_host<R: AsyncRead + Unpin>(
    host_in: R,
    max_line: usize,
    events: mpsc::UnboundedSender<Event>,
) {
    let mut reader = BufReader::with_capacity(64 * 1024, host_in);
    let mut buf = Vec::with_capacity(4096);
    loop {
        let event = match read_line(&mut reader, &mut buf, max_line).await {
            Ok(LineRead::Line) => match String::from_utf8(std::mem::take(&mut buf)) {
                Ok(line) if line.trim().is_empty() => continue,
                Ok(line) => HostEvent::Line(line),
                Err(_) => HostEvent::TooLong,
            },
            Ok(LineRead::TooLong) => HostEvent::TooLong,
            Ok(LineRead::Eof) | Err(_) => HostEvent::Closed,
        };
        let closed = matches!(event, HostEvent::Closed);
        if events.send(Event::Host(event)).is_err() || closed {
            return;
        }
    }
}

/// The gateway's whole state.
struct Gateway {
    store: Option<std::sync::Arc<dyn hintgate_store::Store>>,
    /// The audit writer, when there is a store.
    audit: Option<crate::audit::AuditWriter>,
    /// What of a call's arguments the audit log leaves out.
    redactor: hintgate_policy::redact::Redactor,
    /// Calls waiting for their audit record to be durable, by token.
    held_for_audit: HashMap<u64, tools::HeldCall>,
    /// Answers to the host waiting for their call's record, by token.
    held_lines: HashMap<u64, String>,
    next_token: u64,
    /// This gateway session, as the audit log names it.
    session: String,
    sealer: crate::seal::Sealer,
    policy: Policy,
    mode: Mode,
    observer: Option<mpsc::UnboundedSender<Observed>>,
    separator: String,
    call_timeout: Duration,
    ask_timeout: Duration,
    max_line: usize,
    events_tx: mpsc::UnboundedSender<Event>,
    host_tx: mpsc::UnboundedSender<String>,
    upstreams: Vec<Upstream>,
    host: HostSession,
    next_host_request: u64,
    /// Requests sent upstream, by server index and the gateway's id.
    pending_up: HashMap<(usize, u64), PendingUp>,
    /// Requests sent to the host, by the number in `"hintgate-N"`.
    pending_host: HashMap<u64, PendingHost>,
    /// A host request's raw id, to the upstream request it became (for
    /// cancellation).
    host_to_up: HashMap<String, (usize, u64)>,
    /// Host requests waiting for a server to start or to list its tools.
    waiting: Vec<HostRequest>,
    aggregates: HashMap<u64, routing::Aggregate>,
    gathers: relay::Gathers,
    next_aggregate: u64,
    deadlines: BTreeMap<(Instant, u64), Deadline>,
    next_deadline: u64,
    /// Gateway mode: which server listed a resource URI or template.
    resource_owners: HashMap<String, usize>,
    template_owners: HashMap<String, usize>,
    /// Calls waiting in the approval queue, by their number there.
    queued: HashMap<u64, tools::Ask>,
    /// The thread that watches the queue, once a call waits there.
    queue_watcher: Option<queue::QueueWatcher>,
    closed: bool,
}

/// What the host said about itself, and the session's state.
#[derive(Debug, Default)]
struct HostSession {
    /// The params of the host's `initialize`.
    init: Option<Value>,
    /// The host's `initialize` waiting for the servers to start.
    initialize_pending: Option<HostRequest>,
    /// A modern host's `server/discover` waiting for the servers to start.
    discover_pending: Option<HostRequest>,
    /// The host speaks 2026-07-28.
    modern: bool,
    /// A modern host's `subscriptions/listen` request id (raw JSON).
    listen: Option<String>,
    /// The host declared form elicitation.
    elicitation: bool,
    /// The protocol version agreed with the host.
    protocol_version: String,
    /// A private-data tool has returned a result.
    tainted: bool,
    /// Tools approved for the rest of the session: (server index, tool name).
    remembered: HashSet<(usize, String)>,
}

/// One host request, kept whole so it can be forwarded later.
#[derive(Debug, Clone)]
struct HostRequest {
    line: String,
    /// Where the id and params sit in `line`.
    spans: frame::Spans,
    id: String,
    method: String,
    /// The server this request already restarted once, so it does not
    /// restart a server that fails at start-up again and again.
    restarted: Option<usize>,
    /// Attempts already made (for the retries of design §4.5).
    attempt: u32,
    /// The audit log's record of this call, once written.
    audit_seq: Option<u64>,
}

// === impl HostRequest ===

impl HostRequest {
    /// The params as JSON (`null` when absent or not JSON).
    fn params(&self) -> Value {
        self.spans
            .params(&self.line)
            .and_then(|raw| serde_json::from_str(raw).ok())
            .unwrap_or(Value::Null)
    }

    /// The request under another id.
    fn with_id(&self, new_id: &str) -> String {
        self.spans.with_id(&self.line, new_id)
    }

    /// The request under another id, with other params.
    fn with_id_and_params(&self, new_id: &str, new_params: &str) -> String {
        self.spans
            .with_id_and_params(&self.line, new_id, new_params)
    }
}

/// One upstream server.
#[derive(Debug)]
struct Upstream {
    name: String,
    config: ServerConfig,
    generation: u64,
    process: Option<Link>,
    phase: Phase,
    next_id: u64,
    /// The `initialize` result.
    info: Option<Value>,
    /// The current tool list, once listed.
    tools: Option<Vec<ToolEntry>>,
    /// Pages of a list in progress.
    listing: Option<Vec<Value>>,
    /// The session's pins, by tool name.
    pins: HashMap<String, PinDigest>,
    /// The definitions those pins were taken from, for the diff of a change.
    pinned_definitions: HashMap<String, hintgate_policy::tool::Tool>,
    /// The server answered `server/discover`: it speaks 2026-07-28.
    modern: bool,
    /// Since its start, the era was probed a second time after a modern
    /// refusal of `initialize` (at most once, so probing cannot loop).
    reprobed: bool,
    /// Its identity key in the store (command line or URL, capabilities,
    /// keyed hashes of secrets), set when it starts.
    key: Option<String>,
    /// Its identity for people: command line and what it resolved to.
    identity: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    Stopped,
    Initializing,
    Ready,
    Failed(String),
}

/// What a request sent upstream was for.
#[derive(Debug)]
enum PendingUp {
    /// The era probe: `server/discover`.
    Discover {
        deadline: (Instant, u64),
    },
    /// The era probe after its time ran out and `initialize` was sent: a
    /// slow 2026-07-28 server may still answer it (and then refuse the
    /// `initialize`), so a modern answer still wins.
    LateDiscover,
    Initialize {
        deadline: (Instant, u64),
    },
    /// A modern server's `subscriptions/listen`: open for the session.
    Listen,
    ListTools,
    Forward(Forward),
    Fanout {
        aggregate: u64,
        method: String,
    },
}

/// A host request forwarded upstream.
#[derive(Debug)]
struct Forward {
    request: HostRequest,
    deadline: (Instant, u64),
    /// For `tools/call`: the tool's own name and whether a failure may be retried.
    call: Option<CallInfo>,
}

#[derive(Debug, Clone)]
struct CallInfo {
    tool: String,
    retry_eligible: bool,
    /// When the call was sent, for the audit log's duration.
    started: Instant,
}

/// What a request sent to the host was for.
#[derive(Debug)]
enum PendingHost {
    Ask(Box<tools::Ask>),
    /// One question of a 2026-07-28 server, asked of a legacy host.
    Gather {
        gather: u64,
        key: String,
    },
    Forwarded {
        idx: usize,
        generation: u64,
        upstream_id: String,
    },
}

#[derive(Debug, Clone, Copy)]
enum Deadline {
    Up(usize, u64),
    Host(u64),
    Queue(u64),
}

/// Whether a server can take a request now.
enum Readiness {
    Ready,
    Pending,
    Failed(String),
}

// === impl Upstream ===

impl Upstream {
    fn new(config: ServerConfig) -> Self {
        Self {
            name: config.name.clone(),
            config,
            generation: 0,
            process: None,
            phase: Phase::Stopped,
            next_id: 0,
            info: None,
            tools: None,
            listing: None,
            pins: HashMap::new(),
            pinned_definitions: HashMap::new(),
            modern: false,
            reprobed: false,
            key: None,
            identity: None,
        }
    }

    fn capability(&self, name: &str) -> Option<&Value> {
        self.info.as_ref()?.get("capabilities")?.get(name)
    }

    fn send(&mut self, line: String) {
        if let Some(process) = &self.process {
            process.send(line);
        }
    }
}

// === impl Gateway ===

impl Gateway {
    fn handle(&mut self, event: Event) {
        match event {
            Event::Audited { token, result } => self.on_audited(token, result),
            Event::Answered { id, answer } => self.on_queue_answer(id, answer),
            Event::Host(HostEvent::Line(line)) => self.on_host_line(line),
            Event::Host(HostEvent::TooLong) => {
                tracing::warn!("the host sent a message over the size limit; it was dropped");
                self.send_host(frame::error_response("null", -32600, "message too large"));
            }
            Event::Host(HostEvent::Closed) => {
                tracing::debug!("the host closed the session");
                self.closed = true;
            }
            Event::Upstream {
                idx,
                generation,
                event,
            } => {
                let current = self
                    .upstreams
                    .get(idx)
                    .is_some_and(|up| up.generation == generation);
                if !current {
                    return;
                }
                match event {
                    UpstreamEvent::Line(line) => self.on_upstream_line(idx, line),
                    UpstreamEvent::Broken(reason) | UpstreamEvent::Closed(reason) => {
                        self.upstream_failed(idx, reason);
                    }
                }
            }
        }
    }

    fn observe(&self, observed: Observed) {
        if let Some(observer) = &self.observer {
            let _ = observer.send(observed);
        }
    }

    fn send_host(&self, line: String) {
        let _ = self.host_tx.send(line);
    }

    fn reply(&self, id: &str, result: &Value) {
        self.send_host(self.response_line(id, result));
    }

    /// A response line, with what a 2026-07-28 host requires of a result.
    fn response_line(&self, id: &str, result: &Value) -> String {
        if self.host.modern && result.is_object() && result.get("resultType").is_none() {
            let mut result = result.clone();
            self.modernize("", &mut result);
            return frame::response(id, &result);
        }
        frame::response(id, result)
    }

    fn reply_error(&self, id: &str, code: i64, message: &str) {
        self.send_host(frame::error_response(id, code, message));
    }

    fn add_deadline(&mut self, after: Duration, what: Deadline) -> (Instant, u64) {
        self.next_deadline += 1;
        let key = (Instant::now() + after, self.next_deadline);
        self.deadlines.insert(key, what);
        key
    }

    fn expire(&mut self, now: Instant) {
        while let Some(entry) = self.deadlines.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let what = entry.remove();
            match what {
                Deadline::Up(idx, id) => self.upstream_timed_out(idx, id),
                Deadline::Host(n) => self.host_timed_out(n),
                Deadline::Queue(id) => self.queue_timed_out(id),
            }
        }
    }

    // --- host side ---

    fn on_host_line(&mut self, line: String) {
        let parsed = match Message::parse(&line) {
            Ok(message) => message,
            Err(err) => {
                tracing::warn!("the host sent a line that is not JSON-RPC: {err}");
                self.reply_error("null", -32700, &format!("parse error: {err}"));
                return;
            }
        };
        match parsed.kind() {
            Kind::Request => {
                let id = parsed.id_text().to_owned();
                let method = parsed.method().to_owned();
                let spans = parsed.spans();
                drop(parsed);
                self.dispatch(HostRequest {
                    id,
                    method,
                    spans,
                    line,
                    restarted: None,
                    attempt: 0,
                    audit_seq: None,
                });
            }
            Kind::Notification => {
                let method = parsed.method().to_owned();
                let params: Value = parsed
                    .params
                    .and_then(|raw| serde_json::from_str(raw.get()).ok())
                    .unwrap_or(Value::Null);
                self.on_host_notification(&method, &params, &line);
            }
            Kind::Response => {
                let id = parsed.id_text().to_owned();
                let result: Option<Value> = parsed
                    .result
                    .and_then(|raw| serde_json::from_str(raw.get()).ok());
                let is_error = parsed.error.is_some();
                self.on_host_response(&id, result, is_error, &parsed);
            }
        }
    }

    fn dispatch(&mut self, request: HostRequest) {
        // A modern host names its protocol version on every request; one the
        // gateway does not speak is refused as the spec says.
        if self.host.modern
            && let Some(meta) = modern::modern_meta(&request)
            && !self.begin_modern(&request, &meta)
        {
            return;
        }
        match request.method.as_str() {
            "initialize" => self.on_initialize(request),
            "server/discover" => self.on_discover(request),
            "ping" => self.reply(&request.id, &json!({})),
            _ if self.host.init.is_none() => match modern::modern_meta(&request) {
                // A modern host's first request starts the session.
                Some(meta) => {
                    if self.begin_modern(&request, &meta) {
                        self.dispatch(request);
                    }
                }
                None => self.reply_error(&request.id, -32600, "send `initialize` first"),
            },
            "subscriptions/listen" if self.host.modern => self.on_listen(request),
            "tools/list" => self.on_tools_list(request),
            "tools/call" => self.on_tools_call(request),
            _ => self.on_other_request(request),
        }
    }

    /// Re-dispatches every waiting host request after a server's state changed.
    fn retry_waiting(&mut self) {
        let waiting = std::mem::take(&mut self.waiting);
        for request in waiting {
            self.dispatch(request);
        }
        self.finish_initialize();
    }

    fn on_initialize(&mut self, request: HostRequest) {
        let Ok(message) = Message::parse(&request.line) else {
            return;
        };
        let params: Value = message
            .params
            .and_then(|raw| serde_json::from_str(raw.get()).ok())
            .unwrap_or_else(|| json!({}));
        let asked = params
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        self.host.protocol_version = if LEGACY_VERSIONS.contains(&asked) {
            asked.to_owned()
        } else {
            LEGACY_VERSIONS
                .first()
                .copied()
                .unwrap_or("2025-11-25")
                .to_owned()
        };
        let elicitation = params.pointer("/capabilities/elicitation");
        // `elicitation: {}` means form mode; `{form: {}}` says so; `{url: {}}` alone does not.
        self.host.elicitation = elicitation.is_some_and(|caps| {
            caps.as_object()
                .is_some_and(|caps| caps.is_empty() || caps.contains_key("form"))
        });
        self.host.init = Some(params);
        self.host.initialize_pending = Some(request);
        for idx in 0..self.upstreams.len() {
            if matches!(
                self.upstreams.get(idx).map(|up| &up.phase),
                Some(Phase::Stopped)
            ) {
                self.start(idx);
            }
        }
        self.finish_initialize();
    }

    /// Answers the host's `initialize` once every server is ready or failed.
    fn finish_initialize(&mut self) {
        if self.host.initialize_pending.is_none() && self.host.discover_pending.is_none() {
            return;
        }
        let settled = self
            .upstreams
            .iter()
            .all(|up| matches!(up.phase, Phase::Ready | Phase::Failed(_)));
        if !settled {
            return;
        }
        if let Some(request) = self.host.discover_pending.take() {
            let mut result = self.discover_result();
            self.modernize("server/discover", &mut result);
            self.reply(&request.id, &result);
        }
        let Some(request) = self.host.initialize_pending.take() else {
            return;
        };
        if self.mode == Mode::Wrap
            && let Some(Phase::Failed(reason)) = self.upstreams.first().map(|up| &up.phase)
        {
            let name = self
                .upstreams
                .first()
                .map(|up| up.name.clone())
                .unwrap_or_default();
            self.reply_error(
                &request.id,
                -32603,
                &format!("server `{name}` did not start: {reason}"),
            );
            return;
        }
        let result = self.initialize_result();
        self.reply(&request.id, &result);
    }

    fn initialize_result(&self) -> Value {
        let version = self.host.protocol_version.clone();
        match self.mode {
            Mode::Wrap => {
                let info = self
                    .upstreams
                    .first()
                    .and_then(|up| up.info.clone())
                    .unwrap_or_else(|| json!({}));
                let mut capabilities = info
                    .get("capabilities")
                    .cloned()
                    .unwrap_or_else(|| json!({}));
                if let Some(caps) = capabilities.as_object_mut() {
                    // The gateway tells the host when what it may see changes.
                    caps.insert("tools".to_owned(), json!({"listChanged": true}));
                }
                let mut result = json!({
                    "protocolVersion": version,
                    "capabilities": capabilities,
                    "serverInfo": info.get("serverInfo").cloned().unwrap_or_else(|| json!({"name": "hintgate", "version": env!("CARGO_PKG_VERSION")})),
                });
                if let (Some(object), Some(instructions)) = (
                    result.as_object_mut(),
                    info.get("instructions").and_then(Value::as_str),
                ) {
                    object.insert(
                        "instructions".to_owned(),
                        Value::String(sanitize(instructions).text),
                    );
                }
                result
            }
            Mode::Gateway => {
                let mut capabilities = Map::new();
                capabilities.insert("tools".to_owned(), json!({"listChanged": true}));
                let any = |name: &str| {
                    self.upstreams
                        .iter()
                        .any(|up| up.capability(name).is_some())
                };
                let any_flag = |name: &str, flag: &str| {
                    self.upstreams.iter().any(|up| {
                        up.capability(name)
                            .and_then(|caps| caps.get(flag))
                            .and_then(Value::as_bool)
                            .unwrap_or(false)
                    })
                };
                if any("resources") {
                    capabilities.insert(
                        "resources".to_owned(),
                        json!({"subscribe": any_flag("resources", "subscribe"), "listChanged": any_flag("resources", "listChanged")}),
                    );
                }
                if any("prompts") {
                    capabilities.insert(
                        "prompts".to_owned(),
                        json!({"listChanged": any_flag("prompts", "listChanged")}),
                    );
                }
                if any("completions") {
                    capabilities.insert("completions".to_owned(), json!({}));
                }
                if any("logging") {
                    capabilities.insert("logging".to_owned(), json!({}));
                }
                let instructions: Vec<String> = self
                    .upstreams
                    .iter()
                    .filter_map(|up| {
                        let text = up.info.as_ref()?.get("instructions")?.as_str()?;
                        Some(format!("## {}\n{}", up.name, sanitize(text).text))
                    })
                    .collect();
                let mut result = json!({
                    "protocolVersion": version,
                    "capabilities": capabilities,
                    "serverInfo": {"name": "hintgate", "title": "hintgate gateway", "version": env!("CARGO_PKG_VERSION")},
                });
                if !instructions.is_empty()
                    && let Some(object) = result.as_object_mut()
                {
                    object.insert(
                        "instructions".to_owned(),
                        Value::String(instructions.join("\n\n")),
                    );
                }
                result
            }
        }
    }

    fn on_host_notification(&mut self, method: &str, params: &Value, line: &str) {
        match method {
            "notifications/initialized" => {}
            "notifications/cancelled" => {
                let Some(request_id) = params.get("requestId").map(Value::to_string) else {
                    return;
                };
                if self.host.listen.as_deref() == Some(request_id.as_str()) {
                    self.host.listen = None;
                    return;
                }
                self.cancel_host_request(&request_id);
            }
            _ => {
                // Roots changes and anything unknown go to every running
                // legacy server; 2026-07-28 servers take no such notifications.
                for up in &mut self.upstreams {
                    if up.phase == Phase::Ready && !up.modern {
                        up.send(line.to_owned());
                    }
                }
            }
        }
    }

    /// The host gave up on one of its requests: stop it wherever it is.
    fn cancel_host_request(&mut self, request_id: &str) {
        self.waiting.retain(|request| request.id != request_id);
        for id in self.queued_for(request_id) {
            self.withdraw_queued(id, "the host cancelled the call");
        }
        let asks: Vec<u64> = self
            .pending_host
            .iter()
            .filter_map(|(n, pending)| match pending {
                PendingHost::Ask(ask) if ask.request.id == request_id => Some(*n),
                _ => None,
            })
            .collect();
        for n in asks {
            if let Some(PendingHost::Ask(ask)) = self.pending_host.remove(&n) {
                self.deadlines.remove(&ask.deadline);
                self.send_host(frame::notification(
                    "notifications/cancelled",
                    &json!({"requestId": format!("hintgate-{n}"), "reason": "the host cancelled the call"}),
                ));
            }
        }
        if let Some((idx, up_id)) = self.host_to_up.remove(request_id) {
            if let Some(PendingUp::Forward(forward)) = self.pending_up.remove(&(idx, up_id)) {
                self.deadlines.remove(&forward.deadline);
            }
            if let Some(up) = self.upstreams.get_mut(idx) {
                up.send(frame::notification(
                    "notifications/cancelled",
                    &json!({"requestId": up_id, "reason": "the host cancelled the request"}),
                ));
            }
        }
    }

    fn on_host_response(
        &mut self,
        id: &str,
        result: Option<Value>,
        is_error: bool,
        message: &Message<'_>,
    ) {
        let Some(n) = id
            .trim_matches('"')
            .strip_prefix("hintgate-")
            .and_then(|n| n.parse::<u64>().ok())
        else {
            tracing::debug!("a response from the host to no request of ours: {id}");
            return;
        };
        match self.pending_host.remove(&n) {
            Some(PendingHost::Ask(ask)) => {
                self.deadlines.remove(&ask.deadline);
                self.on_ask_answer(*ask, result.as_ref(), is_error);
            }
            Some(PendingHost::Gather { gather, key }) => {
                let error: Option<Value> = message
                    .error
                    .and_then(|raw| serde_json::from_str(raw.get()).ok());
                self.on_gathered(gather, key, result, error);
            }
            Some(PendingHost::Forwarded {
                idx,
                generation,
                upstream_id,
            }) => {
                if let Some(up) = self.upstreams.get_mut(idx)
                    && up.generation == generation
                {
                    up.send(message.with_id(&upstream_id));
                }
            }
            None => tracing::debug!("a late or unknown response from the host: {id}"),
        }
    }

    fn host_timed_out(&mut self, n: u64) {
        if let Some(PendingHost::Ask(ask)) = self.pending_host.remove(&n) {
            self.send_host(frame::notification(
                "notifications/cancelled",
                &json!({"requestId": format!("hintgate-{n}"), "reason": "nobody answered in time"}),
            ));
            self.ask_timed_out(*ask);
        }
    }

    /// A fresh number for a request to the host (`"hintgate-N"`).
    fn next_host_id(&mut self) -> u64 {
        self.next_host_request += 1;
        self.next_host_request
    }

    /// Sends a request of the gateway's own to the host under number `n`.
    fn request_host(&mut self, n: u64, method: &str, params: &Value, pending: PendingHost) {
        self.send_host(frame::request(&format!("\"hintgate-{n}\""), method, params));
        self.pending_host.insert(n, pending);
    }

    // --- upstream side ---

    fn readiness(&mut self, idx: usize, request: &mut HostRequest) -> Readiness {
        let Some(up) = self.upstreams.get(idx) else {
            return Readiness::Failed("no such server".to_owned());
        };
        match &up.phase {
            Phase::Ready => Readiness::Ready,
            Phase::Initializing => Readiness::Pending,
            Phase::Stopped => {
                request.restarted = Some(idx);
                self.start_for(idx)
            }
            Phase::Failed(reason) => {
                if request.restarted == Some(idx) {
                    Readiness::Failed(reason.clone())
                } else {
                    // A server that failed is restarted on the next call.
                    request.restarted = Some(idx);
                    self.start_for(idx)
                }
            }
        }
    }

    /// Starts a server for a request. A start can fail at once (the program
    /// does not exist, a sandbox cannot be enforced); then no event will ever
    /// wake the request, so the failure is its answer now.
    fn start_for(&mut self, idx: usize) -> Readiness {
        self.start(idx);
        match self.upstreams.get(idx).map(|up| &up.phase) {
            Some(Phase::Failed(reason)) => Readiness::Failed(reason.clone()),
            Some(Phase::Ready) => Readiness::Ready,
            _ => Readiness::Pending,
        }
    }

    fn start(&mut self, idx: usize) {
        let max_line = self.max_line;
        let events = self.events_tx.clone();
        let Some(up) = self.upstreams.get_mut(idx) else {
            return;
        };
        up.generation += 1;
        up.process = None;
        up.info = None;
        up.tools = None;
        up.listing = None;
        // A sandbox the gateway cannot enforce must not be taken for one
        // (design §6): the server does not start unless the user accepted
        // that with `best_effort = true`. This version enforces none yet.
        match &up.config.sandbox {
            Some(sandbox) if !sandbox.best_effort => {
                let reason = format!(
                    "server `{}` asks for a sandbox, and this version of hintgate cannot enforce one yet; \
                     it is not started (set `best_effort = true` in its sandbox table to run it unconfined)",
                    up.name
                );
                tracing::error!(server.id = %up.name, "{reason}");
                up.phase = Phase::Failed(reason);
                return;
            }
            Some(_) => {
                tracing::warn!(server.id = %up.name, "sandbox not enforced (best_effort = true): the server runs unconfined");
            }
            None => {}
        }
        let spawned = match &up.config.transport {
            Transport::Stdio { command, args, env } => Process::spawn(
                &Spawn {
                    command,
                    args,
                    env,
                    name: &up.name,
                },
                idx,
                up.generation,
                max_line,
                events,
            )
            .map(Link::Stdio)
            .map_err(|err| err.to_string()),
            Transport::Http { url, headers } => {
                HttpLink::connect(url, headers, idx, up.generation, max_line, events)
                    .map(Link::Http)
                    .map_err(|err| err.to_string())
            }
        };
        match spawned {
            Ok(process) => {
                tracing::info!(server.id = %up.name, pid = ?process.pid(), "started");
                up.process = Some(process);
                up.phase = Phase::Initializing;
            }
            Err(reason) => {
                tracing::error!(server.id = %up.name, "{reason}");
                up.phase = Phase::Failed(reason);
                return;
            }
        }
        let capabilities = self
            .host
            .init
            .as_ref()
            .and_then(|init| init.get("capabilities"))
            .cloned()
            .unwrap_or_else(|| json!({}));
        let store = self.store.clone();
        if let Some(up) = self.upstreams.get_mut(idx) {
            up.modern = false;
            up.reprobed = false;
            let resolved = match &up.config.transport {
                Transport::Stdio { command, args, env } => {
                    let path = env
                        .get("PATH")
                        .map(std::ffi::OsString::from)
                        .or_else(|| std::env::var_os("PATH"));
                    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
                    Some(crate::identity::resolve(
                        command,
                        args,
                        path.as_deref(),
                        home.as_deref(),
                    ))
                }
                Transport::Http { .. } => None,
            };
            let described = resolved
                .as_ref()
                .and_then(crate::identity::Resolved::describe);
            up.identity = Some(match described {
                Some(resolved) => format!("{} -> {resolved}", up.config.identity()),
                None => up.config.identity(),
            });
            tracing::info!(server.id = %up.name, identity = %up.identity.as_deref().unwrap_or(""), "identity");
            let resolved = resolved
                .and_then(|resolved| serde_json::to_value(resolved).ok())
                .unwrap_or(Value::Null);
            up.key = store.map(|store| {
                hintgate_store::server_key(&up.config, &resolved, &capabilities, store.salt())
            });
        }
        // The era probe (spec: a result or a recognized modern error means
        // 2026-07-28; any other error or no answer means the legacy era).
        let timeout = PROBE_TIMEOUT.min(self.call_timeout);
        self.probe_era(idx, timeout);
    }

    /// Sends `server/discover`, waiting `timeout` for its answer.
    fn probe_era(&mut self, idx: usize, timeout: Duration) {
        let params = json!({"_meta": self.modern_meta_for_upstream()});
        let deadline = self.add_deadline(timeout, Deadline::Up(idx, 0));
        let id = self.request_up(idx, "server/discover", &params);
        self.deadlines.insert(deadline, Deadline::Up(idx, id));
        self.pending_up
            .insert((idx, id), PendingUp::Discover { deadline });
    }

    /// The legacy handshake, after the probe found no 2026-07-28 server.
    fn send_initialize(&mut self, idx: usize) {
        let host_init = self.host.init.clone().unwrap_or_else(|| json!({}));
        let asked = host_init
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        let version = if LEGACY_VERSIONS.contains(&asked) {
            asked
        } else {
            "2025-11-25"
        };
        let params = json!({
            "protocolVersion": version,
            "capabilities": host_init.get("capabilities").cloned().unwrap_or_else(|| json!({})),
            "clientInfo": host_init.get("clientInfo").cloned().unwrap_or_else(|| json!({"name": "hintgate", "version": env!("CARGO_PKG_VERSION")})),
        });
        let timeout = self.call_timeout;
        let deadline = self.add_deadline(timeout, Deadline::Up(idx, 0));
        let id = self.request_up(idx, "initialize", &params);
        // The deadline was registered before the id existed; point it at the id.
        self.deadlines.insert(deadline, Deadline::Up(idx, id));
        self.pending_up
            .insert((idx, id), PendingUp::Initialize { deadline });
    }

    /// Sends a request of the gateway's own upstream; returns its id.
    fn request_up(&mut self, idx: usize, method: &str, params: &Value) -> u64 {
        let modern = self.upstreams.get(idx).is_some_and(|up| up.modern);
        let params = if modern {
            self.with_modern_meta(params.clone())
        } else {
            params.clone()
        };
        let Some(up) = self.upstreams.get_mut(idx) else {
            return 0;
        };
        up.next_id += 1;
        let id = up.next_id;
        up.send(frame::request(&id.to_string(), method, &params));
        id
    }

    /// Sends a host request's `line` upstream under `id`, with its deadline,
    /// remembering where its answer goes (and, for cancellation, where it went).
    fn send_forward(
        &mut self,
        idx: usize,
        id: u64,
        request: HostRequest,
        call: Option<CallInfo>,
        line: String,
    ) {
        let timeout = self.call_timeout;
        let deadline = self.add_deadline(timeout, Deadline::Up(idx, id));
        self.host_to_up.insert(request.id.clone(), (idx, id));
        self.pending_up.insert(
            (idx, id),
            PendingUp::Forward(Forward {
                request,
                deadline,
                call,
            }),
        );
        if let Some(up) = self.upstreams.get_mut(idx) {
            up.send(line);
        }
    }

    fn next_up_id(&mut self, idx: usize) -> u64 {
        self.upstreams.get_mut(idx).map_or(0, |up| {
            up.next_id += 1;
            up.next_id
        })
    }

    fn on_upstream_line(&mut self, idx: usize, line: String) {
        let message = match Message::parse(&line) {
            Ok(message) => message,
            Err(err) => {
                let preview: String = line.chars().take(80).collect();
                self.upstream_failed(
                    idx,
                    format!("wrote something that is not JSON-RPC ({err}): `{preview}`"),
                );
                return;
            }
        };
        match message.kind() {
            Kind::Response => {
                let Some(id) = message.id.and_then(|raw| raw.get().parse::<u64>().ok()) else {
                    tracing::debug!("a response upstream with an id we never sent");
                    return;
                };
                match self.pending_up.remove(&(idx, id)) {
                    Some(pending) => self.on_upstream_response(idx, id, pending, &message),
                    None => tracing::debug!("a late or unknown response upstream: {id}"),
                }
            }
            Kind::Request if self.host.modern && self.relay_to_modern_host(idx, &message) => {}
            Kind::Request if self.host.modern => {
                // A 2026-07-28 host takes no requests from a server, and no
                // single call of the host can carry this one.
                let text = "the host speaks 2026-07-28, which takes no requests from a server; this gateway cannot relay them yet";
                if let Some(up) = self.upstreams.get_mut(idx) {
                    up.send(frame::error_response(message.id_text(), -32601, text));
                }
            }
            Kind::Request => {
                // A server-to-host request (elicitation, sampling, roots, ping):
                // to the host under an id of ours, and the answer back.
                let generation = self.upstreams.get(idx).map_or(0, |up| up.generation);
                let n = self.next_host_id();
                self.send_host(message.with_id(&format!("\"hintgate-{n}\"")));
                self.pending_host.insert(
                    n,
                    PendingHost::Forwarded {
                        idx,
                        generation,
                        upstream_id: message.id_text().to_owned(),
                    },
                );
            }
            Kind::Notification => self.on_upstream_notification(idx, &message),
        }
    }

    fn on_upstream_notification(&mut self, idx: usize, message: &Message<'_>) {
        match message.method() {
            "notifications/tools/list_changed" => {
                if let Some(up) = self.upstreams.get_mut(idx) {
                    up.tools = None;
                }
                // List again now, so a changed definition is caught and held
                // even if the host never lists again.
                self.list_tools(idx);
                if self.host.modern {
                    self.notify_modern("notifications/tools/list_changed");
                } else {
                    self.send_host(message.line().to_owned());
                }
            }
            // A 2026-07-28 server confirming the gateway's own listen stream.
            "notifications/subscriptions/acknowledged" => {}
            "notifications/cancelled" => {
                let params: Value = message
                    .params
                    .and_then(|raw| serde_json::from_str(raw.get()).ok())
                    .unwrap_or(Value::Null);
                let request_id = params
                    .get("requestId")
                    .map(Value::to_string)
                    .unwrap_or_default();
                let found = self
                    .pending_host
                    .iter()
                    .find_map(|(n, pending)| match pending {
                        PendingHost::Forwarded {
                            idx: owner,
                            upstream_id,
                            ..
                        } if *owner == idx && *upstream_id == request_id => Some(*n),
                        _ => None,
                    });
                if let Some(n) = found {
                    self.pending_host.remove(&n);
                    let mut params = params;
                    if let Some(object) = params.as_object_mut() {
                        object.insert(
                            "requestId".to_owned(),
                            Value::String(format!("hintgate-{n}")),
                        );
                    }
                    self.send_host(message.with_params(&params.to_string()));
                }
            }
            method @ ("notifications/prompts/list_changed"
            | "notifications/resources/list_changed")
                if self.host.modern =>
            {
                self.notify_modern(method);
            }
            _ => self.send_host(message.line().to_owned()),
        }
    }

    fn on_upstream_response(
        &mut self,
        idx: usize,
        id: u64,
        pending: PendingUp,
        message: &Message<'_>,
    ) {
        match pending {
            PendingUp::Discover { deadline } => {
                self.deadlines.remove(&deadline);
                self.on_discovered(idx, message);
            }
            PendingUp::LateDiscover => self.on_late_discovered(idx, message),
            PendingUp::Listen => {}
            PendingUp::Initialize { deadline } => {
                self.deadlines.remove(&deadline);
                self.on_initialized(idx, message);
            }
            PendingUp::ListTools => self.on_tools_page(idx, message),
            PendingUp::Forward(forward) => {
                self.deadlines.remove(&forward.deadline);
                self.host_to_up.remove(&forward.request.id);
                if !self.host.modern
                    && let Some(result) = message
                        .result
                        .filter(|raw| raw.get().contains("input_required"))
                        .and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok())
                        .filter(|result| {
                            result.get("resultType").and_then(Value::as_str)
                                == Some("input_required")
                        })
                {
                    self.gather_for_legacy_host(idx, forward, &result);
                    return;
                }
                match &forward.call {
                    Some(call) => self.on_call_result(idx, call.clone(), &forward.request, message),
                    None => self.send_host(self.host_response(
                        message,
                        &forward.request.id,
                        &forward.request.method,
                    )),
                }
            }
            PendingUp::Fanout { aggregate, method } => {
                self.on_fanout_page(idx, id, aggregate, &method, message)
            }
        }
    }

    fn on_initialized(&mut self, idx: usize, message: &Message<'_>) {
        let result: Option<Value> = message
            .result
            .and_then(|raw| serde_json::from_str(raw.get()).ok());
        let Some(up) = self.upstreams.get_mut(idx) else {
            return;
        };
        match result {
            Some(info) => {
                tracing::info!(server.id = %up.name, version = ?info.get("protocolVersion"), "initialized");
                up.info = Some(info);
                up.phase = Phase::Ready;
                up.send(frame::notification("notifications/initialized", &json!({})));
                if self.pin_instructions(idx) {
                    self.list_tools(idx);
                }
            }
            None => {
                let error = message
                    .error
                    .map_or("no result".to_owned(), |raw| raw.get().to_owned());
                // A busy 2026-07-28 server may answer the era probe only
                // after it timed out, and then refuse `initialize` with the
                // modern "unsupported protocol version" error, a recognized
                // modern error: probe once more, with the call timeout.
                let modern_refusal = serde_json::from_str::<Value>(&error)
                    .ok()
                    .and_then(|error| error.get("code").and_then(Value::as_i64))
                    == Some(-32022);
                if modern_refusal && !up.reprobed {
                    up.reprobed = true;
                    tracing::debug!(server.id = %up.name, "refused `initialize` the 2026-07-28 way: probing its era again");
                    let timeout = self.call_timeout;
                    self.probe_era(idx, timeout);
                    return;
                }
                self.upstream_failed(idx, format!("refused to initialize: {error}"));
            }
        }
        self.retry_waiting();
    }

    /// A server crashed, hung at start-up or broke the protocol: stop it,
    /// fail or retry what it had in flight, and restart it on the next call.
    fn upstream_failed(&mut self, idx: usize, reason: String) {
        let Some(up) = self.upstreams.get_mut(idx) else {
            return;
        };
        if matches!(up.phase, Phase::Failed(_) | Phase::Stopped) && up.process.is_none() {
            return;
        }
        tracing::error!(server.id = %up.name, "{reason}");
        up.phase = Phase::Failed(reason.clone());
        up.process = None;
        up.tools = None;
        up.listing = None;
        let name = up.name.clone();
        let keys: Vec<(usize, u64)> = self
            .pending_up
            .keys()
            .filter(|(owner, _)| *owner == idx)
            .copied()
            .collect();
        for key in keys {
            let Some(pending) = self.pending_up.remove(&key) else {
                continue;
            };
            match pending {
                PendingUp::Initialize { deadline } | PendingUp::Discover { deadline } => {
                    self.deadlines.remove(&deadline);
                }
                PendingUp::ListTools | PendingUp::Listen | PendingUp::LateDiscover => {}
                PendingUp::Forward(forward) => {
                    self.deadlines.remove(&forward.deadline);
                    self.host_to_up.remove(&forward.request.id);
                    self.fail_forward(
                        forward,
                        &format!("server `{name}` stopped before answering: {reason}"),
                    );
                }
                PendingUp::Fanout { aggregate, .. } => self.fanout_done(aggregate, idx, None),
            }
        }
        self.pending_host.retain(|_, pending| !matches!(pending, PendingHost::Forwarded { idx: owner, .. } if *owner == idx));
        self.retry_waiting();
    }

    fn upstream_timed_out(&mut self, idx: usize, id: u64) {
        let name = self
            .upstreams
            .get(idx)
            .map(|up| up.name.clone())
            .unwrap_or_default();
        let timeout = self.call_timeout.as_secs();
        match self.pending_up.remove(&(idx, id)) {
            Some(PendingUp::Discover { .. }) => {
                tracing::debug!(server.id = %name, "no answer to `server/discover` in time: trying `initialize`");
                // A slow modern server may still answer the probe.
                self.pending_up.insert((idx, id), PendingUp::LateDiscover);
                self.send_initialize(idx);
            }
            Some(PendingUp::Initialize { .. }) => {
                self.upstream_failed(
                    idx,
                    format!("did not answer `initialize` within {timeout} s"),
                );
            }
            Some(PendingUp::Forward(forward)) => {
                self.host_to_up.remove(&forward.request.id);
                if let Some(up) = self.upstreams.get_mut(idx) {
                    up.send(frame::notification(
                        "notifications/cancelled",
                        &json!({"requestId": id, "reason": "timed out"}),
                    ));
                }
                self.fail_forward(
                    forward,
                    &format!("server `{name}` did not answer within {timeout} s"),
                );
            }
            Some(other) => {
                // Internal requests have no deadline; put it back untouched.
                self.pending_up.insert((idx, id), other);
            }
            None => {}
        }
    }

    /// A forwarded request failed (timeout, crash): retry it when design
    /// §4.5 allows, otherwise tell the host.
    fn fail_forward(&mut self, forward: Forward, reason: &str) {
        match &forward.call {
            Some(call) if call.retry_eligible && forward.request.attempt == 0 => {
                tracing::warn!(tool.name = %call.tool, "{reason}; retrying once (trusted server, read-only or idempotent tool)");
                self.audit_outcome(&forward.request, call, "failed, retried");
                let mut request = forward.request;
                request.attempt = 1;
                request.restarted = None;
                self.waiting.push(request);
            }
            Some(call) => {
                let why = if call.retry_eligible {
                    "it already failed once".to_owned()
                } else {
                    "hintgate retries only read-only or idempotent tools of trusted servers"
                        .to_owned()
                };
                let text = format!("{reason}. The call was not retried: {why}.");
                let line = self.response_line(&forward.request.id, &tools::error_result(&text));
                self.end_with_outcome(&forward.request, call, "failed", line);
            }
            None => self.reply_error(&forward.request.id, -32603, reason),
        }
    }

    /// Stops every server: closes its input, waits a moment, then kills it.
    async fn shutdown(&mut self) {
        // Calls still waiting for a person are withdrawn and recorded.
        let queued: Vec<u64> = self.queued.keys().copied().collect();
        for id in queued {
            self.withdraw_queued(id, "the session ended before anyone answered");
        }
        // Whatever the audit log still holds is written before the gateway ends.
        if let Some(audit) = self.audit.take() {
            audit.finish();
        }
        let processes: Vec<Link> = self
            .upstreams
            .iter_mut()
            .filter_map(|up| up.process.take())
            .collect();
        let stops = processes.into_iter().map(Link::stop);
        for stop in stops {
            stop.await;
        }
    }

    fn prefixed(&self, idx: usize, name: &str) -> String {
        match self.mode {
            Mode::Wrap => name.to_owned(),
            Mode::Gateway => {
                let server = self.upstreams.get(idx).map_or("", |up| up.name.as_str());
                format!("{server}{}{name}", self.separator)
            }
        }
    }

    /// Which server a host-side (possibly prefixed) name belongs to, and the
    /// name the server knows it by.
    fn resolve(&self, name: &str) -> Option<(usize, String)> {
        match self.mode {
            Mode::Wrap => Some((0, name.to_owned())),
            Mode::Gateway => {
                let (server, rest) = name.split_once(self.separator.as_str())?;
                let idx = self.upstreams.iter().position(|up| up.name == server)?;
                Some((idx, rest.to_owned()))
            }
        }
    }
}
