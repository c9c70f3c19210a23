//! Reading files at the edge: the policy core never touches the filesystem.

use std::path::Path;

use hintgate_policy::config::{self, ValidConfig};
use hintgate_policy::diag::Diagnostic;
use hintgate_policy::vars::Vars;
use serde_json::Value;

/// A problem with a file the user named: bad usage, exit 64.
#[derive(Debug)]
pub struct InputError(pub String);

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InputError {}

/// The process environment, the source of `${VAR}` values at the edge.
#[derive(Debug, Clone, Copy)]
pub struct ProcessEnv;

impl Vars for ProcessEnv {
    fn get(&self, key: &str) -> Option<String> {
        std::env::var(key).ok()
    }
}

/// A configuration file's text and what validation made of it.
#[derive(Debug)]
pub struct LoadedConfig {
    /// The path as the user gave it.
    pub path: String,
    /// The file's text.
    pub source: String,
    /// The configuration, when it has no errors.
    pub config: Option<ValidConfig>,
    /// Every problem found, sorted by position.
    pub diagnostics: Vec<Diagnostic>,
}

impl LoadedConfig {
    /// All diagnostics rendered for a terminal.
    pub fn render(&self) -> String {
        self.diagnostics
            .iter()
            .map(|diagnostic| diagnostic.render(&self.path, &self.source))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Reads and validates a configuration file.
pub fn config(path: &Path) -> Result<LoadedConfig, InputError> {
    let source = read(path, "config")?;
    let (config, diagnostics) = config::parse_str_checking_vars(&source, &ProcessEnv);
    Ok(LoadedConfig {
        path: path.display().to_string(),
        source,
        config,
        diagnostics,
    })
}

/// Reads a JSON file.
pub fn json(path: &Path, what: &str) -> Result<Value, InputError> {
    let text = read(path, what)?;
    match serde_json::from_str(&text) {
        Ok(value) => Ok(value),
        Err(error) => Err(InputError(format!(
            "{what} `{}` is not JSON: {} at line {}, column {}",
            path.display(),
            error_text(&error),
            error.line(),
            error.column()
        ))),
    }
}

/// Reads a text file the user named.
pub fn text(path: &Path, what: &str) -> Result<String, InputError> {
    read(path, what)
}

fn read(path: &Path, what: &str) -> Result<String, InputError> {
    std::fs::read_to_string(path)
        .map_err(|error| InputError(format!("cannot read {what} `{}`: {error}", path.display())))
}

fn error_text(error: &serde_json::Error) -> String {
    let text = error.to_string();
    // serde_json appends " at line L column C"; the caller says it better.
    match text.rfind(" at line ") {
        Some(idx) => text.get(..idx).unwrap_or(&text).to_owned(),
        None => text,
    }
}
