//! The upstream servers: their links, phases and eras, the ids of the
//! requests sent to them, and the start-up handshake.
//!
//! A server starts on the first request that needs it (or with the host's
//! session). Its era is probed with `server/discover` (design: a result
//! means 2026-07-28; an error or no answer within the probe's time means the
//! legacy era and an `initialize`). Once ready, its `instructions` are
//! pinned and its tools listed. A server that crashes, hangs at start-up,
//! breaks the protocol or whose pins cannot be read fails; what it had in
//! flight fails (or is retried, design §4.5), and it is started again on its
//! next request.
//!
//! A server with a `[servers.NAME.read_only]` table has a second instance:
//! an upstream of its own, after the configured servers, started when the
//! server is (and again, when it failed, for a call that goes to it), with
//! its own link, era, ids, generation and identity key. It is never
//! resolved by name or listed to a host: the tool catalog and the pins are
//! the full instance's. Its own tool list is read only to check that the
//! definition a call was decided on is the one it runs (see
//! `Stages::read_only_ready`); the calls the decision treats as
//! read-only go to it, and nothing else does.
//!
//! What needs the servers alone is theirs: [`Upstreams`] shows and reads
//! back the host-facing names of their tools and prompts (`resolve`,
//! `prefixed`), tells a server the gateway stopped waiting (into the
//! outbox) and stops them all; [`Upstream`] installs and connects one start.
//! The glue between them and the other parts (the catalog, the pins, what
//! waits for a server, the subscriptions) is in `servers`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use hintgate_policy::config::ServerConfig;
use hintgate_policy::tool::SandboxProof;
use serde_json::{Value, json};

use super::Mode;
use super::catalog::Naming;
use super::outbox::Outbox;
use super::request::ServerIdx;
use crate::conn::QueueGauge;
use crate::event::EventSender;
use crate::frame;
use crate::upstream::{Connector, Link, LinkTarget};

/// How long the era probe (`server/discover`) waits before a server is taken
/// for a legacy one.
pub(super) const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Why a host-facing name names no one tool of one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unresolved {
    /// No server's prefix fits it.
    Unknown,
    /// Several servers' prefixes fit it: each server, with the name it would
    /// know the tool by.
    Ambiguous(Vec<(ServerIdx, String)>),
}

/// How much a server may leave unread, in messages of the largest size
/// (`max_message_bytes`), beyond what its pipe holds: a server that reads
/// its input slowly fits; one that leaves more unread is not reading it,
/// and is stopped (see [`NotReading::reason`]).
pub(crate) const SERVER_QUEUE_MESSAGES: usize = 4;

/// Where a server stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Not started.
    Stopped,
    /// Started; the handshake is under way.
    Starting,
    /// Ready for requests.
    Ready,
    /// It failed, for this reason; it is started again on its next request.
    Failed(String),
}

/// One upstream server.
#[derive(Debug)]
pub(crate) struct Upstream {
    /// Its configured name.
    pub name: String,
    /// Its configuration.
    pub config: ServerConfig,
    pub(super) generation: u64,
    pub(super) link: Option<Link>,
    /// Where it stands.
    pub phase: Phase,
    next_id: u64,
    /// Its `initialize` result (for a 2026-07-28 server, the same made from
    /// its `server/discover` result).
    pub info: Option<Value>,
    /// It speaks 2026-07-28.
    pub modern: bool,
    /// Since its start, its era was probed a second time after a modern
    /// refusal of `initialize` (at most once, so probing cannot loop).
    pub reprobed: bool,
    /// What waits for its current start to read (the link counts it).
    queue: Arc<QueueGauge>,
    /// The turn it was last sent something in, and how many bytes that
    /// turn sent it.
    sent: (u64, usize),
    /// For a configured server with a read-only instance: that instance.
    pub read_only: Option<ServerIdx>,
    /// For a read-only instance: the configured server it is an instance of.
    pub read_only_of: Option<ServerIdx>,
    /// For a read-only instance: its identity key in the store (the full
    /// instance's is the catalog's), for the audit record.
    pub identity_key: Option<String>,
    /// Its package was just installed (`prepare = "on-start"`): the next
    /// start connects without looking again.
    pub(super) prepared: bool,
    /// The install running before its start, if one does.
    pub(super) installing: Option<tokio::task::AbortHandle>,
}

