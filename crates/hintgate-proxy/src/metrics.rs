//! What the gateway counts for an operator's dashboard, and its rendering in
//! the Prometheus text exposition format (version 0.0.4).
//!
//! The event loop owns the gateway's state; it only increments these
//! counters, which are atomics shared by `Arc` with whoever serves them
//! (`hintgate run --metrics`). Every series is registered up front: one set
//! per configured server (names come only from the configuration, in its
//! order), so a call finds its counter by index, with no lock and no
//! allocation. The label sets are bounded: servers by the configuration,
//! verdicts, reason codes, ask channels and endings by the code. A tool name
//! is never a label.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hintgate_policy::config::ValidConfig;
use hintgate_policy::decide::{Decision, Verdict};
use hintgate_policy::reason::ReasonCode;

/// The content type of the exposition this renders.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The verdicts, as labels, in [`verdict_index`] order.
const VERDICTS: [&str; 3] = ["allow", "ask", "deny"];

/// Reasons per verdict: every code, and `none` for a decision with none.
const REASONS: usize = ReasonCode::ALL.len() + 1;

/// Upper bounds (seconds) of the upstream latency histogram.
const UPSTREAM_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Upper bounds (seconds) of the time a person takes to answer.
const PERSON_BUCKETS: &[f64] = &[
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];

/// Upper bounds (seconds) of the audit store's commit latency.
const COMMIT_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// How a person was asked about a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AskChannel {
    /// A legacy host's `elicitation/create`.
    Elicitation,
    /// A 2026-07-28 host's input-required result and its retry.
    InputRequired,
    /// The store's approval queue (`hintgate approvals`).
    Queue,
}

impl AskChannel {
    const ALL: [Self; 3] = [Self::Elicitation, Self::InputRequired, Self::Queue];

    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Elicitation => "elicitation",
            Self::InputRequired => "input_required",
            Self::Queue => "queue",
        }
    }
}

/// How a question to a person ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AskEnding {
    /// The person approved the call.
    Approved,
    /// The person declined, dismissed or denied it.
    Declined,
    /// Nobody answered within `ask_timeout_s`.
    TimedOut,
    /// The question could not be asked or answered (the host answered with
    /// an error, went away, or the gateway stopped).
    Failed,
    /// The person edited the call's arguments (the approval queue): the
    /// edited call is asked about anew.
    Edited,
}

impl AskEnding {
    const ALL: [Self; 5] = [
        Self::Approved,
        Self::Declined,
        Self::TimedOut,
        Self::Failed,
        Self::Edited,
    ];

    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Approved => "approved",
            Self::Declined => "declined",
            Self::TimedOut => "timed_out",
            Self::Failed => "failed",
            Self::Edited => "edited",
        }
    }
}

/// A histogram with fixed buckets: counts per bucket (not cumulative; the
/// rendering adds them up), the count and the sum in nanoseconds.
#[derive(Debug)]
struct Histogram {
    bounds: &'static [f64],
    /// One more than the bounds: the last is `+Inf`.
    buckets: Box<[AtomicU64]>,
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_nanos: AtomicU64::new(0),
        }
    }

    fn observe(&self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        let at = self
            .bounds
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(self.bounds.len());
        if let Some(bucket) = self.buckets.get(at) {
            bucket.fetch_add(1, Ordering::Relaxed);
        }
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// The series of one histogram with the labels `labels` (`a="b",` with
    /// its trailing comma, or empty).
    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0u64;
        for (idx, bucket) in self.buckets.iter().enumerate() {
            cumulative = cumulative.saturating_add(bucket.load(Ordering::Relaxed));
            let le = self
                .bounds
                .get(idx)
                .map_or_else(|| "+Inf".to_owned(), |bound| bound.to_string());
            let _ = writeln!(out, "{name}_bucket{{{labels}le=\"{le}\"}} {cumulative}");
        }
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{}}}", labels.trim_end_matches(','))
        };
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum{braces} {sum}");
        // The count is the last bucket's: the two cannot disagree on a
        // scrape that raced an observation.
        let _ = writeln!(out, "{name}_count{braces} {cumulative}");
    }
}

/// One configured server's series.
#[derive(Debug)]
struct ServerMetrics {
    /// Its configured name, as a label value (escaped once).
    label: String,
    /// Calls by verdict and leading reason: `verdict * REASONS + reason`.
    calls: Box<[AtomicU64]>,
    upstream_latency: Histogram,
    upstream_errors: AtomicU64,
    sandbox_starts: AtomicU64,
    sandbox_failures: AtomicU64,
}

/// The gateway's counters, gauges and histograms.
#[derive(Debug)]
pub struct Metrics {
    servers: Vec<ServerMetrics>,
    /// Asks by channel and ending: `channel * endings + ending`.
    asks: Box<[AtomicU64]>,
    person_wait: Histogram,
    commit: Histogram,
    sessions: AtomicU64,
    waiting_server: AtomicU64,
    waiting_person: AtomicU64,
    dropped_notifications: AtomicU64,
}

