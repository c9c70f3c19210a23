//! `hintgate config check`: every problem in every file, with its position.

use anyhow::Result;
use hintgate_policy::diag::{Located, Severity};

use crate::args::CheckArgs;
use crate::exit::Exit;
use crate::{load, output};

/// Runs `hintgate config check`.
pub fn run(args: &CheckArgs) -> Result<Exit> {
    let mut any_error = false;
    let mut loaded_files = Vec::new();
    for path in &args.files {
        match load::config(path) {
            Ok(loaded) => loaded_files.push(loaded),
            Err(error) => {
                any_error = true;
                output::err(&format!("error: {error:#}\n"))?;
            }
        }
    }
    if args.json {
        let located: Vec<Located<'_>> = loaded_files
            .iter()
            .flat_map(|loaded| {
                loaded
                    .diagnostics
                    .iter()
                    .map(|diagnostic| diagnostic.locate(&loaded.path, &loaded.source))
            })
            .collect();
        output::out(&format!("{}\n", serde_json::to_string_pretty(&located)?))?;
    }
    for loaded in &loaded_files {
        let errors = count(loaded, Severity::Error);
        let warnings = count(loaded, Severity::Warning);
        any_error |= errors > 0;
        if args.json {
            continue;
        }
        if !loaded.diagnostics.is_empty() {
            output::out(&format!("{}\n", loaded.render()))?;
        }
        let summary = if errors == 0 && warnings == 0 {
            "ok".to_owned()
        } else {
            format!(
                "{} and {}",
                plural(errors, "error"),
                plural(warnings, "warning")
            )
        };
        output::out(&format!("{}: {summary}\n", loaded.path))?;
    }
    Ok(if any_error {
        Exit::Usage
    } else {
        Exit::Success
    })
}

fn count(loaded: &load::LoadedConfig, severity: Severity) -> usize {
    loaded
        .diagnostics
        .iter()
        .filter(|diagnostic| diagnostic.severity == severity)
        .count()
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}
