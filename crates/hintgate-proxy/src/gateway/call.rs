//! One tool call as the pipeline carries it, the steps it can take, and the
//! one place where a refusal becomes an answer to the host.
//!
//! A [`CallContext`] is made once from the host's line (parsed once: the
//! tool's name and where the name, the arguments and the gateway's own
//! answer sit in the line) and travels through every step: it waits for a
//! server, is decided, is asked about, is recorded and is sent, and its
//! answer ends it. [`CallEnd`] names every way a call ends at the gateway
//! (a [`Refusal`], or a replay, a question, a withdrawal, which are none);
//! [`CallEnd::answer`] is the only code that turns one into a JSON-RPC
//! error or an `isError` result.

use std::collections::HashMap;
use std::ops::Range;

use hintgate_policy::config::Instance;
use hintgate_policy::decide::{DECISION_META_KEY, Decision, DecisionMeta, Verdict};
use hintgate_policy::hook::OwnedAnswer;
use hintgate_policy::pin::{PinDigest, PinStatus};
use hintgate_policy::preview::Previewed;
use hintgate_policy::reason::ReasonCode;
use hintgate_policy::sanitize::escape_line;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::request::{HostRequest, ServerIdx, SessionId};
use crate::frame;
use crate::json::{JsonError, span_in};

/// Where a call goes, known together once its name is resolved (step 1):
/// no call has a server without the server's name of its tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resolved {
    /// The server.
    pub server: ServerIdx,
    /// The server's own name of the tool.
    pub tool: String,
}

/// What step 3b of the pipeline notes of a server's read-only instance for
/// a call decided for it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ReadOnlyLeg {
    /// Which start of the instance listed the definition decided on (the
    /// call is sent only to that start).
    pub generation: Option<u64>,
    /// The instance was started again for this call (once).
    pub restarted: Option<ServerIdx>,
    /// The instance's tools were listed once for this call.
    pub relisted: bool,
}

/// A host's `tools/call` on its way through the pipeline.
#[derive(Debug)]
pub(crate) struct CallContext {
    /// The request, as received.
    pub request: HostRequest,
    /// Its params, parsed once.
    pub params: CallParams,
    /// The arguments, parsed once the tool is known (the schema check, the
    /// prompt, the seal and the audit record read them; the server gets the
    /// host's bytes).
    pub arguments: Option<Value>,
    /// The server and its own name of the tool, once resolved (step 1).
    resolved: Option<Resolved>,
    /// The policy's decision, once decided.
    pub decision: Option<Decision>,
    /// What step 3 read of the definition decided on, once it was decided
    /// on a valid one (see [`Definition`]).
    definition: Option<Definition>,
    /// Who let it through, once someone did.
    pub approver: Approver,
    /// Attempts made before this one (design §4.5 retries once).
    pub attempt: u32,
    /// The server's tool list was asked for once for this call, so a server
    /// that cannot list its tools answers the call instead of holding it.
    pub relisted: bool,
    /// How far it went toward its server: its record durable, then sent.
    progress: Progress,
    /// When a person was last asked about it (elicitation or the approval
    /// queue), for the time it waited for an answer.
    pub asked: Option<Instant>,
    /// Its decision was counted in the metrics: a call that goes through
    /// the pipeline again (approved, or its server restarted) is counted
    /// once, under its first decision.
    pub counted: bool,
    /// For a server's input-required continuation: the server's questions
    /// answered, and its own state, sent with the host's params.
    pub continuation: Option<Continuation>,
    /// Which start of its server the definition decided on belongs to: a
    /// call is sent only to that start (a restarted server lists anew).
    pub generation: Option<u64>,
    /// What a person approved, once someone did: the call is asked about
    /// again if the definition, or a file preview, changed before it was
    /// sent.
    consent: Option<Consent>,
    /// What the decision hook answered, and for what state of the call.
    pub hook: Option<HookVerdict>,
    /// How often the decision hook was asked about this call.
    pub hook_asks: u32,
    /// Its idempotency key, for a tool that takes one.
    pub idem: Option<Idem>,
    /// The arguments as sent, when the gateway filled in an idempotency
    /// key: the host's text with the key added.
    pub arguments_filled: Option<String>,
    /// Which instance of its server the call goes to (decided with it).
    pub instance: Instance,
    /// What step 3b noted of the read-only instance, for a call decided
    /// for it (nothing for a call to the full instance).
    pub read_only: ReadOnlyLeg,
    /// What its trace notes as it goes, when traces are exported.
    pub trace: Option<Box<crate::telemetry::CallTrace>>,
    /// What the call will do, as last previewed for a person (or why there
    /// is none), where a preview is configured for its tool: shown when a
    /// person is asked, and recorded with the call. Never decided on.
    pub preview: Option<Previewed>,
    /// The file changed after the person was asked: the next prompt says
    /// so.
    pub preview_changed: bool,
    /// A person edited the call's arguments in the approval queue: who, and
    /// what the host had sent (see `edit`). The call's own arguments are
    /// then the edited ones.
    pub edit: Option<Box<Edit>>,
    /// Why the last edit a person gave could not be used: the next prompt
    /// says so (the call is asked about as it was).
    pub edit_refused: Option<String>,
}

/// The stage after the decision: how far a call went toward its server.
/// Its record's number exists once the record is durable, the time it was
/// sent once it was sent; a call that goes through the pipeline again
/// starts over ([`CallContext::next_attempt`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Progress {
    /// Neither recorded (or the gateway keeps no log) nor sent.
    Unsent,
    /// Its record is durable under this sequence number; not sent yet.
    Recorded(u64),
    /// Sent to its server at `at`, with its record's number (`None`
    /// without a log).
    Sent { record: Option<u64>, at: Instant },
}

/// What a person approved: the definition the call was decided on when
/// they were asked, and the preview they were shown with it, if any. Known
/// together once a person says yes, and given up together (an edit, a file
/// that changed since): an approval never outlives what it was given for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Consent {
    /// The pin digest of the definition approved.
    pub definition: PinDigest,
    /// The digest of the preview shown with it: a file preview computed
    /// again just before the send that differs asks again.
    pub preview: Option<String>,
}

/// How a person edited a call in the approval queue (`gateway::edit`).
#[derive(Debug, Clone)]
pub(crate) struct Edit {
    /// Who edited it, as the queue names them (sanitized).
    pub by: String,
    /// The arguments the host sent (`None` when it sent none).
    pub original: Option<Value>,
    /// The queue entry the edit answered.
    pub entry: u64,
}

