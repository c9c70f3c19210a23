//! Steps 1 to 5 of the pipeline, and the reading of a server's answer
//! (step 7), over a view of the parts they read.
//!
//! [`Stages`] borrows what the steps read (the policy, the servers, the
//! catalog, the sessions, the journal's redaction, the sealer, the store,
//! the hooks' slots) and the two reporters they tell (the observer and the
//! metrics), and nothing else: no step can send a line, start a server or
//! hold a call. Where a call cannot go on until something is done, a step
//! says so ([`Need`]: start a server, list its tools) and the gateway does
//! it (`Gateway::meet`); where it must wait or end, the step returns how
//! ([`Exit`]). So each step is tested here with parts built by hand, no
//! gateway and no server.
//!
//! A server's answer is read here too ([`Stages::answer_of`]: what the host
//! gets and the call's outcome, the session tainted, the output schema
//! checked, a keyed result kept), and the gateway only sends what it
//! returns. A person's approval carried by a 2026-07-28 host's retry is
//! opened here too (step 5, `open_modern_answer`, written in `ask` beside the other
//! answers), and records the approval in the catalog and the session.

use std::sync::Arc;

use hintgate_policy::config::Instance;
use hintgate_policy::decide::{Decision, Policy, Verdict};
use hintgate_store::Store;
use serde_json::Value;

use super::call::{
    Approver, CallContext, CallResultView, Definition, Exit, HookAsk, Need, Outcome, Refusal,
    error_result, read_result,
};
use super::catalog::{Catalog, Listing};
use super::hooks::Hooks;
use super::journal::Journal;
use super::keys::Keys;
use super::lookup::Lookup;
use super::request::ServerIdx;
use super::session::{HostSession, Sessions};
use super::steps::{self, Approval, CallFacts, Decided, SessionFacts};
use super::upstreams::{Started, Unresolved, Upstreams, started};
use super::{Gateway, Observed, Observer};
use crate::frame::Message;
use crate::metrics::Metrics;
use crate::seal::Sealer;

/// What steps 1 to 5 read and may note, borrowed from the gateway for one
/// pass of one call. The catalog and the sessions are borrowed to change
/// only where a person's returned approval is recorded (step 5), the sealer
/// only to mark the state it carried as used, the hooks only to number a
/// question.
pub(crate) struct Stages<'a> {
    pub(super) policy: &'a Policy,
    pub(super) upstreams: &'a Upstreams,
    pub(super) catalog: &'a mut Catalog,
    pub(super) sessions: &'a mut Sessions,
    pub(super) journal: &'a Journal,
    pub(super) sealer: &'a mut Sealer,
    pub(super) store: Option<&'a Arc<dyn Store>>,
    pub(super) run_name: &'a str,
    pub(super) hooks: &'a mut Hooks,
    pub(super) observer: &'a Observer,
    pub(super) metrics: Option<&'a Metrics>,
}

/// Whether a server's tools are listed for a call, as a step sees it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ToolList {
    /// They are.
    Listed,
    /// A list is running: the call waits.
    Running,
    /// The list failed again after this call asked for it: why.
    Failed(String),
    /// Never listed, or the list failed before: to ask for (once per call).
    List,
}

/// Whether server `idx`'s tools are listed for a call that asked for a
/// list already if `relisted` is set; a list to ask for is noted there.
pub(crate) fn listed(catalog: &Catalog, idx: ServerIdx, relisted: &mut bool) -> ToolList {
    match catalog.server(idx).map(|server| &server.listing) {
        Some(Listing::Listed) => ToolList::Listed,
        Some(Listing::InProgress) => ToolList::Running,
        Some(Listing::Failed(reason)) if *relisted => ToolList::Failed(reason.clone()),
        Some(Listing::Unlisted | Listing::Failed(_)) => {
            *relisted = true;
            ToolList::List
        }
        None => ToolList::Failed("no such server".to_owned()),
    }
}

/// Step 1: the host's name to a server and the server's own name (a
/// name two servers' prefixes fit is refused, never guessed).
pub(super) fn resolve_call(upstreams: &Upstreams, cx: &mut CallContext) -> Result<ServerIdx, Exit> {
    let (idx, tool) = match upstreams.resolve(&cx.params.name) {
        Ok(found) => found,
        Err(Unresolved::Unknown) => return Err(Refusal::UnknownTool.into()),
        Err(Unresolved::Ambiguous(found)) => {
            return Err(Refusal::AmbiguousName(upstreams.ambiguity(&found)).into());
        }
    };
    cx.resolve(idx, tool);
    Ok(idx)
}

