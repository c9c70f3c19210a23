//! Every record the audit log holds, as types: a call ([`CallRecord`]), how
//! one call ended ([`OutcomeRecord`]) or how several did
//! ([`OutcomesRecord`]), a standing approval granted ([`GrantRecord`]) or
//! revoked ([`RevokeRecord`]), and a rolled-back log accepted
//! ([`RollbackRecord`]); [`Record`] is any of them.
//!
//! Each type has one writer and one reader, and both are here:
//!
//! - [`Record::to_json`] writes a record's body as canonical JSON (keys
//!   sorted, no whitespace): the bytes the keyed chain covers. The fields of
//!   each type are declared in sorted order, so the serializer writes them
//!   sorted; fields that older builds did not write are left out when they
//!   are absent, and fields every build wrote are written as `null`. The
//!   call and outcomes records, written for every call, are written member
//!   by member here instead (keys as literals), to the same bytes as the
//!   serializer's, which a test holds them to.
//! - [`Record::read`] reads a stored body strictly: an unknown field, a
//!   missing one, a value of another type or an unknown code fails, and so
//!   does a body that the type would not write back byte for byte (a field
//!   written as `null` where it is left out when absent, or the reverse).
//!   Every record any hintgate wrote reads: the fields added since the first
//!   build (a call's `edit`, `egress`, `host`, `idempotency`, `instance`,
//!   `instance_identity`, `preview`)
//!   are optional, and the golden records of `tests/data` (a keyed log
//!   written by the journal before these types) read and are written back
//!   byte for byte, so their links still verify.
//!
//! The writer and the reader are the same code for the gateway's journal,
//! the store (grants, revocations, rollbacks, and `verify`), `hintgate
//! log`, the console and the HTTP host side, and `docs/audit-record.schema.json`
//! is checked against them.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

/// What an entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EntryKind {
    /// A call and the decision on it, written before the call is sent (a
    /// call that is refused is never sent).
    Call,
    /// How one call ended; [`NewEntry::call`](crate::NewEntry::call) names the call.
    Outcome,
    /// How several calls ended, in one record: a turn of the gateway that
    /// saw several calls end writes one record, not one each. Its body is
    /// `{"outcomes": [{"call": SEQ, "outcome": ..., ...}, ...]}`;
    /// [`Entry::expand`](crate::Entry::expand) gives one [`EntryKind::Outcome`] entry per call.
    Outcomes,
    /// A standing ("always") approval granted: written by the store in the
    /// transaction that writes the approval's row, whose seal binds this
    /// record's sequence number. Its body is `{"digest": ..., "server":
    /// ..., "server_key": ..., "tool": ...}`.
    Grant,
    /// A standing approval revoked (by a person, or because the server's
    /// identity changed and its old identity's pins went): written by the
    /// store in the transaction that deletes the row. Its body is
    /// `{"server": ..., "server_key": ..., "tool": ..., "why": "revoked" |
    /// "identity-changed"}`.
    Revoke,
    /// A person accepted a log that is not the one its head was written
    /// for (an older copy put back, the head removed or damaged, the log
    /// deleted): see
    /// [`AuditLog::accept_rollback`](crate::AuditLog::accept_rollback). Its
    /// body names what was found: `{"found": CODE, "head": PATH,
    /// "head_link": ..., "head_seq": ..., "log_end": ..., "why": ...}`. Every
    /// standing approval granted before it approves nothing.
    Rollback,
}

impl EntryKind {
    /// The kind's name as the log stores it (`call`, `outcome`, …).
    pub const fn as_str(self) -> &'static str {
        kind_name(self)
    }
}

/// The stored name of an entry kind.
pub(crate) const fn kind_name(kind: EntryKind) -> &'static str {
    match kind {
        EntryKind::Call => "call",
        EntryKind::Outcome => "outcome",
        EntryKind::Outcomes => "outcomes",
        EntryKind::Grant => "grant",
        EntryKind::Revoke => "revoke",
        EntryKind::Rollback => "rollback",
    }
}

/// An entry kind from its stored name; `None` for a name this hintgate
/// does not write.
pub(crate) fn kind_from(text: &str) -> Option<EntryKind> {
    match text {
        "call" => Some(EntryKind::Call),
        "outcome" => Some(EntryKind::Outcome),
        "outcomes" => Some(EntryKind::Outcomes),
        "grant" => Some(EntryKind::Grant),
        "revoke" => Some(EntryKind::Revoke),
        "rollback" => Some(EntryKind::Rollback),
        _ => None,
    }
}

pub use hintgate_policy::config::Instance;
pub use hintgate_policy::decide::Verdict;
pub use hintgate_policy::preview::{PreviewKind, PreviewSource};

/// Any record of the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Record {
    /// A call and the decision on it ([`EntryKind::Call`]); boxed, as the
    /// largest kind by far.
    Call(Box<CallRecord>),
    /// How one call ended ([`EntryKind::Outcome`]); the record's `call`
    /// names the call.
    Outcome(OutcomeRecord),
    /// How several calls ended, in one record ([`EntryKind::Outcomes`]).
    Outcomes(OutcomesRecord),
    /// A standing approval granted ([`EntryKind::Grant`]).
    Grant(GrantRecord),
    /// A standing approval revoked ([`EntryKind::Revoke`]).
    Revoke(RevokeRecord),
    /// A rolled-back log accepted ([`EntryKind::Rollback`]).
    Rollback(RollbackRecord),
}

