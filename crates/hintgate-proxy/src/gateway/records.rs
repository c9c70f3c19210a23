//! A call's records: what the audit log keeps of it (its call record, and
//! how it ended), and the answer of a call that ends at the gateway.
//!
//! [`Records`] borrows the journal, the turn's outbox and what a record
//! reads (the policy, the servers' names, the catalog, the sessions, the
//! store for the call's idempotency key) and nothing else: writing a
//! record can neither run the pipeline nor send a call to a server. The
//! pipeline, the parts and the loop write every record of a call through
//! it; each record joins the turn's batch, which is durable before
//! anything the turn produced is sent (`Gateway::end_turn`).

use std::sync::Arc;

use hintgate_policy::config::Instance;
use hintgate_policy::decide::{Decision, Policy};
use hintgate_store::Store;
use serde_json::Value;

use super::Gateway;
use super::call::{Approver, CallContext, CallEnd, Outcome, Refusal, Refused, answer_line};
use super::catalog::Catalog;
use super::journal::{CallFields, Journal};
use super::keys::Keys;
use super::lookup::Lookup;
use super::outbox::Outbox;
use super::request::HostRequest;
use super::session::{HostSession, Sessions};
use super::upstreams::Upstreams;
use crate::seal::Sealer;
use crate::telemetry::Tracer;

/// The records' part, as the gateway lends it to write a call's records.
pub(crate) struct Records<'a> {
    pub(super) policy: &'a Policy,
    pub(super) upstreams: &'a Upstreams,
    pub(super) catalog: &'a Catalog,
    /// Borrowed to change only to taint a session whose call was answered
    /// from an earlier run's result.
    pub(super) sessions: &'a mut Sessions,
    pub(super) journal: &'a mut Journal,
    pub(super) sealer: &'a Sealer,
    pub(super) store: &'a Option<Arc<dyn Store>>,
    pub(super) run_name: &'a str,
    pub(super) metrics: &'a Option<Arc<crate::metrics::Metrics>>,
    pub(super) tracer: &'a Option<Tracer>,
    pub(super) outbox: &'a mut Outbox,
}

// === impl Gateway ===

impl Gateway {
    /// The view a call's records are written through.
    pub(super) fn records(&mut self) -> Records<'_> {
        Records {
            policy: &self.policy,
            upstreams: &self.upstreams,
            catalog: &self.catalog,
            sessions: &mut self.sessions,
            journal: &mut self.journal,
            sealer: &self.sealer,
            store: &self.store,
            run_name: &self.run_name,
            metrics: &self.metrics,
            tracer: &self.tracer,
            outbox: &mut self.outbox,
        }
    }
}

// === impl Records ===

