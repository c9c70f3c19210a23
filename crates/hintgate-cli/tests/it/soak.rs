//! The hostile-peer soak: a bounded run of a real gateway between a host
//! and four servers, three of which misbehave at random: two over stdio
//! (`tests/fixtures/hostile_server.py`) and one over Streamable HTTP
//! (`hostile_http.rs`: wrong, duplicate and unsolicited ids, SSE streams
//! that stall or carry garbage, 4xx and 5xx, bodies over the limit, a
//! session that ends or changes its id), while the host mixes well-formed
//! calls with wrong, duplicate and unsolicited ids, id-less calls, repeated
//! keys, batches, huge and deep lines, invalid UTF-8, lines in two parts,
//! cancellations racing results, and answers to the gateway's questions
//! that are late, doubled, misaddressed or never sent.
//!
//! What must hold throughout, and is checked at the end:
//! - every well-formed request the host did not cancel gets its answer;
//! - the gateway's memory stays under a bound;
//! - no call reaches a server without an allow or a person's approval (each
//!   server writes down every call it receives, by the nonce in its
//!   arguments, and the audit log must hold a record that let it through);
//! - no malformed call reaches a server at all;
//! - every call that reached the gateway has its record and its ending;
//! - `hintgate log verify` passes, and the gateway exits cleanly, whether
//!   its host goes away or it is told to stop (SIGTERM) with calls in
//!   flight.
//!
//! The host speaks the legacy era (`initialize`, questions as elicitation
//! requests) or 2026-07-28 (`_meta` on every request, questions as
//! input-required results it retries with its answer), by the seed.
//!
//! The run is seeded (`HINTGATE_SOAK_SEED`, default two fixed seeds, one of
//! each era) and bounded (`HINTGATE_SOAK_STEPS`), so a failure can be
//! replayed.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::host::fixture_server;
use crate::hostile_http::HostileHttp;
use crate::util::{Rng, hintgate};

/// The gateway's resident memory must stay under this, whatever its peers
/// send (they send lines of several MiB; the gateway's line limit is 1 MiB).
const MEMORY_BOUND_KIB: u64 = 256 * 1024;

/// How long the host waits for the answers still owed at the end. It bounds
/// a hung gateway; nothing is asserted about how fast it answers.
const PATIENCE: Duration = Duration::from_secs(120);

fn hostile_server() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hostile_server.py")
        .display()
        .to_string()
}

/// What the gateway wrote to the host: a parsed message, or a line that
/// was not JSON.
enum Line {
    Message(Value),
    Unparseable(String),
}

struct Soak {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<Line>,
    rng: Rng,
    next_id: u64,
    /// Well-formed requests still owed an answer, by id.
    owed: HashMap<String, String>,
    /// Requests whose answer is no longer owed (cancelled, or sent with a
    /// duplicate id).
    excused: HashSet<String>,
    /// Nonces of calls the host sent malformed: none may reach a server.
    malformed_nonces: HashSet<String>,
    unparseable: Vec<String>,
    answered: u64,
    questions: u64,
    /// The host speaks 2026-07-28.
    modern: bool,
    /// The params of each well-formed call still owed, for a 2026-07-28
    /// host's retry with its answer.
    params_of: HashMap<String, Value>,
}

/// Whether a seed's host speaks 2026-07-28: two seeds in four.
fn modern_seed(seed: u64) -> bool {
    seed % 4 >= 2
}

/// The key of the gateway's own question in an input-required result.
const APPROVE_KEY: &str = "hintgate/approve";

