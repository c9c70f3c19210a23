//! How the gateway reaches a server: a child process on stdio, a Streamable
//! HTTP endpoint, or any pair of byte streams, all as one stream of lines.
//!
//! A [`Connector`] makes a [`Link`] for a configured server. The
//! [`SystemConnector`] starts child processes and reaches URLs; tests give
//! the gateway a connector of in-memory pipes ([`Link::streams`]), so the
//! gateway runs in-process against upstreams the test drives.
//!
//! Each link has a reader task (lines into the gateway's event channel,
//! tagged with the server's index and the link's generation) and a writer
//! task (lines from a channel, written in batches). What waits to be written
//! is counted ([`LinkTarget::queue`]), so the gateway can see a server that
//! does not read its input and stop sending to it. A child process is
//! killed when its [`Process`] is dropped, so nothing outlives the gateway.
//!
//! A server with a `[sandbox]` table is started confined
//! ([`hintgate_sandbox`]): a clean environment, its own process group
//! (killed with it), a private home removed when it stops, and what the
//! kernel enforces; its [`Link::sandbox`] report says what holds.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;

use hintgate_policy::config::{SandboxConfig, ServerConfig, Transport};
use hintgate_sandbox::{Confinement, Kernel, Plan, Report};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use crate::conn::{LineRead, QueueGauge, read_line, write_counted_lines};
use crate::event::{Event, EventSender, UpstreamEvent};

/// Where a link delivers what it reads (the gateway's event channel, with
/// the server's index and the link's generation), and how much it may hold
/// for the server.
#[derive(Debug, Clone)]
pub struct LinkTarget {
    /// The server's index in the configuration.
    pub server: usize,
    /// Which start of that server.
    pub generation: u64,
    /// The largest line accepted from the server.
    pub max_line: usize,
    /// The gateway's event channel.
    pub events: EventSender,
    /// What waits for the server, counted as lines are sent and taken off
    /// as they are written (for an HTTP server: as their POST is
    /// answered). Whoever sends keeps it bounded.
    pub queue: Arc<QueueGauge>,
}

/// Makes links to servers.
pub trait Connector: Send + Sync + std::fmt::Debug {
    /// Connects to `server` (starts it, for a process).
    ///
    /// # Errors
    ///
    /// Why the server cannot be reached, in words for the host and the log.
    fn connect(&self, server: &ServerConfig, target: LinkTarget) -> Result<Link, String>;
}

/// The connector of `hintgate run`: child processes and HTTP.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemConnector;

/// How the gateway reaches one server.
#[derive(Debug)]
pub enum Link {
    /// A child process on stdio.
    Stdio(Process),
    /// A Streamable HTTP endpoint.
    Http(crate::upstream_http::HttpLink),
    /// A pair of streams (tests).
    Streams(StreamLink),
}

/// A running upstream process.
#[derive(Debug)]
pub struct Process {
    lines: StreamLink,
    child: Child,
    /// Its sandbox, when it has one: dropped after the child, it kills the
    /// process group and removes the private home.
    confinement: Option<Box<Sandboxed>>,
}

/// A running server's sandbox, and the egress proxy of a sandbox with a
/// list of hosts (stopped first, then the sandbox).
#[derive(Debug)]
struct Sandboxed {
    /// Held only to be dropped (fields drop in order: the proxy first).
    _egress: Option<crate::egress::EgressProxy>,
    confinement: Confinement,
}

/// Lines over a pair of byte streams.
#[derive(Debug)]
pub struct StreamLink {
    tx: mpsc::UnboundedSender<String>,
    /// What waits in `tx` and the writer's buffer.
    queue: Arc<QueueGauge>,
}

/// What to start.
#[derive(Debug, Clone)]
pub struct Spawn<'a> {
    /// The program.
    pub command: &'a str,
    /// Its arguments.
    pub args: &'a [String],
    /// Variables added to its environment.
    pub env: &'a BTreeMap<String, String>,
    /// The server's configured name, for logs.
    pub name: &'a str,
    /// The sandbox to start it in.
    pub sandbox: Option<&'a SandboxConfig>,
}

