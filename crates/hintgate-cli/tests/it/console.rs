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

/// Each line of the first waiting card's preview as the page shows it:
/// its class and its rendered text.
fn preview_lines(browser: &Browser) -> Vec<(String, String)> {
    let lines = browser.eval(
        "return Array.from(document.querySelectorAll('#waiting article.call pre.preview.diff > span')).map(s => [s.className, s.innerText])",
    );
    lines
        .as_array()
        .unwrap()
        .iter()
        .map(|line| {
            (
                line[0].as_str().unwrap().to_owned(),
                line[1].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Scrolls the first waiting card's preview into the middle of the view,
/// for its screenshot.
fn show_preview(browser: &Browser) {
    browser.eval(
        "document.querySelector('#waiting article.call pre.preview').scrollIntoView({block: 'center'}); return null",
    );
}

#[test]
fn a_person_sees_a_writes_diff_edits_the_call_and_approves_what_was_shown_in_a_real_browser() {
    let Some(browser) = Browser::start() else {
        return;
    };
    // The reference filesystem server, untrusted; the host cannot ask, so
    // the write waits in the queue the console shows.
    // No elicitation: the write waits in the approval queue.
    let crate::previews::QueuedWrite {
        dir,
        file,
        path,
        mut host,
    } = crate::previews::queued_write();
    let console = ConsoleProcess::start(dir.path(), &[]);
    browser.goto(&console.url);

    // The card shows the diff the gateway computed from the file, each line
    // coloured by what it does.
    browser.wait_for("#waiting article.call pre.preview.diff");
    let file_header = |sign: &str, side: &str| ("file".to_owned(), format!("{sign} {side}{path}"));
    assert_eq!(
        preview_lines(&browser),
        vec![
            file_header("---", "a"),
            file_header("+++", "b"),
            ("hunk".to_owned(), "@@ -1,3 +1,3 @@".to_owned()),
            ("same".to_owned(), " one".to_owned()),
            ("del".to_owned(), "-two".to_owned()),
            ("add".to_owned(), "+2".to_owned()),
            ("same".to_owned(), " three".to_owned()),
        ]
    );
    let card = browser.text(&browser.wait_for("#waiting article.call"));
    assert!(
        card.contains("What it will change (computed by hintgate from the file on this machine)"),
        "{card}"
    );
    // What goes and what comes are told apart by colour, not only by sign.
    let colours = browser.eval(
        "const bg = c => getComputedStyle(document.querySelector('#waiting pre.preview.diff span.' + c)).backgroundColor; return [bg('del'), bg('add'), bg('same')]",
    );
    let colours: Vec<&str> = colours
        .as_array()
        .unwrap()
        .iter()
        .map(|colour| colour.as_str().unwrap())
        .collect();
    assert!(
        colours[0] != colours[1] && colours[0] != colours[2] && colours[1] != colours[2],
        "{colours:?}"
    );
    assert_no_script_ran(&browser);
    show_preview(&browser);
    browser.screenshot(&screenshots().join("preview.png"));

    // The person edits the arguments in the card's form: the gateway checks
    // the edit, previews the edited call and lists it again.
    let first = browser.eval("return document.querySelector('#waiting article.call').id");
    let summary = browser.wait_for("#waiting article.call details.edit summary");
    browser.click(&summary);
    let edited = json!({"path": path, "content": "one\nfrom the browser\nthree\n"}).to_string();
    browser.eval(&format!(
        "document.querySelector('#waiting article.call details.edit textarea').value = {}; return null",
        serde_json::to_string(&edited).unwrap()
    ));
    let send = browser.wait_for("#waiting article.call form.edit button.edit");
    browser.click(&send);
    let note = browser.text(&browser.wait_for("p.note"));
    assert!(note.contains("was edited"), "{note}");
    // The edited call's card: marked as edited, with its own diff.
    browser.wait_for("#waiting article.call dd.warning");
    let again = browser.eval("return document.querySelector('#waiting article.call').id");
    assert_ne!(again, first, "the edited call is a new question");
    let lines = preview_lines(&browser);
    assert!(
        lines.contains(&("del".to_owned(), "-two".to_owned()))
            && lines.contains(&("add".to_owned(), "+from the browser".to_owned())),
        "{lines:?}"
    );
    assert_no_script_ran(&browser);
    show_preview(&browser);
    browser.screenshot(&screenshots().join("edited.png"));

    // Approved as shown: what runs is the edited call.
    let approve = browser.wait_for("#waiting article.call button.approve");
    browser.click(&approve);
    let note = browser.text(&browser.wait_for("p.note"));
    assert!(note.contains("was approved"), "{note}");
    let result = host.wait_for(&json!("w1"))["result"].clone();
    assert!(!is_error(&result), "{result}");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "one\nfrom the browser\nthree\n"
    );
    host.close();
}
