//! The decision: allow, ask or deny, with its reasons (design §4.2).
//!
//! [`Policy::decide`] is a total function: it never panics and never returns
//! an error. Anything it cannot decide is a deny with a reason (fail closed).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::config::{Action, HookConfig, Instance, Profile, ServerConfig, ValidConfig};
use crate::pin::PinStatus;
use crate::reason::{Reason, ReasonCode};
use crate::tool::{EffectiveHints, HintAssessment, SandboxProof, Tool, Trust};

/// The outcome of a decision.
///
/// Deliberately not `#[non_exhaustive]`: a new verdict must break every match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// The call runs without asking.
    Allow,
    /// A person must approve the call first.
    Ask,
    /// The call is refused.
    Deny,
}

/// A person's earlier approval of a tool that still stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Remembered {
    /// No standing approval.
    #[default]
    None,
    /// Approved for the rest of this host session.
    Session,
    /// Approved always (persisted).
    Always,
}

/// Which "remember this" choices a prompt may offer (design §4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RememberOffer {
    /// The decision is not an ask.
    NotAsked,
    /// Only "this call": the tool is effectively destructive, or the ask came
    /// from a rule, a changed definition or session taint, which a remembered
    /// approval never answers.
    ThisCallOnly,
    /// "This call", "this tool for the session" or "this tool always".
    UpToAlways,
}

/// What a host session's credentials let it do. Over stdio a host has
/// [`Scope::Write`]; over HTTP, the scopes of its token decide.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scope {
    /// Whatever the configuration and the profile let through.
    #[default]
    Write,
    /// Only tools that are effectively read-only: every other tool is
    /// neither listed nor callable, whatever the rules and the profile say.
    Read,
}

/// What the gateway knows about the host session a call belongs to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
pub struct SessionState {
    /// A tool that returns private data has returned a result in this session.
    pub tainted: bool,
    /// A standing approval of this tool.
    pub remembered: Remembered,
    /// What the session's credentials let it do.
    pub scope: Scope,
}

/// What the user's decision hook (`decide_command`) said about a call
/// (design §4.2 step 3). The gateway asks the hook and hands its answer in;
/// the core never runs anything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum HookAnswer<'a> {
    /// No answer: no hook is configured, or it has not been asked (a
    /// decision without the hook, as the hook itself is told).
    #[default]
    None,
    /// The hook decided, for this reason (its own words).
    Decided {
        /// Allow, ask or deny.
        verdict: Verdict,
        /// Why, as the hook wrote it.
        reason: &'a str,
    },
    /// The hook left the call to the built-in steps.
    Abstain,
    /// The hook failed: it timed out, crashed, or answered something that
    /// is not an answer. What went wrong, in words.
    Failed(&'a str),
}

/// One tool call to decide.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The server's configured name.
    pub server: &'a str,
    /// The tool's current definition.
    pub tool: &'a Tool,
    /// How the definition compares with its pin.
    pub pin: PinStatus,
    /// The host session's state.
    pub session: SessionState,
    /// What a running sandbox proves about the server.
    pub sandbox: SandboxProof,
    /// What the user's decision hook said, when it was asked.
    pub hook: HookAnswer<'a>,
}

/// A verdict and why.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Decision {
    /// Allow, ask or deny.
    pub verdict: Verdict,
    /// The reasons; the first one is what settled the verdict.
    pub reasons: Vec<Reason>,
    /// Which remember choices a prompt may offer.
    pub remember: RememberOffer,
    /// The decision hook's own words, for a [`ReasonCode::Hook`] or
    /// [`ReasonCode::HookFailed`] reason (shown as `hook:NOTE`).
    pub note: Option<String>,
}

/// The key of a refused call's result `_meta` under which the gateway says
/// why it refused ([`DecisionMeta`]).
pub const DECISION_META_KEY: &str = "hintgate/decision";

