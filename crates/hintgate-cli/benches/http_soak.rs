//! A soak of `hintgate run --listen`: many HTTP host sessions for a long
//! time, and whether the gateway's memory stays flat and every call is on
//! record.
//!
//! One run, on loopback: the minimal Streamable HTTP MCP server of the
//! load benchmark (a process of its own; `echo` answers at once, `slow`
//! after a short while, with a progress notification first when the call
//! carries a progress token), the gateway in front of it, and 1,000 host
//! sessions of the 2025-11-25 era. Half initialize and stay idle on their
//! connection; the other half loop, with a pause between steps: a call of
//! `echo`; a call of `slow` answered as JSON; a call of `slow` with a
//! progress token that the host cancels (`notifications/cancelled` on a
//! second connection of the session, once the progress shows the server
//! has the call); a call of `slow` with a progress token whose stream the
//! host drops after the progress event and resumes with GET and
//! `Last-Event-ID`, where it must get the result; and now and then the
//! session ends (DELETE, or the host just goes away) and a fresh one
//! starts. The gateway's resident set is sampled all along.
//!
//! At the end, the gateway is stopped with SIGTERM (it must exit cleanly),
//! and its audit log, read with its own `hintgate log --json`, must hold a
//! call record for every call a host got an answer for and every call it
//! cancelled after the server had it; `hintgate log verify` must pass; and
//! no host may have been sent the progress of another host's call.
//!
//! `cargo bench -p hintgate-cli --bench http_soak` runs it in full (1,000
//! sessions for 30 minutes, `HINTGATE_SOAK_SECONDS` to change that) and
//! asserts that the memory is flat after warm-up (the first third of the
//! run, while the sessions' resumption histories fill): at the end, at
//! most 10 % or 8 MiB above what it was then. Under
//! `cargo test` it runs 40 sessions for about 5 s and asserts the records
//! and the resumptions, not the memory (too short to mean anything).
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::disallowed_macros,
    reason = "a measuring tool: a failure should stop it loudly, and it prints its report"
)]

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Conn, gateway, program, rss_kib, serve_upstream, serving_process};

/// A small xorshift generator: the soak is the same run for the same seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What the hosts did and got, counted across every session.
#[derive(Default)]
struct Counts {
    /// `echo` calls answered.
    echo: AtomicU64,
    /// `slow` calls answered (as JSON, on their stream, or resumed).
    slow: AtomicU64,
    /// `slow` calls cancelled after their progress showed the server had
    /// them.
    cancelled: AtomicU64,
    /// Streams dropped after their progress event and resumed with
    /// `Last-Event-ID`, that delivered the result.
    resumed: AtomicU64,
    /// Sessions ended with DELETE.
    deleted: AtomicU64,
    /// Sessions whose host went away without a word.
    dropped: AtomicU64,
    /// Sessions started, idle ones included.
    started: AtomicU64,
    /// Progress notifications of another host's call that reached a host.
    foreign: AtomicU64,
    /// Steps that failed (an error, an unexpected answer, no answer).
    failed: AtomicU64,
}

/// How an active session behaves.
#[derive(Clone, Copy)]
struct Pace {
    /// The longest pause between two steps, in milliseconds.
    pause_ms: u64,
    /// One step in this many ends the session.
    end_one_in: u64,
}

/// The longest a step may wait for the gateway before it counts as
/// unanswered.
const STEP_LIMIT: Duration = Duration::from_secs(30);

fn call(id: u64, tool: &str, token: Option<&str>) -> String {
    let meta = token
        .map(|token| format!(r#","_meta":{{"progressToken":"{token}"}}"#))
        .unwrap_or_default();
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{"n":{id}}}{meta}}}}}"#
    )
}

/// Whether `data` is the answer to request `id`, with a result.
fn answers(data: &str, id: u64) -> bool {
    let Ok(message) = serde_json::from_str::<serde_json::Value>(data) else {
        return false;
    };
    message["id"] == id && message.get("result").is_some()
}

