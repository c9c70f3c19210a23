//! The HTTP client and the clock, given by the caller.

use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::OAuthError;

/// The largest body read from any OAuth endpoint (metadata, registration,
/// tokens): 256 KiB. A larger body is an error, not a truncation.
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// The HTTP method of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// GET (metadata documents).
    Get,
    /// POST (registration, tokens, device authorization, revocation).
    Post,
}

/// One request the flow makes. `Debug` shows the method and URL only: the
/// body and headers may hold a secret.
#[derive(Clone)]
pub struct HttpRequest {
    /// The method.
    pub method: Method,
    /// The URL, already checked (`https`, or `http` on loopback).
    pub url: String,
    /// Headers (name, value); may include `Authorization`.
    pub headers: Vec<(String, String)>,
    /// The body (form-encoded or JSON), empty for GET.
    pub body: Vec<u8>,
}

impl fmt::Debug for HttpRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpRequest")
            .field("method", &self.method)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl HttpRequest {
    /// A GET that accepts JSON.
    pub fn get(url: &str) -> Self {
        Self {
            method: Method::Get,
            url: url.to_owned(),
            headers: vec![("accept".to_owned(), "application/json".to_owned())],
            body: Vec::new(),
        }
    }

    /// A POST of a form.
    pub fn post_form(url: &str, pairs: &[(&str, &str)]) -> Self {
        let mut ser = form_urlencoded::Serializer::new(String::new());
        for (k, v) in pairs {
            ser.append_pair(k, v);
        }
        Self {
            method: Method::Post,
            url: url.to_owned(),
            headers: vec![
                (
                    "content-type".to_owned(),
                    "application/x-www-form-urlencoded".to_owned(),
                ),
                ("accept".to_owned(), "application/json".to_owned()),
            ],
            body: ser.finish().into_bytes(),
        }
    }

    /// A POST of a JSON document.
    pub fn post_json(url: &str, body: &serde_json::Value) -> Self {
        Self {
            method: Method::Post,
            url: url.to_owned(),
            headers: vec![
                ("content-type".to_owned(), "application/json".to_owned()),
                ("accept".to_owned(), "application/json".to_owned()),
            ],
            body: body.to_string().into_bytes(),
        }
    }

    /// The value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body's form fields (for tests and fakes).
    pub fn form(&self) -> Vec<(String, String)> {
        form_urlencoded::parse(&self.body).into_owned().collect()
    }
}

/// One response. `Debug` shows the status only: the body may hold a token.
#[derive(Clone)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// Headers (name, value); repeated names stay repeated.
    pub headers: Vec<(String, String)>,
    /// The body, at most [`MAX_BODY_BYTES`].
    pub body: Vec<u8>,
}

impl fmt::Debug for HttpResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpResponse")
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

impl HttpResponse {
    /// Every value of a header, by case-insensitive name.
    pub fn header_values(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// Sends one request and returns its response. Implementations never follow
/// redirects (a 3xx is returned as is) and never read more than
/// [`MAX_BODY_BYTES`] of a body.
pub trait HttpClient {
    /// Sends `request`.
    fn send(
        &self,
        request: HttpRequest,
    ) -> impl Future<Output = Result<HttpResponse, OAuthError>> + Send;
}

/// The time, and waiting, given by the caller.
pub trait Clock {
    /// Seconds since the Unix epoch.
    fn now(&self) -> u64;
    /// Waits `duration` (the device grant's polling interval).
    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send;
}

/// The system's clock and tokio's timer.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    }

    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send {
        tokio::time::sleep(duration)
    }
}

/// Where an address is, as the SSRF guard sorts addresses: on the public
/// internet, or inside this machine or its networks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AddressClass {
    /// Anywhere on the internet.
    Public,
    /// This machine (`127.0.0.0/8`, `::1`).
    Loopback,
    /// A private network (RFC 1918, IPv6 unique local `fc00::/7`).
    Private,
    /// A link (`169.254.0.0/16`, where cloud metadata services answer,
    /// `fe80::/10`).
    LinkLocal,
    /// Carrier-grade NAT (`100.64.0.0/10`, RFC 6598).
    Shared,
    /// The unspecified address (`0.0.0.0`, `::`), which connects to this
    /// machine.
    Unspecified,
}

