//! The team store: PostgreSQL, shared by several gateways.
//!
//! Everything lives in the schema `hintgate` of the database the address
//! names, so the store can share a database with other applications. Several
//! gateways use one store at once: the schema is migrated under an advisory
//! lock, audit appends take a transaction-level advisory lock so the hash
//! chain stays one chain, rekeys take one too so two gateways never move a
//! server's pins at once, and an answer in the approval queue is announced
//! with `NOTIFY hintgate_approvals`, which every waiting gateway `LISTEN`s
//! for. A change to standing approvals (`approve_always`, `revoke`, a
//! `rekey` that moved something) is announced on the same channel in its
//! transaction, so a gateway that keeps standing approvals in memory wakes
//! and reads them again.
//!
//! The blocking `postgres` client runs a runtime of its own, which must not
//! be driven from inside the gateway's event loop; so the store keeps its
//! connection on a thread of its own and every call is handed to it. A
//! dropped connection is opened again on the next call.

use std::sync::Mutex;
use std::sync::mpsc::{Sender, sync_channel};
use std::time::Duration;

use ::postgres::fallible_iterator::FallibleIterator;
use ::postgres::{Client, Config, NoTls};

use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::audit::{Keying, chain};
use crate::entry::{GENESIS, kind_name};
use crate::queue::{
    Answer, Answered, ApprovalQueue, NewPending, PENDING_COLUMNS, Pending, PendingState, QueueWatch,
};
use crate::rollback::AcceptedRollback;
use crate::rows::Sealer;
use crate::standing::{self, AlwaysRead, IndexRow};
use crate::{
    ALWAYS_READ, Approval, AuditKey, AuditLog, AuditSetup, Entry, NewEntry, PIN_COLUMNS, Pin,
    PinColumns, PinStore, Rekeyed, Remember, Seal, Seen, StoreError, from_sql, to_sql,
};

/// The schema version this build reads and writes in PostgreSQL.
pub const PG_SCHEMA_VERSION: i64 = 8;

/// How long connecting, a silent connection or one statement may take
/// before it fails (unless the address sets its own).
const STORE_TIMEOUT: Duration = Duration::from_secs(10);

/// The channel that announces answers in the approval queue.
const CHANNEL: &str = "hintgate_approvals";

/// Advisory lock keys (arbitrary, fixed): migrations, audit appends, and
/// rekeys.
const MIGRATE_LOCK: i64 = 0x6869_6e74_6761_7465;
const AUDIT_LOCK: i64 = 0x6869_6e74_6175_6474;
const REKEY_LOCK: i64 = 0x6869_6e74_7265_6b79;

type Job = Box<dyn FnOnce(Result<&mut Connection, StoreError>) + Send>;

/// The store's connection, with the statements of an audit append once they
/// are prepared: preparing one is a round trip to the server, and the
/// gateway appends once per turn of its loop. A statement belongs to the
/// connection it was prepared on, so a new connection starts without them.
struct Connection {
    client: Client,
    append: Option<AppendStatements>,
}

/// The statements of [`AuditLog::append`], prepared on one connection.
#[derive(Clone)]
struct AppendStatements {
    lock: ::postgres::Statement,
    tail: ::postgres::Statement,
    insert: ::postgres::Statement,
}

impl Connection {
    fn new(client: Client) -> Self {
        Self {
            client,
            append: None,
        }
    }

    /// The statements of an append, prepared on first use.
    fn append_statements(&mut self) -> Result<AppendStatements, StoreError> {
        if let Some(prepared) = &self.append {
            return Ok(prepared.clone());
        }
        let prepared = AppendStatements {
            lock: self.client.prepare(LOCK_SQL)?,
            tail: self.client.prepare(TAIL_SQL)?,
            insert: self.client.prepare(INSERT_SQL)?,
        };
        self.append = Some(prepared.clone());
        Ok(prepared)
    }
}

/// The PostgreSQL store (`postgres://user@host/db`).
pub struct PgStore {
    jobs: Mutex<Sender<Job>>,
    salt: Vec<u8>,
    config: Config,
    /// The address without its password, for messages.
    shown: String,
    /// The audit key and this gateway's head, shared with the store's
    /// thread, which writes the head after each commit.
    keying: Arc<Keying>,
    /// Seals pins, standing approvals and answers (with the audit key).
    sealer: Option<Sealer>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("address", &self.shown)
            .finish_non_exhaustive()
    }
}

/// An address with its password hidden.
fn shown(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((credentials, host)) => {
                let user = credentials.split(':').next().unwrap_or("");
                format!("{scheme}://{user}@{host}")
            }
            None => url.to_owned(),
        },
        None => "(an address that is not a URL)".to_owned(),
    }
}

/// Connects, over TLS unless the address says `sslmode=disable`.
///
/// With `sslmode=require` the connection is TLS or nothing; with the
/// default `prefer` a server without TLS is reached in the clear, but a
/// server that offers TLS must show a certificate the platform trusts (the
/// system's roots, or `SSL_CERT_FILE`). Certificates are always verified.
fn connect(config: &Config) -> Result<Client, StoreError> {
    if config.get_ssl_mode() == ::postgres::config::SslMode::Disable {
        return Ok(config.connect(NoTls)?);
    }
    // Ring, as for the HTTP upstreams (a no-op when already installed).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tls = <rustls::ClientConfig as rustls_platform_verifier::ConfigVerifierExt>::with_platform_verifier()
        .map_err(|err| StoreError::Address(format!("cannot set up TLS: {err}")))?;
    Ok(config.connect(tokio_postgres_rustls::MakeRustlsConnect::new(tls))?)
}

/// Bounds connecting, a silent connection and each statement to
/// [`STORE_TIMEOUT`], where the address does not bound them itself.
///
/// A gateway commits its records on its own loop: a server that stops
/// answering must fail the commit (the calls are refused) rather than hold
/// the loop. The statement timeout joins any other `options` the address
/// gives, unless they name `statement_timeout` themselves.
fn bound(config: &mut Config) {
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(STORE_TIMEOUT);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(STORE_TIMEOUT);
    }
    let timeout = format!("-c statement_timeout={}", STORE_TIMEOUT.as_millis());
    match config.get_options() {
        None => {
            config.options(&timeout);
        }
        Some(options) if !names_statement_timeout(options) => {
            let options = format!("{options} {timeout}");
            config.options(&options);
        }
        Some(_) => {}
    }
}

/// Whether server `options` set `statement_timeout`: as `-c name=value`
/// or `--name=value`, where PostgreSQL reads names without regard to case
/// and a `-` in the name as `_`.
fn names_statement_timeout(options: &str) -> bool {
    options
        .to_ascii_lowercase()
        .replace('-', "_")
        .contains("statement_timeout")
}

impl PgStore {
    /// Connects to the store at `url` (`postgres://` or `postgresql://`),
    /// creating or migrating its schema, without an audit key: pins,
    /// approvals and the queue work, and the log can be read and verified
    /// (its MACs unchecked), but nothing can be appended to it
    /// ([`StoreError::NoKey`]). A gateway opens it with
    /// [`PgStore::open_with`].
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the address is not usable, the server cannot be
    /// reached, or the schema is newer than this hintgate knows.
    pub fn open(url: &str) -> Result<Self, StoreError> {
        Self::open_with(url, AuditSetup::default())
    }

