//! The interception pipeline: the one path of every `tools/call`.
//!
//! A host's call is read once into a [`CallContext`] and goes, in this
//! order, through [`Gateway::intercept`]. The session's facts are read once
//! ([`SessionFacts`]); steps 1 to 5 are methods of [`Stages`], a view of
//! the parts they read that can neither send nor start anything, each
//! passing the call on or saying where it leaves it ([`Exit`]: it ends,
//! waits, is asked about, waits for the decision hook, or needs a server
//! started or listed first, which [`Gateway::meet`] does); what a step
//! decides is a pure function of `steps`, and each step is unit-tested in
//! `stages` with parts built by hand, no gateway:
//!
//! 1. **resolve** (`resolve_call`): the host's name to a server and the
//!    server's own name (a name two servers' prefixes fit is refused, never
//!    guessed);
//! 2. **definition ready** (`definition_ready`): the server runs and its
//!    tools are listed (else the call waits, and comes back here when that
//!    changes);
//! 3. **decide** (`decide_call`): a tool whose name is not plain, or looks
//!    like another of its server's, is refused (`hintgate_policy::name`);
//!    the facts of the call are read once ([`CallFacts`]: the pin, the
//!    session's taint, scope and standing approval, the sandbox's proof,
//!    and which instance of its server the call goes to,
//!    [`Policy::instance`]), and [`steps::decide`] gives [`Policy::decide`]
//!    on them, with the decision hook where it takes part; a deny ends
//!    here; a call for the read-only instance waits for it to run and is
//!    refused unless it lists the definition decided on (step 3b,
//!    `read_only_ready`);
//! 4. **validate** (`validate`): the arguments, parsed once, against the
//!    tool's input schema ([`steps::check_arguments`]); a call whose
//!    idempotency key ran with these arguments is answered from the store;
//! 5. **ask** (`approve`, [`steps::approval`]), when the decision says so:
//!    a person answers through the host (elicitation, or an input-required
//!    result) or the approval queue;
//! 6. **audit, then forward**: the call's record joins the turn's batch, and
//!    the call is sent once that batch is durable ([`Gateway::end_turn`]).
//!
//! Before step 1, a 2026-07-28 host's retry that answers a server's own
//! question (step 0) is no new call: it resumes the call that asked. And
//! before anything, a gateway asked to stop refuses the call (`shutdown`).
//!
//! A person's approval sends the held call through the pipeline again from
//! the top, with the approved definition noted: step 5 lets it through when
//! the definition decided on is still that one, and asks again when the
//! server changed it meanwhile. A retry (design §4.5) takes the same path.
//! One entry joins partway: a 2026-07-28 server's input-required
//! continuation (the same call, decided and recorded before) is recorded
//! and sent again with the server's questions answered. A call never
//! reaches a server but through [`Gateway::send_call`], which only the end
//! of a turn calls, for calls the pipeline forwarded, and which sends one
//! only to the start of its server whose definitions were decided on. A
//! call that fails there, or is not sent, goes where
//! [`retry::after_failure`] says (design §4.5).
//!
//! [`Policy::decide`]: hintgate_policy::decide::Policy::decide
//! [`Stages`]: super::stages::Stages
//! [`Exit`]: super::call::Exit
//! [`retry::after_failure`]: super::retry::after_failure
//! [`Policy::instance`]: hintgate_policy::decide::Policy::instance

use std::sync::Arc;

use hintgate_policy::config::Instance;
use hintgate_policy::decide::{Decision, RememberOffer, Remembered, SessionState};
use hintgate_policy::hook::Question;
use hintgate_policy::pin::PinDigest;
use hintgate_store::Remember;
use serde_json::Value;
use tokio::time::Instant;

