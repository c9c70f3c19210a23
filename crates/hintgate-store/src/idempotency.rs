//! What became of each write sent with an idempotency key, so a call with a
//! key already used never runs twice (issue: idempotency keys for safe
//! write replays).
//!
//! A record is keyed by its *scope*: the SHA-256 of the server's identity
//! key, the tool and the key, so the store never holds a key in clear. It
//! is claimed (`running`) before the call is sent, in one transaction that
//! finds any record already there, so two sessions or two gateways on one
//! store cannot both send it; it ends `done` with the result the host got,
//! `unknown` when the call was sent and no answer came (a timeout, a crash,
//! a gateway that stopped), or is removed when the call never ran. Records
//! older than the window are forgotten.
//!
//! A result is private data: it is kept encrypted (ChaCha20-Poly1305 under
//! the audit key's subkey `"idempotency results v1"`, the scope as
//! associated data), and every record is sealed like the other rows a
//! decision trusts (`rows`), so someone who can write the database but does
//! not hold the key can neither read a result nor put one there for the
//! host to be answered with: a record whose seal breaks is refused, never
//! taken for no record (which would let the call run again).

use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use sha2::{Digest as _, Sha256};

use crate::rows::Field;
use crate::{AuditKey, Seal, StoreError};

/// The purpose of the subkey that encrypts results.
const PURPOSE: &str = "idempotency results v1";

/// The largest result kept, in bytes; a larger one is recorded as done
/// without it (a replay then says the call ran, and what it cannot show).
pub const MAX_RESULT_BYTES: usize = 1024 * 1024;

/// Where a keyed write is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyState {
    /// Claimed: the call is being sent, or was sent and has not ended.
    Running,
    /// It ran, and its result is kept.
    Done,
    /// It was sent and nobody knows whether it ran.
    Unknown,
}

/// What the store knows of one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRecord {
    /// Where it is.
    pub state: KeyState,
    /// The gateway run that claimed it.
    pub owner: String,
    /// The host that sent it (empty over stdio).
    pub principal: String,
    /// The digest of the arguments it was sent with.
    pub arguments: String,
    /// When it was claimed (Unix seconds).
    pub claimed_at: i64,
    /// When it ended, if it did.
    pub done_at: Option<i64>,
    /// The result the host got (JSON text), for a `done` record that kept
    /// it.
    pub result: Option<String>,
    /// Whether its seal verifies.
    pub seal: Seal,
}

/// A claim on a key, made just before the call is sent.
#[derive(Debug, Clone, Copy)]
pub struct KeyClaim<'a> {
    /// The scope ([`key_scope`]).
    pub scope: &'a str,
    /// The gateway run that sends it.
    pub owner: &'a str,
    /// The host that sent it.
    pub principal: &'a str,
    /// The digest of its arguments.
    pub arguments: &'a str,
    /// Now (Unix seconds).
    pub now: i64,
    /// How long a record stands, in seconds.
    pub window_s: i64,
}

/// How a claimed call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyEnd<'a> {
    /// It ran: the result the host got, or `None` when it was too large to
    /// keep.
    Done(Option<&'a str>),
    /// It was sent and no answer came.
    Unknown,
    /// It never ran (it was not sent, or the server asked for input first).
    Released,
}

/// The records of keyed writes.
///
/// Contract:
/// - `claim_key` is atomic: of two claims on one scope, in one process or
///   two on one database, exactly one finds no record and makes a
///   `running` one; the other gets that record;
/// - a record claimed longer ago than the claim's window is forgotten
///   before the claim looks;
/// - `end_key` changes only a `running` record of the same owner;
/// - every write is durable when it returns.
pub trait IdempotencyStore: Send + Sync + std::fmt::Debug {
    /// The record under `scope`, unless it is older than `window_s`.
    ///
    /// # Errors
    ///
    /// The store's error.
    fn key_record(
        &self,
        scope: &str,
        now: i64,
        window_s: i64,
    ) -> Result<Option<KeyRecord>, StoreError>;

    /// Claims the scope: `None` when there was no record (a `running` one
    /// is made), else the record already there (nothing is changed).
    ///
    /// # Errors
    ///
    /// [`StoreError::Unsealed`] without the audit key; the store's error.
    fn claim_key(&self, claim: &KeyClaim<'_>) -> Result<Option<KeyRecord>, StoreError>;

    /// Ends a claimed call.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unsealed`] without the audit key; the store's error.
    fn end_key(
        &self,
        scope: &str,
        owner: &str,
        end: KeyEnd<'_>,
        now: i64,
    ) -> Result<(), StoreError>;
}

/// The scope of a key: SHA-256 over the server's identity key, the tool
/// and the key, each with its length first, as hex.
#[must_use]
pub fn key_scope(server_key: &str, tool: &str, key: &str) -> String {
    let mut hash = Sha256::new();
    for part in [server_key, tool, key] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    hex::encode(hash.finalize())
}

/// A record as stored: its columns, the result encrypted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyRow {
    pub(crate) scope: String,
    pub(crate) state: String,
    pub(crate) owner: String,
    pub(crate) principal: String,
    pub(crate) arguments: String,
    pub(crate) claimed_at: i64,
    pub(crate) done_at: Option<i64>,
    /// The nonce and the ciphertext with its tag.
    pub(crate) result: Option<Vec<u8>>,
    pub(crate) tag: Option<String>,
}

