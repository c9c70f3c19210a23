//! Scopes, PKCE, the authorization request and its redirect, the token
//! endpoint (code, refresh, device, client credentials), revocation, and
//! what to do after a 401 or a 403.

use std::fmt;
use std::time::Duration;

use base64::Engine as _;
use serde::Deserialize;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;
use url::Url;

use crate::challenge::BearerChallenge;
use crate::metadata::{ResourceMetadata, ServerMetadata};
use crate::register::Client;
use crate::{
    Clock, HttpClient, HttpRequest, HttpResponse, OAuthError, Secret, parse_endpoint_url, safe_code,
};

const DEVICE_GRANT: &str = "urn:ietf:params:oauth:grant-type:device_code";

/// The scopes to ask for, as the MCP spec orders them: the person's own
/// choice (`--scope`), else the challenge's `scope`, else the resource's
/// `scopes_supported`, else none (the parameter is left out). When
/// `want_refresh` and the authorization server publishes `offline_access`,
/// it is added.
pub fn choose_scopes(
    chosen: Option<&[String]>,
    challenge: Option<&BearerChallenge>,
    resource: &ResourceMetadata,
    server: &ServerMetadata,
    want_refresh: bool,
) -> Vec<String> {
    let mut scopes: Vec<String> = chosen
        .map(<[String]>::to_vec)
        .or_else(|| challenge.and_then(|c| c.scope.clone()))
        .or_else(|| resource.scopes_supported.clone())
        .unwrap_or_default();
    if want_refresh
        && server.offers_offline_access()
        && !scopes.iter().any(|s| s == "offline_access")
    {
        scopes.push("offline_access".to_owned());
    }
    scopes.dedup();
    scopes
}

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// 32 random bytes from the operating system, base64url (43 characters).
pub fn random_value() -> Result<Secret, OAuthError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| OAuthError::Listener {
        reason: format!("no random bytes: {e}"),
    })?;
    Ok(Secret::new(b64url(&bytes)))
}

/// A PKCE pair (RFC 7636) with the S256 method.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pkce {
    /// The verifier, sent with the code.
    pub verifier: Secret,
    /// `BASE64URL(SHA256(verifier))`, sent in the authorization request.
    pub challenge: String,
}

impl Pkce {
    /// A fresh pair.
    pub fn generate() -> Result<Self, OAuthError> {
        Ok(Self::from_verifier(random_value()?))
    }

    /// The pair for a given verifier.
    pub fn from_verifier(verifier: Secret) -> Self {
        let challenge = b64url(&Sha256::digest(verifier.expose().as_bytes()));
        Self {
            verifier,
            challenge,
        }
    }
}

/// One authorization request: the URL a person opens, and what its
/// redirect is checked against. `Debug` never shows the state or the
/// verifier.
#[derive(Clone)]
pub struct AuthorizationRequest {
    /// The URL to open in a browser (it carries the state and the PKCE
    /// challenge, which are meant for the browser).
    pub url: String,
    /// The state sent, compared with the redirect's.
    pub state: Secret,
    /// The PKCE pair.
    pub pkce: Pkce,
    /// The redirect URI sent.
    pub redirect_uri: String,
    /// The issuer, compared with the redirect's `iss` (RFC 9207).
    pub issuer: String,
    /// Whether the server promised `iss` in its redirects.
    pub iss_required: bool,
    /// The resource (RFC 8707).
    pub resource: String,
    /// The scopes asked for.
    pub scopes: Vec<String>,
}

impl fmt::Debug for AuthorizationRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthorizationRequest")
            .field("issuer", &self.issuer)
            .field("resource", &self.resource)
            .field("scopes", &self.scopes)
            .field("redirect_uri", &self.redirect_uri)
            .finish_non_exhaustive()
    }
}

