//! `hintgate lint`: connect to one server, check its tool definitions, report.
//!
//! [`lint_server`] is the whole check of one server (probe, checks,
//! suppressions) without any printing, so that a command that checks many
//! servers can call it for each.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use hintgate_lint::{Outcome, Report, Suppressions};
use hintgate_policy::config::Transport;
use hintgate_proxy::probe::{self, Options, ProbeError, Probed, Target};

use crate::args::{FormatArg, LintArgs};
use crate::exit::Exit;
use crate::load::InputError;
use crate::output;

/// The default suppressions file, looked for in the current directory.
pub const DEFAULT_CONFIG_FILE: &str = "hintgate.lint.toml";

/// What linting one server found.
#[derive(Debug)]
pub struct ServerLint {
    /// What the probe learned: tools, capability-dependent listings, calls.
    pub probed: Probed,
    /// The findings, and the suppressed ones.
    pub outcome: Outcome,
}

/// Lints one server: probes it, runs every check, applies `suppressions`.
///
/// # Errors
///
/// [`ProbeError`] when the server cannot be started, reached or listed in time.
pub async fn lint_server(
    target: &Target,
    options: Options,
    suppressions: &Suppressions,
) -> Result<ServerLint, ProbeError> {
    let probed = probe::probe(target, options).await?;
    let outcome = hintgate_lint::lint(&probed.listing, suppressions);
    Ok(ServerLint { probed, outcome })
}

/// Runs `hintgate lint`.
pub fn run(args: &LintArgs) -> Result<Exit> {
    init_logging();
    let (target, server) = target(args)?;
    let (config_path, suppressions) = suppressions(args.config_file.as_deref())?;
    let options = Options {
        timeout: Duration::from_secs(args.timeout_s.max(1)),
        call_read_only: args.call_read_only,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    let linted = runtime.block_on(lint_server(&target, options, &suppressions));
    // Child processes are killed with their handles; let the runtime finish that.
    runtime.shutdown_timeout(Duration::from_secs(1));
    let linted = match linted {
        Ok(linted) => linted,
        Err(error) => {
            output::err(&format!("error: cannot lint `{server}`: {error}\n"))?;
            return Ok(Exit::Error);
        }
    };
    let report = Report {
        server: &server,
        n_tools: linted.probed.listing.tools.len(),
        findings: &linted.outcome.findings,
        suppressed: &linted.outcome.suppressed,
        calls: &linted.probed.listing.calls,
    };
    match args.format {
        FormatArg::Table => output::out(&report.table())?,
        FormatArg::Json => output::out(&format!(
            "{}\n",
            serde_json::to_string_pretty(&report.json())?
        ))?,
        FormatArg::Sarif => {
            let artifact = args.sarif_artifact.clone().unwrap_or_else(|| {
                config_path.as_ref().map_or_else(
                    || DEFAULT_CONFIG_FILE.to_owned(),
                    |path| path.display().to_string(),
                )
            });
            output::out(&format!(
                "{}\n",
                serde_json::to_string_pretty(&report.sarif(&artifact))?
            ))?;
        }
    }
    Ok(if report.fails(args.fail_on.into()) {
        Exit::Findings
    } else {
        Exit::Success
    })
}

/// Logs go to stderr, warnings and worse unless `RUST_LOG` says otherwise:
/// a server's own log lines would bury the findings.
pub fn init_logging() {
    crate::output::init_logging("warn");
}

/// The server to lint and how to name it in the report.
fn target(args: &LintArgs) -> Result<(Target, String), InputError> {
    if let (Some(name), Some(config)) = (&args.server, &args.config) {
        return configured(config, name);
    }
    match (&args.url, args.command.split_first()) {
        (Some(url), _) => {
            let mut headers = BTreeMap::new();
            for header in &args.headers {
                // Whichever separator comes first: `Name: a=b` and `Name=a:b` both work.
                let separator = header.find([':', '=']);
                let Some((name, value)) =
                    separator.and_then(|idx| Some((header.get(..idx)?, header.get(idx + 1..)?)))
                else {
                    return Err(InputError(format!(
                        "header `{header}` is not `Name: value` or `Name=value`"
                    )));
                };
                headers.insert(name.trim().to_owned(), value.trim().to_owned());
            }
            Ok((
                Target::Http {
                    url: url.clone(),
                    headers,
                },
                url.clone(),
            ))
        }
        (None, Some((command, rest))) => Ok((
            Target::Stdio {
                command: command.clone(),
                args: rest.to_vec(),
                env: BTreeMap::new(),
                sandbox: None,
            },
            args.command.join(" "),
        )),
        (None, None) => Err(InputError(
            "give the server's command after `--`, or its `--url`".to_owned(),
        )),
    }
}

/// The server `name` of the gateway's configuration `path`, as `hintgate
/// run` would start it: its variables expanded, its `env`, its sandbox.
fn configured(path: &Path, name: &str) -> Result<(Target, String), InputError> {
    let loaded = crate::load::config(path)?;
    let Some(config) = loaded.config.clone() else {
        return Err(InputError(loaded.render()));
    };
    let mut config = crate::run::expand(config, &crate::load::ProcessEnv)?;
    let Some(server) = config.servers.remove(name) else {
        return Err(InputError(format!(
            "unknown server `{name}` in {}",
            path.display()
        )));
    };
    let target = match server.transport {
        Transport::Stdio { command, args, env } => Target::Stdio {
            command,
            args,
            env,
            sandbox: server.sandbox,
        },
        Transport::Http { url, headers } => Target::Http { url, headers },
    };
    Ok((target, name.to_owned()))
}

/// The suppressions: from `--config-file`, else from `hintgate.lint.toml`
/// in the current directory when there is one, else none.
fn suppressions(explicit: Option<&Path>) -> Result<(Option<PathBuf>, Suppressions), InputError> {
    let path = match explicit {
        Some(path) => path.to_path_buf(),
        None => {
            let default = PathBuf::from(DEFAULT_CONFIG_FILE);
            if !default.exists() {
                return Ok((None, Suppressions::default()));
            }
            default
        }
    };
    let text = crate::load::text(&path, "lint config")?;
    let parsed = Suppressions::parse(&text)
        .map_err(|error| InputError(format!("{}: {error}", path.display())))?;
    Ok((Some(path), parsed))
}
