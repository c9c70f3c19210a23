//! A legacy host's session state carried to a 2026-07-28 server, which has
//! neither `logging/setLevel` nor `resources/subscribe`: the level goes in
//! each of the session's requests as `io.modelcontextprotocol/logLevel`,
//! and a subscription becomes a `subscriptions/listen` stream for its URI.

use serde_json::{Value, json};

use crate::harness::{Behaviour, Harness, ServerScript, Setup, tool};

/// Wrap mode in front of one trusted 2026-07-28 server, `fx`.
async fn legacy_host_of_a_modern_server() -> Harness {
    let mut script = ServerScript::with_tools(vec![tool("echo", true)]);
    script.modern = true;
    script.resources = vec![json!({"uri": "test://watched", "name": "watched"})];
    let mut gateway = Harness::start(Setup::wrap(script, true).with_call_timeout(5)).await;
    gateway.initialize(json!({})).await;
    gateway
}

/// The lines `fx` received with `method`, parsed.
fn received(gateway: &Harness, method: &str) -> Vec<Value> {
    gateway
        .received_by("fx")
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|message| message["method"] == method)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_hosts_log_level_travels_in_each_request_to_a_2026_07_28_server() {
    let mut gateway = legacy_host_of_a_modern_server().await;
    // Before a level is set, a call asks for no log messages.
    let answer = gateway.call("echo", json!({"n": 1})).await;
    assert!(answer.get("result").is_some(), "{answer}");
    let calls = received(&gateway, "tools/call");
    assert!(
        calls[0]["params"]["_meta"]
            .get("io.modelcontextprotocol/logLevel")
            .is_none(),
        "{}",
        calls[0]
    );
    // The server has no `logging/setLevel`: the gateway answers it and
    // keeps the level for the session.
    let set = gateway
        .request("logging/setLevel", json!({"level": "warning"}))
        .await;
    assert_eq!(set["result"], json!({}), "{set}");
    assert!(received(&gateway, "logging/setLevel").is_empty());
    let answer = gateway.call("echo", json!({"n": 2})).await;
    assert!(answer.get("result").is_some(), "{answer}");
    let listed = gateway.request("resources/list", json!({})).await;
    assert!(listed.get("result").is_some(), "{listed}");
    let calls = received(&gateway, "tools/call");
    assert_eq!(
        calls[1]["params"]["_meta"]["io.modelcontextprotocol/logLevel"], "warning",
        "{}",
        calls[1]
    );
    // The host's arguments are still what it sent.
    assert_eq!(calls[1]["params"]["arguments"], json!({"n": 2}));
    let lists = received(&gateway, "resources/list");
    assert_eq!(
        lists[0]["params"]["_meta"]["io.modelcontextprotocol/logLevel"], "warning",
        "{}",
        lists[0]
    );
    // A level MCP does not name is refused, and the one set stays.
    let refused = gateway
        .request("logging/setLevel", json!({"level": "loud"}))
        .await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let _ = gateway.call("echo", json!({"n": 3})).await;
    let calls = received(&gateway, "tools/call");
    assert_eq!(
        calls[2]["params"]["_meta"]["io.modelcontextprotocol/logLevel"],
        "warning"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_07_28_servers_log_message_reaches_only_a_request_that_asked_for_its_level() {
    let note = |level: &str, text: &str| {
        json!({"jsonrpc": "2.0", "method": "notifications/message",
               "params": {"level": level, "data": text}})
        .to_string()
    };
    let mut script = ServerScript::with_tools(vec![tool("echo", true)]);
    script.modern = true;
    // The server logs while it runs the call, before its answer.
    script.behaviour.insert(
        "echo".to_owned(),
        Behaviour::LinesThenEcho(vec![note("info", "too low"), note("error", "high enough")]),
    );
    let mut gateway = Harness::start(Setup::wrap(script, true).with_call_timeout(5)).await;
    gateway.initialize(json!({})).await;
    // No level set: the host asked for no log messages.
    let answer = gateway.call("echo", json!({})).await;
    assert!(answer.get("result").is_some(), "{answer}");
    let logs = |gateway: &Harness| -> Vec<Value> {
        gateway
            .notes
            .iter()
            .filter(|note| note["method"] == "notifications/message")
            .map(|note| note["params"]["data"].clone())
            .collect()
    };
    assert!(logs(&gateway).is_empty(), "{:?}", logs(&gateway));
    let set = gateway
        .request("logging/setLevel", json!({"level": "warning"}))
        .await;
    assert_eq!(set["result"], json!({}), "{set}");
    // A message with no request in flight is nobody's. The gateway has
    // handled it before the next call is sent: a call in flight when it
    // arrived would have asked for it.
    gateway.push("fx", &note("emergency", "nobody asked"));
    gateway.handled("fx").await;
    let answer = gateway.call("echo", json!({})).await;
    assert!(answer.get("result").is_some(), "{answer}");
    assert_eq!(logs(&gateway), [json!("high enough")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_hosts_subscription_is_a_listen_stream_on_a_2026_07_28_server() {
    let mut gateway = legacy_host_of_a_modern_server().await;
    let listed = gateway.request("resources/list", json!({})).await;
    assert!(listed.get("result").is_some(), "{listed}");
    let subscribed = gateway
        .request("resources/subscribe", json!({"uri": "test://watched"}))
        .await;
    assert_eq!(subscribed["result"], json!({}), "{subscribed}");
    // The server got a listen stream for the URI, with the modern `_meta`,
    // and no `resources/subscribe`, which it does not have.
    assert!(received(&gateway, "resources/subscribe").is_empty());
    let listens = received(&gateway, "subscriptions/listen");
    let listen = listens
        .iter()
        .find(|listen| {
            listen["params"]["notifications"]["resourceSubscriptions"] == json!(["test://watched"])
        })
        .unwrap_or_else(|| panic!("{listens:?}"));
    assert_eq!(
        listen["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"],
        "2026-07-28"
    );
    let listen_id = listen["id"].clone();
    // A second subscription to the same URI holds no second stream.
    let again = gateway
        .request("resources/subscribe", json!({"uri": "test://watched"}))
        .await;
    assert_eq!(again["result"], json!({}), "{again}");
    assert_eq!(
        received(&gateway, "subscriptions/listen").len(),
        listens.len()
    );

    // An update on another stream is not this subscription's; on its own
    // stream it reaches the host as a legacy update, without the gateway's
    // subscription id.
    let update = |id: &Value| {
        json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
               "params": {"uri": "test://watched",
                          "_meta": {"io.modelcontextprotocol/subscriptionId": id}}})
        .to_string()
    };
    gateway.push("fx", &update(&json!(987_654)));
    gateway.push("fx", &update(&listen_id));
    let note = loop {
        let message = gateway.next().await;
        if message["method"] == "notifications/resources/updated" {
            break message;
        }
    };
    assert_eq!(note["params"], json!({"uri": "test://watched"}), "{note}");

    // Unsubscribing ends the stream: the server is told the listen request
    // is cancelled.
    let unsubscribed = gateway
        .request("resources/unsubscribe", json!({"uri": "test://watched"}))
        .await;
    assert_eq!(unsubscribed["result"], json!({}), "{unsubscribed}");
    gateway
        .received_eventually("fx", "notifications/cancelled")
        .await;
    let cancelled = received(&gateway, "notifications/cancelled");
    assert_eq!(
        cancelled[0]["params"]["requestId"], listen_id,
        "{cancelled:?}"
    );
    assert!(received(&gateway, "resources/unsubscribe").is_empty());
    // Its updates no longer reach the host: one the gateway has handled
    // did not come before the answer to a later call.
    gateway.push("fx", &update(&listen_id));
    gateway.handled("fx").await;
    let answer = gateway.call("echo", json!({})).await;
    assert!(answer.get("result").is_some(), "{answer}");
    assert!(
        !gateway
            .notes
            .iter()
            .any(|note| note["method"] == "notifications/resources/updated"),
        "{:?}",
        gateway.notes
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_the_2026_07_28_server_does_not_acknowledge_fails_in_time() {
    let mut script = ServerScript::with_tools(vec![tool("echo", true)]);
    script.modern = true;
    script.resources = vec![json!({"uri": "test://watched", "name": "watched"})];
    script.silent.push("subscriptions/listen".to_owned());
    let mut gateway = Harness::start(Setup::wrap(script, true).with_call_timeout(1)).await;
    gateway.initialize(json!({})).await;
    let subscribed = gateway
        .request("resources/subscribe", json!({"uri": "test://watched"}))
        .await;
    let why = subscribed["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{subscribed}"));
    assert!(why.contains("did not acknowledge"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_cannot_make_the_gateway_hold_endless_subscriptions() {
    let mut gateway = legacy_host_of_a_modern_server().await;
    for n in 0..64 {
        let answer = gateway
            .request(
                "resources/subscribe",
                json!({"uri": format!("test://r/{n}")}),
            )
            .await;
        assert_eq!(answer["result"], json!({}), "{n}: {answer}");
    }
    let refused = gateway
        .request("resources/subscribe", json!({"uri": "test://r/64"}))
        .await;
    let why = refused["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{refused}"));
    assert!(why.contains("at most 64"), "{why}");
    assert_eq!(received(&gateway, "subscriptions/listen").len(), 64 + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsubscribing_before_the_acknowledgement_answers_both_requests() {
    let mut script = ServerScript::with_tools(vec![tool("echo", true)]);
    script.modern = true;
    script.silent.push("subscriptions/listen".to_owned());
    let mut gateway = Harness::start(Setup::wrap(script, true).with_call_timeout(30)).await;
    gateway.initialize(json!({})).await;
    let subscribe = json!({"jsonrpc": "2.0", "id": "s", "method": "resources/subscribe",
                           "params": {"uri": "test://watched"}});
    gateway.send_raw(&subscribe.to_string()).await;
    gateway
        .received_eventually("fx", "subscriptions/listen")
        .await;
    let unsubscribed = gateway
        .request("resources/unsubscribe", json!({"uri": "test://watched"}))
        .await;
    assert_eq!(unsubscribed["result"], json!({}), "{unsubscribed}");
    // The subscription waiting for the server is answered, not left to hang.
    let subscribed = gateway
        .notes
        .iter()
        .find(|note| note["id"] == "s")
        .unwrap_or_else(|| panic!("{:?}", gateway.notes));
    assert!(subscribed.get("error").is_some(), "{subscribed}");
    gateway
        .received_eventually("fx", "notifications/cancelled")
        .await;
}
