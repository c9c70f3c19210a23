//! The audit log, a hash chain: one record per tool call that reached the
//! gateway, and the outcome of each call that was sent on, in a record of
//! its own ([`EntryKind::Outcome`]) or, with the outcomes of the other calls
//! that ended in the same turn of the gateway, in one shared record
//! ([`EntryKind::Outcomes`]).
//!
//! Each entry carries the hash of the one before; the hash covers the
//! entry's sequence number, time, kind, the call it belongs to and its body.
//! [`AuditLog::verify`] walks the chain and names the first entry whose hash
//! does not follow, so an edited, inserted or deleted entry is found.

use std::time::{Duration, Instant};

use rusqlite::params;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use hintgate_policy::pin::canonical_json;

use crate::{MemoryStore, SqliteStore, StoreError, from_sql, to_sql};

/// The hash before the first entry.
pub(crate) const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// What an entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EntryKind {
    /// A call and the decision on it, written before the call is sent (a
    /// call that is refused is never sent).
    Call,
    /// How one call ended; [`NewEntry::call`] names the call.
    Outcome,
    /// How several calls ended, in one record: a turn of the gateway that
    /// saw several calls end writes one record, not one each. Its body is
    /// `{"outcomes": [{"call": SEQ, "outcome": ..., ...}, ...]}`;
    /// [`Entry::expand`] gives one [`EntryKind::Outcome`] entry per call.
    Outcomes,
}

/// An entry to append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEntry {
    /// Seconds since the Unix epoch.
    pub at: i64,
    /// A call, one call's outcome, or the outcomes of several calls.
    pub kind: EntryKind,
    /// For an [`EntryKind::Outcome`]: the sequence number of its call.
    /// `None` for a call, and for an [`EntryKind::Outcomes`] record, whose
    /// items each name their call.
    pub call: Option<u64>,
    /// Everything else (server, tool, redacted arguments, verdict, reasons,
    /// approver, pin; or outcome and duration; or the list of outcomes) as
    /// canonical JSON text, as
    /// [`canonical_json`] writes it. The log hashes and stores it as given,
    /// so the caller serialises each record once; a text that is not
    /// canonical JSON is kept, and [`AuditLog::verify`] reports its entry as
    /// broken. [`NewEntry::from_value`] builds one from a [`Value`].
    pub body: String,
}

/// An entry as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Entry {
    /// Its place in the log, from 1.
    pub seq: u64,
    /// Seconds since the Unix epoch.
    pub at: i64,
    /// A call, one call's outcome, or the outcomes of several calls.
    pub kind: EntryKind,
    /// For an [`EntryKind::Outcome`] (also one that [`Entry::expand`] made
    /// from an [`EntryKind::Outcomes`] record): its call. `None` for a call
    /// and for an [`EntryKind::Outcomes`] record, whose items each name
    /// their call.
    pub call: Option<u64>,
    /// The recorded facts.
    pub body: Value,
    /// The hash of the entry before.
    pub prev: String,
    /// This entry's hash.
    pub hash: String,
}

/// What [`AuditLog::verify`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verification {
    /// Entries checked.
    pub checked: u64,
    /// The first entry whose hash does not follow from the one before.
    pub first_broken: Option<u64>,
}

/// The audit log.
///
/// Contract: `append` writes its entries in order, each chained to the one
/// before, all or none, and they are durable when it returns; entries are
/// never changed or removed by the log itself.
pub trait AuditLog: Send + Sync + std::fmt::Debug {
    /// Appends entries; returns their sequence numbers.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the log cannot be written.
    fn append(&self, entries: &[NewEntry]) -> Result<Vec<u64>, StoreError>;

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

    /// Checks the whole chain.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the log cannot be read.
    fn verify(&self) -> Result<Verification, StoreError> {
        let mut prev = GENESIS.to_owned();
        let mut checked = 0;
        let mut after = 0;
        loop {
            let batch = self.entries(after, 1000)?;
            if batch.is_empty() {
                return Ok(Verification {
                    checked,
                    first_broken: None,
                });
            }
            for entry in batch {
                checked += 1;
                let expected = chain_hash(
                    &prev,
                    entry.seq,
                    entry.at,
                    entry.kind,
                    entry.call,
                    &canonical_json(&entry.body),
                );
                if entry.prev != prev || entry.hash != expected {
                    return Ok(Verification {
                        checked,
                        first_broken: Some(entry.seq),
                    });
                }
                prev = entry.hash;
                after = entry.seq;
            }
        }
    }
}

