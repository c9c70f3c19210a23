//! `hintgate run` end to end: a scripted host, the real binary, and a fixture
//! server with well-behaved and hostile tools.

use serde_json::{Value, json};

use crate::host::{Host, fixture_server, is_error, text};
use crate::util::{tool, wrap_fixture};

/// A wrap-mode session whose fixture server appends its starts and calls to
/// a log file, so a test can count what reached it.
fn logged(
    dir: &std::path::Path,
    flags: &[&str],
    server_flags: &[&str],
) -> (Host, std::path::PathBuf) {
    let log = dir.join("calls.log");
    let log_text = log.display().to_string();
    (
        wrap_fixture(dir, flags, server_flags, &[("FIXTURE_LOG", &log_text)]),
        log,
    )
}

fn approve(remember: Option<&str>) -> impl FnMut(&Value) -> Value {
    let remember = remember.map(str::to_owned);
    move |_request| {
        let mut content = json!({"approve": true});
        if let Some(remember) = &remember {
            content["remember"] = json!(remember);
        }
        json!({"action": "accept", "content": content})
    }
}

#[test]
fn the_host_sees_vouched_annotations_and_sanitized_descriptions() {
    let dir = tempfile::tempdir().unwrap();
    let mut host = wrap_fixture(dir.path(), &["--name", "fx"], &["--ansi"], &[]);
    let init = host.initialize(json!({}));
    assert_eq!(init["result"]["serverInfo"]["name"], "fixture");
    assert_eq!(init["result"]["capabilities"]["tools"]["listChanged"], true);
    let list = host.request("tools/list", json!({}));
    let echo = tool(&list, "echo");
    // Untrusted: the cautious defaults, whatever the server claims...
    assert_eq!(
        echo["annotations"],
        json!({"readOnlyHint": false, "destructiveHint": true, "idempotentHint": false, "openWorldHint": true})
    );
    // ...and the claims themselves kept where a host can read them as claims.
    assert_eq!(echo["_meta"]["hintgate/declared"]["readOnlyHint"], true);
    assert_eq!(echo["description"], "Echo the arguments back. ");
    assert_eq!(
        echo["x-unknown"],
        json!({"kept": true}),
        "unknown fields survive"
    );
    assert!(host.log().contains("sanitized the tool's description"));
}

#[test]
fn an_allowed_call_reaches_the_server_with_its_meta_and_unknown_fields() {
    let dir = tempfile::tempdir().unwrap();
    let mut host = wrap_fixture(dir.path(), &["--trust", "trusted"], &[], &[]);
    host.initialize(json!({}));
    let response = host.request(
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "hi"}, "_meta": {"progressToken": "p1", "vendor/x": [1, 2]}}),
    );
    let echoed: Value = serde_json::from_str(&text(&response["result"])).unwrap();
    assert_eq!(echoed["arguments"], json!({"text": "hi"}));
    assert_eq!(
        echoed["_meta"],
        json!({"progressToken": "p1", "vendor/x": [1, 2]})
    );
    // A method the gateway does not know passes through in wrap mode.
    let custom = host.request("custom/echo", json!({"a": 1, "_meta": {"k": "v"}}));
    assert_eq!(
        custom["result"]["params"],
        json!({"a": 1, "_meta": {"k": "v"}})
    );
    assert_eq!(host.request("ping", json!({}))["result"], json!({}));
}

#[test]
fn a_lying_untrusted_server_is_asked_about_and_a_decline_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let (mut host, log) = logged(dir.path(), &[], &[]);
    host.respond_with(|_| json!({"action": "decline"}));
    host.initialize(json!({"elicitation": {}}));
    let refused = host.call("delete_everything", json!({}));
    assert!(is_error(&refused), "{refused}");
    assert!(text(&refused).contains("hintgate refused to run `delete_everything`"));
    assert!(text(&refused).contains("The person declined."));
    let prompt = host.requests.last().unwrap()["params"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        prompt.contains("the server says this tool only reads (unverified)"),
        "{prompt}"
    );
    assert!(
        !std::fs::read_to_string(&log)
            .unwrap()
            .contains("call delete_everything"),
        "a refused call never reaches the server"
    );
    // Destructive (untrusted): only "this call" may be approved.
    let schema = &host.requests.last().unwrap()["params"]["requestedSchema"];
    assert!(schema["properties"].get("remember").is_none(), "{schema}");

    host.respond_with(approve(None));
    let approved = host.call("delete_everything", json!({}));
    assert_eq!(text(&approved), "deleted everything");
}

#[test]
fn remembering_for_the_session_stops_the_questions() {
    let dir = tempfile::tempdir().unwrap();
    let mut host = wrap_fixture(dir.path(), &["--trust", "trusted"], &[], &[]);
    host.respond_with(approve(Some("this tool for the rest of this session")));
    host.initialize(json!({"elicitation": {"form": {}}}));
    assert_eq!(
        text(&host.call("write_note", json!({"text": "a"}))),
        "noted"
    );
    assert_eq!(host.requests.len(), 1);
    assert_eq!(
        text(&host.call("write_note", json!({"text": "b"}))),
        "noted"
    );
    assert_eq!(
        host.requests.len(),
        1,
        "the second call was not asked about"
    );
}

