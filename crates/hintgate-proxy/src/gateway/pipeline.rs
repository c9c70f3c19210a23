//! The interception pipeline: the one path of every `tools/call`.
//!
//! A host's call is read once into a [`CallContext`] and goes, in this
//! order, through [`Gateway::intercept`]:
//!
//! 1. **resolve**: the host's name to a server and the server's own name
//!    (a name two servers' prefixes fit is refused, never guessed);
//! 2. **definition ready**: the server runs and its tools are listed (else
//!    the call waits, and comes back here when that changes); a tool whose
//!    name is not plain, or looks like another of its server's, is refused
//!    (`hintgate_policy::name`);
//! 3. **decide**: [`Policy::decide`] on the definition, its pin, the
//!    session's taint and the approvals that stand, and which instance of
//!    its server the call goes to ([`Policy::instance`]); a deny ends here;
//!    a call for the read-only instance waits for it to run and is refused
//!    unless it lists the definition decided on (step 3b);
//! 4. **validate**: the arguments against the tool's input schema;
//! 5. **ask**, when the decision says so: a person answers through the host
//!    (elicitation, or an input-required result) or the approval queue;
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
//! only to the start of its server whose definitions were decided on.
//!
//! [`Policy::decide`]: hintgate_policy::decide::Policy::decide
//! [`Policy::instance`]: hintgate_policy::decide::Policy::instance

use hintgate_policy::config::Instance;
use hintgate_policy::decide::{
    Call, Decision, HookAnswer, RememberOffer, Remembered, Scope, SessionState, Verdict,
};
use hintgate_policy::hook::Question;
use hintgate_store::Remember;
use serde_json::Value;
use tokio::time::Instant;

use super::call::HookAsk;
use super::call::{
    Approver, CallContext, Outcome, Refusal, Refused, Step, answer_line, error_result, read_result,
};
use super::catalog::Listing;
use super::inflight::UpPurpose;
use super::journal::{CallFields, unix_now};
use super::request::{HostRequest, ServerIdx};
use super::session::HostSession;
use super::upstreams::{Readiness, Unresolved};
use super::{Gateway, Observed, Waiting};
use crate::frame::Message;
use crate::json::{ObjectWriter, members, string_literal};

/// Whether a server can take a call for this tool now.
enum Ready {
    Yes,
    NotYet,
    No(String),
}

// === impl Gateway ===

impl Gateway {
    /// A host's `tools/call`: read once, then the pipeline.
    pub(super) fn on_tools_call(&mut self, request: HostRequest) {
        match CallContext::parse(request) {
            Ok(cx) => self.run_pipeline(Box::new(cx)),
            Err((request, refusal)) => self.refuse_unparsed(*request, refusal),
        }
    }

    /// Runs a call through the pipeline and acts on where it ends.
    pub(super) fn run_pipeline(&mut self, cx: Box<CallContext>) {
        let step = self.intercept(cx);
        self.act(step);
    }

