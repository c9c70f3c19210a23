//! Everything the policy concludes about one call, in one value.
//!
//! `hintgate explain` prints an [`Explanation`]; the policy corpus checks
//! them. The gateway calls the parts it needs one by one.

use serde::Serialize;
use serde_json::Value;

use crate::config::{Instance, ServerConfig};
use crate::decide::{Call, Decision, HookAnswer, Policy, RememberOffer, SessionState, Verdict};
use crate::pin::{FieldChange, PinDigest, PinStatus, diff};
use crate::prompt::PromptInput;
use crate::reason::ReasonCode;
use crate::sanitize::{Removed, sanitize};
use crate::tool::{DeclaredHints, EffectiveHints, SandboxProof, Tool, Trust};

/// What to explain: a server, a tool definition as the server sent it, and
/// the state of the call.
#[derive(Debug, Clone, Copy)]
pub struct ExplainInput<'a> {
    /// The server's configured name.
    pub server: &'a str,
    /// The tool definition exactly as it appeared in `tools/list`.
    pub tool: &'a Value,
    /// The call's arguments.
    pub arguments: Option<&'a Value>,
    /// The approved definition, when there is one; it decides the pin status
    /// and the diff.
    pub pinned: Option<&'a Tool>,
    /// The pin status to assume when there is no approved definition to
    /// compare with.
    pub pin: PinStatus,
    /// The host session's state.
    pub session: SessionState,
    /// What a running sandbox proves.
    pub sandbox: SandboxProof,
    /// What the decision hook answered, when the caller asked it.
    pub hook: HookAnswer<'a>,
}

/// The decision on a call and everything that went into it.
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    /// The server's configured name.
    pub server: String,
    /// Whether the configuration trusts it.
    pub trust: Trust,
    /// The tool's raw name (empty when the definition has none).
    pub tool: String,
    /// The name a person is shown: title, annotations.title or name.
    pub display_name: String,
    /// Allow, ask or deny.
    pub verdict: Verdict,
    /// The reason codes; the first settled the verdict.
    pub reasons: Vec<ReasonCode>,
    /// The reasons in words, with the rule each came from.
    pub reason_details: Vec<ReasonDetail>,
    /// The hints as declared (`null` where absent).
    pub declared: DeclaredHints,
    /// The hints the policy acted on.
    pub effective: EffectiveHints,
    /// Whether the tool is listed to the host.
    pub visible: bool,
    /// Which remember choices a prompt offers.
    pub remember: RememberOffer,
    /// Whether a failed call may be retried automatically.
    pub retry_eligible: bool,
    /// Which instance of its server the call goes to; absent for a server
    /// without a read-only instance (every call goes to its only one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<Instance>,
    /// What the proofs the decision relies on do not cover, in words.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub caveats: Vec<String>,
    /// How the definition compares with its pin.
    pub pin: PinStatus,
    /// The pin digest of the definition (absent for an invalid definition).
    pub pin_digest: Option<PinDigest>,
    /// What changed since the approved definition.
    pub changes: Vec<FieldChange>,
    /// What the sanitizer removed from the title and description.
    pub sanitized: SanitizeReport,
    /// The text a person would be asked with; present when the verdict is ask.
    pub prompt: Option<String>,
    /// Why the definition is invalid, when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invalid_definition: Option<String>,
    /// What the decision hook was asked and answered, when the caller ran
    /// it (`hintgate explain` does).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hook: Option<HookReport>,
}

/// The decision hook's part in an explanation.
#[derive(Debug, Clone, Serialize)]
pub struct HookReport {
    /// The program and its arguments.
    pub command: Vec<String>,
    /// The question, as sent.
    pub question: Value,
    /// The line it answered, or what went wrong instead.
    pub answer: String,
}

/// One reason, in words.
#[derive(Debug, Clone, Serialize)]
pub struct ReasonDetail {
    /// The stable code.
    pub code: ReasonCode,
    /// What it means.
    pub description: &'static str,
    /// The index of the rule it came from, counted from 0 in file order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<usize>,
    /// That rule's `reason`, when it has one (for `paid`, the label's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule_reason: Option<String>,
    /// The decision hook's own words, for `hook` and `hook-failed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// What the sanitizer removed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SanitizeReport {
    /// From the title (top-level or annotations).
    pub title: Vec<(Removed, usize)>,
    /// From the description.
    pub description: Vec<(Removed, usize)>,
}

