//! What the gateway adds to a `tools/call` round trip.
//!
//! In one run, alternating rounds: the built-in demo server called directly,
//! and the same server behind `hintgate run --trust trusted` (wrap mode, an
//! allow decision on every call). For each it measures cold start (spawn to
//! the first answered `tools/list`), latency of sequential calls, and
//! throughput with 16 calls in flight; it prints the medians over the rounds
//! and what the gateway adds. A second pair of rounds measures what a
//! decision hook adds: the same server in gateway mode (`--config`), with
//! and without a persistent hook that answers at once (`hintgate
//! demo-hook`) on every call.
//!
//! `cargo bench -p hintgate-cli --bench overhead` runs it in full; under
//! `cargo test` it runs one short round, so it stays a test that the
//! harness works.
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::disallowed_macros,
    reason = "a measuring tool: a failure should stop it loudly, and it prints its report"
)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

struct Session {
    tool: &'static str,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    line: String,
}

impl Session {
    fn start(argv: &[String], tool: &'static str) -> (Self, Duration) {
        let started = Instant::now();
        let mut child = Command::new(&argv[0])
            .args(&argv[1..])
            .env("RUST_LOG", "warn")
            .env(
                "HINTGATE_STATE_DIR",
                std::env::temp_dir().join(format!("hintgate-overhead-{}", std::process::id())),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the command starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut session = Self {
            tool,
            child,
            stdin,
            stdout,
            line: String::new(),
        };
        session.send(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"overhead","version":"0"}}}"#);
        session.recv();
        session.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        session.send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
        session.recv();
        let cold = started.elapsed();
        (session, cold)
    }

    fn send(&mut self, line: &str) {
        self.stdin.write_all(line.as_bytes()).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.stdin.flush().unwrap();
    }

    fn recv(&mut self) {
        self.line.clear();
        let read = self.stdout.read_line(&mut self.line).unwrap();
        assert!(read > 0, "the session ended early");
        assert!(
            !self.line.contains("\"error\""),
            "an error came back: {}",
            self.line
        );
    }

    fn call(&self, id: u64) -> String {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{}","arguments":{{}}}}}}"#,
            self.tool
        )
    }

    /// Sequential round trips; returns each one's latency.
    fn latencies(&mut self, n: u64) -> Vec<Duration> {
        (0..n)
            .map(|i| {
                let started = Instant::now();
                let line = self.call(1_000 + i);
                self.send(&line);
                self.recv();
                started.elapsed()
            })
            .collect()
    }

    /// `n` calls with `in_flight` outstanding at a time; returns calls per second.
    fn throughput(&mut self, n: u64, in_flight: u64) -> f64 {
        let started = Instant::now();
        let mut sent = 0;
        let mut received = 0;
        let mut batch = String::new();
        while received < n {
            batch.clear();
            while sent < n && sent - received < in_flight {
                batch.push_str(&self.call(1_000_000 + sent));
                batch.push('\n');
                sent += 1;
            }
            if !batch.is_empty() {
                self.stdin.write_all(batch.as_bytes()).unwrap();
                self.stdin.flush().unwrap();
            }
            self.recv();
            received += 1;
        }
        n as f64 / started.elapsed().as_secs_f64()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Round {
    cold_ms: f64,
    p50_us: f64,
    p99_us: f64,
    calls_per_s: f64,
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx].as_secs_f64() * 1e6
}

