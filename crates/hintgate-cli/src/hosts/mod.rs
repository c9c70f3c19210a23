//! The MCP configs of the hosts on this machine and in the current project.
//!
//! Discovery reads each host's config where the host's own documentation
//! says it lives (`locations`), parses it tolerantly (`jsonc` for the JSON
//! family, `codex` for TOML, `yaml` for Continue's YAML) and yields one [`DiscoveredServer`] per entry,
//! with the byte range `wrap` may rewrite. Discovery takes the home
//! directory, the project directory and the environment as parameters, so
//! tests never read the real home.
//!
//! `hintgate scan` builds on [`discover`]: a scan row is a
//! [`DiscoveredServer`] (flattened) plus that server's lint results.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Serialize;

mod codex;
pub mod edit;
mod jsonc;
mod locations;
mod yaml;

pub use locations::DiscoveryEnv;

/// The hosts whose configs hintgate knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Host {
    /// Claude Desktop (`claude_desktop_config.json`).
    ClaudeDesktop,
    /// Claude Code (`~/.claude.json`, project `.mcp.json`).
    ClaudeCode,
    /// Cursor (`~/.cursor/mcp.json`, project `.cursor/mcp.json`).
    Cursor,
    /// VS Code and VS Code Insiders (`mcp.json`, `servers`).
    #[value(name = "vscode")]
    #[serde(rename = "vscode")]
    VsCode,
    /// Windsurf (`~/.codeium/windsurf/mcp_config.json`).
    Windsurf,
    /// Codex (`~/.codex/config.toml`).
    Codex,
    /// Gemini CLI (`~/.gemini/settings.json`).
    GeminiCli,
    /// Zed (`settings.json`, `context_servers`).
    Zed,
    /// Continue (`.continue/mcpServers/` blocks, `~/.continue/config.yaml`).
    Continue,
}

/// Where in a host's configuration a server is defined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scope {
    /// The user's own config, for every project.
    User,
    /// A file in the project, usually shared through version control.
    Project,
    /// The user's private entry for one project (Claude Code's local scope).
    Local,
}

/// How the host starts or reaches a server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Transport {
    /// A child process over stdio.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Environment set for it (only the names are printed).
        #[serde(rename = "env_names", serialize_with = "names_only")]
        env: BTreeMap<String, String>,
    },
    /// Streamable HTTP.
    Http {
        /// The endpoint.
        url: String,
        /// Headers sent with every request (only the names are printed).
        #[serde(rename = "header_names", serialize_with = "names_only")]
        headers: BTreeMap<String, String>,
    },
    /// The legacy HTTP+SSE transport, which `hintgate run` does not speak.
    Sse {
        /// The endpoint.
        url: String,
    },
    /// An entry hintgate cannot start by itself (an editor extension's
    /// server, a shape it does not know).
    Other {
        /// Why it is not a command or a URL.
        reason: String,
    },
}

/// One server found in a host's config.
#[derive(Debug, Clone, Serialize)]
pub struct DiscoveredServer {
    /// The host.
    pub host: Host,
    /// The file it is defined in.
    pub config_path: PathBuf,
    /// The scope of that definition.
    pub scope: Scope,
    /// For [`Scope::Local`]: the project the entry belongs to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// The server's name in the config.
    pub name: String,
    /// How the host starts it.
    pub transport: Transport,
    /// Whether the host already starts it through `hintgate run`.
    pub wrapped: bool,
}

/// A config file that exists but could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileProblem {
    /// The host.
    pub host: Host,
    /// The file.
    pub path: PathBuf,
    /// What is wrong, with the line and column where it applies.
    pub message: String,
}

/// Everything discovery found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Discovery {
    /// Every server, in host order, then file, then config order.
    pub servers: Vec<DiscoveredServer>,
    /// Config files that could not be read or parsed; their servers are
    /// missing from `servers`.
    pub problems: Vec<FileProblem>,
    /// Config files found but not read by this version, and why.
    pub skipped: Vec<FileProblem>,
}