/// What step 3 of the pipeline reads of the definition a call is decided
/// on: known together, once the call's tool has a valid definition.
///
/// A retry keeps it (`CallContext::next_attempt` does not clear it): until
/// the next attempt decides on a definition of its own, the call's record
/// names the pin of the one last decided on, as it always has.
#[derive(Debug, Clone)]
pub(crate) struct Definition {
    /// The pin digest of the definition decided on.
    pub digest: PinDigest,
    /// The same, as the audit log writes it.
    pub digest_text: Option<std::sync::Arc<str>>,
    /// How that definition compares with its pin.
    pub pin: PinStatus,
    /// Whether the tool is effectively read-only or idempotent (the tool's
    /// half of whether a failure may be retried, design §4.5).
    pub repeatable: bool,
    /// Whether its result taints the session (design §4.4).
    pub taints: bool,
    /// The tool's output schema, compiled, to check its result against.
    pub output: Option<std::sync::Arc<jsonschema::Validator>>,
}

/// What a 2026-07-28 server's input-required continuation adds to the
/// host's params (as JSON text).
#[derive(Debug, Clone)]
pub(crate) struct Continuation {
    /// `inputResponses`: the host's answers to the server's questions.
    pub responses: String,
    /// `requestState`: the server's own state, returned.
    pub state: Option<String>,
}

/// What the gateway reads of a `tools/call`'s params.
#[derive(Debug, Clone, Default)]
pub(crate) struct CallParams {
    /// The tool's name as the host wrote it, decoded.
    pub name: String,
    /// Where the params object sits in the line.
    pub span: Range<usize>,
    /// Where the arguments sit in the line.
    pub arguments: Option<Range<usize>>,
    /// The `requestState` a 2026-07-28 host returned, when it is a string.
    pub request_state: Option<String>,
    /// Where `inputResponses` sits in the line.
    pub input_responses: Option<Range<usize>>,
}

/// What a hook answered about a call, and the state it answered for: the
/// answer stands only while the call is decided on the same definition
/// with the same verdict so far (else the hook is asked again).
#[derive(Debug, Clone)]
pub(crate) struct HookVerdict {
    /// The answer.
    pub answer: OwnedAnswer,
    /// The definition it was asked about.
    pub digest: PinDigest,
    /// What hintgate had decided without it, as the hook was told.
    pub so_far: (Verdict, Vec<ReasonCode>),
}

/// A question to a hook, ready to go.
#[derive(Debug)]
pub(crate) struct HookAsk {
    /// The slot of the hook.
    pub slot: usize,
    /// The question's id.
    pub id: u64,
    /// The question, one line of JSON.
    pub line: String,
    /// What the answer will be checked against.
    pub digest: PinDigest,
    /// What hintgate had decided without it.
    pub so_far: (Verdict, Vec<ReasonCode>),
}

/// What the gateway knows of a call's idempotency key.
#[derive(Debug, Clone)]
pub(crate) struct Idem {
    /// The key, as text (a string key as it is; any other value as its
    /// canonical JSON).
    pub key: String,
    /// The gateway filled it in (the host left it out).
    pub filled: bool,
    /// The store's scope of the key (`None` without a store).
    pub scope: Option<String>,
    /// The digest of the arguments, key included.
    pub digest: String,
    /// This call holds the store's claim on the key (it was sent).
    pub claimed: bool,
}

/// What the pipeline does with a call next.
#[derive(Debug)]
pub(crate) enum Step {
    /// Record it; send it once the record is durable.
    Forward(Box<CallContext>),
    /// A person must answer first.
    Ask(Box<CallContext>),
    /// It ends at the gateway.
    End(Box<CallContext>, CallEnd),
    /// Its server is starting or listing its tools: try again then.
    Wait(Box<CallContext>),
    /// The decision hook must answer first.
    Hook(Box<CallContext>, HookAsk),
    /// Something must be done first (a server started, its tools listed).
    Need(Box<CallContext>, Need),
    /// It was handled otherwise (it answered a question of another call).
    Done,
}

/// What a step needs done before the call can go on: the gateway does it
/// and runs the call again (or holds it until it is done).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// Start server `idx` (it is stopped, or failed before this call).
    Start(ServerIdx),
    /// List server `idx`'s tools (never listed, or the list failed before
    /// this call).
    List(ServerIdx),
}

/// Where a step leaves a call it does not pass on to the next one (the
/// call itself stays with the pipeline, which makes the [`Step`]).
#[derive(Debug)]
pub(crate) enum Exit {
    /// A person must answer first.
    Ask,
    /// It ends at the gateway.
    End(CallEnd),
    /// Its server is starting or listing its tools: try again then.
    Wait,
    /// The decision hook must answer first.
    Hook(Box<HookAsk>),
    /// Something must be done first (a server started, its tools listed).
    Need(Need),
}

impl Exit {
    /// The step the call takes.
    pub fn with(self, cx: Box<CallContext>) -> Step {
        match self {
            Self::Ask => Step::Ask(cx),
            Self::End(end) => Step::End(cx, end),
            Self::Wait => Step::Wait(cx),
            Self::Hook(ask) => Step::Hook(cx, *ask),
            Self::Need(need) => Step::Need(cx, need),
        }
    }
}

impl From<Refusal> for Exit {
    fn from(refusal: Refusal) -> Self {
        Self::End(CallEnd::Refused(refusal))
    }
}

impl From<CallEnd> for Exit {
    fn from(end: CallEnd) -> Self {
        Self::End(end)
    }
}

/// How a call ends at the gateway, without a server's answer: refused, or
/// one of the ways that are no refusal.
#[derive(Debug, Clone)]
pub(crate) enum CallEnd {
    /// The gateway refused it.
    Refused(Refusal),
    /// The call's idempotency key already ran with these arguments: the
    /// host gets the recorded result (`None`: it was too large to keep),
    /// and the server is not called. A success.
    Replayed(Option<String>),
    /// The call was asked about through an input-required result: the host
    /// retries with the answer (a 2026-07-28 host). Not a refusal to the
    /// host; the call ends here and its retry is a call of its own.
    InputRequired(String),
    /// The host cancelled the call, or went away, before it was sent: it is
    /// recorded with this outcome and not answered.
    Withdrawn(Outcome),
}

/// Every way the gateway refuses a call.
#[derive(Debug, Clone)]
pub(crate) enum Refusal {
    /// The request is not one the gateway can decide on (no `name`, a
    /// repeated key, params that are not an object): a JSON-RPC error.
    Malformed(String),
    /// No server lists a tool of that name: a JSON-RPC error.
    UnknownTool,
    /// The tool's server cannot be started or did not list its tools.
    ServerUnavailable(String),
    /// The decision (or a person, or nobody answering) refused it.
    Denied {
        /// What more to say (why nobody could answer, what the person did).
        extra: Option<String>,
        /// Who refused.
        by: Approver,
    },
    /// The arguments do not match the tool's input schema.
    InvalidArguments(Vec<String>),
    /// The audit log could not record the call, so it does not run.
    Unrecorded(String),
    /// A returned `requestState` or relayed answer cannot be used.
    BadState(String),
    /// The tool's name keeps it from being listed or called (it is not
    /// plain, or it looks like another): the reason code, and what is wrong
    /// with the name.
    Name(ReasonCode, String),
    /// The host's name fits more than one server's prefix: why it is not
    /// routed by guess.
    AmbiguousName(String),
    /// The gateway shut down before the call was sent (it waited for its
    /// server, or for a person).
    Shutdown,
    /// The call's idempotency key cannot be used: why.
    KeyInUse(String),
    /// The call goes to the server's read-only instance, which does not
    /// list the tool with the definition decided on: why.
    ReadOnlyDiffers(String),
}

