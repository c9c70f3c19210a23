//! The web console: the calls waiting for a person, the pinned tool
//! definitions and the changes held for approval, and the audit log, in a
//! browser on loopback.
//!
//! It reads and writes the store the gateways use ([`hintgate_store`]) and
//! nothing else: an answer given here is an answer in the approval queue,
//! which releases the waiting call on whichever gateway holds it (with
//! PostgreSQL, on another machine too). It never talks to a gateway.
//!
//! Security (`docs/console.md`): it listens on loopback unless told
//! otherwise; nothing is served without the random token it prints (the
//! first visit with `?token=` sets an `HttpOnly`, `SameSite=Strict` session
//! cookie and redirects to the same page without the token); the `Host`
//! header must name the address it listens on (DNS rebinding); every change
//! is a POST whose `Origin` must be the console's and whose form carries the
//! CSRF token; tokens are compared in constant time; every response forbids
//! framing, caching, sniffing, any source but the console itself and any
//! referrer to another site; every
//! string from a server or the store is escaped ([`html::escape`]).
#![forbid(unsafe_code)]

mod definitions;
pub mod html;
mod log;
mod waiting;

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::{self, HeaderMap, HeaderValue};
use axum::http::{Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hintgate_store::{Store, StoreError};
use subtle::ConstantTimeEq;

/// The address the console listens on unless told otherwise: loopback, a
/// port the system picks.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0);

/// The policy every response carries: nothing but the console's own script,
/// style and images, no framing, forms only to itself.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// Why the console cannot start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConsoleError {
    /// The operating system gave no random bytes for the tokens.
    #[error("console-random: no random bytes for the console's tokens: {0}")]
    Random(String),
    /// The listen address names every interface.
    #[error(
        "console-listen-unspecified: {0} would serve the console on every interface; name one address (the default is loopback)"
    )]
    Unspecified(SocketAddr),
    /// The socket could not be bound.
    #[error("console-bind: cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

impl ConsoleError {
    /// The stable code of the error (the text before the first colon).
    #[must_use]
    pub const fn code(&self) -> &'static str {
        match self {
            Self::Random(_) => "console-random",
            Self::Unspecified(_) => "console-listen-unspecified",
            Self::Bind { .. } => "console-bind",
        }
    }
}

/// Binds the console's socket: `listen`, or [`DEFAULT_LISTEN`].
///
/// # Errors
///
/// [`ConsoleError::Unspecified`] for `0.0.0.0` or `::`, and
/// [`ConsoleError::Bind`] when the socket cannot be bound.
pub async fn bind(listen: Option<SocketAddr>) -> Result<tokio::net::TcpListener, ConsoleError> {
    let addr = listen.unwrap_or(DEFAULT_LISTEN);
    if addr.ip().is_unspecified() {
        return Err(ConsoleError::Unspecified(addr));
    }
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ConsoleError::Bind { addr, source })
}

/// The random secrets of one console process.
#[derive(Clone)]
struct Secrets {
    /// In the printed URL; exchanged for the session cookie.
    token: String,
    /// The session cookie's value.
    session: String,
    /// The CSRF token in every form.
    csrf: String,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secrets(..)")
    }
}

fn random_hex(bytes: usize) -> Result<String, ConsoleError> {
    let mut buffer = vec![0_u8; bytes];
    getrandom::fill(&mut buffer).map_err(|err| ConsoleError::Random(err.to_string()))?;
    Ok(hex::encode(buffer))
}

/// Compares two secrets in constant time (for equal lengths; the length of
/// a token is no secret).
fn same(given: &str, expected: &str) -> bool {
    given.as_bytes().ct_eq(expected.as_bytes()).into()
}

/// One console: its store, its secrets and the address it answers at.
#[derive(Debug)]
pub struct Console {
    store: Arc<dyn Store>,
    secrets: Secrets,
    addr: SocketAddr,
    hosts: Vec<String>,
    cookie: String,
    by: String,
}

impl Console {
    /// A console on `store` that answers at `addr` (the bound socket's
    /// address), recording answers as given by `user` (through the console).
    ///
    /// # Errors
    ///
    /// [`ConsoleError::Random`] when the system gives no random bytes.
    pub fn new(store: Arc<dyn Store>, addr: SocketAddr, user: &str) -> Result<Self, ConsoleError> {
        let port = addr.port();
        let mut hosts = vec![host_of(addr)];
        if addr.ip().is_loopback() {
            for name in ["localhost", "127.0.0.1", "[::1]"] {
                let host = format!("{name}:{port}");
                if !hosts.contains(&host) {
                    hosts.push(host);
                }
            }
        }
        Ok(Self {
            store,
            secrets: Secrets {
                token: random_hex(24)?,
                session: random_hex(32)?,
                csrf: random_hex(32)?,
            },
            addr,
            hosts,
            // Cookies are not kept apart by port: two consoles on one
            // machine each have their own.
            cookie: format!("hintgate-console-{port}"),
            by: format!("{user} (console)"),
        })
    }

    /// The URL to open, with the token.
    #[must_use]
    pub fn url(&self) -> String {
        format!(
            "http://{}/?token={}",
            host_of(self.addr),
            self.secrets.token
        )
    }

    /// The address it answers at.
    #[must_use]
    pub const fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The console's routes, each behind the guard.
    pub fn router(self: Arc<Self>) -> Router {
        Router::new()
            .route("/", get(waiting::page))
            .route("/api/waiting", get(waiting::api))
            .route("/answer", post(waiting::answer))
            .route("/edit", post(waiting::edit))
            .route("/definitions", get(definitions::page))
            .route("/definitions/change", get(definitions::change))
            .route("/definitions/approve", post(definitions::approve))
            .route("/definitions/revoke", post(definitions::revoke))
            .route("/log", get(log::page))
            .route("/api/log", get(log::api))
            .route("/static/console.js", get(script))
            .route("/static/console.css", get(style))
            .fallback(not_found)
            .layer(middleware::from_fn_with_state(Arc::clone(&self), guard))
            .with_state(self)
    }

