//! The flow against a scripted HTTP client and a clock that only moves when
//! told: every check and every attack, without a network.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hintgate_oauth::challenge::parse_www_authenticate;
use hintgate_oauth::flow::{
    self, AuthorizationRequest, NextStep, Pkce, RefusalGuard, TokenSet, choose_scopes,
    parse_redirect, parse_token_response,
};
use hintgate_oauth::loopback::RedirectListener;
use hintgate_oauth::metadata::{self, ResourceMetadata, ServerMetadata};
use hintgate_oauth::register::{
    self, Client, ClientSettings, RegistrationPlan, SecretSource, TokenAuth,
};
use hintgate_oauth::{Clock, HttpClient, HttpRequest, HttpResponse, Method, OAuthError, Secret};
use serde_json::json;

const TOKEN: &str = "at-SECRET-1111";
const REFRESH: &str = "rt-SECRET-2222";

#[derive(Default)]
struct FakeHttp {
    routes: Mutex<Vec<(Method, String, VecDeque<HttpResponse>)>>,
    log: Mutex<Vec<HttpRequest>>,
}

fn json_response(status: u16, body: serde_json::Value) -> HttpResponse {
    HttpResponse {
        status,
        headers: vec![("content-type".into(), "application/json".into())],
        body: body.to_string().into_bytes(),
    }
}

impl FakeHttp {
    fn on(&self, method: Method, url: &str, response: HttpResponse) -> &Self {
        let mut routes = self.routes.lock().unwrap();
        if let Some(r) = routes.iter_mut().find(|(m, u, _)| *m == method && u == url) {
            r.2.push_back(response);
        } else {
            routes.push((method, url.to_owned(), VecDeque::from([response])));
        }
        self
    }
    fn get(&self, url: &str, body: serde_json::Value) -> &Self {
        self.on(Method::Get, url, json_response(200, body))
    }
    fn post(&self, url: &str, status: u16, body: serde_json::Value) -> &Self {
        self.on(Method::Post, url, json_response(status, body))
    }
    fn requests(&self) -> Vec<HttpRequest> {
        self.log.lock().unwrap().clone()
    }
    fn urls(&self) -> Vec<String> {
        self.requests().into_iter().map(|r| r.url).collect()
    }
}

impl HttpClient for FakeHttp {
    fn send(
        &self,
        request: HttpRequest,
    ) -> impl Future<Output = Result<HttpResponse, OAuthError>> + Send {
        self.log.lock().unwrap().push(request.clone());
        let mut routes = self.routes.lock().unwrap();
        let response = routes
            .iter_mut()
            .find(|(m, u, _)| *m == request.method && *u == request.url)
            .map(|r| {
                // The last response repeats.
                if r.2.len() > 1 {
                    r.2.pop_front().unwrap()
                } else {
                    r.2.front().unwrap().clone()
                }
            })
            .unwrap_or(HttpResponse {
                status: 404,
                headers: vec![],
                body: vec![],
            });
        std::future::ready(Ok(response))
    }
}

#[derive(Default)]
struct FakeClock {
    now: AtomicU64,
    slept: Mutex<Vec<u64>>,
}

