//! The gateway: one event loop between host sessions and upstream servers.
//!
//! Every `tools/call` takes one path, `pipeline`: resolve → definition
//! ready → decide → validate → (ask) → audit → forward. Read that file first.
//!
//! The state is split into parts, each the only owner of what it holds:
//!
//! | part | owns |
//! |---|---|
//! | `session` | a host session: its era and capabilities, its taint, the tools it approved for the session, the lists it was told changed, its bounded queue of lines |
//! | `upstreams` | the servers: links, phases, eras, request ids, the start-up handshake |
//! | `inflight` | every request the gateway waits on, each with a deadline |
//! | `catalog` | each server's tools by name, their pins, the standing approvals, the host's view |
//! | `journal` | the audit records of the current turn |
//! | `ask` | calls held while a person is asked, and the approval queue |
//! | `records` | nothing: the view a call's records are written through |
//! | `routing` | everything that is not a tool call, and lists merged across servers |
//! | `subscriptions` | the hosts' resource subscriptions, by server and URI, with the sessions that hold each |
//! | `watch` | the thread that watches the store (approval-queue answers, standing approvals changed elsewhere) |
//! | `hooks` | the decision hooks' processes, and the calls that wait for their answers |
//! | `keys` | what the gateway knows of a call's idempotency key (the store holds the records) |
//! | `lookup` | nothing: a read-only view of the parts, for the steps that only look things up (a call's prompt, preview and record details, the facts it is decided on, a server's questions marked as its own) |
//!
//! A step that needs few parts is a plain function over them (or a method
//! of the part it belongs to) that puts what it sends into the turn's
//! `outbox`. The larger parts are views lent for one step (`stages::Stages`,
//! `ask::Desk`, `servers::Servers`, `records::Records`, `lookup::Lookup`,
//! `keys::Keys`); a step of the asking or the servers' part leaves what it
//! cannot do itself (run a call again, end it, wake what waits) as
//! `outbox::Then`, applied in order as soon as the step returns. The
//! `impl Gateway` blocks are the glue that lends the views and runs the
//! steps.
//!
//! `call` holds the call context and `CallEnd`, how a call ends at
//! the gateway (a refusal, or a replay, a question, a withdrawal), with the
//! one place where it becomes an answer; `steps` the pipeline's decisions
//! as pure functions over the facts read once per call; `retry` what
//! happens to a call that failed or was not sent (design §4.5), as one
//! pure function; `modern` the 2026-07-28 era; `relay` a server's own
//! questions, marked as the server's, and questions across eras.
//!
//! **Turns.** The loop takes every event that has arrived (host lines,
//! server lines, answers from the store watcher), handles them, and ends the
//! turn (`Gateway::end_turn`): the turn's call records are committed in
//! one transaction, and only then is anything the turn produced sent, in
//! the order it was produced. So a call's record is durable before its
//! server sees it, and a turn with sixteen calls commits once. Outcome
//! records ride in the next commit (at most `journal::OUTCOME_FLUSH`
//! later), so an answer does not wait for its own.
//!
//! Ids: requests the gateway sends a server get numeric ids from a counter
//! per server; requests it sends a host get string ids `"hintgate-N"`. An
//! answer is routed back by those ids, and the original id is spliced back
//! into the original line.

pub(crate) mod alarm;
pub(crate) mod ask;
pub(crate) mod call;
pub(crate) mod catalog;
pub(crate) mod dry_run;
pub(crate) mod edit;
pub(crate) mod era;
#[cfg(test)]
pub(crate) mod fixture;
pub(crate) mod held;
pub(crate) mod hooks;
pub(crate) mod inflight;
pub(crate) mod journal;
pub(crate) mod keys;
pub(crate) mod lookup;
pub(crate) mod modern;
pub(crate) mod outbox;
pub(crate) mod parked;
pub(crate) mod pipeline;
pub(crate) mod previewers;
pub(crate) mod previews;
pub(crate) mod records;
pub(crate) mod relay;
pub(crate) mod request;
pub(crate) mod retry;
pub(crate) mod routing;
pub(crate) mod servers;
pub(crate) mod session;
pub(crate) mod stages;
pub(crate) mod steps;
pub(crate) mod subscriptions;
pub(crate) mod upstreams;
pub(crate) mod watch;

use std::sync::Arc;
use std::time::Duration;

use hintgate_policy::config::ServerConfig;
use hintgate_policy::decide::Policy;
use hintgate_store::Store;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::sync::mpsc;
use tokio::time::Instant;

use self::call::{CallContext, CallEnd, Outcome};
use self::inflight::{Expired, HostPurpose, InFlight, UpPurpose};
use self::outbox::{Outbox, Outgoing};
use self::request::{HostRequest, Method, ServerIdx, SessionId};
use self::session::HostSession;
use self::upstreams::Upstreams;
use crate::conn::{LineRead, QueueGauge, read_line, write_counted_lines};
use crate::event::{Event, EventSender, HostEvent, UpstreamEvent};
use crate::frame::{self, HostLine, Kind, Message, Reading, ServerLine};
use crate::upstream::{Connector, SystemConnector};

pub use crate::versions::LEGACY_VERSIONS;

/// The most events one turn handles before it commits and sends, so that a
/// flood cannot hold everything back: as many as the event channel holds.
const TURN_LIMIT: usize = crate::event::CAPACITY;

/// The most pages of one server's list the gateway follows (a tool list,
/// or its part of a merged list): a server whose list names a next page
/// after that many has its list fail, and only its entries are left out.
/// The same number of pages as `hintgate lint` reads (`probe`).
pub(crate) const MAX_LIST_PAGES: usize = 1000;

/// The most of one server's own requests (elicitation, sampling, roots)
/// that wait for a host at once: each waits up to `ask_timeout_s`, so a
/// server that floods requests would otherwise fill the in-flight table.
/// Past it, the server's request is answered with an error at once.
pub(crate) const MAX_RELAYED: usize = 64;

/// The most questions one input-required result of a 2026-07-28 server
/// may ask a legacy host at once (each is a request to the host that
/// waits up to `ask_timeout_s`); a result that asks more fails its call.
pub(crate) const MAX_QUESTIONS: usize = 16;

/// The most times one call of a legacy host is sent to a 2026-07-28 server
/// (its first send, its continuations with the host's answers, a retry):
/// a server that answers every continuation with another input-required
/// result, and a host that answers every question, would otherwise send
/// and record the call without end. Past it, the call fails.
pub(crate) const MAX_SENDS: u32 = 16;

/// How tool names are shown to the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// One server; its tool names unchanged.
    Wrap,
    /// Every configured server; tool and prompt names prefixed with the
    /// server's name and the separator (`fs__read_file`).
    Gateway,
}

/// What the gateway runs with: a policy over a configuration whose `${VAR}`
/// references are already expanded, and the mode.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The policy, and through it the configuration.
    pub policy: Policy,
    /// Wrap or gateway mode.
    pub mode: Mode,
    /// Where to report each decision and each answer to a question, for
    /// whoever watches (the demo prints them). Nothing is built for an
    /// observer nobody registered.
    pub observer: Option<mpsc::UnboundedSender<Observed>>,
    /// Where pins, standing approvals, the approval queue and the audit log
    /// outlive the session; `None` keeps pins for the session only and
    /// records nothing.
    pub store: Option<Arc<dyn Store>>,
    /// How servers are reached; `None` is the system's (child processes and
    /// HTTP). Tests pass in-memory pipes.
    pub connector: Option<Arc<dyn Connector>>,
    /// Where to count calls, questions, latencies and queues for a
    /// dashboard ([`crate::metrics`]); made with
    /// [`Metrics::for_config`](crate::metrics::Metrics::for_config) of this
    /// policy's configuration. `None` counts nothing.
    pub metrics: Option<Arc<crate::metrics::Metrics>>,
}

/// Something the gateway decided or was told about a tool call.
#[derive(Debug, Clone)]
pub enum Observed {
    /// The policy's decision on a call.
    Decided {
        /// The server's configured name.
        server: String,
        /// The server's own tool name.
        tool: String,
        /// The decision.
        decision: hintgate_policy::decide::Decision,
    },
    /// A call waits in the approval queue (the host cannot ask a person).
    Queued {
        /// Its number in the queue (`hintgate approvals approve ID`).
        id: u64,
        /// The server's configured name.
        server: String,
        /// The server's own tool name.
        tool: String,
    },
    /// A person answered the question about a call.
    Answered {
        /// The server's configured name.
        server: String,
        /// The server's own tool name.
        tool: String,
        /// The call may run.
        approved: bool,
        /// What was answered, in words.
        answer: String,
    },
    /// The gateway was asked to stop: from here on it sends no new call,
    /// and the calls in flight end on record.
    Stopping,
}

/// Why the gateway stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The configuration has no server to run.
    #[error("the configuration has no server")]
    NoServers,
    /// Wrap mode needs exactly one server.
    #[error("wrap mode runs exactly one server, not {0}")]
    WrapNeedsOne(usize),
    /// The operating system gave no randomness for the sealing key.
    #[error("no randomness for the sealing key: {0}")]
    NoRandomness(String),
    /// The run's audit journal could not be made.
    #[error("the audit journal: {0}")]
    Journal(String),
}

/// The limits the gateway runs with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// How long a request to a server may take.
    pub call_timeout: Duration,
    /// How long a person has to answer.
    pub ask_timeout: Duration,
    /// The largest line accepted.
    pub max_line: usize,
    /// How deeply a message may nest (`max_json_depth`).
    pub max_depth: usize,
}

impl Limits {
    /// How long a request may wait in all for its server to be ready: the
    /// era probe, `initialize` and the tool list, each within its own
    /// deadline. A server whose start or listing never completes (one that
    /// keeps relisting, or always sends another page) cannot hold a
    /// request longer.
    pub fn wait_timeout(&self) -> Duration {
        upstreams::PROBE_TIMEOUT + self.call_timeout * 2
    }
}

