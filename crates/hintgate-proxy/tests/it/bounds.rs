//! Nothing a host or a server sends can make the gateway hold, or pass on,
//! more than its limits: JSON nested too deeply, a tool list that never
//! ends, a flood of `list_changed`, a host that stops reading.

use std::collections::HashMap;
use std::sync::Arc;

use hintgate_proxy::Mode;
use hintgate_store::EntryKind;
use serde_json::{Value, json};

use crate::harness::{AppendMode, Behaviour, Harness, ServerScript, Setup, is_error, text, tool};

/// JSON text: `depth` arrays, one inside the other.
fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

/// A tool result whose `structuredContent`-free body holds `depth` nested
/// arrays (the line that carries it nests three levels more).
fn deep_result(depth: usize) -> String {
    format!(
        r#"{{"content":[{{"type":"text","text":"deep"}}],"nested":{}}}"#,
        nested(depth)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_an_over_deep_answer_fails_only_its_call_and_is_recorded() {
    let deep_note = format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"level":"info","data":{}}}}}"#,
        nested(10_000)
    );
    let deep_question = format!(
        r#"{{"jsonrpc":"2.0","id":"deep-ask","method":"elicitation/create","params":{{"message":"?","requestedSchema":{}}}}}"#,
        nested(10_000)
    );
    let script = ServerScript::with_tools(vec![
        tool("read", true),
        tool("deep", true),
        tool("nested", true),
        tool("chatty", true),
    ])
    .answering("deep", Behaviour::Raw(deep_result(10_000)))
    .answering("nested", Behaviour::Raw(deep_result(50)))
    .answering(
        "chatty",
        Behaviour::LinesThenEcho(vec![deep_note, deep_question]),
    );
    let mut gateway = Harness::start(Setup::wrap(script, true)).await;
    gateway.initialize(json!({"elicitation": {}})).await;

    // A result a host's parser may choke on (serde_json stops at 128
    // levels) is not passed on: the call fails, and says why.
    let refused = gateway.call("deep", json!({"n": 1})).await;
    assert!(is_error(&refused), "{refused}");
    assert!(
        text(&refused).contains("nests deeper than 64 levels"),
        "{refused}"
    );
    // Within the limit, a nested result passes as it is.
    let passed = gateway.call("nested", json!({"n": 2})).await;
    assert_eq!(
        passed["result"]["nested"].to_string(),
        nested(50),
        "{passed}"
    );
    // The server's own over-deep notification is dropped, and its over-deep
    // request answered with an error, never relayed to the host.
    let chatty = gateway.call("chatty", json!({"n": 3})).await;
    assert!(!is_error(&chatty), "{chatty}");
    gateway.received_eventually("fx", "deep-ask").await;
    let answered: Value = gateway
        .received_by("fx")
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|message| message["id"] == "deep-ask")
        .unwrap();
    assert_eq!(answered["error"]["code"], -32600, "{answered}");
    // Only that call failed: the server was not restarted, and still works.
    let read = gateway.call("read", json!({"n": 4})).await;
    assert_eq!(text(&read), r#"{"n":4}"#, "{read}");
    assert_eq!(gateway.starts.lock().unwrap()["fx"], 1);
    assert!(
        gateway.requests.is_empty(),
        "nothing was relayed: {:?}",
        gateway.requests
    );
    assert!(
        gateway
            .notes
            .iter()
            .all(|note| note.get("unparseable").is_none()
                && note["method"] != "notifications/message"),
        "{:?}",
        gateway.notes
    );

    let store = gateway.close().await;
    let records = store.records();
    let outcome_of = |n: i64| {
        let call = records
            .iter()
            .find(|entry| entry.kind == Some(EntryKind::Call) && entry.body["arguments"]["n"] == n)
            .unwrap();
        records
            .iter()
            .find(|entry| entry.kind == Some(EntryKind::Outcome) && entry.call == Some(call.seq))
            .map(|entry| entry.body["outcome"].clone())
            .unwrap()
    };
    assert_eq!(outcome_of(1), "protocol-error");
    assert_eq!(outcome_of(2), "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_an_over_deep_host_request_is_refused() {
    let script = ServerScript::with_tools(vec![tool("read", true)]);
    let mut gateway = Harness::start(Setup::wrap(script, true)).await;
    gateway.initialize(json!({})).await;
    // Within what serde reads (128 levels), deeper than the gateway's limit.
    let call = format!(
        r#"{{"jsonrpc":"2.0","id":"deep-call","method":"tools/call","params":{{"name":"read","arguments":{{"n":{}}}}}}}"#,
        nested(100)
    );
    gateway.send_raw(&call).await;
    let refused = gateway.response(&json!("deep-call")).await;
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("nests deeper than 64 levels"), "{refused}");
    assert!(message.contains("max_json_depth"), "{refused}");
    // Any other request too, before it is forwarded.
    let other = format!(
        r#"{{"jsonrpc":"2.0","id":"deep-other","method":"custom/method","params":{{"x":{}}}}}"#,
        nested(100)
    );
    gateway.send_raw(&other).await;
    let refused = gateway.response(&json!("deep-other")).await;
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    // And far past serde's own limit, with the same clear error.
    let abyss = format!(
        r#"{{"jsonrpc":"2.0","id":"abyss","method":"custom/method","params":{}}}"#,
        nested(100_000)
    );
    gateway.send_raw(&abyss).await;
    let refused = gateway.response(&json!("abyss")).await;
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("nests deeper than 64 levels"),
        "{refused}"
    );
    gateway.request("ping", json!({})).await;
    assert!(gateway.calls_received("fx").is_empty());
    assert_eq!(gateway.count_received("fx", "custom/method"), 0);
    let store = gateway.close().await;
    let record = store
        .records()
        .into_iter()
        .find(|entry| entry.kind == Some(EntryKind::Call))
        .unwrap();
    assert_eq!(record.body["reasons"], json!(["malformed-request"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_the_depth_limit_is_the_configured_one() {
    let script = ServerScript::with_tools(vec![tool("thirty", true), tool("ten", true)])
        .answering("thirty", Behaviour::Raw(deep_result(30)))
        .answering("ten", Behaviour::Raw(deep_result(10)));
    let mut setup = Setup::wrap(script, true);
    setup.config = setup
        .config
        .replace("[gateway]\n", "[gateway]\nmax_json_depth = 20\n");
    let mut gateway = Harness::start(setup).await;
    gateway.initialize(json!({})).await;
    let refused = gateway.call("thirty", json!({})).await;
    assert!(
        text(&refused).contains("nests deeper than 20 levels"),
        "{refused}"
    );
    let passed = gateway.call("ten", json!({})).await;
    assert_eq!(passed["result"]["nested"].to_string(), nested(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_an_over_deep_tool_list_leaves_out_only_its_server() {
    let mut deep_tool = tool("deep", true);
    deep_tool["inputSchema"]["x-nested"] = serde_json::from_str(&nested(100)).unwrap();
    let setup = Setup {
        config: "[gateway]\ncall_timeout_s = 30\n\n[servers.deep]\ncommand = \"x\"\ntrust = \"trusted\"\n\n[servers.ok]\ncommand = \"x\"\ntrust = \"trusted\"\n".to_owned(),
        mode: Mode::Gateway,
        scripts: HashMap::from([
            ("deep".to_owned(), ServerScript::with_tools(vec![deep_tool, tool("read", true)])),
            ("ok".to_owned(), ServerScript::with_tools(vec![tool("read", true)])),
        ]),
        store: None,
    };
    let mut gateway = Harness::start(setup).await;
    gateway.initialize(json!({})).await;
    let list = gateway.request("tools/list", json!({})).await;
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ok__read"], "{list}");
    let failed = gateway.call("deep__read", json!({})).await;
    assert!(is_error(&failed), "{failed}");
    assert!(
        text(&failed).contains("nests deeper than 64 levels"),
        "{failed}"
    );
    assert!(!is_error(&gateway.call("ok__read", json!({})).await));
}

/// The most pages of one list the gateway follows (`MAX_LIST_PAGES`).
const MAX_PAGES: usize = 1000;

/// Gateway mode: server `endless`, every page of whose lists names a next
/// one, and server `ok`, which lists one of each.
fn endless_and_ok() -> Setup {
    let mut endless = ServerScript::with_tools(vec![tool("read", true)]);
    endless.endless_pages = true;
    endless.resources = vec![json!({"uri": "endless://r", "name": "r"})];
    endless.templates = vec![json!({"uriTemplate": "endless://{x}", "name": "t"})];
    endless.prompts = vec![json!({"name": "p"})];
    let mut ok = ServerScript::with_tools(vec![tool("read", true)]);
    ok.resources = vec![json!({"uri": "ok://r", "name": "r"})];
    ok.templates = vec![json!({"uriTemplate": "ok://{x}", "name": "t"})];
    ok.prompts = vec![json!({"name": "p"})];
    Setup {
        config: "[gateway]\ncall_timeout_s = 30\n\n[servers.endless]\ncommand = \"x\"\ntrust = \"trusted\"\n\n[servers.ok]\ncommand = \"x\"\ntrust = \"trusted\"\n".to_owned(),
        mode: Mode::Gateway,
        scripts: HashMap::from([("endless".to_owned(), endless), ("ok".to_owned(), ok)]),
        store: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_a_tool_list_that_never_ends_is_cut_off_and_the_others_still_list() {
    let mut gateway = Harness::start(endless_and_ok()).await;
    gateway.initialize(json!({})).await;
    let list = gateway.request("tools/list", json!({})).await;
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ok__read"], "{list}");
    assert_eq!(
        gateway.count_received("endless", "tools/list"),
        MAX_PAGES,
        "the gateway follows so many pages, and no more"
    );
    let failed = gateway.call("endless__read", json!({})).await;
    assert!(is_error(&failed), "{failed}");
    assert!(
        text(&failed).contains("more than 1000 pages of `tools/list`"),
        "{failed}"
    );
    assert!(!is_error(&gateway.call("ok__read", json!({})).await));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_a_merged_list_that_never_ends_leaves_out_only_that_server() {
    let mut gateway = Harness::start(endless_and_ok()).await;
    gateway.initialize(json!({})).await;
    let lists = [
        ("resources/list", "resources", "uri", "ok://r"),
        (
            "resources/templates/list",
            "resourceTemplates",
            "uriTemplate",
            "ok://{x}",
        ),
        ("prompts/list", "prompts", "name", "ok__p"),
    ];
    for (method, key, field, only) in lists {
        let before = gateway.count_received("endless", method);
        let list = gateway.request(method, json!({})).await;
        let items: Vec<&str> = list["result"][key]
            .as_array()
            .unwrap_or_else(|| panic!("{list}"))
            .iter()
            .map(|item| item[field].as_str().unwrap())
            .collect();
        assert_eq!(items, [only], "{method}: {list}");
        assert_eq!(
            gateway.count_received("endless", method) - before,
            MAX_PAGES,
            "{method}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_a_list_changed_flood_is_coalesced() {
    let script = ServerScript::with_tools(vec![tool("read", true), tool("write", false)]);
    let mut gateway = Harness::start(Setup::wrap(script, true)).await;
    gateway.initialize(json!({})).await;
    let listed = gateway.request("tools/list", json!({})).await;
    assert_eq!(listed["result"]["tools"].as_array().unwrap().len(), 2);
    let before = gateway.count_received("fx", "tools/list");

    // Five thousand notifications in one write, then a marker: once the
    // host sees the marker, the gateway has handled every notification.
    let changed = r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#;
    let mut flood = vec![changed; 5_000];
    let marker = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"end of flood"}}"#;
    flood.push(marker);
    gateway.push("fx", &flood.join("\n"));
    loop {
        let message = gateway.next().await;
        if message["method"] == "notifications/message" {
            break;
        }
        gateway.notes.push(message);
    }
    let told = gateway
        .notes
        .iter()
        .filter(|note| note["method"] == "notifications/tools/list_changed")
        .count();
    assert_eq!(told, 1, "the host is told once until it lists again");

    // The list the host gets next is the one after the flood; the gateway
    // listed at most twice for it (once, and once more for the changes
    // announced while that listing ran).
    let listed = gateway.request("tools/list", json!({})).await;
    assert_eq!(listed["result"]["tools"].as_array().unwrap().len(), 2);
    let relisted = gateway.count_received("fx", "tools/list") - before;
    assert!(
        (1..=2).contains(&relisted),
        "listed {relisted} times for 5000 notifications"
    );

    // Once the host has listed, the next change is told again.
    gateway.push("fx", changed);
    loop {
        let message = gateway.next().await;
        if message["method"] == "notifications/tools/list_changed" {
            break;
        }
        gateway.notes.push(message);
    }
}

/// What the gateway lets wait for a host that does not read, beyond which
/// it drops notifications (`HOST_QUEUE_BYTES`).
const HOST_QUEUE_BYTES: usize = 1024 * 1024;

/// Wrap mode with the smallest message limit (64 KiB), so the queue's
/// bounds are reached with little data.
fn small_messages(script: ServerScript) -> Setup {
    let mut setup = Setup::wrap(script, true);
    setup.config = setup
        .config
        .replace("[gateway]\n", "[gateway]\nmax_message_bytes = 65536\n");
    setup
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_a_host_that_stops_reading_holds_a_bounded_queue() {
    // Thirty thousand notifications, about 3 MB, and a change of the tool
    // list last, all before the call's answer.
    let mut flood: Vec<String> = (0..30_000)
        .map(|n| {
            format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"level":"info","data":"note {n:05} {}"}}}}"#,
                "x".repeat(20)
            )
        })
        .collect();
    flood.push(r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#.to_owned());
    let script = ServerScript::with_tools(vec![tool("read", true), tool("chatty", true)])
        .answering("chatty", Behaviour::LinesThenEcho(flood));
    // Whatever the machine's load, the answer comes in time: the deadline
    // is not what this test is about.
    let mut gateway = Harness::start(small_messages(script).with_call_timeout(60)).await;
    gateway.initialize(json!({})).await;
    gateway.request("tools/list", json!({})).await;

    gateway.pause_reading();
    gateway
        .send_raw(r#"{"jsonrpc":"2.0","id":"flood","method":"tools/call","params":{"name":"chatty","arguments":{"n":1}}}"#)
        .await;
    // The call's outcome is on record once the gateway has read its answer,
    // and so every notification the server sent before it.
    let store = std::sync::Arc::clone(&gateway.store);
    crate::harness::eventually(|| {
        store
            .records()
            .iter()
            .any(|entry| entry.kind == Some(EntryKind::Outcome) && entry.body["outcome"] == "ok")
    })
    .await;
    let peak = gateway.gauge.peak_bytes();
    assert!(
        peak <= HOST_QUEUE_BYTES + 1024,
        "{peak} bytes waited for a host that does not read"
    );
    assert!(gateway.gauge.dropped() > 0, "notifications were dropped");

    // The host reads again: the answer it waits for is there, and the
    // change of the tool list, dropped with the flood, is told after it.
    gateway.resume_reading();
    let answer = gateway.response(&json!("flood")).await;
    assert_eq!(text(&answer), r#"{"n":1}"#, "{answer}");
    let delivered = gateway
        .notes
        .iter()
        .filter(|note| note["method"] == "notifications/message")
        .count();
    assert!(delivered > 0 && delivered < 30_000, "{delivered}");
    loop {
        let message = gateway.next().await;
        if message["method"] == "notifications/tools/list_changed" {
            break;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_answers_past_the_bound_are_replaced_by_an_error_that_says_so() {
    let big = format!(
        r#"{{"content":[{{"type":"text","text":"{}"}}]}}"#,
        "y".repeat(60_000)
    );
    let script =
        ServerScript::with_tools(vec![tool("big", true)]).answering("big", Behaviour::Raw(big));
    let mut gateway = Harness::start(small_messages(script)).await;
    gateway.initialize(json!({})).await;
    gateway.request("tools/list", json!({})).await;

    gateway.pause_reading();
    let calls: Vec<String> = (0..60)
        .map(|n| {
            format!(
                r#"{{"jsonrpc":"2.0","id":{n},"method":"tools/call","params":{{"name":"big","arguments":{{"n":{n}}}}}}}"#
            )
        })
        .collect();
    gateway.send_raw(&calls.join("\n")).await;
    let gauge = std::sync::Arc::clone(&gateway.gauge);
    crate::harness::eventually(|| gauge.dropped() > 0).await;
    // At most one message past the soft bound, and a short error for each
    // answer replaced.
    assert!(
        gateway.gauge.peak_bytes() <= HOST_QUEUE_BYTES + 65_536 + 60 * 512,
        "{} bytes waited",
        gateway.gauge.peak_bytes()
    );

    // Every call is answered: with its result, or with an error that says
    // the result was dropped and why.
    gateway.resume_reading();
    let mut dropped = 0;
    for n in 0..60 {
        let answer = gateway.response(&json!(n)).await;
        if let Some(message) = answer["error"]["message"].as_str() {
            assert!(message.contains("was not reading"), "{answer}");
            dropped += 1;
        } else {
            assert_eq!(text(&answer).len(), 60_000, "call {n}");
        }
    }
    assert!(dropped > 0);
}

/// What the gateway lets a server leave unread before it takes the server
/// for one that does not read (`SERVER_QUEUE_MESSAGES` times
/// `max_message_bytes`), with the 64 KiB message limit of `small_messages`.
const SERVER_QUEUE_BYTES: usize = 4 * 65_536;

/// A call of `put` with about 60 KB of arguments.
fn put(n: usize) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{n},"method":"tools/call","params":{{"name":"put","arguments":{{"n":{n},"data":"{}"}}}}}}"#,
        "z".repeat(60_000)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_a_server_that_stops_reading_fails_the_next_call_at_once_and_is_restarted() {
    // Neither tool is retried (design §4.5): each call is sent once. The
    // pipe to the server holds 64 KiB, as a Linux pipe does.
    let mut script = ServerScript::with_tools(vec![tool("stop", false), tool("put", false)])
        .answering("stop", Behaviour::StopReading);
    script.pipe_bytes = 64 << 10;
    // The calls in flight wait for their answers far longer than the test.
    let mut setup = small_messages(script).with_call_timeout(60);
    setup
        .config
        .push_str("\n[[rules]]\nserver = \"fx\"\ntool = \"*\"\naction = \"allow\"\n");
    let mut gateway = Harness::start(setup).await;
    gateway.initialize(json!({})).await;
    gateway.request("tools/list", json!({})).await;

    // The server stops reading its input, and stays up.
    gateway
        .send_raw(r#"{"jsonrpc":"2.0","id":"stop","method":"tools/call","params":{"name":"stop","arguments":{}}}"#)
        .await;
    gateway.received_eventually("fx", r#""stop""#).await;
    let first = Arc::clone(&gateway.queues.lock().unwrap()["fx"][0]);
    // Calls of 60 KB, one at a time (each decided before the next comes),
    // until the gateway refuses one: the pipe to the server fills, then
    // what the gateway holds for it.
    let mut last = None;
    for n in 0..60 {
        gateway.send_raw(&put(n)).await;
        let store = Arc::clone(&gateway.store);
        let counted = Arc::clone(&first);
        crate::harness::eventually(|| {
            counted.dropped() > 0
                || store.records().iter().any(|entry| {
                    entry.kind == Some(EntryKind::Call) && entry.body["arguments"]["n"] == n
                })
        })
        .await;
        if first.dropped() > 0 {
            last = Some(n);
            break;
        }
    }
    let last = last.expect("the gateway stopped sending to a server that does not read");

    // The call that found the server not reading fails at once (not at the
    // call timeout of 60 s) and says why; so do the calls the server had in
    // flight, and the server is stopped. A call that came after it went to
    // the server's next start.
    let mut refused = None;
    for n in 0..=last {
        let answer = gateway.response(&json!(n)).await;
        match refused {
            Some(_) => assert_eq!(
                text(&answer),
                format!(r#"{{"n":{n},"data":"{}"}}"#, "z".repeat(60_000)),
                "call {n}"
            ),
            None if text(&answer).contains("was not sent") => {
                assert!(
                    text(&answer).contains("is not reading its input"),
                    "{answer}"
                );
                refused = Some(n);
            }
            None => assert!(
                text(&answer).contains("stopped before answering: is not reading its input"),
                "call {n}: {answer}"
            ),
        }
    }
    let refused = refused.expect("one call was refused");
    assert!(
        refused >= 4,
        "the calls that fit in the pipe and the bound were sent: {refused}"
    );
    // The first call in flight, answered while the others were awaited.
    let stop = gateway
        .notes
        .iter()
        .find(|note| note["id"] == "stop")
        .expect("the call that stopped the server is answered");
    assert!(text(stop).contains("is not reading its input"), "{stop}");
    // What waited for it stayed within the bound, but for the last call
    // sent, and nothing more was queued after the refusal.
    assert!(
        first.peak_bytes() <= SERVER_QUEUE_BYTES + 65_536,
        "{} bytes waited for a server that does not read",
        first.peak_bytes()
    );
    assert_eq!(first.dropped(), 1, "one line was refused");

    // The next call starts the server again, and runs.
    let next = gateway.call("put", json!({"n": 100})).await;
    assert_eq!(text(&next), r#"{"n":100}"#, "{next}");
    assert_eq!(gateway.starts.lock().unwrap()["fx"], 2);

    // Every call has its record and its outcome: `failed` for each call
    // that ended with the server that does not read.
    let store = gateway.close().await;
    let records = store.records();
    let outcome_of = |n: usize| {
        let call = records
            .iter()
            .find(|entry| entry.kind == Some(EntryKind::Call) && entry.body["arguments"]["n"] == n)
            .unwrap_or_else(|| panic!("call {n} has a record"));
        records
            .iter()
            .find(|entry| entry.kind == Some(EntryKind::Outcome) && entry.call == Some(call.seq))
            .map(|entry| entry.body["outcome"].clone())
    };
    for n in 0..=last {
        let outcome = if n <= refused { "failed" } else { "ok" };
        assert_eq!(outcome_of(n), Some(json!(outcome)), "call {n}");
    }
    assert_eq!(outcome_of(100), Some(json!("ok")));
}

/// The bytes of lines that may wait for the gateway's event loop before
/// its readers wait (`event::LINE_BYTES`).
const EVENT_LINE_BYTES: usize = 1024 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_a_flood_while_the_loop_is_held_up_waits_in_the_servers_pipe() {
    // A pipe to the gateway that holds the whole flood (8 MiB), so all of
    // it is there for the gateway to read the moment its loop goes on.
    let mut script = ServerScript::with_tools(vec![tool("read", true)]);
    script.pipe_bytes = 8 << 20;
    let mut gateway = Harness::start(Setup::wrap(script, true).with_call_timeout(60)).await;
    gateway.initialize(json!({})).await;
    gateway.request("tools/list", json!({})).await;

    // The call's commit stalls the loop, as a store that stops answering
    // does until its statement timeout.
    gateway.store.set_mode(AppendMode::Stall);
    gateway
        .send_raw(r#"{"jsonrpc":"2.0","id":"held","method":"tools/call","params":{"name":"read","arguments":{"n":1}}}"#)
        .await;
    let store = Arc::clone(&gateway.store);
    crate::harness::eventually(|| *store.waiting.lock().unwrap() == 1).await;
    // Meanwhile the server floods: two hundred and fifty notifications of 16 KB, 4 MB
    // in all (few enough that the loop's count of events is not what
    // holds them back).
    for n in 0..250 {
        gateway.push(
            "fx",
            &format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"level":"info","data":"note {n:03} {}"}}}}"#,
                "x".repeat(16_000)
            ),
        );
    }
    let pushed = Arc::clone(&gateway.pushed);
    crate::harness::eventually(|| pushed.load(std::sync::atomic::Ordering::SeqCst) == 250).await;

    // The store answers again: the loop goes on, the call is answered.
    gateway.store.release();
    let answer = gateway.response(&json!("held")).await;
    assert_eq!(text(&answer), r#"{"n":1}"#, "{answer}");

    // The server's reader took no more than the loop holds (and one line
    // past it, read before it had to wait), and left the rest in its pipe
    // until the loop had taken what it held.
    let peak = gateway.events.peak_bytes();
    assert!(
        peak <= EVENT_LINE_BYTES + 16_384,
        "{peak} bytes of lines waited for the loop"
    );
    assert!(
        gateway.events.held() > 0,
        "the server's reader waited (peak {peak})"
    );
    // Everything the server sent was read in the end.
    let marker = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"end of flood"}}"#;
    gateway.push("fx", marker);
    loop {
        let message = gateway.next().await;
        if message["params"]["data"] == "end of flood" {
            break;
        }
    }
}

/// Gateway mode: server `a` with these resources (or, with `rotating`,
/// that many new ones at each listing), and server `b` with one resource
/// (two servers offer resources, so a read goes only where a URI was
/// listed).
fn resources_of_a(resources: Vec<Value>, rotating: usize) -> Setup {
    // `break` writes a line that is not JSON-RPC (and is not retried).
    let mut a = ServerScript::with_tools(vec![tool("read", true), tool("break", false)]).answering(
        "break",
        Behaviour::LinesThenEcho(vec!["this is not JSON-RPC".to_owned()]),
    );
    a.resources = resources;
    a.rotating_resources = rotating;
    let mut b = ServerScript::with_tools(vec![tool("read", true)]);
    b.resources = vec![json!({"uri": "b://r", "name": "r"})];
    Setup {
        config: "[gateway]\ncall_timeout_s = 5\n\n[servers.a]\ncommand = \"x\"\ntrust = \"trusted\"\n\n[servers.b]\ncommand = \"x\"\ntrust = \"trusted\"\n\n[[rules]]\nserver = \"a\"\ntool = \"break\"\naction = \"allow\"\n".to_owned(),
        mode: Mode::Gateway,
        scripts: HashMap::from([("a".to_owned(), a), ("b".to_owned(), b)]),
        store: None,
    }
}

/// The URIs of a `resources/list` answer.
fn uris(list: &Value) -> Vec<String> {
    list["result"]["resources"]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"))
        .iter()
        .map(|resource| resource["uri"].as_str().unwrap().to_owned())
        .collect()
}

/// Whether `resources/read` of `uri` reached a server (and not "unknown
/// resource").
async fn readable(gateway: &mut Harness, uri: &str) -> bool {
    let read = gateway.request("resources/read", json!({"uri": uri})).await;
    match read["error"]["message"].as_str() {
        Some(message) => {
            assert!(message.contains("unknown resource"), "{read}");
            false
        }
        None => {
            assert_eq!(read["result"]["contents"][0]["uri"], uri, "{read}");
            true
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_a_servers_resources_are_replaced_by_each_listing_and_forgotten_at_restart() {
    let mut gateway = Harness::start(resources_of_a(Vec::new(), 3)).await;
    gateway.initialize(json!({})).await;
    let first = gateway.request("resources/list", json!({})).await;
    assert_eq!(
        uris(&first),
        ["rot://1/0", "rot://1/1", "rot://1/2", "b://r"]
    );
    assert!(readable(&mut gateway, "rot://1/0").await);

    // Each listing names new resources: what the server listed before is
    // no longer routed to it, so what the gateway remembers does not grow
    // with the listings.
    for listing in 2..=20 {
        let list = gateway.request("resources/list", json!({})).await;
        assert_eq!(uris(&list).len(), 4, "{list}");
        assert!(uris(&list).contains(&format!("rot://{listing}/2")));
    }
    assert!(!readable(&mut gateway, "rot://1/0").await);
    assert!(!readable(&mut gateway, "rot://19/1").await);
    assert!(readable(&mut gateway, "rot://20/1").await);
    assert!(readable(&mut gateway, "b://r").await);

    // The server breaks and starts again on its next request: what it
    // listed before its restart is forgotten until it lists again.
    let broken = gateway.call("a__break", json!({})).await;
    assert!(text(&broken).contains("not JSON-RPC"), "{broken}");
    assert!(
        readable(&mut gateway, "rot://20/1").await,
        "the read that restarts it"
    );
    assert_eq!(gateway.starts.lock().unwrap()["a"], 2);
    assert!(!readable(&mut gateway, "rot://20/2").await);
    let list = gateway.request("resources/list", json!({})).await;
    assert_eq!(
        uris(&list),
        ["rot://1/0", "rot://1/1", "rot://1/2", "b://r"]
    );
    assert!(readable(&mut gateway, "rot://1/2").await);
}

/// The most entries of one server's part of a merged list (`MAX_LISTED`).
const MAX_LISTED: usize = 10_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_a_server_that_lists_too_many_resources_has_the_rest_left_out() {
    let many: Vec<Value> = (0..MAX_LISTED + 5)
        .map(|n| json!({"uri": format!("big://{n}"), "name": format!("r{n}")}))
        .collect();
    let mut gateway = Harness::start(resources_of_a(many, 0)).await;
    gateway.initialize(json!({})).await;
    let list = gateway.request("resources/list", json!({})).await;
    let listed = uris(&list);
    assert_eq!(listed.len(), MAX_LISTED + 1, "so many of `a`'s, and `b`'s");
    assert_eq!(listed[MAX_LISTED - 1], format!("big://{}", MAX_LISTED - 1));
    assert_eq!(listed[MAX_LISTED], "b://r");
    // What was left out of the list is not routed either.
    assert!(readable(&mut gateway, &format!("big://{}", MAX_LISTED - 1)).await);
    assert!(!readable(&mut gateway, &format!("big://{MAX_LISTED}")).await);
    assert!(readable(&mut gateway, "b://r").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_a_servers_part_of_a_merged_list_holds_at_most_one_message() {
    // Pages of 20 resources of about 500 bytes, without end, under the
    // smallest message limit (64 KiB).
    let resources: Vec<Value> = (0..20)
        .map(|n| json!({"uri": format!("page://{n}"), "name": format!("r{n}"), "description": "d".repeat(480)}))
        .collect();
    let mut setup = resources_of_a(resources, 0);
    setup.config = setup
        .config
        .replace("[gateway]\n", "[gateway]\nmax_message_bytes = 65536\n");
    setup.scripts.get_mut("a").unwrap().endless_pages = true;
    let mut gateway = Harness::start(setup).await;
    gateway.initialize(json!({})).await;
    let list = gateway.request("resources/list", json!({})).await;
    let listed = uris(&list);
    // The pages that fit in one message are kept (the one that went past
    // it is not), and no page more is asked for.
    let pages = gateway.count_received("a", "resources/list");
    assert!((2..20).contains(&pages), "{pages} pages asked for");
    assert_eq!(listed.len(), (pages - 1) * 20 + 1, "{pages} pages");
    assert_eq!(listed.last().map(String::as_str), Some("b://r"));
    assert!(readable(&mut gateway, "page://19").await);
}

/// The most of one server's own requests that wait for a host at once
/// (`MAX_RELAYED`).
const MAX_RELAYED: usize = 64;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_a_server_flooding_requests_has_only_so_many_relayed_at_once() {
    let script = ServerScript::with_tools(vec![tool("read", true)]);
    let mut gateway = Harness::start(Setup::wrap(script, true)).await;
    gateway.initialize(json!({"elicitation": {}})).await;
    gateway.request("tools/list", json!({})).await;
    // A hundred questions to a host that answers none of them, then a
    // marker: once the host sees it, the gateway has handled them all.
    let questions: Vec<String> = (0..100)
        .map(|n| format!(r#"{{"jsonrpc":"2.0","id":"q{n}","method":"elicitation/create","params":{{"message":"?","requestedSchema":{{"type":"object"}}}}}}"#))
        .collect();
    gateway.push("fx", &questions.join("\n"));
    gateway.push(
        "fx",
        r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"end"}}"#,
    );
    let mut relayed = 0;
    loop {
        let message = gateway.next().await;
        if message["method"] == "elicitation/create" {
            relayed += 1;
        }
        if message["params"]["data"] == "end" {
            break;
        }
    }
    assert_eq!(relayed, MAX_RELAYED, "so many wait for the host at once");
    // The rest were answered at once, with an error that says why.
    let received = Arc::clone(&gateway.received);
    crate::harness::eventually(|| {
        received.lock().unwrap()["fx"]
            .iter()
            .filter(|line| line.contains("relays at most 64"))
            .count()
            == 100 - MAX_RELAYED
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_an_input_required_result_that_asks_too_much_fails_its_call() {
    let questions: serde_json::Map<String, Value> = (0..20)
        .map(|n| {
            (
                format!("q{n}"),
                json!({"method": "elicitation/create", "params": {"message": "?", "requestedSchema": {"type": "object"}}}),
            )
        })
        .collect();
    let result = json!({"resultType": "input_required", "inputRequests": questions}).to_string();
    let script =
        ServerScript::with_tools(vec![tool("ask", true)]).answering("ask", Behaviour::Raw(result));
    let mut gateway = Harness::start(Setup::wrap(script, true)).await;
    gateway.initialize(json!({"elicitation": {}})).await;
    gateway.request("tools/list", json!({})).await;
    gateway
        .send_raw(r#"{"jsonrpc":"2.0","id":"ask","method":"tools/call","params":{"name":"ask","arguments":{}}}"#)
        .await;
    // The call is answered before the host is asked anything.
    let answer = loop {
        let message = gateway.next().await;
        assert!(
            message["method"] != "elicitation/create",
            "the host was asked the server's questions: {message}"
        );
        if message["id"] == "ask" {
            break message;
        }
    };
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("asked 20 questions at once; hintgate asks a host at most 16"),
        "{answer}"
    );
}

/// What the gateway holds of a host's requests before it stops reading the
/// host (`HOST_HELD_MESSAGES` times `max_message_bytes`), with the 64 KiB
/// message limit of `small_messages`.
const HOST_HELD_BYTES: usize = 8 * 65_536;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_a_host_whose_requests_pile_up_is_not_read_until_some_end() {
    // `slow` never answers (and is not retried), so each call is held
    // until its deadline (1 s).
    let script =
        ServerScript::with_tools(vec![tool("slow", false)]).answering("slow", Behaviour::Hang);
    let mut setup = small_messages(script).with_call_timeout(1);
    setup
        .config
        .push_str("\n[[rules]]\nserver = \"fx\"\ntool = \"slow\"\naction = \"allow\"\n");
    let mut gateway = Harness::start(setup).await;
    gateway.initialize(json!({})).await;
    gateway.request("tools/list", json!({})).await;

    // Twenty calls of 60 KB at once, 1.2 MB in all.
    let calls: Vec<String> = (0..20)
        .map(|n| {
            format!(
                r#"{{"jsonrpc":"2.0","id":{n},"method":"tools/call","params":{{"name":"slow","arguments":{{"n":{n},"data":"{}"}}}}}}"#,
                "s".repeat(60_000)
            )
        })
        .collect();
    gateway.send_raw(&calls.join("\n")).await;
    let held = Arc::clone(&gateway.held);
    crate::harness::eventually(|| held.held() > 0).await;

    // Every call ends (at its deadline), and the host is read again as
    // they do: each gets its answer.
    for n in 0..20 {
        let answer = gateway.response(&json!(n)).await;
        assert!(
            text(&answer).contains("did not answer within 1 s"),
            "call {n}: {answer}"
        );
    }
    // What the gateway held of them at once stayed within the bound, and
    // one call past it (read before the host had to wait).
    let peak = gateway.held.peak_bytes();
    assert!(
        peak <= HOST_HELD_BYTES + 62 * 1024,
        "{peak} bytes of the host's requests were held"
    );
    assert_eq!(gateway.held.bytes(), 0, "nothing is held once they end");
}
