//! The client side of the MCP authorization flow, with hintgate as the OAuth
//! client of a remote (`url`) server.
//!
//! The pieces, in the order a login uses them:
//!
//! 1. [`challenge`]: the `WWW-Authenticate: Bearer` challenge of a 401 or a
//!    403 (`resource_metadata`, `scope`, `error`).
//! 2. [`metadata`]: protected resource metadata (RFC 9728), from the
//!    challenge or the well-known URLs, its `resource` checked against the
//!    server's URL; authorization server metadata (RFC 8414, then OpenID
//!    Connect discovery), its `issuer` checked, and only for an authorization
//!    server the resource metadata names.
//! 3. [`register`]: the client, in the spec's order: a pre-registered
//!    `client_id` (its secret from a file or the environment), a client ID
//!    metadata document, dynamic registration (RFC 7591).
//! 4. [`flow`]: scopes, PKCE (S256), the authorization URL with `state` and
//!    `resource` (RFC 8707), the redirect checked, the code exchanged; token
//!    refresh with rotation; the device authorization grant (RFC 8628);
//!    client credentials; what to do after a 401 or a 403.
//! 5. [`loopback`]: the redirect listener on 127.0.0.1.
//!
//! Every function that does I/O takes its HTTP client ([`HttpClient`]) and
//! its clock ([`Clock`]) from the caller, so the logic is tested without a
//! network. No redirect is ever followed and every body is bounded.
//!
//! Tokens, secrets, codes and verifiers are held in [`Secret`], whose
//! `Debug` and `Display` never show the value; no error ([`OAuthError`])
//! carries a value a server sent in a token field.

#![forbid(unsafe_code)]

pub mod challenge;
pub mod flow;
mod http;
pub mod loopback;
pub mod metadata;
pub mod register;
mod secret;
pub mod stored;
mod urls;

pub use http::{
    AddressClass, AddressGuard, Clock, HttpClient, HttpRequest, HttpResponse, MAX_BODY_BYTES,
    Method, ReqwestClient, SystemClock,
};
pub use secret::Secret;
pub use urls::{is_loopback_host, parse_endpoint_url};

/// Why a step of the flow failed. Each variant has a stable code
/// ([`OAuthError::code`]) for logs, records and documentation. No variant
/// holds a token, a secret, a code or a verifier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OAuthError {
    /// A URL could not be parsed, or uses a scheme other than `https`
    /// (`http` is allowed on loopback only).
    #[error("invalid url `{url}`: {reason}")]
    InvalidUrl {
        /// The URL, as given.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The network call failed (connection, TLS, a body too large).
    #[error("request to `{url}` failed: {reason}")]
    Transport {
        /// The URL called.
        url: String,
        /// What failed.
        reason: String,
    },
    /// A metadata or registration endpoint answered with a status other than
    /// success (including a redirect, which is never followed, and a 401).
    #[error("`{url}` answered status {status}")]
    UnexpectedStatus {
        /// The URL called.
        url: String,
        /// The HTTP status.
        status: u16,
    },
    /// A document was not the JSON object the flow expects.
    #[error("malformed {what} from `{url}`: {reason}")]
    Malformed {
        /// Which document.
        what: &'static str,
        /// Where it came from.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No protected resource metadata was found at any place the spec names.
    #[error("no protected resource metadata for `{resource}`")]
    NoResourceMetadata {
        /// The server's URL.
        resource: String,
    },
    /// The protected resource metadata describes another resource.
    #[error("resource metadata names resource `{declared}`, not the server `{expected}`")]
    ResourceMismatch {
        /// The server's URL.
        expected: String,
        /// The `resource` the metadata declares.
        declared: String,
    },
    /// The resource metadata names no authorization server.
    #[error("resource metadata for `{resource}` names no authorization server")]
    NoAuthorizationServer {
        /// The server's URL.
        resource: String,
    },
    /// An authorization server the resource metadata does not name was
    /// offered (by configuration or by a metadata document).
    #[error("authorization server `{issuer}` is not named by the resource metadata")]
    AuthorizationServerNotNamed {
        /// The issuer offered.
        issuer: String,
    },
    /// No authorization server metadata was found for an issuer.
    #[error("no authorization server metadata for issuer `{issuer}`")]
    NoServerMetadata {
        /// The issuer.
        issuer: String,
    },
    /// The authorization server metadata declares another issuer than the
    /// one it was fetched for.
    #[error("authorization server metadata for `{expected}` declares issuer `{declared}`")]
    IssuerMismatch {
        /// The issuer the metadata was fetched for.
        expected: String,
        /// The `issuer` it declares.
        declared: String,
    },
    /// The authorization server does not offer PKCE with S256.
    #[error("authorization server `{issuer}` does not offer PKCE with S256")]
    PkceUnsupported {
        /// The issuer.
        issuer: String,
    },
    /// The authorization server does not offer a grant the flow needs.
    #[error("authorization server `{issuer}` does not offer {grant}")]
    GrantUnsupported {
        /// The issuer.
        issuer: String,
        /// The grant or endpoint missing.
        grant: &'static str,
    },
    /// No way to register a client: no pre-registered client, no client ID
    /// metadata document accepted, no registration endpoint.
    #[error("no way to register a client with `{issuer}`: configure a client_id")]
    NoRegistration {
        /// The issuer.
        issuer: String,
    },
    /// A client secret could not be read from where the config says.
    #[error("client secret unavailable: {reason}")]
    SecretUnavailable {
        /// Why (a path or a variable name, never the value).
        reason: String,
    },
    /// A redirect URI that is not `http` on a loopback address with a port.
    #[error("redirect uri `{uri}` is not a loopback address")]
    RedirectNotLoopback {
        /// The URI.
        uri: String,
    },
    /// The redirect's `state` is not the one this login sent.
    #[error("the redirect's state does not match this login")]
    StateMismatch,
    /// The redirect's `iss` (RFC 9207) is not the authorization server's
    /// issuer, or is missing where the server promised it.
    #[error("the redirect's issuer does not match `{expected}`")]
    RedirectIssuerMismatch {
        /// The issuer expected.
        expected: String,
    },
    /// The authorization server refused the authorization (the redirect's
    /// `error`, such as `access_denied`).
    #[error("authorization refused: `{error}`")]
    AuthorizationDenied {
        /// The OAuth error code, reduced to its safe characters.
        error: String,
    },
    /// The redirect carried no code.
    #[error("the redirect carried no authorization code")]
    MissingCode,
    /// The token endpoint answered an OAuth error.
    #[error("token endpoint refused: `{error}`")]
    TokenRefused {
        /// The OAuth error code, reduced to its safe characters.
        error: String,
    },
    /// The token response's `token_type` is not `Bearer`.
    #[error("token type `{token_type}` is not Bearer")]
    TokenTypeUnsupported {
        /// The type given, reduced to its safe characters.
        token_type: String,
    },
    /// The device authorization expired before a person approved it.
    #[error("the device authorization expired")]
    DeviceExpired,
    /// The server answered 401 again after a refresh and a new login: the
    /// flow stops instead of looping.
    #[error("the server keeps refusing fresh tokens: stopped after {attempts} attempts")]
    UnauthorizedLoop {
        /// How many tokens were tried.
        attempts: u32,
    },
    /// A login by a person is needed (no token, or the refresh failed).
    #[error("login required: run `hintgate auth login {server}`")]
    LoginRequired {
        /// The server's name in the config.
        server: String,
    },
    /// The server asks for more scopes (403 `insufficient_scope`); more power
    /// is never granted silently, a person must approve it.
    #[error(
        "the server asks for more scopes ({scopes}): run `hintgate auth login {server} --scope ...`"
    )]
    StepUpRequired {
        /// The server's name in the config.
        server: String,
        /// The scopes the server asks for, space-separated.
        scopes: String,
    },
    /// The loopback listener failed or waited too long.
    #[error("redirect listener: {reason}")]
    Listener {
        /// What failed.
        reason: String,
    },
}

