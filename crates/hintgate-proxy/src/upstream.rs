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
//! A child process's standard error goes to the gateway's log, line by
//! line, and its last lines are kept ([`crate::tail`]): when the process
//! closes its output, the link waits a moment for its exit status and its
//! last words, and the reason the gateway gets says how it ended and what
//! it wrote last (for a confined one, also what its sandbox denied that
//! those lines name), never only "closed its output".
//!
//! A server with a `[sandbox]` table is started confined
//! ([`hintgate_sandbox`]): a clean environment, its own process group
//! (killed with it), a private home removed when it stops, and what the
//! kernel enforces; its [`Link::sandbox`] report says what holds.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use hintgate_policy::config::{SandboxConfig, ServerConfig, Transport};
use hintgate_sandbox::{Confinement, Kernel, Plan, Report};
use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot, watch};

use crate::conn::{LineRead, QueueGauge, read_line, write_counted_lines};
use crate::event::{Event, UpstreamEvent};
use crate::frame::ServerLine;
use crate::tail::{StderrLine, StderrTail, describe_exit, read_stderr_line};

pub use crate::event::LinkTarget;

/// How long a server that closed its output is given to exit and to finish
/// its standard error before the gateway is told, without them.
pub const END_GRACE: Duration = Duration::from_secs(2);

/// Makes links to servers.
pub trait Connector: Send + Sync + std::fmt::Debug {
    /// Connects to `server` (starts it, for a process).
    ///
    /// # Errors
    ///
    /// Why the server cannot be reached, in words for the host and the log.
    fn connect(&self, server: &ServerConfig, target: LinkTarget) -> Result<Link, String>;

    /// What `server`'s start needs before [`Connector::connect`]: an
    /// install of its launcher's package where its sandbox table says
    /// `prepare = "on-start"` (see [`crate::prepare`]). Nothing, unless the
    /// connector starts processes.
    fn prepare(&self, server: &ServerConfig) -> crate::prepare::Needed {
        let _ = server;
        crate::prepare::Needed::Nothing
    }
}

/// The connector of `hintgate run`: child processes and HTTP.
#[derive(Debug, Default, Clone)]
pub struct SystemConnector {
    /// The store that keeps the OAuth logins of URL servers behind OAuth.
    store: Option<Arc<dyn hintgate_store::Store>>,
}

impl SystemConnector {
    /// The connector of a gateway whose OAuth logins are kept in `store`.
    #[must_use]
    pub fn with_store(store: Option<Arc<dyn hintgate_store::Store>>) -> Self {
        Self { store }
    }
}

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
    pid: Option<u32>,
    /// Sending on it, or dropping it, kills the child (its waiter does).
    kill: Option<oneshot::Sender<()>>,
    /// How the child ended, once it has: `Some(None)` when its status could
    /// not be read.
    exited: watch::Receiver<Option<Option<ExitStatus>>>,
    /// The last lines of its standard error.
    tail: Arc<StderrTail>,
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

/// What a process link waits for, and says, when the process closes its
/// output: its exit status, the end of its standard error, and for a
/// confined one what the sandbox denied that those lines name.
#[derive(Debug)]
struct Ending {
    exited: watch::Receiver<Option<Option<ExitStatus>>>,
    stderr_done: watch::Receiver<bool>,
    tail: Arc<StderrTail>,
    confined: Option<Confined>,
}