/// A line for a server was not sent: the server left more unread, from
/// before this turn, than the gateway holds for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NotReading {
    /// The bytes the server left unread.
    pub unread: usize,
}

/// Every upstream server, in configuration order, then the read-only
/// instances of those that have one.
#[derive(Debug)]
pub(crate) struct Upstreams {
    list: Vec<Upstream>,
    by_name: HashMap<String, ServerIdx>,
    /// How many configured servers there are (the first of `list`).
    configured: usize,
    /// How their tools' and prompts' names are shown to the host.
    mode: Mode,
    /// Between a server's name and its tools' in gateway mode.
    separator: String,
    /// Two servers' prefixes begin one another, so a host-facing name may
    /// fit several (a configuration validation would refuse).
    overlap: bool,
}

/// Whether a server can take a request now.
#[derive(Debug)]
pub(crate) enum Readiness {
    /// Yes.
    Ready,
    /// It is starting: the request waits.
    Pending,
    /// It failed (again, for this request).
    Failed(String),
}

/// Whether a server can take a call now, as a step sees it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Started {
    /// It runs.
    Ready,
    /// It is starting: the call waits.
    Starting,
    /// It failed again after this call started it: why.
    Failed(String),
    /// It is stopped, or failed before: it must be started (once per call).
    Start,
}

/// Whether server `idx` runs for a request that started it already if
/// `restarted` names it; a server to start is noted there (so it is
/// started once per request).
pub(crate) fn started(
    upstreams: &Upstreams,
    idx: ServerIdx,
    restarted: &mut Option<ServerIdx>,
) -> Started {
    let Some(up) = upstreams.get(idx) else {
        return Started::Failed("no such server".to_owned());
    };
    match &up.phase {
        Phase::Ready => Started::Ready,
        Phase::Starting => Started::Starting,
        Phase::Failed(reason) if *restarted == Some(idx) => Started::Failed(reason.clone()),
        Phase::Stopped | Phase::Failed(_) => {
            *restarted = Some(idx);
            Started::Start
        }
    }
}

/// What a start of a server connects with: its index, the largest line,
/// the loop's event channel, and what is counted.
pub(crate) struct Target<'a> {
    /// The server's index.
    pub server: ServerIdx,
    /// The largest line accepted (`max_message_bytes`).
    pub max_line: usize,
    /// The deepest nesting accepted (`max_json_depth`).
    pub max_depth: usize,
    /// Where its link's events go.
    pub events: &'a EventSender,
    /// What is counted for a dashboard.
    pub metrics: Option<&'a crate::metrics::Metrics>,
}

// === impl NotReading ===

impl NotReading {
    /// Why a server that left this much unread is stopped, in words.
    ///
    /// A server that leaves so much of its input unread that the next line
    /// for it does not fit in what the gateway holds for it
    /// ([`SERVER_QUEUE_MESSAGES`] messages of `max_message_bytes`) is
    /// broken, and holding more for it would only grow without end: it is
    /// stopped like a server that breaks the protocol (what it had in
    /// flight fails, and what waited for it is dropped with its pipe) and
    /// started again on its next request. The line is not sent.
    pub fn reason(&self) -> String {
        format!(
            "is not reading its input: it left {} bytes unread, and hintgate holds at most {SERVER_QUEUE_MESSAGES} times `max_message_bytes` for a server",
            self.unread
        )
    }
}

// === impl Upstream ===

impl Drop for Upstream {
    /// An install still running for a gateway that stops ends with it (its
    /// process is killed with the task).
    fn drop(&mut self) {
        if let Some(task) = self.installing.take() {
            task.abort();
        }
    }
}

