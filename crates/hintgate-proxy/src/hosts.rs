//! Host sessions opened while the gateway runs.
//!
//! Over stdio there is one host, and the gateway reads and writes its pipes
//! itself. A transport that serves many hosts (the Streamable HTTP host
//! side) gets a [`HostPort`] from [`serve`](crate::gateway::serve) instead,
//! opens a [`HostConn`] for each host session, hands it the host's lines
//! and takes the gateway's. The bounds are the stdio host's: a host whose
//! requests the gateway holds as many of as it may, or while the loop has
//! more lines waiting than it holds, waits before its next line is taken;
//! what waits for the host is counted until the transport says it was
//! delivered ([`HostConn::delivered`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use hintgate_policy::decide::Scope;
use tokio::sync::mpsc;

use crate::conn::QueueGauge;
use crate::conn::{HOST_HELD_MESSAGES, HOST_QUEUE_BYTES};
pub use crate::event::HostSink;
use crate::event::{Closed, Event, EventSender, HostEvent, OpenSession};
use crate::frame::HostLine;
use crate::gateway::request::Held;

/// Opens host sessions on a running gateway. Cheap to clone.
#[derive(Debug, Clone)]
pub struct HostPort {
    events: EventSender,
    /// The next session's number; 0 is the stdio host's, never given here.
    next: Arc<AtomicU32>,
    max_line: usize,
    max_depth: usize,
}

/// One host session: what the host sends goes in with [`HostConn::send`],
/// what the gateway writes to it comes out of the receiver
/// [`HostConn::take_lines`] gives once. Dropping it without
/// [`HostConn::close`] closes the session too.
#[derive(Debug)]
pub struct HostConn {
    session: u32,
    events: EventSender,
    lines: std::sync::Mutex<Option<mpsc::UnboundedReceiver<String>>>,
    /// What the gateway wrote to the host and the transport has not
    /// delivered yet.
    gauge: Arc<QueueGauge>,
    /// What the gateway holds of the host's requests.
    requests: Arc<QueueGauge>,
    max_line: usize,
    max_depth: usize,
    closed: AtomicBool,
}

// === impl HostPort ===

impl HostPort {
    pub(crate) fn new(events: EventSender, max_line: usize, max_depth: usize) -> Self {
        Self {
            events,
            next: Arc::new(AtomicU32::new(1)),
            max_line,
            max_depth,
        }
    }

    /// Opens a host session whose credentials give `scope`, for the
    /// principal its transport authenticated (named in its calls' audit
    /// records).
    ///
    /// # Errors
    ///
    /// [`Closed`] when the gateway has stopped, or when it has opened
    /// `u32::MAX` sessions.
    pub async fn open(&self, scope: Scope, principal: Option<String>) -> Result<HostConn, Closed> {
        self.open_with(scope, principal, None).await
    }

    /// [`HostPort::open`], with a [`HostSink`] the gateway offers each line
    /// to first, while nothing waits in the session's channel.
    ///
    /// # Errors
    ///
    /// [`Closed`] when the gateway has stopped, or when it has opened
    /// `u32::MAX` sessions.
    pub async fn open_with(
        &self,
        scope: Scope,
        principal: Option<String>,
        sink: Option<Arc<dyn HostSink>>,
    ) -> Result<HostConn, Closed> {
        let session = self
            .next
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |next| {
                next.checked_add(1)
            })
            .map_err(|_| Closed)?;
        // INVARIANT: what waits for the host and what the gateway holds of
        // its requests are bounded as for the stdio host.
        let gauge = Arc::new(QueueGauge::default());
        gauge.set_limits(
            HOST_QUEUE_BYTES,
            HOST_QUEUE_BYTES.saturating_add(self.max_line),
        );
        let requests = Arc::new(QueueGauge::default());
        let held = self.max_line.saturating_mul(HOST_HELD_MESSAGES);
        requests.set_limits(held, held);
        let (out, lines) = mpsc::unbounded_channel();
        self.events
            .send(Event::Open(Box::new(OpenSession {
                session,
                out,
                gauge: Arc::clone(&gauge),
                requests: Arc::clone(&requests),
                scope,
                principal,
                sink,
            })))
            .await?;
        Ok(HostConn {
            session,
            events: self.events.clone(),
            lines: std::sync::Mutex::new(Some(lines)),
            gauge,
            requests,
            max_line: self.max_line,
            max_depth: self.max_depth,
            closed: AtomicBool::new(false),
        })
    }

    /// Reads one line of a host's as the gateway takes it (see
    /// [`HostConn::read`]), before its session is known.
    pub fn read(&self, line: String) -> HostLine {
        HostLine::read(line, self.max_depth)
    }

    /// The largest message the gateway takes (`max_message_bytes`).
    pub fn max_line(&self) -> usize {
        self.max_line
    }

    /// Whether the gateway has stopped.
    pub fn is_closed(&self) -> bool {
        self.events.is_closed()
    }
}

