//! A log that is not the one its head was written for, found when a store
//! opens: an older copy of the database put back (the log is shorter than
//! the head, or the record at the head's place is another one), the head
//! removed, damaged or unreadable, or the whole log deleted with its head.
//!
//! A gateway's next commit would write a new head after whatever the log
//! ends with and so hide it; so a gateway refuses to open such a store
//! ([`StoreError::RolledBack`](crate::StoreError::RolledBack)), and any
//! other store handle refuses to append to it, until a person accepts it
//! (`hintgate log accept-rollback`, [`AuditLog::accept_rollback`]): that
//! appends a record of its own ([`EntryKind::Rollback`](crate::EntryKind::Rollback)) naming what was
//! found, so the gap stays visible to `verify` (`rolled-back`), and every
//! standing approval granted before it approves nothing (the records lost
//! may have revoked it).
//!
//! The head is a lower bound on the log's end (other processes, and on
//! PostgreSQL other gateways, append after it), and it is read before the
//! log, so appends meanwhile never make it look ahead: only a log shorter
//! than the head, or another record at the head's place, is a rollback.
//!
//! [`AuditLog::accept_rollback`]: crate::AuditLog::accept_rollback

use std::path::Path;

use serde::Serialize;

use crate::StoreError;
use crate::entry::{GENESIS, NewEntry, keyed_tail};
use crate::head::{self, HeadRead};
use crate::key::AuditKey;
use crate::record::{Record, RollbackFound, RollbackRecord};

/// What a store found when it compared its head with the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rollback {
    /// The head file.
    pub head: String,
    /// The log's last record when it was compared (0 when it is empty).
    pub log_end: u64,
    /// What was found.
    pub found: HeadFound,
}

/// How the head and the log disagree; each has the code `verify` reports
/// for it ([`HeadFound::code`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "found", rename_all = "kebab-case")]
pub enum HeadFound {
    /// The log ends before the record the head names.
    CutOff {
        /// The head's sequence number.
        head_seq: u64,
        /// The head's link.
        head_link: String,
    },
    /// The record at the head's sequence number has another link.
    HeadMismatch {
        /// The head's sequence number.
        head_seq: u64,
        /// The head's link.
        head_link: String,
    },
    /// Keyed records, but no head file (where the head is made with the
    /// key: a SQLite store's).
    HeadMissing,
    /// The head file is not a head, or not sealed with the key.
    HeadDamaged {
        /// What is wrong with it.
        why: String,
    },
    /// The head file cannot be read.
    HeadUnreadable {
        /// What the operating system said.
        error: String,
    },
    /// The log is empty and its head is missing, though the key was there.
    LogDeleted,
}

/// A rolled-back log a person accepted ([`AuditLog::accept_rollback`]).
///
/// [`AuditLog::accept_rollback`]: crate::AuditLog::accept_rollback
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AcceptedRollback {
    /// The record that accepts it.
    pub seq: u64,
    /// What was found.
    pub rollback: Rollback,
}

// === impl HeadFound ===

impl HeadFound {
    /// The code `verify` reports for it.
    #[must_use]
    pub const fn code(&self) -> &'static str {
        match self {
            Self::CutOff { .. } => "cut-off",
            Self::HeadMismatch { .. } => "head-mismatch",
            Self::HeadMissing => "head-missing",
            Self::HeadDamaged { .. } => "head-damaged",
            Self::HeadUnreadable { .. } => "head-unreadable",
            Self::LogDeleted => "log-deleted",
        }
    }
}

// === impl Rollback ===

impl std::fmt::Display for Rollback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Self {
            head,
            log_end,
            found,
        } = self;
        let code = found.code();
        match found {
            HeadFound::CutOff { head_seq, .. } => write!(
                f,
                "the audit log ends at record {log_end} but its head `{head}` names record {head_seq} (`{code}`): an older copy of the database was put back, or records were cut off the end (a power loss can lose the last commits too)"
            ),
            HeadFound::HeadMismatch { head_seq, .. } => write!(
                f,
                "the audit log's record {head_seq} is not the one its head `{head}` names (`{code}`): an older copy of the database was put back and written to since, or the end of the log was replaced"
            ),
            HeadFound::HeadMissing => write!(
                f,
                "the audit log holds keyed records up to record {log_end} but its head `{head}` is missing (`{code}`): it was removed, so an older copy of the database put back cannot be ruled out"
            ),
            HeadFound::HeadDamaged { why } => write!(
                f,
                "the audit log's head `{head}` is damaged (`{code}`): {why}, so an older copy of the database put back cannot be ruled out"
            ),
            HeadFound::HeadUnreadable { error } => write!(
                f,
                "the audit log's head `{head}` cannot be read (`{code}`): {error}"
            ),
            HeadFound::LogDeleted => write!(
                f,
                "the audit log is empty and its head `{head}` is missing, but the audit key was there (`{code}`): the log was deleted together with its head"
            ),
        }
    }
}

impl Rollback {
    /// The record that accepts it.
    pub(crate) fn entry(&self, at: i64) -> NewEntry {
        let (head_seq, head_link, why) = match &self.found {
            HeadFound::CutOff {
                head_seq,
                head_link,
            }
            | HeadFound::HeadMismatch {
                head_seq,
                head_link,
            } => (Some(*head_seq), Some(head_link.clone()), None),
            HeadFound::HeadDamaged { why } => (None, None, Some(why.clone())),
            HeadFound::HeadUnreadable { error } => (None, None, Some(error.clone())),
            HeadFound::HeadMissing | HeadFound::LogDeleted => (None, None, None),
        };
        let found = match &self.found {
            HeadFound::CutOff { .. } => RollbackFound::CutOff,
            HeadFound::HeadMismatch { .. } => RollbackFound::HeadMismatch,
            HeadFound::HeadMissing => RollbackFound::HeadMissing,
            HeadFound::HeadDamaged { .. } => RollbackFound::HeadDamaged,
            HeadFound::HeadUnreadable { .. } => RollbackFound::HeadUnreadable,
            HeadFound::LogDeleted => RollbackFound::LogDeleted,
        };
        let body = RollbackRecord {
            found,
            head: self.head.clone(),
            head_link,
            head_seq,
            log_end: self.log_end,
            why,
        };
        NewEntry::of(at, None, &Record::Rollback(body))
    }
}

