//! Reasons: the stable codes that explain every decision.
//!
//! The same codes appear in `hintgate explain`, the prompt a human sees and the
//! audit log. They are part of the public interface: never rename a shipped code.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why a decision came out as it did. Each has a stable kebab-case code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ReasonCode {
    /// A `deny` rule in the configuration matched.
    RuleDeny,
    /// The tool's definition changed since it was approved.
    DefinitionChanged,
    /// An `ask` rule in the configuration matched.
    RuleAsk,
    /// An `allow` rule in the configuration matched.
    RuleAllow,
    /// The session has read private data and this tool can reach the open world.
    OpenWorldAfterPrivateData,
    /// The tool is effectively read-only, so the profile lets it run.
    ReadOnly,
    /// The tool is not effectively read-only.
    NotReadOnly,
    /// The profile `hide-writes` refuses every tool that is not read-only.
    ProfileHideWrites,
    /// The profile `ask-all` asks before every call.
    ProfileAskAll,
    /// A person already approved this tool for the session, or always.
    RememberedApproval,
    /// Nobody can answer an ask (`unattended`), so it is a deny.
    Unattended,
    /// The server is not trusted: its annotations are claims, not facts.
    UntrustedServer,
    /// The server declared none of the four hints.
    MissingAnnotations,
    /// The declared hints contradict each other.
    ContradictoryAnnotations,
    /// The tool may destroy or overwrite data.
    Destructive,
    /// The tool may reach outside this machine.
    OpenWorld,
    /// A sandbox proves a property whatever the server says.
    SandboxConfined,
    /// The tool claims to only read and runs on the server's read-only
    /// instance, whose credentials the configuration vouches can change
    /// nothing (`vouch = true`): a write it makes is refused where the
    /// credentials are checked, whatever the server claims.
    ReadOnlyCredentials,
    /// The server is not in the configuration.
    UnknownServer,
    /// The server sent a definition that is not a valid tool.
    InvalidDefinition,
    /// Something went wrong while deciding; the gateway fails closed.
    InternalError,
    /// The host called a tool that no server lists (given by the gateway).
    UnknownTool,
    /// The tool's server could not be started (given by the gateway).
    ServerUnavailable,
    /// A 2026-07-28 host returned a `requestState` the gateway cannot use
    /// (given by the gateway).
    InvalidRequestState,
    /// The host's `tools/call` cannot be decided on as sent: it repeats a
    /// key, has no tool name, or came without an id (given by the gateway).
    MalformedRequest,
    /// The host cancelled the call, or went away, before it was decided or
    /// sent (given by the gateway).
    Cancelled,
    /// The tool's name is not plain: empty, too long, or with characters
    /// beyond `A-Z a-z 0-9 _ - .` (given by the gateway).
    InvalidToolName,
    /// The name could mean more than one tool: two servers' prefixes fit it,
    /// or the server lists tools whose names look the same (given by the
    /// gateway).
    AmbiguousToolName,
    /// The gateway shut down before the call was sent (given by the
    /// gateway).
    Shutdown,
    /// The host's credentials let it only read (scope `read`), and the tool
    /// is not effectively read-only: it is neither listed nor callable.
    ScopeReadOnly,
    /// The user's decision hook (`decide_command`) decided: allow, ask or
    /// deny, with its own reason (shown as `hook:REASON`).
    Hook,
    /// The user's decision hook failed (it timed out, crashed, or answered
    /// something that is not an answer), so the call is refused: a hook
    /// fails closed.
    HookFailed,
    /// A `[[labels]]` entry marks the tool `paid`: every call is asked
    /// about, never remembered, never allowed unasked.
    Paid,
    /// The call's idempotency key was used before: with other arguments,
    /// by another host, by a call still running, or by one whose outcome is
    /// unknown; it is not sent (given by the gateway).
    IdempotencyConflict,
    /// The server's read-only instance does not list the tool with the
    /// definition decided on (the full instance's), so the call is not sent
    /// to it (given by the gateway).
    ReadOnlyInstanceDiffers,
}

