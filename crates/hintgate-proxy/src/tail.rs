//! What a stdio server said last, and how it ended: the bounded tail of its
//! standard error and its exit status, for the reason its calls fail with.
//!
//! A server that cannot start usually says why on standard error (a Python
//! traceback, "Cannot find module", a permission denied) and exits. The
//! gateway passes every line of it on to its own log, as ever, and keeps the
//! last few ([`TAIL_LINES`] lines, [`TAIL_BYTES`] bytes at most, each line
//! escaped as every other text of a server's is) in a [`StderrTail`], so
//! that the error a host gets says what the server said, not only that it
//! "closed its output".
//!
//! Everything here is bounded: a line is read up to [`MAX_LOG_LINE`] bytes
//! (the rest of it is skipped to its newline), a line kept in the tail up to
//! [`TAIL_LINE_BYTES`], and the tail to [`TAIL_BYTES`]. A server that floods
//! its standard error costs the gateway no more memory than a quiet one.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::process::ExitStatus;
use std::sync::Mutex;

use hintgate_policy::sanitize::{breaks_or_hides, escape_line};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// The most lines of standard error kept.
pub const TAIL_LINES: usize = 8;

/// The most bytes (escaped) of standard error kept, all lines together.
pub const TAIL_BYTES: usize = 4096;

/// The most bytes (escaped) kept of one line; the rest is cut, and marked.
pub const TAIL_LINE_BYTES: usize = 1024;

/// The most bytes of one line read for the gateway's log; the rest of the
/// line is skipped to its newline, and the log says it was cut.
pub const MAX_LOG_LINE: usize = 64 * 1024;

/// The last lines a server wrote to its standard error, escaped and bounded.
#[derive(Debug, Default)]
pub struct StderrTail {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    lines: VecDeque<String>,
    bytes: usize,
    /// Lines were dropped from the front.
    dropped: bool,
}

/// One line as read from a stream, at most [`MAX_LOG_LINE`] bytes of it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum StderrLine {
    /// A line (without its newline); `cut` when it was longer than the
    /// limit and only its beginning is here.
    Line {
        /// Its bytes.
        bytes: Vec<u8>,
        /// Only its beginning was kept.
        cut: bool,
    },
    /// The end of the stream.
    End,
}

// === impl StderrTail ===

impl StderrTail {
    /// Keeps `line` (raw bytes, decoded lossily and escaped), dropping the
    /// oldest lines beyond the bounds. Returns the escaped line, whole, for
    /// the log.
    pub fn push(&self, raw: &[u8], cut: bool) -> String {
        let text = String::from_utf8_lossy(raw);
        let mut logged = escape_line(text.trim_end_matches('\r'));
        if cut {
            logged.push_str(" [line cut]");
        }
        if logged.trim().is_empty() {
            return logged;
        }
        let kept = bounded_escape(text.trim_end_matches('\r'), TAIL_LINE_BYTES, cut);
        let Ok(mut inner) = self.inner.lock() else {
            return logged;
        };
        inner.bytes += kept.len();
        inner.lines.push_back(kept);
        while inner.lines.len() > TAIL_LINES || inner.bytes > TAIL_BYTES {
            let Some(old) = inner.lines.pop_front() else {
                break;
            };
            inner.bytes = inner.bytes.saturating_sub(old.len());
            inner.dropped = true;
        }
        logged
    }

    /// The lines kept, oldest first.
    pub fn lines(&self) -> Vec<String> {
        self.inner
            .lock()
            .map(|inner| inner.lines.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The tail as a clause for a reason, as [`StderrTail::clause`], or ""
    /// when the server wrote nothing there (for a server still running,
    /// whose silence on stderr says nothing of how it ended).
    pub fn said(&self) -> String {
        let empty = self
            .inner
            .lock()
            .map(|inner| inner.lines.is_empty())
            .unwrap_or(true);
        if empty { String::new() } else { self.clause() }
    }

    /// The tail as a clause for a reason (`; the lines of its standard
    /// error: ...`, the lines joined by ` | `), or one that says the server
    /// wrote nothing there.
    pub fn clause(&self) -> String {
        let Ok(inner) = self.inner.lock() else {
            return String::new();
        };
        if inner.lines.is_empty() {
            return "; it wrote nothing to its standard error".to_owned();
        }
        let mut out = format!(
            "; {} of its standard error: ",
            if inner.dropped {
                "the last lines"
            } else {
                "the lines"
            }
        );
        for (at, line) in inner.lines.iter().enumerate() {
            if at > 0 {
                out.push_str(" | ");
            }
            out.push_str(line);
        }
        out
    }
}

/// `text` escaped as [`escape_line`] does, cut to at most `limit` bytes at a
/// character (never inside an escape), and marked when cut (or `cut` before).
fn bounded_escape(text: &str, limit: usize, cut: bool) -> String {
    let mut out = String::new();
    let mut whole = true;
    for ch in text.chars() {
        let before = out.len();
        if breaks_or_hides(ch) {
            out.push_str(&escape_line(ch.encode_utf8(&mut [0; 4])));
        } else {
            out.push(ch);
        }
        if out.len() > limit {
            out.truncate(before);
            whole = false;
            break;
        }
    }
    if !whole || cut {
        out.push_str(" [line cut]");
    }
    out
}

/// Reads one line of at most [`MAX_LOG_LINE`] bytes; the rest of a longer
/// line is read and thrown away.
///
/// # Errors
///
/// The underlying read error.
pub(crate) async fn read_stderr_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
) -> std::io::Result<StderrLine> {
    let mut bytes = Vec::new();
    let mut cut = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(if bytes.is_empty() && !cut {
                StderrLine::End
            } else {
                StderrLine::Line { bytes, cut }
            });
        }
        let (chunk, newline) = match available.iter().position(|byte| *byte == b'\n') {
            Some(at) => (available.get(..at).unwrap_or_default(), true),
            None => (available, false),
        };
        let room = MAX_LOG_LINE.saturating_sub(bytes.len());
        if chunk.len() > room {
            cut = true;
        }
        bytes.extend_from_slice(chunk.get(..room.min(chunk.len())).unwrap_or_default());
        let consumed = chunk.len() + usize::from(newline);
        reader.consume(consumed);
        if newline {
            return Ok(StderrLine::Line { bytes, cut });
        }
    }
}

