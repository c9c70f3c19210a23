//! Everything that is not a tool call: the host's handshake, the tool list,
//! and requests passed through in wrap mode or routed and merged across
//! servers in gateway mode.
//!
//! Gateway mode, what the host sees:
//! - `resources/list`, `resources/templates/list` and `prompts/list` merge
//!   every server's list (following each server's cursors) into one page;
//! - resource URIs are global, so they are not renamed: `resources/read`,
//!   `subscribe` and `unsubscribe` go to the server that listed the URI (or
//!   the template it matches) in its last complete listing; when two
//!   servers list the same URI, the first in the configuration keeps it,
//!   and the clash is logged;
//! - a server's part of a merged list holds at most [`MAX_LISTED`] entries
//!   and `max_message_bytes` of pages: past either, the rest is left out
//!   (logged), so what the gateway remembers of a server's resources is
//!   bounded, and replaced by each complete listing;
//! - prompt names are prefixed like tool names and routed by the prefix;
//! - what a server lists is shown as it is (issue 11): a prompt whose name
//!   breaks the tool-name rule of [`hintgate_policy::name`] (not plain, or
//!   like another of the server's prompts) or whose arguments would not
//!   read one way only ([`hintgate_policy::name::arguments_problem`]), and
//!   a resource or template
//!   whose URI breaks a line or hides characters
//!   ([`hintgate_policy::name::uri_problem`]), is left out of the list and
//!   refused when asked for; names, titles and descriptions are sanitized,
//!   names and titles made one line, a prompt's arguments' as its own.
//!   `prompts/list` is answered in one page in wrap mode too (the gateway
//!   follows the server's cursors), so prompts that look alike are found
//!   across pages, as tools are; in wrap mode the host pages through the
//!   server's resources and templates itself;
//! - `completion/complete` is routed by the prompt's prefix or the
//!   resource template's owner: only by an exact, valid name or a URI a
//!   server listed in its last complete listing, never by guess; a prompt
//!   refused for `prompts/get`, or a URI that breaks a line or hides
//!   characters, is refused in both modes;
//! - a `resources/read` result's `contents` under a URI that breaks a line
//!   or hides characters are left out (logged), in both modes;
//! - `logging/setLevel` goes to every server that logs;
//! - any other method is answered with "method not found", since it is
//!   not clear which server it is for.
//!
//! Where a request goes and what is refused is [`Routing`]'s to say, from
//! what each server listed last and the servers' names alone
//! ([`Routing::resource_owner`], [`Routing::completion_target`],
//! [`Routing::refusal`]); the `impl Gateway` blocks start servers, park
//! what waits and send.

use std::collections::{BTreeMap, HashMap, HashSet};

use hintgate_policy::decide::Scope;
use hintgate_policy::name::{arguments_problem, problem as name_problem, uri_problem};
use hintgate_policy::sanitize::{escape_line, one_line, sanitize};
use serde_json::{Map, Value, json};

use super::inflight::{InFlight, UpPurpose};
use super::outbox::Outbox;
use super::request::{HostRequest, ServerIdx, SessionId};
use super::session::{Era, declares_form_elicitation};
use super::upstreams::{Phase, Readiness, Unresolved, Upstreams};
use super::{Gateway, Mode, Waiting};
use crate::frame::Message;
use crate::versions::LEGACY_VERSIONS;

/// The most entries of one server's part of a merged list (resources,
/// resource templates, prompts): the rest is left out, and logged. It
/// bounds what the gateway remembers of a server's resources for routing.
pub(crate) const MAX_LISTED: usize = 10_000;

/// What routing remembers between requests.
#[derive(Debug, Default)]
pub(crate) struct Routing {
    /// Lists being merged, by number.
    aggregates: HashMap<u64, Aggregate>,
    next_aggregate: u64,
    /// Gateway mode: what each server (by index) listed in its last
    /// complete listing of resources and resource templates.
    listed: Vec<Listed>,
}

/// The resource URIs and templates one server listed last, and the prompts
/// of its listings that were left out.
#[derive(Debug, Default)]
struct Listed {
    resources: HashSet<String>,
    templates: HashSet<String>,
    /// Prompts left out of its last listing for their names, with why:
    /// `prompts/get` refuses them.
    refused_prompts: HashMap<String, String>,
}

/// A host request answered by merging several servers' lists.
#[derive(Debug)]
struct Aggregate {
    request: HostRequest,
    /// `resources`, `resourceTemplates` or `prompts`.
    key: &'static str,
    /// Each server's items, by its index, so the merged list is in
    /// configuration order whatever order the answers come in.
    items: BTreeMap<ServerIdx, Vec<Value>>,
    /// How many pages each server has sent, and their bytes.
    pages: BTreeMap<ServerIdx, (usize, usize)>,
    remaining: usize,
}

impl Aggregate {
    /// Keeps a page of server `idx`'s part of the list: the pages it has
    /// sent so far, and why the rest of its part is left out, if it is.
    ///
    /// INVARIANT: a server's part of a merged list is bounded, by entries
    /// and by bytes; the rest is left out.
    fn keep_page(
        &mut self,
        idx: ServerIdx,
        method: &str,
        mut items: Vec<Value>,
        page_bytes: usize,
        max_bytes: usize,
    ) -> (usize, Option<String>) {
        let (seen, bytes) = self.pages.entry(idx).or_default();
        *seen += 1;
        *bytes = bytes.saturating_add(page_bytes);
        let pages = *seen;
        let kept = self.items.entry(idx).or_default();
        if *bytes > max_bytes {
            let why = format!(
                "its pages of `{method}` came to more than `max_message_bytes` ({max_bytes} bytes)"
            );
            return (pages, Some(why));
        }
        let room = MAX_LISTED.saturating_sub(kept.len());
        let mut cut = None;
        if items.len() > room {
            items.truncate(room);
            cut = Some(format!(
                "it lists more than {MAX_LISTED} entries in `{method}`"
            ));
        }
        kept.extend(items);
        (pages, cut)
    }
}

// === impl Routing ===

impl Routing {
    /// A fresh number for a merge or a gathering.
    pub fn next_number(&mut self) -> u64 {
        self.next_aggregate += 1;
        self.next_aggregate
    }

    /// The server whose last listing has resource `uri` (the first in the
    /// configuration, when several do).
    fn resource_listed_by(&self, uri: &str) -> Option<ServerIdx> {
        self.listed
            .iter()
            .position(|listed| listed.resources.contains(uri))
    }

    /// The server whose last listing has resource template `template`.
    fn template_listed_by(&self, template: &str) -> Option<ServerIdx> {
        self.listed
            .iter()
            .position(|listed| listed.templates.contains(template))
    }

    /// A server's complete listing of `key` (`resources` or
    /// `resourceTemplates`): what it listed before is replaced. Returns how
    /// many of them an earlier server in the configuration lists too (it
    /// keeps those).
    fn replace(&mut self, idx: ServerIdx, key: &str, names: HashSet<String>) -> usize {
        if self.listed.len() <= idx {
            self.listed.resize_with(idx + 1, Listed::default);
        }
        let clashes = names
            .iter()
            .filter(|name| {
                self.listed.iter().take(idx).any(|listed| match key {
                    "resources" => listed.resources.contains(*name),
                    _ => listed.templates.contains(*name),
                })
            })
            .count();
        if let Some(listed) = self.listed.get_mut(idx) {
            match key {
                "resources" => listed.resources = names,
                "resourceTemplates" => listed.templates = names,
                _ => {}
            }
        }
        clashes
    }

    /// Why the server's prompt `name` was left out of its listing, if it was.
    fn refused_prompt(&self, idx: ServerIdx, name: &str) -> Option<&String> {
        self.listed.get(idx)?.refused_prompts.get(name)
    }

