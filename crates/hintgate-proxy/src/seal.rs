//! Sealed `requestState` for the input-required results of the 2026-07-28 era.
//!
//! A modern host is asked by returning an input-required result; it retries
//! the call with the person's answer and the `requestState` echoed back. The
//! state is attacker-controlled text, so it carries an HMAC-SHA-256 under a
//! key drawn once per process, and binds the tool, a digest of the
//! arguments, the definition's pin and an expiry. Each state is single-use:
//! its nonce is remembered until it expires.
//!
//! Format: `hintgate-v1.<hex payload>.<hex mac>`, the payload being compact
//! JSON; the prefix tells the gateway's state from a server's own.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

/// What every state the gateway seals starts with.
const PREFIX: &str = "hintgate-v1";

/// Whether a `requestState` is one the gateway sealed (by its prefix; the
/// seal itself is checked by [`Sealer::open`]).
pub fn is_ours(state: &str) -> bool {
    state.starts_with(PREFIX) && state.as_bytes().get(PREFIX.len()) == Some(&b'.')
}

/// What a sealed state stands for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    /// The tool's name as the host called it.
    pub tool: String,
    /// SHA-256 (hex) of the canonical JSON of the arguments.
    pub arguments: String,
    /// The pin digest of the definition the person was asked about.
    pub pin: String,
    /// Seconds since the Unix epoch after which the state is void.
    pub expires: u64,
    /// Random, so that every state is unique.
    pub nonce: String,
    /// The idempotency key the gateway filled in, so that the host's retry
    /// is sent with the key the person saw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// Why a returned state was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    /// Not in the gateway's format.
    #[error("the approval state is malformed")]
    Malformed,
    /// The MAC does not match: altered, or sealed by another process.
    #[error("the approval state was altered or was not issued by this gateway")]
    Forged,
    /// Past its expiry.
    #[error("the approval state has expired")]
    Expired,
    /// Already used once.
    #[error("the approval state was already used")]
    Replayed,
    /// Issued for another tool, other arguments or another definition.
    #[error("the approval was given for a different call")]
    Mismatch,
}

/// The per-process sealing key and the nonces already used.
#[derive(Debug)]
pub struct Sealer {
    key: [u8; 32],
    used: HashMap<String, u64>,
}

// === impl Sealer ===

impl Sealer {
    /// A sealer with a fresh random key.
    ///
    /// # Errors
    ///
    /// When the operating system gives no randomness.
    pub fn new() -> Result<Self, getrandom::Error> {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key)?;
        Ok(Self {
            key,
            used: HashMap::new(),
        })
    }

    /// Seals a claim for a call to `tool` with `arguments`, valid for `ttl_s`.
    ///
    /// # Errors
    ///
    /// When the operating system gives no randomness for the nonce.
    pub fn seal(
        &self,
        tool: &str,
        arguments: &serde_json::Value,
        pin: &str,
        ttl_s: u64,
        key: Option<&str>,
    ) -> Result<String, getrandom::Error> {
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce)?;
        let claim = Claim {
            tool: tool.to_owned(),
            arguments: arguments_digest(arguments),
            pin: pin.to_owned(),
            expires: now().saturating_add(ttl_s),
            nonce: hex::encode(nonce),
            key: key.map(str::to_owned),
        };
        let payload = serde_json::to_vec(&claim).unwrap_or_default();
        let mac = self.mac(&payload);
        Ok(format!(
            "{PREFIX}.{}.{}",
            hex::encode(&payload),
            hex::encode(mac)
        ))
    }

    /// Opens a state the host returned for a call to `tool` with
    /// `arguments`, checks it against that call, and uses it up.
    ///
    /// # Errors
    ///
    /// [`SealError`] for a malformed, forged, expired, replayed or
    /// mismatched state.
    pub fn open(
        &mut self,
        state: &str,
        tool: &str,
        arguments: &serde_json::Value,
        pin: &str,
    ) -> Result<(), SealError> {
        let claim = self.peek(state)?;
        let now = now();
        self.used.retain(|_, expires| *expires >= now);
        if self.used.contains_key(&claim.nonce) {
            return Err(SealError::Replayed);
        }
        if claim.tool != tool || claim.arguments != arguments_digest(arguments) || claim.pin != pin
        {
            return Err(SealError::Mismatch);
        }
        self.used.insert(claim.nonce, claim.expires);
        Ok(())
    }

    /// Checks a state's seal and expiry and returns what it stands for,
    /// without using it up ([`Sealer::open`] does that).
    ///
    /// # Errors
    ///
    /// [`SealError`] for a malformed, forged or expired state.
    pub fn peek(&self, state: &str) -> Result<Claim, SealError> {
        let mut parts = state.split('.');
        let (Some(PREFIX), Some(payload), Some(mac), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(SealError::Malformed);
        };
        // INVARIANT: one state has one text. The gateway writes lowercase
        // hex; the same bytes in other letter cases are refused, so a state
        // changed anywhere never opens.
        if !is_lower_hex(payload) || !is_lower_hex(mac) {
            return Err(SealError::Malformed);
        }
        let payload = hex::decode(payload).map_err(|_| SealError::Malformed)?;
        let mac = hex::decode(mac).map_err(|_| SealError::Malformed)?;
        let mut verifier =
            <HmacSha256 as Mac>::new_from_slice(&self.key).map_err(|_| SealError::Malformed)?;
        verifier.update(&payload);
        verifier.verify_slice(&mac).map_err(|_| SealError::Forged)?;
        let claim: Claim = serde_json::from_slice(&payload).map_err(|_| SealError::Malformed)?;
        if claim.expires < now() {
            return Err(SealError::Expired);
        }
        Ok(claim)
    }

    fn mac(&self, payload: &[u8]) -> Vec<u8> {
        match <HmacSha256 as Mac>::new_from_slice(&self.key) {
            Ok(mut mac) => {
                mac.update(payload);
                mac.finalize().into_bytes().to_vec()
            }
            // HMAC takes keys of any length; this cannot happen.
            Err(_) => Vec::new(),
        }
    }
}

