//! File previews computed by the gateway itself (design §4.3): what a
//! write will change, read from the local file, for any server, trusted or
//! not, since nothing the server says goes into it.
//!
//! Which calls have one: a `[[previews]]` entry with a `files` table, or the
//! built-in previews of the reference filesystem server
//! (`@modelcontextprotocol/server-filesystem`, recognised by its command
//! line: [`builtin`]), whose roots are the directories it is started with.
//!
//! What is read, and how (the file's path comes from the agent, so it is
//! attacker-chosen):
//! - only paths under the roots: the path must be absolute and lie under a
//!   root as written, then its canonical form (symbolic links resolved)
//!   must too, so a link that leads out is not followed out;
//! - the canonical path is opened without following a link, without
//!   blocking (a FIFO opens at once and is not read), and the file opened
//!   is checked to be a regular file, under [`MAX_FILE_BYTES`], and (where
//!   `/proc` tells) to be the very file that was checked, so a directory
//!   swapped for a link between the check and the open is caught;
//! - at most [`MAX_FILE_BYTES`] are read, and the diff is given a deadline
//!   ([`DIFF_TIMEOUT`]), so the event loop is never held for long.
//!
//! Anything that goes wrong is a [`Previewed::Unavailable`] with the reason:
//! a preview only adds to the prompt.

use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use hintgate_policy::config::{FileChange, FilePreview, ServerConfig, Transport};
use hintgate_policy::preview::{Preview, PreviewKind, PreviewSource, Previewed, apply_edits};
use serde_json::Value;

/// The largest file (and new content) a preview reads or shows: 1 MiB.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// How long the diff may take before it settles for a coarser one.
pub const DIFF_TIMEOUT: Duration = Duration::from_millis(100);

/// The reference filesystem server's npm package.
const REFERENCE_PACKAGE: &str = "@modelcontextprotocol/server-filesystem";

/// The reference filesystem server's executable.
const REFERENCE_BIN: &str = "mcp-server-filesystem";

/// The file previews of a server the gateway recognises as the reference
/// filesystem server (by its command line: the package given to `npx` and
/// the like, or its executable), with its roots: the absolute paths among
/// its arguments. `None` for any other server.
pub fn builtin_roots(config: &ServerConfig) -> Option<Vec<String>> {
    let Transport::Stdio { command, args, .. } = &config.transport else {
        return None;
    };
    let is_package = |arg: &str| {
        arg == REFERENCE_PACKAGE
            || arg
                .strip_prefix(REFERENCE_PACKAGE)
                .is_some_and(|rest| rest.starts_with('@'))
    };
    let program = Path::new(command).file_name()?.to_str()?;
    let after = if program == REFERENCE_BIN {
        0
    } else {
        args.iter().position(|arg| is_package(arg))? + 1
    };
    Some(
        args.iter()
            .skip(after)
            .filter(|arg| arg.starts_with('/'))
            .cloned()
            .collect(),
    )
}

/// [`builtin_roots`], for a server whose command line names neither the
/// package nor its executable (`node .../dist/index.js /data`) but whose
/// identity, as the gateway resolved it at start, is the package: the
/// absolute paths among its arguments.
pub fn builtin_roots_by_identity(config: &ServerConfig, identity: &str) -> Option<Vec<String>> {
    let Transport::Stdio { args, .. } = &config.transport else {
        return None;
    };
    // The identity ends `(PACKAGE VERSION)` when it resolved to a package.
    let package = identity.rsplit_once(" (")?.1.split(' ').next()?;
    (package == REFERENCE_PACKAGE).then(|| {
        args.iter()
            .filter(|arg| arg.starts_with('/'))
            .cloned()
            .collect()
    })
}