/// A config file to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The host.
    pub host: Host,
    /// The file.
    pub path: PathBuf,
    /// The scope of its servers (Claude Code's `~/.claude.json` also holds
    /// local-scope entries).
    pub scope: Scope,
    /// How to read it.
    pub format: Format,
}

/// The file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JSON with comments and trailing commas; the servers under this key
    /// (`mcpServers`, `servers`, `context_servers`).
    Json(&'static str),
    /// Claude Code's `~/.claude.json`: `mcpServers` and
    /// `projects.<path>.mcpServers`.
    ClaudeJson,
    /// Codex's TOML: `[mcp_servers.NAME]`.
    CodexToml,
    /// Continue's YAML: a sequence of servers under `mcpServers`.
    ContinueYaml,
}

/// A server entry in a file's text, with the byte ranges `wrap` edits.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Where it is defined.
    pub scope: Scope,
    /// For [`Scope::Local`]: the project.
    pub project: Option<String>,
    /// The server's name.
    pub name: String,
    /// How the host starts it.
    pub transport: Transport,
    /// The range `wrap` rewrites and `unwrap` restores: it covers every edit.
    pub region: Range<usize>,
    /// Where the edits go.
    pub anchors: Anchors,
}

/// Byte ranges inside an entry that wrapping replaces.
#[derive(Debug, Clone, Default)]
pub struct Anchors {
    /// The value of `command` (Zed's nested form: `command.path`).
    pub command: Option<Range<usize>>,
    /// The value of `args` (next to the command).
    pub args: Option<Range<usize>>,
    /// The whole `url` property, key to value.
    pub url_property: Option<Range<usize>>,
    /// What to remove to drop the `headers` property, separator included.
    pub headers_removal: Option<Range<usize>>,
    /// The value of `type`.
    pub type_value: Option<Range<usize>>,
    /// How to add an `args` after the command when there is none.
    pub args_insert: ArgsInsert,
    /// `args` spans key to value (YAML), so its replacement is `args: [...]`.
    pub args_with_key: bool,
    /// A YAML entry: what separates the `command` and `args` that replace
    /// `url_property` (a line break and the keys' indentation, or `, `).
    pub yaml_separator: Option<String>,
}

/// How an `args` key is added after a command.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ArgsInsert {
    /// `, "args": [...]` after the command's value.
    #[default]
    JsonProperty,
    /// A new line after the command's: this prefix (`args = `, with the
    /// command line's indentation and dotted key path), then the array.
    TomlLine(String),
    /// `, args = [...]` after the command (a TOML inline table).
    TomlInline,
}

/// A config file's text could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

// === impl Host ===

impl Host {
    /// The stable name used on the command line and in JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::ClaudeDesktop => "claude-desktop",
            Self::ClaudeCode => "claude-code",
            Self::Cursor => "cursor",
            Self::VsCode => "vscode",
            Self::Windsurf => "windsurf",
            Self::Codex => "codex",
            Self::GeminiCli => "gemini-cli",
            Self::Zed => "zed",
            Self::Continue => "continue",
        }
    }
}

// === impl Scope ===

impl Scope {
    /// The stable name used in output.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Project => "project",
            Self::Local => "local",
        }
    }
}

// === impl Transport ===

impl Transport {
    /// Whether this is `hintgate run` (a `hintgate` program whose first
    /// argument is `run`).
    pub fn is_hintgate(&self) -> bool {
        let Self::Stdio { command, args, .. } = self else {
            return false;
        };
        let program = command.rsplit(['/', '\\']).next().unwrap_or(command);
        let program = program.strip_suffix(".exe").unwrap_or(program);
        program == "hintgate" && args.first().is_some_and(|arg| arg == "run")
    }

