//! JSON-RPC framing: one message per line, parsed only as far as routing needs.
//!
//! [`Message::parse`] borrows `id`, `params`, `result` and `error` as raw
//! slices of the line (their JSON text, as written); nothing else is
//! decoded. Forwarding a message under a
//! new id splices the new id into the original text ([`Message::with_id`]), so
//! every field the gateway does not decide on (unknown ones and `_meta`
//! included) reaches the other side byte for byte.
//!
//! This module does no I/O; `conn` owns the buffers.

use std::borrow::Cow;
use std::marker::PhantomData;
use std::ops::Range;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::json::{
    JsonError, check_depth, find_duplicate_key_within, find_reserved_key, span_in, string_literal,
};

/// One JSON-RPC message, borrowed from its line.
#[derive(Debug, PartialEq, Eq)]
pub struct Message<'a> {
    line: &'a str,
    /// The id as written, `null` included: where a new id goes.
    id_written: Option<&'a str>,
    /// The params as written, `null` included: where new params go.
    params_written: Option<&'a str>,
    /// The id, for requests and responses; `None` for an `"id": null`.
    pub id: Option<&'a str>,
    /// The method, for requests and notifications.
    pub method: Option<Cow<'a, str>>,
    /// The params, when present.
    pub params: Option<&'a str>,
    /// The result of a successful response.
    pub result: Option<&'a str>,
    /// The error of a failed response.
    pub error: Option<&'a str>,
}

/// What kind of message it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A request: a method and an id.
    Request,
    /// A notification: a method and no id.
    Notification,
    /// A response: an id and a result or an error.
    Response,
}

/// Why a line is not a JSON-RPC message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The line is not a JSON object.
    #[error("not a JSON-RPC message: {0}")]
    NotJson(String),
    /// A JSON object that is neither request, notification nor response.
    #[error("a JSON object that is not a JSON-RPC message")]
    NotJsonRpc,
    /// JSON that is not one object: an array (a JSON-RPC batch) or a bare
    /// value. A batch could carry a call inside what reads as one message, so
    /// none is accepted (the protocol since 2025-06-18 has no batches).
    #[error("a JSON-RPC message is one JSON object per line; batches (arrays) are not accepted")]
    NotObject,
}

#[derive(Deserialize)]
struct Envelope<'a> {
    // An `"id": null` is kept (as the text `null`), not read as no id: it
    // is how a peer answers a message it could not read.
    #[serde(borrow, default, deserialize_with = "written")]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "written")]
    params: Option<&'a RawValue>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
}

/// A member's value as written, `null` included (an `Option` alone would
/// read `null` as absent, and a splice would then add a second member).
fn written<'de, D>(deserializer: D) -> Result<Option<&'de RawValue>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    <&'de RawValue>::deserialize(deserializer).map(Some)
}

/// `None` for a value written as `null`.
fn not_null(raw: Option<&str>) -> Option<&str> {
    raw.filter(|raw| *raw != "null")
}

// === impl Message ===

impl<'a> Message<'a> {
    /// Parses one line (without its newline).
    ///
    /// # Errors
    ///
    /// [`FrameError`] when the line is not a JSON-RPC message.
    pub fn parse(line: &'a str) -> Result<Self, FrameError> {
        // serde fills a struct from an array too (field by field, in
        // order), so an array must be refused before it is read.
        if !line
            .trim_start_matches([' ', '\t', '\n', '\r'])
            .starts_with('{')
        {
            return Err(FrameError::NotObject);
        }
        let envelope: Envelope<'a> =
            serde_json::from_str(line).map_err(|err| FrameError::NotJson(err.to_string()))?;
        // An id or params written as `null` count as absent (a request
        // under a `null` id is not one), but a new id or params replace them.
        let text = |raw: Option<&'a RawValue>| raw.map(RawValue::get);
        let message = Self {
            line,
            id_written: text(envelope.id),
            params_written: text(envelope.params),
            id: not_null(text(envelope.id)),
            method: envelope.method,
            params: not_null(text(envelope.params)),
            result: text(envelope.result),
            error: text(envelope.error),
        };
        // An error under `"id": null` is a peer's answer to a message it
        // could not read (JSON-RPC 2.0 §5): a response that answers no
        // request.
        let null_error =
            envelope.id.is_some() && message.method.is_none() && message.error.is_some();
        if message.method.is_none() && message.id.is_none() && !null_error {
            return Err(FrameError::NotJsonRpc);
        }
        if message.method.is_none() && message.result.is_none() && message.error.is_none() {
            return Err(FrameError::NotJsonRpc);
        }
        Ok(message)
    }

