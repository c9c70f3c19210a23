//! The audit log, a keyed chain: one record per tool call that reached the
//! gateway, and the outcome of each call that was sent on, in a record of
//! its own ([`EntryKind::Outcome`](crate::EntryKind::Outcome)) or, with the outcomes of the other calls
//! that ended in the same turn of the gateway, in one shared record
//! ([`EntryKind::Outcomes`](crate::EntryKind::Outcomes)).
//!
//! Each record carries the link of the one before (`prev`) and its own
//! (`hash`): HMAC-SHA-256, under the chain subkey of the audit key
//! ([`AuditKey`]), of the link before, the record's sequence number, time,
//! kind, call and body, each as stored, so someone who can write the
//! database but not read the key can neither edit a record nor make a new
//! chain. A keyed link reads `hmac-sha256:KEYID:MAC`, naming the key it was
//! made with. Logs written before the chain was keyed hold records whose link
//! is the plain SHA-256 of the same bytes (64 hexadecimal digits); they stay
//! readable, and [`AuditLog::verify`] says which part of a log is only
//! hash-chained. Appending after them continues the chain, keyed.
//!
//! After each commit, a store that keeps a head file writes the last
//! sequence number and link there, sealed with the key (see `head.rs`), so
//! records cut off the end of the log are found too.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::params;
use serde::Serialize;

use crate::body::{self, Malformed};
use crate::entry::{
    Entry, GENESIS, Link, NewEntry, keyed_link, keyed_tail, kind_from, kind_name, link_of,
    mac_matches, plain_link,
};
use crate::head::{self, HeadRead, HeadWriter};
use crate::key::AuditKey;
use crate::record::Record;
use crate::rollback::{AcceptedRollback, Rollback};
use crate::standing::IndexRow;
use crate::witness::{self, Checker, WitnessKey, WitnessWriter};
use crate::{MemoryStore, SqliteStore, StoreError, from_sql, to_sql};

/// The most problems [`AuditLog::verify`] lists; it counts the rest.
const MAX_PROBLEMS: usize = 100;

/// A run of records, by sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Span {
    /// The first record's sequence number.
    pub first: u64,
    /// The last record's sequence number.
    pub last: u64,
}

/// What [`AuditLog::verify`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verification {
    /// Records read.
    pub checked: u64,
    /// The records chained only with the plain hash (written before the
    /// log was keyed): anyone who can write the database could have
    /// rewritten them and their chain.
    pub unkeyed: Option<Span>,
    /// The records chained under a key.
    pub keyed: Option<Span>,
    /// The id of the key their links were checked with; `None` when no key
    /// was at hand, so the keyed records' MACs were not checked (their
    /// order and links were).
    pub key_id: Option<String>,
    /// What became of the head.
    pub head: HeadState,
    /// What the witness holds, when one was checked.
    pub witness: Option<WitnessState>,
    /// What is wrong, in the order found (at most 100).
    pub problems: Vec<Problem>,
    /// Problems found beyond those listed.
    pub more_problems: u64,
}

/// What [`AuditLog::verify_with_witness`] found in the witness.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WitnessState {
    /// The witness file.
    pub path: String,
    /// Checkpoints read.
    pub checkpoints: u64,
    /// The last checkpoint that holds: its record's sequence number and its
    /// epoch.
    pub last: Option<Checkpointed>,
}

/// A checkpoint that holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Checkpointed {
    /// The record it names.
    pub seq: u64,
    /// Its epoch.
    pub epoch: u64,
}

/// What [`AuditLog::verify`] found of the head.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum HeadState {
    /// This log keeps no head (an in-memory log).
    NotKept,
    /// No head file yet, and no keyed record that would have written one.
    NotYet {
        /// Where it would be.
        path: String,
    },
    /// The chain reaches the head, and the record at its sequence number
    /// has its link.
    Reached {
        /// The head file.
        path: String,
        /// The head's sequence number.
        seq: u64,
        /// Whether its seal was checked with the key (without the key,
        /// anyone who can write the file could have written it).
        sealed: bool,
    },
    /// The head does not hold; [`Verification::problems`] says how.
    Failed {
        /// The head file.
        path: String,
    },
}

/// One thing [`AuditLog::verify`] found wrong. Each has a stable kebab-case
/// code ([`Problem::code`]), listed in `docs/diagnostics.md`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "problem", rename_all = "kebab-case")]
pub enum Problem {
    /// The record's link does not match its content: it was edited (or
    /// moved from another place, or its link was made without the key).
    Edited {
        /// The record.
        seq: u64,
    },
    /// Sequence numbers are missing: records were deleted.
    MissingRecords {
        /// The first missing sequence number.
        first: u64,
        /// The last.
        last: u64,
    },
    /// The record's `prev` is not the link of the record before it: a
    /// record was inserted, deleted or moved before it.
    BrokenLink {
        /// The record.
        seq: u64,
    },
    /// A record chained with the plain hash after keyed records: the log
    /// was rewritten without the key.
    UnkeyedAfterKeyed {
        /// The record.
        seq: u64,
    },
    /// The record was chained under another key than the one checked with
    /// (or than the records before it); the first of each such run.
    OtherKey {
        /// The record.
        seq: u64,
        /// The id of the key its link names.
        key_id: String,
    },
    /// The record's kind is not one hintgate writes.
    UnknownKind {
        /// The record.
        seq: u64,
        /// Its stored kind.
        kind: String,
    },
    /// The record's body repeats a key.
    DuplicateKey {
        /// The record.
        seq: u64,
        /// The repeated key.
        key: String,
    },
    /// The record's body is JSON but not canonical.
    NotCanonical {
        /// The record.
        seq: u64,
    },
    /// The record's body is not JSON.
    NotJson {
        /// The record.
        seq: u64,
    },
    /// The record's body is canonical JSON, but not the fields hintgate
    /// writes for a record of its kind (a grant, a revocation, an accepted
    /// rollback).
    UnexpectedBody {
        /// The record.
        seq: u64,
        /// Its stored kind.
        kind: String,
    },
    /// The record accepts a log that was not the one its head was written
    /// for (`hintgate log accept-rollback`): records were lost before it,
    /// and the standing approvals granted before it approve nothing.
    RolledBack {
        /// The record.
        seq: u64,
        /// What was found, as `verify` names it (`cut-off`,
        /// `head-mismatch`, `head-missing`, `head-damaged`,
        /// `head-unreadable`, `log-deleted`).
        found: String,
        /// The record the head named, when it named one.
        head_seq: Option<u64>,
        /// The log's last record when it was accepted.
        log_end: u64,
    },
    /// A grant, revocation or accepted rollback that the approval index
    /// does not list: its index row was deleted, which would let a standing
    /// approval put back from an older copy count again.
    ApprovalIndexMissing {
        /// The record.
        seq: u64,
    },
    /// A row of the approval index that does not list the record at its
    /// sequence number as that record is (another kind, key or tool, a
    /// record the index does not list, or a column stored as another
    /// type): it was changed or put there.
    ApprovalIndexWrong {
        /// The sequence number the row gives.
        seq: i64,
    },
    /// The log ends before its head: records were cut off the end.
    CutOff {
        /// The last sequence number in the log (0 when it is empty).
        log_end: u64,
        /// The head's sequence number.
        head_seq: u64,
    },
    /// The record at the head's sequence number does not have the head's
    /// link: the end of the log was replaced.
    HeadMismatch {
        /// The head's sequence number.
        seq: u64,
    },
    /// Keyed records but no head file: it was removed.
    HeadMissing {
        /// Where it should be.
        path: String,
    },
    /// The head file is not a head, or its seal does not match the key.
    HeadDamaged {
        /// The head file.
        path: String,
        /// What is wrong with it.
        why: String,
    },
    /// The head file is there but cannot be read.
    HeadUnreadable {
        /// The head file.
        path: String,
        /// What the operating system said.
        error: String,
    },
    /// A row stored with a sequence number below 1, where the log never
    /// numbers a record (it starts at 1): someone who can write the
    /// database put it there, where a reader that follows the log from its
    /// start would not see it.
    SeqBelowOne {
        /// Its sequence number.
        seq: i64,
    },
    /// A column of the record is stored as another type than hintgate
    /// writes (a number as text, text as a blob): it was put there.
    WrongType {
        /// The record's sequence number.
        seq: i64,
        /// The column.
        column: String,
        /// The type it is stored as.
        stored: String,
    },
    /// The audit key is at hand but the log is empty and its head file is
    /// gone: a gateway writes the head when it makes the key, so the whole
    /// log was deleted together with its head (or the key was made by a
    /// hintgate that did not write the head then, and no record has been
    /// written since).
    LogDeleted {
        /// Where the head should be.
        path: String,
    },
    /// Beside this log's head, in a directory of heads named after their
    /// logs (a PostgreSQL log's), is a head sealed with this log's key but
    /// named for another log: the log's id, which comes from its salt in
    /// the database, was changed, which hides this log's own head (or
    /// another log is kept under the same key).
    HeadOfOtherLog {
        /// This log's head file.
        path: String,
        /// The other head file.
        other: String,
    },
    /// The witness cannot be read.
    WitnessUnreadable {
        /// The witness file.
        path: String,
        /// What the operating system said.
        error: String,
    },
    /// A line of the witness is not a checkpoint.
    WitnessDamaged {
        /// The line's number, from 1.
        line: u64,
    },
    /// A checkpoint's MAC does not match the key of its epoch: it was
    /// forged (by someone holding a later key), or the verification key is
    /// not this witness's.
    WitnessForged {
        /// The line's number, from 1.
        line: u64,
    },
    /// A checkpoint's epoch is not above the one before, or its record is
    /// before the one before's.
    WitnessOutOfOrder {
        /// The line's number, from 1.
        line: u64,
    },
    /// The record a checkpoint names has another link now: the log was
    /// rewritten after the checkpoint, even if it verifies under the key.
    WitnessMismatch {
        /// The record.
        seq: u64,
        /// The checkpoint's line, from 1.
        line: u64,
    },
    /// The log ends before a record a checkpoint names.
    WitnessCutOff {
        /// The last sequence number in the log (0 when it is empty).
        log_end: u64,
        /// The record the checkpoint names.
        seq: u64,
    },
    /// A run's journal does not hold its chain from `n` on: a frame was
    /// edited, removed, inserted or moved, or a segment swapped or deleted.
    JournalBroken {
        /// The run.
        run: String,
        /// The segment.
        segment: u32,
        /// Where the frame that does not hold begins.
        offset: u64,
        /// The record number due there.
        n: u64,
        /// What is wrong.
        why: String,
    },
    /// A record of an ended run's journal is not in the index (the log).
    JournalNotIndexed {
        /// The run.
        run: String,
        /// The record's number in the run.
        n: u64,
    },
    /// The log's record for a journal record is not the journal's.
    JournalIndexDiffers {
        /// The run.
        run: String,
        /// The record's number in the run.
        n: u64,
        /// The log's record.
        seq: u64,
    },
    /// The index holds records of a run whose journal is gone.
    JournalMissing {
        /// The run.
        run: String,
        /// The last record of it the index holds.
        indexed: u64,
    },
    /// A run's journal ends before the last record the index holds of it.
    JournalCut {
        /// The run.
        run: String,
        /// The last record of it the index holds.
        indexed: u64,
        /// The last record its journal holds.
        found: u64,
    },
}

