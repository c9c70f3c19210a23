//! Attacks on standing ("always") approvals by someone who can write the
//! database but not the audit key, against SQLite and PostgreSQL: a revoked
//! approval's row copied back, the whole database put back from an older
//! copy, and the revocation deleted from the log or its index. None may
//! make a revoked approval approve again unseen.

use hintgate_store::{
    AuditKey, AuditLog, EntryKind, HeadFound, NewEntry, PinStore, Seal, SqliteStore, Standing,
    Store, StoreError,
};
use serde_json::json;

use super::audit_attacks::{
    codes, database_of, postgres_reader, reader_of, try_gateway_on_postgres,
};

/// The database as its attacker reaches it: SQL, with `{s}` for the
/// schema of the store's tables and `{b}` for where the attacker keeps
/// copies of them.
trait Raw {
    fn execute(&mut self, sql: &str);
}

struct Sqlite(rusqlite::Connection);

impl Raw for Sqlite {
    fn execute(&mut self, sql: &str) {
        self.0
            .execute_batch(&sql.replace("{s}", "").replace("{b}", "copy_"))
            .unwrap();
    }
}

struct Postgres(postgres::Client);

impl Raw for Postgres {
    fn execute(&mut self, sql: &str) {
        self.0
            .batch_execute(
                &sql.replace("{s}", "hintgate.")
                    .replace("{b}", "public.copy_"),
            )
            .unwrap();
    }
}

/// The tables a copy of the database holds that standing approvals and the
/// log live in.
const TABLES: [&str; 4] = ["audit", "approval_log", "always", "pins"];

/// Takes a copy of the database (a backup the attacker keeps).
fn back_up(db: &mut dyn Raw) {
    for table in TABLES {
        db.execute(&format!(
            "DROP TABLE IF EXISTS {{b}}{table}; CREATE TABLE {{b}}{table} AS SELECT * FROM {{s}}{table};"
        ));
    }
}

/// Puts the copy back in place of the database.
fn put_back(db: &mut dyn Raw) {
    for table in TABLES {
        db.execute(&format!(
            "DELETE FROM {{s}}{table}; INSERT INTO {{s}}{table} SELECT * FROM {{b}}{table};"
        ));
    }
}

/// How a test reaches one store: as a gateway opens it (with its head),
/// as `hintgate log` opens it (a reader, which does not refuse), and as the
/// attacker does; and the audit key.
struct Case<'a> {
    gateway: &'a dyn Fn() -> Result<Box<dyn Store>, StoreError>,
    reader: &'a dyn Fn() -> Box<dyn Store>,
    /// A keyed handle that keeps no head: another gateway of a team store.
    headless: &'a dyn Fn() -> Box<dyn Store>,
    db: &'a mut dyn Raw,
    key: AuditKey,
    postgres: bool,
}

/// A store setup with `key` and no head.
fn no_head(key: &AuditKey) -> hintgate_store::AuditSetup {
    hintgate_store::AuditSetup {
        key: hintgate_store::KeySource::Given(key.clone()),
        head: hintgate_store::HeadPlace::None,
        checkpoints: false,
        witness: Default::default(),
    }
}

/// What a gateway's refusal to open found.
#[expect(
    clippy::panic,
    reason = "test helper: an open that did not refuse is a failed test"
)]
fn refused(opened: Result<Box<dyn Store>, StoreError>) -> (String, Box<hintgate_store::Rollback>) {
    match opened {
        Err(StoreError::RolledBack(found)) => {
            let message = StoreError::RolledBack(found.clone()).to_string();
            (message, found)
        }
        Err(err) => panic!("the gateway refused for another reason: {err}"),
        Ok(_) => panic!("the gateway opened"),
    }
}