#[test]
fn a_host_without_elicitation_gets_a_refusal_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    // The call waits in the approval queue for `ask_timeout_s`, then is refused.
    let mut host = wrap_fixture(
        dir.path(),
        &["--trust", "trusted", "--ask-timeout", "1"],
        &[],
        &[],
    );
    host.initialize(json!({}));
    let refused = host.call("write_note", json!({"text": "x"}));
    assert!(is_error(&refused));
    assert!(
        text(&refused).contains("this host cannot ask one")
            && text(&refused).contains("waited in the approval queue as #1"),
        "{}",
        text(&refused)
    );
    assert_eq!(
        refused["_meta"]["hintgate/decision"]["reasons"],
        json!(["not-read-only"])
    );

    let mut unattended = wrap_fixture(
        dir.path(),
        &["--trust", "trusted", "--unattended"],
        &[],
        &[],
    );
    unattended.initialize(json!({"elicitation": {}}));
    let refused = unattended.call("write_note", json!({"text": "x"}));
    assert_eq!(
        refused["_meta"]["hintgate/decision"]["reasons"],
        json!(["unattended", "not-read-only"])
    );
    assert!(unattended.requests.is_empty(), "unattended never asks");
}

#[test]
fn a_definition_that_changes_mid_session_is_held_for_approval() {
    let dir = tempfile::tempdir().unwrap();
    let mut host = wrap_fixture(
        dir.path(),
        &["--trust", "trusted"],
        &["--change-after-list"],
        &[],
    );
    host.respond_with(approve(None));
    host.initialize(json!({"elicitation": {}}));
    host.wait_for_notification("notifications/tools/list_changed");
    let list = host.request("tools/list", json!({}));
    assert_eq!(tool(&list, "echo")["annotations"]["readOnlyHint"], false);
    let result = host.call("echo", json!({"text": "x"}));
    assert!(!is_error(&result), "{result}");
    let asked = host
        .requests
        .last()
        .expect("the changed tool was asked about");
    let prompt = asked["params"]["message"].as_str().unwrap();
    assert!(
        prompt.contains("the tool's definition changed since it was approved"),
        "{prompt}"
    );
    assert!(
        prompt.contains("annotations.readOnlyHint: true -> false"),
        "{prompt}"
    );
    // Approved once, the new definition is the pin: no second question.
    let before = host.requests.len();
    host.respond_with(|_| json!({"action": "decline"}));
    let again = host.call("echo", json!({"text": "y"}));
    assert!(
        is_error(&again),
        "not read-only any more, so it still asks (and is declined): {again}"
    );
    assert_eq!(host.requests.len(), before + 1);
    assert!(
        !host.requests.last().unwrap()["params"]["message"]
            .as_str()
            .unwrap()
            .contains("definition changed")
    );
}

#[test]
fn a_crash_mid_call_is_retried_once_for_a_trusted_read_only_tool() {
    let dir = tempfile::tempdir().unwrap();
    let (mut host, log) = logged(dir.path(), &["--trust", "trusted"], &[]);
    host.initialize(json!({}));
    let failed = host.call("crash", json!({}));
    assert!(is_error(&failed), "{failed}");
    assert!(
        text(&failed).contains("stopped before answering"),
        "{}",
        text(&failed)
    );
    // A crash later says how the server ended, as one at start does.
    assert!(
        text(&failed).contains("exited with status 3"),
        "{}",
        text(&failed)
    );
    assert!(
        text(&failed).contains("it already failed once"),
        "{}",
        text(&failed)
    );
    let calls = std::fs::read_to_string(&log).unwrap();
    assert_eq!(calls.matches("call crash").count(), 2, "{calls}");
    // The server is restarted on the next call.
    assert!(!is_error(&host.call("echo", json!({"text": "after"}))));
    assert_eq!(
        std::fs::read_to_string(&log)
            .unwrap()
            .matches("start")
            .count(),
        3
    );
}

#[test]
fn a_crash_mid_call_of_a_write_is_never_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.log");
    let config = format!(
        "[servers.fx]\ncommand = \"python3\"\nargs = [{:?}]\ntrust = \"trusted\"\nenv = {{ FIXTURE_LOG = {:?} }}\n\n[[rules]]\ntool = \"crash_write\"\naction = \"allow\"\n",
        fixture_server(),
        log.display().to_string()
    );
    std::fs::write(dir.path().join("hintgate.toml"), config).unwrap();
    let mut host = Host::start(dir.path(), &["run", "--config", "hintgate.toml"], &[]);
    host.initialize(json!({}));
    let failed = host.call("fx__crash_write", json!({}));
    assert!(
        text(&failed).contains("hintgate retries only read-only or idempotent tools"),
        "{failed}"
    );
    assert_eq!(
        std::fs::read_to_string(&log)
            .unwrap()
            .matches("call crash_write")
            .count(),
        1
    );
}

