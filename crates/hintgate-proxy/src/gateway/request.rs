//! The nouns every part of the gateway shares: a host request as it arrived,
//! the method it names, and the handles of host sessions and servers.
//!
//! This module depends on no other part of the gateway, so that the parts
//! can name a request, a session or a server without depending on each
//! other.

use std::sync::Arc;

use serde_json::Value;
use tokio::time::Instant;

use crate::conn::QueueGauge;
use crate::frame::Spans;

/// What the gateway keeps of a host request besides its line (its context,
/// its entry in a table), counted with the line in what it holds of a
/// host's requests.
pub(crate) const REQUEST_OVERHEAD: usize = 1024;

/// A host session's number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct SessionId(pub u32);

/// A server's index in the configuration.
pub(crate) type ServerIdx = usize;

/// A host request, kept whole so that it can be forwarded later as the
/// bytes it arrived as.
#[derive(Debug)]
pub(crate) struct HostRequest {
    /// The session it came from.
    pub session: SessionId,
    /// The line as received.
    pub line: String,
    /// Where its id and params sit in `line`.
    pub spans: Spans,
    /// What it asks for.
    pub method: Method,
    /// The server this request already restarted once, so that a server
    /// failing at start-up is not restarted again and again for it.
    pub restarted: Option<ServerIdx>,
    /// The id to answer under instead of the line's own (raw JSON): a
    /// 2026-07-28 host's retry that answered a server's question takes over
    /// the answer of the call that asked, whose line stays as it was decided.
    pub answer_as: Option<Box<str>>,
    /// How long it may wait for its server to start or list its tools, once
    /// it first had to.
    pub wait_until: Option<Instant>,
    /// The id the host gave, when its transport put the request under
    /// another (raw JSON): what its audit record names.
    pub host_id: Option<Box<str>>,
    /// What it counts for in its session's held requests, until it is
    /// dropped.
    held: Held,
}

/// A host line's part of what the gateway holds of its host's requests,
/// counted by the reader that read it: taken off the gauge when this is
/// dropped (with the line, or with the request made of it once that is
/// answered, refused, timed out or withdrawn), whichever way that happens,
/// so no path can forget it.
#[derive(Debug, Default)]
pub(crate) struct Held(Option<(Arc<QueueGauge>, usize)>);

/// The methods the gateway treats on their own; every other one is routed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Method {
    /// `initialize` (legacy hosts).
    Initialize,
    /// `server/discover` (2026-07-28 hosts).
    Discover,
    /// `ping`.
    Ping,
    /// `tools/list`.
    ToolsList,
    /// `tools/call`: the pipeline.
    ToolsCall,
    /// `subscriptions/listen` (2026-07-28 hosts).
    Listen,
    /// Anything else.
    Other(Box<str>),
}

// === impl SessionId ===

impl SessionId {
    /// The first session (the only one over stdio).
    pub const FIRST: Self = Self(0);
}

// === impl HostRequest ===

impl HostRequest {
    /// A request as it arrived.
    pub fn new(session: SessionId, line: String, spans: Spans, method: Method) -> Self {
        Self {
            session,
            line,
            spans,
            method,
            restarted: None,
            answer_as: None,
            wait_until: None,
            host_id: None,
            held: Held::default(),
        }
    }

    /// Keeps the line's count in what the gateway holds of its host's
    /// requests for as long as the request lives.
    pub fn hold(&mut self, held: Held) {
        self.held = held;
    }

    /// The id its answer goes under, as raw JSON text (`null` when it has
    /// none).
    pub fn id(&self) -> &str {
        if let Some(id) = &self.answer_as {
            return id;
        }
        self.spans
            .id
            .as_ref()
            .and_then(|range| self.line.get(range.clone()))
            .unwrap_or("null")
    }

    /// The params as raw JSON text.
    pub fn params_text(&self) -> Option<&str> {
        self.spans.params(&self.line)
    }

    /// The params as JSON (`null` when absent or not JSON).
    pub fn params(&self) -> Value {
        self.params_text()
            .and_then(|raw| serde_json::from_str(raw).ok())
            .unwrap_or(Value::Null)
    }

    /// The request under another id.
    pub fn with_id(&self, new_id: &str) -> String {
        self.spans.with_id(&self.line, new_id)
    }

    /// The request under another id, with other params.
    pub fn with_id_and_params(&self, new_id: &str, new_params: &str) -> String {
        self.spans
            .with_id_and_params(&self.line, new_id, new_params)
    }
}

// === impl Held ===

impl Held {
    /// What a host line of `len` bytes counts for while it, or the request
    /// made of it, is held.
    pub fn cost(len: usize) -> usize {
        len.saturating_add(REQUEST_OVERHEAD)
    }

    /// The count of a line of `len` bytes its reader added to `gauge`
    /// ([`Held::cost`]), to take off when this drops.
    pub fn counted(gauge: &Arc<QueueGauge>, len: usize) -> Self {
        Self(Some((Arc::clone(gauge), Self::cost(len))))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some((gauge, cost)) = self.0.take() {
            gauge.written(cost);
        }
    }
}

// === impl Method ===

impl Method {
    /// The method of a name.
    pub fn of(name: &str) -> Self {
        match name {
            "initialize" => Self::Initialize,
            "server/discover" => Self::Discover,
            "ping" => Self::Ping,
            "tools/list" => Self::ToolsList,
            "tools/call" => Self::ToolsCall,
            "subscriptions/listen" => Self::Listen,
            other => Self::Other(other.into()),
        }
    }

    /// The method's name.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Initialize => "initialize",
            Self::Discover => "server/discover",
            Self::Ping => "ping",
            Self::ToolsList => "tools/list",
            Self::ToolsCall => "tools/call",
            Self::Listen => "subscriptions/listen",
            Self::Other(name) => name,
        }
    }
}
