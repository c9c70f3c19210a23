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
        identity: "npx -y fs-server".to_owned(),
        tool: tool.to_owned(),
        digest: digest.to_owned(),
        definition: json!({"name": tool, "annotations": {"readOnlyHint": true}}),
        pinned_at: 1_795_000_000,
        seen: None,
        seal: hintgate_store::Seal::Valid,
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
                identity: String::new(),
            },
        )
        .unwrap();
    assert_eq!(store.pin("k", "read").unwrap().unwrap().seen, None);
    let changed = Seen {
        digest: "sha256:b".into(),
        definition: json!({"name": "read", "annotations": {"readOnlyHint": false}}),
        identity: "npx -y fs-server".into(),
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
    assert!(err.to_string().contains(&format!(
        "schema version 99, newer than this hintgate's {}",
        hintgate_store::SCHEMA_VERSION
    )));
}

fn rusqlite_connection(path: &std::path::Path) -> rusqlite::Connection {
    rusqlite::Connection::open(path).unwrap()
}

/// The key every gateway of a PostgreSQL test shares.
fn shared_key() -> hintgate_store::AuditKey {
    hintgate_store::AuditKey::from_secret([9; 32])
}

/// A PostgreSQL store as a gateway opens it: with the shared key (and no
/// head file).
fn keyed_pg(url: &str) -> hintgate_store::PgStore {
    hintgate_store::PgStore::open_with(
        url,
        hintgate_store::AuditSetup {
            key: hintgate_store::KeySource::Given(shared_key()),
            head: hintgate_store::HeadPlace::None,
            checkpoints: false,
            witness: Default::default(),
        },
    )
    .unwrap()
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
        decide: hintgate_policy::config::ServerHook::Inherit,
        idempotency_key: None,
        read_only: None,
        oauth: None,
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
        hintgate_store::test_util::call_entry(
            1_795_000_000,
            &json!({"server": "fs", "tool": tool, "verdict": "allow"}),
        )
    };
    let seqs = log.append(&[call("read"), call("write")]).unwrap();
    assert_eq!(seqs, vec![1, 2]);
    let outcome = hintgate_store::test_util::outcome_entry(
        1_795_000_001,
        1,
        hintgate_store::record::OutcomeCode::Ok,
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
    let verification = log.verify().unwrap();
    assert!(verification.holds(), "{verification:?}");
    assert_eq!(verification.checked, 3);
    assert_eq!(
        verification.keyed,
        Some(hintgate_store::Span { first: 1, last: 3 }),
        "every record is chained under the key"
    );
    assert_eq!(verification.unkeyed, None);
    assert_eq!(
        verification.key_id.as_deref(),
        log.audit_key().map(hintgate_store::AuditKey::id),
        "checked with the log's key"
    );
    // A turn of many calls is one append: every record in order, chained.
    let many: Vec<NewEntry> = (0..40).map(|n| call(&format!("tool-{n}"))).collect();
    assert_eq!(log.append(&many).unwrap(), (4..44).collect::<Vec<u64>>());
    let entries = log.entries(3, 100).unwrap();
    assert_eq!(entries.len(), 40);
    for (n, entry) in entries.iter().enumerate() {
        assert_eq!(entry.body["tool"], format!("tool-{n}"));
    }
    assert_eq!(log.verify().unwrap().first_broken(), None);
    assert_eq!(log.verify().unwrap().checked, 43);
    // The outcomes of several calls in one record, read back one per call.
    let outcomes = NewEntry::from_value(
        1_795_000_002,
        EntryKind::Outcomes,
        None,
        &json!({"outcomes": [
            {"attempt": 0, "call": 4, "duration_ms": 2, "outcome": "ok"},
            {"attempt": 0, "call": 5, "duration_ms": 3, "outcome": "tool-error"},
        ]}),
    );
    assert_eq!(log.append(&[outcomes]).unwrap(), vec![44]);
    let stored = log.entries(43, 10).unwrap().remove(0);
    assert_eq!(stored.kind, Some(EntryKind::Outcomes));
    let expanded = stored.expand();
    assert_eq!(expanded.len(), 2);
    assert_eq!(
        (expanded[0].kind, expanded[0].call, expanded[0].seq),
        (Some(EntryKind::Outcome), Some(4), 44)
    );
    assert_eq!(expanded[1].call, Some(5));
    assert_eq!(expanded[1].body["outcome"], "tool-error");
    assert_eq!(log.verify().unwrap().first_broken(), None);
}

#[test]
fn the_audit_log_keeps_its_contract_in_memory_and_in_sqlite() {
    audit_contract(&MemoryStore::default());
    let dir = tempfile::tempdir().unwrap();
    audit_contract(&SqliteStore::open(&dir.path().join("state.db")).unwrap());
}