use super::call::{CallContext, CallEnd, Need, Outcome, Refusal, Step, error_result};
use super::catalog::{Catalog, Listing};
use super::inflight::UpPurpose;
use super::journal::unix_now;
use super::lookup::Lookup;
use super::records::{end_line, taint_by_replay};
use super::request::{HostRequest, ServerIdx};
use super::retry::{AfterFailure, FailedCall, Failure, after_failure};
use super::stages::{Answered, read_only_lists};
use super::steps::{CallFacts, SessionFacts};
use super::upstreams::{Phase, Upstreams};
use super::{Gateway, Waiting};
use crate::frame::Message;
use crate::json::{ObjectWriter, members, string_literal};
use crate::telemetry::CallTrace;

/// A person approved a call: pin the definition they saw, and remember
/// the approval for the session or always where the decision allows it.
pub(super) fn record_approval(
    catalog: &mut Catalog,
    sessions: &mut super::session::Sessions,
    upstreams: &super::upstreams::Upstreams,
    store: Option<&Arc<dyn hintgate_store::Store>>,
    cx: &CallContext,
    remember: Remember,
) {
    let Some(idx) = cx.server() else {
        return;
    };
    let may_remember = cx
        .decision
        .as_ref()
        .is_some_and(|decision| decision.remember == RememberOffer::UpToAlways);
    if remember == Remember::Session
        && may_remember
        && let Some(host) = sessions.get_mut(&cx.request.session)
    {
        host.remembered.insert((idx, cx.tool().to_owned()));
    }
    let Some(digest) = cx.digest() else {
        return;
    };
    let always = remember == Remember::Always && may_remember && store.is_some();
    let name = upstreams.name(idx).to_owned();
    if let Err(err) = catalog.approve(idx, &name, cx.tool(), digest, always, unix_now()) {
        tracing::error!(server.id = %name, tool.name = %cx.tool(), "the approval could not be stored: {err}");
    }
}

// === impl Gateway ===

impl Gateway {
    /// A host's `tools/call`: read once, then the pipeline.
    pub(super) fn on_tools_call(&mut self, request: HostRequest) {
        match CallContext::parse(request) {
            Ok(mut cx) => {
                if self.tracer.is_some() {
                    let traceparent = cx.host_traceparent();
                    cx.trace = Some(Box::new(crate::telemetry::CallTrace::begin(
                        traceparent.as_deref(),
                    )));
                }
                self.run_pipeline(Box::new(cx));
            }
            Err((request, refusal)) => self.records().refuse_unparsed(*request, refusal),
        }
    }

    /// Runs a call through the pipeline and acts on where it ends.
    pub(super) fn run_pipeline(&mut self, cx: Box<CallContext>) {
        let step = self.intercept(cx);
        self.act(step);
    }

    /// The pipeline, top to bottom (see the module's documentation).
    pub(super) fn intercept(&mut self, mut cx: Box<CallContext>) -> Step {
        // A gateway asked to stop sends nothing new: a call read in the
        // same turn as the stop ends here, on record.
        if self.stopping {
            return Step::refused(cx, Refusal::Shutdown);
        }
        let id = cx.request.session;
        let session = SessionFacts::of(id, self.sessions.get(&id));
        // 0. A 2026-07-28 retry that answers a server's own question is no
        //    new call: it resumes the call that asked (see `relay`).
        if session.modern && cx.answers(super::relay::RELAY_KEY) {
            return self.answer_relayed(cx);
        }
        match self.stages().run(&mut cx, session) {
            // 6. Audit, then forward (once this turn's records are durable).
            Ok(()) => Step::Forward(cx),
            Err(exit) => exit.with(cx),
        }
    }

    /// Acts on where the pipeline left a call.
    pub(super) fn act(&mut self, step: Step) {
        match step {
            Step::Forward(cx) => self.record_and_forward(cx),
            Step::Ask(cx) => self.at_desk(|desk| desk.ask(cx)),
            Step::End(cx, end) => self.records().end_call(cx, end),
            Step::Wait(cx) => self.parked.park(
                Waiting::Call(cx),
                self.limits.wait_timeout(),
                &mut self.inflight,
            ),
            Step::Hook(cx, ask) => self.at_desk(|desk| desk.ask_hook(cx, ask)),
            Step::Need(cx, need) => self.meet(cx, need),
            Step::Done => {}
        }
    }