    /// The server behind a `hintgate run` wrapper (its `-- CMD ARGS` or
    /// `--url URL --header ...`), or this transport when it is not wrapped.
    /// `scan` lints this one.
    pub fn upstream(&self) -> Self {
        let Self::Stdio { args, env, .. } = self else {
            return self.clone();
        };
        if !self.is_hintgate() {
            return self.clone();
        }
        if let Some(split) = args.iter().position(|arg| arg == "--") {
            let rest = args.get(split + 1..).unwrap_or_default();
            if let Some((command, args)) = rest.split_first() {
                return Self::Stdio {
                    command: command.clone(),
                    args: args.to_vec(),
                    env: env.clone(),
                };
            }
        }
        let mut url = None;
        let mut headers = BTreeMap::new();
        let mut words = args.iter();
        while let Some(word) = words.next() {
            match word.as_str() {
                "--url" => url = words.next().cloned(),
                "--header" => {
                    if let Some((name, value)) = words.next().and_then(|h| h.split_once(':')) {
                        headers.insert(name.trim().to_owned(), value.trim().to_owned());
                    }
                }
                _ => {}
            }
        }
        match url {
            Some(url) => Self::Http { url, headers },
            None => self.clone(),
        }
    }
}

// === impl SyntaxError ===

impl SyntaxError {
    /// The error at byte `offset` of `text`.
    pub fn at(text: &str, offset: usize, message: impl Into<String>) -> Self {
        let before = text.get(..offset).unwrap_or(text);
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |idx| idx + 1);
        let column = before.get(line_start..).unwrap_or("").chars().count() + 1;
        Self {
            line,
            column,
            message: message.into(),
        }
    }
}

/// Every server of every host that `env` shows, and the files that could
/// not be read.
pub fn discover(env: &DiscoveryEnv) -> Discovery {
    let mut discovery = Discovery::default();
    for location in locations::locations(env) {
        let text = match std::fs::read(&location.path) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => text,
                Err(_) => {
                    discovery.problems.push(FileProblem {
                        host: location.host,
                        path: location.path.clone(),
                        message: "not UTF-8 text".to_owned(),
                    });
                    continue;
                }
            },
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => {
                discovery.problems.push(FileProblem {
                    host: location.host,
                    path: location.path.clone(),
                    message: format!("cannot read it: {error}"),
                });
                continue;
            }
        };
        match entries(&location, &text) {
            Ok(entries) => {
                discovery
                    .servers
                    .extend(entries.into_iter().map(|entry| DiscoveredServer {
                        host: location.host,
                        config_path: location.path.clone(),
                        scope: entry.scope,
                        project: entry.project,
                        name: entry.name,
                        wrapped: entry.transport.is_hintgate(),
                        transport: entry.transport,
                    }))
            }
            Err(error) => discovery.problems.push(FileProblem {
                host: location.host,
                path: location.path.clone(),
                message: format!(
                    "line {}, column {}: {}",
                    error.line, error.column, error.message
                ),
            }),
        }
    }
    discovery
}

/// The discovery result as pretty JSON, for `--json` output.
#[cfg_attr(
    not(test),
    expect(
        dead_code,
        reason = "the discovery alone, for tests; `hintgate scan --json` adds each server's check"
    )
)]
pub fn to_json(discovery: &Discovery) -> String {
    serde_json::to_string_pretty(discovery).unwrap_or_default()
}

/// The config files `env` shows, whether or not they exist.
pub fn locations(env: &DiscoveryEnv) -> Vec<Location> {
    locations::locations(env)
}

/// The server entries in `text`, a file at `location`.
pub fn entries(location: &Location, text: &str) -> Result<Vec<Entry>, SyntaxError> {
    match location.format {
        Format::Json(key) => jsonc::entries(location.host, text, Some(key), location.scope),
        Format::ClaudeJson => jsonc::entries(location.host, text, None, location.scope),
        Format::CodexToml => codex::entries(text, location.scope),
        Format::ContinueYaml => yaml::entries(text, location.scope),
    }
}

/// The path of `path` shown to a person: under the home directory as `~/...`.
pub fn display_path(path: &Path, home: &Path) -> String {
    match path.strip_prefix(home) {
        Ok(rest) => format!("~/{}", rest.display()),
        Err(_) => path.display().to_string(),
    }
}

fn names_only<S: serde::Serializer>(
    map: &BTreeMap<String, String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(map.keys())
}

#[cfg(test)]
mod tests;
pub mod vars;
