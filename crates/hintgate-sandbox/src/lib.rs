//! A kernel sandbox for hintgate's stdio servers (design §6).
//!
//! A server whose configuration has a `[servers.NAME.sandbox]` table is
//! started confined, with no daemon and no root:
//!
//! - **files** (Landlock): reads only under `read` and what the program needs
//!   to run ([`Plan`] computes that from the command), writes only under
//!   `write` and a private home the gateway makes and removes, execution only
//!   of the program, its interpreter and the system's libraries;
//! - **network**: `network = false` puts the server in a new user and network
//!   namespace before exec (a loopback that is down, nothing routable),
//!   Landlock denies TCP bind and connect where the kernel's ABI has it, and
//!   no Unix socket reaches a local daemon (seccomp refuses them but for
//!   `socketpair` plumbing; Landlock ABI 9 denies the connection too);
//!   `network = ["host:port", ...]` is the same namespace with one way
//!   out: a listener on its 127.0.0.1:3128, made there by the child and
//!   handed to the gateway ([`Confinement::egress_listener`]), whose egress
//!   proxy reaches only those hosts;
//! - **everything else**: a clean environment, `no_new_privs`, resource
//!   limits (open files, processes counted in the server's own user
//!   namespace, address space), its own process group and, where the
//!   kernel allows, its own PID namespace under a small init, so that every
//!   process it starts dies with it and with the gateway; Landlock's signal
//!   and abstract-socket scoping, no capability in any set, and a seccomp
//!   filter that refuses the obvious escapes (`ptrace`, `mount`, new
//!   namespaces, io_uring, the kernel keyring, `bpf`, module loading,
//!   setuid and world-writable modes).
//!
//! What the kernel cannot enforce is named: the server does not start
//! ([`SandboxError::NotEnforceable`]) unless the table says
//! `best_effort = true`, and then the [`Report`] says exactly which
//! [`Property`] holds, and [`Report::proof`] proves only those to the policy.
//!
//! This is the only crate of the workspace with `unsafe` code: the system
//! calls between fork and exec, and the kernel probe. Each block says why it
//! is sound. Other platforms get the same interface and an honest "not
//! enforced" ([`Kernel::probe`] finds nothing there).

use std::collections::BTreeSet;
use std::fmt;
use std::path::PathBuf;

use hintgate_policy::config::SandboxConfig;
use hintgate_policy::tool::SandboxProof;
use serde::Serialize;

#[cfg(target_os = "linux")]
mod cgroup;
pub mod denial;
pub mod launch;
mod plan;
#[cfg(target_os = "linux")]
#[expect(
    unsafe_code,
    reason = "fork, unshare, prctl, setrlimit and the Landlock and seccomp system calls; each block documents its soundness"
)]
mod sys;

pub use launch::Resolution;
pub use plan::{Access, Limits, PathRule, Plan};

/// What this kernel can enforce, found by asking it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Kernel {
    /// The Landlock ABI version the kernel offers; 0 when it has none (or
    /// Landlock is disabled).
    pub landlock_abi: u32,
    /// A process may make a new user namespace (and, in it, a network
    /// namespace) without privilege.
    pub user_namespaces: bool,
    /// Why not, when it may not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_namespaces_error: Option<String>,
    /// The kernel has seccomp filters.
    pub seccomp: bool,
    /// The gateway runs as root: the kernel does not count root's processes
    /// against `RLIMIT_NPROC`, so the process limit needs a cgroup.
    pub root: bool,
    /// A `pids` cgroup the gateway may make children in (root, or a
    /// delegated one): the process limit where `RLIMIT_NPROC` cannot hold.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pids_cgroup: Option<PathBuf>,
    /// A child may make a new PID namespace (in a new user namespace, or
    /// alone as root): the server's whole process tree dies with it.
    pub pid_namespaces: bool,
}

