//! `hintgate auth login|status|logout` end to end against an authorization
//! server and a protected MCP endpoint on loopback (a minimal one, in this
//! file: protected resource metadata, authorization server metadata,
//! dynamic registration, an authorization endpoint that checks PKCE S256,
//! a token endpoint and a revocation endpoint). The test plays the person's
//! browser: it follows the address hintgate prints and delivers the
//! redirect to hintgate's loopback listener.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use serde_json::{Value, json};

use crate::util::{code, hintgate, run, stderr, stdout};

const ACCESS: &str = "at-5f0e-SECRET-access";
const REFRESH: &str = "rt-77c2-SECRET-refresh";
const ACCESS_2: &str = "at-9d41-SECRET-access-2";
const REFRESH_2: &str = "rt-0b3e-SECRET-refresh-2";

/// What the authorization server saw.
#[derive(Debug, Default)]
struct Seen {
    /// The parameters of the authorization request.
    authorize: BTreeMap<String, String>,
    /// The form of each token request.
    token: Vec<BTreeMap<String, String>>,
    /// The tokens revoked.
    revoked: Vec<String>,
    /// Whether the person approved the device authorization.
    device_approved: bool,
    /// The access token the MCP endpoint takes now.
    valid: Option<String>,
    /// The `Authorization` of each request to the MCP endpoint.
    mcp_auth: Vec<Option<String>>,
    /// The `expires_in` of the tokens a code is exchanged for (3600 when
    /// unset).
    expires_in: Option<i64>,
    /// A hostile resource server: it refuses every token, refreshed or not.
    refuse_all: bool,
    /// The token endpoint the metadata names, instead of its own.
    token_endpoint: Option<String>,
}

struct AuthServer {
    base: String,
    seen: Arc<Mutex<Seen>>,
}

fn query(text: &str) -> BTreeMap<String, String> {
    form_pairs(text.as_bytes())
}

fn form_pairs(bytes: &[u8]) -> BTreeMap<String, String> {
    url::form_urlencoded::parse(bytes).into_owned().collect()
}

fn answer(stream: &mut TcpStream, status: &str, headers: &[(&str, String)], body: &str) {
    let mut text = format!(
        "HTTP/1.1 {status}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    text.push_str(body);
    let _ = stream.write_all(text.as_bytes());
}

fn json_answer(stream: &mut TcpStream, body: &Value) {
    answer(
        stream,
        "200 OK",
        &[("Content-Type", "application/json".to_owned())],
        &body.to_string(),
    );
}

/// Reads one request: method, target, headers (lowercase names), body.
fn read_request(stream: &mut TcpStream) -> (String, String, BTreeMap<String, String>, Vec<u8>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let target = parts.next().unwrap_or_default().to_owned();
    let mut headers = BTreeMap::new();
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).unwrap();
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            // A header sent twice is kept as both values, as HTTP joins
            // them.
            headers
                .entry(name.trim().to_ascii_lowercase())
                .and_modify(|joined: &mut String| {
                    joined.push_str(", ");
                    joined.push_str(value.trim());
                })
                .or_insert_with(|| value.trim().to_owned());
        }
    }
    let length: usize = headers
        .get("content-length")
        .and_then(|length| length.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    (method, target, headers, body)
}

impl AuthServer {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (thread_base, thread_seen) = (base.clone(), Arc::clone(&seen));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                serve(&mut stream, &thread_base, &thread_seen);
            }
        });
        Self { base, seen }
    }

    fn url(&self) -> String {
        format!("{}/mcp", self.base)
    }
}

