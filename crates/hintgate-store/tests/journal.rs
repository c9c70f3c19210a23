//! The audit journal against a real SQLite index: import of ended runs
//! (once, however many processes import), `interrupted` for what a crash
//! left pending, and what `verify` says of each attack on the journal
//! files.
#![expect(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "test code: a failed unwrap or index is a failed test"
)]

use std::io::Write as _;
use std::path::{Path, PathBuf};

use hintgate_store::journal::{
    self, JournalSettings, JournalWriter, Stop, import_ended, segment_name,
};
use hintgate_store::record::{OutcomeCode, OutcomeRecord, Record};
use hintgate_store::{AuditLog, EntryKind, NewEntry, Problem, SqliteStore};
use serde_json::json;

/// A store in a fresh state directory.
fn store() -> (tempfile::TempDir, PathBuf, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let store = SqliteStore::open(&db).unwrap();
    (dir, db, store)
}

/// A call record the gateway forwards (no outcome of its own).
fn forwarded(n: u64) -> NewEntry {
    hintgate_store::test_util::call_entry(1_795_000_000, &json!({"arguments": {"n": n}}))
}

/// The outcome of the call numbered `call` in its run.
fn outcome(call: u64) -> NewEntry {
    NewEntry::of(
        1_795_000_001,
        Some(call),
        &Record::Outcome(OutcomeRecord {
            attempt: 0,
            duration_ms: 3,
            outcome: OutcomeCode::Ok,
        }),
    )
}

/// Writes run `run`'s journal beside `store`, in the turns given, and ends
/// the run (its lock released) unless `keep` holds the writer.
fn run_of(store: &SqliteStore, run: &str, turns: &[Vec<NewEntry>]) -> JournalWriter {
    let index = store.journal_index().unwrap();
    let mut writer = JournalWriter::create(
        index.journal_dir(),
        run,
        store.audit_key().unwrap(),
        JournalSettings::default(),
    )
    .unwrap();
    for turn in turns {
        // Every call of these runs is forwarded.
        let forwarded: Vec<bool> = turn
            .iter()
            .map(|entry| entry.kind == EntryKind::Call)
            .collect();
        writer.append(turn, &forwarded).unwrap();
    }
    writer
}

fn segment(db: &Path, run: &str) -> PathBuf {
    SqliteStore::journal_dir(db).join(segment_name(run, 0))
}

fn codes(problems: &[Problem]) -> Vec<&'static str> {
    problems.iter().map(Problem::code).collect()
}

#[test]
fn an_ended_run_is_imported_once_and_its_pending_calls_are_interrupted() {
    let (_dir, _db, store) = store();
    // Call 1 was answered; call 2 was forwarded when the run ended.
    drop(run_of(
        &store,
        "r-1",
        &[vec![forwarded(1)], vec![outcome(1), forwarded(2)]],
    ));
    let imported = import_ended(&store).unwrap();
    assert_eq!(
        (imported.records, imported.interrupted, imported.runs),
        (3, 1, 1)
    );
    let entries = store.entries(0, 10).unwrap();
    assert_eq!(entries.len(), 4);
    // The outcome names its call by the log's number, and the interrupted
    // one the call left pending.
    assert_eq!(entries[1].kind, Some(EntryKind::Outcome));
    assert_eq!(entries[1].call, Some(entries[0].seq));
    assert_eq!(entries[3].call, Some(entries[2].seq));
    assert_eq!(entries[3].body["outcome"], "interrupted");
    // Again: nothing more.
    assert_eq!(import_ended(&store).unwrap(), journal::Imported::default());
    assert_eq!(store.entries(0, 10).unwrap().len(), 4);
    assert!(store.verify().unwrap().complete());
    let check = journal::verify(&store).unwrap();
    assert_eq!(check.problems, vec![]);
    assert_eq!((check.runs, check.live, check.records), (1, 0, 3));
}

#[test]
fn two_processes_importing_at_once_import_each_record_once() {
    let (_dir, db, store) = store();
    let turns: Vec<Vec<NewEntry>> = (1..=300).map(|n| vec![forwarded(n)]).collect();
    drop(run_of(&store, "r-2", &turns));
    drop(store);
    let importers: Vec<_> = (0..2)
        .map(|_| {
            let db = db.clone();
            std::thread::spawn(move || {
                // Each its own connection, as two starting gateways have.
                let store = SqliteStore::open(&db).unwrap();
                import_ended(&store).unwrap()
            })
        })
        .collect();
    let done: Vec<_> = importers
        .into_iter()
        .map(|importer| importer.join().unwrap())
        .collect();
    assert_eq!(done.iter().map(|one| one.records).sum::<u64>(), 300);
    assert_eq!(done.iter().map(|one| one.interrupted).sum::<u64>(), 300);
    let store = SqliteStore::open(&db).unwrap();
    assert_eq!(store.entries(0, 1000).unwrap().len(), 600);
    assert!(store.verify().unwrap().complete());
    assert_eq!(journal::verify(&store).unwrap().problems, vec![]);
}

