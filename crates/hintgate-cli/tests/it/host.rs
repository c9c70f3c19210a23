//! A scripted MCP host that drives `hintgate run` over stdio, for the
//! gateway's end-to-end tests.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::util::hintgate;

/// How long to wait for any one message before the test fails instead of
/// hanging. It bounds a broken test; no test asserts on time.
const PATIENCE: Duration = Duration::from_secs(120);

/// Answers a request the gateway sends the host (elicitation, for one).
pub type Responder = Box<dyn FnMut(&Value) -> Value>;

/// The host side of one gateway session.
pub struct Host {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<Value>,
    next_id: u64,
    /// Notifications received so far.
    pub notifications: Vec<Value>,
    /// Requests the gateway sent the host, as received.
    pub requests: Vec<Value>,
    responder: Option<Responder>,
    stderr: PathBuf,
}

/// The fixture server's path.
pub fn fixture_server() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/fixture_server.py")
        .display()
        .to_string()
}

/// A wrap-mode gateway named `fx` in front of a trusted fixture server that
/// lists exactly the tools in `dir/tools.json`.
pub fn start_tools_file(dir: &Path, env: &[(&str, &str)]) -> Host {
    let server = fixture_server();
    let args = [
        "run",
        "--name",
        "fx",
        "--trust",
        "trusted",
        "--",
        "python3",
        server.as_str(),
        "--tools-file",
        "tools.json",
    ];
    Host::start(dir, &args, env)
}

impl Host {
    /// Starts `hintgate` with `args` in `dir`, with extra environment.
    pub fn start(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_with(hintgate(), dir, args, env)
    }

    /// Starts `command` (the `hintgate` binary, perhaps made ready to run
    /// confined) with `args` in `dir`, with extra environment.
    pub fn start_with(
        mut command: std::process::Command,
        dir: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let stderr = dir.join("hintgate.stderr");
        command
            .current_dir(dir)
            .args(args)
            .env("RUST_LOG", "debug")
            // Pins and approvals go to the test's own directory.
            .env("HINTGATE_STATE_DIR", dir.join("state"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("hintgate starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let value: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|err| json!({"unparseable": line, "error": err.to_string()}));
                if tx.send(value).is_err() {
                    return;
                }
            }
        });
        Self {
            stdin: child.stdin.take(),
            child,
            lines,
            next_id: 0,
            notifications: Vec::new(),
            requests: Vec::new(),
            responder: None,
            stderr,
        }
    }

    /// Sets how the host answers the gateway's requests.
    pub fn respond_with(&mut self, responder: impl FnMut(&Value) -> Value + 'static) {
        self.responder = Some(Box::new(responder));
    }

    /// The gateway's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Sends one raw message.
    pub fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().expect("the host's side is open");
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    /// Sends a request and returns the whole response message, answering any
    /// request the gateway sends meanwhile.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = json!(format!("host-{}", self.next_id));
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.wait_for(&id)
    }

    /// Waits for the response with this id.
    pub fn wait_for(&mut self, id: &Value) -> Value {
        loop {
            let message = self.next_message();
            if message.get("method").is_some() {
                self.handle_incoming(message);
                continue;
            }
            if message.get("id") == Some(id) {
                return message;
            }
            panic!("an unexpected message: {message}\nlog:\n{}", self.log());
        }
    }

    /// The next message from the gateway.
    pub fn next_message(&mut self) -> Value {
        match self.lines.recv_timeout(PATIENCE) {
            Ok(message) => message,
            Err(_) => panic!(
                "the gateway sent nothing for {PATIENCE:?}\nlog:\n{}",
                self.log()
            ),
        }
    }

    /// The next response, whatever its id, answering any request the
    /// gateway sends meanwhile.
    pub fn next_response(&mut self) -> Value {
        loop {
            let message = self.next_message();
            if message.get("method").is_some() {
                self.handle_incoming(message);
                continue;
            }
            return message;
        }
    }

    /// Waits until a notification with this method has arrived.
    pub fn wait_for_notification(&mut self, method: &str) -> Value {
        if let Some(found) = self.notifications.iter().find(|n| n["method"] == method) {
            return found.clone();
        }
        loop {
            let message = self.next_message();
            let matches = message.get("id").is_none() && message["method"] == method;
            if message.get("method").is_some() {
                self.handle_incoming(message.clone());
            }
            if matches {
                return message;
            }
        }
    }

    fn handle_incoming(&mut self, message: Value) {
        if message.get("id").is_none() {
            self.notifications.push(message);
            return;
        }
        self.requests.push(message.clone());
        let answer = match &mut self.responder {
            Some(responder) => responder(&message),
            None => json!({"error": {"code": -32601, "message": "this host answers nothing"}}),
        };
        let mut reply = json!({"jsonrpc": "2.0", "id": message["id"]});
        if let Some(error) = answer.get("error") {
            reply["error"] = error.clone();
        } else {
            reply["result"] = answer;
        }
        self.send(&reply);
    }

    /// `initialize` with these client capabilities, then `initialized`.
    pub fn initialize(&mut self, capabilities: Value) -> Value {
        let response = self.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": {"name": "test-host", "version": "1"}}),
        );
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        response
    }

    /// `tools/call`, returning the result (or the error message).
    pub fn call(&mut self, name: &str, arguments: Value) -> Value {
        let response = self.request("tools/call", json!({"name": name, "arguments": arguments}));
        response.get("result").cloned().unwrap_or(response)
    }

    /// Kills the gateway with SIGKILL, as a crash would, and reaps it.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Sends the gateway a signal (`TERM`, `INT`, `HUP`), as a host or a
    /// service manager that stops it would.
    pub fn signal(&self, name: &str) {
        let status = std::process::Command::new("kill")
            .args([format!("-{name}"), self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{name}");
    }

    /// Waits for the gateway to exit, with the host's side still open.
    pub fn wait(mut self) -> std::process::ExitStatus {
        self.child.wait().unwrap()
    }

    /// Closes the host's side and waits for the gateway to exit.
    pub fn close(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        self.child.wait().unwrap()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The text of a tool result's first content block.
pub fn text(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A tool result that reports an error.
pub fn is_error(result: &Value) -> bool {
    result["isError"] == json!(true)
}
