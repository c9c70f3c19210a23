//! What the user typed, parsed with clap into plain structs.
//!
//! Resolving these into runtime settings (loading files, building a policy)
//! happens in the command modules, so that this file stays a description of
//! the command line and nothing else.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::exit::EXIT_CODES_HELP;

/// hintgate: an MCP security gateway. From an untrusted server, annotations
/// may add friction but never remove it.
#[derive(Debug, Parser)]
#[command(name = "hintgate", version, after_help = EXIT_CODES_HELP)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the decision and its reasons for a tool call, without running anything.
    #[command(after_help = EXIT_CODES_HELP)]
    Explain(ExplainArgs),
    /// Run the gateway: wrap one server (`-- CMD ARGS`) or every server of a config.
    #[command(after_help = RUN_HELP)]
    Run(Box<RunArgs>),
    /// Watch the gateway at work: a scripted host, two demo servers, every decision printed.
    Demo,
    /// The demo's upstream server (used by `hintgate demo`).
    #[command(hide = true)]
    DemoServer {
        /// Which demo server to be.
        #[arg(long, value_enum)]
        flavor: crate::demo_server::Flavor,
    },
    /// A decision hook that allows every call at once (the overhead
    /// benchmark's, to measure what a persistent hook costs the gateway).
    #[command(hide = true)]
    DemoHook,
    /// List, show, diff, approve and revoke pinned tool definitions.
    Pins(PinsArgs),
    /// Query the audit log, or verify it.
    #[command(
        after_help = "Exit codes: 0 ok (verify: the log holds), 1 error (verify: no key to check the MACs), 2 verify found something wrong"
    )]
    Log(LogArgs),
    /// Check one server's tool definitions: hints, descriptions, schemas.
    #[command(after_help = LINT_HELP)]
    Lint(LintArgs),
    /// Find every host's MCP config on this machine and in the project,
    /// lint each server, and show them all in one table. Changes nothing.
    #[command(after_help = SCAN_HELP)]
    Scan(ScanArgs),
    /// Work with configuration files.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// List, approve and deny calls waiting for a person (hosts that cannot ask).
    #[command(
        after_help = "Exit codes: 0 ok, 1 error (no such call, or it no longer waits), 64 bad usage"
    )]
    Approvals(ApprovalsArgs),
    /// Serve the web console on loopback: waiting calls, definitions, the log.
    #[command(after_help = CONSOLE_HELP)]
    Console(ConsoleArgs),
    /// The bearer tokens hosts use to reach `hintgate run --listen` over
    /// HTTP: add one (shown once), list them, revoke one.
    Token(TokenArgs),
    /// Sign in to a remote server behind OAuth (the tokens are kept
    /// encrypted in the store), see the logins, sign out.
    Auth(AuthArgs),
    /// Route the MCP servers of the hosts' configs through `hintgate run`,
    /// with a backup of each file changed.
    #[command(after_help = WRAP_HELP)]
    Wrap(WrapArgs),
    /// Give the entries `hintgate wrap` rewrote back their original bytes.
    #[command(after_help = WRAP_HELP)]
    Unwrap(UnwrapArgs),
    /// The kernel sandbox of stdio servers: what this kernel enforces, and
    /// what one server would get.
    #[command(subcommand)]
    Sandbox(SandboxCommand),
}

/// `hintgate sandbox`
#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// What this kernel can enforce (Landlock, namespaces, seccomp), in plain words.
    #[command(after_help = "Exit codes: 0 ok (whatever the kernel offers)")]
    Check(SandboxCheckArgs),
    /// The exact paths and rights, environment and limits a server would get.
    #[command(after_help = EXIT_CODES_HELP)]
    Explain(SandboxExplainArgs),
    /// Install a server's package outside the sandbox, with the network, so
    /// that its launcher (`npx -y PKG`, `uvx PKG`, `uv run`) fetches nothing
    /// inside it.
    #[command(after_help = EXIT_CODES_HELP)]
    Prepare(SandboxPrepareArgs),
    /// Propose a sandbox table for a server of the hosts' configs (what
    /// `hintgate wrap --sandbox` would write).
    #[command(after_help = EXIT_CODES_HELP)]
    Suggest(SandboxSuggestArgs),
}

/// `hintgate sandbox suggest`
#[derive(Debug, Args)]
pub struct SandboxSuggestArgs {
    /// The server, as named in the host's config.
    #[arg(value_name = "SERVER")]
    pub server: String,
    /// Only this host's configs (repeatable; default: every host).
    #[arg(long, value_enum, value_name = "HOST")]
    pub host: Vec<crate::hosts::Host>,
    /// A path the server may write (repeatable; otherwise it only reads).
    #[arg(long, value_name = "PATH")]
    pub write: Vec<PathBuf>,
    /// Propose `prepare = "on-start"` for a server started through a
    /// launcher: the gateway installs its package before its first start.
    #[arg(long)]
    pub prepare_on_start: bool,
}

/// `hintgate sandbox prepare`
#[derive(Debug, Args)]
pub struct SandboxPrepareArgs {
    /// The server, as named in the config.
    #[arg(value_name = "SERVER")]
    pub server: String,
    /// The configuration.
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
}