    /// The pipeline, top to bottom (see the module's documentation).
    pub(super) fn intercept(&mut self, mut cx: Box<CallContext>) -> Step {
        let session = cx.request.session;
        let modern_host = self.sessions.get(&session).is_some_and(HostSession::modern);

        // A gateway asked to stop sends nothing new: a call read in the
        // same turn as the stop ends here, on record.
        if self.stopping {
            return Step::Refuse(cx, Refusal::Shutdown);
        }

        // 0. A 2026-07-28 retry that answers a server's own question is no
        //    new call: it resumes the call that asked (see `relay`).
        if modern_host && self.answers_relayed_question(&cx) {
            return self.answer_relayed(cx);
        }

        // 1. Resolve the host's name to a server and its own tool name.
        let (idx, tool) = match self.resolve(&cx.params.name) {
            Ok(found) => found,
            Err(Unresolved::Unknown) => return Step::Refuse(cx, Refusal::UnknownTool),
            Err(Unresolved::Ambiguous(found)) => {
                let why = self.ambiguity(&found);
                return Step::Refuse(cx, Refusal::AmbiguousName(why));
            }
        };
        cx.server = Some(idx);
        cx.tool = tool;

        // 2. The definition is ready: the server runs, its tools are listed.
        match self.definition_ready(&mut cx, idx) {
            Ready::Yes => {
                cx.generation = self.upstreams.get(idx).map(|up| up.generation());
                cx.request.wait_until = None;
            }
            Ready::NotYet => return Step::Wait(cx),
            Ready::No(reason) => return Step::Refuse(cx, Refusal::ServerUnavailable(reason)),
        }
        let Some(entry) = self.catalog.tool(idx, &cx.tool) else {
            return Step::Refuse(cx, Refusal::UnknownTool);
        };
        // A name a person could misread is never decided on (see
        // `hintgate_policy::name`): the tool is not listed either.
        if let Some(trouble) = &entry.name_trouble {
            let refusal = Refusal::Name(trouble.code(), trouble.describe());
            return Step::Refuse(cx, refusal);
        }

        // 3. Decide, with the decision hook where it takes part.
        let decision = match (&entry.tool, entry.digest) {
            (Ok(tool), Some(digest)) => {
                cx.digest = Some(digest);
                cx.digest_text.clone_from(&entry.digest_text);
                cx.pin = self.catalog.pin_status(idx, &cx.tool, digest);
                cx.retry_eligible = entry.retry_eligible;
                cx.taints = entry.taints;
                cx.output = entry.output_validator();
                let remembered = if self
                    .sessions
                    .get(&session)
                    .is_some_and(|host| host.remembers(idx, &cx.tool))
                {
                    Remembered::Session
                } else {
                    self.catalog.approved_always(idx, &cx.tool, digest)
                };
                let (tainted, scope) = self
                    .sessions
                    .get(&session)
                    .map_or((false, Scope::Read), |host| (host.tainted, host.scope));
                let call = Call {
                    server: self.upstreams.name(idx),
                    tool,
                    pin: cx.pin,
                    session: SessionState {
                        tainted,
                        remembered,
                        scope,
                    },
                    sandbox: self.catalog.sandbox(idx),
                    hook: HookAnswer::None,
                };
                // Where it goes is decided with it, on the same definition:
                // what the read-only credentials prove holds only there.
                cx.instance = self.policy.instance(call.server, tool, call.sandbox);
                match self.policy.hook_so_far(&call) {
                    None => self.policy.decide(&call),
                    Some(so_far) => {
                        let state = (so_far.verdict, so_far.codes().collect::<Vec<_>>());
                        // An answer stands for the state it was given for.
                        let answered = cx
                            .hook
                            .as_ref()
                            .filter(|given| given.digest == digest && given.so_far == state);
                        match answered {
                            Some(given) => self.policy.decide(&Call {
                                hook: given.answer.as_answer(),
                                ..call
                            }),
                            None if cx.hook_asks >= super::hooks::MAX_HOOK_ASKS => {
                                let why = "the call changed each time the decision hook was asked about it";
                                self.policy.decide(&Call {
                                    hook: HookAnswer::Failed(why),
                                    ..call
                                })
                            }
                            None => {
                                // The hook sees the arguments as they will
                                // be sent, an idempotency key filled in: they
                                // are read now (a call whose arguments do not
                                // parse is refused before anyone is asked).
                                if let Err(problem) = cx.parse_arguments() {
                                    return Step::Refuse(cx, Refusal::Malformed(problem));
                                }
                                self.prepare_key(&mut cx, idx);
                                let Some(config) = self.policy.hook_for(call.server).cloned()
                                else {
                                    return Step::Refuse(
                                        cx,
                                        Refusal::Malformed("no hook".to_owned()),
                                    );
                                };
                                let slot = self.hooks.slot_of(&config);
                                let id = self.hooks.next_id();
                                let id_text = id.to_string();
                                let line = self.policy.hook_question(&Question {
                                    id: &id_text,
                                    call: &call,
                                    identity: self.catalog.identity(idx).unwrap_or_default(),
                                    arguments: cx.arguments.as_ref(),
                                    host: self
                                        .sessions
                                        .get(&session)
                                        .and_then(|host| host.principal.as_deref()),
                                    so_far: &so_far,
                                });
                                cx.hook_asks += 1;
                                return Step::Hook(
                                    cx,
                                    HookAsk {
                                        slot,
                                        id,
                                        line,
                                        digest,
                                        so_far: state,
                                    },
                                );
                            }
                        }
                    }
                }
            }
            _ => Decision::invalid_definition(),
        };
        let input = entry.input_validator();
        tracing::debug!(
            server.id = %self.upstreams.name(idx),
            tool.name = %cx.tool,
            decision.verdict = ?decision.verdict,
            decision.reasons = ?decision.codes().map(|code| code.as_str()).collect::<Vec<_>>(),
            "tools/call"
        );
        self.observe(|| Observed::Decided {
            server: self.upstreams.name(idx).to_owned(),
            tool: cx.tool.clone(),
            decision: decision.clone(),
        });
        let verdict = decision.verdict;
        cx.decision = Some(decision);
        if verdict == Verdict::Deny {
            return Step::Refuse(
                cx,
                Refusal::Denied {
                    extra: None,
                    by: Approver::Gateway,
                },
            );
        }

        // 3b. A call for the read-only instance needs it running, and
        //     listing the definition decided on.
        if cx.instance == Instance::ReadOnly {
            match self.read_only_ready(&mut cx, idx) {
                Ok(Ready::Yes) => {}
                Ok(Ready::NotYet) => return Step::Wait(cx),
                Ok(Ready::No(reason)) => {
                    return Step::Refuse(cx, Refusal::ServerUnavailable(reason));
                }
                Err(why) => return Step::Refuse(cx, Refusal::ReadOnlyDiffers(why)),
            }
        }

        // 4. Validate the arguments against the tool's input schema, with
        //    an idempotency key filled in where the tool takes one.
        if let Err(problem) = cx.parse_arguments() {
            return Step::Refuse(cx, Refusal::Malformed(problem));
        }
        self.prepare_key(&mut cx, idx);
        if let Some(validator) = input {
            let arguments = cx.arguments_or_empty();
            if !validator.is_valid(arguments) {
                let problems = validator
                    .iter_errors(arguments)
                    .take(5)
                    .map(|err| format!("{err} (at `{}`)", err.instance_path()))
                    .collect();
                return Step::Refuse(cx, Refusal::InvalidArguments(problems));
            }
        }
        // A key that ran with these arguments is answered from the store,
        // before anyone is asked; one that cannot be used is refused.
        if let Some(refusal) = self.look_up_key(&cx) {
            return Step::Refuse(cx, refusal);
        }

        // 5. Ask a person, where the decision says so. A call a person
        //    approved goes on if this is the definition they approved; a
        //    2026-07-28 host's retry may carry the person's answer to the
        //    gateway's question.
        if cx.approved.is_some() && cx.approved == cx.digest {
            return Step::Forward(cx);
        }
        if modern_host && super::modern::carries_our_answer(&cx) {
            return match self.open_modern_answer(&mut cx) {
                Ok(()) => Step::Forward(cx),
                Err(refusal) => Step::Refuse(cx, refusal),
            };
        }
        match verdict {
            Verdict::Ask => return Step::Ask(cx),
            Verdict::Allow | Verdict::Deny => {}
        }
        cx.approver = Approver::Policy(
            cx.decision
                .as_ref()
                .and_then(|decision| decision.reasons.first())
                .map(|reason| reason.code),
        );

        // 6. Audit, then forward (once this turn's records are durable).
        Step::Forward(cx)
    }

