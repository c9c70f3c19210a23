//! The hintgate gateway: an MCP proxy that decides every tool call.
//!
//! A host talks to the gateway on a line-delimited stream (stdio); the
//! gateway talks to each upstream server on another (a child process, a
//! Streamable HTTP endpoint, or in tests an in-memory pipe). One event loop
//! ([`gateway`]) routes every message, answers `tools/list` with the visible
//! tools only, and puts every `tools/call` through one pipeline (resolve,
//! definition ready, [`hintgate_policy::decide::Policy::decide`], validate,
//! ask, audit, forward) before it may reach a server. With a store, each
//! call's audit record is durable before the server sees the call.
//!
//! What it is not: it makes no decision of its own (the policy core does),
//! and it keeps nothing across runs itself (`hintgate-store` does: pins,
//! standing approvals, the approval queue and the audit log). It speaks both
//! protocol eras on both sides (legacy `initialize` up to 2025-11-25, and
//! 2026-07-28).
//!
//! Layout:
//! - [`frame`]: parsing a line just far enough to route it, and splicing a
//!   new id or params into it so that everything else passes byte for byte;
//! - [`json`]: repeated keys found in one scan, and objects rewritten member
//!   by member so that every other member keeps its bytes;
//! - [`conn`]: reading lines under a size limit and writing them in batches,
//!   counting what waits to be written ([`QueueGauge`]);
//! - [`upstream`]: how a server is reached ([`Connector`], [`Link`]);
//! - [`tail`]: a stdio server's last lines of standard error and how it
//!   ended, for the reason its calls fail with;
//! - [`upstream_http`]: Streamable HTTP servers, as the same stream of lines
//!   (their event streams read under a bound by a private `sse` module);
//! - [`stdio`]: the host's stdin and stdout, read from the event loop;
//! - [`gateway`]: the event loop, its parts and the pipeline;
//! - [`hosts`]: host sessions opened while the gateway runs (the
//!   Streamable HTTP host side opens one per host session);
//! - [`identity`]: what a server's command line resolves to;
//! - [`preview`]: the file previews the gateway computes itself (what a
//!   write will change, read under the directories a server serves);
//! - [`seal`]: the sealed, single-use `requestState` of 2026-07-28 questions;
//! - [`metrics`]: what the gateway counts for a dashboard, rendered in
//!   the Prometheus text format;
//! - [`probe`]: the small client `hintgate lint` and `scan` use to list one
//!   server's tools.
#![forbid(unsafe_code)]

pub mod conn;
pub mod egress;
pub mod event;
pub mod frame;
pub mod gateway;
pub(crate) mod hook;
pub mod hosts;
pub mod identity;
pub mod json;
pub mod metrics;
pub mod prepare;
pub mod preview;
pub mod probe;
pub mod seal;
mod sse;
pub mod stdio;
pub mod tail;
pub mod telemetry;
pub mod upstream;
pub mod upstream_http;
pub mod upstream_oauth;
pub mod versions;

/// Internals the fuzz targets under `fuzz/` exercise, behind the `fuzzing`
/// feature; not part of the crate's interface.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::sse::{LINE_SLACK, SseDecoder, SseError};
}

pub use conn::QueueGauge;
pub use gateway::{
    Gauges, Mode, Observed, RunError, Settings, run, run_until, run_with_gauge, run_with_gauges,
    serve,
};
pub use hosts::{HostConn, HostPort, HostSink};
pub use metrics::Metrics;
pub use upstream::{Connector, Link, LinkTarget, SystemConnector};
