//! The client hintgate is at an authorization server, chosen in the order
//! the MCP spec gives: a pre-registered client, a client ID metadata
//! document, dynamic client registration (RFC 7591).

use std::path::PathBuf;

use serde::Deserialize;

use crate::metadata::ServerMetadata;
use crate::urls::check_redirect_uri;
use crate::{HttpClient, HttpRequest, OAuthError, Secret, parse_endpoint_url};

/// Where a pre-registered client's secret is read from. Never the config
/// file itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// A file holding the secret (surrounding white space removed). On Unix
    /// the file must not be readable by group or others.
    File(PathBuf),
    /// An environment variable.
    Env(String),
}

impl SecretSource {
    /// Reads the secret. Errors name the file or the variable, never the
    /// value.
    pub fn load(&self) -> Result<Secret, OAuthError> {
        match self {
            Self::File(path) => {
                let shown = path.display().to_string();
                #[cfg(unix)]
                {
                    use std::os::unix::fs::MetadataExt;
                    let meta =
                        std::fs::metadata(path).map_err(|e| OAuthError::SecretUnavailable {
                            reason: format!("`{shown}`: {e}"),
                        })?;
                    if meta.mode() & 0o077 != 0 {
                        return Err(OAuthError::SecretUnavailable {
                            reason: format!(
                                "`{shown}` is readable by group or others (chmod 600 it)"
                            ),
                        });
                    }
                }
                let text =
                    std::fs::read_to_string(path).map_err(|e| OAuthError::SecretUnavailable {
                        reason: format!("`{shown}`: {e}"),
                    })?;
                let value = text.trim();
                if value.is_empty() {
                    return Err(OAuthError::SecretUnavailable {
                        reason: format!("`{shown}` is empty"),
                    });
                }
                Ok(Secret::new(value))
            }
            Self::Env(name) => match std::env::var(name) {
                Ok(v) if !v.trim().is_empty() => Ok(Secret::new(v.trim())),
                _ => Err(OAuthError::SecretUnavailable {
                    reason: format!("environment variable `{name}` is unset or empty"),
                }),
            },
        }
    }
}

/// How the client authenticates at the token endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenAuth {
    /// A public client: `client_id` in the body, no secret.
    None,
    /// HTTP Basic with the id and the secret.
    ClientSecretBasic,
    /// The id and the secret in the body.
    ClientSecretPost,
}

/// The client hintgate is, at one authorization server. `Debug` never
/// shows the secret (it is a [`Secret`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Client {
    /// The client id.
    pub client_id: String,
    /// The secret, for a confidential client.
    pub client_secret: Option<Secret>,
    /// How it authenticates at the token endpoint.
    pub auth: TokenAuth,
    /// The redirect URI registered (loopback), when there is one.
    pub redirect_uri: Option<String>,
}

impl Client {
    /// The form fields and headers that authenticate this client at the
    /// token endpoint, added to `form` and `headers`.
    pub(crate) fn authenticate(
        &self,
        form: &mut Vec<(&'static str, String)>,
        headers: &mut Vec<(String, String)>,
    ) {
        match (self.auth, &self.client_secret) {
            (TokenAuth::ClientSecretBasic, Some(secret)) => {
                use base64::Engine as _;
                // RFC 6749 §2.3.1: each part form-encoded before joining.
                let enc =
                    |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
                let pair = format!("{}:{}", enc(&self.client_id), enc(secret.expose()));
                headers.push((
                    "authorization".to_owned(),
                    format!(
                        "Basic {}",
                        base64::engine::general_purpose::STANDARD.encode(pair)
                    ),
                ));
            }
            (TokenAuth::ClientSecretPost, Some(secret)) => {
                form.push(("client_id", self.client_id.clone()));
                form.push(("client_secret", secret.expose().to_owned()));
            }
            _ => form.push(("client_id", self.client_id.clone())),
        }
    }
}

/// Picks how a client with (or without) a secret authenticates, from what
/// the server offers (RFC 8414: `client_secret_basic` when unsaid).
pub fn token_auth_for(meta: &ServerMetadata, has_secret: bool) -> TokenAuth {
    if !has_secret {
        return TokenAuth::None;
    }
    let offered = meta.token_endpoint_auth_methods_supported.as_deref();
    let offers = |m: &str| offered.is_none_or(|o| o.iter().any(|x| x == m));
    if offers("client_secret_basic") {
        TokenAuth::ClientSecretBasic
    } else if offered.is_some_and(|o| o.iter().any(|x| x == "client_secret_post")) {
        TokenAuth::ClientSecretPost
    } else {
        TokenAuth::ClientSecretBasic
    }
}

/// What the config says about the client (`[servers.X.oauth]`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientSettings {
    /// A pre-registered client id.
    pub client_id: Option<String>,
    /// Where its secret is, for a confidential client.
    pub client_secret: Option<SecretSource>,
    /// The URL of a client ID metadata document the user hosts.
    pub client_metadata_url: Option<String>,
    /// The name shown to a person on the consent page (dynamic
    /// registration).
    pub client_name: String,
}

