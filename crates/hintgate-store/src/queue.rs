//! The approval queue: calls that wait for a person on a host that cannot
//! ask one (it did not declare elicitation).
//!
//! A gateway puts the call in the queue with the full prompt; a person sees
//! it in `hintgate approvals list` and answers it with `hintgate approvals
//! approve ID` or `deny ID`, from another terminal or, with PostgreSQL, from
//! another machine. The gateway learns of the answer through a
//! [`QueueWatch`] (SQLite: the database's change counter, checked every few
//! milliseconds on a connection of its own; PostgreSQL: `LISTEN/NOTIFY`) and
//! withdraws the call when its time is up.
//!
//! Each entry is answered at most once: the answer and the withdrawal are
//! both conditional on the entry still waiting, so whichever commits first
//! wins and the other learns what happened.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use rusqlite::{OptionalExtension, params};
use serde::Serialize;
use serde_json::Value;

use crate::rows::{EntryFields, Sealer};
use crate::{MemoryStore, Seal, SqliteStore, StoreError, from_sql, to_sql};

/// How far an approval may be remembered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Remember {
    /// This call only.
    Call,
    /// This tool, for the rest of the waiting gateway's session.
    Session,
    /// This tool always (for this definition).
    Always,
}

impl Remember {
    /// The stable name (`call`, `session`, `always`).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Call => "call",
            Self::Session => "session",
            Self::Always => "always",
        }
    }

    /// The value of a stable name.
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "call" => Some(Self::Call),
            "session" => Some(Self::Session),
            "always" => Some(Self::Always),
            _ => None,
        }
    }
}

/// A call to put in the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPending {
    /// When it started waiting, in seconds since the Unix epoch.
    pub at: i64,
    /// When the gateway stops waiting (seconds since the Unix epoch).
    pub expires_at: i64,
    /// The gateway session it belongs to (as the audit log names it).
    pub session: String,
    /// The server's configured name.
    pub server: String,
    /// The server's identity key.
    pub server_key: String,
    /// The server's own tool name.
    pub tool: String,
    /// The pin digest of the definition the call is for.
    pub digest: String,
    /// What the person is shown: the whole prompt, as for elicitation.
    pub prompt: String,
    /// The prompt's content as JSON, for a reader that renders it itself
    /// (the web console; `Policy::prompt_details`); `None` when the gateway
    /// gave none.
    pub details: Option<Value>,
    /// The most the approval may be remembered.
    pub offer: Remember,
}

impl NewPending {
    /// The fields its seal covers, once it has its number.
    pub(crate) fn fields(&self, id: u64) -> EntryFields<'_> {
        EntryFields {
            id,
            at: self.at,
            expires_at: self.expires_at,
            session: &self.session,
            server: &self.server,
            server_key: &self.server_key,
            tool: &self.tool,
            digest: &self.digest,
            prompt: &self.prompt,
            details: self.details.as_ref().map(Value::to_string),
            offer: self.offer.as_str(),
        }
    }
}

/// A person's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Answer {
    /// Whether the call may run.
    pub approve: bool,
    /// How far the approval is remembered (never beyond the offer; the
    /// gateway checks again).
    pub remember: Remember,
    /// Who answered, for the audit log.
    pub by: String,
    /// The arguments the person edited the call to, as canonical JSON text
    /// (an object), when they changed them before approving: the gateway
    /// checks, decides and previews the edited call, and asks about it
    /// again before it runs. `None` for an answer about the call as asked.
    /// The answer's seal covers it; an answer with it reads as a denial to
    /// a gateway that does not know it (its seal does not verify there).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}

/// Where an entry stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "state")]
pub enum PendingState {
    /// Waiting for a person.
    Waiting,
    /// A person answered.
    Answered(Answer),
    /// The gateway stopped waiting (why: timed out, the host cancelled, the
    /// gateway ended).
    Withdrawn {
        /// Why.
        why: String,
    },
}

/// An entry of the queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pending {
    /// Its number, unique in the store and never reused.
    pub id: u64,
    /// When it started waiting.
    pub at: i64,
    /// When the gateway stops waiting.
    pub expires_at: i64,
    /// The gateway session.
    pub session: String,
    /// The server's configured name.
    pub server: String,
    /// The server's identity key.
    pub server_key: String,
    /// The tool.
    pub tool: String,
    /// The pin digest.
    pub digest: String,
    /// The prompt.
    pub prompt: String,
    /// The prompt's content as JSON, when the gateway gave it (an entry
    /// written by an older gateway has none, and one whose stored text is
    /// not JSON reads as none).
    pub details: Option<Value>,
    /// The most the approval may be remembered.
    pub offer: Remember,
    /// Where it stands.
    pub state: PendingState,
    /// Whether the entry, and its answer if it has one, carry valid seals
    /// (see [`Seal`]). When one does not, the store reads the answer as a
    /// denial, and a person cannot answer the entry: its prompt may not be
    /// what the gateway asked.
    pub seal: Seal,
}

