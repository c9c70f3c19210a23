//! The pin digest's canonicalisation.
//!
//! A tool definition is built from the fuzzer's choices and written out
//! twice: once compactly in one key order, once with whitespace everywhere
//! and every object's keys in reverse order. Checked: both texts give the
//! same digest (as a definition and as a value); a definition with one
//! pinned field changed gives another digest; the digest's text form parses
//! back to itself.
#![no_main]

use arbitrary::Arbitrary;
use hintgate_policy::pin::{PinDigest, canonical_json};
use hintgate_policy::tool::Tool;
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Number, Value};

/// A JSON value, any shape.
#[derive(Debug, Arbitrary)]
enum Json {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Text(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    fn value(&self) -> Value {
        match self {
            Self::Null => Value::Null,
            Self::Bool(b) => Value::Bool(*b),
            Self::Int(n) => Value::from(*n),
            Self::Uint(n) => Value::from(*n),
            Self::Float(f) => Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Self::Text(text) => Value::String(text.clone()),
            Self::Array(items) => Value::Array(items.iter().map(Self::value).collect()),
            Self::Object(members) => Value::Object(
                members
                    .iter()
                    .map(|(key, value)| (key.clone(), value.value()))
                    .collect(),
            ),
        }
    }
}

#[derive(Debug, Arbitrary)]
struct Input {
    name: String,
    title: Option<String>,
    description: Option<String>,
    input_schema: Option<Json>,
    output_schema: Option<Json>,
    read_only: Option<bool>,
    destructive: Option<bool>,
    extra: Vec<(String, Json)>,
    /// Which pinned field to change, and to what.
    change: u8,
    changed_text: String,
}

fuzz_target!(|input: Input| {
    let mut object = Map::new();
    object.insert("name".into(), Value::String(input.name.clone()));
    let mut put = |key: &str, value: Option<Value>| {
        if let Some(value) = value {
            object.insert(key.into(), value);
        }
    };
    put("title", input.title.clone().map(Value::String));
    put("description", input.description.clone().map(Value::String));
    put("inputSchema", input.input_schema.as_ref().map(Json::value));
    put(
        "outputSchema",
        input.output_schema.as_ref().map(Json::value),
    );
    let mut annotations = Map::new();
    if let Some(read_only) = input.read_only {
        annotations.insert("readOnlyHint".into(), Value::Bool(read_only));
    }
    if let Some(destructive) = input.destructive {
        annotations.insert("destructiveHint".into(), Value::Bool(destructive));
    }
    object.insert("annotations".into(), Value::Object(annotations));
    for (key, value) in &input.extra {
        if !object.contains_key(key) {
            object.insert(key.clone(), value.value());
        }
    }
    let value = Value::Object(object);

    let compact = value.to_string();
    let mut spaced = String::new();
    write_reordered(&value, &mut spaced);
    // A value nested deeper than serde reads (128 levels) cannot come from
    // a server: its definitions are parsed JSON.
    let Ok(reparsed) = serde_json::from_str::<Value>(&spaced) else {
        return;
    };
    assert_eq!(
        canonical_json(&value),
        canonical_json(&reparsed),
        "{compact} / {spaced}"
    );
    assert_eq!(PinDigest::of_json(&value), PinDigest::of_json(&reparsed));

    let (Ok(tool), Ok(same)) = (Tool::from_json(&compact), Tool::from_json(&spaced)) else {
        return;
    };
    let digest = PinDigest::of(&tool);
    assert_eq!(digest, PinDigest::of(&same), "{compact} / {spaced}");
    assert_eq!(PinDigest::parse(&digest.to_string()), Some(digest));

    let mut changed = tool.clone();
    match input.change % 5 {
        0 => changed.name.push_str(&input.changed_text),
        1 => changed.description = Some(input.changed_text.clone()),
        2 => changed.title = Some(input.changed_text.clone()),
        3 => changed.input_schema = Some(Value::String(input.changed_text.clone())),
        _ => {
            let annotations = changed.annotations.get_or_insert_with(Default::default);
            annotations.read_only_hint = Some(!annotations.read_only_hint.unwrap_or(false));
        }
    }
    if changed != tool {
        assert_ne!(PinDigest::of(&changed), digest, "{tool:?} / {changed:?}");
    }
});

/// `value` with a space around every token and each object's keys in
/// reverse order.
fn write_reordered(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            out.push_str(" { ");
            for (idx, (key, item)) in map.iter().rev().enumerate() {
                if idx > 0 {
                    out.push_str(" ,\n\t");
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push_str(" : ");
                write_reordered(item, out);
            }
            out.push_str(" } ");
        }
        Value::Array(items) => {
            out.push_str(" [ ");
            for (idx, item) in items.iter().enumerate() {
                if idx > 0 {
                    out.push_str(" , ");
                }
                write_reordered(item, out);
            }
            out.push_str(" ] ");
        }
        other => {
            out.push(' ');
            out.push_str(&other.to_string());
            out.push(' ');
        }
    }
}