impl AddressClass {
    /// The class of `ip` (an IPv4 address mapped into IPv6 is sorted as
    /// the IPv4 address).
    #[must_use]
    pub fn of(ip: IpAddr) -> Self {
        let v4 = match ip {
            IpAddr::V4(v4) => v4,
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => v4,
                None => {
                    let first = v6.segments().first().copied().unwrap_or(0);
                    return if v6.is_loopback() {
                        Self::Loopback
                    } else if v6.is_unspecified() {
                        Self::Unspecified
                    } else if (first & 0xfe00) == 0xfc00 {
                        Self::Private
                    } else if (first & 0xffc0) == 0xfe80 {
                        Self::LinkLocal
                    } else {
                        Self::Public
                    };
                }
            },
        };
        let [a, b, ..] = v4.octets();
        if v4.is_loopback() {
            Self::Loopback
        } else if v4.is_unspecified() {
            Self::Unspecified
        } else if v4.is_private() {
            Self::Private
        } else if v4.is_link_local() {
            Self::LinkLocal
        } else if a == 100 && (64..128).contains(&b) {
            Self::Shared
        } else {
            Self::Public
        }
    }

    /// The class as errors name it.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Public => "public",
            Self::Loopback => "loopback",
            Self::Private => "private",
            Self::LinkLocal => "link-local",
            Self::Shared => "shared",
            Self::Unspecified => "unspecified",
        }
    }
}

/// The SSRF guard of a client: the classes of address it may connect to.
/// Public addresses always; an internal class only when the MCP server's
/// own URL is in it ([`AddressGuard::for_server`]), so that a server on the
/// internet cannot point hintgate (through its metadata, its authorization
/// server's endpoints, or a name that resolves inside) at this machine or
/// its networks, while a server on loopback or a private network can still
/// name an authorization server beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressGuard {
    allowed: Vec<AddressClass>,
}

impl AddressGuard {
    /// A guard that allows public addresses and the classes `internal`.
    #[must_use]
    pub fn allowing(internal: &[AddressClass]) -> Self {
        let mut allowed = vec![AddressClass::Public];
        for class in internal {
            if !allowed.contains(class) {
                allowed.push(*class);
            }
        }
        Self { allowed }
    }

    /// The guard for a server at `url`: public addresses, and the classes
    /// of the addresses its host is (an IP literal) or resolves to (a name
    /// that does not resolve adds none).
    pub async fn for_server(url: &str) -> Self {
        let mut classes = Vec::new();
        if let Ok(parsed) = url::Url::parse(url) {
            match parsed.host() {
                Some(url::Host::Ipv4(ip)) => classes.push(AddressClass::of(IpAddr::V4(ip))),
                Some(url::Host::Ipv6(ip)) => classes.push(AddressClass::of(IpAddr::V6(ip))),
                Some(url::Host::Domain(name)) => {
                    let port = parsed.port_or_known_default().unwrap_or(443);
                    if let Ok(addrs) = tokio::net::lookup_host((name, port)).await {
                        classes.extend(addrs.map(|addr| AddressClass::of(addr.ip())));
                    }
                }
                None => {}
            }
        }
        Self::allowing(&classes)
    }

    /// Whether the guard lets a client connect to `ip`.
    #[must_use]
    pub fn permits(&self, ip: IpAddr) -> bool {
        self.allowed.contains(&AddressClass::of(ip))
    }

    /// Why `host` is refused, when it is an IP literal the guard does not
    /// permit (a name is checked as it resolves).
    fn refuses_literal(&self, url: &str) -> Option<String> {
        let parsed = url::Url::parse(url).ok()?;
        let ip = match parsed.host()? {
            url::Host::Ipv4(ip) => IpAddr::V4(ip),
            url::Host::Ipv6(ip) => IpAddr::V6(ip),
            url::Host::Domain(_) => return None,
        };
        (!self.permits(ip)).then(|| {
            format!(
                "refused: an address of class `{}`, which the server's own address is not",
                AddressClass::of(ip).as_str()
            )
        })
    }
}

