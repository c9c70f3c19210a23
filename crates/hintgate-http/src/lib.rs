//! The gateway's Streamable HTTP host side: `hintgate run --listen`.
//!
//! Many hosts reach one running gateway over HTTP at `/mcp`, in both
//! protocol eras:
//!
//! - legacy (up to 2025-11-25): sessions named by an unguessable
//!   `Mcp-Session-Id`, bound to the principal that authenticated; a POST
//!   answered with JSON, or with an event stream when the gateway has more
//!   to say before the answer (a server's question, progress); a GET
//!   stream for what belongs to no request; resumption with
//!   `Last-Event-ID`; DELETE;
//! - 2026-07-28: POST only, the `MCP-Protocol-Version`, `Mcp-Method` and
//!   `Mcp-Name` headers checked against the body (a mismatch is refused
//!   with `-32020`), closing a request's stream cancels it; one gateway
//!   session per principal, so taint and approvals for the session follow
//!   the principal across its requests.
//!
//! Every request passes `admit`: the `Host` header (a name that resolves
//! to loopback is not this gateway's, which stops DNS rebinding), the
//! `Origin` (403 on a foreign one), and a bearer token, which the
//! [`Authenticate`] the caller passes turns into a [`Principal`] with a
//! [`Scope`]: a session whose scope is [`Scope::Read`] is shown only the
//! tools that are effectively read-only, and a call to another is answered
//! with 403 `insufficient_scope`. The host's token is never forwarded: the
//! servers are reached with what the configuration says.
//!
//! Each host session is a [`HostConn`] of the running gateway; `route`
//! delivers what the gateway writes to it.

#![forbid(unsafe_code)]

mod listener;
pub mod metrics;
pub mod oauth;
mod route;
mod tls;

pub use listener::Limits;
pub use metrics::{METRICS_PATH, ScrapeAuth, ScrapeCheck, metrics_router};
pub use oauth::{OAuth, OAuthSettings};
pub use tls::{HANDSHAKE_TIMEOUT, Tls};

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Extension;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use base64::Engine as _;
use hintgate_policy::decide::DecisionMeta;
pub use hintgate_policy::decide::Scope;
use hintgate_policy::reason::ReasonCode;
use hintgate_proxy::frame::{Framed, HostLine, Kind, Reading};
use hintgate_proxy::versions::{LEGACY_VERSIONS, MODERN_VERSION};
use hintgate_proxy::{HostConn, HostPort};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::listener::Ticket;
use crate::route::{Frame, HistoryBudget, Routes, Sink, Unresumable};

/// The path hosts reach the gateway at.
pub const ENDPOINT: &str = "/mcp";

/// Where the Protected Resource Metadata is (RFC 9728), when OAuth access
/// tokens are taken.
pub const METADATA: &str = "/.well-known/oauth-protected-resource";

/// How long a legacy session may go without a request before it is closed
/// (its calls end on record as `host-gone`), unless it has one open.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60 * 60);

/// How long a legacy session may go without a request before it forgets
/// what it kept for resuming streams that have ended (a stream still
/// waiting for its answer keeps its events until the session closes): a
/// host resumes a stream as soon as its connection drops, and one that
/// went away without ending its session (no DELETE) then holds the session
/// alone, not a history of its last events, until [`IDLE_TIMEOUT`].
pub const RESUME_WINDOW: Duration = Duration::from_secs(5 * 60);

/// The most legacy sessions open at once; past it a new `initialize` is
/// answered 503 until one closes or idles out.
pub const MAX_SESSIONS: usize = 10_000;

/// Who a request comes from, as its credentials say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// Its name: a token's name, or `local` when no authentication is asked.
    pub name: String,
    /// What it may do.
    pub scope: Scope,
}

/// Turns a bearer token into the principal it stands for.
pub trait Authenticate: Send + Sync + 'static {
    /// The principal of `token`, or `None` when it is not a valid token
    /// (unknown, revoked, expired). Called on the blocking pool: it may
    /// read a store.
    fn authenticate(&self, token: &str) -> Option<Principal>;

    /// What [`Authenticate::authenticate`] would answer, when it can be
    /// had without waiting (no network, no lock held elsewhere): the
    /// request is then admitted on the thread it arrived on, with no hop
    /// to the blocking pool. `None` when the answer would need a wait.
    fn authenticate_now(&self, token: &str) -> Option<Option<Principal>> {
        let _ = token;
        None
    }
}

/// How the host side answers.
#[derive(Clone)]
pub struct Options {
    /// The address the listener is bound to (for the `Host` and `Origin`
    /// values it answers to on loopback).
    pub addr: SocketAddr,
    /// It listens beyond loopback (`--listen-public`): `Host` is not
    /// checked, and a token is always needed.
    pub public: bool,
    /// Origins a browser page may call from besides the gateway's own.
    pub origins: Vec<String>,
    /// How bearer tokens are checked; `None` asks for none (loopback only).
    pub auth: Option<Arc<dyn Authenticate>>,
    /// The scope name `insufficient_scope` asks for when a call needs
    /// write (`write` for static tokens; the configured OAuth scope).
    pub write_scope: String,
    /// It serves HTTPS (the origins it answers to are `https://`).
    pub tls: bool,
    /// The OAuth resource server, when access tokens are taken: its
    /// metadata is served, and a 401 names it.
    pub oauth: Option<Arc<OAuth>>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("addr", &self.addr)
            .field("public", &self.public)
            .field("origins", &self.origins)
            .field("auth", &self.auth.is_some())
            .finish_non_exhaustive()
    }
}

