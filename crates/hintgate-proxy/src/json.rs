//! JSON text, checked and edited without re-serialising what the gateway
//! does not decide on.
//!
//! - [`check_unique_keys`] refuses a text that repeats a key in any object.
//!   Parsers disagree about such a text (serde keeps the last of two keys,
//!   many others the first), so a gateway that decided on one reading while
//!   the server acted on the other would decide one call and send another.
//! - [`check_depth`] refuses a text that nests objects and arrays deeper than
//!   a limit, in one scan of its bytes: a line the gateway passes on as raw
//!   text is never parsed into values, so no parser's own limit guards it,
//!   while the host or server it reaches may crash on it.
//! - [`members`] finds the members of one object as byte ranges of its text,
//!   so that one member can be replaced, removed or added with
//!   [`ObjectWriter`] while every other member keeps its bytes: a host's
//!   `arguments` reach the server exactly as the host wrote them.
//!
//! This module does no I/O.

use std::borrow::Cow;
use std::collections::HashSet;
use std::ops::Range;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// Above this many keys in one object, duplicates are found with a hash set
/// instead of by comparing with every key before.
const LINEAR_KEYS: usize = 16;

/// The key serde_json reads as "the JSON text in this string" (the token of
/// its `raw_value` feature, which the gateway needs to borrow params and
/// results): an object whose first key it is parses as the JSON in that
/// key's string, so the gateway would decide on the inner value while every
/// other reader sees an object with one odd key. Refused wherever it
/// appears in a host's message.
pub const RAW_VALUE_KEY: &str = "$serde_json::private::RawValue";

/// Why a JSON text was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JsonError {
    /// The text is not JSON.
    #[error("not valid JSON: {0}")]
    Syntax(String),
    /// An object repeats a key.
    #[error("the key `{key}` appears twice in one object{}", path_suffix(.path))]
    DuplicateKey {
        /// The repeated key, decoded.
        key: String,
        /// Where the object is, as a JSON pointer (empty for the top level).
        path: String,
    },
    /// The text is JSON, but not an object.
    #[error("not a JSON object")]
    NotObject,
    /// An object has the key serde_json reads as raw JSON text
    /// ([`RAW_VALUE_KEY`]).
    #[error(
        "the key `{}` is reserved: serde_json reads it as the JSON text in its string",
        RAW_VALUE_KEY
    )]
    ReservedKey,
    /// The text nests objects and arrays deeper than the limit.
    #[error("it nests deeper than {limit} levels of objects and arrays")]
    TooDeep {
        /// The limit: how many levels are allowed (the outermost value is
        /// level 1).
        limit: usize,
    },
}

fn path_suffix(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!(" (at `{path}`)")
    }
}

/// One member of an object, as ranges of the object's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member<'a> {
    /// The key, decoded.
    pub key: Cow<'a, str>,
    /// The whole member as written: from the key's opening quote to the end
    /// of its value.
    pub span: Range<usize>,
    /// The value as written.
    pub value: Range<usize>,
}

/// Writes an object member by member: members copied as written, or new.
#[derive(Debug)]
pub struct ObjectWriter {
    out: String,
    empty: bool,
}

/// Checks that `text` is one JSON value in which no object repeats a key
/// (keys compared after decoding their escapes, so `"a"` and `"\u0061"` are
/// the same key).
///
/// # Errors
///
/// [`JsonError::Syntax`] for a text that is not JSON (or nests deeper than
/// 128 levels), [`JsonError::DuplicateKey`] for a repeated key.
pub fn check_unique_keys(text: &str) -> Result<(), JsonError> {
    walk_keys(text, false).map_err(|found| match found {
        Found::Key(key) => found_key(text, key),
        Found::Syntax(message) => JsonError::Syntax(message),
    })
}

/// Checks that no object of `text` has the key [`RAW_VALUE_KEY`], in any
/// spelling; keys may repeat (a server's message is not refused for that).
/// Only a text that names `RawValue` or holds an escape (`\u`) is parsed
/// for it: any other cannot spell the key.
///
/// # Errors
///
/// [`JsonError::ReservedKey`] when an object has the key;
/// [`JsonError::Syntax`] for a text that is not JSON.
pub fn find_reserved_key(text: &str) -> Result<(), JsonError> {
    if !text.contains("RawValue") && !text.contains("\\u") {
        return Ok(());
    }
    walk_keys(text, true).map_err(|found| match found {
        Found::Key(_) => JsonError::ReservedKey,
        Found::Syntax(message) => JsonError::Syntax(message),
    })
}