impl Soak {
    fn start(dir: &Path, seed: u64, modern: bool, http: &HostileHttp) -> (Self, u32) {
        let config = format!(
            r#"
[gateway]
call_timeout_s = 3
ask_timeout_s = 5
max_message_bytes = 1048576

[servers.calm]
command = "python3"
args = ["{fixture}", "--name", "calm"]
trust = "trusted"

[servers.wild1]
command = "python3"
args = ["{hostile}", "--name", "wild1", "--seed", "{seed1}"]

[servers.wild2]
command = "python3"
args = ["{hostile}", "--name", "wild2", "--seed", "{seed2}"]
trust = "trusted"

[servers.wild3]
url = "{http}"
trust = "trusted"

[[rules]]
server = "wild2"
tool = "wipe"
action = "deny"
reason = "the soak's deny rule"
"#,
            fixture = fixture_server(),
            hostile = hostile_server(),
            seed1 = seed,
            seed2 = seed + 1,
            http = http.url,
        );
        std::fs::write(dir.join("hintgate.toml"), config).unwrap();
        let mut child = hintgate()
            .current_dir(dir)
            .args(["run", "--config", "hintgate.toml"])
            .env("HINTGATE_STATE_DIR", dir.join("state"))
            .env("SOAK_LOG", dir.join("hostile.log"))
            .env("FIXTURE_LOG", dir.join("calm.log"))
            .env(
                "RUST_LOG",
                std::env::var("HINTGATE_SOAK_LOG").unwrap_or_else(|_| "info".to_owned()),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join("hintgate.stderr")).unwrap())
            .spawn()
            .expect("hintgate starts");
        let pid = child.id();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = Vec::new();
            loop {
                line.clear();
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                let parsed = match serde_json::from_slice::<Value>(&line) {
                    Ok(value) => Line::Message(value),
                    Err(_) => Line::Unparseable(String::from_utf8_lossy(&line).into_owned()),
                };
                if tx.send(parsed).is_err() {
                    return;
                }
            }
        });
        let soak = Self {
            stdin: child.stdin.take().unwrap(),
            child,
            lines,
            rng: Rng(seed),
            next_id: 0,
            owed: HashMap::new(),
            excused: HashSet::new(),
            malformed_nonces: HashSet::new(),
            unparseable: Vec::new(),
            answered: 0,
            questions: 0,
            modern,
            params_of: HashMap::new(),
        };
        (soak, pid)
    }

    fn write(&mut self, bytes: &[u8]) {
        // A gateway that stopped reading fails the test at the end, not here.
        let _ = self.stdin.write_all(bytes);
        let _ = self.stdin.flush();
    }

    fn send(&mut self, message: &Value) {
        let message = self.with_meta(message);
        let mut line = serde_json::to_vec(&message).unwrap();
        line.push(b'\n');
        self.write(&line);
    }

    /// A request as this host sends it: a 2026-07-28 host names its
    /// version, capabilities and identity in every request's `_meta`.
    fn with_meta(&self, message: &Value) -> Value {
        let mut message = message.clone();
        let request = message.get("method").is_some() && message.get("id").is_some();
        if self.modern
            && request
            && let Some(object) = message.as_object_mut()
        {
            let params = object.entry("params").or_insert_with(|| json!({}));
            if let Some(params) = params.as_object_mut() {
                params.insert(
                    "_meta".to_owned(),
                    json!({
                        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
                        "io.modelcontextprotocol/clientInfo": {"name": "soak", "version": "1"},
                    }),
                );
            }
        }
        message
    }

    fn fresh_id(&mut self) -> String {
        self.next_id += 1;
        format!("h{}", self.next_id)
    }

    /// A random tool of a random server, by its prefixed name (the HTTP
    /// server's twice as often as the others', as it has more ways to
    /// misbehave).
    fn any_tool(&mut self) -> &'static str {
        const TOOLS: [&str; 14] = [
            "calm__echo",
            "calm__write_note",
            "wild1__read",
            "wild1__write",
            "wild1__wipe",
            "wild2__read",
            "wild2__write",
            "wild2__wipe",
            "wild3__read",
            "wild3__write",
            "wild3__wipe",
            "wild3__read",
            "wild3__write",
            "wild3__wipe",
        ];
        TOOLS[usize::try_from(self.rng.below(TOOLS.len() as u64)).unwrap()]
    }

    /// A well-formed call the gateway owes an answer to.
    fn call(&mut self, step: u64) -> String {
        let id = self.fresh_id();
        let tool = self.any_tool();
        let params =
            json!({"name": tool, "arguments": {"nonce": format!("n{step}"), "text": "soak"}});
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}));
        self.owed.insert(id.clone(), tool.to_owned());
        self.params_of.insert(id.clone(), params);
        id
    }

    /// One step of the host: mostly well-formed traffic, sometimes not.
    fn step(&mut self, step: u64) {
        let bad = format!("bad{step}");
        match self.rng.below(100) {
            0..=54 => {
                self.call(step);
            }
            55..=59 => {
                let id = self.fresh_id();
                self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}));
                self.owed.insert(id, "tools/list".to_owned());
            }
            60..=64 => {
                // Cancel a call in flight, racing its result.
                let id = self.call(step);
                if self.rng.chance(50) {
                    std::thread::sleep(Duration::from_millis(self.rng.below(30)));
                }
                self.send(
                    &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": id, "reason": "soak"}}),
                );
                self.owed.remove(&id);
                self.excused.insert(id);
            }
            65..=67 => {
                // A call without an id: a notification, never run.
                let tool = self.any_tool();
                self.send(&json!({"jsonrpc": "2.0", "method": "tools/call",
                    "params": {"name": tool, "arguments": {"nonce": bad}}}));
                self.malformed_nonces.insert(bad);
            }
            68..=70 => {
                // A repeated key: decided on one name, run as another?
                let id = self.fresh_id();
                let line = format!(
                    r#"{{"jsonrpc":"2.0","id":"{id}","method":"tools/call","params":{{"name":"calm__echo","name":"wild1__wipe","arguments":{{"nonce":"{bad}"}}}}}}"#
                );
                self.write(format!("{line}\n").as_bytes());
                self.owed.insert(id, "repeated key".to_owned());
                self.malformed_nonces.insert(bad);
            }
            71..=72 => {
                // A batch hiding a call.
                let line = json!([{"jsonrpc": "2.0", "id": "in-batch", "method": "tools/call",
                    "params": {"name": "wild1__wipe", "arguments": {"nonce": bad}}}]);
                self.send(&line);
                self.malformed_nonces.insert(bad);
            }
            73..=74 => {
                // A line over the gateway's limit.
                let id = self.fresh_id();
                let filler = "y".repeat(2 * 1024 * 1024);
                self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                    "params": {"name": "calm__echo", "arguments": {"nonce": bad, "text": filler}}}));
                self.excused.insert(id);
                self.malformed_nonces.insert(bad);
            }
            75..=76 => {
                // Arguments nested thousands deep.
                let id = self.fresh_id();
                let depth = 5000;
                let line = format!(
                    r#"{{"jsonrpc":"2.0","id":"{id}","method":"tools/call","params":{{"name":"calm__echo","arguments":{{"nonce":"{bad}","deep":{}{}}}}}}}"#,
                    "[".repeat(depth),
                    "]".repeat(depth)
                );
                self.write(format!("{line}\n").as_bytes());
                self.excused.insert(id);
                self.malformed_nonces.insert(bad);
            }
            77..=78 => {
                // Not UTF-8.
                let id = self.fresh_id();
                let mut line = format!(
                    r#"{{"jsonrpc":"2.0","id":"{id}","method":"tools/call","params":{{"name":"calm__echo","arguments":{{"nonce":"{bad}","text":""#
                )
                .into_bytes();
                line.extend_from_slice(b"\xff\xfe\xc0\xaf\"}}}\n");
                self.write(&line);
                self.excused.insert(id);
                self.malformed_nonces.insert(bad);
            }
            79..=83 => {
                // A well-formed call in two parts, with a stall between.
                let id = self.fresh_id();
                let tool = self.any_tool();
                let params = json!({"name": tool, "arguments": {"nonce": format!("n{step}")}});
                let message = self.with_meta(&json!({"jsonrpc": "2.0", "id": id,
                    "method": "tools/call", "params": params}));
                let mut line = serde_json::to_vec(&message).unwrap();
                self.params_of.insert(id.clone(), params);
                line.push(b'\n');
                let cut = 1 + usize::try_from(self.rng.below(line.len() as u64 - 2)).unwrap();
                self.write(&line[..cut]);
                std::thread::sleep(Duration::from_millis(self.rng.below(40)));
                self.write(&line[cut..]);
                self.owed.insert(id, tool.to_owned());
            }
            84..=86 => {
                // A duplicate of an id in flight: neither answer is owed.
                let Some(id) = self.owed.keys().next().cloned() else {
                    return;
                };
                self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                    "params": {"name": "calm__echo", "arguments": {"nonce": format!("n{step}")}}}));
                self.owed.remove(&id);
                self.excused.insert(id);
            }
            87..=89 => {
                // A response to a question nobody asked.
                self.send(
                    &json!({"jsonrpc": "2.0", "id": format!("nobody-asked-{step}"),
                    "result": {"action": "accept", "content": {"approve": true}}}),
                );
            }
            90..=92 => {
                let id = self.fresh_id();
                self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "ping"}));
                self.owed.insert(id, "ping".to_owned());
            }
            _ => {
                // Garbage.
                self.write(b"}{ not json at all\n");
            }
        }
    }

    /// Reads what the gateway wrote for up to `wait`, answering its
    /// questions.
    fn drain(&mut self, wait: Duration) {
        let until = Instant::now() + wait;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let line = match self.lines.recv_timeout(left) {
                Ok(line) => line,
                Err(_) => return,
            };
            match line {
                Line::Unparseable(text) => self.unparseable.push(text),
                Line::Message(message) => self.handle(&message),
            }
        }
    }

    fn handle(&mut self, message: &Value) {
        let Some(object) = message.as_object() else {
            self.unparseable.push(message.to_string());
            return;
        };
        if let Some(method) = object.get("method").and_then(Value::as_str) {
            if let Some(id) = object.get("id") {
                self.questions += 1;
                self.answer_question(id.clone(), method);
            }
            return;
        }
        let id = match object.get("id") {
            Some(Value::String(id)) => id.clone(),
            Some(other) => other.to_string(),
            None => return,
        };
        if self.owed.remove(&id).is_some() {
            self.answered += 1;
            let params = self.params_of.remove(&id);
            let result = object.get("result").unwrap_or(&Value::Null);
            if result["resultType"] == "input_required" {
                self.questions += 1;
                if let Some(params) = params {
                    self.retry_with_answer(params, result);
                }
            }
        }
    }

    /// A 2026-07-28 host's answer to the gateway's question: the same call
    /// again, with the person's answer and the gateway's state; approve,
    /// decline, a state that is not the gateway's, or no retry at all. A
    /// server's own question (relayed under another key) is not answered:
    /// it times out.
    fn retry_with_answer(&mut self, mut params: Value, result: &Value) {
        if result["inputRequests"].get(APPROVE_KEY).is_none() {
            return;
        }
        let answer = match self.rng.below(100) {
            0..=49 => json!({"action": "accept", "content": {"approve": true}}),
            50..=79 => json!({"action": "decline"}),
            80..=89 => json!({"action": "accept", "content": {"approve": "yes"}}),
            _ => return,
        };
        let state = if self.rng.chance(10) {
            json!("a state the gateway never sealed")
        } else {
            result["requestState"].clone()
        };
        if let Some(object) = params.as_object_mut() {
            object.insert("inputResponses".to_owned(), json!({ APPROVE_KEY: answer }));
            object.insert("requestState".to_owned(), state);
        }
        let id = self.fresh_id();
        let tool = params["name"].as_str().unwrap_or("retry").to_owned();
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}));
        self.owed.insert(id.clone(), tool);
        self.params_of.insert(id, params);
    }

    /// Answers a request from the gateway: approve, decline, answer twice,
    /// answer to the wrong id first, or never.
    fn answer_question(&mut self, id: Value, method: &str) {
        if method != "elicitation/create" {
            self.send(&json!({"jsonrpc": "2.0", "id": id, "result": {}}));
            return;
        }
        let approve = json!({"action": "accept", "content": {"approve": true}});
        let decline = json!({"action": "decline"});
        match self.rng.below(100) {
            0..=44 => self.send(&json!({"jsonrpc": "2.0", "id": id, "result": approve})),
            45..=74 => self.send(&json!({"jsonrpc": "2.0", "id": id, "result": decline})),
            75..=84 => {
                self.send(&json!({"jsonrpc": "2.0", "id": "not-the-question", "result": approve}));
                self.send(&json!({"jsonrpc": "2.0", "id": id, "result": decline}));
            }
            85..=94 => {
                self.send(&json!({"jsonrpc": "2.0", "id": id, "result": decline}));
                self.send(&json!({"jsonrpc": "2.0", "id": id, "result": approve}));
            }
            _ => {}
        }
    }
}

