//! The sandbox against a hostile program: each escape it tries fails, and
//! the test looks at the disk and the network, not only at its answer.
//!
//! A test skips, saying why, only where this kernel lacks the feature it
//! needs; each prints what the sandbox enforced.
#![expect(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::disallowed_macros,
    reason = "test code: a failed unwrap, index or panic is a failed test; it prints what was enforced"
)]

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use hintgate_policy::config::SandboxConfig;
use hintgate_sandbox::{Access, Kernel, PathRule, Plan, Property, Report};
use serde_json::Value;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/escape_server.py")
}

fn python() -> Option<&'static str> {
    ["/usr/bin/python3", "/bin/python3"]
        .into_iter()
        .find(|path| Path::new(path).is_file())
}

/// The gateway's environment as the plan sees it, with a secret that must
/// not reach the server.
fn inherited() -> BTreeMap<String, String> {
    let mut vars: BTreeMap<String, String> = std::env::vars().collect();
    vars.insert("SANDBOX_TEST_TOKEN".into(), "do-not-leak".into());
    vars
}

/// What each attempt came to: whether it succeeded, and what it said.
type Outcomes = BTreeMap<String, (bool, String)>;

/// Runs the probe confined by `sandbox`; `None` (with the reason printed)
/// when this kernel cannot hold `needs`.
fn probe(
    sandbox: &SandboxConfig,
    args: &[String],
    needs: &[Property],
) -> Option<(Outcomes, Report, PathBuf)> {
    probe_on(&Kernel::probe(), sandbox, args, needs, &[])
}

/// [`probe`] on `kernel` (what the sandbox believes the kernel offers),
/// with `extra` rules beside the plan's.
fn probe_on(
    kernel: &Kernel,
    sandbox: &SandboxConfig,
    args: &[String],
    needs: &[Property],
    extra: &[PathRule],
) -> Option<(Outcomes, Report, PathBuf)> {
    let Some(python) = python() else {
        println!("skipped: no system python3 to run the fixture");
        return None;
    };
    let report = kernel.report(sandbox);
    for need in needs {
        if !report.holds(*need) {
            let why = report
                .missing
                .iter()
                .find(|m| m.property == *need)
                .map(|m| m.why.clone());
            println!(
                "skipped: this kernel cannot enforce {need}: {}",
                why.unwrap_or_default()
            );
            return None;
        }
    }
    let mut full = vec![fixture().display().to_string(), "--probe".to_owned()];
    full.extend_from_slice(args);
    let mut plan = Plan::new(python, &full, &BTreeMap::new(), sandbox, &inherited()).unwrap();
    plan.rules.extend_from_slice(extra);
    let (mut command, confinement) = hintgate_sandbox::command(&plan, kernel).unwrap();
    println!("sandbox {}", confinement.report().summary());
    let home = confinement.home().unwrap().to_path_buf();
    let output = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let report = confinement.report().clone();
    drop(confinement);
    assert!(
        output.status.success(),
        "the probe failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut outcomes = BTreeMap::new();
    for line in String::from_utf8(output.stdout).unwrap().lines() {
        let value: Value = serde_json::from_str(line).unwrap();
        println!("  {line}");
        outcomes.insert(
            value["attempt"].as_str().unwrap().to_owned(),
            (
                value["ok"].as_bool().unwrap(),
                value["detail"].as_str().unwrap().to_owned(),
            ),
        );
    }
    Some((outcomes, report, home))
}

fn refused(outcomes: &Outcomes, attempt: &str) {
    let (ok, detail) = &outcomes[attempt];
    assert!(!ok, "{attempt} succeeded inside the sandbox: {detail}");
}

fn succeeded(outcomes: &Outcomes, attempt: &str) {
    let (ok, detail) = &outcomes[attempt];
    assert!(ok, "{attempt} failed inside the sandbox: {detail}");
}

#[test]
fn a_hostile_program_fails_at_every_escape() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("allowed.txt"), "public\n").unwrap();
    let ssh = dir.path().join("home/.ssh");
    std::fs::create_dir_all(&ssh).unwrap();
    std::fs::write(ssh.join("id_ed25519"), "PRIVATE KEY\n").unwrap();
    let escape = dir.path().join("escaped.txt");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let sandbox = SandboxConfig {
        read: vec![data.display().to_string()],
        network: false,
        ..SandboxConfig::default()
    };
    let args = vec![
        format!("allowed={}", data.join("allowed.txt").display()),
        format!("secret={}", ssh.join("id_ed25519").display()),
        format!("escape={}", escape.display()),
        format!("port={port}"),
        "forks=300".to_owned(),
    ];
    let needs = [
        Property::FilesRead,
        Property::FilesWrite,
        Property::NetworkNamespace,
    ];
    let Some((outcomes, report, home)) = probe(&sandbox, &args, &needs) else {
        return;
    };
    // What it may do, it can: the sandbox is not merely broken.
    succeeded(&outcomes, "read-allowed");
    succeeded(&outcomes, "write-home");
    // Files: nothing read outside, nothing written outside.
    refused(&outcomes, "read-secret");
    refused(&outcomes, "write-outside");
    assert!(!escape.exists(), "a file appeared outside the sandbox");
    // Network: nothing reached the listener on this machine's loopback.
    refused(&outcomes, "connect-loopback");
    match listener.accept() {
        Err(err) if err.kind() == ErrorKind::WouldBlock => {}
        other => panic!("the listener outside the sandbox was reached: {other:?}"),
    }
    // Privileges and the process tree.
    refused(&outcomes, "setuid-gain");
    refused(&outcomes, "environment");
    refused(&outcomes, "ptrace-parent");
    if report.holds(Property::Seccomp) {
        refused(&outcomes, "new-namespace");
    } else {
        println!("not checked: new namespaces (this kernel has no seccomp)");
    }
    if report.holds(Property::Scoped) {
        refused(&outcomes, "signal-parent");
    } else {
        println!("not checked: signals outside (this kernel's Landlock has no scoping)");
    }
    if report.holds(Property::ProcessLimit) {
        refused(&outcomes, "fork-many");
    } else {
        let why = report
            .missing
            .iter()
            .find(|m| m.property == Property::ProcessLimit)
            .map(|m| m.why.clone())
            .unwrap_or_default();
        println!(
            "not checked: a fork bomb is stopped only with a process limit, which does not hold here: {why}"
        );
    }
    // The private home went with the sandbox.
    assert!(!home.exists(), "the private home outlived the server");
}

