//! Attacks on the audit log by someone who can write the database, against
//! SQLite and PostgreSQL: each one must make `verify` fail.

use hintgate_store::{
    AuditLog, AuditSetup, HeadPlace, HeadState, KeyError, KeySource, NewEntry, Problem, Span,
    SqliteStore, StoreError, Verification,
};
use serde_json::json;
use sha2::{Digest, Sha256};

/// One stored row of the audit table, as an attacker reads and writes it.
#[derive(Debug, Clone)]
struct Row {
    seq: i64,
    at: i64,
    kind: String,
    call: Option<i64>,
    body: String,
    prev: String,
    hash: String,
}

/// The audit table of a store, as someone who can write the database (but
/// cannot read the key) sees it.
trait Database {
    fn rows(&mut self) -> Vec<Row>;
    fn execute(&mut self, sql: &str);
    fn replace_all(&mut self, rows: &[Row]);
}

struct Sqlite(rusqlite::Connection);

impl Database for Sqlite {
    fn rows(&mut self) -> Vec<Row> {
        let mut statement = self
            .0
            .prepare("SELECT seq, at, kind, call_seq, body, prev, hash FROM audit ORDER BY seq")
            .unwrap();
        statement
            .query_map([], |row| {
                Ok(Row {
                    seq: row.get(0)?,
                    at: row.get(1)?,
                    kind: row.get(2)?,
                    call: row.get(3)?,
                    body: row.get(4)?,
                    prev: row.get(5)?,
                    hash: row.get(6)?,
                })
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    fn execute(&mut self, sql: &str) {
        self.0
            .execute_batch(&sql.replace("{audit}", "audit"))
            .unwrap();
    }

    fn replace_all(&mut self, rows: &[Row]) {
        let tx = self.0.transaction().unwrap();
        tx.execute("DELETE FROM audit", []).unwrap();
        for row in rows {
            tx.execute(
                "INSERT INTO audit (seq, at, kind, call_seq, body, prev, hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                rusqlite::params![row.seq, row.at, row.kind, row.call, row.body, row.prev, row.hash],
            )
            .unwrap();
        }
        tx.commit().unwrap();
    }
}

struct Postgres(postgres::Client);

impl Database for Postgres {
    fn rows(&mut self) -> Vec<Row> {
        self.0
            .query(
                "SELECT seq, at, kind, call_seq, body, prev, hash FROM hintgate.audit ORDER BY seq",
                &[],
            )
            .unwrap()
            .iter()
            .map(|row| Row {
                seq: row.get(0),
                at: row.get(1),
                kind: row.get(2),
                call: row.get(3),
                body: row.get(4),
                prev: row.get(5),
                hash: row.get(6),
            })
            .collect()
    }

    fn execute(&mut self, sql: &str) {
        self.0
            .batch_execute(&sql.replace("{audit}", "hintgate.audit"))
            .unwrap();
    }

    fn replace_all(&mut self, rows: &[Row]) {
        let mut tx = self.0.transaction().unwrap();
        tx.execute("DELETE FROM hintgate.audit", &[]).unwrap();
        for row in rows {
            tx.execute(
                "INSERT INTO hintgate.audit (seq, at, kind, call_seq, body, prev, hash) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                &[&row.seq, &row.at, &row.kind, &row.call, &row.body, &row.prev, &row.hash],
            )
            .unwrap();
        }
        tx.commit().unwrap();
    }
}

/// Rewrites every row's link with the published, unkeyed chain: SHA-256
/// over the previous hash, the sequence number, time, kind, call and body.
fn rechain_plain(rows: &mut [Row]) {
    let mut prev = "0".repeat(64);
    for row in rows {
        let call = row.call.map_or(String::new(), |call| call.to_string());
        let text = format!(
            "{prev}\n{}\n{}\n{}\n{call}\n{}",
            row.seq, row.at, row.kind, row.body
        );
        row.prev = prev;
        row.hash = hex::encode(Sha256::digest(text.as_bytes()));
        prev = row.hash.clone();
    }
}

/// A log of 40 calls, some with outcomes.
fn fill(log: &dyn AuditLog) {
    for n in 0..10 {
        let calls: Vec<NewEntry> = (0..4)
            .map(|i| {
                hintgate_store::test_util::call_entry(
                    1_795_000_000 + n,
                    &json!({"server": "fs", "tool": format!("tool-{n}-{i}"), "verdict": "allow"}),
                )
            })
            .collect();
        log.append(&calls).unwrap();
    }
}

/// Rechains the rows from `from` (an index) with the plain chain, after
/// the link of the row before: the rows before keep their keyed links.
fn rechain_plain_from(rows: &mut [Row], from: usize) {
    let mut prev = rows[from - 1].hash.clone();
    for row in &mut rows[from..] {
        let call = row.call.map_or(String::new(), |call| call.to_string());
        let text = format!(
            "{prev}\n{}\n{}\n{}\n{call}\n{}",
            row.seq, row.at, row.kind, row.body
        );
        row.prev = prev;
        row.hash = hex::encode(Sha256::digest(text.as_bytes()));
        prev = row.hash.clone();
    }
}

/// An attack: what it does to the database.
type Attack = fn(&mut dyn Database);

/// The attacks, by name, with the problem codes `verify` must report, in
/// order, each once.
const ATTACKS: &[(&str, Attack, &[&str])] = &[
    (
        "edit a body",
        |db| {
            db.execute(
                "UPDATE {audit} SET body = replace(body, '\"allow\"', '\"deny\"') WHERE seq = 2",
            )
        },
        &["edited"],
    ),
    (
        "edit a body and recompute the plain chain",
        |db| {
            let mut rows = db.rows();
            rows[1].body = rows[1].body.replace("\"allow\"", "\"deny\"");
            rechain_plain(&mut rows);
            db.replace_all(&rows);
        },
        &["head-mismatch"],
    ),
    (
        "edit a body and recompute the plain chain from there on",
        |db| {
            let mut rows = db.rows();
            rows[10].body = rows[10].body.replace("\"allow\"", "\"deny\"");
            rechain_plain_from(&mut rows, 10);
            db.replace_all(&rows);
        },
        &["unkeyed-after-keyed", "head-mismatch"],
    ),
    (
        "delete the last records",
        |db| db.execute("DELETE FROM {audit} WHERE seq > 30"),
        &["cut-off"],
    ),
    (
        "delete every record",
        |db| db.execute("DELETE FROM {audit}"),
        &["cut-off"],
    ),
    (
        "delete a record in the middle",
        |db| db.execute("DELETE FROM {audit} WHERE seq = 17"),
        &["missing-records"],
    ),
    (
        "insert a record and recompute the plain chain",
        |db| {
            let mut rows = db.rows();
            let mut forged = rows[0].clone();
            forged.body = hintgate_store::test_util::call_entry(0, &json!({"tool": "forged"})).body;
            rows.insert(1, forged);
            for (idx, row) in rows.iter_mut().enumerate() {
                row.seq = i64::try_from(idx).unwrap() + 1;
            }
            rechain_plain(&mut rows);
            db.replace_all(&rows);
        },
        &["head-mismatch"],
    ),
    (
        "append a record with a made-up keyed link",
        |db| {
            let rows = db.rows();
            let last = rows.last().unwrap();
            let key_id = last.hash.split(':').nth(1).unwrap();
            let forged = Row {
                seq: last.seq + 1,
                prev: last.hash.clone(),
                hash: format!("hmac-sha256:{key_id}:{}", "ab".repeat(32)),
                body: hintgate_store::test_util::call_entry(0, &json!({"tool": "forged"})).body,
                ..last.clone()
            };
            let mut rows = rows.clone();
            rows.push(forged);
            db.replace_all(&rows);
        },
        &["edited"],
    ),
    (
        "swap two records",
        |db| {
            let mut rows = db.rows();
            let (first, second) = (rows[0].clone(), rows[1].clone());
            rows[0] = Row { seq: 1, ..second };
            rows[1] = Row { seq: 2, ..first };
            db.replace_all(&rows);
        },
        &["broken-link", "edited"],
    ),
    (
        "swap two records and recompute the plain chain",
        |db| {
            let mut rows = db.rows();
            let (first, second) = (rows[0].clone(), rows[1].clone());
            rows[0] = Row { seq: 1, ..second };
            rows[1] = Row { seq: 2, ..first };
            rechain_plain(&mut rows);
            db.replace_all(&rows);
        },
        &["head-mismatch"],
    ),
    (
        "prepend a duplicate key to a body",
        |db| {
            db.execute(
                "UPDATE {audit} SET body = '{\"verdict\":\"deny\",' || substr(body, 2) WHERE seq = 3",
            );
        },
        &["edited", "duplicate-key"],
    ),
    (
        "give a call record a kind hintgate does not know",
        |db| db.execute("UPDATE {audit} SET kind = 'note' WHERE seq = 5"),
        &["edited", "unknown-kind"],
    ),
    (
        "insert a record at sequence number 0",
        |db| {
            db.execute(
                "INSERT INTO {audit} (seq, at, kind, call_seq, body, prev, hash)
                 SELECT 0, at, kind, call_seq, replace(body, '\"allow\"', '\"deny\"'), prev, hash FROM {audit} WHERE seq = 1",
            )
        },
        &["seq-below-one"],
    ),
    (
        "insert records at negative sequence numbers",
        |db| {
            db.execute(
                "INSERT INTO {audit} (seq, at, kind, call_seq, body, prev, hash)
                 SELECT -seq, at, kind, call_seq, body, prev, hash FROM {audit} WHERE seq <= 3",
            )
        },
        &["seq-below-one"],
    ),
    (
        "move the first record to sequence number 0",
        |db| db.execute("UPDATE {audit} SET seq = 0 WHERE seq = 1"),
        &["missing-records", "seq-below-one"],
    ),
];

/// The problem codes of a verification, in order, each once.
pub(super) fn codes(verification: &Verification) -> Vec<&'static str> {
    let mut codes: Vec<&'static str> = Vec::new();
    for problem in &verification.problems {
        if !codes.contains(&problem.code()) {
            codes.push(problem.code());
        }
    }
    codes
}

/// Runs every attack on a new log a gateway opens with `open` (in a
/// directory of its own, which holds what the store keeps beside the
/// database), with `database` the attacker's access to it, and verifies it
/// with the store `reader` opens, as `hintgate log verify` does. A gateway
/// opened on it afterwards refuses when the log is shorter than its head or
/// another record is at the head's place, and opens otherwise.
fn every_attack_fails_verification<S: AuditLog, R: AuditLog>(
    open: impl Fn(&std::path::Path) -> Option<Result<S, StoreError>>,
    reader: impl Fn(&std::path::Path) -> R,
    database: impl Fn(&std::path::Path) -> Box<dyn Database>,
) {
    for (name, attack, expected) in ATTACKS {
        let dir = tempfile::tempdir().unwrap();
        let Some(log) = open(dir.path()) else {
            return;
        };
        let log = log.unwrap();
        fill(&log);
        assert!(
            log.verify().unwrap().complete(),
            "{name}: before the attack"
        );
        drop(log);
        attack(&mut *database(dir.path()));
        let verification = reader(dir.path()).verify().unwrap();
        assert_eq!(codes(&verification), *expected, "{name}: {verification:#?}");
        let rolled_back = expected
            .iter()
            .find(|code| ["cut-off", "head-mismatch"].contains(code));
        let refused = match open(dir.path()).unwrap() {
            Ok(_) => None,
            Err(StoreError::RolledBack(found)) => Some(found.found.code().to_owned()),
            Err(err) => Some(err.to_string()),
        };
        assert_eq!(
            refused.as_deref(),
            rolled_back.copied(),
            "{name}: the gateway opens unless the log is shorter than its head or another record is at its place"
        );
    }
}

#[test]
fn every_attack_on_a_sqlite_log_fails_verification() {
    every_attack_fails_verification(
        |dir| Some(SqliteStore::open(&dir.join("state.db"))),
        |dir| reader_of(&dir.join("state.db")),
        |dir| {
            Box::new(Sqlite(
                rusqlite::Connection::open(dir.join("state.db")).unwrap(),
            ))
        },
    );
}

/// The PostgreSQL database of each test directory.
static DATABASES: std::sync::Mutex<Vec<(std::path::PathBuf, String)>> =
    std::sync::Mutex::new(Vec::new());

pub(super) fn database_of(dir: &std::path::Path) -> Option<String> {
    let mut databases = DATABASES.lock().unwrap();
    if let Some((_, url)) = databases.iter().find(|(known, _)| known == dir) {
        return Some(url.clone());
    }
    let url = hintgate_store::test_util::postgres_database()?;
    databases.push((dir.to_owned(), url.clone()));
    Some(url)
}

/// A PostgreSQL store as a gateway opens it, its head in `dir`.
fn gateway_on_postgres(dir: &std::path::Path) -> Option<hintgate_store::PgStore> {
    Some(try_gateway_on_postgres(dir)?.unwrap())
}

/// A PostgreSQL store as a gateway opens it, its head in `dir`, or why it
/// did not open.
pub(super) fn try_gateway_on_postgres(
    dir: &std::path::Path,
) -> Option<Result<hintgate_store::PgStore, StoreError>> {
    let url = database_of(dir)?;
    Some(hintgate_store::PgStore::open_with(
        &url,
        AuditSetup {
            key: KeySource::Given(super::shared_key()),
            head: HeadPlace::Directory(dir.to_owned()),
            checkpoints: true,
            witness: Default::default(),
        },
    ))
}

/// A PostgreSQL store as `hintgate log verify` opens it on the machine of
/// the gateway whose head is in `dir`.
pub(super) fn postgres_reader(dir: &std::path::Path) -> hintgate_store::PgStore {
    hintgate_store::PgStore::open_with(
        &database_of(dir).unwrap(),
        AuditSetup {
            key: KeySource::Given(super::shared_key()),
            head: HeadPlace::Directory(dir.to_owned()),
            checkpoints: false,
            witness: Default::default(),
        },
    )
    .unwrap()
}

#[test]
fn every_attack_on_a_postgres_log_fails_verification() {
    every_attack_fails_verification(try_gateway_on_postgres, postgres_reader, |dir| {
        let url = database_of(dir).unwrap();
        Box::new(Postgres(
            postgres::Client::connect(&url, postgres::NoTls).unwrap(),
        ))
    });
}

// === the key and the head ===

/// Writes `count` call records chained the way logs were before the chain
/// was keyed (plain SHA-256 links), as an older hintgate left them.
fn unkeyed_rows(count: i64) -> Vec<Row> {
    let mut rows: Vec<Row> = (1..=count)
        .map(|seq| Row {
            seq,
            at: 1_790_000_000,
            kind: "call".to_owned(),
            call: None,
            body: hintgate_store::test_util::call_entry(0, &json!({"tool": format!("old-{seq}")}))
                .body,
            prev: String::new(),
            hash: String::new(),
        })
        .collect();
    rechain_plain(&mut rows);
    rows
}

/// A log written before the chain was keyed still verifies, said to be
/// only hash-chained; appends continue it under the key, and the keyed part
/// is checked with it.
fn an_unkeyed_log_verifies_and_goes_on_keyed<S: AuditLog>(
    dir: &std::path::Path,
    open: impl Fn(&std::path::Path) -> S,
    database: &mut dyn Database,
) {
    drop(open(dir));
    database.replace_all(&unkeyed_rows(3));
    let log = open(dir);
    let verification = log.verify().unwrap();
    assert!(verification.complete(), "{verification:#?}");
    assert_eq!(verification.unkeyed, Some(Span { first: 1, last: 3 }));
    assert_eq!(verification.keyed, None);
    assert!(
        matches!(verification.head, HeadState::Reached { seq: 0, .. }),
        "the head written with the key, before any record, is a lower bound: {verification:#?}"
    );
    fill(&log);
    let verification = log.verify().unwrap();
    assert!(verification.complete(), "{verification:#?}");
    assert_eq!(verification.unkeyed, Some(Span { first: 1, last: 3 }));
    assert_eq!(verification.keyed, Some(Span { first: 4, last: 43 }));
    assert!(
        matches!(
            verification.head,
            HeadState::Reached {
                seq: 43,
                sealed: true,
                ..
            }
        ),
        "{verification:#?}"
    );
    // Editing the unkeyed part and recomputing its plain chain cannot be
    // seen in it (that is what "only hash-chained" means), but the first
    // keyed record no longer follows.
    drop(log);
    let mut rows = database.rows();
    rows[0].body = rows[0].body.replace("old-1", "forged");
    rechain_plain(&mut rows[..3]);
    database.replace_all(&rows);
    let verification = open(dir).verify().unwrap();
    assert_eq!(
        verification.problems,
        [Problem::BrokenLink { seq: 4 }],
        "{verification:#?}"
    );
}

#[test]
fn an_unkeyed_sqlite_log_verifies_and_goes_on_keyed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    drop(SqliteStore::open(&path).unwrap());
    an_unkeyed_log_verifies_and_goes_on_keyed(
        dir.path(),
        |dir| SqliteStore::open(&dir.join("state.db")).unwrap(),
        &mut Sqlite(rusqlite::Connection::open(&path).unwrap()),
    );
}

#[test]
fn an_unkeyed_postgres_log_verifies_and_goes_on_keyed() {
    let dir = tempfile::tempdir().unwrap();
    let Some(log) = gateway_on_postgres(dir.path()) else {
        return;
    };
    drop(log);
    let url = database_of(dir.path()).unwrap();
    an_unkeyed_log_verifies_and_goes_on_keyed(
        dir.path(),
        |dir| gateway_on_postgres(dir).unwrap(),
        &mut Postgres(postgres::Client::connect(&url, postgres::NoTls).unwrap()),
    );
}

#[cfg(unix)]
#[test]
fn a_key_file_others_may_read_is_refused_naming_it() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    fill(&SqliteStore::open(&path).unwrap());
    let key = SqliteStore::key_path(&path);
    let before = std::fs::read(&key).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o640)).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(
        matches!(
            &err,
            StoreError::Key(KeyError::NotPrivate { path, mode: 0o640 }) if *path == key
        ),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains(&key.display().to_string()) && message.contains("chmod 600"),
        "{message}"
    );
    assert_eq!(std::fs::read(&key).unwrap(), before, "never replaced");
}

