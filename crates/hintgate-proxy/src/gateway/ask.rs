//! Asking a person (design §4.3), and the calls held meanwhile.
//!
//! The channel depends on the host:
//! - a legacy host that declared elicitation gets `elicitation/create`, and
//!   the call is held in the in-flight table until the answer or the
//!   `ask_timeout_s`;
//! - a 2026-07-28 host that declared elicitation gets an input-required
//!   result whose `requestState` is sealed to this call; the call ends, and
//!   the host's retry with the answer is a call of its own that the sealed
//!   state lets through;
//! - a host that cannot ask: the call waits in the store's approval queue
//!   for `hintgate approvals`, held here, for `ask_timeout_s`.
//!
//! An approval sends the call through the pipeline again, the approved
//! definition noted: it is recorded and forwarded if that is still the
//! definition the server lists, and asked about anew if not. Anything else
//! refuses it.
//!
//! The steps of asking (here, and in `held`, `dry_run` and `edit`) are
//! methods of [`Desk`], a view of the parts they hold calls in
//! and read: they cannot run the pipeline, write a record or start a
//! server, and leave a call they are done with to the gateway ([`Then`]).
//! So each is tested here with parts built by hand, no gateway.

use std::collections::HashMap;
use std::sync::Arc;

use hintgate_policy::decide::{Policy, RememberOffer};
use hintgate_policy::pin::{PinStatus, diff};
use hintgate_policy::prompt::PromptInput;
use hintgate_store::{Answer, NewPending, Remember, Store};
use serde_json::{Map, Value, json};

use super::call::{Approver, CallContext, CallEnd, Channel, Refusal};
use super::catalog::Catalog;
use super::era::Declared;
use super::hooks::Hooks;
use super::inflight::{DeadlineKey, Expired, HostPurpose, InFlight};
use super::journal::{Journal, unix_now};
use super::lookup::Lookup;
use super::outbox::{Outbox, Then};
use super::request::SessionId;
use super::session::Sessions;
use super::upstreams::Upstreams;
use super::watch::StoreWatcher;
use super::{Gateway, Limits, Mode, Observed, Observer};
use crate::event::EventSender;
use crate::frame::{self, Message};
use crate::metrics::{AskChannel, AskEnding, Metrics};
use crate::seal::Sealer;

/// What the person may answer in the form.
const APPROVE: &str = "approve";
const REMEMBER: &str = "remember";
const THIS_CALL: &str = "this call only";
const THIS_SESSION: &str = "this tool for the rest of this session";
const ALWAYS: &str = "this tool always";

/// Calls waiting in the approval queue.
#[derive(Debug)]
pub(crate) struct Asks {
    /// This gateway run, as the queue names it.
    run: String,
    queued: HashMap<u64, Queued>,
}

#[derive(Debug)]
struct Queued {
    cx: Box<CallContext>,
    deadline: DeadlineKey,
}

/// The part that asks about calls, as the gateway lends it for one step:
/// the approval queue, the decision hooks and previewers, the calls held
/// for them, and what it reads to ask (the policy, the servers' names, the
/// catalog, the sessions, the store).
///
/// A step of this part can send (through the turn's outbox), hold a call
/// (in the in-flight table, the queue, a hook's or previewer's table) and
/// send a trusted server its dry run; it cannot run the pipeline, write a
/// record or start a server. A call it is done with is left to the gateway
/// in `then`, which the gateway applies, in order, as soon as the step
/// returns ([`Then`]: again through the pipeline, approved, or ended).
pub(crate) struct Desk<'a> {
    pub(super) policy: &'a Policy,
    pub(super) mode: &'a Mode,
    pub(super) limits: &'a Limits,
    pub(super) observer: &'a Observer,
    pub(super) metrics: &'a Option<Arc<Metrics>>,
    pub(super) store: &'a Option<Arc<dyn Store>>,
    pub(super) events: &'a EventSender,
    pub(super) sealer: &'a Sealer,
    pub(super) declared: &'a Declared,
    pub(super) sessions: &'a Sessions,
    pub(super) catalog: &'a Catalog,
    pub(super) journal: &'a Journal,
    /// Borrowed to change only for a dry run (its id, and its send).
    pub(super) upstreams: &'a mut Upstreams,
    pub(super) inflight: &'a mut InFlight,
    pub(super) asks: &'a mut Asks,
    pub(super) hooks: &'a mut Hooks,
    pub(super) watcher: &'a mut Option<StoreWatcher>,
    pub(super) outbox: &'a mut Outbox,
    /// The turn being handled (a dry run sent now is not held against its
    /// server as unread).
    pub(super) turn: u64,
    /// What the step left the gateway to do, in order.
    pub(super) then: Vec<Then>,
}

// === impl Desk ===

impl Desk<'_> {
    /// The parts the desk reads, as the steps that only look things up see
    /// them.
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

    /// The call goes through the pipeline again once this step returns.
    pub(super) fn again(&mut self, cx: Box<CallContext>) {
        self.then.push(Then::Run(cx));
    }

    /// The call ends at the gateway, on record, once this step returns.
    pub(super) fn end(&mut self, cx: Box<CallContext>, end: CallEnd) {
        self.then.push(Then::End(cx, end));
    }
}

// === impl Gateway ===

