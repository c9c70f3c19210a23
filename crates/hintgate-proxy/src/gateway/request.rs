//! The nouns every part of the gateway shares: a host request as it arrived,
//! the method it names, and the handles of host sessions and servers.
//!
//! This module depends on no other part of the gateway, so that the parts
//! can name a request, a session or a server without depending on each
//! other.

use serde_json::Value;
use tokio::time::Instant;

use crate::frame::Spans;

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
}

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
        }
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