#[test]
fn a_missing_key_of_a_keyed_log_is_named_and_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let log = SqliteStore::open(&path).unwrap();
    fill(&log);
    let key_id = log.audit_key().unwrap().id().to_owned();
    drop(log);
    let key = SqliteStore::key_path(&path);
    std::fs::remove_file(&key).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(
        matches!(&err, StoreError::KeyMissing { key_id: named, .. } if *named == key_id),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&key.display().to_string()),
        "{err}"
    );
    assert!(!key.exists(), "no new key was made for the old chain");

    // Opened without a key, the log reads and verifies, its MACs unchecked.
    let log = SqliteStore::open_with(
        &path,
        AuditSetup {
            key: KeySource::None,
            head: HeadPlace::File(SqliteStore::head_path(&path)),
            checkpoints: false,
            witness: Default::default(),
        },
    )
    .unwrap();
    let verification = log.verify().unwrap();
    assert!(verification.holds(), "{verification:#?}");
    assert!(!verification.complete(), "the keyed part is not checked");
    assert_eq!(verification.key_id, None);
    assert!(
        matches!(
            verification.head,
            HeadState::Reached {
                seq: 40,
                sealed: false,
                ..
            }
        ),
        "{verification:#?}"
    );
    assert!(
        matches!(
            log.append(&[hintgate_store::test_util::call_entry(0, &json!({}))]),
            Err(StoreError::NoKey)
        ),
        "nothing is chained without the key"
    );
}