impl Upstream {
    fn new(config: ServerConfig) -> Self {
        Self {
            name: config.name.clone(),
            config,
            generation: 0,
            link: None,
            phase: Phase::Stopped,
            next_id: 0,
            info: None,
            modern: false,
            reprobed: false,
            queue: Arc::default(),
            sent: (0, 0),
            read_only: None,
            read_only_of: None,
            identity_key: None,
            prepared: false,
            installing: None,
        }
    }

    /// Which start of the server this is.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// A capability the server declared.
    pub fn capability(&self, name: &str) -> Option<&Value> {
        self.info.as_ref()?.get("capabilities")?.get(name)
    }

    /// A fresh id for a request to the server.
    pub fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Sends one line to the server now, in turn `turn` (callers go
    /// through the outbox, which the end of a turn sends).
    ///
    /// What the server left unread is what still waits from earlier turns:
    /// the loop lets the link's writer run after every turn, so that much
    /// did not fit in the server's pipe. What one turn sends is not held
    /// against it, so a burst of calls to a server that reads is not taken
    /// for a server that does not.
    ///
    /// # Errors
    ///
    /// [`NotReading`] when the line would not fit on top of what the server
    /// left unread within the queue's bound: the line is not sent (see
    /// [`NotReading::reason`]).
    pub(super) fn send_now(
        &mut self,
        line: String,
        turn: u64,
        principal: Option<std::sync::Arc<str>>,
    ) -> Result<(), NotReading> {
        let Some(link) = &self.link else {
            return Ok(());
        };
        if self.sent.0 != turn {
            self.sent = (turn, 0);
        }
        let unread = self.queue.bytes().saturating_sub(self.sent.1);
        // INVARIANT: what a server leaves unread stays within its bound;
        // what waits for it is at most that plus what one turn sends it.
        if unread.saturating_add(line.len() + 1) > self.queue.hard_limit() {
            self.queue.count_dropped();
            return Err(NotReading { unread });
        }
        self.sent.1 = self.sent.1.saturating_add(line.len() + 1);
        link.send_as(line, principal);
        Ok(())
    }

    /// For a server behind OAuth, the scopes of the token it was sent last.
    pub fn token_scope(&self, principal: &str) -> Option<String> {
        self.link
            .as_ref()
            .and_then(|link| link.token_scope(principal))
    }

    /// For a child process, its last lines of standard error as a clause
    /// for a reason.
    pub fn stderr_clause(&self) -> Option<String> {
        self.link.as_ref().and_then(Link::stderr_clause)
    }

    /// The link, taken (to stop it).
    pub fn take_link(&mut self) -> Option<Link> {
        self.link.take()
    }

    /// Before a start: where the server's sandbox table says `prepare =
    /// "on-start"` and its launcher's package is not installed, the install
    /// runs first, in a task of its own bounded by `timeout` (the call
    /// timeout), and the start goes on when it ends
    /// ([`Gateway::prepared`]); one that cannot be done fails the start.
    /// Returns whether the start waits for it (or failed).
    pub(super) fn install_first(
        &mut self,
        idx: ServerIdx,
        connector: &dyn Connector,
        events: &EventSender,
        timeout: Duration,
    ) -> bool {
        if std::mem::take(&mut self.prepared) {
            return false;
        }
        let preparation = match connector.prepare(&self.config) {
            crate::prepare::Needed::Nothing => return false,
            crate::prepare::Needed::Refused(reason) => {
                tracing::error!(server.id = %self.name, "{reason}");
                self.link = None;
                self.phase = Phase::Failed(reason);
                return true;
            }
            crate::prepare::Needed::Install(preparation) => preparation,
        };
        self.generation += 1;
        self.link = None;
        self.phase = Phase::Starting;
        let generation = self.generation;
        if let Some(earlier) = self.installing.take() {
            earlier.abort();
        }
        let events = events.clone();
        let task = tokio::spawn(async move {
            let result = preparation.run(timeout).await;
            let event = crate::event::UpstreamEvent::Prepared(result);
            let _ = events
                .send(crate::event::Event::Upstream {
                    server: idx,
                    generation,
                    event,
                })
                .await;
        });
        self.installing = Some(task.abort_handle());
        true
    }

    /// A new start of the server: what the last one knew is forgotten, and
    /// it connects through `connector`. What its sandbox proves, once it is
    /// `Starting`; `None` when it failed at once (the program does not
    /// exist, a sandbox cannot be enforced), with why in its phase.
    pub(super) fn connect(
        &mut self,
        connector: &dyn Connector,
        target: &Target<'_>,
    ) -> Option<SandboxProof> {
        self.generation += 1;
        self.link = None;
        self.info = None;
        self.modern = false;
        self.reprobed = false;
        // INVARIANT: what waits for a server is bounded; past the bound
        // the server is taken for one that does not read its input.
        let queue = Arc::new(QueueGauge::default());
        let bound = target.max_line.saturating_mul(SERVER_QUEUE_MESSAGES);
        queue.set_limits(bound, bound);
        self.queue = Arc::clone(&queue);
        let link_target = LinkTarget {
            server: target.server,
            generation: self.generation,
            max_line: target.max_line,
            max_depth: target.max_depth,
            events: target.events.clone(),
            queue,
        };
        // A sandbox the kernel cannot enforce stops the server at connect
        // (unless `best_effort`); what holds is what the policy is told.
        let mut sandbox = SandboxProof::default();
        let sandboxed = self.config.sandbox.is_some();
        let of = self.read_only_of.unwrap_or(target.server);
        let connected = connector.connect(&self.config, link_target);
        if sandboxed && let Some(metrics) = target.metrics {
            let confined = connected
                .as_ref()
                .is_ok_and(|link| link.sandbox().is_some());
            metrics.sandbox(of, confined);
        }
        match connected {
            Ok(link) => {
                tracing::info!(server.id = %self.name, pid = ?link.pid(), "started");
                if let (Some(report), Some(table)) = (link.sandbox(), &self.config.sandbox) {
                    sandbox = report.proof(table);
                    if report.uncovered().next().is_none() {
                        tracing::info!(server.id = %self.name, "sandbox {}", report.summary());
                    } else {
                        tracing::warn!(server.id = %self.name, "sandbox {}", report.summary());
                    }
                } else if self.config.sandbox.is_some() {
                    tracing::warn!(server.id = %self.name, "sandbox not enforced: this link cannot be confined");
                }
                self.link = Some(link);
                self.phase = Phase::Starting;
                Some(sandbox)
            }
            Err(reason) => {
                tracing::error!(server.id = %self.name, "{reason}");
                self.phase = Phase::Failed(reason);
                None
            }
        }
    }
}

// === impl Upstreams ===

impl Upstreams {
    /// The servers of a configuration, their tools and prompts shown to the
    /// host as `mode` says (prefixed with their name and `separator` in
    /// gateway mode).
    pub fn new(configs: Vec<ServerConfig>, mode: Mode, separator: String) -> Self {
        let by_name = configs
            .iter()
            .enumerate()
            .map(|(idx, config)| (config.name.clone(), idx))
            .collect();
        let configured = configs.len();
        let instances: Vec<(ServerIdx, ServerConfig)> = configs
            .iter()
            .enumerate()
            .filter_map(|(idx, config)| Some((idx, config.read_only_instance()?)))
            .collect();
        let mut list: Vec<Upstream> = configs.into_iter().map(Upstream::new).collect();
        for (of, config) in instances {
            let at = list.len();
            if let Some(full) = list.get_mut(of) {
                full.read_only = Some(at);
            }
            let mut instance = Upstream::new(config);
            instance.read_only_of = Some(of);
            list.push(instance);
        }
        let mut upstreams = Self {
            list,
            by_name,
            configured,
            mode,
            separator,
            overlap: false,
        };
        upstreams.overlap = upstreams.overlapping();
        upstreams
    }

