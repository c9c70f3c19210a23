//! Standing ("always") approvals and the audit records that grant and
//! revoke them.
//!
//! A sealed row cannot tell a current approval from one put back from an
//! older copy of the database: the seal only says hintgate wrote it once.
//! So every grant and every revocation of a standing approval is a record
//! of the audit log ([`EntryKind::Grant`], [`EntryKind::Revoke`]), chained
//! under the key like every other, and the row's seal binds the sequence
//! number of its grant record. A row counts ([`Standing::InForce`]) only
//! when the record at that number is a grant of the same key, tool and
//! digest, chained under the key, and no later record of the log grants
//! the tool anew, revokes it, or accepts a rolled-back log
//! ([`EntryKind::Rollback`]).
//!
//! "No later record" is answered from a small side table, the approval
//! index (`approval_log`: one row per grant, revocation and accepted
//! rollback, by sequence number, with the key and tool it names), written
//! in the transaction of its record, so a gateway reads one server's
//! approvals in one query and never walks the log. Someone who can write
//! the database may delete or change an index row to hide a revocation:
//! [`AuditLog::verify`](crate::AuditLog::verify) compares the index with
//! the records, so that is as visible as deleting the revocation record
//! itself (`approval-index-missing`, `approval-index-wrong`).

use serde::Serialize;

use crate::entry::{Entry, EntryKind, NewEntry};
use crate::key::AuditKey;
use crate::record::{GrantRecord, Record, RevokeRecord, RevokeWhy};
use crate::rows::Sealer;
use crate::{Approval, Seal, from_sql};

/// Why a [`EntryKind::Revoke`] record was written: a person revoked the
/// approval (`hintgate pins revoke`, the console).
pub(crate) const REVOKED: RevokeWhy = RevokeWhy::Revoked;

/// Why a [`EntryKind::Revoke`] record was written: the server's identity
/// changed, and the approvals of its old identity went with its pins.
pub(crate) const IDENTITY_CHANGED: RevokeWhy = RevokeWhy::IdentityChanged;

/// The kind name and the key and tool of the approval index's row for
/// an accepted rollback (it names no approval: it voids all before it).
pub(crate) const ROLLBACK_SUBJECT: (&str, &str) = ("", "");

/// What the audit log says of a standing approval, checked when the store
/// reads it. Only [`Standing::InForce`] approves anything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "standing", rename_all = "kebab-case")]
pub enum Standing {
    /// Its grant record is in the log, chained under the key, for this
    /// key, tool and digest, and no later record grants the tool anew,
    /// revokes it or accepts a rolled-back log.
    InForce,
    /// It names no grant record: it was given before grants were written
    /// to the log (schema 6 and older), so nothing tells it from one put
    /// back after it was revoked. The tool is asked about once more.
    NotLogged,
    /// The record it names is not a grant of this key, tool and digest
    /// chained under the key (or is not in the log at all).
    GrantMissing,
    /// The approval index does not list its grant as the tool's last
    /// record: the index was changed (`verify` says how).
    NotIndexed,
    /// A later record granted the tool anew or revoked it: this row is
    /// older than the log, put back from a copy or copied in.
    Superseded {
        /// That record.
        by: u64,
    },
    /// A later record accepts a rolled-back log (`hintgate log
    /// accept-rollback`): the records lost might have revoked it.
    RolledBack {
        /// That record.
        by: u64,
    },
    /// Not checked: the store was opened without the audit key.
    #[default]
    Unchecked,
}

impl Standing {
    /// The stable name (`in-force`, `not-logged`, `grant-missing`,
    /// `not-indexed`, `superseded`, `rolled-back`, `unchecked`).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::InForce => "in-force",
            Self::NotLogged => "not-logged",
            Self::GrantMissing => "grant-missing",
            Self::NotIndexed => "not-indexed",
            Self::Superseded { .. } => "superseded",
            Self::RolledBack { .. } => "rolled-back",
            Self::Unchecked => "unchecked",
        }
    }
}

