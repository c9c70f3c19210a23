//! The audit journal: each gateway run's records, appended to files of its
//! own before its calls are sent, and indexed into the store off the call
//! path.
//!
//! A run writes `RUN.SEGMENT.hgj` files in the journal directory (beside a
//! SQLite database: [`crate::SqliteStore::journal_dir`]), each opened
//! append-only and never rewritten. A segment begins with
//! [`SEGMENT_MAGIC`]; then frames, one per record:
//!
//! ```text
//! len   u32 LE   the bytes after this field (at most MAX_FRAME_BYTES)
//! n     u64 LE   the record's number in its run, from 1
//! at    i64 LE   seconds since the Unix epoch
//! call  u64 LE   for an outcome: the run's number of its call; 0: none
//! flags u8       1: a call the gateway forwarded (an outcome is due)
//! klen  u8       the kind's length, then the kind (`call`, `outcome`, ...)
//! body  ...      the record's canonical JSON (an `outcomes` record names
//!                its calls by their numbers in the run)
//! link  32 bytes HMAC-SHA-256(subkey "journal chain v1", the link before ||
//!                n..body); the link before the first is HMAC(that subkey,
//!                "genesis " || run)
//! ```
//!
//! A turn's frames go to the file in one `write(2)` ([`JournalWriter::append`]),
//! and the first segment of a run is held under an exclusive `flock` for the
//! run's life: a journal whose lock can be taken belongs to a run that
//! ended ([`lock_ended`]). The store then holds the index ([`JournalIndex`]):
//! every record of every journal, chained into the one log, each row knowing
//! its run and number, so importing a frame twice is a no-op.
//! [`import_ended`] brings in what an ended run's journal holds and the
//! index lacks, and gives every call it forwarded without an outcome an
//! `interrupted` one; [`verify`] checks every journal's chain and that the
//! index holds each record as the journal does.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};

use hmac::Mac as _;
use serde::Serialize;

use crate::entry::{kind_from, kind_name};
use crate::key::{HmacSha256, mac_with};
use crate::record::{OutcomeCode, OutcomeRecord, OutcomesRecord, Record};
use crate::{AuditKey, AuditLog, EntryKind, NewEntry, Problem, StoreError};

mod indexer;

pub use indexer::{INDEX_BACKLOG_BYTES, INDEX_GATHER, Indexed, Indexer};

/// The first bytes of every segment.
pub const SEGMENT_MAGIC: &[u8; 8] = b"HGJRNL1\n";

/// The largest frame a journal holds (a record of a call whose arguments
/// fill a whole message, with room to spare). A length field above it is
/// damage, and is never allocated.
pub const MAX_FRAME_BYTES: u32 = 64 << 20;

/// A segment is closed, and the next begun, once it holds this many bytes
/// (`[audit] segment_bytes`; default).
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 << 20;

/// The smallest segment size a configuration may ask for.
pub const MIN_SEGMENT_BYTES: u64 = 4096;

/// The subkey's purpose for the journal's links.
const CHAIN_PURPOSE: &str = "journal chain v1";

/// n, at, call, flags and the kind's length.
const FIXED: usize = 8 + 8 + 8 + 1 + 1;

/// The flag of a call the gateway forwarded.
const FORWARDED: u8 = 1;

/// A link's length.
const LINK: usize = 32;

/// How many frames an import hands the index at once.
const IMPORT_BATCH: usize = 2048;

/// What a journal write survives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Durability {
    /// One `write(2)`: the record is in the kernel's page cache when the
    /// call is sent, so it survives the gateway's crash, not the machine's.
    #[default]
    Write,
    /// The write, then `fdatasync`: the record is on the disk when the call
    /// is sent, so it survives a power loss too, at a disk flush per turn.
    Fsync,
}

/// How a run writes its journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalSettings {
    /// What a write survives.
    pub durability: Durability,
    /// The size at which a segment is closed and the next begun.
    pub segment_bytes: u64,
}

impl Default for JournalSettings {
    fn default() -> Self {
        Self {
            durability: Durability::Write,
            segment_bytes: DEFAULT_SEGMENT_BYTES,
        }
    }
}

/// Where a frame ends in its run's journal, and its link: where an import
/// goes on from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// The record's number in its run (from 1).
    pub n: u64,
    /// Its segment.
    pub segment: u32,
    /// The offset just past it in its segment.
    pub offset: u64,
    /// Its link.
    pub link: [u8; LINK],
}

/// A record written to a run's journal, on its way to the index. Its
/// `entry` names calls by their numbers in the run (`call`, and the items
/// of an `outcomes` record); the index puts the log's sequence numbers in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Journaled {
    /// Where it is.
    pub position: Position,
    /// The record as the journal holds it.
    pub entry: NewEntry,
    /// A call the gateway forwarded: an outcome is due.
    pub forwarded: bool,
}

/// What the index knows of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunState {
    /// The last record indexed.
    pub last: Position,
    /// The run ended and was imported to its end (its calls left pending
    /// marked `interrupted`): nothing more is read from its journal.
    pub closed: bool,
}

/// The index of the journals: the store's side. A log that keeps one
/// (SQLite) returns it from [`AuditLog::journal_index`].
///
/// Contract: [`JournalIndex::index`] appends, in one transaction, the
/// records after the run's last indexed one, chained into the log like any
/// append, each with its run and number, and skips those indexed already
/// (so two processes importing one journal write each record once); a
/// record that does not follow the last indexed one is refused.
pub trait JournalIndex: Send + Sync {
    /// The directory of the journals.
    fn journal_dir(&self) -> &Path;

