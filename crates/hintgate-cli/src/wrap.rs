//! `hintgate wrap` and `hintgate unwrap`: route the servers of the hosts'
//! MCP configs through `hintgate run`, and give back the original entries.
//!
//! A rewrite touches only the chosen entries (span edits, see
//! `hosts::edit`), writes a backup next to the file first, never over an
//! earlier one, and replaces the file atomically with its permissions kept.
//! What `unwrap` needs is recorded in the state directory
//! (`wrapped.json`): for each wrapped entry, its region's text before and
//! after, so unwrap restores exactly the original bytes, and refuses an
//! entry that was edited since.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::args::{SandboxSuggestArgs, TrustArg, UnwrapArgs, WrapArgs};
use crate::exit::Exit;
use crate::hosts::edit::{self, WrapSpec};
use crate::hosts::{self, DiscoveryEnv, Entry, Host, Location};
use crate::load::InputError;
use crate::output;

/// The record of wrapped entries, in the state directory.
const RECORD_FILE: &str = "wrapped.json";

/// What `wrap` changed, so `unwrap` can undo it.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Records {
    /// The format of this file.
    version: u32,
    /// One per wrapped entry.
    entries: Vec<Record>,
}

/// One wrapped entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    /// The config file (symlinks resolved).
    config: PathBuf,
    host: String,
    scope: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    project: Option<String>,
    server: String,
    /// The entry's region before wrapping.
    original: String,
    /// The same region after.
    wrapped: String,
    /// The backup written before the change.
    backup: PathBuf,
}

/// A config file of a chosen host, read and parsed.
struct ConfigFile {
    location: Location,
    /// The file to write (symlinks resolved).
    real_path: PathBuf,
    text: String,
}

/// Runs `hintgate wrap`.
pub fn wrap(args: &WrapArgs) -> Result<Exit> {
    let env = discovery_env()?;
    let files = read_configs(&env, &args.host)?;
    let hintgate = std::env::current_exe()
        .and_then(fs::canonicalize)
        .context("cannot find the path of the running hintgate")?;
    let spec = WrapSpec {
        hintgate: hintgate.display().to_string(),
        trust: args.trust.map(|trust| match trust {
            TrustArg::Trusted => "trusted",
            TrustArg::Untrusted => "untrusted",
        }),
        extra: Vec::new(),
    };
    let state_dir = crate::state::state_dir(args.state_dir.as_deref())?;
    let mut records = load_records(&state_dir)?;
    let mut report = String::new();
    let mut matched = false;
    let verb = if args.dry_run {
        "would wrap"
    } else {
        "wrapped"
    };
    for file in files {
        let shown = hosts::display_path(&file.location.path, &env.home);
        let mut text = file.text.clone();
        let mut new_records = Vec::new();
        for entry in parse(&file, &file.text)? {
            if !chosen(&args.server, &entry.name) {
                continue;
            }
            matched = true;
            let label = label(file.location.host, &entry);
            if entry.transport.is_hintgate() {
                report.push_str(&format!("already wrapped  {label}  {shown}\n"));
                continue;
            }
            // The text changes with every entry wrapped: find it again.
            let Some(current) = find(&parse(&file, &text)?, &entry) else {
                bail!(
                    "`{shown}`: lost track of `{}` while rewriting it",
                    entry.name
                );
            };
            let mut spec = spec.clone();
            let mut table = None;
            if args.sandbox
                && let hosts::Transport::Stdio {
                    command,
                    args: argv,
                    ..
                } = &entry.transport
            {
                let mut suggested = hintgate_sandbox::launch::suggest(argv, &args.write);
                if args.prepare_on_start {
                    suggested.prepare = prepare_for(command, argv);
                }
                spec.extra = sandbox_flags(&suggested);
                table = Some(hintgate_sandbox::launch::table_toml(
                    &entry.name,
                    &suggested,
                ));
            }
            match edit::wrap(&text, &current, &spec) {
                Ok(rewrite) => {
                    report.push_str(&format!("{verb}  {label}  {shown}\n"));
                    if let Some(table) = &table {
                        for line in table.lines() {
                            report.push_str(&format!("    {line}\n"));
                        }
                    }
                    new_records.push(record(&file, &entry, &rewrite));
                    text = rewrite.text;
                }
                Err(reason) => {
                    report.push_str(&format!("skipped  {label}  {shown}: {reason}\n"));
                }
            }
        }
        if text == file.text || args.dry_run {
            continue;
        }
        check_wrapped(&file, &text, &new_records)?;
        unchanged_since_read(&file)?;
        let backup = backup(&file.real_path, file.text.as_bytes())?;
        report.push_str(&format!(
            "backup  {}\n",
            hosts::display_path(&backup, &env.home)
        ));
        for mut record in new_records {
            record.backup = backup.clone();
            records.entries.retain(|old| !same_entry(old, &record));
            records.entries.push(record);
        }
        // The record is durable before the config changes, so a wrapped
        // entry always has what unwrap needs.
        save_records(&state_dir, &records)?;
        write_atomic(&file.real_path, text.as_bytes())
            .with_context(|| format!("cannot write `{}`", file.real_path.display()))?;
    }
    if !matched && !args.server.is_empty() {
        return Err(no_such_server(&args.server).into());
    }
    if report.is_empty() {
        report.push_str("no MCP servers found in the hosts' configs\n");
    }
    output::out(&report)?;
    Ok(Exit::Success)
}

