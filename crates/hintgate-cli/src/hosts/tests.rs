use std::collections::BTreeMap;
use std::path::PathBuf;

use super::*;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hosts")
}

fn fixture_env() -> DiscoveryEnv {
    let home = fixtures().join("home");
    let vars = BTreeMap::from([(
        "APPDATA".to_owned(),
        home.join("AppData/Roaming").display().to_string(),
    )]);
    DiscoveryEnv {
        project: fixtures().join("project"),
        home,
        vars,
    }
}

/// One line per server: host, scope (and project), name, transport, wrapped.
fn summary(discovery: &Discovery) -> Vec<String> {
    discovery
        .servers
        .iter()
        .map(|server| {
            let transport = match &server.transport {
                Transport::Stdio { command, args, .. } => {
                    format!("stdio {command} {}", args.join(" "))
                }
                Transport::Http { url, headers } => {
                    let names: Vec<&str> = headers.keys().map(String::as_str).collect();
                    format!("http {url} [{}]", names.join(","))
                }
                Transport::Sse { url } => format!("sse {url}"),
                Transport::Other { reason } => format!("other: {reason}"),
            };
            let scope = match &server.project {
                Some(project) => format!("{}:{project}", server.scope.as_str()),
                None => server.scope.as_str().to_owned(),
            };
            let wrapped = if server.wrapped { " (wrapped)" } else { "" };
            format!(
                "{} {scope} {}: {transport}{wrapped}",
                server.host.as_str(),
                server.name
            )
        })
        .collect()
}

#[test]
fn discovery_finds_exactly_the_servers_of_every_host_fixture() {
    let discovery = discover(&fixture_env());
    assert_eq!(discovery.problems, vec![], "every fixture parses");
    let expected = [
        "claude-desktop user filesystem: stdio npx -y @modelcontextprotocol/server-filesystem /home/zoë/Documents/Ünïcödé notes",
        "claude-desktop user time: stdio uvx mcp-server-time --local-timezone=Europe/Zürich",
        "claude-desktop user memory: stdio /usr/local/bin/hintgate run --name memory -- npx -y @modelcontextprotocol/server-memory (wrapped)",
        "claude-desktop user github: stdio docker run -i --rm -e GITHUB_PERSONAL_ACCESS_TOKEN ghcr.io/github/github-mcp-server",
        "claude-desktop user sqlite: stdio C:\\Program Files\\nodejs\\npx.cmd -y mcp-server-sqlite-npx C:\\Users\\Zoë\\data.db",
        "claude-code user playwright: stdio npx @playwright/mcp@latest",
        "claude-code local:/home/zoe/src/app sentry: http https://mcp.sentry.dev/mcp [Authorization]",
        "claude-code project db: stdio npx -y @bytebase/dbhub --dsn ${DATABASE_URL:-postgres://localhost:5432/dev}",
        "claude-code project legacy-events: sse https://events.example.com/sse",
        "cursor user linear: http https://mcp.linear.app/mcp [Authorization]",
        "cursor user local-tool: stdio /opt/tools/bin/mcp-tool ",
        "cursor project fetch: stdio uvx mcp-server-fetch",
        "vscode project github: http https://api.githubcopilot.com/mcp/ [Authorization]",
        "vscode project everything: stdio npx -y @modelcontextprotocol/server-everything",
        "vscode user time: stdio uvx mcp-server-time",
        "windsurf user github-remote: http https://api.githubcopilot.com/mcp/ [Authorization]",
        "windsurf user fs: stdio npx -y @modelcontextprotocol/server-filesystem /home/zoe/projects",
        "codex user time: stdio uvx mcp-server-time --local-timezone=Asia/Tōkyō",
        "codex user docs: stdio npx -y @upstash/context7-mcp",
        "codex user no-args: stdio /opt/bin/mcp-server ",
        "codex user figma: http https://mcp.figma.com/mcp [Authorization]",
        "gemini-cli user pythonTools: stdio python -m my_mcp_server --port 8080",
        "gemini-cli user httpServer: http http://localhost:3000/mcp [X-Api-Key]",
        "gemini-cli user sseServer: sse http://localhost:8080/sse",
        "gemini-cli project git: stdio uvx mcp-server-git --repository .",
        "zed user local-mcp-server: stdio some-command arg-1 arg-2",
        "zed user legacy-server: stdio /usr/bin/mcp-legacy --stdio",
        "zed user mcp-server-postgres: other: started by an editor extension, not by a command in this file",
        "zed user remote-mcp-server: http https://example.com/mcp [Authorization]",
        "continue user Filesystem: stdio npx -y @modelcontextprotocol/server-filesystem /home/zoë/My Documents",
        "continue user memory: stdio npx -y @modelcontextprotocol/server-memory",
        "continue user Remote docs: http https://mcp.example.com/mcp [Authorization]",
        "continue project sqlite: stdio uvx mcp-server-sqlite --db-path ./test.db",
        "continue project Browser search: stdio npx @playwright/mcp@latest",
        "continue project notes-db: stdio /opt/bin/mcp-sqlite ",
    ];
    assert_eq!(summary(&discovery), expected);
    assert_eq!(discovery.skipped, vec![], "every config found is read");
}