impl Records<'_> {
    /// The parts a record reads, as the steps that only look things up see
    /// them.
    fn lookup(&self) -> Lookup<'_> {
        Lookup {
            policy: self.policy,
            upstreams: self.upstreams,
            catalog: self.catalog,
            sessions: self.sessions,
            journal: self.journal,
            sealer: self.sealer,
        }
    }

    /// The key rules' view, for a call's idempotency key.
    fn keys(&self) -> Keys<'_> {
        Keys {
            policy: self.policy,
            upstreams: self.upstreams,
            catalog: self.catalog,
            store: self.store.as_ref(),
            sessions: self.sessions,
            sealer: self.sealer,
            run_name: self.run_name,
        }
    }

    /// Ends a forwarded call: its outcome joins the turn's records, and its
    /// answer goes to the host at the end of the turn, after them.
    pub(super) fn answer_call(&mut self, cx: &CallContext, line: String, outcome: Outcome) {
        self.record_outcome(cx, outcome);
        self.outbox.host(cx.request.session, line);
    }

    /// Records how a forwarded call ended.
    pub(super) fn record_outcome(&mut self, cx: &CallContext, outcome: Outcome) {
        export_trace(
            self.tracer.as_ref(),
            self.upstreams,
            cx,
            outcome,
            cx.decision.as_ref(),
        );
        self.keys().end_key_by_outcome(cx, outcome);
        count_upstream(self.metrics.as_deref(), self.upstreams, cx, outcome);
        let Some(seq) = cx.record() else {
            return;
        };
        let millis = cx.started().map_or(0, |started| {
            u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
        });
        self.journal.outcome(seq, outcome, millis, cx.attempt);
    }

    /// The call's record (with its outcome, for a call that ends at the
    /// gateway); its place in the turn's batch.
    pub(super) fn record_call(
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
        let server = cx.server().map_or("", |idx| self.upstreams.name(idx));
        let identity = cx.server().and_then(|idx| self.catalog.key(idx));
        // The hosts an enforced `network = ["host:port", ...]` lets the
        // server reach: where it can send what it has.
        let egress = cx
            .server()
            .filter(|idx| self.catalog.sandbox(*idx).egress_only)
            .and_then(|_| self.policy.server(server))
            .and_then(|config| config.sandbox.as_ref())
            .map(hintgate_policy::config::SandboxConfig::egress_hosts);
        let tool = if cx.tool().is_empty() {
            cx.params.name.as_str()
        } else {
            cx.tool()
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
        let principal = self.sessions.principal(cx.request.session);
        let token_scope = token_scope_of(self.upstreams, cx, principal.as_deref());
        let preview = self.lookup().preview_record(cx);
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
            pin: cx.digest_text(),
            outcome,
            host: self
                .sessions
                .get(&cx.request.session)
                .and_then(|host| host.principal.as_deref()),
            idempotency: cx
                .idem
                .as_ref()
                .map(|idem| (idem.key.as_str(), idem.filled)),
            instance: instance_fields(self.upstreams, cx),
            egress: egress.as_deref(),
            token_scope: token_scope.as_deref(),
            preview: preview.as_ref(),
            edit: cx
                .edit
                .as_deref()
                .map(|edit| (edit.by.as_str(), edit.original.as_ref())),
        };
        self.journal.call(&fields)
    }

    /// The record of a call that ends here, with `outcome`, as decided.
    pub(super) fn record_ended(&mut self, cx: &CallContext, outcome: Outcome) {
        let decision = cx.decision_or(hintgate_policy::reason::ReasonCode::InternalError);
        let approver = cx.approver.clone();
        self.record_call(cx, Some((outcome, &decision, approver)));
    }

    /// A call ends at the gateway: its record, and its answer after it (a
    /// call the host withdrew gets no answer).
    pub(super) fn end_call(&mut self, cx: Box<CallContext>, end: CallEnd) {
        taint_by_replay(self.sessions, self.upstreams, &cx, &end);
        let decision = end.decision(cx.decision.as_ref());
        self.record_call(&cx, Some((end.outcome(), &decision, end.approver())));
        export_trace(
            self.tracer.as_ref(),
            self.upstreams,
            &cx,
            end.outcome(),
            Some(&decision),
        );
        if matches!(end, CallEnd::Withdrawn(_)) {
            return;
        }
        let line = end_line(self.policy, self.upstreams, self.sessions, &cx, &end);
        // A call a person edited says so, also when it ends here.
        let line = self.lookup().note_edit(&cx, line, false);
        self.outbox.host(cx.request.session, line);
    }

    /// A `tools/call` the gateway could not read ends here: recorded as a
    /// deny, answered with a JSON-RPC error when it has an id.
    pub(super) fn refuse_unparsed(&mut self, request: HostRequest, refusal: Refusal) {
        let has_id = request.spans.id.is_some();
        let cx = CallContext::unread(request);
        let end = CallEnd::Refused(refusal);
        let decision = end.decision(None);
        self.record_call(&cx, Some((end.outcome(), &decision, end.approver())));
        if has_id {
            let line = end_line(self.policy, self.upstreams, self.sessions, &cx, &end);
            self.outbox.host(cx.request.session, line);
        }
    }
}

/// For a call to a server behind OAuth: the scopes of the token the
/// instance it goes to sends (the read-only instance's own, for a call
/// decided for it).
pub(super) fn token_scope_of(
    upstreams: &super::upstreams::Upstreams,
    cx: &CallContext,
    principal: Option<&str>,
) -> Option<String> {
    let idx = cx.server()?;
    let idx = match cx.instance {
        Instance::ReadOnly => upstreams.get(idx)?.read_only?,
        Instance::Full => idx,
    };
    upstreams.get(idx)?.token_scope(principal.unwrap_or(""))
}

/// What the record says of a call's instance: for a server with a
/// read-only instance and a definition decided on, where it was decided to
/// go (and the read-only instance's identity key when there).
pub(super) fn instance_fields<'a>(
    upstreams: &'a super::upstreams::Upstreams,
    cx: &CallContext,
) -> Option<(Instance, Option<&'a str>)> {
    let instance = upstreams.get(cx.server()?)?.read_only?;
    cx.digest()?;
    let key = match cx.instance {
        Instance::ReadOnly => upstreams
            .get(instance)
            .and_then(|instance| instance.identity_key.as_deref()),
        Instance::Full => None,
    };
    Some((cx.instance, key))
}