/// `hintgate sandbox check`
#[derive(Debug, Args)]
pub struct SandboxCheckArgs {
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `hintgate sandbox explain`
#[derive(Debug, Args)]
pub struct SandboxExplainArgs {
    /// The server, as named in the config.
    #[arg(value_name = "SERVER")]
    pub server: String,
    /// The configuration.
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Also start the server in its sandbox, as `hintgate lint` does (its
    /// handshake and its tool list), and say whether it starts, or why not
    /// (exit 1 when it does not).
    #[arg(long)]
    pub start: bool,
    /// With `--start`: how long the start and the listing may take, in
    /// seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 30, requires = "start")]
    pub timeout_s: u64,
}

/// Where the commands that read the store (`pins`, `log`, `approvals`)
/// find it.
#[derive(Debug, Args)]
pub struct StoreArgs {
    /// The state directory (as for `hintgate run`).
    #[arg(long, value_name = "DIR", global = true)]
    pub state_dir: Option<PathBuf>,
    /// The store: `postgres://...` (shared by several gateways) or
    /// `sqlite:PATH`; default `$HINTGATE_STORE`, else the `[gateway] store`
    /// of `--config`, else SQLite in the state directory.
    #[arg(long, value_name = "URL", global = true)]
    pub store: Option<String>,
    /// A gateway config whose `[gateway] store` names the store.
    #[arg(long, value_name = "FILE", global = true)]
    pub config: Option<PathBuf>,
}

/// `hintgate approvals`
#[derive(Debug, Args)]
pub struct ApprovalsArgs {
    /// Which store to read.
    #[command(flatten)]
    pub at: StoreArgs,
    /// The audit key's file, which seals what a person approves and checks
    /// the seals of what is stored (default: `$HINTGATE_AUDIT_KEY_FILE`,
    /// else the `[audit] key_file` of `--config`, else `audit.key` beside
    /// the SQLite store). Read, never made; a PostgreSQL store's gateways
    /// and everyone who approves on it share one.
    #[arg(long, value_name = "FILE", global = true)]
    pub audit_key: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: ApprovalsCommand,
}

/// `hintgate token`
#[derive(Debug, Args)]
pub struct TokenArgs {
    /// Which store keeps the tokens (the gateway's).
    #[command(flatten)]
    pub at: StoreArgs,
    /// The audit key's file, which seals each token's row so that nobody
    /// without it can add a token or raise its scope (default as for
    /// `hintgate run`; made on first use beside a SQLite store).
    #[arg(long, value_name = "FILE", global = true)]
    pub audit_key: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: TokenCommand,
}

/// `hintgate auth`
#[derive(Debug, Args)]
pub struct AuthArgs {
    /// Which store keeps the tokens (the gateway's); `--config` names the
    /// gateway's config, which is required: its `[servers.NAME]` say where
    /// each server is and how to sign in to it.
    #[command(flatten)]
    pub at: StoreArgs,
    /// The audit key's file, under a subkey of which the tokens are
    /// encrypted (default as for `hintgate run`; made on first use beside a
    /// SQLite store).
    #[arg(long, value_name = "FILE", global = true)]
    pub audit_key: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: AuthCommand,
}

/// `hintgate auth ...`
#[derive(Debug, Subcommand)]
pub enum AuthCommand {
    /// Sign in to the server `SERVER` of the config: prints the address to
    /// open in a browser and waits for its answer on loopback (or, with
    /// `--device`, a code to enter on another device), keeps the tokens,
    /// and says what was granted and until when.
    Login {
        /// The server's name in the config.
        server: String,
        /// A scope to ask for (repeat for several); default the config's
        /// `scopes`, else those the server suggests.
        #[arg(long, value_name = "SCOPE")]
        scope: Vec<String>,
        /// Sign in on another device (the device authorization grant),
        /// for a machine without a browser.
        #[arg(long)]
        device: bool,
        /// Sign in the server's read-only instance: a token of its own,
        /// asked for with `[servers.SERVER.read_only] scopes` only.
        #[arg(long)]
        read_only: bool,
        /// Sign in for the `--listen` principal NAME (a host token's
        /// name): that principal's calls go with this login and no other.
        #[arg(long, value_name = "NAME")]
        principal: Option<String>,
    },
    /// The servers of the config that sign in with OAuth: signed in or
    /// not, the scopes granted and until when (never a token).
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Forget the tokens of `SERVER` (its read-only instance's too), and
    /// revoke them where its authorization server can.
    Logout {
        /// The server's name in the config.
        server: String,
        /// Sign out the read-only instance only.
        #[arg(long)]
        read_only: bool,
        /// Sign out the `--listen` principal NAME's logins.
        #[arg(long, value_name = "NAME")]
        principal: Option<String>,
    },
}

/// `hintgate token ...`
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a token and print it, once: only its hash is kept.
    Add {
        /// Its name: who holds it (letters, digits, `_`, `-`, `.`).
        name: String,
        /// What it may do: `read` sees and runs only the tools that are
        /// effectively read-only; `write` whatever the configuration allows;
        /// `metrics` only reads `/metrics` (`hintgate run --metrics`), and
        /// is refused as a host's token.
        #[arg(long, value_enum)]
        scope: TokenScopeArg,
    },
    /// The tokens, by name, with their scope and whether their seal holds.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove a token: hosts that use it are refused from their next request.
    Revoke {
        /// Its name.
        name: String,
    },
}

/// `hintgate approvals ...`
#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// The calls waiting for a person, each with its whole prompt.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// One waiting call: its whole prompt, and its whole preview (the
    /// prompt shows a long diff's first hunks).
    Show {
        /// The call's number (from `list`, or the gateway's log).
        id: u64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Let a waiting call run; with `--arguments`, edit it first.
    Approve {
        /// The call's number (from `list`, or the gateway's log).
        id: u64,
        /// Remember the approval: for this call only (default), for this tool
        /// for the rest of the gateway's session, or for this tool always.
        #[arg(long, value_enum, default_value = "call")]
        remember: RememberArg,
        /// Edit the call: FILE holds the arguments it should run with (one
        /// JSON object, the whole of them). They are checked against the
        /// tool's input schema here; the gateway then decides on the edited
        /// call, previews it and puts it in the queue again, to be approved
        /// as shown. For this call only.
        #[arg(long, value_name = "FILE")]
        arguments: Option<std::path::PathBuf>,
    },
    /// Refuse a waiting call.
    Deny {
        /// The call's number.
        id: u64,
    },
}

const CONSOLE_HELP: &str = "\
It prints a URL with a random token; open it in a browser on this machine.
Nothing is served without the token. It reads and writes the same store as
the gateways: an answer given in the console releases the waiting call on
whichever gateway holds it.

Exit codes:
  0   stopped (Ctrl-C)
  1   error (the store, or the address cannot be listened on)
  64  bad usage";

/// `hintgate console`
#[derive(Debug, Args)]
pub struct ConsoleArgs {
    /// Which store to read and write.
    #[command(flatten)]
    pub at: StoreArgs,
    /// The address to listen on (default: loopback, a port the system picks).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<std::net::SocketAddr>,
    /// The audit key's file, so the log's chain is checked with its key (as
    /// for `hintgate log verify`).
    #[arg(long, value_name = "FILE")]
    pub audit_key: Option<PathBuf>,
}

/// How far an approval is remembered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RememberArg {
    /// This call only.
    Call,
    /// This tool, for the rest of the waiting gateway's session.
    Session,
    /// This tool always (for this definition).
    Always,
}

const WRAP_HELP: &str = "\
Hosts: claude-desktop, claude-code, cursor, vscode, windsurf, codex,
gemini-cli, zed, continue; their user configs under the home directory and
their project configs under the current directory.

Exit codes:
  0   done
  1   error while running (unwrap: an entry could not be restored)
  64  bad usage, or a host config that does not parse (nothing is changed)";

/// `hintgate wrap`
#[derive(Debug, Args)]
pub struct WrapArgs {
    /// Only this host's configs (repeatable; default: every host).
    #[arg(long, value_enum, value_name = "HOST")]
    pub host: Vec<crate::hosts::Host>,
    /// Only the server with this name (repeatable; default: every server).
    #[arg(long, value_name = "NAME")]
    pub server: Vec<String>,
    /// The trust given to the wrapped servers (`hintgate run --trust`).
    #[arg(long, value_enum)]
    pub trust: Option<TrustArg>,
    /// Say what would change, and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Where the record of wrapped entries is kept (as for `hintgate run`).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Confine each wrapped stdio server: the paths its arguments name may
    /// be read, those under `--write` written, and no network (the table is
    /// shown; `hintgate sandbox suggest` shows it alone).
    #[arg(long)]
    pub sandbox: bool,
    /// With `--sandbox`: a path the servers may write (repeatable).
    #[arg(long, value_name = "PATH", requires = "sandbox")]
    pub write: Vec<PathBuf>,
    /// With `--sandbox`: a server started through a launcher (`npx -y
    /// PKG`, `uvx PKG`) whose package is not installed gets it installed by
    /// the gateway before its first start (`prepare = "on-start"`), instead
    /// of failing until it is installed by hand.
    #[arg(long, requires = "sandbox")]
    pub prepare_on_start: bool,
}

/// `hintgate unwrap`
#[derive(Debug, Args)]
pub struct UnwrapArgs {
    /// Only this host's configs (repeatable; default: every host).
    #[arg(long, value_enum, value_name = "HOST")]
    pub host: Vec<crate::hosts::Host>,
    /// Only the server with this name (repeatable; default: every server).
    #[arg(long, value_name = "NAME")]
    pub server: Vec<String>,
    /// Say what would change, and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Where the record of wrapped entries is kept (as for `hintgate run`).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

const LINT_HELP: &str = "\
Examples:
  hintgate lint -- npx -y @modelcontextprotocol/server-filesystem /data
  hintgate lint --config hintgate.toml --server fs
  hintgate lint --format sarif -- python -m my_server > hintgate.sarif
  hintgate lint --url https://search.example/mcp --header \"Authorization: Bearer ${TOKEN}\"

Findings are silenced in hintgate.lint.toml (read from the current directory
unless --config-file names another):
  [[suppress]]
  code = \"implicit-hints\"
  tool = \"read_file\"
  reason = \"why the finding does not apply\"

A server named with --server is started exactly as `hintgate run` starts it:
with its env and, when it has a [servers.NAME.sandbox] table, confined, and
not started at all where the kernel cannot enforce the table (unless it says
best_effort = true).

Every code is documented in docs/diagnostics.md.

Exit codes:
  0   no finding at or above --fail-on
  1   the server could not be started, reached or listed
  2   findings at or above --fail-on
  64  bad usage, or a hintgate.lint.toml with errors";

/// `hintgate lint`
#[derive(Debug, Args)]
pub struct LintArgs {
    /// A Streamable HTTP server at this URL, instead of `-- CMD`.
    #[arg(long, value_name = "URL", conflicts_with = "command")]
    pub url: Option<String>,
    /// The server of this name in `--config`, instead of `-- CMD`: started
    /// as the gateway starts it, in its sandbox when it has one.
    #[arg(long, value_name = "NAME", requires = "config", conflicts_with_all = ["command", "url"])]
    pub server: Option<String>,
    /// With `--server`: the gateway's configuration file.
    #[arg(long, value_name = "FILE", requires = "server")]
    pub config: Option<PathBuf>,
    /// With `--url`: a header sent with every request (`Name: value` or `Name=value`).
    #[arg(long = "header", value_name = "NAME: VALUE", requires = "url")]
    pub headers: Vec<String>,
    /// How to print the findings.
    #[arg(long, value_enum, default_value_t = FormatArg::Table)]
    pub format: FormatArg,
    /// The least serious finding that makes the exit code 2.
    #[arg(long, value_enum, default_value_t = SeverityArg::Warning)]
    pub fail_on: SeverityArg,
    /// How long the whole check may take, in seconds.
    #[arg(long = "timeout-s", value_name = "SECONDS", default_value_t = 30)]
    pub timeout_s: u64,
    /// Call the tools that declare `readOnlyHint: true` and an `outputSchema`
    /// (with default arguments) and check their results against it.
    #[arg(long)]
    pub call_read_only: bool,
    /// The suppressions file (default: `hintgate.lint.toml` in the current
    /// directory, when there is one).
    #[arg(long, value_name = "FILE")]
    pub config_file: Option<PathBuf>,
    /// SARIF: the repository file each result is pinned to (default: the
    /// suppressions file, where findings are silenced).
    #[arg(long, value_name = "PATH")]
    pub sarif_artifact: Option<String>,
    /// The server's command line.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

const SCAN_HELP: &str = "\
Hosts: claude-desktop, claude-code, cursor, vscode, windsurf, codex,
gemini-cli, zed, continue; their user configs under the home directory and
their project configs under the project directory (--project, default: the
current directory). A server already wrapped by `hintgate run` is checked
through to the server behind the wrapper. Scan starts each server to list its
tools, as its host would, and writes no file.

Counts come from the tools' declared annotations, with the spec's defaults
for hints left implicit (not read-only, destructive, open-world).

Exit codes:
  0   every config was read and every server checked (findings included)
  1   a config could not be read, or a server could not be started, reached
      or listed in time
  64  bad usage";

/// `hintgate scan`
#[derive(Debug, Args)]
pub struct ScanArgs {
    /// Print one JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
    /// How long checking one server may take, in seconds.
    #[arg(
        long = "timeout-s",
        value_name = "SECONDS",
        default_value_t = 30,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub timeout_s: u64,
    /// How many servers are checked at once.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 4,
        value_parser = clap::value_parser!(u64).range(1..=64)
    )]
    pub jobs: u64,
    /// The project whose configs are read (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
}

/// `--format`
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    /// A table for people.
    Table,
    /// One JSON object.
    Json,
    /// A SARIF 2.1.0 log, for code scanning.
    Sarif,
}

