//! The tool catalog: every server's tools by name, their pins, the standing
//! approvals, and what the host is shown.
//!
//! When a server starts, its pins and standing approvals are read from the
//! store once, for its identity key; when the server's identity changed
//! (a new package version, other arguments or environment), the pins of its
//! last identity are moved to the new key first ([`PinStore::rekey`]), so a
//! changed definition is held for approval whether the server is trusted or
//! not, and the prompt names the change. When the server lists its tools,
//! each definition is parsed, digested, compared with its pin and turned into
//! the host's view once; a call then finds its tool by name in a map, and its
//! pin and standing approval in memory: the call path never reads the store.
//! Standing approvals given or revoked by another process reach the catalog
//! through the store watcher ([`super::watch`]).
//!
//! [`PinStore::rekey`]: hintgate_store::PinStore::rekey

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock};

use foldhash::fast::RandomState;
use hintgate_policy::decide::{Policy, Remembered, Scope};
use hintgate_policy::pin::{PinDigest, PinStatus};
use hintgate_policy::reason::ReasonCode;
use hintgate_policy::sanitize::{escape_line, one_line, sanitize};
use hintgate_policy::tool::{EffectiveHints, SandboxProof, Tool, Trust};
use hintgate_store::{INSTRUCTIONS, Pin, REMOVED, Seal, Seen, Store, StoreError};
use serde_json::{Map, Value, json};

use super::request::ServerIdx;

/// Where a server's tool list stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Listing {
    /// Not asked for since the server started.
    Unlisted,
    /// Pages are coming.
    InProgress,
    /// Complete.
    Listed,
    /// The server did not list them (no answer in time, an error).
    Failed(String),
}

/// One tool as a server listed it, prepared once.
#[derive(Debug)]
pub(crate) struct ToolEntry {
    /// The definition as sent.
    pub raw: Value,
    /// The definition parsed, or why it is invalid.
    pub tool: Result<Tool, String>,
    /// Its pin digest (for a valid definition).
    pub digest: Option<PinDigest>,
    /// The same, as the audit log writes it (`sha256:...`), made once.
    pub digest_text: Option<Arc<str>>,
    /// Its input schema, compiled when first needed (most tools listed are
    /// never called, and compiling a schema costs more than a call).
    input: OnceLock<Option<Arc<jsonschema::Validator>>>,
    /// Its output schema, compiled when first needed.
    output: OnceLock<Option<Arc<jsonschema::Validator>>>,
    /// What `tools/list` shows the host, or `None` when it is hidden.
    pub host_view: Option<String>,
    /// Whether a session that may only read ([`Scope::Read`]) is shown it
    /// too (it is effectively read-only, and listed).
    pub read_scope: bool,
    /// Why its name keeps it from being listed or called, if it does.
    pub name_trouble: Option<NameTrouble>,
    /// Whether it is effectively read-only or idempotent: the tool's half
    /// of whether a failed call may be retried (design §4.5).
    pub repeatable: bool,
    /// Whether its results taint the session (design §4.4).
    pub taints: bool,
}

/// Why a tool's name keeps it from being listed or called (the rule of
/// [`hintgate_policy::name`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NameTrouble {
    /// The name is not plain: this is what is wrong with it.
    NotPlain(String),
    /// The server lists other tools whose names look the same: their names
    /// (none when it lists this very name more than once).
    LooksLike(Vec<String>),
}

/// A pin as the catalog keeps it.
#[derive(Debug, Clone)]
struct Pinned {
    digest: PinDigest,
    /// The definition pinned, for the diff of a change.
    definition: Option<Tool>,
    /// The identity it was pinned under.
    identity: String,
    /// The digest of what was seen since, when it differs (or `removed`).
    seen: Option<String>,
}

/// What a listing is compared with its pins by.
struct PinCheck<'a> {
    server_name: &'a str,
    /// The server's identity for people, as the listing found it.
    identity: &'a str,
    trusted: bool,
    /// Now, in the store's seconds.
    now: i64,
    store: Option<&'a dyn Store>,
}

/// What a listing's comparison with its pins leaves to write to the store.
#[derive(Default)]
struct PinWrites {
    /// A trusted server's tools pinned on first sight.
    first_seen: Vec<Pin>,
    /// Unchanged tools seen under a new identity.
    reidentified: Vec<Pin>,
    /// The last store failure.
    failure: Option<String>,
}

/// One server's part of the catalog.
#[derive(Debug)]
pub(crate) struct ServerTools {
    /// Where its list stands.
    pub listing: Listing,
    /// Pages of a list in progress.
    pages: Vec<Value>,
    /// How many pages the list in progress has had.
    pages_seen: usize,
    /// The server said its list changed while a listing was in progress,
    /// which may hold the list from before: it is listed once more.
    stale: bool,
    tools: HashMap<String, ToolEntry, RandomState>,
    /// The listing's order, for `tools/list`.
    order: Vec<String>,
    pins: HashMap<String, Pinned>,
    /// Standing ("always") approvals: the digest each was given for, and
    /// when this gateway gave it (for one it read from the store, `None`).
    always: HashMap<String, (PinDigest, Option<std::time::Instant>)>,
    /// The standing approvals read that approve nothing, once warned of
    /// (by tool, digest and grant record), so the watcher's reads every
    /// few hundred milliseconds warn of each once.
    warned: HashSet<(String, String, Option<u64>)>,
    /// The server's configured name, for what is logged of it.
    name: Option<String>,
    /// Its identity key in the store.
    key: Option<String>,
    /// Its identity for people.
    identity: Option<String>,
    /// The identity its pins were taken under, when that was another one.
    previous_identity: Option<String>,
    /// What its running sandbox proves (nothing without one).
    sandbox: SandboxProof,
}

