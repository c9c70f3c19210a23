//! Where each host keeps its MCP config, from the host's own documentation
//! (the fixtures in `tests/fixtures/hosts/` name each page).
//!
//! Every platform's location is tried on every platform: a file that is not
//! there is skipped, and one list keeps the fixtures and the code simple.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use super::{Format, Host, Location, Scope};

/// What discovery looks at: never the real process state in tests.
#[derive(Debug, Clone)]
pub struct DiscoveryEnv {
    /// The user's home directory.
    pub home: PathBuf,
    /// The project directory (the current directory for the commands).
    pub project: PathBuf,
    /// Environment variables that move configs: `XDG_CONFIG_HOME`,
    /// `APPDATA`, `CODEX_HOME`.
    pub vars: BTreeMap<String, String>,
}

// === impl DiscoveryEnv ===

impl DiscoveryEnv {
    /// The process's own home, current directory and environment.
    pub fn from_process() -> Option<Self> {
        let home = std::env::var_os("HOME")
            .or_else(|| std::env::var_os("USERPROFILE"))
            .filter(|home| !home.is_empty())?;
        let project = std::env::current_dir().ok()?;
        let vars = ["XDG_CONFIG_HOME", "APPDATA", "CODEX_HOME"]
            .into_iter()
            .filter_map(|name| {
                let value = std::env::var(name).ok().filter(|value| !value.is_empty())?;
                Some((name.to_owned(), value))
            })
            .collect();
        Some(Self {
            home: PathBuf::from(home),
            project,
            vars,
        })
    }

    fn var(&self, name: &str) -> Option<PathBuf> {
        self.vars.get(name).map(PathBuf::from)
    }

    /// `$XDG_CONFIG_HOME`, else `~/.config`.
    fn xdg_config(&self) -> PathBuf {
        self.var("XDG_CONFIG_HOME")
            .unwrap_or_else(|| self.home.join(".config"))
    }

    /// The per-user application data directories of every platform:
    /// `$XDG_CONFIG_HOME` (Linux), `~/Library/Application Support` (macOS)
    /// and `%APPDATA%` (Windows).
    fn app_data_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = vec![
            self.xdg_config(),
            self.home.join("Library/Application Support"),
        ];
        dirs.extend(self.var("APPDATA"));
        dirs
    }
}

/// Every config file to try, in host order, without duplicates.
pub fn locations(env: &DiscoveryEnv) -> Vec<Location> {
    let mut out = Vec::new();
    let mut push = |host, path: PathBuf, scope, format| {
        out.push(Location {
            host,
            path,
            scope,
            format,
        });
    };
    let json = Format::Json;

    // Claude Desktop: `claude_desktop_config.json` in the app's data
    // directory (modelcontextprotocol.io/quickstart/user).
    for dir in env.app_data_dirs() {
        push(
            Host::ClaudeDesktop,
            dir.join("Claude/claude_desktop_config.json"),
            Scope::User,
            json("mcpServers"),
        );
    }
    // Claude Code: user and local scopes in `~/.claude.json`, project scope in
    // `.mcp.json` (code.claude.com/docs/en/mcp, "MCP installation scopes").
    push(
        Host::ClaudeCode,
        env.home.join(".claude.json"),
        Scope::User,
        Format::ClaudeJson,
    );
    push(
        Host::ClaudeCode,
        env.project.join(".mcp.json"),
        Scope::Project,
        json("mcpServers"),
    );
    // Cursor (cursor.com/docs/mcp).
    push(
        Host::Cursor,
        env.home.join(".cursor/mcp.json"),
        Scope::User,
        json("mcpServers"),
    );
    push(
        Host::Cursor,
        env.project.join(".cursor/mcp.json"),
        Scope::Project,
        json("mcpServers"),
    );
    // VS Code: `.vscode/mcp.json` and the user profile's `mcp.json`, under
    // `servers` (code.visualstudio.com/docs/copilot/reference/mcp-configuration).
    push(
        Host::VsCode,
        env.project.join(".vscode/mcp.json"),
        Scope::Project,
        json("servers"),
    );
    for dir in env.app_data_dirs() {
        for edition in ["Code", "Code - Insiders"] {
            push(
                Host::VsCode,
                dir.join(edition).join("User/mcp.json"),
                Scope::User,
                json("servers"),
            );
        }
    }
    // Windsurf (docs.windsurf.com/windsurf/cascade/mcp).
    push(
        Host::Windsurf,
        env.home.join(".codeium/windsurf/mcp_config.json"),
        Scope::User,
        json("mcpServers"),
    );
    // Codex: `$CODEX_HOME/config.toml`, default `~/.codex`, and a trusted
    // project's `.codex/config.toml` (developers.openai.com/codex/mcp).
    let codex_home = env
        .var("CODEX_HOME")
        .unwrap_or_else(|| env.home.join(".codex"));
    push(
        Host::Codex,
        codex_home.join("config.toml"),
        Scope::User,
        Format::CodexToml,
    );
    push(
        Host::Codex,
        env.project.join(".codex/config.toml"),
        Scope::Project,
        Format::CodexToml,
    );
    // Gemini CLI (geminicli.com/docs/tools/mcp-server).
    push(
        Host::GeminiCli,
        env.home.join(".gemini/settings.json"),
        Scope::User,
        json("mcpServers"),
    );
    push(
        Host::GeminiCli,
        env.project.join(".gemini/settings.json"),
        Scope::Project,
        json("mcpServers"),
    );
    // Zed: `~/.config/zed/settings.json` on Linux and macOS, `%APPDATA%\Zed`
    // on Windows, under `context_servers` (zed.dev/docs/ai/mcp).
    push(
        Host::Zed,
        env.xdg_config().join("zed/settings.json"),
        Scope::User,
        json("context_servers"),
    );
    push(
        Host::Zed,
        env.home.join(".config/zed/settings.json"),
        Scope::User,
        json("context_servers"),
    );
    if let Some(app_data) = env.var("APPDATA") {
        push(
            Host::Zed,
            app_data.join("Zed/settings.json"),
            Scope::User,
            json("context_servers"),
        );
    }
    // Continue: block files in the workspace's `.continue/mcpServers/`; JSON
    // files there use the `mcpServers` shape of Claude Desktop and Cursor
    // (docs.continue.dev/customize/deep-dives/mcp); YAML files there and the
    // user's `~/.continue/config.yaml` hold an `mcpServers` sequence
    // (docs.continue.dev/reference).
    push(
        Host::Continue,
        env.home.join(".continue/config.yaml"),
        Scope::User,
        Format::ContinueYaml,
    );
    let blocks = env.project.join(".continue/mcpServers");
    for path in sorted_files(&blocks) {
        match path.extension().and_then(|ext| ext.to_str()) {
            Some("json") => push(Host::Continue, path, Scope::Project, json("mcpServers")),
            Some("yaml" | "yml") => {
                push(Host::Continue, path, Scope::Project, Format::ContinueYaml)
            }
            _ => {}
        }
    }

    let mut seen = HashSet::new();
    out.retain(|location| seen.insert(location.path.clone()));
    out
}

fn sorted_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(read) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = read
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}
