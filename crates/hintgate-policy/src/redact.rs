//! Redaction of tool-call arguments before they are written to the audit log.
//!
//! Two kinds of pattern, configured under `[audit] redact` (design §8):
//!
//! - a JSON pointer (RFC 6901, starting with `/`) names one place in the
//!   arguments, such as `/credentials/password`; a `*` token stands for any
//!   key or array index at its depth (`/accounts/*/pin`);
//! - anything else is a glob over key names, matched case-insensitively at any
//!   depth (`*token*`, `ssn`).
//!
//! The value at a matching place is replaced whole, objects and arrays
//! included, by [`REDACTED`]. Unless `redact_defaults = false`, keys that look
//! like secrets ([`DEFAULT_KEY_PATTERNS`]) are redacted too.

use serde_json::Value;

use crate::glob::{Glob, GlobError};

/// What a redacted value is replaced by.
pub const REDACTED: &str = "[redacted]";

/// The built-in patterns: keys that look like secrets, case-insensitively.
pub const DEFAULT_KEY_PATTERNS: [&str; 11] = [
    "*password*",
    "*passwd*",
    "*secret*",
    "*token*",
    "*apikey*",
    "*api_key*",
    "*api-key*",
    "*authorization*",
    "*cookie*",
    "*credential*",
    "*private_key*",
];

/// One redaction pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// A JSON pointer into the arguments, as its unescaped tokens (`*`
    /// matches any one key or index).
    Pointer {
        /// The pointer as written.
        source: String,
        /// Its tokens, unescaped.
        tokens: Vec<String>,
    },
    /// A glob over key names, compiled in lowercase and matched against the
    /// lowercased key.
    Key(Glob),
}

/// Why a redaction pattern cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PatternError {
    /// A `~` in a JSON pointer that is not `~0` or `~1`.
    #[error("`~` must be followed by `0` (for `~`) or `1` (for `/`) in a JSON pointer")]
    BadEscape,
    /// A key glob that does not compile.
    #[error(transparent)]
    Glob(#[from] GlobError),
}

/// The `[audit]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditSettings {
    /// The configured patterns, in file order.
    pub redact: Vec<Pattern>,
    /// Whether [`DEFAULT_KEY_PATTERNS`] apply as well (default: yes).
    pub redact_defaults: bool,
    /// The audit key's file (`key_file`), an absolute path that may hold
    /// `${VAR}` references, expanded at start-up; `None`: the default (for
    /// SQLite, `audit.key` beside the database; a PostgreSQL store needs
    /// one, the same on every gateway).
    pub key_file: Option<String>,
}

/// Redacts arguments by a set of patterns.
#[derive(Debug, Clone)]
pub struct Redactor {
    keys: Vec<Glob>,
    pointers: Vec<Vec<String>>,
}

// === impl Pattern ===

impl Pattern {
    /// Parses a pattern: a JSON pointer when it starts with `/`, otherwise a
    /// key glob.
    ///
    /// # Errors
    ///
    /// [`PatternError`] for a bad `~` escape in a pointer or a glob that does
    /// not compile.
    pub fn parse(text: &str) -> Result<Self, PatternError> {
        let Some(pointer) = text.strip_prefix('/') else {
            return Ok(Self::Key(Glob::new(&text.to_lowercase())?));
        };
        let tokens = pointer
            .split('/')
            .map(unescape_token)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self::Pointer {
            source: text.to_owned(),
            tokens,
        })
    }

    /// The pattern as written (a key glob in lowercase).
    pub fn as_str(&self) -> &str {
        match self {
            Self::Pointer { source, .. } => source,
            Self::Key(glob) => glob.as_str(),
        }
    }
}

fn unescape_token(token: &str) -> Result<String, PatternError> {
    let mut out = String::with_capacity(token.len());
    let mut chars = token.chars();
    while let Some(ch) = chars.next() {
        if ch == '~' {
            match chars.next() {
                Some('0') => out.push('~'),
                Some('1') => out.push('/'),
                _ => return Err(PatternError::BadEscape),
            }
        } else {
            out.push(ch);
        }
    }
    Ok(out)
}

// === impl AuditSettings ===

impl Default for AuditSettings {
    fn default() -> Self {
        Self {
            redact: Vec::new(),
            redact_defaults: true,
            key_file: None,
        }
    }
}

// === impl Redactor ===

impl Redactor {
    /// The redactor for these settings.
    pub fn new(settings: &AuditSettings) -> Self {
        let mut keys = Vec::new();
        if settings.redact_defaults {
            keys.extend(
                DEFAULT_KEY_PATTERNS
                    .iter()
                    .filter_map(|pattern| Glob::new(pattern).ok()),
            );
        }
        let mut pointers = Vec::new();
        for pattern in &settings.redact {
            match pattern {
                Pattern::Key(glob) => keys.push(glob.clone()),
                Pattern::Pointer { tokens, .. } => pointers.push(tokens.clone()),
            }
        }
        Self { keys, pointers }
    }

    /// Writes the arguments as canonical JSON (keys sorted, no whitespace,
    /// as [`crate::pin::canonical_json`] writes them) with every matching
    /// value, objects and arrays included, written as [`REDACTED`]: the
    /// canonical JSON of a redacted copy, without building the copy.
    pub fn write_canonical(&self, arguments: &Value, out: &mut String) {
        let track_path = !self.pointers.is_empty();
        let replace = |key: Option<&str>, path: &[String]| {
            key.is_some_and(|key| self.key_matches(key))
                || (track_path && self.pointer_matches(path))
        };
        let mut how = crate::pin::Canonical {
            replace: &replace,
            replacement: REDACTED,
            track_path,
            path: Vec::new(),
        };
        crate::pin::write_canonical_replacing(arguments, out, &mut how);
    }

    fn key_matches(&self, key: &str) -> bool {
        if self.keys.is_empty() {
            return false;
        }
        // Most keys are lowercase already: lowercase only when needed.
        let key: std::borrow::Cow<'_, str> = if key.chars().any(char::is_uppercase) {
            std::borrow::Cow::Owned(key.to_lowercase())
        } else {
            std::borrow::Cow::Borrowed(key)
        };
        self.keys.iter().any(|glob| glob.matches(&key))
    }

    fn pointer_matches(&self, path: &[String]) -> bool {
        self.pointers.iter().any(|tokens| {
            tokens.len() == path.len()
                && tokens
                    .iter()
                    .zip(path)
                    .all(|(token, step)| token == "*" || token == step)
        })
    }
}

impl Default for Redactor {
    fn default() -> Self {
        Self::new(&AuditSettings::default())
    }
}

#[cfg(test)]
mod tests;
