//! A hostile peer against the gateway's runtime: answers that answer no
//! request, calls that must end on record however the gateway ends, a tool
//! list that never stops growing, lines the gateway composes.

use std::collections::HashMap;

use hintgate_proxy::Mode;
use serde_json::{Value, json};

use hintgate_store::{ApprovalQueue, EntryKind, PinStore};

use crate::harness::{
    AppendMode, Behaviour, Harness, ServerScript, Setup, eventually, is_error, text, tool,
};

/// A server's answer to a line it could not read (JSON-RPC 2.0 §5).
const NULL_ID_ERROR: &str =
    r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#;

/// Found by fuzzing the framing: a server that cannot read a request
/// answers under a `null` id (JSON-RPC 2.0 §5). The gateway took that for a
/// line that is not JSON-RPC and gave the server up, with the call in
/// flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_an_error_under_a_null_id_is_dropped_and_the_server_goes_on() {
    let script = ServerScript::with_tools(vec![tool("read", true), tool("garbled", true)])
        .answering(
            "garbled",
            Behaviour::LinesThenEcho(vec![NULL_ID_ERROR.to_owned()]),
        );
    let mut gateway = Harness::start(Setup::wrap(script, true)).await;
    gateway.initialize(json!({})).await;
    // Before a call's answer, and on its own while nothing is in flight.
    let garbled = gateway.call("garbled", json!({"n": 1})).await;
    assert!(!is_error(&garbled), "{garbled}");
    assert_eq!(text(&garbled), r#"{"n":1}"#, "{garbled}");
    gateway.push("fx", NULL_ID_ERROR);
    gateway.handled("fx").await;
    let read = gateway.call("read", json!({"n": 2})).await;
    assert!(!is_error(&read), "{read}");
    assert_eq!(text(&read), r#"{"n":2}"#, "{read}");
    // The server was not stopped for it, nor restarted.
    assert_eq!(gateway.starts.lock().unwrap()["fx"], 1);
    // Nothing reached the host as if it answered a call of its own.
    assert!(
        gateway
            .notes
            .iter()
            .all(|note| note.get("error").is_none() && note.get("id") != Some(&Value::Null)),
        "{:?}",
        gateway.notes
    );
    let store = gateway.close().await;
    let outcomes: Vec<Value> = store
        .records()
        .into_iter()
        .filter(|entry| entry.kind == Some(EntryKind::Outcome))
        .map(|entry| entry.body["outcome"].clone())
        .collect();
    assert!(
        outcomes.iter().all(|outcome| outcome == "ok"),
        "{outcomes:?}"
    );
}

/// A server that answers with `"result": null` (or any result that is not
/// an object), in either era: the gateway refused the line as not JSON-RPC
/// and gave the server up, failing every request in flight on it. Now the
/// request it answers fails with an error that names the server's fault (a
/// call ends on record as `protocol-error`), and the server goes on.
async fn results_that_are_not_objects_fail_only_their_requests(modern: bool) {
    let mut script = ServerScript::with_tools(vec![
        tool("read", true),
        tool("nil", true),
        tool("five", true),
    ])
    .answering("nil", Behaviour::Raw("null".to_owned()))
    .answering("five", Behaviour::Raw("5".to_owned()));
    script.modern = modern;
    script
        .answers
        .insert("prompts/get".to_owned(), "null".to_owned());
    let mut gateway = Harness::start(Setup::wrap(script, true)).await;
    let capabilities = json!({});
    let ask = async |gateway: &mut Harness, method: &str, params: Value| {
        if modern {
            gateway
                .modern_request(method, params, capabilities.clone())
                .await
        } else {
            gateway.request(method, params).await
        }
    };
    if !modern {
        gateway.initialize(json!({})).await;
    }
    for (n, name, shown) in [(1, "nil", "`null`"), (2, "five", "`5`")] {
        let call = json!({"name": name, "arguments": {"n": n}});
        let answer = ask(&mut gateway, "tools/call", call).await;
        assert!(is_error(&answer), "{answer}");
        let why = text(&answer);
        assert!(
            why.contains("server `fx`") && why.contains("not an object") && why.contains(shown),
            "{why}"
        );
    }
    let prompt = ask(&mut gateway, "prompts/get", json!({"name": "summary"})).await;
    assert_eq!(prompt["error"]["code"], -32603, "{prompt}");
    let why = prompt["error"]["message"].as_str().unwrap();
    assert!(
        why.contains("server `fx`") && why.contains("not an object"),
        "{why}"
    );
    // An answer under an id the gateway never sent is dropped like any.
    gateway.push("fx", r#"{"jsonrpc":"2.0","id":"never-sent","result":null}"#);
    gateway.handled("fx").await;
    // The server goes on: it was neither stopped nor started again.
    let read = ask(
        &mut gateway,
        "tools/call",
        json!({"name": "read", "arguments": {"n": 3}}),
    )
    .await;
    assert_eq!(text(&read), r#"{"n":3}"#, "{read}");
    assert_eq!(gateway.starts.lock().unwrap()["fx"], 1);
    let store = gateway.close().await;
    assert_eq!(
        endings(&store),
        [
            (1, Some("protocol-error".to_owned())),
            (2, Some("protocol-error".to_owned())),
            (3, Some("ok".to_owned())),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_a_null_result_fails_only_its_request_for_a_legacy_server() {
    results_that_are_not_objects_fail_only_their_requests(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_a_null_result_fails_only_its_request_for_a_modern_server() {
    results_that_are_not_objects_fail_only_their_requests(true).await;
}

/// A line of a `tools/call` with `n` as its only argument.
fn call_line(id: &str, name: &str, n: u64) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": {"n": n}}}).to_string()
}

/// Each call record's `n`, with the outcome that ended it (its own
/// `outcome` for a call that ended at the gateway, else its outcome
/// record's; `None` when it has no ending on record).
fn endings(store: &crate::harness::TestStore) -> Vec<(u64, Option<String>)> {
    let records = store.records();
    records
        .iter()
        .filter(|entry| entry.kind == Some(EntryKind::Call))
        .map(|call| {
            let ending = call.body["outcome"]
                .as_str()
                .map(str::to_owned)
                .or_else(|| {
                    records
                        .iter()
                        .rev()
                        .filter(|entry| {
                            entry.kind == Some(EntryKind::Outcome) && entry.call == Some(call.seq)
                        })
                        .find_map(|entry| entry.body["outcome"].as_str())
                        .map(str::to_owned)
                });
            (call.body["arguments"]["n"].as_u64().unwrap_or(0), ending)
        })
        .collect()
}

/// The gateway's loop is held in a commit (the store stalls, on the record
/// of a call `n` 100) while the host sends `lines` and `then` runs; then the
/// store lets go. The host's reader runs on the loop's thread, so it reads
/// what waits in its pipe only after that commit, all at once: the loop
/// takes it in one turn.
async fn while_the_loop_is_held(
    gateway: &mut Harness,
    read: &str,
    lines: &[String],
    then: impl AsyncFnOnce(&mut Harness),
) {
    gateway.store.set_mode(AppendMode::Stall);
    gateway.send_raw(&call_line("held", read, 100)).await;
    let store = gateway.store.clone();
    eventually(|| *store.waiting.lock().unwrap() == 1).await;
    gateway.send_raw(&lines.join("\n")).await;
    then(gateway).await;
    gateway.store.release();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_a_call_forwarded_as_its_host_goes_away_ends_on_record_unsent() {
    let script = ServerScript::with_tools(vec![tool("read", true)]);
    let mut gateway = Harness::start(Setup::wrap(script, true)).await;
    gateway.initialize(json!({})).await;
    assert_eq!(
        text(&gateway.call("read", json!({"n": 1})).await),
        r#"{"n":1}"#
    );
    // The call and the end of the host's side reach the loop in one turn.
    while_the_loop_is_held(
        &mut gateway,
        "read",
        &[call_line("late", "read", 2)],
        async |gateway| {
            gateway.hang_up().await;
        },
    )
    .await;
    let received = std::sync::Arc::clone(&gateway.received);
    let store = gateway.close().await;
    let mut endings = endings(&store);
    endings.sort();
    assert_eq!(
        endings,
        vec![
            (1, Some("ok".to_owned())),
            (2, Some("host-gone".to_owned())),
            (100, Some("host-gone".to_owned())),
        ]
    );
    // It was never sent: nobody was left to get its answer.
    let received = received.lock().unwrap();
    assert!(
        !received["fx"].iter().any(|line| line.contains(r#""n":2"#)),
        "{received:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_a_call_forwarded_as_the_gateway_is_asked_to_stop_is_not_sent() {
    let script = ServerScript::with_tools(vec![tool("read", true)]);
    let mut gateway = Harness::start(Setup::wrap(script, true)).await;
    gateway.initialize(json!({})).await;
    assert_eq!(
        text(&gateway.call("read", json!({"n": 1})).await),
        r#"{"n":1}"#
    );
    while_the_loop_is_held(
        &mut gateway,
        "read",
        &[call_line("late", "read", 2)],
        async |gateway| {
            gateway.stop();
        },
    )
    .await;
    let answer = gateway.response(&json!("late")).await;
    assert!(is_error(&answer), "{answer}");
    assert!(text(&answer).contains("shut down"), "{answer}");
    let received = std::sync::Arc::clone(&gateway.received);
    let store = gateway.close().await;
    let endings = endings(&store);
    assert!(
        endings.contains(&(2, Some("shutdown".to_owned()))),
        "{endings:?}"
    );
    assert!(
        endings.iter().all(|(_, ending)| ending.is_some()),
        "{endings:?}"
    );
    let received = received.lock().unwrap();
    assert!(
        !received["fx"].iter().any(|line| line.contains(r#""n":2"#)),
        "{received:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_a_fatal_error_ends_every_held_call_on_record() {
    let fs = ServerScript::with_tools(vec![
        tool("read", true),
        tool("write", false),
        tool("slow", true),
    ])
    .answering("slow", Behaviour::Hang);
    let cold = ServerScript {
        silent_list: true,
        ..ServerScript::with_tools(vec![tool("read", true)])
    };
    let setup = Setup {
        config: "[gateway]\ncall_timeout_s = 60\nask_timeout_s = 60\n\n[servers.fs]\ncommand = \"x\"\ntrust = \"trusted\"\n\n[servers.cold]\ncommand = \"x\"\ntrust = \"trusted\"\n".to_owned(),
        mode: Mode::Gateway,
        scripts: HashMap::from([("fs".to_owned(), fs), ("cold".to_owned(), cold)]),
        store: None,
    };
    let mut gateway = Harness::start(setup).await;
    // A host that cannot ask a person: a call to ask about waits in the
    // approval queue.
    gateway.initialize(json!({})).await;
    assert_eq!(
        text(&gateway.call("fs__read", json!({"n": 1})).await),
        r#"{"n":1}"#
    );
    gateway.send_raw(&call_line("queued", "fs__write", 2)).await;
    let store = gateway.store.clone();
    eventually(|| {
        store
            .inner
            .waiting(0)
            .is_ok_and(|waiting| waiting.len() == 1)
    })
    .await;
    // One waits for its server to list its tools, one for its server's
    // answer.
    gateway
        .send_raw(&call_line("waiting", "cold__read", 3))
        .await;
    gateway.received_eventually("cold", "tools/list").await;
    gateway.send_raw(&call_line("slow", "fs__slow", 4)).await;
    gateway.received_eventually("fs", r#""n":4"#).await;
    // In one turn: a call is forwarded, then the store breaks down under
    // the next one, and the loop unwinds before the first is sent.
    while_the_loop_is_held(
        &mut gateway,
        "fs__read",
        &[
            call_line("late", "fs__read", 5),
            call_line("fatal", "fs__write", 6),
        ],
        async |gateway| {
            gateway
                .store
                .panic_on_enqueue
                .store(true, std::sync::atomic::Ordering::SeqCst);
        },
    )
    .await;
    let received = std::sync::Arc::clone(&gateway.received);
    let store = gateway.crashed().await;
    let mut endings = endings(&store);
    endings.sort();
    let shutdown = Some("shutdown".to_owned());
    // The call the store broke down on never got as far as a record.
    assert_eq!(
        endings
            .iter()
            .filter(|(n, _)| *n != 100)
            .cloned()
            .collect::<Vec<_>>(),
        vec![
            (1, Some("ok".to_owned())),
            (2, shutdown.clone()),
            (3, shutdown.clone()),
            (4, shutdown.clone()),
            (5, shutdown.clone()),
        ]
    );
    assert!(
        endings.iter().all(|(_, ending)| ending.is_some()),
        "{endings:?}"
    );
    let received = received.lock().unwrap();
    assert!(
        !received["fs"].iter().any(|line| line.contains(r#""n":5"#)),
        "{received:?}"
    );
}

/// How deeply a value nests objects and arrays (a scalar is 0).
fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(members) => 1 + members.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// `levels` arrays, one inside the other.
fn nested(levels: usize) -> Value {
    (0..levels)
        .fold(json!([]), |inner, _| json!([inner]))
        .get(0)
        .cloned()
        .unwrap_or_default()
}

/// Wrap mode, `max_json_depth = 20`.
fn shallow(script: ServerScript) -> Setup {
    let mut setup = Setup::wrap(script, true);
    setup.config = setup
        .config
        .replace("[gateway]\n", "[gateway]\nmax_json_depth = 20\n");
    setup
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_a_servers_question_put_deeper_for_a_modern_host_is_not_passed_on() {
    // Within the limit as the server sends it (its line nests 20 levels);
    // put in an input-required result for a 2026-07-28 host, 23.
    let question = json!({"jsonrpc": "2.0", "id": "q1", "method": "elicitation/create", "params": {
        "mode": "form", "message": "?",
        "requestedSchema": {"type": "object", "properties": {"a": {"type": "string", "x": nested(15)}}},
    }});
    assert_eq!(depth(&question), 20);
    let script = ServerScript::with_tools(vec![tool("asks", true)])
        .answering("asks", Behaviour::LinesThenEcho(vec![question.to_string()]));
    let mut gateway = Harness::start(shallow(script)).await;
    let answer = gateway
        .modern_request(
            "tools/call",
            json!({"name": "asks", "arguments": {"n": 1}}),
            json!({"elicitation": {"form": {}}}),
        )
        .await;
    assert!(depth(&answer) <= 20, "{answer}");
    assert_eq!(text(&answer), r#"{"n":1}"#, "{answer}");
    // The server's question was answered with an error that says why.
    gateway.received_eventually("fx", "q1").await;
    let refused: Value = gateway
        .received_by("fx")
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|message| message["id"] == "q1")
        .unwrap();
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    for note in &gateway.notes {
        assert!(depth(note) <= 20, "{note}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_a_hosts_answers_put_deeper_for_a_modern_server_are_not_sent() {
    let asks = json!({
        "resultType": "input_required",
        "inputRequests": {"q": {"method": "elicitation/create", "params": {
            "mode": "form", "message": "Your name?",
            "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
        }}},
        "requestState": "server-state",
    });
    let mut script = ServerScript::with_tools(vec![tool("asks", true)])
        .answering("asks", Behaviour::Raw(asks.to_string()));
    script.modern = true;
    let mut gateway = Harness::start(shallow(script)).await;
    // The host's answer nests 20 levels in its line; in the server's
    // params, 22.
    let content = json!({"name": nested(17)});
    gateway.respond_with(move |_| json!({"action": "accept", "content": content}).to_string());
    gateway.initialize(json!({"elicitation": {}})).await;
    let refused = gateway.call("asks", json!({"n": 1})).await;
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("nests deeper than 20 levels")),
        "{refused}"
    );
    assert_eq!(gateway.requests.len(), 1, "the host was asked");
    assert_eq!(
        gateway.calls_received("fx").len(),
        1,
        "sent once, not again"
    );
    for line in gateway.received_by("fx") {
        let message: Value = serde_json::from_str(&line).unwrap();
        assert!(depth(&message) <= 20, "{line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_a_hosts_capabilities_put_deeper_for_a_modern_server_are_left_out() {
    let mut script = ServerScript::with_tools(vec![tool("read", true)]);
    script.modern = true;
    let mut gateway = Harness::start(shallow(script)).await;
    // The host's `initialize` nests 20 levels; its capabilities in a
    // 2026-07-28 request's `params._meta`, 21.
    gateway
        .initialize(json!({"experimental": {"x": nested(16)}}))
        .await;
    let answer = gateway.call("read", json!({"n": 1})).await;
    assert_eq!(text(&answer), r#"{"n":1}"#, "{answer}");
    let received = gateway.received_by("fx");
    assert!(received.iter().any(|line| line.contains("tools/call")));
    for line in received {
        let message: Value = serde_json::from_str(&line).unwrap();
        assert!(depth(&message) <= 20, "{line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_a_servers_result_with_serde_jsons_raw_value_key_is_refused() {
    // With serde_json's `raw_value` feature, this object parses as the JSON
    // text in its string: the gateway would check `{"n":1}` against the
    // output schema while the host reads an object with one odd key.
    let mut shaped = tool("shaped", true);
    shaped["outputSchema"] =
        json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
    let results = [
        r#"{"content":[{"type":"text","text":"1"}],"structuredContent":{"$serde_json::private::RawValue":"{\"n\":1}"}}"#,
        r#"{"content":[{"type":"text","text":"1"}],"structuredContent":{"$serde_json::private::Raw\u0056alue":"{\"n\":1}"}}"#,
        r#"{"content":[{"type":"text","text":"1","_meta":{"$serde_json::private::RawValue":"{}"}}]}"#,
    ];
    let question = r#"{"jsonrpc":"2.0","id":"q1","method":"elicitation/create","params":{"message":"?","requestedSchema":{"$serde_json::private::RawValue":"{\"type\":\"object\",\"properties\":{}}"}}}"#;
    let script = ServerScript::with_tools(vec![
        shaped,
        tool("escaped", true),
        tool("meta", true),
        tool("asks", true),
    ])
    .answering("shaped", Behaviour::Raw(results[0].to_owned()))
    .answering("escaped", Behaviour::Raw(results[1].to_owned()))
    .answering("meta", Behaviour::Raw(results[2].to_owned()))
    .answering("asks", Behaviour::LinesThenEcho(vec![question.to_owned()]));
    let mut gateway = Harness::start(Setup::wrap(script, true)).await;
    gateway.initialize(json!({"elicitation": {}})).await;
    for (n, name) in ["shaped", "escaped", "meta"].into_iter().enumerate() {
        let refused = gateway.call(name, json!({"n": n})).await;
        assert!(is_error(&refused), "{name}: {refused}");
        assert!(text(&refused).contains("is reserved"), "{name}: {refused}");
    }
    // The server's own question with it is answered with an error, not
    // relayed; the call it came with goes on.
    let asked = gateway.call("asks", json!({"n": 9})).await;
    assert_eq!(text(&asked), r#"{"n":9}"#, "{asked}");
    gateway.received_eventually("fx", "q1").await;
    let refused: Value = gateway
        .received_by("fx")
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|message| message["id"] == "q1")
        .unwrap();
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert!(gateway.requests.is_empty(), "{:?}", gateway.requests);
    assert_eq!(gateway.starts.lock().unwrap()["fx"], 1);
    let store = gateway.close().await;
    let mut endings = endings(&store);
    endings.sort();
    let protocol_error = Some("protocol-error".to_owned());
    assert_eq!(
        endings,
        vec![
            (0, protocol_error.clone()),
            (1, protocol_error.clone()),
            (2, protocol_error),
            (9, Some("ok".to_owned())),
        ]
    );
}

/// The names a `tools/list` answer lists.
fn names(list: &Value) -> Vec<String> {
    let mut names: Vec<String> = list["result"]["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|tool| tool["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_a_server_that_lists_new_names_every_time_is_held_to_its_cap() {
    let script = ServerScript::with_tools(vec![tool("a", true), tool("b", true)]);
    let mut setup = Setup::wrap(script, true);
    setup.config = setup
        .config
        .replace("[gateway]\n", "[gateway]\nmax_tools_per_server = 3\n");
    let mut gateway = Harness::start(setup).await;
    gateway.initialize(json!({})).await;
    let list = gateway.request("tools/list", json!({})).await;
    assert_eq!(names(&list), ["a", "b"]);
    // Two new names: one more pin fits, the other is left out.
    gateway
        .change_tools("fx", vec![tool("c", true), tool("d", true)])
        .await;
    // The gateway is listing again: the host's list waits for that listing.
    let listed = names(&gateway.request("tools/list", json!({})).await);
    assert_eq!(listed.len(), 1, "{listed:?}");
    let kept = listed[0].clone();
    assert!(kept == "c" || kept == "d", "{listed:?}");
    // A call to the one left out is refused as unknown; the kept one runs.
    let left_out = if kept == "c" { "d" } else { "c" };
    let refused = gateway.call(left_out, json!({"n": 1})).await;
    assert!(
        refused.get("error").is_some() || is_error(&refused),
        "{refused}"
    );
    let ran = gateway.call(&kept, json!({"n": 2})).await;
    assert_eq!(text(&ran), r#"{"n":2}"#, "{ran}");
    // However many new names follow, nothing more is pinned or listed.
    for round in 0..5 {
        let fresh: Vec<Value> = (0..10)
            .map(|n| tool(&format!("new{round}_{n}"), true))
            .collect();
        gateway.change_tools("fx", fresh).await;
        let list = gateway.request("tools/list", json!({})).await;
        assert!(
            names(&list).iter().all(|name| !name.starts_with("new")),
            "{list}"
        );
    }
    let pinned: Vec<String> = gateway
        .store
        .inner
        .pins()
        .unwrap()
        .into_iter()
        .map(|pin| pin.tool)
        .collect();
    assert_eq!(pinned.len(), 3, "{pinned:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_one_listing_past_the_cap_lists_only_the_cap() {
    let tools: Vec<Value> = (0..8).map(|n| tool(&format!("t{n}"), true)).collect();
    let mut setup = Setup::wrap(ServerScript::with_tools(tools), false);
    setup.config = setup
        .config
        .replace("[gateway]\n", "[gateway]\nmax_tools_per_server = 5\n");
    let mut gateway = Harness::start(setup).await;
    gateway.initialize(json!({})).await;
    let list = gateway.request("tools/list", json!({})).await;
    assert_eq!(names(&list), ["t0", "t1", "t2", "t3", "t4"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_a_modern_server_that_always_asks_again_fails_the_call_in_the_end() {
    let asks = json!({
        "resultType": "input_required",
        "inputRequests": {"q": {"method": "elicitation/create", "params": {
            "mode": "form", "message": "Again?",
            "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
        }}},
    });
    let mut script = ServerScript::with_tools(vec![tool("asks", true)])
        .answering("asks", Behaviour::Raw(asks.to_string()));
    script.modern = true;
    let mut gateway = Harness::start(Setup::wrap(script, true)).await;
    // A host that answers every question.
    gateway.respond_with(|_| json!({"action": "accept", "content": {"ok": true}}).to_string());
    gateway.initialize(json!({"elicitation": {}})).await;
    let failed = gateway.call("asks", json!({"n": 1})).await;
    assert!(
        failed["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("at most 16 times")),
        "{failed}"
    );
    assert_eq!(gateway.calls_received("fx").len(), 16);
    let store = gateway.close().await;
    let endings = endings(&store);
    assert_eq!(endings.len(), 16, "{endings:?}");
    assert_eq!(
        endings
            .last()
            .and_then(|(_, ending)| ending.clone())
            .as_deref(),
        Some("protocol-error")
    );
}
