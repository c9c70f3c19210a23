//! `hintgate explain`: the policy's decision on one call, without running anything.

use anyhow::{Context, Result, bail};
use hintgate_policy::config::{self, Instance, Profile, ServerConfig, Transport, ValidConfig};
use hintgate_policy::decide::{
    Call, HookAnswer, Policy, RememberOffer, Remembered, Scope, SessionState,
};
use hintgate_policy::explain::{ExplainInput, Explanation, HookReport, explain};
use hintgate_policy::hook::{OwnedAnswer, Question, Reply};
use hintgate_policy::pin::{PinDigest, PinStatus};
use hintgate_policy::tool::{SandboxProof, Tool, Trust};
use hintgate_policy::{Verdict, tool::DeclaredHints, tool::EffectiveHints};
use serde_json::Value;

use crate::args::{ExplainArgs, PinArg, RememberedArg, SandboxArg, ScopeArg};
use crate::exit::Exit;
use crate::{load, output};

/// Runs `hintgate explain` on the call its flags name (`--example` is
/// `examples::run`, which `main` calls).
pub fn run(args: &ExplainArgs) -> Result<Exit> {
    let (Some(server), Some(tool_path)) = (&args.server, &args.tool) else {
        bail!("`--server` and `--tool` are required without `--example`");
    };
    let policy = match policy(args, server)? {
        Ok(policy) => policy,
        Err(exit) => return Ok(exit),
    };
    if policy.server(server).is_none() {
        let known: Vec<_> = policy
            .config()
            .servers
            .keys()
            .map(|name| format!("`{name}`"))
            .collect();
        output::err(&format!(
            "error: unknown server `{server}`; the config has {}\n",
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        ))?;
        return Ok(Exit::Usage);
    }
    let tool = load::json(tool_path, "tool definition")?;
    let arguments = match &args.args {
        Some(path) => {
            let value = load::json(path, "arguments")?;
            if !value.is_object() {
                return Err(load::InputError(format!(
                    "arguments `{}` must be a JSON object",
                    path.display()
                ))
                .into());
            }
            Some(value)
        }
        None => None,
    };
    let pinned = match &args.pinned {
        Some(path) => Some(
            Tool::from_value(load::json(path, "pinned definition")?).map_err(|error| {
                load::InputError(format!("pinned definition `{}`: {error}", path.display()))
            })?,
        ),
        None => None,
    };
    let pin = match args.pin {
        PinArg::New => PinStatus::New,
        PinArg::Unchanged => PinStatus::Unchanged,
        PinArg::Changed => PinStatus::Changed,
    };
    let session = SessionState {
        tainted: args.tainted,
        remembered: match args.remembered {
            RememberedArg::None => Remembered::None,
            RememberedArg::Session => Remembered::Session,
            RememberedArg::Always => Remembered::Always,
        },
        scope: match args.scope {
            ScopeArg::Write => Scope::Write,
            ScopeArg::Read => Scope::Read,
        },
    };
    let sandbox = sandbox_proof(&policy, server, args.sandbox);
    // The decision hook is run as the gateway would ask it, so a user can
    // try their own code on a call.
    let hooked = if args.no_hook {
        None
    } else {
        ask_hook(
            &policy,
            server,
            &tool,
            arguments.as_ref(),
            pinned.as_ref(),
            pin,
            session,
            sandbox,
        )
    };
    let input = ExplainInput {
        server,
        tool: &tool,
        arguments: arguments.as_ref(),
        pinned: pinned.as_ref(),
        pin,
        session,
        sandbox,
        hook: hooked
            .as_ref()
            .map_or(HookAnswer::None, |(answer, _)| answer.as_answer()),
    };
    let mut explanation = explain(&policy, &input);
    explanation.hook = hooked.map(|(_, report)| report);
    if args.json {
        output::out(&format!(
            "{}\n",
            serde_json::to_string_pretty(&explanation)?
        ))?;
    } else {
        output::out(&render(&explanation, true))?;
    }
    Ok(exit_for(explanation.verdict))
}