/// A call that reached the gateway, and the decision on it: written before
/// the call is sent (a call that is refused is never sent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallRecord {
    /// Who let it through or ended it: the policy's first reason code,
    /// `policy`, `gateway`, or a person and how they answered
    /// (`person (elicitation)`, `person (hintgate approvals, NAME)`, …).
    pub approver: String,
    /// The call's arguments as the log keeps them: redacted, as canonical
    /// JSON (`null` when the call had none). For a call a person edited,
    /// the edited arguments (the host's are in [`CallRecord::edit`]).
    pub arguments: Arguments,
    /// For a call a person edited before approving it (`hintgate approvals
    /// approve ID --arguments FILE`, the console): who, and the arguments
    /// the host sent. Left out otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edit: Option<EditRecord>,
    /// For a server sandboxed with a list of hosts (`network = ["host:port",
    /// ...]`): the hosts its egress proxy lets it reach, as listed. Left out
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<Vec<String>>,
    /// Who the host is, when its transport authenticated it (over HTTP:
    /// its token's name). Left out when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The call's idempotency key. Left out when it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency: Option<Idempotency>,
    /// The server's identity key (`null` when no server was resolved).
    pub identity: Option<String>,
    /// For a server with a read-only instance: the instance the call was
    /// decided for. Left out otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<Instance>,
    /// The read-only instance's identity key, when the call was decided
    /// for it ([`CallRecord::identity`] stays the full instance's, whose
    /// definitions are pinned). Left out otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_identity: Option<String>,
    /// For a call that ended at the gateway (refused, invalid, asked about,
    /// replayed): how. Left out for a call that is sent on, whose outcome
    /// is a record of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<OutcomeCode>,
    /// The pin digest of the definition decided on (`sha256:...`; `null`
    /// when there was none).
    pub pin: Option<String>,
    /// What the call would do, as previewed for the person asked about it
    /// (or for a call a standing approval let through), where a preview is
    /// configured for its tool. Left out otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<PreviewRecord>,
    /// The decision's reasons, the first the one that settled it: each a
    /// reason code, or `hook:NOTE` / `hook-failed:WHAT`.
    pub reasons: Vec<String>,
    /// The host's request id, as raw JSON text (`1`, `"abc"`).
    pub request: String,
    /// The server's configured name (empty when none was resolved).
    pub server: String,
    /// The gateway run that saw the call.
    pub session: String,
    /// For a call sent to a server behind OAuth: the scopes of the token it
    /// went with, space-separated as the authorization server granted them
    /// (never the token itself). Left out otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_scope: Option<String>,
    /// The server's own tool name (or the name the host called).
    pub tool: String,
    /// The decision.
    pub verdict: Verdict,
}

/// How a person edited a call before approving it: who, and what the host
/// had asked (the record's `arguments` are what was decided on and sent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditRecord {
    /// Who edited it, as the approval queue names them.
    pub by: String,
    /// The arguments as the host sent them, redacted as the record's
    /// `arguments` are (`null` when the call had none).
    pub original: Arguments,
}

/// A call's preview as the log keeps it: its digest (what an approval
/// bound) and source, and its text up to a bound, or why there was none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreviewRecord {
    /// `sha256:...` over the preview (or over why there was none).
    pub digest: String,
    /// What its text is. Left out when there was no preview.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<PreviewKind>,
    /// Why there was no preview. Left out when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub none: Option<String>,
    /// Where it came from.
    pub source: PreviewSource,
    /// Its text, up to [`hintgate_policy::preview::RECORD_TEXT_BYTES`]
    /// bytes, lines that look like credentials withheld. Left out when there
    /// was no preview.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The text was cut at the bound. Left out when it was not.
    #[serde(default, skip_serializing_if = "is_false")]
    pub truncated: bool,
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// A call's idempotency key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Idempotency {
    /// Whether the gateway filled it in (the host sent none).
    pub filled: bool,
    /// The key, kept whole whatever redaction makes of the arguments.
    pub key: String,
}

/// A JSON value held as its canonical text (the redacted arguments of a
/// call), written into a record as it is.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Arguments(Box<RawValue>);

/// How one call ended ([`EntryKind::Outcome`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutcomeRecord {
    /// Which try of the call this was (0 for the first).
    pub attempt: u32,
    /// How long the call took, in milliseconds.
    pub duration_ms: u64,
    /// How it ended.
    pub outcome: OutcomeCode,
}

/// How several calls ended ([`EntryKind::Outcomes`]): a turn of the gateway
/// that saw several calls end writes one record, not one each.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutcomesRecord {
    /// The outcomes, at least one.
    pub outcomes: Vec<OutcomeItem>,
}

/// One call's outcome in an [`OutcomesRecord`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutcomeItem {
    /// As in [`OutcomeRecord`].
    pub attempt: u32,
    /// The call's sequence number.
    pub call: u64,
    /// As in [`OutcomeRecord`].
    pub duration_ms: u64,
    /// As in [`OutcomeRecord`].
    pub outcome: OutcomeCode,
}

/// How a call ended, as the audit log names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutcomeCode {
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
    #[serde(rename = "failed, retried")]
    FailedRetried,
    /// Its server stopped or started again between the decision and the
    /// send: it was not sent.
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
    /// The gateway shut down before the call was answered.
    Shutdown,
    /// Its idempotency key had run with the same arguments: the recorded
    /// result was the answer, and the server was not called.
    Replayed,
    /// The gateway was forwarding it when it stopped without ending it
    /// (killed, crashed, the machine lost power): the server may or may not
    /// have run it. Written by the next gateway that starts on the log.
    Interrupted,
}

/// A standing ("always") approval granted ([`EntryKind::Grant`]): written
/// by the store in the transaction that writes the approval's row, whose
/// seal binds this record's sequence number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantRecord {
    /// The pin digest of the definition approved.
    pub digest: String,
    /// The configured server name of the tool's pin when it was granted
    /// (for people; empty when it had none).
    pub server: String,
    /// The server's identity key.
    pub server_key: String,
    /// The server's own tool name.
    pub tool: String,
}

/// A standing approval revoked ([`EntryKind::Revoke`]): written by the
/// store in the transaction that deletes the row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RevokeRecord {
    /// As in [`GrantRecord`].
    pub server: String,
    /// The server's identity key.
    pub server_key: String,
    /// The server's own tool name.
    pub tool: String,
    /// Why.
    pub why: RevokeWhy,
}

/// Why a standing approval was revoked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RevokeWhy {
    /// A person revoked it (`hintgate pins revoke`, the console).
    Revoked,
    /// The server's identity changed, and the approvals of its old identity
    /// went with its pins.
    IdentityChanged,
}

