//! The configuration model (`hintgate.toml`, design §3).
//!
//! [`parse_str`] turns text into a [`ValidConfig`] plus every [`Diagnostic`](crate::diag::Diagnostic) it
//! found; a `ValidConfig` exists only when none of them is an error. Reading
//! the file is the caller's job (the loader at the edge), and so is expanding
//! `${VAR}` references, with [`crate::vars::expand`].

mod parse;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::glob::Glob;
use crate::tool::Trust;

pub use crate::redact::AuditSettings;
pub use parse::{parse_str, parse_str_checking_vars};

/// The profile: how the gateway treats calls no rule decides (design §4.2, step 6).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    /// Read-only tools run; everything else asks (the default).
    #[default]
    AskWrites,
    /// Tools that are not read-only are not listed, and calls to them are denied.
    HideWrites,
    /// Every call asks.
    AskAll,
}

/// What a rule does when it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// The call runs.
    Allow,
    /// A person is asked.
    Ask,
    /// The call is refused, and the tool is hidden.
    Deny,
}

/// A configuration in which every value has been checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidConfig {
    /// The `[gateway]` table.
    pub gateway: GatewaySettings,
    /// The `[servers.NAME]` tables, by name.
    pub servers: BTreeMap<String, ServerConfig>,
    /// The `[[rules]]`, in file order.
    pub rules: Vec<Rule>,
    /// The `[audit]` table: what the audit log redacts.
    pub audit: AuditSettings,
    /// The `[[labels]]`, in file order: what hints cannot say about a tool
    /// (a call that costs money).
    pub labels: Vec<Label>,
    /// The `[listen]` table: how `hintgate run` serves hosts over HTTP.
    pub listen: ListenSettings,
    /// The `[telemetry]` table: where traces of calls go.
    pub telemetry: TelemetrySettings,
    /// The `[[previews]]`, in file order: how a call is previewed for the
    /// person asked about it (design §4.3). The first that matches a tool
    /// applies.
    pub previews: Vec<PreviewRule>,
}

/// The `[telemetry]` table: OpenTelemetry traces of tool calls, exported
/// over OTLP (HTTP, JSON); off unless an endpoint is named.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TelemetrySettings {
    /// The collector's base URL (`http://127.0.0.1:4318`); spans go to
    /// `/v1/traces` under it.
    pub otlp_endpoint: Option<String>,
    /// The service name the spans carry (default `hintgate`).
    pub service_name: Option<String>,
}

/// One `[[previews]]` entry: how the calls of matching tools are previewed
/// when a person is asked about them. A preview only adds information to
/// the prompt; it never takes part in the decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PreviewRule {
    /// Which servers it applies to (default: all).
    #[serde(serialize_with = "serialize_glob")]
    pub server: Glob,
    /// Which tools, by the server's own tool name (default: all).
    #[serde(serialize_with = "serialize_glob")]
    pub tool: Glob,
    /// Where the preview comes from.
    pub previewer: Previewer,
}

/// Where a preview comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Previewer {
    /// The user's previewer command (`command`, `command_mode`,
    /// `timeout_ms`): the decision hook's sibling, told the call as one
    /// JSON object, answering a preview or why there is none.
    Command(HookConfig),
    /// A preview hintgate computes itself from the local file (`files`).
    Files(FilePreview),
    /// A trusted server's own dry run (`dry_run_argument`): the same call
    /// with this argument set to `true`, sent only to a trusted server.
    DryRun {
        /// The argument that asks for a dry run (`dryRun`).
        argument: String,
    },
}

/// A `files` table of `[[previews]]`: which arguments of a call name the
/// file and what it becomes, and the directories hintgate may read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FilePreview {
    /// The argument holding the file's path (`path`).
    pub path: String,
    /// What the call does to it.
    pub change: FileChange,
    /// The directories the server serves: nothing outside them is read
    /// (symbolic links resolved). Empty for the built-in previews of a
    /// server hintgate recognises, whose directories are its arguments.
    pub roots: Vec<String>,
}

