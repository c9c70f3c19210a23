//! OAuth 2.1 access tokens from the team's own authorization server, as the
//! MCP authorization spec asks of an HTTP server: the gateway is a resource
//! server. It publishes its Protected Resource Metadata, names it in the
//! `WWW-Authenticate` of a 401, and takes a JWT only when its signature
//! verifies under a key of the issuer's JWKS (ES256 or RS256: the algorithm
//! comes from the key, never from the token alone; `none` never), its `iss`
//! is the issuer, its `aud` is this gateway, and it has not expired. The
//! token's `scope` claim gives the session its [`Scope`]: the configured
//! write scope gives write, the read scope read, neither nothing.
//!
//! The keys are fetched when the gateway starts and again every ten
//! minutes, and at once (at most every ten seconds) when a token names a
//! key that is not among them.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use ring::signature::{self, UnparsedPublicKey};
use serde_json::Value;

use crate::{Authenticate, Principal, Scope};

/// How long a token may be past its `exp` (clocks differ a little).
const LEEWAY_S: i64 = 60;

/// How often the keys are fetched again.
const REFRESH: Duration = Duration::from_secs(600);

/// The largest JWKS document read.
const MAX_JWKS_BYTES: usize = 1024 * 1024;

/// The least time between two fetches asked for by an unknown key.
const MIN_REFETCH: Duration = Duration::from_secs(10);

/// The resource server's settings.
#[derive(Debug, Clone)]
pub struct OAuthSettings {
    /// The authorization server's issuer identifier (`iss`).
    pub issuer: String,
    /// Where its JSON Web Key Set is.
    pub jwks_url: String,
    /// This gateway's canonical URL: the `aud` a token must carry, and the
    /// `resource` of its metadata.
    pub audience: String,
    /// The scope that gives read.
    pub read_scope: String,
    /// The scope that gives write.
    pub write_scope: String,
}

/// A verification key of the issuer.
#[derive(Debug, Clone)]
enum Key {
    /// P-256, as the uncompressed point.
    Es256(Vec<u8>),
    /// RSA, modulus and exponent.
    Rs256 { n: Vec<u8>, e: Vec<u8> },
}

/// Access tokens checked against the issuer's keys.
#[derive(Debug)]
pub struct OAuth {
    settings: OAuthSettings,
    keys: RwLock<HashMap<String, Key>>,
    /// When the keys were last fetched, and whether a fetch was asked for.
    fetched: RwLock<Option<Instant>>,
    wanted: tokio::sync::Notify,
}

fn b64(text: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text.trim_end_matches('='))
        .ok()
}

impl OAuth {
    /// A resource server for `settings`, with no keys yet: call
    /// [`OAuth::refresh`] (and keep [`OAuth::keep_fresh`] running).
    pub fn new(settings: OAuthSettings) -> Arc<Self> {
        Arc::new(Self {
            settings,
            keys: RwLock::new(HashMap::new()),
            fetched: RwLock::new(None),
            wanted: tokio::sync::Notify::new(),
        })
    }

    /// The settings.
    pub fn settings(&self) -> &OAuthSettings {
        &self.settings
    }

