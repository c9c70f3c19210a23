//! The gateway in-process: a scripted host and scripted servers over
//! in-memory pipes, and a store the test can make fail or stall.
//!
//! The gateway runs as in `hintgate run`: on a thread of its own, in a
//! current-thread runtime. The host and the servers run on the test's
//! runtime, so they see what the gateway sends as it sends it, and a store
//! that stalls the gateway's thread does not stall them. Every observable
//! step (a server receiving a line, the store appending records) goes on
//! one [`Timeline`], so a test can check their order.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use hintgate_policy::config::{ServerConfig, ValidConfig, parse_str};
use hintgate_policy::decide::Policy;
use hintgate_proxy::{Connector, Gauges, Link, LinkTarget, Mode, QueueGauge, Settings};
use hintgate_store::{
    Answer, Answered, Approval, ApprovalQueue, AuditLog, Entry, MemoryStore, NewEntry, NewPending,
    Pending, Pin, PinStore, QueueWatch, Rekeyed, Seen, Store, StoreError,
};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::mpsc;

/// How long any one wait may take before the test fails instead of hanging.
/// It bounds a broken test; no test asserts on time.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// The gateway's `call_timeout_s` and `ask_timeout_s` in [`Setup::wrap`]:
/// longer than any wait of the test's ([`PATIENCE`]), so a call that is
/// answered is never failed for being slow on a busy machine, and a broken
/// test fails on the harness's bound first.
pub const CALL_PATIENCE_S: u32 = 30;

/// What happened, in order, across the gateway, the store and the servers.
#[derive(Debug, Default, Clone)]
pub struct Timeline(Arc<Mutex<Vec<String>>>);

impl Timeline {
    pub fn push(&self, event: String) {
        self.0.lock().unwrap().push(event);
    }

    pub fn events(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    /// The position of the first event that contains `needle`.
    pub fn position(&self, needle: &str) -> Option<usize> {
        self.events()
            .iter()
            .position(|event| event.contains(needle))
    }
}

/// How a scripted server answers a call to one of its tools.
#[derive(Debug, Clone)]
pub enum Behaviour {
    /// A text result with the arguments as the server read them.
    Echo,
    /// This exact result (JSON text, written as is).
    Raw(String),
    /// No answer, ever.
    Hang,
    /// No answer the first time (in each start of the server), then `Echo`.
    HangOnce,
    /// These lines first (notifications, requests of its own), then `Echo`.
    LinesThenEcho(Vec<String>),
    /// No answer, and the server never reads its input again (it stays
    /// up, and still sends what the test pushes).
    StopReading,
}

/// One scripted server.
#[derive(Debug, Clone)]
pub struct ServerScript {
    /// Its tools, as listed.
    pub tools: Vec<Value>,
    /// How each tool answers (by name; `Echo` when absent).
    pub behaviour: HashMap<String, Behaviour>,
    /// It never answers `tools/list`.
    pub silent_list: bool,
    /// It never answers these methods.
    pub silent: Vec<String>,
    /// Every page of its lists (tools, resources, templates, prompts)
    /// names a next one.
    pub endless_pages: bool,
    /// Every answer to `tools/list` comes after a `list_changed`.
    pub changes_on_list: bool,
    /// It speaks 2026-07-28: it answers the era probe.
    pub modern: bool,
    /// The resources `resources/list` gives (a `uri` containing `missing`
    /// is answered with an error when read).
    pub resources: Vec<Value>,
    /// The resource templates `resources/templates/list` gives.
    pub templates: Vec<Value>,
    /// The prompts `prompts/list` gives.
    pub prompts: Vec<Value>,
    /// How many bytes the pipe between the gateway and the server holds
    /// each way (1 MiB unless set).
    pub pipe_bytes: usize,
    /// Each `resources/list` of this start lists this many resources of its
    /// own, new each time: `rot://LISTING/N` (LISTING counts from 1).
    pub rotating_resources: usize,
    /// These methods are answered with this result (JSON text, written as
    /// is), whatever they ask.
    pub answers: HashMap<String, String>,
    /// Its lists of resources, templates and prompts give one entry a page
    /// (the cursor is the entry's place).
    pub one_per_page: bool,
}

impl ServerScript {
    pub fn with_tools(tools: Vec<Value>) -> Self {
        Self {
            tools,
            behaviour: HashMap::new(),
            silent_list: false,
            silent: Vec::new(),
            endless_pages: false,
            changes_on_list: false,
            modern: false,
            resources: Vec::new(),
            templates: Vec::new(),
            prompts: Vec::new(),
            pipe_bytes: 1 << 20,
            rotating_resources: 0,
            answers: HashMap::new(),
            one_per_page: false,
        }
    }

    pub fn answering(mut self, tool: &str, behaviour: Behaviour) -> Self {
        self.behaviour.insert(tool.to_owned(), behaviour);
        self
    }
}

/// A tool definition with these hints.
pub fn tool(name: &str, read_only: bool) -> Value {
    json!({
        "name": name,
        "description": format!("the {name} tool"),
        "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": read_only, "destructiveHint": !read_only, "idempotentHint": read_only, "openWorldHint": false},
    })
}