/// Why the gateway refused a call, as the call's result carries it under
/// `_meta["hintgate/decision"]` ([`DECISION_META_KEY`]): one type for the
/// gateway that writes it and the HTTP host side that reads it, so neither
/// goes by field names of its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionMeta {
    /// Always [`Verdict::Deny`]: the call was refused.
    pub verdict: Verdict,
    /// The decision's reason codes, the first the one that settled it.
    pub reasons: Vec<ReasonCode>,
    /// The decision hook's own words, when its reason is the hook's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_reason: Option<String>,
}

impl DecisionMeta {
    /// What a refusal of a call decided as `decision` says.
    pub fn refused(decision: &Decision) -> Self {
        Self {
            verdict: Verdict::Deny,
            reasons: decision.codes().collect(),
            hook_reason: decision.note.clone(),
        }
    }

    /// The reason that settled it.
    pub fn first_reason(&self) -> Option<ReasonCode> {
        self.reasons.first().copied()
    }
}

/// A validated configuration, ready to decide calls.
#[derive(Debug, Clone)]
pub struct Policy {
    config: ValidConfig,
    /// For each configured server, the indices of the rules whose server glob
    /// matches it, in file order. The servers are known when the policy is
    /// built, so a decision only looks at the rules that can apply.
    server_rules: HashMap<String, Vec<usize>>,
}

/// Where a step left a call: `Final` is the decision; `Ask` may still be
/// turned into a deny by `unattended` (the profile's allow goes the same
/// way, since `unattended` changes only asks).
enum Settled {
    Final(Decision),
    Ask(Decision),
}

/// The first matching rule of each action, by index.
#[derive(Debug, Default, Clone, Copy)]
struct RuleMatches {
    deny: Option<usize>,
    ask: Option<usize>,
    allow: Option<usize>,
}

// === impl Decision ===

impl Decision {
    /// A deny with one reason.
    pub fn deny(code: ReasonCode) -> Self {
        Self {
            verdict: Verdict::Deny,
            reasons: vec![Reason::new(code)],
            remember: RememberOffer::NotAsked,
            note: None,
        }
    }

    /// The deny for a tool whose definition could not be parsed.
    pub fn invalid_definition() -> Self {
        Self::deny(ReasonCode::InvalidDefinition)
    }

    /// The reason codes, in order.
    pub fn codes(&self) -> impl Iterator<Item = ReasonCode> + '_ {
        self.reasons.iter().map(|reason| reason.code)
    }

    /// Whether any reason has this code.
    pub fn has(&self, code: ReasonCode) -> bool {
        self.codes().any(|found| found == code)
    }

    /// The decision hook's words, when `code` is the hook's reason.
    pub fn note_of(&self, code: ReasonCode) -> Option<&str> {
        match code {
            ReasonCode::Hook | ReasonCode::HookFailed => self.note.as_deref(),
            _ => None,
        }
    }

    /// The reasons as the audit log and a refusal write them: each code,
    /// and the hook's reason as `hook:REASON` (`hook-failed:WHAT`).
    pub fn reason_texts(&self) -> impl Iterator<Item = std::borrow::Cow<'_, str>> + '_ {
        self.reasons
            .iter()
            .map(|reason| match self.note_of(reason.code) {
                Some(note) => std::borrow::Cow::Owned(format!("{}:{note}", reason.code)),
                None => std::borrow::Cow::Borrowed(reason.code.as_str()),
            })
    }
}

// === impl Policy ===

impl Policy {
    /// A policy over a validated configuration.
    pub fn new(config: ValidConfig) -> Self {
        let server_rules = config
            .servers
            .keys()
            .map(|server| {
                let rules = config
                    .rules
                    .iter()
                    .enumerate()
                    .filter(|(_, rule)| rule.server.matches(server))
                    .map(|(idx, _)| idx)
                    .collect();
                (server.clone(), rules)
            })
            .collect();
        Self {
            config,
            server_rules,
        }
    }

    /// The configuration this policy decides by.
    pub fn config(&self) -> &ValidConfig {
        &self.config
    }

    /// The configured server of this name.
    pub fn server(&self, name: &str) -> Option<&ServerConfig> {
        self.config.servers.get(name)
    }

