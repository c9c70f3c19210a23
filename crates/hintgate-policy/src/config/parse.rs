//! From TOML text to a [`ValidConfig`], collecting every problem on the way.
//!
//! The text is parsed into a spanned tree with error recovery, then walked by
//! hand: each table checks its own keys, so an unknown key, a wrong type and a
//! bad glob in three different places are three diagnostics, each with the
//! line and column of the key or value at fault.

use std::collections::BTreeMap;
use std::ops::Range;

use toml::Spanned;
use toml::de::{DeArray, DeString, DeTable, DeValue};

use super::{
    Action, DEFAULT_DECIDE_TIMEOUT_MS, DEFAULT_IDEMPOTENCY_KEY, Egress, FileChange, FilePreview,
    GatewaySettings, HookConfig, HookMode, Label, ListenSettings, OAuthConfig, OAuthGrant, Prepare,
    PreviewRule, Previewer, PrivateData, Profile, ReadOnlyConfig, Rule, SandboxConfig,
    ServerConfig, ServerHook, TelemetrySettings, Transport, ValidConfig,
};
use crate::diag::{DiagCode, Diagnostic};
use crate::glob::Glob;
use crate::redact::{AuditSettings, Pattern, PatternError};
use crate::sanitize::escape_line;
use crate::tool::Trust;
use crate::vars::{self, Vars};

type Key<'i> = Spanned<DeString<'i>>;
type Val<'i> = Spanned<DeValue<'i>>;

const TOP_KEYS: &[&str] = &[
    "gateway",
    "servers",
    "rules",
    "audit",
    "labels",
    "listen",
    "telemetry",
    "previews",
];
const TELEMETRY_KEYS: &[&str] = &["otlp_endpoint", "service_name"];
const LISTEN_KEYS: &[&str] = &[
    "address",
    "public",
    "tls_cert",
    "tls_key",
    "allow_origins",
    "oauth_issuer",
    "oauth_jwks",
    "oauth_audience",
    "oauth_read_scope",
    "oauth_write_scope",
    "header_timeout_s",
    "body_timeout_s",
    "max_unauthenticated",
    "max_unauthenticated_per_address",
];
const AUDIT_KEYS: &[&str] = &[
    "redact",
    "redact_defaults",
    "key_file",
    "witness",
    "witness_every_records",
    "witness_every_s",
    "durability",
    "segment_bytes",
];
const GATEWAY_KEYS: &[&str] = &[
    "profile",
    "unattended",
    "separator",
    "ask_timeout_s",
    "call_timeout_s",
    "max_message_bytes",
    "max_json_depth",
    "max_tools_per_server",
    "store",
    "decide_command",
    "decide_command_mode",
    "decide_timeout_ms",
    "idempotency_window_s",
    "principal",
];
const SERVER_KEYS: &[&str] = &[
    "command",
    "args",
    "env",
    "url",
    "headers",
    "trust",
    "private_data",
    "sandbox",
    "decide_command",
    "decide_command_mode",
    "decide_timeout_ms",
    "idempotency_key",
    "read_only",
    "oauth",
];
/// `client_secret` is listed so that it is reported as
/// `secret-in-config`, not as an unknown key.
const OAUTH_KEYS: &[&str] = &[
    "client_id",
    "client_secret",
    "client_secret_file",
    "client_secret_env",
    "client_metadata_url",
    "authorization_server",
    "scopes",
    "grant",
    "redirect_port",
];
const READ_ONLY_KEYS: &[&str] = &[
    "command", "args", "env", "url", "headers", "vouch", "scopes",
];
const SANDBOX_KEYS: &[&str] = &[
    "read",
    "write",
    "network",
    "best_effort",
    "max_open_files",
    "max_processes",
    "max_memory_mb",
    "prepare",
];
const RULE_KEYS: &[&str] = &["server", "tool", "action", "reason"];
const LABEL_KEYS: &[&str] = &["server", "tool", "paid", "reason"];
const PREVIEW_KEYS: &[&str] = &[
    "server",
    "tool",
    "command",
    "command_mode",
    "timeout_ms",
    "files",
    "dry_run_argument",
];
const PREVIEW_FILES_KEYS: &[&str] = &[
    "path",
    "content",
    "edits",
    "destination",
    "create_directory",
    "roots",
];

/// The longest a previewer command may be given to answer: ten seconds
/// (the person waits for the prompt meanwhile).
const MAX_PREVIEW_TIMEOUT_MS: u64 = 10_000;
/// How long a previewer command may take unless the configuration says.
const DEFAULT_PREVIEW_TIMEOUT_MS: u64 = 2000;

/// The longest a decision hook may be given to answer: a minute (the call
/// waits for it, and so does the host).
const MAX_DECIDE_TIMEOUT_MS: u64 = 60_000;
/// The longest an idempotency key's result is kept: 30 days.
const MAX_IDEMPOTENCY_WINDOW_S: u64 = 30 * 86_400;

/// The most records between two witness checkpoints.
const MAX_WITNESS_RECORDS: u64 = 1_000_000;
/// The bounds of `[audit] segment_bytes`: 4 KiB to 1 TiB.
const MIN_SEGMENT_BYTES: u64 = 4096;
const MAX_SEGMENT_BYTES: u64 = 1 << 40;

/// The longest timeout accepted: one day.
const MAX_TIMEOUT_S: u64 = 86_400;
/// The smallest message limit accepted: 64 KiB.
const MIN_MESSAGE_BYTES: u64 = 64 * 1024;
/// The largest message limit accepted: 1 GiB.
const MAX_MESSAGE_BYTES: u64 = 1024 * 1024 * 1024;
/// The smallest nesting limit accepted: a tool list with a nested input
/// schema already takes about ten levels.
const MIN_JSON_DEPTH: u64 = 16;
/// The largest nesting limit accepted: the gateway reads messages with
/// `serde_json`, which stops at 128 levels.
const MAX_JSON_DEPTH: u64 = 128;
/// The largest per-server tool limit accepted.
const MAX_TOOLS_PER_SERVER: u64 = 1_000_000;

/// Parses and validates a configuration.
///
/// Returns the configuration when no diagnostic is an error, and every
/// diagnostic (errors and warnings) sorted by position either way.
pub fn parse_str(source: &str) -> (Option<ValidConfig>, Vec<Diagnostic>) {
    parse_with_vars(source, None)
}

/// Like [`parse_str`], and also warns about every `${VAR}` reference to a
/// variable that `vars` does not have (`unset-variable`): the gateway would
/// refuse to start that server.
pub fn parse_str_checking_vars(
    source: &str,
    vars: &dyn Vars,
) -> (Option<ValidConfig>, Vec<Diagnostic>) {
    parse_with_vars(source, Some(vars))
}

fn parse_with_vars(
    source: &str,
    vars: Option<&dyn Vars>,
) -> (Option<ValidConfig>, Vec<Diagnostic>) {
    let (document, syntax_errors) = DeTable::parse_recoverable(source);
    let mut walker = Walker {
        source,
        diagnostics: Vec::new(),
        vars,
        declared_servers: Vec::new(),
    };
    for error in &syntax_errors {
        let message = error
            .message()
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_owned();
        let message = if message == "recursion limit" {
            "keys dotted, or arrays and tables nested too deeply: past the parser's recursion limit"
                .to_owned()
        } else {
            lowercase_first(&message)
        };
        let diagnostic = Diagnostic::error(DiagCode::TomlSyntax, "", message);
        // INVARIANT: every diagnostic names a place. The parser gives some
        // errors (its recursion limit) no position: they are put at the
        // start of the file.
        walker.push(match error.span() {
            Some(span) => diagnostic.at(span),
            None => diagnostic.at(0..0).with_help(
                "the parser gave no position; look for the most deeply nested key or value",
            ),
        });
    }
    let syntax_starts: Vec<usize> = syntax_errors
        .iter()
        .filter_map(|error| error.span().map(|span| span.start))
        .collect();
    let config = walker.document(document.get_ref());
    let mut diagnostics = walker.diagnostics;
    // A value the parser had to recover is already reported as a syntax
    // error; what validation says about the recovered value is noise.
    diagnostics.retain(|diagnostic| {
        diagnostic.code == DiagCode::TomlSyntax
            || !diagnostic
                .span
                .as_ref()
                .is_some_and(|span| syntax_starts.contains(&span.start))
    });
    diagnostics.sort_by_key(|diagnostic| {
        (
            diagnostic
                .span
                .as_ref()
                .map_or(usize::MAX, |span| span.start),
            diagnostic.severity,
        )
    });
    diagnostics.dedup();
    let valid = !diagnostics.iter().any(Diagnostic::is_error);
    (config.filter(|_| valid), diagnostics)
}

#[derive(Default)]
struct Walker<'v> {
    /// The text walked, to name a line in a message.
    source: &'v str,
    diagnostics: Vec<Diagnostic>,
    /// When given, `${VAR}` references to unset variables are warned about.
    vars: Option<&'v dyn Vars>,
    /// Every name under `[servers]`, valid or not, for the rule checks.
    declared_servers: Vec<String>,
}

