//! The user's previewer command (`[[previews]] command`, design §4.3), run
//! as a real process (`tests/fixtures/previewer.py`) in front of a scripted
//! untrusted server: its preview reaches the person with the prompt, and a
//! previewer that hangs, crashes, babbles or answers too much leaves the
//! prompt intact, says so, and changes no decision.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::harness::{Harness, ServerScript, Setup, is_error, tool};

/// Where the fixture previewer logs its questions.
struct PreviewLog {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl PreviewLog {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("questions.jsonl");
        Self { _dir: dir, path }
    }

    fn questions(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.path)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }
}

const TOOLS: [&str; 9] = [
    "diff_write",
    "text_write",
    "none_write",
    "hang_write",
    "crash_write",
    "garbage_write",
    "huge_write",
    "noid_write",
    "allow_write",
];

/// Wrap mode before one untrusted server whose tools all write, every tool
/// previewed by the fixture in `mode` with `timeout_ms`.
fn setup(log: &PreviewLog, mode: &str, timeout_ms: u64) -> Setup {
    let tools = TOOLS.into_iter().map(|name| tool(name, false)).collect();
    let mut setup = Setup::wrap(ServerScript::with_tools(tools), false);
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/previewer.py");
    setup.config.push_str(&format!(
        "\n[[previews]]\ncommand = [\"python3\", \"{fixture}\", \"{}\", \"{mode}\"]\ncommand_mode = \"{mode}\"\ntimeout_ms = {timeout_ms}\n",
        log.path.display()
    ));
    setup
}

/// Calls `name`, declines the question the person gets, and returns its
/// message; the call is refused and never reaches the server.
async fn asked_then_declined(gateway: &mut Harness, name: &str) -> String {
    let id = format!("c-{name}");
    gateway
        .send_raw(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": {"n": 1}}}).to_string())
        .await;
    let question = gateway.next_request().await;
    assert_eq!(question["method"], "elicitation/create", "{question}");
    let message = question["params"]["message"].as_str().unwrap().to_owned();
    gateway
        .send_raw(
            &json!({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "decline"}})
                .to_string(),
        )
        .await;
    let answer = gateway.response(&json!(id)).await;
    assert!(is_error(&answer), "{answer}");
    // The prompt is all there, whatever the previewer did.
    assert!(
        message.starts_with("hintgate: approve this tool call?\n"),
        "{message}"
    );
    assert!(
        message.contains(&format!("  tool:      {name}\n")),
        "{message}"
    );
    assert!(message.contains("\n  why you are asked:\n"), "{message}");
    message
}

async fn previews_in(mode: &str) {
    let log = PreviewLog::new();
    let mut gateway = Harness::start(setup(&log, mode, 1000)).await;
    gateway.initialize(json!({"elicitation": {}})).await;

    let diff = asked_then_declined(&mut gateway, "diff_write").await;
    assert!(
        diff.contains("  preview (from your previewer command):\n    | --- a/x\n    | +++ b/x\n    | @@ -1 +1 @@\n    | -old\n    | +new\n"),
        "{diff}"
    );
    let text = asked_then_declined(&mut gateway, "text_write").await;
    assert!(text.contains("    | would touch 3 rows\n"), "{text}");
    let none = asked_then_declined(&mut gateway, "none_write").await;
    assert!(
        none.contains("  no preview: nothing to show for this one\n"),
        "{none}"
    );

    // What the previewer was told: the decision hook's question.
    let question = &log.questions()[0];
    assert_eq!(question["tool"]["name"], "diff_write");
    assert_eq!(question["arguments"], json!({"n": 1}));
    assert_eq!(question["hintgate"]["verdict"], "ask");

    for (name, why) in [
        (
            "hang_write",
            "no preview: the previewer did not answer within 1000 ms",
        ),
        (
            "garbage_write",
            "no preview: the previewer answered what is not a preview (not one JSON object)",
        ),
        (
            "huge_write",
            "no preview: the previewer answered a line over 65536 bytes",
        ),
        (
            "allow_write",
            "no preview: the previewer answered what is not a preview (an unknown key `reason`)",
        ),
        ("crash_write", "no preview: the previewer closed its output"),
    ] {
        let message = asked_then_declined(&mut gateway, name).await;
        assert!(message.contains(why), "{name}: {message}");
    }
    // And it goes on previewing (a persistent one is started again).
    let again = asked_then_declined(&mut gateway, "diff_write").await;
    assert!(again.contains("    | +new\n"), "{again}");
    assert!(
        gateway.calls_received("fx").is_empty(),
        "nothing was approved"
    );
    gateway.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persistent_previewer_adds_its_preview_and_its_failures_leave_the_prompt_intact() {
    previews_in("persistent").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_call_previewer_adds_its_preview_and_its_failures_leave_the_prompt_intact() {
    previews_in("per-call").await;
}