#[test]
fn hostile_servers_cannot_take_the_session_down() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[gateway]\ncall_timeout_s = 2\nmax_message_bytes = 1048576\n\n[servers.fx]\ncommand = \"python3\"\nargs = [{:?}]\ntrust = \"trusted\"\n\n[[rules]]\nserver = \"fx\"\ntool = \"[hg]*\"\naction = \"allow\"\n",
        fixture_server()
    );
    std::fs::write(dir.path().join("hintgate.toml"), config).unwrap();
    let mut host = Host::start(dir.path(), &["run", "--config", "hintgate.toml"], &[]);
    host.initialize(json!({}));

    let hung = host.call("fx__hang", json!({}));
    assert!(text(&hung).contains("did not answer within 2 s"), "{hung}");

    let garbage = host.call("fx__garbage", json!({}));
    assert!(text(&garbage).contains("not JSON-RPC"), "{garbage}");

    let huge = host.call("fx__huge", json!({}));
    assert!(is_error(&huge));
    assert!(
        host.log()
            .contains("larger than the limit of 1048576 bytes"),
        "{}",
        host.log()
    );

    let bad = host.call("fx__bad_structured", json!({}));
    assert!(
        text(&bad).contains("does not match the tool's output schema"),
        "{bad}"
    );

    // After all that, the session and the server still work.
    let echoed = host.call("fx__echo", json!({"text": "still here"}));
    assert!(text(&echoed).contains("still here"), "{echoed}");
}

#[test]
fn invalid_arguments_never_reach_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let (mut host, log) = logged(dir.path(), &["--trust", "trusted"], &[]);
    host.initialize(json!({"elicitation": {}}));
    let result = host.call("write_note", json!({"text": 42}));
    assert!(
        text(&result).contains("do not match the tool's input schema"),
        "{result}"
    );
    assert!(
        host.requests.is_empty(),
        "nobody is asked about an invalid call"
    );
    assert!(
        !std::fs::read_to_string(&log)
            .unwrap()
            .contains("call write_note")
    );
}

#[test]
fn a_server_request_to_the_host_is_relayed_and_answered() {
    let dir = tempfile::tempdir().unwrap();
    let mut host = wrap_fixture(dir.path(), &["--trust", "trusted"], &[], &[]);
    host.respond_with(|request| {
        assert_eq!(request["method"], "elicitation/create");
        // Marked as the server's question (the server is named after its
        // command in wrap mode).
        assert_eq!(
            request["params"]["message"],
            "[server python3 asks] What is your name?"
        );
        assert_eq!(
            request["params"]["requestedSchema"]["properties"]["name"]["title"],
            "[python3] name"
        );
        json!({"action": "accept", "content": {"name": "Ada"}})
    });
    host.initialize(json!({"elicitation": {}}));
    let result = host.call("ask_host", json!({}));
    let answer: Value = serde_json::from_str(&text(&result)).unwrap();
    assert_eq!(
        answer,
        json!({"action": "accept", "content": {"name": "Ada"}})
    );
}

#[test]
fn gateway_mode_prefixes_names_and_routes_everything() {
    let dir = tempfile::tempdir().unwrap();
    let server = fixture_server();
    let config = format!(
        "[servers.alpha]\ncommand = \"python3\"\nargs = [{server:?}, \"--name\", \"alpha\", \"--resources\"]\ntrust = \"trusted\"\n\n[servers.beta]\ncommand = \"python3\"\nargs = [{server:?}, \"--name\", \"beta\", \"--resources\"]\n"
    );
    std::fs::write(dir.path().join("hintgate.toml"), config).unwrap();
    let mut host = Host::start(
        dir.path(),
        &["run", "--config", "hintgate.toml", "--ask-timeout", "1"],
        &[],
    );
    let init = host.initialize(json!({}));
    assert_eq!(init["result"]["serverInfo"]["name"], "hintgate");
    let instructions = init["result"]["instructions"].as_str().unwrap();
    assert!(
        instructions.contains("## alpha\nInstructions of alpha."),
        "{instructions}"
    );
    assert!(init["result"]["capabilities"]["resources"].is_object());

    let list = host.request("tools/list", json!({}));
    assert_eq!(
        tool(&list, "alpha__echo")["annotations"]["readOnlyHint"],
        true,
        "alpha is trusted"
    );
    assert_eq!(
        tool(&list, "beta__echo")["annotations"]["readOnlyHint"],
        false,
        "beta is not"
    );
    let alpha = host.call("alpha__echo", json!({"text": "to alpha"}));
    assert!(text(&alpha).contains("to alpha"));
    assert!(
        is_error(&host.call("beta__echo", json!({}))),
        "untrusted, no elicitation: refused"
    );
    let unknown = host.request(
        "tools/call",
        json!({"name": "gamma__echo", "arguments": {}}),
    );
    assert_eq!(unknown["error"]["code"], -32602);

    let resources = host.request("resources/list", json!({}));
    let uris: Vec<&str> = resources["result"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["uri"].as_str().unwrap())
        .collect();
    assert_eq!(uris, ["fixture://alpha/readme", "fixture://beta/readme"]);
    let read = host.request("resources/read", json!({"uri": "fixture://beta/readme"}));
    assert_eq!(read["result"]["contents"][0]["text"], "read from beta");

    let prompts = host.request("prompts/list", json!({}));
    let names: Vec<&str> = prompts["result"]["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha__greet", "beta__greet"]);
    let prompt = host.request("prompts/get", json!({"name": "beta__greet"}));
    assert_eq!(
        prompt["result"]["messages"][0]["content"]["text"],
        "beta got prompt greet"
    );
}