/// Builds the authorization request: `response_type=code`, the client,
/// the loopback redirect URI, PKCE S256, a fresh `state`, the scopes and
/// the `resource`. Refuses a server without S256 or an authorization
/// endpoint, and a redirect URI off loopback.
pub fn authorization_request(
    server: &ServerMetadata,
    client: &Client,
    resource: &str,
    scopes: &[String],
    redirect_uri: &str,
    pkce: Pkce,
    state: Secret,
) -> Result<AuthorizationRequest, OAuthError> {
    server.require_pkce_s256()?;
    crate::urls::check_redirect_uri(redirect_uri)?;
    let endpoint =
        server
            .authorization_endpoint
            .as_deref()
            .ok_or_else(|| OAuthError::GrantUnsupported {
                issuer: server.issuer.clone(),
                grant: "an authorization endpoint",
            })?;
    let mut url: Url = parse_endpoint_url(endpoint)?;
    {
        let mut q = url.query_pairs_mut();
        q.append_pair("response_type", "code");
        q.append_pair("client_id", &client.client_id);
        q.append_pair("redirect_uri", redirect_uri);
        q.append_pair("code_challenge", &pkce.challenge);
        q.append_pair("code_challenge_method", "S256");
        q.append_pair("state", state.expose());
        if !scopes.is_empty() {
            q.append_pair("scope", &scopes.join(" "));
        }
        q.append_pair("resource", resource);
    }
    Ok(AuthorizationRequest {
        url: url.to_string(),
        state,
        pkce,
        redirect_uri: redirect_uri.to_owned(),
        issuer: server.issuer.clone(),
        iss_required: server.authorization_response_iss_parameter_supported == Some(true),
        resource: resource.to_owned(),
        scopes: scopes.to_vec(),
    })
}

/// Checks a redirect's query against the request and returns the code:
/// the `state` must be the one sent (compared in constant time), an `iss`
/// must be the issuer (and is required when the server promised it), an
/// `error` is the server's refusal.
pub fn parse_redirect(query: &str, request: &AuthorizationRequest) -> Result<Secret, OAuthError> {
    let mut state = None;
    let mut code = None;
    let mut error = None;
    let mut iss = None;
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        let slot = match &*k {
            "state" => &mut state,
            "code" => &mut code,
            "error" => &mut error,
            "iss" => &mut iss,
            _ => continue,
        };
        if slot.is_some() {
            // A repeated parameter is never guessed at.
            return Err(OAuthError::StateMismatch);
        }
        *slot = Some(v.into_owned());
    }
    let state_ok = state
        .as_deref()
        .is_some_and(|s| bool::from(s.as_bytes().ct_eq(request.state.expose().as_bytes())));
    if !state_ok {
        return Err(OAuthError::StateMismatch);
    }
    match (&iss, request.iss_required) {
        (Some(i), _) => {
            let same = match (Url::parse(i), Url::parse(&request.issuer)) {
                (Ok(a), Ok(b)) => crate::urls::same_identifier(&a, &b),
                _ => false,
            };
            if !same {
                return Err(OAuthError::RedirectIssuerMismatch {
                    expected: request.issuer.clone(),
                });
            }
        }
        (None, true) => {
            return Err(OAuthError::RedirectIssuerMismatch {
                expected: request.issuer.clone(),
            });
        }
        (None, false) => {}
    }
    if let Some(e) = error {
        return Err(OAuthError::AuthorizationDenied {
            error: safe_code(&e),
        });
    }
    match code {
        Some(c) if !c.is_empty() => Ok(Secret::new(c)),
        _ => Err(OAuthError::MissingCode),
    }
}

/// The tokens of one grant. `Debug` never shows a token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenSet {
    /// The access token, sent as `Authorization: Bearer`.
    pub access_token: Secret,
    /// The refresh token, when the server gave one.
    pub refresh_token: Option<Secret>,
    /// When the access token expires (Unix seconds), when the server said.
    pub expires_at: Option<u64>,
    /// The scopes granted (the server's `scope`, else those asked for).
    pub scopes: Vec<String>,
}

impl TokenSet {
    /// Whether the access token should be refreshed before use: it expires
    /// within `margin` seconds of `now`.
    pub fn needs_refresh(&self, now: u64, margin: u64) -> bool {
        self.expires_at
            .is_some_and(|at| at <= now.saturating_add(margin))
    }
}

#[derive(Deserialize)]
struct RawToken {
    access_token: Option<String>,
    token_type: Option<String>,
    #[serde(default)]
    expires_in: Option<serde_json::Value>,
    #[serde(default)]
    refresh_token: Option<String>,
    #[serde(default)]
    scope: Option<String>,
}

#[derive(Deserialize)]
struct RawError {
    error: String,
}

