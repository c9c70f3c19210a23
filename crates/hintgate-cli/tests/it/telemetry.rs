//! Traces of calls, exported over OTLP/HTTP to a collector the test runs on
//! loopback: each call is a span in the host's trace, with its steps as
//! children, the server is sent the forward span's context, and no span
//! carries an argument's value.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::host::is_error;

/// Bounds a wait that should end; no test asserts on time.
const PATIENCE: Duration = Duration::from_secs(30);

/// The host's trace context.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const HOST_SPAN: &str = "00f067aa0ba902b7";

/// An OTLP/HTTP collector on loopback: every export request's path and
/// JSON body, on a channel; it answers 200.
fn collector() -> (String, mpsc::Receiver<(String, Value)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                loop {
                    let mut request_line = String::new();
                    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
                        return;
                    }
                    let path = request_line
                        .split_whitespace()
                        .nth(1)
                        .unwrap_or("")
                        .to_owned();
                    let mut length = 0;
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let line = line.trim_end();
                        if line.is_empty() {
                            break;
                        }
                        if let Some((name, value)) = line.split_once(':')
                            && name.eq_ignore_ascii_case("content-length")
                        {
                            length = value.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    let _ = stream.write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
                    );
                    let parsed = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    if tx.send((path, parsed)).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, rx)
}

/// Spans received until one named `tools/call` has `attribute` = `value`;
/// every span received so far is returned with it.
fn spans_until(
    exports: &mpsc::Receiver<(String, Value)>,
    seen: &mut Vec<Value>,
    attribute: &str,
    value: &str,
) -> Value {
    loop {
        if let Some(span) = seen
            .iter()
            .find(|span| span["name"] == "tools/call" && attr(span, attribute) == Some(value))
        {
            return span.clone();
        }
        let (path, body) = exports
            .recv_timeout(PATIENCE)
            .expect("the gateway exported the call's spans");
        assert_eq!(path, "/v1/traces");
        let resource = &body["resourceSpans"][0];
        assert_eq!(
            attr(&resource["resource"], "service.name"),
            Some("hintgate"),
            "{body}"
        );
        for scope in resource["scopeSpans"].as_array().unwrap() {
            seen.extend(scope["spans"].as_array().unwrap().iter().cloned());
        }
    }
}

/// A string attribute of a span (or resource).
fn attr<'a>(span: &'a Value, key: &str) -> Option<&'a str> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|item| item["key"] == key)
        .and_then(|item| item["value"]["stringValue"].as_str())
}