/// Whether the read-only instance `instance` lists `tool` as the
/// definition of `digest`; `Err` says how it does not.
pub(super) fn read_only_lists(
    catalog: &Catalog,
    instance: ServerIdx,
    tool: &str,
    digest: Option<hintgate_policy::pin::PinDigest>,
) -> Result<(), String> {
    let shown = hintgate_policy::sanitize::escape_line(tool);
    match catalog.tool(instance, tool) {
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

// === impl Gateway ===

impl Gateway {
    /// The view steps 1 to 5 take of the gateway.
    pub(super) fn stages(&mut self) -> Stages<'_> {
        Stages {
            policy: &self.policy,
            upstreams: &self.upstreams,
            catalog: &mut self.catalog,
            sessions: &mut self.sessions,
            journal: &self.journal,
            sealer: &mut self.sealer,
            store: self.store.as_ref(),
            run_name: &self.run_name,
            hooks: &mut self.hooks,
            observer: &self.observer,
            metrics: self.metrics.as_deref(),
        }
    }
}

// === impl Stages ===

impl Stages<'_> {
    /// What only looks things up, borrowed from this view.
    pub(super) fn lookup(&self) -> Lookup<'_> {
        Lookup {
            policy: self.policy,
            upstreams: self.upstreams,
            catalog: self.catalog,
            sessions: self.sessions,
            journal: self.journal,
            sealer: self.sealer,
        }
    }

    /// The key rules, borrowed from this view.
    pub(super) fn keys(&self) -> Keys<'_> {
        Keys {
            policy: self.policy,
            upstreams: self.upstreams,
            catalog: self.catalog,
            store: self.store,
            sessions: self.sessions,
            sealer: self.sealer,
            run_name: self.run_name,
        }
    }

    /// Steps 1 to 5; `Ok` when the call is to be recorded and forwarded.
    pub(super) fn run(&mut self, cx: &mut CallContext, session: SessionFacts) -> Result<(), Exit> {
        // 1. Resolve the host's name to a server and its own tool name.
        let idx = resolve_call(self.upstreams, cx)?;
        // 2. The definition is ready: the server runs, its tools are listed.
        self.definition_ready(cx, idx)?;
        // 3. Decide, with the decision hook where it takes part.
        let (verdict, input) = self.decide_call(cx, idx, session)?;
        // 3b. A call for the read-only instance needs it running, and
        //     listing the definition decided on.
        if cx.instance == Instance::ReadOnly {
            self.read_only_ready(cx, idx)?;
        }
        // 4. Validate the arguments against the tool's input schema, with
        //    an idempotency key filled in where the tool takes one; a key
        //    that ran with these arguments is answered from the store.
        self.validate(cx, idx, input.as_deref())?;
        // 5. Ask a person, where the decision says so.
        self.approve(cx, session, verdict)
    }

    /// Step 2: the server runs and has listed its tools; else the call
    /// needs it started or listed (once per call each, so a server that
    /// keeps failing answers the call instead of holding it), or waits.
    pub(super) fn definition_ready(
        &self,
        cx: &mut CallContext,
        idx: ServerIdx,
    ) -> Result<(), Exit> {
        match started(self.upstreams, idx, &mut cx.request.restarted) {
            Started::Ready => {}
            Started::Starting => return Err(Exit::Wait),
            Started::Failed(reason) => return Err(Refusal::ServerUnavailable(reason).into()),
            Started::Start => return Err(Exit::Need(Need::Start(idx))),
        }
        match listed(self.catalog, idx, &mut cx.relisted) {
            ToolList::Listed => {}
            ToolList::Running => return Err(Exit::Wait),
            ToolList::Failed(reason) => return Err(Refusal::ServerUnavailable(reason).into()),
            ToolList::List => return Err(Exit::Need(Need::List(idx))),
        }
        cx.generation = self.upstreams.get(idx).map(|up| up.generation());
        cx.request.wait_until = None;
        Ok(())
    }

    /// Step 3: the decision on the definition the server lists now, and
    /// where the call goes; a deny ends the call here. The verdict, and the
    /// tool's input schema for step 4.
    pub(super) fn decide_call(
        &mut self,
        cx: &mut CallContext,
        idx: ServerIdx,
        session: SessionFacts,
    ) -> Result<(Verdict, Option<Arc<jsonschema::Validator>>), Exit> {
        let Some(entry) = self.catalog.tool(idx, cx.tool()) else {
            return Err(Refusal::UnknownTool.into());
        };
        // A name a person could misread is never decided on (see
        // `hintgate_policy::name`): the tool is not listed either.
        if let Some(trouble) = &entry.name_trouble {
            return Err(Refusal::Name(trouble.code(), trouble.describe()).into());
        }
        let input = entry.input_validator();
        let server = self.upstreams.name(idx);
        let decision = match (&entry.tool, entry.digest) {
            (Ok(tool), Some(digest)) => {
                let facts = self
                    .lookup()
                    .call_facts(idx, cx.tool(), tool, digest, session);
                cx.decided_on(Definition {
                    digest,
                    digest_text: entry.digest_text.clone(),
                    pin: facts.pin,
                    repeatable: entry.repeatable,
                    taints: entry.taints,
                    output: entry.output_validator(),
                });
                // Where it goes is decided with it, on the same definition:
                // what the read-only credentials prove holds only there.
                cx.instance = facts.instance;
                let call = facts.call(server, tool);
                match steps::decide(self.policy, call, digest, cx.hook.as_ref(), cx.hook_asks) {
                    Decided::Decision(decision) => decision,
                    Decided::AskHook(so_far) => {
                        return Err(self.ask_hook_about(cx, idx, facts, so_far));
                    }
                }
            }
            _ => Decision::invalid_definition(),
        };
        cx.trace_mark(|trace| &mut trace.decided);
        tracing::debug!(
            server.id = %server,
            tool.name = %cx.tool(),
            decision.verdict = ?decision.verdict,
            decision.reasons = ?decision.codes().map(|code| code.as_str()).collect::<Vec<_>>(),
            "tools/call"
        );
        self.observer.observe(|| Observed::Decided {
            server: server.to_owned(),
            tool: cx.tool().to_owned(),
            decision: decision.clone(),
        });
        if let Some(metrics) = self.metrics
            && !cx.counted
        {
            cx.counted = true;
            metrics.decided(self.upstreams.configured_of(idx), &decision);
        }
        let verdict = decision.verdict;
        cx.decision = Some(decision);
        if verdict == Verdict::Deny {
            let by = Approver::Gateway;
            return Err(Refusal::Denied { extra: None, by }.into());
        }
        Ok((verdict, input))
    }

    /// Step 3, where the decision hook must answer first: the question, with
    /// the arguments as they will be sent (an idempotency key filled in),
    /// read now (a call whose arguments do not parse is refused before
    /// anyone is asked).
    fn ask_hook_about(
        &mut self,
        cx: &mut CallContext,
        idx: ServerIdx,
        facts: CallFacts,
        so_far: Decision,
    ) -> Exit {
        if let Err(problem) = cx.parse_arguments() {
            return Refusal::Malformed(problem).into();
        }
        self.keys().prepare_key(cx, idx);
        let server = self.upstreams.name(idx);
        let (Some(config), Some(Ok(tool))) = (
            self.policy.hook_for(server),
            self.catalog.tool(idx, cx.tool()).map(|entry| &entry.tool),
        ) else {
            return Refusal::Malformed("no hook".to_owned()).into();
        };
        let slot = self.hooks.slot_of(config);
        let id = self.hooks.next_id();
        let line = self
            .lookup()
            .hook_question(cx, idx, tool, &facts, id, &so_far);
        cx.hook_asks += 1;
        Exit::Hook(Box::new(HookAsk {
            slot,
            id,
            line,
            digest: facts.digest,
            so_far: (so_far.verdict, so_far.codes().collect()),
        }))
    }

    /// Step 3b: the read-only instance of server `idx` runs, has listed its
    /// tools, and lists the definition the call was decided on (by pin
    /// digest) under a plain name unlike its others; else the call needs
    /// it started or listed (once per call each), or waits. A server that
    /// lists another definition, or none, on the instance that runs the
    /// call is not sent the call there (`read-only-instance-differs`), and
    /// never the full instance instead.
    pub(super) fn read_only_ready(&self, cx: &mut CallContext, idx: ServerIdx) -> Result<(), Exit> {
        let unavailable = |why: String| Exit::from(Refusal::ServerUnavailable(why));
        let Some(instance) = self.upstreams.get(idx).and_then(|up| up.read_only) else {
            let name = self.upstreams.name(idx);
            return Err(unavailable(format!(
                "server `{name}` has no read-only instance"
            )));
        };
        match started(self.upstreams, instance, &mut cx.read_only.restarted) {
            Started::Ready => {}
            Started::Starting => return Err(Exit::Wait),
            Started::Failed(reason) => {
                return Err(unavailable(format!("its read-only instance: {reason}")));
            }
            Started::Start => return Err(Exit::Need(Need::Start(instance))),
        }
        match listed(self.catalog, instance, &mut cx.read_only.relisted) {
            ToolList::Listed => {}
            ToolList::Running => return Err(Exit::Wait),
            ToolList::Failed(reason) => {
                return Err(unavailable(format!("its read-only instance: {reason}")));
            }
            ToolList::List => return Err(Exit::Need(Need::List(instance))),
        }
        // The decision took the full instance's sandbox for proof: the
        // instance that runs the call must enforce as much.
        let (full, own) = (self.catalog.sandbox(idx), self.catalog.sandbox(instance));
        if (full.no_network && !own.no_network) || (full.no_writes && !own.no_writes) {
            return Err(unavailable(
                "its read-only instance's sandbox does not enforce what the full instance's does"
                    .to_owned(),
            ));
        }
        read_only_lists(self.catalog, instance, cx.tool(), cx.digest())
            .map_err(Refusal::ReadOnlyDiffers)?;
        cx.read_only.generation = self.upstreams.get(instance).map(|up| up.generation());
        Ok(())
    }

    /// Step 4: the arguments, read once, match the tool's input schema (an
    /// idempotency key filled in first); a key that ran with these
    /// arguments is answered from the store, before anyone is asked, and
    /// one that cannot be used is refused.
    pub(super) fn validate(
        &self,
        cx: &mut CallContext,
        idx: ServerIdx,
        input: Option<&jsonschema::Validator>,
    ) -> Result<(), Exit> {
        cx.parse_arguments().map_err(Refusal::Malformed)?;
        self.keys().prepare_key(cx, idx);
        if let Some(validator) = input {
            steps::check_arguments(validator, cx.arguments_or_empty())
                .map_err(Refusal::InvalidArguments)?;
        }
        match self.keys().look_up_key(cx) {
            Some(end) => Err(end.into()),
            None => Ok(()),
        }
    }

    /// Step 5: a call a person approved goes on if this is the definition
    /// they approved; a 2026-07-28 host's retry may carry the person's
    /// answer to the gateway's question; else an ask asks.
    pub(super) fn approve(
        &mut self,
        cx: &mut CallContext,
        session: SessionFacts,
        verdict: Verdict,
    ) -> Result<(), Exit> {
        let carries = session.modern && super::era::carries_our_answer(cx);
        match steps::approval(verdict, cx.digest(), cx.approved(), carries) {
            // An approval is for what the person was shown: a file that
            // changed since is asked about again.
            Approval::Approved => self.lookup().still_as_shown(cx),
            Approval::CarriesAnswer => {
                cx.preview = self.lookup().preview_of(cx);
                if self.lookup().sealed_for_another_preview(cx) {
                    cx.preview_changed = true;
                    return Err(Exit::Ask);
                }
                Ok(self.open_modern_answer(cx)?)
            }
            Approval::Ask => {
                cx.preview = self.lookup().preview_of(cx);
                Err(Exit::Ask)
            }
            Approval::Policy => {
                let first = cx.decision.as_ref().and_then(|d| d.reasons.first());
                cx.approver = Approver::Policy(first.map(|reason| reason.code));
                self.lookup().preview_for_record(cx);
                Ok(())
            }
        }
    }
}