/// Whether `text` is hexadecimal as the gateway writes it: digits and
/// lowercase letters only.
fn is_lower_hex(text: &str) -> bool {
    text.bytes()
        .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
}

/// SHA-256 (hex) of the canonical JSON of a call's arguments.
pub fn arguments_digest(arguments: &serde_json::Value) -> String {
    let canonical = hintgate_policy::pin::canonical_json(arguments);
    hex::encode(Sha256::digest(canonical.as_bytes()))
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_state_opens_once_for_its_own_call() {
        let mut sealer = Sealer::new().unwrap();
        let args = json!({"path": "/x"});
        let state = sealer.seal("delete", &args, "sha256:1", 60, None).unwrap();
        assert_eq!(
            sealer.open(&state, "delete", &json!({"path": "/y"}), "sha256:1"),
            Err(SealError::Mismatch)
        );
        assert_eq!(
            sealer.open(&state, "other", &args, "sha256:1"),
            Err(SealError::Mismatch)
        );
        assert_eq!(
            sealer.open(&state, "delete", &args, "sha256:2"),
            Err(SealError::Mismatch)
        );
        assert_eq!(sealer.open(&state, "delete", &args, "sha256:1"), Ok(()));
        assert_eq!(
            sealer.open(&state, "delete", &args, "sha256:1"),
            Err(SealError::Replayed)
        );
    }

    #[test]
    fn altered_foreign_and_expired_states_are_refused() {
        let mut sealer = Sealer::new().unwrap();
        let args = json!({});
        let state = sealer.seal("t", &args, "p", 60, None).unwrap();
        let mut altered = state.clone().into_bytes();
        let last = altered.len() - 1;
        altered[last] = if altered[last] == b'0' { b'1' } else { b'0' };
        assert_eq!(
            sealer.open(&String::from_utf8(altered).unwrap(), "t", &args, "p"),
            Err(SealError::Forged)
        );
        let other = Sealer::new().unwrap();
        let foreign = other.seal("t", &args, "p", 60, None).unwrap();
        assert_eq!(
            sealer.open(&foreign, "t", &args, "p"),
            Err(SealError::Forged)
        );
        assert_eq!(
            sealer.open("hintgate-v1.zz.00", "t", &args, "p"),
            Err(SealError::Malformed)
        );
        assert_eq!(
            sealer.open("garbage", "t", &args, "p"),
            Err(SealError::Malformed)
        );

        // An expired state: seal a claim by hand with an expiry in the past.
        let claim = Claim {
            tool: "t".into(),
            arguments: arguments_digest(&args),
            pin: "p".into(),
            expires: 1,
            nonce: "n".into(),
            key: None,
        };
        let payload = serde_json::to_vec(&claim).unwrap();
        let expired = format!(
            "{PREFIX}.{}.{}",
            hex::encode(&payload),
            hex::encode(sealer.mac(&payload))
        );
        assert_eq!(
            sealer.open(&expired, "t", &args, "p"),
            Err(SealError::Expired)
        );
    }

    #[test]
    fn a_state_with_a_hex_letter_in_upper_case_does_not_open() {
        // Found by fuzzing: hex decoding takes either case, so a state
        // with one letter changed from `a` to `A` opened as the state it
        // was made from.
        let mut sealer = Sealer::new().unwrap();
        let args = json!({"path": "/x"});
        let state = sealer.seal("delete", &args, "sha256:1", 60, None).unwrap();
        for (idx, letter) in state
            .char_indices()
            .skip(PREFIX.len())
            .filter(|(_, ch)| ('a'..='f').contains(ch))
        {
            let mut changed = state.clone();
            changed.replace_range(idx..=idx, &letter.to_ascii_uppercase().to_string());
            assert_eq!(
                sealer.open(&changed, "delete", &args, "sha256:1"),
                Err(SealError::Malformed),
                "{changed}"
            );
        }
        assert_eq!(sealer.open(&state, "delete", &args, "sha256:1"), Ok(()));
    }

    #[test]
    fn argument_digests_ignore_key_order() {
        let a: serde_json::Value = serde_json::from_str(r#"{"a":1,"b":[1,2]}"#).unwrap();
        let b: serde_json::Value = serde_json::from_str(r#"{ "b" : [1,2], "a" : 1 }"#).unwrap();
        assert_eq!(arguments_digest(&a), arguments_digest(&b));
    }
}
