//! What the HTTP benchmarks share: a raw HTTP/1.1 host client ([`Conn`]),
//! a minimal Streamable HTTP MCP server in a process of its own, the
//! gateway started as `hintgate run --listen`, and its resident set.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader as AsyncBufReader};
use tokio::net::{TcpListener, TcpStream};

/// How long the upstream's `slow` tool takes.
pub const SLOW: Duration = Duration::from_millis(30);

/// One HTTP/1.1 connection with keep-alive, enough for JSON-RPC over POST
/// and for reading the event streams the gateway answers with.
pub struct Conn {
    /// The connection, made at the first request (a connection that sends
    /// nothing is one the gateway may close).
    stream: Option<AsyncBufReader<TcpStream>>,
    addr: SocketAddr,
    host: String,
    /// The session the requests name (`Mcp-Session-Id`), once known.
    pub session: Option<String>,
    /// Bytes of an event stream's body read but not yet taken as events.
    events: Vec<u8>,
}

/// The head of an answer.
pub struct Head {
    /// Its status code.
    pub status: u16,
    /// Its `Content-Length`, if any.
    length: Option<usize>,
    /// Its body comes in chunks.
    chunked: bool,
    /// Its `Content-Type` is `text/event-stream`.
    pub event_stream: bool,
}

/// One server-sent event.
pub struct Event {
    /// Its `id:`, if any.
    pub id: Option<String>,
    /// Its `data:` (empty for a priming event).
    pub data: String,
}

impl Conn {
    /// A connection to `addr`, made when the first request goes.
    pub async fn open(addr: SocketAddr) -> Self {
        Self {
            stream: None,
            addr,
            host: addr.to_string(),
            session: None,
            events: Vec::new(),
        }
    }

    /// The connection, made now if not yet.
    async fn io(&mut self) -> std::io::Result<&mut AsyncBufReader<TcpStream>> {
        if self.stream.is_none() {
            let stream = TcpStream::connect(self.addr).await?;
            stream.set_nodelay(true)?;
            self.stream = Some(AsyncBufReader::new(stream));
        }
        self.stream
            .as_mut()
            .ok_or_else(|| std::io::Error::other("no connection"))
    }

    /// Another connection of the same session.
    pub async fn another(&self, addr: SocketAddr) -> Self {
        let mut conn = Self::open(addr).await;
        conn.session.clone_from(&self.session);
        conn
    }

    /// Sends a request: `method`, `headers` (each ending in CRLF), `body`.
    async fn send(&mut self, method: &str, headers: &str, body: &str) -> std::io::Result<()> {
        let session = self
            .session
            .as_ref()
            .map(|id| format!("Mcp-Session-Id: {id}\r\n"))
            .unwrap_or_default();
        let bearer = TOKEN
            .get()
            .map(|token| format!("Authorization: Bearer {token}\r\n"))
            .unwrap_or_default();
        let request = format!(
            "{method} /mcp HTTP/1.1\r\nHost: {}\r\n{headers}{session}{bearer}Content-Length: {}\r\n\r\n{body}",
            self.host,
            body.len()
        );
        self.io()
            .await?
            .get_mut()
            .write_all(request.as_bytes())
            .await
    }

