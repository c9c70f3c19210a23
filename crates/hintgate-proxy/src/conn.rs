//! Line-delimited streams: reading lines under a size limit, and writing
//! lines in batches, optionally counting what waits to be written
//! ([`QueueGauge`]).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{Notify, mpsc};

/// How much may wait for a host before notifications to it are dropped
/// and the host's own messages are not read: a host that stops reading
/// holds this much, and what it must get (answers, questions) up to one
/// message more (`max_message_bytes`); an answer beyond that is replaced by
/// an error that says why, and a question is dropped (it then times out).
pub(crate) const HOST_QUEUE_BYTES: usize = 1024 * 1024;

/// How much of a host's requests the gateway holds at once (waiting for a
/// server, a person or a question), in messages of the largest size
/// (`max_message_bytes`), each request counted as its line and
/// `gateway::request::REQUEST_OVERHEAD`: past it, the
/// host's own lines are not read until some of its requests end (every one
/// has a deadline), so a host that sends requests faster than they end
/// cannot fill the in-flight table. Twice what a server may leave unread
/// (`gateway::upstreams::SERVER_QUEUE_MESSAGES`), so
/// that a server that does not read is found out before its host is held.
pub(crate) const HOST_HELD_MESSAGES: usize = 8;

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

/// What waits in a queue of lines to one peer, counted as lines go in and
/// out. Whoever queues a line adds its size ([`QueueGauge::queued`]); the
/// writer takes it off once the line is written. A peer that stops
/// reading shows as bytes that stop going down, so the owner of the queue
/// can hold it under a bound: the gateway drops notifications for a host
/// past [`QueueGauge::soft_limit`] and stops reading that host meanwhile.
#[derive(Debug, Default)]
pub struct QueueGauge {
    bytes: AtomicUsize,
    lines: AtomicUsize,
    peak: AtomicUsize,
    dropped: AtomicU64,
    held: AtomicU64,
    soft: AtomicUsize,
    hard: AtomicUsize,
    /// The writer is gone (the peer closed its side): nothing waits for it
    /// any more.
    closed: std::sync::atomic::AtomicBool,
    drained: Notify,
}

// === impl QueueGauge ===

impl QueueGauge {
    /// Bytes queued and not yet written (each line counts its newline).
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Acquire)
    }

    /// Lines queued and not yet written.
    pub fn lines(&self) -> usize {
        self.lines.load(Ordering::Acquire)
    }

    /// The most bytes that ever waited at once.
    pub fn peak_bytes(&self) -> usize {
        self.peak.load(Ordering::Acquire)
    }

    /// How many lines were dropped instead of queued.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Acquire)
    }

    /// How many times someone had to wait for the queue to drain (a reader
    /// held back, [`QueueGauge::within_soft_limit`]).
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Acquire)
    }

    /// Past this many bytes waiting, only what must reach the peer is
    /// queued (`usize::MAX` until set).
    pub fn soft_limit(&self) -> usize {
        match self.soft.load(Ordering::Acquire) {
            0 => usize::MAX,
            soft => soft,
        }
    }

    /// Past this many bytes waiting, not even that is queued whole
    /// (`usize::MAX` until set).
    pub fn hard_limit(&self) -> usize {
        match self.hard.load(Ordering::Acquire) {
            0 => usize::MAX,
            hard => hard,
        }
    }

    /// Sets the limits the queue's owner keeps it under.
    pub fn set_limits(&self, soft: usize, hard: usize) {
        self.soft.store(soft, Ordering::Release);
        self.hard.store(hard.max(soft), Ordering::Release);
    }

    /// A line of `len` bytes (without its newline) was queued.
    pub fn queued(&self, len: usize) {
        let size = len + 1;
        let now = self.bytes.fetch_add(size, Ordering::AcqRel) + size;
        self.lines.fetch_add(1, Ordering::AcqRel);
        self.peak.fetch_max(now, Ordering::AcqRel);
    }

    /// A line counted as queued did not reach the queue after all (its
    /// writer is gone).
    pub fn withdrawn(&self, len: usize) {
        self.bytes.fetch_sub(len + 1, Ordering::AcqRel);
        self.lines.fetch_sub(1, Ordering::AcqRel);
    }

    /// A line was dropped instead of queued.
    pub fn count_dropped(&self) {
        self.dropped.fetch_add(1, Ordering::AcqRel);
    }

    /// A line of `len` bytes (without its newline) left the queue: it was
    /// written, or its reader took it. Returns whether the queue just went
    /// from past its soft limit to within it (whoever waits for that is
    /// woken).
    pub fn written(&self, len: usize) -> bool {
        let size = len + 1;
        let before = self.bytes.fetch_sub(size, Ordering::AcqRel);
        self.lines.fetch_sub(1, Ordering::AcqRel);
        let soft = self.soft_limit();
        let drained = before > soft && before.saturating_sub(size) <= soft;
        if drained {
            self.drained.notify_waiters();
        }
        drained
    }

    /// Waits until the queue holds no more than its soft limit, or its
    /// writer is gone.
    pub async fn within_soft_limit(&self) {
        // The common case costs one load: nothing needs to be registered
        // to return at once.
        if self.bytes() <= self.soft_limit() || self.closed.load(Ordering::Acquire) {
            return;
        }
        self.held.fetch_add(1, Ordering::AcqRel);
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            // Registered before the check, so a drain between the check and
            // the wait still wakes it.
            drained.as_mut().enable();
            if self.bytes() <= self.soft_limit() || self.closed.load(Ordering::Acquire) {
                return;
            }
            drained.await;
        }
    }

    /// The writer (or reader) of the queue ended: whoever waits for it to
    /// drain goes on (what is left will never be taken off).
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.drained.notify_waiters();
    }
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
pub async fn write_lines<W: AsyncWrite + Unpin>(sink: W, lines: mpsc::UnboundedReceiver<String>) {
    write_all_lines(sink, lines, |_| async {}).await;
}

