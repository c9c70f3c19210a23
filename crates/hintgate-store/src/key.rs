//! The audit key: one secret that lives outside the store, readable only by
//! its user, from which every keyed digest of the audit log is derived.
//!
//! The key file holds 32 random bytes as 64 hexadecimal digits (a trailing
//! newline is allowed, so `openssl rand -hex 32 > FILE` makes one too). It is
//! created on first use, atomically (written under another name, then linked
//! into place, which fails rather than replace a file that is there), never
//! overwritten, with mode 0600; a key file that anyone but its owner may read
//! or write is refused, naming the file, and so is one that belongs to
//! another user (who could have put it there, and would know the key) or
//! that sits in a directory others may replace it in (writable by everyone
//! without the sticky bit, or owned by another user than the one hintgate
//! runs as and root).
//!
//! Nothing is keyed with the key itself: each use gets a subkey,
//! HMAC-SHA-256(key, "hintgate " + purpose), so a digest made for one
//! purpose can never stand for one made for another. The chain of the
//! audit log and its head use two; [`AuditKey::redaction_key`] gives the one
//! for keyed digests of redacted values, and [`AuditKey::subkey`] any other.

use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// HMAC-SHA-256, the only MAC the audit log uses.
pub(crate) type HmacSha256 = Hmac<Sha256>;

/// The purpose of the subkey that chains the audit records.
const CHAIN_PURPOSE: &str = "audit chain v1";
/// The purpose of the subkey that seals the head file.
const HEAD_PURPOSE: &str = "audit head v1";
/// The purpose of the subkey for keyed digests of redacted values.
const REDACTION_PURPOSE: &str = "audit redaction v1";
/// The purpose of the key's public id.
const ID_PURPOSE: &str = "audit key id v1";

/// The audit key: a 32-byte secret and its public id. Cloning it is cheap
/// (the clones share one copy).
///
/// `Debug` shows the id only.
#[derive(Clone)]
pub struct AuditKey {
    inner: std::sync::Arc<Inner>,
}

struct Inner {
    secret: [u8; 32],
    id: String,
    /// The chain's keyed state, made once: cloning it per record saves
    /// hashing the key's pads each time.
    chain: HmacSha256,
    /// The head's keyed state.
    head: HmacSha256,
}

/// Why the audit key could not be read or made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The key file could not be read, written or made.
    #[error("the audit key `{path}`: {source}")]
    Io {
        /// The key file.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// Someone other than the file's owner may read or write it.
    #[error(
        "the audit key `{path}` may be read or written by others (mode {mode:04o}); make it private with `chmod 600 {path}`, and make a new key if others may have read it"
    )]
    NotPrivate {
        /// The key file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The key file belongs to another user than the one hintgate runs as,
    /// who could have put it there and would then know the key.
    #[error(
        "the audit key `{path}` belongs to user id {owner}, not to the user hintgate runs as (user id {user}), who may have put it there and know it; remove it so a new key is made, or give it to this user with `chown` if it is the key you made"
    )]
    NotOwned {
        /// The key file.
        path: PathBuf,
        /// The user id that owns it.
        owner: u32,
        /// The user id hintgate runs as.
        user: u32,
    },
    /// The directory of the key file lets others replace it.
    #[error(
        "the audit key `{path}` is in `{dir}`, where others may replace it ({why}); move the key to a directory only you can write to, or make it private with `chmod o-w,g-w {dir}`"
    )]
    OpenDirectory {
        /// The key file.
        path: PathBuf,
        /// Its directory.
        dir: PathBuf,
        /// What lets others replace it.
        why: String,
    },
    /// The file does not hold a key.
    #[error("the audit key `{path}` is not 64 hexadecimal digits")]
    Malformed {
        /// The key file.
        path: PathBuf,
    },
    /// The operating system gave no randomness for a new key.
    #[error("no randomness for a new audit key: {0}")]
    Randomness(String),
}

// === impl AuditKey ===

impl AuditKey {
    /// The name of the key file in a state directory.
    pub const FILE_NAME: &'static str = "audit.key";

    /// A key from its secret bytes.
    #[must_use]
    pub fn from_secret(secret: [u8; 32]) -> Self {
        let id = hex::encode(derive(&secret, ID_PURPOSE).get(..8).unwrap_or_default());
        Self {
            inner: std::sync::Arc::new(Inner {
                id,
                chain: mac_with(&derive(&secret, CHAIN_PURPOSE)),
                head: mac_with(&derive(&secret, HEAD_PURPOSE)),
                secret,
            }),
        }
    }