impl Gateway {
    /// Runs a step of the asking part, then does what it left to do with
    /// the calls it was done with, in order (each may come back here).
    pub(super) fn at_desk<R>(&mut self, step: impl FnOnce(&mut Desk<'_>) -> R) -> R {
        let mut desk = Desk {
            policy: &self.policy,
            mode: &self.mode,
            limits: &self.limits,
            observer: &self.observer,
            metrics: &self.metrics,
            store: &self.store,
            events: &self.events,
            sealer: &self.sealer,
            declared: &self.declared,
            sessions: &self.sessions,
            catalog: &self.catalog,
            journal: &self.journal,
            upstreams: &mut self.upstreams,
            inflight: &mut self.inflight,
            asks: &mut self.asks,
            hooks: &mut self.hooks,
            watcher: &mut self.watcher,
            outbox: &mut self.outbox,
            turn: self.turn,
            then: Vec::new(),
        };
        let result = step(&mut desk);
        let then = desk.then;
        for then in then {
            self.then(then);
        }
        result
    }

    /// Does what a part left to do with a call.
    pub(super) fn then(&mut self, then: Then) {
        match then {
            Then::Run(cx) => self.run_pipeline(cx),
            Then::Approved(cx, remember) => {
                super::pipeline::record_approval(
                    &mut self.catalog,
                    &mut self.sessions,
                    &self.upstreams,
                    self.store.as_ref(),
                    &cx,
                    remember,
                );
                self.run_pipeline(cx);
            }
            Then::End(cx, end) => self.records().end_call(cx, end),
            Then::Failed(cx, failure, why) => self.call_failed(cx, failure, &why),
            Then::Answer(cx, line, outcome) => self.records().answer_call(&cx, line, outcome),
            Then::NoDryRun(cx, why) => self.at_desk(|desk| desk.dry_run_failed(cx, &why)),
            Then::Fanned(aggregate, idx, failure) => self.fanout_done(aggregate, idx, failure),
            Then::Wake => self.retry_waiting(),
        }
    }
}

// === impl Asks ===

impl Asks {
    /// No call waits.
    pub fn new(run: String) -> Self {
        Self {
            run,
            queued: HashMap::new(),
        }
    }