impl Clock for FakeClock {
    fn now(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
    fn sleep(&self, d: Duration) -> impl Future<Output = ()> + Send {
        self.now.fetch_add(d.as_secs(), Ordering::SeqCst);
        self.slept.lock().unwrap().push(d.as_secs());
        std::future::ready(())
    }
}

fn clock_at(t: u64) -> FakeClock {
    let c = FakeClock::default();
    c.now.store(t, Ordering::SeqCst);
    c
}

const SERVER: &str = "https://mcp.example/mcp";
const ISSUER: &str = "https://auth.example";

fn as_metadata() -> serde_json::Value {
    json!({
        "issuer": ISSUER,
        "authorization_endpoint": "https://auth.example/authorize",
        "token_endpoint": "https://auth.example/token",
        "registration_endpoint": "https://auth.example/register",
        "device_authorization_endpoint": "https://auth.example/device",
        "revocation_endpoint": "https://auth.example/revoke",
        "scopes_supported": ["files:read", "files:write", "offline_access"],
        "grant_types_supported": ["authorization_code", "refresh_token",
            "urn:ietf:params:oauth:grant-type:device_code", "client_credentials"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none", "client_secret_basic"],
    })
}

fn server_meta() -> ServerMetadata {
    serde_json::from_value(as_metadata()).unwrap()
}

fn resource_meta() -> ResourceMetadata {
    ResourceMetadata {
        resource: SERVER.into(),
        authorization_servers: vec![ISSUER.into()],
        scopes_supported: Some(vec!["files:read".into()]),
    }
}

fn public_client() -> Client {
    Client {
        client_id: "cid".into(),
        client_secret: None,
        auth: TokenAuth::None,
        redirect_uri: Some("http://127.0.0.1:4567/callback".into()),
    }
}

fn token_body() -> serde_json::Value {
    json!({"access_token": TOKEN, "token_type": "bearer", "expires_in": 3600,
           "refresh_token": REFRESH, "scope": "files:read offline_access"})
}

fn request_for(meta: &ServerMetadata) -> AuthorizationRequest {
    flow::authorization_request(
        meta,
        &public_client(),
        SERVER,
        &["files:read".to_owned()],
        "http://127.0.0.1:4567/callback",
        Pkce::from_verifier(Secret::new("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk")),
        Secret::new("state-123"),
    )
    .unwrap()
}

fn form_of(r: &HttpRequest) -> std::collections::HashMap<String, String> {
    r.form().into_iter().collect()
}

#[tokio::test]
async fn full_flow_discovers_registers_authorizes_and_exchanges() {
    let http = FakeHttp::default();
    http.get(
        "https://mcp.example/.well-known/oauth-protected-resource/mcp",
        json!({"resource": SERVER, "authorization_servers": [ISSUER], "scopes_supported": ["files:read"]}),
    )
    .get("https://auth.example/.well-known/oauth-authorization-server", as_metadata())
    .post("https://auth.example/register", 201, json!({"client_id": "dyn-1", "redirect_uris": ["http://127.0.0.1:4567/callback"]}))
    .post("https://auth.example/token", 200, token_body());
    let clock = clock_at(1_000);

    let challenge = parse_www_authenticate(&["Bearer error=\"invalid_token\""]);
    let resource = metadata::discover_resource(&http, SERVER, None)
        .await
        .unwrap();
    let issuer = metadata::choose_issuer(&resource, None).unwrap();
    let meta = metadata::discover_server(&http, &resource, &issuer)
        .await
        .unwrap();
    let redirect = "http://127.0.0.1:4567/callback";
    let settings = ClientSettings {
        client_name: "hintgate".into(),
        ..Default::default()
    };
    let plan = register::plan_registration(&settings, &meta, Some(redirect)).unwrap();
    let RegistrationPlan::Dynamic { endpoint } = plan else {
        panic!("{plan:?}")
    };
    let client = register::register_dynamic(
        &http,
        &endpoint,
        &meta,
        "hintgate",
        Some(redirect),
        &["authorization_code", "refresh_token"],
        None,
    )
    .await
    .unwrap();
    assert_eq!(client.client_id, "dyn-1");
    assert_eq!(client.auth, TokenAuth::None);

    let scopes = choose_scopes(None, challenge.as_ref(), &resource, &meta, true);
    assert_eq!(scopes, ["files:read", "offline_access"]);
    let request = flow::authorization_request(
        &meta,
        &client,
        &resource.resource,
        &scopes,
        redirect,
        Pkce::generate().unwrap(),
        flow::random_value().unwrap(),
    )
    .unwrap();
    let url = url::Url::parse(&request.url).unwrap();
    let q: std::collections::HashMap<String, String> = url.query_pairs().into_owned().collect();
    assert_eq!(q["response_type"], "code");
    assert_eq!(q["client_id"], "dyn-1");
    assert_eq!(q["code_challenge_method"], "S256");
    assert_eq!(q["resource"], SERVER);
    assert_eq!(q["scope"], "files:read offline_access");
    assert_eq!(q["redirect_uri"], redirect);
    assert_eq!(q["code_challenge"], request.pkce.challenge);
    assert_eq!(q["state"], request.state.expose());

    let query = format!("code=the-code&state={}", request.state.expose());
    let code = parse_redirect(&query, &request).unwrap();
    let tokens = flow::exchange_code(&http, &clock, &meta, &client, &request, &code)
        .await
        .unwrap();
    assert_eq!(tokens.access_token.expose(), TOKEN);
    assert_eq!(tokens.refresh_token.as_ref().unwrap().expose(), REFRESH);
    assert_eq!(tokens.expires_at, Some(4_600));
    assert_eq!(tokens.scopes, ["files:read", "offline_access"]);

    let exchange = http.requests().into_iter().last().unwrap();
    let form = form_of(&exchange);
    assert_eq!(form["grant_type"], "authorization_code");
    assert_eq!(form["code"], "the-code");
    assert_eq!(form["code_verifier"], request.pkce.verifier.expose());
    assert_eq!(form["resource"], SERVER);
    assert_eq!(form["client_id"], "dyn-1");
    let reg = &http.requests()[2];
    let body: serde_json::Value = serde_json::from_slice(&reg.body).unwrap();
    assert_eq!(body["token_endpoint_auth_method"], "none");
    assert_eq!(body["redirect_uris"], json!([redirect]));
}

#[test]
fn pkce_s256_matches_rfc_7636_example() {
    let p = Pkce::from_verifier(Secret::new("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"));
    assert_eq!(p.challenge, "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM");
    let fresh = Pkce::generate().unwrap();
    assert_eq!(fresh.verifier.expose().len(), 43);
    assert_ne!(fresh.verifier, Pkce::generate().unwrap().verifier);
}

#[tokio::test]
async fn resource_metadata_from_the_challenge_url_is_used_first() {
    let http = FakeHttp::default();
    http.get(
        "https://mcp.example/custom-prm",
        json!({"resource": SERVER, "authorization_servers": [ISSUER]}),
    );
    let r = metadata::discover_resource(&http, SERVER, Some("https://mcp.example/custom-prm"))
        .await
        .unwrap();
    assert_eq!(r.authorization_servers, [ISSUER]);
    assert_eq!(http.urls(), ["https://mcp.example/custom-prm"]);
}

#[tokio::test]
async fn resource_metadata_falls_back_to_the_root_well_known_url() {
    let http = FakeHttp::default();
    http.get(
        "https://mcp.example/.well-known/oauth-protected-resource",
        json!({"resource": SERVER, "authorization_servers": [ISSUER]}),
    );
    metadata::discover_resource(&http, SERVER, None)
        .await
        .unwrap();
    assert_eq!(
        http.urls(),
        [
            "https://mcp.example/.well-known/oauth-protected-resource/mcp",
            "https://mcp.example/.well-known/oauth-protected-resource"
        ]
    );
}

#[tokio::test]
async fn attack_metadata_pointing_to_another_resource_is_refused() {
    let http = FakeHttp::default();
    http.get(
        "https://mcp.example/.well-known/oauth-protected-resource/mcp",
        json!({"resource": "https://bank.example/api", "authorization_servers": ["https://bank-auth.example"]}),
    );
    let err = metadata::discover_resource(&http, SERVER, None)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "oauth-resource-mismatch");
    assert!(
        err.to_string().contains("https://bank.example/api"),
        "{err}"
    );
}

#[tokio::test]
async fn attack_authorization_server_not_named_by_the_resource_is_refused() {
    let http = FakeHttp::default();
    // The config (or anything else) offers another origin's issuer.
    let err = metadata::choose_issuer(&resource_meta(), Some("https://evil.example")).unwrap_err();
    assert_eq!(err.code(), "oauth-authorization-server-not-named");
    let evil = url::Url::parse("https://evil.example").unwrap();
    let err = metadata::discover_server(&http, &resource_meta(), &evil)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "oauth-authorization-server-not-named");
    assert!(
        http.urls().is_empty(),
        "nothing fetched from the unnamed server"
    );
    // The named server's metadata declares another origin as its issuer.
    let mut doc = as_metadata();
    doc["issuer"] = json!("https://evil.example");
    http.get(
        "https://auth.example/.well-known/oauth-authorization-server",
        doc,
    );
    let issuer = metadata::choose_issuer(&resource_meta(), None).unwrap();
    let err = metadata::discover_server(&http, &resource_meta(), &issuer)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "oauth-issuer-mismatch");
}

