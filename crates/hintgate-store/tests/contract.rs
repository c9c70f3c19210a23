//! One contract suite, run against every store.
#![expect(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "test code: a failed unwrap or index is a failed test"
)]

use hintgate_store::{MemoryStore, Pin, PinStore, Seen, SqliteStore, StoreError};
use serde_json::json;

fn pin(server_key: &str, tool: &str, digest: &str) -> Pin {
    Pin {
        server_key: server_key.to_owned(),
        server: "fs".to_owned(),
        tool: tool.to_owned(),
        digest: digest.to_owned(),
        definition: json!({"name": tool, "annotations": {"readOnlyHint": true}}),
        pinned_at: 1_795_000_000,
        seen: None,
    }
}

fn contract(store: &dyn PinStore) {
    assert_eq!(store.pin("k", "read").unwrap(), None);
    store.put_pin(&pin("k", "read", "sha256:a")).unwrap();
    store.put_pin(&pin("other", "read", "sha256:z")).unwrap();
    assert_eq!(store.pin("k", "read").unwrap().unwrap().digest, "sha256:a");

    // A definition equal to the pin is not "seen"; a different one is held.
    store
        .see(
            "k",
            "read",
            &Seen {
                digest: "sha256:a".into(),
                definition: json!({}),
            },
        )
        .unwrap();
    assert_eq!(store.pin("k", "read").unwrap().unwrap().seen, None);
    let changed = Seen {
        digest: "sha256:b".into(),
        definition: json!({"name": "read", "annotations": {"readOnlyHint": false}}),
    };
    store.see("k", "read", &changed).unwrap();
    assert_eq!(
        store.pin("k", "read").unwrap().unwrap().seen,
        Some(changed.clone())
    );
    // Seeing a tool with no pin records nothing.
    store.see("k", "new", &changed).unwrap();
    assert_eq!(store.pin("k", "new").unwrap(), None);

    // Approving the seen definition: a new pin, and nothing held.
    let mut approved = pin("k", "read", "sha256:b");
    approved.definition = changed.definition.clone();
    store.put_pin(&approved).unwrap();
    let now = store.pin("k", "read").unwrap().unwrap();
    assert_eq!((now.digest.as_str(), now.seen), ("sha256:b", None));

    // Standing approvals hold for one digest only.
    store.approve_always("k", "read", "sha256:b").unwrap();
    assert!(store.approved_always("k", "read", "sha256:b").unwrap());
    assert!(!store.approved_always("k", "read", "sha256:c").unwrap());
    assert!(!store.approved_always("other", "read", "sha256:b").unwrap());

    // Several at once: all of them.
    store
        .put_pins(&[pin("batch", "a", "sha256:1"), pin("batch", "b", "sha256:2")])
        .unwrap();
    assert_eq!(store.pin("batch", "b").unwrap().unwrap().digest, "sha256:2");
    assert!(store.revoke("batch", "a").unwrap() && store.revoke("batch", "b").unwrap());

    // Listing is ordered by server name and tool.
    let pins = store.pins().unwrap();
    assert_eq!(pins.len(), 2);

    // Revoking removes the pin and the standing approval.
    assert!(store.revoke("k", "read").unwrap());
    assert!(!store.revoke("k", "read").unwrap());
    assert_eq!(store.pin("k", "read").unwrap(), None);
    assert!(!store.approved_always("k", "read", "sha256:b").unwrap());
    assert_eq!(store.pins().unwrap().len(), 1);
}

#[test]
fn the_memory_store_keeps_the_contract() {
    contract(&MemoryStore::default());
}

#[test]
fn the_sqlite_store_keeps_the_contract_and_its_data_across_opens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = SqliteStore::open(&path).unwrap();
    contract(&store);
    let salt = store.salt().to_vec();
    drop(store);
    let reopened = SqliteStore::open(&path).unwrap();
    assert_eq!(
        reopened.pin("other", "read").unwrap().unwrap().digest,
        "sha256:z",
        "pins outlive the process"
    );
    assert_eq!(
        reopened.salt(),
        salt.as_slice(),
        "the salt is kept, so keys stay stable"
    );
}

#[test]
fn a_newer_schema_is_refused_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    drop(SqliteStore::open(&path).unwrap());
    let connection = rusqlite_connection(&path);
    connection.pragma_update(None, "user_version", 99).unwrap();
    drop(connection);
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::NewerSchema { found: 99, .. }));
    assert!(
        err.to_string()
            .contains("schema version 99, newer than this hintgate's 2")
    );
}

fn rusqlite_connection(path: &std::path::Path) -> rusqlite::Connection {
    rusqlite::Connection::open(path).unwrap()
}

#[test]
fn server_keys_hide_secrets_but_change_with_them() {
    use hintgate_policy::config::{PrivateData, ServerConfig, Transport};
    use hintgate_policy::tool::Trust;
    let server = |token: &str| ServerConfig {
        name: "gh".into(),
        transport: Transport::Stdio {
            command: "npx".into(),
            args: vec!["server-github".into()],
            env: [("TOKEN".to_owned(), token.to_owned())].into(),
        },
        trust: Trust::Untrusted,
        private_data: PrivateData::None,
        sandbox: None,
    };
    let caps = json!({"elicitation": {}});
    let key = hintgate_store::server_key(&server("secret-1"), &caps, b"salt");
    assert_eq!(
        key,
        hintgate_store::server_key(&server("secret-1"), &caps, b"salt")
    );
    assert_ne!(
        key,
        hintgate_store::server_key(&server("secret-2"), &caps, b"salt")
    );
    assert_ne!(
        key,
        hintgate_store::server_key(&server("secret-1"), &json!({}), b"salt")
    );
    assert!(!key.contains("secret"));
}