/// The hash of an entry, chained to `prev`.
///
/// `canonical` is the body as canonical JSON (sorted keys, no whitespace),
/// as the caller gave it in [`NewEntry::body`]: what the hash covers, and
/// what every store keeps as the body. [`AuditLog::verify`] parses a stored
/// body and writes it as canonical JSON again, which gives back the same
/// text (a property test holds it to that).
pub(crate) fn chain_hash(
    prev: &str,
    seq: u64,
    at: i64,
    kind: EntryKind,
    call: Option<u64>,
    canonical: &str,
) -> String {
    // The same bytes as `format!("{prev}\n{seq}\n{at}\n{kind}\n{call}\n")`
    // followed by the body, fed to the hasher piece by piece: this runs for
    // every record on the gateway's call path, so the numbers are written
    // with `itoa` (the same digits as `Display`) into a buffer on the stack
    // instead of through the formatting machinery into a new string.
    let mut number = itoa::Buffer::new();
    let mut hasher = Sha256::new();
    hasher.update(prev.as_bytes());
    hasher.update(b"\n");
    hasher.update(number.format(seq).as_bytes());
    hasher.update(b"\n");
    hasher.update(number.format(at).as_bytes());
    hasher.update(b"\n");
    hasher.update(kind_name(kind).as_bytes());
    hasher.update(b"\n");
    if let Some(call) = call {
        hasher.update(number.format(call).as_bytes());
    }
    hasher.update(b"\n");
    hasher.update(canonical.as_bytes());
    // The digest's own lower-case hex (written through a buffer on the
    // stack): `hex::encode` builds the string a character at a time, which
    // costs about 100 ns a record more.
    format!("{:x}", hasher.finalize())
}

/// The stored name of an entry kind.
pub(crate) const fn kind_name(kind: EntryKind) -> &'static str {
    match kind {
        EntryKind::Call => "call",
        EntryKind::Outcome => "outcome",
        EntryKind::Outcomes => "outcomes",
    }
}

pub(crate) fn kind_from(text: &str) -> EntryKind {
    match text {
        "outcome" => EntryKind::Outcome,
        "outcomes" => EntryKind::Outcomes,
        _ => EntryKind::Call,
    }
}

// === impl Entry ===

impl Entry {
    /// The entry as readers take it: one [`EntryKind::Outcome`] entry for
    /// each call an [`EntryKind::Outcomes`] entry ends (each keeps the
    /// record's sequence number, time and hashes, and gets its call and its
    /// own outcome as body); any other entry as it is.
    ///
    /// An [`EntryKind::Outcomes`] entry that is not a non-empty list of
    /// outcomes each naming its call (`{"outcomes": [{"call": SEQ, ...}]}`)
    /// is also given back as it is, whole, rather than split into outcomes
    /// that name no call or into nothing: a reader shows it as a record it
    /// cannot read instead of losing it or taking it for a call.
    #[must_use]
    pub fn expand(self) -> Vec<Self> {
        if self.kind != EntryKind::Outcomes || !self.splits_into_outcomes() {
            return vec![self];
        }
        let Self {
            seq,
            at,
            mut body,
            prev,
            hash,
            ..
        } = self;
        let items = match body.get_mut("outcomes").map(Value::take) {
            Some(Value::Array(items)) => items,
            _ => Vec::new(),
        };
        items
            .into_iter()
            .map(|item| Self {
                seq,
                at,
                kind: EntryKind::Outcome,
                call: item.get("call").and_then(Value::as_u64),
                body: item,
                prev: prev.clone(),
                hash: hash.clone(),
            })
            .collect()
    }

    /// Whether the body is a non-empty list of outcomes that each name
    /// their call.
    fn splits_into_outcomes(&self) -> bool {
        self.body
            .get("outcomes")
            .and_then(Value::as_array)
            .is_some_and(|items| {
                !items.is_empty()
                    && items
                        .iter()
                        .all(|item| item.get("call").and_then(Value::as_u64).is_some())
            })
    }
}

// === impl NewEntry ===

impl NewEntry {
    /// An entry whose body is `body` as canonical JSON.
    #[must_use]
    pub fn from_value(at: i64, kind: EntryKind, call: Option<u64>, body: &Value) -> Self {
        Self {
            at,
            kind,
            call,
            body: canonical_json(body),
        }
    }
}

/// A stored body as a value; one that is no longer JSON is kept as text, so
/// verify reports its entry as broken instead of failing to read.
pub(crate) fn parse_body(body: String) -> Value {
    serde_json::from_str(&body).unwrap_or(Value::String(body))
}