    /// Indexes records of `run`, oldest first; returns how many were new.
    /// `calls` is the caller's memory of the log's numbers of the run's
    /// forwarded calls still without an outcome (by their numbers in the
    /// run), kept up to date here so an outcome's call is found without a
    /// query; a call it lacks is looked up.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the log cannot be written, or the records do not
    /// follow what the index holds of the run.
    fn index(
        &self,
        run: &str,
        records: &[Journaled],
        calls: &mut HashMap<u64, u64>,
    ) -> Result<usize, StoreError>;

    /// What the index knows of `run`.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the index cannot be read.
    fn run_state(&self, run: &str) -> Result<Option<RunState>, StoreError>;

    /// Every run the index knows.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the index cannot be read.
    fn runs(&self) -> Result<Vec<(String, RunState)>, StoreError>;

    /// Closes an ended run: appends an `interrupted` outcome for each of
    /// `open`, the calls it forwarded that have none (by their numbers in
    /// the run; one not indexed is passed over), and marks the run closed,
    /// in one transaction (a run closed already: nothing). Returns how many
    /// calls were marked.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the log cannot be written.
    fn close(&self, run: &str, open: &[u64]) -> Result<u64, StoreError>;

    /// The log's sequence number of record `n` of `run`.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the index cannot be read.
    fn seq_of(&self, run: &str, n: u64) -> Result<Option<u64>, StoreError>;
}

/// Why the journal could not be written.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The file system said no.
    #[error("the audit journal `{path}`: {err}")]
    Io {
        /// The file.
        path: String,
        /// What failed.
        err: std::io::Error,
    },
    /// A record is larger than a frame may be.
    #[error("an audit record of {0} bytes is larger than a journal frame may be")]
    TooLarge(usize),
    /// The run's name cannot name a file.
    #[error("`{0}` cannot name an audit journal")]
    BadRun(String),
}

// === names ===

/// The file of `run`'s segment `segment`.
#[must_use]
pub fn segment_name(run: &str, segment: u32) -> String {
    format!("{run}.{segment:06}.hgj")
}

/// Whether `run` may name journal files: ASCII letters, digits, `-` and
/// `_`, at most 100.
#[must_use]
pub fn valid_run(run: &str) -> bool {
    !run.is_empty()
        && run.len() <= 100
        && run
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
}

/// A journal file's run and segment, from its name.
fn parse_name(name: &str) -> Option<(&str, u32)> {
    let stem = name.strip_suffix(".hgj")?;
    let (run, segment) = stem.rsplit_once('.')?;
    if !valid_run(run) || segment.len() != 6 || !segment.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((run, segment.parse().ok()?))
}

/// The journal files in `dir`, by run, each run's segments in order.
///
/// # Errors
///
/// The directory cannot be read (a missing one has no journals).
pub fn journals(dir: &Path) -> std::io::Result<BTreeMap<String, Vec<u32>>> {
    let mut runs: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    let listing = match std::fs::read_dir(dir) {
        Ok(listing) => listing,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(runs),
        Err(err) => return Err(err),
    };
    for item in listing {
        let item = item?;
        if let Some((run, segment)) = item.file_name().to_str().and_then(parse_name) {
            runs.entry(run.to_owned()).or_default().push(segment);
        }
    }
    for segments in runs.values_mut() {
        segments.sort_unstable();
    }
    Ok(runs)
}

// === links ===

/// The journal's chain subkey as a ready MAC.
fn chain_mac(key: &AuditKey) -> HmacSha256 {
    mac_with(&key.subkey(CHAIN_PURPOSE))
}

/// The link before a run's first record.
fn genesis(mac: &HmacSha256, run: &str) -> [u8; LINK] {
    let mut mac = mac.clone();
    mac.update(b"genesis ");
    mac.update(run.as_bytes());
    mac.finalize().into_bytes().into()
}

/// The link of a frame whose bytes from `n` to the end of its body are
/// `content`.
fn link_of(mac: &HmacSha256, prev: &[u8; LINK], content: &[u8]) -> [u8; LINK] {
    let mut mac = mac.clone();
    mac.update(prev);
    mac.update(content);
    mac.finalize().into_bytes().into()
}

/// Appends one frame to `buf`; returns its link.
fn encode(
    buf: &mut Vec<u8>,
    mac: &HmacSha256,
    prev: &[u8; LINK],
    (n, entry, forwarded): (u64, &NewEntry, bool),
) -> Result<[u8; LINK], JournalError> {
    let kind = kind_name(entry.kind).as_bytes();
    let len = FIXED + kind.len() + entry.body.len() + LINK;
    let len32 = u32::try_from(len)
        .ok()
        .filter(|len| *len <= MAX_FRAME_BYTES)
        .ok_or(JournalError::TooLarge(len))?;
    buf.extend_from_slice(&len32.to_le_bytes());
    let start = buf.len();
    buf.extend_from_slice(&n.to_le_bytes());
    buf.extend_from_slice(&entry.at.to_le_bytes());
    buf.extend_from_slice(&entry.call.unwrap_or(0).to_le_bytes());
    buf.push(if forwarded { FORWARDED } else { 0 });
    // Kind names are short and fixed.
    buf.push(u8::try_from(kind.len()).unwrap_or(u8::MAX));
    buf.extend_from_slice(kind);
    buf.extend_from_slice(entry.body.as_bytes());
    let link = link_of(mac, prev, buf.get(start..).unwrap_or_default());
    buf.extend_from_slice(&link);
    Ok(link)
}

// === the writer ===

