//! The servers' lives as the gateway runs them: a start (its install
//! first where one is needed, then its link, identity, pins and era), the
//! era probe and the legacy handshake, the tool list read page by page,
//! and a server that fails, times out, or answers what cannot be used,
//! with what waited for it answered, retried or failed.
//!
//! Each step is a method of [`Servers`], a view of the parts a server's
//! life touches: [`Upstreams`] and [`Upstream`] hold the servers, the
//! catalog their tools and pins, the in-flight table what waits for their
//! answers, `subscriptions` the hosts' resource subscriptions made again on
//! a new start. What waits for a server to be ready (`parked`), the
//! pipeline and the merged lists are not in the view: a step leaves what
//! they must do ([`Then`]: fail or answer a call, tell a person's prompt
//! there is no dry run, finish a merged list, wake what waits) to the
//! gateway, which does it, in order, as soon as the step returns.

use std::sync::Arc;
use std::time::Duration;

use hintgate_policy::config::{ServerConfig, Transport};
use hintgate_policy::tool::SandboxProof;
use serde_json::{Value, json};

use hintgate_policy::decide::Policy;
use hintgate_store::Store;

use super::catalog::{Catalog, Listing};
use super::era::Declared;
use super::inflight::{InFlight, UpPurpose};
use super::journal::unix_now;
use super::outbox::{Outbox, Then};
use super::request::ServerIdx;
use super::retry::Failure;
use super::routing::Routing;
use super::session::Sessions;
use super::subscriptions::Subscriptions;
use super::upstreams::{
    PROBE_TIMEOUT, Phase, Readiness, Started, Target, Upstream, Upstreams, started, too_many_pages,
};
use super::watch::StoreWatcher;
use super::{Gateway, Limits};
use crate::event::EventSender;
use crate::frame::{self, Message};
use crate::metrics::Metrics;
use crate::upstream::Connector;
/// The servers' part, as the gateway lends it for one step: the servers
/// and their links, their tools and pins, what waits for their answers,
/// the subscriptions made again on a new start, and what it reads to start
/// them (the policy, the limits, what hosts declared, the store).
///
/// A step here can start, stop and list a server and send it the gateway's
/// own requests (through the turn's outbox); it cannot run the pipeline,
/// end a call on record, answer a merged list or wake what waits for a
/// server. What it leaves for those is in `then`, which the gateway
/// applies, in order, as soon as the step returns ([`Then`]).
pub(crate) struct Servers<'a> {
    pub(super) policy: &'a Policy,
    pub(super) limits: &'a Limits,
    pub(super) declared: &'a Declared,
    pub(super) store: &'a Option<Arc<dyn Store>>,
    pub(super) events: &'a EventSender,
    pub(super) metrics: &'a Option<Arc<Metrics>>,
    pub(super) connector: &'a Arc<dyn Connector>,
    /// Read for the era of a call's host, when a call's answer is unusable.
    pub(super) sessions: &'a Sessions,
    pub(super) upstreams: &'a mut Upstreams,
    pub(super) catalog: &'a mut Catalog,
    pub(super) inflight: &'a mut InFlight,
    pub(super) subscriptions: &'a mut Subscriptions,
    /// What the merged lists remember of a server's start, forgotten when
    /// it starts again.
    pub(super) routing: &'a mut Routing,
    pub(super) watcher: &'a mut Option<StoreWatcher>,
    pub(super) outbox: &'a mut Outbox,
    /// What the step left the gateway to do, in order.
    pub(super) then: Vec<Then>,
}

// === impl Gateway ===

