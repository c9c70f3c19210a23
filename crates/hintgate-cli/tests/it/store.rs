//! The PostgreSQL store over the network: TLS with a verified certificate.

use crate::util::{code, hintgate, stderr, stdout};

#[test]
fn the_postgres_store_is_reached_over_tls_only_with_a_trusted_certificate() {
    let Some((url, ca)) = hintgate_store::test_util::postgres_tls_database() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let verify = |roots: &std::path::Path| {
        hintgate()
            .args(["log", "--store", &url, "verify"])
            .env("SSL_CERT_FILE", roots)
            .env_remove("SSL_CERT_DIR")
            .env("HINTGATE_STATE_DIR", dir.path().join("state"))
            .output()
            .unwrap()
    };
    let trusted = verify(&ca);
    assert_eq!(code(&trusted), 0, "{}", stderr(&trusted));
    assert!(
        stdout(&trusted).contains("0 records checked"),
        "{}",
        stdout(&trusted)
    );

    // The same server, with a certificate this machine does not trust: no
    // connection (sslmode=require never falls back to the clear).
    let empty = dir.path().join("no-roots.pem");
    std::fs::write(&empty, "").unwrap();
    let untrusted = verify(&empty);
    assert_eq!(code(&untrusted), 1, "{}", stdout(&untrusted));
    assert!(
        stderr(&untrusted).contains("cannot open the PostgreSQL store"),
        "{}",
        stderr(&untrusted)
    );
    assert!(
        !dir.path().join("state").exists(),
        "nothing falls back to SQLite"
    );
}