    /// Whether a form's CSRF token is this console's.
    fn csrf_ok(&self, given: &str) -> bool {
        same(given, &self.secrets.csrf)
    }

    /// Runs `work` on the store on the blocking pool.
    async fn with_store<T, F>(&self, work: F) -> Result<T, Response>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Store) -> Result<T, StoreError> + Send + 'static,
    {
        let store = Arc::clone(&self.store);
        match tokio::task::spawn_blocking(move || work(store.as_ref())).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(err)) => {
                tracing::warn!("console: {err}");
                Err(refusal(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!("The store failed: {err}"),
                ))
            }
            Err(err) => Err(refusal(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("The store's work did not finish: {err}"),
            )),
        }
    }
}

/// Serves `console` on `listener` until `stop` completes.
///
/// # Errors
///
/// The socket's error, when accepting fails for good.
pub async fn serve(
    listener: tokio::net::TcpListener,
    console: Arc<Console>,
    stop: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, console.router())
        .with_graceful_shutdown(stop)
        .await
}

fn host_of(addr: SocketAddr) -> String {
    match addr.ip() {
        IpAddr::V4(ip) => format!("{ip}:{}", addr.port()),
        IpAddr::V6(ip) => format!("[{ip}]:{}", addr.port()),
    }
}

/// Seconds since the Unix epoch.
fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX)
        })
}

/// A refusal or failure, as plain text (nothing in it is markup).
fn refusal(status: StatusCode, text: &str) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        )],
        format!("{text}\n"),
    )
        .into_response()
}

/// A page of HTML.
fn html(body: String) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        )],
        body,
    )
        .into_response()
}

/// A redirect after a change (POST, then GET), to one of the console's own
/// paths.
fn see_other(location: &str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(value) = HeaderValue::from_str(location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    response
}

async fn not_found() -> Response {
    refusal(StatusCode::NOT_FOUND, "No such page.")
}

async fn script() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/javascript; charset=utf-8"),
        )],
        include_str!("../assets/console.js"),
    )
        .into_response()
}

async fn style() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/css; charset=utf-8"),
        )],
        include_str!("../assets/console.css"),
    )
        .into_response()
}

/// Every request passes here: the host, the token or session, the origin
/// of a change; every response leaves with the hardening headers.
async fn guard(State(console): State<Arc<Console>>, request: Request, next: Next) -> Response {
    let mut response = match admit(&console, &request) {
        Admission::Pass => next.run(request).await,
        Admission::Answer(response) => response,
    };
    harden(response.headers_mut());
    response
}

enum Admission {
    Pass,
    Answer(Response),
}

fn admit(console: &Console, request: &Request<Body>) -> Admission {
    let headers = request.headers();
    // DNS rebinding: a page on another name that resolves to loopback
    // reaches this socket with its own name in Host.
    let Some(host) = headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .filter(|host| console.hosts.iter().any(|allowed| allowed == host))
    else {
        return Admission::Answer(refusal(
            StatusCode::FORBIDDEN,
            &format!(
                "This console answers only at http://{}/ (the Host header names another).",
                host_of(console.addr)
            ),
        ));
    };
    let query = request.uri().query().unwrap_or("");
    let token = form_urlencoded::parse(query.as_bytes())
        .find(|(name, _)| name == "token")
        .map(|(_, value)| value.into_owned());
    if let Some(token) = token {
        if !same(&token, &console.secrets.token) {
            return Admission::Answer(refusal(
                StatusCode::FORBIDDEN,
                "That is not this console's token: open the URL `hintgate console` printed.",
            ));
        }
        // Exchange the token for the session cookie, and drop it from the
        // address bar (and so from history and any Referer).
        let rest: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(
                form_urlencoded::parse(query.as_bytes()).filter(|(name, _)| name != "token"),
            )
            .finish();
        let path = request.uri().path();
        let location = if rest.is_empty() {
            path.to_owned()
        } else {
            format!("{path}?{rest}")
        };
        let mut response = see_other(&location);
        if let Ok(cookie) = HeaderValue::from_str(&format!(
            "{}={}; HttpOnly; SameSite=Strict; Path=/",
            console.cookie, console.secrets.session
        )) {
            response.headers_mut().insert(header::SET_COOKIE, cookie);
        }
        return Admission::Answer(response);
    }
    if !has_session(console, headers) {
        return Admission::Answer(refusal(
            StatusCode::FORBIDDEN,
            "Open the URL with the token that `hintgate console` printed.",
        ));
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let expected = format!("http://{host}");
        let origin_ok = headers
            .get(header::ORIGIN)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|origin| origin == expected)
            // A browser that says where the request came from must say
            // this very origin.
            && headers
                .get("sec-fetch-site")
                .is_none_or(|site| site.as_bytes() == b"same-origin");
        if !origin_ok {
            return Admission::Answer(refusal(
                StatusCode::FORBIDDEN,
                "A change must come from the console's own page (the Origin header names another, or none).",
            ));
        }
    }
    Admission::Pass
}

fn has_session(console: &Console, headers: &HeaderMap) -> bool {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .any(|(name, value)| name == console.cookie && same(value, &console.secrets.session))
}

fn harden(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // Not `no-referrer`: under it browsers send `Origin: null` with the
    // console's own forms, which the Origin check must refuse. Same-origin
    // sends nothing to any other site, and the address holds no token.
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
}
