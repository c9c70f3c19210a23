//! A hostile peer against the gateway's runtime: answers that answer no
//! request, calls that must end on record however the gateway ends, a tool
//! list that never stops growing, lines the gateway composes.

use serde_json::{Value, json};

use crate::harness::{Behaviour, Harness, ServerScript, Setup, text, tool};

/// A server's answer to a line it could not read (JSON-RPC 2.0 §5).
const NULL_ID_ERROR: &str =
    r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#;

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
    assert_eq!(text(&garbled), r#"{"n":1}"#, "{garbled}");
    gateway.push("fx", NULL_ID_ERROR);
    let read = gateway.call("read", json!({"n": 2})).await;
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
        .filter(|entry| entry.kind == Some(hintgate_store::EntryKind::Outcome))
        .map(|entry| entry.body["outcome"].clone())
        .collect();
    assert!(
        outcomes.iter().all(|outcome| outcome == "ok"),
        "{outcomes:?}"
    );
}