    /// Connects as [`PgStore::open`] does, with the audit key and head
    /// `audit` names. Several gateways share one log, so they must share
    /// one key (an append after a record chained under another key fails,
    /// [`StoreError::OtherKey`]); each keeps its own head, in
    /// [`HeadPlace::Directory`](crate::HeadPlace::Directory) named
    /// `audit-LOGID.head` after the log.
    ///
    /// # Errors
    ///
    /// As [`PgStore::open`], and when the key cannot be read or made.
    pub fn open_with(url: &str, audit: AuditSetup) -> Result<Self, StoreError> {
        let shown = shown(url);
        let mut config: Config = url.parse().map_err(|err| {
            StoreError::Address(format!("`{shown}` is not a PostgreSQL address: {err}"))
        })?;
        bound(&mut config);
        let (ready_tx, ready_rx) = sync_channel(1);
        let (jobs_tx, jobs_rx) = std::sync::mpsc::channel::<Job>();
        let worker_config = config.clone();
        let worker_shown = shown.clone();
        std::thread::Builder::new()
            .name("hintgate-postgres".to_owned())
            .spawn(move || {
                let mut connection = match connect(&worker_config).and_then(|mut client| {
                    let salt = migrate(&mut client, &worker_shown)?;
                    let tail = pg_tail(&mut client)?;
                    Ok((client, (salt, tail)))
                }) {
                    Ok((client, opened)) => {
                        let _ = ready_tx.send(Ok(opened));
                        Some(Connection::new(client))
                    }
                    Err(err) => {
                        let _ = ready_tx.send(Err(err));
                        return;
                    }
                };
                for job in jobs_rx {
                    if connection
                        .as_ref()
                        .is_none_or(|connection| connection.client.is_closed())
                    {
                        connection = connect(&worker_config).ok().map(Connection::new);
                    }
                    match connection.as_mut() {
                        Some(connection) => job(Ok(connection)),
                        None => job(Err(StoreError::Address(format!(
                            "`{worker_shown}` cannot be reached"
                        )))),
                    }
                }
            })
            .map_err(|err| StoreError::Address(format!("no thread for the store: {err}")))?;
        let (salt, tail) = ready_rx
            .recv()
            .map_err(|_| StoreError::Address("the store's thread ended".to_owned()))??;
        let gateway = audit.checkpoints;
        let keying = Keying::resolve(audit, tail.as_ref().map(|(_, link)| link.as_str()), || {
            format!("audit-{}.head", log_id(&salt))
        })?;
        let sealer = keying.key.as_ref().map(Sealer::of);
        let store = Self {
            sealer,
            jobs: Mutex::new(jobs_tx),
            salt,
            config,
            shown,
            keying: Arc::new(keying),
        };
        // This gateway's head against the shared log, before anything is
        // appended (the head an append writes would hide what this finds).
        let keying = Arc::clone(&store.keying);
        let found = store.call(move |client| {
            let mut tx = client.transaction()?;
            let found = keying.check_head(true, &mut PgEnd(&mut tx))?;
            tx.commit()?;
            Ok(found)
        })?;
        store.keying.opened(found, gateway)?;
        Ok(store)
    }

    /// Runs `work` on the store's client and waits for its result.
    fn call<R: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Client) -> Result<R, StoreError> + Send + 'static,
    ) -> Result<R, StoreError> {
        self.call_on(move |connection| work(&mut connection.client))
    }

    /// Runs `work` on the store's connection (its client and the statements
    /// prepared on it) and waits for its result.
    fn call_on<R: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection) -> Result<R, StoreError> + Send + 'static,
    ) -> Result<R, StoreError> {
        let (tx, rx) = sync_channel(1);
        let job: Job = Box::new(move |connection| {
            let _ = tx.send(connection.and_then(work));
        });
        self.jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .send(job)
            .map_err(|_| StoreError::Address("the store's thread ended".to_owned()))?;
        rx.recv()
            .map_err(|_| StoreError::Address("the store's thread ended".to_owned()))?
    }
}

/// The id of a PostgreSQL log, from the store's salt (random, made once,
/// shared by every gateway on the store): 16 hexadecimal digits that name
/// each gateway's head file of that log.
fn log_id(salt: &[u8]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(b"hintgate audit log id\n");
    hasher.update(salt);
    hex::encode(hasher.finalize().get(..8).unwrap_or_default())
}

/// The sequence number and link of the log's last record, if any.
fn pg_tail(
    client: &mut impl ::postgres::GenericClient,
) -> Result<Option<(u64, String)>, StoreError> {
    client
        .query_opt(
            "SELECT seq, hash FROM hintgate.audit ORDER BY seq DESC LIMIT 1",
            &[],
        )?
        .map(|row| Ok((from_sql(row.try_get(0)?), row.try_get(1)?)))
        .transpose()
}

/// The link of the record at `seq`, if there is one.
fn pg_link_at(
    client: &mut impl ::postgres::GenericClient,
    seq: u64,
) -> Result<Option<String>, StoreError> {
    client
        .query_opt(
            "SELECT hash FROM hintgate.audit WHERE seq = $1",
            &[&to_sql(seq)],
        )?
        .map(|row| Ok(row.try_get(0)?))
        .transpose()
}

/// The sequence number and link of a log's last record.
type Tail = (u64, String);

/// A PostgreSQL log's end, as the head check reads it.
struct PgEnd<'a, 'b>(&'a mut ::postgres::Transaction<'b>);

impl crate::rollback::LogEnd for PgEnd<'_, '_> {
    fn tail(&mut self) -> Result<Option<(u64, String)>, StoreError> {
        pg_tail(self.0)
    }

    fn link_at(&mut self, seq: u64) -> Result<Option<String>, StoreError> {
        pg_link_at(self.0, seq)
    }
}

/// Appends `entries` in the transaction `tx`, which takes the log's lock
/// (see [`AuditLog::append`]): each record and the approval index's row of
/// each grant, revocation and accepted rollback. Returns the sequence
/// numbers and the new tail; the caller writes the head once `tx` commits.
fn append_in(
    tx: &mut ::postgres::Transaction<'_>,
    entries: &[NewEntry],
    key: Option<&AuditKey>,
) -> Result<(Vec<u64>, (u64, String)), StoreError> {
    append_with(tx, entries, key, [LOCK_SQL, TAIL_SQL, INSERT_SQL])
}

/// The lock, the tail query and the insert of an append, as text.
const LOCK_SQL: &str = "SELECT pg_advisory_xact_lock($1)";
const TAIL_SQL: &str = "SELECT seq, hash FROM hintgate.audit ORDER BY seq DESC LIMIT 1";
/// A whole append's records in one statement: one round trip to the
/// server however many records a turn made.
const INSERT_SQL: &str = "INSERT INTO hintgate.audit (seq, at, kind, call_seq, body, prev, hash)
     SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::bigint[], $5::text[],
                          $6::text[], $7::text[])";

/// [`append_in`] with the log's lock, tail query and insert given as
/// `[lock, tail, insert]`: as text, or prepared on the store's connection
/// (the gateway's own appends).
fn append_with<S: ::postgres::ToStatement + ?Sized>(
    tx: &mut ::postgres::Transaction<'_>,
    entries: &[NewEntry],
    key: Option<&AuditKey>,
    [lock, tail, insert]: [&S; 3],
) -> Result<(Vec<u64>, (u64, String)), StoreError> {
    // One chain for every gateway on this store: appends take turns.
    tx.execute(lock, &[&AUDIT_LOCK])?;
    let tail = match tx.query_opt(tail, &[])? {
        Some(row) => (from_sql(row.try_get(0)?), row.try_get::<_, String>(1)?),
        None => (0, GENESIS.to_owned()),
    };
    // Stored as chained: the canonical text the caller gave, all of it in
    // one statement after the chain is made.
    let mut links: (Vec<i64>, Vec<String>, Vec<String>) = (
        Vec::with_capacity(entries.len()),
        Vec::with_capacity(entries.len()),
        Vec::with_capacity(entries.len()),
    );
    let chained = chain(tail, entries, key, |_, seq, prev, hash| {
        links.0.push(to_sql(seq));
        links.1.push(prev);
        links.2.push(hash.to_owned());
        Ok(())
    })?;
    let at: Vec<i64> = entries.iter().map(|new| new.at).collect();
    let kind: Vec<&str> = entries.iter().map(|new| kind_name(new.kind)).collect();
    let call: Vec<Option<i64>> = entries.iter().map(|new| new.call.map(to_sql)).collect();
    let body: Vec<&str> = entries.iter().map(|new| new.body.as_str()).collect();
    tx.execute(
        insert,
        &[&links.0, &at, &kind, &call, &body, &links.1, &links.2],
    )?;
    // The approval index's rows (grants, revocations, rollbacks: rare)
    // after their records.
    for (new, seq) in entries.iter().zip(&chained.0) {
        index_in(tx, new, *seq)?;
    }
    Ok(chained)
}

/// The approval index's row of `new`, appended at `seq`, when it lists it.
fn index_in(
    client: &mut impl ::postgres::GenericClient,
    new: &NewEntry,
    seq: u64,
) -> Result<(), StoreError> {
    if let Some((server_key, tool)) = standing::index_of(new.kind, &new.body) {
        client.execute(
            "INSERT INTO hintgate.approval_log (seq, kind, server_key, tool) VALUES ($1, $2, $3, $4)",
            &[&to_sql(seq), &kind_name(new.kind), &server_key, &tool],
        )?;
    }
    Ok(())
}