    /// Takes the keys of a JWKS document; returns how many it kept (keys of
    /// another type or use, or without `kid`, are left out).
    pub fn set_jwks(&self, jwks: &Value) -> usize {
        let mut keys = HashMap::new();
        for jwk in jwks
            .get("keys")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let text = |name: &str| jwk.get(name).and_then(Value::as_str);
            if text("use").is_some_and(|usage| usage != "sig") {
                continue;
            }
            let Some(kid) = text("kid") else { continue };
            let key = match (text("kty"), text("crv")) {
                (Some("EC"), Some("P-256")) => {
                    let (Some(x), Some(y)) = (text("x").and_then(b64), text("y").and_then(b64))
                    else {
                        continue;
                    };
                    if x.len() != 32 || y.len() != 32 {
                        continue;
                    }
                    let mut point = vec![4];
                    point.extend(x);
                    point.extend(y);
                    Key::Es256(point)
                }
                (Some("RSA"), _) => {
                    let (Some(n), Some(e)) = (text("n").and_then(b64), text("e").and_then(b64))
                    else {
                        continue;
                    };
                    Key::Rs256 { n, e }
                }
                _ => continue,
            };
            keys.insert(kid.to_owned(), key);
        }
        let count = keys.len();
        if let Ok(mut held) = self.keys.write() {
            *held = keys;
        }
        if let Ok(mut fetched) = self.fetched.write() {
            *fetched = Some(Instant::now());
        }
        count
    }

    /// Fetches the JWKS now.
    ///
    /// # Errors
    ///
    /// What went wrong, in words.
    pub async fn refresh(&self, client: &reqwest::Client) -> Result<usize, String> {
        let response = client
            .get(&self.settings.jwks_url)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(|err| format!("cannot fetch the JWKS at {}: {err}", self.settings.jwks_url))?;
        if !response.status().is_success() {
            return Err(format!(
                "the JWKS at {} answered {}",
                self.settings.jwks_url,
                response.status()
            ));
        }
        // A key set is small: a larger answer is not read whole.
        let mut response = response;
        let mut bytes = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|err| format!("cannot read the JWKS at {}: {err}", self.settings.jwks_url))?
        {
            bytes.extend_from_slice(&chunk);
            if bytes.len() > MAX_JWKS_BYTES {
                return Err(format!(
                    "the JWKS at {} is larger than {MAX_JWKS_BYTES} bytes",
                    self.settings.jwks_url
                ));
            }
        }
        let jwks: Value = serde_json::from_slice(&bytes)
            .map_err(|err| format!("the JWKS at {} is not JSON: {err}", self.settings.jwks_url))?;
        Ok(self.set_jwks(&jwks))
    }

    /// Fetches the keys every ten minutes, and when a token named an
    /// unknown key (at most every ten seconds); runs until the runtime ends.
    pub async fn keep_fresh(self: Arc<Self>, client: reqwest::Client) {
        loop {
            tokio::select! {
                () = tokio::time::sleep(REFRESH) => {}
                () = self.wanted.notified() => {
                    let recent = self
                        .fetched
                        .read()
                        .ok()
                        .and_then(|at| *at)
                        .is_some_and(|at| at.elapsed() < MIN_REFETCH);
                    if recent {
                        tokio::time::sleep(MIN_REFETCH).await;
                    }
                }
            }
            if let Err(err) = self.refresh(&client).await {
                tracing::warn!("{err}; the keys fetched before stay in use");
            }
        }
    }

    /// The Protected Resource Metadata (RFC 9728) of this gateway.
    pub fn metadata(&self) -> Value {
        serde_json::json!({
            "resource": self.settings.audience,
            "authorization_servers": [self.settings.issuer],
            "scopes_supported": [self.settings.read_scope, self.settings.write_scope],
            "bearer_methods_supported": ["header"],
        })
    }

    /// The claims of `token` when it is a JWT this gateway takes.
    fn verify(&self, token: &str) -> Result<Value, &'static str> {
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(sig), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err("not a JWT");
        };
        let header: Value = b64(header)
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .ok_or("the header is not JSON")?;
        let signature_bytes = b64(sig).ok_or("the signature is not base64url")?;
        let kid = header.get("kid").and_then(Value::as_str).ok_or("no kid")?;
        let alg = header.get("alg").and_then(Value::as_str).unwrap_or("");
        let key = self
            .keys
            .read()
            .ok()
            .and_then(|keys| keys.get(kid).cloned());
        let Some(key) = key else {
            self.wanted.notify_one();
            return Err("an unknown key");
        };
        let signed = format!("{}.{}", token.split('.').next().unwrap_or(""), payload);
        // The key decides the algorithm; a token that says another is
        // refused (no `none`, no HMAC with a public key as its secret).
        let verified = match (&key, alg) {
            (Key::Es256(point), "ES256") => {
                UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                    .verify(signed.as_bytes(), &signature_bytes)
                    .is_ok()
            }
            (Key::Rs256 { n, e }, "RS256") => signature::RsaPublicKeyComponents { n, e }
                .verify(
                    &signature::RSA_PKCS1_2048_8192_SHA256,
                    signed.as_bytes(),
                    &signature_bytes,
                )
                .is_ok(),
            _ => false,
        };
        if !verified {
            return Err("the signature does not verify");
        }
        let claims: Value = b64(payload)
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .ok_or("the claims are not JSON")?;
        if claims.get("iss").and_then(Value::as_str) != Some(self.settings.issuer.as_str()) {
            return Err("another issuer");
        }
        let audience = self.settings.audience.as_str();
        let for_us = match claims.get("aud") {
            Some(Value::String(aud)) => aud == audience,
            Some(Value::Array(auds)) => auds.iter().any(|aud| aud.as_str() == Some(audience)),
            _ => false,
        };
        if !for_us {
            return Err("issued for another resource");
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| {
                i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
            });
        let exp = claims
            .get("exp")
            .and_then(Value::as_i64)
            .ok_or("no expiry")?;
        if now > exp.saturating_add(LEEWAY_S) {
            return Err("expired");
        }
        if claims
            .get("nbf")
            .and_then(Value::as_i64)
            .is_some_and(|nbf| now.saturating_add(LEEWAY_S) < nbf)
        {
            return Err("not valid yet");
        }
        Ok(claims)
    }
}