/// How the client will be obtained, before any network call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistrationPlan {
    /// The pre-registered client.
    PreRegistered(Client),
    /// The client ID metadata document URL, used as the client id.
    MetadataDocument(Client),
    /// Dynamic registration at this endpoint.
    Dynamic {
        /// The registration endpoint.
        endpoint: String,
    },
}

/// Chooses the registration in the spec's order: a pre-registered client,
/// then a client ID metadata document when the server accepts them, then
/// dynamic registration when the server offers it.
pub fn plan_registration(
    settings: &ClientSettings,
    meta: &ServerMetadata,
    redirect_uri: Option<&str>,
) -> Result<RegistrationPlan, OAuthError> {
    if let Some(uri) = redirect_uri {
        check_redirect_uri(uri)?;
    }
    if let Some(id) = &settings.client_id {
        let secret = settings
            .client_secret
            .as_ref()
            .map(SecretSource::load)
            .transpose()?;
        let auth = token_auth_for(meta, secret.is_some());
        return Ok(RegistrationPlan::PreRegistered(Client {
            client_id: id.clone(),
            client_secret: secret,
            auth,
            redirect_uri: redirect_uri.map(str::to_owned),
        }));
    }
    if let Some(url) = &settings.client_metadata_url
        && meta.client_id_metadata_document_supported == Some(true)
    {
        let parsed = parse_endpoint_url(url)?;
        if parsed.scheme() != "https" || parsed.path().trim_end_matches('/').is_empty() {
            return Err(OAuthError::InvalidUrl {
                url: url.clone(),
                reason: "a client metadata document URL is https with a path",
            });
        }
        return Ok(RegistrationPlan::MetadataDocument(Client {
            client_id: url.clone(),
            client_secret: None,
            auth: TokenAuth::None,
            redirect_uri: redirect_uri.map(str::to_owned),
        }));
    }
    match &meta.registration_endpoint {
        Some(endpoint) => Ok(RegistrationPlan::Dynamic {
            endpoint: endpoint.clone(),
        }),
        None => Err(OAuthError::NoRegistration {
            issuer: meta.issuer.clone(),
        }),
    }
}

#[derive(Deserialize)]
struct RegistrationResponse {
    client_id: String,
    #[serde(default)]
    client_secret: Option<String>,
    #[serde(default)]
    token_endpoint_auth_method: Option<String>,
    #[serde(default)]
    redirect_uris: Option<Vec<String>>,
}

/// Registers hintgate dynamically (RFC 7591) as a public client with the
/// grants it will use. A response that changes the redirect URIs to
/// anything but the one asked for is refused.
pub async fn register_dynamic<H: HttpClient>(
    http: &H,
    endpoint: &str,
    meta: &ServerMetadata,
    client_name: &str,
    redirect_uri: Option<&str>,
    grant_types: &[&str],
    scope: Option<&str>,
) -> Result<Client, OAuthError> {
    parse_endpoint_url(endpoint)?;
    let mut body = serde_json::Map::new();
    body.insert("client_name".into(), client_name.into());
    body.insert("grant_types".into(), grant_types.into());
    body.insert("token_endpoint_auth_method".into(), "none".into());
    if let Some(uri) = redirect_uri {
        check_redirect_uri(uri)?;
        body.insert("redirect_uris".into(), vec![uri].into());
        body.insert("response_types".into(), vec!["code"].into());
    }
    if let Some(s) = scope {
        body.insert("scope".into(), s.into());
    }
    let body = serde_json::Value::Object(body);
    let response = http.send(HttpRequest::post_json(endpoint, &body)).await?;
    if !response.is_success() {
        return Err(OAuthError::UnexpectedStatus {
            url: endpoint.to_owned(),
            status: response.status,
        });
    }
    let reg: RegistrationResponse =
        serde_json::from_slice(&response.body).map_err(|_| OAuthError::Malformed {
            what: "registration response",
            url: endpoint.to_owned(),
            // serde's message can quote a value, and this response carries
            // the client secret: a fixed text instead.
            reason: "not a JSON object with a string client_id".to_owned(),
        })?;
    if let (Some(uris), Some(ours)) = (&reg.redirect_uris, redirect_uri)
        && uris.iter().any(|u| u != ours)
    {
        let other = uris
            .iter()
            .find(|u| *u != ours)
            .cloned()
            .unwrap_or_default();
        return Err(OAuthError::RedirectNotLoopback { uri: other });
    }
    let secret = reg.client_secret.filter(|s| !s.is_empty()).map(Secret::new);
    let auth = match reg.token_endpoint_auth_method.as_deref() {
        Some("client_secret_post") if secret.is_some() => TokenAuth::ClientSecretPost,
        Some("client_secret_basic") if secret.is_some() => TokenAuth::ClientSecretBasic,
        _ => token_auth_for(meta, secret.is_some()),
    };
    Ok(Client {
        client_id: reg.client_id,
        client_secret: secret,
        auth,
        redirect_uri: redirect_uri.map(str::to_owned),
    })
}
