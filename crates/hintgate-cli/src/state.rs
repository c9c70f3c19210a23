//! The state directory and the store in it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use hintgate_store::{SqliteStore, Store};

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

/// Opens the store in the state directory, creating both when needed.
pub fn open_store(flag: Option<&Path>) -> Result<Arc<dyn Store>> {
    let dir = state_dir(flag)?;
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create the state directory `{}`", dir.display()))?;
    let path = dir.join("state.db");
    let store = SqliteStore::open(&path)
        .with_context(|| format!("cannot open the store `{}`", path.display()))?;
    Ok(Arc::new(store))
}