#[tokio::test]
async fn server_metadata_falls_back_to_openid_configuration() {
    let http = FakeHttp::default();
    http.get(
        "https://auth.example/.well-known/openid-configuration",
        as_metadata(),
    );
    let issuer = metadata::choose_issuer(&resource_meta(), None).unwrap();
    let meta = metadata::discover_server(&http, &resource_meta(), &issuer)
        .await
        .unwrap();
    assert_eq!(meta.token_endpoint, "https://auth.example/token");
    assert_eq!(http.urls().len(), 2);
}

#[tokio::test]
async fn attack_a_401_or_redirect_on_metadata_stops_discovery() {
    for status in [401u16, 302] {
        let http = FakeHttp::default();
        http.on(
            Method::Get,
            "https://mcp.example/.well-known/oauth-protected-resource/mcp",
            HttpResponse {
                status,
                headers: vec![
                    (
                        "www-authenticate".into(),
                        "Bearer resource_metadata=\"https://mcp.example/x\"".into(),
                    ),
                    ("location".into(), "https://169.254.169.254/".into()),
                ],
                body: vec![],
            },
        );
        let err = metadata::discover_resource(&http, SERVER, None)
            .await
            .unwrap_err();
        assert_eq!(err.code(), "oauth-unexpected-status");
        assert_eq!(http.urls().len(), 1, "no second fetch after {status}");
    }
}

