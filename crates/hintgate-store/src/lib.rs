//! What hintgate remembers across runs: pinned tool definitions and
//! standing ("always") approvals.
//!
//! A pin is the digest of the definition a person approved (an untrusted
//! server) or the gateway first saw (a trusted one), with the definition
//! itself, so a change can be shown as a diff. When a server lists a
//! definition that differs from its pin, the store also keeps the one it
//! last saw, so a person can review and approve it with `hintgate pins`.
//!
//! Pins and approvals are keyed by the server's identity ([`server_key`]):
//! its command line or URL, the capabilities the gateway declared to it, and
//! keyed hashes (never the values) of its environment and headers. Each pin
//! also keeps that identity as people read it ([`Pin::identity`]), and each
//! held change the identity it was seen under ([`Seen::identity`]), so a
//! prompt and `hintgate pins` can name an identity change.
//!
//! A configured server whose identity changes (a new package version, other
//! arguments or environment) gets a new key, but its tools are not new: a
//! gateway calls [`PinStore::rekey`] when it starts the server, which moves
//! the pins of the server's most recent other key to the new one and drops
//! older ones, so every definition is compared with the last pin of the same
//! configured server. Standing approvals are not moved: one was given for
//! one identity, and a configured name does not make two identities the same
//! server (two hosts may each have a `filesystem` with other roots, and a new
//! identity may reach more than the old one), so the new identity's tools
//! are approved anew. [`PinStore::pins_of`] and
//! [`PinStore::approvals_of`] then read one key's pins and standing
//! approvals in bulk, for a gateway that keeps them in memory; a change to
//! standing approvals wakes every [`QueueWatch`] of the store, so such a
//! gateway knows when to read them again.
//!
//! [`PinStore`] states the contract; [`MemoryStore`], [`SqliteStore`] and
//! [`PgStore`] implement it and pass one contract suite (`tests/contract.rs`).
//!
//! [`AuditLog`] is the audit log, a chain keyed with the [`AuditKey`]: one
//! record per tool call that reached the gateway, written before the call is
//! sent, and the outcome of each call that was sent on, in a record of its
//! own or shared with the other outcomes of the same turn of the gateway
//! ([`EntryKind::Outcomes`]; [`Entry::expand`] gives one outcome per call). A
//! record's body arrives as canonical JSON text ([`NewEntry`]), which the log
//! chains and stores as given, so it is serialised once. The key lives
//! outside the store (a file readable only by its user); after each commit
//! the log's head is written to a file outside the database too
//! ([`HeadPlace`]), and [`AuditLog::verify`] names every record edited,
//! inserted, deleted, moved or cut off the end ([`Problem`]). The key also
//! gives subkeys for other keyed digests ([`AuditKey::redaction_key`],
//! [`AuditKey::subkey`]); [`AuditLog::redaction_key`] hands the gateway the
//! one for redacted values.
//!
//! Every grant and revocation of a standing approval is a record of the
//! log too ([`EntryKind::Grant`], [`EntryKind::Revoke`]), and an approval
//! approves only while the log holds its grant, revoked by nothing since
//! ([`Approval::approves`], [`Standing`]); a store that finds its head
//! disagreeing with the log when it opens (an older copy put back) appends
//! nothing, and a gateway's does not open, until
//! [`AuditLog::accept_rollback`] records it ([`Rollback`]).
//!
//! [`ApprovalQueue`] holds calls that wait for a person on a host that cannot
//! ask one; `hintgate approvals` answers them, from any process that opens
//! the same store.
//!
//! [`PgStore`] keeps all of it in PostgreSQL, shared by several gateways.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use hintgate_policy::config::{ServerConfig, Transport};
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The schema version this build reads and writes.
pub const SCHEMA_VERSION: i64 = 12;

/// The most page cache, in KiB, a SQLite store's connection keeps (SQLite's
/// `cache_size`; its default is 2,000 KiB).
const PAGE_CACHE_KIB: i64 = 512;

/// The SQLite schema's steps, each to the version it names: run in order,
/// each in a transaction of its own that holds the write lock and reads the
/// version again, so two processes that open an old file at once run each
/// step once (`ALTER TABLE` has no `IF NOT EXISTS`).
const SQLITE_MIGRATIONS: [(i64, &str); 12] = [
    (
        1,
        "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value BLOB NOT NULL);
         CREATE TABLE IF NOT EXISTS pins (
             server_key TEXT NOT NULL, tool TEXT NOT NULL, server TEXT NOT NULL,
             digest TEXT NOT NULL, definition TEXT NOT NULL, pinned_at INTEGER NOT NULL,
             seen_digest TEXT, seen_definition TEXT,
             PRIMARY KEY (server_key, tool));
         CREATE TABLE IF NOT EXISTS always (
             server_key TEXT NOT NULL, tool TEXT NOT NULL, digest TEXT NOT NULL,
             PRIMARY KEY (server_key, tool));",
    ),
    (
        2,
        "CREATE TABLE IF NOT EXISTS audit (
             seq INTEGER PRIMARY KEY, at INTEGER NOT NULL, kind TEXT NOT NULL,
             call_seq INTEGER, body TEXT NOT NULL, prev TEXT NOT NULL, hash TEXT NOT NULL);",
    ),
    (
        3,
        "CREATE TABLE IF NOT EXISTS approvals (
             id INTEGER PRIMARY KEY AUTOINCREMENT, at INTEGER NOT NULL,
             expires_at INTEGER NOT NULL, session TEXT NOT NULL, server TEXT NOT NULL,
             server_key TEXT NOT NULL, tool TEXT NOT NULL, digest TEXT NOT NULL,
             prompt TEXT NOT NULL, offer TEXT NOT NULL, state TEXT NOT NULL,
             approve INTEGER, remember TEXT, answered_by TEXT, why TEXT);
         CREATE INDEX IF NOT EXISTS approvals_waiting ON approvals (state, expires_at);",
    ),
    (
        4,
        "ALTER TABLE pins ADD COLUMN identity TEXT NOT NULL DEFAULT '';
         ALTER TABLE pins ADD COLUMN seen_identity TEXT;
         CREATE INDEX IF NOT EXISTS pins_by_server ON pins (server);",
    ),
    // Seals on the rows decisions trust (see `rows`), and the prompt's
    // content as JSON for the web console. Rows from before have no seal,
    // and so are broken: a hintgate that sealed them now could not tell
    // them from rows someone without the key put there.
    (
        5,
        "ALTER TABLE pins ADD COLUMN tag TEXT;
         ALTER TABLE always ADD COLUMN tag TEXT;
         ALTER TABLE approvals ADD COLUMN tag TEXT;
         ALTER TABLE approvals ADD COLUMN answer_tag TEXT;
         ALTER TABLE approvals ADD COLUMN details TEXT;",
    ),
    (
        6,
        "CREATE TABLE IF NOT EXISTS tokens (
             name TEXT PRIMARY KEY, hash TEXT NOT NULL UNIQUE, scope TEXT NOT NULL,
             created_at INTEGER NOT NULL, tag TEXT);",
    ),
    // Standing approvals name the audit record that granted them, and the
    // approval index lists every grant, revocation and accepted rollback by
    // sequence number (see `standing`). Approvals from before have no grant
    // record: they are kept, and approve nothing (a person gives them
    // again).
    (
        7,
        "ALTER TABLE always ADD COLUMN grant_seq INTEGER;
         CREATE TABLE IF NOT EXISTS approval_log (
             seq INTEGER PRIMARY KEY, kind TEXT NOT NULL,
             server_key TEXT NOT NULL, tool TEXT NOT NULL);
         CREATE INDEX IF NOT EXISTS approval_log_by_tool
             ON approval_log (server_key, tool, seq);",
    ),
    // The records of writes sent with idempotency keys (see `idempotency`).
    (
        8,
        "CREATE TABLE IF NOT EXISTS idempotency (
             scope TEXT PRIMARY KEY, state TEXT NOT NULL, owner TEXT NOT NULL,
             principal TEXT NOT NULL, arguments TEXT NOT NULL,
             claimed_at INTEGER NOT NULL, done_at INTEGER, result BLOB, tag TEXT);
         CREATE INDEX IF NOT EXISTS idempotency_by_age ON idempotency (claimed_at);",
    ),
    // The OAuth grants hintgate holds for remote servers (see `upstream`).
    (
        9,
        "CREATE TABLE IF NOT EXISTS upstream_grants (
             server TEXT NOT NULL, principal TEXT NOT NULL, scope TEXT NOT NULL,
             expires_at INTEGER, updated_at INTEGER NOT NULL, secret BLOB NOT NULL, tag TEXT,
             PRIMARY KEY (server, principal));",
    ),
    // The index of the gateways' journals (see `journal`): each run's last
    // indexed record, and each indexed record's place in its run.
    (
        10,
        "CREATE TABLE IF NOT EXISTS journal_runs (
             run TEXT PRIMARY KEY, n INTEGER NOT NULL, segment INTEGER NOT NULL,
             offset INTEGER NOT NULL, link BLOB NOT NULL, closed INTEGER NOT NULL);
         CREATE TABLE IF NOT EXISTS journal_index (
             run TEXT NOT NULL, n INTEGER NOT NULL, seq INTEGER NOT NULL,
             segment INTEGER NOT NULL, offset INTEGER NOT NULL,
             PRIMARY KEY (run, n)) WITHOUT ROWID;",
    ),
    // The arguments a person edited a queued call to (see `queue`).
    (11, "ALTER TABLE approvals ADD COLUMN arguments TEXT;"),
    // The journals' index by spans (see `journal_index`): one row per
    // indexed batch (records `n` to `n + count - 1` of a run are the log's
    // `seq` to `seq + count - 1`), not one per record. Each record indexed
    // before becomes a span of one.
    (
        12,
        "CREATE TABLE journal_spans (
             run TEXT NOT NULL, n INTEGER NOT NULL, seq INTEGER NOT NULL,
             count INTEGER NOT NULL,
             PRIMARY KEY (run, n)) WITHOUT ROWID;
         INSERT INTO journal_spans (run, n, seq, count)
             SELECT run, n, seq, 1 FROM journal_index;
         DROP TABLE journal_index;
         ALTER TABLE journal_spans RENAME TO journal_index;",
    ),
];