/// Why the host side cannot start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// Listening beyond loopback without authentication.
    #[error(
        "listening beyond loopback needs tokens: no host may reach the gateway unauthenticated from the network"
    )]
    PublicWithoutAuth,
    /// The socket failed.
    #[error("the HTTP listener failed: {0}")]
    Io(#[from] std::io::Error),
    /// The TLS certificate or key cannot be used.
    #[error("TLS: {0}")]
    Tls(String),
}

/// The state every request shares.
struct Shared {
    port: HostPort,
    options: Options,
    /// `Host` values answered on loopback.
    hosts: Vec<String>,
    /// `Origin` values accepted.
    origins: Vec<String>,
    legacy: Mutex<HashMap<String, Arc<Session>>>,
    modern: Mutex<HashMap<String, Arc<Session>>>,
    next_id: AtomicU64,
    /// What every session's resumption history holds together.
    histories: Arc<HistoryBudget>,
    /// The next session's key in `histories`.
    next_routes: AtomicU64,
}

/// One host session over HTTP.
struct Session {
    principal: Principal,
    conn: Arc<HostConn>,
    routes: Arc<Routes>,
    last_used: Mutex<Instant>,
    modern: bool,
}

/// The router of the host side: `/mcp` behind `admit`.
///
/// # Errors
///
/// [`HttpError::PublicWithoutAuth`] for a public listener without tokens.
pub fn router(port: HostPort, options: Options) -> Result<Router, HttpError> {
    if options.public && options.auth.is_none() {
        return Err(HttpError::PublicWithoutAuth);
    }
    let port_number = options.addr.port();
    let mut hosts = Vec::new();
    let mut origins = options.origins.clone();
    if !options.public {
        for name in ["127.0.0.1", "localhost", "[::1]"] {
            hosts.push(format!("{name}:{port_number}"));
            let scheme = if options.tls { "https" } else { "http" };
            origins.push(format!("{scheme}://{name}:{port_number}"));
        }
    }
    let max_line = port.max_line();
    let shared = Arc::new(Shared {
        port,
        options,
        hosts,
        origins,
        legacy: Mutex::new(HashMap::new()),
        modern: Mutex::new(HashMap::new()),
        next_id: AtomicU64::new(1),
        histories: HistoryBudget::new(route::HISTORY_BUDGET_BYTES),
        next_routes: AtomicU64::new(0),
    });
    tokio::spawn(sweep(Arc::downgrade(&shared)));
    Ok(Router::new()
        .route(ENDPOINT, any(endpoint))
        .route(METADATA, axum::routing::get(metadata))
        .route(
            &format!("{METADATA}{ENDPOINT}"),
            axum::routing::get(metadata),
        )
        // A message is at most `max_message_bytes`: `read_body` refuses a
        // larger one before it is read whole (and the limit stands for any
        // extractor as well).
        .layer(DefaultBodyLimit::max(max_line))
        .with_state(shared))
}

/// Serves `router` on `listener` until `stop` completes, over TLS when
/// `tls` is given, within `limits`: deadlines for a request's headers and
/// each read of its body, and a bound on the connections that have not
/// authenticated, past which the oldest of them is closed (see
/// [`Limits`]). After `stop`, each connection ends once its request in
/// progress is answered, and this returns when all have.
///
/// # Errors
///
/// None today; the listener's own failures to accept are logged and
/// retried.
pub async fn serve(
    listener: tokio::net::TcpListener,
    tls: Option<Tls>,
    router: Router,
    limits: Limits,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(), HttpError> {
    listener::serve(listener, tls, router, limits, stop).await
}

/// Closes legacy sessions idle past [`IDLE_TIMEOUT`], and makes those
/// quiet for [`RESUME_WINDOW`] forget their ended streams, every minute.
async fn sweep(shared: std::sync::Weak<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_secs(60));
    loop {
        tick.tick().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let idle: Vec<Arc<Session>> = {
            let Ok(mut sessions) = shared.legacy.lock() else {
                return;
            };
            let now = Instant::now();
            let quiet = sessions.values().filter(|session| {
                session
                    .last_used
                    .lock()
                    .is_ok_and(|used| now.duration_since(*used) > RESUME_WINDOW)
            });
            let forgotten: usize = quiet.map(|session| session.routes.forget_ended()).sum();
            if forgotten > 0 {
                tracing::debug!(
                    forgotten,
                    "HTTP host sessions quiet for {} min forgot the events of their ended streams",
                    RESUME_WINDOW.as_secs() / 60
                );
            }
            let expired: Vec<String> = sessions
                .iter()
                .filter(|(_, session)| {
                    session
                        .last_used
                        .lock()
                        .is_ok_and(|used| now.duration_since(*used) > IDLE_TIMEOUT)
                })
                .map(|(id, _)| id.clone())
                .collect();
            expired
                .iter()
                .filter_map(|id| sessions.remove(id))
                .collect()
        };
        for session in idle {
            tracing::info!(
                principal = %session.principal.name,
                "an HTTP host session was idle for an hour: closed"
            );
            session.conn.close().await;
        }
        if shared.port.is_closed() {
            return;
        }
    }
}

/// The Protected Resource Metadata; 404 without OAuth.
async fn metadata(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Some(refused) = check_host(&shared, &headers) {
        return refused;
    }
    match &shared.options.oauth {
        Some(oauth) => json_response(StatusCode::OK, oauth.metadata().to_string()),
        None => plain(
            StatusCode::NOT_FOUND,
            "this gateway takes no OAuth access tokens",
        ),
    }
}

