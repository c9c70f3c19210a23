//! The process limit where `RLIMIT_NPROC` cannot hold it (the gateway runs
//! as root, whose processes the kernel does not count, or has no user
//! namespaces): a `pids` cgroup of its own, when the gateway may make one
//! (root, or a user whose session delegates the controller).

use std::path::{Path, PathBuf};

/// The `pids` cgroup directory this process is in, when it may make a
/// child cgroup there.
pub(crate) fn writable_parent() -> Option<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mut found = None;
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let relative = path.trim_start_matches('/');
        if controllers.split(',').any(|c| c == "pids") {
            // cgroup v1: a hierarchy of its own.
            found = Some(Path::new("/sys/fs/cgroup/pids").join(relative));
            break;
        }
        if controllers.is_empty() {
            // cgroup v2: the controller must be delegated to children.
            let dir = Path::new("/sys/fs/cgroup").join(relative);
            let delegated = std::fs::read_to_string(dir.join("cgroup.subtree_control"))
                .is_ok_and(|text| text.split_whitespace().any(|c| c == "pids"));
            if delegated {
                found = Some(dir);
            }
        }
    }
    let dir = found?;
    sweep(&dir);
    // Try it (the mode bits do not say what root may do): a group that
    // cannot be made is no limit.
    let writable = dir.join("cgroup.procs").is_file();
    let probe = dir.join(format!("hintgate-probe-{}", std::process::id()));
    let made = writable && std::fs::create_dir(&probe).is_ok();
    if made {
        let usable = probe.join("pids.max").is_file();
        let _ = std::fs::remove_dir(&probe);
        usable.then_some(dir)
    } else {
        None
    }
}

/// A `pids` cgroup made for one server, removed when dropped (once its
/// processes are gone).
#[derive(Debug)]
pub(crate) struct PidsGroup {
    dir: PathBuf,
}

impl PidsGroup {
    /// Makes a cgroup under `parent` that holds at most `max` processes.
    pub(crate) fn make(parent: &Path, max: u64) -> std::io::Result<Self> {
        // The process id and a counter: unique on this machine.
        static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let count = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = parent.join(format!("hintgate-{}-{count}", std::process::id()));
        std::fs::create_dir(&dir)?;
        let group = Self { dir };
        std::fs::write(group.dir.join("pids.max"), max.to_string())?;
        Ok(group)
    }

    /// The file a process writes `0` to, to join the group.
    pub(crate) fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }
}

impl Drop for PidsGroup {
    fn drop(&mut self) {
        // Whatever is left in the group dies now, even a process that
        // left the server's process group (`cgroup.kill`, Linux 5.14).
        let _ = std::fs::write(self.dir.join("cgroup.kill"), "1");
        // The group's processes were killed; they leave it as they are
        // reaped, so the directory is removed once it is empty: at once
        // when it is, else off the caller's thread (and what a gateway
        // that exits first leaves, the next one sweeps).
        for _ in 0..10 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let dir = self.dir.clone();
        let _ = std::thread::Builder::new()
            .name("hintgate-cgroup".to_owned())
            .spawn(move || {
                // An empty group left behind (its processes outlived two
                // seconds) holds nothing and limits nothing.
                for _ in 0..100 {
                    if std::fs::remove_dir(&dir).is_ok() || !dir.exists() {
                        return;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            });
    }
}

/// Removes the empty groups gateways that are gone left behind (a group
/// with a process in it cannot be removed, so a live one is safe).
fn sweep(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|name| name.strip_prefix("hintgate-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new("/proc").join(pid.to_string()).exists() {
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}