/// Encrypts and decrypts results under the audit key's results subkey.
#[derive(Clone)]
pub(crate) struct KeyCipher {
    key: LessSafeKey,
}

impl std::fmt::Debug for KeyCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyCipher")
    }
}

impl KeyState {
    /// The stable name stored.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Done => "done",
            Self::Unknown => "unknown",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "running" => Some(Self::Running),
            "done" => Some(Self::Done),
            "unknown" => Some(Self::Unknown),
            _ => None,
        }
    }
}

impl KeyCipher {
    /// The cipher of `key`.
    pub(crate) fn of(key: &AuditKey) -> Result<Self, StoreError> {
        Self::for_purpose(key, PURPOSE)
    }

    /// The cipher under the audit key's subkey for `purpose`.
    pub(crate) fn for_purpose(key: &AuditKey, purpose: &str) -> Result<Self, StoreError> {
        let unbound = UnboundKey::new(&CHACHA20_POLY1305, &key.subkey(purpose))
            .map_err(|_| StoreError::Randomness("an encryption key is not usable".to_owned()))?;
        Ok(Self {
            key: LessSafeKey::new(unbound),
        })
    }

    /// `plain`, encrypted for `scope`: a fresh nonce, then the ciphertext
    /// and its tag.
    pub(crate) fn seal(&self, scope: &str, plain: &str) -> Result<Vec<u8>, StoreError> {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).map_err(|err| StoreError::Randomness(err.to_string()))?;
        let mut sealed = plain.as_bytes().to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(scope.as_bytes()),
                &mut sealed,
            )
            .map_err(|_| StoreError::Randomness("a value could not be encrypted".to_owned()))?;
        let mut out = nonce.to_vec();
        out.append(&mut sealed);
        Ok(out)
    }

    /// The plain text of `sealed` for `scope`; `None` when it does not
    /// decrypt (altered, or for another scope).
    pub(crate) fn open(&self, scope: &str, sealed: &[u8]) -> Option<String> {
        let (nonce, body) = sealed.split_at_checked(NONCE_LEN)?;
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut body = body.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(scope.as_bytes()), &mut body)
            .ok()?;
        String::from_utf8(plain.to_vec()).ok()
    }
}

impl KeyRow {
    /// Its seal: every column but the seal.
    fn seal(&self, sealer: &crate::rows::Sealer) -> String {
        sealer.seal("idempotency", &self.sealed_fields())
    }

    /// Whether its tag is its seal.
    fn check(&self, sealer: &crate::rows::Sealer) -> Seal {
        sealer.check("idempotency", &self.sealed_fields(), self.tag.as_deref())
    }

    fn sealed_fields(&self) -> [Field<'_>; 8] {
        [
            Field::Bytes(self.scope.as_bytes()),
            Field::Bytes(self.state.as_bytes()),
            Field::Bytes(self.owner.as_bytes()),
            Field::Bytes(self.principal.as_bytes()),
            Field::Bytes(self.arguments.as_bytes()),
            Field::Int(self.claimed_at),
            // An absent end and an absent result are told from any value.
            Field::Int(self.done_at.unwrap_or(i64::MIN)),
            Field::Bytes(self.result.as_deref().unwrap_or(b"\0none")),
        ]
    }

    /// The row of a fresh claim, sealed.
    pub(crate) fn claimed(claim: &KeyClaim<'_>, sealer: &crate::rows::Sealer) -> Self {
        let mut row = Self {
            scope: claim.scope.to_owned(),
            state: KeyState::Running.as_str().to_owned(),
            owner: claim.owner.to_owned(),
            principal: claim.principal.to_owned(),
            arguments: claim.arguments.to_owned(),
            claimed_at: claim.now,
            done_at: None,
            result: None,
            tag: None,
        };
        row.tag = Some(row.seal(sealer));
        row
    }

