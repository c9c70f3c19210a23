//! What a sandboxed server gets: its program resolved, the paths it may use
//! and how, its environment and its limits, computed from the command and
//! the sandbox table before anything starts (and shown by
//! `hintgate sandbox explain`).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use hintgate_policy::config::SandboxConfig;
use serde::Serialize;

use crate::SandboxError;
use crate::launch::{self, Resolution, find, runtime_prefix};

/// How a path may be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    /// Read files and list directories.
    Read,
    /// Read, and execute or map as code (programs, interpreters, libraries).
    ReadExec,
    /// Read and write a device file (`/dev/null`).
    Device,
    /// Read, write, create, remove and rename beneath.
    ReadWrite,
}

/// One path and what the server may do beneath it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PathRule {
    /// The path (a file or a directory, and everything beneath it).
    pub path: PathBuf,
    /// What the server may do there.
    pub access: Access,
    /// Why the server gets it: `read` or `write` (the table), or what the
    /// runtime needs it for.
    pub why: &'static str,
}

/// Resource limits of a sandboxed server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Limits {
    /// The most files open at once.
    pub open_files: u64,
    /// The most processes and threads at once.
    pub processes: u64,
    /// The most address space per process, in bytes.
    pub address_space: u64,
}

/// Everything needed to start one sandboxed server.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// The program, resolved on `PATH` (for a launcher line, what the
    /// launcher would have run: see [`Plan::launch`]).
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// The paths it may use, beside its private home.
    pub rules: Vec<PathRule>,
    /// Its environment, beside `HOME` and `TMPDIR` (its private home).
    /// Not serialized: the server's `env` may hold secrets.
    #[serde(skip)]
    pub env: Vec<(String, String)>,
    /// Its limits.
    pub limits: Limits,
    /// What a launcher line (`npx -y PKG`, `uvx PKG`, `uv run`) or a
    /// virtual environment's interpreter was resolved to, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub launch: Option<Resolution>,
    /// The table it was made from.
    #[serde(skip)]
    pub config: SandboxConfig,
}

/// Default limits: enough for Node.js and Python servers (whose runtimes
/// reserve a lot of address space and start a few threads), small enough
/// to stop a fork bomb or a runaway allocation.
const DEFAULT_OPEN_FILES: u64 = 1024;
const DEFAULT_PROCESSES: u64 = 256;
const DEFAULT_MEMORY_MB: u64 = 64 * 1024;

/// Read-only data the C library and common runtimes need: the dynamic
/// loader's cache, locale, time zone, TLS roots, name service.
const RUNTIME_READ: &[(&str, &str)] = &[
    ("/usr", "system programs, libraries and shared data"),
    ("/etc/ld.so.cache", "dynamic loader"),
    ("/etc/ld.so.conf", "dynamic loader"),
    ("/etc/ld.so.conf.d", "dynamic loader"),
    ("/etc/localtime", "time zone"),
    ("/etc/timezone", "time zone"),
    ("/etc/locale.alias", "locale"),
    ("/etc/ssl", "TLS roots"),
    ("/etc/ca-certificates", "TLS roots"),
    ("/etc/pki", "TLS roots"),
    ("/etc/nsswitch.conf", "name service"),
    ("/etc/hosts", "name service"),
    ("/etc/host.conf", "name service"),
    ("/etc/gai.conf", "name service"),
    ("/etc/mime.types", "media types"),
    ("/dev/urandom", "randomness"),
    ("/dev/random", "randomness"),
    ("/proc/cpuinfo", "processor count"),
    ("/proc/meminfo", "memory size"),
    ("/proc/stat", "processor count"),
    ("/sys/devices/system/cpu", "processor count"),
    ("/sys/fs/cgroup", "memory and processor limits"),
];

/// Code the dynamic loader maps: the system's library directories.
const RUNTIME_EXEC: &[(&str, &str)] = &[
    ("/lib", "shared libraries"),
    ("/lib64", "shared libraries"),
    ("/lib32", "shared libraries"),
    ("/usr/lib", "shared libraries"),
    ("/usr/lib64", "shared libraries"),
    ("/usr/lib32", "shared libraries"),
    ("/usr/local/lib", "shared libraries"),
    ("/usr/libexec", "shared libraries"),
];

/// Only resolver configuration when the server may use the network.
const NETWORK_READ: &[(&str, &str)] = &[("/etc/resolv.conf", "name service")];

