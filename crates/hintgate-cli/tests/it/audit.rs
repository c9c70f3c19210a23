//! The audit log end to end: every call recorded, `hintgate log` querying
//! and following it while a real gateway writes, configured redaction, and
//! the log surviving `kill -9`.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::host::{Host, fixture_server, is_error, text};
use crate::util::{Rng, log_json};

/// Bounds a wait that should end; no test asserts on time.
const PATIENCE: Duration = Duration::from_secs(30);

/// A wrap-mode session in front of the fixture server, state in `dir/state`.
fn session(dir: &std::path::Path, flags: &[&str], env: &[(&str, &str)]) -> Host {
    session_with(dir, flags, &[], env)
}

/// The same, with flags for the fixture server.
fn session_with(
    dir: &std::path::Path,
    flags: &[&str],
    server_flags: &[&str],
    env: &[(&str, &str)],
) -> Host {
    let mut named = vec!["--name", "fx"];
    named.extend_from_slice(flags);
    crate::util::wrap_fixture(dir, &named, server_flags, env)
}

/// Asserts that `value` is a redaction marker for a value of `length`
/// characters: `[redacted len=LENGTH hmac=` and 16 hexadecimal digits.
fn assert_marker(value: &Value, length: usize) {
    let text = value.as_str().unwrap_or_default();
    let digest = text
        .strip_prefix(&format!("[redacted len={length} hmac="))
        .and_then(|rest| rest.strip_suffix(']'));
    assert!(
        digest.is_some_and(|hex| hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit())),
        "not a marker for {length} characters: {value}"
    );
}

#[test]
fn a_call_to_an_unknown_tool_is_recorded_as_a_deny_before_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let mut host = session(dir.path(), &["--trust", "trusted"], &[]);
    host.initialize(json!({}));
    let unknown = host.request(
        "tools/call",
        json!({"name": "no_such_tool", "arguments": {"password": "hunter2", "key": "AKIAIOSFODNN7EXAMPLE"}}),
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
    // A credential is redacted by its value, whatever its name; a name alone
    // keeps nothing out of the log.
    assert_eq!(records[0]["arguments"]["password"], "hunter2");
    assert_marker(&records[0]["arguments"]["key"], 20);
    assert_eq!(records[1]["tool"], "");
    assert_eq!(records[1]["reasons"], json!(["malformed-request"]));
    assert_eq!(records[2]["tool"], "echo");
    assert!(host.close().success());
}

#[test]
fn a_call_to_a_server_that_cannot_start_is_recorded_as_a_deny() {
    let dir = tempfile::tempdir().unwrap();
    let server = fixture_server();
    let args = [
        "run",
        "--name",
        "fx",
        "--",
        "python3",
        server.as_str(),
        "--crash-at-start",
    ];
    let mut host = Host::start(dir.path(), &args, &[]);
    // Its initialize fails; the host calls a tool anyway.
    host.initialize(json!({}));
    let refused = host.call("echo", json!({"text": "x"}));
    assert!(is_error(&refused), "{refused}");
    assert!(
        text(&refused).contains("server `fx` is not available"),
        "{refused}"
    );
    let records = log_json(dir.path(), &[]);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(
        (
            records[0]["tool"].as_str(),
            records[0]["verdict"].as_str(),
            records[0]["outcome"].as_str()
        ),
        (Some("echo"), Some("deny"), Some("denied"))
    );
    assert_eq!(records[0]["reasons"], json!(["server-unavailable"]));
}

#[test]
fn a_call_in_flight_when_the_gateway_is_stopped_ends_with_shutdown_on_record() {
    for signal in ["TERM", "INT", "HUP"] {
        let dir = tempfile::tempdir().unwrap();
        let calls = dir.path().join("calls.log");
        let calls_text = calls.display().to_string();
        let mut host = session_with(
            dir.path(),
            &["--trust", "trusted"],
            &["--slow"],
            &[("FIXTURE_LOG", &calls_text)],
        );
        host.initialize(json!({}));
        host.send(
            &json!({"jsonrpc": "2.0", "id": "slow-1", "method": "tools/call",
                          "params": {"name": "slow", "arguments": {"seconds": 60}}}),
        );
        // The call reached the server (its record is durable by then).
        let deadline = std::time::Instant::now() + PATIENCE;
        while !std::fs::read_to_string(&calls)
            .unwrap_or_default()
            .contains("call slow")
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the call never arrived"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        host.signal(signal);
        // The host is told, and the gateway exits cleanly.
        let answer = host.next_response();
        assert_eq!(answer["id"], "slow-1", "{signal}: {answer}");
        assert!(is_error(&answer["result"]), "{signal}: {answer}");
        assert!(
            text(&answer["result"]).contains("shut down"),
            "{signal}: {answer}"
        );
        let status = host.wait();
        assert_eq!(status.code(), Some(0), "{signal}: {status:?}");
        let records = log_json(dir.path(), &[]);
        assert_eq!(records.len(), 1, "{signal}: {records:?}");
        assert_eq!(records[0]["tool"], "slow");
        assert_eq!(records[0]["outcome"], "shutdown", "{signal}: {records:?}");
    }
}

#[test]
fn a_second_signal_while_the_gateway_stops_loses_no_ending() {
    // A service manager that sends TERM and then INT, or a person who
    // presses Ctrl-C twice: the second comes while the endings are being
    // written, and must neither kill the gateway nor cut them short.
    for (first, second) in [("TERM", "INT"), ("INT", "INT"), ("HUP", "TERM")] {
        let dir = tempfile::tempdir().unwrap();
        let calls = dir.path().join("calls.log");
        let calls_text = calls.display().to_string();
        let mut host = session_with(
            dir.path(),
            &["--trust", "trusted"],
            &["--slow"],
            &[("FIXTURE_LOG", &calls_text)],
        );
        host.initialize(json!({}));
        host.send(
            &json!({"jsonrpc": "2.0", "id": "slow-1", "method": "tools/call",
                          "params": {"name": "slow", "arguments": {"seconds": 60}}}),
        );
        let deadline = std::time::Instant::now() + PATIENCE;
        while !std::fs::read_to_string(&calls)
            .unwrap_or_default()
            .contains("call slow")
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the call never arrived"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        host.signal(first);
        host.signal(second);
        let status = host.wait();
        assert_eq!(status.code(), Some(0), "{first} {second}: {status:?}");
        let records = log_json(dir.path(), &[]);
        assert_eq!(records.len(), 1, "{first} {second}: {records:?}");
        assert_eq!(
            records[0]["outcome"], "shutdown",
            "{first} {second}: {records:?}"
        );
    }
}

