//! A server that cannot start says why, end to end: the host's error, `hintgate
//! lint --config FILE --server NAME` and `hintgate sandbox explain --start`
//! carry how the server ended and its last lines of standard error, for a
//! server that exits, one that stays silent at start, and one whose sandbox
//! denies what it needs.
#![expect(
    clippy::disallowed_macros,
    reason = "a test prints why it skips where the kernel cannot confine"
)]

use std::path::Path;

use hintgate_policy::config::SandboxConfig;
use hintgate_sandbox::{Kernel, Property};
use serde_json::{Value, json};

use crate::host::{Host, is_error, text};
use crate::util::{run, stderr, stdout};

/// What the host is told when it calls a tool of the gateway's only
/// server `name`, which does not start.
fn call_error(host: &mut Host, name: &str) -> String {
    host.initialize(json!({}));
    let called = host.request(
        "tools/call",
        json!({"name": format!("{name}__anything"), "arguments": {}}),
    );
    let said = match called.get("result") {
        Some(result) => {
            assert!(is_error(result), "{called}");
            text(result)
        }
        None => called["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    };
    assert!(!said.is_empty(), "{called}");
    said
}

fn gateway(dir: &Path, table: &str) -> Host {
    std::fs::write(dir.join("hintgate.toml"), format!("{table}\n")).unwrap();
    Host::start(dir, &["run", "--config", "hintgate.toml"], &[])
}

#[test]
fn a_server_that_writes_its_reason_and_exits_tells_the_host_why() {
    let dir = tempfile::tempdir().unwrap();
    let mut host = gateway(
        dir.path(),
        "[servers.dies]\ncommand = \"sh\"\n\
         args = [\"-c\", \"echo 'Error: Cannot find module express' >&2; exit 1\"]\n\
         trust = \"trusted\"\n",
    );
    let said = call_error(&mut host, "dies");
    assert!(said.contains("exited with status 1"), "{said}");
    assert!(said.contains("Error: Cannot find module express"), "{said}");
    assert!(!said.contains("closed its output"), "{said}");
    // Its standard error still reaches the gateway's own log.
    assert!(
        host.log().contains("Error: Cannot find module express"),
        "{}",
        host.log()
    );
}

#[test]
fn a_server_silent_at_start_fails_at_its_start_timeout_with_what_it_said() {
    let dir = tempfile::tempdir().unwrap();
    let mut host = gateway(
        dir.path(),
        "[gateway]\ncall_timeout_s = 1\n\n[servers.mute]\ncommand = \"sh\"\n\
         args = [\"-c\", \"echo 'npm warn: fetching the package from the registry' >&2; exec sleep 600\"]\n\
         trust = \"trusted\"\n",
    );
    let said = call_error(&mut host, "mute");
    assert!(
        said.contains("did not answer `initialize` within 1 s"),
        "{said}"
    );
    assert!(
        said.contains("npm warn: fetching the package from the registry"),
        "{said}"
    );
}

#[test]
fn escape_sequences_in_a_servers_standard_error_reach_the_host_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let mut host = gateway(
        dir.path(),
        "[servers.hostile]\ncommand = \"sh\"\n\
         args = [\"-c\", \"printf '\\\\033]0;owned\\\\007\\\\033[2Jcleared\\\\r\\\\n' >&2; exit 5\"]\n\
         trust = \"trusted\"\n",
    );
    let said = call_error(&mut host, "hostile");
    assert!(said.contains("exited with status 5"), "{said}");
    assert!(
        !said.contains('\u{1b}') && !said.contains('\u{7}') && !said.contains('\r'),
        "{said:?}"
    );
    assert!(said.contains("\\u{001b}]0;owned"), "{said}");
    // Nor raw in the gateway's own log.
    let log = host.log();
    assert!(!log.contains("\u{1b}]0;owned"), "{log:?}");
}

/// The system's python3 (a version manager's shim on `PATH` lives in a
/// home the sandbox does not open).
fn system_python() -> Option<&'static str> {
    ["/usr/bin/python3", "/bin/python3"]
        .into_iter()
        .find(|path| Path::new(path).is_file())
}

fn kernel_confines_files() -> bool {
    let report = Kernel::current().report(&SandboxConfig::default());
    println!("sandbox on this kernel: {}", report.summary());
    if !report.holds(Property::FilesRead) || !report.holds(Property::NetworkNamespace) {
        println!("skipped: this kernel cannot confine files and the network");
        return false;
    }
    true
}