/// Something that waits for a server to start or list its tools.
#[derive(Debug)]
pub(crate) enum Waiting {
    /// A host request.
    Request(Box<HostRequest>),
    /// A tool call, with what the pipeline already read of it.
    Call(Box<CallContext>),
}

/// The gateway's state: its parts, and what ties them together.
pub(crate) struct Gateway {
    policy: Policy,
    mode: Mode,
    limits: Limits,
    observer: Observer,
    /// What is counted for a dashboard; the loop only adds to it.
    metrics: Option<Arc<crate::metrics::Metrics>>,
    /// Where each call's trace goes, when `[telemetry] otlp_endpoint` names
    /// a collector ([`crate::telemetry`]).
    tracer: Option<crate::telemetry::Tracer>,
    store: Option<Arc<dyn Store>>,
    connector: Arc<dyn Connector>,
    events: EventSender,
    sealer: crate::seal::Sealer,
    sessions: session::Sessions,
    /// What the servers are told of the host (the first session's
    /// `initialize`).
    declared: era::Declared,
    upstreams: Upstreams,
    inflight: InFlight,
    catalog: catalog::Catalog,
    journal: journal::Journal,
    asks: ask::Asks,
    /// The decision hooks, and the calls that wait for them.
    hooks: hooks::Hooks,
    /// This run's name, which owns the idempotency keys it claims.
    run_name: String,
    routing: routing::Routing,
    /// The hosts' resource subscriptions, by server and URI.
    subscriptions: subscriptions::Subscriptions,
    /// A 2026-07-28 server's questions being asked of a legacy host.
    gathers: relay::Gathers,
    watcher: Option<watch::StoreWatcher>,
    /// Requests and calls waiting for a server to start or list its tools.
    parked: parked::Parked,
    /// What this turn produced, in order.
    outbox: Outbox,
    /// The gateway was asked to stop: the loop ends after this turn.
    stopping: bool,
    /// The shutdown ran to its end: the calls in flight have their endings
    /// on record. Until then, dropping the gateway (a fatal error unwinding
    /// through the loop) records them as `shutdown`.
    finished: bool,
    /// The number of the turn being sent (what a server was sent in this
    /// turn is not held against it as unread).
    turn: u64,
}

/// Where the gateway reports what it did, when someone listens
/// (`Settings::observer`).
pub(crate) struct Observer(Option<mpsc::UnboundedSender<Observed>>);

// === impl Observer ===

impl Observer {
    /// Reports to the observer, building the report only when one listens.
    pub(super) fn observe(&self, make: impl FnOnce() -> Observed) {
        if let Some(observer) = &self.0 {
            let _ = observer.send(make());
        }
    }
}

/// Why a host session ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// The host closed its side: nobody is left to answer.
    HostGone,
    /// The gateway shuts down: the host is still there, and is answered.
    Shutdown,
}

impl Drop for Gateway {
    /// A gateway dropped before its shutdown ran to its end (a fatal error
    /// unwinding through the loop): every call it forwarded or held ends on
    /// record with the outcome `shutdown` (those forwarded in the failed
    /// turn were never sent), and what the journal holds is committed.
    /// Nothing is sent: the loop is gone.
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        // The calls parked for a write made off the loop's thread: never
        // sent; once their write is reported, they end as `shutdown`.
        for (written, calls) in self.journal.reported(true) {
            for (mut cx, place) in calls {
                cx.recorded(
                    written
                        .as_ref()
                        .ok()
                        .and_then(|seqs| seqs.get(place).copied()),
                );
                self.records().record_outcome(&cx, Outcome::Shutdown);
            }
        }
        let (written, _) = self.journal.counts();
        // The calls the failed turn forwarded: their records wait in the
        // turn's batch, and they were never sent. Committed, they end as
        // `shutdown`; if the log fails, they have no record and never ran.
        let unsent: Vec<(Box<CallContext>, usize)> = self
            .outbox
            .take()
            .into_iter()
            .filter_map(|outgoing| match outgoing {
                Outgoing::Call(cx, Some(place)) => Some((cx, place)),
                _ => None,
            })
            .collect();
        if !unsent.is_empty()
            && let Ok(seqs) = self.journal.commit()
        {
            for (mut cx, place) in unsent {
                cx.recorded(seqs.get(place).copied());
                self.records().record_outcome(&cx, Outcome::Shutdown);
            }
        }
        // What each session holds (calls waiting for their server, for a
        // person, in the approval queue) and has in flight ends as it does
        // when the gateway is asked to stop. Nothing is sent: the loop is
        // gone.
        self.end_open_sessions();
        drop(self.outbox.take());
        for idx in 0..self.upstreams.instances() {
            for (_, purpose) in self.inflight.drain_up(idx) {
                if let UpPurpose::Call(cx) = purpose {
                    self.records().record_outcome(&cx, Outcome::Shutdown);
                }
            }
        }
        match self.journal.commit() {
            Ok(_) => {
                let ended = self.journal.counts().0.saturating_sub(written);
                if ended > 0 {
                    tracing::error!(
                        "the gateway stopped on a fatal error; the calls it held or had in flight end on record as `shutdown` ({ended} record(s))"
                    );
                }
            }
            Err(err) => tracing::error!(
                "the gateway stopped on a fatal error, and the audit log could not be written: {err}"
            ),
        }
        self.journal.finish();
    }
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("mode", &self.mode)
            .field("servers", &self.upstreams.len())
            .field("in_flight", &self.inflight.len())
            .finish_non_exhaustive()
    }
}

/// Runs the gateway between a host on `host_in`/`host_out` and the
/// configured servers, until the host closes its side.
///
/// # Errors
///
/// [`RunError`] when the settings cannot run at all; everything that goes
/// wrong once running is answered on the protocol and logged instead.
pub async fn run<R, W>(settings: Settings, host_in: R, host_out: W) -> Result<(), RunError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    run_with_gauge(settings, host_in, host_out, Arc::default()).await
}

/// [`run`], counting in `gauge` what waits to be written to the host (for
/// tests and monitoring: a host that stops reading shows there).
///
/// # Errors
///
/// As [`run`].
pub async fn run_with_gauge<R, W>(
    settings: Settings,
    host_in: R,
    host_out: W,
    gauge: Arc<QueueGauge>,
) -> Result<(), RunError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let gauges = Gauges {
        host: gauge,
        ..Gauges::default()
    };
    run_with_gauges(settings, host_in, host_out, gauges).await
}

/// What the gateway counts of its queues, for tests and monitoring.
#[derive(Debug, Clone, Default)]
pub struct Gauges {
    /// What waits to be written to the host: a host that stops reading
    /// shows here.
    pub host: Arc<QueueGauge>,
    /// The lines read from the host and the servers that wait for the
    /// event loop: a loop held up (a store commit that stalls) shows here,
    /// and the readers it holds back in [`QueueGauge::held`].
    pub events: Arc<QueueGauge>,
    /// The host's requests the gateway holds (waiting for a server, a
    /// person or a question), each counted as its line and a kilobyte; a
    /// host held back for sending more shows in [`QueueGauge::held`].
    pub requests: Arc<QueueGauge>,
}

/// [`run`], counting in `gauges` what waits for the host, what waits for
/// the event loop, and what the gateway holds of the host's requests.
///
/// # Errors
///
/// As [`run`].
pub async fn run_with_gauges<R, W>(
    settings: Settings,
    host_in: R,
    host_out: W,
    gauges: Gauges,
) -> Result<(), RunError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    run_until(settings, host_in, host_out, gauges, std::future::pending()).await
}

/// Runs the gateway like [`run_with_gauges`], and also stops when `stop`
/// completes (the process was asked to end, by a signal): every call in
/// flight is answered and ends on record with the outcome `shutdown`, what
/// waits for a server or a person is refused and recorded, the last records
/// are committed, and only then are the servers stopped.
///
/// # Errors
///
/// [`RunError`] when the settings cannot run at all.
pub async fn run_until<R, W, S>(
    settings: Settings,
    host_in: R,
    host_out: W,
    gauges: Gauges,
    stop: S,
) -> Result<(), RunError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
    S: Future<Output = ()> + Send + 'static,
{
    let Gauges {
        host: gauge,
        events,
        requests,
    } = gauges;
    // INVARIANT: what waits for the loop is bounded, by count and by the
    // bytes of its lines; the loop never sends into it (it would wait for
    // itself), only the readers, the host's writer and the store watcher.
    let (events_tx, events_rx) = crate::event::channel(events);
    let mut gateway = Gateway::new(settings, events_tx.clone())?;
    let stop_events = events_tx.clone();
    tokio::spawn(async move {
        stop.await;
        let _ = stop_events.send(Event::Stop).await;
    });
    let session = SessionId::FIRST;
    // INVARIANT: what waits for the host stays bounded. Past the soft
    // limit, notifications are dropped and the host's own lines are not
    // read; past the hard one, nothing is queued whole (see `HostSession`).
    gauge.set_limits(
        crate::conn::HOST_QUEUE_BYTES,
        crate::conn::HOST_QUEUE_BYTES.saturating_add(gateway.limits.max_line),
    );
    // INVARIANT: what the gateway holds of the host's requests is bounded;
    // past it, the host is not read until some of them end.
    let held = gateway
        .limits
        .max_line
        .saturating_mul(crate::conn::HOST_HELD_MESSAGES);
    requests.set_limits(held, held);
    let (host_tx, host_rx) = mpsc::unbounded_channel();
    let drained = events_tx.clone();
    let writer = tokio::spawn(write_counted_lines(
        host_out,
        host_rx,
        Arc::clone(&gauge),
        move || {
            let drained = drained.clone();
            async move {
                let _ = drained
                    .send(Event::Host {
                        session: session.0,
                        event: HostEvent::Drained,
                    })
                    .await;
            }
        },
    ));
    gateway.sessions.insert(
        session,
        HostSession::new(host_tx, Arc::clone(&gauge), Arc::clone(&requests)),
    );
    tokio::spawn(read_host(
        host_in,
        [gateway.limits.max_line, gateway.limits.max_depth],
        session,
        events_tx,
        [gauge, requests],
    ));
    // The loop is a task of its own rather than the caller's future: a
    // current-thread runtime wakes the future it blocks on through its I/O
    // driver (an eventfd write and one more poll of the driver), a task on
    // its own thread through its run queue. The loop wakes up twice a call.
    loop_task(drive(gateway, events_rx, false)).await;
    let _ = writer.await;
    Ok(())
}

