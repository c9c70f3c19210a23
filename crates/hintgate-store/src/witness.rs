//! Forward-secure checkpoints of the audit log, appended to a witness: a
//! file the user keeps elsewhere (another volume, a mount of another
//! machine, a file with the append-only attribute).
//!
//! The idea is journald's Forward Secure Sealing, made small. When a witness
//! is set up ([`setup`]), a random initial key `k0` is drawn and shown once
//! to the user, who keeps it offline: it is the verification key, and it is
//! written nowhere. The gateway keeps only the current epoch's key in a
//! state file beside the head (mode 0600), starting with epoch 1's,
//! `k1 = HMAC(k0, "next")`. Every [`EVERY_RECORDS`] records or [`EVERY`] (and at
//! the first commit after the gateway starts), after a commit, it:
//!
//! 1. derives the next key, `k(E+1) = HMAC(k(E), "next")`, and replaces the
//!    state file with it (written and synced under another name, renamed
//!    into place; then the old file's bytes, still open, are overwritten
//!    with zeros and synced, so the old key is erased from the disk as far
//!    as the file system lets a program erase anything);
//! 2. appends to the witness the line
//!    `hintgate-witness v1 epoch=E seq=S at=T link=LINK mac=MAC`, where
//!    `MAC` is HMAC-SHA-256 under `k(E)` of everything before ` mac=`, and
//!    syncs it; `k(E)` is then dropped.
//!
//! So a checkpoint of epoch `E` can only be made with `k(E)`, which no
//! longer exists anywhere but in what the user derives from `k0`: whoever
//! takes the machine later, the audit key and the state file with it, holds
//! `k(E+1)` or a later key and cannot make a checkpoint of an earlier epoch.
//! `hintgate log verify --witness FILE --verification-key K0` checks every
//! checkpoint's MAC with the key of its epoch, that epochs only go up, and
//! that the record each names is still in the log with the link it names:
//! the records up to the last checkpoint cannot be rewritten unseen, not
//! even by the audit key's holder, as long as the witness keeps its lines
//! (a place the gateway can append to but not rewrite).
//!
//! A checkpoint is rare (one per thousand records or per minute), so its
//! two syncs are paid rarely on the commit path. Deriving the next key
//! before writing the line means a crash in between loses a checkpoint,
//! never repeats an epoch. A witness that cannot be written is logged
//! (once until it can be again); the commit stands.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hmac::Mac;

use crate::key::mac_with;

/// A checkpoint at least every this many records.
pub const EVERY_RECORDS: u64 = 1000;

/// A checkpoint at the first commit at least this long after the last one.
pub const EVERY: Duration = Duration::from_secs(60);

/// What a gateway asks of its witness: which file, when the configuration
/// names one, and how often a checkpoint is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WitnessSettings {
    /// The witness the configuration names (`[audit] witness`): a gateway
    /// opens its log only when `setup` set up this very file for it.
    /// `None`: whatever witness was set up, if any.
    pub path: Option<PathBuf>,
    /// A checkpoint at least every this many records (at least 1).
    pub every_records: u64,
    /// A checkpoint at the first commit at least this long after the last.
    pub every: Duration,
}

impl Default for WitnessSettings {
    fn default() -> Self {
        Self {
            path: None,
            every_records: EVERY_RECORDS,
            every: EVERY,
        }
    }
}

/// What every witness line starts with.
const MAGIC: &str = "hintgate-witness v1";

/// The verification key of a witness: the key of its epoch 0, from which
/// the key of every epoch is derived. Shown once when the witness is set
/// up; anyone who holds it can check, and make, every checkpoint, so it is
/// kept offline. `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct WitnessKey([u8; 32]);

