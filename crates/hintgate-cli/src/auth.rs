//! `hintgate auth login|status|logout`: hintgate signs in to a remote
//! (`url`) server behind OAuth, keeps the tokens in the store (encrypted
//! under a subkey of the audit key, per server and principal), says what
//! was granted and until when, and signs out (revoking the tokens where the
//! authorization server can).
//!
//! No token is ever printed, logged or put in an error: they travel as
//! `Secret`s and are stored as a `GrantSecret`.

use std::time::Duration;

use anyhow::{Context as _, Result};
use hintgate_oauth::challenge::{BearerChallenge, parse_www_authenticate};
use hintgate_oauth::flow::{self, Pkce};
use hintgate_oauth::loopback::RedirectListener;
use hintgate_oauth::metadata::{self, ServerMetadata};
use hintgate_oauth::register::{self, Client, ClientSettings, RegistrationPlan, SecretSource};
use hintgate_oauth::stored::{StoredLogin, grant_key, scopes_beyond};
use hintgate_oauth::{
    AddressGuard, Clock as _, HttpClient as _, HttpRequest, OAuthError, ReqwestClient, Secret,
    SystemClock,
};
use hintgate_policy::config::{OAuthConfig, OAuthGrant, Transport, ValidConfig};
use hintgate_policy::sanitize::escape_line;
use hintgate_store::{GrantInfo, GrantSecret, KeptGrant, NewGrant, Seal, Store};

use crate::args::{AuthArgs, AuthCommand};
use crate::exit::Exit;
use crate::load::InputError;
use crate::output;

/// The principal of a login made on the command line without
/// `--principal`: the gateway's own (its listings, a stdio host's calls).
const LOCAL_PRINCIPAL: &str = "";

/// How long a login waits for the browser's redirect.
const REDIRECT_DEADLINE: Duration = Duration::from_secs(600);

/// How long one request to a server or an authorization server may take.
const REQUEST_DEADLINE: Duration = Duration::from_secs(30);

/// Runs `hintgate auth`.
pub fn run(args: &AuthArgs) -> Result<Exit> {
    let Some(path) = args.at.config.as_deref() else {
        return Err(InputError(
            "hintgate auth needs the gateway's config: --config FILE".to_owned(),
        )
        .into());
    };
    let loaded = crate::load::config(path)?;
    let Some(config) = loaded.config else {
        return Err(InputError(loaded.render()).into());
    };
    let config = crate::run::expand(config, &crate::load::ProcessEnv)?;
    // Signing in seals a row with the audit key, made on first use as a
    // gateway makes it; the others only read it.
    let usage = match args.command {
        AuthCommand::Status { .. } => crate::state::Use::Rows,
        _ => crate::state::Use::Gateway,
    };
    let store = crate::state::open_store_of(&args.at, args.audit_key.as_deref(), &usage)?.store;
    // The HTTP client's TLS runs on ring, as the gateway's does (already
    // installed when this is not the first client of the process).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    match &args.command {
        AuthCommand::Login {
            server,
            scope,
            device,
            read_only,
            principal,
        } => {
            let mut target = Target::of(&config, server, *read_only)?;
            target.principal = checked_principal(principal.as_deref())?;
            if target.read_only && !scope.is_empty() {
                return Err(InputError(format!(
                    "--scope does not apply with --read-only: the read-only instance's token is asked for with `[servers.{}.read_only] scopes` only",
                    escape_line(server)
                ))
                .into());
            }
            runtime.block_on(login(store.as_ref(), &target, scope, *device))
        }
        AuthCommand::Status { json } => status(store.as_ref(), &config, *json),
        AuthCommand::Logout {
            server,
            read_only,
            principal,
        } => {
            let principal = checked_principal(principal.as_deref())?;
            let mut targets = Vec::new();
            if !*read_only {
                targets.push(Target::of(&config, server, false)?);
            }
            if let Ok(target) = Target::of(&config, server, true) {
                targets.push(target);
            } else if *read_only {
                Target::of(&config, server, true)?;
            }
            for target in &mut targets {
                target.principal.clone_from(&principal);
            }
            runtime.block_on(logout(store.as_ref(), server, &targets))
        }
    }
}