/// A person accepted a log that is not the one its head was written for
/// ([`EntryKind::Rollback`]); every standing approval granted before it
/// approves nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RollbackRecord {
    /// What was found, as `verify` names it.
    pub found: RollbackFound,
    /// The head file.
    pub head: String,
    /// The head's link, for `cut-off` and `head-mismatch`.
    pub head_link: Option<String>,
    /// The head's sequence number, for `cut-off` and `head-mismatch`.
    pub head_seq: Option<u64>,
    /// The log's last record when it was accepted (before this one).
    pub log_end: u64,
    /// What was wrong with the head, for `head-damaged` and
    /// `head-unreadable`.
    pub why: Option<String>,
}

/// What a rolled-back log was found to be (the codes of
/// [`HeadFound`](crate::HeadFound)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RollbackFound {
    /// The log ends before its head.
    CutOff,
    /// The record at the head's sequence number has another link.
    HeadMismatch,
    /// Keyed records but no head.
    HeadMissing,
    /// The head is not a head, or its seal does not match.
    HeadDamaged,
    /// The head cannot be read.
    HeadUnreadable,
    /// The log is empty and its head gone, but the key was there.
    LogDeleted,
}

/// Why a stored body is not a record of its kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotARecord {
    /// The body does not read as the kind's type: a field unknown, missing
    /// or of another type, or a code the type does not know.
    #[error("its body is not a `{kind}` record: {detail}")]
    Fields {
        /// The kind.
        kind: &'static str,
        /// What the reader said.
        detail: String,
    },
    /// The fields read, but the record breaks a rule of its kind (an
    /// outcome that names no call, an empty list of outcomes, a rollback
    /// whose fields are not the ones its code has, a record that is not an
    /// outcome naming a call).
    #[error("its body is not a `{kind}` record: {rule}")]
    Rule {
        /// The kind.
        kind: &'static str,
        /// The rule broken.
        rule: &'static str,
    },
    /// The fields read, but the type writes them back otherwise: a field
    /// written as `null` where it is left out when absent, or the reverse,
    /// or a body that is not canonical.
    #[error("its body is not written as hintgate writes a `{kind}` record")]
    NotAsWritten {
        /// The kind.
        kind: &'static str,
    },
}

// === impl Record ===

impl Record {
    /// The record's kind.
    #[must_use]
    pub const fn kind(&self) -> EntryKind {
        match self {
            Self::Call(_) => EntryKind::Call,
            Self::Outcome(_) => EntryKind::Outcome,
            Self::Outcomes(_) => EntryKind::Outcomes,
            Self::Grant(_) => EntryKind::Grant,
            Self::Revoke(_) => EntryKind::Revoke,
            Self::Rollback(_) => EntryKind::Rollback,
        }
    }

    /// The record's body as canonical JSON: the one writer of every
    /// record, whose bytes the keyed chain covers.
    #[must_use]
    pub fn to_json(&self) -> String {
        let written = match self {
            // The two kinds written for every call are written here member
            // by member, keys as literals (serde escapes every key anew);
            // the bytes are serde's, as `writes_what_serde_writes` checks.
            Self::Call(record) => Ok(record.to_json()),
            Self::Outcome(record) => serde_json::to_string(record),
            Self::Outcomes(record) => Ok(record.to_json()),
            Self::Grant(record) => serde_json::to_string(record),
            Self::Revoke(record) => serde_json::to_string(record),
            Self::Rollback(record) => serde_json::to_string(record),
        };
        // Every field is a string, a number, a boolean, a list or a struct
        // of those, or JSON text already checked: serialising cannot fail.
        // Were it ever to, `null` is written, which no reader takes for a
        // record.
        written.unwrap_or_else(|_| "null".to_owned())
    }

    /// Reads a stored body of `kind`, whose record names `call` (the
    /// sequence number in an outcome's header), strictly: see the module's
    /// documentation.
    ///
    /// # Errors
    ///
    /// [`NotARecord`] when the body is not one hintgate writes for `kind`.
    pub fn read(kind: EntryKind, call: Option<u64>, body: &str) -> Result<Self, NotARecord> {
        let name = kind.as_str();
        let fields = |detail: serde_json::Error| NotARecord::Fields {
            kind: name,
            detail: detail.to_string(),
        };
        let rule = |rule: &'static str| NotARecord::Rule { kind: name, rule };
        let record = match kind {
            EntryKind::Call => Self::Call(serde_json::from_str(body).map_err(fields)?),
            EntryKind::Outcome => Self::Outcome(serde_json::from_str(body).map_err(fields)?),
            EntryKind::Outcomes => {
                let record: OutcomesRecord = serde_json::from_str(body).map_err(fields)?;
                if record.outcomes.is_empty() {
                    return Err(rule("it lists no outcome"));
                }
                Self::Outcomes(record)
            }
            EntryKind::Grant => Self::Grant(serde_json::from_str(body).map_err(fields)?),
            EntryKind::Revoke => Self::Revoke(serde_json::from_str(body).map_err(fields)?),
            EntryKind::Rollback => {
                let record: RollbackRecord = serde_json::from_str(body).map_err(fields)?;
                if !record.fits() {
                    return Err(rule("its fields are not the ones its code has"));
                }
                Self::Rollback(record)
            }
        };
        match (kind, call) {
            (EntryKind::Outcome, None) => return Err(rule("it names no call")),
            (EntryKind::Outcome, Some(_)) | (_, None) => {}
            (_, Some(_)) => return Err(rule("only an outcome names a call")),
        }
        if record.to_json() != body {
            return Err(NotARecord::NotAsWritten { kind: name });
        }
        // The arguments are kept as the text they are: that text must be
        // canonical too, as the redactor writes it.
        if let Self::Call(call) = &record
            && hintgate_policy::pin::canonical_json(&call.arguments.to_value())
                != call.arguments.as_str()
        {
            return Err(NotARecord::NotAsWritten { kind: name });
        }
        Ok(record)
    }

    /// The call record, if it is one.
    #[must_use]
    pub const fn as_call(&self) -> Option<&CallRecord> {
        match self {
            Self::Call(record) => Some(record),
            _ => None,
        }
    }
}