/// `--fail-on`
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SeverityArg {
    /// Only errors fail.
    Error,
    /// Errors and warnings fail (the default).
    Warning,
    /// Every finding fails.
    Note,
}

impl From<SeverityArg> for hintgate_lint::Severity {
    fn from(arg: SeverityArg) -> Self {
        match arg {
            SeverityArg::Error => Self::Error,
            SeverityArg::Warning => Self::Warning,
            SeverityArg::Note => Self::Note,
        }
    }
}

/// `hintgate log`
#[derive(Debug, Args)]
pub struct LogArgs {
    /// Which store to read.
    #[command(flatten)]
    pub at: StoreArgs,
    /// Only calls to this server.
    #[arg(long, value_name = "NAME")]
    pub server: Option<String>,
    /// Only calls to this tool.
    #[arg(long, value_name = "TOOL")]
    pub tool: Option<String>,
    /// Only calls with this verdict (allow, ask, deny).
    #[arg(long, value_name = "VERDICT")]
    pub verdict: Option<String>,
    /// Only calls made at or after this time: an RFC 3339 time
    /// (`2026-11-29T21:58:38Z`, `2026-11-29T22:58:38+01:00`) or a duration
    /// back from now (`90s`, `10m`, `2h`, `3d`, `1w`).
    #[arg(long, value_name = "TIME", value_parser = crate::when::parse_since)]
    pub since: Option<crate::when::Since>,
    /// Keep running and print records as they are committed (Ctrl-C stops).
    #[arg(long)]
    pub follow: bool,
    /// Print one JSON object per line.
    #[arg(long)]
    pub json: bool,
    /// The audit key's file (default: `$HINTGATE_AUDIT_KEY_FILE`, else the
    /// `[audit] key_file` of `--config`, else `audit.key` beside the SQLite
    /// store). Read, never made.
    #[arg(long, value_name = "FILE", global = true)]
    pub audit_key: Option<PathBuf>,
    /// `verify`: check every record and the head, and name what is wrong;
    /// `setup-witness`, `accept-rollback`.
    #[command(subcommand)]
    pub command: Option<LogCommand>,
}