    /// Does what a step said a call needs (a server started, its tools
    /// listed), then runs the call again if that is settled already (ready
    /// or failed), or holds it until it is. Only a settled need runs the
    /// call again, so a step can never ask for the same thing without end.
    fn meet(&mut self, cx: Box<CallContext>, need: Need) {
        let settled = match need {
            Need::Start(idx) => {
                self.at_servers(|servers| servers.start(idx));
                // A start can fail at once (the program does not exist, a
                // sandbox cannot be enforced): then no event will ever wake
                // the call, so it runs again now and is answered.
                self.upstreams
                    .get(idx)
                    .is_some_and(|up| matches!(up.phase, Phase::Ready | Phase::Failed(_)))
            }
            Need::List(idx) => {
                self.at_servers(|servers| servers.list_tools(idx));
                // A server without tools is listed at once.
                self.catalog.server(idx).is_some_and(|server| {
                    matches!(server.listing, Listing::Listed | Listing::Failed(_))
                })
            }
        };
        if settled {
            self.run_pipeline(cx);
        } else {
            self.act(Step::Wait(cx));
        }
    }

    /// Step 6: the call's record joins the turn's batch; the call is sent at
    /// the end of the turn, once the batch is durable.
    pub(super) fn record_and_forward(&mut self, mut cx: Box<CallContext>) {
        cx.trace_mark(|trace| &mut trace.ready);
        let place = self.records().record_call(&cx, None);
        if place.is_none() && self.journal.enabled() {
            // INVARIANT: with a log, no call is sent without its record.
            let refusal = Refusal::Unrecorded("no record could be made of it".to_owned());
            self.records().end_call(cx, CallEnd::Refused(refusal));
            return;
        }
        self.outbox.call(cx, place);
    }

    /// Sends a call whose record is durable. Called only by the end of a
    /// turn, for calls the pipeline forwarded.
    pub(super) fn send_call(&mut self, mut cx: Box<CallContext>) {
        let Some(idx) = cx.server() else {
            return;
        };
        if self.ended_before_send(&cx, idx) {
            return;
        }
        // The server failed or started again since the call was decided:
        // what it lists now was not decided on, and the call never left.
        let target = match send_target(&self.upstreams, &self.catalog, &cx, idx) {
            Ok(target) => target,
            Err(why) => {
                self.call_failed(cx, Failure::Unsent, &why);
                return;
            }
        };
        // The key is claimed right before the send: of two calls with one
        // key, one is sent.
        if let Err(end) = self.keys().claim_key(&mut cx) {
            self.records().record_outcome(&cx, end.outcome());
            taint_by_replay(&mut self.sessions, &self.upstreams, &cx, &end);
            let line = end_line(&self.policy, &self.upstreams, &self.sessions, &cx, &end);
            self.outbox.host(cx.request.session, line);
            return;
        }
        let timeout = self.limits.call_timeout;
        let Some(up) = self.upstreams.get_mut(target) else {
            return;
        };
        let id = up.next_id();
        let modern = up.modern;
        let traceparent = cx.trace.as_deref_mut().map(CallTrace::forwarding);
        let session_meta = self
            .declared
            .for_level(self.sessions.log_level(cx.request.session));
        let Some(line) = call_line(
            &cx,
            self.mode == super::Mode::Wrap,
            modern,
            &session_meta,
            id,
            traceparent.as_deref(),
        ) else {
            drop(session_meta);
            // The params were read before, so this does not happen; if it
            // did, nothing but the decided call may go out.
            let text = "hintgate could not rebuild the call's params; it was not sent";
            let line =
                self.sessions
                    .result_line(cx.request.session, cx.request.id(), &error_result(text));
            self.records().answer_call(&cx, line, Outcome::Failed);
            return;
        };
        cx.sent(Instant::now());
        let turn = self.turn;
        let principal = self.sessions.principal(cx.request.session);
        let sent = self
            .upstreams
            .get_mut(target)
            .map_or(Ok(()), |up| up.send_now(line, turn, principal));
        if let Err(err) = sent {
            // The server has left too much unread: the call is not queued
            // behind it; it fails now, with its outcome recorded (or is
            // retried on the server's next start, where design §4.5 allows).
            let reason = err.reason();
            self.at_servers(|servers| servers.upstream_failed(target, reason.clone()));
            let why = format!(
                "server `{}` {reason}: the call was not sent, and the server is started again on its next request",
                self.upstreams.name(idx)
            );
            self.call_failed(cx, Failure::Failed, &why);
            return;
        }
        self.inflight
            .wait_up(target, id, UpPurpose::Call(cx), timeout);
    }

