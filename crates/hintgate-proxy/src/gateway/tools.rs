//! Tools: the list the host sees, and the decision on every call.

use std::sync::Arc;

use hintgate_policy::decide::{Call, Decision, RememberOffer, Remembered, SessionState, Verdict};
use hintgate_policy::pin::{PinDigest, PinStatus, diff};
use hintgate_policy::prompt::PromptInput;
use hintgate_policy::reason::ReasonCode;
use hintgate_policy::sanitize::sanitize;
use hintgate_policy::tool::{EffectiveHints, SandboxProof, Tool};
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use super::{CallInfo, Deadline, Gateway, HostRequest, PendingHost, PendingUp, Readiness};
use crate::frame::Message;

/// One tool as a server listed it.
#[derive(Debug)]
pub(crate) struct ToolEntry {
    raw: Value,
    tool: Result<Tool, String>,
    digest: Option<PinDigest>,
    input: Option<Arc<jsonschema::Validator>>,
    output: Option<Arc<jsonschema::Validator>>,
}

/// A call held while a person is asked.
#[derive(Debug)]
pub(crate) struct Ask {
    pub(crate) request: HostRequest,
    pub(crate) deadline: (Instant, u64),
    pub(super) idx: usize,
    pub(super) tool: String,
    pub(super) digest: Option<PinDigest>,
    pub(super) decision: Decision,
    pub(super) params: Value,
    pub(super) retry_eligible: bool,
}

/// A call waiting for its audit record to be durable.
#[derive(Debug)]
pub(crate) struct HeldCall {
    idx: usize,
    request: HostRequest,
    tool: String,
    params: Value,
    retry_eligible: bool,
    decision: Decision,
    approver: String,
}

/// A call's decision and what forwarding it needs.
struct Prepared {
    server: String,
    decision: Decision,
    digest: Option<PinDigest>,
    input: Option<Arc<jsonschema::Validator>>,
    retry_eligible: bool,
    pin: PinStatus,
}

/// Why a call ends before its decision is acted on.
enum Early {
    UnknownTool,
    Refuse(String, Decision),
}

/// What the person may answer in the form.
const APPROVE: &str = "approve";
const REMEMBER: &str = "remember";
pub(super) const THIS_CALL: &str = "this call only";
pub(super) const THIS_SESSION: &str = "this tool for the rest of this session";
pub(super) const ALWAYS: &str = "this tool always";

// === impl ToolEntry ===

impl ToolEntry {
    fn new(raw: Value) -> Self {
        let tool = Tool::from_value(raw.clone()).map_err(|err| err.to_string());
        let digest = tool.as_ref().ok().map(PinDigest::of);
        let compile = |schema: Option<&Value>| {
            let schema = schema?;
            match jsonschema::validator_for(schema) {
                Ok(validator) => Some(Arc::new(validator)),
                Err(err) => {
                    tracing::warn!(
                        "a tool's schema cannot be compiled, so it is not checked: {err}"
                    );
                    None
                }
            }
        };
        let (input, output) = match &tool {
            Ok(tool) => (
                compile(tool.input_schema.as_ref()),
                compile(tool.output_schema.as_ref()),
            ),
            Err(_) => (None, None),
        };
        Self {
            raw,
            tool,
            digest,
            input,
            output,
        }
    }

    fn name(&self) -> &str {
        self.raw.get("name").and_then(Value::as_str).unwrap_or("")
    }
}

/// The form a person answers: approve or not, and, where a remembered
/// approval is allowed, whether to remember it for the session.
fn requested_schema(decision: &Decision, can_remember_always: bool) -> Value {
    let mut properties = Map::new();
    properties.insert(
        APPROVE.to_owned(),
        json!({"type": "boolean", "title": "Approve this call", "default": false}),
    );
    if decision.remember == RememberOffer::UpToAlways {
        let mut choices = vec![THIS_CALL, THIS_SESSION];
        if can_remember_always {
            choices.push(ALWAYS);
        }
        properties.insert(
            REMEMBER.to_owned(),
            json!({"type": "string", "title": "Remember", "enum": choices, "default": THIS_CALL}),
        );
    }
    json!({"type": "object", "properties": properties, "required": [APPROVE]})
}

/// Seconds since the Unix epoch.
pub(super) fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX)
        })
}

/// A pin as the store keeps it.
fn stored_pin(
    key: &str,
    server: &str,
    identity: Option<&str>,
    definition: &Value,
    digest: PinDigest,
) -> hintgate_store::Pin {
    let pinned_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX)
        });
    hintgate_store::Pin {
        server_key: key.to_owned(),
        server: server.to_owned(),
        identity: identity.unwrap_or_default().to_owned(),
        tool: definition
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        digest: digest.to_string(),
        definition: definition.clone(),
        pinned_at,
        seen: None,
    }
}

/// The outcome record of the call recorded as `seq`.
fn outcome_entry(
    request: &HostRequest,
    call: &CallInfo,
    seq: u64,
    outcome: &str,
) -> hintgate_store::NewEntry {
    let millis = u64::try_from(call.started.elapsed().as_millis()).unwrap_or(u64::MAX);
    hintgate_store::NewEntry::from_value(
        unix_now(),
        hintgate_store::EntryKind::Outcome,
        Some(seq),
        &json!({"outcome": outcome, "duration_ms": millis, "attempt": request.attempt}),
    )
}

