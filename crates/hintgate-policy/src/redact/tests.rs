use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::pin::canonical_json;

fn redactor(patterns: &[&str], defaults: bool) -> Redactor {
    Redactor::new(&AuditSettings {
        redact: patterns
            .iter()
            .map(|p| Pattern::parse(p).unwrap())
            .collect(),
        redact_defaults: defaults,
        key_file: None,
    })
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
                    let redacted = if redactor.key_matches(key) || redactor.pointer_matches(path) {
                        Value::String(REDACTED.to_owned())
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
                    let redacted = if redactor.pointer_matches(path) {
                        Value::String(REDACTED.to_owned())
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

#[test]
fn secret_looking_keys_are_redacted_at_any_depth_by_default() {
    let arguments =
        json!({"path": "/x", "apiKey": "k", "nested": [{"Authorization": "Bearer t", "ok": 1}]});
    assert_eq!(
        written(&Redactor::default(), &arguments),
        canonical_json(
            &json!({"path": "/x", "apiKey": "[redacted]", "nested": [{"Authorization": "[redacted]", "ok": 1}]})
        )
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
            "credentials": {"user": "me", "password": "[redacted]"},
            "password": "not at the pointer",
            "accounts": [{"pin": "[redacted]", "id": 1}, {"pin": "[redacted]", "id": 2}],
            "list": ["a", "[redacted]", "c"],
            "person": {"ssn_number": "[redacted]", "name": "x"},
        }))
    );
}

#[test]
fn defaults_can_be_turned_off_and_pointers_unescape() {
    let redactor = redactor(&["/a~1b/~0c"], false);
    assert_eq!(
        written(&redactor, &json!({"token": "t", "a/b": {"~c": 1, "d": 2}})),
        canonical_json(&json!({"token": "t", "a/b": {"~c": "[redacted]", "d": 2}}))
    );
}

#[test]
fn canonical_writing_matches_redacting_then_serialising() {
    let redactor = redactor(&["/accounts/*/pin", "ssn*"], true);
    let arguments = json!({
        "b": [1, 2.5, "x\u{e9}"],
        "a": {"Token": "t", "keep": null},
        "accounts": [{"pin": 1, "id": 2}],
        "SSN_number": "078",
    });
    let written = written(&redactor, &arguments);
    assert_eq!(
        written,
        canonical_json(&redacted_copy(&redactor, &arguments, &mut Vec::new()))
    );
    assert_eq!(
        written,
        r#"{"SSN_number":"[redacted]","a":{"Token":"[redacted]","keep":null},"accounts":[{"id":2,"pin":"[redacted]"}],"b":[1,2.5,"xé"]}"#
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