/// Waits until the fixture server's log at `calls` names `what`.
fn wait_for_server(calls: &std::path::Path, what: &str) {
    let deadline = std::time::Instant::now() + PATIENCE;
    while !std::fs::read_to_string(calls)
        .unwrap_or_default()
        .contains(what)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "`{what}` never reached the server"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_call_a_killed_gateway_left_in_flight_is_interrupted_and_a_live_gateways_is_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let calls = |name: &str| dir.path().join(format!("{name}.log"));
    let slow = |host: &mut Host, id: &str| {
        host.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": "slow", "arguments": {"seconds": 60}}}));
    };
    // Two gateways on one state directory, each with a call at its server.
    let a_log = calls("a").display().to_string();
    let mut a = session_with(
        dir.path(),
        &["--trust", "trusted"],
        &["--slow"],
        &[("FIXTURE_LOG", &a_log)],
    );
    a.initialize(json!({}));
    slow(&mut a, "in-a");
    wait_for_server(&calls("a"), "call slow");
    let b_log = calls("b").display().to_string();
    let mut b = session_with(
        dir.path(),
        &["--trust", "trusted"],
        &["--slow"],
        &[("FIXTURE_LOG", &b_log)],
    );
    b.initialize(json!({}));
    slow(&mut b, "in-b");
    wait_for_server(&calls("b"), "call slow");

    // A crashes. The next start on the directory (here `hintgate log`,
    // which imports as a gateway's start does) ends A's call on record, and
    // leaves B's alone: B's journal is live.
    a.kill();
    let records = log_json(dir.path(), &[]);
    let outcome_of = |records: &[Value], request: &str| -> Vec<String> {
        records
            .iter()
            .filter(|record| record["request"] == format!("\"{request}\""))
            .map(|record| record["outcome"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    assert_eq!(outcome_of(&records, "in-a"), ["interrupted"], "{records:?}");
    assert_eq!(outcome_of(&records, "in-b"), ["pending"], "{records:?}");
    // A third gateway starting on the directory changes nothing more.
    let mut c = session(dir.path(), &["--trust", "trusted"], &[]);
    c.initialize(json!({}));
    assert!(text(&c.call("echo", json!({"text": "third"}))).contains("third"));
    assert!(c.close().success());
    let records = log_json(dir.path(), &[]);
    assert_eq!(outcome_of(&records, "in-a"), ["interrupted"], "{records:?}");
    assert_eq!(outcome_of(&records, "in-b"), ["pending"], "{records:?}");

    // B ends as it always did; every journal agrees with the log.
    b.signal("TERM");
    assert_eq!(b.wait().code(), Some(0));
    let records = log_json(dir.path(), &[]);
    assert_eq!(outcome_of(&records, "in-a"), ["interrupted"], "{records:?}");
    assert_eq!(outcome_of(&records, "in-b"), ["shutdown"], "{records:?}");
    assert_eq!(records.len(), 3, "{records:?}");
    let state = dir.path().join("state");
    let checked = verify(dir.path(), &state, &["--json"]);
    let report: Value = serde_json::from_slice(&checked.stdout).unwrap();
    assert_eq!(report["holds"], true, "{report}");
    assert_eq!(report["journals"]["runs"], 3, "{report}");
    assert_eq!(report["journals"]["live"], 0, "{report}");
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

    // Outcomes ride in the next commit, at most 50 ms later: wait until the
    // first call's is on record, so both followers begin with it.
    let mut waited = Duration::ZERO;
    while log_json(dir.path(), &[])
        .first()
        .is_none_or(|record| record["outcome"] == "pending")
    {
        assert!(waited < PATIENCE, "the first outcome was never committed");
        std::thread::sleep(Duration::from_millis(10));
        waited += Duration::from_millis(10);
    }
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
            .contains("fx / write_note  ask  (not-read-only)  by person (elicitation)  -> denied")
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

/// A small seeded generator (splitmix64), so a run can be replayed.
/// The tools of the crash test: one that reads, and writes a person
/// approves "always" the first time each is asked.
const NOTES: [&str; 4] = ["note_1", "note_2", "note_3", "note_4"];

#[test]
#[expect(
    clippy::disallowed_macros,
    reason = "the test prints its seed, so a failing run can be replayed"
)]
fn the_audit_log_and_the_approvals_survive_kill_9() {
    use std::cell::RefCell;
    use std::collections::{BTreeMap, BTreeSet};
    use std::rc::Rc;

    let seed = std::env::var("HINTGATE_CRASH_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("crash test seed: {seed} (replay with HINTGATE_CRASH_SEED={seed})");
    let mut rng = Rng(seed);

    let dir = tempfile::tempdir().unwrap();
    let hints = |read_only: bool| json!({"readOnlyHint": read_only, "destructiveHint": false, "idempotentHint": read_only, "openWorldHint": false});
    let mut tools = vec![
        json!({"name": "read_note", "inputSchema": {"type": "object"}, "annotations": hints(true)}),
    ];
    tools.extend(NOTES.iter().map(|name| json!({"name": name, "inputSchema": {"type": "object"}, "annotations": hints(false)})));
    std::fs::write(dir.path().join("tools.json"), json!(tools).to_string()).unwrap();
    let upstream_log = dir.path().join("upstream.log");
    let upstream_log_text = upstream_log.display().to_string();
    // Tools whose call the host saw succeed: approved always, so never
    // asked again; and tools asked about after that (must stay empty).
    let approved: Rc<RefCell<BTreeSet<String>>> = Rc::default();
    let asked_again: Rc<RefCell<Vec<String>>> = Rc::default();
    let asked: Rc<RefCell<BTreeSet<String>>> = Rc::default();
    let start = || {
        let mut host =
            crate::host::start_tools_file(dir.path(), &[("FIXTURE_LOG", &upstream_log_text)]);
        let (approved, asked_again, asked) = (approved.clone(), asked_again.clone(), asked.clone());
        host.respond_with(move |request| {
            let prompt = request["params"]["message"].as_str().unwrap_or_default();
            let tool = prompt
                .lines()
                .find_map(|line| line.trim().strip_prefix("tool:"))
                .and_then(|rest| rest.split_whitespace().next())
                .unwrap_or_default()
                .to_owned();
            if approved.borrow().contains(&tool) {
                asked_again.borrow_mut().push(tool.clone());
            }
            asked.borrow_mut().insert(tool);
            json!({"action": "accept", "content": {"approve": true, "remember": "this tool always"}})
        });
        host.initialize(json!({"elicitation": {}}));
        host
    };
    let pins = || {
        let state = dir.path().join("state").display().to_string();
        let output = crate::util::run(
            dir.path(),
            &["pins", "--state-dir", &state, "list", "--json"],
        );
        let listed: Value = serde_json::from_slice(&output.stdout).unwrap();
        listed
            .as_array()
            .unwrap()
            .iter()
            .map(|pin| {
                (
                    pin["tool"].as_str().unwrap().to_owned(),
                    pin["digest"].as_str().unwrap().to_owned(),
                )
            })
            .collect::<BTreeMap<_, _>>()
    };

    // Before the crashes: two writes approved always.
    let mut host = start();
    for name in &NOTES[..2] {
        assert_eq!(
            text(&host.call(name, json!({"n": -1}))),
            format!("ran {name}")
        );
        approved.borrow_mut().insert((*name).to_owned());
    }
    assert!(host.close().success());
    let pinned_before = pins();
    // Five tools and the server's instructions.
    assert_eq!(pinned_before.len(), 6, "{pinned_before:?}");

    // A few hundred calls in bursts of up to 12 in flight; the gateway is
    // killed with SIGKILL six times, at seeded points, with a seeded number
    // of the burst's answers read first; then restarted.
    const CALLS: u64 = 300;
    // One kill point in each sixth of the run (after the first ten calls);
    // a burst that passes a kill point is cut by one kill.
    const KILLS: u64 = 6;
    let window = (CALLS - 10) / KILLS;
    let mut kill_at: Vec<u64> = (0..KILLS)
        .map(|k| 10 + k * window + rng.below(window))
        .collect();
    let mut answered: BTreeMap<i64, String> = BTreeMap::new();
    let mut host = start();
    let mut n = 0;
    let mut kills = 0;
    // Outcome records ride in the next commit (or a flush 50 ms later), so a
    // kill can lose the outcomes of the calls answered just before it; see
    // the check at the end for which. Which burst each answered call was
    // in, and for each burst that ended in a kill, how many of its answers
    // the host read before the kill:
    let mut burst_of: BTreeMap<i64, u64> = BTreeMap::new();
    let mut killed_bursts: BTreeMap<u64, u64> = BTreeMap::new();
    let mut burst_index = 0u64;
    while n < CALLS {
        burst_index += 1;
        let burst = (1 + rng.below(12)).min(CALLS - n);
        let mut sent = BTreeMap::new();
        for _ in 0..burst {
            let tool = if rng.below(3) == 0 {
                NOTES[rng.below(4) as usize]
            } else {
                "read_note"
            };
            let id = format!("call-{n}");
            host.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": {"n": n}}}));
            sent.insert(id, (n as i64, tool));
            n += 1;
        }
        let kill = kill_at.first().is_some_and(|at| *at < n);
        let to_read = if kill { rng.below(burst + 1) } else { burst };
        for _ in 0..to_read {
            let response = host.next_response();
            let (call, tool) = sent[response["id"].as_str().unwrap()];
            assert_eq!(
                text(&response["result"]),
                format!("ran {tool}"),
                "seed {seed}: {response}"
            );
            answered.insert(call, tool.to_owned());
            burst_of.insert(call, burst_index);
            if tool != "read_note" {
                approved.borrow_mut().insert(tool.to_owned());
            }
        }
        if kill {
            kill_at.remove(0);
            killed_bursts.insert(burst_index, to_read);
            host.kill();
            kills += 1;
            host = start();
        }
    }
    assert!(host.close().success());
    assert_eq!(kills, KILLS);

    // The chain holds.
    let state = dir.path().join("state").display().to_string();
    let verify = crate::util::run(dir.path(), &["log", "--state-dir", &state, "verify"]);
    assert_eq!(
        verify.status.code(),
        Some(0),
        "seed {seed}: {}",
        crate::util::stdout(&verify)
    );

    // No approval was lost: every pin from before is still there, the same,
    // and no tool whose call succeeded was asked about again.
    let pinned_after = pins();
    for (tool, digest) in &pinned_before {
        assert_eq!(
            pinned_after.get(tool),
            Some(digest),
            "seed {seed}: pin of `{tool}`"
        );
    }
    assert_eq!(
        asked
            .borrow()
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        NOTES,
        "seed {seed}: each write was asked about"
    );
    assert!(
        asked_again.borrow().is_empty(),
        "seed {seed}: asked again about {:?}",
        asked_again.borrow()
    );

    // Every call that reached the server has its record; every call whose
    // answer the host saw has its outcome too.
    let records = log_json(dir.path(), &[]);
    let recorded: BTreeMap<i64, &Value> = records
        .iter()
        .filter_map(|record| Some((record["arguments"]["n"].as_i64()?, record)))
        .collect();
    let reached: Vec<(String, i64)> = std::fs::read_to_string(&upstream_log)
        .unwrap()
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("call ")?;
            let (tool, arguments) = rest.split_once(' ')?;
            let arguments: Value = serde_json::from_str(arguments).ok()?;
            Some((tool.to_owned(), arguments["n"].as_i64()?))
        })
        .filter(|(_, n)| *n >= 0)
        .collect();
    assert!(reached.len() >= answered.len(), "seed {seed}");
    for (tool, n) in &reached {
        let record = recorded
            .get(n)
            .unwrap_or_else(|| panic!("seed {seed}: call {n} reached the server without a record"));
        assert_eq!(record["tool"], tool.as_str(), "seed {seed}");
        // Let through by the profile, a standing approval or the person;
        // never a call that ended at the gateway.
        assert_ne!(record["approver"], "gateway", "seed {seed}: {record}");
        // Every gateway run has ended: no call it sent is left pending.
        assert!(
            record["outcome"] == "ok" || record["outcome"] == "interrupted",
            "seed {seed}: {record}"
        );
    }
    // Which outcomes a kill may lose. The gateway adds a call's outcome to
    // its journal in the turn the server's answer arrives, before it sends
    // the answer to the host; every commit carries all the outcomes the
    // journal holds, and a call is sent only after a commit that holds its
    // record. The host sends a burst only after reading every answer of the
    // burst before (unless that one was cut by a kill). So:
    // - the outcomes of a burst's calls are durable once any call of the
    //   next burst has reached the server, which is certain when the host
    //   read one of its answers: only the outcomes of the burst a kill cut
    //   (those the host read before it) may be lost, and those of the burst
    //   before it only when the host read no answer of the cut burst (its
    //   calls may not have been read by the gateway at all, leaving only the
    //   50 ms flush, which the kill can beat);
    // - an outcome anywhere else is never lost (the gateway that ran it
    //   ended with a commit of a later burst's calls, or a clean close).
    // This is stricter than "the cut burst and the one before": a gateway
    // whose call commits leave outcomes behind (only the flush carries them,
    // or they ride one commit late) loses those of the burst before a cut
    // the host read from, which fails here.
    let may_be_lost = |burst: u64| {
        killed_bursts.contains_key(&burst) || killed_bursts.get(&(burst + 1)) == Some(&0)
    };
    let mut lost = 0;
    for (n, tool) in &answered {
        let record = recorded[n];
        assert_eq!(record["tool"], tool.as_str(), "seed {seed}");
        let burst = burst_of[n];
        // A call whose outcome a kill lost is marked `interrupted` by the
        // next start (or by `hintgate log`): none is left pending.
        assert_ne!(
            record["outcome"], "pending",
            "seed {seed}: call {n}: {record}"
        );
        if record["outcome"] == "interrupted" {
            assert!(
                may_be_lost(burst),
                "seed {seed}: the outcome of call {n} (burst {burst}) was lost, but the kills cut bursts {killed_bursts:?} (burst: answers read)"
            );
            lost += 1;
            continue;
        }
        // Never a wrong outcome.
        assert_eq!(record["outcome"], "ok", "seed {seed}: call {n}: {record}");
    }
    eprintln!("crash test: {lost} outcomes lost in {KILLS} kills");
}

#[test]
fn a_redacted_value_has_the_same_digest_in_every_run_under_the_same_key() {
    let secret = "AKIAIOSFODNN7EXAMPLE";
    let marker_of_runs = |dir: &std::path::Path, runs: usize| -> Vec<Value> {
        for _ in 0..runs {
            let mut host = session(dir, &["--trust", "trusted"], &[]);
            host.initialize(json!({}));
            assert!(text(&host.call("echo", json!({"text": secret}))).contains(secret));
            assert!(host.close().success());
        }
        log_json(dir, &[])
            .iter()
            .map(|record| record["arguments"]["text"].clone())
            .collect()
    };
    let one = tempfile::tempdir().unwrap();
    let markers = marker_of_runs(one.path(), 2);
    assert_eq!(markers.len(), 2);
    assert_marker(&markers[0], secret.len());
    // Two runs, one key (the state directory's): the same digest, so the
    // records can be matched.
    assert_eq!(markers[0], markers[1]);
    // Another state directory has another key: another digest.
    let other = tempfile::tempdir().unwrap();
    let elsewhere = marker_of_runs(other.path(), 1);
    assert_marker(&elsewhere[0], secret.len());
    assert_ne!(markers[0], elsewhere[0]);
}

#[test]
fn configured_redaction_keeps_values_out_of_the_database_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        r#"
[servers.fx]
command = "python3"
args = ["{}"]
trust = "trusted"

[audit]
redact = ["/account/pin", "/cards/*/number", "SSN*"]
"#,
        fixture_server()
    );
    std::fs::write(dir.path().join("hintgate.toml"), config).unwrap();
    let mut host = Host::start(dir.path(), &["run", "--config", "hintgate.toml"], &[]);
    host.initialize(json!({}));
    let arguments = json!({
        "text": "visible-text",
        "account": {"pin": "pin-value-4921", "owner": "visible-owner"},
        "cards": [{"number": "card-value-1111", "kind": "visa"}, {"number": "card-value-2222"}],
        "person": {"Ssn_Number": "ssn-value-078", "nested": [{"api_token": "token-value-77"}]},
        "pin": "top-level-pin-is-kept",
        "note": "deploy with ghp_ZW1EBspxf6wDDsAwfqtxKrSHMetJ1afJAYFV please",
    });
    // The server still gets the real values; only the log leaves them out.
    assert!(text(&host.call("fx__echo", arguments)).contains("pin-value-4921"));
    assert!(host.close().success());

    let records = log_json(dir.path(), &[]);
    let logged = &records[0]["arguments"];
    assert_eq!(logged["text"], "visible-text");
    assert_eq!(logged["account"]["owner"], "visible-owner");
    assert_eq!(logged["cards"][0]["kind"], "visa");
    assert_eq!(logged["pin"], "top-level-pin-is-kept");
    // A name the server picked is not a reason to leave a value out.
    assert_eq!(logged["person"]["nested"][0]["api_token"], "token-value-77");
    assert_marker(&logged["account"]["pin"], "pin-value-4921".len());
    assert_marker(&logged["cards"][0]["number"], "card-value-1111".len());
    assert_marker(&logged["cards"][1]["number"], "card-value-2222".len());
    assert_marker(&logged["person"]["Ssn_Number"], "ssn-value-078".len());
    assert_marker(&logged["note"], 59);
    // Two values, two digests: records can be matched, values told apart.
    assert_ne!(logged["cards"][0]["number"], logged["cards"][1]["number"]);
    // Not a byte of a redacted value in the store's files (database, WAL).
    // The run's journal holds the same records: the same holds of it.
    let mut bytes = Vec::new();
    let state = dir.path().join("state");
    let journal = state.join("journal");
    assert!(journal.is_dir(), "the run wrote a journal");
    for folder in [state, journal] {
        for file in std::fs::read_dir(folder).unwrap() {
            let path = file.unwrap().path();
            if path.is_file() {
                bytes.extend(std::fs::read(path).unwrap());
            }
        }
    }
    let contains = |needle: &str| {
        bytes
            .windows(needle.len())
            .any(|window| window == needle.as_bytes())
    };
    assert!(contains("visible-owner"), "the check reads the records");
    for secret in [
        "pin-value-4921",
        "card-value-1111",
        "card-value-2222",
        "ssn-value-078",
        "ZW1EBspxf6wDDsAwfqtxKrSHMetJ1afJAYFV",
    ] {
        assert!(!contains(secret), "`{secret}` reached the store");
    }
}

