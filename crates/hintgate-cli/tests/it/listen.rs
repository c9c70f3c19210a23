//! `hintgate run --listen`: hosts over Streamable HTTP, in both eras, with
//! tokens that hide writes, against the fixture server and the Python SDK
//! as the host.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::host::fixture_server;
use crate::peers::venv_bin;
use crate::util::{code, hintgate, http, log_json, run, stdout};

/// A gateway serving HTTP hosts, its stderr collected.
pub(crate) struct Listening {
    child: Child,
    /// `http://127.0.0.1:PORT/mcp`
    pub(crate) url: String,
    log: Arc<Mutex<String>>,
}

impl Listening {
    /// `hintgate run --listen 127.0.0.1:0 FLAGS -- python3 fixture_server.py`
    /// with its state in `dir/state`.
    pub(crate) fn start(dir: &Path, flags: &[&str]) -> Self {
        Self::start_with(dir, flags, &[])
    }

    /// The same, with flags for the fixture server.
    fn start_with(dir: &Path, flags: &[&str], server_flags: &[&str]) -> Self {
        let server = fixture_server();
        let mut command = vec!["python3".to_owned(), server];
        command.extend(server_flags.iter().map(|flag| (*flag).to_owned()));
        Self::start_command(dir, flags, &command)
    }

    /// `hintgate run --listen 127.0.0.1:0 FLAGS -- COMMAND`.
    fn start_command(dir: &Path, flags: &[&str], command: &[String]) -> Self {
        let mut args: Vec<String> = ["run", "--listen", "127.0.0.1:0"]
            .iter()
            .chain(flags)
            .map(|arg| (*arg).to_owned())
            .collect();
        args.push("--".to_owned());
        args.extend_from_slice(command);
        Self::spawn_args(dir, &args)
    }

    /// `hintgate ARGS` in `dir`, which is to serve HTTP.
    fn spawn_args(dir: &Path, args: &[String]) -> Self {
        let mut command = hintgate();
        command
            .current_dir(dir)
            .env("HINTGATE_STATE_DIR", dir.join("state"))
            .env("FIXTURE_LOG", dir.join("fixture.log"))
            .args(args);
        Self::spawn(command)
    }

    /// Runs `command` (a `hintgate run --listen ...`) and waits until it
    /// serves.
    pub(crate) fn spawn(mut command: std::process::Command) -> Self {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        let collected = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                if let Some(url) = line.strip_prefix("hintgate: serving MCP at ") {
                    let _ = tx.send(url.to_owned());
                }
                collected.lock().unwrap().push_str(&format!("{line}\n"));
            }
        });
        let url = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("no URL: {}", log.lock().unwrap()));
        Self { child, url, log }
    }

    /// `http://127.0.0.1:PORT`
    fn base(&self) -> String {
        self.url.trim_end_matches("/mcp").to_owned()
    }

    /// `127.0.0.1:PORT`
    fn host(&self) -> String {
        let base = self.base();
        let host = base.split("://").nth(1).unwrap_or(&base);
        host.to_owned()
    }

    /// One POST to `/mcp` with `body` and extra header lines.
    pub(crate) fn post(&self, headers: &[String], body: &Value) -> String {
        let body = body.to_string();
        let mut request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.host(),
            body.len()
        );
        for header in headers {
            request.push_str(header);
            request.push_str("\r\n");
        }
        request.push_str("\r\n");
        request.push_str(&body);
        http(&self.base(), &request)
    }

    /// Stops it as a signal does, and waits.
    pub(crate) fn stop(mut self) -> String {
        let pid = self.child.id().to_string();
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status();
        let started = Instant::now();
        loop {
            if self.child.try_wait().unwrap().is_some() {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "hintgate did not stop: {}",
                self.log.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The JSON body of an HTTP answer (JSON, or the last event of a stream).
fn body(answer: &str) -> Value {
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    let text = body
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .next_back()
        .unwrap_or(body)
        .trim();
    serde_json::from_str(text).unwrap_or_else(|err| panic!("{err}: {answer}"))
}

/// The value of the header `name` (lowercase) in an HTTP answer.
fn header<'a>(answer: &'a str, name: &str) -> Option<&'a str> {
    answer.split("\r\n\r\n").next()?.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

pub(crate) fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}})
}

/// The Python SDK's `Client` over Streamable HTTP (`tests/peers/http_host.py`).
pub(crate) fn sdk(dir: &Path, url: &str, token: Option<&str>, mode: &str, calls: Value) -> Value {
    sdk_with(dir, url, token, mode, calls, &[])
}

/// [`sdk`], with more environment (`SSL_CERT_FILE`: the roots it trusts).
fn sdk_with(
    dir: &Path,
    url: &str,
    token: Option<&str>,
    mode: &str,
    calls: Value,
    env: &[(&str, &Path)],
) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/http_host.py");
    let spec =
        json!({"url": url, "token": token, "mode": mode, "answer": "accept", "calls": calls});
    let output = std::process::Command::new(venv_bin("python"))
        .current_dir(dir)
        .envs(env.iter().copied())
        .arg(script)
        .arg(spec.to_string())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the SDK host failed\nstdout:\n{out}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(out.trim()).unwrap_or_else(|err| panic!("{err}: {out}"))
}

