//! The egress proxy of a sandboxed server with `network = ["host:port", ...]`
//! (design §6).
//!
//! The sandbox makes a listening socket on 127.0.0.1 inside the server's
//! own network namespace, where nothing else leads out, and hands it to the
//! gateway ([`hintgate_sandbox::Confinement::egress_listener`]); the server's
//! `HTTP_PROXY`, `HTTPS_PROXY` and `ALL_PROXY` point at it. Here the gateway
//! accepts on it and serves HTTP proxy requests:
//!
//! - `CONNECT host:port` (HTTPS and any other TCP protocol through a
//!   tunnel), and a plain-HTTP request in absolute form
//!   (`GET http://host:port/path`), sent on in origin form;
//! - only to a `host:port` the table lists, compared as text after the
//!   same normalisation as the configuration's (lowercase names, IPv6 in
//!   brackets): a name allows that name, never the addresses it resolves
//!   to, and an address allows only itself;
//! - names are resolved here, by the gateway, once per connection, and the
//!   connection goes to what was resolved. A listed name that resolves to
//!   a loopback, link-local or unspecified address is refused (a server
//!   that controls a listed name's DNS cannot point it at this machine's
//!   own services or a cloud metadata address), unless the list names
//!   `localhost` or that address itself;
//! - every attempt, allowed or refused, is logged with the server's
//!   name (`server.id`), what it asked for and why it was refused;
//! - bounded: at most [`Limits::connections`] connections at once per
//!   server (the rest are answered 503 and closed), a request head of at
//!   most [`Limits::head_bytes`] that must arrive within
//!   [`Limits::head_time`] (a slow sender is answered 408 and closed), and
//!   a connection out that must open within [`Limits::connect_time`].
//!
//! The proxy ends, with every connection through it, when its
//! [`EgressProxy`] is dropped (with the server's process).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use hintgate_policy::config::Egress;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// The bounds of one server's egress proxy.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The most connections through the proxy at once.
    pub connections: usize,
    /// The largest request head, in bytes.
    pub head_bytes: usize,
    /// How long a request head may take to arrive.
    pub head_time: Duration,
    /// How long resolving a name and opening the connection out may take.
    pub connect_time: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            connections: 64,
            head_bytes: 16 * 1024,
            head_time: Duration::from_secs(10),
            connect_time: Duration::from_secs(10),
        }
    }
}

/// A running egress proxy: dropping it closes the listener and every
/// connection through it.
#[derive(Debug)]
pub struct EgressProxy {
    task: JoinHandle<()>,
}

impl Drop for EgressProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What one server may reach, and its name for the log.
#[derive(Debug)]
struct Allowed {
    server: String,
    hosts: Vec<Egress>,
    limits: Limits,
}

/// What a request asks for.
#[derive(Debug)]
enum Request {
    /// `CONNECT host:port`: a tunnel.
    Connect(Egress),
    /// A plain-HTTP request in absolute form: where it goes, and its head
    /// rewritten to origin form.
    Forward(Egress, Vec<u8>),
}

/// Why a connection is refused, and the status it is answered with.
#[derive(Debug)]
struct Refusal {
    status: &'static str,
    why: String,
}

/// Starts the egress proxy of `server` on `listener` (the one the sandbox
/// made in the server's namespace), reaching only `hosts`.
///
/// # Errors
///
/// The listener cannot be registered with the runtime.
pub fn spawn(
    listener: std::net::TcpListener,
    server: &str,
    hosts: &[Egress],
    limits: Limits,
) -> std::io::Result<EgressProxy> {
    listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(listener)?;
    let allowed = Arc::new(Allowed {
        server: server.to_owned(),
        hosts: hosts.to_vec(),
        limits,
    });
    tracing::info!(
        server.id = %allowed.server,
        "egress proxy: the server may reach {}",
        list(&allowed.hosts)
    );
    Ok(EgressProxy {
        task: tokio::spawn(accept(listener, allowed)),
    })
}

