//! The install on first start: a sandboxed server whose table says
//! `prepare = "on-start"` and whose launcher's package is not installed
//! gets it installed by the gateway, outside the sandbox and with the
//! network, before its confined start: what `hintgate sandbox prepare`
//! runs ([`hintgate_sandbox::launch::install`]), at the version the
//! server's identity will pin (the spec's, else the newest, which is what
//! the identity then reads from what was installed).
//!
//! The install runs unconfined, so it is held to what the configuration
//! says: only for a table that asks for it; only the launcher's own
//! installer, found beside the launcher the config names, with fixed words
//! and the registry name and version the config writes (no shell, nothing
//! a server wrote, no package code: npm runs no install scripts, uv and
//! pipx build nothing); never for a table that lets the server write where
//! its package is installed (it could change what the next install runs);
//! never for a `uv run` project (whose sync runs the project's own build).
//! It is bounded by the server's start timeout and killed past it; its
//! output goes to the gateway's log, never to the host's stream; a failure
//! fails the server's calls with an error that names the command.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use hintgate_policy::config::{Prepare, ServerConfig, Transport};
use hintgate_sandbox::launch::{self, Install, launcher_line};
use hintgate_sandbox::{Plan, SandboxError};
use tokio::io::BufReader;

use crate::tail::{StderrLine, StderrTail, read_stderr_line};

/// An install the gateway runs before a server's confined start.
#[derive(Debug, Clone)]
pub struct Preparation {
    /// The server's configured name.
    pub server: String,
    /// What runs.
    pub install: Install,
    /// The environment it runs with: the gateway's own (where the sandbox
    /// then looks for what was installed), with the server's `PATH`.
    env: BTreeMap<String, String>,
    /// To say what was installed where, once it was: the server's line.
    command: String,
    args: Vec<String>,
    server_env: BTreeMap<String, String>,
    sandbox: hintgate_policy::config::SandboxConfig,
}

/// What a server's start needs first: nothing, an install, or a refusal
/// to install (in words for the host and the log).
#[derive(Debug)]
pub enum Needed {
    /// Start it as it is (installed, or not a launcher's package, or its
    /// table does not ask for an install at start).
    Nothing,
    /// Install its package first.
    Install(Box<Preparation>),
    /// Its table asks for an install at start, which cannot be done.
    Refused(String),
}

/// What `server`'s start needs first, read from its configuration and the
/// disk (a few files; no process is started).
#[must_use]
pub fn needed(server: &ServerConfig) -> Needed {
    // Every start asks: one comparison unless the table says so.
    let on_start = server
        .sandbox
        .as_ref()
        .is_some_and(|sandbox| sandbox.prepare == Prepare::OnStart);
    if !on_start {
        return Needed::Nothing;
    }
    let inherited: BTreeMap<String, String> = std::env::vars().collect();
    needed_with(server, &inherited)
}

fn needed_with(server: &ServerConfig, inherited: &BTreeMap<String, String>) -> Needed {
    let (Some(sandbox), Transport::Stdio { command, args, env }) =
        (&server.sandbox, &server.transport)
    else {
        return Needed::Nothing;
    };
    if sandbox.prepare != Prepare::OnStart {
        return Needed::Nothing;
    }
    let Some(line) = launcher_line(command, args) else {
        return Needed::Nothing;
    };
    match Plan::new(command, args, env, sandbox, inherited) {
        Err(SandboxError::NotPrepared { .. }) => {}
        // Installed, or failing for another reason the start names.
        _ => return Needed::Nothing,
    }
    let name = &server.name;
    if line.ecosystem.is_none() {
        return Needed::Refused(format!(
            "server `{name}` runs a `uv run` project, which `prepare = \"on-start\"` does not sync (its sync would run the project's own build outside the sandbox); sync it once with `hintgate sandbox prepare {name} --config FILE`"
        ));
    }
    let search = env
        .get("PATH")
        .or_else(|| inherited.get("PATH"))
        .cloned()
        .unwrap_or_default();
    let install = match launch::install(&line, command, &search) {
        Ok(install) => install,
        Err(err) => return Needed::Refused(format!("cannot install at start: {err}")),
    };
    if !install.program.is_absolute() {
        return Needed::Refused(format!(
            "server `{name}`'s installer `{}` was not found at an absolute path on its `PATH`; install its package with `hintgate sandbox prepare {name} --config FILE`",
            install.program.display()
        ));
    }
    if let Some(why) = writable_input(sandbox, &line, inherited, &search, &install) {
        return Needed::Refused(format!(
            "server `{name}` may write {why}: an install outside its sandbox would run what it could change, so hintgate does not install at start; install its package with `hintgate sandbox prepare {name} --config FILE`"
        ));
    }
    let mut run_env = inherited.clone();
    run_env.insert("PATH".to_owned(), search);
    Needed::Install(Box::new(Preparation {
        server: name.clone(),
        install,
        env: run_env,
        command: command.clone(),
        args: args.clone(),
        server_env: env.clone(),
        sandbox: sandbox.clone(),
    }))
}

