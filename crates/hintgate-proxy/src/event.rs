//! What the gateway's event loop receives, and the channel it comes on.
//!
//! The channel is bounded twice: by count ([`channel`]'s `capacity`, which
//! also bounds the events that are not lines: a server's end, a host's
//! drain, the store watcher's news), and by the bytes of the lines in it
//! ([`EventSender::room`]): a reader waits for room before it reads its
//! next line, so while the loop is busy (a store commit that stalls) a
//! flooding peer's lines stay in its pipe, where the kernel stops it,
//! instead of in the gateway's memory.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::conn::QueueGauge;
use crate::frame::{HostLine, ServerLine};

/// Takes the gateway's lines to one host session straight from its event
/// loop, without a task in between to wake. Offered a line, it either takes
/// it now (delivered to where the host reads, or dropped as its transport
/// drops what has nowhere to go) or gives it back, unchanged and with
/// nothing recorded, when it cannot take it without waiting: then the line
/// waits in the session's channel (`HostConn::take_lines` on the host side) like every
/// later line until the channel is empty again, so the order holds.
///
/// It runs on the gateway's loop: it must not block, and it must not take
/// a line it cannot place at once.
pub trait HostSink: Send + Sync + std::fmt::Debug + 'static {
    /// Takes `line` (`None`) or gives it back (`Some`).
    fn offer(&self, line: String) -> Option<String>;
}

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
    /// The deepest nesting accepted in a server's line (`max_json_depth`).
    pub max_depth: usize,
    /// The gateway's event channel.
    pub events: EventSender,
    /// What waits for the server, counted as lines are sent and taken off
    /// as they are written (for an HTTP server: as their POST is
    /// answered). Whoever sends keeps it bounded.
    pub queue: Arc<QueueGauge>,
}

/// One event for the gateway's single event loop.
#[derive(Debug)]
pub enum Event {
    /// Something from a host session.
    Host {
        /// The session's number.
        session: u32,
        /// What happened.
        event: HostEvent,
    },
    /// Something from an upstream server; `generation` tells links of the
    /// same server apart across restarts.
    Upstream {
        /// The server's index in the configuration.
        server: usize,
        /// Which start of that server.
        generation: u64,
        /// What happened.
        event: UpstreamEvent,
    },
    /// A person answered a call waiting in the approval queue.
    Answered {
        /// The call's number in the queue.
        id: u64,
        /// The answer.
        answer: hintgate_store::Answer,
    },
    /// The standing approvals of a server identity, read anew from the store
    /// after it changed (another process approved or revoked).
    Approvals {
        /// The server's identity key.
        key: String,
        /// Its standing approvals.
        approvals: Vec<hintgate_store::Approval>,
        /// When the read began (an approval given after it is not in it).
        read_at: std::time::Instant,
    },
    /// The gateway is asked to stop (a signal): every call in flight ends,
    /// on record, before it exits.
    Stop,
    /// The audit log reported a write it made off the loop's thread
    /// (PostgreSQL): the calls whose records it held may be sent.
    Reported,
    /// Something from a decision hook (`decide_command`): `slot` is which
    /// hook, `generation` which start of it (for a per-call hook, the id of
    /// the one question it was asked).
    Hook {
        /// The hook's slot.
        slot: usize,
        /// Which start of it.
        generation: u64,
        /// What happened.
        event: HookEvent,
    },
    /// A host session opens while the gateway runs (the Streamable HTTP
    /// host side opens one per host session, through a
    /// `HostPort`).
    Open(Box<OpenSession>),
}

/// A host session that opens, with where its lines go.
#[derive(Debug)]
pub struct OpenSession {
    /// The session's number (never one in use).
    pub session: u32,
    /// Lines to the host.
    pub out: mpsc::UnboundedSender<String>,
    /// What waits in `out` for the host.
    pub gauge: Arc<QueueGauge>,
    /// What the gateway holds of the host's requests.
    pub requests: Arc<QueueGauge>,
    /// What the host's credentials let it do.
    pub scope: hintgate_policy::decide::Scope,
    /// Who the host is, as its transport authenticated it.
    pub principal: Option<String>,
    /// Where lines go first while nothing waits in `out`.
    pub sink: Option<std::sync::Arc<dyn HostSink>>,
}

/// Something from a host.
#[derive(Debug)]
pub enum HostEvent {
    /// One line, read where it arrived ([`HostLine::read`]).
    Line(HostLine),
    /// One request whose id the transport replaced with one of its own
    /// (a 2026-07-28 request over HTTP, made unique per principal); the
    /// audit log records `host_id`, the id the host gave (raw JSON), which
    /// is what the host's own log shows.
    LineFor {
        /// The line, under the transport's id.
        line: HostLine,
        /// The id the host gave.
        host_id: String,
    },
    /// A line over the limit (read and thrown away).
    TooLong,
    /// The host closed its side: the session is over.
    Closed,
    /// The host read enough of what waited for it to be within the queue's
    /// bound again, after it was past it.
    Drained,
}

/// Something from a decision hook.
#[derive(Debug)]
pub enum HookEvent {
    /// One line of its output.
    Line(String),
    /// It broke the protocol (a line over the limit, bytes that are not
    /// UTF-8).
    Broken(String),
    /// It closed its output (it exited or crashed).
    Closed(String),
}