/// The connector of the tests: each start of a server is a scripted server
/// task on the test's runtime, connected by in-memory pipes.
#[derive(Debug)]
pub struct ScriptedConnector {
    scripts: HashMap<String, ServerScript>,
    runtime: tokio::runtime::Handle,
    timeline: Timeline,
    /// Every line each server received, by server name.
    pub received: Arc<Mutex<BTreeMap<String, Vec<String>>>>,
    /// How many times each server was started.
    pub starts: Arc<Mutex<BTreeMap<String, usize>>>,
    /// Each server's tools, when a test changed them.
    pub tools_now: Arc<Mutex<BTreeMap<String, Vec<Value>>>>,
    /// Lines each server's current start sends of its own accord.
    pub pushes: Arc<Mutex<BTreeMap<String, mpsc::UnboundedSender<String>>>>,
    /// What waits for each start of each server to read it, as the gateway
    /// counts it.
    pub queues: Arc<Mutex<BTreeMap<String, Vec<Arc<QueueGauge>>>>>,
    /// How many pushed lines the servers have written so far.
    pub pushed: Arc<std::sync::atomic::AtomicUsize>,
}

impl Connector for ScriptedConnector {
    fn connect(&self, server: &ServerConfig, target: LinkTarget) -> Result<Link, String> {
        // A server's read-only instance has a script of its own, under
        // `NAME/COMMAND` (its command is what its table overrides).
        let own = match &server.transport {
            hintgate_policy::config::Transport::Stdio { command, .. } => {
                Some(format!("{}/{command}", server.name))
            }
            hintgate_policy::config::Transport::Http { .. } => None,
        }
        .filter(|key| self.scripts.contains_key(key));
        // A server whose command is `missing` does not start.
        if matches!(&server.transport, hintgate_policy::config::Transport::Stdio { command, .. } if command == "missing")
        {
            return Err("cannot start `missing`: no such program".to_owned());
        }
        let key = own.unwrap_or_else(|| server.name.clone());
        let server = &ServerConfig {
            name: key.clone(),
            ..server.clone()
        };
        let script = self
            .scripts
            .get(&server.name)
            .cloned()
            .ok_or_else(|| format!("no script for `{}`", server.name))?;
        *self
            .starts
            .lock()
            .unwrap()
            .entry(server.name.clone())
            .or_default() += 1;
        self.queues
            .lock()
            .unwrap()
            .entry(server.name.clone())
            .or_default()
            .push(Arc::clone(&target.queue));
        let (gateway_end, server_end) = tokio::io::duplex(script.pipe_bytes);
        let (from_server, to_server) = tokio::io::split(gateway_end);
        let (push, pushed) = mpsc::unbounded_channel();
        self.pushes
            .lock()
            .unwrap()
            .insert(server.name.clone(), push);
        self.runtime.spawn(serve(
            Served {
                name: server.name.clone(),
                script,
                timeline: self.timeline.clone(),
                received: Arc::clone(&self.received),
                tools_now: Arc::clone(&self.tools_now),
                stopped: std::sync::atomic::AtomicBool::new(false),
                pushed: Arc::clone(&self.pushed),
                listings: std::sync::atomic::AtomicUsize::new(0),
            },
            server_end,
            pushed,
        ));
        Ok(Link::streams(from_server, to_server, target))
    }
}

/// What [`Harness::crash_server`] pushes: the server ends there.
const CRASH: &str = "\u{0}crash";

/// One start of a scripted server, and what it shares with the test.
struct Served {
    name: String,
    script: ServerScript,
    timeline: Timeline,
    received: Arc<Mutex<BTreeMap<String, Vec<String>>>>,
    tools_now: Arc<Mutex<BTreeMap<String, Vec<Value>>>>,
    /// It stopped reading its input (`Behaviour::StopReading`).
    stopped: std::sync::atomic::AtomicBool,
    /// How many pushed lines the servers have written so far.
    pushed: Arc<std::sync::atomic::AtomicUsize>,
    /// How many times this start listed its resources.
    listings: std::sync::atomic::AtomicUsize,
}

