//! The audit records of one turn of the event loop, written together.
//!
//! Every call that reaches the gateway gets a record; a call that is sent
//! on gets one more with its outcome. The pipeline adds records to the turn's
//! batch as it goes; at the end of a turn that made a call record, the batch
//! is written at once (one write for sixteen calls in flight, not sixteen),
//! and only then are the turn's calls sent and its answers released (see
//! `Gateway::end_turn`). So a call's record is durable before its server
//! sees it, without a thread round trip per call.
//!
//! Where the batch goes depends on the store. On SQLite, it is appended to
//! this run's journal ([`hintgate_store::journal`]): framed, chained under
//! the audit key, in one `write(2)` (and an `fdatasync` with `[audit]
//! durability = "fsync"`); the indexer thread then appends it to the
//! store's log in large batches, off the call path, and a record names its
//! call by the call's number in the run, which the index turns into the
//! log's sequence number. On any other store (PostgreSQL, memory), the
//! batch is appended to the log in one transaction on the loop's thread.
//!
//! Outcome records ride in the next write: a turn that made only outcomes
//! does not write for them, and the host gets its answers at once. The next
//! call's write carries them, or, when no call comes, the flush at most
//! [`OUTCOME_FLUSH`] later. A crash can lose the outcomes of that last
//! moment, never a call record (design §8); the next gateway to start on
//! the store marks the calls left without one `interrupted`.
//!
//! Records are the store's record types ([`hintgate_store::record`]),
//! written once by their one writer as canonical JSON (sorted keys, no
//! whitespace, the form the keyed chain covers byte for byte); the
//! arguments go in as the redactor writes them, without a second pass. The store chains them under the audit key and, after the
//! commit, writes the log's head (and, when a witness is set up, a
//! checkpoint now and then) outside the database; the journal sees none of
//! it.

use std::sync::Arc;
use std::time::Duration;

use hintgate_policy::config::Instance;
use hintgate_policy::decide::Decision;
use hintgate_policy::redact::Redactor;
use hintgate_store::journal::{Durability, Indexer, JournalSettings, JournalWriter, Journaled};
use hintgate_store::record::{
    Arguments, CallRecord, EditRecord, Idempotency, OutcomeCode, OutcomeItem, OutcomeRecord,
    OutcomesRecord,
};
use hintgate_store::{AuditLog, NewEntry, Record};
use serde_json::Value;
use tokio::time::Instant;

use super::call::{Approver, CallContext, Outcome};

/// How long an outcome record waits for the next commit before it is
/// committed on its own.
pub(crate) const OUTCOME_FLUSH: Duration = Duration::from_millis(50);

/// The most records kept for the next commit while the log fails (the
/// records of calls that ended at the gateway, and outcomes): beyond this,
/// the oldest are given up, and the loss is logged.
const MAX_HELD: usize = 10_000;

/// This turn's records, and where they go.
#[derive(Debug)]
pub(crate) struct Journal {
    log: Option<Arc<dyn AuditLog>>,
    /// This run's journal file and the thread that indexes it, for a store
    /// that keeps a journal index (SQLite); `None`: batches are appended to
    /// the log itself.
    file: Option<FileSink>,
    /// For a log that appends on a thread of its own (PostgreSQL): the
    /// writes made there and the calls that wait for them.
    later: Option<Later>,
    /// This gateway run, as the records name it.
    session: String,
    redactor: Redactor,
    batch: Vec<NewEntry>,
    /// For each record of the batch: whether it is kept for the next commit
    /// when this one fails. A call that ended at the gateway keeps its
    /// record; a call to forward does not (it is refused, and never runs).
    held: Vec<bool>,
    /// The outcomes waiting for the next commit: (call, outcome, duration in
    /// milliseconds, attempt).
    outcomes: Vec<(u64, Outcome, u64, u32)>,
    /// The batch holds a call record, which something waits on.
    urgent: bool,
    /// When the oldest record of the batch was added.
    since: Option<Instant>,
    /// Records and commits so far, for the log at the end.
    counts: (u64, u64),
    /// Where each commit's latency is counted.
    metrics: Option<Arc<crate::metrics::Metrics>>,
}

/// What the log reports of a write made off the loop's thread: its ticket,
/// and the records' sequence numbers or why they were not written.
type Report = (u64, Result<Vec<u64>, String>);

/// Writes made off the loop's thread (a log with a thread of its own:
/// PostgreSQL), one at a time, and the calls that wait for them.
#[derive(Debug)]
struct Later {
    /// The write made and not yet reported.
    pending: Option<Pending>,
    next_ticket: u64,
    reports_tx: std::sync::mpsc::Sender<Report>,
    reports: std::sync::mpsc::Receiver<Report>,
    /// Wakes the loop when a report comes.
    wake: crate::event::EventSender,
    /// The calls whose records ride in a write not yet reported: the write's
    /// ticket (`None`: the next write, which the batch now fills), the call,
    /// and its record's place in that write.
    parked: Vec<(Option<u64>, Box<CallContext>, usize)>,
}

/// A write made off the loop's thread, not yet reported.
#[derive(Debug)]
struct Pending {
    ticket: u64,
    /// What is kept for the next write when this one fails: the records of
    /// calls that ended at the gateway, and the outcomes.
    kept: Vec<NewEntry>,
    outcomes: Vec<(u64, Outcome, u64, u32)>,
    /// Records in it.
    records: u64,
    began: std::time::Instant,
}