/// A run's journal, open for appending, its first segment locked for the
/// run's life.
#[derive(Debug)]
pub struct JournalWriter {
    dir: PathBuf,
    run: String,
    settings: JournalSettings,
    mac: HmacSha256,
    /// The first segment, held under an exclusive lock until dropped.
    _lock: File,
    file: File,
    segment: u32,
    /// Bytes in the current segment (the magic included once written).
    written: u64,
    /// The current segment's magic is not written yet: it goes with the
    /// first frames, in the same write.
    fresh: bool,
    next: u64,
    link: [u8; LINK],
    buf: Vec<u8>,
}

impl JournalWriter {
    /// Creates run `run`'s journal in `dir` (made when missing, mode 0700),
    /// chained under `key`, and locks it.
    ///
    /// # Errors
    ///
    /// [`JournalError`] when the directory or file cannot be made or locked
    /// (a file of that run exists already: runs are never appended to
    /// twice).
    pub fn create(
        dir: &Path,
        run: &str,
        key: &AuditKey,
        settings: JournalSettings,
    ) -> Result<Self, JournalError> {
        if !valid_run(run) {
            return Err(JournalError::BadRun(run.to_owned()));
        }
        let io = |path: &Path| {
            let path = path.display().to_string();
            move |err| JournalError::Io { path, err }
        };
        make_dir(dir).map_err(io(dir))?;
        let first = dir.join(segment_name(run, 0));
        let file = open_segment(&first).map_err(io(&first))?;
        lock_exclusive(&file).map_err(io(&first))?;
        if settings.durability == Durability::Fsync {
            // The file's name, too, survives a power loss.
            File::open(dir)
                .and_then(|dir| dir.sync_all())
                .map_err(io(dir))?;
        }
        let lock = file.try_clone().map_err(io(&first))?;
        let mac = chain_mac(key);
        let link = genesis(&mac, run);
        Ok(Self {
            dir: dir.to_path_buf(),
            run: run.to_owned(),
            settings,
            mac,
            _lock: lock,
            file,
            segment: 0,
            written: 0,
            fresh: true,
            next: 1,
            link,
            buf: Vec::with_capacity(16 << 10),
        })
    }

    /// The run.
    #[must_use]
    pub fn run(&self) -> &str {
        &self.run
    }

    /// Appends `entries` (which name calls by their numbers in this run;
    /// `forwarded[i]`: entry `i` is a call the gateway forwards, whose
    /// outcome is due) in one write, followed by `fdatasync` when the settings ask; returns
    /// where each landed. On an error nothing of them counts: a partly
    /// written frame is cut off again, or, when it cannot be, the next
    /// append begins a new segment (the torn bytes stay, a torn tail).
    ///
    /// # Errors
    ///
    /// [`JournalError`] when the file cannot be written or a record is too
    /// large.
    pub fn append(
        &mut self,
        entries: &[NewEntry],
        forwarded: &[bool],
    ) -> Result<Vec<Position>, JournalError> {
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let size = entries
            .iter()
            .map(|entry| 4 + FIXED + 8 + entry.body.len() + LINK)
            .sum::<usize>() as u64;
        if !self.fresh && self.written + size > self.settings.segment_bytes {
            self.rotate()?;
        }
        self.buf.clear();
        if self.fresh {
            self.buf.extend_from_slice(SEGMENT_MAGIC);
        }
        let base = self.written;
        let mut link = self.link;
        let mut positions = Vec::with_capacity(entries.len());
        for (idx, entry) in entries.iter().enumerate() {
            let n = self.next + idx as u64;
            let due = forwarded.get(idx).copied().unwrap_or(false);
            link = encode(&mut self.buf, &self.mac, &link, (n, entry, due))?;
            positions.push(Position {
                n,
                segment: self.segment,
                offset: base + self.buf.len() as u64,
                link,
            });
        }
        self.write_out()?;
        self.next += entries.len() as u64;
        self.link = link;
        Ok(positions)
    }

    /// Writes the buffer with one `write(2)`, and syncs when asked.
    fn write_out(&mut self) -> Result<(), JournalError> {
        let result = match self.file.write(&self.buf) {
            Ok(done) if done == self.buf.len() => Ok(()),
            Ok(done) => Err(std::io::Error::new(
                std::io::ErrorKind::WriteZero,
                format!("{done} of {} bytes written", self.buf.len()),
            )),
            Err(err) => Err(err),
        }
        .and_then(|()| match self.settings.durability {
            Durability::Write => Ok(()),
            Durability::Fsync => self.file.sync_data(),
        });
        match result {
            Ok(()) => {
                self.written += self.buf.len() as u64;
                self.fresh = false;
                Ok(())
            }
            Err(err) => {
                // Cut off what part of the write landed; when that fails
                // too, the next append begins a new segment.
                if self.file.set_len(self.written).is_err() {
                    self.written = u64::MAX / 2;
                    self.fresh = false;
                }
                Err(JournalError::Io {
                    path: self
                        .dir
                        .join(segment_name(&self.run, self.segment))
                        .display()
                        .to_string(),
                    err,
                })
            }
        }
    }

    /// Closes the current segment and opens the next.
    fn rotate(&mut self) -> Result<(), JournalError> {
        let segment = self.segment + 1;
        let path = self.dir.join(segment_name(&self.run, segment));
        let file = open_segment(&path).map_err(|err| JournalError::Io {
            path: path.display().to_string(),
            err,
        })?;
        if self.settings.durability == Durability::Fsync
            && let Ok(dir) = File::open(&self.dir)
        {
            let _ = dir.sync_all();
        }
        self.file = file;
        self.segment = segment;
        self.written = 0;
        self.fresh = true;
        Ok(())
    }
}

