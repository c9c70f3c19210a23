//! Running the binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The built `hintgate` binary.
pub fn hintgate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_hintgate"))
}

/// Runs `hintgate` with `args` in `dir`.
pub fn run(dir: &Path, args: &[&str]) -> Output {
    hintgate()
        .current_dir(dir)
        .args(args)
        .output()
        .expect("hintgate runs")
}

/// The exit code (a signal is a test failure).
pub fn code(output: &Output) -> i32 {
    output.status.code().expect("hintgate exited normally")
}

/// Standard output as text.
pub fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("stdout is UTF-8")
}

/// Standard error as text.
pub fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).expect("stderr is UTF-8")
}

/// The repository's root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The policy crate's test folder (the corpus and the fixtures).
pub fn policy_tests() -> PathBuf {
    repo_root().join("crates/hintgate-policy/tests")
}

/// A git repository with one empty commit, in `dir/repo` (for the git
/// reference server).
pub fn git_repo(dir: &Path) -> PathBuf {
    let repo = dir.join("repo");
    std::fs::create_dir(&repo).unwrap();
    let git = |args: &[&str]| {
        let status = Command::new("git")
            .current_dir(&repo)
            .args(args)
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    };
    git(&["init", "-q"]);
    git(&[
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@example.org",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "first",
    ]);
    repo
}
