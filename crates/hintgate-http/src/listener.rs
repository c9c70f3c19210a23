//! Taking hosts' connections: the TCP accept loop, TLS, HTTP/1.1, and the
//! bounds that keep clients which never authenticate from holding the
//! gateway.
//!
//! A connection is *waiting* from the moment it is accepted until one of its
//! requests passes `admit` (its token is valid, or none is asked for). While
//! it waits it holds a place at the [`Gate`]: at most
//! [`Limits::max_unauthenticated`] places in all and
//! [`Limits::max_unauthenticated_per_address`] from one source address. A new
//! connection that finds no place takes the place of the oldest waiting one
//! (of its own address when that address is at its bound), which is closed.
//! A host sends its request as soon as it connects, so it is admitted long
//! before a flood of silent connections could push it out, while the flood
//! only ever pushes out its own oldest members; and the gateway's open files
//! stay bounded whatever the flood, so a host's `initialize` is answered.
//!
//! Every connection also has deadlines: [`Limits::header_timeout`] for a
//! request's headers (which is also how long a kept-alive connection may sit
//! idle between requests), [`Limits::body_timeout`] for each read of a body
//! (`read_body`), and [`HANDSHAKE_TIMEOUT`](crate::tls::HANDSHAKE_TIMEOUT)
//! for a TLS handshake. A bound that is hit is logged, at most once every
//! [`REPORT_EVERY`] for each kind, with how many times it was hit since.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinSet;
use tower::ServiceExt as _;

use crate::HttpError;
use crate::tls::{HANDSHAKE_TIMEOUT, Tls};

/// How often at most a bound that is hit is logged, for each kind of bound.
pub const REPORT_EVERY: Duration = Duration::from_secs(10);

/// The bounds on hosts' connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// How long a connection has to send a request's headers; also how long
    /// a kept-alive connection may sit idle between requests.
    pub header_timeout: Duration,
    /// How long a request's body may go without a byte arriving (408).
    pub body_timeout: Duration,
    /// The most connections at once that have not sent an authenticated
    /// request.
    pub max_unauthenticated: usize,
    /// The same, from one source address.
    pub max_unauthenticated_per_address: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            max_unauthenticated: 512,
            max_unauthenticated_per_address: 64,
        }
    }
}

/// The connections that have not authenticated yet, oldest first.
#[derive(Debug)]
pub(crate) struct Gate {
    limits: Limits,
    state: Mutex<Waiting>,
    report: Report,
}

#[derive(Debug, Default)]
struct Waiting {
    next: u64,
    /// By order of arrival: the source address, and what closes it.
    places: BTreeMap<u64, (IpAddr, oneshot::Sender<()>)>,
    per_address: HashMap<IpAddr, usize>,
}

impl Waiting {
    fn remove(&mut self, place: u64) -> Option<oneshot::Sender<()>> {
        let (addr, close) = self.places.remove(&place)?;
        if let Some(count) = self.per_address.get_mut(&addr) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.per_address.remove(&addr);
            }
        }
        Some(close)
    }
}

impl Gate {
    /// A gate with `limits`.
    pub(crate) fn new(limits: Limits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            state: Mutex::new(Waiting::default()),
            report: Report::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Waiting> {
        // The state is a map and counts, each change made whole under the
        // lock: a panic elsewhere cannot leave it half changed.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for a new connection from `addr`, and what tells it that it
    /// was closed to make room; the oldest waiting connection (of `addr`,
    /// when `addr` is at its bound) gives up its place if there is none.
    pub(crate) fn enter(self: &Arc<Self>, addr: IpAddr) -> (Ticket, oneshot::Receiver<()>) {
        let mut waiting = self.lock();
        let from_addr = waiting.per_address.get(&addr).copied().unwrap_or(0);
        let evict = if from_addr >= self.limits.max_unauthenticated_per_address.max(1) {
            waiting
                .places
                .iter()
                .find(|(_, (from, _))| *from == addr)
                .map(|(place, _)| (*place, "from one address"))
        } else if waiting.places.len() >= self.limits.max_unauthenticated.max(1) {
            waiting.places.keys().next().map(|place| (*place, "in all"))
        } else {
            None
        };
        if let Some((place, bound)) = evict
            && let Some(close) = waiting.remove(place)
        {
            let _ = close.send(());
            self.report.hit(
                Bound::Unauthenticated,
                &format!(
                    "at most {} connections that have not authenticated are kept ({} from one address); the oldest was closed ({bound})",
                    self.limits.max_unauthenticated, self.limits.max_unauthenticated_per_address
                ),
            );
        }
        let place = waiting.next;
        waiting.next += 1;
        let (close, closed) = oneshot::channel();
        waiting.places.insert(place, (addr, close));
        *waiting.per_address.entry(addr).or_insert(0) += 1;
        drop(waiting);
        (
            Ticket {
                gate: Arc::clone(self),
                place,
            },
            closed,
        )
    }

    /// How many connections wait to authenticate.
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.lock().places.len()
    }
}

/// A connection's place at the [`Gate`], given up when one of its requests
/// is admitted or when it closes; requests carry it as an extension.
#[derive(Debug)]
pub(crate) struct Ticket {
    gate: Arc<Gate>,
    place: u64,
}

impl Ticket {
    /// One of the connection's requests was admitted: it no longer counts
    /// against the bound, and is no longer closed to make room.
    pub(crate) fn admitted(&self) {
        let _ = self.gate.lock().remove(self.place);
    }