/// Why a witness could not be set up or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WitnessError {
    /// A file could not be read or written.
    #[error("`{path}`: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// A witness is set up for this log already.
    #[error(
        "a witness is set up for this log already (`{0}`); remove that file to start another, whose verification key will not check the old checkpoints"
    )]
    AlreadySetUp(PathBuf),
    /// The configuration names a witness, but none is set up for the log.
    #[error(
        "the configuration names the witness `{named}`, but none is set up for this log: run `hintgate log setup-witness {named}` (with the same store), keep the verification key it prints offline, then start the gateway again"
    )]
    NotSetUp {
        /// The witness the configuration names.
        named: PathBuf,
    },
    /// The configuration names another witness than the one set up.
    #[error(
        "the configuration names the witness `{named}`, but the one set up for this log is `{set_up}`: name that one, or remove `{state}` and set up a new witness (whose verification key will not check the old checkpoints)"
    )]
    OtherWitness {
        /// The witness the configuration names.
        named: PathBuf,
        /// The witness the state file names.
        set_up: PathBuf,
        /// The state file.
        state: PathBuf,
    },
    /// The witness file holds lines already.
    #[error("the witness `{0}` is not empty; give a new file")]
    NotEmpty(PathBuf),
    /// The state file is not one hintgate wrote, or others may read it.
    #[error("the witness state `{path}`: {why}")]
    State {
        /// The state file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// The text is not a verification key.
    #[error("a verification key is 64 hexadecimal digits")]
    NotAKey,
    /// The operating system gave no randomness for the key.
    #[error("no randomness for the witness key: {0}")]
    Randomness(String),
}

/// One line of a witness, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Checkpoint {
    pub(crate) epoch: u64,
    pub(crate) seq: u64,
    pub(crate) link: String,
    /// The line without ` mac=...`: what the MAC covers.
    sealed: String,
    mac: Vec<u8>,
}

/// The gateway's side: the current epoch and its key, and where the
/// checkpoints go.
pub(crate) struct WitnessWriter {
    state_path: PathBuf,
    inner: Mutex<Writer>,
}

struct Writer {
    witness: PathBuf,
    /// How often a checkpoint is due.
    every_records: u64,
    every: Duration,
    epoch: u64,
    key: [u8; 32],
    /// When, and at which record, the last checkpoint was made by this
    /// process; `None` until the first.
    last: Option<(Instant, u64)>,
    /// A failure was logged and nothing has worked since.
    failing: bool,
}

/// The state file, as written.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct State {
    version: u32,
    witness: PathBuf,
    epoch: u64,
    key: String,
}

// === impl WitnessKey ===

impl WitnessKey {
    /// The key in hexadecimal, to show the user once.
    #[must_use]
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The key of `epoch`: the next key taken `epoch` times.
    fn at(&self, epoch: u64) -> [u8; 32] {
        let mut key = self.0;
        for _ in 0..epoch {
            key = next(&key);
        }
        key
    }
}

impl std::str::FromStr for WitnessKey {
    type Err = WitnessError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut key = [0u8; 32];
        hex::decode_to_slice(text.trim(), &mut key).map_err(|_| WitnessError::NotAKey)?;
        Ok(Self(key))
    }
}

impl std::fmt::Debug for WitnessKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WitnessKey(..)")
    }
}

/// The key after `key`: HMAC-SHA-256(key, "next").
fn next(key: &[u8; 32]) -> [u8; 32] {
    let mut mac = mac_with(key);
    mac.update(b"next");
    mac.finalize().into_bytes().into()
}

/// Where the gateway keeps the witness state of the log whose head is
/// `head`: beside it, `state.db.audit-head` giving `state.db.audit-witness`
/// and `audit-LOGID.head` giving `audit-LOGID.witness`.
#[must_use]
pub fn state_path(head: &Path) -> PathBuf {
    let name = head
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match name
        .strip_suffix(".audit-head")
        .map(|stem| format!("{stem}.audit-witness"))
        .or_else(|| {
            name.strip_suffix(".head")
                .map(|stem| format!("{stem}.witness"))
        }) {
        Some(name) => name,
        None => format!("{name}.witness"),
    };
    head.with_file_name(name)
}

