//! Parts of a gateway built by hand, for the tests of its steps and parts:
//! no gateway, no server, no host.

use std::sync::Arc;
use std::time::Duration;

use hintgate_policy::config::parse_str;
use hintgate_policy::decide::{Policy, Scope, Verdict};
use hintgate_policy::tool::SandboxProof;
use hintgate_store::{MemoryStore, Store};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::ask::{Asks, Desk};
use super::call::{CallContext, CallEnd, Exit, Refusal};
use super::catalog::{Catalog, Naming};
use super::era::Declared;
use super::hooks::Hooks;
use super::inflight::InFlight;
use super::journal::Journal;
use super::outbox::Outbox;
use super::records::Records;
use super::request::{HostRequest, Method, ServerIdx, SessionId};
use super::routing::Routing;
use super::servers::Servers;
use super::session::{Era, HostSession, Sessions};
use super::stages::Stages;
use super::steps::SessionFacts;
use super::subscriptions::Subscriptions;
use super::upstreams::{Phase, Upstreams};
use super::watch::StoreWatcher;
use super::{Limits, Mode, Observed, Observer};
use crate::event::{EventReceiver, EventSender};
use crate::metrics::Metrics;
use crate::seal::Sealer;
use crate::telemetry::Tracer;
use crate::upstream::{Connector, SystemConnector};

/// The parts a gateway would lend its steps and parts.
pub(crate) struct Parts {
    pub(crate) policy: Policy,
    pub(crate) mode: Mode,
    pub(crate) limits: Limits,
    pub(crate) upstreams: Upstreams,
    pub(crate) catalog: Catalog,
    pub(crate) sessions: Sessions,
    pub(crate) journal: Journal,
    pub(crate) sealer: Sealer,
    pub(crate) store: Option<Arc<dyn Store>>,
    pub(crate) hooks: Hooks,
    pub(crate) observer: Observer,
    pub(crate) metrics: Option<Arc<Metrics>>,
    pub(crate) events: EventSender,
    pub(crate) declared: Declared,
    pub(crate) inflight: InFlight,
    pub(crate) asks: Asks,
    pub(crate) watcher: Option<StoreWatcher>,
    pub(crate) outbox: Outbox,
    pub(crate) subscriptions: Subscriptions,
    pub(crate) routing: Routing,
    pub(crate) connector: Arc<dyn Connector>,
    pub(crate) tracer: Option<Tracer>,
    /// What the parts reported to the observer.
    pub(crate) seen: mpsc::UnboundedReceiver<Observed>,
    /// The events the parts sent the loop (kept open, so sends succeed).
    pub(crate) _events: EventReceiver,
}

impl Parts {
    /// The servers of `config`, none started, none listed.
    pub(crate) fn new(config: &str) -> Self {
        let (config, diagnostics) = parse_str(config);
        let config = config.unwrap_or_else(|| panic!("{diagnostics:?}"));
        let hooks = config.gateway.decide.iter().cloned().collect::<Vec<_>>();
        let policy = Policy::new(config);
        let servers = policy.config().servers.values().cloned().collect();
        let upstreams = Upstreams::new(servers, Mode::Gateway, "__".to_owned());
        let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
        let mut catalog = Catalog::new(upstreams.instances(), Some(Arc::clone(&store)));
        for idx in 0..upstreams.instances() {
            let name = upstreams.name(idx).to_owned();
            catalog
                .open(idx, &name, None, name.clone(), SandboxProof::default())
                .unwrap();
        }
        let redactor = hintgate_policy::redact::Redactor::new(
            &hintgate_policy::redact::AuditSettings::default(),
            hintgate_policy::redact::DigestKey::new([1; 32]),
        );
        let (tell, seen) = mpsc::unbounded_channel();
        let (events, receiver) = crate::event::channel(Arc::default());
        let limits = Limits {
            call_timeout: Duration::from_secs(policy.config().gateway.call_timeout_s),
            ask_timeout: Duration::from_secs(policy.config().gateway.ask_timeout_s),
            max_line: 1 << 20,
            max_depth: 64,
        };
        Self {
            policy,
            mode: Mode::Gateway,
            limits,
            upstreams,
            catalog,
            sessions: Sessions::default(),
            journal: Journal::new(None, "g-test".to_owned(), redactor),
            sealer: Sealer::new().unwrap(),
            store: Some(store),
            hooks: Hooks::new(hooks),
            observer: Observer(Some(tell)),
            metrics: None,
            events,
            declared: Declared::new(),
            inflight: InFlight::default(),
            asks: Asks::new("g-test".to_owned()),
            watcher: None,
            outbox: Outbox::new(),
            subscriptions: Subscriptions::default(),
            routing: Routing::default(),
            connector: Arc::new(SystemConnector::with_store(None)),
            tracer: None,
            seen,
            _events: receiver,
        }
    }

    /// Server `idx` runs.
    pub(crate) fn running(mut self, idx: ServerIdx) -> Self {
        self.upstreams.get_mut(idx).unwrap().phase = Phase::Ready;
        self
    }

    /// Server `idx` runs and lists `tools`.
    pub(crate) fn listing(mut self, idx: ServerIdx, tools: &[Value]) -> Self {
        self = self.running(idx);
        let name = self.upstreams.name(idx).to_owned();
        self.catalog.begin_listing(idx);
        self.catalog.add_page(idx, tools.to_vec());
        let naming = Naming { prefix: None };
        self.catalog
            .finish_listing(idx, &name, &self.policy, &naming, 1);
        self
    }

