//! The decision hook from the command line: `hintgate explain` runs it, the
//! two shipped examples (`examples/hooks/decide.py`, persistent, and
//! `examples/hooks/decide.sh`, per call) answer as their comments say, and
//! the Python one decides real calls to the real filesystem server through
//! `hintgate run`, with what it refuses never reaching the disk.

use std::path::Path;

use serde_json::{Value, json};

use crate::host::{Host, is_error, text};
use crate::peers::npm_bin;
use crate::util::{code, hintgate, log_json, repo_root, stderr, stdout};

fn example(name: &str) -> String {
    repo_root()
        .join("examples/hooks")
        .join(name)
        .canonicalize()
        .unwrap()
        .display()
        .to_string()
}

/// How long a hook may take here, where the test is not about its time
/// limit: a busy machine can take seconds to start Python, and the default
/// limit (2 s) would refuse the call for it.
const HOOK_PATIENCE: &str = "decide_timeout_ms = 15000\n";

/// A config with the filesystem server `fs` (untrusted) over `root`, and
/// the hook `command`.
fn config(dir: &Path, root: &Path, command: &[String], mode: &str) -> std::path::PathBuf {
    let command: Vec<String> = command.iter().map(|word| format!("{word:?}")).collect();
    let text = format!(
        "[gateway]\ndecide_command = [{}]\ndecide_command_mode = \"{mode}\"\n{HOOK_PATIENCE}ask_timeout_s = 1\n\n[servers.fs]\ncommand = {:?}\nargs = [{:?}]\n",
        command.join(", "),
        npm_bin("mcp-server-filesystem"),
        root.display().to_string(),
    );
    let path = dir.join("hintgate.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn explain_json(
    dir: &Path,
    config: &Path,
    tool: &Value,
    arguments: &Value,
    env: &[(&str, &str)],
    extra: &[&str],
) -> (i32, Value) {
    std::fs::write(dir.join("tool.json"), tool.to_string()).unwrap();
    std::fs::write(dir.join("args.json"), arguments.to_string()).unwrap();
    let mut command = hintgate();
    command.current_dir(dir).args([
        "explain",
        "--config",
        &config.display().to_string(),
        "--server",
        "fs",
        "--tool",
        "tool.json",
        "--args",
        "args.json",
        "--json",
    ]);
    command.args(extra);
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().unwrap();
    let parsed = serde_json::from_str(&stdout(&output))
        .unwrap_or_else(|err| panic!("{err}: {} {}", stdout(&output), stderr(&output)));
    (code(&output), parsed)
}

fn write_file() -> Value {
    json!({"name": "write_file", "inputSchema": {"type": "object"},
           "annotations": {"readOnlyHint": false, "destructiveHint": true}})
}

fn answer_schema() -> jsonschema::Validator {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("docs/hook-answer.schema.json")).unwrap(),
    )
    .unwrap();
    jsonschema::validator_for(&schema).unwrap()
}

#[test]
fn explain_runs_the_python_example_hook_and_shows_what_it_answered() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    std::fs::create_dir(&project).unwrap();
    let home = dir.path().display().to_string();
    let project_text = project.display().to_string();
    let config = config(
        dir.path(),
        dir.path(),
        &["python3".to_owned(), example("decide.py")],
        "persistent",
    );
    let env = [
        ("HOME", home.as_str()),
        ("HINTGATE_PROJECT", project_text.as_str()),
    ];
    let schema = answer_schema();

    let inside = json!({"path": project.join("notes.md").display().to_string(), "content": "x"});
    let (exit, explanation) = explain_json(dir.path(), &config, &write_file(), &inside, &env, &[]);
    assert_eq!(exit, 0);
    assert_eq!(explanation["verdict"], "allow", "{explanation}");
    assert_eq!(explanation["reasons"], json!(["hook"]));
    assert_eq!(
        explanation["reason_details"][0]["note"],
        "a write inside the project, which is under version control"
    );
    let hook = &explanation["hook"];
    assert_eq!(hook["question"]["tool"]["name"], "write_file");
    assert_eq!(hook["question"]["hintgate"]["verdict"], "ask");
    let answer: Value = serde_json::from_str(hook["answer"].as_str().unwrap()).unwrap();
    assert!(schema.is_valid(&answer), "{answer}");

    let outside = json!({"path": "/etc/motd", "content": "x"});
    let (_, explanation) = explain_json(dir.path(), &config, &write_file(), &outside, &env, &[]);
    assert_eq!(explanation["verdict"], "ask");
    assert_eq!(explanation["reasons"][0], "hook");

    let secret = json!({"path": format!("{home}/.ssh/id_ed25519"), "content": "x"});
    let (exit, explanation) = explain_json(dir.path(), &config, &write_file(), &secret, &env, &[]);
    assert_eq!(exit, 2, "a denial exits 2");
    assert_eq!(explanation["verdict"], "deny");
    assert!(
        explanation["reason_details"][0]["note"]
            .as_str()
            .unwrap()
            .contains(".ssh"),
        "{explanation}"
    );

    // Without the hook, the built-in steps decide.
    let (_, explanation) = explain_json(
        dir.path(),
        &config,
        &write_file(),
        &inside,
        &env,
        &["--no-hook"],
    );
    assert_eq!(explanation["verdict"], "ask");
    assert!(explanation.get("hook").is_none());
}