    /// A new random key (not written anywhere).
    ///
    /// # Errors
    ///
    /// [`KeyError::Randomness`] when the operating system gives none.
    pub fn generate() -> Result<Self, KeyError> {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(|err| KeyError::Randomness(err.to_string()))?;
        Ok(Self::from_secret(secret))
    }

    /// Reads the key file at `path`.
    ///
    /// # Errors
    ///
    /// [`KeyError`] when it cannot be read, others may read or write it, or
    /// it does not hold a key.
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        let io = |source| KeyError::Io {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let metadata = file.metadata().map_err(io)?;
        check_private(path, &metadata)?;
        check_directory(path, &metadata)?;
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::Read::take(file, 256), &mut text)
            .map_err(io)?;
        let malformed = || KeyError::Malformed {
            path: path.to_owned(),
        };
        let digits = text.trim_end_matches(['\n', '\r']);
        let mut secret = [0u8; 32];
        hex::decode_to_slice(digits, &mut secret).map_err(|_| malformed())?;
        Ok(Self::from_secret(secret))
    }

    /// Reads the key file at `path`, or, when there is none, makes a new key
    /// and writes it there (mode 0600, atomically, never replacing a file
    /// another process put there first: then that one is read). Returns the
    /// key and whether it was made now.
    ///
    /// # Errors
    ///
    /// [`KeyError`] as for [`AuditKey::load`], or when the new file cannot be
    /// written.
    pub fn load_or_create(path: &Path) -> Result<(Self, bool), KeyError> {
        match Self::load(path) {
            Err(KeyError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
            other => return other.map(|key| (key, false)),
        }
        let key = Self::generate()?;
        match write_new(
            path,
            format!("{}\n", hex::encode(key.inner.secret)).as_bytes(),
        ) {
            Ok(()) => Ok((key, true)),
            // Another process made it first: use theirs.
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
                Self::load(path).map(|key| (key, false))
            }
            Err(source) => Err(KeyError::Io {
                path: path.to_owned(),
                source,
            }),
        }
    }

    /// The key's public id (16 hexadecimal digits): a digest of the key that
    /// names it in the records it chained and in messages, and tells nothing
    /// about the secret.
    #[must_use]
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The subkey for `purpose`: HMAC-SHA-256(key, "hintgate " + purpose).
    /// Each use of the key takes a purpose of its own, with a version
    /// (`"audit redaction v1"`), so digests made for one purpose never
    /// stand for another's.
    #[must_use]
    pub fn subkey(&self, purpose: &str) -> [u8; 32] {
        derive(&self.inner.secret, purpose)
    }

    /// The subkey for keyed digests of redacted values in audit records
    /// (`subkey("audit redaction v1")`): the same on every gateway that
    /// shares the key, so a redacted value's digest can be compared across
    /// them, and unknown to anyone without the key, so a digest cannot be
    /// tested against guessed values.
    #[must_use]
    pub fn redaction_key(&self) -> [u8; 32] {
        self.subkey(REDACTION_PURPOSE)
    }

    /// The keyed state that chains records, ready to be cloned per record.
    pub(crate) fn chain_mac(&self) -> HmacSha256 {
        self.inner.chain.clone()
    }

    /// The keyed state that seals the head file.
    pub(crate) fn head_mac(&self) -> HmacSha256 {
        self.inner.head.clone()
    }
}

impl fmt::Debug for AuditKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuditKey")
            .field("id", &self.inner.id)
            .finish_non_exhaustive()
    }
}

/// HMAC-SHA-256(`secret`, "hintgate " + `purpose`).
fn derive(secret: &[u8; 32], purpose: &str) -> [u8; 32] {
    let mut mac = mac_with(secret);
    mac.update(b"hintgate ");
    mac.update(purpose.as_bytes());
    mac.finalize().into_bytes().into()
}

/// A MAC keyed with 32 bytes.
pub(crate) fn mac_with(key: &[u8; 32]) -> HmacSha256 {
    // HMAC pads a key shorter than the hash's block with zeros, so the key
    // padded to a whole block here is the same key; and this constructor,
    // unlike `new_from_slice`, cannot fail.
    let mut block = hmac::digest::generic_array::GenericArray::default();
    for (slot, byte) in block.iter_mut().zip(key) {
        *slot = *byte;
    }
    <HmacSha256 as hmac::digest::KeyInit>::new(&block)
}

