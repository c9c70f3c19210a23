//! How hintgate is installed and run as a service: the systemd unit in
//! `examples/systemd` is valid and runs a command line the binary takes, and
//! the README's `cargo install` commands name the package that exists.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::util::{code, hintgate, repo_root, stderr};

/// The example unit, relative to the repository's root.
const UNIT: &str = "examples/systemd/hintgate.service";
const SHIP_UNIT: &str = "examples/systemd/hintgate-ship.service";

/// The unit's text.
fn unit_text() -> String {
    std::fs::read_to_string(repo_root().join(UNIT)).unwrap()
}

/// The directives of the unit's `[Service]` section, in order, with
/// continued lines joined (a line ending in `\` goes on with the next) and
/// comments left out.
fn service_directives(text: &str) -> Vec<(String, String)> {
    let mut directives = Vec::new();
    let mut section = String::new();
    let mut pending = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if pending.is_empty() && (trimmed.starts_with('#') || trimmed.starts_with(';')) {
            continue;
        }
        if let Some(rest) = trimmed.strip_suffix('\\') {
            pending.push_str(rest);
            pending.push(' ');
            continue;
        }
        pending.push_str(trimmed);
        let logical = std::mem::take(&mut pending);
        if logical.is_empty() {
            continue;
        }
        if logical.starts_with('[') {
            section = logical;
            continue;
        }
        if section == "[Service]" {
            let (key, value) = logical
                .split_once('=')
                .unwrap_or_else(|| panic!("not a directive: {logical}"));
            directives.push((key.trim().to_owned(), value.trim().to_owned()));
        }
    }
    assert!(pending.is_empty(), "the unit ends in a continued line");
    directives
}

/// The one value of `key` in the unit's `[Service]` section.
fn directive(directives: &[(String, String)], key: &str) -> String {
    let values: Vec<&String> = directives
        .iter()
        .filter(|(name, _)| name == key)
        .map(|(_, value)| value)
        .collect();
    assert_eq!(values.len(), 1, "`{key}=` is set once in the unit");
    values[0].clone()
}

/// The words of the unit's `ExecStart=` command line, the program first.
fn exec_start() -> Vec<String> {
    let command = directive(&service_directives(&unit_text()), "ExecStart");
    // Quoting and escapes would need systemd's own splitting; the unit uses
    // neither, so splitting on white space is exact.
    assert!(
        !command.contains(['"', '\'', '\\', ';']),
        "the test splits ExecStart on white space only: {command}"
    );
    // A prefix (`-`, `@`, `+`, ...) would change how systemd runs it.
    assert!(
        command.starts_with('/'),
        "ExecStart starts with the binary's absolute path: {command}"
    );
    command.split_whitespace().map(str::to_owned).collect()
}

/// The long options `hintgate run --help` documents, each with whether it
/// takes a value (`--name <VALUE>`; `--console[=<ADDR>]` takes one only
/// after `=`).
fn run_options() -> BTreeMap<String, bool> {
    let output = hintgate().args(["run", "--help"]).output().unwrap();
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let help = String::from_utf8(output.stdout).unwrap();
    let mut options = BTreeMap::new();
    for line in help.lines() {
        let trimmed = line.trim_start();
        let trimmed = trimmed.strip_prefix("-h, ").unwrap_or(trimmed);
        let Some(rest) = trimmed.strip_prefix("--") else {
            continue;
        };
        let end = rest.find([' ', '[', '=']).unwrap_or(rest.len());
        let name = format!("--{}", &rest[..end]);
        let takes_value = rest[end..].trim_start().starts_with('<');
        options.insert(name, takes_value);
    }
    assert!(
        options.contains_key("--listen") && options.contains_key("--help"),
        "the help lists the options: {help}"
    );
    options
}

/// Whether `program` can be started here.
fn exists(program: &str) -> bool {
    Command::new(program).arg("--version").output().is_ok()
}

#[test]
fn the_unit_passes_systemd_analyze_verify() {
    verify_unit(UNIT, "hintgate.service");
}