    /// How many calls wait in the approval queue.
    pub fn queued(&self) -> usize {
        self.queued.len()
    }
}

/// A remember choice as the form names it.
fn remember_of(choice: Option<&str>) -> Remember {
    match choice {
        Some(THIS_SESSION) => Remember::Session,
        Some(ALWAYS) => Remember::Always,
        _ => Remember::Call,
    }
}

/// The form a person answers: approve or not, and, where a remembered
/// approval is allowed, how far to remember it.
fn requested_schema(offer: RememberOffer, can_remember_always: bool) -> Value {
    let mut properties = Map::new();
    properties.insert(
        APPROVE.to_owned(),
        json!({"type": "boolean", "title": "Approve this call", "default": false}),
    );
    if offer == RememberOffer::UpToAlways {
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

/// What a legacy host's person answered the gateway's elicitation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Elicited {
    /// Approved, remembered this far.
    Approved(Remember),
    /// Not approved: why, for the host, and in short, for the observer;
    /// `failed` when the host could not ask at all (an error, or no result).
    Refused {
        failed: bool,
        why: &'static str,
        short: &'static str,
    },
}

/// Reads the host's answer to the gateway's elicitation: only an `accept`
/// whose form says `approve: true` approves.
fn elicitation_answer(message: &Message<'_>) -> Elicited {
    let result: Option<Value> = message
        .result
        .and_then(|raw| serde_json::from_str(raw).ok());
    let Some(result) = result.filter(|_| message.error.is_none()) else {
        return Elicited::Refused {
            failed: true,
            why: "The host could not ask (it answered the prompt with an error).",
            short: "the host could not ask",
        };
    };
    let action = result.get("action").and_then(Value::as_str).unwrap_or("");
    let content = result.get("content");
    let approved = action == "accept"
        && content
            .and_then(|c| c.get(APPROVE))
            .and_then(Value::as_bool)
            == Some(true);
    if approved {
        return Elicited::Approved(remember_of(
            content
                .and_then(|c| c.get(REMEMBER))
                .and_then(Value::as_str),
        ));
    }
    let (why, short) = match action {
        "accept" => ("The person did not approve it.", "did not approve"),
        "decline" => ("The person declined.", "declined"),
        _ => ("The prompt was dismissed.", "dismissed the prompt"),
    };
    Elicited::Refused {
        failed: false,
        why,
        short,
    }
}

/// Counts a question to a person that ended, and how long the person
/// had it.
fn count_ask(
    metrics: Option<&crate::metrics::Metrics>,
    cx: &CallContext,
    channel: AskChannel,
    ending: AskEnding,
) {
    if let Some(metrics) = metrics {
        metrics.asked(channel, ending, cx.asked.map(|asked| asked.elapsed()));
    }
}

/// An answer given in the approval queue, `ending` the call's question:
/// reported to the observer (`answer` as its timeline reads) and counted.
fn queue_answered(
    observer: &super::Observer,
    metrics: Option<&crate::metrics::Metrics>,
    cx: &CallContext,
    server: String,
    ending: AskEnding,
    answer: String,
) {
    observer.observe(|| Observed::Answered {
        server,
        tool: cx.tool().to_owned(),
        approved: ending == AskEnding::Approved,
        answer,
    });
    count_ask(metrics, cx, AskChannel::Queue, ending);
}

/// Reports a question nobody answered to the observer.
fn observe_unanswered(
    observer: &super::Observer,
    upstreams: &super::upstreams::Upstreams,
    cx: &CallContext,
    answer: String,
) {
    observer.observe(|| Observed::Answered {
        server: cx.server().map_or("", |idx| upstreams.name(idx)).to_owned(),
        tool: cx.tool().to_owned(),
        approved: false,
        answer,
    });
}

/// How a call withdrawn from the approval queue ends (`why` is what the
/// queue records).
fn queue_withdrawal(id: u64, why: &str) -> CallEnd {
    let extra = format!("It waited in the approval queue as #{id}; {why}.");
    denied(&extra, Approver::Gateway).into()
}

// === impl Desk ===

impl Desk<'_> {
    /// Step 5 of the pipeline: a person must approve the call.
    pub(super) fn ask(&mut self, mut cx: Box<CallContext>) {
        let session = cx.request.session;
        let lookup = self.lookup();
        let previewer = cx
            .preview
            .is_none()
            .then(|| lookup.previewer_command(&cx))
            .flatten();
        let dry_run = cx
            .preview
            .is_none()
            .then(|| lookup.dry_run_argument(&cx))
            .flatten();
        let how = asking(
            self.sessions.get(&session),
            self.store.is_some(),
            previewer,
            dry_run,
        );
        let elicitation = matches!(how, Asking::Elicitation { .. } | Asking::InputRequired);
        match how {
            Asking::Nobody => {
                let extra = "It needs a person's approval, and this host cannot ask one (it did not declare elicitation).";
                self.end(cx, denied(extra, Approver::Gateway).into());
            }
            // Someone can be asked: a previewer command, or the server's dry
            // run, is asked first; the call comes back here with its
            // preview, or why there is none.
            Asking::Previewer(config) => self.preview_then_ask(cx, &config),
            Asking::DryRun(argument) => self.dry_run_then_ask(cx, &argument),
            // A prompt that goes to the store (the approval queue) shows the
            // arguments as the audit log keeps them: no secret reaches the
            // store.
            Asking::InputRequired => {
                let prompt = self.lookup().prompt(&cx, !elicitation);
                self.ask_modern(cx, prompt);
            }
            Asking::Queue => {
                let prompt = self.lookup().prompt(&cx, !elicitation);
                self.enqueue(cx, prompt);
            }
            Asking::Elicitation { form } => {
                let prompt = self.lookup().prompt(&cx, !elicitation);
                let offer = offer_of(&cx);
                let mut elicit = json!({
                    "message": prompt,
                    "requestedSchema": requested_schema(offer, self.store.is_some()),
                });
                if form && let Some(object) = elicit.as_object_mut() {
                    object.insert("mode".to_owned(), json!("form"));
                }
                let timeout = self.limits.ask_timeout;
                cx.asked = Some(tokio::time::Instant::now());
                cx.trace_mark(|trace| &mut trace.asked);
                let n = self
                    .inflight
                    .wait_host(session, HostPurpose::Ask(cx), timeout);
                self.outbox.host(
                    session,
                    frame::request(&format!("\"hintgate-{n}\""), "elicitation/create", &elicit),
                );
            }
        }
    }

    /// A legacy host's person answered the elicitation: approve forwards the
    /// call, anything else refuses it.
    pub(super) fn on_ask_answer(&mut self, mut cx: Box<CallContext>, message: &Message<'_>) {
        let server = cx
            .server()
            .map_or("", |idx| self.upstreams.name(idx))
            .to_owned();
        let remember = match elicitation_answer(message) {
            Elicited::Approved(remember) => remember,
            Elicited::Refused { failed, why, short } => {
                tracing::info!(server.id = %server, tool.name = %cx.tool(), "refused by the person: {why}");
                self.observer.observe(|| Observed::Answered {
                    server: server.clone(),
                    tool: cx.tool().to_owned(),
                    approved: false,
                    answer: short.to_owned(),
                });
                let (ending, by) = if failed {
                    (AskEnding::Failed, Approver::Gateway)
                } else {
                    (AskEnding::Declined, Approver::Person(Channel::Elicitation))
                };
                count_ask(
                    self.metrics.as_deref(),
                    &cx,
                    AskChannel::Elicitation,
                    ending,
                );
                self.end(cx, denied(why, by).into());
                return;
            }
        };
        tracing::info!(server.id = %server, tool.name = %cx.tool(), "approved by the person");
        let may_remember = offer_of(&cx) == RememberOffer::UpToAlways;
        let answer = match remember {
            Remember::Session if may_remember => {
                "approved, and remembered for the rest of this session"
            }
            Remember::Always if may_remember && self.store.is_some() => {
                "approved, and remembered always"
            }
            _ => "approved, for this call only",
        };
        self.observer.observe(|| Observed::Answered {
            server,
            tool: cx.tool().to_owned(),
            approved: true,
            answer: answer.to_owned(),
        });
        count_ask(
            self.metrics.as_deref(),
            &cx,
            AskChannel::Elicitation,
            AskEnding::Approved,
        );
        cx.approved_by(Approver::Person(Channel::Elicitation));
        self.then.push(Then::Approved(cx, remember));
    }

    /// Nobody answered the elicitation in time.
    pub(super) fn ask_timed_out(&mut self, cx: Box<CallContext>) {
        let seconds = self.limits.ask_timeout.as_secs();
        count_ask(
            self.metrics.as_deref(),
            &cx,
            AskChannel::Elicitation,
            AskEnding::TimedOut,
        );
        observe_unanswered(
            self.observer,
            self.upstreams,
            &cx,
            format!("did not answer within {seconds} s"),
        );
        let why = format!("Nobody answered within {seconds} s (`ask_timeout_s`).");
        self.end(cx, denied(&why, Approver::Gateway).into());
    }

    /// The question for a 2026-07-28 host: an input-required result whose
    /// sealed state binds this call; the host retries with the answer.
    fn ask_modern(&mut self, cx: Box<CallContext>, prompt: String) {
        let offer = offer_of(&cx);
        let sealed = self.sealer.seal(
            &cx.params.name,
            cx.arguments_or_empty(),
            &super::previews::sealed_pin(&cx),
            self.limits.ask_timeout.as_secs(),
            cx.idem
                .as_ref()
                .filter(|idem| idem.filled)
                .map(|idem| idem.key.as_str()),
        );
        let state = match sealed {
            Ok(state) => state,
            Err(err) => {
                let extra = format!(
                    "It needs a person's approval, and the gateway could not seal the question: {err}."
                );
                self.end(cx, denied(&extra, Approver::Gateway).into());
                return;
            }
        };
        let result = json!({
            "resultType": "input_required",
            "inputRequests": {
                super::era::INPUT_KEY: {
                    "method": "elicitation/create",
                    "params": {"mode": "form", "message": prompt, "requestedSchema": requested_schema(offer, self.store.is_some())},
                }
            },
            "requestState": state,
        });
        self.end(cx, CallEnd::InputRequired(result.to_string()));
    }

    // --- the approval queue ---

    /// Puts a call that needs a person in the approval queue and holds it.
    fn enqueue(&mut self, cx: Box<CallContext>, prompt: String) {
        let (Some(store), Some(idx)) = (self.store.clone(), cx.server()) else {
            self.end(cx, denied("It needs a person's approval, and this host cannot ask one (it did not declare elicitation).", Approver::Gateway).into());
            return;
        };
        let server = self.upstreams.name(idx).to_owned();
        let now = unix_now();
        let wait = i64::try_from(self.limits.ask_timeout.as_secs()).unwrap_or(i64::MAX);
        let pending = NewPending {
            at: now,
            expires_at: now.saturating_add(wait),
            session: self.asks.run.clone(),
            server: server.clone(),
            server_key: self.catalog.key(idx).unwrap_or_default().to_owned(),
            tool: cx.tool().to_owned(),
            digest: cx.digest_text().unwrap_or_default().to_owned(),
            prompt,
            // The same content as JSON, arguments redacted as in the prompt,
            // for a reader that renders it itself (the web console).
            details: self
                .lookup()
                .with_prompt_input(&cx, true, |policy, input| policy.prompt_details(input))
                .map(|details| self.lookup().details_for_edits(&cx, details)),
            // An edited call is approved for this call only.
            offer: match offer_of(&cx) {
                RememberOffer::UpToAlways if cx.edit.is_none() => Remember::Always,
                RememberOffer::UpToAlways
                | RememberOffer::ThisCallOnly
                | RememberOffer::NotAsked => Remember::Call,
            },
        };
        let id = match store.enqueue(&pending) {
            Ok(id) => id,
            Err(err) => {
                tracing::error!(server.id = %server, tool.name = %cx.tool(), "the approval queue could not be written: {err}");
                let extra = format!(
                    "It needs a person's approval; this host cannot ask one, and the approval queue could not be written ({err})."
                );
                self.end(cx, denied(&extra, Approver::Gateway).into());
                return;
            }
        };
        super::watch_keys(self.store, self.catalog, self.events, self.watcher);
        let Some(watcher) = &self.watcher else {
            let _ = store.withdraw(id, "the gateway cannot watch the queue");
            self.end(
                cx,
                denied(
                    "It needs a person's approval, and the approval queue cannot be watched.",
                    Approver::Gateway,
                )
                .into(),
            );
            return;
        };
        watcher.watch_queue(id);
        tracing::warn!(
            server.id = %server, tool.name = %cx.tool(),
            "call #{id} waits for a person: `hintgate approvals approve {id}` or `hintgate approvals deny {id}` (within {} s)",
            self.limits.ask_timeout.as_secs()
        );
        self.observer.observe(|| Observed::Queued {
            id,
            server,
            tool: cx.tool().to_owned(),
        });
        let deadline = self
            .inflight
            .deadline(self.limits.ask_timeout, Expired::Queue(id));
        let mut cx = cx;
        cx.asked = Some(tokio::time::Instant::now());
        cx.trace_mark(|trace| &mut trace.asked);
        self.asks.queued.insert(id, Queued { cx, deadline });
    }

    /// A person answered a queued call.
    pub(super) fn on_queue_answer(&mut self, id: u64, answer: &Answer) {
        let Some(queued) = self.asks.queued.remove(&id) else {
            return;
        };
        self.inflight.cancel_deadline(&queued.deadline);
        self.apply_queue_answer(queued.cx, id, answer);
    }

    /// A queued call's time is up: withdraw it, unless a person was first.
    pub(super) fn queue_timed_out(&mut self, id: u64) {
        let Some(queued) = self.asks.queued.remove(&id) else {
            return;
        };
        if let Some(watcher) = &self.watcher {
            watcher.unwatch_queue(id);
        }
        match self
            .store
            .as_ref()
            .map(|store| store.withdraw(id, "nobody answered in time"))
        {
            Some(Ok(Some(answer))) => self.apply_queue_answer(queued.cx, id, &answer),
            Some(Err(err)) => {
                tracing::error!("the approval queue could not be written: {err}");
                self.queued_unanswered(queued.cx, id);
            }
            Some(Ok(None)) | None => self.queued_unanswered(queued.cx, id),
        }
    }

    fn queued_unanswered(&mut self, cx: Box<CallContext>, id: u64) {
        let seconds = self.limits.ask_timeout.as_secs();
        count_ask(
            self.metrics.as_deref(),
            &cx,
            AskChannel::Queue,
            AskEnding::TimedOut,
        );
        observe_unanswered(
            self.observer,
            self.upstreams,
            &cx,
            format!("nobody answered within {seconds} s"),
        );
        let why = format!(
            "It needs a person's approval, and this host cannot ask one (it did not declare elicitation): it waited in the approval queue as #{id} and nobody answered within {seconds} s (`hintgate approvals approve {id}` answers; `ask_timeout_s` sets the wait)."
        );
        self.end(cx, denied(&why, Approver::Gateway).into());
    }

    /// The host cancelled a queued call: withdraw it and record it refused.
    pub(super) fn withdraw_queued_for(&mut self, session: SessionId, request_id: &str) {
        let ids: Vec<u64> = self
            .asks
            .queued
            .iter()
            .filter(|(_, queued)| {
                queued.cx.request.session == session && queued.cx.request.id() == request_id
            })
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            let why = "the host cancelled the call";
            self.withdraw_queued_as(id, why, queue_withdrawal(id, why));
        }
    }

