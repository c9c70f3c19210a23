//! Attacks on the rows decisions trust (pins, standing approvals, the
//! approval queue) by someone who can write the database but does not hold
//! the audit key, against SQLite and PostgreSQL: none may give a call an
//! approval no person gave.

use hintgate_store::{
    Answer, Answered, ApprovalQueue, AuditSetup, KeySource, PendingState, PinStore, Remember, Seal,
    SqliteStore, Store, StoreError,
};
use serde_json::json;

/// The database as its attacker reaches it: SQL, with `{s}` for the
/// schema the store's tables are in.
pub(super) trait Raw {
    fn execute(&mut self, sql: &str);
    /// `bytes` as a literal of the database's binary type.
    fn bytes_literal(&self, bytes: &[u8]) -> String;
}

struct Sqlite(rusqlite::Connection);

impl Raw for Sqlite {
    fn execute(&mut self, sql: &str) {
        self.0.execute_batch(&sql.replace("{s}", "")).unwrap();
    }
    fn bytes_literal(&self, bytes: &[u8]) -> String {
        format!("X'{}'", hex::encode(bytes))
    }
}

struct Postgres(postgres::Client);

impl Raw for Postgres {
    fn execute(&mut self, sql: &str) {
        self.0
            .batch_execute(&sql.replace("{s}", "hintgate."))
            .unwrap();
    }
    fn bytes_literal(&self, bytes: &[u8]) -> String {
        format!("'\\x{}'::bytea", hex::encode(bytes))
    }
}

/// Runs `attack` on a keyed SQLite store and, when a server is configured,
/// a keyed PostgreSQL store, each with the attacker's own connection.
pub(super) fn on_both(attack: impl Fn(&dyn Store, &mut dyn Raw)) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = SqliteStore::open(&path).unwrap();
    attack(
        &store,
        &mut Sqlite(rusqlite::Connection::open(&path).unwrap()),
    );
    if let Some(url) = hintgate_store::test_util::postgres_database() {
        let store = super::keyed_pg(&url);
        let client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        attack(&store, &mut Postgres(client));
    }
}

fn pending(tool: &str) -> hintgate_store::NewPending {
    hintgate_store::NewPending {
        tool: tool.into(),
        ..super::pending_call(i64::MAX)
    }
}

fn yes(by: &str) -> Answer {
    Answer {
        approve: true,
        remember: Remember::Always,
        by: by.into(),
        arguments: None,
    }
}

#[test]
fn a_standing_approval_written_without_the_key_approves_nothing() {
    on_both(|store, db| {
        store.approve_always("k", "read", "sha256:r").unwrap();
        assert!(store.approved_always("k", "read", "sha256:r").unwrap());
        // A new row; a row with another row's seal; a row whose digest was
        // pointed at the definition a hostile server lists now.
        db.execute(
            "INSERT INTO {s}always (server_key, tool, digest) VALUES ('k', 'write', 'sha256:w');
             INSERT INTO {s}always (server_key, tool, digest, tag)
                 SELECT 'k', 'delete', 'sha256:d', tag FROM {s}always WHERE tool = 'read';
             INSERT INTO {s}always (server_key, tool, digest, tag)
                 SELECT 'k', 'read_more', 'sha256:r', tag FROM {s}always WHERE tool = 'read';",
        );
        for (tool, digest) in [
            ("write", "sha256:w"),
            ("delete", "sha256:d"),
            ("read_more", "sha256:r"),
        ] {
            assert!(
                !store.approved_always("k", tool, digest).unwrap(),
                "a forged approval of `{tool}` approves nothing"
            );
        }
        let seals: Vec<(String, Seal)> = store
            .approvals_of("k")
            .unwrap()
            .into_iter()
            .map(|approval| (approval.tool, approval.seal))
            .collect();
        assert_eq!(
            seals,
            [
                ("delete".to_owned(), Seal::Broken),
                ("read".to_owned(), Seal::Valid),
                ("read_more".to_owned(), Seal::Broken),
                ("write".to_owned(), Seal::Broken),
            ]
        );
        db.execute("UPDATE {s}always SET digest = 'sha256:evil' WHERE tool = 'read'");
        assert!(!store.approved_always("k", "read", "sha256:evil").unwrap());
    });
}

