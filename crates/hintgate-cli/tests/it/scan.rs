//! `hintgate scan` on a small machine: a temporary home and project whose
//! host configs point at a real reference server (`mcp-server-time`), the
//! hostile fixture server wrapped by `hintgate wrap`, a command that does
//! not exist, a server that never answers and an SSE server.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::host::fixture_server;
use crate::peers::venv_bin;
use crate::util::{code, stderr, stdout};

/// A temporary machine: `home/`, the project at `home/work/project`, and
/// room for state directories and logs outside both.
struct Machine {
    dir: tempfile::TempDir,
}

impl Machine {
    fn with(files: &[(&str, String)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("home/work/project")).unwrap();
        for (path, text) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        Self { dir }
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    /// `hintgate ARGS` run from the project, with this machine's home and
    /// `state` as the state directory.
    fn hintgate(&self, state: &str, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_hintgate"))
            .current_dir(self.path("home/work/project"))
            .env("HOME", self.path("home"))
            .env("HINTGATE_STATE_DIR", self.path(state))
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("APPDATA")
            .env_remove("CODEX_HOME")
            .env_remove("USERPROFILE")
            .env_remove("RUST_LOG")
            .args(args)
            .output()
            .unwrap()
    }

    /// Every file under the home directory (the project included), with its bytes.
    fn files(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        let mut out = BTreeMap::new();
        collect(&self.path("home"), &mut out);
        out
    }
}

fn collect(dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            collect(&entry.path(), out);
        } else {
            out.insert(entry.path(), std::fs::read(entry.path()).unwrap());
        }
    }
}

fn json_string(text: &str) -> String {
    Value::String(text.to_owned()).to_string()
}

/// The machine of the main test: Claude Code's user and local scopes, a
/// Cursor project config and a VS Code project config (JSONC).
fn machine() -> Machine {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("home/work/project");
    let fixture_log = dir.path().join("fixture.log");
    let claude = format!(
        r#"{{
  "numStartups": 3,
  "mcpServers": {{
    "time": {{
      "type": "stdio",
      "command": {time},
      "args": [],
      "env": {{}}
    }}
  }},
  "projects": {{
    {project}: {{
      "allowedTools": [],
      "mcpServers": {{
        "broken": {{
          "type": "stdio",
          "command": "hintgate-test-no-such-server",
          "args": ["--serve"]
        }}
      }}
    }}
  }}
}}
"#,
        time = json_string(&venv_bin("mcp-server-time")),
        project = json_string(&project.display().to_string()),
    );
    let cursor = format!(
        r#"{{
  "mcpServers": {{
    "fixture": {{
      "command": "python3",
      "args": [{fixture}],
      "env": {{"FIXTURE_LOG": {log}}}
    }}
  }}
}}
"#,
        fixture = json_string(&fixture_server()),
        log = json_string(&fixture_log.display().to_string()),
    );
    let vscode = r#"// Workspace servers, as in the VS Code MCP configuration reference.
{
  "servers": {
    // Starts, then never says a word.
    "silent": {"type": "stdio", "command": "sleep", "args": ["600"]},
    "legacy": {"type": "sse", "url": "http://127.0.0.1:9/sse"},
  },
}
"#;
    let machine = Machine { dir };
    for (path, text) in [
        ("home/.claude.json", claude),
        ("home/work/project/.cursor/mcp.json", cursor),
        ("home/work/project/.vscode/mcp.json", vscode.to_owned()),
    ] {
        let path = machine.path(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    machine
}

fn row<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["name"] == name)
        .unwrap_or_else(|| panic!("no row for `{name}`: {report:#}"))
}

