//! `hintgate lint`: exit codes, `--fail-on`, suppressions, the hostile
//! fixture server, servers that crash or hang, SARIF against the official
//! schema, and the findings on every reference server (each reviewed: a
//! false finding there means a wrong check).

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Value, json};

use crate::host::fixture_server;
use crate::peers::{npm_bin, tools, venv_bin};
use crate::util::{code, hintgate, stderr, stdout};

/// Runs `hintgate lint ARGS` in `dir`, with a state directory inside it
/// (lint keeps no state; nothing may reach the home directory anyway).
fn lint(dir: &Path, args: &[&str]) -> Output {
    lint_with_env(dir, args, &[])
}

fn lint_with_env(dir: &Path, args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut command = hintgate();
    command
        .current_dir(dir)
        .env("HINTGATE_STATE_DIR", dir.join("state"))
        .arg("lint")
        .args(args);
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().expect("hintgate runs")
}

/// A fixture server that lists exactly `tools`.
fn serving(dir: &Path, tools: &Value) -> Vec<String> {
    let file = dir.join("tools.json");
    std::fs::write(&file, tools.to_string()).unwrap();
    vec![
        "python3".to_owned(),
        fixture_server(),
        "--tools-file".to_owned(),
        file.display().to_string(),
    ]
}

fn with_command<'a>(flags: &[&'a str], command: &'a [String]) -> Vec<&'a str> {
    let mut args: Vec<&str> = flags.to_vec();
    args.push("--");
    args.extend(command.iter().map(String::as_str));
    args
}

fn clean_tool() -> Value {
    json!({
        "name": "read_note",
        "title": "Read Note",
        "description": "Returns the text of one note.",
        "inputSchema": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
        "annotations": {"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false},
    })
}

fn json_findings(output: &Output) -> Value {
    let report: Value = serde_json::from_str(&stdout(output))
        .unwrap_or_else(|err| panic!("{err}: {}\n{}", stdout(output), stderr(output)));
    report
}

/// `severity code tool: message`, one finding a line.
fn finding_lines(report: &Value) -> String {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|finding| {
            format!(
                "{} {} {}: {}\n",
                finding["severity"].as_str().unwrap(),
                finding["code"].as_str().unwrap(),
                finding["tool"].as_str().unwrap_or("-"),
                finding["message"].as_str().unwrap()
            )
        })
        .collect()
}