/// Runs one step of [`SQLITE_MIGRATIONS`], unless another process ran it
/// since the version was read.
fn migrate_sqlite(connection: &mut Connection, version: i64, sql: &str) -> Result<(), StoreError> {
    let transaction =
        connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let current: i64 = transaction.pragma_query_value(None, "user_version", |row| row.get(0))?;
    if current < version {
        transaction.execute_batch(sql)?;
        transaction.pragma_update(None, "user_version", version)?;
    }
    transaction.commit()?;
    Ok(())
}

mod audit;
mod body;
pub mod edit;
mod entry;
mod head;
mod idempotency;
pub mod journal;
mod journal_index;
mod key;
mod postgres;
mod queue;
pub mod record;
mod rollback;
mod rows;
mod standing;
pub mod time;
mod tokens;
mod upstream;
mod witness;

pub use audit::{
    AppendDone, AuditLog, AuditSetup, Checkpointed, HeadPlace, HeadState, KeySource, Problem, Span,
    Verification, WitnessState,
};
pub use body::Malformed;
pub use entry::{Entry, EntryKind, NewEntry};
pub use idempotency::{
    IdempotencyStore, KeyClaim, KeyEnd, KeyRecord, KeyState, MAX_RESULT_BYTES, key_scope,
};
pub use key::{AuditKey, KeyError};
pub use postgres::{PG_SCHEMA_VERSION, PgStore};
pub use queue::{
    Answer, Answered, ApprovalQueue, NewPending, Pending, PendingState, QueueWatch, Remember,
};
pub use record::{NotARecord, Record};
pub use rollback::{AcceptedRollback, HeadFound, Rollback};
pub use rows::Seal;
pub use standing::{IndexRow, Standing};
pub use tokens::{TOKEN_PREFIX, TokenRow, TokenStore, new_token, token_hash};
pub use upstream::{
    GrantInfo, GrantSecret, KeptGrant, MAX_GRANT_SECRET_BYTES, NewGrant, UpstreamTokenStore,
};
pub use witness::{
    EVERY as WITNESS_EVERY, EVERY_RECORDS as WITNESS_EVERY_RECORDS, WitnessError, WitnessKey,
    WitnessSettings, setup as setup_witness, state_path as witness_state_path,
};

/// Everything the gateway keeps: pins, standing approvals, the audit log,
/// the approval queue, the tokens of HTTP hosts, the records of writes
/// sent with idempotency keys and the OAuth grants for remote servers.
pub trait Store:
    PinStore + AuditLog + ApprovalQueue + TokenStore + IdempotencyStore + UpstreamTokenStore
{
}

impl<T: PinStore + AuditLog + ApprovalQueue + TokenStore + IdempotencyStore + UpstreamTokenStore>
    Store for T
{
}

/// One pinned tool definition.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pin {
    /// The server's identity key.
    pub server_key: String,
    /// The server's configured name when it was pinned (for people).
    pub server: String,
    /// The server's identity as people read it when the pin was taken: its
    /// command line and what that resolved to (executable, package version),
    /// or its URL; never a secret. Empty for a pin written before identities
    /// were kept.
    pub identity: String,
    /// The server's own tool name.
    pub tool: String,
    /// The pin digest (`sha256:...`).
    pub digest: String,
    /// The definition as pinned.
    pub definition: Value,
    /// When, in seconds since the Unix epoch (given by the caller).
    pub pinned_at: i64,
    /// A different definition seen since, held for approval.
    pub seen: Option<Seen>,
    /// Whether the pin's seal verified when the store read it (see
    /// [`Seal`]); a gateway gives a pin effect only when it is
    /// [`Seal::Valid`]. Ignored when a pin is written: the store seals what
    /// it writes.
    pub seal: Seal,
}

/// The digest a [`Seen`] carries when the tool is no longer listed.
pub const REMOVED: &str = "removed";

/// The tool name under which a server's `instructions` are pinned (not a
/// valid tool name, so it cannot meet a real tool).
pub const INSTRUCTIONS: &str = "#instructions";

/// A definition seen that differs from the pin (or, with the digest
/// [`REMOVED`] and a null definition, the tool's absence from the list).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Seen {
    /// Its pin digest.
    pub digest: String,
    /// The definition.
    pub definition: Value,
    /// The server's identity (as [`Pin::identity`] reads) under which this
    /// definition was seen; when it differs from the pin's, the change came
    /// with a new identity. Empty when not known.
    pub identity: String,
}

impl Seen {
    /// Whether [`Seen::digest`] is the pin digest of [`Seen::definition`]
    /// as a definition of `tool` (a tool's, or the server's instructions
    /// for [`INSTRUCTIONS`]). A held change is not sealed: one whose digest
    /// and definition disagree was written by someone without hintgate, and
    /// approving it would pin a digest the person was never shown.
    #[must_use]
    pub fn is_genuine(&self, tool: &str) -> bool {
        let digest = if tool == INSTRUCTIONS {
            hintgate_policy::pin::PinDigest::of_json(&self.definition)
        } else {
            match hintgate_policy::tool::Tool::from_value(self.definition.clone()) {
                Ok(parsed) => hintgate_policy::pin::PinDigest::of(&parsed),
                Err(_) => return false,
            }
        };
        digest.to_string() == self.digest
    }
}

/// A standing ("always") approval of one tool, for one definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Approval {
    /// The server's own tool name.
    pub tool: String,
    /// The pin digest of the definition it stands for.
    pub digest: String,
    /// Whether its seal verified when the store read it (the seal binds
    /// its key, tool, digest and [`Approval::granted`]).
    pub seal: Seal,
    /// The sequence number of the audit record that granted it, as its
    /// row names it; `None` for an approval given before grants were
    /// written to the log.
    pub granted: Option<u64>,
    /// What the audit log says of it, checked when the store read it.
    pub standing: Standing,
}

impl Approval {
    /// Whether it approves anything: its seal verifies and the log holds
    /// its grant, revoked by nothing since ([`Standing::InForce`]).
    #[must_use]
    pub fn approves(&self) -> bool {
        self.seal == Seal::Valid && self.standing == Standing::InForce
    }
}

/// What [`PinStore::rekey`] moved to a server's new identity key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rekeyed {
    /// The key the pins were moved from.
    pub from_key: String,
    /// The identity (as [`Pin::identity`] reads) of the most recently pinned
    /// of them: what the server was before.
    pub from_identity: String,
    /// How many pins moved.
    pub pins: usize,
}

/// Why the store failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database said no.
    #[error("store: {0}")]
    Database(#[from] rusqlite::Error),
    /// PostgreSQL said no (or could not be reached).
    #[error("store: {0}")]
    Postgres(#[from] ::postgres::Error),
    /// The store's address is not one hintgate can use.
    #[error("store: {0}")]
    Address(String),
    /// The database was written by a newer hintgate.
    #[error(
        "the store at `{path}` has schema version {found}, newer than this hintgate's {known}; use a newer hintgate"
    )]
    NewerSchema {
        /// Where the store is.
        path: String,
        /// The version found.
        found: i64,
        /// The newest version this build knows.
        known: i64,
    },
    /// A stored definition is not JSON.
    #[error("store: a stored definition is not JSON: {0}")]
    Corrupt(String),
    /// The operating system gave no randomness for the key salt.
    #[error("store: no randomness for the key salt: {0}")]
    Randomness(String),
    /// The audit key could not be read or made.
    #[error("store: {0}")]
    Key(#[from] KeyError),
    /// The store was opened without the audit key, so it cannot seal the
    /// pins, standing approvals and answers it would write.
    #[error(
        "store: pins, standing approvals and answers are sealed with the audit key, and this store was opened without it (name its file with `--audit-key FILE`, `HINTGATE_AUDIT_KEY_FILE` or `[audit] key_file`; a gateway makes it on its first run)"
    )]
    Unsealed,
    /// The audit log has no key, so nothing can be appended to it.
    #[error("store: the audit log has no key, and its records are never chained without one")]
    NoKey,
    /// The log's last record was chained under another key.
    #[error(
        "store: the audit log's last record was chained under the key `{found}`, not this key `{ours}`: every gateway on one log must use the same key file"
    )]
    OtherKey {
        /// The id of the key the last record names.
        found: String,
        /// The id of the key at hand.
        ours: String,
    },
    /// The witness state could not be read.
    #[error("store: the audit witness: {0}")]
    Witness(#[from] WitnessError),
    /// A token of that name exists already.
    #[error("store: a token named `{0}` exists already (revoke it first, or pick another name)")]
    TokenExists(String),
    /// The log is not the one its head was written for (an older copy of
    /// the database put back, its head removed or damaged, the log deleted
    /// with its head): a gateway does not open it, and no store appends to
    /// it (the head the append writes would hide it), until a person
    /// accepts it with [`AuditLog::accept_rollback`].
    #[error(
        "store: {0}; run `hintgate log verify` to see what the log lacks, and if you mean to go on with the log as it is, `hintgate log accept-rollback` records that in the log (standing approvals granted before then approve nothing)"
    )]
    RolledBack(Box<Rollback>),
    /// The key file is gone, but the log is chained under a key.
    #[error(
        "store: the audit key `{path}` is missing, but the log is chained under the key `{key_id}`: restore that file (a new key cannot continue the chain)"
    )]
    KeyMissing {
        /// Where the key file should be.
        path: String,
        /// The id of the key the log's last record names.
        key_id: String,
    },
}