/// What the host-facing names look like.
#[derive(Debug, Clone)]
pub(crate) struct Naming {
    /// Gateway mode: `server` + separator + tool; wrap mode: the tool's name.
    pub prefix: Option<String>,
}

/// What a finished listing found that the gateway acts on.
#[derive(Debug, Default)]
pub(crate) struct Listed {
    /// The store failed: the server must be stopped (fail closed).
    pub store_failure: Option<String>,
}

/// The catalog of every server.
#[derive(Debug)]
pub(crate) struct Catalog {
    servers: Vec<ServerTools>,
    store: Option<Arc<dyn Store>>,
}

// === impl Catalog ===

impl Catalog {
    /// An empty catalog for `count` servers.
    pub fn new(count: usize, store: Option<Arc<dyn Store>>) -> Self {
        Self {
            servers: (0..count).map(|_| ServerTools::new()).collect(),
            store,
        }
    }

    /// What the running sandbox of a server proves (nothing when it has none,
    /// or none that holds).
    pub fn sandbox(&self, idx: ServerIdx) -> SandboxProof {
        self.server(idx)
            .map_or_else(SandboxProof::default, |server| server.sandbox)
    }

    /// One server's part.
    pub fn server(&self, idx: ServerIdx) -> Option<&ServerTools> {
        self.servers.get(idx)
    }

    fn server_mut(&mut self, idx: ServerIdx) -> Option<&mut ServerTools> {
        self.servers.get_mut(idx)
    }

    /// A server starts: forget its tools, keep what its running sandbox
    /// proves, and load its pins and standing approvals for its identity,
    /// moving those of its last identity over when this one is new.
    ///
    /// # Errors
    ///
    /// The store's error: a server whose pins cannot be read does not run.
    pub fn open(
        &mut self,
        idx: ServerIdx,
        name: &str,
        key: Option<String>,
        identity: String,
        sandbox: SandboxProof,
    ) -> Result<(), StoreError> {
        let store = self.store.clone();
        let Some(server) = self.server_mut(idx) else {
            return Ok(());
        };
        *server = ServerTools::new();
        server.name = Some(name.to_owned());
        server.identity = Some(identity.clone());
        server.sandbox = sandbox;
        let (Some(store), Some(key)) = (store, key) else {
            return Ok(());
        };
        if let Some(moved) = store.rekey(name, &key)? {
            tracing::warn!(
                server.id = %name,
                was = %moved.from_identity,
                now = %identity,
                "the server's identity changed: its {} pin(s) are compared with what it lists now",
                moved.pins
            );
            if moved.from_identity != identity && !moved.from_identity.is_empty() {
                server.previous_identity = Some(moved.from_identity);
            } else {
                server.previous_identity = Some(String::new());
            }
        }
        for pin in store.pins_of(&key)? {
            // A tool the server stopped listing is pinned as removed: should
            // it come back, it is new.
            if pin.digest == REMOVED {
                continue;
            }
            // INVARIANT: only a pin this gateway or a person through
            // hintgate wrote is compared with: one written without the
            // audit key is taken for no pin at all, so its tool is new
            // (asked again on an untrusted server).
            if pin.seal != Seal::Valid {
                tracing::warn!(
                    server.id = %name,
                    tool.name = %escape_line(&pin.tool),
                    "the pin of this tool was written or changed without the audit key (its seal is {}): the tool is taken for a new one; `hintgate pins revoke` removes the pin",
                    pin.seal.as_str()
                );
                continue;
            }
            // A pin that cannot be read cannot be compared: taking the tool
            // for a new one would pin whatever the server lists now.
            let Some(digest) = PinDigest::parse(&pin.digest) else {
                return Err(StoreError::Corrupt(format!(
                    "the pin of `{}` has an unreadable digest `{}`; `hintgate pins revoke` removes it",
                    pin.tool, pin.digest
                )));
            };
            server.pins.insert(
                pin.tool.clone(),
                Pinned {
                    digest,
                    definition: Tool::from_value(pin.definition).ok(),
                    identity: pin.identity,
                    seen: pin.seen.map(|seen| seen.digest),
                },
            );
        }
        let approvals = store.approvals_of(&key)?;
        server.always = server.standing(name, approvals);
        server.key = Some(key);
        Ok(())
    }

    /// A server's read-only instance starts: forget what it listed, keep
    /// its identity and what its sandbox proves, and read nothing from the
    /// store (its tools are never pinned, approved or listed to a host).
    pub fn open_read_only(&mut self, idx: ServerIdx, identity: String, sandbox: SandboxProof) {
        if let Some(server) = self.server_mut(idx) {
            *server = ServerTools::new();
            server.identity = Some(identity);
            server.sandbox = sandbox;
        }
    }