#[test]
fn explain_runs_the_shell_example_hook_once_per_call() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), dir.path(), &[example("decide.sh")], "per-call");
    let freeze = dir.path().join("freeze");
    let freeze_text = freeze.display().to_string();
    let env = [("HINTGATE_FREEZE", freeze_text.as_str())];
    let schema = answer_schema();

    let destructive = json!({"path": "/tmp/x", "content": "rm -rf /"});
    let (_, explanation) =
        explain_json(dir.path(), &config, &write_file(), &destructive, &env, &[]);
    assert_eq!(explanation["verdict"], "deny", "{explanation}");
    assert_eq!(
        explanation["reason_details"][0]["note"],
        "the arguments hold a destructive command"
    );
    let answer: Value =
        serde_json::from_str(explanation["hook"]["answer"].as_str().unwrap()).unwrap();
    assert!(schema.is_valid(&answer), "{answer}");

    // It abstains: the profile asks about an untrusted write, as without it.
    let calm = json!({"path": "/tmp/x", "content": "hello"});
    let (_, explanation) = explain_json(dir.path(), &config, &write_file(), &calm, &env, &[]);
    assert_eq!(explanation["verdict"], "ask");
    assert_eq!(explanation["reasons"][0], "not-read-only");
    let answer: Value =
        serde_json::from_str(explanation["hook"]["answer"].as_str().unwrap()).unwrap();
    assert_eq!(answer, json!({"verdict": "abstain"}));

    // A change freeze asks about everything, reads included.
    std::fs::write(&freeze, "").unwrap();
    let read = json!({"name": "read_text_file", "inputSchema": {"type": "object"}});
    let (_, explanation) = explain_json(dir.path(), &config, &read, &calm, &env, &[]);
    assert_eq!(explanation["verdict"], "ask");
    assert_eq!(explanation["reasons"][0], "hook");
}

#[test]
fn explain_names_a_hook_that_fails() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(
        dir.path(),
        dir.path(),
        &["sh".to_owned(), "-c".to_owned(), "echo not json".to_owned()],
        "per-call",
    );
    let (exit, explanation) =
        explain_json(dir.path(), &config, &write_file(), &json!({}), &[], &[]);
    assert_eq!(exit, 2);
    assert_eq!(explanation["reasons"], json!(["hook-failed"]));
    assert_eq!(explanation["hook"]["answer"], "not json");

    let config = config_with_timeout(dir.path(), &["sleep".to_owned(), "30".to_owned()]);
    let (exit, explanation) =
        explain_json(dir.path(), &config, &write_file(), &json!({}), &[], &[]);
    assert_eq!(exit, 2);
    assert_eq!(
        explanation["reason_details"][0]["note"],
        "the decision hook did not answer within 300 ms"
    );
}

fn config_with_timeout(dir: &Path, command: &[String]) -> std::path::PathBuf {
    let path = config(dir, dir, command, "per-call");
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace(HOOK_PATIENCE, "decide_timeout_ms = 300\n");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn the_python_example_hook_decides_real_calls_to_the_filesystem_server() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let project = root.join("project");
    let elsewhere = root.join("elsewhere");
    let ssh = root.join(".ssh");
    for path in [&project, &elsewhere, &ssh] {
        std::fs::create_dir_all(path).unwrap();
    }
    std::fs::write(ssh.join("id_ed25519"), "SECRET KEY").unwrap();
    let config = config(
        dir.path(),
        &root,
        &["python3".to_owned(), example("decide.py")],
        "persistent",
    );
    let home = root.display().to_string();
    let project_text = project.display().to_string();
    let config_text = config.display().to_string();
    let mut host = Host::start(
        dir.path(),
        &["run", "--config", &config_text],
        &[("HOME", &home), ("HINTGATE_PROJECT", &project_text)],
    );
    host.initialize(json!({}));

    // Inside the project: the untrusted server's write runs unasked.
    let inside = project.join("notes.md");
    let written = host.call(
        "fs__write_file",
        json!({"path": inside.display().to_string(), "content": "from the hook test"}),
    );
    assert!(!is_error(&written), "{written}\n{}", host.log());
    assert_eq!(
        std::fs::read_to_string(&inside).unwrap(),
        "from the hook test"
    );

    // Elsewhere: the hook asks, and this host cannot ask a person.
    let outside = elsewhere.join("notes.md");
    let asked = host.call(
        "fs__write_file",
        json!({"path": outside.display().to_string(), "content": "never"}),
    );
    assert!(is_error(&asked), "{asked}");
    assert!(
        text(&asked).contains("hook:a write outside the project"),
        "{asked}"
    );
    assert!(
        !outside.exists(),
        "a write nobody approved reached the disk"
    );

    // A key: refused before the server sees it, even a read.
    let key = host.call(
        "fs__read_text_file",
        json!({"path": ssh.join("id_ed25519").display().to_string()}),
    );
    assert!(is_error(&key), "{key}");
    assert!(!text(&key).contains("SECRET KEY"), "{key}");
    assert!(text(&key).contains(".ssh"), "{key}");
    assert_eq!(host.close().code(), Some(0));

    let records: Vec<Value> = log_json(dir.path(), &[])
        .into_iter()
        .filter(|record| record["kind"] == "call")
        .collect();
    let reasons: Vec<&Value> = records.iter().map(|record| &record["reasons"]).collect();
    assert_eq!(
        reasons,
        [
            &json!(["hook:a write inside the project, which is under version control"]),
            &json!([
                "hook:a write outside the project",
                "untrusted-server",
                "destructive",
                "open-world"
            ]),
            &json!([format!("hook:the arguments name {home}/.ssh")]),
        ],
        "{records:?}"
    );
}