/// Who let a call through, or who ended it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Approver {
    /// Nobody yet.
    Nobody,
    /// The policy: the decision's first reason (a rule, the profile, a
    /// remembered approval).
    Policy(Option<ReasonCode>),
    /// A person, and how they answered.
    Person(Channel),
    /// The gateway itself.
    Gateway,
}

/// How a person answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Channel {
    /// A legacy host's elicitation.
    Elicitation,
    /// A 2026-07-28 host's input-required retry.
    InputRequired,
    /// `hintgate approvals`, by this user.
    Queue(String),
    /// An answer to a server's own question, relayed.
    RelayedAnswer,
}

/// How a call ended, as the audit log records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The server answered with a result.
    Ok,
    /// The server answered with a result that says `isError: true`.
    ToolError,
    /// The server answered with a JSON-RPC error, or a malformed result.
    ProtocolError,
    /// The result's `structuredContent` does not match the output schema.
    OutputSchemaMismatch,
    /// The server failed (a crash, a hang past the call timeout).
    Failed,
    /// The server failed, and the call is tried once more.
    FailedRetried,
    /// Its server stopped or started again between the decision and the
    /// send: it was not sent, and goes through the pipeline again.
    Unsent,
    /// The gateway refused it.
    Denied,
    /// Its arguments do not match the input schema.
    InvalidArguments,
    /// It was asked about through an input-required result.
    InputRequired,
    /// It carried an answer to a server's own question.
    Relayed,
    /// The host cancelled it.
    Cancelled,
    /// The host went away before it was answered.
    HostGone,
    /// The gateway shut down (it was asked to stop, or a fatal error ended
    /// its loop) before the call was answered.
    Shutdown,
    /// Its idempotency key had run with the same arguments: the recorded
    /// result was the answer, and the server was not called.
    Replayed,
}

// === impl CallContext ===

#[derive(Deserialize)]
struct RawParams<'a> {
    #[serde(borrow, default)]
    name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
    #[serde(rename = "requestState", borrow, default)]
    request_state: Option<&'a RawValue>,
    #[serde(rename = "inputResponses", borrow, default)]
    input_responses: Option<&'a RawValue>,
}

impl CallContext {
    /// The call's server, once resolved.
    pub fn server(&self) -> Option<ServerIdx> {
        self.resolved.as_ref().map(|resolved| resolved.server)
    }

    /// The server's own name of the tool, once resolved; empty before.
    pub fn tool(&self) -> &str {
        self.resolved
            .as_ref()
            .map_or("", |resolved| resolved.tool.as_str())
    }

    /// Step 1 resolved the call to `tool` of `server`.
    pub fn resolve(&mut self, server: ServerIdx, tool: String) {
        self.resolved = Some(Resolved { server, tool });
    }

    /// The sequence number of its audit record, once durable (never
    /// without a log).
    pub fn record(&self) -> Option<u64> {
        match self.progress {
            Progress::Unsent => None,
            Progress::Recorded(seq) => Some(seq),
            Progress::Sent { record, .. } => record,
        }
    }

    /// When it was sent to its server, once it was.
    pub fn started(&self) -> Option<Instant> {
        match self.progress {
            Progress::Sent { at, .. } => Some(at),
            Progress::Unsent | Progress::Recorded(_) => None,
        }
    }

    /// Its record is durable as `seq` (`None`: it has none). A call sent
    /// already keeps when it was sent.
    pub fn recorded(&mut self, seq: Option<u64>) {
        self.progress = match (self.progress, seq) {
            (Progress::Sent { at, .. }, record) => Progress::Sent { record, at },
            (_, Some(seq)) => Progress::Recorded(seq),
            (_, None) => Progress::Unsent,
        };
    }

    /// It is sent to its server now.
    pub fn sent(&mut self, at: Instant) {
        self.progress = Progress::Sent {
            record: self.record(),
            at,
        };
    }

    /// It goes to its server again as a new attempt: not recorded, not sent.
    pub fn unsent(&mut self) {
        self.progress = Progress::Unsent;
    }

    /// The context of a host's `tools/call`, its params parsed once.
    ///
    /// # Errors
    ///
    /// The request back with [`Refusal::Malformed`] when its params are not
    /// an object with a string `name`.
    pub fn parse(request: HostRequest) -> Result<Self, (Box<HostRequest>, Refusal)> {
        match parse_params(&request) {
            Ok(params) => Ok(Self::new(request, params)),
            Err(text) => Err((Box::new(request), Refusal::Malformed(text))),
        }
    }

    fn new(request: HostRequest, params: CallParams) -> Self {
        Self {
            request,
            params,
            arguments: None,
            resolved: None,
            decision: None,
            definition: None,
            approver: Approver::Nobody,
            attempt: 0,
            relisted: false,
            progress: Progress::Unsent,
            asked: None,
            counted: false,
            continuation: None,
            generation: None,
            consent: None,
            hook: None,
            hook_asks: 0,
            idem: None,
            arguments_filled: None,
            instance: Instance::Full,
            read_only: ReadOnlyLeg::default(),
            preview: None,
            preview_changed: false,
            edit: None,
            edit_refused: None,
            trace: None,
        }
    }

    /// The `traceparent` the host sent in the call's `_meta`, if any (read
    /// alone: the arguments are skipped, not kept).
    pub fn host_traceparent(&self) -> Option<String> {
        #[derive(serde::Deserialize)]
        struct Meta {
            traceparent: Option<String>,
        }
        #[derive(serde::Deserialize)]
        struct Params {
            #[serde(rename = "_meta")]
            meta: Option<Meta>,
        }
        let params = self.request.line.get(self.params.span.clone())?;
        serde_json::from_str::<Params>(params)
            .ok()?
            .meta?
            .traceparent
    }

    /// The trace notes that the call reached `mark` now (the first time
    /// only: a call that goes through the pipeline again keeps its first).
    pub fn trace_mark(
        &mut self,
        mark: fn(&mut crate::telemetry::CallTrace) -> &mut Option<std::time::SystemTime>,
    ) {
        if let Some(trace) = self.trace.as_deref_mut() {
            mark(trace).get_or_insert_with(std::time::SystemTime::now);
        }
    }

    /// The call is decided on `definition` (step 3).
    pub fn decided_on(&mut self, definition: Definition) {
        self.definition = Some(definition);
    }

    /// The pin digest of the definition decided on.
    pub fn digest(&self) -> Option<PinDigest> {
        self.definition.as_ref().map(|definition| definition.digest)
    }