    /// The effective hints of a tool of a configured server (design §4.1);
    /// `None` for a server that is not configured.
    pub fn assess(
        &self,
        server: &str,
        tool: &Tool,
        sandbox: SandboxProof,
    ) -> Option<HintAssessment> {
        let server = self.server(server)?;
        Some(assessment_of(server, tool, sandbox))
    }

    /// Which instance of its server a call of `tool` goes to: the
    /// read-only one for a server with a `read_only` table and a tool the
    /// decision treats as read-only (declared so by a trusted server,
    /// proven by a sandbox, or claimed by an untrusted one), whether or not
    /// the credentials are vouched for; the full one otherwise (and for a
    /// server that is not configured).
    ///
    /// A tool that vouched credentials make read-only always goes to the
    /// read-only instance: the proof holds only there.
    pub fn instance(&self, server: &str, tool: &Tool, sandbox: SandboxProof) -> Instance {
        let Some(config) = self.server(server) else {
            return Instance::Full;
        };
        if config.read_only.is_none() {
            return Instance::Full;
        }
        let declared = tool.declared();
        let read = declared.claims_read_only()
            || EffectiveHints::derive(declared, config.trust, sandbox)
                .effective
                .read_only;
        if read {
            Instance::ReadOnly
        } else {
            Instance::Full
        }
    }

    /// Decides one call, following design §4.2 step by step:
    ///
    /// 1. a matching deny rule: deny; a tool that is not effectively
    ///    read-only, for a session whose scope is [`Scope::Read`]: deny;
    ///    and a tool `hide-writes` does not list (not effectively
    ///    read-only, no ask or allow rule): deny;
    /// 2. a changed definition: ask;
    /// 3. the decision hook's answer ([`Call::hook`]): its allow, ask or
    ///    deny decides (but its allow does not lift a `paid` label), a
    ///    failure denies, `abstain` goes on; then (3b) a `paid` label, or
    ///    a matching ask rule: ask;
    /// 4. a matching allow rule: allow;
    /// 5. session taint and an open-world tool: ask;
    /// 6. the profile, where a remembered approval may answer the ask;
    /// 7. `unattended` turns every ask into a deny.
    pub fn decide(&self, call: &Call<'_>) -> Decision {
        let Some(server) = self.server(call.server) else {
            return Decision::deny(ReasonCode::UnknownServer);
        };
        let assessment = assessment_of(server, call.tool, call.sandbox);
        let rules = self.rule_matches(call.server, &call.tool.name);
        let mut decision = match self.before_hook(call, &rules, &assessment, server.trust) {
            Some(Settled::Final(decision)) => return decision,
            Some(Settled::Ask(decision)) => decision,
            None => match self.after_hook(call, &rules, &assessment, server.trust) {
                Settled::Final(decision) => return decision,
                Settled::Ask(decision) => decision,
            },
        };
        if decision.verdict == Verdict::Ask && self.config.gateway.unattended {
            decision.verdict = Verdict::Deny;
            decision
                .reasons
                .insert(0, Reason::new(ReasonCode::Unattended));
            decision.remember = RememberOffer::NotAsked;
        }
        decision
    }

    /// The decision hook a call to `server` goes to, if any: the server's
    /// own `decide_command`, else the gateway's.
    pub fn hook_for(&self, server: &str) -> Option<&HookConfig> {
        self.server(server)?.hook(&self.config.gateway)
    }

    /// Whether the decision hook takes part in this call, and what the
    /// built-in steps decide without it (what the hook is told as
    /// hintgate's verdict so far): `None` when no hook is configured for
    /// the server, or when a step before the hook settles the call (a deny
    /// rule, the session's read scope, a tool `hide-writes` hides, a
    /// changed definition), which the hook cannot override.
    pub fn hook_so_far(&self, call: &Call<'_>) -> Option<Decision> {
        self.hook_for(call.server)?;
        let server = self.server(call.server)?;
        let assessment = assessment_of(server, call.tool, call.sandbox);
        let rules = self.rule_matches(call.server, &call.tool.name);
        if self
            .before_hook(call, &rules, &assessment, server.trust)
            .is_some()
        {
            return None;
        }
        Some(self.decide(&Call {
            hook: HookAnswer::None,
            ..*call
        }))
    }

