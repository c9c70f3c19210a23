//! What happens to a call that failed or could not be sent: one pure
//! function, [`after_failure`], over the facts that decide it.
//!
//! Design §4.5: a call sent to a server that timed out or dropped the
//! connection is retried once, automatically, only when the server is
//! trusted and the tool effectively read-only or idempotent; otherwise the
//! failure is reported and the call never replayed. An idempotency key the
//! call holds the store's claim on widens the rule (ARCHITECTURE.md, the
//! call path and the store): the server can tell the retry apart, so a
//! trusted server's keyed call is retried once too, whatever its hints.
//!
//! A call that was decided but never sent (its server stopped or started
//! again between the decision and the send) never reached the server, so
//! §4.5 does not bound it: it goes through the pipeline again, a few times
//! at most ([`MAX_UNSENT`]).

use super::call::Outcome;

/// A server that restarts this often between a decision and its send is not
/// going to take the call.
pub(crate) const MAX_UNSENT: u32 = 3;

/// What failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The call was sent and not answered: a timeout, a crash, a server
    /// that stopped reading its input.
    Failed,
    /// The call was not sent: its server stopped or started again since
    /// the call was decided.
    Unsent,
}

/// The facts that decide what happens to a failed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FailedCall {
    /// What failed.
    pub failure: Failure,
    /// The server is trusted (`trust = "trusted"`).
    pub trusted: bool,
    /// The tool is effectively read-only or idempotent (its hints as the
    /// gateway vouches for them: [`hintgate_policy::decide::Policy::repeatable`]).
    pub repeatable: bool,
    /// The call holds the store's claim on its idempotency key (it was sent
    /// with it).
    pub key_claimed: bool,
    /// Attempts made before this one.
    pub attempt: u32,
}

/// What happens to a failed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterFailure {
    /// Record `outcome` for this attempt, and run the call through the
    /// pipeline again, from its top.
    Retry(Outcome),
    /// Record `outcome`, and tell the host: the reason, then `note`.
    Report {
        /// The attempt's outcome.
        outcome: Outcome,
        /// What the host is told after the reason.
        note: &'static str,
    },
}

/// What happens to a failed call (see the module's documentation).
pub(crate) const fn after_failure(call: FailedCall) -> AfterFailure {
    match call.failure {
        Failure::Unsent if call.attempt >= MAX_UNSENT => AfterFailure::Report {
            outcome: Outcome::Unsent,
            note: "The call was not sent.",
        },
        Failure::Unsent => AfterFailure::Retry(Outcome::Unsent),
        Failure::Failed => {
            let first = call.attempt == 0;
            if first && call.trusted && (call.repeatable || call.key_claimed) {
                return AfterFailure::Retry(Outcome::FailedRetried);
            }
            let note = if call.trusted && call.repeatable {
                "The call was not retried: it already failed once."
            } else {
                "The call was not retried: hintgate retries only read-only or idempotent tools of trusted servers."
            };
            AfterFailure::Report {
                outcome: Outcome::Failed,
                note,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONCE: &str = "The call was not retried: it already failed once.";
    const ONLY: &str = "The call was not retried: hintgate retries only read-only or idempotent tools of trusted servers.";
    const NOT_SENT: &str = "The call was not sent.";

    fn report(outcome: Outcome, note: &'static str) -> AfterFailure {
        AfterFailure::Report { outcome, note }
    }

    #[test]
    fn a_failed_call_is_retried_once_only_where_design_4_5_or_its_key_allows() {
        use Failure::Failed;
        let retried = AfterFailure::Retry(Outcome::FailedRetried);
        // (trusted, repeatable, key claimed, attempt) → what happens
        let table = [
            // §4.5: a trusted server's read-only or idempotent tool, once.
            (true, true, false, 0, retried),
            (true, true, false, 1, report(Outcome::Failed, ONCE)),
            (true, true, false, 2, report(Outcome::Failed, ONCE)),
            // A write of a trusted server is never replayed...
            (true, false, false, 0, report(Outcome::Failed, ONLY)),
            (true, false, false, 1, report(Outcome::Failed, ONLY)),
            // ...but for one retry with the key it was sent with.
            (true, false, true, 0, retried),
            (true, false, true, 1, report(Outcome::Failed, ONLY)),
            (true, true, true, 0, retried),
            (true, true, true, 1, report(Outcome::Failed, ONCE)),
            // An untrusted server's calls are never retried, whatever its
            // hints say and whatever key the call holds.
            (false, true, false, 0, report(Outcome::Failed, ONLY)),
            (false, false, false, 0, report(Outcome::Failed, ONLY)),
            (false, false, true, 0, report(Outcome::Failed, ONLY)),
            (false, true, true, 0, report(Outcome::Failed, ONLY)),
            (false, true, true, 1, report(Outcome::Failed, ONLY)),
        ];
        for (trusted, repeatable, key_claimed, attempt, expected) in table {
            let call = FailedCall {
                failure: Failed,
                trusted,
                repeatable,
                key_claimed,
                attempt,
            };
            assert_eq!(after_failure(call), expected, "{call:?}");
        }
    }

    #[test]
    fn an_unsent_call_goes_through_the_pipeline_again_a_few_times_whatever_its_tool() {
        for (trusted, repeatable, key_claimed) in [
            (false, false, false),
            (true, false, false),
            (true, true, true),
            (false, true, true),
        ] {
            for attempt in 0..=MAX_UNSENT + 1 {
                let call = FailedCall {
                    failure: Failure::Unsent,
                    trusted,
                    repeatable,
                    key_claimed,
                    attempt,
                };
                let expected = if attempt < MAX_UNSENT {
                    AfterFailure::Retry(Outcome::Unsent)
                } else {
                    report(Outcome::Unsent, NOT_SENT)
                };
                assert_eq!(after_failure(call), expected, "{call:?}");
            }
        }
    }
}
