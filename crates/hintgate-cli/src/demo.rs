//! `hintgate demo`: the gateway between a scripted host and two demo servers,
//! printing each call's decision, reasons and prompt.
//!
//! Everything runs from this binary: the servers are `hintgate demo-server`
//! child processes, the gateway runs in this process, and the host is a
//! script on the other end of an in-memory pipe that answers every question
//! as a person might.

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use hintgate_policy::config::{
    Action, GatewaySettings, PrivateData, Profile, Rule, ServerConfig, Transport, ValidConfig,
};
use hintgate_policy::decide::{Policy, Verdict};
use hintgate_policy::glob::Glob;
use hintgate_policy::tool::Trust;
use hintgate_proxy::{Mode, Observed, Settings};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use crate::exit::Exit;
use crate::output;

/// How the scripted person answers a question.
#[derive(Debug, Clone, Copy)]
enum Answer {
    None,
    Approve,
    ApproveForSession,
    Decline,
}

/// One scripted call.
struct Step {
    note: &'static str,
    tool: &'static str,
    arguments: fn() -> Value,
    answer: Answer,
}

const STEPS: &[Step] = &[
    Step {
        note: "a trusted server's read-only tool that reaches the web",
        tool: "notes__fetch_page",
        arguments: || json!({"url": "https://example.org/"}),
        answer: Answer::None,
    },
    Step {
        note: "a read of private data (the notes server is marked private_data)",
        tool: "notes__read_notes",
        arguments: || json!({}),
        answer: Answer::None,
    },
    Step {
        note: "the same web fetch, now that the session holds private data",
        tool: "notes__fetch_page",
        arguments: || json!({"url": "https://example.org/?q=buy+milk"}),
        answer: Answer::Approve,
    },
    Step {
        note: "an additive write: the person approves it for the rest of the session",
        tool: "notes__add_note",
        arguments: || json!({"text": "call the plumber"}),
        answer: Answer::ApproveForSession,
    },
    Step {
        note: "the same write again: remembered, so nobody is asked",
        tool: "notes__add_note",
        arguments: || json!({"text": "water the plants"}),
        answer: Answer::None,
    },
    Step {
        note: "a destructive write: only this call could be approved, and the person declines",
        tool: "notes__delete_notes",
        arguments: || json!({}),
        answer: Answer::Decline,
    },
    Step {
        note: "an untrusted server's tool that claims to only read (it deletes)",
        tool: "community__tidy_up",
        arguments: || json!({}),
        answer: Answer::Decline,
    },
    Step {
        note: "a tool a deny rule hides; the host calls it anyway",
        tool: "community__wipe_disk",
        arguments: || json!({}),
        answer: Answer::None,
    },
];

/// Runs the demo.
pub fn run() -> Result<Exit> {
    let exe = std::env::current_exe()
        .context("cannot find this program's path to start the demo servers")?;
    let exe = exe.display().to_string();
    let config = demo_config(&exe);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    runtime.block_on(drive(config))?;
    Ok(Exit::Success)
}

fn server(
    name: &str,
    exe: &str,
    flavor: &str,
    trust: Trust,
    private_data: PrivateData,
) -> ServerConfig {
    ServerConfig {
        name: name.to_owned(),
        transport: Transport::Stdio {
            command: exe.to_owned(),
            args: vec![
                "demo-server".to_owned(),
                "--flavor".to_owned(),
                flavor.to_owned(),
            ],
            env: BTreeMap::new(),
        },
        trust,
        private_data,
        sandbox: None,
        decide: hintgate_policy::config::ServerHook::Inherit,
        idempotency_key: None,
        read_only: None,
        oauth: None,
    }
}

fn demo_config(exe: &str) -> ValidConfig {
    let mut servers = BTreeMap::new();
    servers.insert(
        "notes".to_owned(),
        server("notes", exe, "notes", Trust::Trusted, PrivateData::All),
    );
    servers.insert(
        "community".to_owned(),
        server(
            "community",
            exe,
            "community",
            Trust::Untrusted,
            PrivateData::None,
        ),
    );
    let rule = Rule {
        server: Glob::new("community").unwrap_or_else(|_| Glob::any()),
        tool: Glob::new("wipe_*").unwrap_or_else(|_| Glob::any()),
        action: Action::Deny,
        reason: Some("nobody wipes disks from a chat".to_owned()),
    };
    ValidConfig {
        gateway: GatewaySettings {
            profile: Profile::AskWrites,
            ..GatewaySettings::default()
        },
        servers,
        rules: vec![rule],
        audit: Default::default(),
        labels: Vec::new(),
        listen: Default::default(),
        telemetry: Default::default(),
        previews: Vec::new(),
    }
}

/// The scripted host's side of the pipe.
struct Host {
    writer: tokio::io::WriteHalf<tokio::io::DuplexStream>,
    lines: tokio::io::Lines<BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>,
    next_id: u64,
}

impl Host {
    async fn send(&mut self, message: &Value) -> Result<()> {
        self.writer
            .write_all(format!("{message}\n").as_bytes())
            .await?;
        self.writer.flush().await?;
        Ok(())
    }

