//! `hintgate run`: the gateway, in wrap mode or gateway mode.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use hintgate_policy::config::{Profile, ServerConfig, Transport, ValidConfig};
use hintgate_policy::decide::Policy;
use hintgate_policy::tool::Trust;
use hintgate_policy::vars::{self, Vars};
use hintgate_proxy::{Mode, Settings};

use crate::args::RunArgs;
use crate::exit::Exit;
use crate::load::{self, InputError, ProcessEnv};
use crate::output;

/// Runs `hintgate run`.
pub fn run(args: &RunArgs) -> Result<Exit> {
    init_logging();
    let (config, mode) = match &args.config {
        Some(path) => {
            let loaded = load::config(path)?;
            if !loaded.diagnostics.is_empty() {
                output::err(&loaded.render())?;
            }
            let Some(config) = loaded.config else {
                return Ok(Exit::Usage);
            };
            (config, Mode::Gateway)
        }
        None => (wrap_config(args)?, Mode::Wrap),
    };
    let mut config = expand(config, &ProcessEnv)?;
    if config.gateway.principal.is_none() {
        config.gateway.principal = Some(local_principal());
    }
    if let Some(seconds) = args.call_timeout {
        config.gateway.call_timeout_s = seconds.max(1);
    }
    if let Some(seconds) = args.ask_timeout {
        config.gateway.ask_timeout_s = seconds.max(1);
    }
    if let Some(endpoint) = &args.otlp_endpoint {
        config.telemetry.otlp_endpoint = Some(endpoint.clone());
    }
    let configured = config
        .gateway
        .store
        .as_deref()
        .map(|text| vars::expand(text, &ProcessEnv))
        .transpose()
        .map_err(|err| InputError(format!("gateway.store: {err}")))?;
    let configured_key = config
        .audit
        .key_file
        .as_deref()
        .map(|text| vars::expand(text, &ProcessEnv))
        .transpose()
        .map_err(|err| InputError(format!("audit.key_file: {err}")))?;
    let witness = witness_settings(&config.audit)?;
    let plan = listen_plan(args, &config.listen, &ProcessEnv)?;
    let store = crate::state::open_store(
        &crate::state::Choice {
            state_dir: args.state_dir.as_deref(),
            store: args.store.as_deref(),
            configured_store: configured.as_deref(),
            key: args.audit_key.as_deref(),
            configured_key: configured_key.as_deref(),
            witness: Some(&witness),
        },
        &crate::state::Use::Gateway,
    )?
    .store;
    let console_store = std::sync::Arc::clone(&store);
    let token_store = std::sync::Arc::clone(&store);
    let metrics_plan = match args.metrics {
        Some(addr) => Some(crate::metrics::plan(
            addr,
            &config,
            std::sync::Arc::clone(&store),
        )?),
        None => None,
    };
    let settings = Settings {
        policy: Policy::new(config),
        mode,
        observer: None,
        store: Some(store),
        connector: None,
        metrics: metrics_plan
            .as_ref()
            .map(|plan| std::sync::Arc::clone(&plan.metrics)),
    };
    // Over stdio one thread serves the one host. Over HTTP the connections,
    // their parsing, the delivery of each session's lines and the gateway's
    // event loop (one task, which owns the gateway's state alone as ever)
    // run on two worker threads.
    let runtime = match plan {
        Some(_) => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build(),
        None => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
    }
    .context("cannot start the runtime")?;
    runtime.block_on(async {
        if let Some(listen) = args.console {
            // The console answers from the same store; its URL goes to
            // stderr, stdout belongs to the protocol. It ends with the
            // gateway.
            let (console, listener) = crate::console::start(console_store, listen).await?;
            output::err(&format!("hintgate console: open {}\n", console.url()))?;
            tokio::spawn(async move {
                if let Err(err) =
                    hintgate_console::serve(listener, console, std::future::pending()).await
                {
                    tracing::warn!("the console stopped: {err}");
                }
            });
        }
        if let Some(metrics) = metrics_plan {
            crate::metrics::start(metrics).await?;
        }
        let stop = crate::signal::stop_signal();
        if let Some(plan) = plan {
            return listen(plan, settings, token_store, stop).await;
        }
        let (host_in, host_out) = hintgate_proxy::stdio::host_streams();
        let gauges = hintgate_proxy::Gauges::default();
        hintgate_proxy::run_until(settings, host_in, host_out, gauges, stop)
            .await
            .context("the gateway stopped")
    })?;
    Ok(Exit::Success)
}