fn serve(stream: &mut TcpStream, base: &str, seen: &Mutex<Seen>) {
    let (method, target, headers, body) = read_request(stream);
    let (path, query_text) = target.split_once('?').unwrap_or((&target, ""));
    match (method.as_str(), path) {
        ("POST", "/mcp") => {
            let given = headers.get("authorization").cloned();
            let valid = {
                let mut seen = seen.lock().unwrap();
                seen.mcp_auth.push(given.clone());
                seen.valid.clone()
            };
            let refuse_all = seen.lock().unwrap().refuse_all;
            if !refuse_all && valid.is_some_and(|token| given == Some(format!("Bearer {token}"))) {
                mcp(stream, &body);
            } else {
                answer(
                    stream,
                    "401 Unauthorized",
                    &[(
                        "WWW-Authenticate",
                        format!(
                            r#"Bearer resource_metadata="{base}/.well-known/oauth-protected-resource/mcp", scope="docs:read""#
                        ),
                    )],
                    "",
                );
            }
        }
        ("GET", "/.well-known/oauth-protected-resource/mcp") => json_answer(
            stream,
            &json!({
                "resource": format!("{base}/mcp"),
                "authorization_servers": [base],
                "scopes_supported": ["docs:read", "docs:write"],
            }),
        ),
        ("GET", "/.well-known/oauth-authorization-server") => json_answer(
            stream,
            &json!({
                "issuer": base,
                "authorization_endpoint": format!("{base}/authorize"),
                "token_endpoint": seen
                    .lock()
                    .unwrap()
                    .token_endpoint
                    .clone()
                    .unwrap_or_else(|| format!("{base}/token")),
                "registration_endpoint": format!("{base}/register"),
                "revocation_endpoint": format!("{base}/revoke"),
                "device_authorization_endpoint": format!("{base}/device"),
                "code_challenge_methods_supported": ["S256"],
                "grant_types_supported": [
                    "authorization_code",
                    "refresh_token",
                    "urn:ietf:params:oauth:grant-type:device_code"
                ],
                "token_endpoint_auth_methods_supported": ["none"],
                "scopes_supported": ["docs:read", "docs:write", "offline_access"],
            }),
        ),
        ("POST", "/register") => {
            let asked: Value = serde_json::from_slice(&body).unwrap();
            json_answer(
                stream,
                &json!({
                    "client_id": "client-1",
                    "redirect_uris": asked["redirect_uris"],
                    "token_endpoint_auth_method": "none",
                }),
            );
        }
        ("GET", "/authorize") => {
            let params = query(query_text);
            let location = format!(
                "{}?code=code-1&state={}&iss={}",
                params["redirect_uri"],
                url::form_urlencoded::byte_serialize(params["state"].as_bytes())
                    .collect::<String>(),
                url::form_urlencoded::byte_serialize(base.as_bytes()).collect::<String>(),
            );
            seen.lock().unwrap().authorize = params;
            answer(stream, "302 Found", &[("Location", location)], "");
        }
        ("POST", "/device") => json_answer(
            stream,
            &json!({
                "device_code": "dc-SECRET-device",
                "user_code": "WDJB-MJHT",
                "verification_uri": "https://auth.example/device",
                "expires_in": 600,
                "interval": 1,
            }),
        ),
        ("POST", "/token")
            if form_pairs(&body).get("grant_type").map(String::as_str)
                == Some("urn:ietf:params:oauth:grant-type:device_code") =>
        {
            let form = form_pairs(&body);
            let approved = seen.lock().unwrap().device_approved
                && form.get("device_code").map(String::as_str) == Some("dc-SECRET-device")
                && form.get("resource") == Some(&format!("{base}/mcp"));
            seen.lock().unwrap().token.push(form);
            if approved {
                seen.lock().unwrap().valid = Some(ACCESS.to_owned());
                json_answer(
                    stream,
                    &json!({
                        "access_token": ACCESS,
                        "token_type": "Bearer",
                        "scope": "docs:read",
                    }),
                );
            } else {
                answer(
                    stream,
                    "400 Bad Request",
                    &[("Content-Type", "application/json".to_owned())],
                    r#"{"error":"authorization_pending"}"#,
                );
            }
        }
        ("POST", "/token")
            if form_pairs(&body).get("grant_type").map(String::as_str) == Some("refresh_token") =>
        {
            let form = form_pairs(&body);
            let good = form.get("refresh_token").map(String::as_str) == Some(REFRESH)
                && form.get("resource") == Some(&format!("{base}/mcp"));
            seen.lock().unwrap().token.push(form);
            if good {
                seen.lock().unwrap().valid = Some(ACCESS_2.to_owned());
                json_answer(
                    stream,
                    &json!({
                        "access_token": ACCESS_2,
                        "token_type": "Bearer",
                        "expires_in": 3600,
                        "refresh_token": REFRESH_2,
                        "scope": "docs:read offline_access",
                    }),
                );
            } else {
                answer(
                    stream,
                    "400 Bad Request",
                    &[("Content-Type", "application/json".to_owned())],
                    r#"{"error":"invalid_grant"}"#,
                );
            }
        }
        ("POST", "/token") => {
            let form = form_pairs(&body);
            let challenge = seen.lock().unwrap().authorize["code_challenge"].clone();
            let verifier = form.get("code_verifier").cloned().unwrap_or_default();
            let digest = ring::digest::digest(&ring::digest::SHA256, verifier.as_bytes());
            let expected = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest);
            let good = form.get("grant_type").map(String::as_str) == Some("authorization_code")
                && form.get("code").map(String::as_str) == Some("code-1")
                && expected == challenge;
            seen.lock().unwrap().token.push(form);
            if good {
                let expires_in = {
                    let mut seen = seen.lock().unwrap();
                    seen.valid = Some(ACCESS.to_owned());
                    seen.expires_in.unwrap_or(3600)
                };
                json_answer(
                    stream,
                    &json!({
                        "access_token": ACCESS,
                        "token_type": "Bearer",
                        "expires_in": expires_in,
                        "refresh_token": REFRESH,
                        "scope": "docs:read offline_access",
                    }),
                );
            } else {
                answer(
                    stream,
                    "400 Bad Request",
                    &[("Content-Type", "application/json".to_owned())],
                    r#"{"error":"invalid_grant"}"#,
                );
            }
        }
        ("POST", "/revoke") => {
            let form = form_pairs(&body);
            seen.lock()
                .unwrap()
                .revoked
                .push(form.get("token").cloned().unwrap_or_default());
            answer(stream, "200 OK", &[], "");
        }
        _ => answer(stream, "404 Not Found", &[], ""),
    }
}