/// What [`walk_keys`] stopped at.
enum Found {
    /// A key repeated, or reserved ([`RAW_VALUE_KEY`]).
    Key(String),
    /// Not JSON: serde's message.
    Syntax(String),
}

/// Parses `text` as one JSON value, stopping at the first repeated or
/// reserved key (only a reserved one when `reserved_only`).
fn walk_keys(text: &str, reserved_only: bool) -> Result<(), Found> {
    let mut state = UniqueState {
        reserved_only,
        ..UniqueState::default()
    };
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let checked = Unique { state: &mut state }
        .deserialize(&mut deserializer)
        .and_then(|()| deserializer.end());
    match (checked, state.duplicate) {
        (Ok(()), _) => Ok(()),
        (Err(_), Some(key)) => Err(Found::Key(key)),
        (Err(err), None) => Err(Found::Syntax(err.to_string())),
    }
}

/// The error for `key`, found repeated, or reserved ([`RAW_VALUE_KEY`]), in
/// `text`.
fn found_key(text: &str, key: String) -> JsonError {
    if key == RAW_VALUE_KEY {
        JsonError::ReservedKey
    } else {
        JsonError::DuplicateKey {
            path: duplicate_path(text, &key).unwrap_or_default(),
            key,
        }
    }
}

/// The first repeated key of a JSON text, found by scanning its bytes once
/// (keys compared after decoding, as [`check_unique_keys`] does). Cheaper
/// than [`check_unique_keys`], which parses every value: it is made for
/// text that is parsed anyway, and does not itself validate what is not a
/// key (numbers, literals). A text it cannot follow is handed to
/// [`check_unique_keys`] for a precise error.
///
/// # Errors
///
/// [`JsonError::DuplicateKey`] for a repeated key; [`JsonError::TooDeep`]
/// for a text that nests deeper than 128 levels (serde's own limit);
/// [`JsonError::Syntax`] for a text whose structure is broken.
pub fn find_duplicate_key(text: &str) -> Result<(), JsonError> {
    find_duplicate_key_within(text, MAX_DEPTH)
}

/// [`find_duplicate_key`], refusing in the same scan a text that nests
/// objects and arrays deeper than `max_depth` levels (at most 128, serde's
/// own limit; the outermost value is level 1).
///
/// # Errors
///
/// [`JsonError::DuplicateKey`] for a repeated key found before the text
/// goes too deep; [`JsonError::TooDeep`] for a text deeper than the limit;
/// [`JsonError::Syntax`] for a text whose structure is broken.
pub fn find_duplicate_key_within(text: &str, max_depth: usize) -> Result<(), JsonError> {
    let limit = max_depth.min(MAX_DEPTH);
    match scan_keys(text.as_bytes(), limit) {
        Scan::Unique => Ok(()),
        Scan::Repeated(key) => Err(found_key(text, key)),
        Scan::TooDeep => Err(JsonError::TooDeep { limit }),
        Scan::Broken => check_unique_keys(text).and(Err(JsonError::Syntax(
            "the text's structure cannot be followed".to_owned(),
        ))),
    }
}

/// Checks that `text` nests objects and arrays at most `max_depth` levels
/// deep (the outermost value is level 1), in one scan of its bytes that
/// skips strings and stops at the first level too deep. It validates
/// nothing else: a text that is not JSON may pass, and is refused by
/// whatever parses it next.
///
/// # Errors
///
/// [`JsonError::TooDeep`] for a text that nests deeper.
pub fn check_depth(text: &str, max_depth: usize) -> Result<(), JsonError> {
    let bytes = text.as_bytes();
    let mut depth: usize = 0;
    let mut idx = 0;
    while let Some(found) = bytes
        .get(idx..)
        .and_then(|rest| rest.iter().position(|byte| STRUCTURE.contains(byte)))
    {
        idx += found;
        match bytes.get(idx) {
            Some(b'"') => match string_end_fast(bytes, idx) {
                Some(end) => idx = end,
                // An unterminated string: nothing after it is structure.
                None => return Ok(()),
            },
            Some(b'{' | b'[') => {
                depth += 1;
                if depth > max_depth {
                    return Err(JsonError::TooDeep { limit: max_depth });
                }
                idx += 1;
            }
            _ => {
                depth = depth.saturating_sub(1);
                idx += 1;
            }
        }
    }
    Ok(())
}