/// What a call does to a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileChange {
    /// Replaces its content with the argument `content`.
    Write {
        /// The argument holding the new content.
        content: String,
    },
    /// Applies the argument `edits`: an array of `{"oldText", "newText"}`
    /// (the reference filesystem server's `edit_file`).
    Edit {
        /// The argument holding the edits.
        edits: String,
    },
    /// Moves it to the argument `destination`.
    Move {
        /// The argument holding where it goes.
        destination: String,
    },
    /// Creates a directory at the path (`create_directory = true`).
    CreateDirectory,
}

/// The `[listen]` table: the HTTP host side of `hintgate run`, each value
/// overridden by its flag (`--listen`, `--listen-public`, `--tls-cert`,
/// `--tls-key`, `--allow-origin`, `--oauth-*`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ListenSettings {
    /// Where to serve `/mcp`; with it, `hintgate run` serves HTTP.
    pub address: Option<std::net::SocketAddr>,
    /// An address beyond loopback is allowed (tokens are then needed).
    pub public: bool,
    /// The PEM certificate chain for HTTPS (absolute, or `${VAR}`).
    pub tls_cert: Option<String>,
    /// Its PEM private key (absolute, or `${VAR}`).
    pub tls_key: Option<String>,
    /// Origins a browser page may call from, besides the gateway's own.
    pub allow_origins: Vec<String>,
    /// The OAuth 2.1 authorization server whose access tokens are taken
    /// (their `iss`).
    pub oauth_issuer: Option<String>,
    /// Its JSON Web Key Set.
    pub oauth_jwks: Option<String>,
    /// This gateway as tokens name it in `aud`.
    pub oauth_audience: Option<String>,
    /// The token scope that gives read.
    pub oauth_read_scope: Option<String>,
    /// The token scope that gives write.
    pub oauth_write_scope: Option<String>,
    /// How long a connection has to send a request's headers, in seconds;
    /// also how long a kept-alive connection may sit idle between requests.
    /// `None`: the HTTP side's default.
    pub header_timeout_s: Option<u64>,
    /// How long a request's body may go without sending a byte, in seconds.
    /// `None`: the HTTP side's default.
    pub body_timeout_s: Option<u64>,
    /// The most connections at once that have not yet sent an
    /// authenticated request; past it the oldest of them is closed.
    /// `None`: the HTTP side's default.
    pub max_unauthenticated: Option<u64>,
    /// The same, from one source address. `None`: the HTTP side's default.
    pub max_unauthenticated_per_address: Option<u64>,
}

/// The `[gateway]` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GatewaySettings {
    /// The profile for calls no rule decides.
    pub profile: Profile,
    /// Every ask becomes a deny (nobody is there to answer).
    pub unattended: bool,
    /// Between server and tool name in gateway mode (`fs__read_file`).
    pub separator: String,
    /// How long an ask waits for an answer before it is a deny.
    pub ask_timeout_s: u64,
    /// How long a forwarded call waits for the server before it fails.
    pub call_timeout_s: u64,
    /// The largest message a server may send, in bytes; a longer line fails
    /// the server's calls and restarts it.
    pub max_message_bytes: u64,
    /// How deeply a message may nest objects and arrays, counted from the
    /// message itself (level 1). A server's deeper answer fails its request,
    /// a deeper host request is refused, and neither is passed on: a host
    /// or server whose parser stops at some depth (`serde_json` stops at
    /// 128) could crash on it.
    pub max_json_depth: u64,
    /// The most tools of one server the gateway lists and pins: a listing's
    /// tools past it, and new tools once the server has that many pins
    /// (its removed tools' included), are not listed, with a warning.
    pub max_tools_per_server: u64,
    /// Where pins, approvals, the queue and the audit log are kept:
    /// `postgres://...` or `sqlite:PATH`; `None` is SQLite in the state
    /// directory. May hold `${VAR}` references (a password), expanded at
    /// start-up.
    pub store: Option<String>,
    /// The user's decision hook for every server that does not name its
    /// own (`decide_command`, design §4.2 step 3).
    pub decide: Option<HookConfig>,
    /// How long a write's recorded result answers a call with the same
    /// idempotency key, in seconds (`idempotency_window_s`).
    pub idempotency_window_s: u64,
    /// Who the host on stdio is (`principal`): the name its idempotency
    /// keys are kept under, so that two users' gateways on one store never
    /// answer each other's keys. `None`: `hintgate run` names the local
    /// user (`local:NAME`).
    pub principal: Option<String>,
}

