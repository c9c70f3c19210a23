//! The thread that watches the store for what other processes change: a
//! person's answer to a call waiting in the approval queue, and standing
//! approvals given or revoked (by `hintgate approvals`, `hintgate pins
//! revoke`, or another gateway on the same PostgreSQL store).
//!
//! It sleeps on the store's [`QueueWatch`] (SQLite: the database's change
//! counter, looked at every few milliseconds on a connection of its own;
//! PostgreSQL: `LISTEN`), and turns what it reads into events for the loop:
//! [`Event::Answered`] for each answer, and [`Event::Approvals`] with the
//! whole set of standing approvals of each watched identity, read at most
//! every 100 ms (and at least every 250 ms) while the server runs. So the
//! call path never reads the store: the catalog's copy is kept current from
//! here. A standing approval revoked by another process stops answering
//! within about a quarter of a second; one the gateway itself gives counts
//! at once, and a read that began before it cannot take it away.
//!
//! A watch that polls (SQLite's) is waited on only while a question is in
//! the queue, where a person's answer should be seen within milliseconds.
//! With none, the thread sleeps until the next read of the standing
//! approvals, which the quarter of a second allows anyway: a gateway whose
//! servers are idle wakes four times a second, not a hundred (see
//! [`wait_for`]).
//!
//! [`QueueWatch`]: hintgate_store::QueueWatch

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use hintgate_store::Store;

use crate::event::{Event, EventSender};

/// How long the thread sleeps on the store before it looks again anyway (a
/// change normally wakes it at once).
const WATCH_SLICE: Duration = Duration::from_millis(500);

/// The most time between two reads of the standing approvals while a
/// server runs, so that one revoked elsewhere stops answering soon even
/// when nothing woke the watch.
const APPROVALS_AT_LEAST: Duration = Duration::from_millis(250);

/// The least time between two reads of the standing approvals: a burst of
/// commits (the audit log's own, which also wake a SQLite watch) costs one
/// read per interval, not one per commit.
const APPROVALS_INTERVAL: Duration = Duration::from_millis(100);

/// What the thread watches.
#[derive(Debug, Default)]
struct Watched {
    queue: BTreeSet<u64>,
    keys: BTreeSet<String>,
}

/// A handle to the watching thread.
#[derive(Debug)]
pub(crate) struct StoreWatcher {
    watched: Arc<Mutex<Watched>>,
    stop: Arc<AtomicBool>,
    thread: std::thread::Thread,
}

// === impl StoreWatcher ===

impl StoreWatcher {
    /// Starts the thread.
    pub fn spawn(store: Arc<dyn Store>, events: EventSender) -> Option<Self> {
        let watched: Arc<Mutex<Watched>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (shared, stopped) = (Arc::clone(&watched), Arc::clone(&stop));
        let handle = std::thread::Builder::new()
            .name("hintgate-watch".to_owned())
            .spawn(move || watch_loop(&*store, &shared, &stopped, &events))
            .map_err(|err| tracing::error!("cannot start the store watcher: {err}"))
            .ok()?;
        Some(Self {
            watched,
            stop,
            thread: handle.thread().clone(),
        })
    }

    /// Watches the queue for an answer to call `id`.
    pub fn watch_queue(&self, id: u64) {
        lock(&self.watched).queue.insert(id);
        self.thread.unpark();
    }

    /// Stops watching for an answer to call `id`.
    pub fn unwatch_queue(&self, id: u64) {
        lock(&self.watched).queue.remove(&id);
    }

    /// Watches the standing approvals of these identities (and no others).
    pub fn set_keys(&self, keys: Vec<String>) {
        lock(&self.watched).keys = keys.into_iter().collect();
        self.thread.unpark();
    }

    /// Ends the thread (it notices within one slice).
    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.unpark();
    }
}

fn lock(watched: &Mutex<Watched>) -> std::sync::MutexGuard<'_, Watched> {
    watched.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Sends the loop every answer the store holds for a queued question still
/// watched, and stops watching it.
fn send_answers(store: &dyn Store, watched: &Mutex<Watched>, events: &EventSender, queue: &[u64]) {
    match store.answers(queue) {
        Ok(answers) => {
            for (id, answer) in answers {
                if lock(watched).queue.remove(&id) {
                    // Blocks while the loop's channel is full (this
                    // thread is outside the runtime); the loop
                    // never waits for this thread.
                    let _ = events.blocking_send(Event::Answered { id, answer });
                }
            }
        }
        Err(err) => tracing::warn!("cannot read the approval queue: {err}"),
    }
}

/// Reads each watched tool's standing approvals and sends the loop the set.
fn send_approvals(store: &dyn Store, events: &EventSender, keys: Vec<String>) {
    for key in keys {
        // The whole set goes to the loop each time, not only when it
        // differs from the last read: between two reads the gateway
        // may have approved, and another process revoked, the same
        // tool, and only the loop knows what its copy holds.
        let read_at = Instant::now();
        match store.approvals_of(&key) {
            Ok(approvals) => {
                let _ = events.blocking_send(Event::Approvals {
                    key,
                    approvals,
                    read_at,
                });
            }
            Err(err) => tracing::warn!("cannot read the standing approvals: {err}"),
        }
    }
}

