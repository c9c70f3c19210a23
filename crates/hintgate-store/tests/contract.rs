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
            .contains("schema version 99, newer than this hintgate's 3")
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
    let key = hintgate_store::server_key(&server("secret-1"), &json!(null), &caps, b"salt");
    assert_eq!(
        key,
        hintgate_store::server_key(&server("secret-1"), &json!(null), &caps, b"salt")
    );
    assert_ne!(
        key,
        hintgate_store::server_key(&server("secret-2"), &json!(null), &caps, b"salt")
    );
    assert_ne!(
        key,
        hintgate_store::server_key(&server("secret-1"), &json!(null), &json!({}), b"salt")
    );
    assert!(!key.contains("secret"));
    assert_ne!(
        key,
        hintgate_store::server_key(
            &server("secret-1"),
            &json!({"executable": "/usr/bin/npx", "package": {"name": "server-github", "version": "2.0.0"}}),
            &caps,
            b"salt"
        ),
        "another executable or version is another server"
    );
}

fn audit_contract(log: &dyn hintgate_store::AuditLog) {
    use hintgate_store::{EntryKind, NewEntry};
    let call = |tool: &str| {
        NewEntry::from_value(
            1_795_000_000,
            EntryKind::Call,
            None,
            &json!({"server": "fs", "tool": tool, "verdict": "allow"}),
        )
    };
    let seqs = log.append(&[call("read"), call("write")]).unwrap();
    assert_eq!(seqs, vec![1, 2]);
    let outcome = NewEntry::from_value(
        1_795_000_001,
        EntryKind::Outcome,
        Some(1),
        &json!({"outcome": "ok"}),
    );
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

// === the approval queue ===

fn pending_call(expires_at: i64) -> hintgate_store::NewPending {
    hintgate_store::NewPending {
        at: 100,
        expires_at,
        session: "s-1".into(),
        server: "fs".into(),
        server_key: "k".into(),
        tool: "write_file".into(),
        digest: "sha256:a".into(),
        prompt: "Allow write_file on fs?\n  path: \"/tmp/x\"".into(),
        offer: hintgate_store::Remember::Always,
    }
}

fn queue_contract(queue: &dyn hintgate_store::ApprovalQueue) {
    use hintgate_store::{Answer, Answered, PendingState, Remember};
    let a = queue.enqueue(&pending_call(200)).unwrap();
    let b = queue.enqueue(&pending_call(200)).unwrap();
    assert_ne!(a, b, "every entry has its own number");
    let waiting = queue.waiting(150).unwrap();
    assert_eq!(waiting.iter().map(|p| p.id).collect::<Vec<_>>(), [a, b]);
    assert_eq!(
        waiting[0].prompt,
        pending_call(200).prompt,
        "the whole prompt is kept"
    );
    assert_eq!(waiting[0].offer, Remember::Always);
    assert!(
        queue.waiting(200).unwrap().is_empty(),
        "an entry past its time is not listed"
    );
    assert!(queue.answers(&[a, b]).unwrap().is_empty());

    let yes = Answer {
        approve: true,
        remember: Remember::Session,
        by: "alice".into(),
    };
    let no = Answer {
        approve: false,
        remember: Remember::Call,
        by: "bob".into(),
    };
    assert_eq!(queue.answer(a, &yes, 150).unwrap(), Answered::Released);
    assert_eq!(
        queue.answer(a, &no, 150).unwrap(),
        Answered::NotWaiting(PendingState::Answered(yes.clone())),
        "an entry is answered once"
    );
    assert_eq!(queue.answer(b, &yes, 200).unwrap(), Answered::Expired);
    assert_eq!(queue.answer(9_999, &yes, 150).unwrap(), Answered::Unknown);
    assert_eq!(queue.answers(&[a, b]).unwrap(), [(a, yes.clone())]);

    // The gateway withdraws when its time is up; a person who was first wins.
    assert_eq!(queue.withdraw(a, "timed out").unwrap(), Some(yes.clone()));
    assert_eq!(queue.withdraw(b, "timed out").unwrap(), None);
    assert_eq!(
        queue.pending(b).unwrap().unwrap().state,
        PendingState::Withdrawn {
            why: "timed out".into()
        }
    );
    assert_eq!(
        queue.answer(b, &yes, 150).unwrap(),
        Answered::NotWaiting(PendingState::Withdrawn {
            why: "timed out".into()
        }),
        "a withdrawn call cannot be approved any more"
    );
    assert!(queue.waiting(150).unwrap().is_empty());
    assert_eq!(
        queue.pending(a).unwrap().unwrap().state,
        PendingState::Answered(yes)
    );
}

/// A gateway waits on one handle of the store; a person answers on another
/// (another terminal, or another gateway on the same PostgreSQL). The watch
/// wakes and the answer is there.
fn answer_from_elsewhere(
    waiter: &dyn hintgate_store::Store,
    other: &(dyn hintgate_store::Store + Sync),
) {
    use hintgate_store::{Answer, Remember};
    let mut watch = waiter.watch().unwrap();
    let id = waiter.enqueue(&pending_call(i64::MAX)).unwrap();
    // Let a first wait establish whatever the watch needs (PostgreSQL: LISTEN).
    watch.wait(std::time::Duration::from_millis(10)).unwrap();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let listed = other.waiting(0).unwrap();
            assert_eq!(listed.iter().map(|p| p.id).collect::<Vec<_>>(), [id]);
            let answer = Answer {
                approve: true,
                remember: Remember::Call,
                by: "carol".into(),
            };
            assert_eq!(
                other.answer(id, &answer, 0).unwrap(),
                hintgate_store::Answered::Released
            );
        });
        let mut answers = Vec::new();
        for _ in 0..600 {
            watch.wait(std::time::Duration::from_secs(1)).unwrap();
            answers = waiter.answers(&[id]).unwrap();
            if !answers.is_empty() {
                break;
            }
        }
        assert_eq!(answers.len(), 1, "the answer reached the waiting handle");
        assert_eq!(answers[0].1.by, "carol");
    });
}