/// The user's own program that takes part in every `tools/call` decision
/// (`decide_command`): it gets the call as one JSON object and answers
/// `allow`, `ask`, `deny` or `abstain`, after the deny rules and changed
/// definitions and before everything else (design §4.2 step 3).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct HookConfig {
    /// The program and its arguments (`decide_command`).
    pub command: Vec<String>,
    /// One long-lived process, or one process per call.
    pub mode: HookMode,
    /// How long an answer may take before the call is denied, in
    /// milliseconds (`decide_timeout_ms`).
    pub timeout_ms: u64,
}

/// How the decision hook runs (`decide_command_mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HookMode {
    /// One process, started with the gateway and again when it dies, that
    /// reads one JSON object per line and answers each by its `id`
    /// (`"persistent"`, the default).
    #[default]
    Persistent,
    /// A process per call, which reads one JSON object and answers one
    /// (`"per-call"`).
    PerCall,
}

/// Which decision hook a server's calls go to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServerHook {
    /// The gateway's (`[gateway] decide_command`), if any.
    #[default]
    Inherit,
    /// None, whatever the gateway names (`decide_command = []`).
    Off,
    /// Its own.
    Own(HookConfig),
}

/// One `[[labels]]` entry: what a tool's hints cannot say.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Label {
    /// Which servers it applies to (default: all).
    #[serde(serialize_with = "serialize_glob")]
    pub server: Glob,
    /// Which tools, by the server's own tool name (default: all).
    #[serde(serialize_with = "serialize_glob")]
    pub tool: Glob,
    /// A call costs money or has another side effect that cannot be undone:
    /// it is asked about every time, never remembered, and no allow rule,
    /// hook or profile lets it through unasked.
    pub paid: bool,
    /// Why, in the user's words; shown in prompts and refusals.
    pub reason: Option<String>,
}

/// One `[servers.NAME]` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerConfig {
    /// The configured name.
    pub name: String,
    /// How to reach the server.
    pub transport: Transport,
    /// Whether its annotations are believed.
    pub trust: Trust,
    /// Which of its tools return private data (design §4.4).
    pub private_data: PrivateData,
    /// The sandbox to run it in, for a stdio server.
    pub sandbox: Option<SandboxConfig>,
    /// Which decision hook its calls go to.
    pub decide: ServerHook,
    /// The input property that carries an idempotency key
    /// (`idempotency_key`, default `"idempotency_key"`); `None` when the
    /// server's keys are not handled (`idempotency_key = false`).
    pub idempotency_key: Option<String>,
    /// A second instance of the server, with credentials that can only
    /// read, for the calls that only read (`[servers.NAME.read_only]`).
    pub read_only: Option<ReadOnlyConfig>,
    /// How hintgate signs in to a URL server behind OAuth
    /// (`[servers.NAME.oauth]`); `None` when the table is absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oauth: Option<OAuthConfig>,
}

/// A `[servers.NAME.oauth]` table: hintgate as the OAuth client of a URL
/// server (docs/oauth-client.md). Every key is optional: without any, the
/// client is registered dynamically or by a client ID metadata document.
/// A client secret is never written here, only where to read it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct OAuthConfig {
    /// A pre-registered client id.
    pub client_id: Option<String>,
    /// A file holding the client secret (readable by its owner only).
    pub client_secret_file: Option<String>,
    /// An environment variable holding the client secret.
    pub client_secret_env: Option<String>,
    /// The URL of a client ID metadata document the user hosts (https).
    pub client_metadata_url: Option<String>,
    /// The issuer to sign in with, among those the server's resource
    /// metadata names.
    pub authorization_server: Option<String>,
    /// The scopes to ask for instead of those the server suggests.
    pub scopes: Option<Vec<String>>,
    /// How a token is obtained.
    pub grant: OAuthGrant,
    /// The loopback port of the redirect (a pre-registered client may need
    /// a fixed one); any free port when unset.
    pub redirect_port: Option<u16>,
    /// Whose login this table signs in: the full instance's, or the
    /// read-only instance's, whose token is asked for with the read-only
    /// table's `scopes` and kept apart ([`ServerConfig::read_only_instance`]
    /// sets it; a config never writes it).
    #[serde(skip_serializing_if = "Instance::is_full")]
    pub instance: Instance,
}

