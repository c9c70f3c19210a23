//! The decision hook's answer, read from arbitrary bytes.
//!
//! Checked: reading never panics; whatever is read is one answer, a
//! failure included; a decided answer's reason is one line with nothing
//! invisible in it and at most the documented length; a line over the
//! limit is a failure; and an answer that reads as a decision reads the
//! same again when written back.
#![no_main]

use hintgate_policy::hook::{MAX_ANSWER_BYTES, MAX_REASON_CHARS, OwnedAnswer, Reply};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|line: &str| {
    let reply = Reply::parse(line);
    if line.len() > MAX_ANSWER_BYTES {
        assert!(matches!(reply.answer, OwnedAnswer::Failed(_)), "{line:?}");
    }
    match &reply.answer {
        OwnedAnswer::Decided(verdict, reason) => {
            assert!(!reason.is_empty(), "{line:?}");
            assert!(reason.chars().count() <= MAX_REASON_CHARS + 1, "{line:?}");
            assert!(
                !reason.chars().any(|ch| ch.is_control() || matches!(ch, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')),
                "{line:?}: {reason:?}"
            );
            let verdict = match verdict {
                hintgate_policy::Verdict::Allow => "allow",
                hintgate_policy::Verdict::Ask => "ask",
                hintgate_policy::Verdict::Deny => "deny",
            };
            let again = serde_json::json!({"id": reply.id, "verdict": verdict, "reason": reason});
            assert_eq!(
                Reply::parse(&again.to_string()).answer,
                reply.answer,
                "{line:?}"
            );
        }
        OwnedAnswer::Abstain | OwnedAnswer::Failed(_) => {}
    }
});
