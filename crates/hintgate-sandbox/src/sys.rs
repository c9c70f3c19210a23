//! The Linux system calls: the kernel probe, and the confinement a child
//! applies to itself between fork and exec.
//!
//! Everything that allocates or may fail for a reason other than the
//! kernel's is done before fork (the Landlock ruleset's file descriptors,
//! the seccomp programs, the uid and gid maps); the hook that runs in the
//! child of a multi-threaded parent only makes system calls on memory
//! prepared for it, which is what `fork(2)` allows.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::Path;

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath,
    PathFd, Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope,
};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use crate::plan::Access as PlanAccess;

pub(crate) mod egress;
use crate::{Kernel, Plan, Property, Report, SandboxError};

/// `LANDLOCK_CREATE_RULESET_VERSION`: ask the kernel for its ABI.
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;

/// Asks the kernel what it can enforce.
pub(crate) fn probe() -> Kernel {
    // SAFETY: `landlock_create_ruleset(NULL, 0, VERSION)` reads no memory
    // and only returns the ABI version (or fails with ENOSYS/EOPNOTSUPP).
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0_usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    // SAFETY: PR_GET_SECCOMP takes no pointer; it fails with EINVAL when
    // the kernel has no seccomp.
    let seccomp = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) } >= 0;
    let (user_namespaces, user_namespaces_error) =
        match probe_unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) {
            Ok(()) => (true, None),
            Err(err) => (false, Some(err)),
        };
    // SAFETY: geteuid cannot fail and touches no memory.
    let root = unsafe { libc::geteuid() } == 0;
    let pid_namespaces =
        pid_flags(user_namespaces, root).is_some_and(|flags| probe_unshare(flags).is_ok());
    // The cgroup is only needed where the rlimit cannot hold the limit.
    let pids_cgroup = if user_namespaces && !root {
        None
    } else {
        crate::cgroup::writable_parent()
    };
    Kernel {
        landlock_abi: u32::try_from(abi).unwrap_or(0),
        user_namespaces,
        user_namespaces_error,
        seccomp,
        root,
        pids_cgroup,
        pid_namespaces,
    }
}

/// The flags that make a new PID namespace: with a new user namespace for
/// an ordinary user, alone for root without user namespaces.
pub(crate) fn pid_flags(user_namespaces: bool, root: bool) -> Option<libc::c_int> {
    if user_namespaces {
        Some(libc::CLONE_NEWUSER | libc::CLONE_NEWPID)
    } else if root {
        Some(libc::CLONE_NEWPID)
    } else {
        None
    }
}

/// Whether a child may make the namespaces of `flags`: a short-lived child
/// tries.
fn probe_unshare(flags: libc::c_int) -> Result<(), String> {
    // SAFETY: the child only calls unshare(2) and _exit(2), both
    // async-signal-safe, so forking a multi-threaded parent is sound.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("cannot fork: {}", io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: as above; the child touches no memory of the parent's.
        unsafe {
            let code = if libc::unshare(flags) == 0 {
                0
            } else {
                *libc::__errno_location() & 0x7f
            };
            libc::_exit(code);
        }
    }
    let mut status: libc::c_int = 0;
    // SAFETY: `status` is a valid, writable int for the duration of the call.
    let waited = unsafe { libc::waitpid(pid, &raw mut status, 0) };
    if waited != pid {
        return Err(format!("cannot wait: {}", io::Error::last_os_error()));
    }
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        Ok(())
    } else if libc::WIFEXITED(status) {
        Err(format!(
            "the kernel refuses new user namespaces ({}); see `kernel.unprivileged_userns_clone`, `user.max_user_namespaces`, an AppArmor `userns` restriction, or a seccomp filter the gateway itself runs under",
            io::Error::from_raw_os_error(libc::WEXITSTATUS(status))
        ))
    } else {
        Err("the namespace probe did not exit".to_owned())
    }
}

/// Kills a sandboxed server's process group.
pub(crate) fn kill_group(group: u32) {
    let Ok(group) = libc::pid_t::try_from(group) else {
        return;
    };
    if group <= 1 {
        return;
    }
    // SAFETY: kill(2) takes no pointer; a group that is gone is ESRCH.
    unsafe {
        libc::kill(-group, libc::SIGKILL);
    }
}

