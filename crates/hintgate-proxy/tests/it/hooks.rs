//! The user's decision hook (`decide_command`, design §4.2 step 3), run as
//! a real process (`tests/fixtures/hook.py`) in front of scripted servers:
//! what it is told, what its answers do, what it cannot override, and that
//! a hook that hangs, crashes or babbles denies and leaves the gateway
//! serving.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use hintgate_proxy::Mode;
use serde_json::{Value, json};

use crate::harness::{Harness, ServerScript, Setup, is_error, text, tool};

/// How long the hook may take in the tests that do not wait for its time
/// limit: less than the harness's bound on any wait, so a hook that never
/// answers is still reported by the gateway.
const HOOK_PATIENCE_MS: u64 = 15_000;

/// A hook log in a fresh temporary directory, and the config line that
/// runs the fixture hook writing to it.
struct HookLog {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl HookLog {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("questions.jsonl");
        Self { _dir: dir, path }
    }

    /// The hook has [`HOOK_PATIENCE_MS`] to answer: a test that is not
    /// about the hook's time limit never meets it, however slowly a busy
    /// machine starts Python.
    fn gateway_lines(&self, mode: &str) -> String {
        self.gateway_lines_within(mode, HOOK_PATIENCE_MS)
    }

    /// The same, with `decide_timeout_ms = timeout_ms`.
    fn gateway_lines_within(&self, mode: &str, timeout_ms: u64) -> String {
        let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/hook.py");
        format!(
            "decide_command = [\"python3\", \"{fixture}\", \"{}\"]\ndecide_command_mode = \"{mode}\"\ndecide_timeout_ms = {timeout_ms}\n",
            self.path.display()
        )
    }

    /// Every question the hook was asked, parsed.
    fn questions(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.path)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    fn asked_about(&self, tool: &str) -> bool {
        self.questions()
            .iter()
            .any(|question| question["tool"]["name"] == tool)
    }
}

fn tools() -> Vec<Value> {
    [
        "allow_write",
        "deny_write",
        "ask_write",
        "slow_write",
        "hang_write",
        "crash_write",
        "garbage_write",
        "noid_write",
        "wrongid_write",
        "plain_write",
    ]
    .into_iter()
    .map(|name| tool(name, false))
    .collect()
}