/// Runs the gateway for host sessions opened while it runs, through the
/// [`HostPort`](crate::hosts::HostPort) this returns (the Streamable HTTP
/// host side), until `stop` completes: then, as in [`run_until`], every
/// call in flight or held ends on record as `shutdown` before the servers
/// are stopped. Unlike [`run_until`] it goes on when every session has
/// closed. The returned future is the event loop; await it.
///
/// # Errors
///
/// [`RunError`] when the settings cannot run at all.
pub fn serve<S>(
    settings: Settings,
    events: Arc<QueueGauge>,
    stop: S,
) -> Result<(crate::hosts::HostPort, impl Future<Output = ()>), RunError>
where
    S: Future<Output = ()> + Send + 'static,
{
    let (events_tx, events_rx) = crate::event::channel(events);
    let gateway = Gateway::new(settings, events_tx.clone())?;
    let stop_events = events_tx.clone();
    let port =
        crate::hosts::HostPort::new(events_tx, gateway.limits.max_line, gateway.limits.max_depth);
    let run = async move {
        tokio::spawn(async move {
            stop.await;
            let _ = stop_events.send(Event::Stop).await;
        });
        // As over stdio, the loop is a task of its own: on the worker
        // threads that also run the HTTP connections and the upstream
        // exchanges, a line that wakes it from one of them puts it in that
        // worker's run queue, where a future blocked on by the caller's
        // thread had to be woken with a system call and a switch of threads
        // for every message (about a sixth of the gateway's CPU per call
        // under 200 hosts). It still runs one turn at a time and owns the
        // gateway's state alone.
        loop_task(drive(gateway, events_rx, true)).await;
    };
    Ok((port, run))
}

/// The event loop: turns until the gateway is asked to stop, or (unless
/// `served`) every session has closed; then the shutdown.
async fn drive(mut gateway: Gateway, mut events_rx: crate::event::EventReceiver, served: bool) {
    let mut alarm = alarm::Alarm::new();
    loop {
        alarm.set(
            match (gateway.inflight.next_deadline(), gateway.journal.flush_at()) {
                (Some(deadline), Some(flush)) => Some(deadline.min(flush)),
                (deadline, flush) => deadline.or(flush),
            },
        );
        tokio::select! {
            biased;
            event = events_rx.recv() => match event {
                Some(event) => gateway.handle(event),
                None => break,
            },
            () = alarm.rung() => {}
        }
        // The rest of the turn: whatever else has arrived meanwhile.
        for _ in 1..TURN_LIMIT {
            match events_rx.try_recv() {
                Some(event) => gateway.handle(event),
                None => break,
            }
        }
        gateway.expire(Instant::now());
        gateway.end_turn();
        if gateway.stopping || (!served && gateway.sessions.values().all(|session| session.closed))
        {
            break;
        }
        if served {
            // Over HTTP sessions come and go: a closed one is forgotten once
            // its calls have ended on record and the turn is out.
            gateway.sessions.remove_closed();
        }
        // The writers write what the turn queued before the next turn
        // looks at what waits: what a server leaves unread is then what
        // did not fit in its pipe, not what the loop has not let out yet.
        tokio::task::yield_now().await;
    }
    // Nothing is received any more: whoever waits to send (a reader held
    // back, the host's writer, the store watcher) goes on, so the host's
    // writer can finish and the servers' readers end.
    events_rx.close();
    gateway.shutdown().await;
    // The traces of the last calls (their shutdown outcomes included).
    let tracer = gateway.tracer.take();
    drop(gateway);
    if let Some(tracer) = tracer {
        tracer.finish(TRACE_FLUSH).await;
    }
}

/// Runs the event loop `run` as a task and waits for it, as if it had been
/// awaited in place: a panic in it is the caller's panic, and a caller that
/// stops waiting (its future dropped) stops the loop with it.
async fn loop_task(run: impl Future<Output = ()> + Send + 'static) {
    /// Aborts the task when the waiting caller is dropped.
    struct Owned(tokio::task::JoinHandle<()>);
    impl Drop for Owned {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let mut task = Owned(tokio::spawn(run));
    if let Err(err) = (&mut task.0).await
        && err.is_panic()
    {
        std::panic::resume_unwind(err.into_panic());
    }
}

/// How long a stopping gateway waits for the collector to take the traces
/// still queued.
const TRACE_FLUSH: Duration = Duration::from_secs(2);

async fn read_host<R: AsyncRead + Unpin>(
    host_in: R,
    [max_line, max_depth]: [usize; 2],
    session: SessionId,
    events: EventSender,
    [queue, requests]: [Arc<QueueGauge>; 2],
) {
    let mut reader = BufReader::with_capacity(64 * 1024, host_in);
    let mut buf = Vec::with_capacity(4096);
    loop {
        // A host that does not read what waits for it is not read either:
        // its requests would only add answers to the wait.
        queue.within_soft_limit().await;
        // Nor one whose requests the gateway holds as many of as it may:
        // each ends by its deadline at the latest.
        requests.within_soft_limit().await;
        // Nor while the loop has more lines waiting than it holds.
        events.room().await;
        let event = match read_line(&mut reader, &mut buf, max_line).await {
            // A copy of the line, so the buffer keeps its size for the next.
            Ok(LineRead::Line) => match std::str::from_utf8(&buf).map(str::to_owned) {
                Ok(line) if line.trim().is_empty() => continue,
                Ok(line) => {
                    // Counted as it is read, so the wait above holds the
                    // host to the bound whatever waits for the loop.
                    requests.queued(request::Held::cost(line.len()));
                    HostEvent::Line(HostLine::read(line, max_depth))
                }
                Err(_) => HostEvent::TooLong,
            },
            Ok(LineRead::TooLong) => HostEvent::TooLong,
            Ok(LineRead::Eof) | Err(_) => HostEvent::Closed,
        };
        let closed = matches!(event, HostEvent::Closed);
        let sent = events
            .send(Event::Host {
                session: session.0,
                event,
            })
            .await;
        if sent.is_err() || closed {
            return;
        }
    }
}

/// The URI of a server's `notifications/resources/updated`, an update of a
/// private-data server's resource being its data reaching the host (design
/// §4.4); `None` when it is dropped. The host shows or reads what the URI
/// names: one that breaks a line or hides characters is dropped, as it would
/// be left out of `resources/list`.
fn updated_uri(server: &str, message: &Message<'_>) -> Option<String> {
    let uri = message
        .params
        .and_then(|raw| serde_json::from_str::<Value>(raw).ok())
        .and_then(|params| params.get("uri").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_default();
    if let Err(err) = crate::json::find_duplicate_key(message.line()) {
        tracing::warn!(
            server.id = %server,
            "its `notifications/resources/updated` cannot be read one way only ({err}); dropped"
        );
        return None;
    }
    if let Some(problem) = hintgate_policy::name::uri_problem(&uri) {
        tracing::warn!(
            server.id = %server,
            resource.uri = %hintgate_policy::sanitize::escape_line(&uri),
            "its URI {problem}; the server's `notifications/resources/updated` is dropped"
        );
        return None;
    }
    Some(uri)
}

/// A server's progress notification with its message made one line with
/// nothing hidden in it (the rest as sent), or `None` when the message
/// needed no change.
fn progress_cleaned(message: &Message<'_>) -> Option<String> {
    let mut params: Value = message
        .params
        .and_then(|raw| serde_json::from_str(raw).ok())
        .unwrap_or(Value::Null);
    let cleaned = match params.get_mut("message") {
        Some(Value::String(text)) => {
            let clean = hintgate_policy::sanitize::one_line(
                &hintgate_policy::sanitize::sanitize(text).text,
            );
            let changed = clean != *text;
            *text = clean;
            changed
        }
        _ => false,
    };
    cleaned.then(|| message.with_params(&params.to_string()))
}

/// The gateway's bounds, from its configuration.
fn limits_of(gateway: &hintgate_policy::config::GatewaySettings) -> Limits {
    Limits {
        call_timeout: Duration::from_secs(gateway.call_timeout_s),
        ask_timeout: Duration::from_secs(gateway.ask_timeout_s),
        max_line: usize::try_from(gateway.max_message_bytes).unwrap_or(usize::MAX),
        max_depth: usize::try_from(gateway.max_json_depth).unwrap_or(64),
    }
}

/// This run's name: the process id and the start time in milliseconds.
fn new_run_name() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis())
    )
}

/// The redactor of the audit records.
///
/// The digests redaction markers keep are keyed with the audit key's subkey
/// for them, so records of any run can be matched; a log without a key
/// (none, or one kept in memory) gets a key per run.
fn redactor_of(settings: &Settings) -> Result<hintgate_policy::redact::Redactor, RunError> {
    let stored_key = settings
        .store
        .as_ref()
        .and_then(|store| store.redaction_key());
    let digest_key = match stored_key {
        Some(key) => key,
        None => {
            let mut key = [0u8; 32];
            getrandom::fill(&mut key).map_err(|err| RunError::NoRandomness(err.to_string()))?;
            key
        }
    };
    Ok(hintgate_policy::redact::Redactor::new(
        &settings.policy.config().audit,
        hintgate_policy::redact::DigestKey::new(digest_key),
    ))
}