    /// Acts on where the pipeline left a call.
    pub(super) fn act(&mut self, step: Step) {
        match step {
            Step::Forward(cx) => self.record_and_forward(cx),
            Step::Ask(cx) => self.ask(cx),
            Step::Refuse(cx, refusal) => self.refuse(cx, refusal),
            Step::Wait(cx) => self.park(Waiting::Call(cx)),
            Step::Hook(cx, ask) => self.ask_hook(cx, ask),
            Step::Done => {}
        }
    }

    /// Step 2: the server runs and has listed its tools. Starts it, or lists
    /// them, when needed (once per call each, so a server that keeps failing
    /// answers the call instead of holding it).
    fn definition_ready(&mut self, cx: &mut CallContext, idx: ServerIdx) -> Ready {
        match self.readiness(idx, &mut cx.request.restarted) {
            Readiness::Ready => {}
            Readiness::Pending => return Ready::NotYet,
            Readiness::Failed(reason) => return Ready::No(reason),
        }
        match self.catalog.server(idx).map(|server| &server.listing) {
            Some(Listing::Listed) => Ready::Yes,
            Some(Listing::InProgress) => Ready::NotYet,
            Some(Listing::Failed(reason)) if cx.relisted => Ready::No(reason.clone()),
            Some(Listing::Unlisted | Listing::Failed(_)) => {
                cx.relisted = true;
                self.list_tools(idx);
                // A server without tools is listed at once.
                match self.catalog.server(idx).map(|server| &server.listing) {
                    Some(Listing::Listed) => Ready::Yes,
                    _ => Ready::NotYet,
                }
            }
            None => Ready::No("no such server".to_owned()),
        }
    }

