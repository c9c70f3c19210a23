//! The journals' index in SQLite: [`JournalIndex`] for [`SqliteStore`].
//!
//! Two tables: `journal_runs` (schema 10), one row per run with the
//! position of its last indexed record and whether it is closed, and
//! `journal_index` (schema 12), one row per indexed batch, a span: records
//! `n` to `n + count - 1` of its run are the log's `seq` to
//! `seq + count - 1` (a batch's records are appended to the log in one
//! transaction, so their sequence numbers follow each other). One B-tree
//! insert a batch, not one a record: the per-record row, keyed by run and
//! number, cost the indexer as much as the log's own insert. Each write is
//! one `BEGIN IMMEDIATE` transaction that reads the run's last number
//! first, so two processes indexing one run write each record once.

use std::collections::HashMap;
use std::path::Path;

use rusqlite::{OptionalExtension, params};

use crate::audit::{Immediate, append_in_transaction};
use crate::journal::{JournalIndex, Journaled, Position, RunState, in_log_ending, interrupted};
use crate::{NewEntry, SqliteStore, StoreError};

/// A number as SQLite keeps it.
fn to_sql(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A number SQLite gave back.
fn from_sql(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// The run's row: its last record's position and whether it is closed.
fn run_row(connection: &rusqlite::Connection, run: &str) -> Result<Option<RunState>, StoreError> {
    Ok(connection
        .prepare_cached("SELECT n, segment, offset, link, closed FROM journal_runs WHERE run = ?1")?
        .query_row(params![run], run_state_of)
        .optional()?)
}

fn run_state_of(row: &rusqlite::Row<'_>) -> rusqlite::Result<RunState> {
    let link: Vec<u8> = row.get(3)?;
    let mut last = [0u8; 32];
    if link.len() == 32 {
        last.copy_from_slice(&link);
    }
    Ok(RunState {
        last: Position {
            n: from_sql(row.get(0)?),
            segment: u32::try_from(row.get::<_, i64>(1)?).unwrap_or(0),
            offset: from_sql(row.get(2)?),
            link: last,
        },
        closed: row.get::<_, i64>(4)? != 0,
    })
}

/// Records (or moves on) the run's last position.
fn set_run(
    connection: &rusqlite::Connection,
    run: &str,
    last: &Position,
    closed: bool,
) -> Result<(), StoreError> {
    connection
        .prepare_cached(
            "INSERT INTO journal_runs (run, n, segment, offset, link, closed)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (run) DO UPDATE SET n = excluded.n, segment = excluded.segment,
                 offset = excluded.offset, link = excluded.link, closed = excluded.closed",
        )?
        .execute(params![
            run,
            to_sql(last.n),
            i64::from(last.segment),
            to_sql(last.offset),
            last.link.as_slice(),
            i64::from(closed)
        ])?;
    Ok(())
}

/// The log's number of record `n` of `run`: found in the span that begins
/// at or before `n`, when it reaches `n`.
fn seq_in(connection: &rusqlite::Connection, run: &str, n: u64) -> Result<Option<u64>, StoreError> {
    let span = connection
        .prepare_cached(
            "SELECT n, seq, count FROM journal_index WHERE run = ?1 AND n <= ?2
             ORDER BY n DESC LIMIT 1",
        )?
        .query_row(params![run, to_sql(n)], |row| {
            Ok((
                from_sql(row.get(0)?),
                from_sql(row.get(1)?),
                from_sql(row.get(2)?),
            ))
        })
        .optional()?;
    Ok(span.and_then(|(first, seq, count): (u64, u64, u64)| {
        let into = n.checked_sub(first)?;
        (into < count).then(|| seq.saturating_add(into))
    }))
}

/// The log's last sequence number (0: empty).
fn last_seq(connection: &rusqlite::Connection) -> Result<u64, StoreError> {
    Ok(connection
        .prepare_cached("SELECT seq FROM audit ORDER BY seq DESC LIMIT 1")?
        .query_row([], |row| row.get::<_, i64>(0))
        .optional()?
        .map_or(0, from_sql))
}

impl JournalIndex for SqliteStore {
    fn journal_dir(&self) -> &Path {
        &self.journal_dir
    }

    fn index(
        &self,
        run: &str,
        records: &[Journaled],
        calls: &mut HashMap<u64, u64>,
    ) -> Result<usize, StoreError> {
        if records.is_empty() {
            return Ok(0);
        }
        self.keying.may_append()?;
        let connection = self.lock();
        let transaction = Immediate::begin(&connection)?;
        let state = run_row(&connection, run)?;
        if state.is_some_and(|state| state.closed) {
            return Ok(0);
        }
        let done = state.map_or(0, |state| state.last.n);
        let fresh: Vec<&Journaled> = records
            .iter()
            .filter(|record| record.position.n > done)
            .collect();
        let Some(first) = fresh.first() else {
            return Ok(0);
        };
        // One span: each record follows the one before.
        if let Some((at, record)) = fresh
            .iter()
            .enumerate()
            .find(|(idx, record)| record.position.n != done + 1 + *idx as u64)
        {
            return Err(StoreError::Corrupt(format!(
                "record {} of run {run}'s journal does not follow record {}, the last indexed",
                record.position.n,
                done + at as u64
            )));
        }
        // The log numbers the records it appends from its end on.
        let base = last_seq(&connection)? + 1;
        let mut entries: Vec<NewEntry> = Vec::with_capacity(fresh.len());
        let mut ended: Vec<u64> = Vec::new();
        for (idx, record) in fresh.iter().enumerate() {
            let mut unknown = None;
            let (entry, ends) = in_log_ending(&record.entry, |call| {
                calls
                    .get(&call)
                    .copied()
                    .or_else(|| seq_in(&connection, run, call).ok().flatten())
                    .or_else(|| {
                        unknown = Some(call);
                        None
                    })
            })
            .ok_or_else(|| {
                StoreError::Corrupt(format!(
                    "record {} of run {run}'s journal ends call {}, which the run did not record",
                    record.position.n,
                    unknown.unwrap_or(0)
                ))
            })?;
            if record.forwarded {
                calls.insert(record.position.n, base + idx as u64);
            }
            entries.push(entry);
            ended.extend(ends);
        }
        let (seqs, tail) = append_in_transaction(&connection, &entries, self.keying.key.as_ref())?;
        if seqs.first() != Some(&base) {
            return Err(StoreError::Corrupt(format!(
                "the log numbered run {run}'s records from {:?}, not {base}",
                seqs.first()
            )));
        }
        if seqs.len() != fresh.len()
            || seqs
                .iter()
                .enumerate()
                .any(|(idx, seq)| *seq != base + idx as u64)
        {
            return Err(StoreError::Corrupt(format!(
                "the log did not number run {run}'s records one after another"
            )));
        }
        connection
            .prepare_cached(
                "INSERT INTO journal_index (run, n, seq, count) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![
                run,
                to_sql(first.position.n),
                to_sql(base),
                to_sql(fresh.len() as u64),
            ])?;
        for call in ended {
            calls.remove(&call);
        }
        let last = fresh
            .last()
            .map_or(first.position, |record| record.position);
        set_run(&connection, run, &last, false)?;
        transaction.commit()?;
        self.keying.committed(&tail);
        Ok(fresh.len())
    }

    fn run_state(&self, run: &str) -> Result<Option<RunState>, StoreError> {
        run_row(&self.lock(), run)
    }

    fn runs(&self) -> Result<Vec<(String, RunState)>, StoreError> {
        let connection = self.lock();
        let mut statement = connection.prepare(
            "SELECT n, segment, offset, link, closed, run FROM journal_runs ORDER BY run",
        )?;
        let rows =
            statement.query_map([], |row| Ok((row.get::<_, String>(5)?, run_state_of(row)?)))?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    fn close(&self, run: &str, open: &[u64]) -> Result<u64, StoreError> {
        self.keying.may_append()?;
        let connection = self.lock();
        let transaction = Immediate::begin(&connection)?;
        let state = run_row(&connection, run)?;
        if state.is_some_and(|state| state.closed) {
            return Ok(0);
        }
        let mut seqs = Vec::with_capacity(open.len());
        for call in open {
            if let Some(seq) = seq_in(&connection, run, *call)? {
                seqs.push(seq);
            }
        }
        let now = crate::unix_now();
        let entries: Vec<NewEntry> = seqs.iter().map(|seq| interrupted(*seq, now)).collect();
        let tail = if entries.is_empty() {
            None
        } else {
            let (_, tail) = append_in_transaction(&connection, &entries, self.keying.key.as_ref())?;
            Some(tail)
        };
        let last = state.map_or(
            Position {
                n: 0,
                segment: 0,
                offset: 0,
                link: [0; 32],
            },
            |state| state.last,
        );
        set_run(&connection, run, &last, true)?;
        transaction.commit()?;
        if let Some(tail) = tail {
            self.keying.committed(&tail);
        }
        Ok(seqs.len() as u64)
    }

    fn seq_of(&self, run: &str, n: u64) -> Result<Option<u64>, StoreError> {
        seq_in(&self.lock(), run, n)
    }
}