pub(crate) fn texts(report: &Value) -> Vec<String> {
    report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|result| result["text"][0].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// `hintgate token add NAME --scope SCOPE` on `dir/state`: the token.
pub(crate) fn add_token(dir: &Path, name: &str, scope: &str) -> String {
    let state = dir.join("state").display().to_string();
    let output = run(
        dir,
        &[
            "token",
            "add",
            name,
            "--scope",
            scope,
            "--state-dir",
            &state,
        ],
    );
    assert_eq!(code(&output), 0, "{output:?}");
    let token = stdout(&output).trim().to_owned();
    assert!(token.starts_with("hgt_"), "{token}");
    token
}

#[test]
fn sdk_hosts_of_both_eras_share_one_gateway_and_every_call_is_on_record() {
    let dir = tempfile::tempdir().unwrap();
    let gateway = Listening::start(dir.path(), &["--no-auth", "--trust", "trusted"]);
    let calls = json!([
        {"name": "echo", "arguments": {"text": "hi"}},
        {"name": "write_note", "arguments": {"text": "from http"}},
    ]);
    let legacy = sdk(dir.path(), &gateway.url, None, "legacy", calls.clone());
    assert_eq!(legacy["protocol"], "2025-11-25", "{legacy}");
    let modern = sdk(dir.path(), &gateway.url, None, "2026-07-28", calls);
    assert_eq!(modern["protocol"], "2026-07-28", "{modern}");
    for report in [&legacy, &modern] {
        let tools = report["tools"].as_array().unwrap();
        assert!(tools.contains(&json!("write_note")), "{report}");
        let texts = texts(report);
        assert!(texts[0].contains("\"text\": \"hi\""), "{report}");
        assert_eq!(texts[1], "noted", "{report}");
        // The write was asked about, over HTTP, and the person said yes.
        let asked = report["asked"].as_array().unwrap();
        assert!(
            asked.iter().any(|text| text
                .as_str()
                .unwrap()
                .contains("hintgate: approve this tool call?")),
            "{report}"
        );
    }
    // A legacy host gets a server's own question, marked as the server's.
    let asked = sdk(
        dir.path(),
        &gateway.url,
        None,
        "legacy",
        json!([{"name": "ask_host", "arguments": {}}]),
    );
    assert!(
        asked["asked"][0]
            .as_str()
            .unwrap()
            .starts_with("[server python3 asks]"),
        "{asked}"
    );
    gateway.stop();
    let records = log_json(dir.path(), &[]);
    let calls: Vec<&Value> = records
        .iter()
        .filter(|record| record["kind"] == "call")
        .collect();
    // Five calls, and the 2026-07-28 write twice: once asked (its outcome
    // `input-required`), once sent with the person's approval.
    assert_eq!(calls.len(), 6, "{records:?}");
    assert!(
        calls.iter().all(|record| record.get("host").is_none()),
        "without tokens no host is named: {calls:?}"
    );
}

#[test]
fn a_read_token_neither_sees_nor_runs_a_write_tool_and_a_write_token_does() {
    let dir = tempfile::tempdir().unwrap();
    let reader = add_token(dir.path(), "reader", "read");
    let writer = add_token(dir.path(), "writer", "write");
    let gateway = Listening::start(dir.path(), &["--trust", "trusted"]);

    let read = sdk(
        dir.path(),
        &gateway.url,
        Some(&reader),
        "legacy",
        json!([{"name": "echo", "arguments": {"text": "r"}}]),
    );
    let tools = read["tools"].as_array().unwrap();
    assert!(tools.contains(&json!("echo")), "{read}");
    assert!(!tools.contains(&json!("write_note")), "{read}");
    assert!(!tools.contains(&json!("hang")), "{read}");
    assert!(texts(&read)[0].contains("\"text\": \"r\""), "{read}");

    // Called anyway: refused with 403 and the scope that would do.
    let bearer = format!("Authorization: Bearer {reader}");
    let opened = gateway.post(std::slice::from_ref(&bearer), &initialize());
    assert!(opened.starts_with("HTTP/1.1 200"), "{opened}");
    let session = format!(
        "Mcp-Session-Id: {}",
        header(&opened, "mcp-session-id").unwrap()
    );
    let call = gateway.post(
        &[bearer.clone(), session.clone()],
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "write_note", "arguments": {"text": "no"}}}),
    );
    assert!(call.starts_with("HTTP/1.1 403"), "{call}");
    let challenge = header(&call, "www-authenticate").unwrap();
    assert!(
        challenge.contains("error=\"insufficient_scope\""),
        "{challenge}"
    );
    assert!(challenge.contains("scope=\"write\""), "{challenge}");
    let refused = body(&call);
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert_eq!(
        refused["result"]["_meta"]["hintgate/decision"]["reasons"][0],
        "scope-read-only"
    );

    let write = sdk(
        dir.path(),
        &gateway.url,
        Some(&writer),
        "legacy",
        json!([{"name": "write_note", "arguments": {"text": "yes"}}]),
    );
    assert!(
        write["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("write_note")),
        "{write}"
    );
    assert_eq!(texts(&write)[0], "noted", "{write}");

    // A revoked token is refused from its next request on.
    let state = dir.path().join("state").display().to_string();
    let revoked = run(
        dir.path(),
        &["token", "revoke", "reader", "--state-dir", &state],
    );
    assert_eq!(code(&revoked), 0);
    let after = gateway.post(
        &[bearer, session],
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}),
    );
    assert!(after.starts_with("HTTP/1.1 401"), "{after}");
    gateway.stop();
    let records = log_json(dir.path(), &[]);
    let refusal = records
        .iter()
        .find(|record| {
            record["kind"] == "call"
                && record["tool"] == "write_note"
                && record["verdict"] == "deny"
        })
        .unwrap_or_else(|| panic!("{records:?}"));
    assert_eq!(refusal["reasons"][0], "scope-read-only", "{refusal}");
    // Each record names the token its host authenticated with.
    assert_eq!(refusal["host"], "reader", "{refusal}");
    assert!(
        records.iter().any(|record| record["kind"] == "call"
            && record["tool"] == "write_note"
            && record["host"] == "writer"),
        "{records:?}"
    );
}

#[test]
fn foreign_origins_and_hosts_missing_or_wrong_tokens_and_others_sessions_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let alice = add_token(dir.path(), "alice", "write");
    let bob = add_token(dir.path(), "bob", "write");
    let gateway = Listening::start(dir.path(), &["--trust", "trusted"]);
    let alice_auth = format!("Authorization: Bearer {alice}");

    let none = gateway.post(&[], &initialize());
    assert!(none.starts_with("HTTP/1.1 401"), "{none}");
    assert!(
        header(&none, "www-authenticate")
            .unwrap()
            .starts_with("Bearer")
    );
    let wrong = gateway.post(
        &["Authorization: Bearer hgt_0000".to_owned()],
        &initialize(),
    );
    assert!(wrong.starts_with("HTTP/1.1 401"), "{wrong}");

    let foreign = gateway.post(
        &[alice_auth.clone(), "Origin: http://evil.example".to_owned()],
        &initialize(),
    );
    assert!(foreign.starts_with("HTTP/1.1 403"), "{foreign}");
    let own_origin = gateway.post(
        &[alice_auth.clone(), format!("Origin: {}", gateway.base())],
        &initialize(),
    );
    assert!(own_origin.starts_with("HTTP/1.1 200"), "{own_origin}");

    // DNS rebinding: a name that resolves to loopback is not this gateway's.
    let rebound = http(
        &gateway.base(),
        &format!(
            "POST /mcp HTTP/1.1\r\nHost: evil.example:80\r\nContent-Type: application/json\r\n{alice_auth}\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
        ),
    );
    assert!(rebound.starts_with("HTTP/1.1 403"), "{rebound}");

    // Alice's session is not Bob's, and an unknown one is no one's.
    let session = header(&own_origin, "mcp-session-id").unwrap().to_owned();
    assert_eq!(session.len(), 64, "{session}");
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let mine = gateway.post(
        &[alice_auth.clone(), format!("Mcp-Session-Id: {session}")],
        &list,
    );
    assert!(mine.starts_with("HTTP/1.1 200"), "{mine}");
    let theirs = gateway.post(
        &[
            format!("Authorization: Bearer {bob}"),
            format!("Mcp-Session-Id: {session}"),
        ],
        &list,
    );
    assert!(theirs.starts_with("HTTP/1.1 404"), "{theirs}");
    let missing = gateway.post(std::slice::from_ref(&alice_auth), &list);
    assert!(missing.starts_with("HTTP/1.1 400"), "{missing}");

    // DELETE ends it.
    let deleted = http(
        &gateway.base(),
        &format!(
            "DELETE /mcp HTTP/1.1\r\nHost: {}\r\n{alice_auth}\r\nMcp-Session-Id: {session}\r\nConnection: close\r\n\r\n",
            gateway.host()
        ),
    );
    assert!(deleted.starts_with("HTTP/1.1 204"), "{deleted}");
    let gone = gateway.post(&[alice_auth, format!("Mcp-Session-Id: {session}")], &list);
    assert!(gone.starts_with("HTTP/1.1 404"), "{gone}");
}

