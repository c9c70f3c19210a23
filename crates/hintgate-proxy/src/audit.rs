//! The audit writer: one thread that appends to the audit log in groups.
//!
//! The event loop never waits on the disk: it hands an entry to the writer
//! and goes on. The writer takes every entry that is waiting, appends them in
//! one commit (group commit), and for each entry that holds a call, tells the
//! event loop that it is durable; only then is the call sent to its server.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::mpsc as std_mpsc;

use hintgate_store::{AuditLog, NewEntry};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::event::Event;

/// The most entries appended in one commit.
const MAX_GROUP: usize = 512;

/// A handle to the audit writer thread.
#[derive(Debug, Clone)]
pub struct AuditWriter {
    tx: std_mpsc::Sender<Job>,
    thread: std::sync::Arc<std::sync::Mutex<Option<std::thread::JoinHandle<()>>>>,
}

#[derive(Debug)]
struct Job {
    entry: NewEntry,
    /// When set, the event loop waits for this entry before going on.
    token: Option<u64>,
}

impl AuditWriter {
    /// Starts the writer thread, appending to `log`; an [`Event::Audited`]
    /// goes to `events` for every entry appended with a token.
    pub fn spawn(log: Arc<dyn AuditLog>, events: mpsc::UnboundedSender<Event>) -> Self {
        let (tx, rx) = std_mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("hintgate-audit".to_owned())
            .spawn(move || {
                let mut entries = Vec::with_capacity(MAX_GROUP);
                let mut tokens = Vec::with_capacity(MAX_GROUP);
                while let Ok(first) = rx.recv() {
                    entries.clear();
                    tokens.clear();
                    let mut next = Some(first);
                    while let Some(job) = next {
                        entries.push(job.entry);
                        tokens.push(job.token);
                        next = if entries.len() < MAX_GROUP {
                            rx.try_recv().ok()
                        } else {
                            None
                        };
                    }
                    // One commit for the whole group: every call waiting on
                    // it goes on at once.
                    let result = log.append(&entries);
                    if let Err(err) = &result {
                        tracing::error!("the audit log could not be written: {err}");
                    }
                    for (idx, token) in tokens.iter().enumerate() {
                        let Some(token) = *token else {
                            continue;
                        };
                        let outcome = match &result {
                            Ok(seqs) => seqs
                                .get(idx)
                                .copied()
                                .ok_or_else(|| "no sequence number".to_owned()),
                            Err(err) => Err(err.to_string()),
                        };
                        let _ = events.send(Event::Audited {
                            token,
                            result: outcome,
                        });
                    }
                }
            })
            .map_err(|err| tracing::error!("cannot start the audit writer: {err}"))
            .ok();
        Self {
            tx,
            thread: std::sync::Arc::new(std::sync::Mutex::new(thread)),
        }
    }

    /// Stops taking entries and waits until every entry given is written.
    pub fn finish(self) {
        let Self { tx, thread } = self;
        drop(tx);
        let handle = thread.lock().ok().and_then(|mut handle| handle.take());
        if let Some(handle) = handle {
            let _ = handle.join();
        }
    }

    /// Appends an entry; when `token` is set, an [`Event::Audited`] with it
    /// follows once the entry is durable (or could not be written).
    pub fn append(&self, entry: NewEntry, token: Option<u64>) -> bool {
        self.tx.send(Job { entry, token }).is_ok()
    }
}

/// The body of a call record.
pub fn call_body(fields: BTreeMap<&str, Value>) -> Value {
    Value::Object(
        fields
            .into_iter()
            .map(|(key, value)| (key.to_owned(), value))
            .collect(),
    )
}