#[test]
fn the_shippers_unit_passes_systemd_analyze_verify_and_its_command_line_parses() {
    verify_unit(SHIP_UNIT, "hintgate-ship.service");
    let command = directive(
        &service_directives(&std::fs::read_to_string(repo_root().join(SHIP_UNIT)).unwrap()),
        "ExecStart",
    );
    let words: Vec<&str> = command.split_whitespace().collect();
    assert!(words[0].ends_with("/hintgate"), "{command}");
    // `--help` at the end: clap reads every word before it, so an option
    // the command does not take fails here.
    let output = hintgate()
        .args(words[1..].iter().map(|word| word.replace("%S", "/var/lib")))
        .arg("--help")
        .output()
        .unwrap();
    assert_eq!(code(&output), 0, "{command}: {}", stderr(&output));
    assert!(String::from_utf8_lossy(&output.stdout).contains("--cursor"));
}

/// `systemd-analyze verify` on the unit at `path` (in the repository), run
/// with the built binary in place of its `ExecStart` program.
#[expect(
    clippy::disallowed_macros,
    reason = "the test says when it cannot run systemd-analyze"
)]
fn verify_unit(path: &str, name: &str) {
    if !exists("systemd-analyze") {
        // The command line and the sandbox's options are still checked by
        // the other tests of this module.
        println!("note: no systemd-analyze on this machine; the unit's syntax is not verified");
        return;
    }
    // The unit names the installed binary; verify checks that ExecStart's
    // program exists and is executable, so point it at the one built here.
    let text = std::fs::read_to_string(repo_root().join(path)).unwrap();
    let command = directive(&service_directives(&text), "ExecStart");
    let program = command.split_whitespace().next().unwrap();
    let built = env!("CARGO_BIN_EXE_hintgate");
    assert!(Path::new(built).is_absolute());
    let dir = tempfile::tempdir().unwrap();
    let unit = dir.path().join(name);
    std::fs::write(
        &unit,
        text.replacen(
            &format!("ExecStart={program} "),
            &format!("ExecStart={built} "),
            1,
        ),
    )
    .unwrap();
    let output = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&unit)
        .env("SYSTEMD_LOG_COLOR", "0")
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "systemd-analyze verify: {said}");
    // An unknown key or a value systemd cannot parse is only a warning,
    // with exit 0: every line about the unit is a failure.
    let about_unit: Vec<&str> = said.lines().filter(|line| line.contains(name)).collect();
    assert!(
        about_unit.is_empty(),
        "systemd-analyze verify warns about the unit:\n{}",
        about_unit.join("\n")
    );
}

#[test]
fn every_flag_of_the_units_command_line_is_an_option_of_hintgate_run() {
    let words = exec_start();
    assert!(
        words[0].ends_with("/hintgate"),
        "the unit runs the `hintgate` binary: {}",
        words[0]
    );
    assert_eq!(words.get(1).map(String::as_str), Some("run"), "{words:?}");
    let options = run_options();
    let mut rest = words[2..].iter().peekable();
    let mut seen = Vec::new();
    while let Some(word) = rest.next() {
        let (flag, inline_value) = match word.split_once('=') {
            Some((flag, value)) => (flag, Some(value)),
            None => (word.as_str(), None),
        };
        assert!(
            flag.starts_with("--"),
            "`{word}` is not a long option: the unit runs `hintgate run` with options only"
        );
        let takes_value = *options
            .get(flag)
            .unwrap_or_else(|| panic!("`hintgate run --help` has no `{flag}`"));
        if takes_value && inline_value.is_none() {
            let value = rest
                .next()
                .unwrap_or_else(|| panic!("`{flag}` needs a value"));
            assert!(
                !value.starts_with("--"),
                "`{flag}` is followed by `{value}`"
            );
        }
        assert!(
            takes_value || inline_value.is_none(),
            "`{flag}` takes no value"
        );
        seen.push(flag.to_owned());
    }
    // What the unit is for: a loopback listener in gateway mode, on a
    // shared store whose key is named (its address comes from the
    // environment file, out of the command line).
    for wanted in ["--listen", "--config", "--audit-key"] {
        assert!(
            seen.iter().any(|flag| flag == wanted),
            "{wanted}: {words:?}"
        );
    }
    assert!(
        !seen.iter().any(|flag| flag == "--store"),
        "the store's address holds a password: it comes from HINTGATE_STORE, not the command line"
    );
}