/// The bytes [`check_depth`] stops at.
const STRUCTURE: [u8; 5] = [b'"', b'{', b'[', b'}', b']'];

/// The bytes [`scan_keys`] acts on.
const SCANNED: [u8; 6] = [b'"', b'{', b'[', b'}', b']', b','];

/// What [`scan_keys`] found.
enum Scan {
    Unique,
    Repeated(String),
    TooDeep,
    Broken,
}

/// Containers deeper than this are refused, as serde refuses them (the
/// most `max_json_depth` can allow).
pub const MAX_DEPTH: usize = 128;

/// One open container while scanning.
struct Open {
    object: bool,
    /// Where this object's keys start on the key stack.
    keys_from: usize,
    /// The next string is a key.
    expect_key: bool,
    /// This object's keys in a set, once it has many.
    many: Option<HashSet<Cow<'static, str>>>,
}

fn scan_keys(bytes: &[u8], max_depth: usize) -> Scan {
    // A message nests a few levels and has a handful of keys per object:
    // room for those up front saves growing the stacks key by key.
    let mut stack: Vec<Open> = Vec::with_capacity(8);
    // The keys of every open object, innermost last: byte ranges (keys
    // without escapes) or decoded text (keys with them).
    let mut keys: Vec<KeyText> = Vec::with_capacity(16);
    let mut idx = 0;
    while let Some(&byte) = bytes.get(idx) {
        match byte {
            b'"' => {
                let Some(end) = string_end_fast(bytes, idx) else {
                    return Scan::Broken;
                };
                let is_key = stack
                    .last()
                    .is_some_and(|open| open.object && open.expect_key);
                if is_key {
                    let Some(key) = KeyText::of(bytes, idx, end) else {
                        return Scan::Broken;
                    };
                    let Some(open) = stack.last_mut() else {
                        return Scan::Broken;
                    };
                    open.expect_key = false;
                    if key.is_reserved(bytes) {
                        return Scan::Repeated(RAW_VALUE_KEY.to_owned());
                    }
                    let seen = keys.get(open.keys_from..).unwrap_or_default();
                    let repeated = match &mut open.many {
                        Some(set) => !set.insert(Cow::Owned(key.decoded(bytes).into_owned())),
                        None => seen.iter().any(|other| other.same(&key, bytes)),
                    };
                    if repeated {
                        return Scan::Repeated(key.decoded(bytes).into_owned());
                    }
                    if open.many.is_none() && seen.len() >= LINEAR_KEYS {
                        let mut set: HashSet<Cow<'static, str>> = seen
                            .iter()
                            .map(|other| Cow::Owned(other.decoded(bytes).into_owned()))
                            .collect();
                        set.insert(Cow::Owned(key.decoded(bytes).into_owned()));
                        open.many = Some(set);
                    }
                    keys.push(key);
                }
                idx = end;
            }
            b'{' | b'[' => {
                if stack.len() >= max_depth {
                    return Scan::TooDeep;
                }
                stack.push(Open {
                    object: byte == b'{',
                    keys_from: keys.len(),
                    expect_key: byte == b'{',
                    many: None,
                });
                idx += 1;
            }
            b'}' | b']' => {
                let Some(open) = stack.pop() else {
                    return Scan::Broken;
                };
                if open.object != (byte == b'}') {
                    return Scan::Broken;
                }
                keys.truncate(open.keys_from);
                idx += 1;
            }
            b',' => {
                if let Some(open) = stack.last_mut() {
                    open.expect_key = open.object;
                }
                idx += 1;
            }
            // Anything else (a colon, a number, a literal, whitespace):
            // skipped up to the next byte that means something here.
            _ => {
                idx += 1;
                idx += bytes
                    .get(idx..)
                    .and_then(|rest| rest.iter().position(|byte| SCANNED.contains(byte)))
                    .unwrap_or(bytes.len().saturating_sub(idx));
            }
        }
    }
    if stack.is_empty() {
        Scan::Unique
    } else {
        Scan::Broken
    }
}

