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
//!   the answers, and calls the server again with them and the server's own
//!   state; the host's call is answered by the server's final result.

use std::collections::HashMap;

use hintgate_policy::reason::ReasonCode;
use serde_json::{Map, Value, json};

use super::{Forward, Gateway, HostRequest, PendingHost, PendingUp};
use crate::frame::{self, Message};

/// The input key under which a relayed server question travels to a modern host.
const RELAY_KEY: &str = "hintgate/server-request";

/// A legacy host's call whose server asked for input: the answers gathered so far.
#[derive(Debug)]
pub(crate) struct Gather {
    request: HostRequest,
    idx: usize,
    call: Option<super::CallInfo>,
    params: Value,
    server_state: Option<Value>,
    remaining: usize,
    responses: Map<String, Value>,
}

impl Gateway {
    /// A legacy server asked the host something while a modern host waits
    /// on a call: answer that call with the question. Returns false when no
    /// single call of the host can carry it.
    pub(super) fn relay_to_modern_host(&mut self, idx: usize, message: &Message<'_>) -> bool {
        let in_flight: Vec<u64> = self
            .pending_up
            .iter()
            .filter_map(|((owner, id), pending)| match pending {
                PendingUp::Forward(_) if *owner == idx => Some(*id),
                _ => None,
            })
            .collect();
        let [call_id] = in_flight.as_slice() else {
            return false;
        };
        let call_id = *call_id;
        let Some(PendingUp::Forward(forward)) = self.pending_up.get(&(idx, call_id)) else {
            return false;
        };
        let host_id = forward.request.id.clone();
        let tool = Message::parse(&forward.request.line)
            .ok()
            .and_then(|m| {
                m.params
                    .and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok())
            })
            .and_then(|p| p.get("name").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_default();
        let question = json!({
            "method": message.method(),
            "params": message.params.and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok()).unwrap_or_else(|| json!({})),
        });
        // The state names the server's call and its question; it is sealed
        // like the gateway's own, so the host cannot point it elsewhere.
        let binding = format!("relay:{idx}:{call_id}:{}", message.id_text());
        let state =
            match self
                .sealer
                .seal(&tool, &Value::Null, &binding, self.call_timeout.as_secs())
            {
                Ok(state) => state,
                Err(_) => return false,
            };
        self.host_to_up.remove(&host_id);
        let result = json!({
            "resultType": "input_required",
            "inputRequests": { RELAY_KEY: question },
            "requestState": state,
        });
        self.send_host(frame::response(&host_id, &result));
        true
    }

    /// A modern host's retry that answers a relayed server question. Returns
    /// false when the call carries no such answer.
    pub(super) fn answer_relayed(&mut self, request: &HostRequest, params: &Value) -> bool {
        let Some(answer) = params.get("inputResponses").and_then(|r| r.get(RELAY_KEY)) else {
            return false;
        };
        let state = params
            .get("requestState")
            .and_then(Value::as_str)
            .unwrap_or("");
        let tool = params.get("name").and_then(Value::as_str).unwrap_or("");
        let binding = match self.sealer.peek(state) {
            Ok(claim) => claim.pin,
            Err(err) => {
                let text = format!("The relayed answer could not be used: {err}.");
                self.refuse_relayed(request, "", tool, &text);
                return true;
            }
        };
        if let Err(err) = self.sealer.open(state, tool, &Value::Null, &binding) {
            let text = format!("The relayed answer could not be used: {err}.");
            self.refuse_relayed(request, "", tool, &text);
            return true;
        }
        let mut parts = binding.splitn(4, ':');
        let (Some("relay"), Some(idx), Some(call_id), Some(question_id)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return false;
        };
        let (Ok(idx), Ok(call_id)) = (idx.parse::<usize>(), call_id.parse::<u64>()) else {
            return false;
        };
        let server = self
            .upstreams
            .get(idx)
            .map(|up| up.name.clone())
            .unwrap_or_default();
        match self.pending_up.get_mut(&(idx, call_id)) {
            Some(PendingUp::Forward(forward)) => {
                // The server's result now answers this retry.
                forward.request.id = request.id.clone();
            }
            _ => {
                let text = "The server's call this answer was for has ended.";
                self.refuse_relayed(request, &server, tool, text);
                return true;
            }
        }
        // The retry is a call of its own: its record says the person's answer
        // went to the server's question (the server's result is the outcome
        // of the call that asked it).
        let decision = hintgate_policy::decide::Decision {
            verdict: hintgate_policy::decide::Verdict::Allow,
            reasons: Vec::new(),
            remember: hintgate_policy::decide::RememberOffer::NotAsked,
        };
        self.audit_unheld(
            request,
            &server,
            tool,
            &decision,
            "person (relayed answer)",
            "relayed",
        );
        self.host_to_up.insert(request.id.clone(), (idx, call_id));
        if let Some(up) = self.upstreams.get_mut(idx) {
            up.send(frame::response(question_id, answer));
        }
        true
    }

    /// Refuses a relayed answer that cannot be used, as a deny on the record.
    fn refuse_relayed(&mut self, request: &HostRequest, server: &str, tool: &str, text: &str) {
        let line = self.response_line(&request.id, &super::tools::error_result(text));
        let decision = hintgate_policy::decide::Decision::deny(ReasonCode::InvalidRequestState);
        self.end_audited(request, server, tool, &decision, "denied", "gateway", line);
    }

    /// A 2026-07-28 server wants input for a legacy host's request: ask the
    /// host each question and call the server again with the answers.
    pub(super) fn gather_for_legacy_host(&mut self, idx: usize, forward: Forward, result: &Value) {
        let requests = result
            .get("inputRequests")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let params = Message::parse(&forward.request.line)
            .ok()
            .and_then(|m| {
                m.params
                    .and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok())
            })
            .unwrap_or_else(|| json!({}));
        if requests.is_empty() {
            let line = frame::error_response(
                &forward.request.id,
                -32603,
                "the server asked for input but named none",
            );
            match &forward.call {
                Some(call) => self.end_with_outcome(&forward.request, call, "protocol-error", line),
                None => self.send_host(line),
            }
            return;
        }
        self.next_aggregate += 1;
        let gather_id = self.next_aggregate;
        self.gathers.insert(
            gather_id,
            Gather {
                request: forward.request,
                idx,
                call: forward.call,
                params,
                server_state: result.get("requestState").cloned(),
                remaining: requests.len(),
                responses: Map::new(),
            },
        );
        for (key, question) in requests {
            let method = question
                .get("method")
                .and_then(Value::as_str)
                .unwrap_or("elicitation/create")
                .to_owned();
            let question_params = question.get("params").cloned().unwrap_or_else(|| json!({}));
            let n = self.next_host_id();
            self.request_host(
                n,
                &method,
                &question_params,
                PendingHost::Gather {
                    gather: gather_id,
                    key,
                },
            );
        }
    }

    /// The host answered one gathered question.
    pub(super) fn on_gathered(
        &mut self,
        gather_id: u64,
        key: String,
        result: Option<Value>,
        error: Option<Value>,
    ) {
        let Some(gather) = self.gathers.get_mut(&gather_id) else {
            return;
        };
        let answer = match (result, error) {
            (Some(result), _) => result,
            (None, Some(error)) => json!({"action": "cancel", "_meta": {"hintgate/error": error}}),
            (None, None) => json!({"action": "cancel"}),
        };
        gather.responses.insert(key, answer);
        gather.remaining = gather.remaining.saturating_sub(1);
        if gather.remaining > 0 {
            return;
        }
        let Some(gather) = self.gathers.remove(&gather_id) else {
            return;
        };
        let mut params = match gather.params {
            Value::Object(object) => object,
            _ => Map::new(),
        };
        params.insert("inputResponses".to_owned(), Value::Object(gather.responses));
        match gather.server_state {
            Some(state) => {
                params.insert("requestState".to_owned(), state);
            }
            None => {
                params.remove("requestState");
            }
        }
        let params = Value::Object(params);
        let tool = gather.call.as_ref().map(|call| call.tool.clone());
        self.resend(
            gather.idx,
            gather.request,
            gather.call,
            tool.as_deref(),
            params,
        );
    }

    /// Sends a host request to a server again, with new params.
    fn resend(
        &mut self,
        idx: usize,
        request: HostRequest,
        call: Option<super::CallInfo>,
        tool: Option<&str>,
        mut params: Value,
    ) {
        if let (Some(tool), Some(object)) = (tool, params.as_object_mut()) {
            object.insert("name".to_owned(), Value::String(tool.to_owned()));
        }
        let id = self.next_up_id(idx);
        let line = self.modern_line(&request, id, Some(params));
        self.send_forward(idx, id, request, call, line);
    }
}

/// The gathers in progress, by id.
pub(crate) type Gathers = HashMap<u64, Gather>;