#[test]
fn a_2026_request_whose_headers_disagree_with_its_body_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let gateway = Listening::start(dir.path(), &["--no-auth", "--trust", "trusted"]);
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let call = |name: &str| {
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": name, "arguments": {"text": "x"}, "_meta": meta}})
    };
    let headers = |method: &str, name: &str| {
        vec![
            "MCP-Protocol-Version: 2026-07-28".to_owned(),
            format!("Mcp-Method: {method}"),
            format!("Mcp-Name: {name}"),
        ]
    };
    // The header names a read, the body a write: refused before anything.
    let mismatch = gateway.post(&headers("tools/call", "echo"), &call("write_note"));
    assert!(mismatch.starts_with("HTTP/1.1 400"), "{mismatch}");
    assert_eq!(body(&mismatch)["error"]["code"], -32020, "{mismatch}");
    let method = gateway.post(&headers("tools/list", "echo"), &call("echo"));
    assert!(method.starts_with("HTTP/1.1 400"), "{method}");
    // The same in base64 form, agreeing: answered, under the host's id.
    let agreed = gateway.post(
        &[
            "MCP-Protocol-Version: 2026-07-28".to_owned(),
            "Mcp-Method: tools/call".to_owned(),
            "Mcp-Name: =?base64?ZWNobw==?=".to_owned(),
        ],
        &call("echo"),
    );
    assert!(agreed.starts_with("HTTP/1.1 200"), "{agreed}");
    let answer = body(&agreed);
    assert_eq!(answer["id"], 1, "{answer}");
    assert!(
        answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("\"text\": \"x\"")
    );
    // No GET or DELETE in this era.
    let get = http(
        &gateway.base(),
        &format!(
            "GET /mcp HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\nConnection: close\r\n\r\n",
            gateway.host()
        ),
    );
    assert!(get.starts_with("HTTP/1.1 405"), "{get}");
}

#[test]
fn listening_needs_loopback_or_listen_public_and_a_way_to_authenticate() {
    let dir = tempfile::tempdir().unwrap();
    let server = fixture_server();
    let state = dir.path().join("state").display().to_string();
    // `hintgate run --state-dir STATE FLAGS -- python3 SERVER`: must not
    // start; its stderr.
    let refused = |flags: &[&str]| {
        let mut args = vec!["run", "--state-dir", &state];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--", "python3", &server]);
        let output = run(dir.path(), &args);
        assert_ne!(code(&output), 0, "{output:?}");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let beyond = refused(&["--listen", "0.0.0.0:0"]);
    assert!(beyond.contains("--listen-public"), "{beyond}");
    let no_token = refused(&["--listen", "127.0.0.1:0"]);
    assert!(no_token.contains("hintgate token add"), "{no_token}");
    let public_open = refused(&["--listen", "0.0.0.0:0", "--listen-public", "--no-auth"]);
    assert!(public_open.contains("--no-auth"), "{public_open}");
}

#[test]
fn a_servers_question_never_reaches_a_session_it_may_not_be_for() {
    let dir = tempfile::tempdir().unwrap();
    let gateway = Listening::start_with(
        dir.path(),
        &["--no-auth", "--trust", "trusted", "--call-timeout", "5"],
        &[],
    );
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "raw", "version": "1"}}});
    let open = |gateway: &Listening| {
        let opened = gateway.post(&[], &init);
        assert!(opened.starts_with("HTTP/1.1 200"), "{opened}");
        format!(
            "Mcp-Session-Id: {}",
            header(&opened, "mcp-session-id").unwrap()
        )
    };
    let a = open(&gateway);
    let b = open(&gateway);
    assert_ne!(a, b);
    // A's call holds the server: it asks A a question nobody answers, and
    // waits for the answer.
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                      "params": {"name": "ask_host", "arguments": {}}})
    .to_string();
    let held = read_until(
        &gateway.host(),
        &format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{a}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{call}",
            gateway.host(),
            call.len()
        ),
        "elicitation/create",
        None,
    );
    // A's call is in flight, and its question has gone out to A (A's stream
    // carries it): now B's call makes the server ask a question, which could
    // be for either, so it is asked of neither.
    let fixture_log = dir.path().join("fixture.log");
    held.found
        .recv_timeout(Duration::from_secs(60))
        .expect("A was asked its call's question");
    let asked = gateway.post(
        std::slice::from_ref(&b),
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "ask_host", "arguments": {}}}),
    );
    assert!(asked.starts_with("HTTP/1.1 200"), "{asked}");
    assert!(!asked.contains("elicitation/create"), "{asked}");
    let text = body(&asked)["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(text.contains("cannot tell which host"), "{text}");
    // A saw its own questions, and only them: one for each time its call
    // was sent (unanswered, it timed out and was sent once more), none of
    // B's.
    let held = held.rest.join().unwrap();
    let sends = std::fs::read_to_string(&fixture_log)
        .unwrap()
        .matches("call ask_host")
        .count();
    assert_eq!(
        held.matches("elicitation/create").count(),
        sends - 1,
        "{held}"
    );
    assert!(held.starts_with("HTTP/1.1 200"), "{held}");
    assert_eq!(body(&held)["result"]["isError"], true, "{held}");
}