/// reqwest's resolver behind the guard: the system's resolver, keeping
/// only the addresses the guard permits. A name that resolves only to
/// refused addresses fails, naming their class; no connection is tried.
#[derive(Debug)]
struct GuardedResolver {
    guard: AddressGuard,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let guard = self.guard.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let found: Vec<std::net::SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let (kept, refused): (Vec<_>, Vec<_>) =
                found.into_iter().partition(|addr| guard.permits(addr.ip()));
            if kept.is_empty() {
                let classes: Vec<&str> = refused
                    .iter()
                    .map(|addr| AddressClass::of(addr.ip()).as_str())
                    .collect();
                let message = if classes.is_empty() {
                    "the name resolves to no address".to_owned()
                } else {
                    format!(
                        "refused: the name resolves only to addresses of class `{}`, which the server's own address is not",
                        classes.first().copied().unwrap_or("internal")
                    )
                };
                return Err(message.into());
            }
            let addrs: reqwest::dns::Addrs = Box::new(kept.into_iter());
            Ok(addrs)
        })
    }
}

/// [`HttpClient`] over reqwest: no redirects followed, a deadline per
/// request, bodies bounded, and the SSRF guard of the server it signs in
/// to ([`AddressGuard`]) on every connection. The caller installs rustls's
/// crypto provider before building it (as the gateway does at start-up).
#[derive(Debug, Clone)]
pub struct ReqwestClient {
    client: reqwest::Client,
    guard: AddressGuard,
}

impl ReqwestClient {
    /// A client with `timeout` per request that reaches public addresses
    /// only (and the server's own classes: see [`ReqwestClient::guarded`]).
    pub fn new(timeout: Duration) -> Result<Self, OAuthError> {
        Self::guarded(timeout, AddressGuard::allowing(&[]))
    }

    /// A client with `timeout` per request that connects only to what
    /// `guard` permits, whether a URL names an IP literal or a name that
    /// resolves to it.
    pub fn guarded(timeout: Duration, guard: AddressGuard) -> Result<Self, OAuthError> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout)
            .user_agent(concat!("hintgate/", env!("CARGO_PKG_VERSION")))
            .no_proxy()
            .dns_resolver(std::sync::Arc::new(GuardedResolver {
                guard: guard.clone(),
            }))
            .build()
            .map_err(|e| OAuthError::Transport {
                url: String::new(),
                reason: format!("building the HTTP client: {e}"),
            })?;
        Ok(Self { client, guard })
    }
}

impl HttpClient for ReqwestClient {
    fn send(
        &self,
        request: HttpRequest,
    ) -> impl Future<Output = Result<HttpResponse, OAuthError>> + Send {
        let client = self.client.clone();
        let refused = self.guard.refuses_literal(&request.url);
        async move {
            let url = request.url.clone();
            let transport = |reason: String| OAuthError::Transport {
                url: url.clone(),
                reason,
            };
            // An IP literal never reaches the resolver: it is checked here.
            if let Some(reason) = refused {
                return Err(transport(reason));
            }
            let mut builder = match request.method {
                Method::Get => client.get(&request.url),
                Method::Post => client.post(&request.url),
            };
            for (name, value) in &request.headers {
                builder = builder.header(name.as_str(), value.as_str());
            }
            if request.method == Method::Post {
                builder = builder.body(request.body);
            }
            // reqwest's error text names the URL and the cause, never a
            // header or a body.
            let mut response = builder
                .send()
                .await
                .map_err(|e| transport(error_chain(&e.without_url())))?;
            let status = response.status().as_u16();
            let headers = response
                .headers()
                .iter()
                .filter_map(|(n, v)| Some((n.as_str().to_owned(), v.to_str().ok()?.to_owned())))
                .collect();
            let mut body = Vec::new();
            while let Some(chunk) = response
                .chunk()
                .await
                .map_err(|e| transport(e.without_url().to_string()))?
            {
                if body.len() + chunk.len() > MAX_BODY_BYTES {
                    return Err(transport(format!(
                        "body larger than {MAX_BODY_BYTES} bytes"
                    )));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(HttpResponse {
                status,
                headers,
                body,
            })
        }
    }
}

/// An error and its causes, joined (reqwest's own text says only "error
/// sending request"; the resolver's refusal is among the causes).
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}