impl Walker<'_> {
    fn push(&mut self, mut diagnostic: Diagnostic) {
        // INVARIANT: a diagnostic is one line. What the file wrote into it
        // (a value, a name, a key) is escaped, so it can neither break the
        // line nor pass for a line of its own.
        diagnostic.message = escape_line(&diagnostic.message);
        diagnostic.key = escape_line(&diagnostic.key);
        diagnostic.help = diagnostic.help.as_deref().map(escape_line);
        self.diagnostics.push(diagnostic);
    }

    fn document(&mut self, top: &DeTable<'_>) -> Option<ValidConfig> {
        self.check_keys(top, "", TOP_KEYS);
        let gateway = match entry(top, "gateway") {
            Some((_, value)) => match value.get_ref() {
                DeValue::Table(table) => self.gateway(table),
                other => {
                    self.wrong_value_type(value, "gateway", "a table", other);
                    GatewaySettings::default()
                }
            },
            None => GatewaySettings::default(),
        };
        let servers = match entry(top, "servers") {
            Some((_, value)) => match value.get_ref() {
                DeValue::Table(table) => self.servers(table, &gateway.separator),
                other => {
                    self.wrong_value_type(value, "servers", "a table", other);
                    BTreeMap::new()
                }
            },
            None => BTreeMap::new(),
        };
        let rules = match entry(top, "rules") {
            Some((_, value)) => match value.get_ref() {
                DeValue::Array(array) => self.rules(array),
                other => {
                    self.wrong_value_type(
                        value,
                        "rules",
                        "an array of tables (`[[rules]]`)",
                        other,
                    );
                    Vec::new()
                }
            },
            None => Vec::new(),
        };
        let audit = match entry(top, "audit") {
            Some((_, value)) => match value.get_ref() {
                DeValue::Table(table) => self.audit(table),
                other => {
                    self.wrong_value_type(value, "audit", "a table", other);
                    AuditSettings::default()
                }
            },
            None => AuditSettings::default(),
        };
        let labels = match entry(top, "labels") {
            Some((_, value)) => match value.get_ref() {
                DeValue::Array(array) => self.labels(array),
                other => {
                    self.wrong_value_type(
                        value,
                        "labels",
                        "an array of tables (`[[labels]]`)",
                        other,
                    );
                    Vec::new()
                }
            },
            None => Vec::new(),
        };
        let listen = match entry(top, "listen") {
            Some((_, value)) => match value.get_ref() {
                DeValue::Table(table) => self.listen(table, value.span()),
                other => {
                    self.wrong_value_type(value, "listen", "a table", other);
                    ListenSettings::default()
                }
            },
            None => ListenSettings::default(),
        };
        let telemetry = match entry(top, "telemetry") {
            Some((_, value)) => match value.get_ref() {
                DeValue::Table(table) => self.telemetry(table),
                other => {
                    self.wrong_value_type(value, "telemetry", "a table", other);
                    TelemetrySettings::default()
                }
            },
            None => TelemetrySettings::default(),
        };
        let previews = match entry(top, "previews") {
            Some((_, value)) => match value.get_ref() {
                DeValue::Array(array) => self.previews(array, &servers),
                other => {
                    self.wrong_value_type(
                        value,
                        "previews",
                        "an array of tables (`[[previews]]`)",
                        other,
                    );
                    Vec::new()
                }
            },
            None => Vec::new(),
        };
        Some(ValidConfig {
            gateway,
            servers,
            rules,
            audit,
            labels,
            listen,
            telemetry,
            previews,
        })
    }

    fn audit(&mut self, table: &DeTable<'_>) -> AuditSettings {
        self.check_keys(table, "audit", AUDIT_KEYS);
        let mut settings = AuditSettings::default();
        if let Some(defaults) = self.boolean(table, "audit", "redact_defaults") {
            settings.redact_defaults = defaults;
        }
        let mut patterns = Vec::new();
        self.string_array(table, "audit", "redact", |walker, text, span, path| {
            match Pattern::parse(text) {
                Ok(pattern) => patterns.push(pattern),
                Err(PatternError::BadEscape) => walker.push(
                    Diagnostic::error(
                        DiagCode::BadPointer,
                        path,
                        format!("bad JSON pointer `{text}`: `~` must be followed by `0` or `1`"),
                    )
                    .at(span)
                    .with_help("write `~1` for a `/` and `~0` for a `~` inside a key"),
                ),
                Err(err) => walker.push(
                    Diagnostic::error(DiagCode::BadGlob, path, format!("bad key glob `{text}`: {err}"))
                        .at(span)
                        .with_help("a pattern is a JSON pointer (`/credentials/password`) or a glob over key names (`*token*`)"),
                ),
            }
        });
        settings.redact = patterns;
        if let Some((path, span)) = self.string(table, "audit", "key_file") {
            if !path.starts_with("${") && !path.starts_with('/') {
                self.push(
                    Diagnostic::error(
                        DiagCode::RelativePath,
                        "audit.key_file",
                        format!("audit key path `{path}` is not absolute"),
                    )
                    .at(span.clone())
                    .with_help("write the full path, starting with `/`"),
                );
            }
            self.check_template(&path, span, "audit.key_file");
            settings.key_file = Some(path);
        }
        if let Some((path, span)) = self.string(table, "audit", "witness") {
            if !path.starts_with("${") && !path.starts_with('/') {
                self.push(
                    Diagnostic::error(
                        DiagCode::RelativePath,
                        "audit.witness",
                        format!("witness path `{path}` is not absolute"),
                    )
                    .at(span.clone())
                    .with_help("write the full path, starting with `/`, ideally on another volume or machine"),
                );
            }
            self.check_template(&path, span, "audit.witness");
            settings.witness = Some(path);
        }
        settings.witness_every_records = self.bounded_in(
            table,
            "audit",
            "witness_every_records",
            1,
            MAX_WITNESS_RECORDS,
        );
        settings.witness_every_s =
            self.bounded_in(table, "audit", "witness_every_s", 1, MAX_TIMEOUT_S);
        if let Some((text, span)) = self.string(table, "audit", "durability") {
            match text.as_str() {
                "write" => settings.fsync = false,
                "fsync" => settings.fsync = true,
                other => self.push(
                    Diagnostic::error(
                        DiagCode::InvalidValue,
                        "audit.durability",
                        format!("unknown durability `{other}`"),
                    )
                    .at(span)
                    .with_help(help_one_of(other, &["write", "fsync"])),
                ),
            }
        }
        settings.segment_bytes = self.bounded_in(
            table,
            "audit",
            "segment_bytes",
            MIN_SEGMENT_BYTES,
            MAX_SEGMENT_BYTES,
        );
        settings
    }

    fn gateway(&mut self, table: &DeTable<'_>) -> GatewaySettings {
        self.check_keys(table, "gateway", GATEWAY_KEYS);
        let mut settings = GatewaySettings::default();
        if let Some((text, span)) = self.string(table, "gateway", "profile") {
            match text.as_str() {
                "ask-writes" => settings.profile = Profile::AskWrites,
                "hide-writes" => settings.profile = Profile::HideWrites,
                "ask-all" => settings.profile = Profile::AskAll,
                other => self.push(
                    Diagnostic::error(
                        DiagCode::InvalidValue,
                        "gateway.profile",
                        format!("unknown profile `{other}`"),
                    )
                    .at(span)
                    .with_help(help_one_of(
                        other,
                        &["ask-writes", "hide-writes", "ask-all"],
                    )),
                ),
            }
        }
        if let Some(unattended) = self.boolean(table, "gateway", "unattended") {
            settings.unattended = unattended;
        }
        if let Some((separator, span)) = self.string(table, "gateway", "separator") {
            if separator.is_empty() || !separator.chars().all(crate::name::is_plain_char) {
                self.push(
                    Diagnostic::error(
                        DiagCode::InvalidValue,
                        "gateway.separator",
                        format!(
                            "separator `{separator}` must be one or more of `A-Z a-z 0-9 _ - .`"
                        ),
                    )
                    .at(span)
                    .with_help("tool names may only hold these characters; the default is `__`"),
                );
            } else {
                settings.separator = separator;
            }
        }
        if let Some(seconds) = self.bounded(table, "ask_timeout_s", 1, MAX_TIMEOUT_S) {
            settings.ask_timeout_s = seconds;
        }
        if let Some(seconds) = self.bounded(table, "call_timeout_s", 1, MAX_TIMEOUT_S) {
            settings.call_timeout_s = seconds;
        }
        if let Some((store, span)) = self.string(table, "gateway", "store") {
            let known = ["postgres://", "postgresql://", "sqlite:"];
            // A whole address from the environment is checked when expanded.
            if known.iter().any(|scheme| store.starts_with(scheme)) || store.starts_with("${") {
                self.check_template(&store, span, "gateway.store");
                settings.store = Some(store);
            } else {
                self.push(
                    Diagnostic::error(
                        DiagCode::InvalidValue,
                        "gateway.store",
                        "the store must be `postgres://...` (or `postgresql://...`) or `sqlite:PATH`",
                    )
                    .at(span)
                    .with_help("leave it out for the SQLite store in the state directory; put a password in `${VAR}`"),
                );
            }
        }
        if let Some(bytes) = self.bounded(
            table,
            "max_message_bytes",
            MIN_MESSAGE_BYTES,
            MAX_MESSAGE_BYTES,
        ) {
            settings.max_message_bytes = bytes;
        }
        if let Some(depth) = self.bounded(table, "max_json_depth", MIN_JSON_DEPTH, MAX_JSON_DEPTH) {
            settings.max_json_depth = depth;
        }
        if let Some(tools) = self.bounded(table, "max_tools_per_server", 1, MAX_TOOLS_PER_SERVER) {
            settings.max_tools_per_server = tools;
        }
        if let Some(window) =
            self.bounded(table, "idempotency_window_s", 1, MAX_IDEMPOTENCY_WINDOW_S)
        {
            settings.idempotency_window_s = window;
        }
        if let Some((principal, span)) = self.string(table, "gateway", "principal") {
            if principal.is_empty()
                || principal.len() > 256
                || principal
                    .chars()
                    .any(|c| c.is_whitespace() || c.is_control())
            {
                self.push(
                    Diagnostic::error(
                        DiagCode::InvalidValue,
                        "gateway.principal",
                        "the principal must be one name of at most 256 characters, without spaces or control characters",
                    )
                    .at(span),
                );
            } else {
                settings.principal = Some(principal);
            }
        }
        settings.decide = match self.hook(table, "gateway") {
            ServerHook::Own(hook) => Some(hook),
            ServerHook::Inherit | ServerHook::Off => None,
        };
        settings
    }

    /// `decide_command`, `decide_command_mode` and `decide_timeout_ms` of a
    /// table: [`ServerHook::Inherit`] when it names no command,
    /// [`ServerHook::Off`] for an empty one.
    fn hook(&mut self, table: &DeTable<'_>, path: &str) -> ServerHook {
        let command =
            self.string_array(table, path, "decide_command", |walker, text, span, key| {
                walker.check_template(text, span, key);
            });
        let mode = match self.string(table, path, "decide_command_mode") {
            Some((text, span)) => match text.as_str() {
                "persistent" => Some(HookMode::Persistent),
                "per-call" => Some(HookMode::PerCall),
                other => {
                    self.push(
                        Diagnostic::error(
                            DiagCode::InvalidValue,
                            join(path, "decide_command_mode"),
                            format!("unknown hook mode `{other}`"),
                        )
                        .at(span)
                        .with_help(help_one_of(other, &["persistent", "per-call"])),
                    );
                    None
                }
            },
            None => None,
        };
        let timeout = self.bounded_in(table, path, "decide_timeout_ms", 1, MAX_DECIDE_TIMEOUT_MS);
        let Some(command) = command else {
            // A mode or a timeout for a command named elsewhere would give
            // one program two ways to run: it is set where the command is.
            for key in ["decide_command_mode", "decide_timeout_ms"] {
                if let Some((found, _)) = entry(table, key) {
                    self.push(
                        Diagnostic::error(
                            DiagCode::ConflictingKeys,
                            join(path, key),
                            format!("`{key}` only applies beside a `decide_command`"),
                        )
                        .at(found.span())
                        .with_help("set it next to the `decide_command` it is for"),
                    );
                }
            }
            return ServerHook::Inherit;
        };
        let Some(program) = command.first() else {
            if path == "gateway" {
                let span = entry(table, "decide_command").map_or(0..0, |(_, value)| value.span());
                self.push(
                    Diagnostic::error(
                        DiagCode::InvalidValue,
                        "gateway.decide_command",
                        "`decide_command` needs a program",
                    )
                    .at(span)
                    .with_help("name the program and its arguments, e.g. `[\"/usr/local/bin/decide\", \"--strict\"]`; leave the key out for no hook"),
                );
            }
            return ServerHook::Off;
        };
        if program.trim().is_empty() {
            let span = entry(table, "decide_command").map_or(0..0, |(_, value)| value.span());
            self.push(
                Diagnostic::error(
                    DiagCode::InvalidValue,
                    join(path, "decide_command"),
                    "the hook's program cannot be empty",
                )
                .at(span),
            );
        }
        ServerHook::Own(HookConfig {
            command,
            mode: mode.unwrap_or_default(),
            timeout_ms: timeout.unwrap_or(DEFAULT_DECIDE_TIMEOUT_MS),
        })
    }

    /// An integer `[gateway]` setting within `min..=max`.
    fn bounded(&mut self, table: &DeTable<'_>, key: &str, min: u64, max: u64) -> Option<u64> {
        self.bounded_in(table, "gateway", key, min, max)
    }

    fn bounded_in(
        &mut self,
        table: &DeTable<'_>,
        path: &str,
        key: &str,
        min: u64,
        max: u64,
    ) -> Option<u64> {
        let (number, span) = self.integer(table, path, key)?;
        match u64::try_from(number) {
            Ok(number) if (min..=max).contains(&number) => Some(number),
            _ => {
                self.push(
                    Diagnostic::error(
                        DiagCode::InvalidValue,
                        join(path, key),
                        format!("`{key}` must be between {min} and {max}, not {number}"),
                    )
                    .at(span),
                );
                None
            }
        }
    }

    fn servers(&mut self, table: &DeTable<'_>, separator: &str) -> BTreeMap<String, ServerConfig> {
        let mut servers = BTreeMap::new();
        let mut prefixes = Vec::new();
        for (key, value) in table.iter() {
            let name = key.get_ref().as_ref();
            self.declared_servers.push(name.to_owned());
            let path = join("servers", name);
            let problem = server_name_problem(name, separator);
            if problem.is_none() {
                prefixes.push((name.to_owned(), key.span()));
            }
            if let Some(problem) = problem {
                self.push(
                    Diagnostic::error(
                        DiagCode::InvalidServerName,
                        path.clone(),
                        format!("server name `{name}` {problem}"),
                    )
                    .at(key.span())
                    .with_help(if name.contains(separator) && !separator.is_empty() {
                        format!("rename the server, or choose another `gateway.separator` than `{separator}`")
                    } else {
                        "use letters, digits, `_` and `-`, at most 64 of them".to_owned()
                    }),
                );
            }
            match value.get_ref() {
                DeValue::Table(server) => {
                    if let Some(config) = self.server(name, key, server, &path) {
                        servers.insert(name.to_owned(), config);
                    }
                }
                other => self.wrong_value_type(value, &path, "a table", other),
            }
        }
        self.colliding_servers(prefixes, separator);
        servers
    }

    /// Two servers whose prefixes make one host-facing name: `docs` and
    /// `docs_` with the separator `__` both give `docs___x` (`_x` of one,
    /// `x` of the other). Each such pair is an error at the later server.
    ///
    /// Two servers whose names look the same ([`crate::name::look_alike`]:
    /// `Docs` and `docs`) are an error too: hosts and people take them for
    /// one server, in a tool's prefix and in the approval prompt.
    fn colliding_servers(&mut self, mut names: Vec<(String, Range<usize>)>, separator: &str) {
        names.sort_by_key(|(_, span)| span.start);
        for (later, (second, second_span)) in names.iter().enumerate() {
            for (first, first_span) in names.iter().take(later) {
                if crate::name::look_alike(first) == crate::name::look_alike(second) {
                    let line = crate::diag::position(self.source, first_span.start).line;
                    self.push(
                        Diagnostic::error(
                            DiagCode::LookAlikeServerNames,
                            join("servers", second),
                            format!(
                                "servers `{first}` and `{second}` have names that look the same, so a person could take one for the other"
                            ),
                        )
                        .at(second_span.clone())
                        .with_help(format!(
                            "`{first}` is at line {line}; rename one of them (names that differ only in case, or in `I`, `l` and `1`, or `O` and `0`, read as one)"
                        )),
                    );
                    continue;
                }
                if separator.is_empty() {
                    continue;
                }
                let Some((shorter, longer)) = colliding(first, second, separator) else {
                    continue;
                };
                let example = format!("{longer}{separator}x");
                let as_shorter = example
                    .get(shorter.len() + separator.len()..)
                    .unwrap_or_default();
                let line = crate::diag::position(self.source, first_span.start).line;
                self.push(
                    Diagnostic::error(
                        DiagCode::CollidingServerNames,
                        join("servers", second),
                        format!(
                            "servers `{first}` and `{second}` make tool names that collide: `{example}` is `{as_shorter}` of `{shorter}` and `x` of `{longer}`"
                        ),
                    )
                    .at(second_span.clone())
                    .with_help(format!(
                        "`{first}` is at line {line}; rename one of them, or choose a `gateway.separator` that neither name runs into"
                    )),
                );
            }
        }
    }

    fn server(
        &mut self,
        name: &str,
        name_key: &Key<'_>,
        table: &DeTable<'_>,
        path: &str,
    ) -> Option<ServerConfig> {
        self.check_keys(table, path, SERVER_KEYS);
        let command = self.template(table, path, "command");
        let url = self.template(table, path, "url");
        let args = self.string_array(table, path, "args", |walker, text, span, key| {
            walker.check_template(text, span, key);
        });
        let env = self.string_table(table, path, "env", true);
        let headers = self.string_table(table, path, "headers", false);
        let trust = match self.string(table, path, "trust") {
            Some((text, span)) => match text.as_str() {
                "trusted" => Trust::Trusted,
                "untrusted" => Trust::Untrusted,
                other => {
                    self.push(
                        Diagnostic::error(
                            DiagCode::InvalidValue,
                            format!("{path}.trust"),
                            format!("unknown trust level `{other}`"),
                        )
                        .at(span)
                        .with_help(help_one_of(other, &["trusted", "untrusted"])),
                    );
                    Trust::Untrusted
                }
            },
            None => Trust::Untrusted,
        };
        let private_data = self.private_data(table, path);
        let decide = self.hook(table, path);
        let idempotency_key = self.idempotency_key(table, path);
        let prepare_span = match entry(table, "sandbox").map(|(_, value)| value.get_ref()) {
            Some(DeValue::Table(sandbox)) => {
                entry(sandbox, "prepare").map(|(_, value)| value.span())
            }
            _ => None,
        };
        let sandbox = match entry(table, "sandbox") {
            Some((_, value)) => match value.get_ref() {
                DeValue::Table(sandbox) => Some(self.sandbox(sandbox, &format!("{path}.sandbox"))),
                other => {
                    self.wrong_value_type(value, &format!("{path}.sandbox"), "a table", other);
                    None
                }
            },
            None => None,
        };
        let read_only_table = match entry(table, "read_only") {
            Some((key, value)) => match value.get_ref() {
                DeValue::Table(read_only) => Some((key.span(), read_only)),
                other => {
                    self.wrong_value_type(value, &join(path, "read_only"), "a table", other);
                    None
                }
            },
            None => None,
        };

        let transport = match (command, url) {
            (Some((command, command_span)), None) => {
                self.only_with(table, path, "headers", "`url`");
                self.only_with(table, path, "oauth", "`url`");
                if command.trim().is_empty() {
                    self.push(
                        Diagnostic::error(
                            DiagCode::InvalidValue,
                            format!("{path}.command"),
                            "`command` cannot be empty",
                        )
                        .at(command_span),
                    );
                }
                Some(Transport::Stdio {
                    command,
                    args: args.unwrap_or_default(),
                    env: env.unwrap_or_default(),
                })
            }
            (None, Some((url, url_span))) => {
                for stdio_only in ["args", "env", "sandbox"] {
                    self.only_with(table, path, stdio_only, "`command`");
                }
                self.check_url(&url, url_span, &format!("{path}.url"));
                Some(Transport::Http {
                    url,
                    headers: headers.unwrap_or_default(),
                })
            }
            (Some(_), Some((_, url_span))) => {
                self.push(
                    Diagnostic::error(
                        DiagCode::ConflictingKeys,
                        format!("{path}.url"),
                        format!("server `{name}` has both `command` and `url`"),
                    )
                    .at(url_span)
                    .with_help(
                        "a server is either a program to start (`command`) or an endpoint (`url`)",
                    ),
                );
                None
            }
            (None, None) => {
                self.push(
                    Diagnostic::error(
                        DiagCode::MissingKey,
                        path,
                        format!("server `{name}` needs `command` or `url`"),
                    )
                    .at(name_key.span()),
                );
                None
            }
        };
        let transport = transport?;
        let oauth = match (entry(table, "oauth"), &transport) {
            (Some((_, value)), Transport::Http { .. }) => match value.get_ref() {
                DeValue::Table(oauth) => Some(self.oauth(oauth, &join(path, "oauth"))),
                other => {
                    self.wrong_value_type(value, &join(path, "oauth"), "a table", other);
                    None
                }
            },
            _ => None,
        };
        let vouch_span = read_only_table
            .as_ref()
            .and_then(|(_, read_only)| entry(read_only, "vouch"))
            .map(|(_, value)| value.span());
        let read_only = read_only_table.and_then(|(span, read_only)| {
            self.read_only(
                name,
                read_only,
                &join(path, "read_only"),
                (&transport, oauth.is_some()),
                span,
            )
        });
        let config = ServerConfig {
            name: name.to_owned(),
            transport,
            trust,
            private_data,
            sandbox,
            decide,
            idempotency_key,
            read_only,
            oauth,
        };
        self.nothing_to_prepare(&config, path, prepare_span);
        // The same words `explain` gives as a caveat: what the vouch does
        // not cover on a server that runs here unconfined.
        if let Some(vouch) = config.unsandboxed_vouch() {
            let mut diagnostic = Diagnostic::warning(
                DiagCode::VouchWithoutSandbox,
                join(&join(path, "read_only"), "vouch"),
                vouch.message,
            )
            .with_help(vouch.help);
            if let Some(span) = vouch_span {
                diagnostic = diagnostic.at(span);
            }
            self.push(diagnostic);
        }
        Some(config)
    }

    /// `prepare = "on-start"` on a server whose command is no launcher that
    /// fetches a package (`npx`, `uvx`, ...): there is nothing to install,
    /// and the key does nothing (`nothing-to-prepare`).
    fn nothing_to_prepare(
        &mut self,
        config: &ServerConfig,
        path: &str,
        span: Option<Range<usize>>,
    ) {
        let Transport::Stdio { command, args, .. } = &config.transport else {
            return;
        };
        let on_start = config
            .sandbox
            .as_ref()
            .is_some_and(|sandbox| sandbox.prepare == Prepare::OnStart);
        if !on_start {
            return;
        }
        let message = match crate::launcher::launcher_line(command, args) {
            Some(line) if line.ecosystem.is_some() => return,
            // `uv sync` would run the project's own build outside the
            // sandbox: a project is synced by hand.
            Some(_) => format!(
                "server `{}` runs a `uv run` project, which is not synced at start: its sync would run the project's own build outside the sandbox",
                config.name
            ),
            None => format!(
                "server `{}` runs `{command}` directly, not through a launcher that fetches a package: there is nothing to install at start",
                config.name
            ),
        };
        let mut diagnostic = Diagnostic::warning(
            DiagCode::NothingToPrepare,
            join(&join(path, "sandbox"), "prepare"),
            message,
        )
        .with_help(format!(
            "`prepare = \"on-start\"` installs the package `npx`, `npm exec`, `pnpm dlx`, `bunx`, `uvx`, `uv tool run` or `pipx run` would fetch; remove it here (for a project, run `hintgate sandbox prepare {} --config FILE` once)",
            config.name
        ));
        if let Some(span) = span {
            diagnostic = diagnostic.at(span);
        }
        self.push(diagnostic);
    }

    /// A `[servers.NAME.oauth]` table. A client secret written in it is
    /// refused (`secret-in-config`): only where to read one is accepted.
    fn oauth(&mut self, table: &DeTable<'_>, path: &str) -> OAuthConfig {
        self.check_keys(table, path, OAUTH_KEYS);
        // No span: `config check` would print the line, and the secret on
        // it, to a terminal or a CI log. The key names the place.
        if entry(table, "client_secret").is_some() {
            self.push(
                Diagnostic::error(
                    DiagCode::SecretInConfig,
                    join(path, "client_secret"),
                    "a client secret is never written in the config file",
                )
                .with_help(
                    "put it in a file only you can read and name it in `client_secret_file`, or in an environment variable named in `client_secret_env`",
                ),
            );
        }
        let client_id = self.string(table, path, "client_id").map(|(text, _)| text);
        let secret_file = self.template(table, path, "client_secret_file");
        let secret_env = self.string(table, path, "client_secret_env");
        if let (Some(_), Some((_, span))) = (&secret_file, &secret_env) {
            self.push(
                Diagnostic::error(
                    DiagCode::ConflictingKeys,
                    join(path, "client_secret_env"),
                    "`client_secret_file` and `client_secret_env` both name the client secret",
                )
                .at(span.clone())
                .with_help("keep one of them"),
            );
        }
        let secret_span = secret_file
            .as_ref()
            .or(secret_env.as_ref())
            .map(|(_, span)| span.clone());
        if let (Some(span), None) = (&secret_span, &client_id) {
            self.push(
                Diagnostic::error(
                    DiagCode::MissingKey,
                    join(path, "client_id"),
                    "a client secret needs the `client_id` it belongs to",
                )
                .at(span.clone()),
            );
        }
        let mut urls = [None, None];
        for (slot, key) in urls
            .iter_mut()
            .zip(["client_metadata_url", "authorization_server"])
        {
            if let Some((text, span)) = self.template(table, path, key) {
                let key_path = join(path, key);
                if key == "client_metadata_url"
                    && !text.starts_with("https://")
                    && !text.starts_with("${")
                {
                    self.push(
                        Diagnostic::error(
                            DiagCode::InvalidValue,
                            key_path,
                            format!("`{text}` is not an https URL"),
                        )
                        .at(span)
                        .with_help("a client ID metadata document is served over https, at a URL with a path"),
                    );
                } else {
                    self.check_url(&text, span, &key_path);
                }
                *slot = Some(text);
            }
        }
        let [client_metadata_url, authorization_server] = urls;
        let scopes = self.string_array(table, path, "scopes", Self::check_scope);
        let grant = match self.string(table, path, "grant") {
            Some((text, span)) => {
                match text.as_str() {
                    "authorization_code" => OAuthGrant::AuthorizationCode,
                    "device" => OAuthGrant::Device,
                    "client_credentials" => {
                        if secret_span.is_none() {
                            self.push(
                            Diagnostic::error(
                                DiagCode::MissingKey,
                                join(path, "grant"),
                                "`client_credentials` needs a client secret",
                            )
                            .at(span)
                            .with_help("add `client_id` and `client_secret_file` or `client_secret_env`"),
                        );
                        }
                        OAuthGrant::ClientCredentials
                    }
                    other => {
                        self.push(
                            Diagnostic::error(
                                DiagCode::InvalidValue,
                                join(path, "grant"),
                                format!("unknown grant `{other}`"),
                            )
                            .at(span)
                            .with_help(help_one_of(
                                other,
                                &["authorization_code", "device", "client_credentials"],
                            )),
                        );
                        OAuthGrant::AuthorizationCode
                    }
                }
            }
            None => OAuthGrant::AuthorizationCode,
        };
        let redirect_port = self
            .bounded_in(table, path, "redirect_port", 1, u64::from(u16::MAX))
            .and_then(|port| u16::try_from(port).ok());
        OAuthConfig {
            client_id,
            client_secret_file: secret_file.map(|(text, _)| text),
            client_secret_env: secret_env.map(|(text, _)| text),
            client_metadata_url,
            authorization_server,
            scopes,
            grant,
            redirect_port,
            instance: super::Instance::Full,
        }
    }

    /// A `[servers.NAME.read_only]` table: the server's transport with
    /// what the table overrides, and whether the user vouches for it.
    fn read_only(
        &mut self,
        name: &str,
        table: &DeTable<'_>,
        path: &str,
        (base, has_oauth): (&Transport, bool),
        span: Range<usize>,
    ) -> Option<ReadOnlyConfig> {
        self.check_keys(table, path, READ_ONLY_KEYS);
        let vouch = self.boolean(table, path, "vouch").unwrap_or(false);
        let scopes = self.read_only_scopes(table, path, base, has_oauth);
        let transport = match base {
            Transport::Stdio { command, args, env } => {
                for url_only in ["url", "headers"] {
                    self.only_with(table, path, url_only, "`url`");
                }
                let own_command = self.template(table, path, "command");
                if let Some((text, span)) = &own_command
                    && text.trim().is_empty()
                {
                    self.push(
                        Diagnostic::error(
                            DiagCode::InvalidValue,
                            join(path, "command"),
                            "`command` cannot be empty",
                        )
                        .at(span.clone()),
                    );
                }
                let own_args = self.string_array(table, path, "args", |walker, text, span, key| {
                    walker.check_template(text, span, key);
                });
                let own_env = self.string_table(table, path, "env", true);
                let mut env = env.clone();
                env.extend(own_env.unwrap_or_default());
                Transport::Stdio {
                    command: own_command.map_or_else(|| command.clone(), |(text, _)| text),
                    args: own_args.unwrap_or_else(|| args.clone()),
                    env,
                }
            }
            Transport::Http { url, headers } => {
                for stdio_only in ["command", "args", "env"] {
                    self.only_with(table, path, stdio_only, "`command`");
                }
                let own_url = self.template(table, path, "url");
                if let Some((text, span)) = &own_url {
                    self.check_url(text, span.clone(), &join(path, "url"));
                }
                let own_headers = self.string_table(table, path, "headers", false);
                let mut headers = headers.clone();
                headers.extend(own_headers.unwrap_or_default());
                Transport::Http {
                    url: own_url.map_or_else(|| url.clone(), |(text, _)| text),
                    headers,
                }
            }
        };
        // INVARIANT: a read-only instance runs with credentials of its own;
        // one reached exactly as the full instance is would prove nothing.
        // A read-scoped token (`scopes`) is credentials of its own.
        if transport == *base && scopes.is_none() {
            let what = match base {
                Transport::Stdio { .. } => "`args`, `env` or `command`",
                Transport::Http { .. } if has_oauth => "`headers`, `url` or `scopes`",
                Transport::Http { .. } => "`headers` or `url`",
            };
            self.push(
                Diagnostic::error(
                    DiagCode::ReadOnlyUnchanged,
                    path,
                    format!(
                        "`[{path}]` overrides nothing of how server `{name}` is reached, so its instance would run with the same credentials"
                    ),
                )
                .at(span)
                .with_help(format!(
                    "give it the read-only credentials in {what}, or remove the table"
                )),
            );
            return None;
        }
        Some(ReadOnlyConfig {
            transport,
            vouch,
            scopes,
        })
    }

    /// `scopes` of a `read_only` table: the only scopes the read-only
    /// instance's own OAuth token is asked for. Only a `url` server with an
    /// `oauth` table has a token to ask for, and an empty list would leave
    /// the scopes to the server.
    fn read_only_scopes(
        &mut self,
        table: &DeTable<'_>,
        path: &str,
        base: &Transport,
        has_oauth: bool,
    ) -> Option<Vec<String>> {
        let (_, value) = entry(table, "scopes")?;
        let span = value.span();
        if !matches!(base, Transport::Http { .. }) || !has_oauth {
            self.push(
                Diagnostic::error(
                    DiagCode::ConflictingKeys,
                    join(path, "scopes"),
                    "`scopes` asks for a read-scoped OAuth token: it only applies to a server with `url` and an `oauth` table",
                )
                .at(span)
                .with_help("add a `[servers.NAME.oauth]` table, or give the read-only credentials in `headers`"),
            );
            return None;
        }
        let scopes = self.string_array(table, path, "scopes", Self::check_scope)?;
        if scopes.is_empty() {
            self.push(
                Diagnostic::error(
                    DiagCode::InvalidValue,
                    join(path, "scopes"),
                    "`scopes` is empty: the server would choose what the read-only token may do",
                )
                .at(span)
                .with_help("name the read scopes, such as `scopes = [\"docs:read\"]`"),
            );
            return None;
        }
        Some(scopes)
    }

    /// `idempotency_key`: the input property's name, or `false` for none.
    fn idempotency_key(&mut self, table: &DeTable<'_>, path: &str) -> Option<String> {
        let Some((_, value)) = entry(table, "idempotency_key") else {
            return Some(DEFAULT_IDEMPOTENCY_KEY.to_owned());
        };
        let key_path = join(path, "idempotency_key");
        match value.get_ref() {
            DeValue::Boolean(false) => None,
            DeValue::String(text) if !text.is_empty() && text.len() <= 128 => {
                Some(text.to_string())
            }
            DeValue::String(_) => {
                self.push(
                    Diagnostic::error(
                        DiagCode::InvalidValue,
                        key_path,
                        "`idempotency_key` must name an input property of 1 to 128 characters",
                    )
                    .at(value.span())
                    .with_help("write `false` for a server whose keys hintgate should not handle"),
                );
                None
            }
            other => {
                self.wrong_value_type(value, &key_path, "a property name, or `false`", other);
                None
            }
        }
    }

    /// Reports `key` when present in a server of the other transport.
    /// One OAuth scope: not empty, no whitespace (a scope list is
    /// space-separated on the wire, so `"a b"` would ask for two).
    fn check_scope(&mut self, text: &str, span: Range<usize>, key: &str) {
        if text.is_empty() || text.contains(char::is_whitespace) {
            self.push(
                Diagnostic::error(
                    DiagCode::InvalidValue,
                    key,
                    format!("`{text}` is not one scope"),
                )
                .at(span)
                .with_help("write each scope as its own string, without spaces"),
            );
        }
    }

    fn only_with(&mut self, table: &DeTable<'_>, path: &str, key: &str, needs: &str) {
        if let Some((found, _)) = entry(table, key) {
            self.push(
                Diagnostic::error(
                    DiagCode::ConflictingKeys,
                    format!("{path}.{key}"),
                    format!("`{key}` only applies to a server with {needs}"),
                )
                .at(found.span()),
            );
        }
    }

    fn private_data(&mut self, table: &DeTable<'_>, path: &str) -> PrivateData {
        let key_path = format!("{path}.private_data");
        let Some((_, value)) = entry(table, "private_data") else {
            return PrivateData::None;
        };
        match value.get_ref() {
            DeValue::Boolean(true) => PrivateData::All,
            DeValue::Boolean(false) => PrivateData::None,
            DeValue::Array(items) => {
                let mut globs = Vec::new();
                for (idx, item) in items.iter().enumerate() {
                    let item_path = format!("{key_path}[{idx}]");
                    match item.get_ref() {
                        DeValue::String(text) => {
                            if let Some(glob) = self.glob(text, item.span(), &item_path) {
                                globs.push(glob);
                            }
                        }
                        other => self.wrong_value_type(item, &item_path, "a tool-name glob", other),
                    }
                }
                PrivateData::Tools(globs)
            }
            other => {
                self.wrong_value_type(
                    value,
                    &key_path,
                    "a boolean or an array of tool-name globs",
                    other,
                );
                PrivateData::None
            }
        }
    }

    fn sandbox(&mut self, table: &DeTable<'_>, path: &str) -> SandboxConfig {
        self.check_keys(table, path, SANDBOX_KEYS);
        let mut sandbox = SandboxConfig::default();
        for (key, target) in [("read", &mut sandbox.read), ("write", &mut sandbox.write)] {
            let paths = self.string_array(table, path, key, |walker, text, span, item_path| {
                let expanded_later = text.starts_with("${");
                if !expanded_later && !text.starts_with('/') {
                    walker.push(
                        Diagnostic::error(
                            DiagCode::RelativePath,
                            item_path,
                            format!("sandbox path `{text}` is not absolute"),
                        )
                        .at(span.clone())
                        .with_help("write the full path, starting with `/`"),
                    );
                }
                walker.check_template(text, span, item_path);
            });
            *target = paths.unwrap_or_default();
        }
        sandbox.network = match entry(table, "network") {
            Some((_, value)) if matches!(value.get_ref(), DeValue::Array(_)) => {
                sandbox.egress = self.egress(table, path);
                false
            }
            _ => self.boolean(table, path, "network").unwrap_or(false),
        };
        sandbox.max_open_files = self.bounded_in(table, path, "max_open_files", 16, 1 << 20);
        sandbox.max_processes = self.bounded_in(table, path, "max_processes", 1, 1 << 22);
        sandbox.max_memory_mb = self.bounded_in(table, path, "max_memory_mb", 16, 1 << 30);
        sandbox.best_effort = self.boolean(table, path, "best_effort").unwrap_or(false);
        if let Some((text, span)) = self.string(table, path, "prepare") {
            match text.as_str() {
                "by-hand" => sandbox.prepare = Prepare::ByHand,
                "on-start" => sandbox.prepare = Prepare::OnStart,
                other => self.push(
                    Diagnostic::error(
                        DiagCode::InvalidValue,
                        join(path, "prepare"),
                        format!("unknown way to prepare `{other}`"),
                    )
                    .at(span)
                    .with_help(help_one_of(other, &["by-hand", "on-start"])),
                ),
            }
        }
        sandbox
    }

    /// `network = ["host:port", ...]`: each entry read with
    /// [`Egress::parse`], a bad one named at its own position; an empty
    /// list is refused (it would read as "no network" to one reader and as
    /// "some network" to another), and a repeated entry is kept once.
    fn egress(&mut self, table: &DeTable<'_>, path: &str) -> Vec<Egress> {
        let mut hosts: Vec<Egress> = Vec::new();
        let list = self.string_array(table, path, "network", |walker, text, span, item_path| {
            if let Err(problem) = Egress::parse(text) {
                walker.push(
                    Diagnostic::error(
                        DiagCode::InvalidValue,
                        item_path,
                        format!("network host `{text}` {problem}"),
                    )
                    .at(span)
                    .with_help(
                        "write each host the server may reach as `host:port` (`api.github.com:443`, `10.0.0.5:8080`, `[::1]:8080`)",
                    ),
                );
            }
        });
        for text in list.unwrap_or_default() {
            if let Ok(host) = Egress::parse(&text)
                && !hosts.contains(&host)
            {
                hosts.push(host);
            }
        }
        if let Some((_, value)) = entry(table, "network")
            && matches!(value.get_ref(), DeValue::Array(items) if items.is_empty())
        {
            self.push(
                Diagnostic::error(
                    DiagCode::InvalidValue,
                    join(path, "network"),
                    "an empty list of network hosts".to_owned(),
                )
                .at(value.span())
                .with_help(
                    "write `network = false` for no network at all, or name the hosts the server may reach as `host:port`",
                ),
            );
        }
        hosts
    }

    fn rules(&mut self, array: &DeArray<'_>) -> Vec<Rule> {
        let mut rules = Vec::new();
        for (idx, value) in array.iter().enumerate() {
            let path = format!("rules[{idx}]");
            let DeValue::Table(table) = value.get_ref() else {
                self.wrong_value_type(value, &path, "a table", value.get_ref());
                continue;
            };
            self.check_keys(table, &path, RULE_KEYS);
            let server = self.glob_key(table, &path, "server");
            let tool = self.glob_key(table, &path, "tool");
            let action = match self.string(table, &path, "action") {
                Some((text, span)) => match text.as_str() {
                    "allow" => Some(Action::Allow),
                    "ask" => Some(Action::Ask),
                    "deny" => Some(Action::Deny),
                    other => {
                        self.push(
                            Diagnostic::error(
                                DiagCode::InvalidValue,
                                format!("{path}.action"),
                                format!("unknown action `{other}`"),
                            )
                            .at(span)
                            .with_help(help_one_of(other, &["allow", "ask", "deny"])),
                        );
                        None
                    }
                },
                None => {
                    if entry(table, "action").is_none() {
                        self.push(
                            Diagnostic::error(
                                DiagCode::MissingKey,
                                path.clone(),
                                "rule has no `action`",
                            )
                            .at(value.span())
                            .with_help("add `action = \"allow\"`, `\"ask\"` or `\"deny\"`"),
                        );
                    }
                    None
                }
            };
            let reason = self.string(table, &path, "reason").map(|(text, _)| text);
            let (Some(server), Some(tool), Some(action)) = (server, tool, action) else {
                continue;
            };
            self.warn_unknown_server(table, value, &path, &server, "rule");
            if action == Action::Allow && server.matches_everything() && tool.matches_everything() {
                self.push(
                    Diagnostic::warning(
                        DiagCode::AllowEverything,
                        path.clone(),
                        "rule allows every tool of every server without asking",
                    )
                    .at(value.span())
                    .with_help("name the servers or tools it is meant for"),
                );
            }
            rules.push(Rule {
                server,
                tool,
                action,
                reason,
            });
        }
        rules
    }

    /// The `[[previews]]` entries: each names its tools as a rule does and
    /// exactly one source.
    fn previews(
        &mut self,
        array: &DeArray<'_>,
        servers: &BTreeMap<String, ServerConfig>,
    ) -> Vec<PreviewRule> {
        let mut previews = Vec::new();
        for (idx, value) in array.iter().enumerate() {
            let path = format!("previews[{idx}]");
            let DeValue::Table(table) = value.get_ref() else {
                self.wrong_value_type(value, &path, "a table", value.get_ref());
                continue;
            };
            self.check_keys(table, &path, PREVIEW_KEYS);
            let server = self.glob_key(table, &path, "server");
            let tool = self.glob_key(table, &path, "tool");
            let sources: Vec<&str> = ["command", "files", "dry_run_argument"]
                .into_iter()
                .filter(|key| entry(table, key).is_some())
                .collect();
            if sources.len() != 1 {
                let message = if sources.is_empty() {
                    "a preview names no source".to_owned()
                } else {
                    format!(
                        "a preview names more than one source: {}",
                        sources.join(", ")
                    )
                };
                let code = if sources.is_empty() {
                    DiagCode::MissingKey
                } else {
                    DiagCode::ConflictingKeys
                };
                self.push(
                    Diagnostic::error(code, path.clone(), message)
                        .at(value.span())
                        .with_help("give exactly one of `command`, `files` and `dry_run_argument`"),
                );
                continue;
            }
            if !sources.contains(&"command") {
                for key in ["command_mode", "timeout_ms"] {
                    if let Some((found, _)) = entry(table, key) {
                        self.push(
                            Diagnostic::error(
                                DiagCode::ConflictingKeys,
                                join(&path, key),
                                format!("`{key}` only applies beside a `command`"),
                            )
                            .at(found.span()),
                        );
                    }
                }
            }
            let previewer = match sources.first().copied() {
                Some("command") => self.preview_command(table, &path),
                Some("files") => self.preview_files(table, &path),
                _ => self.preview_dry_run(table, &path),
            };
            let (Some(server), Some(tool), Some(previewer)) = (server, tool, previewer) else {
                continue;
            };
            self.warn_unknown_server(table, value, &path, &server, "preview");
            let untrusted = server
                .literal()
                .and_then(|name| servers.get(&name))
                .filter(|config| config.trust == Trust::Untrusted);
            if let (Previewer::DryRun { .. }, Some(config)) = (&previewer, untrusted) {
                let span = entry(table, "dry_run_argument").map_or(value.span(), |(_, v)| v.span());
                self.push(
                    Diagnostic::warning(
                        DiagCode::DryRunUntrusted,
                        join(&path, "dry_run_argument"),
                        format!(
                            "server `{}` is not trusted, so its dry run is never asked for",
                            escape_line(&config.name)
                        ),
                    )
                    .at(span)
                    .with_help(
                        "trust the server, or preview its calls another way (`files` or `command`)",
                    ),
                );
            }
            previews.push(PreviewRule {
                server,
                tool,
                previewer,
            });
        }
        previews
    }

    /// `command`, `command_mode` and `timeout_ms` of a `[[previews]]` entry.
    fn preview_command(&mut self, table: &DeTable<'_>, path: &str) -> Option<Previewer> {
        let command = self.string_array(table, path, "command", |walker, text, span, key| {
            walker.check_template(text, span, key);
        })?;
        let mode = match self.string(table, path, "command_mode") {
            Some((text, span)) => match text.as_str() {
                "persistent" => HookMode::Persistent,
                "per-call" => HookMode::PerCall,
                other => {
                    self.push(
                        Diagnostic::error(
                            DiagCode::InvalidValue,
                            join(path, "command_mode"),
                            format!("unknown previewer mode `{other}`"),
                        )
                        .at(span)
                        .with_help(help_one_of(other, &["persistent", "per-call"])),
                    );
                    return None;
                }
            },
            None => HookMode::default(),
        };
        let timeout = self.bounded_in(table, path, "timeout_ms", 1, MAX_PREVIEW_TIMEOUT_MS);
        if command
            .first()
            .is_none_or(|program| program.trim().is_empty())
        {
            let span = entry(table, "command").map_or(0..0, |(_, value)| value.span());
            self.push(
                Diagnostic::error(
                    DiagCode::InvalidValue,
                    join(path, "command"),
                    "the previewer's program cannot be empty",
                )
                .at(span)
                .with_help(
                    "name the program and its arguments, e.g. `[\"/usr/local/bin/preview\"]`",
                ),
            );
            return None;
        }
        Some(Previewer::Command(HookConfig {
            command,
            mode,
            timeout_ms: timeout.unwrap_or(DEFAULT_PREVIEW_TIMEOUT_MS),
        }))
    }

    /// The `files` table of a `[[previews]]` entry: the path argument,
    /// exactly one of `content`, `edits`, `destination` and
    /// `create_directory = true`, and absolute `roots`.
    fn preview_files(&mut self, table: &DeTable<'_>, path: &str) -> Option<Previewer> {
        let (_, value) = entry(table, "files")?;
        let files_path = join(path, "files");
        let DeValue::Table(files) = value.get_ref() else {
            self.wrong_value_type(value, &files_path, "a table", value.get_ref());
            return None;
        };
        self.check_keys(files, &files_path, PREVIEW_FILES_KEYS);
        let argument = self.string(files, &files_path, "path");
        if argument.is_none() && entry(files, "path").is_none() {
            self.push(
                Diagnostic::error(
                    DiagCode::MissingKey,
                    files_path.clone(),
                    "`files` names no `path` argument",
                )
                .at(value.span())
                .with_help("add `path = \"path\"`: the argument that holds the file's path"),
            );
        }
        let mut changes = Vec::new();
        for key in ["content", "edits", "destination"] {
            if let Some((text, _)) = self.string(files, &files_path, key) {
                changes.push(match key {
                    "content" => FileChange::Write { content: text },
                    "edits" => FileChange::Edit { edits: text },
                    _ => FileChange::Move { destination: text },
                });
            }
        }
        if self.boolean(files, &files_path, "create_directory") == Some(true) {
            changes.push(FileChange::CreateDirectory);
        }
        if changes.len() != 1 {
            self.push(
                Diagnostic::error(
                    if changes.is_empty() {
                        DiagCode::MissingKey
                    } else {
                        DiagCode::ConflictingKeys
                    },
                    files_path.clone(),
                    "`files` must say exactly one thing the call does to the file",
                )
                .at(value.span())
                .with_help(
                    "give one of `content`, `edits`, `destination` and `create_directory = true`",
                ),
            );
        }
        let roots = self
            .string_array(files, &files_path, "roots", |walker, text, span, key| {
                if !text.starts_with('/') {
                    walker.push(
                        Diagnostic::error(
                            DiagCode::InvalidValue,
                            key,
                            format!("`{}` is not an absolute path", escape_line(text)),
                        )
                        .at(span)
                        .with_help("name each directory the server serves by its absolute path"),
                    );
                }
            })
            .unwrap_or_default();
        if roots.is_empty() {
            self.push(
                Diagnostic::error(
                    DiagCode::MissingKey,
                    join(&files_path, "roots"),
                    "`files` names no directory hintgate may read",
                )
                .at(value.span())
                .with_help(
                    "add `roots = [\"/path/the/server/serves\"]`: nothing outside them is read",
                ),
            );
        }
        let (Some((argument, _)), [change]) = (argument, changes.as_slice()) else {
            return None;
        };
        Some(Previewer::Files(FilePreview {
            path: argument,
            change: change.clone(),
            roots,
        }))
    }

    /// `dry_run_argument` of a `[[previews]]` entry.
    fn preview_dry_run(&mut self, table: &DeTable<'_>, path: &str) -> Option<Previewer> {
        let (argument, span) = self.string(table, path, "dry_run_argument")?;
        if argument.is_empty() {
            self.push(
                Diagnostic::error(
                    DiagCode::InvalidValue,
                    join(path, "dry_run_argument"),
                    "`dry_run_argument` cannot be empty",
                )
                .at(span),
            );
            return None;
        }
        Some(Previewer::DryRun { argument })
    }

    fn labels(&mut self, array: &DeArray<'_>) -> Vec<Label> {
        let mut labels = Vec::new();
        for (idx, value) in array.iter().enumerate() {
            let path = format!("labels[{idx}]");
            let DeValue::Table(table) = value.get_ref() else {
                self.wrong_value_type(value, &path, "a table", value.get_ref());
                continue;
            };
            self.check_keys(table, &path, LABEL_KEYS);
            let server = self.glob_key(table, &path, "server");
            let tool = self.glob_key(table, &path, "tool");
            let paid = self.boolean(table, &path, "paid");
            let reason = self.string(table, &path, "reason").map(|(text, _)| text);
            if paid.is_none() && entry(table, "paid").is_none() {
                self.push(
                    Diagnostic::error(
                        DiagCode::MissingKey,
                        path.clone(),
                        "label says nothing about the tools it names",
                    )
                    .at(value.span())
                    .with_help(
                        "add `paid = true` for tools whose calls cost money or cannot be undone",
                    ),
                );
            }
            let (Some(server), Some(tool), Some(paid)) = (server, tool, paid) else {
                continue;
            };
            self.warn_unknown_server(table, value, &path, &server, "label");
            labels.push(Label {
                server,
                tool,
                paid,
                reason,
            });
        }
        labels
    }

    /// Warns when a rule or label names, by a literal, a server that is
    /// not configured.
    fn warn_unknown_server(
        &mut self,
        table: &DeTable<'_>,
        value: &Val<'_>,
        path: &str,
        server: &Glob,
        what: &str,
    ) {
        let Some(name) = server.literal() else {
            return;
        };
        if self.declared_servers.contains(&name) {
            return;
        }
        let span = entry(table, "server").map_or(value.span(), |(_, v)| v.span());
        let help = help_one_of(
            &name,
            &self
                .declared_servers
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        );
        self.push(
            Diagnostic::warning(
                DiagCode::UnknownRuleServer,
                format!("{path}.server"),
                format!("{what} names server `{name}`, which is not configured"),
            )
            .at(span)
            .with_help(help),
        );
    }

    // --- typed getters ---

    fn check_keys(&mut self, table: &DeTable<'_>, path: &str, allowed: &[&str]) {
        for (key, _) in table.iter() {
            let name = key.get_ref().as_ref();
            if allowed.contains(&name) {
                continue;
            }
            let full = join(path, name);
            let where_ = if path.is_empty() {
                "at the top level".to_owned()
            } else {
                format!("in `[{path}]`")
            };
            self.push(
                Diagnostic::error(
                    DiagCode::UnknownKey,
                    full,
                    format!("unknown key `{name}` {where_}"),
                )
                .at(key.span())
                .with_help(help_one_of(name, allowed)),
            );
        }
    }

    fn string(
        &mut self,
        table: &DeTable<'_>,
        path: &str,
        key: &str,
    ) -> Option<(String, Range<usize>)> {
        let (_, value) = entry(table, key)?;
        match value.get_ref() {
            DeValue::String(text) => Some((text.to_string(), value.span())),
            other => {
                self.wrong_value_type(value, &join(path, key), "a string", other);
                None
            }
        }
    }

    fn template(
        &mut self,
        table: &DeTable<'_>,
        path: &str,
        key: &str,
    ) -> Option<(String, Range<usize>)> {
        let (text, span) = self.string(table, path, key)?;
        self.check_template(&text, span.clone(), &join(path, key));
        Some((text, span))
    }

    fn boolean(&mut self, table: &DeTable<'_>, path: &str, key: &str) -> Option<bool> {
        let (_, value) = entry(table, key)?;
        match value.get_ref() {
            DeValue::Boolean(flag) => Some(*flag),
            other => {
                self.wrong_value_type(
                    value,
                    &join(path, key),
                    "a boolean (`true` or `false`)",
                    other,
                );
                None
            }
        }
    }

    fn integer(
        &mut self,
        table: &DeTable<'_>,
        path: &str,
        key: &str,
    ) -> Option<(i64, Range<usize>)> {
        let (_, value) = entry(table, key)?;
        match value.get_ref() {
            DeValue::Integer(int) => match i64::from_str_radix(int.as_str(), int.radix()) {
                Ok(number) => Some((number, value.span())),
                Err(_) => {
                    self.push(
                        Diagnostic::error(
                            DiagCode::InvalidValue,
                            join(path, key),
                            format!("`{key}` is out of range"),
                        )
                        .at(value.span()),
                    );
                    None
                }
            },
            other => {
                self.wrong_value_type(value, &join(path, key), "an integer", other);
                None
            }
        }
    }

    fn string_array(
        &mut self,
        table: &DeTable<'_>,
        path: &str,
        key: &str,
        mut check: impl FnMut(&mut Self, &str, Range<usize>, &str),
    ) -> Option<Vec<String>> {
        let (_, value) = entry(table, key)?;
        let key_path = join(path, key);
        let DeValue::Array(items) = value.get_ref() else {
            self.wrong_value_type(value, &key_path, "an array of strings", value.get_ref());
            return None;
        };
        let mut strings = Vec::with_capacity(items.len());
        for (idx, item) in items.iter().enumerate() {
            let item_path = format!("{key_path}[{idx}]");
            match item.get_ref() {
                DeValue::String(text) => {
                    check(self, text, item.span(), &item_path);
                    strings.push(text.to_string());
                }
                other => self.wrong_value_type(item, &item_path, "a string", other),
            }
        }
        Some(strings)
    }

    fn string_table(
        &mut self,
        table: &DeTable<'_>,
        path: &str,
        key: &str,
        names_are_env_vars: bool,
    ) -> Option<BTreeMap<String, String>> {
        let (_, value) = entry(table, key)?;
        let key_path = join(path, key);
        let DeValue::Table(entries) = value.get_ref() else {
            self.wrong_value_type(value, &key_path, "a table of strings", value.get_ref());
            return None;
        };
        let mut map = BTreeMap::new();
        for (name, item) in entries.iter() {
            let name_text = name.get_ref().as_ref();
            let item_path = join(&key_path, name_text);
            let valid_name = if names_are_env_vars {
                vars::is_var_name(name_text)
            } else {
                !name_text.is_empty()
                    && name_text.bytes().all(|b| b.is_ascii_graphic() && b != b':')
            };
            if !valid_name {
                let what = if names_are_env_vars {
                    "an environment variable name"
                } else {
                    "a header name"
                };
                self.push(
                    Diagnostic::error(
                        DiagCode::InvalidValue,
                        item_path.clone(),
                        format!("`{name_text}` is not {what}"),
                    )
                    .at(name.span()),
                );
            }
            match item.get_ref() {
                DeValue::String(text) => {
                    self.check_template(text, item.span(), &item_path);
                    map.insert(name_text.to_owned(), text.to_string());
                }
                other => self.wrong_value_type(item, &item_path, "a string", other),
            }
        }
        Some(map)
    }

    fn glob_key(&mut self, table: &DeTable<'_>, path: &str, key: &str) -> Option<Glob> {
        match entry(table, key) {
            None => Some(Glob::any()),
            Some(_) => {
                let (text, span) = self.string(table, path, key)?;
                self.glob(&text, span, &join(path, key))
            }
        }
    }

    fn glob(&mut self, text: &str, span: Range<usize>, path: &str) -> Option<Glob> {
        match Glob::new(text) {
            Ok(glob) => Some(glob),
            Err(err) => {
                self.push(
                    Diagnostic::error(DiagCode::BadGlob, path, format!("bad glob `{text}`: {err}"))
                        .at(span)
                        .with_help("`*` matches any run of characters, `?` one, `[a-z]` a class; `\\` escapes"),
                );
                None
            }
        }
    }

    fn check_template(&mut self, text: &str, span: Range<usize>, path: &str) {
        match vars::references(text) {
            Err(err) => self.push(
                Diagnostic::error(
                    DiagCode::BadVariable,
                    path,
                    format!("bad variable reference: {err}"),
                )
                .at(span)
                .with_help("write `${NAME}`, or `$${` for a literal `${`"),
            ),
            Ok(names) => {
                let Some(source) = self.vars else {
                    return;
                };
                for name in names {
                    if source.get(&name).is_none() {
                        self.push(
                            Diagnostic::warning(
                                DiagCode::UnsetVariable,
                                path,
                                format!("variable `{name}` is not set in this environment"),
                            )
                            .at(span.clone())
                            .with_help(
                                "set it before starting the gateway, or that server will not start",
                            ),
                        );
                    }
                }
            }
        }
    }

    fn check_url(&mut self, url: &str, span: Range<usize>, path: &str) {
        if url.starts_with("${") {
            return;
        }
        let rest = if let Some(rest) = url.strip_prefix("https://") {
            rest
        } else if let Some(rest) = url.strip_prefix("http://") {
            let host = rest.split(['/', '?', '#']).next().unwrap_or("");
            let host = host.rsplit_once('@').map_or(host, |(_, host)| host);
            let hostname = if host.starts_with('[') {
                host.split(']')
                    .next()
                    .map(|h| format!("{h}]"))
                    .unwrap_or_default()
            } else {
                host.split(':').next().unwrap_or("").to_owned()
            };
            let bare = hostname.trim_start_matches('[').trim_end_matches(']');
            let loopback = hostname == "localhost"
                || bare
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|address| address.is_loopback());
            if !loopback && !hostname.is_empty() {
                self.push(
                    Diagnostic::warning(
                        DiagCode::InsecureUrl,
                        path,
                        format!("`{url}` is plain http to a host that is not this machine"),
                    )
                    .at(span.clone())
                    .with_help("use `https://`: requests and their headers travel in clear text"),
                );
            }
            rest
        } else {
            self.push(
                Diagnostic::error(
                    DiagCode::InvalidValue,
                    path,
                    format!("`{url}` is not an http or https URL"),
                )
                .at(span),
            );
            return;
        };
        if rest.is_empty() || rest.starts_with('/') {
            self.push(
                Diagnostic::error(DiagCode::InvalidValue, path, format!("`{url}` has no host"))
                    .at(span),
            );
        }
    }

    fn wrong_value_type(
        &mut self,
        value: &Val<'_>,
        path: &str,
        expected: &str,
        found: &DeValue<'_>,
    ) {
        let name = path.rsplit('.').next().unwrap_or(path);
        self.push(
            Diagnostic::error(
                DiagCode::WrongType,
                path,
                format!(
                    "`{name}` must be {expected}, not {}",
                    article(found.type_str())
                ),
            )
            .at(value.span()),
        );
    }
}

