//! `hintgate scan`: every server of every host's MCP config, linted, in one
//! table.
//!
//! Discovery ([`hosts::discover`]) finds the servers; each one (the server
//! behind a `hintgate run` wrapper when it is already wrapped) is linted
//! with [`lint::lint_server`], a few at a time, each under its own deadline.
//! The work is mostly waiting on child processes, so one thread runs them
//! all. Scan only reads: it writes no file and opens no store.

use std::collections::{BTreeMap, HashMap};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use hintgate_lint::{Finding, Severity, Suppressions};
use hintgate_policy::Tool;
use hintgate_policy::tool::{EffectiveHints, SandboxProof, Trust};
use hintgate_proxy::probe::{Options, Target};
use serde::Serialize;
use serde_json::Value;
use tokio::task::JoinSet;

use crate::args::ScanArgs;
use crate::exit::Exit;
use crate::hosts::{self, DiscoveredServer, DiscoveryEnv, FileProblem, Transport};
use crate::lint;
use crate::load::InputError;
use crate::output;

/// Extra time a check gets beyond the probe's own deadline before it is
/// abandoned: the probe stops its servers gracefully, which takes a moment.
const GRACE: Duration = Duration::from_secs(5);

/// What `hintgate scan --json` prints.
#[derive(Debug, Serialize)]
struct ScanReport {
    /// Every server, sorted by host, config path, scope and name.
    servers: Vec<Row>,
    /// Config files that exist but could not be read or parsed.
    config_errors: Vec<FileProblem>,
    /// Config files found but not read by this version.
    skipped_configs: Vec<FileProblem>,
}

/// One server and what checking it found.
#[derive(Debug, Serialize)]
struct Row {
    /// Where the server is defined and how its host starts it.
    #[serde(flatten)]
    server: DiscoveredServer,
    /// The server that was checked: the one behind the wrapper, if wrapped.
    checked: Transport,
    /// Whether it was checked.
    status: Status,
    /// Why it could not be checked, for the other statuses.
    error: Option<String>,
    /// How many tools it lists (with and without the optional capabilities).
    tools: Option<usize>,
    /// What the tools declare about themselves.
    hints: Option<HintCounts>,
    /// How many findings of each severity.
    finding_counts: Option<SeverityCounts>,
    /// The findings.
    findings: Vec<Finding>,
    /// The protocol version the server spoke.
    protocol_version: Option<String>,
}

/// How a server's check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Status {
    /// Listed and linted.
    Checked,
    /// Could not be started, reached or listed in time.
    Unreachable,
    /// Not a server scan can start (the legacy SSE transport, an editor
    /// extension's server, a gateway-mode `hintgate run`).
    NotChecked,
}

/// The tools of one server by their declared hints, with the spec's
/// defaults for the hints left implicit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
struct HintCounts {
    read_only: usize,
    write: usize,
    destructive: usize,
    open_world: usize,
}

/// Findings by severity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
struct SeverityCounts {
    error: usize,
    warning: usize,
    note: usize,
}

/// What checking one server gave.
#[derive(Debug)]
struct Checked {
    tools: usize,
    hints: HintCounts,
    findings: Vec<Finding>,
    protocol_version: String,
}

/// One line of progress on a terminal's stderr; nothing when it is piped.
#[derive(Debug)]
struct Progress {
    enabled: bool,
    total: usize,
    done: usize,
}