/// What the head check reads of the log.
pub(crate) trait LogEnd {
    /// The sequence number and link of the log's last record, if any.
    fn tail(&mut self) -> Result<Option<(u64, String)>, StoreError>;

    /// The link of the record at `seq`, if there is one.
    fn link_at(&mut self, seq: u64) -> Result<Option<String>, StoreError>;
}

/// Compares the head at `path` with the log, reading the head first and
/// then the log's tail and the link of the record at the head's sequence
/// number; `None` when they agree (or the head is a lower bound the log
/// has passed).
///
/// `head_made_with_key`: the head is written when the key is made (a head
/// file of its own), so a missing one under keyed records was removed.
/// `deleted_is_rollback`: the key was not made now, so an empty log without
/// its head was deleted with it (`log-deleted`).
pub(crate) fn check(
    path: &Path,
    key: &AuditKey,
    head_made_with_key: bool,
    deleted_is_rollback: bool,
    log: &mut dyn LogEnd,
) -> Result<Option<Rollback>, StoreError> {
    let read = head::read(path, Some(key));
    let (log_end, tail_link) = log.tail()?.unwrap_or_else(|| (0, GENESIS.to_owned()));
    let keyed = keyed_tail(Some(&tail_link)).is_some();
    let found = match read {
        Err(err) => Some(HeadFound::HeadUnreadable {
            error: err.to_string(),
        }),
        Ok(HeadRead::Missing) if !head_made_with_key => None,
        Ok(HeadRead::Missing) if keyed => Some(HeadFound::HeadMissing),
        Ok(HeadRead::Missing) if log_end == 0 && deleted_is_rollback => Some(HeadFound::LogDeleted),
        Ok(HeadRead::Missing) => None,
        Ok(HeadRead::Damaged(why)) => Some(HeadFound::HeadDamaged {
            why: why.to_owned(),
        }),
        Ok(HeadRead::Head { seq, link, .. }) if seq > log_end => Some(HeadFound::CutOff {
            head_seq: seq,
            head_link: link,
        }),
        Ok(HeadRead::Head { seq: 0, link, .. }) if link == GENESIS => None,
        Ok(HeadRead::Head { seq, link, .. }) => {
            if log.link_at(seq)?.as_deref() == Some(link.as_str()) {
                None
            } else {
                Some(HeadFound::HeadMismatch {
                    head_seq: seq,
                    head_link: link,
                })
            }
        }
    };
    Ok(found.map(|found| Rollback {
        head: path.display().to_string(),
        log_end,
        found,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::EntryKind;

    fn body(found: &HeadFound) -> RollbackRecord {
        let entry = Rollback {
            head: "/state/state.db.audit-head".into(),
            log_end: 30,
            found: found.clone(),
        }
        .entry(1);
        assert_eq!(entry.kind, EntryKind::Rollback);
        serde_json::from_str(&entry.body).unwrap()
    }

    #[test]
    fn every_rollback_record_hintgate_writes_fits_and_no_other_does() {
        let link = "hmac-sha256:0011223344556677:ab".to_owned();
        for found in [
            HeadFound::CutOff {
                head_seq: 40,
                head_link: link.clone(),
            },
            HeadFound::HeadMismatch {
                head_seq: 20,
                head_link: link.clone(),
            },
            HeadFound::HeadMissing,
            HeadFound::HeadDamaged {
                why: "it is not a head hintgate wrote".into(),
            },
            HeadFound::HeadUnreadable {
                error: "permission denied".into(),
            },
            HeadFound::LogDeleted,
        ] {
            let written = body(&found);
            assert!(written.fits(), "{found:?}");
            assert_eq!(written.found.as_str(), found.code());
            for code in RollbackFound::ALL {
                let mut other = written.clone();
                other.found = code;
                let same_fields = matches!(
                    (code, written.found),
                    (
                        RollbackFound::CutOff | RollbackFound::HeadMismatch,
                        RollbackFound::CutOff | RollbackFound::HeadMismatch
                    ) | (
                        RollbackFound::HeadDamaged | RollbackFound::HeadUnreadable,
                        RollbackFound::HeadDamaged | RollbackFound::HeadUnreadable
                    ) | (
                        RollbackFound::HeadMissing | RollbackFound::LogDeleted,
                        RollbackFound::HeadMissing | RollbackFound::LogDeleted
                    )
                );
                assert_eq!(
                    other.fits(),
                    same_fields,
                    "{code:?} with the fields of {found:?}"
                );
            }
            let mut other = written.clone();
            other.head_seq = other.head_seq.xor(Some(1));
            assert!(!other.fits(), "{found:?}");
        }
    }

    #[test]
    fn a_cut_off_log_is_named_as_the_start_up_error_says() {
        let rollback = Rollback {
            head: "/s/state.db.audit-head".into(),
            log_end: 30,
            found: HeadFound::CutOff {
                head_seq: 40,
                head_link: String::new(),
            },
        };
        assert!(
            rollback
                .to_string()
                .starts_with("the audit log ends at record 30 but its head `/s/state.db.audit-head` names record 40 (`cut-off`): "),
            "{rollback}"
        );
    }
}