#[test]
fn discovery_reads_only_the_directories_it_is_given() {
    let empty = tempfile::tempdir().unwrap();
    let env = DiscoveryEnv {
        home: empty.path().join("home"),
        project: empty.path().join("project"),
        vars: BTreeMap::new(),
    };
    let discovery = discover(&env);
    assert!(discovery.servers.is_empty());
    assert!(discovery.problems.is_empty());
}

#[test]
fn a_malformed_config_is_a_problem_with_its_line_and_column_and_the_rest_is_still_found() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join(".cursor")).unwrap();
    std::fs::write(
        home.join(".cursor/mcp.json"),
        "{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\"}\n    \"b\": ]\n  }\n}\n",
    )
    .unwrap();
    std::fs::create_dir_all(home.join(".gemini")).unwrap();
    std::fs::write(
        home.join(".gemini/settings.json"),
        r#"{"mcpServers": {"g": {"command": "y"}}}"#,
    )
    .unwrap();
    let env = DiscoveryEnv {
        home: home.clone(),
        project: dir.path().join("project"),
        vars: BTreeMap::new(),
    };
    let discovery = discover(&env);
    assert_eq!(discovery.problems.len(), 1);
    let problem = &discovery.problems[0];
    assert_eq!(problem.path, home.join(".cursor/mcp.json"));
    assert!(
        problem.message.starts_with("line 4, column 10: "),
        "{}",
        problem.message
    );
    assert_eq!(summary(&discovery), ["gemini-cli user g: stdio y "]);
}

#[test]
fn a_wrapped_entry_names_the_server_behind_it() {
    let wrapped = Transport::Stdio {
        command: "/opt/hintgate/bin/hintgate".to_owned(),
        args: [
            "run", "--name", "fs", "--trust", "trusted", "--", "npx", "-y", "srv",
        ]
        .map(str::to_owned)
        .to_vec(),
        env: BTreeMap::from([("K".to_owned(), "v".to_owned())]),
    };
    assert!(wrapped.is_hintgate());
    assert_eq!(
        wrapped.upstream(),
        Transport::Stdio {
            command: "npx".to_owned(),
            args: vec!["-y".to_owned(), "srv".to_owned()],
            env: BTreeMap::from([("K".to_owned(), "v".to_owned())]),
        }
    );
    let remote = Transport::Stdio {
        command: "C:\\tools\\hintgate.exe".to_owned(),
        args: [
            "run",
            "--name",
            "r",
            "--url",
            "https://x/mcp",
            "--header",
            "A: b",
        ]
        .map(str::to_owned)
        .to_vec(),
        env: BTreeMap::new(),
    };
    assert_eq!(
        remote.upstream(),
        Transport::Http {
            url: "https://x/mcp".to_owned(),
            headers: BTreeMap::from([("A".to_owned(), "b".to_owned())]),
        }
    );
    let plain = Transport::Stdio {
        command: "npx".to_owned(),
        args: vec!["run".to_owned()],
        env: BTreeMap::new(),
    };
    assert!(!plain.is_hintgate());
    assert_eq!(plain.upstream(), plain);
}

