//! The audit verifier over arbitrary databases.
//!
//! A real SQLite store, keyed and keeping its head, records a few calls and
//! outcomes (once per process; each input starts from a copy of its files).
//! The fuzzer then edits the `audit` table behind the store's back, as
//! someone who can write the file would: changed columns, flipped bytes,
//! deleted, inserted, renumbered and swapped records, a cut-off tail, and a
//! removed or damaged head file. Checked: verifying never panics, a log
//! with any row changed (rows below sequence number 1 and the whole log
//! deleted with its head included) does not hold, and an untouched log
//! holds.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use arbitrary::Arbitrary;
use hintgate_store::record::{
    Arguments, CallRecord, OutcomeCode, OutcomeItem, OutcomeRecord, OutcomesRecord, Verdict,
};
use hintgate_store::{
    AuditKey, AuditLog, AuditSetup, HeadPlace, KeySource, NewEntry, Record, SqliteStore,
};
use libfuzzer_sys::fuzz_target;
use rusqlite::{Connection, params};
use serde_json::json;

const SECRET: [u8; 32] = [7; 32];
/// Records in the log the fuzzer starts from.
const RECORDS: i64 = 7;

#[derive(Debug, Arbitrary)]
enum Column {
    At,
    Kind,
    Call,
    Body,
    Prev,
    Hash,
}

#[derive(Debug, Arbitrary)]
enum Edit {
    Text {
        seq: u8,
        column: Column,
        text: String,
    },
    Number {
        seq: u8,
        column: Column,
        number: i64,
    },
    Null {
        seq: u8,
        column: Column,
    },
    FlipByte {
        seq: u8,
        column: Column,
        at: u16,
        with: u8,
    },
    CopyColumn {
        from: u8,
        to: u8,
        column: Column,
    },
    Delete {
        seq: u8,
    },
    CutFrom {
        seq: u8,
    },
    Renumber {
        seq: u8,
        to: i16,
    },
    Swap {
        a: u8,
        b: u8,
    },
    Duplicate {
        seq: u8,
        to: i16,
    },
    RemoveHead,
    CutHead {
        len: u8,
    },
}

fuzz_target!(|edits: Vec<Edit>| {
    let Some(template) = template() else {
        return;
    };
    let Ok(dir) = tempfile::tempdir() else {
        return;
    };
    let path = dir.path().join("state.db");
    let head = SqliteStore::head_path(&path);
    if std::fs::write(&path, &template.db).is_err()
        || std::fs::write(&head, &template.head).is_err()
    {
        return;
    }
    let before = rows(&path);
    if let Ok(connection) = Connection::open(&path) {
        for edit in edits.iter().take(8) {
            apply(&connection, &head, edit);
        }
    }
    let after = rows(&path);
    let Ok(store) = open(&path) else {
        // A database too damaged to open is refused, which is reported.
        return;
    };
    let Ok(verification) = store.verify() else {
        return;
    };
    let head_kept = std::fs::read(&head).ok().as_deref() == Some(&template.head[..]);
    if before != after {
        // (The whole log deleted with its head is `log-deleted`: the key is
        // at hand, and a gateway writes the head when it makes the key.)
        assert!(
            !verification.holds(),
            "a changed log holds\nbefore: {before:#?}\nafter: {after:#?}\nedits: {edits:#?}\n{verification:#?}"
        );
    } else if before == after && head_kept {
        assert!(
            verification.holds(),
            "an untouched log does not hold: {verification:#?}"
        );
    }
});

/// The files of the log every input starts from.
struct Template {
    db: Vec<u8>,
    head: Vec<u8>,
}

fn template() -> Option<&'static Template> {
    static TEMPLATE: OnceLock<Option<Template>> = OnceLock::new();
    TEMPLATE.get_or_init(make_template).as_ref()
}

fn make_template() -> Option<Template> {
    let dir = tempfile::tempdir().ok()?;
    let path = dir.path().join("state.db");
    {
        let store = open(&path).ok()?;
        // Records as the gateway writes them, through the record types.
        let call = |tool: &str, verdict: Verdict| {
            NewEntry::of(
                1_700_000_000,
                None,
                &Record::Call(Box::new(CallRecord {
                    approver: "read-only".into(),
                    arguments: Arguments::from_value(&json!({"path": "/tmp/a"})),
                    edit: None,
                    egress: None,
                    host: None,
                    idempotency: None,
                    identity: Some("sha256:fs".into()),
                    instance: None,
                    instance_identity: None,
                    outcome: None,
                    pin: None,
                    preview: None,
                    reasons: vec!["read-only".into()],
                    request: "1".into(),
                    server: "fs".into(),
                    session: "fuzz".into(),
                    token_scope: None,
                    tool: tool.into(),
                    verdict,
                })),
            )
        };
        let outcome = |at: i64, call: u64, ms: u64, outcome: OutcomeCode| {
            NewEntry::of(
                at,
                Some(call),
                &Record::Outcome(OutcomeRecord {
                    attempt: 0,
                    duration_ms: ms,
                    outcome,
                }),
            )
        };
        let ended = |call: u64, outcome: OutcomeCode| OutcomeItem {
            attempt: 0,
            call,
            duration_ms: 1,
            outcome,
        };
        store.append(&[call("read_file", Verdict::Allow)]).ok()?;
        store
            .append(&[outcome(1_700_000_001, 1, 12, OutcomeCode::Ok)])
            .ok()?;
        store
            .append(&[
                call("write_file", Verdict::Ask),
                call("delete", Verdict::Deny),
            ])
            .ok()?;
        store
            .append(&[
                NewEntry::of(
                    1_700_000_005,
                    None,
                    &Record::Outcomes(OutcomesRecord {
                        outcomes: vec![ended(3, OutcomeCode::Ok), ended(4, OutcomeCode::Denied)],
                    }),
                ),
                call("list", Verdict::Allow),
                outcome(1_700_000_006, 6, 3, OutcomeCode::Failed),
            ])
            .ok()?;
        let count = store.entries(0, 100).ok()?.len();
        if i64::try_from(count).ok()? != RECORDS {
            return None;
        }
    }
    // Everything in the main file, so that one copy is the whole log.
    Connection::open(&path)
        .ok()?
        .pragma_update(None, "journal_mode", "DELETE")
        .ok()?;
    Some(Template {
        db: std::fs::read(&path).ok()?,
        head: std::fs::read(SqliteStore::head_path(&path)).ok()?,
    })
}