#[test]
fn a_pin_changed_without_the_key_has_a_broken_seal_and_a_rekey_keeps_it_so() {
    on_both(|store, db| {
        store
            .put_pin(&super::pin_of("fs", "k", "read", 100, "v1"))
            .unwrap();
        store
            .put_pin(&super::pin_of("fs", "k", "write", 100, "v1"))
            .unwrap();
        assert_eq!(store.pin("k", "write").unwrap().unwrap().seal, Seal::Valid);
        // The pin of `write` now says what a hostile server lists: a tool
        // that claims to only read.
        let lie = json!({"name": "write", "annotations": {"readOnlyHint": true}});
        db.execute(&format!(
            "UPDATE {{s}}pins SET digest = 'sha256:lie', definition = '{lie}' WHERE tool = 'write'"
        ));
        let pin = store.pin("k", "write").unwrap().unwrap();
        assert_eq!(
            (pin.digest.as_str(), pin.seal),
            ("sha256:lie", Seal::Broken)
        );
        assert_eq!(store.pin("k", "read").unwrap().unwrap().seal, Seal::Valid);
        // A pin made up whole, with a seal taken from another pin.
        db.execute(
            "INSERT INTO {s}pins (server_key, tool, server, digest, definition, pinned_at, identity, tag)
                 SELECT server_key, 'delete', server, digest, definition, pinned_at, identity, tag
                 FROM {s}pins WHERE tool = 'read'",
        );
        let seals = |key: &str| -> Vec<(String, Seal)> {
            store
                .pins_of(key)
                .unwrap()
                .into_iter()
                .map(|pin| (pin.tool, pin.seal))
                .collect()
        };
        let expected = [
            ("delete".to_owned(), Seal::Broken),
            ("read".to_owned(), Seal::Valid),
            ("write".to_owned(), Seal::Broken),
        ];
        assert_eq!(seals("k"), expected);
        assert!(
            store
                .pins()
                .unwrap()
                .iter()
                .any(|pin| pin.seal == Seal::Broken)
        );
        // A new identity takes the pins over, each sealed for its new key:
        // the sound one stays sound, the broken ones stay broken.
        assert_eq!(store.rekey("fs", "k2").unwrap().unwrap().pins, 3);
        assert_eq!(seals("k2"), expected);
    });
}

#[test]
fn an_answer_written_without_the_key_denies_the_call() {
    on_both(|store, db| {
        let id = store.enqueue(&pending("write_file")).unwrap();
        assert_eq!(store.pending(id).unwrap().unwrap().seal, Seal::Valid);
        db.execute(&format!(
            "UPDATE {{s}}approvals SET state = 'answered', approve = TRUE, remember = 'always',
                 answered_by = 'mallory' WHERE id = {id}"
        ));
        let answers = store.answers(&[id]).unwrap();
        assert_eq!(answers.len(), 1);
        let (_, answer) = &answers[0];
        assert!(!answer.approve, "a forged approval is read as a denial");
        assert_eq!(answer.remember, Remember::Call);
        assert!(
            answer.by.contains("mallory") && answer.by.contains("seal"),
            "the log says who was claimed and why it did not count: {}",
            answer.by
        );
        assert_eq!(
            store.withdraw(id, "timed out").unwrap(),
            Some(answer.clone())
        );
        assert_eq!(store.pending(id).unwrap().unwrap().seal, Seal::Broken);
    });
}

#[test]
fn an_answer_moved_to_another_entry_denies_that_entry() {
    on_both(|store, db| {
        let first = store.enqueue(&pending("read_file")).unwrap();
        let second = store.enqueue(&pending("delete_file")).unwrap();
        assert_eq!(
            store.answer(first, &yes("alice"), 0).unwrap(),
            Answered::Released
        );
        db.execute(&format!(
            "UPDATE {{s}}approvals SET state = 'answered', approve = TRUE, remember = 'always',
                 answered_by = 'alice',
                 answer_tag = (SELECT answer_tag FROM {{s}}approvals WHERE id = {first})
             WHERE id = {second}"
        ));
        let answers = store.answers(&[first, second]).unwrap();
        let approved = |id: u64| {
            answers
                .iter()
                .any(|(at, answer)| *at == id && answer.approve)
        };
        assert!(approved(first), "the answer alice gave stands");
        assert!(!approved(second), "her answer does not answer another call");
    });
}