/// The configured server name of a tool's pin (empty without one).
fn pinned_server(
    client: &mut impl ::postgres::GenericClient,
    server_key: &str,
    tool: &str,
) -> Result<String, StoreError> {
    Ok(client
        .query_opt(
            "SELECT server FROM hintgate.pins WHERE server_key = $1 AND tool = $2",
            &[&server_key, &tool],
        )?
        .map(|row| row.try_get(0))
        .transpose()?
        .unwrap_or_default())
}

/// A PostgreSQL row of [`ALWAYS_READ`] as a standing approval of
/// `server_key`.
fn pg_always(server_key: &str, row: &::postgres::Row) -> Result<AlwaysRead, StoreError> {
    let record = match row.try_get::<_, Option<i64>>(6)? {
        Some(seq) => Some(Entry::from_stored(
            from_sql(seq),
            row.try_get(7)?,
            row.try_get(8)?,
            row.try_get::<_, Option<i64>>(9)?.map(from_sql),
            row.try_get(10)?,
            row.try_get(11)?,
            row.try_get(12)?,
        )),
        None => None,
    };
    Ok(AlwaysRead {
        server_key: server_key.to_owned(),
        tool: row.try_get(0)?,
        digest: row.try_get(1)?,
        tag: row.try_get(2)?,
        grant_seq: row.try_get(3)?,
        latest: row.try_get(4)?,
        rollback: row.try_get(5)?,
        record,
    })
}

/// Creates or migrates the schema; returns the salt.
fn migrate(client: &mut Client, shown: &str) -> Result<Vec<u8>, StoreError> {
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATE_LOCK])?;
    tx.batch_execute(
        "CREATE SCHEMA IF NOT EXISTS hintgate;
         CREATE TABLE IF NOT EXISTS hintgate.meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);",
    )?;
    let found: i64 = tx
        .query_opt(
            "SELECT value FROM hintgate.meta WHERE key = 'schema_version'",
            &[],
        )?
        .and_then(|row| row.get::<_, String>(0).parse().ok())
        .unwrap_or(0);
    if found > PG_SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            path: shown.to_owned(),
            found,
            known: PG_SCHEMA_VERSION,
        });
    }
    if found < 1 {
        tx.batch_execute(
            "CREATE TABLE hintgate.pins (
                 server_key TEXT NOT NULL, tool TEXT NOT NULL, server TEXT NOT NULL,
                 digest TEXT NOT NULL, definition TEXT NOT NULL, pinned_at BIGINT NOT NULL,
                 seen_digest TEXT, seen_definition TEXT,
                 PRIMARY KEY (server_key, tool));
             CREATE TABLE hintgate.always (
                 server_key TEXT NOT NULL, tool TEXT NOT NULL, digest TEXT NOT NULL,
                 PRIMARY KEY (server_key, tool));
             CREATE TABLE hintgate.audit (
                 seq BIGINT PRIMARY KEY, at BIGINT NOT NULL, kind TEXT NOT NULL,
                 call_seq BIGINT, body TEXT NOT NULL, prev TEXT NOT NULL, hash TEXT NOT NULL);
             CREATE TABLE hintgate.approvals (
                 id BIGSERIAL PRIMARY KEY, at BIGINT NOT NULL, expires_at BIGINT NOT NULL,
                 session TEXT NOT NULL, server TEXT NOT NULL, server_key TEXT NOT NULL,
                 tool TEXT NOT NULL, digest TEXT NOT NULL, prompt TEXT NOT NULL,
                 offer TEXT NOT NULL, state TEXT NOT NULL, approve BOOLEAN,
                 remember TEXT, answered_by TEXT, why TEXT);
             CREATE INDEX approvals_waiting ON hintgate.approvals (state, expires_at);
             INSERT INTO hintgate.meta (key, value) VALUES ('schema_version', '1')
                 ON CONFLICT (key) DO UPDATE SET value = '1';",
        )?;
    }
    if found < 2 {
        tx.batch_execute(
            "ALTER TABLE hintgate.pins ADD COLUMN IF NOT EXISTS identity TEXT NOT NULL DEFAULT '';
             ALTER TABLE hintgate.pins ADD COLUMN IF NOT EXISTS seen_identity TEXT;
             CREATE INDEX IF NOT EXISTS pins_by_server ON hintgate.pins (server);
             UPDATE hintgate.meta SET value = '2' WHERE key = 'schema_version';",
        )?;
    }
    if found < 3 {
        // Seals on the rows decisions trust (see `rows`), and the prompt's
        // content as JSON for the web console; rows from before have no
        // seal, and so are broken.
        tx.batch_execute(
            "ALTER TABLE hintgate.pins ADD COLUMN IF NOT EXISTS tag TEXT;
             ALTER TABLE hintgate.always ADD COLUMN IF NOT EXISTS tag TEXT;
             ALTER TABLE hintgate.approvals ADD COLUMN IF NOT EXISTS tag TEXT;
             ALTER TABLE hintgate.approvals ADD COLUMN IF NOT EXISTS answer_tag TEXT;
             ALTER TABLE hintgate.approvals ADD COLUMN IF NOT EXISTS details TEXT;
             UPDATE hintgate.meta SET value = '3' WHERE key = 'schema_version';",
        )?;
    }
    if found < 4 {
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS hintgate.tokens (
                 name TEXT PRIMARY KEY, hash TEXT NOT NULL UNIQUE, scope TEXT NOT NULL,
                 created_at BIGINT NOT NULL, tag TEXT);
             UPDATE hintgate.meta SET value = '4' WHERE key = 'schema_version';",
        )?;
    }
    if found < 5 {
        // Standing approvals name the audit record that granted them, and
        // the approval index lists every grant, revocation and accepted
        // rollback (see `standing`); approvals from before are kept and
        // approve nothing.
        tx.batch_execute(
            "ALTER TABLE hintgate.always ADD COLUMN IF NOT EXISTS grant_seq BIGINT;
             CREATE TABLE IF NOT EXISTS hintgate.approval_log (
                 seq BIGINT PRIMARY KEY, kind TEXT NOT NULL,
                 server_key TEXT NOT NULL, tool TEXT NOT NULL);
             CREATE INDEX IF NOT EXISTS approval_log_by_tool
                 ON hintgate.approval_log (server_key, tool, seq);
             UPDATE hintgate.meta SET value = '5' WHERE key = 'schema_version';",
        )?;
    }
    if found < 6 {
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS hintgate.idempotency (
                 scope TEXT PRIMARY KEY, state TEXT NOT NULL, owner TEXT NOT NULL,
                 principal TEXT NOT NULL, arguments TEXT NOT NULL,
                 claimed_at BIGINT NOT NULL, done_at BIGINT, result BYTEA, tag TEXT);
             CREATE INDEX IF NOT EXISTS idempotency_by_age ON hintgate.idempotency (claimed_at);
             UPDATE hintgate.meta SET value = '6' WHERE key = 'schema_version';",
        )?;
    }
    if found < 7 {
        // The OAuth grants hintgate holds for remote servers (see
        // `upstream`).
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS hintgate.upstream_grants (
                 server TEXT NOT NULL, principal TEXT NOT NULL, scope TEXT NOT NULL,
                 expires_at BIGINT, updated_at BIGINT NOT NULL, secret BYTEA NOT NULL, tag TEXT,
                 PRIMARY KEY (server, principal));
             UPDATE hintgate.meta SET value = '7' WHERE key = 'schema_version';",
        )?;
    }
    if found < 8 {
        // The arguments a person edited a queued call to (see `queue`).
        tx.batch_execute(
            "ALTER TABLE hintgate.approvals ADD COLUMN IF NOT EXISTS arguments TEXT;
             UPDATE hintgate.meta SET value = '8' WHERE key = 'schema_version';",
        )?;
    }
    let mut salt = vec![0u8; 32];
    getrandom::fill(&mut salt).map_err(|err| StoreError::Randomness(err.to_string()))?;
    tx.execute(
        "INSERT INTO hintgate.meta (key, value) VALUES ('salt', $1) ON CONFLICT (key) DO NOTHING",
        &[&hex::encode(&salt)],
    )?;
    let stored: String = tx
        .query_one("SELECT value FROM hintgate.meta WHERE key = 'salt'", &[])?
        .get(0);
    tx.commit()?;
    hex::decode(&stored).map_err(|_| StoreError::Corrupt("the stored salt is not hex".to_owned()))
}