#[test]
fn issue_11_a_private_resource_makes_open_world_tools_ask() {
    let dir = tempfile::tempdir().unwrap();
    let server = fixture_server();
    // `web` has one trusted read-only tool that reaches the web; `mail`
    // holds private data, among it a resource.
    let fetch = json!([{
        "name": "fetch",
        "description": "Fetches a URL.",
        "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": true},
    }]);
    std::fs::write(dir.path().join("web.json"), fetch.to_string()).unwrap();
    let config = format!(
        "[servers.mail]\ncommand = \"python3\"\nargs = [{server:?}, \"--name\", \"mail\", \"--resources\"]\ntrust = \"trusted\"\nprivate_data = true\n\n[servers.web]\ncommand = \"python3\"\nargs = [{server:?}, \"--name\", \"web\", \"--tools-file\", \"web.json\"]\ntrust = \"trusted\"\n"
    );
    std::fs::write(dir.path().join("hintgate.toml"), config).unwrap();
    let mut host = Host::start(dir.path(), &["run", "--config", "hintgate.toml"], &[]);
    host.respond_with(|_| json!({"action": "decline"}));
    host.initialize(json!({"elicitation": {}}));
    assert_eq!(text(&host.call("web__fetch", json!({}))), "ran fetch");
    assert!(host.requests.is_empty(), "nothing private read yet");

    let read = host.request("resources/read", json!({"uri": "fixture://mail/readme"}));
    assert_eq!(read["result"]["contents"][0]["text"], "read from mail");
    let asked = host.call("web__fetch", json!({}));
    assert!(is_error(&asked), "{asked}");
    assert_eq!(host.requests.len(), 1, "a person was asked");
    assert_eq!(
        asked["_meta"]["hintgate/decision"]["reasons"][0], "open-world-after-private-data",
        "{asked}"
    );
    assert!(
        host.log().contains("the session has read private data"),
        "{}",
        host.log()
    );
}

#[test]
fn a_server_that_cannot_start_fails_initialize_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let mut host = wrap_fixture(dir.path(), &[], &["--crash-at-start"], &[]);
    let init = host.request(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
    );
    let message = init["error"]["message"].as_str().unwrap();
    assert!(message.contains("did not start"), "{init}");

    let mut missing = Host::start(dir.path(), &["run", "--", "/nonexistent/server"], &[]);
    let init = missing.initialize(json!({}));
    assert!(
        init["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cannot start `/nonexistent/server`"),
        "{init}"
    );
}

#[test]
fn servers_die_with_the_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let (mut host, log) = logged(dir.path(), &["--trust", "trusted"], &[]);
    host.initialize(json!({}));
    host.call("echo", json!({}));
    let pid: u32 = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix("start "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    let status = host.close();
    assert!(status.success(), "{status:?}");
    let gone = !std::path::Path::new(&format!("/proc/{pid}")).exists()
        || std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| stat.contains(") Z "));
    assert!(gone, "the server outlived the gateway");
}

#[test]
fn the_demo_shows_every_kind_of_decision() {
    let output = crate::util::hintgate().arg("demo").output().unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        output.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for expected in [
        "1. notes__fetch_page",
        "decision: allow (read-only)",
        "decision: ask (open-world-after-private-data, open-world)",
        "the person: approved, and remembered for the rest of this session",
        "decision: allow (remembered-approval)",
        "the person: declined",
        "the server says this tool only reads (unverified)",
        "decision: deny (rule-deny)",
        "(community__wipe_disk is not listed: a deny rule hides it)",
        "refused: hintgate refused to run `wipe_disk` on server `community`.",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
}

fn modern_meta(capabilities: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "modern-test-host", "version": "1"},
    })
}

fn modern_call(host: &mut Host, name: &str, arguments: Value, extra: Value) -> Value {
    let mut params = json!({"name": name, "arguments": arguments, "_meta": modern_meta(json!({"elicitation": {}}))});
    if let (Some(params), Some(extra)) = (params.as_object_mut(), extra.as_object()) {
        params.extend(extra.clone());
    }
    host.request("tools/call", params)
}

#[test]
fn a_modern_host_discovers_and_gets_complete_results() {
    let dir = tempfile::tempdir().unwrap();
    let mut host = wrap_fixture(dir.path(), &["--trust", "trusted"], &[], &[]);
    let discover = host.request("server/discover", json!({"_meta": modern_meta(json!({}))}));
    let result = &discover["result"];
    assert_eq!(result["resultType"], "complete");
    assert!(
        result["supportedVersions"]
            .as_array()
            .unwrap()
            .contains(&json!("2026-07-28"))
    );
    assert_eq!(result["capabilities"]["tools"]["listChanged"], true);
    assert!(result["ttlMs"].is_number() && result["cacheScope"].is_string());

    let list = host.request("tools/list", json!({"_meta": modern_meta(json!({}))}));
    assert_eq!(list["result"]["resultType"], "complete");
    assert_eq!(list["result"]["cacheScope"], "private");
    let echoed = modern_call(&mut host, "echo", json!({"text": "modern"}), json!({}));
    assert_eq!(
        echoed["result"]["resultType"], "complete",
        "a legacy server's result gets resultType"
    );
    assert!(text(&echoed["result"]).contains("modern"));

    let old = host.request(
        "tools/list",
        json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01"}}),
    );
    assert_eq!(old["error"]["code"], -32022);
}

