//! The arguments a person edits a queued call to before approving it
//! (`hintgate approvals approve ID --arguments FILE`, the web console), read
//! one way only.
//!
//! Whoever answers and the gateway that runs the call read an edit with the
//! same rules: one JSON object, no key repeated at any depth, no integer
//! beyond 64 bits (which a reader would round), no `_meta` (the protocol's
//! key, never an argument an edit may add), at most [`MAX_EDIT_BYTES`]. The
//! person's text is stored as canonical JSON ([`read`]), and the gateway
//! takes only canonical text ([`read_stored`]): what it checks, decides,
//! shows, records and sends is those bytes.
//!
//! [`check_schema`] checks an edit against the tool's input schema, which
//! the gateway puts in the queue entry's details (`input_schema`, under the
//! entry's seal) so that an edit that does not fit is refused before it is
//! stored, and changes nothing.

use serde_json::{Map, Value};

use hintgate_policy::pin::canonical_json;

/// The largest edit read, in bytes.
pub const MAX_EDIT_BYTES: usize = 1 << 20;

/// The key an edit may not set.
const RESERVED: &str = "_meta";

/// Why an edit is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    /// Larger than [`MAX_EDIT_BYTES`].
    #[error("the edited arguments are larger than {MAX_EDIT_BYTES} bytes")]
    TooLarge,
    /// Not one JSON value.
    #[error("the edited arguments are not JSON")]
    NotJson,
    /// An object repeats a key.
    #[error("the edited arguments repeat the key `{0}` in one object")]
    DuplicateKey(String),
    /// JSON, but not an object.
    #[error("the edited arguments are not a JSON object (a tool's arguments are one)")]
    NotObject,
    /// An integer beyond 64 bits.
    #[error(
        "the edited arguments hold the integer {0}, too large to be read exactly: what hintgate checks could differ from what the server reads"
    )]
    InexactInteger(String),
    /// The edit sets `_meta`.
    #[error(
        "the edited arguments set `_meta`, which is the protocol's and not an argument: an edit changes the tool's arguments only"
    )]
    Reserved,
    /// Stored text that is not canonical JSON (not written by hintgate).
    #[error("the stored edit is not canonical JSON, as hintgate writes it")]
    NotCanonical,
    /// The edit does not match the tool's input schema.
    #[error("the edited arguments do not match the tool's input schema: {0}")]
    Schema(String),
}

impl EditError {
    /// Its stable code (`docs/diagnostics.md`).
    #[must_use]
    pub const fn code(&self) -> &'static str {
        match self {
            Self::TooLarge => "edit-too-large",
            Self::NotJson => "edit-not-json",
            Self::DuplicateKey(_) => "edit-duplicate-key",
            Self::NotObject => "edit-not-object",
            Self::InexactInteger(_) => "edit-inexact-integer",
            Self::Reserved => "edit-reserved-key",
            Self::NotCanonical => "edit-not-canonical",
            Self::Schema(_) => "edit-schema",
        }
    }
}

/// An edit, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edited {
    /// The arguments.
    pub arguments: Map<String, Value>,
    /// The same, as canonical JSON text: what is stored and sent.
    pub canonical: String,
}

/// Reads a person's edit (any JSON spelling), to be stored as
/// [`Edited::canonical`].
///
/// # Errors
///
/// [`EditError`] says why it is refused.
pub fn read(text: &str) -> Result<Edited, EditError> {
    if text.len() > MAX_EDIT_BYTES {
        return Err(EditError::TooLarge);
    }
    if let Some(number) = inexact_integer(text) {
        return Err(EditError::InexactInteger(number.to_owned()));
    }
    let (value, problem) = crate::body::read(text);
    match problem {
        None | Some(crate::Malformed::NotCanonical) => {}
        Some(crate::Malformed::DuplicateKey { key }) => return Err(EditError::DuplicateKey(key)),
        Some(_) => return Err(EditError::NotJson),
    }
    let Value::Object(arguments) = value else {
        return Err(EditError::NotObject);
    };
    if arguments.contains_key(RESERVED) {
        return Err(EditError::Reserved);
    }
    let canonical = canonical_json(&Value::Object(arguments.clone()));
    Ok(Edited {
        arguments,
        canonical,
    })
}

