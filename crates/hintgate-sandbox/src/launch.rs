//! Launchers resolved to what they run: `npx -y PKG`, `uvx PKG`, a virtual
//! environment's interpreter. A launcher would fetch its package at start,
//! which a sandbox without the network (or without the launcher's cache)
//! cannot do: the plan instead finds the package installed beforehand
//! (`hintgate sandbox prepare`), grants exactly its tree and its runtime,
//! and runs its entry point directly, so nothing is fetched inside.
//!
//! Resolution reads a few files and never starts a process; a command that
//! is neither a launcher nor a Python interpreter costs comparisons of its
//! name, and an interpreter two `stat` calls (is there a `pyvenv.cfg`).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::SandboxError;

pub use hintgate_policy::launcher::{
    Ecosystem, LauncherLine, first_operand, launcher_line, npm_name, split_spec,
};

/// What a launcher line was resolved to, for `hintgate sandbox explain`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Resolution {
    /// The launcher as the config names it (`npx`, `uvx`, `uv run`, or
    /// `virtual environment` for a venv's interpreter).
    pub launcher: String,
    /// The package it starts, when it starts one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub package: Option<String>,
    /// The installed version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Where the package (or the environment) is installed.
    pub installed: PathBuf,
    /// Why the plan runs what it runs.
    pub why: String,
}

/// A launcher line rewritten to what it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Launch {
    /// The program to run instead of the launcher (its name or path).
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Trees the server reads and executes beside its program's own: the
    /// virtual environment, the package's `node_modules`.
    pub trees: Vec<PathBuf>,
    /// What was resolved and why.
    pub resolution: Resolution,
}

/// What installs a launcher line's package outside the sandbox, with the
/// network: what `hintgate sandbox prepare` runs, and the gateway before a
/// confined start where the table says `prepare = "on-start"`.
///
/// It is built from the configuration alone: the launcher's own installer
/// (found beside the launcher the config names, else on the same `PATH`),
/// fixed words, and the package's registry name and version as the config
/// writes them. No shell reads it, nothing a server wrote reaches it, and
/// no code of the package runs outside the sandbox: npm is told to run no
/// install scripts, uv and pipx to build nothing (wheels only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Install {
    /// The installer, as found.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Whether it installs a registry package (`false` for `uv run`'s
    /// `uv sync` of a project, which runs the project's own build).
    pub package: bool,
}

impl Install {
    /// The command as one line, for the log and errors (`npm exec --yes
    /// ...`).
    #[must_use]
    pub fn describe(&self) -> String {
        let mut line = self.program.display().to_string();
        for arg in &self.args {
            line.push(' ');
            line.push_str(arg);
        }
        line
    }
}

/// Whether `spec` is a package as a registry names it (`name`,
/// `name@1.2.3`, `@scope/name@latest`; `name==1.2.3`), not a URL, a path or
/// a git repository, whose fetch could run code of its own.
fn registry_spec(ecosystem: Ecosystem, spec: &str) -> bool {
    let plain = |text: &str, extra: &[char]| {
        !text.is_empty()
            && !text.starts_with(['-', '.', '_'])
            && text
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || extra.contains(&ch))
    };
    match ecosystem {
        Ecosystem::Npm => {
            let name = npm_name(spec);
            let version = spec.get(name.len()..).unwrap_or_default();
            let unscoped = match name.strip_prefix('@') {
                Some(scoped) => match scoped.split_once('/') {
                    Some((scope, rest)) if plain(scope, &['-', '.', '_', '~']) => rest,
                    _ => return false,
                },
                None => name.as_str(),
            };
            plain(unscoped, &['-', '.', '_', '~'])
                && (version.is_empty()
                    || version.strip_prefix('@').is_some_and(|version| {
                        plain(
                            version,
                            &['-', '.', '+', '^', '~', '<', '>', '=', ' ', '|', '*'],
                        )
                    }))
        }
        Ecosystem::PyPi => {
            let (name, version) = match spec.split_once("==") {
                Some((name, version)) => (name, Some(version)),
                None => (spec, None),
            };
            plain(name, &['-', '.', '_'])
                && version.is_none_or(|version| plain(version, &['.', '-', '+', '!']))
        }
    }
}

