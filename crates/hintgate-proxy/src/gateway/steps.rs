//! The pipeline's decisions as plain functions over what they need: no
//! gateway, no IO, so each is tested alone. `pipeline` reads the facts
//! once per call, calls these, and acts on what they return.
//!
//! - [`SessionFacts`] and [`CallFacts`]: what the gateway knows of a call's
//!   session and of the definition it is decided on, read once per call;
//! - [`decide`]: step 3, the policy's decision, with the decision hook's
//!   answer where it takes part (or the hook must be asked first);
//! - [`check_arguments`]: step 4, the arguments against the input schema;
//! - [`check_output`]: a result's structured content against the output
//!   schema;
//! - [`approval`]: step 5, whether the call goes on, is asked about, or
//!   carries a person's answer.

use hintgate_policy::config::Instance;
use hintgate_policy::decide::{Call, Decision, HookAnswer, Policy, SessionState, Verdict};
use hintgate_policy::pin::{PinDigest, PinStatus};
use hintgate_policy::tool::{SandboxProof, Tool};
use serde_json::Value;

use super::call::HookVerdict;
use super::request::SessionId;
use super::session::HostSession;

/// How often one call is asked about before the gateway gives up on a call
/// whose state keeps changing while the hook answers (its definition, the
/// session's taint): then it is refused as a hook failure.
pub(crate) const MAX_HOOK_ASKS: u32 = 4;

/// What the pipeline reads of a call's host session, once per call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SessionFacts {
    /// The session.
    pub id: SessionId,
    /// The host speaks the 2026-07-28 era.
    pub modern: bool,
    /// A private-data result has reached the session (design §4.4).
    pub tainted: bool,
    /// What the session's credentials let it do.
    pub scope: hintgate_policy::decide::Scope,
}

impl SessionFacts {
    /// The facts of session `id` (a session that is gone has none: legacy,
    /// untainted, read scope).
    pub fn of(id: SessionId, session: Option<&HostSession>) -> Self {
        session.map_or(
            Self {
                id,
                modern: false,
                tainted: false,
                scope: hintgate_policy::decide::Scope::Read,
            },
            |host| Self {
                id,
                modern: host.modern(),
                tainted: host.tainted,
                scope: host.scope,
            },
        )
    }
}

/// What a call is decided on, besides the definition itself, read once per
/// call: the definition's pin digest and how it compares with its pin, the
/// session's taint, scope and standing approval of the tool, what the
/// server's sandbox proves, and the instance the call goes to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallFacts {
    /// The pin digest of the definition decided on.
    pub digest: PinDigest,
    /// How that definition compares with its pin.
    pub pin: PinStatus,
    /// The session's state for this tool.
    pub session: SessionState,
    /// What the server's running sandbox proves.
    pub sandbox: SandboxProof,
    /// Which instance of its server the call goes to.
    pub instance: Instance,
}

impl CallFacts {
    /// The call as the policy decides it (the hook not asked).
    pub fn call<'a>(&self, server: &'a str, tool: &'a Tool) -> Call<'a> {
        Call {
            server,
            tool,
            pin: self.pin,
            session: self.session,
            sandbox: self.sandbox,
            hook: HookAnswer::None,
        }
    }
}

/// Step 3's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decided {
    /// The decision.
    Decision(Decision),
    /// The decision hook must be asked first; what hintgate decides
    /// without it.
    AskHook(Decision),
}

/// What the call is refused with when the hook keeps being asked.
pub(crate) const HOOK_KEEPS_CHANGING: &str =
    "the call changed each time the decision hook was asked about it";

/// Step 3: the decision on `call` (of the definition `digest`). Where the
/// decision hook takes part, its answer counts only for the state it was
/// given for (the same definition, and the same decision so far); else
/// the hook is asked, at most [`MAX_HOOK_ASKS`] times for one call.
pub(crate) fn decide(
    policy: &Policy,
    call: Call<'_>,
    digest: PinDigest,
    hook: Option<&HookVerdict>,
    hook_asks: u32,
) -> Decided {
    let Some(so_far) = policy.hook_so_far(&call) else {
        return Decided::Decision(policy.decide(&call));
    };
    // An answer stands for the state it was given for.
    let answered = hook.filter(|given| {
        given.digest == digest
            && given.so_far.0 == so_far.verdict
            && given.so_far.1.iter().copied().eq(so_far.codes())
    });
    match answered {
        Some(given) => Decided::Decision(policy.decide(&Call {
            hook: given.answer.as_answer(),
            ..call
        })),
        None if hook_asks >= MAX_HOOK_ASKS => Decided::Decision(policy.decide(&Call {
            hook: HookAnswer::Failed(HOOK_KEEPS_CHANGING),
            ..call
        })),
        None => Decided::AskHook(so_far),
    }
}