// === impl CallRecord ===

impl CallRecord {
    /// The record's body, as [`Record::to_json`] writes it: the members in
    /// the order they are declared (sorted), keys as literals.
    fn to_json(&self) -> String {
        let mut out = String::with_capacity(320 + self.arguments.as_str().len());
        out.push_str("{\"approver\":");
        push_string(&mut out, &self.approver);
        out.push_str(",\"arguments\":");
        out.push_str(self.arguments.as_str());
        push_serialized(&mut out, ",\"edit\":", self.edit.as_ref());
        push_serialized(&mut out, ",\"egress\":", self.egress.as_ref());
        if let Some(host) = &self.host {
            out.push_str(",\"host\":");
            push_string(&mut out, host);
        }
        push_serialized(&mut out, ",\"idempotency\":", self.idempotency.as_ref());
        out.push_str(",\"identity\":");
        push_string_or_null(&mut out, self.identity.as_deref());
        push_serialized(&mut out, ",\"instance\":", self.instance.as_ref());
        if let Some(identity) = &self.instance_identity {
            out.push_str(",\"instance_identity\":");
            push_string(&mut out, identity);
        }
        if let Some(outcome) = self.outcome {
            out.push_str(",\"outcome\":");
            push_string(&mut out, outcome.as_str());
        }
        out.push_str(",\"pin\":");
        push_string_or_null(&mut out, self.pin.as_deref());
        push_serialized(&mut out, ",\"preview\":", self.preview.as_ref());
        out.push_str(",\"reasons\":[");
        for (n, reason) in self.reasons.iter().enumerate() {
            if n > 0 {
                out.push(',');
            }
            push_string(&mut out, reason);
        }
        out.push_str("],\"request\":");
        push_string(&mut out, &self.request);
        out.push_str(",\"server\":");
        push_string(&mut out, &self.server);
        out.push_str(",\"session\":");
        push_string(&mut out, &self.session);
        if let Some(scope) = &self.token_scope {
            out.push_str(",\"token_scope\":");
            push_string(&mut out, scope);
        }
        out.push_str(",\"tool\":");
        push_string(&mut out, &self.tool);
        out.push_str(",\"verdict\":");
        push_string(&mut out, verdict_name(self.verdict));
        out.push('}');
        out
    }
}

// === impl OutcomesRecord ===

impl OutcomesRecord {
    /// The record's body, as [`Record::to_json`] writes it.
    fn to_json(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::with_capacity(16 + 72 * self.outcomes.len());
        out.push_str("{\"outcomes\":[");
        for (n, item) in self.outcomes.iter().enumerate() {
            if n > 0 {
                out.push(',');
            }
            // Writing to a `String` cannot fail.
            let _ = write!(
                out,
                "{{\"attempt\":{},\"call\":{},\"duration_ms\":{},\"outcome\":",
                item.attempt, item.call, item.duration_ms
            );
            push_string(&mut out, item.outcome.as_str());
            out.push('}');
        }
        out.push_str("]}");
        out
    }
}

/// A verdict's name, as serde writes it.
const fn verdict_name(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Allow => "allow",
        Verdict::Ask => "ask",
        Verdict::Deny => "deny",
    }
}

/// Writes `text` as a JSON string, escaped as serde escapes it.
fn push_string(out: &mut String, text: &str) {
    hintgate_policy::pin::push_json_string(out, text);
}

/// [`push_string`], or `null`.
fn push_string_or_null(out: &mut String, text: Option<&str>) {
    match text {
        Some(text) => push_string(out, text),
        None => out.push_str("null"),
    }
}

/// Writes `key` (with its comma) and `value` as serde writes it, when there
/// is a value: the members that are left out when absent, and rare.
fn push_serialized<T: Serialize>(out: &mut String, key: &str, value: Option<&T>) {
    if let Some(value) = value {
        out.push_str(key);
        // Every such member serialises (strings, numbers, lists and structs
        // of those, and JSON text already checked).
        out.push_str(&serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned()));
    }
}

// === impl Arguments ===

impl Arguments {
    /// Arguments from canonical JSON text (as the redactor writes it).
    ///
    /// # Errors
    ///
    /// The parser's error when `text` is not one JSON value.
    pub fn from_canonical(text: String) -> Result<Self, serde_json::Error> {
        RawValue::from_string(text).map(Self)
    }

    /// Arguments from a value, written canonically.
    #[must_use]
    pub fn from_value(value: &Value) -> Self {
        Self::from_canonical(hintgate_policy::pin::canonical_json(value))
            .unwrap_or_else(|_| Self::null())
    }

    /// No arguments: `null`.
    #[must_use]
    pub fn null() -> Self {
        Self(Box::<RawValue>::default())
    }

    /// The canonical text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        self.0.get()
    }

    /// The arguments as a value.
    #[must_use]
    pub fn to_value(&self) -> Value {
        serde_json::from_str(self.0.get()).unwrap_or(Value::Null)
    }
}

impl PartialEq for Arguments {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Arguments {}

// === impl OutcomeCode ===

impl OutcomeCode {
    /// Every code, in the order they are declared.
    pub const ALL: [Self; 16] = [
        Self::Ok,
        Self::ToolError,
        Self::ProtocolError,
        Self::OutputSchemaMismatch,
        Self::Failed,
        Self::FailedRetried,
        Self::Unsent,
        Self::Denied,
        Self::InvalidArguments,
        Self::InputRequired,
        Self::Relayed,
        Self::Cancelled,
        Self::HostGone,
        Self::Shutdown,
        Self::Replayed,
        Self::Interrupted,
    ];

    /// The stable name the audit log keeps.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::ToolError => "tool-error",
            Self::ProtocolError => "protocol-error",
            Self::OutputSchemaMismatch => "output-schema-mismatch",
            Self::Failed => "failed",
            Self::FailedRetried => "failed, retried",
            Self::Unsent => "unsent",
            Self::Denied => "denied",
            Self::InvalidArguments => "invalid-arguments",
            Self::InputRequired => "input-required",
            Self::Relayed => "relayed",
            Self::Cancelled => "cancelled",
            Self::HostGone => "host-gone",
            Self::Shutdown => "shutdown",
            Self::Replayed => "replayed",
            Self::Interrupted => "interrupted",
        }
    }
}