/// The principal a login is for: `--principal NAME` (one name of at most
/// 256 characters, without spaces or control characters, as a host
/// token's), else the command line's own.
fn checked_principal(principal: Option<&str>) -> Result<String> {
    let Some(name) = principal else {
        return Ok(LOCAL_PRINCIPAL.to_owned());
    };
    if name.is_empty()
        || name.len() > 256
        || name.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(InputError(
            "--principal must be one name of at most 256 characters, without spaces or control characters".to_owned(),
        )
        .into());
    }
    Ok(name.to_owned())
}

/// One login of a server: its own (full) instance's, or its read-only
/// instance's, whose token is asked for with the read-only table's scopes
/// and kept under its own key; the command line's, or a `--listen`
/// principal's.
#[derive(Debug, Clone)]
struct Target {
    /// The server's name in the config.
    name: String,
    /// The URL the instance is reached at.
    url: String,
    /// How it signs in.
    oauth: OAuthConfig,
    /// The store's key for its login.
    key: String,
    /// Whether this is the read-only instance's login.
    read_only: bool,
    /// The principal it is for (`""`: the command line's).
    principal: String,
}

impl Target {
    /// The login of the server `name` (its read-only instance's with
    /// `read_only`); an absent `oauth` table signs in with the defaults.
    fn of(config: &ValidConfig, name: &str, read_only: bool) -> Result<Self> {
        let Some(server) = config.servers.get(name) else {
            return Err(InputError(format!(
                "no server is named `{}` in the config",
                escape_line(name)
            ))
            .into());
        };
        let instance = if read_only {
            match server.read_only.as_ref().and_then(|table| table.scopes.as_ref()) {
                Some(_) => server.read_only_instance(),
                None => None,
            }
            .ok_or_else(|| {
                InputError(format!(
                    "servers.{}: no read-only instance signs in with a token of its own (`[servers.{}.read_only] scopes`)",
                    escape_line(name),
                    escape_line(name)
                ))
            })?
        } else {
            server.clone()
        };
        match &instance.transport {
            Transport::Http { url, .. } => Ok(Self {
                name: name.to_owned(),
                url: url.clone(),
                oauth: instance.oauth.clone().unwrap_or_default(),
                key: grant_key(url, read_only),
                read_only,
                principal: LOCAL_PRINCIPAL.to_owned(),
            }),
            Transport::Stdio { .. } => Err(InputError(format!(
                "servers.{}: a stdio server does not sign in with OAuth (only a `url` server does)",
                escape_line(name)
            ))
            .into()),
        }
    }

    /// How messages name it: `` `docs` ``, `` `docs` (read-only
    /// instance) ``, `` `docs` for principal `alice` ``.
    fn label(&self) -> String {
        let mut label = format!("`{}`", self.name);
        if self.read_only {
            label.push_str(" (read-only instance)");
        }
        if !self.principal.is_empty() {
            label.push_str(&format!(" for principal `{}`", self.principal));
        }
        label
    }
}

fn secret_source(oauth: &OAuthConfig) -> Option<SecretSource> {
    oauth
        .client_secret_file
        .as_ref()
        .map(|path| SecretSource::File(path.into()))
        .or_else(|| oauth.client_secret_env.clone().map(SecretSource::Env))
}

/// An OAuth error as the command reports it: its code and its text (which
/// never holds a token).
fn failed(err: &OAuthError) -> anyhow::Error {
    anyhow::anyhow!("{}: {err}", err.code())
}

/// The server's challenge to a request without a token: an `initialize`
/// sent as a host would, whose 401 names the resource metadata and scopes.
async fn probe(http: &ReqwestClient, url: &str) -> Option<BearerChallenge> {
    let mut request = HttpRequest::post_json(
        url,
        &serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "hintgate", "version": env!("CARGO_PKG_VERSION")}}
        }),
    );
    request.headers.push((
        "accept".to_owned(),
        "application/json, text/event-stream".to_owned(),
    ));
    let response = http.send(request).await.ok()?;
    if response.status != 401 && response.status != 403 {
        return None;
    }
    parse_www_authenticate(&response.header_values("www-authenticate"))
}

