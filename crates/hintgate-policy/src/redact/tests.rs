use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::pin::canonical_json;

fn redactor(patterns: &[&str], defaults: bool) -> Redactor {
    Redactor::new(
        &AuditSettings {
            redact: patterns
                .iter()
                .map(|p| Pattern::parse(p).unwrap())
                .collect(),
            redact_defaults: defaults,
            ..AuditSettings::default()
        },
        DigestKey::new([7; 32]),
    )
}

/// What the audit log stores for `arguments`: the production path.
fn written(redactor: &Redactor, arguments: &Value) -> String {
    let mut out = String::new();
    redactor.write_canonical(arguments, &mut out);
    out
}

/// The model the production path is held to: a redacted copy, built by
/// walking the value and replacing each matching member or item whole.
fn redacted_copy(redactor: &Redactor, value: &Value, path: &mut Vec<String>) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, item)| {
                    path.push(key.clone());
                    let redacted = if redactor.redacts(Some(key), path, item) {
                        Value::String(redactor.marker(item))
                    } else {
                        redacted_copy(redactor, item, path)
                    };
                    path.pop();
                    (key.clone(), redacted)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(idx, item)| {
                    path.push(idx.to_string());
                    let redacted = if redactor.redacts(None, path, item) {
                        Value::String(redactor.marker(item))
                    } else {
                        redacted_copy(redactor, item, path)
                    };
                    path.pop();
                    redacted
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The marker `redactor` writes for `value`.
fn marker(redactor: &Redactor, value: Value) -> Value {
    Value::String(redactor.marker(&value))
}

#[test]
fn a_name_the_server_picked_keeps_nothing_out_of_the_log_by_default() {
    // A server that calls its argument `api_token` does not get to keep what
    // the person approved out of the record.
    let arguments = json!({"api_token": "rm -rf / --no-preserve-root", "password": "hunter2"});
    assert_eq!(
        written(&redactor(&[], true), &arguments),
        canonical_json(&arguments)
    );
}

#[test]
fn values_that_look_like_credentials_are_redacted_wherever_they_are_by_default() {
    let redactor = redactor(&[], true);
    let token = "ghp_ZW1EBspxf6wDDsAwfqtxKrSHMetJ1afJAYFV";
    let dsn = "postgres://app:hunter2@db.internal/prod";
    let arguments = json!({"path": "/x", "note": token, "nested": [{"url": dsn, "ok": 1}]});
    assert_eq!(
        written(&redactor, &arguments),
        canonical_json(&json!({
            "path": "/x",
            "note": marker(&redactor, json!(token)),
            "nested": [{"url": marker(&redactor, json!(dsn)), "ok": 1}],
        }))
    );
    // Off, only what the config names is redacted.
    let off = super::tests::redactor(&[], false);
    assert_eq!(written(&off, &arguments), canonical_json(&arguments));
}

#[test]
fn a_marker_keeps_the_length_and_a_digest_under_the_key() {
    let redactor = redactor(&["secret"], false);
    let one = redactor.marker(&json!("héllo wörld"));
    assert!(one.starts_with("[redacted len=11 hmac="), "{one}");
    assert_eq!(one.len(), "[redacted len=11 hmac=]".len() + 16);
    // The same value gives the same marker, so records can be matched; any
    // other value, or the same under another key, another.
    assert_eq!(one, redactor.marker(&json!("héllo wörld")));
    assert_ne!(one, redactor.marker(&json!("héllo wörle")));
    let other_key = Redactor::new(
        &AuditSettings {
            redact: vec![Pattern::parse("secret").unwrap()],
            redact_defaults: false,
            ..AuditSettings::default()
        },
        DigestKey::new([8; 32]),
    );
    assert_ne!(one, other_key.marker(&json!("héllo wörld")));
    // A string and the number it spells are different values.
    assert_ne!(
        redactor.marker(&json!("1234")),
        redactor.marker(&json!(1234))
    );
    // An object is measured by its canonical text.
    assert!(
        redactor
            .marker(&json!({"a": 1}))
            .starts_with("[redacted len=7 ")
    );
}

#[test]
fn pointers_name_one_place_and_globs_any_key_case_insensitively() {
    let redactor = redactor(
        &[
            "/credentials/password",
            "/accounts/*/pin",
            "/list/1",
            "SSN*",
        ],
        false,
    );
    let redacted = written(
        &redactor,
        &json!({
            "credentials": {"user": "me", "password": {"nested": "whole"}},
            "password": "not at the pointer",
            "accounts": [{"pin": 1234, "id": 1}, {"pin": 5678, "id": 2}],
            "list": ["a", "b", "c"],
            "person": {"ssn_number": "078-05-1120", "name": "x"},
        }),
    );
    assert_eq!(
        redacted,
        canonical_json(&json!({
            "credentials": {"user": "me", "password": marker(&redactor, json!({"nested": "whole"}))},
            "password": "not at the pointer",
            "accounts": [{"pin": marker(&redactor, json!(1234)), "id": 1}, {"pin": marker(&redactor, json!(5678)), "id": 2}],
            "list": ["a", marker(&redactor, json!("b")), "c"],
            "person": {"ssn_number": marker(&redactor, json!("078-05-1120")), "name": "x"},
        }))
    );
}

#[test]
fn pointers_unescape() {
    let redactor = redactor(&["/a~1b/~0c"], false);
    assert_eq!(
        written(&redactor, &json!({"token": "t", "a/b": {"~c": 1, "d": 2}})),
        canonical_json(&json!({"token": "t", "a/b": {"~c": marker(&redactor, json!(1)), "d": 2}}))
    );
}

#[test]
fn canonical_writing_matches_redacting_then_serialising() {
    let redactor = redactor(&["/accounts/*/pin", "ssn*"], true);
    let arguments = json!({
        "b": [1, 2.5, "x\u{e9}", "AKIAIOSFODNN7EXAMPLE"],
        "a": {"Token": "t", "keep": null},
        "accounts": [{"pin": 1, "id": 2}],
        "SSN_number": "078",
    });
    let written = written(&redactor, &arguments);
    assert_eq!(
        written,
        canonical_json(&redacted_copy(&redactor, &arguments, &mut Vec::new()))
    );
    let pin = redactor.marker(&json!(1));
    let ssn = redactor.marker(&json!("078"));
    let key = redactor.marker(&json!("AKIAIOSFODNN7EXAMPLE"));
    assert_eq!(
        written,
        format!(
            r#"{{"SSN_number":"{ssn}","a":{{"Token":"t","keep":null}},"accounts":[{{"id":2,"pin":"{pin}"}}],"b":[1,2.5,"xé","{key}"]}}"#
        )
    );
}

#[test]
fn bad_patterns_are_refused() {
    assert_eq!(Pattern::parse("/a~2"), Err(PatternError::BadEscape));
    assert!(matches!(Pattern::parse("[a-"), Err(PatternError::Glob(_))));
    assert!(matches!(Pattern::parse(""), Err(PatternError::Glob(_))));
}

/// Keys that the patterns below match or almost match, in several cases.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("a".to_owned()),
        Just("pin".to_owned()),
        Just("list".to_owned()),
        Just("0".to_owned()),
        Just("1".to_owned()),
        Just("Token".to_owned()),
        Just("api_key".to_owned()),
        Just("SSN_number".to_owned()),
        Just("a/b".to_owned()),
        Just("~c".to_owned()),
        "[a-zA-Z_~/]{0,6}",
    ]
}

/// JSON values over those keys, nested a few levels.
fn arguments() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |n| serde_json::Number::from_f64(n)
            .map(Value::Number)),
        ".{0,8}".prop_map(Value::String),
        Just(Value::String("AKIAIOSFODNN7EXAMPLE".to_owned())),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..6)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// Pointers and key globs that reach into those values.
fn patterns() -> impl Strategy<Value = (Vec<&'static str>, bool)> {
    (
        prop::sample::subsequence(
            vec![
                "/a",
                "/a/*/pin",
                "/list/1",
                "/*/0",
                "/*",
                "/a~1b/~0c",
                "/",
                "ssn*",
                "*a*",
                "pin",
            ],
            0..4,
        ),
        any::<bool>(),
    )
}

proptest! {
    /// The canonical writer writes what serialising a redacted copy gives,
    /// for any arguments and any set of patterns.
    #[test]
    fn the_canonical_writer_writes_the_redacted_copy(
        arguments in arguments(),
        (patterns, defaults) in patterns(),
    ) {
        let redactor = redactor(&patterns, defaults);
        prop_assert_eq!(
            written(&redactor, &arguments),
            canonical_json(&redacted_copy(&redactor, &arguments, &mut Vec::new()))
        );
    }
}