#[test]
fn a_failed_sqlite_append_keeps_nothing_and_the_next_append_works() {
    use hintgate_store::AuditLog;
    let entry =
        |tool: &str| hintgate_store::test_util::call_entry(1_795_000_000, &json!({"tool": tool}));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let log = SqliteStore::open(&path).unwrap();
    assert_eq!(log.append(&[entry("first")]).unwrap(), [1]);
    // Another connection makes one insert fail inside the append's
    // transaction: a statement aborted by a trigger leaves the transaction
    // open, so only the append's own rollback ends it.
    rusqlite_connection(&path)
        .execute_batch(
            "CREATE TRIGGER refuse BEFORE INSERT ON audit WHEN NEW.body LIKE '%refused%'
             BEGIN SELECT RAISE(ABORT, 'refused by the test'); END;",
        )
        .unwrap();
    let err = log
        .append(&[entry("kept-only-with-the-group"), entry("refused")])
        .unwrap_err();
    assert!(err.to_string().contains("refused by the test"), "{err}");
    for _ in 0..2 {
        log.append(&[entry("after")]).unwrap();
    }
    let entries = log.entries(0, 10).unwrap();
    assert_eq!(
        entries
            .iter()
            .map(|entry| (entry.seq, entry.body["tool"].as_str().unwrap()))
            .collect::<Vec<_>>(),
        [(1, "first"), (2, "after"), (3, "after")],
        "nothing of the failed group is kept"
    );
    assert_eq!(log.verify().unwrap().first_broken(), None);
    // Another connection takes the write lock while this one is open: no
    // transaction was left behind.
    let other = SqliteStore::open(&path).unwrap();
    assert_eq!(other.append(&[entry("elsewhere")]).unwrap(), [4]);
    assert_eq!(log.append(&[entry("here")]).unwrap(), [5]);
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
    assert_eq!(log.verify().unwrap().first_broken(), Some(2));

    // A deleted entry is named.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    audit_contract(&SqliteStore::open(&path).unwrap());
    rusqlite_connection(&path)
        .execute("DELETE FROM audit WHERE seq = 2", [])
        .unwrap();
    assert_eq!(
        SqliteStore::open(&path).unwrap().verify().unwrap().problems,
        [hintgate_store::Problem::MissingRecords { first: 2, last: 2 }]
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
        details: Some(
            json!({"tool": "write_file", "arguments": {"path": "/tmp/x"}, "risks": ["<b>"]}),
        ),
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
    assert_eq!(
        waiting[0].details,
        pending_call(200).details,
        "the prompt's content as JSON is kept"
    );
    let bare = queue
        .enqueue(&hintgate_store::NewPending {
            details: None,
            ..pending_call(120)
        })
        .unwrap();
    assert_eq!(queue.pending(bare).unwrap().unwrap().details, None);
    assert!(
        queue.waiting(200).unwrap().is_empty(),
        "an entry past its time is not listed"
    );
    assert!(queue.answers(&[a, b]).unwrap().is_empty());

    let yes = Answer {
        approve: true,
        remember: Remember::Session,
        by: "alice".into(),
        arguments: None,
    };
    let no = Answer {
        approve: false,
        remember: Remember::Call,
        by: "bob".into(),
        arguments: None,
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
                arguments: None,
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
    let store = keyed_pg(&url);
    // The log's contract counts its records from 1: it runs first (the
    // pins' contract grants and revokes, which the log records).
    audit_contract(&store);
    contract(&store);
    queue_contract(&store);
    let salt = store.salt().to_vec();
    drop(store);
    let reopened = keyed_pg(&url);
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
    let waiter = keyed_pg(&url);
    let other = keyed_pg(&url);
    answer_from_elsewhere(&waiter, &other);
}

#[test]
fn gateways_appending_at_once_to_postgres_keep_one_chain() {
    use hintgate_store::AuditLog;
    let Some(url) = hintgate_store::test_util::postgres_database() else {
        return;
    };
    let stores: Vec<_> = (0..4).map(|_| keyed_pg(&url)).collect();
    std::thread::scope(|scope| {
        for (n, store) in stores.iter().enumerate() {
            scope.spawn(move || {
                for i in 0..25 {
                    let entry = hintgate_store::test_util::call_entry(
                        1_795_000_000,
                        &json!({"gateway": n, "call": i}),
                    );
                    store.append(&[entry.clone(), entry]).unwrap();
                }
            });
        }
    });
    let verification = stores[0].verify().unwrap();
    assert_eq!(verification.checked, 200);
    assert_eq!(verification.first_broken(), None);
}

#[test]
fn a_postgres_store_appends_again_on_a_new_connection_after_losing_its_own() {
    use hintgate_store::AuditLog;
    let Some(url) = hintgate_store::test_util::postgres_database() else {
        return;
    };
    let entry = |n: u64| hintgate_store::test_util::call_entry(1_795_000_000, &json!({"call": n}));
    let store = keyed_pg(&url);
    // The statements of an append are prepared on the first one.
    assert_eq!(store.append(&[entry(1)]).unwrap(), [1]);
    assert_eq!(store.append(&[entry(2)]).unwrap(), [2]);
    // The server ends the store's connection, and with it the statements
    // prepared on it.
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let ended = admin
        .query(
            "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )
        .unwrap();
    assert!(!ended.is_empty(), "the store's connection was found");
    // An append that finds the connection gone fails; a later one runs on
    // a new connection, with its statements prepared anew (a statement of
    // the old connection would not be found).
    let mut seqs = Vec::new();
    for n in 3..8 {
        if let Ok(appended) = store.append(&[entry(n)]) {
            seqs.extend(appended);
        }
    }
    assert!(seqs.len() >= 3, "appends work again: {seqs:?}");
    let expected: Vec<u64> = (3..).take(seqs.len()).collect();
    assert_eq!(seqs, expected, "nothing of a failed append was kept");
    assert_eq!(store.verify().unwrap().first_broken(), None);
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
        err.to_string().contains(&format!(
            "newer than this hintgate's {}",
            hintgate_store::PG_SCHEMA_VERSION
        )),
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
        identity: String::new(),
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
        removal_contract(&keyed_pg(&url));
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
    assert_eq!(verification.first_broken(), Some(1));
}

#[test]
fn two_writers_on_one_file_both_chain_every_entry() {
    use hintgate_store::AuditLog;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    drop(SqliteStore::open(&path).unwrap());
    let writers: Vec<_> = (0..2)
        .map(|writer| {
            let path = path.clone();
            std::thread::spawn(move || {
                let log = SqliteStore::open(&path).unwrap();
                for batch in 0..50 {
                    let entries: Vec<hintgate_store::NewEntry> = (0..4)
                        .map(|n| {
                            hintgate_store::test_util::call_entry(
                                1_795_000_000,
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
    let verification = log.verify().unwrap();
    assert!(verification.holds(), "{verification:?}");
    assert_eq!(verification.checked, 400);
}

#[test]
fn waiting_for_entries_sees_another_connections_commit() {
    use hintgate_store::AuditLog;
    use std::time::Duration;
    let entry = || hintgate_store::test_util::call_entry(1_795_000_000, &json!({"tool": "read"}));
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

// === identities, bulk reads and rekeying ===

/// Runs `check` on a new memory store, a new SQLite store and, when a
/// server is configured, a new PostgreSQL store.
fn on_every_store(check: impl Fn(&dyn hintgate_store::Store)) {
    check(&MemoryStore::default());
    let dir = tempfile::tempdir().unwrap();
    check(&SqliteStore::open(&dir.path().join("state.db")).unwrap());
    if let Some(url) = hintgate_store::test_util::postgres_database() {
        check(&keyed_pg(&url));
    }
}

/// A pin of the configured server `server` under `key`, taken at `at` under
/// `identity`.
fn pin_of(server: &str, key: &str, tool: &str, at: i64, identity: &str) -> Pin {
    Pin {
        server_key: key.to_owned(),
        server: server.to_owned(),
        identity: identity.to_owned(),
        tool: tool.to_owned(),
        digest: format!("sha256:{tool}-{at}"),
        definition: json!({"name": tool}),
        pinned_at: at,
        seen: None,
        seal: hintgate_store::Seal::Valid,
    }
}

fn seen_under(identity: &str) -> Seen {
    Seen {
        digest: "sha256:new".into(),
        definition: json!({"name": "read", "description": "Reads, and now writes."}),
        identity: identity.into(),
    }
}

#[test]
fn identities_round_trip_on_pins_and_what_was_seen() {
    on_every_store(|store| {
        let old = "npx -y @acme/fs -> /usr/bin/npx, @acme/fs 1.0.0";
        let new = "npx -y @acme/fs -> /usr/bin/npx, @acme/fs 2.0.0";
        store.put_pin(&pin_of("fs", "k", "read", 100, old)).unwrap();
        assert_eq!(store.pin("k", "read").unwrap().unwrap().identity, old);
        store.see("k", "read", &seen_under(new)).unwrap();
        let held = store.pin("k", "read").unwrap().unwrap();
        assert_eq!(held.identity, old, "seeing keeps the pin's identity");
        assert_eq!(held.seen, Some(seen_under(new)));
        assert_eq!(store.pins().unwrap(), std::slice::from_ref(&held));
        assert_eq!(store.pins_of("k").unwrap(), [held]);

        // Approving the change pins it under the identity it was seen with,
        // and forgets what was held.
        let mut approved = pin_of("fs", "k", "read", 200, new);
        approved.digest = "sha256:new".into();
        store.put_pins(&[approved.clone()]).unwrap();
        assert_eq!(store.pin("k", "read").unwrap(), Some(approved.clone()));
        store.see("k", "read", &seen_under("")).unwrap();
        assert_eq!(
            store.pin("k", "read").unwrap().unwrap().seen,
            None,
            "the pinned definition is not a change"
        );
        let mut other = seen_under(old);
        other.digest = "sha256:other".into();
        store.see("k", "read", &other).unwrap();
        store.clear_seen("k", "read").unwrap();
        assert_eq!(store.pin("k", "read").unwrap(), Some(approved));
    });
}

#[test]
fn one_keys_pins_and_standing_approvals_are_read_in_bulk_by_tool() {
    on_every_store(|store| {
        assert!(store.pins_of("k").unwrap().is_empty());
        assert!(store.approvals_of("k").unwrap().is_empty());
        store
            .put_pins(&[
                pin_of("fs", "k", "write", 100, "v1"),
                pin_of("fs", "k", "read", 100, "v1"),
                pin_of("fs", "k", hintgate_store::INSTRUCTIONS, 100, "v1"),
                pin_of("fs", "other", "list", 100, "v1"),
            ])
            .unwrap();
        store.see("k", "write", &seen_under("v2")).unwrap();
        let pins = store.pins_of("k").unwrap();
        assert_eq!(
            pins.iter().map(|pin| pin.tool.as_str()).collect::<Vec<_>>(),
            [hintgate_store::INSTRUCTIONS, "read", "write"]
        );
        assert!(pins.iter().all(|pin| pin.server_key == "k"));
        assert_eq!(pins[2].seen, Some(seen_under("v2")));

        store.approve_always("k", "write", "sha256:w").unwrap();
        store.approve_always("k", "read", "sha256:r").unwrap();
        store.approve_always("other", "list", "sha256:l").unwrap();
        store.approve_always("k", "read", "sha256:r2").unwrap();
        let approvals = store.approvals_of("k").unwrap();
        assert_eq!(
            approvals
                .iter()
                .map(|approval| (approval.tool.as_str(), approval.digest.as_str()))
                .collect::<Vec<_>>(),
            [("read", "sha256:r2"), ("write", "sha256:w")]
        );
        assert!(
            approvals.iter().all(hintgate_store::Approval::approves),
            "{approvals:#?}"
        );
        // Each names its grant record: the newer grant of `read` replaced
        // the older.
        let granted: Vec<u64> = approvals.iter().map(|a| a.granted.unwrap()).collect();
        assert!(granted[0] > granted[1], "{approvals:#?}");
        store.revoke("k", "write").unwrap();
        assert_eq!(store.approvals_of("k").unwrap().len(), 1);
        assert_eq!(store.pins_of("k").unwrap().len(), 2);
    });
}

#[test]
fn a_new_identity_takes_over_the_pins_of_the_servers_last_one() {
    use hintgate_store::{Approval, Rekeyed};
    on_every_store(|store| {
        // Three identities of `gh` over time, and another server.
        store
            .put_pins(&[
                pin_of("gh", "gh-1", "a", 100, "gh 1"),
                pin_of("gh", "gh-1", "b", 100, "gh 1"),
                pin_of("gh", "gh-2", "a", 150, "gh 2 early"),
                pin_of("gh", "gh-2", "c", 200, "gh 2"),
                pin_of("gh", "gh-2", hintgate_store::INSTRUCTIONS, 200, "gh 2"),
                pin_of("fs", "fs-1", "read", 300, "fs"),
            ])
            .unwrap();
        store.see("gh-2", "a", &seen_under("gh 2")).unwrap();
        store.approve_always("gh-1", "b", "sha256:b-100").unwrap();
        store.approve_always("gh-2", "c", "sha256:c-200").unwrap();
        store
            .approve_always("fs-1", "read", "sha256:read-300")
            .unwrap();

        assert_eq!(
            store.rekey("nobody", "nobody-1").unwrap(),
            None,
            "a server never seen has nothing to take over"
        );
        assert!(store.pins_of("nobody-1").unwrap().is_empty());

        assert_eq!(
            store.rekey("gh", "gh-3").unwrap(),
            Some(Rekeyed {
                from_key: "gh-2".into(),
                from_identity: "gh 2".into(),
                pins: 3,
            }),
            "the key pinned most recently wins, and names its newest identity"
        );
        let moved = store.pins_of("gh-3").unwrap();
        assert_eq!(
            moved
                .iter()
                .map(|pin| (pin.tool.as_str(), pin.server_key.as_str()))
                .collect::<Vec<_>>(),
            [
                (hintgate_store::INSTRUCTIONS, "gh-3"),
                ("a", "gh-3"),
                ("c", "gh-3")
            ]
        );
        assert_eq!(
            moved[1].seen,
            Some(seen_under("gh 2")),
            "a held change moves with its pin"
        );
        assert_eq!(moved[1].identity, "gh 2 early");
        assert_eq!(
            store.approvals_of("gh-3").unwrap(),
            Vec::<Approval>::new(),
            "a standing approval answers only for the identity it was given for"
        );
        for stale in ["gh-1", "gh-2"] {
            assert!(store.pins_of(stale).unwrap().is_empty(), "{stale}");
            assert!(store.approvals_of(stale).unwrap().is_empty(), "{stale}");
        }
        assert_eq!(
            store
                .pins()
                .unwrap()
                .iter()
                .filter(|pin| pin.server == "gh")
                .count(),
            3,
            "no tool is listed twice"
        );
        assert!(
            !store.approved_always("gh-3", "c", "sha256:c-200").unwrap(),
            "the new identity's tools are approved anew"
        );
        assert!(!store.approved_always("gh-2", "c", "sha256:c-200").unwrap());
        assert!(!store.approved_always("gh-1", "b", "sha256:b-100").unwrap());

        // Another server is left alone.
        assert_eq!(store.pins_of("fs-1").unwrap().len(), 1);
        assert_eq!(store.approvals_of("fs-1").unwrap().len(), 1);

        // A key with pins is never rekeyed onto, even when the server has
        // newer pins elsewhere.
        store
            .put_pin(&pin_of("gh", "gh-0", "z", 999, "gh 0"))
            .unwrap();
        assert_eq!(store.rekey("gh", "gh-3").unwrap(), None);
        assert_eq!(store.pins_of("gh-3").unwrap().len(), 3);
        assert_eq!(store.pins_of("gh-0").unwrap().len(), 1);
    });
}

#[test]
fn rekeying_breaks_ties_by_key_and_leaves_other_servers_on_a_shared_key_alone() {
    on_every_store(|store| {
        store
            .put_pins(&[
                pin_of("gh", "gh-b", "a", 100, "b"),
                pin_of("gh", "gh-a", "a", 100, "a"),
                // Another configured server with the same identity shares a
                // key (the key does not cover the name).
                pin_of("twin", "gh-a", "t", 50, "a"),
            ])
            .unwrap();
        store.approve_always("gh-a", "a", "sha256:a-100").unwrap();
        store.approve_always("gh-b", "a", "sha256:other").unwrap();
        let rekeyed = store.rekey("gh", "gh-new").unwrap().unwrap();
        assert_eq!(
            (rekeyed.from_key.as_str(), rekeyed.pins),
            ("gh-a", 1),
            "on a tie, the smaller key"
        );
        assert_eq!(store.pins_of("gh-new").unwrap().len(), 1);
        assert!(store.pins_of("gh-b").unwrap().is_empty());
        assert!(store.approvals_of("gh-b").unwrap().is_empty());
        let twin = store.pins_of("gh-a").unwrap();
        assert_eq!(
            twin.iter()
                .map(|pin| pin.server.as_str())
                .collect::<Vec<_>>(),
            ["twin"]
        );
        assert!(
            store.approved_always("gh-a", "a", "sha256:a-100").unwrap(),
            "approvals stay with a key that still has pins"
        );
        assert!(
            !store
                .approved_always("gh-new", "a", "sha256:a-100")
                .unwrap(),
            "an approval given for one identity does not answer for another"
        );
        assert!(store.approvals_of("gh-new").unwrap().is_empty());
    });
}

/// A gateway keeps standing approvals in memory and watches the store; a
/// person approves or revokes on another handle. The watch wakes.
fn approvals_wake_watches(
    waiter: &dyn hintgate_store::Store,
    other: &(dyn hintgate_store::Store + Sync),
) {
    use std::time::{Duration, Instant};
    const TIMEOUT: Duration = Duration::from_secs(15);
    // The control: with nothing changed, a wait sleeps (about) its whole
    // timeout, so the wakes below are the changes' doing, not a watch that
    // never sleeps. Only a lower bound, which a busy machine cannot break.
    const QUIET: Duration = Duration::from_millis(400);
    let sleeps_when_nothing_changes = |watch: &mut Box<dyn hintgate_store::QueueWatch>| {
        let started = Instant::now();
        watch.wait(QUIET).unwrap();
        assert!(
            started.elapsed() >= QUIET / 2,
            "a wait with nothing changed returned after {:?}",
            started.elapsed()
        );
    };
    let mut watch = waiter.watch().unwrap();
    // Let a first wait establish whatever the watch needs (PostgreSQL: LISTEN).
    watch.wait(Duration::from_millis(10)).unwrap();
    sleeps_when_nothing_changes(&mut watch);
    other.approve_always("k", "read", "sha256:a").unwrap();
    let started = Instant::now();
    watch.wait(TIMEOUT).unwrap();
    assert!(
        started.elapsed() < TIMEOUT,
        "an approval wakes the watch before its timeout"
    );
    other.revoke("k", "read").unwrap();
    let started = Instant::now();
    watch.wait(TIMEOUT).unwrap();
    assert!(
        started.elapsed() < TIMEOUT,
        "a revocation wakes the watch before its timeout"
    );
    // A wake is used up by the wait it ends.
    sleeps_when_nothing_changes(&mut watch);
}

#[test]
fn a_change_to_standing_approvals_wakes_the_watches_of_every_store() {
    let memory = MemoryStore::default();
    approvals_wake_watches(&memory, &memory);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    approvals_wake_watches(
        &SqliteStore::open(&path).unwrap(),
        &SqliteStore::open(&path).unwrap(),
    );
    if let Some(url) = hintgate_store::test_util::postgres_database() {
        approvals_wake_watches(&keyed_pg(&url), &keyed_pg(&url));
    }
}

#[test]
fn grants_and_revocations_of_standing_approvals_are_records_of_the_log_in_every_store() {
    use hintgate_store::EntryKind;
    on_every_store(|store| {
        store
            .put_pins(&[
                pin_of("gh", "gh-1", "a", 100, "gh 1"),
                pin_of("gh", "gh-1", "b", 100, "gh 1"),
            ])
            .unwrap();
        store.approve_always("gh-1", "a", "sha256:a").unwrap();
        store.approve_always("gh-1", "b", "sha256:b").unwrap();
        assert!(store.revoke("gh-1", "b").unwrap());
        // A tool without a standing approval is revoked without a record.
        store
            .put_pin(&pin_of("gh", "gh-1", "c", 100, "gh 1"))
            .unwrap();
        assert!(store.revoke("gh-1", "c").unwrap());
        // A new identity takes the pins; the old one's approval goes, on
        // record.
        assert_eq!(store.rekey("gh", "gh-2").unwrap().unwrap().pins, 1);
        assert!(store.approvals_of("gh-1").unwrap().is_empty());
        let records: Vec<(Option<EntryKind>, serde_json::Value)> = store
            .entries(0, 100)
            .unwrap()
            .into_iter()
            .map(|entry| {
                assert_eq!(entry.malformed, None, "{entry:?}");
                (entry.kind, entry.body)
            })
            .collect();
        assert_eq!(
            records,
            [
                (
                    Some(EntryKind::Grant),
                    json!({"digest": "sha256:a", "server": "gh", "server_key": "gh-1", "tool": "a"})
                ),
                (
                    Some(EntryKind::Grant),
                    json!({"digest": "sha256:b", "server": "gh", "server_key": "gh-1", "tool": "b"})
                ),
                (
                    Some(EntryKind::Revoke),
                    json!({"server": "gh", "server_key": "gh-1", "tool": "b", "why": "revoked"})
                ),
                (
                    Some(EntryKind::Revoke),
                    json!({"server": "gh", "server_key": "gh-1", "tool": "a", "why": "identity-changed"})
                ),
            ]
        );
        let verification = store.verify().unwrap();
        assert!(verification.complete(), "{verification:#?}");
    });
}

#[test]
fn a_version_3_sqlite_store_is_migrated_and_its_pins_read_without_identity() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let connection = rusqlite_connection(&path);
    // The tables the store reads when it opens, as versions 1 to 3 made
    // them.
    connection
        .execute_batch(
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value BLOB NOT NULL);
             CREATE TABLE audit (
                 seq INTEGER PRIMARY KEY, at INTEGER NOT NULL, kind TEXT NOT NULL,
                 call_seq INTEGER, body TEXT NOT NULL, prev TEXT NOT NULL, hash TEXT NOT NULL);
             CREATE TABLE always (
                 server_key TEXT NOT NULL, tool TEXT NOT NULL, digest TEXT NOT NULL,
                 PRIMARY KEY (server_key, tool));
             CREATE TABLE pins (
                 server_key TEXT NOT NULL, tool TEXT NOT NULL, server TEXT NOT NULL,
                 digest TEXT NOT NULL, definition TEXT NOT NULL, pinned_at INTEGER NOT NULL,
                 seen_digest TEXT, seen_definition TEXT,
                 PRIMARY KEY (server_key, tool));
             CREATE TABLE approvals (
                 id INTEGER PRIMARY KEY AUTOINCREMENT, at INTEGER NOT NULL,
                 expires_at INTEGER NOT NULL, session TEXT NOT NULL, server TEXT NOT NULL,
                 server_key TEXT NOT NULL, tool TEXT NOT NULL, digest TEXT NOT NULL,
                 prompt TEXT NOT NULL, offer TEXT NOT NULL, state TEXT NOT NULL,
                 approve INTEGER, remember TEXT, answered_by TEXT, why TEXT);
             INSERT INTO pins VALUES ('k', 'read', 'fs', 'sha256:a', '{\"name\":\"read\"}', 100,
                 'sha256:b', '{\"name\":\"read\",\"description\":\"new\"}');
             INSERT INTO always VALUES ('k', 'read', 'sha256:a');
             INSERT INTO approvals (at, expires_at, session, server, server_key, tool, digest, prompt, offer, state)
                 VALUES (1, 2, 's', 'fs', 'k', 'read', 'sha256:a', 'p', 'call', 'waiting');
             PRAGMA user_version = 3;",
        )
        .unwrap();
    drop(connection);
    let store = SqliteStore::open(&path).unwrap();
    let pin = store.pin("k", "read").unwrap().unwrap();
    assert_eq!(pin.identity, "");
    assert_eq!(pin.seen.unwrap().identity, "");
    // Rows from before seals cannot be told from rows written without the
    // key: they are kept, shown, and given no effect.
    assert_eq!(pin.seal, hintgate_store::Seal::Broken);
    assert!(!store.approved_always("k", "read", "sha256:a").unwrap());
    drop(store);
    let version: i64 = rusqlite_connection(&path)
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .unwrap();
    assert_eq!(version, hintgate_store::SCHEMA_VERSION);
    // A call that waited before the queue kept the prompt's content as
    // JSON reads without it.
    let store = SqliteStore::open(&path).unwrap();
    let old = hintgate_store::ApprovalQueue::pending(&store, 1)
        .unwrap()
        .unwrap();
    assert_eq!(old.prompt, "p");
    assert_eq!(old.details, None);
    drop(store);
    // Opening again does not add the columns twice.
    drop(SqliteStore::open(&path).unwrap());
}

#[test]
fn a_version_1_postgres_store_is_migrated_and_its_pins_read_without_identity() {
    let Some(url) = hintgate_store::test_util::postgres_database() else {
        return;
    };
    let store = keyed_pg(&url);
    store
        .put_pin(&pin_of("fs", "k", "read", 100, "v1"))
        .unwrap();
    store.see("k", "read", &seen_under("v2")).unwrap();
    let waiting = hintgate_store::ApprovalQueue::enqueue(&store, &pending_call(200)).unwrap();
    drop(store);
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    client
        .batch_execute(
            "ALTER TABLE hintgate.pins DROP COLUMN identity, DROP COLUMN seen_identity;
             ALTER TABLE hintgate.approvals DROP COLUMN details;
             UPDATE hintgate.meta SET value = '1' WHERE key = 'schema_version';",
        )
        .unwrap();
    let store = keyed_pg(&url);
    // A call that waited before the queue kept the prompt's content as JSON
    // reads without it.
    let old = hintgate_store::ApprovalQueue::pending(&store, waiting)
        .unwrap()
        .unwrap();
    assert_eq!(old.prompt, pending_call(200).prompt);
    assert_eq!(old.details, None);
    let pin = store.pin("k", "read").unwrap().unwrap();
    assert_eq!(pin.identity, "");
    assert_eq!(pin.seen.unwrap().identity, "");
    let version: String = client
        .query_one(
            "SELECT value FROM hintgate.meta WHERE key = 'schema_version'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(version, hintgate_store::PG_SCHEMA_VERSION.to_string());
}

#[test]
fn gateways_rekeying_one_server_at_once_on_postgres_move_its_pins_once() {
    let Some(url) = hintgate_store::test_util::postgres_database() else {
        return;
    };
    let stores: Vec<_> = (0..4).map(|_| keyed_pg(&url)).collect();
    stores[0]
        .put_pins(&[
            pin_of("gh", "gh-1", "a", 100, "gh 1"),
            pin_of("gh", "gh-1", "b", 100, "gh 1"),
        ])
        .unwrap();
    let results: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = stores
            .iter()
            .map(|store| scope.spawn(move || store.rekey("gh", "gh-2").unwrap()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(
        results.iter().filter(|rekeyed| rekeyed.is_some()).count(),
        1,
        "one gateway moves the pins, the others find them moved: {results:?}"
    );
    assert_eq!(stores[0].pins_of("gh-2").unwrap().len(), 2);
    assert!(stores[0].pins_of("gh-1").unwrap().is_empty());
}

#[path = "contract/audit_attacks.rs"]
mod audit_attacks;

#[path = "contract/row_attacks.rs"]
mod row_attacks;

#[path = "contract/keys.rs"]
mod keys;

#[path = "contract/grants.rs"]
mod grants;

#[path = "contract/approval_attacks.rs"]
mod approval_attacks;

// === tokens ===

#[test]
fn a_token_checked_without_waiting_sees_the_store_as_it_is_and_never_waits_for_a_writer() {
    use hintgate_store::TokenStore as _;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    // The gateway's store, and another process's (`hintgate token ...`).
    let gateway = SqliteStore::open(&path).unwrap();
    let other = SqliteStore::open(&path).unwrap();
    let hash = hintgate_store::token_hash(&hintgate_store::new_token().unwrap());
    other.add_token("ci", &hash, "read").unwrap();
    let now = |hash: &str| {
        gateway
            .find_token_now(hash)
            .expect("SQLite answers without waiting")
            .map(|row| (row.name, row.scope))
    };
    assert_eq!(now(&hash), Some(("ci".to_owned(), "read".to_owned())));
    let unknown = hintgate_store::token_hash("hgt_unknown");
    assert_eq!(now(&unknown), None);

    // A writer mid-transaction (the audit indexer, another gateway) holds
    // the database's write lock: the check still answers, at once.
    let writer = rusqlite::Connection::open(&path).unwrap();
    writer
        .execute_batch("BEGIN IMMEDIATE; UPDATE tokens SET scope = 'write';")
        .unwrap();
    assert_eq!(now(&hash), Some(("ci".to_owned(), "read".to_owned())));
    // Committed without the audit key: the row's seal no longer holds, and
    // the token authenticates nobody from the next check on.
    writer.execute_batch("COMMIT;").unwrap();
    assert_eq!(now(&hash), None);

    // Revoked by the other process: refused from the next check on.
    let fresh = hintgate_store::token_hash(&hintgate_store::new_token().unwrap());
    other.add_token("ops", &fresh, "write").unwrap();
    assert_eq!(now(&fresh), Some(("ops".to_owned(), "write".to_owned())));
    assert!(other.revoke_token("ops").unwrap());
    assert_eq!(now(&fresh), None);
    // The waiting check agrees.
    assert!(gateway.find_token(&fresh).unwrap().is_none());
}

#[test]
fn a_token_check_without_waiting_that_cannot_read_the_store_is_left_to_the_waiting_one() {
    use hintgate_store::TokenStore as _;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let gateway = SqliteStore::open(&path).unwrap();
    let hash = hintgate_store::token_hash(&hintgate_store::new_token().unwrap());
    gateway.add_token("ci", &hash, "read").unwrap();
    // The state directory emptied under a running gateway: its own
    // connection still has the file open, a new one finds nothing.
    for name in ["state.db", "state.db-wal", "state.db-shm"] {
        let _ = std::fs::remove_file(dir.path().join(name));
    }
    assert!(gateway.find_token_now(&hash).is_none(), "no answer at once");
    assert!(!path.exists(), "no empty database is made in its place");
    // The waiting check answers from the connection the gateway holds.
    assert_eq!(gateway.find_token(&hash).unwrap().unwrap().name, "ci");
}

#[test]
fn tokens_are_kept_by_hash_found_and_revoked_in_every_store() {
    on_every_store(|store| {
        let token = hintgate_store::new_token().unwrap();
        assert!(token.starts_with(hintgate_store::TOKEN_PREFIX));
        let hash = hintgate_store::token_hash(&token);
        assert_ne!(hash, token, "the token itself is never stored");
        store.add_token("ci", &hash, "read").unwrap();
        // A name is taken once.
        let again = hintgate_store::token_hash(&hintgate_store::new_token().unwrap());
        assert!(matches!(
            store.add_token("ci", &again, "write"),
            Err(StoreError::TokenExists(name)) if name == "ci"
        ));
        let found = store.find_token(&hash).unwrap().unwrap();
        assert_eq!((found.name.as_str(), found.scope.as_str()), ("ci", "read"));
        assert!(store.find_token(&again).unwrap().is_none());
        let listed = store.tokens().unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].seal, hintgate_store::Seal::Valid);
        assert!(store.revoke_token("ci").unwrap());
        assert!(!store.revoke_token("ci").unwrap());
        assert!(store.find_token(&hash).unwrap().is_none());
    });
}