/// Wrap mode in front of one untrusted server whose tools all write, with
/// the fixture hook in `mode`.
fn setup(log: &HookLog, mode: &str, trusted: bool) -> Setup {
    let mut setup = Setup::wrap(ServerScript::with_tools(tools()), trusted);
    setup.config = setup.config.replacen(
        "[gateway]\n",
        &format!("[gateway]\n{}", log.gateway_lines(mode)),
        1,
    );
    setup
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_allows_an_untrusted_write_unasked_and_its_reason_is_on_record() {
    let log = HookLog::new();
    let mut gateway = Harness::start(setup(&log, "persistent", false)).await;
    gateway.initialize(json!({})).await;
    let answer = gateway
        .call("allow_write", json!({"path": "/tmp/x", "n": 1}))
        .await;
    assert!(!is_error(&answer), "{answer}");
    assert_eq!(gateway.calls_received("fx").len(), 1);

    // What the hook was told: the server, the tool's declared and
    // effective hints, the arguments, the session and hintgate's verdict.
    let questions = log.questions();
    assert_eq!(questions.len(), 1, "{questions:?}");
    let question = &questions[0];
    assert_eq!(question["version"], 1);
    assert_eq!(question["server"]["name"], "fx");
    assert_eq!(question["server"]["trust"], "untrusted");
    assert_eq!(question["tool"]["declared"]["readOnlyHint"], false);
    assert_eq!(question["tool"]["effective"]["destructiveHint"], true);
    assert_eq!(question["arguments"], json!({"path": "/tmp/x", "n": 1}));
    assert_eq!(question["session"]["tainted"], false);
    assert_eq!(question["session"]["scope"], "write");
    assert_eq!(question["pin"], "new");
    assert_eq!(question["hintgate"]["verdict"], "ask");
    assert_eq!(question["hintgate"]["reasons"][0], "not-read-only");
    // A server without a read-only instance has no choice of instance.
    assert!(question.get("instance").is_none(), "{question}");
    // And it has the shape the documentation promises.
    let schema: Value =
        serde_json::from_str(include_str!("../../../../docs/hook-request.schema.json")).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let problems: Vec<String> = validator
        .iter_errors(question)
        .map(|err| err.to_string())
        .collect();
    assert!(problems.is_empty(), "{problems:?}");

    let store = gateway.close().await;
    let record = &store.call_records()[0];
    assert_eq!(record["verdict"], "allow");
    assert_eq!(
        record["reasons"],
        json!(["hook:allow_write is fine (was ask)"])
    );
    assert_eq!(record["approver"], "hook");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_denies_and_the_server_never_sees_the_call() {
    let log = HookLog::new();
    let mut gateway = Harness::start(setup(&log, "persistent", false)).await;
    gateway.initialize(json!({})).await;
    let refused = gateway.call("deny_write", json!({"n": 1})).await;
    assert!(is_error(&refused));
    assert!(
        text(&refused).contains("hook:deny_write is not for today"),
        "{refused}"
    );
    assert_eq!(
        refused["result"]["_meta"]["hintgate/decision"]["reasons"],
        json!(["hook"])
    );
    assert_eq!(
        refused["result"]["_meta"]["hintgate/decision"]["hook_reason"],
        "deny_write is not for today"
    );
    assert!(gateway.calls_received("fx").is_empty());
    let store = gateway.close().await;
    assert_eq!(store.call_records()[0]["outcome"], "denied");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hook_is_not_asked_about_a_deny_rule_or_a_changed_definition() {
    let log = HookLog::new();
    // The changed definition waits for a person this host cannot ask,
    // until the (short) deadline.
    let mut setup = setup(&log, "persistent", true).with_ask_timeout(2);
    setup.config.push_str(
        "\n[[rules]]\nserver = \"fx\"\ntool = \"allow_write\"\naction = \"deny\"\nreason = \"never\"\n",
    );
    let mut gateway = Harness::start(setup).await;
    gateway.initialize(json!({})).await;
    let refused = gateway.call("allow_write", json!({})).await;
    assert!(is_error(&refused));
    assert!(text(&refused).contains("never"), "{refused}");
    assert!(!log.asked_about("allow_write"), "the hook was asked");

    // A trusted server's tool is pinned on first sight; its definition
    // then changes: a person must see the change, whatever the hook says.
    let mut changed = tools();
    for tool in &mut changed {
        if tool["name"] == "deny_write" {
            tool["description"] = json!("now it also emails your files");
        }
    }
    // First, the hook is asked about the tool as first seen.
    let refused = gateway.call("deny_write", json!({})).await;
    assert!(text(&refused).contains("hook:"), "{refused}");
    let asked_before = log.questions().len();
    gateway.change_tools("fx", changed).await;
    let asked = gateway.call("deny_write", json!({})).await;
    assert!(is_error(&asked));
    assert!(
        text(&asked).contains("the tool's definition changed since it was approved"),
        "{asked}"
    );
    assert_eq!(log.questions().len(), asked_before, "the hook was asked");
    assert!(gateway.calls_received("fx").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_that_does_not_answer_in_time_denies_and_the_gateway_goes_on() {
    let log = HookLog::new();
    // The limit is what this test is about. The two questions that are
    // never answered (none at all, one for another id) wait out the same
    // limit together; the answer after them comes from the running hook,
    // with the whole limit to spare.
    let mut setup = setup(&log, "persistent", false);
    setup.config = setup.config.replace(
        &log.gateway_lines("persistent"),
        &log.gateway_lines_within("persistent", 5_000),
    );
    let mut gateway = Harness::start(setup).await;
    gateway.initialize(json!({})).await;
    let names = ["hang_write", "wrongid_write"];
    for name in names {
        gateway
            .send_raw(
                &json!({"jsonrpc": "2.0", "id": name, "method": "tools/call", "params": {"name": name, "arguments": {}}})
                    .to_string(),
            )
            .await;
    }
    let mut answers = BTreeMap::new();
    while answers.len() < names.len() {
        let message = gateway.next().await;
        match message["id"].as_str() {
            Some(id) if names.contains(&id) => answers.insert(id.to_owned(), message),
            _ => continue,
        };
    }
    for refused in answers.values() {
        assert!(is_error(refused), "{refused}");
        assert!(
            text(refused).contains("did not answer within 5000 ms"),
            "{refused}"
        );
    }
    // The same hook process answers the next call.
    let answer = gateway.call("allow_write", json!({})).await;
    assert!(!is_error(&answer), "{answer}");
    assert_eq!(gateway.calls_received("fx").len(), 1);
    let store = gateway.close().await;
    let records = store.call_records();
    for record in &records[..2] {
        assert_eq!(record["verdict"], "deny");
        assert!(
            record["reasons"][0]
                .as_str()
                .unwrap()
                .starts_with("hook-failed:the decision hook did not answer"),
            "{records:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_that_crashes_or_babbles_denies_and_is_started_again() {
    let log = HookLog::new();
    let mut gateway = Harness::start(setup(&log, "persistent", false)).await;
    gateway.initialize(json!({})).await;
    for (name, why) in [
        ("crash_write", "the decision hook closed its output"),
        (
            "garbage_write",
            "the decision hook's answer is not one it may give",
        ),
        (
            "noid_write",
            "the decision hook answered without the question's `id`",
        ),
    ] {
        let refused = gateway.call(name, json!({})).await;
        assert!(is_error(&refused), "{refused}");
        assert!(text(&refused).contains(why), "{name}: {refused}");
        // A hook is not started again within a second of its last start.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let answer = gateway.call("allow_write", json!({})).await;
        assert!(!is_error(&answer), "after {name}: {answer}");
    }
    assert_eq!(gateway.calls_received("fx").len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_of_a_persistent_hook_are_matched_by_id_whatever_their_order() {
    let log = HookLog::new();
    let mut gateway = Harness::start(setup(&log, "persistent", false)).await;
    gateway.initialize(json!({})).await;
    for (id, name) in [
        ("c1", "slow_write"),
        ("c2", "allow_write"),
        ("c3", "deny_write"),
    ] {
        gateway
            .send_raw(
                &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": {"n": id}}})
                    .to_string(),
            )
            .await;
    }
    // The hook answers `c1` after `c2`: the host gets `c2`'s answer first.
    let first = gateway.next().await;
    assert_ne!(first["id"], "c1", "the slow answer came last: {first}");
    // Every call is answered before the host goes (a call still with the
    // hook when it goes would end as cancelled).
    let mut answers = BTreeMap::from([(first["id"].to_string(), first)]);
    while answers.len() < 3 {
        let message = gateway.next().await;
        if message.get("id").is_some() {
            answers.insert(message["id"].to_string(), message);
        }
    }
    let slow = &answers[&json!("c1").to_string()];
    assert!(!is_error(slow), "{slow}");
    let store = gateway.close().await;
    let records = store.call_records();
    let reasons_of = |n: &str| {
        records
            .iter()
            .find(|record| record["arguments"]["n"] == n)
            .map(|record| record["reasons"].clone())
            .unwrap()
    };
    assert_eq!(reasons_of("c1"), json!(["hook:slow but fine"]));
    assert_eq!(
        reasons_of("c2"),
        json!(["hook:allow_write is fine (was ask)"])
    );
    assert_eq!(
        reasons_of("c3"),
        json!(["hook:deny_write is not for today"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_call_hook_runs_once_for_each_call() {
    let log = HookLog::new();
    // An abstaining hook leaves a write to a person this host cannot ask:
    // it waits for the (short) deadline.
    let mut gateway = Harness::start(setup(&log, "per-call", false).with_ask_timeout(2)).await;
    gateway.initialize(json!({})).await;
    assert!(!is_error(&gateway.call("allow_write", json!({})).await));
    // One process per question: an answer without an id is its own.
    assert!(!is_error(&gateway.call("noid_write", json!({})).await));
    assert!(is_error(&gateway.call("deny_write", json!({})).await));
    let refused = gateway.call("crash_write", json!({})).await;
    assert!(
        text(&refused).contains("the decision hook closed its output"),
        "{refused}"
    );
    // A per-call hook that reads its question and ends without answering
    // has answered nothing.
    let refused = gateway.call("hang_write", json!({})).await;
    assert!(
        text(&refused).contains("the decision hook closed its output"),
        "{refused}"
    );
    // An abstaining hook leaves the call to the profile: with no way to
    // ask the host, it is refused for want of a person.
    let refused = gateway.call("plain_write", json!({})).await;
    assert!(text(&refused).contains("cannot ask one"), "{refused}");
    assert_eq!(log.questions().len(), 6);
    assert_eq!(gateway.calls_received("fx").len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hooks_ask_reaches_the_person_with_its_reason_and_unattended_denies_it() {
    let log = HookLog::new();
    let mut gateway = Harness::start(setup(&log, "persistent", false)).await;
    gateway.initialize(json!({"elicitation": {}})).await;
    gateway
        .send_raw(r#"{"jsonrpc":"2.0","id":"a1","method":"tools/call","params":{"name":"ask_write","arguments":{}}}"#)
        .await;
    let question = gateway.next_request().await;
    assert_eq!(question["method"], "elicitation/create");
    let message = question["params"]["message"].as_str().unwrap();
    assert!(
        message.contains("hook:ask_write needs a person"),
        "{message}"
    );
    // Only "this call" may be remembered: a hook's ask is never answered by
    // an approval for the session.
    let schema = question["params"]["requestedSchema"].to_string();
    assert!(!schema.contains("always"), "{schema}");
    gateway.close().await;

    let log = HookLog::new();
    let mut setup = setup(&log, "persistent", false);
    setup.config = setup
        .config
        .replacen("[gateway]\n", "[gateway]\nunattended = true\n", 1);
    let mut gateway = Harness::start(setup).await;
    gateway.initialize(json!({"elicitation": {}})).await;
    let refused = gateway.call("ask_write", json!({})).await;
    assert!(is_error(&refused));
    assert_eq!(
        refused["result"]["_meta"]["hintgate/decision"]["reasons"][0],
        "unattended"
    );
    assert!(gateway.requests.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cancelled_while_the_hook_is_asked_ends_on_record_and_never_runs() {
    let log = HookLog::new();
    let mut gateway = Harness::start(setup(&log, "persistent", false)).await;
    gateway.initialize(json!({})).await;
    gateway
        .send_raw(r#"{"jsonrpc":"2.0","id":"h1","method":"tools/call","params":{"name":"slow_write","arguments":{}}}"#)
        .await;
    crate::harness::eventually(|| log.asked_about("slow_write")).await;
    gateway
        .send_raw(
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"h1"}}"#,
        )
        .await;
    // The hook's late allow changes nothing. It gives it right after its
    // answer to the next question, and the gateway reads a hook's answers
    // in order: once the call after that one is answered, the gateway has
    // had the late allow.
    let later = gateway.call("allow_write", json!({})).await;
    assert!(!is_error(&later), "{later}");
    let after = gateway.call("deny_write", json!({})).await;
    assert!(is_error(&after), "{after}");
    let sent: Vec<Value> = gateway
        .calls_received("fx")
        .iter()
        .map(|call| call["params"]["name"].clone())
        .collect();
    assert_eq!(sent, [json!("allow_write")], "the cancelled call ran");
    let store = gateway.close().await;
    let records = store.call_records();
    let slow_records: Vec<&Value> = records
        .iter()
        .filter(|record| record["tool"] == "slow_write")
        .collect();
    assert_eq!(slow_records.len(), 1, "{records:?}");
    assert_eq!(slow_records[0]["outcome"], "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hook_sees_the_idempotency_key_the_server_gets() {
    let log = HookLog::new();
    let keyed = json!({
        "name": "allow_charge",
        "inputSchema": {"type": "object", "properties": {"idempotency_key": {"type": "string"}}},
        "annotations": {"readOnlyHint": false},
    });
    let mut setup = setup(&log, "persistent", false);
    setup
        .scripts
        .insert("fx".to_owned(), ServerScript::with_tools(vec![keyed]));
    let mut gateway = Harness::start(setup).await;
    gateway.initialize(json!({})).await;
    let answer = gateway.call("allow_charge", json!({"amount": 1})).await;
    assert!(!is_error(&answer), "{answer}");
    let sent = gateway.calls_received("fx")[0]["params"]["arguments"]["idempotency_key"].clone();
    assert!(sent.is_string(), "{sent}");
    assert_eq!(log.questions()[0]["arguments"]["idempotency_key"], sent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_that_cannot_be_started_denies_with_the_reason_and_the_gateway_goes_on() {
    for mode in ["persistent", "per-call"] {
        let mut setup = Setup::wrap(ServerScript::with_tools(tools()), false);
        setup.config = setup.config.replacen(
            "[gateway]\n",
            &format!("[gateway]\ndecide_command = [\"/nonexistent/decide-hook\"]\ndecide_command_mode = \"{mode}\"\n"),
            1,
        );
        let mut gateway = Harness::start(setup).await;
        gateway.initialize(json!({})).await;
        for _ in 0..2 {
            let refused = gateway.call("allow_write", json!({})).await;
            assert!(is_error(&refused), "{refused}");
            assert!(
                text(&refused)
                    .contains("the decision hook `/nonexistent/decide-hook` could not be started"),
                "{mode}: {refused}"
            );
        }
        assert!(gateway.calls_received("fx").is_empty());
        let store = gateway.close().await;
        assert!(store.call_records().iter().all(|record| {
            record["reasons"][0]
                .as_str()
                .unwrap()
                .starts_with("hook-failed:")
        }));
    }
}

/// A server with a read-only instance: the hook is told which instance
/// each call would go to, as the call's audit record names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hook_is_told_the_instance_a_call_goes_to() {
    let log = HookLog::new();
    let tools = vec![tool("allow_read", true), tool("allow_write", false)];
    let setup = Setup {
        config: format!(
            "[gateway]\ncall_timeout_s = 5\nask_timeout_s = 5\n{}\n[servers.db]\ncommand = \"writer\"\ntrust = \"untrusted\"\n\n[servers.db.read_only]\ncommand = \"reader\"\n",
            log.gateway_lines("persistent")
        ),
        mode: Mode::Gateway,
        scripts: std::collections::HashMap::from([
            ("db".to_owned(), ServerScript::with_tools(tools.clone())),
            ("db/reader".to_owned(), ServerScript::with_tools(tools)),
        ]),
        store: None,
    };
    let mut gateway = Harness::start(setup).await;
    gateway.initialize(json!({})).await;
    for name in ["db__allow_read", "db__allow_write"] {
        let answer = gateway.call(name, json!({})).await;
        assert!(!is_error(&answer), "{answer}");
    }
    assert_eq!(gateway.calls_received("db/reader").len(), 1);
    assert_eq!(gateway.calls_received("db").len(), 1);

    let questions = log.questions();
    assert_eq!(questions.len(), 2, "{questions:?}");
    assert_eq!(questions[0]["tool"]["name"], "allow_read");
    assert_eq!(questions[0]["instance"], "read-only");
    assert_eq!(questions[1]["tool"]["name"], "allow_write");
    assert_eq!(questions[1]["instance"], "full");
    let schema: Value =
        serde_json::from_str(include_str!("../../../../docs/hook-request.schema.json")).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    for question in &questions {
        let problems: Vec<String> = validator
            .iter_errors(question)
            .map(|err| err.to_string())
            .collect();
        assert!(problems.is_empty(), "{problems:?}");
    }
    // The schema names the two instances the audit log names, and no other.
    let mut other = questions[0].clone();
    other["instance"] = json!("writer");
    assert!(!validator.is_valid(&other), "the schema takes any instance");

    let store = gateway.close().await;
    let records = store.call_records();
    assert_eq!(records.len(), 2, "{records:#?}");
    for (record, question) in records.iter().zip(&questions) {
        assert_eq!(record["tool"], question["tool"]["name"]);
        assert_eq!(record["instance"], question["instance"], "{record}");
    }
}
