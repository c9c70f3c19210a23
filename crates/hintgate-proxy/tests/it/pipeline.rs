//! The pipeline's order, tested directly: audit before forward (with a
//! store that fails or stalls), refusals, deadlines, and a session that ends
//! mid-call.

use std::collections::HashMap;

use hintgate_proxy::Mode;
use hintgate_store::{AuditLog, EntryKind};
use serde_json::{Value, json};

use crate::harness::{
    AppendMode, Behaviour, Harness, ServerScript, Setup, TestStore, Timeline, eventually, is_error,
    text, tool,
};

fn reader() -> ServerScript {
    ServerScript::with_tools(vec![tool("read", true), tool("write", false)])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_call_reaches_its_server_before_its_record_is_durable() {
    let mut gateway = Harness::start(Setup::wrap(reader(), true)).await;
    gateway.initialize(json!({})).await;
    // The tool list and one call first, so the server is up and listed.
    assert_eq!(
        text(&gateway.call("read", json!({"n": 0})).await),
        r#"{"n":0}"#
    );

    gateway.store.set_mode(AppendMode::Stall);
    gateway
        .send_raw(&json!({"jsonrpc": "2.0", "id": "c1", "method": "tools/call", "params": {"name": "read", "arguments": {"n": 1}}}).to_string())
        .await;
    let store = gateway.store.clone();
    eventually(|| *store.waiting.lock().unwrap() == 1).await;
    // The gateway is inside the commit of the call's record: the server has
    // not seen the call, and cannot until the commit returns.
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert_eq!(gateway.calls_received("fx").len(), 1, "only the first call");

    gateway.store.release();
    let answer = gateway.response(&json!("c1")).await;
    assert_eq!(text(&answer), r#"{"n":1}"#);
    let appended = gateway.timeline.position("store appended Call 1").unwrap();
    let received = gateway
        .timeline
        .position("server fx received call 1")
        .unwrap();
    assert!(appended < received, "{:?}", gateway.timeline.events());
}

/// A gateway on a log that appends on a thread of its own (PostgreSQL),
/// with that log's store.
async fn on_a_log_that_appends_later() -> Harness {
    let mut setup = Setup::wrap(reader(), true);
    setup.store = Some(TestStore::appending_later(Timeline::default()));
    let mut gateway = Harness::start(setup).await;
    gateway.initialize(json!({})).await;
    assert_eq!(
        text(&gateway.call("read", json!({"n": 0})).await),
        r#"{"n":0}"#
    );
    gateway
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_log_holds_only_the_calls_that_wait_for_their_records() {
    let mut gateway = on_a_log_that_appends_later().await;
    gateway.store.set_mode(AppendMode::Stall);
    gateway
        .send_raw(&json!({"jsonrpc": "2.0", "id": "c1", "method": "tools/call", "params": {"name": "read", "arguments": {"n": 1}}}).to_string())
        .await;
    let store = gateway.store.clone();
    eventually(|| *store.waiting.lock().unwrap() == 1).await;
    // The log is stuck in the call's write, off the loop's thread: the
    // gateway answers what needs no record meanwhile.
    let listed = gateway.request("tools/list", json!({})).await;
    assert!(listed["result"]["tools"].is_array(), "{listed}");
    let pong = gateway.request("ping", json!({})).await;
    assert_eq!(pong["result"], json!({}), "{pong}");
    // The call itself waits for its record: its server has not seen it.
    assert_eq!(gateway.calls_received("fx").len(), 1, "only the first call");

    gateway.store.release();
    let answer = gateway.response(&json!("c1")).await;
    assert_eq!(text(&answer), r#"{"n":1}"#);
    let appended = gateway.timeline.position("store appended Call 1").unwrap();
    let received = gateway
        .timeline
        .position("server fx received call 1")
        .unwrap();
    assert!(appended < received, "{:?}", gateway.timeline.events());
    // Its outcome is on record, naming the call's record.
    let store = gateway.close().await;
    let records = store.records();
    let call = records
        .iter()
        .find(|entry| entry.body["arguments"]["n"] == 1)
        .unwrap();
    assert!(
        records
            .iter()
            .any(|entry| entry.call == Some(call.seq) && entry.body["outcome"] == "ok"),
        "{records:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_record_a_slow_log_fails_to_write_never_runs() {
    let mut gateway = on_a_log_that_appends_later().await;
    gateway.store.set_mode(AppendMode::Fail);
    let refused = gateway.call("read", json!({"n": 1})).await;
    assert!(is_error(&refused), "{refused}");
    assert!(
        text(&refused).contains("the audit log could not be written"),
        "{refused}"
    );
    assert_eq!(gateway.calls_received("fx").len(), 1, "it never ran");
    gateway.store.release();
    assert!(!is_error(&gateway.call("read", json!({"n": 2})).await));
    assert_eq!(gateway.calls_received("fx").len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waiting_for_a_slow_log_when_the_gateway_stops_ends_unsent_on_record() {
    let mut gateway = on_a_log_that_appends_later().await;
    gateway.store.set_mode(AppendMode::Stall);
    gateway
        .send_raw(&json!({"jsonrpc": "2.0", "id": "c1", "method": "tools/call", "params": {"name": "read", "arguments": {"n": 1}}}).to_string())
        .await;
    let store = gateway.store.clone();
    eventually(|| *store.waiting.lock().unwrap() == 1).await;
    gateway.stop();
    // Once the gateway has begun to stop (a write reported before would
    // rightly send the call), the stop waits for the write out; let it go.
    let timeline = gateway.timeline.clone();
    eventually(|| timeline.position("gateway stopping").is_some()).await;
    gateway.store.release();
    let answer = gateway.response(&json!("c1")).await;
    assert!(is_error(&answer), "{answer}");
    assert!(
        text(&answer).contains("shut down before it sent"),
        "{answer}"
    );
    assert_eq!(gateway.calls_received("fx").len(), 1, "it never ran");
    let store = gateway.close().await;
    let records = store.records();
    let call = records
        .iter()
        .find(|entry| entry.body["arguments"]["n"] == 1)
        .unwrap();
    assert!(
        records
            .iter()
            .any(|entry| entry.call == Some(call.seq) && entry.body["outcome"] == "shutdown"),
        "{records:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_record_cannot_be_written_never_runs() {
    let mut gateway = Harness::start(Setup::wrap(reader(), true)).await;
    gateway.initialize(json!({})).await;
    assert!(!is_error(&gateway.call("read", json!({"n": 0})).await));

    gateway.store.set_mode(AppendMode::Fail);
    let refused = gateway.call("read", json!({"n": 1})).await;
    assert!(is_error(&refused), "{refused}");
    assert!(
        text(&refused).contains("the audit log could not be written"),
        "{refused}"
    );
    assert_eq!(
        gateway.calls_received("fx").len(),
        1,
        "the second call never ran"
    );

    // The log works again: so do calls.
    gateway.store.release();
    assert!(!is_error(&gateway.call("read", json!({"n": 2})).await));
    assert_eq!(gateway.calls_received("fx").len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_decided_in_one_turn_share_one_commit() {
    let mut gateway = Harness::start(Setup::wrap(reader(), true)).await;
    gateway.initialize(json!({})).await;
    assert!(!is_error(&gateway.call("read", json!({"n": 0})).await));
    // Hold the log, send sixteen calls, let it go: the calls that queued
    // behind the stall are decided in the next turn and committed together.
    gateway.store.set_mode(AppendMode::Stall);
    let mut burst = String::new();
    for n in 1..=16 {
        burst.push_str(
            &json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": "read", "arguments": {"n": n}}})
                .to_string(),
        );
        burst.push('\n');
    }
    gateway.send_raw(burst.trim_end()).await;
    let store = gateway.store.clone();
    eventually(|| *store.waiting.lock().unwrap() == 1).await;
    gateway.store.release();
    for n in 1..=16 {
        let answer = gateway.response(&json!(n)).await;
        assert!(!is_error(&answer), "{answer}");
    }
    let appends: Vec<String> = gateway
        .timeline
        .events()
        .into_iter()
        .filter(|event| event.starts_with("store appended Call"))
        .collect();
    assert_eq!(appends.len(), 17);
    // Sixteen call records, at most two commits: the one the log held (it
    // has the calls of the turn that began it) and the one after it.
    let commits: Vec<Vec<Value>> = gateway
        .store
        .commits
        .lock()
        .unwrap()
        .iter()
        .filter(|calls| calls.iter().any(|n| n.as_i64().is_some_and(|n| n >= 1)))
        .cloned()
        .collect();
    assert!(commits.len() <= 2, "{commits:?}");
    let committed: usize = commits.iter().map(Vec::len).sum();
    assert_eq!(committed, 16, "{commits:?}");
    // Every call record is durable before its call reaches the server.
    for n in 1..=16 {
        let appended = gateway
            .timeline
            .position(&format!("store appended Call {n}"))
            .unwrap();
        let received = gateway
            .timeline
            .position(&format!("server fx received call {n}"))
            .unwrap();
        assert!(
            appended < received,
            "call {n}: {:?}",
            gateway.timeline.events()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_gets_one_record_and_a_forwarded_one_its_outcome() {
    let script = reader().answering(
        "write",
        Behaviour::Raw(r#"{"content":[],"isError": true}"#.to_owned()),
    );
    let mut setup = Setup::wrap(script, true);
    setup
        .config
        .push_str("\n[[rules]]\nserver = \"fx\"\ntool = \"write\"\naction = \"allow\"\n");
    let mut gateway = Harness::start(setup).await;
    gateway.initialize(json!({})).await;
    gateway.call("read", json!({"n": 1})).await;
    // An error result written as Python writes JSON (a space after the
    // colon) is a tool error all the same.
    let failed = gateway.call("write", json!({"n": 2})).await;
    assert!(is_error(&failed), "{failed}");
    let unknown = gateway.call("nope", json!({"n": 3})).await;
    assert_eq!(unknown["error"]["code"], -32602);
    let store = gateway.close().await;
    let records = store.records();
    let calls: Vec<_> = records
        .iter()
        .filter(|entry| entry.kind == Some(EntryKind::Call))
        .collect();
    assert_eq!(calls.len(), 3, "{records:#?}");
    let outcome_of = |n: i64| {
        let call = calls
            .iter()
            .find(|entry| entry.body["arguments"]["n"] == n)
            .unwrap();
        records
            .iter()
            .find(|entry| entry.kind == Some(EntryKind::Outcome) && entry.call == Some(call.seq))
            .map(|entry| entry.body["outcome"].clone())
            .or_else(|| call.body.get("outcome").cloned())
            .unwrap()
    };
    assert_eq!(outcome_of(1), "ok");
    assert_eq!(outcome_of(2), "tool-error");
    assert_eq!(outcome_of(3), "denied");
    assert!(store.inner.verify().unwrap().complete());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_rule_refuses_before_the_server_and_says_how_to_allow() {
    let mut setup = Setup::wrap(reader(), true);
    setup.config.push_str(
        "\n[[rules]]\nserver = \"fx\"\ntool = \"write\"\naction = \"deny\"\nreason = \"writes are done by hand\"\n",
    );
    let mut gateway = Harness::start(setup).await;
    gateway.initialize(json!({"elicitation": {}})).await;
    let refused = gateway.call("write", json!({"n": 1})).await;
    assert!(is_error(&refused));
    assert!(
        text(&refused).contains("writes are done by hand"),
        "{refused}"
    );
    assert!(
        text(&refused).contains("To allow it: change or remove rule 0"),
        "{refused}"
    );
    assert_eq!(
        refused["result"]["_meta"]["hintgate/decision"]["reasons"],
        json!(["rule-deny"])
    );
    assert!(gateway.calls_received("fx").is_empty());
    let store = gateway.close().await;
    let record = &store.records()[0];
    assert_eq!(record.body["verdict"], "deny");
    assert_eq!(record.body["outcome"], "denied");
    assert_eq!(record.body["approver"], "gateway");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_lists_its_tools_fails_the_call_with_a_clear_error() {
    let mut script = reader();
    script.silent_list = true;
    let mut gateway = Harness::start(Setup::wrap(script, true).with_call_timeout(1)).await;
    gateway.initialize(json!({})).await;
    let failed = gateway.call("read", json!({"n": 1})).await;
    assert!(is_error(&failed), "{failed}");
    assert!(
        text(&failed).contains("did not answer `tools/list` within 1 s"),
        "{failed}"
    );
    // The host's own `tools/list` is answered too, without that server's tools.
    let list = gateway.request("tools/list", json!({})).await;
    assert_eq!(list["result"]["tools"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_the_server_never_answers_ends_at_the_deadline_and_is_not_replayed() {
    let script = reader().answering("write", Behaviour::Hang);
    let mut setup = Setup::wrap(script, true).with_call_timeout(1);
    setup
        .config
        .push_str("\n[[rules]]\nserver = \"fx\"\ntool = \"write\"\naction = \"allow\"\n");
    let mut gateway = Harness::start(setup).await;
    gateway.initialize(json!({})).await;
    let failed = gateway.call("write", json!({"n": 1})).await;
    assert!(is_error(&failed));
    assert!(
        text(&failed).contains("did not answer within 1 s"),
        "{failed}"
    );
    assert!(text(&failed).contains("was not retried"), "{failed}");
    assert_eq!(gateway.calls_received("fx").len(), 1);
    // The server is told the gateway gave up. It is told in the turn that
    // answers the host, on another pipe, so it may hear it just after.
    gateway
        .received_eventually("fx", "notifications/cancelled")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_left_unanswered_is_retried_once_and_its_answer_reaches_the_host() {
    // `read` is read-only and idempotent on a trusted server: design §4.5
    // retries it once.
    let script = reader().answering("read", Behaviour::HangOnce);
    // The first attempt waits out the deadline; the second, answered, has
    // the same deadline to spare.
    let mut gateway = Harness::start(Setup::wrap(script, true).with_call_timeout(3)).await;
    gateway.initialize(json!({})).await;
    let answer = gateway.call("read", json!({"n": 4})).await;
    assert_eq!(text(&answer), r#"{"n":4}"#, "{answer}");
    assert_eq!(gateway.calls_received("fx").len(), 2, "sent twice");
    let store = gateway.close().await;
    let records = store.records();
    let calls: Vec<u64> = records
        .iter()
        .filter(|entry| entry.kind == Some(EntryKind::Call))
        .map(|entry| entry.seq)
        .collect();
    assert_eq!(calls.len(), 2, "each attempt has its record");
    let outcome_of = |seq: u64| {
        records
            .iter()
            .find(|entry| entry.kind == Some(EntryKind::Outcome) && entry.call == Some(seq))
            .map(|entry| entry.body["outcome"].clone())
    };
    assert_eq!(outcome_of(calls[0]), Some(json!("failed, retried")));
    assert_eq!(outcome_of(calls[1]), Some(json!("ok")));
    // The retry's record is the first attempt's, field for field: the same
    // definition's pin, decision, arguments and request.
    let body_of = |seq: u64| {
        records
            .iter()
            .find(|entry| entry.seq == seq)
            .map(|entry| entry.body.clone())
    };
    let first = body_of(calls[0]).unwrap();
    assert!(first["pin"].is_string(), "{first}");
    assert_eq!(Some(first), body_of(calls[1]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_tool_list_never_ends_cannot_hold_a_call() {
    let mut endless = reader();
    endless.endless_pages = true;
    let mut gateway = Harness::start(Setup::wrap(endless, true)).await;
    gateway.initialize(json!({})).await;
    // Each page comes in time, so no page's deadline passes; the gateway
    // follows 1000 pages and no more.
    let failed = gateway.call("read", json!({"n": 1})).await;
    assert!(is_error(&failed), "{failed}");
    assert!(
        text(&failed).contains("sent more than 1000 pages of `tools/list`"),
        "{failed}"
    );
    assert!(gateway.calls_received("fx").is_empty());
    assert!(gateway.count_received("fx", "tools/list") > 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_keeps_relisting_cannot_hold_a_call() {
    let mut relisting = reader();
    relisting.changes_on_list = true;
    let mut gateway = Harness::start(Setup::wrap(relisting, true).with_call_timeout(1)).await;
    gateway.initialize(json!({})).await;
    // Every list comes with the news that it changed again, so the list
    // never settles; the call's own wait for it ends.
    let failed = gateway.call("read", json!({"n": 1})).await;
    assert!(is_error(&failed), "{failed}");
    assert!(
        text(&failed).contains("was not ready to take the call within"),
        "{failed}"
    );
    assert!(gateway.calls_received("fx").is_empty());
    assert!(gateway.count_received("fx", "tools/list") > 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merged_list_a_server_never_answers_is_answered_at_the_deadline() {
    let mut quiet = reader();
    quiet.silent = vec!["resources/list".to_owned()];
    let setup = Setup {
        config: "[gateway]\ncall_timeout_s = 1\n\n[servers.a]\ncommand = \"x\"\ntrust = \"trusted\"\n\n[servers.b]\ncommand = \"x\"\ntrust = \"trusted\"\n".to_owned(),
        mode: Mode::Gateway,
        scripts: HashMap::from([("a".to_owned(), reader()), ("b".to_owned(), quiet)]),
        store: None,
    };
    let mut gateway = Harness::start(setup).await;
    gateway.initialize(json!({})).await;
    let list = gateway.request("resources/list", json!({})).await;
    assert_eq!(list["result"]["resources"], json!([]), "{list}");
}

/// A gateway whose server holds a `read` call under `id`: the call was
/// decided, recorded and sent, and has not been answered.
async fn read_in_flight(id: Value) -> Harness {
    let script = reader().answering("read", Behaviour::Hang);
    let mut gateway = Harness::start(Setup::wrap(script, true).with_call_timeout(60)).await;
    gateway.initialize(json!({})).await;
    gateway
        .send_raw(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "read", "arguments": {"n": 1}}}).to_string())
        .await;
    gateway.received_eventually("fx", "tools/call").await;
    gateway
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_ends_mid_call_leaves_no_call_without_an_ending() {
    let gateway = read_in_flight(json!(1)).await;
    let store = gateway.close().await;
    let records = store.records();
    let call = records
        .iter()
        .find(|entry| entry.kind == Some(EntryKind::Call))
        .unwrap();
    let outcome = records
        .iter()
        .find(|entry| entry.kind == Some(EntryKind::Outcome) && entry.call == Some(call.seq))
        .expect("an outcome record");
    assert_eq!(outcome.body["outcome"], "host-gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_held_for_a_person_when_the_gateway_is_asked_to_stop_ends_as_shutdown() {
    let mut gateway = Harness::start(Setup::wrap(reader(), false)).await;
    gateway.initialize(json!({"elicitation": {}})).await;
    gateway
        .send_raw(r#"{"jsonrpc":"2.0","id":"late","method":"tools/call","params":{"name":"write","arguments":{"n":2}}}"#)
        .await;
    let question = gateway.next_request().await;
    assert_eq!(question["method"], "elicitation/create");
    gateway.stop();
    let refused = gateway.response(&json!("late")).await;
    // The host's question is withdrawn.
    assert!(
        gateway
            .notes
            .iter()
            .any(|note| note["method"] == "notifications/cancelled"
                && note["params"]["requestId"] == question["id"]),
        "{:?}",
        gateway.notes
    );
    assert!(is_error(&refused), "{refused}");
    assert!(text(&refused).contains("shut down"), "{refused}");
    let store = gateway.close().await;
    let records = store.records();
    let call = records
        .iter()
        .find(|entry| entry.kind == Some(EntryKind::Call))
        .unwrap();
    // Never sent: its decision (ask) with the outcome `shutdown`.
    assert_eq!(call.body["verdict"], "ask", "{:?}", call.body);
    assert_eq!(call.body["outcome"], "shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_flight_when_the_gateway_is_asked_to_stop_ends_as_shutdown() {
    let mut gateway = read_in_flight(json!(1)).await;
    gateway.stop();
    let answer = gateway.response(&json!(1)).await;
    assert!(is_error(&answer), "{answer}");
    assert!(text(&answer).contains("shut down"), "{answer}");
    let store = gateway.close().await;
    let records = store.records();
    let call = records
        .iter()
        .find(|entry| entry.kind == Some(EntryKind::Call))
        .unwrap();
    let outcome = records
        .iter()
        .find(|entry| entry.kind == Some(EntryKind::Outcome) && entry.call == Some(call.seq))
        .expect("an outcome record");
    assert_eq!(outcome.body["outcome"], "shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fatal_error_in_the_loop_still_ends_the_calls_in_flight_on_record() {
    let script = reader().answering("read", Behaviour::Hang);
    let mut gateway = Harness::start(Setup::wrap(script, true).with_call_timeout(60)).await;
    gateway.initialize(json!({})).await;
    gateway
        .send_raw(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read","arguments":{"n":1}}}"#)
        .await;
    gateway.received_eventually("fx", "tools/call").await;
    // The host cannot ask, so `write` goes to the approval queue, whose
    // store panics: the loop unwinds.
    gateway
        .store
        .panic_on_enqueue
        .store(true, std::sync::atomic::Ordering::SeqCst);
    gateway
        .send_raw(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"write","arguments":{"n":2}}}"#)
        .await;
    let store = gateway.crashed().await;
    let records = store.records();
    let call = records
        .iter()
        .find(|entry| entry.kind == Some(EntryKind::Call))
        .unwrap();
    let outcome = records
        .iter()
        .find(|entry| entry.kind == Some(EntryKind::Outcome) && entry.call == Some(call.seq))
        .expect("an outcome record");
    assert_eq!(outcome.body["outcome"], "shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_is_recorded_as_cancelled_and_the_server_told() {
    let mut gateway = read_in_flight(json!("x")).await;
    gateway
        .send_raw(
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"x"}}"#,
        )
        .await;
    gateway
        .received_eventually("fx", "notifications/cancelled")
        .await;
    let store = gateway.close().await;
    let outcomes: Vec<Value> = store
        .records()
        .iter()
        .filter(|entry| entry.kind == Some(EntryKind::Outcome))
        .map(|entry| entry.body["outcome"].clone())
        .collect();
    assert_eq!(outcomes, vec![json!("cancelled")]);
}