/// How `hintgate run` serves hosts over HTTP: each `[listen]` value of the
/// configuration, overridden by its flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListenPlan {
    /// Where `/mcp` is served.
    pub addr: std::net::SocketAddr,
    /// An address beyond loopback is allowed.
    pub public: bool,
    /// Hosts without a token are taken (loopback only).
    pub no_auth: bool,
    /// The TLS certificate chain and key files.
    pub tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// Origins a page may call from, besides the gateway's own.
    pub origins: Vec<String>,
    /// The OAuth authorization server whose tokens are taken.
    pub oauth: Option<OAuthPlan>,
    /// Deadlines and bounds on the hosts' connections.
    pub limits: hintgate_http::Limits,
}

/// The OAuth resource server's settings, flags over `[listen]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OAuthPlan {
    pub issuer: String,
    pub jwks: String,
    /// `None`: the URL the gateway serves.
    pub audience: Option<String>,
    pub read_scope: String,
    pub write_scope: String,
}

/// What `args` and the configuration's `[listen]` table say of listening:
/// `None` to serve the one host on stdio.
///
/// # Errors
///
/// A listening flag without an address to listen on, a TLS certificate
/// without its key, an OAuth issuer without its key set, `--no-auth`
/// beyond loopback, or a `${VAR}` that does not expand.
pub(crate) fn listen_plan(
    args: &RunArgs,
    file: &hintgate_policy::config::ListenSettings,
    env: &dyn Vars,
) -> Result<Option<ListenPlan>, InputError> {
    let expand = |key: &str, text: &Option<String>| -> Result<Option<String>, InputError> {
        text.as_deref()
            .map(|text| vars::expand(text, env))
            .transpose()
            .map_err(|err| InputError(format!("listen.{key}: {err}")))
    };
    let Some(addr) = args.listen.or(file.address) else {
        let given = [
            (args.listen_public, "--listen-public"),
            (args.no_auth, "--no-auth"),
            (args.tls_cert.is_some(), "--tls-cert"),
            (args.oauth_issuer.is_some(), "--oauth-issuer"),
            (args.oauth_jwks.is_some(), "--oauth-jwks"),
            (args.oauth_audience.is_some(), "--oauth-audience"),
            (args.oauth_read_scope.is_some(), "--oauth-read-scope"),
            (args.oauth_write_scope.is_some(), "--oauth-write-scope"),
            (!args.allow_origins.is_empty(), "--allow-origin"),
        ];
        if let Some((_, flag)) = given.iter().find(|(given, _)| *given) {
            return Err(InputError(format!(
                "`{flag}` is for a gateway that listens: add `--listen ADDR`, or `address` to the configuration's `[listen]` table"
            )));
        }
        return Ok(None);
    };
    let public = args.listen_public || file.public;
    if !addr.ip().is_loopback() && !public {
        return Err(InputError(format!(
            "`{addr}` is beyond loopback: hosts on the network would reach your servers; add `--listen-public` (or `public = true` in `[listen]`; tokens are then required) or listen on 127.0.0.1"
        )));
    }
    if args.no_auth && !addr.ip().is_loopback() {
        return Err(InputError(format!(
            "`--no-auth` is for loopback only, and `{addr}` is not: every host on the network could call your servers"
        )));
    }
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
        _ => match (
            expand("tls_cert", &file.tls_cert)?,
            expand("tls_key", &file.tls_key)?,
        ) {
            (Some(cert), Some(key)) => Some((cert.into(), key.into())),
            (None, None) => None,
            _ => {
                return Err(InputError(
                    "`[listen]` gives one of `tls_cert` and `tls_key` without the other".to_owned(),
                ));
            }
        },
    };
    let origins = if args.allow_origins.is_empty() {
        file.allow_origins.clone()
    } else {
        args.allow_origins.clone()
    };
    let issuer = match &args.oauth_issuer {
        Some(issuer) => Some(issuer.clone()),
        None => expand("oauth_issuer", &file.oauth_issuer)?,
    };
    let jwks = match &args.oauth_jwks {
        Some(jwks) => Some(jwks.clone()),
        None => expand("oauth_jwks", &file.oauth_jwks)?,
    };
    let oauth = match (issuer, jwks) {
        (Some(issuer), Some(jwks)) => Some(OAuthPlan {
            issuer,
            jwks,
            audience: match &args.oauth_audience {
                Some(audience) => Some(audience.clone()),
                None => expand("oauth_audience", &file.oauth_audience)?,
            },
            read_scope: args
                .oauth_read_scope
                .clone()
                .or_else(|| file.oauth_read_scope.clone())
                .unwrap_or_else(|| "mcp:read".to_owned()),
            write_scope: args
                .oauth_write_scope
                .clone()
                .or_else(|| file.oauth_write_scope.clone())
                .unwrap_or_else(|| "mcp:write".to_owned()),
        }),
        (None, None) => {
            let stray = [
                (args.oauth_audience.is_some(), "--oauth-audience"),
                (args.oauth_read_scope.is_some(), "--oauth-read-scope"),
                (args.oauth_write_scope.is_some(), "--oauth-write-scope"),
            ];
            if let Some((_, flag)) = stray.iter().find(|(given, _)| *given) {
                return Err(InputError(format!(
                    "`{flag}` is for OAuth access tokens: add `--oauth-issuer` and `--oauth-jwks` (or `oauth_issuer` and `oauth_jwks` in `[listen]`)"
                )));
            }
            None
        }
        (Some(_), None) => {
            return Err(InputError(
                "an OAuth issuer needs its key set: add `--oauth-jwks URL` (or `oauth_jwks` in `[listen]`)".to_owned(),
            ));
        }
        (None, Some(_)) => {
            return Err(InputError(
                "an OAuth key set needs its issuer: add `--oauth-issuer URL` (or `oauth_issuer` in `[listen]`)".to_owned(),
            ));
        }
    };
    if let Some(oauth) = &oauth
        && oauth.read_scope == oauth.write_scope
    {
        return Err(InputError(format!(
            "the read and the write scope are both `{}`: a token could not be told to read only",
            oauth.read_scope
        )));
    }
    let defaults = hintgate_http::Limits::default();
    let count = |value: Option<u64>, default: usize| {
        value.map_or(default, |value| {
            usize::try_from(value).unwrap_or(usize::MAX)
        })
    };
    let max_unauthenticated = count(file.max_unauthenticated, defaults.max_unauthenticated);
    // On loopback every host comes from one address: a bound per address
    // would only be a smaller total, cutting off local hosts while the
    // gateway is slow to read their requests. Unless set, only the total
    // holds there.
    let per_address_default = if public {
        defaults.max_unauthenticated_per_address
    } else {
        max_unauthenticated
    };
    let limits = hintgate_http::Limits {
        header_timeout: file
            .header_timeout_s
            .map_or(defaults.header_timeout, std::time::Duration::from_secs),
        body_timeout: file
            .body_timeout_s
            .map_or(defaults.body_timeout, std::time::Duration::from_secs),
        max_unauthenticated,
        max_unauthenticated_per_address: count(
            file.max_unauthenticated_per_address,
            per_address_default,
        ),
    };
    Ok(Some(ListenPlan {
        addr,
        limits,
        public,
        no_auth: args.no_auth,
        tls,
        origins,
        oauth,
    }))
}