async fn endpoint(
    State(shared): State<Arc<Shared>>,
    ticket: Option<Extension<Arc<Ticket>>>,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // The body is read only once the request is admitted: a host that is
    // refused (no token, a foreign `Origin`) costs no read of its body.
    let principal = match admit(&shared, &headers).await {
        Ok(principal) => principal,
        Err(response) => return response,
    };
    // Its connection is a host's now: it no longer counts among those that
    // have not authenticated, and is not closed to make room for them.
    let ticket = ticket.map(|Extension(ticket)| ticket);
    if let Some(ticket) = &ticket {
        ticket.admitted();
    }
    match method {
        Method::POST => {
            let body =
                match read_body(body, &headers, shared.port.max_line(), ticket.as_deref()).await {
                    Ok(body) => body,
                    Err(response) => return response,
                };
            post(&shared, principal, &headers, &body).await
        }
        Method::GET => get(&shared, &principal, &headers),
        Method::DELETE => delete(&shared, &principal, &headers).await,
        _ => plain(StatusCode::METHOD_NOT_ALLOWED, "POST, GET or DELETE"),
    }
}

/// Reads a request's body of at most `limit` bytes: a `Content-Length`
/// over it is refused (413) before any of the body is read, and a body
/// without one (chunked) as soon as what arrived passes it. Over a
/// connection the listener took (`ticket`), a body that sends nothing for
/// [`Limits::body_timeout`] is answered 408.
async fn read_body(
    body: Body,
    headers: &HeaderMap,
    limit: usize,
    ticket: Option<&Ticket>,
) -> Result<Bytes, Response> {
    use futures_util::StreamExt as _;
    let too_large = || {
        plain(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("the body is over `max_message_bytes` ({limit} bytes)"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|text| text.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(too_large());
    }
    // What a host declares is not what it sends: room grows with what came.
    let mut read = Vec::with_capacity(declared.map_or(0, |length| length.min(64 * 1024) as usize));
    let mut stream = body.into_data_stream();
    let body_timeout = ticket.map_or(Duration::MAX, Ticket::body_timeout);
    loop {
        let next = match tokio::time::timeout(body_timeout, stream.next()).await {
            Ok(next) => next,
            Err(_) => {
                if let Some(ticket) = ticket {
                    ticket.body_timed_out();
                }
                let mut response = plain(
                    StatusCode::REQUEST_TIMEOUT,
                    &format!("the body sent nothing for {} s", body_timeout.as_secs()),
                );
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
                return Err(response);
            }
        };
        let Some(chunk) = next else { break };
        let Ok(chunk) = chunk else {
            return Err(plain(
                StatusCode::BAD_REQUEST,
                "the body could not be read whole",
            ));
        };
        if read.len() + chunk.len() > limit {
            return Err(too_large());
        }
        read.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(read))
}

/// Checks `Host`, `Origin` and the bearer token; the principal, or the
/// response that refuses the request.
async fn admit(shared: &Arc<Shared>, headers: &HeaderMap) -> Result<Principal, Response> {
    if let Some(refused) = check_host(shared, headers).or_else(|| check_origin(shared, headers)) {
        return Err(refused);
    }
    let Some(auth) = shared.options.auth.clone() else {
        return Ok(Principal {
            name: "local".to_owned(),
            scope: Scope::Write,
        });
    };
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| {
            let (scheme, token) = value.split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then(|| token.trim().to_owned())
        });
    let Some(token) = token else {
        return Err(unauthorized(shared, "a bearer token is needed"));
    };
    let principal = match auth.authenticate_now(&token) {
        Some(principal) => principal,
        None => tokio::task::spawn_blocking(move || auth.authenticate(&token))
            .await
            .ok()
            .flatten(),
    };
    principal.ok_or_else(|| unauthorized(shared, "the bearer token is not valid"))
}

/// On loopback, `Host` must name this gateway (a DNS-rebinding page names
/// its own).
fn check_host(shared: &Shared, headers: &HeaderMap) -> Option<Response> {
    if !shared.options.public {
        let host = headers
            .get(header::HOST)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("");
        if !shared.hosts.iter().any(|allowed| allowed == host) {
            return Some(plain(
                StatusCode::FORBIDDEN,
                "this gateway answers only on loopback (the Host header names another)",
            ));
        }
    }
    None
}

/// A browser's `Origin` must be the gateway's own or one allowed.
fn check_origin(shared: &Shared, headers: &HeaderMap) -> Option<Response> {
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        if !shared.origins.iter().any(|allowed| allowed == origin) {
            return Some(plain(
                StatusCode::FORBIDDEN,
                "requests from this Origin are not accepted",
            ));
        }
    }
    None
}

