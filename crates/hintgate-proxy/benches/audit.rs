//! Audit appends with durability on, as the gateway makes them: one commit
//! per turn of its event loop.
//!
//! Each call's record must be durable before the call is sent upstream; the
//! gateway adds the records made while it handles one turn (every call that
//! arrived together) to one batch and commits it in one transaction on its
//! own thread, then sends those calls. What matters is how many records per
//! second a turn's commit makes durable when `BATCH` calls arrived together:
//! one call at a time, 16 in flight, 128 in flight. The benchmark appends
//! `RECORDS` call records in batches of `BATCH`, each batch one `append`
//! that must return before the next, and divan reports records per second.
//!
//! It is written over the [`AuditLog`] trait: each backend is one entry of
//! `backends()` (the default SQLite store, in a fresh temporary directory per
//! sample, with its key and head file beside the database as a gateway
//! opens it; the in-memory log as the ceiling; and PostgreSQL, in a fresh
//! database per sample, with a key and a head file in a temporary directory,
//! when `HINTGATE_TEST_POSTGRES_URL` names a server, as `./scripts/test` and
//! `scripts/postgres` provide). Every append chains its records with the
//! keyed MAC and, where the store keeps one, writes the head after its
//! commit.
//!
//! `journal_write` is what a gateway on SQLite pays on the call path
//! instead (one `write(2)` of a turn's frames to its run's journal), and
//! `index_journaled` the work its indexer thread does off it.
//!
//! `cargo bench -p hintgate-proxy --bench audit` runs it in full; under
//! `cargo test` each case runs once, so it stays a test that the path works.
#![expect(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "benchmark set-up: a failure should stop it loudly"
)]

use std::sync::Arc;

use divan::Bencher;
use divan::counter::ItemsCount;
use hintgate_store::{
    AuditKey, AuditLog, AuditSetup, EntryKind, HeadPlace, KeySource, MemoryStore, NewEntry,
    PgStore, SqliteStore,
};
use serde_json::json;

fn main() {
    divan::main();
}

/// Records committed per sample.
const RECORDS: usize = 2_000;

/// The backends, by name: PostgreSQL only when a server is configured.
fn backends() -> Vec<&'static str> {
    let mut backends = vec!["sqlite", "memory"];
    if std::env::var_os(hintgate_store::test_util::POSTGRES_URL_VAR).is_some() {
        backends.push("postgres");
    }
    backends
}

/// A fresh, empty log of `backend`, and the directory that holds it.
fn open(backend: &str) -> (Arc<dyn AuditLog>, Option<tempfile::TempDir>) {
    match backend {
        "sqlite" => {
            let dir = tempfile::tempdir().unwrap();
            let store = SqliteStore::open(&dir.path().join("state.db")).unwrap();
            (Arc::new(store), Some(dir))
        }
        "memory" => (Arc::new(MemoryStore::default()), None),
        "postgres" => {
            let dir = tempfile::tempdir().unwrap();
            let url = hintgate_store::test_util::postgres_database()
                .expect("a PostgreSQL server is configured");
            let audit = AuditSetup {
                key: KeySource::Given(AuditKey::generate().unwrap()),
                head: HeadPlace::Directory(dir.path().to_owned()),
                checkpoints: true,
                witness: Default::default(),
            };
            (
                Arc::new(PgStore::open_with(&url, audit).unwrap()),
                Some(dir),
            )
        }
        other => panic!("unknown backend `{other}`"),
    }
}

/// A call record as the gateway writes one (about 600 bytes of JSON).
fn record(n: usize) -> NewEntry {
    NewEntry::from_value(
        1_795_989_518,
        EntryKind::Call,
        None,
        &json!({
            "session": "41234-1795989518000",
            "request": format!("\"host-{n}\""),
            "server": "fs",
            "identity": "4f1c2a9be0d34e7f8a61c0b5d2e9f3a7c6b8d1e0f2a3b4c5d6e7f8091a2b3c4d",
            "tool": "read_file",
            "arguments": {"path": format!("/home/me/docs/notes-{n}.md"), "head": 40},
            "verdict": "allow",
            "reasons": ["read-only"],
            "approver": "read-only",
            "pin": "sha256:9a1f0c3e5b7d2f4a6c8e0b1d3f5a7c9e1b3d5f7a9c1e3b5d7f9a1c3e5b7d9f1a",
        }),
    )
}