#[test]
fn attack_a_401_loop_stops_after_one_token() {
    let challenge =
        || parse_www_authenticate(&["Bearer resource_metadata=\"https://mcp.example/prm\""]);
    // No token yet: authorize once; the fresh token refused too: stop.
    let mut guard = RefusalGuard::default();
    assert!(matches!(
        guard.after_refusal("docs", 401, challenge(), false, false),
        Ok(NextStep::Authorize(_))
    ));
    let err = guard
        .after_refusal("docs", 401, challenge(), true, true)
        .unwrap_err();
    assert_eq!(err.code(), "oauth-unauthorized-loop");
    // A stored token: refresh once, then a person must log in.
    let mut guard = RefusalGuard::default();
    assert_eq!(
        guard.after_refusal("docs", 401, challenge(), true, true),
        Ok(NextStep::Refresh)
    );
    let err = guard
        .after_refusal("docs", 401, challenge(), true, true)
        .unwrap_err();
    assert_eq!(err.code(), "oauth-login-required");
    assert!(err.to_string().contains("hintgate auth login docs"));
}

#[test]
fn step_up_is_never_granted_silently() {
    let c = parse_www_authenticate(&[r#"Bearer error="insufficient_scope", scope="files:write""#]);
    let mut guard = RefusalGuard::default();
    let err = guard.after_refusal("docs", 403, c, true, true).unwrap_err();
    assert_eq!(err.code(), "oauth-step-up-required");
    assert!(err.to_string().contains("files:write"));
    assert!(err.to_string().contains("auth login docs --scope"));
}

#[tokio::test]
async fn a_malformed_registration_response_does_not_quote_its_secret() {
    let http = FakeHttp::default();
    http.post(
        "https://auth.example/register",
        201,
        json!({"client_id": "x", "client_secret": 987_654_321}),
    );
    let err = register::register_dynamic(
        &http,
        "https://auth.example/register",
        &server_meta(),
        "hintgate",
        None,
        &["client_credentials"],
        None,
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), "oauth-malformed");
    assert!(!format!("{err} {err:?}").contains("987654321"));
}

#[test]
fn attack_redirect_to_a_non_loopback_uri_is_refused() {
    let meta = server_meta();
    let err = flow::authorization_request(
        &meta,
        &public_client(),
        SERVER,
        &[],
        "https://evil.example/callback",
        Pkce::generate().unwrap(),
        Secret::new("s"),
    )
    .unwrap_err();
    assert_eq!(err.code(), "oauth-redirect-not-loopback");
    let settings = ClientSettings {
        client_id: Some("c".into()),
        ..Default::default()
    };
    let err =
        register::plan_registration(&settings, &meta, Some("http://10.1.2.3:80/cb")).unwrap_err();
    assert_eq!(err.code(), "oauth-redirect-not-loopback");
}

#[tokio::test]
async fn attack_registration_that_swaps_the_redirect_uri_is_refused() {
    let http = FakeHttp::default();
    http.post(
        "https://auth.example/register",
        201,
        json!({"client_id": "x", "redirect_uris": ["https://evil.example/cb"]}),
    );
    let err = register::register_dynamic(
        &http,
        "https://auth.example/register",
        &server_meta(),
        "hintgate",
        Some("http://127.0.0.1:4567/callback"),
        &["authorization_code"],
        None,
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), "oauth-redirect-not-loopback");
}

#[test]
fn attack_state_mismatch_and_issuer_mismatch_on_the_redirect() {
    let request = request_for(&server_meta());
    for query in [
        "code=c&state=other",
        "code=c",
        "code=c&state=state-12",
        "code=c&state=state-123&state=state-123",
    ] {
        assert_eq!(
            parse_redirect(query, &request).unwrap_err(),
            OAuthError::StateMismatch,
            "{query}"
        );
    }
    assert_eq!(
        parse_redirect("code=c&state=state-123", &request)
            .unwrap()
            .expose(),
        "c"
    );
    let err = parse_redirect(
        "code=c&state=state-123&iss=https%3A%2F%2Fevil.example",
        &request,
    )
    .unwrap_err();
    assert_eq!(err.code(), "oauth-redirect-issuer-mismatch");
    assert!(
        parse_redirect(
            "code=c&state=state-123&iss=https%3A%2F%2Fauth.example%2F",
            &request
        )
        .is_ok()
    );
    let err = parse_redirect("error=access_denied&state=state-123", &request).unwrap_err();
    assert_eq!(
        err,
        OAuthError::AuthorizationDenied {
            error: "access_denied".into()
        }
    );
    assert_eq!(
        parse_redirect("state=state-123", &request).unwrap_err(),
        OAuthError::MissingCode
    );
    // A server that promised `iss` must send it.
    let mut doc = as_metadata();
    doc["authorization_response_iss_parameter_supported"] = json!(true);
    let request = request_for(&serde_json::from_value(doc).unwrap());
    let err = parse_redirect("code=c&state=state-123", &request).unwrap_err();
    assert_eq!(err.code(), "oauth-redirect-issuer-mismatch");
}

