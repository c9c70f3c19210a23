//! The loopback redirect (RFC 8252 §7.3): a listener on 127.0.0.1 that
//! takes the authorization server's redirect from the person's browser.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::OAuthError;
use crate::flow::{AuthorizationRequest, parse_redirect};

/// The path of the redirect URI.
pub const CALLBACK_PATH: &str = "/callback";

/// The largest request head the listener reads.
const MAX_HEAD: usize = 8 * 1024;

/// How many requests to the callback with a wrong `state` the listener
/// answers and ignores before it gives up (a local process cannot end a
/// login by sending one, nor keep the listener forever).
const MAX_BAD_CALLBACKS: u32 = 16;

pub use crate::urls::check_redirect_uri;

/// A listener for one login's redirect.
#[derive(Debug)]
pub struct RedirectListener {
    listener: TcpListener,
    redirect_uri: String,
}

impl RedirectListener {
    /// Binds 127.0.0.1 on `port` (0: any free port).
    pub async fn bind(port: u16) -> Result<Self, OAuthError> {
        let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
            .await
            .map_err(|e| OAuthError::Listener {
                reason: format!("binding 127.0.0.1:{port}: {e}"),
            })?;
        let addr = listener.local_addr().map_err(|e| OAuthError::Listener {
            reason: e.to_string(),
        })?;
        Ok(Self {
            listener,
            redirect_uri: format!("http://127.0.0.1:{}{CALLBACK_PATH}", addr.port()),
        })
    }

    /// The redirect URI to register and send.
    pub fn redirect_uri(&self) -> &str {
        &self.redirect_uri
    }

    /// Waits for the redirect of `request` and returns its code. A request
    /// to another path gets 404; one to the callback with another `state`
    /// gets 400 and is ignored; the authorization server's `error` ends the
    /// wait. Gives up after `deadline`.
    pub async fn wait(
        &self,
        request: &AuthorizationRequest,
        deadline: Duration,
    ) -> Result<crate::Secret, OAuthError> {
        tokio::time::timeout(deadline, self.accept_loop(request))
            .await
            .map_err(|_| OAuthError::Listener {
                reason: "no redirect before the deadline".to_owned(),
            })?
    }

    async fn accept_loop(
        &self,
        request: &AuthorizationRequest,
    ) -> Result<crate::Secret, OAuthError> {
        let mut bad = 0u32;
        loop {
            let (mut stream, _) =
                self.listener
                    .accept()
                    .await
                    .map_err(|e| OAuthError::Listener {
                        reason: e.to_string(),
                    })?;
            let Ok(Some(target)) =
                tokio::time::timeout(Duration::from_secs(10), read_target(&mut stream))
                    .await
                    .unwrap_or(Ok(None))
            else {
                continue;
            };
            let (path, query) = target.split_once('?').unwrap_or((target.as_str(), ""));
            if path != CALLBACK_PATH {
                respond(&mut stream, "404 Not Found", "Not found.").await;
                continue;
            }
            match parse_redirect(query, request) {
                Ok(code) => {
                    respond(
                        &mut stream,
                        "200 OK",
                        "hintgate: signed in. You can close this window.",
                    )
                    .await;
                    return Ok(code);
                }
                Err(OAuthError::StateMismatch) if bad < MAX_BAD_CALLBACKS => {
                    bad += 1;
                    tracing::warn!("a redirect with another login's state was ignored");
                    respond(&mut stream, "400 Bad Request", "Unknown login.").await;
                }
                Err(e) => {
                    respond(&mut stream, "400 Bad Request", "hintgate: sign-in failed.").await;
                    return Err(e);
                }
            }
        }
    }
}

/// Reads a request head and returns its target (`/callback?...`), or
/// `None` for anything that is not a GET with a head under the bound.
async fn read_target(stream: &mut tokio::net::TcpStream) -> Result<Option<String>, OAuthError> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|e| OAuthError::Listener {
                reason: e.to_string(),
            })?;
        if n == 0 || buf.len() + n > MAX_HEAD {
            return Ok(None);
        }
        buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
    }
    let head = String::from_utf8_lossy(&buf);
    let line = head.lines().next().unwrap_or_default();
    let mut parts = line.split(' ');
    match (parts.next(), parts.next()) {
        (Some("GET"), Some(target)) => Ok(Some(target.to_owned())),
        _ => Ok(None),
    }
}

async fn respond(stream: &mut tokio::net::TcpStream, status: &str, text: &str) {
    let body = format!("<!doctype html><meta charset=utf-8><title>hintgate</title><p>{text}</p>");
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\ncache-control: no-store\r\nreferrer-policy: no-referrer\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    // The browser may have gone; nothing to do about a failed write.
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_ip_literals_with_a_port() {
        assert!(check_redirect_uri("http://127.0.0.1:8765/callback").is_ok());
        assert!(check_redirect_uri("http://[::1]:8765/callback").is_ok());
        for bad in [
            "https://evil.example/callback",
            "http://evil.example:80/callback",
            "http://localhost:8765/callback",
            "http://127.0.0.1/callback",
            "http://10.0.0.1:8765/callback",
            "http://127.0.0.1:8765/callback#x",
            "http://user@127.0.0.1:8765/callback",
            "myapp://callback",
            "not a uri",
        ] {
            assert_eq!(
                check_redirect_uri(bad).unwrap_err().code(),
                "oauth-redirect-not-loopback",
                "{bad}"
            );
        }
    }
}