/// What a server's answer to a forwarded call comes to.
#[derive(Debug)]
pub(crate) enum Answered {
    /// The line for the host, and the call's outcome.
    Answer(String, Outcome),
    /// A 2026-07-28 server's input-required result for a legacy host: its
    /// questions are asked of the host one by one (`relay`).
    Gather(Value),
}

impl Stages<'_> {
    /// Step 7: a server's answer to call `cx` read once: a result that
    /// cannot be read one way only is not passed on; a 2026-07-28 server's
    /// questions go to a legacy host one by one ([`Answered::Gather`]) and
    /// to a 2026-07-28 host marked as the server's; a result taints the
    /// session where the tool returns private data, its structured content
    /// must match the output schema, and a keyed call's result is kept for
    /// a later call with the key.
    pub(super) fn answer_of(
        &mut self,
        idx: ServerIdx,
        cx: &CallContext,
        message: &Message<'_>,
    ) -> Answered {
        let session = cx.request.session;
        let outcome = match message.result {
            None => Outcome::ProtocolError,
            Some(raw) => {
                let view = match read_result(raw) {
                    Ok(view) => view,
                    Err(err) => {
                        let text = format!(
                            "hintgate did not pass on the answer of `{}`: its result cannot be read one way only ({err})",
                            self.upstreams.name(idx)
                        );
                        return self.answered_here(idx, cx, &text, Outcome::ProtocolError);
                    }
                };
                let asks = view.result_type.as_deref() == Some("input_required");
                // A 2026-07-28 server asks a legacy host for input: the
                // gateway asks the host and calls the server again.
                if asks && !self.sessions.get(&session).is_some_and(HostSession::modern) {
                    return Answered::Gather(serde_json::from_str(raw).unwrap_or(Value::Null));
                }
                // A 2026-07-28 host gets the server's questions marked as
                // the server's; the host's retry is a call of its own.
                if asks && let Some(marked) = self.lookup().marked_input_required(idx, raw) {
                    return match marked {
                        Ok(result) => Answered::Answer(
                            crate::frame::response(cx.request.id(), &result),
                            Outcome::InputRequired,
                        ),
                        Err(why) => {
                            let text =
                                format!("hintgate did not pass on the server's question: {why}");
                            self.answered_here(idx, cx, &text, Outcome::ProtocolError)
                        }
                    };
                }
                match self.call_result(idx, cx, raw, &view) {
                    Ok(outcome) => outcome,
                    Err(answered) => return answered,
                }
            }
        };
        let line =
            self.lookup()
                .host_response(idx, session, message, cx.request.id(), "tools/call");
        // A call a person edited says so, and how, in what the host gets.
        Answered::Answer(self.lookup().note_edit(cx, line, true), outcome)
    }

    /// A call's result, read: it taints the session where the tool returns
    /// private data, its structured content must match the output schema,
    /// and a keyed call's result is kept for a later call with the key. Its
    /// outcome, or the answer made here instead.
    fn call_result(
        &mut self,
        idx: ServerIdx,
        cx: &CallContext,
        raw: &str,
        view: &CallResultView<'_>,
    ) -> Result<Outcome, Answered> {
        if cx.taints() {
            let what = format!("a result of `{}`", cx.tool());
            self.sessions
                .taint(cx.request.session, self.upstreams.name(idx), &what);
        }
        let is_error = view.is_error == Some(true);
        if let (false, Some(validator), Some(structured)) = (is_error, cx.output(), view.structured)
            && let Err(problems) = steps::check_output(validator, structured.get())
        {
            let text = format!(
                "`{}` returned structured content that does not match the tool's output schema: {}",
                self.upstreams.name(idx),
                problems.join("; ")
            );
            return Err(self.answered_here(idx, cx, &text, Outcome::OutputSchemaMismatch));
        }
        // The call ran: a keyed one's result is recorded as the answer to a
        // later call with the same key.
        self.keys().key_done(cx, raw);
        Ok(if is_error {
            Outcome::ToolError
        } else {
            Outcome::Ok
        })
    }

    /// What the gateway answers in place of a server's answer it did not
    /// pass on: `text` as an `isError` result, logged; a call whose output
    /// did not match its schema ran, so a later call with its key gets what
    /// this host got.
    fn answered_here(
        &self,
        idx: ServerIdx,
        cx: &CallContext,
        text: &str,
        outcome: Outcome,
    ) -> Answered {
        tracing::warn!(server.id = %self.upstreams.name(idx), tool.name = %cx.tool(), "{text}");
        let refused = error_result(text);
        if outcome == Outcome::OutputSchemaMismatch {
            self.keys().key_done(cx, &refused.to_string());
        }
        let line = self
            .sessions
            .result_line(cx.request.session, cx.request.id(), &refused);
        Answered::Answer(line, outcome)
    }
}

