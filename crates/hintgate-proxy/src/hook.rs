//! The user's decision hook as a process: started, fed questions, read for
//! answers (design §4.2 step 3).
//!
//! A [`HookProcess`] is one running hook: its questions go to its stdin,
//! one line each, through a bounded queue (a hook that stops reading fills
//! it, and the next question fails at once instead of waiting), and its
//! stdout is read line by line, each line under
//! [`MAX_ANSWER_BYTES`](hintgate_policy::hook::MAX_ANSWER_BYTES), into
//! [`Event::Hook`] for the loop. Its stderr is logged. The process is
//! killed when the handle drops. What the lines mean is the gateway's
//! (`gateway::hooks`); this module only moves them.

use std::process::Stdio;

use hintgate_policy::config::HookConfig;
use hintgate_policy::hook::MAX_ANSWER_BYTES;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use crate::conn::{LineRead, read_line};
use crate::event::{Event, EventSender, HookEvent};

/// How many questions may wait to be written to one hook: a persistent
/// hook that stops reading has at most this many waiting, and the rest
/// fail at once.
pub(crate) const QUEUED_QUESTIONS: usize = 256;

/// One running hook process.
#[derive(Debug)]
pub(crate) struct HookProcess {
    questions: mpsc::Sender<String>,
    child: Child,
}

/// Why a hook could not be asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HookError {
    /// The program could not be started.
    #[error("the decision hook `{command}` could not be started: {why}")]
    Spawn {
        /// The program.
        command: String,
        /// What the system said.
        why: String,
    },
    /// The hook has too many questions waiting: it is not reading.
    #[error("the decision hook is not reading its input ({QUEUED_QUESTIONS} questions wait)")]
    Full,
    /// The hook's input is closed: it exited.
    #[error("the decision hook exited")]
    Gone,
}

// === impl HookProcess ===

impl HookProcess {
    /// Starts the hook. Its answers (and its end) arrive as [`Event::Hook`]
    /// with `slot` and `generation`, which tell one start of one hook from
    /// the others.
    pub fn spawn(
        config: &HookConfig,
        slot: usize,
        generation: u64,
        events: EventSender,
    ) -> Result<Self, HookError> {
        let (program, args) = match config.command.split_first() {
            Some((program, args)) => (program, args),
            None => {
                return Err(HookError::Spawn {
                    command: String::new(),
                    why: "no program is named".to_owned(),
                });
            }
        };
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let spawn_error = |why: String| HookError::Spawn {
            command: program.clone(),
            why,
        };
        let mut child = command
            .spawn()
            .map_err(|err| spawn_error(err.to_string()))?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| spawn_error("no pipe to its input".to_owned()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| spawn_error("no pipe from its output".to_owned()))?;
        let stderr = child
            .stderr
            .take()
            .ok_or_else(|| spawn_error("no pipe from its errors".to_owned()))?;
        let (questions, mut queue) = mpsc::channel::<String>(QUEUED_QUESTIONS);
        tokio::spawn(async move {
            let mut stdin = stdin;
            while let Some(line) = queue.recv().await {
                let written = async {
                    stdin.write_all(line.as_bytes()).await?;
                    stdin.write_all(b"\n").await?;
                    stdin.flush().await
                };
                if written.await.is_err() {
                    break;
                }
            }
            // Dropping stdin closes it: a per-call hook reads to its end.
        });
        let name = program.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::info!(hook = %name, "{line}");
            }
        });
        tokio::spawn(async move {
            let mut reader = BufReader::with_capacity(16 * 1024, stdout);
            let mut buf = Vec::with_capacity(1024);
            loop {
                let event = match read_line(&mut reader, &mut buf, MAX_ANSWER_BYTES).await {
                    Ok(LineRead::Line) => match std::str::from_utf8(&buf) {
                        Ok(line) if line.trim().is_empty() => continue,
                        Ok(line) => HookEvent::Line(line.to_owned()),
                        Err(_) => HookEvent::Broken("wrote bytes that are not UTF-8".to_owned()),
                    },
                    Ok(LineRead::TooLong) => {
                        HookEvent::Broken(format!("answered a line over {MAX_ANSWER_BYTES} bytes"))
                    }
                    Ok(LineRead::Eof) => HookEvent::Closed("closed its output".to_owned()),
                    Err(err) => HookEvent::Closed(format!("its output failed: {err}")),
                };
                let last = !matches!(event, HookEvent::Line(_));
                let sent = events
                    .send(Event::Hook {
                        slot,
                        generation,
                        event,
                    })
                    .await;
                if sent.is_err() || last {
                    break;
                }
            }
        });
        Ok(Self { questions, child })
    }

    /// Queues one question line for the hook.
    pub fn ask(&self, line: String) -> Result<(), HookError> {
        self.questions.try_send(line).map_err(|err| match err {
            mpsc::error::TrySendError::Full(_) => HookError::Full,
            mpsc::error::TrySendError::Closed(_) => HookError::Gone,
        })
    }

    /// Closes the hook's input once what is queued is written (a per-call
    /// hook reads its one question to the end of its input).
    pub fn close_input(&mut self) {
        let (closed, _) = mpsc::channel(1);
        self.questions = closed;
    }

    /// Kills the hook now.
    pub fn kill(&mut self) {
        let _ = self.child.start_kill();
    }
}