async fn login(store: &dyn Store, target: &Target, scope: &[String], device: bool) -> Result<Exit> {
    let (name, url, oauth) = (target.name.as_str(), target.url.as_str(), &target.oauth);
    let http = ReqwestClient::guarded(REQUEST_DEADLINE, AddressGuard::for_server(url).await)
        .map_err(|err| failed(&err))?;
    let clock = SystemClock;
    let challenge = probe(&http, url).await;
    let resource = metadata::discover_resource(
        &http,
        url,
        challenge
            .as_ref()
            .and_then(|challenge| challenge.resource_metadata.as_deref()),
    )
    .await
    .map_err(|err| failed(&err))?;
    let issuer = metadata::choose_issuer(&resource, oauth.authorization_server.as_deref())
        .map_err(|err| failed(&err))?;
    let meta = metadata::discover_server(&http, &resource, &issuer)
        .await
        .map_err(|err| failed(&err))?;
    let chosen: Option<Vec<String>> = if scope.is_empty() {
        oauth.scopes.clone()
    } else {
        Some(scope.to_vec())
    };
    let secret = secret_source(oauth)
        .map(|source| source.load())
        .transpose()
        .map_err(|err| failed(&err))?;
    let grant = if device {
        OAuthGrant::Device
    } else {
        oauth.grant
    };
    let (tokens, client) = match grant {
        OAuthGrant::ClientCredentials => {
            let client = Client {
                client_id: oauth.client_id.clone().unwrap_or_default(),
                auth: register::token_auth_for(&meta, secret.is_some()),
                client_secret: secret,
                redirect_uri: None,
            };
            let scopes = flow::choose_scopes(
                chosen.as_deref(),
                challenge.as_ref(),
                &resource,
                &meta,
                false,
            );
            let tokens = flow::client_credentials(
                &http,
                &clock,
                &meta,
                &client,
                &resource.resource,
                &scopes,
            )
            .await
            .map_err(|err| failed(&err))?;
            (tokens, client)
        }
        OAuthGrant::Device => {
            let client = client_for(
                &http,
                oauth,
                secret,
                &meta,
                None,
                &[
                    "urn:ietf:params:oauth:grant-type:device_code",
                    "refresh_token",
                ],
            )
            .await?;
            let scopes = flow::choose_scopes(
                chosen.as_deref(),
                challenge.as_ref(),
                &resource,
                &meta,
                true,
            );
            let started =
                flow::start_device(&http, &clock, &meta, &client, &resource.resource, &scopes)
                    .await
                    .map_err(|err| failed(&err))?;
            output::err(&format!(
                "To sign in to `{name}`, open {} and enter the code {}\n",
                escape_line(
                    started
                        .verification_uri_complete
                        .as_deref()
                        .unwrap_or(&started.verification_uri)
                ),
                escape_line(&started.user_code),
            ))?;
            let tokens = flow::poll_device(&http, &clock, &meta, &client, &started)
                .await
                .map_err(|err| failed(&err))?;
            (tokens, client)
        }
        OAuthGrant::AuthorizationCode => {
            let listener = RedirectListener::bind(oauth.redirect_port.unwrap_or(0))
                .await
                .map_err(|err| failed(&err))?;
            let redirect = listener.redirect_uri().to_owned();
            let client = client_for(
                &http,
                oauth,
                secret,
                &meta,
                Some(&redirect),
                &["authorization_code", "refresh_token"],
            )
            .await?;
            let scopes = flow::choose_scopes(
                chosen.as_deref(),
                challenge.as_ref(),
                &resource,
                &meta,
                true,
            );
            let request = flow::authorization_request(
                &meta,
                &client,
                &resource.resource,
                &scopes,
                &redirect,
                Pkce::generate().map_err(|err| failed(&err))?,
                flow::random_value().map_err(|err| failed(&err))?,
            )
            .map_err(|err| failed(&err))?;
            output::err(&format!(
                "To sign in to `{name}`, open this address in a browser (hintgate waits for its answer on {}):\n{}\n",
                escape_line(&redirect),
                escape_line(&request.url)
            ))?;
            let code = listener
                .wait(&request, REDIRECT_DEADLINE)
                .await
                .map_err(|err| failed(&err))?;
            let tokens = flow::exchange_code(&http, &clock, &meta, &client, &request, &code)
                .await
                .map_err(|err| failed(&err))?;
            (tokens, client)
        }
    };
    if target.read_only {
        refuse_widened(&http, &meta, &client, &tokens, target).await?;
    }
    let secret = GrantSecret::new(
        StoredLogin::new(tokens.clone(), &meta, &client, &resource.resource)
            .to_json()
            .expose()
            .to_owned(),
    );
    let scope = tokens.scopes.join(" ");
    let expires_at = tokens.expires_at.and_then(|at| i64::try_from(at).ok());
    let replaced = store.grant(&target.key, &target.principal)?;
    store.put_grant(&NewGrant {
        server: &target.key,
        principal: &target.principal,
        scope: &scope,
        expires_at,
        updated_at: i64::try_from(clock.now()).unwrap_or(i64::MAX),
        secret: &secret,
    })?;
    revoke_replaced(replaced, target).await?;
    output::out(&format!(
        "Signed in to {}: granted {}; {}{}.\n",
        target.label(),
        shown_scope(&scope),
        expiry(expires_at),
        if tokens.refresh_token.is_some() {
            ", refreshed as it expires"
        } else if grant == OAuthGrant::ClientCredentials {
            ", renewed with the client's secret as it expires"
        } else {
            ", with no refresh token (sign in again then)"
        }
    ))?;
    Ok(Exit::Success)
}