#[cfg(test)]
mod tests {
    //! Each step with parts built by hand: no gateway, no server, no host.

    use std::sync::Arc;

    use hintgate_policy::decide::Verdict;
    use hintgate_policy::reason::ReasonCode;
    use serde_json::{Value, json};
    use tokio::sync::mpsc;

    use crate::gateway::call::{Approver, CallContext, Exit, Need, Outcome, Refusal};
    use crate::gateway::fixture::{
        ONE, Parts, call, delete_tool, legacy_session, read_tool, refusal,
    };
    use crate::gateway::request::SessionId;
    use crate::gateway::session::{Era, HostSession};
    use crate::gateway::upstreams::Phase;

    #[test]
    fn step_2_starts_a_stopped_server_once_per_call_then_waits_or_answers_its_failure() {
        let mut parts = Parts::new(ONE);
        let mut cx = call("fs__read", &json!({}));
        cx.resolve(0, "read".to_owned());
        // Stopped: the call needs it started, and notes it did.
        let exit = parts.stages().definition_ready(&mut cx, 0).unwrap_err();
        assert!(matches!(exit, Exit::Need(Need::Start(0))), "{exit:?}");
        assert_eq!(cx.request.restarted, Some(0));
        // Starting: it waits.
        parts.upstreams.get_mut(0).unwrap().phase = Phase::Starting;
        let exit = parts.stages().definition_ready(&mut cx, 0).unwrap_err();
        assert!(matches!(exit, Exit::Wait), "{exit:?}");
        // Failed after this call started it: the failure is its answer, and
        // it is not started a second time.
        parts.upstreams.get_mut(0).unwrap().phase = Phase::Failed("exit 1".to_owned());
        let exit = parts.stages().definition_ready(&mut cx, 0).unwrap_err();
        assert!(
            matches!(refusal(exit), Refusal::ServerUnavailable(ref why) if why == "exit 1"),
            "a failed server was started again for the same call"
        );
        // Another call starts it again.
        let mut other = call("fs__read", &json!({}));
        let exit = parts.stages().definition_ready(&mut other, 0).unwrap_err();
        assert!(matches!(exit, Exit::Need(Need::Start(0))), "{exit:?}");
    }