#[test]
fn writes_land_in_the_writable_directory_and_nowhere_else() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let escape = dir.path().join("escaped.txt");
    let sandbox = SandboxConfig {
        write: vec![out.display().to_string()],
        ..SandboxConfig::default()
    };
    let args = vec![
        format!("escape={}", escape.display()),
        format!("allowed={}", out.join("nothing-yet").display()),
    ];
    let Some((outcomes, report, _)) = probe(&sandbox, &args, &[Property::FilesWrite]) else {
        return;
    };
    refused(&outcomes, "write-outside");
    assert!(!escape.exists());
    // A writable directory proves no "no writes".
    assert!(!report.proof(&sandbox).no_writes);
    assert!(report.proof(&sandbox).no_network);
}

#[test]
fn with_the_network_allowed_the_same_program_reaches_the_listener() {
    // The control for the network check above: without `network = false`
    // the connection goes through, so the refusal there is the sandbox's.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let sandbox = SandboxConfig {
        network: true,
        ..SandboxConfig::default()
    };
    let Some((outcomes, report, _)) =
        probe(&sandbox, &[format!("port={port}")], &[Property::FilesRead])
    else {
        return;
    };
    succeeded(&outcomes, "connect-loopback");
    assert!(!report.proof(&sandbox).no_network);
}

/// The process the daemon fixture left behind, as this machine numbers it
/// (the first word of its pid file); it must be the fixture while it runs.
fn daemon_pid(pidfile: &Path) -> u32 {
    let text = std::fs::read_to_string(pidfile).unwrap();
    println!("the daemon's pid, outside and inside: {}", text.trim());
    text.split_whitespace().next().unwrap().parse().unwrap()
}

/// Whether `pid` is still the fixture (a pid reused by something else, or
/// a zombie, which has no command line, is not).
fn fixture_alive(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains("escape_server.py"))
}