/// Commits `RECORDS` records in turns of `BATCH` records each.
#[divan::bench(args = backends(), consts = [1, 16, 128], sample_count = 10, sample_size = 1)]
fn append_durably<const BATCH: usize>(bencher: Bencher<'_, '_>, backend: &str) {
    bencher
        .counter(ItemsCount::new(RECORDS))
        .with_inputs(|| {
            let records: Vec<NewEntry> = (0..RECORDS).map(record).collect();
            let (log, dir) = open(backend);
            (log, records, dir)
        })
        .bench_local_values(|(log, records, dir)| {
            for turn in records.chunks(BATCH) {
                let seqs = log.append(turn).expect("the records are durable");
                assert_eq!(seqs.len(), turn.len());
            }
            // Dropped after the sample is timed: the directory is removed
            // outside the measurement.
            (log, dir)
        });
}

/// What a gateway on SQLite pays on the call path: each turn's records
/// written to the run's journal in one `write(2)` (`durability = "write"`),
/// the index fed later by its thread (not measured here: see
/// `journal_and_index`).
#[divan::bench(consts = [1, 16, 128], sample_count = 10, sample_size = 1)]
fn journal_write<const BATCH: usize>(bencher: Bencher<'_, '_>) {
    use hintgate_store::journal::{JournalSettings, JournalWriter};
    bencher
        .counter(ItemsCount::new(RECORDS))
        .with_inputs(|| {
            let records: Vec<NewEntry> = (0..RECORDS).map(record).collect();
            let dir = tempfile::tempdir().unwrap();
            let writer = JournalWriter::create(
                dir.path(),
                "bench-1",
                &AuditKey::from_secret([3; 32]),
                JournalSettings::default(),
            )
            .unwrap();
            (writer, records, dir)
        })
        .bench_local_values(|(mut writer, records, dir)| {
            for turn in records.chunks(BATCH) {
                let positions = writer
                    .append(turn, &[true; BATCH])
                    .expect("the records are written");
                assert_eq!(positions.len(), turn.len());
            }
            (writer, dir)
        });
}

/// The indexer's work on SQLite, off the call path: journaled records
/// appended to the store's log in batches of `BATCH` (what it gathers in
/// 20 ms under load), with their index rows.
#[divan::bench(consts = [16, 128, 1024], sample_count = 10, sample_size = 1)]
fn index_journaled<const BATCH: usize>(bencher: Bencher<'_, '_>) {
    use hintgate_store::journal::{JournalSettings, JournalWriter, Journaled};
    bencher
        .counter(ItemsCount::new(RECORDS))
        .with_inputs(|| {
            let records: Vec<NewEntry> = (0..RECORDS).map(record).collect();
            let dir = tempfile::tempdir().unwrap();
            let db = dir.path().join("state.db");
            let store = SqliteStore::open(&db).unwrap();
            let mut writer = JournalWriter::create(
                &SqliteStore::journal_dir(&db),
                "bench-1",
                store.audit_key().unwrap(),
                JournalSettings::default(),
            )
            .unwrap();
            let journaled: Vec<Journaled> = writer
                .append(&records, &[true; RECORDS])
                .unwrap()
                .into_iter()
                .zip(records)
                .map(|(position, entry)| Journaled {
                    position,
                    entry,
                    forwarded: true,
                })
                .collect();
            (store, journaled, dir)
        })
        .bench_local_values(|(store, journaled, dir)| {
            let index = store.journal_index().unwrap();
            let mut calls = std::collections::HashMap::new();
            for batch in journaled.chunks(BATCH) {
                let indexed = index.index("bench-1", batch, &mut calls).unwrap();
                assert_eq!(indexed, batch.len());
            }
            (store, dir)
        });
}