/// A pin from a PostgreSQL row of [`PIN_COLUMNS`], its seal checked by
/// `sealer`.
fn row_to_pin(sealer: Option<&Sealer>, row: &::postgres::Row) -> Result<Pin, StoreError> {
    pin_columns(row)?.into_pin(sealer)
}

/// The columns of a PostgreSQL row of [`PIN_COLUMNS`].
fn pin_columns(row: &::postgres::Row) -> Result<PinColumns, StoreError> {
    Ok(PinColumns {
        server_key: row.try_get(0)?,
        tool: row.try_get(1)?,
        server: row.try_get(2)?,
        digest: row.try_get(3)?,
        definition: row.try_get(4)?,
        pinned_at: row.try_get(5)?,
        seen_digest: row.try_get(6)?,
        seen_definition: row.try_get(7)?,
        identity: row.try_get(8)?,
        seen_identity: row.try_get(9)?,
        tag: row.try_get(10)?,
    })
}

/// [`PinStore::rekey`] in the transaction `tx`, which holds [`REKEY_LOCK`].
///
/// Text is ordered by byte (`COLLATE "C"`), as in SQLite and in memory,
/// whatever the database's collation.
fn rekey_in(
    tx: &mut ::postgres::Transaction<'_>,
    sealer: &Sealer,
    keying: &Keying,
    server: &str,
    to_key: &str,
) -> Result<Option<(Rekeyed, Option<Tail>)>, StoreError> {
    let taken = tx
        .query_opt(
            "SELECT 1 FROM hintgate.pins WHERE server_key = $1 LIMIT 1",
            &[&to_key],
        )?
        .is_some();
    if taken {
        return Ok(None);
    }
    let keys: Vec<String> = tx
        .query(
            "SELECT server_key FROM hintgate.pins WHERE server = $1
             GROUP BY server_key ORDER BY MAX(pinned_at) DESC, server_key COLLATE \"C\"",
            &[&server],
        )?
        .iter()
        .map(|row| row.try_get(0))
        .collect::<Result<_, _>>()?;
    let Some((from_key, stale)) = keys.split_first() else {
        return Ok(None);
    };
    let from_identity: String = tx
        .query_one(
            "SELECT identity FROM hintgate.pins WHERE server_key = $1 AND server = $2
             ORDER BY pinned_at DESC, tool COLLATE \"C\" LIMIT 1",
            &[from_key, &server],
        )?
        .try_get(0)?;
    // Each pin moves with a new seal, for its new key; one whose seal was
    // broken stays broken.
    let moving = tx.query(
        &format!("SELECT {PIN_COLUMNS} FROM hintgate.pins WHERE server_key = $1 AND server = $2"),
        &[from_key, &server],
    )?;
    let mut moved = 0u64;
    for row in &moving {
        let mut pin = row_to_pin(Some(sealer), row)?;
        let tool = pin.tool.clone();
        pin.server_key = to_key.to_owned();
        let tag = (pin.seal == Seal::Valid).then(|| sealer.pin(&pin));
        moved += tx.execute(
            "UPDATE hintgate.pins SET server_key = $2, tag = $4 WHERE server_key = $1 AND tool = $3",
            &[from_key, &to_key, &tool, &tag],
        )?;
    }
    tx.execute(
        "DELETE FROM hintgate.pins WHERE server = $1 AND server_key != $2",
        &[&server, &to_key],
    )?;
    // The standing approvals of each key left without pins go, each with
    // its revocation record: every tool with a row, or whose last index
    // row is a grant.
    let touched: Vec<&String> = std::iter::once(from_key).chain(stale).collect();
    let dropped = tx.query(
        "SELECT a.server_key, a.tool FROM hintgate.always a WHERE a.server_key = ANY($1)
             AND NOT EXISTS (SELECT 1 FROM hintgate.pins p WHERE p.server_key = a.server_key)
         UNION
         SELECT l.server_key, l.tool FROM hintgate.approval_log l
         WHERE l.server_key = ANY($1) AND l.kind = 'grant'
             AND NOT EXISTS (SELECT 1 FROM hintgate.pins p WHERE p.server_key = l.server_key)
             AND l.seq = (SELECT max(m.seq) FROM hintgate.approval_log m
                          WHERE m.server_key = l.server_key AND m.tool = l.tool)
         ORDER BY 1, 2",
        &[&touched],
    )?;
    let mut revocations = Vec::with_capacity(dropped.len());
    for row in &dropped {
        let (key, tool): (String, String) = (row.try_get(0)?, row.try_get(1)?);
        revocations.push(standing::revocation(
            crate::unix_now(),
            server,
            &key,
            &tool,
            standing::IDENTITY_CHANGED,
        ));
    }
    tx.execute(
        "DELETE FROM hintgate.always a WHERE a.server_key = ANY($1)
         AND NOT EXISTS (SELECT 1 FROM hintgate.pins p WHERE p.server_key = a.server_key)",
        &[&touched],
    )?;
    let tail = if revocations.is_empty() {
        None
    } else {
        keying.may_append()?;
        Some(append_in(tx, &revocations, keying.key.as_ref())?.1)
    };
    Ok(Some((
        Rekeyed {
            from_key: from_key.clone(),
            from_identity,
            pins: usize::try_from(moved).unwrap_or(usize::MAX),
        },
        tail,
    )))
}

impl PinStore for PgStore {
    fn pin(&self, server_key: &str, tool: &str) -> Result<Option<Pin>, StoreError> {
        let (server_key, tool) = (server_key.to_owned(), tool.to_owned());
        let sealer = self.sealer.clone();
        self.call(move |client| {
            client
                .query_opt(
                    &format!("SELECT {PIN_COLUMNS} FROM hintgate.pins WHERE server_key = $1 AND tool = $2"),
                    &[&server_key, &tool],
                )?
                .map(|row| row_to_pin(sealer.as_ref(), &row))
                .transpose()
        })
    }

    fn put_pin(&self, pin: &Pin) -> Result<(), StoreError> {
        self.put_pins(std::slice::from_ref(pin))
    }

    fn put_pins(&self, pins: &[Pin]) -> Result<(), StoreError> {
        let sealer = self.sealer.clone().ok_or(StoreError::Unsealed)?;
        let pins = pins.to_vec();
        self.call(move |client| {
            let mut tx = client.transaction()?;
            let statement = tx.prepare(
                "INSERT INTO hintgate.pins (server_key, tool, server, digest, definition, pinned_at, identity, seen_digest, seen_definition, seen_identity, tag)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, NULL, NULL, NULL, $8)
                 ON CONFLICT (server_key, tool) DO UPDATE SET server = $3, digest = $4, definition = $5,
                     pinned_at = $6, identity = $7, seen_digest = NULL, seen_definition = NULL,
                     seen_identity = NULL, tag = $8",
            )?;
            for pin in &pins {
                tx.execute(
                    &statement,
                    &[
                        &pin.server_key,
                        &pin.tool,
                        &pin.server,
                        &pin.digest,
                        &pin.definition.to_string(),
                        &pin.pinned_at,
                        &pin.identity,
                        &sealer.pin(pin),
                    ],
                )?;
            }
            tx.commit()?;
            Ok(())
        })
    }

    fn see(&self, server_key: &str, tool: &str, seen: &Seen) -> Result<(), StoreError> {
        let (server_key, tool, seen) = (server_key.to_owned(), tool.to_owned(), seen.clone());
        self.call(move |client| {
            client.execute(
                "UPDATE hintgate.pins SET seen_digest = $3, seen_definition = $4, seen_identity = $5
                 WHERE server_key = $1 AND tool = $2 AND digest != $3",
                &[
                    &server_key,
                    &tool,
                    &seen.digest,
                    &seen.definition.to_string(),
                    &seen.identity,
                ],
            )?;
            Ok(())
        })
    }

    fn clear_seen(&self, server_key: &str, tool: &str) -> Result<(), StoreError> {
        let (server_key, tool) = (server_key.to_owned(), tool.to_owned());
        self.call(move |client| {
            client.execute(
                "UPDATE hintgate.pins SET seen_digest = NULL, seen_definition = NULL, seen_identity = NULL
                 WHERE server_key = $1 AND tool = $2",
                &[&server_key, &tool],
            )?;
            Ok(())
        })
    }

    fn pins(&self) -> Result<Vec<Pin>, StoreError> {
        let sealer = self.sealer.clone();
        self.call(move |client| {
            client
                .query(
                    &format!("SELECT {PIN_COLUMNS} FROM hintgate.pins ORDER BY server, tool"),
                    &[],
                )?
                .iter()
                .map(|row| row_to_pin(sealer.as_ref(), row))
                .collect()
        })
    }