    /// How long a body may go without a byte.
    pub(crate) fn body_timeout(&self) -> Duration {
        self.gate.limits.body_timeout
    }

    /// A body's read timed out.
    pub(crate) fn body_timed_out(&self) {
        self.gate.report.hit(
            Bound::Body,
            &format!(
                "a request's body sent nothing for {} s: answered 408 and closed",
                self.gate.limits.body_timeout.as_secs()
            ),
        );
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let _ = self.gate.lock().remove(self.place);
    }
}

/// The kinds of bound whose hits are logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Bound {
    Unauthenticated,
    Header,
    Body,
    Handshake,
    Accept,
}

/// Logs bounds that are hit, each kind at most once every [`REPORT_EVERY`],
/// with how many hits it stands for.
#[derive(Debug, Default)]
struct Report {
    seen: Mutex<HashMap<Bound, Hits>>,
}

/// For one kind of bound: when it was last logged, the hits since, and the
/// hits since the gateway started.
type Hits = (Option<Instant>, u64, u64);

impl Report {
    fn hit(&self, bound: Bound, what: &str) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let (last, count, total) = seen.entry(bound).or_insert((None, 0, 0));
        *count += 1;
        *total += 1;
        let now = Instant::now();
        if last.is_some_and(|last| now.duration_since(last) < REPORT_EVERY) {
            return;
        }
        tracing::warn!(times = *count, "HTTP: {what}");
        *last = Some(now);
        *count = 0;
    }

    /// How often each kind of bound was hit since the gateway started, in
    /// words; `None` when none was.
    fn totals(&self) -> Option<String> {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let words: Vec<String> = [
            (
                Bound::Unauthenticated,
                "closed to make room for a newer one (not authenticated)",
            ),
            (Bound::Header, "closed without complete request headers"),
            (Bound::Body, "answered 408 for a body that sent nothing"),
            (
                Bound::Handshake,
                "closed in a TLS handshake that did not end",
            ),
            (Bound::Accept, "not accepted"),
        ]
        .into_iter()
        .filter_map(|(bound, what)| {
            seen.get(&bound)
                .filter(|(_, _, total)| *total > 0)
                .map(|(_, _, total)| format!("{total} {what}"))
        })
        .collect();
        (!words.is_empty()).then(|| words.join("; "))
    }
}

/// Serves `router` on `listener` within `limits` until `stop` completes,
/// over TLS when `tls` is given; then each connection ends once its
/// current request is answered, and this returns when all have.
pub(crate) async fn serve(
    listener: TcpListener,
    tls: Option<Tls>,
    router: Router,
    limits: Limits,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(), HttpError> {
    let gate = Gate::new(limits);
    let (stopping, stopped) = watch::channel(false);
    let mut connections = JoinSet::new();
    let stop = std::pin::pin!(stop);
    let mut stop = stop;
    loop {
        tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, peer)) => {
                    // Each answer is one small write: without TCP_NODELAY it
                    // would wait for the host's delayed acknowledgement.
                    if let Err(err) = tcp.set_nodelay(true) {
                        tracing::debug!("TCP_NODELAY could not be set: {err}");
                    }
                    let (ticket, closed) = gate.enter(peer.ip());
                    connections.spawn(connection(
                        tcp,
                        tls.clone(),
                        router.clone(),
                        Arc::new(ticket),
                        closed,
                        stopped.clone(),
                    ));
                }
                Err(err) => {
                    // Out of open files (or another passing failure): the
                    // waiting connections still close on their deadlines,
                    // so accepting goes on after a pause.
                    gate.report.hit(Bound::Accept, &format!("a connection could not be accepted: {err}"));
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    let _ = stopping.send(true);
    while connections.join_next().await.is_some() {}
    if let Some(totals) = gate.report.totals() {
        tracing::warn!("HTTP: connections since the gateway started: {totals}");
    }
    Ok(())
}

/// One host connection, from its TLS handshake to its close.
async fn connection(
    tcp: TcpStream,
    tls: Option<Tls>,
    router: Router,
    ticket: Arc<Ticket>,
    mut closed: oneshot::Receiver<()>,
    stopped: watch::Receiver<bool>,
) {
    let gate = Arc::clone(&ticket.gate);
    let Some(tls) = tls else {
        http(tcp, router, ticket, closed, stopped).await;
        return;
    };
    let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.acceptor().accept(tcp));
    let stream = tokio::select! {
        done = handshake => match done {
            Ok(Ok(stream)) => stream,
            Ok(Err(err)) => {
                tracing::debug!("a TLS handshake failed: {err}");
                return;
            }
            Err(_) => {
                gate.report.hit(
                    Bound::Handshake,
                    &format!("a TLS handshake did not end within {} s: closed", HANDSHAKE_TIMEOUT.as_secs()),
                );
                return;
            }
        },
        // Closed to make room for a newer connection.
        Ok(()) = &mut closed => return,
    };
    http(stream, router, ticket, closed, stopped).await;
}

