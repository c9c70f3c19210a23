//! Edit, then approve (design §4.3) with real parts: the reference
//! filesystem server, untrusted, behind `hintgate run`; a host that cannot
//! ask a person, so its calls wait in the approval queue; and `hintgate
//! approvals approve ID --arguments FILE` from another terminal.
//!
//! An edit that cannot be used changes nothing; an edited call is decided,
//! previewed and asked about again, runs as edited (the file on disk is
//! what the server was sent), and says so to the host and in the audit
//! log; an edit the decision hook denies is denied and recorded; and a
//! host can neither make nor choose an edit.

use std::path::Path;

use serde_json::{Value, json};

use crate::approvals::{approvals, listed, send_call, the_call};
use crate::console::{ConsoleProcess, session};
use crate::host::{Host, is_error, text};
use crate::peers::{npm_bin, venv_bin};
use crate::previews::{PlainDir, QueuedWrite, gateway_command, queued_write, served};
use crate::util::{code, http, log_json, repo_root, stderr, stdout};

/// Waits until the queue lists a call other than `#seen`; returns it.
fn next_waiting(dir: &Path, seen: &str) -> Value {
    for _ in 0..1200 {
        if let Some(entry) = listed(dir, &[], 0)
            .into_iter()
            .find(|entry| entry["id"].as_u64() != seen.parse::<u64>().ok())
        {
            return entry;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("the queue never listed a call after #{seen}");
}

/// `approvals show ID --json`.
fn shown(dir: &Path, id: &str) -> Value {
    let out = approvals(dir, &[], &["show", id, "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

/// `approvals approve ID --arguments FILE` with `text` in FILE.
fn approve_edited(dir: &Path, id: &str, text: &str, extra: &[&str]) -> std::process::Output {
    let file = dir.join("edit.json");
    std::fs::write(&file, text).unwrap();
    let file = file.display().to_string();
    let mut args = vec!["approve", id, "--arguments", file.as_str()];
    args.extend_from_slice(extra);
    approvals(dir, &[], &args)
}

/// The user `hintgate approvals` names as who answered.
fn user() -> String {
    ["USER", "LOGNAME", "USERNAME"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|value| !value.is_empty()))
        .unwrap_or_else(|| "an unnamed user".to_owned())
}

#[test]
fn an_edited_write_is_asked_about_with_its_own_diff_and_runs_as_edited() {
    // No elicitation: the write waits in the approval queue.
    let QueuedWrite {
        dir,
        file,
        path,
        mut host,
    } = queued_write();
    let waiting = listed(dir.path(), &[], 1);
    let id = waiting[0]["id"].to_string();
    // The entry carries the tool's input schema, under its seal, so that
    // an edit is checked before it is stored.
    assert_eq!(
        waiting[0]["details"]["input_schema"]["type"], "object",
        "{}",
        waiting[0]
    );

    // Edits that cannot be used are refused with a clear error, and change
    // nothing: the call still waits, unanswered.
    let refused: Vec<(String, &str)> = vec![
        ("not json".to_owned(), "edit-not-json"),
        ("[1, 2]".to_owned(), "edit-not-object"),
        (
            format!(r#"{{"path": {path:?}, "path": "/etc/passwd", "content": "x"}}"#),
            "edit-duplicate-key",
        ),
        (r#"{"path": 5, "content": "x"}"#.to_owned(), "edit-schema"),
        (format!(r#"{{"path": {path:?}}}"#), "edit-schema"),
        (
            format!(r#"{{"path": {path:?}, "content": "x", "_meta": {{"progressToken": 1}}}}"#),
            "edit-reserved-key",
        ),
    ];
    for (edit, problem) in &refused {
        let out = approve_edited(dir.path(), &id, edit, &[]);
        assert_eq!(code(&out), 64, "{edit}: {}", stderr(&out));
        let said = stderr(&out);
        assert!(
            said.contains(problem) && said.contains("still waits"),
            "{edit}: {said}"
        );
        assert_eq!(shown(dir.path(), &id)["state"]["state"], "waiting");
    }
    // An edit is for this call only.
    let edit = format!(r#"{{"content": "one\nedited\nthree\n", "path": {path:?}}}"#);
    let out = approve_edited(dir.path(), &id, &edit, &["--remember", "always"]);
    assert_eq!(code(&out), 64, "{}", stderr(&out));
    assert_eq!(shown(dir.path(), &id)["state"]["state"], "waiting");
    // A call that is not in the queue is not answered.
    let out = approve_edited(dir.path(), "999", &edit, &[]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("no call #999"), "{}", stderr(&out));

    // The edit: the gateway decides on the edited call, previews it and
    // asks about it again, with its own diff.
    let out = approve_edited(dir.path(), &id, &edit, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).starts_with("Edited #"), "{}", stdout(&out));
    let again = next_waiting(dir.path(), &id);
    let again_id = again["id"].to_string();
    let prompt = again["prompt"].as_str().unwrap();
    assert!(
        prompt.starts_with(&format!(
            "hintgate: {} edited this call in the approval queue (#{id})",
            user()
        )),
        "{prompt}"
    );
    assert!(
        prompt.contains("    |  one\n    | -two\n    | +edited\n    |  three\n"),
        "the edited call's own diff: {prompt}"
    );
    assert_eq!(
        again["details"]["edited"]["of"],
        json!(id.parse::<u64>().unwrap())
    );
    assert_eq!(
        again["details"]["edited"]["original"]["content"],
        "one\n2\nthree\n"
    );
    assert_eq!(
        again["details"]["arguments"]["content"],
        "one\nedited\nthree\n"
    );
    // `show` says who edited it and what the host asked for.
    let out = approvals(dir.path(), &[], &["show", &again_id]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text_shown = stdout(&out);
    assert!(
        text_shown.contains(&format!(
            "    edited by {} (#{id}); the host asked for:\n",
            user()
        )) && text_shown.contains("      \"content\": \"one\\n2\\nthree\\n\",\n"),
        "{text_shown}"
    );
    // Remembering is not offered for an edited call.
    assert_eq!(again["offer"], "call", "{again}");
    // Nothing ran yet.
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "one\ntwo\nthree\n");

    // The first entry was answered: another edit of it does nothing.
    let out = approve_edited(
        dir.path(),
        &id,
        &format!(r#"{{"content": "late", "path": {path:?}}}"#),
        &[],
    );
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("no longer waits"), "{}", stderr(&out));

    // Approved as shown: the edited call runs, and the host is told.
    let out = approvals(dir.path(), &[], &["approve", &again_id]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let result = the_call(&mut host, "w1");
    assert!(!is_error(&result), "{result}");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "one\nedited\nthree\n",
        "the server was sent the edited call"
    );
    let blocks = result["content"].as_array().unwrap();
    let note = blocks.last().unwrap()["text"].as_str().unwrap();
    assert!(
        note.starts_with(&format!(
            "hintgate: a person ({}) edited this call before approving it.",
            user()
        )) && note.contains("one\\nedited\\nthree\\n")
            && note.contains("Changed: `content`."),
        "{note}"
    );
    let meta = &result["_meta"]["hintgate/edited"];
    assert_eq!(
        meta["arguments"]["content"], "one\nedited\nthree\n",
        "{result}"
    );
    assert_eq!(meta["original"]["content"], "one\n2\nthree\n", "{result}");
    assert_eq!(meta["changed"], json!(["content"]), "{result}");
    assert_eq!(meta["by"], user());
    host.close();

    // The record keeps both versions: what ran, and what the host asked.
    let records = log_json(dir.path(), &[]);
    let call = records
        .iter()
        .find(|record| record["tool"] == "write_file" && record.get("edit").is_some())
        .unwrap_or_else(|| panic!("{records:?}"));
    assert_eq!(
        call["arguments"]["content"], "one\nedited\nthree\n",
        "{call}"
    );
    assert_eq!(
        call["edit"]["original"]["content"], "one\n2\nthree\n",
        "{call}"
    );
    assert_eq!(call["edit"]["by"], user(), "{call}");
    assert!(
        call["approver"].as_str().unwrap().starts_with("person"),
        "{call}"
    );
    assert_eq!(call["preview"]["source"], "files", "{call}");
}

#[test]
fn an_edit_the_decision_hook_denies_is_denied_and_recorded() {
    let dir = PlainDir::new();
    let (data, file) = served(dir.path());
    let path = file.display().to_string();
    let hook = repo_root()
        .join("examples/hooks/decide.sh")
        .canonicalize()
        .unwrap()
        .display()
        .to_string();
    let config = dir.path().join("hintgate.toml");
    std::fs::write(
        &config,
        format!(
            "[gateway]\ndecide_command = [{hook:?}]\ndecide_command_mode = \"per-call\"\ndecide_timeout_ms = 15000\nask_timeout_s = 600\n\n[servers.fs]\ncommand = {:?}\nargs = [{:?}]\n",
            npm_bin("mcp-server-filesystem"),
            data.display().to_string(),
        ),
    )
    .unwrap();
    let config_text = config.display().to_string();
    let mut host = Host::start(dir.path(), &["run", "--config", &config_text], &[]);
    host.initialize(json!({}));
    send_call(
        &mut host,
        "w1",
        "fs__write_file",
        json!({"path": path, "content": "harmless\n"}),
    );
    let waiting = listed(dir.path(), &[], 1);
    let id = waiting[0]["id"].to_string();
    // The hook sees the edited arguments, and denies them.
    let edit = format!(r#"{{"path": {path:?}, "content": "rm -rf /\n"}}"#);
    let out = approve_edited(dir.path(), &id, &edit, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let result = the_call(&mut host, "w1");
    assert!(is_error(&result), "{result}");
    assert!(
        text(&result).contains("the arguments hold a destructive command"),
        "{result}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "one\ntwo\nthree\n");
    // The host is told the refusal is about the edited call.
    assert_eq!(
        result["_meta"]["hintgate/edited"]["arguments"]["content"], "rm -rf /\n",
        "{result}"
    );
    let note = result["content"].as_array().unwrap().last().unwrap()["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        note.contains("This answer is about the call with these arguments"),
        "{note}"
    );
    host.close();
    let records = log_json(dir.path(), &[]);
    let call = records
        .iter()
        .find(|record| record["tool"] == "write_file" && record.get("edit").is_some())
        .unwrap_or_else(|| panic!("{records:?}"));
    assert_eq!(call["verdict"], "deny", "{call}");
    assert_eq!(call["outcome"], "denied", "{call}");
    assert_eq!(call["arguments"]["content"], "rm -rf /\n", "{call}");
    assert_eq!(call["edit"]["original"]["content"], "harmless\n", "{call}");
}

#[test]
fn a_host_cannot_choose_an_edit_through_its_answer() {
    // A host that asks the person answers the form with arguments of its
    // own choosing: the form has no such field, and the call runs as the
    // host sent it, never as its answer says.
    let dir = PlainDir::new();
    let (data, file) = served(dir.path());
    let path = file.display().to_string();
    let fs = npm_bin("mcp-server-filesystem");
    let data_text = data.display().to_string();
    let mut host = Host::start(
        dir.path(),
        &["run", "--name", "fs", "--", &fs, &data_text],
        &[],
    );
    let chosen = json!({"path": path, "content": "chosen by the host\n"});
    let form = std::rc::Rc::new(std::cell::RefCell::new(Value::Null));
    let seen = std::rc::Rc::clone(&form);
    host.respond_with(move |request| {
        *seen.borrow_mut() = request["params"]["requestedSchema"].clone();
        json!({"action": "accept", "content": {"approve": true, "arguments": chosen.clone()}})
    });
    host.initialize(json!({"elicitation": {}}));
    let result = host.call("write_file", json!({"path": path, "content": "as sent\n"}));
    assert!(!is_error(&result), "{result}");
    assert!(
        form.borrow()["properties"].get("arguments").is_none(),
        "the form offers no edit: {}",
        form.borrow()
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "as sent\n");
    assert!(result["_meta"].get("hintgate/edited").is_none(), "{result}");
    assert!(
        result["content"]
            .as_array()
            .unwrap()
            .iter()
            .all(|block| !block["text"]
                .as_str()
                .unwrap_or_default()
                .contains("edited this call")),
        "{result}"
    );
    host.close();
    let records = log_json(dir.path(), &[]);
    assert!(
        records.iter().all(|record| record.get("edit").is_none()),
        "{records:?}"
    );
}

/// A request to the console with its session cookie (a POST as a browser's
/// form sends it); the whole answer.
fn console_request(base: &str, cookie: &str, method: &str, path: &str, form: &str) -> String {
    let host = base.trim_start_matches("http://");
    let body = if method == "POST" {
        format!(
            "Origin: {base}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
            form.len()
        )
    } else {
        String::new()
    };
    http(
        base,
        &format!(
            "{method} {path} HTTP/1.1\r\nHost: {host}\r\nCookie: {cookie}\r\n{body}Connection: close\r\n\r\n{form}"
        ),
    )
}

/// The console's waiting list once it shows a call other than `#seen`:
/// the call's number, the list's HTML and the form's CSRF token.
fn console_waiting(base: &str, cookie: &str, seen: &str) -> (String, String, String) {
    for _ in 0..600 {
        let answer = console_request(base, cookie, "GET", "/api/waiting", "");
        let body: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        let ids = body["ids"].as_str().unwrap_or_default().to_owned();
        if let Some(id) = ids.split(',').find(|id| !id.is_empty() && *id != seen) {
            let html = body["html"].as_str().unwrap().to_owned();
            let marker = "name=\"csrf\" value=\"";
            let at = html.find(marker).unwrap() + marker.len();
            let csrf = html[at..].split('"').next().unwrap().to_owned();
            return (id.to_owned(), html, csrf);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("the console never listed a call after #{seen}");
}

fn encoded(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

#[test]
fn the_console_edits_a_waiting_call_checks_it_and_asks_about_the_edited_call() {
    // The console's edit path over its HTTP endpoints, as its forms send
    // them (the headless Chromium test covers the pages themselves).
    // No elicitation: the write waits in the approval queue.
    let QueuedWrite {
        dir,
        file,
        path,
        mut host,
    } = queued_write();
    let console = ConsoleProcess::start(dir.path(), &[]);
    let (base, cookie) = session(&console.url);
    let (id, html, csrf) = console_waiting(&base, &cookie, "");
    // The card offers the edit, pre-filled with the arguments, escaped.
    assert!(
        html.contains("<details class=\"edit\">")
            && html.contains("action=\"/edit\"")
            && html.contains("&quot;content&quot;: &quot;one\\n2\\nthree\\n&quot;"),
        "{html}"
    );

    // Edits that cannot be used are refused and change nothing.
    for (edit, problem) in [
        ("not json".to_owned(), "edit-not-json"),
        (r#"{"path": 5, "content": "x"}"#.to_owned(), "edit-schema"),
        (
            format!(r#"{{"path": {path:?}, "content": "x", "_meta": {{}}}}"#),
            "edit-reserved-key",
        ),
    ] {
        let form = format!("csrf={csrf}&id={id}&arguments={}", encoded(&edit));
        let answer = console_request(&base, &cookie, "POST", "/edit", &form);
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        assert!(
            answer.contains(problem) && answer.contains("the call still waits"),
            "{answer}"
        );
    }
    // Without the form's CSRF token, nothing is answered.
    let edit = format!(r#"{{"path": {path:?}, "content": "one\nfrom the console\nthree\n"}}"#);
    let forged = format!("csrf=forged&id={id}&arguments={}", encoded(&edit));
    let answer = console_request(&base, &cookie, "POST", "/edit", &forged);
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    let (still, _, _) = console_waiting(&base, &cookie, "");
    assert_eq!(still, id, "the call still waits, unanswered");
    assert_eq!(shown(dir.path(), &id)["state"]["state"], "waiting");

    // The edit: the call is listed again as edited, with its own diff.
    let form = format!("csrf={csrf}&id={id}&arguments={}", encoded(&edit));
    let answer = console_request(&base, &cookie, "POST", "/edit", &form);
    assert!(answer.starts_with("HTTP/1.1 303"), "{answer}");
    assert!(
        answer.contains(&format!("location: /?note=edited&id={id}")),
        "{answer}"
    );
    let (again, html, csrf) = console_waiting(&base, &cookie, &id);
    assert!(
        html.contains(&format!("edited this call (#{id})"))
            && html.contains("+from the console")
            && html.contains("-two"),
        "{html}"
    );
    // Approved as shown: it runs as edited.
    let form = format!("csrf={csrf}&id={again}&answer=approve");
    let answer = console_request(&base, &cookie, "POST", "/answer", &form);
    assert!(answer.starts_with("HTTP/1.1 303"), "{answer}");
    let result = the_call(&mut host, "w1");
    assert!(!is_error(&result), "{result}");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "one\nfrom the console\nthree\n"
    );
    assert_eq!(
        result["_meta"]["hintgate/edited"]["changed"],
        json!(["content"]),
        "{result}"
    );
    host.close();
}

#[test]
fn the_python_sdk_host_gets_the_edited_calls_result_with_the_note() {
    // The Python SDK as the host, without elicitation: its call waits in
    // the queue while a person edits it from another terminal; the SDK
    // reads the result, the note included, and the file is the edited one.
    let dir = PlainDir::new();
    let (data, file) = served(dir.path());
    let path = file.display().to_string();
    let script =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/sdk_host.py");
    let mut command = gateway_command(&data);
    // As long as the person may take on a busy machine.
    let at = command.iter().position(|word| word == "60").unwrap();
    command[at] = "600".to_owned();
    let spec = json!({
        "command": command,
        "answer": null,
        "calls": [{"name": "write_file", "arguments": {"path": path, "content": "from the sdk\n"}}],
    });
    let host = std::process::Command::new(venv_bin("python"))
        .current_dir(dir.path())
        .env("HINTGATE_STATE_DIR", dir.path().join("state"))
        .arg(script)
        .arg(spec.to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A test that fails before the host ends leaves no host behind.
    struct Ends(Option<std::process::Child>);
    impl Drop for Ends {
        fn drop(&mut self) {
            if let Some(child) = self.0.as_mut() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
    let mut ends = Ends(Some(host));
    let waiting = listed(dir.path(), &[], 1);
    let id = waiting[0]["id"].to_string();
    let edit = format!(r#"{{"path": {path:?}, "content": "edited for the sdk\n"}}"#);
    let out = approve_edited(dir.path(), &id, &edit, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let again = next_waiting(dir.path(), &id);
    let out = approvals(dir.path(), &[], &["approve", &again["id"].to_string()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let output = ends.0.take().unwrap().wait_with_output().unwrap();
    let report_text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{report_text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_str(report_text.trim()).unwrap();
    assert_eq!(report["results"][0]["isError"], false, "{report}");
    let texts = report["results"][0]["text"].as_array().unwrap();
    assert!(
        texts.iter().any(|text| text
            .as_str()
            .unwrap()
            .contains("edited this call before approving it")),
        "{report}"
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "edited for the sdk\n"
    );
}