/// The MCP endpoint, for a request with the token it takes: one read-only
/// tool.
fn mcp(stream: &mut TcpStream, body: &[u8]) {
    let message: Value = serde_json::from_slice(body).unwrap();
    let Some(id) = message.get("id").cloned() else {
        answer(stream, "202 Accepted", &[], "");
        return;
    };
    let result = match message["method"].as_str() {
        Some("initialize") => json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "docs", "version": "1"},
        }),
        Some("tools/list") => json!({"tools": [{
            "name": "search",
            "description": "Search the docs.",
            "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
            "annotations": {"readOnlyHint": true},
        }]}),
        Some("tools/call") => json!({"content": [{"type": "text", "text": "found it"}]}),
        _ => json!({}),
    };
    json_answer(
        stream,
        &json!({"jsonrpc": "2.0", "id": id, "result": result}),
    );
}

fn write_config(dir: &Path, url: &str) -> String {
    let path = dir.join("hintgate.toml");
    std::fs::write(
        &path,
        format!(
            "[servers.docs]\nurl = \"{url}\"\n\n[servers.docs.oauth]\n\n[servers.fs]\ncommand = \"true\"\n"
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

/// What a browser does with the address hintgate prints: opens it, and
/// follows its redirect to the loopback listener.
fn browse(address: &str) {
    let authorize = crate::util::http(
        address,
        &format!(
            "GET {} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            address
                .trim_start_matches("http://")
                .split_once('/')
                .map(|(_, path)| format!("/{path}"))
                .unwrap()
        ),
    );
    assert!(authorize.starts_with("HTTP/1.1 302"), "{authorize}");
    let location = authorize
        .lines()
        .find_map(|line| line.strip_prefix("Location: "))
        .unwrap()
        .trim()
        .to_owned();
    let path = location
        .trim_start_matches("http://")
        .split_once('/')
        .map(|(_, path)| format!("/{path}"))
        .unwrap();
    let landed = crate::util::http(
        &location,
        &format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
    );
    assert!(landed.starts_with("HTTP/1.1 200"), "{landed}");
}

/// Every byte hintgate left where a person or a host can read it: its
/// output, the gateway's log, the audit log as `hintgate log` shows it, and
/// the state directory's files (the database among them).
fn assert_no_token(dir: &Path, outputs: &[&str]) {
    for output in outputs {
        assert!(!output.contains("SECRET"), "a token was printed: {output}");
    }
    let gateway_log = std::fs::read_to_string(dir.join("hintgate.stderr")).unwrap_or_default();
    assert!(
        !gateway_log.contains("SECRET"),
        "a token is in the gateway's log"
    );
    if dir.join("state").exists() {
        let state = dir.join("state").display().to_string();
        for format in [&["--json"][..], &[][..]] {
            let mut args = vec!["log", "--state-dir", state.as_str()];
            args.extend_from_slice(format);
            let shown = stdout(&run(dir, &args));
            assert!(
                !shown.contains("SECRET"),
                "a token is in the audit log: {shown}"
            );
        }
    }
    // Its files, and those of its directories (the runs' audit journals).
    let mut dirs = vec![dir.join("state")];
    while let Some(next) = dirs.pop() {
        for entry in std::fs::read_dir(next).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let bytes = std::fs::read(&path).unwrap();
            assert!(
                !String::from_utf8_lossy(&bytes).contains("SECRET"),
                "a token is in the state directory in clear: {}",
                path.display()
            );
        }
    }
}

#[test]
fn login_status_and_logout_against_a_loopback_authorization_server() {
    let server = AuthServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &server.url());
    let state = dir.path().join("state").display().to_string();

    let out = auth(dir.path(), &config, &["status"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "docs: not signed in (hintgate auth login docs)\n"
    );

    // Login: hintgate prints the address, the test's browser follows it.
    let mut child = hintgate()
        .current_dir(dir.path())
        .args([
            "auth",
            "--config",
            &config,
            "--state-dir",
            &state,
            "login",
            "docs",
        ])
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
            "hintgate ended before printing an address: {printed}"
        );
        printed.push_str(&line);
        if line.starts_with(&format!("{}/authorize?", server.base)) {
            break line.trim().to_owned();
        }
    };
    browse(&address);
    let mut rest = String::new();
    errors.read_to_string(&mut rest).unwrap();
    printed.push_str(&rest);
    let out = child.wait_with_output().unwrap();
    let said = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{printed}");
    assert!(
        said.starts_with(
            "Signed in to `docs`: granted `docs:read offline_access`; the access token expires at "
        ),
        "{said}"
    );
    assert!(said.ends_with(", refreshed as it expires.\n"), "{said}");

    // What the authorization server was asked: PKCE S256, the resource,
    // the scope of the challenge with offline_access, a loopback redirect.
    {
        let seen = server.seen.lock().unwrap();
        let asked = &seen.authorize;
        assert_eq!(asked["code_challenge_method"], "S256");
        assert_eq!(asked["resource"], server.url());
        assert_eq!(asked["scope"], "docs:read offline_access");
        assert_eq!(asked["client_id"], "client-1");
        assert!(asked["redirect_uri"].starts_with("http://127.0.0.1:"));
        assert_eq!(seen.token.len(), 1);
        assert_eq!(seen.token[0]["resource"], server.url());
    }

    let status = auth(dir.path(), &config, &["status"]);
    assert_eq!(code(&status), 0);
    let shown = stdout(&status);
    assert!(
        shown.starts_with(
            "docs: signed in; granted `docs:read offline_access`; the access token expires at "
        ),
        "{shown}"
    );
    let status_json = auth(dir.path(), &config, &["status", "--json"]);
    let listed: Value = serde_json::from_str(&stdout(&status_json)).unwrap();
    assert_eq!(listed[0]["server"], "docs");
    assert_eq!(listed[0]["signed_in"], true);
    assert_eq!(listed[0]["scope"], "docs:read offline_access");
    assert!(listed[0]["expires_at"].is_i64());
    assert_no_token(
        dir.path(),
        &[&printed, &said, &shown, &stdout(&status_json)],
    );

    // Logout revokes both tokens and forgets them.
    let out = auth(dir.path(), &config, &["logout", "docs"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "Signed out of `docs`; revoked its access_token and refresh_token.\n"
    );
    assert_eq!(
        server.seen.lock().unwrap().revoked,
        [ACCESS.to_owned(), REFRESH.to_owned()]
    );
    let out = auth(dir.path(), &config, &["status"]);
    assert_eq!(
        stdout(&out),
        "docs: not signed in (hintgate auth login docs)\n"
    );
    let again = auth(dir.path(), &config, &["logout", "docs"]);
    assert_eq!(code(&again), 1);
    assert_eq!(stderr(&again), "`docs` is not signed in.\n");
}

#[test]
fn login_refuses_an_unknown_or_stdio_server_and_needs_the_config() {
    let server = AuthServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &server.url());
    let out = auth(dir.path(), &config, &["login", "nope"]);
    assert_eq!(code(&out), 64, "{}", stderr(&out));
    assert!(stderr(&out).contains("no server is named `nope`"));
    let out = auth(dir.path(), &config, &["login", "fs"]);
    assert_eq!(code(&out), 64);
    assert!(stderr(&out).contains("a stdio server does not sign in with OAuth"));
    let state = dir.path().join("state").display().to_string();
    let out = run(dir.path(), &["auth", "--state-dir", &state, "status"]);
    assert_eq!(code(&out), 64);
    assert!(stderr(&out).contains("--config FILE"));
}

