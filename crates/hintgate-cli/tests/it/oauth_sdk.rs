//! hintgate as the OAuth client of a real authorization server: the Python
//! `mcp` SDK's (from PyPI, installed by `scripts/setup-peers`), with a
//! resource server that enforces scopes per tool
//! (`tests/peers/oauth_notes_server.py`). The SDK's code checks the client,
//! the redirect, PKCE, the resource the tokens are bound to, refreshes and
//! revocations; the peer only keeps the tokens and says yes for the person.
//! The test plays the person's browser, following the address `hintgate
//! auth login` prints.
//!
//! Tokens here are random: the peer lists every one it issued, and each
//! test searches all that hintgate wrote (its output, the gateway's log,
//! what the host received, the audit log, the state directory) for them.

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

use crate::host::{Host, is_error, text};
use crate::peers::venv_bin;
use crate::util::{code, hintgate, log_json, run, stderr, stdout};

/// The notes server, behind the SDK's authorization server.
struct Notes {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    base: String,
}

impl Notes {
    fn start(flags: &[&str]) -> Self {
        let script =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/oauth_notes_server.py");
        let mut child = Command::new(venv_bin("python"))
            .arg(script)
            .args(flags)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut errors = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        errors.read_line(&mut line).unwrap();
        let url = line
            .trim()
            .strip_prefix("serving MCP at ")
            .unwrap_or_else(|| panic!("the notes server did not start: {line}"))
            .to_owned();
        // Its later output is drained, so that it never blocks on a full pipe.
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut errors, &mut std::io::sink());
        });
        Self {
            child,
            base: url.trim_end_matches("/mcp").to_owned(),
        }
    }

    fn url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    fn get(&self, path: &str) -> Value {
        let answer = crate::util::http(
            &self.base,
            &format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"),
        );
        let (_, body) = answer.split_once("\r\n\r\n").unwrap();
        serde_json::from_str(body).unwrap_or_else(|_| panic!("{answer}"))
    }

    fn post(&self, path: &str) {
        let answer = crate::util::http(
            &self.base,
            &format!(
                "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            ),
        );
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }

    /// What the server did (no token in it).
    fn state(&self) -> Value {
        self.get("/test/state")
    }

    /// Every token it issued.
    fn issued(&self) -> Vec<String> {
        self.get("/test/issued")
            .as_array()
            .unwrap()
            .iter()
            .map(|token| token.as_str().unwrap().to_owned())
            .collect()
    }
}

impl Drop for Notes {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn write_config(dir: &Path, notes: &Notes, extra: &str) -> String {
    let path = dir.join("hintgate.toml");
    std::fs::write(
        &path,
        format!(
            "[servers.notes]\nurl = \"{}\"\n\n[servers.notes.oauth]\n{extra}",
            notes.url()
        ),
    )
    .unwrap();
    path.display().to_string()
}

/// `hintgate auth ARGS` with the config and state of `dir`.
fn auth(dir: &Path, config: &str, args: &[&str]) -> std::process::Output {
    let state = dir.join("state").display().to_string();
    let mut all = vec!["auth", "--config", config, "--state-dir", &state];
    all.extend_from_slice(args);
    run(dir, &all)
}

/// The path and query of `url`, and the header `name` of an HTTP answer.
fn path_of(url: &str) -> String {
    url.trim_start_matches("http://")
        .split_once('/')
        .map(|(_, path)| format!("/{path}"))
        .unwrap()
}

fn header<'a>(answer: &'a str, name: &str) -> Option<&'a str> {
    answer.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