/// Reads an edit as stored in an answer: [`read`], and it must already be
/// canonical, so that the bytes a person's answer sealed are the bytes sent.
///
/// # Errors
///
/// [`EditError`] says why it is refused.
pub fn read_stored(text: &str) -> Result<Edited, EditError> {
    let edited = read(text)?;
    if edited.canonical != text {
        return Err(EditError::NotCanonical);
    }
    Ok(edited)
}

/// Checks an edit against the tool's input schema (none, or one that does
/// not compile, checks nothing, as the gateway does).
///
/// # Errors
///
/// [`EditError::Schema`] with up to five problems.
pub fn check_schema(edited: &Edited, schema: Option<&Value>) -> Result<(), EditError> {
    let Some(schema) = schema else {
        return Ok(());
    };
    let Ok(validator) = jsonschema::validator_for(schema) else {
        return Ok(());
    };
    let value = Value::Object(edited.arguments.clone());
    if validator.is_valid(&value) {
        return Ok(());
    }
    let problems: Vec<String> = validator
        .iter_errors(&value)
        .take(5)
        .map(|err| format!("{err} (at `{}`)", err.instance_path()))
        .collect();
    Err(EditError::Schema(problems.join("; ")))
}

/// The first integer of a JSON text (outside strings) that fits neither 64
/// signed nor 64 unsigned bits.
fn inexact_integer(text: &str) -> Option<&str> {
    let bytes = text.as_bytes();
    let mut idx = 0;
    while let Some(&byte) = bytes.get(idx) {
        match byte {
            b'"' => {
                idx += 1;
                while let Some(&inner) = bytes.get(idx) {
                    idx += 1;
                    match inner {
                        b'\\' => idx += 1,
                        b'"' => break,
                        _ => {}
                    }
                }
            }
            b'-' | b'0'..=b'9' => {
                let start = idx;
                while bytes
                    .get(idx)
                    .is_some_and(|b| matches!(b, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                {
                    idx += 1;
                }
                let token = text.get(start..idx).unwrap_or_default();
                let integer = !token.contains(['.', 'e', 'E']);
                if integer && token.parse::<i64>().is_err() && token.parse::<u64>().is_err() {
                    return Some(token);
                }
            }
            _ => idx += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{EditError, check_schema, read, read_stored};

    #[test]
    fn an_edit_is_one_object_read_one_way() {
        let edited = read("{ \"b\": 1, \"a\": \"x\" }").unwrap();
        assert_eq!(edited.canonical, r#"{"a":"x","b":1}"#);
        assert_eq!(read_stored(&edited.canonical).unwrap(), edited);
        assert_eq!(
            read_stored("{ \"b\": 1, \"a\": \"x\" }"),
            Err(EditError::NotCanonical)
        );
        assert_eq!(read("not json"), Err(EditError::NotJson));
        assert_eq!(read("{\"a\":1} {}"), Err(EditError::NotJson));
        assert_eq!(read("[1]"), Err(EditError::NotObject));
        assert_eq!(read("\"s\""), Err(EditError::NotObject));
        assert_eq!(
            read(r#"{"a":{"k":1,"\u006b":2}}"#),
            Err(EditError::DuplicateKey("k".into()))
        );
        assert_eq!(read(r#"{"_meta":{}}"#), Err(EditError::Reserved));
        assert_eq!(
            read(r#"{"n":123456789012345678901}"#),
            Err(EditError::InexactInteger("123456789012345678901".into()))
        );
        // In a string, digits are text.
        assert!(read(r#"{"n":"123456789012345678901"}"#).is_ok());
        assert!(read(r#"{"n":-9223372036854775808,"m":18446744073709551615,"f":1.5e300}"#).is_ok());
        let big = format!("{{\"a\":\"{}\"}}", "x".repeat(super::MAX_EDIT_BYTES));
        assert_eq!(read(&big), Err(EditError::TooLarge));
    }

    #[test]
    fn an_edit_must_fit_the_input_schema() {
        let schema = json!({
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        });
        let fits = read(r#"{"path":"/a"}"#).unwrap();
        assert_eq!(check_schema(&fits, Some(&schema)), Ok(()));
        let wrong = read(r#"{"path":1}"#).unwrap();
        let Err(EditError::Schema(problems)) = check_schema(&wrong, Some(&schema)) else {
            panic!("a number for a string fits");
        };
        assert!(problems.contains("/path"), "{problems}");
        assert!(check_schema(&read("{}").unwrap(), Some(&schema)).is_err());
        assert_eq!(check_schema(&wrong, None), Ok(()));
    }
}