#[test]
fn a_modern_question_is_sealed_single_use_and_bound_to_its_call() {
    let dir = tempfile::tempdir().unwrap();
    let (mut host, log) = logged(dir.path(), &["--trust", "trusted"], &[]);
    let asked = modern_call(&mut host, "write_note", json!({"text": "a"}), json!({}));
    let result = &asked["result"];
    assert_eq!(result["resultType"], "input_required", "{asked}");
    let question = &result["inputRequests"]["hintgate/approve"];
    assert_eq!(question["method"], "elicitation/create");
    assert!(
        question["params"]["message"]
            .as_str()
            .unwrap()
            .contains("write_note")
    );
    let state = result["requestState"].as_str().unwrap().to_owned();
    let approve = json!({"hintgate/approve": {"action": "accept", "content": {"approve": true}}});
    let calls = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .matches("call write_note")
            .count()
    };

    // Altered: one character of the seal changed.
    let mut altered = state.clone();
    let last = altered.pop().unwrap();
    altered.push(if last == '0' { '1' } else { '0' });
    let forged = modern_call(
        &mut host,
        "write_note",
        json!({"text": "a"}),
        json!({"requestState": altered, "inputResponses": approve}),
    );
    assert!(
        text(&forged["result"]).contains("altered or was not issued by this gateway"),
        "{forged}"
    );

    // Bound to its arguments.
    let other = modern_call(
        &mut host,
        "write_note",
        json!({"text": "b"}),
        json!({"requestState": state, "inputResponses": approve}),
    );
    assert!(
        text(&other["result"]).contains("given for a different call"),
        "{other}"
    );
    assert_eq!(calls(), 0);

    // The real answer runs the call once; the same state again is refused.
    let ran = modern_call(
        &mut host,
        "write_note",
        json!({"text": "a"}),
        json!({"requestState": state, "inputResponses": approve}),
    );
    assert_eq!(text(&ran["result"]), "noted", "{ran}");
    assert_eq!(ran["result"]["resultType"], "complete");
    let replayed = modern_call(
        &mut host,
        "write_note",
        json!({"text": "a"}),
        json!({"requestState": state, "inputResponses": approve}),
    );
    assert!(
        text(&replayed["result"]).contains("already used"),
        "{replayed}"
    );
    assert_eq!(calls(), 1, "only the approved call reached the server");

    // A legacy server's own question reaches a modern host inside the
    // host's call, and the answer reaches the server.
    let relayed = modern_call(&mut host, "ask_host", json!({}), json!({}));
    let result = &relayed["result"];
    assert_eq!(result["resultType"], "input_required", "{relayed}");
    let question = &result["inputRequests"]["hintgate/server-request"];
    assert_eq!(question["method"], "elicitation/create");
    assert_eq!(
        question["params"]["message"],
        "[server python3 asks] What is your name?"
    );
    let state = result["requestState"].as_str().unwrap().to_owned();
    let answer =
        json!({"hintgate/server-request": {"action": "accept", "content": {"name": "Ada"}}});
    let answered = modern_call(
        &mut host,
        "ask_host",
        json!({}),
        json!({"requestState": state, "inputResponses": answer}),
    );
    let seen: Value = serde_json::from_str(&text(&answered["result"])).unwrap();
    assert_eq!(
        seen,
        json!({"action": "accept", "content": {"name": "Ada"}}),
        "{answered}"
    );
    let again = modern_call(
        &mut host,
        "ask_host",
        json!({}),
        json!({"requestState": state, "inputResponses": answer}),
    );
    assert!(text(&again["result"]).contains("already used"), "{again}");

    // Each of the three calls has its record: the call that was asked the
    // question ends with the server's result, the answer is its own call,
    // and the replayed answer is a deny with its reason.
    let state_dir = dir.path().join("state").display().to_string();
    let log = crate::util::run(
        dir.path(),
        &[
            "log",
            "--state-dir",
            &state_dir,
            "--json",
            "--tool",
            "ask_host",
        ],
    );
    let records: Vec<Value> = String::from_utf8_lossy(&log.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let summary: Vec<(&str, &str, &str)> = records
        .iter()
        .map(|r| {
            (
                r["verdict"].as_str().unwrap(),
                r["approver"].as_str().unwrap(),
                r["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("allow", "read-only", "ok"),
            ("allow", "person (relayed answer)", "relayed"),
            ("deny", "gateway", "denied"),
        ],
        "{records:?}"
    );
    assert_eq!(records[2]["reasons"], json!(["invalid-request-state"]));
}

#[test]
fn pages_progress_and_cancellation_pass_through() {
    let dir = tempfile::tempdir().unwrap();
    let (mut host, log) = logged(dir.path(), &["--trust", "trusted"], &["--paginate"]);
    // The host takes elicitation, so a server may ask it a question.
    host.initialize(json!({"elicitation": {}}));
    // The server lists three tools a page; the host gets all of them.
    let list = host.request("tools/list", json!({}));
    assert_eq!(
        list["result"]["tools"].as_array().unwrap().len(),
        12,
        "{list}"
    );
    assert!(list["result"].get("nextCursor").is_none());

    // Progress notifications reach the host with its own token.
    let done = host.request(
        "tools/call",
        json!({"name": "progress", "arguments": {}, "_meta": {"progressToken": "tok-1"}}),
    );
    assert_eq!(text(&done["result"]), "done");
    let progress: Vec<&Value> = host
        .notifications
        .iter()
        .filter(|n| n["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 2, "{:?}", host.notifications);
    assert_eq!(progress[0]["params"]["progressToken"], "tok-1");

    // Cancelling a call in flight reaches the server under the id it knows.
    // `ask_host` (read-only, so allowed) waits for the host's answer to the
    // server's own question; the host cancels the call instead of answering.
    host.send(&json!({"jsonrpc": "2.0", "id": "slow-2", "method": "tools/call", "params": {"name": "ask_host", "arguments": {}}}));
    let question = host.next_message();
    assert_eq!(question["method"], "elicitation/create");
    host.send(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "slow-2", "reason": "user pressed stop"}}));
    // The gateway still answers, and the server saw the cancellation.
    assert_eq!(host.request("ping", json!({}))["result"], json!({}));
    let echoed = host.call("echo", json!({"text": "after cancel"}));
    assert!(text(&echoed).contains("after cancel"));
    let calls = std::fs::read_to_string(&log).unwrap();
    assert!(
        calls.lines().any(|line| line.starts_with("cancelled ")),
        "{calls}"
    );
}

#[test]
fn a_2026_07_28_server_that_answers_the_era_probe_late_is_probed_again() {
    let dir = tempfile::tempdir().unwrap();
    // The first `server/discover` is answered after the probe gave up, and
    // the server then refuses `initialize` the 2026-07-28 way.
    let mut host = wrap_fixture(
        dir.path(),
        &["--trust", "trusted"],
        &["--modern-only", "--name", "late", "--slow-discover", "4"],
        &[],
    );
    let init = host.initialize(json!({}));
    assert_eq!(init["result"]["serverInfo"]["name"], "late", "{init}");
    let list = host.request("tools/list", json!({}));
    assert!(
        list["result"]["tools"].as_array().unwrap().len() > 5,
        "{list}"
    );
}

#[test]
fn a_2026_07_28_server_is_detected_and_spoken_to_in_its_era() {
    let dir = tempfile::tempdir().unwrap();
    // A legacy host in front of a modern-only server; it takes questions.
    let mut host = wrap_fixture(
        dir.path(),
        &["--trust", "trusted"],
        &["--modern-only", "--name", "modern"],
        &[],
    );
    let init = host.initialize(json!({"elicitation": {}}));
    assert_eq!(init["result"]["serverInfo"]["name"], "modern", "{init}");
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    let list = host.request("tools/list", json!({}));
    assert!(
        list["result"]["tools"].as_array().unwrap().len() > 5,
        "{list}"
    );
    let echoed = host.request(
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "x"}, "_meta": {"progressToken": "p"}}),
    );
    let seen: Value = serde_json::from_str(&text(&echoed["result"])).unwrap();
    assert_eq!(
        seen["_meta"]["progressToken"], "p",
        "the host's own _meta survives"
    );
    assert_eq!(
        seen["_meta"]["io.modelcontextprotocol/protocolVersion"],
        "2026-07-28"
    );
    // The server's input-required result becomes a question to this legacy
    // host, and the server is called again with the answer and its state.
    host.respond_with(|request| {
        assert_eq!(
            request["params"]["message"],
            "[server python3 asks] Your name?"
        );
        json!({"action": "accept", "content": {"name": "Grace"}})
    });
    let needs = host.call("needs_input", json!({}));
    let seen: Value = serde_json::from_str(&text(&needs)).unwrap();
    assert_eq!(seen["state"], "server-own-state", "{needs}");
    assert_eq!(
        seen["responses"]["fixture/name"]["content"]["name"],
        "Grace"
    );

    // A modern host in front of the same server: the server's own question
    // and state pass through, and so does the host's answer.
    let mut modern = wrap_fixture(dir.path(), &["--trust", "trusted"], &["--modern-only"], &[]);
    let asked = modern_call(&mut modern, "needs_input", json!({}), json!({}));
    assert_eq!(asked["result"]["resultType"], "input_required");
    assert_eq!(asked["result"]["requestState"], "server-own-state");
    let question = &asked["result"]["inputRequests"]["fixture/name"]["params"];
    assert_eq!(question["message"], "[server python3 asks] Your name?");
    assert_eq!(
        question["requestedSchema"]["properties"]["name"]["title"],
        "[python3] name"
    );
    let answer = json!({"fixture/name": {"action": "accept", "content": {"name": "Ada"}}});
    let answered = modern_call(
        &mut modern,
        "needs_input",
        json!({}),
        json!({"requestState": "server-own-state", "inputResponses": answer}),
    );
    let seen: Value = serde_json::from_str(&text(&answered["result"])).unwrap();
    assert_eq!(seen["responses"], answer);
    assert_eq!(seen["state"], "server-own-state");
}