/// The soak's directory: removed at the end, or kept for a replay.
enum KeptOrTemp {
    Kept(PathBuf),
    Temp(tempfile::TempDir),
}

impl KeptOrTemp {
    fn path(&self) -> &Path {
        match self {
            Self::Kept(path) => path,
            Self::Temp(dir) => dir.path(),
        }
    }
}

/// The resident memory of process `pid`, in KiB.
fn resident_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// `(server, nonce)` of every call a server received.
fn received(dir: &Path, http: &HostileHttp) -> Vec<(String, String)> {
    let mut calls: Vec<(String, String)> = http
        .received()
        .into_iter()
        .map(|nonce| ("wild3".to_owned(), nonce))
        .collect();
    let hostile = std::fs::read_to_string(dir.join("hostile.log")).unwrap_or_default();
    for line in hostile.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        if parts.first() == Some(&"call") && parts.len() >= 4 {
            calls.push((parts[1].to_owned(), parts[3].to_owned()));
        }
    }
    let calm = std::fs::read_to_string(dir.join("calm.log")).unwrap_or_default();
    for line in calm.lines() {
        let Some(rest) = line.strip_prefix("call ") else {
            continue;
        };
        let Some((_, arguments)) = rest.split_once(' ') else {
            continue;
        };
        let arguments: Value = serde_json::from_str(arguments).unwrap_or(Value::Null);
        let nonce = arguments["nonce"].as_str().unwrap_or("none").to_owned();
        calls.push(("calm".to_owned(), nonce));
    }
    calls
}

