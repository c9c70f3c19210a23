//! Where each line the gateway writes to a host session goes: to the HTTP
//! exchange (a POST) whose request it answers or belongs to, to the
//! session's standalone event stream (a legacy GET), or, when neither is
//! there, into a bounded backlog.
//!
//! One task per session ([`Routes::run`]) takes the gateway's lines in
//! order and delivers each; a line counts as waiting for the host (the
//! gateway's bound on what a host leaves unread) until it is in the
//! exchange's or stream's channel, so a host that does not read its
//! streams is held to the same bound as a stdio host that does not read.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};

use hintgate_proxy::frame::{Kind, Message};
use hintgate_proxy::{HostConn, HostSink};
use serde_json::Value;
use tokio::sync::mpsc;

/// How many frames wait in one exchange's or stream's channel before the
/// session's task waits for the host to read.
pub(crate) const CHANNEL_FRAMES: usize = 32;

/// How many events a session keeps for a host that resumes a stream
/// (`Last-Event-ID`), and the most bytes they may take.
const HISTORY_EVENTS: usize = 256;
const HISTORY_BYTES: usize = 1024 * 1024;

/// The most bytes the resumption histories of every session hold together:
/// past it, the oldest events of the largest histories are dropped first,
/// so a principal with many sessions cannot hold a megabyte in each.
pub(crate) const HISTORY_BUDGET_BYTES: usize = 64 * 1024 * 1024;

/// How many lines with nowhere to go a legacy session keeps for its next
/// standalone stream, and the most bytes.
const BACKLOG_LINES: usize = 64;
const BACKLOG_BYTES: usize = 1024 * 1024;

/// One frame for an exchange or stream.
#[derive(Debug)]
pub(crate) struct Frame {
    /// The SSE event id (`STREAM-SEQ`) it is sent under.
    pub event_id: String,
    /// The JSON-RPC message, shared with the history (no copy each).
    pub line: Arc<String>,
    /// It is the answer that ends its exchange.
    pub last: bool,
}

/// What a session's routes know: the open exchanges, the standalone stream,
/// the backlog and the history kept for resumption.
#[derive(Debug, Default)]
pub(crate) struct Routes {
    inner: Mutex<Inner>,
    /// The budget its history counts against, and its key there.
    budget: Option<(Arc<HistoryBudget>, u64)>,
}

/// What the resumption histories of every session hold together, and the
/// bound on it ([`HISTORY_BUDGET_BYTES`] in the gateway).
#[derive(Debug)]
pub(crate) struct HistoryBudget {
    limit: usize,
    state: Mutex<BudgetState>,
}

#[derive(Debug, Default)]
struct BudgetState {
    /// The bytes of every history.
    total: usize,
    /// Each session's history: its bytes, and the routes that hold it.
    histories: HashMap<u64, (usize, Weak<Routes>)>,
}

/// Why a stream cannot be resumed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Unresumable {
    /// This session never had the stream, or it ended and was forgotten.
    Unknown,
    /// Events after the one named were dropped from the history (its
    /// bounds, or the budget across sessions): the host would miss them.
    Dropped,
}

#[derive(Debug, Default)]
struct Inner {
    /// Open exchanges by the request id the gateway answers under (raw
    /// JSON).
    exchanges: HashMap<String, Exchange>,
    /// The order exchanges opened in (their ids), newest last.
    order: Vec<String>,
    /// The legacy standalone stream (GET), with its stream number.
    standalone: Option<(u64, mpsc::Sender<Frame>)>,
    /// Lines that had nowhere to go (a legacy session without a GET stream).
    backlog: VecDeque<String>,
    backlog_bytes: usize,
    /// The last events sent, for `Last-Event-ID`: (stream, seq, line, last).
    history: VecDeque<(u64, u64, Arc<String>, bool)>,
    history_bytes: usize,
    /// For each stream, the number of the newest event dropped from the
    /// history: a resumption from before it would miss events.
    dropped: HashMap<u64, u64>,
    /// The next stream number.
    next_stream: u64,
    /// Each stream's next event number.
    seqs: HashMap<u64, u64>,
    /// Streams whose exchange ended or whose host went away and that a
    /// resumption may take over: stream number → the exchange's id.
    resumable: HashMap<u64, String>,
}

/// One POST waiting for its answer.
#[derive(Debug)]
struct Exchange {
    /// The stream number its events go under.
    stream: u64,
    /// Where its frames go; `None` when the host went away (its frames are
    /// then only kept for a resumption).
    tx: Option<mpsc::Sender<Frame>>,
    /// The progress token its request carried, raw JSON.
    progress: Option<String>,
    /// May carry other messages than its answer (a legacy request's stream
    /// may carry the server's questions; a 2026-07-28 one only related
    /// notifications).
    takes_requests: bool,
    /// The id the host gave, when the gateway knows the request under
    /// another (a 2026-07-28 request's id is made unique per principal).
    host_id: Option<String>,
    /// How many resumptions took its stream over; 0 while the POST that
    /// opened it still has it.
    taken_over: u64,
    /// Its host takes a JSON body: an answer that comes before anything
    /// else on its stream goes as the POST's body, with no event id, and
    /// so is not kept for a resumption (nothing could name it).
    takes_json: bool,
}