#[test]
fn issue_9_a_continuation_in_gateway_mode_calls_the_servers_own_tool() {
    let dir = tempfile::tempdir().unwrap();
    let server = fixture_server();
    let config = format!(
        "[servers.m]\ncommand = \"python3\"\nargs = [{server:?}, \"--modern-only\"]\ntrust = \"trusted\"\n"
    );
    std::fs::write(dir.path().join("hintgate.toml"), config).unwrap();
    let mut host = Host::start(dir.path(), &["run", "--config", "hintgate.toml"], &[]);
    host.initialize(json!({"elicitation": {}}));
    host.respond_with(|_| json!({"action": "accept", "content": {"name": "Grace"}}));
    // The second send, with the server's question answered, names the tool
    // as the server knows it, as the first one did: never the host's name.
    let needs = host.call("m__needs_input", json!({}));
    let seen: Value = serde_json::from_str(&text(&needs)).unwrap_or_else(|_| panic!("{needs}"));
    assert_eq!(seen["name"], "needs_input", "{needs}");
    assert_eq!(seen["state"], "server-own-state");
    assert_eq!(
        seen["responses"]["fixture/name"]["content"]["name"],
        "Grace"
    );
    assert_eq!(
        seen["_meta"]["io.modelcontextprotocol/protocolVersion"], "2026-07-28",
        "{needs}"
    );
}