/// Sets up a witness: draws the verification key `k0`, writes the gateway's
/// state (epoch 1 and its key, derived from `k0`, and the witness file) at
/// `state`, readable only by its user, and makes the witness file (empty)
/// at `witness`. Returns the verification key, which is written nowhere: the
/// caller shows it to the user once. Nothing on the machine can derive it,
/// nor make a checkpoint of epoch 0 (there is none) or of any epoch before
/// the state's.
///
/// # Errors
///
/// [`WitnessError`] when a witness is set up already (the state file
/// exists), the witness file holds lines, or a file cannot be written.
pub fn setup(state: &Path, witness: &Path) -> Result<WitnessKey, WitnessError> {
    if state.exists() {
        return Err(WitnessError::AlreadySetUp(state.to_owned()));
    }
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| WitnessError::Io { path, source }
    };
    let file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(witness)
        .map_err(io(witness))?;
    if file.metadata().map_err(io(witness))?.len() > 0 {
        return Err(WitnessError::NotEmpty(witness.to_owned()));
    }
    file.sync_all().map_err(io(witness))?;
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|err| WitnessError::Randomness(err.to_string()))?;
    write_state(state, witness, 1, &next(&key), None).map_err(io(state))?;
    Ok(WitnessKey(key))
}

/// Replaces the state file at `path` with epoch `epoch` and its key: written
/// and synced under another name, renamed into place, the directory synced;
/// then `old` (the file it replaced, still open) is overwritten with zeros
/// and synced.
fn write_state(
    path: &Path,
    witness: &Path,
    epoch: u64,
    key: &[u8; 32],
    old: Option<std::fs::File>,
) -> std::io::Result<()> {
    let text = serde_json::to_string(&State {
        version: 1,
        witness: witness.to_owned(),
        epoch,
        key: hex::encode(key),
    })
    .map_err(std::io::Error::other)?;
    let temporary = path.with_extension("new");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options.open(&temporary)?;
    file.write_all(text.as_bytes())?;
    file.write_all(b"\n")?;
    file.sync_all()?;
    std::fs::rename(&temporary, path)?;
    #[cfg(unix)]
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        std::fs::File::open(dir)?.sync_all()?;
    }
    if let Some(mut old) = old {
        let length = old.metadata()?.len();
        let zeros = vec![0u8; usize::try_from(length).unwrap_or(0)];
        std::io::Seek::seek(&mut old, std::io::SeekFrom::Start(0))?;
        old.write_all(&zeros)?;
        old.sync_all()?;
    }
    Ok(())
}

// === impl WitnessWriter ===

impl WitnessWriter {
    /// The writer of the witness set up at `state_path`, making checkpoints
    /// as often as `settings` say; `None` when none is set up and
    /// `settings` names none.
    ///
    /// # Errors
    ///
    /// [`WitnessError`] when the state file cannot be read, others may read
    /// it, or it is not one hintgate wrote; when `settings` name a witness
    /// and none is set up, or another one is.
    pub(crate) fn open(
        state_path: &Path,
        settings: &WitnessSettings,
    ) -> Result<Option<Self>, WitnessError> {
        let opened = Self::open_state(state_path, settings)?;
        let Some(named) = &settings.path else {
            return Ok(opened);
        };
        let Some(opened) = opened else {
            return Err(WitnessError::NotSetUp {
                named: named.clone(),
            });
        };
        let set_up = opened.inner.lock().map_or_else(
            |poisoned| poisoned.into_inner().witness.clone(),
            |writer| writer.witness.clone(),
        );
        // Both are absolute (`setup` is given an absolute path; the
        // configuration's is checked to be), so they are compared as they
        // are, and also as the files they name.
        let same = set_up == *named
            || std::fs::canonicalize(&set_up)
                .ok()
                .zip(std::fs::canonicalize(named).ok())
                .is_some_and(|(one, other)| one == other);
        if !same {
            return Err(WitnessError::OtherWitness {
                named: named.clone(),
                set_up,
                state: state_path.to_owned(),
            });
        }
        Ok(Some(opened))
    }

