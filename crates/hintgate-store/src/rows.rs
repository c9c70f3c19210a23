//! Seals on the rows a decision trusts: pins, standing approvals, and the
//! approval queue's entries and answers.
//!
//! Whoever can write the database but does not hold the audit key must not
//! be able to make a call run that no person approved: insert a standing
//! approval, point a pin at the definition a hostile server lists now, or
//! answer a waiting call (or change what its prompt says before a person
//! answers it). So each such row carries a seal, HMAC-SHA-256 under the
//! subkey `"store rows v1"` of the audit key over the row's fields (each
//! prefixed with its length, so no two rows' fields run into one another),
//! and the store reads a row whose seal does not verify as no row at all
//! where that adds friction:
//!
//! - a pin with a broken seal is reported ([`Seal::Broken`]) and a gateway
//!   takes its tool for a new one (asked again on an untrusted server;
//!   pinned anew on a trusted one, as a deleted pin would be);
//! - a standing approval with a broken seal approves nothing (and one whose
//!   seal holds approves only while the audit log holds the grant record
//!   its seal names, revoked by nothing since: see `standing`);
//! - an answer with a broken seal, or to an entry whose seal is broken,
//!   denies the call; and a person cannot answer an entry whose seal is
//!   broken (its prompt may not be what the gateway asked).
//!
//! A row kind of another module (an idempotency key's record, an upstream
//! grant) names its own sealed columns and seals itself through
//! [`Sealer::seal`] and [`Sealer::check`], so this module knows none of
//! them.
//!
//! What a seal does not cover, and why: a pin's held change (`seen`) only
//! adds friction, and a deleted row cannot be told from one never written
//! (ARCHITECTURE.md's threat model says what that leaves).

use hmac::Mac as _;
use serde::Serialize;

use crate::key::HmacSha256;
use crate::{Answer, AuditKey, Pin};

/// The purpose of the subkey that seals rows.
const PURPOSE: &str = "store rows v1";

/// The kind of the seal of a standing approval with its grant record.
const ALWAYS_GRANTED: &str = "always granted";

/// The purpose of the seal of an answer that edits the call's arguments.
const ANSWER_EDITED: &str = "answer edited";

/// Whether a row that decisions trust carries a valid seal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Seal {
    /// Its seal verifies under the audit key: the gateway wrote it, or a
    /// person through hintgate.
    Valid,
    /// Its seal is missing or does not verify: written or changed by
    /// someone without the audit key (or by a hintgate from before rows
    /// were sealed). It is reported and given no effect.
    Broken,
    /// Not checked: the store was opened without the audit key.
    #[default]
    Unchecked,
}

impl Seal {
    /// The stable name (`valid`, `broken`, `unchecked`).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Valid => "valid",
            Self::Broken => "broken",
            Self::Unchecked => "unchecked",
        }
    }
}

/// Seals rows, and checks their seals, under the audit key's row subkey.
#[derive(Clone)]
pub(crate) struct Sealer {
    mac: HmacSha256,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer")
    }
}

/// One field of a sealed row.
#[derive(Clone, Copy)]
pub(crate) enum Field<'a> {
    /// Text or bytes.
    Bytes(&'a [u8]),
    /// A number (a time, an id).
    Int(i64),
}

/// The fields of a queue entry that its seal covers.
pub(crate) struct EntryFields<'a> {
    pub(crate) id: u64,
    pub(crate) at: i64,
    pub(crate) expires_at: i64,
    pub(crate) session: &'a str,
    pub(crate) server: &'a str,
    pub(crate) server_key: &'a str,
    pub(crate) tool: &'a str,
    pub(crate) digest: &'a str,
    pub(crate) prompt: &'a str,
    /// The prompt's content as the JSON text stored beside it (re-written
    /// from its value, which gives the text it was stored as), or none.
    pub(crate) details: Option<String>,
    pub(crate) offer: &'a str,
}

impl Sealer {
    /// The sealer of `key`.
    pub(crate) fn of(key: &AuditKey) -> Self {
        Self {
            mac: crate::key::mac_with(&key.subkey(PURPOSE)),
        }
    }

