//! Integration tests of the policy core: one binary, one module per kind.

mod corpus;
mod invariants;
mod peers;
mod snapshots;
mod util;