/// One property a running sandbox may enforce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Property {
    /// Reads only under the allowed paths (Landlock).
    FilesRead,
    /// Writes, truncation and renames only under the writable paths
    /// (Landlock ABI 3 or later: earlier ones cannot stop truncation).
    FilesWrite,
    /// A new user and network namespace: no route out, loopback down.
    NetworkNamespace,
    /// Landlock denies TCP bind and connect (ABI 4 or later).
    TcpDenied,
    /// With `network = false`, no Unix socket reaches anything outside: no
    /// local daemon's pathname socket (`docker.sock`, a database's,
    /// `/dev/log`), and no socket of another address family the network
    /// namespace does not hold (seccomp refuses them; Landlock ABI 9 or
    /// later denies connecting to pathname sockets as well).
    UnixSockets,
    /// Landlock denies connecting and sending to pathname Unix sockets
    /// (ABI 9 or later): the second layer of [`Property::UnixSockets`].
    UnixConnectDenied,
    /// Landlock scoping: no signals to, and no abstract sockets of,
    /// processes outside the sandbox (ABI 6 or later).
    Scoped,
    /// The seccomp filter of obvious escapes.
    Seccomp,
    /// `no_new_privs`: a setuid program gains nothing; and the server keeps
    /// no capability (an empty bounding, inheritable and ambient set), even
    /// as root in its own user namespace.
    NoNewPrivs,
    /// Open files and address space are limited.
    ResourceLimits,
    /// The number of processes is limited (in the server's own user
    /// namespace, so the user's other processes do not count).
    ProcessLimit,
    /// Its own PID namespace under a small init: every process it starts,
    /// even one that left its process group, dies with it and with the
    /// gateway.
    PidNamespace,
    /// Only the variables the plan names are set.
    CleanEnvironment,
}

/// What a started (or planned) sandbox enforces and what it does not.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The properties that hold.
    pub held: BTreeSet<Property>,
    /// The properties that do not, each with why.
    pub missing: Vec<Missing>,
}

/// A property the kernel cannot enforce, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Missing {
    /// The property.
    pub property: Property,
    /// Whether the sandbox table asked for it (a required property stops
    /// the server unless `best_effort = true`).
    pub required: bool,
    /// A second layer whose first holds: another property that does hold
    /// keeps out what this one would (TCP while the network namespace
    /// holds, Landlock's Unix-socket right while the seccomp filter refuses
    /// the sockets), so the sandbox stops the same things without it.
    pub covered: bool,
    /// Why it does not hold, in plain words.
    pub why: String,
}

/// Why a sandboxed server cannot be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The kernel cannot enforce what the sandbox table asks, and the table
    /// does not accept that (`best_effort = true`).
    #[error(
        "the kernel cannot enforce this sandbox: {}; the server is not started (set `best_effort = true` in its sandbox table to run it with only what holds)",
        list_missing(.0)
    )]
    NotEnforceable(Vec<Missing>),
    /// The program could not be found.
    #[error("cannot find `{0}` on PATH")]
    NotFound(String),
    /// A launcher's package is not installed: the launcher would fetch it
    /// at start, which nothing inside the sandbox may do.
    #[error(
        "`{launcher}` would fetch `{package}` inside the sandbox, where nothing is fetched: {detail}; install it once, outside, with `{}`",
        launch::PREPARE_HINT
    )]
    NotPrepared {
        /// The launcher (`npx`, `uvx`, ...).
        launcher: String,
        /// The package spec (or project) as the config writes it.
        package: String,
        /// What was looked for, and where.
        detail: String,
    },
    /// A sandbox path or the private home could not be used.
    #[error("sandbox path `{path}`: {source}")]
    Path {
        /// The path.
        path: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// The Landlock ruleset or the seccomp filter could not be built.
    #[error("cannot build the sandbox: {0}")]
    Build(String),
}

/// A started sandbox: what it enforces, its private home (removed when
/// this is dropped) and its process group (killed when this is dropped).
#[derive(Debug)]
pub struct Confinement {
    report: Report,
    #[cfg(target_os = "linux")]
    pids: Option<cgroup::PidsGroup>,
    home: Option<tempfile::TempDir>,
    group: Option<u32>,
    /// With `network = ["host:port", ...]`: where the egress proxy's
    /// listener arrives from the child.
    #[cfg(target_os = "linux")]
    egress: Option<sys::egress::Channel>,
}

// === impl Kernel ===

impl Kernel {
    /// Asks this kernel what it can enforce. Cheap (a few system calls and
    /// one short-lived child process); the gateway asks once per start of a
    /// sandboxed server.
    pub fn probe() -> Self {
        #[cfg(target_os = "linux")]
        {
            sys::probe()
        }
        #[cfg(not(target_os = "linux"))]
        {
            Self {
                landlock_abi: 0,
                user_namespaces: false,
                user_namespaces_error: Some("not Linux".to_owned()),
                seccomp: false,
                root: false,
                pids_cgroup: None,
                pid_namespaces: false,
            }
        }
    }