fn audit_contract(log: &dyn hintgate_store::AuditLog) {
    use hintgate_store::{EntryKind, NewEntry};
    let call = |tool: &str| NewEntry {
        at: 1_795_000_000,
        kind: EntryKind::Call,
        call: None,
        body: json!({"server": "fs", "tool": tool, "verdict": "allow"}),
    };
    let seqs = log.append(&[call("read"), call("write")]).unwrap();
    assert_eq!(seqs, vec![1, 2]);
    let outcome = NewEntry {
        at: 1_795_000_001,
        kind: EntryKind::Outcome,
        call: Some(1),
        body: json!({"outcome": "ok"}),
    };
    assert_eq!(log.append(&[outcome]).unwrap(), vec![3]);
    let entries = log.entries(0, 10).unwrap();
    assert_eq!(entries.len(), 3);
    assert_eq!(
        entries[1].prev, entries[0].hash,
        "each entry carries the hash before it"
    );
    assert_eq!(entries[2].call, Some(1));
    assert_eq!(log.entries(2, 10).unwrap().len(), 1);
    assert_eq!(
        log.verify().unwrap(),
        hintgate_store::Verification {
            checked: 3,
            first_broken: None
        }
    );
}

#[test]
fn the_audit_log_keeps_its_contract_in_memory_and_in_sqlite() {
    audit_contract(&MemoryStore::default());
    let dir = tempfile::tempdir().unwrap();
    audit_contract(&SqliteStore::open(&dir.path().join("state.db")).unwrap());
}

#[test]
fn an_edited_entry_breaks_the_chain_where_it_was_edited() {
    use hintgate_store::AuditLog;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let log = SqliteStore::open(&path).unwrap();
    audit_contract(&log);
    drop(log);
    let connection = rusqlite_connection(&path);
    connection
        .execute("UPDATE audit SET body = '{\"server\":\"fs\",\"tool\":\"write\",\"verdict\":\"deny\"}' WHERE seq = 2", [])
        .unwrap();
    drop(connection);
    let log = SqliteStore::open(&path).unwrap();
    assert_eq!(log.verify().unwrap().first_broken, Some(2));

    // A deleted entry breaks the chain at the one after it.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    audit_contract(&SqliteStore::open(&path).unwrap());
    rusqlite_connection(&path)
        .execute("DELETE FROM audit WHERE seq = 2", [])
        .unwrap();
    assert_eq!(
        SqliteStore::open(&path)
            .unwrap()
            .verify()
            .unwrap()
            .first_broken,
        Some(3)
    );
}

#[test]
fn reordered_entries_break_the_chain_at_the_first_moved() {
    use hintgate_store::AuditLog;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    audit_contract(&SqliteStore::open(&path).unwrap());
    // Swap the first two entries' contents, hashes and all.
    let connection = rusqlite_connection(&path);
    connection
        .execute_batch(
            "UPDATE audit SET seq = -1 WHERE seq = 1;
             UPDATE audit SET seq = 1 WHERE seq = 2;
             UPDATE audit SET seq = 2 WHERE seq = -1;",
        )
        .unwrap();
    drop(connection);
    let verification = SqliteStore::open(&path).unwrap().verify().unwrap();
    assert_eq!(verification.first_broken, Some(1));
}

#[test]
fn two_writers_on_one_file_both_chain_every_entry() {
    use hintgate_store::{AuditLog, EntryKind, NewEntry};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    drop(SqliteStore::open(&path).unwrap());
    let writers: Vec<_> = (0..2)
        .map(|writer| {
            let path = path.clone();
            std::thread::spawn(move || {
                let log = SqliteStore::open(&path).unwrap();
                for batch in 0..50 {
                    let entries: Vec<NewEntry> = (0..4)
                        .map(|n| NewEntry {
                            at: 1_795_000_000,
                            kind: EntryKind::Call,
                            call: None,
                            body: json!({"writer": writer, "batch": batch, "n": n}),
                        })
                        .collect();
                    log.append(&entries).unwrap();
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    let log = SqliteStore::open(&path).unwrap();
    assert_eq!(
        log.verify().unwrap(),
        hintgate_store::Verification {
            checked: 400,
            first_broken: None
        }
    );
}

#[test]
fn waiting_for_entries_sees_another_connections_commit() {
    use hintgate_store::{AuditLog, EntryKind, NewEntry};
    use std::time::Duration;
    let entry = || NewEntry {
        at: 1_795_000_000,
        kind: EntryKind::Call,
        call: None,
        body: json!({"tool": "read"}),
    };
    let memory = MemoryStore::default();
    assert!(
        !memory
            .wait_for_entries(0, Duration::from_millis(1))
            .unwrap()
    );
    memory.append(&[entry()]).unwrap();
    assert!(
        memory
            .wait_for_entries(0, Duration::from_millis(1))
            .unwrap()
    );

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let reader = SqliteStore::open(&path).unwrap();
    assert!(
        !reader
            .wait_for_entries(0, Duration::from_millis(1))
            .unwrap()
    );
    let writer = std::thread::spawn(move || {
        SqliteStore::open(&path)
            .unwrap()
            .append(&[entry()])
            .unwrap();
    });
    // Returns once the other connection has committed (the bound only keeps
    // a broken build from hanging).
    let mut found = false;
    for _ in 0..600 {
        if reader
            .wait_for_entries(0, Duration::from_millis(100))
            .unwrap()
        {
            found = true;
            break;
        }
    }
    assert!(found);
    writer.join().unwrap();
    assert!(
        !reader
            .wait_for_entries(1, Duration::from_millis(1))
            .unwrap()
    );
}
