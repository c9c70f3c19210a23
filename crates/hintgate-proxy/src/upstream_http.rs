//! Upstream servers reached over Streamable HTTP.
//!
//! Each message the gateway sends becomes one POST (in its own task, so a
//! slow request holds up no other). The answer comes back as JSON or as an
//! SSE stream, whose events become lines on the gateway's event channel,
//! exactly as a stdio server's output would; from the event loop's side an
//! HTTP server is just another stream of lines. The session id the server
//! assigns at `initialize` is sent on every later request, and so is the
//! protocol version; once initialized, a GET stream carries the messages the
//! server sends on its own. An HTTP failure of a request becomes a JSON-RPC
//! error for that request; an expired session ends the link, and the server
//! is started again on its next call.
//!
//! What waits for the server is a message whose POST it has not answered
//! yet (not even with the headers of a stream): those are counted in the
//! link's queue, which the gateway bounds like a stdio server's unread
//! input, so a server that takes requests and never answers them cannot
//! make the gateway hold them without end. Every exchange runs in a set
//! the link owns, so when the link is dropped (the server failed or was
//! stopped), what still waits on the server is aborted with it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::conn::QueueGauge;
use crate::event::LinkTarget;
use crate::event::{Event, EventSender, UpstreamEvent};
use crate::frame::{self, Kind, Message, ServerLine};
use crate::sse::SseDecoder;

/// A link to a Streamable HTTP server.
#[derive(Debug)]
pub struct HttpLink {
    /// Each message, with the `--listen` principal it is sent for (`None`:
    /// the gateway's own, or a stdio host's).
    tx: mpsc::UnboundedSender<(String, Option<Arc<str>>)>,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    client: reqwest::Client,
    url: String,
    /// `url`, parsed once (the client would parse the text on every
    /// request); `None` when it does not parse, and the client says why.
    parsed: Option<reqwest::Url>,
    headers: HeaderMap,
    idx: usize,
    generation: u64,
    max_message: usize,
    /// The deepest nesting accepted (`max_json_depth`).
    max_depth: usize,
    events: EventSender,
    /// Messages whose POST the server has not answered yet.
    queue: Arc<QueueGauge>,
    session: Mutex<Session>,
    /// The bearer token of a server behind OAuth.
    auth: Option<Arc<crate::upstream_oauth::OAuthBearer>>,
}

#[derive(Debug, Default)]
struct Session {
    id: Option<String>,
    version: Option<String>,
    listening: bool,
}

/// Why an HTTP server could not be reached.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// A configured header is not a valid HTTP header.
    #[error("header `{0}` is not a valid HTTP header")]
    Header(String),
    /// The HTTP client could not be built.
    #[error("cannot set up HTTP: {0}")]
    Client(String),
}

/// The headers of one POST that come from the session and the message.
struct RequestHead<'a> {
    session_id: Option<&'a str>,
    version: Option<&'a str>,
    /// The method, sent as `mcp-method` (with `mcp-name`) to servers of
    /// the 2026-07-28 era only.
    method: Option<&'a str>,
    name: Option<&'a str>,
}