fn open(path: &Path) -> Result<SqliteStore, hintgate_store::StoreError> {
    SqliteStore::open_with(
        path,
        AuditSetup {
            key: KeySource::Given(AuditKey::from_secret(SECRET)),
            head: HeadPlace::File(SqliteStore::head_path(path)),
            checkpoints: false,
            witness: Default::default(),
        },
    )
}

/// Every row, each column as SQL would write it (so a value stored under
/// another type counts as changed), rows below sequence number 1 too.
fn rows(path: &PathBuf) -> Vec<String> {
    let Ok(connection) = Connection::open(path) else {
        return Vec::new();
    };
    let Ok(mut statement) = connection.prepare(
        "SELECT quote(seq) || ' ' || quote(at) || ' ' || quote(kind) || ' ' || quote(call_seq) \
         || ' ' || quote(body) || ' ' || quote(prev) || ' ' || quote(hash) FROM audit ORDER BY seq",
    ) else {
        return Vec::new();
    };
    statement
        .query_map([], |row| row.get::<_, String>(0))
        .map(|rows| rows.filter_map(Result::ok).collect())
        .unwrap_or_default()
}

fn column(column: &Column) -> &'static str {
    match column {
        Column::At => "at",
        Column::Kind => "kind",
        Column::Call => "call_seq",
        Column::Body => "body",
        Column::Prev => "prev",
        Column::Hash => "hash",
    }
}

fn seq(n: u8) -> i64 {
    i64::from(n) % (RECORDS + 2)
}

fn apply(connection: &Connection, head: &Path, edit: &Edit) {
    // A statement the database refuses (a constraint) changes nothing.
    let _ = match edit {
        Edit::Text {
            seq: n,
            column: c,
            text,
        } => connection.execute(
            &format!("UPDATE audit SET {} = ?1 WHERE seq = ?2", column(c)),
            params![text, seq(*n)],
        ),
        Edit::Number {
            seq: n,
            column: c,
            number,
        } => connection.execute(
            &format!("UPDATE audit SET {} = ?1 WHERE seq = ?2", column(c)),
            params![number, seq(*n)],
        ),
        Edit::Null { seq: n, column: c } => connection.execute(
            &format!("UPDATE audit SET {} = NULL WHERE seq = ?1", column(c)),
            params![seq(*n)],
        ),
        Edit::FlipByte {
            seq: n,
            column: c,
            at,
            with,
        } => {
            let name = column(c);
            let text: Option<String> = connection
                .query_row(
                    &format!("SELECT CAST({name} AS TEXT) FROM audit WHERE seq = ?1"),
                    params![seq(*n)],
                    |row| row.get(0),
                )
                .ok()
                .flatten();
            let Some(text) = text else { return };
            let mut bytes = text.into_bytes();
            if bytes.is_empty() {
                return;
            }
            let idx = usize::from(*at) % bytes.len();
            if let Some(byte) = bytes.get_mut(idx) {
                *byte ^= (*with).max(1);
            }
            match String::from_utf8(bytes) {
                Ok(text) => connection.execute(
                    &format!("UPDATE audit SET {name} = ?1 WHERE seq = ?2"),
                    params![text, seq(*n)],
                ),
                Err(_) => return,
            }
        }
        Edit::CopyColumn {
            from,
            to,
            column: c,
        } => {
            let name = column(c);
            connection.execute(
                &format!("UPDATE audit SET {name} = (SELECT {name} FROM audit WHERE seq = ?1) WHERE seq = ?2"),
                params![seq(*from), seq(*to)],
            )
        }
        Edit::Delete { seq: n } => {
            connection.execute("DELETE FROM audit WHERE seq = ?1", params![seq(*n)])
        }
        Edit::CutFrom { seq: n } => {
            connection.execute("DELETE FROM audit WHERE seq >= ?1", params![seq(*n)])
        }
        Edit::Renumber { seq: n, to } => connection.execute(
            "UPDATE audit SET seq = ?1 WHERE seq = ?2",
            params![i64::from(*to), seq(*n)],
        ),
        Edit::Swap { a, b } => connection
            .execute_batch(&format!(
                "UPDATE audit SET seq = -1000 WHERE seq = {a};
             UPDATE audit SET seq = {a} WHERE seq = {b};
             UPDATE audit SET seq = {b} WHERE seq = -1000;",
                a = seq(*a),
                b = seq(*b)
            ))
            .map(|()| 0),
        Edit::Duplicate { seq: n, to } => connection.execute(
            "INSERT INTO audit (seq, at, kind, call_seq, body, prev, hash) \
             SELECT ?1, at, kind, call_seq, body, prev, hash FROM audit WHERE seq = ?2",
            params![i64::from(*to), seq(*n)],
        ),
        Edit::RemoveHead => {
            let _ = std::fs::remove_file(head);
            return;
        }
        Edit::CutHead { len } => {
            if let Ok(text) = std::fs::read(head) {
                let keep = usize::from(*len).min(text.len());
                let _ = std::fs::write(head, text.get(..keep).unwrap_or_default());
            }
            return;
        }
    };
}
