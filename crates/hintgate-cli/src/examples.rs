//! `hintgate explain --example`: the bundled example config and calls.
//!
//! The files are compiled into the binary, so the README's first command needs
//! nothing but a build.

use anyhow::Result;
use hintgate_policy::config;
use hintgate_policy::decide::{Policy, SessionState};
use hintgate_policy::explain::{ExplainInput, explain};
use hintgate_policy::pin::PinStatus;
use serde_json::{Value, json};

use crate::args::SandboxArg;
use crate::exit::Exit;
use crate::explain::{example_tool, render, sandbox_proof};
use crate::load::InputError;
use crate::output;

/// The bundled configuration.
pub const CONFIG: &str = include_str!("../../../examples/hintgate.toml");

/// One bundled call: the situation, the server, the tool and its arguments.
struct Example {
    situation: &'static str,
    server: &'static str,
    tool: &'static str,
    arguments: fn() -> Value,
    tainted: bool,
}

const EXAMPLES: &[Example] = &[
    Example {
        situation: "a trusted server's read-only tool",
        server: "fs",
        tool: include_str!("../../../examples/tools/fs-read_text_file.json"),
        arguments: || json!({"path": "/home/me/docs/notes.md"}),
        tainted: false,
    },
    Example {
        situation: "a trusted server's destructive tool",
        server: "fs",
        tool: include_str!("../../../examples/tools/fs-write_file.json"),
        arguments: || json!({"path": "/home/me/docs/notes.md", "content": "# Notes\n"}),
        tainted: false,
    },
    Example {
        situation: "a tool an ask rule covers",
        server: "fs",
        tool: include_str!("../../../examples/tools/fs-move_file.json"),
        arguments: || json!({"source": "/home/me/docs/a.md", "destination": "/home/me/docs/b.md"}),
        tainted: false,
    },
    Example {
        situation: "an additive write of a trusted server",
        server: "memory",
        tool: include_str!("../../../examples/tools/memory-create_entities.json"),
        arguments: || json!({"entities": [{"name": "hintgate", "entityType": "project", "observations": []}]}),
        tainted: false,
    },
    Example {
        situation: "a tool a deny rule covers",
        server: "memory",
        tool: include_str!("../../../examples/tools/memory-delete_entities.json"),
        arguments: || json!({"entityNames": ["hintgate"]}),
        tainted: false,
    },
    Example {
        situation: "an open-world read before any private data",
        server: "fetch",
        tool: include_str!("../../../examples/tools/fetch-fetch.json"),
        arguments: || json!({"url": "https://example.org/"}),
        tainted: false,
    },
    Example {
        situation: "the same read after the session read private files",
        server: "fetch",
        tool: include_str!("../../../examples/tools/fetch-fetch.json"),
        arguments: || json!({"url": "https://example.org/?q=secrets"}),
        tainted: true,
    },
    Example {
        situation: "an untrusted server that claims its cleanup only reads",
        server: "community",
        tool: include_str!("../../../examples/tools/community-cleanup_workspace.json"),
        arguments: || json!({"path": "/home/me"}),
        tainted: false,
    },
];

/// Runs the bundled examples.
pub fn run(as_json: bool) -> Result<Exit> {
    let (config, diagnostics) = config::parse_str(CONFIG);
    let Some(config) = config else {
        let rendered: Vec<String> = diagnostics
            .iter()
            .map(|diagnostic| diagnostic.render("examples/hintgate.toml", CONFIG))
            .collect();
        return Err(InputError(format!(
            "the bundled config is invalid:\n{}",
            rendered.join("\n")
        ))
        .into());
    };
    let policy = Policy::new(config);
    let mut explanations = Vec::new();
    let mut text = String::from(
        "hintgate explains the bundled example calls against examples/hintgate.toml.\n\n",
    );
    for example in EXAMPLES {
        let tool = example_tool(example.tool)?;
        let arguments = (example.arguments)();
        let explanation = explain(
            &policy,
            &ExplainInput {
                server: example.server,
                tool: &tool,
                arguments: Some(&arguments),
                pinned: None,
                pin: PinStatus::Unchanged,
                session: SessionState {
                    tainted: example.tainted,
                    ..SessionState::default()
                },
                sandbox: sandbox_proof(&policy, example.server, SandboxArg::Configured),
                hook: Default::default(),
            },
        );
        text.push_str(&format!("# {}\n", example.situation));
        text.push_str(&render(&explanation, true));
        text.push('\n');
        explanations.push(explanation);
    }
    if as_json {
        output::out(&format!(
            "{}\n",
            serde_json::to_string_pretty(&explanations)?
        ))?;
    } else {
        output::out(&text)?;
    }
    Ok(Exit::Success)
}