/// Where a line goes.
enum Target {
    Exchange(String),
    Standalone,
    Backlog,
    Drop,
}

// === impl Routes ===

impl Routes {
    /// Routes whose history counts against `budget`, under `key` (unique
    /// per session).
    pub fn with_budget(budget: Arc<HistoryBudget>, key: u64) -> Arc<Self> {
        let routes = Arc::new(Self {
            inner: Mutex::default(),
            budget: Some((Arc::clone(&budget), key)),
        });
        budget.enroll(key, Arc::downgrade(&routes));
        routes
    }

    /// Opens an exchange for the request the gateway knows under `id`;
    /// returns the receiver of its frames. `host_id` is the id to give the
    /// host back, when it differs; `takes_json`: the host takes a JSON
    /// body, so an answer that comes first is sent as the POST's body
    /// (and not kept for a resumption).
    pub fn open(
        &self,
        id: &str,
        progress: Option<String>,
        takes_requests: bool,
        host_id: Option<String>,
        takes_json: bool,
    ) -> Option<mpsc::Receiver<Frame>> {
        let mut inner = self.inner.lock().ok()?;
        if inner.exchanges.contains_key(id) {
            return None;
        }
        let stream = inner.new_stream();
        let (tx, rx) = mpsc::channel(CHANNEL_FRAMES);
        inner.exchanges.insert(
            id.to_owned(),
            Exchange {
                stream,
                tx: Some(tx),
                progress,
                takes_requests,
                host_id,
                taken_over: 0,
                takes_json,
            },
        );
        inner.order.push(id.to_owned());
        Some(rx)
    }

    /// The host went away from the exchange of `id` before its answer: its
    /// frames are kept for a resumption only. Returns whether it was open
    /// on the POST that opened it (a resumption may have taken it over
    /// before the gateway saw that POST's connection close).
    pub fn abandon(&self, id: &str) -> bool {
        let Ok(mut inner) = self.inner.lock() else {
            return false;
        };
        let Some(exchange) = inner.exchanges.get_mut(id) else {
            return false;
        };
        if exchange.taken_over > 0 {
            return false;
        }
        exchange.tx = None;
        let stream = exchange.stream;
        inner.resumable.insert(stream, id.to_owned());
        true
    }