    /// A session ends: what it left waiting for a person is withdrawn and
    /// recorded as refused; when the gateway shuts down, with the outcome
    /// `shutdown`, and the host's open questions are cancelled.
    pub(super) fn withdraw_session(&mut self, session: SessionId, shutdown: bool) {
        let ids: Vec<u64> = self
            .asks
            .queued
            .iter()
            .filter(|(_, queued)| queued.cx.request.session == session)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            if shutdown {
                self.withdraw_queued_as(
                    id,
                    "the gateway shut down",
                    CallEnd::Refused(Refusal::Shutdown),
                );
            } else {
                let why = "the session ended before anyone answered";
                self.withdraw_queued_as(id, why, queue_withdrawal(id, why));
            }
        }
        let asks = self.inflight.take_host_where(
            |purpose| matches!(purpose, HostPurpose::Ask(cx) if cx.request.session == session),
        );
        for (_, n, purpose) in asks {
            if let HostPurpose::Ask(cx) = purpose {
                count_ask(
                    self.metrics.as_deref(),
                    &cx,
                    AskChannel::Elicitation,
                    AskEnding::Failed,
                );
                if shutdown {
                    self.outbox.host(
                        session,
                        frame::notification(
                            "notifications/cancelled",
                            &json!({"requestId": format!("hintgate-{n}"), "reason": "the gateway shut down"}),
                        ),
                    );
                    self.end(cx, CallEnd::Refused(Refusal::Shutdown));
                    continue;
                }
                self.end(
                    cx,
                    denied(
                        "The session ended before anyone answered.",
                        Approver::Gateway,
                    )
                    .into(),
                );
            }
        }
    }

    /// Withdraws a queued call from the queue (`why` is what the queue
    /// records) and ends it with `end`.
    fn withdraw_queued_as(&mut self, id: u64, why: &str, end: CallEnd) {
        let Some(queued) = self.asks.queued.remove(&id) else {
            return;
        };
        count_ask(
            self.metrics.as_deref(),
            &queued.cx,
            AskChannel::Queue,
            AskEnding::Failed,
        );
        self.inflight.cancel_deadline(&queued.deadline);
        if let Some(watcher) = &self.watcher {
            watcher.unwatch_queue(id);
        }
        if let Some(store) = &self.store
            && let Err(err) = store.withdraw(id, why)
        {
            tracing::error!("the approval queue could not be written: {err}");
        }
        self.end(queued.cx, end);
    }

    fn apply_queue_answer(&mut self, mut cx: Box<CallContext>, id: u64, answer: &Answer) {
        let server = cx
            .server()
            .map_or("", |idx| self.upstreams.name(idx))
            .to_owned();
        let by = hintgate_policy::sanitize::sanitize(&answer.by).text;
        if !answer.approve {
            tracing::info!(server.id = %server, tool.name = %cx.tool(), "denied in the approval queue by {by}");
            queue_answered(
                self.observer,
                self.metrics.as_deref(),
                &cx,
                server,
                AskEnding::Declined,
                format!("denied by {by} (hintgate approvals)"),
            );
            let extra = format!("It was denied in the approval queue by {by}.");
            self.end(
                cx,
                denied(&extra, Approver::Person(Channel::Queue(by))).into(),
            );
            return;
        }
        // An edit is no approval yet: the edited call is decided, checked,
        // previewed and asked about again (see `edit`).
        if let Some(text) = answer.arguments.as_deref() {
            queue_answered(
                self.observer,
                self.metrics.as_deref(),
                &cx,
                server,
                AskEnding::Edited,
                format!("edited by {by} (hintgate approvals)"),
            );
            self.apply_edit(cx, id, &by, text);
            return;
        }
        // The offer is checked again (when the approval is recorded): the queue is
        // only as trusted as whoever can write the store. An edited call is
        // approved for this call only.
        let remember = if cx.edit.is_some() {
            Remember::Call
        } else {
            answer.remember
        };
        tracing::info!(server.id = %server, tool.name = %cx.tool(), "approved in the approval queue by {by}");
        queue_answered(
            self.observer,
            self.metrics.as_deref(),
            &cx,
            server,
            AskEnding::Approved,
            format!(
                "approved by {by} (hintgate approvals, remember: {})",
                remember.as_str()
            ),
        );
        cx.approved_by(Approver::Person(Channel::Queue(by)));
        self.then.push(Then::Approved(cx, remember));
    }
}