#[test]
fn a_damaged_or_removed_head_file_fails_verification() {
    for (name, damage, expected) in [
        (
            "cut the head file short",
            (|head: &std::path::Path| {
                let text = std::fs::read(head).unwrap();
                std::fs::write(head, &text[..text.len() / 2]).unwrap();
            }) as fn(&std::path::Path),
            "head-damaged",
        ),
        (
            "empty the head file",
            |head| std::fs::write(head, b"").unwrap(),
            "head-damaged",
        ),
        (
            "write an older head under another key",
            |head| {
                let text = std::fs::read_to_string(head).unwrap();
                let (sealed, _) = text.trim_end().rsplit_once(' ').unwrap();
                std::fs::write(head, format!("{sealed} {}\n", "00".repeat(32))).unwrap();
            },
            "head-damaged",
        ),
        (
            "remove the head file",
            |head| std::fs::remove_file(head).unwrap(),
            "head-missing",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        fill(&SqliteStore::open(&path).unwrap());
        // The records after the 30th go, with the head that named them.
        damage(&SqliteStore::head_path(&path));
        Sqlite(rusqlite::Connection::open(&path).unwrap())
            .execute("DELETE FROM {audit} WHERE seq > 30");
        let verification = reader_of(&path).verify().unwrap();
        assert_eq!(
            codes(&verification),
            [expected],
            "{name}: {verification:#?}"
        );
        assert!(
            matches!(verification.head, HeadState::Failed { .. }),
            "{name}"
        );
        // A gateway does not open it: its first commit would write a head
        // that hides the records cut off.
        assert!(
            matches!(
                SqliteStore::open(&path),
                Err(StoreError::RolledBack(found)) if found.found.code() == expected
            ),
            "{name}"
        );
    }
}

/// A store that reads the SQLite log at `path` as `hintgate log verify`
/// does: the key read from its file, the head beside the database, nothing
/// written.
pub(super) fn reader_of(path: &std::path::Path) -> SqliteStore {
    let key = match hintgate_store::AuditKey::load(&SqliteStore::key_path(path)) {
        Ok(key) => KeySource::Given(key),
        Err(_) => KeySource::None,
    };
    SqliteStore::open_with(
        path,
        AuditSetup {
            key,
            head: HeadPlace::File(SqliteStore::head_path(path)),
            checkpoints: false,
            witness: Default::default(),
        },
    )
    .unwrap()
}

#[test]
fn a_sqlite_log_deleted_with_its_head_is_told_from_a_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let head = SqliteStore::head_path(&path);
    // A new log: the gateway writes the head with the key it makes, so the
    // first run, before any record, verifies.
    drop(SqliteStore::open(&path).unwrap());
    let verification = reader_of(&path).verify().unwrap();
    assert!(verification.complete(), "{verification:#?}");
    assert!(
        matches!(
            verification.head,
            HeadState::Reached {
                seq: 0,
                sealed: true,
                ..
            }
        ),
        "{verification:#?}"
    );

    // The head removed from the empty log: not a new log any more.
    std::fs::remove_file(&head).unwrap();
    let verification = reader_of(&path).verify().unwrap();
    assert_eq!(codes(&verification), ["log-deleted"], "{verification:#?}");
    assert!(matches!(verification.head, HeadState::Failed { .. }));
    // A gateway does not open it (its first commit would write the head
    // that hides it), and a handle that is not a gateway's appends nothing.
    assert!(matches!(
        SqliteStore::open(&path),
        Err(StoreError::RolledBack(found)) if found.found == hintgate_store::HeadFound::LogDeleted
    ));
    assert!(!head.exists(), "no head hides the deletion");
    let reader = reader_of(&path);
    let entry = hintgate_store::test_util::call_entry(0, &json!({"tool": "x"}));
    assert!(matches!(
        reader.append(std::slice::from_ref(&entry)),
        Err(StoreError::RolledBack(_))
    ));
    assert_eq!(codes(&reader.verify().unwrap()), ["log-deleted"]);
    // Accepted: a record says so, and the gateway opens.
    let accepted = reader.accept_rollback().unwrap().unwrap();
    assert_eq!(accepted.seq, 1);
    assert_eq!(
        accepted.rollback.found,
        hintgate_store::HeadFound::LogDeleted
    );
    assert_eq!(reader.accept_rollback().unwrap(), None, "once");
    assert_eq!(codes(&reader.verify().unwrap()), ["rolled-back"]);
    drop(reader);

    // Records, then all of them deleted with their head.
    fill(&SqliteStore::open(&path).unwrap());
    assert_eq!(codes(&reader_of(&path).verify().unwrap()), ["rolled-back"]);
    Sqlite(rusqlite::Connection::open(&path).unwrap()).execute("DELETE FROM {audit}");
    std::fs::remove_file(&head).unwrap();
    let verification = reader_of(&path).verify().unwrap();
    assert_eq!(codes(&verification), ["log-deleted"], "{verification:#?}");

    // Without the key, nothing tells it from a log no gateway wrote yet.
    std::fs::remove_file(SqliteStore::key_path(&path)).unwrap();
    let verification = reader_of(&path).verify().unwrap();
    assert!(verification.holds(), "{verification:#?}");
    assert!(matches!(verification.head, HeadState::NotYet { .. }));
}