fn list(hosts: &[Egress]) -> String {
    hosts
        .iter()
        .map(Egress::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Accepts until dropped; the connections are tasks of this one, so they
/// end with it.
async fn accept(listener: TcpListener, allowed: Arc<Allowed>) {
    let mut connections = JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of descriptors: wait a little rather than spin.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        while connections.try_join_next().is_some() {}
        if connections.len() >= allowed.limits.connections {
            tracing::warn!(
                server.id = %allowed.server,
                "egress: a connection was refused: the server already has {} connections through its egress proxy",
                allowed.limits.connections
            );
            // A short answer into an empty socket buffer: it never waits.
            let _ = stream.try_write(&answer(
                "503 Service Unavailable",
                "too many connections through the egress proxy",
            ));
            continue;
        }
        connections.spawn(serve(stream, Arc::clone(&allowed)));
    }
}

/// One connection from the server: its request head, the decision, and the
/// bytes both ways.
async fn serve(mut stream: TcpStream, allowed: Arc<Allowed>) {
    let server = allowed.server.as_str();
    let limits = allowed.limits;
    let (request, rest) =
        match tokio::time::timeout(limits.head_time, read_head(&mut stream, limits.head_bytes))
            .await
        {
            Ok(Ok(Some((head, rest)))) => (parse(&head), rest),
            Ok(Ok(None)) => {
                refuse(
                    &mut stream,
                    server,
                    "?",
                    Refusal {
                        status: "431 Request Header Fields Too Large",
                        why: format!("its request head is over {} bytes", limits.head_bytes),
                    },
                )
                .await;
                return;
            }
            Ok(Err(_)) => return,
            Err(_) => {
                refuse(
                    &mut stream,
                    server,
                    "?",
                    Refusal {
                        status: "408 Request Timeout",
                        why: format!(
                            "its request head did not arrive within {} s",
                            limits.head_time.as_secs_f32()
                        ),
                    },
                )
                .await;
                return;
            }
        };
    let request = match request {
        Ok(request) => request,
        Err((asked, refusal)) => {
            refuse(&mut stream, server, &asked, refusal).await;
            return;
        }
    };
    let target = match &request {
        Request::Connect(target) | Request::Forward(target, _) => target.clone(),
    };
    if !allowed.hosts.contains(&target) {
        let refusal = Refusal {
            status: "403 Forbidden",
            why: format!(
                "it is not among the hosts the server may reach ({})",
                list(&allowed.hosts)
            ),
        };
        refuse(&mut stream, server, &target.to_string(), refusal).await;
        return;
    }
    let upstream = match tokio::time::timeout(limits.connect_time, open(&target)).await {
        Ok(Ok(upstream)) => upstream,
        Ok(Err(refusal)) => {
            refuse(&mut stream, server, &target.to_string(), refusal).await;
            return;
        }
        Err(_) => {
            let refusal = Refusal {
                status: "504 Gateway Timeout",
                why: format!(
                    "it did not answer within {} s",
                    limits.connect_time.as_secs_f32()
                ),
            };
            refuse(&mut stream, server, &target.to_string(), refusal).await;
            return;
        }
    };
    let mut upstream = upstream;
    let address = upstream
        .peer_addr()
        .map_or_else(|_| "?".to_owned(), |address| address.to_string());
    tracing::info!(
        server.id = %server,
        egress.host = %target,
        egress.address = %address,
        "egress: connection to {target} allowed (through {address})"
    );
    let opened = match request {
        Request::Connect(_) => {
            stream
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
        }
        Request::Forward(_, head) => upstream.write_all(&head).await,
    };
    if opened.is_err() || upstream.write_all(&rest).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut stream, &mut upstream).await;
}

/// Logs a refusal with the server's name and answers it.
async fn refuse(stream: &mut TcpStream, server: &str, asked: &str, refusal: Refusal) {
    tracing::warn!(
        server.id = %server,
        egress.host = %asked,
        "egress: connection to {asked} refused: {}",
        refusal.why
    );
    let _ = stream
        .write_all(&answer(
            refusal.status,
            &format!("hintgate refused {asked}: {}", refusal.why),
        ))
        .await;
    let _ = stream.shutdown().await;
}

/// A short HTTP answer that closes the connection.
fn answer(status: &str, text: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}\n",
        text.len() + 1
    )
    .into_bytes()
}

