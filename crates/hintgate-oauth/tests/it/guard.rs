//! The SSRF guard of the HTTP client, with the system's resolver and real
//! sockets on loopback: a server on the internet cannot make hintgate
//! connect inside this machine, whether its metadata names an IP literal
//! or a name that resolves there; a server on loopback can name what is
//! beside it.

use std::io::{Read as _, Write as _};
use std::net::{IpAddr, TcpListener};
use std::time::Duration;

use hintgate_oauth::{AddressClass, AddressGuard, HttpClient as _, HttpRequest, ReqwestClient};

#[test]
fn addresses_are_sorted_into_their_classes() {
    let class = |text: &str| AddressClass::of(text.parse::<IpAddr>().unwrap());
    assert_eq!(class("127.0.0.1"), AddressClass::Loopback);
    assert_eq!(class("127.8.9.10"), AddressClass::Loopback);
    assert_eq!(class("::1"), AddressClass::Loopback);
    assert_eq!(class("::ffff:127.0.0.1"), AddressClass::Loopback);
    assert_eq!(class("10.1.2.3"), AddressClass::Private);
    assert_eq!(class("172.20.0.1"), AddressClass::Private);
    assert_eq!(class("192.168.1.1"), AddressClass::Private);
    assert_eq!(class("fd00::1"), AddressClass::Private);
    assert_eq!(class("::ffff:10.0.0.1"), AddressClass::Private);
    assert_eq!(class("169.254.169.254"), AddressClass::LinkLocal);
    assert_eq!(class("fe80::1"), AddressClass::LinkLocal);
    assert_eq!(class("100.64.0.1"), AddressClass::Shared);
    assert_eq!(class("0.0.0.0"), AddressClass::Unspecified);
    assert_eq!(class("::"), AddressClass::Unspecified);
    assert_eq!(class("93.184.216.34"), AddressClass::Public);
    assert_eq!(class("2606:4700::1111"), AddressClass::Public);
    assert_eq!(class("172.32.0.1"), AddressClass::Public);
}

/// A loopback listener that answers `200 {}` to whoever connects, counting
/// them.
fn listener() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut buf = [0_u8; 4096];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
            );
        }
    });
    (port, seen)
}

fn runtime() -> tokio::runtime::Runtime {
    let _ = rustls::crypto::ring::default_provider().install_default();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_server_on_the_internet_cannot_point_hintgate_inside_this_machine() {
    let (port, seen) = listener();
    runtime().block_on(async {
        // The guard of a server whose address is public.
        let guard = AddressGuard::for_server("https://93.184.216.34/mcp").await;
        assert_eq!(guard, AddressGuard::allowing(&[]));
        let http = ReqwestClient::guarded(Duration::from_secs(10), guard).unwrap();
        // A name that resolves to loopback: refused as it resolves.
        let by_name = http
            .send(HttpRequest::get(&format!(
                "http://localhost:{port}/.well-known/oauth-authorization-server"
            )))
            .await
            .unwrap_err();
        assert_eq!(by_name.code(), "oauth-transport");
        assert!(
            by_name
                .to_string()
                .contains("refused: the name resolves only to addresses of class `loopback`"),
            "{by_name}"
        );
        // An IP literal: refused before any connection.
        for literal in [
            format!("http://127.0.0.1:{port}/token"),
            format!("http://[::ffff:127.0.0.1]:{port}/token"),
        ] {
            let err = http.send(HttpRequest::get(&literal)).await.unwrap_err();
            assert!(
                err.to_string().contains(
                    "refused: an address of class `loopback`, which the server's own address is not"
                ),
                "{err}"
            );
        }
    });
    assert_eq!(
        seen.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "nothing reached the listener"
    );
}

#[test]
fn a_server_on_loopback_may_name_what_is_beside_it() {
    let (port, seen) = listener();
    runtime().block_on(async {
        for server in ["http://127.0.0.1:9/mcp", "http://localhost:9/mcp"] {
            let guard = AddressGuard::for_server(server).await;
            assert!(guard.permits("127.0.0.1".parse().unwrap()), "{server}");
            assert!(!guard.permits("10.0.0.1".parse().unwrap()), "{server}");
            assert!(
                !guard.permits("169.254.169.254".parse().unwrap()),
                "{server}"
            );
            let http = ReqwestClient::guarded(Duration::from_secs(10), guard).unwrap();
            for url in [
                format!("http://localhost:{port}/x"),
                format!("http://127.0.0.1:{port}/x"),
            ] {
                let answer = http.send(HttpRequest::get(&url)).await.unwrap();
                assert_eq!(answer.status, 200);
            }
        }
    });
    assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 4);
}
