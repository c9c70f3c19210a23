//! A minimal MCP client over Streamable HTTP that signs in with
//! hintgate-oauth, for the official conformance suite's client
//! authorization scenarios (`conformance client --command ... --scenario
//! auth/...`). The suite appends the server's URL and sets
//! `MCP_CONFORMANCE_SCENARIO` and `MCP_CONFORMANCE_CONTEXT`.
//!
//! It plays the person's browser: it opens the authorization URL without
//! following redirects and delivers the redirect to its own loopback
//! listener, so the listener, the state check and the code exchange are the
//! ones a login uses. A step-up (403 `insufficient_scope`) is approved here
//! because this client stands for the person; the gateway never does that.

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use hintgate_oauth::challenge::{BearerChallenge, parse_www_authenticate};
use hintgate_oauth::flow::{self, NextStep, Pkce, RefusalGuard, TokenSet};
use hintgate_oauth::loopback::RedirectListener;
use hintgate_oauth::metadata::{self, ResourceMetadata, ServerMetadata};
use hintgate_oauth::register::{self, Client, ClientSettings, RegistrationPlan};
use hintgate_oauth::{
    HttpClient as _, HttpRequest, OAuthError, ReqwestClient, Secret, SystemClock,
};
use serde_json::{Value, json};

fn log(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

struct Session {
    server_url: String,
    context: Value,
    scenario: String,
    oauth: ReqwestClient,
    mcp: reqwest::Client,
    tokens: Option<TokenSet>,
    login: Option<(ServerMetadata, Client, ResourceMetadata)>,
    session_id: Option<String>,
    next_id: u64,
}

impl Session {
    async fn login(
        &mut self,
        challenge: &BearerChallenge,
        scopes: Option<Vec<String>>,
    ) -> Result<(), OAuthError> {
        let resource = metadata::discover_resource(
            &self.oauth,
            &self.server_url,
            challenge.resource_metadata.as_deref(),
        )
        .await?;
        let issuer = metadata::choose_issuer(&resource, None)?;
        let meta = metadata::discover_server(&self.oauth, &resource, &issuer).await?;
        let clock = SystemClock;
        let context_str = |k: &str| {
            self.context
                .get(k)
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        if self.scenario.contains("client-credentials") {
            let client = Client {
                client_id: context_str("client_id").unwrap_or_default(),
                client_secret: context_str("client_secret").map(Secret::new),
                auth: register::token_auth_for(&meta, true),
                redirect_uri: None,
            };
            let scopes =
                flow::choose_scopes(scopes.as_deref(), Some(challenge), &resource, &meta, false);
            let tokens = flow::client_credentials(
                &self.oauth,
                &clock,
                &meta,
                &client,
                &resource.resource,
                &scopes,
            )
            .await?;
            log(&format!("client credentials granted: {:?}", tokens.scopes));
            self.tokens = Some(tokens);
            self.login = Some((meta, client, resource));
            return Ok(());
        }
        let listener = RedirectListener::bind(0).await?;
        let redirect = listener.redirect_uri().to_owned();
        let settings = ClientSettings {
            client_id: context_str("client_id"),
            client_secret: None,
            client_metadata_url: Some(
                "https://conformance-test.local/client-metadata.json".to_owned(),
            ),
            client_name: "hintgate".to_owned(),
        };
        let client = match register::plan_registration(&settings, &meta, Some(&redirect))? {
            RegistrationPlan::PreRegistered(mut c) => {
                if let Some(s) = context_str("client_secret") {
                    c.client_secret = Some(Secret::new(s));
                    c.auth = register::token_auth_for(&meta, true);
                }
                c
            }
            RegistrationPlan::MetadataDocument(c) => c,
            RegistrationPlan::Dynamic { endpoint } => {
                register::register_dynamic(
                    &self.oauth,
                    &endpoint,
                    &meta,
                    "hintgate",
                    Some(&redirect),
                    &["authorization_code", "refresh_token"],
                    None,
                )
                .await?
            }
        };
        let scopes =
            flow::choose_scopes(scopes.as_deref(), Some(challenge), &resource, &meta, true);
        let request = flow::authorization_request(
            &meta,
            &client,
            &resource.resource,
            &scopes,
            &redirect,
            Pkce::generate()?,
            flow::random_value()?,
        )?;
        // The browser: open the URL, deliver its redirect to the listener.
        let answer = self.oauth.send(HttpRequest::get(&request.url)).await?;
        let location = answer
            .header_values("location")
            .first()
            .map(|s| (*s).to_owned())
            .ok_or(OAuthError::MissingCode)?;
        let browser = self.mcp.clone();
        let deliver = tokio::spawn(async move { browser.get(location).send().await.map(|_| ()) });
        let code = listener.wait(&request, Duration::from_secs(20)).await?;
        let _ = deliver.await;
        let tokens =
            flow::exchange_code(&self.oauth, &clock, &meta, &client, &request, &code).await?;
        log(&format!(
            "granted scopes {:?}, expires_at {:?}",
            tokens.scopes, tokens.expires_at
        ));
        self.tokens = Some(tokens);
        self.login = Some((meta, client, resource));
        Ok(())
    }

    async fn post(&mut self, body: &Value) -> Result<(u16, Vec<String>, String), String> {
        let mut req = self
            .mcp
            .post(&self.server_url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .body(body.to_string());
        if let Some(t) = &self.tokens {
            req = req.header(
                "authorization",
                format!("Bearer {}", t.access_token.expose()),
            );
        }
        if let Some(s) = &self.session_id {
            req = req.header("mcp-session-id", s);
        }
        let resp = req.send().await.map_err(|e| e.without_url().to_string())?;
        let status = resp.status().as_u16();
        if let Some(s) = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            self.session_id = Some(s.to_owned());
        }
        let challenges = resp
            .headers()
            .get_all("www-authenticate")
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_owned))
            .collect();
        let text = resp.text().await.map_err(|e| e.without_url().to_string())?;
        Ok((status, challenges, text))
    }

    /// Sends one message, signing in (once), refreshing (once) or stepping up
    /// (at most twice) as the server asks.
    async fn call(
        &mut self,
        method: &str,
        params: Value,
        notification: bool,
    ) -> Result<Value, String> {
        let body = if notification {
            json!({"jsonrpc": "2.0", "method": method, "params": params})
        } else {
            self.next_id += 1;
            json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        };
        let mut guard = RefusalGuard::default();
        let mut step_ups = 0;
        loop {
            let (status, challenges, text) = self.post(&body).await?;
            if status != 401 && status != 403 {
                if notification {
                    return Ok(Value::Null);
                }
                return parse_rpc(&text)
                    .ok_or_else(|| format!("{method}: status {status}, no JSON-RPC answer"));
            }
            let refs: Vec<&str> = challenges.iter().map(String::as_str).collect();
            let challenge = parse_www_authenticate(&refs);
            let can_refresh = self
                .tokens
                .as_ref()
                .is_some_and(|t| t.refresh_token.is_some());
            match guard.after_refusal(
                "conformance",
                status,
                challenge.clone(),
                self.tokens.is_some(),
                can_refresh,
            ) {
                Ok(NextStep::Authorize(c)) => self
                    .login(&c, None)
                    .await
                    .map_err(|e| format!("{}: {e}", e.code()))?,
                Ok(NextStep::Refresh) => {
                    let (meta, client, resource) = self.login.clone().ok_or("no login")?;
                    let old = self.tokens.clone().ok_or("no token")?;
                    let fresh = flow::refresh(
                        &self.oauth,
                        &SystemClock,
                        &meta,
                        &client,
                        &resource.resource,
                        &old,
                    )
                    .await
                    .map_err(|e| format!("{}: {e}", e.code()))?;
                    self.tokens = Some(fresh);
                }
                Err(OAuthError::StepUpRequired { .. }) if step_ups < 2 => {
                    step_ups += 1;
                    let c = challenge.unwrap_or_default();
                    // The person approves the wider scopes (this client stands for them).
                    let mut scopes = self
                        .tokens
                        .as_ref()
                        .map(|t| t.scopes.clone())
                        .unwrap_or_default();
                    for s in c.scope.clone().unwrap_or_default() {
                        if !scopes.contains(&s) {
                            scopes.push(s);
                        }
                    }
                    self.login(&c, Some(scopes))
                        .await
                        .map_err(|e| format!("{}: {e}", e.code()))?;
                    guard = RefusalGuard::default();
                }
                Err(e) => return Err(format!("{}: {e}", e.code())),
            }
        }
    }
}