async fn serve(served: Served, end: DuplexStream, mut pushed: mpsc::UnboundedReceiver<String>) {
    let (reader, mut writer) = tokio::io::split(end);
    let mut lines = BufReader::new(reader).lines();
    let mut hung_once = std::collections::HashSet::new();
    loop {
        if served.stopped.load(std::sync::atomic::Ordering::SeqCst) {
            // Its input is never read again, but stays open.
            match pushed.recv().await {
                Some(push) => {
                    write(&mut writer, &push).await;
                    served
                        .pushed
                        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                None => std::future::pending().await,
            }
            continue;
        }
        let line = tokio::select! {
            line = lines.next_line() => match line {
                Ok(Some(line)) => line,
                _ => return,
            },
            Some(push) = pushed.recv() => {
                if push == CRASH {
                    // Its output closes, as a process's does when it dies.
                    return;
                }
                write(&mut writer, &push).await;
                served.pushed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                continue;
            }
        };
        if let Some(reply) = served.answer(&line, &mut hung_once) {
            write(&mut writer, &reply).await;
        }
    }
}

impl Served {
    /// The answer to one line the gateway sent, if any.
    fn answer(
        &self,
        line: &str,
        hung_once: &mut std::collections::HashSet<String>,
    ) -> Option<String> {
        let name = &self.name;
        let script = &self.script;
        self.received
            .lock()
            .unwrap()
            .entry(name.clone())
            .or_default()
            .push(line.to_owned());
        let message: Value = serde_json::from_str(line).unwrap_or(Value::Null);
        let method = message["method"].as_str().unwrap_or("").to_owned();
        if method == "tools/call" {
            self.timeline.push(format!(
                "server {name} received call {}",
                message["params"]["arguments"]["n"]
            ));
        }
        let id = message.get("id").cloned()?;
        if message.get("method").is_none() || script.silent.contains(&method) {
            return None;
        }
        if let Some(result) = script.answers.get(&method) {
            return Some(format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{result}}}"
            ));
        }
        let result = match method.as_str() {
            "server/discover" if script.modern => json!({
                "supportedVersions": ["2026-07-28"],
                "capabilities": {"tools": {"listChanged": true}, "resources": {}, "prompts": {}},
                "serverInfo": {"name": name, "version": "1"},
            })
            .to_string(),
            "server/discover" => {
                let reply = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "method not found"}});
                return Some(reply.to_string());
            }
            // Acknowledged with what it asked for, as the SDK's servers do;
            // the stream stays open: its notifications come when pushed.
            "subscriptions/listen" => {
                let ack = json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                    "params": {"notifications": message["params"]["notifications"],
                               "_meta": {"io.modelcontextprotocol/subscriptionId": id}}});
                return Some(ack.to_string());
            }
            "initialize" => json!({
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {"listChanged": true}, "resources": {"subscribe": true}, "prompts": {}},
                "serverInfo": {"name": name, "version": "1"},
            })
            .to_string(),
            "tools/list" if script.silent_list => return None,
            "tools/list" => {
                let tools = self
                    .tools_now
                    .lock()
                    .unwrap()
                    .get(name)
                    .cloned()
                    .unwrap_or_else(|| script.tools.clone());
                let mut page = json!({"tools": tools});
                if script.endless_pages {
                    page["nextCursor"] = json!("more");
                }
                if script.changes_on_list {
                    return Some(format!(
                        "{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}}\n{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{page}}}"
                    ));
                }
                page.to_string()
            }
            list @ ("resources/list" | "resources/templates/list" | "prompts/list") => {
                let rotating: Vec<Value>;
                let (key, items) = match list {
                    "resources/list" if script.rotating_resources > 0 => {
                        let listing = self
                            .listings
                            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                            + 1;
                        rotating = (0..script.rotating_resources)
                            .map(|n| json!({"uri": format!("rot://{listing}/{n}"), "name": format!("r{n}")}))
                            .collect();
                        ("resources", &rotating)
                    }
                    "resources/list" => ("resources", &script.resources),
                    "resources/templates/list" => ("resourceTemplates", &script.templates),
                    _ => ("prompts", &script.prompts),
                };
                let mut page = json!({ key: items });
                if script.endless_pages {
                    page["nextCursor"] = json!("more");
                }
                if script.one_per_page {
                    let at: usize = message["params"]["cursor"]
                        .as_str()
                        .and_then(|cursor| cursor.parse().ok())
                        .unwrap_or(0);
                    page = json!({ key: items.get(at).into_iter().collect::<Vec<_>>() });
                    if at + 1 < items.len() {
                        page["nextCursor"] = json!((at + 1).to_string());
                    }
                }
                page.to_string()
            }
            "resources/read" => {
                let uri = message["params"]["uri"].as_str().unwrap_or("");
                if uri.contains("missing") {
                    let reply = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32002, "message": "resource not found"}});
                    return Some(reply.to_string());
                }
                json!({"contents": [{"uri": uri, "text": format!("the private contents of {uri}")}]})
                    .to_string()
            }
            "prompts/get" => {
                let prompt = message["params"]["name"].as_str().unwrap_or("");
                json!({"messages": [{"role": "user", "content": {"type": "text", "text": format!("{name} filled in prompt {prompt} with private data")}}]})
                    .to_string()
            }
            "tools/call" => {
                let tool = message["params"]["name"].as_str().unwrap_or("");
                match script.behaviour.get(tool).unwrap_or(&Behaviour::Echo) {
                    Behaviour::Hang => return None,
                    Behaviour::StopReading => {
                        self.stopped.store(true, std::sync::atomic::Ordering::SeqCst);
                        return None;
                    }
                    Behaviour::HangOnce if hung_once.insert(tool.to_owned()) => return None,
                    Behaviour::Raw(result) => result.clone(),
                    Behaviour::Echo | Behaviour::HangOnce => {
                        // The arguments exactly as they arrived, as text.
                        let raw = raw_arguments(line);
                        json!({"content": [{"type": "text", "text": raw}]}).to_string()
                    }
                    Behaviour::LinesThenEcho(lines) => {
                        let raw = raw_arguments(line);
                        let result = json!({"content": [{"type": "text", "text": raw}]});
                        let mut out = lines.join("\n");
                        out.push_str(&format!(
                            "\n{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{result}}}"
                        ));
                        return Some(out);
                    }
                }
            }
            _ => json!({}).to_string(),
        };
        Some(format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{result}}}"
        ))
    }
}