    /// Its host went away, or the gateway was asked to stop, in the turn
    /// that forwarded the call: nothing new starts now. Its record is
    /// durable, so it ends on record, and was never sent. Whether it ended.
    fn ended_before_send(&mut self, cx: &CallContext, idx: ServerIdx) -> bool {
        let host_gone = self
            .sessions
            .get(&cx.request.session)
            .is_none_or(|host| host.closed);
        if host_gone {
            self.records().record_outcome(cx, Outcome::HostGone);
            return true;
        }
        if self.stopping {
            let text = format!(
                "hintgate shut down before it sent this call to `{}`; it did not run.",
                self.upstreams.name(idx)
            );
            let line = self.sessions.result_line(
                cx.request.session,
                cx.request.id(),
                &error_result(&text),
            );
            self.records().answer_call(cx, line, Outcome::Shutdown);
            return true;
        }
        false
    }

    /// A forwarded call failed or could not be sent: what happens next is
    /// [`after_failure`]'s (design §4.5); this applies it.
    pub(super) fn call_failed(&mut self, mut cx: Box<CallContext>, failure: Failure, reason: &str) {
        let trusted = cx.server().is_some_and(|idx| {
            self.policy
                .server(self.upstreams.name(idx))
                .is_some_and(|server| server.trust == hintgate_policy::tool::Trust::Trusted)
        });
        let next = after_failure(FailedCall {
            failure,
            trusted,
            repeatable: cx.repeatable(),
            key_claimed: cx.idem.as_ref().is_some_and(|idem| idem.claimed),
            attempt: cx.attempt,
        });
        match next {
            AfterFailure::Retry(outcome) => {
                match failure {
                    Failure::Failed => {
                        tracing::warn!(tool.name = %cx.tool(), "{reason}; retrying once (trusted server, and a read-only or idempotent tool or a call with an idempotency key)")
                    }
                    Failure::Unsent => {
                        tracing::debug!(tool.name = %cx.tool(), "{reason}; the call goes through the pipeline again")
                    }
                }
                self.records().record_outcome(&cx, outcome);
                cx.next_attempt();
                self.run_pipeline(cx);
            }
            AfterFailure::Report { outcome, note } => {
                let text = format!("{reason}. {note}");
                let line = self.sessions.result_line(
                    cx.request.session,
                    cx.request.id(),
                    &error_result(&text),
                );
                self.records().answer_call(&cx, line, outcome);
            }
        }
    }

    /// A server's answer to a forwarded call: read (`Stages::answer_of`),
    /// then passed to the host with its outcome on record, or, a 2026-07-28
    /// server's questions to a legacy host, asked of the host one by one.
    pub(super) fn on_call_answer(
        &mut self,
        idx: ServerIdx,
        cx: Box<CallContext>,
        message: &Message<'_>,
    ) {
        match self.stages().answer_of(idx, &cx, message) {
            Answered::Answer(line, outcome) => self.records().answer_call(&cx, line, outcome),
            Answered::Gather(result) => self.gather_for_legacy_host(cx, &result),
        }
    }
}

// === impl Lookup ===