/// Pinned definitions and standing approvals.
///
/// Contract:
/// - every method that writes is durable when it returns: a crash of the
///   process after the return (even `kill -9`) loses nothing. (SQLite runs
///   in WAL mode with `synchronous = NORMAL`: a power loss can lose the
///   writes since the last checkpoint, a process crash none.)
/// - `put_pin` replaces the pin of the same server key and tool, and clears
///   what was `seen`;
/// - `see` records a definition that differs from the pin, and nothing when
///   there is no pin or it equals the pin;
/// - `revoke` removes the pin and every standing approval of that tool,
///   and appends a revocation record ([`EntryKind::Revoke`]) to the audit
///   log in the same transaction when it removed a standing approval or the
///   log's last record of the tool is a grant (it then needs the key:
///   [`StoreError::Unsealed`] otherwise, and nothing is removed);
/// - `approve_always` appends a grant record ([`EntryKind::Grant`]) to the
///   audit log and writes the approval's row in one transaction, the row
///   sealed with the record's sequence number;
/// - an approval stands only for the digest it was given for, and
///   approves only when [`Approval::approves`]: its seal verifies and the
///   log holds its grant, with no later record that grants the tool anew,
///   revokes it or accepts a rolled-back log (a row put back from an older
///   copy of the database, or copied in, approves nothing);
/// - every read fills [`Pin::identity`] and [`Seen::identity`] with what
///   `put_pin` and `see` were given;
/// - `pins_of` returns every pin of one key (tools and [`INSTRUCTIONS`]),
///   ordered by tool, read at one point in time (one query);
/// - `approvals_of` returns the standing approvals of one key, ordered by
///   tool, each with its seal and [`Standing`] checked (one query, which
///   reads the approval index and each grant record, never the whole log);
/// - `rekey` is one transaction, and two rekeys never interleave, even from
///   other processes or other gateways on the same store: when any pin
///   exists under `to_key` it changes nothing and returns `None`; otherwise,
///   of the other keys with pins of the configured server `server`, it takes
///   the one whose newest `pinned_at` is greatest (on a tie, the smallest
///   key), moves those pins (with what was `seen`) to `to_key`, deletes the
///   pins of that server under every other key (they are stale, so no tool
///   is listed twice) with the standing approvals of each key left without a
///   pin (each with a revocation record, as `revoke` writes, whose reason is
///   `identity-changed`), and returns what it moved; `None` when the server
///   has no pins. Standing approvals are never moved or copied to `to_key`: an approval
///   answers only for the identity it was given for. Pins of other
///   configured servers stay where they are, even under the same key (two
///   configured servers with one identity share a key), and so do the
///   standing approvals of a key that keeps pins;
/// - a change to standing approvals (`approve_always`, `revoke`, a `rekey`
///   that moved something) wakes every [`QueueWatch`] of the store, in this
///   process or another, so a gateway that keeps approvals in memory knows
///   when to read them again.
pub trait PinStore: Send + Sync + std::fmt::Debug {
    /// The pin of a tool, if any.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be read.
    fn pin(&self, server_key: &str, tool: &str) -> Result<Option<Pin>, StoreError>;

    /// Pins a definition (replacing any pin of the same tool).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be written.
    fn put_pin(&self, pin: &Pin) -> Result<(), StoreError>;

    /// Pins several definitions at once: all of them or none, durable when
    /// it returns (one commit, where the store can).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be written.
    fn put_pins(&self, pins: &[Pin]) -> Result<(), StoreError> {
        pins.iter().try_for_each(|pin| self.put_pin(pin))
    }

    /// Records a definition that differs from the tool's pin.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be written.
    fn see(&self, server_key: &str, tool: &str, seen: &Seen) -> Result<(), StoreError>;

    /// Forgets what was seen of a tool (its listing matches the pin again).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be written.
    fn clear_seen(&self, server_key: &str, tool: &str) -> Result<(), StoreError>;

    /// Every pin, ordered by server name and tool.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be read.
    fn pins(&self) -> Result<Vec<Pin>, StoreError>;

    /// Every pin of one server key (its tools and [`INSTRUCTIONS`]), ordered
    /// by tool.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be read.
    fn pins_of(&self, server_key: &str) -> Result<Vec<Pin>, StoreError>;

    /// The standing approvals of one server key, ordered by tool.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be read.
    fn approvals_of(&self, server_key: &str) -> Result<Vec<Approval>, StoreError>;

    /// Moves the pins of the configured server `server` from its most
    /// recent other identity key to `to_key`, unless `to_key` has pins
    /// already; standing approvals are not moved. See the trait's contract.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be read or written (then
    /// nothing changed).
    fn rekey(&self, server: &str, to_key: &str) -> Result<Option<Rekeyed>, StoreError>;

    /// Removes a tool's pin and its standing approvals; whether it had a pin.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be written.
    fn revoke(&self, server_key: &str, tool: &str) -> Result<bool, StoreError>;

    /// Approves a tool always, for this definition, with its grant record
    /// in the audit log.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be written, has no key, or
    /// its log was rolled back ([`StoreError::RolledBack`]).
    fn approve_always(&self, server_key: &str, tool: &str, digest: &str) -> Result<(), StoreError>;

    /// Whether a tool is approved always for this definition: a standing
    /// approval of this digest that [`Approval::approves`].
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be read.
    fn approved_always(
        &self,
        server_key: &str,
        tool: &str,
        digest: &str,
    ) -> Result<bool, StoreError>;

    /// The salt for keyed hashes of secrets in server identities.
    fn salt(&self) -> &[u8];
}

/// The identity key of a server: SHA-256 over its command line or URL, what
/// the command line resolved to on this machine (`resolved`: the executable
/// and the package version; `null` when not known), the capabilities the
/// gateway declared to it, and keyed hashes of the values of its environment
/// and headers (so a secret never reaches the store, but a changed secret is
/// a different identity).
pub fn server_key(
    config: &ServerConfig,
    resolved: &Value,
    capabilities: &Value,
    salt: &[u8],
) -> String {
    let keyed = |values: &BTreeMap<String, String>| -> BTreeMap<String, String> {
        values
            .iter()
            .map(|(name, value)| {
                let mut hasher = Sha256::new();
                hasher.update(salt);
                hasher.update(value.as_bytes());
                (name.clone(), hex::encode(hasher.finalize()))
            })
            .collect()
    };
    let mut identity = match &config.transport {
        Transport::Stdio { command, args, env } => serde_json::json!({
            "command": command, "args": args, "env": keyed(env), "capabilities": capabilities,
        }),
        Transport::Http { url, headers } => serde_json::json!({
            "url": url, "headers": keyed(headers), "capabilities": capabilities,
        }),
    };
    if !resolved.is_null()
        && let Some(object) = identity.as_object_mut()
    {
        object.insert("resolved".to_owned(), resolved.clone());
    }
    let canonical = hintgate_policy::pin::canonical_json(&identity);
    hex::encode(Sha256::digest(canonical.as_bytes()))
}