    /// Completes a read-only instance's listing: each tool prepared as a
    /// full instance's is (parsed, digested, its name checked), so that a
    /// call is sent to the instance only when it lists the definition
    /// decided on, under a name that is plain and unlike its others.
    /// Nothing is pinned, and nothing of it reaches a host.
    pub fn finish_read_only_listing(
        &mut self,
        idx: ServerIdx,
        server_name: &str,
        policy: &Policy,
        naming: &Naming,
    ) {
        let Some(server) = self.server_mut(idx) else {
            return;
        };
        let mut pages = std::mem::take(&mut server.pages);
        let cap =
            usize::try_from(policy.config().gateway.max_tools_per_server).unwrap_or(usize::MAX);
        pages.truncate(cap);
        server.tools.clear();
        server.order.clear();
        let sandbox = server.sandbox;
        for (name, entry) in prepare(pages, server_name, policy, naming, sandbox) {
            if server.tools.insert(name.clone(), entry).is_none() {
                server.order.push(name);
            }
        }
        server.listing = Listing::Listed;
    }

    /// The server's instructions as the host may see them: pinned on first
    /// sight; when they changed, the new text is held and the pinned one
    /// given (design §5).
    ///
    /// # Errors
    ///
    /// The store's error (the server is then stopped).
    pub fn pin_instructions(
        &mut self,
        idx: ServerIdx,
        server_name: &str,
        text: &str,
        now: i64,
    ) -> Result<Option<String>, StoreError> {
        let store = self.store.clone();
        let Some(server) = self.server_mut(idx) else {
            return Ok(None);
        };
        let (Some(store), Some(key)) = (store, server.key.clone()) else {
            return Ok(None);
        };
        let definition = json!({ "instructions": text });
        let digest = PinDigest::of_json(&definition);
        let identity = server.identity.clone().unwrap_or_default();
        match server.pins.get(INSTRUCTIONS) {
            None => {
                store.put_pin(&Pin {
                    server_key: key,
                    server: server_name.to_owned(),
                    identity: identity.clone(),
                    tool: INSTRUCTIONS.to_owned(),
                    digest: digest.to_string(),
                    definition,
                    pinned_at: now,
                    seen: None,
                    seal: Seal::default(),
                })?;
                server.pins.insert(
                    INSTRUCTIONS.to_owned(),
                    Pinned {
                        digest,
                        definition: None,
                        identity,
                        seen: None,
                    },
                );
                Ok(None)
            }
            Some(pinned) if pinned.digest == digest => {
                if pinned.seen.is_some() {
                    store.clear_seen(&key, INSTRUCTIONS)?;
                }
                Ok(None)
            }
            Some(_) => {
                tracing::warn!(
                    server.id = %server_name,
                    "the server's instructions changed since they were pinned: the host gets the pinned ones until `hintgate pins approve {server_name} '{INSTRUCTIONS}'`"
                );
                store.see(
                    &key,
                    INSTRUCTIONS,
                    &Seen {
                        digest: digest.to_string(),
                        definition,
                        identity,
                    },
                )?;
                // The host keeps the text that was pinned.
                let pinned = store
                    .pin(&key, INSTRUCTIONS)?
                    .and_then(|pin| pin.definition.get("instructions").cloned())
                    .and_then(|text| text.as_str().map(str::to_owned));
                Ok(Some(pinned.unwrap_or_default()))
            }
        }
    }

    /// Starts a listing.
    pub fn begin_listing(&mut self, idx: ServerIdx) {
        if let Some(server) = self.server_mut(idx) {
            server.listing = Listing::InProgress;
            server.pages.clear();
            server.pages_seen = 0;
            server.stale = false;
        }
    }

    /// Adds one page of tools to the listing in progress; returns how many
    /// pages it has had.
    pub fn add_page(&mut self, idx: ServerIdx, tools: Vec<Value>) -> usize {
        match self.server_mut(idx) {
            Some(server) => {
                server.pages.extend(tools);
                server.pages_seen += 1;
                server.pages_seen
            }
            None => 0,
        }
    }

    /// The listing failed.
    pub fn listing_failed(&mut self, idx: ServerIdx, reason: String) {
        if let Some(server) = self.server_mut(idx) {
            server.pages.clear();
            server.stale = false;
            server.listing = Listing::Failed(reason);
        }
    }

    /// Forgets a server's tools (it stopped, or said its list changed).
    pub fn forget(&mut self, idx: ServerIdx) {
        if let Some(server) = self.server_mut(idx) {
            server.tools.clear();
            server.order.clear();
            server.pages.clear();
            server.stale = false;
            server.listing = Listing::Unlisted;
        }
    }

    /// The server said its list changed. Returns whether it must be listed
    /// now: not while a listing is in progress, which is marked stale and
    /// followed by one more when it ends, however many changes are
    /// announced meanwhile.
    pub fn changed(&mut self, idx: ServerIdx) -> bool {
        match self.server_mut(idx) {
            Some(server) if server.listing == Listing::InProgress => {
                server.stale = true;
                false
            }
            Some(_) => {
                self.forget(idx);
                true
            }
            None => false,
        }
    }

    /// A listing's last page came: whether a change was announced while it
    /// ran (then it is listed again, and the flag is cleared).
    pub fn take_stale(&mut self, idx: ServerIdx) -> bool {
        self.server_mut(idx)
            .is_some_and(|server| std::mem::take(&mut server.stale))
    }

