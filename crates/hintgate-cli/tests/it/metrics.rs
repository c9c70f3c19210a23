//! `hintgate run --metrics ADDR`: the Prometheus text format at `/metrics`,
//! scraped after real calls through the gateway to the fixture server, and
//! checked with Prometheus's own `promtool check metrics`.
//!
//! `./scripts/test` installs Debian's `prometheus` package (which ships
//! `promtool`) when it is missing and sets `HINTGATE_REQUIRE_PROMTOOL`;
//! without that variable a machine without `promtool` checks everything but
//! the format, with a line on stderr.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::host::{Host, fixture_server, is_error, text};
use crate::listen::{Listening, add_token, initialize};
use crate::util::{code, http, run};

/// Set by `./scripts/test`: a missing `promtool` is then a failure.
const REQUIRE_PROMTOOL_VAR: &str = "HINTGATE_REQUIRE_PROMTOOL";

/// A gateway mode configuration: the fixture server `fx`, trusted, with a
/// rule that denies `delete_everything`.
fn write_config(dir: &Path) {
    let config = format!(
        r#"[servers.fx]
command = "python3"
args = ["{fixture}"]
trust = "trusted"

[[rules]]
server = "fx"
tool = "delete_everything"
action = "deny"
reason = "nobody deletes everything"
"#,
        fixture = fixture_server(),
    );
    std::fs::write(dir.join("hintgate.toml"), config).unwrap();
}

/// The address `/metrics` is served at, as the gateway says on stderr.
fn metrics_addr(host: &Host) -> String {
    let started = Instant::now();
    loop {
        let log = host.log();
        if let Some(line) = log
            .lines()
            .find_map(|line| line.strip_prefix("hintgate: serving metrics at http://"))
        {
            return line.trim_end_matches("/metrics").to_owned();
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no metrics address: {log}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One `GET /metrics` on `addr` with extra header lines: the status code
/// and the body.
fn scrape(addr: &str, host: &str, headers: &[String]) -> (u16, String) {
    let mut request = format!("GET /metrics HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for header in headers {
        request.push_str(header);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    let answer = http(&format!("http://{addr}"), &request);
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status: {answer}"));
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// The samples of an exposition, by series (`name{labels}`).
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap();
            (series.to_owned(), value.parse().unwrap())
        })
        .collect()
}

/// The sum of the samples of `name` whose labels include every one of
/// `labels` (`key="value"`).
fn sum(samples: &BTreeMap<String, f64>, name: &str, labels: &[&str]) -> f64 {
    samples
        .iter()
        .filter(|(series, _)| {
            series
                .strip_prefix(name)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('{'))
                && labels.iter().all(|label| series.contains(label))
        })
        .map(|(_, value)| value)
        .sum()
}

/// `promtool check metrics` on `text`, which must pass (the format is right
/// and the names follow Prometheus's conventions): what it said, or `None`
/// when it is missing and not required.
#[expect(
    clippy::disallowed_macros,
    reason = "a test says on stderr that a check was skipped"
)]
fn promtool_check(text: &str) -> Option<String> {
    let Ok(mut child) = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    else {
        assert!(
            std::env::var_os(REQUIRE_PROMTOOL_VAR).is_none(),
            "promtool is required ({REQUIRE_PROMTOOL_VAR}) and missing"
        );
        eprintln!(
            "skipped: promtool is missing (Debian: apt-get install prometheus); the format is not checked by it"
        );
        return None;
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "promtool: {said}\n{text}");
    Some(said)
}

