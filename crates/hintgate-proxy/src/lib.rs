//! The hintgate gateway: an MCP proxy that decides every tool call.
//!
//! The host talks to the gateway on one line-delimited stream (stdio); the
//! gateway talks to each upstream server, a child process, on another. One
//! event loop ([`gateway`]) owns all session state: it routes every message,
//! answers `tools/list` with the visible tools only, and puts every
//! `tools/call` through [`hintgate_policy::Policy::decide`] before it may
//! reach a server.
//!
//! What it is not: it makes no decisions of its own (the policy core does),
//! and it stores nothing across runs yet (the store comes later). It speaks
//! both protocol eras to the host (legacy `initialize` up to 2025-11-25, and
//! 2026-07-28) and the legacy era to its servers.
//!
//! Layout:
//! - [`frame`]: parsing a line just far enough to route it, and splicing a
//!   new id or params into it so that everything else passes byte for byte;
//! - [`conn`]: reading lines under a size limit and writing them in batches;
//! - [`upstream`]: child processes and their reader and writer tasks;
//! - [`upstream_http`]: Streamable HTTP servers, as the same stream of lines;
//! - [`gateway`]: the event loop and the session state;
//! - [`seal`]: the sealed, single-use `requestState` of 2026-07-28 questions;
//! - [`probe`]: the small client `hintgate lint` uses to list one server's tools.
#![forbid(unsafe_code)]

pub mod conn;
pub mod event;
pub mod frame;
pub mod gateway;
pub mod identity;
pub mod json;
pub mod probe;
pub mod seal;
pub mod stdio;
pub mod upstream;
pub mod upstream_http;

pub use gateway::{Mode, Observed, RunError, Settings, run};
pub use upstream::{Connector, Link, LinkTarget, SystemConnector};