/// Reads a token endpoint's answer: a success must carry an access token
/// and `token_type` Bearer (case-insensitive); an error gives its OAuth
/// code only (never its description, which a server could fill with
/// anything).
pub fn parse_token_response(
    response: &HttpResponse,
    url: &str,
    now: u64,
    asked: &[String],
) -> Result<TokenSet, OAuthError> {
    if !response.is_success() {
        if let Ok(e) = serde_json::from_slice::<RawError>(&response.body) {
            return Err(OAuthError::TokenRefused {
                error: safe_code(&e.error),
            });
        }
        return Err(OAuthError::UnexpectedStatus {
            url: url.to_owned(),
            status: response.status,
        });
    }
    let malformed = |reason: &str| OAuthError::Malformed {
        what: "token response",
        url: url.to_owned(),
        reason: reason.to_owned(),
    };
    // serde's errors can quote a value; the token response's are replaced
    // by a fixed text.
    let raw: RawToken =
        serde_json::from_slice(&response.body).map_err(|_| malformed("not a JSON object"))?;
    let access = raw
        .access_token
        .filter(|t| !t.is_empty())
        .ok_or_else(|| malformed("no access_token"))?;
    match raw.token_type.as_deref() {
        Some(t) if t.eq_ignore_ascii_case("bearer") => {}
        other => {
            return Err(OAuthError::TokenTypeUnsupported {
                token_type: safe_code(other.unwrap_or("")),
            });
        }
    }
    let expires_in = match raw.expires_in {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::Number(n)) => n.as_u64(),
        Some(serde_json::Value::String(s)) => s.parse::<u64>().ok(),
        Some(_) => None,
    };
    Ok(TokenSet {
        access_token: Secret::new(access),
        refresh_token: raw.refresh_token.filter(|t| !t.is_empty()).map(Secret::new),
        expires_at: expires_in.map(|s| now.saturating_add(s)),
        scopes: match raw.scope {
            Some(s) => s
                .split(' ')
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect(),
            None => asked.to_vec(),
        },
    })
}

async fn token_call<H: HttpClient, C: Clock>(
    http: &H,
    clock: &C,
    server: &ServerMetadata,
    client: &Client,
    mut form: Vec<(&'static str, String)>,
    asked: &[String],
) -> Result<TokenSet, OAuthError> {
    let endpoint = parse_endpoint_url(&server.token_endpoint)?;
    let mut headers = Vec::new();
    client.authenticate(&mut form, &mut headers);
    let pairs: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut request = HttpRequest::post_form(endpoint.as_str(), &pairs);
    request.headers.extend(headers);
    let response = http.send(request).await?;
    parse_token_response(&response, endpoint.as_str(), clock.now(), asked)
}

/// Exchanges an authorization code (with the PKCE verifier, the redirect
/// URI and the resource) for tokens.
pub async fn exchange_code<H: HttpClient, C: Clock>(
    http: &H,
    clock: &C,
    server: &ServerMetadata,
    client: &Client,
    request: &AuthorizationRequest,
    code: &Secret,
) -> Result<TokenSet, OAuthError> {
    let form = vec![
        ("grant_type", "authorization_code".to_owned()),
        ("code", code.expose().to_owned()),
        ("redirect_uri", request.redirect_uri.clone()),
        ("code_verifier", request.pkce.verifier.expose().to_owned()),
        ("resource", request.resource.clone()),
    ];
    token_call(http, clock, server, client, form, &request.scopes).await
}

/// Refreshes `tokens`. The new refresh token replaces the old one when the
/// server rotates it; the old one is kept when the server sends none. The
/// scopes are never widened: the request names none, and granted scopes
/// the server returns are what it says.
pub async fn refresh<H: HttpClient, C: Clock>(
    http: &H,
    clock: &C,
    server: &ServerMetadata,
    client: &Client,
    resource: &str,
    tokens: &TokenSet,
) -> Result<TokenSet, OAuthError> {
    let Some(rt) = &tokens.refresh_token else {
        return Err(OAuthError::TokenRefused {
            error: "no_refresh_token".to_owned(),
        });
    };
    let form = vec![
        ("grant_type", "refresh_token".to_owned()),
        ("refresh_token", rt.expose().to_owned()),
        ("resource", resource.to_owned()),
    ];
    let mut fresh = token_call(http, clock, server, client, form, &tokens.scopes).await?;
    if fresh.refresh_token.is_none() {
        fresh.refresh_token = tokens.refresh_token.clone();
    }
    Ok(fresh)
}

/// The client credentials grant (a service account): the client's own
/// secret, the scopes and the resource.
pub async fn client_credentials<H: HttpClient, C: Clock>(
    http: &H,
    clock: &C,
    server: &ServerMetadata,
    client: &Client,
    resource: &str,
    scopes: &[String],
) -> Result<TokenSet, OAuthError> {
    if client.client_secret.is_none() {
        return Err(OAuthError::SecretUnavailable {
            reason: "client credentials need a client secret".to_owned(),
        });
    }
    let mut form = vec![
        ("grant_type", "client_credentials".to_owned()),
        ("resource", resource.to_owned()),
    ];
    if !scopes.is_empty() {
        form.push(("scope", scopes.join(" ")));
    }
    token_call(http, clock, server, client, form, scopes).await
}

/// A device authorization (RFC 8628) waiting for a person. `Debug` never
/// shows the device code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAuthorization {
    /// The device code, polled with.
    pub device_code: Secret,
    /// The code the person types.
    pub user_code: String,
    /// Where the person goes.
    pub verification_uri: String,
    /// The same with the code filled in, when the server gives it.
    pub verification_uri_complete: Option<String>,
    /// When it expires (Unix seconds).
    pub expires_at: u64,
    /// Seconds between polls.
    pub interval: u64,
    /// The resource asked for.
    pub resource: String,
    /// The scopes asked for.
    pub scopes: Vec<String>,
}