    fn open_state(
        state_path: &Path,
        settings: &WitnessSettings,
    ) -> Result<Option<Self>, WitnessError> {
        let bad = |why: &str| WitnessError::State {
            path: state_path.to_owned(),
            why: why.to_owned(),
        };
        let text = match std::fs::read_to_string(state_path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(WitnessError::Io {
                    path: state_path.to_owned(),
                    source,
                });
            }
        };
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(state_path)
                .map_err(|source| WitnessError::Io {
                    path: state_path.to_owned(),
                    source,
                })?
                .permissions()
                .mode();
            if mode & 0o077 != 0 {
                return Err(bad(&format!(
                    "others may read or write it (mode {:04o}): it holds the current witness key; set up a new witness",
                    mode & 0o7777
                )));
            }
        }
        let state: State =
            serde_json::from_str(&text).map_err(|_| bad("it is not a state hintgate wrote"))?;
        let mut key = [0u8; 32];
        if state.version != 1 || hex::decode_to_slice(&state.key, &mut key).is_err() {
            return Err(bad("it is not a state hintgate wrote"));
        }
        tracing::info!(
            "audit checkpoints go to the witness `{}` (epoch {})",
            state.witness.display(),
            state.epoch
        );
        Ok(Some(Self {
            state_path: state_path.to_owned(),
            inner: Mutex::new(Writer {
                witness: state.witness,
                every_records: settings.every_records.max(1),
                every: settings.every,
                epoch: state.epoch,
                key,
                last: None,
                failing: false,
            }),
        }))
    }

    /// After a commit whose last record is `seq` with `link`: makes a
    /// checkpoint when one is due (the first commit of this process, or
    /// as many records or as long since the last as its settings say:
    /// [`EVERY_RECORDS`] and [`EVERY`] by default).
    pub(crate) fn committed(&self, seq: u64, link: &str) {
        let mut writer = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        let (every_records, every) = (writer.every_records, writer.every);
        let due = writer.last.is_none_or(|(at, last_seq)| {
            seq >= last_seq.saturating_add(every_records)
                || (seq > last_seq && now.saturating_duration_since(at) >= every)
        });
        if !due {
            return;
        }
        // Tried once per due point: a failure waits for the next.
        writer.last = Some((now, seq));
        match self.checkpoint(&mut writer, seq, link) {
            Ok(()) => {
                if std::mem::take(&mut writer.failing) {
                    tracing::info!(
                        "the audit witness `{}` is written again",
                        writer.witness.display()
                    );
                }
            }
            Err(err) => {
                if !std::mem::replace(&mut writer.failing, true) {
                    tracing::error!(
                        "an audit checkpoint could not be written to the witness `{}`: {err}",
                        writer.witness.display()
                    );
                }
            }
        }
    }

    /// Evolves the key (the state file first), then appends the checkpoint
    /// made with the key before.
    fn checkpoint(&self, writer: &mut Writer, seq: u64, link: &str) -> std::io::Result<()> {
        let epoch = writer.epoch;
        let key = writer.key;
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_secs());
        let line = line(&key, epoch, seq, at, link);
        let following = next(&key);
        let old = std::fs::File::options()
            .write(true)
            .open(&self.state_path)
            .ok();
        write_state(
            &self.state_path,
            &writer.witness,
            epoch + 1,
            &following,
            old,
        )?;
        writer.epoch = epoch + 1;
        writer.key = following;
        let mut witness = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&writer.witness)?;
        witness.write_all(line.as_bytes())?;
        witness.sync_data()
    }
}

impl std::fmt::Debug for WitnessWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WitnessWriter")
            .field("state", &self.state_path)
            .finish_non_exhaustive()
    }
}

/// A checkpoint line, sealed with the epoch's key.
fn line(key: &[u8; 32], epoch: u64, seq: u64, at: u64, link: &str) -> String {
    let sealed = format!("{MAGIC} epoch={epoch} seq={seq} at={at} link={link}");
    let mut mac = mac_with(key);
    mac.update(sealed.as_bytes());
    format!("{sealed} mac={:x}\n", mac.finalize().into_bytes())
}

