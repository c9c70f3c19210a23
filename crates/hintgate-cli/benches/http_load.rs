//! Many HTTP hosts at once: what `hintgate run --listen` costs under load.
//!
//! In one run, on loopback: a minimal Streamable HTTP MCP server (this
//! program in a process of its own, answering `tools/call` at once), and 200
//! host sessions each way that call its one read-only tool in a loop: straight
//! at the server, through a bare relay on the gateway's HTTP stack (axum
//! towards the hosts, reqwest towards the server, nothing read or decided:
//! what any proxy on this stack pays), and through `hintgate run --listen
//! --trust trusted --url` (an allow decision and an audit record on every
//! call), in alternating rounds of a bounded time, so that whatever else the
//! machine does meanwhile falls on all three alike. It prints calls per
//! second, the p50 and p99 latency of each and what the gateway adds, its
//! share of the relay's pace round by round, the CPU time each proxy spends
//! per call, and the gateway's memory per idle host session (its resident
//! set before and after 1000 sessions that initialized and went quiet).
//!
//! `cargo bench -p hintgate-cli --bench http_load` runs it in full
//! (`HINTGATE_BENCH_GATEWAY=PATH` runs another build's `hintgate` instead,
//! to compare builds on the same machine; `HINTGATE_BENCH_TOKENS=1` has
//! the hosts authenticate with a bearer token, as on a team's gateway,
//! where the default runs `--no-auth`); under
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

/// What the load runs at one address measured, added up over its rounds.
#[derive(Default)]
struct Load {
    calls: usize,
    elapsed: Duration,
    /// Every call's latency, sorted once the rounds are over.
    latencies: Vec<Duration>,
    /// The CPU time the proxy's process spent in the rounds, in clock
    /// ticks of 1/100 s.
    cpu_ticks: u64,
    /// Each round's calls per second, in the order run.
    rates: Vec<f64>,
}

impl Load {
    fn rate(&self) -> f64 {
        self.calls as f64 / self.elapsed.as_secs_f64()
    }

    fn at(&self, q: f64) -> Duration {
        let all = &self.latencies;
        all[((all.len() as f64 * q) as usize).min(all.len() - 1)]
    }

    /// Microseconds of the process's CPU per call.
    fn cpu_per_call(&self) -> f64 {
        self.cpu_ticks as f64 * 10_000.0 / self.calls.max(1) as f64
    }
}

/// A host session, with the id of its next request (ids are never reused
/// within a session, across rounds too).
struct Host {
    conn: Conn,
    id: u64,
}

/// `sessions` hosts that have initialized at `addr`.
async fn hosts(addr: SocketAddr, sessions: usize) -> Vec<Host> {
    let mut hosts = Vec::with_capacity(sessions);
    for _ in 0..sessions {
        hosts.push(Host {
            conn: Conn::start(addr).await,
            id: 1,
        });
    }
    hosts
}