/// Everything the child needs, made before fork.
struct Prepared {
    ruleset: Option<RulesetCreated>,
    filters: Vec<BpfProgram>,
    unshare: libc::c_int,
    /// The server runs under a small init of its own, PID 1 of a new PID
    /// namespace (see [`Prepared::supervise`]).
    pid_namespace: bool,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    /// The `cgroup.procs` of the server's own pids cgroup, if it has one.
    cgroup_procs: Option<std::ffi::CString>,
    limits: [(libc::__rlimit_resource_t, libc::rlim_t); 3],
    /// The gateway's process id, to tell whether it died before the child
    /// asked for SIGKILL with it.
    gateway: libc::pid_t,
    /// With `network = ["host:port", ...]`: the channel through which the
    /// child hands the gateway the egress proxy's listener, made in its new
    /// network namespace (see [`egress`]).
    egress: Option<egress::ChildEnd>,
}

/// Adds the confinement of `plan`, as `report` says it holds, to `command`.
pub(crate) fn confine(
    command: &mut std::process::Command,
    plan: &Plan,
    kernel: &Kernel,
    report: &Report,
    home: &Path,
    cgroup_procs: Option<std::path::PathBuf>,
    egress: Option<egress::ChildEnd>,
) -> Result<(), SandboxError> {
    let cgroup_procs = match cgroup_procs {
        Some(path) => {
            use std::os::unix::ffi::OsStrExt;
            Some(
                std::ffi::CString::new(path.as_os_str().as_bytes())
                    .map_err(|err| SandboxError::Build(format!("cgroup path: {err}")))?,
            )
        }
        None => None,
    };
    let ruleset = if report.holds(Property::FilesRead) {
        Some(ruleset(plan, kernel, report, home, egress.is_some())?)
    } else {
        None
    };
    let filters = if report.holds(Property::Seccomp) {
        filters(plan.config.network)?
    } else {
        Vec::new()
    };
    let mut unshare = 0;
    if kernel.user_namespaces {
        unshare |= libc::CLONE_NEWUSER;
        if !plan.config.network {
            unshare |= libc::CLONE_NEWNET;
        }
    }
    // The listener is made only in a network namespace of the server's own:
    // anywhere else it would listen on the gateway's loopback.
    let egress = egress.filter(|_| unshare & libc::CLONE_NEWNET != 0);
    let pid_namespace = report.holds(Property::PidNamespace);
    if pid_namespace {
        unshare |= pid_flags(kernel.user_namespaces, kernel.root).unwrap_or(0);
    }
    // The two processes that stay outside the server (the relay and the
    // init) count against its process limit.
    let processes = crate::processes(plan, report);
    // SAFETY: getuid and getgid cannot fail and touch no memory.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut prepared = Prepared {
        ruleset,
        filters,
        unshare,
        pid_namespace,
        uid_map: format!("{uid} {uid} 1\n").into_bytes(),
        gid_map: format!("{gid} {gid} 1\n").into_bytes(),
        cgroup_procs,
        gateway: libc::pid_t::try_from(std::process::id()).unwrap_or(0),
        limits: [
            (libc::RLIMIT_NOFILE, plan.limits.open_files),
            (libc::RLIMIT_NPROC, processes),
            (libc::RLIMIT_AS, plan.limits.address_space),
        ],
        egress,
    };
    let hook = move || prepared.apply();
    // SAFETY: the hook runs in the child between fork and exec and makes
    // only system calls on memory prepared before fork (see `apply`); it
    // allocates nothing and takes no lock.
    unsafe {
        command.pre_exec(hook);
    }
    Ok(())
}