    /// A person approved the call as it stands: `approver` let it through,
    /// for the definition it was decided on and the preview shown (a call
    /// decided on no definition carries no consent, and is asked again).
    pub fn approved_by(&mut self, approver: Approver) {
        self.approver = approver;
        self.consent = self.digest().map(|definition| Consent {
            definition,
            preview: self.preview.as_ref().map(Previewed::digest),
        });
    }

    /// What a person approved, if anyone did.
    pub fn consent(&self) -> Option<&Consent> {
        self.consent.as_ref()
    }

    /// The definition a person approved, if anyone did.
    pub fn approved(&self) -> Option<PinDigest> {
        self.consent.as_ref().map(|consent| consent.definition)
    }

    /// What a person approved no longer stands (the call changed, or what
    /// they were shown did): the call is asked about again.
    pub fn withdraw_consent(&mut self) {
        self.consent = None;
    }

    /// The same, as the audit log writes it.
    pub fn digest_text(&self) -> Option<&str> {
        self.definition
            .as_ref()
            .and_then(|definition| definition.digest_text.as_deref())
    }

    /// How the definition decided on compares with its pin (`new` before
    /// one is).
    pub fn pin(&self) -> PinStatus {
        self.definition
            .as_ref()
            .map_or(PinStatus::New, |definition| definition.pin)
    }

    /// Whether the tool is effectively read-only or idempotent.
    pub fn repeatable(&self) -> bool {
        self.definition
            .as_ref()
            .is_some_and(|definition| definition.repeatable)
    }

    /// Whether the tool's result taints the session.
    pub fn taints(&self) -> bool {
        self.definition
            .as_ref()
            .is_some_and(|definition| definition.taints)
    }

    /// The tool's output schema, compiled, if it has one.
    pub fn output(&self) -> Option<&jsonschema::Validator> {
        self.definition
            .as_ref()
            .and_then(|definition| definition.output.as_deref())
    }

    /// The same call, to go through the pipeline once more (a retry, or a
    /// call whose server changed before it was sent): decided again on what
    /// the server lists then. What a person approved, and the server's
    /// questions answered, stay with it.
    pub fn next_attempt(&mut self) {
        self.attempt += 1;
        self.request.restarted = None;
        self.request.wait_until = None;
        self.decision = None;
        self.progress = Progress::Unsent;
        self.generation = None;
        self.relisted = false;
        self.instance = Instance::Full;
        self.read_only = ReadOnlyLeg::default();
    }

    /// The context of a call that could not be read: its name when one can
    /// be found, for the record.
    pub fn unread(request: HostRequest) -> Self {
        let name = request
            .params()
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_default();
        let params = CallParams {
            name,
            ..CallParams::default()
        };
        Self::new(request, params)
    }

    /// The arguments as text (`None` when the call has none): the host's,
    /// with an idempotency key the gateway filled in.
    pub fn arguments_text(&self) -> Option<&str> {
        if let Some(filled) = &self.arguments_filled {
            return Some(filled);
        }
        self.params
            .arguments
            .as_ref()
            .and_then(|range| self.request.line.get(range.clone()))
    }

    /// The `inputResponses` of a 2026-07-28 retry, as text.
    pub fn input_responses_text(&self) -> Option<&str> {
        self.params
            .input_responses
            .as_ref()
            .and_then(|range| self.request.line.get(range.clone()))
    }

    /// Whether the retry answers the question under `key`.
    pub fn answers(&self, key: &str) -> bool {
        self.input_responses_text()
            .and_then(|text| crate::json::members(text).ok())
            .is_some_and(|found| found.iter().any(|member| member.key == key))
    }

    /// The answer to the question under `key`, parsed (`null` without one).
    pub fn answer_to(&self, key: &str) -> Value {
        self.input_responses_text()
            .and_then(|text| serde_json::from_str::<Value>(text).ok())
            .and_then(|mut responses| responses.get_mut(key).map(Value::take))
            .unwrap_or(Value::Null)
    }

    /// Parses the arguments once; a call without arguments has none.
    ///
    /// # Errors
    ///
    /// A message when the arguments are not JSON (they were checked with the
    /// line, so this does not happen in practice).
    pub fn parse_arguments(&mut self) -> Result<(), String> {
        if self.arguments.is_some() {
            return Ok(());
        }
        if let Some(text) = self.arguments_text() {
            let value: Value = serde_json::from_str(text)
                .map_err(|err| format!("the call's `arguments` are not JSON: {err}"))?;
            // What is checked, shown and logged must be what the server
            // reads: an integer beyond 64 bits would be read here rounded,
            // and exactly by many servers.
            if let Some(number) = crate::json::inexact_integer(text) {
                return Err(format!(
                    "the call's `arguments` hold the integer {number}, too large for hintgate to read exactly; what it checks and records could differ from what the server reads"
                ));
            }
            self.arguments = Some(value);
        }
        Ok(())
    }

    /// The arguments, or an empty object for a call without them (what a
    /// schema check and a seal see).
    pub fn arguments_or_empty(&self) -> &Value {
        static EMPTY: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
        match &self.arguments {
            Some(arguments) => arguments,
            None => EMPTY.get_or_init(|| Value::Object(serde_json::Map::new())),
        }
    }

    /// The decision, or a deny with `code` when none was made.
    pub fn decision_or(&self, code: ReasonCode) -> Decision {
        self.decision
            .clone()
            .unwrap_or_else(|| Decision::deny(code))
    }
}

fn parse_params(request: &HostRequest) -> Result<CallParams, String> {
    let Some(range) = request.spans.params.clone() else {
        return Err("`tools/call` needs params with a tool `name`".to_owned());
    };
    let line = request.line.as_str();
    let text = line.get(range.clone()).unwrap_or("");
    if !text.trim_start().starts_with('{') {
        return Err("the params of `tools/call` must be an object".to_owned());
    }
    let raw: RawParams<'_> = serde_json::from_str(text)
        .map_err(|err| format!("the params of `tools/call` cannot be read: {err}"))?;
    let Some(name_raw) = raw.name else {
        return Err("`tools/call` needs a tool `name`".to_owned());
    };
    let name: String = serde_json::from_str(name_raw.get())
        .map_err(|_| "the tool `name` of `tools/call` must be a string".to_owned())?;
    let span = |raw: &RawValue| span_in(line, raw.get());
    Ok(CallParams {
        name,
        span: range,
        arguments: raw.arguments.and_then(span),
        request_state: raw
            .request_state
            .and_then(|state| serde_json::from_str::<String>(state.get()).ok()),
        input_responses: raw.input_responses.and_then(span),
    })
}

// === impl Step ===

impl Step {
    /// The call is refused.
    pub fn refused(cx: Box<CallContext>, refusal: Refusal) -> Self {
        Self::End(cx, CallEnd::Refused(refusal))
    }
}