/// `Authorization: Bearer TOKEN`, marked sensitive (never shown by the
/// client's `Debug`); `None` for a token that is no header value.
fn bearer_header(token: &hintgate_oauth::Secret) -> Option<HeaderValue> {
    let mut value = HeaderValue::from_str(&format!("Bearer {}", token.expose())).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// Installs ring as the process's TLS provider (once; later calls do nothing).
pub(crate) fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

// === impl HttpLink ===

impl HttpLink {
    /// For a server behind OAuth, the scopes of the token it was sent last
    /// for `principal` (`""`: the gateway's own login).
    pub fn token_scope(&self, principal: &str) -> Option<String> {
        self.shared
            .auth
            .as_ref()
            .and_then(|auth| auth.token_scope(principal))
    }

    /// Sets up the link; nothing is sent until the first message.
    ///
    /// # Errors
    ///
    /// [`HttpError`] when a header is invalid or the client cannot be built.
    pub fn connect(
        url: &str,
        headers: &BTreeMap<String, String>,
        target: LinkTarget,
    ) -> Result<Self, HttpError> {
        Self::connect_with(url, headers, target, None)
    }

    /// Sets up the link to a server behind OAuth: each request carries the
    /// bearer token of `auth`, refreshed before it expires and once after a
    /// 401; a call that needs a login fails with an error naming the
    /// command that signs in.
    ///
    /// # Errors
    ///
    /// [`HttpError`] when a header is invalid or the client cannot be built.
    pub fn connect_with(
        url: &str,
        headers: &BTreeMap<String, String>,
        target: LinkTarget,
        auth: Option<Arc<crate::upstream_oauth::OAuthBearer>>,
    ) -> Result<Self, HttpError> {
        install_tls_provider();
        let mut header_map = HeaderMap::new();
        for (name, value) in headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| HttpError::Header(name.clone()))?;
            let mut value =
                HeaderValue::from_str(value).map_err(|_| HttpError::Header(name.to_string()))?;
            value.set_sensitive(true);
            header_map.insert(name, value);
        }
        let client = reqwest::Client::builder()
            .build()
            .map_err(|err| HttpError::Client(err.to_string()))?;
        let shared = Arc::new(Shared {
            client,
            url: url.to_owned(),
            parsed: reqwest::Url::parse(url).ok(),
            headers: header_map,
            idx: target.server,
            generation: target.generation,
            max_message: target.max_line,
            max_depth: target.max_depth,
            events: target.events,
            queue: target.queue,
            session: Mutex::new(Session::default()),
            auth,
        });
        let (tx, mut rx) = mpsc::unbounded_channel::<(String, Option<Arc<str>>)>();
        let worker = Arc::clone(&shared);
        tokio::spawn(async move {
            // When the link is dropped the channel closes, this task ends,
            // and dropping the set aborts every exchange still under way.
            let mut exchanges = JoinSet::new();
            loop {
                tokio::select! {
                    line = rx.recv() => match line {
                        Some((line, principal)) => {
                            exchanges.spawn(Arc::clone(&worker).post(line, principal));
                        }
                        None => break,
                    },
                    // Finished exchanges are reaped as they end.
                    Some(_) = exchanges.join_next(), if !exchanges.is_empty() => {}
                }
            }
        });
        Ok(Self { tx, shared })
    }

    /// Sends one message, counted in the link's queue until the server
    /// answers its POST.
    pub fn send(&self, line: String) {
        self.send_as(line, None);
    }

    /// Sends one message on behalf of a `--listen` principal: for a server
    /// behind OAuth, it goes with that principal's own login.
    pub fn send_as(&self, line: String, principal: Option<Arc<str>>) {
        let len = line.len();
        self.shared.queue.queued(len);
        if self.tx.send((line, principal)).is_err() {
            self.shared.queue.withdrawn(len);
        }
    }

    /// Ends the session on the server (DELETE), when it has one.
    pub async fn stop(self) {
        let session = self
            .shared
            .session
            .lock()
            .ok()
            .and_then(|session| session.id.clone());
        if let Some(id) = session {
            let bearer = match &self.shared.auth {
                Some(auth) => auth.bearer("").await.ok(),
                None => None,
            };
            let request = self
                .shared
                .client
                .delete(&self.shared.url)
                .headers(self.shared.headers_with(bearer.as_ref()))
                .header("mcp-session-id", id);
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), request.send()).await;
        }
    }
}

// === impl Shared ===

impl Shared {
    /// Sends an event to the loop; a line waits for room there first, so
    /// a server that floods the loop is held in this exchange.
    async fn emit(&self, event: UpstreamEvent) {
        if matches!(
            event,
            UpstreamEvent::Line(_) | UpstreamEvent::LineOnStream { .. }
        ) {
            self.events.room().await;
        }
        let _ = self
            .events
            .send(Event::Upstream {
                server: self.idx,
                generation: self.generation,
                event,
            })
            .await;
    }