/// The `hintgate run` flags that give a wrapped server `table`.
fn sandbox_flags(table: &hintgate_policy::config::SandboxConfig) -> Vec<String> {
    let mut flags = vec!["--sandbox".to_owned()];
    for path in &table.read {
        flags.extend(["--sandbox-read".to_owned(), path.clone()]);
    }
    for path in &table.write {
        flags.extend(["--sandbox-write".to_owned(), path.clone()]);
    }
    if table.prepare == hintgate_policy::config::Prepare::OnStart {
        flags.extend(["--sandbox-prepare".to_owned(), "on-start".to_owned()]);
    }
    flags
}

/// `prepare = "on-start"` for a line whose launcher installs a package
/// (not a `uv run` project, which is synced by hand), else the default.
fn prepare_for(command: &str, args: &[String]) -> hintgate_policy::config::Prepare {
    match hintgate_sandbox::launch::launcher_line(command, args) {
        Some(line) if line.ecosystem.is_some() => hintgate_policy::config::Prepare::OnStart,
        _ => hintgate_policy::config::Prepare::ByHand,
    }
}

/// Runs `hintgate sandbox suggest SERVER`: the sandbox table `hintgate wrap
/// --sandbox` would give each host entry of that name, changing nothing.
pub fn suggest(args: &SandboxSuggestArgs) -> Result<Exit> {
    let env = discovery_env()?;
    let files = read_configs(&env, &args.host)?;
    let mut out = String::new();
    let mut matched = false;
    for file in files {
        let shown = hosts::display_path(&file.location.path, &env.home);
        for entry in parse(&file, &file.text)? {
            if entry.name != args.server {
                continue;
            }
            matched = true;
            let label = label(file.location.host, &entry);
            match &entry.transport {
                hosts::Transport::Stdio { command, args: argv, .. } => {
                    let mut table = hintgate_sandbox::launch::suggest(argv, &args.write);
                    if args.prepare_on_start {
                        table.prepare = prepare_for(command, argv);
                    }
                    out.push_str(&format!("# {label}  {shown}\n"));
                    if let Some(line) = hintgate_sandbox::launch::launcher_line(command, argv)
                        && table.prepare != hintgate_policy::config::Prepare::OnStart
                    {
                        out.push_str(&format!(
                            "# `{}` starts {}: run `hintgate sandbox prepare {} --config FILE` once (or, for a package, add `prepare = \"on-start\"`) so nothing is fetched inside the sandbox\n",
                            line.launcher,
                            line.spec,
                            entry.name
                        ));
                    }
                    out.push_str(&hintgate_sandbox::launch::table_toml(&entry.name, &table));
                    out.push('\n');
                }
                _ => out.push_str(&format!(
                    "# {label}  {shown}: reached by URL, it runs elsewhere; no sandbox of this machine confines it\n\n"
                )),
            }
        }
    }
    if !matched {
        return Err(no_such_server(std::slice::from_ref(&args.server)).into());
    }
    output::out(&out)?;
    Ok(Exit::Success)
}

