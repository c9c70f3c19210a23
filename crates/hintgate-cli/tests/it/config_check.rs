//! `hintgate config check`.

use serde_json::Value;

use crate::util::{code, repo_root, run, stderr, stdout};

#[test]
fn a_clean_config_exits_0() {
    // The example refers to `${HOME}`; set it so the check does not depend
    // on the environment the tests run in.
    let output = crate::util::hintgate()
        .current_dir(repo_root())
        .args(["config", "check", "examples/hintgate.toml"])
        .env("HOME", "/home/me")
        .output()
        .unwrap();
    assert_eq!(code(&output), 0, "{}", stdout(&output));
    assert_eq!(stdout(&output), "examples/hintgate.toml: ok\n");
}

#[test]
fn every_problem_is_reported_with_its_position_and_the_exit_is_64() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("hintgate.toml"),
        "[gateway]\nprofle = \"ask-all\"\n\n[servers.fs]\ncommand = \"npx\"\ntrust = \"trsted\"\n\n[[rules]]\ntool = \"[\"\naction = \"deny\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("warn.toml"),
        "[servers.a]\nurl = \"http://example.com/mcp\"\n",
    )
    .unwrap();
    let output = run(
        dir.path(),
        &["config", "check", "hintgate.toml", "warn.toml"],
    );
    assert_eq!(code(&output), 64);
    insta::assert_snapshot!(stdout(&output));
}

#[test]
fn warnings_alone_exit_0() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("warn.toml"),
        "[servers.a]\nurl = \"http://example.com/mcp\"\n",
    )
    .unwrap();
    let output = run(dir.path(), &["config", "check", "warn.toml"]);
    assert_eq!(code(&output), 0);
    assert!(stdout(&output).contains("warn.toml: 0 errors and 1 warning"));
}

#[test]
fn json_output_gives_file_line_column_and_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("c.toml"), "[gateway]\nunattended = 1\n").unwrap();
    let output = run(dir.path(), &["config", "check", "--json", "c.toml"]);
    assert_eq!(code(&output), 64);
    let diagnostics: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(
        diagnostics,
        serde_json::json!([{
            "file": "c.toml", "line": 2, "column": 14, "severity": "error", "code": "wrong-type",
            "key": "gateway.unattended",
            "message": "`unattended` must be a boolean (`true` or `false`), not an integer"
        }])
    );
}

#[test]
fn a_missing_file_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(dir.path(), &["config", "check", "missing.toml"]);
    assert_eq!(code(&output), 64);
    assert!(stderr(&output).contains("cannot read config `missing.toml`"));
}

#[test]
fn unset_variables_are_warned_about_at_their_position() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("c.toml"),
        "[servers.search]\nurl = \"https://search.example/mcp\"\nheaders = { Authorization = \"Bearer ${HINTGATE_TEST_UNSET_TOKEN}\" }\n",
    )
    .unwrap();
    let output = crate::util::hintgate()
        .current_dir(dir.path())
        .args(["config", "check", "c.toml"])
        .env_remove("HINTGATE_TEST_UNSET_TOKEN")
        .output()
        .unwrap();
    assert_eq!(code(&output), 0, "a warning alone is not an error");
    let text = stdout(&output);
    assert!(
        text.contains("warning[unset-variable]: variable `HINTGATE_TEST_UNSET_TOKEN` is not set"),
        "{text}"
    );
    assert!(text.contains("c.toml:3:29"), "{text}");

    let set = crate::util::hintgate()
        .current_dir(dir.path())
        .args(["config", "check", "c.toml"])
        .env("HINTGATE_TEST_UNSET_TOKEN", "x")
        .output()
        .unwrap();
    assert_eq!(stdout(&set), "c.toml: ok\n");
}

#[test]
fn issue_11_servers_whose_tool_names_collide_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("hintgate.toml"),
        "[servers.docs]\ncommand = \"a\"\n\n[servers.docs_]\ncommand = \"b\"\n",
    )
    .unwrap();
    let output = run(dir.path(), &["config", "check", "hintgate.toml"]);
    assert_eq!(code(&output), 64, "{}", stdout(&output));
    let text = stdout(&output);
    assert!(
        text.contains("error[colliding-server-names]: servers `docs` and `docs_`"),
        "{text}"
    );
    assert!(text.contains("--> hintgate.toml:4:10"), "{text}");
    assert!(text.contains("`docs` is at line 1"), "{text}");
}

