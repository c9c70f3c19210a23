//! A stored record body, read strictly: JSON with no key repeated at any
//! depth, written canonically (sorted keys, no whitespace, as
//! [`canonical_json`] writes it).
//!
//! `serde_json` keeps the last of two equal keys, and other readers (SQLite's
//! `json_extract`, PostgreSQL's `jsonb`) may keep another; a body read
//! differently by different readers could say one thing to a query and
//! another to `hintgate log`. So a body is kept only as canonical JSON text,
//! the link of the chain covers that text byte for byte, and a body that is
//! anything else is reported as malformed, naming the repeated key.

use std::cell::RefCell;

use serde::Serialize;
use serde::de::{DeserializeSeed, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use hintgate_policy::pin::canonical_json;

/// Why a stored record cannot be read as the gateway writes records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "problem", rename_all = "kebab-case")]
pub enum Malformed {
    /// A kind this hintgate does not know.
    UnknownKind {
        /// The stored kind.
        kind: String,
    },
    /// The body is not JSON.
    NotJson,
    /// The body repeats a key in one object.
    DuplicateKey {
        /// The repeated key.
        key: String,
    },
    /// The body is JSON, but not written canonically.
    NotCanonical,
    /// The body is canonical JSON, but not the fields hintgate writes for
    /// a record of its kind (a grant, a revocation, an accepted rollback).
    UnexpectedBody {
        /// The stored kind.
        kind: String,
    },
}

impl Malformed {
    /// Its stable code, the same as the [`Problem`](crate::Problem) that
    /// `verify` reports for it.
    #[must_use]
    pub const fn code(&self) -> &'static str {
        match self {
            Self::UnknownKind { .. } => "unknown-kind",
            Self::NotJson => "not-json",
            Self::DuplicateKey { .. } => "duplicate-key",
            Self::NotCanonical => "not-canonical",
            Self::UnexpectedBody { .. } => "unexpected-body",
        }
    }
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::UnknownKind { kind } => write!(f, "its kind `{kind}` is not one hintgate writes"),
            Self::NotJson => f.write_str("its body is not JSON"),
            Self::DuplicateKey { key } => write!(f, "its body repeats the key `{key}`"),
            Self::NotCanonical => f.write_str("its body is not written as canonical JSON"),
            Self::UnexpectedBody { kind } => write!(
                f,
                "its body is not what hintgate writes for a `{kind}` record"
            ),
        }
    }
}

/// A stored body as a value, and what is wrong with it. A body that cannot
/// be read strictly is given as the text it is (a JSON string), so a reader
/// shows it as stored and never takes a guess at what it says.
pub(crate) fn read(text: &str) -> (Value, Option<Malformed>) {
    let repeated = RefCell::new(None);
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let parsed = Strict {
        repeated: &repeated,
    }
    .deserialize(&mut deserializer)
    .and_then(|value| deserializer.end().map(|()| value));
    match parsed {
        Ok(value) if canonical_json(&value) == text => (value, None),
        Ok(value) => (value, Some(Malformed::NotCanonical)),
        Err(_) => {
            let problem = match repeated.into_inner() {
                Some(key) => Malformed::DuplicateKey { key },
                None => Malformed::NotJson,
            };
            (Value::String(text.to_owned()), Some(problem))
        }
    }
}

/// Builds a [`Value`] and fails on the first key an object repeats
/// (compared after escapes are decoded), which it keeps in `repeated`.
#[derive(Clone, Copy)]
struct Strict<'a> {
    repeated: &'a RefCell<Option<String>>,
}

impl<'de> DeserializeSeed<'de> for Strict<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E: serde::de::Error>(self, value: i64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_f64<E: serde::de::Error>(self, value: f64) -> Result<Value, E> {
        Number::from_f64(value)
            .map(Value::Number)
            .ok_or_else(|| E::custom("a number JSON cannot hold"))
    }

    fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                let err = A::Error::custom(format_args!("the key `{key}` is repeated"));
                *self.repeated.borrow_mut() = Some(key);
                return Err(err);
            }
            let value = map.next_value_seed(self)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    #[test]
    fn a_canonical_body_reads_as_its_value() {
        let text = r#"{"a":[1,-2,1.5,"é\n",null,true],"b":{"c":12345678901234567890}}"#;
        assert_eq!(
            read(text),
            (
                json!({"a": [1, -2, 1.5, "é\n", null, true], "b": {"c": 12_345_678_901_234_567_890_u64}}),
                None
            )
        );
    }

    #[test]
    fn a_repeated_key_at_any_depth_is_named() {
        for (text, key) in [
            (
                r#"{"verdict":"deny","server":"fs","verdict":"allow"}"#,
                "verdict",
            ),
            (r#"{"a":{"b":[{"c":1,"c":2}]}}"#, "c"),
            // Compared after escapes are decoded.
            (r#"{"tool":"x","\u0074ool":"y"}"#, "tool"),
        ] {
            let (value, problem) = read(text);
            assert_eq!(
                problem,
                Some(Malformed::DuplicateKey {
                    key: key.to_owned()
                }),
                "{text}"
            );
            assert_eq!(value, Value::String(text.to_owned()), "kept as stored");
        }
    }

    #[test]
    fn text_that_is_not_canonical_json_is_named() {
        for text in [r#"{"b":1,"a":2}"#, r#"{"a": 1}"#, r#"{"a":1.0e0}"#, "[1] "] {
            assert_eq!(read(text).1, Some(Malformed::NotCanonical), "{text}");
        }
        for text in ["", "{", "{\"a\":1}x", "not json"] {
            assert_eq!(read(text).1, Some(Malformed::NotJson), "{text}");
        }
    }

    proptest! {
        /// Whatever the gateway writes (canonical JSON of any value) reads
        /// back as that value, without a problem.
        #[test]
        fn canonical_text_reads_back_cleanly(value in crate::audit::test_values::json_value()) {
            let text = canonical_json(&value);
            let (read_back, problem) = read(&text);
            prop_assert_eq!(problem, None);
            prop_assert_eq!(canonical_json(&read_back), text);
        }
    }
}