// === impl Lookup ===

impl Lookup<'_> {
    /// The prompt for a call (design §4.3).
    fn prompt(&self, cx: &CallContext, redacted: bool) -> String {
        let prompt = self
            .with_prompt_input(cx, redacted, |policy, input| policy.prompt(input))
            .unwrap_or_default();
        let prompt = match Self::edit_note(cx) {
            Some(note) => format!("{note}\n\n{prompt}"),
            None => prompt,
        };
        if cx.preview_changed {
            return format!(
                "hintgate: the file changed after you were asked about this call; below is what it would change now.\n\n{prompt}"
            );
        }
        prompt
    }

    /// Renders what a prompt for a call shows with `render`: the text, or
    /// its content as JSON for the approval queue. `None` for a call with
    /// no server or tool.
    fn with_prompt_input<R>(
        &self,
        cx: &CallContext,
        redacted: bool,
        render: impl FnOnce(&hintgate_policy::decide::Policy, &PromptInput<'_>) -> R,
    ) -> Option<R> {
        let idx = cx.server()?;
        let tool = self
            .catalog
            .tool(idx, cx.tool())
            .and_then(|entry| entry.tool.as_ref().ok())?;
        let changes = match cx.pin() {
            PinStatus::Changed => self
                .catalog
                .pinned_definition(idx, cx.tool())
                .map(|old| diff(old, tool))
                .unwrap_or_default(),
            PinStatus::New | PinStatus::Unchanged => Vec::new(),
        };
        let decision = cx.decision_or(hintgate_policy::reason::ReasonCode::InternalError);
        let arguments = if redacted {
            self.journal.redacted(cx.arguments_or_empty())
        } else {
            cx.arguments_or_empty().clone()
        };
        let principal = self.sessions.principal(cx.request.session);
        let token_scope = super::records::token_scope_of(self.upstreams, cx, principal.as_deref());
        // What goes to the store keeps no secret: the preview as it may be
        // stored.
        let preview = if redacted {
            self.storable_preview(cx)
        } else {
            cx.preview.clone()
        };
        Some(render(
            self.policy,
            &PromptInput {
                server: self.upstreams.name(idx),
                identity: self.catalog.identity(idx),
                previous_identity: self.catalog.previous_identity(idx),
                tool,
                arguments: Some(&arguments),
                decision: &decision,
                sandbox: self.catalog.sandbox(idx),
                changes: &changes,
                token_scope: token_scope.as_deref(),
                preview: preview.as_ref(),
            },
        ))
    }

    /// A queue entry's details, with what an edit needs: the input schema
    /// of the definition decided on (so that an edit is checked before it is
    /// stored), and, for a call a person edited, how (see `edit`).
    fn details_for_edits(&self, cx: &CallContext, mut details: Value) -> Value {
        let schema = cx
            .server()
            .and_then(|idx| self.catalog.tool(idx, cx.tool()))
            .and_then(|entry| entry.tool.as_ref().ok())
            .and_then(|tool| tool.input_schema.clone());
        if let Some(object) = details.as_object_mut() {
            if let Some(schema) = schema {
                object.insert("input_schema".to_owned(), schema);
            }
            if let Some(edit) = self.edit_details(cx) {
                object.insert("edited".to_owned(), edit);
            }
        }
        details
    }
}