/// `hintgate log ...`
#[derive(Debug, Subcommand)]
pub enum LogCommand {
    /// Check every record's link (with the key), the sequence, every body
    /// and the head; name every record edited, inserted, deleted, moved or
    /// cut off the end.
    #[command(after_help = LOG_VERIFY_HELP)]
    Verify(VerifyArgs),
    /// Set up a witness: the gateway appends forward-secure checkpoints of
    /// the log to FILE; prints the verification key, once.
    #[command(after_help = SETUP_WITNESS_HELP)]
    SetupWitness(SetupWitnessArgs),
    /// Go on with a log that is not the one its head was written for (an
    /// older copy of the database put back, the head removed or damaged,
    /// the log deleted), which a gateway refuses to start on: record that
    /// in the log itself, so `verify` keeps naming it.
    #[command(after_help = ACCEPT_ROLLBACK_HELP)]
    AcceptRollback,
    /// Copy the log to the system log (journald or syslog), a message per
    /// record with its fields and its chain position, so that a copy kept
    /// elsewhere witnesses every record shipped.
    #[command(after_help = SHIP_HELP)]
    Ship(ShipArgs),
}

/// `hintgate log ship`
#[derive(Debug, Args)]
pub struct ShipArgs {
    /// The system log's local socket.
    #[arg(long, value_name = "PATH", default_value = "/dev/log")]
    pub socket: PathBuf,
    /// Remember the last record shipped (and its link) in FILE, and start
    /// after it: a restarted shipper neither repeats nor skips a record, and
    /// refuses a log whose record there is not the one shipped.
    #[arg(long, value_name = "FILE")]
    pub cursor: Option<PathBuf>,
    /// Keep running and ship records as they are committed (Ctrl-C stops);
    /// wait for a system log that refuses messages, rather than stop.
    #[arg(long)]
    pub follow: bool,
    /// Ship nothing: compare the messages saved from the system log in FILE
    /// (one per line, as `journalctl -o cat` or a syslog file holds them)
    /// with the log, and name every record the log no longer holds as it
    /// was shipped.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["follow", "cursor"])]
    pub check: Option<PathBuf>,
}