/// A read-only instance's token must carry no scope beyond
/// `[servers.NAME.read_only] scopes`: one an authorization server widened
/// is revoked (where it can be) and not kept, since the vouch for the
/// instance would rest on it.
async fn refuse_widened(
    http: &ReqwestClient,
    meta: &ServerMetadata,
    client: &Client,
    tokens: &flow::TokenSet,
    target: &Target,
) -> Result<()> {
    let allowed = target.oauth.scopes.clone().unwrap_or_default();
    let beyond = scopes_beyond(&tokens.scopes, &allowed);
    if beyond.is_empty() {
        return Ok(());
    }
    for (token, hint) in [
        (Some(&tokens.access_token), "access_token"),
        (tokens.refresh_token.as_ref(), "refresh_token"),
    ] {
        if let Some(token) = token
            && meta.revocation_endpoint.is_some()
        {
            let _ = flow::revoke(http, meta, client, token, hint).await;
        }
    }
    Err(anyhow::anyhow!(
        "oauth-read-only-scope-widened: the authorization server granted {} beyond the read-only scopes {} of {}: the token is not kept{}",
        shown_scope(&beyond.join(" ")),
        shown_scope(&allowed.join(" ")),
        target.label(),
        if meta.revocation_endpoint.is_some() {
            " (it was revoked)"
        } else {
            ""
        }
    ))
}

/// The client for a login, in the spec's order (pre-registered, client ID
/// metadata document, dynamic registration).
async fn client_for(
    http: &ReqwestClient,
    oauth: &OAuthConfig,
    secret: Option<Secret>,
    meta: &ServerMetadata,
    redirect: Option<&str>,
    grants: &[&str],
) -> Result<Client> {
    let has_secret = secret.is_some();
    let settings = ClientSettings {
        client_id: oauth.client_id.clone(),
        client_secret: secret_source(oauth),
        client_metadata_url: oauth.client_metadata_url.clone(),
        client_name: "hintgate".to_owned(),
    };
    let client =
        match register::plan_registration(&settings, meta, redirect).map_err(|err| failed(&err))? {
            RegistrationPlan::PreRegistered(mut client) => {
                if let Some(secret) = secret {
                    client.client_secret = Some(secret);
                    client.auth = register::token_auth_for(meta, has_secret);
                }
                client
            }
            RegistrationPlan::MetadataDocument(client) => client,
            RegistrationPlan::Dynamic { endpoint } => register::register_dynamic(
                http, &endpoint, meta, "hintgate", redirect, grants, None,
            )
            .await
            .map_err(|err| failed(&err))?,
        };
    Ok(client)
}