#[test]
fn a_read_only_table_is_checked_like_any_server_table() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ro.toml"),
        "[servers.db]\ncommand = \"npx\"\nargs = [\"pg\", \"${DB_WRITER_URL}\"]\n\n[servers.db.read_only]\nargs = [\"pg\", \"${DB_READER_URL}\"]\nvouched = true\n\n[servers.same]\ncommand = \"npx\"\nargs = [\"pg\", \"${DB_WRITER_URL}\"]\n\n[servers.same.read_only]\nvouch = true\n",
    )
    .unwrap();
    let output = crate::util::hintgate()
        .current_dir(dir.path())
        .args(["config", "check", "--json", "ro.toml"])
        .env("DB_WRITER_URL", "postgres://writer@db/app")
        .env_remove("DB_READER_URL")
        .output()
        .unwrap();
    assert_eq!(code(&output), 64, "{}", stdout(&output));
    let diagnostics: Value = serde_json::from_str(&stdout(&output)).unwrap();
    let found: Vec<(String, String, u64)> = diagnostics
        .as_array()
        .unwrap()
        .iter()
        .map(|diagnostic| {
            (
                diagnostic["code"].as_str().unwrap_or_default().to_owned(),
                diagnostic["key"].as_str().unwrap_or_default().to_owned(),
                diagnostic["line"].as_u64().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        found,
        [
            (
                "unset-variable".to_owned(),
                "servers.db.read_only.args[1]".to_owned(),
                6
            ),
            (
                "unknown-key".to_owned(),
                "servers.db.read_only.vouched".to_owned(),
                7
            ),
            (
                "read-only-unchanged".to_owned(),
                "servers.same.read_only".to_owned(),
                13
            ),
        ],
        "{}",
        stdout(&output)
    );
}

#[test]
fn a_vouched_server_without_a_sandbox_is_warned_about_in_the_words_of_explain() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ro.toml"),
        "[servers.db]\ncommand = \"npx\"\nargs = [\"pg\", \"--writer\"]\n\n[servers.db.read_only]\nargs = [\"pg\", \"--reader\"]\nvouch = true\n",
    )
    .unwrap();
    let output = run(dir.path(), &["config", "check", "ro.toml"]);
    assert_eq!(code(&output), 0, "a warning alone: {}", stdout(&output));
    let text = stdout(&output);
    assert!(
        text.contains("warning[vouch-without-sandbox]: server `db` runs its read-only instance with credentials vouched for, and no sandbox"),
        "{text}"
    );
    assert!(
        text.contains("--> ro.toml:7:9 (key `servers.db.read_only.vouch`)"),
        "{text}"
    );
    assert!(
        text.contains("= help: add a `[servers.db.sandbox]` table"),
        "{text}"
    );
    assert!(text.contains("ro.toml: 0 errors and 1 warning"), "{text}");

    // `--json` has the code, and the message `explain` gives as a caveat.
    let output = run(dir.path(), &["config", "check", "--json", "ro.toml"]);
    let diagnostics: Value = serde_json::from_str(&stdout(&output)).unwrap();
    let warning = &diagnostics[0];
    assert_eq!(warning["code"], "vouch-without-sandbox", "{diagnostics}");
    assert_eq!(warning["severity"], "warning");
    std::fs::write(
        dir.path().join("read.json"),
        r#"{"name":"count","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}"#,
    )
    .unwrap();
    let explained = run(
        dir.path(),
        &[
            "explain",
            "--config",
            "ro.toml",
            "--server",
            "db",
            "--tool",
            "read.json",
            "--json",
        ],
    );
    assert_eq!(code(&explained), 0, "{}", stderr(&explained));
    let explanation: Value = serde_json::from_str(&stdout(&explained)).unwrap();
    let caveat = format!(
        "{}; {}",
        warning["message"].as_str().unwrap(),
        warning["help"].as_str().unwrap()
    );
    assert_eq!(explanation["caveats"], serde_json::json!([caveat]));

    // A sandbox covers what the credentials do not: no warning.
    std::fs::write(
        dir.path().join("sandboxed.toml"),
        "[servers.db]\ncommand = \"npx\"\nargs = [\"pg\", \"--writer\"]\n\n[servers.db.read_only]\nargs = [\"pg\", \"--reader\"]\nvouch = true\n\n[servers.db.sandbox]\nnetwork = true\n",
    )
    .unwrap();
    let output = run(dir.path(), &["config", "check", "sandboxed.toml"]);
    assert_eq!(stdout(&output), "sandboxed.toml: ok\n");
}