impl Prepared {
    /// Runs in the child: cgroup, namespaces, the init of the PID namespace,
    /// capabilities, limits, Landlock, seccomp, in that order (seccomp last,
    /// since it refuses `unshare`).
    fn apply(&mut self) -> io::Result<()> {
        // SAFETY: prctl(PR_SET_PDEATHSIG) takes no pointer.
        check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) })?;
        // A gateway that died between fork and the line above sent no
        // signal: the child has another parent now, and goes no further.
        // SAFETY: getppid cannot fail and touches no memory.
        if unsafe { libc::getppid() } != self.gateway {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        // Joined before the user namespace, while the file's owner is ours.
        if let Some(procs) = &self.cgroup_procs {
            write_file(procs, b"0")?;
        }
        if self.unshare != 0 {
            // SAFETY: unshare(2) takes no pointer; the child is single-threaded.
            check(unsafe { libc::unshare(self.unshare) })?;
            if self.unshare & libc::CLONE_NEWUSER != 0 {
                write_file(c"/proc/self/setgroups", b"deny")?;
                write_file(c"/proc/self/uid_map", &self.uid_map)?;
                write_file(c"/proc/self/gid_map", &self.gid_map)?;
            }
        }
        // In the new network namespace, with its capabilities still held
        // and before the relay and the init close every descriptor.
        if let Some(end) = self.egress.take() {
            end.open()?;
        }
        if self.pid_namespace {
            supervise()?;
        }
        drop_capabilities()?;
        for (resource, value) in self.limits {
            let limit = libc::rlimit {
                rlim_cur: value,
                rlim_max: value,
            };
            // SAFETY: `limit` is a valid rlimit on the stack for the call.
            check(unsafe { libc::setrlimit(resource, &raw const limit) })?;
        }
        match self.ruleset.take() {
            // `restrict_self` sets no_new_privs, then makes two system calls
            // on the ruleset's descriptor; it allocates nothing.
            Some(ruleset) => {
                if ruleset.restrict_self().is_err() {
                    return Err(last_error_or(libc::EPERM));
                }
            }
            None => {
                // SAFETY: prctl(PR_SET_NO_NEW_PRIVS) takes no pointer.
                check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) })?;
            }
        }
        for filter in &self.filters {
            if seccompiler::apply_filter(filter).is_err() {
                return Err(last_error_or(libc::EPERM));
            }
        }
        Ok(())
    }
}

/// The processes [`supervise`] keeps outside the server: the relay and the
/// init.
pub(crate) const SUPERVISORS: u64 = 2;

/// The signals the relay and the init pass on to the server.
const PASSED_ON: [libc::c_int; 5] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
];

/// Makes the server's process tree die with it and with the gateway.
///
/// Called in the child the gateway started (the *relay*), after it unshared
/// a PID namespace: its next child is PID 1 there (the *init*), and when PID
/// 1 exits the kernel kills every process of the namespace, whatever they
/// did to leave the server's process group (`setsid`, a double fork).
///
/// - The relay stays in the gateway's PID namespace as the process the
///   gateway holds: it waits for the init, passes on the signals it gets,
///   and exits as the init does. The kernel kills it when the gateway dies
///   (`PR_SET_PDEATHSIG`, set before).
/// - The init asks the kernel for SIGKILL when the relay dies (and so when
///   the gateway does), starts the server, passes signals on to it (a PID 1
///   ignores the signals it has no handler for, so it takes them with
///   `sigwaitinfo`), reaps every orphan of the namespace, and exits with the
///   server's status when the server exits, which ends the namespace.
/// - The server returns from here and goes on to be confined and exec'd.
///
/// Neither the relay nor the init ever returns or execs: each closes every
/// descriptor (so it holds none of the server's pipes, none of the
/// gateway's files, and not the pipe through which the server's `exec`
/// reports) and only makes system calls until it exits.
fn supervise() -> io::Result<()> {
    // SAFETY: `sigset_t` is plain data for which all zeroes is a valid
    // (empty) value; `sigemptyset` and `sigaddset` only write it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t on this stack.
    unsafe {
        libc::sigemptyset(&raw mut set);
        libc::sigaddset(&raw mut set, libc::SIGCHLD);
        for signal in PASSED_ON {
            libc::sigaddset(&raw mut set, signal);
        }
    }
    // Blocked before the forks, so that neither an early exit of a child
    // nor a signal is lost before the wait below; the server unblocks them.
    // SAFETY: both sets are valid for the call.
    check(unsafe { libc::sigprocmask(libc::SIG_BLOCK, &raw const set, &raw mut old) })?;
    // SAFETY: fork in a single-threaded child; the child only makes system
    // calls (below and in `relay`) until it execs or exits.
    let init = unsafe { libc::fork() };
    if init < 0 {
        return Err(io::Error::last_os_error());
    }
    if init > 0 {
        relay(init, &set);
    }
    // The init, PID 1 of the new namespace.
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes no pointer.
    check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) })?;
    // SAFETY: as for the first fork.
    let server = unsafe { libc::fork() };
    if server < 0 {
        return Err(io::Error::last_os_error());
    }
    if server > 0 {
        relay(server, &set);
    }
    // The server: the gateway's own signal mask back (the one the standard
    // library set up for it), then on to the confinement.
    // SAFETY: `old` was filled by sigprocmask above.
    check(unsafe { libc::sigprocmask(libc::SIG_SETMASK, &raw const old, std::ptr::null_mut()) })
}

