//! Pins: the digest of what was approved, and how a new definition differs.
//!
//! A tool's pin is a SHA-256 over the canonical JSON (object keys sorted by
//! code point, no insignificant whitespace) of its `name`, `title`,
//! `description`, `inputSchema`, `outputSchema`, `annotations` and `icons`
//! (design §5). Annotations are part of the pin: a flip of `destructiveHint`
//! is a change. `_meta` and unknown fields are not pinned: they carry
//! protocol bookkeeping that may legitimately differ from list to list.

use std::fmt;

use serde::{Serialize, Serializer};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::tool::Tool;

/// The fields of a tool definition that a pin covers, in the spec's order.
pub const PINNED_FIELDS: [&str; 7] = [
    "name",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
    "icons",
];

/// A SHA-256 pin digest.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PinDigest(pub [u8; 32]);

/// How a tool's current definition compares with its pin.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PinStatus {
    /// Never approved (untrusted) or never seen (trusted).
    #[default]
    New,
    /// The same definition as approved.
    Unchanged,
    /// A different definition than approved: it is held for re-approval.
    Changed,
}

/// One difference between a pinned definition and the current one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldChange {
    /// The field, such as `description` or `annotations.destructiveHint`.
    pub field: String,
    /// The pinned value as canonical JSON; `None` when it was absent.
    pub old: Option<String>,
    /// The current value as canonical JSON; `None` when it is absent.
    pub new: Option<String>,
}

// === impl PinDigest ===

impl PinDigest {
    /// The digest of a tool's pinned fields.
    pub fn of(tool: &Tool) -> Self {
        Self::of_json(&pinned_value(tool))
    }

    /// The digest of a value's canonical JSON: for what is pinned beside
    /// tools (a server's instructions).
    pub fn of_json(value: &Value) -> Self {
        let mut canonical = String::with_capacity(256);
        write_canonical(value, &mut canonical);
        Self(Sha256::digest(canonical.as_bytes()).into())
    }

    /// Parses the `sha256:<64 hex>` form that [`PinDigest`] displays.
    pub fn parse(text: &str) -> Option<Self> {
        let hex = text.strip_prefix("sha256:")?;
        if hex.len() != 64 {
            return None;
        }
        let mut bytes = [0u8; 32];
        for (idx, byte) in bytes.iter_mut().enumerate() {
            let pair = hex.get(idx * 2..idx * 2 + 2)?;
            *byte = u8::from_str_radix(pair, 16).ok()?;
        }
        Some(Self(bytes))
    }

    /// Lowercase hex, 64 characters.
    pub fn to_hex(&self) -> String {
        let mut out = String::with_capacity(64);
        for byte in self.0 {
            out.push(hex_digit(byte >> 4));
            out.push(hex_digit(byte & 0x0f));
        }
        out
    }
}

impl fmt::Display for PinDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.to_hex())
    }
}

impl fmt::Debug for PinDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PinDigest({self})")
    }
}

impl Serialize for PinDigest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

fn hex_digit(nibble: u8) -> char {
    char::from_digit(u32::from(nibble), 16).unwrap_or('0')
}

// === impl PinStatus ===

impl PinStatus {
    /// Compares a tool with the digest it was pinned under, if any.
    pub fn compare(pinned: Option<PinDigest>, current: &Tool) -> Self {
        match pinned {
            None => Self::New,
            Some(digest) if digest == PinDigest::of(current) => Self::Unchanged,
            Some(_) => Self::Changed,
        }
    }
}

/// The pinned fields of a tool as one JSON object; absent fields are left out.
pub fn pinned_value(tool: &Tool) -> Value {
    let mut object = Map::new();
    object.insert("name".to_owned(), Value::String(tool.name.clone()));
    let optional = [
        ("title", tool.title.clone().map(Value::String)),
        ("description", tool.description.clone().map(Value::String)),
        ("inputSchema", tool.input_schema.clone()),
        ("outputSchema", tool.output_schema.clone()),
        (
            "annotations",
            tool.annotations
                .as_ref()
                .and_then(|annotations| serde_json::to_value(annotations).ok()),
        ),
        ("icons", tool.icons.clone()),
    ];
    for (field, value) in optional {
        if let Some(value) = value {
            object.insert(field.to_owned(), value);
        }
    }
    Value::Object(object)
}

/// Canonical JSON: object keys sorted by code point, no whitespace, strings
/// escaped as `serde_json` escapes them. Independent of whether the map type
/// preserves insertion order.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    write_canonical_replacing(value, out, &mut Canonical::plain());
}