/// Refuses a key file that anyone but its owner may read or write.
#[cfg(unix)]
fn check_private(path: &Path, metadata: &std::fs::Metadata) -> Result<(), KeyError> {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = metadata.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(KeyError::NotPrivate {
            path: path.to_owned(),
            mode,
        });
    }
    Ok(())
}

/// On other platforms the file's access is left to the platform's own
/// controls; hintgate does not read them.
#[cfg(not(unix))]
fn check_private(_path: &Path, _metadata: &std::fs::Metadata) -> Result<(), KeyError> {
    Ok(())
}

/// Refuses a key file that another user owns, or that sits in a directory
/// where others may replace it.
#[cfg(unix)]
fn check_owner(
    path: &Path,
    file_owner: u32,
    dir: &Path,
    dir_owner: u32,
    dir_mode: u32,
    user: u32,
) -> Result<(), KeyError> {
    if file_owner != user {
        return Err(KeyError::NotOwned {
            path: path.to_owned(),
            owner: file_owner,
            user,
        });
    }
    const STICKY: u32 = 0o1000;
    let why = if dir_owner != user && dir_owner != 0 {
        Some(format!("it belongs to user id {dir_owner}"))
    } else if dir_mode & 0o002 != 0 && dir_mode & STICKY == 0 {
        Some(format!(
            "everyone may write to it, mode {:04o}",
            dir_mode & 0o7777
        ))
    } else {
        None
    };
    match why {
        Some(why) => Err(KeyError::OpenDirectory {
            path: path.to_owned(),
            dir: dir.to_owned(),
            why,
        }),
        None => Ok(()),
    }
}

/// [`check_owner`] for the file at `path`, opened with `metadata`, against
/// the effective user id.
#[cfg(unix)]
fn check_directory(path: &Path, metadata: &std::fs::Metadata) -> Result<(), KeyError> {
    use std::os::unix::fs::MetadataExt as _;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    };
    let io = |at: &Path| {
        let at = at.to_owned();
        move |source| KeyError::Io { path: at, source }
    };
    // The file read, and the name it was read by: a symbolic link someone
    // else made could be pointed at another key.
    let link = std::fs::symlink_metadata(path).map_err(io(path))?;
    let dir_metadata = std::fs::metadata(&dir).map_err(io(&dir))?;
    let user = rustix::process::geteuid().as_raw();
    let owner = [link.uid(), metadata.uid()]
        .into_iter()
        .find(|owner| *owner != user)
        .unwrap_or(user);
    check_owner(
        path,
        owner,
        &dir,
        dir_metadata.uid(),
        dir_metadata.mode(),
        user,
    )
}

/// On other platforms ownership is left to the platform's own controls.
#[cfg(not(unix))]
fn check_directory(_path: &Path, _metadata: &std::fs::Metadata) -> Result<(), KeyError> {
    Ok(())
}