/// Waits for `child`, passing on to it the signals of `set` other than
/// SIGCHLD and reaping every child (a PID 1 inherits the orphans of its
/// namespace), and exits as `child` does: its exit code, or 128 and the
/// number of the signal that killed it, as a shell says.
fn relay(child: libc::pid_t, set: &libc::sigset_t) -> ! {
    close_all();
    loop {
        // SAFETY: `set` is valid; a null info pointer is allowed.
        let signal = unsafe { libc::sigwaitinfo(set, std::ptr::null_mut()) };
        if signal == libc::SIGCHLD {
            loop {
                let mut status: libc::c_int = 0;
                // SAFETY: `status` is a valid, writable int for the call.
                let reaped = unsafe { libc::waitpid(-1, &raw mut status, libc::WNOHANG) };
                if reaped <= 0 {
                    break;
                }
                if reaped == child {
                    let code = if libc::WIFEXITED(status) {
                        libc::WEXITSTATUS(status)
                    } else {
                        128 + libc::WTERMSIG(status)
                    };
                    // SAFETY: _exit ends the process at once; nothing of the
                    // gateway's state is touched.
                    unsafe { libc::_exit(code) }
                }
            }
        } else if signal > 0 {
            // SAFETY: kill(2) takes no pointer.
            unsafe {
                libc::kill(child, signal);
            }
        }
    }
}

/// Closes every descriptor of this process.
fn close_all() {
    // SAFETY: close_range(2) takes no pointer; closing descriptors the
    // relay and the init never use again is sound.
    let closed = unsafe { libc::syscall(libc::SYS_close_range, 0_u32, u32::MAX, 0_u32) };
    if closed != 0 {
        // A kernel before 5.9: one by one, up to the soft limit.
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `limit` is a valid rlimit on this stack.
        let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) };
        let top = if got == 0 {
            limit.rlim_cur.min(65_536)
        } else {
            1024
        };
        for fd in 0..top {
            if let Ok(fd) = libc::c_int::try_from(fd) {
                // SAFETY: as above.
                unsafe {
                    libc::close(fd);
                }
            }
        }
    }
}

/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Leaves the server no capability once it execs.
///
/// A gateway run as root makes a user namespace in which the server is
/// root again (its only uid is mapped to itself): exec would give it every
/// capability of that namespace, and with `CAP_SETFCAP`, `CAP_FOWNER` or
/// `CAP_FSETID` it could mark a file it owns (every system file, as root)
/// with file capabilities, or keep a setuid bit on a program it wrote. A
/// root gateway without a user namespace (`best_effort`) would hand it
/// root's own capabilities. So the bounding set is emptied (where the
/// process holds `CAP_SETPCAP`: in its user namespace, or as root; an
/// ordinary user without one holds no capability to lose, and
/// `no_new_privs` keeps file capabilities from adding any), the ambient
/// set is cleared (a gateway started with ambient capabilities would pass
/// them on), and the inheritable set is emptied: with all three empty,
/// exec computes an empty permitted set, for root too.
fn drop_capabilities() -> io::Result<()> {
    // SAFETY: prctl(PR_CAP_AMBIENT, CLEAR_ALL) takes no pointer; a kernel
    // before 4.3 has no ambient set and answers EINVAL.
    let cleared = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    };
    if cleared < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
        return Err(io::Error::last_os_error());
    }
    for capability in 0..64 {
        // SAFETY: prctl(PR_CAPBSET_DROP) takes no pointer.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, capability, 0, 0, 0) } < 0 {
            match io::Error::last_os_error().raw_os_error() {
                // Past the kernel's last capability.
                Some(libc::EINVAL) => break,
                // No CAP_SETPCAP: an ordinary user outside a user namespace.
                Some(libc::EPERM) => break,
                _ => return Err(io::Error::last_os_error()),
            }
        }
    }
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: `header` and `data` are valid, writable and of the layout the
    // kernel expects for version 3 (one header, two data words).
    let got = unsafe { libc::syscall(libc::SYS_capget, &raw mut header, data.as_mut_ptr()) };
    if got != 0 {
        return Err(io::Error::last_os_error());
    }
    for word in &mut data {
        word.inheritable = 0;
    }
    // SAFETY: as above; lowering the inheritable set needs no privilege.
    let set = unsafe { libc::syscall(libc::SYS_capset, &raw mut header, data.as_ptr()) };
    if set != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn last_error_or(fallback: i32) -> io::Error {
    let err = io::Error::last_os_error();
    if err.raw_os_error().unwrap_or(0) == 0 {
        io::Error::from_raw_os_error(fallback)
    } else {
        err
    }
}

