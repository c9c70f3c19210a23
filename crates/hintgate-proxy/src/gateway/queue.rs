//! Calls that wait in the store's approval queue: the channel for a host
//! that cannot ask a person itself (it did not declare elicitation).
//!
//! The call is put in the queue with the whole prompt and held here until a
//! person answers it with `hintgate approvals` (from any terminal, or any
//! gateway on the same PostgreSQL store), or `ask_timeout_s` passes. A
//! thread of the gateway's own sleeps on the store's [`QueueWatch`] and
//! turns answers into [`Event::Answered`] for the event loop; the timeout is
//! one of the loop's deadlines. Whichever comes first wins, in the store:
//! the withdrawal at the timeout is conditional on nobody having answered.
//!
//! [`QueueWatch`]: hintgate_store::QueueWatch

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hintgate_policy::decide::RememberOffer;
use hintgate_store::{Answer, NewPending, Remember, Store};
use tokio::sync::mpsc;

use super::tools::{ALWAYS, Ask, THIS_CALL, THIS_SESSION, unix_now};
use super::{Deadline, Gateway, Observed};
use crate::event::Event;

/// How long the watching thread sleeps on the store before it looks again
/// anyway (an answer normally wakes it at once).
const WATCH_SLICE: Duration = Duration::from_millis(500);

/// The thread that watches the queue for answers to this gateway's calls.
#[derive(Debug)]
pub(super) struct QueueWatcher {
    ids: Arc<Mutex<HashSet<u64>>>,
    thread: std::thread::Thread,
}

impl QueueWatcher {
    /// Starts the watching thread.
    fn spawn(store: Arc<dyn Store>, events: mpsc::UnboundedSender<Event>) -> Option<Self> {
        let ids: Arc<Mutex<HashSet<u64>>> = Arc::default();
        let watched = Arc::clone(&ids);
        let handle = std::thread::Builder::new()
            .name("hintgate-approvals".to_owned())
            .spawn(move || watch_loop(&*store, &watched, &events))
            .map_err(|err| tracing::error!("cannot start the approval queue's watcher: {err}"))
            .ok()?;
        Some(Self {
            ids,
            thread: handle.thread().clone(),
        })
    }

    fn add(&self, id: u64) {
        lock(&self.ids).insert(id);
        self.thread.unpark();
    }

    fn remove(&self, id: u64) {
        lock(&self.ids).remove(&id);
    }
}

fn lock(ids: &Mutex<HashSet<u64>>) -> std::sync::MutexGuard<'_, HashSet<u64>> {
    ids.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn watch_loop(store: &dyn Store, ids: &Mutex<HashSet<u64>>, events: &mpsc::UnboundedSender<Event>) {
    let mut watch = None;
    while !events.is_closed() {
        let current: Vec<u64> = lock(ids).iter().copied().collect();
        if current.is_empty() {
            std::thread::park_timeout(WATCH_SLICE);
            continue;
        }
        // Look first: an answer may have come before the watch began.
        match store.answers(&current) {
            Ok(answers) => {
                for (id, answer) in answers {
                    if lock(ids).remove(&id) {
                        let _ = events.send(Event::Answered { id, answer });
                    }
                }
            }
            Err(err) => tracing::warn!("cannot read the approval queue: {err}"),
        }
        let ready = match &mut watch {
            Some(watch) => watch,
            None => match store.watch() {
                Ok(new) => watch.insert(new),
                Err(err) => {
                    tracing::warn!("cannot watch the approval queue: {err}");
                    std::thread::sleep(WATCH_SLICE);
                    continue;
                }
            },
        };
        if let Err(err) = ready.wait(WATCH_SLICE) {
            tracing::warn!("lost the approval queue's watch: {err}");
            watch = None;
            std::thread::sleep(WATCH_SLICE);
        }
    }
}

// === impl Gateway ===

impl Gateway {
    /// Puts a call that needs a person in the approval queue and holds it.
    pub(super) fn enqueue_ask(&mut self, ask: Ask, prompt: String) {
        let (Some(store), Some(up)) = (self.store.clone(), self.upstreams.get(ask.idx)) else {
            self.refuse_unasked(ask, "It needs a person's approval, and this host cannot ask one (it did not declare elicitation).");
            return;
        };
        let server = up.name.clone();
        let now = unix_now();
        let wait = i64::try_from(self.ask_timeout.as_secs()).unwrap_or(i64::MAX);
        let pending = NewPending {
            at: now,
            expires_at: now.saturating_add(wait),
            session: self.session.clone(),
            server: server.clone(),
            server_key: up.key.clone().unwrap_or_default(),
            tool: ask.tool.clone(),
            digest: ask
                .digest
                .map(|digest| digest.to_string())
                .unwrap_or_default(),
            prompt,
            offer: match ask.decision.remember {
                RememberOffer::UpToAlways => Remember::Always,
                RememberOffer::ThisCallOnly | RememberOffer::NotAsked => Remember::Call,
            },
        };
        let id = match store.enqueue(&pending) {
            Ok(id) => id,
            Err(err) => {
                tracing::error!(server.id = %server, tool.name = %ask.tool, "the approval queue could not be written: {err}");
                let extra = format!(
                    "It needs a person's approval; this host cannot ask one, and the approval queue could not be written ({err})."
                );
                self.refuse_unasked(ask, &extra);
                return;
            }
        };
        if self.queue_watcher.is_none() {
            self.queue_watcher = QueueWatcher::spawn(store, self.events_tx.clone());
        }
        let Some(watcher) = &self.queue_watcher else {
            let _ = self
                .store
                .as_ref()
                .map(|store| store.withdraw(id, "the gateway cannot watch the queue"));
            self.refuse_unasked(
                ask,
                "It needs a person's approval, and the approval queue cannot be watched.",
            );
            return;
        };
        watcher.add(id);
        tracing::warn!(
            server.id = %server, tool.name = %ask.tool,
            "call #{id} waits for a person: `hintgate approvals approve {id}` or `hintgate approvals deny {id}` (within {} s)",
            self.ask_timeout.as_secs()
        );
        self.observe(Observed::Queued {
            id,
            server,
            tool: ask.tool.clone(),
        });
        let mut ask = ask;
        ask.deadline = self.add_deadline(self.ask_timeout, Deadline::Queue(id));
        self.queued.insert(id, ask);
    }