impl Pending {
    /// The fields its seal covers.
    pub(crate) fn fields(&self) -> EntryFields<'_> {
        EntryFields {
            id: self.id,
            at: self.at,
            expires_at: self.expires_at,
            session: &self.session,
            server: &self.server,
            server_key: &self.server_key,
            tool: &self.tool,
            digest: &self.digest,
            prompt: &self.prompt,
            details: self.details.as_ref().map(Value::to_string),
            offer: self.offer.as_str(),
        }
    }

    /// Checks the entry's seal (`tag`) and its answer's (`answer_tag`) with
    /// `sealer` ([`Seal::Unchecked`] without one). An answer whose seal, or
    /// whose entry's seal, does not verify was not given through hintgate:
    /// it is read as a denial, naming why.
    pub(crate) fn check_seals(
        &mut self,
        sealer: Option<&Sealer>,
        tag: Option<&str>,
        answer_tag: Option<&str>,
    ) {
        let Some(sealer) = sealer else {
            self.seal = Seal::Unchecked;
            return;
        };
        let entry = sealer.check_entry(&self.fields(), tag);
        let answer = match (&self.state, tag) {
            (PendingState::Answered(answer), Some(tag)) if entry == Seal::Valid => {
                sealer.check_answer(tag, answer, answer_tag)
            }
            (PendingState::Answered(_), _) => Seal::Broken,
            _ => Seal::Valid,
        };
        self.seal = if entry == Seal::Valid && answer == Seal::Valid {
            Seal::Valid
        } else {
            Seal::Broken
        };
        if self.seal == Seal::Broken
            && let PendingState::Answered(answer) = &mut self.state
        {
            *answer = Answer {
                approve: false,
                remember: Remember::Call,
                by: format!(
                    "nobody: an answer by `{}` whose seal does not verify (written without the audit key)",
                    answer.by
                ),
                arguments: None,
            };
        }
    }
}

/// What [`ApprovalQueue::answer`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answered {
    /// The answer was recorded; the waiting gateway is told.
    Released,
    /// The entry no longer waits (answered before, or withdrawn).
    NotWaiting(PendingState),
    /// The gateway's time is up (the entry will be withdrawn).
    Expired,
    /// No such entry.
    Unknown,
    /// The entry's seal does not verify: it was put in the queue, or
    /// changed, by someone without the audit key, so its prompt may not be
    /// what the gateway asked. It is not answered.
    Broken,
}

/// The approval queue.
///
/// Contract:
/// - `enqueue` is durable when it returns, and returns a number never used
///   before in this store;
/// - `answer` records an answer only for an entry that is still waiting and
///   not past `expires_at` (the `now` it is given), and wakes every
///   [`QueueWatch`] of the store, in this process or another;
/// - `withdraw` ends the wait of an entry that is still waiting; when a
///   person answered first, it changes nothing and returns the answer;
/// - an entry is answered or withdrawn at most once.
pub trait ApprovalQueue: Send + Sync + std::fmt::Debug {
    /// Puts a call in the queue; returns its number.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the queue cannot be written.
    fn enqueue(&self, pending: &NewPending) -> Result<u64, StoreError>;

    /// One entry, whatever its state.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the queue cannot be read.
    fn pending(&self, id: u64) -> Result<Option<Pending>, StoreError>;

    /// Entries still waiting at `now`, oldest first.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the queue cannot be read.
    fn waiting(&self, now: i64) -> Result<Vec<Pending>, StoreError>;

    /// Answers a waiting entry.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the queue cannot be written.
    fn answer(&self, id: u64, answer: &Answer, now: i64) -> Result<Answered, StoreError>;

    /// The answers given so far to any of `ids`.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the queue cannot be read.
    fn answers(&self, ids: &[u64]) -> Result<Vec<(u64, Answer)>, StoreError>;

    /// Ends the wait of an entry; the answer, when a person was first.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the queue cannot be written.
    fn withdraw(&self, id: u64, why: &str) -> Result<Option<Answer>, StoreError>;

    /// A way to sleep until the queue may have changed.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be watched.
    fn watch(&self) -> Result<Box<dyn QueueWatch>, StoreError>;
}