    /// How many upstreams there are, read-only instances included.
    pub fn instances(&self) -> usize {
        self.list.len()
    }

    /// Whether `idx` is a read-only instance.
    pub fn is_read_only(&self, idx: ServerIdx) -> bool {
        self.get(idx).is_some_and(|up| up.read_only_of.is_some())
    }

    /// One server.
    pub fn get(&self, idx: ServerIdx) -> Option<&Upstream> {
        self.list.get(idx)
    }

    /// One server, to change.
    pub fn get_mut(&mut self, idx: ServerIdx) -> Option<&mut Upstream> {
        self.list.get_mut(idx)
    }

    /// Sends `line` to start `generation` of server `idx` now (on behalf
    /// of `principal`, in `turn`); a line for an earlier start, or a server
    /// that is gone, is dropped.
    ///
    /// # Errors
    ///
    /// [`NotReading`] when the server left too much unread (see
    /// [`Upstream::send_now`]).
    pub(super) fn send_to(
        &mut self,
        idx: ServerIdx,
        generation: u64,
        line: String,
        turn: u64,
        principal: Option<Arc<str>>,
    ) -> Result<(), NotReading> {
        match self.list.get_mut(idx) {
            Some(up) if up.generation() == generation => up.send_now(line, turn, principal),
            _ => Ok(()),
        }
    }

