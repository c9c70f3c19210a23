//! The indexer: feeds the index from a run's journal on a thread of its
//! own, off the call path, with a bound on what waits for it.
//!
//! The gateway writes a turn's records to the journal, then hands them to
//! the indexer ([`Indexer::send`], a push on a channel); the indexer gathers
//! what comes for [`INDEX_GATHER`] and appends it to the log in one
//! transaction. What the gateway hands over and the indexer has not taken
//! yet is its backlog. The journal already holds those records, so the
//! backlog is memory only, but it has no bound of its own: on one CPU under
//! load the indexer's thread can be runnable for a long time without
//! running, and on a slow disk its commits can fall behind. So, past
//! [`INDEX_BACKLOG_BYTES`], `send` waits until the indexer has taken the
//! backlog, and the indexer stops gathering as soon as it sees someone
//! wait. The gateway's loop is what waits: it forwards nothing more until
//! then, which is the backpressure that keeps its memory bounded.
//!
//! INVARIANT: a sender never waits on an indexer that is gone: the thread
//! marks the backlog closed when it ends, however it ends.

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::{JournalIndex, Journaled};
use crate::AuditLog;

/// How long the indexer gathers records before it writes them to the
/// index: one transaction for everything a busy gateway journaled in that
/// time, not one per turn.
pub const INDEX_GATHER: Duration = Duration::from_millis(20);

/// The most bytes of records handed to the indexer and not yet taken by
/// it; past it, [`Indexer::send`] waits. A busy gateway journals about a
/// megabyte in one [`INDEX_GATHER`], so at its normal pace nothing waits.
pub const INDEX_BACKLOG_BYTES: usize = 4 * 1024 * 1024;

/// The most records the indexer writes to the index in one transaction. A
/// gather under load holds thousands, and a transaction whose changed pages
/// outgrow the connection's page cache (512 KiB) has SQLite write them to
/// its log before the commit and keep the cache full of them; 256 records
/// (about 40 pages of the log's table) fit with room for the rest. Measured
/// under the pinned yardstick against one transaction per gather: the peak
/// memory 0.9 to 3.3 MiB lower in each of six runs, the CPU per call and
/// the pace the same within the runs' spread.
const INDEX_TRANSACTION_RECORDS: usize = 256;

/// The most records the indexer holds while the index fails; beyond it,
/// it stops trying (the journal has them all, and the next start imports
/// them once the run has ended).
const MAX_UNINDEXED: usize = 16_384;

/// What an [`Indexer`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Indexed {
    /// Records indexed.
    pub records: u64,
    /// Records journaled that it could not index (the index failed).
    pub behind: u64,
    /// The calls forwarded that have no outcome yet, by their numbers in
    /// the run (what [`JournalIndex::close`] marks `interrupted`).
    pub open: Vec<u64>,
    /// How many times a sender waited for the indexer to take its backlog.
    pub waits: u64,
}

/// Feeds the index from a run's journal on a thread of its own (see the
/// module's docs).
#[derive(Debug)]
pub struct Indexer {
    /// Each batch with its weight, weighed once by the sender.
    sender: Option<Sender<(usize, Vec<Journaled>)>>,
    backlog: Arc<Backlog>,
    bound: usize,
    thread: Option<std::thread::JoinHandle<Indexed>>,
}

impl Indexer {
    /// Starts the thread that indexes `run`'s records into `log`.
    ///
    /// # Errors
    ///
    /// The thread cannot be started.
    pub fn spawn(log: Arc<dyn AuditLog>, run: String) -> std::io::Result<Self> {
        Self::start(INDEX_BACKLOG_BYTES, move |backlog, receiver| {
            match log.journal_index() {
                Some(index) => index_loop(index, &run, &receiver, &backlog),
                None => Indexed::default(),
            }
        })
    }

    fn start(
        bound: usize,
        body: impl FnOnce(Arc<Backlog>, Receiver<(usize, Vec<Journaled>)>) -> Indexed + Send + 'static,
    ) -> std::io::Result<Self> {
        let (sender, receiver) = std::sync::mpsc::channel();
        let backlog = Arc::new(Backlog::default());
        let theirs = Arc::clone(&backlog);
        let thread = std::thread::Builder::new()
            .name("hintgate-index".into())
            .spawn(move || {
                // However the thread ends, no sender waits for it after.
                let _closing = Closing(Arc::clone(&theirs));
                body(theirs, receiver)
            })?;
        Ok(Self {
            sender: Some(sender),
            backlog,
            bound,
            thread: Some(thread),
        })
    }

