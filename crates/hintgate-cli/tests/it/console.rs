//! The web console end to end: a host that cannot ask a person, a real
//! gateway, `hintgate console` in another process on the same store, and
//! a real headless Chromium (`browser`) that reads the waiting call, clicks
//! Approve, approves a changed definition from its diff and reads the log;
//! hostile tool strings stay text. Screenshots of each page go to
//! `target/tmp/console-screenshots/`. Then `hintgate run --console`, and an
//! answer given in a console on a PostgreSQL store that releases a call
//! waiting on a gateway elsewhere.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::browser::Browser;
use crate::host::{Host, fixture_server, is_error, text};
use crate::util::http;
use crate::util::{hintgate, stdout};

/// A title and a description that would run script if the page put them
/// in as markup; and arguments that would too.
const HOSTILE_TITLE: &str = "<script>document.title='pwned'</script>Post";
const HOSTILE_DESCRIPTION: &str =
    "Posts a message.<img src=x onerror=\"window.pwned=1\"><script>window.pwned=1</script>";
const HOSTILE_ARGUMENT: &str = "<script>window.pwned=2</script>hello from the browser test";

fn tools(description: &str) -> Value {
    json!([{
        "name": "post_message",
        "title": HOSTILE_TITLE,
        "description": description,
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
        "annotations": {"readOnlyHint": false, "destructiveHint": false}
    }])
}

/// A wrap-mode gateway named `fx`, trusted, whose host declares no
/// elicitation, in front of the fixture server listing `dir/tools.json`.
fn gateway(dir: &Path, extra: &[&str]) -> Host {
    let server = fixture_server();
    let mut args = vec![
        "run",
        "--name",
        "fx",
        "--trust",
        "trusted",
        "--ask-timeout",
        "600",
    ];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "python3", &server, "--tools-file", "tools.json"]);
    let mut host = Host::start(dir, &args, &[]);
    host.initialize(json!({}));
    host
}

/// `hintgate console` in another process; ends when dropped.
pub(crate) struct ConsoleProcess {
    child: Child,
    pub(crate) url: String,
}

impl ConsoleProcess {
    pub(crate) fn start(dir: &Path, store: &[&str]) -> Self {
        let mut child = hintgate()
            .current_dir(dir)
            .env("HINTGATE_STATE_DIR", dir.join("state"))
            .arg("console")
            .args(store)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .split_whitespace()
            .find(|word| word.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in {line:?}"))
            .to_owned();
        Self { child, url }
    }

    /// `http://127.0.0.1:PORT`
    fn base(&self) -> String {
        self.url.split("/?").next().unwrap().to_owned()
    }
}

impl Drop for ConsoleProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn screenshots() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots")
}

/// What no script of a server may have done in the page.
fn assert_no_script_ran(browser: &Browser) {
    let seen = browser.eval(
        "return [typeof window.pwned, document.title.includes('pwned'), document.querySelectorAll('main script, main img').length]",
    );
    assert_eq!(
        seen,
        json!(["undefined", false, 0]),
        "a server's string ran as markup"
    );
}

#[test]
fn a_person_approves_a_waiting_call_and_a_changed_definition_in_a_real_browser() {
    let Some(browser) = Browser::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("tools.json"),
        tools("Posts a message.").to_string(),
    )
    .unwrap();
    let mut host = gateway(dir.path(), &[]);
    let console = ConsoleProcess::start(dir.path(), &[]);

    // The token buys a cookie and leaves the address bar.
    browser.goto(&console.url);
    browser.wait_for("#waiting p.empty");
    assert!(!browser.url().contains("token"), "{}", browser.url());
    assert_eq!(browser.title(), "hintgate console");

    // A call waits; it appears without a reload, the count in the title.
    host.send(
        &json!({"jsonrpc": "2.0", "id": "c1", "method": "tools/call",
        "params": {"name": "post_message", "arguments": {"text": HOSTILE_ARGUMENT}}}),
    );
    let card = browser.wait_for("#waiting article.call");
    browser.wait_for_title("(1) waiting · hintgate console");
    let shown = browser.text(&card);
    assert!(shown.contains("fx / post_message"), "{shown}");
    assert!(
        shown.contains(HOSTILE_ARGUMENT),
        "the arguments in full, as text: {shown}"
    );
    assert!(shown.contains(HOSTILE_TITLE), "the title as text: {shown}");
    assert!(shown.contains("Approve this tool always"), "{shown}");
    // The arguments on their own, as the gateway redacted them for the queue.
    let arguments = browser.text(&browser.wait_for("#waiting article.call pre.arguments"));
    assert!(arguments.contains(HOSTILE_ARGUMENT), "{arguments}");
    assert_no_script_ran(&browser);
    browser.screenshot(&screenshots().join("waiting.png"));

    let approve = browser.wait_for("#waiting article.call button.approve");
    browser.click(&approve);
    let result = host.wait_for(&json!("c1"))["result"].clone();
    assert!(!is_error(&result), "{result}");
    assert_eq!(text(&result), "ran post_message");
    let note = browser.wait_for("p.note");
    assert!(
        browser.text(&note).contains("was approved"),
        "{}",
        browser.text(&note)
    );
    browser.wait_for_title("hintgate console");
    browser.screenshot(&screenshots().join("approved.png"));

    // The definition changes: the next gateway holds it for approval.
    assert!(host.close().success());
    std::fs::write(
        dir.path().join("tools.json"),
        tools(HOSTILE_DESCRIPTION).to_string(),
    )
    .unwrap();
    let mut host = gateway(dir.path(), &[]);
    host.request("tools/list", json!({}));
    browser.goto(&format!("{}/definitions", console.base()));
    let link = browser.wait_for("section.held a");
    browser.screenshot(&screenshots().join("definitions.png"));
    browser.click(&link);
    let diff = browser.wait_for("table.diff");
    let rows = browser.text(&diff);
    assert!(rows.contains("description"), "{rows}");
    assert!(
        rows.contains("Posts a message.") && rows.contains(HOSTILE_DESCRIPTION),
        "{rows}"
    );
    assert_no_script_ran(&browser);
    browser.screenshot(&screenshots().join("definition-change.png"));
    let approve = browser.wait_for("#approve-definition");
    browser.click(&approve);
    let note = browser.wait_for("p.note");
    assert!(
        browser.text(&note).contains("new definition is pinned"),
        "{}",
        browser.text(&note)
    );
    assert!(browser.find_all("section.held").is_empty());
    let pins = hintgate()
        .current_dir(dir.path())
        .args(["pins", "list", "--json", "--state-dir", "state"])
        .output()
        .unwrap();
    let pins: Value = serde_json::from_str(&stdout(&pins)).unwrap();
    let pin = pins
        .as_array()
        .unwrap()
        .iter()
        .find(|pin| pin["tool"] == "post_message")
        .unwrap();
    assert_eq!(pin["seen"], Value::Null, "{pin}");
    assert_eq!(pin["definition"]["description"], HOSTILE_DESCRIPTION);

    // The log: the call, who let it through, the chain, the chart.
    browser.goto(&format!("{}/log", console.base()));
    browser.wait_for("svg.chart");
    let chain = browser.text(&browser.wait_for("p.chain"));
    assert!(chain.starts_with("The chain holds"), "{chain}");
    let log = browser.text(&browser.wait_for("table.log"));
    assert!(
        log.contains("post_message") && log.contains("(console)"),
        "{log}"
    );
    assert_no_script_ran(&browser);
    browser.screenshot(&screenshots().join("log.png"));
    assert!(host.close().success());
}