// === impl HostConn ===

impl HostConn {
    /// The session's number, as the gateway's log names it.
    pub fn id(&self) -> u32 {
        self.session
    }

    /// Reads one line of the host's as the gateway takes it (repeated keys
    /// and depth, then the envelope): the transport routes on what this
    /// read, and hands the same to [`HostConn::send`], so the line is read
    /// once.
    pub fn read(&self, line: String) -> HostLine {
        HostLine::read(line, self.max_depth)
    }

    /// Hands the gateway one line of the host's, once it may take it: while
    /// it holds as many of the host's requests as it may, or more lines wait
    /// for its loop than it holds, this waits (the host's next line waits
    /// with it). A line over `max_message_bytes` is not handed on: the host
    /// is told it was too large, as over stdio.
    ///
    /// # Errors
    ///
    /// [`Closed`] when the gateway has stopped.
    pub async fn send(&self, line: HostLine) -> Result<(), Closed> {
        self.send_event(line, None).await
    }

    /// [`HostConn::send`], for a request whose id the transport replaced
    /// with its own: `host_id` (raw JSON) is the id the host gave, which its
    /// audit records name.
    ///
    /// # Errors
    ///
    /// [`Closed`] when the gateway has stopped.
    pub async fn send_as(&self, line: HostLine, host_id: String) -> Result<(), Closed> {
        self.send_event(line, Some(host_id)).await
    }

    async fn send_event(&self, line: HostLine, host_id: Option<String>) -> Result<(), Closed> {
        self.gauge.within_soft_limit().await;
        self.requests.within_soft_limit().await;
        self.events.room().await;
        let event = if line.len() > self.max_line {
            HostEvent::TooLong
        } else {
            self.requests.queued(Held::cost(line.len()));
            match host_id {
                Some(host_id) => HostEvent::LineFor { line, host_id },
                None => HostEvent::Line(line),
            }
        };
        self.events
            .send(Event::Host {
                session: self.session,
                event,
            })
            .await
    }

    /// The lines the gateway writes to this host, once (`None` after the
    /// first call); the receiver ends when the gateway has stopped. Each
    /// line counts as waiting for the host until [`HostConn::delivered`]
    /// says it was delivered or given up.
    pub fn take_lines(&self) -> Option<mpsc::UnboundedReceiver<String>> {
        self.lines.lock().ok()?.take()
    }

    /// A line of `len` bytes from [`HostConn::take_lines`] was delivered to the
    /// host, or given up: it no longer waits.
    pub async fn delivered(&self, len: usize) {
        if self.gauge.written(len) {
            let _ = self
                .events
                .send(Event::Host {
                    session: self.session,
                    event: HostEvent::Drained,
                })
                .await;
        }
    }

    /// Ends the session: what it has in flight or held ends on record as
    /// `host-gone`, as when a stdio host closes its side.
    pub async fn close(&self) {
        if self.closed.swap(true, Ordering::Relaxed) {
            return;
        }
        let _ = self
            .events
            .send(Event::Host {
                session: self.session,
                event: HostEvent::Closed,
            })
            .await;
    }
}

impl Drop for HostConn {
    fn drop(&mut self) {
        if self.closed.load(Ordering::Relaxed) {
            return;
        }
        // Dropped without `close` (its transport's task ended): the session
        // closes all the same, from a task of its own since the channel may
        // be full.
        let events = self.events.clone();
        let session = self.session;
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = events
                    .send(Event::Host {
                        session,
                        event: HostEvent::Closed,
                    })
                    .await;
            });
        }
    }
}