/// The installer of a launcher line and its arguments; `search` is the
/// `PATH` the server gets (where its launcher is found).
///
/// # Errors
///
/// [`SandboxError::NotPrepared`] for a package spec that is not a
/// registry name and version (a URL, a path, a git repository): the sandbox
/// could not find what such a fetch installs, and the fetch itself could
/// run the package's code.
pub fn install(line: &LauncherLine, command: &str, search: &str) -> Result<Install, SandboxError> {
    if let Some(ecosystem) = line.ecosystem
        && !registry_spec(ecosystem, &line.spec)
    {
        return Err(not_prepared(
            line,
            format!(
                "`{}` is not a registry package name and version, which is all hintgate installs",
                line.spec
            ),
        ));
    }
    let (tool, args): (&str, Vec<String>) = match (line.ecosystem, line.launcher) {
        (Some(Ecosystem::Npm), _) => (
            "npm",
            vec![
                "exec".into(),
                "--yes".into(),
                "--ignore-scripts".into(),
                format!("--package={}", line.spec),
                "-c".into(),
                "true".into(),
            ],
        ),
        (Some(Ecosystem::PyPi), "pipx run") => (
            "pipx",
            vec![
                "install".into(),
                "--force".into(),
                "--pip-args=--only-binary=:all:".into(),
                requirement(&line.spec),
            ],
        ),
        (Some(Ecosystem::PyPi), _) => (
            "uv",
            vec![
                "tool".into(),
                "install".into(),
                "--no-build".into(),
                requirement(&line.spec),
            ],
        ),
        (None, _) => {
            let mut sync = vec!["sync".to_owned()];
            if !line.spec.is_empty() {
                sync.push("--project".into());
                sync.push(line.spec.clone());
            }
            ("uv", sync)
        }
    };
    Ok(Install {
        program: installer(command, tool, search),
        args,
        package: line.ecosystem.is_some(),
    })
}

/// A PyPI spec as a requirement (`name==1.2.3`, or the name alone).
fn requirement(spec: &str) -> String {
    match split_spec(Ecosystem::PyPi, spec) {
        (name, Some(version)) => format!("{name}=={version}"),
        (name, None) => name,
    }
}

/// The launcher's own installer: the launcher itself when it is the tool
/// (`uv tool run`, `pipx run`), else the tool beside it (`npm` beside
/// `npx`, `uv` beside `uvx`), else the tool on the same `PATH`; its bare
/// name when none is found (the start then fails naming it).
fn installer(command: &str, tool: &str, search: &str) -> PathBuf {
    let launcher = find(command, search);
    if let Some(launcher) = &launcher {
        if launcher.file_name().is_some_and(|name| name == tool) {
            return launcher.clone();
        }
        if let Some(beside) = launcher.parent().map(|dir| dir.join(tool))
            && is_executable(&beside)
        {
            return beside;
        }
    }
    find(tool, search).unwrap_or_else(|| PathBuf::from(tool))
}

/// Where a launcher line's installer writes: npm's cache, uv's and pipx's
/// tool directories, or the project. A sandbox that may write there could
/// change what the next install outside runs, so the gateway does not
/// install at start for it.
#[must_use]
pub fn install_dirs(line: &LauncherLine, inherited: &BTreeMap<String, String>) -> Vec<PathBuf> {
    match line.ecosystem {
        Some(Ecosystem::Npm) => npm_cache(inherited).into_iter().collect(),
        Some(Ecosystem::PyPi) => python_tool_dirs(inherited),
        None => vec![PathBuf::from(if line.spec.is_empty() {
            "."
        } else {
            line.spec.as_str()
        })],
    }
}

/// The command that installs a server's package outside the sandbox, for
/// errors and for `hintgate sandbox prepare`.
pub(crate) const PREPARE_HINT: &str = "hintgate sandbox prepare SERVER --config FILE";

