//! What hintgate keeps of a login between runs: the tokens and what a
//! refresh or a revocation needs (the authorization server's endpoints,
//! the resource, the client), as one JSON text the store encrypts. The
//! client secret is not kept: it is read again from its file or variable.

use serde::{Deserialize, Serialize};

use crate::flow::TokenSet;
use crate::metadata::ServerMetadata;
use crate::register::{Client, SecretSource, TokenAuth};
use crate::{OAuthError, Secret};

/// The key a login is kept under in the store, for the server at `url`:
/// the URL itself for the server's own (full) instance, and `read-only
/// URL` for its read-only instance's token, asked for with fewer scopes
/// (`[servers.NAME.read_only] scopes`). A URL holds no space, so the two
/// never meet.
#[must_use]
pub fn grant_key(url: &str, read_only: bool) -> String {
    if read_only {
        format!("read-only {url}")
    } else {
        url.to_owned()
    }
}

/// The scopes of `granted` beyond `allowed` (`offline_access`, which asks
/// for a refresh token and no power over the resource, is always
/// allowed): what an authorization server added to a read-only token that
/// was asked for with `allowed` only. Empty when it added nothing.
#[must_use]
pub fn scopes_beyond(granted: &[String], allowed: &[String]) -> Vec<String> {
    granted
        .iter()
        .filter(|scope| *scope != "offline_access" && !allowed.contains(scope))
        .cloned()
        .collect()
}

/// A login as kept. `Debug` never shows a token.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredLogin {
    /// The tokens.
    pub tokens: TokenSet,
    /// The authorization server's issuer.
    pub issuer: String,
    /// Its token endpoint.
    pub token_endpoint: String,
    /// Its revocation endpoint, when it has one.
    pub revocation_endpoint: Option<String>,
    /// The resource the tokens are for (RFC 8707).
    pub resource: String,
    /// The client id.
    pub client_id: String,
    /// How the client authenticates at the token endpoint.
    pub token_auth: TokenAuth,
}

impl std::fmt::Debug for StoredLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredLogin")
            .field("tokens", &self.tokens)
            .field("issuer", &self.issuer)
            .field("resource", &self.resource)
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

#[derive(Serialize, Deserialize)]
struct Wire {
    access_token: String,
    refresh_token: Option<String>,
    expires_at: Option<u64>,
    scopes: Vec<String>,
    issuer: String,
    token_endpoint: String,
    revocation_endpoint: Option<String>,
    resource: String,
    client_id: String,
    token_auth: String,
}

impl StoredLogin {
    /// The login of `tokens`, got from `server` for `client` and `resource`.
    #[must_use]
    pub fn new(tokens: TokenSet, server: &ServerMetadata, client: &Client, resource: &str) -> Self {
        Self {
            tokens,
            issuer: server.issuer.clone(),
            token_endpoint: server.token_endpoint.clone(),
            revocation_endpoint: server.revocation_endpoint.clone(),
            resource: resource.to_owned(),
            client_id: client.client_id.clone(),
            token_auth: client.auth,
        }
    }

    /// The JSON text kept (a [`Secret`]: it holds the tokens).
    #[must_use]
    pub fn to_json(&self) -> Secret {
        let wire = Wire {
            access_token: self.tokens.access_token.expose().to_owned(),
            refresh_token: self
                .tokens
                .refresh_token
                .as_ref()
                .map(|token| token.expose().to_owned()),
            expires_at: self.tokens.expires_at,
            scopes: self.tokens.scopes.clone(),
            issuer: self.issuer.clone(),
            token_endpoint: self.token_endpoint.clone(),
            revocation_endpoint: self.revocation_endpoint.clone(),
            resource: self.resource.clone(),
            client_id: self.client_id.clone(),
            token_auth: match self.token_auth {
                TokenAuth::None => "none",
                TokenAuth::ClientSecretBasic => "client_secret_basic",
                TokenAuth::ClientSecretPost => "client_secret_post",
            }
            .to_owned(),
        };
        Secret::new(serde_json::to_string(&wire).unwrap_or_default())
    }