impl std::fmt::Display for OutcomeCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

// === impl RevokeWhy ===

impl RevokeWhy {
    /// Both reasons.
    pub const ALL: [Self; 2] = [Self::Revoked, Self::IdentityChanged];

    /// The stable name the record keeps.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Revoked => "revoked",
            Self::IdentityChanged => "identity-changed",
        }
    }
}

// === impl RollbackFound ===

impl RollbackFound {
    /// Every code.
    pub const ALL: [Self; 6] = [
        Self::CutOff,
        Self::HeadMismatch,
        Self::HeadMissing,
        Self::HeadDamaged,
        Self::HeadUnreadable,
        Self::LogDeleted,
    ];

    /// The code, as `verify` names it.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::CutOff => "cut-off",
            Self::HeadMismatch => "head-mismatch",
            Self::HeadMissing => "head-missing",
            Self::HeadDamaged => "head-damaged",
            Self::HeadUnreadable => "head-unreadable",
            Self::LogDeleted => "log-deleted",
        }
    }
}

// === impl RollbackRecord ===

impl RollbackRecord {
    /// Whether its fields are the ones hintgate writes for its code.
    #[must_use]
    pub const fn fits(&self) -> bool {
        let named = self.head_seq.is_some() && self.head_link.is_some();
        let bare = self.head_seq.is_none() && self.head_link.is_none();
        match self.found {
            RollbackFound::CutOff | RollbackFound::HeadMismatch => named && self.why.is_none(),
            RollbackFound::HeadDamaged | RollbackFound::HeadUnreadable => {
                bare && self.why.is_some()
            }
            RollbackFound::HeadMissing | RollbackFound::LogDeleted => bare && self.why.is_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::entry::{GENESIS, keyed_link, kind_from};
    use crate::key::AuditKey;
    use crate::{AuditLog, AuditSetup, HeadPlace, KeySource, SqliteStore};

    /// Records written by the journal and the store before these types
    /// (a keyed log, under the key of [`golden_key`]), one stored row a
    /// line: `seq`, `at`, `kind`, `call`, `body` (the stored text), `prev`
    /// and `hash`; its last three, call records with a `preview` (shown, and
    /// none) and an `interrupted` outcome, were written since, by these
    /// types, so that a field or code added later is held to its bytes too.
    const GOLDEN: &str = include_str!("../tests/data/golden-records.jsonl");

    fn golden_key() -> AuditKey {
        AuditKey::from_secret([9u8; 32])
    }

    struct Row {
        seq: u64,
        at: i64,
        kind: String,
        call: Option<u64>,
        body: String,
        prev: String,
        hash: String,
    }

    fn golden() -> Vec<Row> {
        GOLDEN
            .lines()
            .map(|line| {
                let value: Value = serde_json::from_str(line).unwrap();
                Row {
                    seq: value["seq"].as_u64().unwrap(),
                    at: value["at"].as_i64().unwrap(),
                    kind: value["kind"].as_str().unwrap().to_owned(),
                    call: value["call"].as_u64(),
                    body: value["body"].as_str().unwrap().to_owned(),
                    prev: value["prev"].as_str().unwrap().to_owned(),
                    hash: value["hash"].as_str().unwrap().to_owned(),
                }
            })
            .collect()
    }

    /// The bytes the keyed chain covers must not change for a log written
    /// by an earlier build: every golden record reads as its type and is
    /// written back byte for byte, and its link, made again from that text,
    /// is the stored one.
    #[test]
    fn golden_records_round_trip_byte_for_byte_and_their_links_hold() {
        let key = golden_key();
        let rows = golden();
        let mut kinds = std::collections::BTreeSet::new();
        let mut prev = GENESIS.to_owned();
        for row in &rows {
            let kind = kind_from(&row.kind).unwrap();
            kinds.insert(row.kind.clone());
            let record = Record::read(kind, row.call, &row.body)
                .unwrap_or_else(|err| panic!("record {}: {err}", row.seq));
            assert_eq!(record.kind(), kind);
            let written = record.to_json();
            assert_eq!(written, row.body, "record {}", row.seq);
            assert_eq!(row.prev, prev, "record {} follows the one before", row.seq);
            assert_eq!(
                keyed_link(
                    &key, &row.prev, row.seq, row.at, &row.kind, row.call, &written
                ),
                row.hash,
                "record {}",
                row.seq
            );
            prev = row.hash.clone();
        }
        // Every kind and every outcome code is in the golden log.
        assert_eq!(
            kinds.into_iter().collect::<Vec<_>>(),
            ["call", "grant", "outcome", "outcomes", "revoke", "rollback"]
        );
        for code in OutcomeCode::ALL {
            assert!(
                rows.iter()
                    .any(|row| row.body.contains(&format!("\"outcome\":\"{code}\""))),
                "{code}"
            );
        }
    }

    /// The golden log, stored as an earlier build stored it, verifies
    /// under its key, and every record reads as its type.
    #[test]
    fn a_golden_log_stored_by_an_earlier_build_still_verifies() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open_with(
            &dir.path().join("state.db"),
            AuditSetup {
                key: KeySource::Given(golden_key()),
                head: HeadPlace::None,
                ..AuditSetup::default()
            },
        )
        .unwrap();
        {
            let connection = store.lock();
            for row in golden() {
                connection
                    .execute(
                        "INSERT INTO audit (seq, at, kind, call_seq, body, prev, hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                        rusqlite::params![
                            i64::try_from(row.seq).unwrap(),
                            row.at,
                            row.kind,
                            row.call.map(|call| i64::try_from(call).unwrap()),
                            row.body,
                            row.prev,
                            row.hash
                        ],
                    )
                    .unwrap();
                if let Some((key, tool)) =
                    crate::standing::index_of(kind_from(&row.kind).unwrap(), &row.body)
                {
                    connection
                        .execute(
                            "INSERT INTO approval_log (seq, kind, server_key, tool) VALUES (?1, ?2, ?3, ?4)",
                            rusqlite::params![i64::try_from(row.seq).unwrap(), row.kind, key, tool],
                        )
                        .unwrap();
                }
            }
        }
        let entries = store.entries(0, 100).unwrap();
        assert_eq!(entries.len(), golden().len());
        for entry in &entries {
            assert_eq!(entry.malformed, None, "record {}", entry.seq);
            assert!(entry.record.is_some(), "record {}", entry.seq);
        }
        let verification = store.verify().unwrap();
        let rolled_back = verification
            .problems
            .iter()
            .all(|problem| problem.code() == "rolled-back");
        assert!(rolled_back, "{:#?}", verification.problems);
        assert_eq!(verification.problems.len(), 6, "the six accepted rollbacks");
        assert_eq!(verification.key_id.as_deref(), Some(golden_key().id()));
    }