#[test]
fn two_gateways_on_one_postgres_share_tokens_approvals_pins_and_one_log() {
    let Some(url) = hintgate_store::test_util::postgres_database() else {
        return;
    };
    // The team's key, made once and copied to every machine (here, one file).
    let team = tempfile::tempdir().unwrap();
    let key = team.path().join("audit.key").display().to_string();
    let token = {
        let output = run(
            team.path(),
            &[
                "token",
                "add",
                "alice",
                "--scope",
                "write",
                "--store",
                &url,
                "--audit-key",
                &key,
            ],
        );
        assert_eq!(code(&output), 0, "{output:?}");
        stdout(&output).trim().to_owned()
    };
    let flags = [
        "--trust",
        "trusted",
        "--ask-timeout",
        "600",
        "--store",
        url.as_str(),
        "--audit-key",
        key.as_str(),
    ];
    let (one_dir, two_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let one = Listening::start(one_dir.path(), &flags);
    let two = Listening::start(two_dir.path(), &flags);
    let bearer = format!("Authorization: Bearer {token}");

    // The token made once is good on both; the first gateway pins the
    // trusted server's tools, and the second finds them pinned.
    let read = sdk(
        two_dir.path(),
        &two.url,
        Some(&token),
        "legacy",
        json!([{"name": "echo", "arguments": {"text": "two"}}]),
    );
    assert!(texts(&read)[0].contains("two"), "{read}");

    // A host that cannot ask a person (no elicitation) calls a write on the
    // first gateway: the call waits in the team's approval queue.
    let opened = one.post(std::slice::from_ref(&bearer), &initialize());
    assert!(opened.starts_with("HTTP/1.1 200"), "{opened}");
    let session = format!(
        "Mcp-Session-Id: {}",
        header(&opened, "mcp-session-id").unwrap()
    );
    let (url_one, host_one) = (one.url.clone(), one.host());
    let (bearer_one, session_one) = (bearer.clone(), session.clone());
    let waiting = std::thread::spawn(move || {
        let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                          "params": {"name": "write_note", "arguments": {"text": "team"}}})
        .to_string();
        http(
            &url_one,
            &format!(
                "POST /mcp HTTP/1.1\r\nHost: {host_one}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{bearer_one}\r\n{session_one}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            ),
        )
    });
    // A person on another machine answers it from the team store.
    let elsewhere = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let id = loop {
        let listed = run(
            elsewhere.path(),
            &[
                "approvals",
                "--store",
                &url,
                "--audit-key",
                &key,
                "list",
                "--json",
            ],
        );
        assert_eq!(code(&listed), 0, "{listed:?}");
        if let Some(line) = stdout(&listed).lines().next() {
            let entry: Value = serde_json::from_str(line).unwrap();
            break entry["id"].to_string();
        }
        assert!(started.elapsed() < Duration::from_secs(60), "nothing waits");
        std::thread::sleep(Duration::from_millis(100));
    };
    let approved = run(
        elsewhere.path(),
        &[
            "approvals",
            "--store",
            &url,
            "--audit-key",
            &key,
            "approve",
            &id,
        ],
    );
    assert_eq!(code(&approved), 0, "{approved:?}");
    let answer = waiting.join().unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(
        body(&answer)["result"]["content"][0]["text"],
        "noted",
        "{answer}"
    );
    one.stop();
    two.stop();

    // One log: both gateways' records, each naming the token, and it
    // verifies.
    let log = run(
        elsewhere.path(),
        &["log", "--store", &url, "--audit-key", &key, "--json"],
    );
    assert_eq!(code(&log), 0, "{log:?}");
    let records: Vec<Value> = stdout(&log)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let calls: Vec<&Value> = records.iter().filter(|r| r["kind"] == "call").collect();
    assert_eq!(calls.len(), 2, "{records:?}");
    assert!(
        calls.iter().all(|record| record["host"] == "alice"),
        "{calls:?}"
    );
    let runs: std::collections::BTreeSet<&str> = calls
        .iter()
        .map(|record| record["session"].as_str().unwrap())
        .collect();
    assert_eq!(runs.len(), 2, "one record from each gateway: {calls:?}");
    let verified = run(
        elsewhere.path(),
        &["log", "--store", &url, "--audit-key", &key, "verify"],
    );
    assert_eq!(code(&verified), 0, "{verified:?}");
    // One set of pins: the second gateway's server is the first's, so it
    // was compared with the pins the first made, not pinned anew.
    let pins = run(
        elsewhere.path(),
        &[
            "pins",
            "--store",
            &url,
            "--audit-key",
            &key,
            "list",
            "--json",
        ],
    );
    assert_eq!(code(&pins), 0, "{pins:?}");
    let pins: Value = serde_json::from_str(&stdout(&pins)).unwrap();
    let echo: Vec<&Value> = pins
        .as_array()
        .unwrap()
        .iter()
        .filter(|pin| pin["tool"] == "echo")
        .collect();
    assert_eq!(echo.len(), 1, "{pins}");
    let echo_call = calls
        .iter()
        .find(|record| record["tool"] == "echo")
        .unwrap();
    assert_eq!(echo_call["pin"], echo[0]["digest"], "{echo_call} {pins}");
}

#[test]
fn https_serves_a_host_that_trusts_the_certificate_and_nothing_in_the_clear() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let made = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout",
        ])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let (cert_text, key_text) = (cert.display().to_string(), key.display().to_string());
    let gateway = Listening::start(
        dir.path(),
        &[
            "--no-auth",
            "--trust",
            "trusted",
            "--tls-cert",
            &cert_text,
            "--tls-key",
            &key_text,
        ],
    );
    assert!(
        gateway.url.starts_with("https://127.0.0.1:"),
        "{}",
        gateway.url
    );
    let report = sdk_with(
        dir.path(),
        &gateway.url,
        None,
        "legacy",
        json!([{"name": "echo", "arguments": {"text": "sealed"}}]),
        &[("SSL_CERT_FILE", cert.as_path())],
    );
    assert!(texts(&report)[0].contains("sealed"), "{report}");
    // The same port in the clear gets no MCP answer (the handshake fails,
    // and the connection ends with nothing or an alert).
    let clear = {
        use std::io::{Read as _, Write as _};
        let mut stream = std::net::TcpStream::connect(gateway.host()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let _ = stream.write_all(
            format!(
                "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}",
                gateway.host()
            )
            .as_bytes(),
        );
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        String::from_utf8_lossy(&answer).into_owned()
    };
    assert!(!clear.contains("jsonrpc"), "{clear}");

    // A certificate file that holds none is named, and nothing starts.
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    let empty_text = empty.display().to_string();
    let server = fixture_server();
    let state = dir.path().join("state2").display().to_string();
    let refused = run(
        dir.path(),
        &[
            "run",
            "--state-dir",
            &state,
            "--listen",
            "127.0.0.1:0",
            "--no-auth",
            "--tls-cert",
            &empty_text,
            "--tls-key",
            &key_text,
            "--",
            "python3",
            &server,
        ],
    );
    assert_ne!(code(&refused), 0);
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("holds no certificate"),
        "{refused:?}"
    );
}

/// An authorization server's keys, for the tests: signs ES256 access
/// tokens, and serves its JWKS on loopback.
struct TestIssuer {
    pair: ring::signature::EcdsaKeyPair,
    rng: ring::rand::SystemRandom,
}

impl TestIssuer {
    fn new() -> Self {
        use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        Self { pair, rng }
    }

    fn jwks(&self) -> Value {
        use base64::Engine as _;
        use ring::signature::KeyPair as _;
        let enc = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        let point = self.pair.public_key().as_ref();
        json!({"keys": [{"kty": "EC", "crv": "P-256", "kid": "test-key", "use": "sig", "alg": "ES256",
            "x": enc(&point[1..33]), "y": enc(&point[33..65])}]})
    }

    /// Serves the JWKS at `http://127.0.0.1:PORT/jwks` until the test ends.
    fn serve(&self) -> String {
        use std::io::{Read as _, Write as _};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/jwks", listener.local_addr().unwrap());
        let body = self.jwks().to_string();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf);
                let _ = stream.write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    )
                    .as_bytes(),
                );
            }
        });
        url
    }

    fn token(&self, claims: &Value) -> String {
        use base64::Engine as _;
        let enc = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        let header = json!({"alg": "ES256", "kid": "test-key", "typ": "at+jwt"});
        let signed = format!(
            "{}.{}",
            enc(header.to_string().as_bytes()),
            enc(claims.to_string().as_bytes())
        );
        let signature = self.pair.sign(&self.rng, signed.as_bytes()).unwrap();
        format!("{signed}.{}", enc(signature.as_ref()))
    }
}