const SHIP_HELP: &str = "\
Each record is one message to the system log's local socket, in the format
of the C library's syslog() (facility authpriv; severity notice for a
refused call or a record that cannot be read, info otherwise): the fields of
its `hintgate log --json` line, with `prev` and `link`, its place in the
keyed chain. A record too large for one datagram is shipped with its place
and links only, marked \"truncated\".

Run it as a service beside the gateway, with a cursor:

  hintgate log ship --follow --cursor /var/lib/hintgate/ship.cursor

With --check FILE it ships nothing: each message saved from the system log
(a line holding `hintgate[PID]: ` and the message, or the message alone) is
compared with the log, and a record whose link differs, that the log no
longer holds, or a gap between the shipped records' links is named.

Exit codes:
  0   every record after the cursor shipped (without --follow)
  1   error: the store cannot be read, the system log refused a message, or
      the record at the cursor is no longer the one shipped (the log was
      rewritten, rolled back or replaced since)
  2   --check: a shipped record the log no longer holds as it was shipped";

const ACCEPT_ROLLBACK_HELP: &str = "\
Run `hintgate log verify` first: it names what the log lacks. This command
compares the head with the log again and, when they still disagree, appends
a record of kind `rollback` that names what was found (the head's record and
where the log ends), then writes the head after it. Gateways start again;
`verify` names the record (`rolled-back`) from then on; and every standing
(\"always\") approval granted before it approves nothing, since the records
lost may have revoked it: the tools are asked about again. On a team store,
each machine whose head is ahead of the log accepts on its own.

Exit codes:
  0   accepted (the record's number is printed), or nothing to accept
  1   error (no audit key: the record could not be chained)";

/// `hintgate log setup-witness`
#[derive(Debug, Args)]
pub struct SetupWitnessArgs {
    /// The witness: a new or empty file outside the state directory,
    /// ideally on another volume or machine, that the gateway can append to
    /// but not rewrite (default: the `[audit] witness` of `--config`).
    #[arg(value_name = "FILE")]
    pub witness: Option<PathBuf>,
}

const SETUP_WITNESS_HELP: &str = "\
The gateway keeps only the current epoch's key (beside the head, mode 0600)
and, after a commit, every 1000 records or 60 s (and at the first commit of
each run), derives the next key, erases the old one and appends a checkpoint
sealed with it. Whoever takes the machine later cannot make a checkpoint of
an earlier epoch, so the records up to the last checkpoint cannot be
rewritten unseen. Restart running gateways to start the checkpoints.

Without FILE, the `[audit] witness` of `--config` is set up.

Exit codes:
  0   set up; the verification key is printed
  1   error (a witness is set up already, the file is not empty)
  64  bad usage (no witness named, or it is in the state directory)";

/// `hintgate log verify`
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The head file to check the log's end against (default: where the
    /// gateway writes it: beside the SQLite store, or, for PostgreSQL, in
    /// the state directory).
    #[arg(long, value_name = "FILE")]
    pub head: Option<PathBuf>,
    /// Print the findings as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Check the checkpoints in this witness file against the log too
    /// (`hintgate log setup-witness`; default: the `[audit] witness` of
    /// `--config`, checked when its verification key is given).
    #[arg(long, value_name = "FILE")]
    pub witness: Option<PathBuf>,
    /// The witness's verification key, as `setup-witness` printed it
    /// (default: `$HINTGATE_WITNESS_KEY`).
    #[arg(long, value_name = "KEY")]
    pub verification_key: Option<String>,
}

const LOG_VERIFY_HELP: &str = "\
Without a witness, a log deleted together with its head and its key, an
older copy of the log put back with its head, and a rewrite by whoever
holds the key all verify; verify warns (on stderr, and under `warnings` in
`--json`) when no witness is checked. `--witness` defaults to the
`[audit] witness` of `--config`, checked when its verification key is given.

Exit codes:
  0   the log holds, every keyed record's MAC checked
  1   error; also: no key, so the keyed records' MACs could not be checked
  2   something is wrong: a record edited, inserted, deleted, moved or cut off";

/// `hintgate pins`
#[derive(Debug, Args)]
pub struct PinsArgs {
    /// Which store to read.
    #[command(flatten)]
    pub at: StoreArgs,
    /// The audit key's file, which seals what a person approves and checks
    /// the seals of what is stored (default: `$HINTGATE_AUDIT_KEY_FILE`,
    /// else the `[audit] key_file` of `--config`, else `audit.key` beside
    /// the SQLite store). Read, never made; a PostgreSQL store's gateways
    /// and everyone who approves on it share one.
    #[arg(long, value_name = "FILE", global = true)]
    pub audit_key: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: PinsCommand,
}

/// `hintgate pins ...`
#[derive(Debug, Subcommand)]
pub enum PinsCommand {
    /// Every pin, and whether a changed definition is held for approval.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// A pinned definition.
    Show {
        /// The server's configured name.
        server: String,
        /// The tool's own name.
        tool: String,
    },
    /// How the definition held for approval differs from the pinned one.
    Diff {
        /// The server's configured name.
        server: String,
        /// The tool's own name.
        tool: String,
    },
    /// Approve the definition held for approval: it becomes the pin.
    Approve {
        /// The server's configured name.
        server: String,
        /// The tool's own name.
        tool: String,
    },
    /// Forget a pin (and its standing approvals): the tool is new again.
    Revoke {
        /// The server's configured name.
        server: String,
        /// The tool's own name.
        tool: String,
    },
}

const RUN_HELP: &str = "\
Examples:
  hintgate run --name fs -- npx -y @modelcontextprotocol/server-filesystem /data
  hintgate run --name search --url https://search.example/mcp --header \"Authorization: Bearer ${TOKEN}\"
  hintgate run --config hintgate.toml

The host talks to hintgate on stdin and stdout; logs go to stderr, filtered
by RUST_LOG (default: info), e.g. RUST_LOG=hintgate=debug.

Exit codes:
  0   the host closed the session
  1   error while running
  64  bad usage, or a config with errors";

/// `hintgate run`
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Gateway mode: every server of this configuration, tool names prefixed.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["name", "trust", "profile", "unattended", "command", "url"])]
    pub config: Option<PathBuf>,
    /// Wrap mode: a Streamable HTTP server at this URL, instead of `-- CMD`.
    #[arg(long, value_name = "URL", conflicts_with = "command")]
    pub url: Option<String>,
    /// Wrap mode with `--url`: a header sent with every request (`Name: value`).
    #[arg(long = "header", value_name = "NAME: VALUE", requires = "url")]
    pub headers: Vec<String>,
    /// Wrap mode: the server's name, used in rules, prompts and logs
    /// (default: derived from the command).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Wrap mode: trust the server's annotations.
    #[arg(long, value_enum)]
    pub trust: Option<TrustArg>,
    /// Wrap mode: the profile.
    #[arg(long, value_enum)]
    pub profile: Option<ProfileArg>,
    /// Wrap mode: every ask becomes a deny.
    #[arg(long)]
    pub unattended: bool,
    /// How long a forwarded call may take, in seconds (default 60).
    #[arg(long, value_name = "SECONDS")]
    pub call_timeout: Option<u64>,
    /// How long an ask waits for an answer, in seconds (default 120).
    #[arg(long, value_name = "SECONDS")]
    pub ask_timeout: Option<u64>,
    /// Where pins and standing approvals are kept (default:
    /// `$HINTGATE_STATE_DIR`, else `$XDG_DATA_HOME/hintgate`, else
    /// `~/.local/share/hintgate`).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// The store: `postgres://...` (shared by several gateways) or
    /// `sqlite:PATH`; default `$HINTGATE_STORE`, else `[gateway] store`, else
    /// SQLite in the state directory.
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// The audit key's file (default: `$HINTGATE_AUDIT_KEY_FILE`, else the
    /// config's `[audit] key_file`, else `audit.key` beside the SQLite
    /// store, made on first use; a PostgreSQL store needs one, the same file
    /// on every gateway).
    #[arg(long, value_name = "FILE")]
    pub audit_key: Option<PathBuf>,
    /// Serve hosts over Streamable HTTP at `http://ADDR/mcp` instead of
    /// stdio (loopback only unless `--listen-public`); the URL is written to
    /// stderr. Hosts authenticate with a bearer token (`hintgate token
    /// add`), unless `--no-auth`. Overrides `[listen] address`, which also
    /// makes the gateway listen; every `[listen]` value has its flag here,
    /// and the flag wins.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<std::net::SocketAddr>,
    /// Allow listening on an address beyond loopback (tokens are then
    /// always needed); `[listen] public`.
    #[arg(long)]
    pub listen_public: bool,
    /// When listening on loopback: take hosts without a token (every local
    /// process may then call the servers, with the write scope).
    #[arg(long, conflicts_with = "listen_public")]
    pub no_auth: bool,
    /// When listening: serve HTTPS with this PEM certificate chain (leaf
    /// first); needs `--tls-key`; `[listen] tls_cert`.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// With `--tls-cert`: its PEM private key; `[listen] tls_key`.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// When listening: take OAuth 2.1 access tokens (JWTs, ES256 or RS256)
    /// issued by this authorization server (their `iss`); needs
    /// `--oauth-jwks`; `[listen] oauth_issuer`.
    #[arg(long, value_name = "URL")]
    pub oauth_issuer: Option<String>,
    /// The issuer's JSON Web Key Set, fetched at start and every ten
    /// minutes; `[listen] oauth_jwks`.
    #[arg(long, value_name = "URL")]
    pub oauth_jwks: Option<String>,
    /// This gateway as tokens must name it in `aud` (default: the URL it
    /// serves, `http(s)://ADDR/mcp`); `[listen] oauth_audience`.
    #[arg(long, value_name = "URL")]
    pub oauth_audience: Option<String>,
    /// The token scope that gives read (default `mcp:read`);
    /// `[listen] oauth_read_scope`.
    #[arg(long, value_name = "SCOPE")]
    pub oauth_read_scope: Option<String>,
    /// The token scope that gives write (default `mcp:write`);
    /// `[listen] oauth_write_scope`.
    #[arg(long, value_name = "SCOPE")]
    pub oauth_write_scope: Option<String>,
    /// When listening: an `Origin` a browser page may call from (besides
    /// the gateway's own), for a web host; replaces `[listen]
    /// allow_origins`.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    pub allow_origins: Vec<String>,
    /// Also serve the web console on loopback (or at `--console=ADDR`);
    /// its URL, with its token, is written to stderr.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, require_equals = true)]
    pub console: Option<Option<std::net::SocketAddr>>,
    /// Serve the gateway's metrics in the Prometheus text format at
    /// `http://ADDR/metrics` (the address is written to stderr). On
    /// loopback anyone on this machine may read them; on any other address
    /// only with a token of scope `metrics` (`hintgate token add NAME
    /// --scope metrics`).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Export a trace of every tool call (its decision, the wait for a
    /// person, the audit record, the server's round trip) to the
    /// OpenTelemetry collector at URL, over OTLP/HTTP (`http://127.0.0.1:4318`;
    /// spans go to `/v1/traces`); names only, never argument values.
    /// Overrides `[telemetry] otlp_endpoint`.
    #[arg(long, value_name = "URL", value_parser = otlp_endpoint)]
    pub otlp_endpoint: Option<String>,
    /// Wrap mode: run the server in a kernel sandbox with no network (its
    /// `[sandbox]` table: `read` and `write` from the flags below).
    #[arg(long)]
    pub sandbox: bool,
    /// Wrap mode: a path the sandboxed server may read (repeatable; implies
    /// `--sandbox`).
    #[arg(long, value_name = "PATH")]
    pub sandbox_read: Vec<String>,
    /// Wrap mode: a path the sandboxed server may write (repeatable; implies
    /// `--sandbox`).
    #[arg(long, value_name = "PATH")]
    pub sandbox_write: Vec<String>,
    /// Wrap mode: who installs the package of a launcher line (`npx -y
    /// PKG`, `uvx PKG`) that is not installed: the user with `hintgate
    /// sandbox prepare` (`by-hand`, the default) or the gateway before the
    /// server's first start (`on-start`); the sandbox table's `prepare`
    /// (implies `--sandbox`).
    #[arg(long, value_enum, value_name = "WHO")]
    pub sandbox_prepare: Option<PrepareArg>,
    /// Wrap mode: the server's command line.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `hintgate config ...`
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate configuration files and report every problem with its position.
    #[command(after_help = EXIT_CODES_HELP)]
    Check(CheckArgs),
}