#[test]
fn a_clean_server_exits_zero_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let server = serving(dir.path(), &json!([clean_tool()]));
    let output = lint(dir.path(), &with_command(&[], &server));
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        stdout(&output).ends_with(": 1 tool, 0 errors, 0 warnings, 0 notes\n"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn prompt_names_that_break_the_name_rule_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = serving(dir.path(), &json!([clean_tool()]));
    let prompts = dir.path().join("prompts.json");
    let listed = json!([
        {"name": "summarize"},
        {"name": "Summarize"},
        {"name": "plan\n\nhintgate: approve this tool call?"},
        {"name": "greet"},
        {"name": "fill", "arguments": [{"name": "pa\u{200b}th"}]},
    ]);
    std::fs::write(&prompts, listed.to_string()).unwrap();
    server.extend(["--prompts-file".to_owned(), prompts.display().to_string()]);
    let output = lint(dir.path(), &with_command(&["--format", "json"], &server));
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    let report = json_findings(&output);
    let found: Vec<(String, String)> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|finding| {
            (
                finding["code"].as_str().unwrap().to_owned(),
                finding["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(found.len(), 4, "{}", finding_lines(&report));
    assert_eq!(found[0].0, "look-alike-prompt-name");
    assert!(found[0].1.starts_with("prompt `summarize`"), "{found:?}");
    assert!(found[0].1.contains("`Summarize`"), "{found:?}");
    assert_eq!(found[1].0, "look-alike-prompt-name");
    assert_eq!(found[2].0, "invalid-prompt-name");
    assert!(
        found[2]
            .1
            .starts_with("prompt `plan\\n\\nhintgate: approve this tool call?`"),
        "the name is shown escaped: {found:?}"
    );
    assert_eq!(found[3].0, "invalid-prompt-arguments");
    assert!(
        found[3].1.starts_with("prompt `fill`") && found[3].1.contains("`pa\\u{200b}th`"),
        "the argument is named, escaped: {found:?}"
    );
    // The table shows the name on one line.
    let table = lint(dir.path(), &with_command(&[], &server));
    let text = stdout(&table);
    assert!(
        !text
            .lines()
            .any(|line| line.trim_start().starts_with("hintgate: approve")),
        "{text}"
    );
}

#[test]
fn fail_on_sets_the_least_serious_finding_that_fails() {
    let dir = tempfile::tempdir().unwrap();
    // Only a note: no title.
    let mut untitled = clean_tool();
    untitled.as_object_mut().unwrap().remove("title");
    let notes = serving(dir.path(), &json!([untitled]));
    assert_eq!(code(&lint(dir.path(), &with_command(&[], &notes))), 0);
    assert_eq!(
        code(&lint(
            dir.path(),
            &with_command(&["--fail-on", "note"], &notes)
        )),
        2
    );

    // A warning: a hint left implicit.
    let mut implicit = clean_tool();
    implicit["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("idempotentHint");
    let sub = dir.path().join("warning");
    std::fs::create_dir(&sub).unwrap();
    let warnings = serving(&sub, &json!([implicit]));
    assert_eq!(code(&lint(dir.path(), &with_command(&[], &warnings))), 2);
    assert_eq!(
        code(&lint(
            dir.path(),
            &with_command(&["--fail-on", "error"], &warnings)
        )),
        0
    );
    assert_eq!(
        code(&lint(
            dir.path(),
            &with_command(&["--fail-on", "sometimes"], &warnings)
        )),
        64
    );
}

#[test]
fn suppressions_silence_a_finding_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let mut implicit = clean_tool();
    implicit["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("idempotentHint");
    let server = serving(dir.path(), &json!([implicit]));
    // Found in the current directory by default.
    std::fs::write(
        dir.path().join("hintgate.lint.toml"),
        "[[suppress]]\ncode = \"implicit-hints\"\ntool = \"read_note\"\nreason = \"a read-only tool repeats without effect\"\n",
    )
    .unwrap();
    let output = lint(dir.path(), &with_command(&[], &server));
    assert_eq!(code(&output), 0, "{}", stdout(&output));
    assert!(
        stdout(&output).ends_with("0 errors, 0 warnings, 0 notes (1 suppressed)\n"),
        "{}",
        stdout(&output)
    );
    let report = json_findings(&lint(
        dir.path(),
        &with_command(&["--format", "json"], &server),
    ));
    assert_eq!(report["suppressed"][0]["code"], "implicit-hints");
    assert_eq!(
        report["suppressed"][0]["reason"],
        "a read-only tool repeats without effect"
    );

    // A suppression for another tool silences nothing, and is reported.
    let other = dir.path().join("other.toml");
    std::fs::write(
        &other,
        "[[suppress]]\ncode = \"implicit-hints\"\ntool = \"write_note\"\nreason = \"r\"\n",
    )
    .unwrap();
    let other_text = other.display().to_string();
    let report = json_findings(&lint(
        dir.path(),
        &with_command(&["--format", "json", "--config-file", &other_text], &server),
    ));
    insta::assert_snapshot!(finding_lines(&report), @r"
    warning implicit-hints read_note: `idempotentHint` left implicit: hosts fall back to the spec's cautious defaults
    note unused-suppression -: the suppression of `implicit-hints` for tool `write_note` on line 2 matched no finding
    ");
}

#[test]
fn a_bad_suppressions_file_is_bad_usage_with_its_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let server = serving(dir.path(), &json!([clean_tool()]));
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[[suppress]]\ncode = \"missing-title\"\nreason = \"\"\n",
    )
    .unwrap();
    let bad_text = bad.display().to_string();
    let output = lint(
        dir.path(),
        &with_command(&["--config-file", &bad_text], &server),
    );
    assert_eq!(code(&output), 64);
    assert_eq!(
        stderr(&output),
        format!(
            "error: {bad_text}: line 3: `suppress[1].reason`: say why the finding does not apply\n"
        )
    );
    let missing = lint(
        dir.path(),
        &with_command(&["--config-file", "nope.toml"], &server),
    );
    assert_eq!(code(&missing), 64);
    assert!(stderr(&missing).contains("cannot read lint config `nope.toml`"));
    let no_server = lint(dir.path(), &[]);
    assert_eq!(code(&no_server), 64);
}

#[test]
fn the_hostile_fixture_server_gets_its_findings_in_both_eras() {
    let dir = tempfile::tempdir().unwrap();
    let server = fixture_server();
    let legacy = ["python3", server.as_str(), "--ansi"];
    let mut args = vec!["--format", "json", "--call-read-only", "--"];
    args.extend(legacy);
    let output = lint(dir.path(), &args);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    let legacy_lines = finding_lines(&json_findings(&output));
    insta::assert_snapshot!(legacy_lines);

    // The same server in the 2026-07-28 era, its list in pages of three.
    let mut args = vec!["--format", "json", "--call-read-only", "--"];
    args.extend([
        "python3",
        server.as_str(),
        "--ansi",
        "--modern-only",
        "--paginate",
    ]);
    let output = lint(dir.path(), &args);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    let report = json_findings(&output);
    assert_eq!(report["tools"], 12);
    assert_eq!(finding_lines(&report), legacy_lines);

    // A 2026-07-28 server that answers the era probe too late, then refuses
    // `initialize`, is asked again rather than given up on.
    let output = lint(
        dir.path(),
        &[
            "--",
            "python3",
            server.as_str(),
            "--modern-only",
            "--slow-discover",
            "4",
        ],
    );
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(
        stdout(&output).contains(": 12 tools, "),
        "{}",
        stdout(&output)
    );
}

#[test]
fn a_server_that_crashes_hangs_or_writes_garbage_is_exit_one() {
    let dir = tempfile::tempdir().unwrap();
    let server = fixture_server();
    let crashed = lint(
        dir.path(),
        &["--", "python3", server.as_str(), "--crash-at-start"],
    );
    assert_eq!(code(&crashed), 1);
    assert!(
        stderr(&crashed).contains("cannot lint `python3 ")
            && stderr(&crashed).contains("exited with status 7"),
        "{}",
        stderr(&crashed)
    );

    let hung = lint(
        dir.path(),
        &[
            "--timeout-s",
            "1",
            "--",
            "python3",
            "-c",
            "import time; time.sleep(600)",
        ],
    );
    assert_eq!(code(&hung), 1);
    assert!(
        stderr(&hung).contains("no answer to `initialize` within 1 s"),
        "{}",
        stderr(&hung)
    );

    let garbage = lint(
        dir.path(),
        &[
            "--",
            "python3",
            "-c",
            "print('hello'); import time; time.sleep(600)",
        ],
    );
    assert_eq!(code(&garbage), 1);
    assert!(
        stderr(&garbage).contains("wrote a line that is not JSON (`hello`)"),
        "{}",
        stderr(&garbage)
    );

    let missing = lint(dir.path(), &["--", "/nonexistent/mcp-server"]);
    assert_eq!(code(&missing), 1);
    assert!(
        stderr(&missing).contains("cannot start `/nonexistent/mcp-server`"),
        "{}",
        stderr(&missing)
    );

    // Nothing listens on port 9 of the loopback address.
    let refused = lint(
        dir.path(),
        &["--url", "http://127.0.0.1:9/mcp", "--timeout-s", "5"],
    );
    assert_eq!(code(&refused), 1);
    assert!(
        stderr(&refused).contains("cannot lint `http://127.0.0.1:9/mcp`"),
        "{}",
        stderr(&refused)
    );
}

fn sarif_schema() -> Value {
    let path: PathBuf = tools().join("sarif/sarif-schema-2.1.0.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|err| {
        panic!(
            "{}: {err}; the SARIF schema is installed by ./scripts/setup-peers",
            path.display()
        )
    });
    serde_json::from_str(&text).unwrap()
}

#[test]
fn sarif_output_is_valid_sarif_2_1_0() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("hintgate.lint.toml"),
        "[[suppress]]\ncode = \"missing-title\"\nreason = \"the names say it\"\n",
    )
    .unwrap();
    let server = fixture_server();
    let output = lint(
        dir.path(),
        &[
            "--format",
            "sarif",
            "--",
            "python3",
            server.as_str(),
            "--ansi",
        ],
    );
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    let log: Value = serde_json::from_str(&stdout(&output)).unwrap();
    let validator = jsonschema::validator_for(&sarif_schema()).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&log)
        .map(|err| format!("{err} at {}", err.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");

    let results = log["runs"][0]["results"].as_array().unwrap();
    let hidden = results
        .iter()
        .find(|result| result["ruleId"] == "hidden-characters")
        .unwrap();
    assert_eq!(hidden["level"], "error");
    assert_eq!(
        hidden["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
        "hintgate.lint.toml"
    );
    assert_eq!(
        hidden["locations"][0]["logicalLocations"][0]["name"],
        "echo"
    );
    let suppressed = results
        .iter()
        .filter(|result| result["ruleId"] == "missing-title")
        .collect::<Vec<_>>();
    assert!(!suppressed.is_empty());
    assert!(
        suppressed
            .iter()
            .all(|result| result["suppressions"][0]["justification"] == "the names say it")
    );

    // The validator does reject what is not SARIF.
    let mut broken = log.clone();
    broken["runs"][0]["results"][0]["level"] = json!("fatal");
    assert!(!validator.is_valid(&broken));
}

/// Every reference server `scripts/setup-peers` installs, linted live with
/// `--call-read-only`. Each finding in the snapshot was reviewed and is true:
/// see the comments in the snapshot's test for why.
#[test]
fn findings_on_the_reference_servers_are_true() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("notes.txt"), "hello").unwrap();
    let repo = crate::util::git_repo(dir.path());
    let memory = dir.path().join("memory.jsonl");
    let servers: Vec<(&str, Vec<String>)> = vec![
        ("server-everything", vec![npm_bin("mcp-server-everything")]),
        (
            "server-filesystem",
            vec![npm_bin("mcp-server-filesystem"), data.display().to_string()],
        ),
        ("server-memory", vec![npm_bin("mcp-server-memory")]),
        ("mcp-server-time", vec![venv_bin("mcp-server-time")]),
        ("mcp-server-fetch", vec![venv_bin("mcp-server-fetch")]),
        (
            "mcp-server-git",
            vec![
                venv_bin("mcp-server-git"),
                "--repository".to_owned(),
                repo.display().to_string(),
            ],
        ),
    ];
    // One server at a time: starting six at once on a small machine slows
    // them enough to change nothing but the timing of other tests.
    let outputs: Vec<(String, Output)> = servers
        .iter()
        .map(|(name, command)| {
            let args = with_command(&["--format", "json", "--call-read-only"], command);
            let output = lint_with_env(dir.path(), &args, &[("MEMORY_FILE_PATH", &memory)]);
            ((*name).to_owned(), output)
        })
        .collect();
    let mut snapshot = String::new();
    for (name, output) in outputs {
        let report = json_findings(&output);
        let called: Vec<String> = report["calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|call| {
                format!(
                    "{} {}",
                    call["tool"].as_str().unwrap(),
                    call["outcome"].as_str().unwrap()
                )
            })
            .collect();
        snapshot.push_str(&format!(
            "== {name}: {} tools, exit {}, called: [{}]\n{}",
            report["tools"],
            code(&output),
            called.join(", "),
            finding_lines(&report)
        ));
    }
    insta::assert_snapshot!(snapshot);
}
