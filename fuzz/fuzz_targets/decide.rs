//! `decide()` over arbitrary requests.
//!
//! A configuration (profile, unattended, the server's trust, rules) and a
//! call (the tool's name and annotations, its pin status, the session, the
//! sandbox's proof) are built from the fuzzer's choices. Checked:
//!
//! - nothing panics;
//! - deny beats ask beats allow: a matching deny rule denies; a matching
//!   ask rule (and no deny rule) never allows;
//! - from an untrusted server, annotations never lower friction: the
//!   verdict with them is at least the verdict with none;
//! - a changed definition never lowers friction against a new one;
//! - a tool not listed to the host is refused when called anyway;
//! - `unattended` never asks.
#![no_main]

use arbitrary::Arbitrary;
use hintgate_policy::config::parse_str;
use hintgate_policy::decide::{Call, Policy, Remembered, Scope, SessionState, Verdict};
use hintgate_policy::pin::PinStatus;
use hintgate_policy::tool::{SandboxProof, Tool};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};

const SERVER: &str = "srv";

#[derive(Debug, Arbitrary, Clone, Copy)]
enum Profile {
    AskWrites,
    AskAll,
    HideWrites,
}

#[derive(Debug, Arbitrary, Clone, Copy, PartialEq)]
enum Action {
    Allow,
    Ask,
    Deny,
}

#[derive(Debug, Arbitrary, Clone, Copy)]
enum ServerGlob {
    Any,
    This,
    Other,
}

#[derive(Debug, Arbitrary, Clone, Copy)]
enum ToolGlob {
    Any,
    Exact,
    FirstLetter,
    Other,
}

#[derive(Debug, Arbitrary)]
struct RuleChoice {
    server: ServerGlob,
    tool: ToolGlob,
    action: Action,
}

#[derive(Debug, Arbitrary)]
struct Input {
    profile: Profile,
    unattended: bool,
    trusted: bool,
    private_data: bool,
    rules: Vec<RuleChoice>,
    /// The tool's name, from a small alphabet so that globs can match it.
    name: Vec<u8>,
    read_only: Option<Option<bool>>,
    destructive: Option<Option<bool>>,
    idempotent: Option<Option<bool>>,
    open_world: Option<Option<bool>>,
    changed: bool,
    tainted: bool,
    remembered: u8,
    read_scope: bool,
    no_network: bool,
    no_writes: bool,
    /// The sandbox lets the server reach only listed hosts (never together
    /// with no network, as the sandbox reports it).
    egress_only: bool,
}

fuzz_target!(|input: Input| {
    let name: String = input
        .name
        .iter()
        .take(12)
        .map(|byte| char::from(b'a' + byte % 4))
        .collect();
    if name.is_empty() {
        return;
    }
    let first = name.chars().next().unwrap_or('a');

    let mut toml = format!(
        "[gateway]\nprofile = \"{}\"\nunattended = {}\n\n\
         [servers.{SERVER}]\ncommand = \"srv\"\ntrust = \"{}\"\nprivate_data = {}\n\n\
         [servers.other]\ncommand = \"other\"\n",
        match input.profile {
            Profile::AskWrites => "ask-writes",
            Profile::AskAll => "ask-all",
            Profile::HideWrites => "hide-writes",
        },
        input.unattended,
        if input.trusted {
            "trusted"
        } else {
            "untrusted"
        },
        input.private_data,
    );
    let mut matching = Vec::new();
    for rule in input.rules.iter().take(8) {
        let (server, server_matches) = match rule.server {
            ServerGlob::Any => ("*", true),
            ServerGlob::This => (SERVER, true),
            ServerGlob::Other => ("other", false),
        };
        let (tool, tool_matches) = match rule.tool {
            ToolGlob::Any => ("*".to_owned(), true),
            ToolGlob::Exact => (name.clone(), true),
            ToolGlob::FirstLetter => (format!("{first}*"), true),
            ToolGlob::Other => ("zz".to_owned(), false),
        };
        let action = match rule.action {
            Action::Allow => "allow",
            Action::Ask => "ask",
            Action::Deny => "deny",
        };
        toml.push_str(&format!(
            "\n[[rules]]\nserver = \"{server}\"\ntool = \"{tool}\"\naction = \"{action}\"\n"
        ));
        if server_matches && tool_matches {
            matching.push(rule.action);
        }
    }
    let (config, diagnostics) = parse_str(&toml);
    let Some(config) = config else {
        panic!("the generated config is refused: {toml}\n{diagnostics:#?}");
    };
    let policy = Policy::new(config);

    let mut annotations = Map::new();
    for (key, hint) in [
        ("readOnlyHint", input.read_only),
        ("destructiveHint", input.destructive),
        ("idempotentHint", input.idempotent),
        ("openWorldHint", input.open_world),
    ] {
        match hint {
            None => {}
            Some(None) => {
                annotations.insert(key.into(), Value::Null);
            }
            Some(Some(b)) => {
                annotations.insert(key.into(), Value::Bool(b));
            }
        }
    }
    let annotated = json!({"name": name, "annotations": annotations}).to_string();
    let bare = json!({"name": name}).to_string();
    let (Ok(annotated), Ok(bare)) = (Tool::from_json(&annotated), Tool::from_json(&bare)) else {
        return;
    };

    let session = SessionState {
        tainted: input.tainted,
        remembered: match input.remembered % 3 {
            0 => Remembered::None,
            1 => Remembered::Session,
            _ => Remembered::Always,
        },
        scope: if input.read_scope {
            Scope::Read
        } else {
            Scope::Write
        },
    };
    let sandbox = SandboxProof {
        no_network: input.no_network,
        no_writes: input.no_writes,
        egress_only: input.egress_only && !input.no_network,
    };
    let decide = |tool: &Tool, pin: PinStatus| {
        policy.decide(&Call {
            server: SERVER,
            tool,
            pin,
            session,
            sandbox,
            hook: Default::default(),
        })
    };
    let pin = if input.changed {
        PinStatus::Changed
    } else {
        PinStatus::New
    };
    let decision = decide(&annotated, pin);
    let verdict = decision.verdict;
    let context =
        || format!("{toml}\n{annotated:?}\n{pin:?} {session:?} {sandbox:?}\n{decision:?}");

    if matching.contains(&Action::Deny) {
        assert_eq!(verdict, Verdict::Deny, "a deny rule matches\n{}", context());
    } else if matching.contains(&Action::Ask) {
        assert_ne!(
            verdict,
            Verdict::Allow,
            "an ask rule matches\n{}",
            context()
        );
    }
    if !input.trusted {
        let without = decide(&bare, pin);
        assert!(
            verdict >= without.verdict,
            "annotations of an untrusted server lowered friction: {:?} without them\n{}",
            without,
            context()
        );
    }
    assert!(
        decide(&annotated, PinStatus::Changed).verdict
            >= decide(&annotated, PinStatus::New).verdict,
        "a changed definition lowered friction\n{}",
        context()
    );
    if !policy.visible(SERVER, &annotated, sandbox) {
        assert_eq!(
            verdict,
            Verdict::Deny,
            "a hidden tool was not refused\n{}",
            context()
        );
    }
    if input.unattended {
        assert_ne!(verdict, Verdict::Ask, "unattended asked\n{}", context());
    }
    let _ = policy.retry_eligible(SERVER, &annotated, sandbox);
});