/// Asks the server's decision hook about the call, when one takes part:
/// its answer, and what was asked and answered.
#[expect(
    clippy::too_many_arguments,
    reason = "every part of the call the hook is told"
)]
fn ask_hook(
    policy: &Policy,
    server: &str,
    tool: &Value,
    arguments: Option<&Value>,
    pinned: Option<&Tool>,
    pin: PinStatus,
    session: SessionState,
    sandbox: SandboxProof,
) -> Option<(OwnedAnswer, HookReport)> {
    let config = policy.hook_for(server)?;
    let tool = Tool::from_value(tool.clone()).ok()?;
    let pin = match pinned {
        Some(pinned) => PinStatus::compare(Some(PinDigest::of(pinned)), &tool),
        None => pin,
    };
    let call = Call {
        server,
        tool: &tool,
        pin,
        session,
        sandbox,
        hook: HookAnswer::None,
    };
    let so_far = policy.hook_so_far(&call)?;
    let identity = policy
        .server(server)
        .map(ServerConfig::identity)
        .unwrap_or_default();
    let line = policy.hook_question(&Question {
        id: "1",
        call: &call,
        identity: &identity,
        arguments,
        host: None,
        so_far: &so_far,
    });
    let (answer, said) = match crate::hook::ask_once(config, &line) {
        Ok(said) => (Reply::parse(&said).answer, said),
        Err(why) => (OwnedAnswer::Failed(why.clone()), why),
    };
    let report = HookReport {
        command: config.command.clone(),
        question: serde_json::from_str(&line).unwrap_or(Value::Null),
        answer: said,
    };
    Some((answer, report))
}

/// The exit code for a verdict: a denial is 2.
pub fn exit_for(verdict: Verdict) -> Exit {
    match verdict {
        Verdict::Allow | Verdict::Ask => Exit::Success,
        Verdict::Deny => Exit::Denied,
    }
}

/// Builds the policy from `--config`, or wrap mode's defaults and flags.
/// `Err(exit)` when the config has errors (they are printed).
fn policy(args: &ExplainArgs, server: &str) -> Result<Result<Policy, Exit>> {
    let config = match &args.config {
        Some(path) => {
            let loaded = load::config(path)?;
            if !loaded.diagnostics.is_empty() {
                output::err(&loaded.render())?;
            }
            match loaded.config {
                Some(config) => config,
                None => return Ok(Err(Exit::Usage)),
            }
        }
        None => wrap_config(args, server),
    };
    Ok(Ok(Policy::new(config)))
}

fn wrap_config(args: &ExplainArgs, server: &str) -> ValidConfig {
    let (command, rest) = match args.command.split_first() {
        Some((command, rest)) => (command.clone(), rest.to_vec()),
        None => ("(command not given)".to_owned(), Vec::new()),
    };
    let transport = Transport::Stdio {
        command,
        args: rest,
        env: Default::default(),
    };
    config::ValidConfig::wrap(
        server,
        transport,
        args.trust.map_or(Trust::Untrusted, Trust::from),
        args.profile.map_or(Profile::AskWrites, Profile::from),
        args.unattended,
    )
}

/// What the server's configured sandbox proves, as `--sandbox` says to take
/// it: `auto` asks this kernel what it enforces of the table, as
/// `hintgate run` would start the server.
pub fn sandbox_proof(policy: &Policy, server: &str, mode: SandboxArg) -> SandboxProof {
    let Some(sandbox) = policy
        .server(server)
        .and_then(|config| config.sandbox.as_ref())
    else {
        return SandboxProof::default();
    };
    match mode {
        SandboxArg::Auto => hintgate_sandbox::Kernel::current()
            .report(sandbox)
            .proof(sandbox),
        SandboxArg::Configured | SandboxArg::Enforced | SandboxArg::None => {
            sandbox.proof_when(mode.into())
        }
    }
}

