//! The hosts' resource subscriptions, by server and URI.
//!
//! Several host sessions share one set of servers, so a subscription is
//! kept once per server and URI with the sessions that asked for it: an
//! update goes to those sessions only, a legacy server is told to
//! unsubscribe only when the last of them does (or goes away), and a
//! 2026-07-28 server, which has no `resources/subscribe`, gets one
//! `subscriptions/listen` stream per URI (`resourceSubscriptions: [uri]`),
//! opened for the first session and cancelled when the last one leaves.
//! A host's `resources/subscribe` to such a server is answered once the
//! server acknowledges the stream with the URI among those it honours.
//!
//! What a session can make the gateway keep is bounded: at most
//! [`PER_SESSION`] subscriptions a session, and [`TOTAL`] across every
//! session (each may be a stream held open on a server).

use std::collections::{BTreeMap, BTreeSet};

use hintgate_policy::sanitize::escape_line;
use serde_json::{Value, json};

use super::Gateway;
use super::inflight::{InFlight, UpPurpose};
use super::outbox::Outbox;
use super::request::{HostRequest, ServerIdx, SessionId};
use crate::frame::{self, Message};

/// The most resource subscriptions one session holds.
pub(crate) const PER_SESSION: usize = 64;

/// The most distinct subscriptions (server and URI) across every session.
pub(crate) const TOTAL: usize = 1024;

/// Every subscription, by server and URI.
#[derive(Debug, Default)]
pub(crate) struct Subscriptions {
    list: BTreeMap<(ServerIdx, String), Subscription>,
}

/// One URI of one server that sessions subscribed to.
#[derive(Debug, Default)]
pub(crate) struct Subscription {
    /// The sessions it is for.
    pub sessions: BTreeSet<SessionId>,
    /// For a 2026-07-28 server: the id of its listen request.
    pub listen: Option<u64>,
    /// The server acknowledged the listen stream.
    pub acknowledged: bool,
    /// Host requests (`resources/subscribe`) waiting for the
    /// acknowledgement.
    pub waiting: Vec<HostRequest>,
    /// It is not made on its server: the server stopped since it was made,
    /// or was not ready when a 2026-07-28 host asked for it. It is made
    /// when the server is ready ([`restore_subscriptions`]).
    pub lost: bool,
}

/// A subscription no session holds any more, to end on its server.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Ended {
    /// The server.
    pub server: ServerIdx,
    /// The URI.
    pub uri: String,
    /// The listen request to cancel (a 2026-07-28 server); `None` for a
    /// legacy server, which is sent `resources/unsubscribe`.
    pub listen: Option<u64>,
    /// The server stopped since it was made, and so has forgotten it:
    /// nothing is sent.
    pub lost: bool,
}