/// Sends the call's spans to the tracer, when it ended with `outcome`
/// (not when it goes on: a retry, or a server's question to answer
/// first). Names only: server, tool, verdict, reason codes, outcome.
pub(super) fn export_trace(
    tracer: Option<&crate::telemetry::Tracer>,
    upstreams: &Upstreams,
    cx: &CallContext,
    outcome: Outcome,
    decision: Option<&Decision>,
) {
    let (Some(tracer), Some(trace)) = (tracer, cx.trace.as_deref()) else {
        return;
    };
    if matches!(outcome, Outcome::FailedRetried | Outcome::InputRequired) {
        return;
    }
    let code = super::journal::code_of(outcome).as_str();
    let mut attributes = vec![
        ("mcp.method.name", "tools/call".to_owned()),
        (
            "mcp.tool.name",
            if cx.tool().is_empty() {
                cx.params.name.clone()
            } else {
                cx.tool().to_owned()
            },
        ),
        ("hintgate.outcome", code.to_owned()),
        ("hintgate.approver", cx.approver.to_string()),
    ];
    if let Some(idx) = cx.server() {
        attributes.push(("mcp.server.name", upstreams.name(idx).to_owned()));
    }
    if let Some(decision) = decision {
        let verdict = match decision.verdict {
            hintgate_policy::decide::Verdict::Allow => "allow",
            hintgate_policy::decide::Verdict::Ask => "ask",
            hintgate_policy::decide::Verdict::Deny => "deny",
        };
        attributes.push(("hintgate.verdict", verdict.to_owned()));
        let reasons: Vec<&str> = decision.codes().map(|code| code.as_str()).collect();
        attributes.push(("hintgate.reasons", reasons.join(",")));
    }
    if cx.instance == Instance::ReadOnly {
        attributes.push(("hintgate.instance", "read-only".to_owned()));
    }
    if cx.attempt > 0 {
        attributes.push(("hintgate.attempt", cx.attempt.to_string()));
    }
    let error = matches!(
        outcome,
        Outcome::ProtocolError | Outcome::Failed | Outcome::Unsent | Outcome::OutputSchemaMismatch
    )
    .then(|| code.to_owned());
    for span in trace.spans(attributes, error) {
        tracer.record(span);
    }
}

/// Counts a call its server answered or failed: its latency, and an error
/// when it failed. A call that never reached its server, or whose end is
/// the host's or the gateway's doing, is not counted
/// ([`counted_as_failed`]).
pub(super) fn count_upstream(
    metrics: Option<&crate::metrics::Metrics>,
    upstreams: &Upstreams,
    cx: &CallContext,
    outcome: Outcome,
) {
    let (Some(metrics), Some(started), Some(idx)) = (metrics, cx.started(), cx.server()) else {
        return;
    };
    if let Some(failed) = counted_as_failed(outcome) {
        metrics.upstream(upstreams.configured_of(idx), started.elapsed(), failed);
    }
}

/// The line that answers a call that ends at the gateway as `end` (the one
/// mapping, [`CallEnd::answer`], with the decision the end stands for).
pub(super) fn end_line(
    policy: &hintgate_policy::decide::Policy,
    upstreams: &Upstreams,
    sessions: &super::session::Sessions,
    cx: &CallContext,
    end: &CallEnd,
) -> String {
    let decision = &end.decision(cx.decision.as_ref());
    let server = cx.server().map_or("", |idx| upstreams.name(idx));
    let answer = end.answer(Refused {
        host_name: &cx.params.name,
        server,
        tool: if cx.tool().is_empty() {
            &cx.params.name
        } else {
            cx.tool()
        },
        decision,
        policy,
    });
    let modern = sessions
        .get(&cx.request.session)
        .is_some_and(HostSession::modern);
    answer_line(cx.request.id(), answer, |result| {
        super::era::modernize(modern, "", result);
    })
}

/// A replayed result of a private-data tool taints the session as the
/// answer it repeats did.
pub(super) fn taint_by_replay(
    sessions: &mut Sessions,
    upstreams: &Upstreams,
    cx: &CallContext,
    end: &CallEnd,
) {
    if let (CallEnd::Replayed(_), Some(idx)) = (end, cx.server())
        && cx.taints()
    {
        let what = format!("a replayed result of `{}`", cx.tool());
        sessions.taint(cx.request.session, upstreams.name(idx), &what);
    }
}