#[test]
fn metrics_count_allowed_denied_and_asked_calls_in_a_format_promtool_accepts() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path());
    let mut host = Host::start(
        dir.path(),
        &[
            "run",
            "--config",
            "hintgate.toml",
            "--metrics",
            "127.0.0.1:0",
        ],
        &[],
    );
    let addr = metrics_addr(&host);
    host.initialize(json!({"elicitation": {}}));

    // Allowed: a trusted read-only tool, twice.
    assert!(text(&host.call("fx__echo", json!({"text": "a"}))).contains('a'));
    assert!(text(&host.call("fx__echo", json!({"text": "b"}))).contains('b'));
    // Denied by the rule.
    let denied = host.call("fx__delete_everything", json!({}));
    assert!(is_error(&denied), "{denied}");
    // Asked: approved once, declined once.
    host.respond_with(|_| json!({"action": "accept", "content": {"approve": true}}));
    assert_eq!(
        text(&host.call("fx__write_note", json!({"text": "x"}))),
        "noted"
    );
    host.respond_with(|_| json!({"action": "decline"}));
    let declined = host.call("fx__write_note", json!({"text": "y"}));
    assert!(is_error(&declined), "{declined}");

    // A server that dies mid-call: an upstream error.
    let crashed = host.call("fx__crash", json!({}));
    assert!(is_error(&crashed), "{crashed}");

    let (status, body) = scrape(&addr, &addr, &[]);
    assert_eq!(status, 200, "{body}");
    let found = samples(&body);
    let calls = |labels: &[&str]| sum(&found, "hintgate_calls_total", labels);
    assert_eq!(
        calls(&["server=\"fx\"", "verdict=\"allow\""]),
        3.0,
        "{body}"
    );
    assert_eq!(
        calls(&["server=\"fx\"", "verdict=\"deny\"", "reason=\"rule-deny\""]),
        1.0,
        "{body}"
    );
    // An approved call goes through the pipeline again: still one call.
    assert_eq!(calls(&["server=\"fx\"", "verdict=\"ask\""]), 2.0, "{body}");
    assert_eq!(calls(&[]), 6.0, "{body}");
    let asks = |labels: &[&str]| sum(&found, "hintgate_asks_total", labels);
    assert_eq!(
        asks(&["channel=\"elicitation\"", "outcome=\"approved\""]),
        1.0
    );
    assert_eq!(
        asks(&["channel=\"elicitation\"", "outcome=\"declined\""]),
        1.0
    );
    assert_eq!(asks(&[]), 2.0, "{body}");
    assert_eq!(
        sum(&found, "hintgate_person_wait_seconds_count", &[]),
        2.0,
        "{body}"
    );
    // Two echoes and a note were answered; the crash failed (and a
    // read-only call may be tried once more): each send is timed.
    let errors = sum(&found, "hintgate_upstream_errors_total", &["server=\"fx\""]);
    assert!((1.0..=2.0).contains(&errors), "{body}");
    assert_eq!(
        sum(
            &found,
            "hintgate_upstream_latency_seconds_count",
            &["server=\"fx\""]
        ),
        3.0 + errors,
        "{body}"
    );
    assert!(
        sum(&found, "hintgate_audit_commit_seconds_count", &[]) >= 1.0,
        "{body}"
    );
    assert_eq!(sum(&found, "hintgate_sessions", &[]), 1.0, "{body}");
    assert_eq!(sum(&found, "hintgate_waiting_calls", &[]), 0.0, "{body}");
    // A tool name is never a label; the arguments never appear.
    assert!(
        !body.contains("echo") && !body.contains("write_note") && !body.contains("crash"),
        "{body}"
    );
    assert!(!body.contains("\"x\"") && !body.contains("noted"), "{body}");

    promtool_check(&body);

    // A page that rebinds a name of its own to loopback is not served.
    let (rebound, _) = scrape(&addr, "evil.example", &[]);
    assert_eq!(rebound, 403);
    host.close();
}

#[test]
fn metrics_beyond_loopback_need_a_metrics_token_and_take_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let server = fixture_server();
    let state = dir.path().join("state").display().to_string();
    let args = |metrics: &'static str| {
        vec![
            "run".to_owned(),
            "--state-dir".to_owned(),
            state.clone(),
            "--metrics".to_owned(),
            metrics.to_owned(),
            "--".to_owned(),
            "python3".to_owned(),
            server.clone(),
        ]
    };

    // No `metrics` token: an address beyond loopback is refused at start,
    // even with a host's token in the store.
    let writer = add_token(dir.path(), "writer", "write");
    let beyond = args("0.0.0.0:0");
    let refused = run(dir.path(), &argv_of(&beyond));
    assert_ne!(code(&refused), 0, "{refused:?}");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("--scope metrics"), "{said}");

    // With one, every scrape needs it.
    let scraper = add_token(dir.path(), "scraper", "metrics");
    let mut host = Host::start(dir.path(), &argv_of(&beyond), &[]);
    let addr = metrics_addr(&host);
    let port = addr.rsplit_once(':').unwrap().1;
    let local = format!("127.0.0.1:{port}");
    host.initialize(json!({}));

    let (none, _) = scrape(&local, &local, &[]);
    assert_eq!(none, 401, "no token");
    let (forged, _) = scrape(
        &local,
        &local,
        &["Authorization: Bearer hgt_0000".to_owned()],
    );
    assert_eq!(forged, 401, "an unknown token");
    let (basic, _) = scrape(&local, &local, &[format!("Authorization: Basic {scraper}")]);
    assert_eq!(basic, 401, "not a bearer token");
    let (host_token, _) = scrape(&local, &local, &[format!("Authorization: Bearer {writer}")]);
    assert_eq!(host_token, 403, "a host's token is not a scraper's");
    let (ok, body) = scrape(
        &local,
        &local,
        &[format!("Authorization: Bearer {scraper}")],
    );
    assert_eq!(ok, 200, "{body}");
    assert!(
        body.contains("# TYPE hintgate_calls_total counter"),
        "{body}"
    );
    host.close();

    // Revoked, it reads nothing.
    let revoked = run(
        dir.path(),
        &["token", "revoke", "scraper", "--state-dir", &state],
    );
    assert_eq!(code(&revoked), 0, "{revoked:?}");
    let refused = run(dir.path(), &argv_of(&beyond));
    assert_ne!(code(&refused), 0, "{refused:?}");
}