    /// The line the message was parsed from.
    pub fn line(&self) -> &'a str {
        self.line
    }

    /// Request, notification or response.
    pub fn kind(&self) -> Kind {
        match (&self.method, &self.id) {
            (Some(_), Some(_)) => Kind::Request,
            (Some(_), None) => Kind::Notification,
            (None, _) => Kind::Response,
        }
    }

    /// The method, or the empty string.
    pub fn method(&self) -> &str {
        self.method.as_deref().unwrap_or("")
    }

    /// The id as raw JSON text, or `null`.
    pub fn id_text(&self) -> &'a str {
        self.id.unwrap_or("null")
    }

    /// Whether this is an error response under `"id": null`: the peer's
    /// answer to a message it could not read, which answers no request.
    pub fn answers_nothing(&self) -> bool {
        self.kind() == Kind::Response && self.id.is_none()
    }

    /// The same message under another id (raw JSON text such as `7` or
    /// `"hintgate-3"`), spliced into the original line.
    pub fn with_id(&self, new_id: &str) -> String {
        match self.id_written.and_then(|id| span_in(self.line, id)) {
            Some(id) => splice(self.line, id, new_id),
            // A message without an id gets one inserted after the brace.
            None => match self.line.find('{') {
                Some(brace) => {
                    let mut out = String::with_capacity(self.line.len() + new_id.len() + 8);
                    out.push_str(self.line.get(..=brace).unwrap_or("{"));
                    out.push_str("\"id\":");
                    out.push_str(new_id);
                    let rest = self.line.get(brace + 1..).unwrap_or("}");
                    if !rest.trim_start().starts_with('}') {
                        out.push(',');
                    }
                    out.push_str(rest);
                    out
                }
                None => self.line.to_owned(),
            },
        }
    }

    /// The same message with `params` replaced by `new_params` (raw JSON).
    pub fn with_params(&self, new_params: &str) -> String {
        match self
            .params_written
            .and_then(|params| span_in(self.line, params))
        {
            Some(params) => splice(self.line, params, new_params),
            None => self.line.to_owned(),
        }
    }

    /// The same message with both a new id and new params.
    pub fn with_id_and_params(&self, new_id: &str, new_params: &str) -> String {
        let (Some(id), Some(params)) = (
            self.id_written.and_then(|id| span_in(self.line, id)),
            self.params_written
                .and_then(|params| span_in(self.line, params)),
        ) else {
            return Message::parse(&self.with_params(new_params))
                .map(|message| message.with_id(new_id))
                .unwrap_or_else(|_| self.with_id(new_id));
        };
        splice_two(self.line, (id, new_id), (params, new_params))
    }
}

impl Message<'_> {
    /// The same message under a new id, with `fields` (raw JSON members such
    /// as `"resultType":"complete"`) added at the front of the `result`
    /// object. A result that is not an object only gets the new id.
    pub fn with_id_and_result_fields(&self, new_id: &str, fields: &str) -> String {
        let Some(result) = self.result else {
            return self.with_id(new_id);
        };
        let Some(span) = span_in(self.line, result) else {
            return self.with_id(new_id);
        };
        let body = result;
        if !body.starts_with('{') {
            return self.with_id(new_id);
        }
        let empty = body
            .get(1..)
            .is_some_and(|rest| rest.trim_start().starts_with('}'));
        let mut object = String::with_capacity(body.len() + fields.len() + 1);
        object.push('{');
        object.push_str(fields);
        if !empty {
            object.push(',');
        }
        object.push_str(body.get(1..).unwrap_or("}"));
        let with_result = splice(self.line, span, &object);
        // Splice the id into the new line (the id comes before the result
        // in practice, but do not rely on it).
        Message::parse(&with_result)
            .map(|message| message.with_id(new_id))
            .unwrap_or(with_result)
    }
}