/// A tool result that tells the model the call failed, and why.
pub(crate) fn error_result(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

// === impl Gateway ===

impl Gateway {
    /// Starts listing a server's tools, unless a list is already running.
    pub(super) fn list_tools(&mut self, idx: usize) {
        let Some(up) = self.upstreams.get_mut(idx) else {
            return;
        };
        if up.listing.is_some() || up.phase != super::Phase::Ready {
            return;
        }
        if up.capability("tools").is_none() {
            up.tools = Some(Vec::new());
            return;
        }
        up.listing = Some(Vec::new());
        let id = self.request_up(idx, "tools/list", &json!({}));
        self.pending_up.insert((idx, id), PendingUp::ListTools);
    }

    /// One page of a server's tool list; the next one is asked for, or the
    /// list is complete and compared with the session's pins.
    pub(super) fn on_tools_page(&mut self, idx: usize, message: &Message<'_>) {
        let result: Value = message
            .result
            .and_then(|raw| serde_json::from_str(raw.get()).ok())
            .unwrap_or(Value::Null);
        let Some(up) = self.upstreams.get_mut(idx) else {
            return;
        };
        if message.error.is_some() {
            tracing::warn!(server.id = %up.name, "tools/list failed: {}", message.error.map_or("", |raw| raw.get()));
        }
        let mut pages = up.listing.take().unwrap_or_default();
        if let Some(tools) = result.get("tools").and_then(Value::as_array) {
            pages.extend(tools.iter().cloned());
        }
        if let Some(cursor) = result.get("nextCursor").and_then(Value::as_str) {
            up.listing = Some(pages);
            let params = json!({"cursor": cursor});
            let id = self.request_up(idx, "tools/list", &params);
            self.pending_up.insert((idx, id), PendingUp::ListTools);
            return;
        }
        let trusted = up.config.trust == hintgate_policy::tool::Trust::Trusted;
        let entries: Vec<ToolEntry> = pages.into_iter().map(ToolEntry::new).collect();
        let store = self.store.clone();
        let mut store_failure = None;
        // A trusted server's first-seen definitions, written in one commit.
        let mut first_seen = Vec::new();
        for entry in &entries {
            let (Ok(tool), Some(digest)) = (&entry.tool, entry.digest) else {
                tracing::warn!(server.id = %up.name, tool.name = %entry.name(), "invalid tool definition: {}", entry.tool.as_ref().err().map_or("", String::as_str));
                continue;
            };
            // What was pinned in an earlier run counts as much as this
            // session's pins: a definition that changed while the gateway
            // was stopped is held too.
            if !up.pins.contains_key(&tool.name)
                && let (Some(store), Some(key)) = (&store, &up.key)
            {
                match store.pin(key, &tool.name) {
                    Ok(Some(pin)) => {
                        if let Some(pinned) = PinDigest::parse(&pin.digest) {
                            up.pins.insert(tool.name.clone(), pinned);
                        }
                        if let Ok(definition) = Tool::from_value(pin.definition) {
                            up.pinned_definitions.insert(tool.name.clone(), definition);
                        }
                    }
                    Ok(None) => {}
                    Err(err) => store_failure = Some(err.to_string()),
                }
            }
            match up.pins.get(&tool.name) {
                // A trusted server's definitions are pinned on first sight.
                None if trusted => {
                    up.pins.insert(tool.name.clone(), digest);
                    up.pinned_definitions
                        .insert(tool.name.clone(), tool.clone());
                    if let Some(key) = &up.key {
                        first_seen.push(stored_pin(
                            key,
                            &up.name,
                            up.identity.as_deref(),
                            &entry.raw,
                            digest,
                        ));
                    }
                }
                Some(pinned) if *pinned != digest => {
                    tracing::warn!(server.id = %up.name, tool.name = %tool.name, "definition changed since it was approved; held for approval");
                    if let (Some(store), Some(key)) = (&store, &up.key) {
                        let seen = hintgate_store::Seen {
                            digest: digest.to_string(),
                            definition: entry.raw.clone(),
                            identity: up.identity.clone().unwrap_or_default(),
                        };
                        if let Err(err) = store.see(key, &tool.name, &seen) {
                            store_failure = Some(err.to_string());
                        }
                    }
                }
                _ => {}
            }
        }
        if let (Some(store), false) = (&store, first_seen.is_empty())
            && let Err(err) = store.put_pins(&first_seen)
        {
            store_failure = Some(err.to_string());
        }
        if let Some(reason) = store_failure {
            // Without its pins the gateway cannot tell a changed definition
            // from a new one: it fails closed, and stops the server.
            up.tools = Some(entries);
            self.upstream_failed(idx, format!("the pin store failed: {reason}"));
            return;
        }
        let listed: Vec<(String, String)> = entries
            .iter()
            .map(|entry| {
                let digest = entry
                    .digest
                    .map(|digest| digest.to_string())
                    .unwrap_or_default();
                (entry.name().to_owned(), digest)
            })
            .collect();
        up.tools = Some(entries);
        self.record_removed(idx, &listed);
        self.retry_waiting();
    }

    pub(super) fn on_tools_list(&mut self, mut request: HostRequest) {
        let mut pending = false;
        for idx in 0..self.upstreams.len() {
            match self.readiness(idx, &mut request) {
                Readiness::Ready => {
                    if self.upstreams.get(idx).is_some_and(|up| up.tools.is_none()) {
                        self.list_tools(idx);
                        pending = true;
                    }
                }
                Readiness::Pending => pending = true,
                Readiness::Failed(_) => {}
            }
        }
        if pending {
            self.waiting.push(request);
            return;
        }
        let mut tools = Vec::new();
        for (idx, up) in self.upstreams.iter().enumerate() {
            for entry in up.tools.iter().flatten() {
                if let Some(tool) = self.host_view(idx, entry) {
                    tools.push(tool);
                }
            }
        }
        let mut result = json!({"tools": tools});
        self.modernize("tools/list", &mut result);
        self.reply(&request.id, &result);
    }

    /// A tool as the host sees it, or `None` when it is hidden: the prefixed
    /// name, sanitized title and description, the vouched annotations, and
    /// the server's own claims under `_meta["hintgate/declared"]`.
    fn host_view(&self, idx: usize, entry: &ToolEntry) -> Option<Value> {
        let tool = entry.tool.as_ref().ok()?;
        let up = self.upstreams.get(idx)?;
        if !self.policy.visible(&up.name, tool, SandboxProof::default()) {
            return None;
        }
        let effective = self
            .policy
            .assess(&up.name, tool, SandboxProof::default())
            .map_or(EffectiveHints::CAUTIOUS, |assessment| assessment.effective);
        let mut view = entry.raw.clone();
        let object = view.as_object_mut()?;
        object.insert(
            "name".to_owned(),
            Value::String(self.prefixed(idx, &tool.name)),
        );
        for field in ["title", "description"] {
            if let Some(text) = object.get(field).and_then(Value::as_str) {
                let clean = sanitize(text);
                if !clean.is_clean() {
                    tracing::warn!(server.id = %up.name, tool.name = %tool.name, removed = ?clean.removed, "sanitized the tool's {field}");
                }
                object.insert(field.to_owned(), Value::String(clean.text));
            }
        }
        let mut annotations = serde_json::to_value(effective).unwrap_or_else(|_| json!({}));
        if let (Some(map), Some(title)) = (
            annotations.as_object_mut(),
            tool.annotations.as_ref().and_then(|a| a.title.as_deref()),
        ) {
            map.insert("title".to_owned(), Value::String(sanitize(title).text));
        }
        let declared = object.get("annotations").cloned().unwrap_or(Value::Null);
        object.insert("annotations".to_owned(), annotations);
        let meta = object
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert("hintgate/declared".to_owned(), declared);
        }
        Some(view)
    }

    pub(super) fn on_tools_call(&mut self, mut request: HostRequest) {
        let params = request.params();
        if self.host.modern && self.answer_relayed(&request, &params) {
            return;
        }
        let Some(name) = params.get("name").and_then(Value::as_str) else {
            let line = crate::frame::error_response(
                &request.id,
                -32602,
                "`tools/call` needs a tool `name`",
            );
            self.end_refused(&request, "", "", ReasonCode::UnknownTool, line);
            return;
        };
        let Some((idx, tool_name)) = self.resolve(name) else {
            let line = crate::frame::error_response(
                &request.id,
                -32602,
                &format!("unknown tool `{name}`"),
            );
            self.end_refused(&request, "", name, ReasonCode::UnknownTool, line);
            return;
        };
        match self.readiness(idx, &mut request) {
            Readiness::Ready => {}
            Readiness::Pending => {
                self.waiting.push(request);
                return;
            }
            Readiness::Failed(reason) => {
                let server = self
                    .upstreams
                    .get(idx)
                    .map_or(String::new(), |up| up.name.clone());
                let text = format!("server `{server}` is not available: {reason}");
                let line = self.response_line(&request.id, &error_result(&text));
                self.end_refused(
                    &request,
                    &server,
                    &tool_name,
                    ReasonCode::ServerUnavailable,
                    line,
                );
                return;
            }
        }
        if self.upstreams.get(idx).is_some_and(|up| up.tools.is_none()) {
            self.list_tools(idx);
            self.waiting.push(request);
            return;
        }
        let prepared = match self.prepare_call(idx, &tool_name) {
            Ok(prepared) => prepared,
            Err(Early::UnknownTool) => {
                let server = self
                    .upstreams
                    .get(idx)
                    .map_or(String::new(), |up| up.name.clone());
                let line = crate::frame::error_response(
                    &request.id,
                    -32602,
                    &format!("unknown tool `{name}`"),
                );
                self.end_refused(&request, &server, &tool_name, ReasonCode::UnknownTool, line);
                return;
            }
            Err(Early::Refuse(server, decision)) => {
                self.refuse(&request, &server, &tool_name, &decision, None);
                return;
            }
        };
        let Prepared {
            server,
            decision,
            digest,
            input,
            retry_eligible,
            pin,
        } = prepared;
        tracing::debug!(
            server.id = %server,
            tool.name = %tool_name,
            decision.verdict = ?decision.verdict,
            decision.reasons = ?decision.codes().map(|code| code.as_str()).collect::<Vec<_>>(),
            "tools/call"
        );
        self.observe(super::Observed::Decided {
            server: server.clone(),
            tool: tool_name.clone(),
            decision: decision.clone(),
        });
        if decision.verdict == Verdict::Deny {
            self.refuse(&request, &server, &tool_name, &decision, None);
            return;
        }
        let empty = Value::Object(Map::new());
        let arguments = params.get("arguments").unwrap_or(&empty);
        if let Some(validator) = input
            && !validator.is_valid(arguments)
        {
            let problems: Vec<String> = validator
                .iter_errors(arguments)
                .take(5)
                .map(|err| format!("{err} (at `{}`)", err.instance_path()))
                .collect();
            let text = format!(
                "hintgate did not send this call to `{server}`: its arguments do not match the tool's input schema: {}",
                problems.join("; ")
            );
            let line = self.response_line(&request.id, &error_result(&text));
            self.end_audited(
                &request,
                &server,
                &tool_name,
                &decision,
                "invalid-arguments",
                "gateway",
                line,
            );
            return;
        }
        if self.host.modern
            && super::modern::carries_our_answer(&params)
            && let Some(state) = params.get("requestState").and_then(Value::as_str)
        {
            let state = state.to_owned();
            self.on_modern_retry(
                idx,
                request,
                &tool_name,
                params,
                &state,
                decision,
                digest,
                retry_eligible,
            );
            return;
        }
        match decision.verdict {
            Verdict::Allow => {
                let approver = decision
                    .reasons
                    .first()
                    .map_or("policy", |reason| reason.code.as_str());
                self.forward_call(
                    idx,
                    request,
                    &tool_name,
                    &params,
                    retry_eligible,
                    &decision,
                    approver,
                );
            }
            Verdict::Ask => {
                let Some(tool) = self.tool(idx, &tool_name).cloned() else {
                    return;
                };
                self.ask(
                    idx,
                    request,
                    tool,
                    digest,
                    decision,
                    params,
                    pin,
                    retry_eligible,
                );
            }
            Verdict::Deny => {}
        }
    }

    fn tool(&self, idx: usize, name: &str) -> Option<&Tool> {
        self.upstreams
            .get(idx)?
            .tools
            .as_ref()?
            .iter()
            .find(|entry| entry.name() == name)?
            .tool
            .as_ref()
            .ok()
    }

    /// The decision on a call to a listed tool, and what forwarding it needs.
    fn prepare_call(&self, idx: usize, tool_name: &str) -> Result<Prepared, Early> {
        let up = self.upstreams.get(idx).ok_or(Early::UnknownTool)?;
        let entry = up
            .tools
            .iter()
            .flatten()
            .find(|entry| entry.name() == tool_name)
            .ok_or(Early::UnknownTool)?;
        let (Ok(tool), Some(digest)) = (&entry.tool, entry.digest) else {
            return Err(Early::Refuse(
                up.name.clone(),
                Decision::invalid_definition(),
            ));
        };
        // The digest was computed when the tool was listed; comparing it with
        // the pin costs nothing per call.
        let pin = match up.pins.get(tool_name) {
            None => PinStatus::New,
            Some(pinned) if *pinned == digest => PinStatus::Unchanged,
            Some(_) => PinStatus::Changed,
        };
        let remembered = if !self.host.remembered.is_empty()
            && self.host.remembered.contains(&(idx, tool_name.to_owned()))
        {
            Remembered::Session
        } else if let (Some(store), Some(key)) = (&self.store, &up.key)
            && store
                .approved_always(key, tool_name, &digest.to_string())
                .unwrap_or(false)
        {
            // A store that cannot be read answers no: the call is asked.
            Remembered::Always
        } else {
            Remembered::None
        };
        let decision = self.policy.decide(&Call {
            server: &up.name,
            tool,
            pin,
            session: SessionState {
                tainted: self.host.tainted,
                remembered,
            },
            sandbox: SandboxProof::default(),
        });
        Ok(Prepared {
            server: up.name.clone(),
            retry_eligible: self
                .policy
                .retry_eligible(&up.name, tool, SandboxProof::default()),
            decision,
            digest: Some(digest),
            input: entry.input.clone(),
            pin,
        })
    }

    /// Sends an allowed call upstream, under the server's own tool name.
    #[expect(
        clippy::too_many_arguments,
        reason = "one call's whole context, used once"
    )]
    fn forward_call(
        &mut self,
        idx: usize,
        request: HostRequest,
        tool_name: &str,
        params: &Value,
        retry_eligible: bool,
        decision: &Decision,
        approver: &str,
    ) {
        // INVARIANT: with a store, no call reaches its server before its
        // audit record is durable.
        if request.audit_seq.is_none()
            && let Some(audit) = self.audit.clone()
        {
            self.next_token += 1;
            let token = self.next_token;
            let entry = self.call_entry(idx, &request, tool_name, params, decision, approver, None);
            if audit.append(entry, Some(token)) {
                self.held_for_audit.insert(
                    token,
                    HeldCall {
                        idx,
                        request,
                        tool: tool_name.to_owned(),
                        params: params.clone(),
                        retry_eligible,
                        decision: decision.clone(),
                        approver: approver.to_owned(),
                    },
                );
            } else {
                self.reply(
                    &request.id,
                    &error_result("hintgate did not send this call: the audit log is not running."),
                );
            }
            return;
        }
        let id = self.next_up_id(idx);
        let ours = super::modern::carries_our_answer(params);
        let modern = self.upstreams.get(idx).is_some_and(|up| up.modern);
        let rewrite = |params: &Value| {
            // The server gets its own tool name, and never the gateway's own
            // question and answer (a server's own input requests and state
            // pass through untouched).
            let mut params = params.clone();
            if let Some(object) = params.as_object_mut() {
                object.insert("name".to_owned(), Value::String(tool_name.to_owned()));
                if ours {
                    super::modern::strip_our_answer(object);
                }
            }
            params
        };
        let line = match self.mode {
            _ if modern => self.modern_line(&request, id, Some(rewrite(params))),
            super::Mode::Wrap if !ours => request.with_id(&id.to_string()),
            super::Mode::Wrap | super::Mode::Gateway => {
                request.with_id_and_params(&id.to_string(), &rewrite(params).to_string())
            }
        };
        let call = CallInfo {
            tool: tool_name.to_owned(),
            retry_eligible,
            started: Instant::now(),
        };
        self.send_forward(idx, id, request, Some(call), line);
    }

    /// The result of a forwarded call: checked against the output schema,
    /// noted for session taint, and passed to the host under its own id.
    pub(super) fn on_call_result(
        &mut self,
        idx: usize,
        call: CallInfo,
        request: &HostRequest,
        message: &Message<'_>,
    ) {
        let Some(up) = self.upstreams.get(idx) else {
            return;
        };
        let server = up.name.clone();
        if message.result.is_some()
            && self.policy.taints_session(&server, &call.tool)
            && !self.host.tainted
        {
            tracing::info!(server.id = %server, tool.name = %call.tool, "the session has read private data: open-world tools now ask");
            self.host.tainted = true;
        }
        let output = up
            .tools
            .iter()
            .flatten()
            .find(|entry| entry.name() == call.tool)
            .and_then(|entry| entry.output.clone());
        if let (Some(validator), Some(raw)) = (output, message.result) {
            let result: Value = serde_json::from_str(raw.get()).unwrap_or(Value::Null);
            let is_error = result
                .get("isError")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            if !is_error && let Some(structured) = result.get("structuredContent") {
                let problems: Vec<String> = validator
                    .iter_errors(structured)
                    .take(5)
                    .map(|err| err.to_string())
                    .collect();
                if !problems.is_empty() {
                    let text = format!(
                        "`{server}` returned structured content that does not match the tool's output schema: {}",
                        problems.join("; ")
                    );
                    tracing::warn!(server.id = %server, tool.name = %call.tool, "{text}");
                    let line = self.response_line(&request.id, &error_result(&text));
                    self.end_with_outcome(request, &call, "output-schema-mismatch", line);
                    return;
                }
            }
        }
        let outcome = if message.error.is_some() {
            "protocol-error"
        } else if message
            .result
            .is_some_and(|raw| raw.get().contains("\"isError\":true"))
        {
            "tool-error"
        } else {
            "ok"
        };
        let line = self.host_response(message, &request.id, "tools/call");
        self.end_with_outcome(request, &call, outcome, line);
    }

    /// Refuses a call with a result that says what, why and how to allow it.
    pub(super) fn refuse(
        &mut self,
        request: &HostRequest,
        server: &str,
        tool: &str,
        decision: &Decision,
        extra: Option<&str>,
    ) {
        self.refuse_as(request, server, tool, decision, extra, "gateway");
    }

    /// [`Self::refuse`], recording who refused (a person who declined).
    pub(super) fn refuse_as(
        &mut self,
        request: &HostRequest,
        server: &str,
        tool: &str,
        decision: &Decision,
        extra: Option<&str>,
        refused_by: &str,
    ) {
        let reasons: Vec<String> = decision
            .reasons
            .iter()
            .map(|reason| {
                let mut text = reason.code.description().to_owned();
                if let Some(rule_reason) = reason
                    .rule
                    .and_then(|idx| self.policy.config().rules.get(idx))
                    .and_then(|rule| rule.reason.as_deref())
                {
                    text.push_str(&format!(" (\"{rule_reason}\")"));
                }
                text
            })
            .collect();
        let first = decision.reasons.first().map(|reason| reason.code);
        let how = match first {
            Some(ReasonCode::RuleDeny) => {
                let rule = decision.reasons.first().and_then(|reason| reason.rule).unwrap_or(0);
                format!("change or remove rule {rule} in the configuration's `[[rules]]` (counted from 0)")
            }
            Some(ReasonCode::ProfileHideWrites) => {
                "add an allow or ask rule for this tool, or set `profile = \"ask-writes\"`".to_owned()
            }
            Some(ReasonCode::Unattended) => {
                "run hintgate with a person to answer (`unattended = false`), or add an allow rule for this tool".to_owned()
            }
            Some(ReasonCode::InvalidDefinition) => "the server must send a valid tool definition".to_owned(),
            _ => "approve it when asked, add an allow rule for this tool, or trust the server".to_owned(),
        };
        let why = if decision.verdict == Verdict::Ask {
            "It needed a person's approval because"
        } else {
            "Why"
        };
        let mut text = format!(
            "hintgate refused to run `{tool}` on server `{server}`.\n{why}: {}.",
            reasons.join("; ")
        );
        if let Some(extra) = extra {
            text.push_str(&format!("\n{extra}"));
        }
        text.push_str(&format!("\nTo allow it: {how}."));
        let mut result = error_result(&text);
        if let Some(object) = result.as_object_mut() {
            object.insert(
                "_meta".to_owned(),
                json!({"hintgate/decision": {
                    "verdict": "deny",
                    "reasons": decision.codes().map(|code| code.as_str()).collect::<Vec<_>>(),
                }}),
            );
        }
        // The refusal reaches the host only once its record is durable.
        let line = self.response_line(&request.id, &result);
        self.end_audited(request, server, tool, decision, "denied", refused_by, line);
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "one call's whole context, used once"
    )]
    fn ask(
        &mut self,
        idx: usize,
        request: HostRequest,
        tool: Tool,
        digest: Option<PinDigest>,
        decision: Decision,
        params: Value,
        pin: PinStatus,
        retry_eligible: bool,
    ) {
        let Some(up) = self.upstreams.get(idx) else {
            return;
        };
        let server = up.name.clone();
        if !self.host.elicitation && self.store.is_none() {
            let extra = "It needs a person's approval, and this host cannot ask one (it did not declare elicitation).";
            self.refuse(&request, &server, &tool.name, &decision, Some(extra));
            return;
        }
        if self.host.elicitation && self.host.modern {
            self.ask_modern(&request, &server, &tool, digest, &decision, &params, pin);
            return;
        }
        let changes = match pin {
            PinStatus::Changed => up
                .pinned_definitions
                .get(&tool.name)
                .map(|old| diff(old, &tool))
                .unwrap_or_default(),
            PinStatus::New | PinStatus::Unchanged => Vec::new(),
        };
        let arguments = params.get("arguments").cloned();
        let prompt = self.policy.prompt(&PromptInput {
            server: &server,
            identity: up.identity.as_deref(),
            tool: &tool,
            arguments: arguments.as_ref(),
            decision: &decision,
            sandbox: SandboxProof::default(),
            changes: &changes,
        });
        if !self.host.elicitation {
            // No way to ask through the host: the call waits in the queue.
            let ask = Ask {
                request,
                deadline: (Instant::now(), 0),
                idx,
                tool: tool.name.clone(),
                digest,
                decision,
                params,
                retry_eligible,
            };
            self.enqueue_ask(ask, prompt);
            return;
        }
        let mut elicit = json!({
            "message": prompt,
            "requestedSchema": requested_schema(&decision, self.store.is_some()),
        });
        if self.host.protocol_version.as_str() >= "2025-11-25"
            && let Some(object) = elicit.as_object_mut()
        {
            object.insert("mode".to_owned(), json!("form"));
        }
        let timeout = self.ask_timeout;
        let n = self.next_host_id();
        let deadline = self.add_deadline(timeout, Deadline::Host(n));
        let ask = Ask {
            request,
            deadline,
            idx,
            tool: tool.name.clone(),
            digest,
            decision,
            params,
            retry_eligible,
        };
        self.request_host(
            n,
            "elicitation/create",
            &elicit,
            PendingHost::Ask(Box::new(ask)),
        );
    }

    /// The person answered: approve forwards the call, anything else refuses it.
    pub(super) fn on_ask_answer(&mut self, ask: Ask, result: Option<&Value>, is_error: bool) {
        let server = self
            .upstreams
            .get(ask.idx)
            .map(|up| up.name.clone())
            .unwrap_or_default();
        let action = result
            .and_then(|r| r.get("action"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let content = result.and_then(|r| r.get("content"));
        let approved = !is_error
            && action == "accept"
            && content
                .and_then(|c| c.get(APPROVE))
                .and_then(Value::as_bool)
                == Some(true);
        if !approved {
            let (why, short) = if is_error {
                (
                    "The host could not ask (it answered the prompt with an error).",
                    "the host could not ask",
                )
            } else if action == "accept" {
                ("The person did not approve it.", "did not approve")
            } else if action == "decline" {
                ("The person declined.", "declined")
            } else {
                ("The prompt was dismissed.", "dismissed the prompt")
            };
            tracing::info!(server.id = %server, tool.name = %ask.tool, "refused by the person: {why}");
            self.observe(super::Observed::Answered {
                server: server.clone(),
                tool: ask.tool.clone(),
                approved: false,
                answer: short.to_owned(),
            });
            let by = if is_error {
                "gateway"
            } else {
                "person (elicitation)"
            };
            self.refuse_unasked_by(ask, why, by);
            return;
        }
        let remember = content
            .and_then(|c| c.get(REMEMBER))
            .and_then(Value::as_str);
        self.record_approval(ask.idx, &ask.tool, ask.digest, &ask.decision, remember);
        tracing::info!(server.id = %server, tool.name = %ask.tool, "approved by the person");
        let answer = match remember {
            Some(THIS_SESSION) if ask.decision.remember == RememberOffer::UpToAlways => {
                "approved, and remembered for the rest of this session"
            }
            Some(ALWAYS)
                if ask.decision.remember == RememberOffer::UpToAlways && self.store.is_some() =>
            {
                "approved, and remembered always"
            }
            _ => "approved, for this call only",
        };
        self.observe(super::Observed::Answered {
            server: server.clone(),
            tool: ask.tool.clone(),
            approved: true,
            answer: answer.to_owned(),
        });
        self.forward_asked(ask, "person (elicitation)");
    }

    /// The question for a 2026-07-28 host: an input-required result whose
    /// sealed state binds this call; the host retries with the answer.
    #[expect(
        clippy::too_many_arguments,
        reason = "one call's whole context, used once"
    )]
    fn ask_modern(
        &mut self,
        request: &HostRequest,
        server: &str,
        tool: &Tool,
        digest: Option<PinDigest>,
        decision: &Decision,
        params: &Value,
        pin: PinStatus,
    ) {
        let changes = match pin {
            PinStatus::Changed => self
                .upstreams
                .iter()
                .find(|up| up.name == server)
                .and_then(|up| up.pinned_definitions.get(&tool.name))
                .map(|old| diff(old, tool))
                .unwrap_or_default(),
            PinStatus::New | PinStatus::Unchanged => Vec::new(),
        };
        let empty = Value::Object(Map::new());
        let arguments = params.get("arguments").unwrap_or(&empty);
        let identity = self
            .upstreams
            .iter()
            .find(|up| up.name == server)
            .and_then(|up| up.identity.clone());
        let prompt = self.policy.prompt(&PromptInput {
            server,
            identity: identity.as_deref(),
            tool,
            arguments: Some(arguments),
            decision,
            sandbox: SandboxProof::default(),
            changes: &changes,
        });
        let host_name = params.get("name").and_then(Value::as_str).unwrap_or("");
        let pin_text = digest.map(|digest| digest.to_string()).unwrap_or_default();
        let state = match self.sealer.seal(
            host_name,
            arguments,
            &pin_text,
            self.ask_timeout.as_secs(),
        ) {
            Ok(state) => state,
            Err(err) => {
                let extra = format!(
                    "It needs a person's approval, and the gateway could not seal the question: {err}."
                );
                self.refuse(request, server, &tool.name, decision, Some(&extra));
                return;
            }
        };
        let result = json!({
            "resultType": "input_required",
            "inputRequests": {
                super::modern::INPUT_KEY: {
                    "method": "elicitation/create",
                    "params": {"mode": "form", "message": prompt, "requestedSchema": requested_schema(decision, self.store.is_some())},
                }
            },
            "requestState": state,
        });
        let line = crate::frame::response(&request.id, &result);
        self.end_audited(
            request,
            server,
            &tool.name,
            decision,
            "input-required",
            "gateway",
            line,
        );
    }

    /// A 2026-07-28 host retries a call with the person's answer and the
    /// sealed state: the state must be this gateway's, unused, unexpired and
    /// for this very call; only then does an approval run it.
    #[expect(
        clippy::too_many_arguments,
        reason = "one call's whole context, used once"
    )]
    fn on_modern_retry(
        &mut self,
        idx: usize,
        request: HostRequest,
        tool_name: &str,
        params: Value,
        state: &str,
        decision: Decision,
        digest: Option<PinDigest>,
        retry_eligible: bool,
    ) {
        let server = self
            .upstreams
            .get(idx)
            .map(|up| up.name.clone())
            .unwrap_or_default();
        let empty = Value::Object(Map::new());
        let arguments = params.get("arguments").unwrap_or(&empty);
        let host_name = params.get("name").and_then(Value::as_str).unwrap_or("");
        let pin_text = digest.map(|digest| digest.to_string()).unwrap_or_default();
        if let Err(err) = self.sealer.open(state, host_name, arguments, &pin_text) {
            tracing::warn!(server.id = %server, tool.name = %tool_name, "refused a returned approval: {err}");
            let extra = format!("The approval could not be used: {err}.");
            self.refuse(&request, &server, tool_name, &decision, Some(&extra));
            return;
        }
        let answer = params.pointer(&format!(
            "/inputResponses/{}",
            super::modern::INPUT_KEY.replace('/', "~1")
        ));
        let action = answer
            .and_then(|a| a.get("action"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let content = answer.and_then(|a| a.get("content"));
        let approved = action == "accept"
            && content
                .and_then(|c| c.get(APPROVE))
                .and_then(Value::as_bool)
                == Some(true);
        if !approved {
            let why = match action {
                "accept" => "The person did not approve it.",
                "decline" => "The person declined.",
                _ => "The prompt was dismissed.",
            };
            self.observe(super::Observed::Answered {
                server: server.clone(),
                tool: tool_name.to_owned(),
                approved: false,
                answer: why.to_owned(),
            });
            self.refuse_as(
                &request,
                &server,
                tool_name,
                &decision,
                Some(why),
                "person (input-required)",
            );
            return;
        }
        let remember = content
            .and_then(|c| c.get(REMEMBER))
            .and_then(Value::as_str);
        self.record_approval(idx, tool_name, digest, &decision, remember);
        self.observe(super::Observed::Answered {
            server,
            tool: tool_name.to_owned(),
            approved: true,
            answer: "approved".to_owned(),
        });
        self.forward_call(
            idx,
            request,
            tool_name,
            &params,
            retry_eligible,
            &decision,
            "person (input-required)",
        );
    }

    /// The audit record of a call: who, what (arguments redacted), the
    /// decision and its reasons, who let it through, the pin; and, for a
    /// call that ends at the gateway, its outcome.
    #[expect(clippy::too_many_arguments, reason = "one record's fields")]
    fn call_entry(
        &self,
        idx: usize,
        request: &HostRequest,
        tool: &str,
        params: &Value,
        decision: &Decision,
        approver: &str,
        outcome: Option<&str>,
    ) -> hintgate_store::NewEntry {
        let up = self.upstreams.get(idx);
        let pin = up
            .and_then(|up| up.tools.as_ref())
            .and_then(|tools| tools.iter().find(|entry| entry.name() == tool))
            .and_then(|entry| entry.digest)
            .map(|digest| digest.to_string());
        let verdict = match decision.verdict {
            Verdict::Allow => "allow",
            Verdict::Ask => "ask",
            Verdict::Deny => "deny",
        };
        let mut fields = std::collections::BTreeMap::new();
        fields.insert("session", Value::String(self.session.clone()));
        fields.insert("request", Value::String(request.id.clone()));
        fields.insert(
            "server",
            Value::String(up.map_or(String::new(), |up| up.name.clone())),
        );
        fields.insert(
            "identity",
            up.and_then(|up| up.key.clone())
                .map_or(Value::Null, Value::String),
        );
        fields.insert("tool", Value::String(tool.to_owned()));
        fields.insert(
            "arguments",
            self.redactor
                .redact(params.get("arguments").unwrap_or(&Value::Null)),
        );
        fields.insert("verdict", Value::String(verdict.to_owned()));
        fields.insert(
            "reasons",
            decision
                .codes()
                .map(|code| Value::String(code.as_str().to_owned()))
                .collect(),
        );
        fields.insert("approver", Value::String(approver.to_owned()));
        fields.insert("pin", pin.map_or(Value::Null, Value::String));
        if let Some(outcome) = outcome {
            fields.insert("outcome", Value::String(outcome.to_owned()));
        }
        hintgate_store::NewEntry::from_value(
            unix_now(),
            hintgate_store::EntryKind::Call,
            None,
            &crate::audit::call_body(fields),
        )
    }

    /// The record of a call that ends at the gateway, with its outcome.
    fn ended_entry(
        &self,
        request: &HostRequest,
        server: &str,
        tool: &str,
        decision: &Decision,
        approver: &str,
        outcome: &str,
    ) -> hintgate_store::NewEntry {
        let idx = self
            .upstreams
            .iter()
            .position(|up| up.name == server)
            .unwrap_or(usize::MAX);
        self.call_entry(
            idx,
            request,
            tool,
            &request.params(),
            decision,
            approver,
            Some(outcome),
        )
    }

    /// Records a call that ends at the gateway (refused, invalid, or asked
    /// by an input-required result) and sends the host `line` once the
    /// record is durable (at once when there is no audit log).
    #[expect(
        clippy::too_many_arguments,
        reason = "one record's fields and the line it holds"
    )]
    pub(super) fn end_audited(
        &mut self,
        request: &HostRequest,
        server: &str,
        tool: &str,
        decision: &Decision,
        outcome: &str,
        approver: &str,
        line: String,
    ) {
        if self.audit.is_none() {
            self.send_host(line);
            return;
        }
        let entry = self.ended_entry(request, server, tool, decision, approver, outcome);
        self.next_token += 1;
        let token = self.next_token;
        let appended = self
            .audit
            .as_ref()
            .is_some_and(|audit| audit.append(entry, Some(token)));
        if appended {
            self.held_lines.insert(token, line);
        } else {
            tracing::error!("the audit log is not running: a refusal goes unrecorded");
            self.send_host(line);
        }
    }

    /// Records a call the gateway could not route (no such tool, or its
    /// server cannot start) as a deny with `code`, and sends the host `line`
    /// once the record is durable.
    pub(super) fn end_refused(
        &mut self,
        request: &HostRequest,
        server: &str,
        tool: &str,
        code: ReasonCode,
        line: String,
    ) {
        let decision = Decision::deny(code);
        self.end_audited(request, server, tool, &decision, "denied", "gateway", line);
    }

    /// Records a call whose answer does not wait for the record: a relayed
    /// answer, which only answers a question of a call already recorded. The
    /// writer keeps order, so the record commits no later than whatever the
    /// gateway records after it.
    pub(super) fn audit_unheld(
        &self,
        request: &HostRequest,
        server: &str,
        tool: &str,
        decision: &Decision,
        approver: &str,
        outcome: &str,
    ) {
        let Some(audit) = &self.audit else {
            return;
        };
        let entry = self.ended_entry(request, server, tool, decision, approver, outcome);
        if !audit.append(entry, None) {
            tracing::error!("the audit log is not running: a relayed answer goes unrecorded");
        }
    }

    /// Records how a forwarded call ended.
    pub(super) fn audit_outcome(&self, request: &HostRequest, call: &CallInfo, outcome: &str) {
        let (Some(audit), Some(seq)) = (&self.audit, request.audit_seq) else {
            return;
        };
        audit.append(outcome_entry(request, call, seq, outcome), None);
    }

    /// Records how a forwarded call ended and sends the host `line` once
    /// that record is durable, so a crash never loses the outcome of a call
    /// whose answer the host has seen.
    pub(super) fn end_with_outcome(
        &mut self,
        request: &HostRequest,
        call: &CallInfo,
        outcome: &str,
        line: String,
    ) {
        let (Some(audit), Some(seq)) = (&self.audit, request.audit_seq) else {
            self.send_host(line);
            return;
        };
        self.next_token += 1;
        let token = self.next_token;
        if audit.append(outcome_entry(request, call, seq, outcome), Some(token)) {
            self.held_lines.insert(token, line);
        } else {
            tracing::error!("the audit log is not running: an outcome goes unrecorded");
            self.send_host(line);
        }
    }

    /// A held call's audit record is durable (or could not be written).
    pub(super) fn on_audited(&mut self, token: u64, result: Result<u64, String>) {
        if let Some(line) = self.held_lines.remove(&token) {
            if let Err(err) = &result {
                tracing::error!(
                    "the audit log could not record a call that ended at the gateway: {err}"
                );
            }
            self.send_host(line);
            return;
        }
        let Some(held) = self.held_for_audit.remove(&token) else {
            return;
        };
        match result {
            Ok(seq) => {
                let mut request = held.request;
                request.audit_seq = Some(seq);
                self.forward_call(
                    held.idx,
                    request,
                    &held.tool,
                    &held.params,
                    held.retry_eligible,
                    &held.decision,
                    &held.approver,
                );
            }
            Err(err) => {
                // Fail closed: a call without its record does not run.
                let text = format!(
                    "hintgate did not send this call: the audit log could not be written ({err})."
                );
                self.reply(&held.request.id, &error_result(&text));
            }
        }
    }

    /// A person approved a call: pin the definition they saw (in the
    /// session, and in the store when there is one), and remember the
    /// approval for the session or always where the decision allows it.
    pub(super) fn record_approval(
        &mut self,
        idx: usize,
        tool: &str,
        digest: Option<PinDigest>,
        decision: &Decision,
        remember: Option<&str>,
    ) {
        let may_remember = decision.remember == RememberOffer::UpToAlways;
        if remember == Some(THIS_SESSION) && may_remember {
            self.host.remembered.insert((idx, tool.to_owned()));
        }
        let store = self.store.clone();
        let Some(up) = self.upstreams.get_mut(idx) else {
            return;
        };
        let Some(digest) = digest else {
            return;
        };
        up.pins.insert(tool.to_owned(), digest);
        let entry = up.tools.iter().flatten().find(|entry| entry.name() == tool);
        if let Some(definition) = entry.and_then(|entry| entry.tool.as_ref().ok()) {
            up.pinned_definitions
                .insert(tool.to_owned(), definition.clone());
        }
        let (Some(store), Some(key), Some(entry)) = (store, up.key.clone(), entry) else {
            return;
        };
        let mut result = store.put_pin(&stored_pin(
            &key,
            &up.name,
            up.identity.as_deref(),
            &entry.raw,
            digest,
        ));
        if remember == Some(ALWAYS) && may_remember && result.is_ok() {
            result = store.approve_always(&key, tool, &digest.to_string());
        }
        if let Err(err) = result {
            tracing::error!(server.id = %up.name, tool.name = %tool, "the approval could not be stored: {err}");
        }
    }

    /// Refuses a held call that was not approved, saying why.
    pub(super) fn refuse_unasked(&mut self, ask: Ask, why: &str) {
        self.refuse_unasked_by(ask, why, "gateway");
    }

    /// [`Self::refuse_unasked`], recording who refused.
    pub(super) fn refuse_unasked_by(&mut self, ask: Ask, why: &str, refused_by: &str) {
        let server = self
            .upstreams
            .get(ask.idx)
            .map(|up| up.name.clone())
            .unwrap_or_default();
        self.refuse_as(
            &ask.request,
            &server,
            &ask.tool,
            &ask.decision,
            Some(why),
            refused_by,
        );
    }

    /// Sends a held call that a person approved.
    pub(super) fn forward_asked(&mut self, ask: Ask, approver: &str) {
        self.forward_call(
            ask.idx,
            ask.request,
            &ask.tool,
            &ask.params,
            ask.retry_eligible,
            &ask.decision,
            approver,
        );
    }

    pub(super) fn ask_timed_out(&mut self, ask: Ask) {
        let server = self
            .upstreams
            .get(ask.idx)
            .map(|up| up.name.clone())
            .unwrap_or_default();
        let seconds = self.ask_timeout.as_secs();
        let why = format!("Nobody answered within {seconds} s (`ask_timeout_s`).");
        self.observe(super::Observed::Answered {
            server: server.clone(),
            tool: ask.tool.clone(),
            approved: false,
            answer: format!("did not answer within {seconds} s"),
        });
        self.refuse(&ask.request, &server, &ask.tool, &ask.decision, Some(&why));
    }
}
