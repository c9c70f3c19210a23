//! The records of writes sent with idempotency keys: one claim wins, ends
//! are the owner's, old records are forgotten, results are kept encrypted,
//! and a record someone without the audit key wrote or changed is refused,
//! in every store, and between two connections to one database.

use hintgate_store::{KeyClaim, KeyEnd, KeyState, Seal, SqliteStore, Store, key_scope};

const WINDOW: i64 = 86_400;

fn claim<'a>(scope: &'a str, owner: &'a str, arguments: &'a str, now: i64) -> KeyClaim<'a> {
    KeyClaim {
        scope,
        owner,
        principal: "",
        arguments,
        now,
        window_s: WINDOW,
    }
}

fn keys_contract(store: &dyn Store) {
    let scope = key_scope("server-key", "charge", "7f9c0d1e");
    assert_eq!(store.key_record(&scope, 1_000, WINDOW).unwrap(), None);
    // The first claim makes a running record; the second finds it.
    assert_eq!(
        store
            .claim_key(&claim(&scope, "gw-1", "args-a", 1_000))
            .unwrap(),
        None
    );
    let second = store
        .claim_key(&claim(&scope, "gw-2", "args-a", 1_001))
        .unwrap()
        .unwrap();
    assert_eq!(second.state, KeyState::Running);
    assert_eq!(second.owner, "gw-1");
    assert_eq!(second.seal, Seal::Valid);

    // Only the owner ends it.
    store
        .end_key(
            &scope,
            "gw-2",
            KeyEnd::Done(Some("{\"forged\":true}")),
            1_002,
        )
        .unwrap();
    assert_eq!(
        store
            .key_record(&scope, 1_002, WINDOW)
            .unwrap()
            .unwrap()
            .state,
        KeyState::Running
    );
    store
        .end_key(
            &scope,
            "gw-1",
            KeyEnd::Done(Some(r#"{"content":[{"type":"text","text":"charged"}]}"#)),
            1_003,
        )
        .unwrap();
    let done = store.key_record(&scope, 1_004, WINDOW).unwrap().unwrap();
    assert_eq!(done.state, KeyState::Done);
    assert_eq!(done.arguments, "args-a");
    assert_eq!(done.done_at, Some(1_003));
    assert_eq!(
        done.result.as_deref(),
        Some(r#"{"content":[{"type":"text","text":"charged"}]}"#)
    );
    // A done record is not ended again, and stays what it was.
    store
        .end_key(&scope, "gw-1", KeyEnd::Unknown, 1_005)
        .unwrap();
    assert_eq!(
        store
            .key_record(&scope, 1_005, WINDOW)
            .unwrap()
            .unwrap()
            .state,
        KeyState::Done
    );

    // Past the window it is forgotten, and the key may be claimed anew.
    let later = 1_003 + WINDOW + 1;
    assert_eq!(store.key_record(&scope, later, WINDOW).unwrap(), None);
    assert_eq!(
        store
            .claim_key(&claim(&scope, "gw-3", "args-b", later))
            .unwrap(),
        None
    );

    // Unknown and released.
    store
        .end_key(&scope, "gw-3", KeyEnd::Unknown, later)
        .unwrap();
    assert_eq!(
        store
            .key_record(&scope, later, WINDOW)
            .unwrap()
            .unwrap()
            .state,
        KeyState::Unknown
    );
    let other = key_scope("server-key", "charge", "another");
    assert_eq!(
        store
            .claim_key(&claim(&other, "gw-3", "args-c", later))
            .unwrap(),
        None
    );
    store
        .end_key(&other, "gw-3", KeyEnd::Released, later)
        .unwrap();
    assert_eq!(store.key_record(&other, later, WINDOW).unwrap(), None);

    // A result too large to keep: done, without it.
    let big = key_scope("server-key", "charge", "big");
    assert_eq!(
        store
            .claim_key(&claim(&big, "gw-3", "args-d", later))
            .unwrap(),
        None
    );
    let text = "x".repeat(hintgate_store::MAX_RESULT_BYTES + 1);
    store
        .end_key(&big, "gw-3", KeyEnd::Done(Some(&text)), later)
        .unwrap();
    let record = store.key_record(&big, later, WINDOW).unwrap().unwrap();
    assert_eq!((record.state, record.result), (KeyState::Done, None));
}

#[test]
fn every_store_keeps_the_idempotency_contract() {
    super::on_every_store(keys_contract);
}

#[test]
fn of_claims_from_many_threads_on_two_connections_exactly_one_wins() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let first = std::sync::Arc::new(SqliteStore::open(&path).unwrap());
    let second = std::sync::Arc::new(SqliteStore::open(&path).unwrap());
    let mut stores: Vec<std::sync::Arc<dyn Store>> = vec![first, second];
    if let Some(url) = hintgate_store::test_util::postgres_database() {
        stores.push(std::sync::Arc::new(super::keyed_pg(&url)));
        stores.push(std::sync::Arc::new(super::keyed_pg(&url)));
    }
    for (group, pair) in stores.chunks(2).enumerate() {
        let scope = key_scope("k", "charge", &format!("race-{group}"));
        let winners: usize = std::thread::scope(|threads| {
            let handles: Vec<_> = (0..16)
                .map(|n| {
                    let store = std::sync::Arc::clone(&pair[n % 2]);
                    let scope = scope.clone();
                    threads.spawn(move || {
                        let owner = format!("gw-{n}");
                        usize::from(
                            store
                                .claim_key(&claim(&scope, &owner, "a", 10))
                                .unwrap()
                                .is_none(),
                        )
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|handle| handle.join().unwrap())
                .sum()
        });
        assert_eq!(winners, 1, "store pair {group}");
    }
}

#[test]
fn a_record_written_or_changed_without_the_key_is_refused_and_its_result_unreadable() {
    super::row_attacks::on_both(|store, raw| {
        let scope = key_scope("k", "charge", "attacked");
        assert_eq!(
            store.claim_key(&claim(&scope, "gw", "args", 100)).unwrap(),
            None
        );
        store
            .end_key(
                &scope,
                "gw",
                KeyEnd::Done(Some(r#"{"secret":"the card was charged"}"#)),
                101,
            )
            .unwrap();
        // Pointing the record at other arguments breaks its seal.
        raw.execute(&format!(
            "UPDATE {{s}}idempotency SET arguments = 'other' WHERE scope = '{scope}'"
        ));
        let record = store.key_record(&scope, 102, WINDOW).unwrap().unwrap();
        assert_eq!(record.seal, Seal::Broken);
        // A forged record for another key, with a result of the attacker's.
        let forged = key_scope("k", "charge", "forged");
        raw.execute(&format!(
            "INSERT INTO {{s}}idempotency (scope, state, owner, principal, arguments, claimed_at, done_at, result, tag)
             VALUES ('{forged}', 'done', 'gw', '', 'args', 100, 101, NULL, 'deadbeef')"
        ));
        let record = store.key_record(&forged, 102, WINDOW).unwrap().unwrap();
        assert_eq!(record.seal, Seal::Broken);
        // A claim finds it (and does not run the call again).
        let found = store
            .claim_key(&claim(&forged, "gw2", "args", 102))
            .unwrap()
            .unwrap();
        assert_eq!(found.seal, Seal::Broken);
    });
}