/// Listening: hosts over Streamable HTTP at `http://ADDR/mcp`, many at
/// once on one gateway, until a signal stops it (every call in flight then
/// ends on record before the servers stop, as over stdio).
async fn listen(
    plan: ListenPlan,
    settings: Settings,
    store: std::sync::Arc<dyn hintgate_store::Store>,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let addr = plan.addr;
    let tls = match &plan.tls {
        Some((cert, key)) => {
            let chain = crate::load::text(cert, "the TLS certificate")?;
            let key = crate::load::text(key, "the TLS key")?;
            Some(hintgate_http::Tls::from_pem(
                chain.as_bytes(),
                key.as_bytes(),
            )?)
        }
        None => None,
    };
    raise_open_file_limit();
    let scheme = if tls.is_some() { "https" } else { "http" };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let bound = listener
        .local_addr()
        .context("the listener has no address")?;
    let url = format!("{scheme}://{bound}{}", hintgate_http::ENDPOINT);
    let oauth = match &plan.oauth {
        Some(settings) => {
            let issuer = &settings.issuer;
            let oauth = hintgate_http::OAuth::new(hintgate_http::OAuthSettings {
                issuer: issuer.clone(),
                jwks_url: settings.jwks.clone(),
                audience: settings.audience.clone().unwrap_or_else(|| url.clone()),
                read_scope: settings.read_scope.clone(),
                write_scope: settings.write_scope.clone(),
            });
            let _ = rustls::crypto::ring::default_provider().install_default();
            let client = reqwest::Client::builder()
                .build()
                .context("cannot make the HTTP client that fetches the JWKS")?;
            let keys = oauth.refresh(&client).await.map_err(InputError)?;
            tracing::info!(keys, "OAuth access tokens of {issuer} are taken");
            tokio::spawn(std::sync::Arc::clone(&oauth).keep_fresh(client));
            Some(oauth)
        }
        None => None,
    };
    let tokens: Option<std::sync::Arc<dyn hintgate_http::Authenticate>> = if plan.no_auth {
        None
    } else {
        let rows = store.tokens().context("cannot read the hosts' tokens")?;
        rows.iter()
            .any(|row| {
                row.seal == hintgate_store::Seal::Valid && row.scope != crate::token::METRICS_SCOPE
            })
            .then(|| -> std::sync::Arc<dyn hintgate_http::Authenticate> {
                std::sync::Arc::new(crate::token::StoreTokens { store })
            })
    };
    let auth: Option<std::sync::Arc<dyn hintgate_http::Authenticate>> = match (
        tokens,
        oauth.clone(),
    ) {
        (Some(tokens), Some(oauth)) => Some(std::sync::Arc::new(hintgate_http::oauth::Either {
            first: tokens,
            second: oauth,
        })),
        (Some(tokens), None) => Some(tokens),
        (None, Some(oauth)) => Some(oauth),
        (None, None) if plan.no_auth => {
            tracing::warn!(
                "--no-auth: every process on this machine may call the servers through this gateway"
            );
            None
        }
        (None, None) => {
            return Err(InputError(
                    "no host could authenticate: add a token with `hintgate token add NAME --scope read|write`, take OAuth access tokens (`--oauth-issuer`, `--oauth-jwks`), or run with `--no-auth` on loopback".to_owned(),
                )
                .into());
        }
    };
    let write_scope = oauth.as_ref().map_or_else(
        || "write".to_owned(),
        |oauth| oauth.settings().write_scope.clone(),
    );
    // The gateway stops on the signal; the HTTP side stops taking requests
    // when the gateway's loop has ended.
    let (stopped_tx, stopped_rx) = tokio::sync::oneshot::channel::<()>();
    let (port, gateway) = hintgate_proxy::serve(settings, std::sync::Arc::default(), stop)
        .context("the gateway cannot start")?;
    let router = hintgate_http::router(
        port,
        hintgate_http::Options {
            addr: bound,
            public: plan.public,
            origins: plan.origins.clone(),
            auth,
            write_scope,
            tls: tls.is_some(),
            oauth,
        },
    )?;
    let server = tokio::spawn(hintgate_http::serve(
        listener,
        tls,
        router,
        plan.limits,
        async move {
            let _ = stopped_rx.await;
        },
    ));
    output::err(&format!("hintgate: serving MCP at {url}\n"))?;
    gateway.await;
    let _ = stopped_tx.send(());
    match server.await {
        Ok(Ok(())) | Err(_) => Ok(()),
        Ok(Err(err)) => Err(err.into()),
    }
}

