//! A server's questions to a host, marked as the server's, and questions
//! across eras.
//!
//! Every `elicitation/create` a server sends reaches the person marked as
//! the server's ([`mark_question`]), whichever era either side speaks: each
//! line of its message starts with `[server NAME asks]` (its line breaks kept,
//! everything else that would break or hide a line escaped), and each field
//! of its form is titled `[NAME] ...`. A server cannot make its question
//! read as the gateway's own (`hintgate: approve this tool call?`, with an
//! `approve` box titled `Approve this call`).
//!
//! A `sampling/createMessage` is marked the same way, since in gateway mode
//! the host sees every server's request as hintgate's: its `systemPrompt`
//! starts with a line that names the server and says the request is neither
//! the user's nor hintgate's, and each line of the system prompt and of
//! every text of its messages starts with `[server NAME]` (what would break
//! or hide a line escaped). A server's `user` message then cannot pass for
//! words the user wrote, nor for the gateway's.
//!
//! Behind a gateway of several servers, a sampling request's
//! `includeContext` is narrowed ([`narrow_context`]): the host sees every
//! server as one, so the `thisServer` it would include is every server's
//! context, and `allServers` is more than one server may ask for. An
//! untrusted server's `thisServer` or `allServers` becomes `none` (logged);
//! a trusted server's is kept, and in wrap mode (one server behind the
//! gateway) `thisServer` is exact and kept.
//!
//! - A legacy server asks (elicitation, sampling, roots) while a 2026-07-28
//!   host's call is in flight: the host takes no requests, so its call is
//!   answered with an input-required result that carries the server's
//!   question, and a sealed state that names the server's call and question.
//!   The host retries with the answer; the gateway answers the server's
//!   question with it, and the server's result then answers the retry.
//! - A 2026-07-28 server answers a legacy host's call with an input-required
//!   result: the gateway asks the host each question as a request, gathers
//!   the answers, and sends the same call again with them and the server's
//!   own state (the pipeline's continuation: recorded, then sent); the host's
//!   call is answered by the server's final result.

use std::collections::HashMap;

use hintgate_policy::decide::{Decision, RememberOffer, Verdict};
use hintgate_policy::sanitize::{escape_line, one_line, sanitize};
use hintgate_policy::tool::Trust;
use serde_json::{Map, Value, json};

use super::Gateway;
use super::call::{Approver, CallContext, CallEnd, Channel, Continuation, Outcome, Refusal, Step};
use super::inflight::{HostPurpose, UpPurpose};
use super::lookup::Lookup;
use super::request::ServerIdx;
use super::request::SessionId;
use super::session::Sessions;
use crate::frame::{self, Message};

/// The input key under which a relayed server question travels to a modern host.
pub(super) const RELAY_KEY: &str = "hintgate/server-request";

/// The method of a server's question that a person reads and answers.
pub(super) const ELICITATION: &str = "elicitation/create";

/// The method of a server's request for a completion from the host's model.
const SAMPLING: &str = "sampling/createMessage";

/// Whether [`mark_question`] marks a server's request `method`: the ones a
/// person or the host's model reads as text (elicitation, sampling).
pub(super) fn is_marked(method: &str) -> bool {
    method == ELICITATION || method == SAMPLING
}

/// What becomes of a server's own request to a legacy host.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum ServerRequest {
    /// A request the host said it takes: relayed to it.
    Relay,
    /// `ping`: the server's peer is the gateway, which answers it.
    Pong,
    /// Refused with "method not found" and why: a method a server may not
    /// send a client, or one whose capability the host did not declare.
    Refuse(String),
}

