//! Traces of tool calls, exported over OTLP (HTTP, JSON encoding).
//!
//! Off unless the configuration names a collector (`[telemetry]
//! otlp_endpoint`). Each `tools/call` that reaches a decision becomes one
//! trace of spans: the call itself, and within it the decision (`decide`),
//! the wait for a person (`ask`), the wait for its audit record to be
//! durable (`audit`) and the server's round trip (`forward`). A host that
//! sends a W3C trace context in the call's `_meta` (`traceparent`, as MCP
//! hosts do) gets the call's spans in its own trace, and the server is sent
//! the context of the `forward` span, so its spans join the same trace.
//!
//! A span carries names the configuration and the server gave (server, tool,
//! verdict, reason codes, outcome), never an argument's value, a result or a
//! person's answer.
//!
//! Export never holds a call: spans go to a bounded queue that a task of
//! their own drains, in batches, to `OTLP_ENDPOINT/v1/traces`; when the
//! queue is full or the collector is down, spans are dropped and counted,
//! and the loss is logged at most once a minute.
//!
//! The exporter is written here rather than taken from the OpenTelemetry
//! SDK: the OTLP/HTTP JSON encoding of a span is a small, stable document,
//! and the SDK's exporter crates would add protobuf code generation and a
//! second HTTP stack to the build for it. The HTTP client is the one the
//! gateway already has for Streamable HTTP servers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tokio::sync::mpsc;

/// The most spans waiting for export; past it, new spans are dropped.
const QUEUE: usize = 4096;
/// The most spans in one export request.
const BATCH: usize = 512;
/// How long a span waits for more to fill its batch.
const LINGER: Duration = Duration::from_millis(500);
/// How long one export request may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a loss of spans is logged at most.
const LOSS_LOG_EVERY: Duration = Duration::from_secs(60);

/// A W3C trace context: the trace, and the span a new span is a child of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceContext {
    /// The trace's id.
    pub trace_id: [u8; 16],
    /// The parent span's id.
    pub span_id: [u8; 8],
    /// Whether the caller records this trace (its `sampled` flag).
    pub sampled: bool,
}

impl TraceContext {
    /// Reads a `traceparent` header value (version `00`, or a later version
    /// read as `00` as the recommendation says); `None` for anything else,
    /// and for the ids that are all zeros, which are invalid.
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.trim().split('-');
        let version = parts.next()?;
        let trace = parts.next()?;
        let span = parts.next()?;
        let flags = parts.next()?;
        let rest = parts.next();
        if version.len() != 2 || version.eq_ignore_ascii_case("ff") {
            return None;
        }
        // Version 00 has exactly four fields; a later one may add more.
        if version == "00" && rest.is_some() {
            return None;
        }
        let lower_hex = |part: &str| {
            part.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        if !lower_hex(version) || !lower_hex(trace) || !lower_hex(span) || !lower_hex(flags) {
            return None;
        }
        let mut trace_id = [0_u8; 16];
        let mut span_id = [0_u8; 8];
        hex::decode_to_slice(trace, &mut trace_id).ok()?;
        hex::decode_to_slice(span, &mut span_id).ok()?;
        let mut flag = [0_u8; 1];
        hex::decode_to_slice(flags, &mut flag).ok()?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(Self {
            trace_id,
            span_id,
            sampled: flag[0] & 1 == 1,
        })
    }

    /// The `traceparent` value that names `span` of this trace as the
    /// parent.
    #[must_use]
    pub fn traceparent_for(&self, span: [u8; 8]) -> String {
        format!(
            "00-{}-{}-{}",
            hex::encode(self.trace_id),
            hex::encode(span),
            if self.sampled { "01" } else { "00" }
        )
    }
}

