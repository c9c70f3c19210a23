//! The state directory and the store in it, with the audit log's key and
//! head.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use hintgate_store::{
    AuditKey, AuditSetup, HeadPlace, KeyError, KeySource, PgStore, SqliteStore, Store,
};

/// The variable that names the store when no `--store` flag does.
pub const STORE_VAR: &str = "HINTGATE_STORE";

/// The variable that names the audit key's file when no `--audit-key` flag
/// does.
pub const AUDIT_KEY_VAR: &str = "HINTGATE_AUDIT_KEY_FILE";

/// The state directory: `--state-dir`, else `$HINTGATE_STATE_DIR`, else
/// `$XDG_DATA_HOME/hintgate`, else `~/.local/share/hintgate`.
pub fn state_dir(flag: Option<&Path>) -> Result<PathBuf> {
    if let Some(dir) = flag {
        return Ok(dir.to_owned());
    }
    let var = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
    if let Some(dir) = var("HINTGATE_STATE_DIR") {
        return Ok(PathBuf::from(dir));
    }
    if let Some(data) = var("XDG_DATA_HOME") {
        return Ok(PathBuf::from(data).join("hintgate"));
    }
    let home =
        var("HOME").context("no state directory: set --state-dir, HINTGATE_STATE_DIR or HOME")?;
    Ok(PathBuf::from(home).join(".local/share/hintgate"))
}

/// Which store to open, and the audit key's file, as the user gave them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Choice<'a> {
    /// `--state-dir`.
    pub state_dir: Option<&'a Path>,
    /// `--store`.
    pub store: Option<&'a str>,
    /// The config's `[gateway] store`, expanded.
    pub configured_store: Option<&'a str>,
    /// `--audit-key`.
    pub key: Option<&'a Path>,
    /// The config's `[audit] key_file`, expanded.
    pub configured_key: Option<&'a str>,
    /// The config's `[audit] witness` (expanded) and cadence, for a
    /// gateway; `None`: the defaults.
    pub witness: Option<&'a hintgate_store::WitnessSettings>,
}

/// What a command needs of the audit log.
#[derive(Debug, Clone)]
pub enum Use {
    /// `hintgate run`: the key to chain records (made on first use for
    /// SQLite, required for PostgreSQL) and the head to write.
    Gateway,
    /// `hintgate log`: the key when there is one (never made), and the
    /// head (`--head`, else where the gateway writes it).
    Log {
        /// `--head`.
        head: Option<PathBuf>,
    },
    /// Pins and approvals: the key when there is one (never made), which
    /// checks the seals of pins, standing approvals and the queue, seals
    /// what a person approves and chains the revocations of standing
    /// approvals into the log; and the head where the gateway writes it,
    /// which such a record moves on (so a copy of the database from before
    /// it is told from the current one).
    Rows,
    /// Neither.
    Other,
}

/// The audit key a command opened the store with, for what it reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyFile {
    /// Read from this file.
    Read(PathBuf, String),
    /// This file, which is not there.
    Missing(PathBuf),
    /// None was named (a PostgreSQL store without `--audit-key`,
    /// `$HINTGATE_AUDIT_KEY_FILE` or `[audit] key_file`).
    NotNamed,
}

/// An opened store, and what became of its audit key.
pub struct Opened {
    /// The store.
    pub store: Arc<dyn Store>,
    /// The key it was opened with.
    pub key: KeyFile,
    /// The `[audit] witness` of `--config`, expanded, when a command that
    /// reads the store was given one ([`open_store_of`]).
    pub configured_witness: Option<PathBuf>,
}