/// Writes `bytes` to `path` with open, write and close (async-signal-safe).
fn write_file(path: &CStr, bytes: &[u8]) -> io::Result<()> {
    // SAFETY: `path` is a NUL-terminated string that outlives the call.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    check(fd)?;
    // SAFETY: `bytes` is valid for `bytes.len()` bytes; `fd` is open.
    let written = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
    let result = if usize::try_from(written).is_ok_and(|n| n == bytes.len()) {
        Ok(())
    } else {
        Err(last_error_or(libc::EIO))
    };
    // SAFETY: `fd` was opened above and is closed once.
    unsafe {
        libc::close(fd);
    }
    result
}

/// The Landlock ruleset of `plan`, at the kernel's own ABI.
fn ruleset(
    plan: &Plan,
    kernel: &Kernel,
    report: &Report,
    home: &Path,
    egress: bool,
) -> Result<RulesetCreated, SandboxError> {
    let abi = ABI::from(i32::try_from(kernel.landlock_abi).unwrap_or(i32::MAX));
    let build = |err: &dyn std::fmt::Display| SandboxError::Build(format!("Landlock: {err}"));
    let all = AccessFs::from_all(abi);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(all)
        .map_err(|err| build(&err))?;
    if report.holds(Property::TcpDenied) {
        ruleset = ruleset
            .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
            .map_err(|err| build(&err))?;
    }
    if report.holds(Property::Scoped) {
        ruleset = ruleset
            .scope(Scope::AbstractUnixSocket | Scope::Signal)
            .map_err(|err| build(&err))?;
    }
    let mut created = ruleset.create().map_err(|err| build(&err))?;
    if egress && report.holds(Property::TcpDenied) {
        // The one TCP connection the server may make: to its egress proxy
        // (its namespace has only the loopback, so only the proxy listens
        // on that port there).
        created = created
            .add_rule(NetPort::new(egress::PROXY_PORT, AccessNet::ConnectTcp))
            .map_err(|err| build(&err))?;
    }
    // Beneath a writable path the server may do everything the ABI
    // handles, except, with `network = false`, connect or send to a
    // pathname Unix socket (ABI 9): that reaches whoever listens there.
    let mut writable = all;
    if !plan.config.network {
        writable.remove(AccessFs::ResolveUnix);
    }
    let read = AccessFs::ReadFile | AccessFs::ReadDir;
    let device = {
        let mut device = read | AccessFs::WriteFile;
        if kernel.landlock_abi >= 3 {
            // Opening `/dev/null` with O_TRUNC (a shell's `>`) needs it.
            device |= AccessFs::Truncate;
        }
        device
    };
    let mut rules: Vec<(&Path, BitFlags<AccessFs>)> = plan
        .rules
        .iter()
        .map(|rule| {
            let access = match rule.access {
                PlanAccess::Read => read,
                PlanAccess::ReadExec => read | AccessFs::Execute,
                PlanAccess::Device => device,
                PlanAccess::ReadWrite => writable,
            };
            (rule.path.as_path(), access)
        })
        .collect();
    rules.push((home, writable));
    for (path, access) in rules {
        let fd = PathFd::new(path).map_err(|err| SandboxError::Path {
            path: path.to_path_buf(),
            source: io::Error::other(err.to_string()),
        })?;
        let access = if path.is_dir() {
            access & all
        } else {
            access & AccessFs::from_file(abi)
        };
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|err| build(&err))?;
    }
    Ok(created)
}