    /// Step 3b: the read-only instance of server `idx` runs, has listed its
    /// tools, and lists the definition the call was decided on (by pin
    /// digest) under a plain name unlike its others. Starts it, or lists
    /// them, when needed (once per call each). `Err` says how the instance
    /// differs: a server that lists another definition, or none, on the
    /// instance that runs the call is not sent the call there, and never
    /// the full instance instead.
    fn read_only_ready(&mut self, cx: &mut CallContext, idx: ServerIdx) -> Result<Ready, String> {
        let name = self.upstreams.name(idx).to_owned();
        let Some(instance) = self.upstreams.get(idx).and_then(|up| up.read_only) else {
            return Ok(Ready::No(format!(
                "server `{name}` has no read-only instance"
            )));
        };
        match self.readiness(instance, &mut cx.read_only_restarted) {
            Readiness::Ready => {}
            Readiness::Pending => return Ok(Ready::NotYet),
            Readiness::Failed(reason) => {
                return Ok(Ready::No(format!("its read-only instance: {reason}")));
            }
        }
        match self.catalog.server(instance).map(|server| &server.listing) {
            Some(Listing::Listed) => {}
            Some(Listing::InProgress) => return Ok(Ready::NotYet),
            Some(Listing::Failed(reason)) if cx.read_only_relisted => {
                return Ok(Ready::No(format!("its read-only instance: {reason}")));
            }
            Some(Listing::Unlisted | Listing::Failed(_)) => {
                cx.read_only_relisted = true;
                self.list_tools(instance);
                if self
                    .catalog
                    .server(instance)
                    .is_none_or(|server| server.listing != Listing::Listed)
                {
                    return Ok(Ready::NotYet);
                }
            }
            None => return Ok(Ready::No("no such server".to_owned())),
        }
        // The decision took the full instance's sandbox for proof: the
        // instance that runs the call must enforce as much.
        let (full, own) = (self.catalog.sandbox(idx), self.catalog.sandbox(instance));
        if (full.no_network && !own.no_network) || (full.no_writes && !own.no_writes) {
            return Ok(Ready::No(
                "its read-only instance's sandbox does not enforce what the full instance's does"
                    .to_owned(),
            ));
        }
        self.read_only_lists(instance, &cx.tool, cx.digest)?;
        cx.read_only_generation = self.upstreams.get(instance).map(|up| up.generation());
        Ok(Ready::Yes)
    }

    /// Whether the read-only instance `instance` lists `tool` as the
    /// definition of `digest`; `Err` says how it does not.
    fn read_only_lists(
        &self,
        instance: ServerIdx,
        tool: &str,
        digest: Option<hintgate_policy::pin::PinDigest>,
    ) -> Result<(), String> {
        let shown = hintgate_policy::sanitize::escape_line(tool);
        match self.catalog.tool(instance, tool) {
            None => Err(format!("it does not list `{shown}`")),
            Some(entry) if entry.name_trouble.is_some() => Err(format!(
                "it lists `{shown}` under a name that could mean another tool"
            )),
            Some(entry) if entry.digest.is_none() || entry.digest != digest => Err(format!(
                "it lists `{shown}` with another definition than the full instance, whose definition was decided on"
            )),
            Some(_) => Ok(()),
        }
    }

    /// Step 6: the call's record joins the turn's batch; the call is sent at
    /// the end of the turn, once the batch is durable.
    pub(super) fn record_and_forward(&mut self, cx: Box<CallContext>) {
        let place = self.record_call(&cx, None);
        if place.is_none() && self.journal.enabled() {
            // INVARIANT: with a log, no call is sent without its record.
            let refusal = Refusal::Unrecorded("no record could be made of it".to_owned());
            self.refuse(cx, refusal);
            return;
        }
        self.call_after_commit(cx, place);
    }