#[test]
#[expect(
    clippy::disallowed_macros,
    reason = "the test prints what the sandbox enforced, and why it skips"
)]
fn a_sandbox_the_kernel_cannot_enforce_keeps_the_server_from_starting() {
    // A process limit is what this test asks for: the kernel holds it for
    // a normal user (in the server's own user namespace) and never for
    // root, whose processes it does not count.
    let Some(python) = ["/usr/bin/python3", "/bin/python3"]
        .into_iter()
        .find(|path| std::path::Path::new(path).is_file())
    else {
        println!("skipped: no system python3 to run the fixture");
        return;
    };
    let kernel = hintgate_sandbox::Kernel::current();
    let table = hintgate_policy::config::SandboxConfig {
        max_processes: Some(64),
        ..Default::default()
    };
    let report = kernel.report(&table);
    println!("sandbox on this kernel: {}", report.summary());
    let missing = report.missing_required();
    let dir = tempfile::tempdir().unwrap();
    let server = fixture_server();
    let config = format!(
        "[servers.boxed]\ncommand = {python:?}\nargs = [{server:?}]\ntrust = \"trusted\"\n\n[servers.boxed.sandbox]\nmax_processes = 64\n\n\
         [servers.loose]\ncommand = {python:?}\nargs = [{server:?}]\ntrust = \"trusted\"\n\n[servers.loose.sandbox]\nmax_processes = 64\nbest_effort = true\n"
    );
    std::fs::write(dir.path().join("hintgate.toml"), config).unwrap();
    let mut host = Host::start(dir.path(), &["run", "--config", "hintgate.toml"], &[]);
    host.initialize(json!({}));
    let boxed = host.call("boxed__echo", json!({"text": "confined"}));
    let loose = host.call("loose__echo", json!({"text": "best effort"}));
    assert!(text(&loose).contains("best effort"), "{loose}");
    if missing.is_empty() {
        // Everything it asks for holds: both start, confined.
        assert!(text(&boxed).contains("confined"), "{boxed}");
        assert!(!host.log().contains("not enforced"), "{}", host.log());
        return;
    }
    // The error names what is missing; the best-effort server runs with
    // what holds, and the log says exactly what does not.
    assert!(is_error(&boxed), "{boxed}");
    for property in &missing {
        assert!(text(&boxed).contains(property.property.as_str()), "{boxed}");
    }
    assert!(text(&boxed).contains("best_effort"), "{boxed}");
    assert!(
        host.log().contains("not enforced: process-limit"),
        "{}",
        host.log()
    );
}

#[test]
fn pins_and_standing_approvals_outlive_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let hints = |read_only: bool| json!({"readOnlyHint": read_only, "destructiveHint": false, "idempotentHint": read_only, "openWorldHint": false});
    let write_tools = |echo_read_only: bool| {
        let tools = json!([
            {"name": "echo", "inputSchema": {"type": "object"}, "annotations": hints(echo_read_only)},
            {"name": "write_note", "inputSchema": {"type": "object"}, "annotations": hints(false)},
        ]);
        std::fs::write(dir.path().join("tools.json"), tools.to_string()).unwrap();
    };
    let session = || {
        let mut host = crate::host::start_tools_file(dir.path(), &[]);
        host.initialize(json!({"elicitation": {}}));
        host
    };
    let pins = |args: &[&str]| {
        let state = dir.path().join("state").display().to_string();
        let mut all = vec!["pins", "--state-dir", state.as_str()];
        all.extend_from_slice(args);
        let output = crate::util::run(dir.path(), &all);
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
        )
    };

    // First run: the person approves the write always.
    write_tools(true);
    let mut first = session();
    first.respond_with(approve(Some("this tool always")));
    assert_eq!(text(&first.call("echo", json!({}))), "ran echo");
    assert_eq!(text(&first.call("write_note", json!({}))), "ran write_note");
    let offered = &first.requests[0]["params"]["requestedSchema"]["properties"]["remember"]["enum"];
    assert!(
        offered
            .as_array()
            .unwrap()
            .contains(&json!("this tool always")),
        "{offered}"
    );
    drop(first);

    // Second run: the standing approval holds, nobody is asked.
    let mut second = session();
    assert_eq!(
        text(&second.call("write_note", json!({}))),
        "ran write_note"
    );
    assert!(second.requests.is_empty());
    drop(second);

    // The server changes echo while the gateway is stopped: held across the restart.
    write_tools(false);
    let mut third = session();
    third.respond_with(|_| json!({"action": "decline"}));
    let held = third.call("echo", json!({}));
    assert_eq!(
        held["_meta"]["hintgate/decision"]["reasons"][0], "definition-changed",
        "{held}"
    );
    assert!(
        third.requests[0]["params"]["message"]
            .as_str()
            .unwrap()
            .contains("annotations.readOnlyHint: true -> false")
    );
    drop(third);

    let (code, listed) = pins(&["list"]);
    assert_eq!(code, Some(0));
    assert!(
        listed
            .lines()
            .any(|line| line.contains("echo") && line.contains("CHANGED, held for approval")),
        "{listed}"
    );
    let (_, diff) = pins(&["diff", "fx", "echo"]);
    assert!(diff.contains("annotations.readOnlyHint:  (hint)"), "{diff}");
    assert_eq!(pins(&["approve", "fx", "echo"]).0, Some(0));

    // Approved from the command line: the change is no longer held.
    let mut fourth = session();
    fourth.respond_with(|_| json!({"action": "decline"}));
    let asked = fourth.call("echo", json!({}));
    assert_eq!(
        asked["_meta"]["hintgate/decision"]["reasons"][0], "not-read-only",
        "{asked}"
    );
    drop(fourth);

    // Revoked: the standing approval of the write is gone with its pin.
    assert_eq!(pins(&["revoke", "fx", "write_note"]).0, Some(0));
    let mut fifth = session();
    fifth.respond_with(|_| json!({"action": "decline"}));
    assert!(is_error(&fifth.call("write_note", json!({}))));
    assert_eq!(fifth.requests.len(), 1, "asked again after the revoke");
}