#[test]
fn a_live_runs_journal_is_never_imported() {
    let (_dir, _db, store) = store();
    let live = run_of(&store, "r-live", &[vec![forwarded(1)]]);
    let imported = import_ended(&store).unwrap();
    assert_eq!(imported, journal::Imported::default());
    assert!(store.entries(0, 10).unwrap().is_empty());
    // Its records not yet indexed are no problem while it runs.
    let check = journal::verify(&store).unwrap();
    assert_eq!((check.runs, check.live), (1, 1));
    assert_eq!(check.problems, vec![]);
    drop(live);
    assert_eq!(import_ended(&store).unwrap().records, 1);
}

#[test]
fn a_torn_tail_is_reported_and_what_came_before_it_imported() {
    let (_dir, db, store) = store();
    drop(run_of(
        &store,
        "r-3",
        &[vec![forwarded(1)], vec![outcome(1), forwarded(2)]],
    ));
    // The crash came in the middle of the second write.
    let path = segment(&db, "r-3");
    let bytes = std::fs::read(&path).unwrap();
    let first = 8 + 4 + u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
    std::fs::write(&path, &bytes[..first + 30]).unwrap();
    let imported = import_ended(&store).unwrap();
    assert_eq!((imported.records, imported.interrupted), (1, 1));
    assert_eq!(
        imported.stops,
        vec![(
            "r-3".to_owned(),
            Stop::Torn {
                segment: 0,
                offset: first as u64
            }
        )]
    );
    let check = journal::verify(&store).unwrap();
    assert_eq!(check.problems, vec![]);
    assert_eq!(check.torn.len(), 1);
}

#[test]
fn a_journal_edited_cut_swapped_or_deleted_is_named_by_verify() {
    let (_dir, db, store) = store();
    let turns = [vec![forwarded(1), forwarded(2)], vec![forwarded(3)]];
    drop(run_of(&store, "r-a", &turns));
    drop(run_of(&store, "r-b", &turns));
    import_ended(&store).unwrap();
    assert_eq!(journal::verify(&store).unwrap().problems, vec![]);
    let a = segment(&db, "r-a");
    let b = segment(&db, "r-b");
    let original = std::fs::read(&a).unwrap();

    // A byte of the second record's body changed: the chain breaks there.
    let frames = frame_ends(&original);
    let mut edited = original.clone();
    edited[frames[0] + 40] ^= 1;
    std::fs::write(&a, &edited).unwrap();
    let check = journal::verify(&store).unwrap();
    assert_eq!(codes(&check.problems), ["journal-broken"]);
    assert!(matches!(&check.problems[0], Problem::JournalBroken { run, n: 2, .. } if run == "r-a"));

    // The last record cut off (whole frames): the log holds more.
    std::fs::write(&a, &original[..frames[1]]).unwrap();
    let check = journal::verify(&store).unwrap();
    assert_eq!(codes(&check.problems), ["journal-cut"]);

    // Run b's journal put in place of run a's: its chain is run b's.
    std::fs::write(&a, std::fs::read(&b).unwrap()).unwrap();
    let check = journal::verify(&store).unwrap();
    assert_eq!(codes(&check.problems), ["journal-broken"]);

    // Deleted: the log holds records of a run whose journal is gone.
    std::fs::remove_file(&a).unwrap();
    let check = journal::verify(&store).unwrap();
    assert_eq!(codes(&check.problems), ["journal-missing"]);

    // The log's copy of a record changed (its link made again with the
    // key would hide it from the log's own chain): the journal says so.
    std::fs::write(&a, &original).unwrap();
    let connection = rusqlite::Connection::open(&db).unwrap();
    connection
        .execute(
            "UPDATE audit SET body = replace(body, '\"n\":3', '\"n\":4') WHERE seq = 3",
            [],
        )
        .unwrap();
    let check = journal::verify(&store).unwrap();
    assert_eq!(codes(&check.problems), ["journal-index-differs"]);
}