/// Numbers and chains `entries` after the log's tail (the sequence number
/// and hash of its last entry; 0 and [`GENESIS`] when it is empty), the
/// same way in every store: `store` gets each entry in order with its
/// sequence number, the hash of the entry before it and its own hash, and
/// the first error stops the append. Returns the sequence numbers.
pub(crate) fn chain(
    tail: (u64, String),
    entries: &[NewEntry],
    mut store: impl FnMut(&NewEntry, u64, String, &str) -> Result<(), StoreError>,
) -> Result<Vec<u64>, StoreError> {
    let (mut seq, mut prev) = tail;
    let mut seqs = Vec::with_capacity(entries.len());
    for new in entries {
        seq += 1;
        let hash = chain_hash(&prev, seq, new.at, new.kind, new.call, &new.body);
        store(new, seq, prev, &hash)?;
        seqs.push(seq);
        prev = hash;
    }
    Ok(seqs)
}

/// The inserts of one append, inside its transaction.
fn append_in_transaction(
    connection: &rusqlite::Connection,
    entries: &[NewEntry],
) -> Result<Vec<u64>, StoreError> {
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
    chain(tail, entries, |new, seq, prev, hash| {
        insert.execute(params![
            to_sql(seq),
            new.at,
            kind_name(new.kind),
            new.call.map(to_sql),
            new.body,
            prev,
            hash
        ])?;
        Ok(())
    })
}

// === impl MemoryStore ===

impl AuditLog for MemoryStore {
    fn append(&self, entries: &[NewEntry]) -> Result<Vec<u64>, StoreError> {
        let mut state = self.lock();
        let tail = state.audit.last().map_or_else(
            || (0, GENESIS.to_owned()),
            |last| (last.seq, last.hash.clone()),
        );
        chain(tail, entries, |new, seq, prev, hash| {
            state.audit.push(Entry {
                seq,
                at: new.at,
                kind: new.kind,
                call: new.call,
                body: parse_body(new.body.clone()),
                prev,
                hash: hash.to_owned(),
            });
            Ok(())
        })
    }

    fn entries(&self, after: u64, limit: usize) -> Result<Vec<Entry>, StoreError> {
        Ok(self
            .lock()
            .audit
            .iter()
            .filter(|entry| entry.seq > after)
            .take(limit)
            .cloned()
            .collect())
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
struct Immediate<'c> {
    connection: &'c rusqlite::Connection,
}

impl<'c> Immediate<'c> {
    /// Begins the transaction, waiting for the write lock.
    fn begin(connection: &'c rusqlite::Connection) -> rusqlite::Result<Self> {
        connection.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        Ok(Self { connection })
    }