/// The lines of the witness at `path`, each read as a checkpoint, or
/// `None` for a line that is not one (numbered from 1).
///
/// # Errors
///
/// The operating system's error when the file cannot be read.
pub(crate) fn read(path: &Path) -> std::io::Result<Vec<(u64, Option<Checkpoint>)>> {
    let text = std::fs::read(path)?;
    let text = String::from_utf8_lossy(&text);
    Ok(text
        .split_terminator('\n')
        .enumerate()
        .map(|(idx, line)| (idx as u64 + 1, parse(line)))
        .collect())
}

fn parse(line: &str) -> Option<Checkpoint> {
    let (sealed, mac) = line.rsplit_once(" mac=")?;
    let rest = sealed.strip_prefix(MAGIC)?.strip_prefix(' ')?;
    let mut fields = rest.split(' ');
    let epoch = fields.next()?.strip_prefix("epoch=")?.parse().ok()?;
    let seq = fields.next()?.strip_prefix("seq=")?.parse().ok()?;
    let _at: u64 = fields.next()?.strip_prefix("at=")?.parse().ok()?;
    let link = fields.next()?.strip_prefix("link=")?.to_owned();
    if fields.next().is_some() || link.is_empty() {
        return None;
    }
    Some(Checkpoint {
        epoch,
        seq,
        link,
        sealed: sealed.to_owned(),
        mac: hex::decode(mac).ok()?,
    })
}

/// Checks checkpoints' MACs with the keys derived from `key`, epoch by
/// epoch (they only go up, so each key is derived once).
pub(crate) struct Checker<'a> {
    key: &'a WitnessKey,
    epoch: u64,
    current: [u8; 32],
}

impl<'a> Checker<'a> {
    pub(crate) fn new(key: &'a WitnessKey) -> Self {
        Self {
            key,
            epoch: 0,
            current: key.0,
        }
    }

    /// Whether `checkpoint` was sealed with the key of its epoch.
    pub(crate) fn sealed(&mut self, checkpoint: &Checkpoint) -> bool {
        let key = if checkpoint.epoch >= self.epoch {
            for _ in self.epoch..checkpoint.epoch {
                self.current = next(&self.current);
            }
            self.epoch = checkpoint.epoch;
            self.current
        } else {
            self.key.at(checkpoint.epoch)
        };
        let mut mac = mac_with(&key);
        mac.update(checkpoint.sealed.as_bytes());
        mac.verify_slice(&checkpoint.mac).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_sits_beside_the_head() {
        assert_eq!(
            state_path(Path::new("/s/state.db.audit-head")),
            Path::new("/s/state.db.audit-witness")
        );
        assert_eq!(
            state_path(Path::new("/s/audit-0123.head")),
            Path::new("/s/audit-0123.witness")
        );
        assert_eq!(
            state_path(Path::new("/s/other")),
            Path::new("/s/other.witness")
        );
    }

    /// Keys computed elsewhere (Python's `hmac`): the derivation is part of
    /// what a verification key means.
    #[test]
    fn each_epoch_key_is_the_hmac_of_the_one_before() {
        let key = WitnessKey([5u8; 32]);
        assert_eq!(
            hex::encode(key.at(2)),
            "dbdf4afdc44f9de8c9277b51e95aa15c9e36367d267155a779a291a9963404f6"
        );
        let line = line(
            &key.at(1),
            1,
            42,
            1_795_989_518,
            "hmac-sha256:0011223344556677:ab",
        );
        assert_eq!(
            line,
            "hintgate-witness v1 epoch=1 seq=42 at=1795989518 link=hmac-sha256:0011223344556677:ab mac=18ad6b34d63ba8e7733d6d90d4e8d8df066459c776181e57106e25aeff0bc405\n"
        );
    }

    #[test]
    fn a_checkpoint_is_made_every_so_often_and_the_key_evolves_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state.db.audit-witness");
        let witness = dir.path().join("witness.log");
        let k0 = setup(&state, &witness).unwrap();
        assert!(matches!(
            setup(&state, &witness),
            Err(WitnessError::AlreadySetUp(_))
        ));
        let writer = WitnessWriter::open(&state, &WitnessSettings::default())
            .unwrap()
            .unwrap();
        // The first commit of a process makes one; the next ones wait.
        writer.committed(3, "l3");
        writer.committed(4, "l4");
        writer.committed(3 + EVERY_RECORDS - 1, "l-before");
        writer.committed(3 + EVERY_RECORDS, "l-due");
        let lines = read(&witness).unwrap();
        let checkpoints: Vec<(u64, u64, String)> = lines
            .iter()
            .map(|(_, checkpoint)| {
                let checkpoint = checkpoint.clone().unwrap();
                (checkpoint.epoch, checkpoint.seq, checkpoint.link)
            })
            .collect();
        assert_eq!(
            checkpoints,
            [
                (1, 3, "l3".to_owned()),
                (2, 3 + EVERY_RECORDS, "l-due".to_owned())
            ]
        );
        let mut checker = Checker::new(&k0);
        for (_, checkpoint) in &lines {
            assert!(checker.sealed(checkpoint.as_ref().unwrap()));
        }
        // The state holds only the current key: epoch 3's, not k0 (the
        // verification key, never written) nor those of epochs 1 and 2.
        let text = std::fs::read_to_string(&state).unwrap();
        assert!(text.contains(&hex::encode(k0.at(3))), "{text}");
        for epoch in 0..3 {
            assert!(!text.contains(&hex::encode(k0.at(epoch))), "{epoch}");
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&state).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // Whoever holds that key cannot make a checkpoint of an earlier
        // epoch: it does not check with the key derived from k0.
        let stolen = WitnessWriter::open(&state, &WitnessSettings::default())
            .unwrap()
            .unwrap();
        let key = stolen.inner.lock().unwrap().key;
        let forged = parse(line(&key, 2, 9, 0, "forged").trim_end()).unwrap();
        assert!(!Checker::new(&k0).sealed(&forged));
    }

