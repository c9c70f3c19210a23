//! Line-delimited streams: reading lines under a size limit, and writing
//! lines in batches.

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::mpsc;

/// The outcome of reading one line.
#[derive(Debug, PartialEq, Eq)]
pub enum LineRead {
    /// A complete line is in the buffer (without its newline).
    Line,
    /// The stream ended.
    Eof,
    /// The line was longer than the limit; it was read and thrown away.
    TooLong,
}

/// Reads one line into `buf` (cleared first), never holding more than
/// `limit` bytes of it: a longer line is consumed up to its newline and
/// reported as [`LineRead::TooLong`], so a giant message cannot exhaust memory.
///
/// # Errors
///
/// The underlying read error.
pub async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    limit: usize,
) -> std::io::Result<LineRead> {
    buf.clear();
    let mut too_long = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(if too_long {
                LineRead::TooLong
            } else if buf.is_empty() {
                LineRead::Eof
            } else {
                LineRead::Line
            });
        }
        let (chunk, found_newline) = match available.iter().position(|byte| *byte == b'\n') {
            Some(idx) => (available.get(..idx).unwrap_or(&[]), true),
            None => (available, false),
        };
        let consumed = chunk.len() + usize::from(found_newline);
        if !too_long {
            if buf.len() + chunk.len() > limit {
                too_long = true;
                buf.clear();
            } else {
                buf.extend_from_slice(chunk);
            }
        }
        reader.consume(consumed);
        if found_newline {
            if too_long {
                return Ok(LineRead::TooLong);
            }
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            return Ok(LineRead::Line);
        }
    }
}

/// Writes every line from `lines` to `sink`, each followed by a newline,
/// flushing only when no further line is waiting, so a burst is written with
/// one flush. Ends when the channel closes or the sink fails.
pub async fn write_lines<W: AsyncWrite + Unpin>(
    sink: W,
    mut lines: mpsc::UnboundedReceiver<String>,
) {
    let mut writer = BufWriter::with_capacity(64 * 1024, sink);
    while let Some(line) = lines.recv().await {
        if write_one(&mut writer, &line).await.is_err() {
            return;
        }
        while let Ok(line) = lines.try_recv() {
            if write_one(&mut writer, &line).await.is_err() {
                return;
            }
        }
        if writer.flush().await.is_err() {
            return;
        }
    }
    let _ = writer.flush().await;
    let _ = writer.shutdown().await;
}

async fn write_one<W: AsyncWrite + Unpin>(
    writer: &mut BufWriter<W>,
    line: &str,
) -> std::io::Result<()> {
    writer.write_all(line.as_bytes()).await?;
    writer.write_all(b"\n").await
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::BufReader;

    async fn lines(input: &[u8], limit: usize) -> Vec<(LineRead, String)> {
        let mut reader = BufReader::with_capacity(4, input);
        let mut buf = Vec::new();
        let mut out = Vec::new();
        loop {
            let read = read_line(&mut reader, &mut buf, limit).await.unwrap();
            if read == LineRead::Eof {
                return out;
            }
            out.push((read, String::from_utf8(buf.clone()).unwrap()));
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn long_lines_are_skipped_whole() {
        let got = lines(b"short\r\nthis line is too long\nok\nlast", 10).await;
        assert_eq!(
            got,
            vec![
                (LineRead::Line, "short".into()),
                (LineRead::TooLong, String::new()),
                (LineRead::Line, "ok".into()),
                (LineRead::Line, "last".into()),
            ]
        );
    }
}