    /// The MAC over `kind` and `fields`, each prefixed with its kind and
    /// length, so no two rows' fields run into one another.
    fn mac(&self, kind: &str, fields: &[Field<'_>]) -> HmacSha256 {
        let mut mac = self.mac.clone();
        let mut bytes = |field: &[u8]| {
            mac.update(&(field.len() as u64).to_be_bytes());
            mac.update(field);
        };
        bytes(kind.as_bytes());
        for field in fields {
            match *field {
                Field::Bytes(field) => bytes(field),
                Field::Int(n) => bytes(&n.to_be_bytes()),
            }
        }
        mac
    }

    /// The seal of a row of `kind` whose sealed columns are `fields`.
    pub(crate) fn seal(&self, kind: &str, fields: &[Field<'_>]) -> String {
        hex::encode(self.mac(kind, fields).finalize().into_bytes())
    }

    /// Whether `tag` is the seal of a row of `kind` whose sealed columns
    /// are `fields`.
    pub(crate) fn check(&self, kind: &str, fields: &[Field<'_>], tag: Option<&str>) -> Seal {
        let Some(tag) = tag else {
            return Seal::Broken;
        };
        let mut bytes = [0u8; 32];
        // Compared in constant time by the MAC itself.
        if hex::decode_to_slice(tag, &mut bytes).is_ok()
            && self.mac(kind, fields).verify_slice(&bytes).is_ok()
        {
            Seal::Valid
        } else {
            Seal::Broken
        }
    }

    /// The seal of a pin: its key, tool, configured server name, identity,
    /// digest, definition (canonical JSON) and time.
    pub(crate) fn pin(&self, pin: &Pin) -> String {
        let definition = hintgate_policy::pin::canonical_json(&pin.definition);
        self.seal("pin", &pin_fields(pin, &definition))
    }

    /// Whether `tag` is the seal of `pin`.
    pub(crate) fn check_pin(&self, pin: &Pin, tag: Option<&str>) -> Seal {
        let definition = hintgate_policy::pin::canonical_json(&pin.definition);
        self.check("pin", &pin_fields(pin, &definition), tag)
    }

    /// The seal of a token's row.
    pub(crate) fn token(&self, name: &str, hash: &str, scope: &str, created_at: i64) -> String {
        self.seal("token", &token_fields(name, hash, scope, created_at))
    }

    /// Whether `tag` is the seal of a token's row.
    pub(crate) fn check_token(
        &self,
        name: &str,
        hash: &str,
        scope: &str,
        created_at: i64,
        tag: Option<&str>,
    ) -> Seal {
        self.check("token", &token_fields(name, hash, scope, created_at), tag)
    }

    /// The seal of a standing approval: its key, tool and digest, and the
    /// sequence number of its grant record, so that a row put back from an
    /// older copy names the grant it had, which a later record supersedes.
    pub(crate) fn always(
        &self,
        server_key: &str,
        tool: &str,
        digest: &str,
        granted: i64,
    ) -> String {
        let [key, tool, digest] = always_fields(server_key, tool, digest);
        self.seal(ALWAYS_GRANTED, &[key, tool, digest, Field::Int(granted)])
    }

    /// Whether `tag` is the seal of a standing approval granted by the
    /// record `granted`; without one, of an approval given before grants
    /// were recorded (schema 6 and older, sealed over its key, tool and
    /// digest only), which is checked so that people are shown it is
    /// genuine, though it approves nothing.
    pub(crate) fn check_always(
        &self,
        server_key: &str,
        tool: &str,
        digest: &str,
        granted: Option<i64>,
        tag: Option<&str>,
    ) -> Seal {
        let [key, tool, digest] = always_fields(server_key, tool, digest);
        match granted {
            Some(granted) => self.check(
                ALWAYS_GRANTED,
                &[key, tool, digest, Field::Int(granted)],
                tag,
            ),
            None => self.check("always", &[key, tool, digest], tag),
        }
    }

    /// The seal of a queue entry, made when it is put in the queue.
    pub(crate) fn entry(&self, entry: &EntryFields<'_>) -> String {
        self.seal("pending", &entry_fields(entry))
    }

    /// Whether `tag` is the seal of a queue entry.
    pub(crate) fn check_entry(&self, entry: &EntryFields<'_>, tag: Option<&str>) -> Seal {
        self.check("pending", &entry_fields(entry), tag)
    }

    /// The seal of an answer: bound to the entry's own seal, so it answers
    /// that entry, as it was put in the queue, and no other.
    ///
    /// An answer with edited arguments is sealed under a purpose of its
    /// own, over them as well: removing them breaks the seal (so the call
    /// as asked never runs on an approval of an edit), and a gateway that
    /// does not know edits reads such an answer as a denial.
    pub(crate) fn answer(&self, entry_tag: &str, answer: &Answer) -> String {
        let [tag, verdict, remember, by] = answer_fields(entry_tag, answer);
        match &answer.arguments {
            None => self.seal("answer", &[tag, verdict, remember, by]),
            Some(arguments) => self.seal(
                ANSWER_EDITED,
                &[
                    tag,
                    verdict,
                    remember,
                    by,
                    Field::Bytes(arguments.as_bytes()),
                ],
            ),
        }
    }

    /// Whether `tag` is the seal of an answer.
    pub(crate) fn check_answer(&self, entry_tag: &str, answer: &Answer, tag: Option<&str>) -> Seal {
        let [entry, verdict, remember, by] = answer_fields(entry_tag, answer);
        match &answer.arguments {
            None => self.check("answer", &[entry, verdict, remember, by], tag),
            Some(arguments) => self.check(
                ANSWER_EDITED,
                &[
                    entry,
                    verdict,
                    remember,
                    by,
                    Field::Bytes(arguments.as_bytes()),
                ],
                tag,
            ),
        }
    }
}

fn pin_fields<'a>(pin: &'a Pin, definition: &'a str) -> [Field<'a>; 7] {
    [
        Field::Bytes(pin.server_key.as_bytes()),
        Field::Bytes(pin.tool.as_bytes()),
        Field::Bytes(pin.server.as_bytes()),
        Field::Bytes(pin.identity.as_bytes()),
        Field::Bytes(pin.digest.as_bytes()),
        Field::Bytes(definition.as_bytes()),
        Field::Int(pin.pinned_at),
    ]
}

fn token_fields<'a>(
    name: &'a str,
    hash: &'a str,
    scope: &'a str,
    created_at: i64,
) -> [Field<'a>; 4] {
    [
        Field::Bytes(name.as_bytes()),
        Field::Bytes(hash.as_bytes()),
        Field::Bytes(scope.as_bytes()),
        Field::Int(created_at),
    ]
}

fn always_fields<'a>(server_key: &'a str, tool: &'a str, digest: &'a str) -> [Field<'a>; 3] {
    [
        Field::Bytes(server_key.as_bytes()),
        Field::Bytes(tool.as_bytes()),
        Field::Bytes(digest.as_bytes()),
    ]
}

fn entry_fields<'a>(entry: &'a EntryFields<'a>) -> [Field<'a>; 11] {
    [
        Field::Int(crate::to_sql(entry.id)),
        Field::Int(entry.at),
        Field::Int(entry.expires_at),
        Field::Bytes(entry.session.as_bytes()),
        Field::Bytes(entry.server.as_bytes()),
        Field::Bytes(entry.server_key.as_bytes()),
        Field::Bytes(entry.tool.as_bytes()),
        Field::Bytes(entry.digest.as_bytes()),
        Field::Bytes(entry.prompt.as_bytes()),
        // JSON text is never empty, so none and some stay apart.
        Field::Bytes(entry.details.as_deref().unwrap_or_default().as_bytes()),
        Field::Bytes(entry.offer.as_bytes()),
    ]
}

fn answer_fields<'a>(entry_tag: &'a str, answer: &'a Answer) -> [Field<'a>; 4] {
    [
        Field::Bytes(entry_tag.as_bytes()),
        Field::Bytes(if answer.approve { b"approve" } else { b"deny" }),
        Field::Bytes(answer.remember.as_str().as_bytes()),
        Field::Bytes(answer.by.as_bytes()),
    ]
}