fn shown_scope(scope: &str) -> String {
    if scope.is_empty() {
        "no scope named".to_owned()
    } else {
        format!("`{}`", escape_line(scope))
    }
}

fn expiry(expires_at: Option<i64>) -> String {
    match expires_at {
        Some(at) => format!("the access token expires at {}", crate::when::utc(at)),
        None => "the server gave no expiry".to_owned(),
    }
}

/// The logins of the config's servers, with what the store keeps of each:
/// every `url` server with an `oauth` table (or a kept login), and the
/// read-only instance of each server whose `read_only` table names
/// `scopes`.
fn status(store: &dyn Store, config: &ValidConfig, json: bool) -> Result<Exit> {
    let grants = store.grants()?;
    let mut rows = Vec::new();
    for (name, server) in &config.servers {
        for read_only in [false, true] {
            let Ok(target) = Target::of(config, name, read_only) else {
                continue;
            };
            let grant = grants
                .iter()
                .find(|grant| grant.server == target.key && grant.principal == LOCAL_PRINCIPAL);
            // The `--listen` principals' own logins of the same server.
            let theirs: Vec<(Target, Option<&GrantInfo>)> = grants
                .iter()
                .filter(|grant| grant.server == target.key && grant.principal != LOCAL_PRINCIPAL)
                .map(|grant| {
                    let mut theirs = target.clone();
                    theirs.principal.clone_from(&grant.principal);
                    (theirs, Some(grant))
                })
                .collect();
            if grant.is_some() || server.oauth.is_some() {
                rows.push((target, grant));
            }
            rows.extend(theirs);
        }
    }
    if json {
        let out: Vec<serde_json::Value> = rows
            .iter()
            .map(|(target, grant)| {
                serde_json::json!({
                    "server": target.name,
                    "instance": if target.read_only { "read-only" } else { "full" },
                    "principal": (!target.principal.is_empty()).then_some(&target.principal),
                    "signed_in": grant.is_some_and(|grant| grant.seal == Seal::Valid),
                    "scope": grant.map(|grant| grant.scope.clone()),
                    "expires_at": grant.and_then(|grant| grant.expires_at),
                    "seal": grant.map(|grant| grant.seal.as_str()),
                })
            })
            .collect();
        output::out(&format!("{}\n", serde_json::Value::Array(out)))?;
        return Ok(Exit::Success);
    }
    if rows.is_empty() {
        output::out("No server of this config signs in with OAuth.\n")?;
        return Ok(Exit::Success);
    }
    let mut text = String::new();
    for (target, grant) in rows {
        let mut shown = target.name.clone();
        let mut login = format!("hintgate auth login {}", target.name);
        if target.read_only {
            shown.push_str(" (read-only)");
            login.push_str(" --read-only");
        }
        if !target.principal.is_empty() {
            let principal = escape_line(&target.principal);
            shown.push_str(&format!(" for principal {principal}"));
            login.push_str(&format!(" --principal {principal}"));
        }
        let line = match grant {
            None => format!("{shown}: not signed in ({login})\n"),
            Some(grant) if grant.seal != Seal::Valid => format!(
                "{shown}: the stored login's seal does not verify: it is not used ({login})\n"
            ),
            Some(grant) => format!(
                "{shown}: signed in; granted {}; {}\n",
                shown_scope(&grant.scope),
                expiry(grant.expires_at)
            ),
        };
        text.push_str(&line);
    }
    output::out(&text)?;
    Ok(Exit::Success)
}