/// Step 4: what is wrong with `arguments` by the tool's input schema (at
/// most five problems, each with where it is), if anything.
///
/// # Errors
///
/// The problems, when the arguments do not match.
pub(crate) fn check_arguments(
    validator: &jsonschema::Validator,
    arguments: &Value,
) -> Result<(), Vec<String>> {
    if validator.is_valid(arguments) {
        return Ok(());
    }
    Err(validator
        .iter_errors(arguments)
        .take(5)
        .map(|err| format!("{err} (at `{}`)", err.instance_path()))
        .collect())
}

/// A result's `structuredContent` (as JSON text) against the tool's output
/// schema: what is wrong with it (at most five problems), if anything.
/// Content that is not JSON is checked as `null`.
///
/// # Errors
///
/// The problems, when the content does not match.
pub(crate) fn check_output(
    validator: &jsonschema::Validator,
    structured: &str,
) -> Result<(), Vec<String>> {
    let structured: Value = serde_json::from_str(structured).unwrap_or(Value::Null);
    let problems: Vec<String> = validator
        .iter_errors(&structured)
        .take(5)
        .map(|err| err.to_string())
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// Step 5's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Approval {
    /// A person approved this very definition: the call goes on.
    Approved,
    /// A 2026-07-28 host's retry carries the person's answer to the
    /// gateway's question: the answer is opened, and settles the call.
    CarriesAnswer,
    /// A person must be asked.
    Ask,
    /// The policy let it through.
    Policy,
}

/// Step 5: whether a person must answer for a call decided `verdict` on
/// the definition `digest`, which a person approved for `approved`; a
/// 2026-07-28 host's retry may carry a person's answer
/// (`carries_answer`).
pub(crate) fn approval(
    verdict: Verdict,
    digest: Option<PinDigest>,
    approved: Option<PinDigest>,
    carries_answer: bool,
) -> Approval {
    if approved.is_some() && approved == digest {
        return Approval::Approved;
    }
    if carries_answer {
        return Approval::CarriesAnswer;
    }
    match verdict {
        Verdict::Ask => Approval::Ask,
        Verdict::Allow | Verdict::Deny => Approval::Policy,
    }
}