/// Where a store keeps its head file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum HeadPlace {
    /// No head file.
    #[default]
    None,
    /// This file.
    File(PathBuf),
    /// A file in this directory, named by the store after its log (a
    /// PostgreSQL store: `audit-LOGID.head`, one per log, kept by each
    /// gateway on its own machine).
    Directory(PathBuf),
}

/// Where a store's audit key comes from.
#[derive(Debug, Clone, Default)]
pub enum KeySource {
    /// No key: the log can be read and verified (its MACs unchecked), but
    /// nothing can be appended.
    #[default]
    None,
    /// This key.
    Given(AuditKey),
    /// The key file at this path, made on first use, but only while the
    /// log holds no record chained under a key (a new key could not
    /// continue that chain; the store refuses to open, naming the file).
    File(PathBuf),
}

/// How a store chains, seals and checks its audit log.
#[derive(Debug, Clone, Default)]
pub struct AuditSetup {
    /// The audit key.
    pub key: KeySource,
    /// Where the head is kept.
    pub head: HeadPlace,
    /// Whether this store makes the witness checkpoints, when a witness is
    /// set up beside the head (see
    /// [`witness_state_path`](crate::witness_state_path)): a gateway does;
    /// a command that reads the log does not.
    pub checkpoints: bool,
    /// Which witness the checkpoints must go to, and how often; read only
    /// when `checkpoints` is set.
    pub witness: crate::WitnessSettings,
}

/// A store's key and head, resolved when it opens.
#[derive(Debug, Default)]
pub(crate) struct Keying {
    pub(crate) key: Option<AuditKey>,
    pub(crate) head_path: Option<PathBuf>,
    /// The head is a file of its own ([`HeadPlace::File`]), written when
    /// the key is made: see [`AuditLog::head_made_with_key`].
    pub(crate) head_made_with_key: bool,
    pub(crate) head: Option<HeadWriter>,
    pub(crate) witness: Option<WitnessWriter>,
    /// The key was made by this open (a key file that was not there), or
    /// given to a gateway: an empty log without a head is then a new one.
    pub(crate) key_made: bool,
    /// What comparing the head with the log found when the store opened
    /// (a handle that is not a gateway's opens anyway, to read and verify),
    /// until [`AuditLog::accept_rollback`] accepts it: appends are refused,
    /// since the head they write would hide it.
    pub(crate) rolled_back: std::sync::Mutex<Option<Rollback>>,
}

/// What an append made by [`AuditLog::append_later`] reports, on the log's
/// thread: the records' sequence numbers, or why they were not written.
pub type AppendDone = Box<dyn FnOnce(Result<Vec<u64>, StoreError>) + Send>;

/// The audit log.
///
/// Contract: `append` writes its entries in order, each chained to the one
/// before under the log's key (it fails without a key, and when the last
/// record was chained under another key), all or none, and they are durable
/// when it returns; then, when the log keeps a head, the head names the last
/// of them. Entries are never changed or removed by the log itself.
pub trait AuditLog: Send + Sync + std::fmt::Debug {
    /// Appends entries; returns their sequence numbers.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the log cannot be written, has no key, or its
    /// last record was chained under another key.
    fn append(&self, entries: &[NewEntry]) -> Result<Vec<u64>, StoreError>;

    /// Whether [`AuditLog::append_later`] appends off the caller's thread
    /// (a log with a thread of its own: PostgreSQL). The default: no.
    fn appends_later(&self) -> bool {
        false
    }

    /// Appends `entries` as [`AuditLog::append`] does, but on the log's own
    /// thread, and reports to `done` there when it is durable (or why it
    /// is not); appends made this way are made in the order they are asked
    /// for. The default (a log without a thread of its own) appends at once
    /// and then reports.
    fn append_later(&self, entries: Vec<NewEntry>, done: AppendDone) {
        done(self.append(&entries));
    }

    /// Entries after sequence number `after`, oldest first, at most `limit`.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the log cannot be read.
    fn entries(&self, after: u64, limit: usize) -> Result<Vec<Entry>, StoreError>;

    /// Waits until the log may hold entries after sequence number `after`,
    /// for at most about `timeout`; returns whether it does. It may return
    /// `false` early, so a caller that follows the log calls it in a loop.
    ///
    /// The default looks once and, when there is nothing new, sleeps for
    /// up to 100 ms; a store with a way to be told of commits overrides it.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the log cannot be read.
    fn wait_for_entries(&self, after: u64, timeout: Duration) -> Result<bool, StoreError> {
        if !self.entries(after, 1)?.is_empty() {
            return Ok(true);
        }
        std::thread::sleep(timeout.min(Duration::from_millis(100)));
        Ok(!self.entries(after, 1)?.is_empty())
    }

    /// The sequence numbers of the rows stored below 1, which
    /// [`AuditLog::entries`] never reads (the log numbers its records from
    /// 1): at most `limit` of them, the nearest to 1 first, and how many
    /// there are. The log writes none; [`AuditLog::verify`] names each. The
    /// default (a log whose numbers cannot be below 1) has none.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the log cannot be read.
    fn rows_below_one(&self, limit: usize) -> Result<(Vec<i64>, u64), StoreError> {
        let _ = limit;
        Ok((Vec::new(), 0))
    }

    /// The rows a column of which is stored as another type than the log
    /// writes (a database whose columns take any type, as SQLite's do): a
    /// [`Problem::WrongType`] for each, at most `limit`, and how many there
    /// are. [`AuditLog::entries`] reads such a row as well as it can, and
    /// [`AuditLog::verify`] names it. The default (typed columns) has none.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the log cannot be read.
    fn rows_of_another_type(&self, limit: usize) -> Result<(Vec<Problem>, u64), StoreError> {
        let _ = limit;
        Ok((Vec::new(), 0))
    }

    /// The key the log is chained under, when the store has it.
    fn audit_key(&self) -> Option<&AuditKey> {
        None
    }

    /// The index of the gateways' journals, for a log fed from them
    /// (SQLite; see [`crate::journal`]); `None`: a gateway appends to the
    /// log itself.
    fn journal_index(&self) -> Option<&dyn crate::journal::JournalIndex> {
        None
    }

    /// Whether the head is made together with the key, so that the key at
    /// hand with neither a head nor a record means the log was deleted with
    /// its head: true for a head file of its own ([`HeadPlace::File`]),
    /// which a gateway writes when it makes the key; false for a head in a
    /// directory of a shared log ([`HeadPlace::Directory`]), whose key is
    /// copied to machines before their gateways write anything.
    fn head_made_with_key(&self) -> bool {
        false
    }

    /// The head file, when the log keeps one.
    fn head_path(&self) -> Option<&Path> {
        None
    }

    /// The approval index: one row per grant, revocation and accepted
    /// rollback record, which the stores read to check standing approvals
    /// without walking the log (see [`IndexRow`]), and which
    /// [`AuditLog::verify`] compares with the records. `None` for a log
    /// that keeps none (an in-memory one, written by this process only).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the index cannot be read.
    fn approval_index(&self) -> Result<Option<Vec<IndexRow>>, StoreError> {
        Ok(None)
    }

