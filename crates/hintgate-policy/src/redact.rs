//! Redaction of tool-call arguments before they are written to the audit log.
//!
//! What is left out is decided by the user and by the values, never by a
//! name a server picked (design §8): a server names its tools' arguments,
//! so a default rule on names would let it keep an approved call's payload
//! out of the log.
//!
//! - By default ([`AuditSettings::redact_defaults`]), every string that
//!   looks like a credential, wherever it is: a known format (a private
//!   key, a password in a URL, an `Authorization` value, a vendor's token,
//!   a JWT) or a token that looks random ([`looks_like_secret`]).
//! - Under `[audit] redact`, what the user names: a JSON pointer (RFC 6901,
//!   starting with `/`) names one place in the arguments, such as
//!   `/credentials/password`, a `*` token standing for any key or array
//!   index at its depth (`/accounts/*/pin`); anything else is a glob over
//!   key names, matched case-insensitively at any depth (`*token*`, `ssn`).
//!
//! The value at a matching place is replaced whole, objects and arrays
//! included, by a marker that keeps its length and a keyed digest
//! (`[redacted len=40 hmac=3f2a9c0d11e4b7a8]`), so two records that hold
//! the same secret can be matched by someone who holds the key, and no one
//! without it can test a guess against the log.

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

use crate::glob::{Glob, GlobError};

mod detect;

pub use detect::looks_like_secret;

/// How every redaction marker starts; the rest is
/// `len=LENGTH hmac=DIGEST]`.
pub const REDACTED_PREFIX: &str = "[redacted ";

/// Hexadecimal digits of the keyed digest a marker keeps (64 bits: enough
/// to match records, too few to say much about the value).
const DIGEST_HEX_DIGITS: usize = 16;

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
    /// Whether strings that look like credentials are redacted wherever
    /// they are ([`looks_like_secret`]; default: yes).
    pub redact_defaults: bool,
    /// The audit key's file (`key_file`), an absolute path that may hold
    /// `${VAR}` references, expanded at start-up; `None`: the default (for
    /// SQLite, `audit.key` beside the database; a PostgreSQL store needs
    /// one, the same on every gateway).
    pub key_file: Option<String>,
    /// The witness a gateway's checkpoints go to (`witness`), an absolute
    /// path that may hold `${VAR}` references, expanded at start-up: a
    /// gateway refuses to start unless `hintgate log setup-witness` set up
    /// this very file for its log. `None`: whatever witness was set up, if
    /// any.
    pub witness: Option<String>,
    /// A checkpoint at least every this many records
    /// (`witness_every_records`); `None`: the store's default (1000).
    pub witness_every_records: Option<u64>,
    /// A checkpoint at the first commit at least this many seconds after
    /// the last (`witness_every_s`); `None`: the store's default (60).
    pub witness_every_s: Option<u64>,
    /// `durability = "fsync"`: a run's journal is synced to the disk
    /// (`fdatasync`) before the calls its write records are sent, so the
    /// records survive a power loss; `false` (`"write"`, the default): one
    /// write, which survives a crash of the gateway.
    pub fsync: bool,
    /// The size at which a run's journal segment is closed and the next
    /// begun (`segment_bytes`); `None`: the store's default (64 MiB).
    pub segment_bytes: Option<u64>,
}

/// The key of the digests redaction markers keep. Its `Debug` shows none
/// of it.
#[derive(Clone)]
pub struct DigestKey([u8; 32]);

/// Redacts arguments by the user's patterns and by what values look like.
#[derive(Debug, Clone)]
pub struct Redactor {
    keys: Vec<Glob>,
    pointers: Vec<Vec<String>>,
    by_value: bool,
    digest_key: DigestKey,
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
            witness: None,
            witness_every_records: None,
            witness_every_s: None,
            fsync: false,
            segment_bytes: None,
        }
    }
}

// === impl Redactor ===

impl DigestKey {
    /// A key from its bytes.
    pub fn new(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }
}

impl std::fmt::Debug for DigestKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DigestKey(..)")
    }
}

impl Redactor {
    /// The redactor for these settings, whose markers keep digests under
    /// `digest_key`.
    pub fn new(settings: &AuditSettings, digest_key: DigestKey) -> Self {
        let mut keys = Vec::new();
        let mut pointers = Vec::new();
        for pattern in &settings.redact {
            match pattern {
                Pattern::Key(glob) => keys.push(glob.clone()),
                Pattern::Pointer { tokens, .. } => pointers.push(tokens.clone()),
            }
        }
        Self {
            keys,
            pointers,
            by_value: settings.redact_defaults,
            digest_key,
        }
    }

    /// Writes the arguments as canonical JSON (keys sorted, no whitespace,
    /// as [`crate::pin::canonical_json`] writes them) with every value to
    /// redact, objects and arrays included, written as its marker: the
    /// canonical JSON of a redacted copy, without building the copy.
    pub fn write_canonical(&self, arguments: &Value, out: &mut String) {
        let track_path = !self.pointers.is_empty();
        let replace =
            |key: Option<&str>, path: &[String], value: &Value| self.redacts(key, path, value);
        let replacement = |value: &Value, out: &mut String| {
            crate::pin::write_json_string(&self.marker(value), out);
        };
        let mut how = crate::pin::Canonical {
            replace: &replace,
            replacement: &replacement,
            track_path,
            path: Vec::new(),
        };
        crate::pin::write_canonical_replacing(arguments, out, &mut how);
    }

    /// Whether the value under `key` (`None` for an array item), at `path`,
    /// is redacted.
    fn redacts(&self, key: Option<&str>, path: &[String], value: &Value) -> bool {
        key.is_some_and(|key| self.key_matches(key))
            || (!self.pointers.is_empty() && self.pointer_matches(path))
            || (self.by_value && matches!(value, Value::String(text) if looks_like_secret(text)))
    }

    /// The marker a redacted value is written as: its length (a string's
    /// characters, or the characters of any other value's canonical JSON)
    /// and the first hexadecimal digits of an HMAC-SHA-256 of its
    /// canonical JSON under the digest key.
    pub fn marker(&self, value: &Value) -> String {
        let canonical = crate::pin::canonical_json(value);
        let length = match value {
            Value::String(text) => text.chars().count(),
            _ => canonical.chars().count(),
        };
        let digest = match Hmac::<Sha256>::new_from_slice(&self.digest_key.0) {
            Ok(mut mac) => {
                mac.update(canonical.as_bytes());
                let bytes = mac.finalize().into_bytes();
                let mut hex = String::with_capacity(DIGEST_HEX_DIGITS);
                for byte in bytes.iter().take(DIGEST_HEX_DIGITS / 2) {
                    use std::fmt::Write as _;
                    let _ = write!(hex, "{byte:02x}");
                }
                hex
            }
            // HMAC takes a key of any length; a 32-byte key cannot fail.
            Err(_) => String::from("?"),
        };
        format!("{REDACTED_PREFIX}len={length} hmac={digest}]")
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

#[cfg(test)]
mod tests;
