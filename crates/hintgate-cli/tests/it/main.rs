//! Tests of the `hintgate` binary: exit codes, output, and the policy corpus
//! run through `hintgate explain --json`.
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed unwrap, index or panic is a failed test"
)]

mod approvals;
mod audit;
mod auth;
mod browser;
mod config_check;
mod conformance;
mod console;
mod corpus;
mod edits;
mod egress;
mod explain;
mod gateway;
mod hooks;
mod host;
mod hostile_http;
mod keys;
mod lint;
mod listen;
mod metrics;
// The network namespace the egress tests make, shared with the proxy's.
#[path = "../../../hintgate-proxy/tests/it/netns.rs"]
mod netns;
mod oauth_oidc;
mod oauth_sdk;
mod packaging;
mod peers;
mod pinning;
mod prepare;
mod previews;
mod read_only;
mod sandbox;
mod scan;
mod ship;
mod soak;
mod standing;
mod start_failure;
mod store;
mod telemetry;
mod util;
mod wrap;