#[test]
fn scan_checks_every_server_reports_the_broken_ones_and_changes_nothing() {
    let machine = machine();
    let wrapped = machine.hintgate(
        "wrap-state",
        &["wrap", "--host", "cursor", "--server", "fixture"],
    );
    assert_eq!(code(&wrapped), 0, "{}", stderr(&wrapped));
    let before = machine.files();

    let scan_args = ["scan", "--timeout-s", "30", "--jobs", "4"];
    let table = machine.hintgate("scan-state", &scan_args);
    let mut json_args = scan_args.to_vec();
    json_args.push("--json");
    let json = machine.hintgate("scan-state", &json_args);

    // Two servers could not be reached: exit 1, and every other server was
    // still checked.
    assert_eq!(code(&table), 1, "{}", stderr(&table));
    assert_eq!(code(&json), 1, "{}", stderr(&json));
    // Piped: no progress line.
    for output in [&table, &json] {
        let err = stderr(output);
        assert!(
            !err.contains("checking servers") && !err.contains('\r'),
            "progress on a pipe: {err}"
        );
    }

    let text = stdout(&table);
    insta::assert_snapshot!(
        text.replace("(os error 2)", "(os error)"),
        @r"
    HOST         SCOPE                 CONFIG              SERVER   WRAPPED  TOOLS  READ-ONLY  WRITE  DESTRUCTIVE  OPEN-WORLD  FINDINGS
    claude-code  user                  ~/.claude.json      time     no       2      2          0      0            0           2 notes
    claude-code  local ~/work/project  ~/.claude.json      broken   no       -      -          -      -            -           unreachable: cannot connect: cannot start `hintgate-test-no-such-server`: No such file or directory (os error)
    cursor       project               ./.cursor/mcp.json  fixture  yes      12     7          5      0            0           2 warnings, 12 notes
    vscode       project               ./.vscode/mcp.json  legacy   no       -      -          -      -            -           not checked: the legacy SSE transport
    vscode       project               ./.vscode/mcp.json  silent   no       -      -          -      -            -           unreachable: no answer to `initialize` within 30 s

    5 servers in 3 configs: 2 checked, 2 unreachable, 1 not checked
    "
    );

    let report: Value = serde_json::from_str(&stdout(&json))
        .unwrap_or_else(|err| panic!("{err}: {}", stdout(&json)));
    let names: Vec<&str> = report["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["time", "broken", "fixture", "legacy", "silent"]);

    // A real reference server: its two tools declare themselves read-only
    // and closed-world; the only findings are notes about missing titles.
    let time = row(&report, "time");
    assert_eq!(time["status"], "checked");
    assert_eq!(time["tools"], 2);
    assert_eq!(
        time["hints"],
        serde_json::json!({"read_only": 2, "write": 0, "destructive": 0, "open_world": 0})
    );
    assert_eq!(
        time["finding_counts"],
        serde_json::json!({"error": 0, "warning": 0, "note": 2})
    );
    assert!(
        time["findings"]
            .as_array()
            .unwrap()
            .iter()
            .all(|finding| finding["code"] == "missing-title" && finding["severity"] == "note")
    );

    // The wrapped server is linted through to the server behind the wrapper,
    // with the entry's environment.
    let fixture = row(&report, "fixture");
    assert_eq!(fixture["wrapped"], true);
    assert_eq!(fixture["transport"]["args"][0], "run");
    assert_eq!(fixture["checked"]["command"], "python3");
    assert_eq!(fixture["checked"]["args"][0], fixture_server());
    assert_eq!(fixture["checked"]["env_names"][0], "FIXTURE_LOG");
    assert_eq!(fixture["status"], "checked");
    assert_eq!(fixture["tools"], 12);
    let lie = fixture["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|finding| finding["code"] == "write-name-read-only")
        .expect("the fixture's lying tool is found");
    assert_eq!(lie["tool"], "delete_everything");
    assert_eq!(lie["severity"], "warning");
    let log = std::fs::read_to_string(machine.path("fixture.log")).unwrap();
    assert!(
        log.contains("start"),
        "the fixture server got its env: {log}"
    );

    // The broken ones are reported with their reason, not dropped.
    let broken = row(&report, "broken");
    assert_eq!(broken["status"], "unreachable");
    assert_eq!(broken["scope"], "local");
    assert!(broken["error"].as_str().unwrap().contains("cannot start"));
    assert!(broken["tools"].is_null());
    let silent = row(&report, "silent");
    assert_eq!(silent["status"], "unreachable");
    assert!(silent["error"].as_str().unwrap().contains("within 30 s"));
    let legacy = row(&report, "legacy");
    assert_eq!(legacy["status"], "not-checked");
    assert_eq!(legacy["error"], "the legacy SSE transport");

    // Nothing changed: every config byte for byte, no backup, no state.
    assert_eq!(machine.files(), before);
    assert!(!machine.path("scan-state").exists());
}

#[test]
fn an_unreadable_config_is_reported_with_its_line_and_fails_the_scan() {
    let machine = Machine::with(&[
        (
            "home/.gemini/settings.json",
            "{\n  \"mcpServers\": {\n    \"x\": {\"command\": \n}\n".to_owned(),
        ),
        (
            "home/work/project/.cursor/mcp.json",
            r#"{"mcpServers": {"remote": {"url": "http://127.0.0.1:9/sse", "type": "sse"}}}"#
                .to_owned(),
        ),
    ]);
    let output = machine.hintgate("state", &["scan"]);
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.contains("unreadable config: ~/.gemini/settings.json (gemini-cli): line 4"),
        "{text}"
    );
    assert!(
        text.ends_with(
            "1 server in 1 config: 0 checked, 0 unreachable, 1 not checked, 1 config unreadable\n"
        ),
        "{text}"
    );

    let json = machine.hintgate("state", &["scan", "--json"]);
    let report: Value = serde_json::from_str(&stdout(&json)).unwrap();
    assert_eq!(report["config_errors"][0]["host"], "gemini-cli");
    assert!(!machine.path("state").exists());
}

#[test]
fn scan_with_no_configs_says_so_and_succeeds() {
    let machine = Machine::with(&[]);
    let output = machine.hintgate("state", &["scan"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(stdout(&output).starts_with("no MCP servers found"));
}

#[test]
fn a_project_that_is_not_a_directory_is_bad_usage() {
    let machine = Machine::with(&[]);
    let output = machine.hintgate("state", &["scan", "--project", "no/such/dir"]);
    assert_eq!(code(&output), 64);
    assert!(stderr(&output).contains("`no/such/dir` is not a directory"));
    let output = machine.hintgate("state", &["scan", "--jobs", "0"]);
    assert_eq!(code(&output), 64);
}

#[test]
fn host_variable_references_are_expanded_as_the_host_would_or_named() {
    let time = PathBuf::from(venv_bin("mcp-server-time"));
    let config = format!(
        r#"{{"mcpServers": {{
            "time": {{"command": "${{env:SCAN_BIN_DIR}}/{}", "args": ["--local-timezone", "${{SCAN_TZ:-Etc/UTC}}"]}},
            "asks": {{"command": "${{input:command}}"}},
            "unset": {{"command": "${{SCAN_NOT_SET}}/server"}}
        }}}}"#,
        time.file_name().unwrap().to_str().unwrap()
    );
    let machine = Machine::with(&[("home/.cursor/mcp.json", config)]);
    let output = Command::new(env!("CARGO_BIN_EXE_hintgate"))
        .current_dir(machine.path("home/work/project"))
        .env("HOME", machine.path("home"))
        .env("SCAN_BIN_DIR", time.parent().unwrap())
        .env_remove("SCAN_TZ")
        .env_remove("SCAN_NOT_SET")
        .args(["scan", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    let time_row = row(&report, "time");
    assert_eq!(time_row["status"], "checked", "{time_row}");
    assert_eq!(time_row["tools"], 2);
    let asks = row(&report, "asks");
    assert_eq!(asks["status"], "not-checked");
    assert!(
        asks["error"]
            .as_str()
            .unwrap()
            .contains("asked of the person by the host")
    );
    let unset = row(&report, "unset");
    assert_eq!(unset["status"], "not-checked");
    assert_eq!(unset["error"], "variable `SCAN_NOT_SET` is not set here");
}
