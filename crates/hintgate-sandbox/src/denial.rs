//! What a confined server's failure can be traced to, from what is known
//! for certain: the paths its last lines of standard error name as denied,
//! set against its [`Plan`].
//!
//! The kernel does not tell the parent what Landlock or the seccomp filter
//! refused its child: the server gets an error number (`EACCES` from
//! Landlock; `EPERM`, `ENOSYS` or, for sockets with `network = false`,
//! `EACCES` from the filter, which never kills), and says what it says.
//! Landlock (ABI 7 and later) also records its denials in the kernel's
//! audit log where audit is enabled, but reading that log takes
//! `CAP_AUDIT_READ`, which a gateway does not have; so the notes here say
//! only what the plan proves (a path named in a denial that no rule of the
//! plan grants, or grants only for reading) and, when nothing is, where the
//! kernel's own record is. Nothing here guesses.

use std::path::{Path, PathBuf};

use crate::plan::{Access, Plan};

/// At most this many paths are named.
const MAX_PATHS: usize = 3;

/// What a line of a server's standard error says when an access was
/// refused (lower case).
const DENIED: [&str; 7] = [
    "permission denied",
    "eacces",
    "operation not permitted",
    "eperm",
    "read-only file system",
    "erofs",
    "access denied",
];

/// What a line says when a connection or a name lookup failed for want of
/// a network (lower case).
const NO_NETWORK: [&str; 6] = [
    "network is unreachable",
    "enetunreach",
    "eai_again",
    "temporary failure in name resolution",
    "name or service not known",
    "getaddrinfo",
];

/// What a line says when a system call was refused or is missing (lower
/// case): the seccomp filter's answers.
const REFUSED_CALL: [&str; 4] = [
    "operation not permitted",
    "eperm",
    "function not implemented",
    "enosys",
];

/// Notes on what `plan`'s sandbox denied that the server's last lines of
/// standard error (`stderr`, escaped) name, in words for the host: each
/// path a line that reports a denial names, which no rule of the plan
/// grants (outside its private `home`), or which a rule grants only for
/// reading; with `network = false`, a failed connection or name lookup
/// those lines report; else an error number they report that the seccomp
/// filter also answers with. When none is found and Landlock confined the
/// server (`landlock_abi` > 0), one note says where the kernel records its
/// denials, or that this kernel's Landlock records none.
pub fn notes(
    plan: &Plan,
    home: Option<&Path>,
    landlock_abi: u32,
    stderr: &[String],
) -> Vec<String> {
    let mut seen: Vec<PathBuf> = Vec::new();
    let mut notes = Vec::new();
    for line in stderr {
        let lower = line.to_lowercase();
        if !DENIED.iter().any(|word| lower.contains(word)) {
            continue;
        }
        for path in paths(line) {
            if seen.len() >= MAX_PATHS {
                break;
            }
            if seen.contains(&path) || home.is_some_and(|home| path.starts_with(home)) {
                continue;
            }
            seen.push(path.clone());
            let shown = path.display();
            // Landlock holds the file, not the name: a path through a
            // symbolic link is granted where the file it leads to is.
            let real = std::fs::canonicalize(&path).ok();
            let widest = plan
                .rules
                .iter()
                .filter(|rule| {
                    path.starts_with(&rule.path)
                        || real
                            .as_ref()
                            .is_some_and(|real| real.starts_with(&rule.path))
                })
                .map(|rule| rule.access)
                .max_by_key(|access| match access {
                    Access::Read => 0,
                    Access::Device => 1,
                    Access::ReadExec => 2,
                    Access::ReadWrite => 3,
                });
            match widest {
                None => notes.push(format!(
                    "the sandbox grants no access to `{shown}`, which its standard error says was denied (no `read` or `write` path of its table holds it, nor anything its program needs to run)"
                )),
                Some(Access::Read) => notes.push(format!(
                    "the sandbox lets it only read `{shown}` (not write or run anything there), which its standard error says was denied"
                )),
                Some(Access::ReadExec) => notes.push(format!(
                    "the sandbox lets it only read and run `{shown}` (not write there), which its standard error says was denied"
                )),
                Some(Access::Device | Access::ReadWrite) => {}
            }
        }
    }
    let said = |words: &[&str]| {
        stderr.iter().any(|line| {
            let lower = line.to_lowercase();
            words.iter().any(|word| lower.contains(word))
        })
    };
    // A list of hosts (`egress`) is a network of sorts: a failed
    // connection there may be a host the list leaves out, or the host's own.
    if !plan.config.network && plan.config.egress.is_empty() && said(&NO_NETWORK) {
        notes.push(
            "the sandbox gives it no network (`network = false`), and its standard error reports a connection or a name lookup that failed, as every one does there".to_owned(),
        );
    }
    if notes.is_empty() && said(&REFUSED_CALL) {
        notes.push(
            "its standard error reports EPERM or ENOSYS, which is also what the sandbox's seccomp filter answers the system calls it refuses (`hintgate sandbox explain` lists them)".to_owned(),
        );
    }
    if notes.is_empty() && landlock_abi > 0 {
        notes.push(if landlock_abi >= 7 {
            "what the sandbox denied is not known to hintgate: Landlock records its denials in the kernel's audit log where audit is enabled (record type LANDLOCK_ACCESS), which hintgate does not read (reading it takes CAP_AUDIT_READ)".to_owned()
        } else {
            format!(
                "what the sandbox denied is not known to hintgate: this kernel's Landlock (ABI {landlock_abi}) records no denials (ABI 7 does, in the audit log)"
            )
        });
    }
    notes
}