impl Authenticate for OAuth {
    fn authenticate(&self, token: &str) -> Option<Principal> {
        let claims = match self.verify(token) {
            Ok(claims) => claims,
            Err(why) => {
                tracing::info!("an access token was refused: {why}");
                return None;
            }
        };
        let scopes: Vec<&str> = claims
            .get("scope")
            .and_then(Value::as_str)
            .unwrap_or("")
            .split(' ')
            .collect();
        let scope = if scopes.contains(&self.settings.write_scope.as_str()) {
            Scope::Write
        } else if scopes.contains(&self.settings.read_scope.as_str()) {
            Scope::Read
        } else {
            tracing::info!(
                "an access token was refused: it has neither the read nor the write scope"
            );
            return None;
        };
        let subject = claims
            .get("sub")
            .and_then(Value::as_str)
            .unwrap_or("unknown");
        Some(Principal {
            name: format!("oauth:{subject}"),
            scope,
        })
    }
}

/// Tries each way of authenticating in turn: static tokens, then access
/// tokens.
pub struct Either {
    /// The first to try.
    pub first: Arc<dyn Authenticate>,
    /// The second.
    pub second: Arc<dyn Authenticate>,
}

impl std::fmt::Debug for Either {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Either")
    }
}

impl Authenticate for Either {
    fn authenticate(&self, token: &str) -> Option<Principal> {
        self.first
            .authenticate(token)
            .or_else(|| self.second.authenticate(token))
    }

    fn authenticate_now(&self, token: &str) -> Option<Option<Principal>> {
        // The second is asked only after the first said no; a first that
        // would wait, or a no, goes the waiting way for both.
        self.first.authenticate_now(token)?.map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{EcdsaKeyPair, KeyPair as _};

    fn enc(bytes: &[u8]) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    }

    struct Issuer {
        pair: EcdsaKeyPair,
        rng: SystemRandom,
    }

    impl Issuer {
        fn new() -> Self {
            let rng = SystemRandom::new();
            let pkcs8 =
                EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
                    .unwrap();
            let pair = EcdsaKeyPair::from_pkcs8(
                &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
                pkcs8.as_ref(),
                &rng,
            )
            .unwrap();
            Self { pair, rng }
        }

        fn jwks(&self, kid: &str) -> Value {
            let point = self.pair.public_key().as_ref();
            serde_json::json!({"keys": [{"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig",
                "x": enc(&point[1..33]), "y": enc(&point[33..65])}]})
        }

        fn sign(&self, header: &Value, claims: &Value) -> String {
            let signed = format!(
                "{}.{}",
                enc(header.to_string().as_bytes()),
                enc(claims.to_string().as_bytes())
            );
            let sig = self.pair.sign(&self.rng, signed.as_bytes()).unwrap();
            format!("{signed}.{}", enc(sig.as_ref()))
        }
    }

    fn server(issuer: &Issuer) -> Arc<OAuth> {
        let oauth = OAuth::new(OAuthSettings {
            issuer: "https://as.example".to_owned(),
            jwks_url: "http://unused".to_owned(),
            audience: "https://gw.example/mcp".to_owned(),
            read_scope: "mcp:read".to_owned(),
            write_scope: "mcp:write".to_owned(),
        });
        assert_eq!(oauth.set_jwks(&issuer.jwks("k1")), 1);
        oauth
    }

    fn claims(scope: &str) -> Value {
        serde_json::json!({"iss": "https://as.example", "aud": "https://gw.example/mcp",
            "sub": "alice", "scope": scope, "exp": 4_102_444_800_i64})
    }

    #[test]
    fn a_token_of_the_issuer_for_this_gateway_gives_its_scope() {
        let issuer = Issuer::new();
        let oauth = server(&issuer);
        let header = serde_json::json!({"alg": "ES256", "kid": "k1", "typ": "JWT"});
        let read = oauth
            .authenticate(&issuer.sign(&header, &claims("openid mcp:read")))
            .unwrap();
        assert_eq!(
            (read.name.as_str(), read.scope),
            ("oauth:alice", Scope::Read)
        );
        let write = oauth
            .authenticate(&issuer.sign(&header, &claims("mcp:read mcp:write")))
            .unwrap();
        assert_eq!(write.scope, Scope::Write);
        assert!(
            oauth
                .authenticate(&issuer.sign(&header, &claims("openid")))
                .is_none()
        );
    }