/// Runs `hintgate unwrap`.
pub fn unwrap(args: &UnwrapArgs) -> Result<Exit> {
    let env = discovery_env()?;
    let files = read_configs(&env, &args.host)?;
    let state_dir = crate::state::state_dir(args.state_dir.as_deref())?;
    let mut records = load_records(&state_dir)?;
    let mut report = String::new();
    let mut matched = false;
    let mut failed = false;
    let verb = if args.dry_run {
        "would restore"
    } else {
        "restored"
    };
    for file in files {
        let shown = hosts::display_path(&file.location.path, &env.home);
        let mut text = file.text.clone();
        let mut restored = Vec::new();
        for entry in parse(&file, &file.text)? {
            if !chosen(&args.server, &entry.name) {
                continue;
            }
            matched = true;
            if !entry.transport.is_hintgate() {
                continue;
            }
            let label = label(file.location.host, &entry);
            let wanted = record(
                &file,
                &entry,
                &edit::Rewrite {
                    text: String::new(),
                    original: String::new(),
                    wrapped: String::new(),
                },
            );
            let Some(found) = records
                .entries
                .iter()
                .find(|old| same_entry(old, &wanted))
                .cloned()
            else {
                // Wrapped by hand, or with another state directory: there is
                // nothing exact to restore. Only a server named on the
                // command line makes that a failure.
                let named = !args.server.is_empty();
                failed |= named;
                report.push_str(&format!(
                    "{}  {label}  {shown}: `{}` has no record of it before it was wrapped; edit it by hand or restore a backup next to the file\n",
                    if named { "not restored" } else { "left as is" },
                    state_dir.join(RECORD_FILE).display()
                ));
                continue;
            };
            let Some(current) = find(&parse(&file, &text)?, &entry) else {
                bail!(
                    "`{shown}`: lost track of `{}` while rewriting it",
                    entry.name
                );
            };
            match edit::unwrap(&text, &current, &found.original, &found.wrapped) {
                Ok(new_text) => {
                    report.push_str(&format!("{verb}  {label}  {shown}\n"));
                    text = new_text;
                    restored.push(found);
                }
                Err(reason) => {
                    failed = true;
                    report.push_str(&format!(
                        "not restored  {label}  {shown}: {reason}; its backup is `{}`\n",
                        found.backup.display()
                    ));
                }
            }
        }
        if text == file.text || args.dry_run {
            continue;
        }
        if parse(&file, &text).is_err() {
            bail!(
                "`{shown}`: restoring the entries would leave a file that does not parse; nothing was changed"
            );
        }
        unchanged_since_read(&file)?;
        let backup = backup(&file.real_path, file.text.as_bytes())?;
        report.push_str(&format!(
            "backup  {}\n",
            hosts::display_path(&backup, &env.home)
        ));
        write_atomic(&file.real_path, text.as_bytes())
            .with_context(|| format!("cannot write `{}`", file.real_path.display()))?;
        records
            .entries
            .retain(|old| !restored.iter().any(|done| same_entry(old, done)));
        save_records(&state_dir, &records)?;
    }
    if !matched && !args.server.is_empty() {
        return Err(no_such_server(&args.server).into());
    }
    if report.is_empty() {
        report.push_str("no wrapped MCP servers found in the hosts' configs\n");
    }
    output::out(&report)?;
    Ok(if failed { Exit::Error } else { Exit::Success })
}

fn discovery_env() -> Result<DiscoveryEnv> {
    DiscoveryEnv::from_process()
        .context("cannot find the home directory (HOME) or the current directory")
}

