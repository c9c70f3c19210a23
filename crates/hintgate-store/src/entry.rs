//! The audit log's records and their links, shared by every module that
//! reads or writes records: the kinds of entry ([`EntryKind`]), an entry to
//! append ([`NewEntry`]) and one as stored ([`Entry`]), the link before the
//! first record ([`GENESIS`]), and how a link is made and read (plain
//! SHA-256 or HMAC-SHA-256 under the chain subkey of the [`AuditKey`]).
//!
//! It is the leaf of the modules around the log: `audit`, `standing`,
//! `rollback` and `head` import from it, and it imports from none of them
//! (only `key`, `body` and `record`, the record types, which import only
//! the kinds from here), so their imports run one way: each of `audit`,
//! `standing`, `rollback`, `head` and `entry` imports only from those after
//! it in that list. What needs more than this module knows stays where that
//! is known: [`Entry::from_stored`], which reads a body as its kind's
//! record type, is in `audit`, with the appending and the verification of
//! the log.

use hmac::Mac;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use hintgate_policy::pin::canonical_json;

use crate::body::Malformed;
use crate::key::AuditKey;
pub use crate::record::EntryKind;
use crate::record::{OutcomeRecord, Record};
pub(crate) use crate::record::{kind_from, kind_name};

/// The link before the first record.
pub(crate) const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// What a keyed link starts with; the key's id and the MAC follow.
pub(crate) const KEYED_PREFIX: &str = "hmac-sha256:";

/// An entry to append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEntry {
    /// Seconds since the Unix epoch.
    pub at: i64,
    /// A call, one call's outcome, or the outcomes of several calls.
    pub kind: EntryKind,
    /// For an [`EntryKind::Outcome`]: the sequence number of its call.
    /// `None` for a call, and for an [`EntryKind::Outcomes`] record, whose
    /// items each name their call.
    pub call: Option<u64>,
    /// Everything else (server, tool, redacted arguments, verdict, reasons,
    /// approver, pin; or outcome and duration; or the list of outcomes) as
    /// canonical JSON text, as [`canonical_json`] writes it. The log chains
    /// and stores it as given, so the caller serialises each record once; a
    /// text that is not canonical JSON is kept, and
    /// [`AuditLog::verify`](crate::AuditLog::verify) reports its entry, and
    /// readers show it as malformed.
    /// [`NewEntry::from_value`] builds one from a [`Value`].
    pub body: String,
}

/// An entry as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Entry {
    /// Its place in the log, from 1.
    pub seq: u64,
    /// Seconds since the Unix epoch.
    pub at: i64,
    /// A call, one call's outcome, or the outcomes of several calls; `None`
    /// for a kind this hintgate does not know (see [`Entry::stored_kind`]),
    /// which is never taken for a call.
    pub kind: Option<EntryKind>,
    /// For an [`EntryKind::Outcome`] (also one that [`Entry::expand`] made
    /// from an [`EntryKind::Outcomes`] record): its call. `None` for a call
    /// and for an [`EntryKind::Outcomes`] record, whose items each name
    /// their call.
    pub call: Option<u64>,
    /// The recorded facts. A body that cannot be read strictly (see
    /// [`Entry::malformed`]) is its stored text, as a JSON string.
    pub body: Value,
    /// The link of the entry before.
    pub prev: String,
    /// This entry's link.
    pub hash: String,
    /// The kind as stored.
    pub stored_kind: String,
    /// The body as stored: the text the link covers.
    pub stored_body: String,
    /// Why the record cannot be read as the gateway writes records: a kind
    /// it does not know, or a body that is not JSON, repeats a key, is not
    /// canonical or is not a record of its kind. Readers show such a record
    /// as malformed, as stored.
    pub malformed: Option<Malformed>,
    /// The record, read strictly ([`Record::read`]): what readers go by.
    /// `None` exactly when [`Entry::malformed`] says why.
    #[serde(skip)]
    pub record: Option<Record>,
}

// === links ===