/// Every decision hook configured: the gateway's, then each server's own.
fn hook_configs(
    config: &hintgate_policy::config::ValidConfig,
) -> Vec<hintgate_policy::config::HookConfig> {
    config
        .gateway
        .decide
        .iter()
        .chain(
            config
                .servers
                .values()
                .filter_map(|server| match &server.decide {
                    hintgate_policy::config::ServerHook::Own(hook) => Some(hook),
                    _ => None,
                }),
        )
        .cloned()
        .collect()
}

/// The tracer `[telemetry]` asks for, its exporter started; `None` when
/// it names no collector, or the exporter cannot start (said in the log).
fn tracer_of(config: &hintgate_policy::config::ValidConfig) -> Option<crate::telemetry::Tracer> {
    let endpoint = config.telemetry.otlp_endpoint.as_deref()?;
    let service = config
        .telemetry
        .service_name
        .as_deref()
        .unwrap_or("hintgate");
    match crate::telemetry::Tracer::start(endpoint, service) {
        Ok(tracer) => {
            tracing::info!("traces of calls go to the OTLP collector at {endpoint}");
            Some(tracer)
        }
        Err(why) => {
            tracing::error!("no traces: {why}");
            None
        }
    }
}

/// A server-to-host request the host said it takes (elicitation,
/// sampling, roots): to the host under an id of ours, and the answer
/// back. A question a person reads is marked as the server's first.
#[expect(
    clippy::too_many_arguments,
    reason = "the parts the step reads and writes, each passed on its own so that it takes no gateway"
)]
fn relay_to_legacy_host(
    inflight: &mut InFlight,
    outbox: &mut Outbox,
    sessions: &session::Sessions,
    upstreams: &Upstreams,
    policy: &Policy,
    limits: Limits,
    idx: ServerIdx,
    generation: u64,
    session: SessionId,
    message: &Message<'_>,
) {
    let capabilities = sessions
        .get(&session)
        .and_then(|host| host.init.as_ref())
        .and_then(|init| init.get("capabilities"));
    match relay::server_request(message.method(), capabilities) {
        relay::ServerRequest::Relay => {}
        relay::ServerRequest::Pong => {
            let line = frame::response(message.id_text(), &Value::Object(Map::new()));
            outbox.upstream(idx, generation, line, None);
            return;
        }
        relay::ServerRequest::Refuse(why) => {
            tracing::warn!(server.id = %upstreams.name(idx), "{why}");
            let line = frame::error_response(message.id_text(), -32601, &why);
            outbox.upstream(idx, generation, line, None);
            return;
        }
    }
    // INVARIANT: what a server asks of the host at once is bounded.
    if inflight.relays_from(idx) >= MAX_RELAYED {
        let text = format!(
            "hintgate relays at most {MAX_RELAYED} of a server's requests to the host at a time; this one was not relayed"
        );
        tracing::warn!(server.id = %upstreams.name(idx), "{text}");
        outbox.upstream(
            idx,
            generation,
            frame::error_response(message.id_text(), -32603, &text),
            None,
        );
        return;
    }
    let marked = if relay::is_marked(message.method()) {
        let mut params: Value = message
            .params
            .and_then(|raw| serde_json::from_str(raw).ok())
            .unwrap_or(Value::Null);
        match relay::mark_for_host(policy, upstreams, idx, message.method(), &mut params) {
            Ok(()) => Some(params),
            Err(why) => {
                let line = frame::error_response(message.id_text(), -32602, &why);
                outbox.upstream(idx, generation, line, None);
                return;
            }
        }
    } else {
        None
    };
    let n = inflight.wait_host(
        session,
        HostPurpose::Relay {
            server: idx,
            generation,
            upstream_id: message.id_text().to_owned(),
        },
        limits.ask_timeout,
    );
    let id = format!("\"hintgate-{n}\"");
    let line = match marked {
        Some(params) => frame::request(&id, message.method(), &params),
        None => message.with_id(&id),
    };
    outbox.host(session, line);
}

/// A server cancelled a request of its own: each host it was relayed to
/// is told, under the id the gateway gave it there.
fn on_server_cancelled(
    inflight: &mut InFlight,
    outbox: &mut Outbox,
    idx: ServerIdx,
    message: &Message<'_>,
) {
    let params: Value = message
        .params
        .and_then(|raw| serde_json::from_str(raw).ok())
        .unwrap_or(Value::Null);
    let request_id = params
        .get("requestId")
        .map(Value::to_string)
        .unwrap_or_default();
    let found = inflight.take_host_where(|purpose| {
        matches!(purpose, HostPurpose::Relay { server, upstream_id, .. } if *server == idx && *upstream_id == request_id)
    });
    for (session, n, _) in found {
        let mut params = params.clone();
        if let Some(object) = params.as_object_mut() {
            object.insert(
                "requestId".to_owned(),
                Value::String(format!("hintgate-{n}")),
            );
        }
        outbox.host_note(session, message.with_params(&params.to_string()), None);
    }
}

/// Tells the store watcher which identities to watch.
fn watch_keys(
    store: &Option<Arc<dyn Store>>,
    catalog: &catalog::Catalog,
    events: &EventSender,
    watcher: &mut Option<watch::StoreWatcher>,
) {
    let Some(store) = store.clone() else {
        return;
    };
    let keys = catalog.keys();
    if watcher.is_none() {
        *watcher = watch::StoreWatcher::spawn(store, events.clone());
    }
    if let Some(watcher) = watcher {
        watcher.set_keys(keys);
    }
}

/// Sets the metrics' gauges as a turn leaves the parts: the sessions, the
/// calls waiting for a server, and those waiting for a person.
fn count_gauges(
    metrics: Option<&crate::metrics::Metrics>,
    sessions: &session::Sessions,
    parked: &parked::Parked,
    asks: &ask::Asks,
    inflight: &InFlight,
) {
    if let Some(metrics) = metrics {
        let for_person = asks.queued().saturating_add(inflight.asks());
        metrics.gauges(sessions.count(), parked.calls(), for_person);
    }
}

// === impl Gateway ===

