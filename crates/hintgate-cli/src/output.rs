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
