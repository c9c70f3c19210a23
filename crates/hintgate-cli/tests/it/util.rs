//! Running the binary, and the set-ups the command-line tests share.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::host::{Host, fixture_server};

/// One HTTP/1.1 exchange with `base` (`http://HOST:PORT`): `request` as
/// written, the whole answer as text (the request should ask for
/// `Connection: close`).
pub fn http(base: &str, request: &str) -> String {
    use std::io::{Read as _, Write as _};
    let addr = base.trim_start_matches("http://");
    let addr = addr.split('/').next().unwrap_or(addr);
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

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

/// A wrap-mode session in front of the fixture server (`hintgate run FLAGS
/// -- python3 fixture_server.py SERVER_FLAGS`), its state in `dir/state`.
pub fn wrap_fixture(
    dir: &Path,
    flags: &[&str],
    server_flags: &[&str],
    env: &[(&str, &str)],
) -> Host {
    let server = fixture_server();
    let mut args = vec!["run"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--", "python3", server.as_str()]);
    args.extend_from_slice(server_flags);
    Host::start(dir, &args, env)
}

/// `hintgate log --json [extra]` on the state directory `dir/state`, one
/// value per line; the command must succeed.
pub fn log_json(dir: &Path, extra: &[&str]) -> Vec<Value> {
    let state = dir.join("state").display().to_string();
    let mut args = vec!["log", "--state-dir", state.as_str(), "--json"];
    args.extend_from_slice(extra);
    let output = run(dir, &args);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The tool `name` in a `tools/list` answer.
pub fn tool<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|tool| tool["name"] == name)
        .unwrap_or_else(|| panic!("no tool `{name}` in {list}"))
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

/// splitmix64: a seeded stream of choices, for tests that are random but
/// replayable from their seed.
pub struct Rng(pub u64);

impl Rng {
    /// The next number.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `bound`.
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// Runs `hintgate` in `dir` with `args` and extra environment.
pub fn run_with(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    hintgate()
        .current_dir(dir)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("hintgate runs")
}

/// Every file under `dir` (a state directory: `state.db` and its files,
/// the audit journals in `journal/`, keys, heads), each with its bytes, for
/// tests that a secret is written nowhere in clear.
pub fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(next) = dirs.pop() {
        for entry in std::fs::read_dir(next).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.is_file() {
                let bytes = std::fs::read(&path).unwrap();
                files.push((path, bytes));
            }
        }
    }
    files
}

/// `hintgate auth --config CONFIG --state-dir STATE ARGS...` started with its
/// output piped, and a reader of its standard error, where `auth login`
/// prints the address to visit.
pub fn auth_command(
    dir: &Path,
    config: &str,
    state: &str,
    args: &[&str],
) -> (
    std::process::Child,
    std::io::BufReader<std::process::ChildStderr>,
) {
    let mut child = hintgate()
        .current_dir(dir)
        .args(["auth", "--config", config, "--state-dir", state])
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let errors = std::io::BufReader::new(child.stderr.take().unwrap());
    (child, errors)
}