    /// The same row, ended as `end` says (`None`: removed), sealed anew.
    pub(crate) fn ended(
        mut self,
        end: KeyEnd<'_>,
        now: i64,
        sealer: &crate::rows::Sealer,
        cipher: &KeyCipher,
    ) -> Result<Option<Self>, StoreError> {
        match end {
            KeyEnd::Released => return Ok(None),
            KeyEnd::Unknown => self.state = KeyState::Unknown.as_str().to_owned(),
            KeyEnd::Done(result) => {
                self.state = KeyState::Done.as_str().to_owned();
                self.result = match result {
                    Some(text) if text.len() <= MAX_RESULT_BYTES => {
                        Some(cipher.seal(&self.scope, text)?)
                    }
                    _ => None,
                };
            }
        }
        self.done_at = Some(now);
        self.tag = Some(self.seal(sealer));
        Ok(Some(self))
    }

    /// The record, its seal checked and its result decrypted. A row whose
    /// seal or state does not read is [`Seal::Broken`]: the caller refuses
    /// it.
    pub(crate) fn open(
        &self,
        sealer: Option<&crate::rows::Sealer>,
        cipher: Option<&KeyCipher>,
    ) -> KeyRecord {
        let mut seal = sealer.map_or(Seal::Unchecked, |sealer| self.check(sealer));
        let state = KeyState::parse(&self.state).unwrap_or_else(|| {
            seal = Seal::Broken;
            KeyState::Unknown
        });
        let result = match (&self.result, cipher) {
            (Some(sealed), Some(cipher)) => {
                let plain = cipher.open(&self.scope, sealed);
                if plain.is_none() {
                    seal = Seal::Broken;
                }
                plain
            }
            _ => None,
        };
        KeyRecord {
            state,
            owner: self.owner.clone(),
            principal: self.principal.clone(),
            arguments: self.arguments.clone(),
            claimed_at: self.claimed_at,
            done_at: self.done_at,
            result,
            seal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_opens_only_for_its_scope_and_untouched() {
        let key = AuditKey::from_secret([7; 32]);
        let cipher = KeyCipher::of(&key).unwrap();
        let sealed = cipher.seal("scope-a", r#"{"content":[]}"#).unwrap();
        assert_eq!(
            cipher.open("scope-a", &sealed).as_deref(),
            Some(r#"{"content":[]}"#)
        );
        assert_eq!(cipher.open("scope-b", &sealed), None);
        let mut altered = sealed.clone();
        let last = altered.len() - 1;
        altered[last] ^= 1;
        assert_eq!(cipher.open("scope-a", &altered), None);
        assert!(
            !String::from_utf8_lossy(&sealed).contains("content"),
            "the result is not kept in clear"
        );
        let other = KeyCipher::of(&AuditKey::from_secret([8; 32])).unwrap();
        assert_eq!(other.open("scope-a", &sealed), None);
    }

    fn row() -> KeyRow {
        KeyRow {
            scope: "scope".into(),
            state: "done".into(),
            owner: "owner".into(),
            principal: "local:ada".into(),
            arguments: r#"{"a":1}"#.into(),
            claimed_at: 1_700_000_000,
            done_at: Some(1_700_000_005),
            result: Some(vec![1, 2, 3]),
            tag: None,
        }
    }

    #[test]
    fn a_key_rows_seal_covers_every_column_and_stays_what_stores_hold() {
        let sealer = crate::rows::Sealer::of(&AuditKey::from_secret([7; 32]));
        let mut sealed = row();
        sealed.tag = Some(sealed.seal(&sealer));
        assert_eq!(sealed.check(&sealer), Seal::Valid);
        // The seal rows written by earlier versions hold: the same kind,
        // the same columns in the same order.
        assert_eq!(
            sealed.tag.as_deref(),
            Some("194e8835ddb821f385beba46a65447dabfbccb4f73b842d4e4dba665a361857d")
        );
        let changes: [fn(&mut KeyRow); 8] = [
            |row| row.scope.push('x'),
            |row| row.state = "claimed".into(),
            |row| row.owner.push('x'),
            |row| row.principal.push('x'),
            |row| row.arguments = r#"{"a":2}"#.into(),
            |row| row.claimed_at += 1,
            |row| row.done_at = None,
            |row| row.result = None,
        ];
        for (idx, change) in changes.iter().enumerate() {
            let mut changed = sealed.clone();
            change(&mut changed);
            assert_eq!(changed.check(&sealer), Seal::Broken, "column {idx}");
        }
    }

    #[test]
    fn scopes_differ_by_each_part_and_never_run_together() {
        let base = key_scope("k", "tool", "key");
        assert_ne!(base, key_scope("k2", "tool", "key"));
        assert_ne!(base, key_scope("k", "tool2", "key"));
        assert_ne!(base, key_scope("k", "tool", "key2"));
        assert_ne!(key_scope("ab", "c", "d"), key_scope("a", "bc", "d"));
        assert!(!base.contains("key"));
    }
}