    /// Completes a listing: prepares each tool once, compares it with its
    /// pin (pinning a trusted server's new tools on first sight, holding a
    /// changed definition for approval), and records the pinned tools the
    /// server no longer lists.
    pub fn finish_listing(
        &mut self,
        idx: ServerIdx,
        server_name: &str,
        policy: &Policy,
        naming: &Naming,
        now: i64,
    ) -> Listed {
        let store = self.store.clone();
        let Some(server) = self.server_mut(idx) else {
            return Listed::default();
        };
        let trusted = policy
            .server(server_name)
            .is_some_and(|config| config.trust == Trust::Trusted);
        let identity = server.identity.clone().unwrap_or_default();
        let mut pages = std::mem::take(&mut server.pages);
        // INVARIANT: what a server can make the gateway keep of its tools
        // is bounded: one listing's tools, and the pins new names add.
        let cap =
            usize::try_from(policy.config().gateway.max_tools_per_server).unwrap_or(usize::MAX);
        if pages.len() > cap {
            tracing::warn!(
                server.id = %server_name,
                "the server listed {} tools; hintgate lists at most {cap} of one server (`max_tools_per_server` in `[gateway]`), and left the rest out",
                pages.len()
            );
            pages.truncate(cap);
        }
        server.tools.clear();
        server.order.clear();
        let check = PinCheck {
            server_name,
            identity: &identity,
            trusted,
            now,
            store: store.as_deref(),
        };
        let mut writes = PinWrites::default();
        let mut unpinned = 0usize;
        let sandbox = server.sandbox;
        for (name, entry) in prepare(pages, server_name, policy, naming, sandbox) {
            if server.new_past_cap(&entry, trusted, cap) {
                unpinned += 1;
                continue;
            }
            if let Some(trouble) = &entry.name_trouble {
                // Never listed, called or pinned: a person could not tell
                // what they approve by its name.
                tracing::warn!(server.id = %server_name, tool.name = %escape_line(&name), "{}; the tool is not listed, and a call to it is refused", trouble.describe());
            }
            match (&entry.tool, entry.digest) {
                (Ok(_), Some(_)) if entry.name_trouble.is_some() => {}
                (Ok(tool), Some(digest)) => {
                    server.compare_pin(tool, digest, &entry.raw, &check, &mut writes);
                }
                (Err(err), _) => {
                    tracing::warn!(server.id = %server_name, tool.name = %escape_line(&name), "invalid tool definition: {err}");
                }
                (Ok(_), None) => {}
            }
            // The same name twice looks alike: both are refused, so which
            // one the map keeps does not matter.
            if server.tools.insert(name.clone(), entry).is_none() {
                server.order.push(name);
            }
        }
        if unpinned > 0 {
            tracing::warn!(
                server.id = %server_name,
                "the server has {} pinned tools, as many as hintgate keeps of one server (`max_tools_per_server` in `[gateway]`): {unpinned} new tool(s) were not pinned, and are not listed (`hintgate pins revoke` removes pins of tools it no longer has)",
                server.pins.len()
            );
        }
        let failure = server.write_pins(&check, writes);
        server.listing = Listing::Listed;
        Listed {
            store_failure: failure,
        }
    }

    /// A tool of a server, by its own name.
    pub fn tool(&self, idx: ServerIdx, name: &str) -> Option<&ToolEntry> {
        self.server(idx)?.tools.get(name)
    }

    /// How a tool's current definition compares with its pin.
    pub fn pin_status(&self, idx: ServerIdx, name: &str, digest: PinDigest) -> PinStatus {
        match self.server(idx).and_then(|server| server.pins.get(name)) {
            None => PinStatus::New,
            Some(pinned) if pinned.digest == digest => PinStatus::Unchanged,
            Some(_) => PinStatus::Changed,
        }
    }

    /// Whether a tool stands approved always, for this definition.
    pub fn approved_always(&self, idx: ServerIdx, name: &str, digest: PinDigest) -> Remembered {
        match self.server(idx).and_then(|server| server.always.get(name)) {
            Some((approved, _)) if *approved == digest => Remembered::Always,
            _ => Remembered::None,
        }
    }

    /// The pinned definition of a tool, for the diff of a change.
    pub fn pinned_definition(&self, idx: ServerIdx, name: &str) -> Option<&Tool> {
        self.server(idx)?.pins.get(name)?.definition.as_ref()
    }

    /// The identity a server's pins were taken under, when it changed.
    pub fn previous_identity(&self, idx: ServerIdx) -> Option<&str> {
        self.server(idx)?.previous_identity.as_deref()
    }

    /// A server's identity key.
    pub fn key(&self, idx: ServerIdx) -> Option<&str> {
        self.server(idx)?.key.as_deref()
    }

    /// A server's identity for people.
    pub fn identity(&self, idx: ServerIdx) -> Option<&str> {
        self.server(idx)?.identity.as_deref()
    }

    /// The host's views of a server's tools, in listing order, each with
    /// the server's own name of the tool.
    pub fn host_views(&self, idx: ServerIdx, scope: Scope) -> impl Iterator<Item = (&str, &str)> {
        self.server(idx).into_iter().flat_map(move |server| {
            server.order.iter().filter_map(move |name| {
                let entry = server.tools.get(name)?;
                if scope == Scope::Read && !entry.read_scope {
                    return None;
                }
                Some((name.as_str(), entry.host_view.as_deref()?))
            })
        })
    }