    /// Prompts a listing of the server left out: `fresh` when it is the
    /// first page of a listing, which replaces what was remembered.
    fn refuse_prompts(&mut self, idx: ServerIdx, refused: Vec<(String, String)>, fresh: bool) {
        if self.listed.len() <= idx {
            self.listed.resize_with(idx + 1, Listed::default);
        }
        if let Some(listed) = self.listed.get_mut(idx) {
            if fresh {
                listed.refused_prompts.clear();
            }
            listed.refused_prompts.extend(refused);
        }
    }

    /// Why a request for a server's prompt `name` (`prompts/get`) or
    /// resource `name` (by URI) is refused: the prompt was left out of the
    /// server's listing for its name, or the name or URI could not be shown
    /// as it is.
    pub fn refusal(
        &self,
        upstreams: &Upstreams,
        idx: ServerIdx,
        method: &str,
        name: &str,
    ) -> Option<String> {
        if method == "prompts/get" {
            let why = name_problem(name)
                .map(|problem| format!("its name {problem}"))
                .or_else(|| self.refused_prompt(idx, name).cloned())?;
            return Some(format!(
                "prompt `{}` of server `{}` is refused: {why}",
                escape_line(name),
                upstreams.name(idx)
            ));
        }
        let problem = uri_problem(name)?;
        Some(format!(
            "resource `{}` is refused: its URI {problem}",
            escape_line(name)
        ))
    }

    /// The server a resource URI goes to: the one whose last listing has
    /// it, or the only server with resources.
    pub fn resource_owner(&self, upstreams: &Upstreams, uri: &str) -> Option<ServerIdx> {
        if let Some(idx) = self.resource_listed_by(uri) {
            return Some(idx);
        }
        let with_resources: Vec<ServerIdx> = upstreams
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

    /// Where a host's `completion/complete` goes, by the prompt or the
    /// resource its `ref` names, and the params it goes with (the prompt's
    /// own name in gateway mode): only to the one server an exact, valid
    /// name or URI leads to, never by guess. A prompt is resolved by its
    /// prefix as `prompts/get` is, and refused as `prompts/get` would be; a
    /// resource (or template) URI must be one a server listed in its last
    /// complete listing (or belong to the server this request started
    /// again), and one that breaks a line or hides characters is refused.
    /// In wrap mode the one server gets it as sent, once its `ref` passes
    /// the same checks (another kind of `ref` is the server's to judge).
    ///
    /// # Errors
    ///
    /// Why the completion is not sent, in words for the host.
    pub fn completion_target(
        &self,
        upstreams: &Upstreams,
        params: &Value,
        restarted: Option<ServerIdx>,
    ) -> Result<(ServerIdx, Option<Value>), String> {
        let reference = params.get("ref").unwrap_or(&Value::Null);
        let kind = reference.get("type").and_then(Value::as_str);
        match kind {
            Some("ref/prompt") => {
                let name = reference.get("name").and_then(Value::as_str).unwrap_or("");
                let (idx, own) = match upstreams.resolve(name) {
                    Ok(found) => found,
                    Err(Unresolved::Unknown) => {
                        return Err(format!(
                            "the completion's `ref` names an unknown prompt `{}`",
                            escape_line(name)
                        ));
                    }
                    Err(Unresolved::Ambiguous(found)) => {
                        return Err(format!(
                            "the completion's `ref` names prompt `{}`: {}",
                            escape_line(name),
                            upstreams.ambiguity(&found)
                        ));
                    }
                };
                if let Some(why) = self.refusal(upstreams, idx, "prompts/get", &own) {
                    return Err(why);
                }
                if upstreams.wraps() {
                    return Ok((idx, None));
                }
                let mut params = params.clone();
                if let Some(object) = params.pointer_mut("/ref").and_then(Value::as_object_mut) {
                    object.insert("name".to_owned(), Value::String(own));
                }
                Ok((idx, Some(params)))
            }
            Some("ref/resource") => {
                let uri = reference.get("uri").and_then(Value::as_str).unwrap_or("");
                if let Some(why) = self.refusal(upstreams, 0, "resources/read", uri) {
                    return Err(why);
                }
                if upstreams.wraps() {
                    return Ok((0, None));
                }
                self.template_listed_by(uri)
                    .or_else(|| self.resource_listed_by(uri))
                    .or(restarted)
                    .map(|idx| (idx, None))
                    .ok_or_else(|| {
                        format!(
                            "the completion's `ref` names resource `{}`, which no server listed; list resources and resource templates first",
                            escape_line(uri)
                        )
                    })
            }
            _ if upstreams.wraps() => Ok((0, None)),
            _ => Err(
                "the completion's `ref` is neither a `ref/prompt` nor a `ref/resource`".to_owned(),
            ),
        }
    }

    /// One page of server `idx`'s (named `server`) list passed through in
    /// wrap mode, screened (see [`screen`]) before the host sees it: the
    /// line as it came when nothing in it had to change. The prompts it
    /// leaves out are remembered (`fresh`: the first page of a listing,
    /// which replaces what was).
    pub fn screen_page(
        &mut self,
        idx: ServerIdx,
        server: &str,
        key: &str,
        line: String,
        fresh: bool,
    ) -> String {
        let Ok(mut response) = serde_json::from_str::<Value>(&line) else {
            return line;
        };
        let Some(items) = response
            .pointer_mut(&format!("/result/{key}"))
            .and_then(Value::as_array_mut)
        else {
            return line;
        };
        let before = items.clone();
        let refused = screen(server, key, items);
        let changed = *items != before;
        if key == "prompts" {
            self.refuse_prompts(idx, refused, fresh);
        }
        if changed { response.to_string() } else { line }
    }

    /// Server `idx` finished its part of merged list `aggregate` (or failed
    /// it: `failure`). Its whole part is screened at once, so prompts that
    /// look alike are found across its pages; a prompt's name is shown
    /// prefixed, and left out when the prefixed name could be another
    /// server's; a complete listing of resources or templates replaces
    /// what the server listed before. Once every server has finished: the
    /// host's request and the merged list, in configuration order.
    fn part_done(
        &mut self,
        upstreams: &Upstreams,
        aggregate: u64,
        idx: ServerIdx,
        failure: Option<String>,
    ) -> Option<(HostRequest, Value)> {
        let server = upstreams.name(idx);
        let state = self.aggregates.get_mut(&aggregate)?;
        let key = state.key;
        let mut items = state.items.remove(&idx).unwrap_or_default();
        let refused = screen(server, key, &mut items);
        if key == "prompts" {
            items.retain_mut(|item| prompt_shown(upstreams, idx, item));
            if failure.is_none() {
                self.refuse_prompts(idx, refused, true);
            }
        }
        let state = self.aggregates.get_mut(&aggregate)?;
        let field = match key {
            "resources" => Some("uri"),
            "resourceTemplates" => Some("uriTemplate"),
            _ => None,
        };
        // A complete listing: what the server listed before is replaced by
        // what it lists now.
        let names: Option<HashSet<String>> = field.filter(|_| failure.is_none()).map(|field| {
            items
                .iter()
                .filter_map(|item| item.get(field).and_then(Value::as_str))
                .map(str::to_owned)
                .collect()
        });
        state.items.insert(idx, items);
        if let Some(failure) = &failure {
            tracing::warn!(server.id = %server, "{} failed: {failure}", state.request.method.as_str());
        }
        if let Some(names) = names {
            let clashes = self.replace(idx, key, names);
            if clashes > 0 {
                tracing::warn!(server.id = %server, "{clashes} of the entries of `{key}` it lists are listed by a server before it in the configuration, which keeps them");
            }
        }
        let state = self.aggregates.get_mut(&aggregate)?;
        state.remaining = state.remaining.saturating_sub(1);
        if state.remaining > 0 {
            return None;
        }
        let state = self.aggregates.remove(&aggregate)?;
        let items: Vec<Value> = state.items.into_values().flatten().collect();
        Some((state.request, json!({ state.key: items })))
    }

    /// Forgets what a server listed (it starts again, and will list anew).
    pub fn forget(&mut self, idx: ServerIdx) {
        if let Some(listed) = self.listed.get_mut(idx) {
            *listed = Listed::default();
        }
    }
}

/// Answers the host's `initialize` (and a modern host's
/// `server/discover`) once every server is ready or failed.
pub(super) fn finish_initialize(
    outbox: &mut super::outbox::Outbox,
    sessions: &mut super::session::Sessions,
    upstreams: &super::upstreams::Upstreams,
    mode: &super::Mode,
) {
    if !upstreams.settled() {
        return;
    }
    let waiting: Vec<SessionId> = sessions.keys().collect();
    for session in waiting {
        let Some(host) = sessions.get_mut(&session) else {
            continue;
        };
        let discover = host.discover_pending.take();
        let initialize = host.initialize_pending.take();
        if let Some(request) = discover {
            let result = discover_result(&sessions.protocol_version(session), upstreams);
            sessions.reply(outbox, session, request.id(), &result);
        }
        let Some(request) = initialize else {
            continue;
        };
        if *mode == Mode::Wrap
            && let Some(Phase::Failed(reason)) = upstreams.get(0).map(|up| &up.phase)
        {
            let text = format!("server `{}` did not start: {reason}", upstreams.name(0));
            outbox.error(session, request.id(), -32603, &text);
            continue;
        }
        let result = initialize_result(&sessions.protocol_version(session), upstreams);
        sessions.reply(outbox, session, request.id(), &result);
    }
}

// === impl Gateway ===

impl Gateway {
    /// One server finished its part of a merged list (or failed it); the
    /// host gets the merged list once every server has.
    pub(super) fn fanout_done(&mut self, aggregate: u64, idx: ServerIdx, failure: Option<String>) {
        let Some((request, mut result)) =
            self.routing
                .part_done(&self.upstreams, aggregate, idx, failure)
        else {
            return;
        };
        let session = request.session;
        let modern = self
            .sessions
            .get(&session)
            .is_some_and(super::session::HostSession::modern);
        super::era::modernize(modern, request.method.as_str(), &mut result);
        self.sessions
            .reply(&mut self.outbox, session, request.id(), &result);
    }