/// `hintgate config check`
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The files to check.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Print the diagnostics as one JSON array.
    #[arg(long)]
    pub json: bool,
}

/// `hintgate explain`
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// Explain the bundled example calls against the bundled example config.
    #[arg(long, conflicts_with_all = ["config", "tool", "server"])]
    pub example: bool,
    /// The configuration (gateway mode). Without it, wrap mode's defaults and
    /// the --trust, --profile and --unattended flags apply.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The server's configured name (in wrap mode: its --name).
    #[arg(long, value_name = "NAME", required_unless_present = "example")]
    pub server: Option<String>,
    /// One tool object as it appears in a `tools/list` result.
    #[arg(long, value_name = "TOOL.json", required_unless_present = "example")]
    pub tool: Option<PathBuf>,
    /// The call's arguments, a JSON object.
    #[arg(long, value_name = "ARGS.json")]
    pub args: Option<PathBuf>,
    /// The session has read private data.
    #[arg(long)]
    pub tainted: bool,
    /// How the definition compares with its pin.
    #[arg(long, value_enum, default_value_t = PinArg::New, conflicts_with = "pinned")]
    pub pin: PinArg,
    /// The approved definition (a tool object): sets the pin status and shows the diff.
    #[arg(long, value_name = "OLD_TOOL.json")]
    pub pinned: Option<PathBuf>,
    /// A standing approval of this tool.
    #[arg(long, value_enum, default_value_t = RememberedArg::None)]
    pub remembered: RememberedArg,
    /// What the host's credentials let it do (`read`: a token without
    /// write; only tools that are effectively read-only are listed or run).
    #[arg(long, value_enum, default_value_t = ScopeArg::Write)]
    pub scope: ScopeArg,
    /// Whether the server's configured sandbox is taken as enforced. `auto`:
    /// what this kernel enforces of it (as `hintgate run` would start it);
    /// `configured`: enforced unless it is `best_effort`, whatever this
    /// kernel offers (a sandbox that cannot be enforced stops the server).
    #[arg(long, value_enum, default_value_t = SandboxArg::Auto)]
    pub sandbox: SandboxArg,
    /// Wrap mode: trust the server's annotations.
    #[arg(long, value_enum, conflicts_with = "config")]
    pub trust: Option<TrustArg>,
    /// Wrap mode: the profile.
    #[arg(long, value_enum, conflicts_with = "config")]
    pub profile: Option<ProfileArg>,
    /// Wrap mode: every ask becomes a deny.
    #[arg(long, conflicts_with = "config")]
    pub unattended: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Do not run the configuration's decision hook (`decide_command`):
    /// decide as if it abstained.
    #[arg(long)]
    pub no_hook: bool,
    /// Wrap mode: the server's command line, shown as its identity in the prompt.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `--pin`
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PinArg {
    /// Never approved or seen.
    New,
    /// The same definition as approved.
    Unchanged,
    /// A different definition than approved.
    Changed,
}