/// System calls this libc does not name yet. Calls added since Linux 5.1
/// have the same number on every architecture.
const SYS_FCHMODAT2: libc::c_long = 452;
const SYS_STATMOUNT: libc::c_long = 457;
const SYS_LISTMOUNT: libc::c_long = 458;

/// The system calls refused outright, with EPERM.
///
/// None is made by a server's runtime (Node.js, CPython, the C library)
/// at start-up or in its ordinary work; each is an escape, a way around
/// another layer of the sandbox, or a part of the kernel an exploit reaches
/// for first.
fn refused() -> Vec<libc::c_long> {
    let mut calls = vec![
        // Other processes: tracing them, reading and writing their memory,
        // taking a descriptor out of one (`pidfd_getfd`), advising the
        // kernel on its memory (`process_madvise`), moving its pages
        // (`move_pages`, `migrate_pages`), comparing its kernel objects
        // with ours (`kcmp`). The PID namespace leaves only the server's own
        // processes in sight; these need none of each other's.
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_pidfd_getfd,
        libc::SYS_process_madvise,
        libc::SYS_move_pages,
        libc::SYS_migrate_pages,
        libc::SYS_kcmp,
        // The mount table and the root directory, old and new mount API:
        // the server has no mount namespace of its own to change, and a
        // root gateway without a user namespace must not let it change the
        // machine's. `statmount` and `listmount` read the table, which
        // Landlock hides otherwise (`/proc/self/mountinfo` is not among its
        // paths).
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_move_mount,
        libc::SYS_open_tree,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        SYS_STATMOUNT,
        SYS_LISTMOUNT,
        // Namespaces: joining one, or making one (with `clone`, below).
        libc::SYS_setns,
        libc::SYS_unshare,
        // Files by handle: `open_by_handle_at` opens a file without a path,
        // so without the path checks Landlock makes; `name_to_handle_at`
        // makes the handles, and names inodes and mounts outside the paths.
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
        // The kernel's keyring, BPF, performance counters, modules, kexec.
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        // Memory an exploit wants: `userfaultfd` holds the kernel at a page
        // fault of its choosing (the classic way to win a race in the
        // kernel); `memfd_secret` hides memory from the kernel itself, and
        // so from anyone inspecting the server.
        libc::SYS_userfaultfd,
        libc::SYS_memfd_secret,
        // The machine: swap, reboot, process accounting, the kernel's log;
        // `fanotify_init` watches accesses to files (a side channel on files
        // outside its paths, which Landlock does not check a mark against).
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_reboot,
        libc::SYS_acct,
        libc::SYS_syslog,
        libc::SYS_fanotify_init,
    ];
    // I/O ports: the hardware itself (x86 only). Capabilities are dropped,
    // so the kernel refuses them too; refused here whatever it would do.
    #[cfg(target_arch = "x86_64")]
    calls.extend([libc::SYS_iopl, libc::SYS_ioperm]);
    calls
}