// === the [telemetry] table ===

impl Walker<'_> {
    /// The `[telemetry]` table: the OTLP collector traces go to.
    fn telemetry(&mut self, table: &DeTable<'_>) -> TelemetrySettings {
        self.check_keys(table, "telemetry", TELEMETRY_KEYS);
        let mut settings = TelemetrySettings::default();
        if let Some((text, at)) = self.string(table, "telemetry", "otlp_endpoint") {
            let rest = text
                .strip_prefix("http://")
                .or_else(|| text.strip_prefix("https://"));
            let authority = rest.map(|rest| rest.split('/').next().unwrap_or(""));
            match authority {
                Some(authority) if authority.contains('@') => self.push(
                    Diagnostic::error(
                        DiagCode::SecretInConfig,
                        "telemetry.otlp_endpoint",
                        "the collector's URL carries credentials; they would be written where the configuration is read",
                    )
                    // No line of the file is shown: it holds the secret.
                    .with_help("give the collector's address only"),
                ),
                Some(authority)
                    if !authority.is_empty()
                        && !text.contains(char::is_whitespace)
                        && !text.contains(['?', '#']) =>
                {
                    settings.otlp_endpoint = Some(text);
                }
                _ => self.push(
                    Diagnostic::error(
                        DiagCode::InvalidValue,
                        "telemetry.otlp_endpoint",
                        format!("`{text}` is not the base URL of an OTLP collector"),
                    )
                    .at(at)
                    .with_help("write it as `http://127.0.0.1:4318` (spans go to `/v1/traces` under it)"),
                ),
            }
        }
        if let Some((name, at)) = self.string(table, "telemetry", "service_name") {
            if name.is_empty() || name.len() > 128 || name.chars().any(char::is_control) {
                self.push(
                    Diagnostic::error(
                        DiagCode::InvalidValue,
                        "telemetry.service_name",
                        "the service name must be one line of at most 128 characters",
                    )
                    .at(at),
                );
            } else {
                settings.service_name = Some(name);
            }
        }
        settings
    }
}

