//! The 2026-07-28 ("modern") era, on both sides.
//!
//! A modern host sends no `initialize`: every request carries its protocol
//! version and capabilities in `_meta`, it may first ask `server/discover`,
//! every result must say its `resultType`, list results say how long they
//! may be cached, and a server cannot send it requests. So the gateway:
//!
//! - starts its servers on the first modern request, with the capabilities
//!   that request declares;
//! - answers `server/discover` itself, once the servers are up;
//! - adds `resultType: "complete"` (and `ttlMs: 0`, `cacheScope: "private"`
//!   on cacheable results) to what it passes back;
//! - asks a person by returning an input-required result whose
//!   `requestState` is sealed ([`crate::seal`]) and single-use, and runs the
//!   call when the host retries with an approval (see `ask`);
//! - sends change notifications only on a `subscriptions/listen` stream.
//!
//! Upstream, a server that answers the era probe with 2026-07-28 among its
//! versions is spoken to in that era: every request carries the modern
//! `_meta`, and change notifications come on a listen stream.
//!
//! What the servers are told of the host, the `_meta` keys and the
//! result shapes of the era are in `era`, which every part may import.

use serde_json::{Map, Value, json};

use super::Gateway;
use super::era::{
    CACHEABLE, META_CAPABILITIES, META_CLIENT, META_LOG_LEVEL, META_SUBSCRIPTION, META_VERSION,
    log_rank, modern_meta, supports_modern,
};
use super::inflight::InFlight;
use super::lookup::Lookup;
use super::outbox::Outbox;
use super::request::{HostRequest, ServerIdx, SessionId};
use super::session::Sessions;
use super::session::{Era, HostSession, declares_form_elicitation};
use super::upstreams::Phase;
use super::upstreams::Upstreams;
use crate::frame::{self, Message};
use crate::json::members;
use crate::versions::{LEGACY_VERSIONS, MODERN_VERSION};

// === impl Gateway ===

impl Gateway {
    /// The answer to the era probe: a 2026-07-28 server is ready at once
    /// (and asked for change notifications); anything else gets the legacy
    /// handshake.
    pub(super) fn on_discovered(&mut self, idx: ServerIdx, message: &Message<'_>) {
        let result: Option<Value> = message
            .result
            .and_then(|raw| serde_json::from_str(raw).ok());
        if !supports_modern(result.as_ref()) {
            self.at_servers(|servers| servers.send_initialize(idx));
            return;
        }
        let Some(result) = result else {
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
        // Change notifications come only on a listen stream. It stays open
        // for the server's life: its answers are not waited for, so it is
        // not in the in-flight table.
        let id = up.next_id();
        let generation = up.generation();
        let listen = self.declared.with_meta(json!({"notifications": {"toolsListChanged": true, "promptsListChanged": true, "resourcesListChanged": true}}));
        self.outbox.upstream(
            idx,
            generation,
            frame::request(&id.to_string(), "subscriptions/listen", &listen),
            None,
        );
        self.at_servers(|servers| servers.server_ready(idx));
    }

    /// The probe was answered after `initialize` went out: a modern answer
    /// wins while the `initialize` is still unanswered (a 2026-07-28 server
    /// refuses it); otherwise the answer comes too late and is dropped.
    pub(super) fn on_late_discovered(&mut self, idx: ServerIdx, message: &Message<'_>) {
        let result: Option<Value> = message
            .result
            .and_then(|raw| serde_json::from_str(raw).ok());
        let starting = self
            .upstreams
            .get(idx)
            .is_some_and(|up| up.phase == Phase::Starting);
        if !supports_modern(result.as_ref()) || !starting {
            return;
        }
        let initialize = self.inflight.up_ids(idx, |purpose| {
            matches!(purpose, super::inflight::UpPurpose::Initialize)
        });
        for id in initialize {
            self.inflight.take_up(idx, id);
        }
        tracing::debug!("a late answer to `server/discover`: a 2026-07-28 server after all");
        self.on_discovered(idx, message);
    }

    /// Starts a modern session from a request's `_meta`. Returns false (and
    /// answers the request) when the version is one the gateway does not speak.
    pub(super) fn begin_modern(
        &mut self,
        request: &HostRequest,
        meta: &Map<String, Value>,
    ) -> bool {
        let session = request.session;
        let version = meta.get(META_VERSION).and_then(Value::as_str).unwrap_or("");
        if version != MODERN_VERSION {
            let mut supported = vec![MODERN_VERSION];
            supported.extend(LEGACY_VERSIONS);
            let line = format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":{},\"error\":{{\"code\":-32022,\"message\":\"unsupported protocol version\",\"data\":{}}}}}",
                request.id(),
                json!({"supported": supported, "requested": version})
            );
            self.outbox.host(session, line);
            return false;
        }
        let Some(host) = self.sessions.get_mut(&session) else {
            return false;
        };
        if host.started() {
            return true;
        }
        let capabilities = meta
            .get(META_CAPABILITIES)
            .cloned()
            .unwrap_or_else(|| json!({}));
        host.elicitation = declares_form_elicitation(Some(&capabilities));
        host.era = Era::Modern;
        // The servers get the host's capabilities and identity.
        let init = json!({
            "protocolVersion": LEGACY_VERSIONS.first().copied().unwrap_or("2025-11-25"),
            "capabilities": capabilities,
            "clientInfo": meta.get(META_CLIENT).cloned().unwrap_or_else(|| json!({"name": "modern-host", "version": "0"})),
        });
        host.init = Some(init.clone());
        self.start_servers(init);
        true
    }