/// How a token is obtained (`[servers.NAME.oauth] grant`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OAuthGrant {
    /// A person signs in in a browser; the redirect comes to loopback.
    #[default]
    AuthorizationCode,
    /// A person signs in on another device (RFC 8628).
    Device,
    /// A service account: the client's own secret, no person.
    ClientCredentials,
}

/// A `[servers.NAME.read_only]` table: how to reach a second instance of
/// the server whose credentials (a database role, a token's scopes) can
/// only read. Every call the decision treats as read-only goes to it; every
/// other call goes to the server's own (full) instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReadOnlyConfig {
    /// How to reach the instance: the server's transport with what the
    /// table overrides (`command` and `args` of a stdio server, and `url`,
    /// replaced; `env` of a stdio server and `headers` of a URL server,
    /// merged by name).
    pub transport: Transport,
    /// The user vouches that these credentials cannot change anything the
    /// server can reach (`vouch = true`): a tool that claims to only read,
    /// even on an untrusted server, is then effectively read-only.
    pub vouch: bool,
    /// For a URL server behind OAuth: the instance signs in with a token of
    /// its own, asked for with these scopes only (`scopes = [...]`), kept
    /// apart from the full instance's login (`hintgate auth login NAME
    /// --read-only`). `None`: the instance uses what `headers` and `url`
    /// give it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scopes: Option<Vec<String>>,
}

/// What vouched read-only credentials leave open on a stdio server without
/// a sandbox: the credentials refuse the writes they guard, and nothing
/// else. `hintgate explain` gives it as a caveat and `hintgate config check`
/// as the warning `vouch-without-sandbox`, in these words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsandboxedVouch {
    /// What the vouch does not cover, in one lowercase line.
    pub message: String,
    /// How to cover it.
    pub help: String,
}

/// Which instance of a server a call goes to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Instance {
    /// The server's own, with its full credentials (every server has one).
    #[default]
    Full,
    /// The instance of `[servers.NAME.read_only]`.
    ReadOnly,
}

/// How the gateway reaches a server. Strings may hold `${VAR}` references,
/// expanded at start-up, outside the core.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Transport {
    /// A child process speaking MCP on stdin and stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Environment variables set for it.
        env: BTreeMap<String, String>,
    },
    /// A Streamable HTTP endpoint.
    Http {
        /// The endpoint URL.
        url: String,
        /// Headers sent with every request.
        headers: BTreeMap<String, String>,
    },
}

/// Which tools of a server return private data.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PrivateData {
    /// None (the default).
    #[default]
    None,
    /// Every tool (`private_data = true`).
    All,
    /// The tools whose names match one of these globs (`private_data = ["read_*"]`).
    Tools(#[serde(serialize_with = "serialize_globs")] Vec<Glob>),
}

/// A `[servers.NAME.sandbox]` table (design §6).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SandboxConfig {
    /// Paths the server may read, besides what its runtime needs.
    pub read: Vec<String>,
    /// Paths the server may write.
    pub write: Vec<String>,
    /// Whether the server may use the network unconfined (default: no).
    /// `false` with [`SandboxConfig::egress`] empty is no network at all.
    pub network: bool,
    /// `network = ["host:port", ...]`: the only hosts and ports the server
    /// may reach, through an egress proxy the gateway runs for it (its own
    /// network namespace has nothing else). Empty unless the table gave a
    /// list; a list implies `network` is `false`.
    pub egress: Vec<Egress>,
    /// Start the server even when the kernel cannot enforce everything.
    pub best_effort: bool,
    /// The most files it may have open at once (`RLIMIT_NOFILE`); `None`
    /// is the sandbox's default.
    pub max_open_files: Option<u64>,
    /// The most processes and threads it may run at once (`RLIMIT_NPROC`,
    /// counted in its own user namespace); `None` is the sandbox's default.
    pub max_processes: Option<u64>,
    /// The most address space each of its processes may map, in MiB
    /// (`RLIMIT_AS`); `None` is the sandbox's default.
    pub max_memory_mb: Option<u64>,
    /// Who installs the package a launcher line (`npx -y PKG`, `uvx PKG`)
    /// starts, when it is not installed: the user, with `hintgate sandbox
    /// prepare` (the default), or the gateway before the confined start.
    pub prepare: Prepare,
}

