//! The gateway in-process: its pipeline tested against scripted hosts,
//! servers and stores over in-memory pipes.
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed unwrap, index or panic is a failed test"
)]

mod bounds;
mod crossing;
mod edits;
mod egress_netns;
mod harness;
mod hooks;
mod hostile;
mod http;
mod keys;
mod names;
mod netns;
mod pipeline;
mod previewers;
mod read_only;
mod runtime;
mod start_failure;
mod subscriptions;
mod taint;