/// What is known of a confined process's sandbox, to say what it denied.
#[derive(Debug)]
struct Confined {
    plan: Plan,
    home: Option<PathBuf>,
    /// Its PID namespace's supervisor reports a signal as 128 + its number.
    supervisor: bool,
    landlock_abi: u32,
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
    fn prepare(&self, server: &ServerConfig) -> crate::prepare::Needed {
        crate::prepare::needed(server)
    }

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
                let auth = server.oauth.as_ref().map(|oauth| {
                    Arc::new(crate::upstream_oauth::OAuthBearer::new(
                        &server.name,
                        url,
                        oauth,
                        self.store.clone(),
                    ))
                });
                crate::upstream_http::HttpLink::connect_with(url, headers, target, auth)
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
        Self::Streams(StreamLink::new(from_server, to_server, target, None))
    }

    /// Sends one line (one message) to the server, counted in the link's
    /// queue until it is written.
    pub fn send(&self, line: String) {
        self.send_as(line, None);
    }

    /// Sends one line on behalf of a `--listen` principal (`None`: the
    /// gateway's own, or a stdio host's): an HTTP server behind OAuth gets
    /// it with that principal's own login; to others it is [`Link::send`].
    pub fn send_as(&self, line: String, principal: Option<Arc<str>>) {
        match self {
            Self::Stdio(process) => process.lines.send(line),
            Self::Http(link) => link.send_as(line, principal),
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

    /// For a server behind OAuth, the scopes of the token it was sent last
    /// (as granted; never the token).
    pub fn token_scope(&self, principal: &str) -> Option<String> {
        match self {
            Self::Http(link) => link.token_scope(principal),
            Self::Stdio(_) | Self::Streams(_) => None,
        }
    }

    /// The process id, for a child process.
    pub fn pid(&self) -> Option<u32> {
        match self {
            Self::Stdio(process) => process.pid,
            Self::Http(_) | Self::Streams(_) => None,
        }
    }

    /// For a child process that wrote to its standard error, its last
    /// lines there as a clause for a reason (see [`StderrTail::said`]).
    pub fn stderr_clause(&self) -> Option<String> {
        match self {
            Self::Stdio(process) => Some(process.tail.said()),
            Self::Http(_) | Self::Streams(_) => None,
        }
    }
}

// === impl StreamLink ===

impl StreamLink {
    fn new<R, W>(from_server: R, to_server: W, target: LinkTarget, ending: Option<Ending>) -> Self
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
        tokio::spawn(read_lines(from_server, target, ending));
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
        let mut confined = None;
        let (mut command, mut confinement) = match spec.sandbox {
            Some(sandbox) => {
                let sandboxed = |source| SpawnError::Sandbox {
                    name: spec.name.to_owned(),
                    source,
                };
                let inherited = std::env::vars().collect();
                let plan = Plan::new(spec.command, spec.args, spec.env, sandbox, &inherited)
                    .map_err(sandboxed)?;
                let kernel = Kernel::current();
                let (command, confinement) =
                    hintgate_sandbox::command(&plan, kernel).map_err(sandboxed)?;
                confined = Some(Confined {
                    home: confinement.home().map(std::path::Path::to_path_buf),
                    supervisor: confinement
                        .report()
                        .holds(hintgate_sandbox::Property::PidNamespace),
                    landlock_abi: if confinement
                        .report()
                        .holds(hintgate_sandbox::Property::FilesRead)
                    {
                        kernel.landlock_abi
                    } else {
                        0
                    },
                    plan,
                });
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
        // A launcher the sandbox resolved (`uvx PKG` to the package's entry
        // point) is named with what ran, so a missing file is the right one.
        let shown = match &confined {
            Some(confined) if confined.plan.program != std::path::Path::new(spec.command) => {
                format!(
                    "{} (resolved to {})",
                    spec.command,
                    confined.plan.program.display()
                )
            }
            _ => spec.command.to_owned(),
        };
        let mut child = command.spawn().map_err(|source| SpawnError::Exec {
            command: shown,
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
        let pid = child.id();
        let tail = Arc::new(StderrTail::default());
        let (stderr_done_tx, stderr_done) = watch::channel(false);
        let name = spec.name.to_owned();
        let kept = Arc::clone(&tail);
        tokio::spawn(async move {
            // A server's stderr is its log: pass it on to ours, line by
            // line (escaped, and bounded), keeping the last lines.
            let mut reader = BufReader::new(stderr);
            while let Ok(StderrLine::Line { bytes, cut }) = read_stderr_line(&mut reader).await {
                let line = kept.push(&bytes, cut);
                if !line.trim().is_empty() {
                    tracing::info!(server.id = %name, "{line}");
                }
            }
            stderr_done_tx.send_replace(true);
        });
        let (kill, exited) = wait_for(child);
        let ending = Ending {
            exited: exited.clone(),
            stderr_done,
            tail: Arc::clone(&tail),
            confined,
        };
        let lines = StreamLink::new(stdout, stdin, target, Some(ending));
        Ok(Self {
            lines,
            pid,
            kill: Some(kill),
            exited,
            tail,
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
            kill,
            mut exited,
            confinement,
            ..
        } = self;
        drop(lines);
        let timed_out =
            tokio::time::timeout(Duration::from_secs(2), exited.wait_for(Option::is_some))
                .await
                .is_err();
        if timed_out {
            if let Some(kill) = kill {
                let _ = kill.send(());
            }
            let _ = exited.wait_for(Option::is_some).await;
        }
        // Whatever the server left running in its group goes with it, and
        // so does its way out.
        drop(confinement);
    }
}

/// Waits for `child` in a task of its own: the status it ended with goes to
/// the receiver; a send on the sender, or its drop, kills the child first.
fn wait_for(
    mut child: Child,
) -> (
    oneshot::Sender<()>,
    watch::Receiver<Option<Option<ExitStatus>>>,
) {
    let (kill, killed) = oneshot::channel::<()>();
    let (status_tx, status) = watch::channel(None);
    tokio::spawn(async move {
        let ended = tokio::select! {
            ended = child.wait() => ended.ok(),
            _ = killed => {
                let _ = child.start_kill();
                child.wait().await.ok()
            }
        };
        status_tx.send_replace(Some(ended));
    });
    (kill, status)
}

// === impl Ending ===

impl Ending {
    /// Why the link ended, said fully: `closed` (what the reader saw), or
    /// how the process ended, then its last lines of standard error and,
    /// for a confined one, what its sandbox denied that they name. Waits at
    /// most [`END_GRACE`] for the process to exit and its standard error to
    /// end.
    async fn reason(mut self, closed: String) -> String {
        let grace = tokio::time::sleep(END_GRACE);
        tokio::pin!(grace);
        let status = tokio::select! {
            ended = self.exited.wait_for(Option::is_some) => ended.ok().and_then(|ended| *ended),
            () = &mut grace => None,
        };
        tokio::select! {
            _ = self.stderr_done.wait_for(|done| *done) => {}
            () = &mut grace => {}
        }
        let supervisor = self
            .confined
            .as_ref()
            .is_some_and(|confined| confined.supervisor);
        let mut reason = match status {
            Some(Some(status)) => describe_exit(&status, supervisor),
            Some(None) => closed,
            None => format!("{closed}, and did not exit"),
        };
        reason.push_str(&self.tail.clause());
        if let Some(confined) = self.confined.take() {
            // The notes resolve the paths the server named (through their
            // links, as Landlock sees them): off the loop's thread, and
            // not waited for past the grace.
            let lines = self.tail.lines();
            let notes = tokio::task::spawn_blocking(move || {
                hintgate_sandbox::denial::notes(
                    &confined.plan,
                    confined.home.as_deref(),
                    confined.landlock_abi,
                    &lines,
                )
            });
            if let Ok(Ok(notes)) = tokio::time::timeout(END_GRACE, notes).await {
                for note in notes {
                    reason.push_str("; ");
                    reason.push_str(&note);
                }
            }
        }
        reason
    }
}

async fn read_lines<R: AsyncRead + Unpin>(
    from_server: R,
    target: LinkTarget,
    mut ending: Option<Ending>,
) {
    let LinkTarget {
        server,
        generation,
        max_line,
        max_depth,
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
                Ok(line) => UpstreamEvent::Line(ServerLine::read(line, max_depth)),
                Err(_) => UpstreamEvent::Broken("wrote bytes that are not UTF-8".to_owned()),
            },
            Ok(LineRead::TooLong) => UpstreamEvent::Broken(format!(
                "sent a message larger than the limit of {max_line} bytes"
            )),
            Ok(LineRead::Eof) => UpstreamEvent::Closed("closed its output".to_owned()),
            Err(err) => UpstreamEvent::Closed(format!("output failed: {err}")),
        };
        // A process that closed its output is given a moment to say how
        // it ended.
        let event = match event {
            UpstreamEvent::Closed(closed) => match ending.take() {
                Some(ending) => UpstreamEvent::Closed(ending.reason(closed).await),
                None => UpstreamEvent::Closed(closed),
            },
            other => other,
        };
        let last = matches!(event, UpstreamEvent::Broken(_) | UpstreamEvent::Closed(_));
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