#[test]
fn the_approval_queue_keeps_its_contract_in_memory_and_in_sqlite() {
    queue_contract(&MemoryStore::default());
    let dir = tempfile::tempdir().unwrap();
    queue_contract(&SqliteStore::open(&dir.path().join("state.db")).unwrap());
}

#[test]
fn an_answer_given_in_another_process_releases_a_sqlite_waiter() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let waiter = SqliteStore::open(&path).unwrap();
    let other = SqliteStore::open(&path).unwrap();
    answer_from_elsewhere(&waiter, &other);
    let memory = MemoryStore::default();
    answer_from_elsewhere(&memory, &memory);
}

// === PostgreSQL ===

#[test]
fn the_postgres_store_keeps_every_contract_and_its_data_across_connections() {
    let Some(url) = hintgate_store::test_util::postgres_database() else {
        return;
    };
    let store = hintgate_store::PgStore::open(&url).unwrap();
    contract(&store);
    audit_contract(&store);
    queue_contract(&store);
    let salt = store.salt().to_vec();
    drop(store);
    let reopened = hintgate_store::PgStore::open(&url).unwrap();
    assert_eq!(
        reopened.pin("other", "read").unwrap().unwrap().digest,
        "sha256:z"
    );
    assert_eq!(
        reopened.salt(),
        salt.as_slice(),
        "every gateway on the store shares the salt"
    );
}

#[test]
fn an_answer_on_one_gateway_releases_a_call_waiting_on_another_via_postgres() {
    let Some(url) = hintgate_store::test_util::postgres_database() else {
        return;
    };
    let waiter = hintgate_store::PgStore::open(&url).unwrap();
    let other = hintgate_store::PgStore::open(&url).unwrap();
    answer_from_elsewhere(&waiter, &other);
}

#[test]
fn gateways_appending_at_once_to_postgres_keep_one_chain() {
    use hintgate_store::{AuditLog, EntryKind, NewEntry};
    let Some(url) = hintgate_store::test_util::postgres_database() else {
        return;
    };
    let stores: Vec<_> = (0..4)
        .map(|_| hintgate_store::PgStore::open(&url).unwrap())
        .collect();
    std::thread::scope(|scope| {
        for (n, store) in stores.iter().enumerate() {
            scope.spawn(move || {
                for i in 0..25 {
                    let entry = NewEntry::from_value(
                        1_795_000_000,
                        EntryKind::Call,
                        None,
                        &json!({"gateway": n, "call": i}),
                    );
                    store.append(&[entry.clone(), entry]).unwrap();
                }
            });
        }
    });
    let verification = stores[0].verify().unwrap();
    assert_eq!(verification.checked, 200);
    assert_eq!(verification.first_broken, None);
}

#[test]
fn a_newer_postgres_schema_is_refused_and_a_bad_address_is_named() {
    let Some(url) = hintgate_store::test_util::postgres_database() else {
        return;
    };
    drop(hintgate_store::PgStore::open(&url).unwrap());
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    client
        .execute(
            "UPDATE hintgate.meta SET value = '99' WHERE key = 'schema_version'",
            &[],
        )
        .unwrap();
    let err = hintgate_store::PgStore::open(&url).unwrap_err();
    assert!(
        matches!(err, StoreError::NewerSchema { found: 99, .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("newer than this hintgate's 1"),
        "{err}"
    );

    let err = hintgate_store::PgStore::open("postgres://gate:hunter2@127.0.0.1:1/x").unwrap_err();
    assert!(
        !err.to_string().contains("hunter2"),
        "the password is never shown: {err}"
    );
}

fn removal_contract(store: &dyn PinStore) {
    use hintgate_store::REMOVED;
    store.put_pin(&pin("k", "gone", "sha256:a")).unwrap();
    let removed = Seen {
        digest: REMOVED.into(),
        definition: serde_json::Value::Null,
    };
    store.see("k", "gone", &removed).unwrap();
    assert_eq!(store.pin("k", "gone").unwrap().unwrap().seen, Some(removed));
    store.clear_seen("k", "gone").unwrap();
    let back = store.pin("k", "gone").unwrap().unwrap();
    assert_eq!((back.digest.as_str(), back.seen), ("sha256:a", None));
    store.clear_seen("k", "never-pinned").unwrap();
    assert_eq!(store.pin("k", "never-pinned").unwrap(), None);
}

#[test]
fn a_removed_tool_is_recorded_and_cleared_in_every_store() {
    removal_contract(&MemoryStore::default());
    let dir = tempfile::tempdir().unwrap();
    removal_contract(&SqliteStore::open(&dir.path().join("state.db")).unwrap());
    if let Some(url) = hintgate_store::test_util::postgres_database() {
        removal_contract(&hintgate_store::PgStore::open(&url).unwrap());
    }
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
                        .map(|n| {
                            NewEntry::from_value(
                                1_795_000_000,
                                EntryKind::Call,
                                None,
                                &json!({"writer": writer, "batch": batch, "n": n}),
                            )
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
    let entry = || {
        NewEntry::from_value(
            1_795_000_000,
            EntryKind::Call,
            None,
            &json!({"tool": "read"}),
        )
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