/// Variables of the gateway's own environment that pass to the server
/// (when its `env` does not set them).
const PASSED: &[&str] = &["PATH", "LANG"];

// === impl Plan ===

impl Plan {
    /// Plans `command` with `args` and `env` (the server's configured
    /// variables) under `sandbox`; `path` and `lang` are the gateway's own
    /// `PATH` and `LANG`, passed on unless `env` sets them.
    ///
    /// # Errors
    ///
    /// [`SandboxError::NotFound`] when the program is not on `PATH`;
    /// [`SandboxError::NotPrepared`] when a launcher's package is not
    /// installed (the launcher would fetch it, which the sandbox cannot);
    /// [`SandboxError::Path`] when a path of the table does not exist (a
    /// rule cannot be made for it, and silently dropping it would confine
    /// the server to less than the table says, or make the user think it
    /// may write where it cannot).
    pub fn new(
        command: &str,
        args: &[String],
        env: &BTreeMap<String, String>,
        sandbox: &SandboxConfig,
        inherited: &BTreeMap<String, String>,
    ) -> Result<Self, SandboxError> {
        let mut vars: BTreeMap<String, String> = BTreeMap::new();
        for key in PASSED {
            if let Some(value) = inherited.get(*key) {
                vars.insert((*key).to_owned(), value.clone());
            }
        }
        vars.extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
        // The private home replaces whatever the table or the gateway says.
        vars.remove("HOME");
        vars.remove("TMPDIR");
        for path in sandbox.read.iter().chain(&sandbox.write) {
            if let Err(source) = std::fs::metadata(path) {
                return Err(SandboxError::Path {
                    path: PathBuf::from(path),
                    source,
                });
            }
        }
        let search = vars.get("PATH").cloned().unwrap_or_default();
        // A launcher runs what it would have fetched, installed beforehand;
        // a virtual environment's interpreter gets its environment.
        let resolved = launch::resolve(command, args, &vars, inherited)?;
        let (command, args, trees, resolution) = match resolved {
            Some(launch) => (
                launch.command,
                launch.args,
                launch.trees,
                Some(launch.resolution),
            ),
            None => (command.to_owned(), args.to_vec(), Vec::new(), None),
        };
        let program =
            find(&command, &search).ok_or_else(|| SandboxError::NotFound(command.clone()))?;

        let mut rules = Vec::new();
        // Landlock acts on what a path names, not on the name: each rule is
        // for the path with its symbolic links resolved, as listed.
        let mut add = |path: PathBuf, access: Access, why: &'static str| {
            if let Ok(path) = path.canonicalize() {
                rules.push(PathRule { path, access, why });
            }
        };
        for (path, why) in RUNTIME_EXEC {
            add(PathBuf::from(path), Access::ReadExec, why);
        }
        for (path, why) in RUNTIME_READ {
            add(PathBuf::from(path), Access::Read, why);
        }
        if sandbox.network {
            for (path, why) in NETWORK_READ {
                add(PathBuf::from(path), Access::Read, why);
            }
        }
        for path in ["/dev/null", "/dev/zero", "/dev/full"] {
            add(PathBuf::from(path), Access::Device, "standard devices");
        }
        // The program, what runs it (a `#!` line, through `env`), and the
        // environments they live in (a Python virtual environment, a
        // runtime's prefix, the `node_modules` a script loads from).
        let mut programs = vec![program.clone()];
        let mut scripts = Vec::new();
        if let Some((interpreter, argument)) = shebang(&program) {
            let interpreter_path = PathBuf::from(&interpreter);
            let runs = if interpreter_path.file_name().is_some_and(|n| n == "env") {
                argument.as_deref().and_then(|arg| find(arg, &search))
            } else {
                Some(interpreter_path.clone())
            };
            programs.push(interpreter_path);
            programs.extend(runs);
            scripts.push(program.clone());
        }
        // A script named on the command line (`node server.js`,
        // `python3 server.py`): the interpreter reads it and its modules.
        // A relative one is the gateway's current directory's, where the
        // server starts (`.venv/bin/python server.py`).
        for arg in &args {
            if arg.starts_with('-') {
                continue;
            }
            if let Ok(candidate) = std::path::absolute(arg)
                && candidate.is_file()
            {
                scripts.push(candidate);
            }
        }
        for exe in &programs {
            // An interpreter named inside a virtual environment (a `#!`
            // line's `.venv/bin/python`) needs the environment too.
            let python = exe
                .file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("python"));
            if let Some(root) = python.then(|| launch::venv_of(exe)).flatten() {
                add(
                    root,
                    Access::ReadExec,
                    "the interpreter's virtual environment",
                );
            }
            add(
                exe.clone(),
                Access::ReadExec,
                "the program and its interpreter",
            );
            if let Ok(real) = exe.canonicalize() {
                if let Some(prefix) = runtime_prefix(&real) {
                    add(prefix, Access::ReadExec, "the interpreter's installation");
                }
                add(real, Access::ReadExec, "the program and its interpreter");
            }
        }
        for tree in trees {
            add(
                tree,
                Access::ReadExec,
                "the launcher's package or environment",
            );
        }
        for script in &scripts {
            match environment_root(script) {
                Some(root) => add(root, Access::ReadExec, "the script's environment"),
                None => add(script.clone(), Access::Read, "the script"),
            }
            if let Some(root) = script
                .canonicalize()
                .ok()
                .and_then(|real| environment_root(&real))
            {
                add(root, Access::ReadExec, "the script's environment");
            }
        }
        for path in &sandbox.read {
            add(PathBuf::from(path), Access::Read, "read");
        }
        for path in &sandbox.write {
            add(PathBuf::from(path), Access::ReadWrite, "write");
        }
        dedup(&mut rules);

        let limits = Limits {
            open_files: sandbox.max_open_files.unwrap_or(DEFAULT_OPEN_FILES),
            processes: sandbox.max_processes.unwrap_or(DEFAULT_PROCESSES),
            address_space: sandbox
                .max_memory_mb
                .unwrap_or(DEFAULT_MEMORY_MB)
                .saturating_mul(1024 * 1024),
        };
        Ok(Self {
            program,
            args,
            rules,
            env: vars.into_iter().collect(),
            limits,
            launch: resolution,
            config: sandbox.clone(),
        })
    }
}