    /// Sends a call whose record is durable. Called only by the end of a
    /// turn, for calls the pipeline forwarded.
    pub(super) fn send_call(&mut self, mut cx: Box<CallContext>) {
        let Some(idx) = cx.server else {
            return;
        };
        // Its host went away, or the gateway was asked to stop, in the turn
        // that forwarded it: nothing new starts now. Its record is durable,
        // so it ends on record, and was never sent.
        let host_gone = self
            .sessions
            .get(&cx.request.session)
            .is_none_or(|host| host.closed);
        if host_gone {
            self.record_outcome(&cx, Outcome::HostGone);
            return;
        }
        if self.stopping {
            let text = format!(
                "hintgate shut down before it sent this call to `{}`; it did not run.",
                self.upstreams.name(idx)
            );
            let line = self.result_line(cx.request.session, cx.request.id(), &error_result(&text));
            self.answer_call(&cx, line, Outcome::Shutdown);
            return;
        }
        // The server failed or started again since the call was decided:
        // what it lists now was not decided on, and the call never left.
        let current = self.upstreams.get(idx).is_some_and(|up| {
            up.phase == super::upstreams::Phase::Ready && Some(up.generation()) == cx.generation
        });
        if !current {
            let why = format!(
                "server `{}` stopped or started again before the call was sent",
                self.upstreams.name(idx)
            );
            self.call_unsent(cx, &why);
            return;
        }
        // INVARIANT: a call decided for the read-only instance goes to it,
        // to the start that listed the definition decided on, and nowhere
        // else; the full instance never runs it instead.
        let target = match cx.instance {
            Instance::Full => idx,
            Instance::ReadOnly => {
                let instance = self.upstreams.get(idx).and_then(|up| up.read_only);
                let current = instance
                    .and_then(|instance| self.upstreams.get(instance))
                    .is_some_and(|up| {
                        up.phase == super::upstreams::Phase::Ready
                            && Some(up.generation()) == cx.read_only_generation
                    });
                let listed = instance.is_some_and(|instance| {
                    self.read_only_lists(instance, &cx.tool, cx.digest).is_ok()
                });
                match instance {
                    Some(instance) if current && listed => instance,
                    _ => {
                        let why = format!(
                            "the read-only instance of `{}` stopped, started again or changed its tools before the call was sent",
                            self.upstreams.name(idx)
                        );
                        self.call_unsent(cx, &why);
                        return;
                    }
                }
            }
        };
        // The key is claimed right before the send: of two calls with one
        // key, one is sent.
        if let Err(refusal) = self.claim_key(&mut cx) {
            self.record_outcome(&cx, refusal.outcome());
            self.taint_by_replay(&cx, &refusal);
            let line = self.refusal_line(&cx, &refusal);
            self.send_host(cx.request.session, line);
            return;
        }
        let timeout = self.limits.call_timeout;
        let Some(up) = self.upstreams.get_mut(target) else {
            return;
        };
        let id = up.next_id();
        let modern = up.modern;
        let session_meta = self.session_meta(cx.request.session);
        let Some(line) = call_line(
            &cx,
            self.mode == super::Mode::Wrap,
            modern,
            &session_meta,
            id,
        ) else {
            drop(session_meta);
            // The params were read before, so this does not happen; if it
            // did, nothing but the decided call may go out.
            let text = "hintgate could not rebuild the call's params; it was not sent";
            let line = self.result_line(cx.request.session, cx.request.id(), &error_result(text));
            self.answer_call(&cx, line, Outcome::Failed);
            return;
        };
        cx.started = Some(Instant::now());
        let turn = self.turn;
        let sent = self
            .upstreams
            .get_mut(target)
            .map_or(Ok(()), |up| up.send_now(line, turn));
        if let Err(err) = sent {
            // The server has left too much unread: the call is not queued
            // behind it; it fails now, with its outcome recorded (or is
            // retried on the server's next start, where design §4.5 allows).
            let reason = self.not_reading(target, err);
            let why = format!(
                "server `{}` {reason}: the call was not sent, and the server is started again on its next request",
                self.upstreams.name(idx)
            );
            self.call_failed(cx, &why);
            return;
        }
        self.inflight
            .wait_up(target, id, UpPurpose::Call(cx), timeout);
    }