    /// A person answered a queued call.
    pub(super) fn on_queue_answer(&mut self, id: u64, answer: Answer) {
        let Some(ask) = self.queued.remove(&id) else {
            return;
        };
        self.deadlines.remove(&ask.deadline);
        self.apply_queue_answer(ask, &answer);
    }

    /// A queued call's time is up: withdraw it, unless a person was first.
    pub(super) fn queue_timed_out(&mut self, id: u64) {
        let Some(ask) = self.queued.remove(&id) else {
            return;
        };
        if let Some(watcher) = &self.queue_watcher {
            watcher.remove(id);
        }
        match self
            .store
            .as_ref()
            .map(|store| store.withdraw(id, "nobody answered in time"))
        {
            Some(Ok(Some(answer))) => self.apply_queue_answer(ask, &answer),
            Some(Err(err)) => {
                tracing::error!("the approval queue could not be written: {err}");
                self.queued_unanswered(ask, id);
            }
            Some(Ok(None)) | None => self.queued_unanswered(ask, id),
        }
    }

    fn queued_unanswered(&mut self, ask: Ask, id: u64) {
        let seconds = self.ask_timeout.as_secs();
        let server = self
            .upstreams
            .get(ask.idx)
            .map(|up| up.name.clone())
            .unwrap_or_default();
        self.observe(Observed::Answered {
            server,
            tool: ask.tool.clone(),
            approved: false,
            answer: format!("nobody answered within {seconds} s"),
        });
        let why = format!(
            "It needs a person's approval, and this host cannot ask one (it did not declare elicitation): it waited in the approval queue as #{id} and nobody answered within {seconds} s (`hintgate approvals approve {id}` answers; `ask_timeout_s` sets the wait)."
        );
        self.refuse_unasked(ask, &why);
    }

    /// The host cancelled a queued call, or the session ends: withdraw it
    /// and record it as refused.
    pub(super) fn withdraw_queued(&mut self, id: u64, why: &str) {
        let Some(ask) = self.queued.remove(&id) else {
            return;
        };
        self.deadlines.remove(&ask.deadline);
        if let Some(watcher) = &self.queue_watcher {
            watcher.remove(id);
        }
        if let Some(store) = &self.store
            && let Err(err) = store.withdraw(id, why)
        {
            tracing::error!("the approval queue could not be written: {err}");
        }
        let extra = format!("It waited in the approval queue as #{id}; {why}.");
        self.refuse_unasked(ask, &extra);
    }

    /// The queued calls of a host request (to cancel them).
    pub(super) fn queued_for(&self, request_id: &str) -> Vec<u64> {
        self.queued
            .iter()
            .filter(|(_, ask)| ask.request.id == request_id)
            .map(|(id, _)| *id)
            .collect()
    }

    fn apply_queue_answer(&mut self, ask: Ask, answer: &Answer) {
        let server = self
            .upstreams
            .get(ask.idx)
            .map(|up| up.name.clone())
            .unwrap_or_default();
        let by = hintgate_policy::sanitize::sanitize(&answer.by).text;
        if !answer.approve {
            tracing::info!(server.id = %server, tool.name = %ask.tool, "denied in the approval queue by {by}");
            self.observe(Observed::Answered {
                server: server.clone(),
                tool: ask.tool.clone(),
                approved: false,
                answer: format!("denied by {by} (hintgate approvals)"),
            });
            let extra = format!("It was denied in the approval queue by {by}.");
            self.refuse_unasked_by(ask, &extra, &format!("person (hintgate approvals, {by})"));
            return;
        }
        // The offer is checked again here: the queue is only as trusted as
        // whoever can write the store.
        let remember = match answer.remember {
            Remember::Always => ALWAYS,
            Remember::Session => THIS_SESSION,
            Remember::Call => THIS_CALL,
        };
        self.record_approval(
            ask.idx,
            &ask.tool,
            ask.digest,
            &ask.decision,
            Some(remember),
        );
        tracing::info!(server.id = %server, tool.name = %ask.tool, "approved in the approval queue by {by}");
        self.observe(Observed::Answered {
            server,
            tool: ask.tool.clone(),
            approved: true,
            answer: format!(
                "approved by {by} (hintgate approvals, remember: {})",
                answer.remember.as_str()
            ),
        });
        let approver = format!("person (hintgate approvals, {by})");
        self.forward_asked(ask, &approver);
    }
}