/// Runs `hintgate scan`.
pub fn run(args: &ScanArgs) -> Result<Exit> {
    lint::init_logging();
    let mut env = DiscoveryEnv::from_process()
        .context("cannot find the home directory (HOME) or the current directory")?;
    if let Some(project) = &args.project {
        if !project.is_dir() {
            return Err(InputError(format!(
                "`{}` is not a directory (--project)",
                project.display()
            ))
            .into());
        }
        env.project = std::path::absolute(project)
            .with_context(|| format!("cannot resolve `{}`", project.display()))?;
    }
    let discovery = hosts::discover(&env);
    let mut servers = discovery.servers;
    servers.sort_by(|left, right| {
        (
            left.host.as_str(),
            &left.config_path,
            left.scope,
            &left.project,
            &left.name,
        )
            .cmp(&(
                right.host.as_str(),
                &right.config_path,
                right.scope,
                &right.project,
                &right.name,
            ))
    });

    let options = Options {
        timeout: Duration::from_secs(args.timeout_s.max(1)),
        call_read_only: false,
    };
    let mut jobs = Vec::new();
    let mut not_checked = BTreeMap::new();
    for (idx, server) in servers.iter().enumerate() {
        match target(&server.transport).and_then(|target| expand_target(target, &env)) {
            Ok(target) => jobs.push((idx, target)),
            Err(reason) => {
                not_checked.insert(idx, reason);
            }
        }
    }
    let mut progress = Progress {
        enabled: std::io::stderr().is_terminal(),
        total: jobs.len(),
        done: 0,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    let n_jobs = usize::try_from(args.jobs).unwrap_or(1).max(1);
    let mut results = runtime.block_on(check_all(jobs, n_jobs, options, &mut progress));
    // Child processes are killed with their handles; let the runtime finish that.
    runtime.shutdown_timeout(Duration::from_secs(1));
    progress.finish();

    let rows: Vec<Row> = servers
        .into_iter()
        .enumerate()
        .map(|(idx, server)| {
            let checked = server.transport.upstream();
            let (status, error, result) = match (not_checked.remove(&idx), results.remove(&idx)) {
                (Some(reason), _) => (Status::NotChecked, Some(reason), None),
                (None, Some(Ok(result))) => (Status::Checked, None, Some(result)),
                (None, Some(Err(error))) => (Status::Unreachable, Some(error), None),
                (None, None) => (
                    Status::Unreachable,
                    Some("the check did not finish".to_owned()),
                    None,
                ),
            };
            Row {
                server,
                checked,
                status,
                error,
                tools: result.as_ref().map(|result| result.tools),
                hints: result.as_ref().map(|result| result.hints),
                finding_counts: result
                    .as_ref()
                    .map(|result| severity_counts(&result.findings)),
                protocol_version: result
                    .as_ref()
                    .map(|result| result.protocol_version.clone()),
                findings: result.map(|result| result.findings).unwrap_or_default(),
            }
        })
        .collect();
    let failed =
        !discovery.problems.is_empty() || rows.iter().any(|row| row.status == Status::Unreachable);
    let report = ScanReport {
        servers: rows,
        config_errors: discovery.problems,
        skipped_configs: discovery.skipped,
    };
    if args.json {
        output::out(&format!("{}\n", serde_json::to_string_pretty(&report)?))?;
    } else {
        output::out(&table(&report, &env))?;
    }
    Ok(if failed { Exit::Error } else { Exit::Success })
}

/// What to lint for a host's entry: the server behind a `hintgate run`
/// wrapper, or the entry itself; or why it cannot be checked.
fn target(transport: &Transport) -> Result<Target, String> {
    let upstream = transport.upstream();
    if upstream.is_hintgate() {
        // Gateway mode: its servers are in its own config, and running it
        // would open its store.
        return Err("`hintgate run` without a server after `--` (gateway mode)".to_owned());
    }
    match upstream {
        // A host's entry has no sandbox table; a `hintgate run --config`
        // entry, whose servers may have one, is refused above.
        Transport::Stdio { command, args, env } => Ok(Target::Stdio {
            command,
            args,
            env,
            sandbox: None,
        }),
        Transport::Http { url, headers } => Ok(Target::Http { url, headers }),
        Transport::Sse { .. } => Err("the legacy SSE transport".to_owned()),
        Transport::Other { reason } => Err(reason),
    }
}

/// The target with the host's variable references expanded (`${VAR}`,
/// `${env:VAR}`, `${VAR:-default}`, `${workspaceFolder}`, `${userHome}`),
/// as the host would before starting it; or why it cannot be.
fn expand_target(target: Target, env: &DiscoveryEnv) -> Result<Target, String> {
    let lookup = |name: &str| std::env::var(name).ok();
    let one = |text: &str| hosts::vars::expand(text, &lookup, &env.project, &env.home);
    let map = |values: BTreeMap<String, String>| -> Result<BTreeMap<String, String>, String> {
        values
            .into_iter()
            .map(|(key, value)| Ok((key, one(&value)?)))
            .collect()
    };
    Ok(match target {
        Target::Stdio {
            command,
            args,
            env,
            sandbox,
        } => Target::Stdio {
            command: one(&command)?,
            args: args.iter().map(|arg| one(arg)).collect::<Result<_, _>>()?,
            env: map(env)?,
            sandbox,
        },
        Target::Http { url, headers } => Target::Http {
            url: one(&url)?,
            headers: map(headers)?,
        },
    })
}

/// Lints every job, at most `n_jobs` at a time; the result of each by its index.
async fn check_all(
    jobs: Vec<(usize, Target)>,
    n_jobs: usize,
    options: Options,
    progress: &mut Progress,
) -> BTreeMap<usize, Result<Checked, String>> {
    let mut results = BTreeMap::new();
    let mut running = JoinSet::new();
    let mut index_of = HashMap::new();
    let mut pending = jobs.into_iter();
    progress.show();
    loop {
        while running.len() < n_jobs {
            let Some((idx, target)) = pending.next() else {
                break;
            };
            let handle = running.spawn(check_one(target, options));
            index_of.insert(handle.id(), idx);
        }
        let Some(joined) = running.join_next_with_id().await else {
            break;
        };
        let (id, result) = match joined {
            Ok((id, result)) => (id, result),
            Err(error) => (error.id(), Err(format!("the check failed: {error}"))),
        };
        if let Some(idx) = index_of.remove(&id) {
            results.insert(idx, result);
        }
        progress.step();
    }
    results
}

/// Lints one server under its deadline.
async fn check_one(target: Target, options: Options) -> Result<Checked, String> {
    let suppressions = Suppressions::default();
    let linted = tokio::time::timeout(
        options.timeout + GRACE,
        lint::lint_server(&target, options, &suppressions),
    )
    .await;
    match linted {
        Ok(Ok(linted)) => Ok(Checked {
            tools: linted.probed.listing.tools.len(),
            hints: hint_counts(&linted.probed.listing.tools),
            findings: linted.outcome.findings,
            protocol_version: linted.probed.protocol_version,
        }),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err(format!("no answer within {} s", options.timeout.as_secs())),
    }
}

/// Counts the tools by their declared hints, the spec's defaults filling the
/// implicit ones: read-only `false`, destructive `true`, open-world `true`.
/// A tool that declares itself both read-only and destructive counts as a
/// destructive write; a definition that does not parse counts by the
/// defaults alone.
fn hint_counts(tools: &[Value]) -> HintCounts {
    let mut counts = HintCounts::default();
    for tool in tools {
        let declared = Tool::from_value(tool.clone())
            .map(|tool| tool.declared())
            .unwrap_or_default();
        let hints =
            EffectiveHints::derive(declared, Trust::Trusted, SandboxProof::default()).effective;
        if hints.read_only {
            counts.read_only += 1;
        } else {
            counts.write += 1;
        }
        if hints.destructive {
            counts.destructive += 1;
        }
        if hints.open_world {
            counts.open_world += 1;
        }
    }
    counts
}

fn severity_counts(findings: &[Finding]) -> SeverityCounts {
    let count = |severity| {
        findings
            .iter()
            .filter(|finding| finding.severity == severity)
            .count()
    };
    SeverityCounts {
        error: count(Severity::Error),
        warning: count(Severity::Warning),
        note: count(Severity::Note),
    }
}

/// The report for a terminal: one row per server, then the configs that
/// could not be read and a summary line.
fn table(report: &ScanReport, env: &DiscoveryEnv) -> String {
    let header = [
        "HOST",
        "SCOPE",
        "CONFIG",
        "SERVER",
        "WRAPPED",
        "TOOLS",
        "READ-ONLY",
        "WRITE",
        "DESTRUCTIVE",
        "OPEN-WORLD",
        "FINDINGS",
    ]
    .map(str::to_owned);
    let mut lines = vec![header];
    for row in &report.servers {
        let number = |value: Option<usize>| value.map_or_else(|| "-".to_owned(), |n| n.to_string());
        let hints = row.hints;
        let scope = match &row.server.project {
            Some(project) => format!(
                "{} {}",
                row.server.scope.as_str(),
                hosts::display_path(Path::new(project), &env.home)
            ),
            None => row.server.scope.as_str().to_owned(),
        };
        lines.push([
            row.server.host.as_str().to_owned(),
            scope,
            shown_path(&row.server.config_path, env),
            row.server.name.clone(),
            if row.server.wrapped { "yes" } else { "no" }.to_owned(),
            number(row.tools),
            number(hints.map(|hints| hints.read_only)),
            number(hints.map(|hints| hints.write)),
            number(hints.map(|hints| hints.destructive)),
            number(hints.map(|hints| hints.open_world)),
            findings_cell(row),
        ]);
    }
    let mut out = String::new();
    if report.servers.is_empty() {
        out.push_str("no MCP servers found in the hosts' configs\n");
    } else {
        out.push_str(&columns(&lines));
    }
    if !report.config_errors.is_empty() || !report.skipped_configs.is_empty() {
        out.push('\n');
    }
    for problem in &report.config_errors {
        out.push_str(&format!(
            "unreadable config: {} ({}): {}\n",
            shown_path(&problem.path, env),
            problem.host.as_str(),
            problem.message
        ));
    }
    for skipped in &report.skipped_configs {
        out.push_str(&format!(
            "not read: {} ({}): {}\n",
            shown_path(&skipped.path, env),
            skipped.host.as_str(),
            skipped.message
        ));
    }
    let count = |status| {
        report
            .servers
            .iter()
            .filter(|row| row.status == status)
            .count()
    };
    let n_configs = {
        let mut paths: Vec<&PathBuf> = report
            .servers
            .iter()
            .map(|row| &row.server.config_path)
            .collect();
        paths.sort();
        paths.dedup();
        paths.len()
    };
    out.push_str(&format!(
        "\n{} in {}: {} checked, {} unreachable, {} not checked",
        plural(report.servers.len(), "server"),
        plural(n_configs, "config"),
        count(Status::Checked),
        count(Status::Unreachable),
        count(Status::NotChecked),
    ));
    if !report.config_errors.is_empty() {
        out.push_str(&format!(
            ", {} unreadable",
            plural(report.config_errors.len(), "config")
        ));
    }
    out.push('\n');
    out
}

/// The findings column: counts by severity, or why the server was not checked.
fn findings_cell(row: &Row) -> String {
    match (row.status, &row.error, row.finding_counts) {
        (Status::Unreachable, error, _) => {
            format!("unreachable: {}", error.as_deref().unwrap_or("no answer"))
        }
        (Status::NotChecked, error, _) => format!(
            "not checked: {}",
            error.as_deref().unwrap_or("not a server scan can start")
        ),
        (Status::Checked, _, Some(counts)) => {
            let parts: Vec<String> = [
                (counts.error, "error"),
                (counts.warning, "warning"),
                (counts.note, "note"),
            ]
            .into_iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, word)| plural(n, word))
            .collect();
            if parts.is_empty() {
                "none".to_owned()
            } else {
                parts.join(", ")
            }
        }
        (Status::Checked, _, None) => "none".to_owned(),
    }
}