/// Why a server could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpawnError {
    /// The program could not be run.
    #[error("cannot start `{command}`: {source}")]
    Exec {
        /// The program.
        command: String,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// A pipe was not set up.
    #[error("cannot connect to `{0}`: no pipe")]
    NoPipe(String),
    /// The egress proxy of a sandbox with a list of hosts cannot start.
    #[error("cannot start the egress proxy of `{name}`: {source}")]
    Egress {
        /// The server's configured name.
        name: String,
        /// Why.
        source: std::io::Error,
    },
    /// The sandbox cannot be set up (or the kernel cannot enforce it).
    #[error("cannot start `{name}` in its sandbox: {source}")]
    Sandbox {
        /// The server's configured name.
        name: String,
        /// Why.
        source: hintgate_sandbox::SandboxError,
    },
}

// === impl SystemConnector ===

impl Connector for SystemConnector {
    fn connect(&self, server: &ServerConfig, target: LinkTarget) -> Result<Link, String> {
        match &server.transport {
            Transport::Stdio { command, args, env } => Process::spawn(
                &Spawn {
                    command,
                    args,
                    env,
                    name: &server.name,
                    sandbox: server.sandbox.as_ref(),
                },
                target,
            )
            .map(Link::Stdio)
            .map_err(|err| err.to_string()),
            Transport::Http { url, headers } => {
                crate::upstream_http::HttpLink::connect(url, headers, target)
                    .map(Link::Http)
                    .map_err(|err| err.to_string())
            }
        }
    }
}

// === impl Link ===

impl Link {
    /// A link over a pair of streams: what the server writes is read from
    /// `from_server`, what the gateway sends is written to `to_server`.
    pub fn streams<R, W>(from_server: R, to_server: W, target: LinkTarget) -> Self
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        Self::Streams(StreamLink::new(from_server, to_server, target))
    }

    /// Sends one line (one message) to the server, counted in the link's
    /// queue until it is written.
    pub fn send(&self, line: String) {
        match self {
            Self::Stdio(process) => process.lines.send(line),
            Self::Http(link) => link.send(line),
            Self::Streams(link) => link.send(line),
        }
    }

    /// Stops the server or ends its session.
    pub async fn stop(self) {
        match self {
            Self::Stdio(process) => process.stop().await,
            Self::Http(link) => link.stop().await,
            // Dropping the sender ends the writer, which closes the stream.
            Self::Streams(link) => drop(link),
        }
    }

    /// What the server's running sandbox enforces, for a sandboxed child
    /// process.
    pub fn sandbox(&self) -> Option<&Report> {
        match self {
            Self::Stdio(process) => process
                .confinement
                .as_deref()
                .map(|sandboxed| sandboxed.confinement.report()),
            Self::Http(_) | Self::Streams(_) => None,
        }
    }

    /// The process id, for a child process.
    pub fn pid(&self) -> Option<u32> {
        match self {
            Self::Stdio(process) => process.child.id(),
            Self::Http(_) | Self::Streams(_) => None,
        }
    }
}

// === impl StreamLink ===

impl StreamLink {
    fn new<R, W>(from_server: R, to_server: W, target: LinkTarget) -> Self
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (tx, rx) = mpsc::unbounded_channel();
        let queue = Arc::clone(&target.queue);
        tokio::spawn(write_counted_lines(
            to_server,
            rx,
            Arc::clone(&queue),
            || async {},
        ));
        tokio::spawn(read_lines(from_server, target));
        Self { tx, queue }
    }

    fn send(&self, line: String) {
        let len = line.len();
        self.queue.queued(len);
        // A closed channel means the server is gone; its reader reports that.
        if self.tx.send(line).is_err() {
            self.queue.withdrawn(len);
        }
    }
}

// === impl Process ===