/// Resolves `command` with `args`: a launcher line to its installed
/// package's entry point, a virtual environment's interpreter to its
/// environment. `Ok(None)` for any other command. `vars` is the server's
/// environment (its `PATH`), `inherited` the gateway's (where the caches
/// are).
pub(crate) fn resolve(
    command: &str,
    args: &[String],
    vars: &BTreeMap<String, String>,
    inherited: &BTreeMap<String, String>,
) -> Result<Option<Launch>, SandboxError> {
    if let Some(line) = launcher_line(command, args) {
        return match line.ecosystem {
            Some(Ecosystem::Npm) => npm(&line, inherited).map(Some),
            Some(Ecosystem::PyPi) => pypi(&line, inherited).map(Some),
            None => uv_run(&line).map(Some),
        };
    }
    // Only an interpreter's name is looked for on `PATH` here: any other
    // program costs a comparison.
    let python = Path::new(command)
        .file_name()
        .and_then(OsStr::to_str)
        .is_some_and(|name| name.starts_with("python"));
    if !python {
        return Ok(None);
    }
    let search = vars.get("PATH").map(String::as_str).unwrap_or_default();
    let named = find(command, search);
    Ok(named.and_then(|program| venv_interpreter(&program, command, args)))
}

/// The virtual environment an interpreter belongs to, found as CPython
/// does: a `pyvenv.cfg` beside the program as named, or one directory up
/// (before its symbolic link to the base interpreter is followed).
#[must_use]
pub fn venv_of(program: &Path) -> Option<PathBuf> {
    let program = std::path::absolute(program).ok()?;
    let bin = program.parent()?;
    [Some(bin), bin.parent()]
        .into_iter()
        .flatten()
        .find(|dir| dir.join("pyvenv.cfg").is_file())
        .map(Path::to_path_buf)
}

fn venv_interpreter(program: &Path, command: &str, args: &[String]) -> Option<Launch> {
    let name = program.file_name()?.to_str()?;
    if !name.starts_with("python") {
        return None;
    }
    let root = venv_of(program)?;
    let mut trees = vec![root.clone()];
    // The base interpreter's installation, as `pyvenv.cfg` names it (a
    // copied interpreter's standard library is there, not behind a link).
    trees.extend(pyvenv_home(&root));
    Some(Launch {
        command: command.to_owned(),
        args: args.to_vec(),
        trees,
        resolution: Resolution {
            launcher: "virtual environment".to_owned(),
            package: None,
            version: None,
            installed: root,
            why: "the interpreter is a virtual environment's (a pyvenv.cfg beside it): the environment and its base interpreter are granted".to_owned(),
        },
    })
}

/// The base interpreter's installation a `pyvenv.cfg` names (`home =` is
/// its `bin` directory), unless that is the system's own.
fn pyvenv_home(root: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(root.join("pyvenv.cfg")).ok()?;
    let home = text.lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        (key.trim() == "home").then(|| PathBuf::from(value.trim()))
    })?;
    let prefix = runtime_prefix(&home.join("python"))?;
    // Only a Python installation (`PREFIX/lib/pythonX.Y`): a `pyvenv.cfg`
    // is a file in the environment, which a server that may write there can
    // edit, and `home = /home/me/bin` must not open the user's home.
    let installation = std::fs::read_dir(prefix.join("lib"))
        .ok()?
        .flatten()
        .any(|entry| {
            entry
                .file_name()
                .to_str()
                .is_some_and(|name| name.starts_with("python"))
        });
    installation.then_some(prefix)
}

fn not_prepared(line: &LauncherLine, detail: String) -> SandboxError {
    SandboxError::NotPrepared {
        launcher: line.launcher.to_owned(),
        package: line.spec.clone(),
        detail,
    }
}

fn home(inherited: &BTreeMap<String, String>) -> Option<PathBuf> {
    inherited.get("HOME").map(PathBuf::from)
}

/// npm's cache directory (`npm_config_cache`, or `~/.npm`).
#[must_use]
pub fn npm_cache(inherited: &BTreeMap<String, String>) -> Option<PathBuf> {
    inherited
        .get("npm_config_cache")
        .map(PathBuf::from)
        .or_else(|| home(inherited).map(|home| home.join(".npm")))
}

/// The installed copies of an npm package in npm's `npx` cache (`cache`
/// is npm's cache directory), newest first: each its package directory and
/// version.
#[must_use]
pub fn npx_installed(cache: &Path, name: &str) -> Vec<(PathBuf, String)> {
    let mut found: Vec<(std::time::SystemTime, PathBuf, String)> = Vec::new();
    let Ok(entries) = std::fs::read_dir(cache.join("_npx")) else {
        return Vec::new();
    };
    for entry in entries.flatten() {
        let dir = entry.path().join("node_modules").join(name);
        let manifest = dir.join("package.json");
        let Some(version) = read_json(&manifest)
            .and_then(|value| value.get("version")?.as_str().map(str::to_owned))
        else {
            continue;
        };
        let modified = std::fs::metadata(&manifest)
            .and_then(|meta| meta.modified())
            .unwrap_or(std::time::UNIX_EPOCH);
        found.push((modified, dir, version));
    }
    found.sort_by_key(|entry| std::cmp::Reverse(entry.0));
    found
        .into_iter()
        .map(|(_, dir, version)| (dir, version))
        .collect()
}

