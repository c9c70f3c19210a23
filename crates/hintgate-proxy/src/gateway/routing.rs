//! Everything that is not a tool: passed through in wrap mode, routed or
//! merged across servers in gateway mode.
//!
//! Gateway mode, what the host sees:
//! - `resources/list`, `resources/templates/list` and `prompts/list` merge
//!   every server's list (following each server's cursors) into one page;
//! - resource URIs are global, so they are not renamed: `resources/read`,
//!   `subscribe` and `unsubscribe` go to the server that listed the URI (or
//!   the template it matches); when two servers list the same URI, the first
//!   in the configuration keeps it, and the clash is logged;
//! - prompt names are prefixed like tool names and routed by the prefix;
//! - `completion/complete` is routed by the prompt's prefix or the
//!   resource template's owner;
//! - `logging/setLevel` goes to every server that logs;
//! - any other method is answered with "method not found", since it is
//!   not clear which server it is for.

use serde_json::{Value, json};

use super::{Gateway, HostRequest, Mode, PendingUp, Readiness};
use crate::frame::Message;

/// A host request answered by merging several servers' lists.
#[derive(Debug)]
pub(crate) struct Aggregate {
    request: HostRequest,
    /// `resources`, `resourceTemplates` or `prompts`.
    key: &'static str,
    /// Each server's items, by its index, so the merged list is in
    /// configuration order whatever order the answers come in.
    items: std::collections::BTreeMap<usize, Vec<Value>>,
    remaining: usize,
    failures: Vec<String>,
}

