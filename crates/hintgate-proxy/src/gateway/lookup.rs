//! What a step reads of the gateway's state and never changes: the policy,
//! the servers' names, the catalog, the sessions, the journal's redaction
//! and the sealer.
//!
//! The steps that only look things up (what a call's prompt and record
//! show, its preview, the facts it is decided on, a server's questions
//! marked as its own) are methods of [`Lookup`], a view borrowed from the
//! gateway for one step, so that they can neither send nor change anything;
//! each is written in the file of the part it belongs to.

use hintgate_policy::decide::Policy;

use super::Gateway;
use super::catalog::Catalog;
use super::journal::Journal;
use super::session::Sessions;
use super::upstreams::Upstreams;
use crate::seal::Sealer;

/// A read-only view of the gateway's state, for the steps that only look
/// things up.
pub(crate) struct Lookup<'a> {
    pub(super) policy: &'a Policy,
    pub(super) upstreams: &'a Upstreams,
    pub(super) catalog: &'a Catalog,
    pub(super) sessions: &'a Sessions,
    pub(super) journal: &'a Journal,
    pub(super) sealer: &'a Sealer,
}

// === impl Gateway ===

impl Gateway {
    /// The gateway's state as the steps that only read it see it.
    pub(super) fn lookup(&self) -> Lookup<'_> {
        Lookup {
            policy: &self.policy,
            upstreams: &self.upstreams,
            catalog: &self.catalog,
            sessions: &self.sessions,
            journal: &self.journal,
            sealer: &self.sealer,
        }
    }
}
