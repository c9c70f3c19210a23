//! Resource subscriptions the gateway holds for hosts.
//!
//! A server that stops and starts again has forgotten its subscriptions;
//! the hosts that hold them have not. The gateway tells them the resource
//! may have changed and makes each subscription again when the server is
//! ready, in its era, so updates reach the hosts after a restart as before.
//!
//! A 2026-07-28 host has no `resources/subscribe`: it names the resources
//! it follows in its listen stream (`resourceSubscriptions`), and gets
//! their updates on that stream, whatever the era of their server.

use serde_json::{Value, json};

use crate::harness::{Harness, ServerScript, Setup, eventually, tool};

/// Wrap mode in front of one trusted server `fx` of the era given, with one
/// resource, and a host subscribed to it.
async fn subscribed(modern: bool) -> Harness {
    let mut script = ServerScript::with_tools(vec![tool("echo", true)]);
    script.modern = modern;
    script.resources = vec![json!({"uri": "test://watched", "name": "watched"})];
    let mut gateway = Harness::start(Setup::wrap(script, true).with_call_timeout(10)).await;
    gateway.initialize(json!({})).await;
    let subscribed = gateway
        .request("resources/subscribe", json!({"uri": "test://watched"}))
        .await;
    assert_eq!(subscribed["result"], json!({}), "{subscribed}");
    gateway
}

/// The lines `fx` received (in every start) with `method`, parsed.
fn received(gateway: &Harness, method: &str) -> Vec<Value> {
    gateway
        .received_by("fx")
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|message| message["method"] == method)
        .collect()
}

/// The next `notifications/resources/updated` the host gets.
async fn next_update(gateway: &mut Harness) -> Value {
    loop {
        let message = gateway.next().await;
        if message["method"] == "notifications/resources/updated" {
            return message;
        }
    }
}