/// `prepare` in a sandbox table: who installs a launcher's package that is
/// not installed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Prepare {
    /// `"by-hand"`: the server does not start, and its calls fail at once
    /// with an error naming `hintgate sandbox prepare`.
    #[default]
    ByHand,
    /// `"on-start"`: the gateway runs what `hintgate sandbox prepare` runs,
    /// outside the sandbox and with the network, before the confined start,
    /// bounded by the server's start timeout.
    OnStart,
}

impl Prepare {
    /// The value as a config writes it.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::ByHand => "by-hand",
            Self::OnStart => "on-start",
        }
    }
}

/// One `host:port` a sandboxed server may reach through the gateway's
/// egress proxy (`network = ["host:port", ...]`).
///
/// The host is a DNS name (kept in lowercase) or an IP literal, as written;
/// the proxy matches what a server asks for against it as text, so a name
/// allows that name (resolved by the gateway) and not the addresses it
/// happens to resolve to, and an address allows only itself.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Egress {
    /// The host name in lowercase, or an IP literal (an IPv6 one without
    /// its brackets).
    pub host: String,
    /// The TCP port.
    pub port: u16,
}

/// One `[[rules]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rule {
    /// Which servers it applies to (default: all).
    #[serde(serialize_with = "serialize_glob")]
    pub server: Glob,
    /// Which tools, by the server's own tool name (default: all).
    #[serde(serialize_with = "serialize_glob")]
    pub tool: Glob,
    /// What it does.
    pub action: Action,
    /// Why, in the user's words; shown in prompts, refusals and the log.
    pub reason: Option<String>,
}

/// The input property that carries an idempotency key unless a server
/// names another.
pub const DEFAULT_IDEMPOTENCY_KEY: &str = "idempotency_key";

/// How long the decision hook may take unless the configuration says.
pub const DEFAULT_DECIDE_TIMEOUT_MS: u64 = 2000;

// === impl GatewaySettings ===

impl Default for GatewaySettings {
    fn default() -> Self {
        Self {
            profile: Profile::AskWrites,
            unattended: false,
            separator: "__".to_owned(),
            ask_timeout_s: 120,
            call_timeout_s: 60,
            max_message_bytes: 16 * 1024 * 1024,
            max_json_depth: 64,
            max_tools_per_server: 10_000,
            store: None,
            decide: None,
            idempotency_window_s: 86_400,
            principal: None,
        }
    }
}

// === impl ValidConfig ===

impl ValidConfig {
    /// The configuration of wrap mode: one server, no rules, settings from flags.
    pub fn wrap(
        name: &str,
        transport: Transport,
        trust: Trust,
        profile: Profile,
        unattended: bool,
    ) -> Self {
        let server = ServerConfig {
            name: name.to_owned(),
            transport,
            trust,
            private_data: PrivateData::None,
            sandbox: None,
            decide: ServerHook::Inherit,
            idempotency_key: Some(DEFAULT_IDEMPOTENCY_KEY.to_owned()),
            read_only: None,
            oauth: None,
        };
        Self {
            gateway: GatewaySettings {
                profile,
                unattended,
                ..GatewaySettings::default()
            },
            servers: BTreeMap::from([(name.to_owned(), server)]),
            rules: Vec::new(),
            audit: AuditSettings::default(),
            labels: Vec::new(),
            listen: ListenSettings::default(),
            telemetry: TelemetrySettings::default(),
            previews: Vec::new(),
        }
    }

    /// The preview configured for `tool` of `server`: the first
    /// `[[previews]]` entry that matches.
    pub fn preview_for(&self, server: &str, tool: &str) -> Option<&Previewer> {
        self.previews
            .iter()
            .find(|rule| rule.server.matches(server) && rule.tool.matches(tool))
            .map(|rule| &rule.previewer)
    }
}

// === impl ServerConfig ===

impl ServerConfig {
    /// What identifies the server to a person: its command line or its URL.
    pub fn identity(&self) -> String {
        match &self.transport {
            Transport::Stdio { command, args, .. } => std::iter::once(command.as_str())
                .chain(args.iter().map(String::as_str))
                .map(shell_word)
                .collect::<Vec<_>>()
                .join(" "),
            Transport::Http { url, .. } => url.clone(),
        }
    }