#[test]
fn the_units_command_line_parses_and_fails_only_on_the_missing_config() {
    // The unit's own words, with its files moved into a temporary directory
    // where the configuration does not exist, and an ephemeral port: the
    // command line parses (no usage error) and the gateway stops at the
    // config, before it opens a store or a socket.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let words = exec_start();
    let args: Vec<String> = words[1..]
        .iter()
        .map(|word| {
            assert!(
                !word.contains('%') || word.starts_with("%S/"),
                "a specifier the test does not know: {word}"
            );
            word.replacen("%S/", &format!("{root}/var/lib/"), 1)
                .replacen("/etc/", &format!("{root}/etc/"), 1)
                .replacen("127.0.0.1:8787", "127.0.0.1:0", 1)
        })
        .collect();
    let output = hintgate()
        .current_dir(dir.path())
        .args(&args)
        .env_remove("HINTGATE_STORE")
        .env_remove("HINTGATE_AUDIT_KEY_FILE")
        .output()
        .unwrap();
    let said = stderr(&output);
    assert!(!said.contains("Usage:"), "a usage error: {said}");
    assert_eq!(code(&output), 64, "{said}");
    assert!(
        said.contains(&format!(
            "cannot read config `{root}/etc/hintgate/hintgate.toml`"
        )),
        "{said}"
    );
    // Nothing was made: no state directory, no key.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn the_unit_leaves_the_sandbox_what_it_needs_and_stops_the_gateway_gracefully() {
    let directives = service_directives(&unit_text());
    // The sandbox makes a user, network and PID namespace for each server.
    let namespaces = directive(&directives, "RestrictNamespaces");
    let allowed: Vec<&str> = namespaces.split_whitespace().collect();
    for wanted in ["user", "net", "pid"] {
        assert!(allowed.contains(&wanted), "RestrictNamespaces={namespaces}");
    }
    // Landlock and seccomp are installed from each server's process.
    let filter = directive(&directives, "SystemCallFilter");
    assert!(!filter.starts_with('~'), "an allow list: {filter}");
    let calls: Vec<&str> = filter.split_whitespace().collect();
    for wanted in [
        "@system-service",
        "landlock_create_ruleset",
        "landlock_add_rule",
        "landlock_restrict_self",
        "seccomp",
    ] {
        assert!(calls.contains(&wanted), "SystemCallFilter={filter}");
    }
    // V8 (Node.js servers) needs writable, executable memory.
    assert!(
        !directives
            .iter()
            .any(|(key, _)| key == "MemoryDenyWriteExecute"),
        "MemoryDenyWriteExecute is left off"
    );
    for (key, value) in [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("PrivateDevices", "yes"),
        ("ProtectKernelTunables", "yes"),
        ("ProtectKernelModules", "yes"),
        ("ProtectKernelLogs", "yes"),
        ("LockPersonality", "yes"),
        ("StateDirectory", "hintgate"),
        // The gateway alone gets SIGTERM, and records `shutdown`.
        ("KillSignal", "SIGTERM"),
        ("KillMode", "mixed"),
    ] {
        assert_eq!(directive(&directives, key), value, "{key}=");
    }
    assert!(!directive(&directives, "TimeoutStopSec").is_empty());
    assert!(!directive(&directives, "RestrictAddressFamilies").is_empty());
    assert!(!directive(&directives, "EnvironmentFile").is_empty());
    // SIGHUP stops the gateway: a reload would stop it instead.
    assert!(!directives.iter().any(|(key, _)| key == "ExecReload"));
}

