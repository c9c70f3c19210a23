//! The audit log end to end: every call recorded, `hintgate log` querying
//! and following it while a real gateway writes, configured redaction, and
//! the log surviving `kill -9`.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::host::{Host, fixture_server, is_error, text};

/// Bounds a wait that should end; no test asserts on time.
const PATIENCE: Duration = Duration::from_secs(30);

/// A wrap-mode session in front of the fixture server, state in `dir/state`.
fn session(dir: &std::path::Path, flags: &[&str], env: &[(&str, &str)]) -> Host {
    let server = fixture_server();
    let mut args = vec!["run", "--name", "fx"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--", "python3", server.as_str()]);
    Host::start(dir, &args, env)
}

/// `hintgate log --json [extra]` as one JSON value per line.
fn log_json(dir: &std::path::Path, extra: &[&str]) -> Vec<Value> {
    let state = dir.join("state").display().to_string();
    let mut args = vec!["log", "--state-dir", state.as_str(), "--json"];
    args.extend_from_slice(extra);
    let output = crate::util::run(dir, &args);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        crate::util::stderr(&output)
    );
    crate::util::stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[test]
fn a_call_to_an_unknown_tool_is_recorded_as_a_deny_before_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let mut host = session(dir.path(), &["--trust", "trusted"], &[]);
    host.initialize(json!({}));
    let unknown = host.request(
        "tools/call",
        json!({"name": "no_such_tool", "arguments": {"password": "hunter2"}}),
    );
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    assert!(
        unknown["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown tool `no_such_tool`")
    );
    let nameless = host.request("tools/call", json!({"arguments": {}}));
    assert_eq!(nameless["error"]["code"], -32602, "{nameless}");
    assert!(text(&host.call("echo", json!({"text": "hi"}))).contains("hi"));

    // The answers came after their records were durable: the log holds them
    // while the gateway still runs.
    let records = log_json(dir.path(), &[]);
    assert_eq!(records.len(), 3, "one record per call: {records:?}");
    assert_eq!(records[0]["tool"], "no_such_tool");
    assert_eq!(records[0]["verdict"], "deny");
    assert_eq!(records[0]["reasons"], json!(["unknown-tool"]));
    assert_eq!(records[0]["outcome"], "denied");
    assert_eq!(records[0]["arguments"], json!({"password": "[redacted]"}));
    assert_eq!(records[1]["tool"], "");
    assert_eq!(records[1]["reasons"], json!(["unknown-tool"]));
    assert_eq!(records[2]["tool"], "echo");
    assert!(host.close().success());
}

#[test]
fn since_leaves_out_older_calls() {
    let dir = tempfile::tempdir().unwrap();
    let mut host = session(dir.path(), &["--trust", "trusted"], &[]);
    host.initialize(json!({}));
    host.call("echo", json!({"text": "one"}));
    host.call("echo", json!({"text": "two"}));
    assert!(host.close().success());

    let all = log_json(dir.path(), &[]);
    assert_eq!(all.len(), 2);
    // The first record's own time, as the table prints it (RFC 3339, UTC).
    let state = dir.path().join("state").display().to_string();
    let table = crate::util::run(dir.path(), &["log", "--state-dir", &state]);
    let first = crate::util::stdout(&table)
        .lines()
        .next()
        .unwrap()
        .to_owned();
    let time = first.split_whitespace().nth(1).unwrap().to_owned();
    assert_eq!(log_json(dir.path(), &["--since", &time]).len(), 2);
    assert_eq!(log_json(dir.path(), &["--since", "1h"]).len(), 2);
    assert_eq!(
        log_json(dir.path(), &["--since", "2999-01-01T00:00:00Z"]).len(),
        0
    );
    let bad = crate::util::run(
        dir.path(),
        &["log", "--state-dir", &state, "--since", "yesterday"],
    );
    assert_eq!(bad.status.code(), Some(64));
    assert!(
        crate::util::stderr(&bad).contains("neither an RFC 3339 time"),
        "{}",
        crate::util::stderr(&bad)
    );
}

/// `hintgate log --follow` running beside the gateway, its lines on a channel.
struct Follower {
    child: Child,
    lines: Option<mpsc::Receiver<String>>,
}

impl Follower {
    fn start(dir: &std::path::Path, extra: &[&str]) -> Self {
        let mut child = crate::util::hintgate()
            .current_dir(dir)
            .args(["log", "--follow"])
            .args(extra)
            .env("HINTGATE_STATE_DIR", dir.join("state"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Self {
            child,
            lines: Some(lines),
        }
    }

    fn next(&self) -> String {
        self.lines
            .as_ref()
            .unwrap()
            .recv_timeout(PATIENCE)
            .expect("log --follow printed a line")
    }

    fn next_json(&self) -> Value {
        serde_json::from_str(&self.next()).unwrap()
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn follow_prints_each_record_as_it_is_committed() {
    let dir = tempfile::tempdir().unwrap();
    let mut host = session(dir.path(), &["--trust", "trusted"], &[]);
    host.respond_with(|_| json!({"action": "decline"}));
    host.initialize(json!({"elicitation": {}}));
    host.call("echo", json!({"text": "before"}));

    let json_follow = Follower::start(dir.path(), &["--json", "--tool", "echo"]);
    let table_follow = Follower::start(dir.path(), &[]);
    // What was there already, with its outcome.
    let old = json_follow.next_json();
    assert_eq!(
        (old["kind"].as_str(), old["outcome"].as_str()),
        (Some("call"), Some("ok")),
        "{old}"
    );
    assert!(
        table_follow
            .next()
            .contains("fx / echo  allow  (read-only)  by read-only  -> ok")
    );

    // New calls, while both follow: each call's record, then its outcome.
    for n in 0..3 {
        assert!(text(&host.call("echo", json!({"text": format!("call {n}")}))).contains("call"));
        let call = json_follow.next_json();
        assert_eq!(call["kind"], "call", "{call}");
        assert_eq!(call["arguments"]["text"], format!("call {n}"));
        let outcome = json_follow.next_json();
        assert_eq!(outcome["kind"], "outcome", "{outcome}");
        assert_eq!(outcome["call"], call["seq"]);
        assert_eq!(outcome["outcome"], "ok");
        assert!(table_follow.next().contains("fx / echo  allow"));
        assert!(
            table_follow
                .next()
                .contains(&format!("call {} ended  -> ok", call["seq"]))
        );
    }
    // A refusal ends at the gateway: one line, with its outcome; the JSON
    // follower filters it out (`--tool echo`).
    assert!(is_error(&host.call("write_note", json!({"text": "x"}))));
    assert!(
        table_follow
            .next()
            .contains("fx / write_note  ask  (not-read-only)  by gateway  -> denied")
    );
    host.call("echo", json!({"text": "after"}));
    assert_eq!(json_follow.next_json()["arguments"]["text"], "after");

    // The reader goes away: the follower stops at its next write.
    let mut json_follow = json_follow;
    drop(json_follow.lines.take());
    let mut waited = Duration::ZERO;
    let status = loop {
        if let Some(status) = json_follow.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            waited < PATIENCE,
            "log --follow did not stop without a reader"
        );
        host.call("echo", json!({"text": "nobody reads this"}));
        std::thread::sleep(Duration::from_millis(50));
        waited += Duration::from_millis(50);
    };
    assert!(status.success(), "{status:?}");
    assert!(host.close().success());
}