// === impl CallEnd ===

impl From<Refusal> for CallEnd {
    fn from(refusal: Refusal) -> Self {
        Self::Refused(refusal)
    }
}

impl CallEnd {
    /// How the audit log records a call that ended this way.
    pub fn outcome(&self) -> Outcome {
        match self {
            Self::Refused(refusal) => refusal.outcome(),
            Self::Replayed(_) => Outcome::Replayed,
            Self::InputRequired(_) => Outcome::InputRequired,
            Self::Withdrawn(outcome) => *outcome,
        }
    }

    /// The decision the record shows: the call's own, or a deny that says
    /// why the gateway could not decide.
    pub fn decision(&self, call_decision: Option<&Decision>) -> Decision {
        let code = match self {
            Self::Refused(refusal) => return refusal.decision(call_decision),
            Self::Replayed(_) | Self::InputRequired(_) => ReasonCode::InternalError,
            Self::Withdrawn(_) => ReasonCode::Cancelled,
        };
        call_decision
            .cloned()
            .unwrap_or_else(|| Decision::deny(code))
    }

    /// Who the record names as having ended the call.
    pub fn approver(&self) -> Approver {
        match self {
            Self::Refused(Refusal::Denied { by, .. }) => by.clone(),
            _ => Approver::Gateway,
        }
    }

    /// The answer the host gets: a JSON-RPC error for a request the gateway
    /// could not read or route, an input-required result for a question,
    /// the recorded result for a replay, and otherwise an `isError` result
    /// that says what was refused, why and how to allow it (a refusal is
    /// never dressed as success).
    pub fn answer(&self, cx: Refused<'_>) -> Answer {
        match self {
            Self::Refused(refusal) => refusal.answer(cx),
            Self::Withdrawn(_) => Answer::Error(-32800, "the request was cancelled".to_owned()),
            Self::InputRequired(result) => Answer::Raw(result.clone()),
            Self::Replayed(Some(result)) => match serde_json::from_str::<Value>(result) {
                Ok(result) if result.is_object() => Answer::Result(result),
                _ => Answer::Raw(result.clone()),
            },
            Self::Replayed(None) => Answer::Result(error_result(&format!(
                "this call already ran on `{}` with the same idempotency key and arguments; its result was too large to keep, so it cannot be shown again. It was not run twice.",
                cx.server
            ))),
        }
    }
}

// === impl Refusal ===

impl Refusal {
    /// How the audit log records a call refused this way.
    fn outcome(&self) -> Outcome {
        match self {
            Self::InvalidArguments(_) => Outcome::InvalidArguments,
            Self::Shutdown => Outcome::Shutdown,
            Self::KeyInUse(_)
            | Self::ReadOnlyDiffers(_)
            | Self::Malformed(_)
            | Self::UnknownTool
            | Self::ServerUnavailable(_)
            | Self::Denied { .. }
            | Self::Unrecorded(_)
            | Self::BadState(_)
            | Self::Name(..)
            | Self::AmbiguousName(_) => Outcome::Denied,
        }
    }

    /// The decision the record shows: the call's own, or a deny that says
    /// why the gateway could not decide.
    fn decision(&self, call_decision: Option<&Decision>) -> Decision {
        let fallback = |code| {
            call_decision
                .cloned()
                .unwrap_or_else(|| Decision::deny(code))
        };
        match self {
            Self::Malformed(_) => Decision::deny(ReasonCode::MalformedRequest),
            Self::UnknownTool => Decision::deny(ReasonCode::UnknownTool),
            Self::ServerUnavailable(_) => Decision::deny(ReasonCode::ServerUnavailable),
            Self::BadState(_) => Decision::deny(ReasonCode::InvalidRequestState),
            Self::Name(code, _) => Decision::deny(*code),
            Self::AmbiguousName(_) => Decision::deny(ReasonCode::AmbiguousToolName),
            Self::Denied { .. } | Self::InvalidArguments(_) | Self::Unrecorded(_) => {
                fallback(ReasonCode::InternalError)
            }
            Self::Shutdown => fallback(ReasonCode::Shutdown),
            Self::KeyInUse(_) => Decision::deny(ReasonCode::IdempotencyConflict),
            Self::ReadOnlyDiffers(_) => Decision::deny(ReasonCode::ReadOnlyInstanceDiffers),
        }
    }

    /// The answer the host gets for a refusal.
    fn answer(&self, cx: Refused<'_>) -> Answer {
        match self {
            Self::Malformed(text) => Answer::Error(-32602, text.clone()),
            Self::UnknownTool => Answer::Error(-32602, format!("unknown tool `{}`", cx.host_name)),
            Self::ServerUnavailable(reason) => Answer::Result(error_result(&format!(
                "server `{}` is not available: {reason}",
                cx.server
            ))),
            Self::InvalidArguments(problems) => Answer::Result(error_result(&format!(
                "hintgate did not send this call to `{}`: its arguments do not match the tool's input schema: {}",
                cx.server,
                problems.join("; ")
            ))),
            Self::Unrecorded(err) => Answer::Result(error_result(&format!(
                "hintgate did not send this call: the audit log could not be written ({err})."
            ))),
            Self::BadState(text) => Answer::Result(error_result(text)),
            Self::Name(_, why) => Answer::Result(error_result(&format!(
                "hintgate does not list or run `{}` of server `{}`: {why}.",
                escape_line(cx.tool),
                cx.server
            ))),
            Self::Shutdown => Answer::Result(error_result(&format!(
                "hintgate shut down before it sent this call to `{}`; it did not run.",
                cx.server
            ))),
            Self::AmbiguousName(why) => Answer::Result(error_result(&format!(
                "hintgate does not run `{}`: {why}.",
                escape_line(cx.host_name)
            ))),
            Self::KeyInUse(why) => Answer::Result(error_result(&format!(
                "hintgate did not send this call to `{}`: {why}.",
                cx.server
            ))),
            Self::ReadOnlyDiffers(why) => Answer::Result(error_result(&format!(
                "hintgate did not send this call to the read-only instance of `{}`: {why}. It did not run.",
                cx.server
            ))),
            Self::Denied { extra, .. } => Answer::Result(denial(cx, extra.as_deref())),
        }
    }
}

/// What a refusal's text names.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Refused<'a> {
    /// The name the host called.
    pub host_name: &'a str,
    /// The server's configured name.
    pub server: &'a str,
    /// The server's own tool name.
    pub tool: &'a str,
    /// The decision.
    pub decision: &'a Decision,
    /// The policy, for the rules' own reasons.
    pub policy: &'a hintgate_policy::decide::Policy,
}

/// A refusal as the host gets it.
#[derive(Debug, Clone)]
pub(crate) enum Answer {
    /// A JSON-RPC error: code and message.
    Error(i64, String),
    /// A result (an `isError` tool result).
    Result(Value),
    /// A result already written as JSON text.
    Raw(String),
}