/// Where a message's id and params sit in its line, so a message kept as
/// text can get a new id or params later without being parsed again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Spans {
    /// The id's byte range.
    pub id: Option<std::ops::Range<usize>>,
    /// The params' byte range.
    pub params: Option<std::ops::Range<usize>>,
}

impl Message<'_> {
    /// Where the id and params sit in the line.
    pub fn spans(&self) -> Spans {
        let range = |raw: Option<&str>| raw.and_then(|raw| span_in(self.line, raw));
        Spans {
            id: range(self.id),
            params: range(self.params),
        }
    }
}

impl Spans {
    /// `line` with the id replaced (or inserted).
    pub fn with_id(&self, line: &str, new_id: &str) -> String {
        match &self.id {
            Some(id) => splice(line, id.clone(), new_id),
            None => Message::parse(line)
                .map_or_else(|_| line.to_owned(), |message| message.with_id(new_id)),
        }
    }

    /// `line` with the id and the params replaced.
    pub fn with_id_and_params(&self, line: &str, new_id: &str, new_params: &str) -> String {
        match (&self.id, &self.params) {
            (Some(id), Some(params)) => {
                splice_two(line, (id.clone(), new_id), (params.clone(), new_params))
            }
            _ => Message::parse(line).map_or_else(
                |_| line.to_owned(),
                |message| message.with_id_and_params(new_id, new_params),
            ),
        }
    }

    /// The params as raw text, when the message has them.
    pub fn params<'l>(&self, line: &'l str) -> Option<&'l str> {
        self.params
            .as_ref()
            .and_then(|range| line.get(range.clone()))
    }
}

/// A message read once and kept with its line: its kind, its method, and
/// where its id and params sit. Made where a line arrives (a transport's
/// task), it is what every later reader takes, so nobody parses the line
/// again to route it or decide on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Framed {
    line: String,
    kind: Kind,
    method: Option<Box<str>>,
    /// The id as written, `null` included: where a new id goes.
    id_written: Option<Range<usize>>,
    /// The params as written, `null` included.
    params_written: Option<Range<usize>>,
    /// The id and the params, `None` when absent or written as `null`.
    spans: Spans,
    /// The result and the error of a response.
    result: Option<Range<usize>>,
    error: Option<Range<usize>>,
}

/// What reading a line where it arrived found: one message, or why the
/// gateway refuses it before anything else reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reading {
    /// One JSON-RPC message that passed the side's checks.
    Message(Framed),
    /// A line the side's checks refuse (see [`HostLine::read`] and
    /// [`ServerLine::read`]): refused on record, never read further.
    Refused(String, JsonError),
    /// A line that passed them and is not one JSON-RPC message.
    Unreadable(String, FrameError),
}

/// A line read where it arrived, by the reading of side `S` (a host's or a
/// server's): the event loop takes a host's line only as a [`HostLine`] and
/// a server's only as a [`ServerLine`], so each went through its side's
/// checks, in the order the loop once ran them itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrived<S> {
    reading: Reading,
    side: PhantomData<S>,
}

/// The host's side (see [`HostLine`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FromHost {}

/// A server's side (see [`ServerLine`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FromServer {}

/// A host's line, read where it arrived ([`HostLine::read`]).
pub type HostLine = Arrived<FromHost>;

/// A server's line, read where it arrived ([`ServerLine::read`]).
pub type ServerLine = Arrived<FromServer>;

// === impl Framed ===

impl Framed {
    /// Reads `line` (without its newline) as [`Message::parse`] does.
    ///
    /// # Errors
    ///
    /// The line back, with why it is not a JSON-RPC message.
    pub fn parse(line: String) -> Result<Self, (String, FrameError)> {
        let read = Message::parse(&line).map(|message| {
            let range = |raw: Option<&str>| raw.and_then(|raw| span_in(&line, raw));
            Self {
                line: String::new(),
                kind: message.kind(),
                method: message.method.as_deref().map(Box::from),
                id_written: range(message.id_written),
                params_written: range(message.params_written),
                spans: message.spans(),
                result: range(message.result),
                error: range(message.error),
            }
        });
        match read {
            Ok(framed) => Ok(Self { line, ..framed }),
            Err(err) => Err((line, err)),
        }
    }

