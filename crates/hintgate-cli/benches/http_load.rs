//! Many HTTP hosts at once: what `hintgate run --listen` costs under load.
//!
//! In one run, on loopback: a minimal Streamable HTTP MCP server (this
//! program in a process of its own, answering `tools/call` at once), and 200
//! host sessions that each call its one read-only tool in a loop for a
//! bounded time, first straight at the server, then through a bare relay
//! on the gateway's HTTP stack (axum towards the hosts, reqwest towards the
//! server, nothing read or decided: what any proxy on this stack pays), then
//! through `hintgate run --listen --trust trusted --url` (an allow decision
//! and an audit record on every call). It prints calls per second, the p50
//! and p99 latency of each and what the gateway adds,
//! and the gateway's memory per idle host session (its resident set before
//! and after 1000 sessions that initialized and went quiet).
//!
//! `cargo bench -p hintgate-cli --bench http_load` runs it in full
//! (`HINTGATE_BENCH_GATEWAY=PATH` runs another build's `hintgate` instead,
//! to compare builds on the same machine); under
//! `cargo test` it runs a short round with a few sessions, so it stays a
//! test that the harness works.
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::disallowed_macros,
    reason = "a measuring tool: a failure should stop it loudly, and it prints its report"
)]

#[expect(dead_code, reason = "the soak's parts of it (`http_soak`)")]
mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{Conn, gateway, rss_kib, serve_upstream, serving_process};
use tokio::net::TcpListener;

/// What one load run measured.
struct Load {
    calls: usize,
    elapsed: Duration,
    p50: Duration,
    p99: Duration,
}

/// `sessions` hosts calling `echo` in a loop at `addr` for `time`.
async fn load(addr: SocketAddr, sessions: usize, time: Duration) -> Load {
    let mut conns = Vec::with_capacity(sessions);
    for _ in 0..sessions {
        conns.push(Conn::start(addr).await);
    }
    let started = Instant::now();
    let until = started + time;
    let mut tasks = Vec::with_capacity(sessions);
    for mut conn in conns {
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut id = 1u64;
            while Instant::now() < until {
                id += 1;
                let body = format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"n":{id}}}}}}}"#
                );
                let sent = Instant::now();
                let answer = conn.post(&body).await.unwrap();
                assert!(answer.contains("\"ok\""), "{answer}");
                latencies.push(sent.elapsed());
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    let elapsed = started.elapsed();
    all.sort();
    let at = |q: f64| all[((all.len() as f64 * q) as usize).min(all.len() - 1)];
    Load {
        calls: all.len(),
        elapsed,
        p50: at(0.50),
        p99: at(0.99),
    }
}