/// A sequence number or id as SQL keeps it (`i64`), saturating.
pub(crate) fn to_sql(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A sequence number or id read from SQL; a negative one (never written)
/// reads as 0.
pub(crate) fn from_sql(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

// === MemoryStore ===

/// A store that lives as long as the process (tests, the demo). Its audit
/// log is chained under a key of its own, drawn when it is made, and keeps
/// no head.
#[derive(Debug)]
pub struct MemoryStore {
    state: Mutex<MemoryState>,
    bell: std::sync::Arc<queue::Bell>,
    key: AuditKey,
}

#[derive(Debug, Default)]
struct MemoryState {
    pins: BTreeMap<(String, String), Pin>,
    /// Standing approvals: digest and the sequence number of the grant.
    always: BTreeMap<(String, String), (String, u64)>,
    audit: Vec<audit::MemoryRecord>,
    queue: Vec<Pending>,
    /// Tokens by name: hash, scope, when made.
    tokens: BTreeMap<String, (String, String, i64)>,
    /// Records of keyed writes, by scope.
    keys: BTreeMap<String, idempotency::KeyRow>,
    /// Upstream OAuth grants, by server and principal.
    grants: BTreeMap<(String, String), upstream::GrantRow>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        // A log that lives and dies with the process is only ever verified
        // in it; should the system give no randomness, a fixed key is no
        // worse for it than none.
        Self::with_key(AuditKey::generate().unwrap_or_else(|_| AuditKey::from_secret([0; 32])))
    }
}

impl MemoryStore {
    /// A memory store whose audit log is chained under `key`.
    #[must_use]
    pub fn with_key(key: AuditKey) -> Self {
        Self {
            state: Mutex::default(),
            bell: std::sync::Arc::default(),
            key,
        }
    }
}

impl PinStore for MemoryStore {
    fn pin(&self, server_key: &str, tool: &str) -> Result<Option<Pin>, StoreError> {
        Ok(self
            .lock()
            .pins
            .get(&(server_key.to_owned(), tool.to_owned()))
            .cloned())
    }

    fn put_pin(&self, pin: &Pin) -> Result<(), StoreError> {
        let mut pin = pin.clone();
        pin.seen = None;
        // Nothing but this process reaches a memory store's rows.
        pin.seal = Seal::Valid;
        self.lock()
            .pins
            .insert((pin.server_key.clone(), pin.tool.clone()), pin);
        Ok(())
    }

    fn see(&self, server_key: &str, tool: &str, seen: &Seen) -> Result<(), StoreError> {
        if let Some(pin) = self
            .lock()
            .pins
            .get_mut(&(server_key.to_owned(), tool.to_owned()))
            && pin.digest != seen.digest
        {
            pin.seen = Some(seen.clone());
        }
        Ok(())
    }

    fn clear_seen(&self, server_key: &str, tool: &str) -> Result<(), StoreError> {
        if let Some(pin) = self
            .lock()
            .pins
            .get_mut(&(server_key.to_owned(), tool.to_owned()))
        {
            pin.seen = None;
        }
        Ok(())
    }

    fn pins(&self) -> Result<Vec<Pin>, StoreError> {
        let mut pins: Vec<Pin> = self.lock().pins.values().cloned().collect();
        pins.sort_by(|a, b| (&a.server, &a.tool).cmp(&(&b.server, &b.tool)));
        Ok(pins)
    }

    fn pins_of(&self, server_key: &str) -> Result<Vec<Pin>, StoreError> {
        // The map is ordered by (key, tool), so one key's pins come by tool.
        Ok(self
            .lock()
            .pins
            .values()
            .filter(|pin| pin.server_key == server_key)
            .cloned()
            .collect())
    }

    fn approvals_of(&self, server_key: &str) -> Result<Vec<Approval>, StoreError> {
        // Nothing but this process reaches a memory store: every row is
        // the one it wrote, with its grant in its log.
        Ok(self
            .lock()
            .always
            .iter()
            .filter(|((key, _), _)| key == server_key)
            .map(|((_, tool), (digest, granted))| Approval {
                tool: tool.clone(),
                digest: digest.clone(),
                seal: Seal::Valid,
                granted: Some(*granted),
                standing: Standing::InForce,
            })
            .collect())
    }

    fn rekey(&self, server: &str, to_key: &str) -> Result<Option<Rekeyed>, StoreError> {
        let rekeyed = {
            let mut state = self.lock();
            memory_rekey(&mut state, &self.key, server, to_key)?
        };
        if rekeyed.is_some() {
            self.bell.ring();
        }
        Ok(rekeyed)
    }

    fn revoke(&self, server_key: &str, tool: &str) -> Result<bool, StoreError> {
        let key = (server_key.to_owned(), tool.to_owned());
        let removed = {
            let mut state = self.lock();
            let pin = state.pins.remove(&key);
            if state.always.remove(&key).is_some() {
                let server = pin.as_ref().map_or("", |pin| pin.server.as_str());
                let revoked =
                    standing::revocation(unix_now(), server, server_key, tool, standing::REVOKED);
                audit::memory_append(&mut state.audit, &self.key, &[revoked])?;
            }
            pin.is_some()
        };
        self.bell.ring();
        Ok(removed)
    }

    fn approve_always(&self, server_key: &str, tool: &str, digest: &str) -> Result<(), StoreError> {
        {
            let mut state = self.lock();
            let key = (server_key.to_owned(), tool.to_owned());
            let server = state
                .pins
                .get(&key)
                .map_or_else(String::new, |pin| pin.server.clone());
            let grant = standing::grant(unix_now(), &server, server_key, tool, digest);
            let seqs = audit::memory_append(&mut state.audit, &self.key, &[grant])?;
            let granted = seqs.first().copied().unwrap_or(0);
            state.always.insert(key, (digest.to_owned(), granted));
        }
        self.bell.ring();
        Ok(())
    }

    fn approved_always(
        &self,
        server_key: &str,
        tool: &str,
        digest: &str,
    ) -> Result<bool, StoreError> {
        Ok(self
            .lock()
            .always
            .get(&(server_key.to_owned(), tool.to_owned()))
            .is_some_and(|(approved, _)| approved == digest))
    }

    fn salt(&self) -> &[u8] {
        b"memory"
    }
}

/// [`PinStore::rekey`] over the memory store's maps, under its lock; the
/// revocations of the standing approvals it drops are chained under `key`.
fn memory_rekey(
    state: &mut MemoryState,
    key: &AuditKey,
    server: &str,
    to_key: &str,
) -> Result<Option<Rekeyed>, StoreError> {
    if state.pins.keys().any(|(key, _)| key == to_key) {
        return Ok(None);
    }
    // The newest pin of each other key with pins of this server.
    let mut newest: BTreeMap<&str, (i64, &Pin)> = BTreeMap::new();
    for pin in state.pins.values().filter(|pin| pin.server == server) {
        let entry = newest
            .entry(pin.server_key.as_str())
            .or_insert((pin.pinned_at, pin));
        // Ties between pins of one key go to the smaller tool, as in SQL.
        if (pin.pinned_at, std::cmp::Reverse(&pin.tool))
            > (entry.0, std::cmp::Reverse(&entry.1.tool))
        {
            *entry = (pin.pinned_at, pin);
        }
    }
    // The greatest newest pin wins; on a tie, the smallest key (the map is
    // ordered by key, and `max_by_key` keeps the last of equal elements).
    let Some((from_key, from_identity)) = newest
        .iter()
        .rev()
        .max_by_key(|(_, (pinned_at, _))| *pinned_at)
        .map(|(key, (_, pin))| ((*key).to_owned(), pin.identity.clone()))
    else {
        return Ok(None);
    };
    let stale: Vec<String> = newest
        .keys()
        .filter(|key| **key != from_key)
        .map(|key| (*key).to_owned())
        .collect();
    let ours: Vec<(String, String)> = state
        .pins
        .iter()
        .filter(|(_, pin)| pin.server == server)
        .map(|(key, _)| key.clone())
        .collect();
    let mut moved = 0;
    for key in ours {
        let Some(mut pin) = state.pins.remove(&key) else {
            continue;
        };
        if pin.server_key == from_key {
            pin.server_key = to_key.to_owned();
            state
                .pins
                .insert((to_key.to_owned(), pin.tool.clone()), pin);
            moved += 1;
        }
    }
    let mut revocations = Vec::new();
    for dropped in std::iter::once(&from_key).chain(&stale) {
        if !state.pins.keys().any(|(pinned, _)| pinned == dropped) {
            state.always.retain(|(approved, tool), _| {
                let keep = approved != dropped;
                if !keep {
                    revocations.push(standing::revocation(
                        unix_now(),
                        server,
                        approved,
                        tool,
                        standing::IDENTITY_CHANGED,
                    ));
                }
                keep
            });
        }
    }
    if !revocations.is_empty() {
        audit::memory_append(&mut state.audit, key, &revocations)?;
    }
    Ok(Some(Rekeyed {
        from_key,
        from_identity,
        pins: moved,
    }))
}

impl MemoryStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryState> {
        // A poisoned lock only means another thread panicked mid-update of
        // plain maps; the data is still consistent enough to read.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

// === SqliteStore ===

/// The default store: one SQLite file (WAL, `synchronous = NORMAL`) in the
/// state directory. A commit is durable against a crash of the process;
/// fsync happens at checkpoints, which keeps a per-call audit record cheap
/// enough to write before every call.
#[derive(Debug)]
pub struct SqliteStore {
    connection: Mutex<Connection>,
    salt: Vec<u8>,
    /// The database file (an approval watch opens its own connection).
    path: std::path::PathBuf,
    /// The audit key and head.
    keying: audit::Keying,
    /// Seals pins, standing approvals and answers (with the audit key).
    sealer: Option<rows::Sealer>,
    /// Where the gateways' journals are ([`SqliteStore::journal_dir`]).
    journal_dir: std::path::PathBuf,
    /// Connections of their own for hosts' token checks
    /// ([`TokenStore::find_token_now`]), one per check at once (opened as
    /// needed, kept for the next): in WAL mode their reads never wait for
    /// the writes of `connection` (the audit indexer's transactions among
    /// them), nor for each other.
    token_readers: Mutex<Vec<Connection>>,
}

impl SqliteStore {
    /// Opens (or creates) the store at `path`, running its migrations, with
    /// its audit key in [`SqliteStore::key_path`] (made on first use) and its
    /// head in [`SqliteStore::head_path`]: what a gateway opens.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the file cannot be opened, was written by a
    /// newer hintgate, or its key cannot be read or made.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        Self::open_with(
            path,
            AuditSetup {
                key: KeySource::File(Self::key_path(path)),
                head: HeadPlace::File(Self::head_path(path)),
                checkpoints: true,
                witness: Default::default(),
            },
        )
    }

    /// The audit key of the store at `path`, by default: `audit.key` in the
    /// database's directory (the state directory).
    #[must_use]
    pub fn key_path(path: &Path) -> std::path::PathBuf {
        path.with_file_name(AuditKey::FILE_NAME)
    }

    /// The head file of the store at `path`, by default: beside the
    /// database, its name and `.audit-head` (`state.db.audit-head`).
    #[must_use]
    pub fn head_path(path: &Path) -> std::path::PathBuf {
        let mut name = path.file_name().unwrap_or_default().to_owned();
        name.push(".audit-head");
        path.with_file_name(name)
    }

    /// The directory of the gateways' journals of the store at `path`
    /// (see [`journal`]): `journal` beside the database for the default
    /// `state.db`, else the database's name and `.journal`.
    #[must_use]
    pub fn journal_dir(path: &Path) -> std::path::PathBuf {
        match path.file_name().and_then(|name| name.to_str()) {
            Some("state.db") | None => path.with_file_name("journal"),
            Some(name) => path.with_file_name(format!("{name}.journal")),
        }
    }

    /// Opens (or creates) the store at `path`, running its migrations, with
    /// the audit key and head `audit` names.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the file cannot be opened, was written by a
    /// newer hintgate, or its key cannot be read or made.
    pub fn open_with(path: &Path, audit: AuditSetup) -> Result<Self, StoreError> {
        let mut connection = Connection::open(path)?;
        connection.pragma_update(None, "journal_mode", "WAL")?;
        connection.pragma_update(None, "synchronous", "NORMAL")?;
        connection.busy_timeout(std::time::Duration::from_secs(5))?;
        // SQLite keeps up to 2 MiB of pages per connection by default, and
        // a gateway's indexer, appending to the log, fills it within a
        // minute and keeps it: half of a gateway's heap at its peak. The
        // log's tables grow only at their end and the others are small,
        // so a smaller cache costs no reads that matter.
        connection.pragma_update(None, "cache_size", -PAGE_CACHE_KIB)?;
        let found: i64 = connection.pragma_query_value(None, "user_version", |row| row.get(0))?;
        if found > SCHEMA_VERSION {
            return Err(StoreError::NewerSchema {
                path: path.display().to_string(),
                found,
                known: SCHEMA_VERSION,
            });
        }
        for (version, sql) in SQLITE_MIGRATIONS {
            if found < version {
                migrate_sqlite(&mut connection, version, sql)?;
            }
        }
        let salt: Option<Vec<u8>> = connection
            .query_row("SELECT value FROM meta WHERE key = 'salt'", [], |row| {
                row.get(0)
            })
            .optional()?;
        let salt = match salt {
            Some(salt) => salt,
            None => {
                let mut salt = vec![0u8; 32];
                getrandom::fill(&mut salt)
                    .map_err(|err| StoreError::Randomness(err.to_string()))?;
                connection.execute(
                    "INSERT INTO meta (key, value) VALUES ('salt', ?1)",
                    params![salt],
                )?;
                salt
            }
        };
        let tail = audit::sqlite_tail(&connection)?;
        let gateway = audit.checkpoints;
        let keying = audit::Keying::resolve(
            audit,
            tail.as_ref().map(|(_, link)| link.as_str()),
            String::new,
        )?;
        // Before anything is appended (the head an append writes would
        // hide what this finds).
        let found = keying.check_head(true, &mut audit::SqliteEnd(&connection))?;
        keying.opened(found, gateway)?;
        let sealer = keying.key.as_ref().map(rows::Sealer::of);
        Ok(Self {
            sealer,
            connection: Mutex::new(connection),
            salt,
            path: path.to_path_buf(),
            keying,
            journal_dir: Self::journal_dir(path),
            token_readers: Mutex::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.connection
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The read of one key's standing approvals, in SQLite and PostgreSQL
/// alike (`{s}` the schema's prefix, `{key}` the parameter): each row with
/// the last index row of its tool, the last accepted rollback and the
/// record its row names as its grant, so that each is checked against the
/// log in one query (see `standing`).
pub(crate) const ALWAYS_READ: &str = "SELECT a.tool, a.digest, a.tag, a.grant_seq,
     (SELECT max(l.seq) FROM {s}approval_log l
          WHERE l.server_key = a.server_key AND l.tool = a.tool),
     (SELECT max(r.seq) FROM {s}approval_log r
          WHERE r.server_key = '' AND r.tool = '' AND r.kind = 'rollback'),
     g.seq, g.at, g.kind, g.call_seq, g.body, g.prev, g.hash
 FROM {s}always a LEFT JOIN {s}audit g ON g.seq = a.grant_seq
 WHERE a.server_key = {key}";

/// A SQLite row of [`ALWAYS_READ`] as a standing approval of `server_key`,
/// read as well as it can be (SQLite's columns take any type; a value of
/// another type never makes an approval count).
fn sqlite_always(
    server_key: &str,
    row: &rusqlite::Row<'_>,
) -> rusqlite::Result<standing::AlwaysRead> {
    use audit::{lenient_integer, lenient_text};
    let record = match row.get_ref(6)? {
        rusqlite::types::ValueRef::Integer(seq) => Some(Entry::from_stored(
            from_sql(seq),
            lenient_integer(row.get_ref(7)?).unwrap_or(0),
            lenient_text(row.get_ref(8)?),
            lenient_integer(row.get_ref(9)?).map(from_sql),
            lenient_text(row.get_ref(10)?),
            lenient_text(row.get_ref(11)?),
            lenient_text(row.get_ref(12)?),
        )),
        _ => None,
    };
    Ok(standing::AlwaysRead {
        server_key: server_key.to_owned(),
        tool: row.get(0)?,
        digest: row.get(1)?,
        tag: row.get(2)?,
        grant_seq: lenient_integer(row.get_ref(3)?),
        latest: lenient_integer(row.get_ref(4)?),
        rollback: lenient_integer(row.get_ref(5)?),
        record,
    })
}

/// The configured server name of a tool's pin (empty without one), which
/// the records of its standing approvals name for people.
fn pinned_server(
    connection: &Connection,
    server_key: &str,
    tool: &str,
) -> Result<String, StoreError> {
    Ok(connection
        .query_row(
            "SELECT server FROM pins WHERE server_key = ?1 AND tool = ?2",
            params![server_key, tool],
            |row| Ok(audit::lenient_text(row.get_ref(0)?)),
        )
        .optional()?
        .unwrap_or_default())
}

/// Whether the approval index's last row of a tool is a grant: a standing
/// approval is in force by the log, whatever its row (deleted or not) says.
fn granted_last(connection: &Connection, server_key: &str, tool: &str) -> Result<bool, StoreError> {
    let kind: Option<String> = connection
        .query_row(
            "SELECT kind FROM approval_log WHERE server_key = ?1 AND tool = ?2
             ORDER BY seq DESC LIMIT 1",
            params![server_key, tool],
            |row| Ok(audit::lenient_text(row.get_ref(0)?)),
        )
        .optional()?;
    Ok(kind.as_deref() == Some("grant"))
}

/// The tools of `server_key` with a standing approval by its row or by the
/// log (its last index row a grant), ordered.
fn granted_tools(
    connection: &Connection,
    server_key: &str,
) -> Result<std::collections::BTreeSet<String>, StoreError> {
    let mut statement = connection.prepare(
        "SELECT tool FROM always WHERE server_key = ?1
         UNION
         SELECT l.tool FROM approval_log l WHERE l.server_key = ?1 AND l.kind = 'grant'
             AND l.seq = (SELECT max(m.seq) FROM approval_log m
                          WHERE m.server_key = l.server_key AND m.tool = l.tool)",
    )?;
    let tools = statement
        .query_map(params![server_key], |row| {
            Ok(audit::lenient_text(row.get_ref(0)?))
        })?
        .collect::<Result<_, _>>()?;
    Ok(tools)
}

fn parse_json(text: &str) -> Result<Value, StoreError> {
    serde_json::from_str(text).map_err(|err| StoreError::Corrupt(err.to_string()))
}

/// The columns every pin query selects, in the order [`PinColumns`] reads
/// them (SQLite and PostgreSQL name them alike).
pub(crate) const PIN_COLUMNS: &str = "server_key, tool, server, digest, definition, pinned_at, seen_digest, seen_definition, identity, seen_identity, tag";

/// A pin's row as read from SQL ([`PIN_COLUMNS`]), its definitions still
/// text: each store reads the columns, and [`PinColumns::into_pin`] makes
/// the pin, so a row becomes a pin the same way in both.
pub(crate) struct PinColumns {
    pub(crate) server_key: String,
    pub(crate) tool: String,
    pub(crate) server: String,
    pub(crate) digest: String,
    pub(crate) definition: String,
    pub(crate) pinned_at: i64,
    pub(crate) seen_digest: Option<String>,
    pub(crate) seen_definition: Option<String>,
    pub(crate) identity: String,
    pub(crate) seen_identity: Option<String>,
    pub(crate) tag: Option<String>,
}

impl PinColumns {
    /// The pin, its definitions parsed and its seal checked by `sealer`
    /// ([`Seal::Unchecked`] without one); a held change needs both its
    /// digest and its definition.
    pub(crate) fn into_pin(self, sealer: Option<&rows::Sealer>) -> Result<Pin, StoreError> {
        let seen = match self.seen_digest.zip(self.seen_definition) {
            Some((digest, definition)) => Some(Seen {
                digest,
                definition: parse_json(&definition)?,
                identity: self.seen_identity.unwrap_or_default(),
            }),
            None => None,
        };
        let mut pin = Pin {
            server_key: self.server_key,
            server: self.server,
            identity: self.identity,
            tool: self.tool,
            digest: self.digest,
            definition: parse_json(&self.definition)?,
            pinned_at: self.pinned_at,
            seen,
            seal: Seal::Unchecked,
        };
        if let Some(sealer) = sealer {
            pin.seal = sealer.check_pin(&pin, self.tag.as_deref());
        }
        Ok(pin)
    }
}

/// A SQLite row of [`PIN_COLUMNS`].
fn pin_columns(row: &rusqlite::Row<'_>) -> rusqlite::Result<PinColumns> {
    Ok(PinColumns {
        server_key: row.get(0)?,
        tool: row.get(1)?,
        server: row.get(2)?,
        digest: row.get(3)?,
        definition: row.get(4)?,
        pinned_at: row.get(5)?,
        seen_digest: row.get(6)?,
        seen_definition: row.get(7)?,
        identity: row.get(8)?,
        seen_identity: row.get(9)?,
        tag: row.get(10)?,
    })
}

const PUT_PIN: &str = "INSERT INTO pins (server_key, tool, server, digest, definition, pinned_at, identity, seen_digest, seen_definition, seen_identity, tag)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL, NULL, NULL, ?8)
             ON CONFLICT (server_key, tool) DO UPDATE SET server = ?3, digest = ?4, definition = ?5,
                 pinned_at = ?6, identity = ?7, seen_digest = NULL, seen_definition = NULL,
                 seen_identity = NULL, tag = ?8";

impl PinStore for SqliteStore {
    fn pin(&self, server_key: &str, tool: &str) -> Result<Option<Pin>, StoreError> {
        let connection = self.lock();
        let parts = connection
            .query_row(
                &format!("SELECT {PIN_COLUMNS} FROM pins WHERE server_key = ?1 AND tool = ?2"),
                params![server_key, tool],
                pin_columns,
            )
            .optional()?;
        parts
            .map(|parts| parts.into_pin(self.sealer.as_ref()))
            .transpose()
    }

    fn put_pin(&self, pin: &Pin) -> Result<(), StoreError> {
        self.put_pins(std::slice::from_ref(pin))
    }

    fn put_pins(&self, pins: &[Pin]) -> Result<(), StoreError> {
        let sealer = self.sealer.as_ref().ok_or(StoreError::Unsealed)?;
        let mut connection = self.lock();
        let transaction = connection.transaction()?;
        for pin in pins {
            transaction.execute(
                PUT_PIN,
                params![
                    pin.server_key,
                    pin.tool,
                    pin.server,
                    pin.digest,
                    pin.definition.to_string(),
                    pin.pinned_at,
                    pin.identity,
                    sealer.pin(pin)
                ],
            )?;
        }
        transaction.commit()?;
        Ok(())
    }

    fn see(&self, server_key: &str, tool: &str, seen: &Seen) -> Result<(), StoreError> {
        self.lock().execute(
            "UPDATE pins SET seen_digest = ?3, seen_definition = ?4, seen_identity = ?5
             WHERE server_key = ?1 AND tool = ?2 AND digest != ?3",
            params![
                server_key,
                tool,
                seen.digest,
                seen.definition.to_string(),
                seen.identity
            ],
        )?;
        Ok(())
    }

    fn clear_seen(&self, server_key: &str, tool: &str) -> Result<(), StoreError> {
        self.lock().execute(
            "UPDATE pins SET seen_digest = NULL, seen_definition = NULL, seen_identity = NULL
             WHERE server_key = ?1 AND tool = ?2",
            params![server_key, tool],
        )?;
        Ok(())
    }

    fn pins(&self) -> Result<Vec<Pin>, StoreError> {
        let connection = self.lock();
        let mut statement = connection.prepare(&format!(
            "SELECT {PIN_COLUMNS} FROM pins ORDER BY server, tool"
        ))?;
        let rows = statement.query_map([], pin_columns)?;
        let mut pins = Vec::new();
        for row in rows {
            pins.push(row?.into_pin(self.sealer.as_ref())?);
        }
        Ok(pins)
    }

    fn pins_of(&self, server_key: &str) -> Result<Vec<Pin>, StoreError> {
        let connection = self.lock();
        let mut statement = connection.prepare_cached(&format!(
            "SELECT {PIN_COLUMNS} FROM pins WHERE server_key = ?1 ORDER BY tool"
        ))?;
        let rows = statement.query_map(params![server_key], pin_columns)?;
        let mut pins = Vec::new();
        for row in rows {
            pins.push(row?.into_pin(self.sealer.as_ref())?);
        }
        Ok(pins)
    }

    fn approvals_of(&self, server_key: &str) -> Result<Vec<Approval>, StoreError> {
        let connection = self.lock();
        let mut statement = connection.prepare_cached(&format!(
            "{} ORDER BY a.tool",
            ALWAYS_READ.replace("{s}", "").replace("{key}", "?1")
        ))?;
        let rows =
            statement.query_map(params![server_key], |row| sqlite_always(server_key, row))?;
        let mut approvals = Vec::new();
        for row in rows {
            approvals.push(row?.into_approval(self.sealer.as_ref(), self.keying.key.as_ref()));
        }
        Ok(approvals)
    }

    fn rekey(&self, server: &str, to_key: &str) -> Result<Option<Rekeyed>, StoreError> {
        let sealer = self.sealer.as_ref().ok_or(StoreError::Unsealed)?;
        let mut connection = self.lock();
        // IMMEDIATE: the write lock is taken before the first read, so a
        // rekey in another process waits for this one and then sees its
        // result (the target key has pins) instead of deciding on what this
        // one is about to change.
        let transaction =
            connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let taken: bool = transaction.query_row(
            "SELECT EXISTS (SELECT 1 FROM pins WHERE server_key = ?1)",
            params![to_key],
            |row| row.get(0),
        )?;
        if taken {
            return Ok(None);
        }
        let keys: Vec<String> = transaction
            .prepare(
                "SELECT server_key FROM pins WHERE server = ?1
                 GROUP BY server_key ORDER BY MAX(pinned_at) DESC, server_key",
            )?
            .query_map(params![server], |row| row.get(0))?
            .collect::<Result<_, _>>()?;
        let Some((from_key, stale)) = keys.split_first() else {
            return Ok(None);
        };
        let from_identity: String = transaction.query_row(
            "SELECT identity FROM pins WHERE server_key = ?1 AND server = ?2
             ORDER BY pinned_at DESC, tool LIMIT 1",
            params![from_key, server],
            |row| row.get(0),
        )?;
        // Each pin moves with a new seal, for its new key; one whose seal
        // was broken stays broken.
        let moving: Vec<PinColumns> = transaction
            .prepare(&format!(
                "SELECT {PIN_COLUMNS} FROM pins WHERE server_key = ?1 AND server = ?2"
            ))?
            .query_map(params![from_key, server], pin_columns)?
            .collect::<Result<_, _>>()?;
        let mut moved = 0;
        for columns in moving {
            let tool = columns.tool.clone();
            let mut pin = columns.into_pin(Some(sealer))?;
            pin.server_key = to_key.to_owned();
            let tag = (pin.seal == Seal::Valid).then(|| sealer.pin(&pin));
            moved += transaction.execute(
                "UPDATE pins SET server_key = ?2, tag = ?4 WHERE server_key = ?1 AND tool = ?3",
                params![from_key, to_key, tool, tag],
            )?;
        }
        transaction.execute(
            "DELETE FROM pins WHERE server = ?1 AND server_key != ?2",
            params![server, to_key],
        )?;
        // The standing approvals of each key left without pins go, each
        // with its revocation record.
        let mut revocations = Vec::new();
        for key in std::iter::once(from_key).chain(stale) {
            let pinned: bool = transaction.query_row(
                "SELECT EXISTS (SELECT 1 FROM pins WHERE server_key = ?1)",
                params![key],
                |row| row.get(0),
            )?;
            if pinned {
                continue;
            }
            for tool in granted_tools(&transaction, key)? {
                revocations.push(standing::revocation(
                    unix_now(),
                    server,
                    key,
                    &tool,
                    standing::IDENTITY_CHANGED,
                ));
            }
            transaction.execute("DELETE FROM always WHERE server_key = ?1", params![key])?;
        }
        let tail = if revocations.is_empty() {
            None
        } else {
            self.keying.may_append()?;
            let (_, tail) =
                audit::append_in_transaction(&transaction, &revocations, self.keying.key.as_ref())?;
            Some(tail)
        };
        transaction.commit()?;
        if let Some(tail) = tail {
            self.keying.committed(&tail);
        }
        Ok(Some(Rekeyed {
            from_key: from_key.clone(),
            from_identity,
            pins: moved,
        }))
    }

    fn revoke(&self, server_key: &str, tool: &str) -> Result<bool, StoreError> {
        let connection = self.lock();
        let transaction = audit::Immediate::begin(&connection)?;
        let server = pinned_server(&connection, server_key, tool)?;
        let granted = granted_last(&connection, server_key, tool)?;
        let approvals = connection.execute(
            "DELETE FROM always WHERE server_key = ?1 AND tool = ?2",
            params![server_key, tool],
        )?;
        let removed = connection.execute(
            "DELETE FROM pins WHERE server_key = ?1 AND tool = ?2",
            params![server_key, tool],
        )?;
        // INVARIANT: a standing approval is never removed without its
        // revocation record: a row put back later would approve again.
        let tail = if approvals > 0 || granted {
            let key = self.keying.key.as_ref().ok_or(StoreError::Unsealed)?;
            self.keying.may_append()?;
            let revoked =
                standing::revocation(unix_now(), &server, server_key, tool, standing::REVOKED);
            let (_, tail) = audit::append_in_transaction(&connection, &[revoked], Some(key))?;
            Some(tail)
        } else {
            None
        };
        transaction.commit()?;
        if let Some(tail) = tail {
            self.keying.committed(&tail);
        }
        Ok(removed > 0)
    }

    fn approve_always(&self, server_key: &str, tool: &str, digest: &str) -> Result<(), StoreError> {
        let sealer = self.sealer.as_ref().ok_or(StoreError::Unsealed)?;
        self.keying.may_append()?;
        let connection = self.lock();
        let transaction = audit::Immediate::begin(&connection)?;
        let server = pinned_server(&connection, server_key, tool)?;
        let grant = standing::grant(unix_now(), &server, server_key, tool, digest);
        let (_, tail) =
            audit::append_in_transaction(&connection, &[grant], self.keying.key.as_ref())?;
        let granted = to_sql(tail.0);
        connection.execute(
            "INSERT INTO always (server_key, tool, digest, tag, grant_seq) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (server_key, tool) DO UPDATE SET digest = ?3, tag = ?4, grant_seq = ?5",
            params![
                server_key,
                tool,
                digest,
                sealer.always(server_key, tool, digest, granted),
                granted
            ],
        )?;
        transaction.commit()?;
        self.keying.committed(&tail);
        Ok(())
    }

    fn approved_always(
        &self,
        server_key: &str,
        tool: &str,
        digest: &str,
    ) -> Result<bool, StoreError> {
        Ok(self.approvals_of(server_key)?.iter().any(|approval| {
            approval.tool == tool && approval.digest == digest && approval.approves()
        }))
    }

    fn salt(&self) -> &[u8] {
        &self.salt
    }
}

/// Now, in Unix seconds (0 before 1970).
fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX)
        })
}