/// The `arguments` of a call line as their bytes.
pub fn raw_arguments(line: &str) -> String {
    #[derive(serde::Deserialize)]
    struct Params<'a> {
        #[serde(borrow)]
        arguments: Option<&'a serde_json::value::RawValue>,
    }
    #[derive(serde::Deserialize)]
    struct Call<'a> {
        #[serde(borrow)]
        params: Params<'a>,
    }
    serde_json::from_str::<Call<'_>>(line)
        .ok()
        .and_then(|call| call.params.arguments.map(|raw| raw.get().to_owned()))
        .unwrap_or_default()
}

async fn write(writer: &mut (impl AsyncWriteExt + Unpin), line: &str) {
    let _ = writer.write_all(line.as_bytes()).await;
    let _ = writer.write_all(b"\n").await;
    let _ = writer.flush().await;
}

/// What the store does when the gateway appends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendMode {
    /// Appends.
    Normal,
    /// Refuses every append.
    Fail,
    /// Blocks until [`TestStore::release`].
    Stall,
}

/// A memory store whose appends the test can fail or stall, and which
/// puts every append on the timeline.
#[derive(Debug)]
pub struct TestStore {
    pub inner: MemoryStore,
    mode: Mutex<AppendMode>,
    stalled: Condvar,
    /// How many appends are blocked right now.
    pub waiting: Mutex<usize>,
    /// Each append that was made: the `n` argument of each call record in it.
    pub commits: Mutex<Vec<Vec<Value>>>,
    /// Putting a call in the approval queue panics, as a broken store
    /// might: a fatal error in the gateway's loop.
    pub panic_on_enqueue: std::sync::atomic::AtomicBool,
    timeline: Timeline,
    /// Appends off the caller's thread, as PostgreSQL's store does (set
    /// before the gateway starts: it asks once).
    pub later: std::sync::atomic::AtomicBool,
    /// Itself, for the thread of an append made off the caller's.
    me: std::sync::Weak<TestStore>,
}

impl TestStore {
    pub fn new(timeline: Timeline) -> Self {
        Self {
            inner: MemoryStore::default(),
            mode: Mutex::new(AppendMode::Normal),
            stalled: Condvar::new(),
            waiting: Mutex::new(0),
            commits: Mutex::default(),
            panic_on_enqueue: std::sync::atomic::AtomicBool::new(false),
            timeline,
            later: std::sync::atomic::AtomicBool::new(false),
            me: std::sync::Weak::new(),
        }
    }

    /// A store that appends off the caller's thread, on a thread of its
    /// own per append, as PostgreSQL's store does on its connection's.
    pub fn appending_later(timeline: Timeline) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            me: me.clone(),
            later: std::sync::atomic::AtomicBool::new(true),
            ..Self::new(timeline)
        })
    }

    pub fn set_mode(&self, mode: AppendMode) {
        *self.mode.lock().unwrap() = mode;
        self.stalled.notify_all();
    }

    /// Lets stalled appends go on, and later ones append at once.
    pub fn release(&self) {
        self.set_mode(AppendMode::Normal);
    }

    /// The bodies of the call records, in order.
    pub fn call_records(&self) -> Vec<Value> {
        self.records()
            .into_iter()
            .filter(|entry| entry.kind == Some(hintgate_store::EntryKind::Call))
            .map(|entry| entry.body)
            .collect()
    }

    /// Every record, parsed, the outcomes of several calls one per call.
    pub fn records(&self) -> Vec<Entry> {
        self.inner
            .entries(0, 100_000)
            .unwrap()
            .into_iter()
            .flat_map(Entry::expand)
            .collect()
    }
}

impl PinStore for TestStore {
    fn pin(&self, server_key: &str, tool: &str) -> Result<Option<Pin>, StoreError> {
        self.inner.pin(server_key, tool)
    }
    fn put_pin(&self, pin: &Pin) -> Result<(), StoreError> {
        self.inner.put_pin(pin)
    }
    fn put_pins(&self, pins: &[Pin]) -> Result<(), StoreError> {
        self.inner.put_pins(pins)
    }
    fn see(&self, server_key: &str, tool: &str, seen: &Seen) -> Result<(), StoreError> {
        self.inner.see(server_key, tool, seen)
    }
    fn clear_seen(&self, server_key: &str, tool: &str) -> Result<(), StoreError> {
        self.inner.clear_seen(server_key, tool)
    }
    fn pins(&self) -> Result<Vec<Pin>, StoreError> {
        self.inner.pins()
    }
    fn pins_of(&self, server_key: &str) -> Result<Vec<Pin>, StoreError> {
        self.inner.pins_of(server_key)
    }
    fn approvals_of(&self, server_key: &str) -> Result<Vec<Approval>, StoreError> {
        self.inner.approvals_of(server_key)
    }
    fn rekey(&self, server: &str, to_key: &str) -> Result<Option<Rekeyed>, StoreError> {
        self.inner.rekey(server, to_key)
    }
    fn revoke(&self, server_key: &str, tool: &str) -> Result<bool, StoreError> {
        self.inner.revoke(server_key, tool)
    }
    fn approve_always(&self, server_key: &str, tool: &str, digest: &str) -> Result<(), StoreError> {
        self.inner.approve_always(server_key, tool, digest)
    }
    fn approved_always(
        &self,
        server_key: &str,
        tool: &str,
        digest: &str,
    ) -> Result<bool, StoreError> {
        self.inner.approved_always(server_key, tool, digest)
    }
    fn salt(&self) -> &[u8] {
        self.inner.salt()
    }
}