/// Signs out of each of `targets` that is signed in; `name` is not signed
/// in when none is.
async fn logout(store: &dyn Store, name: &str, targets: &[Target]) -> Result<Exit> {
    let mut any = false;
    let mut exit = Exit::Success;
    for target in targets {
        let Some(kept) = store.grant(&target.key, &target.principal)? else {
            continue;
        };
        any = true;
        if logout_one(store, target, kept).await? != Exit::Success {
            exit = Exit::Error;
        }
    }
    if !any {
        output::err(&format!("`{name}` is not signed in.\n"))?;
        return Ok(Exit::Error);
    }
    Ok(exit)
}

/// Revokes the access and refresh tokens of `login` at its authorization
/// server's revocation endpoint: which were, and what went wrong.
async fn revoke_login(
    login: &StoredLogin,
    target: &Target,
) -> Result<(Vec<&'static str>, Vec<String>)> {
    let meta = login.server();
    let http = ReqwestClient::guarded(
        REQUEST_DEADLINE,
        AddressGuard::for_server(&target.url).await,
    )
    .map_err(|err| failed(&err))?;
    let client = login
        .client(secret_source(&target.oauth).as_ref())
        .map_err(|err| failed(&err))?;
    let mut revoked = Vec::new();
    let mut problems = Vec::new();
    for (token, hint) in [
        (Some(&login.tokens.access_token), "access_token"),
        (login.tokens.refresh_token.as_ref(), "refresh_token"),
    ] {
        let Some(token) = token else { continue };
        match flow::revoke(&http, &meta, &client, token, hint).await {
            Ok(_) => revoked.push(hint),
            Err(err) => problems.push(format!("{hint}: {}", failed(&err))),
        }
    }
    Ok((revoked, problems))
}

/// A login that a new one replaced: its tokens are revoked where the
/// authorization server can (best effort; said on standard error when it
/// fails), so that no token hintgate no longer keeps stays good.
async fn revoke_replaced(store_kept: Option<KeptGrant>, target: &Target) -> Result<()> {
    let Some(secret) = store_kept.and_then(|kept| kept.secret) else {
        return Ok(());
    };
    let Ok(login) = StoredLogin::from_json(secret.expose()) else {
        return Ok(());
    };
    if login.server().revocation_endpoint.is_none() {
        return Ok(());
    }
    let (_, problems) = revoke_login(&login, target).await?;
    if !problems.is_empty() {
        output::err(&format!(
            "The previous login of {} was replaced, but its authorization server did not revoke: {}\n",
            target.label(),
            escape_line(&problems.join("; "))
        ))?;
    }
    Ok(())
}

async fn logout_one(store: &dyn Store, target: &Target, kept: KeptGrant) -> Result<Exit> {
    let label = target.label();
    // The tokens are forgotten first: a revocation that fails leaves none
    // behind for the gateway to use.
    store.delete_grant(&target.key, &target.principal)?;
    let Some(secret) = kept.secret else {
        output::out(&format!(
            "Signed out of {label} (the stored login's seal did not verify: nothing to revoke).\n"
        ))?;
        return Ok(Exit::Success);
    };
    let login = StoredLogin::from_json(secret.expose()).map_err(|err| failed(&err))?;
    let meta = login.server();
    if meta.revocation_endpoint.is_none() {
        output::out(&format!(
            "Signed out of {label}; its authorization server cannot revoke tokens, so they stand until they expire.\n"
        ))?;
        return Ok(Exit::Success);
    }
    let (revoked, problems) = revoke_login(&login, target).await?;
    if problems.is_empty() {
        output::out(&format!(
            "Signed out of {label}; revoked its {}.\n",
            revoked.join(" and ")
        ))?;
        Ok(Exit::Success)
    } else {
        output::err(&format!(
            "Signed out of {label}, but the authorization server did not revoke: {}\n",
            escape_line(&problems.join("; "))
        ))?;
        Ok(Exit::Error)
    }
}