fn read_json(path: &Path) -> Option<serde_json::Value> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text).ok()
}

/// The script a package's `bin` names for `command` (or its only one, or
/// the one named after the package).
fn npm_bin(package: &Path, name: &str, command: Option<&str>) -> Option<PathBuf> {
    let manifest = read_json(&package.join("package.json"))?;
    let bin = manifest.get("bin")?;
    let unscoped = name.rsplit('/').next().unwrap_or(name);
    let relative = match bin {
        serde_json::Value::String(path) => path.clone(),
        serde_json::Value::Object(map) => {
            let wanted = command.unwrap_or(unscoped);
            let chosen = map.get(wanted).or_else(|| {
                (command.is_none() && map.len() == 1)
                    .then(|| map.values().next())
                    .flatten()
            })?;
            chosen.as_str()?.to_owned()
        }
        _ => return None,
    };
    let script = package.join(relative);
    // The script must stay inside the package: a manifest naming
    // `../../elsewhere` would widen what the plan grants.
    let real = script.canonicalize().ok()?;
    let root = package.canonicalize().ok()?;
    real.starts_with(&root).then_some(real)
}

/// The `node_modules` directory that holds an installed package (the
/// outermost one above it: its dependencies are hoisted there).
fn node_modules_root(package: &Path) -> Option<PathBuf> {
    package
        .ancestors()
        .filter(|dir| dir.file_name().is_some_and(|name| name == "node_modules"))
        .last()
        .map(Path::to_path_buf)
}

fn npm(line: &LauncherLine, inherited: &BTreeMap<String, String>) -> Result<Launch, SandboxError> {
    let name = line.name();
    let pinned = line.version();
    let cache = npm_cache(inherited).ok_or_else(|| {
        not_prepared(
            line,
            "no HOME or npm_config_cache to find npm's cache".into(),
        )
    })?;
    let installed = npx_installed(&cache, &name);
    let chosen = match &pinned {
        Some(version) => installed.iter().find(|(_, found)| found == version),
        None => installed.first(),
    };
    let Some((package, version)) = chosen else {
        let detail = match (&pinned, installed.first()) {
            (Some(want), Some((_, have))) => format!(
                "npm's cache at {} has {name} {have}, not the {want} the config pins",
                cache.display()
            ),
            _ => format!("it is not in npm's cache at {}", cache.display()),
        };
        return Err(not_prepared(line, detail));
    };
    let script = npm_bin(package, &name, line.bin.as_deref()).ok_or_else(|| {
        not_prepared(
            line,
            format!(
                "{name} {version} at {} has no command to run{}",
                package.display(),
                line.bin
                    .as_deref()
                    .map(|bin| format!(" named `{bin}`"))
                    .unwrap_or_default()
            ),
        )
    })?;
    let tree = node_modules_root(package).unwrap_or_else(|| package.clone());
    let mut args = vec![script.display().to_string()];
    args.extend(line.rest.iter().cloned());
    Ok(Launch {
        command: "node".to_owned(),
        args,
        trees: vec![tree.clone()],
        resolution: Resolution {
            launcher: line.launcher.to_owned(),
            package: Some(name.clone()),
            version: Some(version.clone()),
            installed: tree,
            why: format!(
                "`{}` would fetch {name} at start; it is installed, so its entry point runs under `node` and nothing is fetched",
                line.launcher
            ),
        },
    })
}

