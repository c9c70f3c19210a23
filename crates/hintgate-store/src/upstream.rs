//! The OAuth tokens hintgate holds for remote servers (`hintgate auth
//! login`), one grant per server and principal.
//!
//! A grant's tokens (its access and refresh tokens, and what a refresh
//! needs: the client and the token endpoint) are one text the caller
//! builds, kept encrypted: ChaCha20-Poly1305 under the audit key's subkey
//! `"upstream oauth tokens v1"`, with the server and the principal as
//! associated data, so a row copied onto another server or principal does
//! not decrypt. What `hintgate auth status` shows (the scopes granted and
//! until when) is kept in clear beside it, and the whole row is sealed like
//! the other rows a decision trusts (`rows`): someone who can write the
//! database but does not hold the key can neither read a token nor put one
//! there for a server's calls to carry, nor stretch a grant's expiry. A
//! row whose seal or ciphertext does not verify gives no token.
//!
//! The tokens never appear in `Debug` output, nor in an error: they are a
//! [`GrantSecret`], which prints `[redacted]`.

use crate::idempotency::KeyCipher;
use crate::rows::Field;
use crate::{AuditKey, Seal, StoreError};

/// The purpose of the subkey that encrypts the tokens.
const PURPOSE: &str = "upstream oauth tokens v1";

/// The largest secret text kept, in bytes.
pub const MAX_GRANT_SECRET_BYTES: usize = 64 * 1024;

/// The tokens of a grant, as the text its caller stores (typically JSON).
/// Its `Debug` prints `[redacted]`, and it has no `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct GrantSecret(String);

impl GrantSecret {
    /// Wraps `text`.
    #[must_use]
    pub const fn new(text: String) -> Self {
        Self(text)
    }

    /// The text, for the one place that sends or parses it.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for GrantSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

/// What may be shown of a grant: never its tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantInfo {
    /// The server the tokens are for (its identity: the URL it is reached
    /// at).
    pub server: String,
    /// The principal they serve (empty for the gateway's single user).
    pub principal: String,
    /// The scopes granted, space-separated as OAuth writes them.
    pub scope: String,
    /// When the access token expires (Unix seconds), when the server said.
    pub expires_at: Option<i64>,
    /// When the grant was stored or last refreshed (Unix seconds).
    pub updated_at: i64,
    /// Whether its seal verifies.
    pub seal: Seal,
}

/// A grant to store.
#[derive(Debug, Clone, Copy)]
pub struct NewGrant<'a> {
    /// The server's identity.
    pub server: &'a str,
    /// The principal.
    pub principal: &'a str,
    /// The scopes granted.
    pub scope: &'a str,
    /// When the access token expires.
    pub expires_at: Option<i64>,
    /// Now (Unix seconds).
    pub updated_at: i64,
    /// The tokens.
    pub secret: &'a GrantSecret,
}

/// A stored grant: what may be shown, and its tokens when the row is
/// genuine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptGrant {
    /// What may be shown.
    pub info: GrantInfo,
    /// The tokens: `None` when the row's seal or ciphertext does not
    /// verify (`info.seal` is then [`Seal::Broken`]).
    pub secret: Option<GrantSecret>,
}

/// The OAuth grants hintgate holds for remote servers.
///
/// Contract: one grant per (server, principal), a new one replacing the
/// old; a grant is returned with its tokens only when its row is sealed
/// under the audit key and decrypts for that server and principal; every
/// write is durable when it returns.
pub trait UpstreamTokenStore: Send + Sync + std::fmt::Debug {
    /// Keeps `grant`, replacing any for its server and principal.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unsealed`] without the audit key;
    /// [`StoreError::Corrupt`] for a secret over
    /// [`MAX_GRANT_SECRET_BYTES`]; the store's error.
    fn put_grant(&self, grant: &NewGrant<'_>) -> Result<(), StoreError>;

    /// The grant for `server` and `principal`.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unsealed`] without the audit key; the store's error.
    fn grant(&self, server: &str, principal: &str) -> Result<Option<KeptGrant>, StoreError>;

    /// Every grant, by server then principal, without its tokens.
    ///
    /// # Errors
    ///
    /// The store's error.
    fn grants(&self) -> Result<Vec<GrantInfo>, StoreError>;

    /// Removes the grant for `server` and `principal`; whether there was
    /// one.
    ///
    /// # Errors
    ///
    /// The store's error.
    fn delete_grant(&self, server: &str, principal: &str) -> Result<bool, StoreError>;
}

/// A grant as stored: its columns, the secret encrypted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GrantRow {
    pub(crate) server: String,
    pub(crate) principal: String,
    pub(crate) scope: String,
    pub(crate) expires_at: Option<i64>,
    pub(crate) updated_at: i64,
    /// The nonce and the ciphertext with its tag.
    pub(crate) secret: Vec<u8>,
    pub(crate) tag: Option<String>,
}