/// Whether a value, under a key (`None` for an array item), at a path, is
/// replaced.
pub type ReplaceFn<'a> = &'a dyn Fn(Option<&str>, &[String], &Value) -> bool;

/// What [`write_canonical_replacing`] writes instead of some values.
pub struct Canonical<'a> {
    /// Whether `value`, under `key` (`None` for an array item), at `path`,
    /// is written by [`Self::replacement`] instead of as itself.
    pub replace: ReplaceFn<'a>,
    /// Writes what a replaced value is written as (one JSON value).
    pub replacement: &'a dyn Fn(&Value, &mut String),
    /// Whether `replace` reads the path (when not, none is kept).
    pub track_path: bool,
    /// The steps to the value being written.
    pub path: Vec<String>,
}

impl Canonical<'_> {
    /// Nothing replaced.
    pub fn plain() -> Canonical<'static> {
        Canonical {
            replace: &|_, _, _| false,
            replacement: &|_, _| {},
            track_path: false,
            path: Vec::new(),
        }
    }
}

impl std::fmt::Debug for Canonical<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Canonical")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Writes `value` as canonical JSON (keys sorted by code point, no
/// whitespace), writing what `how.replacement` writes in place of every
/// member or item `how.replace` names: canonical JSON of a redacted copy,
/// without the copy.
pub fn write_canonical_replacing(value: &Value, out: &mut String, how: &mut Canonical<'_>) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|left, right| left.0.cmp(right.0));
            out.push('{');
            for (idx, (key, item)) in entries.into_iter().enumerate() {
                if idx > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                let step = if how.track_path {
                    key.clone()
                } else {
                    String::new()
                };
                write_step(item, Some(key), step, out, how);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (idx, item) in items.iter().enumerate() {
                if idx > 0 {
                    out.push(',');
                }
                let step = if how.track_path {
                    idx.to_string()
                } else {
                    String::new()
                };
                write_step(item, None, step, out, how);
            }
            out.push(']');
        }
        Value::String(text) => write_string(text, out),
        scalar => out.push_str(&scalar.to_string()),
    }
}

fn write_step(
    item: &Value,
    key: Option<&str>,
    step: String,
    out: &mut String,
    how: &mut Canonical<'_>,
) {
    if how.track_path {
        how.path.push(step);
    }
    if (how.replace)(key, &how.path, item) {
        (how.replacement)(item, out);
    } else {
        write_canonical_replacing(item, out, how);
    }
    if how.track_path {
        how.path.pop();
    }
}

fn write_string(text: &str, out: &mut String) {
    write_json_string(text, out);
}

/// Writes `text` as a JSON string, escaped as `serde_json` escapes it (the
/// form canonical JSON uses).
pub(crate) fn write_json_string(text: &str, out: &mut String) {
    push_json_string(out, text);
}

/// Writes `text` at the end of `out` as a JSON string, escaped as
/// `serde_json` escapes it (the form canonical JSON and the audit records
/// use). serde escapes only `"`, `\\` and control characters (below
/// U+0020), so a text without them is copied between quotes as it is; any
/// other is written by serde.
pub fn push_json_string(out: &mut String, text: &str) {
    if needs_escape(text.as_bytes()) {
        // Serializing a &str cannot fail; the fallback keeps the function total.
        out.push_str(&serde_json::to_string(text).unwrap_or_else(|_| String::from("\"\"")));
    } else {
        out.reserve(text.len() + 2);
        out.push('"');
        out.push_str(text);
        out.push('"');
    }
}

/// Whether `bytes` hold a `"`, a `\\` or a control character (below
/// 0x20), eight bytes at a time: in each word, a byte below 0x20, or equal
/// to one of the two once XORed with it (so zero, below 1), sets its top
/// bit in `(x - 0x01..01 * n) & !x & 0x80..80`; the test is exact as to
/// whether any byte does (borrows only ever follow a byte that did).
fn needs_escape(bytes: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const TOPS: u64 = 0x8080_8080_8080_8080;
    let below = |word: u64, n: u64| word.wrapping_sub(ONES * n) & !word & TOPS;
    let mut words = bytes.chunks_exact(8);
    for chunk in &mut words {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let word = u64::from_le_bytes(word);
        let found = below(word, 0x20)
            | below(word ^ (ONES * u64::from(b'"')), 1)
            | below(word ^ (ONES * u64::from(b'\\')), 1);
        if found != 0 {
            return true;
        }
    }
    words
        .remainder()
        .iter()
        .any(|&byte| byte < 0x20 || byte == b'"' || byte == b'\\')
}