#[test]
fn hostile_peers_cannot_bypass_a_decision_shorten_the_log_or_exhaust_the_gateway() {
    let seed: Option<u64> = std::env::var("HINTGATE_SOAK_SEED")
        .ok()
        .and_then(|text| text.parse().ok());
    let steps: Option<u64> = std::env::var("HINTGATE_SOAK_STEPS")
        .ok()
        .and_then(|text| text.parse().ok());
    // By default two runs, together as long as one of 500 steps: a legacy
    // host told to stop (SIGTERM), and a 2026-07-28 host that goes away.
    let runs = match seed {
        Some(seed) => vec![(seed, steps.unwrap_or(500))],
        None => vec![
            (20_261_201, steps.unwrap_or(300)),
            (20_261_202, steps.unwrap_or(200)),
        ],
    };
    for (seed, steps) in runs {
        soak(seed, steps);
    }
}

#[expect(
    clippy::disallowed_macros,
    reason = "the soak prints its seed and what it did, so a run can be replayed and read"
)]
fn soak(seed: u64, steps: u64) {
    let modern = modern_seed(seed);
    let dir = tempfile::tempdir().unwrap();
    if std::env::var_os("HINTGATE_SOAK_KEEP").is_some() {
        // For a replay: the gateway's log, the servers' logs and the store stay.
        eprintln!("soak: keeping {}", dir.path().display());
    }
    let http = HostileHttp::start("wild3", seed + 2);
    let (mut soak, pid) = Soak::start(dir.path(), seed, modern, &http);

    let peak = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (peak.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if let Some(kib) = resident_kib(pid) {
                    peak.fetch_max(kib, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };

    let id = soak.fresh_id();
    if modern {
        soak.send(&json!({"jsonrpc": "2.0", "id": id, "method": "server/discover"}));
        soak.owed.insert(id, "server/discover".to_owned());
        soak.drain(Duration::from_secs(5));
    } else {
        soak.send(
            &json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "soak", "version": "1"}}}),
        );
        soak.owed.insert(id, "initialize".to_owned());
        soak.drain(Duration::from_secs(5));
        soak.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }

    for step in 0..steps {
        soak.step(step);
        let pause = soak.rng.below(15);
        soak.drain(Duration::from_millis(pause));
    }
    // Every answer still owed must come.
    let until = Instant::now() + PATIENCE;
    while !soak.owed.is_empty() && Instant::now() < until {
        soak.drain(Duration::from_millis(200));
    }
    let owed: Vec<_> = soak.owed.iter().collect();
    let dir = if std::env::var_os("HINTGATE_SOAK_KEEP").is_some() {
        KeptOrTemp::Kept(dir.keep())
    } else {
        KeptOrTemp::Temp(dir)
    };
    let stderr = || std::fs::read_to_string(dir.path().join("hintgate.stderr")).unwrap_or_default();
    // A line a host cannot read (not JSON, or nested past what a parser
    // takes) is a line the gateway should not have passed on.
    let unparseable: Vec<String> = soak
        .unparseable
        .iter()
        .map(|line| line.chars().take(160).collect())
        .collect();
    assert!(
        unparseable.is_empty(),
        "the gateway wrote {} line(s) a host cannot read: {unparseable:?}",
        unparseable.len()
    );
    assert!(
        owed.is_empty(),
        "the gateway never answered {} well-formed request(s): {owed:?}\n{}",
        owed.len(),
        stderr()
    );

    // The run ends with calls in flight: the host goes away (even seeds) or
    // the gateway is told to stop (odd seeds); either way it ends cleanly
    // and every call gets its ending on record.
    for step in steps..steps + 12 {
        soak.call(step);
    }
    if seed % 2 == 1 {
        let pause = soak.rng.below(50);
        soak.drain(Duration::from_millis(pause));
        let killed = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
    }
    drop(soak.stdin);
    let mut status = None;
    let until = Instant::now() + PATIENCE;
    while status.is_none() && Instant::now() < until {
        status = soak.child.try_wait().unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    done.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let Some(status) = status else {
        let _ = soak.child.kill();
        panic!(
            "the gateway did not end when its host went away\n{}",
            stderr()
        );
    };
    assert!(
        status.success(),
        "the gateway failed: {status}\n{}",
        stderr()
    );
    assert!(!stderr().contains("panicked"), "{}", stderr());
    let peak = peak.load(Ordering::Relaxed);
    assert!(
        peak < MEMORY_BOUND_KIB,
        "the gateway's memory reached {peak} KiB (bound {MEMORY_BOUND_KIB} KiB)"
    );

    // The log: every call has its record and its ending, and it verifies.
    let state = dir.path().join("state").display().to_string();
    let log = crate::util::run(dir.path(), &["log", "--state-dir", &state, "--json"]);
    assert_eq!(
        log.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&log.stderr)
    );
    let records: Vec<Value> = String::from_utf8_lossy(&log.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    for record in &records {
        assert!(
            record["outcome"]
                .as_str()
                .is_some_and(|outcome| !outcome.is_empty()),
            "a call without its ending: {record}"
        );
    }
    let verify = crate::util::run(dir.path(), &["log", "--state-dir", &state, "verify"]);
    assert_eq!(
        verify.status.code(),
        Some(0),
        "log verify: {}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );

    // No call reached a server without an allow or a person's approval.
    let let_through: HashSet<(String, String)> = records
        .iter()
        .filter(|record| {
            record["verdict"] == "allow"
                || record["approver"]
                    .as_str()
                    .is_some_and(|approver| approver.starts_with("person"))
        })
        .filter_map(|record| {
            Some((
                record["server"].as_str()?.to_owned(),
                record["arguments"]["nonce"].as_str()?.to_owned(),
            ))
        })
        .collect();
    let received = received(dir.path(), &http);
    assert!(!received.is_empty(), "no call reached any server");
    for (server, nonce) in &received {
        assert!(
            !soak.malformed_nonces.contains(nonce),
            "a malformed call ({nonce}) reached {server}"
        );
        assert!(
            let_through.contains(&(server.clone(), nonce.clone())),
            "{server} received call {nonce}, which nothing let through"
        );
    }
    assert!(
        received.iter().any(|(server, _)| server == "wild3"),
        "no call reached the HTTP server: {}",
        http.summary()
    );
    // A run of the default length deals the HTTP server's whole deck.
    assert!(
        steps < 200 || http.met_every_way(),
        "the HTTP server did not get to misbehave in every way: {}",
        http.summary()
    );
    eprintln!("soak: the HTTP server: {}", http.summary());
    eprintln!(
        "soak: seed {seed} ({} host), {steps} steps, {} answers, {} questions, {} records, {} calls received, {} server starts, peak {peak} KiB",
        if modern { "2026-07-28" } else { "legacy" },
        soak.answered,
        soak.questions,
        records.len(),
        received.len(),
        std::fs::read_to_string(dir.path().join("hostile.log"))
            .unwrap_or_default()
            .lines()
            .filter(|line| line.starts_with("start "))
            .count(),
    );
}