    /// Steps 1 and 2: what settles a call before the decision hook, which
    /// it cannot override.
    fn before_hook(
        &self,
        call: &Call<'_>,
        rules: &RuleMatches,
        assessment: &HintAssessment,
        trust: Trust,
    ) -> Option<Settled> {
        if let Some(rule) = rules.deny {
            return Some(Settled::Final(Decision {
                verdict: Verdict::Deny,
                reasons: vec![Reason::from_rule(ReasonCode::RuleDeny, rule)],
                remember: RememberOffer::NotAsked,
                note: None,
            }));
        }
        // INVARIANT: a session that may only read never runs a tool that is
        // not effectively read-only: no rule, approval, hook or profile
        // lets it.
        if call.session.scope == Scope::Read && !assessment.effective.read_only {
            return Some(Settled::Final(Decision {
                verdict: Verdict::Deny,
                reasons: vec![
                    Reason::new(ReasonCode::ScopeReadOnly),
                    Reason::new(ReasonCode::NotReadOnly),
                ],
                remember: RememberOffer::NotAsked,
                note: None,
            }));
        }
        // INVARIANT: a tool the host is not shown is refused when it is
        // called anyway, before anything that asks: a changed definition or
        // session taint adds friction to a listed tool, and must not turn
        // `hide-writes`' refusal into a question.
        if self.hidden_by_profile(rules, assessment) {
            return Some(Settled::Final(hide_writes_deny()));
        }
        // INVARIANT: a changed definition is always shown to a person; a
        // hook or a rule cannot wave it through.
        if call.pin == PinStatus::Changed {
            return Some(Settled::Ask(ask(
                Reason::new(ReasonCode::DefinitionChanged),
                assessment,
                trust,
            )));
        }
        None
    }

    /// Steps 3 to 6.
    fn after_hook(
        &self,
        call: &Call<'_>,
        rules: &RuleMatches,
        assessment: &HintAssessment,
        trust: Trust,
    ) -> Settled {
        let paid = self.paid_label(call.server, &call.tool.name);
        // An answer stands only for a server whose calls go to a hook.
        let hook = if self.hook_for(call.server).is_some() {
            call.hook
        } else {
            HookAnswer::None
        };
        match hook {
            HookAnswer::Decided {
                verdict: Verdict::Deny,
                reason,
            } => return Settled::Final(hook_decision(Verdict::Deny, ReasonCode::Hook, reason)),
            // INVARIANT: a hook that fails denies (fail closed).
            HookAnswer::Failed(what) => {
                return Settled::Final(hook_decision(Verdict::Deny, ReasonCode::HookFailed, what));
            }
            HookAnswer::Decided {
                verdict: Verdict::Ask,
                reason,
            } => {
                let mut decision = ask(Reason::new(ReasonCode::Hook), assessment, trust);
                if let Some(label) = paid {
                    decision
                        .reasons
                        .insert(1, Reason::from_rule(ReasonCode::Paid, label));
                }
                decision.note = Some(reason.to_owned());
                return Settled::Ask(decision);
            }
            // INVARIANT: a paid call is asked about every time: the hook's
            // allow does not lift the label (design §4.2 step 3b).
            HookAnswer::Decided {
                verdict: Verdict::Allow,
                reason,
            } => match paid {
                None => {
                    return Settled::Final(hook_decision(Verdict::Allow, ReasonCode::Hook, reason));
                }
                Some(label) => {
                    let mut decision = ask(
                        Reason::from_rule(ReasonCode::Paid, label),
                        assessment,
                        trust,
                    );
                    decision.reasons.insert(1, Reason::new(ReasonCode::Hook));
                    decision.note = Some(reason.to_owned());
                    return Settled::Ask(decision);
                }
            },
            HookAnswer::Abstain | HookAnswer::None => {}
        }
        // INVARIANT: a paid call is asked about every time, and never
        // remembered: no allow rule or profile lets it through.
        if let Some(label) = paid {
            return Settled::Ask(ask(
                Reason::from_rule(ReasonCode::Paid, label),
                assessment,
                trust,
            ));
        }
        if let Some(rule) = rules.ask {
            return Settled::Ask(ask(
                Reason::from_rule(ReasonCode::RuleAsk, rule),
                assessment,
                trust,
            ));
        }
        if let Some(rule) = rules.allow {
            return Settled::Final(Decision {
                verdict: Verdict::Allow,
                reasons: vec![Reason::from_rule(ReasonCode::RuleAllow, rule)],
                remember: RememberOffer::NotAsked,
                note: None,
            });
        }
        if call.session.tainted && assessment.effective.open_world {
            return Settled::Ask(ask(
                Reason::new(ReasonCode::OpenWorldAfterPrivateData),
                assessment,
                trust,
            ));
        }
        Settled::Ask(self.by_profile(assessment, trust, call.session.remembered))
    }