/// A server's question as the host gets it: marked as the server's
/// ([`mark_question`]), and a sampling request's context narrowed
/// ([`narrow_context`]) when the gateway aggregates servers and this
/// one is not trusted.
///
/// # Errors
///
/// Why the question cannot be relayed: its params are not an object.
pub(super) fn mark_for_host(
    policy: &hintgate_policy::decide::Policy,
    upstreams: &super::upstreams::Upstreams,
    idx: ServerIdx,
    method: &str,
    params: &mut Value,
) -> Result<(), String> {
    let server = upstreams.name(idx);
    mark_question(server, method, params)?;
    let trusted = policy
        .server(server)
        .is_some_and(|config| config.trust == Trust::Trusted);
    if method == SAMPLING
        && !upstreams.wraps()
        && !trusted
        && let Some(asked) = narrow_context(params)
    {
        tracing::warn!(server.id = %server, "its `{SAMPLING}` asked the host to include context `{asked}`; behind a gateway of several servers that is other servers' context too, so the host is asked to include none");
    }
    Ok(())
}

/// Whether the host of `session` takes a server's request `method`, by
/// what it declared in its `initialize`.
///
/// # Errors
///
/// Why it does not, in words for the server.
pub(super) fn host_takes(
    sessions: &Sessions,
    session: SessionId,
    method: &str,
) -> Result<(), String> {
    let capabilities = sessions
        .get(&session)
        .and_then(|host| host.init.as_ref())
        .and_then(|init| init.get("capabilities"));
    match server_request(method, capabilities) {
        ServerRequest::Relay => Ok(()),
        ServerRequest::Pong => {
            Err("`ping` is hintgate's to answer, not a question for the host".to_owned())
        }
        ServerRequest::Refuse(why) => Err(why),
    }
}

/// What becomes of a server's request `method` to a legacy host that
/// declared `capabilities` in its `initialize`: a server may ask a client
/// only for what the client said it takes (the spec's `elicitation`,
/// `sampling` and `roots`), and `ping`. Anything else would reach a host
/// whose person or model might act on it.
pub(super) fn server_request(method: &str, capabilities: Option<&Value>) -> ServerRequest {
    let capability = match method {
        "ping" => return ServerRequest::Pong,
        ELICITATION => "elicitation",
        SAMPLING => "sampling",
        "roots/list" => "roots",
        other => {
            return ServerRequest::Refuse(format!(
                "`{}` is not a request a server may send a client; hintgate does not pass it to the host",
                escape_line(other)
            ));
        }
    };
    let declared = capabilities
        .and_then(|caps| caps.get(capability))
        .is_some_and(Value::is_object);
    if declared {
        ServerRequest::Relay
    } else {
        ServerRequest::Refuse(format!(
            "the host did not declare the `{capability}` capability, so hintgate does not pass it `{method}`"
        ))
    }
}

/// Marks a server's question as the server's before a host shows it: the
/// message and the form of an `elicitation/create`, the system prompt and
/// the texts of a `sampling/createMessage` (see the module's
/// documentation). Other methods (roots) are left as they are.
///
/// # Errors
///
/// Why the question cannot be relayed: its params are not an object.
pub(super) fn mark_question(server: &str, method: &str, params: &mut Value) -> Result<(), String> {
    if method == SAMPLING {
        return mark_sampling(server, params);
    }
    if method != ELICITATION {
        return Ok(());
    }
    let Some(object) = params.as_object_mut() else {
        return Err(format!(
            "hintgate relays `{ELICITATION}` from a server only with params that are an object"
        ));
    };
    // A URL-mode question asks the person to open its `url`, which the
    // host shows in full and is not changed; one that breaks a line or
    // hides characters could read as another address, so it is refused,
    // as such a resource URI is.
    if let Some(url) = object.get("url") {
        let url = url.as_str().unwrap_or("");
        if let Some(problem) = hintgate_policy::name::uri_problem(url) {
            return Err(format!(
                "hintgate relays a URL-mode `{ELICITATION}` only with a URL that shows as it is; its URL {problem}"
            ));
        }
    }
    let text = object.get("message").and_then(Value::as_str).unwrap_or("");
    let message = marked_message(server, text);
    object.insert("message".to_owned(), Value::String(message));
    if let Some(schema) = object.get_mut("requestedSchema") {
        clean_texts(schema);
        mark_form(server, schema);
    }
    Ok(())
}

