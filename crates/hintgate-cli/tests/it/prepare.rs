//! `prepare = "on-start"`: the gateway installs a launcher's package that is
//! not installed before the server's confined start, end to end with the
//! real `npx -y @modelcontextprotocol/server-filesystem` and the real npm,
//! and the real `uvx mcp-server-time` and uv.
//!
//! Nothing leaves the machine: npm installs from a registry the test runs
//! on the loopback (`tests/fixtures/npm_registry.py`, which serves the
//! packages installed in the test peers' `node_modules`, packed again), into
//! an npm cache the test makes empty; uv from a directory of wheels made
//! again from the peers' installed time server (`tests/fixtures/
//! wheelhouse.py`), with no index, into a tool directory the test makes.
//! Each test starts with the package not installed, watches it installed,
//! and ends with it installed, pinned at the version installed, and
//! confined.
#![expect(
    clippy::disallowed_macros,
    reason = "the tests print what the sandbox enforced, and why one skips"
)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use serde_json::json;

use crate::host::{Host, is_error, text};
use crate::sandbox::{
    Layout, kernel_confines, kernel_refused, layout, node22_path, soon, system_python,
};
use crate::util::tool;

pub(crate) const PACKAGE: &str = "@modelcontextprotocol/server-filesystem";

/// The local npm registry: its URL and what it was asked for.
pub(crate) struct Registry {
    child: Child,
    pub(crate) url: String,
    log: PathBuf,
}

impl Registry {
    pub(crate) fn start(dir: &Path) -> Self {
        let python = system_python().expect("python3");
        let port_file = dir.join("registry.port");
        let child = Command::new(python)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/npm_registry.py"))
            .arg(crate::peers::tools().join("npm/node_modules"))
            .arg(&port_file)
            .spawn()
            .unwrap();
        // It writes its port once it listens.
        assert!(soon(|| port_file.exists()), "the registry did not start");
        let port = std::fs::read_to_string(&port_file).unwrap();
        Self {
            child,
            url: format!("http://127.0.0.1:{}/", port.trim()),
            log: dir.join("registry.port.log"),
        }
    }