/// The `message` of a server's JSON-RPC error (`raw`), made one line with
/// nothing hidden in it, and at most 200 characters.
pub(super) fn error_message(raw: &str) -> String {
    let text = serde_json::from_str::<Value>(raw)
        .ok()
        .and_then(|error| {
            error
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "no message".to_owned());
    let clean =
        hintgate_policy::sanitize::one_line(&hintgate_policy::sanitize::sanitize(&text).text);
    clean.chars().take(200).collect()
}

// === impl Subscriptions ===

impl Subscriptions {
    /// A subscription's listen stream (to server `idx`, named `server`) was
    /// answered, failed or timed out before its acknowledgement: the hosts
    /// waiting for it get `why` (into the outbox), and it is forgotten.
    pub fn fail(
        &mut self,
        idx: ServerIdx,
        server: &str,
        uri: &str,
        why: &str,
        outbox: &mut Outbox,
    ) {
        let Some(sub) = self.remove(idx, uri) else {
            return;
        };
        tracing::warn!(server.id = %server, "{why}");
        for request in sub.waiting {
            outbox.error(request.session, request.id(), -32603, why);
        }
    }

    /// A response to a request of the gateway's that is no longer in flight:
    /// when it ends a subscription's listen stream (the server closed it),
    /// the subscription is forgotten. Returns whether it did.
    pub fn listen_ended(&mut self, idx: ServerIdx, server: &str, id: u64) -> bool {
        let Some(uri) = self.by_listen(idx, id) else {
            return false;
        };
        tracing::warn!(
            server.id = %server,
            resource.uri = %escape_line(&uri),
            "the server ended the listen stream of a resource subscription: its hosts get no more updates of it"
        );
        self.remove(idx, &uri);
        true
    }

    /// Server `idx` stopped: it forgot its subscriptions. What waited for
    /// one gets `why`; one a session holds is kept and made again when the
    /// server is ready again ([`restore_subscriptions`]), and its
    /// sessions are told the resource may have changed
    /// (`notifications/resources/updated`, which carries nothing of the
    /// server's): updates made while the server was down reach no one, and
    /// the host's read of it starts the server again.
    pub fn orphan(&mut self, idx: ServerIdx, server: &str, why: &str, outbox: &mut Outbox) {
        for orphaned in self.orphan_server(idx) {
            for request in orphaned.waiting {
                outbox.error(request.session, request.id(), -32603, why);
            }
            if orphaned.sessions.is_empty() {
                continue;
            }
            tracing::warn!(
                server.id = %server,
                resource.uri = %escape_line(&orphaned.uri),
                "the server stopped: its hosts are told to read a resource they subscribed to again, and the subscription is made again when the server starts"
            );
            let line = frame::notification(
                "notifications/resources/updated",
                &json!({"uri": orphaned.uri}),
            );
            for session in orphaned.sessions {
                outbox.host_note(session, line.clone(), None);
            }
        }
    }

    /// How many subscriptions `session` holds or waits for.
    pub fn count_for(&self, session: SessionId) -> usize {
        self.list
            .values()
            .filter(|sub| {
                sub.sessions.contains(&session)
                    || sub.waiting.iter().any(|request| request.session == session)
            })
            .count()
    }

    /// Whether one more subscription by `session` to `uri` of `server` fits
    /// the bounds; `Err` says which bound it passes.
    pub fn room(&self, server: ServerIdx, uri: &str, session: SessionId) -> Result<(), String> {
        let key = (server, uri.to_owned());
        if let Some(sub) = self.list.get(&key)
            && sub.sessions.contains(&session)
        {
            return Ok(());
        }
        if self.count_for(session) >= PER_SESSION {
            return Err(format!(
                "hintgate keeps at most {PER_SESSION} resource subscriptions per session; unsubscribe from one first"
            ));
        }
        if !self.list.contains_key(&key) && self.list.len() >= TOTAL {
            return Err(format!(
                "hintgate keeps at most {TOTAL} resource subscriptions across every session; this one was not made"
            ));
        }
        Ok(())
    }

    /// The subscription to `uri` of `server`, made when missing.
    pub fn entry(&mut self, server: ServerIdx, uri: &str) -> &mut Subscription {
        self.list.entry((server, uri.to_owned())).or_default()
    }

    /// The subscription to `uri` of `server`.
    pub fn get(&self, server: ServerIdx, uri: &str) -> Option<&Subscription> {
        self.list.get(&(server, uri.to_owned()))
    }

    /// The subscription to `uri` of `server`, to change.
    pub fn get_mut(&mut self, server: ServerIdx, uri: &str) -> Option<&mut Subscription> {
        self.list.get_mut(&(server, uri.to_owned()))
    }

    /// Removes the subscription to `uri` of `server`.
    pub fn remove(&mut self, server: ServerIdx, uri: &str) -> Option<Subscription> {
        self.list.remove(&(server, uri.to_owned()))
    }

    /// The URI whose listen stream on `server` is request `listen`.
    pub fn by_listen(&self, server: ServerIdx, listen: u64) -> Option<String> {
        self.list
            .iter()
            .find(|((idx, _), sub)| *idx == server && sub.listen == Some(listen))
            .map(|((_, uri), _)| uri.clone())
    }

    /// `session` leaves `uri` of `server`; returns what ends on the server
    /// when no session is left (`None` while another session holds it, or
    /// when there was no such subscription).
    pub fn leave(&mut self, server: ServerIdx, uri: &str, session: SessionId) -> Option<Ended> {
        let key = (server, uri.to_owned());
        let sub = self.list.get_mut(&key)?;
        sub.sessions.remove(&session);
        sub.waiting.retain(|request| request.session != session);
        if !sub.sessions.is_empty() || !sub.waiting.is_empty() {
            return None;
        }
        let sub = self.list.remove(&key)?;
        Some(Ended {
            server,
            uri: key.1,
            listen: sub.listen,
            lost: sub.lost,
        })
    }

    /// `session` is gone: it leaves every subscription; returns those no
    /// session holds any more.
    pub fn leave_all(&mut self, session: SessionId) -> Vec<Ended> {
        let keys: Vec<(ServerIdx, String)> = self
            .list
            .iter()
            .filter(|(_, sub)| {
                sub.sessions.contains(&session)
                    || sub.waiting.iter().any(|request| request.session == session)
            })
            .map(|(key, _)| key.clone())
            .collect();
        keys.into_iter()
            .filter_map(|(server, uri)| self.leave(server, &uri, session))
            .collect()
    }

    /// The server stopped, and forgot its subscriptions. Those a session
    /// holds are kept, marked lost (no listen stream, not acknowledged), to
    /// be made again when the server is ready again; those only waited for
    /// are removed. Returns, for each, its URI, the host requests that
    /// waited for it, and the sessions that still hold it.
    pub fn orphan_server(&mut self, server: ServerIdx) -> Vec<Orphaned> {
        let keys: Vec<(ServerIdx, String)> = self
            .list
            .keys()
            .filter(|(idx, _)| *idx == server)
            .cloned()
            .collect();
        let mut orphaned = Vec::new();
        for key in keys {
            let Some(sub) = self.list.get_mut(&key) else {
                continue;
            };
            let waiting = std::mem::take(&mut sub.waiting);
            let sessions: Vec<SessionId> = sub.sessions.iter().copied().collect();
            if sessions.is_empty() {
                self.list.remove(&key);
            } else {
                sub.listen = None;
                sub.acknowledged = false;
                sub.lost = true;
            }
            orphaned.push(Orphaned {
                uri: key.1,
                waiting,
                sessions,
            });
        }
        orphaned
    }

    /// The subscriptions of `server` lost when it stopped, now to be made
    /// again: each is no longer marked lost; returns their URIs.
    pub fn take_lost(&mut self, server: ServerIdx) -> Vec<String> {
        self.list
            .iter_mut()
            .filter(|((idx, _), sub)| *idx == server && sub.lost)
            .map(|((_, uri), sub)| {
                sub.lost = false;
                uri.clone()
            })
            .collect()
    }
}

/// A subscription of a server that stopped (see
/// [`Subscriptions::orphan_server`]).
#[derive(Debug)]
pub(crate) struct Orphaned {
    /// Its URI.
    pub uri: String,
    /// Host requests that waited for its acknowledgement.
    pub waiting: Vec<HostRequest>,
    /// The sessions that hold it (none: it was removed).
    pub sessions: Vec<SessionId>,
}

/// A 2026-07-28 server acknowledged a listen stream (`params` of its
/// `notifications/subscriptions/acknowledged`): when it is one opened
/// for a host's subscription, the hosts waiting for it are answered,
/// with `{}` when the server honours the URI.
pub(super) fn on_listen_acknowledged(
    subscriptions: &mut Subscriptions,
    inflight: &mut InFlight,
    outbox: &mut Outbox,
    sessions: &super::session::Sessions,
    upstreams: &mut super::upstreams::Upstreams,
    idx: ServerIdx,
    params: &Value,
) {
    let Some(listen) = params
        .pointer("/_meta/io.modelcontextprotocol~1subscriptionId")
        .and_then(Value::as_u64)
    else {
        return;
    };
    let Some(UpPurpose::Subscribe { uri }) = peek_subscribe(inflight, idx, listen) else {
        return;
    };
    inflight.take_up(idx, listen);
    let honoured = params
        .pointer("/notifications/resourceSubscriptions")
        .and_then(Value::as_array)
        .is_some_and(|uris| uris.iter().any(|item| item.as_str() == Some(uri.as_str())));
    if !honoured {
        let why = format!(
            "server `{}` did not take the subscription to `{}`",
            upstreams.name(idx),
            escape_line(&uri)
        );
        upstreams.cancel(idx, listen, "not honoured", outbox);
        subscriptions.fail(idx, upstreams.name(idx), &uri, &why, outbox);
        return;
    }
    let Some(sub) = subscriptions.get_mut(idx, &uri) else {
        return;
    };
    sub.acknowledged = true;
    let waiting = std::mem::take(&mut sub.waiting);
    for request in &waiting {
        sub.sessions.insert(request.session);
    }
    for request in waiting {
        sessions.reply(outbox, request.session, request.id(), &json!({}));
    }
}

/// Session `session` is gone: it leaves its subscriptions, and those no
/// session holds any more end on their servers.
pub(super) fn end_subscriptions(
    subscriptions: &mut Subscriptions,
    inflight: &mut InFlight,
    outbox: &mut Outbox,
    upstreams: &mut super::upstreams::Upstreams,
    limits: super::Limits,
    session: SessionId,
) {
    for ended in subscriptions.leave_all(session) {
        if ended.lost {
            continue;
        }
        let ready = upstreams
            .get(ended.server)
            .is_some_and(|up| up.phase == super::upstreams::Phase::Ready);
        if !ready {
            continue;
        }
        match ended.listen {
            Some(listen) => {
                // Still waiting for its acknowledgement: nothing waits now.
                inflight.take_up(ended.server, listen);
                upstreams.cancel(ended.server, listen, "unsubscribed", outbox);
            }
            None => {
                let timeout = limits.call_timeout;
                let Some(up) = upstreams.get_mut(ended.server) else {
                    continue;
                };
                let id = up.next_id();
                let generation = up.generation();
                inflight.wait_up(ended.server, id, UpPurpose::Quiet, timeout);
                outbox.upstream(
                    ended.server,
                    generation,
                    frame::request(
                        &id.to_string(),
                        "resources/unsubscribe",
                        &json!({"uri": ended.uri}),
                    ),
                    None,
                );
            }
        }
    }
}

/// Server `idx` is ready again after it stopped: the subscriptions its
/// sessions still hold are made again, in its era (a legacy server is
/// sent `resources/subscribe`, a 2026-07-28 one gets a listen stream).
/// One it refuses is forgotten, and the refusal logged.
pub(super) fn restore_subscriptions(
    subscriptions: &mut Subscriptions,
    inflight: &mut InFlight,
    outbox: &mut Outbox,
    upstreams: &mut super::upstreams::Upstreams,
    declared: &super::era::Declared,
    limits: super::Limits,
    idx: ServerIdx,
) {
    let uris = subscriptions.take_lost(idx);
    let timeout = limits.call_timeout;
    for uri in uris {
        let Some(up) = upstreams.get_mut(idx) else {
            return;
        };
        let modern = up.modern;
        let id = up.next_id();
        let generation = up.generation();
        let line = if modern {
            subscriptions.entry(idx, &uri).listen = Some(id);
            let params = declared
                .with_meta(json!({"notifications": {"resourceSubscriptions": [uri.clone()]}}));
            inflight.wait_up(idx, id, UpPurpose::Subscribe { uri }, timeout);
            frame::request(&id.to_string(), "subscriptions/listen", &params)
        } else {
            let line = frame::request(
                &id.to_string(),
                "resources/subscribe",
                &json!({"uri": uri.clone()}),
            );
            inflight.wait_up(idx, id, UpPurpose::Resubscribe { uri }, timeout);
            line
        };
        outbox.upstream(idx, generation, line, None);
    }
}

/// A resource update for a 2026-07-28 host, on its listen stream `id`.
fn on_listen_stream(mut params: Value, uri: &str, id: Value) -> String {
    if !params.is_object() {
        params = json!({"uri": uri});
    }
    if let Some(object) = params.as_object_mut() {
        let meta = object.entry("_meta").or_insert_with(|| json!({}));
        if !meta.is_object() {
            *meta = json!({});
        }
        if let Some(meta) = meta.as_object_mut() {
            meta.insert("io.modelcontextprotocol/subscriptionId".to_owned(), id);
        }
    }
    frame::notification("notifications/resources/updated", &params)
}

/// A server's `notifications/resources/updated` (`message`, its `uri`
/// read): to the sessions subscribed to it, each marked when the server
/// holds private data (design §4.4). A 2026-07-28 server's comes on the
/// subscription's listen stream, whose id it must carry; the host gets
/// it without that id, which is the gateway's.
#[expect(
    clippy::too_many_arguments,
    reason = "the parts the step reads and writes, each passed on its own so that it takes no gateway"
)]
pub(super) fn on_resource_updated(
    subscriptions: &Subscriptions,
    outbox: &mut Outbox,
    sessions: &mut super::session::Sessions,
    upstreams: &super::upstreams::Upstreams,
    policy: &hintgate_policy::decide::Policy,
    idx: ServerIdx,
    message: &Message<'_>,
    uri: &str,
) {
    let modern = upstreams.get(idx).is_some_and(|up| up.modern);
    let Some(sub) = subscriptions.get(idx, uri) else {
        tracing::debug!(
            server.id = %upstreams.name(idx),
            resource.uri = %escape_line(uri),
            "an update of a resource no session subscribed to is dropped"
        );
        return;
    };
    let mut params: Value = message
        .params
        .and_then(|raw| serde_json::from_str(raw).ok())
        .unwrap_or(Value::Null);
    let line = if modern {
        let listen = params
            .pointer("/_meta/io.modelcontextprotocol~1subscriptionId")
            .and_then(Value::as_u64);
        if listen.is_none() || listen != sub.listen {
            tracing::warn!(
                server.id = %upstreams.name(idx),
                resource.uri = %escape_line(uri),
                "an update not on the listen stream of its subscription is dropped"
            );
            return;
        }
        if let Some(object) = params.as_object_mut() {
            let empty = object
                .get_mut("_meta")
                .and_then(Value::as_object_mut)
                .map(|meta| {
                    meta.remove("io.modelcontextprotocol/subscriptionId");
                    meta.is_empty()
                });
            if empty == Some(true) {
                object.remove("_meta");
            }
        }
        frame::notification("notifications/resources/updated", &params)
    } else {
        message.line().to_owned()
    };
    let holders: Vec<SessionId> = sub.sessions.iter().copied().collect();
    let private = policy.data_taints_session(upstreams.name(idx));
    for session in holders {
        if private {
            sessions.taint(
                session,
                upstreams.name(idx),
                "`notifications/resources/updated`",
            );
        }
        // A 2026-07-28 host gets it on its own listen stream.
        let listen = sessions
            .get(&session)
            .filter(|host| host.era == super::session::Era::Modern)
            .and_then(|host| host.listen.as_deref())
            .and_then(|id| serde_json::from_str::<Value>(id).ok());
        let to_host = match listen {
            Some(id) => on_listen_stream(params.clone(), uri, id),
            None => line.clone(),
        };
        outbox.host_note(session, to_host, None);
    }
}

