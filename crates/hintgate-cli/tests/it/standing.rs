//! Standing ("always") approvals against someone who can write the state
//! directory or the database but not the audit key, end to end: a real
//! gateway in front of the fixture server, a person answering through
//! `hintgate approvals`, `hintgate pins revoke`, and the attacker's copies,
//! against SQLite and PostgreSQL.

use std::path::Path;
use std::process::{Output, Stdio};

use serde_json::{Value, json};

use crate::host::{Host, fixture_server, is_error};
use crate::util::{code, hintgate, stderr, stdout};

/// Where the store is, and how the attacker copies it and puts it back.
enum Backend {
    /// `state/state.db`, copied as files.
    Sqlite,
    /// A PostgreSQL database shared through its address, copied by its
    /// administrator table by table; the audit key is a file every machine
    /// names.
    Postgres { url: String, key: String },
}

/// The tables of a copy of the PostgreSQL store that approvals and the log
/// live in.
const TABLES: [&str; 4] = ["audit", "approval_log", "always", "pins"];

impl Backend {
    /// The flags every command needs to reach the store.
    fn flags(&self) -> Vec<String> {
        match self {
            Self::Sqlite => Vec::new(),
            Self::Postgres { url, key } => vec![
                "--store".into(),
                url.clone(),
                "--audit-key".into(),
                key.clone(),
            ],
        }
    }

    /// Takes a copy of the database (a backup the attacker keeps).
    fn back_up(&self, dir: &Path) {
        match self {
            Self::Sqlite => {
                let backup = dir.join("backup");
                std::fs::create_dir_all(&backup).unwrap();
                for name in database_files(&dir.join("state")) {
                    std::fs::copy(dir.join("state").join(&name), backup.join(&name)).unwrap();
                }
            }
            Self::Postgres { url, .. } => {
                let mut client = postgres::Client::connect(url, postgres::NoTls).unwrap();
                for table in TABLES {
                    client
                        .batch_execute(&format!(
                            "DROP TABLE IF EXISTS public.copy_{table};
                             CREATE TABLE public.copy_{table} AS SELECT * FROM hintgate.{table};"
                        ))
                        .unwrap();
                }
            }
        }
    }

    /// Puts the copy back in place of the database (the head stays).
    fn put_back(&self, dir: &Path) {
        match self {
            Self::Sqlite => {
                let state = dir.join("state");
                for name in database_files(&state) {
                    std::fs::remove_file(state.join(name)).unwrap();
                }
                for name in database_files(&dir.join("backup")) {
                    std::fs::copy(dir.join("backup").join(&name), state.join(&name)).unwrap();
                }
            }
            Self::Postgres { url, .. } => {
                let mut client = postgres::Client::connect(url, postgres::NoTls).unwrap();
                for table in TABLES {
                    client
                        .batch_execute(&format!(
                            "DELETE FROM hintgate.{table};
                             INSERT INTO hintgate.{table} SELECT * FROM public.copy_{table};"
                        ))
                        .unwrap();
                }
            }
        }
    }

    /// Runs SQL on the database as its attacker (`{s}`: the schema).
    fn sql(&self, dir: &Path, statements: &str) {
        match self {
            Self::Sqlite => rusqlite::Connection::open(dir.join("state").join("state.db"))
                .unwrap()
                .execute_batch(&statements.replace("{s}", ""))
                .unwrap(),
            Self::Postgres { url, .. } => postgres::Client::connect(url, postgres::NoTls)
                .unwrap()
                .batch_execute(&statements.replace("{s}", "hintgate."))
                .unwrap(),
        }
    }
}

/// The database's files in `dir` (the database, its write-ahead log and
/// shared memory, when there).
fn database_files(dir: &Path) -> Vec<String> {
    ["state.db", "state.db-wal", "state.db-shm"]
        .into_iter()
        .filter(|name| dir.join(name).exists())
        .map(str::to_owned)
        .collect()
}

