//! Launcher lines (`npx -y PKG`, `uvx PKG`, `uv run SCRIPT`) read as the
//! package they start: pure parsing of a command line, shared by the
//! configuration's checks, the server's identity and the sandbox, which
//! resolves the same lines to what they run (so the version the identity
//! pins is the one the sandbox runs). No file is read here.

use std::ffi::OsStr;
use std::path::Path;

use serde::Serialize;

/// The package manager a launcher installs from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Ecosystem {
    /// npm (`npx`, `npm exec`, `pnpm dlx`, `bunx`).
    Npm,
    /// PyPI (`uvx`, `uv tool run`, `pipx run`).
    PyPi,
}

/// The first argument that is not an option (`npx -y pkg`, `uvx pkg`),
/// skipping the value of the options that take one.
#[must_use]
pub fn first_operand(args: &[String]) -> Option<&str> {
    operand_index(args).and_then(|index| args.get(index).map(String::as_str))
}

fn operand_index(args: &[String]) -> Option<usize> {
    let mut index = 0;
    while let Some(arg) = args.get(index) {
        match arg.as_str() {
            // Options that take a value.
            "-p" | "--package" | "--from" | "--with" | "--python" | "-c" | "--call"
            | "--directory" | "--project" | "--cache" | "--registry" => index += 2,
            option if option.starts_with('-') => index += 1,
            _ => return Some(index),
        }
    }
    None
}

/// The name in an npm spec (`@scope/name@1.2.3` → `@scope/name`).
#[must_use]
pub fn npm_name(spec: &str) -> String {
    let (scope, rest) = match spec.strip_prefix('@') {
        Some(rest) => ("@", rest),
        None => ("", spec),
    };
    let name = rest.split('@').next().unwrap_or(rest);
    format!("{scope}{name}")
}

/// A package spec split into its name and the exact version written in it,
/// if any (`pkg@1.2.3`, `pkg==1.2.3`; a range or a tag is no version).
#[must_use]
pub fn split_spec(ecosystem: Ecosystem, spec: &str) -> (String, Option<String>) {
    let (name, version) = match ecosystem {
        Ecosystem::Npm => {
            let name = npm_name(spec);
            let version = spec
                .get(name.len()..)
                .and_then(|rest| rest.strip_prefix('@'))
                .map(str::to_owned);
            (name, version)
        }
        Ecosystem::PyPi => match spec.split_once("==").or_else(|| spec.split_once('@')) {
            Some((name, version)) => (name.to_owned(), Some(version.to_owned())),
            None => (spec.to_owned(), None),
        },
    };
    let exact = version.filter(|version| {
        version.chars().next().is_some_and(|ch| ch.is_ascii_digit())
            && version
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '.' | '-' | '+'))
    });
    (name, exact)
}

/// A package a launcher line starts, as `hintgate sandbox prepare` installs
/// it: the launcher, the spec as written, and the command to run from it
/// when the line names one (`npx -p PKG CMD`, `uvx --from PKG CMD`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LauncherLine {
    /// The launcher (`npx`, `npm exec`, `pnpm dlx`, `bunx`, `uvx`,
    /// `uv tool run`, `pipx run`, `uv run`).
    pub launcher: &'static str,
    /// Its ecosystem (`None` for `uv run`, which runs a project).
    pub ecosystem: Option<Ecosystem>,
    /// The package spec as written (for `uv run`, the project directory).
    pub spec: String,
    /// The command to run from the package, when not its own name.
    pub bin: Option<String>,
    /// The arguments the server gets.
    pub rest: Vec<String>,
}

impl LauncherLine {
    /// The package's name (without its version).
    #[must_use]
    pub fn name(&self) -> String {
        match self.ecosystem {
            Some(ecosystem) => split_spec(ecosystem, &self.spec).0,
            None => self.spec.clone(),
        }
    }

    /// The exact version the spec pins, if it does.
    #[must_use]
    pub fn version(&self) -> Option<String> {
        self.ecosystem
            .and_then(|ecosystem| split_spec(ecosystem, &self.spec).1)
    }
}

/// Recognises a launcher line; `None` for any other command (no file is
/// read).
#[must_use]
pub fn launcher_line(command: &str, args: &[String]) -> Option<LauncherLine> {
    let program = Path::new(command)
        .file_name()
        .and_then(OsStr::to_str)
        .unwrap_or(command);
    let (launcher, ecosystem, args): (&'static str, _, &[String]) = match (
        program,
        args.first().map(String::as_str),
        args.get(1).map(String::as_str),
    ) {
        ("npx" | "pnpx", ..) => ("npx", Some(Ecosystem::Npm), args),
        ("bunx", ..) => ("bunx", Some(Ecosystem::Npm), args),
        ("npm", Some("exec" | "x"), _) => ("npm exec", Some(Ecosystem::Npm), args.get(1..)?),
        ("pnpm", Some("dlx"), _) => ("pnpm dlx", Some(Ecosystem::Npm), args.get(1..)?),
        ("uvx", ..) => ("uvx", Some(Ecosystem::PyPi), args),
        ("uv", Some("tool"), Some("run")) => ("uv tool run", Some(Ecosystem::PyPi), args.get(2..)?),
        ("uv", Some("run"), _) => ("uv run", None, args.get(1..)?),
        ("pipx", Some("run"), _) => ("pipx run", Some(Ecosystem::PyPi), args.get(1..)?),
        _ => return None,
    };
    let index = operand_index(args)?;
    let operand = args.get(index)?.clone();
    let mut rest: Vec<String> = args.get(index + 1..).unwrap_or_default().to_vec();
    if rest.first().is_some_and(|arg| arg == "--") {
        rest.remove(0);
    }
    let option = |names: &[&str]| -> Option<String> {
        let before = args.get(..index).unwrap_or_default();
        before.iter().enumerate().find_map(|(i, arg)| {
            names.iter().find_map(|name| {
                if arg == name {
                    before.get(i + 1).cloned()
                } else {
                    arg.strip_prefix(&format!("{name}=")).map(str::to_owned)
                }
            })
        })
    };
    if ecosystem.is_none() {
        // `uv run [--directory D] SCRIPT|python|CMD ...`: the project is the
        // directory named, or the script's.
        let project = option(&["--directory", "--project"]);
        let mut rest_all = vec![operand];
        rest_all.extend(rest);
        return Some(LauncherLine {
            launcher,
            ecosystem,
            spec: project.unwrap_or_default(),
            bin: None,
            rest: rest_all,
        });
    }
    let from = match ecosystem {
        Some(Ecosystem::Npm) => option(&["--package", "-p"]),
        _ => option(&["--from"]),
    };
    Some(match from {
        Some(spec) => LauncherLine {
            launcher,
            ecosystem,
            spec,
            bin: Some(operand),
            rest,
        },
        None => LauncherLine {
            launcher,
            ecosystem,
            spec: operand,
            bin: None,
            rest,
        },
    })
}