// === impl Gateway ===

impl Gateway {
    /// A host's `resources/unsubscribe`: its subscription still waiting
    /// for the server's acknowledgement answered now, and the server told
    /// when the last session leaves.
    fn unsubscribe(&mut self, idx: ServerIdx, request: HostRequest, uri: &str, modern: bool) {
        let session = request.session;
        // Its own subscription still waiting for the server's
        // acknowledgement is answered now: it will not be made.
        let mine: Vec<HostRequest> = match self.subscriptions.get_mut(idx, uri) {
            Some(sub) => {
                let (mine, rest) = std::mem::take(&mut sub.waiting)
                    .into_iter()
                    .partition(|waiting| waiting.session == session);
                sub.waiting = rest;
                mine
            }
            None => Vec::new(),
        };
        for waiting in mine {
            self.outbox.error(
                session,
                waiting.id(),
                -32603,
                "the host unsubscribed before the server acknowledged the subscription",
            );
        }
        let held = self
            .subscriptions
            .get(idx, uri)
            .is_some_and(|sub| sub.sessions.contains(&session));
        let ended = self.subscriptions.leave(idx, uri, session);
        match ended {
            // The last session left: the server is told, a legacy one
            // by the host's own request (unless it stopped since, and so
            // forgot the subscription).
            Some(Ended {
                listen: None,
                lost: false,
                ..
            }) if !modern => self.forward_with(idx, request, None),
            Some(Ended { listen: None, .. }) => {
                self.sessions
                    .reply(&mut self.outbox, session, request.id(), &json!({}))
            }
            Some(Ended {
                listen: Some(listen),
                ..
            }) => {
                // Nothing waits for its acknowledgement any more.
                self.inflight.take_up(idx, listen);
                self.upstreams
                    .cancel(idx, listen, "unsubscribed", &mut self.outbox);
                self.sessions
                    .reply(&mut self.outbox, session, request.id(), &json!({}));
            }
            // Another session still holds it, or a 2026-07-28 server
            // has nothing to be told.
            None if held || modern => {
                self.sessions
                    .reply(&mut self.outbox, session, request.id(), &json!({}))
            }
            // Nothing the gateway knows of: the server answers.
            None => self.forward_with(idx, request, None),
        }
    }