/// Reads up to the end of the request head (`\r\n\r\n`): the head and what
/// came after it; `None` when it is larger than `limit`.
async fn read_head(
    stream: &mut TcpStream,
    limit: usize,
) -> std::io::Result<Option<(Vec<u8>, Vec<u8>)>> {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0_u8; 2048];
    loop {
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let from = buffer.len().saturating_sub(3);
        buffer.extend_from_slice(chunk.get(..read).unwrap_or_default());
        if let Some(end) = find(buffer.get(from..).unwrap_or_default(), b"\r\n\r\n") {
            let end = from + end + 4;
            if end > limit {
                return Ok(None);
            }
            let rest = buffer.split_off(end);
            return Ok(Some((buffer, rest)));
        }
        if buffer.len() > limit {
            return Ok(None);
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// Reads a request head: what it asks for, or why it is refused (with what
/// it asked for, as far as it could be read).
fn parse(head: &[u8]) -> Result<Request, (String, Refusal)> {
    // What the server wrote is shown in the log and its answer printable
    // and short, whatever it holds (terminal escapes, line breaks).
    let bad = |asked: &str, why: &str| {
        (
            printable(asked),
            Refusal {
                status: "400 Bad Request",
                why: printable(why),
            },
        )
    };
    let Some(line_end) = find(head, b"\r\n") else {
        return Err(bad("?", "its request has no request line"));
    };
    let line = std::str::from_utf8(head.get(..line_end).unwrap_or_default())
        .map_err(|_| bad("?", "its request line is not text"))?;
    let mut words = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Err(bad("?", "its request line is not `METHOD target HTTP/1.x`"));
    };
    let shown = printable(target);
    if !version.starts_with("HTTP/1.") {
        return Err(bad(&shown, "it is not an HTTP/1 request"));
    }
    if method == "CONNECT" {
        let target = Egress::parse(target)
            .map_err(|why| bad(&shown, &format!("its CONNECT target {why}")))?;
        return Ok(Request::Connect(target));
    }
    let Some(rest) = target.strip_prefix("http://") else {
        let why = if target.starts_with("https://") {
            "an HTTPS request must go through CONNECT"
        } else {
            "it is not a proxy request (`CONNECT host:port`, or a URL starting with `http://`)"
        };
        return Err(bad(&shown, why));
    };
    let (authority, path) = match rest.find(['/', '?']) {
        Some(at) => (
            rest.get(..at).unwrap_or_default(),
            rest.get(at..).unwrap_or("/"),
        ),
        None => (rest, "/"),
    };
    if authority.contains('@') {
        return Err(bad(&shown, "its URL carries credentials"));
    }
    let with_port = if authority.ends_with(']') || !authority.contains(':') {
        format!("{authority}:80")
    } else {
        authority.to_owned()
    };
    let destination =
        Egress::parse(&with_port).map_err(|why| bad(&shown, &format!("its URL's host {why}")))?;
    let path = if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_owned()
    };
    // One request per connection: the host it goes to is the one this
    // connection was opened to, so the upstream is asked to close after
    // its answer (a client that would send the next request, to another
    // host, on the same connection opens a new one), and the headers meant
    // for the proxy stay here.
    let mut rewritten = format!("{method} {path} {version}\r\n").into_bytes();
    let headers = head.get(line_end + 2..).unwrap_or_default();
    for line in headers.split(|byte| *byte == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        let name = line.split(|byte| *byte == b':').next().unwrap_or_default();
        let hop = [
            &b"connection"[..],
            b"proxy-connection",
            b"keep-alive",
            b"proxy-authorization",
        ]
        .iter()
        .any(|hop| name.trim_ascii().eq_ignore_ascii_case(hop));
        if !hop {
            rewritten.extend_from_slice(line);
            rewritten.extend_from_slice(b"\r\n");
        }
    }
    rewritten.extend_from_slice(b"Connection: close\r\n\r\n");
    Ok(Request::Forward(destination, rewritten))
}

