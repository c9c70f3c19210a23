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