    /// A host's `resources/subscribe` or `resources/unsubscribe` for server
    /// `idx`, which is ready: kept per session, and carried to the server
    /// in its era.
    pub(super) fn on_subscription_request(&mut self, idx: ServerIdx, request: HostRequest) {
        let params = request.params();
        let uri = params
            .get("uri")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let session = request.session;
        let modern = self.upstreams.get(idx).is_some_and(|up| up.modern);
        if request.method.as_str() == "resources/unsubscribe" {
            self.unsubscribe(idx, request, &uri, modern);
            return;
        }
        if let Err(why) = self.subscriptions.room(idx, &uri, session) {
            tracing::warn!(server.id = %self.upstreams.name(idx), "a `resources/subscribe` is refused: {why}");
            self.outbox.error(session, request.id(), -32603, &why);
            return;
        }
        if !modern {
            self.subscriptions.entry(idx, &uri).sessions.insert(session);
            self.forward_with(idx, request, None);
            return;
        }
        let sub = self.subscriptions.entry(idx, &uri);
        if sub.acknowledged {
            sub.sessions.insert(session);
            self.sessions
                .reply(&mut self.outbox, session, request.id(), &json!({}));
            return;
        }
        let opened = sub.listen.is_some();
        sub.waiting.push(request);
        if opened {
            return;
        }
        // The first session to subscribe: a listen stream for this URI.
        let params = self
            .declared
            .with_meta(json!({"notifications": {"resourceSubscriptions": [uri.clone()]}}));
        let timeout = self.limits.call_timeout;
        let Some(up) = self.upstreams.get_mut(idx) else {
            return;
        };
        let id = up.next_id();
        let generation = up.generation();
        self.subscriptions.entry(idx, &uri).listen = Some(id);
        self.inflight
            .wait_up(idx, id, UpPurpose::Subscribe { uri }, timeout);
        self.outbox.upstream(
            idx,
            generation,
            frame::request(&id.to_string(), "subscriptions/listen", &params),
            None,
        );
    }

