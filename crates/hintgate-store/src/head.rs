//! The head file: the last sequence number and link this process committed
//! to the audit log, sealed with the audit key, kept outside the database.
//!
//! Someone who can write the database but not the head file cannot cut
//! records off the end of the log unseen: `verify` checks that the chain
//! reaches the head and that the record at the head's sequence number has
//! the head's link.
//!
//! The head is written after the database commit, never before: a head
//! ahead of the log would read as records cut off. It is a lower bound on
//! the log's end (another gateway on the same log may have appended since),
//! so it is overwritten in place, one positioned write of one fixed-length
//! line per commit, and never synced to disk on the commit path: after a
//! crash of the process the last write is there; after a power loss the
//! file may hold an older head, or none that reads (SQLite in WAL mode with
//! `synchronous = NORMAL` may lose its own last commits then, and `verify`
//! names those as cut off).
//!
//! The line is `hintgate-audit-head v1 SEQ LINK MAC`: the sequence number as
//! 20 digits, the record's link as stored, and HMAC-SHA-256 under the head
//! subkey of everything before the MAC, in hexadecimal.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use hmac::Mac;

use crate::key::{AuditKey, HmacSha256};

/// What every head line starts with.
const MAGIC: &str = "hintgate-audit-head v1";

/// Writes the head file after each commit.
pub(crate) struct HeadWriter {
    path: PathBuf,
    mac: HmacSha256,
    /// The open file and the length of the line last written to it; opened
    /// on the first write, dropped after a failed one (opened again next
    /// time).
    file: Mutex<Option<(File, u64)>>,
    /// A failure was logged and the file has not been written since, so
    /// the next failure is not logged again.
    failing: AtomicBool,
}

/// A head as read from its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HeadRead {
    /// There is no head file.
    Missing,
    /// The file is not a head, or (with the key) its MAC does not match.
    Damaged(&'static str),
    /// A head: a sequence number and the link of that record; `sealed` is
    /// whether its MAC was checked (with the key) and matches.
    Head {
        seq: u64,
        link: String,
        sealed: bool,
    },
}

// === impl HeadWriter ===

impl HeadWriter {
    /// A writer of the head file at `path`, sealed with `key`.
    pub(crate) fn new(path: PathBuf, key: &AuditKey) -> Self {
        Self {
            path,
            mac: key.head_mac(),
            file: Mutex::new(None),
            failing: AtomicBool::new(false),
        }
    }

    /// Records `seq` and `link` as the head, after their commit. A failure
    /// does not undo the commit: it is logged (once until a write works
    /// again), and `verify` finds the head older than the log or missing.
    pub(crate) fn record(&self, seq: u64, link: &str) {
        let line = line(&self.mac, seq, link);
        let mut file = self
            .file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match write(&mut file, &self.path, line.as_bytes()) {
            Ok(()) => {
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!("the audit head `{}` is written again", self.path.display());
                }
            }
            Err(err) => {
                *file = None;
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::error!(
                        "the audit head `{}` could not be written: {err}; `hintgate log verify` cannot tell records cut off the end of the log until it is",
                        self.path.display()
                    );
                }
            }
        }
    }

    /// Writes the head of an empty log (sequence number 0, the link before
    /// the first record) and syncs it and its directory: written when the
    /// key is made, so that a log deleted later together with its head is
    /// told from a new one. Once, off the commit path, so it is synced. A
    /// failure is logged, as in [`HeadWriter::record`].
    pub(crate) fn start(&self) {
        self.record(0, crate::entry::GENESIS);
        let synced = {
            let file = self
                .file
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match file.as_ref() {
                Some((open, _)) => open.sync_all().and_then(|()| sync_dir(&self.path)),
                // The write failed, and said so.
                None => Ok(()),
            }
        };
        if let Err(err) = synced {
            tracing::error!(
                "the audit head `{}` could not be synced: {err}",
                self.path.display()
            );
        }
    }
}

/// Syncs the directory of `path`, so a file made in it stays after a power
/// loss.
#[cfg(unix)]
fn sync_dir(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => File::open(dir)?.sync_all(),
        _ => Ok(()),
    }
}

#[cfg(not(unix))]
fn sync_dir(_path: &Path) -> std::io::Result<()> {
    Ok(())
}

impl std::fmt::Debug for HeadWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeadWriter")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Overwrites the head in place: one positioned write of the whole line.
fn write(file: &mut Option<(File, u64)>, path: &Path, line: &[u8]) -> std::io::Result<()> {
    let length = u64::try_from(line.len()).unwrap_or(u64::MAX);
    if file.is_none() {
        let mut options = std::fs::OpenOptions::new();
        options.read(true).write(true).create(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            options.mode(0o600);
        }
        *file = Some((options.open(path)?, u64::MAX));
    }
    let Some((open, written)) = file.as_mut() else {
        return Ok(());
    };
    write_at(open, line)?;
    // Every line has one length, so this runs on the first write only: it
    // cuts whatever was longer than a line.
    if *written != length {
        open.set_len(length)?;
        *written = length;
    }
    Ok(())
}