    /// Accepts a log that is not the one its head was written for (see
    /// [`Rollback`]; a gateway does not open such a store, and no other
    /// handle appends to it): compares the head with the log again, under
    /// the log's write lock, and when they still disagree appends a record
    /// of kind [`EntryKind::Rollback`](crate::EntryKind::Rollback) naming what was found, then writes
    /// the head after it. From then on appends work again, `verify` names
    /// the record (`rolled-back`), and every standing approval granted
    /// before it approves nothing. `None` when the head and the log agree
    /// (nothing is written), and for a log that keeps no head.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the log cannot be read or written, or the store
    /// has no key.
    fn accept_rollback(&self) -> Result<Option<AcceptedRollback>, StoreError> {
        Ok(None)
    }

    /// The subkey for keyed digests of redacted values in records
    /// ([`AuditKey::redaction_key`]); `None` when the store has no key.
    fn redaction_key(&self) -> Option<[u8; 32]> {
        self.audit_key().map(AuditKey::redaction_key)
    }

    /// Checks the whole log: every link (with the log's key, when it has
    /// it), the sequence numbers, every body and kind, and the head.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the log cannot be read.
    fn verify(&self) -> Result<Verification, StoreError> {
        verify(self, self.audit_key(), self.head_path(), None)
    }

    /// Checks the log as [`AuditLog::verify`] does, and every checkpoint in
    /// the witness file at `witness` with the verification key `key`: each
    /// sealed with the key of its epoch, epochs going up, and each naming a
    /// record that is still in the log with the link it names.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the log cannot be read.
    fn verify_with_witness(
        &self,
        witness: &Path,
        key: &WitnessKey,
    ) -> Result<Verification, StoreError> {
        verify(
            self,
            self.audit_key(),
            self.head_path(),
            Some((witness, key)),
        )
    }
}

// === impl Entry ===

impl Entry {
    /// An entry from its stored columns: its kind read by name, its body
    /// read strictly, as JSON and as the record type of its kind
    /// ([`Record::read`]), and [`Entry::malformed`] set when either is not
    /// what hintgate writes.
    #[must_use]
    pub fn from_stored(
        seq: u64,
        at: i64,
        stored_kind: String,
        call: Option<u64>,
        stored_body: String,
        prev: String,
        hash: String,
    ) -> Self {
        let kind = kind_from(&stored_kind);
        let (body, body_problem) = body::read(&stored_body);
        let mut record = None;
        let malformed = match kind {
            None => Some(Malformed::UnknownKind {
                kind: stored_kind.clone(),
            }),
            Some(kind) => body_problem.or_else(|| match Record::read(kind, call, &stored_body) {
                Ok(read) => {
                    record = Some(read);
                    None
                }
                Err(_) => Some(Malformed::UnexpectedBody {
                    kind: stored_kind.clone(),
                }),
            }),
        };
        Self {
            seq,
            at,
            kind,
            call,
            body,
            prev,
            hash,
            stored_kind,
            stored_body,
            malformed,
            record,
        }
    }
}

// === impl Verification ===

impl Verification {
    /// Whether nothing is wrong (a keyed part unchecked for want of the key
    /// is not wrong; see [`Verification::complete`]).
    #[must_use]
    pub fn holds(&self) -> bool {
        self.problems.is_empty()
    }

    /// Whether nothing is wrong and every keyed record's MAC was checked.
    #[must_use]
    pub fn complete(&self) -> bool {
        self.holds() && (self.keyed.is_none() || self.key_id.is_some())
    }

    /// The first record a problem names, if any.
    #[must_use]
    pub fn first_broken(&self) -> Option<u64> {
        self.problems.iter().filter_map(Problem::seq).min()
    }
}

// === impl Problem ===

impl Problem {
    /// The problem's stable code.
    #[must_use]
    pub const fn code(&self) -> &'static str {
        match self {
            Self::Edited { .. } => "edited",
            Self::MissingRecords { .. } => "missing-records",
            Self::BrokenLink { .. } => "broken-link",
            Self::UnkeyedAfterKeyed { .. } => "unkeyed-after-keyed",
            Self::OtherKey { .. } => "other-key",
            Self::UnknownKind { .. } => "unknown-kind",
            Self::DuplicateKey { .. } => "duplicate-key",
            Self::NotCanonical { .. } => "not-canonical",
            Self::NotJson { .. } => "not-json",
            Self::UnexpectedBody { .. } => "unexpected-body",
            Self::RolledBack { .. } => "rolled-back",
            Self::ApprovalIndexMissing { .. } => "approval-index-missing",
            Self::ApprovalIndexWrong { .. } => "approval-index-wrong",
            Self::CutOff { .. } => "cut-off",
            Self::HeadMismatch { .. } => "head-mismatch",
            Self::HeadMissing { .. } => "head-missing",
            Self::HeadDamaged { .. } => "head-damaged",
            Self::HeadUnreadable { .. } => "head-unreadable",
            Self::SeqBelowOne { .. } => "seq-below-one",
            Self::WrongType { .. } => "wrong-type",
            Self::LogDeleted { .. } => "log-deleted",
            Self::HeadOfOtherLog { .. } => "head-of-other-log",
            Self::WitnessUnreadable { .. } => "witness-unreadable",
            Self::WitnessDamaged { .. } => "witness-damaged",
            Self::WitnessForged { .. } => "witness-forged",
            Self::WitnessOutOfOrder { .. } => "witness-out-of-order",
            Self::WitnessMismatch { .. } => "witness-mismatch",
            Self::WitnessCutOff { .. } => "witness-cut-off",
            Self::JournalBroken { .. } => "journal-broken",
            Self::JournalNotIndexed { .. } => "journal-not-indexed",
            Self::JournalIndexDiffers { .. } => "journal-index-differs",
            Self::JournalMissing { .. } => "journal-missing",
            Self::JournalCut { .. } => "journal-cut",
        }
    }

    /// The record it names, if one.
    #[must_use]
    pub const fn seq(&self) -> Option<u64> {
        match self {
            Self::Edited { seq }
            | Self::BrokenLink { seq }
            | Self::UnkeyedAfterKeyed { seq }
            | Self::OtherKey { seq, .. }
            | Self::UnknownKind { seq, .. }
            | Self::DuplicateKey { seq, .. }
            | Self::NotCanonical { seq }
            | Self::NotJson { seq }
            | Self::UnexpectedBody { seq, .. }
            | Self::RolledBack { seq, .. }
            | Self::ApprovalIndexMissing { seq }
            | Self::HeadMismatch { seq }
            | Self::JournalIndexDiffers { seq, .. }
            | Self::WitnessMismatch { seq, .. } => Some(*seq),
            Self::MissingRecords { first, .. } => Some(*first),
            Self::CutOff { log_end, .. } | Self::WitnessCutOff { log_end, .. } => {
                Some(*log_end + 1)
            }
            Self::HeadMissing { .. }
            | Self::ApprovalIndexWrong { .. }
            | Self::SeqBelowOne { .. }
            | Self::WrongType { .. }
            | Self::LogDeleted { .. }
            | Self::HeadOfOtherLog { .. }
            | Self::HeadDamaged { .. }
            | Self::HeadUnreadable { .. }
            | Self::WitnessUnreadable { .. }
            | Self::WitnessDamaged { .. }
            | Self::WitnessForged { .. }
            | Self::WitnessOutOfOrder { .. }
            | Self::JournalBroken { .. }
            | Self::JournalNotIndexed { .. }
            | Self::JournalMissing { .. }
            | Self::JournalCut { .. } => None,
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Edited { seq } => write!(
                f,
                "record {seq} was edited: its link does not match its content"
            ),
            Self::MissingRecords { first, last } if first == last => {
                write!(f, "record {first} is missing: it was deleted")
            }
            Self::MissingRecords { first, last } => {
                write!(
                    f,
                    "records {first} to {last} are missing: they were deleted"
                )
            }
            Self::BrokenLink { seq } => write!(
                f,
                "record {seq} does not follow the record before it: a record was inserted, deleted or moved before it"
            ),
            Self::UnkeyedAfterKeyed { seq } => write!(
                f,
                "record {seq} is chained without the key after keyed records: the log was rewritten"
            ),
            Self::OtherKey { seq, key_id } => write!(
                f,
                "record {seq} is chained under another key (`{key_id}`): it was not written with this log's key"
            ),
            Self::UnknownKind { seq, kind } => write!(
                f,
                "record {seq} has the kind `{kind}`, which hintgate does not write"
            ),
            Self::DuplicateKey { seq, key } => write!(
                f,
                "record {seq} repeats the key `{key}` in its body, so readers may disagree on what it says"
            ),
            Self::NotCanonical { seq } => write!(
                f,
                "record {seq} is not stored as canonical JSON, as hintgate writes records"
            ),
            Self::NotJson { seq } => write!(f, "record {seq} is not JSON"),
            Self::UnexpectedBody { seq, kind } => write!(
                f,
                "record {seq} is a `{kind}` record whose body is not what hintgate writes for one"
            ),
            Self::RolledBack {
                seq,
                found,
                head_seq,
                log_end,
            } => {
                let named = head_seq.map_or_else(String::new, |head| {
                    format!(", where its head named record {head}")
                });
                write!(
                    f,
                    "record {seq} accepts a log that was not the one its head was written for (`{found}`: it ended at record {log_end}{named}): records written before it may be lost, and standing approvals granted before it approve nothing"
                )
            }
            Self::ApprovalIndexMissing { seq } => write!(
                f,
                "record {seq} grants or revokes a standing approval (or accepts a rollback), but the approval index does not list it: its row was deleted, which lets an approval put back from an older copy count again"
            ),
            Self::ApprovalIndexWrong { seq } => write!(
                f,
                "the approval index lists record {seq} as it is not (another kind, key or tool, or a column stored as another type): the index was changed"
            ),
            Self::CutOff { log_end, head_seq } => write!(
                f,
                "the log ends at record {log_end} but its head was record {head_seq}: records were cut off the end"
            ),
            Self::HeadMismatch { seq } => write!(
                f,
                "record {seq} is not the one the head names: the end of the log was replaced"
            ),
            Self::HeadMissing { path } => write!(
                f,
                "the head file `{path}` is missing, so records cut off the end cannot be ruled out (it is written after every commit; it was removed, or the log was verified where no gateway writes it: give it with `--head`)"
            ),
            Self::HeadDamaged { path, why } => {
                write!(f, "the head file `{path}` is damaged: {why}")
            }
            Self::HeadUnreadable { path, error } => {
                write!(f, "the head file `{path}` cannot be read: {error}")
            }
            Self::SeqBelowOne { seq } => write!(
                f,
                "a record is stored with the sequence number {seq}, below 1, where the log never numbers one: it was put there, out of the chain, where `hintgate log` does not show it"
            ),
            Self::WrongType {
                seq,
                column,
                stored,
            } => write!(
                f,
                "record {seq} stores its `{column}` as {stored}, which hintgate never writes there: it was put there"
            ),
            Self::LogDeleted { path } => write!(
                f,
                "the log is empty and its head file `{path}` is missing, but the audit key is there: the whole log was deleted together with its head (a gateway writes the head when it makes the key; the one other way to get here is a key made by an earlier hintgate, which did not, with no record written since)"
            ),
            Self::HeadOfOtherLog { path, other } => write!(
                f,
                "the head file `{other}`, beside this log's (`{path}`), is sealed with this log's key but named for another log: the log's id, which comes from the salt in the database, was changed, which hides this log's own head (or another log is kept under the same key)"
            ),
            Self::WitnessUnreadable { path, error } => {
                write!(f, "the witness `{path}` cannot be read: {error}")
            }
            Self::WitnessDamaged { line } => {
                write!(f, "line {line} of the witness is not a checkpoint")
            }
            Self::WitnessForged { line } => write!(
                f,
                "the checkpoint on line {line} of the witness was not sealed with the key of its epoch: it was forged, or the verification key is not this witness's"
            ),
            Self::WitnessOutOfOrder { line } => write!(
                f,
                "the checkpoint on line {line} of the witness does not come after the one before it"
            ),
            Self::WitnessMismatch { seq, line } => write!(
                f,
                "record {seq} is not the one the checkpoint on line {line} of the witness names: the log was rewritten after that checkpoint"
            ),
            Self::WitnessCutOff { log_end, seq } => write!(
                f,
                "the log ends at record {log_end} but the witness has a checkpoint of record {seq}: records were cut off the end"
            ),
            Self::JournalBroken {
                run,
                segment,
                offset,
                n,
                why,
            } => write!(
                f,
                "the journal of run {run} breaks at record {n} (segment {segment}, byte {offset}): {why}; nothing after it is trusted"
            ),
            Self::JournalNotIndexed { run, n } => {
                write!(f, "record {n} of run {run}'s journal is not in the log")
            }
            Self::JournalIndexDiffers { run, n, seq } => write!(
                f,
                "record {seq} of the log is not record {n} of run {run}'s journal as the journal holds it"
            ),
            Self::JournalMissing { run, indexed } => write!(
                f,
                "the journal of run {run} is gone, and the log holds {indexed} record(s) of it"
            ),
            Self::JournalCut {
                run,
                indexed,
                found,
            } => write!(
                f,
                "the journal of run {run} ends at record {found}, and the log holds it to record {indexed}: its end was cut off"
            ),
        }
    }
}

