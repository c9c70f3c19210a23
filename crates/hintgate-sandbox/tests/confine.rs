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
    // No capability in any set, though the test may run as root (whose
    // server is root again in its user namespace).
    refused(&outcomes, "capabilities");
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
    // The process the gateway holds leads a process group of its own (the
    // one the confinement kills), not the test's.
    let group = |pid: u32| -> u32 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        // After the command in parentheses: state, parent, group.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        rest.split_whitespace().nth(2).unwrap().parse().unwrap()
    };
    assert_eq!(group(child.id()), child.id());
    assert_ne!(group(child.id()), group(std::process::id()));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        gone_soon(pid),
        "the daemon {pid} outlived the process the gateway holds"
    );
    drop(confinement);
}

/// The uid that owns the set-user-ID programs of the test when it runs as
/// root: not root, not the test's own (`nobody` on most systems).
const OWNER: u32 = 65_534;

/// The ids of this process, from `/proc/self/status`: the effective uid,
/// the effective gid, and the supplementary groups.
fn own_ids() -> (u32, u32, Vec<u32>) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| -> Vec<u32> {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .unwrap_or_default()
            .split_whitespace()
            .map(|word| word.parse().unwrap())
            .collect()
    };
    (field("Uid:")[1], field("Gid:")[1], field("Groups:"))
}

/// Which id a set-ID program can be given here so that running it changes
/// something: as root, another uid (`nobody`) with the set-user-ID bit; as
/// an ordinary user, a supplementary group it is in, with the
/// set-group-ID bit (an ordinary user can give a file only ids it holds,
/// and only a group other than its effective one changes anything).
/// `("uid" | "gid", the id, the mode)`, or why no such id exists here.
fn setid_target() -> Result<(&'static str, u32, u32), String> {
    let (uid, gid, groups) = own_ids();
    if uid == 0 {
        return Ok(("uid", OWNER, 0o4755));
    }
    match groups.into_iter().find(|group| *group != gid) {
        Some(group) => Ok(("gid", group, 0o2755)),
        None => Err(format!(
            "the test runs as uid {uid}, not root, and is in no group but its own gid {gid}: it can give a set-ID program only ids it already runs with, so running one would change nothing and prove nothing (run it as root, or as a user in a supplementary group)"
        )),
    }
}

/// The owner (`uid`) or group (`gid`) of `path` on disk.
fn owner_of(path: &Path, kind: &str) -> u32 {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).unwrap();
    if kind == "uid" {
        meta.uid()
    } else {
        meta.gid()
    }
}