/// Feeds the bytes a link covers to `digest`: the link before, the
/// sequence number, time, kind and call, each followed by a newline, then
/// the body; the same bytes as `format!("{prev}\n{seq}\n{at}\n{kind}\n{call}\n{body}")`
/// with an absent call as nothing. Numbers are written with `itoa` (the
/// same digits as `Display`) into a buffer on the stack: this runs for
/// every record on the gateway's call path.
fn feed(
    digest: &mut impl hmac::digest::Update,
    prev: &str,
    seq: u64,
    at: i64,
    kind: &str,
    call: Option<u64>,
    body: &str,
) {
    let mut number = itoa::Buffer::new();
    digest.update(prev.as_bytes());
    digest.update(b"\n");
    digest.update(number.format(seq).as_bytes());
    digest.update(b"\n");
    digest.update(number.format(at).as_bytes());
    digest.update(b"\n");
    digest.update(kind.as_bytes());
    digest.update(b"\n");
    if let Some(call) = call {
        digest.update(number.format(call).as_bytes());
    }
    digest.update(b"\n");
    digest.update(body.as_bytes());
}

/// The plain link of a record, as logs written before the chain was keyed
/// hold: the SHA-256 of the covered bytes, in hexadecimal.
pub(crate) fn plain_link(
    prev: &str,
    seq: u64,
    at: i64,
    kind: &str,
    call: Option<u64>,
    body: &str,
) -> String {
    let mut hasher = Sha256::new();
    feed(&mut hasher, prev, seq, at, kind, call, body);
    let mut link = String::with_capacity(64);
    push_hex(&mut link, &hasher.finalize());
    link
}

/// The keyed link of a record: `hmac-sha256:KEYID:MAC`, the MAC under the
/// chain subkey over the covered bytes.
pub(crate) fn keyed_link(
    key: &AuditKey,
    prev: &str,
    seq: u64,
    at: i64,
    kind: &str,
    call: Option<u64>,
    body: &str,
) -> String {
    let mut mac = key.chain_mac();
    feed(&mut mac, prev, seq, at, kind, call, body);
    let mut link = String::with_capacity(KEYED_PREFIX.len() + 16 + 1 + 64);
    link.push_str(KEYED_PREFIX);
    link.push_str(key.id());
    link.push(':');
    push_hex(&mut link, &mac.finalize().into_bytes());
    link
}

/// Appends the lower-case hexadecimal of a 32-byte digest to `out`, through
/// a buffer on the stack (the formatting machinery's `{:x}` went through a
/// call per byte, which showed in the indexer's profile).
fn push_hex(out: &mut String, digest: &[u8]) {
    let mut buf = [0u8; 64];
    match hex::encode_to_slice(digest, &mut buf) {
        Ok(()) => out.push_str(std::str::from_utf8(&buf).unwrap_or_default()),
        // Not a 32-byte digest: the slow way, same text.
        Err(_) => out.push_str(&hex::encode(digest)),
    }
}

/// What a stored link is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Link<'a> {
    /// A plain SHA-256 link (or the genesis link).
    Plain,
    /// A keyed link: the key's id and the MAC's hex.
    Keyed { key_id: &'a str, mac: &'a str },
    /// Neither.
    Unknown,
}

/// What `text`, a stored link, is.
pub(crate) fn link_of(text: &str) -> Link<'_> {
    let is_hex = |part: &str, len: usize| {
        part.len() == len && part.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    if is_hex(text, 64) {
        return Link::Plain;
    }
    match text
        .strip_prefix(KEYED_PREFIX)
        .and_then(|rest| rest.split_once(':'))
    {
        Some((key_id, mac)) if is_hex(key_id, 16) && is_hex(mac, 64) => Link::Keyed { key_id, mac },
        _ => Link::Unknown,
    }
}

// === impl Entry ===

