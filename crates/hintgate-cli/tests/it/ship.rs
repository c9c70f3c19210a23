//! `hintgate log ship`: the audit log copied to the system log, each
//! record with its fields and its chain position, received here on a
//! datagram socket the test binds where `/dev/log` would be.

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use crate::host::{Host, text};
use crate::util::{log_json, run, stderr, stdout};

/// Bounds a wait that should end; no test asserts on time.
const PATIENCE: Duration = Duration::from_secs(30);

/// A wrap-mode session in front of the fixture server, state in `dir/state`.
fn session(dir: &Path) -> Host {
    crate::util::wrap_fixture(dir, &["--name", "fx", "--trust", "trusted"], &[], &[])
}

/// The socket a system log would listen on.
fn logger(dir: &Path) -> UnixDatagram {
    let socket = UnixDatagram::bind(dir.join("log.sock")).unwrap();
    socket.set_read_timeout(Some(PATIENCE)).unwrap();
    socket
}

/// One message as the system log receives it: its priority and its JSON.
fn received(socket: &UnixDatagram) -> (u8, Value) {
    let mut buffer = vec![0; 1 << 20];
    let read = socket
        .recv(&mut buffer)
        .expect("a message reached the system log");
    let line = std::str::from_utf8(&buffer[..read]).unwrap();
    let (priority, rest) = line
        .strip_prefix('<')
        .and_then(|rest| rest.split_once('>'))
        .unwrap_or_else(|| panic!("no priority: {line}"));
    // `Mmm dd hh:mm:ss hintgate[PID]: MESSAGE`
    let (_, message) = rest
        .split_once("]: ")
        .unwrap_or_else(|| panic!("not the C library's format: {line}"));
    assert!(rest.get(15..25) == Some(" hintgate["), "{line}");
    (
        priority.parse().unwrap(),
        serde_json::from_str(message).unwrap(),
    )
}

/// Every message waiting on the socket, as received, without blocking.
fn drain_lines(socket: &UnixDatagram) -> Vec<String> {
    socket.set_nonblocking(true).unwrap();
    let mut lines = Vec::new();
    let mut buffer = vec![0; 1 << 20];
    while let Ok(read) = socket.recv(&mut buffer) {
        lines.push(String::from_utf8(buffer[..read].to_vec()).unwrap());
    }
    socket.set_nonblocking(false).unwrap();
    lines
}

/// Every message waiting on the socket, without blocking: priority and JSON.
fn drain(socket: &UnixDatagram) -> Vec<(u8, Value)> {
    drain_lines(socket)
        .iter()
        .map(|line| {
            let message = &line[line.find("]: ").unwrap() + 3..];
            let priority = line[1..line.find('>').unwrap()].parse().unwrap();
            (priority, serde_json::from_str(message).unwrap())
        })
        .collect()
}

/// `hintgate log ship --check FILE`.
fn check(dir: &Path, saved: &Path) -> std::process::Output {
    let state = dir.join("state").display().to_string();
    let saved = saved.display().to_string();
    run(
        dir,
        &["log", "--state-dir", &state, "ship", "--check", &saved],
    )
}

/// `hintgate log ship` once, with a cursor in `dir`.
fn ship(dir: &Path) -> std::process::Output {
    let state = dir.join("state").display().to_string();
    let socket = dir.join("log.sock").display().to_string();
    let cursor = dir.join("ship.cursor").display().to_string();
    run(
        dir,
        &[
            "log",
            "--state-dir",
            &state,
            "ship",
            "--socket",
            &socket,
            "--cursor",
            &cursor,
        ],
    )
}