/// A SQLite case, and a PostgreSQL one when a server is configured (with
/// the team's key file in a directory of its own).
fn backends(team: &Path) -> Vec<Backend> {
    let mut backends = vec![Backend::Sqlite];
    if let Some(url) = hintgate_store::test_util::postgres_database() {
        backends.push(Backend::Postgres {
            url,
            key: team.join("audit.key").display().to_string(),
        });
    }
    backends
}

/// `hintgate ARGS` on this machine's state directory, reaching the store.
fn hg(dir: &Path, backend: &Backend, args: &[&str]) -> Output {
    hintgate()
        .current_dir(dir)
        .env("HINTGATE_STATE_DIR", dir.join("state"))
        .args(args)
        .args(backend.flags())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// A wrap-mode gateway in front of the fixture server, trusted, on
/// `backend`, with `extra` flags; its host not yet initialized.
fn fixture_host(dir: &Path, backend: &Backend, extra: &[&str]) -> Host {
    let mut flags: Vec<String> = ["--trust", "trusted"]
        .iter()
        .chain(extra)
        .map(|flag| (*flag).to_owned())
        .collect();
    flags.extend(backend.flags());
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    crate::util::wrap_fixture(dir, &flags, &[], &[])
}

/// A wrap-mode gateway whose host declares no elicitation, so a person
/// answers through the approval queue.
fn gateway(dir: &Path, backend: &Backend) -> Host {
    let mut host = fixture_host(dir, backend, &["--ask-timeout", "600"]);
    host.initialize(json!({}));
    host
}

/// `hintgate run` with no host (stdin closed): it ends at once, or fails
/// to start.
fn start(dir: &Path, backend: &Backend) -> Output {
    let server = fixture_server();
    let mut args = vec!["run", "--trust", "trusted"];
    let flags = backend.flags();
    args.extend(flags.iter().map(String::as_str));
    args.extend(["--", "python3", server.as_str()]);
    hintgate()
        .current_dir(dir)
        .env("HINTGATE_STATE_DIR", dir.join("state"))
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The call `write_note` waits in the queue; `answer` it (`approve` with
/// `--remember always`, or `deny`); its result.
fn asked_and_answered(
    host: &mut Host,
    dir: &Path,
    backend: &Backend,
    id: &str,
    answer: &str,
) -> Value {
    host.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "write_note", "arguments": {"text": id}}}));
    let entry = waiting(dir, backend);
    assert_eq!(entry["tool"], "write_note");
    let queued = entry["id"].to_string();
    let mut args = vec!["approvals", answer, queued.as_str()];
    if answer == "approve" {
        args.extend(["--remember", "always"]);
    }
    let answered = hg(dir, backend, &args);
    assert_eq!(code(&answered), 0, "{}", stderr(&answered));
    host.wait_for(&json!(id))["result"].clone()
}