#[test]
fn a_setuid_program_does_not_change_the_effective_uid() {
    // A real escape attempt, checked on the disk: the test makes set-ID
    // copies of `id` (prints the id it runs with) and `touch` (makes a
    // file, which the kernel gives the effective uid and gid it runs
    // with), owned by another id; checks outside the sandbox that running
    // them does change the id (the `touch` copy's file on disk has the
    // other owner), then has the hostile program run both inside, and the
    // file they made there must be its own.
    //
    // As root (here and in CI) the copies belong to `nobody`: the change
    // would be a drop, but a change all the same, and any change is what
    // a set-ID program must not get. As an ordinary user they get a
    // supplementary group and the set-group-ID bit. Inside the sandbox two
    // things stop it, either enough alone: in the server's user namespace
    // only its own uid and gid are mapped and the kernel ignores the bit of
    // a program whose owner is unmapped; and `no_new_privs` makes exec
    // ignore the bit altogether. The second run takes the user namespace
    // away (as a kernel without one would, under `best_effort`), so it is
    // `no_new_privs` alone that holds.
    use std::os::unix::fs::PermissionsExt;
    let (kind, other, mode) = match setid_target() {
        Ok(target) => target,
        Err(why) => {
            println!("skipped: {why}");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // Where the copies make their files: writable by the other id too.
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let mut programs = Vec::new();
    for name in ["id", "touch"] {
        let program = dir.path().join(format!("{name}-setid"));
        std::fs::copy(format!("/usr/bin/{name}"), &program).unwrap();
        let (owner, group) = if kind == "uid" {
            (Some(other), Some(other))
        } else {
            (None, Some(other))
        };
        if let Err(err) = std::os::unix::fs::chown(&program, owner, group) {
            println!(
                "skipped: cannot give {} to {kind} {other}: {err}",
                program.display()
            );
            return;
        }
        // After chown, which clears the set-ID bits.
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(mode)).unwrap();
        programs.push(program);
    }
    let (id, touch) = (&programs[0], &programs[1]);
    let flag = if kind == "uid" { "-u" } else { "-g" };
    let printed = std::process::Command::new(id).arg(flag).output().unwrap();
    let printed = String::from_utf8_lossy(&printed.stdout).trim().to_owned();
    let made = out.join("made-outside");
    let touched = std::process::Command::new(touch)
        .arg(&made)
        .status()
        .unwrap();
    if printed != other.to_string() || !touched.success() || owner_of(&made, kind) != other {
        println!(
            "skipped: the set-ID bit does not take effect here (the program printed {kind} {printed}; a nosuid file system?)"
        );
        return;
    }
    println!(
        "outside the sandbox the copies run as {kind} {other}: {} belongs to {kind} {}",
        made.display(),
        owner_of(&made, kind)
    );
    let extra: Vec<PathRule> = programs
        .iter()
        .map(|program| PathRule {
            path: program.clone(),
            access: Access::ReadExec,
            why: "the set-ID program",
        })
        .collect();
    let sandbox = SandboxConfig {
        write: vec![out.display().to_string()],
        network: true,
        best_effort: true,
        ..SandboxConfig::default()
    };
    let kernel = Kernel::probe();
    let without_userns = Kernel {
        user_namespaces: false,
        user_namespaces_error: Some("taken away by the test".to_owned()),
        pid_namespaces: kernel.root && kernel.pid_namespaces,
        ..kernel.clone()
    };
    let (own_uid, own_gid, _) = own_ids();
    let own = if kind == "uid" { own_uid } else { own_gid };
    for (what, kernel, file) in [
        ("in its user namespace", &kernel, "made-in-userns"),
        ("with no_new_privs alone", &without_userns, "made-by-nnp"),
    ] {
        println!("{what}:");
        let target = out.join(file);
        let args = vec![
            format!("setid={}", id.display()),
            format!("setid_kind={kind}"),
            format!("setid_touch={}", touch.display()),
            format!("setid_target={}", target.display()),
        ];
        let Some((outcomes, _, _)) =
            probe_on(kernel, &sandbox, &args, &[Property::NoNewPrivs], &extra)
        else {
            return;
        };
        refused(&outcomes, "setid-exec");
        refused(&outcomes, "setid-touch");
        let (_, detail) = &outcomes["setid-exec"];
        assert!(detail.contains("stayed"), "{what}: {detail}");
        // The disk says which id the program ran with.
        let owner = owner_of(&target, kind);
        println!("  {} belongs to {kind} {owner}", target.display());
        assert_eq!(
            owner, own,
            "{what}: the set-ID program ran as {kind} {owner}"
        );
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

/// A listening Unix stream socket, a Unix datagram socket and an abstract
/// listener, all outside the sandbox; each is checked for anything that
/// arrived.
struct UnixPeers {
    stream: std::os::unix::net::UnixListener,
    stream_path: PathBuf,
    datagram: std::os::unix::net::UnixDatagram,
    datagram_path: PathBuf,
    abstract_listener: std::os::unix::net::UnixListener,
    abstract_name: String,
}

impl UnixPeers {
    /// Binds the sockets in `dir` (the local daemon's socket in a path the
    /// sandbox may write: the worst case, since reads and writes there are
    /// allowed).
    fn bind(dir: &Path) -> Self {
        use std::os::linux::net::SocketAddrExt;
        use std::os::unix::net::{SocketAddr, UnixDatagram, UnixListener};
        let stream_path = dir.join("daemon.sock");
        let stream = UnixListener::bind(&stream_path).unwrap();
        stream.set_nonblocking(true).unwrap();
        let datagram_path = dir.join("log.sock");
        let datagram = UnixDatagram::bind(&datagram_path).unwrap();
        datagram.set_nonblocking(true).unwrap();
        // Unique on this machine: abstract names live in the network
        // namespace, shared by every test of this process and others.
        static BOUND: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let abstract_name = format!(
            "hintgate-test-{}-{}",
            std::process::id(),
            BOUND.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        );
        let address = SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap();
        let abstract_listener = UnixListener::bind_addr(&address).unwrap();
        abstract_listener.set_nonblocking(true).unwrap();
        Self {
            stream,
            stream_path,
            datagram,
            datagram_path,
            abstract_listener,
            abstract_name,
        }
    }

    /// Whether anything connected to the stream socket or the abstract one,
    /// or sent to the datagram socket.
    fn reached(&self) -> Vec<&'static str> {
        let mut reached = Vec::new();
        if !matches!(self.stream.accept(), Err(err) if err.kind() == ErrorKind::WouldBlock) {
            reached.push("the stream socket");
        }
        let mut buf = [0_u8; 64];
        if !matches!(self.datagram.recv(&mut buf), Err(err) if err.kind() == ErrorKind::WouldBlock)
        {
            reached.push("the datagram socket");
        }
        if !matches!(self.abstract_listener.accept(), Err(err) if err.kind() == ErrorKind::WouldBlock)
        {
            reached.push("the abstract socket");
        }
        reached
    }
}

/// Runs the fixture outside any sandbox with only the attempts `only`, and
/// returns what they came to.
fn outside(args: &[String], only: &str) -> Option<Outcomes> {
    let python = python()?;
    let output = std::process::Command::new(python)
        .arg(fixture())
        .arg("--probe")
        .args(args)
        .arg(format!("only={only}"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let mut outcomes = BTreeMap::new();
    for line in String::from_utf8(output.stdout).unwrap().lines() {
        println!("  outside: {line}");
        let value: Value = serde_json::from_str(line).unwrap();
        outcomes.insert(
            value["attempt"].as_str().unwrap().to_owned(),
            (
                value["ok"].as_bool().unwrap(),
                value["detail"].as_str().unwrap().to_owned(),
            ),
        );
    }
    Some(outcomes)
}

fn unix_args(peers: &UnixPeers) -> Vec<String> {
    vec![
        format!("unix={}", peers.stream_path.display()),
        format!("unixdgram={}", peers.datagram_path.display()),
        format!("abstract={}", peers.abstract_name),
        format!("uring={}", peers.stream_path.display()),
        "pairs=1".to_owned(),
    ]
}

#[test]
fn without_the_network_no_unix_socket_reaches_a_daemon_outside() {
    // A local daemon's socket (docker.sock, a database's, /dev/log) under
    // a path the server may write: before Landlock ABI 9 nothing in the
    // file system rules stops a connect there, and the network namespace
    // does not hold pathname sockets. The seccomp filter refuses the Unix
    // sockets (and ABI 9's right denies the connection, where the kernel
    // has it); socketpair plumbing of the stream and seqpacket kinds stays.
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    let peers = UnixPeers::bind(&run);
    // The control: outside, the same attempts reach all three, io_uring
    // included (the ring is how a program goes around a seccomp filter).
    let Some(control) = outside(
        &unix_args(&peers),
        "unix-connect,unix-sendto,unix-abstract,uring-connect",
    ) else {
        println!("skipped: no system python3 to run the fixture");
        return;
    };
    for attempt in ["unix-connect", "unix-sendto", "unix-abstract"] {
        succeeded(&control, attempt);
    }
    let uring_outside = control["uring-connect"].0;
    if !uring_outside {
        println!(
            "io_uring does not work outside the sandbox either ({}): its refusal inside is checked, not what it would have let through",
            control["uring-connect"].1
        );
    }
    // Drain what the control sent.
    let reached = peers.reached();
    assert!(reached.contains(&"the stream socket"), "{reached:?}");
    while peers.stream.accept().is_ok() {}

    let sandbox = SandboxConfig {
        write: vec![run.display().to_string()],
        network: false,
        ..SandboxConfig::default()
    };
    let needs = [Property::NetworkNamespace, Property::UnixSockets];
    let Some((outcomes, report, _)) = probe(&sandbox, &unix_args(&peers), &needs) else {
        return;
    };
    if report.holds(Property::UnixConnectDenied) {
        println!("Landlock denies the connection too (ABI 9 or later)");
    } else {
        println!("the seccomp filter alone refuses the Unix sockets (Landlock before ABI 9)");
    }
    for attempt in [
        "unix-connect",
        "unix-sendto",
        "dgram-pair-sendto",
        "stream-pair-sendto",
        "unix-abstract",
        "uring-connect",
        "vsock",
    ] {
        refused(&outcomes, attempt);
    }
    succeeded(&outcomes, "stream-pair");
    succeeded(&outcomes, "seqpacket-pair");
    // The daemon's side: nothing arrived at any of the three.
    assert_eq!(
        peers.reached(),
        Vec::<&str>::new(),
        "reached from the sandbox"
    );
    assert!(report.proof(&sandbox).no_network);
}

#[test]
fn with_the_network_allowed_a_unix_socket_is_reached_but_not_through_io_uring() {
    // The control for the test above: with `network = true` the Unix
    // socket under a writable path is reached, so the refusal there is
    // `network = false`'s. io_uring stays refused whatever the network.
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    let peers = UnixPeers::bind(&run);
    let sandbox = SandboxConfig {
        write: vec![run.display().to_string()],
        network: true,
        ..SandboxConfig::default()
    };
    let Some((outcomes, report, _)) = probe(
        &sandbox,
        &unix_args(&peers),
        &[Property::FilesRead, Property::Seccomp],
    ) else {
        return;
    };
    succeeded(&outcomes, "unix-connect");
    assert!(peers.reached().contains(&"the stream socket"));
    refused(&outcomes, "uring-connect");
    let (_, detail) = &outcomes["uring-connect"];
    assert!(
        detail.contains("io_uring_setup") && detail.contains("not implemented"),
        "{detail}"
    );
    assert!(!report.holds(Property::UnixSockets));
    assert!(!report.proof(&sandbox).no_network);
}

#[test]
fn the_filter_refuses_io_uring_and_the_calls_around_it() {
    // Each call with harmless arguments: outside, the kernel answers as it
    // does (EBADF, EFAULT, or it just works); inside, the filter answers
    // first, EPERM, or ENOSYS for io_uring (a kernel without it).
    if std::env::consts::ARCH != "x86_64" {
        println!("skipped: the fixture names the calls by their x86-64 numbers");
        return;
    }
    let args = ["calls=1".to_owned()];
    let Some(_) = outside(&args, "call-*") else {
        println!("skipped: no system python3 to run the fixture");
        return;
    };
    let Some((outcomes, _, _)) = probe(&SandboxConfig::default(), &args, &[Property::Seccomp])
    else {
        return;
    };
    let calls: Vec<&String> = outcomes.keys().filter(|k| k.starts_with("call-")).collect();
    assert!(calls.len() >= 14, "{calls:?}");
    for call in calls {
        refused(&outcomes, call);
        let (_, detail) = &outcomes[call];
        let expected = if call.starts_with("call-io_uring") {
            "ENOSYS"
        } else {
            "EPERM"
        };
        assert!(detail.contains(expected), "{call}: {detail}");
    }
}

#[test]
fn a_server_cannot_make_a_file_setuid_or_world_writable() {
    // Landlock does not control a file's mode, and the server owns every
    // file of its uid (as root, every system file): it must not plant a
    // setuid bit or open a file to every local user, by path (a file
    // outside all its paths) or through a descriptor (a file it may read).
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let readable = data.join("readable");
    std::fs::write(&readable, "public\n").unwrap();
    let elsewhere = dir.path().join("elsewhere");
    std::fs::write(&elsewhere, "private\n").unwrap();
    for file in [&readable, &elsewhere] {
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let sandbox = SandboxConfig {
        read: vec![data.display().to_string()],
        ..SandboxConfig::default()
    };
    let args = vec![
        format!("chmod={}", elsewhere.display()),
        format!("allowed={}", readable.display()),
    ];
    let Some((outcomes, _, _)) = probe(&sandbox, &args, &[Property::Seccomp]) else {
        return;
    };
    succeeded(&outcomes, "read-allowed");
    refused(&outcomes, "chmod-setuid");
    refused(&outcomes, "chmod-world-writable");
    refused(&outcomes, "fchmod-setuid");
    for file in [&readable, &elsewhere] {
        let mode = std::fs::metadata(file).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o644, "{} changed to {mode:o}", file.display());
    }
}

#[test]
fn the_limits_on_open_files_and_address_space_hold() {
    let args = ["files=200".to_owned(), "memory=1024".to_owned()];
    // The control: with the default limits (1024 files, 64 GiB), the same
    // program opens 200 files and maps a GiB.
    let Some((outcomes, _, _)) = probe(
        &SandboxConfig::default(),
        &args,
        &[Property::ResourceLimits],
    ) else {
        return;
    };
    succeeded(&outcomes, "open-many");
    succeeded(&outcomes, "allocate");
    let tight = SandboxConfig {
        max_open_files: Some(64),
        max_memory_mb: Some(512),
        ..SandboxConfig::default()
    };
    let Some((outcomes, _, _)) = probe(&tight, &args, &[Property::ResourceLimits]) else {
        return;
    };
    refused(&outcomes, "open-many");
    refused(&outcomes, "allocate");
    assert!(
        outcomes["open-many"].1.contains("Too many open files"),
        "{}",
        outcomes["open-many"].1
    );
}

/// The script a confined server runs for the egress test: it prints its
/// proxy variables, says hello through the proxy's address and reads the
/// answer, then tries the test's own loopback listener and another port of
/// its own loopback, each directly.
const EGRESS_SCRIPT: &str = r#"
import json, os, socket, sys
def attempt(name, fn):
    try:
        print(json.dumps({"attempt": name, "ok": True, "detail": fn()}), flush=True)
    except OSError as err:
        print(json.dumps({"attempt": name, "ok": False, "detail": repr(err)}), flush=True)
def proxy():
    s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
    s.sendall(b"hello")
    return s.recv(16).decode()
def direct(port):
    return lambda: socket.create_connection(("127.0.0.1", port), timeout=5).close() or "connected"
print(json.dumps({"attempt": "env", "ok": True, "detail": os.environ.get("HTTPS_PROXY", "") + " " + os.environ.get("all_proxy", "") + " " + os.environ.get("NODE_USE_ENV_PROXY", "")}), flush=True)
attempt("proxy", proxy)
attempt("outside", direct(int(sys.argv[1])))
attempt("other-port", direct(3129))
"#;

#[test]
fn a_list_of_hosts_gives_the_gateway_a_listener_in_the_servers_namespace_and_nothing_else() {
    let Some(python) = python() else {
        println!("skipped: no system python3");
        return;
    };
    let kernel = Kernel::probe();
    let sandbox = SandboxConfig {
        egress: vec![hintgate_policy::config::Egress::parse("api.example.com:443").unwrap()],
        ..SandboxConfig::default()
    };
    let report = kernel.report(&sandbox);
    if !report.holds(Property::NetworkNamespace) || !report.holds(Property::FilesRead) {
        println!("skipped: this kernel cannot make a network namespace or confine files");
        return;
    }
    let proof = report.proof(&sandbox);
    assert!(!proof.no_network && proof.egress_only, "{proof:?}");
    // A listener of the test's, on this machine's loopback: the server must
    // not reach it directly.
    let outside = TcpListener::bind("127.0.0.1:0").unwrap();
    outside.set_nonblocking(true).unwrap();
    let port = outside.local_addr().unwrap().port();
    let args = vec!["-c".to_owned(), EGRESS_SCRIPT.to_owned(), port.to_string()];
    let plan = Plan::new(python, &args, &BTreeMap::new(), &sandbox, &inherited()).unwrap();
    let (mut command, mut confinement) = hintgate_sandbox::command(&plan, &kernel).unwrap();
    println!("sandbox {}", confinement.report().summary());
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    confinement.started(Some(child.id()));
    let listener = confinement
        .egress_listener()
        .unwrap()
        .expect("a listener for the egress proxy");
    // Only once: a second call has nothing.
    assert!(confinement.egress_listener().unwrap().is_none());
    // What the server connects to at 127.0.0.1:3128 in its namespace is
    // this listener, in the test's hands.
    let (mut stream, _) = listener.accept().unwrap();
    let mut hello = [0_u8; 5];
    std::io::Read::read_exact(&mut stream, &mut hello).unwrap();
    assert_eq!(&hello, b"hello");
    std::io::Write::write_all(&mut stream, b"welcome").unwrap();
    drop(stream);
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    println!("{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success());
    let mut outcomes = Outcomes::new();
    for line in stdout.lines() {
        let value: Value = serde_json::from_str(line).unwrap();
        outcomes.insert(
            value["attempt"].as_str().unwrap().to_owned(),
            (
                value["ok"].as_bool().unwrap(),
                value["detail"].as_str().unwrap().to_owned(),
            ),
        );
    }
    assert_eq!(
        outcomes["env"].1,
        "http://127.0.0.1:3128 http://127.0.0.1:3128 1"
    );
    succeeded(&outcomes, "proxy");
    assert_eq!(outcomes["proxy"].1, "welcome");
    refused(&outcomes, "outside");
    refused(&outcomes, "other-port");
    assert_eq!(
        outside.accept().map_err(|err| err.kind()).unwrap_err(),
        ErrorKind::WouldBlock,
        "the test's listener was reached from the sandbox"
    );
    drop(confinement);
}

#[test]
fn without_a_list_of_hosts_there_is_no_egress_listener() {
    let Some(python) = python() else {
        println!("skipped: no system python3");
        return;
    };
    let kernel = Kernel::probe();
    for sandbox in [
        SandboxConfig::default(),
        SandboxConfig {
            network: true,
            ..SandboxConfig::default()
        },
    ] {
        let plan = Plan::new(
            python,
            &[
                "-c".to_owned(),
                "import os; assert 'HTTPS_PROXY' not in os.environ".to_owned(),
            ],
            &BTreeMap::new(),
            &sandbox,
            &inherited(),
        )
        .unwrap();
        let Ok((mut command, mut confinement)) = hintgate_sandbox::command(&plan, &kernel) else {
            println!("skipped: this kernel cannot hold the sandbox");
            return;
        };
        let status = command.stdin(Stdio::null()).status().unwrap();
        assert!(status.success());
        assert!(confinement.egress_listener().unwrap().is_none());
    }
}