    /// The user's own words for a reason: the `reason` of the rule it came
    /// from, or, for `paid`, of the label.
    pub fn reason_words(&self, reason: &Reason) -> Option<String> {
        let idx = reason.rule?;
        match reason.code {
            ReasonCode::Paid => self.config.labels.get(idx)?.reason.clone(),
            _ => self.config.rules.get(idx)?.reason.clone(),
        }
    }

    /// The first `[[labels]]` entry that marks the tool `paid`, by index.
    pub fn paid_label(&self, server: &str, tool: &str) -> Option<usize> {
        self.config
            .labels
            .iter()
            .position(|label| label.paid && label.matches(server, tool))
    }

    /// Step 6: the profile, and the remembered approvals that answer its ask.
    fn by_profile(
        &self,
        assessment: &HintAssessment,
        trust: Trust,
        remembered: Remembered,
    ) -> Decision {
        let effective = assessment.effective;
        if effective.read_only && self.config.gateway.profile != Profile::AskAll {
            let mut reasons = vec![Reason::new(ReasonCode::ReadOnly)];
            if assessment.sandbox_confined {
                reasons.push(Reason::new(ReasonCode::SandboxConfined));
            }
            if assessment.read_only_credentials {
                reasons.push(Reason::new(ReasonCode::ReadOnlyCredentials));
            }
            return Decision {
                verdict: Verdict::Allow,
                reasons,
                remember: RememberOffer::NotAsked,
                note: None,
            };
        }
        let first = match self.config.gateway.profile {
            // Refused before step 2 already (`hidden_by_profile`).
            Profile::HideWrites => return hide_writes_deny(),
            Profile::AskWrites => ReasonCode::NotReadOnly,
            Profile::AskAll => ReasonCode::ProfileAskAll,
        };
        // INVARIANT: a remembered approval never answers for an effectively
        // destructive tool, which includes every tool of an untrusted server
        // that no sandbox confines.
        if remembered != Remembered::None && !effective.destructive {
            return Decision {
                verdict: Verdict::Allow,
                reasons: vec![Reason::new(ReasonCode::RememberedApproval)],
                remember: RememberOffer::NotAsked,
                note: None,
            };
        }
        let mut decision = ask(Reason::new(first), assessment, trust);
        if !effective.destructive {
            decision.remember = RememberOffer::UpToAlways;
        }
        decision
    }

    /// Whether the tool is listed to the host (design §7): a deny rule hides
    /// it, and so does `hide-writes` for a tool that is not effectively
    /// read-only and that no ask or allow rule lets through.
    pub fn visible(&self, server: &str, tool: &Tool, sandbox: SandboxProof) -> bool {
        self.visible_to(server, tool, sandbox, Scope::Write)
    }

    /// Whether the tool is listed to a host session of this scope: as
    /// [`Policy::visible`], and for [`Scope::Read`] only when the tool is
    /// effectively read-only.
    pub fn visible_to(
        &self,
        server: &str,
        tool: &Tool,
        sandbox: SandboxProof,
        scope: Scope,
    ) -> bool {
        let Some(config) = self.server(server) else {
            return false;
        };
        let rules = self.rule_matches(server, &tool.name);
        if rules.deny.is_some() {
            return false;
        }
        let assessment = assessment_of(config, tool, sandbox);
        if scope == Scope::Read && !assessment.effective.read_only {
            return false;
        }
        !self.hidden_by_profile(&rules, &assessment)
    }

