//! `hintgate wrap` and `hintgate unwrap` on real-shaped configs of every
//! host (`tests/fixtures/hosts/`), copied to a temporary home and project.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::util::{code, repo_root, stderr, stdout};

/// A temporary copy of the fixture home and project.
struct Machine {
    dir: tempfile::TempDir,
}

impl Machine {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hosts");
        for part in ["home", "project"] {
            copy_tree(&fixtures.join(part), &dir.path().join(part));
        }
        Self { dir }
    }

    /// A machine with nothing but `files` (path under the temporary root).
    fn with(files: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        for part in ["home", "project"] {
            std::fs::create_dir_all(dir.path().join(part)).unwrap();
        }
        for (path, text) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        Self { dir }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.root().join(relative)
    }

    fn read(&self, relative: &str) -> String {
        std::fs::read_to_string(self.path(relative)).unwrap()
    }

    /// `hintgate ARGS` as a person on this machine runs it: home, project
    /// (the current directory) and state directory all in the temporary
    /// directory.
    fn hintgate(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_hintgate"))
            .current_dir(self.path("project"))
            .env("HOME", self.path("home"))
            .env("APPDATA", self.path("home/AppData/Roaming"))
            .env("HINTGATE_STATE_DIR", self.path("state"))
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("CODEX_HOME")
            .env_remove("USERPROFILE")
            .args(args)
            .output()
            .unwrap()
    }

    /// Every file under home and project, with its bytes.
    fn files(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        let mut out = BTreeMap::new();
        for part in ["home", "project"] {
            collect(&self.path(part), self.root(), &mut out);
        }
        out
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn collect(dir: &Path, root: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            collect(&entry.path(), root, out);
        } else {
            let relative = entry.path().strip_prefix(root).unwrap().to_owned();
            out.insert(relative, std::fs::read(entry.path()).unwrap());
        }
    }
}

fn backups(files: &BTreeMap<PathBuf, Vec<u8>>) -> Vec<&PathBuf> {
    files
        .keys()
        .filter(|path| path.to_string_lossy().contains(".hintgate-backup-"))
        .collect()
}

fn hintgate_path() -> String {
    std::fs::canonicalize(env!("CARGO_BIN_EXE_hintgate"))
        .unwrap()
        .display()
        .to_string()
}