    // Tools are ordered by byte (`COLLATE "C"`), as in SQLite and in
    // memory, whatever the database's collation.
    fn pins_of(&self, server_key: &str) -> Result<Vec<Pin>, StoreError> {
        let server_key = server_key.to_owned();
        let sealer = self.sealer.clone();
        self.call(move |client| {
            client
                .query(
                    &format!(
                        "SELECT {PIN_COLUMNS} FROM hintgate.pins WHERE server_key = $1 ORDER BY tool COLLATE \"C\""
                    ),
                    &[&server_key],
                )?
                .iter()
                .map(|row| row_to_pin(sealer.as_ref(), row))
                .collect()
        })
    }

    fn approvals_of(&self, server_key: &str) -> Result<Vec<Approval>, StoreError> {
        let server_key = server_key.to_owned();
        let sealer = self.sealer.clone();
        let keying = Arc::clone(&self.keying);
        self.call(move |client| {
            client
                .query(
                    &format!(
                        "{} ORDER BY a.tool COLLATE \"C\"",
                        ALWAYS_READ
                            .replace("{s}", "hintgate.")
                            .replace("{key}", "$1")
                    ),
                    &[&server_key],
                )?
                .iter()
                .map(|row| {
                    Ok(pg_always(&server_key, row)?
                        .into_approval(sealer.as_ref(), keying.key.as_ref()))
                })
                .collect()
        })
    }

    fn rekey(&self, server: &str, to_key: &str) -> Result<Option<Rekeyed>, StoreError> {
        let sealer = self.sealer.clone().ok_or(StoreError::Unsealed)?;
        let (server, to_key) = (server.to_owned(), to_key.to_owned());
        let keying = Arc::clone(&self.keying);
        self.call(move |client| {
            let mut tx = client.transaction()?;
            // Two gateways may start the same server at once. `SELECT ...
            // FOR UPDATE` cannot lock the absence of pins under the new key,
            // so both could pass that check and move pins under each other;
            // a transaction-level advisory lock makes rekeys take turns, and
            // each statement after it (READ COMMITTED) sees what the one
            // before committed. It is released when the transaction ends.
            // (Rekeys take this lock before the log's, and nothing takes
            // them the other way round.)
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&REKEY_LOCK])?;
            let rekeyed = rekey_in(&mut tx, &sealer, &keying, &server, &to_key)?;
            if rekeyed.is_some() {
                // The standing approvals of a key left without pins may be
                // gone.
                tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &"always"])?;
            }
            tx.commit()?;
            Ok(rekeyed.map(|(rekeyed, tail)| {
                if let Some(tail) = tail {
                    keying.committed(&tail);
                }
                rekeyed
            }))
        })
    }

    fn revoke(&self, server_key: &str, tool: &str) -> Result<bool, StoreError> {
        let (server_key, tool) = (server_key.to_owned(), tool.to_owned());
        let keying = Arc::clone(&self.keying);
        self.call(move |client| {
            let mut tx = client.transaction()?;
            // The log's lock first: a grant of the same tool on another
            // gateway is either before this revocation or after it.
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&AUDIT_LOCK])?;
            let server = pinned_server(&mut tx, &server_key, &tool)?;
            let granted = tx
                .query_opt(
                    "SELECT kind FROM hintgate.approval_log WHERE server_key = $1 AND tool = $2
                     ORDER BY seq DESC LIMIT 1",
                    &[&server_key, &tool],
                )?
                .map(|row| row.try_get::<_, String>(0))
                .transpose()?
                .as_deref()
                == Some("grant");
            let approvals = tx.execute(
                "DELETE FROM hintgate.always WHERE server_key = $1 AND tool = $2",
                &[&server_key, &tool],
            )?;
            let removed = tx.execute(
                "DELETE FROM hintgate.pins WHERE server_key = $1 AND tool = $2",
                &[&server_key, &tool],
            )?;
            // INVARIANT: a standing approval is never removed without its
            // revocation record: a row put back later would approve again.
            let tail = if approvals > 0 || granted {
                let key = keying.key.as_ref().ok_or(StoreError::Unsealed)?;
                keying.may_append()?;
                let revoked = standing::revocation(
                    crate::unix_now(),
                    &server,
                    &server_key,
                    &tool,
                    standing::REVOKED,
                );
                Some(append_in(&mut tx, &[revoked], Some(key))?.1)
            } else {
                None
            };
            // Delivered to every listener when the revocation commits, so a
            // gateway drops a standing approval it keeps in memory.
            tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &"always"])?;
            tx.commit()?;
            if let Some(tail) = tail {
                keying.committed(&tail);
            }
            Ok(removed > 0)
        })
    }

    fn approve_always(&self, server_key: &str, tool: &str, digest: &str) -> Result<(), StoreError> {
        let sealer = self.sealer.clone().ok_or(StoreError::Unsealed)?;
        self.keying.may_append()?;
        let (server_key, tool, digest) =
            (server_key.to_owned(), tool.to_owned(), digest.to_owned());
        let keying = Arc::clone(&self.keying);
        self.call(move |client| {
            let mut tx = client.transaction()?;
            let server = pinned_server(&mut tx, &server_key, &tool)?;
            let grant = standing::grant(crate::unix_now(), &server, &server_key, &tool, &digest);
            let (_, tail) = append_in(&mut tx, &[grant], keying.key.as_ref())?;
            let granted = to_sql(tail.0);
            let tag = sealer.always(&server_key, &tool, &digest, granted);
            tx.execute(
                "INSERT INTO hintgate.always (server_key, tool, digest, tag, grant_seq)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (server_key, tool) DO UPDATE SET digest = $3, tag = $4, grant_seq = $5",
                &[&server_key, &tool, &digest, &tag, &granted],
            )?;
            // Delivered to every listener when the approval commits.
            tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &"always"])?;
            tx.commit()?;
            keying.committed(&tail);
            Ok(())
        })
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

impl AuditLog for PgStore {
    fn appends_later(&self) -> bool {
        true
    }

    /// The append's job is queued on the store's thread, behind any before
    /// it, and reports there: the caller's thread does not wait for the
    /// database.
    fn append_later(&self, entries: Vec<NewEntry>, done: crate::AppendDone) {
        if let Err(err) = self.keying.may_append() {
            done(Err(err));
            return;
        }
        let keying = Arc::clone(&self.keying);
        let job: Job = Box::new(move |connection| {
            done(connection.and_then(|connection| {
                let statements = connection.append_statements()?;
                let mut tx = connection.client.transaction()?;
                let (seqs, tail) = append_with(
                    &mut tx,
                    &entries,
                    keying.key.as_ref(),
                    [&statements.lock, &statements.tail, &statements.insert],
                )?;
                tx.commit()?;
                keying.committed(&tail);
                Ok(seqs)
            }));
        });
        let sent = self
            .jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .send(job);
        if let Err(std::sync::mpsc::SendError(job)) = sent {
            job(Err(StoreError::Address(
                "the store's thread ended".to_owned(),
            )));
        }
    }

    fn append(&self, entries: &[NewEntry]) -> Result<Vec<u64>, StoreError> {
        // The job runs on the store's thread, which outlives this call, so
        // it owns what it writes.
        self.keying.may_append()?;
        let entries = entries.to_vec();
        let keying = Arc::clone(&self.keying);
        self.call_on(move |connection| {
            let statements = connection.append_statements()?;
            let mut tx = connection.client.transaction()?;
            let (seqs, tail) = append_with(
                &mut tx,
                &entries,
                keying.key.as_ref(),
                [&statements.lock, &statements.tail, &statements.insert],
            )?;
            tx.commit()?;
            // After the commit, on the store's one thread, so this
            // gateway's heads are written in the order of its commits.
            keying.committed(&tail);
            Ok(seqs)
        })
    }

    fn entries(&self, after: u64, limit: usize) -> Result<Vec<Entry>, StoreError> {
        self.call(move |client| {
            let rows = client.query(
                "SELECT seq, at, kind, call_seq, body, prev, hash FROM hintgate.audit
                 WHERE seq > $1 ORDER BY seq LIMIT $2",
                &[
                    &to_sql(after),
                    &to_sql(u64::try_from(limit).unwrap_or(u64::MAX)),
                ],
            )?;
            rows.iter()
                .map(|row| {
                    Ok(Entry::from_stored(
                        from_sql(row.try_get(0)?),
                        row.try_get(1)?,
                        row.try_get(2)?,
                        row.try_get::<_, Option<i64>>(3)?.map(from_sql),
                        row.try_get(4)?,
                        row.try_get(5)?,
                        row.try_get(6)?,
                    ))
                })
                .collect()
        })
    }