    /// The message, as [`Message::parse`] gives it, from what was read:
    /// the line is not read again.
    pub fn message(&self) -> Message<'_> {
        let text = |range: &Option<Range<usize>>| {
            range
                .as_ref()
                .and_then(|range| self.line.get(range.clone()))
        };
        Message {
            line: &self.line,
            id_written: text(&self.id_written),
            params_written: text(&self.params_written),
            id: text(&self.spans.id),
            method: self.method.as_deref().map(Cow::Borrowed),
            params: text(&self.spans.params),
            result: text(&self.result),
            error: text(&self.error),
        }
    }

    /// Request, notification or response.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The method, or the empty string.
    pub fn method(&self) -> &str {
        self.method.as_deref().unwrap_or("")
    }

    /// The id as raw JSON text, or `null`.
    pub fn id_text(&self) -> &str {
        self.spans
            .id
            .as_ref()
            .and_then(|range| self.line.get(range.clone()))
            .unwrap_or("null")
    }

    /// The params as raw JSON text, when present (and not `null`).
    pub fn params(&self) -> Option<&str> {
        self.spans.params(&self.line)
    }

    /// Where the id and the params sit in the line.
    pub fn spans(&self) -> Spans {
        self.spans.clone()
    }

    /// The line.
    pub fn line(&self) -> &str {
        &self.line
    }

    /// The line, given up.
    pub fn into_line(self) -> String {
        self.line
    }

    /// The same message under another id (raw JSON text), read without
    /// parsing again: the id's text is replaced and what follows it moves.
    /// A message without an id is read again once it has one.
    ///
    /// # Errors
    ///
    /// Only for a message without an id, whose new line does not read (an
    /// id that is not JSON text).
    pub fn with_id(&self, new_id: &str) -> Result<Self, (String, FrameError)> {
        let Some(id) = self.id_written.clone() else {
            let line = Spans::default().with_id(&self.line, new_id);
            return Self::parse(line);
        };
        let line = splice(&self.line, id.clone(), new_id);
        let moved = |range: &Option<Range<usize>>| {
            range.clone().map(|range| {
                if range.start >= id.end {
                    let start = range.start - id.end + id.start + new_id.len();
                    start..start + range.len()
                } else {
                    range
                }
            })
        };
        let id_written = id.start..id.start + new_id.len();
        let spans = Spans {
            id: (new_id != "null").then(|| id_written.clone()),
            params: moved(&self.spans.params),
        };
        let method = self.method.clone();
        // As `Message::kind`: a method under a `null` id is a notification.
        let kind = match (&method, &spans.id) {
            (Some(_), Some(_)) => Kind::Request,
            (Some(_), None) => Kind::Notification,
            (None, _) => Kind::Response,
        };
        Ok(Self {
            kind,
            method,
            id_written: Some(id_written),
            params_written: moved(&self.params_written),
            spans,
            result: moved(&self.result),
            error: moved(&self.error),
            line,
        })
    }
}

// === impl Arrived ===

impl<S> Arrived<S> {
    fn of(reading: Reading) -> Self {
        Self {
            reading,
            side: PhantomData,
        }
    }

    /// What reading the line found.
    pub fn reading(&self) -> &Reading {
        &self.reading
    }

    /// The message, when reading found one.
    pub fn framed(&self) -> Option<&Framed> {
        match &self.reading {
            Reading::Message(framed) => Some(framed),
            Reading::Refused(..) | Reading::Unreadable(..) => None,
        }
    }

    /// What reading the line found, taken.
    pub fn into_reading(self) -> Reading {
        self.reading
    }

    /// The line's length in bytes.
    pub fn len(&self) -> usize {
        self.line().len()
    }

    /// Whether the line is empty.
    pub fn is_empty(&self) -> bool {
        self.line().is_empty()
    }

    /// The line.
    pub fn line(&self) -> &str {
        match &self.reading {
            Reading::Message(framed) => framed.line(),
            Reading::Refused(line, _) | Reading::Unreadable(line, _) => line,
        }
    }

    /// The line, given up.
    pub fn into_line(self) -> String {
        match self.reading {
            Reading::Message(framed) => framed.into_line(),
            Reading::Refused(line, _) | Reading::Unreadable(line, _) => line,
        }
    }
}