    /// This kernel, probed once per process (what a kernel offers does not
    /// change while the gateway runs).
    pub fn current() -> &'static Self {
        static KERNEL: std::sync::OnceLock<Kernel> = std::sync::OnceLock::new();
        KERNEL.get_or_init(Self::probe)
    }

    /// Whether `RLIMIT_NPROC`, counted in the server's own user namespace,
    /// holds the process limit (not for root, whose processes the kernel
    /// does not count).
    pub fn process_limit_by_rlimit(&self) -> bool {
        self.user_namespaces && !self.root
    }

    /// What a sandbox as `sandbox` asks would enforce on this kernel.
    pub fn report(&self, sandbox: &SandboxConfig) -> Report {
        let mut report = Report::default();
        let abi = self.landlock_abi;
        let mut check = |property: Property, holds: bool, required: bool, why: &str| {
            if holds {
                report.held.insert(property);
            } else {
                report.missing.push(Missing {
                    property,
                    required,
                    covered: false,
                    why: why.to_owned(),
                });
            }
        };
        check(
            Property::FilesRead,
            abi >= 1,
            true,
            "the kernel has no Landlock (or it is disabled), so reads cannot be confined",
        );
        check(
            Property::FilesWrite,
            abi >= 3,
            true,
            if abi == 0 {
                "the kernel has no Landlock (or it is disabled), so writes cannot be confined"
            } else {
                "the kernel's Landlock is older than ABI 3 and cannot stop a file from being truncated"
            },
        );
        let userns_why = self
            .user_namespaces_error
            .clone()
            .unwrap_or_else(|| "user namespaces are not available".to_owned());
        if !sandbox.network {
            check(
                Property::NetworkNamespace,
                self.user_namespaces,
                true,
                &format!("no new network namespace: {userns_why}"),
            );
            check(
                Property::TcpDenied,
                abi >= 4,
                false,
                "the kernel's Landlock is older than ABI 4 (no TCP rights); the network namespace alone keeps the network out",
            );
            // A pathname Unix socket is reached through the file system, not
            // the network namespace: seccomp refuses the sockets, Landlock
            // ABI 9 refuses the connection; either is enough.
            check(
                Property::UnixSockets,
                self.seccomp || abi >= 9,
                true,
                "the kernel has no seccomp filters and its Landlock is older than ABI 9: the server could connect to a local daemon's Unix socket (docker.sock, a database's) by its path",
            );
            check(
                Property::UnixConnectDenied,
                abi >= 9,
                false,
                if self.seccomp {
                    "the kernel's Landlock is older than ABI 9 (no Unix-socket right); the seccomp filter alone keeps Unix sockets out"
                } else {
                    "the kernel's Landlock is older than ABI 9 (no Unix-socket right)"
                },
            );
        }
        check(
            Property::Scoped,
            abi >= 6,
            false,
            "the kernel's Landlock is older than ABI 6 (no signal or abstract-socket scoping)",
        );
        check(
            Property::Seccomp,
            self.seccomp,
            false,
            "the kernel has no seccomp filters",
        );
        check(Property::NoNewPrivs, true, true, "");
        check(Property::ResourceLimits, true, true, "");
        let process_why = if self.root {
            "the gateway runs as root, whose processes the kernel does not count against a limit, and it cannot make a pids cgroup".to_owned()
        } else {
            format!(
                "the process limit needs the server's own user namespace or a delegated pids cgroup: {userns_why}"
            )
        };
        check(
            Property::ProcessLimit,
            self.process_limit_by_rlimit() || self.pids_cgroup.is_some(),
            sandbox.max_processes.is_some(),
            &process_why,
        );
        check(
            Property::PidNamespace,
            self.pid_namespaces,
            false,
            &format!(
                "no new PID namespace ({userns_why}): its process group is killed with it and the kernel kills it when the gateway dies, but a process that leaves the group (setsid) can outlive both"
            ),
        );
        check(Property::CleanEnvironment, true, true, "");
        let network_namespace = report.holds(Property::NetworkNamespace);
        for missing in &mut report.missing {
            missing.covered = match missing.property {
                Property::TcpDenied => network_namespace,
                Property::UnixConnectDenied => self.seccomp,
                _ => false,
            };
        }
        report
    }
}