    /// A legacy host's `initialize`: the servers start with what it declared.
    pub(super) fn on_initialize(&mut self, request: HostRequest) {
        let session = request.session;
        let params = match request.params() {
            Value::Null => json!({}),
            other => other,
        };
        let asked = params
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        let version = if LEGACY_VERSIONS.contains(&asked) {
            asked.to_owned()
        } else {
            LEGACY_VERSIONS
                .first()
                .copied()
                .unwrap_or("2025-11-25")
                .to_owned()
        };
        let Some(host) = self.sessions.get_mut(&session) else {
            return;
        };
        host.era = Era::Legacy(version);
        host.elicitation = declares_form_elicitation(params.get("capabilities"));
        host.init = Some(params.clone());
        host.initialize_pending = Some(request);
        self.start_servers(params);
        finish_initialize(
            &mut self.outbox,
            &mut self.sessions,
            &self.upstreams,
            &self.mode,
        );
    }

    /// Starts every server that is stopped; the first session's declaration
    /// is what the servers are told of the host.
    pub(super) fn start_servers(&mut self, mut init: Value) {
        if let Some(capabilities) = init.get_mut("capabilities") {
            without_tasks(capabilities);
        }
        self.declared.declare(init, self.limits.max_depth);
        for idx in 0..self.upstreams.len() {
            if self
                .upstreams
                .get(idx)
                .is_some_and(|up| up.phase == Phase::Stopped)
            {
                self.at_servers(|servers| servers.start(idx));
            }
        }
    }

    /// `tools/list`: every server's visible tools, once every server has
    /// listed them (a server that cannot is left out, and logged).
    pub(super) fn on_tools_list(&mut self, mut request: HostRequest) {
        let mut pending = false;
        for idx in 0..self.upstreams.len() {
            match self.at_servers(|servers| servers.readiness(idx, &mut request.restarted)) {
                Readiness::Ready => match self
                    .catalog
                    .server(idx)
                    .map(|server| server.listing.clone())
                {
                    Some(super::catalog::Listing::Listed) => {}
                    Some(super::catalog::Listing::InProgress) => pending = true,
                    Some(super::catalog::Listing::Failed(reason)) => {
                        tracing::warn!(server.id = %self.upstreams.name(idx), "its tools are left out of the list: {reason}");
                    }
                    Some(super::catalog::Listing::Unlisted) | None => {
                        self.at_servers(|servers| servers.list_tools(idx));
                        pending = true;
                    }
                },
                Readiness::Pending => pending = true,
                Readiness::Failed(_) => {}
            }
        }
        if pending {
            self.parked.park(
                Waiting::Request(Box::new(request)),
                self.limits.wait_timeout(),
                &mut self.inflight,
            );
            return;
        }
        // The host's views were built once, when each server listed.
        let session = request.session;
        let scope = self
            .sessions
            .get(&session)
            .map_or(Scope::Read, |host| host.scope);
        let mut tools = String::from("[");
        for idx in 0..self.upstreams.len() {
            for (name, view) in self.catalog.host_views(idx, scope) {
                // A name another server's prefix also fits would not be
                // routed: it is not listed either.
                if self.upstreams.prefixes_overlap()
                    && self
                        .upstreams
                        .resolve(&self.upstreams.prefixed(idx, name))
                        .is_err()
                {
                    tracing::warn!(server.id = %self.upstreams.name(idx), tool.name = %name, "left out of the tool list: another server's prefix fits its name too");
                    continue;
                }
                if tools.len() > 1 {
                    tools.push(',');
                }
                tools.push_str(view);
            }
        }
        tools.push(']');
        let modern = self
            .sessions
            .get(&session)
            .is_some_and(super::session::HostSession::modern);
        let extra = if modern {
            ",\"resultType\":\"complete\",\"ttlMs\":0,\"cacheScope\":\"private\""
        } else {
            ""
        };
        let line = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{},\"result\":{{\"tools\":{tools}{extra}}}}}",
            request.id()
        );
        self.outbox.host(session, line);
    }

    /// Any other request: where it goes is [`route_of`]'s to say; it is
    /// merged across servers, sent to one once it is ready, or answered
    /// here.
    pub(super) fn on_other_request(&mut self, request: HostRequest) {
        let session = request.session;
        if request.method.as_str() == "logging/setLevel"
            && !self.sessions.set_log_level(&mut self.outbox, &request)
        {
            return;
        }
        let params = request.params();
        match route_of(
            &self.mode,
            &self.routing,
            &self.upstreams,
            &request,
            &params,
        ) {
            Route::FanOut(capability, key) => self.fan_out(request, capability, key),
            Route::SetLevelEverywhere => {
                let timeout = self.limits.call_timeout;
                set_level_everywhere(
                    &mut self.upstreams,
                    &mut self.inflight,
                    &mut self.outbox,
                    &request,
                    timeout,
                );
                self.sessions
                    .reply(&mut self.outbox, session, request.id(), &json!({}));
            }
            Route::To(idx, params) => self.route(idx, request, params),
            Route::Refused(code, why) => self.outbox.error(session, request.id(), code, &why),
        }
    }

