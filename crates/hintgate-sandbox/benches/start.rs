//! Cold start of a server with and without the sandbox: from nothing to
//! the program's exit, for a program that does nothing (`true`), so what is
//! measured is what starting costs, not what the server does.
//!
//! - `plain`: fork and exec, as the gateway starts an unsandboxed server;
//! - `sandboxed`: the whole sandboxed start: the plan (resolving the
//!   program, the paths it needs), the private home, the Landlock ruleset,
//!   the seccomp programs, the pids cgroup where one is used, and in the
//!   child the namespaces, limits and restrictions; then the home and
//!   group removed. The kernel probe is made once per gateway and is not
//!   counted;
//! - `plan`: the plan alone (launcher resolution included), no process.
//!
//! `cargo bench -p hintgate-sandbox --bench start` runs it in full; under
//! `cargo test` each case runs once, so it stays a test that the path works.
#![expect(
    clippy::unwrap_used,
    reason = "benchmark set-up: a failure should stop it loudly"
)]

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

use hintgate_policy::config::SandboxConfig;
use hintgate_sandbox::{Kernel, Plan};

fn main() {
    divan::main();
}

fn program() -> &'static str {
    if std::path::Path::new("/usr/bin/true").exists() {
        "/usr/bin/true"
    } else {
        "/bin/true"
    }
}

#[divan::bench]
fn plain() {
    let status = Command::new(program())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
}

#[divan::bench]
fn sandboxed(bencher: divan::Bencher<'_, '_>) {
    let kernel = Kernel::current();
    let inherited: BTreeMap<String, String> = std::env::vars().collect();
    let table = SandboxConfig::default();
    bencher.bench(|| {
        let plan = Plan::new(program(), &[], &BTreeMap::new(), &table, &inherited).unwrap();
        let (mut command, mut confinement) = hintgate_sandbox::command(&plan, kernel).unwrap();
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        confinement.started(Some(child.id()));
        assert!(child.wait().unwrap().success());
        drop(confinement);
    });
}

/// The plan alone for a plain program: what launcher resolution adds to it
/// (recognising no launcher and no virtual environment) must stay a few
/// comparisons and `stat` calls, never a process.
#[divan::bench]
fn plan(bencher: divan::Bencher<'_, '_>) {
    let inherited: BTreeMap<String, String> = std::env::vars().collect();
    let table = SandboxConfig::default();
    bencher.bench(|| {
        let plan = Plan::new(program(), &[], &BTreeMap::new(), &table, &inherited).unwrap();
        assert!(plan.launch.is_none());
        plan
    });
}