    /// Forgets an exchange entirely (a 2026-07-28 request the host
    /// cancelled by closing its stream).
    pub fn forget(&self, id: &str) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.remove(id);
        }
    }

    /// Opens the standalone stream: its number, and the receiver of its
    /// frames; `None` when one is open already.
    pub fn open_standalone(&self) -> Option<(u64, mpsc::Receiver<Frame>)> {
        let mut inner = self.inner.lock().ok()?;
        if inner
            .standalone
            .as_ref()
            .is_some_and(|(_, tx)| !tx.is_closed())
        {
            return None;
        }
        let stream = inner.new_stream();
        // Room for the whole backlog, which goes first.
        let (tx, rx) = mpsc::channel(CHANNEL_FRAMES + BACKLOG_LINES);
        while let Some(line) = inner.backlog.pop_front() {
            inner.backlog_bytes = inner.backlog_bytes.saturating_sub(line.len());
            let frame = inner.frame(stream, line, false);
            let _ = tx.try_send(frame);
        }
        inner.standalone = Some((stream, tx));
        Some((stream, rx))
    }

    /// Resumes stream `stream` after event `seq`: the events kept since are
    /// replayed into the returned receiver, and the rest of the stream
    /// follows there.
    ///
    /// # Errors
    ///
    /// [`Unresumable::Unknown`] for a stream this session cannot resume,
    /// [`Unresumable::Dropped`] when an event after `seq` is no longer kept.
    pub fn resume(&self, stream: u64, seq: u64) -> Result<mpsc::Receiver<Frame>, Unresumable> {
        let mut inner = self.inner.lock().map_err(|_| Unresumable::Unknown)?;
        if inner
            .dropped
            .get(&stream)
            .is_some_and(|dropped| *dropped > seq)
        {
            return Err(Unresumable::Dropped);
        }
        let replay: Vec<Frame> = inner
            .history
            .iter()
            .filter(|(s, n, _, _)| *s == stream && *n > seq)
            .map(|(s, n, line, last)| Frame {
                event_id: format!("{s}-{n}"),
                line: Arc::clone(line),
                last: *last,
            })
            .collect();
        // A host may resume as soon as its connection drops, before the
        // gateway sees it close: the exchange still open on that stream is
        // taken over all the same.
        let id = inner.resumable.get(&stream).cloned().or_else(|| {
            inner
                .exchanges
                .iter()
                .find(|(_, exchange)| exchange.stream == stream)
                .map(|(id, _)| id.clone())
        });
        let capacity = CHANNEL_FRAMES.max(replay.len() + 1);
        let (tx, rx) = mpsc::channel(capacity);
        let ended = replay.iter().any(|frame| frame.last);
        let known = !replay.is_empty() || id.is_some();
        if !known {
            return Err(Unresumable::Unknown);
        }
        for frame in replay {
            let _ = tx.try_send(frame);
        }
        if !ended
            && let Some(id) = id
            && let Some(exchange) = inner.exchanges.get_mut(&id)
        {
            exchange.tx = Some(tx);
            exchange.taken_over += 1;
            inner.resumable.remove(&stream);
        }
        Ok(rx)
    }

    /// Forgets what is kept for resuming streams that have ended: the
    /// events, and the markers of dropped ones, of every stream that has no
    /// exchange open (its answer was sent, or it was cancelled) and is not
    /// the open standalone stream. A stream still waiting for its answer,
    /// the host there or gone, keeps everything. For a session the host has
    /// not used for a while ([`crate::RESUME_WINDOW`]), whose host may be
    /// gone for good: what it holds then is the session itself, not a
    /// history of up to [`HISTORY_EVENTS`] events until it idles out.
    /// Returns how many events were forgotten.
    pub fn forget_ended(&self) -> usize {
        let Ok(mut inner) = self.inner.lock() else {
            return 0;
        };
        {
            let live: std::collections::HashSet<u64> = inner
                .exchanges
                .values()
                .map(|exchange| exchange.stream)
                .chain(
                    inner
                        .standalone
                        .as_ref()
                        .filter(|(_, tx)| !tx.is_closed())
                        .map(|(stream, _)| *stream),
                )
                .collect();
            let before = inner.history.len();
            inner
                .history
                .retain(|(stream, _, _, _)| live.contains(stream));
            inner.history_bytes = inner.history.iter().map(|(_, _, line, _)| line.len()).sum();
            inner.dropped.retain(|stream, _| live.contains(stream));
            inner.resumable.retain(|stream, _| live.contains(stream));
            inner.history.shrink_to_fit();
            inner.dropped.shrink_to_fit();
            inner.resumable.shrink_to_fit();
            inner.seqs.shrink_to_fit();
            inner.exchanges.shrink_to_fit();
            inner.order.shrink_to_fit();
            if let Some((budget, key)) = &self.budget {
                budget.record(*key, inner.history_bytes);
            }
            before - inner.history.len()
        }
    }

    /// Where a line of the gateway's goes, and the frame (with the host's
    /// own id put back where the gateway knows the request under another).
    fn target(&self, inner: &Inner, message: &Message<'_>) -> Target {
        match message.kind() {
            Kind::Response => {
                let id = message.id_text();
                if inner.exchanges.contains_key(id) {
                    Target::Exchange(id.to_owned())
                } else if inner.standalone.is_some() {
                    Target::Standalone
                } else {
                    Target::Drop
                }
            }
            Kind::Request | Kind::Notification => {
                let params: Option<Value> = message
                    .params
                    .and_then(|raw| serde_json::from_str(raw).ok());
                // Progress goes with the request it is about.
                let token = params
                    .as_ref()
                    .and_then(|params| params.get("progressToken"))
                    .map(Value::to_string);
                if let Some(token) = token
                    && let Some(id) = inner
                        .exchanges
                        .iter()
                        .find(|(_, exchange)| exchange.progress.as_deref() == Some(token.as_str()))
                        .map(|(id, _)| id.clone())
                {
                    return Target::Exchange(id);
                }
                // A 2026-07-28 subscription's notification goes on its
                // listen request's stream.
                let subscription = params
                    .as_ref()
                    .and_then(|params| params.get("_meta"))
                    .and_then(|meta| meta.get("io.modelcontextprotocol/subscriptionId"))
                    .map(Value::to_string);
                if let Some(subscription) = subscription {
                    return if inner.exchanges.contains_key(&subscription) {
                        Target::Exchange(subscription)
                    } else {
                        Target::Drop
                    };
                }
                // A legacy server's question, or a note of the gateway's:
                // with the newest exchange that may carry it (the request
                // it is most likely about), else the standalone stream.
                let newest = inner
                    .order
                    .iter()
                    .rev()
                    .find(|id| {
                        inner.exchanges.get(*id).is_some_and(|exchange| {
                            exchange.takes_requests && exchange.tx.is_some()
                        })
                    })
                    .cloned();
                let is_request = message.kind() == Kind::Request;
                match (newest, &inner.standalone) {
                    (_, Some(_)) if !is_request => Target::Standalone,
                    (Some(id), _) => Target::Exchange(id),
                    (None, Some(_)) => Target::Standalone,
                    (None, None) => Target::Backlog,
                }
            }
        }
    }

    /// Takes the gateway's lines for this session in order and delivers
    /// each, until the gateway stops or the session closes.
    pub async fn run(
        self: Arc<Self>,
        conn: Arc<HostConn>,
        mut lines: mpsc::UnboundedReceiver<String>,
        modern: bool,
    ) {
        while let Some(line) = lines.recv().await {
            let len = line.len();
            let delivery = self.place(line, modern);
            // With this session's lock released: the budget may take from
            // any session's history.
            if let Some((budget, _)) = &self.budget {
                budget.enforce();
            }
            if let Some((tx, frame)) = delivery {
                // Waits while the host does not read this stream: the
                // session's other lines wait too, as a stdio host's would.
                let _ = tx.send(frame).await;
            }
            conn.delivered(len).await;
        }
    }

    /// Places `line` now, when it can go without waiting: its exchange's or
    /// stream's channel has room (or it goes to the backlog, or nowhere).
    /// Otherwise gives it back with nothing recorded. Only the gateway's
    /// loop and [`Routes::run`] send into these channels, and the loop
    /// offers only while `run` has nothing to deliver, so room found here
    /// is still there when the frame is sent.
    fn offer(&self, line: String, modern: bool) -> Option<String> {
        let delivery = {
            let Ok(mut inner) = self.inner.lock() else {
                return Some(line);
            };
            let placed = match self.place_in(&mut inner, line, modern, true) {
                Ok(placed) => placed,
                Err(line) => return Some(line),
            };
            if let Some((budget, key)) = &self.budget {
                budget.record(*key, inner.history_bytes);
            }
            placed
        };
        if let Some((budget, _)) = &self.budget {
            budget.enforce();
        }
        if let Some((tx, frame)) = delivery {
            // Room was there; a host gone meanwhile only loses the frame,
            // as in `run`.
            let _ = tx.try_send(frame);
        }
        None
    }

    /// Decides where `line` goes and records it; returns the channel to send
    /// it into, if any.
    fn place(&self, line: String, modern: bool) -> Option<(mpsc::Sender<Frame>, Frame)> {
        let mut inner = self.inner.lock().ok()?;
        let placed = self.place_in(&mut inner, line, modern, false).ok()?;
        if let Some((budget, key)) = &self.budget {
            budget.record(*key, inner.history_bytes);
        }
        placed
    }

    /// Places `line`: records it and returns the channel to send it into,
    /// if any. With `now`, a line whose channel has no room is given back
    /// (`Err`) with nothing recorded.
    fn place_in(
        &self,
        inner: &mut Inner,
        line: String,
        modern: bool,
        now: bool,
    ) -> Result<Option<(mpsc::Sender<Frame>, Frame)>, String> {
        let Ok(message) = Message::parse(&line) else {
            tracing::warn!("a line to an HTTP host that is not JSON-RPC was dropped");
            return Ok(None);
        };
        let target = self.target(inner, &message);
        if now && !inner.has_room(&target) {
            return Err(line);
        }
        let last = message.kind() == Kind::Response;
        Ok(match target {
            Target::Exchange(id) => {
                let (stream, host_id, json_body) = {
                    let Some(exchange) = inner.exchanges.get(&id) else {
                        return Ok(None);
                    };
                    // The answer, before any other event of its stream, to
                    // the POST that opened it, whose host takes JSON: it
                    // goes as that POST's body (see `exchange`).
                    let json_body = last
                        && exchange.takes_json
                        && exchange.taken_over == 0
                        && exchange.tx.is_some()
                        && !inner.seqs.contains_key(&exchange.stream);
                    (exchange.stream, exchange.host_id.clone(), json_body)
                };
                let line = match &host_id {
                    Some(host_id) if last => message.with_id(host_id),
                    Some(host_id) if modern => with_subscription(&line, host_id),
                    _ => line,
                };
                let frame = if json_body {
                    Frame {
                        event_id: String::new(),
                        line: Arc::new(line),
                        last,
                    }
                } else {
                    inner.frame(stream, line, last)
                };
                let tx = inner
                    .exchanges
                    .get(&id)
                    .and_then(|exchange| exchange.tx.clone());
                if last {
                    inner.remove(&id);
                }
                tx.map(|tx| (tx, frame))
            }
            Target::Standalone => {
                let Some((stream, tx)) = inner.standalone.clone() else {
                    return Ok(None);
                };
                let frame = inner.frame(stream, line, false);
                Some((tx, frame))
            }
            Target::Backlog => {
                inner.backlog_bytes += line.len();
                inner.backlog.push_back(line);
                while inner.backlog.len() > BACKLOG_LINES || inner.backlog_bytes > BACKLOG_BYTES {
                    if let Some(old) = inner.backlog.pop_front() {
                        inner.backlog_bytes = inner.backlog_bytes.saturating_sub(old.len());
                        tracing::warn!(
                            "a message for an HTTP host with no event stream open was dropped (the backlog is full)"
                        );
                    }
                }
                None
            }
            Target::Drop => {
                tracing::debug!("a message for an HTTP host had no exchange or stream to go to");
                None
            }
        })
    }
}