    /// A server by its configured name.
    pub fn find(&self, name: &str) -> Option<ServerIdx> {
        self.by_name.get(name).copied()
    }

    /// The configured server `idx` is, or is the read-only instance of.
    pub fn configured_of(&self, idx: ServerIdx) -> ServerIdx {
        self.get(idx).and_then(|up| up.read_only_of).unwrap_or(idx)
    }

    /// A server's configured name ("" for none).
    pub fn name(&self, idx: ServerIdx) -> &str {
        self.list.get(idx).map_or("", |up| up.name.as_str())
    }

    /// How many configured servers there are (their indices come first;
    /// read-only instances are not counted).
    pub fn len(&self) -> usize {
        self.configured
    }

    /// Every configured server (not the read-only instances).
    pub fn iter(&self) -> impl Iterator<Item = &Upstream> {
        self.list.iter().take(self.configured)
    }

    /// Every upstream, read-only instances included, to change.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Upstream> {
        self.list.iter_mut()
    }

    /// Whether every configured server is ready or failed (the host's
    /// `initialize` is answered then).
    pub fn settled(&self) -> bool {
        self.iter()
            .all(|up| matches!(up.phase, Phase::Ready | Phase::Failed(_)))
    }

    /// What the host-facing names of server `idx`'s tools look like.
    pub fn naming(&self, idx: ServerIdx) -> Naming {
        Naming {
            prefix: match self.mode {
                Mode::Wrap => None,
                Mode::Gateway => Some(format!("{}{}", self.name(idx), self.separator)),
            },
        }
    }

    /// Which server a host-facing name belongs to, and the name the server
    /// knows it by.
    ///
    /// In gateway mode every place where the separator begins is tried, not
    /// only the first: `docs___x` is `x` of a server `docs_`. A name that two
    /// servers' prefixes fit (`docs` and `docs_`, which validation refuses)
    /// is never routed by guess.
    ///
    /// # Errors
    ///
    /// [`Unresolved`]: no server's prefix fits the name, or several do.
    pub fn resolve(&self, name: &str) -> Result<(ServerIdx, String), Unresolved> {
        match self.mode {
            Mode::Wrap => Ok((0, name.to_owned())),
            Mode::Gateway => {
                let separator = self.separator.as_str();
                let mut found: Vec<(ServerIdx, String)> = name
                    .char_indices()
                    .filter_map(|(at, _)| {
                        let rest = name.get(at..)?.strip_prefix(separator)?;
                        let idx = self.find(name.get(..at)?)?;
                        Some((idx, rest.to_owned()))
                    })
                    .collect();
                match found.len() {
                    0 => Err(Unresolved::Unknown),
                    1 => found.pop().ok_or(Unresolved::Unknown),
                    _ => Err(Unresolved::Ambiguous(found)),
                }
            }
        }
    }