#[test]
fn oauth_access_tokens_of_the_teams_issuer_give_their_scope_and_nothing_else_gets_in() {
    let dir = tempfile::tempdir().unwrap();
    let issuer = TestIssuer::new();
    let jwks = issuer.serve();
    let gateway = Listening::start(
        dir.path(),
        &[
            "--trust",
            "trusted",
            "--oauth-issuer",
            "https://as.test",
            "--oauth-jwks",
            &jwks,
        ],
    );
    let claims = |scope: &str, aud: &str| {
        json!({"iss": "https://as.test", "aud": aud, "sub": "alice", "scope": scope,
               "exp": 4_102_444_800_i64})
    };

    // Without a token: 401, and where to learn how to get one.
    let refused = gateway.post(&[], &initialize());
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    let challenge = header(&refused, "www-authenticate").unwrap();
    let metadata_url = format!("{}/.well-known/oauth-protected-resource", gateway.base());
    assert!(
        challenge.contains(&format!("resource_metadata=\"{metadata_url}\"")),
        "{challenge}"
    );
    let metadata = http(
        &gateway.base(),
        &format!(
            "GET /.well-known/oauth-protected-resource HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            gateway.host()
        ),
    );
    let metadata = body(&metadata);
    assert_eq!(metadata["resource"], gateway.url.as_str(), "{metadata}");
    assert_eq!(
        metadata["authorization_servers"],
        json!(["https://as.test"])
    );

    // A token for another resource, or signed by another key, gets nothing.
    let elsewhere = issuer.token(&claims("mcp:write", "https://other.test/mcp"));
    let other = gateway.post(
        &[format!("Authorization: Bearer {elsewhere}")],
        &initialize(),
    );
    assert!(other.starts_with("HTTP/1.1 401"), "{other}");
    let forged = TestIssuer::new().token(&claims("mcp:write", &gateway.url));
    let forged = gateway.post(&[format!("Authorization: Bearer {forged}")], &initialize());
    assert!(forged.starts_with("HTTP/1.1 401"), "{forged}");

    // `mcp:read` sees no write; `mcp:write` sees and runs it.
    let reader = issuer.token(&claims("mcp:read", &gateway.url));
    let read = sdk(dir.path(), &gateway.url, Some(&reader), "legacy", json!([]));
    let tools = read["tools"].as_array().unwrap();
    assert!(
        tools.contains(&json!("echo")) && !tools.contains(&json!("write_note")),
        "{read}"
    );
    let writer = issuer.token(&claims("openid mcp:write", &gateway.url));
    let write = sdk(
        dir.path(),
        &gateway.url,
        Some(&writer),
        "legacy",
        json!([{"name": "write_note", "arguments": {"text": "oauth"}}]),
    );
    assert_eq!(texts(&write)[0], "noted", "{write}");
    gateway.stop();
    let records = log_json(dir.path(), &[]);
    assert!(
        records
            .iter()
            .any(|record| record["tool"] == "write_note" && record["host"] == "oauth:alice"),
        "{records:?}"
    );
}