fn measure(argv: &[String], tool: &'static str, warm: u64, lat: u64, thr: u64) -> Round {
    let (mut session, cold) = Session::start(argv, tool);
    session.latencies(warm);
    let mut latencies = session.latencies(lat);
    latencies.sort();
    let calls_per_s = session.throughput(thr, 16);
    Round {
        cold_ms: cold.as_secs_f64() * 1e3,
        p50_us: percentile(&latencies, 0.50),
        p99_us: percentile(&latencies, 0.99),
        calls_per_s,
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let full = std::env::args().any(|arg| arg == "--bench");
    let (rounds, warm, lat, thr) = if full {
        (7, 500, 5_000, 20_000)
    } else {
        (1, 10, 50, 200)
    };
    let exe = env!("CARGO_BIN_EXE_hintgate").to_owned();
    let upstream = vec![
        exe.clone(),
        "demo-server".into(),
        "--flavor".into(),
        "notes".into(),
    ];
    let mut proxied = vec![
        exe.clone(),
        "run".into(),
        "--trust".into(),
        "trusted".into(),
        "--".into(),
    ];
    proxied.extend(upstream.iter().cloned());

    let mut added_p50 = Vec::new();
    let mut added_p99 = Vec::new();
    let mut ratio = Vec::new();
    let mut added_cold = Vec::new();
    let mut direct_p50 = Vec::new();
    let mut direct_cps = Vec::new();
    for _ in 0..rounds {
        let direct = measure(&upstream, "read_notes", warm, lat, thr);
        let gateway = measure(&proxied, "read_notes", warm, lat, thr);
        added_p50.push(gateway.p50_us - direct.p50_us);
        added_p99.push(gateway.p99_us - direct.p99_us);
        ratio.push(gateway.calls_per_s / direct.calls_per_s);
        added_cold.push(gateway.cold_ms - direct.cold_ms);
        direct_p50.push(direct.p50_us);
        direct_cps.push(direct.calls_per_s);
    }
    println!(
        "overhead of `hintgate run` (wrap mode, trusted, allow) over a direct stdio connection"
    );
    println!(
        "medians over {rounds} alternating round(s); {lat} sequential calls, {thr} calls with 16 in flight"
    );
    println!(
        "  direct:                 p50 {:.1} us, {:.0} calls/s",
        median(direct_p50),
        median(direct_cps)
    );
    println!("  added latency, p50:     {:.1} us", median(added_p50));
    println!("  added latency, p99:     {:.1} us", median(added_p99));
    println!(
        "  throughput at 16 in flight, gateway / direct: {:.2}",
        median(ratio)
    );
    println!(
        "  added cold start (spawn to first tools/list): {:.1} ms",
        median(added_cold)
    );

    // What a persistent decision hook adds: gateway mode, the same server
    // and calls, with and without a hook that allows each call at once.
    let dir = std::env::temp_dir().join(format!("hintgate-overhead-hook-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let server = format!(
        "[servers.notes]\ncommand = {exe:?}\nargs = [\"demo-server\", \"--flavor\", \"notes\"]\ntrust = \"trusted\"\n"
    );
    let plain = dir.join("plain.toml");
    std::fs::write(&plain, &server).unwrap();
    let hooked = dir.join("hooked.toml");
    std::fs::write(
        &hooked,
        format!("[gateway]\ndecide_command = [{exe:?}, \"demo-hook\"]\n\n{server}"),
    )
    .unwrap();
    let config = |path: &std::path::Path| {
        vec![
            exe.clone(),
            "run".into(),
            "--config".into(),
            path.display().to_string(),
        ]
    };
    let (plain, hooked) = (config(&plain), config(&hooked));
    let mut hook_p50 = Vec::new();
    let mut hook_p99 = Vec::new();
    let mut hook_ratio = Vec::new();
    for _ in 0..rounds {
        let without = measure(&plain, "notes__read_notes", warm, lat, thr);
        let with = measure(&hooked, "notes__read_notes", warm, lat, thr);
        hook_p50.push(with.p50_us - without.p50_us);
        hook_p99.push(with.p99_us - without.p99_us);
        hook_ratio.push(with.calls_per_s / without.calls_per_s);
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!("what a persistent decision hook that answers at once adds (gateway mode, both ways)");
    println!("  added latency, p50:     {:.1} us", median(hook_p50));
    println!("  added latency, p99:     {:.1} us", median(hook_p99));
    println!(
        "  throughput at 16 in flight, with hook / without: {:.2}",
        median(hook_ratio)
    );
}