/// [`write_lines`], taking each line off `gauge` once written, and awaiting
/// `on_drained` each time the queue goes from past its soft limit to
/// within it.
pub async fn write_counted_lines<W, F, Fut>(
    sink: W,
    lines: mpsc::UnboundedReceiver<String>,
    gauge: std::sync::Arc<QueueGauge>,
    mut on_drained: F,
) where
    W: AsyncWrite + Unpin,
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    write_all_lines(sink, lines, |len| {
        let drained = gauge.written(len).then(&mut on_drained);
        async move {
            if let Some(drained) = drained {
                drained.await;
            }
        }
    })
    .await;
    gauge.close();
}

async fn write_all_lines<W, F, Fut>(
    sink: W,
    mut lines: mpsc::UnboundedReceiver<String>,
    mut written: F,
) where
    W: AsyncWrite + Unpin,
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = ()>,
{
    let mut writer = BufWriter::with_capacity(64 * 1024, sink);
    while let Some(line) = lines.recv().await {
        if write_one(&mut writer, &line).await.is_err() {
            return;
        }
        written(line.len()).await;
        while let Ok(line) = lines.try_recv() {
            if write_one(&mut writer, &line).await.is_err() {
                return;
            }
            written(line.len()).await;
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
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    use tokio::io::{AsyncReadExt, BufReader};

    #[tokio::test(flavor = "current_thread")]
    async fn a_queue_past_its_soft_limit_holds_its_waiters_until_it_drains() {
        let gauge = Arc::new(QueueGauge::default());
        // The writer's own buffer (64 KiB) takes a line smaller than it:
        // this one is larger, and waits for the peer.
        gauge.set_limits(100_000, 200_000);
        let (sink, mut peer) = tokio::io::duplex(16);
        let (tx, rx) = mpsc::unbounded_channel();
        let drains = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&drains);
        tokio::spawn(write_counted_lines(
            sink,
            rx,
            Arc::clone(&gauge),
            move || {
                counted.fetch_add(1, Ordering::SeqCst);
                async {}
            },
        ));
        // 150,000 bytes wait (with the newline), for a peer that does not
        // read.
        let line = "x".repeat(149_999);
        gauge.queued(line.len());
        tx.send(line).unwrap();
        assert_eq!(
            (gauge.bytes(), gauge.lines(), gauge.peak_bytes()),
            (150_000, 1, 150_000)
        );
        let within = Arc::new(AtomicBool::new(false));
        let waiter = {
            let gauge = Arc::clone(&gauge);
            let within = Arc::clone(&within);
            tokio::spawn(async move {
                gauge.within_soft_limit().await;
                within.store(true, Ordering::SeqCst);
            })
        };
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!within.load(Ordering::SeqCst), "held past the soft limit");
        // The peer reads: the line is written, the queue drains, and the
        // waiter goes on.
        let mut read = vec![0; 150_000];
        peer.read_exact(&mut read).await.unwrap();
        waiter.await.unwrap();
        assert_eq!((gauge.bytes(), gauge.lines()), (0, 0));
        assert_eq!(drains.load(Ordering::SeqCst), 1);
        assert_eq!(gauge.peak_bytes(), 150_000, "the high-water mark stays");
    }

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
    async fn a_peer_that_goes_away_releases_the_waiters() {
        let gauge = Arc::new(QueueGauge::default());
        gauge.set_limits(100_000, 200_000);
        let (sink, peer) = tokio::io::duplex(16);
        let (tx, rx) = mpsc::unbounded_channel();
        let writer = tokio::spawn(write_counted_lines(
            sink,
            rx,
            Arc::clone(&gauge),
            || async {},
        ));
        let line = "x".repeat(149_999);
        gauge.queued(line.len());
        tx.send(line).unwrap();
        // The peer closes without reading: the line is never written, and
        // nothing waits for it to be.
        drop(peer);
        writer.await.unwrap();
        assert_eq!(gauge.bytes(), 150_000);
        // Bounded so that a regression fails instead of hanging.
        tokio::time::timeout(
            std::time::Duration::from_secs(20),
            gauge.within_soft_limit(),
        )
        .await
        .expect("the waiter is released");
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
