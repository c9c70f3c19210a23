//! The OAuth grants hintgate holds for remote servers: one per server and
//! principal, kept encrypted, and a grant someone without the audit key
//! wrote, changed or moved gives no token, in every store.

use hintgate_store::{GrantSecret, NewGrant, Seal, SqliteStore, Store, UpstreamTokenStore};

const SERVER: &str = "https://docs.example/mcp";
const TOKENS: &str =
    r#"{"access_token":"at-7c1e-never-shown","refresh_token":"rt-93ab-never-shown"}"#;

fn grant<'a>(principal: &'a str, scope: &'a str, secret: &'a GrantSecret) -> NewGrant<'a> {
    NewGrant {
        server: SERVER,
        principal,
        scope,
        expires_at: Some(5_000),
        updated_at: 1_000,
        secret,
    }
}

fn grants_contract(store: &dyn Store) {
    let tokens = GrantSecret::new(TOKENS.to_owned());
    assert_eq!(store.grant(SERVER, "").unwrap(), None);
    store.put_grant(&grant("", "docs:read", &tokens)).unwrap();
    let kept = store.grant(SERVER, "").unwrap().unwrap();
    assert_eq!(kept.info.seal, Seal::Valid);
    assert_eq!(kept.info.scope, "docs:read");
    assert_eq!(kept.info.expires_at, Some(5_000));
    assert_eq!(kept.secret.as_ref().map(GrantSecret::expose), Some(TOKENS));

    // One principal's grant never answers for another's.
    assert_eq!(store.grant(SERVER, "alice").unwrap(), None);
    assert_eq!(store.grant("https://docs.example/other", "").unwrap(), None);
    let alices = GrantSecret::new("alice-tokens".to_owned());
    store
        .put_grant(&NewGrant {
            expires_at: None,
            ..grant("alice", "docs:read docs:write", &alices)
        })
        .unwrap();
    let alice = store.grant(SERVER, "alice").unwrap().unwrap();
    assert_eq!(alice.secret, Some(alices));
    assert_eq!(alice.info.expires_at, None);
    assert_eq!(
        store.grant(SERVER, "").unwrap().unwrap().secret,
        Some(tokens)
    );

    // A refresh replaces the grant.
    let refreshed = GrantSecret::new("refreshed".to_owned());
    store
        .put_grant(&NewGrant {
            expires_at: Some(9_000),
            updated_at: 4_000,
            ..grant("", "docs:read", &refreshed)
        })
        .unwrap();
    let kept = store.grant(SERVER, "").unwrap().unwrap();
    assert_eq!(
        (kept.info.expires_at, kept.info.updated_at, kept.secret),
        (Some(9_000), 4_000, Some(refreshed))
    );

    // The list shows what may be shown, by server then principal.
    let listed = store.grants().unwrap();
    let shown: Vec<_> = listed
        .iter()
        .map(|info| (info.principal.as_str(), info.scope.as_str(), info.seal))
        .collect();
    assert_eq!(
        shown,
        [
            ("", "docs:read", Seal::Valid),
            ("alice", "docs:read docs:write", Seal::Valid)
        ]
    );
    assert!(!format!("{listed:?}").contains("refreshed"));

    // Deleted once.
    assert!(store.delete_grant(SERVER, "").unwrap());
    assert!(!store.delete_grant(SERVER, "").unwrap());
    assert_eq!(store.grant(SERVER, "").unwrap(), None);
    assert!(store.grant(SERVER, "alice").unwrap().is_some());
}

#[test]
fn every_store_keeps_one_grant_per_server_and_principal() {
    super::on_every_store(grants_contract);
}

#[test]
fn a_grant_written_changed_or_moved_without_the_key_gives_no_token() {
    super::row_attacks::on_both(|store, raw| {
        let tokens = GrantSecret::new(TOKENS.to_owned());
        store
            .put_grant(&grant("alice", "docs:read", &tokens))
            .unwrap();
        store
            .put_grant(&grant("bob", "docs:read", &tokens))
            .unwrap();

        // Stretching alice's expiry or widening her scopes breaks the seal.
        raw.execute(
            "UPDATE {s}upstream_grants SET expires_at = 9999999999 WHERE principal = 'alice'",
        );
        let kept = store.grant(SERVER, "alice").unwrap().unwrap();
        assert_eq!((kept.info.seal, kept.secret), (Seal::Broken, None));
        raw.execute(
            "UPDATE {s}upstream_grants SET expires_at = 5000, scope = 'admin' WHERE principal = 'bob'",
        );
        let kept = store.grant(SERVER, "bob").unwrap().unwrap();
        assert_eq!((kept.info.seal, kept.secret), (Seal::Broken, None));

        // Bob's row, seal and all, copied over as carol's: no token (the
        // seal and the ciphertext name bob).
        store
            .put_grant(&grant("bob", "docs:read", &tokens))
            .unwrap();
        raw.execute(
            "INSERT INTO {s}upstream_grants (server, principal, scope, expires_at, updated_at, secret, tag)
             SELECT server, 'carol', scope, expires_at, updated_at, secret, tag
             FROM {s}upstream_grants WHERE principal = 'bob'",
        );
        let kept = store.grant(SERVER, "carol").unwrap().unwrap();
        assert_eq!((kept.info.seal, kept.secret), (Seal::Broken, None));
        // Bob's own still works.
        assert_eq!(
            store.grant(SERVER, "bob").unwrap().unwrap().info.seal,
            Seal::Valid
        );

        // A row made up whole, with a seal of the attacker's.
        let secret = raw.bytes_literal(&[0u8; 40]);
        raw.execute(&format!(
            "INSERT INTO {{s}}upstream_grants (server, principal, scope, expires_at, updated_at, secret, tag)
             VALUES ('{SERVER}', 'mallory', 'docs:read', NULL, 1, {secret}, 'deadbeef')"
        ));
        let kept = store.grant(SERVER, "mallory").unwrap().unwrap();
        assert_eq!((kept.info.seal, kept.secret), (Seal::Broken, None));

        // The list reports what is broken.
        let seals: Vec<_> = store
            .grants()
            .unwrap()
            .into_iter()
            .map(|info| (info.principal, info.seal))
            .collect();
        assert_eq!(
            seals,
            [
                ("alice".to_owned(), Seal::Broken),
                ("bob".to_owned(), Seal::Valid),
                ("carol".to_owned(), Seal::Broken),
                ("mallory".to_owned(), Seal::Broken),
            ]
        );
    });
}

#[test]
fn no_token_is_kept_in_clear() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = SqliteStore::open(&path).unwrap();
    let tokens = GrantSecret::new(TOKENS.to_owned());
    store.put_grant(&grant("", "docs:read", &tokens)).unwrap();
    drop(store);
    let mut bytes = std::fs::read(&path).unwrap();
    for extra in ["state.db-wal", "state.db-journal"] {
        if let Ok(more) = std::fs::read(dir.path().join(extra)) {
            bytes.extend(more);
        }
    }
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.contains("docs:read"), "the scope is shown in clear");
    assert!(!text.contains("never-shown"), "a token is in the file");

    if let Some(url) = hintgate_store::test_util::postgres_database() {
        let store = super::keyed_pg(&url);
        store.put_grant(&grant("", "docs:read", &tokens)).unwrap();
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let row = client
            .query_one(
                "SELECT row_to_json(g)::text, encode(secret, 'escape') FROM hintgate.upstream_grants g",
                &[],
            )
            .unwrap();
        for column in [row.get::<_, String>(0), row.get::<_, String>(1)] {
            assert!(
                !column.contains("never-shown"),
                "a token is in the database"
            );
        }
    }
}