    /// Commits; when the commit fails, dropping `self` rolls back.
    fn commit(self) -> rusqlite::Result<()> {
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
        let connection = self.lock();
        let transaction = Immediate::begin(&connection)?;
        let seqs = append_in_transaction(transaction.connection, entries)?;
        transaction.commit()?;
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
            |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, String>(2)?,
                    row.get::<_, Option<i64>>(3)?,
                    row.get::<_, String>(4)?,
                    row.get::<_, String>(5)?,
                    row.get::<_, String>(6)?,
                ))
            },
        )?;
        let mut entries = Vec::new();
        for row in rows {
            let (seq, at, kind, call, body, prev, hash) = row?;
            entries.push(Entry {
                seq: from_sql(seq),
                at,
                kind: kind_from(&kind),
                call: call.map(from_sql),
                body: parse_body(body),
                prev,
                hash,
            });
        }
        Ok(entries)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_chain_hash_covers_the_same_bytes_as_the_formatted_header() {
        use sha2::{Digest, Sha256};
        for (seq, at, call) in [
            (1, 0, None),
            (42, -1_795_989_518, Some(7)),
            (u64::MAX, i64::MIN, Some(u64::MAX)),
        ] {
            for kind in [EntryKind::Call, EntryKind::Outcome, EntryKind::Outcomes] {
                let call_text = call.map_or(String::new(), |call: u64| call.to_string());
                let header = format!("prev\n{seq}\n{at}\n{}\n{call_text}\n", kind_name(kind));
                let mut hasher = Sha256::new();
                hasher.update(header.as_bytes());
                hasher.update(b"{}");
                assert_eq!(
                    chain_hash("prev", seq, at, kind, call, "{}"),
                    hex::encode(hasher.finalize())
                );
            }
        }
    }

    use proptest::prelude::*;
    use serde_json::{Map, Number, Value};

    use super::*;

    /// A hash computed elsewhere (Python's `hashlib`) over the documented
    /// bytes: a change to how the chain hash is computed breaks every
    /// stored log, and this test.
    #[test]
    fn the_chain_hash_is_the_sha256_of_the_documented_bytes() {
        assert_eq!(
            chain_hash(
                GENESIS,
                42,
                -1_795_989_518,
                EntryKind::Outcomes,
                Some(7),
                r#"{"outcomes":[{"call":7,"outcome":"ok"}]}"#
            ),
            "3b5a7185be77d675b5feded919dcc569c7e2452632912573a8d86d7041a49e04"
        );
    }

    /// Any JSON value: nested arrays and objects of every scalar, with
    /// floats (`1.0` among them), integers beyond `i64`, and strings with
    /// escapes and characters beyond ASCII.
    fn json_value() -> impl Strategy<Value = Value> {
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

    proptest! {
        /// Every sequence number, time and call is written as `Display`
        /// writes it.
        #[test]
        fn the_chain_hash_covers_the_formatted_header_for_any_numbers(
            seq in any::<u64>(),
            at in any::<i64>(),
            call in any::<Option<u64>>(),
        ) {
            use sha2::{Digest, Sha256};
            let call_text = call.map_or(String::new(), |call| call.to_string());
            let header = format!("{GENESIS}\n{seq}\n{at}\ncall\n{call_text}\n");
            let mut hasher = Sha256::new();
            hasher.update(header.as_bytes());
            hasher.update(b"[1]");
            prop_assert_eq!(
                chain_hash(GENESIS, seq, at, EntryKind::Call, call, "[1]"),
                hex::encode(hasher.finalize())
            );
        }
    }

    proptest! {
        /// `verify` parses a stored body and writes it as canonical JSON
        /// again; that must give back the text that was hashed.
        #[test]
        fn canonical_text_survives_a_parse_and_a_rewrite(value in json_value()) {
            let canonical = canonical_json(&value);
            let parsed: Value = serde_json::from_str(&canonical).unwrap();
            prop_assert_eq!(canonical_json(&parsed), canonical);
        }
    }

    fn outcomes_record(body: Value) -> Entry {
        Entry {
            seq: 9,
            at: 7,
            kind: EntryKind::Outcomes,
            call: None,
            body,
            prev: "prev".into(),
            hash: "hash".into(),
        }
    }

    #[test]
    fn an_outcomes_record_splits_into_one_outcome_per_call() {
        let expanded = outcomes_record(serde_json::json!({"outcomes": [
            {"call": 3, "outcome": "ok"},
            {"call": 4, "outcome": "failed"},
        ]}))
        .expand();
        assert_eq!(
            expanded
                .iter()
                .map(|entry| (entry.seq, entry.kind, entry.call, entry.hash.as_str()))
                .collect::<Vec<_>>(),
            [
                (9, EntryKind::Outcome, Some(3), "hash"),
                (9, EntryKind::Outcome, Some(4), "hash")
            ]
        );
        assert_eq!(expanded[1].body["outcome"], "failed");
    }

    #[test]
    fn an_outcomes_record_that_cannot_be_split_is_given_back_whole() {
        for body in [
            // An item that names no call (or not as a sequence number).
            serde_json::json!({"outcomes": [{"call": 3, "outcome": "ok"}, {"outcome": "ok"}]}),
            serde_json::json!({"outcomes": [{"call": "3", "outcome": "ok"}]}),
            // Not a list, an empty one, or none at all.
            serde_json::json!({"outcomes": {"call": 3, "outcome": "ok"}}),
            serde_json::json!({"outcomes": []}),
            serde_json::json!({"outcome": "ok"}),
            Value::String("not JSON any more".into()),
        ] {
            let record = outcomes_record(body);
            assert_eq!(record.clone().expand(), [record]);
        }
        // Any other record is always given back as it is.
        let mut call = outcomes_record(serde_json::json!({"tool": "read"}));
        call.kind = EntryKind::Call;
        assert_eq!(call.clone().expand(), [call]);
    }

    #[test]
    fn an_entry_from_a_value_carries_its_canonical_text() {
        let entry = NewEntry::from_value(
            7,
            EntryKind::Outcome,
            Some(3),
            &serde_json::json!({"b": 1.0, "a": [12_345_678_901_234_567_890_u64, "é\n"]}),
        );
        assert_eq!(entry.body, r#"{"a":[12345678901234567890,"é\n"],"b":1.0}"#);
        assert_eq!(
            (entry.at, entry.kind, entry.call),
            (7, EntryKind::Outcome, Some(3))
        );
    }
}