async fn post(
    shared: &Arc<Shared>,
    principal: Principal,
    headers: &HeaderMap,
    body: &Bytes,
) -> Response {
    let Ok(text) = std::str::from_utf8(body) else {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            "null",
            -32700,
            "the body is not UTF-8",
        );
    };
    // The gateway reads one message per line; a line break in JSON is only
    // ever whitespace between tokens.
    let text = text.trim();
    let line: String = if text.contains(['\n', '\r']) {
        text.replace(['\n', '\r'], " ")
    } else {
        text.to_owned()
    };
    let Some(message) = Read::of(shared.port.read(line)) else {
        return not_one_message();
    };
    let Some(framed) = message.framed() else {
        return not_one_message();
    };
    let version = headers
        .get("mcp-protocol-version")
        .and_then(|value| value.to_str().ok());
    // Of a legacy request only `_meta` is read here (its version and
    // progress token), not the arguments: the gateway reads those.
    #[derive(serde::Deserialize)]
    struct Meta<'a> {
        #[serde(rename = "io.modelcontextprotocol/protocolVersion", borrow, default)]
        version: Option<std::borrow::Cow<'a, str>>,
        #[serde(rename = "progressToken", default)]
        progress: Option<Value>,
    }
    #[derive(serde::Deserialize)]
    struct Params<'a> {
        #[serde(rename = "_meta", borrow, default)]
        meta: Option<Meta<'a>>,
    }
    let light: Option<Result<Params<'_>, _>> = framed
        .params()
        .filter(|raw| raw.trim_start().starts_with('{'))
        .map(serde_json::from_str);
    // What the light reading cannot take (a key given twice) is read as
    // before, whole; the gateway then refuses it on record.
    let whole: Option<Value> = match &light {
        Some(Err(_)) => framed
            .params()
            .and_then(|raw| serde_json::from_str(raw).ok()),
        _ => None,
    };
    let meta = match &light {
        Some(Ok(params)) => params.meta.as_ref(),
        _ => None,
    };
    let whole_meta = whole.as_ref().and_then(|params| params.get("_meta"));
    let meta_version = meta.and_then(|meta| meta.version.as_deref()).or_else(|| {
        whole_meta
            .and_then(|meta| meta.get("io.modelcontextprotocol/protocolVersion"))
            .and_then(Value::as_str)
    });
    let modern = version == Some(MODERN_VERSION)
        || (meta_version == Some(MODERN_VERSION) && !headers.contains_key("mcp-session-id"));
    if modern {
        let params: Option<Value> = whole.clone().or_else(|| {
            framed
                .params()
                .and_then(|raw| serde_json::from_str(raw).ok())
        });
        return post_modern(shared, principal, headers, message, params.as_ref()).await;
    }
    let progress = meta
        .and_then(|meta| meta.progress.as_ref())
        .or_else(|| whole_meta.and_then(|meta| meta.get("progressToken")))
        .map(Value::to_string);
    if let Some(version) = version
        && !LEGACY_VERSIONS.contains(&version)
    {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            framed.id_text(),
            -32600,
            &format!("unsupported MCP-Protocol-Version `{version}`"),
        );
    }
    post_legacy(shared, principal, headers, message, progress).await
}

/// The answer to a body that is not one JSON-RPC message.
fn not_one_message() -> Response {
    rpc_error(
        StatusCode::BAD_REQUEST,
        "null",
        -32700,
        "the body is not one JSON-RPC message (a batch is not taken)",
    )
}

/// A host's message as the HTTP side routes it: read once, with the
/// gateway's own reading ([`HostPort::read`]), and handed to the gateway
/// as read. A message the gateway refuses unread (a key given twice, or
/// nested too deep) is still routed by its envelope, so that the refusal
/// the gateway records reaches the host as the answer to its request.
struct Read {
    line: HostLine,
    /// The envelope of a line the gateway refuses unread, read for where
    /// it goes alone.
    refused: Option<Framed>,
}

impl Read {
    /// The message read, if it is one JSON-RPC message (a refused one read
    /// for its envelope alone).
    fn of(line: HostLine) -> Option<Self> {
        let refused = match line.reading() {
            Reading::Message(_) => None,
            Reading::Refused(text, _) => Some(Framed::parse(text.clone()).ok()?),
            Reading::Unreadable(..) => return None,
        };
        Some(Self { line, refused })
    }

    /// What the HTTP side routes on (`None` only for what `of` refuses).
    fn framed(&self) -> Option<&Framed> {
        self.refused.as_ref().or_else(|| self.line.framed())
    }

    /// The same message under the gateway's id `ours`, read as before.
    fn with_id(&self, ours: &str) -> Option<Self> {
        Some(Self {
            line: self.line.with_id(ours)?,
            refused: match &self.refused {
                Some(framed) => Some(framed.with_id(ours).ok()?),
                None => None,
            },
        })
    }

    /// What the gateway takes.
    fn into_line(self) -> HostLine {
        self.line
    }
}

async fn post_legacy(
    shared: &Arc<Shared>,
    principal: Principal,
    headers: &HeaderMap,
    message: Read,
    progress: Option<String>,
) -> Response {
    let named = session_id(headers);
    let Some(framed) = message.framed() else {
        return not_one_message();
    };
    let (session, new_id) = match (named, framed.method()) {
        (None, "initialize") if framed.kind() == Kind::Request => {
            match open_legacy(shared, principal).await {
                Ok(opened) => opened,
                Err(response) => return response,
            }
        }
        (None, _) => {
            return rpc_error(
                StatusCode::BAD_REQUEST,
                framed.id_text(),
                -32600,
                "no Mcp-Session-Id: start a session with `initialize`",
            );
        }
        (Some(_), "initialize") => {
            return rpc_error(
                StatusCode::BAD_REQUEST,
                framed.id_text(),
                -32600,
                "this session is initialized already",
            );
        }
        (Some(id), _) => match find_legacy(shared, id, &principal) {
            Some(session) => (session, None),
            None => return plain(StatusCode::NOT_FOUND, "no such session"),
        },
    };
    let mut response = match framed.kind() {
        Kind::Request => {
            let id = framed.id_text().to_owned();
            let is_call = framed.method() == "tools/call";
            exchange(
                shared,
                &session,
                &id,
                None,
                message.into_line(),
                progress,
                headers,
                is_call,
            )
            .await
        }
        Kind::Notification | Kind::Response => {
            // The gateway answers no cancelled request: its stream ends
            // here, and nothing of it is kept for a resumption.
            let cancelled = (framed.method() == "notifications/cancelled")
                .then(|| framed.params())
                .flatten()
                .and_then(|raw| serde_json::from_str::<Value>(raw).ok())
                .and_then(|params| params.get("requestId").map(Value::to_string));
            let sent = session.conn.send(message.into_line()).await;
            if let Some(id) = cancelled {
                session.routes.forget(&id);
            }
            match sent {
                Ok(()) => StatusCode::ACCEPTED.into_response(),
                Err(_) => gone(),
            }
        }
    };
    if let Some(id) = new_id
        && let Ok(value) = HeaderValue::from_str(&id)
    {
        if response.status().is_success() {
            response.headers_mut().insert("mcp-session-id", value);
        } else if let Ok(mut sessions) = shared.legacy.lock()
            && let Some(session) = sessions.remove(&id)
        {
            tokio::spawn(async move { session.conn.close().await });
        }
    }
    response
}