// === impl Property ===

impl Property {
    /// Every property, in report order.
    pub const ALL: [Self; 13] = [
        Self::FilesRead,
        Self::FilesWrite,
        Self::NetworkNamespace,
        Self::TcpDenied,
        Self::UnixSockets,
        Self::UnixConnectDenied,
        Self::Scoped,
        Self::Seccomp,
        Self::NoNewPrivs,
        Self::ResourceLimits,
        Self::ProcessLimit,
        Self::PidNamespace,
        Self::CleanEnvironment,
    ];

    /// The stable name of the property, as in JSON and the log.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FilesRead => "files-read",
            Self::FilesWrite => "files-write",
            Self::NetworkNamespace => "network-namespace",
            Self::TcpDenied => "tcp-denied",
            Self::UnixSockets => "unix-sockets",
            Self::UnixConnectDenied => "unix-connect-denied",
            Self::Scoped => "scoped",
            Self::Seccomp => "seccomp",
            Self::NoNewPrivs => "no-new-privs",
            Self::ResourceLimits => "resource-limits",
            Self::ProcessLimit => "process-limit",
            Self::PidNamespace => "pid-namespace",
            Self::CleanEnvironment => "clean-environment",
        }
    }

    /// What the property means, in plain words.
    pub fn describe(self) -> &'static str {
        match self {
            Self::FilesRead => "reads only under the allowed paths (Landlock)",
            Self::FilesWrite => {
                "writes only under the writable paths and its private home (Landlock)"
            }
            Self::NetworkNamespace => {
                "no network: its own user and network namespace, loopback down"
            }
            Self::TcpDenied => "TCP bind and connect denied (Landlock)",
            Self::UnixSockets => {
                "no local daemon's Unix socket (docker.sock, a database's, /dev/log) reachable; socketpair plumbing only"
            }
            Self::UnixConnectDenied => "connecting to pathname Unix sockets denied (Landlock)",
            Self::Scoped => "no signals to and no abstract sockets of processes outside (Landlock)",
            Self::Seccomp => {
                "ptrace, mount, new namespaces, keyring, bpf, io_uring, setuid bits refused (seccomp)"
            }
            Self::NoNewPrivs => {
                "no new privileges: setuid programs gain nothing, and it keeps no capability"
            }
            Self::ResourceLimits => "open files and address space limited",
            Self::ProcessLimit => "number of processes limited",
            Self::PidNamespace => {
                "every process it starts dies with it and with the gateway (its own PID namespace)"
            }
            Self::CleanEnvironment => "a clean environment and a private home",
        }
    }
}

impl fmt::Display for Property {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// === impl Report ===

impl Report {
    /// Whether `property` holds.
    pub fn holds(&self, property: Property) -> bool {
        self.held.contains(&property)
    }

    /// The required properties that do not hold.
    pub fn missing_required(&self) -> Vec<Missing> {
        self.missing
            .iter()
            .filter(|missing| missing.required)
            .cloned()
            .collect()
    }

    /// What this sandbox proves to the policy, given the table it was made
    /// from: no network only when the network namespace holds and no Unix
    /// socket reaches a daemon outside; no writes
    /// only when writes are confined, the table names no writable path
    /// (the private home goes with the process) and reads are confined too.
    pub fn proof(&self, sandbox: &SandboxConfig) -> SandboxProof {
        let confined = !sandbox.network
            && self.holds(Property::NetworkNamespace)
            && self.holds(Property::UnixSockets);
        let no_writes = sandbox.write.is_empty()
            && self.holds(Property::FilesWrite)
            && self.holds(Property::FilesRead);
        // A list of hosts is a way out: only "nothing else" holds.
        SandboxProof {
            no_network: confined && sandbox.egress.is_empty(),
            no_writes,
            egress_only: confined && !sandbox.egress.is_empty(),
        }
    }

    /// The properties that do not hold and that no other property covers:
    /// what the sandbox really lacks on this kernel.
    pub fn uncovered(&self) -> impl Iterator<Item = &Missing> {
        self.missing.iter().filter(|missing| !missing.covered)
    }