    /// A 2026-07-28 host's listen stream asks for the updates of `uris`
    /// (`resourceSubscriptions`; such a host has no `resources/subscribe`).
    /// Each URI the gateway would let the session read, that a server owns
    /// (the wrapped one in wrap mode), and that fits the bounds is held for
    /// `session` as a legacy host's subscription is, and made on its server
    /// now, or when the server is ready. Returns the URIs honoured, for the
    /// host's acknowledgement; the rest get no updates, and are logged.
    pub(super) fn listen_to_resources(
        &mut self,
        session: SessionId,
        uris: &[String],
    ) -> Vec<String> {
        let mut honoured = Vec::new();
        for uri in uris {
            let owner = if self.mode == super::Mode::Wrap {
                Some(0)
            } else {
                self.routing.resource_owner(&self.upstreams, uri)
            };
            let refused = self
                .routing
                .refusal(&self.upstreams, 0, "resources/subscribe", uri)
                .or_else(|| owner.is_none().then(|| "no server lists it".to_owned()))
                .or_else(|| owner.and_then(|idx| self.subscriptions.room(idx, uri, session).err()));
            let Some(idx) = owner.filter(|_| refused.is_none()) else {
                tracing::warn!(
                    resource.uri = %escape_line(uri),
                    "a 2026-07-28 host's subscription is not honoured: {}",
                    refused.unwrap_or_default()
                );
                continue;
            };
            let sub = self.subscriptions.entry(idx, uri);
            if sub.sessions.is_empty() && sub.waiting.is_empty() && sub.listen.is_none() {
                // Nobody held it: it is made on the server.
                sub.lost = true;
            }
            sub.sessions.insert(session);
            honoured.push(uri.clone());
            let ready = self
                .upstreams
                .get(idx)
                .is_some_and(|up| up.phase == super::upstreams::Phase::Ready);
            if ready {
                restore_subscriptions(
                    &mut self.subscriptions,
                    &mut self.inflight,
                    &mut self.outbox,
                    &mut self.upstreams,
                    &self.declared,
                    self.limits,
                    idx,
                );
            }
        }
        honoured
    }
}