/// The built-in preview of the reference filesystem server's `tool`, with
/// `roots`: `write_file`, `edit_file`, `move_file` and `create_directory`.
pub fn builtin(tool: &str, roots: Vec<String>) -> Option<FilePreview> {
    let (path, change) = match tool {
        "write_file" => (
            "path",
            FileChange::Write {
                content: "content".to_owned(),
            },
        ),
        "edit_file" => (
            "path",
            FileChange::Edit {
                edits: "edits".to_owned(),
            },
        ),
        "move_file" => (
            "source",
            FileChange::Move {
                destination: "destination".to_owned(),
            },
        ),
        "create_directory" => ("path", FileChange::CreateDirectory),
        _ => return None,
    };
    Some(FilePreview {
        path: path.to_owned(),
        change,
        roots,
    })
}

/// The preview of a call with `arguments` that `spec` describes. Total:
/// anything that prevents one is the reason there is none.
pub fn file_preview(spec: &FilePreview, arguments: &Value) -> Previewed {
    match compute(spec, arguments) {
        Ok(preview) => Previewed::Shown(preview),
        Err(why) => Previewed::unavailable(PreviewSource::Files, why),
    }
}

fn compute(spec: &FilePreview, arguments: &Value) -> Result<Preview, String> {
    let path = string_argument(arguments, &spec.path)?;
    let roots = Roots::of(&spec.roots)?;
    let target = Target::find(path, &roots)?;
    let shown = path;
    match &spec.change {
        FileChange::Write { content } => {
            let new = string_argument(arguments, content)?;
            bounded_new(new)?;
            let old = target.read()?;
            Ok(diff(shown, old.as_deref(), new))
        }
        FileChange::Edit { edits } => {
            let edits = arguments
                .get(edits)
                .ok_or_else(|| format!("the call has no `{edits}` argument"))?;
            let Some(old) = target.read()? else {
                return Err("the file does not exist, so the edits cannot apply".to_owned());
            };
            let new = apply_edits(&old, edits)?;
            bounded_new(&new)?;
            Ok(diff(shown, Some(&old), &new))
        }
        FileChange::Move { destination } => {
            let to = string_argument(arguments, destination)?;
            let text = match (&target.existing, Target::find(to, &roots)) {
                (None, _) => format!("moves {shown}, which does not exist (the call will fail)"),
                (Some(_), Ok(dest)) if dest.existing.is_some() => format!(
                    "moves {shown} to {to}, where something already is (the reference server refuses to overwrite it)"
                ),
                (Some(_), Ok(_)) => format!("moves {shown} to {to}"),
                (Some(_), Err(why)) => format!("moves {shown} to {to}: {why}"),
            };
            Ok(Preview::new(PreviewSource::Files, PreviewKind::Text, text))
        }
        FileChange::CreateDirectory => {
            let text = match &target.existing {
                Some(_) => format!("{shown} already exists: nothing is created"),
                None => format!("creates the directory {shown} (and any missing parents)"),
            };
            Ok(Preview::new(PreviewSource::Files, PreviewKind::Text, text))
        }
    }
}

/// A string argument of the call.
fn string_argument<'a>(arguments: &'a Value, name: &str) -> Result<&'a str, String> {
    match arguments.get(name) {
        Some(Value::String(text)) => Ok(text),
        Some(_) => Err(format!("the argument `{name}` is not a string")),
        None => Err(format!("the call has no `{name}` argument")),
    }
}

fn bounded_new(new: &str) -> Result<(), String> {
    if u64::try_from(new.len()).unwrap_or(u64::MAX) > MAX_FILE_BYTES {
        return Err(format!(
            "the new content is larger than {} KiB",
            MAX_FILE_BYTES / 1024
        ));
    }
    Ok(())
}

/// The directories a server serves.
#[derive(Debug)]
struct Roots {
    /// As configured, and canonical: a path as written must be under one.
    written: Vec<PathBuf>,
    /// Canonical: what a path resolves to must be under one.
    real: Vec<PathBuf>,
}