// === verification ===

/// What [`verify`] has found so far.
struct Findings {
    problems: Vec<Problem>,
    more: u64,
}

impl Findings {
    fn push(&mut self, problem: Problem) {
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(problem);
        } else {
            self.more += 1;
        }
    }
}

/// Checks `log`: see [`AuditLog::verify`]. The head is read before the log,
/// so records appended meanwhile never make it look ahead of the log.
fn verify<L: AuditLog + ?Sized>(
    log: &L,
    key: Option<&AuditKey>,
    head_path: Option<&Path>,
    witness: Option<(&Path, &WitnessKey)>,
) -> Result<Verification, StoreError> {
    let mut findings = Findings {
        problems: Vec::new(),
        more: 0,
    };
    // The head and the witness are read before the log: they only name
    // committed records, so records appended meanwhile never make them look
    // ahead of it.
    let head = head_path.map(|path| (path, head::read(path, key)));
    let checkpoints = witness.map(|(path, _)| (path, witness::read(path)));
    // The links of the records the head and the checkpoints name.
    let mut wanted: std::collections::BTreeMap<u64, Option<String>> =
        std::collections::BTreeMap::new();
    if let Some((_, Ok(HeadRead::Head { seq, .. }))) = &head {
        wanted.insert(*seq, None);
    }
    if let Some((_, Ok(lines))) = &checkpoints {
        for checkpoint in lines
            .iter()
            .filter_map(|(_, checkpoint)| checkpoint.as_ref())
        {
            wanted.insert(checkpoint.seq, None);
        }
    }
    let mut walk = Walk::default();
    let mut after = 0;
    loop {
        let batch = log.entries(after, 1000)?;
        if batch.is_empty() {
            break;
        }
        for entry in batch {
            walk.check(&entry, key, &mut findings);
            if let Some(link) = wanted.get_mut(&entry.seq) {
                *link = Some(entry.hash.clone());
            }
            after = entry.seq;
        }
    }
    // Rows below 1 are out of the walk from 1: each is named.
    let (below_one, below_one_count) = log.rows_below_one(MAX_PROBLEMS)?;
    let listed = u64::try_from(below_one.len()).unwrap_or(u64::MAX);
    for seq in below_one {
        findings.push(Problem::SeqBelowOne { seq });
    }
    findings.more += below_one_count.saturating_sub(listed);
    let (wrong_type, wrong_type_count) = log.rows_of_another_type(MAX_PROBLEMS)?;
    let listed = u64::try_from(wrong_type.len()).unwrap_or(u64::MAX);
    for problem in wrong_type {
        findings.push(problem);
    }
    findings.more += wrong_type_count.saturating_sub(listed);
    if let Some(index) = log.approval_index()? {
        check_index(&walk, &index, &mut findings);
    }
    let link_at = |seq: u64| {
        if seq == 0 {
            // A head at 0 is one written with the key, before any record.
            Some(GENESIS)
        } else {
            wanted.get(&seq).and_then(Option::as_deref)
        }
    };
    // In a directory of heads named after their logs, a head sealed with
    // this key under another log's name is this log's, renamed by a
    // changed log id (or another log's under the same key).
    if let (Some(key), Some(path), false) = (key, head_path, log.head_made_with_key()) {
        for other in heads_beside(path, key) {
            findings.push(Problem::HeadOfOtherLog {
                path: path.display().to_string(),
                other: other.display().to_string(),
            });
        }
    }
    let head = match head {
        None => HeadState::NotKept,
        Some((path, read)) => {
            let at_head_seq = match &read {
                Ok(HeadRead::Head { seq, .. }) => link_at(*seq),
                _ => None,
            };
            // With the key at hand and the head made with it, a log with
            // no head and no row at all was deleted with its head.
            let deleted = key.is_some()
                && log.head_made_with_key()
                && walk.checked == 0
                && below_one_count == 0;
            check_head(path, read, &walk, at_head_seq, deleted, &mut findings)
        }
    };
    let witness = match (checkpoints, witness) {
        (Some((path, read)), Some((_, witness_key))) => Some(check_witness(
            path,
            read,
            witness_key,
            walk.last_seq,
            &link_at,
            &mut findings,
        )),
        _ => None,
    };
    Ok(Verification {
        checked: walk.checked,
        unkeyed: walk.unkeyed,
        keyed: walk.keyed,
        key_id: key
            .filter(|_| walk.keyed.is_some())
            .map(|key| key.id().to_owned()),
        head,
        witness,
        problems: findings.problems,
        more_problems: findings.more,
    })
}

/// Checks the checkpoints read from the witness at `path` against the log
/// walked (its last record `log_end`, and the links of the records they
/// name).
fn check_witness<'a>(
    path: &Path,
    read: std::io::Result<Vec<(u64, Option<witness::Checkpoint>)>>,
    key: &WitnessKey,
    log_end: u64,
    link_at: &dyn Fn(u64) -> Option<&'a str>,
    findings: &mut Findings,
) -> WitnessState {
    let mut state = WitnessState {
        path: path.display().to_string(),
        checkpoints: 0,
        last: None,
    };
    let lines = match read {
        Ok(lines) => lines,
        Err(err) => {
            findings.push(Problem::WitnessUnreadable {
                path: state.path.clone(),
                error: err.to_string(),
            });
            return state;
        }
    };
    let mut checker = Checker::new(key);
    let mut before: Option<(u64, u64)> = None;
    for (line, checkpoint) in lines {
        let Some(checkpoint) = checkpoint else {
            findings.push(Problem::WitnessDamaged { line });
            continue;
        };
        state.checkpoints += 1;
        if !checker.sealed(&checkpoint) {
            findings.push(Problem::WitnessForged { line });
            continue;
        }
        if before.is_some_and(|(epoch, seq)| checkpoint.epoch <= epoch || checkpoint.seq < seq) {
            findings.push(Problem::WitnessOutOfOrder { line });
            continue;
        }
        before = Some((checkpoint.epoch, checkpoint.seq));
        if checkpoint.seq > log_end {
            findings.push(Problem::WitnessCutOff {
                log_end,
                seq: checkpoint.seq,
            });
        } else if link_at(checkpoint.seq) != Some(checkpoint.link.as_str()) {
            findings.push(Problem::WitnessMismatch {
                seq: checkpoint.seq,
                line,
            });
        } else {
            state.last = Some(Checkpointed {
                seq: checkpoint.seq,
                epoch: checkpoint.epoch,
            });
        }
    }
    state
}