/// Where PyPI launchers keep installed tools: uv's tool directory and
/// pipx's environments.
#[must_use]
pub fn python_tool_dirs(inherited: &BTreeMap<String, String>) -> Vec<PathBuf> {
    let home = home(inherited);
    let data = inherited
        .get("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|home| home.join(".local/share")));
    let mut dirs = Vec::new();
    match inherited.get("UV_TOOL_DIR") {
        Some(dir) => dirs.push(PathBuf::from(dir)),
        None => dirs.extend(data.as_ref().map(|data| data.join("uv/tools"))),
    }
    match inherited.get("PIPX_HOME") {
        Some(dir) => dirs.push(PathBuf::from(dir).join("venvs")),
        None => dirs.extend(data.as_ref().map(|data| data.join("pipx/venvs"))),
    }
    dirs
}

/// The version of the PyPI package `name` installed as a uv or pipx tool:
/// the first tool directory that has it, in the order the sandbox looks
/// ([`python_tool_dirs`]).
#[must_use]
pub fn tool_installed(inherited: &BTreeMap<String, String>, name: &str) -> Option<String> {
    python_tool_dirs(inherited)
        .iter()
        .find_map(|dir| installed_version(&dir.join(name), name))
}

/// A normalized Python distribution name (PEP 503, with `_`).
fn normalized(name: &str) -> String {
    name.to_ascii_lowercase().replace(['-', '.'], "_")
}

/// The version of `name` installed in a virtual environment.
fn installed_version(venv: &Path, name: &str) -> Option<String> {
    let wanted = normalized(name);
    for lib in std::fs::read_dir(venv.join("lib")).ok()?.flatten() {
        let Ok(entries) = std::fs::read_dir(lib.path().join("site-packages")) else {
            continue;
        };
        for entry in entries.flatten() {
            let file = entry.file_name();
            let Some(stem) = file
                .to_str()
                .and_then(|file| file.strip_suffix(".dist-info"))
            else {
                continue;
            };
            if let Some((dist, version)) = stem.rsplit_once('-')
                && normalized(dist) == wanted
            {
                return Some(version.to_owned());
            }
        }
    }
    None
}

fn pypi(line: &LauncherLine, inherited: &BTreeMap<String, String>) -> Result<Launch, SandboxError> {
    let name = line.name();
    let pinned = line.version();
    let bin = line.bin.clone().unwrap_or_else(|| name.clone());
    let dirs = python_tool_dirs(inherited);
    let mut seen = Vec::new();
    for dir in &dirs {
        let venv = dir.join(&name);
        let Some(version) = installed_version(&venv, &name) else {
            continue;
        };
        if pinned.as_ref().is_some_and(|want| *want != version) {
            seen.push(format!("{} has {name} {version}", venv.display()));
            continue;
        }
        let program = venv.join("bin").join(&bin);
        if !program.is_file() {
            seen.push(format!("{} has no command `{bin}`", venv.display()));
            continue;
        }
        return Ok(Launch {
            command: program.display().to_string(),
            args: line.rest.clone(),
            trees: vec![venv.clone()],
            resolution: Resolution {
                launcher: line.launcher.to_owned(),
                package: Some(name.clone()),
                version: Some(version),
                installed: venv,
                why: format!(
                    "`{}` would fetch {name} at start; it is installed as a tool, so its command runs from that environment and nothing is fetched",
                    line.launcher
                ),
            },
        });
    }
    let looked: Vec<String> = dirs.iter().map(|dir| dir.display().to_string()).collect();
    let detail = if seen.is_empty() {
        format!("no installed tool in {}", looked.join(" or "))
    } else {
        format!(
            "{}{}",
            seen.join("; "),
            pinned
                .map(|want| format!(", not the {want} the config pins"))
                .unwrap_or_default()
        )
    };
    Err(not_prepared(line, detail))
}

/// `uv run`: the project's `.venv` runs the script or command directly, so
/// `uv` neither syncs nor fetches inside the sandbox.
fn uv_run(line: &LauncherLine) -> Result<Launch, SandboxError> {
    let operand = line.rest.first().cloned().unwrap_or_default();
    let start = if line.spec.is_empty() {
        let script = Path::new(&operand);
        if operand.ends_with(".py") {
            script.parent().map(Path::to_path_buf).unwrap_or_default()
        } else {
            PathBuf::from(".")
        }
    } else {
        PathBuf::from(&line.spec)
    };
    let start = std::path::absolute(&start).unwrap_or(start);
    let venv = start
        .ancestors()
        .map(|dir| dir.join(".venv"))
        .find(|venv| venv.join("pyvenv.cfg").is_file())
        .ok_or_else(|| {
            not_prepared(
                line,
                format!(
                    "no project environment (.venv) in {} or above",
                    start.display()
                ),
            )
        })?;
    let bin = venv.join("bin");
    let (command, args) = if operand.ends_with(".py") {
        (bin.join("python"), line.rest.clone())
    } else {
        let rest = line.rest.get(1..).unwrap_or_default().to_vec();
        (bin.join(&operand), rest)
    };
    if !command.is_file() {
        return Err(not_prepared(
            line,
            format!("{} does not exist", command.display()),
        ));
    }
    let mut trees = vec![venv.clone()];
    trees.extend(pyvenv_home(&venv));
    Ok(Launch {
        command: command.display().to_string(),
        args,
        trees,
        resolution: Resolution {
            launcher: line.launcher.to_owned(),
            package: None,
            version: None,
            installed: venv,
            why: "`uv run` would sync the project at start; its environment is there, so it runs from it directly and nothing is fetched".to_owned(),
        },
    })
}

/// A sandbox table proposed for a server's command line: every absolute
/// path its arguments name that exists, as `read` (or as `write` when it is
/// beneath one of `write`, which the user names), and no network. The
/// launcher's package is not listed: the plan grants it whatever the table.
#[must_use]
pub fn suggest(args: &[String], write: &[PathBuf]) -> hintgate_policy::config::SandboxConfig {
    let mut read = Vec::new();
    let mut writable: Vec<String> = write
        .iter()
        .map(|path| path.display().to_string())
        .collect();
    for arg in args {
        // `/data` and `--root=/data`.
        let value = arg
            .split_once('=')
            .filter(|(key, _)| key.starts_with('-'))
            .map_or(arg.as_str(), |(_, value)| value);
        let path = Path::new(value);
        if !path.is_absolute() || !path.exists() {
            continue;
        }
        let shown = value.to_owned();
        if write.iter().any(|dir| path.starts_with(dir)) {
            if !writable.contains(&shown) && !write.iter().any(|dir| dir == path) {
                writable.push(shown);
            }
        } else if !read.contains(&shown) {
            read.push(shown);
        }
    }
    // A path beneath a writable one is writable already.
    writable.dedup();
    hintgate_policy::config::SandboxConfig {
        read,
        write: writable,
        network: false,
        ..hintgate_policy::config::SandboxConfig::default()
    }
}

/// A sandbox table as the TOML a config holds (`[servers.NAME.sandbox]`).
#[must_use]
pub fn table_toml(server: &str, table: &hintgate_policy::config::SandboxConfig) -> String {
    let list = |paths: &[String]| {
        let quoted: Vec<String> = paths
            .iter()
            .map(|path| serde_json::Value::String(path.clone()).to_string())
            .collect();
        format!("[{}]", quoted.join(", "))
    };
    let name = if server
        .chars()
        .all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '-')
    {
        server.to_owned()
    } else {
        serde_json::Value::String(server.to_owned()).to_string()
    };
    let prepare = match table.prepare {
        hintgate_policy::config::Prepare::OnStart => "prepare = \"on-start\"\n",
        hintgate_policy::config::Prepare::ByHand => "",
    };
    format!(
        "[servers.{name}.sandbox]\nread = {}\nwrite = {}\nnetwork = {}\n{prepare}",
        list(&table.read),
        list(&table.write),
        table.network
    )
}