fn argv_of(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

#[test]
fn a_metrics_token_is_no_hosts_token() {
    let dir = tempfile::tempdir().unwrap();
    let scraper = add_token(dir.path(), "scraper", "metrics");
    // Only a `metrics` token: no host could authenticate, so `--listen`
    // does not start.
    let server = fixture_server();
    let state = dir.path().join("state").display().to_string();
    let alone = run(
        dir.path(),
        &[
            "run",
            "--state-dir",
            &state,
            "--listen",
            "127.0.0.1:0",
            "--",
            "python3",
            &server,
        ],
    );
    assert_ne!(code(&alone), 0, "{alone:?}");
    let said = String::from_utf8_lossy(&alone.stderr);
    assert!(said.contains("no host could authenticate"), "{said}");

    // Beside a host's token, it is refused at `/mcp`: neither read nor
    // write.
    let writer = add_token(dir.path(), "writer", "write");
    let gateway = Listening::start(dir.path(), &[]);
    let answer = gateway.post(&[format!("Authorization: Bearer {scraper}")], &initialize());
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    let answer = gateway.post(&[format!("Authorization: Bearer {writer}")], &initialize());
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    gateway.stop();
}

/// Scrapes `addr` until `series` reads `value` (the gauges are set as the
/// gateway's turn ends), failing after a minute.
fn scrape_until(addr: &str, series: &str, value: f64) -> String {
    let started = Instant::now();
    loop {
        let (status, body) = scrape(addr, addr, &[]);
        assert_eq!(status, 200, "{body}");
        if samples(&body).get(series) == Some(&value) {
            return body;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{series} never read {value}: {body}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_call_waiting_in_the_approval_queue_shows_until_a_person_answers() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path());
    let mut host = Host::start(
        dir.path(),
        &[
            "run",
            "--config",
            "hintgate.toml",
            "--metrics",
            "127.0.0.1:0",
            "--ask-timeout",
            "600",
        ],
        &[],
    );
    let addr = metrics_addr(&host);
    // No elicitation: a call that needs a person waits in the queue.
    host.initialize(json!({}));
    host.send(
        &json!({"jsonrpc": "2.0", "id": "q1", "method": "tools/call",
        "params": {"name": "fx__write_note", "arguments": {"text": "queued"}}}),
    );
    let waiting = scrape_until(&addr, "hintgate_waiting_calls{for=\"person\"}", 1.0);
    assert_eq!(
        sum(&samples(&waiting), "hintgate_asks_total", &[]),
        0.0,
        "{waiting}"
    );

    let state = dir.path().join("state").display().to_string();
    let approved = run(
        dir.path(),
        &["approvals", "--state-dir", &state, "approve", "1"],
    );
    assert_eq!(code(&approved), 0, "{approved:?}");
    let answer = host.wait_for(&json!("q1"));
    assert_eq!(text(&answer["result"]), "noted", "{answer}");

    let body = scrape_until(&addr, "hintgate_waiting_calls{for=\"person\"}", 0.0);
    let found = samples(&body);
    assert_eq!(
        sum(
            &found,
            "hintgate_asks_total",
            &["channel=\"queue\"", "outcome=\"approved\""]
        ),
        1.0,
        "{body}"
    );
    assert_eq!(sum(&found, "hintgate_person_wait_seconds_count", &[]), 1.0);
    assert_eq!(
        sum(&found, "hintgate_calls_total", &["verdict=\"ask\""]),
        1.0,
        "{body}"
    );
    promtool_check(&body);
    host.close();
}

#[test]
fn sandbox_starts_and_failures_are_counted_by_server() {
    let Some(python) = crate::sandbox::system_python() else {
        panic!("no system python3 to run the fixture");
    };
    let dir = tempfile::tempdir().unwrap();
    // `gone` cannot start in its sandbox (its program does not exist);
    // `sb` starts in one where this kernel can confine it.
    let config = format!(
        "[servers.sb]\ncommand = {python:?}\nargs = [{:?}]\ntrust = \"trusted\"\n\n\
         [servers.sb.sandbox]\nnetwork = false\n\n\
         [servers.gone]\ncommand = \"/nonexistent/hintgate-test/python3\"\n\n\
         [servers.gone.sandbox]\nnetwork = false\n",
        fixture_server(),
    );
    std::fs::write(dir.path().join("hintgate.toml"), config).unwrap();
    let mut host = Host::start(
        dir.path(),
        &[
            "run",
            "--config",
            "hintgate.toml",
            "--metrics",
            "127.0.0.1:0",
        ],
        &[],
    );
    let addr = metrics_addr(&host);
    host.initialize(json!({}));
    let body = scrape_until(
        &addr,
        "hintgate_sandbox_failures_total{server=\"gone\"}",
        1.0,
    );
    let found = samples(&body);
    assert_eq!(
        found.get("hintgate_sandbox_starts_total{server=\"gone\"}"),
        Some(&0.0),
        "{body}"
    );
    if crate::sandbox::kernel_confines() {
        let echoed = host.call("sb__echo", json!({"text": "confined"}));
        assert!(text(&echoed).contains("confined"), "{echoed}");
        let body = scrape_until(&addr, "hintgate_sandbox_starts_total{server=\"sb\"}", 1.0);
        assert_eq!(
            samples(&body).get("hintgate_sandbox_failures_total{server=\"sb\"}"),
            Some(&0.0),
            "{body}"
        );
    }
    host.close();
}