impl Process {
    /// Starts the server and its reader and writer tasks.
    ///
    /// # Errors
    ///
    /// [`SpawnError`] when the program cannot be run.
    pub fn spawn(spec: &Spawn<'_>, target: LinkTarget) -> Result<Self, SpawnError> {
        let (mut command, mut confinement) = match spec.sandbox {
            Some(sandbox) => {
                let sandboxed = |source| SpawnError::Sandbox {
                    name: spec.name.to_owned(),
                    source,
                };
                let inherited = std::env::vars().collect();
                let plan = Plan::new(spec.command, spec.args, spec.env, sandbox, &inherited)
                    .map_err(sandboxed)?;
                let (command, confinement) =
                    hintgate_sandbox::command(&plan, Kernel::current()).map_err(sandboxed)?;
                (Command::from(command), Some(confinement))
            }
            None => {
                let mut command = Command::new(spec.command);
                command.args(spec.args).envs(spec.env);
                (command, None)
            }
        };
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|source| SpawnError::Exec {
            command: spec.command.to_owned(),
            source,
        })?;
        let mut egress = None;
        if let Some(confinement) = &mut confinement {
            confinement.started(child.id());
            // `network = ["host:port", ...]`: the listener the sandbox made
            // in the server's namespace, served here.
            let failed = |source| SpawnError::Egress {
                name: spec.name.to_owned(),
                source,
            };
            if let Some(listener) = confinement.egress_listener().map_err(failed)? {
                let hosts = spec.sandbox.map_or(&[][..], |sandbox| &sandbox.egress[..]);
                egress = Some(
                    crate::egress::spawn(
                        listener,
                        spec.name,
                        hosts,
                        crate::egress::Limits::default(),
                    )
                    .map_err(failed)?,
                );
            }
        }
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| SpawnError::NoPipe(spec.name.to_owned()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| SpawnError::NoPipe(spec.name.to_owned()))?;
        let stderr = child
            .stderr
            .take()
            .ok_or_else(|| SpawnError::NoPipe(spec.name.to_owned()))?;
        let lines = StreamLink::new(stdout, stdin, target);
        let name = spec.name.to_owned();
        tokio::spawn(async move {
            // A server's stderr is its log: pass it on to ours, line by line.
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::info!(server.id = %name, "{line}");
            }
        });
        Ok(Self {
            lines,
            child,
            confinement: confinement.map(|confinement| {
                Box::new(Sandboxed {
                    _egress: egress,
                    confinement,
                })
            }),
        })
    }

    /// Stops the server the way the spec asks: close its input, give it a
    /// moment to exit, then kill it.
    pub async fn stop(self) {
        let Self {
            lines,
            mut child,
            confinement,
        } = self;
        drop(lines);
        let exited = tokio::time::timeout(std::time::Duration::from_secs(2), child.wait()).await;
        if exited.is_err() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
        // Whatever the server left running in its group goes with it, and
        // so does its way out.
        drop(confinement);
    }
}

async fn read_lines<R: AsyncRead + Unpin>(from_server: R, target: LinkTarget) {
    let LinkTarget {
        server,
        generation,
        max_line,
        events,
        queue: _,
    } = target;
    let mut reader = BufReader::with_capacity(64 * 1024, from_server);
    let mut buf = Vec::with_capacity(4096);
    loop {
        // While the loop has more lines waiting than it holds, the server's
        // output stays in its pipe: the kernel stops the server.
        events.room().await;
        let event = match read_line(&mut reader, &mut buf, max_line).await {
            // A copy of the line, so the buffer keeps its size for the next.
            Ok(LineRead::Line) => match std::str::from_utf8(&buf).map(str::to_owned) {
                Ok(line) if line.trim().is_empty() => continue,
                Ok(line) => UpstreamEvent::Line(line),
                Err(_) => UpstreamEvent::Broken("wrote bytes that are not UTF-8".to_owned()),
            },
            Ok(LineRead::TooLong) => UpstreamEvent::Broken(format!(
                "sent a message larger than the limit of {max_line} bytes"
            )),
            Ok(LineRead::Eof) => UpstreamEvent::Closed("closed its output".to_owned()),
            Err(err) => UpstreamEvent::Closed(format!("output failed: {err}")),
        };
        let last = !matches!(event, UpstreamEvent::Line(_));
        if events
            .send(Event::Upstream {
                server,
                generation,
                event,
            })
            .await
            .is_err()
            || last
        {
            return;
        }
    }
}