/// New random ids: a trace's, or a span's.
fn random<const N: usize>() -> [u8; N] {
    let mut bytes = [0_u8; N];
    // Ids need to be unique, not secret; a failure of the system's source
    // leaves the time's nanoseconds, still unlikely to collide.
    if getrandom::fill(&mut bytes).is_err() {
        let now = nanos(SystemTime::now()).to_le_bytes();
        for (byte, source) in bytes.iter_mut().zip(now.iter().cycle()) {
            *byte = *source;
        }
    }
    if bytes.iter().all(|byte| *byte == 0)
        && let Some(last) = bytes.last_mut()
    {
        *last = 1;
    }
    bytes
}

/// A new span id.
#[must_use]
pub fn new_span_id() -> [u8; 8] {
    random()
}

/// A new trace, recorded.
#[must_use]
pub fn new_trace() -> TraceContext {
    TraceContext {
        trace_id: random(),
        span_id: random(),
        sampled: true,
    }
}

fn nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |since| {
        u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
    })
}

/// One finished span.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// Its trace.
    pub trace_id: [u8; 16],
    /// Its id.
    pub span_id: [u8; 8],
    /// The span it is part of, if any.
    pub parent: Option<[u8; 8]>,
    /// What it is (`tools/call`, `decide`, `ask`, `audit`, `forward`).
    pub name: &'static str,
    /// OTLP's span kind: 1 internal, 2 server, 3 client.
    pub kind: u8,
    /// When it began.
    pub start: SystemTime,
    /// When it ended.
    pub end: SystemTime,
    /// Its attributes: names from the configuration and the server, never
    /// values of arguments or results.
    pub attributes: Vec<(&'static str, String)>,
    /// Why it failed, when it did.
    pub error: Option<String>,
}

impl Span {
    /// The span as OTLP's JSON encoding writes it (ids in hexadecimal,
    /// times as strings of nanoseconds).
    fn to_otlp(&self) -> Value {
        let attributes: Vec<Value> = self
            .attributes
            .iter()
            .map(|(key, value)| json!({"key": key, "value": {"stringValue": value}}))
            .collect();
        let mut span = json!({
            "traceId": hex::encode(self.trace_id),
            "spanId": hex::encode(self.span_id),
            "name": self.name,
            "kind": self.kind,
            "startTimeUnixNano": nanos(self.start).to_string(),
            "endTimeUnixNano": nanos(self.end).to_string(),
            "attributes": attributes,
            "status": match &self.error {
                Some(message) => json!({"code": 2, "message": message}),
                None => json!({"code": 0}),
            },
        });
        if let (Some(parent), Some(object)) = (self.parent, span.as_object_mut()) {
            object.insert("parentSpanId".to_owned(), Value::from(hex::encode(parent)));
        }
        span
    }
}

/// The body of one export request: `spans`, from this service.
#[must_use]
pub fn export_body(service: &str, spans: &[Span]) -> Value {
    json!({
        "resourceSpans": [{
            "resource": {"attributes": [
                {"key": "service.name", "value": {"stringValue": service}},
                {"key": "service.version", "value": {"stringValue": env!("CARGO_PKG_VERSION")}},
            ]},
            "scopeSpans": [{
                "scope": {"name": "hintgate", "version": env!("CARGO_PKG_VERSION")},
                "spans": spans.iter().map(Span::to_otlp).collect::<Vec<_>>(),
            }],
        }],
    })
}

/// Where spans go: a bounded queue to the exporter's task. Cloning it is
/// cheap; the task ends once every handle is gone and the queue is drained.
#[derive(Debug, Clone)]
pub struct Tracer {
    queue: mpsc::Sender<Span>,
    dropped: Arc<AtomicU64>,
    exporter: Arc<std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>>,
}

impl Tracer {
    /// Starts the exporter's task on the current tokio runtime, sending to
    /// `endpoint` (the collector's base URL; spans go to `/v1/traces`
    /// under it) as `service`.
    ///
    /// # Errors
    ///
    /// The HTTP client cannot be built.
    pub fn start(endpoint: &str, service: &str) -> Result<Self, String> {
        let url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
        crate::upstream_http::install_tls_provider();
        let client = reqwest::Client::builder()
            .timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|err| format!("cannot build the OTLP client: {err}"))?;
        let (queue, spans) = mpsc::channel(QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        let exporter = tokio::spawn(export(
            spans,
            client,
            url,
            service.to_owned(),
            Arc::clone(&dropped),
        ));
        Ok(Self {
            queue,
            dropped,
            exporter: Arc::new(std::sync::Mutex::new(Some(exporter))),
        })
    }