/// How a call that needs a person is asked about next (design §4.3).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Asking {
    /// Nobody can be asked: the host declared no elicitation and there is
    /// no approval queue (no store). The call is denied.
    Nobody,
    /// Its previewer command is asked first; the call comes back with its
    /// preview.
    Previewer(hintgate_policy::config::HookConfig),
    /// Its server's dry run is asked first, with this argument set; the
    /// call comes back with its preview.
    DryRun(String),
    /// A 2026-07-28 host that declared elicitation: an input-required
    /// result, sealed to the call.
    InputRequired,
    /// A legacy host that declared elicitation: `elicitation/create`, in
    /// form mode from 2025-11-25 on.
    Elicitation {
        /// The host speaks 2025-11-25 or later.
        form: bool,
    },
    /// A host that cannot ask: the approval queue.
    Queue,
}

/// How a call is asked about, for its session `host`, with or without an
/// approval queue, and with the previewer command or the dry run that is
/// still to give its preview: when nobody at all can be asked, nothing
/// else is run.
pub(crate) fn asking(
    host: Option<&super::session::HostSession>,
    queue: bool,
    previewer: Option<hintgate_policy::config::HookConfig>,
    dry_run: Option<String>,
) -> Asking {
    let (elicitation, modern, form) = host.map_or((false, false, false), |host| {
        (
            host.elicitation,
            host.modern(),
            host.protocol_version() >= "2025-11-25",
        )
    });
    if !elicitation && !queue {
        Asking::Nobody
    } else if let Some(config) = previewer {
        Asking::Previewer(config)
    } else if let Some(argument) = dry_run {
        Asking::DryRun(argument)
    } else if !elicitation {
        Asking::Queue
    } else if modern {
        Asking::InputRequired
    } else {
        Asking::Elicitation { form }
    }
}

/// The remember choices the prompt may offer for this call.
fn offer_of(cx: &CallContext) -> RememberOffer {
    cx.decision
        .as_ref()
        .map_or(RememberOffer::NotAsked, |decision| decision.remember)
}

/// A refusal that says why.
fn denied(extra: &str, by: Approver) -> Refusal {
    Refusal::Denied {
        extra: Some(extra.to_owned()),
        by,
    }
}

// === impl Stages ===

