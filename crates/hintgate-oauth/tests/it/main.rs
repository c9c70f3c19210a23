//! hintgate-oauth's integration tests: the flow against a scripted HTTP
//! client and clock (`flow`), and the official conformance suite's client
//! authorization scenarios against a client built on the crate
//! (`conformance`).
#![expect(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

mod conformance;
mod flow;
mod guard;
