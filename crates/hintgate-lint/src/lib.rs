//! The pure lint core of hintgate: what is wrong with a server's tool definitions.
//!
//! `hintgate lint` connects to a server (in `hintgate-proxy`), lists its
//! tools and hands them here as a [`Listing`]. This crate:
//!
//! - runs the checks ([`check::lint`]): missing or implicit hints, hints that
//!   contradict each other or the tool's name, description or arguments,
//!   hidden characters, instructions aimed at the model, references to
//!   secrets, schema and name problems, and what calling read-only tools
//!   showed;
//! - applies the server's `hintgate.lint.toml` ([`suppress::Suppressions`]);
//! - renders the result ([`render::Report`]) as a table, JSON or SARIF 2.1.0.
//!
//! Every [`Finding`] has a stable kebab-case [`Code`] (documented in
//! `docs/diagnostics.md`), a [`Severity`], the tool it is about, a message
//! and a fix.
//!
//! What it is **not**: it does no I/O, reads no clock and no environment and
//! has no async runtime; like `hintgate-policy`, its `clippy.toml` bans the
//! standard library's I/O entry points and `scripts/test` checks its
//! dependencies with `cargo tree`. It never decides a call: the policy core
//! does that.
//!
//! ```
//! use hintgate_lint::{Code, Listing, Suppressions, lint};
//! use serde_json::json;
//!
//! let listing = Listing {
//!     tools: vec![json!({
//!         "name": "delete_file",
//!         "title": "Delete File",
//!         "description": "Deletes a file.",
//!         "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
//!         "annotations": {"readOnlyHint": false, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false},
//!     })],
//!     ..Listing::default()
//! };
//! let outcome = lint(&listing, &Suppressions::default());
//! assert_eq!(outcome.findings[0].code, Code::DestructiveNameNotDestructive);
//! ```
#![forbid(unsafe_code)]

pub mod check;
pub mod finding;
pub mod render;
pub mod suppress;
pub mod words;

pub use check::{CallCheck, CallOutcome, Listing};
pub use finding::{Code, Finding, Severity};
pub use render::Report;
pub use suppress::{Suppressed, Suppressions, SuppressionsError};

/// What lint concluded about one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The findings that stand, unused suppressions included.
    pub findings: Vec<Finding>,
    /// The findings a suppression silenced, with its reason.
    pub suppressed: Vec<Suppressed>,
}

/// Runs every check over `listing` and applies `suppressions`.
pub fn lint(listing: &Listing, suppressions: &Suppressions) -> Outcome {
    let (findings, suppressed) = suppressions.apply(check::lint(listing));
    Outcome {
        findings,
        suppressed,
    }
}