/// How a process ended, in words: `exited with status 3`, `was killed by
/// signal 9 (SIGKILL)`. `confined`: the sandbox's supervisor (its PID
/// namespace) reports a server killed by signal N as status 128 + N, as a
/// shell does, and the words say so.
pub fn describe_exit(status: &ExitStatus, confined_supervisor: bool) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return format!("was killed by signal {signal}{}", signal_name(signal));
        }
    }
    match status.code() {
        Some(code) if confined_supervisor && (129..=192).contains(&code) => {
            let signal = code - 128;
            let mut text = format!("exited with status {code}");
            let _ = write!(
                text,
                " (128 + {signal}: how the sandbox reports a server killed by signal {signal}{}, unless the server exited with {code} itself)",
                signal_name(signal)
            );
            text
        }
        Some(code) => format!("exited with status {code}"),
        None => "ended".to_owned(),
    }
}

/// ` (SIGKILL)` for the signals a server is commonly ended by, on Linux.
fn signal_name(signal: i32) -> &'static str {
    if !cfg!(target_os = "linux") {
        return "";
    }
    match signal {
        1 => " (SIGHUP)",
        2 => " (SIGINT)",
        3 => " (SIGQUIT)",
        4 => " (SIGILL)",
        6 => " (SIGABRT)",
        7 => " (SIGBUS)",
        8 => " (SIGFPE)",
        9 => " (SIGKILL)",
        11 => " (SIGSEGV)",
        13 => " (SIGPIPE)",
        14 => " (SIGALRM)",
        15 => " (SIGTERM)",
        24 => " (SIGXCPU)",
        25 => " (SIGXFSZ)",
        31 => " (SIGSYS)",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_last_lines_within_its_bounds() {
        let tail = StderrTail::default();
        for n in 0..100 {
            tail.push(format!("line {n}").as_bytes(), false);
        }
        let lines = tail.lines();
        assert_eq!(lines.len(), TAIL_LINES);
        assert_eq!(lines.last().map(String::as_str), Some("line 99"));
        assert!(
            tail.clause()
                .starts_with("; the last lines of its standard error: line 92 | ")
        );
        let big = "x".repeat(10 * TAIL_LINE_BYTES);
        for _ in 0..20 {
            tail.push(big.as_bytes(), false);
        }
        let kept: usize = tail.lines().iter().map(String::len).sum();
        assert!(kept <= TAIL_BYTES, "{kept}");
        assert!(tail.lines().iter().all(|line| line.ends_with("[line cut]")));
    }

    #[test]
    fn control_characters_are_escaped_and_never_cut_in_half() {
        let tail = StderrTail::default();
        let logged = tail.push(b"\x1b]0;owned\x07 \xff text\r", false);
        assert!(
            !logged.contains('\u{1b}') && !logged.contains('\u{7}'),
            "{logged}"
        );
        assert!(logged.contains("\\u{001b}"), "{logged}");
        let line = "\u{1b}".repeat(TAIL_LINE_BYTES);
        let kept = bounded_escape(&line, TAIL_LINE_BYTES, false);
        let body = kept.trim_end_matches(" [line cut]");
        assert!(body.len() <= TAIL_LINE_BYTES);
        assert_eq!(body.len() % "\\u{001b}".len(), 0, "{body}");
    }

    #[test]
    fn blank_lines_are_logged_but_not_kept() {
        let tail = StderrTail::default();
        tail.push(b"   ", false);
        assert!(tail.lines().is_empty());
        assert_eq!(tail.clause(), "; it wrote nothing to its standard error");
        assert_eq!(tail.said(), "");
    }

    #[tokio::test]
    async fn a_line_longer_than_the_limit_is_cut_and_the_next_read_whole() {
        let mut input = vec![b'a'; MAX_LOG_LINE + 10];
        input.extend_from_slice(b"\nnext\n");
        let mut reader = tokio::io::BufReader::new(input.as_slice());
        let first = read_stderr_line(&mut reader).await.unwrap();
        assert!(
            matches!(first, StderrLine::Line { ref bytes, cut: true } if bytes.len() == MAX_LOG_LINE)
        );
        let second = read_stderr_line(&mut reader).await.unwrap();
        assert_eq!(
            second,
            StderrLine::Line {
                bytes: b"next".to_vec(),
                cut: false
            }
        );
        assert_eq!(
            read_stderr_line(&mut reader).await.unwrap(),
            StderrLine::End
        );
    }
}