    /// Whether a result of `tool` counts as private data.
    pub fn returns_private_data(&self, tool: &str) -> bool {
        match &self.private_data {
            PrivateData::None => false,
            PrivateData::All => true,
            PrivateData::Tools(globs) => globs.iter().any(|glob| glob.matches(tool)),
        }
    }

    /// The decision hook its calls go to: its own, else the gateway's
    /// (`None` when there is none, or the server turned it off).
    pub fn hook<'a>(&'a self, gateway: &'a GatewaySettings) -> Option<&'a HookConfig> {
        match &self.decide {
            ServerHook::Inherit => gateway.decide.as_ref(),
            ServerHook::Off => None,
            ServerHook::Own(hook) => Some(hook),
        }
    }

    /// Whether everything the server returns counts as private data
    /// (`private_data = true`): what it returns besides tool results (a
    /// resource read, a resource update, a prompt) as well. A list of tool
    /// globs names those tools only.
    pub fn serves_private_data(&self) -> bool {
        self.private_data == PrivateData::All
    }

    /// What the read-only instance proves: a vouched one refuses the writes
    /// of every call sent to it (nothing without a vouched instance).
    pub fn credentials(&self) -> crate::tool::CredentialProof {
        crate::tool::CredentialProof {
            read_only: self.read_only.as_ref().is_some_and(|table| table.vouch),
        }
    }

    /// What the vouch of a stdio server's read-only instance does not cover
    /// when no sandbox confines the server (it can still write this
    /// machine's files and reach elsewhere); `None` when the server vouches
    /// for no read-only instance, is reached by URL, or has a sandbox.
    pub fn unsandboxed_vouch(&self) -> Option<UnsandboxedVouch> {
        let vouched = self.credentials().read_only;
        let local = matches!(self.transport, Transport::Stdio { .. });
        if !vouched || !local || self.sandbox.is_some() {
            return None;
        }
        let name = &self.name;
        Some(UnsandboxedVouch {
            message: format!(
                "server `{name}` runs its read-only instance with credentials vouched for, and no sandbox: the credentials refuse the writes they guard, but nothing stops it writing the files of this machine or reaching elsewhere"
            ),
            help: format!("add a `[servers.{name}.sandbox]` table"),
        })
    }

    /// The configuration of the read-only instance as a server of its own
    /// (the same name, trust and sandbox; its transport), for whatever
    /// starts or connects it; `None` without a `read_only` table.
    ///
    /// With `scopes`, the instance signs in with its own OAuth token: its
    /// `oauth` table is the server's with those scopes, marked as the
    /// read-only instance's ([`OAuthConfig::instance`]).
    pub fn read_only_instance(&self) -> Option<ServerConfig> {
        let table = self.read_only.as_ref()?;
        let oauth = match (&self.oauth, &table.scopes) {
            (Some(oauth), Some(scopes)) => Some(OAuthConfig {
                scopes: Some(scopes.clone()),
                instance: Instance::ReadOnly,
                ..oauth.clone()
            }),
            (oauth, _) => oauth.clone(),
        };
        Some(Self {
            transport: table.transport.clone(),
            read_only: None,
            oauth,
            ..self.clone()
        })
    }
}

// === impl Instance ===

impl Instance {
    /// The instance as the audit log and `hintgate explain` name it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::ReadOnly => "read-only",
        }
    }

    /// Whether this is the full instance.
    pub const fn is_full(&self) -> bool {
        matches!(self, Self::Full)
    }
}

/// Whether a configured sandbox is taken as enforced, for `explain` and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Enforcement {
    /// Enforced unless `best_effort`: a sandbox the kernel cannot enforce
    /// stops the server, so a running server's sandbox is enforced.
    #[default]
    Auto,
    /// Taken as enforced.
    Enforced,
    /// Taken as not enforced.
    None,
}

// === impl SandboxConfig ===

impl SandboxConfig {
    /// What the sandbox proves when taken as `enforcement` says.
    pub fn proof_when(&self, enforcement: Enforcement) -> crate::tool::SandboxProof {
        let enforced = match enforcement {
            Enforcement::Auto => !self.best_effort,
            Enforcement::Enforced => true,
            Enforcement::None => false,
        };
        if enforced {
            self.proof()
        } else {
            crate::tool::SandboxProof::default()
        }
    }