impl GrantRow {
    /// Its seal: every column but the seal.
    fn seal(&self, sealer: &crate::rows::Sealer) -> String {
        sealer.seal("upstream grant", &self.sealed_fields())
    }

    /// Whether its tag is its seal.
    fn check(&self, sealer: &crate::rows::Sealer) -> Seal {
        sealer.check("upstream grant", &self.sealed_fields(), self.tag.as_deref())
    }

    fn sealed_fields(&self) -> [Field<'_>; 7] {
        [
            Field::Bytes(self.server.as_bytes()),
            Field::Bytes(self.principal.as_bytes()),
            Field::Bytes(self.scope.as_bytes()),
            // Whether there is an expiry, then its value, so no value stands
            // for its absence.
            Field::Int(i64::from(self.expires_at.is_some())),
            Field::Int(self.expires_at.unwrap_or(0)),
            Field::Int(self.updated_at),
            Field::Bytes(&self.secret),
        ]
    }
}

/// The associated data of a grant's ciphertext: its server, with its
/// length first, and its principal.
fn associated(server: &str, principal: &str) -> String {
    format!("{}:{server}{principal}", server.len())
}

/// Encrypts and seals grants.
#[derive(Debug, Clone)]
pub(crate) struct GrantTools {
    cipher: KeyCipher,
    sealer: crate::rows::Sealer,
}

impl GrantTools {
    /// The tools of `key`.
    pub(crate) fn of(key: &AuditKey) -> Result<Self, StoreError> {
        Ok(Self {
            cipher: KeyCipher::for_purpose(key, PURPOSE)?,
            sealer: crate::rows::Sealer::of(key),
        })
    }

    /// The row of `grant`, encrypted and sealed.
    pub(crate) fn row(&self, grant: &NewGrant<'_>) -> Result<GrantRow, StoreError> {
        if grant.secret.expose().len() > MAX_GRANT_SECRET_BYTES {
            return Err(StoreError::Corrupt(format!(
                "an OAuth grant's tokens are over {MAX_GRANT_SECRET_BYTES} bytes"
            )));
        }
        let secret = self.cipher.seal(
            &associated(grant.server, grant.principal),
            grant.secret.expose(),
        )?;
        let mut row = GrantRow {
            server: grant.server.to_owned(),
            principal: grant.principal.to_owned(),
            scope: grant.scope.to_owned(),
            expires_at: grant.expires_at,
            updated_at: grant.updated_at,
            secret,
            tag: None,
        };
        row.tag = Some(row.seal(&self.sealer));
        Ok(row)
    }

    /// The grant of `row`, its seal checked and its secret decrypted.
    pub(crate) fn open(&self, row: &GrantRow) -> KeptGrant {
        let mut info = info_of(row, Some(&self.sealer));
        let secret = if info.seal == Seal::Valid {
            self.cipher
                .open(&associated(&row.server, &row.principal), &row.secret)
                .map(GrantSecret)
        } else {
            None
        };
        if secret.is_none() {
            info.seal = Seal::Broken;
        }
        KeptGrant { info, secret }
    }
}

