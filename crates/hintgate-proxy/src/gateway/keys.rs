//! Idempotency keys: a write whose tool takes a key (`idempotency_key` in
//! its input schema, or the property a server's config names) runs at most
//! once per key.
//!
//! - **Fill** (pipeline step 4): a call that leaves the key out gets a fresh
//!   UUID v4, in the arguments the prompt shows, the log records and the
//!   server gets. A 2026-07-28 host that is asked and retries gets the same
//!   key back: it is kept in the sealed `requestState`.
//! - **Look up** (step 4, before a person is asked): a key whose call ran
//!   with the same arguments is answered with the recorded result, and the
//!   server is not called (outcome `replayed`); with other arguments, from
//!   another host, still running, or with an unknown outcome, the call is
//!   refused (`idempotency-conflict`).
//! - **Claim** (in `send_call`, right before the send): one transaction in
//!   the store, so of two calls with one key (two sessions, two gateways on
//!   one PostgreSQL) one is sent, and the other is answered as above.
//! - **End**: a result records the key `done` with the result the host got
//!   (encrypted in the store); a call sent without an answer (a timeout, a
//!   crash, a cancellation, a shutdown) leaves it `unknown`, and a call that
//!   never ran (not sent, or asked for input first) releases it.
//!
//! A trusted server's keyed call is retried once on a timeout or a dropped
//! connection, with the same key (design §4.5 otherwise forbids replaying a
//! write; the key is what makes the retry one the server can tell apart).
//!
//! These are the only store reads on a call's path, and only for calls to
//! tools that take a key.

use hintgate_policy::pin::canonical_json;
use hintgate_store::{KeyClaim, KeyEnd, KeyRecord, KeyState, Seal, key_scope};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use std::sync::Arc;

use hintgate_policy::decide::Policy;
use hintgate_store::Store;

use super::Gateway;
use super::call::{CallContext, CallEnd, Idem, Outcome, Refusal};
use super::catalog::Catalog;
use super::journal::unix_now;
use super::request::ServerIdx;
use super::session::Sessions;
use super::upstreams::Upstreams;
use crate::json::{ObjectWriter, members, string_literal};
use crate::seal::Sealer;

/// What the key rules read of the gateway's state: the policy (which
/// property is a server's key, and the window), the servers' names and
/// tools, the store, the sessions' principals, the sealer of the
/// gateway's questions and the run's name. They change only the call.
pub(crate) struct Keys<'a> {
    pub(super) policy: &'a Policy,
    pub(super) upstreams: &'a Upstreams,
    pub(super) catalog: &'a Catalog,
    pub(super) store: Option<&'a Arc<dyn Store>>,
    pub(super) sessions: &'a Sessions,
    pub(super) sealer: &'a Sealer,
    pub(super) run_name: &'a str,
}

// === impl Gateway ===

impl Gateway {
    /// The key rules' view of the gateway.
    pub(super) fn keys(&self) -> Keys<'_> {
        Keys {
            policy: &self.policy,
            upstreams: &self.upstreams,
            catalog: &self.catalog,
            store: self.store.as_ref(),
            sessions: &self.sessions,
            sealer: &self.sealer,
            run_name: &self.run_name,
        }
    }
}

// === impl Keys ===

