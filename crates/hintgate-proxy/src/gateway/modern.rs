//! The 2026-07-28 ("modern") era on the host side.
//!
//! A modern host sends no `initialize`: every request carries its protocol
//! version and capabilities in `_meta`, it may first ask `server/discover`,
//! every result must say its `resultType`, list results say how long they
//! may be cached, and a server cannot send it requests. So the gateway:
//!
//! - starts its servers (always in the legacy era upstream) on the first
//!   modern request, with the capabilities that request declares;
//! - answers `server/discover` itself, once the servers are up;
//! - adds `resultType: "complete"` (and `ttlMs: 0`, `cacheScope: "private"`
//!   on cacheable results) to what it passes back;
//! - asks a person by returning an input-required result whose
//!   `requestState` is sealed ([`crate::seal`]) and single-use, and runs the
//!   call when the host retries with an approval;
//! - answers a server's own requests (elicitation, sampling, roots) with an
//!   error, since they cannot reach a modern host through this gateway yet;
//! - sends change notifications only on a `subscriptions/listen` stream.

use serde_json::{Map, Value, json};

use super::{Gateway, HostRequest, LEGACY_VERSIONS};
use crate::frame::Message;

/// The modern protocol version the gateway speaks.
pub const MODERN_VERSION: &str = "2026-07-28";

/// The `_meta` keys of a modern request.
const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const META_CLIENT: &str = "io.modelcontextprotocol/clientInfo";
const META_SUBSCRIPTION: &str = "io.modelcontextprotocol/subscriptionId";

/// The key of the gateway's own question in an input-required result.
pub const INPUT_KEY: &str = "hintgate/approve";

/// Methods whose results a modern host may cache: they say for how long.
const CACHEABLE: [&str; 6] = [
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "server/discover",
];

/// Whether a retried call carries the answer to the gateway's own question.
pub(super) fn carries_our_answer(params: &Value) -> bool {
    params
        .get("inputResponses")
        .and_then(Value::as_object)
        .is_some_and(|responses| responses.contains_key(INPUT_KEY))
        || params
            .get("requestState")
            .and_then(Value::as_str)
            .is_some_and(crate::seal::is_ours)
}

/// Removes the gateway's own answer and state from a call's params.
pub(super) fn strip_our_answer(params: &mut Map<String, Value>) {
    if let Some(responses) = params
        .get_mut("inputResponses")
        .and_then(Value::as_object_mut)
    {
        responses.remove(INPUT_KEY);
        if responses.is_empty() {
            params.remove("inputResponses");
        }
    }
    if params
        .get("requestState")
        .and_then(Value::as_str)
        .is_some_and(crate::seal::is_ours)
    {
        params.remove("requestState");
    }
}

/// The `_meta` of a request's params, when the request is modern.
pub(super) fn modern_meta(request: &HostRequest) -> Option<Map<String, Value>> {
    let raw = request.spans.params(&request.line)?;
    // Most requests of a legacy host have no modern `_meta`: skip the parse.
    if !raw.contains(META_VERSION) {
        return None;
    }
    let params: Value = serde_json::from_str(raw).ok()?;
    let meta = params.get("_meta")?.as_object()?;
    meta.contains_key(META_VERSION).then(|| meta.clone())
}

impl Gateway {
    /// The `_meta` every request to a 2026-07-28 server carries: the
    /// version, and the host's capabilities and identity.
    pub(super) fn modern_meta_for_upstream(&self) -> Value {
        let init = self.host.init.clone().unwrap_or_else(|| json!({}));
        json!({
            META_VERSION: MODERN_VERSION,
            META_CAPABILITIES: init.get("capabilities").cloned().unwrap_or_else(|| json!({})),
            META_CLIENT: init.get("clientInfo").cloned().unwrap_or_else(|| json!({"name": "hintgate", "version": env!("CARGO_PKG_VERSION")})),
        })
    }

    /// `params` with the modern `_meta` keys added (the request's own
    /// `_meta` entries, such as a progress token, are kept).
    pub(super) fn with_modern_meta(&self, params: Value) -> Value {
        let mut params = match params {
            Value::Object(object) => object,
            _ => Map::new(),
        };
        let meta = params
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let (Some(meta), Value::Object(ours)) =
            (meta.as_object_mut(), self.modern_meta_for_upstream())
        {
            meta.extend(ours);
        }
        Value::Object(params)
    }