    /// A server answered a call.
    pub(super) fn on_call_answer(
        &mut self,
        idx: ServerIdx,
        cx: Box<CallContext>,
        message: &Message<'_>,
    ) {
        let session = cx.request.session;
        let modern_host = self.sessions.get(&session).is_some_and(HostSession::modern);
        let outcome = match message.result {
            None => Outcome::ProtocolError,
            Some(raw) => match read_result(raw.get()) {
                Err(err) => {
                    let text = format!(
                        "hintgate did not pass on the answer of `{}`: its result cannot be read one way only ({err})",
                        self.upstreams.name(idx)
                    );
                    tracing::warn!(server.id = %self.upstreams.name(idx), tool.name = %cx.tool, "{text}");
                    let line = self.result_line(session, cx.request.id(), &error_result(&text));
                    self.answer_call(&cx, line, Outcome::ProtocolError);
                    return;
                }
                Ok(view) => {
                    // A 2026-07-28 server asks a legacy host for input: the
                    // gateway asks the host and calls the server again.
                    if !modern_host && view.result_type.as_deref() == Some("input_required") {
                        let result: Value = serde_json::from_str(raw.get()).unwrap_or(Value::Null);
                        self.gather_for_legacy_host(cx, &result);
                        return;
                    }
                    // A 2026-07-28 host gets the server's questions marked
                    // as the server's; the host's retry is a call of its own.
                    if let Some(marked) = view
                        .result_type
                        .as_deref()
                        .filter(|kind| *kind == "input_required")
                        .and_then(|_| self.marked_input_required(idx, raw.get()))
                    {
                        let (line, outcome) = match marked {
                            Ok(result) => (
                                crate::frame::response(cx.request.id(), &result),
                                Outcome::InputRequired,
                            ),
                            Err(why) => {
                                tracing::warn!(server.id = %self.upstreams.name(idx), tool.name = %cx.tool, "{why}");
                                let text = format!(
                                    "hintgate did not pass on the server's question: {why}"
                                );
                                let result = error_result(&text);
                                let line = self.result_line(session, cx.request.id(), &result);
                                (line, Outcome::ProtocolError)
                            }
                        };
                        self.answer_call(&cx, line, outcome);
                        return;
                    }
                    if cx.taints {
                        let what = format!("a result of `{}`", cx.tool);
                        self.taint(session, idx, &what);
                    }
                    let is_error = view.is_error == Some(true);
                    if let (false, Some(validator), Some(structured)) =
                        (is_error, &cx.output, view.structured)
                    {
                        let structured: Value =
                            serde_json::from_str(structured.get()).unwrap_or(Value::Null);
                        let problems: Vec<String> = validator
                            .iter_errors(&structured)
                            .take(5)
                            .map(|err| err.to_string())
                            .collect();
                        if !problems.is_empty() {
                            let text = format!(
                                "`{}` returned structured content that does not match the tool's output schema: {}",
                                self.upstreams.name(idx),
                                problems.join("; ")
                            );
                            tracing::warn!(server.id = %self.upstreams.name(idx), tool.name = %cx.tool, "{text}");
                            let refused = error_result(&text);
                            // The call ran: a later call with its key gets
                            // what this host got.
                            self.key_done(&cx, &refused.to_string());
                            let line = self.result_line(session, cx.request.id(), &refused);
                            self.answer_call(&cx, line, Outcome::OutputSchemaMismatch);
                            return;
                        }
                    }
                    // The call ran: a keyed one's result is recorded as the
                    // answer to a later call with the same key.
                    self.key_done(&cx, raw.get());
                    if is_error {
                        Outcome::ToolError
                    } else {
                        Outcome::Ok
                    }
                }
            },
        };
        let line = self.host_response(idx, session, message, cx.request.id(), "tools/call");
        self.answer_call(&cx, line, outcome);
    }

    /// Ends a forwarded call: its outcome joins the turn's records, and its
    /// answer goes to the host at the end of the turn, after them.
    pub(super) fn answer_call(&mut self, cx: &CallContext, line: String, outcome: Outcome) {
        self.record_outcome(cx, outcome);
        self.send_host(cx.request.session, line);
    }

    /// Records how a forwarded call ended.
    pub(super) fn record_outcome(&mut self, cx: &CallContext, outcome: Outcome) {
        self.end_key_by_outcome(cx, outcome);
        let Some(seq) = cx.record else {
            return;
        };
        let millis = cx.started.map_or(0, |started| {
            u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
        });
        self.journal.outcome(seq, outcome, millis, cx.attempt);
    }

