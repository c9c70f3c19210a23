//! What a stdio server's command line resolves to on this machine: the
//! executable it starts and, for an npm or PyPI package, the version.
//!
//! Both are part of the server's identity (design §5): an `npx` command that
//! starts a different version, or a `PATH` that now finds another program,
//! is a different server, whose tools are pinned and approved anew.
//!
//! The version is found, in order: in the package spec itself
//! (`pkg@1.2.3`, `pkg==1.2.3`); in the `package.json` above an executable
//! that lives in a `node_modules` tree; in the `.dist-info` of the module a
//! Python console script imports; in npm's `npx` cache (the most recently
//! installed copy); in uv's or pipx's tool directory (for `uvx PKG`). When
//! none applies the version is left out, and the identity rests on the
//! command line and the executable.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use hintgate_sandbox::launch::{Ecosystem, first_operand, npm_name, split_spec};
use serde::Serialize;

/// What a command line resolves to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Resolved {
    /// The executable, absolute, with symbolic links resolved.
    pub executable: Option<PathBuf>,
    /// The package the command starts, and its version.
    pub package: Option<Package>,
}

/// A package and the version it resolved to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Package {
    /// Its name (`@modelcontextprotocol/server-filesystem`, `mcp-server-time`).
    pub name: String,
    /// Its version.
    pub version: String,
}

impl Resolved {
    /// A line for the prompt: `/usr/bin/npx (@scope/pkg 1.2.3)`.
    #[must_use]
    pub fn describe(&self) -> Option<String> {
        let executable = self
            .executable
            .as_ref()
            .map(|path| path.display().to_string());
        let package = self
            .package
            .as_ref()
            .map(|package| format!("{} {}", package.name, package.version));
        match (executable, package) {
            (Some(executable), Some(package)) => Some(format!("{executable} ({package})")),
            (Some(one), None) | (None, Some(one)) => Some(one),
            (None, None) => None,
        }
    }
}

/// Resolves a command line: `path` is the `PATH` the server gets, `home`
/// the home directory (for npm's cache).
#[must_use]
pub fn resolve(
    command: &str,
    args: &[String],
    path: Option<&OsStr>,
    home: Option<&Path>,
) -> Resolved {
    let executable = find_executable(command, path);
    let program = Path::new(command)
        .file_name()
        .and_then(OsStr::to_str)
        .unwrap_or(command);
    let spec = match program {
        "npx" | "bunx" | "pnpx" => first_operand(args).map(|spec| (Ecosystem::Npm, spec)),
        "uvx" | "pipx" => first_operand(args).map(|spec| (Ecosystem::PyPi, spec)),
        _ => None,
    };
    let package = match spec {
        Some((ecosystem, spec)) => pinned_spec(ecosystem, spec).or_else(|| match ecosystem {
            Ecosystem::Npm => npx_cached(&npm_name(spec), home),
            Ecosystem::PyPi => tool_installed(&split_spec(ecosystem, spec).0, &tool_env(home)),
        }),
        None if matches!(program, "node" | "nodejs") => node_script(args)
            .and_then(|script| std::fs::canonicalize(script).ok())
            .and_then(|script| node_package_above(&script)),
        None => executable
            .as_deref()
            .and_then(|exe| node_package_above(exe).or_else(|| python_script_package(exe))),
    };
    Resolved {
        executable,
        package,
    }
}

/// A version written in the spec itself (the spec parsing is the
/// sandbox's, which resolves the same lines to what they run).
fn pinned_spec(ecosystem: Ecosystem, spec: &str) -> Option<Package> {
    let (name, version) = split_spec(ecosystem, spec);
    version.map(|version| Package { name, version })
}

fn find_executable(command: &str, path: Option<&OsStr>) -> Option<PathBuf> {
    if command.contains('/') {
        return std::fs::canonicalize(command).ok();
    }
    std::env::split_paths(path?)
        .map(|dir| dir.join(command))
        .find(|candidate| is_executable(candidate))
        .and_then(|found| std::fs::canonicalize(found).ok())
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// The script `node` runs, when it is given by an absolute path: the first
/// operand after node's own options (skipping the modules `-r`/`--require`
/// and `--import` preload). `None` when node evaluates a string (`-e`,
/// `-p`) or the script is named relative to a directory the gateway does
/// not know.
fn node_script(args: &[String]) -> Option<&Path> {
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "-e" | "--eval" | "-p" | "--print" => return None,
            "-r" | "--require" | "--import" => {
                rest.next();
            }
            option if option.starts_with('-') => {}
            script => return Some(Path::new(script)).filter(|script| script.is_absolute()),
        }
    }
    None
}