impl AuditLog for TestStore {
    fn appends_later(&self) -> bool {
        self.later.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn append_later(&self, entries: Vec<NewEntry>, done: hintgate_store::AppendDone) {
        match self.me.upgrade() {
            Some(me) => {
                std::thread::spawn(move || done(me.append(&entries)));
            }
            None => done(self.append(&entries)),
        }
    }

    fn append(&self, entries: &[NewEntry]) -> Result<Vec<u64>, StoreError> {
        let mut mode = self.mode.lock().unwrap();
        if *mode == AppendMode::Stall {
            *self.waiting.lock().unwrap() += 1;
            self.timeline.push("store stalled".to_owned());
            while *mode == AppendMode::Stall {
                mode = self.stalled.wait(mode).unwrap();
            }
            *self.waiting.lock().unwrap() -= 1;
        }
        if *mode == AppendMode::Fail {
            self.timeline.push("store refused an append".to_owned());
            return Err(StoreError::Address(
                "the test store refuses appends".to_owned(),
            ));
        }
        drop(mode);
        let seqs = self.inner.append(entries)?;
        let mut calls = Vec::new();
        for entry in entries {
            let body: Value = serde_json::from_str(&entry.body).unwrap_or(Value::Null);
            self.timeline.push(format!(
                "store appended {:?} {}",
                entry.kind, body["arguments"]["n"]
            ));
            if entry.kind == hintgate_store::EntryKind::Call {
                calls.push(body["arguments"]["n"].clone());
            }
        }
        self.commits.lock().unwrap().push(calls);
        Ok(seqs)
    }
    fn entries(&self, after: u64, limit: usize) -> Result<Vec<Entry>, StoreError> {
        self.inner.entries(after, limit)
    }
    fn audit_key(&self) -> Option<&hintgate_store::AuditKey> {
        self.inner.audit_key()
    }
}

impl hintgate_store::IdempotencyStore for TestStore {
    fn key_record(
        &self,
        scope: &str,
        now: i64,
        window_s: i64,
    ) -> Result<Option<hintgate_store::KeyRecord>, StoreError> {
        self.inner.key_record(scope, now, window_s)
    }
    fn claim_key(
        &self,
        claim: &hintgate_store::KeyClaim<'_>,
    ) -> Result<Option<hintgate_store::KeyRecord>, StoreError> {
        self.inner.claim_key(claim)
    }
    fn end_key(
        &self,
        scope: &str,
        owner: &str,
        end: hintgate_store::KeyEnd<'_>,
        now: i64,
    ) -> Result<(), StoreError> {
        self.inner.end_key(scope, owner, end, now)
    }
}

impl hintgate_store::UpstreamTokenStore for TestStore {
    fn put_grant(&self, grant: &hintgate_store::NewGrant<'_>) -> Result<(), StoreError> {
        self.inner.put_grant(grant)
    }
    fn grant(
        &self,
        server: &str,
        principal: &str,
    ) -> Result<Option<hintgate_store::KeptGrant>, StoreError> {
        self.inner.grant(server, principal)
    }
    fn grants(&self) -> Result<Vec<hintgate_store::GrantInfo>, StoreError> {
        self.inner.grants()
    }
    fn delete_grant(&self, server: &str, principal: &str) -> Result<bool, StoreError> {
        self.inner.delete_grant(server, principal)
    }
}

impl hintgate_store::TokenStore for TestStore {
    fn add_token(&self, name: &str, hash: &str, scope: &str) -> Result<(), StoreError> {
        self.inner.add_token(name, hash, scope)
    }
    fn tokens(&self) -> Result<Vec<hintgate_store::TokenRow>, StoreError> {
        self.inner.tokens()
    }
    fn revoke_token(&self, name: &str) -> Result<bool, StoreError> {
        self.inner.revoke_token(name)
    }
    fn find_token(&self, hash: &str) -> Result<Option<hintgate_store::TokenRow>, StoreError> {
        self.inner.find_token(hash)
    }
}

impl ApprovalQueue for TestStore {
    fn enqueue(&self, pending: &NewPending) -> Result<u64, StoreError> {
        if self
            .panic_on_enqueue
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            panic!("the test store breaks down");
        }
        self.inner.enqueue(pending)
    }
    fn pending(&self, id: u64) -> Result<Option<Pending>, StoreError> {
        self.inner.pending(id)
    }
    fn waiting(&self, now: i64) -> Result<Vec<Pending>, StoreError> {
        self.inner.waiting(now)
    }
    fn answer(&self, id: u64, answer: &Answer, now: i64) -> Result<Answered, StoreError> {
        self.inner.answer(id, answer, now)
    }
    fn answers(&self, ids: &[u64]) -> Result<Vec<(u64, Answer)>, StoreError> {
        self.inner.answers(ids)
    }
    fn withdraw(&self, id: u64, why: &str) -> Result<Option<Answer>, StoreError> {
        self.inner.withdraw(id, why)
    }
    fn watch(&self) -> Result<Box<dyn QueueWatch>, StoreError> {
        self.inner.watch()
    }
}

