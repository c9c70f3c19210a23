//! `hintgate explain`: output, exit codes and bad input.

use serde_json::Value;

use crate::util::{code, hintgate, repo_root, run, stderr, stdout};

#[test]
fn the_bundled_example_explains_every_kind_of_decision() {
    let output = run(&repo_root(), &["explain", "--example"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let text = stdout(&output);
    for expected in [
        "verdict:   allow",
        "verdict:   ask",
        "verdict:   deny",
        "rule-deny",
        "open-world-after-private-data",
        "the server says this tool only reads (unverified)",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    let json = run(&repo_root(), &["explain", "--example", "--json"]);
    let explanations: Value = serde_json::from_str(&stdout(&json)).unwrap();
    let verdicts: Vec<&str> = explanations
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(
        verdicts,
        ["allow", "ask", "ask", "ask", "deny", "allow", "ask", "ask"]
    );
}

#[test]
fn a_denial_exits_2_and_a_question_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("t.json"), r#"{"name":"delete_all"}"#).unwrap();
    let ask = run(
        dir.path(),
        &["explain", "--server", "s", "--tool", "t.json"],
    );
    assert_eq!(code(&ask), 0);
    assert!(stdout(&ask).contains("verdict:   ask"));
    let deny = run(
        dir.path(),
        &[
            "explain",
            "--server",
            "s",
            "--tool",
            "t.json",
            "--unattended",
        ],
    );
    assert_eq!(code(&deny), 2);
    assert!(stdout(&deny).contains("unattended"));
}

#[test]
fn wrap_mode_shows_the_wrapped_command_as_identity() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("t.json"),
        r#"{"name":"write_file","annotations":{"readOnlyHint":false}}"#,
    )
    .unwrap();
    let output = run(
        dir.path(),
        &[
            "explain",
            "--server",
            "fs",
            "--tool",
            "t.json",
            "--json",
            "--",
            "npx",
            "-y",
            "@modelcontextprotocol/server-filesystem",
            "/data",
        ],
    );
    let got: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert!(
        got["prompt"]
            .as_str()
            .unwrap()
            .contains("identity:  npx -y @modelcontextprotocol/server-filesystem /data")
    );
    for key in [
        "verdict",
        "reasons",
        "declared",
        "effective",
        "display_name",
        "visible",
        "prompt",
    ] {
        assert!(got.get(key).is_some(), "missing `{key}`");
    }
    assert_eq!(got["declared"]["readOnlyHint"], Value::Bool(false));
    assert_eq!(got["declared"]["destructiveHint"], Value::Null);
    assert_eq!(got["effective"]["destructiveHint"], Value::Bool(true));
}

#[test]
fn bad_input_files_are_usage_errors_that_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("broken.json"), "{\"name\": ").unwrap();
    let output = run(
        dir.path(),
        &["explain", "--server", "s", "--tool", "broken.json"],
    );
    assert_eq!(code(&output), 64);
    assert!(
        stderr(&output).contains("tool definition `broken.json` is not JSON"),
        "{}",
        stderr(&output)
    );

    let missing = run(
        dir.path(),
        &["explain", "--server", "s", "--tool", "nope.json"],
    );
    assert_eq!(code(&missing), 64);
    assert!(stderr(&missing).contains("cannot read tool definition `nope.json`"));

    std::fs::write(dir.path().join("t.json"), r#"{"name":"x"}"#).unwrap();
    std::fs::write(dir.path().join("args.json"), "[1, 2]").unwrap();
    let not_object = run(
        dir.path(),
        &[
            "explain",
            "--server",
            "s",
            "--tool",
            "t.json",
            "--args",
            "args.json",
        ],
    );
    assert_eq!(code(&not_object), 64);
    assert!(stderr(&not_object).contains("must be a JSON object"));
}

#[test]
fn an_unknown_server_and_a_bad_config_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("t.json"), r#"{"name":"x"}"#).unwrap();
    std::fs::write(
        dir.path().join("ok.toml"),
        "[servers.fs]\ncommand = \"x\"\n",
    )
    .unwrap();
    let unknown = run(
        dir.path(),
        &[
            "explain", "--config", "ok.toml", "--server", "github", "--tool", "t.json",
        ],
    );
    assert_eq!(code(&unknown), 64);
    assert!(stderr(&unknown).contains("unknown server `github`; the config has `fs`"));

    std::fs::write(
        dir.path().join("bad.toml"),
        "[servers.fs]\ncommand = \"x\"\ntrust = \"yes\"\n",
    )
    .unwrap();
    let bad = run(
        dir.path(),
        &[
            "explain", "--config", "bad.toml", "--server", "fs", "--tool", "t.json",
        ],
    );
    assert_eq!(code(&bad), 64);
    assert!(stderr(&bad).contains("bad.toml:3:9"), "{}", stderr(&bad));
}

#[test]
fn usage_errors_exit_64_and_help_lists_the_exit_codes() {
    let output = hintgate()
        .args(["explain", "--frobnicate"])
        .output()
        .unwrap();
    assert_eq!(code(&output), 64);
    let help = hintgate().arg("--help").output().unwrap();
    assert_eq!(code(&help), 0);
    let text = stdout(&help);
    assert!(text.contains("64  bad usage"), "{text}");
    assert!(text.contains("2   a denial"));
    let conflicting = hintgate()
        .args([
            "explain", "--config", "x.toml", "--trust", "trusted", "--server", "s", "--tool",
            "t.json",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&conflicting), 64);
}

#[test]
fn explain_shows_the_instance_and_that_a_vouched_server_has_no_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("hintgate.toml"),
        "[servers.db]\ncommand = \"npx\"\nargs = [\"pg\", \"${W}\"]\n\n[servers.db.read_only]\nargs = [\"pg\", \"${R}\"]\nvouch = true\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("read.json"),
        r#"{"name":"count","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}"#,
    )
    .unwrap();
    std::fs::write(
        dir.path().join("write.json"),
        r#"{"name":"run_sql","inputSchema":{"type":"object"}}"#,
    )
    .unwrap();
    let explain = |tool: &str| {
        run(
            dir.path(),
            &[
                "explain",
                "--config",
                "hintgate.toml",
                "--server",
                "db",
                "--tool",
                tool,
            ],
        )
    };
    let read = explain("read.json");
    assert_eq!(code(&read), 0, "{}", stderr(&read));
    let text = stdout(&read);
    for expected in [
        "verdict:   allow",
        "read-only-credentials: the tool runs with read-only credentials",
        "instance:  read-only (the server's read-only credentials)",
        "caveat:    server `db` runs its read-only instance with credentials vouched for, and no sandbox",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    let write = explain("write.json");
    let text = stdout(&write);
    assert!(text.contains("verdict:   ask"), "{text}");
    assert!(
        text.contains("instance:  full (the server's full credentials)"),
        "{text}"
    );
    assert!(
        text.contains("| hintgate: approve this tool call?"),
        "{text}"
    );
    assert!(text.contains("|   instance:  full"), "{text}");
}