/// Signs in as a person would: runs `hintgate auth login ARGS`, opens the
/// address it prints (the SDK's authorization endpoint approves at once
/// and redirects), delivers the redirect to hintgate's loopback listener,
/// and returns what the command printed.
fn sign_in(dir: &Path, config: &str, notes: &Notes, args: &[&str]) -> String {
    let state = dir.join("state").display().to_string();
    let mut child = hintgate()
        .current_dir(dir)
        .args(["auth", "--config", config, "--state-dir", &state, "login"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut errors = BufReader::new(child.stderr.take().unwrap());
    let mut printed = String::new();
    let address = loop {
        let mut line = String::new();
        assert_ne!(
            errors.read_line(&mut line).unwrap(),
            0,
            "no address printed: {printed}"
        );
        printed.push_str(&line);
        if line.starts_with(&format!("{}/authorize?", notes.base)) {
            break line.trim().to_owned();
        }
    };
    let authorize = crate::util::http(
        &address,
        &format!(
            "GET {} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
            path_of(&address)
        ),
    );
    assert!(authorize.starts_with("HTTP/1.1 302"), "{authorize}");
    let location = header(&authorize, "location").unwrap().to_owned();
    let landed = crate::util::http(
        &location,
        &format!(
            "GET {} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
            path_of(&location)
        ),
    );
    assert!(landed.starts_with("HTTP/1.1 200"), "{landed}");
    let mut rest = String::new();
    errors.read_to_string(&mut rest).unwrap();
    printed.push_str(&rest);
    let out = child.wait_with_output().unwrap();
    let said = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{printed}{said}");
    format!("{printed}{said}")
}

/// A gateway for `config`, whose host approves whatever it is asked and
/// keeps each prompt it was shown.
fn gateway(dir: &Path, config: &str) -> (Host, std::rc::Rc<std::cell::RefCell<Vec<String>>>) {
    let mut host = Host::start(dir, &["run", "--config", config], &[]);
    let prompts = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let seen = std::rc::Rc::clone(&prompts);
    host.respond_with(move |request| {
        seen.borrow_mut().push(
            request["params"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
        json!({"action": "accept", "content": {"approve": true}})
    });
    host.initialize(json!({"elicitation": {}}));
    (host, prompts)
}

/// Searches every place hintgate writes where a person or a host can read
/// for each token `notes` issued: `outputs` (what commands printed and the
/// host received), the gateway's log, the audit log, the state directory.
fn assert_no_token(dir: &Path, notes: &Notes, outputs: &[&str]) {
    let tokens = notes.issued();
    assert!(!tokens.is_empty());
    let mut places: Vec<(String, String)> = outputs
        .iter()
        .enumerate()
        .map(|(idx, text)| (format!("output {idx}"), (*text).to_owned()))
        .collect();
    places.push((
        "the gateway's log".to_owned(),
        std::fs::read_to_string(dir.join("hintgate.stderr")).unwrap_or_default(),
    ));
    let state = dir.join("state").display().to_string();
    let log = run(dir, &["log", "--state-dir", &state, "--json"]);
    places.push(("hintgate log".to_owned(), stdout(&log)));
    for (path, bytes) in crate::util::files_under(&dir.join("state")) {
        places.push((
            path.display().to_string(),
            String::from_utf8_lossy(&bytes).into_owned(),
        ));
    }
    for (place, text) in &places {
        for token in &tokens {
            assert!(!text.contains(token.as_str()), "a token is in {place}");
        }
    }
}

fn calls_of(dir: &Path, tool: &str) -> Vec<Value> {
    log_json(dir, &[])
        .into_iter()
        .filter(|record| record["kind"] == "call" && record["tool"] == tool)
        .collect()
}

/// Item 4 of the OAuth issue, end to end: the read-only instance signs in
/// with a token of its own, asked for with `notes:read` only; its reads
/// count as read-only credentials (vouched) and run unasked; a write goes
/// to the full instance, whose prompt names its token by its scopes; the
/// record of each call names the token it went with.
#[test]
fn a_read_only_instance_signs_in_with_its_own_read_scoped_token() {
    let notes = Notes::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &notes,
        "scopes = [\"notes:read\", \"notes:write\"]\n\n[servers.notes.read_only]\nscopes = [\"notes:read\"]\nvouch = true\n",
    );

    let status = auth(dir.path(), &config, &["status"]);
    assert_eq!(
        stdout(&status),
        "notes: not signed in (hintgate auth login notes)\nnotes (read-only): not signed in (hintgate auth login notes --read-only)\n"
    );
    let full = sign_in(dir.path(), &config, &notes, &["notes"]);
    assert!(
        full.contains("Signed in to `notes`: granted `notes:read notes:write offline_access`"),
        "{full}"
    );
    // The read-only login cannot be widened from the command line.
    let widened = auth(
        dir.path(),
        &config,
        &["login", "notes", "--read-only", "--scope", "notes:write"],
    );
    assert_eq!(code(&widened), 64, "{}", stderr(&widened));
    assert!(stderr(&widened).contains("--scope does not apply with --read-only"));
    let read_only = sign_in(dir.path(), &config, &notes, &["notes", "--read-only"]);
    assert!(
        read_only.contains(
            "Signed in to `notes` (read-only instance): granted `notes:read offline_access`"
        ),
        "{read_only}"
    );
    assert_eq!(
        notes.state()["live_access"],
        json!([
            "notes:read notes:write offline_access",
            "notes:read offline_access"
        ])
    );
    let status = stdout(&auth(dir.path(), &config, &["status"]));
    let lines: Vec<&str> = status.lines().collect();
    assert_eq!(lines.len(), 2, "{status}");
    assert!(
        lines[0].starts_with("notes: signed in; granted `notes:read notes:write offline_access`"),
        "{status}"
    );
    assert!(
        lines[1].starts_with("notes (read-only): signed in; granted `notes:read offline_access`"),
        "{status}"
    );
    let listed: Value =
        serde_json::from_str(&stdout(&auth(dir.path(), &config, &["status", "--json"]))).unwrap();
    assert_eq!(listed[1]["instance"], "read-only");
    assert_eq!(listed[1]["scope"], "notes:read offline_access");

    let (mut host, prompts) = gateway(dir.path(), &config);
    let read = host.call("notes__read_notes", json!({}));
    assert_eq!(text(&read), "the first note", "{read}");
    assert!(prompts.borrow().is_empty(), "a vouched read is not asked");
    let wrote = host.call("notes__write_note", json!({"text": "second"}));
    assert_eq!(text(&wrote), "noted (2 notes)", "{wrote}");
    {
        let prompts = prompts.borrow();
        assert_eq!(prompts.len(), 1, "{prompts:?}");
        assert!(
            prompts[0].contains("instance:  full (runs with the server's full credentials)"),
            "{}",
            prompts[0]
        );
        assert!(
            prompts[0].contains(
                "token:     an OAuth token granted `notes:read notes:write offline_access`"
            ),
            "{}",
            prompts[0]
        );
    }
    let answers = format!("{read}{wrote}");
    host.close();

    let reads = calls_of(dir.path(), "read_notes");
    assert_eq!(reads.len(), 1, "{reads:#?}");
    assert_eq!(reads[0]["instance"], "read-only");
    assert_eq!(
        reads[0]["reasons"],
        json!(["read-only", "read-only-credentials"])
    );
    assert_eq!(reads[0]["token_scope"], "notes:read offline_access");
    let writes = calls_of(dir.path(), "write_note");
    assert_eq!(writes[0]["instance"], "full");
    assert_eq!(
        writes[0]["token_scope"],
        "notes:read notes:write offline_access"
    );
    // The records, `token_scope` among their fields, are as the schema says.
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(crate::util::repo_root().join("docs/audit-record.schema.json"))
            .unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    for record in log_json(dir.path(), &[]) {
        assert!(validator.is_valid(&record), "{record}");
    }
    let shown_prompts = prompts.borrow().join("\n");
    assert_no_token(
        dir.path(),
        &notes,
        &[&full, &read_only, &status, &answers, &shown_prompts],
    );

    // Logout signs out of both logins and revokes their four tokens.
    let out = auth(dir.path(), &config, &["logout", "notes"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "Signed out of `notes`; revoked its access_token and refresh_token.\nSigned out of `notes` (read-only instance); revoked its access_token and refresh_token.\n"
    );
    let state = notes.state();
    assert_eq!(state["revoked"], 4, "{state}");
    assert_eq!(state["live_access"], json!([]));
    assert_eq!(state["live_refresh"], 0);
}

/// The server itself is the limit: a hostile server whose write claims to
/// only read gets it on the read-only instance, with the read-scoped token,
/// and refuses it (403 `insufficient_scope`). hintgate does not widen the
/// token: the call fails, saying so, and nothing was written.
#[test]
fn a_write_that_claims_to_read_is_refused_by_the_server_for_the_read_scoped_token() {
    let notes = Notes::start(&["--lying"]);
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &notes,
        "scopes = [\"notes:read\", \"notes:write\"]\n\n[servers.notes.read_only]\nscopes = [\"notes:read\"]\nvouch = true\n",
    );
    sign_in(dir.path(), &config, &notes, &["notes"]);
    sign_in(dir.path(), &config, &notes, &["notes", "--read-only"]);
    let (mut host, prompts) = gateway(dir.path(), &config);
    let wrote = host.call("notes__write_note", json!({"text": "sneaked"}));
    let shown = wrote.to_string();
    assert!(
        shown.contains("oauth-step-up-required")
            && shown.contains("the read-only instance of `notes`")
            && shown.contains("hintgate does not widen it"),
        "{shown}"
    );
    assert!(
        prompts.borrow().is_empty(),
        "the vouched 'read' is not asked"
    );
    host.close();
    let state = notes.state();
    assert_eq!(state["refused_writes"], 1, "{state}");
    assert_eq!(state["notes"], json!(["the first note"]));
    assert_eq!(
        state["issued"],
        json!({"authorization_code": 2, "refresh_token": 0}),
        "no new authorization"
    );
    let records = calls_of(dir.path(), "write_note");
    assert_eq!(records[0]["instance"], "read-only");
    assert_eq!(records[0]["token_scope"], "notes:read offline_access");
    assert_no_token(dir.path(), &notes, &[&shown]);
}

/// A hostile authorization server that grants the read-only login more
/// than it asked for: the token is revoked and not kept.
#[test]
fn a_read_only_login_widened_by_the_authorization_server_is_refused() {
    let notes = Notes::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &notes,
        "\n[servers.notes.read_only]\nscopes = [\"notes:read\"]\n",
    );
    notes.post("/test/widen");
    let state = dir.path().join("state").display().to_string();
    let (child, mut errors) = crate::util::auth_command(
        dir.path(),
        &config,
        &state,
        &["login", "notes", "--read-only"],
    );
    let address = loop {
        let mut line = String::new();
        assert_ne!(errors.read_line(&mut line).unwrap(), 0);
        if line.starts_with(&format!("{}/authorize?", notes.base)) {
            break line.trim().to_owned();
        }
    };
    let authorize = crate::util::http(
        &address,
        &format!(
            "GET {} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
            path_of(&address)
        ),
    );
    let location = header(&authorize, "location").unwrap().to_owned();
    crate::util::http(
        &location,
        &format!(
            "GET {} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
            path_of(&location)
        ),
    );
    let mut said = String::new();
    errors.read_to_string(&mut said).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_ne!(out.status.code(), Some(0), "{said}");
    assert!(
        said.contains("oauth-read-only-scope-widened")
            && said.contains("granted `notes:write` beyond the read-only scopes `notes:read`")
            && said.contains("(it was revoked)"),
        "{said}"
    );
    let server = notes.state();
    assert_eq!(server["revoked"], 2, "{server}");
    assert_eq!(server["live_access"], json!([]));
    let status = stdout(&auth(dir.path(), &config, &["status"]));
    assert!(
        status.contains("notes (read-only): not signed in"),
        "{status}"
    );
    assert_no_token(dir.path(), &notes, &[&said]);
}

/// Step-up: the full instance signed in with `notes:read` only; a write
/// the person approved is refused by the server with 403
/// `insufficient_scope`. hintgate grants nothing itself: the call fails
/// naming the login that would, and no authorization was started.
#[test]
fn a_step_up_is_never_granted_silently_and_names_the_login() {
    let notes = Notes::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &notes, "");
    let said = sign_in(
        dir.path(),
        &config,
        &notes,
        &["notes", "--scope", "notes:read"],
    );
    assert!(
        said.contains("granted `notes:read offline_access`"),
        "{said}"
    );
    let (mut host, prompts) = gateway(dir.path(), &config);
    assert_eq!(
        text(&host.call("notes__read_notes", json!({}))),
        "the first note"
    );
    let wrote = host.call("notes__write_note", json!({"text": "more"}));
    let shown = wrote.to_string();
    assert!(
        shown.contains("oauth-step-up-required")
            && shown.contains(
                "`notes` asks for more scopes than its login holds (`notes:read notes:write`)"
            )
            && shown.contains("hintgate auth login notes --scope notes:read --scope notes:write"),
        "{shown}"
    );
    let asked = prompts.borrow().join("\n");
    {
        // The server is untrusted: the person approved the read and the
        // write, each prompt naming the token by its scopes.
        let prompts = prompts.borrow();
        assert_eq!(prompts.len(), 2, "{prompts:?}");
        assert!(prompts[1].contains("write_note"), "{}", prompts[1]);
        assert!(
            prompts[1].contains("token:     an OAuth token granted `notes:read offline_access`"),
            "{}",
            prompts[1]
        );
    }
    host.close();
    let state = notes.state();
    assert_eq!(state["refused_writes"], 1);
    assert_eq!(state["notes"], json!(["the first note"]));
    assert_eq!(
        state["issued"],
        json!({"authorization_code": 1, "refresh_token": 0})
    );

    // The person grants it, as the error says; the write then goes through.
    sign_in(
        dir.path(),
        &config,
        &notes,
        &["notes", "--scope", "notes:read", "--scope", "notes:write"],
    );
    let (mut host, _) = gateway(dir.path(), &config);
    let wrote_now = host.call("notes__write_note", json!({"text": "more"}));
    assert_eq!(text(&wrote_now), "noted (2 notes)", "{wrote_now}");
    host.close();
    assert_no_token(dir.path(), &notes, &[&said, &shown, &asked]);
}

/// The whole browser-less life of a login against the SDK's authorization
/// server: sign in, calls carry the token, the server stops taking it
/// (expired) and the gateway refreshes it once (the SDK rotates the refresh
/// token), a token that expires within the minute is refreshed before it is
/// sent, and logout revokes the rotated pair.
#[test]
fn refresh_expiry_and_revocation_against_the_sdks_authorization_server() {
    let notes = Notes::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &notes, "");
    let said = sign_in(dir.path(), &config, &notes, &["notes"]);
    assert!(
        said.contains("Signed in to `notes`: granted `notes:read offline_access`"),
        "{said}"
    );
    let (mut host, _) = gateway(dir.path(), &config);
    assert_eq!(
        text(&host.call("notes__read_notes", json!({}))),
        "the first note"
    );
    notes.post("/test/expire");
    let again = host.call("notes__read_notes", json!({}));
    assert_eq!(text(&again), "the first note", "{again}");
    assert!(!is_error(&again));
    host.close();
    let state = notes.state();
    assert_eq!(
        state["issued"],
        json!({"authorization_code": 1, "refresh_token": 1}),
        "{state}"
    );
    assert_eq!(state["live_access"], json!(["notes:read offline_access"]));
    assert_eq!(state["live_refresh"], 1, "the old refresh token is spent");
    assert_no_token(dir.path(), &notes, &[&said, &again.to_string()]);

    let out = auth(dir.path(), &config, &["logout", "notes"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let state = notes.state();
    assert_eq!(state["revoked"], 2, "the refreshed pair: {state}");
    assert_eq!(state["live_access"], json!([]));
    assert_eq!(state["live_refresh"], 0);

    // Tokens that live 30 seconds: each is refreshed before it is sent.
    let short = Notes::start(&["--access-ttl", "30"]);
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &short, "");
    sign_in(dir.path(), &config, &short, &["notes"]);
    let (mut host, _) = gateway(dir.path(), &config);
    assert_eq!(
        text(&host.call("notes__read_notes", json!({}))),
        "the first note"
    );
    host.close();
    let issued = &short.state()["issued"];
    assert_eq!(issued["authorization_code"], 1);
    assert!(issued["refresh_token"].as_u64().unwrap() >= 1, "{issued}");
    assert_no_token(dir.path(), &short, &[]);
}

/// Teams: a `--listen` gateway whose principals each sign in once. The
/// gateway's own login (its listings) may read and write; Alice signed in
/// for herself with `notes:read` only; Bob did not sign in. Alice's read
/// goes with her token; her write goes with her token too, and the server
/// refuses it, although the gateway's own token could write; Bob's calls
/// fail naming his login, and none of them reaches the server with anyone
/// else's token.
#[test]
fn each_listen_principal_calls_with_its_own_login_and_never_anothers() {
    let notes = Notes::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &notes,
        "scopes = [\"notes:read\", \"notes:write\"]\n",
    );
    let alice = crate::listen::add_token(dir.path(), "alice", "write");
    let bob = crate::listen::add_token(dir.path(), "bob", "write");
    let own = sign_in(dir.path(), &config, &notes, &["notes"]);
    let hers = sign_in(
        dir.path(),
        &config,
        &notes,
        &["notes", "--principal", "alice", "--scope", "notes:read"],
    );
    assert!(
        hers.contains(
            "Signed in to `notes` for principal `alice`: granted `notes:read offline_access`"
        ),
        "{hers}"
    );
    let status = stdout(&auth(dir.path(), &config, &["status"]));
    let lines: Vec<&str> = status.lines().collect();
    assert!(
        lines[0].starts_with("notes: signed in; granted `notes:read notes:write offline_access`"),
        "{status}"
    );
    assert!(
        lines[1].starts_with(
            "notes for principal alice: signed in; granted `notes:read offline_access`"
        ),
        "{status}"
    );
    assert_eq!(lines.len(), 2, "Bob has no login: {status}");

    let mut command = hintgate();
    command
        .current_dir(dir.path())
        .env("HINTGATE_STATE_DIR", dir.path().join("state"))
        .args(["run", "--listen", "127.0.0.1:0", "--config", &config]);
    let gateway = crate::listen::Listening::spawn(command);
    let calls = json!([
        {"name": "notes__read_notes", "arguments": {}},
        {"name": "notes__write_note", "arguments": {"text": "from alice"}},
    ]);
    let by_alice = crate::listen::sdk(
        dir.path(),
        &gateway.url,
        Some(&alice),
        "legacy",
        calls.clone(),
    );
    let by_bob = crate::listen::sdk(dir.path(), &gateway.url, Some(&bob), "legacy", calls);
    let log = gateway.stop();

    assert_eq!(
        by_alice["results"][0]["text"][0], "the first note",
        "{by_alice}"
    );
    let refused = by_alice["results"][1].to_string();
    assert!(
        refused.contains("oauth-step-up-required")
            && refused.contains(
                "hintgate auth login notes --principal alice --scope notes:read --scope notes:write"
            ),
        "{by_alice}"
    );
    for result in by_bob["results"].as_array().unwrap() {
        let shown = result.to_string();
        assert!(
            shown.contains("oauth-login-required")
                && shown.contains("needs a login for principal `bob`")
                && shown.contains("hintgate auth login notes --principal bob"),
            "{by_bob}"
        );
    }
    let state = notes.state();
    assert_eq!(state["refused_writes"], 1, "{state}");
    assert_eq!(state["notes"], json!(["the first note"]));

    let records = log_json(dir.path(), &[]);
    let of = |host: &str, tool: &str| -> Vec<&Value> {
        records
            .iter()
            .filter(|record| {
                record["kind"] == "call" && record["host"] == host && record["tool"] == tool
            })
            .collect()
    };
    assert_eq!(
        of("alice", "read_notes")[0]["token_scope"],
        "notes:read offline_access"
    );
    assert_eq!(
        of("alice", "write_note")[0]["token_scope"],
        "notes:read offline_access"
    );
    assert!(
        of("bob", "read_notes")[0].get("token_scope").is_none(),
        "Bob's call went with no token: {records:#?}"
    );
    assert_no_token(
        dir.path(),
        &notes,
        &[
            &own,
            &hers,
            &status,
            &by_alice.to_string(),
            &by_bob.to_string(),
            &log,
        ],
    );

    // Alice signs out; her calls then name her login again.
    let out = auth(
        dir.path(),
        &config,
        &["logout", "notes", "--principal", "alice"],
    );
    assert_eq!(
        stdout(&out),
        "Signed out of `notes` for principal `alice`; revoked its access_token and refresh_token.\n"
    );
    assert!(
        stdout(&auth(dir.path(), &config, &["status"]))
            .lines()
            .count()
            == 1
    );
}