#[test]
fn a_gateway_on_an_empty_postgres_log_writes_its_head_at_zero() {
    let dir = tempfile::tempdir().unwrap();
    let Some(log) = gateway_on_postgres(dir.path()) else {
        return;
    };
    let verification = log.verify().unwrap();
    assert!(verification.complete(), "{verification:#?}");
    assert!(
        matches!(verification.head, HeadState::Reached { seq: 0, .. }),
        "{verification:#?}"
    );
    // Another machine's gateway, the shared key copied to it, has no head
    // yet: its head of the shared log starts at 0 too, and a missing one is
    // never taken for a deleted log (the key is copied before its gateway
    // writes anything).
    let head = log.head_path().unwrap().to_owned();
    drop(log);
    std::fs::remove_file(&head).unwrap();
    let log = gateway_on_postgres(dir.path()).unwrap();
    assert!(head.exists());
    assert!(log.verify().unwrap().complete());
    drop(log);
    std::fs::remove_file(&head).unwrap();
    let url = database_of(dir.path()).unwrap();
    let reader = hintgate_store::PgStore::open_with(
        &url,
        AuditSetup {
            key: KeySource::Given(super::shared_key()),
            head: HeadPlace::Directory(dir.path().to_owned()),
            checkpoints: false,
            witness: Default::default(),
        },
    )
    .unwrap();
    let verification = reader.verify().unwrap();
    assert!(verification.complete(), "{verification:#?}");
    assert!(!head.exists(), "a reader writes no head");
}