/// Answers a request of the gateway's with the `result`, as JSON text.
pub type Responder = Box<dyn FnMut(&Value) -> String + Send>;

/// A running gateway with its host and servers.
pub struct Harness {
    host_tx: tokio::io::WriteHalf<DuplexStream>,
    host_rx: mpsc::UnboundedReceiver<Value>,
    next_id: u64,
    gateway: Option<std::thread::JoinHandle<()>>,
    /// Asks the gateway to stop, as a signal does in `hintgate run`.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// Everything the gateway sent the host that was not the answer waited for.
    pub notes: Vec<Value>,
    /// The requests the gateway sent the host (questions), as received.
    pub requests: Vec<Value>,
    /// Answers a request of the gateway's: the `result` as JSON text.
    responder: Option<Responder>,
    pub store: Arc<TestStore>,
    pub timeline: Timeline,
    pub received: Arc<Mutex<BTreeMap<String, Vec<String>>>>,
    tools_now: Arc<Mutex<BTreeMap<String, Vec<Value>>>>,
    pushes: Arc<Mutex<BTreeMap<String, mpsc::UnboundedSender<String>>>>,
    /// How many times each server was started.
    pub starts: Arc<Mutex<BTreeMap<String, usize>>>,
    /// What waits in the gateway for each start of each server to read it.
    pub queues: Arc<Mutex<BTreeMap<String, Vec<Arc<QueueGauge>>>>>,
    /// How many pushed lines the servers have written so far.
    pub pushed: Arc<std::sync::atomic::AtomicUsize>,
    /// What waits in the gateway for the host to read.
    pub gauge: Arc<QueueGauge>,
    /// The lines that wait in the gateway for its event loop.
    pub events: Arc<QueueGauge>,
    /// The host's requests the gateway holds.
    pub held: Arc<QueueGauge>,
    /// Whether the host reads what the gateway writes.
    reading: tokio::sync::watch::Sender<bool>,
    /// Every line the host read, as written.
    pub host_lines: Arc<Mutex<Vec<String>>>,
}

/// How to start a harness.
pub struct Setup {
    /// `hintgate.toml` text.
    pub config: String,
    pub mode: Mode,
    pub scripts: HashMap<String, ServerScript>,
    /// The store to use (a fresh one when `None`).
    pub store: Option<Arc<TestStore>>,
}

impl Setup {
    /// Wrap mode: one server `fx` with these tools, trusted or not.
    ///
    /// Its calls, and its questions to a person, may take
    /// [`CALL_PATIENCE_S`]: a test whose server or person answers never
    /// meets the limit, however busy the machine. A test of what happens
    /// when nobody answers sets a short one ([`Setup::with_call_timeout`],
    /// [`Setup::with_ask_timeout`]).
    pub fn wrap(script: ServerScript, trusted: bool) -> Self {
        let trust = if trusted { "trusted" } else { "untrusted" };
        Self {
            config: format!(
                "[gateway]\ncall_timeout_s = {CALL_PATIENCE_S}\nask_timeout_s = {CALL_PATIENCE_S}\n\n[servers.fx]\ncommand = \"scripted\"\ntrust = \"{trust}\"\n"
            ),
            mode: Mode::Wrap,
            scripts: HashMap::from([("fx".to_owned(), script)]),
            store: None,
        }
    }

    /// The same, with the gateway's `ask_timeout_s` set to `seconds`.
    pub fn with_ask_timeout(mut self, seconds: u32) -> Self {
        self.config = self.config.replace(
            &format!("ask_timeout_s = {CALL_PATIENCE_S}\n"),
            &format!("ask_timeout_s = {seconds}\n"),
        );
        self
    }

    /// The same, with the gateway's `call_timeout_s` set to `seconds`.
    pub fn with_call_timeout(mut self, seconds: u32) -> Self {
        self.config = self.config.replace(
            &format!("call_timeout_s = {CALL_PATIENCE_S}\n"),
            &format!("call_timeout_s = {seconds}\n"),
        );
        self
    }
}

impl Harness {
    pub async fn start(setup: Setup) -> Self {
        Self::start_with(setup, |_| {}).await
    }