    /// Sends a request; answers the gateway's questions with `answer` and
    /// returns the response and the text of any question asked.
    async fn request(
        &mut self,
        method: &str,
        params: Value,
        answer: Answer,
    ) -> Result<(Value, Option<String>)> {
        self.next_id += 1;
        let id = json!(self.next_id);
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await?;
        let mut asked = None;
        loop {
            let Some(line) = self.lines.next_line().await? else {
                bail!("the gateway closed the session");
            };
            let message: Value = serde_json::from_str(&line)?;
            if message.get("method").and_then(Value::as_str) == Some("elicitation/create") {
                asked = message
                    .pointer("/params/message")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let result = match answer {
                    Answer::Approve | Answer::None => {
                        json!({"action": "accept", "content": {"approve": true}})
                    }
                    Answer::ApproveForSession => {
                        json!({"action": "accept", "content": {"approve": true, "remember": "this tool for the rest of this session"}})
                    }
                    Answer::Decline => json!({"action": "decline"}),
                };
                self.send(&json!({"jsonrpc": "2.0", "id": message.get("id"), "result": result}))
                    .await?;
                continue;
            }
            if message.get("id") == Some(&id) {
                return Ok((message, asked));
            }
        }
    }
}

async fn drive(config: ValidConfig) -> Result<()> {
    let (host_end, gateway_end) = tokio::io::duplex(1 << 20);
    let (gateway_read, gateway_write) = tokio::io::split(gateway_end);
    let (observer, mut observed) = mpsc::unbounded_channel();
    let settings = Settings {
        policy: Policy::new(config),
        mode: Mode::Gateway,
        observer: Some(observer),
        // The demo remembers nothing across runs.
        store: None,
        connector: None,
        metrics: None,
    };
    let gateway = tokio::spawn(hintgate_proxy::run(settings, gateway_read, gateway_write));
    let (host_read, writer) = tokio::io::split(host_end);
    let mut host = Host {
        writer,
        lines: BufReader::new(host_read).lines(),
        next_id: 0,
    };

    let mut out = String::from(
        "hintgate demo: a scripted host calls two demo servers through the gateway.\n\
         \n  notes      trusted; what its tools return is private data\n  \
         community  untrusted: its annotations are only claims\n  \
         rule       deny `wipe_*` on community (\"nobody wipes disks from a chat\")\n",
    );
    let (init, _) = host
        .request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "hintgate-demo-host", "version": env!("CARGO_PKG_VERSION")}}),
            Answer::None,
        )
        .await?;
    if let Some(error) = init.get("error") {
        bail!("the demo servers did not start: {error}");
    }
    host.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await?;
    let (list, _) = host.request("tools/list", json!({}), Answer::None).await?;
    out.push_str("\nThe tools the host sees (with what hintgate vouches for):\n");
    for tool in list
        .pointer("/result/tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = tool.get("name").and_then(Value::as_str).unwrap_or("");
        let annotations = tool.get("annotations").cloned().unwrap_or(Value::Null);
        let flag = |key: &str| {
            annotations
                .get(key)
                .and_then(Value::as_bool)
                .unwrap_or(false)
        };
        let kind = if flag("readOnlyHint") {
            "read-only"
        } else if flag("destructiveHint") {
            "may destroy"
        } else {
            "may write"
        };
        let world = if flag("openWorldHint") {
            ", open world"
        } else {
            ""
        };
        let claims = tool
            .pointer("/_meta/hintgate~1declared/readOnlyHint")
            .and_then(Value::as_bool)
            .filter(|claimed| *claimed && !flag("readOnlyHint"))
            .map_or("", |_| "  (the server claims read-only; not believed)");
        out.push_str(&format!("  {name:<24} {kind}{world}{claims}\n"));
    }
    out.push_str("  (community__wipe_disk is not listed: a deny rule hides it)\n");
    output::out(&out)?;

    for (number, step) in STEPS.iter().enumerate() {
        let arguments = (step.arguments)();
        let (response, asked) = host
            .request(
                "tools/call",
                json!({"name": step.tool, "arguments": arguments}),
                step.answer,
            )
            .await?;
        let mut text = format!(
            "\n{}. {} {}\n   ({})\n",
            number + 1,
            step.tool,
            arguments,
            step.note
        );
        while let Ok(event) = observed.try_recv() {
            match event {
                Observed::Decided { decision, .. } => {
                    let verdict = match decision.verdict {
                        Verdict::Allow => "allow",
                        Verdict::Ask => "ask",
                        Verdict::Deny => "deny",
                    };
                    let reasons: Vec<&str> = decision.codes().map(|code| code.as_str()).collect();
                    text.push_str(&format!(
                        "   decision: {verdict} ({})\n",
                        reasons.join(", ")
                    ));
                }
                Observed::Answered { answer, .. } => {
                    text.push_str(&format!("   the person: {answer}\n"))
                }
                Observed::Queued { id, .. } => text.push_str(&format!(
                    "   waits in the approval queue as #{id} (hintgate approvals)\n"
                )),
                Observed::Stopping => {}
            }
        }
        if let Some(prompt) = asked {
            text.push_str("   the prompt:\n");
            for line in prompt.lines() {
                text.push_str(&format!("   | {line}\n"));
            }
        }
        let result = response
            .get("result")
            .cloned()
            .unwrap_or_else(|| response.clone());
        let result_text = result
            .pointer("/content/0/text")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let label = if result.get("isError").and_then(Value::as_bool) == Some(true) {
            "refused"
        } else if response.get("error").is_some() {
            "error"
        } else {
            "result"
        };
        let shown = if result_text.is_empty() {
            response.to_string()
        } else {
            result_text
        };
        let mut lines = shown.lines();
        text.push_str(&format!("   {label}: {}\n", lines.next().unwrap_or("")));
        for line in lines {
            text.push_str(&format!("   {}{line}\n", " ".repeat(label.len() + 2)));
        }
        output::out(&text)?;
    }
    drop(host);
    let _ = gateway.await;
    Ok(())
}