#[test]
fn the_json_form_names_env_and_headers_but_never_their_values() {
    let discovery = discover(&fixture_env());
    let json = to_json(&discovery);
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let sentry = value["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|server| server["name"] == "sentry")
        .unwrap();
    assert_eq!(sentry["host"], "claude-code");
    assert_eq!(sentry["scope"], "local");
    assert_eq!(sentry["project"], "/home/zoe/src/app");
    assert_eq!(sentry["transport"]["type"], "http");
    assert_eq!(
        sentry["transport"]["header_names"],
        serde_json::json!(["Authorization"])
    );
    assert_eq!(sentry["wrapped"], false);
    assert!(!json.contains("GITHUB_PERSONAL_ACCESS_TOKEN\": \"<your token>"));
    assert!(!json.contains("<your token>"));
    assert!(!json.contains("SENTRY_TOKEN"));
}

fn wrap_all(location: &Location, text: &str) -> String {
    let spec = edit::WrapSpec {
        hintgate: "/opt/hintgate".to_owned(),
        trust: None,
        extra: Vec::new(),
    };
    let mut out = text.to_owned();
    let names: Vec<String> = entries(location, text)
        .unwrap()
        .into_iter()
        .map(|entry| entry.name)
        .collect();
    for name in names {
        let entry = entries(location, &out)
            .unwrap()
            .into_iter()
            .find(|entry| entry.name == name)
            .unwrap();
        out = edit::wrap(&out, &entry, &spec).unwrap().text;
    }
    out
}

fn codex_location() -> Location {
    Location {
        host: Host::Codex,
        path: PathBuf::from("config.toml"),
        scope: Scope::User,
        format: Format::CodexToml,
    }
}

#[test]
fn codex_dotted_keys_get_their_args_under_the_same_server() {
    let text = "model = \"m\"\r\nmcp_servers.fs.command = \"npx\" # runner\r\nmcp_servers.fs.env = { A = \"1\" }\r\n";
    let wrapped = wrap_all(&codex_location(), text);
    assert_eq!(
        wrapped,
        "model = \"m\"\r\nmcp_servers.fs.command = \"/opt/hintgate\"\r\nmcp_servers.fs.args = [\"run\", \"--name\", \"fs\", \"--\", \"npx\"] # runner\r\nmcp_servers.fs.env = { A = \"1\" }\r\n"
    );
    let entry = entries(&codex_location(), &wrapped).unwrap().remove(0);
    assert!(entry.transport.is_hintgate());
}

#[test]
fn names_a_host_would_reject_are_made_valid_for_hintgate_run() {
    assert_eq!(edit::server_name("github.com/repo"), "github-com-repo");
    assert_eq!(edit::server_name("Zoë's tools"), "Zo--s-tools");
    assert_eq!(edit::server_name(""), "server");
}

fn continue_location() -> Location {
    Location {
        host: Host::Continue,
        path: PathBuf::from("config.yaml"),
        scope: Scope::User,
        format: Format::ContinueYaml,
    }
}

#[test]
fn continue_yaml_servers_are_wrapped_in_place_whatever_the_style_of_their_args() {
    // A block sequence at the key's own indentation, a comment after the
    // command, a flow mapping without `args`, a remote server.
    let text = "mcpServers:\n- name: fs\n  command: npx # runner\n  args:\n  - -y\n  - 'a b'\n  env: {A: '1'}\n- {name: one, command: /opt/x}\n- name: remote\n  type: streamable-http\n  url: https://x/mcp\n  requestOptions:\n    headers:\n      Authorization: Bearer t\nmodels: []\n";
    let wrapped = wrap_all(&continue_location(), text);
    assert_eq!(
        wrapped,
        "mcpServers:\n- name: fs\n  command: \"/opt/hintgate\" # runner\n  args: [\"run\", \"--name\", \"fs\", \"--\", \"npx\", \"-y\", \"a b\"]\n  env: {A: '1'}\n- {name: one, command: \"/opt/hintgate\", \"args\": [\"run\", \"--name\", \"one\", \"--\", \"/opt/x\"]}\n- name: remote\n  type: \"stdio\"\n  command: \"/opt/hintgate\"\n  args: [\"run\", \"--name\", \"remote\", \"--url\", \"https://x/mcp\", \"--header\", \"Authorization: Bearer t\"]\n  requestOptions:\n    headers:\n      Authorization: Bearer t\nmodels: []\n"
    );
    let entries = entries(&continue_location(), &wrapped).unwrap();
    assert_eq!(entries.len(), 3);
    assert!(entries.iter().all(|entry| entry.transport.is_hintgate()));
    assert_eq!(
        entries[0].transport.upstream(),
        Transport::Stdio {
            command: "npx".to_owned(),
            args: vec!["-y".to_owned(), "a b".to_owned()],
            env: BTreeMap::from([("A".to_owned(), "1".to_owned())]),
        }
    );
}

#[test]
fn a_malformed_continue_yaml_is_a_problem_with_its_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join(".continue")).unwrap();
    std::fs::write(
        home.join(".continue/config.yaml"),
        "name: x\nmcpServers:\n  - name: a\n    command: [npx\n",
    )
    .unwrap();
    let project = dir.path().join("project");
    std::fs::create_dir_all(project.join(".continue/mcpServers")).unwrap();
    std::fs::write(
        project.join(".continue/mcpServers/a.yaml"),
        "mcpServers:\n  name: not-a-sequence\n",
    )
    .unwrap();
    let env = DiscoveryEnv {
        home,
        project,
        vars: BTreeMap::new(),
    };
    let discovery = discover(&env);
    let messages: Vec<&str> = discovery
        .problems
        .iter()
        .map(|problem| problem.message.as_str())
        .collect();
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert!(
        messages[0].starts_with("line 5, column 1: "),
        "{messages:?}"
    );
    assert_eq!(
        messages[1],
        "line 2, column 3: `mcpServers` is not a sequence"
    );
}