impl HostLine {
    /// Reads a host's line: a line that repeats a key anywhere could be read
    /// two ways, and one nested deeper than `max_depth` may not be readable
    /// by a server, so both are found before anything else reads it; then
    /// the envelope is read once.
    pub fn read(line: String, max_depth: usize) -> Self {
        if let Err(err) = find_duplicate_key_within(&line, max_depth) {
            return Self::of(Reading::Refused(line, err));
        }
        Self::of(envelope(line))
    }

    /// The same line under another id (raw JSON text; a transport's own id
    /// in place of the host's), with what reading it found: a message's
    /// spans moved, a refused line still refused (its envelope read for
    /// where the id goes). `None` for a line that is not a message, or one
    /// whose new line does not read.
    pub fn with_id(&self, new_id: &str) -> Option<Self> {
        let reading = match &self.reading {
            Reading::Message(framed) => Reading::Message(framed.with_id(new_id).ok()?),
            Reading::Refused(line, err) => {
                let framed = Framed::parse(line.clone()).ok()?.with_id(new_id).ok()?;
                Reading::Refused(framed.into_line(), err.clone())
            }
            Reading::Unreadable(..) => return None,
        };
        Some(Self::of(reading))
    }
}

impl ServerLine {
    /// Reads a server's line: a line is passed on as its text, which no
    /// parser of the gateway reads whole, so its depth (at most
    /// `max_depth`) is checked before anything else reads it, and so is the
    /// key serde_json reads as raw JSON text (the gateway would check, mark
    /// or rewrite the inner value while the host reads the outer one); then
    /// the envelope is read once.
    pub fn read(line: String, max_depth: usize) -> Self {
        if let Err(err) = check_depth(&line, max_depth) {
            return Self::of(Reading::Refused(line, err));
        }
        if let Err(err @ JsonError::ReservedKey) = find_reserved_key(&line) {
            return Self::of(Reading::Refused(line, err));
        }
        Self::of(envelope(line))
    }

    /// A message under another id (raw JSON text): a server's error under
    /// `"id": null` in the body that answers one of the gateway's requests,
    /// matched to that request. Its reading stands: an id is no container
    /// and holds no key. `None` for a line that is not a message.
    pub fn with_id(&self, new_id: &str) -> Option<Self> {
        match &self.reading {
            Reading::Message(framed) => {
                Some(Self::of(Reading::Message(framed.with_id(new_id).ok()?)))
            }
            Reading::Refused(..) | Reading::Unreadable(..) => None,
        }
    }
}

/// The envelope of a line whose side's checks passed.
fn envelope(line: String) -> Reading {
    match Framed::parse(line) {
        Ok(framed) => Reading::Message(framed),
        Err((line, err)) => Reading::Unreadable(line, err),
    }
}

/// Two spans of `line` replaced (in either order; they do not overlap).
fn splice_two(line: &str, a: (Range<usize>, &str), b: (Range<usize>, &str)) -> String {
    // The later span first, so that the earlier one's offsets stay valid.
    let (first, second) = if a.0.start < b.0.start {
        (a, b)
    } else {
        (b, a)
    };
    let tail_done = splice(line, second.0, second.1);
    splice(&tail_done, first.0, first.1)
}

fn splice(line: &str, span: Range<usize>, replacement: &str) -> String {
    let (Some(before), Some(after)) = (line.get(..span.start), line.get(span.end..)) else {
        return line.to_owned();
    };
    let mut out = String::with_capacity(before.len() + replacement.len() + after.len());
    out.push_str(before);
    out.push_str(replacement);
    out.push_str(after);
    out
}

/// A request line.
pub fn request(id: &str, method: &str, params: &serde_json::Value) -> String {
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":{},\"params\":{params}}}",
        string_literal(method)
    )
}

/// A notification line.
pub fn notification(method: &str, params: &serde_json::Value) -> String {
    format!(
        "{{\"jsonrpc\":\"2.0\",\"method\":{},\"params\":{params}}}",
        string_literal(method)
    )
}

/// A successful response line; `id` is raw JSON.
pub fn response(id: &str, result: &serde_json::Value) -> String {
    format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{result}}}")
}

