//! Tests of the `hintgate` binary: exit codes, output, and the policy corpus
//! run through `hintgate explain --json`.
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

mod config_check;
mod corpus;
mod explain;
mod util;