    #[test]
    fn step_2_lists_a_servers_tools_once_per_call_and_goes_on_only_once_they_are_listed() {
        let mut parts = Parts::new(ONE).running(0);
        let mut cx = call("fs__read", &json!({}));
        let exit = parts.stages().definition_ready(&mut cx, 0).unwrap_err();
        assert!(matches!(exit, Exit::Need(Need::List(0))), "{exit:?}");
        assert!(cx.relisted);
        // Being listed: it waits.
        parts.catalog.begin_listing(0);
        let exit = parts.stages().definition_ready(&mut cx, 0).unwrap_err();
        assert!(matches!(exit, Exit::Wait), "{exit:?}");
        // Listed: it goes on, bound to this start of the server.
        let mut parts = parts.listing(0, &[read_tool()]);
        cx.request.wait_until = Some(tokio::time::Instant::now());
        parts.stages().definition_ready(&mut cx, 0).unwrap();
        assert_eq!(cx.generation, Some(0));
        assert_eq!(cx.request.wait_until, None);
    }

    #[test]
    fn step_3_decides_on_the_listed_definition_and_an_untrusted_servers_read_only_hint_lowers_nothing()
     {
        let trusted = format!("{ONE}[servers.web]\ncommand = \"y\"\ntrust = \"untrusted\"\n");
        let mut parts = Parts::new(&trusted)
            .listing(0, &[read_tool()])
            .listing(1, &[read_tool()]);
        // The trusted server's read-only tool runs unasked.
        let mut cx = call("fs__read", &json!({"path": "a"}));
        let (verdict, input) = parts
            .stages()
            .decide_call(
                &mut {
                    cx.resolve(0, "read".to_owned());
                    cx
                },
                0,
                legacy_session(),
            )
            .unwrap();
        assert_eq!(verdict, Verdict::Allow);
        assert!(input.is_some(), "the input schema goes to step 4");
        // The same claim from an untrusted server asks a person.
        let mut cx = call("web__read", &json!({"path": "a"}));
        cx.resolve(1, "read".to_owned());
        let (verdict, _) = parts
            .stages()
            .decide_call(&mut cx, 1, legacy_session())
            .unwrap();
        assert_eq!(verdict, Verdict::Ask);
        assert!(cx.digest().is_some(), "the definition decided on is kept");
        assert_eq!(parts.decided(), vec![Verdict::Allow, Verdict::Ask]);
        // A tool the server does not list is no call to decide.
        let mut cx = call("fs__gone", &json!({}));
        cx.resolve(0, "gone".to_owned());
        let exit = parts
            .stages()
            .decide_call(&mut cx, 0, legacy_session())
            .unwrap_err();
        assert!(matches!(refusal(exit), Refusal::UnknownTool));
    }