impl std::fmt::Display for Standing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::InForce => f.write_str("its grant is in the audit log and nothing since revoked it"),
            Self::NotLogged => f.write_str(
                "it was given before grants were written to the audit log, so nothing tells it from one put back after it was revoked",
            ),
            Self::GrantMissing => f.write_str(
                "the audit log holds no grant of it: the record its row names is not that grant",
            ),
            Self::NotIndexed => f.write_str(
                "the approval index does not list its grant as the tool's last record (`hintgate log verify` says how it was changed)",
            ),
            Self::Superseded { by } => write!(
                f,
                "record {by} of the audit log revoked it or granted the tool anew: its row was put back from an older copy or copied in"
            ),
            Self::RolledBack { by } => write!(
                f,
                "record {by} of the audit log accepts a rolled-back log, whose lost records may have revoked it"
            ),
            Self::Unchecked => f.write_str("it was not checked against the audit log (no key)"),
        }
    }
}

/// The grant record of a standing approval.
pub(crate) fn grant(at: i64, server: &str, server_key: &str, tool: &str, digest: &str) -> NewEntry {
    NewEntry::of(
        at,
        None,
        &Record::Grant(GrantRecord {
            digest: digest.to_owned(),
            server: server.to_owned(),
            server_key: server_key.to_owned(),
            tool: tool.to_owned(),
        }),
    )
}

/// The revocation record of a standing approval.
pub(crate) fn revocation(
    at: i64,
    server: &str,
    server_key: &str,
    tool: &str,
    why: RevokeWhy,
) -> NewEntry {
    NewEntry::of(
        at,
        None,
        &Record::Revoke(RevokeRecord {
            server: server.to_owned(),
            server_key: server_key.to_owned(),
            tool: tool.to_owned(),
            why,
        }),
    )
}

/// The approval index's row for a record: the key and tool it names (for
/// an accepted rollback, [`ROLLBACK_SUBJECT`]); `None` for a record the
/// index does not list (calls and outcomes) or a body that does not read.
pub(crate) fn index_of(kind: EntryKind, body: &str) -> Option<(String, String)> {
    match kind {
        EntryKind::Call | EntryKind::Outcome | EntryKind::Outcomes => None,
        EntryKind::Grant => serde_json::from_str::<GrantRecord>(body)
            .ok()
            .map(|body| (body.server_key, body.tool)),
        EntryKind::Revoke => serde_json::from_str::<RevokeRecord>(body)
            .ok()
            .map(|body| (body.server_key, body.tool)),
        EntryKind::Rollback => Some((ROLLBACK_SUBJECT.0.to_owned(), ROLLBACK_SUBJECT.1.to_owned())),
    }
}

/// The approval index's row of an entry read from the log: its kind's name
/// and what [`index_of`] gives; `None` for a record it does not list or
/// one that is malformed.
pub(crate) fn index_of_entry(entry: &Entry) -> Option<(&'static str, String, String)> {
    let kind = entry.kind?;
    if entry.malformed.is_some() {
        return None;
    }
    let (key, tool) = index_of(kind, &entry.stored_body)?;
    Some((crate::entry::kind_name(kind), key, tool))
}

/// One row of the approval index as stored (SQLite's columns take any
/// type: `typed` is false when a column is not stored as text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexRow {
    /// The sequence number of the record it lists.
    pub seq: i64,
    /// The record's kind (`grant`, `revoke`, `rollback`).
    pub kind: String,
    /// The key the record names (empty for a rollback).
    pub server_key: String,
    /// The tool the record names (empty for a rollback).
    pub tool: String,
    /// Whether every column is stored as text, as hintgate writes it: a
    /// value of another type is not found by the gateway's query.
    pub typed: bool,
}