/// Raises the open-file soft limit to the hard limit: each host connection
/// and each server's pipes take files, and the usual soft default (1,024)
/// is near what a few hundred hosts need. A limit that cannot be raised is
/// logged, and the gateway goes on within it.
fn raise_open_file_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current == limit.maximum {
        return;
    }
    let raised = rustix::process::Rlimit {
        current: limit.maximum,
        maximum: limit.maximum,
    };
    let show = |value: Option<u64>| value.map_or_else(|| "unlimited".to_owned(), |n| n.to_string());
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => tracing::info!(
            "open-file limit raised from {} to {}",
            show(limit.current),
            show(limit.maximum)
        ),
        Err(err) => tracing::warn!(
            "the open-file limit stays at {}: it could not be raised to {}: {err}",
            show(limit.current),
            show(limit.maximum)
        ),
    }
}

/// Logs go to stderr only, stdout belongs to the protocol; `info` unless
/// `RUST_LOG` says otherwise.
fn init_logging() {
    crate::output::init_logging("info");
}

fn wrap_config(args: &RunArgs) -> Result<ValidConfig, InputError> {
    let (transport, derived) = match (&args.url, args.command.split_first()) {
        (Some(url), _) => {
            let mut headers = BTreeMap::new();
            for header in &args.headers {
                let Some((name, value)) = header.split_once(':') else {
                    return Err(InputError(format!(
                        "header `{header}` is not `Name: value`"
                    )));
                };
                headers.insert(name.trim().to_owned(), value.trim().to_owned());
            }
            let host = url
                .split("//")
                .nth(1)
                .unwrap_or(url)
                .split(['/', ':', '?'])
                .next()
                .unwrap_or("server");
            let derived = derive_name(host, &[]);
            (
                Transport::Http {
                    url: url.clone(),
                    headers,
                },
                derived,
            )
        }
        (None, Some((command, rest))) => (
            Transport::Stdio {
                command: command.clone(),
                args: rest.to_vec(),
                env: BTreeMap::new(),
            },
            derive_name(command, rest),
        ),
        (None, None) => {
            return Err(InputError(
                "give the server's command after `--` or its `--url` (wrap mode), or `--config FILE` (gateway mode)"
                    .to_owned(),
            ));
        }
    };
    let name = args.name.clone().unwrap_or(derived);
    if name.is_empty()
        || !name
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '-')
    {
        return Err(InputError(format!(
            "server name `{name}` may only hold letters, digits, `_` and `-`; set one with `--name`"
        )));
    }
    let trust = args.trust.map_or(Trust::Untrusted, Trust::from);
    let profile = args.profile.map_or(Profile::AskWrites, Profile::from);
    let sandboxed = args.sandbox
        || !args.sandbox_read.is_empty()
        || !args.sandbox_write.is_empty()
        || args.sandbox_prepare.is_some();
    if sandboxed && !matches!(transport, Transport::Stdio { .. }) {
        return Err(InputError(
            "--sandbox confines a server started from a command; one reached by `--url` runs elsewhere".to_owned(),
        ));
    }
    let mut config = ValidConfig::wrap(&name, transport, trust, profile, args.unattended);
    if sandboxed && let Some(server) = config.servers.get_mut(&name) {
        server.sandbox = Some(hintgate_policy::config::SandboxConfig {
            read: args.sandbox_read.clone(),
            write: args.sandbox_write.clone(),
            network: false,
            prepare: args.sandbox_prepare.map(Into::into).unwrap_or_default(),
            ..hintgate_policy::config::SandboxConfig::default()
        });
    }
    Ok(config)
}

