//! A server's questions to a host of the other era.
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
use serde_json::{Map, Value, json};

use super::Gateway;
use super::call::{Approver, CallContext, Channel, Continuation, Outcome, Refusal, Step};
use super::inflight::{HostPurpose, UpPurpose};
use super::request::ServerIdx;
use crate::frame::{self, Message};

/// The input key under which a relayed server question travels to a modern host.
const RELAY_KEY: &str = "hintgate/server-request";

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

impl Gateway {
    /// A legacy server asked the host something while a modern host waits
    /// on a call: answer that call with the question. Returns false when no
    /// single call of the host can carry it.
    pub(super) fn relay_to_modern_host(&mut self, idx: ServerIdx, message: &Message<'_>) -> bool {
        let in_flight = self
            .inflight
            .up_ids(idx, |purpose| matches!(purpose, UpPurpose::Call(_)));
        let [call_id] = in_flight.as_slice() else {
            return false;
        };
        let call_id = *call_id;
        let Some(UpPurpose::Call(cx)) = self.inflight.peek_up_mut(idx, call_id) else {
            return false;
        };
        let session = cx.request.session;
        let host_id = cx.request.id().to_owned();
        let tool = cx.params.name.clone();
        let question = json!({
            "method": message.method(),
            "params": message.params.and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok()).unwrap_or_else(|| json!({})),
        });
        // The state names the server's call and its question; it is sealed
        // like the gateway's own, so the host cannot point it elsewhere.
        let binding = format!("relay:{idx}:{call_id}:{}", message.id_text());
        let Ok(state) = self.sealer.seal(
            &tool,
            &Value::Null,
            &binding,
            self.limits.call_timeout.as_secs(),
        ) else {
            return false;
        };
        let result = json!({
            "resultType": "input_required",
            "inputRequests": { RELAY_KEY: question },
            "requestState": state,
        });
        self.send_host(session, frame::response(&host_id, &result));
        true
    }

    /// Whether a modern host's call carries the answer to a relayed server
    /// question.
    pub(super) fn answers_relayed_question(&self, cx: &CallContext) -> bool {
        cx.answers(RELAY_KEY)
    }

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
                return Step::Refuse(cx, Refusal::BadState(text));
            }
        };
        if let Err(err) = self.sealer.open(&state, &tool, &Value::Null, &binding) {
            let text = format!("The relayed answer could not be used: {err}.");
            return Step::Refuse(cx, Refusal::BadState(text));
        }
        let mut parts = binding.splitn(4, ':');
        let (Some("relay"), Some(idx), Some(call_id), Some(question_id)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Step::Refuse(
                cx,
                Refusal::BadState("The relayed answer names no question.".to_owned()),
            );
        };
        let (Ok(idx), Ok(call_id)) = (idx.parse::<ServerIdx>(), call_id.parse::<u64>()) else {
            return Step::Refuse(
                cx,
                Refusal::BadState("The relayed answer names no question.".to_owned()),
            );
        };
        cx.server = Some(idx);
        let new_host_id = cx.request.id().to_owned();
        match self.inflight.peek_up_mut(idx, call_id) {
            Some(UpPurpose::Call(waiting)) if waiting.request.session == cx.request.session => {
                // The server's result now answers this retry; the call
                // itself stays the one that was decided and sent.
                waiting.request.answer_as = Some(new_host_id.clone().into());
            }
            _ => {
                let text = "The server's call this answer was for has ended.".to_owned();
                return Step::Refuse(cx, Refusal::BadState(text));
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
        });
        cx.approver = Approver::Person(Channel::RelayedAnswer);
        self.record_relayed(&cx);
        if let Some(up) = self.upstreams.get(idx) {
            let generation = up.generation();
            self.send_upstream(idx, generation, frame::response(question_id, &answer));
        }
        Step::Done
    }

    /// The record of a retry that carried a relayed answer.
    fn record_relayed(&mut self, cx: &CallContext) {
        self.record_ended(cx, Outcome::Relayed);
    }

    /// A 2026-07-28 server wants input for a legacy host's call: ask the
    /// host each question and send the call again with the answers.
    pub(super) fn gather_for_legacy_host(&mut self, cx: Box<CallContext>, result: &Value) {
        let requests = result
            .get("inputRequests")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let session = cx.request.session;
        if requests.is_empty() {
            let line = frame::error_response(
                cx.request.id(),
                -32603,
                "the server asked for input but named none",
            );
            self.answer_call(&cx, line, Outcome::ProtocolError);
            return;
        }
        // INVARIANT: what a server asks of the host at once is bounded.
        if requests.len() > super::MAX_QUESTIONS {
            let text = format!(
                "the server asked {} questions at once; hintgate asks a host at most {}",
                requests.len(),
                super::MAX_QUESTIONS
            );
            tracing::warn!(tool.name = %cx.tool, "{text}");
            let line = frame::error_response(cx.request.id(), -32603, &text);
            self.answer_call(&cx, line, Outcome::ProtocolError);
            return;
        }
        // The call's first send is over: its outcome says the server asked.
        self.record_outcome(&cx, Outcome::InputRequired);
        let gather = self.routing.next_number();
        self.gathers.insert(
            gather,
            Gather {
                cx,
                server_state: result.get("requestState").cloned(),
                remaining: requests.len(),
                responses: Map::new(),
            },
        );
        let timeout = self.limits.ask_timeout;
        for (key, question) in requests {
            let method = question
                .get("method")
                .and_then(Value::as_str)
                .unwrap_or("elicitation/create")
                .to_owned();
            let params = question.get("params").cloned().unwrap_or_else(|| json!({}));
            let n = self
                .inflight
                .wait_host(session, HostPurpose::Gather { gather, key }, timeout);
            self.send_host(
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
        // The same call, its params as the host sent them, with the server's
        // questions answered and its own state returned (`call_line` puts
        // them in, with the server's own tool name and the modern `_meta`).
        cx.continuation = Some(Continuation {
            responses: Value::Object(state.responses).to_string(),
            state: state.server_state.map(|state| state.to_string()),
        });
        cx.attempt += 1;
        cx.record = None;
        cx.started = None;
        self.act(Step::Forward(cx));
    }
}