/// The same team before a server that speaks only the session-based era
/// and serves a session only to the credential that opened it (the SDK's
/// rule): Alice's call with her own login on the session the gateway
/// opened is refused by the server (404), and hintgate fails that call,
/// naming why, instead of taking the 404 for the end of the session; the
/// gateway's own token never stands in for hers.
#[test]
fn a_server_that_binds_its_session_to_who_opened_it_refuses_a_principals_login_cleanly() {
    let notes = Notes::start(&["--legacy-only"]);
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &notes, "");
    let alice = crate::listen::add_token(dir.path(), "alice", "write");
    sign_in(dir.path(), &config, &notes, &["notes"]);
    sign_in(
        dir.path(),
        &config,
        &notes,
        &["notes", "--principal", "alice"],
    );
    let mut command = hintgate();
    command
        .current_dir(dir.path())
        .env("HINTGATE_STATE_DIR", dir.path().join("state"))
        .args(["run", "--listen", "127.0.0.1:0", "--config", &config]);
    let gateway = crate::listen::Listening::spawn(command);
    let calls = json!([
        {"name": "notes__read_notes", "arguments": {}},
        {"name": "notes__read_notes", "arguments": {}},
    ]);
    let by_alice = crate::listen::sdk(dir.path(), &gateway.url, Some(&alice), "legacy", calls);
    let log = gateway.stop();
    for result in by_alice["results"].as_array().unwrap() {
        let shown = result.to_string();
        assert!(
            shown.contains("oauth-principal-session-refused")
                && shown.contains("principal `alice`"),
            "{by_alice}"
        );
    }
    assert!(
        !log.contains("ended the HTTP session"),
        "the session stood: {log}"
    );
    assert_no_token(dir.path(), &notes, &[&by_alice.to_string(), &log]);
}