/// A server name from its command line: the package a runner such as `npx`
/// or `uvx` starts, else the program's file name; reduced to the characters
/// a name may hold.
fn derive_name(command: &str, args: &[String]) -> String {
    let program = command.rsplit('/').next().unwrap_or(command);
    let runner = matches!(program, "npx" | "uvx" | "bunx" | "pnpx" | "pipx");
    let base = if runner {
        args.iter()
            .find(|arg| !arg.starts_with('-'))
            .map(String::as_str)
            .unwrap_or(program)
    } else {
        program
    };
    // `@scope/pkg@1.2` -> `pkg`; `server.py` -> `server`.
    let base = base.rsplit('/').next().unwrap_or(base);
    let base = base
        .split('@')
        .find(|part| !part.is_empty())
        .unwrap_or(base);
    let base = base.split('.').next().unwrap_or(base);
    crate::hosts::edit::server_name(base)
}

/// The host on stdio, as idempotency keys are kept: `local:NAME`, the name
/// of the effective user (`local:uid-N` when the user database does not
/// name it), so two users' gateways on one store keep their keys apart.
fn local_principal() -> String {
    let uid = rustix::process::geteuid().as_raw();
    let name = std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|passwd| user_name(&passwd, uid));
    match name {
        Some(name) => format!("local:{name}"),
        None => format!("local:uid-{uid}"),
    }
}