/// The progress token of `data`, when it is a progress notification.
fn progress_of(data: &str) -> Option<String> {
    let message = serde_json::from_str::<serde_json::Value>(data).ok()?;
    (message["method"] == "notifications/progress")
        .then(|| {
            message["params"]["progressToken"]
                .as_str()
                .map(str::to_owned)
        })
        .flatten()
}

/// What an event on the stream of request `id` (progress token `token`)
/// is.
enum Seen {
    /// The priming event, or progress of another call.
    Nothing,
    /// Progress of this call, under this event id.
    Progress(Option<String>),
    /// The answer.
    Answer,
}

/// Reads one event of the stream of request `id` being read on `conn`.
async fn see(conn: &mut Conn, id: u64, token: &str, counts: &Counts) -> Result<Seen, String> {
    let event = conn
        .next_event()
        .await
        .map_err(|e| format!("reading the stream: {e}"))?
        .ok_or("the stream ended before the answer")?;
    if event.data.is_empty() {
        return Ok(Seen::Nothing);
    }
    if answers(&event.data, id) {
        return Ok(Seen::Answer);
    }
    match progress_of(&event.data) {
        Some(theirs) if theirs == token => Ok(Seen::Progress(event.id)),
        Some(_) => {
            // Another host's progress, delivered to this one.
            counts.foreign.fetch_add(1, Ordering::Relaxed);
            Ok(Seen::Nothing)
        }
        None => Err(format!("an unexpected event: {}", event.data)),
    }
}

/// POSTs call `id` of `tool` and reads its answer, as JSON or at the end
/// of an event stream.
async fn answered(conn: &mut Conn, id: u64, tool: &str, counts: &Counts) -> Result<(), String> {
    let head = conn
        .post_head(&call(id, tool, None))
        .await
        .map_err(|e| format!("{tool}: {e}"))?;
    if head.status != 200 {
        return Err(format!("{tool}: {}", head.status));
    }
    if !head.event_stream {
        let body = conn.body(&head).await.map_err(|e| format!("{tool}: {e}"))?;
        return if answers(&body, id) {
            Ok(())
        } else {
            Err(format!("{tool}: {body}"))
        };
    }
    loop {
        if let Seen::Answer = see(conn, id, "", counts).await? {
            return drain(conn).await;
        }
    }
}

/// Reads the rest of an answered call's event stream, to its end.
async fn drain(conn: &mut Conn) -> Result<(), String> {
    while conn
        .next_event()
        .await
        .map_err(|e| format!("after the answer: {e}"))?
        .is_some()
    {}
    Ok(())
}

/// Reads `conn`'s event stream of request `id` up to its progress event:
/// its id, or `None` when the answer came first.
async fn until_progress(
    conn: &mut Conn,
    id: u64,
    token: &str,
    counts: &Counts,
) -> Result<Option<String>, String> {
    loop {
        match see(conn, id, token, counts).await? {
            Seen::Nothing => {}
            Seen::Progress(Some(event)) => return Ok(Some(event)),
            Seen::Progress(None) => return Err("a progress event without an id".to_owned()),
            Seen::Answer => return drain(conn).await.map(|()| None),
        }
    }
}