/// The first integer of a JSON text (one that serde has read) that does not
/// fit 64 bits, as written. serde reads such an integer as the nearest
/// float, while many servers read it exactly: the gateway would check and
/// record another number than the one the server acts on. Numbers with a
/// fraction or an exponent are floats to every reader alike.
pub fn inexact_integer(text: &str) -> Option<&str> {
    let bytes = text.as_bytes();
    let mut pos = 0;
    while let Some(byte) = bytes.get(pos) {
        match byte {
            b'"' => pos = string_end_fast(bytes, pos)?,
            b'-' | b'0'..=b'9' => {
                let start = pos;
                pos += 1;
                while matches!(
                    bytes.get(pos),
                    Some(b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
                ) {
                    pos += 1;
                }
                let number = text.get(start..pos)?;
                let integer = !number.contains(['.', 'e', 'E']);
                if integer && number.parse::<i64>().is_err() && number.parse::<u64>().is_err() {
                    return Some(number);
                }
            }
            _ => pos += 1,
        }
    }
    None
}

/// The end (one past the closing quote) of the string that starts at `pos`,
/// skipping to the next quote or backslash at a time.
fn string_end_fast(bytes: &[u8], pos: usize) -> Option<usize> {
    let mut idx = pos + 1;
    loop {
        let rest = bytes.get(idx..)?;
        let found = rest
            .iter()
            .position(|byte| *byte == b'"' || *byte == b'\\')?;
        idx += found;
        match bytes.get(idx)? {
            b'"' => return Some(idx + 1),
            _ => idx += 2,
        }
    }
}

/// A key found while scanning.
enum KeyText {
    /// The bytes between its quotes (it has no escape).
    Raw(usize, usize),
    /// Decoded (it had escapes).
    Decoded(String),
}

impl KeyText {
    /// The key of the string literal at `start..end`.
    fn of(bytes: &[u8], start: usize, end: usize) -> Option<Self> {
        let inner = bytes.get(start + 1..end.checked_sub(1)?)?;
        if !inner.contains(&b'\\') {
            return Some(Self::Raw(start + 1, end - 1));
        }
        let literal = std::str::from_utf8(bytes.get(start..end)?).ok()?;
        serde_json::from_str::<String>(literal)
            .ok()
            .map(Self::Decoded)
    }

    /// Whether it is [`RAW_VALUE_KEY`] (a key without escapes is compared
    /// as written, with no decoding).
    fn is_reserved(&self, bytes: &[u8]) -> bool {
        match self {
            Self::Raw(start, end) => bytes.get(*start..*end) == Some(RAW_VALUE_KEY.as_bytes()),
            Self::Decoded(text) => text == RAW_VALUE_KEY,
        }
    }

    fn raw<'a>(&self, bytes: &'a [u8]) -> Option<&'a [u8]> {
        match self {
            Self::Raw(start, end) => bytes.get(*start..*end),
            Self::Decoded(_) => None,
        }
    }

    /// Whether two keys are the same once decoded.
    fn same(&self, other: &Self, bytes: &[u8]) -> bool {
        match (self.raw(bytes), other.raw(bytes)) {
            (Some(left), Some(right)) => left == right,
            _ => self.decoded(bytes) == other.decoded(bytes),
        }
    }

    fn decoded<'a>(&'a self, bytes: &'a [u8]) -> Cow<'a, str> {
        match self {
            Self::Raw(start, end) => bytes
                .get(*start..*end)
                .map_or(Cow::Borrowed(""), String::from_utf8_lossy),
            Self::Decoded(text) => Cow::Borrowed(text),
        }
    }
}

