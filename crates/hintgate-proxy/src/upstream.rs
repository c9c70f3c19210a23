//! Upstream servers as child processes speaking MCP on stdin and stdout.
//!
//! Each process gets a reader task (lines into the gateway's event channel,
//! tagged with the server's index and the process's generation) and a writer
//! task (lines from a channel, written in batches). The child is killed when
//! its [`Process`] is dropped, so nothing outlives the gateway.

use std::collections::BTreeMap;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use crate::conn::{LineRead, read_line, write_lines};
use crate::event::{Event, UpstreamEvent};

/// How the gateway reaches one server.
#[derive(Debug)]
pub enum Link {
    /// A child process on stdio.
    Stdio(Process),
    /// A Streamable HTTP endpoint.
    Http(crate::upstream_http::HttpLink),
}

// === impl Link ===

impl Link {
    /// Sends one line (one message) to the server.
    pub fn send(&self, line: String) {
        match self {
            Self::Stdio(process) => process.send(line),
            Self::Http(link) => link.send(line),
        }
    }

    /// Stops the server or ends its session.
    pub async fn stop(self) {
        match self {
            Self::Stdio(process) => process.stop().await,
            Self::Http(link) => link.stop().await,
        }
    }

    /// The process id, for a child process.
    pub fn pid(&self) -> Option<u32> {
        match self {
            Self::Stdio(process) => process.pid(),
            Self::Http(_) => None,
        }
    }
}

/// A running upstream process.
#[derive(Debug)]
pub struct Process {
    /// Lines to the server's stdin.
    pub tx: mpsc::UnboundedSender<String>,
    child: Child,
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
}

// === impl Process ===

impl Process {
    /// Starts the server and its reader and writer tasks.
    ///
    /// # Errors
    ///
    /// [`SpawnError`] when the program cannot be run.
    pub fn spawn(
        spec: &Spawn<'_>,
        idx: usize,
        generation: u64,
        max_line: usize,
        events: mpsc::UnboundedSender<Event>,
    ) -> Result<Self, SpawnError> {
        let mut command = Command::new(spec.command);
        command
            .args(spec.args)
            .envs(spec.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|source| SpawnError::Exec {
            command: spec.command.to_owned(),
            source,
        })?;
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
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(write_lines(stdin, rx));
        tokio::spawn(read_stdout(stdout, idx, generation, max_line, events));
        let name = spec.name.to_owned();
        tokio::spawn(async move {
            // A server's stderr is its log: pass it on to ours, line by line.
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::info!(server.id = %name, "{line}");
            }
        });
        Ok(Self { tx, child })
    }

    /// Sends one line to the server.
    pub fn send(&self, line: String) {
        // A closed channel means the process is gone; its reader reports that.
        let _ = self.tx.send(line);
    }

    /// Stops the server the way the spec asks: close its input, give it a
    /// moment to exit, then kill it.
    pub async fn stop(self) {
        let Self { tx, mut child } = self;
        drop(tx);
        let exited = tokio::time::timeout(std::time::Duration::from_secs(2), child.wait()).await;
        if exited.is_err() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }

    /// The operating system's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }
}

async fn read_stdout(
    stdout: tokio::process::ChildStdout,
    idx: usize,
    generation: u64,
    max_line: usize,
    events: mpsc::UnboundedSender<Event>,
) {
    let mut reader = BufReader::with_capacity(64 * 1024, stdout);
    let mut buf = Vec::with_capacity(4096);
    loop {
        let event = match read_line(&mut reader, &mut buf, max_line).await {
            Ok(LineRead::Line) => match String::from_utf8(std::mem::take(&mut buf)) {
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
                idx,
                generation,
                event,
            })
            .is_err()
            || last
        {
            return;
        }
    }
}
