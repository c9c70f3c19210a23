//! Protected resource metadata (RFC 9728) and authorization server metadata
//! (RFC 8414, OpenID Connect discovery), found and checked.

use serde::Deserialize;
use url::Url;

use crate::urls::{
    canonical_resource, is_internal_ip_literal, parse_endpoint_url, resource_covers,
    same_identifier, with_path,
};
use crate::{HttpClient, HttpRequest, OAuthError};

/// What the protected resource says about itself (the fields the flow uses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceMetadata {
    /// The resource identifier, checked to cover the server's URL; sent as
    /// the `resource` parameter (RFC 8707).
    pub resource: String,
    /// The issuers of the authorization servers it accepts tokens from.
    pub authorization_servers: Vec<String>,
    /// The scopes it knows, if it says.
    pub scopes_supported: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct RawResource {
    resource: String,
    #[serde(default)]
    authorization_servers: Vec<String>,
    #[serde(default)]
    scopes_supported: Option<Vec<String>>,
}

/// What an authorization server says about itself (the fields the flow uses).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ServerMetadata {
    /// The issuer, checked to be the one the metadata was fetched for.
    pub issuer: String,
    /// The authorization endpoint.
    #[serde(default)]
    pub authorization_endpoint: Option<String>,
    /// The token endpoint.
    pub token_endpoint: String,
    /// The dynamic registration endpoint (RFC 7591).
    #[serde(default)]
    pub registration_endpoint: Option<String>,
    /// The device authorization endpoint (RFC 8628).
    #[serde(default)]
    pub device_authorization_endpoint: Option<String>,
    /// The revocation endpoint (RFC 7009).
    #[serde(default)]
    pub revocation_endpoint: Option<String>,
    /// The scopes it knows, if it says.
    #[serde(default)]
    pub scopes_supported: Option<Vec<String>>,
    /// The grant types it offers.
    #[serde(default)]
    pub grant_types_supported: Option<Vec<String>>,
    /// The PKCE methods it offers.
    #[serde(default)]
    pub code_challenge_methods_supported: Option<Vec<String>>,
    /// How clients authenticate at the token endpoint.
    #[serde(default)]
    pub token_endpoint_auth_methods_supported: Option<Vec<String>>,
    /// Whether it accepts a client ID metadata document URL as `client_id`.
    #[serde(default)]
    pub client_id_metadata_document_supported: Option<bool>,
    /// Whether the authorization response carries `iss` (RFC 9207).
    #[serde(default)]
    pub authorization_response_iss_parameter_supported: Option<bool>,
}

impl ServerMetadata {
    /// Whether the server offers a grant type. RFC 8414: when
    /// `grant_types_supported` is absent, `authorization_code` and
    /// `implicit` are offered; others need the field, except that the device
    /// grant is also offered when its endpoint is published.
    pub fn offers_grant(&self, grant: &str) -> bool {
        match &self.grant_types_supported {
            Some(g) => g.iter().any(|x| x == grant),
            None => {
                grant == "authorization_code"
                    || (grant == "urn:ietf:params:oauth:grant-type:device_code"
                        && self.device_authorization_endpoint.is_some())
            }
        }
    }

    /// Whether `offline_access` is among the scopes it publishes.
    pub fn offers_offline_access(&self) -> bool {
        self.scopes_supported
            .as_ref()
            .is_some_and(|s| s.iter().any(|x| x == "offline_access"))
    }

    /// Refuses a server without PKCE S256 (the MCP spec: a client MUST
    /// refuse when `code_challenge_methods_supported` is absent or lacks
    /// S256).
    pub fn require_pkce_s256(&self) -> Result<(), OAuthError> {
        if self
            .code_challenge_methods_supported
            .as_ref()
            .is_some_and(|m| m.iter().any(|x| x == "S256"))
        {
            Ok(())
        } else {
            Err(OAuthError::PkceUnsupported {
                issuer: self.issuer.clone(),
            })
        }
    }
}

async fn get_json<H: HttpClient>(
    http: &H,
    url: &Url,
) -> Result<Option<(serde_json::Value, String)>, OAuthError> {
    let response = http.send(HttpRequest::get(url.as_str())).await?;
    // A missing document lets discovery try the next place; anything else
    // that is not a success (a redirect, a 401) stops it.
    if matches!(response.status, 404 | 405 | 400) {
        return Ok(None);
    }
    if !response.is_success() {
        return Err(OAuthError::UnexpectedStatus {
            url: url.to_string(),
            status: response.status,
        });
    }
    let value = serde_json::from_slice(&response.body).map_err(|e| OAuthError::Malformed {
        what: "metadata",
        url: url.to_string(),
        reason: format!("not JSON: {e}"),
    })?;
    Ok(Some((value, url.to_string())))
}