/// One step of an active session; `main` is its connection, `tag` names
/// the session uniquely, for its progress tokens.
async fn step(
    addr: SocketAddr,
    main: &mut Conn,
    (id, tag): (u64, &str),
    kind: u64,
    counts: &Counts,
) -> Result<(), String> {
    let token = format!("{tag}-{id}");
    match kind {
        // `echo`, answered at once.
        0..50 => {
            answered(main, id, "echo", counts).await?;
            counts.echo.fetch_add(1, Ordering::Relaxed);
        }
        // `slow` without a token, answered after the server's delay.
        50..65 => {
            answered(main, id, "slow", counts).await?;
            counts.slow.fetch_add(1, Ordering::Relaxed);
        }
        // `slow` with a token, cancelled once the server has it.
        65..80 => {
            let head = main
                .post_head(&call(id, "slow", Some(&token)))
                .await
                .map_err(|e| format!("slow to cancel: {e}"))?;
            if head.status != 200 || !head.event_stream {
                return Err(format!(
                    "slow to cancel: {} and no event stream",
                    head.status
                ));
            }
            if until_progress(main, id, &token, counts).await?.is_none() {
                // Answered before the host could cancel.
                counts.slow.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            let mut side = main.another(addr).await;
            let cancel = format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{id},"reason":"soak"}}}}"#
            );
            let (status, body) = side
                .try_post(&cancel)
                .await
                .map_err(|e| format!("cancel: {e}"))?;
            if status != 202 {
                return Err(format!("cancel: {status} {body}"));
            }
            counts.cancelled.fetch_add(1, Ordering::Relaxed);
            // The gateway answers no cancelled call: its stream ends (with
            // the answer, if it came before the cancellation).
            drain(main).await?;
        }
        // `slow` with a token: the stream dropped after the progress, and
        // resumed.
        _ => {
            let head = main
                .post_head(&call(id, "slow", Some(&token)))
                .await
                .map_err(|e| format!("slow to resume: {e}"))?;
            if head.status != 200 || !head.event_stream {
                return Err(format!(
                    "slow to resume: {} and no event stream",
                    head.status
                ));
            }
            let Some(last) = until_progress(main, id, &token, counts).await? else {
                counts.slow.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            };
            let mut again = main.another(addr).await;
            // The host drops the stream.
            *main = Conn::open(addr).await;
            main.session.clone_from(&again.session);
            let head = again
                .resume(&last)
                .await
                .map_err(|e| format!("resume: {e}"))?;
            if head.status != 200 || !head.event_stream {
                return Err(format!("resume after {last}: {}", head.status));
            }
            loop {
                match see(&mut again, id, &token, counts).await {
                    Ok(Seen::Answer) => break,
                    Ok(_) => {}
                    Err(why) => return Err(format!("the stream resumed after {last}: {why}")),
                }
            }
            counts.slow.fetch_add(1, Ordering::Relaxed);
            counts.resumed.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(())
}

/// An active host: sessions one after the other until `until`.
async fn active(
    addr: SocketAddr,
    (host, mut main): (u64, Conn),
    pace: Pace,
    until: Instant,
    counts: Arc<Counts>,
) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (host + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
    let mut generation = 0;
    let mut id = 0u64;
    while Instant::now() < until {
        // The host's own pace, not a wait for the gateway.
        tokio::time::sleep(Duration::from_millis(rng.below(pace.pause_ms + 1))).await;
        id += 1;
        let kind = rng.below(100);
        let tag = format!("h{host}.{generation}");
        let outcome =
            tokio::time::timeout(STEP_LIMIT, step(addr, &mut main, (id, &tag), kind, &counts))
                .await
                .unwrap_or_else(|_| Err(format!("step {kind}: no answer in {STEP_LIMIT:?}")));
        if let Err(why) = outcome {
            if counts.failed.fetch_add(1, Ordering::Relaxed) < 20 {
                eprintln!("a host's call {id} failed: {why}");
            }
            main = main.another(addr).await;
        }
        if rng.below(pace.end_one_in) == 0 {
            if rng.below(5) == 0 {
                counts.dropped.fetch_add(1, Ordering::Relaxed);
            } else {
                match main.delete().await {
                    Ok(204) => {
                        counts.deleted.fetch_add(1, Ordering::Relaxed);
                    }
                    other => {
                        counts.failed.fetch_add(1, Ordering::Relaxed);
                        eprintln!("DELETE: {other:?}");
                    }
                }
            }
            main = Conn::start(addr).await;
            counts.started.fetch_add(1, Ordering::Relaxed);
            generation += 1;
            id = 0;
        }
    }
}