/// A new legacy session for `principal`: its id and the session.
async fn open_legacy(
    shared: &Arc<Shared>,
    principal: Principal,
) -> Result<(Arc<Session>, Option<String>), Response> {
    if shared
        .legacy
        .lock()
        .map_or(true, |sessions| sessions.len() >= MAX_SESSIONS)
    {
        return Err(plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many host sessions are open; close one (DELETE) or wait for one to idle out",
        ));
    }
    let mut bytes = [0u8; 32];
    if getrandom::fill(&mut bytes).is_err() {
        return Err(plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "no randomness for a session id",
        ));
    }
    let id = hex::encode(bytes);
    let session = start_session(shared, principal, false).await?;
    if let Ok(mut sessions) = shared.legacy.lock() {
        sessions.insert(id.clone(), Arc::clone(&session));
    }
    Ok((session, Some(id)))
}

/// The legacy session `id`, when it belongs to `principal`: a session id
/// is not a credential, so another principal's is as good as none.
fn find_legacy(shared: &Shared, id: &str, principal: &Principal) -> Option<Arc<Session>> {
    let sessions = shared.legacy.lock().ok()?;
    let session = sessions.get(id)?;
    if session.principal != *principal {
        return None;
    }
    if let Ok(mut used) = session.last_used.lock() {
        *used = Instant::now();
    }
    Some(Arc::clone(session))
}

/// Opens a gateway session for `principal` and starts delivering its lines.
async fn start_session(
    shared: &Arc<Shared>,
    principal: Principal,
    modern: bool,
) -> Result<Arc<Session>, Response> {
    let name = shared
        .options
        .auth
        .is_some()
        .then(|| principal.name.clone());
    let key = shared.next_routes.fetch_add(1, Ordering::Relaxed);
    let routes = Routes::with_budget(Arc::clone(&shared.histories), key);
    let sink = Arc::new(Sink {
        routes: Arc::clone(&routes),
        modern,
    });
    let conn = match shared
        .port
        .open_with(principal.scope, name, Some(sink))
        .await
    {
        Ok(conn) => Arc::new(conn),
        Err(_) => return Err(gone()),
    };
    let Some(lines) = conn.take_lines() else {
        return Err(gone());
    };
    tokio::spawn(Arc::clone(&routes).run(Arc::clone(&conn), lines, modern));
    tracing::info!(principal = %principal.name, scope = ?principal.scope, modern, session = conn.id(), "an HTTP host session opens");
    Ok(Arc::new(Session {
        principal,
        conn,
        routes,
        last_used: Mutex::new(Instant::now()),
        modern,
    }))
}

async fn post_modern(
    shared: &Arc<Shared>,
    principal: Principal,
    headers: &HeaderMap,
    message: Read,
    params: Option<&Value>,
) -> Response {
    let Some(framed) = message.framed() else {
        return not_one_message();
    };
    if let Err(why) = check_modern_headers(headers, framed, params) {
        return rpc_error(StatusCode::BAD_REQUEST, framed.id_text(), -32020, &why);
    }
    let session = {
        let existing = shared
            .modern
            .lock()
            .ok()
            .and_then(|sessions| sessions.get(&principal.name).cloned())
            .filter(|session| session.principal == principal);
        match existing {
            Some(session) => session,
            None => match start_session(shared, principal.clone(), true).await {
                Ok(session) => {
                    if let Ok(mut sessions) = shared.modern.lock() {
                        sessions.insert(principal.name.clone(), Arc::clone(&session));
                    }
                    session
                }
                Err(response) => return response,
            },
        }
    };
    match framed.kind() {
        Kind::Request => {
            // Requests of one principal share a gateway session, and two
            // hosts with one token may both send id 1: the gateway knows
            // each under an id of its own, and the host gets its own back.
            let ours = format!("\"h{}\"", shared.next_id.fetch_add(1, Ordering::Relaxed));
            let Some(line) = message.with_id(&ours) else {
                return rpc_error(
                    StatusCode::BAD_REQUEST,
                    framed.id_text(),
                    -32600,
                    "the request cannot be read under a new id",
                );
            };
            exchange(
                shared,
                &session,
                &ours,
                Some(framed.id_text().to_owned()),
                line.into_line(),
                params
                    .and_then(|params| params.get("_meta"))
                    .and_then(|meta| meta.get("progressToken"))
                    .map(Value::to_string),
                headers,
                framed.method() == "tools/call",
            )
            .await
        }
        Kind::Notification | Kind::Response => StatusCode::ACCEPTED.into_response(),
    }
}

/// The 2026-07-28 headers, checked against the body: `MCP-Protocol-Version`
/// against `_meta`, `Mcp-Method` against the method, `Mcp-Name` against
/// the tool, prompt or resource named.
fn check_modern_headers(
    headers: &HeaderMap,
    message: &Framed,
    params: Option<&Value>,
) -> Result<(), String> {
    let header = |name: &str| -> Result<Option<String>, String> {
        match headers.get(name) {
            None => Ok(None),
            Some(value) => {
                let text = value
                    .to_str()
                    .map_err(|_| format!("the {name} header is not visible ASCII"))?;
                decode_header(text)
                    .map(Some)
                    .ok_or_else(|| format!("the {name} header's base64 form does not decode"))
            }
        }
    };
    let meta_version = params
        .and_then(|params| params.get("_meta"))
        .and_then(|meta| meta.get("io.modelcontextprotocol/protocolVersion"))
        .and_then(Value::as_str);
    if header("mcp-protocol-version")?.as_deref() != meta_version {
        return Err(
            "MCP-Protocol-Version must equal the body's `_meta` protocol version".to_owned(),
        );
    }
    if message.kind() == Kind::Response {
        return Ok(());
    }
    match header("mcp-method")? {
        Some(method) if method == message.method() => {}
        Some(_) => return Err("Mcp-Method does not match the body's method".to_owned()),
        None => return Err("Mcp-Method is missing".to_owned()),
    }
    let subject = match message.method() {
        "tools/call" | "prompts/get" => params.and_then(|params| params.get("name")),
        "resources/read" => params.and_then(|params| params.get("uri")),
        _ => return Ok(()),
    };
    let subject = subject.and_then(Value::as_str);
    match (header("mcp-name")?, subject) {
        (Some(name), Some(subject)) if name == subject => Ok(()),
        (None, _) => Err("Mcp-Name is missing".to_owned()),
        _ => Err("Mcp-Name does not match the body's name or uri".to_owned()),
    }
}