/// `--remembered`
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RememberedArg {
    /// No standing approval.
    None,
    /// Approved for this session.
    Session,
    /// Approved always.
    Always,
}

/// `--scope` of `hintgate explain`, and of a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScopeArg {
    /// Only tools that are effectively read-only.
    Read,
    /// Whatever the configuration and profile let through.
    Write,
}

/// `--scope` of `hintgate token add`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TokenScopeArg {
    /// A host that sees and runs only the tools that are effectively
    /// read-only.
    Read,
    /// A host that runs whatever the configuration and profile let through.
    Write,
    /// A scraper of `/metrics`; no host may use it.
    Metrics,
}

/// `--sandbox`
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SandboxArg {
    /// What this kernel enforces of it.
    Auto,
    /// Enforced unless `best_effort = true`, whatever the kernel offers.
    Configured,
    /// Take the configured sandbox as enforced.
    Enforced,
    /// Take the configured sandbox as not enforced.
    None,
}

impl From<SandboxArg> for hintgate_policy::config::Enforcement {
    fn from(arg: SandboxArg) -> Self {
        match arg {
            SandboxArg::Auto | SandboxArg::Configured => Self::Auto,
            SandboxArg::Enforced => Self::Enforced,
            SandboxArg::None => Self::None,
        }
    }
}