#[test]
fn attack_token_response_without_bearer_type_is_refused() {
    for body in [
        json!({"access_token": TOKEN}),
        json!({"access_token": TOKEN, "token_type": "mac"}),
        json!({"access_token": TOKEN, "token_type": "DPoP"}),
    ] {
        let err = parse_token_response(
            &json_response(200, body),
            "https://auth.example/token",
            0,
            &[],
        )
        .unwrap_err();
        assert_eq!(err.code(), "oauth-token-type-unsupported");
        assert!(!err.to_string().contains(TOKEN));
    }
    let err = parse_token_response(
        &json_response(200, json!({"token_type": "Bearer"})),
        "u",
        0,
        &[],
    )
    .unwrap_err();
    assert_eq!(err.code(), "oauth-malformed");
    // An error response: its code, never its description.
    let err = parse_token_response(
        &json_response(400, json!({"error": "invalid_grant", "error_description": format!("bad refresh token {REFRESH}")})),
        "u", 0, &[],
    )
    .unwrap_err();
    assert_eq!(
        err,
        OAuthError::TokenRefused {
            error: "invalid_grant".into()
        }
    );
    assert!(!format!("{err} {err:?}").contains(REFRESH));
    // A type mismatch in the body names no value.
    let err = parse_token_response(
        &json_response(
            200,
            json!({"access_token": [TOKEN], "token_type": "Bearer"}),
        ),
        "u",
        0,
        &[],
    )
    .unwrap_err();
    assert!(!format!("{err} {err:?}").contains(TOKEN));
}

#[tokio::test]
async fn refresh_rotates_or_keeps_the_refresh_token() {
    let http = FakeHttp::default();
    http.post("https://auth.example/token", 200, json!({"access_token": "at-2", "token_type": "Bearer", "expires_in": 60, "refresh_token": "rt-2"}))
        .post("https://auth.example/token", 200, json!({"access_token": "at-3", "token_type": "Bearer"}));
    let clock = clock_at(100);
    let meta = server_meta();
    let old = TokenSet {
        access_token: Secret::new(TOKEN),
        refresh_token: Some(Secret::new(REFRESH)),
        expires_at: Some(120),
        scopes: vec!["files:read".into()],
    };
    assert!(old.needs_refresh(100, 30));
    assert!(!old.needs_refresh(100, 10));
    let t2 = flow::refresh(&http, &clock, &meta, &public_client(), SERVER, &old)
        .await
        .unwrap();
    assert_eq!(t2.refresh_token.as_ref().unwrap().expose(), "rt-2");
    assert_eq!(t2.expires_at, Some(160));
    assert_eq!(t2.scopes, ["files:read"]);
    let form = form_of(&http.requests()[0]);
    assert_eq!(form["grant_type"], "refresh_token");
    assert_eq!(form["refresh_token"], REFRESH);
    assert_eq!(form["resource"], SERVER);
    assert!(
        !form.contains_key("scope"),
        "a refresh never asks for scopes"
    );
    let t3 = flow::refresh(&http, &clock, &meta, &public_client(), SERVER, &t2)
        .await
        .unwrap();
    assert_eq!(t3.access_token.expose(), "at-3");
    assert_eq!(
        t3.refresh_token.as_ref().unwrap().expose(),
        "rt-2",
        "kept when not rotated"
    );
    assert_eq!(form_of(&http.requests()[1])["refresh_token"], "rt-2");
}