impl Keys<'_> {
    /// Step 4: finds the call's idempotency key, and fills one in when the
    /// host left it out. Nothing for a tool that takes no key.
    pub(super) fn prepare_key(&self, cx: &mut CallContext, idx: ServerIdx) {
        if cx.idem.is_some() {
            // A retry or a second pass through the pipeline: the same key.
            return;
        }
        let Some(property) = self
            .policy
            .server(self.upstreams.name(idx))
            .and_then(|server| server.idempotency_key.clone())
        else {
            return;
        };
        let takes_key = self
            .catalog
            .tool(idx, cx.tool())
            .and_then(|entry| entry.tool.as_ref().ok())
            .and_then(|tool| tool.input_schema.as_ref())
            .and_then(|schema| schema.get("properties"))
            .and_then(|properties| properties.get(&property))
            .is_some();
        if !takes_key {
            return;
        }
        let mut arguments = cx
            .arguments
            .clone()
            .unwrap_or_else(|| Value::Object(serde_json::Map::new()));
        let Some(object) = arguments.as_object_mut() else {
            // Not an object: the schema check refuses it.
            return;
        };
        let (key, filled) = match object.get(&property) {
            Some(Value::String(key)) => (key.clone(), false),
            Some(other) => (canonical_json(other), false),
            None => {
                let key = match self.sealed_key(cx) {
                    Some(key) => key,
                    None => match fresh_uuid() {
                        Some(key) => key,
                        None => {
                            tracing::error!(
                                "no randomness for an idempotency key: the call is sent without one"
                            );
                            return;
                        }
                    },
                };
                object.insert(property.clone(), Value::String(key.clone()));
                (key, true)
            }
        };
        if filled {
            let host_text = cx.arguments_text().unwrap_or("{}").to_owned();
            let Some(text) = with_member(&host_text, &property, &key) else {
                return;
            };
            cx.arguments_filled = Some(text);
            cx.arguments = Some(arguments.clone());
        }
        let digest = hex::encode(Sha256::digest(canonical_json(&arguments).as_bytes()));
        let scope = self
            .store
            .as_ref()
            .and(self.catalog.key(idx))
            .map(|server_key| key_scope(server_key, cx.tool(), &key));
        cx.idem = Some(Idem {
            key,
            filled,
            scope,
            digest,
            claimed: false,
        });
    }

    /// The key a 2026-07-28 host's retry was asked about with, from the
    /// sealed state it returned (checked; used up later by the answer).
    fn sealed_key(&self, cx: &CallContext) -> Option<String> {
        let state = cx.params.request_state.as_deref()?;
        self.sealer.peek(state).ok()?.key
    }

    /// Step 4, before anyone is asked: what the store says of the key. How
    /// the call ends (a replay, or a refusal) when it must not be sent.
    pub(super) fn look_up_key(&self, cx: &CallContext) -> Option<CallEnd> {
        let idem = cx.idem.as_ref().filter(|idem| !idem.claimed)?;
        let scope = idem.scope.as_deref()?;
        let store = self.store.as_ref()?;
        let window = self.window_s();
        match store.key_record(scope, unix_now(), window) {
            Ok(None) => None,
            Ok(Some(record)) => Some(self.key_taken(cx, &record)),
            Err(err) => Some(CallEnd::Refused(Refusal::KeyInUse(format!(
                "hintgate could not look up its idempotency key in the store ({err}), so it did not send it"
            )))),
        }
    }

    /// In `send_call`, right before the send: the store's claim on the key.
    /// `Err` is how the call ends instead (a replay, or a refusal).
    pub(super) fn claim_key(&self, cx: &mut CallContext) -> Result<(), CallEnd> {
        let window = self.window_s();
        let principal = self.principal_of(cx);
        let Some(idem) = cx.idem.as_mut().filter(|idem| !idem.claimed) else {
            return Ok(());
        };
        let (Some(scope), Some(store)) = (idem.scope.as_deref(), self.store) else {
            return Ok(());
        };
        let claim = KeyClaim {
            scope,
            owner: self.run_name,
            principal,
            arguments: &idem.digest,
            now: unix_now(),
            window_s: window,
        };
        match store.claim_key(&claim) {
            Ok(None) => {
                idem.claimed = true;
                Ok(())
            }
            Ok(Some(record)) => Err(self.key_taken(cx, &record)),
            Err(err) => Err(CallEnd::Refused(Refusal::KeyInUse(format!(
                "hintgate could not claim its idempotency key in the store ({err}), so it did not send it"
            )))),
        }
    }

    /// How a call ends whose key is already in the store.
    fn key_taken(&self, cx: &CallContext, record: &KeyRecord) -> CallEnd {
        let Some(idem) = &cx.idem else {
            return CallEnd::Refused(Refusal::KeyInUse("no key".to_owned()));
        };
        let key = crate::json::string_literal(&idem.key);
        if record.seal != Seal::Valid {
            return CallEnd::Refused(Refusal::KeyInUse(format!(
                "hintgate's record of the idempotency key {key} does not verify (someone without the audit key changed the store), so the call is not sent"
            )));
        }
        if record.principal != self.principal_of(cx) {
            return CallEnd::Refused(Refusal::KeyInUse(format!(
                "the idempotency key {key} was used by another host; choose another key"
            )));
        }
        match record.state {
            KeyState::Done if record.arguments == idem.digest => {
                CallEnd::Replayed(record.result.clone())
            }
            KeyState::Done => CallEnd::Refused(Refusal::KeyInUse(format!(
                "a call with the idempotency key {key} already ran, with other arguments; a key stands for one call (use a new key for a new call)"
            ))),
            KeyState::Running => CallEnd::Refused(Refusal::KeyInUse(format!(
                "a call with the idempotency key {key} was sent and has not ended (it may still run, or the gateway that sent it stopped); it is not sent twice"
            ))),
            KeyState::Unknown => CallEnd::Refused(Refusal::KeyInUse(format!(
                "a call with the idempotency key {key} was sent and no answer came, so hintgate does not know whether it ran; it is not sent again (check with the server, then use a new key)"
            ))),
        }
    }

    /// Records how a claimed call ended (a result is recorded by
    /// [`Keys::key_done`]).
    pub(super) fn end_key_by_outcome(&self, cx: &CallContext, outcome: Outcome) {
        let end = match outcome {
            // Recorded with the result, or retried with the claim kept.
            Outcome::Ok
            | Outcome::ToolError
            | Outcome::OutputSchemaMismatch
            | Outcome::FailedRetried
            | Outcome::Replayed => return,
            Outcome::InputRequired | Outcome::Unsent => KeyEnd::Released,
            Outcome::ProtocolError
            | Outcome::Failed
            | Outcome::Denied
            | Outcome::InvalidArguments
            | Outcome::Relayed
            | Outcome::Cancelled
            | Outcome::HostGone
            | Outcome::Shutdown => KeyEnd::Unknown,
        };
        self.end_key(cx, end);
    }

    /// A claimed call ran: its result (what the host gets) is recorded.
    pub(super) fn key_done(&self, cx: &CallContext, result: &str) {
        self.end_key(cx, KeyEnd::Done(Some(result)));
    }

    fn end_key(&self, cx: &CallContext, end: KeyEnd<'_>) {
        let Some(idem) = cx.idem.as_ref().filter(|idem| idem.claimed) else {
            return;
        };
        let (Some(scope), Some(store)) = (&idem.scope, &self.store) else {
            return;
        };
        if let Err(err) = store.end_key(scope, self.run_name, end, unix_now()) {
            // The record stays `running`: a later call with the key is
            // refused, never sent twice.
            tracing::error!(tool.name = %cx.tool(), "the end of a keyed call could not be recorded: {err}");
        }
    }

    /// Whose keys a call's are: its session's authenticated principal, or
    /// for the host on stdio the gateway's own (`[gateway] principal`, the
    /// local user unless configured).
    fn principal_of(&self, cx: &CallContext) -> &str {
        self.sessions
            .get(&cx.request.session)
            .and_then(|host| host.principal.as_deref())
            .or(self.policy.config().gateway.principal.as_deref())
            .unwrap_or_default()
    }

    fn window_s(&self) -> i64 {
        i64::try_from(self.policy.config().gateway.idempotency_window_s).unwrap_or(i64::MAX)
    }
}