/// The walk along the log.
#[derive(Default)]
struct Walk {
    checked: u64,
    last_seq: u64,
    last_link: Option<String>,
    unkeyed: Option<Span>,
    keyed: Option<Span>,
    /// The key id of the keyed record before (to report each run of
    /// records under another key once).
    last_key_id: Option<String>,
    /// The records the approval index must list, by sequence number: their
    /// kind's name, key and tool.
    indexed: std::collections::BTreeMap<u64, (&'static str, String, String)>,
}

impl Walk {
    fn check(&mut self, entry: &Entry, key: Option<&AuditKey>, findings: &mut Findings) {
        let seq = entry.seq;
        self.checked += 1;
        // A sequence number at or below the one before cannot come from
        // the log's own numbering (a negative one in the database reads as
        // 0): a record was put there.
        let out_of_order = seq <= self.last_seq;
        let gap = seq > self.last_seq + 1;
        if out_of_order {
            findings.push(Problem::BrokenLink { seq });
        } else if gap {
            findings.push(Problem::MissingRecords {
                first: self.last_seq + 1,
                last: seq - 1,
            });
        }
        let expected_prev = self.last_link.as_deref().unwrap_or(GENESIS);
        // After a gap the link cannot follow; the gap says why.
        if !gap && !out_of_order && entry.prev != expected_prev {
            findings.push(Problem::BrokenLink { seq });
        }
        let covered = |link: fn(&str, u64, i64, &str, Option<u64>, &str) -> String| {
            link(
                &entry.prev,
                seq,
                entry.at,
                &entry.stored_kind,
                entry.call,
                &entry.stored_body,
            )
        };
        match link_of(&entry.hash) {
            Link::Plain => {
                extend(&mut self.unkeyed, seq);
                if self.keyed.is_some() {
                    findings.push(Problem::UnkeyedAfterKeyed { seq });
                } else if covered(plain_link) != entry.hash {
                    findings.push(Problem::Edited { seq });
                }
            }
            Link::Keyed { key_id, mac } => {
                extend(&mut self.keyed, seq);
                let expected_id = key
                    .map(AuditKey::id)
                    .or(self.last_key_id.as_deref())
                    .unwrap_or(key_id);
                if key_id != expected_id {
                    if self.last_key_id.as_deref() != Some(key_id) {
                        findings.push(Problem::OtherKey {
                            seq,
                            key_id: key_id.to_owned(),
                        });
                    }
                } else if let Some(key) = key
                    && !mac_matches(key, entry, mac)
                {
                    findings.push(Problem::Edited { seq });
                }
                self.last_key_id = Some(key_id.to_owned());
            }
            Link::Unknown => findings.push(Problem::Edited { seq }),
        }
        match &entry.malformed {
            None => {}
            Some(Malformed::UnknownKind { kind }) => findings.push(Problem::UnknownKind {
                seq,
                kind: kind.clone(),
            }),
            Some(Malformed::DuplicateKey { key }) => findings.push(Problem::DuplicateKey {
                seq,
                key: key.clone(),
            }),
            Some(Malformed::NotCanonical) => findings.push(Problem::NotCanonical { seq }),
            Some(Malformed::NotJson) => findings.push(Problem::NotJson { seq }),
            Some(Malformed::UnexpectedBody { kind }) => findings.push(Problem::UnexpectedBody {
                seq,
                kind: kind.clone(),
            }),
        }
        if entry.malformed.is_none() {
            if let Some(row) = crate::standing::index_of_entry(entry) {
                self.indexed.insert(seq, row);
            }
            if let Some(Record::Rollback(body)) = &entry.record {
                findings.push(Problem::RolledBack {
                    seq,
                    found: body.found.as_str().to_owned(),
                    head_seq: body.head_seq,
                    log_end: body.log_end,
                });
            }
        }
        self.last_seq = seq;
        self.last_link = Some(entry.hash.clone());
    }
}

/// Compares the approval index with the records the walk found it must
/// list: each row must list the record at its sequence number as that
/// record is, and each such record must have its row. Rows past the walk
/// (records appended since it read the log) are left for the next check.
fn check_index(walk: &Walk, index: &[IndexRow], findings: &mut Findings) {
    let mut listed = std::collections::BTreeSet::new();
    for row in index {
        let seq = u64::try_from(row.seq).unwrap_or(0);
        if seq > walk.last_seq {
            continue;
        }
        listed.insert(seq);
        let fits = row.typed
            && walk.indexed.get(&seq).is_some_and(|(kind, key, tool)| {
                *kind == row.kind && *key == row.server_key && *tool == row.tool
            });
        if !fits {
            findings.push(Problem::ApprovalIndexWrong { seq: row.seq });
        }
    }
    for seq in walk.indexed.keys() {
        if !listed.contains(seq) {
            findings.push(Problem::ApprovalIndexMissing { seq: *seq });
        }
    }
}

fn extend(span: &mut Option<Span>, seq: u64) {
    match span {
        Some(span) => span.last = seq,
        None => {
            *span = Some(Span {
                first: seq,
                last: seq,
            })
        }
    }
}

/// The head files beside `head` (named `audit-*.head`, as a directory of
/// heads names them) sealed with `key`, in the order of their names.
fn heads_beside(head: &Path, key: &AuditKey) -> Vec<PathBuf> {
    let (Some(dir), Some(own)) = (head.parent(), head.file_name()) else {
        return Vec::new();
    };
    let Ok(files) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut sealed: Vec<PathBuf> = files
        .filter_map(Result::ok)
        .filter(|file| {
            let name = file.file_name();
            let name = name.to_string_lossy();
            name.starts_with("audit-") && name.ends_with(".head") && file.file_name() != own
        })
        .map(|file| file.path())
        .filter(|path| {
            matches!(
                head::read(path, Some(key)),
                Ok(HeadRead::Head { sealed: true, .. })
            )
        })
        .collect();
    sealed.sort();
    sealed
}

/// Checks the head against the log walked.
fn check_head(
    path: &Path,
    read: std::io::Result<HeadRead>,
    walk: &Walk,
    at_head_seq: Option<&str>,
    deleted: bool,
    findings: &mut Findings,
) -> HeadState {
    let shown = path.display().to_string();
    let failed = |findings: &mut Findings, problem| {
        findings.push(problem);
        HeadState::Failed {
            path: shown.clone(),
        }
    };
    match read {
        Err(err) => failed(
            findings,
            Problem::HeadUnreadable {
                path: shown.clone(),
                error: err.to_string(),
            },
        ),
        Ok(HeadRead::Missing) if deleted => failed(
            findings,
            Problem::LogDeleted {
                path: shown.clone(),
            },
        ),
        Ok(HeadRead::Missing) if walk.keyed.is_none() => HeadState::NotYet {
            path: shown.clone(),
        },
        Ok(HeadRead::Missing) => failed(
            findings,
            Problem::HeadMissing {
                path: shown.clone(),
            },
        ),
        Ok(HeadRead::Damaged(why)) => failed(
            findings,
            Problem::HeadDamaged {
                path: shown.clone(),
                why: why.to_owned(),
            },
        ),
        Ok(HeadRead::Head { seq, .. }) if seq > walk.last_seq => failed(
            findings,
            Problem::CutOff {
                log_end: walk.last_seq,
                head_seq: seq,
            },
        ),
        Ok(HeadRead::Head { seq, link, .. }) if at_head_seq != Some(link.as_str()) => {
            failed(findings, Problem::HeadMismatch { seq })
        }
        Ok(HeadRead::Head { seq, sealed, .. }) => HeadState::Reached {
            path: shown.clone(),
            seq,
            sealed,
        },
    }
}

// === appending ===

/// Numbers and chains `entries` after the log's tail (the sequence number
/// and link of its last entry; 0 and [`GENESIS`] when it is empty) under
/// `key`, the same way in every store: `store` gets each entry in order with
/// its sequence number, the link before it and its own link, and the first
/// error stops the append. Returns the sequence numbers and the new tail.
///
/// # Errors
///
/// [`StoreError::NoKey`] without a key; [`StoreError::OtherKey`] when the
/// tail was chained under another key (continuing would leave a chain no
/// one key verifies); `store`'s error.
pub(crate) fn chain(
    tail: (u64, String),
    entries: &[NewEntry],
    key: Option<&AuditKey>,
    mut store: impl FnMut(&NewEntry, u64, String, &str) -> Result<(), StoreError>,
) -> Result<(Vec<u64>, (u64, String)), StoreError> {
    let key = key.ok_or(StoreError::NoKey)?;
    if let Link::Keyed { key_id, .. } = link_of(&tail.1)
        && key_id != key.id()
    {
        return Err(StoreError::OtherKey {
            found: key_id.to_owned(),
            ours: key.id().to_owned(),
        });
    }
    let (mut seq, mut prev) = tail;
    let mut seqs = Vec::with_capacity(entries.len());
    for new in entries {
        seq += 1;
        let link = keyed_link(
            key,
            &prev,
            seq,
            new.at,
            kind_name(new.kind),
            new.call,
            &new.body,
        );
        store(new, seq, prev, &link)?;
        seqs.push(seq);
        prev = link;
    }
    Ok((seqs, (seq, prev)))
}

// === impl Keying ===

impl Keying {
    /// Resolves `setup` for a log whose last link is `tail_link`; `log_id`
    /// names the head file in a [`HeadPlace::Directory`] (and `head_name`
    /// is the file's name there).
    pub(crate) fn resolve(
        setup: AuditSetup,
        tail_link: Option<&str>,
        head_name: impl FnOnce() -> String,
    ) -> Result<Self, StoreError> {
        // Whether the key is one this open made (a key file that was not
        // there), or one given as it is.
        // A key given to a gateway counts as new (tests and in-process
        // gateways give theirs); one given to a reader was read from its
        // file, which was there.
        let (key, key_is_new) = match setup.key {
            KeySource::None => (None, false),
            KeySource::Given(key) => (Some(key), setup.checkpoints),
            KeySource::File(path) => {
                let (key, created) = open_key_file(&path, tail_link)?;
                (Some(key), created)
            }
        };
        let head_made_with_key = matches!(setup.head, HeadPlace::File(_));
        let head_path = match setup.head {
            HeadPlace::None => None,
            HeadPlace::File(path) => Some(path),
            HeadPlace::Directory(dir) => Some(dir.join(head_name())),
        };
        let head = key
            .as_ref()
            .zip(head_path.as_ref())
            .map(|(key, path)| HeadWriter::new(path.clone(), key));
        // A gateway on an empty log without a head writes the head at 0
        // now, with the key: a log deleted later together with its head is
        // then told from a new one (`log-deleted`). Not when a head of its
        // own is missing under a key file that was there already: that is
        // what such a deletion leaves, and writing a head would hide it
        // (the store's head check then finds it, and a gateway refuses to
        // open: see `rollback`).
        if let (Some(writer), Some(path), true, None) =
            (&head, &head_path, setup.checkpoints, tail_link)
            && !path.exists()
            && (key_is_new || !head_made_with_key)
        {
            writer.start();
        }
        let witness = match (&head_path, setup.checkpoints && key.is_some()) {
            (Some(path), true) => WitnessWriter::open(&witness::state_path(path), &setup.witness)?,
            // A store without a head has no witness; one the configuration
            // names is not silently left out.
            (None, true) => match &setup.witness.path {
                Some(named) => {
                    return Err(StoreError::Witness(crate::WitnessError::NotSetUp {
                        named: named.clone(),
                    }));
                }
                None => None,
            },
            _ => None,
        };
        Ok(Self {
            key,
            head_path,
            head_made_with_key,
            head,
            witness,
            key_made: key_is_new,
            rolled_back: std::sync::Mutex::default(),
        })
    }