impl Gateway {
    fn new(settings: Settings, events: EventSender) -> Result<Self, RunError> {
        let servers: Vec<ServerConfig> =
            settings.policy.config().servers.values().cloned().collect();
        if servers.is_empty() {
            return Err(RunError::NoServers);
        }
        if settings.mode == Mode::Wrap && servers.len() != 1 {
            return Err(RunError::WrapNeedsOne(servers.len()));
        }
        let gateway = settings.policy.config().gateway.clone();
        let limits = limits_of(&gateway);
        let sealer =
            crate::seal::Sealer::new().map_err(|err| RunError::NoRandomness(err.to_string()))?;
        let run_name = new_run_name();
        let redactor = redactor_of(&settings)?;
        let log = settings
            .store
            .clone()
            .map(|store| -> Arc<dyn hintgate_store::AuditLog> { store });
        let upstreams = Upstreams::new(servers, settings.mode.clone(), gateway.separator.clone());
        let count = upstreams.instances();
        let mut gateway = Self {
            hooks: hooks::Hooks::new(hook_configs(settings.policy.config())),
            limits,
            mode: settings.mode,
            observer: Observer(settings.observer),
            catalog: catalog::Catalog::new(count, settings.store.clone()),
            journal: journal::Journal::new(log, run_name.clone(), redactor)
                .with_metrics(settings.metrics.clone())
                .with_journal(
                    settings.policy.config().audit.fsync,
                    settings.policy.config().audit.segment_bytes,
                )
                .map_err(RunError::Journal)?
                .with_later(events.clone()),
            metrics: settings.metrics,
            tracer: tracer_of(settings.policy.config()),
            asks: ask::Asks::new(run_name.clone()),
            run_name,
            connector: settings
                .connector
                .unwrap_or_else(|| Arc::new(SystemConnector::with_store(settings.store.clone()))),
            store: settings.store,
            events,
            sealer,
            sessions: session::Sessions::default(),
            declared: era::Declared::new(),
            upstreams,
            inflight: InFlight::default(),
            routing: routing::Routing::default(),
            subscriptions: subscriptions::Subscriptions::default(),
            gathers: relay::Gathers::new(),
            watcher: None,
            parked: parked::Parked::default(),
            outbox: Outbox::new(),
            turn: 0,
            policy: settings.policy,
            stopping: false,
            finished: false,
        };
        gateway.hooks.start_all(&gateway.events);
        if gateway.upstreams.prefixes_overlap() {
            tracing::error!(
                "two servers' names run into the separator `{}`: a tool name either could own is neither listed nor routed (`hintgate config check` names them)",
                gateway.upstreams.separator()
            );
        }
        Ok(gateway)
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Open(open) => self.sessions.open(*open),
            Event::Host { session, event } => {
                let session = SessionId(session);
                match event {
                    HostEvent::Line(line) => self.on_host_line(session, line, None),
                    HostEvent::LineFor { line, host_id } => {
                        self.on_host_line(session, line, Some(host_id.into()));
                    }
                    HostEvent::TooLong => {
                        tracing::warn!(
                            "the host sent a message over the size limit; it was dropped"
                        );
                        self.outbox.host(
                            session,
                            frame::error_response("null", -32600, "message too large"),
                        );
                    }
                    HostEvent::Closed => {
                        tracing::debug!("the host closed the session");
                        self.end_session(session, Ending::HostGone);
                    }
                    HostEvent::Drained => self.sessions.drained(&mut self.outbox, session),
                }
            }
            Event::Upstream {
                server,
                generation,
                event,
            } => {
                let current = self
                    .upstreams
                    .get(server)
                    .is_some_and(|up| up.generation() == generation);
                if !current {
                    return;
                }
                match event {
                    UpstreamEvent::Line(line) => self.on_upstream_line(server, line, None),
                    UpstreamEvent::LineOnStream { line, request } => {
                        self.on_upstream_line(server, line, Some(request));
                    }
                    UpstreamEvent::Broken(reason) | UpstreamEvent::Closed(reason) => {
                        self.at_servers(|servers| servers.upstream_failed(server, reason));
                    }
                    UpstreamEvent::Prepared(result) => {
                        self.at_servers(|servers| servers.prepared(server, result))
                    }
                }
            }
            Event::Answered { id, answer } => {
                self.at_desk(|desk| desk.on_queue_answer(id, &answer))
            }
            Event::Hook {
                slot,
                generation,
                event,
            } => self.at_desk(|desk| desk.on_hook_event(slot, generation, event)),
            Event::Approvals {
                key,
                approvals,
                read_at,
            } => self.catalog.set_approvals(&key, approvals, read_at),
            Event::Stop => {
                tracing::info!(
                    "asked to stop: the calls in flight end on record, then the servers stop"
                );
                self.stopping = true;
                self.observer.observe(|| Observed::Stopping);
            }
            Event::Reported => self.calls_reported(false),
        }
    }

    /// Sends the calls whose records the writes reported since the last
    /// look hold (PostgreSQL, whose writes are made off the loop's thread),
    /// or refuses them when their write failed; with `wait`, waits for the
    /// write still out first.
    fn calls_reported(&mut self, wait: bool) {
        for (written, calls) in self.journal.reported(wait) {
            for (mut cx, place) in calls {
                match written.as_ref().map(|seqs| seqs.get(place).copied()) {
                    Ok(Some(seq)) => {
                        cx.recorded(Some(seq));
                        self.send_call(cx);
                    }
                    Ok(None) => self
                        .lookup()
                        .unrecorded(&cx, "the record was not committed".to_owned()),
                    Err(err) => self.lookup().unrecorded(&cx, err.clone()),
                }
            }
        }
    }

    // --- the turn ---

    /// Ends a turn: commits its records when a call waits on them (or its
    /// outcomes have waited long enough), then sends what the turn
    /// produced, in order.
    fn end_turn(&mut self) {
        self.turn += 1;
        // The gauges as the turn leaves them, before anyone is told: a host
        // that scrapes after its answer never sees them behind it.
        count_gauges(
            self.metrics.as_deref(),
            &self.sessions,
            &self.parked,
            &self.asks,
            &self.inflight,
        );
        // Sending a call can send it through the pipeline again (its server
        // restarted since it was decided), which may record and forward it
        // anew: the loop commits and sends until nothing is left.
        // Writes reported meanwhile (a wake-up the full channel lost).
        self.calls_reported(false);
        let later = self.journal.writes_later();
        while !self.outbox.is_empty() || self.journal.due(Instant::now()) {
            // Off the loop's thread (PostgreSQL): the calls wait, parked,
            // for the write's report; everything else goes on.
            let mut started = None;
            let committed = if !self.journal.due(Instant::now()) {
                Ok(Vec::new())
            } else if later {
                started = self.journal.write_later();
                Ok(Vec::new())
            } else {
                self.journal.commit()
            };
            let outbox = self.outbox.take();
            for outgoing in outbox {
                match outgoing {
                    Outgoing::Host(session, line) => {
                        if let Some(session) = self.sessions.get(&session) {
                            session.send(line);
                        }
                    }
                    Outgoing::HostNote(session, line, list) => {
                        let metrics = self.metrics.as_deref();
                        self.sessions.deliver_note(session, line, list, metrics);
                    }
                    Outgoing::Upstream(idx, generation, line, principal) => {
                        let turn = self.turn;
                        let sent = self
                            .upstreams
                            .send_to(idx, generation, line, turn, principal);
                        if let Err(err) = sent {
                            self.at_servers(|servers| servers.upstream_failed(idx, err.reason()));
                        }
                    }
                    Outgoing::Call(cx, Some(place)) if later => {
                        self.journal.park(started, cx, place);
                    }
                    Outgoing::Call(mut cx, place) => match (&committed, place) {
                        (Ok(seqs), Some(place)) if seqs.get(place).is_some() => {
                            cx.recorded(seqs.get(place).copied());
                            self.send_call(cx);
                        }
                        (Ok(_), None) => self.send_call(cx),
                        (result, _) => {
                            let err = match result {
                                Err(err) => err.clone(),
                                Ok(_) => "the record was not committed".to_owned(),
                            };
                            self.lookup().unrecorded(&cx, err);
                        }
                    },
                }
            }
        }
        // Sending may have sent calls through the pipeline again.
        count_gauges(
            self.metrics.as_deref(),
            &self.sessions,
            &self.parked,
            &self.asks,
            &self.inflight,
        );
    }

    fn expire(&mut self, now: Instant) {
        for expired in self.inflight.expired(now) {
            match expired {
                Expired::Up(idx, id) => {
                    self.at_servers(|servers| servers.upstream_timed_out(idx, id))
                }
                Expired::Host(session, n) => self.host_timed_out(session, n),
                Expired::Queue(id) => self.at_desk(|desk| desk.queue_timed_out(id)),
                Expired::Hook(id) => self.at_desk(|desk| desk.hook_timed_out(id)),
                Expired::Waiting => self.waited_too_long(now),
            }
        }
    }

    /// Answers what has waited for its server too long.
    fn waited_too_long(&mut self, now: Instant) {
        let seconds = self.limits.wait_timeout().as_secs();
        for item in self.parked.take_expired(now) {
            match item {
                Waiting::Call(cx) => {
                    let name = cx.server().map_or("", |idx| self.upstreams.name(idx));
                    let why = format!(
                        "server `{name}` was not ready to take the call within {seconds} s (it did not finish starting or listing its tools)"
                    );
                    self.records()
                        .end_call(cx, CallEnd::Refused(call::Refusal::ServerUnavailable(why)));
                }
                Waiting::Request(request) => {
                    let why = format!(
                        "the servers were not ready to answer `{}` within {seconds} s",
                        request.method.as_str()
                    );
                    self.outbox
                        .error(request.session, request.id(), -32603, &why);
                }
            }
        }
    }

    /// Re-dispatches every waiting request and call after a server's state
    /// changed.
    fn retry_waiting(&mut self) {
        for item in self.parked.take_all() {
            match item {
                Waiting::Request(request) => self.dispatch(*request),
                Waiting::Call(cx) => self.run_pipeline(cx),
            }
        }
        routing::finish_initialize(
            &mut self.outbox,
            &mut self.sessions,
            &self.upstreams,
            &self.mode,
        );
    }

    // --- the host side ---

    fn on_host_line(&mut self, session: SessionId, line: HostLine, host_id: Option<Box<str>>) {
        // The line was counted in what the gateway holds of the host's
        // requests when it was read: a request keeps that count until it
        // ends; any other line gives it back when it has been handled.
        let held = self
            .sessions
            .get(&session)
            .map(|host| request::Held::counted(&host.requests, line.len()))
            .unwrap_or_default();
        // The transport read the line where it arrived (`HostLine::read`):
        // what the gateway decides on is what every server reads, so a
        // message that repeats a key anywhere (it could be read two ways),
        // or is nested deeper than a server may be able to read, is refused
        // before anything else reads it.
        let framed = match line.into_reading() {
            Reading::Message(framed) => framed,
            Reading::Refused(line, err) => {
                self.on_ambiguous_line(session, line, &err, host_id);
                return;
            }
            Reading::Unreadable(_, err) => {
                tracing::warn!("the host sent a line that is not JSON-RPC: {err}");
                let (code, what) = match err {
                    frame::FrameError::NotJson(_) => (-32700, "parse error"),
                    _ => (-32600, "invalid request"),
                };
                self.outbox
                    .error(session, "null", code, &format!("{what}: {err}"));
                return;
            }
        };
        match framed.kind() {
            Kind::Request => {
                let method = Method::of(framed.method());
                let spans = framed.spans();
                let mut request = HostRequest::new(session, framed.into_line(), spans, method);
                request.hold(held);
                request.host_id = host_id;
                self.dispatch(request);
            }
            Kind::Notification => {
                let method = framed.method().to_owned();
                let spans = framed.spans();
                self.on_host_notification(session, &method, spans, framed.into_line());
            }
            Kind::Response => {
                // A host's answer to the gateway's own question (rare): its
                // result or error is read here.
                let line = framed.into_line();
                if let Ok(message) = Message::parse(&line) {
                    let id = message.id_text().to_owned();
                    self.on_host_response(session, &id, &message);
                }
            }
        }
    }

    /// A host line that repeats a key (or is not JSON): refused. A call is
    /// recorded as a deny; a request is answered with an error (under no id
    /// when its id is what repeats); an answer to the gateway's own question
    /// counts as an error answer.
    fn on_ambiguous_line(
        &mut self,
        session: SessionId,
        line: String,
        err: &crate::json::JsonError,
        host_id: Option<Box<str>>,
    ) {
        let message = match err {
            crate::json::JsonError::DuplicateKey { .. } => call::duplicate_message(err),
            crate::json::JsonError::TooDeep { .. } => call::too_deep_message(err),
            other => format!("parse error: {other}"),
        };
        tracing::warn!("{message}");
        let Ok(found) = crate::json::members(&line) else {
            self.outbox.error(session, "null", -32700, &message);
            return;
        };
        // The envelope's members, each read only where it is given once.
        let once = |key: &str| {
            let mut matching = found.iter().filter(|member| member.key == key);
            match (matching.next(), matching.next()) {
                (Some(member), None) => Some(member.value.clone()),
                _ => None,
            }
        };
        let id_span = once("id");
        let id = id_span
            .as_ref()
            .and_then(|span| line.get(span.clone()))
            .unwrap_or("null")
            .to_owned();
        let is_call = found.iter().any(|member| {
            member.key == "method"
                && line
                    .get(member.value.clone())
                    .and_then(|text| serde_json::from_str::<String>(text).ok())
                    .is_some_and(|method| method == "tools/call")
        });
        let has_method = found.iter().any(|member| member.key == "method");
        let spans = frame::Spans {
            id: id_span,
            params: once("params"),
        };
        if is_call {
            if spans.id.is_none() && found.iter().any(|member| member.key == "id") {
                // Its id is what repeats: the error goes under no id.
                self.outbox.error(session, "null", -32600, &message);
            }
            let mut request = HostRequest::new(session, line, spans, Method::ToolsCall);
            request.host_id = host_id;
            self.records()
                .refuse_unparsed(request, call::Refusal::Malformed(message));
        } else if has_method {
            if spans.id.is_some() || found.iter().any(|member| member.key == "id") {
                self.outbox.error(session, &id, -32600, &message);
            }
        } else if spans.id.is_some() {
            // An answer to the gateway's own question that can be read two
            // ways answers nothing: it counts as an error.
            let error = frame::error_response(&id, -32600, &message);
            if let Ok(error) = Message::parse(&error) {
                self.on_host_response(session, &id, &error);
            }
        }
    }

    fn dispatch(&mut self, request: HostRequest) {
        let session = request.session;
        // A modern host names its protocol version on every request; one the
        // gateway does not speak is refused as the spec says.
        let modern_host = self.sessions.get(&session).is_some_and(HostSession::modern);
        if modern_host
            && let Some(meta) = era::modern_meta(&request)
            && !self.begin_modern(&request, &meta)
        {
            return;
        }
        let started = self
            .sessions
            .get(&session)
            .is_some_and(HostSession::started);
        if started && let Some(host) = self.sessions.get_mut(&session) {
            // It asks for a list: the next change to that list is told.
            host.told.listed(request.method.as_str());
        }
        match &request.method {
            Method::Initialize => self.on_initialize(request),
            Method::Discover => self.on_discover(request),
            Method::Ping => {
                self.sessions
                    .reply(&mut self.outbox, session, request.id(), &json!({}))
            }
            _ if !started => match era::modern_meta(&request) {
                // A modern host's first request starts the session.
                Some(meta) => {
                    if self.begin_modern(&request, &meta) {
                        self.dispatch(request);
                    }
                }
                None => self
                    .outbox
                    .error(session, request.id(), -32600, "send `initialize` first"),
            },
            Method::Listen if modern_host => self.on_listen(request),
            Method::ToolsList => self.on_tools_list(request),
            Method::ToolsCall => self.on_tools_call(request),
            _ => self.on_other_request(request),
        }
    }

    fn on_host_notification(
        &mut self,
        session: SessionId,
        method: &str,
        spans: frame::Spans,
        line: String,
    ) {
        match method {
            "notifications/initialized" => {}
            "notifications/cancelled" => {
                let params: Value = spans
                    .params(&line)
                    .and_then(|raw| serde_json::from_str(raw).ok())
                    .unwrap_or(Value::Null);
                let Some(request_id) = params.get("requestId").map(Value::to_string) else {
                    return;
                };
                if let Some(host) = self.sessions.get_mut(&session)
                    && host.listen.as_deref() == Some(request_id.as_str())
                {
                    // The host's listen stream ends, and with it the
                    // resource subscriptions it held.
                    host.listen = None;
                    subscriptions::end_subscriptions(
                        &mut self.subscriptions,
                        &mut self.inflight,
                        &mut self.outbox,
                        &mut self.upstreams,
                        self.limits,
                        session,
                    );
                    return;
                }
                self.cancel_host_request(session, &request_id);
            }
            "tools/call" => {
                // A call without an id is not a request: it cannot be
                // answered, so it cannot be asked about or refused. It is
                // recorded and never sent on.
                tracing::warn!(
                    "the host sent `tools/call` as a notification (no id); it is refused and not sent to any server"
                );
                let request = HostRequest::new(session, line, spans, Method::ToolsCall);
                self.records().refuse_unparsed(
                    request,
                    call::Refusal::Malformed(
                        "`tools/call` must be a request with an id".to_owned(),
                    ),
                );
            }
            other if other.starts_with("notifications/") => {
                // Roots changes and other notifications go to every running
                // legacy server; 2026-07-28 servers take no such notifications.
                let targets: Vec<(ServerIdx, u64)> = self
                    .upstreams
                    .iter()
                    .enumerate()
                    .filter(|(_, up)| up.phase == upstreams::Phase::Ready && !up.modern)
                    .map(|(idx, up)| (idx, up.generation()))
                    .collect();
                for (idx, generation) in targets {
                    self.outbox.upstream(idx, generation, line.clone(), None);
                }
            }
            other => {
                // A request method without an id: no server may run it
                // unanswered and undecided.
                tracing::warn!(
                    "the host sent `{other}` without an id; a request method is never sent on as a notification"
                );
            }
        }
    }

    /// The host gave up on one of its requests: stop it wherever it is.
    fn cancel_host_request(&mut self, session: SessionId, request_id: &str) {
        let mut cancelled = Vec::new();
        // A request that waited is dropped; a call is withdrawn below.
        for item in self.parked.take_of(session, Some(request_id)) {
            if let Waiting::Call(cx) = item {
                cancelled.push(cx);
            }
        }
        self.at_desk(|desk| {
            desk.withdraw_queued_for(session, request_id);
            desk.withdraw_hook_calls(
                session,
                Some(request_id),
                &CallEnd::Withdrawn(Outcome::Cancelled),
            );
        });
        let asks = self.inflight.host_ids(
            session,
            |purpose| matches!(purpose, HostPurpose::Ask(cx) if cx.request.id() == request_id),
        );
        for n in asks {
            if let Some(HostPurpose::Ask(cx)) = self.inflight.take_host(session, n) {
                self.outbox.host_note(
                    session,
                    frame::notification(
                        "notifications/cancelled",
                        &json!({"requestId": format!("hintgate-{n}"), "reason": "the host cancelled the call"}),
                    ),
                    None,
                );
                cancelled.push(cx);
            }
        }
        for cx in cancelled {
            self.records()
                .end_call(cx, CallEnd::Withdrawn(Outcome::Cancelled));
        }
        if let Some((idx, up_id)) = self.inflight.find_host_request(session, request_id) {
            match self.inflight.take_up(idx, up_id) {
                Some(UpPurpose::Call(cx)) => self.records().record_outcome(&cx, Outcome::Cancelled),
                // Cancelled while its server's dry run ran: it ends on
                // record, never asked about.
                Some(UpPurpose::DryRun(cx)) => {
                    self.records()
                        .end_call(cx, CallEnd::Withdrawn(Outcome::Cancelled));
                }
                _ => {}
            }
            self.upstreams.cancel(
                idx,
                up_id,
                "the host cancelled the request",
                &mut self.outbox,
            );
        }
    }

    fn on_host_response(&mut self, session: SessionId, id: &str, message: &Message<'_>) {
        let Some(n) = id
            .trim_matches('"')
            .strip_prefix("hintgate-")
            .and_then(|n| n.parse::<u64>().ok())
        else {
            tracing::debug!("a response from the host to no request of ours: {id}");
            return;
        };
        match self.inflight.take_host(session, n) {
            Some(HostPurpose::Ask(cx)) => self.at_desk(|desk| desk.on_ask_answer(cx, message)),
            Some(HostPurpose::Gather { gather, key }) => {
                let result: Option<Value> = message
                    .result
                    .and_then(|raw| serde_json::from_str(raw).ok());
                let error: Option<Value> =
                    message.error.and_then(|raw| serde_json::from_str(raw).ok());
                self.on_gathered(gather, key, result, error);
            }
            Some(HostPurpose::Relay {
                server,
                generation,
                upstream_id,
            }) => {
                self.outbox
                    .upstream(server, generation, message.with_id(&upstream_id), None);
            }
            None => tracing::debug!("a late or unknown response from the host: {id}"),
        }
    }

    fn host_timed_out(&mut self, session: SessionId, n: u64) {
        match self.inflight.take_host(session, n) {
            Some(HostPurpose::Ask(cx)) => {
                self.outbox.host_note(
                    session,
                    frame::notification(
                        "notifications/cancelled",
                        &json!({"requestId": format!("hintgate-{n}"), "reason": "nobody answered in time"}),
                    ),
                    None,
                );
                self.at_desk(|desk| desk.ask_timed_out(cx));
            }
            Some(HostPurpose::Gather { gather, key }) => {
                self.on_gathered(gather, key, None, None);
            }
            Some(HostPurpose::Relay {
                server,
                generation,
                upstream_id,
            }) => {
                self.outbox.host_note(
                    session,
                    frame::notification(
                        "notifications/cancelled",
                        &json!({"requestId": format!("hintgate-{n}"), "reason": "the server's request timed out"}),
                    ),
                    None,
                );
                self.outbox.upstream(
                    server,
                    generation,
                    frame::error_response(&upstream_id, -32603, "the host did not answer in time"),
                    None,
                );
            }
            None => {}
        }
    }

    /// A session ends. Every call it had in flight ends on record: with the
    /// outcome `host-gone` when the host went away, with `shutdown` (and an
    /// answer that says so) when the gateway shuts down. What waits for a
    /// server or a person is refused and recorded the same way.
    fn end_session(&mut self, session: SessionId, ending: Ending) {
        for (idx, _, purpose) in self.inflight.drain_session_up(session) {
            match (purpose, ending) {
                (UpPurpose::Call(cx), Ending::HostGone) => {
                    self.records().record_outcome(&cx, Outcome::HostGone);
                }
                (UpPurpose::Call(cx), Ending::Shutdown) => {
                    let text = format!(
                        "hintgate shut down before `{}` answered this call; the server may have run it.",
                        self.upstreams.name(idx)
                    );
                    let result = call::error_result(&text);
                    let line = self.sessions.result_line(session, cx.request.id(), &result);
                    self.records().answer_call(&cx, line, Outcome::Shutdown);
                }
                (UpPurpose::DryRun(cx), ending) => {
                    self.records()
                        .end_call(cx, hooks::withdrawn(ending == Ending::Shutdown));
                }
                (UpPurpose::Forward(request), Ending::Shutdown) => {
                    let text = "hintgate shut down before the server answered";
                    self.outbox.error(session, request.id(), -32603, text);
                }
                _ => {}
            }
        }
        for item in self.parked.take_of(session, None) {
            match item {
                Waiting::Call(cx) => {
                    let end = match ending {
                        Ending::HostGone => CallEnd::Withdrawn(Outcome::HostGone),
                        Ending::Shutdown => CallEnd::Refused(call::Refusal::Shutdown),
                    };
                    self.records().end_call(cx, end);
                }
                Waiting::Request(request) => {
                    if ending == Ending::Shutdown {
                        let text = "hintgate shut down before the servers were ready";
                        self.outbox.error(session, request.id(), -32603, text);
                    }
                }
            }
        }
        subscriptions::end_subscriptions(
            &mut self.subscriptions,
            &mut self.inflight,
            &mut self.outbox,
            &mut self.upstreams,
            self.limits,
            session,
        );
        let shutdown = ending == Ending::Shutdown;
        self.at_desk(|desk| {
            desk.withdraw_session(session, shutdown);
            desk.withdraw_hook_calls(session, None, &hooks::withdrawn(shutdown));
        });
        if ending == Ending::Shutdown {
            relay::end_gathers(&mut self.gathers, &mut self.outbox, session);
        }
        if let Some(host) = self.sessions.get_mut(&session) {
            host.closed = true;
        }
    }

    /// Ends every session whose host is still there as a stop does:
    /// what it holds and has in flight ends on record as `shutdown`.
    fn end_open_sessions(&mut self) {
        let sessions: Vec<SessionId> = self
            .sessions
            .keys()
            .filter(|session| self.sessions.get(session).is_some_and(|host| !host.closed))
            .collect();
        for session in sessions {
            self.end_session(session, Ending::Shutdown);
        }
    }

    /// Stops everything: what is in flight or still waits ends on record
    /// (`shutdown` when the gateway was asked to stop while a host was
    /// there), the last records are committed, and only then are the
    /// answers sent and the servers stopped.
    async fn shutdown(&mut self) {
        // A write still out (PostgreSQL) is waited for: its calls were not
        // sent, and end on record (`shutdown`, or `host-gone`), unsent.
        if self.journal.writes_later() {
            let stopping = std::mem::replace(&mut self.stopping, true);
            self.calls_reported(true);
            self.stopping = stopping;
        }
        self.end_open_sessions();
        // The last outcomes, whatever their age, before the host reads an
        // answer and before a server is stopped.
        if let Err(err) = self.journal.commit() {
            tracing::error!("the last audit records could not be written: {err}");
        }
        self.end_turn();
        // A call the last turn forwarded ends as it is sent out (it is not
        // sent): its outcome too.
        if let Err(err) = self.journal.commit() {
            tracing::error!("the last audit records could not be written: {err}");
        }
        // Indexed before the servers are stopped and the process ends, so
        // `hintgate log` after the run sees all of it.
        self.journal.finish();
        self.finished = true;
        let (records, commits) = self.journal.counts();
        tracing::debug!(
            records,
            commits,
            "the audit log: records written in commits"
        );
        if let Some(watcher) = self.watcher.take() {
            watcher.stop();
        }
        self.hooks.stop_all();
        self.upstreams.stop_all().await;
    }

    // --- the upstream side ---

    fn on_upstream_line(&mut self, idx: ServerIdx, line: ServerLine, on_stream: Option<u64>) {
        // The link's reader read the line where it arrived
        // (`ServerLine::read`): a line is passed on as its text, which no
        // parser of the gateway reads whole, so its depth was checked
        // before anything else, and so was the key serde_json reads as the
        // JSON text in its string (the gateway would check, mark or rewrite
        // the inner value while the host reads the outer one: a result's
        // `structuredContent` checked against its schema, a question marked
        // as the server's). Both are refused like a host's.
        let framed = match line.into_reading() {
            Reading::Message(framed) => framed,
            Reading::Refused(line, err) => {
                self.at_servers(|servers| servers.on_too_deep_upstream(idx, &line, &err));
                return;
            }
            Reading::Unreadable(line, err) => {
                if let Some(id) = null_result_id(&line) {
                    match id.parse::<u64>() {
                        Ok(id) => {
                            self.at_servers(|servers| servers.result_not_object(idx, id, "null"))
                        }
                        Err(_) => tracing::debug!("a response upstream with an id we never sent"),
                    }
                    return;
                }
                let preview: String = line.chars().take(80).collect();
                self.at_servers(|servers| {
                    servers.upstream_failed(
                        idx,
                        format!("wrote something that is not JSON-RPC ({err}): `{preview}`"),
                    )
                });
                return;
            }
        };
        let message = framed.message();
        match message.kind() {
            Kind::Response if message.answers_nothing() => {
                // The server could not read something it was sent: which
                // request it was, it does not say, so its error answers none
                // (what it could not read fails on its own deadline). It is
                // not passed on, and the server is not stopped for it.
                let error: String = message
                    .error
                    .map(|raw| raw.chars().take(200).collect())
                    .unwrap_or_default();
                tracing::warn!(
                    server.id = %self.upstreams.name(idx),
                    "the server answered with an error under no id (it could not read something it was sent); dropped: {error}"
                );
            }
            Kind::Response => {
                let Some(id) = message.id.and_then(|raw| raw.parse::<u64>().ok()) else {
                    tracing::debug!("a response upstream with an id we never sent");
                    return;
                };
                // MCP results are objects: any other answers the request as
                // the server's error.
                if message.error.is_none()
                    && let Some(raw) = message.result
                    && !raw.trim_start().starts_with('{')
                {
                    let shown: String = raw.chars().take(40).collect();
                    self.at_servers(|servers| servers.result_not_object(idx, id, &shown));
                    return;
                }
                match self.inflight.take_up(idx, id) {
                    Some(purpose) => self.on_upstream_response(idx, id, purpose, &message),
                    None if self
                        .subscriptions
                        .listen_ended(idx, self.upstreams.name(idx), id) => {}
                    None => tracing::debug!("a late or unknown response upstream: {id}"),
                }
            }
            Kind::Request => self.on_upstream_request(idx, &message, on_stream),
            Kind::Notification => self.on_upstream_notification(idx, &message),
        }
    }

    fn on_upstream_response(
        &mut self,
        idx: ServerIdx,
        id: u64,
        purpose: UpPurpose,
        message: &Message<'_>,
    ) {
        match purpose {
            UpPurpose::Discover => self.on_discovered(idx, message),
            UpPurpose::LateDiscover => self.on_late_discovered(idx, message),
            UpPurpose::Initialize => {
                self.at_servers(|servers| servers.on_initialized(idx, message))
            }
            UpPurpose::ListTools => self.at_servers(|servers| servers.on_tools_page(idx, message)),
            UpPurpose::Call(cx) => self.on_call_answer(idx, cx, message),
            UpPurpose::DryRun(cx) => self.at_desk(|desk| desk.on_dry_run_answer(idx, cx, message)),
            UpPurpose::Forward(request) => self.on_forward_answer(idx, &request, message),
            UpPurpose::Fanout { aggregate, method } => {
                self.on_fanout_page(idx, id, aggregate, &method, message);
            }
            UpPurpose::Subscribe { uri } => {
                let why = match message.error {
                    Some(error) => format!(
                        "server `{}` refused the subscription to `{}`: {}",
                        self.upstreams.name(idx),
                        hintgate_policy::sanitize::escape_line(&uri),
                        subscriptions::error_message(error)
                    ),
                    None => format!(
                        "server `{}` ended the listen stream of the subscription to `{}` before acknowledging it",
                        self.upstreams.name(idx),
                        hintgate_policy::sanitize::escape_line(&uri)
                    ),
                };
                self.subscriptions.fail(
                    idx,
                    self.upstreams.name(idx),
                    &uri,
                    &why,
                    &mut self.outbox,
                );
            }
            UpPurpose::Resubscribe { uri } => {
                if let Some(error) = message.error {
                    let why = format!(
                        "server `{}` started again and refused the subscription to `{}` its hosts hold: {}",
                        self.upstreams.name(idx),
                        hintgate_policy::sanitize::escape_line(&uri),
                        subscriptions::error_message(error)
                    );
                    self.subscriptions.fail(
                        idx,
                        self.upstreams.name(idx),
                        &uri,
                        &why,
                        &mut self.outbox,
                    );
                }
            }
            UpPurpose::Quiet => {}
        }
    }

    fn on_upstream_request(
        &mut self,
        idx: ServerIdx,
        message: &Message<'_>,
        on_stream: Option<u64>,
    ) {
        let Some(up) = self.upstreams.get(idx) else {
            return;
        };
        let generation = up.generation();
        // A server's own request goes to the session whose request's stream
        // carried it (Streamable HTTP), else to the session that has
        // requests in flight on it (over stdio, the one session); when
        // several have, or none does and several are open, it is not the
        // gateway's to guess.
        let session = on_stream
            .and_then(|request| self.inflight.session_of(idx, request))
            .or_else(|| session_for_server(&self.inflight, &self.sessions, idx));
        let Some(session) = session else {
            let text = "hintgate cannot tell which host this request is for: several host sessions use this server at once, and the request does not say which call it belongs to";
            tracing::warn!(server.id = %self.upstreams.name(idx), "{text}");
            self.outbox.upstream(
                idx,
                generation,
                frame::error_response(message.id_text(), -32603, text),
                None,
            );
            return;
        };
        let modern_host = self.sessions.get(&session).is_some_and(HostSession::modern);
        if modern_host {
            if !relay::relay_to_modern_host(
                &mut self.inflight,
                &mut self.outbox,
                &self.sessions,
                &mut self.upstreams,
                &self.policy,
                &self.sealer,
                self.limits,
                idx,
                message,
            ) {
                // A 2026-07-28 host takes no requests from a server, and no
                // single call of the host can carry this one.
                let text = "the host speaks 2026-07-28, which takes no requests from a server; this gateway cannot relay this one (no single call of the host is in flight on this server)";
                self.outbox.upstream(
                    idx,
                    generation,
                    frame::error_response(message.id_text(), -32601, text),
                    None,
                );
            }
            return;
        }
        relay_to_legacy_host(
            &mut self.inflight,
            &mut self.outbox,
            &self.sessions,
            &self.upstreams,
            &self.policy,
            self.limits,
            idx,
            generation,
            session,
            message,
        );
    }

    fn on_upstream_notification(&mut self, idx: ServerIdx, message: &Message<'_>) {
        if self.upstreams.is_read_only(idx)
            && !self.at_servers(|servers| servers.read_only_note_passes(idx, message))
        {
            return;
        }
        match message.method() {
            "notifications/tools/list_changed" => {
                self.at_servers(|servers| servers.tools_changed(idx));
                self.sessions.notify_all(
                    &mut self.outbox,
                    "notifications/tools/list_changed",
                    message.line(),
                );
            }
            // A 2026-07-28 server confirming a listen stream: the gateway's
            // own, or one for a host's resource subscription.
            "notifications/subscriptions/acknowledged" => {
                let params: Value = message
                    .params
                    .and_then(|raw| serde_json::from_str(raw).ok())
                    .unwrap_or(Value::Null);
                subscriptions::on_listen_acknowledged(
                    &mut self.subscriptions,
                    &mut self.inflight,
                    &mut self.outbox,
                    &self.sessions,
                    &mut self.upstreams,
                    idx,
                    &params,
                );
            }
            "notifications/cancelled" => {
                on_server_cancelled(&mut self.inflight, &mut self.outbox, idx, message);
            }
            method @ ("notifications/prompts/list_changed"
            | "notifications/resources/list_changed") => {
                self.sessions
                    .notify_all(&mut self.outbox, method, message.line());
            }
            // An update of a private-data server's resource is its data
            // reaching the host (design §4.4).
            "notifications/resources/updated" => {
                if let Some(uri) = updated_uri(self.upstreams.name(idx), message) {
                    subscriptions::on_resource_updated(
                        &self.subscriptions,
                        &mut self.outbox,
                        &mut self.sessions,
                        &self.upstreams,
                        &self.policy,
                        idx,
                        message,
                        &uri,
                    );
                }
            }
            "notifications/message" if self.upstreams.get(idx).is_some_and(|up| up.modern) => {
                modern::log_to_hosts(
                    &self.inflight,
                    &self.sessions,
                    &self.upstreams,
                    idx,
                    message,
                    &mut self.outbox,
                );
            }
            // A host shows a progress message as a line of its own: made
            // one, with nothing hidden in it (the rest as sent). It goes
            // to the host whose request it is about, never to the others.
            "notifications/progress" => {
                let Some(session) = progress_session(&self.inflight, &self.sessions, idx, message)
                else {
                    tracing::debug!(server.id = %self.upstreams.name(idx), "a progress notification no one request in flight carries the token of is dropped");
                    return;
                };
                let line = progress_cleaned(message).unwrap_or_else(|| message.line().to_owned());
                self.outbox.host_note(session, line, None);
            }
            _ => self.sessions.note_every(&mut self.outbox, message.line()),
        }
    }
}