/// One HTTP/1.1 exchange with the console, as a browser would send it.
/// The session cookie a console's URL buys.
pub(crate) fn session(url: &str) -> (String, String) {
    let (base, query) = url.split_once("/?").unwrap();
    let host = base.trim_start_matches("http://");
    let answer = http(
        base,
        &format!("GET /?{query} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
    );
    assert!(answer.starts_with("HTTP/1.1 303"), "{answer}");
    let cookie = answer
        .lines()
        .find_map(|line| line.strip_prefix("set-cookie: "))
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    (base.to_owned(), cookie)
}

#[test]
fn the_gateway_serves_the_console_beside_it_with_run_console() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("tools.json"),
        tools("Posts a message.").to_string(),
    )
    .unwrap();
    let host = gateway(dir.path(), &["--console"]);
    let start = Instant::now();
    let url = loop {
        if let Some(url) = host
            .log()
            .lines()
            .find_map(|line| line.strip_prefix("hintgate console: open "))
        {
            break url.trim().to_owned();
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{}", host.log());
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let (base, cookie) = session(&url);
    let host_name = base.trim_start_matches("http://");
    let page = http(
        &base,
        &format!(
            "GET / HTTP/1.1\r\nHost: {host_name}\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n"
        ),
    );
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    let refused = http(
        &base,
        &format!("GET / HTTP/1.1\r\nHost: {host_name}\r\nConnection: close\r\n\r\n"),
    );
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    assert!(host.close().success());
}

#[test]
fn an_answer_in_a_console_on_postgres_releases_a_call_waiting_on_another_machine() {
    let Some(url) = hintgate_store::test_util::postgres_database() else {
        return;
    };
    let team = tempfile::tempdir().unwrap();
    let key = team.path().join("audit.key").display().to_string();
    let waiting_dir = tempfile::tempdir().unwrap();
    std::fs::write(
        waiting_dir.path().join("tools.json"),
        tools("Posts a message.").to_string(),
    )
    .unwrap();
    let mut host = gateway(waiting_dir.path(), &["--store", &url, "--audit-key", &key]);
    host.send(
        &json!({"jsonrpc": "2.0", "id": "c1", "method": "tools/call",
        "params": {"name": "post_message", "arguments": {"text": "team"}}}),
    );

    // Another machine: another directory, nothing shared but the store.
    let other = tempfile::tempdir().unwrap();
    let console = ConsoleProcess::start(other.path(), &["--store", &url, "--audit-key", &key]);
    let (base, cookie) = session(&console.url);
    let host_name = base.trim_start_matches("http://");
    let start = Instant::now();
    let (id, csrf) = loop {
        let page = http(
            &base,
            &format!(
                "GET /api/waiting HTTP/1.1\r\nHost: {host_name}\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n"
            ),
        );
        let body: Value = serde_json::from_str(page.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        if body["count"] == 1 {
            let html = body["html"].as_str().unwrap().to_owned();
            let value = |name: &str| {
                let marker = format!("name=\"{name}\" value=\"");
                let at = html.find(&marker).unwrap() + marker.len();
                html[at..].split('"').next().unwrap().to_owned()
            };
            assert!(
                html.contains("&quot;text&quot;: &quot;team&quot;"),
                "{html}"
            );
            break (value("id"), value("csrf"));
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the call never showed: {body}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let form = format!("csrf={csrf}&id={id}&answer=approve");
    let answer = http(
        &base,
        &format!(
            "POST /answer HTTP/1.1\r\nHost: {host_name}\r\nCookie: {cookie}\r\nOrigin: {base}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{form}",
            form.len()
        ),
    );
    assert!(answer.starts_with("HTTP/1.1 303"), "{answer}");
    let result = host.wait_for(&json!("c1"))["result"].clone();
    assert!(!is_error(&result), "{result}");
    assert_eq!(text(&result), "ran post_message");
    assert!(host.close().success());
}