#[tokio::test]
async fn device_grant_polls_through_pending_and_slow_down() {
    let http = FakeHttp::default();
    http.post(
        "https://auth.example/device",
        200,
        json!({
        "device_code": "dev-SECRET", "user_code": "WDJB-MJHT",
        "verification_uri": "https://auth.example/device", "expires_in": 600, "interval": 5}),
    )
    .post(
        "https://auth.example/token",
        400,
        json!({"error": "authorization_pending"}),
    )
    .post(
        "https://auth.example/token",
        400,
        json!({"error": "slow_down"}),
    )
    .post("https://auth.example/token", 200, token_body());
    let clock = clock_at(0);
    let meta = server_meta();
    let scopes = vec!["files:read".to_owned()];
    let device = flow::start_device(&http, &clock, &meta, &public_client(), SERVER, &scopes)
        .await
        .unwrap();
    assert_eq!(device.user_code, "WDJB-MJHT");
    assert!(!format!("{device:?}").contains("dev-SECRET"));
    let tokens = flow::poll_device(&http, &clock, &meta, &public_client(), &device)
        .await
        .unwrap();
    assert_eq!(tokens.access_token.expose(), TOKEN);
    assert_eq!(*clock.slept.lock().unwrap(), [5, 5, 10]);
    let form = form_of(&http.requests()[3]);
    assert_eq!(
        form["grant_type"],
        "urn:ietf:params:oauth:grant-type:device_code"
    );
    assert_eq!(form["device_code"], "dev-SECRET");
    assert_eq!(form_of(&http.requests()[0])["resource"], SERVER);
}

#[tokio::test]
async fn device_grant_expires_and_is_refused_where_not_offered() {
    let http = FakeHttp::default();
    http.post("https://auth.example/device", 200, json!({
        "device_code": "d", "user_code": "U", "verification_uri": "https://auth.example/device", "expires_in": 12}))
        .post("https://auth.example/token", 400, json!({"error": "authorization_pending"}));
    let clock = clock_at(0);
    let meta = server_meta();
    let device = flow::start_device(&http, &clock, &meta, &public_client(), SERVER, &[])
        .await
        .unwrap();
    let err = flow::poll_device(&http, &clock, &meta, &public_client(), &device)
        .await
        .unwrap_err();
    assert_eq!(err, OAuthError::DeviceExpired);
    let mut doc = as_metadata();
    doc.as_object_mut()
        .unwrap()
        .remove("device_authorization_endpoint");
    let meta: ServerMetadata = serde_json::from_value(doc).unwrap();
    let err = flow::start_device(&http, &clock, &meta, &public_client(), SERVER, &[])
        .await
        .unwrap_err();
    assert_eq!(err.code(), "oauth-grant-unsupported");
    // A verification URI a person would be sent to over plain http.
    let http = FakeHttp::default();
    http.post("https://auth.example/device", 200, json!({
        "device_code": "d", "user_code": "U", "verification_uri": "http://phish.example/", "expires_in": 12}));
    let err = flow::start_device(&http, &clock, &server_meta(), &public_client(), SERVER, &[])
        .await
        .unwrap_err();
    assert_eq!(err.code(), "oauth-invalid-url");
}

#[tokio::test]
async fn client_credentials_authenticate_with_basic_or_post() {
    let http = FakeHttp::default();
    http.post(
        "https://auth.example/token",
        200,
        json!({"access_token": TOKEN, "token_type": "Bearer"}),
    );
    let clock = clock_at(0);
    let mut meta = server_meta();
    let mut client = Client {
        client_id: "svc:1".into(),
        client_secret: Some(Secret::new("s3cret/+")),
        auth: register::token_auth_for(&meta, true),
        redirect_uri: None,
    };
    assert_eq!(client.auth, TokenAuth::ClientSecretBasic);
    flow::client_credentials(
        &http,
        &clock,
        &meta,
        &client,
        SERVER,
        &["files:read".into()],
    )
    .await
    .unwrap();
    let req = &http.requests()[0];
    // RFC 6749 §2.3.1: both parts form-encoded, then base64.
    assert_eq!(
        req.header("authorization"),
        Some("Basic c3ZjJTNBMTpzM2NyZXQlMkYlMkI=")
    );
    let form = form_of(req);
    assert_eq!(form["grant_type"], "client_credentials");
    assert_eq!(form["scope"], "files:read");
    assert!(!form.contains_key("client_secret"));
    meta.token_endpoint_auth_methods_supported = Some(vec!["client_secret_post".into()]);
    client.auth = register::token_auth_for(&meta, true);
    assert_eq!(client.auth, TokenAuth::ClientSecretPost);
    flow::client_credentials(&http, &clock, &meta, &client, SERVER, &[])
        .await
        .unwrap();
    let form = form_of(&http.requests()[1]);
    assert_eq!(form["client_secret"], "s3cret/+");
    assert_eq!(http.requests()[1].header("authorization"), None);
    client.client_secret = None;
    let err = flow::client_credentials(&http, &clock, &meta, &client, SERVER, &[])
        .await
        .unwrap_err();
    assert_eq!(err.code(), "oauth-secret-unavailable");
}