/// The purpose of request `id` to `idx`, when it is a listen stream for a
/// subscription that still waits for its acknowledgement.
fn peek_subscribe(inflight: &mut InFlight, idx: ServerIdx, id: u64) -> Option<UpPurpose> {
    match inflight.peek_up_mut(idx, id) {
        Some(UpPurpose::Subscribe { uri }) => Some(UpPurpose::Subscribe { uri: uri.clone() }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::session::Sessions;
    use super::super::upstreams::Upstreams;
    use super::*;

    #[test]
    fn a_subscription_ends_on_its_server_only_when_its_last_session_leaves() {
        let mut subs = Subscriptions::default();
        let (a, b) = (SessionId(1), SessionId(2));
        subs.entry(0, "test://r").sessions.insert(a);
        subs.entry(0, "test://r").sessions.insert(b);
        assert_eq!(subs.leave(0, "test://r", a), None);
        assert!(subs.get(0, "test://r").is_some());
        assert_eq!(
            subs.leave(0, "test://r", b),
            Some(Ended {
                server: 0,
                uri: "test://r".to_owned(),
                listen: None,
                lost: false,
            })
        );
        assert!(subs.get(0, "test://r").is_none());
        // Leaving what one never held ends nothing.
        assert_eq!(subs.leave(0, "test://r", a), None);
    }

    #[test]
    fn a_stopped_servers_held_subscriptions_are_kept_to_be_made_again_once() {
        let mut subs = Subscriptions::default();
        let (a, b) = (SessionId(1), SessionId(2));
        subs.entry(0, "test://held").sessions.insert(a);
        subs.entry(0, "test://held").listen = Some(7);
        subs.entry(0, "test://held").acknowledged = true;
        subs.entry(1, "test://other").sessions.insert(b);
        // Only waited for: nothing holds it once the server stopped.
        let _ = subs.entry(0, "test://waited");
        let orphaned = subs.orphan_server(0);
        let uris: Vec<&str> = orphaned.iter().map(|o| o.uri.as_str()).collect();
        assert_eq!(uris, ["test://held", "test://waited"]);
        assert_eq!(orphaned[0].sessions, [a]);
        assert!(orphaned[1].sessions.is_empty());
        assert!(subs.get(0, "test://waited").is_none());
        let held = subs.get(0, "test://held").unwrap();
        assert!(held.lost && held.listen.is_none() && !held.acknowledged);
        // The other server's are untouched.
        assert!(!subs.get(1, "test://other").unwrap().lost);
        // Made again once, when the server is ready.
        assert_eq!(subs.take_lost(0), ["test://held"]);
        assert!(subs.take_lost(0).is_empty());
        // A session that leaves a lost subscription ends it without telling
        // the server, which forgot it.
        subs.entry(0, "test://held").lost = true;
        assert_eq!(
            subs.leave(0, "test://held", a).map(|ended| ended.lost),
            Some(true)
        );
    }

    /// The policy and the servers of a config with one server, `mail`.
    fn one_server(private_data: bool) -> (hintgate_policy::decide::Policy, Upstreams) {
        use hintgate_policy::config::parse_str;
        let text = format!("[servers.mail]\ncommand = \"x\"\nprivate_data = {private_data}\n");
        let (config, _) = parse_str(&text);
        let policy = hintgate_policy::decide::Policy::new(config.unwrap());
        let servers = policy.config().servers.values().cloned().collect();
        let upstreams = Upstreams::new(servers, super::super::Mode::Gateway, "__".to_owned());
        (policy, upstreams)
    }

    #[test]
    fn a_resource_update_reaches_the_sessions_that_hold_it_and_taints_them_when_private() {
        use super::super::outbox::Outgoing;
        use super::super::session::HostSession;
        let line = r#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"mail://inbox"}}"#;
        let message = Message::parse(line).unwrap();
        for private in [false, true] {
            let (policy, upstreams) = one_server(private);
            let mut sessions = Sessions::default();
            for n in 0..3 {
                let (out, _) = tokio::sync::mpsc::unbounded_channel();
                sessions.insert(
                    SessionId(n),
                    HostSession::new(out, Default::default(), Default::default()),
                );
            }
            let mut subs = Subscriptions::default();
            subs.entry(0, "mail://inbox").sessions.insert(SessionId(0));
            subs.entry(0, "mail://inbox").sessions.insert(SessionId(2));
            let mut outbox = Outbox::new();
            on_resource_updated(
                &subs,
                &mut outbox,
                &mut sessions,
                &upstreams,
                &policy,
                0,
                &message,
                "mail://inbox",
            );
            let told: Vec<SessionId> = outbox
                .take()
                .into_iter()
                .map(|sent| match sent {
                    Outgoing::HostNote(session, note, _) if note == line => session,
                    other => panic!("{other:?}"),
                })
                .collect();
            assert_eq!(told, [SessionId(0), SessionId(2)]);
            let tainted = |n| sessions.get(&SessionId(n)).unwrap().tainted;
            assert_eq!(
                [tainted(0), tainted(1), tainted(2)],
                [private, false, private]
            );
        }
    }

    #[test]
    fn a_session_holds_a_bounded_number_of_subscriptions() {
        let mut subs = Subscriptions::default();
        let session = SessionId(1);
        for n in 0..PER_SESSION {
            let uri = format!("test://{n}");
            assert!(subs.room(0, &uri, session).is_ok());
            subs.entry(0, &uri).sessions.insert(session);
        }
        assert!(subs.room(0, "test://one-more", session).is_err());
        // One it holds already is not one more.
        assert!(subs.room(0, "test://0", session).is_ok());
        // Another session still has room.
        assert!(subs.room(0, "test://one-more", SessionId(2)).is_ok());
        let ended = subs.leave_all(session);
        assert_eq!(ended.len(), PER_SESSION);
        assert_eq!(subs.count_for(session), 0);
    }

    #[test]
    fn the_sessions_together_hold_a_bounded_number() {
        let mut subs = Subscriptions::default();
        for n in 0..TOTAL {
            let session = SessionId(u32::try_from(n / PER_SESSION).unwrap());
            subs.entry(0, &format!("test://{n}"))
                .sessions
                .insert(session);
        }
        let late = SessionId(100_000);
        assert!(subs.room(0, "test://new", late).is_err());
        // Joining a subscription that exists holds nothing more.
        assert!(subs.room(0, "test://0", late).is_ok());
    }

    fn subscribe(session: u32, id: u64) -> HostRequest {
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"resources/subscribe","params":{{"uri":"file:///a"}}}}"#
        );
        let message = Message::parse(&line).unwrap();
        HostRequest::new(
            SessionId(session),
            line.clone(),
            message.spans(),
            super::super::request::Method::of(message.method()),
        )
    }

    #[test]
    fn a_listen_stream_that_fails_answers_whoever_waited_for_it_and_is_forgotten() {
        use super::super::outbox::Outgoing;
        let mut subscriptions = Subscriptions::default();
        let sub = subscriptions.entry(0, "file:///a");
        sub.listen = Some(4);
        sub.waiting.push(subscribe(1, 7));
        let mut outbox = Outbox::new();
        // Not the listen stream of a subscription: nothing ends.
        assert!(!subscriptions.listen_ended(0, "fs", 5));
        subscriptions.fail(0, "fs", "file:///a", "it refused", &mut outbox);
        assert!(subscriptions.get(0, "file:///a").is_none());
        let sent = outbox.take();
        assert_eq!(sent.len(), 1);
        assert!(
            matches!(&sent[0], Outgoing::Host(SessionId(1), line) if line.contains(r#""id":7"#) && line.contains("it refused"))
        );
        // Failing again, or what was never there, tells nobody.
        subscriptions.fail(0, "fs", "file:///a", "again", &mut outbox);
        assert!(outbox.is_empty());
    }

    #[test]
    fn a_server_that_stops_keeps_its_held_subscriptions_and_tells_their_hosts_to_read_again() {
        use super::super::outbox::Outgoing;
        let mut subscriptions = Subscriptions::default();
        subscriptions
            .entry(0, "file:///a")
            .sessions
            .insert(SessionId(2));
        subscriptions
            .entry(0, "file:///b")
            .waiting
            .push(subscribe(3, 9));
        subscriptions
            .entry(1, "file:///c")
            .sessions
            .insert(SessionId(2));
        let mut outbox = Outbox::new();
        subscriptions.orphan(0, "fs", "server `fs` stopped", &mut outbox);
        let sent = outbox.take();
        assert_eq!(sent.len(), 2, "{sent:?}");
        let told: Vec<String> = sent
            .iter()
            .map(|outgoing| match outgoing {
                Outgoing::Host(SessionId(3), line) => {
                    assert!(line.contains("server `fs` stopped"), "{line}");
                    "answered".to_owned()
                }
                Outgoing::HostNote(SessionId(2), line, None) => {
                    let line: Value = serde_json::from_str(line).unwrap();
                    assert_eq!(line["method"], "notifications/resources/updated");
                    line["params"]["uri"].as_str().unwrap().to_owned()
                }
                other => panic!("{other:?}"),
            })
            .collect();
        assert!(told.contains(&"answered".to_owned()));
        assert!(told.contains(&"file:///a".to_owned()));
        // The held one is kept, to be made again; another server's is
        // untouched.
        assert!(subscriptions.get(0, "file:///a").is_some());
        assert!(subscriptions.get(1, "file:///c").is_some());
    }
}
