//! The policy corpus's `cli = true` cases, run through the binary: the
//! command line must decide exactly as the library does.

use hintgate_policy::decide::Scope;
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
    if case.scope == Scope::Read {
        args.extend(["--scope".to_owned(), "read".to_owned()]);
    }
    let remembered = match case.remembered {
        RememberedArg::None => "none",
        RememberedArg::Session => "session",
        RememberedArg::Always => "always",
    };
    let sandbox = match case.sandbox {
        // The corpus's `auto` is the policy's: enforced unless best effort,
        // whatever this machine's kernel offers.
        SandboxArg::Auto => "configured",
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

/// Every corpus case file, sorted by name.
fn corpus_files() -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(policy_tests().join("corpus"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .collect();
    files.sort();
    files
}

#[test]
fn the_cli_decides_the_corpus_cases_as_the_library_does() {
    let files = corpus_files();
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

/// The gateway enforces what the policy decides: every corpus case that a
/// single session can reproduce (no taint, remembered approval, changed pin,
/// sandbox or unknown server) runs through `hintgate run` against a fixture
/// server that lists exactly the case's tool. The tool is listed exactly when
/// the case says it is visible; an allowed call reaches the server without a
/// question; an ask asks the person (who declines) and a deny refuses without
/// asking, both with the case's reasons.
#[test]
fn the_gateway_enforces_the_corpus_decisions() {
    use crate::host::{Host, fixture_server, is_error, text};

    let files = corpus_files();
    let mut checked_calls = 0;
    let mut failures = Vec::new();
    for path in files {
        let case = Case::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let reproducible = !case.tainted
            && case.scope == Scope::Write
            && case.remembered == RememberedArg::None
            && case.pinned.is_none()
            && case.pin != PinArg::Changed
            && !case.config.as_deref().unwrap_or("").contains("sandbox")
            && case.expect.reasons != ["unknown-server"];
        if !reproducible {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let dir = tempfile::tempdir().unwrap();
        let tool = case.tool_value(&fixture).unwrap();
        let tool_name = tool.get("name").and_then(Value::as_str).map(str::to_owned);
        std::fs::write(
            dir.path().join("tools.json"),
            Value::Array(vec![tool]).to_string(),
        )
        .unwrap();
        let server = fixture_server();
        let fixture_args = [server.as_str(), "--tools-file", "tools.json"];
        let (args, host_name): (Vec<String>, Option<String>) = match &case.config {
            Some(config) => {
                let mut table: toml::Table = toml::from_str(config).unwrap();
                let servers = table
                    .get_mut("servers")
                    .and_then(toml::Value::as_table_mut)
                    .unwrap();
                let mut only = servers
                    .remove(&case.server)
                    .and_then(|v| v.as_table().cloned())
                    .unwrap();
                for key in ["command", "args", "url", "headers", "env"] {
                    only.remove(key);
                }
                // A read-only instance is the same fixture, reached with an
                // environment of its own (so it lists the same definition).
                if let Some(read_only) = only
                    .get_mut("read_only")
                    .and_then(toml::Value::as_table_mut)
                {
                    let vouch = read_only.get("vouch").cloned().unwrap_or(false.into());
                    read_only.clear();
                    let mut env = toml::Table::new();
                    env.insert("FIXTURE_INSTANCE".into(), "read-only".into());
                    read_only.insert("env".into(), toml::Value::Table(env));
                    read_only.insert("vouch".into(), vouch);
                }
                only.insert("command".into(), "python3".into());
                only.insert(
                    "args".into(),
                    fixture_args
                        .iter()
                        .map(|a| toml::Value::from(*a))
                        .collect::<Vec<_>>()
                        .into(),
                );
                servers.clear();
                servers.insert(case.server.clone(), toml::Value::Table(only));
                // The case's hook answer comes from a real hook process:
                // one per call that reads its question and says the
                // answer (without an id, which a per-call hook may leave
                // out).
                if let Some(answer) = &case.hook {
                    let mut answer: Value = serde_json::from_str(answer)
                        .unwrap_or_else(|_| Value::String(answer.clone()));
                    if let Some(object) = answer.as_object_mut() {
                        object.remove("id");
                    }
                    let gateway = table
                        .get_mut("gateway")
                        .and_then(toml::Value::as_table_mut)
                        .unwrap();
                    gateway.insert(
                        "decide_command".into(),
                        vec![
                            toml::Value::from("sh"),
                            "-c".into(),
                            "cat >/dev/null; printf '%s\\n' \"$0\"".into(),
                            answer.to_string().into(),
                        ]
                        .into(),
                    );
                    gateway.insert("decide_command_mode".into(), "per-call".into());
                }
                std::fs::write(
                    dir.path().join("hintgate.toml"),
                    toml::to_string(&table).unwrap(),
                )
                .unwrap();
                let args = ["run", "--config", "hintgate.toml"]
                    .map(str::to_owned)
                    .to_vec();
                (
                    args,
                    tool_name.map(|tool| format!("{}__{tool}", case.server)),
                )
            }
            None => {
                let mut args = vec!["run".to_owned(), "--name".to_owned(), case.server.clone()];
                args.extend([
                    "--trust".to_owned(),
                    match case.wrap.trust {
                        TrustArg::Trusted => "trusted",
                        TrustArg::Untrusted => "untrusted",
                    }
                    .to_owned(),
                ]);
                args.extend([
                    "--profile".to_owned(),
                    match case.wrap.profile {
                        ProfileArg::AskWrites => "ask-writes",
                        ProfileArg::HideWrites => "hide-writes",
                        ProfileArg::AskAll => "ask-all",
                    }
                    .to_owned(),
                ]);
                if case.wrap.unattended {
                    args.push("--unattended".to_owned());
                }
                args.push("--".to_owned());
                args.push("python3".to_owned());
                args.extend(fixture_args.iter().map(|a| (*a).to_owned()));
                (args, tool_name)
            }
        };
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut host = Host::start(dir.path(), &args, &[]);
        host.respond_with(|_| serde_json::json!({"action": "decline"}));
        host.initialize(serde_json::json!({"elicitation": {}}));
        let list = host.request("tools/list", serde_json::json!({}));
        let listed: Vec<String> = list["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|tool| tool["name"].as_str().map(str::to_owned))
            .collect();
        if let (Some(visible), Some(host_name)) = (case.expect.visible, &host_name)
            && listed.contains(host_name) != visible
        {
            failures.push(format!(
                "--- {name}: listed {listed:?}, expected visible = {visible}"
            ));
        }
        let Some(host_name) = host_name else {
            continue;
        };
        let arguments: Value = case
            .arguments
            .as_deref()
            .map_or(serde_json::json!({}), |a| serde_json::from_str(a).unwrap());
        let result = host.call(&host_name, arguments);
        if text(&result).contains("do not match the tool's input schema") {
            // The case's arguments are not the point of the case.
            continue;
        }
        checked_calls += 1;
        let asked = host.requests.len();
        let reasons = result["_meta"]["hintgate/decision"]["reasons"].clone();
        let expected: Value = case.expect.reasons.clone().into();
        let problem = match case.expect.verdict.as_str() {
            "allow" if is_error(&result) || asked != 0 => Some(format!(
                "expected it to run unasked; asked {asked}: {result}"
            )),
            "allow" if !text(&result).starts_with("ran ") => {
                Some(format!("the server did not run it: {result}"))
            }
            "ask" if asked != 1 || !is_error(&result) || reasons != expected => Some(format!(
                "expected one question then a refusal with {expected}; asked {asked}: {result}"
            )),
            "deny" if asked != 0 || !is_error(&result) || reasons != expected => Some(format!(
                "expected a refusal with {expected} and no question; asked {asked}: {result}"
            )),
            _ => None,
        };
        if let Some(problem) = problem {
            failures.push(format!("--- {name}: {problem}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} case(s) differ through the gateway:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        checked_calls >= 40,
        "only {checked_calls} corpus calls went through the gateway"
    );
}