    /// Compares the head with the log (see `rollback::check`), which
    /// `log` reads. `at_open`: the check of a store that is opening, whose
    /// key may just have been made. `None` without a key or a head.
    pub(crate) fn check_head(
        &self,
        at_open: bool,
        log: &mut dyn crate::rollback::LogEnd,
    ) -> Result<Option<Rollback>, StoreError> {
        let (Some(key), Some(path)) = (&self.key, &self.head_path) else {
            return Ok(None);
        };
        let deleted_is_rollback = self.head_made_with_key && !(at_open && self.key_made);
        crate::rollback::check(path, key, self.head_made_with_key, deleted_is_rollback, log)
    }

    /// What the check found when the store opened: a gateway's store
    /// refuses to open (`gateway`); any other keeps it, and refuses to
    /// append until it is accepted.
    pub(crate) fn opened(&self, found: Option<Rollback>, gateway: bool) -> Result<(), StoreError> {
        match found {
            Some(rollback) if gateway => Err(StoreError::RolledBack(Box::new(rollback))),
            found => {
                *self.lock_rolled_back() = found;
                Ok(())
            }
        }
    }

    /// Refuses an append while a rollback found at open is not accepted:
    /// the head it writes would hide it.
    pub(crate) fn may_append(&self) -> Result<(), StoreError> {
        match self.lock_rolled_back().as_ref() {
            Some(rollback) => Err(StoreError::RolledBack(Box::new(rollback.clone()))),
            None => Ok(()),
        }
    }

    /// Forgets the rollback found at open: it was accepted.
    pub(crate) fn accepted(&self) {
        *self.lock_rolled_back() = None;
    }

    fn lock_rolled_back(&self) -> std::sync::MutexGuard<'_, Option<Rollback>> {
        self.rolled_back
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records the new tail in the head file, if one is kept, then in the
    /// witness when a checkpoint is due.
    pub(crate) fn committed(&self, tail: &(u64, String)) {
        if let Some(head) = &self.head {
            head.record(tail.0, &tail.1);
        }
        if let Some(witness) = &self.witness {
            witness.committed(tail.0, &tail.1);
        }
    }
}

/// Reads the key file at `path`, making it when there is none, unless the
/// log (its last link `tail_link`) is chained under a key already.
/// Returns the key and whether it was made now.
fn open_key_file(path: &Path, tail_link: Option<&str>) -> Result<(AuditKey, bool), StoreError> {
    match AuditKey::load(path) {
        Err(crate::KeyError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            if let Some(key_id) = keyed_tail(tail_link) {
                return Err(StoreError::KeyMissing {
                    path: path.display().to_string(),
                    key_id,
                });
            }
            let (key, created) = AuditKey::load_or_create(path)?;
            if created {
                tracing::info!(
                    "made the audit key `{}` (key `{}`); keep it, or the log cannot be verified",
                    path.display(),
                    key.id()
                );
            }
            Ok((key, created))
        }
        other => Ok((other?, false)),
    }
}

/// The inserts of one append, inside its transaction: each record, and
/// the approval index's row of each grant, revocation and accepted
/// rollback.
pub(crate) fn append_in_transaction(
    connection: &rusqlite::Connection,
    entries: &[NewEntry],
    key: Option<&AuditKey>,
) -> Result<(Vec<u64>, (u64, String)), StoreError> {
    // Cached: the tail is read once per group, and parsing it each time
    // showed in profiles.
    let tail: (u64, String) = connection
        .prepare_cached("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1")?
        .query_row([], |row| {
            Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
        })
        .map(|(seq, hash)| (from_sql(seq), hash))
        .or_else(|err| match err {
            rusqlite::Error::QueryReturnedNoRows => Ok((0, GENESIS.to_owned())),
            other => Err(other),
        })?;
    let mut insert = connection.prepare_cached(
        "INSERT INTO audit (seq, at, kind, call_seq, body, prev, hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?;
    chain(tail, entries, key, |new, seq, prev, hash| {
        insert.execute(params![
            to_sql(seq),
            new.at,
            kind_name(new.kind),
            new.call.map(to_sql),
            new.body,
            prev,
            hash
        ])?;
        if let Some((server_key, tool)) = crate::standing::index_of(new.kind, &new.body) {
            connection
                .prepare_cached(
                    "INSERT INTO approval_log (seq, kind, server_key, tool) VALUES (?1, ?2, ?3, ?4)",
                )?
                .execute(params![to_sql(seq), kind_name(new.kind), server_key, tool])?;
        }
        Ok(())
    })
}

// === impl MemoryStore ===

/// A record as the memory store keeps it: its columns, as a database would.
#[derive(Debug, Clone)]
pub(crate) struct MemoryRecord {
    seq: u64,
    at: i64,
    kind: String,
    call: Option<u64>,
    body: String,
    prev: String,
    hash: String,
}

/// Appends `entries` to the records of a memory log, chained under `key`;
/// returns their sequence numbers.
pub(crate) fn memory_append(
    records: &mut Vec<MemoryRecord>,
    key: &AuditKey,
    entries: &[NewEntry],
) -> Result<Vec<u64>, StoreError> {
    let tail = records.last().map_or_else(
        || (0, GENESIS.to_owned()),
        |last| (last.seq, last.hash.clone()),
    );
    let (seqs, _) = chain(tail, entries, Some(key), |new, seq, prev, hash| {
        records.push(MemoryRecord {
            seq,
            at: new.at,
            kind: kind_name(new.kind).to_owned(),
            call: new.call,
            body: new.body.clone(),
            prev,
            hash: hash.to_owned(),
        });
        Ok(())
    })?;
    Ok(seqs)
}

impl AuditLog for MemoryStore {
    fn append(&self, entries: &[NewEntry]) -> Result<Vec<u64>, StoreError> {
        memory_append(&mut self.lock().audit, &self.key, entries)
    }

    fn entries(&self, after: u64, limit: usize) -> Result<Vec<Entry>, StoreError> {
        Ok(self
            .lock()
            .audit
            .iter()
            .filter(|record| record.seq > after)
            .take(limit)
            .map(|record| {
                Entry::from_stored(
                    record.seq,
                    record.at,
                    record.kind.clone(),
                    record.call,
                    record.body.clone(),
                    record.prev.clone(),
                    record.hash.clone(),
                )
            })
            .collect())
    }

    fn audit_key(&self) -> Option<&AuditKey> {
        Some(&self.key)
    }
}

// === impl SqliteStore ===

/// A `BEGIN IMMEDIATE` transaction that rolls back when it is dropped
/// uncommitted, as rusqlite's `Transaction` does, but whose `BEGIN` and
/// `COMMIT` are cached statements like the rest of an append: the gateway
/// commits once per turn of its loop, and preparing them each time showed in
/// instruction counts.
///
/// IMMEDIATE: the write lock is taken before the tail is read, so another
/// process appending to the same file waits (busy timeout) instead of
/// failing the upgrade from reader to writer.
pub(crate) struct Immediate<'c> {
    connection: &'c rusqlite::Connection,
}

impl<'c> Immediate<'c> {
    /// Begins the transaction, waiting for the write lock.
    pub(crate) fn begin(connection: &'c rusqlite::Connection) -> rusqlite::Result<Self> {
        connection.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        Ok(Self { connection })
    }

