//! Idempotency keys through the real binary, against a server that counts
//! every time a keyed write really runs (`tests/fixtures/keyed_server.py`,
//! which does not honour keys itself): a host that retries, a gateway
//! restarted between retries, a server that dies mid-call, and two
//! gateways on one PostgreSQL store must never make it run twice.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::host::{Host, is_error, text};
use crate::util::log_json;

fn keyed_server() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/keyed_server.py")
        .display()
        .to_string()
}

/// `dir/hintgate.toml`: the keyed server `pay` (trusted, its charge allowed
/// by a rule), with `server_flags`, and `extra` in `[gateway]`/`[audit]`.
fn config(dir: &Path, server_flags: &[&str], extra: &str) -> String {
    let mut args = vec![format!("{:?}", keyed_server())];
    args.extend(server_flags.iter().map(|flag| format!("{flag:?}")));
    let text = format!(
        "{extra}\n[servers.pay]\ncommand = \"python3\"\nargs = [{}]\ntrust = \"trusted\"\n\n[[rules]]\nserver = \"pay\"\ntool = \"charge\"\naction = \"allow\"\n",
        args.join(", ")
    );
    let path = dir.join("hintgate.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn runs(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn start(dir: &Path, config: &str, runs: &Path) -> Host {
    let runs = runs.display().to_string();
    let mut host = Host::start(dir, &["run", "--config", config], &[("KEYED_RUNS", &runs)]);
    host.initialize(json!({}));
    host
}

fn call_records(dir: &Path) -> Vec<Value> {
    log_json(dir, &[])
        .into_iter()
        .filter(|record| record["kind"] == "call")
        .collect()
}

#[test]
fn a_host_that_retries_with_its_key_gets_the_first_result_and_the_write_runs_once() {
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("runs");
    let config = config(dir.path(), &[], "");
    let mut host = start(dir.path(), &config, &ran);
    let arguments = json!({"amount": 5, "idempotency_key": "order-17"});
    let first = host.call("pay__charge", arguments.clone());
    assert!(!is_error(&first), "{first}");
    assert_eq!(text(&first), "charged 5 (order-17)");
    let retry = host.call("pay__charge", arguments);
    assert_eq!(retry["result"], first["result"], "the same answer");
    // The same key with other arguments is another call: refused.
    let other = host.call(
        "pay__charge",
        json!({"amount": 500, "idempotency_key": "order-17"}),
    );
    assert!(is_error(&other), "{other}");
    assert!(
        text(&other).contains("already ran, with other arguments"),
        "{other}"
    );
    assert_eq!(host.close().code(), Some(0));
    assert_eq!(runs(&ran), ["ran order-17 5"]);

    let records = call_records(dir.path());
    let outcomes: Vec<&str> = records
        .iter()
        .map(|record| record["outcome"].as_str().unwrap_or("(none)"))
        .collect();
    assert_eq!(outcomes, ["ok", "replayed", "denied"], "{records:?}");
    assert_eq!(records[2]["reasons"], json!(["idempotency-conflict"]));
    assert_eq!(
        records[1]["idempotency"],
        json!({"filled": false, "key": "order-17"})
    );
}

#[test]
fn a_key_left_out_is_filled_in_shown_and_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("runs");
    let config = config(dir.path(), &[], "");
    let mut host = start(dir.path(), &config, &ran);
    let answer = host.call("pay__charge", json!({"amount": 3}));
    assert!(!is_error(&answer), "{answer}");
    assert_eq!(host.close().code(), Some(0));
    let ran = runs(&ran);
    assert_eq!(ran.len(), 1);
    let key = ran[0].split(' ').nth(1).unwrap().to_owned();
    assert_eq!(key.len(), 36, "a UUID: {key}");
    assert_eq!(key.as_bytes()[14], b'4', "version 4: {key}");
    let record = &call_records(dir.path())[0];
    assert_eq!(record["idempotency"], json!({"filled": true, "key": key}));
}

