//! Integration tests of the policy core: one binary, one module per kind.
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::disallowed_methods,
    reason = "test code: a failed unwrap is a failed test, and tests read their cases from disk"
)]

mod corpus;
mod invariants;
mod peers;
mod snapshots;
mod util;