    fn rows_below_one(&self, limit: usize) -> Result<(Vec<i64>, u64), StoreError> {
        self.call(move |client| {
            let count: i64 = client
                .query_one("SELECT count(*) FROM hintgate.audit WHERE seq < 1", &[])?
                .try_get(0)?;
            if count == 0 {
                return Ok((Vec::new(), 0));
            }
            let seqs = client
                .query(
                    "SELECT seq FROM hintgate.audit WHERE seq < 1 ORDER BY seq DESC LIMIT $1",
                    &[&to_sql(u64::try_from(limit).unwrap_or(u64::MAX))],
                )?
                .iter()
                .map(|row| row.try_get::<_, i64>(0))
                .collect::<Result<Vec<_>, _>>()?;
            Ok((seqs, from_sql(count)))
        })
    }

    fn approval_index(&self) -> Result<Option<Vec<IndexRow>>, StoreError> {
        self.call(move |client| {
            client
                .query(
                    "SELECT seq, kind, server_key, tool FROM hintgate.approval_log ORDER BY seq",
                    &[],
                )?
                .iter()
                .map(|row| {
                    Ok(IndexRow {
                        seq: row.try_get(0)?,
                        kind: row.try_get(1)?,
                        server_key: row.try_get(2)?,
                        tool: row.try_get(3)?,
                        // Typed columns.
                        typed: true,
                    })
                })
                .collect::<Result<Vec<_>, StoreError>>()
                .map(Some)
        })
    }

    fn accept_rollback(&self) -> Result<Option<AcceptedRollback>, StoreError> {
        if self.keying.head_path.is_none() {
            return Ok(None);
        }
        if self.keying.key.is_none() {
            return Err(StoreError::NoKey);
        }
        let keying = Arc::clone(&self.keying);
        self.call(move |client| {
            let mut tx = client.transaction()?;
            // Under the log's lock: nothing is appended between the check
            // and the record that accepts what it found.
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&AUDIT_LOCK])?;
            let found = keying.check_head(false, &mut PgEnd(&mut tx))?;
            let Some(rollback) = found else {
                keying.accepted();
                return Ok(None);
            };
            let (_, tail) = append_in(
                &mut tx,
                &[rollback.entry(crate::unix_now())],
                keying.key.as_ref(),
            )?;
            tx.commit()?;
            keying.committed(&tail);
            keying.accepted();
            Ok(Some(AcceptedRollback {
                seq: tail.0,
                rollback,
            }))
        })
    }

    fn audit_key(&self) -> Option<&AuditKey> {
        self.keying.key.as_ref()
    }

    fn head_path(&self) -> Option<&std::path::Path> {
        self.keying.head_path.as_deref()
    }

    fn head_made_with_key(&self) -> bool {
        self.keying.head_made_with_key
    }
}

/// A PostgreSQL row of [`PENDING_COLUMNS`], its seals checked by `sealer`.
fn row_to_pending(sealer: Option<&Sealer>, row: &::postgres::Row) -> Result<Pending, StoreError> {
    let mut pending = row_to_unchecked(row)?;
    let tag: Option<String> = row.try_get(16)?;
    let answer_tag: Option<String> = row.try_get(17)?;
    pending.check_seals(sealer, tag.as_deref(), answer_tag.as_deref());
    Ok(pending)
}

/// A PostgreSQL row of [`PENDING_COLUMNS`], its seals not yet checked.
fn row_to_unchecked(row: &::postgres::Row) -> Result<Pending, StoreError> {
    let offer: String = row.try_get(9)?;
    let state: String = row.try_get(10)?;
    let remember: Option<String> = row.try_get(12)?;
    Ok(Pending {
        id: from_sql(row.try_get(0)?),
        at: row.try_get(1)?,
        expires_at: row.try_get(2)?,
        session: row.try_get(3)?,
        server: row.try_get(4)?,
        server_key: row.try_get(5)?,
        tool: row.try_get(6)?,
        digest: row.try_get(7)?,
        prompt: row.try_get(8)?,
        details: crate::queue::details_from(row.try_get::<_, Option<String>>(15)?.as_deref()),
        offer: Remember::parse(&offer).unwrap_or(Remember::Call),
        state: crate::queue::state_from(
            &state,
            row.try_get(11)?,
            remember.as_deref(),
            row.try_get(13)?,
            row.try_get(14)?,
            row.try_get(18)?,
        ),
        seal: Seal::Unchecked,
    })
}

/// One entry, its seals checked by `sealer`; with `lock`, locked for the
/// rest of the transaction, and with its own seal.
fn pending_by_id(
    client: &mut impl ::postgres::GenericClient,
    sealer: Option<&Sealer>,
    id: u64,
    lock: bool,
) -> Result<Option<(Pending, Option<String>)>, StoreError> {
    let lock = if lock { " FOR UPDATE" } else { "" };
    client
        .query_opt(
            &format!("SELECT {PENDING_COLUMNS} FROM hintgate.approvals WHERE id = $1{lock}"),
            &[&to_sql(id)],
        )?
        .map(|row| Ok((row_to_pending(sealer, &row)?, row.try_get(16)?)))
        .transpose()
}

impl ApprovalQueue for PgStore {
    fn enqueue(&self, new: &NewPending) -> Result<u64, StoreError> {
        let sealer = self.sealer.clone().ok_or(StoreError::Unsealed)?;
        let new = new.clone();
        self.call(move |client| {
            let mut tx = client.transaction()?;
            let row = tx.query_one(
                "INSERT INTO hintgate.approvals (at, expires_at, session, server, server_key, tool, digest, prompt, offer, state, details)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'waiting', $10) RETURNING id",
                &[
                    &new.at,
                    &new.expires_at,
                    &new.session,
                    &new.server,
                    &new.server_key,
                    &new.tool,
                    &new.digest,
                    &new.prompt,
                    &new.offer.as_str(),
                    &new.details.as_ref().map(serde_json::Value::to_string),
                ],
            )?;
            let id = from_sql(row.try_get(0)?);
            // The seal covers the entry's number, known once it is in.
            tx.execute(
                "UPDATE hintgate.approvals SET tag = $2 WHERE id = $1",
                &[&to_sql(id), &sealer.entry(&new.fields(id))],
            )?;
            tx.commit()?;
            Ok(id)
        })
    }

    fn pending(&self, id: u64) -> Result<Option<Pending>, StoreError> {
        let sealer = self.sealer.clone();
        self.call(move |client| {
            Ok(pending_by_id(client, sealer.as_ref(), id, false)?.map(|(p, _)| p))
        })
    }

    fn waiting(&self, now: i64) -> Result<Vec<Pending>, StoreError> {
        let sealer = self.sealer.clone();
        self.call(move |client| {
            client
                .query(
                    &format!("SELECT {PENDING_COLUMNS} FROM hintgate.approvals WHERE state = 'waiting' AND expires_at > $1 ORDER BY id"),
                    &[&now],
                )?
                .iter()
                .map(|row| row_to_pending(sealer.as_ref(), row))
                .collect()
        })
    }