impl From<TrustArg> for hintgate_policy::tool::Trust {
    fn from(arg: TrustArg) -> Self {
        match arg {
            TrustArg::Trusted => Self::Trusted,
            TrustArg::Untrusted => Self::Untrusted,
        }
    }
}

impl From<ProfileArg> for hintgate_policy::config::Profile {
    fn from(arg: ProfileArg) -> Self {
        match arg {
            ProfileArg::AskWrites => Self::AskWrites,
            ProfileArg::HideWrites => Self::HideWrites,
            ProfileArg::AskAll => Self::AskAll,
        }
    }
}

/// `--sandbox-prepare`
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PrepareArg {
    /// The user installs it with `hintgate sandbox prepare` (the default).
    ByHand,
    /// The gateway installs it before the server's first start.
    OnStart,
}

impl From<PrepareArg> for hintgate_policy::config::Prepare {
    fn from(arg: PrepareArg) -> Self {
        match arg {
            PrepareArg::ByHand => Self::ByHand,
            PrepareArg::OnStart => Self::OnStart,
        }
    }
}

/// `--trust`
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TrustArg {
    /// Believe the server's annotations.
    Trusted,
    /// Treat them as claims (the default).
    Untrusted,
}

/// `--profile`
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProfileArg {
    /// Read-only tools run; everything else asks (the default).
    AskWrites,
    /// Tools that are not read-only are hidden and denied.
    HideWrites,
    /// Every call asks.
    AskAll,
}

/// An OTLP collector's base URL: `http://` or `https://` and an address,
/// without credentials (they would show in `ps`), a query or a fragment.
fn otlp_endpoint(text: &str) -> Result<String, String> {
    let authority = text
        .strip_prefix("http://")
        .or_else(|| text.strip_prefix("https://"))
        .map(|rest| rest.split('/').next().unwrap_or(""));
    match authority {
        Some(authority) if authority.contains('@') => {
            Err("the URL carries credentials; give the collector's address only".to_owned())
        }
        Some(authority)
            if !authority.is_empty()
                && !text.contains(char::is_whitespace)
                && !text.contains(['?', '#']) =>
        {
            Ok(text.to_owned())
        }
        _ => Err("not the base URL of an OTLP collector (`http://127.0.0.1:4318`)".to_owned()),
    }
}