/// Sleeps until the queue may have changed.
pub trait QueueWatch: Send + std::fmt::Debug {
    /// Returns when an answer may have been given since the last call (or
    /// since the watch began), or after `timeout`. It may return early
    /// without a change; callers check [`ApprovalQueue::answers`].
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be watched any more.
    fn wait(&mut self, timeout: Duration) -> Result<(), StoreError>;

    /// Whether [`QueueWatch::wait`] looks at the store again and again
    /// while it waits (SQLite's change counter) rather than being woken by
    /// it (PostgreSQL's `NOTIFY`). A caller with nothing urgent to watch
    /// sleeps instead, so an idle process is not woken many times a second.
    fn polls(&self) -> bool {
        false
    }
}

pub(crate) fn state_from(
    state: &str,
    approve: Option<bool>,
    remember: Option<&str>,
    by: Option<String>,
    why: Option<String>,
    arguments: Option<String>,
) -> PendingState {
    match state {
        "answered" => PendingState::Answered(Answer {
            approve: approve.unwrap_or(false),
            // An unreadable remember choice is the narrowest one.
            remember: remember.and_then(Remember::parse).unwrap_or(Remember::Call),
            by: by.unwrap_or_default(),
            arguments,
        }),
        "waiting" => PendingState::Waiting,
        _ => PendingState::Withdrawn {
            why: why.unwrap_or_default(),
        },
    }
}

// === MemoryStore ===

/// Wakes the watches of a [`MemoryStore`].
#[derive(Debug, Default)]
pub(crate) struct Bell {
    rung: Mutex<u64>,
    ring: Condvar,
}

impl Bell {
    pub(crate) fn ring(&self) {
        let mut rung = self
            .rung
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *rung += 1;
        self.ring.notify_all();
    }

    fn count(&self) -> u64 {
        *self
            .rung
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[derive(Debug)]
struct MemoryWatch {
    bell: Arc<Bell>,
    seen: u64,
}

impl QueueWatch for MemoryWatch {
    fn wait(&mut self, timeout: Duration) -> Result<(), StoreError> {
        let rung = self
            .bell
            .rung
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (rung, _) = self
            .bell
            .ring
            .wait_timeout_while(rung, timeout, |rung| *rung == self.seen)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.seen = *rung;
        Ok(())
    }
}

impl ApprovalQueue for MemoryStore {
    fn enqueue(&self, new: &NewPending) -> Result<u64, StoreError> {
        let mut state = self.lock();
        let id = state.queue.len() as u64 + 1;
        state.queue.push(Pending {
            id,
            at: new.at,
            expires_at: new.expires_at,
            session: new.session.clone(),
            server: new.server.clone(),
            server_key: new.server_key.clone(),
            tool: new.tool.clone(),
            digest: new.digest.clone(),
            prompt: new.prompt.clone(),
            details: new.details.clone(),
            offer: new.offer,
            state: PendingState::Waiting,
            // Nothing but this process reaches a memory store's rows.
            seal: Seal::Valid,
        });
        Ok(id)
    }

    fn pending(&self, id: u64) -> Result<Option<Pending>, StoreError> {
        Ok(self.lock().queue.iter().find(|p| p.id == id).cloned())
    }

    fn waiting(&self, now: i64) -> Result<Vec<Pending>, StoreError> {
        Ok(self
            .lock()
            .queue
            .iter()
            .filter(|p| p.state == PendingState::Waiting && p.expires_at > now)
            .cloned()
            .collect())
    }

    fn answer(&self, id: u64, answer: &Answer, now: i64) -> Result<Answered, StoreError> {
        let answered = {
            let mut state = self.lock();
            match state.queue.iter_mut().find(|p| p.id == id) {
                None => Answered::Unknown,
                Some(p) if p.state != PendingState::Waiting => {
                    Answered::NotWaiting(p.state.clone())
                }
                Some(p) if p.expires_at <= now => Answered::Expired,
                Some(p) => {
                    p.state = PendingState::Answered(answer.clone());
                    Answered::Released
                }
            }
        };
        if answered == Answered::Released {
            self.bell.ring();
        }
        Ok(answered)
    }

    fn answers(&self, ids: &[u64]) -> Result<Vec<(u64, Answer)>, StoreError> {
        Ok(self
            .lock()
            .queue
            .iter()
            .filter(|p| ids.contains(&p.id))
            .filter_map(|p| match &p.state {
                PendingState::Answered(answer) => Some((p.id, answer.clone())),
                _ => None,
            })
            .collect())
    }

    fn withdraw(&self, id: u64, why: &str) -> Result<Option<Answer>, StoreError> {
        let mut state = self.lock();
        let Some(p) = state.queue.iter_mut().find(|p| p.id == id) else {
            return Ok(None);
        };
        match &p.state {
            PendingState::Answered(answer) => Ok(Some(answer.clone())),
            PendingState::Withdrawn { .. } => Ok(None),
            PendingState::Waiting => {
                p.state = PendingState::Withdrawn {
                    why: why.to_owned(),
                };
                Ok(None)
            }
        }
    }

    fn watch(&self) -> Result<Box<dyn QueueWatch>, StoreError> {
        Ok(Box::new(MemoryWatch {
            seen: self.bell.count(),
            bell: Arc::clone(&self.bell),
        }))
    }
}

// === SqliteStore ===

/// Polls SQLite's change counter (`PRAGMA data_version`) on a connection of
/// its own: it changes when any other connection, in any process, commits.
/// A check costs microseconds, so it runs every few milliseconds.
#[derive(Debug)]
struct SqliteWatch {
    connection: rusqlite::Connection,
    version: i64,
}

/// How often a SQLite watch looks at the change counter.
const SQLITE_WATCH_TICK: Duration = Duration::from_millis(10);

impl QueueWatch for SqliteWatch {
    fn wait(&mut self, timeout: Duration) -> Result<(), StoreError> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let version: i64 = self
                .connection
                .pragma_query_value(None, "data_version", |row| row.get(0))?;
            if version != self.version {
                self.version = version;
                return Ok(());
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return Ok(());
            }
            std::thread::sleep(SQLITE_WATCH_TICK.min(deadline - now));
        }
    }