/// The well-known URLs of a resource's metadata, in the order the spec
/// gives: the path-aware one (`/.well-known/oauth-protected-resource/mcp`),
/// then the root one.
pub fn resource_metadata_urls(server: &Url) -> Vec<Url> {
    let path = server.path().trim_end_matches('/');
    let mut urls = Vec::new();
    if !path.is_empty() {
        urls.push(with_path(
            server,
            &format!("/.well-known/oauth-protected-resource{path}"),
        ));
    }
    urls.push(with_path(server, "/.well-known/oauth-protected-resource"));
    urls
}

/// Checks a resource metadata document against the server's URL. The
/// declared `resource` must cover the server's URL (same origin, the same
/// path or a parent path); anything else is refused, so a server cannot
/// have hintgate ask for tokens for another resource.
pub fn check_resource_metadata(
    doc: &serde_json::Value,
    from: &str,
    server: &Url,
) -> Result<ResourceMetadata, OAuthError> {
    let raw: RawResource =
        serde_json::from_value(doc.clone()).map_err(|e| OAuthError::Malformed {
            what: "resource metadata",
            url: from.to_owned(),
            reason: e.to_string(),
        })?;
    let declared = Url::parse(&raw.resource).map_err(|_| OAuthError::ResourceMismatch {
        expected: canonical_resource(server),
        declared: raw.resource.clone(),
    })?;
    if !resource_covers(&declared, server) {
        return Err(OAuthError::ResourceMismatch {
            expected: canonical_resource(server),
            declared: raw.resource,
        });
    }
    if raw.authorization_servers.is_empty() {
        return Err(OAuthError::NoAuthorizationServer {
            resource: canonical_resource(server),
        });
    }
    for issuer in &raw.authorization_servers {
        parse_endpoint_url(issuer)?;
    }
    Ok(ResourceMetadata {
        resource: raw.resource,
        authorization_servers: raw.authorization_servers,
        scopes_supported: raw.scopes_supported,
    })
}

/// Finds and checks a server's protected resource metadata: at the
/// challenge's `resource_metadata` URL when there is one, else at the
/// well-known URLs.
pub async fn discover_resource<H: HttpClient>(
    http: &H,
    server_url: &str,
    challenge_url: Option<&str>,
) -> Result<ResourceMetadata, OAuthError> {
    let server = parse_endpoint_url(server_url)?;
    let candidates = match challenge_url {
        Some(u) => {
            let url = parse_endpoint_url(u)?;
            // A server may not point hintgate at an address inside this
            // machine or its networks (a cloud metadata service, a router)
            // unless the server itself is on that host.
            if is_internal_ip_literal(&url) && url.host() != server.host() {
                return Err(OAuthError::InvalidUrl {
                    url: u.to_owned(),
                    reason: "an internal address the server is not on",
                });
            }
            vec![url]
        }
        None => resource_metadata_urls(&server),
    };
    for url in candidates {
        if let Some((doc, from)) = get_json(http, &url).await? {
            return check_resource_metadata(&doc, &from, &server);
        }
    }
    Err(OAuthError::NoResourceMetadata {
        resource: canonical_resource(&server),
    })
}

/// The URLs of an issuer's metadata, in the order the MCP spec gives:
/// RFC 8414 path insertion, OpenID Connect path insertion, OpenID Connect
/// path appending (the last two only differ when the issuer has a path).
pub fn server_metadata_urls(issuer: &Url) -> Vec<Url> {
    let path = issuer.path().trim_end_matches('/');
    if path.is_empty() {
        vec![
            with_path(issuer, "/.well-known/oauth-authorization-server"),
            with_path(issuer, "/.well-known/openid-configuration"),
        ]
    } else {
        vec![
            with_path(
                issuer,
                &format!("/.well-known/oauth-authorization-server{path}"),
            ),
            with_path(issuer, &format!("/.well-known/openid-configuration{path}")),
            with_path(issuer, &format!("{path}/.well-known/openid-configuration")),
        ]
    }
}