fn watch_loop(
    store: &dyn Store,
    watched: &Mutex<Watched>,
    stop: &AtomicBool,
    events: &EventSender,
) {
    let mut watch = None;
    // The catalog has just read the approvals itself: the first read can
    // wait an interval, off the start of the session.
    let mut last_read = Instant::now();
    while !events.is_closed() && !stop.load(Ordering::Relaxed) {
        let (queue, keys): (Vec<u64>, Vec<String>) = {
            let watched = lock(watched);
            (
                watched.queue.iter().copied().collect(),
                watched.keys.iter().cloned().collect(),
            )
        };
        if queue.is_empty() && keys.is_empty() {
            std::thread::park_timeout(WATCH_SLICE);
            continue;
        }
        // Look first: an answer may have come before the watch began.
        if !queue.is_empty() {
            send_answers(store, watched, events, &queue);
        }
        let watching_keys = !keys.is_empty();
        if watching_keys && last_read.elapsed() >= APPROVALS_INTERVAL {
            last_read = Instant::now();
            send_approvals(store, events, keys);
        }
        let ready = match &mut watch {
            Some(watch) => watch,
            None => match store.watch() {
                Ok(new) => watch.insert(new),
                Err(err) => {
                    tracing::warn!("cannot watch the store: {err}");
                    std::thread::park_timeout(WATCH_SLICE);
                    continue;
                }
            },
        };
        match wait_for(
            !queue.is_empty(),
            watching_keys,
            ready.polls(),
            last_read.elapsed(),
        ) {
            Wait::Sleep(time) => std::thread::park_timeout(time),
            Wait::Watch(time) => {
                if let Err(err) = ready.wait(time) {
                    tracing::warn!("lost the store's watch: {err}");
                    watch = None;
                    std::thread::park_timeout(WATCH_SLICE);
                }
            }
        }
    }
}

/// How the watching thread waits before it looks again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// On the store's watch, for at most this long: a change in the store
    /// ends it early.
    Watch(Duration),
    /// Asleep for this long: only a question queued, or identities to
    /// watch given, by the gateway ends it early.
    Sleep(Duration),
}

/// How to wait, with a question in the queue or not, standing approvals
/// watched or not, on a watch that polls or is woken, `since_read` after
/// the last read of the standing approvals.
///
/// Standing approvals are read again at least every [`APPROVALS_AT_LEAST`],
/// whether or not a change woke the watch, so a watch that polls is not
/// worth its wake-ups for them alone: without a question waiting, the
/// thread sleeps until that read is due.
fn wait_for(queued: bool, watching_keys: bool, polls: bool, since_read: Duration) -> Wait {
    if !watching_keys {
        return Wait::Watch(WATCH_SLICE);
    }
    if queued || !polls {
        return Wait::Watch(APPROVALS_AT_LEAST);
    }
    // Never less than the least time between two reads, so that the read
    // this wait leads to is taken.
    Wait::Sleep(
        APPROVALS_AT_LEAST
            .saturating_sub(since_read)
            .max(APPROVALS_INTERVAL),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_polling_watch_is_waited_on_only_while_a_question_is_queued() {
        // (queued, watching keys, the watch polls, since the last read)
        let cases = [
            // SQLite, servers running, nobody asked: asleep until the next
            // read of the standing approvals is due, no polling.
            (
                (false, true, true, Duration::ZERO),
                Wait::Sleep(APPROVALS_AT_LEAST),
            ),
            ((false, true, true, 40 * MS), Wait::Sleep(210 * MS)),
            // ...never so short that the read it leads to is not yet due.
            (
                (false, true, true, 300 * MS),
                Wait::Sleep(APPROVALS_INTERVAL),
            ),
            // A question waits for a person: the watch, whose change
            // counter sees an answer within milliseconds.
            (
                (true, true, true, Duration::ZERO),
                Wait::Watch(APPROVALS_AT_LEAST),
            ),
            (
                (true, false, true, Duration::ZERO),
                Wait::Watch(WATCH_SLICE),
            ),
            // PostgreSQL's watch is woken, not polled: waited on as before.
            (
                (false, true, false, Duration::ZERO),
                Wait::Watch(APPROVALS_AT_LEAST),
            ),
            (
                (true, true, false, Duration::ZERO),
                Wait::Watch(APPROVALS_AT_LEAST),
            ),
            (
                (true, false, false, Duration::ZERO),
                Wait::Watch(WATCH_SLICE),
            ),
        ];
        for ((queued, keys, polls, since), wait) in cases {
            assert_eq!(
                wait_for(queued, keys, polls, since),
                wait,
                "queued {queued}, keys {keys}, polls {polls}, {since:?} since the read"
            );
        }
    }

    #[test]
    fn the_sleep_never_outlasts_the_quarter_second_a_revocation_may_take() {
        for since in (0..400).step_by(7) {
            let Wait::Sleep(time) = wait_for(false, true, true, since * MS) else {
                panic!("a polling watch with nothing queued is not waited on");
            };
            assert!(time <= APPROVALS_AT_LEAST, "{time:?}");
            assert!(time >= APPROVALS_INTERVAL, "{time:?}");
        }
    }
}
