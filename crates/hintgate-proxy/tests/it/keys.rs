//! Idempotency keys in the gateway: a key filled in is the one the person
//! sees and the server gets (also across a 2026-07-28 host's retry), two
//! calls with one key in one turn send one, and a keyed call whose outcome
//! is unknown is never sent again.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::harness::{Behaviour, Harness, ServerScript, Setup, is_error, text};

fn keyed_tool(name: &str) -> Value {
    json!({
        "name": name,
        "description": "charges an amount",
        "inputSchema": {"type": "object", "properties": {
            "amount": {"type": "integer"},
            "idempotency_key": {"type": "string"}}},
        "annotations": {"readOnlyHint": false, "destructiveHint": false, "idempotentHint": false, "openWorldHint": true},
    })
}

fn keys_received(gateway: &Harness) -> Vec<Value> {
    gateway
        .calls_received("fx")
        .iter()
        .map(|call| call["params"]["arguments"]["idempotency_key"].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_filled_in_is_the_one_the_person_sees_and_the_server_gets() {
    let script = ServerScript::with_tools(vec![keyed_tool("charge")]);
    let mut gateway = Harness::start(Setup::wrap(script, true)).await;
    gateway.initialize(json!({"elicitation": {}})).await;
    gateway.respond_with(|_| json!({"action": "accept", "content": {"approve": true}}).to_string());
    let answer = gateway.call("charge", json!({"amount": 5})).await;
    assert!(!is_error(&answer), "{answer}");
    let question = &gateway.requests[0];
    let prompt = question["params"]["message"].as_str().unwrap();
    let keys = keys_received(&gateway);
    assert_eq!(keys.len(), 1);
    let key = keys[0].as_str().unwrap();
    assert!(
        prompt.contains(key),
        "the prompt shows the key {key}:\n{prompt}"
    );
    // The host's own members are sent as they were.
    assert_eq!(
        gateway.calls_received("fx")[0]["params"]["arguments"]["amount"],
        5
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_host_that_is_asked_and_retries_sends_the_key_it_was_shown() {
    let script = ServerScript::with_tools(vec![keyed_tool("charge")]);
    let mut gateway = Harness::start(Setup::wrap(script, true)).await;
    let capabilities = json!({"elicitation": {"form": {}}});
    let asked = gateway
        .modern_request(
            "tools/call",
            json!({"name": "charge", "arguments": {"amount": 7}}),
            capabilities.clone(),
        )
        .await;
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    let state = asked["result"]["requestState"].clone();
    let shown = asked["result"]["inputRequests"]["hintgate/approve"].to_string();
    let retried = gateway
        .modern_request(
            "tools/call",
            json!({"name": "charge", "arguments": {"amount": 7}, "requestState": state,
                   "inputResponses": {"hintgate/approve": {"action": "accept", "content": {"approve": true}}}}),
            capabilities,
        )
        .await;
    assert!(!is_error(&retried), "{retried}");
    let keys = keys_received(&gateway);
    assert_eq!(keys.len(), 1, "{keys:?}");
    let key = keys[0].as_str().unwrap();
    assert!(shown.contains(key), "the person saw {key}: {shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_calls_with_one_key_in_one_turn_send_one() {
    let script =
        ServerScript::with_tools(vec![keyed_tool("charge")]).answering("charge", Behaviour::Echo);
    let mut setup = Setup::wrap(script, true);
    setup
        .config
        .push_str("\n[[rules]]\ntool = \"charge\"\naction = \"allow\"\n");
    let mut gateway = Harness::start(setup).await;
    gateway.initialize(json!({})).await;
    // Listed first, so both calls are decided in the turn they arrive in.
    gateway.request("tools/list", json!({})).await;
    let call = |id: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "charge", "arguments": {"amount": 1, "idempotency_key": "k-1"}}})
        .to_string()
    };
    gateway
        .send_raw(&format!("{}\n{}", call("c1"), call("c2")))
        .await;
    // The refused one may come first: both are read as they come. Decided
    // in one turn, the second finds the first's claim running and is
    // refused; on a loaded machine the first may end before the second is
    // read, and then the second gets its recorded result. Either way the
    // server runs it once.
    let (one, two) = (gateway.next().await, gateway.next().await);
    let refused: Vec<&Value> = [&one, &two]
        .into_iter()
        .filter(|answer| is_error(answer))
        .collect();
    match refused.as_slice() {
        [] => assert_eq!(one["result"], two["result"], "a replay is the same answer"),
        [refusal] => assert!(text(refusal).contains("has not ended"), "{refusal}"),
        _ => panic!("both refused:\n{one}\n{two}"),
    }
    assert_eq!(gateway.calls_received("fx").len(), 1);
    // Once it ran, a third gets its result, and it still ran once.
    let third = gateway
        .call("charge", json!({"amount": 1, "idempotency_key": "k-1"}))
        .await;
    assert!(!is_error(&third), "{third}");
    assert_eq!(gateway.calls_received("fx").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_call_with_no_answer_is_never_sent_again() {
    // Untrusted: no automatic retry, so the first call's outcome is unknown.
    let script = ServerScript::with_tools(vec![keyed_tool("charge")])
        .answering("charge", Behaviour::HangOnce);
    // The first call waits out the deadline; the last one, answered, has
    // the same deadline to spare.
    let mut setup = Setup::wrap(script, false).with_call_timeout(3);
    setup
        .config
        .push_str("\n[[rules]]\ntool = \"charge\"\naction = \"allow\"\n");
    let mut gateway = Harness::start(setup).await;
    gateway.initialize(json!({})).await;
    let arguments = json!({"amount": 2, "idempotency_key": "k-lost"});
    let timed_out = gateway.call("charge", arguments.clone()).await;
    assert!(is_error(&timed_out), "{timed_out}");
    let again = gateway.call("charge", arguments).await;
    assert!(is_error(&again), "{again}");
    assert!(text(&again).contains("no answer came"), "{again}");
    assert_eq!(gateway.calls_received("fx").len(), 1);
    // A new key is a new call.
    let fresh = gateway
        .call("charge", json!({"amount": 2, "idempotency_key": "k-new"}))
        .await;
    assert!(!is_error(&fresh), "{fresh}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_answers_what_the_host_got_not_what_the_server_sent() {
    let mut tool = keyed_tool("charge");
    tool["outputSchema"] =
        json!({"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]});
    let script = ServerScript::with_tools(vec![tool]).answering(
        "charge",
        Behaviour::Raw(r#"{"content":[],"structuredContent":{"id":7}}"#.to_owned()),
    );
    let mut setup = Setup::wrap(script, true);
    setup
        .config
        .push_str("\n[[rules]]\ntool = \"charge\"\naction = \"allow\"\n");
    let mut gateway = Harness::start(setup).await;
    gateway.initialize(json!({})).await;
    let arguments = json!({"amount": 2, "idempotency_key": "k-schema"});
    let first = gateway.call("charge", arguments.clone()).await;
    assert!(is_error(&first), "{first}");
    assert!(
        text(&first).contains("does not match the tool's output schema"),
        "{first}"
    );
    let again = gateway.call("charge", arguments).await;
    assert_eq!(again["result"], first["result"]);
    assert_eq!(gateway.calls_received("fx").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_private_result_taints_the_session_it_reaches() {
    let fetch = json!({
        "name": "fetch", "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": true, "openWorldHint": true},
    });
    let script = || ServerScript::with_tools(vec![keyed_tool("charge"), fetch.clone()]);
    let setup = |store| {
        // The fetch after private data is asked about: it waits for a
        // person this host cannot ask, until the (short) deadline.
        let mut setup = Setup::wrap(script(), true).with_ask_timeout(2);
        setup.config.push_str(
            "private_data = [\"charge\"]\n\n[[rules]]\ntool = \"charge\"\naction = \"allow\"\n",
        );
        setup.store = store;
        setup
    };
    let arguments = json!({"amount": 3, "idempotency_key": "k-private"});
    let mut gateway = Harness::start(setup(None)).await;
    gateway.initialize(json!({})).await;
    assert!(!is_error(&gateway.call("charge", arguments.clone()).await));
    let store = gateway.close().await;

    // A new session: the result reaches it by replay, and taints it.
    let mut gateway = Harness::start(setup(Some(store))).await;
    gateway.initialize(json!({})).await;
    let replayed = gateway.call("charge", arguments).await;
    assert!(!is_error(&replayed), "{replayed}");
    assert!(gateway.calls_received("fx").is_empty(), "replayed, not run");
    let fetched = gateway
        .call("fetch", json!({"url": "https://example.com"}))
        .await;
    assert!(is_error(&fetched), "{fetched}");
    let store = gateway.close().await;
    let fetch_record = store
        .call_records()
        .into_iter()
        .rfind(|record| record["tool"] == "fetch")
        .unwrap();
    assert_eq!(fetch_record["reasons"][0], "open-world-after-private-data");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_users_stdio_gateways_on_one_store_never_answer_each_others_keys() {
    let setup = |principal: &str, store| {
        let mut setup = Setup::wrap(ServerScript::with_tools(vec![keyed_tool("charge")]), true);
        setup.config = setup.config.replace(
            "[gateway]\n",
            &format!("[gateway]\nprincipal = \"{principal}\"\n"),
        );
        setup
            .config
            .push_str("\n[[rules]]\ntool = \"charge\"\naction = \"allow\"\n");
        setup.store = store;
        setup
    };
    let arguments = json!({"amount": 9, "idempotency_key": "k-shared"});
    let mut alice = Harness::start(setup("local:alice", None)).await;
    alice.initialize(json!({})).await;
    assert!(!is_error(&alice.call("charge", arguments.clone()).await));
    let store = alice.close().await;

    // Bob's gateway on the same store, with the same key and arguments:
    // refused as another host's key, never answered with Alice's result.
    let mut bob = Harness::start(setup("local:bob", Some(Arc::clone(&store)))).await;
    bob.initialize(json!({})).await;
    let refused = bob.call("charge", arguments.clone()).await;
    assert!(is_error(&refused), "{refused}");
    assert!(bob.calls_received("fx").is_empty(), "not sent again");
    let store = bob.close().await;
    let bobs = store
        .call_records()
        .into_iter()
        .rfind(|record| record["tool"] == "charge")
        .unwrap();
    assert_eq!(bobs["reasons"][0], "idempotency-conflict", "{bobs}");

    // Alice again: her own key replays her result.
    let mut alice = Harness::start(setup("local:alice", Some(store))).await;
    alice.initialize(json!({})).await;
    let replayed = alice.call("charge", arguments).await;
    assert!(!is_error(&replayed), "{replayed}");
    assert!(alice.calls_received("fx").is_empty(), "replayed, not run");
}
