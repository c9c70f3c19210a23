//! A network namespace a test makes, holding a small HTTP "API"
//! (`hintgate-proxy/tests/fixtures/api_server.py`) and joined to the test's
//! namespace by a veth pair on a /30 of its own and nothing else (no route,
//! no forwarding out), so nothing a test does leaves the machine. Made with
//! iproute2, as root. Shared by the proxy's and the command line's tests.
#![expect(
    clippy::disallowed_macros,
    reason = "a test prints why it skips where it cannot make a namespace"
)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// The API's first port.
pub const PORT_A: u16 = 8080;
/// Its second port.
pub const PORT_B: u16 = 8081;

/// A network namespace of the test's, joined to this one by a veth pair,
/// with the API running in it; removed (with the veth) when dropped.
pub struct ApiNamespace {
    name: String,
    /// The namespace's end of the veth: where the API listens.
    pub api: String,
    /// This namespace's end.
    pub gateway: String,
    server: Child,
    log: PathBuf,
}

/// Runs `ip ARGS`; whether it succeeded.
pub fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

impl ApiNamespace {
    /// Makes the namespace, the veth pair and the API, which listens on
    /// [`PORT_A`] and [`PORT_B`]; its log goes in `dir`.
    pub fn make(dir: &Path) -> Self {
        // Unique among the tests of this process and the processes of
        // this machine.
        static MADE: AtomicU32 = AtomicU32::new(0);
        let id = std::process::id() * 4 + MADE.fetch_add(1, Ordering::SeqCst) % 4;
        let name = format!("hintgate-egress-{id}");
        let (outer, inner) = (
            format!("hge{}a", id % 1_000_000),
            format!("hge{}b", id % 1_000_000),
        );
        // A /30 of its own in 10.213.0.0/16.
        let subnet = id % 16_384;
        let (third, fourth) = (subnet / 64, (subnet % 64) * 4);
        let (gateway, api) = (
            format!("10.213.{third}.{}", fourth + 1),
            format!("10.213.{third}.{}", fourth + 2),
        );
        assert!(ip(&["netns", "add", &name]), "ip netns add {name}");
        let made = ip(&[
            "link", "add", &outer, "type", "veth", "peer", "name", &inner, "netns", &name,
        ]) && ip(&["addr", "add", &format!("{gateway}/30"), "dev", &outer])
            && ip(&["link", "set", &outer, "up"])
            && ip(&[
                "netns",
                "exec",
                &name,
                "ip",
                "addr",
                "add",
                &format!("{api}/30"),
                "dev",
                &inner,
            ])
            && ip(&["netns", "exec", &name, "ip", "link", "set", &inner, "up"])
            && ip(&["netns", "exec", &name, "ip", "link", "set", "lo", "up"]);
        if !made {
            ip(&["netns", "del", &name]);
            panic!("could not join namespace {name} by a veth pair");
        }
        let log = dir.join("api.log");
        let ready = dir.join("api.ready");
        let server = Command::new("ip")
            .args(["netns", "exec", &name, "python3"])
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../hintgate-proxy/tests/fixtures/api_server.py"
            ))
            .arg(&log)
            .arg(&ready)
            .args([PORT_A.to_string(), PORT_B.to_string()])
            .spawn()
            .unwrap();
        let made = Self {
            name,
            api,
            gateway,
            server,
            log,
        };
        assert!(soon(|| ready.exists()), "the API did not start");
        made
    }

    /// What the API was asked, as `PORT PATH` lines.
    pub fn asked(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for ApiNamespace {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        ip(&["netns", "del", &self.name]);
    }
}

/// Polls until `check` holds, for at most a generous while.
fn soon(check: impl Fn() -> bool) -> bool {
    for _ in 0..500 {
        if check() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    false
}

/// Whether the test runs as root (making namespaces needs it).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find(|line| line.starts_with("Uid:"))
            .is_some_and(|line| line.split_whitespace().nth(2) == Some("0"))
    })
}

/// Whether namespaces can be made here; says why not.
pub fn available() -> bool {
    if !is_root() || !ip(&["netns", "list"]) {
        println!("skipped: making a network namespace and a veth pair needs iproute2 and root");
        return false;
    }
    true
}
