//! The decision: allow, ask or deny, with its reasons (design §4.2).
//!
//! [`Policy::decide`] is a total function: it never panics and never returns
//! an error. Anything it cannot decide is a deny with a reason (fail closed).

use std::collections::HashMap;

use serde::Serialize;

use crate::config::{Action, Profile, ServerConfig, ValidConfig};
use crate::pin::PinStatus;
use crate::reason::{Reason, ReasonCode};
use crate::tool::{EffectiveHints, HintAssessment, SandboxProof, Tool, Trust};

/// The outcome of a decision.
///
/// Deliberately not `#[non_exhaustive]`: a new verdict must break every match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
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
        Some(EffectiveHints::derive(
            tool.declared(),
            server.trust,
            sandbox,
        ))
    }

    /// Decides one call, following design §4.2 step by step:
    ///
    /// 1. a matching deny rule: deny; a tool that is not effectively
    ///    read-only, for a session whose scope is [`Scope::Read`]: deny;
    ///    and a tool `hide-writes` does not list (not effectively
    ///    read-only, no ask or allow rule): deny;
    /// 2. a changed definition: ask;
    /// 3. a matching ask rule: ask;
    /// 4. a matching allow rule: allow;
    /// 5. session taint and an open-world tool: ask;
    /// 6. the profile, where a remembered approval may answer the ask;
    /// 7. `unattended` turns every ask into a deny.
    pub fn decide(&self, call: &Call<'_>) -> Decision {
        let Some(server) = self.server(call.server) else {
            return Decision::deny(ReasonCode::UnknownServer);
        };
        let assessment = EffectiveHints::derive(call.tool.declared(), server.trust, call.sandbox);
        let rules = self.rule_matches(call.server, &call.tool.name);

        if let Some(rule) = rules.deny {
            return Decision {
                verdict: Verdict::Deny,
                reasons: vec![Reason::from_rule(ReasonCode::RuleDeny, rule)],
                remember: RememberOffer::NotAsked,
            };
        }
        // INVARIANT: a session that may only read never runs a tool that is
        // not effectively read-only: no rule, approval or profile lets it.
        if call.session.scope == Scope::Read && !assessment.effective.read_only {
            return Decision {
                verdict: Verdict::Deny,
                reasons: vec![
                    Reason::new(ReasonCode::ScopeReadOnly),
                    Reason::new(ReasonCode::NotReadOnly),
                ],
                remember: RememberOffer::NotAsked,
            };
        }
        // INVARIANT: a tool the host is not shown is refused when it is
        // called anyway, before anything that asks: a changed definition or
        // session taint adds friction to a listed tool, and must not turn
        // `hide-writes`' refusal into a question.
        if self.hidden_by_profile(&rules, &assessment) {
            return hide_writes_deny();
        }
        let mut decision = if call.pin == PinStatus::Changed {
            ask(
                Reason::new(ReasonCode::DefinitionChanged),
                &assessment,
                server.trust,
            )
        } else if let Some(rule) = rules.ask {
            ask(
                Reason::from_rule(ReasonCode::RuleAsk, rule),
                &assessment,
                server.trust,
            )
        } else if let Some(rule) = rules.allow {
            return Decision {
                verdict: Verdict::Allow,
                reasons: vec![Reason::from_rule(ReasonCode::RuleAllow, rule)],
                remember: RememberOffer::NotAsked,
            };
        } else if call.session.tainted && assessment.effective.open_world {
            ask(
                Reason::new(ReasonCode::OpenWorldAfterPrivateData),
                &assessment,
                server.trust,
            )
        } else {
            self.by_profile(&assessment, server.trust, call.session.remembered)
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
            return Decision {
                verdict: Verdict::Allow,
                reasons,
                remember: RememberOffer::NotAsked,
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
        let assessment = EffectiveHints::derive(tool.declared(), config.trust, sandbox);
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
        let Some(config) = self.server(server) else {
            return false;
        };
        let effective = EffectiveHints::derive(tool.declared(), config.trust, sandbox).effective;
        config.trust == Trust::Trusted && (effective.read_only || effective.idempotent)
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

/// The refusal of a tool `hide-writes` does not list.
fn hide_writes_deny() -> Decision {
    Decision {
        verdict: Verdict::Deny,
        reasons: vec![
            Reason::new(ReasonCode::ProfileHideWrites),
            Reason::new(ReasonCode::NotReadOnly),
        ],
        remember: RememberOffer::NotAsked,
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
    }
}