/// The name of user `uid` in a `passwd` file's text.
fn user_name(passwd: &str, uid: u32) -> Option<String> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let id = fields.nth(1)?.parse::<u32>().ok()?;
        (id == uid && !name.is_empty()).then(|| name.to_owned())
    })
}

/// Expands every `${VAR}` of the servers' command lines, environments, URLs
/// and headers: the edge of the program, where the environment is read.
pub(crate) fn expand(mut config: ValidConfig, vars: &dyn Vars) -> Result<ValidConfig, InputError> {
    let expand_one = |server: &str, key: &str, text: &mut String| -> Result<(), InputError> {
        *text = vars::expand(text, vars)
            .map_err(|err| InputError(format!("servers.{server}.{key}: {err}")))?;
        Ok(())
    };
    let expand_transport = |server: &str, prefix: &str, transport: &mut Transport| {
        match transport {
            Transport::Stdio { command, args, env } => {
                expand_one(server, &format!("{prefix}command"), command)?;
                for arg in args.iter_mut() {
                    expand_one(server, &format!("{prefix}args"), arg)?;
                }
                for (key, value) in env.iter_mut() {
                    expand_one(server, &format!("{prefix}env.{key}"), value)?;
                }
            }
            Transport::Http { url, headers } => {
                expand_one(server, &format!("{prefix}url"), url)?;
                for (key, value) in headers.iter_mut() {
                    expand_one(server, &format!("{prefix}headers.{key}"), value)?;
                }
            }
        }
        Ok::<(), InputError>(())
    };
    for (name, server) in &mut config.servers {
        let ServerConfig {
            transport,
            sandbox,
            read_only,
            ..
        } = server;
        if let Some(sandbox) = sandbox {
            for path in sandbox.read.iter_mut() {
                expand_one(name, "sandbox.read", path)?;
            }
            for path in sandbox.write.iter_mut() {
                expand_one(name, "sandbox.write", path)?;
            }
        }
        expand_transport(name, "", transport)?;
        if let Some(read_only) = read_only {
            expand_transport(name, "read_only.", &mut read_only.transport)?;
        }
    }
    Ok(config)
}