/// The seccomp programs:
///
/// - one answering EPERM: the calls of [`refused`], `clone` with a flag
///   that makes a namespace, `personality` but for the query and plain
///   Linux, a mode with the setuid, setgid or world-writable bit given to
///   an existing file, and the terminal ioctls that type into a terminal;
/// - one answering ENOSYS, as a kernel without them would: `clone3`, whose
///   flags are behind a pointer a filter cannot read, so the C library
///   falls back to `clone`, whose flags the first program checks; and
///   io_uring, whose operations (open, socket, connect, ...) the kernel
///   runs without ever passing them through a seccomp filter, so that a
///   ring would go around every rule here (Landlock and the namespaces
///   still apply to them, the filter does not). Runtimes that use io_uring
///   (libuv, tokio-uring) fall back to ordinary calls on ENOSYS;
/// - with `network = false`, one answering EACCES to sockets other than
///   IPv4, IPv6 (both in the server's own, empty network namespace) and
///   netlink (which asks its own namespace): above all Unix sockets,
///   through which a server reaches a local daemon's pathname socket
///   whatever its network namespace, and which Landlock controls only
///   from ABI 9 (the address is behind a pointer, so `connect` and
///   `sendto` cannot be filtered: the socket is refused instead);
///   `AF_VSOCK`, which reaches the hypervisor's host past any network
///   namespace; and the rest, which nothing in a server needs. A
///   `socketpair` of the stream or seqpacket kind stays: runtimes use it for
///   their own plumbing (CPython's asyncio wakes its loop through one), and
///   neither kind can be pointed elsewhere afterwards (`connect` and
///   `sendto` with an address fail on a connected stream, and a seqpacket
///   socket ignores the address). A datagram pair is refused: `sendto` on
///   it takes any address, and `connect` can point it at another;
/// - on x86-64, one refusing the x32 ABI.
fn filters(network: bool) -> Result<Vec<BpfProgram>, SandboxError> {
    let build = |err: &dyn std::fmt::Display| SandboxError::Build(format!("seccomp: {err}"));
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|err| build(&err))?;
    let arg = |index: u8, op: SeccompCmpOp, value: u64| {
        SeccompCondition::new(index, SeccompCmpArgLen::Dword, op, value).map_err(|err| build(&err))
    };
    let rule =
        |conditions: Vec<SeccompCondition>| SeccompRule::new(conditions).map_err(|err| build(&err));
    let bits = |value: libc::c_int| u64::try_from(value).map_err(|err| build(&err));
    let program = |rules: BTreeMap<i64, Vec<SeccompRule>>, errno: libc::c_int| {
        let filter = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(u32::try_from(errno).unwrap_or(1)),
            arch,
        )
        .map_err(|err| build(&err))?;
        BpfProgram::try_from(filter).map_err(|err| build(&err))
    };

    let mut escapes: BTreeMap<i64, Vec<SeccompRule>> = refused()
        .into_iter()
        .map(|call| (call, Vec::new()))
        .collect();
    let namespaces = [
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWNS,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWCGROUP,
    ];
    let mut clone_rules = Vec::new();
    for flag in namespaces {
        let flag = bits(flag)?;
        let condition = SeccompCondition::new(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(flag),
            flag,
        )
        .map_err(|err| build(&err))?;
        clone_rules.push(rule(vec![condition])?);
    }
    escapes.insert(libc::SYS_clone, clone_rules);
    // `personality`: only the query (0xffffffff) and plain Linux (0). The
    // other flags are the old tricks: `READ_IMPLIES_EXEC` makes every
    // mapping executable, `ADDR_NO_RANDOMIZE` turns address randomisation
    // off for the programs it execs, `MMAP_PAGE_ZERO` maps page zero (how a
    // NULL dereference in the kernel was exploited).
    escapes.insert(
        libc::SYS_personality,
        vec![rule(vec![
            arg(0, SeccompCmpOp::Ne, 0)?,
            arg(0, SeccompCmpOp::Ne, 0xffff_ffff)?,
        ])?],
    );
    // A mode with the setuid, setgid or world-writable bit. Landlock does
    // not control a file's mode, and the server owns every file of its
    // uid (every system file, for a root gateway): with these bits it
    // could plant a setuid program, or open a file it may only read to
    // every local user. No server needs them; other modes pass (copying a
    // file copies its mode).
    let mut modes = vec![
        (libc::SYS_fchmod, 1),
        (libc::SYS_fchmodat, 2),
        (SYS_FCHMODAT2, 2),
    ];
    #[cfg(target_arch = "x86_64")]
    modes.push((libc::SYS_chmod, 1));
    for (call, index) in modes {
        let mut rules = Vec::new();
        for bit in [libc::S_ISUID, libc::S_ISGID, libc::S_IWOTH] {
            let bit = u64::from(bit);
            rules.push(rule(vec![arg(index, SeccompCmpOp::MaskedEq(bit), bit)?])?);
        }
        escapes.insert(call, rules);
    }
    // `TIOCSTI` types into a terminal (into the shell the gateway was
    // started from, were a terminal among the server's descriptors);
    // `TIOCLINUX` reads and pastes a console's selection.
    escapes.insert(
        libc::SYS_ioctl,
        vec![
            rule(vec![arg(
                1,
                SeccompCmpOp::Eq,
                u64::from(libc::TIOCSTI as u32),
            )?])?,
            rule(vec![arg(
                1,
                SeccompCmpOp::Eq,
                u64::from(libc::TIOCLINUX as u32),
            )?])?,
        ],
    );

    let absent = [
        libc::SYS_clone3,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
    ]
    .into_iter()
    .map(|call| (call, Vec::new()))
    .collect();

    let mut programs = vec![
        program(escapes, libc::EPERM)?,
        program(absent, libc::ENOSYS)?,
    ];
    if !network {
        let socket = rule(vec![
            arg(0, SeccompCmpOp::Ne, bits(libc::AF_INET)?)?,
            arg(0, SeccompCmpOp::Ne, bits(libc::AF_INET6)?)?,
            arg(0, SeccompCmpOp::Ne, bits(libc::AF_NETLINK)?)?,
        ])?;
        // Any family but Unix, and any type but stream and seqpacket (the
        // type's low four bits; the rest are SOCK_NONBLOCK and
        // SOCK_CLOEXEC). SOCK_RAW is a datagram socket for the Unix family.
        let mut pair = vec![rule(vec![arg(0, SeccompCmpOp::Ne, bits(libc::AF_UNIX)?)?])?];
        let kept = [bits(libc::SOCK_STREAM)?, bits(libc::SOCK_SEQPACKET)?];
        for kind in (0..16_u64).filter(|kind| !kept.contains(kind)) {
            pair.push(rule(vec![arg(1, SeccompCmpOp::MaskedEq(0xf), kind)?])?);
        }
        programs.push(program(
            BTreeMap::from([
                (libc::SYS_socket, vec![socket]),
                (libc::SYS_socketpair, pair),
            ]),
            libc::EACCES,
        )?);
    }
    #[cfg(target_arch = "x86_64")]
    programs.push(no_x32()?);
    Ok(programs)
}