    /// A kept login read back.
    ///
    /// # Errors
    ///
    /// [`OAuthError::Malformed`] when the text is not one (its content is
    /// never quoted).
    pub fn from_json(text: &str) -> Result<Self, OAuthError> {
        let wire: Wire = serde_json::from_str(text).map_err(|_| OAuthError::Malformed {
            what: "stored login",
            url: "the store".to_owned(),
            reason: "not a stored login".to_owned(),
        })?;
        Ok(Self {
            tokens: TokenSet {
                access_token: Secret::new(wire.access_token),
                refresh_token: wire.refresh_token.map(Secret::new),
                expires_at: wire.expires_at,
                scopes: wire.scopes,
            },
            issuer: wire.issuer,
            token_endpoint: wire.token_endpoint,
            revocation_endpoint: wire.revocation_endpoint,
            resource: wire.resource,
            client_id: wire.client_id,
            token_auth: match wire.token_auth.as_str() {
                "client_secret_basic" => TokenAuth::ClientSecretBasic,
                "client_secret_post" => TokenAuth::ClientSecretPost,
                _ => TokenAuth::None,
            },
        })
    }

    /// The authorization server's endpoints as kept.
    #[must_use]
    pub fn server(&self) -> ServerMetadata {
        ServerMetadata {
            issuer: self.issuer.clone(),
            authorization_endpoint: None,
            token_endpoint: self.token_endpoint.clone(),
            registration_endpoint: None,
            device_authorization_endpoint: None,
            revocation_endpoint: self.revocation_endpoint.clone(),
            scopes_supported: None,
            grant_types_supported: None,
            code_challenge_methods_supported: None,
            token_endpoint_auth_methods_supported: None,
            client_id_metadata_document_supported: None,
            authorization_response_iss_parameter_supported: None,
        }
    }

    /// The client as kept, its secret read again from `secret` (a public
    /// client needs none).
    ///
    /// # Errors
    ///
    /// [`OAuthError::SecretUnavailable`] when the secret cannot be read.
    pub fn client(&self, secret: Option<&SecretSource>) -> Result<Client, OAuthError> {
        let client_secret = match (self.token_auth, secret) {
            (TokenAuth::None, _) | (_, None) => None,
            (_, Some(source)) => Some(source.load()?),
        };
        Ok(Client {
            client_id: self.client_id.clone(),
            client_secret,
            auth: self.token_auth,
            redirect_uri: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_login_reads_back_and_shows_no_token() {
        let login = StoredLogin {
            tokens: TokenSet {
                access_token: Secret::new("at-hidden"),
                refresh_token: Some(Secret::new("rt-hidden")),
                expires_at: Some(77),
                scopes: vec!["a".to_owned(), "b".to_owned()],
            },
            issuer: "https://as.example".to_owned(),
            token_endpoint: "https://as.example/token".to_owned(),
            revocation_endpoint: Some("https://as.example/revoke".to_owned()),
            resource: "https://rs.example/mcp".to_owned(),
            client_id: "c1".to_owned(),
            token_auth: TokenAuth::ClientSecretPost,
        };
        let text = login.to_json();
        assert_eq!(StoredLogin::from_json(text.expose()).unwrap(), login);
        assert!(!format!("{login:?}").contains("hidden"));
        let err = StoredLogin::from_json("{\"access_token\":\"at-hidden\"").unwrap_err();
        assert!(!err.to_string().contains("hidden"), "{err}");
    }

    #[test]
    fn the_read_only_instance_keeps_its_login_apart_and_its_scopes_are_checked() {
        let url = "https://rs.example/mcp";
        assert_eq!(grant_key(url, false), url);
        assert_eq!(grant_key(url, true), "read-only https://rs.example/mcp");
        let allowed = ["docs:read".to_owned()];
        let scopes = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(scopes_beyond(&scopes(&["docs:read", "offline_access"]), &allowed).is_empty());
        assert!(scopes_beyond(&[], &allowed).is_empty());
        assert_eq!(
            scopes_beyond(&scopes(&["docs:read", "docs:write"]), &allowed),
            scopes(&["docs:write"])
        );
    }
}