/// The arguments' text with one string member added.
fn with_member(arguments: &str, key: &str, value: &str) -> Option<String> {
    let found = members(arguments).ok()?;
    let mut writer = ObjectWriter::with_capacity(arguments.len() + key.len() + value.len() + 8);
    for member in &found {
        writer.copy(arguments.get(member.span.clone())?);
    }
    writer.member(key, &string_literal(value));
    Some(writer.finish())
}

/// A random UUID (version 4), or `None` without randomness.
fn fresh_uuid() -> Option<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).ok()?;
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex = hex::encode(bytes);
    Some(format!(
        "{}-{}-{}-{}-{}",
        hex.get(0..8)?,
        hex.get(8..12)?,
        hex.get(12..16)?,
        hex.get(16..20)?,
        hex.get(20..32)?
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_key_is_a_version_4_uuid_and_differs_each_time() {
        let key = fresh_uuid().unwrap();
        assert_eq!(key.len(), 36);
        assert_eq!(key.as_bytes()[14], b'4');
        assert!(matches!(key.as_bytes()[19], b'8' | b'9' | b'a' | b'b'));
        assert_ne!(key, fresh_uuid().unwrap());
    }

    #[test]
    fn a_filled_key_keeps_every_byte_of_the_hosts_arguments() {
        assert_eq!(
            with_member(r#"{ "amount" : 1.50, "to":"x" }"#, "idempotency_key", "k-1").unwrap(),
            r#"{"amount" : 1.50,"to":"x","idempotency_key":"k-1"}"#
        );
        assert_eq!(
            with_member("{}", "idempotency_key", "k").unwrap(),
            r#"{"idempotency_key":"k"}"#
        );
        assert_eq!(with_member("[1]", "k", "v"), None);
    }
}
