//! How long a decision takes: `decide()` over 20 servers, 500 tools and 50
//! rules, and a full `tools/list` visibility pass over the 500 tools.
//!
//! Run with `cargo bench -p hintgate-policy --bench decide`; the README
//! reports the medians.
#![expect(
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "benchmark set-up over fixed, in-range data"
)]

use std::collections::BTreeMap;
use std::hint::black_box;

use hintgate_policy::config::{
    Action, GatewaySettings, PrivateData, Profile, Rule, ServerConfig, Transport, ValidConfig,
};
use hintgate_policy::decide::{Call, Policy, Remembered, SessionState};
use hintgate_policy::glob::Glob;
use hintgate_policy::pin::PinStatus;
use hintgate_policy::tool::{Annotations, SandboxProof, Tool, Trust};

fn main() {
    divan::main();
}

const N_SERVERS: usize = 20;
const TOOLS_PER_SERVER: usize = 25;
const N_RULES: usize = 50;
const VERBS: [&str; 5] = ["read", "list", "write", "delete", "fetch"];

struct World {
    policy: Policy,
    tools: Vec<(String, Tool)>,
}

fn world() -> World {
    let servers: BTreeMap<String, ServerConfig> = (0..N_SERVERS)
        .map(|idx| {
            let name = format!("server{idx:02}");
            let config = ServerConfig {
                name: name.clone(),
                transport: Transport::Stdio {
                    command: "npx".into(),
                    args: vec![format!("pkg-{idx}")],
                    env: BTreeMap::new(),
                },
                trust: if idx.is_multiple_of(2) {
                    Trust::Trusted
                } else {
                    Trust::Untrusted
                },
                private_data: if idx.is_multiple_of(5) {
                    PrivateData::All
                } else {
                    PrivateData::None
                },
                sandbox: None,
                decide: hintgate_policy::config::ServerHook::Inherit,
                idempotency_key: None,
                read_only: None,
                oauth: None,
            };
            (name, config)
        })
        .collect();
    // Rules as people write them: mostly one server and a tool pattern, a few
    // over every server; all three actions.
    let rules = (0..N_RULES)
        .map(|idx| {
            let server = if idx % 10 == 9 {
                "*".to_owned()
            } else {
                format!("server{:02}", idx % N_SERVERS)
            };
            let tool = match idx % 4 {
                0 => format!("{}_*", VERBS[idx % VERBS.len()]),
                1 => format!("*_item{}", idx % TOOLS_PER_SERVER),
                2 => format!("{}_item?", VERBS[(idx + 1) % VERBS.len()]),
                _ => format!("[dw]*_item{}", idx % 7),
            };
            Rule {
                server: Glob::new(&server).expect("bench glob"),
                tool: Glob::new(&tool).expect("bench glob"),
                action: [Action::Allow, Action::Ask, Action::Deny][idx % 3],
                reason: Some(format!("rule {idx}")),
            }
        })
        .collect();
    let config = ValidConfig {
        gateway: GatewaySettings {
            profile: Profile::AskWrites,
            ..GatewaySettings::default()
        },
        servers,
        rules,
        audit: Default::default(),
        labels: Vec::new(),
        listen: Default::default(),
        telemetry: Default::default(),
        previews: Vec::new(),
    };
    let tools = (0..N_SERVERS * TOOLS_PER_SERVER)
        .map(|idx| {
            let server = format!("server{:02}", idx / TOOLS_PER_SERVER);
            let verb = VERBS[idx % VERBS.len()];
            let mut tool = Tool::named(format!("{verb}_item{}", idx % TOOLS_PER_SERVER));
            tool.description = Some(format!("Does {verb} on an item."));
            tool.annotations = (!idx.is_multiple_of(7)).then(|| Annotations {
                read_only_hint: Some(matches!(verb, "read" | "list" | "fetch")),
                destructive_hint: Some(verb == "delete"),
                idempotent_hint: Some(verb != "write"),
                open_world_hint: Some(verb == "fetch"),
                ..Annotations::default()
            });
            (server, tool)
        })
        .collect();
    World {
        policy: Policy::new(config),
        tools,
    }
}

/// One decision, cycling through all 500 tools so that every branch and
/// rule position is measured.
#[divan::bench(sample_count = 1000, sample_size = 100)]
fn decide_one_call(bencher: divan::Bencher<'_, '_>) {
    let world = world();
    let mut idx = 0usize;
    bencher.bench_local(|| {
        idx = (idx + 1) % world.tools.len();
        let (server, tool) = &world.tools[idx];
        black_box(world.policy.decide(&Call {
            server,
            tool,
            pin: if idx.is_multiple_of(50) {
                PinStatus::Changed
            } else {
                PinStatus::Unchanged
            },
            session: SessionState {
                tainted: idx.is_multiple_of(3),
                remembered: if idx.is_multiple_of(4) {
                    Remembered::Session
                } else {
                    Remembered::None
                },
                ..SessionState::default()
            },
            sandbox: SandboxProof::default(),
            hook: Default::default(),
        }))
    });
}

/// A full `tools/list` visibility pass over all 500 tools.
#[divan::bench(sample_count = 200)]
fn visibility_pass_500_tools(bencher: divan::Bencher<'_, '_>) {
    let world = world();
    bencher.bench_local(|| {
        world
            .tools
            .iter()
            .filter(|(server, tool)| world.policy.visible(server, tool, SandboxProof::default()))
            .count()
    });
}