#[test]
fn a_planted_journal_or_a_giant_frame_imports_nothing_and_allocates_nothing() {
    let (_dir, db, store) = store();
    drop(run_of(&store, "r-4", &[vec![forwarded(1)]]));
    // A frame length of 4 GiB after the first record.
    let path = segment(&db, "r-4");
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    file.write_all(&u32::MAX.to_le_bytes()).unwrap();
    file.write_all(&[7u8; 100]).unwrap();
    // A journal of a run that never was, written without the key.
    let forged = SqliteStore::journal_dir(&db).join(segment_name("r-forged", 0));
    let mut bytes = journal::SEGMENT_MAGIC.to_vec();
    let body = br#"{"tool":"x"}"#;
    let len = (8 + 8 + 8 + 1 + 1 + 4 + body.len() + 32) as u32;
    bytes.extend_from_slice(&len.to_le_bytes());
    bytes.extend_from_slice(&1u64.to_le_bytes());
    bytes.extend_from_slice(&0i64.to_le_bytes());
    bytes.extend_from_slice(&0u64.to_le_bytes());
    bytes.push(1);
    bytes.push(4);
    bytes.extend_from_slice(b"call");
    bytes.extend_from_slice(body);
    bytes.extend_from_slice(&[0u8; 32]);
    std::fs::write(&forged, &bytes).unwrap();

    let imported = import_ended(&store).unwrap();
    assert_eq!(imported.records, 1, "only the real run's record");
    assert_eq!(store.entries(0, 10).unwrap().len(), 2);
    let check = journal::verify(&store).unwrap();
    assert_eq!(codes(&check.problems), ["journal-broken", "journal-broken"]);
}

/// Where each frame of a segment ends.
fn frame_ends(segment: &[u8]) -> Vec<usize> {
    let mut ends = Vec::new();
    let mut at = 8;
    while at + 4 <= segment.len() {
        let len = u32::from_le_bytes(segment[at..at + 4].try_into().unwrap()) as usize;
        at += 4 + len;
        ends.push(at);
    }
    ends
}

#[test]
fn a_run_indexed_in_part_before_its_crash_has_every_call_left_open_interrupted() {
    let (_dir, db, store) = store();
    let mut writer = run_of(&store, "r-5", &[vec![forwarded(1), forwarded(2)]]);
    // Its indexer had indexed the first turn when the run crashed.
    let index = store.journal_index().unwrap();
    let mut reader = journal::RunReader::new(
        &SqliteStore::journal_dir(&db),
        "r-5",
        vec![0],
        store.audit_key().unwrap(),
        None,
    );
    let first: Vec<journal::Journaled> = (0..2)
        .map(|_| {
            let frame = reader.next_frame().unwrap().unwrap();
            journal::Journaled {
                position: frame.position,
                entry: frame.entry,
                forwarded: frame.forwarded,
            }
        })
        .collect();
    let mut calls = std::collections::HashMap::new();
    assert_eq!(index.index("r-5", &first, &mut calls).unwrap(), 2);
    writer
        .append(&[outcome(1), forwarded(3)], &[false, true])
        .unwrap();
    drop(writer);
    let imported = import_ended(&store).unwrap();
    assert_eq!((imported.records, imported.interrupted), (2, 2));
    let entries = store.entries(0, 10).unwrap();
    let interrupted: Vec<Option<u64>> = entries
        .iter()
        .filter(|entry| entry.body["outcome"] == "interrupted")
        .map(|entry| entry.call)
        .collect();
    // Calls 2 and 3 (the log's 2 and 4); call 1 had its outcome.
    assert_eq!(interrupted, [Some(2), Some(4)]);
    assert_eq!(journal::verify(&store).unwrap().problems, vec![]);
}

/// Hands `frames` of `run`'s journal (by their numbers, 1 first) to the
/// index as one batch, with no memory of the run's calls (each call an
/// outcome names is looked up in the index).
fn index_frames(store: &SqliteStore, db: &Path, run: &str, from: u64, to: u64) {
    let index = store.journal_index().unwrap();
    let mut reader = journal::RunReader::new(
        &SqliteStore::journal_dir(db),
        run,
        vec![0],
        store.audit_key().unwrap(),
        None,
    );
    let mut batch = Vec::new();
    while let Some(frame) = reader.next_frame().unwrap() {
        if (from..=to).contains(&frame.position.n) {
            batch.push(journal::Journaled {
                position: frame.position,
                entry: frame.entry,
                forwarded: frame.forwarded,
            });
        }
    }
    let mut calls = std::collections::HashMap::new();
    assert_eq!(
        index.index(run, &batch, &mut calls).unwrap(),
        (to - from + 1) as usize
    );
}