    /// Reads an answer's status line and headers.
    async fn head(&mut self) -> std::io::Result<Head> {
        let mut status = String::new();
        if self.io().await?.read_line(&mut status).await? == 0 {
            return Err(std::io::Error::other("the connection closed"));
        }
        let status = status
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("a status line: {status:?}")))?;
        let mut head = Head {
            status,
            length: None,
            chunked: false,
            event_stream: false,
        };
        loop {
            let mut line = String::new();
            self.io().await?.read_line(&mut line).await?;
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            match name.to_ascii_lowercase().as_str() {
                "content-length" => head.length = value.parse().ok(),
                "transfer-encoding" => head.chunked = value.eq_ignore_ascii_case("chunked"),
                "content-type" => head.event_stream = value.starts_with("text/event-stream"),
                "mcp-session-id" => self.session = Some(value.to_owned()),
                _ => {}
            }
        }
        self.events.clear();
        Ok(head)
    }

    /// One chunk of a chunked body; `None` after the last.
    async fn chunk(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        let mut size = String::new();
        self.io().await?.read_line(&mut size).await?;
        let size = usize::from_str_radix(size.trim().split(';').next().unwrap_or(""), 16)
            .map_err(|_| std::io::Error::other(format!("a chunk size: {size:?}")))?;
        let mut chunk = vec![0; size + 2];
        self.io().await?.read_exact(&mut chunk).await?;
        chunk.truncate(size);
        Ok((size > 0).then_some(chunk))
    }

    /// The whole body of an answer whose head was `head`.
    pub async fn body(&mut self, head: &Head) -> std::io::Result<String> {
        let mut body = Vec::new();
        if head.chunked {
            while let Some(chunk) = self.chunk().await? {
                body.extend(chunk);
            }
        } else {
            body.resize(head.length.unwrap_or(0), 0);
            self.io().await?.read_exact(&mut body).await?;
        }
        String::from_utf8(body).map_err(std::io::Error::other)
    }

    /// The next event of the event stream being read; `None` at its end.
    pub async fn next_event(&mut self) -> std::io::Result<Option<Event>> {
        loop {
            if let Some(end) = self.events.windows(2).position(|pair| pair == b"\n\n") {
                let block: Vec<u8> = self.events.drain(..end + 2).collect();
                let block = String::from_utf8(block).map_err(std::io::Error::other)?;
                let mut event = Event {
                    id: None,
                    data: String::new(),
                };
                let mut any = false;
                for line in block.lines() {
                    if let Some(id) = line.strip_prefix("id:") {
                        event.id = Some(id.trim().to_owned());
                        any = true;
                    } else if let Some(data) = line.strip_prefix("data:") {
                        event.data.push_str(data.trim());
                        any = true;
                    }
                }
                // A comment alone (`: open`) is no event.
                if any {
                    return Ok(Some(event));
                }
                continue;
            }
            match self.chunk().await? {
                Some(chunk) => self.events.extend(chunk),
                None => return Ok(None),
            }
        }
    }

    /// POSTs `body`; the answer's head (its body is read next).
    pub async fn post_head(&mut self, body: &str) -> std::io::Result<Head> {
        self.send(
            "POST",
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\n",
            body,
        )
        .await?;
        self.head().await
    }

    /// POSTs `body`; the answer's status and body.
    pub async fn try_post(&mut self, body: &str) -> std::io::Result<(u16, String)> {
        let head = self.post_head(body).await?;
        let body = self.body(&head).await?;
        Ok((head.status, body))
    }

    /// POSTs `body`; the answer's body (`None` for 202).
    pub async fn post(&mut self, body: &str) -> Option<String> {
        let (status, body) = self.try_post(body).await.unwrap();
        assert!(status == 200 || status == 202, "{status}: {body}");
        (!body.is_empty()).then_some(body)
    }

    /// GET with `Last-Event-ID: last`: the resumed stream's head (its
    /// events are read next).
    pub async fn resume(&mut self, last: &str) -> std::io::Result<Head> {
        let headers = format!(
            "Accept: text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\nLast-Event-ID: {last}\r\n"
        );
        self.send("GET", &headers, "").await?;
        self.head().await
    }

    /// DELETE: ends the session; the answer's status.
    pub async fn delete(&mut self) -> std::io::Result<u16> {
        self.send("DELETE", "MCP-Protocol-Version: 2025-11-25\r\n", "")
            .await?;
        let head = self.head().await?;
        self.body(&head).await?;
        Ok(head.status)
    }

    /// `initialize` and `notifications/initialized`.
    pub async fn start(addr: SocketAddr) -> Self {
        let mut conn = Self::open(addr).await;
        conn.post(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"load","version":"0"}}}"#).await;
        conn.post(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
        conn
    }
}