#[test]
fn a_gateway_restarted_between_retries_answers_from_its_store() {
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("runs");
    let config = config(dir.path(), &[], "");
    let arguments = json!({"amount": 9, "idempotency_key": "invoice-2026-12"});
    let mut host = start(dir.path(), &config, &ran);
    let first = host.call("pay__charge", arguments.clone());
    assert!(!is_error(&first), "{first}");
    assert_eq!(host.close().code(), Some(0));

    let mut host = start(dir.path(), &config, &ran);
    let retry = host.call("pay__charge", arguments);
    assert_eq!(retry["result"], first["result"]);
    assert_eq!(host.close().code(), Some(0));
    assert_eq!(runs(&ran), ["ran invoice-2026-12 9"]);
}

#[test]
fn a_server_that_dies_mid_call_is_called_again_once_with_the_same_key() {
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("runs");
    let marker = dir.path().join("crashed").display().to_string();
    let config = config(dir.path(), &["--crash-first", &marker], "");
    let mut host = start(dir.path(), &config, &ran);
    let answer = host.call("pay__charge", json!({"amount": 4}));
    assert!(!is_error(&answer), "{answer}\n{}", host.log());
    assert_eq!(host.close().code(), Some(0));
    let ran = runs(&ran);
    assert_eq!(ran.len(), 1, "{ran:?}");
    let records = call_records(dir.path());
    assert_eq!(records.len(), 2, "one record per attempt: {records:?}");
    assert_eq!(records[0]["outcome"], "failed, retried");
    assert_eq!(records[1]["outcome"], "ok");
    assert_eq!(
        records[0]["idempotency"]["key"], records[1]["idempotency"]["key"],
        "the retry carries the key the first attempt was sent with"
    );
    assert!(ran[0].contains(records[0]["idempotency"]["key"].as_str().unwrap()));
}

#[test]
fn two_gateways_on_one_postgres_store_never_run_one_key_twice() {
    let Some(url) = hintgate_store::test_util::postgres_database() else {
        return;
    };
    let team = tempfile::tempdir().unwrap();
    let key = team.path().join("audit.key").display().to_string();
    let ran = team.path().join("runs");
    let extra = format!("[gateway]\nstore = {url:?}\n\n[audit]\nkey_file = {key:?}\n");
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let config_one = config(one.path(), &["--slow", "0.5"], &extra);
    let config_two = config(two.path(), &["--slow", "0.5"], &extra);
    let mut first = start(one.path(), &config_one, &ran);
    let mut second = start(two.path(), &config_two, &ran);

    // At once, from both: one is sent; the other finds it running.
    let arguments = json!({"amount": 12, "idempotency_key": "team-1"});
    let call = |id: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "pay__charge", "arguments": arguments}})
    };
    first.send(&call("a"));
    second.send(&call("b"));
    let (a, b) = (
        first.wait_for(&json!("a"))["result"].clone(),
        second.wait_for(&json!("b"))["result"].clone(),
    );
    // The second finds the first running (the server takes half a second),
    // or, on a machine slow enough, already done: refused, or answered with
    // the first one's result. Never run twice.
    match (is_error(&a), is_error(&b)) {
        (false, false) => assert_eq!(a, b),
        (true, false) => assert!(text(&a).contains("has not ended"), "{a}"),
        (false, true) => assert!(text(&b).contains("has not ended"), "{b}"),
        (true, true) => panic!("both refused:\n{a}\n{b}"),
    }

    // Later, either gateway answers from the shared record.
    let later = second.call("pay__charge", arguments.clone());
    assert!(!is_error(&later), "{later}");
    assert_eq!(text(&later), "charged 12 (team-1)");
    assert_eq!(first.close().code(), Some(0));
    assert_eq!(second.close().code(), Some(0));
    assert_eq!(runs(&ran), ["ran team-1 12"]);
}