impl TokenStore for MemoryStore {
    fn add_token(&self, name: &str, hash: &str, scope: &str) -> Result<(), StoreError> {
        let mut state = self.lock();
        if state.tokens.contains_key(name) || state.tokens.values().any(|(h, _, _)| h == hash) {
            return Err(StoreError::TokenExists(name.to_owned()));
        }
        state.tokens.insert(
            name.to_owned(),
            (hash.to_owned(), scope.to_owned(), unix_now()),
        );
        Ok(())
    }

    fn tokens(&self) -> Result<Vec<TokenRow>, StoreError> {
        Ok(self
            .lock()
            .tokens
            .iter()
            .map(|(name, (_, scope, created_at))| TokenRow {
                name: name.clone(),
                scope: scope.clone(),
                created_at: *created_at,
                seal: Seal::Valid,
            })
            .collect())
    }

    fn revoke_token(&self, name: &str) -> Result<bool, StoreError> {
        Ok(self.lock().tokens.remove(name).is_some())
    }

    fn find_token(&self, hash: &str) -> Result<Option<TokenRow>, StoreError> {
        Ok(self
            .lock()
            .tokens
            .iter()
            .find(|(_, (found, _, _))| found == hash)
            .map(|(name, (_, scope, created_at))| TokenRow {
                name: name.clone(),
                scope: scope.clone(),
                created_at: *created_at,
                seal: Seal::Valid,
            }))
    }
}