/// Something from an upstream server.
#[derive(Debug)]
pub enum UpstreamEvent {
    /// One line, read where it arrived ([`ServerLine::read`]).
    Line(ServerLine),
    /// One line the server sent on the stream that answers the gateway's
    /// request `request` (Streamable HTTP, a POST answered with an event
    /// stream): a request of the server's own there belongs to that
    /// request, and so to the host session that made it. The relation comes
    /// from the transport, never from what the server wrote.
    LineOnStream {
        /// The line, read where it arrived.
        line: ServerLine,
        /// The id of the gateway's request whose stream carried it.
        request: u64,
    },
    /// The server broke the protocol (a giant line, bytes that are not
    /// UTF-8); it is stopped and restarted on the next call.
    Broken(String),
    /// The server closed its output (it exited or crashed).
    Closed(String),
    /// The install before its start (`prepare = "on-start"`) ended: what
    /// was installed where, or why not.
    Prepared(Result<String, String>),
}

/// The sending half of the event channel; each reader, the host's writer
/// and the store watcher hold a clone. The loop itself never sends: it
/// would wait for itself.
#[derive(Debug, Clone)]
pub struct EventSender {
    tx: mpsc::Sender<Event>,
    lines: Arc<QueueGauge>,
}

/// The receiving half, the loop's.
#[derive(Debug)]
pub struct EventReceiver {
    rx: mpsc::Receiver<Event>,
    lines: Arc<QueueGauge>,
}

/// The loop is gone: nothing more is received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the gateway's event loop has ended")]
pub struct Closed;

/// The most events the channel holds: as many as one turn of the loop
/// takes.
pub const CAPACITY: usize = 1024;

/// The bytes of lines waiting for the loop past which readers wait. Each
/// reader adds at most one line past it (it waited before reading that
/// line), so the lines in the channel take at most this much plus one
/// message (`max_message_bytes`) per reader: a host session, a stdio
/// server, an HTTP exchange. A bound by count alone would allow
/// [`CAPACITY`] times `max_message_bytes` (16 GiB by default).
pub const LINE_BYTES: usize = 1024 * 1024;

/// An event channel of [`CAPACITY`] events, whose lines are counted in
/// `lines` (its limits set to [`LINE_BYTES`]) and held there by readers
/// that wait for [`EventSender::room`].
pub fn channel(lines: Arc<QueueGauge>) -> (EventSender, EventReceiver) {
    lines.set_limits(LINE_BYTES, LINE_BYTES);
    let (tx, rx) = mpsc::channel(CAPACITY);
    (
        EventSender {
            tx,
            lines: Arc::clone(&lines),
        },
        EventReceiver { rx, lines },
    )
}

// === impl Event ===

impl Event {
    /// The length of the line the event carries, if it is one.
    fn line_len(&self) -> Option<usize> {
        match self {
            Self::Host {
                event: HostEvent::Line(line),
                ..
            } => Some(line.len()),
            Self::Upstream {
                event: UpstreamEvent::Line(line),
                ..
            } => Some(line.len()),
            _ => None,
        }
    }
}

// === impl EventSender ===

impl EventSender {
    /// Waits until the lines waiting for the loop are within their bound (or
    /// the loop has ended). A reader calls it before it reads each line, so
    /// that a reader held here leaves the rest in its pipe.
    pub async fn room(&self) {
        self.lines.within_soft_limit().await;
    }

    /// Sends an event, waiting while the channel is full.
    ///
    /// # Errors
    ///
    /// [`Closed`] when the loop has ended.
    pub async fn send(&self, event: Event) -> Result<(), Closed> {
        let len = event.line_len();
        if let Some(len) = len {
            self.lines.queued(len);
        }
        self.tx.send(event).await.map_err(|_| {
            if let Some(len) = len {
                self.lines.withdrawn(len);
            }
            Closed
        })
    }

    /// Sends an event from a thread outside the runtime (the store
    /// watcher), blocking it while the channel is full.
    ///
    /// # Errors
    ///
    /// [`Closed`] when the loop has ended.
    pub fn blocking_send(&self, event: Event) -> Result<(), Closed> {
        let len = event.line_len();
        if let Some(len) = len {
            self.lines.queued(len);
        }
        self.tx.blocking_send(event).map_err(|_| {
            if let Some(len) = len {
                self.lines.withdrawn(len);
            }
            Closed
        })
    }

    /// Wakes the loop from a thread outside the runtime without waiting:
    /// when the channel is full the loop turns soon anyway, and looks then.
    pub fn wake(&self) {
        let _ = self.tx.try_send(Event::Reported);
    }

    /// Whether the loop has ended.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

// === impl EventReceiver ===

impl EventReceiver {
    /// The next event, waiting for one; `None` once every sender is gone.
    pub async fn recv(&mut self) -> Option<Event> {
        let event = self.rx.recv().await?;
        self.taken(&event);
        Some(event)
    }

    /// The next event if one is waiting.
    pub fn try_recv(&mut self) -> Option<Event> {
        let event = self.rx.try_recv().ok()?;
        self.taken(&event);
        Some(event)
    }

    /// Ends the channel: senders waiting for room or for a slot go on (and
    /// fail), so nothing waits for a loop that is gone.
    pub fn close(&mut self) {
        self.rx.close();
        self.lines.close();
    }

    fn taken(&self, event: &Event) {
        if let Some(len) = event.line_len() {
            self.lines.written(len);
        }
    }
}