/// A session's routes as the gateway's [`HostSink`]: the loop places each
/// line itself while nothing waits for [`Routes::run`], one task wake-up
/// fewer per line.
#[derive(Debug)]
pub(crate) struct Sink {
    /// The session's routes.
    pub routes: Arc<Routes>,
    /// The session speaks 2026-07-28.
    pub modern: bool,
}

impl HostSink for Sink {
    fn offer(&self, line: String) -> Option<String> {
        self.routes.offer(line, self.modern)
    }
}

impl Drop for Routes {
    fn drop(&mut self) {
        if let Some((budget, key)) = &self.budget {
            budget.forget(*key);
        }
    }
}

// === impl HistoryBudget ===

impl HistoryBudget {
    /// A budget of `limit` bytes across every session's history.
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            state: Mutex::default(),
        })
    }

    fn enroll(&self, key: u64, routes: Weak<Routes>) {
        if let Ok(mut state) = self.state.lock() {
            state.histories.insert(key, (0, routes));
        }
    }

    fn forget(&self, key: u64) {
        if let Ok(mut state) = self.state.lock()
            && let Some((bytes, _)) = state.histories.remove(&key)
        {
            state.total = state.total.saturating_sub(bytes);
        }
    }

    /// Session `key`'s history now holds `bytes`.
    fn record(&self, key: u64, bytes: usize) {
        if let Ok(mut state) = self.state.lock() {
            let Some(entry) = state.histories.get_mut(&key) else {
                return;
            };
            let before = std::mem::replace(&mut entry.0, bytes);
            state.total = state.total.saturating_sub(before).saturating_add(bytes);
        }
    }

    /// The bytes every history holds together.
    #[cfg(test)]
    pub fn total(&self) -> usize {
        self.state.lock().map_or(0, |state| state.total)
    }

    /// While the histories hold more than the limit, drops the oldest
    /// events of the largest one (down to the size of the next largest,
    /// or until the histories fit). Takes one session's lock at a time, and
    /// never while holding the budget's.
    pub fn enforce(&self) {
        loop {
            let (victim, floor, excess) = {
                let Ok(mut state) = self.state.lock() else {
                    return;
                };
                if state.total <= self.limit {
                    return;
                }
                let excess = state.total - self.limit;
                let mut largest: Option<(u64, usize)> = None;
                let mut second = 0;
                for (key, (bytes, _)) in &state.histories {
                    match largest {
                        Some((_, most)) if *bytes <= most => second = second.max(*bytes),
                        _ => {
                            if let Some((_, most)) = largest {
                                second = second.max(most);
                            }
                            largest = Some((*key, *bytes));
                        }
                    }
                }
                let Some((key, bytes)) = largest else {
                    return;
                };
                let routes = state
                    .histories
                    .get(&key)
                    .and_then(|(_, routes)| routes.upgrade());
                let Some(routes) = routes else {
                    // Its routes are gone: so is its history.
                    state.histories.remove(&key);
                    state.total = state.total.saturating_sub(bytes);
                    continue;
                };
                (routes, second, excess)
            };
            let Ok(mut inner) = victim.inner.lock() else {
                return;
            };
            let target = inner.history_bytes.saturating_sub(excess).max(floor);
            let mut dropped = 0_usize;
            while inner.history_bytes > target || (dropped == 0 && inner.history_bytes > 0) {
                if !inner.drop_oldest() {
                    break;
                }
                dropped += 1;
            }
            if dropped > 0 {
                tracing::debug!(
                    dropped,
                    "the resumption histories were past their budget: the oldest events of the largest were dropped"
                );
            }
            let bytes = inner.history_bytes;
            drop(inner);
            if let Some((_, key)) = &victim.budget {
                self.record(*key, bytes);
            }
            if dropped == 0 {
                return;
            }
        }
    }
}