/// A header value as sent, or decoded from its `=?base64?...?=` form.
fn decode_header(text: &str) -> Option<String> {
    match text
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
    {
        Some(encoded) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .ok()?;
            String::from_utf8(bytes).ok()
        }
        None => Some(text.to_owned()),
    }
}

/// One request and its answer: the gateway gets the line, and the host the
/// answer as JSON when it is the first thing the gateway says about the
/// request, else as an event stream with what came before it.
#[expect(
    clippy::too_many_arguments,
    reason = "one exchange's parts, each from another place of the request"
)]
async fn exchange(
    shared: &Arc<Shared>,
    session: &Arc<Session>,
    gateway_id: &str,
    host_id: Option<String>,
    line: HostLine,
    progress: Option<String>,
    headers: &HeaderMap,
    is_call: bool,
) -> Response {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("*/*");
    let takes_json = accept.contains("application/json") || accept.contains("*/*");
    let Some(mut rx) = session.routes.open(
        gateway_id,
        progress,
        !session.modern,
        host_id.clone(),
        takes_json,
    ) else {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            host_id.as_deref().unwrap_or(gateway_id),
            -32600,
            "a request under this id is still in flight in this session",
        );
    };
    let mut guard = Pending {
        session: Arc::clone(session),
        id: gateway_id.to_owned(),
        done: false,
    };
    // A 2026-07-28 request goes under the gateway's id; its audit record
    // names the host's.
    let sent = match &host_id {
        Some(host_id) => session.conn.send_as(line, host_id.clone()).await,
        None => session.conn.send(line).await,
    };
    if sent.is_err() {
        guard.done = true;
        return gone();
    }
    let Some(first) = rx.recv().await else {
        guard.done = true;
        return gone();
    };
    if first.last && takes_json {
        guard.done = true;
        let mut response = json_body(
            StatusCode::OK,
            Body::from(Bytes::from_owner(SharedLine(Arc::clone(&first.line)))),
        );
        if is_call && session.principal.scope == Scope::Read && refused_for_scope(&first.line) {
            *response.status_mut() = StatusCode::FORBIDDEN;
            if let Ok(value) = HeaderValue::from_str(&format!(
                "Bearer error=\"insufficient_scope\", scope=\"{}\", error_description=\"this tool may change things; the token only reads\"",
                shared.options.write_scope
            )) {
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, value);
            }
        }
        return response;
    }
    // A legacy host that can resume (2025-11-25 and later) is primed with
    // the stream's first event id before anything else (SEP-1699).
    let prime = (!session.modern && primes(headers))
        .then(|| {
            first
                .event_id
                .split('-')
                .next()
                .map(|stream| format!("{stream}-0"))
        })
        .flatten();
    event_stream(Some(first), rx, Some(guard), prime)
}

/// Whether a request's host takes the SEP-1699 priming event: an event
/// with an id and empty data, sent first on a stream so that the host can
/// resume it (`Last-Event-ID`) even before its first message. Only hosts
/// of 2025-11-25 or later, by their `MCP-Protocol-Version` (none means
/// 2025-03-26): an earlier host could take the empty data for a message.
fn primes(headers: &HeaderMap) -> bool {
    headers
        .get("mcp-protocol-version")
        .and_then(|value| value.to_str().ok())
        .is_some_and(|version| LEGACY_VERSIONS.contains(&version) && version >= "2025-11-25")
}

/// The gateway refused a call because the session's scope only reads: the
/// answer's decision, read as the type the gateway writes it with
/// ([`DecisionMeta`]), was settled by [`ReasonCode::ScopeReadOnly`].
fn refused_for_scope(line: &str) -> bool {
    /// What this reads of an answer: its result's decision, nothing else.
    #[derive(serde::Deserialize)]
    struct Answer {
        result: Refused,
    }
    #[derive(serde::Deserialize)]
    struct Refused {
        #[serde(rename = "_meta")]
        meta: Meta,
    }
    #[derive(serde::Deserialize)]
    struct Meta {
        #[serde(rename = "hintgate/decision")]
        decision: DecisionMeta,
    }
    serde_json::from_str::<Answer>(line).is_ok_and(|answer| {
        answer.result.meta.decision.first_reason() == Some(ReasonCode::ScopeReadOnly)
    })
}

/// A request whose answer the host has not got yet. Dropped before (the
/// host went away): a legacy request goes on, and what the gateway says of
/// it is kept for a resumption; a 2026-07-28 request is cancelled, since
/// closing its stream is how such a host cancels.
struct Pending {
    session: Arc<Session>,
    id: String,
    done: bool,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if !self.session.modern {
            self.session.routes.abandon(&self.id);
            return;
        }
        self.session.routes.forget(&self.id);
        let Ok(request_id) = serde_json::from_str::<Value>(&self.id) else {
            return;
        };
        let line = json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": request_id, "reason": "the host closed the request's stream"},
        })
        .to_string();
        let conn = Arc::clone(&self.session.conn);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = conn.send(conn.read(line)).await;
            });
        }
    }
}