// === the [listen] table ===

impl Walker<'_> {
    /// The `[listen]` table (at `span`): the HTTP host side's address, TLS
    /// files, origins and OAuth resource-server settings.
    fn listen(&mut self, table: &DeTable<'_>, span: Range<usize>) -> ListenSettings {
        self.check_keys(table, "listen", LISTEN_KEYS);
        let mut settings = ListenSettings::default();
        let public = self.boolean(table, "listen", "public");
        settings.public = public.unwrap_or(false);
        if let Some((text, at)) = self.string(table, "listen", "address") {
            match text.parse::<std::net::SocketAddr>() {
                Ok(address) if !address.ip().is_loopback() && !settings.public => self.push(
                    Diagnostic::error(
                        DiagCode::InvalidValue,
                        "listen.address",
                        format!("`{text}` is beyond loopback: hosts on the network would reach your servers"),
                    )
                    .at(at)
                    .with_help("set `public = true` in `[listen]` (tokens are then required), or listen on 127.0.0.1"),
                ),
                Ok(address) => settings.address = Some(address),
                Err(_) => self.push(
                    Diagnostic::error(
                        DiagCode::InvalidValue,
                        "listen.address",
                        format!("`{text}` is not an address and port"),
                    )
                    .at(at)
                    .with_help("write it as `127.0.0.1:8787` (or `[::1]:8787`)"),
                ),
            }
        }
        settings.header_timeout_s = self.bounded_in(table, "listen", "header_timeout_s", 1, 3600);
        settings.body_timeout_s = self.bounded_in(table, "listen", "body_timeout_s", 1, 3600);
        settings.max_unauthenticated =
            self.bounded_in(table, "listen", "max_unauthenticated", 1, 1_000_000);
        settings.max_unauthenticated_per_address = self.bounded_in(
            table,
            "listen",
            "max_unauthenticated_per_address",
            1,
            1_000_000,
        );
        settings.tls_cert = self.listen_path(table, "tls_cert", "the TLS certificate");
        settings.tls_key = self.listen_path(table, "tls_key", "the TLS key");
        for (present, missing) in [("tls_cert", "tls_key"), ("tls_key", "tls_cert")] {
            self.listen_needs(table, &span, present, missing);
        }
        settings.allow_origins = self
            .string_array(
                table,
                "listen",
                "allow_origins",
                |walker, text, at, path| {
                    walker.check_origin(text, at, path);
                },
            )
            .unwrap_or_default();
        for key in ["oauth_issuer", "oauth_jwks"] {
            if let Some((url, at)) = self.string(table, "listen", key) {
                self.check_url(&url, at, &join("listen", key));
                match key {
                    "oauth_issuer" => settings.oauth_issuer = Some(url),
                    _ => settings.oauth_jwks = Some(url),
                }
            }
        }
        self.listen_needs(table, &span, "oauth_issuer", "oauth_jwks");
        for key in [
            "oauth_jwks",
            "oauth_audience",
            "oauth_read_scope",
            "oauth_write_scope",
        ] {
            self.listen_needs(table, &span, key, "oauth_issuer");
        }
        if let Some((audience, at)) = self.string(table, "listen", "oauth_audience") {
            self.check_url(&audience, at, "listen.oauth_audience");
            settings.oauth_audience = Some(audience);
        }
        let mut scopes = Vec::new();
        for key in ["oauth_read_scope", "oauth_write_scope"] {
            let Some((scope, at)) = self.string(table, "listen", key) else {
                continue;
            };
            if scope.is_empty()
                || scope
                    .chars()
                    .any(|ch| ch.is_whitespace() || ch.is_control())
            {
                self.push(
                    Diagnostic::error(
                        DiagCode::InvalidValue,
                        join("listen", key),
                        format!("`{scope}` is not one scope: a scope is one word, with no spaces"),
                    )
                    .at(at),
                );
                continue;
            }
            scopes.push((scope.clone(), at));
            match key {
                "oauth_read_scope" => settings.oauth_read_scope = Some(scope),
                _ => settings.oauth_write_scope = Some(scope),
            }
        }
        let read = settings.oauth_read_scope.as_deref().unwrap_or("mcp:read");
        let write = settings.oauth_write_scope.as_deref().unwrap_or("mcp:write");
        if read == write
            && let Some((_, at)) = scopes.last()
        {
            self.push(
                Diagnostic::error(
                    DiagCode::ConflictingKeys,
                    "listen.oauth_write_scope",
                    format!("the read and the write scope are both `{read}`: a token could not be told to read only"),
                )
                .at(at.clone())
                .with_help("give `oauth_read_scope` and `oauth_write_scope` different names"),
            );
        }
        settings
    }

    /// A path of `[listen]`: absolute, or starting with `${VAR}`.
    fn listen_path(&mut self, table: &DeTable<'_>, key: &str, what: &str) -> Option<String> {
        let path = join("listen", key);
        let (text, at) = self.template(table, "listen", key)?;
        if !text.starts_with("${") && !text.starts_with('/') {
            self.push(
                Diagnostic::error(
                    DiagCode::RelativePath,
                    path,
                    format!("{what}'s path `{text}` is not absolute"),
                )
                .at(at)
                .with_help("write the full path, starting with `/`"),
            );
            return None;
        }
        Some(text)
    }

    /// `present` in `[listen]` needs `needed` beside it.
    fn listen_needs(
        &mut self,
        table: &DeTable<'_>,
        span: &Range<usize>,
        present: &str,
        needed: &str,
    ) {
        if entry(table, present).is_none() || entry(table, needed).is_some() {
            return;
        }
        let at = entry(table, present).map_or(span.clone(), |(key, _)| key.span());
        self.push(
            Diagnostic::error(
                DiagCode::MissingKey,
                join("listen", needed),
                format!("`{present}` needs `{needed}` in `[listen]`"),
            )
            .at(at)
            .with_help(format!(
                "add `{needed} = ...` to `[listen]`, or remove `{present}`"
            )),
        );
    }

    /// An `Origin` as a browser sends it: a scheme and a host, nothing more.
    fn check_origin(&mut self, text: &str, at: Range<usize>, path: &str) {
        let rest = text
            .strip_prefix("https://")
            .or_else(|| text.strip_prefix("http://"));
        let plain = rest.is_some_and(|host| {
            !host.is_empty()
                && !host.contains(['/', '?', '#', '@'])
                && !host.contains(char::is_whitespace)
        });
        if !plain {
            self.push(
                Diagnostic::error(
                    DiagCode::InvalidValue,
                    path,
                    format!("`{text}` is not an origin"),
                )
                .at(at)
                .with_help("an origin is a scheme and a host, with a port when it has one: `https://app.example.com`"),
            );
        }
    }
}