/// The session a server's progress notification belongs to: the one whose
/// request in flight on that server carries its progress token; with no
/// such request, as for a server's own request ([`session_for_server`]).
/// `None` when several hosts' requests carry that token: progress of one
/// host's call must never reach another host.
fn progress_session(
    inflight: &InFlight,
    sessions: &session::Sessions,
    idx: ServerIdx,
    message: &Message<'_>,
) -> Option<SessionId> {
    let token = message
        .params
        .and_then(|raw| serde_json::from_str::<Value>(raw).ok())
        .and_then(|params| params.get("progressToken").cloned())?;
    let mut carrying: Vec<SessionId> = inflight
        .requests_on(idx)
        .filter(|request| {
            request
                .params()
                .get("_meta")
                .and_then(|meta| meta.get("progressToken"))
                == Some(&token)
        })
        .map(|request| request.session)
        .collect();
    carrying.sort_unstable();
    carrying.dedup();
    match carrying.as_slice() {
        [session] => Some(*session),
        [] => session_for_server(inflight, sessions, idx),
        _ => None,
    }
}

/// The session a server's own request belongs to: the one session with
/// requests in flight on that server, else the one session there is.
/// `None` when that is not one session: a server's request carries
/// nothing that says which of several hosts' calls it is for, and a
/// question of one host's call must never reach another host.
fn session_for_server(
    inflight: &InFlight,
    sessions: &session::Sessions,
    idx: ServerIdx,
) -> Option<SessionId> {
    let mut on = inflight.sessions_on(idx);
    match (on.next(), on.next()) {
        (Some(session), None) => Some(session),
        (Some(_), Some(_)) => None,
        (None, _) => {
            let mut open = sessions
                .keys()
                .filter(|session| sessions.get(session).is_some_and(|host| !host.closed));
            match (open.next(), open.next()) {
                (Some(session), None) => Some(session),
                _ => None,
            }
        }
    }
}