#[tokio::test]
async fn revocation_where_the_server_has_an_endpoint() {
    let http = FakeHttp::default();
    http.post("https://auth.example/revoke", 200, json!({}));
    let meta = server_meta();
    assert!(
        flow::revoke(
            &http,
            &meta,
            &public_client(),
            &Secret::new(REFRESH),
            "refresh_token"
        )
        .await
        .unwrap()
    );
    assert_eq!(form_of(&http.requests()[0])["token"], REFRESH);
    let mut meta = meta;
    meta.revocation_endpoint = None;
    assert!(
        !flow::revoke(
            &http,
            &meta,
            &public_client(),
            &Secret::new(REFRESH),
            "refresh_token"
        )
        .await
        .unwrap()
    );
}

#[test]
fn scopes_are_chosen_in_the_spec_order() {
    let meta = server_meta();
    let resource = resource_meta();
    let from_challenge = parse_www_authenticate(&["Bearer scope=\"a b\""]);
    let chosen = vec!["mine".to_owned()];
    assert_eq!(
        choose_scopes(
            Some(&chosen),
            from_challenge.as_ref(),
            &resource,
            &meta,
            false
        ),
        ["mine"]
    );
    assert_eq!(
        choose_scopes(None, from_challenge.as_ref(), &resource, &meta, false),
        ["a", "b"]
    );
    assert_eq!(
        choose_scopes(None, None, &resource, &meta, false),
        ["files:read"]
    );
    assert_eq!(
        choose_scopes(None, None, &resource, &meta, true),
        ["files:read", "offline_access"]
    );
    let mut bare = resource.clone();
    bare.scopes_supported = None;
    assert!(choose_scopes(None, None, &bare, &meta, false).is_empty());
    let mut no_offline = meta.clone();
    no_offline.scopes_supported = Some(vec!["files:read".into()]);
    assert_eq!(
        choose_scopes(None, None, &resource, &no_offline, true),
        ["files:read"]
    );
}

#[test]
fn registration_order_is_pre_registered_then_metadata_document_then_dynamic() {
    let mut meta = server_meta();
    meta.client_id_metadata_document_supported = Some(true);
    let cimd = "https://me.example/hintgate-client.json".to_owned();
    let both = ClientSettings {
        client_id: Some("pre".into()),
        client_metadata_url: Some(cimd.clone()),
        ..Default::default()
    };
    assert!(
        matches!(register::plan_registration(&both, &meta, None), Ok(RegistrationPlan::PreRegistered(c)) if c.client_id == "pre")
    );
    let only_cimd = ClientSettings {
        client_metadata_url: Some(cimd.clone()),
        ..Default::default()
    };
    assert!(
        matches!(register::plan_registration(&only_cimd, &meta, None), Ok(RegistrationPlan::MetadataDocument(c)) if c.client_id == cimd)
    );
    meta.client_id_metadata_document_supported = None;
    assert!(matches!(
        register::plan_registration(&only_cimd, &meta, None),
        Ok(RegistrationPlan::Dynamic { .. })
    ));
    meta.registration_endpoint = None;
    assert_eq!(
        register::plan_registration(&only_cimd, &meta, None)
            .unwrap_err()
            .code(),
        "oauth-no-registration"
    );
}

#[test]
fn client_secret_comes_from_a_private_file_or_the_environment() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = std::env::temp_dir().join(format!("hintgate-oauth-secret-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("secret");
    std::fs::write(&path, "  file-SECRET\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(
        SecretSource::File(path.clone()).load().unwrap().expose(),
        "file-SECRET"
    );
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = SecretSource::File(path.clone()).load().unwrap_err();
    assert_eq!(err.code(), "oauth-secret-unavailable");
    assert!(!err.to_string().contains("file-SECRET"));
    std::fs::remove_dir_all(&dir).unwrap();
    let err = SecretSource::Env("HINTGATE_OAUTH_TEST_UNSET_VARIABLE".into())
        .load()
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("HINTGATE_OAUTH_TEST_UNSET_VARIABLE")
    );
}