    #[test]
    fn the_configured_witness_must_be_the_one_set_up_and_sets_the_cadence() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state.db.audit-witness");
        let witness = dir.path().join("witness.log");
        let named = |path: &Path| WitnessSettings {
            path: Some(path.to_owned()),
            every_records: 10,
            every: Duration::from_secs(3600),
        };
        // Named, but nothing set up: refused, saying how to set it up.
        let err = WitnessWriter::open(&state, &named(&witness)).unwrap_err();
        assert!(matches!(err, WitnessError::NotSetUp { .. }), "{err}");
        assert!(
            err.to_string().contains("hintgate log setup-witness"),
            "{err}"
        );
        assert!(
            WitnessWriter::open(&state, &WitnessSettings::default())
                .unwrap()
                .is_none()
        );
        setup(&state, &witness).unwrap();
        // Another file than the one set up: refused, naming both.
        let other = dir.path().join("other.log");
        let err = WitnessWriter::open(&state, &named(&other)).unwrap_err();
        assert!(matches!(err, WitnessError::OtherWitness { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains(&other.display().to_string())
                && text.contains(&witness.display().to_string()),
            "{text}"
        );
        // The one set up: checkpoints every 10 records, as configured.
        let writer = WitnessWriter::open(&state, &named(&witness))
            .unwrap()
            .unwrap();
        for seq in 1..=21 {
            writer.committed(seq, &format!("l{seq}"));
        }
        let seqs: Vec<u64> = read(&witness)
            .unwrap()
            .into_iter()
            .map(|(_, checkpoint)| checkpoint.unwrap().seq)
            .collect();
        assert_eq!(seqs, [1, 11, 21]);
    }

    #[test]
    fn a_line_that_is_not_a_checkpoint_reads_as_none() {
        let key = [1u8; 32];
        let good = line(&key, 0, 1, 2, "l");
        assert!(parse(good.trim_end()).is_some());
        for bad in [
            "",
            "hintgate-witness v1 epoch=0 seq=1 at=2 link=l",
            &good.trim_end().replace("epoch=0", "epoch=x"),
            &good.trim_end().replace(" at=2", ""),
            &good.trim_end().replace("mac=", "mac=zz"),
            &good.trim_end().replace("link=l", "link=l extra=1"),
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