    /// The gateway stops: the spans still queued are exported, waiting at
    /// most `patience` for the collector.
    pub async fn finish(self, patience: Duration) {
        let Self {
            queue, exporter, ..
        } = self;
        drop(queue);
        let handle = exporter.lock().ok().and_then(|mut handle| handle.take());
        if let Some(handle) = handle {
            let _ = tokio::time::timeout(patience, handle).await;
        }
    }

    /// Queues a finished span for export; never waits. A span that finds
    /// the queue full is dropped, and counted.
    pub fn record(&self, span: Span) {
        if self.queue.try_send(span).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// How many spans were dropped so far (a full queue, or a collector
    /// that refused or could not be reached).
    #[must_use]
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// The exporter's task: batches of spans to the collector.
async fn export(
    mut spans: mpsc::Receiver<Span>,
    client: reqwest::Client,
    url: String,
    service: String,
    dropped: Arc<AtomicU64>,
) {
    let mut batch = Vec::with_capacity(BATCH);
    let mut last_loss_log: Option<tokio::time::Instant> = None;
    let mut reported = 0_u64;
    loop {
        // The first span of a batch is waited for; the rest for a while.
        match spans.recv().await {
            Some(span) => batch.push(span),
            None => return,
        }
        let deadline = tokio::time::Instant::now() + LINGER;
        let mut closed = false;
        while batch.len() < BATCH {
            match tokio::time::timeout_at(deadline, spans.recv()).await {
                Ok(Some(span)) => batch.push(span),
                Ok(None) => {
                    closed = true;
                    break;
                }
                Err(_) => break,
            }
        }
        let body = export_body(&service, &batch).to_string();
        let sent = client
            .post(&url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await;
        let failure = match sent {
            Ok(response) if response.status().is_success() => None,
            Ok(response) => Some(format!("the collector answered {}", response.status())),
            Err(err) => Some(format!("the collector could not be reached: {err}")),
        };
        if let Some(why) = failure {
            dropped.fetch_add(batch.len() as u64, Ordering::Relaxed);
            tracing::debug!("{} spans not exported: {why}", batch.len());
        }
        batch.clear();
        let lost = dropped.load(Ordering::Relaxed);
        let due = last_loss_log.is_none_or(|at| at.elapsed() >= LOSS_LOG_EVERY);
        if lost > reported && due {
            tracing::warn!(
                "{} spans were not exported to {url} (the queue was full, or the collector refused or could not be reached)",
                lost - reported
            );
            reported = lost;
            last_loss_log = Some(tokio::time::Instant::now());
        }
        if closed {
            return;
        }
    }
}

/// What the gateway notes of one call for its trace, as it goes: the trace
/// it joins, and when each step began and ended.
#[derive(Debug, Clone)]
pub struct CallTrace {
    /// The trace, and the span the call is a child of (the host's, when it
    /// sent one; else the call's own root).
    pub context: TraceContext,
    /// Whether the host sent the context (else the call's span is a root).
    pub from_host: bool,
    /// The call's own span.
    pub call_span: [u8; 8],
    /// When the gateway read the call.
    pub received: SystemTime,
    /// When it was decided, once it was.
    pub decided: Option<SystemTime>,
    /// When a person was first asked (their wait ends when the call is
    /// ready to go, or when it ends).
    pub asked: Option<SystemTime>,
    /// When the call was ready to go, and waited for its audit record.
    pub ready: Option<SystemTime>,
    /// The forward span, once the call was sent: its id and when.
    pub sent: Option<([u8; 8], SystemTime)>,
}

impl CallTrace {
    /// A call read now, in the host's trace when `traceparent` names one.
    #[must_use]
    pub fn begin(traceparent: Option<&str>) -> Self {
        let (context, from_host) = match traceparent.and_then(TraceContext::parse) {
            Some(context) => (context, true),
            None => (new_trace(), false),
        };
        Self {
            context,
            from_host,
            call_span: new_span_id(),
            received: SystemTime::now(),
            decided: None,
            asked: None,
            ready: None,
            sent: None,
        }
    }

    /// The `traceparent` the server is sent: the forward span's, made now.
    pub fn forwarding(&mut self) -> String {
        let span = new_span_id();
        self.sent = Some((span, SystemTime::now()));
        self.context.traceparent_for(span)
    }

    /// The call's spans, ended now: the call, and each step it took.
    /// `attributes` go on the call's span; `error` is why it failed.
    #[must_use]
    pub fn spans(
        &self,
        attributes: Vec<(&'static str, String)>,
        error: Option<String>,
    ) -> Vec<Span> {
        let end = SystemTime::now();
        let parent = self.from_host.then_some(self.context.span_id);
        let child = |name: &'static str, kind: u8, start: SystemTime, stop: SystemTime| Span {
            trace_id: self.context.trace_id,
            span_id: new_span_id(),
            parent: Some(self.call_span),
            name,
            kind,
            start,
            end: stop.max(start),
            attributes: Vec::new(),
            error: None,
        };
        let mut spans = vec![Span {
            trace_id: self.context.trace_id,
            span_id: self.call_span,
            parent,
            name: "tools/call",
            kind: 2,
            start: self.received,
            end,
            attributes,
            error: error.clone(),
        }];
        if let Some(decided) = self.decided {
            spans.push(child("decide", 1, self.received, decided));
        }
        if let Some(asked) = self.asked {
            spans.push(child("ask", 1, asked, self.ready.unwrap_or(end)));
        }
        let sent_at = self.sent.map(|(_, at)| at);
        if let Some(ready) = self.ready {
            spans.push(child("audit", 1, ready, sent_at.unwrap_or(end)));
        }
        if let Some((id, at)) = self.sent {
            let mut forward = child("forward", 3, at, end);
            forward.span_id = id;
            forward.error = error;
            spans.push(forward);
        }
        spans
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_is_read_as_the_w3c_recommendation_says() {
        let context =
            TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(
            hex::encode(context.trace_id),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(hex::encode(context.span_id), "00f067aa0ba902b7");
        assert!(context.sampled);
        assert_eq!(
            context.traceparent_for([1, 2, 3, 4, 5, 6, 7, 8]),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0102030405060708-01"
        );
        // A later version may add fields, read as version 00.
        assert!(
            TraceContext::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-extra")
                .is_some_and(|context| !context.sampled)
        );
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
        ] {
            assert_eq!(TraceContext::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_calls_spans_nest_under_the_hosts_and_the_server_gets_the_forward_span() {
        let mut trace = CallTrace::begin(Some(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ));
        trace.decided = Some(SystemTime::now());
        trace.ready = Some(SystemTime::now());
        let sent = trace.forwarding();
        let spans = trace.spans(vec![("mcp.tool.name", "echo".to_owned())], None);
        let names: Vec<&str> = spans.iter().map(|span| span.name).collect();
        assert_eq!(names, ["tools/call", "decide", "audit", "forward"]);
        let call = &spans[0];
        assert_eq!(call.parent, Some(trace.context.span_id));
        assert!(
            spans[1..]
                .iter()
                .all(|span| span.parent == Some(call.span_id) && span.trace_id == call.trace_id)
        );
        let forward = &spans[3];
        assert_eq!(sent, trace.context.traceparent_for(forward.span_id));
        let body = export_body("hintgate", &spans);
        let first = &body["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
        assert_eq!(first["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(first["parentSpanId"], "00f067aa0ba902b7");
        assert_eq!(first["kind"], 2);
        // Without the host's context the call is the trace's root.
        let own = CallTrace::begin(Some("not a context"));
        assert!(!own.from_host);
        assert_eq!(own.spans(Vec::new(), None)[0].parent, None);
    }
}