    fn polls(&self) -> bool {
        true
    }
}

/// The columns every query of the queue selects (SQLite and PostgreSQL
/// name them alike): the entry's, then its seal and its answer's.
pub(crate) const PENDING_COLUMNS: &str = "id, at, expires_at, session, server, server_key, tool, digest, prompt, offer, state, approve, remember, answered_by, why, details, tag, answer_tag, arguments";

/// The stored text of an entry's details, as JSON (unreadable text as none).
pub(crate) fn details_from(text: Option<&str>) -> Option<Value> {
    text.and_then(|text| serde_json::from_str(text).ok())
}

/// A SQLite row of [`PENDING_COLUMNS`], its seals checked by `sealer`.
fn row_to_pending(sealer: Option<&Sealer>, row: &rusqlite::Row<'_>) -> rusqlite::Result<Pending> {
    let mut pending = row_to_unchecked(row)?;
    let tag: Option<String> = row.get(16)?;
    let answer_tag: Option<String> = row.get(17)?;
    pending.check_seals(sealer, tag.as_deref(), answer_tag.as_deref());
    Ok(pending)
}

/// A SQLite row of [`PENDING_COLUMNS`], its seals not yet checked.
fn row_to_unchecked(row: &rusqlite::Row<'_>) -> rusqlite::Result<Pending> {
    let state: String = row.get(10)?;
    let remember: Option<String> = row.get(12)?;
    let offer: String = row.get(9)?;
    Ok(Pending {
        id: from_sql(row.get(0)?),
        at: row.get(1)?,
        expires_at: row.get(2)?,
        session: row.get(3)?,
        server: row.get(4)?,
        server_key: row.get(5)?,
        tool: row.get(6)?,
        digest: row.get(7)?,
        prompt: row.get(8)?,
        details: details_from(row.get::<_, Option<String>>(15)?.as_deref()),
        offer: Remember::parse(&offer).unwrap_or(Remember::Call),
        state: state_from(
            &state,
            row.get(11)?,
            remember.as_deref(),
            row.get(13)?,
            row.get(14)?,
            row.get(18)?,
        ),
        seal: Seal::Unchecked,
    })
}

impl ApprovalQueue for SqliteStore {
    fn enqueue(&self, new: &NewPending) -> Result<u64, StoreError> {
        let sealer = self.sealer.as_ref().ok_or(StoreError::Unsealed)?;
        let mut connection = self.lock();
        let transaction = connection.transaction()?;
        transaction.execute(
            "INSERT INTO approvals (at, expires_at, session, server, server_key, tool, digest, prompt, offer, state, details)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'waiting', ?10)",
            params![
                new.at,
                new.expires_at,
                new.session,
                new.server,
                new.server_key,
                new.tool,
                new.digest,
                new.prompt,
                new.offer.as_str(),
                new.details.as_ref().map(Value::to_string)
            ],
        )?;
        let id = from_sql(transaction.last_insert_rowid());
        // The seal covers the entry's number, known once it is in.
        let tag = sealer.entry(&new.fields(id));
        transaction.execute(
            "UPDATE approvals SET tag = ?2 WHERE id = ?1",
            params![to_sql(id), tag],
        )?;
        transaction.commit()?;
        Ok(id)
    }