/// Opens the store: the one `--store`, else `$HINTGATE_STORE`, else the
/// config's `[gateway] store` names (`postgres://...` or `sqlite:PATH`),
/// else SQLite in the state directory, creating both when needed; with the
/// audit key and head `usage` needs.
///
/// The key's file is `--audit-key`, else `$HINTGATE_AUDIT_KEY_FILE`, else the
/// config's `[audit] key_file`, else (SQLite only) `audit.key` beside the
/// database. A PostgreSQL store is shared by gateways on several machines,
/// which must chain its one log under one key: a gateway on it needs the key
/// file named, and will not start without.
pub fn open_store(choice: &Choice<'_>, usage: &Use) -> Result<Opened> {
    let from_env = std::env::var(STORE_VAR)
        .ok()
        .filter(|value| !value.is_empty());
    let key_path = key_path(choice);
    let db = match choice
        .store
        .or(from_env.as_deref())
        .or(choice.configured_store)
    {
        Some(address)
            if address.starts_with("postgres://") || address.starts_with("postgresql://") =>
        {
            return open_postgres(address, choice, key_path, usage);
        }
        Some(address) => match address.strip_prefix("sqlite:") {
            Some(path) => PathBuf::from(path),
            None => {
                return Err(crate::load::InputError(format!(
                    "the store must be `postgres://...` or `sqlite:PATH`, not `{}`",
                    address.split("://").next().unwrap_or(address)
                ))
                .into());
            }
        },
        None => {
            let dir = state_dir(choice.state_dir)?;
            std::fs::create_dir_all(&dir).with_context(|| {
                format!("cannot create the state directory `{}`", dir.display())
            })?;
            dir.join("state.db")
        }
    };
    let key_path = key_path.unwrap_or_else(|| SqliteStore::key_path(&db));
    let (audit, key) = match usage {
        Use::Gateway => (
            AuditSetup {
                key: KeySource::File(key_path.clone()),
                head: HeadPlace::File(SqliteStore::head_path(&db)),
                checkpoints: true,
                witness: choice.witness.cloned().unwrap_or_default(),
            },
            None,
        ),
        Use::Log { head } => {
            let (source, key) = read_key(&key_path)?;
            (
                AuditSetup {
                    key: source,
                    head: HeadPlace::File(
                        head.clone().unwrap_or_else(|| SqliteStore::head_path(&db)),
                    ),
                    checkpoints: false,
                    witness: Default::default(),
                },
                Some(key),
            )
        }
        Use::Rows => {
            let (source, key) = read_key(&key_path)?;
            (
                AuditSetup {
                    key: source,
                    head: HeadPlace::File(SqliteStore::head_path(&db)),
                    ..AuditSetup::default()
                },
                Some(key),
            )
        }
        Use::Other => (AuditSetup::default(), Some(KeyFile::NotNamed)),
    };
    let store = SqliteStore::open_with(&db, audit)
        .with_context(|| format!("cannot open the store `{}`", db.display()))?;
    let key = key.unwrap_or_else(|| match hintgate_store::AuditLog::audit_key(&store) {
        Some(opened) => KeyFile::Read(key_path, opened.id().to_owned()),
        None => KeyFile::NotNamed,
    });
    Ok(Opened {
        store: Arc::new(store),
        key,
        configured_witness: None,
    })
}