impl Lookup<'_> {
    /// The decision hook's question (a previewer command is asked the same)
    /// about call `cx` to `tool` of server `idx`, decided on `facts`, under
    /// number `id`, with the decision so far.
    pub(super) fn hook_question(
        &self,
        cx: &CallContext,
        idx: ServerIdx,
        tool: &hintgate_policy::tool::Tool,
        facts: &CallFacts,
        id: u64,
        so_far: &Decision,
    ) -> String {
        self.policy.hook_question(&Question {
            id: &id.to_string(),
            call: &facts.call(self.upstreams.name(idx), tool),
            identity: self.catalog.identity(idx).unwrap_or_default(),
            arguments: cx.arguments.as_ref(),
            host: self
                .sessions
                .get(&cx.request.session)
                .and_then(|host| host.principal.as_deref()),
            so_far,
        })
    }

    /// What a call to `tool` of server `idx` is decided on besides its
    /// definition, read once.
    pub(super) fn call_facts(
        &self,
        idx: ServerIdx,
        name: &str,
        tool: &hintgate_policy::tool::Tool,
        digest: PinDigest,
        session: SessionFacts,
    ) -> CallFacts {
        let remembered = if self
            .sessions
            .get(&session.id)
            .is_some_and(|host| host.remembers(idx, name))
        {
            Remembered::Session
        } else {
            self.catalog.approved_always(idx, name, digest)
        };
        let sandbox = self.catalog.sandbox(idx);
        CallFacts {
            digest,
            pin: self.catalog.pin_status(idx, name, digest),
            session: SessionState {
                tainted: session.tainted,
                remembered,
                scope: session.scope,
            },
            sandbox,
            instance: self
                .policy
                .instance(self.upstreams.name(idx), tool, sandbox),
        }
    }
}

/// Where a call whose record is durable is sent: the start of its
/// server whose definitions were decided on, or, for a call decided for
/// the read-only instance, the start of that instance that listed the
/// definition decided on. `Err` says why it cannot be sent (the server
/// stopped or started again since).
pub(super) fn send_target(
    upstreams: &Upstreams,
    catalog: &Catalog,
    cx: &CallContext,
    idx: ServerIdx,
) -> Result<ServerIdx, String> {
    let current = upstreams.get(idx).is_some_and(|up| {
        up.phase == super::upstreams::Phase::Ready && Some(up.generation()) == cx.generation
    });
    if !current {
        return Err(format!(
            "server `{}` stopped or started again before the call was sent",
            upstreams.name(idx)
        ));
    }
    // INVARIANT: a call decided for the read-only instance goes to it,
    // to the start that listed the definition decided on, and nowhere
    // else; the full instance never runs it instead.
    if cx.instance == Instance::Full {
        return Ok(idx);
    }
    let instance = upstreams.get(idx).and_then(|up| up.read_only);
    let current = instance
        .and_then(|instance| upstreams.get(instance))
        .is_some_and(|up| {
            up.phase == super::upstreams::Phase::Ready
                && Some(up.generation()) == cx.read_only.generation
        });
    let listed = instance
        .is_some_and(|instance| read_only_lists(catalog, instance, cx.tool(), cx.digest()).is_ok());
    match instance {
        Some(instance) if current && listed => Ok(instance),
        _ => Err(format!(
            "the read-only instance of `{}` stopped, started again or changed its tools before the call was sent",
            upstreams.name(idx)
        )),
    }
}

/// The line a call goes upstream as: the host's line under the gateway's
/// id, with only what must change changed. The arguments are never
/// re-serialised: in wrap mode to a legacy server the line is the host's
/// with a new id; otherwise the params are rebuilt member by member, the
/// tool's name replaced by the server's own, the gateway's own question and
/// answer removed, a continuation's answers and state put in, and the
/// modern `_meta` added for a 2026-07-28 server. `None` when the params
/// cannot be read (never the host's line instead).
fn call_line(
    cx: &CallContext,
    wrap: bool,
    modern: bool,
    modern_meta: &Value,
    id: u64,
    traceparent: Option<&str>,
) -> Option<String> {
    call_line_with(cx, None, wrap, modern, modern_meta, id, traceparent)
}