/// What `hintgate log --json` holds: call records by tool, and their
/// outcomes by tool.
fn read_log(state: &std::path::Path) -> BTreeMap<(String, String), u64> {
    let mut child = Command::new(program())
        .args(["log", "--json"])
        .env("HINTGATE_STATE_DIR", state)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut tally = BTreeMap::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let record: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
        let Some(tool) = record["tool"].as_str() else {
            continue;
        };
        let outcome = record["outcome"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| record["outcome"].to_string());
        *tally
            .entry((
                format!("{}/{tool}", record["server"].as_str().unwrap_or("?")),
                outcome,
            ))
            .or_insert(0) += 1;
    }
    assert!(
        child.wait().unwrap().success(),
        "hintgate log --json failed"
    );
    tally
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|arg| arg == "--serve-upstream") {
        serve_upstream();
        return;
    }
    let full = args.iter().any(|arg| arg == "--bench");
    let seconds = std::env::var("HINTGATE_SOAK_SECONDS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(if full { 1800 } else { 5 });
    let (sessions, every, pace) = if full {
        (
            1000,
            Duration::from_secs(10),
            Pace {
                pause_ms: 1500,
                end_one_in: 1000,
            },
        )
    } else {
        (
            40,
            Duration::from_secs(1),
            Pace {
                pause_ms: 100,
                end_one_in: 30,
            },
        )
    };
    let time = Duration::from_secs(seconds);
    let state = std::env::temp_dir().join(format!("hintgate-http-soak-{}", std::process::id()));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (mut server, upstream_addr) = serving_process(&["--serve-upstream"]);
    let url = format!("http://{upstream_addr}/mcp");
    let (mut child, addr, said) = gateway(&url, &state);
    let pid = child.id();
    let counts = Arc::new(Counts::default());
    let samples = runtime.block_on(async {
        let started = Instant::now();
        let until = started + time;
        // The resident set, sampled until the hosts stop.
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = {
            let stop = Arc::clone(&stop);
            tokio::spawn(async move {
                let mut samples = Vec::new();
                let mut tick = tokio::time::interval(every);
                while !stop.load(Ordering::Relaxed) {
                    tick.tick().await;
                    samples.push((started.elapsed(), rss_kib(pid)));
                }
                samples
            })
        };
        // The sessions start one after the other, as hosts that come
        // and go do; then half of them go quiet.
        let mut idle = Vec::with_capacity(sessions / 2);
        let mut busy = Vec::with_capacity(sessions / 2);
        for n in 0..sessions as u64 {
            let conn = Conn::start(addr).await;
            counts.started.fetch_add(1, Ordering::Relaxed);
            if n % 2 == 0 {
                idle.push(conn);
            } else {
                busy.push((n, conn));
            }
        }
        let mut hosts = Vec::with_capacity(busy.len());
        for host in busy {
            let counts = Arc::clone(&counts);
            hosts.push(tokio::spawn(active(addr, host, pace, until, counts)));
        }
        for host in hosts {
            host.await.unwrap();
        }
        // The idle sessions were there until the end.
        samples_end(&stop);
        let samples = sampler.await.unwrap();
        drop(idle);
        samples
    });

    // The gateway stops on SIGTERM, cleanly.
    let term = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let exit = child.wait().unwrap();
    let _ = server.kill();
    let _ = server.wait();
    let said = said.join().unwrap();
    // The gateway's count, at its stop, of the connections its bounds
    // closed (none is said when none was).
    let closed_unauthenticated = said
        .iter()
        .filter_map(|line| line.split("connections since the gateway started: ").nth(1))
        .flat_map(|totals| totals.split("; "))
        .find_map(|total| {
            total.strip_suffix(" closed to make room for a newer one (not authenticated)")
        })
        .map_or(0, |n| n.trim().parse::<u64>().unwrap());

    let counts = &*counts;
    let get = |n: &AtomicU64| n.load(Ordering::Relaxed);
    println!(
        "{sessions} HTTP host sessions (half idle) for {seconds} s on loopback; RSS every {} s (KiB):",
        every.as_secs()
    );
    let series: Vec<String> = samples
        .iter()
        .map(|(at, kib)| format!("{}:{kib}", at.as_secs()))
        .collect();
    println!("{}", series.join(" "));
    // Warm-up is a third of the run: what a session keeps for resuming its
    // event streams (up to 256 events) fills at the pace of those streams'
    // events, about 0.8 a second per stepping session here, so the
    // histories are full after five or six minutes, not before. (An
    // answer sent as a JSON body is not kept, so it no longer fills them
    // within the first tenth.)
    let warm_until = time / 3;
    let warm_index = samples
        .iter()
        .rposition(|(at, _)| *at <= warm_until)
        .unwrap_or(0);
    let (warm_at, warm) = samples[warm_index];
    let (end_at, end) = *samples.last().unwrap();
    let max_after = samples[warm_index..]
        .iter()
        .map(|(_, kib)| *kib)
        .max()
        .unwrap();
    let minutes = end_at.saturating_sub(warm_at).as_secs_f64() / 60.0;
    let growth = (end as f64 - warm as f64) / minutes.max(1.0 / 60.0);
    println!(
        "RSS at the end of warm-up ({} s): {warm} KiB; max after: {max_after} KiB; at the end ({} s): {end} KiB; growth after warm-up: {growth:.0} KiB/min",
        warm_at.as_secs(),
        end_at.as_secs()
    );
    println!(
        "sessions started {} (ended with DELETE {}, dropped {}); calls answered: echo {}, slow {} (of which resumed with Last-Event-ID {}); cancelled {}; failed steps {}; progress notifications of another host's call delivered to a host {}",
        get(&counts.started),
        get(&counts.deleted),
        get(&counts.dropped),
        get(&counts.echo),
        get(&counts.slow),
        get(&counts.resumed),
        get(&counts.cancelled),
        get(&counts.failed),
        get(&counts.foreign),
    );
    println!("the gateway's exit on SIGTERM: {exit}");
    println!(
        "connections the bound of unauthenticated connections closed to make room: {closed_unauthenticated}"
    );

    let tally = read_log(&state);
    let mut by_tool: BTreeMap<String, u64> = BTreeMap::new();
    for ((tool, outcome), n) in &tally {
        println!("records {tool} {outcome}: {n}");
        *by_tool
            .entry(tool.rsplit('/').next().unwrap().to_owned())
            .or_default() += n;
    }
    let echo = by_tool.get("echo").copied().unwrap_or(0);
    let slow = by_tool.get("slow").copied().unwrap_or(0);
    println!(
        "call records: echo {echo} (answered {}), slow {slow} (answered {} + cancelled {})",
        get(&counts.echo),
        get(&counts.slow),
        get(&counts.cancelled)
    );
    let verify = Command::new(program())
        .args(["log", "verify"])
        .env("HINTGATE_STATE_DIR", &state)
        .output()
        .unwrap();
    println!(
        "hintgate log verify: {} {}",
        verify.status,
        String::from_utf8_lossy(&verify.stdout).trim()
    );
    let _ = std::fs::remove_dir_all(&state);

    assert!(
        exit.success(),
        "the gateway did not exit cleanly on SIGTERM: {exit}"
    );
    assert!(verify.status.success(), "hintgate log verify failed");
    assert_eq!(get(&counts.failed), 0, "steps failed");
    assert_eq!(
        get(&counts.foreign),
        0,
        "a host was sent progress of another host's call"
    );
    assert!(get(&counts.resumed) > 0, "no stream was resumed");
    assert!(get(&counts.cancelled) > 0, "no call was cancelled");
    // Every failed step is an error above; with none, every call a host
    // made was answered or cancelled, and has exactly one record.
    assert_eq!(echo, get(&counts.echo), "echo calls and their records");
    assert_eq!(
        slow,
        get(&counts.slow) + get(&counts.cancelled),
        "slow calls and their records"
    );
    if full {
        let bound = (warm + warm / 10).max(warm + 8 * 1024);
        println!("memory flat: {end} KiB at the end, bound {bound} KiB");
        assert!(end <= bound, "the gateway's memory grew after warm-up");
    }
}

/// Tells the sampler to stop after its next sample.
fn samples_end(stop: &AtomicBool) {
    stop.store(true, Ordering::Relaxed);
}
