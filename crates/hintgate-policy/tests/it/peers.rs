//! The real tool definitions of the reference servers (captured from the
//! packages named in each fixture): every definition parses, and the policy's
//! decisions on them are pinned in a snapshot.

use std::fmt::Write as _;

use hintgate_policy::config::{Profile, Transport, ValidConfig};
use hintgate_policy::decide::{Call, Policy, SessionState, Verdict};
use hintgate_policy::pin::PinStatus;
use hintgate_policy::sanitize::sanitize;
use hintgate_policy::tool::{SandboxProof, Tool, Trust};
use serde_json::Value;

use crate::util::fixture;

const FIXTURES: [&str; 7] = [
    "server-everything.json",
    "server-everything-elicitation.json",
    "server-filesystem.json",
    "server-memory.json",
    "mcp-server-time.json",
    "mcp-server-fetch.json",
    "mcp-server-git.json",
];

fn tools(file: &str) -> Vec<Tool> {
    let document: Value = serde_json::from_str(&fixture(file)).unwrap();
    document["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| Tool::from_value(tool.clone()).unwrap_or_else(|err| panic!("{file}: {err}")))
        .collect()
}

fn policy(trust: Trust, profile: Profile) -> Policy {
    let transport = Transport::Stdio {
        command: "server".into(),
        args: vec![],
        env: Default::default(),
    };
    Policy::new(ValidConfig::wrap("srv", transport, trust, profile, false))
}

fn decide(policy: &Policy, tool: &Tool) -> (Verdict, Vec<String>) {
    let decision = policy.decide(&Call {
        server: "srv",
        tool,
        pin: PinStatus::Unchanged,
        session: SessionState::default(),
        sandbox: SandboxProof::default(),
        hook: Default::default(),
    });
    (
        decision.verdict,
        decision.codes().map(|code| code.to_string()).collect(),
    )
}

#[test]
fn every_real_definition_parses_and_survives_a_round_trip() {
    for file in FIXTURES {
        let document: Value = serde_json::from_str(&fixture(file)).unwrap();
        for raw in document["tools"].as_array().unwrap() {
            let tool = Tool::from_value(raw.clone()).unwrap();
            assert_eq!(
                &serde_json::to_value(&tool).unwrap(),
                raw,
                "{file}: {}",
                tool.name
            );
        }
    }
}

#[test]
fn untrusted_real_servers_get_no_silent_calls() {
    let untrusted = policy(Trust::Untrusted, Profile::AskWrites);
    for file in FIXTURES {
        for tool in tools(file) {
            assert_eq!(
                decide(&untrusted, &tool).0,
                Verdict::Ask,
                "{file}: {}",
                tool.name
            );
        }
    }
}

#[test]
fn real_descriptions_need_no_sanitizing() {
    for file in FIXTURES {
        for tool in tools(file) {
            let description = tool.description.clone().unwrap_or_default();
            assert!(sanitize(&description).is_clean(), "{file}: {}", tool.name);
        }
    }
}

#[test]
fn decisions_on_the_real_servers() {
    let mut table = String::new();
    let trusted = policy(Trust::Trusted, Profile::AskWrites);
    let hide = policy(Trust::Trusted, Profile::HideWrites);
    for file in FIXTURES {
        writeln!(table, "# {file}").unwrap();
        for tool in tools(file) {
            let (verdict, reasons) = decide(&trusted, &tool);
            let visible_hidden = if hide.visible("srv", &tool, SandboxProof::default()) {
                "listed"
            } else {
                "hidden"
            };
            writeln!(
                table,
                "{:<32} trusted: {:<5} {:<40} hide-writes: {visible_hidden}",
                tool.name,
                format!("{verdict:?}").to_lowercase(),
                reasons.join(",")
            )
            .unwrap();
        }
    }
    insta::assert_snapshot!(table);
}