#[test]
fn a_postgres_log_whose_id_was_changed_to_hide_its_head_fails_verification() {
    let dir = tempfile::tempdir().unwrap();
    let Some(log) = gateway_on_postgres(dir.path()) else {
        return;
    };
    fill(&log);
    assert!(log.verify().unwrap().complete());
    let head = log.head_path().unwrap().to_owned();
    drop(log);
    // The whole log deleted, and the salt the head's name comes from
    // changed: the head is now looked for under another name.
    let url = database_of(dir.path()).unwrap();
    let mut db = Postgres(postgres::Client::connect(&url, postgres::NoTls).unwrap());
    db.execute(&format!(
        "DELETE FROM {{audit}}; UPDATE hintgate.meta SET value = '{}' WHERE key = 'salt';",
        "ab".repeat(32)
    ));
    let reader = || {
        hintgate_store::PgStore::open_with(
            &url,
            AuditSetup {
                key: KeySource::Given(super::shared_key()),
                head: HeadPlace::Directory(dir.path().to_owned()),
                checkpoints: false,
                witness: Default::default(),
            },
        )
        .unwrap()
    };
    let verification = reader().verify().unwrap();
    assert_ne!(reader().head_path(), Some(head.as_path()));
    assert_eq!(
        codes(&verification),
        ["head-of-other-log"],
        "{verification:#?}"
    );
    // A gateway started on it begins a head under the new name; the old
    // one still gives it away.
    drop(gateway_on_postgres(dir.path()).unwrap());
    let verification = reader().verify().unwrap();
    assert_eq!(
        codes(&verification),
        ["head-of-other-log"],
        "{verification:#?}"
    );
}