    fn asked(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The versions of the package in npm's `npx` cache at `cache`.
pub(crate) fn installed(cache: &Path) -> Vec<String> {
    hintgate_sandbox::launch::npx_installed(cache, PACKAGE)
        .into_iter()
        .map(|(_, version)| version)
        .collect()
}

/// `hintgate.toml` for the filesystem server through `npx -y`, told it may
/// use the whole test directory and confined to `data`.
fn write_config(dir: &Path, data: &Path, extra: &str) {
    let config = format!(
        "{extra}[servers.fs]\ncommand = \"npx\"\nargs = [\"-y\", \"{PACKAGE}\", {:?}]\n\
         env = {{ PATH = {:?} }}\ntrust = \"untrusted\"\n\n\
         [servers.fs.sandbox]\nread = [{:?}]\nnetwork = false\nprepare = \"on-start\"\n",
        dir.display().to_string(),
        node22_path(),
        data.display().to_string(),
    );
    std::fs::write(dir.join("hintgate.toml"), config).unwrap();
}

/// npm's settings for the test: its cache, the registry, nothing else of
/// this machine's (no user config, no retries that outlast a test).
pub(crate) fn npm_env(dir: &Path, cache: &Path, registry: &str) -> Vec<(String, String)> {
    vec![
        ("npm_config_cache".into(), cache.display().to_string()),
        ("npm_config_registry".into(), registry.to_owned()),
        (
            "npm_config_userconfig".into(),
            dir.join("no-npmrc").display().to_string(),
        ),
        ("npm_config_fetch_retries".into(), "0".into()),
        ("npm_config_update_notifier".into(), "false".into()),
    ]
}

fn start(dir: &Path, env: &[(String, String)]) -> Host {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Host::start(dir, &["run", "--config", "hintgate.toml"], &env)
}

#[test]
fn an_npx_server_not_installed_is_installed_at_its_first_start_then_runs_confined() {
    if !kernel_confines() {
        return;
    }
    let Layout {
        dir,
        data,
        secret,
        escape,
    } = layout();
    let registry = Registry::start(dir.path());
    let cache = dir.path().join("npm-cache");
    std::fs::create_dir(&cache).unwrap();
    assert!(installed(&cache).is_empty());
    write_config(dir.path(), &data, "");
    let env = npm_env(dir.path(), &cache, &registry.url);
    // Before: `sandbox explain` says the gateway will install it, and how.
    let env_refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let explained = crate::util::run_with(
        dir.path(),
        &["sandbox", "explain", "fs", "--config", "hintgate.toml"],
        &env_refs,
    );
    let said = crate::util::stderr(&explained);
    assert!(
        said.contains("the gateway installs it before its first start")
            && said.contains(&format!("--ignore-scripts --package={PACKAGE} -c true")),
        "{said}"
    );
    let mut host = start(dir.path(), &env);
    host.initialize(json!({"elicitation": {}}));
    host.respond_with(|_| json!({"action": "accept", "content": {"approve": true}}));
    let list = host.request("tools/list", json!({}));
    // Confined with no network, proven: closed-world whatever it claims.
    assert_eq!(
        tool(&list, "fs__read_text_file")["annotations"]["openWorldHint"],
        false,
        "{list}\n{}",
        host.log()
    );
    let read = host.call(
        "fs__read_text_file",
        json!({"path": data.join("notes.txt")}),
    );
    assert_eq!(text(&read), "hello from disk", "{read}");
    let stolen = host.call("fs__read_text_file", json!({"path": secret}));
    assert!(kernel_refused(&stolen), "{stolen}");
    let written = host.call(
        "fs__write_file",
        json!({"path": escape, "content": "escaped"}),
    );
    assert!(kernel_refused(&written), "{written}");
    assert!(!escape.exists(), "a file appeared outside the sandbox");
    host.close();
    let log = std::fs::read_to_string(dir.path().join("hintgate.stderr")).unwrap();
    println!(
        "{}",
        log.lines()
            .filter(|line| line.contains("install"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // npm fetched it from the registry, with the one command the config
    // makes: the launcher's own npm, no install scripts.
    assert!(
        registry
            .asked()
            .iter()
            .any(|path| path.ends_with("/server-filesystem-2026.8.31.tgz")),
        "{:?}",
        registry.asked()
    );
    assert!(
        log.contains(&format!(
            "npm exec --yes --ignore-scripts --package={PACKAGE} -c true"
        )),
        "{log}"
    );
    // The log says what it installed where, and the identity pins that.
    assert_eq!(installed(&cache), ["2026.8.31"]);
    assert!(
        log.contains(&format!(
            "installed {PACKAGE} 2026.8.31 at {}",
            cache.display()
        )),
        "{log}"
    );
    assert!(
        log.contains(&format!("({PACKAGE} 2026.8.31)")),
        "the identity does not pin the version installed:\n{log}"
    );
    // Installed once: the next start runs it as it is.
    let asked = registry.asked().len();
    let mut again = start(dir.path(), &env);
    again.initialize(json!({}));
    let read = again.call("fs__list_allowed_directories", json!({}));
    assert!(!is_error(&read), "{read}");
    let log = again.log();
    again.close();
    assert!(!log.contains("installing its package"), "{log}");
    assert_eq!(registry.asked().len(), asked);
}

#[test]
fn an_install_that_fails_or_hangs_fails_the_call_naming_the_command() {
    if !kernel_confines() {
        return;
    }
    let Layout { dir, data, .. } = layout();
    let cache = dir.path().join("npm-cache");
    std::fs::create_dir(&cache).unwrap();
    // A registry that is not there: npm fails, the call says which command.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let gone = format!("http://{}/", closed.local_addr().unwrap());
    drop(closed);
    write_config(dir.path(), &data, "");
    let mut host = start(dir.path(), &npm_env(dir.path(), &cache, &gone));
    host.initialize(json!({}));
    let call = host.call("fs__list_allowed_directories", json!({}));
    assert!(is_error(&call), "{call}");
    let said = text(&call);
    println!("the host was told: {said}");
    assert!(
        said.contains(&format!(
            "npm exec --yes --ignore-scripts --package={PACKAGE} -c true"
        )) && said.contains("exited with status"),
        "{said}"
    );
    host.close();
    assert!(installed(&cache).is_empty());

    // A registry that takes the connection and never answers: the install
    // is killed at the server's start timeout, and the call fails then.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("http://{}/", silent.local_addr().unwrap());
    write_config(dir.path(), &data, "[gateway]\ncall_timeout_s = 2\n\n");
    let mut host = start(dir.path(), &npm_env(dir.path(), &cache, &silent_url));
    host.initialize(json!({}));
    let call = host.call("fs__list_allowed_directories", json!({}));
    assert!(is_error(&call), "{call}");
    let said = text(&call);
    println!("the host was told: {said}");
    assert!(said.contains("did not finish within 2 s"), "{said}");
    assert!(said.contains("npm exec --yes --ignore-scripts"), "{said}");
    host.close();
    drop(silent);
}

#[test]
fn no_install_at_start_where_the_server_may_write_its_package_or_the_table_does_not_ask() {
    if !kernel_confines() {
        return;
    }
    let Layout { dir, data, .. } = layout();
    let registry = Registry::start(dir.path());
    let cache = dir.path().join("data/npm-cache");
    std::fs::create_dir(&cache).unwrap();
    let env = npm_env(dir.path(), &cache, &registry.url);
    // It may write `data`, where npm's cache is: it could plant what the
    // next install outside its sandbox runs, so nothing is installed.
    let config = format!(
        "[servers.fs]\ncommand = \"npx\"\nargs = [\"-y\", \"{PACKAGE}\", {:?}]\n\
         env = {{ PATH = {:?} }}\n\n\
         [servers.fs.sandbox]\nwrite = [{:?}]\nnetwork = false\nprepare = \"on-start\"\n",
        data.display().to_string(),
        node22_path(),
        data.display().to_string(),
    );
    std::fs::write(dir.path().join("hintgate.toml"), config.clone()).unwrap();
    let mut host = start(dir.path(), &env);
    host.initialize(json!({}));
    let call = host.call("fs__list_allowed_directories", json!({}));
    let said = text(&call);
    assert!(is_error(&call), "{call}");
    assert!(
        said.contains("may write") && said.contains("hintgate sandbox prepare"),
        "{said}"
    );
    host.close();
    // Without `prepare = "on-start"`: the error names the command to run.
    std::fs::write(
        dir.path().join("hintgate.toml"),
        config
            .replace("prepare = \"on-start\"\n", "")
            .replace(&format!("write = [{:?}]", data.display().to_string()), ""),
    )
    .unwrap();
    let mut host = start(dir.path(), &env);
    host.initialize(json!({}));
    let call = host.call("fs__list_allowed_directories", json!({}));
    assert!(is_error(&call), "{call}");
    assert!(text(&call).contains("hintgate sandbox prepare"), "{call}");
    host.close();
    assert!(registry.asked().is_empty(), "{:?}", registry.asked());
    assert!(installed(&cache).is_empty());
}

/// uv's settings for the test: its tool, bin and cache directories in
/// `dir`, the test peers' interpreter, and an index of wheels made again from
/// the time server the peers installed as a uv tool
/// (`tests/fixtures/wheelhouse.py`), with no other index: nothing is
/// fetched from anywhere.
fn uv_env(dir: &Path) -> Vec<(String, String)> {
    let peers_tool = crate::peers::tools().join("uv/tools/mcp-server-time");
    let site = std::fs::read_dir(peers_tool.join("lib"))
        .unwrap()
        .flatten()
        .map(|lib| lib.path().join("site-packages"))
        .find(|site| site.is_dir())
        .unwrap();
    let wheels = dir.join("wheels");
    let made = Command::new(system_python().expect("python3"))
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/wheelhouse.py"))
        .arg(&site)
        .arg(&wheels)
        .status()
        .unwrap();
    assert!(made.success(), "the wheels were not made");
    let config = dir.join("uv.toml");
    std::fs::write(
        &config,
        format!(
            "no-index = true\nfind-links = [{:?}]\n",
            wheels.display().to_string()
        ),
    )
    .unwrap();
    // The interpreter the wheels were installed for.
    let cfg = std::fs::read_to_string(peers_tool.join("pyvenv.cfg")).unwrap();
    let home = cfg
        .lines()
        .find_map(|line| line.strip_prefix("home = "))
        .unwrap()
        .trim()
        .to_owned();
    let path = |name: &str| dir.join(name).display().to_string();
    vec![
        ("UV_CONFIG_FILE".into(), config.display().to_string()),
        ("UV_TOOL_DIR".into(), path("uv-tools")),
        ("UV_TOOL_BIN_DIR".into(), path("uv-bin")),
        ("UV_CACHE_DIR".into(), path("uv-cache")),
        ("UV_PYTHON".into(), format!("{home}/python3")),
        ("UV_PYTHON_DOWNLOADS".into(), "never".into()),
    ]
}

#[test]
fn a_uvx_server_not_installed_is_installed_at_its_first_start_then_runs_confined() {
    if !kernel_confines() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let env = uv_env(dir.path());
    let tool = dir.path().join("uv-tools/mcp-server-time");
    assert!(!tool.exists());
    // `uvx` and the `uv` beside it from the peers' environment; no version
    // in the line: the one installed is the one pinned.
    let config = format!(
        "[servers.time]\ncommand = \"uvx\"\nargs = [\"mcp-server-time\", \"--local-timezone\", \"UTC\"]\n\
         env = {{ PATH = {:?} }}\ntrust = \"untrusted\"\n\n\
         [servers.time.sandbox]\nnetwork = false\nprepare = \"on-start\"\n",
        format!(
            "{}:/usr/bin:/bin",
            crate::peers::tools().join("venv/bin").display()
        ),
    );
    std::fs::write(dir.path().join("hintgate.toml"), config).unwrap();
    let mut host = start(dir.path(), &env);
    host.initialize(json!({"elicitation": {}}));
    host.respond_with(|_| json!({"action": "decline"}));
    let list = host.request("tools/list", json!({}));
    // Installed, then confined: no network and no writes, proven, so the
    // untrusted server's tools run without a prompt.
    assert_eq!(
        tool_of(&list)["annotations"]["openWorldHint"],
        false,
        "{list}\n{}",
        host.log()
    );
    let now = host.call("time__get_current_time", json!({"timezone": "UTC"}));
    assert!(!is_error(&now), "{now}");
    assert!(text(&now).contains("UTC"), "{now}");
    assert!(host.requests.is_empty(), "{:?}", host.requests);
    host.close();
    let log = std::fs::read_to_string(dir.path().join("hintgate.stderr")).unwrap();
    assert!(
        log.contains("uv tool install --no-build mcp-server-time"),
        "{log}"
    );
    assert!(
        log.contains(&format!(
            "installed mcp-server-time 2026.10.19 at {}",
            tool.display()
        )),
        "{log}"
    );
    assert!(
        log.contains("(mcp-server-time 2026.10.19)"),
        "the identity does not pin the version installed:\n{log}"
    );
    assert!(tool.join("bin/mcp-server-time").is_file());
}

fn tool_of(list: &serde_json::Value) -> &serde_json::Value {
    tool(list, "time__get_current_time")
}