    /// One line naming what holds, for the log and the test output: what
    /// is enforced, what is not, and the second layers this kernel lacks
    /// while their first holds.
    pub fn summary(&self) -> String {
        let held: Vec<&str> = self.held.iter().map(|p| p.as_str()).collect();
        let mut line = format!("enforced: {}", held.join(", "));
        let names = |covered: bool| -> Vec<&str> {
            self.missing
                .iter()
                .filter(|m| m.covered == covered)
                .map(|m| m.property.as_str())
                .collect()
        };
        let missing = names(false);
        if !missing.is_empty() {
            line.push_str(&format!("; not enforced: {}", missing.join(", ")));
        }
        let covered = names(true);
        if !covered.is_empty() {
            line.push_str(&format!(
                "; second layers this kernel lacks (their first holds): {}",
                covered.join(", ")
            ));
        }
        line
    }
}

// === impl Confinement ===

impl Confinement {
    /// What the running sandbox enforces.
    pub fn report(&self) -> &Report {
        &self.report
    }

    /// The private home (`HOME` and, below it, `TMPDIR`).
    pub fn home(&self) -> Option<&std::path::Path> {
        self.home.as_ref().map(tempfile::TempDir::path)
    }

    /// Records the started process, whose group is killed when this is
    /// dropped.
    pub fn started(&mut self, pid: Option<u32>) {
        self.group = pid;
    }