// === verify ===

/// `hintgate log verify [extra]` on the state directory `state`.
fn verify(dir: &std::path::Path, state: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let state = state.display().to_string();
    let mut args = vec!["log", "--state-dir", state.as_str(), "verify"];
    args.extend_from_slice(extra);
    crate::util::run(dir, &args)
}

/// `hintgate run` on the state directory `state`, with no host (stdin
/// closed): it ends at once, or fails to start.
fn run_gateway(dir: &std::path::Path, state: &std::path::Path) -> std::process::Output {
    crate::util::hintgate()
        .current_dir(dir)
        .env("HINTGATE_STATE_DIR", state)
        .args(["run", "--name", "fx", "--", "python3", &fixture_server()])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// A copy of a state directory, to attack one way.
fn copy_state(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for file in std::fs::read_dir(from).unwrap() {
        let file = file.unwrap();
        if file.path().is_dir() {
            // The journals: a directory of files.
            copy_state(&file.path(), &to.join(file.file_name()));
        } else {
            std::fs::copy(file.path(), to.join(file.file_name())).unwrap();
        }
    }
}

/// Runs SQL on the database of a state directory.
fn sql(state: &std::path::Path, statements: &str) {
    rusqlite::Connection::open(state.join("state.db"))
        .unwrap()
        .execute_batch(statements)
        .unwrap();
}

#[test]
fn log_verify_names_each_attack_in_words_and_in_json() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let mut host = session(dir.path(), &["--trust", "trusted"], &[]);
    host.initialize(json!({}));
    for n in 0..3 {
        assert!(text(&host.call("echo", json!({"text": format!("call {n}")}))).contains("call"));
    }
    assert!(host.close().success());
    let state = dir.path().join("state");
    // The key was made on first use, readable only by its user.
    let key = state.join("audit.key");
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );

    let holds = verify(dir.path(), &state, &[]);
    let out = crate::util::stdout(&holds);
    assert_eq!(crate::util::code(&holds), 0, "{out}");
    let last = log_json(dir.path(), &[]).len();
    assert!(out.contains("chained under the key `"), "{out}");
    assert!(out.contains("every link checked with it"), "{out}");
    assert!(
        out.contains("state.db.audit-head`: record ")
            && out.contains("its seal checked with the key, reached"),
        "{out}"
    );
    assert!(out.ends_with("the log holds\n"), "{out}");
    assert!(last >= 3, "{last}");

    // Each attack on a copy of the state directory: how it is done, what
    // `verify` must say, and the problem's code in `--json`.
    type Attack = fn(&std::path::Path);
    let attacks: [(&str, Attack, &str, &str); 7] = [
        (
            "edit a body",
            |state| {
                sql(
                    state,
                    "UPDATE audit SET body = replace(body, '\"allow\"', '\"deny\"') WHERE seq = 1",
                )
            },
            "record 1 was edited",
            "edited",
        ),
        (
            "delete the last records",
            |state| sql(state, "DELETE FROM audit WHERE seq > 1"),
            "the log ends at record 1 but its head was record",
            "cut-off",
        ),
        (
            "delete every record",
            |state| sql(state, "DELETE FROM audit"),
            "the log ends at record 0 but its head was record",
            "cut-off",
        ),
        (
            "delete a record in the middle",
            |state| sql(state, "DELETE FROM audit WHERE seq = 2"),
            "record 2 is missing: it was deleted",
            "missing-records",
        ),
        (
            "prepend a duplicate key",
            |state| {
                sql(
                    state,
                    "UPDATE audit SET body = '{\"verdict\":\"deny\",' || substr(body, 2) WHERE seq = 1",
                )
            },
            "record 1 repeats the key `verdict` in its body",
            "duplicate-key",
        ),
        (
            "give a record a kind hintgate does not write",
            |state| sql(state, "UPDATE audit SET kind = 'note' WHERE seq = 1"),
            "record 1 has the kind `note`, which hintgate does not write",
            "unknown-kind",
        ),
        (
            "cut the head file short",
            |state| {
                let head = state.join("state.db.audit-head");
                let text = std::fs::read(&head).unwrap();
                std::fs::write(&head, &text[..20]).unwrap();
            },
            "state.db.audit-head` is damaged",
            "head-damaged",
        ),
    ];
    for (n, (name, attack, says, code)) in attacks.iter().enumerate() {
        let copy = dir.path().join(format!("attacked-{n}"));
        copy_state(&state, &copy);
        attack(&copy);
        let broken = verify(dir.path(), &copy, &[]);
        let out = crate::util::stdout(&broken);
        assert_eq!(crate::util::code(&broken), 2, "{name}: {out}");
        assert!(out.contains(says), "{name}: {out}");
        assert!(out.contains("the log does not hold"), "{name}: {out}");
        let json = verify(dir.path(), &copy, &["--json"]);
        assert_eq!(crate::util::code(&json), 2, "{name}");
        let report: Value = serde_json::from_slice(&json.stdout).unwrap();
        assert_eq!(report["holds"], false, "{name}: {report}");
        let codes: Vec<&str> = report["problems"]
            .as_array()
            .unwrap()
            .iter()
            .map(|problem| problem["problem"].as_str().unwrap())
            .collect();
        assert!(codes.contains(code), "{name}: {report}");
        assert!(
            report["problems"][0]["message"].as_str().unwrap().len() > 10,
            "{name}: every problem is said in words too: {report}"
        );
    }

    // `hintgate log` shows a record with a repeated key or an unknown kind
    // as malformed, never as a call.
    let copy = dir.path().join("malformed");
    copy_state(&state, &copy);
    sql(
        &copy,
        "UPDATE audit SET body = '{\"verdict\":\"deny\",' || substr(body, 2) WHERE seq = 1;
         UPDATE audit SET kind = 'note' WHERE seq = 2;",
    );
    let shown = crate::util::run(
        dir.path(),
        &["log", "--state-dir", copy.to_str().unwrap(), "--json"],
    );
    let records: Vec<Value> = crate::util::stdout(&shown)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(records[0]["kind"], "malformed", "{records:?}");
    assert_eq!(records[0]["problem"], "duplicate-key");
    assert_eq!(records[1]["kind"], "malformed", "{records:?}");
    assert_eq!(records[1]["problem"], "unknown-kind");

    // Without the key, the keyed part cannot be checked, and verify says
    // so (exit 1), but finds what it can.
    let copy = dir.path().join("keyless");
    copy_state(&state, &copy);
    std::fs::remove_file(copy.join("audit.key")).unwrap();
    let keyless = verify(dir.path(), &copy, &[]);
    let out = crate::util::stdout(&keyless);
    assert_eq!(crate::util::code(&keyless), 1, "{out}");
    assert!(
        out.contains("audit.key` is not there: their links cannot be checked"),
        "{out}"
    );
    assert!(out.contains("its seal not checked (no key)"), "{out}");
    let json: Value =
        serde_json::from_slice(&verify(dir.path(), &copy, &["--json"]).stdout).unwrap();
    assert_eq!(
        (json["holds"].as_bool(), json["complete"].as_bool()),
        (Some(true), Some(false))
    );
    // The gateway does not make a new key for a log an old one chained: it
    // does not start, and says which key is missing.
    let refused = run_gateway(dir.path(), &copy);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        crate::util::stderr(&refused)
            .contains("audit.key` is missing, but the log is chained under the key `"),
        "{}",
        crate::util::stderr(&refused)
    );
    assert!(
        !copy.join("audit.key").exists(),
        "no new key replaced the lost one"
    );

    // A key file others may read is refused, naming it, by the gateway and
    // by verify.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let exposed = verify(dir.path(), &state, &[]);
    assert_eq!(crate::util::code(&exposed), 1);
    let err = crate::util::stderr(&exposed);
    assert!(
        err.contains(&format!(
            "the audit key `{}` may be read or written by others",
            key.display()
        )),
        "{err}"
    );
    let run = run_gateway(dir.path(), &state);
    assert_eq!(run.status.code(), Some(1));
    assert!(
        crate::util::stderr(&run).contains("may be read or written by others"),
        "{}",
        crate::util::stderr(&run)
    );
}

