//! Session taint follows the data (design §4.4): private data that reaches
//! the host through a resource, a resource update or a prompt taints the
//! session as a tool result does, in both eras.

use std::collections::HashMap;

use hintgate_proxy::Mode;
use serde_json::{Value, json};

use crate::harness::{Harness, ServerScript, Setup, is_error, tool};

/// A trusted read-only tool that reaches the web: it runs unasked until
/// the session has read private data.
fn fetch() -> Value {
    let mut fetch = tool("fetch", true);
    fetch["annotations"]["openWorldHint"] = json!(true);
    fetch
}

/// Gateway mode: `mail` holds private data (its resources and prompts),
/// `web` has an open-world tool; both trusted, both in the `modern` era or
/// both legacy.
fn setup(modern: bool) -> Setup {
    let mut mail = ServerScript::with_tools(vec![tool("list_folders", true)]);
    mail.resources = vec![
        json!({"uri": "mail://inbox/1", "name": "the first message"}),
        json!({"uri": "mail://missing/2", "name": "a message that is gone"}),
    ];
    mail.modern = modern;
    let mut web = ServerScript::with_tools(vec![fetch()]);
    web.modern = modern;
    Setup {
        config: "[gateway]\ncall_timeout_s = 5\nask_timeout_s = 5\n\n[servers.mail]\ncommand = \"x\"\ntrust = \"trusted\"\nprivate_data = true\n\n[servers.web]\ncommand = \"x\"\ntrust = \"trusted\"\n".to_owned(),
        mode: Mode::Gateway,
        scripts: HashMap::from([("mail".to_owned(), mail), ("web".to_owned(), web)]),
        store: None,
    }
}