fn denial(cx: Refused<'_>, extra: Option<&str>) -> Value {
    let decision = cx.decision;
    let reasons: Vec<String> = decision
        .reasons
        .iter()
        .map(|reason| {
            let mut text = reason.code.description().to_owned();
            if let Some(rule_reason) = cx.policy.reason_words(reason) {
                text.push_str(&format!(" (\"{rule_reason}\")"));
            }
            match (reason.code, decision.note_of(reason.code)) {
                (ReasonCode::Hook, Some(note)) => text.push_str(&format!(": hook:{note}")),
                (_, Some(note)) => text.push_str(&format!(": {note}")),
                (_, None) => {}
            }
            text
        })
        .collect();
    let first = decision.reasons.first();
    let how = match first.map(|reason| reason.code) {
        Some(ReasonCode::RuleDeny) => {
            let rule = first.and_then(|reason| reason.rule).unwrap_or(0);
            format!("change or remove rule {rule} in the configuration's `[[rules]]` (counted from 0)")
        }
        Some(ReasonCode::ProfileHideWrites) => {
            "add an allow or ask rule for this tool, or set `profile = \"ask-writes\"`".to_owned()
        }
        Some(ReasonCode::Unattended) => {
            "run hintgate with a person to answer (`unattended = false`), or add an allow rule for this tool".to_owned()
        }
        Some(ReasonCode::InvalidDefinition) => {
            "the server must send a valid tool definition".to_owned()
        }
        Some(ReasonCode::Hook) => {
            "change what the decision hook (`decide_command`) answers for this call".to_owned()
        }
        Some(ReasonCode::HookFailed) => {
            "make the decision hook (`decide_command`) answer in time with one JSON object (see the gateway's log), or remove it".to_owned()
        }
        _ => "approve it when asked, add an allow rule for this tool, or trust the server"
            .to_owned(),
    };
    let why = if decision.verdict == Verdict::Ask {
        "It needed a person's approval because"
    } else {
        "Why"
    };
    let mut text = format!(
        "hintgate refused to run `{}` on server `{}`.\n{why}: {}.",
        cx.tool,
        cx.server,
        reasons.join("; ")
    );
    if let Some(extra) = extra {
        text.push_str(&format!("\n{extra}"));
    }
    text.push_str(&format!("\nTo allow it: {how}."));
    let mut result = error_result(&text);
    if let Some(object) = result.as_object_mut() {
        // The codes stay codes; the decision hook's words beside them. One
        // type for this and the HTTP host side that reads it.
        object.insert(
            "_meta".to_owned(),
            json!({ DECISION_META_KEY: DecisionMeta::refused(decision) }),
        );
    }
    result
}

/// A tool result that tells the model the call failed, and why.
pub(crate) fn error_result(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

/// The JSON-RPC line of an answer, under the host's `id`; `modernize` adds
/// what a 2026-07-28 host requires of a result.
pub(crate) fn answer_line(id: &str, answer: Answer, modernize: impl Fn(&mut Value)) -> String {
    match answer {
        Answer::Error(code, message) => frame::error_response(id, code, &message),
        Answer::Result(mut result) => {
            modernize(&mut result);
            frame::response(id, &result)
        }
        Answer::Raw(result) => format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{result}}}"),
    }
}

// === impl Approver ===

impl std::fmt::Display for Approver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Nobody | Self::Gateway => f.write_str("gateway"),
            Self::Policy(Some(code)) => f.write_str(code.as_str()),
            Self::Policy(None) => f.write_str("policy"),
            Self::Person(Channel::Elicitation) => f.write_str("person (elicitation)"),
            Self::Person(Channel::InputRequired) => f.write_str("person (input-required)"),
            Self::Person(Channel::Queue(by)) => write!(f, "person (hintgate approvals, {by})"),
            Self::Person(Channel::RelayedAnswer) => f.write_str("person (relayed answer)"),
        }
    }
}

/// What the gateway reads of a `tools/call` result: whether it reports an
/// error, and its structured content. A result that repeats one of these
/// keys cannot be read one way only, and is a protocol error.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct CallResultView<'a> {
    /// `isError`.
    #[serde(rename = "isError", default)]
    pub is_error: Option<bool>,
    /// `structuredContent`, as text.
    #[serde(rename = "structuredContent", borrow, default)]
    pub structured: Option<&'a RawValue>,
    /// `resultType` (2026-07-28).
    #[serde(rename = "resultType", borrow, default)]
    pub result_type: Option<std::borrow::Cow<'a, str>>,
}

/// Reads a result for its outcome.
///
/// # Errors
///
/// A message when the result is not an object these fields can be read
/// from (a field of the wrong type, or repeated).
pub(crate) fn read_result(raw: &str) -> Result<CallResultView<'_>, String> {
    // Most results name none of these keys anywhere, not even spelled with
    // an escape (`\u`): then there is nothing to read, and the second parse
    // of the result is skipped.
    // serde would read an array field by field, in order: a result that is
    // not an object is refused before it is read.
    if !raw.trim_start().starts_with('{') {
        return Err("a tool result must be a JSON object".to_owned());
    }
    let plain = !raw.contains("isError")
        && !raw.contains("structuredContent")
        && !raw.contains("resultType")
        && !raw.contains("\\u");
    if plain {
        return Ok(CallResultView::default());
    }
    serde_json::from_str(raw).map_err(|err| err.to_string())
}

/// Whether a server's result carries data to the host: every result but a
/// 2026-07-28 input-required one, which only asks for more input. A result
/// that cannot be read counts as data.
pub(crate) fn carries_data(result: &str) -> bool {
    !matches!(
        read_result(result),
        Ok(view) if view.result_type.as_deref() == Some("input_required")
    )
}

/// The message for a line that nests deeper than `max_json_depth`.
pub(crate) fn too_deep_message(err: &JsonError) -> String {
    format!(
        "hintgate refuses this message: {err} (the limit is `max_json_depth` in `[gateway]`); a host or server may not be able to read it"
    )
}

/// The message for a host line whose keys repeat.
pub(crate) fn duplicate_message(err: &JsonError) -> String {
    format!(
        "hintgate refuses this message: {err}; a repeated key can be read two ways, so what the gateway decides and what the server runs could differ"
    )
}