/// Serves HTTP/1.1 on `io` until the host closes it, a deadline passes, it
/// is closed to make room, or the gateway stops.
async fn http<I>(
    io: I,
    router: Router,
    ticket: Arc<Ticket>,
    closed: oneshot::Receiver<()>,
    mut stopped: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let gate = Arc::clone(&ticket.gate);
    let limits = gate.limits;
    let service = hyper::service::service_fn(move |request: hyper::Request<_>| {
        let mut request = request.map(Body::new);
        request.extensions_mut().insert(Arc::clone(&ticket));
        let router = router.clone();
        async move {
            let response = match router.oneshot(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            Ok::<_, Infallible>(response)
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    let mut conn = std::pin::pin!(conn);
    let mut closed = Some(closed);
    let mut stopping = false;
    loop {
        tokio::select! {
            done = conn.as_mut() => {
                if let Err(err) = done {
                    if err.is_timeout() {
                        gate.report.hit(
                            Bound::Header,
                            &format!(
                                "a connection sent no complete request headers within {} s: closed",
                                limits.header_timeout.as_secs()
                            ),
                        );
                    } else {
                        tracing::debug!("an HTTP connection ended: {err}");
                    }
                }
                return;
            }
            evicted = evicted(&mut closed) => {
                if evicted {
                    return;
                }
            }
            () = stop_asked(&mut stopped), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// Whether the connection was closed to make room (`true`) or admitted
/// (`false`, after which this waits forever).
async fn evicted(closed: &mut Option<oneshot::Receiver<()>>) -> bool {
    match closed {
        Some(receiver) => {
            let evicted = receiver.await.is_ok();
            *closed = None;
            evicted
        }
        None => std::future::pending().await,
    }
}

/// Completes when the gateway stops (or whatever stops it is gone).
async fn stop_asked(stopped: &mut watch::Receiver<bool>) {
    let _ = stopped.wait_for(|stop| *stop).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(all: usize, per_address: usize) -> Limits {
        Limits {
            max_unauthenticated: all,
            max_unauthenticated_per_address: per_address,
            ..Limits::default()
        }
    }

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn the_totals_count_every_hit_including_those_the_log_skipped() {
        let report = Report::default();
        assert_eq!(report.totals(), None);
        for _ in 0..5 {
            report.hit(Bound::Unauthenticated, "closed");
        }
        report.hit(Bound::Header, "closed");
        assert_eq!(
            report.totals().as_deref(),
            Some(
                "5 closed to make room for a newer one (not authenticated); 1 closed without complete request headers"
            )
        );
    }

    #[test]
    fn a_full_gate_closes_the_oldest_waiting_connection_and_keeps_its_bound() {
        let gate = Gate::new(limits(3, 3));
        let (_a, mut a_closed) = gate.enter(ip(1));
        let (_b, mut b_closed) = gate.enter(ip(2));
        let (_c, mut c_closed) = gate.enter(ip(3));
        assert_eq!(gate.waiting(), 3);
        let (_d, mut d_closed) = gate.enter(ip(4));
        assert_eq!(gate.waiting(), 3);
        assert_eq!(a_closed.try_recv(), Ok(()), "the oldest is closed");
        assert!(b_closed.try_recv().is_err());
        assert!(c_closed.try_recv().is_err());
        assert!(d_closed.try_recv().is_err());
    }

    #[test]
    fn an_address_at_its_bound_pushes_out_only_its_own_connections() {
        let gate = Gate::new(limits(10, 2));
        let (_other, mut other_closed) = gate.enter(ip(9));
        let (_a1, mut a1_closed) = gate.enter(ip(1));
        let (_a2, mut a2_closed) = gate.enter(ip(1));
        let (_a3, _) = gate.enter(ip(1));
        assert_eq!(a1_closed.try_recv(), Ok(()));
        assert!(a2_closed.try_recv().is_err());
        assert!(
            other_closed.try_recv().is_err(),
            "another address's older connection keeps its place"
        );
        assert_eq!(gate.waiting(), 3);
    }

    #[test]
    fn an_admitted_connection_leaves_the_gate_and_is_never_closed_to_make_room() {
        let gate = Gate::new(limits(2, 2));
        let (host, mut host_closed) = gate.enter(ip(1));
        host.admitted();
        assert_eq!(gate.waiting(), 0);
        let mut floods = Vec::new();
        for _ in 0..50 {
            floods.push(gate.enter(ip(1)));
        }
        assert_eq!(gate.waiting(), 2);
        assert!(
            matches!(
                host_closed.try_recv(),
                Err(oneshot::error::TryRecvError::Closed)
            ),
            "admitted: its closer is gone, it was never told to close"
        );
        drop(floods);
        assert_eq!(
            gate.waiting(),
            0,
            "a dropped connection gives its place back"
        );
    }
}