/// Opens a PostgreSQL store: see [`open_store`].
fn open_postgres(
    address: &str,
    choice: &Choice<'_>,
    key_path: Option<PathBuf>,
    usage: &Use,
) -> Result<Opened> {
    let (audit, key) = match usage {
        Use::Gateway => {
            let Some(path) = key_path else {
                return Err(crate::load::InputError(format!(
                    "a PostgreSQL store needs the audit key that every gateway on it shares: name its file with `--audit-key FILE`, `{AUDIT_KEY_VAR}` or `[audit] key_file` (the first gateway makes it there; copy it, readable only by its user, to the others)"
                ))
                .into());
            };
            // Each gateway keeps the head of the shared log that it wrote
            // last, on its own machine.
            let dir = state_dir(choice.state_dir)?;
            std::fs::create_dir_all(&dir).with_context(|| {
                format!("cannot create the state directory `{}`", dir.display())
            })?;
            (
                AuditSetup {
                    key: KeySource::File(path.clone()),
                    head: HeadPlace::Directory(dir),
                    checkpoints: true,
                    witness: choice.witness.cloned().unwrap_or_default(),
                },
                KeyFile::Read(path, String::new()),
            )
        }
        Use::Log { head } => {
            let (source, key) = match key_path {
                Some(path) => read_key(&path)?,
                None => (KeySource::None, KeyFile::NotNamed),
            };
            // Where a gateway on this machine writes its head; nothing is
            // made here.
            let head = match head {
                Some(file) => HeadPlace::File(file.clone()),
                None => state_dir(choice.state_dir).map_or(HeadPlace::None, HeadPlace::Directory),
            };
            (
                AuditSetup {
                    key: source,
                    head,
                    checkpoints: false,
                    witness: Default::default(),
                },
                key,
            )
        }
        Use::Rows => {
            let (source, key) = match key_path {
                Some(path) => read_key(&path)?,
                None => (KeySource::None, KeyFile::NotNamed),
            };
            // This machine's head of the shared log, where a gateway here
            // keeps it; none on a machine that runs no gateway.
            let head = state_dir(choice.state_dir)
                .ok()
                .filter(|dir| dir.is_dir())
                .map_or(HeadPlace::None, HeadPlace::Directory);
            (
                AuditSetup {
                    key: source,
                    head,
                    ..AuditSetup::default()
                },
                key,
            )
        }
        Use::Other => (AuditSetup::default(), KeyFile::NotNamed),
    };
    let store = PgStore::open_with(address, audit).context("cannot open the PostgreSQL store")?;
    let key = match key {
        KeyFile::Read(path, _) => match hintgate_store::AuditLog::audit_key(&store) {
            Some(opened) => KeyFile::Read(path, opened.id().to_owned()),
            None => KeyFile::NotNamed,
        },
        other => other,
    };
    Ok(Opened {
        store: Arc::new(store),
        key,
        configured_witness: None,
    })
}

/// The key file the user named: `--audit-key`, else the variable, else
/// `[audit] key_file`.
fn key_path(choice: &Choice<'_>) -> Option<PathBuf> {
    choice
        .key
        .map(Path::to_owned)
        .or_else(|| {
            std::env::var_os(AUDIT_KEY_VAR)
                .filter(|value| !value.is_empty())
                .map(PathBuf::from)
        })
        .or_else(|| choice.configured_key.map(PathBuf::from))
}

/// Reads the key file at `path` for a command that reads the log: a missing
/// file is no key (never made here); one others may read is refused.
fn read_key(path: &Path) -> Result<(KeySource, KeyFile)> {
    match AuditKey::load(path) {
        Ok(key) => {
            let id = key.id().to_owned();
            Ok((KeySource::Given(key), KeyFile::Read(path.to_owned(), id)))
        }
        Err(KeyError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Ok((KeySource::None, KeyFile::Missing(path.to_owned())))
        }
        Err(err) => Err(err.into()),
    }
}

/// Opens the store for a command that reads it (`pins`, `log`,
/// `approvals`): as [`open_store`], with the `[gateway] store` and
/// `[audit] key_file` of the config file `--config`, when given (their
/// `${VAR}` expanded); its `[audit] witness` is handed back in
/// [`Opened::configured_witness`].
pub fn open_store_of(
    at: &crate::args::StoreArgs,
    key: Option<&Path>,
    usage: &Use,
) -> Result<Opened> {
    let (configured_store, configured_key, configured_witness) = match at.config.as_deref() {
        Some(path) => {
            let loaded = crate::load::config(path)?;
            let Some(config) = loaded.config else {
                return Err(crate::load::InputError(loaded.render()).into());
            };
            let expand = |text: Option<&str>, key: &str| {
                text.map(|text| hintgate_policy::vars::expand(text, &crate::load::ProcessEnv))
                    .transpose()
                    .map_err(|err| crate::load::InputError(format!("{key}: {err}")))
            };
            (
                expand(config.gateway.store.as_deref(), "gateway.store")?,
                expand(config.audit.key_file.as_deref(), "audit.key_file")?,
                expand(config.audit.witness.as_deref(), "audit.witness")?,
            )
        }
        None => (None, None, None),
    };
    let mut opened = open_store(
        &Choice {
            state_dir: at.state_dir.as_deref(),
            store: at.store.as_deref(),
            configured_store: configured_store.as_deref(),
            key,
            configured_key: configured_key.as_deref(),
            witness: None,
        },
        usage,
    )?;
    opened.configured_witness = configured_witness.map(PathBuf::from);
    Ok(opened)
}