#[test]
fn every_record_reaches_the_system_log_once_with_its_fields_and_chain_position() {
    let dir = tempfile::tempdir().unwrap();
    let socket = logger(dir.path());
    let mut host = session(dir.path());
    host.initialize(json!({}));
    assert!(text(&host.call("echo", json!({"text": "first"}))).contains("first"));
    let refused = host.request(
        "tools/call",
        json!({"name": "no_such_tool", "arguments": {}}),
    );
    assert!(refused.get("error").is_some(), "{refused}");
    assert!(host.close().success());

    let shipped = ship(dir.path());
    assert_eq!(shipped.status.code(), Some(0), "{}", stderr(&shipped));
    let messages = drain(&socket);
    let logged = log_json(dir.path(), &[]);

    // Every stored record once, in order, each chained to the one before.
    let seqs: Vec<u64> = messages
        .iter()
        .map(|(_, m)| m["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "{messages:?}"
    );
    for pair in messages.windows(2) {
        assert_eq!(pair[1].1["prev"], pair[0].1["link"], "{pair:?}");
        assert_ne!(pair[0].1["link"], pair[0].1["prev"], "{pair:?}");
    }
    // The calls carry what `hintgate log --json` shows of them.
    for call in &logged {
        let (priority, message) = messages
            .iter()
            .find(|(_, m)| m["seq"] == call["seq"])
            .unwrap_or_else(|| panic!("call {} was not shipped", call["seq"]));
        for field in [
            "server",
            "tool",
            "verdict",
            "reasons",
            "arguments",
            "at",
            "kind",
        ] {
            assert_eq!(message[field], call[field], "{field} of {message}");
        }
        // A refused call is a notice, the rest information (facility authpriv).
        let expected = if call["verdict"] == "deny" { 85 } else { 86 };
        assert_eq!(*priority, expected, "{message}");
    }
    assert!(logged.iter().any(|call| call["verdict"] == "deny"));
    // Outcomes name their call.
    assert!(
        messages
            .iter()
            .any(|(_, m)| m["kind"] == "outcome" || m["kind"] == "outcomes"),
        "{messages:?}"
    );

    // The cursor: a second run ships nothing; a new call's records follow.
    let again = ship(dir.path());
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    assert!(drain(&socket).is_empty());
    let mut host = session(dir.path());
    host.initialize(json!({}));
    host.call("echo", json!({"text": "second"}));
    assert!(host.close().success());
    let later = ship(dir.path());
    assert_eq!(later.status.code(), Some(0), "{}", stderr(&later));
    let new = drain(&socket);
    assert_eq!(
        new.first().map(|(_, m)| m["seq"].clone()),
        Some(json!(seqs.len() as u64 + 1)),
        "{new:?}"
    );
    assert_eq!(new[0].1["prev"], messages.last().unwrap().1["link"]);
    assert!(
        new.iter().any(|(_, m)| m["arguments"]["text"] == "second"),
        "{new:?}"
    );
}

#[test]
fn a_log_rewritten_after_it_was_shipped_is_refused_with_both_links() {
    let dir = tempfile::tempdir().unwrap();
    let socket = logger(dir.path());
    let mut host = session(dir.path());
    host.initialize(json!({}));
    host.call("echo", json!({"text": "shipped"}));
    assert!(host.close().success());
    let shipped = ship(dir.path());
    assert_eq!(shipped.status.code(), Some(0), "{}", stderr(&shipped));
    // What the system log kept, saved as a file of its lines.
    let lines = drain_lines(&socket);
    let saved = dir.path().join("saved.log");
    std::fs::write(&saved, lines.join("\n")).unwrap();
    let holds = check(dir.path(), &saved);
    assert_eq!(holds.status.code(), Some(0), "{}", stdout(&holds));
    assert!(stdout(&holds).contains("the log holds every one as it was shipped"));
    let messages: Vec<(u8, Value)> = lines
        .iter()
        .map(|line| {
            (
                0,
                serde_json::from_str(&line[line.find("]: ").unwrap() + 3..]).unwrap(),
            )
        })
        .collect();
    let last = messages.last().unwrap().1.clone();

    // A shipped message altered in the system log no longer chains.
    let mut altered = messages.iter().map(|(_, m)| m.clone()).collect::<Vec<_>>();
    let middle = altered.len() / 2;
    altered[middle]["prev"] = json!("0".repeat(64));
    let altered_file = dir.path().join("altered.log");
    std::fs::write(
        &altered_file,
        altered
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n"),
    )
    .unwrap();
    let broken = check(dir.path(), &altered_file);
    assert_eq!(broken.status.code(), Some(2), "{}", stdout(&broken));
    assert!(
        stdout(&broken).contains("do not chain"),
        "{}",
        stdout(&broken)
    );

    // Someone with the database rewrites the last record shipped (a key
    // holder would recompute its link; the shipped copy still has the old).
    let seq = last["seq"].as_u64().unwrap();
    rusqlite::Connection::open(dir.path().join("state").join("state.db"))
        .unwrap()
        .execute(
            "UPDATE audit SET hash = ?1 WHERE seq = ?2",
            rusqlite::params!["0".repeat(64), seq],
        )
        .unwrap();
    let refused = ship(dir.path());
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    let said = stderr(&refused);
    assert!(
        said.contains(&format!("record {seq} of the log is not the one shipped")),
        "{said}"
    );
    assert!(said.contains(last["link"].as_str().unwrap()), "{said}");
    assert!(
        drain(&socket).is_empty(),
        "nothing shipped past a rewritten record"
    );
    // The saved copy witnesses it.
    let witnessed = check(dir.path(), &saved);
    assert_eq!(witnessed.status.code(), Some(2), "{}", stdout(&witnessed));
    assert!(
        stdout(&witnessed).contains(&format!(
            "record {seq} (line {}) was shipped with link",
            lines.len()
        )),
        "{}",
        stdout(&witnessed)
    );
    assert!(stdout(&witnessed).contains("changed since it was shipped"));

    // The log cut short below the cursor.
    rusqlite::Connection::open(dir.path().join("state").join("state.db"))
        .unwrap()
        .execute("DELETE FROM audit WHERE seq >= ?1", [seq])
        .unwrap();
    let refused = ship(dir.path());
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(stderr(&refused).contains(&format!("no longer holds record {seq}")));
}

#[test]
fn a_record_too_large_for_a_datagram_keeps_its_place_and_links() {
    let dir = tempfile::tempdir().unwrap();
    let socket = logger(dir.path());
    let mut host = session(dir.path());
    host.initialize(json!({}));
    // Larger than the kernel's default datagram buffer (about 208 KiB).
    let large = "x".repeat(400_000);
    host.call("echo", json!({"text": large}));
    host.call("echo", json!({"text": "small"}));
    assert!(host.close().success());
    let shipped = ship(dir.path());
    assert_eq!(shipped.status.code(), Some(0), "{}", stderr(&shipped));
    let messages = drain(&socket);
    let seqs: Vec<u64> = messages
        .iter()
        .map(|(_, m)| m["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "{seqs:?}"
    );
    let cut = messages
        .iter()
        .find(|(_, m)| m.get("truncated").is_some())
        .expect("the large call was shipped cut, not dropped");
    assert!(cut.1["truncated"]["bytes"].as_u64().unwrap() > 400_000);
    assert_eq!(cut.1["kind"], "call");
    for pair in messages.windows(2) {
        assert_eq!(pair[1].1["prev"], pair[0].1["link"]);
    }
    assert!(
        messages
            .iter()
            .any(|(_, m)| m["arguments"]["text"] == "small")
    );
}

#[test]
fn follow_ships_each_record_as_it_is_committed() {
    let dir = tempfile::tempdir().unwrap();
    let socket = logger(dir.path());
    let mut host = session(dir.path());
    host.initialize(json!({}));
    host.call("echo", json!({"text": "before"}));
    let state = dir.path().join("state");
    let mut follower = crate::util::hintgate()
        .current_dir(dir.path())
        .env("HINTGATE_STATE_DIR", &state)
        .args(["log", "ship", "--follow", "--socket"])
        .arg(dir.path().join("log.sock"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (_, first) = received(&socket);
    assert_eq!(first["seq"], 1);
    assert_eq!(first["arguments"]["text"], "before");
    host.call("echo", json!({"text": "while following"}));
    // Records arrive in order; the new call's is among the next ones.
    let mut seen = Vec::new();
    loop {
        let (_, message) = received(&socket);
        if message["arguments"]["text"] == "while following" {
            break;
        }
        seen.push(message);
        assert!(seen.len() < 10, "the new call never arrived: {seen:?}");
    }
    let _ = follower.kill();
    let _ = follower.wait();
    assert!(host.close().success());
}