/// The witness a gateway's checkpoints must go to (`[audit] witness`, its
/// `${VAR}` expanded) and how often (`witness_every_records`,
/// `witness_every_s`; the store's defaults when absent).
fn witness_settings(
    audit: &hintgate_policy::redact::AuditSettings,
) -> Result<hintgate_store::WitnessSettings> {
    let defaults = hintgate_store::WitnessSettings::default();
    let path = audit
        .witness
        .as_deref()
        .map(|text| vars::expand(text, &ProcessEnv))
        .transpose()
        .map_err(|err| InputError(format!("audit.witness: {err}")))?;
    Ok(hintgate_store::WitnessSettings {
        path: path.map(std::path::PathBuf::from),
        every_records: audit
            .witness_every_records
            .unwrap_or(defaults.every_records),
        every: audit
            .witness_every_s
            .map_or(defaults.every, std::time::Duration::from_secs),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_packages_or_programs() {
        let args = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            derive_name(
                "npx",
                &args(&["-y", "@modelcontextprotocol/server-filesystem", "/data"])
            ),
            "server-filesystem"
        );
        assert_eq!(
            derive_name("uvx", &args(&["mcp-server-time"])),
            "mcp-server-time"
        );
        assert_eq!(
            derive_name("/usr/bin/python3", &args(&["server.py"])),
            "python3"
        );
        assert_eq!(derive_name("./my server.sh", &[]), "my-server");
        assert_eq!(derive_name("npx", &args(&["-y", "pkg@1.2.3"])), "pkg");
    }

    /// `hintgate run ARGS -- x`, parsed.
    fn run_args(flags: &[&str]) -> RunArgs {
        use clap::Parser as _;
        let mut argv = vec!["hintgate", "run"];
        argv.extend_from_slice(flags);
        argv.extend_from_slice(&["--", "x"]);
        match crate::args::Cli::try_parse_from(argv).unwrap().command {
            crate::args::Command::Run(args) => *args,
            _ => unreachable!(),
        }
    }

    fn listen_table(text: &str) -> hintgate_policy::config::ListenSettings {
        let (config, diagnostics) = hintgate_policy::config::parse_str(text);
        assert!(diagnostics.is_empty(), "{diagnostics:?}");
        config.unwrap().listen
    }

    #[test]
    fn the_stdio_principal_is_the_local_users_name() {
        let passwd =
            "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/sh\nbroken\n";
        assert_eq!(user_name(passwd, 1000).as_deref(), Some("alice"));
        assert_eq!(user_name(passwd, 0).as_deref(), Some("root"));
        assert_eq!(user_name(passwd, 4242), None);
        assert!(local_principal().starts_with("local:"));
    }

    #[test]
    fn the_listen_tables_connection_bounds_are_used_and_default_when_absent() {
        let file = listen_table(
            "[listen]\naddress = \"127.0.0.1:8787\"\nheader_timeout_s = 7\nmax_unauthenticated_per_address = 3\n",
        );
        let plan = listen_plan(&run_args(&[]), &file, &BTreeMap::new())
            .unwrap()
            .unwrap();
        let defaults = hintgate_http::Limits::default();
        assert_eq!(
            plan.limits.header_timeout,
            std::time::Duration::from_secs(7)
        );
        assert_eq!(plan.limits.max_unauthenticated_per_address, 3);
        assert_eq!(plan.limits.body_timeout, defaults.body_timeout);
        assert_eq!(
            plan.limits.max_unauthenticated,
            defaults.max_unauthenticated
        );
    }

    #[test]
    fn on_loopback_only_the_total_bounds_unauthenticated_connections_unless_one_per_address_is_set()
    {
        let defaults = hintgate_http::Limits::default();
        let plan = |table: &str| {
            listen_plan(&run_args(&[]), &listen_table(table), &BTreeMap::new())
                .unwrap()
                .unwrap()
        };
        // Every local host shares 127.0.0.1: the per-address bound is the
        // total, which a setting of its own lowers.
        let local = plan("[listen]\naddress = \"127.0.0.1:8787\"\nmax_unauthenticated = 300\n");
        assert_eq!(local.limits.max_unauthenticated_per_address, 300);
        let local = plan("[listen]\naddress = \"127.0.0.1:8787\"\n");
        assert_eq!(
            local.limits.max_unauthenticated_per_address,
            defaults.max_unauthenticated
        );
        // On the network, one address (a flood, or one NAT) keeps the
        // default per-address bound.
        let public = plan("[listen]\naddress = \"10.0.0.5:8787\"\npublic = true\n");
        assert_eq!(
            public.limits.max_unauthenticated_per_address,
            defaults.max_unauthenticated_per_address
        );
    }

    #[test]
    fn the_listen_table_is_used_and_each_flag_overrides_its_value() {
        let file = listen_table(
            r#"[listen]
address = "10.0.0.5:8787"
public = true
tls_cert = "${CERT_DIR}/cert.pem"
tls_key = "/etc/hintgate/key.pem"
allow_origins = ["https://app.example.com"]
oauth_issuer = "https://auth.example.com"
oauth_jwks = "https://auth.example.com/jwks.json"
oauth_read_scope = "tools:read"
"#,
        );
        let env = BTreeMap::from([("CERT_DIR".to_owned(), "/etc/tls".to_owned())]);
        let plan = listen_plan(&run_args(&[]), &file, &env).unwrap().unwrap();
        assert_eq!(plan.addr, "10.0.0.5:8787".parse().unwrap());
        assert!(plan.public);
        assert_eq!(
            plan.tls,
            Some(("/etc/tls/cert.pem".into(), "/etc/hintgate/key.pem".into()))
        );
        assert_eq!(plan.origins, ["https://app.example.com"]);
        let oauth = plan.oauth.unwrap();
        assert_eq!(oauth.issuer, "https://auth.example.com");
        assert_eq!(oauth.read_scope, "tools:read");
        assert_eq!(oauth.write_scope, "mcp:write");
        assert_eq!(oauth.audience, None);
        // Flags win.
        let args = run_args(&[
            "--listen",
            "127.0.0.1:9000",
            "--tls-cert",
            "/a/cert.pem",
            "--tls-key",
            "/a/key.pem",
            "--allow-origin",
            "https://other.example.com",
            "--oauth-issuer",
            "https://other-auth.example.com",
            "--oauth-jwks",
            "https://other-auth.example.com/keys",
            "--oauth-audience",
            "https://gw.example.com/mcp",
            "--oauth-write-scope",
            "tools:all",
        ]);
        let plan = listen_plan(&args, &file, &env).unwrap().unwrap();
        assert_eq!(plan.addr, "127.0.0.1:9000".parse().unwrap());
        assert_eq!(plan.tls, Some(("/a/cert.pem".into(), "/a/key.pem".into())));
        assert_eq!(plan.origins, ["https://other.example.com"]);
        let oauth = plan.oauth.unwrap();
        assert_eq!(oauth.issuer, "https://other-auth.example.com");
        assert_eq!(oauth.jwks, "https://other-auth.example.com/keys");
        assert_eq!(
            oauth.audience.as_deref(),
            Some("https://gw.example.com/mcp")
        );
        assert_eq!(oauth.read_scope, "tools:read");
        assert_eq!(oauth.write_scope, "tools:all");
        // Without a table or `--listen`: stdio, and a listening flag alone
        // is refused rather than ignored.
        let none = hintgate_policy::config::ListenSettings::default();
        assert_eq!(listen_plan(&run_args(&[]), &none, &env).unwrap(), None);
        let err = listen_plan(
            &run_args(&["--oauth-issuer", "https://a.example"]),
            &none,
            &env,
        )
        .unwrap_err();
        assert!(
            err.0
                .contains("`--oauth-issuer` is for a gateway that listens"),
            "{}",
            err.0
        );
        // An unset variable in a path stops the start, naming the key.
        let err = listen_plan(&run_args(&[]), &file, &BTreeMap::new()).unwrap_err();
        assert!(err.0.starts_with("listen.tls_cert: "), "{}", err.0);
        // Beyond loopback needs `public`, from the file or the flag.
        let private = listen_table("[listen]\naddress = \"127.0.0.1:8787\"\n");
        let err = listen_plan(&run_args(&["--listen", "0.0.0.0:0"]), &private, &env).unwrap_err();
        assert!(err.0.contains("--listen-public"), "{}", err.0);
        let err = listen_plan(
            &run_args(&[
                "--listen",
                "127.0.0.1:1",
                "--oauth-issuer",
                "https://a.example",
                "--oauth-read-scope",
                "s",
                "--oauth-write-scope",
                "s",
                "--oauth-jwks",
                "https://a.example/k",
            ]),
            &none,
            &env,
        )
        .unwrap_err();
        assert!(err.0.contains("both `s`"), "{}", err.0);
    }

    #[test]
    fn unset_variables_stop_the_start() {
        let (config, _) = hintgate_policy::config::parse_str(
            "[servers.s]\ncommand = \"x\"\nenv = { TOKEN = \"${HINTGATE_NOPE}\" }\n",
        );
        let vars: BTreeMap<String, String> = BTreeMap::new();
        let err = expand(config.unwrap(), &vars).unwrap_err();
        assert_eq!(
            err.0,
            "servers.s.env.TOKEN: variable `HINTGATE_NOPE` is not set"
        );
        let vars = BTreeMap::from([("HINTGATE_NOPE".to_owned(), "t".to_owned())]);
        let (config, _) = hintgate_policy::config::parse_str(
            "[servers.s]\ncommand = \"x\"\nenv = { TOKEN = \"${HINTGATE_NOPE}\" }\n",
        );
        let expanded = expand(config.unwrap(), &vars).unwrap();
        let Transport::Stdio { env, .. } = &expanded.servers["s"].transport else {
            panic!()
        };
        assert_eq!(env["TOKEN"], "t");
    }
}