    /// Hands the indexer records written to the journal, in order. Past
    /// the backlog's bound, waits until the indexer has taken what waits
    /// for it (or is gone).
    pub fn send(&self, records: Vec<Journaled>) {
        let Some(sender) = &self.sender else {
            return;
        };
        let weight = weight(&records);
        let over = self.backlog.add(weight) > self.bound;
        if sender.send((weight, records)).is_err() {
            // The thread is gone; nothing will take them.
            self.backlog.take(weight);
            return;
        }
        if over {
            self.backlog.wait_within(self.bound);
        }
    }

    /// Bytes handed to the indexer that it has not taken yet.
    #[must_use]
    pub fn backlog_bytes(&self) -> usize {
        self.backlog.lock().bytes
    }

    /// Indexes what is left and stops.
    #[must_use]
    pub fn finish(mut self) -> Indexed {
        self.stop()
    }

    fn stop(&mut self) -> Indexed {
        self.sender = None;
        let mut done = self
            .thread
            .take()
            .and_then(|thread| thread.join().ok())
            .unwrap_or_default();
        done.waits = self.backlog.lock().waits;
        done
    }
}

impl Drop for Indexer {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// What the gateway handed the indexer and it has not taken yet.
#[derive(Debug, Default)]
struct Backlog {
    state: Mutex<BacklogState>,
    /// The indexer took records, or is gone.
    taken: Condvar,
    /// A sender started waiting.
    waiting: Condvar,
}

#[derive(Debug, Default)]
struct BacklogState {
    bytes: usize,
    /// How many senders wait for the indexer (one, the gateway's loop,
    /// in practice; counted so that one sender's end of waiting cannot
    /// hide another's).
    waiting: usize,
    waits: u64,
    /// The indexer's thread has ended.
    closed: bool,
}

impl Backlog {
    fn lock(&self) -> MutexGuard<'_, BacklogState> {
        // A panic while holding the lock leaves counts that are still
        // counts: go on with them.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts `weight` more; returns the bytes waiting now.
    fn add(&self, weight: usize) -> usize {
        let mut state = self.lock();
        state.bytes = state.bytes.saturating_add(weight);
        state.bytes
    }

    /// Counts `weight` taken by the indexer, and wakes the senders that
    /// wait, if any. The indexer takes every turn's records, so waking
    /// nobody is the usual case, and it then makes no system call (a
    /// condition variable's notification always makes one): a sender counts
    /// itself waiting under the lock before it first waits, so one that
    /// waits is always seen here.
    fn take(&self, weight: usize) {
        let mut state = self.lock();
        state.bytes = state.bytes.saturating_sub(weight);
        let anyone = state.waiting > 0;
        drop(state);
        if anyone {
            self.taken.notify_all();
        }
    }