    pub(crate) fn stages(&mut self) -> Stages<'_> {
        Stages {
            policy: &self.policy,
            upstreams: &self.upstreams,
            catalog: &mut self.catalog,
            sessions: &mut self.sessions,
            journal: &self.journal,
            sealer: &mut self.sealer,
            store: self.store.as_ref(),
            run_name: "g-test",
            hooks: &mut self.hooks,
            observer: &self.observer,
            metrics: None,
        }
    }

    /// What the steps reported, in order.
    pub(crate) fn decided(&mut self) -> Vec<Verdict> {
        let mut verdicts = Vec::new();
        while let Ok(seen) = self.seen.try_recv() {
            if let Observed::Decided { decision, .. } = seen {
                verdicts.push(decision.verdict);
            }
        }
        verdicts
    }
}

/// A host's call of `name` with `arguments`, as the pipeline reads it.
pub(crate) fn call(name: &str, arguments: &Value) -> CallContext {
    let line = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": name, "arguments": arguments}})
    .to_string();
    let message = crate::frame::Message::parse(&line).unwrap();
    let spans = message.spans();
    let method = Method::of(message.method());
    let request = HostRequest::new(SessionId::FIRST, line.clone(), spans, method);
    CallContext::parse(request).unwrap()
}

pub(crate) fn legacy_session() -> SessionFacts {
    SessionFacts {
        id: SessionId::FIRST,
        modern: false,
        tainted: false,
        scope: Scope::Write,
    }
}

pub(crate) fn refusal(exit: Exit) -> Refusal {
    match exit {
        Exit::End(CallEnd::Refused(refusal)) => refusal,
        other => panic!("not a refusal: {other:?}"),
    }
}

pub(crate) const ONE: &str = "[servers.fs]\ncommand = \"x\"\ntrust = \"trusted\"\n";

pub(crate) fn read_tool() -> Value {
    json!({"name": "read", "annotations": {"readOnlyHint": true},
        "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}},
        "required": ["path"]}})
}

pub(crate) fn delete_tool() -> Value {
    json!({"name": "delete", "annotations": {"destructiveHint": true},
        "inputSchema": {"type": "object"}})
}
impl Parts {
    /// The asking part, as the gateway lends it for one step.
    pub(crate) fn desk(&mut self) -> Desk<'_> {
        Desk {
            policy: &self.policy,
            mode: &self.mode,
            limits: &self.limits,
            observer: &self.observer,
            metrics: &self.metrics,
            store: &self.store,
            events: &self.events,
            sealer: &self.sealer,
            declared: &self.declared,
            sessions: &self.sessions,
            catalog: &self.catalog,
            journal: &self.journal,
            upstreams: &mut self.upstreams,
            inflight: &mut self.inflight,
            asks: &mut self.asks,
            hooks: &mut self.hooks,
            watcher: &mut self.watcher,
            outbox: &mut self.outbox,
            turn: 1,
            then: Vec::new(),
        }
    }

    /// Session 1, a host of `era` that declared elicitation or not.
    pub(crate) fn host(&mut self, era: Era, elicitation: bool) {
        let (out, _lines) = mpsc::unbounded_channel();
        let mut host = HostSession::new(out, Arc::default(), Arc::default());
        host.era = era;
        host.elicitation = elicitation;
        self.sessions.insert(SessionId::FIRST, host);
    }

    /// The servers' part, as the gateway lends it for one step.
    pub(crate) fn servers(&mut self) -> Servers<'_> {
        Servers {
            policy: &self.policy,
            limits: &self.limits,
            declared: &self.declared,
            store: &self.store,
            events: &self.events,
            metrics: &self.metrics,
            connector: &self.connector,
            sessions: &self.sessions,
            upstreams: &mut self.upstreams,
            catalog: &mut self.catalog,
            inflight: &mut self.inflight,
            subscriptions: &mut self.subscriptions,
            routing: &mut self.routing,
            watcher: &mut self.watcher,
            outbox: &mut self.outbox,
            then: Vec::new(),
        }
    }

    /// The view a call's records are written through.
    pub(crate) fn records(&mut self) -> Records<'_> {
        Records {
            policy: &self.policy,
            upstreams: &self.upstreams,
            catalog: &self.catalog,
            sessions: &mut self.sessions,
            journal: &mut self.journal,
            sealer: &self.sealer,
            store: &self.store,
            run_name: "g-test",
            metrics: &self.metrics,
            tracer: &self.tracer,
            outbox: &mut self.outbox,
        }
    }

    /// The journal writes to the store's log (as PostgreSQL's or the
    /// memory store's would), so records can be read back.
    pub(crate) fn logged(mut self) -> Self {
        let redactor = hintgate_policy::redact::Redactor::new(
            &hintgate_policy::redact::AuditSettings::default(),
            hintgate_policy::redact::DigestKey::new([1; 32]),
        );
        let log = self
            .store
            .clone()
            .map(|store| -> Arc<dyn hintgate_store::AuditLog> { store });
        self.journal = Journal::new(log, "g-test".to_owned(), redactor);
        self
    }

    /// The journal's batch committed, and the bodies of the log's records.
    pub(crate) fn committed(&mut self) -> Vec<Value> {
        self.journal.commit().unwrap();
        let store = self.store.clone().unwrap();
        store
            .entries(0, 100)
            .unwrap()
            .into_iter()
            .map(|entry| entry.body)
            .collect()
    }
}