/// Every existing config file of the chosen hosts, parsed. A file that
/// cannot be read or parsed stops everything before anything is written.
fn read_configs(env: &DiscoveryEnv, chosen_hosts: &[Host]) -> Result<Vec<ConfigFile>> {
    let mut files = Vec::new();
    let mut problems = Vec::new();
    for location in hosts::locations(env) {
        if !chosen_hosts.is_empty() && !chosen_hosts.contains(&location.host) {
            continue;
        }
        let bytes = match fs::read(&location.path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
            Err(error) => {
                problems.push(format!(
                    "cannot read `{}`: {error}",
                    location.path.display()
                ));
                continue;
            }
        };
        let Ok(text) = String::from_utf8(bytes) else {
            problems.push(format!("`{}` is not UTF-8 text", location.path.display()));
            continue;
        };
        if let Err(error) = hosts::entries(&location, &text) {
            problems.push(format!(
                "`{}` does not parse: line {}, column {}: {}",
                location.path.display(),
                error.line,
                error.column,
                error.message
            ));
            continue;
        }
        let real_path = fs::canonicalize(&location.path)
            .with_context(|| format!("cannot resolve `{}`", location.path.display()))?;
        files.push(ConfigFile {
            location,
            real_path,
            text,
        });
    }
    if !problems.is_empty() {
        return Err(InputError(format!("{}; nothing was changed", problems.join("; "))).into());
    }
    Ok(files)
}

fn parse(file: &ConfigFile, text: &str) -> Result<Vec<Entry>> {
    hosts::entries(&file.location, text).map_err(|error| {
        anyhow::anyhow!(
            "`{}` does not parse after rewriting it: line {}, column {}: {}; nothing was changed",
            file.location.path.display(),
            error.line,
            error.column,
            error.message
        )
    })
}

/// The wrapped text must parse, and every entry wrapped in it must now run
/// through hintgate: never write a file the host might not read.
fn check_wrapped(file: &ConfigFile, text: &str, new_records: &[Record]) -> Result<()> {
    let entries = parse(file, text)?;
    for record in new_records {
        let wrapped = entries.iter().any(|entry| {
            entry.name == record.server
                && entry.project == record.project
                && entry.transport.is_hintgate()
        });
        if !wrapped {
            bail!(
                "`{}`: wrapping `{}` did not give a hintgate entry; nothing was changed",
                file.location.path.display(),
                record.server
            );
        }
    }
    Ok(())
}

/// Hosts rewrite their own configs (Claude Code writes `~/.claude.json`
/// while it runs): a file that changed since it was read is not replaced.
fn unchanged_since_read(file: &ConfigFile) -> Result<()> {
    let now = fs::read(&file.real_path)
        .with_context(|| format!("cannot read `{}`", file.real_path.display()))?;
    if now != file.text.as_bytes() {
        bail!(
            "`{}` changed while hintgate was rewriting it; nothing was written to it, run the command again",
            file.location.path.display()
        );
    }
    Ok(())
}

fn find(entries: &[Entry], wanted: &Entry) -> Option<Entry> {
    entries
        .iter()
        .find(|entry| {
            entry.name == wanted.name
                && entry.scope == wanted.scope
                && entry.project == wanted.project
        })
        .cloned()
}

fn chosen(servers: &[String], name: &str) -> bool {
    servers.is_empty() || servers.iter().any(|server| server == name)
}

fn label(host: Host, entry: &Entry) -> String {
    let scope = match &entry.project {
        Some(project) => format!("{} {project}", entry.scope.as_str()),
        None => entry.scope.as_str().to_owned(),
    };
    format!("{} ({scope})  {}", host.as_str(), entry.name)
}

fn no_such_server(servers: &[String]) -> InputError {
    let names: Vec<String> = servers.iter().map(|name| format!("`{name}`")).collect();
    InputError(format!(
        "no server named {} in the chosen hosts' configs",
        names.join(" or ")
    ))
}