/// Runs `attack` on a SQLite store in a directory of its own and, when a
/// server is configured, on a PostgreSQL store whose gateway keeps its
/// head in a directory of its own.
fn on_both(attack: impl Fn(Case<'_>)) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    drop(SqliteStore::open(&path).unwrap());
    let key = AuditKey::load(&SqliteStore::key_path(&path)).unwrap();
    let gateway = || SqliteStore::open(&path).map(|store| Box::new(store) as Box<dyn Store>);
    let reader = || Box::new(reader_of(&path)) as Box<dyn Store>;
    let headless =
        || Box::new(SqliteStore::open_with(&path, no_head(&key)).unwrap()) as Box<dyn Store>;
    attack(Case {
        gateway: &gateway,
        reader: &reader,
        headless: &headless,
        db: &mut Sqlite(rusqlite::Connection::open(&path).unwrap()),
        key: key.clone(),
        postgres: false,
    });
    let dir = tempfile::tempdir().unwrap();
    let Some(opened) = try_gateway_on_postgres(dir.path()) else {
        return;
    };
    drop(opened.unwrap());
    let gateway = || {
        try_gateway_on_postgres(dir.path())
            .unwrap()
            .map(|store| Box::new(store) as Box<dyn Store>)
    };
    let reader = || Box::new(postgres_reader(dir.path())) as Box<dyn Store>;
    let url = database_of(dir.path()).unwrap();
    let headless = || {
        Box::new(hintgate_store::PgStore::open_with(&url, no_head(&super::shared_key())).unwrap())
            as Box<dyn Store>
    };
    attack(Case {
        gateway: &gateway,
        reader: &reader,
        headless: &headless,
        db: &mut Postgres(postgres::Client::connect(&url, postgres::NoTls).unwrap()),
        key: super::shared_key(),
        postgres: true,
    });
}

/// The one standing approval of `k`.
fn the_approval(store: &dyn Store) -> hintgate_store::Approval {
    let mut approvals = store.approvals_of("k").unwrap();
    assert_eq!(approvals.len(), 1, "{approvals:#?}");
    approvals.remove(0)
}

/// The sequence number of the log's last record of `kind`.
fn last_of(store: &dyn Store, kind: EntryKind) -> u64 {
    store
        .entries(0, 10_000)
        .unwrap()
        .iter()
        .rev()
        .find(|entry| entry.kind == Some(kind))
        .unwrap()
        .seq
}

/// Records calls, as a gateway does between grants and revocations.
fn calls(store: &dyn Store, count: usize) {
    let entries: Vec<NewEntry> = (0..count)
        .map(|n| {
            hintgate_store::test_util::call_entry(
                1_795_000_000,
                &json!({"server": "fs", "tool": "read", "n": n}),
            )
        })
        .collect();
    store.append(&entries).unwrap();
}

/// A pinned `write` approved always.
fn approved(store: &dyn Store, digest: &str) {
    store
        .put_pin(&super::pin_of("fs", "k", "write", 100, "v1"))
        .unwrap();
    store.approve_always("k", "write", digest).unwrap();
    assert!(store.approved_always("k", "write", digest).unwrap());
}

#[test]
fn a_revoked_approvals_row_copied_back_approves_nothing() {
    on_both(|case| {
        let store = (case.gateway)().unwrap();
        approved(&*store, "sha256:w");
        let granted = the_approval(&*store);
        assert!(granted.approves());
        assert_eq!(granted.granted, Some(last_of(&*store, EntryKind::Grant)));
        // The attacker keeps the row, sealed as hintgate wrote it.
        case.db.execute(
            "DROP TABLE IF EXISTS {b}always; CREATE TABLE {b}always AS SELECT * FROM {s}always",
        );
        assert!(store.revoke("k", "write").unwrap());
        let revoked_at = last_of(&*store, EntryKind::Revoke);
        assert!(store.approvals_of("k").unwrap().is_empty());
        case.db
            .execute("INSERT INTO {s}always SELECT * FROM {b}always");
        let back = the_approval(&*store);
        assert_eq!(back.seal, Seal::Valid, "the row is the one hintgate sealed");
        assert_eq!(back.standing, Standing::Superseded { by: revoked_at });
        assert!(!back.approves());
        assert!(!store.approved_always("k", "write", "sha256:w").unwrap());
        // A gateway started on it takes nothing from it either.
        drop(store);
        let store = (case.gateway)().unwrap();
        assert!(!the_approval(&*store).approves());

        // Approved anew, and the older row copied over the newer one: the
        // newer grant supersedes it.
        store.approve_always("k", "write", "sha256:w").unwrap();
        let regranted = last_of(&*store, EntryKind::Grant);
        assert!(the_approval(&*store).approves());
        case.db
            .execute("DELETE FROM {s}always; INSERT INTO {s}always SELECT * FROM {b}always");
        assert_eq!(
            the_approval(&*store).standing,
            Standing::Superseded { by: regranted }
        );
        assert!(!store.approved_always("k", "write", "sha256:w").unwrap());
        // A row whose grant number was moved to the newer grant has a
        // broken seal.
        case.db
            .execute(&format!("UPDATE {{s}}always SET grant_seq = {regranted}"));
        let moved = the_approval(&*store);
        assert_eq!(
            (moved.seal, moved.standing, moved.approves()),
            (Seal::Broken, Standing::InForce, false)
        );
        // The log itself was never touched: it verifies.
        let verification = (case.reader)().verify().unwrap();
        assert!(verification.complete(), "{verification:#?}");
    });
}

#[test]
fn a_database_put_back_after_a_revocation_is_refused_until_accepted_and_then_asks_again() {
    on_both(|case| {
        let store = (case.gateway)().unwrap();
        approved(&*store, "sha256:w");
        calls(&*store, 3);
        back_up(case.db);
        let backed_up = store.entries(0, 10_000).unwrap().len() as u64;
        // Revoked on this machine (the store that `hintgate pins revoke`
        // opens writes this machine's head too), and more calls.
        assert!(store.revoke("k", "write").unwrap());
        calls(&*store, 2);
        let head = backed_up + 3;
        drop(store);
        put_back(case.db);

        // The copy holds the grant and not the revocation, so by its rows
        // and its log alone the approval would stand again; but its log is
        // shorter than the head, and a gateway does not start on it.
        let (message, found) = refused((case.gateway)());
        assert_eq!(found.log_end, backed_up);
        assert!(
            matches!(found.found, HeadFound::CutOff { head_seq, .. } if head_seq == head),
            "{found:?}"
        );
        assert!(
            message.contains(&format!(
                "the audit log ends at record {backed_up} but its head `"
            )) && message.contains(&format!("` names record {head} (`cut-off`)"))
                && message.contains("run `hintgate log verify`")
                && message.contains("`hintgate log accept-rollback`"),
            "{message}"
        );

        // A reader opens it, says what is wrong, and writes nothing: not a
        // grant, not a revocation, not a record.
        let reader = (case.reader)();
        assert_eq!(codes(&reader.verify().unwrap()), ["cut-off"]);
        assert!(matches!(
            reader.approve_always("k", "write", "sha256:w"),
            Err(StoreError::RolledBack(_))
        ));
        assert!(matches!(
            reader.revoke("k", "write"),
            Err(StoreError::RolledBack(_))
        ));
        assert_eq!(reader.entries(0, 10_000).unwrap().len() as u64, backed_up);

        // Accepted on purpose: a record says what was found, and the
        // approval granted before it approves nothing.
        let accepted = reader.accept_rollback().unwrap().unwrap();
        assert_eq!(accepted.seq, backed_up + 1);
        assert_eq!(accepted.rollback.found.code(), "cut-off");
        drop(reader);
        let store = (case.gateway)().unwrap();
        let approval = the_approval(&*store);
        assert_eq!(approval.seal, Seal::Valid);
        assert_eq!(approval.standing, Standing::RolledBack { by: accepted.seq });
        assert!(!store.approved_always("k", "write", "sha256:w").unwrap());
        let verification = (case.reader)().verify().unwrap();
        assert_eq!(codes(&verification), ["rolled-back"], "{verification:#?}");
        let message = verification.problems[0].to_string();
        assert!(
            message.contains(&format!(
                "record {} accepts a log that was not the one its head was written for (`cut-off`: it ended at record {backed_up}, where its head named record {head})",
                accepted.seq
            )),
            "{message}"
        );
        // The person is asked again, and may approve again.
        store.approve_always("k", "write", "sha256:w").unwrap();
        assert!(the_approval(&*store).approves());
    });
}

#[test]
fn a_copy_put_back_and_written_to_is_refused_at_the_heads_place() {
    on_both(|case| {
        let store = (case.gateway)().unwrap();
        approved(&*store, "sha256:w");
        calls(&*store, 2);
        back_up(case.db);
        assert!(store.revoke("k", "write").unwrap());
        calls(&*store, 2);
        drop(store);
        put_back(case.db);
        assert_eq!(refused((case.gateway)()).1.found.code(), "cut-off");
        // A writer that keeps no head of its own here (another gateway of
        // a team store) appends past the head: the log is as long as the
        // head says, but the record at its place is another one.
        let others: Vec<NewEntry> = (0..6)
            .map(|n| hintgate_store::test_util::call_entry(0, &json!({"n": n})))
            .collect();
        (case.headless)().append(&others).unwrap();
        assert!(
            matches!(
                refused((case.gateway)()).1.found,
                HeadFound::HeadMismatch { .. }
            ),
            "the record at the head's place is not the head's"
        );
    });
}

#[test]
fn another_writers_appends_after_the_head_are_no_rollback() {
    on_both(|case| {
        let store = (case.gateway)().unwrap();
        approved(&*store, "sha256:w");
        drop(store);
        // The head is a lower bound: on a team store other gateways append
        // after this one's last commit.
        let others: Vec<NewEntry> = (0..5)
            .map(|n| hintgate_store::test_util::call_entry(0, &json!({"n": n})))
            .collect();
        (case.headless)().append(&others).unwrap();
        let store = (case.gateway)().unwrap();
        assert!(the_approval(&*store).approves());
        assert!((case.reader)().verify().unwrap().complete());
    });
}

/// Ways to hide a revocation from the gateway's query, each with what
/// `verify` must report: the record's problem codes, in order.
///
/// Whether the row copied back then approves at the gateway (which reads
/// the index, never the whole log) says what the hiding buys: where it
/// does, `verify` names the hiding as it names a deleted record.
const HIDINGS: &[(&str, &str, bool, &[&str])] = &[
    (
        "delete the revocation's index row",
        "DELETE FROM {s}approval_log WHERE seq = {r}",
        true,
        &["approval-index-missing"],
    ),
    (
        "move the revocation's index row before the grant",
        "UPDATE {s}approval_log SET seq = 0 WHERE seq = {r}",
        true,
        &["approval-index-wrong", "approval-index-missing"],
    ),
    (
        "point the revocation's index row at another tool",
        "UPDATE {s}approval_log SET tool = 'other' WHERE seq = {r}",
        true,
        &["approval-index-wrong"],
    ),
    (
        "delete the revocation record and its index row",
        "DELETE FROM {s}audit WHERE seq = {r}; DELETE FROM {s}approval_log WHERE seq = {r}",
        true,
        &["missing-records"],
    ),
    (
        "delete the revocation record only",
        "DELETE FROM {s}audit WHERE seq = {r}",
        false,
        &["missing-records", "approval-index-wrong"],
    ),
];

#[test]
fn a_revocation_hidden_from_the_gateway_is_named_by_verify() {
    for (name, hide, approves, expected) in HIDINGS {
        on_both(|case| {
            let store = (case.gateway)().unwrap();
            approved(&*store, "sha256:w");
            case.db.execute(
                "DROP TABLE IF EXISTS {b}always; CREATE TABLE {b}always AS SELECT * FROM {s}always",
            );
            assert!(store.revoke("k", "write").unwrap());
            let revoked_at = last_of(&*store, EntryKind::Revoke);
            calls(&*store, 2);
            // The revocation is in the middle of the log; the row goes back.
            case.db.execute(&format!(
                "INSERT INTO {{s}}always SELECT * FROM {{b}}always; {}",
                hide.replace("{r}", &revoked_at.to_string())
            ));
            assert_eq!(
                store.approved_always("k", "write", "sha256:w").unwrap(),
                *approves,
                "{name}"
            );
            let verification = (case.reader)().verify().unwrap();
            assert_eq!(codes(&verification), *expected, "{name}: {verification:#?}");
            assert!(
                verification.problems.iter().any(|problem| problem
                    .to_string()
                    .contains(&format!("record {revoked_at}"))),
                "{name}: a problem names the revocation's record: {verification:#?}"
            );
        });
    }
}

#[test]
fn a_revocations_index_row_stored_as_another_type_in_sqlite_is_named_by_verify() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = SqliteStore::open(&path).unwrap();
    approved(&store, "sha256:w");
    let mut db = Sqlite(rusqlite::Connection::open(&path).unwrap());
    db.execute("CREATE TABLE {b}always AS SELECT * FROM {s}always");
    assert!(store.revoke("k", "write").unwrap());
    let revoked_at = last_of(&store, EntryKind::Revoke);
    // The same bytes as a blob: the gateway's query does not find it (a
    // blob never equals text), so the row copied back reads as in force.
    db.execute(&format!(
        "INSERT INTO {{s}}always SELECT * FROM {{b}}always;
         UPDATE {{s}}approval_log SET server_key = CAST(server_key AS BLOB) WHERE seq = {revoked_at}"
    ));
    assert!(store.approved_always("k", "write", "sha256:w").unwrap());
    let verification = reader_of(&path).verify().unwrap();
    assert_eq!(
        codes(&verification),
        ["approval-index-wrong"],
        "{verification:#?}"
    );
}