/// A standing approval's row as a store reads it, with what it needs to
/// check the row against the log: the last index row of its tool, the last
/// accepted rollback, and the record its row names as its grant.
pub(crate) struct AlwaysRead {
    pub(crate) server_key: String,
    pub(crate) tool: String,
    pub(crate) digest: String,
    pub(crate) tag: Option<String>,
    /// The sequence number of its grant record, as stored.
    pub(crate) grant_seq: Option<i64>,
    /// The greatest sequence number the index lists for its key and tool.
    pub(crate) latest: Option<i64>,
    /// The greatest sequence number of an accepted rollback the index
    /// lists.
    pub(crate) rollback: Option<i64>,
    /// The record at `grant_seq`, when there is one.
    pub(crate) record: Option<Entry>,
}

impl AlwaysRead {
    /// The approval, its seal checked by `sealer` and its standing against
    /// the log checked with `key` (both unchecked without them).
    pub(crate) fn into_approval(self, sealer: Option<&Sealer>, key: Option<&AuditKey>) -> Approval {
        let seal = sealer.map_or(Seal::Unchecked, |sealer| {
            sealer.check_always(
                &self.server_key,
                &self.tool,
                &self.digest,
                self.grant_seq,
                self.tag.as_deref(),
            )
        });
        let standing = self.standing(key);
        Approval {
            granted: self.grant_seq.map(from_sql).filter(|seq| *seq > 0),
            tool: self.tool,
            digest: self.digest,
            seal,
            standing,
        }
    }

    fn standing(&self, key: Option<&AuditKey>) -> Standing {
        let Some(key) = key else {
            return Standing::Unchecked;
        };
        let Some(stored) = self.grant_seq else {
            return Standing::NotLogged;
        };
        let granted = from_sql(stored);
        if granted == 0 {
            return Standing::GrantMissing;
        }
        let genuine = self.record.as_ref().is_some_and(|record| {
            record.seq == granted
                && self.is_grant(record)
                && crate::entry::chained_with(key, record)
        });
        if !genuine {
            return Standing::GrantMissing;
        }
        match self.latest.map(from_sql) {
            Some(latest) if latest == granted => {}
            Some(latest) if latest > granted => return Standing::Superseded { by: latest },
            _ => return Standing::NotIndexed,
        }
        match self.rollback.map(from_sql) {
            Some(by) if by > granted => Standing::RolledBack { by },
            _ => Standing::InForce,
        }
    }

    /// Whether `record` is a well-formed grant of this row's key, tool and
    /// digest.
    fn is_grant(&self, record: &Entry) -> bool {
        match &record.record {
            Some(Record::Grant(body)) => {
                body.server_key == self.server_key
                    && body.tool == self.tool
                    && body.digest == self.digest
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn grant_and_revocation_bodies_read_strictly() {
        let grant = grant(1, "fs", "k", "read", "sha256:a");
        assert_eq!(
            grant.body,
            r#"{"digest":"sha256:a","server":"fs","server_key":"k","tool":"read"}"#
        );
        assert!(Record::read(EntryKind::Grant, None, &grant.body).is_ok());
        assert_eq!(
            index_of(EntryKind::Grant, &grant.body),
            Some(("k".to_owned(), "read".to_owned()))
        );
        for wrong in [
            json!({"digest": "sha256:a", "server": "fs", "server_key": "k"}),
            json!({"digest": "sha256:a", "server": "fs", "server_key": "k", "tool": "read", "extra": 1}),
            json!({"digest": 1, "server": "fs", "server_key": "k", "tool": "read"}),
        ] {
            let text = hintgate_policy::pin::canonical_json(&wrong);
            assert!(
                Record::read(EntryKind::Grant, None, &text).is_err(),
                "{wrong}"
            );
        }
        let revoked = revocation(1, "fs", "k", "read", REVOKED);
        assert_eq!(
            revoked.body,
            r#"{"server":"fs","server_key":"k","tool":"read","why":"revoked"}"#
        );
        assert!(Record::read(EntryKind::Revoke, None, &revoked.body).is_ok());
        let other = revoked.body.replace("\"revoked\"", "\"because\"");
        assert!(
            Record::read(EntryKind::Revoke, None, &other).is_err(),
            "a reason hintgate does not write"
        );
        assert!(Record::read(EntryKind::Call, None, "\"anything\"").is_err());
    }
}