/// An error response line; `id` is raw JSON.
pub fn error_response(id: &str, code: i64, message: &str) -> String {
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{{\"code\":{code},\"message\":{}}}}}",
        string_literal(message)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    #[test]
    fn kinds() {
        let request = Message::parse(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#).unwrap();
        assert_eq!(request.kind(), Kind::Request);
        let note =
            Message::parse(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap();
        assert_eq!(note.kind(), Kind::Notification);
        let response = Message::parse(r#"{"jsonrpc":"2.0","id":"a","result":{}}"#).unwrap();
        assert_eq!(response.kind(), Kind::Response);
        assert!(Message::parse("garbage").is_err());
        assert_eq!(
            Message::parse(r#"{"x":1}"#).unwrap_err(),
            FrameError::NotJsonRpc
        );
        assert_eq!(
            Message::parse(r#"{"id":1}"#).unwrap_err(),
            FrameError::NotJsonRpc
        );
    }

    #[test]
    fn an_error_under_a_null_id_answers_nothing() {
        let line = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#;
        let message = Message::parse(line).unwrap();
        assert_eq!(message.kind(), Kind::Response);
        assert!(message.answers_nothing());
        assert_eq!(message.id_text(), "null");
        // Matched to a request, it gets that request's id in place of the
        // null, not a second id.
        assert_eq!(
            message.with_id("7"),
            r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32700,"message":"Parse error"}}"#
        );
        // A request under a null id is still no request, and a result
        // under a null id is not JSON-RPC.
        let note = Message::parse(r#"{"id":null,"method":"tools/call"}"#).unwrap();
        assert_eq!(note.kind(), Kind::Notification);
        assert!(!note.answers_nothing());
        assert_eq!(
            Message::parse(r#"{"id":null,"result":{}}"#).unwrap_err(),
            FrameError::NotJsonRpc
        );
        let answer = Message::parse(r#"{"id":3,"error":{}}"#).unwrap();
        assert!(!answer.answers_nothing());
    }

    #[test]
    fn a_batch_or_a_bare_value_is_not_a_message() {
        // serde would read these arrays as a notification and a request,
        // field by field: each hides a call behind what it seems to be.
        for line in [
            r#"[null,"notifications/initialized",{},{"jsonrpc":"2.0","id":9,"method":"tools/call"}]"#,
            r#" [1,"tools/call",{"name":"read"}]"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}]"#,
            "7",
            r#""tools/call""#,
        ] {
            assert_eq!(
                Message::parse(line).unwrap_err(),
                FrameError::NotObject,
                "{line}"
            );
        }
        assert!(Message::parse("\t\r\n {\"id\":1,\"method\":\"ping\"}").is_ok());
    }

    #[test]
    fn with_id_keeps_every_other_byte() {
        let line = r#"{"jsonrpc":"2.0", "id" : "host-7" ,"method":"x","params":{"_meta":{"a":1},"unknown":[1,2]},"extra":true}"#;
        let message = Message::parse(line).unwrap();
        assert_eq!(
            message.with_id("42"),
            r#"{"jsonrpc":"2.0", "id" : 42 ,"method":"x","params":{"_meta":{"a":1},"unknown":[1,2]},"extra":true}"#
        );
        let both = message.with_id_and_params("9", r#"{"name":"y"}"#);
        assert_eq!(
            both,
            r#"{"jsonrpc":"2.0", "id" : 9 ,"method":"x","params":{"name":"y"},"extra":true}"#
        );
    }

    #[test]
    fn result_fields_are_added_at_the_front() {
        let message = Message::parse(r#"{"jsonrpc":"2.0","id":3,"result":{"tools":[]}}"#).unwrap();
        assert_eq!(
            message.with_id_and_result_fields("\"h\"", r#""resultType":"complete""#),
            r#"{"jsonrpc":"2.0","id":"h","result":{"resultType":"complete","tools":[]}}"#
        );
        let empty = Message::parse(r#"{"id":3,"result":{ }}"#).unwrap();
        assert_eq!(
            empty.with_id_and_result_fields("4", r#""a":1"#),
            r#"{"id":4,"result":{"a":1 }}"#
        );
    }

    #[test]
    fn a_null_id_is_replaced_not_doubled() {
        // Found by fuzzing: `"id": null` reads as no id, and a new id was
        // inserted beside it; the line then had two `id` members.
        let error =
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#;
        let message = Message::parse(error).unwrap();
        assert_eq!(message.kind(), Kind::Response);
        assert_eq!(message.id_text(), "null");
        let spliced = message.with_id("7");
        assert_eq!(
            spliced,
            r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32700,"message":"Parse error"}}"#
        );
        assert_eq!(Message::parse(&spliced).unwrap().id_text(), "7");
        // A method under a `null` id is still no request.
        let note = Message::parse(r#"{"id": null ,"method":"tools/call"}"#).unwrap();
        assert_eq!(note.kind(), Kind::Notification);
        assert_eq!(note.spans(), Spans::default());
        assert_eq!(
            note.spans()
                .with_id(r#"{"id": null ,"method":"tools/call"}"#, "\"h\""),
            r#"{"id": "h" ,"method":"tools/call"}"#
        );
    }

    #[test]
    fn null_params_are_replaced_not_kept() {
        // Found by fuzzing: new params for a request whose params were
        // written as `null` left the `null` in place.
        let line = r#"{"id":1,"method":"resources/list","params":null}"#;
        let message = Message::parse(line).unwrap();
        assert!(message.params.is_none());
        let spliced = message.with_id_and_params("2", r#"{"cursor":"c"}"#);
        assert_eq!(
            spliced,
            r#"{"id":2,"method":"resources/list","params":{"cursor":"c"}}"#
        );
        assert_eq!(
            message
                .spans()
                .with_id_and_params(line, "2", r#"{"cursor":"c"}"#),
            spliced
        );
    }

    #[test]
    fn escaped_methods_are_decoded() {
        let message = Message::parse(r#"{"id":1,"method":"tools\/call"}"#).unwrap();
        assert_eq!(message.method(), "tools/call");
    }

    /// A host's line is read in the loop's order: repeated keys, depth and
    /// syntax first (refused on record), then the envelope.
    #[test]
    fn a_host_line_is_read_for_repeated_keys_before_its_envelope() {
        let call = r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"x","arguments":{"a":1}}}"#;
        let Reading::Message(framed) = HostLine::read(call.to_owned(), 64).into_reading() else {
            panic!("a call reads");
        };
        assert_eq!(
            (framed.kind(), framed.method(), framed.id_text()),
            (Kind::Request, "tools/call", "4")
        );
        assert_eq!(framed.params(), Some(r#"{"name":"x","arguments":{"a":1}}"#));
        let message = Message::parse(call).unwrap();
        assert_eq!(framed.spans(), message.spans());

        let twice =
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"x","name":"y"}}"#;
        assert!(matches!(
            HostLine::read(twice.to_owned(), 64).reading(),
            Reading::Refused(_, JsonError::DuplicateKey { .. })
        ));
        let deep = format!(
            "{{\"id\":1,\"method\":\"m\",\"params\":{}1{}}}",
            "[".repeat(9),
            "]".repeat(9)
        );
        assert!(matches!(
            HostLine::read(deep.clone(), 8).reading(),
            Reading::Refused(_, JsonError::TooDeep { .. })
        ));
        assert!(matches!(
            HostLine::read(deep, 64).reading(),
            Reading::Message(_)
        ));
        assert!(matches!(
            HostLine::read("garbage".to_owned(), 64).reading(),
            Reading::Unreadable(_, FrameError::NotObject)
        ));
        assert!(matches!(
            HostLine::read(r#"{"id":1,"method":"m""#.to_owned(), 64).reading(),
            Reading::Refused(..) | Reading::Unreadable(_, FrameError::NotJson(_))
        ));
        let batch = HostLine::read(format!("[{call}]"), 64);
        assert_eq!(batch.len(), call.len() + 2);
        assert!(matches!(
            batch.reading(),
            Reading::Unreadable(_, FrameError::NotObject)
        ));
    }

    /// A server's line is read in the loop's order: depth, the reserved key,
    /// then the envelope; what the loop then reads of it is what parsing
    /// the line gives.
    #[test]
    fn a_server_line_is_read_for_depth_and_the_reserved_key_before_its_envelope() {
        let answer = r#"{"jsonrpc":"2.0","id":3,"result":{"content":[]}}"#;
        let Reading::Message(framed) = ServerLine::read(answer.to_owned(), 64).into_reading()
        else {
            panic!("an answer reads");
        };
        assert_eq!(framed.message(), Message::parse(answer).unwrap());
        assert_eq!(framed.message().result, Some(r#"{"content":[]}"#));

        let deep = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{{\"a\":{}1{}}}}}",
            "[".repeat(9),
            "]".repeat(9)
        );
        assert!(matches!(
            ServerLine::read(deep.clone(), 8).reading(),
            Reading::Refused(_, JsonError::TooDeep { .. })
        ));
        assert!(matches!(
            ServerLine::read(deep, 64).reading(),
            Reading::Message(_)
        ));
        let reserved = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{{\"{}\":\"{{}}\"}}}}",
            crate::json::RAW_VALUE_KEY
        );
        let read = ServerLine::read(reserved.clone(), 64);
        assert_eq!(
            read.into_reading(),
            Reading::Refused(reserved, JsonError::ReservedKey)
        );
        // An error under `"id": null`, matched to the request whose POST it
        // answers, is read as that request's answer; only a message is.
        let null = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"m"}}"#;
        let read = ServerLine::read(null.to_owned(), 64);
        assert!(read.framed().unwrap().message().answers_nothing());
        let matched = read.with_id("7").unwrap();
        let again = r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32700,"message":"m"}}"#;
        assert_eq!(matched, ServerLine::read(again.to_owned(), 64));
        let unreadable = ServerLine::read(r#"{"id":null,"result":{}}"#.to_owned(), 64);
        assert_eq!(unreadable.with_id("7"), None);
        assert_eq!(unreadable.len(), 23);
        assert!(matches!(
            unreadable.reading(),
            Reading::Unreadable(_, FrameError::NotJsonRpc)
        ));
    }

    proptest! {
        /// What a framed message says of itself under a new id is what
        /// reading the new line says, whatever the members' order, spacing
        /// and ids (`null` and absent included).
        #[test]
        fn a_framed_message_under_a_new_id_reads_as_its_new_line(
            members in prop::sample::subsequence(vec![0usize, 1, 2, 3, 4, 5], 0..=6).prop_shuffle(),
            id in prop_oneof![
                Just("null".to_owned()),
                any::<i32>().prop_map(|n| n.to_string()),
                "[a-z]{0,6}".prop_map(|s| format!("\"{s}\"")),
            ],
            new_id in prop_oneof![
                any::<u32>().prop_map(|n| n.to_string()),
                "[a-z0-9-]{1,12}".prop_map(|s| format!("\"{s}\"")),
            ],
            space in "[ ]{0,2}",
        ) {
            let text: Vec<String> = members.iter().map(|member| match member {
                0 => format!("\"id\":{space}{id}"),
                1 => "\"method\":\"tools/call\"".to_owned(),
                2 => format!("\"params\":{space}{{\"name\":\"x\",\"arguments\":{{\"a\":[1,2]}}}}"),
                3 => "\"jsonrpc\":\"2.0\"".to_owned(),
                4 => "\"result\":{\"ok\":true}".to_owned(),
                _ => "\"error\":{\"code\":1,\"message\":\"m\"}".to_owned(),
            }).collect();
            let line = format!("{{{space}{}}}", text.join(&format!(",{space}")));
            let Ok(framed) = Framed::parse(line.clone()) else {
                prop_assert!(Message::parse(&line).is_err());
                return Ok(());
            };
            // What it gives without reading the line again is what reading
            // it gives.
            prop_assert_eq!(Some(framed.message()), Message::parse(&line).ok());
            let expected = Framed::parse(Message::parse(&line).unwrap().with_id(&new_id));
            prop_assert_eq!(
                framed.with_id(&new_id).map_err(|(_, err)| err),
                expected.map_err(|(_, err)| err)
            );
        }

        #[test]
        fn parsing_never_panics(line in "\\PC{0,64}") {
            let _ = Message::parse(&line);
        }

        #[test]
        fn splicing_an_id_round_trips(id in any::<i64>(), new_id in any::<u32>(), params in "[a-z]{0,8}") {
            let original = json!({"jsonrpc": "2.0", "id": id, "method": "m", "params": {"p": params}});
            let line = original.to_string();
            let message = Message::parse(&line).unwrap();
            let spliced: Value = serde_json::from_str(&message.with_id(&new_id.to_string())).unwrap();
            let mut expected = original.clone();
            expected["id"] = json!(new_id);
            prop_assert_eq!(spliced, expected);
        }
    }
}