/// What of the install's inputs the sandbox lets the server write, in
/// words, if any: where the package is installed (npm's cache, the tool
/// directory, also beneath it), or, beneath a writable path, a directory of
/// the `PATH` the installer runs with (its `node`, say), the installer
/// itself (as found and as it resolves), the home directory (its `.npmrc`,
/// uv's and pip's settings) or a settings file the environment names. A
/// server that may change any of them chooses what the next install
/// outside its sandbox runs.
fn writable_input(
    sandbox: &hintgate_policy::config::SandboxConfig,
    line: &hintgate_policy::launcher::LauncherLine,
    inherited: &BTreeMap<String, String>,
    search: &str,
    install: &Install,
) -> Option<String> {
    let installed = launch::install_dirs(line, inherited);
    let mut read: Vec<(String, std::path::PathBuf)> = search
        .split(':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| ("a directory of its `PATH`".to_owned(), dir.into()))
        .collect();
    read.push(("its installer".to_owned(), install.program.clone()));
    if let Ok(real) = install.program.canonicalize() {
        read.push(("its installer".to_owned(), real));
    }
    for key in [
        "HOME",
        "XDG_CONFIG_HOME",
        "npm_config_userconfig",
        "npm_config_globalconfig",
        "UV_CONFIG_FILE",
        "PIP_CONFIG_FILE",
    ] {
        if let Some(value) = inherited.get(key) {
            read.push((format!("what `{key}` names"), value.into()));
        }
    }
    for written in &sandbox.write {
        let written = Path::new(written);
        if let Some(dir) = installed
            .iter()
            .find(|dir| dir.starts_with(written) || written.starts_with(dir))
        {
            return Some(format!(
                "`{}`, where its package is installed (`{}`)",
                written.display(),
                dir.display()
            ));
        }
        if let Some((what, path)) = read.iter().find(|(_, path)| path.starts_with(written)) {
            return Some(format!(
                "`{}`, which holds {what} (`{}`)",
                written.display(),
                path.display()
            ));
        }
    }
    None
}

impl Preparation {
    /// Runs the install, killed after `timeout`: what was installed where,
    /// or why not (naming the command), in words for the log and the host.
    ///
    /// # Errors
    ///
    /// Why nothing usable was installed.
    pub async fn run(self, timeout: Duration) -> Result<String, String> {
        let shown = self.install.describe();
        let name = self.server.clone();
        tracing::info!(server.id = %name, "installing its package before its confined start (prepare = \"on-start\"; outside the sandbox, with the network): {shown}");
        let mut child = tokio::process::Command::new(&self.install.program)
            .args(&self.install.args)
            .env_clear()
            .envs(&self.env)
            .stdin(Stdio::null())
            // Never the gateway's own output: that is the host's stream.
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            // Not the gateway's directory: no project's `.npmrc` or
            // `uv.toml` there has a say.
            .current_dir("/")
            .spawn()
            .map_err(|err| {
                format!(
                    "its package is not installed, and `{shown}` could not run to install it: {err}"
                )
            })?;
        let tail = Arc::new(StderrTail::default());
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        let finished = async {
            // Both at once: an installer that fills one pipe while the
            // other is read would wait for ever.
            tokio::join!(
                log_lines(stdout, &name, &tail),
                log_lines(stderr, &name, &tail)
            );
            child.wait().await
        };
        let status = match tokio::time::timeout(timeout, finished).await {
            Ok(Ok(status)) => status,
            Ok(Err(err)) => {
                return Err(format!(
                    "`{shown}`, installing its package before its confined start, failed: {err}"
                ));
            }
            Err(_) => {
                return Err(format!(
                    "`{shown}`, installing its package before its confined start, did not finish within {} s (its start timeout){}",
                    timeout.as_secs(),
                    said(&tail)
                ));
            }
        };
        if !status.success() {
            return Err(format!(
                "`{shown}`, installing its package before its confined start, {}{}",
                crate::tail::describe_exit(&status, false),
                said(&tail)
            ));
        }
        match Plan::new(
            &self.command,
            &self.args,
            &self.server_env,
            &self.sandbox,
            &self.env,
        ) {
            Ok(plan) => {
                let installed = plan.launch.as_ref().map_or_else(
                    || "its package".to_owned(),
                    |launch| {
                        format!(
                            "{}{} at {}",
                            launch.package.as_deref().unwrap_or("its package"),
                            launch
                                .version
                                .as_deref()
                                .map(|version| format!(" {version}"))
                                .unwrap_or_default(),
                            launch.installed.display()
                        )
                    },
                );
                Ok(format!(
                    "installed {installed} with `{shown}`; in its sandbox it runs {} {}",
                    plan.program.display(),
                    plan.args.join(" ")
                ))
            }
            Err(err) => Err(format!(
                "`{shown}` succeeded, but the sandbox still cannot find what to run: {err}"
            )),
        }
    }
}

/// Logs each line of the installer's output with the server's name and
/// keeps the last ones.
async fn log_lines<R: tokio::io::AsyncRead + Unpin>(
    stream: Option<R>,
    name: &str,
    tail: &StderrTail,
) {
    let Some(stream) = stream else {
        return;
    };
    let mut reader = BufReader::new(stream);
    while let Ok(StderrLine::Line { bytes, cut }) = read_stderr_line(&mut reader).await {
        let logged = tail.push(&bytes, cut);
        tracing::info!(server.id = %name, "install: {logged}");
    }
}

fn said(tail: &StderrTail) -> String {
    let lines = tail.lines();
    if lines.is_empty() {
        "; it wrote nothing".to_owned()
    } else {
        format!("; its last lines: {}", lines.join(" | "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hintgate_policy::config::SandboxConfig;

    fn server(command: &str, args: &[&str], sandbox: SandboxConfig) -> ServerConfig {
        let source =
            format!("[servers.s]\ncommand = {command:?}\nargs = {args:?}\n[servers.s.sandbox]\n");
        let (config, _) = hintgate_policy::config::parse_str(&source);
        let mut server = config.unwrap().servers.remove("s").unwrap();
        server.sandbox = Some(sandbox);
        server
    }

    fn on_start() -> SandboxConfig {
        SandboxConfig {
            prepare: Prepare::OnStart,
            ..SandboxConfig::default()
        }
    }

    #[test]
    fn only_a_table_that_asks_installs_and_only_a_registry_package() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("npm");
        let inherited = BTreeMap::from([
            ("npm_config_cache".to_owned(), cache.display().to_string()),
            ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
        ]);
        let line = ["-y", "@scope/server@1.2.3", "/data"];
        // By hand (the default): nothing runs at start.
        let by_hand = server("npx", &line, SandboxConfig::default());
        assert!(matches!(needed_with(&by_hand, &inherited), Needed::Nothing));
        let Needed::Install(prep) = needed_with(&server("npx", &line, on_start()), &inherited)
        else {
            panic!("no install");
        };
        assert_eq!(
            prep.install.args,
            [
                "exec",
                "--yes",
                "--ignore-scripts",
                "--package=@scope/server@1.2.3",
                "-c",
                "true"
            ]
        );
        // Not a launcher: nothing to install.
        let plain = server("/bin/true", &[], on_start());
        assert!(matches!(needed_with(&plain, &inherited), Needed::Nothing));
        // A URL, a path or a git repository is not installed.
        for spec in [
            "git+https://example.com/x.git",
            "github:user/repo",
            "./local",
            "/abs/pkg",
            "https://example.com/x.tgz",
            "--registry=http://evil",
        ] {
            let line = server("npx", &["-y", "--package", spec, "cmd"], on_start());
            match needed_with(&line, &inherited) {
                Needed::Refused(why) => assert!(why.contains("registry package"), "{why}"),
                other => panic!("{spec}: {other:?}"),
            }
        }
        let uv = server(
            "uvx",
            &["--from", "git+https://example.com/x", "x"],
            on_start(),
        );
        assert!(matches!(needed_with(&uv, &inherited), Needed::Refused(_)));
        // A table that may write where the package is installed.
        let mut writes = on_start();
        writes.write = vec![dir.path().display().to_string()];
        std::fs::create_dir_all(&cache).unwrap();
        match needed_with(&server("npx", &line, writes), &inherited) {
            Needed::Refused(why) => assert!(why.contains("may write"), "{why}"),
            other => panic!("{other:?}"),
        }
        // A table that may write a directory of the installer's `PATH`
        // (where a `node` or an `npm` could be planted), or the home
        // directory (its `.npmrc`).
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let mut on_path = on_start();
        on_path.write = vec![bin.display().to_string()];
        let planted = BTreeMap::from([
            ("npm_config_cache".to_owned(), cache.display().to_string()),
            (
                "PATH".to_owned(),
                format!("{}:/usr/bin:/bin", bin.display()),
            ),
        ]);
        match needed_with(&server("npx", &line, on_path), &planted) {
            Needed::Refused(why) => assert!(why.contains("`PATH`"), "{why}"),
            other => panic!("{other:?}"),
        }
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let mut in_home = on_start();
        in_home.write = vec![home.display().to_string()];
        let mut with_home = inherited.clone();
        with_home.insert("HOME".to_owned(), home.join("me").display().to_string());
        match needed_with(&server("npx", &line, in_home), &with_home) {
            Needed::Refused(why) => assert!(why.contains("`HOME`"), "{why}"),
            other => panic!("{other:?}"),
        }
        // A `uv run` project is not synced at start.
        match needed_with(&server("uv", &["run", "server.py"], on_start()), &inherited) {
            Needed::Refused(why) => assert!(why.contains("uv run"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