/// The interpreter of a `#!` script and its one optional argument.
fn shebang(program: &Path) -> Option<(String, Option<String>)> {
    let mut head = [0_u8; 256];
    let mut file = std::fs::File::open(program).ok()?;
    let len = file.read(&mut head).ok()?;
    let head = head.get(..len)?;
    let rest = head.strip_prefix(b"#!")?;
    let line = rest.split(|byte| *byte == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?.trim();
    let mut words = line.split_whitespace();
    let interpreter = words.next()?.to_owned();
    // `#!/usr/bin/env -S node --flag` and `#!/usr/bin/env node`.
    let argument = words.find(|word| !word.starts_with('-')).map(str::to_owned);
    Some((interpreter, argument))
}

/// The environment a script runs in: the outermost `node_modules` above
/// it, or the Python virtual environment (a directory with `pyvenv.cfg`).
fn environment_root(script: &Path) -> Option<PathBuf> {
    let mut found = None;
    for dir in script.ancestors().skip(1) {
        if dir.file_name().is_some_and(|name| name == "node_modules") {
            found = Some(dir.to_path_buf());
        }
        if found.is_none() && dir.join("pyvenv.cfg").is_file() {
            return Some(dir.to_path_buf());
        }
    }
    found
}

/// Drops a rule that another rule of at least the same access covers (the
/// same path or one above it); of two equal rules, keeps the first.
fn dedup(rules: &mut Vec<PathRule>) {
    let all = rules.clone();
    let mut index = 0;
    rules.retain(|rule| {
        let this = index;
        index += 1;
        !all.iter().enumerate().any(|(other_index, other)| {
            let same = other.path == rule.path && other.access == rule.access;
            other_index != this
                && rule.path.starts_with(&other.path)
                && covers(other.access, rule.access)
                && (!same || other_index < this)
        })
    });
}

/// Whether `wide` allows everything `narrow` does.
fn covers(wide: Access, narrow: Access) -> bool {
    match wide {
        Access::ReadWrite => true,
        Access::ReadExec => matches!(narrow, Access::Read | Access::ReadExec),
        Access::Read => narrow == Access::Read,
        Access::Device => matches!(narrow, Access::Read | Access::Device),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inherited() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
            ("SECRET_TOKEN".to_owned(), "hunter2".to_owned()),
            ("HOME".to_owned(), "/home/someone".to_owned()),
        ])
    }

    #[test]
    fn the_environment_is_clean_and_the_home_is_private() {
        let env = BTreeMap::from([("DEBUG".to_owned(), "1".to_owned())]);
        let sandbox = SandboxConfig::default();
        let plan = Plan::new("sh", &[], &env, &sandbox, &inherited()).unwrap();
        let keys: Vec<&str> = plan.env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["DEBUG", "PATH"]);
    }

    #[test]
    fn a_script_gets_its_interpreter_and_environment() {
        let dir = tempfile::tempdir().unwrap();
        let venv = dir.path().join("venv");
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        std::fs::write(venv.join("pyvenv.cfg"), "home = /usr/bin\n").unwrap();
        let script = venv.join("bin/server");
        std::fs::write(&script, "#!/usr/bin/env sh\necho hi\n").unwrap();
        let sandbox = SandboxConfig {
            read: vec![dir.path().display().to_string()],
            ..SandboxConfig::default()
        };
        let plan = Plan::new(
            script.to_str().unwrap(),
            &[],
            &BTreeMap::new(),
            &sandbox,
            &inherited(),
        )
        .unwrap();
        let has = |path: &Path, access: Access| {
            plan.rules
                .iter()
                .any(|rule| path.starts_with(&rule.path) && covers(rule.access, access))
        };
        assert!(has(&venv, Access::ReadExec), "{:#?}", plan.rules);
        assert!(has(Path::new("/usr/bin/env"), Access::ReadExec));
        // Nothing of the user's home, nothing writable.
        assert!(!has(Path::new("/home/someone"), Access::Read));
        assert!(
            plan.rules
                .iter()
                .all(|rule| rule.access != Access::ReadWrite)
        );
        assert!(has(dir.path(), Access::Read));
        assert!(!has(dir.path(), Access::ReadWrite));
    }

    #[test]
    fn a_venv_interpreter_gets_its_environment_and_a_relative_script() {
        let dir = tempfile::tempdir().unwrap();
        let venv = dir.path().join(".venv");
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        std::fs::write(venv.join("pyvenv.cfg"), "home = /usr/bin\n").unwrap();
        std::os::unix::fs::symlink("/bin/sh", venv.join("bin/python")).unwrap();
        let script = dir.path().join("server.py");
        std::fs::write(&script, "print()\n").unwrap();
        let cwd = std::env::current_dir().unwrap();
        let relative = pathdiff(&script, &cwd);
        let plan = Plan::new(
            venv.join("bin/python").to_str().unwrap(),
            &[relative],
            &BTreeMap::new(),
            &SandboxConfig::default(),
            &inherited(),
        )
        .unwrap();
        let has = |path: &Path, access: Access| {
            plan.rules.iter().any(|rule| {
                path.canonicalize().unwrap().starts_with(&rule.path) && covers(rule.access, access)
            })
        };
        assert!(
            has(&venv.join("pyvenv.cfg"), Access::ReadExec),
            "{:#?}",
            plan.rules
        );
        assert!(has(&script, Access::Read), "{:#?}", plan.rules);
        assert!(!has(dir.path(), Access::Read), "{:#?}", plan.rules);
        assert_eq!(
            plan.launch.as_ref().map(|launch| launch.launcher.as_str()),
            Some("virtual environment")
        );
    }

    /// `path` relative to `base` (both absolute), through `..` as needed.
    fn pathdiff(path: &Path, base: &Path) -> String {
        let common = path
            .components()
            .zip(base.components())
            .take_while(|(a, b)| a == b)
            .count();
        let ups = base.components().count() - common;
        let mut out = PathBuf::new();
        for _ in 0..ups {
            out.push("..");
        }
        for part in path.components().skip(common) {
            out.push(part);
        }
        out.display().to_string()
    }

    #[test]
    fn a_table_path_that_does_not_exist_is_named() {
        let sandbox = SandboxConfig {
            write: vec!["/no/such/directory/anywhere".into()],
            ..SandboxConfig::default()
        };
        let err = Plan::new("sh", &[], &BTreeMap::new(), &sandbox, &inherited()).unwrap_err();
        assert!(
            err.to_string().contains("/no/such/directory/anywhere"),
            "{err}"
        );
    }

    #[test]
    fn an_unknown_program_is_named() {
        let err = Plan::new(
            "no-such-program-anywhere",
            &[],
            &BTreeMap::new(),
            &SandboxConfig::default(),
            &inherited(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("no-such-program-anywhere"));
    }
}