#[test]
fn a_postgres_log_takes_no_record_without_the_shared_key() {
    let dir = tempfile::tempdir().unwrap();
    let Some(log) = gateway_on_postgres(dir.path()) else {
        return;
    };
    fill(&log);
    let url = database_of(dir.path()).unwrap();
    let entry = hintgate_store::test_util::call_entry(0, &json!({"tool": "x"}));
    // Without a key: refused.
    let keyless = hintgate_store::PgStore::open(&url).unwrap();
    assert!(matches!(
        keyless.append(std::slice::from_ref(&entry)),
        Err(StoreError::NoKey)
    ));
    // With another key: refused, naming both keys.
    let other_key = hintgate_store::AuditKey::from_secret([4; 32]);
    let other = hintgate_store::PgStore::open_with(
        &url,
        AuditSetup {
            key: KeySource::Given(other_key.clone()),
            head: HeadPlace::None,
            checkpoints: false,
            witness: Default::default(),
        },
    )
    .unwrap();
    let err = other.append(std::slice::from_ref(&entry)).unwrap_err();
    assert!(
        matches!(&err, StoreError::OtherKey { found, ours } if found == super::shared_key().id() && ours == other_key.id()),
        "{err:?}"
    );
    // Nothing was written, and the log still holds.
    let verification = log.verify().unwrap();
    assert!(verification.complete(), "{verification:#?}");
    assert_eq!(verification.checked, 40);
    // The keyless handle reads and verifies it, its MACs unchecked.
    let verification = keyless.verify().unwrap();
    assert!(verification.holds() && !verification.complete());
}