/// One reason of a decision: a code, and the rule it came from where one did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reason {
    /// The stable code.
    pub code: ReasonCode,
    /// Index into the configuration's `[[rules]]` for the rule reasons.
    pub rule: Option<usize>,
}

// === impl ReasonCode ===

impl ReasonCode {
    /// Every code, in the order the documentation lists them.
    pub const ALL: [Self; 35] = [
        Self::RuleDeny,
        Self::DefinitionChanged,
        Self::RuleAsk,
        Self::RuleAllow,
        Self::OpenWorldAfterPrivateData,
        Self::ReadOnly,
        Self::NotReadOnly,
        Self::ProfileHideWrites,
        Self::ProfileAskAll,
        Self::RememberedApproval,
        Self::Unattended,
        Self::UntrustedServer,
        Self::MissingAnnotations,
        Self::ContradictoryAnnotations,
        Self::Destructive,
        Self::OpenWorld,
        Self::SandboxConfined,
        Self::ReadOnlyCredentials,
        Self::UnknownServer,
        Self::InvalidDefinition,
        Self::InternalError,
        Self::UnknownTool,
        Self::ServerUnavailable,
        Self::InvalidRequestState,
        Self::MalformedRequest,
        Self::Cancelled,
        Self::InvalidToolName,
        Self::AmbiguousToolName,
        Self::Shutdown,
        Self::ScopeReadOnly,
        Self::Hook,
        Self::HookFailed,
        Self::Paid,
        Self::IdempotencyConflict,
        Self::ReadOnlyInstanceDiffers,
    ];