fn record(file: &ConfigFile, entry: &Entry, rewrite: &edit::Rewrite) -> Record {
    Record {
        config: file.real_path.clone(),
        host: file.location.host.as_str().to_owned(),
        scope: entry.scope.as_str().to_owned(),
        project: entry.project.clone(),
        server: entry.name.clone(),
        original: rewrite.original.clone(),
        wrapped: rewrite.wrapped.clone(),
        backup: PathBuf::new(),
    }
}

fn same_entry(left: &Record, right: &Record) -> bool {
    left.config == right.config
        && left.scope == right.scope
        && left.project == right.project
        && left.server == right.server
}

fn load_records(state_dir: &Path) -> Result<Records> {
    let path = state_dir.join(RECORD_FILE);
    match fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text)
            .with_context(|| format!("the wrap record `{}` is damaged", path.display())),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(Records {
            version: 1,
            entries: Vec::new(),
        }),
        Err(error) => Err(error).with_context(|| format!("cannot read `{}`", path.display())),
    }
}

fn save_records(state_dir: &Path, records: &Records) -> Result<()> {
    fs::create_dir_all(state_dir).with_context(|| {
        format!(
            "cannot create the state directory `{}`",
            state_dir.display()
        )
    })?;
    let path = state_dir.join(RECORD_FILE);
    let text = serde_json::to_string_pretty(records).context("cannot encode the wrap record")?;
    if !path.exists() {
        // Entries hold configs' text, which may hold secrets: only the user
        // reads the record, as only the user reads `~/.claude.json`.
        create_private(&path)?;
    }
    write_atomic(&path, text.as_bytes())
        .with_context(|| format!("cannot write `{}`", path.display()))
}

fn create_private(path: &Path) -> Result<()> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
        .open(path)
        .map(drop)
        .with_context(|| format!("cannot create `{}`", path.display()))
}

/// Copies `bytes` (the file's current text) to a new
/// `<file>.hintgate-backup-<UTC time>` next to it, never over an earlier
/// backup, with the file's permissions.
fn backup(path: &Path, bytes: &[u8]) -> Result<PathBuf> {
    let stamp: String = crate::when::utc(crate::when::unix_now())
        .chars()
        .filter(|ch| *ch != '-' && *ch != ':')
        .collect();
    let permissions = fs::metadata(path)
        .with_context(|| format!("cannot read `{}`", path.display()))?
        .permissions();
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    for attempt in 0..1000_u32 {
        let suffix = if attempt == 0 {
            String::new()
        } else {
            format!("-{attempt}")
        };
        let candidate = path.with_file_name(format!("{name}.hintgate-backup-{stamp}{suffix}"));
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = match options.open(&candidate) {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(error) => {
                return Err(error)
                    .with_context(|| format!("cannot write the backup `{}`", candidate.display()));
            }
        };
        file.write_all(bytes)
            .and_then(|()| file.sync_all())
            .and_then(|()| file.set_permissions(permissions.clone()))
            .with_context(|| format!("cannot write the backup `{}`", candidate.display()))?;
        return Ok(candidate);
    }
    bail!("too many backups of `{}` in one second", path.display())
}

/// Replaces `path` with `bytes` through a temporary file in the same
/// directory and a rename, keeping the file's permissions.
fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let permissions = fs::metadata(path)?.permissions();
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = path.with_file_name(format!(".{name}.hintgate-{}.tmp", std::process::id()));
    let result = (|| {
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&temp)?;
        file.write_all(bytes)?;
        file.set_permissions(permissions)?;
        file.sync_all()?;
        fs::rename(&temp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backups_never_overwrite_each_other_and_keep_the_permissions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mcp.json");
        fs::write(&path, "{}").unwrap();
        let first = backup(&path, b"one").unwrap();
        let second = backup(&path, b"two").unwrap();
        assert_ne!(first, second);
        assert_eq!(fs::read(&first).unwrap(), b"one");
        assert_eq!(fs::read(&second).unwrap(), b"two");
        assert_eq!(
            fs::metadata(&first).unwrap().permissions(),
            fs::metadata(&path).unwrap().permissions()
        );
    }
}
