//! Previews with real parts (design §4.3): the reference filesystem server,
//! untrusted, behind the gateway; the Python SDK as a host that asks a
//! person, and a host that cannot (the approval queue, `hintgate
//! approvals`). A person asked about a write sees the diff of what it will
//! change; a file that changed since they saw it is asked about again, not
//! written on the old approval; and nothing outside the directories the
//! server serves is ever read by the gateway.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::approvals::{approvals, listed, send_call, the_call};
use crate::host::{Host, is_error, text};
use crate::peers::{npm_bin, run_python, wrapped};
use crate::util::{code, log_json, stderr, stdout};

/// A temporary directory whose path has no part that looks like a
/// credential (tempfile's random names mix cases and digits, and the audit
/// log's detector may take such a path for a token and redact it in what
/// the store keeps): lowercase, the process id and a count. Removed on drop.
pub(crate) struct PlainDir(PathBuf);

impl PlainDir {
    pub(crate) fn new() -> Self {
        static COUNT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let path =
            std::env::temp_dir().join(format!("hintgate-previews-{}-{n}", std::process::id()));
        std::fs::create_dir(&path).unwrap();
        Self(path)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for PlainDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A directory the reference filesystem server serves, with one file.
pub(crate) fn served(dir: &Path) -> (PathBuf, PathBuf) {
    let data = dir.join("data");
    std::fs::create_dir(&data).unwrap();
    let data = data.canonicalize().unwrap();
    let file = data.join("notes.txt");
    std::fs::write(&file, "one\ntwo\nthree\n").unwrap();
    (data, file)
}

/// The gateway in wrap mode before the reference filesystem server
/// serving `data`, untrusted (the default).
pub(crate) fn gateway_command(data: &Path) -> Vec<String> {
    wrapped(
        &["--name", "fs", "--ask-timeout", "60"],
        &[npm_bin("mcp-server-filesystem"), data.display().to_string()],
    )
}

/// A write waiting in the approval queue: the gateway in front of the
/// reference filesystem server serving `data` (untrusted), and a host that
/// declares no elicitation whose `write_file` call `w1` changes `file`'s
/// "two" to "2" (the queue holds it for ten minutes at most).
pub(crate) struct QueuedWrite {
    pub(crate) dir: PlainDir,
    pub(crate) file: PathBuf,
    /// `file`, as the call names it.
    pub(crate) path: String,
    pub(crate) host: Host,
}

/// Starts a [`QueuedWrite`]; the call is sent, not yet listed.
pub(crate) fn queued_write() -> QueuedWrite {
    let dir = PlainDir::new();
    let (data, file) = served(dir.path());
    let path = file.display().to_string();
    let fs = npm_bin("mcp-server-filesystem");
    let data = data.display().to_string();
    let args = [
        "run",
        "--name",
        "fs",
        "--ask-timeout",
        "600",
        "--",
        &fs,
        &data,
    ];
    let mut host = Host::start(dir.path(), &args, &[]);
    host.initialize(json!({}));
    send_call(
        &mut host,
        "w1",
        "write_file",
        json!({"path": path, "content": "one\n2\nthree\n"}),
    );
    QueuedWrite {
        dir,
        file,
        path,
        host,
    }
}

/// The Python SDK host (with elicitation) making `calls`; `extra` adds to
/// the spec (the answers in turn, files written while a question is open).
fn ask_host(dir: &Path, data: &Path, calls: Value, extra: Value) -> Value {
    let mut spec = json!({"command": gateway_command(data), "answer": "decline", "calls": calls});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    run_python(dir, "sdk_host.py", &spec)
}

/// What the prompt shows of a write of `notes.txt` from "two" to "2".
fn expected_diff(file: &Path) -> String {
    let path = file.display();
    format!(
        "  preview (what the call will change, computed by hintgate from the file on this machine):\n    | --- a{path}\n    | +++ b{path}\n    | @@ -1,3 +1,3 @@\n    |  one\n    | -two\n    | +2\n    |  three\n"
    )
}

fn asked(report: &Value) -> Vec<String> {
    report["asked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| message.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_write_over_a_file_shows_its_exact_diff_in_the_elicitation_message_and_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let (data, file) = served(dir.path());
    let path = file.display().to_string();
    let report = ask_host(
        dir.path(),
        &data,
        json!([{"name": "write_file", "arguments": {"path": path, "content": "one\n2\nthree\n"}}]),
        json!({"answer": "accept"}),
    );
    let asked = asked(&report);
    assert_eq!(asked.len(), 1, "{report}");
    assert!(asked[0].contains(&expected_diff(&file)), "{}", asked[0]);
    assert_eq!(report["results"][0]["isError"], false, "{report}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "one\n2\nthree\n");

    // The record keeps the preview the person approved: source, digest, text.
    let records = log_json(dir.path(), &[]);
    let call = records
        .iter()
        .find(|record| record["tool"] == "write_file")
        .unwrap_or_else(|| panic!("{records:?}"));
    assert_eq!(call["preview"]["source"], "files", "{call}");
    assert_eq!(call["preview"]["kind"], "diff", "{call}");
    assert!(
        call["preview"]["digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert!(
        call["preview"]["text"]
            .as_str()
            .unwrap()
            .contains("-two\n+2\n"),
        "{call}"
    );
    let verify = crate::util::run(dir.path(), &["log", "--state-dir", "state", "verify"]);
    assert_eq!(code(&verify), 0, "{}{}", stdout(&verify), stderr(&verify));
}

#[test]
fn a_file_changed_while_the_person_was_asked_is_asked_about_again_and_not_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let (data, file) = served(dir.path());
    let path = file.display().to_string();
    // While the first question is open, someone else changes the file; the
    // person approves what they saw, then declines what it has become.
    let report = ask_host(
        dir.path(),
        &data,
        json!([{"name": "write_file", "arguments": {"path": path, "content": "one\n2\nthree\n"}}]),
        json!({
            "answers": ["accept", "decline"],
            "on_ask": [{"ask": 0, "write": path, "content": "someone else's work\n"}],
        }),
    );
    let asked = asked(&report);
    assert_eq!(asked.len(), 2, "asked again: {report}");
    assert!(asked[0].contains(&expected_diff(&file)), "{}", asked[0]);
    assert!(
        asked[1].starts_with("hintgate: the file changed after you were asked about this call"),
        "{}",
        asked[1]
    );
    assert!(
        asked[1].contains("    | -someone else's work\n    | +one\n    | +2\n    | +three\n"),
        "{}",
        asked[1]
    );
    assert_eq!(report["results"][0]["isError"], true, "{report}");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "someone else's work\n",
        "never written on the old approval"
    );
}

#[test]
fn the_queue_shows_the_diff_and_an_approval_given_for_an_older_file_is_asked_again() {
    // What the queue keeps is what the audit log would: a path that looks
    // like a token would be redacted there, so this one does not.
    // No elicitation: the write waits in the approval queue.
    let QueuedWrite {
        dir,
        file,
        mut host,
        ..
    } = queued_write();
    let waiting = listed(dir.path(), &[], 1);
    assert!(
        waiting[0]["prompt"]
            .as_str()
            .unwrap()
            .contains(&expected_diff(&file)),
        "{}",
        waiting[0]
    );
    let id = waiting[0]["id"].to_string();
    let shown = approvals(dir.path(), &[], &["show", &id]);
    assert_eq!(code(&shown), 0, "{}", stderr(&shown));
    let shown = stdout(&shown);
    assert!(
        shown.contains("    the whole preview (source: files):\n      | --- a")
            && shown.contains("      | -two\n      | +2\n"),
        "{shown}"
    );
    assert!(shown.contains("      | @@ -1,3 +1,3 @@\n"), "{shown}");

    // The file changes after the person read the diff, before they approve.
    std::fs::write(&file, "changed meanwhile\n").unwrap();
    let approved = approvals(dir.path(), &[], &["approve", &id]);
    assert_eq!(code(&approved), 0, "{}", stderr(&approved));
    // Asked again, in the queue, with what the call would change now.
    let again = listed(dir.path(), &[], 1);
    assert_ne!(again[0]["id"].to_string(), id);
    let prompt = again[0]["prompt"].as_str().unwrap();
    assert!(
        prompt.starts_with("hintgate: the file changed after you were asked about this call")
            && prompt.contains("    | -changed meanwhile\n"),
        "{prompt}"
    );
    let denied = approvals(dir.path(), &[], &["deny", &again[0]["id"].to_string()]);
    assert_eq!(code(&denied), 0, "{}", stderr(&denied));
    let result = the_call(&mut host, "w1");
    assert!(is_error(&result), "{result}");
    assert!(
        text(&result).contains("denied in the approval queue"),
        "{result}"
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "changed meanwhile\n"
    );
    host.close();
}

#[test]
fn nothing_outside_the_served_directories_is_read_and_the_call_is_still_asked() {
    let dir = tempfile::tempdir().unwrap();
    let (data, _) = served(dir.path());
    std::fs::create_dir(dir.path().join("outside")).unwrap();
    let outside = dir.path().join("outside").canonicalize().unwrap();
    // A FIFO nobody writes to: were the gateway to open it to read, it
    // would wait forever, and so would this test.
    let fifo = outside.join("pipe");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    std::os::unix::fs::symlink(&fifo, data.join("link")).unwrap();
    std::os::unix::fs::symlink(&outside, data.join("sub")).unwrap();
    let write = |path: PathBuf| json!({"name": "write_file", "arguments": {"path": path.display().to_string(), "content": "x"}});
    let report = ask_host(
        dir.path(),
        &data,
        json!([
            write(data.join("link")),
            write(fifo.clone()),
            write(data.join("sub/pipe"))
        ]),
        json!({}),
    );
    let asked = asked(&report);
    assert_eq!(asked.len(), 3, "each call is still asked about: {report}");
    assert!(
        asked[0].contains("  no preview: the path leads outside the directories the server serves (through a symbolic link)\n"),
        "{}",
        asked[0]
    );
    assert!(
        asked[1].contains("  no preview: the file is outside the directories the server serves\n"),
        "{}",
        asked[1]
    );
    assert!(
        asked[2].contains("  no preview: the path leads outside"),
        "{}",
        asked[2]
    );
    for result in report["results"].as_array().unwrap() {
        assert_eq!(result["isError"], true, "declined: {report}");
    }
}

/// Runs one of `examples/previews` with `args`, asks it `questions` (one a
/// line), and returns its answers.
fn example_previewer(script: &str, args: &[&str], questions: &[Value]) -> Vec<Value> {
    use std::io::Write;
    let path = crate::util::repo_root()
        .join("examples/previews")
        .join(script);
    let mut child = std::process::Command::new("python3")
        .arg(path)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for question in questions {
        writeln!(stdin, "{question}").unwrap();
    }
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn question(id: &str, tool: &str, arguments: Value) -> Value {
    json!({"version": 1, "id": id, "tool": {"name": tool}, "arguments": arguments})
}

#[test]
fn the_example_git_previewer_shows_what_a_commit_would_record_and_reads_one_repository() {
    let dir = tempfile::tempdir().unwrap();
    let repo = crate::util::git_repo(dir.path());
    std::fs::write(repo.join("notes.txt"), "hello\n").unwrap();
    let added = std::process::Command::new("git")
        .current_dir(&repo)
        .args(["add", "notes.txt"])
        .status()
        .unwrap();
    assert!(added.success());
    let repo_text = repo.display().to_string();
    let other = dir.path().display().to_string();
    let answers = example_previewer(
        "git_preview.py",
        &[&repo_text],
        &[
            question(
                "1",
                "git_commit",
                json!({"repo_path": repo_text, "message": "m"}),
            ),
            question(
                "2",
                "git_commit",
                json!({"repo_path": other, "message": "m"}),
            ),
            question("3", "git_reset", json!({"repo_path": repo_text})),
        ],
    );
    assert_eq!(answers[0]["id"], "1");
    assert_eq!(answers[0]["kind"], "diff");
    let text = answers[0]["text"].as_str().unwrap();
    assert!(
        text.contains("+++ b/notes.txt\n") && text.contains("+hello\n"),
        "{text}"
    );
    assert!(
        answers[1]["none"]
            .as_str()
            .unwrap()
            .contains("another repository")
    );
    assert_eq!(answers[2]["kind"], "diff");
}

#[test]
fn the_example_sql_previewer_plans_on_a_read_only_connection_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("data.db");
    let made = std::process::Command::new("python3")
        .arg("-c")
        .arg(format!(
            "import sqlite3; c = sqlite3.connect({:?}); c.execute('CREATE TABLE t (a INTEGER)'); c.executemany('INSERT INTO t VALUES (?)', [(1,), (2,), (3,)]); c.commit()",
            db.display().to_string()
        ))
        .status()
        .unwrap();
    assert!(made.success());
    let db_text = db.display().to_string();
    let answers = example_previewer(
        "sql_preview.py",
        &[&db_text],
        &[
            question(
                "1",
                "write_query",
                json!({"query": "DELETE FROM t WHERE a > 1"}),
            ),
            question(
                "2",
                "write_query",
                json!({"query": "DELETE FROM t; DROP TABLE t"}),
            ),
            question(
                "3",
                "write_query",
                json!({"query": "INSERT INTO nowhere VALUES (1)"}),
            ),
        ],
    );
    assert_eq!(answers[0]["kind"], "text", "{answers:?}");
    let text = answers[0]["text"].as_str().unwrap();
    assert!(text.contains("plan: SCAN t"), "{text}");
    assert!(
        text.contains("rows its WHERE clause matches now in t: 2"),
        "{text}"
    );
    assert!(
        answers[1]["none"]
            .as_str()
            .unwrap()
            .contains("one complete statement")
    );
    assert!(answers[2]["none"].as_str().unwrap().contains("cannot plan"));
    let count = std::process::Command::new("python3")
        .arg("-c")
        .arg(format!(
            "import sqlite3; print(sqlite3.connect({:?}).execute('SELECT count(*) FROM t').fetchone()[0])",
            db_text
        ))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&count.stdout).trim(), "3");
}

#[test]
fn a_trusted_reference_servers_dry_run_is_shown_as_its_claim_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (data, file) = served(dir.path());
    let config = format!(
        "[servers.fs]\ncommand = {:?}\nargs = [{:?}]\ntrust = \"trusted\"\n\n\
         [[previews]]\nserver = \"fs\"\ntool = \"edit_file\"\ndry_run_argument = \"dryRun\"\n",
        npm_bin("mcp-server-filesystem"),
        data.display().to_string(),
    );
    std::fs::write(dir.path().join("hintgate.toml"), config).unwrap();
    let command = vec![
        crate::peers::hintgate_path(),
        "run".to_owned(),
        "--config".to_owned(),
        "hintgate.toml".to_owned(),
    ];
    let path = file.display().to_string();
    let report = run_python(
        dir.path(),
        "sdk_host.py",
        &json!({"command": command, "answer": "decline", "calls": [
            {"name": "fs__edit_file", "arguments": {"path": path, "edits": [{"oldText": "two", "newText": "2"}]}},
        ]}),
    );
    let asked = asked(&report);
    assert_eq!(asked.len(), 1, "{report}");
    assert!(
        asked[0].contains(
            "  preview (the server's own dry run: its claim, which hintgate does not check):\n"
        ),
        "{}",
        asked[0]
    );
    assert!(
        asked[0].contains("    | -two\n") && asked[0].contains("    | +2\n"),
        "{}",
        asked[0]
    );
    assert_eq!(report["results"][0]["isError"], true, "declined: {report}");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "one\ntwo\nthree\n",
        "neither the dry run nor the declined call wrote it"
    );
}