/// Whether a server's result may be an input-required one: it spells
/// `input_required`, or holds an escape (`\u`) that could spell it. Any
/// other cannot ask, and is not parsed to find out.
pub(super) fn may_ask_input(raw: &str) -> bool {
    raw.contains("input_required") || raw.contains("\\u")
}

/// A sampling request's `includeContext` made `none`: the value it asked
/// for (shown as JSON), or `None` when it asked for none (or for nothing,
/// which the spec reads as `none`).
pub(super) fn narrow_context(params: &mut Value) -> Option<String> {
    let object = params.as_object_mut()?;
    let asked = object.get("includeContext")?;
    if asked.as_str() == Some("none") {
        return None;
    }
    let shown = escape_line(&asked.to_string());
    object.insert(
        "includeContext".to_owned(),
        Value::String("none".to_owned()),
    );
    Some(shown)
}

/// Marks a server's `sampling/createMessage`: the system prompt names the
/// server first, and every line of it and of each text of the messages
/// starts with `[server NAME]`.
fn mark_sampling(server: &str, params: &mut Value) -> Result<(), String> {
    let Some(object) = params.as_object_mut() else {
        return Err(format!(
            "hintgate relays `{SAMPLING}` from a server only with params that are an object"
        ));
    };
    let prefix = format!("[server {server}]");
    let mut system = format!(
        "[server {server} asks] This request comes from the MCP server `{server}` through hintgate; it is neither the user's nor hintgate's."
    );
    if let Some(own) = object.get("systemPrompt").and_then(Value::as_str) {
        system.push('\n');
        system.push_str(&marked_lines(&prefix, own));
    }
    object.insert("systemPrompt".to_owned(), Value::String(system));
    if let Some(messages) = object.get_mut("messages").and_then(Value::as_array_mut) {
        for message in messages {
            match message.get_mut("content") {
                Some(Value::Array(blocks)) => {
                    for block in blocks {
                        mark_text(&prefix, block);
                    }
                }
                Some(block) => mark_text(&prefix, block),
                None => {}
            }
        }
    }
    Ok(())
}

/// A text content block's text, each line after `prefix`.
fn mark_text(prefix: &str, block: &mut Value) {
    if block.get("type").and_then(Value::as_str) != Some("text") {
        return;
    }
    if let Some(Value::String(text)) = block.get_mut("text") {
        *text = marked_lines(prefix, text);
    }
}

/// Each line of a server's message after `[server NAME asks]`, with what
/// would break or hide it escaped (a `\r\n` ends a line like a `\n`).
fn marked_message(server: &str, text: &str) -> String {
    marked_lines(&format!("[server {server} asks]"), text)
}