    /// Whether `hide-writes` leaves the tool out of the list: it is not
    /// effectively read-only, and no ask or allow rule lets it through.
    fn hidden_by_profile(&self, rules: &RuleMatches, assessment: &HintAssessment) -> bool {
        self.config.gateway.profile == Profile::HideWrites
            && rules.ask.or(rules.allow).is_none()
            && !assessment.effective.read_only
    }

    /// Whether a failed call may be retried automatically (design §4.5): only
    /// for a trusted server and a tool that is effectively read-only or
    /// idempotent. Everything else reports the failure and is never replayed.
    pub fn retry_eligible(&self, server: &str, tool: &Tool, sandbox: SandboxProof) -> bool {
        self.server(server)
            .is_some_and(|config| config.trust == Trust::Trusted)
            && self.repeatable(server, tool, sandbox)
    }

    /// The tool's half of [`Policy::retry_eligible`]: it is effectively
    /// read-only or idempotent (its hints as the gateway vouches for them,
    /// for a configured server).
    pub fn repeatable(&self, server: &str, tool: &Tool, sandbox: SandboxProof) -> bool {
        self.server(server).is_some_and(|config| {
            let effective = assessment_of(config, tool, sandbox).effective;
            effective.read_only || effective.idempotent
        })
    }

    /// Whether a result of this tool taints the session (design §4.4).
    pub fn taints_session(&self, server: &str, tool: &str) -> bool {
        self.server(server)
            .is_some_and(|config| config.returns_private_data(tool))
    }

    /// Whether data the server returns outside a tool call (a
    /// `resources/read` or `prompts/get` result, a resource update) taints
    /// the session (design §4.4): for a server marked `private_data = true`.
    pub fn data_taints_session(&self, server: &str) -> bool {
        self.server(server)
            .is_some_and(ServerConfig::serves_private_data)
    }

    fn rule_matches(&self, server: &str, tool: &str) -> RuleMatches {
        let mut found = RuleMatches::default();
        let Some(indices) = self.server_rules.get(server) else {
            return found;
        };
        for &idx in indices {
            let Some(rule) = self.config.rules.get(idx) else {
                continue;
            };
            let slot = match rule.action {
                Action::Deny => &mut found.deny,
                Action::Ask => &mut found.ask,
                Action::Allow => &mut found.allow,
            };
            if slot.is_none() && rule.tool.matches(tool) {
                *slot = Some(idx);
            }
        }
        found
    }
}

/// The effective hints of a tool of `server`: its trust, what its sandbox
/// proves and what its vouched read-only credentials prove.
pub(crate) fn assessment_of(
    server: &ServerConfig,
    tool: &Tool,
    sandbox: SandboxProof,
) -> HintAssessment {
    EffectiveHints::derive_with(tool.declared(), server.trust, sandbox, server.credentials())
}

/// The decision hook's own decision, or its failure, with its words.
fn hook_decision(verdict: Verdict, code: ReasonCode, note: &str) -> Decision {
    Decision {
        verdict,
        reasons: vec![Reason::new(code)],
        remember: RememberOffer::NotAsked,
        note: Some(note.to_owned()),
    }
}

/// The refusal of a tool `hide-writes` does not list.
fn hide_writes_deny() -> Decision {
    Decision {
        verdict: Verdict::Deny,
        reasons: vec![
            Reason::new(ReasonCode::ProfileHideWrites),
            Reason::new(ReasonCode::NotReadOnly),
        ],
        remember: RememberOffer::NotAsked,
        note: None,
    }
}

fn ask(first: Reason, assessment: &HintAssessment, trust: Trust) -> Decision {
    let mut reasons = Vec::with_capacity(6);
    reasons.push(first);
    reasons.extend(
        assessment
            .risk_codes(trust)
            .filter(|code| *code != first.code)
            .map(Reason::new),
    );
    Decision {
        verdict: Verdict::Ask,
        reasons,
        remember: RememberOffer::ThisCallOnly,
        note: None,
    }
}