/// The package an executable inside a `node_modules` tree belongs to.
fn node_package_above(executable: &Path) -> Option<Package> {
    let mut dir = executable.parent();
    while let Some(current) = dir {
        if current.file_name() == Some(OsStr::new("node_modules")) {
            return None;
        }
        let manifest = current.join("package.json");
        if let Ok(text) = std::fs::read_to_string(&manifest) {
            let value: serde_json::Value = serde_json::from_str(&text).ok()?;
            let in_modules = current
                .ancestors()
                .any(|above| above.file_name() == Some(OsStr::new("node_modules")));
            if !in_modules {
                return None;
            }
            return Some(Package {
                name: value.get("name")?.as_str()?.to_owned(),
                version: value.get("version")?.as_str()?.to_owned(),
            });
        }
        dir = current.parent();
    }
    None
}

/// The distribution of the module a Python console script imports, found
/// beside the script's virtual environment.
fn python_script_package(executable: &Path) -> Option<Package> {
    let text = script_text(executable)?;
    if !text.lines().next()?.contains("python") {
        return None;
    }
    let module = text.lines().find_map(|line| {
        let rest = line.trim().strip_prefix("from ")?;
        let (module, _) = rest.split_once(" import ")?;
        module.split('.').next().map(str::to_owned)
    })?;
    let env = executable.parent()?.parent()?;
    let wanted = module.to_ascii_lowercase().replace('-', "_");
    for lib in std::fs::read_dir(env.join("lib")).ok()?.flatten() {
        let site = lib.path().join("site-packages");
        let Ok(entries) = std::fs::read_dir(&site) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(stem) = name
                .to_str()
                .and_then(|name| name.strip_suffix(".dist-info"))
            else {
                continue;
            };
            let Some((dist, version)) = stem.rsplit_once('-') else {
                continue;
            };
            if dist.to_ascii_lowercase().replace('-', "_") == wanted {
                return Some(Package {
                    name: dist.to_owned(),
                    version: version.to_owned(),
                });
            }
        }
    }
    None
}

/// The text of `executable` when it is a script (it starts with `#!`).
/// Anything else (a compiled server, `node` itself: megabytes, read at
/// every start of the server) is not read beyond its first two bytes.
fn script_text(executable: &Path) -> Option<String> {
    use std::io::Read as _;
    let mut file = std::fs::File::open(executable).ok()?;
    let mut magic = [0u8; 2];
    file.read_exact(&mut magic).ok()?;
    if &magic != b"#!" {
        return None;
    }
    let mut rest = String::new();
    file.read_to_string(&mut rest).ok()?;
    Some(format!("#!{rest}"))
}

/// What says where uv and pipx keep their tools: the home directory given
/// and the gateway's own settings (as the sandbox reads them).
fn tool_env(home: Option<&Path>) -> std::collections::BTreeMap<String, String> {
    let mut vars: std::collections::BTreeMap<String, String> =
        ["UV_TOOL_DIR", "XDG_DATA_HOME", "PIPX_HOME"]
            .into_iter()
            .filter_map(|key| Some((key.to_owned(), std::env::var(key).ok()?)))
            .collect();
    if let Some(home) = home {
        vars.insert("HOME".to_owned(), home.display().to_string());
    }
    vars
}

/// The version of the PyPI package `name` installed as a uv or pipx tool,
/// which is what `uvx` without a version runs in the sandbox (and what a
/// `prepare = "on-start"` install left there): the first tool directory
/// that has it, in the sandbox's order.
fn tool_installed(
    name: &str,
    vars: &std::collections::BTreeMap<String, String>,
) -> Option<Package> {
    let version = hintgate_sandbox::launch::tool_installed(vars, name)?;
    Some(Package {
        name: name.to_owned(),
        version,
    })
}