    /// A person approved a call: pin the definition they saw, and stand the
    /// approval always when asked to. Nothing is pinned unless the server
    /// still lists that very definition (`digest`).
    ///
    /// # Errors
    ///
    /// The store's error: then nothing is pinned or stands approved, and the
    /// approval holds for this call only.
    pub fn approve(
        &mut self,
        idx: ServerIdx,
        server_name: &str,
        tool: &str,
        digest: PinDigest,
        always: bool,
        now: i64,
    ) -> Result<(), StoreError> {
        let store = self.store.clone();
        let Some(server) = self.server_mut(idx) else {
            return Ok(());
        };
        let identity = server.identity.clone().unwrap_or_default();
        let Some(entry) = server
            .tools
            .get(tool)
            .filter(|entry| entry.digest == Some(digest))
        else {
            return Ok(());
        };
        let definition = entry.tool.as_ref().ok().cloned();
        if let (Some(store), Some(key)) = (store, &server.key) {
            store.put_pin(&stored_pin(
                key,
                server_name,
                &identity,
                &entry.raw,
                digest,
                now,
            ))?;
            if always {
                store.approve_always(key, tool, &digest.to_string())?;
            }
        }
        server.pins.insert(
            tool.to_owned(),
            Pinned {
                digest,
                definition,
                identity,
                seen: None,
            },
        );
        if always {
            // Stamped once it is stored: a read of the store that began
            // before this moment may not see it, one that began after does.
            server
                .always
                .insert(tool.to_owned(), (digest, Some(std::time::Instant::now())));
        }
        Ok(())
    }

    /// The standing approvals of a key, as read from the store by a read
    /// that began at `read_at`. They replace the catalog's copy, but for an
    /// approval this gateway gave after that read began: the read could not
    /// see it yet, and dropping it would ask the person again.
    pub fn set_approvals(
        &mut self,
        key: &str,
        approvals: Vec<hintgate_store::Approval>,
        read_at: std::time::Instant,
    ) {
        for server in &mut self.servers {
            if server.key.as_deref() != Some(key) {
                continue;
            }
            let name = server.name.clone().unwrap_or_default();
            let mut fresh = server.standing(&name, approvals.clone());
            for (tool, (digest, given)) in &server.always {
                if given.is_some_and(|given| given >= read_at) {
                    fresh.insert(tool.clone(), (*digest, *given));
                }
            }
            server.always = fresh;
        }
    }

    /// The identity keys of every started server (for the store watcher).
    pub fn keys(&self) -> Vec<String> {
        self.servers
            .iter()
            .filter_map(|server| server.key.clone())
            .collect()
    }
}

// === impl ServerTools ===

impl ServerTools {
    /// A trusted server's new tool is pinned on first sight, and a pin is
    /// kept when its tool is gone: a server that lists new names every time
    /// would grow the pins without end. Past the cap, a new tool is not
    /// pinned, and so not listed: whether `entry` is such a tool.
    fn new_past_cap(&self, entry: &ToolEntry, trusted: bool, cap: usize) -> bool {
        trusted
            && self.pins.len() >= cap
            && entry.name_trouble.is_none()
            && matches!((&entry.tool, entry.digest), (Ok(tool), Some(_)) if !self.pins.contains_key(&tool.name))
    }

    /// Compares a listed tool with its pin: a trusted server's new tool is
    /// pinned on first sight, a changed definition is held for approval
    /// (what was seen recorded once), and an unchanged one seen under a new
    /// identity is pinned again under it.
    fn compare_pin(
        &mut self,
        tool: &Tool,
        digest: PinDigest,
        raw: &Value,
        check: &PinCheck<'_>,
        writes: &mut PinWrites,
    ) {
        let (server_name, identity, now) = (check.server_name, check.identity, check.now);
        match self.pins.get(&tool.name) {
            // A trusted server's new tools are pinned on first sight.
            None if check.trusted => {
                self.pins.insert(
                    tool.name.clone(),
                    Pinned {
                        digest,
                        definition: Some(tool.clone()),
                        identity: identity.to_owned(),
                        seen: None,
                    },
                );
                if let Some(key) = &self.key {
                    writes.first_seen.push(stored_pin(
                        key,
                        server_name,
                        identity,
                        raw,
                        digest,
                        now,
                    ));
                }
            }
            None => {}
            Some(pinned) if pinned.digest != digest => {
                tracing::warn!(server.id = %server_name, tool.name = %tool.name, "definition changed since it was approved; held for approval");
                let seen_digest = digest.to_string();
                if pinned.seen.as_deref() != Some(seen_digest.as_str())
                    && let (Some(store), Some(key)) = (check.store, &self.key)
                {
                    let seen = Seen {
                        digest: seen_digest.clone(),
                        definition: raw.clone(),
                        identity: identity.to_owned(),
                    };
                    if let Err(err) = store.see(key, &tool.name, &seen) {
                        writes.failure = Some(err.to_string());
                    }
                }
                if let Some(pinned) = self.pins.get_mut(&tool.name) {
                    pinned.seen = Some(seen_digest);
                }
            }
            Some(pinned) => {
                // Unchanged, under a new identity: the pin now names
                // the identity it was confirmed under.
                if pinned.identity != identity
                    && pinned.seen.is_none()
                    && let Some(key) = &self.key
                {
                    writes.reidentified.push(stored_pin(
                        key,
                        server_name,
                        identity,
                        raw,
                        digest,
                        now,
                    ));
                }
            }
        }
    }