/// One round: every host calls `echo` in a loop for `time`; adds what it
/// measured to `load` (with the CPU time process `pid` spent, if any) and
/// gives the hosts back.
async fn round(hosts: Vec<Host>, time: Duration, pid: Option<u32>, load: &mut Load) -> Vec<Host> {
    let before = pid.map(cpu_ticks);
    let started = Instant::now();
    let until = started + time;
    let mut tasks = Vec::with_capacity(hosts.len());
    for mut host in hosts {
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while Instant::now() < until {
                host.id += 1;
                let id = host.id;
                let body = format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"n":{id}}}}}}}"#
                );
                let sent = Instant::now();
                let answer = host.conn.post(&body).await.unwrap();
                assert!(answer.contains("\"ok\""), "{answer}");
                latencies.push(sent.elapsed());
            }
            (host, latencies)
        }));
    }
    let mut hosts = Vec::with_capacity(tasks.len());
    let mut calls = 0;
    for task in tasks {
        let (host, latencies) = task.await.unwrap();
        calls += latencies.len();
        load.latencies.extend(latencies);
        hosts.push(host);
    }
    let elapsed = started.elapsed();
    if let (Some(pid), Some(before)) = (pid, before) {
        load.cpu_ticks += cpu_ticks(pid) - before;
    }
    load.calls += calls;
    load.elapsed += elapsed;
    load.rates.push(calls as f64 / elapsed.as_secs_f64());
    hosts
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
    // Five rounds of 2 s each way, taken in turn (direct, the relay,
    // hintgate), so that what else the machine does in those seconds falls
    // on all three alike.
    let (sessions, rounds, time, idle) = if full {
        (200, 5, Duration::from_secs(2), 1000)
    } else {
        (4, 2, Duration::from_millis(150), 20)
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let state = std::env::temp_dir().join(format!("hintgate-http-load-{}", std::process::id()));
    runtime.block_on(async {
        let (mut server, upstream_addr) = serving_process(&["--serve-upstream"]);
        let url = format!("http://{upstream_addr}/mcp");
        let (mut relay_child, relay_addr) = serving_process(&["--serve-relay", &url]);
        let (mut child, addr, _said) = gateway(&url, &state);
        // Warm: each proxy opens its connection to the server on the first
        // request, and the gateway starts its upstream link.
        let mut warm = Load::default();
        for at in [relay_addr, addr] {
            round(hosts(at, 1).await, Duration::from_millis(200), None, &mut warm).await;
        }

        let mut direct_hosts = hosts(upstream_addr, sessions).await;
        let mut relay_hosts = hosts(relay_addr, sessions).await;
        let mut gateway_hosts = hosts(addr, sessions).await;
        let (mut direct, mut relayed, mut through) =
            (Load::default(), Load::default(), Load::default());
        for _ in 0..rounds {
            direct_hosts = round(direct_hosts, time, None, &mut direct).await;
            relay_hosts = round(relay_hosts, time, Some(relay_child.id()), &mut relayed).await;
            gateway_hosts = round(gateway_hosts, time, Some(child.id()), &mut through).await;
        }
        drop((direct_hosts, relay_hosts, gateway_hosts));
        let _ = relay_child.kill();
        let _ = relay_child.wait();
        for load in [&mut direct, &mut relayed, &mut through] {
            load.latencies.sort();
        }

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

        println!(
            "{sessions} HTTP host sessions, {rounds} rounds of {} s each way, taken in turn, on loopback",
            time.as_secs_f64()
        );
        println!("{:<22} {:>12} {:>10} {:>10}", "", "calls/s", "p50 µs", "p99 µs");
        for (name, run) in [
            ("direct", &direct),
            ("bare relay", &relayed),
            ("through hintgate", &through),
        ] {
            println!(
                "{name:<22} {:>12.0} {:>10.0} {:>10.0}",
                run.rate(),
                micros(run.at(0.50)),
                micros(run.at(0.99))
            );
        }
        println!(
            "ratio of calls/s: {:.2}x; added p50 {:.0} µs, p99 {:.0} µs",
            through.rate() / direct.rate(),
            micros(through.at(0.50).saturating_sub(direct.at(0.50))),
            micros(through.at(0.99).saturating_sub(direct.at(0.99))),
        );
        println!(
            "the bare relay on the same HTTP stack: {:.2}x of direct; hintgate keeps {:.2}x of the relay's calls/s",
            relayed.rate() / direct.rate(),
            through.rate() / relayed.rate(),
        );
        let by_round: Vec<String> = through
            .rates
            .iter()
            .zip(&relayed.rates)
            .map(|(gateway, relay)| format!("{:.2}", gateway / relay))
            .collect();
        println!("hintgate's share of the relay's calls/s, round by round: {}", by_round.join(", "));
        println!(
            "CPU per call: the bare relay {:.0} µs, hintgate {:.0} µs",
            relayed.cpu_per_call(),
            through.cpu_per_call()
        );
        println!(
            "memory per idle session: {per_session:.1} KiB ({idle} sessions; resident set {before} KiB -> {after} KiB)"
        );
        assert!(through.calls > 0 && direct.calls > 0 && relayed.calls > 0);
    });
    let _ = std::fs::remove_dir_all(&state);
}