    /// The call's record (with its outcome, for a call that ends at the
    /// gateway); its place in the turn's batch.
    fn record_call(
        &mut self,
        cx: &CallContext,
        ended: Option<(Outcome, &Decision, Approver)>,
    ) -> Option<usize> {
        if !self.journal.enabled() {
            return None;
        }
        let (decision, outcome, approver) = match ended {
            Some((outcome, decision, approver)) => (decision, Some(outcome), approver),
            None => match &cx.decision {
                Some(decision) => (decision, None, cx.approver.clone()),
                None => return None,
            },
        };
        let server = cx.server.map_or("", |idx| self.upstreams.name(idx));
        let identity = cx.server.and_then(|idx| self.catalog.key(idx));
        // The hosts an enforced `network = ["host:port", ...]` lets the
        // server reach: where it can send what it has.
        let egress = cx
            .server
            .filter(|idx| self.catalog.sandbox(*idx).egress_only)
            .and_then(|_| self.policy.server(server))
            .and_then(|config| config.sandbox.as_ref())
            .map(hintgate_policy::config::SandboxConfig::egress_hosts);
        let tool = if cx.tool.is_empty() {
            cx.params.name.as_str()
        } else {
            cx.tool.as_str()
        };
        // The arguments as the host sent them, when they parse.
        let parsed;
        let arguments = match &cx.arguments {
            Some(arguments) => Some(arguments),
            None => {
                parsed = cx
                    .arguments_text()
                    .and_then(|text| serde_json::from_str::<Value>(text).ok());
                parsed.as_ref()
            }
        };
        let fields = CallFields {
            // The host's own id, which its log shows; the gateway's is an
            // artefact of the transport.
            request_id: cx.request.host_id.as_deref().unwrap_or(cx.request.id()),
            server,
            identity,
            tool,
            arguments,
            decision,
            approver: &approver,
            pin: cx.digest_text.as_deref(),
            outcome,
            host: self
                .sessions
                .get(&cx.request.session)
                .and_then(|host| host.principal.as_deref()),
            idempotency: cx
                .idem
                .as_ref()
                .map(|idem| (idem.key.as_str(), idem.filled)),
            instance: instance_fields(&self.upstreams, cx),
            egress: egress.as_deref(),
        };
        self.journal.call(&fields)
    }

    /// The record of a call that ends here, with `outcome`, as decided.
    pub(super) fn record_ended(&mut self, cx: &CallContext, outcome: Outcome) {
        let decision = cx.decision_or(hintgate_policy::reason::ReasonCode::InternalError);
        let approver = cx.approver.clone();
        self.record_call(cx, Some((outcome, &decision, approver)));
    }

    /// A replayed result of a private-data tool taints the session as the
    /// answer it repeats did.
    fn taint_by_replay(&mut self, cx: &CallContext, refusal: &Refusal) {
        if let (Refusal::Replayed(_), Some(idx)) = (refusal, cx.server)
            && cx.taints
        {
            let what = format!("a replayed result of `{}`", cx.tool);
            self.taint(cx.request.session, idx, &what);
        }
    }

    /// A call ends at the gateway: its record, and its answer after it (a
    /// call the host withdrew gets no answer).
    pub(super) fn refuse(&mut self, cx: Box<CallContext>, refusal: Refusal) {
        self.taint_by_replay(&cx, &refusal);
        let decision = refusal.decision(cx.decision.as_ref());
        self.record_call(
            &cx,
            Some((refusal.outcome(), &decision, refusal.approver())),
        );
        if matches!(refusal, Refusal::Withdrawn(_)) {
            return;
        }
        let line = self.refusal_line_with(&cx, &refusal, &decision);
        self.send_host(cx.request.session, line);
    }

    /// A `tools/call` the gateway could not read ends here: recorded as a
    /// deny, answered with a JSON-RPC error when it has an id.
    pub(super) fn refuse_unparsed(&mut self, request: HostRequest, refusal: Refusal) {
        let has_id = request.spans.id.is_some();
        let cx = CallContext::unread(request);
        let decision = refusal.decision(None);
        self.record_call(
            &cx,
            Some((refusal.outcome(), &decision, refusal.approver())),
        );
        if has_id {
            let line = self.refusal_line_with(&cx, &refusal, &decision);
            self.send_host(cx.request.session, line);
        }
    }