// === paths the plan and the launchers both look up ===

/// Finds `command` on `search` (a `PATH` value), as `execvp` would.
pub(crate) fn find(command: &str, search: &str) -> Option<PathBuf> {
    if command.contains('/') {
        let path = PathBuf::from(command);
        return path.is_file().then_some(path);
    }
    search
        .split(':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| Path::new(dir).join(command))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// The installation an interpreter belongs to (`PREFIX` of
/// `PREFIX/bin/python3.11`), unless that is the system's own.
pub(crate) fn runtime_prefix(real: &Path) -> Option<PathBuf> {
    let bin = real.parent()?;
    if bin.file_name()? != "bin" {
        return None;
    }
    let prefix = bin.parent()?;
    let system = [Path::new("/"), Path::new("/usr"), Path::new("/usr/local")];
    (!system.contains(&prefix)).then(|| prefix.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn launcher_lines_are_recognised() {
        let line = launcher_line(
            "npx",
            &strings(&["-y", "@scope/server@1.2.3", "/data", "--flag"]),
        )
        .unwrap();
        assert_eq!(line.name(), "@scope/server");
        assert_eq!(line.version().as_deref(), Some("1.2.3"));
        assert_eq!(line.rest, strings(&["/data", "--flag"]));
        let line = launcher_line(
            "/usr/bin/npm",
            &strings(&["exec", "--yes", "--package=pkg@2.0.0", "--", "tool", "x"]),
        )
        .unwrap();
        assert_eq!(line.launcher, "npm exec");
        assert_eq!(line.spec, "pkg@2.0.0");
        assert_eq!(line.bin.as_deref(), Some("tool"));
        assert_eq!(line.rest, strings(&["x"]));
        let line = launcher_line(
            "uv",
            &strings(&["tool", "run", "mcp-server-time==1.0", "--tz", "UTC"]),
        )
        .unwrap();
        assert_eq!(line.launcher, "uv tool run");
        assert_eq!(line.version().as_deref(), Some("1.0"));
        let line = launcher_line("pipx", &strings(&["run", "--from", "pkg", "cmd"])).unwrap();
        assert_eq!(
            (line.spec.as_str(), line.bin.as_deref()),
            ("pkg", Some("cmd"))
        );
        assert!(launcher_line("node", &strings(&["server.js"])).is_none());
        assert!(launcher_line("npm", &strings(&["start"])).is_none());
        assert_eq!(
            split_spec(Ecosystem::Npm, "pkg@latest"),
            ("pkg".into(), None),
            "a tag is not a version"
        );
    }

    #[test]
    fn only_a_registry_name_and_version_is_installed_with_the_launchers_own_installer() {
        for spec in [
            "pkg",
            "pkg@1.2.3",
            "@scope/pkg@^1.2",
            "pkg@latest",
            "a.b-c_d~e",
        ] {
            assert!(registry_spec(Ecosystem::Npm, spec), "{spec}");
        }
        for spec in [
            "git+https://example.com/x.git",
            "github:user/repo",
            "user/repo",
            "./local",
            "../up",
            "/abs",
            "file:x",
            "https://example.com/x.tgz",
            "-x",
            "@scope",
            "@/x",
            "pkg@1.0;rm",
            "pkg@$(x)",
        ] {
            assert!(!registry_spec(Ecosystem::Npm, spec), "{spec}");
        }
        for spec in [
            "mcp-server-time",
            "mcp_server.time==2026.10.19",
            "pkg==1.0+local",
        ] {
            assert!(registry_spec(Ecosystem::PyPi, spec), "{spec}");
        }
        for spec in [
            "pkg[extra]",
            "git+https://example.com/x",
            "pkg @ https://example.com/x.whl",
            "./dir",
            "pkg>=1",
            "-e",
            "pkg==1;python_version<'4'",
        ] {
            assert!(!registry_spec(Ecosystem::PyPi, spec), "{spec}");
        }
        // The installer beside the launcher the config names, not another
        // one earlier on the `PATH`.
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let (first, node) = (dir.path().join("first"), dir.path().join("node"));
        for (bin, names) in [(&first, &["npm"][..]), (&node, &["npx", "npm"][..])] {
            std::fs::create_dir_all(bin).unwrap();
            for name in names {
                let path = bin.join(name);
                std::fs::write(&path, "").unwrap();
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
        }
        let search = format!("{}:{}", first.display(), node.display());
        let line = launcher_line("npx", &strings(&["-y", "pkg@1.2.3"])).unwrap();
        let npm = install(&line, "npx", &search).unwrap();
        assert_eq!(npm.program, node.join("npm"));
        assert_eq!(
            npm.describe(),
            format!(
                "{} exec --yes --ignore-scripts --package=pkg@1.2.3 -c true",
                node.join("npm").display()
            )
        );
        let line = launcher_line("uvx", &strings(&["mcp-server-time==1.0"])).unwrap();
        assert_eq!(
            install(&line, "uvx", &search).unwrap().args,
            ["tool", "install", "--no-build", "mcp-server-time==1.0"]
        );
    }

    #[test]
    fn a_manifest_cannot_point_its_command_outside_its_package() {
        let dir = tempfile::tempdir().unwrap();
        let package = dir.path().join("node_modules/evil");
        std::fs::create_dir_all(&package).unwrap();
        std::fs::write(dir.path().join("secret.js"), "").unwrap();
        std::fs::write(
            package.join("package.json"),
            r#"{"name":"evil","version":"1.0.0","bin":"../../secret.js"}"#,
        )
        .unwrap();
        assert_eq!(npm_bin(&package, "evil", None), None);
    }

    #[test]
    fn an_npx_line_runs_the_cached_entry_point_or_says_what_to_run() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("npm");
        let package = cache.join("_npx/abc/node_modules/@scope/server");
        std::fs::create_dir_all(package.join("dist")).unwrap();
        std::fs::write(package.join("dist/index.js"), "").unwrap();
        std::fs::write(
            package.join("package.json"),
            r#"{"name":"@scope/server","version":"1.2.3","bin":{"mcp-server":"dist/index.js"}}"#,
        )
        .unwrap();
        let inherited =
            BTreeMap::from([("npm_config_cache".to_owned(), cache.display().to_string())]);
        let vars = BTreeMap::new();
        let launch = resolve(
            "npx",
            &strings(&["-y", "@scope/server", "/data"]),
            &vars,
            &inherited,
        )
        .unwrap()
        .unwrap();
        assert_eq!(launch.command, "node");
        assert_eq!(
            launch.args,
            [
                package
                    .join("dist/index.js")
                    .canonicalize()
                    .unwrap()
                    .display()
                    .to_string(),
                "/data".to_owned()
            ]
        );
        assert_eq!(launch.trees, [cache.join("_npx/abc/node_modules")]);
        assert_eq!(launch.resolution.version.as_deref(), Some("1.2.3"));
        let err = resolve(
            "npx",
            &strings(&["-y", "@scope/server@9.9.9"]),
            &vars,
            &inherited,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("hintgate sandbox prepare"), "{err}");
        assert!(err.contains("1.2.3") && err.contains("9.9.9"), "{err}");
    }

    #[test]
    fn a_suggested_table_reads_the_paths_named_and_writes_only_where_told() {
        let dir = tempfile::tempdir().unwrap();
        let docs = dir.path().join("docs");
        let out = dir.path().join("out");
        std::fs::create_dir_all(&docs).unwrap();
        std::fs::create_dir_all(&out).unwrap();
        let args = strings(&[
            "-y",
            "@scope/server",
            docs.to_str().unwrap(),
            &format!("--out={}", out.display()),
            "/no/such/path",
            "relative/dir",
        ]);
        let table = suggest(&args, std::slice::from_ref(&out));
        assert_eq!(table.read, [docs.display().to_string()]);
        assert_eq!(table.write, [out.display().to_string()]);
        assert!(!table.network);
        let toml = table_toml("fs", &table);
        assert!(
            toml.starts_with("[servers.fs.sandbox]\nread = [\""),
            "{toml}"
        );
        assert!(toml.ends_with("network = false\n"), "{toml}");
        assert!(table_toml("a.b", &table).starts_with("[servers.\"a.b\".sandbox]"));
    }

    #[test]
    fn a_venv_interpreter_is_found_as_named() {
        let dir = tempfile::tempdir().unwrap();
        let venv = dir.path().join(".venv");
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        let base = dir.path().join("base");
        std::fs::create_dir_all(base.join("bin")).unwrap();
        std::fs::create_dir_all(base.join("lib/python3.12")).unwrap();
        std::fs::write(
            venv.join("pyvenv.cfg"),
            format!("home = {}\n", base.join("bin").display()),
        )
        .unwrap();
        std::os::unix::fs::symlink("/bin/sh", venv.join("bin/python")).unwrap();
        let program = venv.join("bin/python");
        let launch = venv_interpreter(&program, program.to_str().unwrap(), &[]).unwrap();
        assert_eq!(launch.trees, [venv.clone(), base]);
        // A `home` that is no Python installation (a server that may write
        // the environment edited it to open the user's home) adds nothing.
        let home = dir.path().join("me");
        std::fs::create_dir_all(home.join("bin")).unwrap();
        std::fs::write(
            venv.join("pyvenv.cfg"),
            format!("home = {}\n", home.join("bin").display()),
        )
        .unwrap();
        let launch = venv_interpreter(&program, program.to_str().unwrap(), &[]).unwrap();
        assert_eq!(launch.trees, std::slice::from_ref(&venv));
        // Not a venv's when the pyvenv.cfg is only beside what the link
        // points at, or the program is no interpreter.
        assert!(venv_interpreter(Path::new("/bin/sh"), "/bin/sh", &[]).is_none());
    }
}