    /// `server/discover`: answered once every server is up.
    pub(super) fn on_discover(&mut self, request: HostRequest) {
        let Some(meta) = modern_meta(&request) else {
            self.outbox.error(
                request.session,
                request.id(),
                -32602,
                "`server/discover` needs `_meta` with the protocol version and client capabilities",
            );
            return;
        };
        if !self.begin_modern(&request, &meta) {
            return;
        }
        if let Some(host) = self.sessions.get_mut(&request.session) {
            host.discover_pending = Some(request);
        }
        super::routing::finish_initialize(
            &mut self.outbox,
            &mut self.sessions,
            &self.upstreams,
            &self.mode,
        );
    }

    /// `subscriptions/listen`: the stream change notifications travel on.
    ///
    /// A host has one listen stream: a new one takes the place of the one
    /// before, and the resource subscriptions that one held end. The
    /// resources in `resourceSubscriptions` are held for the session
    /// (`Gateway::listen_to_resources`), and the acknowledgement names
    /// those honoured.
    pub(super) fn on_listen(&mut self, request: HostRequest) {
        let session = request.session;
        let subscription = request.id().to_owned();
        let replaced = self
            .sessions
            .get_mut(&session)
            .and_then(|host| host.listen.take());
        if replaced.is_some() {
            super::subscriptions::end_subscriptions(
                &mut self.subscriptions,
                &mut self.inflight,
                &mut self.outbox,
                &mut self.upstreams,
                self.limits,
                session,
            );
        }
        let asked = request
            .params()
            .pointer("/notifications/resourceSubscriptions")
            .map(|uris| {
                uris.as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .take(super::subscriptions::PER_SESSION)
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            });
        let mut ack = json!({"_meta": {META_SUBSCRIPTION: serde_json::from_str::<Value>(&subscription).unwrap_or(Value::Null)}});
        if let Some(uris) = asked {
            let honoured = self.listen_to_resources(session, &uris);
            if let Some(object) = ack.as_object_mut() {
                object.insert(
                    "notifications".to_owned(),
                    json!({"resourceSubscriptions": honoured}),
                );
            }
        }
        self.outbox.host(
            session,
            frame::notification("notifications/subscriptions/acknowledged", &ack),
        );
        if let Some(host) = self.sessions.get_mut(&session) {
            host.listen = Some(subscription);
        }
    }
}

// === impl Lookup ===

impl Lookup<'_> {
    /// A server's response passed to the host under the host's id, with
    /// what a modern host requires added to a successful result, and the
    /// questions of an input-required result marked as the server's.
    pub(super) fn host_response(
        &self,
        idx: ServerIdx,
        session: SessionId,
        message: &Message<'_>,
        host_id: &str,
        method: &str,
    ) -> String {
        let modern = self.sessions.get(&session).is_some_and(HostSession::modern);
        if !modern {
            // A 2026-07-28 server may answer with an input-required result;
            // a legacy host could not retry it, so it is told plainly.
            let asks_input = message.result.is_some_and(|raw| {
                super::relay::may_ask_input(raw)
                    && serde_json::from_str::<Value>(raw)
                        .ok()
                        .is_some_and(|result| {
                            result.get("resultType").and_then(Value::as_str)
                                == Some("input_required")
                        })
            });
            if asks_input {
                let text = "the server asked for more input (a 2026-07-28 input-required result), which this gateway cannot relay to a host of the legacy era for this request";
                return if method == "tools/call" {
                    frame::response(host_id, &super::call::error_result(text))
                } else {
                    frame::error_response(host_id, -32603, text)
                };
            }
            return message.with_id(host_id);
        }
        let Some(raw) = message.result else {
            return message.with_id(host_id);
        };
        // A server's questions reach the person marked as the server's.
        match self.marked_input_required(idx, raw) {
            None => {}
            Some(Ok(result)) => return frame::response(host_id, &result),
            Some(Err(why)) => {
                tracing::warn!(server.id = %self.upstreams.name(idx), "{why}");
                let text = format!("hintgate did not pass on the server's question: {why}");
                return if method == "tools/call" {
                    frame::response(host_id, &super::call::error_result(&text))
                } else {
                    frame::error_response(host_id, -32603, &text)
                };
            }
        }
        // Only what the result does not say already: a key added twice
        // would be read two ways.
        let present = message
            .result
            .and_then(|raw| members(raw).ok())
            .unwrap_or_default();
        let has = |key: &str| present.iter().any(|member| member.key == key);
        let mut fields = Vec::new();
        if !has("resultType") {
            fields.push("\"resultType\":\"complete\"");
        }
        if CACHEABLE.contains(&method) {
            if !has("ttlMs") {
                fields.push("\"ttlMs\":0");
            }
            if !has("cacheScope") {
                fields.push("\"cacheScope\":\"private\"");
            }
        }
        if fields.is_empty() {
            return message.with_id(host_id);
        }
        message.with_id_and_result_fields(host_id, &fields.join(","))
    }
}