    #[test]
    fn step_3_ends_a_denied_call_and_asks_the_decision_hook_before_anything_else() {
        let config = format!(
            "[gateway]\ndecide_command = [\"decide\"]\n{ONE}[[rules]]\nserver = \"fs\"\ntool = \"delete\"\naction = \"deny\"\nreason = \"no\"\n"
        );
        let mut parts = Parts::new(&config).listing(0, &[read_tool(), delete_tool()]);
        // A deny rule settles it: the hook is not asked.
        let mut cx = call("fs__delete", &json!({}));
        cx.resolve(0, "delete".to_owned());
        let exit = parts
            .stages()
            .decide_call(&mut cx, 0, legacy_session())
            .unwrap_err();
        assert!(matches!(
            refusal(exit),
            Refusal::Denied {
                by: Approver::Gateway,
                ..
            }
        ));
        let decision = cx.decision.as_ref().unwrap();
        assert_eq!(decision.codes().next(), Some(ReasonCode::RuleDeny));
        // Else the hook is asked first, with the call's arguments.
        let mut cx = call("fs__read", &json!({"path": "notes.txt"}));
        cx.resolve(0, "read".to_owned());
        let Exit::Hook(ask) = parts
            .stages()
            .decide_call(&mut cx, 0, legacy_session())
            .unwrap_err()
        else {
            panic!("the hook was not asked");
        };
        let question: Value = serde_json::from_str(&ask.line).unwrap();
        assert_eq!(question["arguments"], json!({"path": "notes.txt"}));
        assert_eq!(question["id"], json!(ask.id.to_string()));
        assert_eq!(cx.hook_asks, 1);
        assert_eq!(parts.decided(), vec![Verdict::Deny]);
    }