    /// With `network = ["host:port", ...]` and the server's own network
    /// namespace: the listening socket of its egress proxy, made in that
    /// namespace on 127.0.0.1 (where the server's `HTTP_PROXY`,
    /// `HTTPS_PROXY` and `ALL_PROXY` point). The caller accepts on it and
    /// decides where each connection may go; nothing else in the namespace
    /// leads out. `None` without a list of hosts, or without a network
    /// namespace (a `best_effort` sandbox on a kernel that refuses one).
    /// Called once, after the process was started; never waits.
    ///
    /// # Errors
    ///
    /// The child sent no listener (it did not start).
    pub fn egress_listener(&mut self) -> std::io::Result<Option<std::net::TcpListener>> {
        #[cfg(target_os = "linux")]
        {
            match self.egress.take() {
                Some(mut channel) => channel.receive().map(Some),
                None => Ok(None),
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            Ok(None)
        }
    }
}

impl Drop for Confinement {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        {
            if let Some(group) = self.group.take() {
                sys::kill_group(group);
            }
            drop(self.pids.take());
        }
        // The private home goes with the server (TempDir removes it).
        drop(self.home.take());
    }
}

/// Makes the command that starts `plan` confined on `kernel`, and the
/// [`Confinement`] that goes with it (keep it as long as the process runs).
///
/// The command has a clean environment, its own process group, and a hook
/// that confines the child between fork and exec; its standard streams are
/// the caller's to set.
///
/// # Errors
///
/// [`SandboxError::NotEnforceable`] when a required property cannot hold
/// and the plan is not best effort; the other variants when the home, a
/// path or the filter cannot be made.
pub fn command(
    plan: &Plan,
    kernel: &Kernel,
) -> Result<(std::process::Command, Confinement), SandboxError> {
    let report = kernel.report(&plan.config);
    let missing = report.missing_required();
    if !missing.is_empty() && !plan.config.best_effort {
        return Err(SandboxError::NotEnforceable(missing));
    }
    let home = tempfile::Builder::new()
        .prefix("hintgate-sandbox-")
        .tempdir()
        .map_err(|source| SandboxError::Path {
            path: std::env::temp_dir(),
            source,
        })?;
    let tmp = home.path().join("tmp");
    std::fs::create_dir(&tmp).map_err(|source| SandboxError::Path {
        path: tmp.clone(),
        source,
    })?;
    let mut command = std::process::Command::new(&plan.program);
    command.args(&plan.args).env_clear();
    for (key, value) in &plan.env {
        command.env(key, value);
    }
    command.env("HOME", home.path()).env("TMPDIR", &tmp);
    // `network = ["host:port", ...]` in a namespace of its own: an egress
    // proxy in it, which every common HTTP client finds by these names.
    #[cfg(target_os = "linux")]
    let egress = if !plan.config.network
        && !plan.config.egress.is_empty()
        && report.holds(Property::NetworkNamespace)
    {
        let (channel, end) = sys::egress::Channel::new().map_err(|source| SandboxError::Path {
            path: PathBuf::from("socketpair"),
            source,
        })?;
        for name in EGRESS_VARIABLES {
            command.env(name, sys::egress::PROXY_URL);
        }
        // Node.js's own `fetch` follows them only when told to (from
        // 22.21 and 24); older releases ignore the variable.
        command.env("NODE_USE_ENV_PROXY", "1");
        Some((channel, end))
    } else {
        None
    };
    {
        use std::os::unix::process::CommandExt;
        command.process_group(0);
    }
    #[cfg(target_os = "linux")]
    let pids = match (&kernel.pids_cgroup, report.holds(Property::ProcessLimit)) {
        (Some(parent), true) if !kernel.process_limit_by_rlimit() => Some(
            cgroup::PidsGroup::make(parent, processes(plan, &report)).map_err(|source| {
                SandboxError::Path {
                    path: parent.clone(),
                    source,
                }
            })?,
        ),
        _ => None,
    };
    #[cfg(target_os = "linux")]
    sys::confine(
        &mut command,
        plan,
        kernel,
        &report,
        home.path(),
        pids.as_ref().map(cgroup::PidsGroup::procs),
        egress.as_ref().map(|(_, end)| *end),
    )?;
    Ok((
        command,
        Confinement {
            report,
            #[cfg(target_os = "linux")]
            pids,
            home: Some(home),
            group: None,
            #[cfg(target_os = "linux")]
            egress: egress.map(|(channel, _)| channel),
        },
    ))
}

/// The variables that name the egress proxy to the server's HTTP clients
/// (curl, Python's `urllib`, `requests` and `httpx`, Go, `undici`'s
/// environment agent), in both cases.
pub const EGRESS_VARIABLES: [&str; 6] = [
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
];

/// The process limit of `plan`, with the processes of the sandbox's own
/// that count against it (the relay and the init of a PID namespace).
#[cfg(target_os = "linux")]
fn processes(plan: &Plan, report: &Report) -> u64 {
    let own = if report.holds(Property::PidNamespace) {
        sys::SUPERVISORS
    } else {
        0
    };
    plan.limits.processes.saturating_add(own)
}

fn list_missing(missing: &[Missing]) -> String {
    missing
        .iter()
        .map(|m| format!("{} ({})", m.property, m.why))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(network: bool, write: &[&str]) -> SandboxConfig {
        SandboxConfig {
            read: vec!["/data".into()],
            write: write.iter().map(|w| (*w).to_owned()).collect(),
            network,
            ..SandboxConfig::default()
        }
    }

    fn kernel(abi: u32, userns: bool) -> Kernel {
        Kernel {
            landlock_abi: abi,
            user_namespaces: userns,
            user_namespaces_error: None,
            seccomp: true,
            root: false,
            pids_cgroup: None,
            pid_namespaces: userns,
        }
    }

    #[test]
    fn a_full_kernel_proves_no_network_and_no_writes() {
        let sandbox = table(false, &[]);
        let report = kernel(7, true).report(&sandbox);
        assert!(report.missing_required().is_empty(), "{report:?}");
        let proof = report.proof(&sandbox);
        assert!(proof.no_network && proof.no_writes);
    }

    #[test]
    fn a_writable_path_or_network_proves_only_the_rest() {
        let sandbox = table(false, &["/out"]);
        let proof = kernel(7, true).report(&sandbox).proof(&sandbox);
        assert!(proof.no_network && !proof.no_writes);
        let sandbox = table(true, &[]);
        let proof = kernel(7, true).report(&sandbox).proof(&sandbox);
        assert!(!proof.no_network && proof.no_writes);
    }

    #[test]
    fn a_list_of_hosts_needs_the_namespace_and_proves_only_that_nothing_else_is_reached() {
        let mut sandbox = table(false, &[]);
        sandbox.egress =
            vec![hintgate_policy::config::Egress::parse("api.github.com:443").unwrap()];
        let report = kernel(7, true).report(&sandbox);
        assert!(report.holds(Property::NetworkNamespace));
        assert!(report.holds(Property::UnixSockets));
        let proof = report.proof(&sandbox);
        assert!(!proof.no_network && proof.egress_only && proof.no_writes);
        // Without a namespace of its own, nothing holds and it does not start.
        let report = kernel(7, false).report(&sandbox);
        assert_eq!(
            report.missing_required()[0].property,
            Property::NetworkNamespace
        );
        assert!(!report.proof(&sandbox).egress_only);
    }

    #[test]
    fn without_user_namespaces_no_network_is_missing_and_unproven() {
        let sandbox = table(false, &[]);
        let report = kernel(7, false).report(&sandbox);
        let missing = report.missing_required();
        assert_eq!(missing.len(), 1);
        assert_eq!(missing[0].property, Property::NetworkNamespace);
        assert!(!report.proof(&sandbox).no_network);
    }

    #[test]
    fn an_old_landlock_cannot_prove_writes_confined() {
        let sandbox = table(false, &[]);
        let report = kernel(2, true).report(&sandbox);
        assert!(report.holds(Property::FilesRead));
        assert!(!report.holds(Property::FilesWrite));
        assert!(!report.proof(&sandbox).no_writes);
        assert!(!report.holds(Property::TcpDenied));
    }

    #[test]
    fn no_landlock_refuses_the_sandbox_by_name() {
        let sandbox = table(false, &[]);
        let report = kernel(0, true).report(&sandbox);
        let err = SandboxError::NotEnforceable(report.missing_required());
        let text = err.to_string();
        assert!(text.contains("files-read"), "{text}");
        assert!(text.contains("best_effort"), "{text}");
    }

    #[test]
    fn unix_sockets_are_kept_out_by_seccomp_or_by_landlock_abi_9() {
        let sandbox = table(false, &[]);
        // Today's kernels: the filter alone; Landlock's right is a second
        // layer that is missing, named, and covered.
        let report = kernel(7, true).report(&sandbox);
        assert!(report.holds(Property::UnixSockets));
        let landlock = report
            .missing
            .iter()
            .find(|m| m.property == Property::UnixConnectDenied)
            .unwrap();
        assert!(!landlock.required && landlock.covered);
        assert_eq!(report.uncovered().count(), 0, "{report:?}");
        assert!(!report.summary().contains("not enforced"));
        assert!(report.summary().contains("second layers"));
        assert!(report.proof(&sandbox).no_network);
        // ABI 9: both layers.
        let report = kernel(9, true).report(&sandbox);
        assert!(report.holds(Property::UnixSockets));
        assert!(report.holds(Property::UnixConnectDenied));
        // ABI 9 without seccomp: Landlock alone holds it.
        let mut no_filter = kernel(9, true);
        no_filter.seccomp = false;
        assert!(no_filter.report(&sandbox).holds(Property::UnixSockets));
        // Neither: a required property is missing, named, and "no network"
        // is not proven.
        let mut neither = kernel(7, true);
        neither.seccomp = false;
        let report = neither.report(&sandbox);
        let missing = report.missing_required();
        assert_eq!(missing.len(), 1, "{missing:?}");
        assert_eq!(missing[0].property, Property::UnixSockets);
        assert!(!report.proof(&sandbox).no_network);
        assert!(
            SandboxError::NotEnforceable(missing)
                .to_string()
                .contains("unix-sockets")
        );
        // With the network allowed, neither is asked for.
        let report = kernel(7, true).report(&table(true, &[]));
        assert!(!report.holds(Property::UnixSockets));
        assert!(
            report
                .missing
                .iter()
                .all(|m| m.property != Property::UnixSockets)
        );
    }

    #[test]
    fn root_cannot_hold_a_process_limit_it_was_asked_for() {
        let mut sandbox = table(false, &[]);
        let mut kernel = kernel(7, true);
        kernel.root = true;
        assert!(kernel.report(&sandbox).missing_required().is_empty());
        sandbox.max_processes = Some(64);
        let missing = kernel.report(&sandbox).missing_required();
        assert_eq!(missing.len(), 1);
        assert_eq!(missing[0].property, Property::ProcessLimit);
        // A pids cgroup it may make holds the limit instead.
        kernel.pids_cgroup = Some(PathBuf::from("/sys/fs/cgroup/pids"));
        assert!(kernel.report(&sandbox).holds(Property::ProcessLimit));
    }
}
