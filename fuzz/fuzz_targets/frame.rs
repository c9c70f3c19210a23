//! Framing and message parsing, in both directions.
//!
//! The first byte says which side wrote the line (even: the host, odd: a
//! server); the rest is the line. Each line goes through the checks the
//! gateway makes on that side, then through the splices the gateway makes
//! when it forwards a message under its own id. Checked:
//!
//! - nothing panics;
//! - the one-scan duplicate-key finder agrees with the parsing checker on
//!   every text that is JSON;
//! - a message given a new id parses again, under exactly that id (one `id`
//!   member, not two), with its kind and method kept;
//! - a response given result fields parses again under the new id.
#![no_main]

use hintgate_proxy::frame::{Kind, Message};
use hintgate_proxy::json::{self, JsonError};
use libfuzzer_sys::fuzz_target;

/// The gateway's default `max_json_depth`.
const MAX_DEPTH: usize = 64;

fuzz_target!(|data: &[u8]| {
    let Some((&side, rest)) = data.split_first() else {
        return;
    };
    let Ok(line) = std::str::from_utf8(rest) else {
        return;
    };
    let from_host = side % 2 == 0;

    let _ = json::members(line);
    let _ = json::inexact_integer(line);
    agree_on_duplicates(line);

    if json::check_depth(line, MAX_DEPTH).is_err() {
        return;
    }
    // A host's line must not repeat a key; a server's is parsed as it is.
    if from_host && json::find_duplicate_key_within(line, MAX_DEPTH).is_err() {
        return;
    }
    let Ok(message) = Message::parse(line) else {
        return;
    };
    let kind = message.kind();
    let method = message.method().to_owned();

    let new_id = "\"hintgate-7\"";
    for spliced in [
        message.with_id(new_id),
        message.spans().with_id(line, new_id),
    ] {
        let again = Message::parse(&spliced)
            .unwrap_or_else(|err| panic!("{line:?} under a new id: {spliced:?}: {err}"));
        assert_eq!(again.id_text(), new_id, "{line:?} -> {spliced:?}");
        assert_eq!(again.method(), method, "{line:?} -> {spliced:?}");
        if kind != Kind::Notification {
            assert_eq!(again.kind(), kind, "{line:?} -> {spliced:?}");
        }
    }

    match kind {
        Kind::Request | Kind::Notification => {
            let params = r#"{"name":"x","arguments":{}}"#;
            for spliced in [
                message.with_id_and_params(new_id, params),
                message.spans().with_id_and_params(line, new_id, params),
            ] {
                let again = Message::parse(&spliced)
                    .unwrap_or_else(|err| panic!("{line:?} with new params: {spliced:?}: {err}"));
                assert_eq!(again.id_text(), new_id, "{line:?} -> {spliced:?}");
                let has_params = json::members(line)
                    .is_ok_and(|found| found.iter().any(|member| member.key == "params"));
                if has_params {
                    assert_eq!(again.params, Some(params));
                }
            }
        }
        Kind::Response => {
            // What the gateway adds for a 2026-07-28 host, only where the
            // result does not say it already.
            let present = message
                .result
                .and_then(|raw| json::members(raw).ok())
                .unwrap_or_default();
            if !present.iter().any(|member| member.key == "resultType") {
                let spliced =
                    message.with_id_and_result_fields(new_id, r#""resultType":"complete""#);
                let again = Message::parse(&spliced)
                    .unwrap_or_else(|err| panic!("{line:?} with fields: {spliced:?}: {err}"));
                assert_eq!(again.id_text(), new_id, "{line:?} -> {spliced:?}");
            }
        }
    }
});

/// The one-scan finder and the parsing checker name the same repeated key
/// (or none) in a text that is JSON.
fn agree_on_duplicates(text: &str) {
    if serde_json::from_str::<serde_json::Value>(text).is_err() {
        return;
    }
    let slow = json::check_unique_keys(text);
    let fast = json::find_duplicate_key(text);
    let repeated = |found: &Result<(), JsonError>| match found {
        Err(JsonError::DuplicateKey { key, .. }) => Some(key.clone()),
        Err(JsonError::ReservedKey) => Some(json::RAW_VALUE_KEY.to_owned()),
        _ => None,
    };
    assert_eq!(
        repeated(&slow),
        repeated(&fast),
        "{text:?}: {slow:?} / {fast:?}"
    );
}
