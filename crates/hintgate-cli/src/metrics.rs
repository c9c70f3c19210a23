//! `hintgate run --metrics ADDR`: the gateway's metrics for Prometheus at
//! `http://ADDR/metrics`, beside the gateway on the same runtime.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use hintgate_http::{ScrapeAuth, ScrapeCheck};
use hintgate_policy::config::ValidConfig;
use hintgate_proxy::Metrics;
use hintgate_store::{Seal, Store, token_hash};

use crate::load::InputError;
use crate::output;
use crate::token::METRICS_SCOPE;

/// What `--metrics` serves, and who may read it.
#[derive(Debug)]
pub(crate) struct MetricsPlan {
    /// Where `/metrics` is served.
    addr: SocketAddr,
    /// What the gateway counts into.
    pub(crate) metrics: Arc<Metrics>,
    /// `None` on loopback: nobody is asked for a token.
    auth: Option<Arc<dyn ScrapeAuth>>,
}

/// The plan of `--metrics ADDR`: on loopback open to this machine; on any
/// other address only to tokens of scope `metrics`, of which one must exist.
///
/// # Errors
///
/// [`InputError`] for an address beyond loopback and no `metrics` token;
/// the store's error when its tokens cannot be read.
pub(crate) fn plan(
    addr: SocketAddr,
    config: &ValidConfig,
    store: Arc<dyn Store>,
) -> Result<MetricsPlan> {
    let auth: Option<Arc<dyn ScrapeAuth>> = if addr.ip().is_loopback() {
        None
    } else {
        let tokens = store.tokens().context("cannot read the tokens")?;
        if !tokens
            .iter()
            .any(|row| row.seal == Seal::Valid && row.scope == METRICS_SCOPE)
        {
            return Err(InputError(format!(
                "`--metrics {addr}` is beyond loopback, where only a token of scope `metrics` may read them, and there is none: add one with `hintgate token add NAME --scope metrics`, or serve them on 127.0.0.1"
            ))
            .into());
        }
        Some(Arc::new(MetricsTokens { store }))
    };
    Ok(MetricsPlan {
        addr,
        metrics: Arc::new(Metrics::for_config(config)),
        auth,
    })
}

/// Binds `/metrics` and serves it until the process ends; its URL goes to
/// stderr (stdout belongs to the protocol).
///
/// # Errors
///
/// When the address cannot be listened on.
pub(crate) async fn start(plan: MetricsPlan) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(plan.addr)
        .await
        .with_context(|| format!("cannot serve the metrics on {}", plan.addr))?;
    let bound = listener
        .local_addr()
        .context("the metrics' listener has no address")?;
    let router = hintgate_http::metrics_router(plan.metrics, plan.auth);
    tokio::spawn(async move {
        let served = hintgate_http::serve(
            listener,
            None,
            router,
            hintgate_http::Limits::default(),
            std::future::pending(),
        )
        .await;
        if let Err(err) = served {
            tracing::warn!("the metrics stopped: {err}");
        }
    });
    output::err(&format!(
        "hintgate: serving metrics at http://{bound}{}\n",
        hintgate_http::METRICS_PATH
    ))?;
    Ok(())
}

/// Scrapers' bearer tokens checked against the store's: only a token of
/// scope `metrics` reads them.
#[derive(Debug)]
struct MetricsTokens {
    store: Arc<dyn Store>,
}

impl ScrapeAuth for MetricsTokens {
    fn check(&self, token: &str) -> ScrapeCheck {
        match self.store.find_token(&token_hash(token)) {
            Ok(Some(row)) if row.scope == METRICS_SCOPE => ScrapeCheck::Allowed,
            Ok(Some(_)) => ScrapeCheck::WrongScope,
            Ok(None) => ScrapeCheck::Unknown,
            Err(err) => {
                // Fails closed: a store that cannot answer lets nobody in.
                tracing::warn!("a scraper's token could not be checked: {err}");
                ScrapeCheck::Unknown
            }
        }
    }
}