    /// What this sandbox proves once the kernel enforces it: no network when
    /// `network = false` with no host list (a list of hosts is a way out:
    /// it proves only that the server reaches nothing else), no writes when
    /// `write` is empty. A sandbox that is not enforced proves nothing;
    /// that is the caller's to know.
    pub fn proof(&self) -> crate::tool::SandboxProof {
        crate::tool::SandboxProof {
            no_network: !self.network && self.egress.is_empty(),
            no_writes: self.write.is_empty(),
            egress_only: !self.network && !self.egress.is_empty(),
        }
    }

    /// The hosts of `network = ["host:port", ...]`, as written (`host:port`,
    /// an IPv6 address in brackets), in order.
    pub fn egress_hosts(&self) -> Vec<String> {
        self.egress.iter().map(Egress::to_string).collect()
    }
}

// === impl Egress ===

impl Egress {
    /// Reads one `host:port` entry; `Err` says what is wrong with it, in
    /// words for a diagnostic.
    ///
    /// # Errors
    ///
    /// The entry has no port, a port that is not 1 to 65535, an empty host,
    /// a host that is neither a DNS name nor an IP literal (a wildcard, a
    /// URL, a path, an address with a zone), or an IPv6 literal without its
    /// brackets.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.contains("://") || text.contains('/') {
            return Err("is a URL or a path, not `host:port`".to_owned());
        }
        let Some((host, port)) = text.rsplit_once(':') else {
            return Err("has no port: write `host:port`".to_owned());
        };
        let digits = !port.is_empty()
            && !port.starts_with('0')
            && port.bytes().all(|byte| byte.is_ascii_digit());
        let port = match port.parse::<u16>() {
            Ok(number) if digits && number > 0 => number,
            _ => return Err(format!("has a port `{port}` that is not 1 to 65535")),
        };
        if let Some(inner) = host.strip_prefix('[') {
            let Some(inner) = inner.strip_suffix(']') else {
                return Err("has an IPv6 address without its closing `]`".to_owned());
            };
            return match inner.parse::<std::net::Ipv6Addr>() {
                Ok(address) => Ok(Self {
                    host: address.to_string(),
                    port,
                }),
                Err(_) => Err(format!("has `{inner}`, which is not an IPv6 address")),
            };
        }
        if host.contains(':') {
            return Err("has an IPv6 address without brackets: write `[address]:port`".to_owned());
        }
        if host.is_empty() {
            return Err("has no host".to_owned());
        }
        if host.contains('*') {
            return Err("has a wildcard: name each host".to_owned());
        }
        if let Ok(address) = host.parse::<std::net::Ipv4Addr>() {
            return Ok(Self {
                host: address.to_string(),
                port,
            });
        }
        let name = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
        let label_ok = |label: &str| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
        };
        // A name whose last label is all digits would be read as an IPv4
        // address by some resolvers (`1.2.3.04`): refused, as is anything
        // that is not letters, digits, `-` and `_` in dotted labels.
        let numeric_tail = name
            .rsplit('.')
            .next()
            .is_some_and(|last| last.bytes().all(|byte| byte.is_ascii_digit()));
        if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) || numeric_tail {
            return Err(format!(
                "has `{host}`, which is not a host name or an IP address"
            ));
        }
        Ok(Self { host: name, port })
    }
}

impl std::fmt::Display for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl Serialize for Egress {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

// === impl Label ===

impl Label {
    /// Whether the label applies to `tool` of `server`.
    pub fn matches(&self, server: &str, tool: &str) -> bool {
        self.server.matches(server) && self.tool.matches(tool)
    }
}

// === impl Rule ===

impl Rule {
    /// Whether the rule applies to `tool` of `server`.
    pub fn matches(&self, server: &str, tool: &str) -> bool {
        self.server.matches(server) && self.tool.matches(tool)
    }
}

/// Quotes a word for display when it holds anything but safe characters.
fn shell_word(word: &str) -> String {
    let safe = !word.is_empty()
        && word
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || "-_./:=@%+,".contains(ch));
    if safe {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

fn serialize_glob<S: serde::Serializer>(glob: &Glob, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(glob.as_str())
}

fn serialize_globs<S: serde::Serializer>(globs: &[Glob], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(globs.iter().map(Glob::as_str))
}

#[cfg(test)]
mod tests;