fn entry<'t, 'i>(table: &'t DeTable<'i>, key: &str) -> Option<(&'t Key<'i>, &'t Val<'i>)> {
    table
        .iter()
        .find(|(found, _)| found.get_ref().as_ref() == key)
}

fn join(path: &str, key: &str) -> String {
    let key = quote_key(key);
    if path.is_empty() {
        key
    } else {
        format!("{path}.{key}")
    }
}

/// A key as TOML would write it in a dotted path: bare when it can be.
fn quote_key(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '-');
    if bare {
        key.to_owned()
    } else {
        format!("{key:?}")
    }
}

fn article(type_name: &str) -> String {
    match type_name.chars().next() {
        Some('a' | 'e' | 'i' | 'o' | 'u') => format!("an {type_name}"),
        _ => format!("a {type_name}"),
    }
}

fn lowercase_first(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn server_name_problem(name: &str, separator: &str) -> Option<String> {
    if name.is_empty() {
        return Some("is empty".to_owned());
    }
    if name.chars().count() > 64 {
        return Some("is longer than 64 characters".to_owned());
    }
    if !name
        .chars()
        .all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '-')
    {
        return Some("may only hold letters, digits, `_` and `-`".to_owned());
    }
    if name.contains(separator) {
        return Some(format!(
            "contains the separator `{separator}`, so prefixed tool names would be ambiguous"
        ));
    }
    None
}