fn parse_rpc(text: &str) -> Option<Value> {
    if let Ok(v) = serde_json::from_str::<Value>(text) {
        return Some(v);
    }
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|v| v.get("id").is_some())
}

async fn run() -> Result<(), String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server_url = std::env::args().next_back().ok_or("no server url")?;
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let context = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|c| serde_json::from_str(&c).ok())
        .unwrap_or(Value::Null);
    // The suite's servers are on loopback: the guard allows what the
    // server's own address is.
    let guard = hintgate_oauth::AddressGuard::for_server(&server_url).await;
    let mut s = Session {
        server_url,
        context,
        scenario,
        oauth: ReqwestClient::guarded(Duration::from_secs(20), guard).map_err(|e| e.to_string())?,
        mcp: reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| e.to_string())?,
        tokens: None,
        login: None,
        session_id: None,
        next_id: 0,
    };
    let init = s
        .call(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "hintgate-oauth-conformance", "version": "0.1.0"}}),
            false,
        )
        .await?;
    log(&format!("initialized: {}", init.get("result").is_some()));
    s.call("notifications/initialized", json!({}), true).await?;
    let list = s.call("tools/list", json!({}), false).await?;
    let tools: Vec<String> = list
        .pointer("/result/tools")
        .and_then(Value::as_array)
        .map(|t| {
            t.iter()
                .filter_map(|x| x.get("name")?.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if let Some(tool) = tools.first() {
        let r = s
            .call("tools/call", json!({"name": tool, "arguments": {}}), false)
            .await?;
        log(&format!(
            "called {tool}: error={}",
            r.get("error").is_some()
        ));
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log(&format!("error: {e}"));
            ExitCode::FAILURE
        }
    }
}
