//! The state directory and the store in it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use hintgate_store::{PgStore, SqliteStore, Store};

/// The variable that names the store when no `--store` flag does.
pub const STORE_VAR: &str = "HINTGATE_STORE";

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

/// Opens the store: the one `store` names (`--store`, else
/// `$HINTGATE_STORE`, else the config's `[gateway] store` passed as
/// `configured`), else SQLite in the state directory, creating both when
/// needed.
pub fn open_store(
    state_flag: Option<&Path>,
    store: Option<&str>,
    configured: Option<&str>,
) -> Result<Arc<dyn Store>> {
    let from_env = std::env::var(STORE_VAR)
        .ok()
        .filter(|value| !value.is_empty());
    if let Some(address) = store.or(from_env.as_deref()).or(configured) {
        return open_address(address);
    }
    let dir = state_dir(state_flag)?;
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create the state directory `{}`", dir.display()))?;
    let path = dir.join("state.db");
    let store = SqliteStore::open(&path)
        .with_context(|| format!("cannot open the store `{}`", path.display()))?;
    Ok(Arc::new(store))
}

/// Opens the store for a command that reads it (`pins`, `log`,
/// `approvals`): as [`open_store`], with the `[gateway] store` of the config
/// file `--config`, when given (its `${VAR}` expanded).
pub fn open_store_of(at: &crate::args::StoreArgs) -> Result<Arc<dyn Store>> {
    let configured = match at.config.as_deref() {
        Some(path) => {
            let loaded = crate::load::config(path)?;
            let Some(config) = loaded.config else {
                return Err(crate::load::InputError(loaded.render()).into());
            };
            config
                .gateway
                .store
                .as_deref()
                .map(|text| hintgate_policy::vars::expand(text, &crate::load::ProcessEnv))
                .transpose()
                .map_err(|err| crate::load::InputError(format!("gateway.store: {err}")))?
        }
        None => None,
    };
    open_store(
        at.state_dir.as_deref(),
        at.store.as_deref(),
        configured.as_deref(),
    )
}

/// Opens the store at an address: `postgres://`, `postgresql://` or
/// `sqlite:PATH`.
fn open_address(address: &str) -> Result<Arc<dyn Store>> {
    if address.starts_with("postgres://") || address.starts_with("postgresql://") {
        let store = PgStore::open(address).context("cannot open the PostgreSQL store")?;
        return Ok(Arc::new(store));
    }
    if let Some(path) = address.strip_prefix("sqlite:") {
        let path = Path::new(path);
        let store = SqliteStore::open(path)
            .with_context(|| format!("cannot open the store `{}`", path.display()))?;
        return Ok(Arc::new(store));
    }
    Err(crate::load::InputError(format!(
        "the store must be `postgres://...` or `sqlite:PATH`, not `{}`",
        address.split("://").next().unwrap_or(address)
    ))
    .into())
}