/// Left-aligned columns, two spaces apart; the last one is not padded.
fn columns<const N: usize>(lines: &[[String; N]]) -> String {
    let mut widths = [0_usize; N];
    for line in lines {
        for (width, cell) in widths.iter_mut().zip(line) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for line in lines {
        let mut text = String::new();
        for (idx, (cell, width)) in line.iter().zip(widths).enumerate() {
            if idx + 1 == N {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}  "));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    }
    out
}

/// A config path as a person reads it: `./...` under the project,
/// `~/...` under the home directory.
fn shown_path(path: &Path, env: &DiscoveryEnv) -> String {
    match path.strip_prefix(&env.project) {
        Ok(rest) => format!("./{}", rest.display()),
        Err(_) => hosts::display_path(path, &env.home),
    }
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

// === impl Progress ===

impl Progress {
    fn show(&self) {
        if self.enabled && self.total > 0 {
            let _ = output::err(&format!(
                "\r\x1b[2Kchecking servers: {} of {} done",
                self.done, self.total
            ));
        }
    }

    fn step(&mut self) {
        self.done += 1;
        self.show();
    }

    /// Clears the progress line, so the table starts on a clean line.
    fn finish(&self) {
        if self.enabled && self.total > 0 {
            let _ = output::err("\r\x1b[2K");
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn stdio(command: &str, args: &[&str]) -> Transport {
        Transport::Stdio {
            command: command.to_owned(),
            args: args.iter().map(|arg| (*arg).to_owned()).collect(),
            env: BTreeMap::from([("TOKEN".to_owned(), "secret".to_owned())]),
        }
    }

    #[test]
    fn a_wrapped_server_is_checked_behind_its_wrapper_and_a_gateway_never() {
        let wrapped = stdio(
            "/opt/bin/hintgate",
            &["run", "--name", "fs", "--", "npx", "-y", "server-fs"],
        );
        assert_eq!(
            target(&wrapped),
            Ok(Target::Stdio {
                command: "npx".to_owned(),
                args: vec!["-y".to_owned(), "server-fs".to_owned()],
                env: BTreeMap::from([("TOKEN".to_owned(), "secret".to_owned())]),
                sandbox: None,
            })
        );
        let gateway = stdio("hintgate", &["run", "--config", "hintgate.toml"]);
        assert!(target(&gateway).is_err_and(|reason| reason.contains("gateway mode")));
        let sse = Transport::Sse {
            url: "http://localhost/sse".to_owned(),
        };
        assert_eq!(target(&sse), Err("the legacy SSE transport".to_owned()));
    }

    #[test]
    fn implicit_hints_count_by_the_spec_defaults() {
        let tools = [
            // Nothing declared: a destructive, open-world write.
            json!({"name": "a", "inputSchema": {"type": "object"}}),
            // Read-only, the rest implicit: read-only and open-world.
            json!({"name": "b", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}),
            // A non-destructive, closed-world write.
            json!({"name": "c", "inputSchema": {"type": "object"},
                   "annotations": {"destructiveHint": false, "openWorldHint": false}}),
            // Read-only and destructive at once: a destructive write.
            json!({"name": "d", "inputSchema": {"type": "object"},
                   "annotations": {"readOnlyHint": true, "destructiveHint": true, "openWorldHint": false}}),
        ];
        assert_eq!(
            hint_counts(&tools),
            HintCounts {
                read_only: 1,
                write: 3,
                destructive: 2,
                open_world: 2,
            }
        );
    }
}