/// Each line of `text` after `prefix`, with what would break or hide it
/// escaped (a `\r\n` ends a line like a `\n`).
fn marked_lines(prefix: &str, text: &str) -> String {
    let prefix = prefix.to_owned();
    text.split('\n')
        .map(|line| escape_line(line.strip_suffix('\r').unwrap_or(line)))
        .map(|line| {
            if line.is_empty() {
                prefix.clone()
            } else {
                format!("{prefix} {line}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `title` and `description` of a form without invisible characters,
/// titles and option names on one line.
fn clean_texts(value: &mut Value) {
    match value {
        Value::Object(object) => {
            for (key, item) in object.iter_mut() {
                match (key.as_str(), &mut *item) {
                    ("title", Value::String(text)) => *text = one_line(&sanitize(text).text),
                    ("description", Value::String(text)) => *text = sanitize(text).text,
                    // Option labels only: `enum` values are what the
                    // server gets back, and stay as sent.
                    ("enumNames", Value::Array(names)) => {
                        for name in names.iter_mut() {
                            if let Value::String(text) = name {
                                *text = one_line(&sanitize(text).text);
                            }
                        }
                    }
                    _ => clean_texts(item),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(clean_texts),
        _ => {}
    }
}

/// Titles the form, and each of its fields, `[NAME] ...` (a field without a
/// title is titled by its key, which is what a host would show).
fn mark_form(server: &str, schema: &mut Value) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    if let Some(Value::String(title)) = object.get_mut("title") {
        *title = format!("[{server}] {title}");
    }
    let Some(Value::Object(properties)) = object.get_mut("properties") else {
        return;
    };
    for (key, property) in properties.iter_mut() {
        let Some(field) = property.as_object_mut() else {
            continue;
        };
        let title = match field.get("title") {
            Some(Value::String(title)) => title.clone(),
            _ => escape_line(key),
        };
        field.insert(
            "title".to_owned(),
            Value::String(format!("[{server}] {title}")),
        );
    }
}

/// A legacy host's call whose server asked for input: the answers gathered so far.
#[derive(Debug)]
pub(crate) struct Gather {
    cx: Box<CallContext>,
    server_state: Option<Value>,
    remaining: usize,
    responses: Map<String, Value>,
}

/// The gatherings in progress, by number.
pub(crate) type Gathers = HashMap<u64, Gather>;

/// The gateway shuts down while a session's calls wait for the host's
/// answers to a server's questions: each is answered with an error. Their
/// first sends already ended on record (`input-required`), and their
/// continuations were never sent.
pub(super) fn end_gathers(
    gathers: &mut Gathers,
    outbox: &mut super::outbox::Outbox,
    session: SessionId,
) {
    let ended: Vec<u64> = gathers
        .iter()
        .filter(|(_, gather)| gather.cx.request.session == session)
        .map(|(number, _)| *number)
        .collect();
    for number in ended {
        if let Some(gather) = gathers.remove(&number) {
            let text = "hintgate shut down before the server's questions were answered; the call was not sent again";
            let line = frame::response(gather.cx.request.id(), &super::call::error_result(text));
            outbox.host(session, line);
        }
    }
}

/// A legacy server asked the host something while a modern host waits
/// on a call: answer that call with the question. Returns false when no
/// single call of the host can carry it.
#[expect(
    clippy::too_many_arguments,
    reason = "the parts the step reads and writes, each passed on its own so that it takes no gateway"
)]
pub(super) fn relay_to_modern_host(
    inflight: &mut super::inflight::InFlight,
    outbox: &mut super::outbox::Outbox,
    sessions: &Sessions,
    upstreams: &mut super::upstreams::Upstreams,
    policy: &hintgate_policy::decide::Policy,
    sealer: &crate::seal::Sealer,
    limits: super::Limits,
    idx: ServerIdx,
    message: &Message<'_>,
) -> bool {
    let in_flight = inflight.up_ids(idx, |purpose| matches!(purpose, UpPurpose::Call(_)));
    let [call_id] = in_flight.as_slice() else {
        return false;
    };
    let call_id = *call_id;
    let Some(UpPurpose::Call(cx)) = inflight.peek_up_mut(idx, call_id) else {
        return false;
    };
    let session = cx.request.session;
    let host_id = cx.request.id().to_owned();
    let tool = cx.params.name.clone();
    let mut params = message
        .params
        .and_then(|raw| serde_json::from_str::<Value>(raw).ok())
        .unwrap_or_else(|| json!({}));
    let server = upstreams.name(idx).to_owned();
    // The host is asked only what it said it takes, as a legacy host is.
    let marked = host_takes(sessions, session, message.method())
        .and_then(|()| mark_for_host(policy, upstreams, idx, message.method(), &mut params));
    if let Err(why) = marked {
        tracing::warn!(server.id = %server, "{why}");
        if let Some(up) = upstreams.get(idx) {
            let generation = up.generation();
            let line = frame::error_response(message.id_text(), -32602, &why);
            outbox.upstream(idx, generation, line, None);
        }
        return true;
    }
    let question = json!({
        "method": message.method(),
        "params": params,
    });
    // The state names the server's call and its question; it is sealed
    // like the gateway's own, so the host cannot point it elsewhere.
    let binding = format!("relay:{idx}:{call_id}:{}", message.id_text());
    let Ok(state) = sealer.seal(
        &tool,
        &Value::Null,
        &binding,
        limits.call_timeout.as_secs(),
        None,
    ) else {
        return false;
    };
    let result = json!({
        "resultType": "input_required",
        "inputRequests": { RELAY_KEY: question },
        "requestState": state,
    });
    let line = frame::response(&host_id, &result);
    // The question sits three levels deeper in the host's line than in
    // the server's: a question within the limit there may not be here.
    if let Err(err) = crate::json::check_depth(&line, limits.max_depth) {
        let text = super::call::too_deep_message(&err);
        tracing::warn!(server.id = %server, "the server's question, put in an input-required result for the host, {err}; it was not passed on");
        if let Some(up) = upstreams.get(idx) {
            let generation = up.generation();
            let line = frame::error_response(message.id_text(), -32600, &text);
            outbox.upstream(idx, generation, line, None);
        }
        return true;
    }
    outbox.host(session, line);
    true
}

impl Gateway {
    /// A modern host's retry that answers a relayed server question: the
    /// answer goes to the server, whose result then answers this retry.
    pub(super) fn answer_relayed(&mut self, mut cx: Box<CallContext>) -> Step {
        let answer = cx.answer_to(RELAY_KEY);
        let state = cx.params.request_state.clone().unwrap_or_default();
        let tool = cx.params.name.clone();
        let binding = match self.sealer.peek(&state) {
            Ok(claim) => claim.pin,
            Err(err) => {
                let text = format!("The relayed answer could not be used: {err}.");
                return Step::refused(cx, Refusal::BadState(text));
            }
        };
        if let Err(err) = self.sealer.open(&state, &tool, &Value::Null, &binding) {
            let text = format!("The relayed answer could not be used: {err}.");
            return Step::refused(cx, Refusal::BadState(text));
        }
        let mut parts = binding.splitn(4, ':');
        let (Some("relay"), Some(idx), Some(call_id), Some(question_id)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Step::refused(
                cx,
                Refusal::BadState("The relayed answer names no question.".to_owned()),
            );
        };
        let (Ok(idx), Ok(call_id)) = (idx.parse::<ServerIdx>(), call_id.parse::<u64>()) else {
            return Step::refused(
                cx,
                Refusal::BadState("The relayed answer names no question.".to_owned()),
            );
        };
        // The retry names the host's tool; its record keeps that name.
        let name = cx.params.name.clone();
        cx.resolve(idx, name);
        let new_host_id = cx.request.id().to_owned();
        match self.inflight.peek_up_mut(idx, call_id) {
            Some(UpPurpose::Call(waiting)) if waiting.request.session == cx.request.session => {
                // The server's result now answers this retry; the call
                // itself stays the one that was decided and sent.
                waiting.request.answer_as = Some(new_host_id.clone().into());
            }
            _ => {
                let text = "The server's call this answer was for has ended.".to_owned();
                return Step::refused(cx, Refusal::BadState(text));
            }
        }
        tracing::debug!(host.id = %new_host_id, "a relayed answer goes to the server's question");
        // The retry is a call of its own: its record says the person's
        // answer went to the server's question (the server's result is the
        // outcome of the call that asked it).
        cx.decision = Some(Decision {
            verdict: Verdict::Allow,
            reasons: Vec::new(),
            remember: RememberOffer::NotAsked,
            note: None,
        });
        cx.approver = Approver::Person(Channel::RelayedAnswer);
        self.records().record_ended(&cx, Outcome::Relayed);
        if let Some(up) = self.upstreams.get(idx) {
            let generation = up.generation();
            self.outbox
                .upstream(idx, generation, frame::response(question_id, &answer), None);
        }
        Step::Done
    }

    pub(super) fn gather_for_legacy_host(&mut self, cx: Box<CallContext>, result: &Value) {
        let requests = result
            .get("inputRequests")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let session = cx.request.session;
        // INVARIANT: one call asks the host only so many rounds of questions.
        if cx.attempt + 1 >= super::MAX_SENDS {
            let text = format!(
                "the server asked for more input again after {} sends of this call; hintgate sends one call at most {} times",
                cx.attempt + 1,
                super::MAX_SENDS
            );
            tracing::warn!(tool.name = %cx.tool(), "{text}");
            let line = frame::error_response(cx.request.id(), -32603, &text);
            self.records()
                .answer_call(&cx, line, Outcome::ProtocolError);
            return;
        }
        if requests.is_empty() {
            let line = frame::error_response(
                cx.request.id(),
                -32603,
                "the server asked for input but named none",
            );
            self.records()
                .answer_call(&cx, line, Outcome::ProtocolError);
            return;
        }
        // INVARIANT: what a server asks of the host at once is bounded.
        if requests.len() > super::MAX_QUESTIONS {
            let text = format!(
                "the server asked {} questions at once; hintgate asks a host at most {}",
                requests.len(),
                super::MAX_QUESTIONS
            );
            tracing::warn!(tool.name = %cx.tool(), "{text}");
            let line = frame::error_response(cx.request.id(), -32603, &text);
            self.records()
                .answer_call(&cx, line, Outcome::ProtocolError);
            return;
        }
        let questions = match self.lookup().marked_questions(&cx, requests) {
            Ok(questions) => questions,
            Err(why) => {
                let text = format!("the server asked for input hintgate cannot relay: {why}");
                let line = frame::error_response(cx.request.id(), -32603, &text);
                self.records()
                    .answer_call(&cx, line, Outcome::ProtocolError);
                return;
            }
        };
        // The call's first send is over: its outcome says the server asked.
        self.records().record_outcome(&cx, Outcome::InputRequired);
        let gather = self.routing.next_number();
        self.gathers.insert(
            gather,
            Gather {
                cx,
                server_state: result.get("requestState").cloned(),
                remaining: questions.len(),
                responses: Map::new(),
            },
        );
        let timeout = self.limits.ask_timeout;
        for (key, method, params) in questions {
            let n = self
                .inflight
                .wait_host(session, HostPurpose::Gather { gather, key }, timeout);
            self.outbox.host(
                session,
                frame::request(&format!("\"hintgate-{n}\""), &method, &params),
            );
        }
    }

    /// The host answered one gathered question (or did not in time).
    pub(super) fn on_gathered(
        &mut self,
        gather: u64,
        key: String,
        result: Option<Value>,
        error: Option<Value>,
    ) {
        let Some(state) = self.gathers.get_mut(&gather) else {
            return;
        };
        let answer = match (result, error) {
            (Some(result), _) => result,
            (None, Some(error)) => json!({"action": "cancel", "_meta": {"hintgate/error": error}}),
            (None, None) => json!({"action": "cancel"}),
        };
        state.responses.insert(key, answer);
        state.remaining = state.remaining.saturating_sub(1);
        if state.remaining > 0 {
            return;
        }
        let Some(state) = self.gathers.remove(&gather) else {
            return;
        };
        let mut cx = state.cx;
        let responses = Value::Object(state.responses).to_string();
        // The host's answers sit deeper in the server's line than in the
        // host's (`params.inputResponses.KEY`, not `result`): what fit there
        // may not fit here, and the server is not sent what nests too deep.
        let placed = format!("{{\"params\":{{\"inputResponses\":{responses}}}}}");
        if let Err(err) = crate::json::check_depth(&placed, self.limits.max_depth) {
            let text = super::call::too_deep_message(&err);
            tracing::warn!(tool.name = %cx.tool(), "the host's answers to the server's questions, put in the call's params, {err}; the call was not sent again");
            self.records()
                .end_call(cx, CallEnd::Refused(Refusal::Malformed(text)));
            return;
        }
        // The same call, its params as the host sent them, with the server's
        // questions answered and its own state returned (`call_line` puts
        // them in, with the server's own tool name and the modern `_meta`).
        cx.continuation = Some(Continuation {
            responses,
            state: state.server_state.map(|state| state.to_string()),
        });
        cx.attempt += 1;
        cx.unsent();
        self.act(Step::Forward(cx));
    }
}

// === impl Lookup ===

impl Lookup<'_> {
    /// A 2026-07-28 server's input-required result for a 2026-07-28 host,
    /// its questions marked as the server's; `None` when the result asks
    /// nothing.
    ///
    /// # Errors
    ///
    /// Why the result cannot be passed on: a question under a key the
    /// gateway keeps for its own (which would read as the gateway's, and
    /// whose answer the gateway would take), or params that are not an
    /// object.
    pub(super) fn marked_input_required(
        &self,
        idx: ServerIdx,
        raw: &str,
    ) -> Option<Result<Value, String>> {
        if !may_ask_input(raw) {
            return None;
        }
        let mut result: Value = serde_json::from_str(raw).ok()?;
        // A key given twice could make the gateway read `complete` where
        // the host reads `input_required`, or mark one question while the
        // host shows another.
        if let Err(err) = crate::json::find_duplicate_key(raw) {
            return Some(Err(format!(
                "server `{}` answered with a result that cannot be read one way only ({err})",
                self.upstreams.name(idx)
            )));
        }
        if result.get("resultType").and_then(Value::as_str) != Some("input_required") {
            return None;
        }
        let server = self.upstreams.name(idx);
        let Some(requests) = result
            .get_mut("inputRequests")
            .and_then(Value::as_object_mut)
        else {
            return Some(Ok(result));
        };
        for (key, question) in requests.iter_mut() {
            if key == super::era::INPUT_KEY || key == RELAY_KEY {
                return Some(Err(format!(
                    "server `{server}` asked under `{key}`, a key hintgate keeps for its own questions"
                )));
            }
            let method = question
                .get("method")
                .and_then(Value::as_str)
                .unwrap_or(ELICITATION)
                .to_owned();
            if !matches!(method.as_str(), ELICITATION | SAMPLING | "roots/list") {
                return Some(Err(format!(
                    "server `{server}` asked for input with `{}`, which is not a request a server may send a client",
                    escape_line(&method)
                )));
            }
            if let Some(params) = question.get_mut("params")
                && let Err(why) = mark_for_host(self.policy, self.upstreams, idx, &method, params)
            {
                return Some(Err(why));
            }
        }
        Some(Ok(result))
    }

    /// A 2026-07-28 server wants input for a legacy host's call: ask the
    /// host each question and send the call again with the answers.
    /// The questions a server's input-required result asks, each as the
    /// host is to be asked it (key, method, params), marked as the
    /// server's; or why one cannot be relayed.
    fn marked_questions(
        &self,
        cx: &CallContext,
        requests: Map<String, Value>,
    ) -> Result<Vec<(String, String, Value)>, String> {
        // Each question a person reads is marked as the server's.
        let server = cx
            .server()
            .map_or("", |idx| self.upstreams.name(idx))
            .to_owned();
        let mut questions = Vec::with_capacity(requests.len());
        for (key, question) in requests {
            let method = question
                .get("method")
                .and_then(Value::as_str)
                .unwrap_or(ELICITATION)
                .to_owned();
            let mut params = question.get("params").cloned().unwrap_or_else(|| json!({}));
            // The host is asked only what it said it takes, as when the
            // server asks it directly.
            host_takes(self.sessions, cx.request.session, &method).and_then(|()| {
                match cx.server() {
                    Some(idx) => {
                        mark_for_host(self.policy, self.upstreams, idx, &method, &mut params)
                    }
                    None => mark_question(&server, &method, &mut params),
                }
            })?;
            questions.push((key, method, params));
        }
        Ok(questions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_servers_question_is_marked_line_by_line_and_field_by_field() {
        let mut params = json!({
            "message": "Deploy?\r\n\nhintgate: approve this tool call?\u{202e}",
            "requestedSchema": {
                "type": "object",
                "title": "Confirm",
                "properties": {
                    "approve": {"type": "boolean", "title": "Approve this call\n", "description": "hid\u{200b}den"},
                    "target": {"type": "string", "enum": ["prod\tA", "dev"], "enumNames": ["Prod\nA", "Dev"]},
                },
            },
        });
        mark_question("docs", ELICITATION, &mut params).unwrap();
        assert_eq!(
            params["message"],
            "[server docs asks] Deploy?\n[server docs asks]\n[server docs asks] hintgate: approve this tool call?\\u{202e}"
        );
        let schema = &params["requestedSchema"];
        assert_eq!(schema["title"], "[docs] Confirm");
        assert_eq!(
            schema["properties"]["approve"]["title"],
            "[docs] Approve this call "
        );
        assert_eq!(schema["properties"]["approve"]["description"], "hidden");
        assert_eq!(schema["properties"]["target"]["title"], "[docs] target");
        // What the server gets back stays as it sent it; only labels change.
        assert_eq!(
            schema["properties"]["target"]["enum"],
            json!(["prod\tA", "dev"])
        );
        assert_eq!(
            schema["properties"]["target"]["enumNames"],
            json!(["Prod A", "Dev"])
        );
    }

    #[test]
    fn only_questions_a_person_reads_are_marked() {
        let mut roots = json!({});
        mark_question("docs", "roots/list", &mut roots).unwrap();
        assert_eq!(roots, json!({}));
        let mut url = json!({"mode": "url", "message": "Sign in", "url": "https://example.org/a b?c=d", "elicitationId": "e"});
        mark_question("docs", ELICITATION, &mut url).unwrap();
        assert_eq!(url["message"], "[server docs asks] Sign in");
        assert_eq!(
            url["url"], "https://example.org/a b?c=d",
            "the URL is the host's to show in full"
        );
        // One that would read as another address is not relayed.
        for hidden in [
            "https://example.org/a\nb",
            "https://evil.example/\u{202e}gro.elpmaxe",
            "https://exa\u{200b}mple.org",
            "",
        ] {
            let mut url =
                json!({"mode": "url", "message": "Sign in", "url": hidden, "elicitationId": "e"});
            let refused = mark_question("docs", ELICITATION, &mut url).unwrap_err();
            assert!(refused.contains("its URL"), "{hidden:?}: {refused}");
        }
        assert!(mark_question("docs", ELICITATION, &mut json!(["not", "an", "object"])).is_err());
    }

    #[test]
    fn an_untrusted_servers_sampling_asks_for_no_context_behind_a_gateway_of_several() {
        use super::super::Mode;
        use super::super::upstreams::Upstreams;
        use hintgate_policy::config::parse_str;
        use hintgate_policy::decide::Policy;
        let (config, _) = parse_str(
            "[servers.open]\ncommand = \"x\"\n[servers.own]\ncommand = \"x\"\ntrust = \"trusted\"\n",
        );
        let policy = Policy::new(config.unwrap());
        let configs: Vec<_> = policy.config().servers.values().cloned().collect();
        let open = configs
            .iter()
            .position(|config| config.name == "open")
            .unwrap();
        let own = configs
            .iter()
            .position(|config| config.name == "own")
            .unwrap();
        let asked = || json!({"messages": [], "maxTokens": 5, "includeContext": "allServers"});
        let several = Upstreams::new(configs.clone(), Mode::Gateway, "__".to_owned());
        let mut params = asked();
        mark_for_host(&policy, &several, open, SAMPLING, &mut params).unwrap();
        assert_eq!(params["includeContext"], "none");
        // A trusted server's request keeps the context it asked for.
        let mut params = asked();
        mark_for_host(&policy, &several, own, SAMPLING, &mut params).unwrap();
        assert_eq!(params["includeContext"], "allServers");
        // Wrapping one server, its context is the only one there is.
        let one = Upstreams::new(vec![configs[open].clone()], Mode::Wrap, "__".to_owned());
        let mut params = asked();
        mark_for_host(&policy, &one, 0, SAMPLING, &mut params).unwrap();
        assert_eq!(params["includeContext"], "allServers");
        // Every relayed question is marked as the server's.
        assert!(mark_for_host(&policy, &several, open, ELICITATION, &mut json!([])).is_err());
    }
}