#[test]
fn every_call_is_in_the_audit_log_and_an_edit_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let mut host = wrap_fixture(
        dir.path(),
        &["--trust", "trusted", "--name", "fx"],
        &[],
        &[],
    );
    host.respond_with(|_| json!({"action": "decline"}));
    host.initialize(json!({"elicitation": {}}));
    assert!(
        text(&host.call(
            "echo",
            json!({"text": "hi", "api_token": "s3cret", "key": "xoxb-123456789012-abcdefghijkl"})
        ))
        .contains("hi")
    );
    assert!(is_error(&host.call("write_note", json!({"text": "x"}))));
    // Ending the session writes what the audit log still holds.
    assert!(host.close().success());

    let state = dir.path().join("state").display().to_string();
    let log = crate::util::run(dir.path(), &["log", "--state-dir", &state, "--json"]);
    let records: Vec<Value> = String::from_utf8_lossy(&log.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(records.len(), 2, "one record per call: {records:?}");
    assert_eq!(records[0]["tool"], "echo");
    assert_eq!(
        (
            records[0]["verdict"].as_str(),
            records[0]["outcome"].as_str()
        ),
        (Some("allow"), Some("ok"))
    );
    // The argument's name does not redact it; its value does not look
    // like a credential.
    assert_eq!(records[0]["arguments"]["text"], "hi");
    assert_eq!(records[0]["arguments"]["api_token"], "s3cret");
    assert!(
        records[0]["arguments"]["key"]
            .as_str()
            .unwrap()
            .starts_with("[redacted len=30 hmac="),
        "{}",
        records[0]["arguments"]
    );
    assert_eq!(records[0]["approver"], "read-only");
    assert!(records[0]["pin"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(
        (
            records[1]["verdict"].as_str(),
            records[1]["outcome"].as_str()
        ),
        (Some("ask"), Some("denied"))
    );
    assert!(!String::from_utf8_lossy(&log.stdout).contains("xoxb-1234"));

    let verify = crate::util::run(dir.path(), &["log", "--state-dir", &state, "verify"]);
    assert_eq!(
        verify.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );

    // Someone turns the refusal into an allow behind the gateway's back.
    let connection = rusqlite::Connection::open(dir.path().join("state/state.db")).unwrap();
    let (seq, body): (i64, String) = connection
        .query_row(
            "SELECT seq, body FROM audit WHERE body LIKE '%\"verdict\":\"ask\"%'",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    connection
        .execute(
            "UPDATE audit SET body = ?1 WHERE seq = ?2",
            rusqlite::params![
                body.replace("\"deny\"", "\"allow\"")
                    .replace("\"ask\"", "\"allow\""),
                seq
            ],
        )
        .unwrap();
    drop(connection);
    let broken = crate::util::run(dir.path(), &["log", "--state-dir", &state, "verify"]);
    assert_eq!(broken.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&broken.stdout).contains(&format!("record {seq} was edited")),
        "{}",
        String::from_utf8_lossy(&broken.stdout)
    );
}

#[test]
fn a_2026_07_28_server_that_answers_the_probe_late_is_still_spoken_to_in_its_era() {
    let dir = tempfile::tempdir().unwrap();
    // The probe waits 3 s; the server answers it after 4.5 s, when
    // `initialize` (which it refuses) has gone out. That `initialize` waits
    // for the call timeout, 30 s, so a server slow to start on a busy
    // machine still answers the probe before it is given up on.
    let mut host = wrap_fixture(
        dir.path(),
        &["--trust", "trusted", "--call-timeout", "30"],
        &["--modern-only", "--name", "slow", "--slow-discover", "4.5"],
        &[],
    );
    let init = host.initialize(json!({}));
    assert_eq!(init["result"]["serverInfo"]["name"], "slow", "{init}");
    let echoed = host.call("echo", json!({"text": "late but modern"}));
    assert!(!is_error(&echoed), "{echoed}");
    let seen: Value = serde_json::from_str(&text(&echoed)).unwrap();
    assert_eq!(
        seen["_meta"]["io.modelcontextprotocol/protocolVersion"],
        "2026-07-28"
    );
}