    fn answer(&self, id: u64, answer: &Answer, now: i64) -> Result<Answered, StoreError> {
        let sealer = self.sealer.clone().ok_or(StoreError::Unsealed)?;
        let answer = answer.clone();
        self.call(move |client| {
            let mut tx = client.transaction()?;
            // Locked: the entry whose seal is checked is the one answered.
            let answered = match pending_by_id(&mut tx, Some(&sealer), id, true)? {
                None => Answered::Unknown,
                Some((p, _)) if p.state != PendingState::Waiting => Answered::NotWaiting(p.state),
                Some((p, _)) if p.seal != Seal::Valid => Answered::Broken,
                Some((p, _)) if p.expires_at <= now => Answered::Expired,
                Some((_, tag)) => {
                    let answer_tag = sealer.answer(tag.as_deref().unwrap_or_default(), &answer);
                    tx.execute(
                        "UPDATE hintgate.approvals SET state = 'answered', approve = $2, remember = $3,
                             answered_by = $4, answer_tag = $5, arguments = $6
                         WHERE id = $1 AND state = 'waiting'",
                        &[
                            &to_sql(id),
                            &answer.approve,
                            &answer.remember.as_str(),
                            &answer.by,
                            &answer_tag,
                            &answer.arguments,
                        ],
                    )?;
                    // Delivered to every listener when the answer commits.
                    tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &id.to_string()])?;
                    Answered::Released
                }
            };
            tx.commit()?;
            Ok(answered)
        })
    }

    fn answers(&self, ids: &[u64]) -> Result<Vec<(u64, Answer)>, StoreError> {
        let ids: Vec<i64> = ids.iter().copied().map(to_sql).collect();
        let sealer = self.sealer.clone();
        self.call(move |client| {
            let rows = client.query(
                &format!("SELECT {PENDING_COLUMNS} FROM hintgate.approvals WHERE id = ANY($1) AND state = 'answered'"),
                &[&ids],
            )?;
            let mut answers = Vec::new();
            for row in &rows {
                let p = row_to_pending(sealer.as_ref(), row)?;
                if let PendingState::Answered(answer) = p.state {
                    answers.push((p.id, answer));
                }
            }
            Ok(answers)
        })
    }

    fn withdraw(&self, id: u64, why: &str) -> Result<Option<Answer>, StoreError> {
        let why = why.to_owned();
        let sealer = self.sealer.clone();
        self.call(move |client| {
            let changed = client.execute(
                "UPDATE hintgate.approvals SET state = 'withdrawn', why = $2 WHERE id = $1 AND state = 'waiting'",
                &[&to_sql(id), &why],
            )?;
            if changed > 0 {
                return Ok(None);
            }
            Ok(match pending_by_id(client, sealer.as_ref(), id, false)?.map(|(p, _)| p.state) {
                Some(PendingState::Answered(answer)) => Some(answer),
                _ => None,
            })
        })
    }

    fn watch(&self) -> Result<Box<dyn QueueWatch>, StoreError> {
        Ok(Box::new(PgWatch {
            config: self.config.clone(),
            client: None,
        }))
    }
}

/// Listens on the answers channel, on a connection of its own, opened on the
/// first wait (on the watching thread, outside any async runtime).
struct PgWatch {
    config: Config,
    client: Option<Client>,
}

impl std::fmt::Debug for PgWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgWatch")
            .field("listening", &self.client.is_some())
            .finish_non_exhaustive()
    }
}

impl QueueWatch for PgWatch {
    fn wait(&mut self, timeout: Duration) -> Result<(), StoreError> {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            let mut client = connect(&self.config)?;
            client.batch_execute(&format!("LISTEN {CHANNEL}"))?;
            self.client = Some(client);
            // Whatever was answered before the listening began is found by
            // the caller's check after this return.
            return Ok(());
        }
        let Some(client) = self.client.as_mut() else {
            return Ok(());
        };
        let mut notifications = client.notifications();
        let first = notifications.timeout_iter(timeout).next()?;
        if first.is_some() {
            // Take the rest that are already here, without waiting.
            let mut rest = notifications.iter();
            while rest.next()?.is_some() {}
        }
        Ok(())
    }
}

// Entry kinds are stored by name, as in SQLite.
impl crate::TokenStore for PgStore {
    fn add_token(&self, name: &str, hash: &str, scope: &str) -> Result<(), StoreError> {
        let sealer = self.sealer.as_ref().ok_or(StoreError::Unsealed)?;
        let created_at = crate::unix_now();
        let tag = sealer.token(name, hash, scope, created_at);
        let (name, hash, scope) = (name.to_owned(), hash.to_owned(), scope.to_owned());
        let shown = name.clone();
        let added = self.call(move |client| {
            Ok(client.execute(
                "INSERT INTO hintgate.tokens (name, hash, scope, created_at, tag)
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                &[&name, &hash, &scope, &created_at, &tag],
            )?)
        })?;
        if added == 0 {
            return Err(StoreError::TokenExists(shown));
        }
        Ok(())
    }

    fn tokens(&self) -> Result<Vec<crate::TokenRow>, StoreError> {
        let rows = self.call(|client| {
            Ok(client.query(
                "SELECT name, hash, scope, created_at, tag FROM hintgate.tokens ORDER BY name",
                &[],
            )?)
        })?;
        Ok(rows
            .into_iter()
            .map(|row| {
                let hash: String = row.get(1);
                crate::token_row(
                    self.sealer.as_ref(),
                    row.get(0),
                    &hash,
                    row.get(2),
                    row.get(3),
                    row.get(4),
                )
            })
            .collect())
    }

    fn revoke_token(&self, name: &str) -> Result<bool, StoreError> {
        let name = name.to_owned();
        let removed = self.call(move |client| {
            Ok(client.execute("DELETE FROM hintgate.tokens WHERE name = $1", &[&name])?)
        })?;
        Ok(removed > 0)
    }

    fn find_token(&self, hash: &str) -> Result<Option<crate::TokenRow>, StoreError> {
        let owned = hash.to_owned();
        let row = self.call(move |client| {
            Ok(client.query_opt(
                "SELECT name, scope, created_at, tag FROM hintgate.tokens WHERE hash = $1",
                &[&owned],
            )?)
        })?;
        Ok(row
            .map(|row| {
                crate::token_row(
                    self.sealer.as_ref(),
                    row.get(0),
                    hash,
                    row.get(1),
                    row.get(2),
                    row.get(3),
                )
            })
            .filter(|row| row.seal == crate::Seal::Valid))
    }
}

/// The columns of an idempotency record, in the order the queries name them.
const PG_KEY_COLUMNS: &str =
    "scope, state, owner, principal, arguments, claimed_at, done_at, result, tag";

fn pg_key_row(row: &::postgres::Row) -> crate::idempotency::KeyRow {
    crate::idempotency::KeyRow {
        scope: row.get(0),
        state: row.get(1),
        owner: row.get(2),
        principal: row.get(3),
        arguments: row.get(4),
        claimed_at: row.get(5),
        done_at: row.get(6),
        result: row.get(7),
        tag: row.get(8),
    }
}

fn pg_put_key_row(
    tx: &mut ::postgres::Transaction<'_>,
    row: &crate::idempotency::KeyRow,
    on_conflict: &str,
) -> Result<u64, StoreError> {
    Ok(tx.execute(
        &format!(
            "INSERT INTO hintgate.idempotency ({PG_KEY_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) {on_conflict}"
        ),
        &[
            &row.scope,
            &row.state,
            &row.owner,
            &row.principal,
            &row.arguments,
            &row.claimed_at,
            &row.done_at,
            &row.result,
            &row.tag,
        ],
    )?)
}

impl PgStore {
    fn key_tools(&self) -> Result<(Sealer, crate::idempotency::KeyCipher), StoreError> {
        let key = self.keying.key.as_ref().ok_or(StoreError::Unsealed)?;
        Ok((Sealer::of(key), crate::idempotency::KeyCipher::of(key)?))
    }
}

impl crate::IdempotencyStore for PgStore {
    fn key_record(
        &self,
        scope: &str,
        now: i64,
        window_s: i64,
    ) -> Result<Option<crate::KeyRecord>, StoreError> {
        let (sealer, cipher) = self.key_tools()?;
        let scope = scope.to_owned();
        let oldest = now.saturating_sub(window_s);
        let row = self.call(move |client| {
            Ok(client.query_opt(
                &format!(
                    "SELECT {PG_KEY_COLUMNS} FROM hintgate.idempotency WHERE scope = $1 AND claimed_at > $2"
                ),
                &[&scope, &oldest],
            )?)
        })?;
        Ok(row.map(|row| pg_key_row(&row).open(Some(&sealer), Some(&cipher))))
    }

    fn claim_key(
        &self,
        claim: &crate::KeyClaim<'_>,
    ) -> Result<Option<crate::KeyRecord>, StoreError> {
        let (sealer, cipher) = self.key_tools()?;
        let fresh = crate::idempotency::KeyRow::claimed(claim, &sealer);
        let oldest = claim.now.saturating_sub(claim.window_s);
        let found = self.call(move |client| {
            let mut tx = client.transaction()?;
            tx.execute(
                "DELETE FROM hintgate.idempotency WHERE claimed_at <= $1",
                &[&oldest],
            )?;
            // Of two gateways claiming at once, one inserts; the other's
            // insert waits for it, then does nothing and reads its row.
            let inserted = pg_put_key_row(&mut tx, &fresh, "ON CONFLICT (scope) DO NOTHING")?;
            let found = if inserted == 1 {
                None
            } else {
                tx.query_opt(
                    &format!("SELECT {PG_KEY_COLUMNS} FROM hintgate.idempotency WHERE scope = $1"),
                    &[&fresh.scope],
                )?
                .map(|row| pg_key_row(&row))
            };
            tx.commit()?;
            Ok(found)
        })?;
        Ok(found.map(|row| row.open(Some(&sealer), Some(&cipher))))
    }