impl TokenStore for SqliteStore {
    fn add_token(&self, name: &str, hash: &str, scope: &str) -> Result<(), StoreError> {
        let sealer = self.sealer.as_ref().ok_or(StoreError::Unsealed)?;
        let created_at = unix_now();
        let tag = sealer.token(name, hash, scope, created_at);
        let added = self.lock().execute(
            "INSERT INTO tokens (name, hash, scope, created_at, tag) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT DO NOTHING",
            params![name, hash, scope, created_at, tag],
        )?;
        if added == 0 {
            return Err(StoreError::TokenExists(name.to_owned()));
        }
        Ok(())
    }

    fn tokens(&self) -> Result<Vec<TokenRow>, StoreError> {
        let connection = self.lock();
        let mut statement = connection
            .prepare("SELECT name, hash, scope, created_at, tag FROM tokens ORDER BY name")?;
        let rows = statement.query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, i64>(3)?,
                row.get::<_, Option<String>>(4)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (name, hash, scope, created_at, tag) = row?;
            out.push(token_row(
                self.sealer.as_ref(),
                name,
                &hash,
                scope,
                created_at,
                tag,
            ));
        }
        Ok(out)
    }

    fn revoke_token(&self, name: &str) -> Result<bool, StoreError> {
        Ok(self
            .lock()
            .execute("DELETE FROM tokens WHERE name = ?1", params![name])?
            > 0)
    }

    fn find_token(&self, hash: &str) -> Result<Option<TokenRow>, StoreError> {
        self.token_in(&self.lock(), hash)
    }

    fn find_token_now(&self, hash: &str) -> Option<Option<TokenRow>> {
        let readers = || {
            self.token_readers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        let taken = readers().pop();
        let connection = match taken {
            Some(connection) => connection,
            // The store's own file, never a new one; and no busy wait.
            None => Connection::open_with_flags(
                &self.path,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE
                    | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .and_then(|connection| {
                connection.busy_timeout(std::time::Duration::ZERO)?;
                Ok(connection)
            })
            .ok()?,
        };
        // Anything but an answer (a busy database, whatever else) is left
        // to `find_token`, which waits, and refuses when it fails.
        let answer = self.token_in(&connection, hash).ok();
        readers().push(connection);
        answer
    }
}

impl SqliteStore {
    /// The token whose hash is `hash`, read on `connection`, when its seal
    /// verifies.
    fn token_in(
        &self,
        connection: &Connection,
        hash: &str,
    ) -> Result<Option<TokenRow>, StoreError> {
        let found: Option<(String, String, i64, Option<String>)> = connection
            .prepare_cached("SELECT name, scope, created_at, tag FROM tokens WHERE hash = ?1")?
            .query_row(params![hash], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
            })
            .optional()?;
        Ok(found
            .map(|(name, scope, created_at, tag)| {
                token_row(self.sealer.as_ref(), name, hash, scope, created_at, tag)
            })
            .filter(|row| row.seal == Seal::Valid))
    }
}