/// An event stream of `first` and what follows on `rx`, until the answer.
/// With no `first` frame, the stream opens with a comment, so the host sees
/// it open before anything comes.
/// An event stream of `first` and what follows on `rx`; with `prime`, the
/// SEP-1699 priming event under that id comes first.
fn event_stream(
    first: Option<Frame>,
    rx: mpsc::Receiver<Frame>,
    guard: Option<Pending>,
    prime: Option<String>,
) -> Response {
    struct StreamState {
        first: Option<Frame>,
        opening: Option<Bytes>,
        rx: mpsc::Receiver<Frame>,
        guard: Option<Pending>,
        ended: bool,
    }
    // Something goes out at once, so the host sees the stream open: the
    // priming event, or a comment when nothing else is ready.
    let opening = match prime {
        Some(id) => Some(Bytes::from(format!("id: {id}\ndata: \n\n"))),
        None if first.is_none() => Some(Bytes::from_static(b": open\n\n")),
        None => None,
    };
    let state = StreamState {
        opening,
        first,
        rx,
        guard,
        ended: false,
    };
    let stream = futures_util::stream::unfold(state, |mut state| async move {
        if state.ended {
            return None;
        }
        if let Some(opening) = state.opening.take() {
            return Some((Ok::<_, std::convert::Infallible>(opening), state));
        }
        let frame = match state.first.take() {
            Some(frame) => frame,
            None => state.rx.recv().await?,
        };
        if frame.last {
            state.ended = true;
            if let Some(guard) = state.guard.as_mut() {
                guard.done = true;
            }
        }
        Some((Ok::<_, std::convert::Infallible>(sse_event(&frame)), state))
    });
    sse_response(Body::from_stream(stream))
}

/// One frame as an SSE event.
fn sse_event(frame: &Frame) -> Bytes {
    Bytes::from(format!(
        "id: {}\nevent: message\ndata: {}\n\n",
        frame.event_id, frame.line
    ))
}

/// An event-stream response of `body`.
fn sse_response(body: Body) -> Response {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

fn get(shared: &Arc<Shared>, principal: &Principal, headers: &HeaderMap) -> Response {
    let Some(id) = session_id(headers) else {
        // No session: a 2026-07-28 host has no GET.
        return plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "GET needs an Mcp-Session-Id (2026-07-28 hosts POST only)",
        );
    };
    let Some(session) = find_legacy(shared, id, principal) else {
        return plain(StatusCode::NOT_FOUND, "no such session");
    };
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("");
    if !accept.contains("text/event-stream") {
        return plain(
            StatusCode::NOT_ACCEPTABLE,
            "GET answers with text/event-stream",
        );
    }
    let resume = headers
        .get("last-event-id")
        .and_then(|value| value.to_str().ok())
        .and_then(|text| {
            let (stream, seq) = text.split_once('-')?;
            Some((stream.parse::<u64>().ok()?, seq.parse::<u64>().ok()?))
        });
    // A resumed stream needs no priming: its host has an event id already.
    let mut prime = None;
    let rx = match resume {
        Some((stream, seq)) => match session.routes.resume(stream, seq) {
            Ok(rx) => rx,
            Err(Unresumable::Unknown) => {
                return plain(StatusCode::NOT_FOUND, "that stream cannot be resumed");
            }
            Err(Unresumable::Dropped) => {
                return plain(
                    StatusCode::GONE,
                    "events of that stream after the one named are no longer kept, so it cannot be resumed without a gap; send the request again",
                );
            }
        },
        None => match session.routes.open_standalone() {
            Some((stream, rx)) => {
                prime = primes(headers).then(|| format!("{stream}-0"));
                rx
            }
            None => {
                return plain(
                    StatusCode::CONFLICT,
                    "this session has an event stream open already",
                );
            }
        },
    };
    let mut rx = rx;
    let first = rx.try_recv().ok();
    event_stream(first, rx, None, prime)
}

async fn delete(shared: &Arc<Shared>, principal: &Principal, headers: &HeaderMap) -> Response {
    let Some(id) = session_id(headers) else {
        return plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "DELETE needs an Mcp-Session-Id",
        );
    };
    if find_legacy(shared, id, principal).is_none() {
        return plain(StatusCode::NOT_FOUND, "no such session");
    }
    let session = shared
        .legacy
        .lock()
        .ok()
        .and_then(|mut sessions| sessions.remove(id));
    if let Some(session) = session {
        session.conn.close().await;
    }
    StatusCode::NO_CONTENT.into_response()
}

/// The legacy session a request names (`Mcp-Session-Id`).
fn session_id(headers: &HeaderMap) -> Option<&str> {
    headers
        .get("mcp-session-id")
        .and_then(|value| value.to_str().ok())
}

fn json_response(status: StatusCode, line: String) -> Response {
    json_body(status, Body::from(line))
}

/// A line the history also holds, as the bytes of a body (no copy).
struct SharedLine(Arc<String>);

