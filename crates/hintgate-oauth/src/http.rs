//! The HTTP client and the clock, given by the caller.

use std::fmt;
use std::future::Future;
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

/// [`HttpClient`] over reqwest: no redirects followed, a deadline per
/// request, bodies bounded. The caller installs rustls's crypto provider
/// before building it (as the gateway does at start-up).
#[derive(Debug, Clone)]
pub struct ReqwestClient {
    client: reqwest::Client,
}

impl ReqwestClient {
    /// A client with `timeout` per request.
    pub fn new(timeout: Duration) -> Result<Self, OAuthError> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout)
            .user_agent(concat!("hintgate/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| OAuthError::Transport {
                url: String::new(),
                reason: format!("building the HTTP client: {e}"),
            })?;
        Ok(Self { client })
    }
}

impl HttpClient for ReqwestClient {
    fn send(
        &self,
        request: HttpRequest,
    ) -> impl Future<Output = Result<HttpResponse, OAuthError>> + Send {
        let client = self.client.clone();
        async move {
            let url = request.url.clone();
            let transport = |reason: String| OAuthError::Transport {
                url: url.clone(),
                reason,
            };
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
                .map_err(|e| transport(e.without_url().to_string()))?;
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