/// Takes the calls of `session` (the one for `request_id`) out of `held`
/// (by question number; `cx_of` finds each one's call), in the order they
/// were asked about, handing each number and call to `release` as it goes
/// (a per-call process asked about it is killed there).
pub(crate) fn take_held<H>(
    held: &mut HashMap<u64, H>,
    cx_of: impl Fn(&H) -> &CallContext,
    session: SessionId,
    request_id: Option<&str>,
    mut release: impl FnMut(u64, &H),
) -> Vec<H> {
    let mut ids: Vec<u64> = held
        .iter()
        .filter(|(_, one)| {
            let cx = cx_of(one);
            cx.request.session == session && request_id.is_none_or(|id| cx.request.id() == id)
        })
        .map(|(id, _)| *id)
        .collect();
    ids.sort_unstable();
    ids.into_iter()
        .filter_map(|id| {
            let one = held.remove(&id)?;
            release(id, &one);
            Some(one)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::request::{Method, SessionId};

    fn request(line: &str) -> HostRequest {
        let message = crate::frame::Message::parse(line).unwrap();
        HostRequest::new(
            SessionId::FIRST,
            line.to_owned(),
            message.spans(),
            Method::of(message.method()),
        )
    }

    #[test]
    fn a_call_is_recorded_then_sent_and_a_new_attempt_starts_over() {
        let line = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a__b"}}"#;
        let mut cx = CallContext::parse(request(line)).unwrap();
        assert_eq!((cx.record(), cx.started()), (None, None));
        // Its record durable, then sent: both known.
        cx.recorded(Some(7));
        assert_eq!((cx.record(), cx.started()), (Some(7), None));
        let at = Instant::now();
        cx.sent(at);
        assert_eq!((cx.record(), cx.started()), (Some(7), Some(at)));
        // A retry is decided, recorded and sent anew.
        cx.next_attempt();
        assert_eq!((cx.record(), cx.started()), (None, None));
        assert_eq!(cx.attempt, 1);
        // Without a log a call is sent with no record.
        cx.recorded(None);
        cx.sent(at);
        assert_eq!((cx.record(), cx.started()), (None, Some(at)));
        // A record that becomes known after the send keeps the send's time.
        cx.recorded(Some(9));
        assert_eq!((cx.record(), cx.started()), (Some(9), Some(at)));
        cx.unsent();
        assert_eq!((cx.record(), cx.started()), (None, None));
    }

    #[test]
    fn held_calls_of_a_session_or_one_request_are_taken_in_the_order_asked() {
        let call_of = |session: u32, id: u32| {
            let line = format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"a__b"}}}}"#
            );
            let mut request = request(&line);
            request.session = SessionId(session);
            Box::new(CallContext::parse(request).unwrap())
        };
        // Question number -> (the call, its slot).
        let mut held: HashMap<u64, (Box<CallContext>, usize)> = HashMap::new();
        held.insert(9, (call_of(0, 1), 0));
        held.insert(3, (call_of(0, 2), 1));
        held.insert(5, (call_of(1, 1), 0));
        held.insert(4, (call_of(0, 1), 1));
        let mut released = Vec::new();
        let taken = take_held(
            &mut held,
            |one| &*one.0,
            SessionId(0),
            Some("1"),
            |id, one| {
                released.push((id, one.1));
            },
        );
        assert_eq!(
            released,
            [(4, 1), (9, 0)],
            "not in the order asked, or another request's"
        );
        assert_eq!(taken.len(), 2);
        assert!(
            taken
                .iter()
                .all(|one| one.0.request.id() == "1" && one.0.request.session == SessionId(0))
        );
        // The whole session: what is left of it; the other session's stays.
        let taken = take_held(&mut held, |one| &*one.0, SessionId(0), None, |_, _| {});
        assert_eq!(taken.len(), 1);
        assert_eq!(held.keys().copied().collect::<Vec<_>>(), [5]);
    }

    #[test]
    fn params_are_read_once_as_spans_of_the_line() {
        let line = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"fs__read","arguments":{"b":1,"a":12345678901234567890},"requestState":"s","inputResponses":{"k":{}}}}"#;
        let cx = CallContext::parse(request(line)).unwrap();
        assert_eq!(cx.params.name, "fs__read");
        assert_eq!(
            cx.arguments_text(),
            Some(r#"{"b":1,"a":12345678901234567890}"#)
        );
        assert_eq!(cx.params.request_state.as_deref(), Some("s"));
        assert_eq!(
            &line[cx.params.input_responses.clone().unwrap()],
            r#"{"k":{}}"#
        );
        assert_eq!(cx.request.id(), "7");
    }

    fn decided(digest: PinDigest, pin: PinStatus) -> Definition {
        Definition {
            digest,
            digest_text: Some(digest.to_string().into()),
            pin,
            repeatable: true,
            taints: true,
            output: None,
        }
    }

    /// A person's approval is for the definition and the preview they were
    /// shown, together: a call decided on no definition carries none, and
    /// an approval given up is given up whole.
    #[test]
    fn an_approval_holds_the_definition_and_the_preview_shown_together() {
        let line = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"fs__write","arguments":{}}}"#;
        let mut cx = CallContext::parse(request(line)).unwrap();
        let queue = Approver::Person(Channel::Queue("ana".to_owned()));
        cx.approved_by(queue.clone());
        assert_eq!((cx.consent(), &cx.approver), (None, &queue));

        let definition = PinDigest([4; 32]);
        cx.decided_on(decided(definition, PinStatus::Unchanged));
        let shown = Previewed::unavailable(
            hintgate_policy::preview::PreviewSource::Files,
            "no such file",
        );
        cx.preview = Some(shown.clone());
        cx.approved_by(queue);
        let consent = Consent {
            definition,
            preview: Some(shown.digest()),
        };
        assert_eq!(cx.consent(), Some(&consent));
        assert_eq!(cx.approved(), Some(definition));

        // A preview computed since does not change what was approved.
        cx.preview = None;
        assert_eq!(cx.consent(), Some(&consent));
        cx.next_attempt();
        assert_eq!(cx.consent(), Some(&consent));

        cx.withdraw_consent();
        assert_eq!((cx.consent(), cx.approved()), (None, None));
    }

    /// What a retried call's record reads of its context: the pin of the
    /// definition last decided on stays until an attempt decides on one of
    /// its own; the decision, the instance and the start it was decided
    /// for do not.
    #[test]
    fn a_retried_call_keeps_the_pin_its_record_names_until_decided_again() {
        let line = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"fs__read","arguments":{}}}"#;
        let mut cx = CallContext::parse(request(line)).unwrap();
        assert_eq!(
            (cx.digest(), cx.digest_text(), cx.pin()),
            (None, None, PinStatus::New)
        );
        assert!(!cx.repeatable() && !cx.taints() && cx.output().is_none());

        let first = PinDigest([1; 32]);
        cx.decided_on(decided(first, PinStatus::Unchanged));
        cx.decision = Some(Decision::deny(ReasonCode::RuleDeny));
        cx.instance = Instance::ReadOnly;
        cx.generation = Some(3);
        cx.approved_by(Approver::Person(Channel::Elicitation));
        cx.next_attempt();

        assert_eq!(cx.attempt, 1);
        let first_text = first.to_string();
        assert_eq!(cx.digest(), Some(first));
        assert_eq!(cx.digest_text(), Some(first_text.as_str()));
        assert_eq!(cx.pin(), PinStatus::Unchanged);
        assert!(cx.repeatable() && cx.taints());
        assert!(cx.decision.is_none());
        assert_eq!(cx.instance, Instance::Full);
        assert_eq!(cx.generation, None);
        // What a person approved stays with the call.
        assert_eq!(cx.approved(), Some(first));

        let second = PinDigest([2; 32]);
        cx.decided_on(decided(second, PinStatus::Changed));
        let second_text = second.to_string();
        assert_eq!(cx.digest(), Some(second));
        assert_eq!(cx.digest_text(), Some(second_text.as_str()));
        assert_eq!(cx.pin(), PinStatus::Changed);
    }

    #[test]
    fn params_without_a_string_name_are_malformed() {
        for params in [r#"{}"#, r#"{"name":3}"#, r#"[]"#, r#""x""#] {
            let line =
                format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{params}}}"#);
            let (_, refusal) = CallContext::parse(request(&line)).unwrap_err();
            assert!(matches!(refusal, Refusal::Malformed(_)), "{params}");
        }
        let (_, refusal) =
            CallContext::parse(request(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#))
                .unwrap_err();
        assert!(matches!(refusal, Refusal::Malformed(_)));
    }

    #[test]
    fn the_result_view_reads_is_error_however_it_is_spaced() {
        assert_eq!(
            read_result(r#"{"isError": true}"#).unwrap().is_error,
            Some(true)
        );
        assert_eq!(
            read_result(r#"{ "isError" :true }"#).unwrap().is_error,
            Some(true)
        );
        assert_eq!(
            read_result(r#"{"content":[{"text":"\"isError\":true"}]}"#)
                .unwrap()
                .is_error,
            None
        );
        assert!(read_result(r#"{"isError":false,"isError":true}"#).is_err());
        assert!(read_result(r#"{"isError":"yes"}"#).is_err());
        // Spelled with an escape, it is still read.
        assert_eq!(
            read_result(r#"{"\u0069sError":true}"#).unwrap().is_error,
            Some(true)
        );
        assert_eq!(read_result(r#"{"content":[]}"#).unwrap().is_error, None);
        // An array would be read field by field: `isError` first.
        assert!(read_result(r#"[true]"#).is_err());
        assert!(read_result(r#"[]"#).is_err());
    }

    /// Every way a call ends at the gateway: how it ends, its outcome, and
    /// the reason code its record shows without a decision of its own.
    fn every_end() -> Vec<(CallEnd, Outcome, ReasonCode)> {
        let refused = |refusal| CallEnd::Refused(refusal);
        vec![
            (
                refused(Refusal::Malformed("x".into())),
                Outcome::Denied,
                ReasonCode::MalformedRequest,
            ),
            (
                refused(Refusal::UnknownTool),
                Outcome::Denied,
                ReasonCode::UnknownTool,
            ),
            (
                refused(Refusal::InvalidArguments(vec!["p".into()])),
                Outcome::InvalidArguments,
                ReasonCode::InternalError,
            ),
            (
                refused(Refusal::Shutdown),
                Outcome::Shutdown,
                ReasonCode::Shutdown,
            ),
            (
                refused(Refusal::KeyInUse("k".into())),
                Outcome::Denied,
                ReasonCode::IdempotencyConflict,
            ),
            (
                refused(Refusal::ReadOnlyDiffers("r".into())),
                Outcome::Denied,
                ReasonCode::ReadOnlyInstanceDiffers,
            ),
            (
                CallEnd::Replayed(None),
                Outcome::Replayed,
                ReasonCode::InternalError,
            ),
            (
                CallEnd::InputRequired("{}".into()),
                Outcome::InputRequired,
                ReasonCode::InternalError,
            ),
            (
                CallEnd::Withdrawn(Outcome::HostGone),
                Outcome::HostGone,
                ReasonCode::Cancelled,
            ),
        ]
    }

    #[test]
    fn each_way_a_call_ends_keeps_its_outcome_reason_and_answer() {
        let (config, _) = hintgate_policy::config::parse_str("[servers.fx]\ncommand = \"x\"\n");
        let policy = hintgate_policy::decide::Policy::new(config.unwrap());
        let decided = Decision::deny(ReasonCode::RuleDeny);
        let answer_of = |end: &CallEnd| {
            let decision = end.decision(None);
            let answer = end.answer(Refused {
                host_name: "fx__note",
                server: "fx",
                tool: "note",
                decision: &decision,
                policy: &policy,
            });
            answer_line("7", answer, |_| {})
        };
        let refused = |refusal| CallEnd::Refused(refusal);
        let table = every_end();
        for (end, outcome, code) in &table {
            assert_eq!(end.outcome(), *outcome, "{end:?}");
            assert_eq!(end.decision(None), Decision::deny(*code), "{end:?}");
            // A decision of the call's own is what the record shows, but
            // where the end names its own reason.
            let own = end.decision(Some(&decided));
            let names_own = matches!(
                end,
                CallEnd::Refused(
                    Refusal::Malformed(_)
                        | Refusal::UnknownTool
                        | Refusal::KeyInUse(_)
                        | Refusal::ReadOnlyDiffers(_)
                )
            );
            assert_eq!(own == decided, !names_own, "{end:?}");
            assert_eq!(end.approver(), Approver::Gateway, "{end:?}");
        }
        let by = Approver::Person(Channel::Elicitation);
        let denied = refused(Refusal::Denied {
            extra: None,
            by: by.clone(),
        });
        assert_eq!(denied.approver(), by);
        // The answers: a JSON-RPC error for what cannot be read or routed,
        // the recorded result of a replay, the question as it was written.
        assert_eq!(
            answer_of(&refused(Refusal::UnknownTool)),
            r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"unknown tool `fx__note`"}}"#
        );
        assert_eq!(
            answer_of(&CallEnd::Withdrawn(Outcome::Cancelled)),
            r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32800,"message":"the request was cancelled"}}"#
        );
        assert_eq!(
            answer_of(&CallEnd::InputRequired(
                r#"{"resultType":"input_required"}"#.into()
            )),
            r#"{"jsonrpc":"2.0","id":7,"result":{"resultType":"input_required"}}"#
        );
        assert_eq!(
            answer_of(&CallEnd::Replayed(Some(r#"{"content":[]}"#.into()))),
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":[]}}"#
        );
        let lost = answer_of(&CallEnd::Replayed(None));
        assert!(lost.contains(r#""isError":true"#), "{lost}");
        assert!(lost.contains("It was not run twice."), "{lost}");
    }

    #[test]
    fn approvers_and_outcomes_keep_their_stable_names() {
        assert_eq!(
            Approver::Policy(Some(ReasonCode::ReadOnly)).to_string(),
            "read-only"
        );
        assert_eq!(
            Approver::Person(Channel::Queue("ann".into())).to_string(),
            "person (hintgate approvals, ann)"
        );
        assert_eq!(Approver::Gateway.to_string(), "gateway");
        // How a call ended is named by the store's record type
        // (`journal::code_of`), tested there.
    }
}