/// Checks an authorization server's metadata document: its `issuer` must
/// be the issuer it was fetched for, and every endpoint must be `https` (or
/// `http` on loopback).
pub fn check_server_metadata(
    doc: &serde_json::Value,
    from: &str,
    issuer: &Url,
) -> Result<ServerMetadata, OAuthError> {
    let meta: ServerMetadata =
        serde_json::from_value(doc.clone()).map_err(|e| OAuthError::Malformed {
            what: "authorization server metadata",
            url: from.to_owned(),
            reason: e.to_string(),
        })?;
    let declared = Url::parse(&meta.issuer).ok();
    if !declared
        .as_ref()
        .is_some_and(|d| same_identifier(d, issuer))
    {
        return Err(OAuthError::IssuerMismatch {
            expected: issuer.to_string(),
            declared: meta.issuer,
        });
    }
    for endpoint in [
        meta.authorization_endpoint.as_deref(),
        Some(meta.token_endpoint.as_str()),
        meta.registration_endpoint.as_deref(),
        meta.device_authorization_endpoint.as_deref(),
        meta.revocation_endpoint.as_deref(),
    ]
    .into_iter()
    .flatten()
    {
        parse_endpoint_url(endpoint)?;
    }
    Ok(meta)
}

/// Picks the authorization server to use: `preferred` (from the config)
/// when the resource metadata names it, else the first it names. An issuer
/// the resource metadata does not name is refused.
pub fn choose_issuer(
    resource: &ResourceMetadata,
    preferred: Option<&str>,
) -> Result<Url, OAuthError> {
    let named: Vec<Url> = resource
        .authorization_servers
        .iter()
        .filter_map(|s| parse_endpoint_url(s).ok())
        .collect();
    match preferred {
        Some(p) => {
            let want = parse_endpoint_url(p)?;
            named
                .into_iter()
                .find(|n| same_identifier(n, &want))
                .ok_or_else(|| OAuthError::AuthorizationServerNotNamed {
                    issuer: p.to_owned(),
                })
        }
        None => named
            .into_iter()
            .next()
            .ok_or_else(|| OAuthError::NoAuthorizationServer {
                resource: resource.resource.clone(),
            }),
    }
}

