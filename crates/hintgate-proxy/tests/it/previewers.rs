//! The user's previewer command (`[[previews]] command`, design §4.3), run
//! as a real process (`tests/fixtures/previewer.py`) in front of a scripted
//! untrusted server: its preview reaches the person with the prompt, and a
//! previewer that hangs, crashes, babbles or answers too much leaves the
//! prompt intact, says so, and changes no decision.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::harness::{Behaviour, Harness, ServerScript, Setup, is_error, tool};

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
    let mut gateway = Harness::start(setup(&log, mode, 5000)).await;
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
            "no preview: the previewer did not answer within 5000 ms",
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

/// Wrap mode before one scripted server (trusted or not) whose `edit`
/// tool writes and is previewed by the server's own dry run (`dryRun`).
fn dry_run_setup(script: ServerScript, trusted: bool) -> Setup {
    let mut setup = Setup::wrap(script, trusted);
    setup
        .config
        .push_str("\n[[previews]]\ntool = \"edit\"\ndry_run_argument = \"dryRun\"\n");
    setup
}

/// Calls `edit`, and returns the question the person gets.
async fn edit_asked(gateway: &mut Harness) -> Value {
    gateway
        .send_raw(r#"{"jsonrpc":"2.0","id":"e1","method":"tools/call","params":{"name":"edit","arguments":{"n":1}}}"#)
        .await;
    let question = gateway.next_request().await;
    assert_eq!(question["method"], "elicitation/create", "{question}");
    question
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_servers_dry_run_is_shown_as_its_claim_and_the_call_runs_as_asked() {
    let script = ServerScript::with_tools(vec![tool("edit", false)]);
    let mut gateway = Harness::start(dry_run_setup(script, true)).await;
    gateway.initialize(json!({"elicitation": {}})).await;
    let question = edit_asked(&mut gateway).await;
    let message = question["params"]["message"].as_str().unwrap();
    // The scripted server answers with the arguments it got: the dry run
    // is the call with `dryRun` set.
    assert!(
        message.contains("  preview (the server's own dry run: its claim, which hintgate does not check):\n    | {\"dryRun\":true,\"n\":1}\n"),
        "{message}"
    );
    gateway
        .send_raw(&json!({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept", "content": {"approve": true}}}).to_string())
        .await;
    let answer = gateway.response(&json!("e1")).await;
    assert!(!is_error(&answer), "{answer}");
    let calls = gateway.calls_received("fx");
    assert_eq!(calls.len(), 2, "the dry run, then the call: {calls:?}");
    assert_eq!(
        calls[0]["params"]["arguments"],
        json!({"n": 1, "dryRun": true})
    );
    assert_eq!(calls[1]["params"]["arguments"], json!({"n": 1}));
    gateway.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_server_is_never_sent_a_dry_run_and_a_silent_one_leaves_the_prompt() {
    let script = ServerScript::with_tools(vec![tool("edit", false)]);
    let mut gateway = Harness::start(dry_run_setup(script, false)).await;
    gateway.initialize(json!({"elicitation": {}})).await;
    let question = edit_asked(&mut gateway).await;
    let message = question["params"]["message"].as_str().unwrap();
    assert!(
        message.contains(
            "  no preview: a dry run is asked only of a trusted server, and `fx` is not trusted\n"
        ),
        "{message}"
    );
    assert!(gateway.calls_received("fx").is_empty(), "nothing was sent");
    gateway.close().await;

    // A trusted server that never answers its dry run: the person is asked
    // all the same, once the call timeout has passed.
    let script =
        ServerScript::with_tools(vec![tool("edit", false)]).answering("edit", Behaviour::Hang);
    let mut gateway = Harness::start(dry_run_setup(script, true).with_call_timeout(1)).await;
    gateway.initialize(json!({"elicitation": {}})).await;
    let question = edit_asked(&mut gateway).await;
    let message = question["params"]["message"].as_str().unwrap();
    assert!(
        message
            .contains("  no preview: the server's dry run failed: it did not answer within 1 s\n"),
        "{message}"
    );
    assert!(message.contains("\n  why you are asked:\n"), "{message}");
    gateway.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_hosts_approval_is_for_the_diff_it_was_shown_and_a_changed_file_is_asked_again() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let file = root.join("notes.txt");
    std::fs::write(&file, "old\n").unwrap();
    let script = ServerScript::with_tools(vec![tool("save", false)]);
    let mut setup = Setup::wrap(script, false);
    setup.config.push_str(&format!(
        "\n[[previews]]\ntool = \"save\"\nfiles = {{ path = \"path\", content = \"text\", roots = [{:?}] }}\n",
        root.display().to_string()
    ));
    let mut gateway = Harness::start(setup).await;
    let capabilities = json!({"elicitation": {"form": {}}});
    let path = file.display().to_string();
    let arguments = json!({"path": path, "text": "new\n"});
    let asked = gateway
        .modern_request(
            "tools/call",
            json!({"name": "save", "arguments": arguments}),
            capabilities.clone(),
        )
        .await;
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    let message = asked["result"]["inputRequests"]["hintgate/approve"]["params"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains("    | -old\n    | +new\n"), "{message}");

    // The file changes before the host comes back with the approval.
    std::fs::write(&file, "changed\n").unwrap();
    let approve = json!({"hintgate/approve": {"action": "accept", "content": {"approve": true}}});
    let retried = gateway
        .modern_request(
            "tools/call",
            json!({"name": "save", "arguments": arguments,
                   "requestState": asked["result"]["requestState"], "inputResponses": approve}),
            capabilities.clone(),
        )
        .await;
    assert_eq!(
        retried["result"]["resultType"], "input_required",
        "asked again: {retried}"
    );
    let again = retried["result"]["inputRequests"]["hintgate/approve"]["params"]["message"]
        .as_str()
        .unwrap();
    assert!(
        again.starts_with("hintgate: the file changed after you were asked about this call")
            && again.contains("    | -changed\n    | +new\n"),
        "{again}"
    );
    assert!(
        gateway.calls_received("fx").is_empty(),
        "not sent on the old approval"
    );

    // Approved as it is now, it runs.
    let approved = gateway
        .modern_request(
            "tools/call",
            json!({"name": "save", "arguments": arguments,
                   "requestState": retried["result"]["requestState"], "inputResponses": approve}),
            capabilities,
        )
        .await;
    assert!(!is_error(&approved), "{approved}");
    assert_eq!(gateway.calls_received("fx").len(), 1);
    gateway.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standing_approval_still_runs_unprompted_and_the_preview_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let file = root.join("notes.txt");
    std::fs::write(&file, "old\n").unwrap();
    // Trusted, and not destructive: it may be remembered for the session.
    let save = json!({"name": "save", "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": false, "destructiveHint": false, "openWorldHint": false}});
    let mut setup = Setup::wrap(ServerScript::with_tools(vec![save]), true);
    setup.config.push_str(&format!(
        "\n[[previews]]\ntool = \"save\"\nfiles = {{ path = \"path\", content = \"text\", roots = [{:?}] }}\n",
        root.display().to_string()
    ));
    let mut gateway = Harness::start(setup).await;
    gateway.initialize(json!({"elicitation": {}})).await;
    let path = file.display().to_string();
    gateway
        .send_raw(
            &json!({"jsonrpc": "2.0", "id": "s1", "method": "tools/call",
            "params": {"name": "save", "arguments": {"path": path, "text": "one\n"}}})
            .to_string(),
        )
        .await;
    let question = gateway.next_request().await;
    assert!(
        question["params"]["message"]
            .as_str()
            .unwrap()
            .contains("    | +one\n")
    );
    gateway
        .send_raw(
            &json!({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept",
            "content": {"approve": true, "remember": "this tool for the rest of this session"}}})
            .to_string(),
        )
        .await;
    assert!(!is_error(&gateway.response(&json!("s1")).await));
    // The next call runs without a prompt: the approval is for the tool.
    let second = gateway
        .call("save", json!({"path": path, "text": "two\n"}))
        .await;
    assert!(!is_error(&second), "{second}");
    assert_eq!(
        gateway.requests.len(),
        1,
        "asked once: {:?}",
        gateway.requests
    );
    let store = gateway.close().await;
    let records = store.call_records();
    let last = records.last().unwrap();
    assert_eq!(last["approver"], "remembered-approval", "{last}");
    assert_eq!(last["preview"]["source"], "files", "{last}");
    assert!(
        last["preview"]["text"]
            .as_str()
            .unwrap()
            .contains("-old\n+two\n"),
        "{last}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preview_keeps_no_secret_in_the_store_though_the_person_sees_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let file = root.join("env");
    std::fs::write(
        &file,
        "USER=me\nOLD=ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
    )
    .unwrap();
    let mut setup = Setup::wrap(ServerScript::with_tools(vec![tool("save", false)]), false);
    setup.config.push_str(&format!(
        "\n[[previews]]\ntool = \"save\"\nfiles = {{ path = \"path\", content = \"text\", roots = [{:?}] }}\n",
        root.display().to_string()
    ));
    let mut gateway = Harness::start(setup).await;
    gateway.initialize(json!({"elicitation": {}})).await;
    let path = file.display().to_string();
    let secret = "ghp_0123456789abcdefghijklmnopqrstuvwxyz";
    for (id, text) in [
        ("one-line", format!("TOKEN={secret}")),
        ("lines", format!("USER=me\nTOKEN={secret}\n")),
    ] {
        gateway
            .send_raw(
                &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": "save", "arguments": {"path": path, "text": text}}})
                .to_string(),
            )
            .await;
        let question = gateway.next_request().await;
        // The person is shown what the call would write.
        let message = question["params"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("    | +TOKEN={secret}")),
            "{message}"
        );
        gateway
            .send_raw(
                &json!({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "decline"}})
                    .to_string(),
            )
            .await;
        assert!(is_error(&gateway.response(&json!(id)).await));
    }
    let store = gateway.close().await;
    let records = store.call_records();
    assert_eq!(records.len(), 2);
    for record in &records {
        let kept = record["preview"].to_string();
        assert!(!kept.contains("ghp_"), "{kept}");
        assert!(
            record["preview"]["digest"]
                .as_str()
                .unwrap()
                .starts_with("sha256:")
        );
    }
    let one_line = records[0]["preview"]["text"].as_str().unwrap();
    assert!(
        one_line.contains("[withheld: a line that looks like a credential]"),
        "{one_line}"
    );
    assert!(
        records[1]["preview"]["none"]
            .as_str()
            .unwrap()
            .contains("withheld from the store"),
        "{}",
        records[1]
    );
}