impl super::stages::Stages<'_> {
    /// A 2026-07-28 host retried a call with the person's answer and the
    /// sealed state: the state must be this gateway's, unused, unexpired and
    /// for this very call; only then does an approval let it through.
    ///
    /// # Errors
    ///
    /// The refusal when the state cannot be used or the person said no.
    pub(super) fn open_modern_answer(&mut self, cx: &mut CallContext) -> Result<(), Refusal> {
        let server = cx
            .server()
            .map_or("", |idx| self.upstreams.name(idx))
            .to_owned();
        let state = cx.params.request_state.as_deref().unwrap_or_default();
        if let Err(err) = self.sealer.open(
            state,
            &cx.params.name,
            cx.arguments_or_empty(),
            &super::previews::sealed_pin(cx),
        ) {
            tracing::warn!(server.id = %server, tool.name = %cx.tool(), "refused a returned approval: {err}");
            let extra = format!("The approval could not be used: {err}.");
            return Err(denied(&extra, Approver::Gateway));
        }
        let responses = cx.answer_to(super::era::INPUT_KEY);
        let answer = Some(&responses).filter(|answer| !answer.is_null());
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
            self.observer.observe(|| Observed::Answered {
                server: server.clone(),
                tool: cx.tool().to_owned(),
                approved: false,
                answer: why.to_owned(),
            });
            count_ask(
                self.metrics,
                cx,
                AskChannel::InputRequired,
                AskEnding::Declined,
            );
            return Err(denied(why, Approver::Person(Channel::InputRequired)));
        }
        let remember = remember_of(
            content
                .and_then(|c| c.get(REMEMBER))
                .and_then(Value::as_str),
        );
        super::pipeline::record_approval(
            self.catalog,
            self.sessions,
            self.upstreams,
            self.store,
            cx,
            remember,
        );
        self.observer.observe(|| Observed::Answered {
            server,
            tool: cx.tool().to_owned(),
            approved: true,
            answer: "approved".to_owned(),
        });
        count_ask(
            self.metrics,
            cx,
            AskChannel::InputRequired,
            AskEnding::Approved,
        );
        cx.approved_by(Approver::Person(Channel::InputRequired));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::outbox::Outgoing;

    #[test]
    fn a_call_is_asked_through_what_its_host_declared_or_the_queue_or_denied() {
        use super::super::session::{Era, HostSession};
        let host = |era: Era, elicitation: bool| {
            let (out, _) = tokio::sync::mpsc::unbounded_channel();
            let mut host = HostSession::new(out, Default::default(), Default::default());
            host.era = era;
            host.elicitation = elicitation;
            host
        };
        let legacy = |version: &str| Era::Legacy(version.to_owned());
        let (config, _) = hintgate_policy::config::parse_str(
            "[gateway]\ndecide_command = [\"preview\"]\n[servers.a]\ncommand = \"x\"\n",
        );
        let command = config.unwrap().gateway.decide.unwrap();
        let old = host(legacy("2025-06-18"), true);
        let new = host(legacy("2025-11-25"), true);
        let modern = host(Era::Modern, true);
        let mute = host(legacy("2025-11-25"), false);
        for (host, queue, previewer, dry_run, expected) in [
            // Nobody can be asked: nothing is previewed, the call is denied.
            (
                Some(&mute),
                false,
                Some(command.clone()),
                None,
                Asking::Nobody,
            ),
            (None, false, None, None, Asking::Nobody),
            // A preview comes first, the previewer's before a dry run.
            (
                Some(&mute),
                true,
                Some(command.clone()),
                Some("dry".to_owned()),
                Asking::Previewer(command.clone()),
            ),
            (
                Some(&old),
                false,
                None,
                Some("dry".to_owned()),
                Asking::DryRun("dry".to_owned()),
            ),
            // Then the channel the host declared, else the queue.
            (Some(&mute), true, None, None, Asking::Queue),
            (
                Some(&old),
                true,
                None,
                None,
                Asking::Elicitation { form: false },
            ),
            (
                Some(&new),
                false,
                None,
                None,
                Asking::Elicitation { form: true },
            ),
            (Some(&modern), true, None, None, Asking::InputRequired),
        ] {
            assert_eq!(asking(host, queue, previewer, dry_run), expected);
        }
    }

    #[test]
    fn only_an_accepted_approve_approves_and_the_remember_choice_is_read() {
        // What a line means: approved and remembered so far, or refused
        // (whether the host failed, and what the observer is told).
        type Meaning = Result<Remember, (bool, &'static str)>;
        let cases: &[(&str, Meaning)] = &[
            (
                r#"{"jsonrpc":"2.0","id":"hintgate-1","result":{"action":"accept","content":{"approve":true}}}"#,
                Ok(Remember::Call),
            ),
            (
                r#"{"jsonrpc":"2.0","id":"hintgate-1","result":{"action":"accept","content":{"approve":true,"remember":"this tool for the rest of this session"}}}"#,
                Ok(Remember::Session),
            ),
            (
                r#"{"jsonrpc":"2.0","id":"hintgate-1","result":{"action":"accept","content":{"approve":true,"remember":"this tool always"}}}"#,
                Ok(Remember::Always),
            ),
            (
                r#"{"jsonrpc":"2.0","id":"hintgate-1","result":{"action":"accept","content":{"approve":"true"}}}"#,
                Err((false, "did not approve")),
            ),
            (
                r#"{"jsonrpc":"2.0","id":"hintgate-1","result":{"action":"accept","content":{"approve":false}}}"#,
                Err((false, "did not approve")),
            ),
            (
                r#"{"jsonrpc":"2.0","id":"hintgate-1","result":{"action":"decline"}}"#,
                Err((false, "declined")),
            ),
            (
                r#"{"jsonrpc":"2.0","id":"hintgate-1","result":{"action":"cancel"}}"#,
                Err((false, "dismissed the prompt")),
            ),
            (
                r#"{"jsonrpc":"2.0","id":"hintgate-1","error":{"code":-32601,"message":"no"}}"#,
                Err((true, "the host could not ask")),
            ),
            (
                r#"{"jsonrpc":"2.0","id":"hintgate-1","result":{"action":"accept","content":{"approve":true}},"error":{"code":1,"message":"both"}}"#,
                Err((true, "the host could not ask")),
            ),
        ];
        for (line, expected) in cases {
            let message = Message::parse(line).expect("a test line parses");
            let got = match elicitation_answer(&message) {
                Elicited::Approved(remember) => Ok(remember),
                Elicited::Refused { failed, short, .. } => Err((failed, short)),
            };
            assert_eq!(&got, expected, "{line}");
        }
    }

    // --- the asking part's steps, with parts built by hand ---

    use crate::gateway::call::Exit;
    use crate::gateway::fixture::{Parts, call, legacy_session, read_tool};
    use crate::gateway::session::Era;

    const UNTRUSTED: &str = "[servers.web]\ncommand = \"y\"\ntrust = \"untrusted\"\n";

    /// Parts where session 1 (a 2025-11-25 host that can elicit or not)
    /// called `web__read` of an untrusted server, and the policy said a
    /// person must be asked: the call, as step 5 leaves it.
    fn asked(elicitation: bool) -> (Parts, Box<CallContext>) {
        let mut parts = Parts::new(UNTRUSTED).listing(0, &[read_tool()]);
        parts.host(Era::Legacy("2025-11-25".to_owned()), elicitation);
        let mut cx = call("web__read", &json!({"path": "a"}));
        let exit = parts.stages().run(&mut cx, legacy_session()).unwrap_err();
        assert!(matches!(exit, Exit::Ask), "{exit:?}");
        (parts, Box::new(cx))
    }

    /// The one thing a step left the gateway to do.
    fn only(then: Vec<Then>) -> Then {
        let mut then = then.into_iter();
        let first = then.next().expect("the step left nothing to do");
        assert!(then.next().is_none(), "the step left more than one thing");
        first
    }

    fn denied_by(then: Then) -> Approver {
        match then {
            Then::End(_, CallEnd::Refused(Refusal::Denied { by, .. })) => by,
            other => panic!("not a denial: {other:?}"),
        }
    }

    #[test]
    fn a_host_that_can_elicit_is_asked_and_its_persons_answer_approves_or_ends_the_call() {
        let (mut parts, cx) = asked(true);
        let mut desk = parts.desk();
        desk.ask(cx);
        assert!(
            desk.then.is_empty(),
            "the call is held, not left to the gateway"
        );
        // The host is asked, under an id of the gateway's, and the call is
        // held until it answers.
        let lines = parts.outbox.take();
        let [Outgoing::Host(session, line)] = &lines[..] else {
            panic!("{lines:?}");
        };
        assert_eq!(*session, SessionId::FIRST);
        let question: Value = serde_json::from_str(line).unwrap();
        assert_eq!(question["method"], "elicitation/create");
        let n: u64 = question["id"]
            .as_str()
            .unwrap()
            .strip_prefix("hintgate-")
            .unwrap()
            .parse()
            .unwrap();
        let Some(HostPurpose::Ask(held)) = parts.inflight.take_host(SessionId::FIRST, n) else {
            panic!("the call is not held for the host's answer");
        };
        // Approved, remembered for the session: left to the gateway to
        // record the approval and run the call again.
        let approve = r#"{"jsonrpc":"2.0","id":"hintgate-1","result":{"action":"accept","content":{"approve":true,"remember":"this tool for the rest of this session"}}}"#;
        let mut desk = parts.desk();
        desk.on_ask_answer(held, &Message::parse(approve).unwrap());
        match only(desk.then) {
            Then::Approved(cx, Remember::Session) => {
                assert_eq!(cx.approver, Approver::Person(Channel::Elicitation));
                assert!(
                    cx.consent().is_some(),
                    "the definition the person saw is not noted"
                );
            }
            other => panic!("{other:?}"),
        }
        // Declined: the call ends, refused by the person.
        let (mut parts, cx) = asked(true);
        parts.desk().ask(cx);
        let Some((_, _, HostPurpose::Ask(held))) = parts.inflight.take_host_where(|_| true).pop()
        else {
            panic!("the call is not held");
        };
        let decline = r#"{"jsonrpc":"2.0","id":"hintgate-1","result":{"action":"decline"}}"#;
        let mut desk = parts.desk();
        desk.on_ask_answer(held, &Message::parse(decline).unwrap());
        assert_eq!(
            denied_by(only(desk.then)),
            Approver::Person(Channel::Elicitation)
        );
    }

    #[test]
    fn a_call_nobody_can_be_asked_about_ends_denied_without_a_question() {
        let (mut parts, cx) = asked(false);
        parts.store = None;
        let mut desk = parts.desk();
        desk.ask(cx);
        assert_eq!(denied_by(only(desk.then)), Approver::Gateway);
        assert!(
            parts.outbox.is_empty(),
            "a host that cannot elicit was asked"
        );
        assert_eq!(parts.inflight.asks(), 0);
    }

    #[test]
    fn a_call_waits_in_the_approval_queue_until_a_person_answers_there() {
        let (mut parts, cx) = asked(false);
        let mut desk = parts.desk();
        desk.ask(cx);
        assert!(
            desk.then.is_empty(),
            "the queued call is held, not left to the gateway"
        );
        assert_eq!(parts.asks.queued(), 1);
        let id = *parts.asks.queued.keys().next().unwrap();
        let store = parts.store.clone().unwrap();
        let pending = store.pending(id).unwrap().expect("the queue has no entry");
        assert_eq!(
            (pending.server.as_str(), pending.tool.as_str()),
            ("web", "read")
        );
        assert!(pending.prompt.contains("read"), "{}", pending.prompt);
        // A person denies it there: it ends, refused by them.
        let answer = Answer {
            approve: false,
            remember: Remember::Call,
            by: "alice".to_owned(),
            arguments: None,
        };
        let mut desk = parts.desk();
        desk.on_queue_answer(id, &answer);
        assert_eq!(
            denied_by(only(desk.then)),
            Approver::Person(Channel::Queue("alice".to_owned()))
        );
        assert_eq!(parts.asks.queued(), 0);
        // An answer to a call no longer held does nothing.
        let mut desk = parts.desk();
        desk.on_queue_answer(id, &answer);
        assert!(desk.then.is_empty());
    }

    #[test]
    fn a_queued_call_approved_there_is_left_to_run_again_with_the_persons_remember_choice() {
        let (mut parts, cx) = asked(false);
        parts.desk().ask(cx);
        let id = *parts.asks.queued.keys().next().unwrap();
        let answer = Answer {
            approve: true,
            remember: Remember::Always,
            by: "bob".to_owned(),
            arguments: None,
        };
        let mut desk = parts.desk();
        desk.on_queue_answer(id, &answer);
        match only(desk.then) {
            Then::Approved(cx, Remember::Always) => {
                assert_eq!(
                    cx.approver,
                    Approver::Person(Channel::Queue("bob".to_owned()))
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_session_that_ends_leaves_its_held_calls_to_end_and_a_shutdown_tells_the_host() {
        let (mut parts, cx) = asked(true);
        parts.desk().ask(cx);
        parts.outbox.take();
        let mut desk = parts.desk();
        desk.withdraw_session(SessionId::FIRST, true);
        assert!(matches!(
            only(desk.then),
            Then::End(_, CallEnd::Refused(Refusal::Shutdown))
        ));
        let lines = parts.outbox.take();
        let [Outgoing::Host(_, line)] = &lines[..] else {
            panic!("{lines:?}");
        };
        assert!(line.contains("notifications/cancelled"), "{line}");
        assert_eq!(parts.inflight.asks(), 0);
    }
}
