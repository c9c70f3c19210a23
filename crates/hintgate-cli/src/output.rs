//! The only place that writes to the terminal.
//!
//! Everything the user reads goes through here, so that a closed pipe
//! (`hintgate explain ... | head -1`) ends the program quietly instead of
//! panicking, as ripgrep does.

use std::io::{self, Write};

/// Writes `text` to standard output. A closed pipe is not an error: the
/// reader has what it wanted.
pub fn out(text: &str) -> io::Result<()> {
    write_all(io::stdout().lock(), text)
}

/// Writes `text` to standard output; `false` when the reader has gone
/// (a closed pipe), so a command that would go on writing can stop.
pub fn out_while_open(text: &str) -> io::Result<bool> {
    let mut sink = io::stdout().lock();
    match sink.write_all(text.as_bytes()).and_then(|()| sink.flush()) {
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => Ok(false),
        other => other.map(|()| true),
    }
}

/// Writes `text` to standard error.
pub fn err(text: &str) -> io::Result<()> {
    write_all(io::stderr().lock(), text)
}

fn write_all(mut sink: impl Write, text: &str) -> io::Result<()> {
    match sink.write_all(text.as_bytes()).and_then(|()| sink.flush()) {
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Sends logs to stderr (never stdout, which may carry the protocol or a
/// report), at `default` unless `RUST_LOG` names a filter.
pub fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    struct ClosedPipe;

    impl Write for ClosedPipe {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from(io::ErrorKind::BrokenPipe))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    struct Full;

    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from(io::ErrorKind::StorageFull))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_pipe_is_not_an_error_but_a_full_disk_is() {
        assert!(write_all(ClosedPipe, "text").is_ok());
        assert_eq!(
            write_all(Full, "text").unwrap_err().kind(),
            io::ErrorKind::StorageFull
        );
    }
}