/// A write reported: its sequence numbers or why not, and the calls that
/// waited for it with their records' places.
pub(crate) type Reported = (Result<Vec<u64>, String>, Vec<(Box<CallContext>, usize)>);

/// A run's journal and its indexer.
#[derive(Debug)]
struct FileSink {
    writer: JournalWriter,
    indexer: Indexer,
}

/// What a call record says.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallFields<'a> {
    /// The host's request id, as raw JSON text.
    pub request_id: &'a str,
    /// The server's configured name ("" when none was resolved).
    pub server: &'a str,
    /// The server's identity key.
    pub identity: Option<&'a str>,
    /// The server's own tool name (or the name the host called).
    pub tool: &'a str,
    /// The arguments (redacted as they are written).
    pub arguments: Option<&'a Value>,
    /// The decision and its reasons.
    pub decision: &'a Decision,
    /// Who let it through, or who ended it.
    pub approver: &'a Approver,
    /// The pin digest of the definition decided on (`sha256:...`).
    pub pin: Option<&'a str>,
    /// For a call that ends at the gateway: how.
    pub outcome: Option<Outcome>,
    /// Who the host is, when its transport authenticated it (over HTTP:
    /// its token's name).
    pub host: Option<&'a str>,
    /// The call's idempotency key, and whether the gateway filled it in.
    pub idempotency: Option<(&'a str, bool)>,
    /// For a server with a read-only instance, the instance the call was
    /// decided for, and that instance's identity key when it is the
    /// read-only one (`identity` stays the full instance's, whose
    /// definitions are pinned).
    pub instance: Option<(Instance, Option<&'a str>)>,
    /// For a server whose enforced sandbox lets it reach a list of hosts
    /// (`network = ["host:port", ...]`): those hosts, as configured.
    pub egress: Option<&'a [String]>,
    /// For a call sent to a server behind OAuth: the scopes of the token it
    /// goes with, as granted (never the token).
    pub token_scope: Option<&'a str>,
    /// The call's preview, as the log keeps it.
    pub preview: Option<&'a hintgate_store::record::PreviewRecord>,
    /// For a call a person edited: who, and the host's arguments (redacted
    /// as they are written; `arguments` are the edited ones).
    pub edit: Option<(&'a str, Option<&'a Value>)>,
}

// === impl Journal ===

impl Journal {
    /// A journal writing to `log` (none: nothing is recorded).
    pub fn new(log: Option<Arc<dyn AuditLog>>, session: String, redactor: Redactor) -> Self {
        Self {
            log,
            file: None,
            later: None,
            session,
            redactor,
            batch: Vec::with_capacity(64),
            held: Vec::with_capacity(64),
            outcomes: Vec::with_capacity(64),
            urgent: false,
            since: None,
            counts: (0, 0),
            metrics: None,
        }
    }

    /// The same journal, counting each commit's latency in `metrics`.
    pub fn with_metrics(mut self, metrics: Option<Arc<crate::metrics::Metrics>>) -> Self {
        self.metrics = metrics;
        self
    }

    /// The same journal, writing to a journal file of this run when the
    /// store keeps a journal index (SQLite): first it imports what the
    /// journals of ended runs hold and the index lacks (their calls left
    /// pending marked `interrupted`), then it makes this run's journal.
    ///
    /// # Errors
    ///
    /// The journal cannot be made, or its indexer started.
    pub fn with_journal(mut self, fsync: bool, segment_bytes: Option<u64>) -> Result<Self, String> {
        let Some(log) = self.log.clone() else {
            return Ok(self);
        };
        let (Some(index), Some(key)) = (log.journal_index(), log.audit_key()) else {
            return Ok(self);
        };
        match hintgate_store::journal::import_ended(log.as_ref()) {
            Ok(imported) if imported.runs > 0 => tracing::info!(
                records = imported.records,
                interrupted = imported.interrupted,
                runs = imported.runs,
                "imported the audit journals of ended runs"
            ),
            Ok(_) => {}
            Err(err) => tracing::warn!("the audit journals of ended runs were not imported: {err}"),
        }
        let settings = JournalSettings {
            durability: if fsync {
                Durability::Fsync
            } else {
                Durability::Write
            },
            segment_bytes: segment_bytes.unwrap_or(hintgate_store::journal::DEFAULT_SEGMENT_BYTES),
        };
        let writer = JournalWriter::create(index.journal_dir(), &self.session, key, settings)
            .map_err(|err| err.to_string())?;
        let indexer = Indexer::spawn(Arc::clone(&log), self.session.clone())
            .map_err(|err| format!("the audit indexer could not start: {err}"))?;
        self.file = Some(FileSink { writer, indexer });
        Ok(self)
    }

    /// The same journal, writing off the loop's thread when the log can
    /// (PostgreSQL; not with a journal file, whose write is the record):
    /// each report wakes the loop through `wake`.
    pub fn with_later(mut self, wake: crate::event::EventSender) -> Self {
        if self.file.is_none() && self.log.as_ref().is_some_and(|log| log.appends_later()) {
            let (reports_tx, reports) = std::sync::mpsc::channel();
            self.later = Some(Later {
                pending: None,
                next_ticket: 1,
                reports_tx,
                reports,
                wake,
                parked: Vec::new(),
            });
        }
        self
    }

    /// Whether the batch is written off the loop's thread
    /// ([`Journal::write_later`]), its calls parked until it is reported.
    pub fn writes_later(&self) -> bool {
        self.later.is_some()
    }

    /// Starts writing the batch (and the outcomes waiting) off the loop's
    /// thread; returns the write's ticket, `None` when there is nothing to
    /// write or a write is still out (the batch waits for its report). The
    /// calls parked for the next write ride in this one.
    pub fn write_later(&mut self) -> Option<u64> {
        let log = Arc::clone(self.log.as_ref()?);
        if self.later.as_ref()?.pending.is_some() {
            return None;
        }
        let outcomes = self.outcomes_entry();
        let with_outcomes = outcomes.is_some();
        if let Some(outcomes) = outcomes {
            self.batch.push(outcomes);
        }
        if self.batch.is_empty() {
            return None;
        }
        let kept: Vec<NewEntry> = self
            .batch
            .iter()
            .zip(&self.held)
            .filter(|(_, held)| **held)
            .map(|(entry, _)| entry.clone())
            .collect();
        let entries = std::mem::take(&mut self.batch);
        let outcomes = if with_outcomes {
            std::mem::take(&mut self.outcomes)
        } else {
            Vec::new()
        };
        self.held.clear();
        self.urgent = false;
        self.since = None;
        let later = self.later.as_mut()?;
        let ticket = later.next_ticket;
        later.next_ticket += 1;
        later.pending = Some(Pending {
            ticket,
            kept,
            outcomes,
            records: entries.len() as u64,
            began: std::time::Instant::now(),
        });
        for parked in &mut later.parked {
            parked.0.get_or_insert(ticket);
        }
        let reports = later.reports_tx.clone();
        let wake = later.wake.clone();
        log.append_later(
            entries,
            Box::new(move |written| {
                let _ = reports.send((ticket, written.map_err(|err| err.to_string())));
                wake.wake();
            }),
        );
        Some(ticket)
    }

    /// Parks a call until the write that holds its record (`ticket`, or the
    /// next one) is reported.
    pub fn park(&mut self, ticket: Option<u64>, cx: Box<CallContext>, place: usize) {
        if let Some(later) = &mut self.later {
            later.parked.push((ticket, cx, place));
        }
    }

    /// The writes reported since the last look (waiting for the one out,
    /// with `wait`), each with the calls parked for it.
    pub fn reported(&mut self, wait: bool) -> Vec<Reported> {
        let mut done = Vec::new();
        loop {
            let Some(later) = &mut self.later else {
                return done;
            };
            let report = if wait && later.pending.is_some() {
                later.reports.recv().ok()
            } else {
                later.reports.try_recv().ok()
            };
            let Some((ticket, written)) = report else {
                return done;
            };
            let calls = later
                .parked
                .extract_if(.., |parked| parked.0 == Some(ticket));
            let calls: Vec<(Box<CallContext>, usize)> =
                calls.map(|(_, cx, place)| (cx, place)).collect();
            if let Some(pending) = later.pending.take_if(|pending| pending.ticket == ticket) {
                self.settle(pending, written.as_ref().err());
            }
            done.push((written, calls));
        }
    }

    /// Counts a reported write, or keeps what must not be lost of one that
    /// failed for the next.
    fn settle(&mut self, pending: Pending, failed: Option<&String>) {
        if let Some(metrics) = &self.metrics {
            metrics.committed(pending.began.elapsed());
        }
        let Some(err) = failed else {
            self.counts.0 += pending.records;
            self.counts.1 += 1;
            return;
        };
        tracing::error!("the audit log could not be written: {err}");
        self.held
            .extend(std::iter::repeat_n(true, pending.kept.len()));
        self.batch.extend(pending.kept);
        let mut outcomes = pending.outcomes;
        outcomes.append(&mut self.outcomes);
        self.outcomes = outcomes;
        self.give_up_beyond(MAX_HELD);
        self.since = (!self.batch.is_empty() || !self.outcomes.is_empty()).then(Instant::now);
    }

    /// Ends this run's journal: waits for the indexer to index it, and,
    /// when it has all, closes the run in the index (a call still without
    /// an outcome is marked `interrupted`). What it could not index the
    /// next start imports.
    pub fn finish(&mut self) {
        let Some(FileSink { writer, indexer }) = self.file.take() else {
            return;
        };
        let indexed = indexer.finish();
        if indexed.waits > 0 {
            tracing::debug!(
                waits = indexed.waits,
                "the gateway waited for the audit indexer to take its backlog"
            );
        }
        if indexed.behind > 0 {
            tracing::error!(
                behind = indexed.behind,
                "the audit index is behind this run's journal; the next start imports the rest"
            );
        } else if let Some(index) = self.log.as_ref().and_then(|log| log.journal_index())
            && let Err(err) = index.close(writer.run(), &indexed.open)
        {
            tracing::warn!("this run's audit journal was not closed in the index: {err}");
        }
        drop(writer);
    }

    /// `arguments` as the log keeps them: redacted as a record's are.
    pub fn redacted(&self, arguments: &Value) -> Value {
        let mut out = String::new();
        self.redactor.write_canonical(arguments, &mut out);
        // The canonical writer writes JSON; a value it could not is kept out.
        serde_json::from_str(&out).unwrap_or(Value::Null)
    }

    /// Whether records are kept at all.
    pub fn enabled(&self) -> bool {
        self.log.is_some()
    }

    /// Adds a call's record to this turn's batch; returns its place in the
    /// batch (`None` without a log).
    pub fn call(&mut self, fields: &CallFields<'_>) -> Option<usize> {
        self.log.as_ref()?;
        let record = Record::Call(Box::new(self.call_record(fields)));
        self.batch.push(NewEntry::of(unix_now(), None, &record));
        self.held.push(fields.outcome.is_some());
        self.urgent = true;
        self.since.get_or_insert_with(Instant::now);
        Some(self.batch.len() - 1)
    }

    /// Adds the outcome of the call recorded as `call_seq`.
    pub fn outcome(&mut self, call_seq: u64, outcome: Outcome, duration_ms: u64, attempt: u32) {
        if self.log.is_none() {
            return;
        }
        self.outcomes
            .push((call_seq, outcome, duration_ms, attempt));
        self.since.get_or_insert_with(Instant::now);
    }

    /// The record of the outcomes waiting: one outcome on its own, several
    /// in one record (a turn that ended sixteen calls writes one). The
    /// outcomes stay until the record is committed.
    fn outcomes_entry(&self) -> Option<NewEntry> {
        let entry = match self.outcomes.as_slice() {
            [] => return None,
            [(call, outcome, millis, attempt)] => NewEntry::of(
                unix_now(),
                Some(*call),
                &Record::Outcome(OutcomeRecord {
                    attempt: *attempt,
                    duration_ms: *millis,
                    outcome: code_of(*outcome),
                }),
            ),
            several => NewEntry::of(
                unix_now(),
                None,
                &Record::Outcomes(OutcomesRecord {
                    outcomes: several
                        .iter()
                        .map(|(call, outcome, millis, attempt)| OutcomeItem {
                            attempt: *attempt,
                            call: *call,
                            duration_ms: *millis,
                            outcome: code_of(*outcome),
                        })
                        .collect(),
                }),
            ),
        };
        Some(entry)
    }

    /// Whether the batch must be committed now: it holds a call record, or
    /// its oldest outcome has waited [`OUTCOME_FLUSH`].
    pub fn due(&self, now: Instant) -> bool {
        if self
            .later
            .as_ref()
            .is_some_and(|later| later.pending.is_some())
        {
            // The batch goes in the write after the one out.
            return false;
        }
        self.urgent
            || self
                .since
                .is_some_and(|since| now.saturating_duration_since(since) >= OUTCOME_FLUSH)
    }

    /// Records committed and commits made so far.
    pub fn counts(&self) -> (u64, u64) {
        self.counts
    }

    /// When the batch's outcomes must be committed even if no call comes.
    pub fn flush_at(&self) -> Option<Instant> {
        self.since.map(|since| since + OUTCOME_FLUSH)
    }

    /// Whether records wait to be committed.
    #[cfg(test)]
    pub fn pending(&self) -> bool {
        !self.batch.is_empty() || !self.outcomes.is_empty()
    }

    /// Writes this turn's records at once; the numbers their outcomes name
    /// them by, in the order they were added (the log's sequence numbers, or,
    /// with a journal file, their numbers in this run).
    ///
    /// # Errors
    ///
    /// The store's error, in words: none of the batch was written. The
    /// outcomes and the records of calls that ended at the gateway are kept
    /// for the next commit (tried again at the latest [`OUTCOME_FLUSH`]
    /// later); the records of calls to forward are dropped, as those calls
    /// are refused and never run.
    pub fn commit(&mut self) -> Result<Vec<u64>, String> {
        let Some(log) = &self.log else {
            return Ok(Vec::new());
        };
        let log = Arc::clone(log);
        // The outcomes go last, after this turn's calls: their places in the
        // batch are the calls' own.
        let outcomes = self.outcomes_entry();
        let with_outcomes = outcomes.is_some();
        if let Some(outcomes) = outcomes {
            self.batch.push(outcomes);
        }
        if self.batch.is_empty() {
            return Ok(Vec::new());
        }
        self.urgent = false;
        let began = std::time::Instant::now();
        let appended = match &mut self.file {
            Some(sink) => {
                // A call record not held for the next commit is a call to
                // forward: its outcome is due, and a crash leaves it
                // `interrupted`. (The outcomes record, last, has no flag.)
                let forwarded: Vec<bool> = self.held.iter().map(|held| !held).collect();
                sink.writer
                    .append(&self.batch, &forwarded)
                    .map(|positions| {
                        let numbers = positions.iter().map(|position| position.n).collect();
                        sink.indexer.send(
                            positions
                                .into_iter()
                                .zip(self.batch.drain(..))
                                .zip(forwarded.iter().copied().chain(std::iter::repeat(false)))
                                .map(|((position, entry), forwarded)| Journaled {
                                    position,
                                    entry,
                                    forwarded,
                                })
                                .collect(),
                        );
                        numbers
                    })
                    .map_err(|err| err.to_string())
            }
            None => log.append(&self.batch).map_err(|err| err.to_string()),
        };
        if let Some(metrics) = &self.metrics {
            metrics.committed(began.elapsed());
        }
        match appended {
            Ok(seqs) => {
                self.counts.0 += seqs.len() as u64;
                self.counts.1 += 1;
                self.batch.clear();
                self.held.clear();
                self.outcomes.clear();
                self.since = None;
                Ok(seqs)
            }
            Err(err) => {
                tracing::error!("the audit log could not be written: {err}");
                if with_outcomes {
                    self.batch.pop();
                }
                let mut held = std::mem::take(&mut self.held).into_iter();
                self.batch.retain(|_| held.next().unwrap_or(false));
                self.held = vec![true; self.batch.len()];
                self.give_up_beyond(MAX_HELD);
                // Tried again at the next commit, or the flush after this one.
                self.since =
                    (!self.batch.is_empty() || !self.outcomes.is_empty()).then(Instant::now);
                Err(err)
            }
        }
    }

    /// Keeps at most `limit` records waiting (ended calls and outcomes),
    /// giving up the oldest.
    fn give_up_beyond(&mut self, limit: usize) {
        let over = (self.batch.len() + self.outcomes.len()).saturating_sub(limit);
        if over == 0 {
            return;
        }
        let from_batch = over.min(self.batch.len());
        self.batch.drain(..from_batch);
        self.held.drain(..from_batch);
        self.outcomes
            .drain(..(over - from_batch).min(self.outcomes.len()));
        tracing::error!(
            "the audit log has failed for a while: {over} record(s) waiting for it were given up"
        );
    }

    /// Arguments as a record keeps them: redacted, in the canonical form
    /// the redactor writes (`null` for none).
    fn record_arguments(&self, arguments: Option<&Value>) -> Arguments {
        match arguments {
            Some(arguments) => {
                let mut text = String::with_capacity(128);
                self.redactor.write_canonical(arguments, &mut text);
                // The redactor writes one JSON value; were it ever not to,
                // the record says `null` rather than hold what cannot read.
                Arguments::from_canonical(text).unwrap_or_else(|_| Arguments::null())
            }
            None => Arguments::null(),
        }
    }

    /// The record of a call: its arguments redacted, in the canonical form
    /// the redactor writes.
    fn call_record(&self, fields: &CallFields<'_>) -> CallRecord {
        let arguments = self.record_arguments(fields.arguments);
        CallRecord {
            approver: match fields.approver {
                Approver::Policy(Some(code)) => code.as_str().to_owned(),
                other => other.to_string(),
            },
            arguments,
            edit: fields.edit.map(|(by, original)| EditRecord {
                by: by.to_owned(),
                original: self.record_arguments(original),
            }),
            egress: fields.egress.map(<[String]>::to_vec),
            host: fields.host.map(str::to_owned),
            // Kept whole, whatever redaction makes of the arguments: it is
            // what matches this call with a later one that replays it.
            idempotency: fields.idempotency.map(|(key, filled)| Idempotency {
                filled,
                key: key.to_owned(),
            }),
            identity: fields.identity.map(str::to_owned),
            instance: fields.instance.map(|(instance, _)| instance),
            instance_identity: fields.instance.and_then(|(_, key)| key).map(str::to_owned),
            outcome: fields.outcome.map(code_of),
            pin: fields.pin.map(str::to_owned),
            preview: fields.preview.cloned(),
            reasons: fields
                .decision
                .reason_texts()
                .map(std::borrow::Cow::into_owned)
                .collect(),
            request: fields.request_id.to_owned(),
            server: fields.server.to_owned(),
            session: self.session.clone(),
            token_scope: fields.token_scope.map(str::to_owned),
            tool: fields.tool.to_owned(),
            verdict: fields.decision.verdict,
        }
    }
}

/// How a call ended, as its record names it.
pub(crate) const fn code_of(outcome: Outcome) -> OutcomeCode {
    match outcome {
        Outcome::Ok => OutcomeCode::Ok,
        Outcome::ToolError => OutcomeCode::ToolError,
        Outcome::ProtocolError => OutcomeCode::ProtocolError,
        Outcome::OutputSchemaMismatch => OutcomeCode::OutputSchemaMismatch,
        Outcome::Failed => OutcomeCode::Failed,
        Outcome::FailedRetried => OutcomeCode::FailedRetried,
        Outcome::Unsent => OutcomeCode::Unsent,
        Outcome::Denied => OutcomeCode::Denied,
        Outcome::InvalidArguments => OutcomeCode::InvalidArguments,
        Outcome::InputRequired => OutcomeCode::InputRequired,
        Outcome::Relayed => OutcomeCode::Relayed,
        Outcome::Cancelled => OutcomeCode::Cancelled,
        Outcome::HostGone => OutcomeCode::HostGone,
        Outcome::Shutdown => OutcomeCode::Shutdown,
        Outcome::Replayed => OutcomeCode::Replayed,
    }
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hintgate_policy::decide::Verdict;
    use hintgate_policy::pin::canonical_json;
    use hintgate_policy::reason::ReasonCode;
    use hintgate_store::EntryKind;
    use hintgate_store::MemoryStore;
    use proptest::prelude::*;
    use serde_json::json;

    /// The default redaction, under a fixed digest key.
    fn test_redactor() -> Redactor {
        Redactor::new(
            &hintgate_policy::redact::AuditSettings::default(),
            hintgate_policy::redact::DigestKey::new([1; 32]),
        )
    }

    fn journal() -> (Journal, Arc<MemoryStore>) {
        let store = Arc::new(MemoryStore::default());
        let log: Arc<dyn AuditLog> = store.clone();
        (
            Journal::new(Some(log), "s-1".into(), test_redactor()),
            store,
        )
    }

    fn record_of(arguments: &Value) -> String {
        let (mut journal, _) = journal();
        let decision = Decision::deny(ReasonCode::RuleDeny);
        journal.call(&CallFields {
            request_id: "\"r\\\"1\"",
            server: "fs",
            identity: Some("k"),
            tool: "write",
            arguments: Some(arguments),
            decision: &decision,
            approver: &Approver::Gateway,
            pin: None,
            outcome: Some(Outcome::Denied),
            host: Some("alice"),
            idempotency: None,
            instance: None,
            egress: None,
            token_scope: None,
            preview: None,
            edit: None,
        });
        journal.batch[0].body.clone()
    }

    #[test]
    fn records_are_canonical_and_redacted_as_written() {
        let secret = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789";
        let body = record_of(&json!({"z": 1, "a": {"key": secret, "n": 1.0}}));
        let parsed: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(canonical_json(&parsed), body);
        assert_eq!(
            parsed["arguments"]["a"]["key"],
            test_redactor().marker(&json!(secret))
        );
        assert!(!body.contains(secret));
        assert_eq!(parsed["request"], "\"r\\\"1\"");
        assert_eq!(parsed["outcome"], "denied");
        assert_eq!(parsed["reasons"], json!(["rule-deny"]));
        assert_eq!(parsed["host"], "alice");
        assert!(!body.contains("hunter2"));
    }

    #[test]
    fn the_hosts_a_server_may_reach_are_in_its_record_canonically() {
        let (mut journal, _) = journal();
        let decision = Decision::deny(ReasonCode::RuleDeny);
        let hosts = [
            "api.github.com:443".to_owned(),
            "[::1]:8080\n\"x".to_owned(),
        ];
        journal.call(&CallFields {
            request_id: "1",
            server: "gh",
            identity: Some("k"),
            tool: "search",
            arguments: None,
            decision: &decision,
            approver: &Approver::Gateway,
            pin: None,
            outcome: Some(Outcome::Denied),
            host: Some("alice"),
            idempotency: None,
            instance: None,
            egress: Some(&hosts),
            token_scope: None,
            preview: None,
            edit: None,
        });
        let body = journal.batch[0].body.clone();
        let parsed: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(canonical_json(&parsed), body);
        assert_eq!(parsed["egress"], json!(hosts));
        // Without a list, no key.
        assert!(!record_of(&json!({})).contains("egress"));
    }

    #[test]
    fn a_turn_commits_its_records_in_order_in_one_append() {
        let (mut journal, store) = journal();
        let decision = Decision::deny(ReasonCode::UnknownTool);
        let fields = CallFields {
            request_id: "1",
            server: "",
            identity: None,
            tool: "x",
            arguments: None,
            decision: &decision,
            approver: &Approver::Gateway,
            pin: None,
            outcome: Some(Outcome::Denied),
            host: None,
            idempotency: None,
            instance: None,
            egress: None,
            token_scope: None,
            preview: None,
            edit: None,
        };
        assert_eq!(journal.call(&fields), Some(0));
        assert_eq!(journal.call(&fields), Some(1));
        journal.outcome(1, Outcome::Ok, 3, 0);
        assert!(journal.pending());
        assert_eq!(journal.commit(), Ok(vec![1, 2, 3]));
        assert!(!journal.pending());
        let entries = store.entries(0, 10).unwrap();
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[2].call, Some(1));
        assert_eq!(
            entries[2].body,
            json!({"attempt": 0, "duration_ms": 3, "outcome": "ok"})
        );
        assert!(store.verify().unwrap().complete());
    }

    /// A log whose appends fail while `failing` is set.
    #[derive(Debug, Default)]
    struct Flaky {
        inner: MemoryStore,
        failing: std::sync::atomic::AtomicBool,
    }

    impl AuditLog for Flaky {
        fn append(&self, entries: &[NewEntry]) -> Result<Vec<u64>, hintgate_store::StoreError> {
            if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(hintgate_store::StoreError::Address(
                    "the disk is full".into(),
                ));
            }
            self.inner.append(entries)
        }

        fn entries(
            &self,
            after: u64,
            limit: usize,
        ) -> Result<Vec<hintgate_store::Entry>, hintgate_store::StoreError> {
            self.inner.entries(after, limit)
        }
    }

    #[test]
    fn a_failed_commit_keeps_outcomes_and_ended_calls_for_the_next() {
        let flaky = Arc::new(Flaky::default());
        let log: Arc<dyn AuditLog> = flaky.clone();
        let mut journal = Journal::new(Some(log), "s-1".into(), test_redactor());
        let denied = Decision::deny(ReasonCode::RuleDeny);
        let allowed = Decision {
            verdict: Verdict::Allow,
            reasons: Vec::new(),
            remember: hintgate_policy::decide::RememberOffer::NotAsked,
            note: None,
        };
        let ended = CallFields {
            request_id: "1",
            server: "fs",
            identity: None,
            tool: "x",
            arguments: None,
            decision: &denied,
            approver: &Approver::Gateway,
            pin: None,
            outcome: Some(Outcome::Denied),
            host: None,
            idempotency: None,
            instance: None,
            egress: None,
            token_scope: None,
            preview: None,
            edit: None,
        };
        let to_forward = CallFields {
            request_id: "2",
            decision: &allowed,
            outcome: None,
            ..ended
        };
        // Call 7 ran (its record is durable); its outcome is due now.
        journal.outcome(7, Outcome::Ok, 5, 0);
        journal.call(&ended);
        journal.call(&to_forward);
        flaky
            .failing
            .store(true, std::sync::atomic::Ordering::SeqCst);
        assert!(journal.commit().unwrap_err().contains("the disk is full"));
        assert!(journal.pending(), "what must not be lost waits");
        assert!(!journal.due(Instant::now()), "no retry in the same moment");
        assert!(journal.flush_at().is_some(), "a retry is planned");

        flaky
            .failing
            .store(false, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(journal.commit(), Ok(vec![1, 2]));
        let entries = flaky.inner.entries(0, 10).unwrap();
        assert_eq!(entries.len(), 2, "{entries:#?}");
        assert_eq!(entries[0].body["request"], "1");
        assert_eq!(entries[0].body["outcome"], "denied");
        assert_eq!(entries[1].call, Some(7));
        assert_eq!(entries[1].body["outcome"], "ok");
        assert!(!journal.pending());
        assert_eq!(journal.counts(), (2, 1), "only what was committed counts");
    }

    #[test]
    fn a_log_that_keeps_failing_holds_a_bounded_number_of_records() {
        let flaky = Arc::new(Flaky::default());
        flaky
            .failing
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let log: Arc<dyn AuditLog> = flaky.clone();
        let mut journal = Journal::new(Some(log), "s-1".into(), test_redactor());
        for call in 0..(MAX_HELD as u64 + 50) {
            journal.outcome(call, Outcome::Ok, 1, 0);
        }
        assert!(journal.commit().is_err());
        assert_eq!(journal.outcomes.len(), MAX_HELD);
        // The newest are kept.
        assert_eq!(
            journal.outcomes.last().map(|held| held.0),
            Some(MAX_HELD as u64 + 49)
        );
    }

    #[test]
    fn the_outcomes_of_one_turn_are_one_record() {
        let (mut journal, store) = journal();
        journal.outcome(7, Outcome::Ok, 1, 0);
        journal.outcome(9, Outcome::ToolError, 2, 1);
        assert_eq!(journal.commit(), Ok(vec![1]));
        let entries = store.entries(0, 10).unwrap();
        assert_eq!(entries[0].kind, Some(EntryKind::Outcomes));
        let expanded = entries[0].clone().expand();
        assert_eq!(
            expanded.iter().map(|entry| entry.call).collect::<Vec<_>>(),
            vec![Some(7), Some(9)]
        );
        assert_eq!(expanded[1].body["outcome"], "tool-error");
        assert_eq!(expanded[1].body["attempt"], 1);
        assert!(store.verify().unwrap().complete());
    }

    /// Every outcome, in the order the golden log has them.
    const ALL_OUTCOMES: [Outcome; 15] = [
        Outcome::Ok,
        Outcome::ToolError,
        Outcome::ProtocolError,
        Outcome::OutputSchemaMismatch,
        Outcome::Failed,
        Outcome::FailedRetried,
        Outcome::Unsent,
        Outcome::Denied,
        Outcome::InvalidArguments,
        Outcome::InputRequired,
        Outcome::Relayed,
        Outcome::Cancelled,
        Outcome::HostGone,
        Outcome::Shutdown,
        Outcome::Replayed,
    ];

    /// The golden log, as (kind, body) rows.
    fn golden_rows() -> Vec<(String, String)> {
        const GOLDEN: &str =
            include_str!("../../../hintgate-store/tests/data/golden-records.jsonl");
        GOLDEN
            .lines()
            .map(|line| {
                let row: Value = serde_json::from_str(line).unwrap();
                (
                    row["kind"].as_str().unwrap().to_owned(),
                    row["body"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    /// The decisions of the golden calls: a deny, an allow and an ask.
    fn golden_decisions() -> [Decision; 3] {
        use hintgate_policy::decide::RememberOffer;
        use hintgate_policy::reason::Reason;

        let deny = Decision::deny(ReasonCode::RuleDeny);
        let allow = Decision {
            verdict: Verdict::Allow,
            reasons: vec![Reason::new(ReasonCode::RuleAllow)],
            remember: RememberOffer::NotAsked,
            note: None,
        };
        let ask = Decision {
            verdict: Verdict::Ask,
            reasons: vec![
                Reason::new(ReasonCode::Hook),
                Reason::new(ReasonCode::RuleAsk),
            ],
            remember: RememberOffer::NotAsked,
            note: Some("needs \"a\" person\n".into()),
        };
        [deny, allow, ask]
    }

    /// The first golden call, which the others vary.
    fn golden_base<'a>(
        args: &'a Value,
        allow: &'a Decision,
        approver: &'a Approver,
    ) -> CallFields<'a> {
        CallFields {
            request_id: "1",
            server: "fs",
            identity: Some("sha256:fs-key"),
            tool: "read_file",
            arguments: Some(args),
            decision: allow,
            approver,
            pin: Some("sha256:0123"),
            outcome: None,
            host: None,
            idempotency: None,
            instance: None,
            egress: None,
            token_scope: None,
            preview: None,
            edit: None,
        }
    }

    /// Journals the golden log's calls.
    fn journal_golden_calls(journal: &mut Journal, [deny, allow, ask]: &[Decision; 3]) {
        use super::super::call::Channel;

        let args = json!({"path": "/tmp/x y", "token": "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789", "n": [1, -2, 1.5, 12_345_678_901_234_567_890_u64, null, true], "\u{1f600}": {"z": "é\t"}});
        let allowed_by = Approver::Policy(Some(ReasonCode::RuleAllow));
        let base = golden_base(&args, allow, &allowed_by);
        let [queue, elicitation, input, relayed] = [
            Approver::Person(Channel::Queue("alice".into())),
            Approver::Person(Channel::Elicitation),
            Approver::Person(Channel::InputRequired),
            Approver::Person(Channel::RelayedAnswer),
        ];
        let no_arguments = json!([]);
        let calls = [
            base,
            CallFields {
                request_id: "\"r-\\\"2\"",
                server: "",
                identity: None,
                tool: "nope",
                arguments: None,
                decision: deny,
                approver: &Approver::Gateway,
                pin: None,
                outcome: Some(Outcome::Denied),
                ..base
            },
            CallFields {
                request_id: "3",
                decision: ask,
                approver: &queue,
                host: Some("ci-bot"),
                idempotency: Some(("key-1", true)),
                ..base
            },
            CallFields {
                request_id: "4",
                approver: &elicitation,
                idempotency: Some(("host key", false)),
                instance: Some((Instance::ReadOnly, Some("sha256:ro-key"))),
                ..base
            },
            CallFields {
                request_id: "5",
                approver: &input,
                instance: Some((Instance::Full, None)),
                outcome: Some(Outcome::InputRequired),
                ..base
            },
            CallFields {
                request_id: "6",
                approver: &relayed,
                outcome: Some(Outcome::Relayed),
                arguments: Some(&no_arguments),
                ..base
            },
            CallFields {
                request_id: "7",
                approver: &Approver::Policy(None),
                outcome: Some(Outcome::InvalidArguments),
                ..base
            },
            CallFields {
                request_id: "8",
                outcome: Some(Outcome::Replayed),
                idempotency: Some(("k", false)),
                ..base
            },
        ];
        for fields in &calls {
            journal.call(fields);
        }
    }

    /// The journal writes, through the record types, exactly the bytes
    /// it wrote before them: the same calls and outcomes as those of the
    /// golden log (written by the journal before the types) give the same
    /// bodies, byte for byte.
    #[test]
    fn the_journal_writes_the_golden_records_byte_for_byte() {
        let golden = golden_rows();
        let store = Arc::new(MemoryStore::default());
        let log: Arc<dyn AuditLog> = store.clone();
        let mut journal = Journal::new(Some(log), "g-1f2e\u{e9}".into(), test_redactor());
        journal_golden_calls(&mut journal, &golden_decisions());
        journal.commit().unwrap();
        journal.outcome(1, Outcome::Ok, 12, 0);
        journal.commit().unwrap();
        for (idx, outcome) in ALL_OUTCOMES.iter().enumerate() {
            journal.outcome(
                idx as u64 + 1,
                *outcome,
                idx as u64 * 1000,
                (idx % 3) as u32,
            );
        }
        journal.commit().unwrap();
        for outcome in ALL_OUTCOMES {
            journal.outcome(4, outcome, 0, 1);
            journal.commit().unwrap();
        }
        let written: Vec<(String, String)> = store
            .entries(0, 100)
            .unwrap()
            .into_iter()
            .map(|entry| (entry.stored_kind, entry.stored_body))
            .collect();
        assert_eq!(written.len(), 25);
        assert_eq!(written, golden[..25]);
    }

    /// Every outcome keeps the name it always had in the log.
    #[test]
    fn every_outcome_keeps_the_name_it_always_had() {
        let names: Vec<&str> = ALL_OUTCOMES
            .iter()
            .map(|outcome| code_of(*outcome).as_str())
            .collect();
        assert_eq!(
            names,
            [
                "ok",
                "tool-error",
                "protocol-error",
                "output-schema-mismatch",
                "failed",
                "failed, retried",
                "unsent",
                "denied",
                "invalid-arguments",
                "input-required",
                "relayed",
                "cancelled",
                "host-gone",
                "shutdown",
                "replayed"
            ]
        );
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<u64>().prop_map(|n| json!(n)),
            (-1.0e6f64..1.0e6).prop_map(|n| json!(n)),
            "[a-zA-Z\\u{e9}\\u{1f600}\"\\\\/\\n]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-zA-Z_]{1,8}", inner, 0..4)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn every_record_is_canonical_json(arguments in json_value()) {
            let body = record_of(&arguments);
            let parsed: Value = serde_json::from_str(&body).unwrap();
            prop_assert_eq!(canonical_json(&parsed), body);
        }
    }
}