/// A program that refuses every x32 system call with EPERM.
///
/// On x86-64 an x32 call carries the same audit architecture as a 64-bit
/// one and its number with bit 30 set (`__X32_SYSCALL_BIT`), so a filter
/// that names 64-bit numbers (the one above) lets the x32 `unshare`,
/// `mount` or `ptrace` through on a kernel that runs x32 code. No server
/// needs x32; the whole ABI is refused. A kernel built without x32 answers
/// ENOSYS; EPERM says the filter refused first.
#[cfg(target_arch = "x86_64")]
fn no_x32() -> Result<BpfProgram, SandboxError> {
    use seccompiler::sock_filter;
    /// `AUDIT_ARCH_X86_64`: `EM_X86_64` (62), 64-bit, little-endian.
    const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
    /// `__X32_SYSCALL_BIT`.
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    /// Where `struct seccomp_data` has the call's number and architecture.
    const NR: u32 = 0;
    const ARCH: u32 = 4;
    let code = |bits: u32| {
        u16::try_from(bits).map_err(|err| SandboxError::Build(format!("seccomp: {err}")))
    };
    let load = code(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS)?;
    let jeq = code(libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K)?;
    let jge = code(libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K)?;
    let ret = code(libc::BPF_RET | libc::BPF_K)?;
    let eperm = u32::try_from(libc::EPERM).unwrap_or(1);
    let insn = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    Ok(vec![
        // 0: the architecture; anything but x86-64 is the other
        //    programs' to judge (the first one kills it).
        insn(load, 0, 0, ARCH),
        insn(jeq, 0, 3, AUDIT_ARCH_X86_64),
        // 2: the number: x32 when bit 30 is set.
        insn(load, 0, 0, NR),
        insn(jge, 0, 1, X32_SYSCALL_BIT),
        // 4: refused.
        insn(ret, 0, 0, libc::SECCOMP_RET_ERRNO | eperm),
        // 5: allowed (as far as this program goes).
        insn(ret, 0, 0, libc::SECCOMP_RET_ALLOW),
    ])
}