/// A token as read from SQL, its seal checked by `sealer` (unchecked
/// without one).
pub(crate) fn token_row(
    sealer: Option<&rows::Sealer>,
    name: String,
    hash: &str,
    scope: String,
    created_at: i64,
    tag: Option<String>,
) -> TokenRow {
    let seal = sealer.map_or(Seal::Unchecked, |sealer| {
        sealer.check_token(&name, hash, &scope, created_at, tag.as_deref())
    });
    TokenRow {
        name,
        scope,
        created_at,
        seal,
    }
}

/// Helpers for the tests of this crate and of the crates above it.
#[cfg(feature = "test-util")]
pub mod test_util {
    use std::sync::atomic::{AtomicU32, Ordering};

    /// The variable that names the test PostgreSQL server (an address whose
    /// user may create databases); `./scripts/test` starts one and sets it.
    pub const POSTGRES_URL_VAR: &str = "HINTGATE_TEST_POSTGRES_URL";

    /// Set by `./scripts/test`: a missing server is then a failure, not a skip.
    pub const REQUIRE_POSTGRES_VAR: &str = "HINTGATE_REQUIRE_POSTGRES";

    /// The address of a new, empty database on the test PostgreSQL server,
    /// or `None` (with a line on stderr) when no server is configured.
    ///
    /// # Panics
    ///
    /// When a server is required but not configured, or cannot be used.
    #[must_use]
    #[expect(clippy::panic, reason = "test helper: a failed setup is a failed test")]
    pub fn postgres_database() -> Option<String> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let Ok(admin) = std::env::var(POSTGRES_URL_VAR) else {
            assert!(
                std::env::var_os(REQUIRE_POSTGRES_VAR).is_none(),
                "{REQUIRE_POSTGRES_VAR} is set but {POSTGRES_URL_VAR} is not"
            );
            #[expect(
                clippy::disallowed_macros,
                reason = "a test helper tells the test output why a test did nothing"
            )]
            {
                eprintln!(
                    "{POSTGRES_URL_VAR} is not set: the PostgreSQL store is not tested in this run (./scripts/test starts a server)"
                );
            }
            return None;
        };
        let name = format!(
            "hintgate_test_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut client = postgres::Client::connect(&admin, postgres::NoTls)
            .unwrap_or_else(|err| panic!("cannot reach the test PostgreSQL server: {err}"));
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap_or_else(|err| panic!("cannot create a test database: {err}"));
        let Some((base, _)) = admin.rsplit_once('/') else {
            panic!("{POSTGRES_URL_VAR} must end with /DATABASE");
        };
        // The test server speaks TLS with a certificate of its own test CA,
        // which only the TLS tests trust.
        Some(format!("{base}/{name}?sslmode=disable"))
    }

    /// The variable that names the test server's CA certificate (PEM), when
    /// it speaks TLS.
    pub const POSTGRES_CA_VAR: &str = "HINTGATE_TEST_POSTGRES_CA";

    /// What the TLS tests do, given the environment.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum TlsRequirement {
        /// Run, verifying the server with this CA file.
        Run(std::path::PathBuf),
        /// Skip: no server, or no CA, is configured, and none is required.
        Skip,
        /// Fail: PostgreSQL is required ([`REQUIRE_POSTGRES_VAR`]) but this
        /// variable is not set.
        Missing(&'static str),
    }

    /// Decides what the TLS tests do from the variables `get` reads (the
    /// environment, or a map in a test): an empty value counts as unset,
    /// except for [`REQUIRE_POSTGRES_VAR`], which requires by being there.
    pub fn tls_requirement(get: impl Fn(&str) -> Option<String>) -> TlsRequirement {
        let set = |name: &str| get(name).filter(|value| !value.is_empty());
        let required = get(REQUIRE_POSTGRES_VAR).is_some();
        match (set(POSTGRES_URL_VAR), set(POSTGRES_CA_VAR)) {
            (Some(_), Some(ca)) => TlsRequirement::Run(ca.into()),
            (None, _) if required => TlsRequirement::Missing(POSTGRES_URL_VAR),
            (Some(_), None) if required => TlsRequirement::Missing(POSTGRES_CA_VAR),
            _ => TlsRequirement::Skip,
        }
    }

    /// A new database on the test server as a TLS address
    /// (`sslmode=require`), and the CA file that verifies the server; `None`
    /// (with a line on stderr) when no server, or no TLS, is configured.
    ///
    /// # Panics
    ///
    /// When PostgreSQL is required but the server or its CA is not
    /// configured, or the server cannot be used.
    #[must_use]
    #[expect(clippy::panic, reason = "test helper: a failed setup is a failed test")]
    pub fn postgres_tls_database() -> Option<(String, std::path::PathBuf)> {
        let from_env =
            |name: &str| std::env::var_os(name).map(|value| value.to_string_lossy().into_owned());
        let ca = match tls_requirement(from_env) {
            TlsRequirement::Run(ca) => ca,
            TlsRequirement::Missing(var) => {
                panic!("{REQUIRE_POSTGRES_VAR} is set but {var} is not")
            }
            TlsRequirement::Skip => {
                #[expect(
                    clippy::disallowed_macros,
                    reason = "a test helper tells the test output why a test did nothing"
                )]
                {
                    eprintln!(
                        "{POSTGRES_URL_VAR} or {POSTGRES_CA_VAR} is not set: the PostgreSQL store is not tested over TLS in this run (./scripts/test sets both)"
                    );
                }
                return None;
            }
        };
        let plain = postgres_database()?;
        let url = plain.replace("sslmode=disable", "sslmode=require");
        Some((url, ca))
    }

    /// A call record for a test, as the gateway writes them: the fields of
    /// `fields` that a call record has (`server`, `tool`, `verdict`, …)
    /// are taken as they are, and every other one goes into its
    /// arguments, so a test can tell records apart by anything.
    ///
    /// # Panics
    ///
    /// When `fields` is not an object, or a field it gives has another
    /// type than the record's.
    #[must_use]
    #[expect(
        clippy::expect_used,
        reason = "test helper: a wrong fixture is a failed test"
    )]
    pub fn call_entry(at: i64, fields: &serde_json::Value) -> crate::NewEntry {
        const CALL_FIELDS: [&str; 15] = [
            "approver",
            "arguments",
            "host",
            "idempotency",
            "identity",
            "instance",
            "instance_identity",
            "outcome",
            "pin",
            "reasons",
            "request",
            "server",
            "session",
            "tool",
            "verdict",
        ];
        let mut body = serde_json::Map::new();
        for (key, value) in [
            ("approver", serde_json::json!("rule-allow")),
            ("identity", serde_json::Value::Null),
            ("pin", serde_json::Value::Null),
            ("reasons", serde_json::json!(["rule-allow"])),
            ("request", serde_json::json!("1")),
            ("server", serde_json::json!("fs")),
            ("session", serde_json::json!("test")),
            ("tool", serde_json::json!("read")),
            ("verdict", serde_json::json!("allow")),
        ] {
            body.insert(key.to_owned(), value);
        }
        let mut arguments = serde_json::Map::new();
        let given = fields.as_object().expect("the fields of a call record");
        for (key, value) in given {
            if CALL_FIELDS.contains(&key.as_str()) {
                body.insert(key.clone(), value.clone());
            } else {
                arguments.insert(key.clone(), value.clone());
            }
        }
        body.entry("arguments")
            .or_insert(serde_json::Value::Object(arguments));
        let body = serde_json::Value::Object(body);
        let record: crate::record::CallRecord =
            serde_json::from_value(body).expect("a call record");
        crate::NewEntry::of(at, None, &crate::Record::Call(Box::new(record)))
    }

    /// The outcome record of the call at `call`, as the gateway writes it.
    #[must_use]
    pub fn outcome_entry(
        at: i64,
        call: u64,
        outcome: crate::record::OutcomeCode,
    ) -> crate::NewEntry {
        crate::NewEntry::of(
            at,
            Some(call),
            &crate::Record::Outcome(crate::record::OutcomeRecord {
                attempt: 0,
                duration_ms: 1,
                outcome,
            }),
        )
    }

    #[cfg(test)]
    mod tests {
        use std::collections::BTreeMap;

        use super::*;

        fn decide(vars: &[(&str, &str)]) -> TlsRequirement {
            let vars: BTreeMap<String, String> = vars
                .iter()
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
                .collect();
            tls_requirement(|name| vars.get(name).cloned())
        }

        #[test]
        fn a_required_postgres_without_its_ca_fails_instead_of_skipping() {
            assert_eq!(
                decide(&[
                    (REQUIRE_POSTGRES_VAR, "1"),
                    (POSTGRES_URL_VAR, "postgres://x@h/db")
                ]),
                TlsRequirement::Missing(POSTGRES_CA_VAR)
            );
            assert_eq!(
                decide(&[
                    (REQUIRE_POSTGRES_VAR, "1"),
                    (POSTGRES_URL_VAR, "postgres://x@h/db"),
                    (POSTGRES_CA_VAR, "")
                ]),
                TlsRequirement::Missing(POSTGRES_CA_VAR),
                "an empty CA is no CA"
            );
            assert_eq!(
                decide(&[(REQUIRE_POSTGRES_VAR, ""), (POSTGRES_CA_VAR, "/ca.pem")]),
                TlsRequirement::Missing(POSTGRES_URL_VAR)
            );
        }

        #[test]
        fn the_tls_tests_run_with_a_server_and_its_ca_and_skip_only_when_not_required() {
            assert_eq!(
                decide(&[
                    (REQUIRE_POSTGRES_VAR, "1"),
                    (POSTGRES_URL_VAR, "postgres://x@h/db"),
                    (POSTGRES_CA_VAR, "/ca.pem")
                ]),
                TlsRequirement::Run("/ca.pem".into())
            );
            assert_eq!(
                decide(&[
                    (POSTGRES_URL_VAR, "postgres://x@h/db"),
                    (POSTGRES_CA_VAR, "/ca.pem")
                ]),
                TlsRequirement::Run("/ca.pem".into())
            );
            assert_eq!(
                decide(&[(POSTGRES_URL_VAR, "postgres://x@h/db")]),
                TlsRequirement::Skip
            );
            assert_eq!(decide(&[]), TlsRequirement::Skip);
        }
    }
}