/// `text` with every control character replaced by `?`, cut at 300
/// characters.
fn printable(text: &str) -> String {
    text.chars()
        .take(300)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// Resolves `target` (here, not in the server) and opens a connection to
/// the first address that answers.
async fn open(target: &Egress) -> Result<TcpStream, Refusal> {
    let literal = target.host.parse::<IpAddr>().ok();
    let addresses: Vec<SocketAddr> = match literal {
        Some(address) => vec![SocketAddr::new(address, target.port)],
        None => {
            let resolved = tokio::net::lookup_host((target.host.as_str(), target.port))
                .await
                .map_err(|err| Refusal {
                    status: "502 Bad Gateway",
                    why: format!("its name does not resolve: {err}"),
                })?;
            usable(target, resolved.collect())?
        }
    };
    let mut last = None;
    for address in addresses {
        match TcpStream::connect(address).await {
            Ok(stream) => return Ok(stream),
            Err(err) => last = Some(format!("{address}: {err}")),
        }
    }
    Err(Refusal {
        status: "502 Bad Gateway",
        why: format!(
            "it cannot be reached ({})",
            last.unwrap_or_else(|| "no address".to_owned())
        ),
    })
}

/// The addresses a listed name may lead to, of those it resolved to: none
/// on this machine or link-local, unless the name is `localhost`.
fn usable(target: &Egress, all: Vec<SocketAddr>) -> Result<Vec<SocketAddr>, Refusal> {
    let local_name = target.host == "localhost";
    let usable: Vec<SocketAddr> = all
        .iter()
        .copied()
        .filter(|address| local_name || !is_local(address.ip()))
        .collect();
    if !usable.is_empty() {
        return Ok(usable);
    }
    let shown: Vec<String> = all.iter().map(|a| a.ip().to_string()).collect();
    Err(Refusal {
        status: "403 Forbidden",
        why: if shown.is_empty() {
            "its name resolves to no address".to_owned()
        } else {
            format!(
                "its name resolves to {} (this machine, a link-local or an unspecified address), which only a list naming that address or `localhost` allows",
                shown.join(", ")
            )
        },
    })
}

/// An address a listed name must not lead to: this machine (loopback), an
/// unspecified address (which reaches this machine too), a link-local one
/// (a cloud's metadata service), or a multicast or broadcast one.
fn is_local(address: IpAddr) -> bool {
    let address = match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 @ IpAddr::V4(_) => v4,
    };
    match address {
        IpAddr::V4(v4) => {
            v4.is_loopback()
                || v4.is_unspecified()
                || v4.is_link_local()
                || v4.is_multicast()
                || v4.is_broadcast()
        }
        IpAddr::V6(v6) => {
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || v6.is_unicast_link_local()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// The log, as the gateway writes it.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
        type Writer = Self;
        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    /// Runs `test` on a runtime of this thread, with the log captured.
    fn with_log<F: std::future::Future<Output = ()>>(test: impl FnOnce(Captured) -> F) {
        let captured = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(captured.clone())
            .with_ansi(false)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(test(captured));
    }

    /// A tiny HTTP "API" on 127.0.0.1: it answers every request with the
    /// request line it got.
    async fn api() -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let Ok(Some((head, _))) = read_head(&mut stream, 65536).await else {
                        return;
                    };
                    // A plain request's whole head; only the request line
                    // of one that came through a tunnel (`Host: x`).
                    let head = String::from_utf8_lossy(&head).into_owned();
                    let body = if head.contains("Host: x") {
                        format!("api saw: {}", head.lines().next().unwrap_or_default())
                    } else {
                        format!("api saw: {head}")
                    };
                    let _ = stream
                        .write_all(
                            format!(
                                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                                body.len()
                            )
                            .as_bytes(),
                        )
                        .await;
                });
            }
        });
        port
    }

    /// A port of this machine's loopback where nothing listens (bound, then
    /// closed).
    fn unused_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    fn hosts(list: &[String]) -> Vec<Egress> {
        list.iter()
            .map(|text| Egress::parse(text).unwrap())
            .collect()
    }

    /// A proxy for `gh` reaching `list`, on a listener of the test's.
    fn proxy(list: &[String], limits: Limits) -> (EgressProxy, SocketAddr) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        (
            spawn(listener, "gh", &hosts(list), limits).unwrap(),
            address,
        )
    }

    /// Sends `request` through the proxy and reads until it closes.
    async fn exchange(proxy: SocketAddr, request: &str) -> String {
        let mut stream = TcpStream::connect(proxy).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer).await;
        String::from_utf8_lossy(&answer).into_owned()
    }

    #[test]
    fn a_listed_host_is_tunnelled_and_the_attempt_is_logged_with_the_server() {
        with_log(|log| async move {
            let port = api().await;
            let (_proxy, address) = proxy(&[format!("localhost:{port}")], Limits::default());
            let answer = exchange(
                address,
                &format!("CONNECT LOCALHOST:{port} HTTP/1.1\r\nHost: localhost:{port}\r\n\r\nGET /v1/user HTTP/1.1\r\nHost: x\r\n\r\n"),
            )
            .await;
            assert!(
                answer.starts_with("HTTP/1.1 200 Connection established\r\n\r\n"),
                "{answer}"
            );
            assert!(
                answer.ends_with("api saw: GET /v1/user HTTP/1.1"),
                "{answer}"
            );
            let log = log.text();
            assert!(log.contains("server.id=gh"), "{log}");
            assert!(
                log.contains(&format!("egress: connection to localhost:{port} allowed")),
                "{log}"
            );
        });
    }

    #[test]
    fn a_plain_http_request_is_sent_on_in_origin_form() {
        with_log(|log| async move {
            let port = api().await;
            let (_proxy, address) = proxy(&[format!("localhost:{port}")], Limits::default());
            let answer = exchange(
                address,
                &format!("GET http://localhost:{port}/search?q=1 HTTP/1.1\r\nHost: localhost:{port}\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic c2VjcmV0\r\nConnection: keep-alive\r\nAccept: */*\r\n\r\n"),
            )
            .await;
            assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
            // In origin form, without the proxy's headers, closing after.
            assert!(
                answer.ends_with(&format!("api saw: GET /search?q=1 HTTP/1.1\r\nHost: localhost:{port}\r\nAccept: */*\r\nConnection: close\r\n\r\n")),
                "{answer}"
            );
            assert!(log.text().contains("allowed"));
        });
    }

    #[test]
    fn a_port_or_an_address_not_listed_is_refused_and_logged_with_the_server() {
        with_log(|log| async move {
            let port = api().await;
            let other = unused_port();
            let (_proxy, address) = proxy(&[format!("localhost:{port}")], Limits::default());
            for (request, asked) in [
                // Another port of a listed host.
                (
                    format!("CONNECT localhost:{other} HTTP/1.1\r\n\r\n"),
                    format!("localhost:{other}"),
                ),
                // The address the listed name resolves to: a name allows the
                // name, not its addresses.
                (
                    format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n"),
                    format!("127.0.0.1:{port}"),
                ),
                (
                    format!("CONNECT [::1]:{port} HTTP/1.1\r\n\r\n"),
                    format!("[::1]:{port}"),
                ),
                // A plain request to a host not listed.
                (
                    format!("GET http://example.com:{port}/ HTTP/1.1\r\n\r\n"),
                    format!("example.com:{port}"),
                ),
                // Another name for the same machine.
                (
                    format!("CONNECT localhost.:{other} HTTP/1.1\r\n\r\n"),
                    format!("localhost:{other}"),
                ),
            ] {
                let answer = exchange(address, &request).await;
                assert!(
                    answer.starts_with("HTTP/1.1 403 Forbidden"),
                    "{request}: {answer}"
                );
                assert!(!answer.contains("api saw"), "{answer}");
                let log = log.text();
                assert!(
                    log.contains(&format!("egress: connection to {asked} refused: it is not among the hosts the server may reach (localhost:{port})")),
                    "{request}: {log}"
                );
            }
            let log = log.text();
            assert!(
                log.lines()
                    .filter(|line| line.contains("refused"))
                    .all(|line| line.contains("server.id=gh")),
                "{log}"
            );
        });
    }

    #[test]
    fn requests_that_are_not_proxy_requests_are_refused() {
        with_log(|log| async move {
            let port = api().await;
            let (_proxy, address) = proxy(&[format!("localhost:{port}")], Limits::default());
            for request in [
                "GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_owned(),
                format!("GET https://localhost:{port}/ HTTP/1.1\r\n\r\n"),
                format!("GET http://user:pw@localhost:{port}/ HTTP/1.1\r\n\r\n"),
                format!("CONNECT localhost:{port} HTTP/2.0\r\n\r\n"),
                "CONNECT localhost HTTP/1.1\r\n\r\n".to_owned(),
                "CONNECT\r\n\r\n".to_owned(),
                "\u{1b}[2J\r\n\r\n".to_owned(),
                "CONNECT evil\u{1b}[2J.example:443 HTTP/1.1\r\n\r\n".to_owned(),
                "GET http://evil\u{7}.example/ HTTP/1.1\r\n\r\n".to_owned(),
            ] {
                let answer = exchange(address, &request).await;
                assert!(
                    answer.starts_with("HTTP/1.1 400 Bad Request"),
                    "{request:?}: {answer}"
                );
            }
            assert_eq!(log.text().matches("refused").count(), 9, "{}", log.text());
            assert!(!log.text().contains('\u{1b}'), "{}", log.text());
            assert!(!log.text().contains('\u{7}'), "{}", log.text());
        });
    }

    #[test]
    fn a_listed_host_that_does_not_answer_is_logged_and_answered_502() {
        with_log(|log| async move {
            let other = unused_port();
            let (_proxy, address) = proxy(&[format!("127.0.0.1:{other}")], Limits::default());
            let answer = exchange(
                address,
                &format!("CONNECT 127.0.0.1:{other} HTTP/1.1\r\n\r\n"),
            )
            .await;
            assert!(answer.starts_with("HTTP/1.1 502 Bad Gateway"), "{answer}");
            assert!(log.text().contains("cannot be reached"), "{}", log.text());
        });
    }

    #[test]
    fn a_slow_or_huge_request_head_is_cut_off() {
        with_log(|log| async move {
            let port = api().await;
            let limits = Limits {
                head_time: Duration::from_millis(200),
                head_bytes: 1024,
                ..Limits::default()
            };
            let (_proxy, address) = proxy(&[format!("localhost:{port}")], limits);
            // Slowloris: a head that never ends.
            let answer = exchange(address, "CONNECT localhost:1 HTTP/1.1\r\nX-Slow: 1\r\n").await;
            assert!(
                answer.starts_with("HTTP/1.1 408 Request Timeout"),
                "{answer}"
            );
            // A head over the limit, whole or without its end.
            let huge = format!(
                "CONNECT localhost:{port} HTTP/1.1\r\nX-Big: {}\r\n\r\n",
                "a".repeat(4096)
            );
            let answer = exchange(address, &huge).await;
            assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
            assert!(log.text().contains("did not arrive within"));
            assert!(log.text().contains("is over 1024 bytes"));
        });
    }

    #[test]
    fn connections_beyond_the_limit_are_refused_and_logged() {
        with_log(|log| async move {
            let port = api().await;
            let limits = Limits {
                connections: 2,
                ..Limits::default()
            };
            let (proxy, address) = proxy(&[format!("localhost:{port}")], limits);
            // Two connections that hold their slot (no head yet).
            let mut held = Vec::new();
            for _ in 0..2 {
                let mut stream = TcpStream::connect(address).await.unwrap();
                stream.write_all(b"CONNECT").await.unwrap();
                held.push(stream);
            }
            // The proxy has accepted both once it answers a third.
            let mut third = Vec::new();
            loop {
                let answer = exchange(address, "").await;
                if answer.starts_with("HTTP/1.1 503") {
                    third.push(answer);
                    break;
                }
            }
            assert!(
                log.text().contains("already has 2 connections"),
                "{}",
                log.text()
            );
            // Dropping the proxy ends every connection through it.
            drop(proxy);
            for mut stream in held {
                let mut rest = Vec::new();
                let read = stream.read_to_end(&mut rest).await;
                assert!(read.is_err() || rest.is_empty(), "{rest:?}");
            }
        });
    }

    #[test]
    fn a_name_rebound_to_this_machine_is_refused_and_its_public_addresses_kept() {
        let name = Egress::parse("api.example.com:443").unwrap();
        let at = |text: &str| SocketAddr::new(text.parse().unwrap(), 443);
        // DNS rebinding: the name now answers with this machine's loopback
        // or a metadata address; nothing is connected to.
        for rebound in [
            vec![at("127.0.0.1")],
            vec![at("169.254.169.254"), at("::1")],
            vec![at("::ffff:127.0.0.1")],
        ] {
            let refusal = usable(&name, rebound).unwrap_err();
            assert_eq!(refusal.status, "403 Forbidden");
            assert!(refusal.why.contains("this machine"), "{}", refusal.why);
        }
        assert!(
            usable(&name, Vec::new())
                .unwrap_err()
                .why
                .contains("no address")
        );
        // Mixed answers: only the addresses off this machine are tried.
        assert_eq!(
            usable(&name, vec![at("127.0.0.1"), at("140.82.112.6")]).unwrap(),
            vec![at("140.82.112.6")]
        );
        // `localhost`, named as such, is this machine by the user's choice.
        let localhost = Egress::parse("localhost:443").unwrap();
        assert_eq!(
            usable(&localhost, vec![at("127.0.0.1")]).unwrap(),
            vec![at("127.0.0.1")]
        );
    }

    #[test]
    fn names_may_not_lead_to_this_machine_or_link_local_addresses() {
        for local in [
            "127.0.0.1",
            "127.1.2.3",
            "0.0.0.0",
            "169.254.169.254",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "::ffff:127.0.0.1",
            "ff02::1",
        ] {
            assert!(is_local(local.parse().unwrap()), "{local}");
        }
        for remote in ["10.0.0.5", "192.168.1.1", "140.82.112.6", "2001:db8::1"] {
            assert!(!is_local(remote.parse().unwrap()), "{remote}");
        }
    }
}