#[test]
fn what_a_host_sends_out_of_order_is_refused_and_two_hosts_with_one_id_each_get_their_own_answer() {
    let dir = tempfile::tempdir().unwrap();
    let gateway = Listening::start_with(
        dir.path(),
        &["--no-auth", "--trust", "trusted"],
        &["--slow"],
    );
    // A batch hides what a message is; it is not taken.
    let batch = gateway.post(&[], &json!([initialize()]));
    assert!(batch.starts_with("HTTP/1.1 400"), "{batch}");
    // A legacy message other than `initialize` needs its session.
    let orphan = gateway.post(
        &[],
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert!(orphan.starts_with("HTTP/1.1 400"), "{orphan}");
    // A stream this session never had is not resumed.
    let opened = gateway.post(&[], &initialize());
    let session = format!(
        "Mcp-Session-Id: {}",
        header(&opened, "mcp-session-id").unwrap()
    );
    let resumed = http(
        &gateway.base(),
        &format!(
            "GET /mcp HTTP/1.1\r\nHost: {}\r\n{session}\r\nAccept: text/event-stream\r\nLast-Event-ID: 999-1\r\nConnection: close\r\n\r\n",
            gateway.host()
        ),
    );
    assert!(resumed.starts_with("HTTP/1.1 404"), "{resumed}");

    // Two 2026-07-28 hosts without tokens share a session, and both use
    // id 1 at once: each gets its own answer under its own id.
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let call = |name: &str, arguments: Value| {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": name, "arguments": arguments, "_meta": meta}})
        .to_string();
        let (url, host) = (gateway.url.clone(), gateway.host());
        let name = name.to_owned();
        std::thread::spawn(move || {
            http(
                &url,
                &format!(
                    "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: {name}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                ),
            )
        })
    };
    let slow = call("slow", json!({"seconds": 1}));
    // The server has the slow call (and runs it for a second): the quick
    // one comes while it is in flight.
    fixture_logged(dir.path(), "call slow");
    let quick = call("echo", json!({"text": "quick"}));
    let (slow, quick) = (slow.join().unwrap(), quick.join().unwrap());
    let (slow, quick) = (body(&slow), body(&quick));
    assert_eq!(slow["id"], 1, "{slow}");
    assert_eq!(quick["id"], 1, "{quick}");
    let text = |answer: &Value| {
        answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    assert!(text(&quick).contains("quick"), "{quick}");
    assert!(!text(&slow).contains("quick"), "{slow}");
    assert_eq!(slow["result"]["isError"], false, "{slow}");
    // Their records name the id each host gave, as its own log shows it,
    // not the one the gateway used to keep them apart.
    gateway.stop();
    let records = log_json(dir.path(), &[]);
    for tool in ["slow", "echo"] {
        let record = records
            .iter()
            .find(|record| record["tool"] == tool)
            .unwrap_or_else(|| panic!("{tool}: {records:?}"));
        assert_eq!(record["request"], "1", "{record}");
    }
}

/// Opens a legacy session (2025-11-25) on `gateway`: its `Mcp-Session-Id`
/// header line.
fn legacy_session(gateway: &Listening) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    let opened = gateway.post(&[], &init);
    assert!(opened.starts_with("HTTP/1.1 200"), "{opened}");
    let session = format!(
        "Mcp-Session-Id: {}",
        header(&opened, "mcp-session-id").unwrap()
    );
    let version = "MCP-Protocol-Version: 2025-11-25".to_owned();
    let initialized = gateway.post(
        &[session.clone(), version],
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert!(initialized.starts_with("HTTP/1.1 202"), "{initialized}");
    session
}

/// Opens the session's standalone stream (GET) and reads it on a thread
/// until a line contains `needle` or 30 s pass: what it read.
///
/// It returns once the gateway has answered with its headers: the gateway
/// opens the stream before it answers, so whatever it sends the session
/// from then on goes to this stream.
fn read_stream_until(
    gateway: &Listening,
    session: &str,
    needle: &'static str,
) -> std::thread::JoinHandle<String> {
    let request = format!(
        "GET /mcp HTTP/1.1\r\nHost: {}\r\n{session}\r\nMCP-Protocol-Version: 2025-11-25\r\nAccept: text/event-stream\r\nConnection: close\r\n\r\n",
        gateway.host()
    );
    let reading = read_until(&gateway.host(), &request, "\r\n\r\n", Some(needle));
    reading
        .found
        .recv_timeout(Duration::from_secs(60))
        .expect("the gateway answered the GET");
    reading.rest
}

/// A request on a connection of its own, read on a thread.
struct Reading {
    /// Says once what was read contains the needle.
    found: std::sync::mpsc::Receiver<()>,
    /// Everything read, until it contains `stop`, the gateway closes the
    /// connection, or 30 s pass with nothing to read.
    rest: std::thread::JoinHandle<String>,
}

/// Sends `request` to `host` and reads the answer on a thread, saying when
/// it contains `needle`.
fn read_until(
    host: &str,
    request: &str,
    needle: &'static str,
    stop: Option<&'static str>,
) -> Reading {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(host).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let (tx, found) = std::sync::mpsc::channel();
    let rest = std::thread::spawn(move || {
        let mut read = Vec::new();
        let mut buf = [0_u8; 4096];
        let mut told = false;
        loop {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => read.extend_from_slice(&buf[..n]),
            }
            let text = String::from_utf8_lossy(&read);
            if !told && text.contains(needle) {
                told = true;
                let _ = tx.send(());
            }
            if stop.is_some_and(|stop| text.contains(stop)) {
                break;
            }
        }
        String::from_utf8_lossy(&read).into_owned()
    });
    Reading { found, rest }
}

/// Waits until the fixture server's log (`FIXTURE_LOG`) has a line that
/// contains `needle`: the server received what it names.
fn fixture_logged(dir: &Path, needle: &str) {
    let log = dir.join("fixture.log");
    let started = Instant::now();
    while !std::fs::read_to_string(&log).is_ok_and(|text| text.contains(needle)) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the server never logged `{needle}`"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `hintgate run --listen --no-auth --trust trusted` in front of the
/// conformance fixture (a 2026-07-28 server, with subscriptions and logs).
fn in_front_of_the_conformance_fixture(dir: &Path) -> Listening {
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/peers/conformance_server.py")
        .display()
        .to_string();
    let command = [venv_bin("python"), fixture];
    Listening::start_command(dir, &["--no-auth", "--trust", "trusted"], &command)
}

#[test]
fn a_legacy_hosts_subscriptions_and_log_level_reach_a_2026_07_28_server_for_its_session_only() {
    let dir = tempfile::tempdir().unwrap();
    let gateway = in_front_of_the_conformance_fixture(dir.path());
    let (a, b) = (legacy_session(&gateway), legacy_session(&gateway));
    let version = "MCP-Protocol-Version: 2025-11-25".to_owned();
    let request = |session: &str, id: u64, method: &str, params: Value| {
        let answer = gateway.post(
            &[session.to_owned(), version.clone()],
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        );
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        answer
    };
    // A's level asks for every message, B's for errors only: a call of
    // each gets the log messages its own level asks for, on its own stream
    // (neither has a standalone stream open yet).
    let set = request(&a, 2, "logging/setLevel", json!({"level": "debug"}));
    assert_eq!(body(&set)["result"], json!({}), "{set}");
    let set = request(&b, 2, "logging/setLevel", json!({"level": "error"}));
    assert_eq!(body(&set)["result"], json!({}), "{set}");
    let logged = request(
        &a,
        3,
        "tools/call",
        json!({"name": "test_tool_with_logging", "arguments": {}}),
    );
    assert_eq!(
        logged.matches("notifications/message").count(),
        3,
        "{logged}"
    );
    assert_eq!(body(&logged)["result"]["isError"], false, "{logged}");
    let quiet = request(
        &b,
        3,
        "tools/call",
        json!({"name": "test_tool_with_logging", "arguments": {}}),
    );
    assert!(!quiet.contains("notifications/message"), "{quiet}");
    assert_eq!(body(&quiet)["result"]["isError"], false, "{quiet}");

    let listed = request(&a, 4, "resources/list", json!({}));
    assert!(listed.contains("test://watched-resource"), "{listed}");
    let subscribed = request(
        &a,
        5,
        "resources/subscribe",
        json!({"uri": "test://watched-resource"}),
    );
    assert_eq!(body(&subscribed)["result"], json!({}), "{subscribed}");

    // B changes the resource: A, subscribed, is told on its stream; B,
    // which is not, is not (its call's stream would carry it).
    let told = read_stream_until(&gateway, &a, "notifications/resources/updated");
    let touched = request(
        &b,
        4,
        "tools/call",
        json!({"name": "test_touch_watched", "arguments": {}}),
    );
    assert_eq!(body(&touched)["result"]["isError"], false, "{touched}");
    assert!(!touched.contains("resources/updated"), "{touched}");
    let told = told.join().unwrap();
    assert!(
        told.contains("\"uri\":\"test://watched-resource\""),
        "{told}"
    );
    assert!(!told.contains("subscriptionId"), "{told}");

    let log = gateway.stop();
    assert!(!log.contains("panicked"), "{log}");
}

/// Connects to `gateway`, writes `head` (request line and headers), then
/// the chunks `body` gives until one cannot be written, and reads the
/// answer: what the gateway said before the host finished (or never
/// finished) sending.
fn answer_to_unfinished(gateway: &Listening, head: &str, body: &[Vec<u8>]) -> String {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(gateway.host()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.write_all(head.as_bytes()).unwrap();
    for chunk in body {
        if stream.write_all(chunk).is_err() {
            break;
        }
    }
    // The body's end is never sent: only a gateway that answers without
    // waiting for it answers at all.
    let mut answer = Vec::new();
    let mut buf = [0_u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
        }
        if answer.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    String::from_utf8_lossy(&answer).into_owned()
}

#[test]
fn a_body_over_max_message_bytes_is_refused_before_it_is_read_and_a_refused_host_costs_no_read() {
    let dir = tempfile::tempdir().unwrap();
    let token = add_token(dir.path(), "laptop", "write");
    let gateway = Listening::start(dir.path(), &["--trust", "trusted"]);
    let limit: usize = 16 * 1024 * 1024;
    let head = |headers: &str| {
        format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{headers}\r\n\r\n",
            gateway.host()
        )
    };
    let bearer = format!("Authorization: Bearer {token}");
    // A length over the limit, and none of the body: 413 at once.
    let declared = answer_to_unfinished(
        &gateway,
        &head(&format!("{bearer}\r\nContent-Length: {}", limit + 1)),
        &[],
    );
    assert!(declared.starts_with("HTTP/1.1 413"), "{declared}");
    // A chunked body is refused once it passes the limit, without its
    // last chunk ever coming: exactly one byte over it is sent.
    let mut chunks = Vec::new();
    let piece = 1024 * 1024;
    for _ in 0..(limit / piece) {
        let mut chunk = format!("{piece:x}\r\n").into_bytes();
        chunk.extend(std::iter::repeat_n(b' ', piece));
        chunk.extend_from_slice(b"\r\n");
        chunks.push(chunk);
    }
    chunks.push(b"1\r\n \r\n".to_vec());
    let chunked = answer_to_unfinished(
        &gateway,
        &head(&format!("{bearer}\r\nTransfer-Encoding: chunked")),
        &chunks,
    );
    assert!(chunked.starts_with("HTTP/1.1 413"), "{chunked}");
    // A host without a token is refused without a read of its body: it
    // declares a megabyte and sends none, and its 401 comes anyway.
    let refused = answer_to_unfinished(&gateway, &head("Content-Length: 1048576"), &[]);
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    // A body within the limit is still taken.
    let opened = gateway.post(std::slice::from_ref(&bearer), &initialize());
    assert!(opened.starts_with("HTTP/1.1 200"), "{opened}");
    let log = gateway.stop();
    assert!(!log.contains("panicked"), "{log}");
}

#[test]
fn the_listen_table_of_the_configuration_serves_http_with_its_oauth_settings() {
    let dir = tempfile::tempdir().unwrap();
    let issuer = TestIssuer::new();
    let jwks = issuer.serve();
    std::fs::write(
        dir.path().join("hintgate.toml"),
        format!(
            "[listen]\naddress = \"127.0.0.1:0\"\noauth_issuer = \"https://as.test\"\noauth_jwks = \"{jwks}\"\noauth_read_scope = \"team:read\"\noauth_write_scope = \"team:write\"\n\n[servers.fx]\ncommand = \"python3\"\nargs = [\"{}\"]\ntrust = \"trusted\"\n",
            fixture_server()
        ),
    )
    .unwrap();
    // No `--listen`: the file's table makes the gateway listen.
    let gateway = Listening::spawn_args(
        dir.path(),
        &[
            "run".to_owned(),
            "--config".to_owned(),
            "hintgate.toml".to_owned(),
        ],
    );
    let claims = |scope: &str| {
        json!({"iss": "https://as.test", "aud": gateway.url, "sub": "bob", "scope": scope,
               "exp": 4_102_444_800_i64})
    };
    // The file's scope names give read and write; the defaults give nothing.
    let default_scope = issuer.token(&claims("mcp:write"));
    let refused = gateway.post(
        &[format!("Authorization: Bearer {default_scope}")],
        &initialize(),
    );
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    let writer = issuer.token(&claims("team:write"));
    let write = sdk(
        dir.path(),
        &gateway.url,
        Some(&writer),
        "legacy",
        json!([{"name": "fx__write_note", "arguments": {"text": "from the file"}}]),
    );
    assert_eq!(texts(&write)[0], "noted", "{write}");
    let reader = issuer.token(&claims("team:read"));
    let read = sdk(dir.path(), &gateway.url, Some(&reader), "legacy", json!([]));
    let tools = read["tools"].as_array().unwrap();
    assert!(
        tools.contains(&json!("fx__echo")) && !tools.contains(&json!("fx__write_note")),
        "{read}"
    );
    gateway.stop();
}

#[test]
fn config_check_names_the_file_line_and_key_of_every_listen_problem() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("hintgate.toml"),
        "[listen]\naddress = \"0.0.0.0:8787\"\ntls_key = \"key.pem\"\noauth_issuer = \"https://as.test\"\nheader_timeout_s = 0\nmax_unauthenticated = \"many\"\n",
    )
    .unwrap();
    let output = run(dir.path(), &["config", "check", "hintgate.toml"]);
    assert_eq!(code(&output), 64, "{output:?}");
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    for (place, key) in [
        ("hintgate.toml:2:", "listen.address"),
        ("hintgate.toml:3:", "listen.tls_key"),
        ("hintgate.toml:3:", "listen.tls_cert"),
        ("hintgate.toml:4:", "listen.oauth_jwks"),
        ("hintgate.toml:5:", "listen.header_timeout_s"),
        ("hintgate.toml:6:", "listen.max_unauthenticated"),
    ] {
        assert!(
            text.lines()
                .any(|line| line.contains(place) && line.contains(&format!("`{key}`"))),
            "{place} {key}:\n{text}"
        );
    }
}

#[test]
fn a_2025_11_25_hosts_event_streams_begin_with_a_priming_event_and_older_hosts_get_none() {
    let dir = tempfile::tempdir().unwrap();
    let gateway = in_front_of_the_conformance_fixture(dir.path());
    let session = legacy_session(&gateway);
    let post = |version: &str, id: u64, method: &str, params: Value| {
        let answer = gateway.post(
            &[session.clone(), format!("MCP-Protocol-Version: {version}")],
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        );
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        answer
    };
    // Each event's id and data, in order (the body is chunked: the chunk
    // sizes are lines of neither kind).
    let events = |answer: &str| -> Vec<(String, String)> {
        let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
        let mut found = Vec::new();
        let mut id = String::new();
        for line in body.lines() {
            if let Some(value) = line.strip_prefix("id:") {
                id = value.trim().to_owned();
            } else if let Some(value) = line.strip_prefix("data:") {
                found.push((std::mem::take(&mut id), value.trim().to_owned()));
            }
        }
        found
    };
    let set = post(
        "2025-11-25",
        2,
        "logging/setLevel",
        json!({"level": "debug"}),
    );
    // An answer with nothing before it is JSON: no stream, nothing to prime.
    assert_eq!(
        header(&set, "content-type"),
        Some("application/json"),
        "{set}"
    );
    // Log messages come before the answer, so it is a stream: its first
    // event has an id and no data, and the next events follow under the
    // same stream's numbers.
    let call = json!({"name": "test_tool_with_logging", "arguments": {}});
    let streamed = post("2025-11-25", 3, "tools/call", call.clone());
    let found = events(&streamed);
    let (prime_id, prime_data) = &found[0];
    assert!(prime_id.ends_with("-0"), "{streamed}");
    assert_eq!(prime_data, "", "{streamed}");
    let stream = prime_id.trim_end_matches("-0");
    assert!(
        found[1..]
            .iter()
            .all(|(id, data)| id.starts_with(&format!("{stream}-")) && !data.is_empty()),
        "{streamed}"
    );
    assert!(found.last().unwrap().1.contains("\"id\":3"), "{streamed}");
    // A host of an earlier version could read the empty data as a
    // message: it gets none.
    let older = post("2025-06-18", 4, "tools/call", call);
    let found = events(&older);
    assert!(found.iter().all(|(_, data)| !data.is_empty()), "{older}");
    assert!(found[0].1.contains("notifications/message"), "{older}");
    // The standalone stream is primed too.
    let opened = read_stream_until(&gateway, &session, "data: \n\n");
    let opened = opened.join().unwrap();
    assert!(opened.contains("text/event-stream"), "{opened}");
    let first = events(&opened);
    assert!(
        first[0].0.ends_with("-0") && first[0].1.is_empty(),
        "{opened}"
    );
}

/// How many files the process `pid` has open.
fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// The resident memory of the process `pid`, in KiB.
fn resident_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn a_flood_of_connections_that_never_authenticate_and_a_slow_body_cannot_lock_hosts_out() {
    use std::io::{Read as _, Write as _};
    let dir = tempfile::tempdir().unwrap();
    let token = add_token(dir.path(), "laptop", "write");
    std::fs::write(
        dir.path().join("hintgate.toml"),
        format!(
            "[listen]\naddress = \"127.0.0.1:0\"\nheader_timeout_s = 5\nbody_timeout_s = 2\nmax_unauthenticated = 64\nmax_unauthenticated_per_address = 32\n\n[servers.fx]\ncommand = \"python3\"\nargs = [\"{}\"]\ntrust = \"trusted\"\n",
            fixture_server()
        ),
    )
    .unwrap();
    let gateway = Listening::spawn_args(
        dir.path(),
        &[
            "run".to_owned(),
            "--config".to_owned(),
            "hintgate.toml".to_owned(),
        ],
    );
    let pid = gateway.child.id();
    let bearer = format!("Authorization: Bearer {token}");

    // 2,000 connections that send half a request and then nothing, as a
    // client that means to hold the gateway's open files would.
    let half = format!("POST /mcp HTTP/1.1\r\nHost: {}\r\n", gateway.host());
    let mut flood = Vec::new();
    for _ in 0..2000 {
        if let Ok(mut stream) = std::net::TcpStream::connect(gateway.host()) {
            let _ = stream.write_all(half.as_bytes());
            flood.push(stream);
        }
    }
    assert!(flood.len() >= 1900, "only {} connected", flood.len());

    // A host still gets in, behind all of them in the listener's queue: by
    // the time it is answered, every connection of the flood was taken.
    let opened = gateway.post(std::slice::from_ref(&bearer), &initialize());
    assert!(opened.starts_with("HTTP/1.1 200"), "{opened}");
    let files = open_files(pid);
    assert!(
        files < 200,
        "the gateway holds {files} files with the flood open: the connections that never authenticated are not bounded"
    );
    // And a real host's calls go through while the flood is still open.
    let write = sdk(
        dir.path(),
        &gateway.url,
        Some(&token),
        "legacy",
        json!([{"name": "fx__write_note", "arguments": {"text": "under a flood"}}]),
    );
    assert_eq!(texts(&write)[0], "noted", "{write}");
    let rss = resident_kib(pid);
    assert!(
        rss < 128 * 1024,
        "the gateway's resident memory is {rss} KiB"
    );
    drop(flood);

    // A host that authenticates and then sends its body slowly is answered
    // 408 once its body sends nothing for `body_timeout_s`.
    let slow = answer_to_unfinished(
        &gateway,
        &format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{bearer}\r\nContent-Length: 100\r\n\r\n",
            gateway.host()
        ),
        &[b"{\"jsonrpc\":".to_vec()],
    );
    assert!(slow.starts_with("HTTP/1.1 408"), "{slow}");

    // A connection that never finishes its headers is closed at
    // `header_timeout_s`, with nothing passed to the gateway.
    let mut idle = std::net::TcpStream::connect(gateway.host()).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    idle.write_all(half.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let ended = idle.read_to_end(&mut answer);
    assert!(
        ended.is_ok() || !answer.is_empty(),
        "the half-sent request was not closed: {ended:?}"
    );
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer}"
    );

    let log = gateway.stop();
    assert!(
        log.contains("connections that have not authenticated are kept"),
        "the bound hit is not logged: {log}"
    );
    assert!(
        log.contains("sent no complete request headers within 5 s"),
        "{log}"
    );
    assert!(log.contains("sent nothing for 2 s"), "{log}");
    assert!(!log.contains("panicked"), "{log}");
}

