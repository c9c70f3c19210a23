//! What the gateway's event loop receives.

/// One event for the gateway's single event loop.
#[derive(Debug)]
pub enum Event {
    /// Something from the host.
    Host(HostEvent),
    /// An audit entry that holds a call is durable (its sequence number), or
    /// could not be written.
    Audited {
        /// The token the entry was appended with.
        token: u64,
        /// The entry's sequence number, or why it failed.
        result: Result<u64, String>,
    },
    /// A person answered a call waiting in the approval queue.
    Answered {
        /// The call's number in the queue.
        id: u64,
        /// The answer.
        answer: hintgate_store::Answer,
    },
    /// Something from an upstream process; `generation` tells processes of
    /// the same server apart across restarts.
    Upstream {
        /// The server's index.
        idx: usize,
        /// Which start of that server.
        generation: u64,
        /// What happened.
        event: UpstreamEvent,
    },
}

/// Something from the host.
#[derive(Debug)]
pub enum HostEvent {
    /// One line.
    Line(String),
    /// A line over the limit (read and thrown away).
    TooLong,
    /// The host closed its side: the session is over.
    Closed,
}

/// Something from an upstream process.
#[derive(Debug)]
pub enum UpstreamEvent {
    /// One line.
    Line(String),
    /// The process broke the protocol (a giant line, bytes that are not
    /// UTF-8); it is stopped and restarted on the next call.
    Broken(String),
    /// The process closed its output (it exited or crashed).
    Closed(String),
}