#[test]
fn the_head_names_the_last_commit_and_never_a_failed_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let log = SqliteStore::open(&path).unwrap();
    fill(&log);
    let head_of = |log: &SqliteStore| match log.verify().unwrap().head {
        HeadState::Reached {
            seq, sealed: true, ..
        } => Some(seq),
        _ => None,
    };
    assert_eq!(head_of(&log), Some(40));
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(
            "CREATE TRIGGER refuse BEFORE INSERT ON audit WHEN NEW.body LIKE '%refused%'
             BEGIN SELECT RAISE(ABORT, 'refused by the test'); END;",
        )
        .unwrap();
    let entry = |tool: &str| hintgate_store::test_util::call_entry(0, &json!({"tool": tool}));
    assert!(log.append(&[entry("kept"), entry("refused")]).is_err());
    assert_eq!(
        head_of(&log),
        Some(40),
        "a failed commit does not move the head"
    );
    assert_eq!(log.append(&[entry("after")]).unwrap(), [41]);
    assert_eq!(head_of(&log), Some(41));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Any change to any stored column of any record of a keyed log, or
    /// the loss of any record, fails verification.
    #[test]
    fn any_change_to_a_keyed_record_fails_verification(
        record in 0usize..12,
        column in 0usize..7,
        salt in 1i64..1000,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let log = SqliteStore::open(&path).unwrap();
        for n in 0..4 {
            let calls: Vec<NewEntry> = (0..3)
                .map(|i| {
                    if i == 2 {
                        hintgate_store::test_util::outcome_entry(
                            1_795_000_000 + n,
                            1,
                            hintgate_store::record::OutcomeCode::Ok,
                        )
                    } else {
                        hintgate_store::test_util::call_entry(
                            1_795_000_000 + n,
                            &json!({"tool": format!("t{n}{i}"), "n": n}),
                        )
                    }
                })
                .collect();
            log.append(&calls).unwrap();
        }
        drop(log);
        let mut database = Sqlite(rusqlite::Connection::open(&path).unwrap());
        let mut rows = database.rows();
        let row = &mut rows[record];
        match column {
            0 => row.at += salt,
            1 => row.kind = if row.kind == "call" { "outcome".into() } else { "call".into() },
            2 => row.call = Some(row.call.unwrap_or(0) + salt),
            3 => row.body = row.body.replace('}', &format!(",\"x\":{salt}}}")),
            4 => row.prev = format!("{salt:064x}"),
            5 => row.hash = row.hash.replace(['a', '0'], "b"),
            _ => {
                rows.remove(record);
            }
        }
        database.replace_all(&rows);
        let verification = reader_of(&path).verify().unwrap();
        proptest::prop_assert!(!verification.holds(), "{record} {column}: {verification:#?}");
    }
}

// === the witness ===

/// HMAC-SHA-256 of `text` under `key`.
fn hmac(key: &[u8], text: &[u8]) -> [u8; 32] {
    use hmac::Mac as _;
    let mut mac = hmac::Hmac::<Sha256>::new_from_slice(key).unwrap();
    mac.update(text);
    mac.finalize().into_bytes().into()
}

/// What the audit key's holder can do, from the documented derivation:
/// chain the rows from `from` (an index) on again under the key, and write
/// a head for the last one.
fn rechain_keyed(rows: &mut [Row], from: usize, secret: &[u8; 32], head: &std::path::Path) {
    let chain = hmac(secret, b"hintgate audit chain v1");
    let id = hex::encode(&hmac(secret, b"hintgate audit key id v1")[..8]);
    let mut prev = rows[from - 1].hash.clone();
    for row in &mut rows[from..] {
        let call = row.call.map_or(String::new(), |call| call.to_string());
        let covered = format!(
            "{prev}\n{}\n{}\n{}\n{call}\n{}",
            row.seq, row.at, row.kind, row.body
        );
        row.prev = prev;
        row.hash = format!(
            "hmac-sha256:{id}:{}",
            hex::encode(hmac(&chain, covered.as_bytes()))
        );
        prev = row.hash.clone();
    }
    let last = rows.last().unwrap();
    let sealed = format!("hintgate-audit-head v1 {:020} {}", last.seq, last.hash);
    let mac = hex::encode(hmac(
        &hmac(secret, b"hintgate audit head v1"),
        sealed.as_bytes(),
    ));
    std::fs::write(head, format!("{sealed} {mac}\n")).unwrap();
}