    #[test]
    fn forged_expired_foreign_and_algorithm_swapped_tokens_are_refused() {
        let issuer = Issuer::new();
        let oauth = server(&issuer);
        let header = serde_json::json!({"alg": "ES256", "kid": "k1"});
        let good = issuer.sign(&header, &claims("mcp:write"));
        assert!(oauth.authenticate(&good).is_some());
        // Another key, same kid.
        let other = Issuer::new();
        assert!(
            oauth
                .authenticate(&other.sign(&header, &claims("mcp:write")))
                .is_none()
        );
        // A claim changed after signing.
        let mut parts: Vec<String> = good.split('.').map(str::to_owned).collect();
        let mut raised = claims("mcp:write");
        raised["sub"] = Value::from("mallory");
        parts[1] = enc(raised.to_string().as_bytes());
        assert!(oauth.authenticate(&parts.join(".")).is_none());
        // `none`, and an algorithm the key does not have.
        for alg in ["none", "HS256", "RS256"] {
            let header = serde_json::json!({"alg": alg, "kid": "k1"});
            assert!(
                oauth
                    .authenticate(&issuer.sign(&header, &claims("mcp:write")))
                    .is_none(),
                "{alg}"
            );
        }
        let unsigned = format!(
            "{}.{}.",
            enc(serde_json::json!({"alg": "none", "kid": "k1"})
                .to_string()
                .as_bytes()),
            enc(claims("mcp:write").to_string().as_bytes())
        );
        assert!(oauth.authenticate(&unsigned).is_none());
        // Expired, another issuer, another audience, an unknown key.
        let mut expired = claims("mcp:write");
        expired["exp"] = Value::from(1_000);
        assert!(
            oauth
                .authenticate(&issuer.sign(&header, &expired))
                .is_none()
        );
        let mut foreign = claims("mcp:write");
        foreign["iss"] = Value::from("https://evil.example");
        assert!(
            oauth
                .authenticate(&issuer.sign(&header, &foreign))
                .is_none()
        );
        let mut elsewhere = claims("mcp:write");
        elsewhere["aud"] = serde_json::json!(["https://other.example/mcp"]);
        assert!(
            oauth
                .authenticate(&issuer.sign(&header, &elsewhere))
                .is_none()
        );
        let mut no_exp = claims("mcp:write");
        no_exp.as_object_mut().unwrap().remove("exp");
        assert!(oauth.authenticate(&issuer.sign(&header, &no_exp)).is_none());
        let unknown = serde_json::json!({"alg": "ES256", "kid": "k2"});
        assert!(
            oauth
                .authenticate(&issuer.sign(&unknown, &claims("mcp:write")))
                .is_none()
        );
    }

    /// A way of authenticating by a table: each token's principal, and
    /// whether it answers without waiting.
    struct Table {
        known: &'static [(&'static str, &'static str)],
        at_once: bool,
    }

    impl Authenticate for Table {
        fn authenticate(&self, token: &str) -> Option<Principal> {
            self.known
                .iter()
                .find(|(known, _)| *known == token)
                .map(|(_, name)| Principal {
                    name: (*name).to_owned(),
                    scope: Scope::Write,
                })
        }

        fn authenticate_now(&self, token: &str) -> Option<Option<Principal>> {
            self.at_once.then(|| self.authenticate(token))
        }
    }

    #[test]
    fn either_answers_at_once_only_with_the_firsts_yes_and_otherwise_asks_both_the_waiting_way() {
        let either = |at_once| Either {
            first: Arc::new(Table {
                known: &[("static", "ci")],
                at_once,
            }),
            second: Arc::new(Table {
                known: &[("access", "oauth:alice")],
                at_once: true,
            }),
        };
        let name = |principal: Option<Principal>| principal.map(|principal| principal.name);
        let now = either(true);
        assert_eq!(
            now.authenticate_now("static").map(name),
            Some(Some("ci".to_owned()))
        );
        // The first's no is not the answer: the second is asked, the
        // waiting way.
        assert_eq!(now.authenticate_now("access").map(name), None);
        assert_eq!(
            name(now.authenticate("access")),
            Some("oauth:alice".to_owned())
        );
        assert_eq!(now.authenticate_now("nobody").map(name), None);
        assert_eq!(name(now.authenticate("nobody")), None);
        // A first that would wait: nothing at once.
        assert_eq!(either(false).authenticate_now("static").map(name), None);
    }
}