#[derive(Deserialize)]
struct RawDevice {
    device_code: String,
    user_code: String,
    verification_uri: String,
    #[serde(default)]
    verification_uri_complete: Option<String>,
    expires_in: u64,
    #[serde(default)]
    interval: Option<u64>,
}

/// Starts the device authorization grant where the server offers it.
pub async fn start_device<H: HttpClient, C: Clock>(
    http: &H,
    clock: &C,
    server: &ServerMetadata,
    client: &Client,
    resource: &str,
    scopes: &[String],
) -> Result<DeviceAuthorization, OAuthError> {
    let endpoint = match (
        &server.device_authorization_endpoint,
        server.offers_grant(DEVICE_GRANT),
    ) {
        (Some(e), true) => parse_endpoint_url(e)?,
        _ => {
            return Err(OAuthError::GrantUnsupported {
                issuer: server.issuer.clone(),
                grant: "the device authorization grant",
            });
        }
    };
    let mut form = vec![("resource", resource.to_owned())];
    if !scopes.is_empty() {
        form.push(("scope", scopes.join(" ")));
    }
    let mut headers = Vec::new();
    client.authenticate(&mut form, &mut headers);
    let pairs: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut request = HttpRequest::post_form(endpoint.as_str(), &pairs);
    request.headers.extend(headers);
    let response = http.send(request).await?;
    if !response.is_success() {
        return Err(OAuthError::UnexpectedStatus {
            url: endpoint.to_string(),
            status: response.status,
        });
    }
    let raw: RawDevice =
        serde_json::from_slice(&response.body).map_err(|_| OAuthError::Malformed {
            what: "device authorization response",
            url: endpoint.to_string(),
            reason: "missing or mistyped fields".to_owned(),
        })?;
    // The person is sent there: https only (http on loopback).
    parse_endpoint_url(&raw.verification_uri)?;
    if let Some(c) = &raw.verification_uri_complete {
        parse_endpoint_url(c)?;
    }
    Ok(DeviceAuthorization {
        device_code: Secret::new(raw.device_code),
        user_code: raw.user_code,
        verification_uri: raw.verification_uri,
        verification_uri_complete: raw.verification_uri_complete,
        expires_at: clock.now().saturating_add(raw.expires_in),
        interval: raw.interval.unwrap_or(5).clamp(1, 60),
        resource: resource.to_owned(),
        scopes: scopes.to_vec(),
    })
}