impl Entry {
    /// The entry as readers take it: one [`EntryKind::Outcome`] entry for
    /// each call an [`EntryKind::Outcomes`] entry ends (each keeps the
    /// record's sequence number, time, links and stored text, and gets its
    /// call and its own outcome as body); any other entry as it is.
    ///
    /// An [`EntryKind::Outcomes`] entry that is malformed, or not a
    /// non-empty list of outcomes each naming its call
    /// (`{"outcomes": [{"call": SEQ, ...}]}`), is also given back as it is,
    /// whole, rather than split into outcomes that name no call or into
    /// nothing: a reader shows it as a record it cannot read instead of
    /// losing it or taking it for a call.
    #[must_use]
    pub fn expand(self) -> Vec<Self> {
        let Some(Record::Outcomes(outcomes)) = &self.record else {
            return vec![self];
        };
        let items = outcomes.outcomes.clone();
        let Self {
            seq,
            at,
            prev,
            hash,
            stored_kind,
            stored_body,
            ..
        } = self;
        items
            .into_iter()
            .map(|item| Self {
                seq,
                at,
                kind: Some(EntryKind::Outcome),
                call: Some(item.call),
                body: to_value(&item),
                prev: prev.clone(),
                hash: hash.clone(),
                stored_kind: stored_kind.clone(),
                stored_body: stored_body.clone(),
                malformed: None,
                record: Some(Record::Outcome(OutcomeRecord {
                    attempt: item.attempt,
                    duration_ms: item.duration_ms,
                    outcome: item.outcome,
                })),
            })
            .collect()
    }

    /// The call record, when this entry is one.
    #[must_use]
    pub fn call_record(&self) -> Option<&crate::record::CallRecord> {
        self.record.as_ref().and_then(Record::as_call)
    }

    /// The outcome record, when this entry is one (also one that
    /// [`Entry::expand`] made from a record of several outcomes).
    #[must_use]
    pub const fn outcome_record(&self) -> Option<&OutcomeRecord> {
        match &self.record {
            Some(Record::Outcome(record)) => Some(record),
            _ => None,
        }
    }
}

// === impl NewEntry ===

impl NewEntry {
    /// An entry holding `record`, written by its one writer
    /// ([`Record::to_json`]); `call` names the call of an outcome.
    #[must_use]
    pub fn of(at: i64, call: Option<u64>, record: &Record) -> Self {
        Self {
            at,
            kind: record.kind(),
            call,
            body: record.to_json(),
        }
    }

    /// An entry whose body is `body` as canonical JSON.
    #[must_use]
    pub fn from_value(at: i64, kind: EntryKind, call: Option<u64>, body: &Value) -> Self {
        Self {
            at,
            kind,
            call,
            body: canonical_json(body),
        }
    }
}

// === links of entries ===

/// Whether `entry` is chained under `key`: its link names the key and its
/// MAC is the one the key makes of its content.
pub(crate) fn chained_with(key: &AuditKey, entry: &Entry) -> bool {
    match link_of(&entry.hash) {
        Link::Keyed { key_id, mac } => key_id == key.id() && mac_matches(key, entry, mac),
        Link::Plain | Link::Unknown => false,
    }
}

/// Whether a keyed record's MAC is the one `key` makes of its content, in
/// constant time.
pub(crate) fn mac_matches(key: &AuditKey, entry: &Entry, mac_hex: &str) -> bool {
    let Ok(stored) = hex::decode(mac_hex) else {
        return false;
    };
    let mut mac = key.chain_mac();
    feed(
        &mut mac,
        &entry.prev,
        entry.seq,
        entry.at,
        &entry.stored_kind,
        entry.call,
        &entry.stored_body,
    );
    mac.verify_slice(&stored).is_ok()
}

/// The link of the log's last record, when it was chained under a key: the
/// key's id. A store opening its key file uses it to refuse making a new key
/// for a log that an old one chained.
pub(crate) fn keyed_tail(tail_link: Option<&str>) -> Option<String> {
    match tail_link.map(link_of) {
        Some(Link::Keyed { key_id, .. }) => Some(key_id.to_owned()),
        _ => None,
    }
}