#[cfg(unix)]
fn write_at(file: &File, line: &[u8]) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, line, 0)
}

#[cfg(not(unix))]
fn write_at(mut file: &File, line: &[u8]) -> std::io::Result<()> {
    use std::io::{Seek as _, SeekFrom, Write as _};
    file.seek(SeekFrom::Start(0))?;
    file.write_all(line)
}

/// The head line for `seq` and `link`.
fn line(mac: &HmacSha256, seq: u64, link: &str) -> String {
    let sealed = format!("{MAGIC} {seq:020} {link}");
    let mut mac = mac.clone();
    mac.update(sealed.as_bytes());
    format!("{sealed} {:x}\n", mac.finalize().into_bytes())
}

/// Reads the head file at `path`; with `key`, checks its MAC.
///
/// # Errors
///
/// The operating system's error when the file is there but cannot be read.
pub(crate) fn read(path: &Path, key: Option<&AuditKey>) -> std::io::Result<HeadRead> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(HeadRead::Missing),
        Err(err) => return Err(err),
    };
    Ok(parse(&bytes, key))
}

/// A head line, checked against `key` when there is one.
fn parse(bytes: &[u8], key: Option<&AuditKey>) -> HeadRead {
    let not_a_head = HeadRead::Damaged("it is not a head hintgate wrote");
    let Some(text) = std::str::from_utf8(bytes)
        .ok()
        .and_then(|text| text.strip_suffix('\n'))
    else {
        return not_a_head;
    };
    let Some((sealed, mac_hex)) = text.rsplit_once(' ') else {
        return not_a_head;
    };
    let mut parts = sealed.splitn(4, ' ');
    let (Some("hintgate-audit-head"), Some("v1"), Some(seq), Some(link)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return not_a_head;
    };
    let (Ok(seq), Ok(mac)) = (seq.parse::<u64>(), hex::decode(mac_hex)) else {
        return not_a_head;
    };
    if link.contains(' ') {
        return not_a_head;
    }
    let sealed_ok = match key {
        Some(key) => {
            let mut check = key.head_mac();
            check.update(sealed.as_bytes());
            if check.verify_slice(&mac).is_err() {
                return HeadRead::Damaged(
                    "its MAC does not match: it was not written with this key",
                );
            }
            true
        }
        None => false,
    };
    HeadRead::Head {
        seq,
        link: link.to_owned(),
        sealed: sealed_ok,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_reads_back_sealed_and_is_overwritten_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db.audit-head");
        let key = AuditKey::from_secret([1; 32]);
        let writer = HeadWriter::new(path.clone(), &key);
        assert_eq!(read(&path, Some(&key)).unwrap(), HeadRead::Missing);
        writer.record(7, "hmac-sha256:0011223344556677:ab");
        writer.record(12, "hmac-sha256:0011223344556677:cd");
        assert_eq!(
            read(&path, Some(&key)).unwrap(),
            HeadRead::Head {
                seq: 12,
                link: "hmac-sha256:0011223344556677:cd".into(),
                sealed: true
            }
        );
        // Without the key, it reads, unsealed.
        assert!(matches!(
            read(&path, None).unwrap(),
            HeadRead::Head {
                seq: 12,
                sealed: false,
                ..
            }
        ));
        // Under another key, its MAC does not match.
        assert!(matches!(
            read(&path, Some(&AuditKey::from_secret([2; 32]))).unwrap(),
            HeadRead::Damaged(_)
        ));
    }

    #[test]
    fn a_changed_or_cut_head_is_damaged() {
        let key = AuditKey::from_secret([1; 32]);
        let good = line(&key.head_mac(), 40, "hmac-sha256:0011223344556677:ab");
        assert!(matches!(
            parse(good.as_bytes(), Some(&key)),
            HeadRead::Head {
                seq: 40,
                sealed: true,
                ..
            }
        ));
        let forged = good.replace(&format!("{:020}", 40), &format!("{:020}", 30));
        assert!(matches!(
            parse(forged.as_bytes(), Some(&key)),
            HeadRead::Damaged(_)
        ));
        for cut in [0, 1, 30, good.len() - 1] {
            assert!(
                matches!(
                    parse(&good.as_bytes()[..cut], Some(&key)),
                    HeadRead::Damaged(_)
                ),
                "{cut}"
            );
        }
        let mut longer = good.clone().into_bytes();
        longer.extend_from_slice(b"more\n");
        assert!(matches!(parse(&longer, Some(&key)), HeadRead::Damaged(_)));
    }

    #[test]
    fn a_longer_file_is_cut_to_one_line_on_the_first_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("head");
        std::fs::write(&path, vec![b'x'; 4096]).unwrap();
        let key = AuditKey::from_secret([1; 32]);
        HeadWriter::new(path.clone(), &key).record(3, "hmac-sha256:0011223344556677:ab");
        assert!(matches!(
            read(&path, Some(&key)).unwrap(),
            HeadRead::Head { seq: 3, .. }
        ));
    }
}
