//! Edit, then approve, in process: what the server receives is the edited
//! call as the person approved it, byte for byte; the call's idempotency
//! key stays the call's; an edit the gateway cannot use asks about the call
//! as it was; and the record and the host's result say what happened.

use hintgate_store::{Answer, ApprovalQueue, Pending, Remember};
use serde_json::{Value, json};

use crate::harness::{Harness, ServerScript, Setup, eventually, is_error, raw_arguments};

fn keyed_tool() -> Value {
    json!({
        "name": "charge",
        "description": "charges an amount",
        "inputSchema": {"type": "object", "properties": {
            "amount": {"type": "integer"},
            "idempotency_key": {"type": "string"}},
            "required": ["amount"]},
        "annotations": {"readOnlyHint": false, "destructiveHint": false, "idempotentHint": false, "openWorldHint": true},
    })
}

/// Waits until the queue holds a waiting call other than those `seen`.
async fn next_waiting(gateway: &Harness, seen: &[u64]) -> Pending {
    let store = gateway.store.clone();
    let mut found = None;
    eventually(|| {
        found = store
            .inner
            .waiting(0)
            .unwrap()
            .into_iter()
            .find(|pending| !seen.contains(&pending.id));
        found.is_some()
    })
    .await;
    found.unwrap()
}

fn edit(gateway: &Harness, id: u64, arguments: &str) {
    let answer = Answer {
        approve: true,
        remember: Remember::Call,
        by: "ann".into(),
        arguments: Some(arguments.to_owned()),
    };
    assert_eq!(
        gateway.store.inner.answer(id, &answer, 0).unwrap(),
        hintgate_store::Answered::Released
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_receives_the_edited_call_byte_for_byte_with_the_calls_key() {
    let script = ServerScript::with_tools(vec![keyed_tool()]);
    let mut gateway = Harness::start(Setup::wrap(script, false)).await;
    // No elicitation: the call waits in the approval queue.
    gateway.initialize(json!({})).await;
    gateway
        .send_raw(r#"{"jsonrpc":"2.0","id":"c1","method":"tools/call","params":{"name":"charge","arguments":{ "amount" : 5 }}}"#)
        .await;
    let first = next_waiting(&gateway, &[]).await;
    let key = first.details.as_ref().unwrap()["arguments"]["idempotency_key"]
        .as_str()
        .unwrap()
        .to_owned();

    // Edits the gateway cannot use, given past the command line's checks
    // (as someone holding the key could): the call is asked about again as
    // the host sent it, saying why, and nothing is sent.
    edit(
        &gateway,
        first.id,
        r#"{"amount":7,"idempotency_key":"mine"}"#,
    );
    let second = next_waiting(&gateway, &[first.id]).await;
    assert!(
        second.prompt.starts_with(&format!(
            "hintgate: the edit of #{} by ann could not be used (it changes the call's idempotency key `idempotency_key`",
            first.id
        )),
        "{}",
        second.prompt
    );
    assert_eq!(second.details.as_ref().unwrap()["arguments"]["amount"], 5);
    edit(&gateway, second.id, r#"{ "amount": 7 }"#);
    let third = next_waiting(&gateway, &[first.id, second.id]).await;
    assert!(
        third
            .prompt
            .contains("the stored edit is not canonical JSON"),
        "{}",
        third.prompt
    );
    edit(&gateway, third.id, r#"{"amount":"seven"}"#);
    let fourth = next_waiting(&gateway, &[first.id, second.id, third.id]).await;
    assert!(
        fourth
            .prompt
            .contains("do not match the tool's input schema"),
        "{}",
        fourth.prompt
    );
    assert!(gateway.calls_received("fx").is_empty());

    // An edit that leaves the key out gets the call's key back, and is
    // asked about again as edited, for this call only.
    edit(&gateway, fourth.id, r#"{"amount":7}"#);
    let seen = [first.id, second.id, third.id, fourth.id];
    let edited = next_waiting(&gateway, &seen).await;
    assert!(
        edited.prompt.starts_with(&format!(
            "hintgate: ann edited this call in the approval queue (#{})",
            fourth.id
        )),
        "{}",
        edited.prompt
    );
    let details = edited.details.as_ref().unwrap();
    assert_eq!(
        details["arguments"],
        json!({"amount": 7, "idempotency_key": key})
    );
    assert_eq!(
        details["edited"]["original"],
        json!({"amount": 5, "idempotency_key": key})
    );
    assert_eq!(edited.offer, Remember::Call);
    assert!(gateway.calls_received("fx").is_empty());

    // Approved as shown, remembered further than offered: it runs once,
    // as edited, and nothing is remembered.
    let approve = Answer {
        approve: true,
        remember: Remember::Always,
        by: "ann".into(),
        arguments: None,
    };
    gateway.store.inner.answer(edited.id, &approve, 0).unwrap();
    let answer = gateway.response(&json!("c1")).await;
    assert!(!is_error(&answer), "{answer}");
    let received = gateway.received_by("fx");
    let calls: Vec<&String> = received
        .iter()
        .filter(|line| line.contains("\"tools/call\""))
        .collect();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(
        raw_arguments(calls[0]),
        format!(r#"{{"amount":7,"idempotency_key":"{key}"}}"#),
        "the server got the edited call, byte for byte"
    );
    // The host is told, in its content and its `_meta`.
    let result = &answer["result"];
    let blocks = result["content"].as_array().unwrap();
    assert!(
        blocks.last().unwrap()["text"]
            .as_str()
            .unwrap()
            .starts_with("hintgate: a person (ann) edited this call before approving it."),
        "{answer}"
    );
    assert_eq!(
        result["_meta"]["hintgate/edited"]["changed"],
        json!(["amount"])
    );
    assert_eq!(result["_meta"]["hintgate/edited"]["arguments"]["amount"], 7);
    // The record: what ran, what the host asked, the call's key.
    let records = gateway.store.call_records();
    let ran = records
        .iter()
        .find(|record| record.get("edit").is_some() && record.get("outcome").is_none())
        .unwrap_or_else(|| panic!("{records:?}"));
    assert_eq!(ran["arguments"]["amount"], 7, "{ran}");
    assert_eq!(ran["edit"]["original"]["amount"], 5, "{ran}");
    assert_eq!(ran["edit"]["by"], "ann", "{ran}");
    assert_eq!(ran["idempotency"]["key"], key.as_str(), "{ran}");
    // Nothing was remembered: the next call is asked about.
    gateway
        .send_raw(r#"{"jsonrpc":"2.0","id":"c2","method":"tools/call","params":{"name":"charge","arguments":{"amount":1}}}"#)
        .await;
    let mut seen = seen.to_vec();
    seen.push(edited.id);
    let next = next_waiting(&gateway, &seen).await;
    assert_eq!(next.details.as_ref().unwrap()["arguments"]["amount"], 1);
    assert_eq!(gateway.calls_received("fx").len(), 1);
    gateway.close().await;
}
