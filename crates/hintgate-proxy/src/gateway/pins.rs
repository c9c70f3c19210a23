//! Pins beyond tool definitions: the server's `instructions`, and tools that
//! are no longer listed.
//!
//! Instructions are pinned on first sight (nobody is asked about them: they
//! reach the host only as context). When they change, the host keeps getting
//! the pinned text and the new one is held for `hintgate pins approve SERVER
//! '#instructions'`, so a server cannot slip new instructions to the model
//! after the user looked. A pinned tool missing from a listing is recorded
//! as removed; when it comes back unchanged the record is cleared.

use hintgate_policy::pin::PinDigest;
use hintgate_store::{INSTRUCTIONS, Pin, REMOVED, Seen};
use serde_json::{Value, json};

use super::Gateway;
use super::tools::unix_now;

/// The pin digest of an instructions text.
fn digest_of(text: &str) -> String {
    PinDigest::of_json(&json!({ "instructions": text })).to_string()
}

impl Gateway {
    /// Compares a server's `instructions` with their pin: pins them on first
    /// sight; on a change holds the new text and gives the host the pinned.
    /// Returns false when the store failed (the server is then stopped).
    pub(super) fn pin_instructions(&mut self, idx: usize) -> bool {
        let now = unix_now();
        let Some(up) = self.upstreams.get_mut(idx) else {
            return true;
        };
        let (Some(store), Some(key)) = (self.store.clone(), up.key.clone()) else {
            return true;
        };
        let Some(text) = up
            .info
            .as_ref()
            .and_then(|info| info.get("instructions"))
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            return true;
        };
        let digest = digest_of(&text);
        let definition = json!({ "instructions": text });
        let result = match store.pin(&key, INSTRUCTIONS) {
            Ok(None) => store.put_pin(&Pin {
                server_key: key,
                server: up.name.clone(),
                identity: up.identity.clone().unwrap_or_default(),
                tool: INSTRUCTIONS.to_owned(),
                digest,
                definition,
                pinned_at: now,
                seen: None,
            }),
            Ok(Some(pin)) if pin.digest == digest => match pin.seen {
                Some(_) => store.clear_seen(&key, INSTRUCTIONS),
                None => Ok(()),
            },
            Ok(Some(pin)) => {
                tracing::warn!(
                    server.id = %up.name,
                    "the server's instructions changed since they were pinned: the host gets the pinned ones until `hintgate pins approve {} '{INSTRUCTIONS}'`",
                    up.name
                );
                let pinned = pin
                    .definition
                    .get("instructions")
                    .cloned()
                    .unwrap_or(Value::Null);
                if let Some(info) = up.info.as_mut().and_then(Value::as_object_mut) {
                    info.insert("instructions".to_owned(), pinned);
                }
                let identity = up.identity.clone().unwrap_or_default();
                store.see(
                    &key,
                    INSTRUCTIONS,
                    &Seen {
                        digest,
                        definition,
                        identity,
                    },
                )
            }
            Err(err) => Err(err),
        };
        if let Err(err) = result {
            self.upstream_failed(idx, format!("the pin store failed: {err}"));
            return false;
        }
        true
    }

    /// Records the pinned tools of a server that its listing no longer has,
    /// and clears the record of those that are back unchanged.
    pub(super) fn record_removed(&mut self, idx: usize, listed: &[(String, String)]) {
        let Some(up) = self.upstreams.get(idx) else {
            return;
        };
        let (Some(store), Some(key)) = (self.store.clone(), up.key.clone()) else {
            return;
        };
        let pins = match store.pins() {
            Ok(pins) => pins,
            Err(err) => {
                tracing::error!(server.id = %up.name, "cannot read the pins: {err}");
                return;
            }
        };
        for pin in pins
            .iter()
            .filter(|pin| pin.server_key == key && pin.tool != INSTRUCTIONS)
        {
            let now_listed = listed.iter().find(|(name, _)| *name == pin.tool);
            let result = match (now_listed, &pin.seen) {
                (None, Some(seen)) if seen.digest == REMOVED => Ok(()),
                (None, _) => {
                    tracing::info!(server.id = %up.name, tool.name = %pin.tool, "a pinned tool is no longer listed; recorded as removed");
                    store.see(
                        &key,
                        &pin.tool,
                        &Seen {
                            digest: REMOVED.to_owned(),
                            definition: Value::Null,
                            identity: up.identity.clone().unwrap_or_default(),
                        },
                    )
                }
                (Some((_, digest)), Some(_)) if *digest == pin.digest => {
                    store.clear_seen(&key, &pin.tool)
                }
                (Some(_), _) => Ok(()),
            };
            if let Err(err) = result {
                tracing::error!(server.id = %up.name, tool.name = %pin.tool, "cannot record the tool's state: {err}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_digests_follow_the_text() {
        assert_eq!(digest_of("use tool a"), digest_of("use tool a"));
        assert_ne!(digest_of("use tool a"), digest_of("use tool b"));
        assert!(digest_of("x").starts_with("sha256:"));
    }
}