#[test]
fn a_confined_server_whose_import_the_sandbox_denies_says_so_everywhere() {
    let Some(python) = system_python() else {
        println!("skipped: no system python3");
        return;
    };
    if !kernel_confines_files() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The server's code may be read; its library, outside the table, not.
    let code = dir.path().join("code");
    let lib = dir.path().join("lib");
    std::fs::create_dir(&code).unwrap();
    std::fs::create_dir(&lib).unwrap();
    std::fs::write(lib.join("helper.py"), "VALUE = 1\n").unwrap();
    let settings = dir.path().join("settings.json");
    std::fs::write(&settings, "{}").unwrap();
    std::fs::write(
        code.join("server.py"),
        format!(
            "import sys\n\
             sys.path.insert(0, {lib:?})\n\
             if sys.argv[1:] == ['--settings']:\n    open({settings:?}).read()\n\
             if sys.argv[1:] == ['--fetch']:\n    import socket\n    socket.create_connection(('registry.npmjs.org', 443), timeout=5)\n\
             import helper\n",
            lib = lib.display().to_string(),
            settings = settings.display().to_string(),
        ),
    )
    .unwrap();
    // Unconfined, it imports its helper and reads its settings: what fails
    // below is the sandbox's doing.
    let control = std::process::Command::new(python)
        .arg(code.join("server.py"))
        .arg("--settings")
        .output()
        .unwrap();
    assert!(control.status.success(), "{}", stderr(&control));
    let table = |name: &str, extra: &str| {
        format!(
            "[servers.{name}]\ncommand = {python:?}\nargs = [{:?}{extra}]\ntrust = \"untrusted\"\n\n\
             [servers.{name}.sandbox]\nread = [{:?}]\nnetwork = false\n",
            code.join("server.py").display().to_string(),
            code.display().to_string(),
        )
    };
    let config = format!(
        "{}\n{}\n{}",
        table("imports", ""),
        table("reads", ", \"--settings\""),
        table("fetches", ", \"--fetch\"")
    );
    std::fs::write(dir.path().join("hintgate.toml"), &config).unwrap();

    // The host: the import fails, and its error says so.
    let mut host = Host::start(dir.path(), &["run", "--config", "hintgate.toml"], &[]);
    let said = call_error(&mut host, "imports");
    assert!(said.contains("exited with status 1"), "{said}");
    assert!(
        said.contains("ModuleNotFoundError: No module named 'helper'"),
        "{said}"
    );
    // Nothing it said names a path: where the kernel's record is, honestly.
    assert!(said.contains("audit log"), "{said}");
    // A denial that names its path: the plan shows it grants none.
    let called = host.request(
        "tools/call",
        json!({"name": "reads__anything", "arguments": {}}),
    );
    let said = text(&called["result"]);
    assert!(said.contains("PermissionError"), "{called}");
    assert!(
        said.contains(&format!(
            "the sandbox grants no access to `{}`",
            settings.display()
        )),
        "{said}"
    );
    // A lookup the network namespace fails: set beside `network = false`.
    let called = host.request(
        "tools/call",
        json!({"name": "fetches__anything", "arguments": {}}),
    );
    let said = text(&called["result"]);
    assert!(said.contains("exited with status 1"), "{called}");
    assert!(
        said.contains("the sandbox gives it no network (`network = false`)"),
        "{said}"
    );
    drop(host);

    // `hintgate lint --config FILE --server NAME`: the same reason.
    let linted = run(
        dir.path(),
        &["lint", "--config", "hintgate.toml", "--server", "imports"],
    );
    assert_eq!(linted.status.code(), Some(1), "{}", stderr(&linted));
    let err = stderr(&linted);
    assert!(err.contains("exited with status 1"), "{err}");
    assert!(
        err.contains("ModuleNotFoundError: No module named 'helper'"),
        "{err}"
    );

    // `hintgate sandbox explain --start`: the same reason, in text and JSON.
    let explained = run(
        dir.path(),
        &[
            "sandbox",
            "explain",
            "imports",
            "--config",
            "hintgate.toml",
            "--start",
            "--timeout-s",
            "20",
        ],
    );
    assert_eq!(explained.status.code(), Some(1), "{}", stderr(&explained));
    let out = stdout(&explained);
    assert!(out.contains("Started in its sandbox: no: "), "{out}");
    assert!(
        out.contains("ModuleNotFoundError: No module named 'helper'"),
        "{out}"
    );
    let explained = run(
        dir.path(),
        &[
            "sandbox",
            "explain",
            "reads",
            "--config",
            "hintgate.toml",
            "--start",
            "--json",
        ],
    );
    let value: Value = serde_json::from_str(&stdout(&explained)).unwrap();
    assert_eq!(value["start"]["started"], false, "{value}");
    let error = value["start"]["error"].as_str().unwrap();
    assert!(
        error.contains(&format!(
            "the sandbox grants no access to `{}`",
            settings.display()
        )),
        "{error}"
    );
}