#[test]
fn a_witness_set_up_once_finds_a_rewrite_the_key_holder_made() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let calls = |n: usize| {
        let mut host = session(dir.path(), &["--trust", "trusted"], &[]);
        host.initialize(json!({}));
        for i in 0..n {
            assert!(
                text(&host.call("echo", json!({"text": format!("call {i}")}))).contains("call")
            );
            // In the log before the call's outcome can be (`hintgate log`
            // waits for the index): the run's first commit holds the call
            // alone, as it did when calls were committed on their way.
            log_json(dir.path(), &[]);
        }
        assert!(host.close().success());
    };
    calls(2);
    let state_text = state.display().to_string();
    let elsewhere = tempfile::tempdir().unwrap();
    let witness = elsewhere.path().join("witness.log");
    let witness_text = witness.display().to_string();

    // A witness beside the state is refused.
    let beside = state.join("witness.log").display().to_string();
    let refused = crate::util::run(
        dir.path(),
        &["log", "--state-dir", &state_text, "setup-witness", &beside],
    );
    assert_eq!(
        crate::util::code(&refused),
        64,
        "{}",
        crate::util::stderr(&refused)
    );

    let setup = crate::util::run(
        dir.path(),
        &[
            "log",
            "--state-dir",
            &state_text,
            "setup-witness",
            &witness_text,
        ],
    );
    assert_eq!(
        crate::util::code(&setup),
        0,
        "{}",
        crate::util::stderr(&setup)
    );
    let printed = crate::util::stdout(&setup);
    let key = printed
        .lines()
        .find(|line| line.len() == 64 && line.bytes().all(|b| b.is_ascii_hexdigit()))
        .unwrap_or_else(|| panic!("the verification key is printed: {printed}"))
        .to_owned();
    // Shown once: written nowhere in the state directory.
    for (_, bytes) in crate::util::files_under(&state) {
        assert!(!String::from_utf8_lossy(&bytes).contains(&key));
    }
    // Set up once.
    let again = crate::util::run(
        dir.path(),
        &[
            "log",
            "--state-dir",
            &state_text,
            "setup-witness",
            &witness_text,
        ],
    );
    assert_eq!(crate::util::code(&again), 1);

    // The next run checkpoints at its first commit to the index: its call
    // (record 5), or its call and the call's outcome (record 6) when the
    // indexer, on a busy machine, took both in one commit.
    calls(1);
    let checked = verify(
        dir.path(),
        &state,
        &["--witness", &witness_text, "--verification-key", &key],
    );
    let out = crate::util::stdout(&checked);
    assert_eq!(crate::util::code(&checked), 0, "{out}");
    let at = [5, 6]
        .into_iter()
        .find(|n| {
            out.contains(&format!(
                "witness `{witness_text}`: 1 checkpoints, the last that holds at record {n} (epoch 1)"
            ))
        })
        .unwrap_or_else(|| panic!("no checkpoint at the third run's first commit: {out}"));

    // The key's holder deletes the log and its head, and writes another
    // log through the store as a gateway on a new one would, with the key:
    // links and head are right, so verify alone finds nothing. (A gateway
    // does not start on the log deleted with its head; the key's holder
    // presents the key as new, and the head starts again at 0.)
    let db = state.join("state.db");
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute("DELETE FROM audit", [])
        .unwrap();
    std::fs::remove_file(hintgate_store::SqliteStore::head_path(&db)).unwrap();
    let secret =
        hintgate_store::AuditKey::load(&hintgate_store::SqliteStore::key_path(&db)).unwrap();
    let forger = hintgate_store::SqliteStore::open_with(
        &db,
        hintgate_store::AuditSetup {
            key: hintgate_store::KeySource::Given(secret),
            head: hintgate_store::HeadPlace::File(hintgate_store::SqliteStore::head_path(&db)),
            checkpoints: true,
            witness: Default::default(),
        },
    )
    .unwrap();
    let forged: Vec<hintgate_store::NewEntry> = (0..6)
        .map(|n| {
            hintgate_store::test_util::call_entry(
                1_795_000_000,
                &json!({"server": "fx", "tool": "echo", "n": n}),
            )
        })
        .collect();
    hintgate_store::AuditLog::append(&forger, &forged).unwrap();
    drop(forger);
    // The runs' journals still hold what the log held: verify finds the
    // rewrite by them.
    let journaled = verify(dir.path(), &state, &[]);
    assert_eq!(crate::util::code(&journaled), 2);
    assert!(
        crate::util::stdout(&journaled).contains("journal as the journal holds it"),
        "{}",
        crate::util::stdout(&journaled)
    );
    // The key's holder deletes them too, and their index.
    std::fs::remove_dir_all(state.join("journal")).unwrap();
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch("DELETE FROM journal_index; DELETE FROM journal_runs;")
        .unwrap();
    let fooled = verify(dir.path(), &state, &[]);
    assert_eq!(
        crate::util::code(&fooled),
        0,
        "{}",
        crate::util::stdout(&fooled)
    );
    let caught = verify(
        dir.path(),
        &state,
        &["--witness", &witness_text, "--verification-key", &key],
    );
    let out = crate::util::stdout(&caught);
    assert_eq!(crate::util::code(&caught), 2, "{out}");
    assert!(
        out.contains(&format!("record {at} is not the one the checkpoint on line 1 of the witness names: the log was rewritten after that checkpoint")),
        "{out}"
    );

    // Without the verification key, the witness cannot be checked.
    let keyless = verify(dir.path(), &state, &["--witness", &witness_text]);
    assert_eq!(
        crate::util::code(&keyless),
        64,
        "{}",
        crate::util::stderr(&keyless)
    );
}