/// The version of `name` in npm's `npx` cache: the most recently installed
/// copy, which is what `npx` runs without a version (and what the sandbox
/// runs for the same line).
fn npx_cached(name: &str, home: Option<&Path>) -> Option<Package> {
    let cache = std::env::var_os("npm_config_cache")
        .map(PathBuf::from)
        .or_else(|| home.map(|home| home.join(".npm")))?;
    let (_, version) = hintgate_sandbox::launch::npx_installed(&cache, name)
        .into_iter()
        .next()?;
    Some(Package {
        name: name.to_owned(),
        version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn versions_written_in_the_spec_are_read() {
        let npx = |args: &[&str]| resolve("npx", &strings(args), None, None).package;
        assert_eq!(
            npx(&[
                "-y",
                "@modelcontextprotocol/server-filesystem@2026.8.31",
                "/data"
            ]),
            Some(Package {
                name: "@modelcontextprotocol/server-filesystem".into(),
                version: "2026.8.31".into()
            })
        );
        assert_eq!(npx(&["-y", "pkg@latest"]), None, "a tag is not a version");
        assert_eq!(npx(&["-y", "pkg@^1.2"]), None, "a range is not a version");
        let uvx = resolve(
            "uvx",
            &strings(&["mcp-server-time==2026.10.19"]),
            None,
            None,
        );
        assert_eq!(uvx.package.map(|p| p.version), Some("2026.10.19".into()));
    }

    #[test]
    fn executables_are_found_on_the_path_given_and_described() {
        let dir = tempfile::tempdir().unwrap();
        let program = dir.path().join("server-bin");
        std::fs::write(&program, "#!/bin/sh\n").unwrap();
        let mut permissions = std::fs::metadata(&program).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
        std::fs::set_permissions(&program, permissions).unwrap();
        let path = std::env::join_paths([dir.path()]).unwrap();
        let found = resolve("server-bin", &[], Some(&path), None);
        assert_eq!(
            found.executable,
            Some(std::fs::canonicalize(&program).unwrap())
        );
        assert!(found.describe().unwrap().ends_with("server-bin"));
        assert_eq!(
            resolve("no-such-program", &[], Some(&path), None).executable,
            None
        );
    }

    /// A Python console script names the distribution of the module it
    /// imports; a compiled program beside it (which is not read past its
    /// first bytes) names none.
    #[test]
    fn a_python_console_script_names_its_distribution_and_a_program_none() {
        let dir = tempfile::tempdir().unwrap();
        let venv = dir.path().join("venv");
        let site = venv.join("lib/python3.12/site-packages");
        std::fs::create_dir_all(site.join("mcp_server_y-0.9.1.dist-info")).unwrap();
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        let script = venv.join("bin/mcp-server-y");
        std::fs::write(
            &script,
            "#!/opt/venv/bin/python3\n# -*- coding: utf-8 -*-\nimport sys\nfrom mcp_server_y.cli import main\nsys.exit(main())\n",
        )
        .unwrap();
        assert_eq!(
            python_script_package(&script),
            Some(Package {
                name: "mcp_server_y".to_owned(),
                version: "0.9.1".to_owned(),
            })
        );
        let program = venv.join("bin/compiled");
        let mut elf = b"\x7fELF\x02\x01\x01".to_vec();
        elf.extend(std::iter::repeat_n(0xffu8, 100_000));
        std::fs::write(&program, elf).unwrap();
        assert_eq!(python_script_package(&program), None);
        let shell = venv.join("bin/shell");
        std::fs::write(&shell, "#!/bin/sh\nfrom x import y\n").unwrap();
        assert_eq!(python_script_package(&shell), None);
    }

    #[test]
    fn a_node_script_given_by_its_path_names_its_package() {
        let dir = tempfile::tempdir().unwrap();
        let package = dir.path().join("node_modules/@scope/server");
        std::fs::create_dir_all(package.join("dist")).unwrap();
        std::fs::write(
            package.join("package.json"),
            r#"{"name": "@scope/server", "version": "2.0.1"}"#,
        )
        .unwrap();
        let script = package.join("dist/index.js").display().to_string();
        std::fs::write(&script, "").unwrap();
        let found = |args: &[&str]| resolve("node", &strings(args), None, None).package;
        let expected = Some(Package {
            name: "@scope/server".into(),
            version: "2.0.1".into(),
        });
        assert_eq!(found(&[&script, "/data"]), expected);
        assert_eq!(
            found(&["--no-warnings", "-r", "/preload.js", &script]),
            expected
        );
        // node evaluating a string, or a script named relative to a
        // directory the gateway does not know, names no package.
        assert_eq!(found(&["-e", "1", &script]), None);
        assert_eq!(found(&["dist/index.js"]), None);
    }

    #[test]
    fn a_node_package_is_found_above_its_executable() {
        let dir = tempfile::tempdir().unwrap();
        let package = dir.path().join("node_modules/@scope/tool");
        std::fs::create_dir_all(package.join("dist")).unwrap();
        std::fs::write(
            package.join("package.json"),
            r#"{"name": "@scope/tool", "version": "3.1.4"}"#,
        )
        .unwrap();
        std::fs::write(package.join("dist/index.js"), "").unwrap();
        assert_eq!(
            node_package_above(&package.join("dist/index.js")),
            Some(Package {
                name: "@scope/tool".into(),
                version: "3.1.4".into()
            })
        );
        let outside = dir.path().join("app");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(
            outside.join("package.json"),
            r#"{"name": "app", "version": "1.0.0"}"#,
        )
        .unwrap();
        assert_eq!(
            node_package_above(&outside.join("main.js")),
            None,
            "not a package from node_modules"
        );
    }
}

#[cfg(test)]
mod sandbox_agrees {
    use std::collections::BTreeMap;

    use super::*;

    /// The version the identity pins for an unpinned `npx -y PKG` is the
    /// one the sandbox runs: both take the newest copy in npm's cache.
    #[test]
    fn the_identity_pins_the_version_the_sandbox_runs() {
        let home = tempfile::tempdir().unwrap();
        for (hash, version, age) in [("old", "1.0.0", 1000), ("new", "2.0.0", 2000)] {
            let package = home
                .path()
                .join(".npm/_npx")
                .join(hash)
                .join("node_modules/@scope/server");
            std::fs::create_dir_all(&package).unwrap();
            std::fs::write(package.join("index.js"), "").unwrap();
            std::fs::write(
                package.join("package.json"),
                format!(r#"{{"name":"@scope/server","version":"{version}","bin":"index.js"}}"#),
            )
            .unwrap();
            // Installed at different times: the later one is newer.
            std::fs::File::options()
                .write(true)
                .open(package.join("package.json"))
                .unwrap()
                .set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(age))
                .unwrap();
        }
        let args = vec!["-y".to_owned(), "@scope/server".to_owned()];
        let identity = resolve("npx", &args, None, Some(home.path()));
        let node_dir = tempfile::tempdir().unwrap();
        let node = node_dir.path().join("node");
        std::fs::write(&node, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&node, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let inherited = BTreeMap::from([
            ("HOME".to_owned(), home.path().display().to_string()),
            ("PATH".to_owned(), node_dir.path().display().to_string()),
        ]);
        let plan = hintgate_sandbox::Plan::new(
            "npx",
            &args,
            &BTreeMap::new(),
            &hintgate_policy::config::SandboxConfig::default(),
            &inherited,
        )
        .unwrap();
        let runs = plan.launch.and_then(|launch| launch.version);
        assert_eq!(identity.package.map(|package| package.version), runs);
        assert_eq!(runs.as_deref(), Some("2.0.0"));
    }

    /// The same for an unpinned `uvx PKG`: the version installed as a tool
    /// (by hand, or by an install at start) is the one pinned.
    #[test]
    fn the_identity_pins_the_tool_version_the_sandbox_runs() {
        let dir = tempfile::tempdir().unwrap();
        let tools = dir.path().join("tools");
        let venv = tools.join("mcp-server-x");
        let site = venv.join("lib/python3.11/site-packages");
        std::fs::create_dir_all(site.join("mcp_server_x-1.4.2.dist-info")).unwrap();
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        std::fs::write(venv.join("bin/mcp-server-x"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(
            venv.join("bin/mcp-server-x"),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let vars = BTreeMap::from([("UV_TOOL_DIR".to_owned(), tools.display().to_string())]);
        let pinned = tool_installed("mcp-server-x", &vars).map(|package| package.version);
        let mut inherited = vars.clone();
        inherited.insert("PATH".to_owned(), "/usr/bin:/bin".to_owned());
        let plan = hintgate_sandbox::Plan::new(
            "uvx",
            &["mcp-server-x".to_owned()],
            &BTreeMap::new(),
            &hintgate_policy::config::SandboxConfig::default(),
            &inherited,
        )
        .unwrap();
        let runs = plan.launch.and_then(|launch| launch.version);
        assert_eq!(pinned, runs);
        assert_eq!(runs.as_deref(), Some("1.4.2"));
    }
}
