//! The policy corpus's `cli = true` cases, run through the binary: the
//! command line must decide exactly as the library does.

use hintgate_policy::test_util::{Case, PinArg, ProfileArg, RememberedArg, SandboxArg, TrustArg};
use serde_json::Value;

use crate::util::{code, policy_tests, run, stderr, stdout};

fn fixture(file: &str) -> String {
    std::fs::read_to_string(policy_tests().join("fixtures/peers").join(file)).unwrap()
}

fn args_for(case: &Case, dir: &std::path::Path) -> Vec<String> {
    let mut args = vec![
        "explain".to_owned(),
        "--json".to_owned(),
        "--server".to_owned(),
        case.server.clone(),
    ];
    let tool = case.tool_value(&fixture).unwrap();
    std::fs::write(dir.join("tool.json"), tool.to_string()).unwrap();
    args.extend(["--tool".to_owned(), "tool.json".to_owned()]);
    match &case.config {
        Some(config) => {
            std::fs::write(dir.join("hintgate.toml"), config).unwrap();
            args.extend(["--config".to_owned(), "hintgate.toml".to_owned()]);
        }
        None => {
            let trust = match case.wrap.trust {
                TrustArg::Trusted => "trusted",
                TrustArg::Untrusted => "untrusted",
            };
            let profile = match case.wrap.profile {
                ProfileArg::AskWrites => "ask-writes",
                ProfileArg::HideWrites => "hide-writes",
                ProfileArg::AskAll => "ask-all",
            };
            args.extend([
                "--trust".to_owned(),
                trust.to_owned(),
                "--profile".to_owned(),
                profile.to_owned(),
            ]);
            if case.wrap.unattended {
                args.push("--unattended".to_owned());
            }
        }
    }
    if let Some(arguments) = &case.arguments {
        std::fs::write(dir.join("args.json"), arguments).unwrap();
        args.extend(["--args".to_owned(), "args.json".to_owned()]);
    }
    match &case.pinned {
        Some(pinned) => {
            std::fs::write(dir.join("pinned.json"), pinned).unwrap();
            args.extend(["--pinned".to_owned(), "pinned.json".to_owned()]);
        }
        None => {
            let pin = match case.pin {
                PinArg::New => "new",
                PinArg::Unchanged => "unchanged",
                PinArg::Changed => "changed",
            };
            args.extend(["--pin".to_owned(), pin.to_owned()]);
        }
    }
    if case.tainted {
        args.push("--tainted".to_owned());
    }
    let remembered = match case.remembered {
        RememberedArg::None => "none",
        RememberedArg::Session => "session",
        RememberedArg::Always => "always",
    };
    let sandbox = match case.sandbox {
        SandboxArg::Auto => "auto",
        SandboxArg::Enforced => "enforced",
        SandboxArg::None => "none",
    };
    args.extend([
        "--remembered".to_owned(),
        remembered.to_owned(),
        "--sandbox".to_owned(),
        sandbox.to_owned(),
    ]);
    args
}

#[test]
fn the_cli_decides_the_corpus_cases_as_the_library_does() {
    let mut files: Vec<_> = std::fs::read_dir(policy_tests().join("corpus"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .collect();
    files.sort();
    let mut ran = 0;
    let mut failures = Vec::new();
    for path in files {
        let case = Case::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
        if !case.cli {
            continue;
        }
        ran += 1;
        let dir = tempfile::tempdir().unwrap();
        let args = args_for(&case, dir.path());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = run(dir.path(), &args);
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let got: Value = match serde_json::from_str(&stdout(&output)) {
            Ok(value) => value,
            Err(err) => {
                failures.push(format!(
                    "--- {name}: not JSON ({err}); stderr: {}",
                    stderr(&output)
                ));
                continue;
            }
        };
        if let Err(problem) = case.check(&got) {
            failures.push(format!("--- {name}\n{problem}"));
        }
        let library = case.run_library(&fixture).unwrap();
        if library != got {
            failures.push(format!(
                "--- {name}: the CLI's explanation differs from the library's"
            ));
        }
        let expected_code = if case.expect.verdict == "deny" { 2 } else { 0 };
        if code(&output) != expected_code {
            failures.push(format!(
                "--- {name}: exit code {} instead of {expected_code}",
                code(&output)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(ran >= 10, "only {ran} corpus cases ran through the CLI");
}