#[test]
fn a_gateway_checkpoints_to_the_witness_its_config_names_and_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let elsewhere = tempfile::tempdir().unwrap();
    let witness = elsewhere.path().join("witness.log");
    let witness_text = witness.display().to_string();
    let config = |witness: &str| {
        let text = format!(
            "[servers.fx]\ncommand = \"python3\"\nargs = [\"{}\"]\ntrust = \"trusted\"\n\n[audit]\nwitness = \"{witness}\"\nwitness_every_records = 2\n",
            fixture_server()
        );
        std::fs::write(dir.path().join("hintgate.toml"), text).unwrap();
    };
    let start = || {
        crate::util::hintgate()
            .current_dir(dir.path())
            .env("HINTGATE_STATE_DIR", &state)
            .args(["run", "--config", "hintgate.toml"])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    config(&witness_text);

    // Named, not set up: the gateway does not start without it.
    let refused = start();
    let why = crate::util::stderr(&refused);
    assert_ne!(crate::util::code(&refused), 0, "{why}");
    assert!(
        why.contains(&format!("hintgate log setup-witness {witness_text}")),
        "{why}"
    );

    let state_text = state.display().to_string();
    let setup = crate::util::run(
        dir.path(),
        &[
            "log",
            "--state-dir",
            &state_text,
            "setup-witness",
            &witness_text,
        ],
    );
    assert_eq!(
        crate::util::code(&setup),
        0,
        "{}",
        crate::util::stderr(&setup)
    );
    let printed = crate::util::stdout(&setup);
    let key = printed
        .lines()
        .find(|line| line.len() == 64 && line.bytes().all(|b| b.is_ascii_hexdigit()))
        .unwrap_or_else(|| panic!("the verification key is printed: {printed}"))
        .to_owned();

    // Set up: checkpoints every 2 records, as configured, not every 1000.
    let mut host = Host::start(dir.path(), &["run", "--config", "hintgate.toml"], &[]);
    host.initialize(json!({}));
    for i in 0..5 {
        let said = text(&host.call("fx__echo", json!({"text": format!("call {i}")})));
        assert!(said.contains("call"), "{said}");
        // Indexed before the next call (`hintgate log` waits for that), so
        // each call's record goes to the log in a commit of its own.
        assert_eq!(log_json(dir.path(), &[]).len(), i + 1);
    }
    assert!(host.close().success());
    let checkpoints = std::fs::read_to_string(&witness).unwrap().lines().count();
    assert!(checkpoints >= 3, "{checkpoints} checkpoints");
    let checked = verify(
        dir.path(),
        &state,
        &["--witness", &witness_text, "--verification-key", &key],
    );
    let out = crate::util::stdout(&checked);
    assert_eq!(crate::util::code(&checked), 0, "{out}");

    // Another witness than the one set up: refused, naming both.
    let other = elsewhere.path().join("other.log").display().to_string();
    config(&other);
    let refused = start();
    let why = crate::util::stderr(&refused);
    assert_ne!(crate::util::code(&refused), 0, "{why}");
    assert!(why.contains(&other) && why.contains(&witness_text), "{why}");
}

