//! `hintgate run --metrics ADDR`: the gateway's metrics at `GET /metrics`,
//! in the Prometheus text exposition format.
//!
//! On loopback anyone on the machine may read them, as long as the `Host`
//! header names loopback (a page that rebinds a name of its own to
//! 127.0.0.1 is refused). On any other address every scrape needs a bearer
//! token of scope `metrics`, which [`ScrapeAuth`] checks: no token or an
//! unknown one is answered 401, a host's token (`read`, `write`) 403.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use hintgate_proxy::metrics::{CONTENT_TYPE, Metrics};

/// Where the metrics are served.
pub const METRICS_PATH: &str = "/metrics";

/// What a bearer token presented at `/metrics` is worth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScrapeCheck {
    /// A token of scope `metrics`.
    Allowed,
    /// No such token (or its seal is broken, or the store cannot answer).
    Unknown,
    /// A token of another scope (a host's).
    WrongScope,
}

/// Checks a bearer token presented at `/metrics` (the CLI checks it against
/// the store's tokens; it may block on the store, so it is called off the
/// runtime's threads).
pub trait ScrapeAuth: Send + Sync + std::fmt::Debug {
    /// What `token` is worth.
    fn check(&self, token: &str) -> ScrapeCheck;
}

#[derive(Debug, Clone)]
struct Shared {
    metrics: Arc<Metrics>,
    /// `None` on loopback: no token is asked for.
    auth: Option<Arc<dyn ScrapeAuth>>,
}

/// The router of `GET /metrics`: with `auth`, every scrape needs a token it
/// allows; without (loopback only, which the caller checks), the `Host`
/// must name loopback.
pub fn metrics_router(metrics: Arc<Metrics>, auth: Option<Arc<dyn ScrapeAuth>>) -> Router {
    Router::new()
        .route(METRICS_PATH, get(scrape))
        .with_state(Shared { metrics, auth })
}

async fn scrape(
    State(shared): State<Shared>,
    ticket: Option<Extension<Arc<crate::listener::Ticket>>>,
    headers: HeaderMap,
) -> Response {
    match &shared.auth {
        None => {
            if !host_is_loopback(&headers) {
                return (
                    StatusCode::FORBIDDEN,
                    "the Host header does not name loopback\n",
                )
                    .into_response();
            }
        }
        Some(auth) => {
            let Some(token) = bearer(&headers) else {
                return refuse(
                    StatusCode::UNAUTHORIZED,
                    "Bearer realm=\"hintgate-metrics\"",
                    "a bearer token of scope `metrics` is needed\n",
                );
            };
            let auth = Arc::clone(auth);
            let checked = tokio::task::spawn_blocking(move || auth.check(&token))
                .await
                .unwrap_or(ScrapeCheck::Unknown);
            match checked {
                ScrapeCheck::Allowed => {}
                ScrapeCheck::Unknown => {
                    return refuse(
                        StatusCode::UNAUTHORIZED,
                        "Bearer realm=\"hintgate-metrics\", error=\"invalid_token\"",
                        "the token is not valid\n",
                    );
                }
                ScrapeCheck::WrongScope => {
                    return refuse(
                        StatusCode::FORBIDDEN,
                        "Bearer realm=\"hintgate-metrics\", error=\"insufficient_scope\", scope=\"metrics\"",
                        "the token's scope is not `metrics`\n",
                    );
                }
            }
        }
    }
    // The scraper's connection passed: like a host's, it no longer counts
    // among those that have not authenticated, nor is closed for them.
    if let Some(Extension(ticket)) = ticket {
        ticket.admitted();
    }
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE))],
        shared.metrics.render(),
    )
        .into_response()
}

fn refuse(status: StatusCode, challenge: &'static str, text: &'static str) -> Response {
    (
        status,
        [(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(challenge),
        )],
        text,
    )
        .into_response()
}

/// The bearer token of the `Authorization` header, if it has one.
fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_owned())
}

/// Whether the `Host` header names loopback: `localhost` or a loopback IP
/// literal, with or without a port. A request without one (HTTP/1.0) is
/// taken: a browser always sends it.
fn host_is_loopback(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::HOST) else {
        return true;
    };
    let Ok(host) = value.to_str() else {
        return false;
    };
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split_once(']').map_or(rest, |(inside, _)| inside)
    } else {
        host.rsplit_once(':').map_or(host, |(name, _)| name)
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn only_a_loopback_host_is_taken_without_a_token() {
        for ok in [
            "127.0.0.1:9464",
            "localhost:1",
            "[::1]:80",
            "127.0.0.2",
            "LOCALHOST",
        ] {
            assert!(host_is_loopback(&host(ok)), "{ok}");
        }
        for bad in [
            "evil.example:9464",
            "10.0.0.1:80",
            "[::2]:80",
            "localhost.evil.example",
        ] {
            assert!(!host_is_loopback(&host(bad)), "{bad}");
        }
    }

    #[test]
    fn a_bearer_token_is_read_only_from_the_bearer_scheme() {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(bearer(&headers), None);
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("bearer  tok "),
        );
        assert_eq!(bearer(&headers).as_deref(), Some("tok"));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer "));
        assert_eq!(bearer(&headers), None);
    }
}