/// A witness catches what `verify` alone cannot: a rewrite by the audit
/// key's holder, who also holds the current witness key but not the ones
/// of the epochs already checkpointed.
fn the_witness_finds_a_rewrite_by_the_keys_holder<S: AuditLog>(
    dir: &std::path::Path,
    open: impl Fn(&std::path::Path) -> S,
    database: &mut dyn Database,
    secret: [u8; 32],
) {
    let head = open(dir).head_path().unwrap().to_owned();
    let elsewhere = tempfile::tempdir().unwrap();
    let witness = elsewhere.path().join("witness.log");
    let state = hintgate_store::witness_state_path(&head);
    let k0 = hintgate_store::setup_witness(&state, &witness).unwrap();
    // Two runs of the gateway: each checkpoints at its first commit.
    fill(&open(dir));
    open(dir)
        .append(&[hintgate_store::test_util::call_entry(
            1_795_000_100,
            &json!({"tool": "late"}),
        )])
        .unwrap();
    let log = open(dir);
    let verification = log.verify_with_witness(&witness, &k0).unwrap();
    assert!(verification.complete(), "{verification:#?}");
    let found = verification.witness.unwrap();
    assert_eq!(found.checkpoints, 2);
    assert_eq!(
        found.last,
        Some(hintgate_store::Checkpointed { seq: 41, epoch: 2 }),
        "epochs start at 1: epoch 0's key is the verification key"
    );
    // The wrong verification key checks nothing.
    let wrong: hintgate_store::WitnessKey = "07".repeat(32).parse().unwrap();
    assert_eq!(
        codes(&log.verify_with_witness(&witness, &wrong).unwrap()),
        ["witness-forged"]
    );
    drop(log);

    // The key's holder turns the second call into a deny and chains the
    // log again under the key, with a new head: the log verifies.
    let mut rows = database.rows();
    rows[1].body = rows[1].body.replace("\"allow\"", "\"deny\"");
    rechain_keyed(&mut rows, 1, &secret, &head);
    database.replace_all(&rows);
    let rewritten = open(dir).verify().unwrap();
    assert!(
        rewritten.complete(),
        "the key's holder beats verify alone: {rewritten:#?}"
    );
    // The witness does not move.
    let verification = open(dir).verify_with_witness(&witness, &k0).unwrap();
    assert_eq!(
        verification.problems,
        [
            Problem::WitnessMismatch { seq: 4, line: 1 },
            Problem::WitnessMismatch { seq: 41, line: 2 },
        ],
        "{verification:#?}"
    );

    // With the current witness key from the state file, old checkpoints
    // cannot be made again: one sealed for epoch 1 does not check.
    let stolen: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    assert_eq!(stolen["epoch"], 3);
    let stolen_key = hex::decode(stolen["key"].as_str().unwrap()).unwrap();
    let sealed = format!(
        "hintgate-witness v1 epoch=1 seq=4 at=0 link={}",
        rows[3].hash
    );
    let forged = format!(
        "{sealed} mac={}\n",
        hex::encode(hmac(&stolen_key, sealed.as_bytes()))
    );
    let text = std::fs::read_to_string(&witness).unwrap();
    let second = text.lines().nth(1).unwrap();
    std::fs::write(&witness, format!("{forged}{second}\n")).unwrap();
    let verification = open(dir).verify_with_witness(&witness, &k0).unwrap();
    assert_eq!(codes(&verification), ["witness-forged", "witness-mismatch"]);
}

#[test]
fn the_witness_finds_a_rewrite_of_a_sqlite_log_by_the_keys_holder() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    drop(SqliteStore::open(&path).unwrap());
    let secret: [u8; 32] = hex::decode(
        std::fs::read_to_string(SqliteStore::key_path(&path))
            .unwrap()
            .trim(),
    )
    .unwrap()
    .try_into()
    .unwrap();
    the_witness_finds_a_rewrite_by_the_keys_holder(
        dir.path(),
        |dir| SqliteStore::open(&dir.join("state.db")).unwrap(),
        &mut Sqlite(rusqlite::Connection::open(&path).unwrap()),
        secret,
    );
}

#[test]
fn the_witness_finds_a_rewrite_of_a_postgres_log_by_the_keys_holder() {
    let dir = tempfile::tempdir().unwrap();
    if gateway_on_postgres(dir.path()).is_none() {
        return;
    }
    let url = database_of(dir.path()).unwrap();
    the_witness_finds_a_rewrite_by_the_keys_holder(
        dir.path(),
        |dir| gateway_on_postgres(dir).unwrap(),
        &mut Postgres(postgres::Client::connect(&url, postgres::NoTls).unwrap()),
        [9; 32],
    );
}