    /// Commits; when the commit fails, dropping `self` rolls back.
    pub(crate) fn commit(self) -> rusqlite::Result<()> {
        self.connection.prepare_cached("COMMIT")?.execute([])?;
        Ok(())
    }
}

impl Drop for Immediate<'_> {
    fn drop(&mut self) {
        // After a commit, or an error on which SQLite rolled back by itself,
        // the connection is out of the transaction already. Otherwise (an
        // insert or the commit failed, or a panic unwinds) nothing of the
        // group is kept, and the connection leaves the transaction, so the
        // next append can begin one.
        if !self.connection.is_autocommit() {
            let _ = self.connection.execute_batch("ROLLBACK");
        }
    }
}

impl AuditLog for SqliteStore {
    fn append(&self, entries: &[NewEntry]) -> Result<Vec<u64>, StoreError> {
        self.keying.may_append()?;
        let connection = self.lock();
        let transaction = Immediate::begin(&connection)?;
        let (seqs, tail) =
            append_in_transaction(transaction.connection, entries, self.keying.key.as_ref())?;
        transaction.commit()?;
        // After the commit, never before; under the connection's lock, so
        // this process's heads are written in the order of its commits.
        self.keying.committed(&tail);
        Ok(seqs)
    }

    /// Looks at `PRAGMA data_version` every 50 ms, which changes when
    /// another connection commits (a read of shared memory, no disk), and
    /// at the log's tail only when it has.
    fn wait_for_entries(&self, after: u64, timeout: Duration) -> Result<bool, StoreError> {
        let deadline = Instant::now() + timeout;
        let mut seen_version = None;
        loop {
            {
                let connection = self.lock();
                let version: i64 =
                    connection.pragma_query_value(None, "data_version", |row| row.get(0))?;
                if seen_version != Some(version) {
                    seen_version = Some(version);
                    let last: Option<i64> =
                        connection.query_row("SELECT max(seq) FROM audit", [], |row| row.get(0))?;
                    if last.and_then(|last| u64::try_from(last).ok()) > Some(after) {
                        return Ok(true);
                    }
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(false);
            }
            std::thread::sleep((deadline - now).min(Duration::from_millis(50)));
        }
    }

    fn entries(&self, after: u64, limit: usize) -> Result<Vec<Entry>, StoreError> {
        let connection = self.lock();
        let mut statement = connection.prepare(
            "SELECT seq, at, kind, call_seq, body, prev, hash FROM audit WHERE seq > ?1 ORDER BY seq LIMIT ?2",
        )?;
        let rows = statement.query_map(
            params![
                to_sql(after),
                to_sql(u64::try_from(limit).unwrap_or(u64::MAX))
            ],
            // SQLite's columns take any type: a value of another type than
            // the log writes is read as well as it can be (and named by
            // `rows_of_another_type`), so that one such row does not keep
            // the rest of the log from being read and verified.
            |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    lenient_integer(row.get_ref(1)?).unwrap_or(0),
                    lenient_text(row.get_ref(2)?),
                    lenient_integer(row.get_ref(3)?),
                    lenient_text(row.get_ref(4)?),
                    lenient_text(row.get_ref(5)?),
                    lenient_text(row.get_ref(6)?),
                ))
            },
        )?;
        let mut entries = Vec::new();
        for row in rows {
            let (seq, at, kind, call, body, prev, hash) = row?;
            entries.push(Entry::from_stored(
                from_sql(seq),
                at,
                kind,
                call.map(from_sql),
                body,
                prev,
                hash,
            ));
        }
        Ok(entries)
    }

    fn rows_below_one(&self, limit: usize) -> Result<(Vec<i64>, u64), StoreError> {
        let connection = self.lock();
        let count: i64 =
            connection.query_row("SELECT count(*) FROM audit WHERE seq < 1", [], |row| {
                row.get(0)
            })?;
        if count == 0 {
            return Ok((Vec::new(), 0));
        }
        let mut statement =
            connection.prepare("SELECT seq FROM audit WHERE seq < 1 ORDER BY seq DESC LIMIT ?1")?;
        let seqs = statement
            .query_map(
                params![to_sql(u64::try_from(limit).unwrap_or(u64::MAX))],
                |row| row.get::<_, i64>(0),
            )?
            .collect::<Result<Vec<_>, _>>()?;
        Ok((seqs, from_sql(count)))
    }

    fn rows_of_another_type(&self, limit: usize) -> Result<(Vec<Problem>, u64), StoreError> {
        const WRONG: &str = "typeof(at) <> 'integer' OR typeof(kind) <> 'text'
             OR typeof(call_seq) NOT IN ('integer', 'null') OR typeof(body) <> 'text'
             OR typeof(prev) <> 'text' OR typeof(hash) <> 'text'";
        let connection = self.lock();
        let count: i64 = connection.query_row(
            &format!("SELECT count(*) FROM audit WHERE {WRONG}"),
            [],
            |row| row.get(0),
        )?;
        if count == 0 {
            return Ok((Vec::new(), 0));
        }
        let mut statement = connection.prepare(&format!(
            "SELECT seq, typeof(at), typeof(kind), typeof(call_seq), typeof(body), typeof(prev), typeof(hash)
             FROM audit WHERE {WRONG} ORDER BY seq LIMIT ?1"
        ))?;
        let rows = statement.query_map(
            params![to_sql(u64::try_from(limit).unwrap_or(u64::MAX))],
            |row| {
                let mut types = Vec::with_capacity(6);
                for idx in 1..=6 {
                    types.push(row.get::<_, String>(idx)?);
                }
                Ok((row.get::<_, i64>(0)?, types))
            },
        )?;
        let mut problems = Vec::new();
        for row in rows {
            let (seq, types) = row?;
            // The first column of another type names the row.
            let columns = [
                ("at", &["integer"][..]),
                ("kind", &["text"][..]),
                ("call_seq", &["integer", "null"][..]),
                ("body", &["text"][..]),
                ("prev", &["text"][..]),
                ("hash", &["text"][..]),
            ];
            if let Some(((column, _), stored)) = columns
                .iter()
                .zip(&types)
                .find(|((_, allowed), stored)| !allowed.contains(&stored.as_str()))
            {
                problems.push(Problem::WrongType {
                    seq,
                    column: (*column).to_owned(),
                    stored: stored.clone(),
                });
            }
        }
        Ok((problems, from_sql(count)))
    }

    fn approval_index(&self) -> Result<Option<Vec<IndexRow>>, StoreError> {
        let connection = self.lock();
        let mut statement = connection.prepare(
            "SELECT seq, kind, server_key, tool,
                 typeof(kind) = 'text' AND typeof(server_key) = 'text' AND typeof(tool) = 'text'
             FROM approval_log ORDER BY seq",
        )?;
        let rows = statement.query_map([], |row| {
            Ok(IndexRow {
                seq: row.get(0)?,
                kind: lenient_text(row.get_ref(1)?),
                server_key: lenient_text(row.get_ref(2)?),
                tool: lenient_text(row.get_ref(3)?),
                typed: row.get(4)?,
            })
        })?;
        Ok(Some(rows.collect::<Result<_, _>>()?))
    }

    fn accept_rollback(&self) -> Result<Option<AcceptedRollback>, StoreError> {
        if self.keying.head_path.is_none() {
            return Ok(None);
        }
        let key = self.keying.key.as_ref().ok_or(StoreError::NoKey)?;
        let connection = self.lock();
        // Under the write lock: nothing is appended between the check and
        // the record that accepts what it found.
        let transaction = Immediate::begin(&connection)?;
        let found = self
            .keying
            .check_head(false, &mut SqliteEnd(transaction.connection))?;
        let Some(rollback) = found else {
            // Accepted meanwhile (by another handle), or never rolled back.
            self.keying.accepted();
            return Ok(None);
        };
        let (_, tail) = append_in_transaction(
            transaction.connection,
            &[rollback.entry(crate::unix_now())],
            Some(key),
        )?;
        transaction.commit()?;
        self.keying.committed(&tail);
        self.keying.accepted();
        Ok(Some(AcceptedRollback {
            seq: tail.0,
            rollback,
        }))
    }

    fn audit_key(&self) -> Option<&AuditKey> {
        self.keying.key.as_ref()
    }

    fn journal_index(&self) -> Option<&dyn crate::journal::JournalIndex> {
        Some(self)
    }

    fn head_path(&self) -> Option<&Path> {
        self.keying.head_path.as_deref()
    }

    fn head_made_with_key(&self) -> bool {
        self.keying.head_made_with_key
    }
}