impl IdempotencyStore for MemoryStore {
    fn key_record(
        &self,
        scope: &str,
        now: i64,
        window_s: i64,
    ) -> Result<Option<KeyRecord>, StoreError> {
        let sealer = rows::Sealer::of(&self.key);
        let cipher = idempotency::KeyCipher::of(&self.key)?;
        Ok(self
            .lock()
            .keys
            .get(scope)
            .filter(|row| row.claimed_at > now.saturating_sub(window_s))
            .map(|row| row.open(Some(&sealer), Some(&cipher))))
    }

    fn claim_key(&self, claim: &KeyClaim<'_>) -> Result<Option<KeyRecord>, StoreError> {
        let sealer = rows::Sealer::of(&self.key);
        let cipher = idempotency::KeyCipher::of(&self.key)?;
        let mut state = self.lock();
        let oldest = claim.now.saturating_sub(claim.window_s);
        state.keys.retain(|_, row| row.claimed_at > oldest);
        if let Some(row) = state.keys.get(claim.scope) {
            return Ok(Some(row.open(Some(&sealer), Some(&cipher))));
        }
        state.keys.insert(
            claim.scope.to_owned(),
            idempotency::KeyRow::claimed(claim, &sealer),
        );
        Ok(None)
    }

    fn end_key(
        &self,
        scope: &str,
        owner: &str,
        end: KeyEnd<'_>,
        now: i64,
    ) -> Result<(), StoreError> {
        let sealer = rows::Sealer::of(&self.key);
        let cipher = idempotency::KeyCipher::of(&self.key)?;
        let mut state = self.lock();
        let Some(row) = state.keys.get(scope) else {
            return Ok(());
        };
        if row.owner != owner || row.state != KeyState::Running.as_str() {
            return Ok(());
        }
        match row.clone().ended(end, now, &sealer, &cipher)? {
            Some(row) => state.keys.insert(scope.to_owned(), row),
            None => state.keys.remove(scope),
        };
        Ok(())
    }
}

impl SqliteStore {
    fn key_tools(&self) -> Result<(rows::Sealer, idempotency::KeyCipher), StoreError> {
        let key = self.audit_key().ok_or(StoreError::Unsealed)?;
        Ok((rows::Sealer::of(key), idempotency::KeyCipher::of(key)?))
    }
}

/// The columns of an idempotency record, in the order the queries name them.
const KEY_COLUMNS: &str =
    "scope, state, owner, principal, arguments, claimed_at, done_at, result, tag";

fn key_row_of(row: &rusqlite::Row<'_>) -> rusqlite::Result<idempotency::KeyRow> {
    Ok(idempotency::KeyRow {
        scope: row.get(0)?,
        state: row.get(1)?,
        owner: row.get(2)?,
        principal: row.get(3)?,
        arguments: row.get(4)?,
        claimed_at: row.get(5)?,
        done_at: row.get(6)?,
        result: row.get(7)?,
        tag: row.get(8)?,
    })
}

fn put_key_row(connection: &Connection, row: &idempotency::KeyRow) -> rusqlite::Result<usize> {
    connection.execute(
        &format!(
            "INSERT OR REPLACE INTO idempotency ({KEY_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
        ),
        params![
            row.scope,
            row.state,
            row.owner,
            row.principal,
            row.arguments,
            row.claimed_at,
            row.done_at,
            row.result,
            row.tag
        ],
    )
}

impl IdempotencyStore for SqliteStore {
    fn key_record(
        &self,
        scope: &str,
        now: i64,
        window_s: i64,
    ) -> Result<Option<KeyRecord>, StoreError> {
        let (sealer, cipher) = self.key_tools()?;
        let row = self
            .lock()
            .query_row(
                &format!(
                    "SELECT {KEY_COLUMNS} FROM idempotency WHERE scope = ?1 AND claimed_at > ?2"
                ),
                params![scope, now.saturating_sub(window_s)],
                key_row_of,
            )
            .optional()?;
        Ok(row.map(|row| row.open(Some(&sealer), Some(&cipher))))
    }

    fn claim_key(&self, claim: &KeyClaim<'_>) -> Result<Option<KeyRecord>, StoreError> {
        let (sealer, cipher) = self.key_tools()?;
        let mut connection = self.lock();
        // The write lock first, so two processes on one file claim in turn.
        let transaction =
            connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        transaction.execute(
            "DELETE FROM idempotency WHERE claimed_at <= ?1",
            params![claim.now.saturating_sub(claim.window_s)],
        )?;
        let found = transaction
            .query_row(
                &format!("SELECT {KEY_COLUMNS} FROM idempotency WHERE scope = ?1"),
                params![claim.scope],
                key_row_of,
            )
            .optional()?;
        if let Some(row) = found {
            transaction.commit()?;
            return Ok(Some(row.open(Some(&sealer), Some(&cipher))));
        }
        put_key_row(&transaction, &idempotency::KeyRow::claimed(claim, &sealer))?;
        transaction.commit()?;
        Ok(None)
    }

    fn end_key(
        &self,
        scope: &str,
        owner: &str,
        end: KeyEnd<'_>,
        now: i64,
    ) -> Result<(), StoreError> {
        let (sealer, cipher) = self.key_tools()?;
        let mut connection = self.lock();
        let transaction =
            connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let found = transaction
            .query_row(
                &format!(
                    "SELECT {KEY_COLUMNS} FROM idempotency WHERE scope = ?1 AND owner = ?2 AND state = 'running'"
                ),
                params![scope, owner],
                key_row_of,
            )
            .optional()?;
        if let Some(row) = found {
            match row.ended(end, now, &sealer, &cipher)? {
                Some(row) => {
                    put_key_row(&transaction, &row)?;
                }
                None => {
                    transaction
                        .execute("DELETE FROM idempotency WHERE scope = ?1", params![scope])?;
                }
            }
        }
        transaction.commit()?;
        Ok(())
    }
}

impl UpstreamTokenStore for MemoryStore {
    fn put_grant(&self, grant: &NewGrant<'_>) -> Result<(), StoreError> {
        let row = upstream::GrantTools::of(&self.key)?.row(grant)?;
        self.lock()
            .grants
            .insert((row.server.clone(), row.principal.clone()), row);
        Ok(())
    }

    fn grant(&self, server: &str, principal: &str) -> Result<Option<KeptGrant>, StoreError> {
        let tools = upstream::GrantTools::of(&self.key)?;
        Ok(self
            .lock()
            .grants
            .get(&(server.to_owned(), principal.to_owned()))
            .map(|row| tools.open(row)))
    }

    fn grants(&self) -> Result<Vec<GrantInfo>, StoreError> {
        let sealer = rows::Sealer::of(&self.key);
        Ok(self
            .lock()
            .grants
            .values()
            .map(|row| upstream::info_of(row, Some(&sealer)))
            .collect())
    }

    fn delete_grant(&self, server: &str, principal: &str) -> Result<bool, StoreError> {
        Ok(self
            .lock()
            .grants
            .remove(&(server.to_owned(), principal.to_owned()))
            .is_some())
    }
}

/// The columns of an upstream grant, in the order the queries name them.
const GRANT_COLUMNS: &str = "server, principal, scope, expires_at, updated_at, secret, tag";

fn grant_row_of(row: &rusqlite::Row<'_>) -> rusqlite::Result<upstream::GrantRow> {
    Ok(upstream::GrantRow {
        server: row.get(0)?,
        principal: row.get(1)?,
        scope: row.get(2)?,
        expires_at: row.get(3)?,
        updated_at: row.get(4)?,
        secret: row.get(5)?,
        tag: row.get(6)?,
    })
}

impl UpstreamTokenStore for SqliteStore {
    fn put_grant(&self, grant: &NewGrant<'_>) -> Result<(), StoreError> {
        let key = self.audit_key().ok_or(StoreError::Unsealed)?;
        let row = upstream::GrantTools::of(key)?.row(grant)?;
        self.lock().execute(
            &format!(
                "INSERT OR REPLACE INTO upstream_grants ({GRANT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
            ),
            params![
                row.server,
                row.principal,
                row.scope,
                row.expires_at,
                row.updated_at,
                row.secret,
                row.tag
            ],
        )?;
        Ok(())
    }

    fn grant(&self, server: &str, principal: &str) -> Result<Option<KeptGrant>, StoreError> {
        let key = self.audit_key().ok_or(StoreError::Unsealed)?;
        let tools = upstream::GrantTools::of(key)?;
        let row = self
            .lock()
            .query_row(
                &format!(
                    "SELECT {GRANT_COLUMNS} FROM upstream_grants WHERE server = ?1 AND principal = ?2"
                ),
                params![server, principal],
                grant_row_of,
            )
            .optional()?;
        Ok(row.map(|row| tools.open(&row)))
    }

    fn grants(&self) -> Result<Vec<GrantInfo>, StoreError> {
        let connection = self.lock();
        let mut statement = connection.prepare(&format!(
            "SELECT {GRANT_COLUMNS} FROM upstream_grants ORDER BY server, principal"
        ))?;
        let rows = statement.query_map([], grant_row_of)?;
        let mut out = Vec::new();
        for row in rows {
            out.push(upstream::info_of(&row?, self.sealer.as_ref()));
        }
        Ok(out)
    }

    fn delete_grant(&self, server: &str, principal: &str) -> Result<bool, StoreError> {
        Ok(self.lock().execute(
            "DELETE FROM upstream_grants WHERE server = ?1 AND principal = ?2",
            params![server, principal],
        )? > 0)
    }
}

#[cfg(test)]
mod migration_tests {
    use super::*;

    #[test]
    fn the_sqlite_steps_are_numbered_one_to_the_schema_version() {
        let versions: Vec<i64> = SQLITE_MIGRATIONS
            .iter()
            .map(|(version, _)| *version)
            .collect();
        assert_eq!(versions, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
    }
}