#[test]
fn an_edit_changed_removed_or_added_without_the_key_denies_the_call() {
    on_both(|store, db| {
        let edit = |by: &str, arguments: &str| Answer {
            remember: Remember::Call,
            arguments: Some(arguments.to_owned()),
            ..yes(by)
        };
        // An edit, as given: read back with its arguments.
        let edited = store.enqueue(&pending("write_file")).unwrap();
        let given = edit("alice", r#"{"content":"safe","path":"/a"}"#);
        assert_eq!(store.answer(edited, &given, 0).unwrap(), Answered::Released);
        assert_eq!(
            store.answers(&[edited]).unwrap(),
            [(edited, given.clone())],
            "an edit reads back as given"
        );
        // Its arguments swapped for others, or removed (so that the call
        // would run as the host asked, on an approval of an edit).
        let swapped = store.enqueue(&pending("write_file")).unwrap();
        let removed = store.enqueue(&pending("write_file")).unwrap();
        for id in [swapped, removed] {
            assert_eq!(store.answer(id, &given, 0).unwrap(), Answered::Released);
        }
        db.execute(&format!(
            "UPDATE {{s}}approvals SET arguments = '{{\"content\":\"evil\",\"path\":\"/a\"}}' WHERE id = {swapped};
             UPDATE {{s}}approvals SET arguments = NULL WHERE id = {removed}"
        ));
        // A plain approval given arguments it was not given.
        let added = store.enqueue(&pending("write_file")).unwrap();
        assert_eq!(
            store.answer(added, &yes("alice"), 0).unwrap(),
            Answered::Released
        );
        db.execute(&format!(
            "UPDATE {{s}}approvals SET arguments = '{{\"content\":\"evil\"}}' WHERE id = {added}"
        ));
        for id in [swapped, removed, added] {
            let answers = store.answers(&[id]).unwrap();
            assert_eq!(answers.len(), 1);
            let (_, answer) = &answers[0];
            assert!(!answer.approve, "#{id}: a changed edit is read as a denial");
            assert_eq!(answer.arguments, None, "#{id}");
        }
    });
}

#[test]
fn an_entry_whose_prompt_was_changed_cannot_be_answered() {
    on_both(|store, db| {
        let id = store.enqueue(&pending("delete_file")).unwrap();
        // The person would read a harmless prompt for a destructive call.
        db.execute(&format!(
            "UPDATE {{s}}approvals SET prompt = 'Allow read_file on fs?' WHERE id = {id}"
        ));
        let listed = store.waiting(0).unwrap();
        assert_eq!(
            listed.iter().map(|p| (p.id, p.seal)).collect::<Vec<_>>(),
            [(id, Seal::Broken)]
        );
        assert_eq!(
            store.answer(id, &yes("alice"), 0).unwrap(),
            Answered::Broken
        );
        assert_eq!(
            store.pending(id).unwrap().unwrap().state,
            PendingState::Waiting,
            "nothing was answered"
        );
    });
}

#[test]
fn a_store_opened_without_the_key_checks_nothing_and_seals_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let keyed = SqliteStore::open(&path).unwrap();
    keyed
        .put_pin(&super::pin_of("fs", "k", "read", 100, "v1"))
        .unwrap();
    keyed
        .approve_always("k", "read", "sha256:read-100")
        .unwrap();
    let id = keyed.enqueue(&pending("read_file")).unwrap();
    drop(keyed);
    let keyless = SqliteStore::open_with(
        &path,
        AuditSetup {
            key: KeySource::None,
            ..AuditSetup::default()
        },
    )
    .unwrap();
    assert_eq!(
        keyless.pin("k", "read").unwrap().unwrap().seal,
        Seal::Unchecked
    );
    assert!(
        !keyless
            .approved_always("k", "read", "sha256:read-100")
            .unwrap(),
        "an approval that cannot be checked approves nothing"
    );
    for refused in [
        keyless.put_pin(&super::pin_of("fs", "k", "write", 100, "v1")),
        keyless.approve_always("k", "write", "sha256:w"),
        keyless.answer(id, &yes("alice"), 0).map(drop),
        // A revocation without its record in the log would let the row
        // put back later approve again.
        keyless.revoke("k", "read").map(drop),
    ] {
        assert!(matches!(refused, Err(StoreError::Unsealed)), "{refused:?}");
    }
    assert!(
        keyless.pin("k", "read").unwrap().is_some(),
        "a refused revocation removes nothing"
    );
    assert!(
        StoreError::Unsealed.to_string().contains("--audit-key"),
        "the error says how to give the key"
    );
}

#[test]
fn a_token_written_or_raised_without_the_key_authenticates_nobody() {
    on_both(|store, raw| {
        let held = hintgate_store::token_hash("hgt_held");
        store.add_token("reader", &held, "read").unwrap();
        // The attacker adds a token of their own, and raises the reader's
        // scope to write.
        let own = hintgate_store::token_hash("hgt_attacker");
        raw.execute(&format!(
            "INSERT INTO {{s}}tokens (name, hash, scope, created_at, tag) VALUES ('mine', '{own}', 'write', 1, 'ab')"
        ));
        assert!(store.find_token(&own).unwrap().is_none());
        raw.execute("UPDATE {s}tokens SET scope = 'write' WHERE name = 'reader'");
        assert!(
            store.find_token(&held).unwrap().is_none(),
            "a token whose scope was raised without the key must not authenticate at all"
        );
        let listed = store.tokens().unwrap();
        assert_eq!(listed.len(), 2);
        assert!(listed.iter().all(|row| row.seal == Seal::Broken));
    });
}