/// A legacy session whose person declines every question, with the
/// resources listed (so their URIs are routed).
async fn legacy_session() -> Harness {
    let mut gateway = Harness::start(setup(false)).await;
    gateway.respond_with(|_| r#"{"action":"decline"}"#.to_owned());
    gateway.initialize(json!({"elicitation": {}})).await;
    let listed = gateway.request("resources/list", json!({})).await;
    assert_eq!(
        listed["result"]["resources"].as_array().map(Vec::len),
        Some(2),
        "{listed}"
    );
    gateway
}

/// Calls `web__fetch` and says whether a person was asked about it; an
/// asked call must have been asked because of the taint.
async fn fetch_was_asked(gateway: &mut Harness) -> bool {
    let before = gateway.requests.len();
    let answer = gateway.call("web__fetch", json!({})).await;
    if gateway.requests.len() == before {
        assert!(!is_error(&answer), "ran unasked: {answer}");
        return false;
    }
    assert!(is_error(&answer), "declined: {answer}");
    assert_eq!(
        answer["result"]["_meta"]["hintgate/decision"]["reasons"][0],
        "open-world-after-private-data",
        "{answer}"
    );
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_a_private_resource_read_taints_the_session() {
    let mut gateway = legacy_session().await;
    assert!(!fetch_was_asked(&mut gateway).await, "nothing read yet");
    // A read that fails returns no data: no taint.
    let failed = gateway
        .request("resources/read", json!({"uri": "mail://missing/2"}))
        .await;
    assert!(failed.get("error").is_some(), "{failed}");
    assert!(!fetch_was_asked(&mut gateway).await, "an error is no data");
    // The private message reaches the host: open-world tools now ask.
    let read = gateway
        .request("resources/read", json!({"uri": "mail://inbox/1"}))
        .await;
    assert_eq!(
        read["result"]["contents"][0]["text"], "the private contents of mail://inbox/1",
        "{read}"
    );
    assert!(fetch_was_asked(&mut gateway).await, "tainted by the read");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_a_private_prompt_taints_the_session() {
    let mut gateway = legacy_session().await;
    let prompt = gateway
        .request("prompts/get", json!({"name": "mail__summarize"}))
        .await;
    assert!(prompt["result"]["messages"].is_array(), "{prompt}");
    assert!(fetch_was_asked(&mut gateway).await, "tainted by the prompt");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_a_private_resource_update_taints_the_session() {
    let mut gateway = legacy_session().await;
    let subscribed = gateway
        .request("resources/subscribe", json!({"uri": "mail://inbox/1"}))
        .await;
    assert!(subscribed.get("result").is_some(), "{subscribed}");
    assert!(
        !fetch_was_asked(&mut gateway).await,
        "a subscription alone returns no data"
    );
    gateway.push(
        "mail",
        r#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"mail://inbox/1"}}"#,
    );
    loop {
        let message = gateway.next().await;
        if message["method"] == "notifications/resources/updated" {
            break;
        }
        gateway.notes.push(message);
    }
    assert!(fetch_was_asked(&mut gateway).await, "tainted by the update");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_resource_update_from_a_2026_07_28_server_taints_the_legacy_session() {
    let mut gateway = Harness::start(setup(true)).await;
    gateway.respond_with(|_| r#"{"action":"decline"}"#.to_owned());
    gateway.initialize(json!({"elicitation": {}})).await;
    let listed = gateway.request("resources/list", json!({})).await;
    assert!(listed["result"]["resources"].is_array(), "{listed}");
    let subscribed = gateway
        .request("resources/subscribe", json!({"uri": "mail://inbox/1"}))
        .await;
    assert_eq!(subscribed["result"], json!({}), "{subscribed}");
    assert!(
        !fetch_was_asked(&mut gateway).await,
        "a subscription alone returns no data"
    );
    let listen = gateway
        .received_by("mail")
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|message| {
            message["params"]["notifications"]["resourceSubscriptions"] == json!(["mail://inbox/1"])
        })
        .unwrap_or_else(|| panic!("no listen stream for the URI"));
    let update = json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
        "params": {"uri": "mail://inbox/1", "_meta": {"io.modelcontextprotocol/subscriptionId": listen["id"]}}});
    gateway.push("mail", &update.to_string());
    loop {
        let message = gateway.next().await;
        if message["method"] == "notifications/resources/updated" {
            break;
        }
        gateway.notes.push(message);
    }
    assert!(fetch_was_asked(&mut gateway).await, "tainted by the update");
}

/// Calls `web__fetch` from a 2026-07-28 host that can ask a person: the
/// result's `resultType` (`input_required` when a person is asked).
async fn modern_fetch(gateway: &mut Harness) -> String {
    let answer = gateway
        .modern_request(
            "tools/call",
            json!({"name": "web__fetch", "arguments": {}}),
            json!({"elicitation": {}}),
        )
        .await;
    answer["result"]["resultType"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_private_data_taints_a_2026_07_28_session_too() {
    for path in ["resources/read", "prompts/get"] {
        let mut gateway = Harness::start(setup(true)).await;
        let capabilities = json!({"elicitation": {}});
        let listed = gateway
            .modern_request("resources/list", json!({}), capabilities.clone())
            .await;
        assert_eq!(listed["result"]["resultType"], "complete", "{listed}");
        assert_eq!(
            modern_fetch(&mut gateway).await,
            "complete",
            "{path}: not yet"
        );
        let failed = gateway
            .modern_request(
                "resources/read",
                json!({"uri": "mail://missing/2"}),
                capabilities.clone(),
            )
            .await;
        assert!(failed.get("error").is_some(), "{failed}");
        assert_eq!(
            modern_fetch(&mut gateway).await,
            "complete",
            "an error is no data"
        );
        let params = match path {
            "resources/read" => json!({"uri": "mail://inbox/1"}),
            _ => json!({"name": "mail__summarize"}),
        };
        let read = gateway
            .modern_request(path, params, capabilities.clone())
            .await;
        assert_eq!(read["result"]["resultType"], "complete", "{path}: {read}");
        // The person is asked, through an input-required result.
        assert_eq!(modern_fetch(&mut gateway).await, "input_required", "{path}");
    }
}