    /// Starts a harness whose configuration `edit` changes after it was
    /// validated (a configuration built in code, which validation does not
    /// see).
    pub async fn start_with(setup: Setup, edit: impl FnOnce(&mut ValidConfig)) -> Self {
        // The gateway's log goes with the test's output, shown when it fails.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
            )
            .with_test_writer()
            .try_init();
        let (config, diagnostics) = parse_str(&setup.config);
        let mut config = config.unwrap_or_else(|| panic!("bad test config: {diagnostics:?}"));
        edit(&mut config);
        let timeline = Timeline::default();
        let store = setup
            .store
            .unwrap_or_else(|| Arc::new(TestStore::new(timeline.clone())));
        let timeline = store.timeline.clone();
        let connector = Arc::new(ScriptedConnector {
            scripts: setup.scripts,
            runtime: tokio::runtime::Handle::current(),
            timeline: timeline.clone(),
            received: Arc::default(),
            starts: Arc::default(),
            tools_now: Arc::default(),
            pushes: Arc::default(),
            queues: Arc::default(),
            pushed: Arc::default(),
        });
        let received = Arc::clone(&connector.received);
        let tools_now = Arc::clone(&connector.tools_now);
        let pushes = Arc::clone(&connector.pushes);
        let starts = Arc::clone(&connector.starts);
        let queues = Arc::clone(&connector.queues);
        let pushed = Arc::clone(&connector.pushed);
        let as_store: Arc<dyn Store> = store.clone();
        // What the gateway observes goes on the timeline where a test must
        // wait for it: that it began to stop.
        let (observer, mut observed) = mpsc::unbounded_channel();
        let stopping = timeline.clone();
        tokio::spawn(async move {
            while let Some(seen) = observed.recv().await {
                if matches!(seen, hintgate_proxy::Observed::Stopping) {
                    stopping.push("gateway stopping".to_owned());
                }
            }
        });
        let settings = Settings {
            policy: Policy::new(config),
            mode: setup.mode,
            observer: Some(observer),
            store: Some(as_store),
            connector: Some(connector),
            metrics: None,
        };
        let (host_end, gateway_end) = tokio::io::duplex(1 << 20);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let gauges = Gauges::default();
        let (gauge, events, held) = (
            Arc::clone(&gauges.host),
            Arc::clone(&gauges.events),
            Arc::clone(&gauges.requests),
        );
        let gateway = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let (gateway_in, gateway_out) = tokio::io::split(gateway_end);
            // A dropped sender is no stop: only `Harness::stop` is.
            let stop = async move {
                if stop_rx.await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            runtime
                .block_on(hintgate_proxy::run_until(
                    settings,
                    gateway_in,
                    gateway_out,
                    gauges,
                    stop,
                ))
                .unwrap();
        });
        let (host_read, host_tx) = tokio::io::split(host_end);
        let (tx, host_rx) = mpsc::unbounded_channel();
        let (reading, mut may_read) = tokio::sync::watch::channel(true);
        let host_lines: Arc<Mutex<Vec<String>>> = Arc::default();
        let lines_read = Arc::clone(&host_lines);
        tokio::spawn(async move {
            let mut lines = BufReader::new(host_read).lines();
            loop {
                // A paused host reads nothing, so its pipe fills up.
                while !*may_read.borrow_and_update() {
                    if may_read.changed().await.is_err() {
                        return;
                    }
                }
                let Ok(Some(line)) = lines.next_line().await else {
                    return;
                };
                lines_read.lock().unwrap().push(line.clone());
                let value: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|err| json!({"unparseable": line, "error": err.to_string()}));
                if tx.send(value).is_err() {
                    return;
                }
            }
        });
        Self {
            host_lines,
            gauge,
            events,
            held,
            pushed,
            reading,
            host_tx,
            host_rx,
            next_id: 0,
            gateway: Some(gateway),
            stop: Some(stop_tx),
            notes: Vec::new(),
            requests: Vec::new(),
            responder: None,
            store,
            timeline,
            received,
            tools_now,
            pushes,
            starts,
            queues,
        }
    }

    /// The host stops reading what the gateway writes (it keeps writing).
    pub fn pause_reading(&self) {
        self.reading.send_replace(false);
    }

    /// The host reads again.
    pub fn resume_reading(&self) {
        self.reading.send_replace(true);
    }

    /// Sends one line as it is.
    pub async fn send_raw(&mut self, line: &str) {
        write(&mut self.host_tx, line).await;
    }

    /// The next message from the gateway.
    pub async fn next(&mut self) -> Value {
        tokio::time::timeout(PATIENCE, self.host_rx.recv())
            .await
            .expect("the gateway answered in time")
            .expect("the gateway's output is open")
    }

    /// Sets how the host answers the gateway's requests: the `result`, as
    /// JSON text (so a test can send text no serializer would write).
    pub fn respond_with(&mut self, responder: impl FnMut(&Value) -> String + Send + 'static) {
        self.responder = Some(Box::new(responder));
    }

    /// Waits for the response with this id (raw JSON), answering the
    /// gateway's requests on the way and keeping everything else.
    pub async fn response(&mut self, id: &Value) -> Value {
        loop {
            let message = self.next().await;
            if message.get("id") == Some(id) && message.get("method").is_none() {
                return message;
            }
            if message.get("method").is_some() && message.get("id").is_some() {
                self.requests.push(message.clone());
                if let Some(responder) = &mut self.responder {
                    let result = responder(&message);
                    let line = format!(
                        "{{\"jsonrpc\":\"2.0\",\"id\":{},\"result\":{result}}}",
                        message["id"]
                    );
                    self.send_raw(&line).await;
                }
                continue;
            }
            self.notes.push(message);
        }
    }

    /// A request, and its response.
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = json!(format!("h{}", self.next_id));
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_raw(&line.to_string()).await;
        self.response(&id).await
    }

    /// A 2026-07-28 request (the modern `_meta`, with these host
    /// capabilities, added to `params`), and its response.
    pub async fn modern_request(
        &mut self,
        method: &str,
        mut params: Value,
        capabilities: Value,
    ) -> Value {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": capabilities,
            "io.modelcontextprotocol/clientInfo": {"name": "modern-test-host", "version": "1"},
        });
        self.request(method, params).await
    }

    /// The server's current start dies: its output closes.
    pub fn crash_server(&self, server: &str) {
        self.push(server, CRASH);
    }

    /// A server sends this line of its own accord.
    pub fn push(&self, server: &str, line: &str) {
        let push = self.pushes.lock().unwrap().get(server).cloned();
        push.expect("the server runs")
            .send(line.to_owned())
            .unwrap();
    }

    /// Waits until the gateway has handled every line `server` sent before
    /// now. The server pings the gateway, which answers a server's `ping`
    /// itself (with an error when it cannot tell whose it is, an answer
    /// all the same). The gateway handles one server's lines in the order
    /// it sent them, so its answer to the ping means every line before it
    /// was handled, and what the gateway wrote the host for them comes
    /// before whatever it writes the host later.
    pub async fn handled(&mut self, server: &str) {
        self.next_id += 1;
        let id = format!("handled-{}", self.next_id);
        self.push(
            server,
            &json!({"jsonrpc": "2.0", "id": id, "method": "ping"}).to_string(),
        );
        self.received_eventually(server, &format!(r#""id":"{id}""#))
            .await;
    }

    /// The legacy handshake, with these host capabilities.
    pub async fn initialize(&mut self, capabilities: Value) -> Value {
        let init = self
            .request(
                "initialize",
                json!({"protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": {"name": "test-host", "version": "1"}}),
            )
            .await;
        self.send_raw(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
        init
    }

    /// A tool call's whole response.
    pub async fn call(&mut self, name: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": name, "arguments": arguments}))
            .await
    }

    /// A server now lists `tools`, and says so (`list_changed`); returns
    /// once the gateway has taken it in: it asked the server for its list
    /// again. A call or a `tools/list` from the host after that waits for
    /// the new list.
    pub async fn change_tools(&self, server: &str, tools: Vec<Value>) {
        let before = self.count_received(server, "tools/list");
        self.tools_now
            .lock()
            .unwrap()
            .insert(server.to_owned(), tools);
        let push = self.pushes.lock().unwrap().get(server).cloned();
        push.expect("the server runs")
            .send(r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#.to_owned())
            .unwrap();
        eventually(|| self.count_received(server, "tools/list") > before).await;
    }

    /// The next request the gateway sends the host (what comes before it is
    /// kept).
    pub async fn next_request(&mut self) -> Value {
        loop {
            let message = self.next().await;
            if message.get("method").is_some() && message.get("id").is_some() {
                self.requests.push(message.clone());
                return message;
            }
            self.notes.push(message);
        }
    }

    /// How many lines a server received that contain `needle`.
    pub fn count_received(&self, server: &str, needle: &str) -> usize {
        self.received_by(server)
            .iter()
            .filter(|line| line.contains(needle))
            .count()
    }

    /// What a server received so far.
    pub fn received_by(&self, server: &str) -> Vec<String> {
        self.received
            .lock()
            .unwrap()
            .get(server)
            .cloned()
            .unwrap_or_default()
    }

    /// Waits until a server received a line that contains `needle`.
    pub async fn received_eventually(&self, server: &str, needle: &str) {
        let received = Arc::clone(&self.received);
        eventually(|| {
            received
                .lock()
                .unwrap()
                .get(server)
                .is_some_and(|lines| lines.iter().any(|line| line.contains(needle)))
        })
        .await;
    }

    /// The calls a server received.
    pub fn calls_received(&self, server: &str) -> Vec<Value> {
        self.received_by(server)
            .iter()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|message| message["method"] == "tools/call")
            .collect()
    }

    /// Asks the gateway to stop (as SIGTERM does), the host's side still
    /// open: what it answers on the way out can still be read.
    pub fn stop(&mut self) {
        let _ = self.stop.take().expect("stopped once").send(());
    }

    /// Waits for the gateway's thread to end with a panic (a fatal error in
    /// its loop), and hands back the store.
    pub async fn crashed(mut self) -> Arc<TestStore> {
        let gateway = self.gateway.take().unwrap();
        let ended = tokio::time::timeout(
            PATIENCE,
            tokio::task::spawn_blocking(move || gateway.join()),
        )
        .await
        .expect("the gateway ended in time")
        .unwrap();
        assert!(ended.is_err(), "the gateway's thread panicked");
        self.store
    }

    /// Closes the host's side without waiting for the gateway (it may be
    /// held up): [`Harness::close`] or [`Harness::crashed`] waits later.
    pub async fn hang_up(&mut self) {
        let _ = self.host_tx.shutdown().await;
    }

    /// Closes the host's side and waits for the gateway to end.
    pub async fn close(mut self) -> Arc<TestStore> {
        let _ = self.host_tx.shutdown().await;
        drop(self.host_tx);
        let gateway = self.gateway.take().unwrap();
        tokio::task::spawn_blocking(move || gateway.join().unwrap())
            .await
            .unwrap();
        self.store
    }
}

/// The text of a tool result.
pub fn text(response: &Value) -> String {
    response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Whether a response is a tool result with `isError: true`.
pub fn is_error(response: &Value) -> bool {
    response["result"]["isError"] == true
}

/// Waits (a little at a time, within [`PATIENCE`]) until `ready` holds.
pub async fn eventually(mut ready: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !ready() {
        assert!(tokio::time::Instant::now() < deadline, "gave up waiting");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