/// A body struct as a JSON value (every field is a string or a number, so
/// this cannot fail; `null` if it ever did, which no reader takes).
pub(crate) fn to_value(body: &impl Serialize) -> Value {
    serde_json::to_value(body).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    #[test]
    fn the_plain_link_covers_the_same_bytes_as_the_formatted_header() {
        for (seq, at, call) in [
            (1, 0, None),
            (42, -1_795_989_518, Some(7)),
            (u64::MAX, i64::MIN, Some(u64::MAX)),
        ] {
            for kind in ["call", "outcome", "outcomes", "anything"] {
                let call_text = call.map_or(String::new(), |call: u64| call.to_string());
                let header = format!("prev\n{seq}\n{at}\n{kind}\n{call_text}\n");
                let mut hasher = Sha256::new();
                hasher.update(header.as_bytes());
                hasher.update(b"{}");
                assert_eq!(
                    plain_link("prev", seq, at, kind, call, "{}"),
                    hex::encode(hasher.finalize())
                );
            }
        }
    }

    /// A link computed elsewhere (Python's `hashlib`) over the documented
    /// bytes: logs written before the chain was keyed must still verify.
    #[test]
    fn the_plain_link_is_the_sha256_of_the_documented_bytes() {
        assert_eq!(
            plain_link(
                GENESIS,
                42,
                -1_795_989_518,
                "outcomes",
                Some(7),
                r#"{"outcomes":[{"call":7,"outcome":"ok"}]}"#
            ),
            "3b5a7185be77d675b5feded919dcc569c7e2452632912573a8d86d7041a49e04"
        );
    }

    /// A link computed elsewhere (Python's `hmac`) from the documented
    /// derivation: a change to how links are made orphans every keyed log,
    /// and breaks this test.
    #[test]
    fn the_keyed_link_is_the_hmac_of_the_documented_bytes_under_the_chain_subkey() {
        let key = AuditKey::from_secret([7u8; 32]);
        assert_eq!(
            keyed_link(
                &key,
                GENESIS,
                42,
                -1_795_989_518,
                "outcomes",
                Some(7),
                r#"{"outcomes":[{"call":7,"outcome":"ok"}]}"#
            ),
            "hmac-sha256:1f3c6afee770e663:3826d6e464e397e85067b9b3a25eb049449e02922fb31d8fb874084695fed249"
        );
    }

    proptest! {
        /// Every sequence number, time and call is written as `Display`
        /// writes it.
        #[test]
        fn the_links_cover_the_formatted_header_for_any_numbers(
            seq in any::<u64>(),
            at in any::<i64>(),
            call in any::<Option<u64>>(),
        ) {
            let call_text = call.map_or(String::new(), |call| call.to_string());
            let covered = format!("{GENESIS}\n{seq}\n{at}\ncall\n{call_text}\n[1]");
            prop_assert_eq!(
                plain_link(GENESIS, seq, at, "call", call, "[1]"),
                hex::encode(Sha256::digest(covered.as_bytes()))
            );
            let key = AuditKey::from_secret([3u8; 32]);
            let mut mac = key.chain_mac();
            mac.update(covered.as_bytes());
            prop_assert_eq!(
                keyed_link(&key, GENESIS, seq, at, "call", call, "[1]"),
                format!("hmac-sha256:{}:{}", key.id(), hex::encode(mac.finalize().into_bytes()))
            );
        }
    }

    #[test]
    fn links_are_told_apart_by_their_form() {
        let key = AuditKey::from_secret([1u8; 32]);
        let keyed = keyed_link(&key, GENESIS, 1, 0, "call", None, "{}");
        assert!(matches!(link_of(&keyed), Link::Keyed { key_id, .. } if key_id == key.id()));
        assert_eq!(link_of(GENESIS), Link::Plain);
        assert_eq!(
            link_of(&plain_link(GENESIS, 1, 0, "call", None, "{}")),
            Link::Plain
        );
        for unknown in [
            "",
            "ABC",
            "hmac-sha256:",
            "hmac-sha256:00:00",
            &keyed.to_uppercase(),
        ] {
            assert_eq!(link_of(unknown), Link::Unknown, "{unknown}");
        }
    }

    #[test]
    fn an_entry_from_a_value_carries_its_canonical_text() {
        let entry = NewEntry::from_value(
            7,
            EntryKind::Outcome,
            Some(3),
            &json!({"b": 1.0, "a": [12_345_678_901_234_567_890_u64, "é\n"]}),
        );
        assert_eq!(entry.body, r#"{"a":[12345678901234567890,"é\n"],"b":1.0}"#);
        assert_eq!(
            (entry.at, entry.kind, entry.call),
            (7, EntryKind::Outcome, Some(3))
        );
    }
}