/// Writes a new private file at `path` with `bytes`, atomically: written and
/// synced under a temporary name in the same directory, then linked to
/// `path`, which fails with `AlreadyExists` instead of replacing a file that
/// is there; the directory is synced so the name survives a power loss.
fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    };
    let mut nonce = [0u8; 8];
    getrandom::fill(&mut nonce).map_err(|err| std::io::Error::other(err.to_string()))?;
    let name = path
        .file_name()
        .map_or_else(|| "key".into(), |name| name.to_string_lossy().into_owned());
    let temporary = dir.join(format!(".{name}.{}.new", hex::encode(nonce)));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let result = (|| {
        let mut file = options.open(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::hard_link(&temporary, path)
    })();
    let _ = std::fs::remove_file(&temporary);
    result?;
    #[cfg(unix)]
    std::fs::File::open(&dir)?.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Subkeys computed elsewhere (Python's `hmac`) from the documented
    /// derivation: a change to it would orphan every keyed log.
    #[test]
    fn subkeys_are_hmac_of_the_documented_purposes() {
        let key = AuditKey::from_secret([7u8; 32]);
        assert_eq!(
            hex::encode(key.redaction_key()),
            "161ac519888a015acbd9d51c8b7216aa5e19088c4b9155b1c8ab5e3e94c39a2a"
        );
        assert_eq!(key.id(), "1f3c6afee770e663");
    }

    #[test]
    fn a_key_is_made_once_private_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(AuditKey::FILE_NAME);
        let (made, created) = AuditKey::load_or_create(&path).unwrap();
        assert!(created);
        let (read, created) = AuditKey::load_or_create(&path).unwrap();
        assert!(!created, "an existing key is never replaced");
        assert_eq!(made.inner.secret, read.inner.secret);
        assert_eq!(made.id(), read.id());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // No temporary file is left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        assert!(!format!("{made:?}").contains(&hex::encode(made.inner.secret)));
    }

    #[cfg(unix)]
    #[test]
    fn a_key_others_may_read_is_refused_naming_the_file() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(AuditKey::FILE_NAME);
        AuditKey::load_or_create(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = AuditKey::load(&path).unwrap_err();
        assert!(
            matches!(err, KeyError::NotPrivate { mode: 0o644, .. }),
            "{err}"
        );
        assert!(
            err.to_string().contains(&path.display().to_string()),
            "{err}"
        );
        // Nor is it replaced by a new one.
        assert!(AuditKey::load_or_create(&path).is_err());
    }

    #[cfg(unix)]
    #[test]
    fn a_key_another_user_owns_or_may_replace_is_refused() {
        let (key, dir) = (Path::new("/srv/k/audit.key"), Path::new("/srv/k"));
        assert!(check_owner(key, 1000, dir, 1000, 0o40700, 1000).is_ok());
        // A directory of root's, or one with the sticky bit, is fine.
        assert!(check_owner(key, 1000, dir, 0, 0o40755, 1000).is_ok());
        assert!(check_owner(key, 1000, dir, 0, 0o41777, 1000).is_ok());
        let planted = check_owner(key, 1001, dir, 1000, 0o40700, 1000).unwrap_err();
        assert!(
            matches!(
                planted,
                KeyError::NotOwned {
                    owner: 1001,
                    user: 1000,
                    ..
                }
            ),
            "{planted}"
        );
        assert!(
            planted.to_string().contains("/srv/k/audit.key"),
            "{planted}"
        );
        // Root's key is not a user's either.
        assert!(check_owner(key, 0, dir, 0, 0o40755, 1000).is_err());
        let theirs = check_owner(key, 1000, dir, 1001, 0o40755, 1000).unwrap_err();
        assert!(matches!(theirs, KeyError::OpenDirectory { .. }), "{theirs}");
        let open = check_owner(key, 1000, dir, 1000, 0o40777, 1000).unwrap_err();
        assert!(open.to_string().contains("mode 0777"), "{open}");
    }

    #[cfg(unix)]
    #[test]
    fn a_key_in_a_directory_everyone_may_write_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(AuditKey::FILE_NAME);
        AuditKey::load_or_create(&path).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = AuditKey::load(&path).unwrap_err();
        assert!(matches!(err, KeyError::OpenDirectory { .. }), "{err}");
        assert!(
            err.to_string().contains(&path.display().to_string()),
            "{err}"
        );
        // With the sticky bit, others cannot replace what is not theirs.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(AuditKey::load(&path).is_ok());
    }

    /// Only root can give a file away, so this runs the real check where the
    /// tests run as root and the check with the running user's id elsewhere.
    #[cfg(unix)]
    #[test]
    fn a_key_file_of_another_user_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(AuditKey::FILE_NAME);
        AuditKey::load_or_create(&path).unwrap();
        let user = rustix::process::geteuid();
        if user.is_root() {
            let nobody = rustix::process::Uid::from_raw(65_534);
            rustix::fs::chown(&path, Some(nobody), None).unwrap();
            let err = AuditKey::load(&path).unwrap_err();
            assert!(
                matches!(
                    err,
                    KeyError::NotOwned {
                        owner: 65_534,
                        user: 0,
                        ..
                    }
                ),
                "{err}"
            );
            assert!(AuditKey::load_or_create(&path).is_err(), "never replaced");
        } else {
            assert!(AuditKey::load(&path).is_ok());
            let err = check_owner(
                &path,
                user.as_raw() + 1,
                dir.path(),
                user.as_raw(),
                0o40700,
                user.as_raw(),
            )
            .unwrap_err();
            assert!(matches!(err, KeyError::NotOwned { .. }), "{err}");
        }
    }

    #[test]
    fn a_file_that_is_not_a_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        std::fs::write(&path, "not a key\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        assert!(matches!(
            AuditKey::load(&path),
            Err(KeyError::Malformed { .. })
        ));
        std::fs::write(&path, format!("{}\n", "ab".repeat(32))).unwrap();
        assert!(AuditKey::load(&path).is_ok());
    }
}