/// The `[package] name` and the `[[bin]]` names of a crate's manifest.
fn package_of(manifest: &Path) -> (String, Vec<String>) {
    let text = std::fs::read_to_string(manifest).unwrap();
    let manifest: toml::Table = toml::from_str(&text).unwrap();
    let name = manifest["package"]["name"].as_str().unwrap().to_owned();
    let bins = manifest
        .get("bin")
        .and_then(toml::Value::as_array)
        .map(|bins| {
            bins.iter()
                .map(|bin| bin["name"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_else(|| vec![name.clone()]);
    (name, bins)
}

/// The `cargo install` command lines in the README's shell blocks, each as
/// its words after `cargo install`, without a trailing comment.
fn readme_installs(readme: &str) -> Vec<Vec<String>> {
    let mut commands = Vec::new();
    let mut in_shell = false;
    for line in readme.lines() {
        if let Some(fence) = line.trim_start().strip_prefix("```") {
            in_shell = !in_shell && matches!(fence.trim(), "sh" | "bash" | "console" | "shell");
            continue;
        }
        if !in_shell {
            continue;
        }
        let line = line.split(" #").next().unwrap_or(line);
        let line = line.trim().trim_start_matches("$ ");
        if let Some(rest) = line.strip_prefix("cargo install ") {
            commands.push(rest.split_whitespace().map(str::to_owned).collect());
        }
    }
    commands
}

#[test]
fn the_readmes_install_commands_name_the_package_that_exists() {
    let root = repo_root();
    let (package, bins) = package_of(&root.join("crates/hintgate-cli/Cargo.toml"));
    assert_eq!(bins, ["hintgate"]);
    let workspace: toml::Table =
        toml::from_str(&std::fs::read_to_string(root.join("Cargo.toml")).unwrap()).unwrap();
    let repository = workspace["workspace"]["package"]["repository"]
        .as_str()
        .unwrap();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();

    // The Install section comes before the Quickstart.
    let install = readme.find("\n## Install\n").expect("an Install section");
    let quickstart = readme.find("\n## Quickstart\n").expect("a Quickstart");
    assert!(install < quickstart, "Install comes before the Quickstart");
    // Where the binary lands, for host configs.
    assert!(
        readme.contains(&format!("~/.cargo/bin/{}", bins[0])),
        "the README says where the binary lands"
    );

    let commands = readme_installs(&readme);
    let (mut from_git, mut from_path, mut lean) = (false, false, false);
    for words in &commands {
        let line = words.join(" ");
        let mut positional = Vec::new();
        let mut flags = BTreeMap::new();
        let mut rest = words.iter();
        while let Some(word) = rest.next() {
            match word.as_str() {
                "--locked" | "--force" => {
                    flags.insert(word.clone(), String::new());
                }
                "--git" | "--path" | "--profile" | "--root" | "--branch" | "--tag" | "--rev"
                | "--bin" => {
                    let value = rest.next().unwrap_or_else(|| panic!("{word}: {line}"));
                    flags.insert(word.clone(), value.clone());
                }
                flag if flag.starts_with('-') => panic!("an option the test does not know: {line}"),
                _ => positional.push(word.clone()),
            }
        }
        assert!(
            flags.contains_key("--locked"),
            "builds with Cargo.lock: {line}"
        );
        for named in &positional {
            assert_eq!(named, &package, "the package is `{package}`: {line}");
        }
        if let Some(bin) = flags.get("--bin") {
            assert!(bins.contains(bin), "{line}");
        }
        if let Some(profile) = flags.get("--profile") {
            let profiles = workspace["profile"].as_table().unwrap();
            assert!(
                profiles.contains_key(profile),
                "no `[profile.{profile}]` in the workspace: {line}"
            );
            lean |= profile == "dist";
        }
        match (flags.get("--git"), flags.get("--path")) {
            (Some(url), None) => {
                assert_eq!(url, repository, "{line}");
                // A repository holds several packages: the command names one.
                assert_eq!(positional, std::slice::from_ref(&package), "{line}");
                from_git = true;
            }
            (None, Some(path)) => {
                let (at_path, _) = package_of(&root.join(path).join("Cargo.toml"));
                assert_eq!(at_path, package, "{line}");
                from_path = true;
            }
            _ => panic!("installs from `--git` or `--path`: {line}"),
        }
    }
    assert!(from_git, "an install from the repository: {commands:?}");
    assert!(from_path, "an install from a checkout: {commands:?}");
    assert!(lean, "an install with `--profile dist`: {commands:?}");
}