#[test]
fn each_call_is_a_span_in_the_hosts_trace_with_its_steps_and_no_argument_values() {
    let dir = tempfile::tempdir().unwrap();
    let (url, exports) = collector();
    let mut host = crate::util::wrap_fixture(
        dir.path(),
        &[
            "--name",
            "fx",
            "--trust",
            "trusted",
            "--otlp-endpoint",
            &url,
        ],
        &[],
        &[],
    );
    host.respond_with(|_| json!({"action": "decline"}));
    host.initialize(json!({"elicitation": {}}));

    // A read the host traces: the call joins the host's trace.
    let secret = "the value of an argument 7f3a";
    let answer = host.request(
        "tools/call",
        json!({"name": "echo", "arguments": {"text": secret},
               "_meta": {"traceparent": format!("00-{TRACE}-{HOST_SPAN}-01"), "progressToken": "p"}}),
    );
    assert!(!is_error(&answer), "{answer}");
    let echoed: Value = serde_json::from_str(
        answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default(),
    )
    .unwrap_or_else(|err| panic!("{err}: {answer}"));
    let mut seen = Vec::new();
    let call = spans_until(&exports, &mut seen, "mcp.tool.name", "echo");
    assert_eq!(call["traceId"], TRACE, "{call}");
    assert_eq!(call["parentSpanId"], HOST_SPAN, "{call}");
    assert_eq!(call["kind"], 2);
    assert_eq!(attr(&call, "mcp.server.name"), Some("fx"));
    assert_eq!(attr(&call, "hintgate.verdict"), Some("allow"));
    assert_eq!(attr(&call, "hintgate.outcome"), Some("ok"));
    assert_eq!(call["status"]["code"], 0);
    // Its steps, each a child of the call's span, in its trace.
    let children: Vec<&Value> = seen
        .iter()
        .filter(|span| span["parentSpanId"] == call["spanId"])
        .collect();
    let mut names: Vec<&str> = children
        .iter()
        .map(|span| span["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["audit", "decide", "forward"], "{seen:?}");
    assert!(children.iter().all(|span| span["traceId"] == TRACE));
    // The server was sent the forward span's context, in place of the
    // host's, and the host's other `_meta` kept.
    let forward = children
        .iter()
        .find(|span| span["name"] == "forward")
        .unwrap();
    assert_eq!(
        echoed["_meta"]["traceparent"],
        format!("00-{TRACE}-{}-01", forward["spanId"].as_str().unwrap()),
        "{echoed}"
    );
    assert_eq!(echoed["_meta"]["progressToken"], "p");
    assert_eq!(echoed["arguments"]["text"], secret);

    // A write the person declines: its own trace (the host sent none), with
    // the wait for the person, and the refusal.
    let declined = host.call("write_note", json!({"text": secret}));
    assert!(is_error(&declined), "{declined}");
    let refused = spans_until(&exports, &mut seen, "mcp.tool.name", "write_note");
    assert!(refused.get("parentSpanId").is_none(), "{refused}");
    assert_ne!(refused["traceId"], TRACE);
    assert_eq!(attr(&refused, "hintgate.verdict"), Some("ask"));
    assert_eq!(attr(&refused, "hintgate.outcome"), Some("denied"));
    assert!(
        seen.iter()
            .any(|span| span["name"] == "ask" && span["parentSpanId"] == refused["spanId"]),
        "{seen:?}"
    );
    assert!(
        !seen
            .iter()
            .any(|span| span["name"] == "forward" && span["parentSpanId"] == refused["spanId"]),
        "a refused call is never forwarded"
    );
    assert!(host.close().success());

    // No span carries an argument's value.
    let everything = serde_json::to_string(&seen).unwrap();
    assert!(!everything.contains(secret), "{everything}");
    // One span per call.
    assert_eq!(
        seen.iter()
            .filter(|span| span["name"] == "tools/call")
            .count(),
        2,
        "{seen:?}"
    );
}

#[test]
fn a_collector_that_is_down_never_holds_a_call() {
    // Nothing listens at this address: every export fails, and calls go on.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let dir = tempfile::tempdir().unwrap();
    let mut host = crate::util::wrap_fixture(
        dir.path(),
        &[
            "--name",
            "fx",
            "--trust",
            "trusted",
            "--otlp-endpoint",
            &url,
        ],
        &[],
        &[],
    );
    host.initialize(json!({}));
    for n in 0..20 {
        let answer = host.call("echo", json!({"n": n}));
        assert!(!is_error(&answer), "{answer}");
    }
    assert!(host.close().success());
}

#[test]
fn an_endpoint_with_credentials_is_refused_on_the_command_line_and_in_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let output = crate::util::run(
        dir.path(),
        &[
            "run",
            "--otlp-endpoint",
            "http://user:secret@127.0.0.1:4318",
            "--",
            "true",
        ],
    );
    assert_eq!(
        output.status.code(),
        Some(64),
        "{}",
        crate::util::stderr(&output)
    );
    assert!(crate::util::stderr(&output).contains("credentials"));
    std::fs::write(
        dir.path().join("hintgate.toml"),
        "[telemetry]\notlp_endpoint = \"http://user:secret@127.0.0.1:4318\"\n\n[servers.fx]\ncommand = \"true\"\n",
    )
    .unwrap();
    let check = crate::util::run(dir.path(), &["config", "check", "hintgate.toml"]);
    assert_eq!(
        check.status.code(),
        Some(64),
        "{}",
        crate::util::stdout(&check)
    );
    let said = format!(
        "{}{}",
        crate::util::stdout(&check),
        crate::util::stderr(&check)
    );
    assert!(said.contains("telemetry.otlp_endpoint"), "{said}");
    assert!(said.contains("secret-in-config"), "{said}");
    // The line that holds the secret is not shown again.
    assert!(!said.contains("user:secret"), "{said}");
}