    /// Writes what a listing's comparison left to the store: the new pins,
    /// those under a new identity (named by it here too), and the pinned
    /// tools it no longer lists. The last failure, if any.
    fn write_pins(&mut self, check: &PinCheck<'_>, writes: PinWrites) -> Option<String> {
        let PinWrites {
            mut first_seen,
            reidentified,
            mut failure,
        } = writes;
        if let Some(store) = check.store {
            first_seen.extend(reidentified.iter().cloned());
            if !first_seen.is_empty()
                && let Err(err) = store.put_pins(&first_seen)
            {
                failure = Some(err.to_string());
            }
            for pin in &reidentified {
                if let Some(pinned) = self.pins.get_mut(&pin.tool) {
                    pinned.identity = check.identity.to_owned();
                }
            }
            if let Err(err) = self.record_removed(store, check.server_name, check.identity) {
                failure = Some(err.to_string());
            }
        }
        failure
    }
    /// The standing approvals that approve, by tool, from those read from
    /// the store. INVARIANT: only an approval whose seal verifies and whose
    /// grant the audit log holds, revoked by nothing since, approves; each
    /// other one is warned of (once) and approves nothing: a row written
    /// without the key, or put back from an older copy of the database.
    fn standing(
        &mut self,
        server_name: &str,
        approvals: Vec<hintgate_store::Approval>,
    ) -> HashMap<String, (PinDigest, Option<std::time::Instant>)> {
        let mut standing = HashMap::new();
        for approval in approvals {
            if !approval.approves() {
                let warned = (
                    approval.tool.clone(),
                    approval.digest.clone(),
                    approval.granted,
                );
                if self.warned.insert(warned) {
                    let why = if approval.seal == Seal::Valid {
                        approval.standing.to_string()
                    } else {
                        format!(
                            "it was written or changed without the audit key (its seal is {})",
                            approval.seal.as_str()
                        )
                    };
                    tracing::warn!(
                        server.id = %server_name,
                        tool.name = %escape_line(&approval.tool),
                        standing = approval.standing.as_str(),
                        "a standing approval of this tool approves nothing: {why}; the tool is asked about again"
                    );
                }
                continue;
            }
            if let Some(digest) = PinDigest::parse(&approval.digest) {
                standing.insert(approval.tool, (digest, None));
            }
        }
        standing
    }

    fn new() -> Self {
        Self {
            listing: Listing::Unlisted,
            pages: Vec::new(),
            pages_seen: 0,
            stale: false,
            tools: HashMap::default(),
            order: Vec::new(),
            pins: HashMap::new(),
            always: HashMap::new(),
            warned: HashSet::new(),
            name: None,
            key: None,
            identity: None,
            previous_identity: None,
            sandbox: SandboxProof::default(),
        }
    }

    /// Records the pinned tools the listing no longer has as removed, and
    /// clears that record for those that came back unchanged.
    fn record_removed(
        &mut self,
        store: &dyn Store,
        server_name: &str,
        identity: &str,
    ) -> Result<(), StoreError> {
        let Some(key) = self.key.clone() else {
            return Ok(());
        };
        for (name, pinned) in &mut self.pins {
            if name == INSTRUCTIONS {
                continue;
            }
            let listed = self.tools.get(name).and_then(|entry| entry.digest);
            match (listed, pinned.seen.as_deref()) {
                (None, Some(REMOVED)) => {}
                (None, _) => {
                    tracing::info!(server.id = %server_name, tool.name = %name, "a pinned tool is no longer listed; recorded as removed");
                    store.see(
                        &key,
                        name,
                        &Seen {
                            digest: REMOVED.to_owned(),
                            definition: Value::Null,
                            identity: identity.to_owned(),
                        },
                    )?;
                    pinned.seen = Some(REMOVED.to_owned());
                }
                (Some(digest), Some(_)) if digest == pinned.digest => {
                    store.clear_seen(&key, name)?;
                    pinned.seen = None;
                }
                (Some(_), _) => {}
            }
        }
        Ok(())
    }
}

// === impl ToolEntry ===

impl ToolEntry {
    fn new(
        raw: Value,
        server_name: &str,
        policy: &Policy,
        naming: &Naming,
        name_trouble: Option<NameTrouble>,
        sandbox: SandboxProof,
    ) -> Self {
        let tool = Tool::from_value(raw.clone()).map_err(|err| err.to_string());
        let digest = tool.as_ref().ok().map(PinDigest::of);
        let (host_view, read_scope, repeatable, taints) = match &tool {
            Ok(tool) => (
                name_trouble
                    .is_none()
                    .then(|| host_view(&raw, tool, server_name, policy, naming, sandbox))
                    .flatten(),
                policy.visible_to(server_name, tool, sandbox, Scope::Read),
                policy.repeatable(server_name, tool, sandbox),
                policy.taints_session(server_name, &tool.name),
            ),
            Err(_) => (None, false, false, false),
        };
        Self {
            raw,
            tool,
            digest_text: digest.map(|digest| Arc::from(digest.to_string())),
            digest,
            input: OnceLock::new(),
            output: OnceLock::new(),
            host_view,
            read_scope,
            name_trouble,
            repeatable,
            taints,
        }
    }

    /// The input schema's validator (compiled on first use).
    pub fn input_validator(&self) -> Option<Arc<jsonschema::Validator>> {
        self.input
            .get_or_init(|| compile(self.tool.as_ref().ok()?.input_schema.as_ref()))
            .clone()
    }