    /// The line that answers a refused call (the one mapping, [`Refusal::answer`]).
    pub(super) fn refusal_line(&self, cx: &CallContext, refusal: &Refusal) -> String {
        let decision = refusal.decision(cx.decision.as_ref());
        self.refusal_line_with(cx, refusal, &decision)
    }

    fn refusal_line_with(
        &self,
        cx: &CallContext,
        refusal: &Refusal,
        decision: &Decision,
    ) -> String {
        let server = cx.server.map_or("", |idx| self.upstreams.name(idx));
        let answer = refusal.answer(Refused {
            host_name: &cx.params.name,
            server,
            tool: if cx.tool.is_empty() {
                &cx.params.name
            } else {
                &cx.tool
            },
            decision,
            policy: &self.policy,
        });
        let modern = self
            .sessions
            .get(&cx.request.session)
            .is_some_and(HostSession::modern);
        answer_line(cx.request.id(), answer, |result| {
            super::modern::modernize(modern, "", result);
        })
    }

    /// A person approved a call: pin the definition they saw, and remember
    /// the approval for the session or always where the decision allows it.
    pub(super) fn record_approval(&mut self, cx: &CallContext, remember: Remember) {
        let Some(idx) = cx.server else {
            return;
        };
        let may_remember = cx
            .decision
            .as_ref()
            .is_some_and(|decision| decision.remember == RememberOffer::UpToAlways);
        if remember == Remember::Session
            && may_remember
            && let Some(host) = self.sessions.get_mut(&cx.request.session)
        {
            host.remembered.insert((idx, cx.tool.clone()));
        }
        let Some(digest) = cx.digest else {
            return;
        };
        let always = remember == Remember::Always && may_remember && self.store.is_some();
        let name = self.upstreams.name(idx).to_owned();
        if let Err(err) = self
            .catalog
            .approve(idx, &name, &cx.tool, digest, always, unix_now())
        {
            tracing::error!(server.id = %name, tool.name = %cx.tool, "the approval could not be stored: {err}");
        }
    }
}

/// What the record says of a call's instance: for a server with a
/// read-only instance and a definition decided on, where it was decided to
/// go (and the read-only instance's identity key when there).
fn instance_fields<'a>(
    upstreams: &'a super::upstreams::Upstreams,
    cx: &CallContext,
) -> Option<(Instance, Option<&'a str>)> {
    let instance = upstreams.get(cx.server?)?.read_only?;
    cx.digest?;
    let key = match cx.instance {
        Instance::ReadOnly => upstreams
            .get(instance)
            .and_then(|instance| instance.identity_key.as_deref()),
        Instance::Full => None,
    };
    Some((cx.instance, key))
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
) -> Option<String> {
    let id_text = id.to_string();
    let ours = super::modern::carries_our_answer(cx);
    let continuation = cx.continuation.as_ref();
    let filled = cx.arguments_filled.as_deref();
    if wrap && !modern && !ours && continuation.is_none() && filled.is_none() {
        return Some(cx.request.with_id(&id_text));
    }
    let params = cx.request.line.get(cx.params.span.clone())?;
    let found = members(params).ok()?;
    let mut writer = ObjectWriter::with_capacity(params.len() + 256);
    let mut meta_done = false;
    let mut arguments_done = false;
    for member in &found {
        let text = params.get(member.span.clone()).unwrap_or("");
        let value = params.get(member.value.clone()).unwrap_or("null");
        match member.key.as_ref() {
            "name" => writer.member("name", &string_literal(&cx.tool)),
            "arguments" if filled.is_some() => {
                writer.member("arguments", filled.unwrap_or("{}"));
                arguments_done = true;
            }
            "requestState" | "inputResponses" if continuation.is_some() => {}
            "requestState" if ours && super::modern::is_our_state(value) => {}
            "inputResponses" if ours => {
                if let Some(rest) = super::modern::without_our_answer(value) {
                    writer.member("inputResponses", &rest);
                }
            }
            "_meta" if modern => {
                writer.member("_meta", &super::modern::merged_meta(value, modern_meta));
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
    if modern && !meta_done {
        writer.member("_meta", &modern_meta.to_string());
    }
    Some(cx.request.with_id_and_params(&id_text, &writer.finish()))
}