/// The server dies; the host is told to read the resource again, and its
/// read starts the server again.
async fn crash_and_read_again(gateway: &mut Harness) {
    gateway.crash_server("fx");
    let told = next_update(gateway).await;
    assert_eq!(told["params"], json!({"uri": "test://watched"}), "{told}");
    let read = gateway
        .request("resources/read", json!({"uri": "test://watched"}))
        .await;
    assert!(read.get("result").is_some(), "{read}");
    assert_eq!(gateway.starts.lock().unwrap()["fx"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_server_started_again_is_subscribed_again_and_its_updates_reach_the_host() {
    let mut gateway = subscribed(false).await;
    assert_eq!(received(&gateway, "resources/subscribe").len(), 1);
    crash_and_read_again(&mut gateway).await;
    // The new start is sent the subscription the host still holds.
    eventually(|| received(&gateway, "resources/subscribe").len() == 2).await;
    let again = &received(&gateway, "resources/subscribe")[1];
    assert_eq!(again["params"], json!({"uri": "test://watched"}), "{again}");
    // Its update reaches the host, as before the restart.
    gateway.push(
        "fx",
        &json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
                "params": {"uri": "test://watched"}})
        .to_string(),
    );
    let update = next_update(&mut gateway).await;
    assert_eq!(update["params"]["uri"], "test://watched");
    // Unsubscribing tells the new start, which holds it.
    let unsubscribed = gateway
        .request("resources/unsubscribe", json!({"uri": "test://watched"}))
        .await;
    assert!(unsubscribed.get("result").is_some(), "{unsubscribed}");
    assert_eq!(received(&gateway, "resources/unsubscribe").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_07_28_server_started_again_gets_a_new_listen_stream_for_the_hosts_subscription() {
    let mut gateway = subscribed(true).await;
    let listens = |gateway: &Harness| {
        received(gateway, "subscriptions/listen")
            .into_iter()
            .filter(|listen| {
                listen["params"]["notifications"]["resourceSubscriptions"]
                    == json!(["test://watched"])
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(listens(&gateway).len(), 1);
    let old_id = listens(&gateway)[0]["id"].clone();
    crash_and_read_again(&mut gateway).await;
    eventually(|| listens(&gateway).len() == 2).await;
    let new_id = listens(&gateway)[1]["id"].clone();
    // An update on the new stream reaches the host, without the stream's id.
    let update = |id: &Value| {
        json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
               "params": {"uri": "test://watched",
                          "_meta": {"io.modelcontextprotocol/subscriptionId": id}}})
        .to_string()
    };
    // One on the dead start's stream id is not this subscription's any more
    // (unless the new start happened to reuse the number).
    if old_id != new_id {
        gateway.push("fx", &update(&old_id));
    }
    gateway.push("fx", &update(&new_id));
    let note = next_update(&mut gateway).await;
    assert_eq!(note["params"], json!({"uri": "test://watched"}), "{note}");
    gateway.handled("fx").await;
    let answer = gateway.call("echo", json!({})).await;
    assert!(answer.get("result").is_some(), "{answer}");
    assert!(
        !gateway
            .notes
            .iter()
            .any(|note| note["method"] == "notifications/resources/updated"),
        "one update reached the host, not two: {:?}",
        gateway.notes
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_unsubscribes_while_the_server_is_down_is_unsubscribed_on_its_new_start() {
    let mut gateway = subscribed(false).await;
    gateway.crash_server("fx");
    let told = next_update(&mut gateway).await;
    assert_eq!(told["params"]["uri"], "test://watched");
    // A request to a stopped server starts it; the subscription it is
    // made again with is then ended by the host's own request.
    let unsubscribed = gateway
        .request("resources/unsubscribe", json!({"uri": "test://watched"}))
        .await;
    assert_eq!(unsubscribed["result"], json!({}), "{unsubscribed}");
    assert_eq!(gateway.starts.lock().unwrap()["fx"], 2);
    assert_eq!(received(&gateway, "resources/subscribe").len(), 2);
    assert_eq!(received(&gateway, "resources/unsubscribe").len(), 1);
    // Its updates no longer reach the host.
    gateway.push(
        "fx",
        &json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
                "params": {"uri": "test://watched"}})
        .to_string(),
    );
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

/// A 2026-07-28 host's listen stream, with `resourceSubscriptions`, as the
/// host's first message after a `tools/list`; returns the acknowledgement.
async fn modern_listen(gateway: &mut Harness, uris: Value) -> Value {
    let listed = gateway
        .modern_request("tools/list", json!({}), json!({}))
        .await;
    assert!(listed.get("result").is_some(), "{listed}");
    let listen = json!({"jsonrpc": "2.0", "id": "listen-1", "method": "subscriptions/listen",
        "params": {"notifications": {"toolsListChanged": true, "resourceSubscriptions": uris},
                   "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                             "io.modelcontextprotocol/clientCapabilities": {}}}});
    gateway.send_raw(&listen.to_string()).await;
    loop {
        let message = gateway.next().await;
        if message["method"] == "notifications/subscriptions/acknowledged" {
            return message;
        }
    }
}

/// Wrap mode in front of one trusted server of the era given, with one
/// resource.
async fn watched_server(modern: bool) -> Harness {
    let mut script = ServerScript::with_tools(vec![tool("echo", true)]);
    script.modern = modern;
    script.resources = vec![json!({"uri": "test://watched", "name": "watched"})];
    Harness::start(Setup::wrap(script, true).with_call_timeout(10)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_07_28_hosts_listen_stream_subscribes_it_to_a_legacy_servers_resource() {
    let mut gateway = watched_server(false).await;
    let ack = modern_listen(
        &mut gateway,
        json!(["test://watched", "test://b\u{202e}txt.exe"]),
    )
    .await;
    // Its own stream, and only the URI the gateway can show as it is.
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "listen-1",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["notifications"]["resourceSubscriptions"],
        json!(["test://watched"]),
        "{ack}"
    );
    eventually(|| received(&gateway, "resources/subscribe").len() == 1).await;
    assert_eq!(
        received(&gateway, "resources/subscribe")[0]["params"],
        json!({"uri": "test://watched"})
    );
    // The server's update reaches the host on the host's stream.
    gateway.push(
        "fx",
        &json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
                "params": {"uri": "test://watched"}})
        .to_string(),
    );
    let update = next_update(&mut gateway).await;
    assert_eq!(update["params"]["uri"], "test://watched", "{update}");
    assert_eq!(
        update["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "listen-1",
        "{update}"
    );
    // The host ends its stream: the server is told, once.
    gateway
        .send_raw(
            &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": "listen-1"}})
            .to_string(),
        )
        .await;
    gateway
        .received_eventually("fx", "resources/unsubscribe")
        .await;
    assert_eq!(received(&gateway, "resources/unsubscribe").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_07_28_hosts_listen_stream_follows_a_2026_07_28_servers_resource_on_the_hosts_own_id()
 {
    let mut gateway = watched_server(true).await;
    let ack = modern_listen(&mut gateway, json!(["test://watched"])).await;
    assert_eq!(
        ack["params"]["notifications"]["resourceSubscriptions"],
        json!(["test://watched"]),
        "{ack}"
    );
    // The server gets a listen stream of the gateway's for the URI.
    let server_listen = loop {
        let listens: Vec<Value> = received(&gateway, "subscriptions/listen")
            .into_iter()
            .filter(|listen| {
                listen["params"]["notifications"]["resourceSubscriptions"]
                    == json!(["test://watched"])
            })
            .collect();
        if let Some(listen) = listens.first() {
            break listen.clone();
        }
        gateway.handled("fx").await;
    };
    gateway.push(
        "fx",
        &json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
                "params": {"uri": "test://watched",
                           "_meta": {"io.modelcontextprotocol/subscriptionId": server_listen["id"]}}})
        .to_string(),
    );
    let update = next_update(&mut gateway).await;
    // The host's id, not the gateway's stream on the server.
    assert_eq!(
        update["params"]["_meta"],
        json!({"io.modelcontextprotocol/subscriptionId": "listen-1"}),
        "{update}"
    );
    assert_eq!(update["params"]["uri"], "test://watched");
}
