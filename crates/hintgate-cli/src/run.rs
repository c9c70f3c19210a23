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
    if let Some(seconds) = args.call_timeout {
        config.gateway.call_timeout_s = seconds.max(1);
    }
    if let Some(seconds) = args.ask_timeout {
        config.gateway.ask_timeout_s = seconds.max(1);
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
    let settings = Settings {
        policy: Policy::new(config),
        mode,
        observer: None,
        store: Some(store),
        connector: None,
    };
    // Over stdio one thread serves the one host. Over HTTP the connections,
    // their parsing and the delivery of each session's lines run on two
    // worker threads beside the gateway's event loop, which stays on this
    // thread and owns the gateway's state alone as ever.
    let runtime = match args.listen {
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
        let stop = stop_signal();
        if let Some(addr) = args.listen {
            return listen(args, addr, settings, token_store, stop).await;
        }
        let (host_in, host_out) = hintgate_proxy::stdio::host_streams();
        let gauges = hintgate_proxy::Gauges::default();
        hintgate_proxy::run_until(settings, host_in, host_out, gauges, stop)
            .await
            .context("the gateway stopped")
    })?;
    Ok(Exit::Success)
}

/// `--listen`: hosts over Streamable HTTP at `http://ADDR/mcp`, many at
/// once on one gateway, until a signal stops it (every call in flight then
/// ends on record before the servers stop, as over stdio).
async fn listen(
    args: &RunArgs,
    addr: std::net::SocketAddr,
    settings: Settings,
    store: std::sync::Arc<dyn hintgate_store::Store>,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    if !addr.ip().is_loopback() && !args.listen_public {
        return Err(InputError(format!(
            "`--listen {addr}` is beyond loopback: hosts on the network would reach your servers; add `--listen-public` (tokens are then required) or listen on 127.0.0.1"
        ))
        .into());
    }
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            let chain = crate::load::text(cert, "the TLS certificate")?;
            let key = crate::load::text(key, "the TLS key")?;
            Some(hintgate_http::Tls::from_pem(
                chain.as_bytes(),
                key.as_bytes(),
            )?)
        }
        _ => None,
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let bound = listener
        .local_addr()
        .context("the listener has no address")?;
    let url = format!("{scheme}://{bound}{}", hintgate_http::ENDPOINT);
    let oauth = match (&args.oauth_issuer, &args.oauth_jwks) {
        (Some(issuer), Some(jwks)) => {
            let oauth = hintgate_http::OAuth::new(hintgate_http::OAuthSettings {
                issuer: issuer.clone(),
                jwks_url: jwks.clone(),
                audience: args.oauth_audience.clone().unwrap_or_else(|| url.clone()),
                read_scope: args.oauth_read_scope.clone(),
                write_scope: args.oauth_write_scope.clone(),
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
        _ => None,
    };
    let tokens: Option<std::sync::Arc<dyn hintgate_http::Authenticate>> = if args.no_auth {
        None
    } else {
        let rows = store.tokens().context("cannot read the hosts' tokens")?;
        rows.iter()
            .any(|row| row.seal == hintgate_store::Seal::Valid)
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
        (None, None) if args.no_auth => {
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
            public: args.listen_public,
            origins: args.allow_origins.clone(),
            auth,
            write_scope,
            tls: tls.is_some(),
            oauth,
        },
    )?;
    let server = tokio::spawn(hintgate_http::serve(listener, tls, router, async move {
        let _ = stopped_rx.await;
    }));
    output::err(&format!("hintgate: serving MCP at {url}\n"))?;
    gateway.await;
    let _ = stopped_tx.send(());
    match server.await {
        Ok(Ok(())) | Err(_) => Ok(()),
        Ok(Err(err)) => Err(err.into()),
    }
}

/// Completes when the process is asked to stop (SIGTERM, SIGINT or SIGHUP;
/// Ctrl-C elsewhere), so that the gateway answers and records every call in
/// flight before it exits instead of dying with them. A signal that cannot
/// be watched keeps its default action, and says so. Must be called within
/// the runtime.
pub(crate) fn stop_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{Signal, SignalKind, signal};

        let watch = |kind: SignalKind, name: &'static str| match signal(kind) {
            Ok(stream) => Some((stream, name)),
            Err(err) => {
                tracing::warn!("{name} cannot be watched, so it stops hintgate at once: {err}");
                None
            }
        };
        async fn received(watched: Option<(Signal, &'static str)>) -> &'static str {
            match watched {
                Some((mut stream, name)) => {
                    stream.recv().await;
                    name
                }
                None => std::future::pending().await,
            }
        }
        let watched = [
            watch(SignalKind::terminate(), "SIGTERM"),
            watch(SignalKind::interrupt(), "SIGINT"),
            watch(SignalKind::hangup(), "SIGHUP"),
        ];
        async move {
            let [term, int, hup] = watched;
            let name = tokio::select! {
                name = received(term) => name,
                name = received(int) => name,
                name = received(hup) => name,
            };
            tracing::info!("{name}: stopping");
        }
    }
    #[cfg(not(unix))]
    {
        async {
            if tokio::signal::ctrl_c().await.is_ok() {
                tracing::info!("Ctrl-C: stopping");
            } else {
                std::future::pending::<()>().await;
            }
        }
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
    Ok(ValidConfig::wrap(
        &name,
        transport,
        trust,
        profile,
        args.unattended,
    ))
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