impl Roots {
    /// The roots; one that does not resolve to a directory is left out.
    fn of(roots: &[String]) -> Result<Self, String> {
        // A root is a directory: an argument that names a file (a
        // script the server runs) serves nothing.
        let real: Vec<PathBuf> = roots
            .iter()
            .filter_map(|root| std::fs::canonicalize(root).ok())
            .filter(|root| root.is_dir())
            .collect();
        if real.is_empty() {
            return Err("no directory the server serves is known to hintgate".to_owned());
        }
        let mut written: Vec<PathBuf> = roots
            .iter()
            .map(PathBuf::from)
            .filter(|root| root.is_dir())
            .collect();
        written.extend(real.iter().cloned());
        Ok(Self { written, real })
    }

    fn holds(&self, real: &Path) -> bool {
        self.real.iter().any(|root| real.starts_with(root))
    }
}

/// A path the call names, checked to lie under a root.
#[derive(Debug)]
struct Target {
    /// The canonical path of what is there now, when something is.
    existing: Option<PathBuf>,
}

impl Target {
    /// Checks `path` against `roots`: lexically first (nothing outside is
    /// touched), then canonically, symbolic links resolved.
    fn find(path: &str, roots: &Roots) -> Result<Self, String> {
        let outside = || "the file is outside the directories the server serves".to_owned();
        let path = Path::new(path);
        if !path.is_absolute() {
            return Err("the path is not absolute".to_owned());
        }
        if path
            .components()
            .any(|part| matches!(part, Component::ParentDir))
        {
            return Err("the path goes up a directory (`..`)".to_owned());
        }
        // As written, it must already be under a root, so nothing outside
        // is touched at all.
        if !roots.written.iter().any(|root| path.starts_with(root)) {
            return Err(outside());
        }
        match std::fs::canonicalize(path) {
            Ok(real) if roots.holds(&real) => Ok(Self {
                existing: Some(real),
            }),
            Ok(_) => Err("the path leads outside the directories the server serves (through a symbolic link)".to_owned()),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                if std::fs::symlink_metadata(path).is_ok() {
                    return Err("the path is a symbolic link that leads nowhere".to_owned());
                }
                // A new file: its directory must be under a root too.
                let parent = path.parent().ok_or_else(outside)?;
                match std::fs::canonicalize(parent) {
                    Ok(real) if roots.holds(&real) => {
                        Ok(Self { existing: None })
                    }
                    Ok(_) => Err(outside()),
                    Err(_) => Ok(Self { existing: None }),
                }
            }
            Err(err) => Err(format!("the path cannot be resolved: {err}")),
        }
    }

    /// The file's text, `None` when there is no file. Opened without
    /// following a link or blocking, checked to be a regular file (the
    /// one that was checked) and read under the bound.
    fn read(&self) -> Result<Option<String>, String> {
        let Some(path) = &self.existing else {
            return Ok(None);
        };
        let fd = rustix::fs::open(
            path,
            rustix::fs::OFlags::RDONLY
                | rustix::fs::OFlags::NOFOLLOW
                | rustix::fs::OFlags::NONBLOCK
                | rustix::fs::OFlags::NOCTTY
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|err| format!("the file cannot be opened: {err}"))?;
        let file = std::fs::File::from(fd);
        let meta = file
            .metadata()
            .map_err(|err| format!("the file cannot be read: {err}"))?;
        if !meta.is_file() {
            return Err("the path is not a regular file".to_owned());
        }
        if meta.len() > MAX_FILE_BYTES {
            return Err(format!(
                "the file is larger than {} KiB",
                MAX_FILE_BYTES / 1024
            ));
        }
        same_file(&file, path)?;
        let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
        file.take(MAX_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|err| format!("the file cannot be read: {err}"))?;
        if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > MAX_FILE_BYTES {
            return Err(format!(
                "the file is larger than {} KiB",
                MAX_FILE_BYTES / 1024
            ));
        }
        String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| "the file is not UTF-8 text".to_owned())
    }
}