    /// One line of the gateway's own making (or a server's answer under the
    /// gateway's id), read as any server line is.
    async fn emit_line(&self, line: String) {
        self.emit(UpstreamEvent::Line(ServerLine::read(line, self.max_depth)))
            .await;
    }

    /// One line to the gateway, as a single line of JSON.
    async fn emit_message(&self, text: &str) {
        self.emit_message_on(text, None).await;
    }

    /// One line to the gateway, as a single line of JSON; `on_stream`: the
    /// id of the gateway's request whose event stream carried it.
    async fn emit_message_on(&self, text: &str, on_stream: Option<u64>) {
        let line = |line: String| {
            let line = ServerLine::read(line, self.max_depth);
            match on_stream {
                Some(request) => UpstreamEvent::LineOnStream { line, request },
                None => UpstreamEvent::Line(line),
            }
        };
        let text = text.trim();
        if text.is_empty() {
            return;
        }
        if text.len() > self.max_message {
            self.emit(UpstreamEvent::Broken(format!(
                "sent a message larger than the limit of {} bytes",
                self.max_message
            )))
            .await;
            return;
        }
        if text.contains('\n') {
            // Line framing towards the gateway: re-serialise compactly.
            match serde_json::from_str::<Value>(text) {
                Ok(value) => self.emit(line(value.to_string())).await,
                Err(_) => self.emit(line(text.replace('\n', " "))).await,
            }
        } else {
            self.emit(line(text.to_owned())).await;
        }
    }

    async fn fail_request(&self, id: Option<&str>, message: &str) {
        match id {
            Some(id) => {
                self.emit_line(frame::error_response(id, -32603, message))
                    .await
            }
            None => tracing::warn!("an HTTP notification to `{}` failed: {message}", self.url),
        }
    }