/// The differences between a pinned definition and the current one: each
/// changed pinned field, and each changed annotation on its own line, so that
/// a hint flip is called out by name.
pub fn diff(old: &Tool, new: &Tool) -> Vec<FieldChange> {
    let old_value = pinned_value(old);
    let new_value = pinned_value(new);
    let mut changes = Vec::new();
    for field in PINNED_FIELDS {
        let before = old_value.get(field);
        let after = new_value.get(field);
        if before == after {
            continue;
        }
        if field == "annotations" {
            let empty = Map::new();
            let before_map = before.and_then(Value::as_object).unwrap_or(&empty);
            let after_map = after.and_then(Value::as_object).unwrap_or(&empty);
            let mut keys: Vec<&String> = before_map.keys().chain(after_map.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let (b, a) = (before_map.get(key), after_map.get(key));
                if b != a {
                    changes.push(FieldChange {
                        field: format!("annotations.{key}"),
                        old: b.map(canonical_json),
                        new: a.map(canonical_json),
                    });
                }
            }
            continue;
        }
        changes.push(FieldChange {
            field: field.to_owned(),
            old: before.map(canonical_json),
            new: after.map(canonical_json),
        });
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_json_sorts_keys_and_drops_whitespace() {
        let value = json!({"b": [1, {"z": 1, "a": "x"}], "a": null});
        assert_eq!(
            canonical_json(&value),
            r#"{"a":null,"b":[1,{"a":"x","z":1}]}"#
        );
    }

    #[test]
    fn the_digest_is_stable_across_releases() {
        // Pins are stored: changing this value breaks every user's pins.
        let tool = Tool::from_value(json!({
            "name": "read_file",
            "description": "Read a file",
            "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
            "annotations": {"readOnlyHint": true}
        }))
        .unwrap();
        let canonical = canonical_json(&pinned_value(&tool));
        assert_eq!(
            canonical,
            r#"{"annotations":{"readOnlyHint":true},"description":"Read a file","inputSchema":{"properties":{"path":{"type":"string"}},"type":"object"},"name":"read_file"}"#
        );
        let expected: [u8; 32] = Sha256::digest(canonical.as_bytes()).into();
        assert_eq!(PinDigest::of(&tool).0, expected);
        assert_eq!(PinDigest::of(&tool).to_string().len(), "sha256:".len() + 64);
        assert_eq!(
            PinDigest::parse(&PinDigest::of(&tool).to_string()),
            Some(PinDigest::of(&tool))
        );
        assert_eq!(PinDigest::parse("sha256:zz"), None);
    }

    #[test]
    fn meta_is_not_pinned_but_a_hint_flip_is() {
        let base = json!({"name": "t", "annotations": {"destructiveHint": true}});
        let tool = Tool::from_value(base.clone()).unwrap();
        let mut with_meta = base.clone();
        with_meta["_meta"] = json!({"x/y": 1});
        assert_eq!(
            PinDigest::of(&tool),
            PinDigest::of(&Tool::from_value(with_meta).unwrap())
        );
        let mut flipped = base;
        flipped["annotations"]["destructiveHint"] = json!(false);
        let flipped = Tool::from_value(flipped).unwrap();
        assert_ne!(PinDigest::of(&tool), PinDigest::of(&flipped));
        assert_eq!(
            PinStatus::compare(Some(PinDigest::of(&tool)), &flipped),
            PinStatus::Changed
        );
        assert_eq!(
            diff(&tool, &flipped),
            vec![FieldChange {
                field: "annotations.destructiveHint".into(),
                old: Some("true".into()),
                new: Some("false".into()),
            }]
        );
    }

    /// A string is written as serde writes it, wherever in it a character
    /// to escape falls (each place of an eight-byte word and the tail).
    #[test]
    fn a_json_string_is_escaped_as_serde_escapes_it() {
        let mut special: Vec<char> = (0u8..0x20).map(char::from).collect();
        special.extend(['"', '\\', '\u{7f}', ' ', '!', '#', '[', ']', 'é']);
        for len in 0..20 {
            for at in 0..len {
                for &ch in &special {
                    let text: String = (0..len).map(|n| if n == at { ch } else { 'a' }).collect();
                    let mut out = String::new();
                    push_json_string(&mut out, &text);
                    assert_eq!(out, serde_json::to_string(&text).unwrap(), "{text:?}");
                }
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn any_json_string_is_escaped_as_serde_escapes_it(text in "\\PC*|[\\x00-\\x7f]*") {
            let mut out = String::new();
            push_json_string(&mut out, &text);
            proptest::prop_assert_eq!(out, serde_json::to_string(&text).unwrap());
        }
    }
}