/// Makes the journal directory, readable by its owner only.
fn make_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Creates a segment file (never one that exists), append-only, mode 0600.
fn open_segment(path: &Path) -> std::io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.append(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

#[cfg(unix)]
fn lock_exclusive(file: &File) -> std::io::Result<()> {
    rustix::fs::flock(file, rustix::fs::FlockOperation::NonBlockingLockExclusive)
        .map_err(std::io::Error::from)
}

#[cfg(not(unix))]
fn lock_exclusive(_file: &File) -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "the audit journal needs flock",
    ))
}

/// Takes the lock of `run`'s journal in `dir` when its run has ended: the
/// lock, held while it is kept (an import holds it, so two never import
/// one run at once), or `None` for a live run (or one another process is
/// importing), or a run whose first segment is gone.
///
/// # Errors
///
/// The file cannot be opened or locked for another reason.
pub fn lock_ended(dir: &Path, run: &str) -> std::io::Result<Option<File>> {
    let file = match File::open(dir.join(segment_name(run, 0))) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err),
    };
    match lock_exclusive(&file) {
        Ok(()) => Ok(Some(file)),
        Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => Ok(None),
        Err(err) => Err(err),
    }
}

// === the reader ===

/// A frame read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Where it ends, and its link.
    pub position: Position,
    /// The record, calls named by their numbers in the run.
    pub entry: NewEntry,
    /// A call the gateway forwarded: an outcome is due.
    pub forwarded: bool,
}

/// Where reading a run's journal stopped short.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum Stop {
    /// A segment ends in part of a frame (a crash in the middle of a
    /// write): the bytes from `offset` on are no record.
    Torn {
        /// The segment.
        segment: u32,
        /// Where the partial frame begins.
        offset: u64,
    },
    /// The chain breaks: a frame was edited, removed, inserted, or its
    /// length damaged; nothing from here on is trusted.
    Broken {
        /// The segment.
        segment: u32,
        /// Where the frame that does not hold begins.
        offset: u64,
        /// The record number that was expected there.
        n: u64,
        /// What is wrong.
        why: String,
    },
}

/// Reads a run's journal frame by frame, checking the chain.
#[derive(Debug)]
pub struct RunReader {
    dir: PathBuf,
    run: String,
    segments: Vec<u32>,
    /// Index into `segments` of the one being read.
    at: usize,
    file: Option<(std::io::BufReader<File>, u64)>,
    offset: u64,
    mac: HmacSha256,
    next: u64,
    link: [u8; LINK],
    /// The torn tails passed (a segment that ends in part of a frame, with
    /// the chain going on in the next one).
    pub torn: Vec<Stop>,
}

impl RunReader {
    /// A reader of `run`'s `segments` in `dir`, from the start or just after
    /// `from`.
    #[must_use]
    pub fn new(
        dir: &Path,
        run: &str,
        segments: Vec<u32>,
        key: &AuditKey,
        from: Option<Position>,
    ) -> Self {
        let mac = chain_mac(key);
        let (at, offset, next, link) = match from {
            Some(from) => (
                segments
                    .iter()
                    .position(|segment| *segment == from.segment)
                    .unwrap_or(segments.len()),
                from.offset,
                from.n + 1,
                from.link,
            ),
            None => (0, 0, 1, genesis(&mac, run)),
        };
        Self {
            dir: dir.to_path_buf(),
            run: run.to_owned(),
            segments,
            at,
            file: None,
            offset,
            mac,
            next,
            link,
            torn: Vec::new(),
        }
    }

    fn broken(&self, why: impl Into<String>) -> Stop {
        Stop::Broken {
            segment: self.segments.get(self.at).copied().unwrap_or(0),
            offset: self.offset,
            n: self.next,
            why: why.into(),
        }
    }

    /// The next frame; `Ok(None)` at the end of the journal; `Err` where
    /// the chain breaks (nothing after it is read).
    ///
    /// # Errors
    ///
    /// [`Stop::Broken`]: what is wrong and where.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, Stop> {
        loop {
            let Some(&segment) = self.segments.get(self.at) else {
                return Ok(None);
            };
            if self.file.is_none() {
                let expected = match self.at.checked_sub(1) {
                    Some(before) => self.segments.get(before).map_or(0, |before| before + 1),
                    None => 0,
                };
                if segment != expected && self.offset == 0 {
                    return Err(self.broken(format!("segment {expected} is missing")));
                }
                let path = self.dir.join(segment_name(&self.run, segment));
                let mut file = File::open(&path).map_err(|err| {
                    self.broken(format!("cannot read `{}`: {err}", path.display()))
                })?;
                let size = file
                    .metadata()
                    .map_err(|err| self.broken(err.to_string()))?
                    .len();
                if self.offset == 0 {
                    let mut magic = [0u8; 8];
                    if size < 8 {
                        // A segment made, its first write never done.
                        if size > 0 {
                            self.torn.push(Stop::Torn { segment, offset: 0 });
                        }
                        self.at += 1;
                        continue;
                    }
                    file.read_exact(&mut magic)
                        .map_err(|err| self.broken(err.to_string()))?;
                    if &magic != SEGMENT_MAGIC {
                        return Err(self.broken("the segment does not begin as a journal does"));
                    }
                    self.offset = 8;
                } else {
                    file.seek(SeekFrom::Start(self.offset))
                        .map_err(|err| self.broken(err.to_string()))?;
                }
                self.file = Some((std::io::BufReader::new(file), size));
            }
            match self.frame_here()? {
                Some(frame) => return Ok(Some(frame)),
                None => {
                    self.file = None;
                    self.offset = 0;
                    self.at += 1;
                }
            }
        }
    }

    /// The frame at the current offset of the open segment; `None` at its
    /// end (a torn tail noted).
    fn frame_here(&mut self) -> Result<Option<Frame>, Stop> {
        let segment = self.segments.get(self.at).copied().unwrap_or(0);
        let Some((reader, size)) = self.file.as_mut() else {
            return Ok(None);
        };
        let size = *size;
        let left = size.saturating_sub(self.offset);
        if left == 0 {
            return Ok(None);
        }
        if left < 4 {
            self.torn.push(Stop::Torn {
                segment,
                offset: self.offset,
            });
            return Ok(None);
        }
        let mut len = [0u8; 4];
        reader
            .read_exact(&mut len)
            .map_err(|err| self.broken(err.to_string()))?;
        let len = u32::from_le_bytes(len);
        let least = FIXED + LINK;
        if len > MAX_FRAME_BYTES || (len as usize) < least {
            return Err(self.broken(format!("a frame length of {len} bytes")));
        }
        if u64::from(len) > left - 4 {
            // Never allocated: the file does not hold it.
            self.torn.push(Stop::Torn {
                segment,
                offset: self.offset,
            });
            return Ok(None);
        }
        let mut bytes = vec![0u8; len as usize];
        let Some((reader, _)) = self.file.as_mut() else {
            return Ok(None);
        };
        reader
            .read_exact(&mut bytes)
            .map_err(|err| self.broken(err.to_string()))?;
        let (content, link) = bytes.split_at(bytes.len() - LINK);
        let expected = link_of(&self.mac, &self.link, content);
        if expected.as_slice() != link {
            return Err(self.broken("the frame's link does not match"));
        }
        let (entry, forwarded) = decode(content, self.next).map_err(|why| self.broken(why))?;
        self.offset += 4 + u64::from(len);
        self.link = expected;
        let frame = Frame {
            position: Position {
                n: self.next,
                segment,
                offset: self.offset,
                link: expected,
            },
            entry,
            forwarded,
        };
        self.next += 1;
        Ok(Some(frame))
    }
}