impl Gateway {
    pub(super) fn on_other_request(&mut self, mut request: HostRequest) {
        if self.mode == Mode::Wrap {
            match self.readiness(0, &mut request) {
                Readiness::Ready => self.forward(0, request, None),
                Readiness::Pending => self.waiting.push(request),
                Readiness::Failed(reason) => self.reply_error(
                    &request.id,
                    -32603,
                    &format!("the server is not available: {reason}"),
                ),
            }
            return;
        }
        let params: Value = Message::parse(&request.line)
            .ok()
            .and_then(|message| {
                message
                    .params
                    .and_then(|raw| serde_json::from_str(raw.get()).ok())
            })
            .unwrap_or(Value::Null);
        match request.method.as_str() {
            "resources/list" => self.fan_out(request, "resources", "resources"),
            "resources/templates/list" => self.fan_out(request, "resources", "resourceTemplates"),
            "prompts/list" => self.fan_out(request, "prompts", "prompts"),
            "logging/setLevel" => {
                let line = request.line.clone();
                for (idx, up) in self.upstreams.iter_mut().enumerate() {
                    // `logging/setLevel` is gone from 2026-07-28.
                    if up.phase == super::Phase::Ready
                        && !up.modern
                        && up.capability("logging").is_some()
                    {
                        up.next_id += 1;
                        let id = up.next_id;
                        if let Ok(message) = Message::parse(&line) {
                            up.send(message.with_id(&id.to_string()));
                        }
                        // The answers are not waited for: each server sets its own level.
                        let _ = idx;
                    }
                }
                self.reply(&request.id, &json!({}));
            }
            "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
                let uri = params.get("uri").and_then(Value::as_str).unwrap_or("");
                match self.resource_owner(uri) {
                    Some(idx) => self.route(idx, request, None),
                    None => self.reply_error(
                        &request.id,
                        -32602,
                        &format!("unknown resource `{uri}`; list resources first"),
                    ),
                }
            }
            "prompts/get" => {
                let name = params.get("name").and_then(Value::as_str).unwrap_or("");
                match self.resolve(name) {
                    Some((idx, own)) => {
                        let mut params = params.clone();
                        if let Some(object) = params.as_object_mut() {
                            object.insert("name".to_owned(), Value::String(own));
                        }
                        self.route(idx, request, Some(params));
                    }
                    None => {
                        self.reply_error(&request.id, -32602, &format!("unknown prompt `{name}`"))
                    }
                }
            }
            "completion/complete" => {
                let reference = params.get("ref").cloned().unwrap_or(Value::Null);
                let target = match reference.get("type").and_then(Value::as_str) {
                    Some("ref/prompt") => {
                        let name = reference.get("name").and_then(Value::as_str).unwrap_or("");
                        self.resolve(name).map(|(idx, own)| {
                            let mut params = params.clone();
                            if let Some(object) =
                                params.pointer_mut("/ref").and_then(Value::as_object_mut)
                            {
                                object.insert("name".to_owned(), Value::String(own));
                            }
                            (idx, Some(params))
                        })
                    }
                    Some("ref/resource") => {
                        let uri = reference.get("uri").and_then(Value::as_str).unwrap_or("");
                        self.template_owners
                            .get(uri)
                            .copied()
                            .or_else(|| self.resource_owner(uri))
                            .map(|idx| (idx, None))
                    }
                    _ => None,
                };
                match target {
                    Some((idx, params)) => self.route(idx, request, params),
                    None => self.reply_error(
                        &request.id,
                        -32602,
                        "the completion's `ref` names no known prompt or resource",
                    ),
                }
            }
            other => {
                let text =
                    format!("method `{other}` is not supported by the gateway in gateway mode");
                self.reply_error(&request.id, -32601, &text);
            }
        }
    }

    fn resource_owner(&self, uri: &str) -> Option<usize> {
        if let Some(idx) = self.resource_owners.get(uri) {
            return Some(*idx);
        }
        let with_resources: Vec<usize> = self
            .upstreams
            .iter()
            .enumerate()
            .filter(|(_, up)| up.capability("resources").is_some())
            .map(|(idx, _)| idx)
            .collect();
        match with_resources.as_slice() {
            [only] => Some(*only),
            _ => None,
        }
    }

    fn route(&mut self, idx: usize, mut request: HostRequest, params: Option<Value>) {
        match self.readiness(idx, &mut request) {
            Readiness::Ready => self.forward(idx, request, params),
            Readiness::Pending => self.waiting.push(request),
            Readiness::Failed(reason) => {
                let server = self.upstreams.get(idx).map_or("", |up| up.name.as_str());
                let text = format!("server `{server}` is not available: {reason}");
                self.reply_error(&request.id, -32603, &text);
            }
        }
    }

    /// Forwards a host request to one server under a new id (and new params,
    /// when given); the answer goes back under the host's id.
    pub(super) fn forward(&mut self, idx: usize, request: HostRequest, params: Option<Value>) {
        let id = self.next_up_id(idx);
        let modern = self.upstreams.get(idx).is_some_and(|up| up.modern);
        let line = match params {
            _ if modern => self.modern_line(&request, id, params),
            Some(params) => request.with_id_and_params(&id.to_string(), &params.to_string()),
            None => request.with_id(&id.to_string()),
        };
        self.send_forward(idx, id, request, None, line);
    }

    fn fan_out(&mut self, mut request: HostRequest, capability: &str, key: &'static str) {
        let mut pending = false;
        let mut targets = Vec::new();
        for idx in 0..self.upstreams.len() {
            match self.readiness(idx, &mut request) {
                Readiness::Ready => {
                    if self
                        .upstreams
                        .get(idx)
                        .is_some_and(|up| up.capability(capability).is_some())
                    {
                        targets.push(idx);
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
        if targets.is_empty() {
            self.reply(&request.id, &json!({ key: [] }));
            return;
        }
        self.next_aggregate += 1;
        let aggregate = self.next_aggregate;
        let method = request.method.clone();
        self.aggregates.insert(
            aggregate,
            Aggregate {
                request,
                key,
                items: std::collections::BTreeMap::new(),
                remaining: targets.len(),
                failures: Vec::new(),
            },
        );
        for idx in targets {
            let id = self.request_up(idx, &method, &json!({}));
            self.pending_up.insert(
                (idx, id),
                PendingUp::Fanout {
                    aggregate,
                    method: method.clone(),
                },
            );
        }
    }

    pub(super) fn on_fanout_page(
        &mut self,
        idx: usize,
        _id: u64,
        aggregate: u64,
        method: &str,
        message: &Message<'_>,
    ) {
        let result: Option<Value> = message
            .result
            .and_then(|raw| serde_json::from_str(raw.get()).ok());
        let Some(result) = result else {
            let error = message
                .error
                .map_or("no result", |raw| raw.get())
                .to_owned();
            self.fanout_done(aggregate, idx, Some(error));
            return;
        };
        let server = self
            .upstreams
            .get(idx)
            .map(|up| up.name.clone())
            .unwrap_or_default();
        let Some(state) = self.aggregates.get(&aggregate) else {
            return;
        };
        let key = state.key;
        let mut items = result
            .get(key)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for item in &mut items {
            match key {
                "prompts" => {
                    if let Some(name) = item.get("name").and_then(Value::as_str) {
                        let prefixed = self.prefixed(idx, name);
                        if let Some(object) = item.as_object_mut() {
                            object.insert("name".to_owned(), Value::String(prefixed));
                        }
                    }
                }
                "resources" => {
                    if let Some(uri) = item.get("uri").and_then(Value::as_str) {
                        match self.resource_owners.get(uri) {
                            Some(owner) if *owner != idx => {
                                tracing::warn!(server.id = %server, "resource `{uri}` is listed by two servers; the first keeps it");
                            }
                            _ => {
                                self.resource_owners.insert(uri.to_owned(), idx);
                            }
                        }
                    }
                }
                _ => {
                    if let Some(template) = item.get("uriTemplate").and_then(Value::as_str) {
                        self.template_owners
                            .entry(template.to_owned())
                            .or_insert(idx);
                    }
                }
            }
        }
        if let Some(state) = self.aggregates.get_mut(&aggregate) {
            state.items.entry(idx).or_default().extend(items);
        }
        if let Some(cursor) = result.get("nextCursor").and_then(Value::as_str) {
            let params = json!({"cursor": cursor});
            let id = self.request_up(idx, method, &params);
            self.pending_up.insert(
                (idx, id),
                PendingUp::Fanout {
                    aggregate,
                    method: method.to_owned(),
                },
            );
            return;
        }
        self.fanout_done(aggregate, idx, None);
    }

    /// One server finished its part of a merged list (or failed it).
    pub(super) fn fanout_done(&mut self, aggregate: u64, idx: usize, failure: Option<String>) {
        let server = self
            .upstreams
            .get(idx)
            .map(|up| up.name.clone())
            .unwrap_or_default();
        let Some(state) = self.aggregates.get_mut(&aggregate) else {
            return;
        };
        if let Some(failure) = failure {
            tracing::warn!(server.id = %server, "{} failed: {failure}", state.request.method);
            state.failures.push(server);
        }
        state.remaining = state.remaining.saturating_sub(1);
        if state.remaining > 0 {
            return;
        }
        let Some(state) = self.aggregates.remove(&aggregate) else {
            return;
        };
        let items: Vec<Value> = state.items.into_values().flatten().collect();
        self.reply(&state.request.id, &json!({ state.key: items }));
    }
}