/// Finds and checks the metadata of an authorization server the resource
/// metadata names.
pub async fn discover_server<H: HttpClient>(
    http: &H,
    resource: &ResourceMetadata,
    issuer: &Url,
) -> Result<ServerMetadata, OAuthError> {
    if !resource
        .authorization_servers
        .iter()
        .filter_map(|s| Url::parse(s).ok())
        .any(|n| same_identifier(&n, issuer))
    {
        return Err(OAuthError::AuthorizationServerNotNamed {
            issuer: issuer.to_string(),
        });
    }
    // As for the resource metadata: no authorization server on an internal
    // address the resource (the server) is not on.
    let resource_host = Url::parse(&resource.resource).ok();
    if is_internal_ip_literal(issuer) && resource_host.as_ref().and_then(Url::host) != issuer.host()
    {
        return Err(OAuthError::InvalidUrl {
            url: issuer.to_string(),
            reason: "an internal address the server is not on",
        });
    }
    for url in server_metadata_urls(issuer) {
        if let Some((doc, from)) = get_json(http, &url).await? {
            return check_server_metadata(&doc, &from, issuer);
        }
    }
    Err(OAuthError::NoServerMetadata {
        issuer: issuer.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn u(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn well_known_resource_urls_in_order() {
        let urls: Vec<String> = resource_metadata_urls(&u("https://a.example/mcp/v1?x=1"))
            .iter()
            .map(Url::to_string)
            .collect();
        assert_eq!(
            urls,
            [
                "https://a.example/.well-known/oauth-protected-resource/mcp/v1",
                "https://a.example/.well-known/oauth-protected-resource"
            ]
        );
        assert_eq!(resource_metadata_urls(&u("https://a.example/")).len(), 1);
    }

    #[test]
    fn well_known_server_urls_in_order() {
        let urls: Vec<String> = server_metadata_urls(&u("https://auth.example/tenant1"))
            .iter()
            .map(Url::to_string)
            .collect();
        assert_eq!(
            urls,
            [
                "https://auth.example/.well-known/oauth-authorization-server/tenant1",
                "https://auth.example/.well-known/openid-configuration/tenant1",
                "https://auth.example/tenant1/.well-known/openid-configuration"
            ]
        );
        let urls: Vec<String> = server_metadata_urls(&u("https://auth.example"))
            .iter()
            .map(Url::to_string)
            .collect();
        assert_eq!(
            urls,
            [
                "https://auth.example/.well-known/oauth-authorization-server",
                "https://auth.example/.well-known/openid-configuration"
            ]
        );
    }

    #[test]
    fn resource_covering_the_server_is_accepted() {
        let server = u("https://mcp.example/mcp");
        for declared in [
            "https://mcp.example/mcp",
            "https://mcp.example/",
            "https://MCP.example/mcp/",
        ] {
            let doc =
                json!({"resource": declared, "authorization_servers": ["https://auth.example"]});
            assert!(
                check_resource_metadata(&doc, "x", &server).is_ok(),
                "{declared}"
            );
        }
    }

    #[test]
    fn resource_for_another_server_is_refused() {
        let server = u("https://mcp.example/mcp");
        for declared in [
            "https://evil.example/mcp",
            "https://mcp.example/mcpx",
            "https://mcp.example/other",
            "https://mcp.example:8443/mcp",
            "http://mcp.example/mcp",
            "https://mcp.example/mcp/deeper",
            "not a url",
        ] {
            let doc =
                json!({"resource": declared, "authorization_servers": ["https://auth.example"]});
            let err = check_resource_metadata(&doc, "x", &server).unwrap_err();
            assert_eq!(err.code(), "oauth-resource-mismatch", "{declared}");
        }
    }

    #[test]
    fn resource_without_authorization_server_or_with_http_one_is_refused() {
        let server = u("https://mcp.example/mcp");
        let doc = json!({"resource": "https://mcp.example/mcp"});
        assert_eq!(
            check_resource_metadata(&doc, "x", &server)
                .unwrap_err()
                .code(),
            "oauth-no-authorization-server"
        );
        let doc = json!({"resource": "https://mcp.example/mcp", "authorization_servers": ["http://auth.example"]});
        assert_eq!(
            check_resource_metadata(&doc, "x", &server)
                .unwrap_err()
                .code(),
            "oauth-invalid-url"
        );
    }

    fn server_doc(issuer: &str) -> serde_json::Value {
        json!({
            "issuer": issuer,
            "authorization_endpoint": "https://auth.example/authorize",
            "token_endpoint": "https://auth.example/token",
            "code_challenge_methods_supported": ["S256"],
        })
    }

    #[test]
    fn issuer_must_match_up_to_a_trailing_slash() {
        let issuer = u("https://auth.example");
        assert!(check_server_metadata(&server_doc("https://auth.example/"), "x", &issuer).is_ok());
        for other in [
            "https://evil.example",
            "https://auth.example/t2",
            "nonsense",
        ] {
            assert_eq!(
                check_server_metadata(&server_doc(other), "x", &issuer)
                    .unwrap_err()
                    .code(),
                "oauth-issuer-mismatch"
            );
        }
    }

    #[test]
    fn plain_http_endpoint_off_loopback_is_refused() {
        let mut doc = server_doc("https://auth.example");
        doc["token_endpoint"] = json!("http://auth.example/token");
        assert_eq!(
            check_server_metadata(&doc, "x", &u("https://auth.example"))
                .unwrap_err()
                .code(),
            "oauth-invalid-url"
        );
    }

    #[test]
    fn issuer_not_named_by_the_resource_is_refused() {
        let resource = ResourceMetadata {
            resource: "https://mcp.example/mcp".into(),
            authorization_servers: vec!["https://auth.example".into()],
            scopes_supported: None,
        };
        assert_eq!(
            choose_issuer(&resource, None).unwrap().as_str(),
            "https://auth.example/"
        );
        assert_eq!(
            choose_issuer(&resource, Some("https://evil.example"))
                .unwrap_err()
                .code(),
            "oauth-authorization-server-not-named"
        );
    }

    #[test]
    fn pkce_s256_is_required() {
        let issuer = u("https://auth.example");
        let mut doc = server_doc("https://auth.example");
        let meta = check_server_metadata(&doc, "x", &issuer).unwrap();
        assert!(meta.require_pkce_s256().is_ok());
        doc["code_challenge_methods_supported"] = json!(["plain"]);
        let meta = check_server_metadata(&doc, "x", &issuer).unwrap();
        assert_eq!(
            meta.require_pkce_s256().unwrap_err().code(),
            "oauth-pkce-unsupported"
        );
        doc.as_object_mut()
            .unwrap()
            .remove("code_challenge_methods_supported");
        let meta = check_server_metadata(&doc, "x", &issuer).unwrap();
        assert!(meta.require_pkce_s256().is_err());
    }
}