/// The one call waiting in the queue.
fn waiting(dir: &Path, backend: &Backend) -> Value {
    for _ in 0..1200 {
        let out = hg(dir, backend, &["approvals", "list", "--json"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        if let Some(line) = stdout(&out).lines().next() {
            return serde_json::from_str(line).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("no call came to the queue");
}

/// The configured name the wrap-mode gateway gave the fixture server.
fn server_name(dir: &Path, backend: &Backend) -> String {
    let pins = hg(dir, backend, &["pins", "list", "--json"]);
    assert_eq!(code(&pins), 0, "{}", stderr(&pins));
    let pins: Vec<Value> = serde_json::from_slice(&pins.stdout).unwrap();
    pins.iter().find(|pin| pin["tool"] == "write_note").unwrap()["server"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// `hintgate log verify --json`: the exit code and the problem codes.
fn verify(dir: &Path, backend: &Backend) -> (i32, Vec<String>) {
    let out = hg(dir, backend, &["log", "verify", "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}{}", stdout(&out), stderr(&out)));
    let codes = report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|problem| problem["problem"].as_str().unwrap().to_owned())
        .collect();
    (code(&out), codes)
}

/// The kinds of the log's records, in order.
fn kinds(dir: &Path, backend: &Backend) -> Vec<String> {
    let out = hg(dir, backend, &["log", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    stdout(&out)
        .lines()
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap()["kind"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

#[test]
fn a_database_put_back_after_a_revocation_stops_the_gateway_until_accepted_and_the_tool_is_asked_again()
 {
    let team = tempfile::tempdir().unwrap();
    for backend in backends(team.path()) {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        // A person approves `write_note` always.
        let mut host = gateway(dir, &backend);
        assert!(!is_error(&asked_and_answered(
            &mut host, dir, &backend, "c1", "approve"
        )));
        host.close();
        backend.back_up(dir);
        // Then revokes it at this machine.
        let server = server_name(dir, &backend);
        let revoked = hg(dir, &backend, &["pins", "revoke", &server, "write_note"]);
        assert_eq!(code(&revoked), 0, "{}", stderr(&revoked));
        let mut host = gateway(dir, &backend);
        assert!(
            is_error(&asked_and_answered(&mut host, dir, &backend, "c2", "deny")),
            "revoked: asked, and denied"
        );
        host.close();
        assert!(
            kinds(dir, &backend).iter().any(|kind| kind == "revoke"),
            "the revocation is a record of the log"
        );

        // The copy from before the revocation is put back: its rows and its
        // log still hold the approval, but the log is shorter than the head.
        backend.put_back(dir);
        let refused = start(dir, &backend);
        let err = stderr(&refused);
        assert_eq!(code(&refused), 1, "{err}");
        assert!(
            err.contains("the audit log ends at record ")
                && err.contains("(`cut-off`)")
                && err.contains("run `hintgate log verify`")
                && err.contains("`hintgate log accept-rollback`"),
            "{err}"
        );
        let (exit, codes) = verify(dir, &backend);
        assert_eq!((exit, codes[0].as_str()), (2, "cut-off"), "{codes:?}");
        // On SQLite, the journal of the run after the copy names each of
        // its records the copy lacks.
        let journaled = &codes[1..];
        match backend {
            Backend::Sqlite => assert!(
                !journaled.is_empty() && journaled.iter().all(|code| code == "journal-not-indexed"),
                "{codes:?}"
            ),
            Backend::Postgres { .. } => assert!(journaled.is_empty(), "{codes:?}"),
        }

        // Accepted on purpose: the log says so, the gateway starts, and the
        // approval from the copy approves nothing: the tool is asked again.
        let accepted = hg(dir, &backend, &["log", "accept-rollback"]);
        assert_eq!(code(&accepted), 0, "{}", stderr(&accepted));
        assert!(
            stdout(&accepted).starts_with("accepted in record "),
            "{}",
            stdout(&accepted)
        );
        let again = hg(dir, &backend, &["log", "accept-rollback"]);
        assert!(
            stdout(&again).contains("nothing to accept"),
            "{}",
            stdout(&again)
        );
        let mut host = gateway(dir, &backend);
        assert!(is_error(&asked_and_answered(
            &mut host, dir, &backend, "c3", "deny"
        )));
        assert!(
            host.log()
                .contains("a standing approval of this tool approves nothing")
                && host.log().contains("accepts a rolled-back log"),
            "{}",
            host.log()
        );
        host.close();
        let (exit, codes) = verify(dir, &backend);
        assert_eq!(
            (exit, codes.as_slice()),
            (2, ["rolled-back".to_owned()].as_slice())
        );
        assert!(kinds(dir, &backend).iter().any(|kind| kind == "rollback"));
    }
}

#[test]
fn a_revoked_approvals_row_copied_back_asks_again_and_deleting_the_revocation_is_named() {
    let team = tempfile::tempdir().unwrap();
    for backend in backends(team.path()) {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        let mut host = gateway(dir, &backend);
        assert!(!is_error(&asked_and_answered(
            &mut host, dir, &backend, "c1", "approve"
        )));
        // Approved always: the next call runs unasked.
        let unasked = host.call("write_note", json!({"text": "unasked"}));
        assert!(!is_error(&unasked), "{unasked}");
        host.close();
        // The attacker keeps the row, sealed as hintgate wrote it.
        backend.sql(dir, "CREATE TABLE {s}kept AS SELECT * FROM {s}always");
        let server = server_name(dir, &backend);
        let revoked = hg(dir, &backend, &["pins", "revoke", &server, "write_note"]);
        assert_eq!(code(&revoked), 0, "{}", stderr(&revoked));
        backend.sql(dir, "INSERT INTO {s}always SELECT * FROM {s}kept");
        // The gateway starts (the log is whole) and asks: the row is older
        // than the log's revocation.
        let mut host = gateway(dir, &backend);
        assert!(is_error(&asked_and_answered(
            &mut host, dir, &backend, "c2", "deny"
        )));
        assert!(
            host.log()
                .contains("a standing approval of this tool approves nothing")
                && host.log().contains("revoked it or granted the tool anew"),
            "{}",
            host.log()
        );
        host.close();
        assert_eq!(verify(dir, &backend), (0, Vec::new()));

        // Deleting the revocation from the log is named by verify.
        let log = hg(dir, &backend, &["log", "--json"]);
        let revocation = stdout(&log)
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).unwrap())
            .find(|record| record["kind"] == "revoke")
            .unwrap()["seq"]
            .as_u64()
            .unwrap();
        backend.sql(
            dir,
            &format!(
                "DELETE FROM {{s}}audit WHERE seq = {revocation}; DELETE FROM {{s}}approval_log WHERE seq = {revocation}"
            ),
        );
        let out = hg(dir, &backend, &["log", "verify"]);
        assert_eq!(code(&out), 2, "{}", stdout(&out));
        assert!(
            stdout(&out).contains(&format!("record {revocation} is missing: it was deleted")),
            "{}",
            stdout(&out)
        );
    }
}

/// A standing approval revoked by another process (`hintgate pins revoke`)
/// while the gateway runs reaches it: its next calls of the tool are asked
/// about again. On SQLite the gateway reads the standing approvals again
/// every quarter of a second rather than watching the database's change
/// counter while no question waits, so this is the path that proves it.
#[test]
fn a_standing_approval_revoked_by_another_process_is_asked_again_by_the_running_gateway() {
    let team = tempfile::tempdir().unwrap();
    for backend in backends(team.path()) {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        let mut host = fixture_host(dir, &backend, &[]);
        let asked = std::rc::Rc::new(std::cell::Cell::new(0_u32));
        let counted = std::rc::Rc::clone(&asked);
        host.respond_with(move |_| {
            counted.set(counted.get() + 1);
            json!({"action": "accept", "content": {"approve": true, "remember": "this tool always"}})
        });
        host.initialize(json!({"elicitation": {}}));
        let call = |host: &mut Host, n: u32| {
            let result = host.call("write_note", json!({"text": format!("note {n}")}));
            assert!(!is_error(&result), "{result}");
        };
        // Asked once and approved always; the next call is not asked.
        call(&mut host, 1);
        call(&mut host, 2);
        assert_eq!(asked.get(), 1);

        let server = server_name(dir, &backend);
        let revoked = hg(dir, &backend, &["pins", "revoke", &server, "write_note"]);
        assert_eq!(code(&revoked), 0, "{}", stderr(&revoked));
        // Calls go on until one is asked about again, within a bound far
        // above the quarter of a second the gateway takes.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let mut n = 3;
        while asked.get() == 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "the revocation never reached the running gateway"
            );
            call(&mut host, n);
            n += 1;
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(asked.get(), 2);
        host.close();
    }
}