// === impl Inner ===

impl Inner {
    /// Whether a line for `target` can go without waiting: its exchange's
    /// or stream's channel has room, or it goes to the backlog or nowhere.
    fn has_room(&self, target: &Target) -> bool {
        match target {
            Target::Exchange(id) => self
                .exchanges
                .get(id)
                .and_then(|exchange| exchange.tx.as_ref())
                .is_none_or(|tx| tx.capacity() > 0),
            Target::Standalone => self
                .standalone
                .as_ref()
                .is_none_or(|(_, tx)| tx.capacity() > 0),
            Target::Backlog | Target::Drop => true,
        }
    }

    fn new_stream(&mut self) -> u64 {
        self.next_stream += 1;
        self.next_stream
    }

    /// A frame of `stream`, numbered and kept in the history.
    fn frame(&mut self, stream: u64, line: String, last: bool) -> Frame {
        let seq = self.seqs.entry(stream).or_insert(0);
        *seq += 1;
        let seq = *seq;
        self.history_bytes += line.len();
        let line = Arc::new(line);
        self.history
            .push_back((stream, seq, Arc::clone(&line), last));
        while self.history.len() > HISTORY_EVENTS || self.history_bytes > HISTORY_BYTES {
            if !self.drop_oldest() {
                break;
            }
        }
        Frame {
            event_id: format!("{stream}-{seq}"),
            line,
            last,
        }
    }

    /// Drops the oldest event of the history, noting that its stream can
    /// no longer be resumed from before it. Returns whether there was one.
    fn drop_oldest(&mut self) -> bool {
        let Some((stream, seq, old, last)) = self.history.pop_front() else {
            return false;
        };
        self.history_bytes = self.history_bytes.saturating_sub(old.len());
        if last {
            // The answer that ended its stream, and so (oldest first) the
            // stream's last event kept: nothing of it is left to resume.
            self.dropped.remove(&stream);
        } else {
            self.dropped.insert(stream, seq);
        }
        // A marker is kept only while its stream could be resumed.
        if self.dropped.len() > 2 * HISTORY_EVENTS {
            let history = &self.history;
            let resumable = &self.resumable;
            self.dropped.retain(|stream, _| {
                resumable.contains_key(stream) || history.iter().any(|(s, _, _, _)| s == stream)
            });
        }
        true
    }