    /// The stable kebab-case code.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::RuleDeny => "rule-deny",
            Self::DefinitionChanged => "definition-changed",
            Self::RuleAsk => "rule-ask",
            Self::RuleAllow => "rule-allow",
            Self::OpenWorldAfterPrivateData => "open-world-after-private-data",
            Self::ReadOnly => "read-only",
            Self::NotReadOnly => "not-read-only",
            Self::ProfileHideWrites => "profile-hide-writes",
            Self::ProfileAskAll => "profile-ask-all",
            Self::RememberedApproval => "remembered-approval",
            Self::Unattended => "unattended",
            Self::UntrustedServer => "untrusted-server",
            Self::MissingAnnotations => "missing-annotations",
            Self::ContradictoryAnnotations => "contradictory-annotations",
            Self::Destructive => "destructive",
            Self::OpenWorld => "open-world",
            Self::SandboxConfined => "sandbox-confined",
            Self::ReadOnlyCredentials => "read-only-credentials",
            Self::UnknownServer => "unknown-server",
            Self::InvalidDefinition => "invalid-definition",
            Self::InternalError => "internal-error",
            Self::UnknownTool => "unknown-tool",
            Self::ServerUnavailable => "server-unavailable",
            Self::InvalidRequestState => "invalid-request-state",
            Self::MalformedRequest => "malformed-request",
            Self::Cancelled => "cancelled",
            Self::InvalidToolName => "invalid-tool-name",
            Self::AmbiguousToolName => "ambiguous-tool-name",
            Self::Shutdown => "shutdown",
            Self::ScopeReadOnly => "scope-read-only",
            Self::Hook => "hook",
            Self::HookFailed => "hook-failed",
            Self::Paid => "paid",
            Self::IdempotencyConflict => "idempotency-conflict",
            Self::ReadOnlyInstanceDiffers => "read-only-instance-differs",
        }
    }

    /// The code in words, for a person.
    pub const fn description(self) -> &'static str {
        match self {
            Self::RuleDeny => "a deny rule in the configuration matches this tool",
            Self::DefinitionChanged => "the tool's definition changed since it was approved",
            Self::RuleAsk => "an ask rule in the configuration matches this tool",
            Self::RuleAllow => "an allow rule in the configuration matches this tool",
            Self::OpenWorldAfterPrivateData => {
                "this session has read private data and this tool can reach outside this machine"
            }
            Self::ReadOnly => "the tool only reads",
            Self::NotReadOnly => "the tool may change things",
            Self::ProfileHideWrites => {
                "the profile `hide-writes` refuses tools that may change things"
            }
            Self::ProfileAskAll => "the profile `ask-all` asks before every call",
            Self::RememberedApproval => "a person already approved this tool",
            Self::Unattended => {
                "nobody is there to answer (`unattended`), so asking means refusing"
            }
            Self::UntrustedServer => {
                "the server is not trusted, so its annotations are only claims"
            }
            Self::MissingAnnotations => "the tool declares no annotations",
            Self::ContradictoryAnnotations => {
                "the tool's annotations contradict each other (read-only and destructive)"
            }
            Self::Destructive => "the tool may delete or overwrite data",
            Self::OpenWorld => "the tool may reach outside this machine",
            Self::SandboxConfined => "a sandbox enforces what the tool can reach",
            Self::ReadOnlyCredentials => {
                "the tool runs with read-only credentials the configuration vouches for, which refuse any write"
            }
            Self::UnknownServer => "the server is not in the configuration",
            Self::InvalidDefinition => "the server sent a tool definition that is not valid",
            Self::InternalError => "an internal problem occurred while deciding",
            Self::UnknownTool => "no server lists a tool of this name",
            Self::ServerUnavailable => "the tool's server could not be started",
            Self::InvalidRequestState => {
                "the returned request state is altered, used, expired or for another call"
            }
            Self::MalformedRequest => {
                "the request cannot be decided on as sent (a repeated key, no tool name, or no id)"
            }
            Self::Cancelled => "the host cancelled the call, or went away, before it was sent",
            Self::InvalidToolName => {
                "the tool's name is empty, too long, or holds characters beyond `A-Z a-z 0-9 _ - .`"
            }
            Self::AmbiguousToolName => {
                "the name could mean more than one tool (two servers, or tools whose names look the same)"
            }
            Self::Shutdown => "the gateway shut down before the call was sent",
            Self::ScopeReadOnly => {
                "the host's credentials only let it read (scope `read`), and this tool may change things"
            }
            Self::Hook => "the decision hook (`decide_command`) decided",
            Self::HookFailed => {
                "the decision hook (`decide_command`) failed, so the call is refused"
            }
            Self::Paid => "a label marks this tool as paid: every call is asked about",
            Self::IdempotencyConflict => {
                "the call's idempotency key was used before, and the call must not run twice"
            }
            Self::ReadOnlyInstanceDiffers => {
                "the server's read-only instance does not list this tool as the full instance does"
            }
        }
    }

    /// Parses a kebab-case code.
    pub fn parse(code: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|candidate| candidate.as_str() == code)
    }
}

impl std::fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ReasonCode {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// A code read back by its stable name; a name no code has is an error.
impl<'de> Deserialize<'de> for ReasonCode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        Self::parse(&name)
            .ok_or_else(|| serde::de::Error::custom(format_args!("`{name}` is not a reason code")))
    }
}

// === impl Reason ===

impl Reason {
    /// A reason with no rule attached.
    pub const fn new(code: ReasonCode) -> Self {
        Self { code, rule: None }
    }

    /// A reason that names the rule it came from.
    pub const fn from_rule(code: ReasonCode, rule: usize) -> Self {
        Self {
            code,
            rule: Some(rule),
        }
    }
}

impl From<ReasonCode> for Reason {
    fn from(code: ReasonCode) -> Self {
        Self::new(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn codes_are_unique_kebab_case_and_parse_back() {
        let codes: BTreeSet<_> = ReasonCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(codes.len(), ReasonCode::ALL.len());
        for code in ReasonCode::ALL {
            let text = code.as_str();
            assert!(
                text.chars().all(|c| c.is_ascii_lowercase() || c == '-'),
                "{text}"
            );
            assert_eq!(ReasonCode::parse(text), Some(code));
        }
    }
}