/// The problem codes of `log verify --json`, and its warnings' codes.
fn verify_codes(
    dir: &std::path::Path,
    state: &std::path::Path,
    extra: &[&str],
) -> (i32, Vec<String>, Vec<String>) {
    let mut args = vec!["--json"];
    args.extend_from_slice(extra);
    let output = verify(dir, state, &args);
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
        panic!(
            "{err}: {} {}",
            crate::util::stdout(&output),
            crate::util::stderr(&output)
        )
    });
    let codes = |list: &str, field: &str| -> Vec<String> {
        report[list]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| item[field].as_str().unwrap().to_owned())
            .collect()
    };
    (
        crate::util::code(&output),
        codes("problems", "problem"),
        codes("warnings", "warning"),
    )
}

#[test]
fn rows_below_sequence_number_one_are_named_by_verify_and_counted_by_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut host = session(dir.path(), &["--trust", "trusted"], &[]);
    host.initialize(json!({}));
    for n in 0..2 {
        assert!(text(&host.call("echo", json!({"text": format!("call {n}")}))).contains("call"));
    }
    assert!(host.close().success());
    let state = dir.path().join("state");
    assert_eq!(verify_codes(dir.path(), &state, &[]).0, 0);

    // Copies of the first record at 0 and below, out of the chain that is
    // followed from 1.
    sql(
        &state,
        "INSERT INTO audit (seq, at, kind, call_seq, body, prev, hash)
           SELECT 0, at, kind, call_seq, replace(body, 'call 0', 'forged'), prev, hash FROM audit WHERE seq = 1;
         INSERT INTO audit (seq, at, kind, call_seq, body, prev, hash)
           SELECT -3, at, kind, call_seq, body, prev, hash FROM audit WHERE seq = 1;",
    );
    let broken = verify(dir.path(), &state, &[]);
    let out = crate::util::stdout(&broken);
    assert_eq!(crate::util::code(&broken), 2, "{out}");
    for seq in ["0", "-3"] {
        assert!(
            out.contains(&format!(
                "a record is stored with the sequence number {seq}, below 1"
            )),
            "{out}"
        );
    }
    let (code, problems, _) = verify_codes(dir.path(), &state, &[]);
    assert_eq!(
        (code, problems),
        (
            2,
            vec!["seq-below-one".to_owned(), "seq-below-one".to_owned()]
        )
    );
    // `hintgate log` does not show them, and says so.
    let shown = crate::util::run(dir.path(), &["log", "--state-dir", state.to_str().unwrap()]);
    assert_eq!(crate::util::code(&shown), 0);
    assert!(
        crate::util::stderr(&shown).contains(
            "warning: 2 records are stored with a sequence number below 1, where the log never numbers one, and not shown"
        ),
        "{}",
        crate::util::stderr(&shown)
    );
    assert!(!crate::util::stdout(&shown).contains("forged"));

    // SQLite's columns take any type: a body stored as a blob of the same
    // bytes keeps its link but is named, and a time that is not a number
    // is named and breaks its link; neither keeps the rest from being read.
    sql(
        &state,
        "DELETE FROM audit WHERE seq < 1;
         UPDATE audit SET body = CAST(body AS BLOB) WHERE seq = 1;
         UPDATE audit SET at = 'soon' WHERE seq = 2;",
    );
    let broken = verify(dir.path(), &state, &[]);
    let out = crate::util::stdout(&broken);
    assert_eq!(crate::util::code(&broken), 2, "{out}");
    assert!(
        out.contains("record 1 stores its `body` as blob, which hintgate never writes there"),
        "{out}"
    );
    assert!(out.contains("record 2 stores its `at` as text"), "{out}");
    let (_, problems, _) = verify_codes(dir.path(), &state, &[]);
    // The journal holds record 2 as it was written: the log's differs.
    assert_eq!(
        problems,
        [
            "edited",
            "wrong-type",
            "wrong-type",
            "journal-index-differs"
        ],
        "{out}"
    );
    let shown = crate::util::run(
        dir.path(),
        &["log", "--state-dir", state.to_str().unwrap(), "--json"],
    );
    assert_eq!(
        crate::util::code(&shown),
        0,
        "{}",
        crate::util::stderr(&shown)
    );
    assert!(crate::util::stdout(&shown).contains("call 0"));
}