    fn remove(&mut self, id: &str) {
        if let Some(exchange) = self.exchanges.remove(id) {
            self.resumable.remove(&exchange.stream);
            self.seqs.remove(&exchange.stream);
        }
        self.order.retain(|open| open != id);
    }
}

/// A 2026-07-28 subscription notification with the host's own listen id in
/// `_meta`, where the gateway wrote the id it knows the request under.
fn with_subscription(line: &str, host_id: &str) -> String {
    let Ok(mut value) = serde_json::from_str::<Value>(line) else {
        return line.to_owned();
    };
    let Ok(host_id) = serde_json::from_str::<Value>(host_id) else {
        return line.to_owned();
    };
    if let Some(meta) = value
        .get_mut("params")
        .and_then(|params| params.get_mut("_meta"))
        .and_then(Value::as_object_mut)
        && meta.contains_key("io.modelcontextprotocol/subscriptionId")
    {
        meta.insert("io.modelcontextprotocol/subscriptionId".to_owned(), host_id);
        return value.to_string();
    }
    line.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_offered_from_the_loop_goes_at_once_while_there_is_room_and_is_given_back_untouched_when_not()
     {
        let routes = Arc::new(Routes::default());
        let sink = Sink {
            routes: Arc::clone(&routes),
            modern: false,
        };
        let mut rx = routes.open("7", None, true, None, false).unwrap();
        // Progress for the request fills its channel, each placed at once.
        let note = |n: usize| {
            format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":"t","progress":{n}}}}}"#
            )
        };
        for n in 0..CHANNEL_FRAMES {
            assert_eq!(sink.offer(note(n)), None, "frame {n} had room");
        }
        // Full: the answer is given back as it was, nothing recorded, and
        // the exchange stays open for the task that waits for room.
        let answer = r#"{"jsonrpc":"2.0","id":7,"result":{}}"#.to_owned();
        assert_eq!(sink.offer(answer.clone()), Some(answer.clone()));
        let held = routes.inner.lock().unwrap().history.len();
        assert_eq!(held, CHANNEL_FRAMES);
        // The host reads one: the answer now goes, after every note, under
        // the next event id, and ends the exchange.
        let first = rx.try_recv().unwrap();
        assert_eq!(first.event_id, "1-1");
        assert_eq!(sink.offer(answer), None);
        let mut last = None;
        while let Ok(frame) = rx.try_recv() {
            last = Some(frame);
        }
        let last = last.unwrap();
        assert!(last.last);
        assert_eq!(last.event_id, format!("1-{}", CHANNEL_FRAMES + 1));
        assert!(!routes.inner.lock().unwrap().exchanges.contains_key("7"));
    }

    #[test]
    fn an_answer_sent_as_the_json_body_of_its_post_is_not_kept_for_a_resumption() {
        let budget = HistoryBudget::new(HISTORY_BUDGET_BYTES);
        let routes = Routes::with_budget(Arc::clone(&budget), 1);
        let mut rx = routes.open("7", None, true, None, true).unwrap();
        let answer = r#"{"jsonrpc":"2.0","id":7,"result":{}}"#;
        let (tx, frame) = routes.place(answer.to_owned(), false).unwrap();
        tx.try_send(frame).unwrap();
        let frame = rx.try_recv().unwrap();
        // Delivered whole, as the POST's body: no event id, nothing kept.
        assert!(frame.last);
        assert_eq!(frame.line.as_str(), answer);
        assert_eq!(frame.event_id, "");
        assert!(routes.inner.lock().unwrap().history.is_empty());
        assert_eq!(budget.total(), 0);
        assert_eq!(routes.resume(1, 0).unwrap_err(), Unresumable::Unknown);
        assert!(!routes.inner.lock().unwrap().exchanges.contains_key("7"));
    }

    #[test]
    fn an_answer_after_other_events_of_its_stream_is_kept_even_when_the_host_takes_json() {
        let routes = Routes::default();
        let mut rx = routes
            .open("7", Some("\"tok\"".to_owned()), true, None, true)
            .unwrap();
        let note = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"tok","progress":1}}"#;
        let answer = r#"{"jsonrpc":"2.0","id":7,"result":{}}"#;
        for line in [note, answer] {
            let (tx, frame) = routes.place(line.to_owned(), false).unwrap();
            tx.try_send(frame).unwrap();
        }
        // The stream is an event stream now: both events have ids, and a
        // host that lost it after the first gets the answer again.
        assert_eq!(rx.try_recv().unwrap().event_id, "1-1");
        assert_eq!(rx.try_recv().unwrap().event_id, "1-2");
        let mut resumed = routes.resume(1, 1).unwrap();
        let again = resumed.try_recv().unwrap();
        assert_eq!(
            (again.event_id.as_str(), again.line.as_str()),
            ("1-2", answer)
        );
    }

    #[test]
    fn an_answer_to_a_host_that_takes_only_event_streams_is_kept_for_a_resumption() {
        let routes = Routes::default();
        let _rx = routes.open("7", None, true, None, false).unwrap();
        let answer = r#"{"jsonrpc":"2.0","id":7,"result":{}}"#;
        let (_, frame) = routes.place(answer.to_owned(), false).unwrap();
        assert_eq!(frame.event_id, "1-1");
        let mut resumed = routes.resume(1, 0).unwrap();
        assert_eq!(resumed.try_recv().unwrap().line.as_str(), answer);
    }

    #[test]
    fn an_answer_goes_to_its_exchange_and_ends_it() {
        let routes = Routes::default();
        let mut rx = routes.open("7", None, true, None, false).unwrap();
        let (tx, frame) = routes
            .place(r#"{"jsonrpc":"2.0","id":7,"result":{}}"#.to_owned(), false)
            .unwrap();
        assert!(frame.last);
        tx.try_send(frame).unwrap();
        assert_eq!(rx.try_recv().unwrap().event_id, "1-1");
        // Ended: a second answer under the id has nowhere to go.
        assert!(
            routes
                .place(r#"{"jsonrpc":"2.0","id":7,"result":{}}"#.to_owned(), false)
                .is_none()
        );
    }

    #[test]
    fn progress_goes_with_its_request_and_questions_with_the_newest() {
        let routes = Routes::default();
        let _a = routes
            .open("1", Some("\"tok\"".to_owned()), true, None, false)
            .unwrap();
        let _b = routes.open("2", None, true, None, false).unwrap();
        let note = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"tok","progress":1}}"#;
        let (_, frame) = routes.place(note.to_owned(), false).unwrap();
        assert!(frame.event_id.starts_with("1-"));
        let question = r#"{"jsonrpc":"2.0","id":"q","method":"elicitation/create","params":{}}"#;
        let (_, frame) = routes.place(question.to_owned(), false).unwrap();
        assert!(frame.event_id.starts_with("2-"));
    }

    #[test]
    fn a_modern_answer_gets_the_hosts_own_id_back() {
        let routes = Routes::default();
        let _rx = routes
            .open("\"m1\"", None, false, Some("1".to_owned()), false)
            .unwrap();
        let (_, frame) = routes
            .place(
                r#"{"jsonrpc":"2.0","id":"m1","result":{}}"#.to_owned(),
                true,
            )
            .unwrap();
        assert_eq!(*frame.line, r#"{"jsonrpc":"2.0","id":1,"result":{}}"#);
    }

    #[test]
    fn a_resumption_before_the_gateway_saw_the_post_close_takes_its_stream_over() {
        let routes = Routes::default();
        let _post = routes
            .open("5", Some("9".to_owned()), true, None, false)
            .unwrap();
        let note = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":9,"progress":1}}"#;
        let _ = routes.place(note.to_owned(), false).unwrap();
        // The host resumes at once; its POST's close is seen only after.
        let mut resumed = routes.resume(1, 1).unwrap();
        assert!(!routes.abandon("5"));
        let (tx, frame) = routes
            .place(r#"{"jsonrpc":"2.0","id":5,"result":{}}"#.to_owned(), false)
            .unwrap();
        tx.try_send(frame).unwrap();
        let answer = resumed.try_recv().unwrap();
        assert!(answer.last);
        assert_eq!(answer.event_id, "1-2");
    }

    #[test]
    fn a_stream_the_host_left_is_resumed_from_the_event_after_the_last_seen() {
        let routes = Routes::default();
        let _rx = routes
            .open("5", Some("9".to_owned()), true, None, false)
            .unwrap();
        let note = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":9,"progress":1}}"#;
        let _ = routes.place(note.to_owned(), false).unwrap();
        assert!(routes.abandon("5"));
        // Sent while nobody listened: kept.
        assert!(routes.place(note.to_owned(), false).is_none());
        let mut resumed = routes.resume(1, 1).unwrap();
        assert_eq!(resumed.try_recv().unwrap().event_id, "1-2");
        let (tx, frame) = routes
            .place(r#"{"jsonrpc":"2.0","id":5,"result":{}}"#.to_owned(), false)
            .unwrap();
        tx.try_send(frame).unwrap();
        let answer = resumed.try_recv().unwrap();
        assert!(answer.last);
        assert_eq!(answer.event_id, "1-3");
        // A stream this session never had is not resumed.
        assert_eq!(routes.resume(99, 0).err(), Some(Unresumable::Unknown));
    }

    #[test]
    fn a_legacy_note_without_a_stream_waits_in_a_bounded_backlog() {
        let routes = Routes::default();
        let note = r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#;
        for _ in 0..(BACKLOG_LINES * 2) {
            assert!(routes.place(note.to_owned(), false).is_none());
        }
        let (_, mut rx) = routes.open_standalone().unwrap();
        let mut got = 0;
        while rx.try_recv().is_ok() {
            got += 1;
        }
        assert_eq!(got, BACKLOG_LINES);
        // One standalone stream at a time.
        assert!(routes.open_standalone().is_none());
    }

    /// A progress note of about `size` bytes for the exchange of token 9.
    fn note_of(size: usize) -> String {
        format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":9,"progress":1,"message":"{}"}}}}"#,
            "x".repeat(size)
        )
    }

    #[test]
    fn a_resumption_that_asks_for_a_dropped_event_is_refused_not_replayed_with_a_gap() {
        let routes = Routes::default();
        let _rx = routes
            .open("5", Some("9".to_owned()), true, None, false)
            .unwrap();
        assert!(routes.abandon("5"));
        // More events than a history keeps: the first ones are dropped.
        for _ in 0..(HISTORY_EVENTS + 10) {
            assert!(routes.place(note_of(10), false).is_none());
        }
        assert_eq!(routes.resume(1, 1).err(), Some(Unresumable::Dropped));
        assert_eq!(routes.resume(1, 0).err(), Some(Unresumable::Dropped));
        // From an event after the last dropped one, nothing is missed.
        let mut resumed = routes.resume(1, 10).unwrap();
        assert_eq!(resumed.try_recv().unwrap().event_id, "1-11");
    }

    #[test]
    fn a_quiet_session_forgets_its_ended_streams_and_keeps_the_one_still_waiting() {
        let budget = HistoryBudget::new(HISTORY_BUDGET_BYTES);
        let routes = Routes::with_budget(Arc::clone(&budget), 0);
        // Many calls answered on their streams fill the history to its
        // bound, as a busy host's does before it goes away.
        for n in 0..HISTORY_EVENTS as u64 {
            let id = format!("{}", n + 100);
            let _rx = routes.open(&id, None, true, None, false).unwrap();
            let (tx, frame) = routes
                .place(
                    format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#),
                    false,
                )
                .unwrap();
            let _ = tx.try_send(frame);
        }
        // One call still waits for its answer, its host gone from the
        // stream after the first progress.
        let _waiting = routes
            .open("5", Some("9".to_owned()), true, None, false)
            .unwrap();
        let _ = routes.place(note_of(10), false).unwrap();
        assert!(routes.abandon("5"));
        let held = routes.inner.lock().unwrap().history.len();
        assert_eq!(held, HISTORY_EVENTS);
        let forgotten = routes.forget_ended();
        assert_eq!(forgotten, HISTORY_EVENTS - 1);
        let inner = routes.inner.lock().unwrap();
        assert_eq!(
            inner.history.len(),
            1,
            "only the waiting stream's event is kept"
        );
        assert!(inner.dropped.is_empty());
        let bytes = inner.history_bytes;
        drop(inner);
        assert_eq!(budget.total(), bytes, "the budget counts what is left");
        // An ended stream is no longer resumed; the waiting one is, and
        // its answer still reaches the host.
        assert_eq!(routes.resume(2, 0).err(), Some(Unresumable::Unknown));
        let stream = HISTORY_EVENTS as u64 + 1;
        let mut resumed = routes.resume(stream, 0).unwrap();
        assert_eq!(resumed.try_recv().unwrap().event_id, format!("{stream}-1"));
        let (tx, frame) = routes
            .place(r#"{"jsonrpc":"2.0","id":5,"result":{}}"#.to_owned(), false)
            .unwrap();
        tx.try_send(frame).unwrap();
        assert!(resumed.try_recv().unwrap().last);
    }

    #[test]
    fn many_sessions_with_large_histories_are_held_to_one_budget_the_largest_losing_first() {
        // An attacker's token opens many sessions and fills each history
        // with large answers it never reads; one other host has a small
        // history it may need to resume.
        const LIMIT: usize = 256 * 1024;
        let budget = HistoryBudget::new(LIMIT);
        let small = Routes::with_budget(Arc::clone(&budget), 0);
        let _small_rx = small
            .open("5", Some("9".to_owned()), true, None, false)
            .unwrap();
        assert!(small.abandon("5"));
        assert!(small.place(note_of(1000), false).is_none());
        budget.enforce();
        let attackers: Vec<Arc<Routes>> = (1..=40)
            .map(|key| {
                let routes = Routes::with_budget(Arc::clone(&budget), key);
                let _rx = routes
                    .open("5", Some("9".to_owned()), true, None, false)
                    .unwrap();
                assert!(routes.abandon("5"));
                routes
            })
            .collect();
        for round in 0..20 {
            for routes in &attackers {
                assert!(routes.place(note_of(16 * 1024), false).is_none());
                budget.enforce();
                assert!(
                    budget.total() <= LIMIT,
                    "round {round}: {} bytes held",
                    budget.total()
                );
            }
        }
        // The attackers' first events are gone, and a resumption from
        // before them says so.
        assert_eq!(attackers[0].resume(1, 0).err(), Some(Unresumable::Dropped));
        // The small history, never the largest, keeps its event.
        let mut resumed = small.resume(1, 0).unwrap();
        assert_eq!(resumed.try_recv().unwrap().event_id, "1-1");
        // A session that ends gives its share back.
        let before = budget.total();
        drop(attackers);
        assert!(budget.total() < before);
        assert!(budget.total() <= 2000, "{}", budget.total());
    }
}