/// The index of a verdict in [`VERDICTS`].
const fn verdict_index(verdict: Verdict) -> usize {
    match verdict {
        Verdict::Allow => 0,
        Verdict::Ask => 1,
        Verdict::Deny => 2,
    }
}

/// A label value escaped as the exposition format wants it.
fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for ch in value.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            _ => out.push(ch),
        }
    }
    out
}

impl Metrics {
    /// Every series of a configuration's servers, in its order (the order
    /// the gateway numbers its servers), at zero.
    pub fn for_config(config: &ValidConfig) -> Self {
        Self::for_servers(config.servers.keys().map(String::as_str))
    }

    /// Every series of these servers, in this order, at zero.
    pub fn for_servers<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        let servers = names
            .into_iter()
            .map(|name| ServerMetrics {
                label: escape_label(name),
                calls: (0..VERDICTS.len() * REASONS)
                    .map(|_| AtomicU64::new(0))
                    .collect(),
                upstream_latency: Histogram::new(UPSTREAM_BUCKETS),
                upstream_errors: AtomicU64::new(0),
                sandbox_starts: AtomicU64::new(0),
                sandbox_failures: AtomicU64::new(0),
            })
            .collect();
        Self {
            servers,
            asks: (0..AskChannel::ALL.len() * AskEnding::ALL.len())
                .map(|_| AtomicU64::new(0))
                .collect(),
            person_wait: Histogram::new(PERSON_BUCKETS),
            commit: Histogram::new(COMMIT_BUCKETS),
            sessions: AtomicU64::new(0),
            waiting_server: AtomicU64::new(0),
            waiting_person: AtomicU64::new(0),
            dropped_notifications: AtomicU64::new(0),
        }
    }

    /// A decision on a call to the `server`th configured server, counted
    /// under its verdict and its leading reason.
    pub fn decided(&self, server: usize, decision: &Decision) {
        let Some(metrics) = self.servers.get(server) else {
            return;
        };
        let reason = decision
            .codes()
            .next()
            .and_then(|code| ReasonCode::ALL.iter().position(|known| *known == code))
            .unwrap_or(REASONS - 1);
        let at = verdict_index(decision.verdict) * REASONS + reason;
        if let Some(counter) = metrics.calls.get(at) {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A question to a person ended; `waited` is how long the person had
    /// it, when known.
    pub fn asked(&self, channel: AskChannel, ending: AskEnding, waited: Option<Duration>) {
        let at = channel as usize * AskEnding::ALL.len() + ending as usize;
        if let Some(counter) = self.asks.get(at) {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(waited) = waited {
            self.person_wait.observe(waited);
        }
    }

    /// A call the `server`th configured server answered (or failed) after
    /// `elapsed`; `failed` when it failed or answered with a protocol error.
    pub fn upstream(&self, server: usize, elapsed: Duration, failed: bool) {
        let Some(metrics) = self.servers.get(server) else {
            return;
        };
        metrics.upstream_latency.observe(elapsed);
        if failed {
            metrics.upstream_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The `server`th configured server, which has a sandbox configured,
    /// started confined (`true`), or failed to start or started unconfined
    /// (`false`).
    pub fn sandbox(&self, server: usize, started: bool) {
        let Some(metrics) = self.servers.get(server) else {
            return;
        };
        let counter = if started {
            &metrics.sandbox_starts
        } else {
            &metrics.sandbox_failures
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A commit of the audit store took `elapsed`.
    pub fn committed(&self, elapsed: Duration) {
        self.commit.observe(elapsed);
    }

    /// A notification to a host was dropped (the host was not reading).
    pub fn dropped_notification(&self) {
        self.dropped_notifications.fetch_add(1, Ordering::Relaxed);
    }

    /// The open host sessions and the calls that wait, for a server to be
    /// ready and for a person, as of the end of a turn.
    pub fn gauges(&self, sessions: usize, waiting_server: usize, waiting_person: usize) {
        let set = |gauge: &AtomicU64, value: usize| {
            gauge.store(u64::try_from(value).unwrap_or(u64::MAX), Ordering::Relaxed);
        };
        set(&self.sessions, sessions);
        set(&self.waiting_server, waiting_server);
        set(&self.waiting_person, waiting_person);
    }

    /// Every series, in the Prometheus text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096 + self.servers.len() * 2048);
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);

        header(
            &mut out,
            "hintgate_calls_total",
            "counter",
            "Tool calls decided, by server, verdict and leading reason code.",
        );
        for server in &self.servers {
            for (at, counter) in server.calls.iter().enumerate() {
                let count = load(counter);
                // Every series is kept, but only the ones that happened are
                // shown: 108 zeros per server would bury the others.
                if count == 0 {
                    continue;
                }
                let verdict = VERDICTS.get(at / REASONS).copied().unwrap_or("");
                let reason = ReasonCode::ALL
                    .get(at % REASONS)
                    .map_or("none", |code| code.as_str());
                let _ = writeln!(
                    out,
                    "hintgate_calls_total{{server=\"{}\",verdict=\"{verdict}\",reason=\"{reason}\"}} {count}",
                    server.label
                );
            }
        }

        header(
            &mut out,
            "hintgate_asks_total",
            "counter",
            "Questions to a person about a call, by channel and how they ended.",
        );
        for channel in AskChannel::ALL {
            for ending in AskEnding::ALL {
                let at = channel as usize * AskEnding::ALL.len() + ending as usize;
                let count = self.asks.get(at).map_or(0, load);
                let _ = writeln!(
                    out,
                    "hintgate_asks_total{{channel=\"{}\",outcome=\"{}\"}} {count}",
                    channel.as_str(),
                    ending.as_str()
                );
            }
        }

        header(
            &mut out,
            "hintgate_person_wait_seconds",
            "histogram",
            "How long a call waited for a person's answer (elicitation and approval queue).",
        );
        self.person_wait
            .render(&mut out, "hintgate_person_wait_seconds", "");

        header(
            &mut out,
            "hintgate_upstream_latency_seconds",
            "histogram",
            "From a call's send to its server until its answer or failure.",
        );
        for server in &self.servers {
            let labels = format!("server=\"{}\",", server.label);
            server
                .upstream_latency
                .render(&mut out, "hintgate_upstream_latency_seconds", &labels);
        }

        let per_server = [
            (
                "hintgate_upstream_errors_total",
                "Calls whose server failed or answered with a protocol error.",
                0,
            ),
            (
                "hintgate_sandbox_starts_total",
                "Starts of a server in its configured sandbox.",
                1,
            ),
            (
                "hintgate_sandbox_failures_total",
                "Starts of a server with a sandbox configured that failed or ran unconfined.",
                2,
            ),
        ];
        for (name, help, which) in per_server {
            header(&mut out, name, "counter", help);
            for server in &self.servers {
                let counter = match which {
                    0 => &server.upstream_errors,
                    1 => &server.sandbox_starts,
                    _ => &server.sandbox_failures,
                };
                let _ = writeln!(
                    out,
                    "{name}{{server=\"{}\"}} {}",
                    server.label,
                    load(counter)
                );
            }
        }

        header(
            &mut out,
            "hintgate_audit_commit_seconds",
            "histogram",
            "How long a commit of the audit store took.",
        );
        self.commit
            .render(&mut out, "hintgate_audit_commit_seconds", "");

        header(
            &mut out,
            "hintgate_sessions",
            "gauge",
            "Open host sessions.",
        );
        let _ = writeln!(out, "hintgate_sessions {}", load(&self.sessions));
        header(
            &mut out,
            "hintgate_waiting_calls",
            "gauge",
            "Calls held, waiting for their server to be ready or for a person.",
        );
        let _ = writeln!(
            out,
            "hintgate_waiting_calls{{for=\"server\"}} {}",
            load(&self.waiting_server)
        );
        let _ = writeln!(
            out,
            "hintgate_waiting_calls{{for=\"person\"}} {}",
            load(&self.waiting_person)
        );
        header(
            &mut out,
            "hintgate_dropped_notifications_total",
            "counter",
            "Notifications to a host dropped because the host was not reading.",
        );
        let _ = writeln!(
            out,
            "hintgate_dropped_notifications_total {}",
            load(&self.dropped_notifications)
        );
        out
    }
}

/// A metric's `# HELP` and `# TYPE` lines.
fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_is_cumulative_and_its_count_is_its_last_bucket() {
        let metrics = Metrics::for_servers(["fs"]);
        metrics.upstream(0, Duration::from_millis(3), false);
        metrics.upstream(0, Duration::from_millis(70), true);
        metrics.upstream(0, Duration::from_secs(120), true);
        let text = metrics.render();
        assert!(
            text.contains(
                "hintgate_upstream_latency_seconds_bucket{server=\"fs\",le=\"0.005\"} 1\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("hintgate_upstream_latency_seconds_bucket{server=\"fs\",le=\"0.1\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "hintgate_upstream_latency_seconds_bucket{server=\"fs\",le=\"+Inf\"} 3\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("hintgate_upstream_latency_seconds_count{server=\"fs\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("hintgate_upstream_errors_total{server=\"fs\"} 2\n"),
            "{text}"
        );
    }

    #[test]
    fn a_server_name_is_escaped_and_an_unknown_index_counts_nothing() {
        let metrics = Metrics::for_servers(["a\"b\\c\nd"]);
        metrics.sandbox(0, true);
        metrics.sandbox(7, false);
        let text = metrics.render();
        assert!(
            text.contains("hintgate_sandbox_starts_total{server=\"a\\\"b\\\\c\\nd\"} 1\n"),
            "{text}"
        );
        assert!(!text.contains("hintgate_sandbox_failures_total{server=\"a\\\"b\\\\c\\nd\"} 1"));
    }
}