impl Gateway {
    /// Runs a step of the servers' part, then does what it left to do, in
    /// order.
    pub(super) fn at_servers<R>(&mut self, step: impl FnOnce(&mut Servers<'_>) -> R) -> R {
        let mut servers = Servers {
            policy: &self.policy,
            limits: &self.limits,
            declared: &self.declared,
            store: &self.store,
            events: &self.events,
            metrics: &self.metrics,
            connector: &self.connector,
            sessions: &self.sessions,
            upstreams: &mut self.upstreams,
            catalog: &mut self.catalog,
            inflight: &mut self.inflight,
            subscriptions: &mut self.subscriptions,
            routing: &mut self.routing,
            watcher: &mut self.watcher,
            outbox: &mut self.outbox,
            then: Vec::new(),
        };
        let result = step(&mut servers);
        for then in servers.then {
            self.then(then);
        }
        result
    }
}

// === impl Servers ===

impl Servers<'_> {
    /// Sends a request of the gateway's own to a server, waiting `timeout`
    /// for its answer; returns its id.
    pub(super) fn request_up(
        &mut self,
        idx: ServerIdx,
        method: &str,
        params: &Value,
        purpose: UpPurpose,
        timeout: Duration,
    ) -> u64 {
        let modern = self.upstreams.get(idx).is_some_and(|up| up.modern);
        let params = if modern {
            self.declared.with_meta(params.clone())
        } else {
            params.clone()
        };
        let Some(up) = self.upstreams.get_mut(idx) else {
            return 0;
        };
        let id = up.next_id();
        let generation = up.generation;
        self.inflight.wait_up(idx, id, purpose, timeout);
        self.outbox.upstream(
            idx,
            generation,
            frame::request(&id.to_string(), method, &params),
            None,
        );
        id
    }

    /// Whether server `idx` can take a request now; starts it when it is
    /// stopped, or failed before (once per request: `restarted` remembers).
    pub(super) fn readiness(
        &mut self,
        idx: ServerIdx,
        restarted: &mut Option<ServerIdx>,
    ) -> Readiness {
        match started(self.upstreams, idx, restarted) {
            Started::Ready => Readiness::Ready,
            Started::Starting => Readiness::Pending,
            Started::Failed(reason) => Readiness::Failed(reason),
            Started::Start => {
                self.start(idx);
                // A start can fail at once (the program does not exist, a
                // sandbox cannot be enforced): then no event will ever wake
                // the request, so the failure is its answer now.
                match self.upstreams.get(idx).map(|up| &up.phase) {
                    Some(Phase::Failed(reason)) => Readiness::Failed(reason.clone()),
                    Some(Phase::Ready) => Readiness::Ready,
                    _ => Readiness::Pending,
                }
            }
        }
    }

    /// Starts a server: its install first where one is needed, else it
    /// connects, and its identity, pins and era follow.
    pub(super) fn start(&mut self, idx: ServerIdx) {
        let connector = Arc::clone(self.connector);
        let Some(up) = self.upstreams.get_mut(idx) else {
            return;
        };
        if up.install_first(idx, &*connector, self.events, self.limits.call_timeout) {
            return;
        }
        // What it listed before is not what this start will list.
        self.routing.forget(idx);
        let Some(up) = self.upstreams.get_mut(idx) else {
            return;
        };
        let target = Target {
            server: idx,
            max_line: self.limits.max_line,
            max_depth: self.limits.max_depth,
            events: self.events,
            metrics: self.metrics.as_deref(),
        };
        if let Some(sandbox) = up.connect(&*connector, &target) {
            self.open_started(idx, sandbox);
        }
    }

    /// The install before a server's start ended: the start goes on, or
    /// fails with why (the command named), as the server's calls are told.
    pub(super) fn prepared(&mut self, idx: ServerIdx, result: Result<String, String>) {
        let Some(up) = self.upstreams.get_mut(idx) else {
            return;
        };
        up.installing = None;
        match result {
            Ok(installed) => {
                tracing::info!(server.id = %up.name, "{installed}");
                up.prepared = true;
                self.start(idx);
            }
            Err(reason) => self.upstream_failed(idx, reason),
        }
    }