    #[test]
    fn step_3b_needs_the_read_only_instance_started_and_listing_the_definition_decided_on() {
        let config = "[servers.db]\ncommand = \"x\"\ntrust = \"trusted\"\n[servers.db.read_only]\nargs = [\"r\"]\nvouch = true\n";
        let mut parts = Parts::new(config).listing(0, &[read_tool()]);
        let mut cx = call("db__read", &json!({"path": "a"}));
        cx.resolve(0, "read".to_owned());
        parts
            .stages()
            .decide_call(&mut cx, 0, legacy_session())
            .unwrap();
        // The instance (index 1) is stopped: it is started for the call.
        let exit = parts.stages().read_only_ready(&mut cx, 0).unwrap_err();
        assert!(matches!(exit, Exit::Need(Need::Start(1))), "{exit:?}");
        // Running but listing another definition: never sent there.
        let other = json!({"name": "read", "description": "changed",
            "annotations": {"readOnlyHint": true}, "inputSchema": {"type": "object"}});
        let mut parts = parts.listing(1, &[other]);
        let exit = parts.stages().read_only_ready(&mut cx, 0).unwrap_err();
        assert!(
            matches!(refusal(exit), Refusal::ReadOnlyDiffers(ref why) if why.contains("another definition"))
        );
    }

    #[test]
    fn step_4_refuses_arguments_that_do_not_parse_or_fit_the_schema() {
        let mut parts = Parts::new(ONE).listing(0, &[read_tool()]);
        let mut cx = call("fs__read", &json!({"path": 7}));
        cx.resolve(0, "read".to_owned());
        let (_, input) = parts
            .stages()
            .decide_call(&mut cx, 0, legacy_session())
            .unwrap();
        let exit = parts
            .stages()
            .validate(&mut cx, 0, input.as_deref())
            .unwrap_err();
        assert!(matches!(refusal(exit), Refusal::InvalidArguments(_)));
        let mut cx = call("fs__read", &json!({"path": "a"}));
        cx.resolve(0, "read".to_owned());
        parts
            .stages()
            .validate(&mut cx, 0, input.as_deref())
            .unwrap();
        assert_eq!(cx.arguments, Some(json!({"path": "a"})));
    }

    #[test]
    fn step_5_asks_unless_the_policy_or_a_person_let_this_definition_through() {
        let untrusted = "[servers.web]\ncommand = \"y\"\ntrust = \"untrusted\"\n";
        let mut parts = Parts::new(untrusted).listing(0, &[read_tool()]);
        let mut cx = call("web__read", &json!({"path": "a"}));
        let session = legacy_session();
        let exit = parts.stages().run(&mut cx, session).unwrap_err();
        assert!(matches!(exit, Exit::Ask), "{exit:?}");
        // A person approved this definition: it goes on, theirs.
        cx.approved_by(Approver::Person(crate::gateway::call::Channel::Elicitation));
        parts.stages().run(&mut cx, session).unwrap();
        // The policy lets a trusted server's read through, naming why.
        let mut parts = Parts::new(ONE).listing(0, &[read_tool()]);
        let mut cx = call("fs__read", &json!({"path": "a"}));
        parts.stages().run(&mut cx, session).unwrap();
        assert!(
            matches!(cx.approver, Approver::Policy(Some(_))),
            "{:?}",
            cx.approver
        );
    }