    fn pending(&self, id: u64) -> Result<Option<Pending>, StoreError> {
        Ok(self
            .lock()
            .query_row(
                &format!("SELECT {PENDING_COLUMNS} FROM approvals WHERE id = ?1"),
                params![to_sql(id)],
                |row| row_to_pending(self.sealer.as_ref(), row),
            )
            .optional()?)
    }

    fn waiting(&self, now: i64) -> Result<Vec<Pending>, StoreError> {
        let connection = self.lock();
        let mut statement = connection.prepare(&format!(
            "SELECT {PENDING_COLUMNS} FROM approvals WHERE state = 'waiting' AND expires_at > ?1 ORDER BY id"
        ))?;
        let rows = statement.query_map(params![now], |row| {
            row_to_pending(self.sealer.as_ref(), row)
        })?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    fn answer(&self, id: u64, answer: &Answer, now: i64) -> Result<Answered, StoreError> {
        let sealer = self.sealer.as_ref().ok_or(StoreError::Unsealed)?;
        let mut connection = self.lock();
        // IMMEDIATE: the entry read is the one answered.
        let transaction =
            connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let found = transaction
            .query_row(
                &format!("SELECT {PENDING_COLUMNS} FROM approvals WHERE id = ?1"),
                params![to_sql(id)],
                |row| {
                    Ok((
                        row_to_pending(Some(sealer), row)?,
                        row.get::<_, Option<String>>(16)?,
                    ))
                },
            )
            .optional()?;
        let answered = match found {
            None => Answered::Unknown,
            Some((p, _)) if p.state != PendingState::Waiting => Answered::NotWaiting(p.state),
            Some((p, _)) if p.seal != Seal::Valid => Answered::Broken,
            Some((p, _)) if p.expires_at <= now => Answered::Expired,
            Some((_, tag)) => {
                let answer_tag = sealer.answer(tag.as_deref().unwrap_or_default(), answer);
                transaction.execute(
                    "UPDATE approvals SET state = 'answered', approve = ?2, remember = ?3,
                         answered_by = ?4, answer_tag = ?5, arguments = ?6
                     WHERE id = ?1 AND state = 'waiting'",
                    params![
                        to_sql(id),
                        answer.approve,
                        answer.remember.as_str(),
                        answer.by,
                        answer_tag,
                        answer.arguments
                    ],
                )?;
                Answered::Released
            }
        };
        transaction.commit()?;
        Ok(answered)
    }

    fn answers(&self, ids: &[u64]) -> Result<Vec<(u64, Answer)>, StoreError> {
        let connection = self.lock();
        let mut statement = connection.prepare_cached(&format!(
            "SELECT {PENDING_COLUMNS} FROM approvals WHERE id = ?1 AND state = 'answered'"
        ))?;
        let mut answers = Vec::new();
        for &id in ids {
            if let Some(p) = statement
                .query_row(params![to_sql(id)], |row| {
                    row_to_pending(self.sealer.as_ref(), row)
                })
                .optional()?
                && let PendingState::Answered(answer) = p.state
            {
                answers.push((id, answer));
            }
        }
        Ok(answers)
    }

    fn withdraw(&self, id: u64, why: &str) -> Result<Option<Answer>, StoreError> {
        let connection = self.lock();
        let changed = connection.execute(
            "UPDATE approvals SET state = 'withdrawn', why = ?2 WHERE id = ?1 AND state = 'waiting'",
            params![to_sql(id), why],
        )?;
        if changed > 0 {
            return Ok(None);
        }
        let found = connection
            .query_row(
                &format!("SELECT {PENDING_COLUMNS} FROM approvals WHERE id = ?1"),
                params![to_sql(id)],
                |row| row_to_pending(self.sealer.as_ref(), row),
            )
            .optional()?;
        Ok(match found.map(|p| p.state) {
            Some(PendingState::Answered(answer)) => Some(answer),
            _ => None,
        })
    }

    fn watch(&self) -> Result<Box<dyn QueueWatch>, StoreError> {
        let connection = rusqlite::Connection::open(&self.path)?;
        connection.busy_timeout(Duration::from_secs(5))?;
        let version = connection.pragma_query_value(None, "data_version", |row| row.get(0))?;
        Ok(Box::new(SqliteWatch {
            connection,
            version,
        }))
    }
}