    /// Why a name is not routed: the servers and tool names it could be.
    pub fn ambiguity(&self, found: &[(ServerIdx, String)]) -> String {
        let readings: Vec<String> = found
            .iter()
            .map(|(idx, own)| {
                format!(
                    "`{}` of server `{}`",
                    hintgate_policy::sanitize::escape_line(own),
                    self.name(*idx)
                )
            })
            .collect();
        format!(
            "the name could be {}, so hintgate does not guess which (rename one of the servers, or choose another `gateway.separator`)",
            readings.join(" or ")
        )
    }

    /// Whether the gateway wraps one server (wrap mode), whose names are
    /// shown as they are.
    pub fn wraps(&self) -> bool {
        self.mode == Mode::Wrap
    }

    /// Whether two servers' prefixes begin one another (`docs__` and
    /// `docs___`): then a host-facing name may fit several, and the tool list
    /// leaves such names out.
    pub fn prefixes_overlap(&self) -> bool {
        self.overlap
    }

    /// Whether two servers' prefixes begin one another, worked out once.
    fn overlapping(&self) -> bool {
        if self.mode != Mode::Gateway {
            return false;
        }
        let prefixes: Vec<String> = self
            .iter()
            .map(|up| format!("{}{}", up.name, self.separator))
            .collect();
        prefixes.iter().enumerate().any(|(one, prefix)| {
            prefixes
                .iter()
                .enumerate()
                .any(|(other, longer)| one != other && longer.starts_with(prefix.as_str()))
        })
    }

    /// The separator between a server's name and its tools' in gateway mode.
    pub fn separator(&self) -> &str {
        &self.separator
    }

    /// A server's name as the host sees it for `name` (prompts and tools).
    pub fn prefixed(&self, idx: ServerIdx, name: &str) -> String {
        match self.naming(idx).prefix {
            Some(prefix) => prefix + name,
            None => name.to_owned(),
        }
    }

    /// Puts a notification for a server, that the gateway no longer waits
    /// for request `id`, in the outbox.
    pub fn cancel(&self, idx: ServerIdx, id: u64, reason: &str, outbox: &mut Outbox) {
        let Some(up) = self.get(idx) else {
            return;
        };
        let line = frame::notification(
            "notifications/cancelled",
            &json!({"requestId": id, "reason": reason}),
        );
        outbox.upstream(idx, up.generation, line, None);
    }

    /// Stops every server: closes its input, waits a moment, then kills it.
    pub async fn stop_all(&mut self) {
        let links: Vec<Link> = self
            .list
            .iter_mut()
            .filter_map(Upstream::take_link)
            .collect();
        for link in links {
            link.stop().await;
        }
    }
}

/// Why a server's list was cut off: it named a next page after
/// [`super::MAX_LIST_PAGES`] pages.
pub(super) fn too_many_pages(server: &str, method: &str) -> String {
    format!(
        "server `{server}` sent more than {} pages of `{method}` (the most hintgate follows); its entries are left out",
        super::MAX_LIST_PAGES
    )
}

#[cfg(test)]
mod tests {
    use hintgate_policy::config::parse_str;
    use hintgate_policy::decide::Policy;

    use super::*;
    use crate::gateway::outbox::Outgoing;

    /// The servers of one configuration each, in this order (so names a
    /// validation would refuse side by side can be tried).
    fn servers(names: &[&str]) -> Vec<ServerConfig> {
        names
            .iter()
            .map(|name| {
                let (config, _) = parse_str(&format!("[servers.\"{name}\"]\ncommand = \"x\"\n"));
                let policy = Policy::new(config.unwrap());
                policy.config().servers.values().next().unwrap().clone()
            })
            .collect()
    }