    /// A server just connected: its identity read, its part of the catalog
    /// opened (its pins; none for a read-only instance), its era probed,
    /// and its read-only instance started beside it.
    fn open_started(&mut self, idx: ServerIdx, sandbox: SandboxProof) {
        let Some(up) = self.upstreams.get_mut(idx) else {
            return;
        };
        let (identity, resolved) = identity_of(&up.config);
        let name = up.name.clone();
        tracing::info!(server.id = %name, identity = %identity, "identity");
        let capabilities = self.declared.capabilities();
        let key = self.store.as_ref().map(|store| {
            hintgate_store::server_key(&up.config, &resolved, &capabilities, store.salt())
        });
        let read_only = up.read_only;
        if up.read_only_of.is_some() {
            // INVARIANT: a read-only instance reads and writes no pins: the
            // definitions decided on are the full instance's.
            up.identity_key = key;
            self.catalog.open_read_only(idx, identity, sandbox);
        } else {
            if let Err(err) = self.catalog.open(idx, &name, key, identity, sandbox) {
                self.upstream_failed(idx, format!("the pin store failed: {err}"));
                return;
            }
            super::watch_keys(self.store, self.catalog, self.events, self.watcher);
        }
        let timeout = PROBE_TIMEOUT.min(self.limits.call_timeout);
        self.probe_era(idx, timeout);
        // The read-only instance starts beside the full one, so a read does
        // not wait for it.
        if let Some(instance) = read_only
            && self
                .upstreams
                .get(instance)
                .is_some_and(|up| matches!(up.phase, Phase::Stopped | Phase::Failed(_)))
        {
            self.start(instance);
        }
    }

    /// Sends `server/discover`, waiting `timeout` for its answer.
    pub(super) fn probe_era(&mut self, idx: ServerIdx, timeout: Duration) {
        let params = json!({"_meta": self.declared.meta().clone()});
        self.request_up(
            idx,
            "server/discover",
            &params,
            UpPurpose::Discover,
            timeout,
        );
    }

    /// The legacy handshake, after the probe found no 2026-07-28 server.
    pub(super) fn send_initialize(&mut self, idx: ServerIdx) {
        let params = self.declared.initialize_params();
        let timeout = self.limits.call_timeout;
        self.request_up(idx, "initialize", &params, UpPurpose::Initialize, timeout);
    }

    /// The answer to `initialize`.
    pub(super) fn on_initialized(&mut self, idx: ServerIdx, message: &Message<'_>) {
        let result: Option<Value> = message
            .result
            .and_then(|raw| serde_json::from_str(raw).ok());
        match result {
            Some(info) => {
                let Some(up) = self.upstreams.get_mut(idx) else {
                    return;
                };
                tracing::info!(server.id = %up.name, version = ?info.get("protocolVersion"), "initialized");
                up.info = Some(info);
                let generation = up.generation;
                self.outbox.upstream(
                    idx,
                    generation,
                    frame::notification("notifications/initialized", &json!({})),
                    None,
                );
                self.server_ready(idx);
            }
            None => {
                let error = message
                    .error
                    .map_or("no result".to_owned(), |raw| raw.to_owned());
                // A busy 2026-07-28 server may answer the era probe only
                // after it timed out, and then refuse `initialize` with the
                // modern "unsupported protocol version" error, a recognized
                // modern error: probe once more, with the call timeout.
                let modern_refusal = serde_json::from_str::<Value>(&error)
                    .ok()
                    .and_then(|error| error.get("code").and_then(Value::as_i64))
                    == Some(-32022);
                let Some(up) = self.upstreams.get_mut(idx) else {
                    return;
                };
                if modern_refusal && !up.reprobed {
                    up.reprobed = true;
                    tracing::debug!(server.id = %up.name, "refused `initialize` the 2026-07-28 way: probing its era again");
                    let timeout = self.limits.call_timeout;
                    self.probe_era(idx, timeout);
                    return;
                }
                self.upstream_failed(idx, format!("refused to initialize: {error}"));
            }
        }
    }