impl AsRef<[u8]> for SharedLine {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

fn json_body(status: StatusCode, body: Body) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn rpc_error(status: StatusCode, id: &str, code: i64, message: &str) -> Response {
    json_response(
        status,
        hintgate_proxy::frame::error_response(id, code, message),
    )
}

fn plain(status: StatusCode, text: &str) -> Response {
    let mut response = Response::new(Body::from(format!("{text}\n")));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// A 401 whose `WWW-Authenticate` names the resource metadata when OAuth
/// access tokens are taken, so a host can find the authorization server.
fn unauthorized(shared: &Shared, text: &str) -> Response {
    let mut response = plain(StatusCode::UNAUTHORIZED, text);
    let challenge = match &shared.options.oauth {
        Some(oauth) => {
            let audience = &oauth.settings().audience;
            let origin = audience
                .find("://")
                .and_then(|at| {
                    let rest = audience.get(at + 3..)?;
                    let slash = rest.find('/')?;
                    audience.get(..at + 3 + slash)
                })
                .unwrap_or(audience);
            format!(
                "Bearer realm=\"hintgate\", resource_metadata=\"{origin}{METADATA}\", scope=\"{}\"",
                oauth.settings().read_scope
            )
        }
        None => "Bearer realm=\"hintgate\"".to_owned(),
    };
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

fn gone() -> Response {
    plain(StatusCode::SERVICE_UNAVAILABLE, "the gateway is stopping")
}

#[cfg(test)]
mod tests {
    use super::*;
    use hintgate_proxy::json::JsonError;

    #[test]
    fn a_header_in_base64_form_decodes() {
        assert_eq!(
            decode_header("=?base64?ZnNfX3JlYWQ=?=").as_deref(),
            Some("fs__read")
        );
        assert_eq!(decode_header("plain").as_deref(), Some("plain"));
        assert_eq!(decode_header("=?base64?***?="), None);
    }

    /// What the gateway is handed is what the HTTP side routed on: a
    /// message read once, under the gateway's id where the HTTP side
    /// replaced the host's, and still refused unread when it repeated a key
    /// anywhere, the replaced id included.
    #[test]
    fn a_request_under_the_gateways_id_keeps_its_reading() {
        let line = r#"{"jsonrpc":"2.0","id":{"a":1},"method":"tools/call","params":{"name":"t"}}"#;
        let read = Read::of(HostLine::read(line.to_owned(), 64)).unwrap();
        let ours = read.with_id("\"h7\"").unwrap();
        assert_eq!(ours.framed().unwrap().id_text(), "\"h7\"");
        assert_eq!(ours.framed().unwrap().params(), Some(r#"{"name":"t"}"#));
        assert_eq!(
            ours.into_line(),
            HostLine::read(
                r#"{"jsonrpc":"2.0","id":"h7","method":"tools/call","params":{"name":"t"}}"#
                    .to_owned(),
                64
            )
        );

        let twice =
            r#"{"jsonrpc":"2.0","id":{"a":1,"a":2},"method":"tools/call","params":{"name":"t"}}"#;
        let read = Read::of(HostLine::read(twice.to_owned(), 64)).unwrap();
        assert_eq!(read.framed().unwrap().method(), "tools/call");
        let ours = read.with_id("\"h8\"").unwrap().into_line();
        let Reading::Refused(sent, JsonError::DuplicateKey { key, .. }) = ours.into_reading()
        else {
            panic!("the repeat stays refused");
        };
        assert_eq!(key, "a");
        assert_eq!(
            sent,
            r#"{"jsonrpc":"2.0","id":"h8","method":"tools/call","params":{"name":"t"}}"#
        );
        // Nothing that is not one message is routed.
        assert!(Read::of(HostLine::read("[1]".to_owned(), 64)).is_none());
        assert!(
            Read::of(HostLine::read(
                r#"{"id":1,"id":2,"method":"m"}"#.to_owned(),
                64
            ))
            .is_none()
        );
    }

    #[test]
    fn modern_headers_must_match_the_body() {
        let line = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        let message = Framed::parse(line.to_owned()).unwrap();
        let params: Value = serde_json::from_str(message.params().unwrap()).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(
            "mcp-protocol-version",
            HeaderValue::from_static("2026-07-28"),
        );
        headers.insert("mcp-method", HeaderValue::from_static("tools/call"));
        headers.insert("mcp-name", HeaderValue::from_static("t"));
        assert_eq!(
            check_modern_headers(&headers, &message, Some(&params)),
            Ok(())
        );
        headers.insert("mcp-name", HeaderValue::from_static("other"));
        assert!(check_modern_headers(&headers, &message, Some(&params)).is_err());
        headers.insert("mcp-name", HeaderValue::from_static("t"));
        headers.insert("mcp-method", HeaderValue::from_static("tools/list"));
        assert!(check_modern_headers(&headers, &message, Some(&params)).is_err());
        headers.remove("mcp-method");
        assert!(check_modern_headers(&headers, &message, Some(&params)).is_err());
    }

    #[test]
    fn a_scope_refusal_is_told_from_other_refusals() {
        assert!(refused_for_scope(
            r#"{"jsonrpc":"2.0","id":1,"result":{"isError":true,"content":[],"_meta":{"hintgate/decision":{"verdict":"deny","reasons":["scope-read-only","not-read-only"]}}}}"#
        ));
        assert!(!refused_for_scope(
            r#"{"jsonrpc":"2.0","id":1,"result":{"isError":true,"content":[],"_meta":{"hintgate/decision":{"verdict":"deny","reasons":["rule-deny"]}}}}"#
        ));
        // What the gateway writes reads back as what it wrote.
        let decision = hintgate_policy::decide::Decision::deny(ReasonCode::ScopeReadOnly);
        let line = json!({"jsonrpc": "2.0", "id": 1, "result": {
            "content": [], "isError": true,
            "_meta": {hintgate_policy::decide::DECISION_META_KEY: DecisionMeta::refused(&decision)},
        }})
        .to_string();
        assert!(refused_for_scope(&line), "{line}");
        // A decision that is not one the gateway writes (an unknown code,
        // an unknown field) is no scope refusal.
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"result":{"_meta":{"hintgate/decision":{"verdict":"deny","reasons":["scope-read-only-ish"]}}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"_meta":{"hintgate/decision":{"verdict":"deny","reasons":["scope-read-only"],"x":1}}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"scope-read-only"}}"#,
        ] {
            assert!(!refused_for_scope(line), "{line}");
        }
    }
}