    /// Sends a request to server `idx` once it is ready (starting it if it
    /// is stopped), or answers why it cannot be.
    fn route(&mut self, idx: ServerIdx, mut request: HostRequest, params: Option<Value>) {
        match self.at_servers(|servers| servers.readiness(idx, &mut request.restarted)) {
            Readiness::Ready => self.forward(idx, request, params),
            Readiness::Pending => self.parked.park(
                Waiting::Request(Box::new(request)),
                self.limits.wait_timeout(),
                &mut self.inflight,
            ),
            Readiness::Failed(reason) => {
                let text = if self.mode == Mode::Wrap {
                    format!("the server is not available: {reason}")
                } else {
                    format!(
                        "server `{}` is not available: {reason}",
                        self.upstreams.name(idx)
                    )
                };
                self.outbox
                    .error(request.session, request.id(), -32603, &text);
            }
        }
    }

    /// Forwards a host request to one server under a new id (and new params,
    /// when given); the answer goes back under the host's id. A resource
    /// subscription is kept per session first (`subscriptions`).
    fn forward(&mut self, idx: ServerIdx, request: HostRequest, params: Option<Value>) {
        let modern = self.upstreams.get(idx).is_some_and(|up| up.modern);
        if modern && request.method.as_str() == "logging/setLevel" {
            // 2026-07-28 has no `logging/setLevel`: the session's level goes
            // in the `_meta` of each of its requests instead.
            self.sessions
                .reply(&mut self.outbox, request.session, request.id(), &json!({}));
            return;
        }
        if params.is_none()
            && matches!(
                request.method.as_str(),
                "resources/subscribe" | "resources/unsubscribe"
            )
        {
            self.on_subscription_request(idx, request);
            return;
        }
        self.forward_with(idx, request, params);
    }

    pub(super) fn forward_with(
        &mut self,
        idx: ServerIdx,
        request: HostRequest,
        params: Option<Value>,
    ) {
        let timeout = self.limits.call_timeout;
        let with_meta = |params: Value, ours: &Value| super::era::with_meta(params, ours);
        let Some(up) = self.upstreams.get_mut(idx) else {
            return;
        };
        let id = up.next_id();
        let generation = up.generation();
        let modern = up.modern;
        let session_meta = self
            .declared
            .for_level(self.sessions.log_level(request.session));
        let modern_meta = &*session_meta;
        let id_text = id.to_string();
        let line = match params {
            Some(params) if modern => {
                let params = with_meta(params, modern_meta);
                request.with_id_and_params(&id_text, &params.to_string())
            }
            None if modern => {
                let params = with_meta(
                    match request.params() {
                        Value::Null => json!({}),
                        other => other,
                    },
                    modern_meta,
                );
                if request.spans.params.is_some() {
                    request.with_id_and_params(&id_text, &params.to_string())
                } else {
                    crate::frame::request(&id_text, request.method.as_str(), &params)
                }
            }
            Some(params) => request.with_id_and_params(&id_text, &params.to_string()),
            None => request.with_id(&id_text),
        };
        drop(session_meta);
        let session = request.session;
        self.inflight
            .wait_up(idx, id, UpPurpose::Forward(Box::new(request)), timeout);
        let principal = self.sessions.principal(session);
        self.outbox.upstream(idx, generation, line, principal);
    }

    /// A server answered a forwarded request. A resource or a prompt of a
    /// private-data server taints the session once it reaches the host
    /// (design §4.4); an error carries no data.
    pub(super) fn on_forward_answer(
        &mut self,
        idx: ServerIdx,
        request: &HostRequest,
        message: &Message<'_>,
    ) {
        let method = request.method.as_str();
        // What the gateway screens, marks or reads for taint must be what
        // the host reads: an answer that gives a key twice could be read
        // one way here and another there (the gateway's parser takes the
        // last, some hosts the first).
        if let Err(err) = crate::json::find_duplicate_key(message.line()) {
            let why = format!(
                "server `{}` answered `{method}` with a message that cannot be read one way only ({err}); hintgate did not pass it on",
                self.upstreams.name(idx)
            );
            tracing::warn!(server.id = %self.upstreams.name(idx), "{why}");
            self.outbox
                .error(request.session, request.id(), -32603, &why);
            return;
        }
        let mut line =
            self.lookup()
                .host_response(idx, request.session, message, request.id(), method);
        if let Some(key) = list_key(method) {
            // Wrap mode: the server's own page, screened like a merged one.
            let fresh = request.params().get("cursor").is_none();
            line = self
                .routing
                .screen_page(idx, self.upstreams.name(idx), key, line, fresh);
        }
        if method == "resources/read" {
            line = screen_contents(self.upstreams.name(idx), line);
        }
        let reads = matches!(method, "resources/read" | "prompts/get");
        if reads
            && message.result.is_some_and(super::call::carries_data)
            && self.policy.data_taints_session(self.upstreams.name(idx))
        {
            self.sessions.taint(
                request.session,
                self.upstreams.name(idx),
                &format!("`{method}`"),
            );
        }
        self.outbox.host(request.session, line);
    }

