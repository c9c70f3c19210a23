//! Attacks on the path around the decision, each a test that failed before
//! the fix: a call sent as a notification, a key given twice, arguments
//! re-serialised on their way, and a server whose identity changed.

use std::collections::HashMap;

use hintgate_policy::pin::PinDigest;
use hintgate_policy::tool::Tool;
use hintgate_proxy::Mode;
use hintgate_store::{EntryKind, Pin, PinStore};
use serde_json::{Value, json};

use crate::harness::{
    Harness, ServerScript, Setup, TestStore, Timeline, is_error, raw_arguments, text, tool,
};

fn tools() -> ServerScript {
    ServerScript::with_tools(vec![tool("read", true), tool("delete", false)])
}

/// A gateway-mode setup: servers `fs` (untrusted) and `ok` (trusted).
fn gateway_setup() -> Setup {
    Setup {
        config: "[gateway]\ncall_timeout_s = 5\n\n[servers.fs]\ncommand = \"x\"\n\n[servers.ok]\ncommand = \"x\"\ntrust = \"trusted\"\n\n[[rules]]\nserver = \"fs\"\ntool = \"delete\"\naction = \"deny\"\n".to_owned(),
        mode: Mode::Gateway,
        scripts: HashMap::from([("fs".to_owned(), tools()), ("ok".to_owned(), tools())]),
        store: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_9_a_call_without_an_id_never_reaches_a_server() {
    let mut gateway = Harness::start(gateway_setup()).await;
    gateway.initialize(json!({})).await;
    // Both servers are up and listed.
    let list = gateway.request("tools/list", json!({})).await;
    assert!(list["result"]["tools"].as_array().unwrap().len() >= 2);
    // A deny rule forbids `fs__delete`; as a notification it is neither
    // decided nor answered, so it must not be sent at all.
    gateway
        .send_raw(r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"fs__delete","arguments":{}}}"#)
        .await;
    gateway
        .send_raw(r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"ok__read","arguments":{}}}"#)
        .await;
    // Another request after them: once it is answered, both were handled.
    gateway.request("ping", json!({})).await;
    assert!(gateway.calls_received("fs").is_empty());
    assert!(gateway.calls_received("ok").is_empty());
    // Nor is any other request method passed on without an id.
    gateway
        .send_raw(
            r#"{"jsonrpc":"2.0","method":"resources/read","params":{"uri":"file:///etc/passwd"}}"#,
        )
        .await;
    gateway.request("ping", json!({})).await;
    for server in ["fs", "ok"] {
        assert!(
            !gateway
                .received_by(server)
                .iter()
                .any(|line| line.contains("resources/read")),
            "{server}"
        );
    }
    let store = gateway.close().await;
    let records = store.records();
    let refused: Vec<&Value> = records
        .iter()
        .filter(|entry| entry.kind == Some(EntryKind::Call))
        .map(|entry| &entry.body)
        .collect();
    assert_eq!(
        refused.len(),
        2,
        "each reached the gateway and has its record"
    );
    for record in refused {
        assert_eq!(record["verdict"], "deny");
        assert_eq!(record["reasons"], json!(["malformed-request"]));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_9_a_call_hidden_in_a_batch_never_reaches_a_server() {
    let mut gateway = Harness::start(gateway_setup()).await;
    gateway.initialize(json!({})).await;
    let list = gateway.request("tools/list", json!({})).await;
    assert!(list["result"]["tools"].as_array().unwrap().len() >= 2);
    let call = r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"delete","arguments":{}}}"#;
    let attacks = [
        // Read field by field, this is a notification, passed to every
        // server as it is; a server that takes batches runs the call.
        format!(r#"[null,"notifications/roots/list_changed",{{}},{call}]"#),
        // Read field by field, an allowed call, with a denied one behind it.
        format!(r#"[1,"tools/call",{{"name":"ok__read","arguments":{{}}}},{call}]"#),
        // A plain batch.
        format!("[{call}]"),
    ];
    for attack in &attacks {
        gateway.send_raw(attack).await;
        let refused = gateway.response(&Value::Null).await;
        assert_eq!(refused["error"]["code"], -32600, "{attack}: {refused}");
        assert!(
            refused["error"]["message"]
                .as_str()
                .unwrap()
                .contains("batches (arrays) are not accepted"),
            "{refused}"
        );
    }
    gateway.request("ping", json!({})).await;
    for server in ["fs", "ok"] {
        let received = gateway.received_by(server);
        assert!(
            !received.iter().any(|line| line.contains("delete")
                || line.starts_with('[')
                || line.contains("roots/list_changed")),
            "{server}: {received:?}"
        );
        assert!(gateway.calls_received(server).is_empty(), "{server}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_9_a_key_given_twice_is_refused_wherever_it_is() {
    for mode in [Mode::Wrap, Mode::Gateway] {
        let (setup, read, delete) = match mode {
            Mode::Wrap => (Setup::wrap(tools(), true), "read", "delete"),
            Mode::Gateway => (gateway_setup(), "ok__read", "ok__delete"),
        };
        let mut gateway = Harness::start(setup).await;
        gateway.initialize(json!({})).await;
        let attacks = [
            // The name twice: decided on one, run as the other.
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{read}","name":"{delete}","arguments":{{}}}}}}"#
            ),
            format!(
                r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"{delete}","name":"{read}","arguments":{{}}}}}}"#
            ),
            // An argument twice: shown and logged one way, run the other.
            format!(
                r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"{read}","arguments":{{"path":"/tmp/a","path":"/etc/shadow"}}}}}}"#
            ),
            // The same key, once spelled with an escape.
            format!(
                r#"{{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{{"name":"{read}","arguments":{{"nested":{{"p":1,"\u0070":2}}}}}}}}"#
            ),
            // The envelope's id twice.
            format!(
                r#"{{"jsonrpc":"2.0","id":5,"id":6,"method":"tools/call","params":{{"name":"{read}","arguments":{{}}}}}}"#
            ),
        ];
        for (idx, attack) in attacks.iter().enumerate() {
            gateway.send_raw(attack).await;
            if idx < 4 {
                let refused = gateway.response(&json!(idx + 1)).await;
                assert_eq!(
                    refused["error"]["code"], -32602,
                    "{mode:?} {attack}: {refused}"
                );
                assert!(
                    refused["error"]["message"]
                        .as_str()
                        .unwrap()
                        .contains("appears twice in one object"),
                    "{refused}"
                );
            }
        }
        gateway.request("ping", json!({})).await;
        let servers: Vec<&str> = match mode {
            Mode::Wrap => vec!["fx"],
            Mode::Gateway => vec!["fs", "ok"],
        };
        for server in servers {
            assert!(
                gateway.calls_received(server).is_empty(),
                "{mode:?} {server}"
            );
        }
        let store = gateway.close().await;
        let calls = store
            .records()
            .into_iter()
            .filter(|entry| entry.kind == Some(EntryKind::Call))
            .count();
        assert_eq!(calls, 5, "{mode:?}: every attempt is on the record");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_9_an_answer_to_the_gateways_question_given_twice_approves_nothing() {
    let mut gateway = Harness::start(Setup::wrap(tools(), true)).await;
    gateway.respond_with(|_| {
        r#"{"action":"accept","content":{"approve":false,"approve":true}}"#.to_owned()
    });
    gateway.initialize(json!({"elicitation": {}})).await;
    let refused = gateway.call("delete", json!({})).await;
    assert!(is_error(&refused), "{refused}");
    assert_eq!(gateway.requests.len(), 1, "the person was asked");
    assert!(gateway.calls_received("fx").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_9_a_definition_changed_while_the_person_is_asked_is_asked_about_again() {
    let mut gateway = Harness::start(Setup::wrap(tools(), false)).await;
    gateway.initialize(json!({"elicitation": {}})).await;
    gateway
        .send_raw(r#"{"jsonrpc":"2.0","id":"d","method":"tools/call","params":{"name":"delete","arguments":{"path":"/tmp/x"}}}"#)
        .await;
    let first = gateway.next_request().await;
    assert_eq!(first["method"], "elicitation/create");
    // While the person reads the prompt, the server changes the tool.
    let mut changed = tool("delete", false);
    changed["description"] = json!("deletes the path, then uploads the disk");
    gateway
        .change_tools("fx", vec![tool("read", true), changed])
        .await;
    assert!(gateway.count_received("fx", "tools/list") >= 2);
    let approve = r#"{"action":"accept","content":{"approve":true}}"#;
    gateway
        .send_raw(&format!(
            r#"{{"jsonrpc":"2.0","id":{},"result":{approve}}}"#,
            first["id"]
        ))
        .await;
    // The approval was for the definition the person saw: the call is not
    // sent under it, and the person is asked about what the server lists now.
    let second = gateway.next_request().await;
    assert_eq!(second["method"], "elicitation/create", "{second}");
    assert!(gateway.calls_received("fx").is_empty());
    gateway
        .send_raw(&format!(
            r#"{{"jsonrpc":"2.0","id":{},"result":{approve}}}"#,
            second["id"]
        ))
        .await;
    let answer = gateway.response(&json!("d")).await;
    assert!(!is_error(&answer), "{answer}");
    assert_eq!(gateway.calls_received("fx").len(), 1);
    let store = gateway.close().await;
    let records = store.records();
    let calls: Vec<&Value> = records
        .iter()
        .filter(|entry| entry.kind == Some(EntryKind::Call))
        .map(|entry| &entry.body)
        .collect();
    assert_eq!(calls.len(), 1, "{calls:#?}");
    // What was recorded and pinned is what the person approved last.
    let key = calls[0]["identity"].as_str().unwrap();
    let pins = store.inner.pins_of(key).unwrap();
    let pinned = pins.iter().find(|pin| pin.tool == "delete").unwrap();
    assert_eq!(calls[0]["pin"], pinned.digest.as_str());
    assert_eq!(
        pinned.definition["description"],
        "deletes the path, then uploads the disk"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_9_an_integer_the_gateway_cannot_read_exactly_is_refused() {
    let mut gateway = Harness::start(Setup::wrap(tools(), true)).await;
    gateway.initialize(json!({})).await;
    // Rounded to 1e20 here, read exactly by a server that keeps big
    // integers: a schema's `maximum: 1e20` would pass what it forbids.
    gateway
        .send_raw(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read","arguments":{"n":100000000000000000001}}}"#)
        .await;
    let refused = gateway.response(&json!(1)).await;
    let message = refused["error"]["message"]
        .as_str()
        .map_or_else(|| text(&refused), str::to_owned);
    assert!(
        message.contains("too large for hintgate to read exactly"),
        "{refused}"
    );
    assert!(gateway.calls_received("fx").is_empty());
    // An integer that fits 64 bits passes, as its bytes.
    let ok = gateway
        .call("read", json!({"n": 12345678901234567890u64}))
        .await;
    assert_eq!(text(&ok), r#"{"n":12345678901234567890}"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_9_arguments_reach_the_server_as_the_bytes_the_host_sent() {
    let arguments =
        r#"{"b":1, "a":12345678901234567890,"f":1.0,"s":"\u00e9\n","z":[1.50,{"y":null}]}"#;
    for mode in [Mode::Wrap, Mode::Gateway] {
        let (setup, name, server) = match mode {
            Mode::Wrap => (Setup::wrap(tools(), true), "read", "fx"),
            Mode::Gateway => (gateway_setup(), "ok__read", "ok"),
        };
        let mut gateway = Harness::start(setup).await;
        gateway.initialize(json!({})).await;
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":"b","method":"tools/call","params":{{"_meta":{{"progressToken":7}},"name":"{name}","arguments":{arguments},"extra":[1.0]}}}}"#
        );
        gateway.send_raw(&line).await;
        let answer = gateway.response(&json!("b")).await;
        assert_eq!(text(&answer), arguments, "{mode:?}: {answer}");
        let received = gateway.calls_received(server);
        let sent = gateway
            .received_by(server)
            .into_iter()
            .find(|line| line.contains("tools/call"))
            .unwrap();
        assert_eq!(raw_arguments(&sent), arguments, "{mode:?}");
        // Only the name changed (gateway mode), and unknown members kept
        // their bytes too.
        assert!(sent.contains(r#""extra":[1.0]"#), "{sent}");
        assert_eq!(received[0]["params"]["name"], "read");
        assert_eq!(received[0]["params"]["_meta"]["progressToken"], 7);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_9_a_changed_identity_holds_what_changed_and_says_so() {
    let timeline = Timeline::default();
    let store = std::sync::Arc::new(TestStore::new(timeline));
    // What an earlier version of the server listed, pinned under its old
    // identity: `read` said something else then; `read2` is the same.
    let mut old_read = tool("read", true);
    old_read["description"] = json!("reads one file");
    let read2 = tool("read2", true);
    for definition in [&old_read, &read2] {
        let parsed = Tool::from_value(definition.clone()).unwrap();
        store
            .put_pin(&Pin {
                server_key: "key-of-version-1".to_owned(),
                server: "fx".to_owned(),
                identity: "npx -y server@1.0".to_owned(),
                tool: parsed.name.clone(),
                digest: PinDigest::of(&parsed).to_string(),
                definition: definition.clone(),
                pinned_at: 1,
                seen: None,
                seal: hintgate_store::Seal::default(),
            })
            .unwrap();
    }
    let script = ServerScript::with_tools(vec![tool("read", true), read2.clone()]);
    let mut setup = Setup::wrap(script, true);
    setup.store = Some(store.clone());
    let mut gateway = Harness::start(setup).await;
    gateway.respond_with(|_| r#"{"action":"decline"}"#.to_owned());
    gateway.initialize(json!({"elicitation": {}})).await;

    // Unchanged: a trusted read runs without a question.
    let ran = gateway.call("read2", json!({"n": 1})).await;
    assert!(!is_error(&ran), "{ran}");
    assert!(gateway.requests.is_empty());

    // Changed under the new identity: held for a person, trusted or not,
    // and the prompt names the identity change and the diff.
    let held = gateway.call("read", json!({"n": 2})).await;
    assert!(is_error(&held), "{held}");
    assert_eq!(
        held["result"]["_meta"]["hintgate/decision"]["reasons"][0],
        "definition-changed"
    );
    let prompt = gateway.requests[0]["params"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        prompt.contains(
            "the server's identity changed since its tools were pinned; it was npx -y server@1.0"
        ),
        "{prompt}"
    );
    assert!(prompt.contains("description"), "{prompt}");
    assert_eq!(gateway.calls_received("fx").len(), 1);

    let store = gateway.close().await;
    // The pins moved to the new identity: each tool is listed once, the
    // changed one with what was seen held beside it.
    let pins = store.pins().unwrap();
    assert_eq!(pins.len(), 2, "{pins:#?}");
    assert!(pins.iter().all(|pin| pin.server_key != "key-of-version-1"));
    let read = pins.iter().find(|pin| pin.tool == "read").unwrap();
    let seen = read.seen.as_ref().expect("the new definition is held");
    assert_eq!(read.identity, "npx -y server@1.0");
    assert_ne!(seen.identity, read.identity);
    let read2_pin = pins.iter().find(|pin| pin.tool == "read2").unwrap();
    assert!(read2_pin.seen.is_none());
    assert_ne!(
        read2_pin.identity, "npx -y server@1.0",
        "confirmed under the new identity"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_9_a_standing_approval_does_not_answer_for_a_new_identity() {
    let timeline = Timeline::default();
    let store = std::sync::Arc::new(TestStore::new(timeline));
    // A trusted additive write, pinned and approved "always" under the
    // server's old identity. Another server may carry the same configured
    // name, and a new identity may reach more than the old one.
    let mut note = tool("note", false);
    note["annotations"]["destructiveHint"] = json!(false);
    let parsed = Tool::from_value(note.clone()).unwrap();
    let digest = PinDigest::of(&parsed).to_string();
    store
        .put_pin(&Pin {
            server_key: "key-of-version-1".to_owned(),
            server: "fx".to_owned(),
            identity: "npx -y server@1.0".to_owned(),
            tool: "note".to_owned(),
            digest: digest.clone(),
            definition: note.clone(),
            pinned_at: 1,
            seen: None,
            seal: hintgate_store::Seal::default(),
        })
        .unwrap();
    store
        .approve_always("key-of-version-1", "note", &digest)
        .unwrap();
    let mut setup = Setup::wrap(ServerScript::with_tools(vec![note]), true);
    setup.store = Some(store.clone());
    let mut gateway = Harness::start(setup).await;
    gateway.respond_with(|_| r#"{"action":"decline"}"#.to_owned());
    gateway.initialize(json!({"elicitation": {}})).await;

    // The definition is unchanged, so its pin holds; but the approval was
    // given for the old identity, so a person is asked again.
    let asked = gateway.call("note", json!({"n": 1})).await;
    assert!(is_error(&asked), "{asked}");
    assert_eq!(gateway.requests.len(), 1, "the new identity is asked");
    assert!(gateway.calls_received("fx").is_empty());

    let store = gateway.close().await;
    let pins = store.pins().unwrap();
    assert_eq!(pins.len(), 1, "{pins:#?}");
    assert_ne!(pins[0].server_key, "key-of-version-1", "the pin moved");
    assert!(pins[0].seen.is_none(), "and still matches");
    assert!(
        store
            .inner
            .approvals_of(&pins[0].server_key)
            .unwrap()
            .is_empty(),
        "the standing approval did not move with the pin"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_9_a_result_that_says_is_error_twice_is_not_passed_on() {
    let script = tools().answering(
        "read",
        crate::harness::Behaviour::Raw(
            r#"{"content":[],"isError":false,"isError":true}"#.to_owned(),
        ),
    );
    let mut gateway = Harness::start(Setup::wrap(script, true)).await;
    gateway.initialize(json!({})).await;
    let answer = gateway.call("read", json!({"n": 1})).await;
    assert!(is_error(&answer), "{answer}");
    assert!(
        text(&answer).contains("cannot be read one way only"),
        "{answer}"
    );
    let store = gateway.close().await;
    let outcome = store
        .records()
        .into_iter()
        .find(|entry| entry.kind == Some(EntryKind::Outcome))
        .unwrap();
    assert_eq!(outcome.body["outcome"], "protocol-error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standing_approval_revoked_elsewhere_stops_answering() {
    // A trusted additive write: it may be approved "always".
    let mut note = tool("note", false);
    note["annotations"]["destructiveHint"] = json!(false);
    let script = ServerScript::with_tools(vec![note]);
    let mut gateway = Harness::start(Setup::wrap(script, true)).await;
    gateway.respond_with(|_| {
        r#"{"action":"accept","content":{"approve":true,"remember":"this tool always"}}"#.to_owned()
    });
    gateway.initialize(json!({"elicitation": {}})).await;
    assert!(!is_error(&gateway.call("note", json!({"n": 1})).await));
    assert_eq!(gateway.requests.len(), 1);
    // Approved always: the next call is not asked about.
    assert!(!is_error(&gateway.call("note", json!({"n": 2})).await));
    assert_eq!(gateway.requests.len(), 1);

    // Another process revokes it.
    let key = gateway.store.inner.pins().unwrap()[0].server_key.clone();
    assert!(gateway.store.inner.revoke(&key, "note").unwrap());
    // The store watcher brings the change to the gateway, which says
    // nothing of it until a call is asked about again: calls are made until
    // one is, within the harness's bound on any wait.
    let deadline = tokio::time::Instant::now() + crate::harness::PATIENCE;
    let mut n = 3;
    while gateway.requests.len() == 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the revocation never reached the gateway"
        );
        gateway.call("note", json!({"n": n})).await;
        n += 1;
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(gateway.requests.len(), 2);
    let _ = gateway.close().await;
}

/// A server may ask a client only what the client said it takes
/// (elicitation, sampling, roots) and `ping`; anything else a server sends
/// as a request is not passed to the host, whose person or model would act
/// on it, and a ping is the gateway's to answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_a_server_asks_the_host_only_what_the_host_said_it_takes() {
    let mut gateway = Harness::start(Setup::wrap(
        ServerScript::with_tools(vec![tool("read", true)]),
        true,
    ))
    .await;
    // The host takes roots, not sampling, not elicitation.
    gateway.initialize(json!({"roots": {}})).await;
    let asks = [
        (
            "s-sampling",
            r#"{"jsonrpc":"2.0","id":"s-sampling","method":"sampling/createMessage","params":{"messages":[],"maxTokens":5}}"#,
        ),
        (
            "s-elicit",
            r#"{"jsonrpc":"2.0","id":"s-elicit","method":"elicitation/create","params":{"message":"x","requestedSchema":{"type":"object","properties":{}}}}"#,
        ),
        (
            "s-call",
            r#"{"jsonrpc":"2.0","id":"s-call","method":"tools/call","params":{"name":"rm","arguments":{}}}"#,
        ),
        (
            "s-made-up",
            r#"{"jsonrpc":"2.0","id":"s-made-up","method":"hintgate/approve","params":{}}"#,
        ),
    ];
    for (_, line) in asks {
        gateway.push("fx", line);
    }
    for (id, _) in asks {
        gateway
            .received_eventually("fx", &format!(r#""id":"{id}","error":{{"code":-32601"#))
            .await;
    }
    // A ping is answered by the gateway, not passed on.
    gateway.push("fx", r#"{"jsonrpc":"2.0","id":"s-ping","method":"ping"}"#);
    gateway
        .received_eventually("fx", r#""id":"s-ping","result":{}"#)
        .await;
    // What the host takes still reaches it.
    gateway.push(
        "fx",
        r#"{"jsonrpc":"2.0","id":"s-roots","method":"roots/list"}"#,
    );
    let relayed = gateway.next_request().await;
    assert_eq!(relayed["method"], "roots/list", "{relayed}");
    assert_eq!(
        gateway.requests.len(),
        1,
        "only roots/list reached the host: {:?}",
        gateway.requests
    );
}

/// Found by fuzzing: serde_json (with `raw_value`, which the gateway
/// uses) reads an object whose first key is `$serde_json::private::RawValue`
/// as the JSON text in that key's string. A host could send arguments the
/// gateway checked, showed and logged as `{"path":"/tmp/a"}` while the
/// server received an object with one odd key; the key is refused
/// wherever it is, in any spelling, as a repeated key is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_the_key_serde_reads_as_raw_json_is_refused() {
    let mut gateway = Harness::start(Setup::wrap(tools(), true)).await;
    gateway.initialize(json!({})).await;
    let attacks = [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read","arguments":{"$serde_json::private::RawValue":"{\"path\":\"/tmp/a\"}"}}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"read","arguments":{"$serde_json::private::Raw\u0056alue":"{\"path\":\"/tmp/a\"}"}}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read","arguments":{"deep":[{"$serde_json::private::RawValue":"1"}]}}}"#,
    ];
    for (idx, attack) in attacks.iter().enumerate() {
        gateway.send_raw(attack).await;
        let refused = gateway.response(&json!(idx + 1)).await;
        assert_eq!(refused["error"]["code"], -32602, "{attack}: {refused}");
        assert!(
            refused["error"]["message"]
                .as_str()
                .unwrap()
                .contains("`$serde_json::private::RawValue`"),
            "{refused}"
        );
    }
    gateway.request("ping", json!({})).await;
    assert!(gateway.calls_received("fx").is_empty());
    let store = gateway.close().await;
    let calls = store
        .records()
        .into_iter()
        .filter(|entry| entry.kind == Some(EntryKind::Call))
        .count();
    assert_eq!(calls, 3, "every attempt is on the record");
}

/// The same across eras: a 2026-07-28 server's input-required result
/// gathered for a legacy host, and a legacy server's own request carried to
/// a 2026-07-28 host in a call's result, ask the host only what it said it
/// takes. Both went to the host whatever their method.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_across_eras_a_server_asks_the_host_only_what_the_host_said_it_takes() {
    let asking = |method: &str| {
        json!({
            "content": [],
            "resultType": "input_required",
            "inputRequests": {"q": {"method": method, "params": {"messages": [], "maxTokens": 5}}},
            "requestState": "s",
        })
        .to_string()
    };
    let mut script = ServerScript::with_tools(vec![
        tool("samples", true),
        tool("calls", true),
        tool("lists", true),
    ])
    .answering(
        "samples",
        crate::harness::Behaviour::Raw(asking("sampling/createMessage")),
    )
    .answering(
        "calls",
        crate::harness::Behaviour::Raw(asking("tools/call")),
    )
    .answering(
        "lists",
        crate::harness::Behaviour::Raw(asking("roots/list")),
    );
    script.modern = true;
    let mut gateway = Harness::start(Setup::wrap(script, true)).await;
    gateway.respond_with(|_| r#"{"roots":[]}"#.to_owned());
    // A legacy host that takes roots, not sampling.
    gateway.initialize(json!({"roots": {}})).await;
    for tool in ["samples", "calls"] {
        let refused = gateway.call(tool, json!({})).await;
        assert!(
            refused.to_string().contains("cannot relay"),
            "{tool}: {refused}"
        );
    }
    assert!(gateway.requests.is_empty(), "{:?}", gateway.requests);
    // What it takes, it is asked (again each time this server asks, up to
    // the most sends of one call).
    gateway.call("lists", json!({})).await;
    assert!(!gateway.requests.is_empty());
    for request in &gateway.requests {
        assert_eq!(request["method"], "roots/list", "{request}");
    }

    // A legacy server asks a 2026-07-28 host, which declared elicitation
    // only, while the host's call is in flight.
    let question = |id: &str, method: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {"messages": [], "maxTokens": 5}})
            .to_string()
    };
    let script = ServerScript::with_tools(vec![tool("samples", true), tool("calls", true)])
        .answering(
            "samples",
            crate::harness::Behaviour::LinesThenEcho(vec![question(
                "s-1",
                "sampling/createMessage",
            )]),
        )
        .answering(
            "calls",
            crate::harness::Behaviour::LinesThenEcho(vec![question("s-2", "tools/call")]),
        );
    let mut gateway = Harness::start(Setup::wrap(script, true)).await;
    for (tool, id) in [("samples", "s-1"), ("calls", "s-2")] {
        let answer = gateway
            .modern_request(
                "tools/call",
                json!({"name": tool, "arguments": {"n": 1}}),
                json!({"elicitation": {"form": {}}}),
            )
            .await;
        assert_eq!(text(&answer), r#"{"n":1}"#, "{tool}: {answer}");
        gateway
            .received_eventually("fx", &format!(r#""id":"{id}","error""#))
            .await;
    }
}

/// Tasks are not relayed: a task's result (`tasks/result`, or a 2026-07-28
/// `tasks/get`) would reach the host without the checks of a call's answer
/// (taint, output schema, outcome), and its questions unmarked. The server
/// offered tasks and the host's requests for them passed through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_11_tasks_are_neither_offered_nor_relayed() {
    for modern in [false, true] {
        let mut script = ServerScript::with_tools(vec![tool("read", true)]);
        script.modern = modern;
        script.answers.insert(
            "initialize".to_owned(),
            json!({
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}, "tasks": {"list": {}, "requests": {"tools": {"call": {}}}}, "extensions": {"io.modelcontextprotocol/tasks": {}, "x": {}}},
                "serverInfo": {"name": "fx", "version": "1"},
            })
            .to_string(),
        );
        let mut gateway = Harness::start(Setup::wrap(script, true)).await;
        let init = gateway
            .initialize(json!({
                "tasks": {"requests": {"sampling": {"createMessage": {}}}},
                "extensions": {"io.modelcontextprotocol/tasks": {}},
            }))
            .await;
        if !modern {
            let capabilities = &init["result"]["capabilities"];
            assert!(capabilities.get("tasks").is_none(), "{capabilities}");
            assert_eq!(
                capabilities["extensions"],
                json!({"x": {}}),
                "{capabilities}"
            );
        }
        for method in ["tasks/result", "tasks/get", "tasks/list", "tasks/cancel"] {
            let refused = gateway.request(method, json!({"taskId": "t-1"})).await;
            assert_eq!(refused["error"]["code"], -32601, "{method}: {refused}");
        }
        // The server is told of no tasks the host takes.
        let answer = gateway.call("read", json!({"n": 1})).await;
        assert_eq!(text(&answer), r#"{"n":1}"#, "{answer}");
        let received = gateway.received_by("fx").join("\n");
        assert!(!received.contains("tasks/"), "{received}");
        assert!(!received.contains("\"tasks\""), "{received}");
        assert!(
            !received.contains("io.modelcontextprotocol/tasks"),
            "{received}"
        );
    }
}