/// The upstream: answers `echo` (and everything else) at once, as JSON;
/// `slow` after [`SLOW`], as JSON, or, when the call carries a progress
/// token, as an event stream: a progress notification at once, then the
/// result (and the connection closes, so nothing needs chunks).
async fn upstream(listener: TcpListener) {
    loop {
        let (stream, _) = listener.accept().await.unwrap();
        stream.set_nodelay(true).unwrap();
        tokio::spawn(async move {
            let mut stream = AsyncBufReader::new(stream);
            loop {
                let mut line = String::new();
                if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
                    return;
                }
                let mut length = 0;
                loop {
                    let mut header = String::new();
                    if stream.read_line(&mut header).await.unwrap_or(0) == 0 {
                        return;
                    }
                    let header = header.trim_end();
                    if header.is_empty() {
                        break;
                    }
                    if let Some((name, value)) = header.split_once(':')
                        && name.eq_ignore_ascii_case("content-length")
                    {
                        length = value.trim().parse().unwrap();
                    }
                }
                let mut body = vec![0; length];
                if stream.read_exact(&mut body).await.is_err() {
                    return;
                }
                if !line.starts_with("POST ") {
                    // No GET stream, and nothing to end on DELETE.
                    let answer = "HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n";
                    if stream.get_mut().write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                    continue;
                }
                let message: serde_json::Value = serde_json::from_slice(&body).unwrap();
                let id = message.get("id").map(ToString::to_string);
                let slow = message["method"] == "tools/call" && message["params"]["name"] == "slow";
                let token = message["params"]["_meta"]
                    .get("progressToken")
                    .map(ToString::to_string);
                let result = match message["method"].as_str().unwrap_or("") {
                    "initialize" => r#"{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"load","version":"1"}}"#.to_owned(),
                    "tools/list" => r#"{"tools":[{"name":"echo","description":"Echoes.","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true,"destructiveHint":false,"idempotentHint":true,"openWorldHint":false}},{"name":"slow","description":"Answers after a while.","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true,"destructiveHint":false,"idempotentHint":true,"openWorldHint":false}}]}"#.to_owned(),
                    "tools/call" => r#"{"content":[{"type":"text","text":"ok"}],"isError":false}"#.to_owned(),
                    _ => "{}".to_owned(),
                };
                let Some(id) = id else {
                    let answer = "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n";
                    if stream.get_mut().write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                    continue;
                };
                let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#);
                if slow && let Some(token) = token {
                    let progress = format!(
                        r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":{token},"progress":1,"total":2}}}}"#
                    );
                    let opening = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\nevent: message\ndata: {progress}\n\n"
                    );
                    if stream
                        .get_mut()
                        .write_all(opening.as_bytes())
                        .await
                        .is_err()
                    {
                        return;
                    }
                    tokio::time::sleep(SLOW).await;
                    let last = format!("event: message\ndata: {body}\n\n");
                    let _ = stream.get_mut().write_all(last.as_bytes()).await;
                    return;
                }
                if slow {
                    tokio::time::sleep(SLOW).await;
                }
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nMcp-Session-Id: s1\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                if stream
                    .get_mut()
                    .write_all(response.as_bytes())
                    .await
                    .is_err()
                {
                    return;
                }
            }
        });
    }
}

/// The resident set of process `pid`, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// The bearer token every [`Conn`] sends, once [`gateway`] made one.
static TOKEN: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The `hintgate` program the benchmarks run: this build's, or another
/// build's (`HINTGATE_BENCH_GATEWAY=PATH`), to compare builds.
pub fn program() -> std::ffi::OsString {
    std::env::var_os("HINTGATE_BENCH_GATEWAY")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_hintgate").into())
}

/// `hintgate run --listen` in front of `url`, the address it serves, and
/// what it says on stderr after that (each line also goes to this
/// program's stderr), once it has exited.
///
/// With `HINTGATE_BENCH_TOKENS` set, hosts need a bearer token, as on a
/// team's gateway: one of scope `write` is added to the state directory
/// first, and every request of a [`Conn`] sends it (to the server and the
/// relay too, which ignore it).
pub fn gateway(
    url: &str,
    state: &std::path::Path,
) -> (Child, SocketAddr, std::thread::JoinHandle<Vec<String>>) {
    let tokens = std::env::var_os("HINTGATE_BENCH_TOKENS").is_some();
    if tokens {
        let added = Command::new(program())
            .args(["token", "add", "bench", "--scope", "write"])
            .env("HINTGATE_STATE_DIR", state)
            .stderr(Stdio::null())
            .output()
            .unwrap();
        assert!(
            added.status.success(),
            "the bench's token could not be added"
        );
        let token = String::from_utf8(added.stdout).unwrap().trim().to_owned();
        TOKEN.set(token).unwrap();
    }
    let auth = if tokens { None } else { Some("--no-auth") };
    let mut child = Command::new(program())
        .args(["run", "--listen", "127.0.0.1:0"])
        .args(auth)
        .args(["--trust", "trusted", "--url", url])
        .env("RUST_LOG", "warn")
        .env("HINTGATE_STATE_DIR", state)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut addr = None;
    let mut line = String::new();
    while stderr.read_line(&mut line).unwrap() > 0 {
        if let Some(url) = line
            .trim_end()
            .strip_prefix("hintgate: serving MCP at http://")
        {
            addr = Some(url.trim_end_matches("/mcp").parse().unwrap());
            break;
        }
        line.clear();
    }
    // What the gateway says later goes on to this program's stderr.
    let said = std::thread::spawn(move || {
        let mut said = Vec::new();
        for line in stderr.lines().map_while(Result::ok) {
            eprintln!("gateway: {line}");
            said.push(line);
        }
        said
    });
    (
        child,
        addr.expect("the gateway announces its address"),
        said,
    )
}

/// The upstream in a process of its own, as a real server is: a host and
/// its server never share a thread, so the direct run pays the same
/// wake-ups between processes that every hop through the gateway pays.
/// Prints the address it serves, then serves until killed.
pub fn serve_upstream() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        println!("{}", listener.local_addr().unwrap());
        upstream(listener).await;
    });
}

/// Starts this program as a child process with `args` (one of the serving
/// modes); the child and the address it serves.
pub fn serving_process(args: &[&str]) -> (Child, SocketAddr) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    (child, line.trim().parse().unwrap())
}