#[test]
fn runs_indexed_in_turns_between_each_other_name_each_record_and_call_rightly() {
    let (_dir, db, store) = store();
    let a = run_of(
        &store,
        "r-a",
        &[
            vec![forwarded(1), forwarded(2)],
            vec![outcome(2), outcome(1)],
        ],
    );
    let b = run_of(
        &store,
        "r-b",
        &[vec![forwarded(1), forwarded(2), outcome(1)]],
    );
    // The log: a's 1 and 2, then b's three, then a's outcomes, whose calls
    // are in an earlier batch of a.
    index_frames(&store, &db, "r-a", 1, 2);
    index_frames(&store, &db, "r-b", 1, 3);
    index_frames(&store, &db, "r-a", 3, 4);
    let index = store.journal_index().unwrap();
    let seqs = |run: &str| -> Vec<Option<u64>> {
        (1..=5).map(|n| index.seq_of(run, n).unwrap()).collect()
    };
    assert_eq!(seqs("r-a"), [Some(1), Some(2), Some(6), Some(7), None]);
    assert_eq!(seqs("r-b"), [Some(3), Some(4), Some(5), None, None]);
    assert_eq!(index.seq_of("r-c", 1).unwrap(), None);
    let entries = store.entries(0, 10).unwrap();
    assert_eq!(entries[5].call, Some(2), "a's outcome of its call 2");
    assert_eq!(entries[6].call, Some(1), "a's outcome of its call 1");
    assert_eq!(entries[4].call, Some(3), "b's outcome of its call 1");
    // One row of the index per batch.
    let connection = rusqlite::Connection::open(&db).unwrap();
    let rows: i64 = connection
        .query_row("SELECT count(*) FROM journal_index", [], |row| row.get(0))
        .unwrap();
    assert_eq!(rows, 3);
    drop((a, b));
    assert_eq!(import_ended(&store).unwrap().interrupted, 1, "b's call 2");
    let check = journal::verify(&store).unwrap();
    assert_eq!(check.problems, vec![]);
    assert_eq!(check.records, 7);

    // A span moved to other records of the log: verify names each record
    // it now points at wrongly.
    connection
        .execute(
            "UPDATE journal_index SET seq = seq + 1 WHERE run = 'r-b'",
            [],
        )
        .unwrap();
    let check = journal::verify(&store).unwrap();
    assert_eq!(
        codes(&check.problems),
        [
            "journal-index-differs",
            "journal-index-differs",
            "journal-index-differs"
        ]
    );
}

#[test]
fn an_index_of_one_row_per_record_from_before_reads_the_same_after_the_upgrade() {
    let (_dir, db, store) = store();
    let turns = [
        vec![forwarded(1), forwarded(2)],
        vec![outcome(1), forwarded(3)],
    ];
    drop(run_of(&store, "r-old", &turns));
    import_ended(&store).unwrap();
    let before = store.entries(0, 10).unwrap();
    drop(store);
    // The index as schema 11 kept it: a row per record.
    let connection = rusqlite::Connection::open(&db).unwrap();
    connection
        .execute_batch(
            "DROP TABLE journal_index;
             CREATE TABLE journal_index (
                 run TEXT NOT NULL, n INTEGER NOT NULL, seq INTEGER NOT NULL,
                 segment INTEGER NOT NULL, offset INTEGER NOT NULL,
                 PRIMARY KEY (run, n)) WITHOUT ROWID;
             INSERT INTO journal_index VALUES
                 ('r-old', 1, 1, 0, 0), ('r-old', 2, 2, 0, 0),
                 ('r-old', 3, 3, 0, 0), ('r-old', 4, 4, 0, 0);
             PRAGMA user_version = 11;",
        )
        .unwrap();
    drop(connection);
    let store = SqliteStore::open(&db).unwrap();
    let index = store.journal_index().unwrap();
    let seqs: Vec<Option<u64>> = (1..=5).map(|n| index.seq_of("r-old", n).unwrap()).collect();
    assert_eq!(seqs, [Some(1), Some(2), Some(3), Some(4), None]);
    assert_eq!(store.entries(0, 10).unwrap(), before);
    let check = journal::verify(&store).unwrap();
    assert_eq!(check.problems, vec![]);
    assert_eq!(check.records, 4);
}
