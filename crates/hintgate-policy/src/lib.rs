//! The pure policy core of hintgate.
//!
//! This crate decides, for one tool call, whether it runs silently, needs a
//! person's approval, or is refused, and explains why. It holds:
//!
//! - [`tool`]: the tool definition model, with the *declared* and *effective*
//!   views of its annotations;
//! - [`config`]: the `hintgate.toml` model and its validation, which reports
//!   every problem with its position ([`diag`]);
//! - [`decide`]: [`Policy::decide`], the verdict and its [`reason`]s, tool
//!   visibility and retry eligibility;
//! - [`name`]: the rule for the tool names the gateway lists and routes;
//! - [`pin`]: the digest of an approved definition and the diff of a changed one;
//! - [`prompt`]: the text a person sees when asked;
//! - [`sanitize`]: the cleaner for descriptions and titles;
//! - [`vars`]: `${VAR}` references, expanded against a caller-supplied source;
//! - [`glob`]: the globs rules use over server and tool names;
//! - [`redact`]: what of a call's arguments the audit log leaves out.
//! - [`hook`]: what the user's decision hook is told, and how its answer is read.
//!
//! What it is **not**: it does no I/O, reads no clock and no environment,
//! spawns nothing and has no async runtime. The gateway, the store and the
//! command line supply every input as a value. CI checks this with
//! `cargo tree`, and the crate's `clippy.toml` bans the standard library's
//! I/O entry points.
//!
//! The rule it exists to keep: **from an untrusted server, annotations may add
//! friction but never remove it.** Trust comes from configuration the user
//! controls, never from the server.
//!
//! ```
//! use hintgate_policy::config::{Profile, Transport, ValidConfig};
//! use hintgate_policy::decide::{Call, Policy, Verdict};
//! use hintgate_policy::tool::{Tool, Trust};
//!
//! let transport = Transport::Stdio { command: "srv".into(), args: vec![], env: Default::default() };
//! let policy = Policy::new(ValidConfig::wrap("srv", transport, Trust::Untrusted, Profile::AskWrites, false));
//! // An untrusted server claims its delete tool only reads.
//! let tool = Tool::from_json(r#"{"name":"delete_all","annotations":{"readOnlyHint":true}}"#).unwrap();
//! let decision = policy.decide(&Call {
//!     server: "srv",
//!     tool: &tool,
//!     pin: Default::default(),
//!     session: Default::default(),
//!     sandbox: Default::default(),
//!     hook: Default::default(),
//! });
//! assert_eq!(decision.verdict, Verdict::Ask);
//! ```
#![forbid(unsafe_code)]

pub mod config;
pub mod decide;
pub mod diag;
pub mod explain;
pub mod glob;
pub mod hook;
pub mod launcher;
pub mod name;
pub mod pin;
pub mod preview;
pub mod prompt;
pub mod reason;
pub mod redact;
pub mod sanitize;
#[cfg(any(test, feature = "test-util"))]
pub mod test_util;
pub mod tool;
pub mod vars;

pub use decide::{Call, Decision, Policy, Verdict};
pub use reason::{Reason, ReasonCode};
pub use tool::Tool;