/// The members of the object `object`, in order.
///
/// # Errors
///
/// [`JsonError::NotObject`] when the text is not an object, and
/// [`JsonError::Syntax`] when it is not JSON. Repeated keys are not
/// checked here (see [`check_unique_keys`]).
pub fn members(object: &str) -> Result<Vec<Member<'_>>, JsonError> {
    let bytes = object.as_bytes();
    let mut pos = skip_whitespace(bytes, 0);
    if bytes.get(pos) != Some(&b'{') {
        return Err(JsonError::NotObject);
    }
    pos = skip_whitespace(bytes, pos + 1);
    let mut found = Vec::new();
    if bytes.get(pos) == Some(&b'}') {
        return trailing(bytes, pos + 1).map(|()| found);
    }
    loop {
        let key_start = pos;
        let key_end = string_end(bytes, pos).ok_or_else(|| syntax("a key that is not a string"))?;
        let key_text = object
            .get(key_start..key_end)
            .ok_or_else(|| syntax("a cut key"))?;
        let key = decode_key(key_text)?;
        pos = skip_whitespace(bytes, key_end);
        if bytes.get(pos) != Some(&b':') {
            return Err(syntax("a key without `:`"));
        }
        pos = skip_whitespace(bytes, pos + 1);
        let rest = object
            .get(pos..)
            .ok_or_else(|| syntax("a member without a value"))?;
        let mut deserializer = serde_json::Deserializer::from_str(rest);
        let raw = <&RawValue>::deserialize(&mut deserializer)
            .map_err(|err| JsonError::Syntax(err.to_string()))?;
        let value = span_in(object, raw.get()).ok_or_else(|| syntax("a value outside the text"))?;
        found.push(Member {
            key,
            span: key_start..value.end,
            value: value.clone(),
        });
        pos = skip_whitespace(bytes, value.end);
        match bytes.get(pos) {
            Some(b',') => pos = skip_whitespace(bytes, pos + 1),
            Some(b'}') => return trailing(bytes, pos + 1).map(|()| found),
            _ => return Err(syntax("a member not followed by `,` or `}`")),
        }
    }
}

/// The byte range of `part` inside `text`, when `part` is a slice of it.
pub fn span_in(text: &str, part: &str) -> Option<Range<usize>> {
    let start = (part.as_ptr() as usize).checked_sub(text.as_ptr() as usize)?;
    let end = start.checked_add(part.len())?;
    (end <= text.len()).then_some(start..end)
}

/// A JSON string literal for `text`, escaped as `serde_json` escapes it
/// (the policy crate's one escaper for canonical JSON).
pub fn string_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    hintgate_policy::pin::push_json_string(&mut out, text);
    out
}

// === impl ObjectWriter ===

impl ObjectWriter {
    /// An empty object, with room for about `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> Self {
        let mut out = String::with_capacity(capacity + 2);
        out.push('{');
        Self { out, empty: true }
    }

    /// Adds a member copied as written (`"key":value`).
    pub fn copy(&mut self, member_text: &str) {
        self.separate();
        self.out.push_str(member_text);
    }

    /// Adds a member: `key` is encoded here, `value` is JSON text.
    pub fn member(&mut self, key: &str, value: &str) {
        self.separate();
        self.out.push_str(&string_literal(key));
        self.out.push(':');
        self.out.push_str(value);
    }

    /// The object's text.
    pub fn finish(mut self) -> String {
        self.out.push('}');
        self.out
    }

    fn separate(&mut self) {
        if !self.empty {
            self.out.push(',');
        }
        self.empty = false;
    }
}

// --- the duplicate check ---

#[derive(Default)]
struct UniqueState<'de> {
    /// The keys of every object being read, innermost last.
    keys: Vec<Cow<'de, str>>,
    duplicate: Option<String>,
    /// Only the reserved key is looked for; keys may repeat.
    reserved_only: bool,
}

struct Unique<'s, 'de> {
    state: &'s mut UniqueState<'de>,
}

impl<'de> DeserializeSeed<'de> for Unique<'_, 'de> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Unique<'_, 'de> {
    type Value = ();

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq
            .next_element_seed(Unique {
                state: &mut *self.state,
            })?
            .is_some()
        {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let start = self.state.keys.len();
        let mut many: Option<HashSet<Cow<'de, str>>> = None;
        while let Some(key) = map.next_key_seed(KeySeed)? {
            if key == RAW_VALUE_KEY {
                self.state.duplicate = Some(key.into_owned());
                return Err(de::Error::custom("reserved key"));
            }
            if self.state.reserved_only {
                map.next_value_seed(Unique {
                    state: &mut *self.state,
                })?;
                continue;
            }
            let repeated = match &mut many {
                Some(set) => !set.insert(key.clone()),
                None => self
                    .state
                    .keys
                    .get(start..)
                    .is_some_and(|seen| seen.contains(&key)),
            };
            if repeated {
                self.state.duplicate = Some(key.into_owned());
                return Err(de::Error::custom("repeated key"));
            }
            let count = self.state.keys.len() - start;
            if many.is_none() && count >= LINEAR_KEYS {
                let set: HashSet<Cow<'de, str>> = self
                    .state
                    .keys
                    .get(start..)
                    .unwrap_or_default()
                    .iter()
                    .cloned()
                    .chain(std::iter::once(key.clone()))
                    .collect();
                many = Some(set);
            }
            // The key stays on the stack while its value is read; the value's
            // own objects push above it and pop back.
            self.state.keys.push(key);
            map.next_value_seed(Unique {
                state: &mut *self.state,
            })?;
        }
        self.state.keys.truncate(start);
        Ok(())
    }
}

struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("a key")
    }

    fn visit_borrowed_str<E: de::Error>(self, key: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(key))
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(key.to_owned()))
    }

    fn visit_string<E: de::Error>(self, key: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(key))
    }
}

/// Where the first object that repeats `key` is, as a JSON pointer; only
/// computed once a duplicate was found, so the common path keeps no path.
fn duplicate_path(text: &str, key: &str) -> Option<String> {
    // A parsed value would have lost the duplicate, so the objects of the
    // text are walked member by member instead.
    find_repeating(text, key, "")
}

fn find_repeating(text: &str, key: &str, path: &str) -> Option<String> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') {
        let found = members(text).ok()?;
        if found.iter().filter(|member| member.key == key).count() > 1 {
            return Some(path.to_owned());
        }
        for member in &found {
            let inner = text.get(member.value.clone())?;
            let step = member.key.replace('~', "~0").replace('/', "~1");
            if let Some(hit) = find_repeating(inner, key, &format!("{path}/{step}")) {
                return Some(hit);
            }
        }
        None
    } else if trimmed.starts_with('[') {
        let items: Vec<&RawValue> = serde_json::from_str(text).ok()?;
        items
            .iter()
            .enumerate()
            .find_map(|(idx, item)| find_repeating(item.get(), key, &format!("{path}/{idx}")))
    } else {
        None
    }
}

// --- the member scanner ---

fn syntax(what: &str) -> JsonError {
    JsonError::Syntax(format!("an object with {what}"))
}

fn skip_whitespace(bytes: &[u8], mut pos: usize) -> usize {
    while matches!(bytes.get(pos), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        pos += 1;
    }
    pos
}

/// The end (one past the closing quote) of the string that starts at `pos`.
fn string_end(bytes: &[u8], pos: usize) -> Option<usize> {
    if bytes.get(pos) != Some(&b'"') {
        return None;
    }
    let mut idx = pos + 1;
    loop {
        match bytes.get(idx)? {
            b'\\' => idx += 2,
            b'"' => return Some(idx + 1),
            _ => idx += 1,
        }
    }
}

fn decode_key(literal: &str) -> Result<Cow<'_, str>, JsonError> {
    match literal
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
    {
        Some(inner) if !inner.contains('\\') => Ok(Cow::Borrowed(inner)),
        _ => serde_json::from_str::<String>(literal)
            .map(Cow::Owned)
            .map_err(|err| JsonError::Syntax(err.to_string())),
    }
}