/// The absolute paths a line names: words that begin with `/`, cut at a
/// quote, bracket, comma or colon, without a trailing full stop.
fn paths(line: &str) -> Vec<PathBuf> {
    line.split(|ch: char| {
        ch.is_whitespace()
            || matches!(
                ch,
                '\'' | '"'
                    | '`'
                    | '('
                    | ')'
                    | '['
                    | ']'
                    | '{'
                    | '}'
                    | '<'
                    | '>'
                    | ','
                    | ';'
                    | ':'
                    | '='
            )
    })
    .filter(|word| word.starts_with('/') && word.len() > 1)
    .map(|word| PathBuf::from(word.trim_end_matches('.')))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::PathRule;

    fn plan(rules: &[(&str, Access)]) -> Plan {
        Plan {
            program: PathBuf::from("/usr/bin/python3"),
            args: Vec::new(),
            rules: rules
                .iter()
                .map(|(path, access)| PathRule {
                    path: PathBuf::from(path),
                    access: *access,
                    why: "read",
                })
                .collect(),
            env: Vec::new(),
            limits: crate::plan::Limits {
                open_files: 1,
                processes: 1,
                address_space: 1,
            },
            config: hintgate_policy::config::SandboxConfig::default(),
            launch: None,
        }
    }

    #[test]
    fn a_denied_path_outside_the_plan_is_named() {
        let plan = plan(&[("/usr", Access::ReadExec), ("/data", Access::Read)]);
        let stderr = vec![
            "Traceback (most recent call last):".to_owned(),
            "  File \"/usr/lib/x.py\", line 3".to_owned(),
            "PermissionError: [Errno 13] Permission denied: '/home/me/.config/app.json'".to_owned(),
        ];
        let notes = notes(&plan, None, 7, &stderr);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].contains("no access to `/home/me/.config/app.json`"),
            "{notes:?}"
        );
    }

    #[test]
    fn a_write_to_a_read_only_path_is_named_and_the_home_is_not() {
        let plan = plan(&[("/data", Access::Read)]);
        let stderr = vec![
            "Error: EACCES: permission denied, open '/data/out.txt'".to_owned(),
            "Error: EACCES: permission denied, open '/tmp/hintgate-sandbox-1/x'".to_owned(),
        ];
        let notes = notes(
            &plan,
            Some(Path::new("/tmp/hintgate-sandbox-1")),
            7,
            &stderr,
        );
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("only read `/data/out.txt`"), "{notes:?}");
    }

    #[test]
    fn a_failed_lookup_without_network_and_a_refused_call_are_set_beside_the_sandbox() {
        let plan = plan(&[("/data", Access::Read)]);
        let stderr = vec!["npm error network request to https://registry.npmjs.org/x failed, reason: getaddrinfo EAI_AGAIN registry.npmjs.org".to_owned()];
        let notes_ = notes(&plan, None, 7, &stderr);
        assert_eq!(notes_.len(), 1, "{notes_:?}");
        assert!(
            notes_[0].contains("no network (`network = false`)"),
            "{notes_:?}"
        );
        // With the network allowed, the sandbox is not what failed it.
        let mut open = plan.clone();
        open.config.network = true;
        assert!(notes(&open, None, 7, &stderr)[0].contains("audit log"));
        let stderr = vec!["prctl: Operation not permitted".to_owned()];
        let notes_ = notes(&plan, None, 7, &stderr);
        assert_eq!(notes_.len(), 1, "{notes_:?}");
        assert!(notes_[0].contains("seccomp filter"), "{notes_:?}");
    }

    #[test]
    fn without_a_named_denial_only_the_kernel_record_is_pointed_to() {
        let plan = plan(&[("/data", Access::Read)]);
        // A path without a denial on its line says nothing of the sandbox.
        let stderr = vec![
            "reading /etc/app.conf".to_owned(),
            "ModuleNotFoundError: No module named 'x'".to_owned(),
        ];
        let notes7 = notes(&plan, None, 7, &stderr);
        assert_eq!(notes7.len(), 1);
        assert!(notes7[0].contains("audit log"), "{notes7:?}");
        assert!(!notes7[0].contains("/etc/app.conf"));
        let notes6 = notes(&plan, None, 6, &stderr);
        assert!(notes6[0].contains("ABI 6"), "{notes6:?}");
        assert!(notes(&plan, None, 0, &stderr).is_empty());
    }
}