/// The seal hintgate wrote on a standing approval before grants were
/// recorded (schema 6 and older): HMAC-SHA-256 under the rows subkey over
/// the kind and each field, each prefixed with its length.
fn old_seal(key: &AuditKey, server_key: &str, tool: &str, digest: &str) -> String {
    use hmac::Mac as _;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key.subkey("store rows v1")).unwrap();
    for field in ["always", server_key, tool, digest] {
        mac.update(&(field.len() as u64).to_be_bytes());
        mac.update(field.as_bytes());
    }
    hex::encode(mac.finalize().into_bytes())
}

#[test]
fn approvals_from_before_grants_were_logged_are_kept_and_approve_nothing() {
    on_both(|case| {
        let store = (case.gateway)().unwrap();
        store
            .put_pin(&super::pin_of("fs", "k", "write", 100, "v1"))
            .unwrap();
        calls(&*store, 2);
        let id = hintgate_store::ApprovalQueue::enqueue(&*store, &super::pending_call(i64::MAX))
            .unwrap();
        let tag = old_seal(&case.key, "k", "write", "sha256:w");
        drop(store);
        // The database as schema 6 (SQLite) or 4 (PostgreSQL) left it: no
        // grant numbers, no index, and a standing approval sealed the old
        // way.
        case.db.execute(&format!(
            "INSERT INTO {{s}}always (server_key, tool, digest, tag) VALUES ('k', 'write', 'sha256:w', '{tag}');
             ALTER TABLE {{s}}always DROP COLUMN grant_seq;
             ALTER TABLE {{s}}approvals DROP COLUMN arguments;
             DROP TABLE {{s}}approval_log;"
        ));
        if case.postgres {
            case.db
                .execute("UPDATE {s}meta SET value = '4' WHERE key = 'schema_version'");
        } else {
            case.db.execute("PRAGMA user_version = 6");
        }
        let store = (case.gateway)().unwrap();
        let old = the_approval(&*store);
        assert_eq!(
            (old.seal, old.standing, old.granted),
            (Seal::Valid, Standing::NotLogged, None),
            "kept, shown as genuine, and given no effect"
        );
        assert!(!old.approves());
        assert!(!store.approved_always("k", "write", "sha256:w").unwrap());
        // Everything else is kept, and the log verifies.
        assert_eq!(store.pin("k", "write").unwrap().unwrap().seal, Seal::Valid);
        assert!(
            hintgate_store::ApprovalQueue::pending(&*store, id)
                .unwrap()
                .is_some()
        );
        let verification = (case.reader)().verify().unwrap();
        assert!(verification.complete(), "{verification:#?}");
        assert_eq!(verification.checked, 2);
        // A person approves it again: now it is granted in the log.
        store.approve_always("k", "write", "sha256:w").unwrap();
        assert!(the_approval(&*store).approves());
        drop(store);
        // Opening again migrates nothing twice.
        assert!(the_approval(&*(case.gateway)().unwrap()).approves());
    });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    drop(SqliteStore::open(&path).unwrap());
    let version: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .unwrap();
    assert_eq!(version, hintgate_store::SCHEMA_VERSION);
}