    /// The call `cx` of `fs__read`, decided on and forwarded, for session 1
    /// of `era`, whose server answers `result`.
    fn server_answers(parts: &mut Parts, era: Era, result: &str) -> (CallContext, super::Answered) {
        let (out, _lines) = mpsc::unbounded_channel();
        let mut host = HostSession::new(out, Arc::default(), Arc::default());
        host.era = era;
        parts.sessions.insert(SessionId::FIRST, host);
        let mut cx = call("fs__read", &json!({"path": "a"}));
        let session = legacy_session();
        parts.stages().run(&mut cx, session).unwrap();
        let line = format!(r#"{{"jsonrpc":"2.0","id":7,"result":{result}}}"#);
        let message = crate::frame::Message::parse(&line).unwrap();
        let answered = parts.stages().answer_of(0, &cx, &message);
        (cx, answered)
    }

    fn answer(answered: super::Answered) -> (Value, Outcome) {
        match answered {
            super::Answered::Answer(line, outcome) => {
                (serde_json::from_str(&line).unwrap(), outcome)
            }
            super::Answered::Gather(result) => panic!("gathered {result}"),
        }
    }

    #[test]
    fn step_7_passes_a_result_on_and_names_its_outcome() {
        let legacy = Era::Legacy("2025-06-18".to_owned());
        let mut parts = Parts::new(ONE).listing(0, &[read_tool()]);
        let (_, answered) = server_answers(
            &mut parts,
            legacy.clone(),
            r#"{"content":[{"type":"text","text":"hi"}]}"#,
        );
        let (line, outcome) = answer(answered);
        assert_eq!(outcome, Outcome::Ok);
        assert_eq!(line["id"], json!(1), "the host's id, not the server's");
        assert_eq!(line["result"]["content"][0]["text"], json!("hi"));
        assert!(
            !parts.sessions.get(&SessionId::FIRST).unwrap().tainted,
            "a server not marked private_data tainted the session"
        );
        let (_, answered) = server_answers(
            &mut parts,
            legacy.clone(),
            r#"{"content":[],"isError":true}"#,
        );
        assert_eq!(answer(answered).1, Outcome::ToolError);
        // A result that reads two ways is not passed on.
        let (_, answered) = server_answers(
            &mut parts,
            legacy,
            r#"{"content":[],"isError":false,"isError":true}"#,
        );
        let (line, outcome) = answer(answered);
        assert_eq!(outcome, Outcome::ProtocolError);
        assert_eq!(line["result"]["isError"], json!(true));
        let text = line["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("cannot be read one way only"), "{text}");
    }

    #[test]
    fn step_7_refuses_structured_content_the_output_schema_does_not_allow() {
        let tool = json!({"name": "read", "annotations": {"readOnlyHint": true},
            "inputSchema": {"type": "object"},
            "outputSchema": {"type": "object", "properties": {"n": {"type": "integer"}},
                "required": ["n"]}});
        let mut parts = Parts::new(ONE).listing(0, &[tool]);
        let legacy = Era::Legacy("2025-06-18".to_owned());
        let (_, ok) = server_answers(
            &mut parts,
            legacy.clone(),
            r#"{"content":[],"structuredContent":{"n":1}}"#,
        );
        assert_eq!(answer(ok).1, Outcome::Ok);
        let (_, bad) = server_answers(
            &mut parts,
            legacy,
            r#"{"content":[],"structuredContent":{"n":"one"}}"#,
        );
        let (line, outcome) = answer(bad);
        assert_eq!(outcome, Outcome::OutputSchemaMismatch);
        assert_eq!(line["result"]["isError"], json!(true));
        assert!(line["result"].get("structuredContent").is_none(), "{line}");
    }

    #[test]
    fn step_7_taints_the_session_with_a_private_data_servers_result() {
        let private = "[servers.fs]\ncommand = \"x\"\ntrust = \"trusted\"\nprivate_data = true\n";
        let mut parts = Parts::new(private).listing(0, &[read_tool()]);
        let legacy = Era::Legacy("2025-06-18".to_owned());
        assert!(
            !parts
                .sessions
                .get(&SessionId::FIRST)
                .is_some_and(|host| host.tainted)
        );
        let (_, answered) = server_answers(&mut parts, legacy, r#"{"content":[]}"#);
        assert_eq!(answer(answered).1, Outcome::Ok);
        assert!(parts.sessions.get(&SessionId::FIRST).unwrap().tainted);
    }

    #[test]
    fn step_7_asks_a_legacy_host_a_modern_servers_questions_one_by_one() {
        let mut parts = Parts::new(ONE).listing(0, &[read_tool()]);
        let questions = r#"{"resultType":"input_required","inputRequests":{"q":{"method":"elicitation/create","params":{"message":"sure?","requestedSchema":{"type":"object","properties":{}}}}}}"#;
        let (_, answered) =
            server_answers(&mut parts, Era::Legacy("2025-06-18".to_owned()), questions);
        let super::Answered::Gather(result) = answered else {
            panic!("a legacy host was passed a result it cannot read");
        };
        assert_eq!(result["resultType"], json!("input_required"));
    }
}