    /// The answer to the era probe: a 2026-07-28 server is ready at once
    /// (and asked for change notifications); anything else gets the legacy
    /// handshake.
    /// The probe was answered after `initialize` went out: a modern answer
    /// wins while the `initialize` is still unanswered (a 2026-07-28 server
    /// refuses it); otherwise the answer comes too late and is dropped.
    pub(super) fn on_late_discovered(&mut self, idx: usize, message: &Message<'_>) {
        let modern = message
            .result
            .and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok())
            .is_some_and(|result| {
                result
                    .get("supportedVersions")
                    .and_then(Value::as_array)
                    .is_some_and(|versions| versions.iter().any(|v| v == MODERN_VERSION))
            });
        let initializing = self
            .upstreams
            .get(idx)
            .is_some_and(|up| up.phase == super::Phase::Initializing);
        if !modern || !initializing {
            return;
        }
        let initialize: Vec<(usize, u64)> = self
            .pending_up
            .iter()
            .filter(|((at, _), pending)| {
                *at == idx && matches!(pending, super::PendingUp::Initialize { .. })
            })
            .map(|(key, _)| *key)
            .collect();
        for key in initialize {
            if let Some(super::PendingUp::Initialize { deadline }) = self.pending_up.remove(&key) {
                self.deadlines.remove(&deadline);
            }
        }
        tracing::debug!("a late answer to `server/discover`: a 2026-07-28 server after all");
        self.on_discovered(idx, message);
    }

    pub(super) fn on_discovered(&mut self, idx: usize, message: &Message<'_>) {
        let result: Option<Value> = message
            .result
            .and_then(|raw| serde_json::from_str(raw.get()).ok());
        let modern = result.as_ref().is_some_and(|result| {
            result
                .get("supportedVersions")
                .and_then(Value::as_array)
                .is_some_and(|versions| versions.iter().any(|v| v == MODERN_VERSION))
        });
        let Some(result) = result.filter(|_| modern) else {
            self.send_initialize(idx);
            return;
        };
        let Some(up) = self.upstreams.get_mut(idx) else {
            return;
        };
        let server_info = result
            .pointer("/_meta/io.modelcontextprotocol~1serverInfo")
            .or_else(|| result.get("serverInfo"))
            .cloned()
            .unwrap_or(Value::Null);
        let mut info = json!({
            "protocolVersion": MODERN_VERSION,
            "capabilities": result.get("capabilities").cloned().unwrap_or_else(|| json!({})),
            "serverInfo": server_info,
        });
        if let (Some(object), Some(instructions)) =
            (info.as_object_mut(), result.get("instructions"))
        {
            object.insert("instructions".to_owned(), instructions.clone());
        }
        tracing::info!(server.id = %up.name, "speaks 2026-07-28");
        up.info = Some(info);
        up.modern = true;
        up.phase = super::Phase::Ready;
        // Change notifications come only on a listen stream.
        let listen = json!({"notifications": {"toolsListChanged": true, "promptsListChanged": true, "resourcesListChanged": true}});
        let id = self.request_up(idx, "subscriptions/listen", &listen);
        self.pending_up.insert((idx, id), super::PendingUp::Listen);
        if self.pin_instructions(idx) {
            self.list_tools(idx);
        }
        self.retry_waiting();
    }

    /// A host request for a 2026-07-28 server: under a new id, with the
    /// modern `_meta` added to its params (or to `params`, when given).
    pub(super) fn modern_line(
        &self,
        request: &HostRequest,
        id: u64,
        params: Option<Value>,
    ) -> String {
        let has_params = request.spans.params.is_some();
        let params = params.unwrap_or_else(|| match request.params() {
            Value::Null => json!({}),
            other => other,
        });
        let params = self.with_modern_meta(params);
        if has_params {
            request.with_id_and_params(&id.to_string(), &params.to_string())
        } else {
            crate::frame::request(&id.to_string(), &request.method, &params)
        }
    }

    /// Starts a modern session from a request's `_meta`. Returns false (and
    /// answers the request) when the version is one the gateway does not speak.
    pub(super) fn begin_modern(
        &mut self,
        request: &HostRequest,
        meta: &Map<String, Value>,
    ) -> bool {
        let version = meta.get(META_VERSION).and_then(Value::as_str).unwrap_or("");
        if version != MODERN_VERSION {
            let mut supported = vec![MODERN_VERSION];
            supported.extend(LEGACY_VERSIONS);
            self.send_host(format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":{},\"error\":{{\"code\":-32022,\"message\":\"unsupported protocol version\",\"data\":{}}}}}",
                request.id,
                json!({"supported": supported, "requested": version})
            ));
            return false;
        }
        if self.host.init.is_some() {
            return true;
        }
        let capabilities = meta
            .get(META_CAPABILITIES)
            .cloned()
            .unwrap_or_else(|| json!({}));
        self.host.elicitation = capabilities.get("elicitation").is_some_and(|caps| {
            caps.as_object()
                .is_some_and(|caps| caps.is_empty() || caps.contains_key("form"))
        });
        self.host.modern = true;
        self.host.protocol_version = MODERN_VERSION.to_owned();
        // The servers upstream speak the legacy era; they get the host's
        // capabilities and identity in an ordinary `initialize`.
        self.host.init = Some(json!({
            "protocolVersion": LEGACY_VERSIONS.first().copied().unwrap_or("2025-11-25"),
            "capabilities": capabilities,
            "clientInfo": meta.get(META_CLIENT).cloned().unwrap_or_else(|| json!({"name": "modern-host", "version": "0"})),
        }));
        for idx in 0..self.upstreams.len() {
            if matches!(
                self.upstreams.get(idx).map(|up| &up.phase),
                Some(super::Phase::Stopped)
            ) {
                self.start(idx);
            }
        }
        true
    }

    /// `server/discover`: answered once every server is up.
    pub(super) fn on_discover(&mut self, request: HostRequest) {
        let Some(meta) = modern_meta(&request) else {
            self.reply_error(
                &request.id,
                -32602,
                "`server/discover` needs `_meta` with the protocol version and client capabilities",
            );
            return;
        };
        if !self.begin_modern(&request, &meta) {
            return;
        }
        self.host.discover_pending = Some(request);
        self.finish_initialize();
    }

    /// The `server/discover` result.
    pub(super) fn discover_result(&self) -> Value {
        let init = self.initialize_result();
        let mut supported = vec![MODERN_VERSION];
        supported.extend(LEGACY_VERSIONS);
        let mut result = json!({
            "supportedVersions": supported,
            "capabilities": init.get("capabilities").cloned().unwrap_or_else(|| json!({})),
            "serverInfo": init.get("serverInfo").cloned().unwrap_or(Value::Null),
        });
        if let (Some(object), Some(instructions)) =
            (result.as_object_mut(), init.get("instructions"))
        {
            object.insert("instructions".to_owned(), instructions.clone());
        }
        result
    }

    /// Adds what a modern host requires of a result the gateway composed.
    pub(super) fn modernize(&self, method: &str, result: &mut Value) {
        if !self.host.modern {
            return;
        }
        if let Some(object) = result.as_object_mut() {
            object
                .entry("resultType")
                .or_insert_with(|| json!("complete"));
            if CACHEABLE.contains(&method) {
                object.entry("ttlMs").or_insert_with(|| json!(0));
                object
                    .entry("cacheScope")
                    .or_insert_with(|| json!("private"));
            }
        }
    }

    /// A server's response passed to the host under the host's id, with
    /// what a modern host requires added to a successful result.
    pub(super) fn host_response(
        &self,
        message: &Message<'_>,
        host_id: &str,
        method: &str,
    ) -> String {
        if !self.host.modern {
            // A 2026-07-28 server may answer with an input-required result;
            // a legacy host could not retry it, so it is told plainly.
            let asks_input = message.result.is_some_and(|raw| {
                raw.get().contains("input_required")
                    && serde_json::from_str::<Value>(raw.get())
                        .ok()
                        .is_some_and(|result| {
                            result.get("resultType").and_then(Value::as_str)
                                == Some("input_required")
                        })
            });
            if asks_input {
                let text = "the server asked for more input (a 2026-07-28 input-required result), which this gateway cannot relay to a host of the legacy era yet";
                return if method == "tools/call" {
                    crate::frame::response(host_id, &super::tools::error_result(text))
                } else {
                    crate::frame::error_response(host_id, -32603, text)
                };
            }
            return message.with_id(host_id);
        }
        if message.result.is_none() {
            return message.with_id(host_id);
        }
        let mut fields = String::from("\"resultType\":\"complete\"");
        if CACHEABLE.contains(&method) {
            fields.push_str(",\"ttlMs\":0,\"cacheScope\":\"private\"");
        }
        message.with_id_and_result_fields(host_id, &fields)
    }

    /// `subscriptions/listen`: the stream change notifications travel on.
    pub(super) fn on_listen(&mut self, request: HostRequest) {
        let subscription = request.id.clone();
        self.send_host(crate::frame::notification(
            "notifications/subscriptions/acknowledged",
            &json!({"_meta": {META_SUBSCRIPTION: serde_json::from_str::<Value>(&subscription).unwrap_or(Value::Null)}}),
        ));
        self.host.listen = Some(subscription);
    }

    /// Sends a change notification to a modern host on its listen stream.
    pub(super) fn notify_modern(&self, method: &str) {
        if let Some(subscription) = &self.host.listen {
            let id: Value = serde_json::from_str(subscription).unwrap_or(Value::Null);
            self.send_host(crate::frame::notification(
                method,
                &json!({"_meta": {META_SUBSCRIPTION: id}}),
            ));
        }
    }
}