    async fn post(self: Arc<Self>, line: String, principal: Option<Arc<str>>) {
        let principal = principal.as_deref().unwrap_or("");
        // Only what the headers need is read of the params (the version in
        // `_meta`, the tool's name or the resource's URI), not the
        // arguments.
        #[derive(serde::Deserialize)]
        struct Meta<'a> {
            #[serde(rename = "io.modelcontextprotocol/protocolVersion", borrow, default)]
            version: Option<std::borrow::Cow<'a, str>>,
        }
        #[derive(serde::Deserialize)]
        struct Params<'a> {
            #[serde(rename = "_meta", borrow, default)]
            meta: Option<Meta<'a>>,
            #[serde(default)]
            name: Option<Value>,
            #[serde(default)]
            uri: Option<Value>,
        }
        let (id, method, is_request, meta_version, name) = match Message::parse(&line) {
            Ok(message) => {
                let light: Option<Result<Params<'_>, _>> = message
                    .params
                    .filter(|raw| raw.trim_start().starts_with('{'))
                    .map(serde_json::from_str);
                let (meta_version, name) = match light {
                    Some(Ok(params)) => (
                        params
                            .meta
                            .as_ref()
                            .and_then(|meta| meta.version.as_deref())
                            .map(str::to_owned),
                        params
                            .name
                            .as_ref()
                            .or(params.uri.as_ref())
                            .and_then(Value::as_str)
                            .map(str::to_owned),
                    ),
                    // What the light reading cannot take is read whole.
                    _ => {
                        let params: Option<Value> = message
                            .params
                            .and_then(|raw| serde_json::from_str(raw).ok());
                        (
                            params
                                .as_ref()
                                .and_then(|p| {
                                    p.pointer("/_meta/io.modelcontextprotocol~1protocolVersion")
                                })
                                .and_then(Value::as_str)
                                .map(str::to_owned),
                            params
                                .as_ref()
                                .and_then(|p| p.get("name").or_else(|| p.get("uri")))
                                .and_then(Value::as_str)
                                .map(str::to_owned),
                        )
                    }
                };
                (
                    message.id.map(|raw| raw.to_owned()),
                    message.method.as_deref().map(str::to_owned),
                    message.kind() == Kind::Request,
                    meta_version,
                    name,
                )
            }
            Err(_) => (None, None, false, None, None),
        };
        let (session_id, version) = self
            .session
            .lock()
            .map(|session| (session.id.clone(), session.version.clone()))
            .unwrap_or_default();
        let version = meta_version.clone().or(version);
        let len = line.len();
        let head = RequestHead {
            session_id: session_id.as_deref(),
            version: version.as_deref(),
            method: method.as_deref().filter(|_| meta_version.is_some()),
            name: name.as_deref(),
        };
        let (bearer, retry) = match &self.auth {
            Some(auth) => match auth.bearer(principal).await {
                Ok(token) => (Some(token), Some(line.clone())),
                Err(message) => {
                    self.queue.written(len);
                    self.fail_request(id.as_deref().filter(|_| is_request), &message)
                        .await;
                    return;
                }
            },
            None => (None, None),
        };
        let mut sent = self.request(line, &head, bearer.as_ref()).send().await;
        // A 401 to the token sent: refreshed once, and sent again.
        if let (Some(auth), Some(used), Some(body), Ok(response)) =
            (&self.auth, &bearer, retry, &sent)
            && response.status() == reqwest::StatusCode::UNAUTHORIZED
        {
            match auth.after_unauthorized(principal, used).await {
                Ok(token) => {
                    sent = self.request(body, &head, Some(&token)).send().await;
                    if sent.as_ref().is_ok_and(|response| {
                        response.status() == reqwest::StatusCode::UNAUTHORIZED
                    }) {
                        self.queue.written(len);
                        self.fail_request(
                            id.as_deref().filter(|_| is_request),
                            &auth.refused(principal),
                        )
                        .await;
                        return;
                    }
                }
                Err(message) => {
                    self.queue.written(len);
                    self.fail_request(id.as_deref().filter(|_| is_request), &message)
                        .await;
                    return;
                }
            }
        }
        // The server answered (or the exchange failed): the message no
        // longer waits for it.
        self.queue.written(len);
        let response = match sent {
            Ok(response) => response,
            Err(err) => {
                self.fail_request(
                    id.as_deref().filter(|_| is_request),
                    &format!("cannot reach `{}`: {err}", self.url),
                )
                .await;
                return;
            }
        };
        let status = response.status();
        // A 403 `insufficient_scope` asks for more power: never granted
        // silently, the call fails naming how a person grants it.
        if status == reqwest::StatusCode::FORBIDDEN
            && let Some(auth) = &self.auth
            && let Some(asked) = step_up_scopes(response.headers())
        {
            self.fail_request(
                id.as_deref().filter(|_| is_request),
                &auth.step_up(principal, &asked),
            )
            .await;
            return;
        }
        if method.as_deref() == Some("initialize")
            && let Some(session) = response
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
            && let Ok(mut state) = self.session.lock()
        {
            state.id = Some(session.to_owned());
        }
        // A request sent with a `--listen` principal's own login on the
        // session the gateway opened with its own: a server that serves a
        // session only to the credential that opened it answers 404. That
        // fails the request; the session stands for everyone else.
        if status.as_u16() == 404
            && session_id.is_some()
            && !principal.is_empty()
            && let Some(auth) = &self.auth
        {
            self.fail_request(
                id.as_deref().filter(|_| is_request),
                &auth.session_refused(principal),
            )
            .await;
            return;
        }
        if status.as_u16() == 404 && session_id.is_some() {
            self.emit(UpstreamEvent::Closed(
                "ended the HTTP session (404)".to_owned(),
            ))
            .await;
            return;
        }
        let is_sse = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if status.is_success() && is_sse {
            // What comes on a request's own stream is part of it.
            let on_stream = id
                .as_deref()
                .filter(|_| is_request)
                .and_then(|id| id.parse::<u64>().ok());
            self.read_sse(response, on_stream).await;
        } else {
            match self.read_body(response).await {
                Ok(body) if status.is_success() => {
                    // The body of a request's POST answers that request: an
                    // error under `"id": null` (the server could not read it)
                    // is matched to it here, where it can be. A body of one
                    // message on one line, the usual answer, is read once,
                    // here, and handed on as read.
                    let request = id.as_deref().filter(|_| is_request);
                    match self.read_single(&body, method.as_deref()) {
                        Some(line) => {
                            let line = match (line.framed(), request) {
                                (Some(framed), Some(id)) if framed.message().answers_nothing() => {
                                    line.with_id(id).unwrap_or(line)
                                }
                                _ => line,
                            };
                            self.emit(UpstreamEvent::Line(line)).await;
                        }
                        None => {
                            let unmatched = Message::parse(body.trim())
                                .ok()
                                .filter(Message::answers_nothing);
                            match (unmatched, request) {
                                (Some(reply), Some(id)) => self.emit_line(reply.with_id(id)).await,
                                _ => self.emit_body(&body, method.as_deref()).await,
                            }
                        }
                    }
                }
                Ok(body) => {
                    let reply = Message::parse(body.trim())
                        .ok()
                        .filter(|m| m.error.is_some());
                    match (reply, id.as_deref().filter(|_| is_request)) {
                        (Some(reply), Some(id)) => self.emit_line(reply.with_id(id)).await,
                        (_, id) => {
                            let excerpt: String = body.chars().take(200).collect();
                            self.fail_request(
                                id,
                                &format!("HTTP {status} from `{}`: {excerpt}", self.url),
                            )
                            .await;
                        }
                    }
                }
                Err(err) => {
                    self.fail_request(id.as_deref().filter(|_| is_request), &err)
                        .await
                }
            }
        }
        if method.as_deref() == Some("notifications/initialized") {
            self.listen().await;
        }
    }

    /// The configured headers, with `Authorization: Bearer` in place of any
    /// configured `Authorization` when there is a bearer token.
    fn headers_with(&self, bearer: Option<&hintgate_oauth::Secret>) -> HeaderMap {
        let mut headers = self.headers.clone();
        if let Some(value) = bearer.and_then(bearer_header) {
            headers.insert(reqwest::header::AUTHORIZATION, value);
        }
        headers
    }

    /// The POST of `body`, with the headers of the session and the
    /// message, and the bearer token of a server behind OAuth.
    fn request(
        &self,
        body: String,
        head: &RequestHead<'_>,
        bearer: Option<&hintgate_oauth::Secret>,
    ) -> reqwest::RequestBuilder {
        // The URL parsed once: the client would parse the text each time.
        let request = match &self.parsed {
            Some(url) => self.client.post(url.clone()),
            None => self.client.post(&self.url),
        };
        let request = if self.headers.is_empty() && bearer.is_none() {
            request
        } else {
            request.headers(self.headers_with(bearer))
        };
        let mut request = request
            .header(
                reqwest::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )
            .header(
                reqwest::header::ACCEPT,
                HeaderValue::from_static("application/json, text/event-stream"),
            )
            .body(body);
        if let Some(session_id) = head.session_id {
            request = request.header("mcp-session-id", session_id);
        }
        if let Some(version) = head.version {
            request = request.header("mcp-protocol-version", version);
        }
        if let Some(method) = head.method {
            // 2026-07-28 servers route and check on these headers.
            request = request.header("mcp-method", method);
            if let Some(name) = head.name
                && let Ok(value) = HeaderValue::from_str(name)
            {
                request = request.header("mcp-name", value);
            }
        }
        request
    }

    /// A body that is one message on one line within the limit, read as
    /// any server line is, when reading found a message: what
    /// [`Shared::emit_body`] would hand on, read once. `None` for any other
    /// body (empty, a batch, over several lines, over the limit, the answer
    /// to `initialize`, whose version is noted, or a line the checks refuse),
    /// which goes the general way.
    fn read_single(&self, body: &str, method: Option<&str>) -> Option<ServerLine> {
        let text = body.trim();
        let single = !text.is_empty()
            && !text.starts_with('[')
            && !text.contains('\n')
            && text.len() <= self.max_message
            && method != Some("initialize");
        let line = single.then(|| ServerLine::read(text.to_owned(), self.max_depth))?;
        line.framed().is_some().then_some(line)
    }

    async fn emit_body(&self, body: &str, method: Option<&str>) {
        let body = body.trim();
        if body.is_empty() {
            return;
        }
        if body.starts_with('[') {
            if let Ok(Value::Array(items)) = serde_json::from_str::<Value>(body) {
                for item in items {
                    self.emit_message(&item.to_string()).await;
                }
            }
            return;
        }
        if method == Some("initialize")
            && let Ok(value) = serde_json::from_str::<Value>(body)
            && let Some(version) = value
                .pointer("/result/protocolVersion")
                .and_then(Value::as_str)
            && let Ok(mut state) = self.session.lock()
        {
            state.version = Some(version.to_owned());
        }
        self.emit_message(body).await;
    }

    async fn read_body(&self, mut response: reqwest::Response) -> Result<String, String> {
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|err| format!("reading `{}` failed: {err}", self.url))?
        {
            body.extend_from_slice(&chunk);
            if body.len() > self.max_message {
                return Err(format!(
                    "`{}` sent a body larger than {} bytes",
                    self.url, self.max_message
                ));
            }
        }
        String::from_utf8(body).map_err(|_| format!("`{}` sent a body that is not UTF-8", self.url))
    }

    /// Reads an SSE stream, sending each event's data as one message. A
    /// line or an event longer than the limit breaks the link: nothing of
    /// it is held beyond that ([`SseDecoder`]).
    async fn read_sse(&self, mut response: reqwest::Response, on_stream: Option<u64>) {
        let mut decoder = SseDecoder::new(self.max_message);
        let mut events = Vec::new();
        loop {
            let chunk = match response.chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) | Err(_) => break,
            };
            let fed = decoder.feed(&chunk, &mut events);
            for data in events.drain(..) {
                self.emit_message_on(&data, on_stream).await;
            }
            if let Err(err) = fed {
                self.emit(UpstreamEvent::Broken(format!("sent {err}")))
                    .await;
                return;
            }
        }
        self.emit_message_on(&decoder.finish(), on_stream).await;
    }

    /// Reads the GET stream for messages the server sends on its own, for
    /// as long as it is open (in the exchange that opened the session, so
    /// it ends with the link).
    async fn listen(&self) {
        let (session_id, version) = match self.session.lock() {
            Ok(mut session) if !session.listening => {
                session.listening = true;
                (session.id.clone(), session.version.clone())
            }
            _ => return,
        };
        let bearer = match &self.auth {
            Some(auth) => auth.bearer("").await.ok(),
            None => None,
        };
        let mut request = self
            .client
            .get(&self.url)
            .headers(self.headers_with(bearer.as_ref()))
            .header("accept", "text/event-stream");
        if let Some(session_id) = &session_id {
            request = request.header("mcp-session-id", session_id);
        }
        if let Some(version) = &version {
            request = request.header("mcp-protocol-version", version);
        }
        match request.send().await {
            Ok(response) if response.status().is_success() => self.read_sse(response, None).await,
            // 405 and the like: the server has no such stream.
            Ok(_) | Err(_) => {}
        }
    }
}

/// The scopes a 403's `WWW-Authenticate` asks for when it is a step-up
/// (`error="insufficient_scope"`); `None` for any other 403.
fn step_up_scopes(headers: &reqwest::header::HeaderMap) -> Option<Vec<String>> {
    let values: Vec<&str> = headers
        .get_all(reqwest::header::WWW_AUTHENTICATE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .collect();
    hintgate_oauth::challenge::parse_www_authenticate(&values)
        .filter(hintgate_oauth::challenge::BearerChallenge::is_insufficient_scope)
        .map(|challenge| challenge.scope.unwrap_or_default())
}