/// The two servers, shorter prefix first, when a host-facing name could
/// belong to both: one's name and separator begin the other's.
fn colliding<'a>(one: &'a str, other: &'a str, separator: &str) -> Option<(&'a str, &'a str)> {
    let (shorter, longer) = if one.len() <= other.len() {
        (one, other)
    } else {
        (other, one)
    };
    let longer_prefix = format!("{longer}{separator}");
    let shorter_prefix = format!("{shorter}{separator}");
    (one != other && longer_prefix.starts_with(&shorter_prefix)).then_some((shorter, longer))
}

/// "did you mean" for a near miss, else the list of what is allowed.
fn help_one_of(found: &str, allowed: &[&str]) -> String {
    let closest = allowed
        .iter()
        .map(|candidate| (edit_distance(found, candidate), *candidate))
        .filter(|(distance, candidate)| *distance <= candidate.len().max(found.len()) / 3 + 1)
        .min();
    match closest {
        Some((_, candidate)) => format!("did you mean `{candidate}`?"),
        None if allowed.is_empty() => "remove it".to_owned(),
        None => format!(
            "expected one of {}",
            allowed
                .iter()
                .map(|name| format!("`{name}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Levenshtein distance over characters.
fn edit_distance(left: &str, right: &str) -> usize {
    let right: Vec<char> = right.chars().collect();
    let mut previous: Vec<usize> = (0..=right.len()).collect();
    for (i, lc) in left.chars().enumerate() {
        let mut current = Vec::with_capacity(right.len() + 1);
        current.push(i + 1);
        for (j, rc) in right.iter().enumerate() {
            let substitute = previous.get(j).copied().unwrap_or(0) + usize::from(lc != *rc);
            let delete = previous.get(j + 1).copied().unwrap_or(0) + 1;
            let insert = current.last().copied().unwrap_or(0) + 1;
            current.push(substitute.min(delete).min(insert));
        }
        previous = current;
    }
    previous.last().copied().unwrap_or(0)
}