    /// The output schema's validator (compiled on first use).
    pub fn output_validator(&self) -> Option<Arc<jsonschema::Validator>> {
        self.output
            .get_or_init(|| compile(self.tool.as_ref().ok()?.output_schema.as_ref()))
            .clone()
    }
}

/// A listing's tools, each with its name, prepared once, and marked when its
/// name breaks the rule of [`hintgate_policy::name`]: a name that is not
/// plain, or one that looks like another plain name of the listing (the
/// same name twice included). Names that are not plain are never listed, so
/// they make no other name ambiguous.
fn prepare(
    pages: Vec<Value>,
    server_name: &str,
    policy: &Policy,
    naming: &Naming,
    sandbox: SandboxProof,
) -> Vec<(String, ToolEntry)> {
    let names: Vec<String> = pages
        .iter()
        .map(|raw| {
            raw.get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    let troubles = name_troubles(&names);
    pages
        .into_iter()
        .zip(names)
        .zip(troubles)
        .map(|((raw, name), trouble)| {
            let entry = ToolEntry::new(raw, server_name, policy, naming, trouble, sandbox);
            (name, entry)
        })
        .collect()
}

/// What breaks the rule of [`hintgate_policy::name`] in each of the names
/// one server listed (its tools, or its prompts), in their order: a name
/// that is not plain, or one that looks like another plain name of the
/// listing (the same name twice included). Names that are not plain are
/// never listed, so they make no other name ambiguous.
pub(super) fn name_troubles(names: &[String]) -> Vec<Option<NameTrouble>> {
    let problems: Vec<Option<String>> = names
        .iter()
        .map(|name| hintgate_policy::name::problem(name))
        .collect();
    let mut by_look: HashMap<String, Vec<&str>> = HashMap::new();
    for (name, problem) in names.iter().zip(&problems) {
        if problem.is_none() {
            by_look
                .entry(hintgate_policy::name::look_alike(name))
                .or_default()
                .push(name);
        }
    }
    names
        .iter()
        .zip(&problems)
        .map(|(name, problem)| match problem {
            Some(problem) => Some(NameTrouble::NotPlain(problem.clone())),
            None => {
                let alike = by_look.get(&hintgate_policy::name::look_alike(name))?;
                (alike.len() > 1).then(|| {
                    // Empty when the server lists this very name again.
                    let mut others: Vec<String> = alike
                        .iter()
                        .filter(|other| **other != name.as_str())
                        .map(|other| (*other).to_owned())
                        .collect();
                    others.sort();
                    others.dedup();
                    NameTrouble::LooksLike(others)
                })
            }
        })
        .collect()
}

// === impl NameTrouble ===

impl NameTrouble {
    /// What is wrong with the name, in words that follow "its name".
    pub fn describe(&self) -> String {
        match self {
            Self::NotPlain(problem) => format!("its name {problem}"),
            Self::LooksLike(others) if others.is_empty() => {
                "its name is listed more than once by the server, so which definition would run is not clear".to_owned()
            }
            Self::LooksLike(others) => format!(
                "its name looks the same as {} of the same server, so a person could take one for the other",
                others
                    .iter()
                    .map(|other| format!("`{}`", escape_line(other)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// The reason code a refused call records.
    pub fn code(&self) -> ReasonCode {
        match self {
            Self::NotPlain(_) => ReasonCode::InvalidToolName,
            Self::LooksLike(_) => ReasonCode::AmbiguousToolName,
        }
    }
}

/// A schema's validator; a schema that does not compile is not checked (and
/// said so, once).
fn compile(schema: Option<&Value>) -> Option<Arc<jsonschema::Validator>> {
    let schema = schema?;
    match jsonschema::validator_for(schema) {
        Ok(validator) => Some(Arc::new(validator)),
        Err(err) => {
            tracing::warn!("a tool's schema cannot be compiled, so it is not checked: {err}");
            None
        }
    }
}

/// A tool as the host sees it, or `None` when it is hidden: the host-facing
/// name, sanitized title and description, the vouched annotations, and the
/// server's own claims under `_meta["hintgate/declared"]`.
fn host_view(
    raw: &Value,
    tool: &Tool,
    server_name: &str,
    policy: &Policy,
    naming: &Naming,
    sandbox: SandboxProof,
) -> Option<String> {
    if !policy.visible(server_name, tool, sandbox) {
        return None;
    }
    let effective = policy
        .assess(server_name, tool, sandbox)
        .map_or(EffectiveHints::CAUTIOUS, |assessment| assessment.effective);
    let mut view = raw.clone();
    let object = view.as_object_mut()?;
    let name = match &naming.prefix {
        Some(prefix) => format!("{prefix}{}", tool.name),
        None => tool.name.clone(),
    };
    object.insert("name".to_owned(), Value::String(name));
    for field in ["title", "description"] {
        if let Some(text) = object.get(field).and_then(Value::as_str) {
            let clean = sanitize(text);
            if !clean.is_clean() {
                tracing::warn!(server.id = %server_name, tool.name = %tool.name, removed = ?clean.removed, "sanitized the tool's {field}");
            }
            // A title names the tool: one line, as hosts show it.
            let text = match field {
                "title" => one_line(&clean.text),
                _ => clean.text,
            };
            object.insert(field.to_owned(), Value::String(text));
        }
    }
    let mut annotations = serde_json::to_value(effective).unwrap_or_else(|_| json!({}));
    if let (Some(map), Some(title)) = (
        annotations.as_object_mut(),
        tool.annotations.as_ref().and_then(|a| a.title.as_deref()),
    ) {
        map.insert(
            "title".to_owned(),
            Value::String(one_line(&sanitize(title).text)),
        );
    }
    let declared = object.get("annotations").cloned().unwrap_or(Value::Null);
    object.insert("annotations".to_owned(), annotations);
    let meta = object
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(meta) = meta.as_object_mut() {
        meta.insert("hintgate/declared".to_owned(), declared);
    }
    Some(view.to_string())
}

/// A pin as the store keeps it.
fn stored_pin(
    key: &str,
    server: &str,
    identity: &str,
    definition: &Value,
    digest: PinDigest,
    now: i64,
) -> Pin {
    Pin {
        server_key: key.to_owned(),
        server: server.to_owned(),
        identity: identity.to_owned(),
        tool: definition
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        digest: digest.to_string(),
        definition: definition.clone(),
        pinned_at: now,
        seen: None,
        seal: Seal::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hintgate_policy::config::parse_str;
    use hintgate_store::MemoryStore;
    use std::time::Instant;

    fn catalog() -> (Catalog, Policy, PinDigest) {
        let (config, _) = parse_str("[servers.fx]\ncommand = \"x\"\ntrust = \"trusted\"\n");
        let policy = Policy::new(config.unwrap());
        let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
        let mut catalog = Catalog::new(1, Some(store));
        catalog
            .open(
                0,
                "fx",
                Some("key".to_owned()),
                "x".to_owned(),
                SandboxProof::default(),
            )
            .unwrap();
        catalog.begin_listing(0);
        let tool = json!({"name": "note", "inputSchema": {"type": "object"}});
        catalog.add_page(0, vec![tool.clone()]);
        let naming = Naming { prefix: None };
        let listed = catalog.finish_listing(0, "fx", &policy, &naming, 1);
        assert!(listed.store_failure.is_none());
        let digest = PinDigest::of(&Tool::from_value(tool).unwrap());
        (catalog, policy, digest)
    }

    #[test]
    fn a_read_older_than_the_gateways_own_approval_does_not_take_it_away() {
        let (mut catalog, _, digest) = catalog();
        let before = Instant::now();
        catalog.approve(0, "fx", "note", digest, true, 2).unwrap();
        assert_eq!(
            catalog.approved_always(0, "note", digest),
            Remembered::Always
        );
        // A read that began before the approval, without it: kept.
        catalog.set_approvals("key", Vec::new(), before);
        assert_eq!(
            catalog.approved_always(0, "note", digest),
            Remembered::Always
        );
        // A read that began after it, without it (revoked elsewhere): gone.
        catalog.set_approvals("key", Vec::new(), Instant::now());
        assert_eq!(catalog.approved_always(0, "note", digest), Remembered::None);
        // Given elsewhere: it stands.
        let approval = hintgate_store::Approval {
            tool: "note".to_owned(),
            digest: digest.to_string(),
            seal: Seal::Valid,
            granted: Some(7),
            standing: hintgate_store::Standing::InForce,
        };
        catalog.set_approvals("key", vec![approval.clone()], Instant::now());
        assert_eq!(
            catalog.approved_always(0, "note", digest),
            Remembered::Always
        );
        // Read again, its row now older than the log (revoked by record 9,
        // then put back): it approves nothing, sealed or not.
        let superseded = hintgate_store::Approval {
            standing: hintgate_store::Standing::Superseded { by: 9 },
            ..approval.clone()
        };
        catalog.set_approvals("key", vec![superseded], Instant::now());
        assert_eq!(catalog.approved_always(0, "note", digest), Remembered::None);
        let broken = hintgate_store::Approval {
            seal: Seal::Broken,
            ..approval
        };
        catalog.set_approvals("key", vec![broken], Instant::now());
        assert_eq!(catalog.approved_always(0, "note", digest), Remembered::None);
    }

    #[test]
    fn changes_announced_during_a_listing_make_one_more() {
        let (mut catalog, _, _) = catalog();
        // Listed: a change forgets the tools and asks for a listing now.
        assert!(catalog.changed(0));
        assert_eq!(catalog.server(0).unwrap().listing, Listing::Unlisted);
        catalog.begin_listing(0);
        // While it runs, any number of changes ask for nothing now...
        for _ in 0..1000 {
            assert!(!catalog.changed(0));
        }
        // ...and for one listing more when it ends.
        assert!(catalog.take_stale(0));
        assert!(!catalog.take_stale(0));
        assert_eq!(catalog.add_page(0, Vec::new()), 1);
        assert_eq!(catalog.add_page(0, Vec::new()), 2);
        catalog.begin_listing(0);
        assert_eq!(catalog.add_page(0, Vec::new()), 1, "counted per listing");
    }

    #[test]
    fn a_tool_is_found_by_name_with_its_pin_and_view() {
        let (catalog, _, digest) = catalog();
        let entry = catalog.tool(0, "note").unwrap();
        assert_eq!(entry.digest, Some(digest));
        assert_eq!(catalog.pin_status(0, "note", digest), PinStatus::Unchanged);
        assert_eq!(catalog.host_views(0, Scope::Write).count(), 1);
        assert!(catalog.tool(0, "other").is_none());
    }
}