/// Polls the token endpoint until the person approves the device
/// authorization, refuses it, or it expires; `slow_down` adds 5 seconds to
/// the interval (RFC 8628 §3.5).
pub async fn poll_device<H: HttpClient, C: Clock>(
    http: &H,
    clock: &C,
    server: &ServerMetadata,
    client: &Client,
    device: &DeviceAuthorization,
) -> Result<TokenSet, OAuthError> {
    let mut interval = device.interval;
    loop {
        if clock.now() >= device.expires_at {
            return Err(OAuthError::DeviceExpired);
        }
        clock.sleep(Duration::from_secs(interval)).await;
        let form = vec![
            ("grant_type", DEVICE_GRANT.to_owned()),
            ("device_code", device.device_code.expose().to_owned()),
            ("resource", device.resource.clone()),
        ];
        match token_call(http, clock, server, client, form, &device.scopes).await {
            Ok(tokens) => return Ok(tokens),
            Err(OAuthError::TokenRefused { error }) if error == "authorization_pending" => {}
            Err(OAuthError::TokenRefused { error }) if error == "slow_down" => {
                interval = interval.saturating_add(5).min(120);
            }
            Err(OAuthError::TokenRefused { error }) if error == "expired_token" => {
                return Err(OAuthError::DeviceExpired);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Revokes a token (RFC 7009) where the server has a revocation endpoint;
/// `Ok(false)` when it has none.
pub async fn revoke<H: HttpClient>(
    http: &H,
    server: &ServerMetadata,
    client: &Client,
    token: &Secret,
    hint: &'static str,
) -> Result<bool, OAuthError> {
    let Some(endpoint) = &server.revocation_endpoint else {
        return Ok(false);
    };
    let endpoint = parse_endpoint_url(endpoint)?;
    let mut form = vec![
        ("token", token.expose().to_owned()),
        ("token_type_hint", hint.to_owned()),
    ];
    let mut headers = Vec::new();
    client.authenticate(&mut form, &mut headers);
    let pairs: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut request = HttpRequest::post_form(endpoint.as_str(), &pairs);
    request.headers.extend(headers);
    let response = http.send(request).await?;
    if response.is_success() {
        Ok(true)
    } else {
        Err(OAuthError::UnexpectedStatus {
            url: endpoint.to_string(),
            status: response.status,
        })
    }
}

/// What to do after the server refused a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NextStep {
    /// Refresh the access token and retry once.
    Refresh,
    /// Discover again and get a new token (the first call, with no token
    /// yet), from the challenge.
    Authorize(BearerChallenge),
}

/// Counts a server's refusals of one call, so a server that answers 401 to
/// every token cannot keep hintgate asking for new ones: with a token, one
/// refresh; then a person must log in again; a 401 to a token just got is
/// an [`OAuthError::UnauthorizedLoop`]. A 403 `insufficient_scope` is a
/// request for more power and always goes to a person.
#[derive(Debug, Clone, Default)]
pub struct RefusalGuard {
    refreshed: bool,
    authorized: u32,
}

impl RefusalGuard {
    /// The limit of tokens tried for one call.
    pub const MAX_AUTHORIZATIONS: u32 = 1;

    /// Decides the next step after `status` (401 or 403) with `challenge`.
    /// `server` names the server in errors; `have_token` and
    /// `can_refresh` say what the caller holds.
    pub fn after_refusal(
        &mut self,
        server: &str,
        status: u16,
        challenge: Option<BearerChallenge>,
        have_token: bool,
        can_refresh: bool,
    ) -> Result<NextStep, OAuthError> {
        let challenge = challenge.unwrap_or_default();
        if status == 403 && challenge.is_insufficient_scope() {
            return Err(OAuthError::StepUpRequired {
                server: server.to_owned(),
                scopes: challenge.scope.unwrap_or_default().join(" "),
            });
        }
        if status != 401 {
            return Err(OAuthError::UnexpectedStatus {
                url: server.to_owned(),
                status,
            });
        }
        if self.authorized >= Self::MAX_AUTHORIZATIONS {
            return Err(OAuthError::UnauthorizedLoop {
                attempts: self.authorized + u32::from(self.refreshed),
            });
        }
        if have_token && can_refresh && !self.refreshed {
            self.refreshed = true;
            return Ok(NextStep::Refresh);
        }
        if have_token {
            return Err(OAuthError::LoginRequired {
                server: server.to_owned(),
            });
        }
        self.authorized += 1;
        Ok(NextStep::Authorize(challenge))
    }
}