fn trailing(bytes: &[u8], pos: usize) -> Result<(), JsonError> {
    if skip_whitespace(bytes, pos) == bytes.len() {
        Ok(())
    } else {
        Err(syntax("text after its end"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    #[test]
    fn the_reserved_key_is_found_in_any_object_and_spelling_and_repeats_pass() {
        for text in [
            r#"{"a":{"$serde_json::private::RawValue":"{}"}}"#,
            r#"[1,{"b":[{"$serde_json::private::Raw\u0056alue":"1"}]}]"#,
            r#"{"a":1,"a":2,"c":{"$serde_json::private::RawValue":"1"}}"#,
        ] {
            assert_eq!(
                find_reserved_key(text),
                Err(JsonError::ReservedKey),
                "{text}"
            );
        }
        assert_eq!(find_reserved_key(r#"{"a":1,"a":2,"s":"\u00e9"}"#), Ok(()));
        assert_eq!(find_reserved_key(r#"{"s":"RawValue"}"#), Ok(()));
    }

    #[test]
    fn repeated_keys_are_found_at_any_depth_after_decoding() {
        assert_eq!(
            check_unique_keys(r#"{"a":1,"b":{"c":[1,{"d":2}]}}"#),
            Ok(())
        );
        assert_eq!(
            check_unique_keys(r#"{"name":"read","name":"delete"}"#),
            Err(JsonError::DuplicateKey {
                key: "name".into(),
                path: String::new()
            })
        );
        let nested =
            check_unique_keys(r#"{"params":{"arguments":{"path":"/a","p\u0061th":"/b"}}}"#);
        assert_eq!(
            nested,
            Err(JsonError::DuplicateKey {
                key: "path".into(),
                path: "/params/arguments".into()
            })
        );
        assert!(
            nested
                .unwrap_err()
                .to_string()
                .contains("`path` appears twice in one object (at `/params/arguments`)")
        );
        let in_array = check_unique_keys(r#"[{"x":1},{"x":1,"x":2}]"#);
        assert!(matches!(in_array, Err(JsonError::DuplicateKey { ref path, .. }) if path == "/1"));
        // Sibling objects may use the same keys.
        assert_eq!(check_unique_keys(r#"[{"x":1},{"x":2}]"#), Ok(()));
        assert_eq!(check_unique_keys(r#"{"a":{"x":1},"b":{"x":1}}"#), Ok(()));
        assert!(matches!(
            check_unique_keys(r#"{"a":1"#),
            Err(JsonError::Syntax(_))
        ));
        assert!(matches!(
            check_unique_keys(r#"{"a":1} x"#),
            Err(JsonError::Syntax(_))
        ));
    }

    #[test]
    fn depth_is_counted_from_the_outermost_value_outside_strings() {
        let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert_eq!(check_depth(&nested(3), 3), Ok(()));
        assert_eq!(
            check_depth(&nested(4), 3),
            Err(JsonError::TooDeep { limit: 3 })
        );
        // Siblings do not add up; brackets in strings and escaped quotes
        // are no structure.
        assert_eq!(check_depth(r#"{"a":[1],"b":{"c":[2]}}"#, 3), Ok(()));
        assert_eq!(check_depth(r#"{"s":"[[[[[\"{{{{","t":[]}"#, 2), Ok(()));
        assert_eq!(check_depth("7", 1), Ok(()));
        // Far past any parser's limit, found without recursion.
        assert_eq!(
            check_depth(&nested(1_000_000), 128),
            Err(JsonError::TooDeep { limit: 128 })
        );
        // The key scan refuses the same texts, with the same error.
        assert_eq!(find_duplicate_key_within(&nested(3), 3), Ok(()));
        assert_eq!(
            find_duplicate_key_within(&nested(4), 3),
            Err(JsonError::TooDeep { limit: 3 })
        );
        assert_eq!(
            find_duplicate_key(&nested(1_000_000)),
            Err(JsonError::TooDeep { limit: 128 })
        );
        assert!(
            JsonError::TooDeep { limit: 64 }
                .to_string()
                .contains("nests deeper than 64 levels")
        );
    }

    proptest! {
        #[test]
        fn the_depth_check_agrees_with_the_nesting_of_values(value in json_value(), limit in 1usize..6) {
            fn depth(value: &Value) -> usize {
                match value {
                    Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
                    Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
                    _ => 0,
                }
            }
            let text = value.to_string();
            let deep = depth(&value) > limit;
            prop_assert_eq!(check_depth(&text, limit).is_err(), deep, "{}", text);
            prop_assert_eq!(
                matches!(find_duplicate_key_within(&text, limit), Err(JsonError::TooDeep { .. })),
                deep,
                "{}",
                text
            );
        }

        #[test]
        fn strings_are_written_as_serde_json_writes_them(text in "\\PC{0,12}|[\\x00-\\x7f]{0,12}") {
            prop_assert_eq!(string_literal(&text), serde_json::to_string(&text).unwrap());
        }
    }

    #[test]
    fn large_objects_are_checked_with_a_set() {
        let mut object = serde_json::Map::new();
        for idx in 0..200 {
            object.insert(format!("k{idx}"), json!(idx));
        }
        let text = Value::Object(object).to_string();
        assert_eq!(check_unique_keys(&text), Ok(()));
        let repeated = text.replacen('}', r#","k150":0}"#, 1);
        assert!(matches!(
            check_unique_keys(&repeated),
            Err(JsonError::DuplicateKey { ref key, .. }) if key == "k150"
        ));
    }

    #[test]
    fn integers_beyond_64_bits_are_found_outside_strings_only() {
        assert_eq!(inexact_integer(r#"{"a":12345678901234567890}"#), None);
        assert_eq!(inexact_integer(r#"{"a":-9223372036854775808}"#), None);
        assert_eq!(
            inexact_integer(r#"{"a":[1, 100000000000000000001]}"#),
            Some("100000000000000000001")
        );
        assert_eq!(
            inexact_integer(r#"{"a":-9223372036854775809}"#),
            Some("-9223372036854775809")
        );
        assert_eq!(inexact_integer(r#"{"a":1e400,"b":1.5,"c":1E+2}"#), None);
        assert_eq!(
            inexact_integer(r#"{"s":"100000000000000000001 \" 99999999999999999999"}"#),
            None
        );
        assert_eq!(inexact_integer(r#"{"k100000000000000000001":0}"#), None);
    }

    #[test]
    fn members_keep_their_bytes_and_can_be_rewritten() {
        let text = r#" { "name" : "fs__read" , "arguments":{"b":1, "a":12345678901234567890,"f":1.0,"s":"\u00e9"},"_meta":{}} "#;
        let found = members(text).unwrap();
        let keys: Vec<&str> = found.iter().map(|member| member.key.as_ref()).collect();
        assert_eq!(keys, ["name", "arguments", "_meta"]);
        assert_eq!(&text[found[0].value.clone()], r#""fs__read""#);
        assert_eq!(
            &text[found[1].value.clone()],
            r#"{"b":1, "a":12345678901234567890,"f":1.0,"s":"\u00e9"}"#
        );
        let mut writer = ObjectWriter::with_capacity(text.len());
        for member in &found {
            if member.key == "name" {
                writer.member("name", &string_literal("read"));
            } else {
                writer.copy(&text[member.span.clone()]);
            }
        }
        assert_eq!(
            writer.finish(),
            r#"{"name":"read","arguments":{"b":1, "a":12345678901234567890,"f":1.0,"s":"\u00e9"},"_meta":{}}"#
        );
        assert_eq!(members("{ }").unwrap(), Vec::new());
        assert_eq!(members("[1]"), Err(JsonError::NotObject));
        assert!(members(r#"{"a":1,}"#).is_err());
        assert!(members(r#"{"a" 1}"#).is_err());
        let escaped = members(r#"{"n\u0061me":1}"#).unwrap();
        assert_eq!(escaped[0].key, "name");
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            "[a-z\\u{e9}\"\\\\]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-c]{1,2}", inner, 0..4)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn serialised_values_have_unique_keys_and_their_members(value in json_value()) {
            let text = value.to_string();
            prop_assert_eq!(check_unique_keys(&text), Ok(()));
            if let Value::Object(map) = &value {
                let found = members(&text).unwrap();
                prop_assert_eq!(found.len(), map.len());
                for member in found {
                    let parsed: Value = serde_json::from_str(&text[member.value.clone()]).unwrap();
                    prop_assert_eq!(Some(&parsed), map.get(member.key.as_ref()));
                }
            }
        }

        #[test]
        fn checking_never_panics(text in "\\PC{0,64}") {
            let _ = check_unique_keys(&text);
            let _ = find_duplicate_key(&text);
            let _ = members(&text);
        }

        #[test]
        fn the_scan_and_the_parse_agree_on_repeated_keys(value in json_value(), key in "[a-c]{1,2}", escape in any::<bool>()) {
            let text = value.to_string();
            prop_assert_eq!(find_duplicate_key(&text), Ok(()));
            // Repeat a key in the first object of the text, possibly spelled
            // with an escape.
            if let Some(brace) = text.find('{') {
                let spelled = if escape {
                    key.chars().map(|ch| format!("\\u{:04x}", ch as u32)).collect::<String>()
                } else {
                    key.clone()
                };
                let inject = format!("\"{key}\":1,\"{spelled}\":2");
                let rest = &text[brace + 1..];
                let sep = if rest.starts_with('}') { "" } else { "," };
                let repeated = format!("{}{inject}{sep}{rest}", &text[..=brace]);
                let parsed = check_unique_keys(&repeated);
                let scanned = find_duplicate_key(&repeated);
                prop_assert!(matches!(scanned, Err(JsonError::DuplicateKey { .. })), "{repeated}");
                prop_assert_eq!(parsed.is_err(), scanned.is_err());
            }
        }
    }
}