#[tokio::test]
async fn loopback_listener_ignores_a_wrong_state_and_takes_the_right_one() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = RedirectListener::bind(0).await.unwrap();
    let redirect = listener.redirect_uri().to_owned();
    assert!(redirect.starts_with("http://127.0.0.1:"));
    let meta = server_meta();
    let request = flow::authorization_request(
        &meta,
        &public_client(),
        SERVER,
        &[],
        &redirect,
        Pkce::generate().unwrap(),
        Secret::new("good-state"),
    )
    .unwrap();
    let addr = redirect
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let browser = tokio::spawn(async move {
        let mut statuses = Vec::new();
        for target in [
            "/favicon.ico",
            "/callback?code=evil&state=bad-state",
            "/callback?code=good&state=good-state",
        ] {
            let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
            s.write_all(format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
                .await
                .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            statuses.push(out.lines().next().unwrap().to_owned());
        }
        statuses
    });
    let code = listener
        .wait(&request, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(code.expose(), "good");
    assert_eq!(
        browser.await.unwrap(),
        [
            "HTTP/1.1 404 Not Found",
            "HTTP/1.1 400 Bad Request",
            "HTTP/1.1 200 OK"
        ]
    );
}

#[test]
fn no_type_that_holds_a_token_shows_it() {
    let tokens = TokenSet {
        access_token: Secret::new(TOKEN),
        refresh_token: Some(Secret::new(REFRESH)),
        expires_at: Some(1),
        scopes: vec!["files:read".into()],
    };
    let client = Client {
        client_id: "cid".into(),
        client_secret: Some(Secret::new("cs-SECRET-3333")),
        auth: TokenAuth::ClientSecretBasic,
        redirect_uri: None,
    };
    let request = request_for(&server_meta());
    let mut http_req =
        HttpRequest::post_form("https://auth.example/token", &[("refresh_token", REFRESH)]);
    http_req
        .headers
        .push(("authorization".into(), format!("Bearer {TOKEN}")));
    let http_resp = json_response(200, token_body());
    let plan = RegistrationPlan::PreRegistered(client.clone());
    let secret = Secret::new(TOKEN);
    let shown = [
        format!("{tokens:?}"),
        format!("{client:?}"),
        format!("{request:?}"),
        format!("{:?}", request.pkce),
        format!("{http_req:?}"),
        format!("{http_resp:?}"),
        format!("{plan:?}"),
        format!("{secret:?}"),
        format!("{secret}"),
    ];
    for s in &shown {
        for needle in [
            TOKEN,
            REFRESH,
            "cs-SECRET-3333",
            "state-123",
            "dBjftJeZ4CVP",
        ] {
            assert!(!s.contains(needle), "{needle} shown in {s}");
        }
    }
    assert!(
        shown[0].contains("files:read"),
        "scopes are shown: {}",
        shown[0]
    );
}

#[tokio::test]
async fn attack_resource_metadata_on_an_internal_address_is_not_fetched() {
    let http = FakeHttp::default();
    for target in [
        "https://169.254.169.254/latest/meta-data/iam",
        "https://10.0.0.5/prm",
        "https://192.168.1.1/prm",
        "https://[fd00::1]/prm",
        "https://[::ffff:169.254.169.254]/prm",
        "http://127.0.0.1:8080/prm",
    ] {
        let err = metadata::discover_resource(&http, SERVER, Some(target))
            .await
            .unwrap_err();
        assert_eq!(err.code(), "oauth-invalid-url", "{target}");
    }
    assert!(http.urls().is_empty(), "{:?}", http.urls());
    // A server on such an address may name its own metadata there.
    http.get(
        "http://127.0.0.1:8080/prm",
        json!({"resource": "http://127.0.0.1:8080/mcp", "authorization_servers": ["http://127.0.0.1:9000"]}),
    );
    metadata::discover_resource(
        &http,
        "http://127.0.0.1:8080/mcp",
        Some("http://127.0.0.1:8080/prm"),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn attack_authorization_server_on_an_internal_address_is_not_fetched() {
    let http = FakeHttp::default();
    let resource = ResourceMetadata {
        resource: SERVER.into(),
        authorization_servers: vec!["https://169.254.169.254".into()],
        scopes_supported: None,
    };
    let issuer = metadata::choose_issuer(&resource, None).unwrap();
    let err = metadata::discover_server(&http, &resource, &issuer)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "oauth-invalid-url");
    assert!(http.urls().is_empty(), "{:?}", http.urls());
}

#[tokio::test]
async fn loopback_listener_ends_the_login_after_16_wrong_states() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = RedirectListener::bind(0).await.unwrap();
    let redirect = listener.redirect_uri().to_owned();
    let request = flow::authorization_request(
        &server_meta(),
        &public_client(),
        SERVER,
        &[],
        &redirect,
        Pkce::generate().unwrap(),
        Secret::new("good-state"),
    )
    .unwrap();
    let addr = redirect
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let local = tokio::spawn(async move {
        // Each connection waits for its answer, so the listener has read
        // every one of them before the next is made.
        for _ in 0..17 {
            let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
            s.write_all(b"GET /callback?code=evil&state=bad HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            assert!(out.starts_with("HTTP/1.1 400"), "{out}");
        }
    });
    let err = listener
        .wait(&request, Duration::from_secs(60))
        .await
        .unwrap_err();
    assert_eq!(err, OAuthError::StateMismatch);
    local.await.unwrap();
}