/// A frame's content (n to the end of its body) as a record.
fn decode(content: &[u8], expected: u64) -> Result<(NewEntry, bool), String> {
    let Some((fixed, rest)) = content.split_first_chunk::<FIXED>() else {
        return Err("a frame shorter than its fields".into());
    };
    let word = |at: usize| -> [u8; 8] {
        fixed
            .get(at..at + 8)
            .and_then(|word| word.try_into().ok())
            .unwrap_or_default()
    };
    let [.., flags, kind_len] = *fixed;
    let n = u64::from_le_bytes(word(0));
    if n != expected {
        return Err(format!("record {n} where {expected} was due"));
    }
    let at = i64::from_le_bytes(word(8));
    let call = u64::from_le_bytes(word(16));
    let forwarded = match flags {
        0 => false,
        FORWARDED => true,
        other => return Err(format!("flags {other:#x} hintgate does not write")),
    };
    let Some((kind, body)) = rest.split_at_checked(usize::from(kind_len)) else {
        return Err("a kind longer than its frame".into());
    };
    let kind = std::str::from_utf8(kind)
        .ok()
        .and_then(kind_from)
        .ok_or("a kind hintgate does not write")?;
    let body = std::str::from_utf8(body).map_err(|_| "a body that is not UTF-8")?;
    Ok((
        NewEntry {
            at,
            kind,
            call: (call != 0).then_some(call),
            body: body.to_owned(),
        },
        forwarded,
    ))
}

// === calls named in a run, and in the log ===