    fn gateway(names: &[&str]) -> Upstreams {
        Upstreams::new(servers(names), Mode::Gateway, "__".to_owned())
    }

    #[test]
    fn a_host_facing_name_resolves_to_the_one_server_whose_prefix_fits_it() {
        let upstreams = gateway(&["fs", "docs_"]);
        assert!(!upstreams.prefixes_overlap());
        assert_eq!(upstreams.resolve("fs__read"), Ok((0, "read".to_owned())));
        // Every place the separator begins is tried, not only the first.
        assert_eq!(upstreams.resolve("docs___x"), Ok((1, "x".to_owned())));
        assert_eq!(upstreams.resolve("fs__a__b"), Ok((0, "a__b".to_owned())));
        for unknown in ["read", "other__read", "fs_read", "__read", ""] {
            assert_eq!(
                upstreams.resolve(unknown),
                Err(Unresolved::Unknown),
                "{unknown}"
            );
        }
        assert_eq!(upstreams.prefixed(1, "x"), "docs___x");
        assert_eq!(upstreams.naming(0).prefix.as_deref(), Some("fs__"));
    }

    #[test]
    fn a_name_two_servers_prefixes_fit_is_never_routed_by_guess() {
        let upstreams = gateway(&["docs", "docs_"]);
        assert!(upstreams.prefixes_overlap());
        let Err(Unresolved::Ambiguous(found)) = upstreams.resolve("docs___x") else {
            panic!("routed by guess");
        };
        assert_eq!(found, vec![(0, "_x".to_owned()), (1, "x".to_owned())]);
        let why = upstreams.ambiguity(&found);
        assert!(
            why.contains("`_x` of server `docs` or `x` of server `docs_`"),
            "{why}"
        );
        assert!(why.contains("gateway.separator"), "{why}");
    }

    #[test]
    fn in_wrap_mode_names_are_the_servers_own() {
        let upstreams = Upstreams::new(servers(&["fs"]), Mode::Wrap, "__".to_owned());
        assert!(!upstreams.prefixes_overlap());
        assert_eq!(
            upstreams.resolve("fs__read"),
            Ok((0, "fs__read".to_owned()))
        );
        assert_eq!(upstreams.prefixed(0, "read"), "read");
        assert_eq!(upstreams.naming(0).prefix, None);
    }

    #[test]
    fn a_cancellation_goes_to_the_outbox_for_the_start_it_was_sent_to() {
        let mut upstreams = gateway(&["fs"]);
        let mut outbox = Outbox::new();
        upstreams.cancel(0, 7, "timed out", &mut outbox);
        // No such server: nothing.
        upstreams.cancel(5, 7, "timed out", &mut outbox);
        if let Some(up) = upstreams.get_mut(0) {
            up.generation = 3;
        }
        upstreams.cancel(0, 8, "unsubscribed", &mut outbox);
        let sent = outbox.take();
        assert_eq!(sent.len(), 2);
        let Outgoing::Upstream(0, 0, line, None) = &sent[0] else {
            panic!("{sent:?}");
        };
        let line: Value = serde_json::from_str(line).unwrap();
        assert_eq!(
            line,
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7, "reason": "timed out"}})
        );
        assert!(
            matches!(&sent[1], Outgoing::Upstream(0, 3, line, None) if line.contains("\"requestId\":8"))
        );
    }

    #[test]
    fn a_server_not_reading_is_told_why_in_numbers() {
        let reason = NotReading { unread: 4096 }.reason();
        assert!(
            reason.starts_with("is not reading its input: it left 4096 bytes unread"),
            "{reason}"
        );
        assert!(
            reason.contains("at most 4 times `max_message_bytes`"),
            "{reason}"
        );
    }
}