    /// Waits while more than `bound` bytes wait for the indexer and it is
    /// there to take them.
    fn wait_within(&self, bound: usize) {
        let mut state = self.lock();
        if state.bytes <= bound || state.closed {
            return;
        }
        state.waiting += 1;
        state.waits += 1;
        self.waiting.notify_all();
        while state.bytes > bound && !state.closed {
            state = self
                .taken
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        state.waiting = state.waiting.saturating_sub(1);
    }

    /// The indexer's gather: waits for `gather`, or until a sender waits.
    fn gather(&self, gather: Duration) {
        let state = self.lock();
        let _unused = self
            .waiting
            .wait_timeout_while(state, gather, |state| state.waiting == 0)
            .unwrap_or_else(PoisonError::into_inner);
    }

    fn close(&self) {
        self.lock().closed = true;
        self.taken.notify_all();
    }
}

/// Marks the backlog closed when the indexer's thread ends.
struct Closing(Arc<Backlog>);

impl Drop for Closing {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// What records weigh in the backlog: their bodies and their frames.
fn weight(records: &[Journaled]) -> usize {
    records
        .iter()
        .map(|record| record.entry.body.len() + std::mem::size_of::<Journaled>())
        .sum()
}

/// The indexer's thread: gathers records for [`INDEX_GATHER`] (less when
/// a sender waits), indexes them, until the gateway hangs up and all is
/// written (or given up).
fn index_loop(
    index: &dyn JournalIndex,
    run: &str,
    receiver: &Receiver<(usize, Vec<Journaled>)>,
    backlog: &Backlog,
) -> Indexed {
    let mut done = Indexed::default();
    let mut pending: Vec<Journaled> = Vec::new();
    let mut calls = HashMap::new();
    let mut open = true;
    let mut failing = false;
    let take = |pending: &mut Vec<Journaled>, (weight, records): (usize, Vec<Journaled>)| {
        backlog.take(weight);
        pending.extend(records);
    };
    while open {
        match receiver.recv() {
            Ok(records) => take(&mut pending, records),
            Err(_) => open = false,
        }
        if open {
            // Whatever else comes meanwhile goes in the same transaction.
            // The thread waits rather than taking from the channel, so the
            // gateway's turns in between wake nobody (one wake-up per
            // gather, not one per turn), unless the gateway waits for it.
            backlog.gather(INDEX_GATHER);
        }
        loop {
            match receiver.try_recv() {
                Ok(records) => take(&mut pending, records),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        if failing && pending.len() > MAX_UNINDEXED {
            // Beyond hope for this run: its journal keeps them.
            done.behind += pending.len() as u64;
            pending.clear();
            continue;
        }
        if pending.is_empty() || done.behind > 0 {
            done.behind += pending.len() as u64;
            pending.clear();
            continue;
        }
        // One transaction per part of what was gathered, each small enough
        // for the connection's page cache (see `INDEX_TRANSACTION_RECORDS`);
        // a part that fails stays, with the parts after it, for the next try.
        let mut indexed = 0;
        let mut failed = None;
        for part in pending.chunks(INDEX_TRANSACTION_RECORDS) {
            match index.index(run, part, &mut calls) {
                Ok(_) => indexed += part.len(),
                Err(err) => {
                    failed = Some(err);
                    break;
                }
            }
        }
        pending.drain(..indexed);
        done.records += indexed as u64;
        match failed {
            None => failing = false,
            Some(err) => {
                if !failing {
                    tracing::error!(
                        "the audit index could not be written (the journal holds the records): {err}"
                    );
                }
                failing = true;
                if !open {
                    done.behind += pending.len() as u64;
                }
            }
        }
    }
    done.open = calls.into_keys().collect();
    done.open.sort_unstable();
    done
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::mpsc;

    use super::*;
    use crate::journal::{Position, RunState};
    use crate::{EntryKind, NewEntry, StoreError};

    /// An index that does what the test says with each part it is given,
    /// and holds no runs.
    struct ByHand<F>(F);

    impl<F> JournalIndex for ByHand<F>
    where
        F: Fn(&[Journaled]) -> Result<usize, StoreError> + Send + Sync,
    {
        fn journal_dir(&self) -> &Path {
            Path::new("unused")
        }

        fn index(
            &self,
            _run: &str,
            records: &[Journaled],
            _calls: &mut HashMap<u64, u64>,
        ) -> Result<usize, StoreError> {
            (self.0)(records)
        }

        fn run_state(&self, _run: &str) -> Result<Option<RunState>, StoreError> {
            Ok(None)
        }

        fn runs(&self) -> Result<Vec<(String, RunState)>, StoreError> {
            Ok(Vec::new())
        }

        fn close(&self, _run: &str, _open: &[u64]) -> Result<u64, StoreError> {
            Ok(0)
        }

        fn seq_of(&self, _run: &str, _n: u64) -> Result<Option<u64>, StoreError> {
            Ok(None)
        }
    }

    /// An indexer over `index`, with a backlog bound of `bound`.
    fn by_hand(
        bound: usize,
        index: impl Fn(&[Journaled]) -> Result<usize, StoreError> + Send + Sync + 'static,
    ) -> Indexer {
        let index = ByHand(index);
        Indexer::start(bound, move |backlog, receiver| {
            index_loop(&index, "r-1", &receiver, &backlog)
        })
        .unwrap()
    }

    fn records(from: u64, count: u64, body: usize) -> Vec<Journaled> {
        (from..from + count)
            .map(|n| Journaled {
                position: Position {
                    n,
                    segment: 0,
                    offset: 0,
                    link: [0; crate::journal::LINK],
                },
                entry: NewEntry {
                    at: 7,
                    kind: EntryKind::Call,
                    call: None,
                    body: "x".repeat(body),
                },
                forwarded: false,
            })
            .collect()
    }

    /// An indexer over an index that holds each part until the test lets
    /// it through, and tells the test how many records it was given.
    fn gated(bound: usize) -> (Indexer, mpsc::Sender<()>, mpsc::Receiver<usize>) {
        let (through_tx, through_rx) = mpsc::channel::<()>();
        let (given_tx, given_rx) = mpsc::channel();
        let (through, given) = (Mutex::new(through_rx), Mutex::new(given_tx));
        let indexer = by_hand(bound, move |records| {
            let _ = given.lock().unwrap().send(records.len());
            through
                .lock()
                .unwrap()
                .recv()
                .map_err(|_| StoreError::Corrupt("the test hung up".into()))?;
            Ok(records.len())
        });
        (indexer, through_tx, given_rx)
    }

    #[test]
    fn a_sender_past_the_bound_waits_until_the_indexer_takes_its_backlog() {
        let one = weight(&records(1, 1, 1_000));
        let (indexer, through, given) = gated(3 * one);
        let indexer = Arc::new(indexer);
        // The first batch is taken, then held in the index.
        indexer.send(records(1, 2, 1_000));
        assert_eq!(given.recv().unwrap(), 2);
        assert_eq!(indexer.backlog_bytes(), 0);
        // Within the bound: handed over, and nobody waits.
        indexer.send(records(3, 3, 1_000));
        assert_eq!(indexer.backlog_bytes(), 3 * one);
        // Past it: the sender waits while the index holds the indexer.
        let (sent_tx, sent_rx) = mpsc::channel();
        let sender = Arc::clone(&indexer);
        let waiting = std::thread::spawn(move || {
            sender.send(records(6, 1, 1_000));
            sent_tx.send(sender.backlog_bytes()).unwrap();
        });
        // What the sender is seen doing: waiting, with its records handed
        // over and counted.
        let backlog = &indexer.backlog;
        let state = backlog
            .waiting
            .wait_while(backlog.lock(), |state| state.waiting == 0)
            .unwrap();
        assert_eq!(state.bytes, 4 * one);
        drop(state);
        assert!(
            sent_rx.try_recv().is_err(),
            "a sender past the bound went on"
        );
        // The index lets the first batch through: the indexer takes the
        // rest at once (it gathers no longer while someone waits), and the
        // sender goes on.
        through.send(()).unwrap();
        assert!(sent_rx.recv().unwrap() <= 3 * one);
        waiting.join().unwrap();
        assert_eq!(given.recv().unwrap(), 4);
        through.send(()).unwrap();
        let indexer = Arc::into_inner(indexer).unwrap();
        let done = indexer.finish();
        assert_eq!(done.records, 6);
        assert_eq!(done.waits, 1);
    }

    #[test]
    fn a_large_gather_is_indexed_in_transactions_of_a_bounded_size_in_order() {
        let (indexer, through, given) = gated(usize::MAX);
        let count = 2 * INDEX_TRANSACTION_RECORDS + 88;
        indexer.send(records(1, count as u64, 10));
        let mut parts = Vec::new();
        while parts.iter().sum::<usize>() < count {
            parts.push(given.recv().unwrap());
            through.send(()).unwrap();
        }
        assert_eq!(
            parts,
            [INDEX_TRANSACTION_RECORDS, INDEX_TRANSACTION_RECORDS, 88]
        );
        assert_eq!(indexer.finish().records, count as u64);
    }

    #[test]
    fn a_failed_part_is_tried_again_with_the_parts_after_it_and_nothing_twice() {
        // An index whose second transaction fails once; it tells the test
        // the first record of each part it is given.
        let (given_tx, given) = mpsc::channel();
        let (given_tx, failed) = (Mutex::new(given_tx), Mutex::new(false));
        let indexer = by_hand(usize::MAX, move |records| {
            let first = records[0].position.n;
            let _ = given_tx.lock().unwrap().send(first);
            let mut failed = failed.lock().unwrap();
            if first > 1 && !*failed {
                *failed = true;
                return Err(StoreError::Corrupt("the disk is full".into()));
            }
            Ok(records.len())
        });
        let count = 2 * INDEX_TRANSACTION_RECORDS as u64 + 88;
        indexer.send(records(1, count, 10));
        // The first part is written, the second fails: the rest waits.
        let second = INDEX_TRANSACTION_RECORDS as u64 + 1;
        // (A bound on the wait, so that an indexer that never splits its
        // gather fails here instead of hanging the suite.)
        let patience = Duration::from_secs(60);
        assert_eq!(given.recv_timeout(patience).unwrap(), 1);
        assert_eq!(given.recv_timeout(patience).unwrap(), second);
        // The next records the gateway hands over bring the next try: from
        // the part that failed on, with the new record after the rest.
        indexer.send(records(count + 1, 1, 10));
        let done = indexer.finish();
        assert_eq!(done.records, count + 1);
        assert_eq!(done.behind, 0);
        let third = 2 * INDEX_TRANSACTION_RECORDS as u64 + 1;
        assert_eq!(given.try_iter().collect::<Vec<_>>(), [second, third]);
    }

    #[test]
    fn a_sender_never_waits_for_an_indexer_that_is_gone() {
        let one = weight(&records(1, 1, 10));
        let indexer = Indexer::start(one, |_backlog, receiver| {
            // Takes one batch and dies without taking more.
            let _first = receiver.recv();
            panic!("the indexer broke");
        })
        .unwrap();
        indexer.send(records(1, 5, 10));
        // The thread may or may not have ended yet: either way, sending
        // past the bound comes back.
        indexer.send(records(6, 5, 10));
        indexer.send(records(11, 5, 10));
        let done = indexer.finish();
        assert_eq!(done.records, 0);
    }
}