/// The numbers in the run of the calls `entry` ends (an outcome's call, an
/// `outcomes` record's items).
#[must_use]
pub fn ends(entry: &NewEntry) -> Vec<u64> {
    match entry.kind {
        EntryKind::Outcome => entry.call.into_iter().collect(),
        EntryKind::Outcomes => serde_json::from_str::<OutcomesRecord>(&entry.body)
            .map(|record| record.outcomes.iter().map(|item| item.call).collect())
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// `entry` as the log holds it: each call it names by its number in the
/// run named by its sequence number (`seq_of`), the body written again by
/// the record's one writer. `None` when a call it names is unknown.
pub fn in_log(entry: &NewEntry, seq_of: impl FnMut(u64) -> Option<u64>) -> Option<NewEntry> {
    in_log_ending(entry, seq_of).map(|(entry, _)| entry)
}

/// [`in_log`], with what [`ends`] gives of `entry` (an `outcomes` record's
/// body read once for both).
pub(crate) fn in_log_ending(
    entry: &NewEntry,
    mut seq_of: impl FnMut(u64) -> Option<u64>,
) -> Option<(NewEntry, Vec<u64>)> {
    match entry.kind {
        EntryKind::Outcome => {
            let call = entry.call?;
            Some((
                NewEntry {
                    call: Some(seq_of(call)?),
                    ..entry.clone()
                },
                vec![call],
            ))
        }
        EntryKind::Outcomes => {
            let mut record: OutcomesRecord = serde_json::from_str(&entry.body).ok()?;
            let mut ended = Vec::with_capacity(record.outcomes.len());
            for item in &mut record.outcomes {
                ended.push(item.call);
                item.call = seq_of(item.call)?;
            }
            Some((
                NewEntry {
                    at: entry.at,
                    kind: entry.kind,
                    call: None,
                    body: Record::Outcomes(record).to_json(),
                },
                ended,
            ))
        }
        _ => Some((entry.clone(), Vec::new())),
    }
}

/// The `interrupted` outcome of the call recorded as `seq`.
#[must_use]
pub fn interrupted(seq: u64, at: i64) -> NewEntry {
    NewEntry::of(
        at,
        Some(seq),
        &Record::Outcome(OutcomeRecord {
            attempt: 0,
            duration_ms: 0,
            outcome: OutcomeCode::Interrupted,
        }),
    )
}

// === import ===

/// What [`import_ended`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Imported {
    /// Records brought into the index.
    pub records: u64,
    /// Calls marked `interrupted`.
    pub interrupted: u64,
    /// Runs closed.
    pub runs: u64,
    /// Where journals stopped short (torn tails, broken chains), by run.
    pub stops: Vec<(String, Stop)>,
}

/// Imports what the journals of ended runs hold and the index lacks, then
/// closes each such run (its calls left pending get an `interrupted`
/// outcome). A live run's journal (its lock held) is not read. Safe to run
/// in several processes at once: each run is imported under its lock, and
/// the index skips what it holds.
///
/// # Errors
///
/// [`StoreError`] when the index cannot be read or written, or the
/// directory cannot be listed.
pub fn import_ended(log: &dyn AuditLog) -> Result<Imported, StoreError> {
    let mut imported = Imported::default();
    let (Some(index), Some(key)) = (log.journal_index(), log.audit_key()) else {
        return Ok(imported);
    };
    let dir = index.journal_dir().to_path_buf();
    let runs = journals(&dir).map_err(|err| {
        StoreError::Address(format!("the audit journal `{}`: {err}", dir.display()))
    })?;
    // One read for all: a start on a directory of many ended runs reads
    // no more than their names.
    let closed: std::collections::HashSet<String> = index
        .runs()?
        .into_iter()
        .filter(|(_, state)| state.closed)
        .map(|(run, _)| run)
        .collect();
    for (run, segments) in runs {
        if closed.contains(&run) {
            continue;
        }
        let Ok(Some(_lock)) = lock_ended(&dir, &run) else {
            continue;
        };
        // Read again under the lock: another process may have closed it.
        let state = index.run_state(&run)?;
        if state.is_some_and(|state| state.closed) {
            continue;
        }
        // The whole journal, from its first record: what was indexed is
        // read (and its chain checked) to find the calls still open.
        let indexed = state.map_or(0, |state| state.last.n);
        let mut reader = RunReader::new(&dir, &run, segments, key, None);
        let mut batch = Vec::with_capacity(IMPORT_BATCH);
        let mut calls = HashMap::new();
        let mut open = std::collections::BTreeSet::new();
        let stop = loop {
            match reader.next_frame() {
                Ok(Some(frame)) => {
                    if frame.forwarded {
                        open.insert(frame.position.n);
                    }
                    for call in ends(&frame.entry) {
                        open.remove(&call);
                    }
                    if frame.position.n <= indexed {
                        continue;
                    }
                    batch.push(Journaled {
                        position: frame.position,
                        entry: frame.entry,
                        forwarded: frame.forwarded,
                    });
                    if batch.len() == IMPORT_BATCH {
                        imported.records += index.index(&run, &batch, &mut calls)? as u64;
                        batch.clear();
                    }
                }
                Ok(None) => break None,
                Err(stop) => break Some(stop),
            }
        };
        imported.records += index.index(&run, &batch, &mut calls)? as u64;
        let open: Vec<u64> = open.into_iter().collect();
        imported.interrupted += index.close(&run, &open)?;
        imported.runs += 1;
        for torn in reader.torn.drain(..).chain(stop) {
            tracing::warn!(run, "the audit journal stops short: {torn:?}");
            imported.stops.push((run.clone(), torn));
        }
    }
    Ok(imported)
}

/// Waits, for at most `patience`, until the index holds every record the
/// journals of live runs held when it was called (a reader that starts now
/// then sees every call sent before it started, as with a log written on
/// the call path); returns whether it does. Ended runs are for
/// [`import_ended`].
///
/// # Errors
///
/// [`StoreError`] when the index cannot be read.
pub fn wait_indexed(log: &dyn AuditLog, patience: std::time::Duration) -> Result<bool, StoreError> {
    let (Some(index), Some(key)) = (log.journal_index(), log.audit_key()) else {
        return Ok(true);
    };
    let dir = index.journal_dir().to_path_buf();
    let Ok(runs) = journals(&dir) else {
        return Ok(true);
    };
    let deadline = std::time::Instant::now() + patience;
    for (run, segments) in runs {
        if lock_ended(&dir, &run).ok().flatten().is_some() {
            continue;
        }
        let from = index.run_state(&run)?.map(|state| state.last);
        let mut reader = RunReader::new(&dir, &run, segments, key, from);
        let mut last = from.map_or(0, |from| from.n);
        while let Ok(Some(frame)) = reader.next_frame() {
            last = frame.position.n;
        }
        loop {
            let indexed = index.run_state(&run)?.map_or(0, |state| state.last.n);
            if indexed >= last {
                break;
            }
            if std::time::Instant::now() >= deadline {
                return Ok(false);
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    Ok(true)
}

// === verify ===

/// What [`verify`] found in the journals.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct JournalCheck {
    /// Journals read (runs).
    pub runs: u64,
    /// Runs still writing (their locks held).
    pub live: u64,
    /// Frames read and found in the index as they are.
    pub records: u64,
    /// Segments that end in part of a frame: a crash in the middle of a
    /// write, whose record never counted (its calls were not sent). Not a
    /// problem.
    pub torn: Vec<(String, Stop)>,
    /// What is wrong.
    pub problems: Vec<Problem>,
}

/// Checks every journal in the index's directory: each chain, with the
/// key; that each record is in the index as the journal holds it; and that
/// each run the index knows still has its journal, to the last record
/// indexed. Run after [`import_ended`], so an ended run's tail is in.
///
/// # Errors
///
/// [`StoreError`] when the index cannot be read.
pub fn verify(log: &dyn AuditLog) -> Result<JournalCheck, StoreError> {
    let mut check = JournalCheck::default();
    let (Some(index), Some(key)) = (log.journal_index(), log.audit_key()) else {
        return Ok(check);
    };
    let dir = index.journal_dir().to_path_buf();
    let runs = journals(&dir).map_err(|err| {
        StoreError::Address(format!("the audit journal `{}`: {err}", dir.display()))
    })?;
    let known: HashMap<String, RunState> = index.runs()?.into_iter().collect();
    for (run, state) in &known {
        if !runs.contains_key(run) {
            check.problems.push(Problem::JournalMissing {
                run: run.clone(),
                indexed: state.last.n,
            });
        }
    }
    for (run, segments) in runs {
        check.runs += 1;
        let live = lock_ended(&dir, &run).ok().flatten().is_none();
        check.live += u64::from(live);
        let state = known.get(&run).copied();
        verify_run(
            log, index, key, &dir, &run, segments, state, live, &mut check,
        )?;
    }
    Ok(check)
}

/// [`verify`] of one run.
#[expect(
    clippy::too_many_arguments,
    reason = "one run's check, its parts handed in by the one caller"
)]
fn verify_run(
    log: &dyn AuditLog,
    index: &dyn JournalIndex,
    key: &AuditKey,
    dir: &Path,
    run: &str,
    segments: Vec<u32>,
    state: Option<RunState>,
    live: bool,
    check: &mut JournalCheck,
) -> Result<(), StoreError> {
    let indexed = state.map_or(0, |state| state.last.n);
    let mut reader = RunReader::new(dir, run, segments, key, None);
    let mut seqs: HashMap<u64, u64> = HashMap::new();
    let mut last = 0;
    let stop = loop {
        let frame = match reader.next_frame() {
            Ok(Some(frame)) => frame,
            Ok(None) => break None,
            Err(stop) => break Some(stop),
        };
        let n = frame.position.n;
        last = n;
        let Some(seq) = index.seq_of(run, n)? else {
            if !(live && n > indexed) {
                check.problems.push(Problem::JournalNotIndexed {
                    run: run.to_owned(),
                    n,
                });
            }
            continue;
        };
        seqs.insert(n, seq);
        let expected = in_log(&frame.entry, |call| {
            seqs.get(&call)
                .copied()
                .or_else(|| index.seq_of(run, call).ok().flatten())
        });
        let stored = log.entries(seq - 1, 1)?;
        let same = match (expected, stored.first()) {
            (Some(expected), Some(stored)) => {
                stored.seq == seq
                    && stored.at == expected.at
                    && stored.stored_kind == kind_name(expected.kind)
                    && stored.call == expected.call
                    && stored.stored_body == expected.body
            }
            _ => false,
        };
        if same {
            check.records += 1;
        } else {
            check.problems.push(Problem::JournalIndexDiffers {
                run: run.to_owned(),
                n,
                seq,
            });
        }
    };
    check
        .torn
        .extend(reader.torn.drain(..).map(|torn| (run.to_owned(), torn)));
    if let Some(stop) = stop {
        match stop {
            Stop::Broken {
                segment,
                offset,
                n,
                why,
            } => {
                check.problems.push(Problem::JournalBroken {
                    run: run.to_owned(),
                    segment,
                    offset,
                    n,
                    why,
                });
            }
            torn @ Stop::Torn { .. } => check.torn.push((run.to_owned(), torn)),
        }
    } else if last < indexed {
        check.problems.push(Problem::JournalCut {
            run: run.to_owned(),
            indexed,
            found: last,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(body: &str) -> NewEntry {
        NewEntry {
            at: 7,
            kind: EntryKind::Call,
            call: None,
            body: body.to_owned(),
        }
    }

    #[test]
    fn names_are_parsed_strictly() {
        assert_eq!(parse_name("123-456.000002.hgj"), Some(("123-456", 2)));
        assert_eq!(parse_name("a.b.000002.hgj"), None);
        assert_eq!(parse_name("../x.000002.hgj"), None);
        assert_eq!(parse_name("x.2.hgj"), None);
        assert_eq!(parse_name("x.000002.hgj.tmp"), None);
    }

    #[test]
    fn frames_read_back_as_written_across_segments() {
        let dir = tempfile::tempdir().unwrap();
        let key = AuditKey::from_secret([5; 32]);
        let settings = JournalSettings {
            durability: Durability::Fsync,
            segment_bytes: 200,
        };
        let mut writer = JournalWriter::create(dir.path(), "r-1", &key, settings).unwrap();
        let mut positions = Vec::new();
        for turn in 0..5 {
            let batch: Vec<NewEntry> = (0..3)
                .map(|i| entry(&format!("{{\"t\":{turn},\"i\":{i}}}")))
                .collect();
            positions.extend(writer.append(&batch, &[true]).unwrap());
        }
        let runs = journals(dir.path()).unwrap();
        assert!(runs["r-1"].len() > 1, "rotated: {runs:?}");
        let mut reader = RunReader::new(dir.path(), "r-1", runs["r-1"].clone(), &key, None);
        let mut read = Vec::new();
        while let Some(frame) = reader.next_frame().unwrap() {
            read.push(frame);
        }
        assert_eq!(read.len(), 15);
        assert_eq!(
            read.iter().map(|frame| frame.position).collect::<Vec<_>>(),
            positions
        );
        assert_eq!(read[4].entry.body, "{\"t\":1,\"i\":1}");
        // From a position, on from there.
        let mut reader = RunReader::new(
            dir.path(),
            "r-1",
            runs["r-1"].clone(),
            &key,
            Some(positions[6]),
        );
        assert_eq!(reader.next_frame().unwrap().unwrap().position.n, 8);
        // Under another key, the chain does not hold.
        let other = AuditKey::from_secret([6; 32]);
        let mut reader = RunReader::new(dir.path(), "r-1", runs["r-1"].clone(), &other, None);
        assert!(matches!(
            reader.next_frame(),
            Err(Stop::Broken { n: 1, .. })
        ));
    }

    #[test]
    fn a_live_run_is_locked_and_an_ended_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let key = AuditKey::from_secret([5; 32]);
        let writer =
            JournalWriter::create(dir.path(), "r-2", &key, JournalSettings::default()).unwrap();
        assert!(lock_ended(dir.path(), "r-2").unwrap().is_none());
        // A second writer of the same run is refused.
        assert!(
            JournalWriter::create(dir.path(), "r-2", &key, JournalSettings::default()).is_err()
        );
        drop(writer);
        let lock = lock_ended(dir.path(), "r-2").unwrap();
        assert!(lock.is_some());
        // Held by one importer, the run looks busy to another.
        assert!(lock_ended(dir.path(), "r-2").unwrap().is_none());
    }

    #[test]
    fn a_giant_length_is_damage_and_never_allocated() {
        let dir = tempfile::tempdir().unwrap();
        let key = AuditKey::from_secret([5; 32]);
        let mut writer =
            JournalWriter::create(dir.path(), "r-3", &key, JournalSettings::default()).unwrap();
        writer.append(&[entry("{}")], &[]).unwrap();
        drop(writer);
        let path = dir.path().join(segment_name("r-3", 0));
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        file.write_all(&u32::MAX.to_le_bytes()).unwrap();
        file.write_all(&[0u8; 64]).unwrap();
        let mut reader = RunReader::new(dir.path(), "r-3", vec![0], &key, None);
        assert!(reader.next_frame().unwrap().is_some());
        let stop = reader.next_frame().unwrap_err();
        assert!(
            matches!(&stop, Stop::Broken { n: 2, why, .. } if why.contains("length")),
            "{stop:?}"
        );
        // A length the file does not hold (below the bound): a torn tail.
        let path = dir.path().join(segment_name("r-3", 0));
        let bytes = std::fs::read(&path).unwrap();
        let whole = bytes.len() - 68;
        let mut cut = bytes[..whole].to_vec();
        cut.extend_from_slice(&(MAX_FRAME_BYTES - 1).to_le_bytes());
        cut.extend_from_slice(&[1u8; 10]);
        std::fs::write(&path, &cut).unwrap();
        let mut reader = RunReader::new(dir.path(), "r-3", vec![0], &key, None);
        assert!(reader.next_frame().unwrap().is_some());
        assert_eq!(reader.next_frame(), Ok(None));
        assert_eq!(
            reader.torn,
            vec![Stop::Torn {
                segment: 0,
                offset: whole as u64
            }]
        );
    }

    #[test]
    fn outcomes_are_put_in_the_logs_numbers() {
        let outcomes = NewEntry::of(
            3,
            None,
            &Record::Outcomes(OutcomesRecord {
                outcomes: vec![
                    crate::record::OutcomeItem {
                        attempt: 0,
                        call: 1,
                        duration_ms: 2,
                        outcome: OutcomeCode::Ok,
                    },
                    crate::record::OutcomeItem {
                        attempt: 1,
                        call: 2,
                        duration_ms: 3,
                        outcome: OutcomeCode::Failed,
                    },
                ],
            }),
        );
        assert_eq!(ends(&outcomes), vec![1, 2]);
        let logged = in_log(&outcomes, |n| Some(n + 40)).unwrap();
        assert_eq!(ends(&logged), vec![41, 42]);
        assert!(in_log(&outcomes, |n| (n == 1).then_some(5)).is_none());
    }

    proptest::proptest! {
        /// Whatever someone who can write the state directory does to a
        /// segment's bytes (flip, cut, insert), reading it never panics,
        /// never allocates more than the file holds, and gives back only
        /// frames the writer wrote, in order, until it stops.
        #[test]
        fn a_damaged_segment_gives_back_only_what_was_written(
            flips in proptest::collection::vec((0usize..4096, 1u8..=255), 0..4),
            cut in proptest::option::of(0usize..4096),
            insert in proptest::option::of((0usize..4096, proptest::collection::vec(proptest::prelude::any::<u8>(), 1..16))),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let key = AuditKey::from_secret([5; 32]);
            let mut writer =
                JournalWriter::create(dir.path(), "r-p", &key, JournalSettings::default()).unwrap();
            let written: Vec<NewEntry> = (0..6).map(|i| entry(&format!("{{\"i\":{i}}}"))).collect();
            for pair in written.chunks(2) {
                writer.append(pair, &[true, false]).unwrap();
            }
            drop(writer);
            let path = dir.path().join(segment_name("r-p", 0));
            let mut bytes = std::fs::read(&path).unwrap();
            for (at, mask) in flips {
                let at = at % bytes.len();
                bytes[at] ^= mask;
            }
            if let Some((at, extra)) = insert {
                let at = at % bytes.len();
                bytes.splice(at..at, extra);
            }
            if let Some(cut) = cut {
                bytes.truncate(cut % (bytes.len() + 1));
            }
            std::fs::write(&path, &bytes).unwrap();
            let mut reader = RunReader::new(dir.path(), "r-p", vec![0], &key, None);
            let mut read = Vec::new();
            while let Ok(Some(frame)) = reader.next_frame() {
                read.push(frame);
                proptest::prop_assert!(read.len() <= written.len());
            }
            for (idx, frame) in read.iter().enumerate() {
                proptest::prop_assert_eq!(&frame.entry, &written[idx]);
                proptest::prop_assert_eq!(frame.forwarded, idx % 2 == 0);
            }
        }
    }
}