/// [`call_line`], with `arguments` (JSON text) in place of the call's own
/// when given: a trusted server's dry run (`dry_run`, which is traced as
/// no span of its own: `traceparent` is `None`).
pub(super) fn call_line_with(
    cx: &CallContext,
    arguments: Option<&str>,
    wrap: bool,
    modern: bool,
    modern_meta: &Value,
    id: u64,
    traceparent: Option<&str>,
) -> Option<String> {
    let id_text = id.to_string();
    let ours = super::era::carries_our_answer(cx);
    let continuation = cx.continuation.as_ref();
    let filled = arguments.or(cx.arguments_filled.as_deref());
    if wrap
        && !modern
        && !ours
        && continuation.is_none()
        && filled.is_none()
        && traceparent.is_none()
    {
        return Some(cx.request.with_id(&id_text));
    }
    let set_meta = modern || traceparent.is_some();
    let meta_ours = meta_ours(modern, modern_meta, traceparent);
    let params = cx.request.line.get(cx.params.span.clone())?;
    let found = members(params).ok()?;
    let mut writer = ObjectWriter::with_capacity(params.len() + 256);
    let mut meta_done = false;
    let mut arguments_done = false;
    for member in &found {
        let text = params.get(member.span.clone()).unwrap_or("");
        let value = params.get(member.value.clone()).unwrap_or("null");
        match member.key.as_ref() {
            "name" => writer.member("name", &string_literal(cx.tool())),
            "arguments" if filled.is_some() => {
                writer.member("arguments", filled.unwrap_or("{}"));
                arguments_done = true;
            }
            "requestState" | "inputResponses" if continuation.is_some() => {}
            "requestState" if ours && super::era::is_our_state(value) => {}
            "inputResponses" if ours => {
                if let Some(rest) = super::era::without_our_answer(value) {
                    writer.member("inputResponses", &rest);
                }
            }
            "_meta" if set_meta => {
                writer.member("_meta", &super::era::merged_meta(value, &meta_ours));
                meta_done = true;
            }
            _ => writer.copy(text),
        }
    }
    if let (Some(filled), false) = (filled, arguments_done) {
        writer.member("arguments", filled);
    }
    if let Some(continuation) = continuation {
        writer.member("inputResponses", &continuation.responses);
        if let Some(state) = &continuation.state {
            writer.member("requestState", state);
        }
    }
    if set_meta && !meta_done {
        writer.member("_meta", &meta_ours.to_string());
    }
    Some(cx.request.with_id_and_params(&id_text, &writer.finish()))
}

