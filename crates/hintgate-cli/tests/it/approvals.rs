//! The approval queue end to end: a host that cannot ask a person, a real
//! gateway, and `hintgate approvals` run as another terminal would run it;
//! then the same across two processes sharing a PostgreSQL store.

use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};

use crate::host::{Host, fixture_server, is_error, text};
use crate::util::{code, hintgate, stderr, stdout};

/// A wrap-mode gateway whose host declares no elicitation.
fn gateway(dir: &Path, flags: &[&str]) -> Host {
    let mut host = crate::util::wrap_fixture(dir, flags, &[], &[]);
    host.initialize(json!({}));
    host
}

/// `hintgate approvals ARGS` in another process, on the same store.
pub(crate) fn approvals(dir: &Path, store: &[&str], args: &[&str]) -> Output {
    hintgate()
        .current_dir(dir)
        .env("HINTGATE_STATE_DIR", dir.join("state"))
        .arg("approvals")
        .args(store)
        .args(args)
        .output()
        .unwrap()
}

/// Sends a call without waiting for its answer.
pub(crate) fn send_call(host: &mut Host, id: &str, tool: &str, arguments: Value) {
    host.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments}}));
}

/// Waits until the queue lists `count` calls; returns them.
pub(crate) fn listed(dir: &Path, store: &[&str], count: usize) -> Vec<Value> {
    for _ in 0..1200 {
        let out = approvals(dir, store, &["list", "--json"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let entries: Vec<Value> = stdout(&out)
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        if entries.len() >= count {
            return entries;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("the queue never listed {count} calls");
}

pub(crate) fn the_call(host: &mut Host, id: &str) -> Value {
    host.wait_for(&json!(id))["result"].clone()
}

#[test]
fn a_person_at_another_terminal_approves_or_denies_a_waiting_call() {
    let dir = tempfile::tempdir().unwrap();
    let mut host = gateway(dir.path(), &["--trust", "trusted", "--ask-timeout", "600"]);

    send_call(
        &mut host,
        "c1",
        "write_note",
        json!({"text": "from the queue"}),
    );
    let waiting = listed(dir.path(), &[], 1);
    let entry = &waiting[0];
    assert_eq!(entry["tool"], "write_note");
    assert_eq!(entry["state"]["state"], "waiting");
    let prompt = entry["prompt"].as_str().unwrap();
    assert!(
        prompt.contains("write_note") && prompt.contains("from the queue"),
        "{prompt}"
    );
    assert!(
        prompt.contains("python3 ") && prompt.contains(" -> /"),
        "the resolved executable: {prompt}"
    );
    let human = approvals(dir.path(), &[], &["list"]);
    assert!(
        stdout(&human).contains("hintgate approvals approve 1"),
        "{}",
        stdout(&human)
    );

    let approved = approvals(dir.path(), &[], &["approve", "1"]);
    assert_eq!(code(&approved), 0, "{}", stderr(&approved));
    let result = the_call(&mut host, "c1");
    assert!(!is_error(&result), "{result}");
    assert_eq!(text(&result), "noted");
    assert!(
        listed_now(dir.path()).is_empty(),
        "an answered call leaves the queue"
    );

    // Answering twice is an error that says who was first.
    let again = approvals(dir.path(), &[], &["deny", "1"]);
    assert_eq!(code(&again), 1);
    assert!(
        stderr(&again).contains("answered it already"),
        "{}",
        stderr(&again)
    );

    send_call(&mut host, "c2", "write_note", json!({"text": "no"}));
    let waiting = listed(dir.path(), &[], 1);
    let id = waiting[0]["id"].to_string();
    let denied = approvals(dir.path(), &[], &["deny", &id]);
    assert_eq!(code(&denied), 0, "{}", stderr(&denied));
    let result = the_call(&mut host, "c2");
    assert!(is_error(&result));
    assert!(
        text(&result).contains("denied in the approval queue by"),
        "{}",
        text(&result)
    );

    // "This tool always" outlives the session: the next gateway runs it unasked.
    send_call(&mut host, "c3", "write_note", json!({"text": "remember"}));
    let waiting = listed(dir.path(), &[], 1);
    let id = waiting[0]["id"].to_string();
    let always = approvals(dir.path(), &[], &["approve", &id, "--remember", "always"]);
    assert_eq!(code(&always), 0, "{}", stderr(&always));
    assert!(!is_error(&the_call(&mut host, "c3")));
    host.close();
    let mut next = gateway(dir.path(), &["--trust", "trusted", "--ask-timeout", "600"]);
    let result = next.call("write_note", json!({"text": "unasked"}));
    assert!(!is_error(&result), "{result}");

    // Every call has its record, with the person who let it through.
    let log = crate::util::run(dir.path(), &["log", "--state-dir", "state", "--json"]);
    let records: Vec<Value> = stdout(&log)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let approvers: Vec<String> = records
        .iter()
        .filter_map(|record| record["approver"].as_str())
        .map(str::to_owned)
        .collect();
    assert_eq!(approvers.len(), 4, "{records:?}");
    assert!(approvers[0].contains("hintgate approvals"), "{approvers:?}");
    assert!(
        approvers[1].starts_with("person (hintgate approvals"),
        "a denial names who denied: {approvers:?}"
    );
    assert_eq!(approvers[3], "remembered-approval");
}

#[test]
fn a_credential_in_a_waiting_call_reaches_the_person_redacted_and_never_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut host = gateway(dir.path(), &["--trust", "trusted", "--ask-timeout", "600"]);
    let secret = "ghp_ZW1EBspxf6wDDsAwfqtxKrSHMetJ1afJAYFV";
    send_call(
        &mut host,
        "c1",
        "write_note",
        json!({"text": format!("token {secret}"), "title": "visible-title"}),
    );
    let waiting = listed(dir.path(), &[], 1);
    let prompt = waiting[0]["prompt"].as_str().unwrap();
    assert!(prompt.contains("visible-title"), "{prompt}");
    assert!(prompt.contains("[redacted len=46 hmac="), "{prompt}");
    assert!(!prompt.contains(secret), "{prompt}");
    let id = waiting[0]["id"].to_string();
    assert_eq!(code(&approvals(dir.path(), &[], &["approve", &id])), 0);
    assert_eq!(text(&the_call(&mut host, "c1")), "noted");
    assert!(host.close().success());
    let mut bytes = Vec::new();
    for (_, file) in crate::util::files_under(&dir.path().join("state")) {
        bytes.extend(file);
    }
    assert!(
        !bytes
            .windows(secret.len())
            .any(|window| window == secret.as_bytes()),
        "the secret reached the store"
    );
}

fn listed_now(dir: &Path) -> Vec<Value> {
    let out = approvals(dir, &[], &["list", "--json"]);
    stdout(&out)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[test]
fn an_unanswered_call_is_refused_at_its_timeout_and_cannot_be_approved_after() {
    let dir = tempfile::tempdir().unwrap();
    let mut host = gateway(dir.path(), &["--ask-timeout", "1"]);
    let result = host.call("write_note", json!({"text": "late"}));
    assert!(is_error(&result));
    assert!(
        text(&result).contains("nobody answered within 1 s"),
        "{}",
        text(&result)
    );
    let late = approvals(dir.path(), &[], &["approve", "1"]);
    assert_eq!(code(&late), 1);
    assert!(
        stderr(&late).contains("no longer waits"),
        "{}",
        stderr(&late)
    );
    let unknown = approvals(dir.path(), &[], &["approve", "99"]);
    assert_eq!(code(&unknown), 1);
    assert!(
        stderr(&unknown).contains("no call #99"),
        "{}",
        stderr(&unknown)
    );
}

#[test]
fn a_destructive_call_cannot_be_remembered_from_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    // Untrusted: every tool is effectively destructive, so only "this call".
    let mut host = gateway(dir.path(), &["--ask-timeout", "600"]);
    send_call(&mut host, "c1", "write_note", json!({"text": "x"}));
    let waiting = listed(dir.path(), &[], 1);
    assert_eq!(waiting[0]["offer"], "call");
    let wide = approvals(dir.path(), &[], &["approve", "1", "--remember", "always"]);
    assert_eq!(code(&wide), 64);
    assert!(
        stderr(&wide).contains("only be remembered up to `call`"),
        "{}",
        stderr(&wide)
    );
    assert_eq!(
        listed_now(dir.path()).len(),
        1,
        "a refused answer changes nothing"
    );
    let approved = approvals(dir.path(), &[], &["approve", "1"]);
    assert_eq!(code(&approved), 0, "{}", stderr(&approved));
    assert!(!is_error(&the_call(&mut host, "c1")));
}

#[test]
fn an_approval_on_one_gateway_releases_a_call_waiting_on_another_via_postgres() {
    let Some(url) = hintgate_store::test_util::postgres_database() else {
        return;
    };
    let store = ["--store", url.as_str()];
    // The audit key every gateway on the store shares: the first gateway
    // makes it; the others get a copy (here, the same file).
    let team = tempfile::tempdir().unwrap();
    let key = team.path().join("audit.key");
    let key_text = key.display().to_string();
    let waiting_dir = tempfile::tempdir().unwrap();
    let mut host = gateway(
        waiting_dir.path(),
        &[
            "--trust",
            "trusted",
            "--ask-timeout",
            "600",
            "--store",
            &url,
            "--audit-key",
            &key_text,
        ],
    );
    send_call(&mut host, "c1", "write_note", json!({"text": "team"}));
    // Another machine: another directory, nothing shared but the store.
    let other = tempfile::tempdir().unwrap();
    let waiting = listed(other.path(), &store, 1);
    let id = waiting[0]["id"].to_string();
    // Without the team's key, an answer cannot be sealed: whoever can
    // write the database is not thereby someone who may approve.
    let keyless = approvals(
        other.path(),
        &store,
        &["approve", &id, "--remember", "always"],
    );
    assert_eq!(code(&keyless), 1, "{}", stderr(&keyless));
    assert!(
        stderr(&keyless).contains("--audit-key"),
        "{}",
        stderr(&keyless)
    );
    let copy = other.path().join("team.key");
    std::fs::copy(&key, &copy).unwrap();
    let copy_text = copy.display().to_string();
    let approved = approvals(
        other.path(),
        &store,
        &[
            "approve",
            &id,
            "--remember",
            "always",
            "--audit-key",
            &copy_text,
        ],
    );
    assert_eq!(code(&approved), 0, "{}", stderr(&approved));
    let result = the_call(&mut host, "c1");
    assert!(!is_error(&result), "{result}");
    host.close();
    // With PostgreSQL, the state directory keeps only this gateway's head
    // of the shared log.
    let kept: Vec<String> = std::fs::read_dir(waiting_dir.path().join("state"))
        .unwrap()
        .map(|file| file.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(
        kept[0].starts_with("audit-") && kept[0].ends_with(".head"),
        "{kept:?}"
    );

    // A gateway that names no key does not start: it would chain the
    // shared log under a key no other gateway has.
    let keyless = hintgate()
        .current_dir(waiting_dir.path())
        .env("HINTGATE_STATE_DIR", waiting_dir.path().join("state"))
        .args(["run", "--store", &url, "--", "python3", &fixture_server()])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(code(&keyless), 64, "{}", stderr(&keyless));
    assert!(
        stderr(&keyless)
            .contains("a PostgreSQL store needs the audit key that every gateway on it shares"),
        "{}",
        stderr(&keyless)
    );

    // A second gateway on the same store knows the standing approval.
    let second_dir = tempfile::tempdir().unwrap();
    let mut second = gateway(
        second_dir.path(),
        &[
            "--trust",
            "trusted",
            "--ask-timeout",
            "1",
            "--store",
            &url,
            "--audit-key",
            &key_text,
        ],
    );
    assert!(!is_error(
        &second.call("write_note", json!({"text": "shared"}))
    ));
    second.close();

    // One log for both gateways, and it verifies, with the shared key and
    // the head the second gateway wrote; a gateway config that names the
    // store and the key (from the environment) finds them too.
    let config = second_dir.path().join("hintgate.toml");
    std::fs::write(
        &config,
        "[gateway]\nstore = \"${TEAM_STORE}\"\n\n[audit]\nkey_file = \"${TEAM_KEY}\"\n",
    )
    .unwrap();
    let verify = hintgate()
        .args(["log", "verify", "--config"])
        .arg(&config)
        .arg("--state-dir")
        .arg(second_dir.path().join("state"))
        .env("TEAM_STORE", &url)
        .env("TEAM_KEY", &key)
        .output()
        .unwrap();
    assert_eq!(code(&verify), 0, "{}{}", stdout(&verify), stderr(&verify));
    assert!(
        stdout(&verify).contains("its seal checked with the key, reached"),
        "{}",
        stdout(&verify)
    );
    let log = hintgate()
        .args(["log", "--store", &url, "--json"])
        .output()
        .unwrap();
    let calls = stdout(&log)
        .lines()
        .filter(|line| line.contains("\"approver\""))
        .count();
    assert_eq!(calls, 2, "{}", stdout(&log));
}

/// The state directory's database, as someone who can write it (but cannot
/// read the audit key) opens it.
fn attacker(dir: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(dir.join("state").join("state.db")).unwrap()
}

#[test]
fn issue_11_an_answer_written_into_the_database_without_the_key_refuses_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let mut host = gateway(dir.path(), &["--trust", "trusted", "--ask-timeout", "600"]);
    send_call(&mut host, "c1", "write_note", json!({"text": "forged"}));
    let id = listed(dir.path(), &[], 1)[0]["id"].as_u64().unwrap();
    attacker(dir.path())
        .execute(
            "UPDATE approvals SET state = 'answered', approve = 1, remember = 'always',
                 answered_by = 'mallory' WHERE id = ?1",
            [id],
        )
        .unwrap();
    let result = the_call(&mut host, "c1");
    assert!(
        is_error(&result),
        "a forged approval runs nothing: {result}"
    );
    host.close();
    let log = hintgate()
        .env("HINTGATE_STATE_DIR", dir.path().join("state"))
        .args(["log", "--json"])
        .output()
        .unwrap();
    let records = stdout(&log);
    assert!(
        records.contains("mallory") && records.contains("seal does not verify"),
        "the log names the forged answer and why it did not count: {records}"
    );
    assert!(
        !records.contains("\"outcome\":\"ok\""),
        "the call never ran: {records}"
    );
}

#[test]
fn issue_11_a_standing_approval_written_without_the_key_approves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--trust", "trusted", "--ask-timeout", "600"];
    // A first run pins the trusted server's tools.
    let mut host = gateway(dir.path(), &flags);
    send_call(&mut host, "c1", "write_note", json!({"text": "one"}));
    let id = listed(dir.path(), &[], 1)[0]["id"].to_string();
    assert_eq!(code(&approvals(dir.path(), &[], &["deny", &id])), 0);
    assert!(is_error(&the_call(&mut host, "c1")));
    host.close();
    // Someone who can write the database approves `write_note` always, for
    // the definition that is pinned.
    let forged = attacker(dir.path())
        .execute(
            "INSERT INTO always (server_key, tool, digest)
                 SELECT server_key, tool, digest FROM pins WHERE tool = 'write_note'",
            [],
        )
        .unwrap();
    assert_eq!(forged, 1);
    let listed_pins = hintgate()
        .env("HINTGATE_STATE_DIR", dir.path().join("state"))
        .args(["pins", "list"])
        .output()
        .unwrap();
    assert_eq!(code(&listed_pins), 0, "{}", stderr(&listed_pins));
    // The next call still waits for a person.
    let mut host = gateway(dir.path(), &flags);
    send_call(&mut host, "c2", "write_note", json!({"text": "two"}));
    let waiting = listed(dir.path(), &[], 1);
    assert_eq!(waiting[0]["tool"], "write_note");
    let id = waiting[0]["id"].to_string();
    assert_eq!(code(&approvals(dir.path(), &[], &["deny", &id])), 0);
    assert!(is_error(&the_call(&mut host, "c2")));
}