    /// A server finished its handshake: pin its instructions, list its tools.
    pub(super) fn server_ready(&mut self, idx: ServerIdx) {
        let Some(up) = self.upstreams.get_mut(idx) else {
            return;
        };
        up.phase = Phase::Ready;
        let name = up.name.clone();
        if up.read_only_of.is_some() {
            // Its instructions are not the host's (the full instance's
            // are); its tools are listed only to be compared.
            self.list_tools(idx);
            self.then.push(Then::Wake);
            return;
        }
        let instructions = up
            .info
            .as_ref()
            .and_then(|info| info.get("instructions"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        if let Some(text) = instructions {
            match self.catalog.pin_instructions(idx, &name, &text, unix_now()) {
                Ok(Some(pinned)) => {
                    if let Some(info) = self
                        .upstreams
                        .get_mut(idx)
                        .and_then(|up| up.info.as_mut())
                        .and_then(Value::as_object_mut)
                    {
                        info.insert("instructions".to_owned(), Value::String(pinned));
                    }
                }
                Ok(None) => {}
                Err(err) => {
                    self.upstream_failed(idx, format!("the pin store failed: {err}"));
                    return;
                }
            }
        }
        super::subscriptions::restore_subscriptions(
            self.subscriptions,
            self.inflight,
            self.outbox,
            self.upstreams,
            self.declared,
            *self.limits,
            idx,
        );
        self.list_tools(idx);
        self.then.push(Then::Wake);
    }

    /// Starts listing a server's tools, unless a list is already running.
    pub(super) fn list_tools(&mut self, idx: ServerIdx) {
        let Some(up) = self.upstreams.get(idx) else {
            return;
        };
        if up.phase != Phase::Ready {
            return;
        }
        let has_tools = up.capability("tools").is_some();
        if self
            .catalog
            .server(idx)
            .is_some_and(|server| server.listing == Listing::InProgress)
        {
            return;
        }
        self.catalog.begin_listing(idx);
        if !has_tools {
            // Nothing to ask: the list is complete (and empty) at once; the
            // caller looks again.
            self.finish_listing(idx);
            return;
        }
        let timeout = self.limits.call_timeout;
        self.request_up(idx, "tools/list", &json!({}), UpPurpose::ListTools, timeout);
    }

    /// One page of a server's tool list; the next one is asked for, or the
    /// list is complete.
    pub(super) fn on_tools_page(&mut self, idx: ServerIdx, message: &Message<'_>) {
        let result: Value = message
            .result
            .and_then(|raw| serde_json::from_str(raw).ok())
            .unwrap_or(Value::Null);
        if let Some(error) = message.error {
            let reason = format!("`tools/list` failed: {}", error);
            tracing::warn!(server.id = %self.upstreams.name(idx), "{reason}");
        }
        let tools = match result.get("tools").and_then(Value::as_array) {
            Some(tools) => tools.clone(),
            None => Vec::new(),
        };
        let pages = self.catalog.add_page(idx, tools);
        if let Some(cursor) = result.get("nextCursor").and_then(Value::as_str) {
            if pages >= super::MAX_LIST_PAGES {
                let why = too_many_pages(self.upstreams.name(idx), "tools/list");
                tracing::warn!(server.id = %self.upstreams.name(idx), "{why}");
                self.catalog.listing_failed(idx, why);
                self.then.push(Then::Wake);
                return;
            }
            let timeout = self.limits.call_timeout;
            self.request_up(
                idx,
                "tools/list",
                &json!({"cursor": cursor}),
                UpPurpose::ListTools,
                timeout,
            );
            return;
        }
        if self.catalog.take_stale(idx) {
            // The server announced a change while this list came: what it
            // lists may be from before, so it is listed once more (the
            // calls waiting for it wait for that one).
            self.catalog.begin_listing(idx);
            let timeout = self.limits.call_timeout;
            self.request_up(idx, "tools/list", &json!({}), UpPurpose::ListTools, timeout);
            return;
        }
        self.finish_listing(idx);
        self.then.push(Then::Wake);
    }

    /// The server said its tool list changed: list it again, unless a
    /// listing runs (then once more after it).
    pub(super) fn tools_changed(&mut self, idx: ServerIdx) {
        if self.catalog.changed(idx) {
            // Now, so a changed definition is caught and held even if the
            // host never lists again.
            self.list_tools(idx);
        }
    }

    /// Completes a listing (without waking what waits: the caller does).
    fn finish_listing(&mut self, idx: ServerIdx) {
        let name = self.upstreams.name(idx).to_owned();
        if self.upstreams.is_read_only(idx) {
            let naming = self.upstreams.naming(idx);
            self.catalog
                .finish_read_only_listing(idx, &name, self.policy, &naming);
            return;
        }
        let listed = self.catalog.finish_listing(
            idx,
            &name,
            self.policy,
            &self.upstreams.naming(idx),
            unix_now(),
        );
        if let Some(reason) = listed.store_failure {
            // Without its pins the gateway cannot tell a changed definition
            // from a new one: it fails closed, and stops the server.
            self.upstream_failed(idx, format!("the pin store failed: {reason}"));
        }
    }

    /// A server crashed, hung, broke the protocol or lost its pins: stop it,
    /// fail or retry what it had in flight, and restart it on its next request.
    pub(super) fn upstream_failed(&mut self, idx: ServerIdx, reason: String) {
        let Some(up) = self.upstreams.get_mut(idx) else {
            return;
        };
        if matches!(up.phase, Phase::Failed(_) | Phase::Stopped) && up.link.is_none() {
            return;
        }
        tracing::error!(server.id = %up.name, "{reason}");
        up.phase = Phase::Failed(reason.clone());
        up.link = None;
        let name = up.name.clone();
        self.catalog.forget(idx);
        for (_, purpose) in self.inflight.drain_up(idx) {
            let why = format!("server `{name}` stopped before answering: {reason}");
            self.give_up(idx, purpose, &why);
        }
        let why = format!("server `{name}` stopped: {reason}");
        self.subscriptions.orphan(idx, &name, &why, self.outbox);
        // The server's own requests relayed to a host cannot be answered now.
        self.inflight.take_host_where(|purpose| {
            matches!(purpose, super::inflight::HostPurpose::Relay { server, .. } if *server == idx)
        });
        self.then.push(Then::Wake);
    }

    /// A server sent a line that nests deeper than `max_json_depth`, or has
    /// the key serde_json reads as raw JSON text. It is not passed on, and
    /// only what it was fails: the answer to one request
    /// fails that request (a call with the outcome `protocol-error`), a
    /// request of the server's own is answered with an error, and a
    /// notification is dropped. The server goes on.
    pub(super) fn on_too_deep_upstream(
        &mut self,
        idx: ServerIdx,
        line: &str,
        err: &crate::json::JsonError,
    ) {
        let name = self.upstreams.name(idx).to_owned();
        let Ok(found) = crate::json::members(line) else {
            self.upstream_failed(idx, format!("wrote a line that is not JSON-RPC and {err}"));
            return;
        };
        let member = |key: &str| {
            let mut matching = found.iter().filter(|member| member.key == key);
            match (matching.next(), matching.next()) {
                (Some(member), None) => line.get(member.value.clone()),
                _ => None,
            }
        };
        let why = match err {
            crate::json::JsonError::TooDeep { .. } => format!(
                "server `{name}` sent a message that {err} (the limit is `max_json_depth` in `[gateway]`); hintgate did not pass it on"
            ),
            other => format!("server `{name}` sent a message hintgate does not pass on: {other}"),
        };
        tracing::warn!(server.id = %name, "{why}");
        match (member("method"), member("id")) {
            (Some(_), Some(id)) => {
                let generation = self.upstreams.get(idx).map_or(0, Upstream::generation);
                let text = match err {
                    crate::json::JsonError::TooDeep { .. } => super::call::too_deep_message(err),
                    other => format!("hintgate refuses this message: {other}"),
                };
                self.outbox.upstream(
                    idx,
                    generation,
                    frame::error_response(id, -32600, &text),
                    None,
                );
            }
            (Some(_), None) => {}
            (None, Some(id)) => {
                let Some(purpose) = id
                    .parse::<u64>()
                    .ok()
                    .and_then(|id| self.inflight.take_up(idx, id))
                else {
                    return;
                };
                self.unusable_answer(idx, purpose, &why);
            }
            (None, None) => {}
        }
    }

    /// A notification of read-only instance `idx`: whether it goes on as
    /// the full instance's ([`read_only_note`]); a change to its tools has
    /// it listed again.
    pub(super) fn read_only_note_passes(&mut self, idx: ServerIdx, message: &Message<'_>) -> bool {
        match read_only_note(message.method()) {
            ReadOnlyNote::Pass => true,
            ReadOnlyNote::Relist => {
                self.tools_changed(idx);
                false
            }
            ReadOnlyNote::Drop => {
                tracing::debug!(server.id = %self.upstreams.name(idx), "the read-only instance sent `{}`; dropped", hintgate_policy::sanitize::escape_line(message.method()));
                false
            }
        }
    }

    /// A server answered request `id` with a result that is not an object
    /// (`shown`, its start): MCP results are objects, so the request fails
    /// as if the server had answered with an error that says so (a call
    /// with the outcome `protocol-error`), and the server goes on.
    pub(super) fn result_not_object(&mut self, idx: ServerIdx, id: u64, shown: &str) {
        let Some(purpose) = self.inflight.take_up(idx, id) else {
            tracing::debug!("a late or unknown response upstream: {id}");
            return;
        };
        let why = format!(
            "server `{}` answered with a result that is not an object (`{}`); MCP results are objects, so hintgate did not pass it on",
            self.upstreams.name(idx),
            hintgate_policy::sanitize::escape_line(shown)
        );
        tracing::warn!(server.id = %self.upstreams.name(idx), "{why}");
        self.unusable_answer(idx, purpose, &why);
    }

    /// The answer to a request of the gateway's cannot be used (it nests too
    /// deep, or its result is not an object): the request fails as if the
    /// server had answered with an error. A call ends with the outcome
    /// `protocol-error`, its host told why in an error result; a forwarded
    /// request is answered with a JSON-RPC error; the server goes on.
    pub(super) fn unusable_answer(&mut self, idx: ServerIdx, purpose: UpPurpose, why: &str) {
        match purpose {
            UpPurpose::Call(cx) => {
                let line = self.sessions.result_line(
                    cx.request.session,
                    cx.request.id(),
                    &super::call::error_result(why),
                );
                self.then
                    .push(Then::Answer(cx, line, super::call::Outcome::ProtocolError));
            }
            // Its start cannot complete without the answer.
            UpPurpose::Discover | UpPurpose::LateDiscover | UpPurpose::Initialize => {
                self.upstream_failed(idx, why.to_owned());
            }
            UpPurpose::ListTools => {
                self.catalog.listing_failed(idx, why.to_owned());
                self.then.push(Then::Wake);
            }
            other => self.give_up(idx, other, why),
        }
    }

    /// A request to a server will not be answered (the server failed, or
    /// its deadline passed): tell whoever waits on it.
    pub(super) fn give_up(&mut self, idx: ServerIdx, purpose: UpPurpose, why: &str) {
        match purpose {
            UpPurpose::Discover | UpPurpose::LateDiscover | UpPurpose::Initialize => {}
            UpPurpose::Quiet => {}
            UpPurpose::ListTools => {
                self.catalog.listing_failed(idx, why.to_owned());
            }
            UpPurpose::Forward(request) => {
                self.outbox
                    .error(request.session, request.id(), -32603, why);
            }
            UpPurpose::Call(cx) => {
                self.then
                    .push(Then::Failed(cx, Failure::Failed, why.to_owned()))
            }
            UpPurpose::DryRun(cx) => self.then.push(Then::NoDryRun(cx, why.to_owned())),
            UpPurpose::Fanout { aggregate, .. } => {
                self.then
                    .push(Then::Fanned(aggregate, idx, Some(why.to_owned())));
            }
            UpPurpose::Subscribe { uri } | UpPurpose::Resubscribe { uri } => {
                self.subscriptions
                    .fail(idx, self.upstreams.name(idx), &uri, why, self.outbox);
            }
        }
    }

    /// A request's deadline passed.
    pub(super) fn upstream_timed_out(&mut self, idx: ServerIdx, id: u64) {
        let name = self.upstreams.name(idx).to_owned();
        let timeout = self.limits.call_timeout.as_secs();
        let Some(purpose) = self.inflight.take_up(idx, id) else {
            return;
        };
        match purpose {
            UpPurpose::Discover => {
                tracing::debug!(server.id = %name, "no answer to `server/discover` in time: trying `initialize`");
                // A slow modern server may still answer the probe, until the
                // `initialize` is answered.
                let after = self.limits.call_timeout;
                self.inflight
                    .wait_up(idx, id, UpPurpose::LateDiscover, after);
                self.send_initialize(idx);
            }
            UpPurpose::Initialize => {
                // A server silent at start often said why on stderr.
                let said = self
                    .upstreams
                    .get(idx)
                    .and_then(Upstream::stderr_clause)
                    .unwrap_or_default();
                self.upstream_failed(
                    idx,
                    format!("did not answer `initialize` within {timeout} s{said}"),
                );
            }
            UpPurpose::LateDiscover | UpPurpose::Quiet => {}
            UpPurpose::ListTools => {
                let why = format!("server `{name}` did not answer `tools/list` within {timeout} s");
                tracing::warn!(server.id = %name, "{why}");
                self.catalog.listing_failed(idx, why);
                self.then.push(Then::Wake);
            }
            UpPurpose::Call(cx) => {
                self.upstreams.cancel(idx, id, "timed out", self.outbox);
                let why = format!("server `{name}` did not answer within {timeout} s");
                self.then.push(Then::Failed(cx, Failure::Failed, why));
            }
            UpPurpose::DryRun(cx) => {
                self.upstreams.cancel(idx, id, "timed out", self.outbox);
                let why = format!("it did not answer within {timeout} s");
                self.then.push(Then::NoDryRun(cx, why));
            }
            UpPurpose::Forward(request) => {
                self.upstreams.cancel(idx, id, "timed out", self.outbox);
                let why = format!(
                    "server `{name}` did not answer `{}` within {timeout} s",
                    request.method.as_str()
                );
                self.outbox
                    .error(request.session, request.id(), -32603, &why);
            }
            UpPurpose::Fanout { aggregate, method } => {
                self.upstreams.cancel(idx, id, "timed out", self.outbox);
                let why = format!("did not answer `{method}` within {timeout} s");
                self.then.push(Then::Fanned(aggregate, idx, Some(why)));
            }
            UpPurpose::Subscribe { uri } | UpPurpose::Resubscribe { uri } => {
                self.upstreams.cancel(idx, id, "timed out", self.outbox);
                let why = format!(
                    "server `{name}` did not acknowledge the subscription to `{}` within {timeout} s",
                    hintgate_policy::sanitize::escape_line(&uri)
                );
                self.subscriptions
                    .fail(idx, self.upstreams.name(idx), &uri, &why, self.outbox);
            }
        }
    }
}

/// What becomes of a notification from a read-only instance.
///
/// A read-only instance lists nothing to a host: a change to its tools is
/// listed again only to be compared, and what it says of its prompts and
/// resources (never read through it) is dropped. What belongs to a call it
/// runs (progress, a cancelled request of its own, a log message) reaches
/// the host as the full instance's.
#[derive(Debug, PartialEq, Eq)]
enum ReadOnlyNote {
    /// Passed on as any server's would be.
    Pass,
    /// Its tools are listed again; no host is told.
    Relist,
    /// Dropped.
    Drop,
}

/// What becomes of a read-only instance's notification `method`.
fn read_only_note(method: &str) -> ReadOnlyNote {
    match method {
        "notifications/tools/list_changed" => ReadOnlyNote::Relist,
        "notifications/progress" | "notifications/cancelled" | "notifications/message" => {
            ReadOnlyNote::Pass
        }
        _ => ReadOnlyNote::Drop,
    }
}

/// A server's identity for people, and what its command line resolves to
/// (for the identity key).
fn identity_of(config: &ServerConfig) -> (String, Value) {
    let resolved = match &config.transport {
        Transport::Stdio { command, args, env } => {
            let path = env
                .get("PATH")
                .map(std::ffi::OsString::from)
                .or_else(|| std::env::var_os("PATH"));
            let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
            Some(crate::identity::resolve(
                command,
                args,
                path.as_deref(),
                home.as_deref(),
            ))
        }
        Transport::Http { .. } => None,
    };
    let described = resolved
        .as_ref()
        .and_then(crate::identity::Resolved::describe);
    let identity = match described {
        Some(resolved) => format!("{} -> {resolved}", config.identity()),
        None => config.identity(),
    };
    let resolved = resolved
        .and_then(|resolved| serde_json::to_value(resolved).ok())
        .unwrap_or(Value::Null);
    (identity, resolved)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::gateway::call::Outcome;
    use crate::gateway::fixture::{ONE, Parts, call, read_tool};
    use crate::gateway::session::Era;

    const WAIT: Duration = Duration::from_secs(30);

    /// Parts where server `fs` runs and lists `read`, with a legacy host
    /// whose call of it is in flight on the server under id 5.
    fn in_flight() -> Parts {
        let mut parts = Parts::new(ONE).listing(0, &[read_tool()]);
        parts.host(Era::Legacy("2025-11-25".to_owned()), false);
        let mut cx = call("fs__read", &json!({"path": "a"}));
        cx.resolve(0, "read".to_owned());
        parts
            .inflight
            .wait_up(0, 5, UpPurpose::Call(Box::new(cx)), WAIT);
        parts
    }

    #[test]
    fn a_server_that_fails_leaves_its_calls_to_fail_and_then_wakes_what_waits() {
        let mut parts = in_flight();
        parts.inflight.wait_up(0, 6, UpPurpose::ListTools, WAIT);
        let mut servers = parts.servers();
        servers.upstream_failed(0, "exit 1".to_owned());
        let then = servers.then;
        assert_eq!(then.len(), 2, "{then:?}");
        assert!(
            matches!(&then[0], Then::Failed(cx, Failure::Failed, why)
                if cx.tool() == "read" && why.contains("stopped before answering: exit 1")),
            "{:?}",
            then[0]
        );
        assert!(matches!(then[1], Then::Wake), "{:?}", then[1]);
        assert!(matches!(
            parts.upstreams.get(0).unwrap().phase,
            Phase::Failed(_)
        ));
        assert!(
            parts.inflight.take_up(0, 6).is_none(),
            "a request of the failed start is still waited on"
        );
        // A second failure of a server already failed leaves nothing more.
        let mut servers = parts.servers();
        servers.upstream_failed(0, "again".to_owned());
        assert!(servers.then.is_empty());
    }

    #[test]
    fn a_result_that_is_not_an_object_answers_its_call_with_a_protocol_error() {
        let mut parts = in_flight();
        let mut servers = parts.servers();
        servers.result_not_object(0, 5, "42");
        let then = servers.then;
        let [Then::Answer(cx, line, Outcome::ProtocolError)] = &then[..] else {
            panic!("{then:?}");
        };
        assert_eq!(cx.tool(), "read");
        let answer: Value = serde_json::from_str(line).unwrap();
        assert_eq!(answer["id"], 1);
        assert_eq!(answer["result"]["isError"], true);
        assert!(answer.to_string().contains("not an object"), "{answer}");
        // The server goes on.
        assert_eq!(parts.upstreams.get(0).unwrap().phase, Phase::Ready);
        // A late answer, or one to a request never sent, does nothing.
        let mut servers = parts.servers();
        servers.result_not_object(0, 5, "42");
        assert!(servers.then.is_empty());
    }

    #[test]
    fn a_tool_list_that_names_a_page_past_the_bound_fails_and_wakes_what_waits() {
        let mut parts = Parts::new(ONE).running(0);
        parts.catalog.begin_listing(0);
        let page = r#"{"jsonrpc":"2.0","id":9,"result":{"tools":[],"nextCursor":"more"}}"#;
        let message = crate::frame::Message::parse(page).unwrap();
        for _ in 1..super::super::MAX_LIST_PAGES {
            let mut servers = parts.servers();
            servers.on_tools_page(0, &message);
            assert!(servers.then.is_empty(), "the list was not followed");
        }
        assert_eq!(parts.outbox.take().len(), super::super::MAX_LIST_PAGES - 1);
        let mut servers = parts.servers();
        servers.on_tools_page(0, &message);
        assert!(
            matches!(servers.then[..], [Then::Wake]),
            "{:?}",
            servers.then
        );
        assert!(
            parts.outbox.is_empty(),
            "a page past the bound was asked for"
        );
        assert!(matches!(
            parts.catalog.server(0).unwrap().listing,
            Listing::Failed(_)
        ));
    }

    #[test]
    fn a_read_only_instance_passes_on_only_what_belongs_to_a_call_it_runs() {
        for (method, expected) in [
            ("notifications/progress", ReadOnlyNote::Pass),
            ("notifications/cancelled", ReadOnlyNote::Pass),
            ("notifications/message", ReadOnlyNote::Pass),
            ("notifications/tools/list_changed", ReadOnlyNote::Relist),
            ("notifications/prompts/list_changed", ReadOnlyNote::Drop),
            ("notifications/resources/list_changed", ReadOnlyNote::Drop),
            ("notifications/resources/updated", ReadOnlyNote::Drop),
            ("notifications/elicitation/complete", ReadOnlyNote::Drop),
            ("notifications/progress/", ReadOnlyNote::Drop),
            ("", ReadOnlyNote::Drop),
        ] {
            assert_eq!(read_only_note(method), expected, "{method}");
        }
    }
}