/// The CPU time process `pid` has used so far (user and system), from
/// `/proc/PID/stat`, in clock ticks of 1/100 s.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command's name, which is in parentheses.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    // utime and stime are the 14th and 15th fields of the line.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// A load run at `addr` with the CPU time process `pid` spent in it, in
/// microseconds per call.
async fn load_with_cpu(pid: u32, addr: SocketAddr, sessions: usize, time: Duration) -> (Load, f64) {
    let before = cpu_ticks(pid);
    let run = load(addr, sessions, time).await;
    let spent = (cpu_ticks(pid) - before) as f64 * 10_000.0;
    let per_call = spent / run.calls.max(1) as f64;
    (run, per_call)
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

/// A bare relay on the gateway's own HTTP stack, in a process of its own:
/// axum's server towards the hosts, one reqwest client towards the upstream
/// at `url`, on a runtime like the gateway's over HTTP (the connections on
/// two worker threads). It reads nothing of the messages and decides
/// nothing: what any proxy on this stack pays before it does its own work.
/// Prints the address it serves, then serves until killed.
fn serve_relay(url: String) {
    use axum::body::Bytes;
    use axum::http::{HeaderMap, StatusCode};

    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let client = reqwest::Client::new();
        let relay = move |headers: HeaderMap, body: Bytes| {
            let client = client.clone();
            let url = url.clone();
            async move {
                let mut request = client
                    .post(url)
                    .header("content-type", "application/json")
                    .header("accept", "application/json, text/event-stream");
                if let Some(session) = headers.get("mcp-session-id") {
                    request = request.header("mcp-session-id", session);
                }
                let answer = request.body(body).send().await.unwrap();
                let status = StatusCode::from_u16(answer.status().as_u16()).unwrap();
                let session = answer.headers().get("mcp-session-id").cloned();
                let body = answer.bytes().await.unwrap();
                let mut response = axum::response::Response::new(axum::body::Body::from(body));
                *response.status_mut() = status;
                response
                    .headers_mut()
                    .insert("content-type", "application/json".parse().unwrap());
                if let Some(session) = session {
                    response.headers_mut().insert("mcp-session-id", session);
                }
                response
            }
        };
        let app = axum::Router::new().route("/mcp", axum::routing::post(relay));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        println!("{}", listener.local_addr().unwrap());
        axum::serve(listener, app).await.unwrap();
    });
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|arg| arg == "--serve-upstream") {
        serve_upstream();
        return;
    }
    if let Some(at) = args.iter().position(|arg| arg == "--serve-relay") {
        serve_relay(args[at + 1].clone());
        return;
    }
    let full = std::env::args().any(|arg| arg == "--bench");
    let (sessions, time, idle) = if full {
        (200, Duration::from_secs(10), 1000)
    } else {
        (4, Duration::from_millis(300), 20)
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let state = std::env::temp_dir().join(format!("hintgate-http-load-{}", std::process::id()));
    runtime.block_on(async {
        let (mut server, upstream_addr) = serving_process(&["--serve-upstream"]);
        let url = format!("http://{upstream_addr}/mcp");

        let direct = load(upstream_addr, sessions, time).await;
        let (mut relay_child, relay_addr) = serving_process(&["--serve-relay", &url]);
        load(relay_addr, 1, Duration::from_millis(200)).await;
        let (relayed, relay_cpu) = load_with_cpu(relay_child.id(), relay_addr, sessions, time).await;
        let _ = relay_child.kill();
        let _ = relay_child.wait();
        let (mut child, addr, _said) = gateway(&url, &state);
        // Warm: the gateway starts its upstream link on the first request.
        load(addr, 1, Duration::from_millis(200)).await;
        let (through, gateway_cpu) = load_with_cpu(child.id(), addr, sessions, time).await;

        // Memory per idle session: the resident set before and after
        // `idle` sessions that initialized and went quiet.
        let before = rss_kib(child.id());
        let mut quiet = Vec::with_capacity(idle);
        for _ in 0..idle {
            quiet.push(Conn::start(addr).await);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let after = rss_kib(child.id());
        let per_session = after.saturating_sub(before) as f64 / idle as f64;
        drop(quiet);
        let _ = child.kill();
        let _ = child.wait();
        let _ = server.kill();
        let _ = server.wait();

        let rate = |load: &Load| load.calls as f64 / load.elapsed.as_secs_f64();
        println!("{sessions} HTTP host sessions, {} s each way, on loopback", time.as_secs_f64());
        println!("{:<22} {:>12} {:>10} {:>10}", "", "calls/s", "p50 µs", "p99 µs");
        for (name, run) in [
            ("direct", &direct),
            ("bare relay", &relayed),
            ("through hintgate", &through),
        ] {
            println!(
                "{name:<22} {:>12.0} {:>10.0} {:>10.0}",
                rate(run),
                micros(run.p50),
                micros(run.p99)
            );
        }
        println!(
            "ratio of calls/s: {:.2}x; added p50 {:.0} µs, p99 {:.0} µs",
            rate(&through) / rate(&direct),
            micros(through.p50.saturating_sub(direct.p50)),
            micros(through.p99.saturating_sub(direct.p99)),
        );
        println!(
            "the bare relay on the same HTTP stack: {:.2}x of direct; hintgate keeps {:.2}x of the relay's calls/s",
            rate(&relayed) / rate(&direct),
            rate(&through) / rate(&relayed),
        );
        println!(
            "CPU per call: the bare relay {relay_cpu:.0} µs, hintgate {gateway_cpu:.0} µs"
        );
        println!(
            "memory per idle session: {per_session:.1} KiB ({idle} sessions; resident set {before} KiB -> {after} KiB)"
        );
        assert!(through.calls > 0 && direct.calls > 0);
    });
    let _ = std::fs::remove_dir_all(&state);
}