/// The `_meta` keys the gateway sets on a call it sends: the 2026-07-28
/// ones (`modern_meta`, for a 2026-07-28 server), and the trace context of
/// the call's forward span (in place of the host's).
fn meta_ours<'a>(
    modern: bool,
    modern_meta: &'a Value,
    traceparent: Option<&str>,
) -> std::borrow::Cow<'a, Value> {
    let Some(traceparent) = traceparent else {
        return std::borrow::Cow::Borrowed(modern_meta);
    };
    let mut meta = if modern {
        modern_meta.clone()
    } else {
        Value::Object(serde_json::Map::new())
    };
    if let Some(object) = meta.as_object_mut() {
        object.insert("traceparent".to_owned(), Value::from(traceparent));
    }
    std::borrow::Cow::Owned(meta)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use hintgate_policy::config::parse_str;
    use hintgate_policy::decide::Policy;
    use hintgate_policy::pin::PinDigest;
    use hintgate_policy::tool::{SandboxProof, Tool};
    use hintgate_store::{MemoryStore, Store};
    use serde_json::json;

    use crate::gateway::catalog::{Catalog, Naming};
    use crate::gateway::stages::read_only_lists;

    /// A catalog whose one server (a read-only instance, as step 3b sees
    /// it) lists `tools`.
    fn listing(tools: &[serde_json::Value]) -> Catalog {
        let (config, _) = parse_str("[servers.fx]\ncommand = \"x\"\ntrust = \"trusted\"\n");
        let policy = Policy::new(config.unwrap());
        let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
        let mut catalog = Catalog::new(1, Some(store));
        catalog
            .open(
                0,
                "fx",
                Some("key".to_owned()),
                "x".to_owned(),
                SandboxProof::default(),
            )
            .unwrap();
        catalog.begin_listing(0);
        catalog.add_page(0, tools.to_vec());
        let naming = Naming { prefix: None };
        catalog.finish_listing(0, "fx", &policy, &naming, 1);
        catalog
    }

    #[test]
    fn step_3b_sends_a_call_to_the_read_only_instance_only_as_the_definition_decided_on() {
        let note = json!({"name": "note", "inputSchema": {"type": "object"}});
        let changed =
            json!({"name": "note", "description": "other", "inputSchema": {"type": "object"}});
        let alike = json!({"name": "read", "inputSchema": {"type": "object"}});
        let alike_too = json!({"name": "READ", "inputSchema": {"type": "object"}});
        let catalog = listing(&[note.clone(), alike.clone(), alike_too]);
        let digest_of = |tool: &serde_json::Value| {
            Some(PinDigest::of(&Tool::from_value(tool.clone()).unwrap()))
        };
        // The definition decided on, listed as it was: the call goes there.
        assert_eq!(
            read_only_lists(&catalog, 0, "note", digest_of(&note)),
            Ok(())
        );
        // Listed otherwise, or decided on nothing: it does not.
        let other = read_only_lists(&catalog, 0, "note", digest_of(&changed)).unwrap_err();
        assert!(other.contains("another definition"), "{other}");
        assert!(read_only_lists(&catalog, 0, "note", None).is_err());
        // Not listed at all.
        let missing = read_only_lists(&catalog, 0, "gone", digest_of(&note)).unwrap_err();
        assert!(missing.contains("does not list `gone`"), "{missing}");
        // Listed under a name that looks like another of its tools.
        let misread = read_only_lists(&catalog, 0, "read", digest_of(&alike)).unwrap_err();
        assert!(misread.contains("could mean another tool"), "{misread}");
    }

    fn call(name: &str) -> crate::gateway::call::CallContext {
        use crate::gateway::request::{HostRequest, Method, SessionId};
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{name}"}}}}"#
        );
        let message = crate::frame::Message::parse(&line).unwrap();
        let spans = message.spans();
        let method = Method::of(message.method());
        let request = HostRequest::new(SessionId::FIRST, line.clone(), spans, method);
        crate::gateway::call::CallContext::parse(request).unwrap()
    }

    #[test]
    fn step_1_routes_a_name_to_one_server_or_ends_the_call() {
        use crate::gateway::call::{CallEnd, Exit, Refusal};
        use crate::gateway::upstreams::Upstreams;
        let configs = ["fs", "docs", "docs_"]
            .iter()
            .map(|name| {
                let (config, _) = parse_str(&format!("[servers.{name}]\ncommand = \"x\"\n"));
                let policy = Policy::new(config.unwrap());
                policy.config().servers.values().next().unwrap().clone()
            })
            .collect();
        let upstreams = Upstreams::new(configs, crate::gateway::Mode::Gateway, "__".to_owned());
        let mut cx = call("fs__read");
        assert!(matches!(
            crate::gateway::stages::resolve_call(&upstreams, &mut cx),
            Ok(0)
        ));
        assert_eq!((cx.server(), cx.tool()), (Some(0), "read"));
        let mut cx = call("other__read");
        assert!(matches!(
            crate::gateway::stages::resolve_call(&upstreams, &mut cx),
            Err(Exit::End(CallEnd::Refused(Refusal::UnknownTool)))
        ));
        assert_eq!(cx.server(), None);
        let mut cx = call("docs___x");
        let Err(Exit::End(CallEnd::Refused(Refusal::AmbiguousName(why)))) =
            crate::gateway::stages::resolve_call(&upstreams, &mut cx)
        else {
            panic!("a name two prefixes fit was routed");
        };
        assert!(why.contains("of server `docs_`"), "{why}");
        assert_eq!(cx.server(), None);
    }
}