/// Step 5, for a call a person approved: whether the approval still
/// stands for what the call will do. It was given with the preview whose
/// digest is `shown`; `now` is the file preview computed again just before
/// the send (`None` where none is computed again: no preview, or one from a
/// previewer command or a dry run, which is not run twice). It stands only
/// when the two agree; a preview can only ask again, never let a call
/// through that its decision would not.
pub(crate) fn preview_stands(shown: Option<&str>, now: Option<&str>) -> bool {
    match now {
        None => true,
        Some(now) => shown == Some(now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hintgate_policy::config::parse_str;
    use hintgate_policy::decide::{Remembered, Scope};
    use hintgate_policy::hook::OwnedAnswer;
    use hintgate_policy::reason::ReasonCode;
    use serde_json::json;

    fn policy(extra: &str) -> Policy {
        let text = format!("[servers.fx]\ncommand = \"x\"\n{extra}");
        let (config, diags) = parse_str(&text);
        Policy::new(config.unwrap_or_else(|| panic!("{diags:?}")))
    }

    fn tool(read_only: bool) -> Tool {
        Tool::from_value(json!({
            "name": "read",
            "inputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": read_only},
        }))
        .unwrap()
    }

    fn facts(tool: &Tool, tainted: bool, scope: Scope) -> CallFacts {
        CallFacts {
            digest: PinDigest::of(tool),
            pin: PinStatus::Unchanged,
            session: SessionState {
                tainted,
                remembered: Remembered::None,
                scope,
            },
            sandbox: SandboxProof::default(),
            instance: Instance::Full,
        }
    }

    #[test]
    fn session_facts_of_a_session_that_is_gone_are_the_most_cautious() {
        let facts = SessionFacts::of(SessionId::FIRST, None);
        assert!(!facts.modern && !facts.tainted);
        assert_eq!(facts.scope, Scope::Read);
    }

    #[test]
    fn the_decision_is_the_policys_on_the_facts_read_once() {
        let policy = policy("trust = \"trusted\"\n");
        let (reader, writer) = (tool(true), tool(false));
        let decide_on = |tool: &Tool, tainted, scope| {
            let facts = facts(tool, tainted, scope);
            decide(&policy, facts.call("fx", tool), facts.digest, None, 0)
        };
        // A trusted server's read-only tool runs.
        let Decided::Decision(read) = decide_on(&reader, false, Scope::Write) else {
            panic!("no hook is configured");
        };
        assert_eq!(read.verdict, Verdict::Allow);
        // A session that may only read is never let write.
        let Decided::Decision(write) = decide_on(&writer, false, Scope::Read) else {
            panic!("no hook is configured");
        };
        assert_eq!(write.verdict, Verdict::Deny);
        assert_eq!(write.reasons[0].code, ReasonCode::ScopeReadOnly);
        // The same facts decide the same way each time.
        assert_eq!(
            decide_on(&writer, true, Scope::Write),
            decide_on(&writer, true, Scope::Write)
        );
    }

    #[test]
    fn a_hooks_answer_counts_only_for_the_state_it_was_given_for() {
        let policy = policy("decide_command = [\"hook\"]\n");
        let tool = tool(false);
        let facts = facts(&tool, false, Scope::Write);
        let call = facts.call("fx", &tool);
        // Without an answer, the hook is asked, and told what hintgate
        // decides without it.
        let Decided::AskHook(so_far) = decide(&policy, call, facts.digest, None, 0) else {
            panic!("the hook takes part");
        };
        let deny = |digest, so_far: &Decision| HookVerdict {
            answer: OwnedAnswer::Decided(Verdict::Deny, "no".to_owned()),
            digest,
            so_far: (so_far.verdict, so_far.codes().collect()),
        };
        // Its answer for this state decides.
        let given = deny(facts.digest, &so_far);
        let Decided::Decision(decision) = decide(&policy, call, facts.digest, Some(&given), 1)
        else {
            panic!("the answer stands");
        };
        assert_eq!(decision.verdict, Verdict::Deny);
        assert_eq!(decision.reasons[0].code, ReasonCode::Hook);
        // An answer about another definition does not: the hook is asked
        // again.
        let other = deny(PinDigest([7; 32]), &so_far);
        assert_eq!(
            decide(&policy, call, facts.digest, Some(&other), 1),
            Decided::AskHook(so_far.clone())
        );
        // Neither does one given for another decision so far.
        let mut stale = deny(facts.digest, &so_far);
        stale.so_far.1.push(ReasonCode::Hook);
        assert_eq!(
            decide(&policy, call, facts.digest, Some(&stale), 1),
            Decided::AskHook(so_far)
        );
        // A call that keeps changing is not asked about forever.
        let Decided::Decision(failed) =
            decide(&policy, call, facts.digest, Some(&stale), MAX_HOOK_ASKS)
        else {
            panic!("the hook is asked at most {MAX_HOOK_ASKS} times");
        };
        assert_eq!(failed.reasons[0].code, ReasonCode::HookFailed);
        assert_ne!(failed.verdict, Verdict::Allow);
    }

    #[test]
    fn arguments_are_checked_against_the_input_schema_with_where_each_problem_is() {
        let schema = json!({
            "type": "object",
            "properties": {"path": {"type": "string"}, "n": {"type": "integer"}},
            "required": ["path"],
        });
        let validator = jsonschema::validator_for(&schema).unwrap();
        assert_eq!(check_arguments(&validator, &json!({"path": "a"})), Ok(()));
        let problems = check_arguments(&validator, &json!({"path": 3, "n": "x"})).unwrap_err();
        assert_eq!(problems.len(), 2);
        assert!(
            problems
                .iter()
                .any(|problem| problem.ends_with("(at `/path`)"))
        );
        assert!(
            problems
                .iter()
                .any(|problem| problem.ends_with("(at `/n`)"))
        );
        let many: serde_json::Map<String, Value> =
            (0..9).map(|at| (format!("k{at}"), json!(at))).collect();
        let strict = jsonschema::validator_for(&json!({
            "type": "object",
            "additionalProperties": {"type": "string"},
        }))
        .unwrap();
        let problems = check_arguments(&strict, &Value::Object(many)).unwrap_err();
        assert_eq!(problems.len(), 5, "at most five problems are named");
    }

    #[test]
    fn structured_content_is_checked_against_the_output_schema() {
        let validator = jsonschema::validator_for(&json!({
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"],
        }))
        .unwrap();
        assert_eq!(check_output(&validator, r#"{"n": 3}"#), Ok(()));
        assert_eq!(
            check_output(&validator, r#"{"n": "3"}"#).unwrap_err().len(),
            1
        );
        // Content that cannot be read is not taken for a match.
        assert!(check_output(&validator, "not json").is_err());
    }

    #[test]
    fn only_the_definition_a_person_approved_goes_on_without_asking() {
        let (one, two) = (Some(PinDigest([1; 32])), Some(PinDigest([2; 32])));
        assert_eq!(approval(Verdict::Ask, one, one, false), Approval::Approved);
        // The server changed the definition while the person was asked.
        assert_eq!(approval(Verdict::Ask, two, one, false), Approval::Ask);
        assert_eq!(approval(Verdict::Allow, two, one, false), Approval::Policy);
        assert_eq!(approval(Verdict::Ask, one, None, false), Approval::Ask);
        assert_eq!(approval(Verdict::Ask, None, None, false), Approval::Ask);
        // A retry that carries the person's answer is settled by it.
        assert_eq!(
            approval(Verdict::Ask, one, None, true),
            Approval::CarriesAnswer
        );
        assert_eq!(
            approval(Verdict::Allow, one, None, true),
            Approval::CarriesAnswer
        );
        assert_eq!(approval(Verdict::Allow, one, None, false), Approval::Policy);
        // An approval stands for the preview the person saw, and only that.
        assert!(preview_stands(Some("sha256:a"), Some("sha256:a")));
        assert!(!preview_stands(Some("sha256:a"), Some("sha256:b")));
        assert!(!preview_stands(None, Some("sha256:b")));
        assert!(preview_stands(Some("sha256:a"), None));
    }
}