/// Where `/proc` says which file a descriptor is, it must be `path`: a
/// directory on the way swapped for a link after the check is caught.
#[cfg(target_os = "linux")]
fn same_file(file: &std::fs::File, path: &Path) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    match std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())) {
        Ok(opened) if opened == path => Ok(()),
        Ok(_) => Err("the file changed place while it was opened".to_owned()),
        // No `/proc`: the canonical path and `O_NOFOLLOW` are the check.
        Err(_) => Ok(()),
    }
}

#[cfg(not(target_os = "linux"))]
fn same_file(_file: &std::fs::File, _path: &Path) -> Result<(), String> {
    Ok(())
}

/// A unified diff of `old` (none: a new file) to `new`, as `path`.
fn diff(path: &str, old: Option<&str>, new: &str) -> Preview {
    if old == Some(new) {
        return Preview::new(
            PreviewSource::Files,
            PreviewKind::Text,
            format!("{path} already has this content: nothing changes"),
        );
    }
    let from = match old {
        Some(_) => format!("a{path}"),
        None => "/dev/null".to_owned(),
    };
    let diff = similar::TextDiff::configure()
        .timeout(DIFF_TIMEOUT)
        .diff_lines(old.unwrap_or(""), new);
    let text = diff
        .unified_diff()
        .context_radius(3)
        .header(&from, &format!("b{path}"))
        .to_string();
    Preview::new(PreviewSource::Files, PreviewKind::Diff, text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn write_spec(root: &Path) -> FilePreview {
        builtin("write_file", vec![root.display().to_string()]).unwrap()
    }

    fn why(previewed: Previewed) -> String {
        match previewed {
            Previewed::Unavailable { why, .. } => why,
            Previewed::Shown(preview) => panic!("a preview: {}", preview.text),
        }
    }

    #[test]
    fn a_write_over_a_file_is_its_exact_unified_diff() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let file = root.join("notes.txt");
        std::fs::write(&file, "one\ntwo\nthree\n").unwrap();
        let path = file.display().to_string();
        let Previewed::Shown(preview) = file_preview(
            &write_spec(&root),
            &json!({"path": path, "content": "one\n2\nthree\n"}),
        ) else {
            panic!("no preview");
        };
        assert_eq!(preview.kind, PreviewKind::Diff);
        assert_eq!(
            preview.text,
            format!("--- a{path}\n+++ b{path}\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n")
        );
        // A new file is a diff from nothing.
        let new = root.join("new.txt").display().to_string();
        let Previewed::Shown(created) =
            file_preview(&write_spec(&root), &json!({"path": new, "content": "x\n"}))
        else {
            panic!("no preview");
        };
        assert!(
            created.text.starts_with("--- /dev/null\n"),
            "{}",
            created.text
        );
    }

    #[test]
    fn nothing_outside_the_roots_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let root = base.join("served");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(base.join("secret.txt"), "outside").unwrap();
        std::os::unix::fs::symlink(base.join("secret.txt"), root.join("link.txt")).unwrap();
        std::os::unix::fs::symlink(&base, root.join("up")).unwrap();
        let spec = write_spec(&root);
        let call = |path: PathBuf| {
            why(file_preview(
                &spec,
                &json!({"path": path.display().to_string(), "content": "x"}),
            ))
        };
        assert!(call(base.join("secret.txt")).contains("outside the directories"));
        assert!(call(root.join("link.txt")).contains("symbolic link"));
        assert!(call(root.join("up/secret.txt")).contains("symbolic link"));
        assert!(call(root.join("../secret.txt")).contains("`..`"));
        assert!(call(PathBuf::from("served/x")).contains("not absolute"));
    }

    #[test]
    fn a_fifo_or_a_directory_under_a_root_is_never_read() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let fifo = root.join("pipe");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let spec = write_spec(&root);
        // Were the FIFO opened to read, this would wait for a writer forever.
        let answer = why(file_preview(
            &spec,
            &json!({"path": fifo.display().to_string(), "content": "x"}),
        ));
        assert_eq!(answer, "the path is not a regular file");
        let answer = why(file_preview(
            &spec,
            &json!({"path": root.display().to_string(), "content": "x"}),
        ));
        assert_eq!(answer, "the path is not a regular file");
    }

    #[test]
    fn a_large_file_is_not_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let file = root.join("big");
        std::fs::File::create(&file)
            .unwrap()
            .set_len(MAX_FILE_BYTES + 1)
            .unwrap();
        let answer = why(file_preview(
            &write_spec(&root),
            &json!({"path": file.display().to_string(), "content": "x"}),
        ));
        assert!(answer.contains("larger than"), "{answer}");
    }

    #[test]
    fn edits_moves_and_directories_are_previewed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let roots = vec![root.display().to_string()];
        let file = root.join("a.txt");
        std::fs::write(&file, "alpha\nbeta\n").unwrap();
        let path = file.display().to_string();
        let edit = builtin("edit_file", roots.clone()).unwrap();
        let Previewed::Shown(edited) = file_preview(
            &edit,
            &json!({"path": path, "edits": [{"oldText": "beta", "newText": "gamma"}]}),
        ) else {
            panic!("no preview");
        };
        assert!(edited.text.contains("-beta\n+gamma\n"), "{}", edited.text);
        let moved = builtin("move_file", roots.clone()).unwrap();
        let dest = root.join("b.txt").display().to_string();
        let Previewed::Shown(text) =
            file_preview(&moved, &json!({"source": path, "destination": dest}))
        else {
            panic!("no preview");
        };
        assert_eq!(text.text, format!("moves {path} to {dest}"));
        let mkdir = builtin("create_directory", roots).unwrap();
        let Previewed::Shown(text) = file_preview(
            &mkdir,
            &json!({"path": root.join("d").display().to_string()}),
        ) else {
            panic!("no preview");
        };
        assert!(text.text.starts_with("creates the directory"));
    }

    #[test]
    fn the_reference_server_is_recognised_by_its_command_line() {
        let server = |command: &str, args: &[&str]| ServerConfig {
            name: "fs".into(),
            transport: Transport::Stdio {
                command: command.into(),
                args: args.iter().map(|arg| (*arg).to_owned()).collect(),
                env: Default::default(),
            },
            trust: hintgate_policy::tool::Trust::Untrusted,
            private_data: Default::default(),
            sandbox: None,
            decide: Default::default(),
            idempotency_key: None,
            read_only: None,
            oauth: None,
        };
        assert_eq!(
            builtin_roots(&server(
                "npx",
                &[
                    "-y",
                    "@modelcontextprotocol/server-filesystem@2026.8.31",
                    "/a",
                    "/b"
                ]
            )),
            Some(vec!["/a".to_owned(), "/b".to_owned()])
        );
        assert_eq!(
            builtin_roots(&server(
                "/x/node_modules/.bin/mcp-server-filesystem",
                &["/data"]
            )),
            Some(vec!["/data".to_owned()])
        );
        assert_eq!(
            builtin_roots(&server(
                "npx",
                &["-y", "@modelcontextprotocol/server-filesystem-evil", "/a"]
            )),
            None
        );
        assert_eq!(builtin_roots(&server("npx", &["other", "/a"])), None);
        let node = server("node", &["/x/server-filesystem/dist/index.js", "/data"]);
        assert_eq!(builtin_roots(&node), None);
        assert_eq!(
            builtin_roots_by_identity(
                &node,
                "node /x/dist/index.js /data -> /usr/bin/node (@modelcontextprotocol/server-filesystem 2026.8.31)"
            ),
            Some(vec![
                "/x/server-filesystem/dist/index.js".to_owned(),
                "/data".to_owned()
            ])
        );
        assert_eq!(
            builtin_roots_by_identity(&node, "node /x/dist/index.js -> /usr/bin/node (other 1.0)"),
            None
        );
    }
}