/// A SQLite value as an integer: an integer as it is, text that is one
/// parsed; `None` for anything else.
pub(crate) fn lenient_integer(value: rusqlite::types::ValueRef<'_>) -> Option<i64> {
    use rusqlite::types::ValueRef;
    match value {
        ValueRef::Integer(n) => Some(n),
        ValueRef::Text(text) => std::str::from_utf8(text).ok()?.trim().parse().ok(),
        ValueRef::Null | ValueRef::Real(_) | ValueRef::Blob(_) => None,
    }
}

/// A SQLite value as text: text or a blob as its bytes (not UTF-8 ones
/// replaced, so a link over them no longer matches), a number written out.
pub(crate) fn lenient_text(value: rusqlite::types::ValueRef<'_>) -> String {
    use rusqlite::types::ValueRef;
    match value {
        ValueRef::Text(bytes) | ValueRef::Blob(bytes) => {
            String::from_utf8_lossy(bytes).into_owned()
        }
        ValueRef::Integer(n) => n.to_string(),
        ValueRef::Real(x) => x.to_string(),
        ValueRef::Null => String::new(),
    }
}

/// The sequence number and link of a SQLite log's last record, if any (a
/// link stored as another type read as well as it can be).
pub(crate) fn sqlite_tail(
    connection: &rusqlite::Connection,
) -> Result<Option<(u64, String)>, StoreError> {
    use rusqlite::OptionalExtension as _;
    Ok(connection
        .query_row(
            "SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1",
            [],
            |row| Ok((from_sql(row.get(0)?), lenient_text(row.get_ref(1)?))),
        )
        .optional()?)
}

/// A SQLite log's end, as the head check reads it.
pub(crate) struct SqliteEnd<'c>(pub(crate) &'c rusqlite::Connection);

impl crate::rollback::LogEnd for SqliteEnd<'_> {
    fn tail(&mut self) -> Result<Option<(u64, String)>, StoreError> {
        sqlite_tail(self.0)
    }

    fn link_at(&mut self, seq: u64) -> Result<Option<String>, StoreError> {
        sqlite_link_at(self.0, seq)
    }
}

/// The link of the record at `seq` in a SQLite log, if there is one.
pub(crate) fn sqlite_link_at(
    connection: &rusqlite::Connection,
    seq: u64,
) -> Result<Option<String>, StoreError> {
    use rusqlite::OptionalExtension as _;
    Ok(connection
        .query_row(
            "SELECT hash FROM audit WHERE seq = ?1",
            params![to_sql(seq)],
            |row| Ok(lenient_text(row.get_ref(0)?)),
        )
        .optional()?)
}

#[cfg(test)]
pub(crate) mod test_values {
    use proptest::prelude::*;
    use serde_json::{Map, Number, Value};

    /// Any JSON value: nested arrays and objects of every scalar, with
    /// floats (`1.0` among them), integers beyond `i64`, and strings with
    /// escapes and characters beyond ASCII.
    pub(crate) fn json_value() -> impl Strategy<Value = Value> {
        let number = prop_oneof![
            any::<i64>().prop_map(Number::from),
            any::<u64>().prop_map(Number::from),
            Just(Number::from(12_345_678_901_234_567_890_u64)),
            any::<f64>().prop_filter_map("JSON has no NaN or infinity", Number::from_f64),
            prop_oneof![Just(1.0), Just(-0.0), Just(0.1), Just(1e300), Just(5e-324)]
                .prop_filter_map("finite", Number::from_f64),
        ];
        let text = prop_oneof![
            any::<String>(),
            Just("quote \" backslash \\ newline \n tab \t nul \u{0} del \u{7f}".to_owned()),
            Just("é ü 日本 🦀 \u{2028} \u{202e} \u{200b}".to_owned()),
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            number.prop_map(Value::Number),
            text.prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::btree_map(any::<String>(), inner, 0..8)
                    .prop_map(|map| Value::Object(map.into_iter().collect::<Map<_, _>>())),
            ]
        })
    }
}

#[cfg(test)]
mod tests {
    use hintgate_policy::pin::canonical_json;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::*;
    use crate::EntryKind;

    proptest! {
        /// `verify` reads a stored body strictly and requires it canonical;
        /// whatever the gateway writes must pass.
        #[test]
        fn canonical_text_survives_a_parse_and_a_rewrite(value in test_values::json_value()) {
            let canonical = canonical_json(&value);
            let parsed: Value = serde_json::from_str(&canonical).unwrap();
            prop_assert_eq!(canonical_json(&parsed), canonical);
        }
    }

    fn outcomes_record(body: &str) -> Entry {
        Entry::from_stored(
            9,
            7,
            "outcomes".into(),
            None,
            body.into(),
            "prev".into(),
            "hash".into(),
        )
    }

    #[test]
    fn an_outcomes_record_splits_into_one_outcome_per_call() {
        let expanded = outcomes_record(
            r#"{"outcomes":[{"attempt":0,"call":3,"duration_ms":5,"outcome":"ok"},{"attempt":1,"call":4,"duration_ms":0,"outcome":"failed"}]}"#,
        )
        .expand();
        assert_eq!(
            expanded
                .iter()
                .map(|entry| (entry.seq, entry.kind, entry.call, entry.hash.as_str()))
                .collect::<Vec<_>>(),
            [
                (9, Some(EntryKind::Outcome), Some(3), "hash"),
                (9, Some(EntryKind::Outcome), Some(4), "hash")
            ]
        );
        assert_eq!(expanded[1].body["outcome"], "failed");
        assert_eq!(
            expanded[1].outcome_record(),
            Some(&crate::record::OutcomeRecord {
                attempt: 1,
                duration_ms: 0,
                outcome: crate::record::OutcomeCode::Failed
            })
        );
    }

    #[test]
    fn an_outcomes_record_that_cannot_be_split_is_given_back_whole() {
        for body in [
            // An item that names no call (or not as a sequence number).
            r#"{"outcomes":[{"attempt":0,"call":3,"duration_ms":5,"outcome":"ok"},{"attempt":0,"duration_ms":5,"outcome":"ok"}]}"#,
            r#"{"outcomes":[{"attempt":0,"call":"3","duration_ms":5,"outcome":"ok"}]}"#,
            // An outcome hintgate does not write.
            r#"{"outcomes":[{"attempt":0,"call":3,"duration_ms":5,"outcome":"exploded"}]}"#,
            // Not a list, an empty one, or none at all.
            r#"{"outcomes":{"call":3,"outcome":"ok"}}"#,
            r#"{"outcomes":[]}"#,
            r#"{"outcome":"ok"}"#,
            "not JSON any more",
            // A list that repeats a key: malformed, never split.
            r#"{"outcomes":[{"call":3,"call":4,"outcome":"ok"}]}"#,
        ] {
            let record = outcomes_record(body);
            assert_eq!(record.clone().expand(), [record]);
        }
        // Any other record is always given back as it is.
        let call = Entry::from_stored(
            9,
            7,
            "call".into(),
            None,
            r#"{"tool":"read"}"#.into(),
            "p".into(),
            "h".into(),
        );
        assert_eq!(call.clone().expand(), [call]);
    }

    #[test]
    fn a_kind_hintgate_does_not_write_is_malformed_never_a_call() {
        let entry = Entry::from_stored(
            1,
            0,
            "note".into(),
            None,
            r#"{"tool":"read"}"#.into(),
            "p".into(),
            "h".into(),
        );
        assert_eq!(entry.kind, None);
        assert_eq!(
            entry.malformed,
            Some(Malformed::UnknownKind {
                kind: "note".into()
            })
        );
        assert_eq!(entry.clone().expand(), [entry]);
    }

    #[test]
    fn an_append_refuses_to_chain_after_another_keys_record_or_without_a_key() {
        let ours = AuditKey::from_secret([1u8; 32]);
        let theirs = AuditKey::from_secret([2u8; 32]);
        let entry = NewEntry::from_value(0, EntryKind::Call, None, &json!({}));
        let their_tail = (3, keyed_link(&theirs, GENESIS, 3, 0, "call", None, "{}"));
        let err = chain(
            their_tail,
            std::slice::from_ref(&entry),
            Some(&ours),
            |_, _, _, _| Ok(()),
        )
        .unwrap_err();
        assert!(
            matches!(&err, StoreError::OtherKey { found, ours: mine } if found == theirs.id() && mine == ours.id()),
            "{err}"
        );
        assert!(matches!(
            chain(
                (0, GENESIS.into()),
                std::slice::from_ref(&entry),
                None,
                |_, _, _, _| Ok(())
            ),
            Err(StoreError::NoKey)
        ));
        // After a plain (older) tail, the chain goes on, keyed.
        let plain_tail = (5, plain_link(GENESIS, 5, 0, "call", None, "{}"));
        let (seqs, (last, link)) =
            chain(plain_tail, &[entry], Some(&ours), |_, _, _, _| Ok(())).unwrap();
        assert_eq!((seqs, last), (vec![6], 6));
        assert!(link.starts_with(&format!("hmac-sha256:{}:", ours.id())));
    }
}