#[test]
fn a_log_deleted_with_its_head_is_not_taken_for_a_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    // The first run, no call: the key and the head are made together, and
    // the empty log verifies, with a warning of what only a witness sees.
    let first = run_gateway(dir.path(), &state);
    assert!(
        state.join("audit.key").exists(),
        "{}",
        crate::util::stderr(&first)
    );
    let fresh = verify(dir.path(), &state, &[]);
    let out = crate::util::stdout(&fresh);
    assert_eq!(crate::util::code(&fresh), 0, "{out}");
    assert!(
        out.contains("state.db.audit-head`: at the start, written with the key before any record, its seal checked with the key"),
        "{out}"
    );
    assert!(
        crate::util::stderr(&fresh).contains(
            "warning: no witness is set up for this log, so this check cannot see the whole log deleted together with its head and its audit key"
        ),
        "{}",
        crate::util::stderr(&fresh)
    );
    assert_eq!(
        verify_codes(dir.path(), &state, &[]),
        (0, vec![], vec!["no-witness".to_owned()])
    );

    // The head removed from the empty log: deleted, not new.
    let copy = dir.path().join("no-head");
    copy_state(&state, &copy);
    std::fs::remove_file(copy.join("state.db.audit-head")).unwrap();
    let deleted = verify(dir.path(), &copy, &[]);
    let out = crate::util::stdout(&deleted);
    assert_eq!(crate::util::code(&deleted), 2, "{out}");
    assert!(
        out.contains("the whole log was deleted together with its head"),
        "{out}"
    );
    assert_eq!(
        verify_codes(dir.path(), &copy, &[]).1,
        ["log-deleted".to_owned()]
    );
    // A gateway does not start on it (its first commit would write a head
    // that hides it), and says how to go on.
    let refused = run_gateway(dir.path(), &copy);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        crate::util::stderr(&refused)
            .contains("(`log-deleted`): the log was deleted together with its head")
            && crate::util::stderr(&refused).contains("`hintgate log accept-rollback`"),
        "{}",
        crate::util::stderr(&refused)
    );
    assert!(!copy.join("state.db.audit-head").exists());
    assert_eq!(
        verify_codes(dir.path(), &copy, &[]).1,
        ["log-deleted".to_owned()]
    );
    // Accepted: the log records it, and the gateway starts.
    let copy_dir = copy.display().to_string();
    let accepted = crate::util::run(
        dir.path(),
        &["log", "--state-dir", &copy_dir, "accept-rollback"],
    );
    assert_eq!(
        accepted.status.code(),
        Some(0),
        "{}",
        crate::util::stderr(&accepted)
    );
    assert!(
        crate::util::stdout(&accepted).starts_with("accepted in record 1: the audit log is empty"),
        "{}",
        crate::util::stdout(&accepted)
    );
    assert_eq!(run_gateway(dir.path(), &copy).status.code(), Some(0));
    assert_eq!(
        verify_codes(dir.path(), &copy, &[]).1,
        ["rolled-back".to_owned()]
    );

    // Calls, then every record deleted with the head: deleted. With the
    // head kept, cut off.
    let mut host = session(dir.path(), &["--trust", "trusted"], &[]);
    host.initialize(json!({}));
    assert!(text(&host.call("echo", json!({"text": "one"}))).contains("one"));
    assert!(host.close().success());
    assert_eq!(verify_codes(dir.path(), &state, &[]).0, 0);
    let wiped = dir.path().join("wiped");
    copy_state(&state, &wiped);
    sql(&wiped, "DELETE FROM audit");
    // The run's journal still holds its two records: the log does not.
    assert_eq!(
        verify_codes(dir.path(), &wiped, &[]).1,
        ["cut-off", "journal-index-differs", "journal-index-differs"]
    );
    std::fs::remove_file(wiped.join("state.db.audit-head")).unwrap();
    assert_eq!(
        verify_codes(dir.path(), &wiped, &[]).1,
        [
            "log-deleted",
            "journal-index-differs",
            "journal-index-differs"
        ]
    );
    // With the key gone too, it is a new log as far as anything here can
    // tell: that is what the warning says a witness is for.
    std::fs::remove_file(wiped.join("audit.key")).unwrap();
    assert_eq!(
        verify_codes(dir.path(), &wiped, &[]),
        (0, vec![], vec!["no-witness".to_owned()])
    );
}