/// A 2026-07-28 server's log message (`notifications/message`). Such a
/// server logs only for a request that named a level, so the message
/// goes to the sessions with a request in flight on it that asked for
/// its level or a lower one: a legacy host by its `logging/setLevel`, a
/// 2026-07-28 host by its request's own `_meta`. A message of a level
/// MCP does not name, or that no such request asked for, is dropped.
pub(super) fn log_to_hosts(
    inflight: &InFlight,
    sessions: &Sessions,
    upstreams: &Upstreams,
    idx: ServerIdx,
    message: &Message<'_>,
    outbox: &mut Outbox,
) {
    let server = upstreams.name(idx);
    let level = message
        .params
        .and_then(|raw| serde_json::from_str::<Value>(raw).ok())
        .and_then(|params| {
            params
                .get("level")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
    let Some(rank) = level.as_deref().and_then(log_rank) else {
        tracing::debug!(server.id = %server, "a log message without a level MCP names is dropped");
        return;
    };
    let mut to: Vec<SessionId> = inflight
        .requests_on(idx)
        .filter(|request| {
            let Some(host) = sessions.get(&request.session) else {
                return false;
            };
            let asked = if host.modern() {
                modern_meta(request).and_then(|meta| {
                    meta.get(META_LOG_LEVEL)
                        .and_then(Value::as_str)
                        .and_then(log_rank)
                })
            } else {
                host.log_level.as_deref().and_then(log_rank)
            };
            asked.is_some_and(|asked| asked <= rank)
        })
        .map(|request| request.session)
        .collect();
    to.sort_unstable();
    to.dedup();
    if to.is_empty() {
        tracing::debug!(server.id = %server, "a log message no request in flight asked for is dropped");
    }
    for session in to {
        outbox.host_note(session, message.line().to_owned(), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_modern_servers_log_message_reaches_only_a_session_that_asked_for_its_level() {
        use crate::gateway::request::Method;
        use crate::gateway::session::{Era, HostSession};
        let mut sessions = Sessions::default();
        for (n, level) in [(0, Some("warning")), (1, None), (2, Some("debug"))] {
            let (out, _) = tokio::sync::mpsc::unbounded_channel();
            let mut host = HostSession::new(out, Default::default(), Default::default());
            host.era = Era::Legacy("2025-11-25".to_owned());
            host.log_level = level.map(str::to_owned);
            sessions.insert(SessionId(n), host);
        }
        let mut inflight = InFlight::default();
        // Sessions 0 and 1 wait on server 0; session 2 on server 1 only.
        for (server, id, session) in [(0, 1, 0), (0, 2, 1), (1, 3, 2)] {
            let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"resources/read"}}"#);
            let message = Message::parse(&line).unwrap();
            let request = HostRequest::new(
                SessionId(session),
                line.clone(),
                message.spans(),
                Method::of(message.method()),
            );
            inflight.wait_up(
                server,
                id,
                crate::gateway::inflight::UpPurpose::Forward(Box::new(request)),
                std::time::Duration::from_secs(60),
            );
        }
        let (config, _) = hintgate_policy::config::parse_str(
            "[servers.a]\ncommand = \"x\"\n[servers.b]\ncommand = \"x\"\n",
        );
        let policy = hintgate_policy::decide::Policy::new(config.unwrap());
        let configs = policy.config().servers.values().cloned().collect();
        let upstreams = Upstreams::new(configs, crate::gateway::Mode::Gateway, "__".to_owned());
        let log = |level: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"level":"{level}","data":"x"}}}}"#
            )
        };
        let mut outbox = Outbox::new();
        let error = log("error");
        log_to_hosts(
            &inflight,
            &sessions,
            &upstreams,
            0,
            &Message::parse(&error).unwrap(),
            &mut outbox,
        );
        let sent = outbox.take();
        assert!(
            matches!(&sent[..], [crate::gateway::outbox::Outgoing::HostNote(SessionId(0), line, None)] if *line == error),
            "{sent:?}"
        );
        // Below what anyone waiting on server 0 asked for, or a level MCP
        // does not name: dropped.
        for level in ["info", "loud"] {
            let line = log(level);
            log_to_hosts(
                &inflight,
                &sessions,
                &upstreams,
                0,
                &Message::parse(&line).unwrap(),
                &mut outbox,
            );
            assert!(outbox.is_empty(), "{level}");
        }
    }
}