    fn fan_out(&mut self, mut request: HostRequest, capability: &str, key: &'static str) {
        let mut pending = false;
        let mut targets = Vec::new();
        for idx in 0..self.upstreams.len() {
            match self.at_servers(|servers| servers.readiness(idx, &mut request.restarted)) {
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
            self.parked.park(
                Waiting::Request(Box::new(request)),
                self.limits.wait_timeout(),
                &mut self.inflight,
            );
            return;
        }
        if targets.is_empty() {
            let mut result = json!({ key: [] });
            let modern = self
                .sessions
                .get(&request.session)
                .is_some_and(super::session::HostSession::modern);
            super::era::modernize(modern, request.method.as_str(), &mut result);
            self.sessions
                .reply(&mut self.outbox, request.session, request.id(), &result);
            return;
        }
        let aggregate = self.routing.next_number();
        let method = request.method.as_str().to_owned();
        self.routing.aggregates.insert(
            aggregate,
            Aggregate {
                request,
                key,
                items: BTreeMap::new(),
                pages: BTreeMap::new(),
                remaining: targets.len(),
            },
        );
        let timeout = self.limits.call_timeout;
        for idx in targets {
            self.at_servers(|servers| {
                servers.request_up(
                    idx,
                    &method,
                    &json!({}),
                    UpPurpose::Fanout {
                        aggregate,
                        method: method.clone(),
                    },
                    timeout,
                )
            });
        }
    }

    /// One page of one server's part of a merged list.
    pub(super) fn on_fanout_page(
        &mut self,
        idx: ServerIdx,
        _id: u64,
        aggregate: u64,
        method: &str,
        message: &Message<'_>,
    ) {
        let result: Option<Value> = message
            .result
            .and_then(|raw| serde_json::from_str(raw).ok());
        let Some(result) = result else {
            let error = message.error.map_or("no result", |raw| raw).to_owned();
            self.fanout_done(aggregate, idx, Some(error));
            return;
        };
        let server = self.upstreams.name(idx).to_owned();
        let page_bytes = message.result.map_or(0, |raw| raw.len());
        let Some(key) = self
            .routing
            .aggregates
            .get(&aggregate)
            .map(|state| state.key)
        else {
            return;
        };
        let items = result
            .get(key)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let max_bytes = self.limits.max_line;
        let (pages, cut) = match self.routing.aggregates.get_mut(&aggregate) {
            Some(state) => state.keep_page(idx, method, items, page_bytes, max_bytes),
            None => (0, None),
        };
        if let Some(why) = cut {
            tracing::warn!(server.id = %server, "{why}: the rest is left out of the list, and cannot be routed to it");
            self.fanout_done(aggregate, idx, None);
            return;
        }
        if let Some(cursor) = result.get("nextCursor").and_then(Value::as_str) {
            if pages >= super::MAX_LIST_PAGES {
                // Only this server's entries are left out.
                if let Some(state) = self.routing.aggregates.get_mut(&aggregate) {
                    state.items.remove(&idx);
                }
                let why = super::upstreams::too_many_pages(&server, method);
                self.fanout_done(aggregate, idx, Some(why));
                return;
            }
            let timeout = self.limits.call_timeout;
            self.at_servers(|servers| {
                servers.request_up(
                    idx,
                    method,
                    &json!({"cursor": cursor}),
                    UpPurpose::Fanout {
                        aggregate,
                        method: method.to_owned(),
                    },
                    timeout,
                )
            });
            return;
        }
        self.fanout_done(aggregate, idx, None);
    }
}

/// A `resources/read` result of server `server` before the host sees it:
/// each entry of its `contents` whose URI breaks a line or hides characters
/// is left out (and logged), as it would be left out of `resources/list`.
/// The line as it came when nothing in it had to change.
fn screen_contents(server: &str, line: String) -> String {
    let Ok(mut response) = serde_json::from_str::<Value>(&line) else {
        return line;
    };
    let Some(contents) = response
        .pointer_mut("/result/contents")
        .and_then(Value::as_array_mut)
    else {
        return line;
    };
    let before = contents.len();
    contents.retain(|content| {
        let uri = content.get("uri").and_then(Value::as_str).unwrap_or("");
        let Some(problem) = uri_problem(uri) else {
            return true;
        };
        tracing::warn!(server.id = %server, resource.uri = %escape_line(uri), "its URI {problem}; the entry is left out of the contents `resources/read` gives the host");
        false
    });
    if contents.len() == before {
        return line;
    }
    response.to_string()
}

/// The `initialize` result for a host that speaks `version`: the server's
/// own in wrap mode (the gateway tells the host when its tool list
/// changes), the gateway's in gateway mode, with every server's
/// capabilities and instructions.
pub(super) fn initialize_result(version: &str, upstreams: &Upstreams) -> Value {
    if upstreams.wraps() {
        wrapped_initialize_result(version, upstreams)
    } else {
        gateway_initialize_result(version, upstreams)
    }
}

/// Whether server `idx`'s prompt `item` is listed, with its name as the
/// host sees it (prefixed): a name that could be another server's is not
/// listed (and `prompts/get` refuses it: it does not resolve).
fn prompt_shown(upstreams: &Upstreams, idx: ServerIdx, item: &mut Value) -> bool {
    let Some(own) = item.get("name").and_then(Value::as_str) else {
        return false;
    };
    let prefixed = upstreams.prefixed(idx, own);
    if !matches!(upstreams.resolve(&prefixed), Ok((owner, _)) if owner == idx) {
        tracing::warn!(server.id = %upstreams.name(idx), prompt.name = %escape_line(own), "the prompt's prefixed name `{}` could belong to another server; it is not listed", escape_line(&prefixed));
        return false;
    }
    if let Some(object) = item.as_object_mut() {
        object.insert("name".to_owned(), Value::String(prefixed));
    }
    true
}

/// `logging/setLevel` in gateway mode: sent to each ready server that
/// logs, into the outbox (their answers not needed: the host is answered
/// at once).
fn set_level_everywhere(
    upstreams: &mut Upstreams,
    inflight: &mut InFlight,
    outbox: &mut Outbox,
    request: &HostRequest,
    timeout: std::time::Duration,
) {
    let targets: Vec<(ServerIdx, u64)> = upstreams
        .iter_mut()
        .enumerate()
        // `logging/setLevel` is gone from 2026-07-28.
        .filter(|(_, up)| {
            up.phase == Phase::Ready && !up.modern && up.capability("logging").is_some()
        })
        .map(|(idx, up)| (idx, up.next_id()))
        .collect();
    for (idx, id) in targets {
        let generation = upstreams
            .get(idx)
            .map_or(0, super::upstreams::Upstream::generation);
        // Each server sets its own level; the answers are not needed.
        inflight.wait_up(idx, id, UpPurpose::Quiet, timeout);
        outbox.upstream(idx, generation, request.with_id(&id.to_string()), None);
    }
}

/// The extension of 2026-07-28 that tasks are.
const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// Capabilities (a host's, or a server's) without tasks (the 2025-11-25
/// `tasks` capability and the 2026-07-28 extension): the gateway does not
/// relay them, since a task's result would reach the host without the
/// checks of its call's answer (taint, output schema, outcome) and a
/// task's questions unmarked. A host and a server that are told of no
/// tasks use none.
fn without_tasks(capabilities: &mut Value) {
    let Some(object) = capabilities.as_object_mut() else {
        return;
    };
    object.remove("tasks");
    if let Some(Value::Object(extensions)) = object.get_mut("extensions") {
        extensions.remove(TASKS_EXTENSION);
    }
}

/// A server's instructions as its section of the gateway's: sanitized,
/// and every line that would read as a heading (`#` first, after blank
/// space) escaped, so a server cannot start a section that reads as
/// another server's (`## other`). The Unicode line and paragraph
/// separators end a line too.
fn own_section(text: &str) -> String {
    sanitize(text)
        .text
        .split(['\n', '\u{2028}', '\u{2029}'])
        .map(|line| {
            if line.trim_start().starts_with('#') {
                format!("\\{}", line.trim_start())
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The key of the entries of a list the gateway screens, by its method.
fn list_key(method: &str) -> Option<&'static str> {
    match method {
        "prompts/list" => Some("prompts"),
        "resources/list" => Some("resources"),
        "resources/templates/list" => Some("resourceTemplates"),
        _ => None,
    }
}

/// Screens one server's entries of a list (`key`: `prompts`, `resources`
/// or `resourceTemplates`) before a host sees them, so what the server
/// sends a person is what it is (issue 11): a prompt whose name breaks the
/// tool-name rule, and a resource whose URI breaks a line or hides
/// characters, is left out (and logged); every name and title left is
/// sanitized and made one line, every description sanitized. Returns the
/// prompts left out, by name, with why.
fn screen(server: &str, key: &str, items: &mut Vec<Value>) -> Vec<(String, String)> {
    let mut refused = Vec::new();
    match key {
        "prompts" => {
            let names: Vec<String> = items
                .iter()
                .map(|item| {
                    item.get("name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned()
                })
                .collect();
            let troubles = super::catalog::name_troubles(&names);
            let mut troubles = troubles.into_iter();
            let mut names = names.into_iter();
            items.retain(|item| {
                let name = names.next().unwrap_or_default();
                let trouble = troubles.next().flatten();
                let why = match trouble {
                    Some(trouble) => trouble.describe(),
                    None => match arguments_problem(item.get("arguments")) {
                        Some(problem) => format!("it {problem}"),
                        None => return true,
                    },
                };
                tracing::warn!(server.id = %server, prompt.name = %escape_line(&name), "{why}; the prompt is not listed, and a request for it is refused");
                refused.push((name, why));
                false
            });
        }
        _ => {
            let field = if key == "resources" {
                "uri"
            } else {
                "uriTemplate"
            };
            items.retain(|item| {
                let uri = item.get(field).and_then(Value::as_str).unwrap_or("");
                let Some(problem) = uri_problem(uri) else {
                    return true;
                };
                tracing::warn!(server.id = %server, resource.uri = %escape_line(uri), "its URI {problem}; the entry of `{key}` is not listed, and a request for it is refused");
                false
            });
        }
    }
    for item in items.iter_mut() {
        clean_texts(item);
        // A prompt's arguments are shown like the prompt (their names,
        // which the host sends back, passed the check above, so cleaning
        // leaves them as sent).
        if let Some(Value::Array(arguments)) = item.get_mut("arguments") {
            arguments.iter_mut().for_each(clean_texts);
        }
    }
    refused
}

/// The `title` and `description` of an entry (and its `name`, where the
/// entry is a resource whose name is only shown) without invisible
/// characters, the name and title on one line.
fn clean_texts(item: &mut Value) {
    let Some(object) = item.as_object_mut() else {
        return;
    };
    for (field, value) in object.iter_mut() {
        let Value::String(text) = value else {
            continue;
        };
        let clean = match field.as_str() {
            "name" | "title" => one_line(&sanitize(text).text),
            "description" => sanitize(text).text,
            _ => continue,
        };
        if clean != *text {
            *text = clean;
        }
    }
}

/// The `initialize` result a host gets in wrap mode: the one server's
/// capabilities (tasks left out, tools' list changes announced) and its
/// information, each text made what a host can show.
fn wrapped_initialize_result(version: &str, upstreams: &Upstreams) -> Value {
    let info = upstreams
        .get(0)
        .and_then(|up| up.info.clone())
        .unwrap_or_else(|| json!({}));
    let mut capabilities = info
        .get("capabilities")
        .cloned()
        .unwrap_or_else(|| json!({}));
    without_tasks(&mut capabilities);
    if let Some(caps) = capabilities.as_object_mut() {
        caps.insert("tools".to_owned(), json!({"listChanged": true}));
    }
    let mut server_info = info
        .get("serverInfo")
        .cloned()
        .unwrap_or_else(|| json!({"name": "hintgate", "version": env!("CARGO_PKG_VERSION")}));
    // A host shows the server's name and title as its own
    // lines: one line each, nothing hidden.
    clean_texts(&mut server_info);
    if let Some(Value::String(version)) = server_info.get_mut("version") {
        *version = one_line(&sanitize(version).text);
    }
    let mut result = json!({
        "protocolVersion": version,
        "capabilities": capabilities,
        "serverInfo": server_info,
    });
    if let (Some(object), Some(instructions)) = (
        result.as_object_mut(),
        info.get("instructions").and_then(Value::as_str),
    ) {
        object.insert(
            "instructions".to_owned(),
            Value::String(sanitize(instructions).text),
        );
    }
    result
}

/// The `initialize` result a host gets in gateway mode: what any server
/// offers, and each server's instructions in a section of its own.
fn gateway_initialize_result(version: &str, upstreams: &Upstreams) -> Value {
    let mut capabilities = Map::new();
    capabilities.insert("tools".to_owned(), json!({"listChanged": true}));
    let any = |name: &str| upstreams.iter().any(|up| up.capability(name).is_some());
    let any_flag = |name: &str, flag: &str| {
        upstreams.iter().any(|up| {
            up.capability(name)
                .and_then(|caps| caps.get(flag))
                .and_then(Value::as_bool)
                .unwrap_or(false)
        })
    };
    if any("resources") {
        capabilities.insert(
            "resources".to_owned(),
            json!({"subscribe": any_flag("resources", "subscribe"), "listChanged": any_flag("resources", "listChanged")}),
        );
    }
    if any("prompts") {
        capabilities.insert(
            "prompts".to_owned(),
            json!({"listChanged": any_flag("prompts", "listChanged")}),
        );
    }
    if any("completions") {
        capabilities.insert("completions".to_owned(), json!({}));
    }
    if any("logging") {
        capabilities.insert("logging".to_owned(), json!({}));
    }
    let instructions: Vec<String> = upstreams
        .iter()
        .filter_map(|up| {
            let text = up.info.as_ref()?.get("instructions")?.as_str()?;
            Some(format!("## {}\n{}", up.name, own_section(text)))
        })
        .collect();
    let mut result = json!({
        "protocolVersion": version,
        "capabilities": capabilities,
        "serverInfo": {"name": "hintgate", "title": "hintgate gateway", "version": env!("CARGO_PKG_VERSION")},
    });
    if !instructions.is_empty()
        && let Some(object) = result.as_object_mut()
    {
        object.insert(
            "instructions".to_owned(),
            Value::String(instructions.join("\n\n")),
        );
    }
    result
}

/// Where a host request other than a tool call, an `initialize` or a
/// `tools/list` goes ([`route_of`]).
#[derive(Debug, PartialEq)]
pub(crate) enum Route {
    /// Merged across the servers: the capability a server needs, and the
    /// key of the list in the result.
    FanOut(&'static str, &'static str),
    /// To one server, with its own params where they differ from the
    /// host's (a prompt's or a completion's own name).
    To(ServerIdx, Option<Value>),
    /// `logging/setLevel` in gateway mode: every server is told, and the
    /// host is answered here.
    SetLevelEverywhere,
    /// Answered here with a JSON-RPC error: its code and why.
    Refused(i64, String),
}

/// Where `request` (whose params are `params`) goes: in wrap mode to the
/// one server, tasks and what the policy refuses answered here; in gateway
/// mode lists merged across servers, a resource to the server that listed
/// it, a prompt or a completion to the server its name leads to under its
/// own name, what the policy refuses and any other method answered here.
pub(super) fn route_of(
    mode: &Mode,
    routing: &Routing,
    upstreams: &Upstreams,
    request: &HostRequest,
    params: &Value,
) -> Route {
    if *mode == Mode::Wrap {
        return wrapped_route(routing, upstreams, request.method.as_str(), params);
    }
    let method = request.method.as_str();
    let refused = |why: String| Route::Refused(-32602, why);
    match method {
        "resources/list" => Route::FanOut("resources", "resources"),
        "resources/templates/list" => Route::FanOut("resources", "resourceTemplates"),
        "prompts/list" => Route::FanOut("prompts", "prompts"),
        "logging/setLevel" => Route::SetLevelEverywhere,
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
            let uri = params.get("uri").and_then(Value::as_str).unwrap_or("");
            if let Some(why) = routing.refusal(upstreams, 0, method, uri) {
                return refused(why);
            }
            // A request that started its server again (which forgot what
            // it listed) still goes where it was routed.
            match routing.resource_owner(upstreams, uri).or(request.restarted) {
                Some(idx) => Route::To(idx, None),
                None => refused(format!(
                    "unknown resource `{}`; list resources first",
                    escape_line(uri)
                )),
            }
        }
        "prompts/get" => prompt_route(routing, upstreams, params),
        "completion/complete" => {
            match routing.completion_target(upstreams, params, request.restarted) {
                Ok((idx, params)) => Route::To(idx, params),
                Err(why) => {
                    tracing::warn!("a `completion/complete` is refused: {why}");
                    refused(why)
                }
            }
        }
        other => Route::Refused(
            -32601,
            format!("method `{other}` is not supported by the gateway in gateway mode"),
        ),
    }
}

/// Where a request goes in wrap mode: to the one server, tasks and what the
/// policy refuses answered here, the prompt list merged across its pages.
fn wrapped_route(routing: &Routing, upstreams: &Upstreams, method: &str, params: &Value) -> Route {
    let refused = |why: String| Route::Refused(-32602, why);
    if method.starts_with("tasks/") {
        let text = "hintgate does not relay tasks: a task's result and its questions would reach the host without the gateway's checks";
        return Route::Refused(-32601, text.to_owned());
    }
    let subject = match method {
        "prompts/get" => params.get("name"),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => params.get("uri"),
        _ => None,
    };
    if let Some(subject) = subject {
        let subject = subject.as_str().unwrap_or("");
        if let Some(why) = routing.refusal(upstreams, 0, method, subject) {
            return refused(why);
        }
    }
    if method == "completion/complete"
        && let Err(why) = routing.completion_target(upstreams, params, None)
    {
        tracing::warn!("a `completion/complete` is refused: {why}");
        return refused(why);
    }
    // The gateway follows every page of the server's prompts and
    // screens them at once, so prompts that look alike are found
    // across pages, as tools are: a page the host had seen could
    // not be taken back.
    if method == "prompts/list" {
        return Route::FanOut("prompts", "prompts");
    }
    Route::To(0, None)
}

/// Where a `prompts/get` goes in gateway mode: to the server whose prompt
/// the name is, under its own name, unless the policy refuses it.
fn prompt_route(routing: &Routing, upstreams: &Upstreams, params: &Value) -> Route {
    let refused = |why: String| Route::Refused(-32602, why);
    let name = params.get("name").and_then(Value::as_str).unwrap_or("");
    match upstreams.resolve(name) {
        Ok((idx, own)) => {
            if let Some(why) = routing.refusal(upstreams, idx, "prompts/get", &own) {
                return refused(why);
            }
            let mut params = params.clone();
            if let Some(object) = params.as_object_mut() {
                object.insert("name".to_owned(), Value::String(own));
            }
            Route::To(idx, Some(params))
        }
        Err(Unresolved::Unknown) => refused(format!("unknown prompt `{}`", escape_line(name))),
        Err(Unresolved::Ambiguous(found)) => {
            refused(format!("prompt `{name}`: {}", upstreams.ambiguity(&found)))
        }
    }
}

/// The `server/discover` result for a host, made from the `initialize`
/// result a host of `version` gets.
pub(super) fn discover_result(version: &str, upstreams: &Upstreams) -> Value {
    let init = initialize_result(version, upstreams);
    let mut supported = vec![crate::versions::MODERN_VERSION];
    supported.extend(LEGACY_VERSIONS);
    let mut result = json!({
        "supportedVersions": supported,
        "capabilities": init.get("capabilities").cloned().unwrap_or_else(|| json!({})),
        "serverInfo": init.get("serverInfo").cloned().unwrap_or(Value::Null),
    });
    if let (Some(object), Some(instructions)) = (result.as_object_mut(), init.get("instructions")) {
        object.insert("instructions".to_owned(), instructions.clone());
    }
    super::era::modernize(true, "server/discover", &mut result);
    result
}

#[cfg(test)]
mod tests {
    use hintgate_policy::config::parse_str;
    use hintgate_policy::decide::Policy;

    use super::*;
    use crate::gateway::Mode;

    /// The servers `names`, each with resources.
    fn upstreams(names: &[&str], mode: Mode) -> Upstreams {
        let configs = names
            .iter()
            .map(|name| {
                let (config, _) = parse_str(&format!("[servers.{name}]\ncommand = \"x\"\n"));
                let policy = Policy::new(config.unwrap());
                policy.config().servers.values().next().unwrap().clone()
            })
            .collect();
        let mut upstreams = Upstreams::new(configs, mode, "__".to_owned());
        for idx in 0..names.len() {
            if let Some(up) = upstreams.get_mut(idx) {
                up.info = Some(json!({"capabilities": {"resources": {}}}));
            }
        }
        upstreams
    }

    fn listed(routing: &mut Routing, idx: ServerIdx, key: &str, names: &[&str]) -> usize {
        let names = names.iter().map(|name| (*name).to_owned()).collect();
        routing.replace(idx, key, names)
    }

    #[test]
    fn a_resource_goes_to_the_first_server_that_listed_it_or_the_only_one_with_resources() {
        let servers = upstreams(&["a", "b"], Mode::Gateway);
        let mut routing = Routing::default();
        assert_eq!(listed(&mut routing, 0, "resources", &["file:///x"]), 0);
        // The same URI from a server after it: the first keeps it.
        assert_eq!(
            listed(&mut routing, 1, "resources", &["file:///x", "file:///y"]),
            1
        );
        assert_eq!(routing.resource_owner(&servers, "file:///x"), Some(0));
        assert_eq!(routing.resource_owner(&servers, "file:///y"), Some(1));
        // Two servers with resources: an unlisted URI is nobody's.
        assert_eq!(routing.resource_owner(&servers, "file:///z"), None);
        // A server that starts again forgets what it listed.
        routing.forget(1);
        assert_eq!(routing.resource_owner(&servers, "file:///y"), None);
        // One server with resources: whatever is not listed is its.
        let one = upstreams(&["a"], Mode::Gateway);
        assert_eq!(
            Routing::default().resource_owner(&one, "file:///z"),
            Some(0)
        );
    }

    #[test]
    fn a_completion_goes_only_where_an_exact_valid_name_or_a_listed_uri_leads() {
        let servers = upstreams(&["a", "b"], Mode::Gateway);
        let mut routing = Routing::default();
        listed(&mut routing, 1, "resourceTemplates", &["file:///{path}"]);
        let prompt = json!({"ref": {"type": "ref/prompt", "name": "b__greet"}});
        let (idx, params) = routing.completion_target(&servers, &prompt, None).unwrap();
        assert_eq!(idx, 1);
        // The server gets its own name of the prompt.
        assert_eq!(params.unwrap()["ref"]["name"], "greet");
        let template = json!({"ref": {"type": "ref/resource", "uri": "file:///{path}"}});
        assert_eq!(
            routing.completion_target(&servers, &template, None),
            Ok((1, None))
        );
        let unknown = json!({"ref": {"type": "ref/resource", "uri": "file:///other"}});
        let why = routing
            .completion_target(&servers, &unknown, None)
            .unwrap_err();
        assert!(why.contains("which no server listed"), "{why}");
        // A request that started its server again still goes there.
        assert_eq!(
            routing.completion_target(&servers, &unknown, Some(0)),
            Ok((0, None))
        );
        let nobody = json!({"ref": {"type": "ref/prompt", "name": "c__greet"}});
        let why = routing
            .completion_target(&servers, &nobody, None)
            .unwrap_err();
        assert!(why.contains("unknown prompt `c__greet`"), "{why}");
        let other = json!({"ref": {"type": "ref/other"}});
        assert!(routing.completion_target(&servers, &other, None).is_err());
        // Wrap mode: the one server judges other kinds of `ref` itself.
        let wrapped = upstreams(&["a"], Mode::Wrap);
        assert_eq!(
            Routing::default().completion_target(&wrapped, &other, None),
            Ok((0, None))
        );
    }

    #[test]
    fn a_prompt_left_out_of_a_listing_or_a_uri_that_hides_characters_is_refused() {
        let servers = upstreams(&["a"], Mode::Wrap);
        let mut routing = Routing::default();
        let page = json!({"jsonrpc": "2.0", "id": 1, "result": {"prompts": [
            {"name": "greet"},
            {"name": "bad\u{202e}name"},
        ]}})
        .to_string();
        let shown = routing.screen_page(0, "a", "prompts", page, true);
        let shown: Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(shown["result"]["prompts"], json!([{"name": "greet"}]));
        let why = routing
            .refusal(&servers, 0, "prompts/get", "bad\u{202e}name")
            .unwrap();
        assert!(why.starts_with("prompt `"), "{why}");
        assert!(why.contains("of server `a` is refused"), "{why}");
        assert_eq!(routing.refusal(&servers, 0, "prompts/get", "greet"), None);
        // A fresh listing replaces what was remembered.
        let page = json!({"jsonrpc": "2.0", "id": 2, "result": {"prompts": []}}).to_string();
        let unchanged = routing.screen_page(0, "a", "prompts", page.clone(), true);
        assert_eq!(unchanged, page);
        assert!(
            routing
                .refusal(&servers, 0, "prompts/get", "bad\u{202e}name")
                .is_some_and(|why| why.contains("its name")),
        );
        let uri = "file:///a\nb";
        let why = routing.refusal(&servers, 0, "resources/read", uri).unwrap();
        assert!(why.starts_with("resource `"), "{why}");
        assert_eq!(
            routing.refusal(&servers, 0, "resources/read", "file:///a"),
            None
        );
    }

    #[test]
    fn a_read_result_keeps_no_entry_under_a_uri_that_breaks_a_line() {
        let line = json!({"jsonrpc": "2.0", "id": 1, "result": {"contents": [
            {"uri": "file:///a", "text": "a"},
            {"uri": "file:///b\nc", "text": "b"},
        ]}})
        .to_string();
        let shown: Value = serde_json::from_str(&screen_contents("a", line)).unwrap();
        assert_eq!(
            shown["result"]["contents"],
            json!([{"uri": "file:///a", "text": "a"}])
        );
        let clean = json!({"jsonrpc": "2.0", "id": 1, "result": {"contents": []}}).to_string();
        assert_eq!(screen_contents("a", clean.clone()), clean);
    }

    fn merge(routing: &mut Routing, key: &'static str, servers: usize) -> u64 {
        let line = r#"{"jsonrpc":"2.0","id":3,"method":"prompts/list"}"#;
        let message = crate::frame::Message::parse(line).unwrap();
        let request = HostRequest::new(
            SessionId::FIRST,
            line.to_owned(),
            message.spans(),
            crate::gateway::request::Method::of(message.method()),
        );
        let aggregate = routing.next_number();
        routing.aggregates.insert(
            aggregate,
            Aggregate {
                request,
                key,
                items: BTreeMap::new(),
                pages: BTreeMap::new(),
                remaining: servers,
            },
        );
        aggregate
    }

    #[test]
    fn a_merged_list_comes_once_every_server_finished_in_configuration_order() {
        let servers = upstreams(&["a", "b"], Mode::Gateway);
        let mut routing = Routing::default();
        let aggregate = merge(&mut routing, "prompts", 2);
        let page = |routing: &mut Routing, idx, names: &[&str]| {
            let items = names.iter().map(|name| json!({"name": name})).collect();
            let state = routing.aggregates.get_mut(&aggregate).unwrap();
            state.keep_page(idx, "prompts/list", items, 10, 1 << 20);
        };
        page(&mut routing, 1, &["greet", "bad\u{202e}name"]);
        assert!(routing.part_done(&servers, aggregate, 1, None).is_none());
        page(&mut routing, 0, &["hello"]);
        let (request, merged) = routing.part_done(&servers, aggregate, 0, None).unwrap();
        assert_eq!(request.id(), "3");
        // In configuration order, prefixed; the prompt left out for its
        // name is refused when asked for.
        assert_eq!(
            merged,
            json!({"prompts": [{"name": "a__hello"}, {"name": "b__greet"}]})
        );
        assert!(
            routing
                .refusal(&servers, 1, "prompts/get", "bad\u{202e}name")
                .is_some()
        );
        assert!(routing.aggregates.is_empty());
    }

    #[test]
    fn a_failed_part_leaves_what_its_server_listed_before() {
        let servers = upstreams(&["a", "b"], Mode::Gateway);
        let mut routing = Routing::default();
        listed(&mut routing, 1, "resources", &["file:///old"]);
        let aggregate = merge(&mut routing, "resources", 2);
        let state = routing.aggregates.get_mut(&aggregate).unwrap();
        state.keep_page(
            1,
            "resources/list",
            vec![json!({"uri": "file:///new"})],
            10,
            1 << 20,
        );
        assert!(
            routing
                .part_done(&servers, aggregate, 1, Some("it broke".to_owned()))
                .is_none()
        );
        assert_eq!(routing.resource_owner(&servers, "file:///old"), Some(1));
        let state = routing.aggregates.get_mut(&aggregate).unwrap();
        state.keep_page(
            0,
            "resources/list",
            vec![json!({"uri": "file:///a"})],
            10,
            1 << 20,
        );
        let (_, merged) = routing.part_done(&servers, aggregate, 0, None).unwrap();
        assert_eq!(
            merged,
            json!({"resources": [{"uri": "file:///a"}, {"uri": "file:///new"}]})
        );
        // A complete listing replaces what its server listed.
        assert_eq!(routing.resource_owner(&servers, "file:///a"), Some(0));
    }

    /// A host request of `method` with `params`.
    fn request(method: &str, params: &Value) -> HostRequest {
        use crate::gateway::request::Method;
        let line =
            json!({"jsonrpc": "2.0", "id": 3, "method": method, "params": params}).to_string();
        let message = crate::frame::Message::parse(&line).unwrap();
        let spans = message.spans();
        HostRequest::new(
            SessionId::FIRST,
            line.clone(),
            spans,
            Method::of(message.method()),
        )
    }

    #[test]
    fn every_other_request_goes_to_one_server_is_merged_or_is_answered_here() {
        let servers = upstreams(&["a", "b"], Mode::Gateway);
        let mut routing = Routing::default();
        listed(&mut routing, 1, "resources", &["file:///y"]);
        let route = |method: &str, params: Value| {
            let request = request(method, &params);
            route_of(&Mode::Gateway, &routing, &servers, &request, &params)
        };
        let refused = |route: Route, code: i64, part: &str| match route {
            Route::Refused(got, why) => {
                assert_eq!(got, code, "{why}");
                assert!(why.contains(part), "{why}");
            }
            other => panic!("not refused: {other:?}"),
        };
        assert_eq!(
            route("resources/list", json!({})),
            Route::FanOut("resources", "resources")
        );
        assert_eq!(
            route("resources/templates/list", json!({})),
            Route::FanOut("resources", "resourceTemplates")
        );
        assert_eq!(
            route("prompts/list", json!({})),
            Route::FanOut("prompts", "prompts")
        );
        assert_eq!(
            route("logging/setLevel", json!({"level": "info"})),
            Route::SetLevelEverywhere
        );
        // A resource goes to the server that listed it, or nowhere.
        assert_eq!(
            route("resources/read", json!({"uri": "file:///y"})),
            Route::To(1, None)
        );
        refused(
            route("resources/read", json!({"uri": "file:///z"})),
            -32602,
            "unknown resource",
        );
        // A prompt goes to its server under its own name.
        let Route::To(1, Some(params)) = route("prompts/get", json!({"name": "b__greet"})) else {
            panic!("a prompt was not routed by its prefix");
        };
        assert_eq!(params["name"], json!("greet"));
        refused(
            route("prompts/get", json!({"name": "c__greet"})),
            -32602,
            "unknown prompt",
        );
        refused(
            route("tasks/get", json!({})),
            -32601,
            "not supported by the gateway in gateway mode",
        );
        // Wrap mode: everything to the one server but tasks.
        let one = upstreams(&["a"], Mode::Wrap);
        let wrapped = |method: &str, params: Value| {
            let request = request(method, &params);
            route_of(&Mode::Wrap, &Routing::default(), &one, &request, &params)
        };
        assert_eq!(
            wrapped("resources/read", json!({"uri": "file:///z"})),
            Route::To(0, None)
        );
        assert_eq!(
            wrapped("prompts/get", json!({"name": "greet"})),
            Route::To(0, None)
        );
        assert_eq!(
            wrapped("prompts/list", json!({})),
            Route::FanOut("prompts", "prompts")
        );
        refused(
            wrapped("tasks/list", json!({})),
            -32601,
            "does not relay tasks",
        );
    }
}