    fn end_key(
        &self,
        scope: &str,
        owner: &str,
        end: crate::KeyEnd<'_>,
        now: i64,
    ) -> Result<(), StoreError> {
        let (sealer, cipher) = self.key_tools()?;
        let (scope, owner) = (scope.to_owned(), owner.to_owned());
        let end = match end {
            crate::KeyEnd::Done(result) => Ended::Done(result.map(str::to_owned)),
            crate::KeyEnd::Unknown => Ended::Unknown,
            crate::KeyEnd::Released => Ended::Released,
        };
        self.call(move |client| {
            let mut tx = client.transaction()?;
            let found = tx.query_opt(
                &format!(
                    "SELECT {PG_KEY_COLUMNS} FROM hintgate.idempotency
                     WHERE scope = $1 AND owner = $2 AND state = 'running' FOR UPDATE"
                ),
                &[&scope, &owner],
            )?;
            if let Some(row) = found {
                let end = match &end {
                    Ended::Done(result) => crate::KeyEnd::Done(result.as_deref()),
                    Ended::Unknown => crate::KeyEnd::Unknown,
                    Ended::Released => crate::KeyEnd::Released,
                };
                match pg_key_row(&row).ended(end, now, &sealer, &cipher)? {
                    Some(row) => {
                        tx.execute(
                            "DELETE FROM hintgate.idempotency WHERE scope = $1",
                            &[&scope],
                        )?;
                        pg_put_key_row(&mut tx, &row, "")?;
                    }
                    None => {
                        tx.execute(
                            "DELETE FROM hintgate.idempotency WHERE scope = $1",
                            &[&scope],
                        )?;
                    }
                }
            }
            tx.commit()?;
            Ok(())
        })
    }
}

/// The columns of an upstream grant, in the order the queries name them.
const PG_GRANT_COLUMNS: &str = "server, principal, scope, expires_at, updated_at, secret, tag";

fn pg_grant_row(row: &::postgres::Row) -> crate::upstream::GrantRow {
    crate::upstream::GrantRow {
        server: row.get(0),
        principal: row.get(1),
        scope: row.get(2),
        expires_at: row.get(3),
        updated_at: row.get(4),
        secret: row.get(5),
        tag: row.get(6),
    }
}

impl PgStore {
    fn grant_tools(&self) -> Result<crate::upstream::GrantTools, StoreError> {
        let key = self.keying.key.as_ref().ok_or(StoreError::Unsealed)?;
        crate::upstream::GrantTools::of(key)
    }
}

impl crate::UpstreamTokenStore for PgStore {
    fn put_grant(&self, grant: &crate::NewGrant<'_>) -> Result<(), StoreError> {
        let row = self.grant_tools()?.row(grant)?;
        self.call(move |client| {
            client.execute(
                &format!(
                    "INSERT INTO hintgate.upstream_grants ({PG_GRANT_COLUMNS})
                     VALUES ($1, $2, $3, $4, $5, $6, $7)
                     ON CONFLICT (server, principal) DO UPDATE SET
                         scope = EXCLUDED.scope, expires_at = EXCLUDED.expires_at,
                         updated_at = EXCLUDED.updated_at, secret = EXCLUDED.secret,
                         tag = EXCLUDED.tag"
                ),
                &[
                    &row.server,
                    &row.principal,
                    &row.scope,
                    &row.expires_at,
                    &row.updated_at,
                    &row.secret,
                    &row.tag,
                ],
            )?;
            Ok(())
        })
    }

    fn grant(&self, server: &str, principal: &str) -> Result<Option<crate::KeptGrant>, StoreError> {
        let tools = self.grant_tools()?;
        let (server, principal) = (server.to_owned(), principal.to_owned());
        let row = self.call(move |client| {
            Ok(client.query_opt(
                &format!(
                    "SELECT {PG_GRANT_COLUMNS} FROM hintgate.upstream_grants
                     WHERE server = $1 AND principal = $2"
                ),
                &[&server, &principal],
            )?)
        })?;
        Ok(row.map(|row| tools.open(&pg_grant_row(&row))))
    }

    fn grants(&self) -> Result<Vec<crate::GrantInfo>, StoreError> {
        let rows = self.call(|client| {
            Ok(client.query(
                &format!(
                    "SELECT {PG_GRANT_COLUMNS} FROM hintgate.upstream_grants
                     ORDER BY server, principal"
                ),
                &[],
            )?)
        })?;
        Ok(rows
            .iter()
            .map(|row| crate::upstream::info_of(&pg_grant_row(row), self.sealer.as_ref()))
            .collect())
    }

    fn delete_grant(&self, server: &str, principal: &str) -> Result<bool, StoreError> {
        let (server, principal) = (server.to_owned(), principal.to_owned());
        let removed = self.call(move |client| {
            Ok(client.execute(
                "DELETE FROM hintgate.upstream_grants WHERE server = $1 AND principal = $2",
                &[&server, &principal],
            )?)
        })?;
        Ok(removed > 0)
    }
}

/// [`crate::KeyEnd`], owned, for the store's thread.
enum Ended {
    Done(Option<String>),
    Unknown,
    Released,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EntryKind;

    #[test]
    fn addresses_are_shown_without_their_password() {
        assert_eq!(
            shown("postgres://gate:s3cret@db.example:5432/hintgate"),
            "postgres://gate@db.example:5432/hintgate"
        );
        assert_eq!(shown("postgres://db.example/h"), "postgres://db.example/h");
        assert!(!shown("postgresql://a:b:c@h/d").contains('b'));
    }

    fn bounded(url: &str) -> Config {
        let mut config: Config = url.parse().unwrap();
        bound(&mut config);
        config
    }

    #[test]
    fn the_store_bounds_what_the_address_leaves_open_and_keeps_what_it_sets() {
        let ten_s = "-c statement_timeout=10000";
        let open = bounded("postgres://gate@db/h");
        assert_eq!(open.get_connect_timeout(), Some(&STORE_TIMEOUT));
        assert_eq!(open.get_tcp_user_timeout(), Some(&STORE_TIMEOUT));
        assert_eq!(open.get_options(), Some(ten_s));
        assert!(open.get_keepalives(), "keepalives are on by default");

        // Options that set something else keep it, and get the bound too.
        let other = bounded("postgres://gate@db/h?options=-c%20search_path%3Dgate");
        assert_eq!(
            other.get_options(),
            Some(format!("-c search_path=gate {ten_s}").as_str())
        );

        // Options that set the statement timeout, however spelled, win.
        for (url, options) in [
            (
                "postgres://gate@db/h?options=-c%20statement_timeout%3D0",
                "-c statement_timeout=0",
            ),
            (
                "postgres://gate@db/h?options=--statement-timeout%3D500",
                "--statement-timeout=500",
            ),
            (
                "postgres://gate@db/h?options=-c%20search_path%3Dgate%20-c%20Statement_Timeout%3D5s",
                "-c search_path=gate -c Statement_Timeout=5s",
            ),
        ] {
            assert_eq!(bounded(url).get_options(), Some(options), "{url}");
        }

        // The address's own bounds and keepalive choice stand.
        let own = bounded("postgres://gate@db/h?connect_timeout=3&tcp_user_timeout=4&keepalives=0");
        assert_eq!(own.get_connect_timeout(), Some(&Duration::from_secs(3)));
        assert_eq!(own.get_tcp_user_timeout(), Some(&Duration::from_secs(4)));
        assert!(!own.get_keepalives());
    }

    #[test]
    fn entry_kinds_have_stable_names() {
        use crate::entry::kind_from;
        for (kind, name) in [
            (EntryKind::Call, "call"),
            (EntryKind::Outcome, "outcome"),
            (EntryKind::Outcomes, "outcomes"),
        ] {
            assert_eq!(kind_name(kind), name);
            assert_eq!(kind_from(name), Some(kind));
        }
        assert_eq!(kind_from("note"), None);
    }
}