/// Polls until `pid` is gone, for at most a generous while; whether it went.
fn gone_soon(pid: u32) -> bool {
    for _ in 0..500 {
        if !fixture_alive(pid) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    false
}

#[test]
fn a_daemon_the_server_leaves_behind_dies_when_the_server_exits() {
    // The daemon calls setsid twice and its parent exits: it is in no
    // process group of the server's, so killing the group misses it. Only
    // the PID namespace, whose init ends every process in it when the
    // server exits, takes it down.
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("daemon.pid");
    let sandbox = SandboxConfig {
        write: vec![dir.path().display().to_string()],
        ..SandboxConfig::default()
    };
    let args = vec![format!("daemon={}", pidfile.display())];
    let needs = [Property::FilesWrite, Property::PidNamespace];
    let Some((outcomes, _, _)) = probe(&sandbox, &args, &needs) else {
        return;
    };
    succeeded(&outcomes, "daemon");
    let pid = daemon_pid(&pidfile);
    assert!(
        gone_soon(pid),
        "the daemon {pid} outlived the server that started it"
    );
}

#[test]
fn killing_the_process_the_gateway_holds_kills_the_whole_tree() {
    // What the gateway holds is the relay outside the namespace; SIGKILL
    // it (as the kernel does when the gateway dies, PR_SET_PDEATHSIG) and
    // the init, the server and its daemon go too, without the
    // confinement's own cleanup (it is kept alive until the end).
    let Some(python) = python() else {
        println!("skipped: no system python3 to run the fixture");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("daemon.pid");
    let sandbox = SandboxConfig {
        write: vec![dir.path().display().to_string()],
        ..SandboxConfig::default()
    };
    let kernel = Kernel::probe();
    let report = kernel.report(&sandbox);
    if !report.holds(Property::PidNamespace) {
        println!(
            "skipped: this kernel cannot enforce {}",
            Property::PidNamespace
        );
        return;
    }
    let args = vec![
        fixture().display().to_string(),
        "--daemon".to_owned(),
        pidfile.display().to_string(),
    ];
    let plan = Plan::new(python, &args, &BTreeMap::new(), &sandbox, &inherited()).unwrap();
    let (mut command, confinement) = hintgate_sandbox::command(&plan, &kernel).unwrap();
    println!("sandbox {}", confinement.report().summary());
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    for _ in 0..500 {
        if pidfile.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let pid = daemon_pid(&pidfile);
    assert!(fixture_alive(pid), "the daemon {pid} is not running");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        gone_soon(pid),
        "the daemon {pid} outlived the process the gateway holds"
    );
    drop(confinement);
}

/// The uid that owns the set-user-ID program of the test: not root, not
/// the test's own (`nobody` on most systems).
const OWNER: u32 = 65_534;

#[test]
fn a_setuid_program_does_not_change_the_effective_uid() {
    // A real escape attempt: the test makes a set-user-ID copy of `id`
    // owned by another uid, checks outside the sandbox that running it
    // does change the effective uid (so the attempt can succeed), then
    // has the hostile program run it inside, and the uid it reports must
    // be its own.
    //
    // The test runs as root here, and root's copy is owned by `nobody`:
    // the change it would make is a drop, but a change all the same, and
    // any change is what a setuid program must not get. Inside the sandbox
    // two things stop it, either enough alone: in the server's user
    // namespace only its own uid is mapped and the kernel ignores the bit
    // of a program owned by an unmapped uid; and `no_new_privs` makes
    // exec ignore the bit altogether. The second run takes the user
    // namespace away (as a kernel without one would, under
    // `best_effort`), so it is `no_new_privs` alone that holds.
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let program = dir.path().join("id-setuid");
    std::fs::copy("/usr/bin/id", &program).unwrap();
    if let Err(err) = std::os::unix::fs::chown(&program, Some(OWNER), Some(OWNER)) {
        println!("skipped: cannot give a program to uid {OWNER} ({err}); the test needs root");
        return;
    }
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let outside = std::process::Command::new(&program)
        .arg("-u")
        .output()
        .unwrap();
    let outside = String::from_utf8_lossy(&outside.stdout).trim().to_owned();
    if outside != OWNER.to_string() {
        println!(
            "skipped: the set-user-ID bit does not take effect here (the effective uid is {outside}; a nosuid file system?)"
        );
        return;
    }
    println!("outside the sandbox the program runs as uid {outside}");
    let extra = [PathRule {
        path: program.clone(),
        access: Access::ReadExec,
        why: "the set-user-ID program",
    }];
    let sandbox = SandboxConfig {
        network: true,
        best_effort: true,
        ..SandboxConfig::default()
    };
    let args = vec![format!("setuid={}", program.display())];
    let kernel = Kernel::probe();
    let without_userns = Kernel {
        user_namespaces: false,
        user_namespaces_error: Some("taken away by the test".to_owned()),
        ..kernel.clone()
    };
    for (what, kernel) in [
        ("in its user namespace", &kernel),
        ("with no_new_privs alone", &without_userns),
    ] {
        println!("{what}:");
        let Some((outcomes, _, _)) =
            probe_on(kernel, &sandbox, &args, &[Property::NoNewPrivs], &extra)
        else {
            return;
        };
        refused(&outcomes, "setuid-exec");
        let (_, detail) = &outcomes["setuid-exec"];
        assert!(detail.contains("stayed"), "{what}: {detail}");
    }
}

#[test]
fn an_x32_system_call_is_refused_by_the_filter() {
    // The x32 `unshare` carries the 64-bit architecture and a number the
    // 64-bit filter does not name. Outside, this kernel runs it or (built
    // or booted without x32) answers ENOSYS; inside, the filter must answer
    // first, with EPERM, whichever the kernel would have done.
    if std::env::consts::ARCH != "x86_64" {
        println!("skipped: x32 exists only on x86-64");
        return;
    }
    let Some(python) = python() else {
        println!("skipped: no system python3 to run the fixture");
        return;
    };
    let outside = std::process::Command::new(python)
        .arg(fixture())
        .args(["--probe", "x32=1", "only=x32-unshare"])
        .output()
        .unwrap();
    let outside = String::from_utf8_lossy(&outside.stdout)
        .lines()
        .find(|line| line.contains("x32-unshare"))
        .unwrap_or_default()
        .to_owned();
    println!("outside the sandbox: {outside}");
    let sandbox = SandboxConfig::default();
    let Some((outcomes, _, _)) = probe(&sandbox, &["x32=1".to_owned()], &[Property::Seccomp])
    else {
        return;
    };
    refused(&outcomes, "x32-unshare");
    let (_, detail) = &outcomes["x32-unshare"];
    assert!(
        detail.contains("Operation not permitted"),
        "the filter did not refuse the x32 call: {detail}"
    );
}