/// Explains one call. Total: an invalid definition or an unknown server is a
/// deny with its reason.
pub fn explain(policy: &Policy, input: &ExplainInput<'_>) -> Explanation {
    let trust = policy
        .server(input.server)
        .map_or(Trust::Untrusted, |server| server.trust);
    let tool = match Tool::from_value(input.tool.clone()) {
        Ok(tool) => tool,
        Err(error) => return invalid(input, trust, error.to_string()),
    };
    let pin = match input.pinned {
        Some(pinned) => PinStatus::compare(Some(PinDigest::of(pinned)), &tool),
        None => input.pin,
    };
    let changes = input
        .pinned
        .map(|pinned| diff(pinned, &tool))
        .unwrap_or_default();
    let call = Call {
        server: input.server,
        tool: &tool,
        pin,
        session: input.session,
        sandbox: input.sandbox,
        hook: input.hook,
    };
    let decision = policy.decide(&call);
    let effective = policy
        .assess(input.server, &tool, input.sandbox)
        .map_or(EffectiveHints::CAUTIOUS, |assessment| assessment.effective);
    let prompt = (decision.verdict == Verdict::Ask).then(|| {
        policy.prompt(&PromptInput {
            previous_identity: None,
            server: input.server,
            identity: None,
            tool: &tool,
            arguments: input.arguments,
            decision: &decision,
            sandbox: input.sandbox,
            changes: &changes,
            token_scope: None,
            preview: None,
        })
    });
    let title = tool
        .title
        .as_deref()
        .or_else(|| tool.annotations.as_ref().and_then(|a| a.title.as_deref()));
    Explanation {
        server: input.server.to_owned(),
        trust,
        tool: tool.name.clone(),
        display_name: sanitize(tool.display_name()).text,
        verdict: decision.verdict,
        reasons: decision.codes().collect(),
        reason_details: details(policy, &decision),
        declared: tool.declared(),
        effective,
        visible: policy.visible_to(input.server, &tool, input.sandbox, input.session.scope),
        remember: decision.remember,
        retry_eligible: policy.retry_eligible(input.server, &tool, input.sandbox),
        instance: policy
            .server(input.server)
            .filter(|server| server.read_only.is_some())
            .map(|_| policy.instance(input.server, &tool, input.sandbox)),
        caveats: caveats(policy, input.server),
        pin,
        pin_digest: Some(PinDigest::of(&tool)),
        changes,
        sanitized: SanitizeReport {
            title: title.map(|text| sanitize(text).removed).unwrap_or_default(),
            description: tool
                .description
                .as_deref()
                .map(|text| sanitize(text).removed)
                .unwrap_or_default(),
        },
        prompt,
        invalid_definition: None,
        hook: None,
    }
}

fn invalid(input: &ExplainInput<'_>, trust: Trust, error: String) -> Explanation {
    let decision = Decision::invalid_definition();
    let name = input
        .tool
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    Explanation {
        server: input.server.to_owned(),
        trust,
        display_name: sanitize(&name).text,
        tool: name,
        verdict: decision.verdict,
        reasons: decision.codes().collect(),
        reason_details: decision
            .reasons
            .iter()
            .map(|reason| ReasonDetail {
                code: reason.code,
                description: reason.code.description(),
                rule: None,
                rule_reason: None,
                note: None,
            })
            .collect(),
        declared: DeclaredHints::default(),
        effective: EffectiveHints::CAUTIOUS,
        visible: false,
        remember: RememberOffer::NotAsked,
        retry_eligible: false,
        instance: None,
        caveats: Vec::new(),
        pin: input.pin,
        pin_digest: None,
        changes: Vec::new(),
        sanitized: SanitizeReport::default(),
        prompt: None,
        invalid_definition: Some(error),
        hook: None,
    }
}

/// What the proofs of a server's configuration do not cover: vouched
/// read-only credentials guard what they reach (a database, an API), and
/// nothing else; a stdio server without a sandbox can still write the
/// files of this machine ([`ServerConfig::unsandboxed_vouch`], which
/// `config check` warns about in the same words).
fn caveats(policy: &Policy, server: &str) -> Vec<String> {
    policy
        .server(server)
        .and_then(ServerConfig::unsandboxed_vouch)
        .map(|vouch| format!("{}; {}", vouch.message, vouch.help))
        .into_iter()
        .collect()
}

fn details(policy: &Policy, decision: &Decision) -> Vec<ReasonDetail> {
    decision
        .reasons
        .iter()
        .map(|reason| ReasonDetail {
            code: reason.code,
            description: reason.code.description(),
            rule: reason.rule,
            rule_reason: policy.reason_words(reason),
            note: decision.note_of(reason.code).map(str::to_owned),
        })
        .collect()
}