/// What may be shown of `row`, its seal checked when there is a sealer.
pub(crate) fn info_of(row: &GrantRow, sealer: Option<&crate::rows::Sealer>) -> GrantInfo {
    GrantInfo {
        server: row.server.clone(),
        principal: row.principal.clone(),
        scope: row.scope.clone(),
        expires_at: row.expires_at,
        updated_at: row.updated_at,
        seal: sealer.map_or(Seal::Unchecked, |sealer| row.check(sealer)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_rows_seal_covers_every_column_and_stays_what_stores_hold() {
        let sealer = crate::rows::Sealer::of(&AuditKey::from_secret([7; 32]));
        let mut sealed = GrantRow {
            server: "remote".into(),
            principal: "local:ada".into(),
            scope: "read write".into(),
            expires_at: Some(1_700_003_600),
            updated_at: 1_700_000_000,
            secret: vec![4, 5, 6],
            tag: None,
        };
        sealed.tag = Some(sealed.seal(&sealer));
        assert_eq!(sealed.check(&sealer), Seal::Valid);
        // The seal rows written by earlier versions hold: the same kind,
        // the same columns in the same order.
        assert_eq!(
            sealed.tag.as_deref(),
            Some("8f770bf19a15ecfd55d99bb5b8e8fe4e647140b934c4bc852cdebc0b3d598ae3")
        );
        let changes: [fn(&mut GrantRow); 7] = [
            |row| row.server.push('x'),
            |row| row.principal.push('x'),
            |row| row.scope.push('x'),
            |row| row.expires_at = None,
            |row| row.expires_at = Some(0),
            |row| row.updated_at += 1,
            |row| row.secret.push(0),
        ];
        for (idx, change) in changes.iter().enumerate() {
            let mut changed = sealed.clone();
            change(&mut changed);
            assert_eq!(changed.check(&sealer), Seal::Broken, "column {idx}");
        }
    }

    fn grant<'a>(server: &'a str, principal: &'a str, secret: &'a GrantSecret) -> NewGrant<'a> {
        NewGrant {
            server,
            principal,
            scope: "read write",
            expires_at: Some(2_000),
            updated_at: 1_000,
            secret,
        }
    }

    #[test]
    fn a_grant_opens_only_where_it_was_stored_and_untouched() {
        let tools = GrantTools::of(&AuditKey::from_secret([7; 32])).unwrap();
        let secret = GrantSecret::new(r#"{"access_token":"at-secret"}"#.to_owned());
        let row = tools
            .row(&grant("https://a/mcp", "alice", &secret))
            .unwrap();
        assert!(
            !String::from_utf8_lossy(&row.secret).contains("at-secret"),
            "the tokens are not kept in clear"
        );
        let kept = tools.open(&row);
        assert_eq!(kept.info.seal, Seal::Valid);
        assert_eq!(kept.secret.as_ref(), Some(&secret));

        // Moved to another principal or server: no token, even resealed
        // by someone holding the seal (the ciphertext is bound to both).
        for (server, principal) in [("https://a/mcp", "bob"), ("https://a/mcpalice", "")] {
            let mut moved = row.clone();
            moved.server = server.to_owned();
            moved.principal = principal.to_owned();
            moved.tag = Some(moved.seal(&tools.sealer));
            let kept = tools.open(&moved);
            assert_eq!((kept.info.seal, kept.secret), (Seal::Broken, None));
        }
        // A stretched expiry breaks the seal.
        let mut stretched = row.clone();
        stretched.expires_at = Some(i64::MAX);
        assert_eq!(tools.open(&stretched).secret, None);
        // Another key reads nothing.
        let other = GrantTools::of(&AuditKey::from_secret([8; 32])).unwrap();
        assert_eq!(other.open(&row).secret, None);
    }

    #[test]
    fn no_grant_type_shows_its_tokens() {
        let tools = GrantTools::of(&AuditKey::from_secret([7; 32])).unwrap();
        let secret = GrantSecret::new("rt-very-secret".to_owned());
        let new = grant("https://a/mcp", "", &secret);
        let kept = tools.open(&tools.row(&new).unwrap());
        for shown in [
            format!("{secret:?}"),
            format!("{new:?}"),
            format!("{kept:?}"),
        ] {
            assert!(!shown.contains("rt-very-secret"), "{shown}");
        }
        assert!(format!("{kept:?}").contains("[redacted]"));
    }

    #[test]
    fn a_secret_too_large_is_refused_without_quoting_it() {
        let tools = GrantTools::of(&AuditKey::from_secret([7; 32])).unwrap();
        let secret = GrantSecret::new("s".repeat(MAX_GRANT_SECRET_BYTES + 1));
        let err = tools.row(&grant("https://a/mcp", "", &secret)).unwrap_err();
        assert!(!err.to_string().contains("sss"), "{err}");
    }
}
