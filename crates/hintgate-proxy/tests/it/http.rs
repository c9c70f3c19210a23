//! Streamable HTTP servers, played by a small HTTP server on loopback that
//! answers every request with what a real server sent.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use hintgate_proxy::probe::{Options, ProbeError, Target, probe};

/// Serves `status` and `body` (JSON) to every request, on a thread, until
/// the test ends; returns the URL.
fn serve(status: &'static str, body: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
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
            let mut request = vec![0; length];
            let _ = reader.read_exact(&mut request);
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn null_id_error_from_server_is_not_spliced_into_a_line_with_two_ids() {
    // What the TypeScript SDK's server answers a request it cannot place
    // (here: `initialize` without the session it expects): HTTP 400 and a
    // JSON-RPC error under a `null` id. The gateway puts its own request's
    // id in; a second `id` member added beside the `null` one made the line
    // one nobody can read, and the server's error was lost.
    let url = serve(
        "400 Bad Request",
        r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}"#,
    );
    let target = Target::Http {
        url,
        headers: Default::default(),
    };
    let options = Options {
        timeout: Duration::from_secs(20),
        call_read_only: false,
    };
    match probe(&target, options).await {
        Err(ProbeError::Refused { method, message }) => {
            assert_eq!(method, "initialize");
            assert_eq!(message, "Bad Request: No valid session ID provided");
        }
        other => panic!("expected the server's error, got {other:?}"),
    }
}