/// Whether an outcome counts as its server's failure (`Some(true)`), its
/// answer (`Some(false)`), or is no answer of a server's at all (`None`:
/// the call was not sent, or ended at the gateway or with the host).
pub(super) const fn counted_as_failed(outcome: Outcome) -> Option<bool> {
    match outcome {
        Outcome::Ok
        | Outcome::ToolError
        | Outcome::OutputSchemaMismatch
        | Outcome::InputRequired => Some(false),
        Outcome::ProtocolError | Outcome::Failed | Outcome::FailedRetried => Some(true),
        Outcome::Unsent
        | Outcome::Denied
        | Outcome::InvalidArguments
        | Outcome::Relayed
        | Outcome::Cancelled
        | Outcome::HostGone
        | Outcome::Shutdown
        | Outcome::Replayed => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::gateway::call::Exit;
    use crate::gateway::fixture::{ONE, Parts, call, legacy_session, read_tool};
    use crate::gateway::outbox::Outgoing;
    use crate::gateway::request::SessionId;
    use crate::gateway::session::Era;

    /// Parts with a log, server `fs` listing `read`, and a legacy host.
    fn parts() -> Parts {
        let mut parts = Parts::new(ONE).listing(0, &[read_tool()]).logged();
        parts.host(Era::Legacy("2025-11-25".to_owned()), false);
        parts
    }

    /// The lines the turn has for hosts.
    fn host_lines(parts: &mut Parts) -> Vec<Value> {
        parts
            .outbox
            .take()
            .into_iter()
            .map(|outgoing| match outgoing {
                Outgoing::Host(SessionId::FIRST, line) => serde_json::from_str(&line).unwrap(),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_call_that_ends_here_is_recorded_as_decided_and_answered_after_unless_withdrawn() {
        let mut parts = parts();
        let mut cx = call("fs__nothing", &json!({}));
        let exit = parts.stages().run(&mut cx, legacy_session()).unwrap_err();
        let Exit::End(end) = exit else {
            panic!("{exit:?}");
        };
        parts.records().end_call(Box::new(cx), end);
        let answers = host_lines(&mut parts);
        assert_eq!(answers.len(), 1, "{answers:?}");
        assert_eq!(answers[0]["id"], 1);
        let records = parts.committed();
        assert_eq!(records.len(), 1, "{records:?}");
        assert_eq!(
            (&records[0]["server"], &records[0]["tool"]),
            (&json!("fs"), &json!("nothing"))
        );
        assert_eq!(records[0]["outcome"], "denied");
        assert_eq!(records[0]["verdict"], "deny");
        assert_eq!(records[0]["reasons"], json!(["unknown-tool"]));
        // The host withdrew this one: on record, and not answered.
        let cx = call("fs__read", &json!({"path": "a"}));
        parts
            .records()
            .end_call(Box::new(cx), CallEnd::Withdrawn(Outcome::Cancelled));
        assert!(parts.outbox.is_empty(), "a withdrawn call was answered");
        let records = parts.committed();
        assert_eq!(records.len(), 2);
        assert_eq!(records[1]["outcome"], "cancelled");
    }

    #[test]
    fn a_forwarded_call_is_recorded_before_its_outcome_which_names_it() {
        let mut parts = parts();
        let mut cx = call("fs__read", &json!({"path": "a"}));
        parts.stages().run(&mut cx, legacy_session()).unwrap();
        let place = parts.records().record_call(&cx, None);
        assert_eq!(place, Some(0));
        let seqs = parts.journal.commit().unwrap();
        let records = parts.committed();
        assert_eq!(records.len(), 1);
        assert_eq!(records[0]["tool"], "read");
        assert!(records[0].get("outcome").is_none(), "{}", records[0]);
        cx.recorded(seqs.first().copied());
        let line = r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#.to_owned();
        parts.records().answer_call(&cx, line, Outcome::Ok);
        assert_eq!(host_lines(&mut parts).len(), 1);
        let store = parts.store.clone().unwrap();
        parts.journal.commit().unwrap();
        let entries = store.entries(0, 10).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(
            entries[1].call,
            cx.record(),
            "the outcome names another call"
        );
    }

    #[test]
    fn without_a_log_nothing_is_recorded_and_an_ended_call_is_still_answered() {
        let mut parts = Parts::new(ONE);
        parts.host(Era::Legacy("2025-11-25".to_owned()), false);
        let cx = call("fs__read", &json!({}));
        assert_eq!(parts.records().record_call(&cx, None), None);
        parts
            .records()
            .end_call(Box::new(cx), CallEnd::Refused(Refusal::UnknownTool));
        assert_eq!(host_lines(&mut parts).len(), 1);
    }

    #[test]
    fn only_a_servers_answer_or_failure_is_counted_as_its_latency() {
        use crate::gateway::call::Outcome::*;
        for (outcome, counted) in [
            (Ok, Some(false)),
            (ToolError, Some(false)),
            (OutputSchemaMismatch, Some(false)),
            (InputRequired, Some(false)),
            (ProtocolError, Some(true)),
            (Failed, Some(true)),
            (FailedRetried, Some(true)),
            (Unsent, None),
            (Denied, None),
            (InvalidArguments, None),
            (Relayed, None),
            (Cancelled, None),
            (HostGone, None),
            (Shutdown, None),
            (Replayed, None),
        ] {
            assert_eq!(counted_as_failed(outcome), counted, "{outcome:?}");
        }
    }
}