/// The human-readable block for one explanation.
pub fn render(explanation: &Explanation, with_prompt: bool) -> String {
    let mut out = String::new();
    let title = if explanation.display_name == explanation.tool {
        String::new()
    } else {
        format!(" (titled \"{}\")", explanation.display_name)
    };
    out.push_str(&format!(
        "{} / {}{title}\n",
        explanation.server, explanation.tool
    ));
    out.push_str(&format!(
        "  verdict:   {}\n",
        verdict_word(explanation.verdict)
    ));
    for (idx, detail) in explanation.reason_details.iter().enumerate() {
        let label = if idx == 0 {
            "  reasons:   "
        } else {
            "             "
        };
        let mut line = format!("{label}{}: {}", detail.code, detail.description);
        if let Some(rule) = detail.rule {
            let what = if detail.code == hintgate_policy::ReasonCode::Paid {
                "label"
            } else {
                "rule"
            };
            line.push_str(&format!(" ({what} {rule}"));
            if let Some(reason) = &detail.rule_reason {
                line.push_str(&format!(": {reason}"));
            }
            line.push(')');
        }
        if let Some(note) = &detail.note {
            line.push_str(&format!(": {note}"));
        }
        out.push_str(&line);
        out.push('\n');
    }
    if let Some(error) = &explanation.invalid_definition {
        out.push_str(&format!("  invalid:   {error}\n"));
        return out;
    }
    let trust = match explanation.trust {
        Trust::Trusted => "trusted",
        Trust::Untrusted => "untrusted",
    };
    out.push_str(&format!("  trust:     {trust}\n"));
    out.push_str(&format!(
        "  declared:  {}\n",
        declared_line(&explanation.declared)
    ));
    out.push_str(&format!(
        "  effective: {}\n",
        effective_line(&explanation.effective)
    ));
    out.push_str(&format!("  visible:   {}\n", yes_no(explanation.visible)));
    out.push_str(&format!(
        "  retry:     {}\n",
        yes_no(explanation.retry_eligible)
    ));
    if let Some(instance) = explanation.instance {
        let what = match instance {
            Instance::ReadOnly => "read-only (the server's read-only credentials)",
            Instance::Full => "full (the server's full credentials)",
        };
        out.push_str(&format!("  instance:  {what}\n"));
    }
    for caveat in &explanation.caveats {
        out.push_str(&format!("  caveat:    {caveat}\n"));
    }
    match explanation.remember {
        RememberOffer::NotAsked => {}
        RememberOffer::ThisCallOnly => out.push_str("  approve:   this call only\n"),
        RememberOffer::UpToAlways => {
            out.push_str(
                "  approve:   this call, this tool for the session, or this tool always\n",
            );
        }
    }
    let pin = match explanation.pin {
        PinStatus::New => "new",
        PinStatus::Unchanged => "unchanged",
        PinStatus::Changed => "changed",
    };
    let digest = explanation
        .pin_digest
        .map(|d| d.to_string())
        .unwrap_or_default();
    out.push_str(&format!("  pin:       {pin} {digest}\n"));
    for change in &explanation.changes {
        out.push_str(&format!(
            "             {}: {} -> {}\n",
            change.field,
            change.old.as_deref().unwrap_or("(absent)"),
            change.new.as_deref().unwrap_or("(absent)")
        ));
    }
    let removed: Vec<String> = explanation
        .sanitized
        .title
        .iter()
        .map(|(kind, n)| format!("title: {n} {}", kind_word(*kind)))
        .chain(
            explanation
                .sanitized
                .description
                .iter()
                .map(|(kind, n)| format!("description: {n} {}", kind_word(*kind))),
        )
        .collect();
    if !removed.is_empty() {
        out.push_str(&format!("  sanitized: {}\n", removed.join(", ")));
    }
    if let Some(hook) = &explanation.hook {
        let command: Vec<String> = hook
            .command
            .iter()
            .map(|word| hintgate_policy::sanitize::escape_line(word))
            .collect();
        out.push_str(&format!(
            "  hook:      {}
",
            command.join(" ")
        ));
        out.push_str(&format!(
            "             answered: {}
",
            hintgate_policy::sanitize::escape_line(&hook.answer)
        ));
    }
    if with_prompt && let Some(prompt) = &explanation.prompt {
        out.push_str("\n  the prompt a person would see:\n");
        for line in prompt.lines() {
            out.push_str(&format!("  | {line}\n"));
        }
    }
    out
}

fn kind_word(kind: hintgate_policy::sanitize::Removed) -> &'static str {
    use hintgate_policy::sanitize::Removed;
    match kind {
        Removed::AnsiEscape => "ANSI escape(s)",
        Removed::Control => "control character(s)",
        Removed::Bidi => "bidi control(s)",
        Removed::ZeroWidth => "zero-width character(s)",
        Removed::Tag => "tag character(s)",
    }
}

fn verdict_word(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Allow => "allow",
        Verdict::Ask => "ask",
        Verdict::Deny => "deny",
    }
}

fn yes_no(flag: bool) -> &'static str {
    if flag { "yes" } else { "no" }
}

fn declared_line(hints: &DeclaredHints) -> String {
    let show = |value: Option<bool>| value.map_or("-".to_owned(), |v| v.to_string());
    format!(
        "readOnlyHint={} destructiveHint={} idempotentHint={} openWorldHint={}",
        show(hints.read_only),
        show(hints.destructive),
        show(hints.idempotent),
        show(hints.open_world)
    )
}

fn effective_line(hints: &EffectiveHints) -> String {
    format!(
        "readOnlyHint={} destructiveHint={} idempotentHint={} openWorldHint={}",
        hints.read_only, hints.destructive, hints.idempotent, hints.open_world
    )
}

/// Parses the example tool JSON the binary embeds.
pub fn example_tool(text: &str) -> Result<Value> {
    serde_json::from_str(text).context("a bundled example is not JSON")
}