#[test]
fn login_with_the_device_grant_waits_for_the_person_on_another_device() {
    let server = AuthServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &server.url());
    let state = dir.path().join("state").display().to_string();
    let mut child = hintgate()
        .current_dir(dir.path())
        .args([
            "auth",
            "--config",
            &config,
            "--state-dir",
            &state,
            "login",
            "docs",
            "--device",
            "--scope",
            "docs:read",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut errors = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    errors.read_line(&mut line).unwrap();
    assert_eq!(
        line,
        "To sign in to `docs`, open https://auth.example/device and enter the code WDJB-MJHT\n"
    );
    // The person approves on the other device.
    server.seen.lock().unwrap().device_approved = true;
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        stdout(&out),
        "Signed in to `docs`: granted `docs:read`; the server gave no expiry, with no refresh token (sign in again then).\n"
    );
    let status = auth(dir.path(), &config, &["status"]);
    assert_eq!(
        stdout(&status),
        "docs: signed in; granted `docs:read`; the server gave no expiry\n"
    );
    assert_no_token(dir.path(), &[&line, &stdout(&out), &stdout(&status)]);
}

/// Signs in to `docs` as a person would: runs `hintgate auth login`,
/// follows the address it prints, and waits for it to end.
fn sign_in(dir: &Path, config: &str, server: &AuthServer) {
    let state = dir.join("state").display().to_string();
    let mut child = hintgate()
        .current_dir(dir)
        .args([
            "auth",
            "--config",
            config,
            "--state-dir",
            &state,
            "login",
            "docs",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut errors = BufReader::new(child.stderr.take().unwrap());
    let address = loop {
        let mut line = String::new();
        assert_ne!(
            errors.read_line(&mut line).unwrap(),
            0,
            "no address printed"
        );
        if line.starts_with(&format!("{}/authorize?", server.base)) {
            break line.trim().to_owned();
        }
    };
    browse(&address);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn the_gateway_sends_the_stored_token_refreshes_it_after_a_401_and_names_the_login_when_there_is_none()
 {
    let server = AuthServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hintgate.toml");
    std::fs::write(
        &config,
        format!(
            "[servers.docs]\nurl = \"{}\"\ntrust = \"trusted\"\nheaders = {{ Authorization = \"Bearer static-header\" }}\n\n[servers.docs.oauth]\n",
            server.url()
        ),
    )
    .unwrap();
    let config = config.display().to_string();

    // No login yet: the server's calls fail, naming the command.
    let mut host = crate::host::Host::start(dir.path(), &["run", "--config", &config], &[]);
    host.initialize(json!({}));
    let listed = host.request("tools/list", json!({}));
    assert!(
        !listed.to_string().contains("search"),
        "a server without a login lists nothing: {listed}"
    );
    host.close();
    let log = std::fs::read_to_string(dir.path().join("hintgate.stderr")).unwrap();
    assert!(log.contains("hintgate auth login docs"), "{log}");

    sign_in(dir.path(), &config, &server);

    let mut host = crate::host::Host::start(dir.path(), &["run", "--config", &config], &[]);
    host.initialize(json!({}));
    let listed = host.request("tools/list", json!({}));
    let tool = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .find(|name| name.ends_with("search"))
        .unwrap_or_else(|| panic!("no search tool: {listed}"))
        .to_owned();
    let result = host.call(&tool, json!({"q": "oauth"}));
    assert_eq!(crate::host::text(&result), "found it", "{result}");
    assert!(
        server
            .seen
            .lock()
            .unwrap()
            .mcp_auth
            .contains(&Some(format!("Bearer {ACCESS}")))
    );

    // The server stops taking the token: the gateway refreshes it once and
    // the call goes through with the new one.
    server.seen.lock().unwrap().valid = None;
    let result = host.call(&tool, json!({"q": "again"}));
    assert_eq!(crate::host::text(&result), "found it", "{result}");
    {
        let seen = server.seen.lock().unwrap();
        let refreshes: Vec<_> = seen
            .token
            .iter()
            .filter(|form| form.get("grant_type").map(String::as_str) == Some("refresh_token"))
            .collect();
        assert_eq!(refreshes.len(), 1);
        assert_eq!(
            seen.mcp_auth.last().unwrap().as_deref(),
            Some(format!("Bearer {ACCESS_2}").as_str())
        );
    }
    host.close();
    let log = std::fs::read_to_string(dir.path().join("hintgate.stderr")).unwrap();
    assert!(!log.contains("SECRET"), "a token is in the gateway's log");
    // The bearer token took the place of the configured `Authorization`.
    assert!(
        server
            .seen
            .lock()
            .unwrap()
            .mcp_auth
            .iter()
            .flatten()
            .all(|auth| !auth.contains("static-header")),
    );
    assert_no_token(dir.path(), &[]);

    // The rotated tokens were kept: logout revokes the new pair.
    let out = auth(dir.path(), &config, &["logout", "docs"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        server.seen.lock().unwrap().revoked,
        [ACCESS_2.to_owned(), REFRESH_2.to_owned()]
    );
}

#[test]
fn a_token_about_to_expire_is_refreshed_before_it_is_sent() {
    let server = AuthServer::start();
    // The token expires in 30 seconds: within the minute before expiry.
    server.seen.lock().unwrap().expires_in = Some(30);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hintgate.toml");
    std::fs::write(
        &config,
        format!(
            "[servers.docs]\nurl = \"{}\"\ntrust = \"trusted\"\n\n[servers.docs.oauth]\n",
            server.url()
        ),
    )
    .unwrap();
    let config = config.display().to_string();
    sign_in(dir.path(), &config, &server);
    let mut host = crate::host::Host::start(dir.path(), &["run", "--config", &config], &[]);
    host.initialize(json!({}));
    let listed = host.request("tools/list", json!({}));
    assert!(listed.to_string().contains("search"), "{listed}");
    host.close();
    let seen = server.seen.lock().unwrap();
    let sent: Vec<_> = seen.mcp_auth.iter().flatten().collect();
    assert!(!sent.is_empty());
    assert!(
        sent.iter()
            .all(|auth| **auth == format!("Bearer {ACCESS_2}")),
        "the expiring token was sent: {sent:?}"
    );
}

#[test]
fn a_server_that_refuses_every_token_gets_one_refresh_per_call_and_the_call_names_the_login() {
    let server = AuthServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hintgate.toml");
    std::fs::write(
        &config,
        format!(
            "[servers.docs]\nurl = \"{}\"\ntrust = \"trusted\"\n\n[servers.docs.oauth]\n",
            server.url()
        ),
    )
    .unwrap();
    let config = config.display().to_string();
    sign_in(dir.path(), &config, &server);
    let mut host = crate::host::Host::start(dir.path(), &["run", "--config", &config], &[]);
    host.initialize(json!({}));
    let listed = host.request("tools/list", json!({}));
    let tool = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .find(|name| name.ends_with("search"))
        .unwrap_or_else(|| panic!("no search tool: {listed}"))
        .to_owned();
    server.seen.lock().unwrap().refuse_all = true;
    let result = host.call(&tool, json!({"q": "x"}));
    let shown = result.to_string();
    assert!(
        shown.contains("oauth-login-required") && shown.contains("hintgate auth login docs"),
        "{shown}"
    );
    assert!(!shown.contains("SECRET"), "{shown}");
    host.close();
    let seen = server.seen.lock().unwrap();
    let refreshes = seen
        .token
        .iter()
        .filter(|form| form.get("grant_type").map(String::as_str) == Some("refresh_token"))
        .count();
    assert_eq!(refreshes, 1, "one refresh, then a person must sign in");
}

/// The SSRF guard end to end: an authorization server whose metadata names
/// a token endpoint on `0.0.0.0` (which connects to this machine, as
/// loopback does, but is another class of address than the server's own)
/// gets no connection: the login fails naming the refusal, and the code is
/// never sent.
#[test]
fn a_token_endpoint_on_another_internal_address_than_the_servers_is_refused() {
    let server = AuthServer::start();
    let port = server.base.rsplit(':').next().unwrap().to_owned();
    server.seen.lock().unwrap().token_endpoint = Some(format!("https://0.0.0.0:{port}/token"));
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &server.url());
    let state = dir.path().join("state").display().to_string();
    let mut child = hintgate()
        .current_dir(dir.path())
        .args([
            "auth",
            "--config",
            &config,
            "--state-dir",
            &state,
            "login",
            "docs",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut errors = BufReader::new(child.stderr.take().unwrap());
    let address = loop {
        let mut line = String::new();
        assert_ne!(errors.read_line(&mut line).unwrap(), 0, "no address");
        if line.starts_with(&format!("{}/authorize?", server.base)) {
            break line.trim().to_owned();
        }
    };
    browse(&address);
    let mut rest = String::new();
    errors.read_to_string(&mut rest).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_ne!(out.status.code(), Some(0), "{rest}");
    assert!(
        rest.contains("oauth-transport")
            && rest.contains(
                "refused: an address of class `unspecified`, which the server's own address is not"
            ),
        "{rest}"
    );
    assert!(
        server.seen.lock().unwrap().token.is_empty(),
        "the code went nowhere"
    );
    let status = auth(dir.path(), &config, &["status"]);
    assert_eq!(
        stdout(&status),
        "docs: not signed in (hintgate auth login docs)\n"
    );
}