/// The id (as written) of a server's response written with
/// `"result": null` (and no error), which [`Message::parse`] refuses as no
/// JSON-RPC response: an answer, if one the gateway cannot use.
fn null_result_id(line: &str) -> Option<&str> {
    let members = crate::json::members(line).ok()?;
    let once = |key: &str| {
        let mut matching = members.iter().filter(|member| member.key == key);
        match (matching.next(), matching.next()) {
            (Some(member), None) => line.get(member.value.clone()),
            _ => None,
        }
    };
    let named = |key: &str| members.iter().any(|member| member.key == key);
    if named("method") || named("error") || once("result") != Some("null") {
        return None;
    }
    once("id").filter(|id| *id != "null")
}

// === impl Lookup ===

impl lookup::Lookup<'_> {
    /// Refuses a call whose record could not be written.
    fn unrecorded(&self, cx: &CallContext, err: String) {
        // INVARIANT: a call whose record is not durable does not run. Its
        // refusal cannot be recorded either: the log is failing.
        let end = CallEnd::Refused(call::Refusal::Unrecorded(err));
        let line = records::end_line(self.policy, self.upstreams, self.sessions, cx, &end);
        if let Some(session) = self.sessions.get(&cx.request.session) {
            session.send(line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sessions(closed: &[bool]) -> session::Sessions {
        let mut sessions = session::Sessions::default();
        for (n, closed) in closed.iter().enumerate() {
            let (out, _) = mpsc::unbounded_channel();
            let mut host = HostSession::new(out, Arc::default(), Arc::default());
            host.closed = *closed;
            sessions.insert(SessionId(u32::try_from(n).unwrap()), host);
        }
        sessions
    }

    fn forwarded(inflight: &mut InFlight, server: ServerIdx, id: u64, session: u32) {
        let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"resources/read"}}"#);
        let message = Message::parse(&line).unwrap();
        let request = HostRequest::new(
            SessionId(session),
            line.clone(),
            message.spans(),
            Method::of(message.method()),
        );
        inflight.wait_up(
            server,
            id,
            UpPurpose::Forward(Box::new(request)),
            Duration::from_secs(60),
        );
    }

    /// A server cancels a request of its own it relayed to two hosts: each
    /// host is told, under the id the gateway gave it there; another
    /// server's request with that id, and the hosts' other requests, stay.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_servers_cancellation_reaches_each_host_under_the_gateways_id() {
        let mut inflight = InFlight::default();
        let relay = |server, upstream_id: &str| HostPurpose::Relay {
            server,
            generation: 1,
            upstream_id: upstream_id.to_owned(),
        };
        let wait = Duration::from_secs(60);
        let first = inflight.wait_host(SessionId(0), relay(0, "7"), wait);
        let other_server = inflight.wait_host(SessionId(0), relay(1, "7"), wait);
        let second = inflight.wait_host(SessionId(1), relay(0, "7"), wait);
        let other_request = inflight.wait_host(SessionId(1), relay(0, "8"), wait);
        let line = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"x"}}"#;
        let mut outbox = Outbox::new();
        on_server_cancelled(
            &mut inflight,
            &mut outbox,
            0,
            &Message::parse(line).unwrap(),
        );
        let mut told: Vec<(SessionId, Value)> = outbox
            .take()
            .into_iter()
            .map(|sent| match sent {
                Outgoing::HostNote(session, note, None) => {
                    (session, serde_json::from_str(&note).unwrap())
                }
                other => panic!("{other:?}"),
            })
            .collect();
        told.sort_by_key(|(session, _)| session.0);
        assert_eq!(told.len(), 2, "{told:?}");
        for ((session, note), n) in told.iter().zip([first, second]) {
            assert_eq!(*session, SessionId(if n == first { 0 } else { 1 }));
            assert_eq!(note["params"]["requestId"], format!("hintgate-{n}"));
            assert_eq!(note["params"]["reason"], "x");
        }
        assert!(inflight.take_host(SessionId(0), other_server).is_some());
        assert!(inflight.take_host(SessionId(1), other_request).is_some());
        assert!(inflight.take_host(SessionId(0), first).is_none());
    }

    #[test]
    fn a_servers_own_request_belongs_to_one_session_or_to_none() {
        let mut inflight = InFlight::default();
        // One open session, nothing in flight: it is that session's.
        let one = sessions(&[false, true]);
        assert_eq!(session_for_server(&inflight, &one, 0), Some(SessionId(0)));
        // Two open sessions, nothing in flight: nobody's.
        let two = sessions(&[false, false]);
        assert_eq!(session_for_server(&inflight, &two, 0), None);
        // The one session with requests in flight on that server.
        forwarded(&mut inflight, 0, 1, 1);
        forwarded(&mut inflight, 1, 2, 0);
        assert_eq!(session_for_server(&inflight, &two, 0), Some(SessionId(1)));
        // Two sessions' requests on that server: nobody's.
        forwarded(&mut inflight, 0, 3, 0);
        assert_eq!(session_for_server(&inflight, &two, 0), None);
    }
}