#[test]
fn the_witness_commands_take_the_witness_the_config_names() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let state_text = state.display().to_string();
    let elsewhere = tempfile::tempdir().unwrap();
    let witness = elsewhere.path().join("witness.log");
    let witness_text = witness.display().to_string();
    let config = dir.path().join("hintgate.toml");
    std::fs::write(
        &config,
        format!(
            "[servers.fx]\ncommand = \"python3\"\nargs = [\"{}\"]\ntrust = \"trusted\"\n\n[audit]\nwitness = \"{witness_text}\"\n",
            fixture_server()
        ),
    )
    .unwrap();
    let config_text = config.display().to_string();
    let log = |args: &[&str], env: &[(&str, &str)]| {
        let mut all = vec!["log", "--state-dir", &state_text, "--config", &config_text];
        all.extend_from_slice(args);
        crate::util::hintgate()
            .current_dir(dir.path())
            .args(&all)
            .env_remove("HINTGATE_WITNESS_KEY")
            .envs(env.iter().copied())
            .output()
            .unwrap()
    };

    // Without FILE and without a config naming one: bad usage.
    let unnamed = crate::util::run(
        dir.path(),
        &["log", "--state-dir", &state_text, "setup-witness"],
    );
    assert_eq!(crate::util::code(&unnamed), 64);
    assert!(
        crate::util::stderr(&unnamed).contains("name the witness"),
        "{}",
        crate::util::stderr(&unnamed)
    );

    // Without FILE, the configured witness is set up.
    let setup = log(&["setup-witness"], &[]);
    let printed = crate::util::stdout(&setup);
    assert_eq!(
        crate::util::code(&setup),
        0,
        "{}",
        crate::util::stderr(&setup)
    );
    assert!(printed.contains(&witness_text), "{printed}");
    let key = printed
        .lines()
        .find(|line| line.len() == 64 && line.bytes().all(|b| b.is_ascii_hexdigit()))
        .unwrap_or_else(|| panic!("the verification key is printed: {printed}"))
        .to_owned();

    // The gateway checkpoints there (it insists on the witness set up).
    let mut host = Host::start(dir.path(), &["run", "--config", "hintgate.toml"], &[]);
    host.initialize(json!({}));
    assert!(text(&host.call("fx__echo", json!({"text": "one"}))).contains("one"));
    assert!(host.close().success());
    assert!(std::fs::read_to_string(&witness).unwrap().lines().count() >= 1);

    // verify checks the configured witness with its key from the
    // variable...
    let checked = log(&["verify"], &[("HINTGATE_WITNESS_KEY", &key)]);
    let out = crate::util::stdout(&checked);
    assert_eq!(crate::util::code(&checked), 0, "{out}");
    assert!(
        out.contains(&format!("witness `{witness_text}`: 1 checkpoints")),
        "{out}"
    );
    assert!(crate::util::stderr(&checked).is_empty(), "no warning");
    // ... or the flag.
    let checked = log(&["verify", "--verification-key", &key], &[]);
    assert_eq!(
        crate::util::code(&checked),
        0,
        "{}",
        crate::util::stderr(&checked)
    );
    assert!(crate::util::stdout(&checked).contains("1 checkpoints"));

    // Without its key it is not checked, and verify says so.
    let unchecked = log(&["verify", "--json"], &[]);
    assert_eq!(crate::util::code(&unchecked), 0);
    let report: Value = serde_json::from_slice(&unchecked.stdout).unwrap();
    assert_eq!(report["witness"], Value::Null, "{report}");
    assert_eq!(
        report["warnings"][0]["warning"], "witness-not-checked",
        "{report}"
    );
    assert!(
        crate::util::stderr(&unchecked)
            .contains("warning: a witness is set up for this log but was not checked"),
        "{}",
        crate::util::stderr(&unchecked)
    );

    // The flag wins over the configuration.
    let other = elsewhere.path().join("other.log").display().to_string();
    let flagged = log(
        &["verify", "--witness", &other, "--verification-key", &key],
        &[],
    );
    let out = crate::util::stdout(&flagged);
    assert_eq!(crate::util::code(&flagged), 2, "{out}");
    assert!(
        out.contains(&format!("the witness `{other}` cannot be read")),
        "{out}"
    );
    let again = log(&["setup-witness", &other], &[]);
    assert_eq!(
        crate::util::code(&again),
        1,
        "set up once, whichever file is named"
    );
    assert!(
        crate::util::stderr(&again).contains("a witness is set up for this log already"),
        "{}",
        crate::util::stderr(&again)
    );
}

/// Every line `hintgate log --json` prints validates against the checked-in
/// schema of audit records: calls that ran, were refused or were malformed
/// requests, a standing approval granted and revoked (written by the store
/// as `hintgate pins` does), and a record put in the database that is not
/// one hintgate writes.
#[test]
fn log_json_output_validates_against_the_audit_record_schema() {
    use hintgate_store::PinStore as _;
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(crate::util::repo_root().join("docs/audit-record.schema.json"))
            .unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let mut host = session(dir.path(), &["--trust", "trusted"], &[]);
    host.initialize(json!({}));
    assert!(text(&host.call("echo", json!({"text": "hi", "n": [1, 2.5]}))).contains("hi"));
    let unknown = host.request(
        "tools/call",
        json!({"name": "no_such_tool", "arguments": {}}),
    );
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    let nameless = host.request("tools/call", json!({"arguments": {}}));
    assert_eq!(nameless["error"]["code"], -32602, "{nameless}");
    assert!(host.close().success());

    let state = dir.path().join("state");
    let db = state.join("state.db");
    {
        let store = hintgate_store::SqliteStore::open_with(
            &db,
            hintgate_store::AuditSetup {
                key: hintgate_store::KeySource::File(hintgate_store::SqliteStore::key_path(&db)),
                head: hintgate_store::HeadPlace::File(hintgate_store::SqliteStore::head_path(&db)),
                ..Default::default()
            },
        )
        .unwrap();
        // The approval of the tool the host called, on the server it ran on.
        let called = &log_json(dir.path(), &[])[0];
        let key = called["identity"].as_str().unwrap();
        let pin = called["pin"].as_str().unwrap();
        store.approve_always(key, "echo", pin).unwrap();
        assert!(store.revoke(key, "echo").unwrap());
    }
    // A record no hintgate writes, behind the gateway's back.
    sql(
        &state,
        "INSERT INTO audit (seq, at, kind, call_seq, body, prev, hash) \
         SELECT MAX(seq) + 1, 0, 'call', NULL, '{\"tool\":\"x\"}', 'p', 'h' FROM audit",
    );

    let records = log_json(dir.path(), &[]);
    let kinds: Vec<&str> = records
        .iter()
        .map(|record| record["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["call", "call", "call", "grant", "revoke", "malformed"],
        "{records:#?}"
    );
    assert_eq!(records[0]["outcome"], "ok");
    assert!(records[0]["duration_ms"].is_u64(), "{}", records[0]);
    assert_eq!(records[5]["problem"], "unexpected-body");
    for record in &records {
        let errors: Vec<String> = validator
            .iter_errors(record)
            .map(|error| error.to_string())
            .collect();
        assert!(errors.is_empty(), "{record}: {errors:#?}");
    }
    // The schema is strict: a line with a field no record has does not
    // validate.
    let mut extra = records[0].clone();
    extra["note"] = json!("x");
    assert!(!validator.is_valid(&extra));
}

#[test]
fn a_postgres_log_that_stalls_holds_only_the_calls_waiting_for_their_records() {
    // Against a real PostgreSQL when one is configured (`./scripts/test`
    // starts one); the helper says so when none is.
    let Some(url) = hintgate_store::test_util::postgres_database() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("audit.key").display().to_string();
    let calls = dir.path().join("calls.log");
    let calls_text = calls.display().to_string();
    let mut host = session(
        dir.path(),
        &["--trust", "trusted", "--store", &url, "--audit-key", &key],
        &[("FIXTURE_LOG", &calls_text)],
    );
    host.initialize(json!({}));
    assert!(text(&host.call("echo", json!({"text": "first"}))).contains("first"));

    // Another session holds the log's table: the gateway's next write of
    // the log waits for it, on the store's thread.
    let mut locker = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let mut held = locker.transaction().unwrap();
    held.batch_execute("LOCK TABLE hintgate.audit IN EXCLUSIVE MODE")
        .unwrap();
    host.send(
        &json!({"jsonrpc": "2.0", "id": "held-1", "method": "tools/call",
                      "params": {"name": "echo", "arguments": {"text": "held"}}}),
    );
    let mut watcher = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let deadline = std::time::Instant::now() + PATIENCE;
    while watcher
        .query_one("SELECT count(*) FROM pg_locks WHERE NOT granted", &[])
        .unwrap()
        .get::<_, i64>(0)
        == 0
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the write never waited"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The gateway goes on with what needs no record (an answer to the call
    // arriving first would fail this: `request` takes only its own), and
    // the call waits: its server has not seen it.
    let listed = host.request("tools/list", json!({}));
    assert!(listed["result"]["tools"].is_array(), "{listed}");
    let pong = host.request("ping", json!({}));
    assert_eq!(pong["result"], json!({}), "{pong}");
    assert!(
        !std::fs::read_to_string(&calls)
            .unwrap_or_default()
            .contains("held"),
        "the call reached its server before its record was written"
    );

    held.rollback().unwrap();
    let answer = host.wait_for(&json!("held-1"));
    assert!(text(&answer["result"]).contains("held"), "{answer}");
    assert!(host.close().success());
}
