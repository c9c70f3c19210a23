//! What the gateway's event loop receives.

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
}

/// Something from a host.
#[derive(Debug)]
pub enum HostEvent {
    /// One line.
    Line(String),
    /// A line over the limit (read and thrown away).
    TooLong,
    /// The host closed its side: the session is over.
    Closed,
    /// The host read enough of what waited for it to be within the queue's
    /// bound again, after it was past it.
    Drained,
}

/// Something from an upstream server.
#[derive(Debug)]
pub enum UpstreamEvent {
    /// One line.
    Line(String),
    /// The server broke the protocol (a giant line, bytes that are not
    /// UTF-8); it is stopped and restarted on the next call.
    Broken(String),
    /// The server closed its output (it exited or crashed).
    Closed(String),
}