    fn call_body() -> Value {
        json!({
            "approver": "gateway", "arguments": {"a": 1}, "identity": null, "pin": null,
            "reasons": ["rule-deny"], "request": "1", "server": "fs", "session": "s",
            "tool": "t", "verdict": "deny",
        })
    }

    fn read(kind: EntryKind, call: Option<u64>, body: &Value) -> Result<Record, NotARecord> {
        Record::read(kind, call, &hintgate_policy::pin::canonical_json(body))
    }

    #[test]
    fn a_record_reads_only_as_hintgate_writes_it() {
        assert!(read(EntryKind::Call, None, &call_body()).is_ok());
        let with = |key: &str, value: Value| {
            let mut body = call_body();
            body[key] = value;
            body
        };
        let without = |key: &str| {
            let mut body = call_body();
            body.as_object_mut().unwrap().remove(key);
            body
        };
        for (what, body) in [
            ("an unknown field", with("extra", json!(1))),
            ("a misspelt field", with("tools", json!("t"))),
            ("a field every build writes, missing", without("pin")),
            (
                "another field every build writes, missing",
                without("identity"),
            ),
            ("a required field missing", without("verdict")),
            (
                "a field left out when absent, written as null",
                with("host", Value::Null),
            ),
            ("an unknown verdict", with("verdict", json!("maybe"))),
            ("an unknown outcome", with("outcome", json!("exploded"))),
            ("an unknown instance", with("instance", json!("half"))),
            ("a number for a string", with("server", json!(1))),
            (
                "an idempotency key with more",
                with("idempotency", json!({"filled": true, "key": "k", "x": 1})),
            ),
        ] {
            assert!(read(EntryKind::Call, None, &body).is_err(), "{what}");
        }
        assert!(
            matches!(
                read(EntryKind::Call, None, &with("host", Value::Null)),
                Err(NotARecord::NotAsWritten { .. })
            ),
            "null where the writer leaves the field out"
        );
        // Not canonical: the same fields, out of order.
        let shuffled = r#"{"verdict":"deny","approver":"gateway","arguments":null,"identity":null,"pin":null,"reasons":[],"request":"1","server":"fs","session":"s","tool":"t"}"#;
        assert!(Record::read(EntryKind::Call, None, shuffled).is_err());
        // Not canonical inside the arguments, which are kept as their text.
        let text = hintgate_policy::pin::canonical_json(&call_body())
            .replace(r#""arguments":{"a":1}"#, r#""arguments":{"b":2,"a":1}"#);
        assert!(text.contains(r#"{"b":2,"a":1}"#));
        assert!(matches!(
            Record::read(EntryKind::Call, None, &text),
            Err(NotARecord::NotAsWritten { .. })
        ));

        let outcome = json!({"attempt": 0, "duration_ms": 3, "outcome": "ok"});
        assert!(read(EntryKind::Outcome, Some(1), &outcome).is_ok());
        assert!(
            read(EntryKind::Outcome, None, &outcome).is_err(),
            "names no call"
        );
        assert!(
            read(EntryKind::Call, Some(1), &call_body()).is_err(),
            "a call names no call"
        );
        assert!(read(EntryKind::Outcome, Some(1), &json!({"outcome": "ok"})).is_err());
        assert!(read(EntryKind::Outcomes, None, &json!({"outcomes": []})).is_err());
        assert!(
            read(
                EntryKind::Outcomes,
                None,
                &json!({"outcomes": [{"attempt": 0, "duration_ms": 1, "outcome": "ok"}]})
            )
            .is_err(),
            "an item that names no call"
        );
        // A record of one kind is not one of another.
        assert!(read(EntryKind::Grant, None, &call_body()).is_err());
    }

    #[test]
    fn every_code_is_written_as_its_stable_name() {
        for code in OutcomeCode::ALL {
            assert_eq!(serde_json::to_value(code).unwrap(), json!(code.as_str()));
        }
        for why in RevokeWhy::ALL {
            assert_eq!(serde_json::to_value(why).unwrap(), json!(why.as_str()));
        }
        for found in RollbackFound::ALL {
            assert_eq!(serde_json::to_value(found).unwrap(), json!(found.as_str()));
        }
    }

    const SCHEMA: &str = include_str!("../../../docs/audit-record.schema.json");

    fn schema() -> Value {
        serde_json::from_str(SCHEMA).unwrap()
    }

    /// A validator for the definition `name` of the schema.
    fn validator(name: &str) -> jsonschema::Validator {
        let mut wrapper = schema();
        wrapper["$ref"] = json!(format!("#/$defs/{name}"));
        wrapper.as_object_mut().unwrap().remove("oneOf");
        jsonschema::validator_for(&wrapper).unwrap()
    }

    fn def(name: &str) -> Value {
        schema()["$defs"][name].clone()
    }

    fn strings(value: &Value) -> std::collections::BTreeSet<String> {
        value
            .as_array()
            .unwrap()
            .iter()
            .map(|item| item.as_str().unwrap().to_owned())
            .collect()
    }

    fn keys(value: &Value) -> std::collections::BTreeSet<String> {
        value.as_object().unwrap().keys().cloned().collect()
    }

    /// An edit record (every field of it is written).
    fn full_edit() -> EditRecord {
        EditRecord {
            by: "alice".into(),
            original: Arguments::null(),
        }
    }

    /// A call record with every field there is, and one with only the
    /// fields always written.
    fn calls() -> (CallRecord, CallRecord) {
        let bare = CallRecord {
            approver: "gateway".into(),
            arguments: Arguments::null(),
            edit: None,
            egress: None,
            host: None,
            idempotency: None,
            identity: None,
            instance: None,
            instance_identity: None,
            outcome: None,
            pin: None,
            preview: None,
            reasons: Vec::new(),
            request: "1".into(),
            server: String::new(),
            session: "s".into(),
            token_scope: None,
            tool: "t".into(),
            verdict: Verdict::Deny,
        };
        let full = CallRecord {
            arguments: Arguments::from_value(&json!({"a": [1, 2.5]})),
            edit: Some(EditRecord {
                by: "alice".into(),
                original: Arguments::from_value(&json!({"a": [1]})),
            }),
            egress: Some(vec!["api.example.com:443".into()]),
            host: Some("ci".into()),
            idempotency: Some(Idempotency {
                filled: true,
                key: "k".into(),
            }),
            identity: Some("sha256:x".into()),
            instance: Some(Instance::ReadOnly),
            instance_identity: Some("sha256:y".into()),
            outcome: Some(OutcomeCode::Denied),
            pin: Some("sha256:z".into()),
            token_scope: Some("docs:read offline_access".into()),
            preview: Some(PreviewRecord {
                digest: "sha256:p".into(),
                kind: Some(PreviewKind::Diff),
                none: None,
                source: PreviewSource::Files,
                text: Some("--- a/f\n+++ b/f\n".into()),
                truncated: true,
            }),
            ..bare.clone()
        };
        (full, bare)
    }

    /// The schema says what the types write: its enums are the types'
    /// codes, and for each kind its properties are the fields a record
    /// with every field writes, and its required ones the fields a record
    /// with none of the optional ones writes.
    #[test]
    fn the_schema_is_the_record_types() {
        let names = |codes: &[&str]| codes.iter().map(|code| (*code).to_owned()).collect();
        assert_eq!(
            strings(&def("outcomeCode")["enum"]),
            names(&OutcomeCode::ALL.map(OutcomeCode::as_str))
        );
        assert_eq!(
            strings(&def("revokeWhy")["enum"]),
            names(&RevokeWhy::ALL.map(RevokeWhy::as_str))
        );
        assert_eq!(
            strings(&def("rollbackFound")["enum"]),
            names(&RollbackFound::ALL.map(RollbackFound::as_str))
        );
        let verdicts = [Verdict::Allow, Verdict::Ask, Verdict::Deny]
            .map(|verdict| serde_json::to_value(verdict).unwrap());
        assert_eq!(strings(&def("verdict")["enum"]), strings(&json!(verdicts)));
        let instances = [Instance::Full, Instance::ReadOnly]
            .map(|instance| serde_json::to_value(instance).unwrap());
        assert_eq!(
            strings(&def("instance")["enum"]),
            strings(&json!(instances))
        );

        let written = |record: &Record| keys(&serde_json::from_str(&record.to_json()).unwrap());
        let (full, bare) = calls();
        let mut call_properties = keys(&def("callFields")["properties"]);
        call_properties.extend(keys(&def("call")["properties"]));
        assert_eq!(call_properties, written(&Record::Call(Box::new(full))));
        assert_eq!(
            strings(&def("callFields")["required"]),
            written(&Record::Call(Box::new(bare)))
        );
        let every = PreviewRecord {
            digest: "sha256:p".into(),
            kind: Some(PreviewKind::Text),
            none: Some("why".into()),
            source: PreviewSource::DryRun,
            text: Some("t".into()),
            truncated: true,
        };
        let edit = &def("callFields")["properties"]["edit"];
        assert_eq!(
            keys(&edit["properties"]),
            keys(&serde_json::to_value(full_edit()).unwrap())
        );
        assert_eq!(
            strings(&edit["required"]),
            keys(&serde_json::to_value(full_edit()).unwrap())
        );
        let preview = &def("callFields")["properties"]["preview"];
        assert_eq!(
            keys(&preview["properties"]),
            keys(&serde_json::to_value(&every).unwrap())
        );
        assert_eq!(
            strings(&preview["properties"]["source"]["enum"]),
            [
                PreviewSource::Files,
                PreviewSource::Command,
                PreviewSource::DryRun
            ]
            .iter()
            .map(|source| source.as_str().to_owned())
            .collect()
        );
        let outcome = Record::Outcome(OutcomeRecord {
            attempt: 0,
            duration_ms: 1,
            outcome: OutcomeCode::Ok,
        });
        assert_eq!(keys(&def("outcomeFields")["properties"]), written(&outcome));
        assert_eq!(
            strings(&def("outcomeFields")["required"]),
            written(&outcome)
        );
        let grant = Record::Grant(GrantRecord {
            digest: "d".into(),
            server: "s".into(),
            server_key: "k".into(),
            tool: "t".into(),
        });
        assert_eq!(keys(&def("grantFields")["properties"]), written(&grant));
        assert_eq!(strings(&def("grantFields")["required"]), written(&grant));
        let revoke = Record::Revoke(RevokeRecord {
            server: "s".into(),
            server_key: "k".into(),
            tool: "t".into(),
            why: RevokeWhy::Revoked,
        });
        assert_eq!(keys(&def("revokeFields")["properties"]), written(&revoke));
        assert_eq!(strings(&def("revokeFields")["required"]), written(&revoke));
        let rollback = Record::Rollback(RollbackRecord {
            found: RollbackFound::HeadMissing,
            head: "h".into(),
            head_link: None,
            head_seq: None,
            log_end: 3,
            why: None,
        });
        assert_eq!(
            keys(&def("rollbackFields")["properties"]),
            written(&rollback)
        );
        assert_eq!(
            strings(&def("rollbackFields")["required"]),
            written(&rollback)
        );
    }

    /// Every golden record's body is valid under its kind's definition,
    /// and so is every record the types write.
    #[test]
    fn golden_records_validate_against_the_schema() {
        for row in golden() {
            let body: Value = serde_json::from_str(&row.body).unwrap();
            let validator = validator(&row.kind);
            let errors: Vec<String> = validator
                .iter_errors(&body)
                .map(|e| e.to_string())
                .collect();
            assert!(errors.is_empty(), "record {}: {errors:?}", row.seq);
        }
        let (full, bare) = calls();
        for call in [full, bare] {
            let body: Value =
                serde_json::from_str(&Record::Call(Box::new(call)).to_json()).unwrap();
            assert!(validator("call").is_valid(&body), "{body}");
        }
    }

    /// What the reader refuses, the schema refuses too: a field unknown,
    /// missing, of another type, or a code hintgate does not write.
    #[test]
    fn the_schema_refuses_what_the_reader_refuses() {
        let call = validator("call");
        let mut body = call_body();
        assert!(call.is_valid(&body));
        for (key, value) in [
            ("extra", json!(1)),
            ("verdict", json!("maybe")),
            ("outcome", json!("exploded")),
            ("instance", json!("half")),
            ("server", json!(1)),
            ("idempotency", json!({"filled": true, "key": "k", "x": 1})),
            ("idempotency", json!({"key": "k"})),
        ] {
            let saved = body.get(key).cloned();
            body[key] = value;
            assert!(!call.is_valid(&body), "{key}: {body}");
            assert!(read(EntryKind::Call, None, &body).is_err(), "{key}: {body}");
            match saved {
                Some(saved) => body[key] = saved,
                None => {
                    body.as_object_mut().unwrap().remove(key);
                }
            }
        }
        for key in ["pin", "identity", "verdict", "arguments"] {
            let mut without = call_body();
            without.as_object_mut().unwrap().remove(key);
            assert!(!call.is_valid(&without), "{key}");
            assert!(read(EntryKind::Call, None, &without).is_err(), "{key}");
        }
        let outcomes = validator("outcomes");
        for wrong in [
            json!({"outcomes": []}),
            json!({"outcomes": [{"attempt": 0, "duration_ms": 1, "outcome": "ok"}]}),
            json!({"outcomes": [{"attempt": 0, "call": 1, "duration_ms": 1, "outcome": "ok", "x": 1}]}),
        ] {
            assert!(!outcomes.is_valid(&wrong), "{wrong}");
            assert!(read(EntryKind::Outcomes, None, &wrong).is_err(), "{wrong}");
        }
        let revoke = validator("revoke");
        let wrong = json!({"server": "s", "server_key": "k", "tool": "t", "why": "because"});
        assert!(!revoke.is_valid(&wrong));
        assert!(read(EntryKind::Revoke, None, &wrong).is_err());
    }

    fn call_record(text: &str, full: bool) -> CallRecord {
        CallRecord {
            approver: text.to_owned(),
            arguments: Arguments::from_canonical(format!(
                "{{\"a\":{}}}",
                serde_json::to_string(text).unwrap()
            ))
            .unwrap(),
            edit: full.then(|| EditRecord {
                by: text.to_owned(),
                original: Arguments::null(),
            }),
            egress: full.then(|| vec![text.to_owned(), "h:443".to_owned()]),
            host: full.then(|| text.to_owned()),
            idempotency: full.then(|| Idempotency {
                filled: true,
                key: text.to_owned(),
            }),
            identity: full.then(|| text.to_owned()),
            instance: full.then_some(Instance::ReadOnly),
            instance_identity: full.then(|| text.to_owned()),
            outcome: full.then_some(OutcomeCode::FailedRetried),
            pin: full.then(|| format!("sha256:{text}")),
            preview: full.then(|| PreviewRecord {
                digest: text.to_owned(),
                kind: Some(PreviewKind::Diff),
                none: None,
                source: PreviewSource::DryRun,
                text: Some(text.to_owned()),
                truncated: true,
            }),
            reasons: if full {
                vec![text.to_owned(), "trusted-server".to_owned()]
            } else {
                Vec::new()
            },
            request: text.to_owned(),
            server: text.to_owned(),
            session: text.to_owned(),
            token_scope: full.then(|| text.to_owned()),
            tool: text.to_owned(),
            verdict: Verdict::Ask,
        }
    }

    /// The call and outcomes records, written member by member, are the
    /// bytes serde writes for them: every member present or absent, every
    /// code, strings with and without escapes.
    #[test]
    fn writes_what_serde_writes() {
        for text in [
            "",
            "plain",
            "a \"quote\"",
            "back\\slash",
            "tab\tnew\nline\u{1}",
            "é ✓ \u{7f}",
        ] {
            for full in [false, true] {
                let record = call_record(text, full);
                assert_eq!(record.to_json(), serde_json::to_string(&record).unwrap());
            }
        }
        for verdict in [Verdict::Allow, Verdict::Ask, Verdict::Deny] {
            let record = CallRecord {
                verdict,
                ..call_record("x", false)
            };
            assert_eq!(record.to_json(), serde_json::to_string(&record).unwrap());
        }
        for outcome in OutcomeCode::ALL {
            let record = CallRecord {
                outcome: Some(outcome),
                ..call_record("x", false)
            };
            assert_eq!(record.to_json(), serde_json::to_string(&record).unwrap());
        }
        let outcomes = OutcomesRecord {
            outcomes: OutcomeCode::ALL
                .iter()
                .enumerate()
                .map(|(n, outcome)| OutcomeItem {
                    attempt: u32::try_from(n).unwrap(),
                    call: u64::MAX - n as u64,
                    duration_ms: n as u64 * 1_000,
                    outcome: *outcome,
                })
                .collect(),
        };
        assert_eq!(
            outcomes.to_json(),
            serde_json::to_string(&outcomes).unwrap()
        );
    }

    proptest::proptest! {
        #[test]
        fn writes_what_serde_writes_for_any_text(text in "\\PC*|[\\x00-\\x7f]*", full: bool) {
            let record = call_record(&text, full);
            proptest::prop_assert_eq!(record.to_json(), serde_json::to_string(&record).unwrap());
        }
    }
}