impl OAuthError {
    /// The stable code of this error, as documented in docs/oauth-client.md.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidUrl { .. } => "oauth-invalid-url",
            Self::Transport { .. } => "oauth-transport",
            Self::UnexpectedStatus { .. } => "oauth-unexpected-status",
            Self::Malformed { .. } => "oauth-malformed",
            Self::NoResourceMetadata { .. } => "oauth-no-resource-metadata",
            Self::ResourceMismatch { .. } => "oauth-resource-mismatch",
            Self::NoAuthorizationServer { .. } => "oauth-no-authorization-server",
            Self::AuthorizationServerNotNamed { .. } => "oauth-authorization-server-not-named",
            Self::NoServerMetadata { .. } => "oauth-no-server-metadata",
            Self::IssuerMismatch { .. } => "oauth-issuer-mismatch",
            Self::PkceUnsupported { .. } => "oauth-pkce-unsupported",
            Self::GrantUnsupported { .. } => "oauth-grant-unsupported",
            Self::NoRegistration { .. } => "oauth-no-registration",
            Self::SecretUnavailable { .. } => "oauth-secret-unavailable",
            Self::RedirectNotLoopback { .. } => "oauth-redirect-not-loopback",
            Self::StateMismatch => "oauth-state-mismatch",
            Self::RedirectIssuerMismatch { .. } => "oauth-redirect-issuer-mismatch",
            Self::AuthorizationDenied { .. } => "oauth-authorization-denied",
            Self::MissingCode => "oauth-missing-code",
            Self::TokenRefused { .. } => "oauth-token-refused",
            Self::TokenTypeUnsupported { .. } => "oauth-token-type-unsupported",
            Self::DeviceExpired => "oauth-device-expired",
            Self::UnauthorizedLoop { .. } => "oauth-unauthorized-loop",
            Self::LoginRequired { .. } => "oauth-login-required",
            Self::StepUpRequired { .. } => "oauth-step-up-required",
            Self::Listener { .. } => "oauth-listener",
        }
    }
}

/// Reduces a server-chosen short string (an OAuth error code, a token type)
/// to the characters such codes use, at most 64 of them, so a hostile server
/// cannot put a token, a line break or a long text into an error message.
pub(crate) fn safe_code(raw: &str) -> String {
    raw.chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        .take(64)
        .collect()
}