/// [`sdk`] for a host that answers a question only once another host was
/// asked one too (`common.py`'s `meet`): its file `mine`, the other's
/// `theirs`, in `dir`.
fn sdk_meeting(dir: &Path, url: &str, mine: &str, theirs: &str, calls: &Value) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/http_host.py");
    let spec = json!({"url": url, "token": null, "mode": "legacy", "answer": "accept",
        "calls": calls,
        "meet": {"mine": dir.join(mine), "theirs": dir.join(theirs)}});
    let output = std::process::Command::new(venv_bin("python"))
        .current_dir(dir)
        .arg(script)
        .arg(spec.to_string())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the SDK host failed\nstdout:\n{out}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(out.trim()).unwrap_or_else(|err| panic!("{err}: {out}"))
}

#[test]
fn a_streamable_http_servers_question_reaches_the_host_whose_call_its_stream_answers() {
    // A legacy server over Streamable HTTP asks its question on the event
    // stream that answers the call's POST. Two hosts' calls are in flight
    // on it at once (each host answers only once both are asked), so
    // nothing but that stream says whose question it is; before, the
    // gateway refused both as "several host sessions use this server".
    let dir = tempfile::tempdir().unwrap();
    let mut command = std::process::Command::new(venv_bin("python"));
    command.current_dir(dir.path()).args([
        crate::conformance::fixture().as_str(),
        "--http",
        "0",
        "--legacy-only",
    ]);
    let server = crate::conformance::Served::start(
        command,
        crate::conformance::FIXTURE_SERVING,
        dir.path().join("fixture.stderr"),
    );
    let gateway = Listening::spawn_args(
        dir.path(),
        &[
            "run",
            "--listen",
            "127.0.0.1:0",
            "--no-auth",
            "--trust",
            "trusted",
            "--url",
            &server.url,
        ]
        .map(str::to_owned),
    );
    let url = format!("{}/mcp", gateway.base());
    let call = |who: &str| json!([{"name": "test_elicitation", "arguments": {"message": format!("a question for {who}")}}]);
    let (a, b) = std::thread::scope(|scope| {
        let a = scope.spawn(|| sdk_meeting(dir.path(), &url, "a", "b", &call("a")));
        let b = scope.spawn(|| sdk_meeting(dir.path(), &url, "b", "a", &call("b")));
        (a.join().unwrap(), b.join().unwrap())
    });
    for (who, report) in [("a", &a), ("b", &b)] {
        let asked = report["asked"].as_array().unwrap();
        assert_eq!(asked.len(), 1, "{who}: {report}");
        // Each host was asked its own call's question, marked as the
        // server's.
        let question = asked[0].as_str().unwrap();
        assert!(
            question.contains(&format!("a question for {who}")),
            "{who}: {question}"
        );
        assert_eq!(report["results"][0]["isError"], false, "{who}: {report}");
        assert!(
            texts(report)[0].contains("action=accept"),
            "{who}: {report}"
        );
    }
    let log = gateway.stop();
    assert!(!log.contains("cannot tell which host"), "{log}");
}