fn lines_starting(output: &Output, prefix: &str) -> Vec<String> {
    stdout(output)
        .lines()
        .filter(|line| line.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

#[test]
fn wrap_then_unwrap_gives_back_every_host_config_byte_for_byte() {
    let machine = Machine::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let private = std::fs::Permissions::from_mode(0o600);
        std::fs::set_permissions(machine.path("home/.claude.json"), private).unwrap();
    }
    let before = machine.files();

    let wrapped = machine.hintgate(&["wrap"]);
    assert_eq!(code(&wrapped), 0, "{}", stderr(&wrapped));
    let names: Vec<String> = lines_starting(&wrapped, "wrapped  ")
        .iter()
        .map(|line| line.split("  ").nth(2).unwrap().to_owned())
        .collect();
    assert_eq!(
        names,
        [
            "filesystem",
            "time",
            "github",
            "sqlite", // Claude Desktop, three platforms
            "playwright",
            "sentry",
            "db", // Claude Code: user, local, project
            "linear",
            "local-tool",
            "fetch", // Cursor
            "github",
            "everything",
            "time", // VS Code
            "github-remote",
            "fs", // Windsurf
            "time",
            "docs",
            "no-args", // Codex
            "pythonTools",
            "httpServer",
            "git", // Gemini CLI
            "local-mcp-server",
            "legacy-server",
            "remote-mcp-server", // Zed
            "Filesystem",
            "memory",
            "Remote docs", // Continue, user config.yaml
            "sqlite",
            "Browser search",
            "notes-db", // Continue, project blocks: JSON and YAML
        ]
    );
    let out = stdout(&wrapped);
    assert!(out.contains("already wrapped  claude-desktop (user)  memory"));
    let skipped: Vec<String> = lines_starting(&wrapped, "skipped  ")
        .iter()
        .map(|line| {
            let (_, reason) = line.split_once(": ").unwrap();
            format!("{}: {reason}", line.split("  ").nth(2).unwrap())
        })
        .collect();
    assert_eq!(
        skipped,
        [
            "legacy-events: it uses the legacy SSE transport, which `hintgate run` does not speak",
            "figma: this version wraps URL servers of JSON and YAML configs only",
            "sseServer: it uses the legacy SSE transport, which `hintgate run` does not speak",
            "mcp-server-postgres: started by an editor extension, not by a command in this file",
        ]
    );

    let after_wrap = machine.files();
    let new_backups = backups(&after_wrap);
    assert_eq!(
        new_backups.len(),
        18,
        "one backup per file changed: {new_backups:?}"
    );
    for backup in &new_backups {
        let original = PathBuf::from(
            backup
                .to_string_lossy()
                .split(".hintgate-backup-")
                .next()
                .unwrap(),
        );
        assert_eq!(
            after_wrap[*backup],
            before[&original],
            "{}",
            backup.display()
        );
    }

    // Every wrapped strict-JSON file is still JSON, and the entries run
    // hintgate with the server's own command line after `--`.
    let hintgate = hintgate_path();
    let desktop: Value =
        serde_json::from_str(&machine.read("home/.config/Claude/claude_desktop_config.json"))
            .unwrap();
    assert_eq!(desktop["globalShortcut"], "Ctrl+Alt+Space");
    assert_eq!(
        desktop["mcpServers"]["time"],
        json!({
            "command": hintgate,
            "args": ["run", "--name", "time", "--", "uvx", "mcp-server-time", "--local-timezone=Europe/Zürich"],
            "env": {"TZ": "Europe/Zurich"}
        })
    );
    let cursor: Value = serde_json::from_str(&machine.read("home/.cursor/mcp.json")).unwrap();
    assert_eq!(
        cursor["mcpServers"]["linear"],
        json!({
            "command": hintgate,
            "args": ["run", "--name", "linear", "--url", "https://mcp.linear.app/mcp",
                     "--header", "Authorization: Bearer ${env:LINEAR_TOKEN}"]
        }),
        "a URL server is reached through `hintgate run --url`"
    );
    assert_eq!(
        cursor["mcpServers"]["local-tool"]["args"],
        json!([
            "run",
            "--name",
            "local-tool",
            "--",
            "/opt/tools/bin/mcp-tool"
        ])
    );
    let claude: Value = serde_json::from_str(&machine.read("home/.claude.json")).unwrap();
    assert_eq!(claude["numStartups"], 42);
    assert_eq!(
        claude["projects"]["/home/zoe/src/app"]["mcpServers"]["sentry"]["type"],
        "stdio"
    );
    for strict in [
        "home/Library/Application Support/Claude/claude_desktop_config.json",
        "home/AppData/Roaming/Claude/claude_desktop_config.json",
        "project/.mcp.json",
        "project/.cursor/mcp.json",
        "home/.codeium/windsurf/mcp_config.json",
        "home/.gemini/settings.json",
        "project/.gemini/settings.json",
        "project/.continue/mcpServers/from-claude.json",
    ] {
        let parsed: Result<Value, _> = serde_json::from_str(&machine.read(strict));
        assert!(parsed.is_ok(), "{strict} is still JSON");
    }
    // Only the entry changes: the one-line file keeps its layout.
    assert_eq!(
        machine.read("project/.cursor/mcp.json"),
        format!(
            r#"{{"mcpServers":{{"fetch":{{"command":"{hintgate}","args":["run", "--name", "fetch", "--", "uvx", "mcp-server-fetch"]}}}}}}"#
        )
    );
    // The JSONC file keeps its comments; the CRLF file its line endings.
    let vscode = machine.read("project/.vscode/mcp.json");
    assert!(vscode.starts_with("// VS Code workspace MCP servers."));
    assert!(vscode.contains("      // the reference server with every feature\n"));
    let windows = machine.read("home/AppData/Roaming/Claude/claude_desktop_config.json");
    assert!(!windows.replace("\r\n", "").contains('\n'), "{windows:?}");
    // TOML: comments and other tables kept, `args` added where there was none.
    let codex_text = machine.read("home/.codex/config.toml");
    assert!(codex_text.contains("command = \"") && codex_text.contains("# the runner"));
    let codex: toml::Table = codex_text.parse().unwrap();
    let servers = codex["mcp_servers"].as_table().unwrap();
    assert_eq!(
        servers["no-args"]["command"].as_str(),
        Some(hintgate.as_str())
    );
    assert_eq!(
        servers["no-args"]["args"].as_array().unwrap().len(),
        5,
        "{codex_text}"
    );
    assert_eq!(
        servers["docs"]["env"]["CONTEXT7_LOG"].as_str(),
        Some("error")
    );
    assert_eq!(
        servers["docs"]["startup_timeout_sec"].as_integer(),
        Some(20)
    );
    assert_eq!(
        codex["profiles"]["fast"]["model"].as_str(),
        Some("gpt-5-codex-mini")
    );
    // YAML: comments, other keys and the quoting elsewhere kept; the block
    // `args` became a flow sequence after `args:`.
    let continue_text = machine.read("home/.continue/config.yaml");
    assert!(continue_text.contains("  # the reference filesystem server, limited to one folder\n"));
    assert!(continue_text.contains("    provider: ollama\n"));
    assert!(continue_text.contains(&format!(
        "    command: \"{hintgate}\"\n    args: [\"run\", \"--name\", \"Filesystem\", \"--\", \"npx\", \"-y\", \"@modelcontextprotocol/server-filesystem\", \"/home/zoë/My Documents\"]   # a quoted path with a space\n    env:\n"
    )), "{continue_text}");
    assert!(continue_text.contains(&format!(
        "    type: \"stdio\"\n    command: \"{hintgate}\"\n    args: [\"run\", \"--name\", \"Remote-docs\", \"--url\", \"https://mcp.example.com/mcp\""
    )), "{continue_text}");
    let block = machine.read("project/.continue/mcpServers/sqlite.yml");
    assert!(block.ends_with(&format!(
        "  - {{ name: notes-db, command: \"{hintgate}\", \"args\": [\"run\", \"--name\", \"notes-db\", \"--\", \"/opt/bin/mcp-sqlite\"] }}\r\n"
    )), "{block:?}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&machine.path("home/.claude.json")), 0o600);
        let backup = new_backups
            .iter()
            .find(|path| path.to_string_lossy().contains(".claude.json."))
            .unwrap();
        assert_eq!(mode(&machine.root().join(backup)), 0o600);
    }

    // Wrapping again changes nothing and writes no backup.
    let again = machine.hintgate(&["wrap"]);
    assert_eq!(code(&again), 0, "{}", stderr(&again));
    assert!(
        lines_starting(&again, "wrapped  ").is_empty(),
        "{}",
        stdout(&again)
    );
    assert_eq!(lines_starting(&again, "already wrapped  ").len(), 31);
    assert_eq!(machine.files(), after_wrap, "wrap is idempotent");

    // Unwrap gives back the original bytes of every file.
    let unwrapped = machine.hintgate(&["unwrap"]);
    assert_eq!(code(&unwrapped), 0, "{}", stderr(&unwrapped));
    assert_eq!(lines_starting(&unwrapped, "restored  ").len(), 30);
    let after_unwrap = machine.files();
    for (path, bytes) in &before {
        assert_eq!(
            String::from_utf8_lossy(&after_unwrap[path]),
            String::from_utf8_lossy(bytes),
            "{}",
            path.display()
        );
    }
    // The entry that was wrapped by hand, before hintgate kept a record of
    // it, is left as it is, and unwrap says so.
    let left = lines_starting(&unwrapped, "left as is  ");
    assert_eq!(left.len(), 1, "{}", stdout(&unwrapped));
    assert!(left[0].starts_with("left as is  claude-desktop (user)  memory  "));
    let named = machine.hintgate(&["unwrap", "--server", "memory"]);
    assert_eq!(
        code(&named),
        1,
        "a server named but not restored is an error"
    );
}

#[test]
fn dry_run_says_what_would_change_and_changes_nothing() {
    let machine = Machine::new();
    let before = machine.files();
    let output = machine.hintgate(&["wrap", "--dry-run", "--host", "cursor"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(lines_starting(&output, "would wrap  ").len(), 3);
    assert_eq!(machine.files(), before);
    assert!(!machine.path("state").exists());
}

#[test]
fn a_config_that_does_not_parse_stops_wrap_before_anything_changes() {
    let machine = Machine::new();
    let broken = "{\n  \"servers\": {\n    \"a\": {\"command\": \"x\"},\n    \"b\" ]\n  }\n}\n";
    std::fs::write(machine.path("project/.vscode/mcp.json"), broken).unwrap();
    let before = machine.files();

    let output = machine.hintgate(&["wrap"]);
    assert_eq!(code(&output), 64, "{}", stdout(&output));
    let message = stderr(&output);
    assert!(
        message.contains(".vscode/mcp.json` does not parse: line 4, column 9: "),
        "{message}"
    );
    assert!(message.contains("nothing was changed"), "{message}");
    assert_eq!(
        machine.files(),
        before,
        "no file changed, no backup written"
    );

    let unwrap = machine.hintgate(&["unwrap"]);
    assert_eq!(code(&unwrap), 64);
    assert_eq!(machine.files(), before);

    // Another host's configs can still be wrapped.
    let cursor = machine.hintgate(&["wrap", "--host", "cursor"]);
    assert_eq!(code(&cursor), 0, "{}", stderr(&cursor));
    assert_eq!(machine.read("project/.vscode/mcp.json"), broken);
}

#[test]
fn unwrap_restores_only_the_chosen_server() {
    let machine = Machine::new();
    let original = machine.read("home/.cursor/mcp.json");
    let wrap = machine.hintgate(&["wrap", "--host", "cursor"]);
    assert_eq!(code(&wrap), 0, "{}", stderr(&wrap));

    let one = machine.hintgate(&["unwrap", "--server", "linear"]);
    assert_eq!(code(&one), 0, "{}", stderr(&one));
    let cursor: Value = serde_json::from_str(&machine.read("home/.cursor/mcp.json")).unwrap();
    assert_eq!(
        cursor["mcpServers"]["linear"]["url"],
        "https://mcp.linear.app/mcp"
    );
    assert_eq!(
        cursor["mcpServers"]["local-tool"]["command"],
        hintgate_path()
    );

    let rest = machine.hintgate(&["unwrap", "--host", "cursor"]);
    assert_eq!(code(&rest), 0, "{}", stderr(&rest));
    assert_eq!(machine.read("home/.cursor/mcp.json"), original);
}

#[test]
fn unwrap_refuses_an_entry_edited_after_it_was_wrapped() {
    let machine = Machine::new();
    let wrap = machine.hintgate(&["wrap", "--host", "cursor", "--server", "local-tool"]);
    assert_eq!(code(&wrap), 0, "{}", stderr(&wrap));
    let path = machine.path("home/.cursor/mcp.json");
    let edited = machine.read("home/.cursor/mcp.json").replace(
        "\"--name\", \"local-tool\"",
        "\"--name\", \"local-tool\", \"--unattended\"",
    );
    std::fs::write(&path, &edited).unwrap();

    let unwrap = machine.hintgate(&["unwrap", "--host", "cursor"]);
    assert_eq!(code(&unwrap), 1);
    assert!(
        stdout(&unwrap).contains("not restored  cursor (user)  local-tool")
            && stdout(&unwrap).contains("the entry was changed after it was wrapped"),
        "{}",
        stdout(&unwrap)
    );
    assert_eq!(machine.read("home/.cursor/mcp.json"), edited);
}

#[test]
fn naming_a_server_no_config_has_is_bad_usage() {
    let machine = Machine::new();
    let before = machine.files();
    let output = machine.hintgate(&["wrap", "--server", "nope"]);
    assert_eq!(code(&output), 64);
    assert!(
        stderr(&output).contains("no server named `nope`"),
        "{}",
        stderr(&output)
    );
    let host = machine.hintgate(&["wrap", "--host", "emacs"]);
    assert_eq!(code(&host), 64);
    assert_eq!(machine.files(), before);
}

#[test]
fn a_wrapped_entry_starts_the_real_server_as_the_host_would() {
    let tools = repo_root().join(".tools");
    let server = tools.join("venv/bin/mcp-server-time");
    assert!(
        server.exists(),
        "the real MCP peers are not installed: run ./scripts/setup-peers (./scripts/test does)"
    );
    let config = json!({
        "mcpServers": {
            "time": {"command": server.display().to_string(), "args": ["--local-timezone", "Etc/UTC"]}
        }
    });
    let machine = Machine::with(&[(
        "home/.cursor/mcp.json",
        &serde_json::to_string_pretty(&config).unwrap(),
    )]);
    let wrap = machine.hintgate(&["wrap", "--trust", "trusted"]);
    assert_eq!(code(&wrap), 0, "{}", stderr(&wrap));

    // The host's view: the command and arguments in its config.
    let wrapped: Value = serde_json::from_str(&machine.read("home/.cursor/mcp.json")).unwrap();
    let entry = &wrapped["mcpServers"]["time"];
    let mut command = vec![entry["command"].as_str().unwrap().to_owned()];
    command.extend(
        entry["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|arg| arg.as_str().unwrap().to_owned()),
    );
    assert!(command[0].ends_with("hintgate"), "{command:?}");

    let spec = json!({
        "command": command,
        "answer": "accept",
        "calls": [{"name": "get_current_time", "arguments": {"timezone": "Etc/UTC"}}],
    });
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/sdk_host.py");
    let output = Command::new(tools.join("venv/bin/python"))
        .current_dir(machine.root())
        .env("HINTGATE_STATE_DIR", machine.path("state"))
        .arg(script)
        .arg(spec.to_string())
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_str(report.trim()).unwrap();
    assert!(
        report["server"].as_str().unwrap().contains("time"),
        "{report}"
    );
    assert_eq!(report["tools"]["get_current_time"]["readOnlyHint"], true);
    assert_eq!(report["results"][0]["isError"], false);
    assert!(
        report["results"][0]["text"][0]
            .as_str()
            .unwrap()
            .contains("Etc/UTC"),
        "{report}"
    );
    assert_eq!(report["asked"], json!([]), "a trusted read runs unasked");
}

#[test]
#[expect(
    clippy::disallowed_macros,
    reason = "says why the confined run is skipped on a kernel without Landlock"
)]
fn wrap_sandbox_proposes_a_table_writes_it_with_the_wrap_and_unwrap_restores_the_bytes() {
    let server = repo_root().join(".tools/npm/node_modules/.bin/mcp-server-filesystem");
    assert!(
        server.exists(),
        "the real MCP peers are not installed: run ./scripts/setup-peers (./scripts/test does)"
    );
    let machine = Machine::with(&[("project/docs/notes.txt", "hello from disk")]);
    let docs = machine.path("project/docs");
    let out = machine.path("project/out");
    std::fs::create_dir_all(&out).unwrap();
    let config = json!({
        "mcpServers": {
            "fs": {
                "command": server.display().to_string(),
                "args": [docs.display().to_string(), out.display().to_string()]
            }
        }
    });
    let original = serde_json::to_string_pretty(&config).unwrap();
    std::fs::create_dir_all(machine.path("home/.cursor")).unwrap();
    std::fs::write(machine.path("home/.cursor/mcp.json"), &original).unwrap();
    let out_arg = out.display().to_string();

    let suggested = machine.hintgate(&["sandbox", "suggest", "fs", "--write", &out_arg]);
    assert_eq!(code(&suggested), 0, "{}", stderr(&suggested));
    let table = format!(
        "[servers.fs.sandbox]\nread = [{:?}]\nwrite = [{:?}]\nnetwork = false\n",
        docs.display().to_string(),
        out_arg
    );
    assert!(
        stdout(&suggested).contains(&table),
        "{}",
        stdout(&suggested)
    );

    let wrap = machine.hintgate(&["wrap", "--sandbox", "--write", &out_arg]);
    assert_eq!(code(&wrap), 0, "{}", stderr(&wrap));
    assert!(
        stdout(&wrap).contains("    network = false"),
        "the table is shown: {}",
        stdout(&wrap)
    );
    let wrapped: Value = serde_json::from_str(&machine.read("home/.cursor/mcp.json")).unwrap();
    let args: Vec<String> = wrapped["mcpServers"]["fs"]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|arg| arg.as_str().unwrap().to_owned())
        .collect();
    let flags = args.join(" ");
    assert!(
        flags.contains(&format!(
            "--sandbox --sandbox-read {} --sandbox-write {out_arg} --",
            docs.display()
        )),
        "{flags}"
    );

    // The wrapped line runs the server confined to its table.
    let kernel = hintgate_sandbox::Kernel::current();
    let report = kernel.report(&hintgate_policy::config::SandboxConfig::default());
    if report.holds(hintgate_sandbox::Property::FilesRead) {
        let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut host = crate::host::Host::start(machine.root(), &arg_refs, &[]);
        host.initialize(json!({"elicitation": {}}));
        host.respond_with(|_| json!({"action": "accept", "content": {"approve": true}}));
        let read = host.call("read_text_file", json!({"path": docs.join("notes.txt")}));
        assert_eq!(crate::host::text(&read), "hello from disk", "{read}");
        let written = host.call(
            "write_file",
            json!({"path": out.join("made.txt"), "content": "made"}),
        );
        assert!(!crate::host::is_error(&written), "{written}");
        assert_eq!(
            std::fs::read_to_string(out.join("made.txt")).unwrap(),
            "made"
        );
        let inside_docs = host.call(
            "write_file",
            json!({"path": docs.join("notes.txt"), "content": "changed"}),
        );
        assert!(crate::host::is_error(&inside_docs), "{inside_docs}");
        assert_eq!(
            std::fs::read_to_string(docs.join("notes.txt")).unwrap(),
            "hello from disk"
        );
        host.close();
    } else {
        println!("not run confined: this kernel cannot enforce files-read");
    }

    let unwrap = machine.hintgate(&["unwrap"]);
    assert_eq!(code(&unwrap), 0, "{}", stderr(&unwrap));
    assert_eq!(machine.read("home/.cursor/mcp.json"), original);
}

#[test]
fn wrap_sandbox_prepare_on_start_confines_an_npx_entry_with_nothing_installed_by_hand() {
    // `hintgate wrap --sandbox --prepare-on-start` on the launch line of the
    // host configs, whose package is not installed: the wrapped line
    // installs it at its first start (from the test's registry on the
    // loopback) and runs it confined; nothing was run by hand.
    if !crate::sandbox::kernel_confines() {
        return;
    }
    let machine = Machine::with(&[("project/docs/notes.txt", "hello from disk")]);
    let docs = machine.path("project/docs");
    let config = json!({
        "mcpServers": {
            "fs": {
                "command": "npx",
                "args": ["-y", crate::prepare::PACKAGE, docs.display().to_string()]
            }
        }
    });
    let original = serde_json::to_string_pretty(&config).unwrap();
    std::fs::create_dir_all(machine.path("home/.cursor")).unwrap();
    std::fs::write(machine.path("home/.cursor/mcp.json"), &original).unwrap();
    let suggested = machine.hintgate(&["sandbox", "suggest", "fs", "--prepare-on-start"]);
    assert!(
        stdout(&suggested).contains("network = false\nprepare = \"on-start\"\n"),
        "{}",
        stdout(&suggested)
    );
    let wrap = machine.hintgate(&["wrap", "--sandbox", "--prepare-on-start"]);
    assert_eq!(code(&wrap), 0, "{}", stderr(&wrap));
    assert!(
        stdout(&wrap).contains("    prepare = \"on-start\""),
        "the table is shown: {}",
        stdout(&wrap)
    );
    let wrapped: Value = serde_json::from_str(&machine.read("home/.cursor/mcp.json")).unwrap();
    let args: Vec<String> = wrapped["mcpServers"]["fs"]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|arg| arg.as_str().unwrap().to_owned())
        .collect();
    assert!(
        args.join(" ").contains(&format!(
            "--sandbox --sandbox-read {} --sandbox-prepare on-start -- npx -y",
            docs.display()
        )),
        "{args:?}"
    );

    let registry = crate::prepare::Registry::start(machine.root());
    let cache = machine.path("npm-cache");
    std::fs::create_dir(&cache).unwrap();
    let mut env = crate::prepare::npm_env(machine.root(), &cache, &registry.url);
    env.push(("PATH".into(), crate::sandbox::node22_path()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut host = crate::host::Host::start(machine.root(), &arg_refs, &env);
    host.initialize(json!({"elicitation": {}}));
    host.respond_with(|_| json!({"action": "accept", "content": {"approve": true}}));
    let read = host.call("read_text_file", json!({"path": docs.join("notes.txt")}));
    assert_eq!(
        crate::host::text(&read),
        "hello from disk",
        "{read}\n{}",
        host.log()
    );
    // It ran in its sandbox, after the install.
    let log = host.log();
    assert!(log.contains("sandbox enforced: files-read"), "{log}");
    assert!(
        log.contains("installing its package before its confined start"),
        "{log}"
    );
    host.close();
    assert_eq!(crate::prepare::installed(&cache), ["2026.8.31"]);

    let unwrap = machine.hintgate(&["unwrap"]);
    assert_eq!(code(&unwrap), 0, "{}", stderr(&unwrap));
    assert_eq!(machine.read("home/.cursor/mcp.json"), original);
}
