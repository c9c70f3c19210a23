//! Static bearer tokens for hosts that reach the gateway over HTTP
//! (`hintgate token add|list|revoke`).
//!
//! A token is shown once, when it is made, and never stored: the store keeps
//! its SHA-256 (a token is 32 random bytes, so a plain hash cannot be turned
//! back or guessed), its name and its scope, sealed like the other rows a
//! decision trusts ([`crate::rows`]). Someone who can write the database but
//! does not hold the audit key cannot add a token of their own or raise a
//! token's scope: a row whose seal does not verify authenticates nobody.

use sha2::{Digest as _, Sha256};

use crate::{Seal, StoreError};

/// The prefix every token starts with, so a leaked one is recognised (and
/// redacted from the log as a credential).
pub const TOKEN_PREFIX: &str = "hgt_";

/// One token as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRow {
    /// Its name (who holds it).
    pub name: String,
    /// What it may do: `read` or `write`.
    pub scope: String,
    /// When it was made (Unix seconds).
    pub created_at: i64,
    /// Whether its seal verifies.
    pub seal: Seal,
}

/// The tokens hosts authenticate with over HTTP.
pub trait TokenStore: Send + Sync + std::fmt::Debug {
    /// Keeps a new token under `name` by its hash (see [`token_hash`]).
    ///
    /// # Errors
    ///
    /// [`StoreError::TokenExists`] when a token has that name;
    /// [`StoreError::Unsealed`] without the audit key; the store's error.
    fn add_token(&self, name: &str, hash: &str, scope: &str) -> Result<(), StoreError>;

    /// Every token, by name.
    ///
    /// # Errors
    ///
    /// The store's error.
    fn tokens(&self) -> Result<Vec<TokenRow>, StoreError>;

    /// Removes the token `name`; whether there was one.
    ///
    /// # Errors
    ///
    /// The store's error.
    fn revoke_token(&self, name: &str) -> Result<bool, StoreError>;

    /// The token whose hash is `hash`, when its seal verifies; `None` for
    /// no token, a revoked one or one whose row was tampered with.
    ///
    /// # Errors
    ///
    /// The store's error.
    fn find_token(&self, hash: &str) -> Result<Option<TokenRow>, StoreError>;

    /// What [`TokenStore::find_token`] would answer, when the store can
    /// answer without waiting (no network, no lock another thread holds):
    /// a host's request is then admitted on the thread it arrived on,
    /// still against the store as it is now, so a token revoked elsewhere
    /// is refused from its next request. `None` when it would have to
    /// wait, or could not answer; the caller then asks
    /// [`TokenStore::find_token`] where waiting is allowed.
    fn find_token_now(&self, hash: &str) -> Option<Option<TokenRow>> {
        let _ = hash;
        None
    }
}

/// A new token: the prefix and 32 random bytes as hex.
///
/// # Errors
///
/// [`StoreError::Randomness`] when the system gives no randomness.
pub fn new_token() -> Result<String, StoreError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|err| StoreError::Randomness(err.to_string()))?;
    Ok(format!("{TOKEN_PREFIX}{}", hex::encode(bytes)))
}

/// The hash the store keeps of `token`: SHA-256, as hex.
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}
