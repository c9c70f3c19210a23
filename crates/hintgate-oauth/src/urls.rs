//! URL checks shared by every step: the schemes allowed, loopback hosts,
//! and the comparison of a resource or an issuer.

use url::{Host, Url};

use crate::OAuthError;

/// Whether a URL's host is a loopback address (`127.0.0.0/8`, `::1`) or
/// `localhost`.
pub fn is_loopback_host(url: &Url) -> bool {
    match url.host() {
        Some(Host::Ipv4(ip)) => ip.is_loopback(),
        Some(Host::Ipv6(ip)) => ip.is_loopback(),
        Some(Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

/// Parses a URL the flow will call or send a person to: `https`, or `http`
/// on a loopback host; no fragment, no user information.
pub fn parse_endpoint_url(raw: &str) -> Result<Url, OAuthError> {
    let invalid = |reason| OAuthError::InvalidUrl {
        url: raw.to_owned(),
        reason,
    };
    let url = Url::parse(raw).map_err(|_| invalid("not a URL"))?;
    match url.scheme() {
        "https" => {}
        "http" if is_loopback_host(&url) => {}
        "http" => return Err(invalid("http is allowed on loopback only")),
        _ => return Err(invalid("not https")),
    }
    if url.host().is_none() {
        return Err(invalid("no host"));
    }
    if url.fragment().is_some() {
        return Err(invalid("has a fragment"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid("has user information"));
    }
    Ok(url)
}

/// The path of a URL without its trailing `/` (so `https://a` and
/// `https://a/` compare equal, as issuers often differ only by that).
fn trimmed_path(url: &Url) -> &str {
    url.path().trim_end_matches('/')
}

/// Whether two URLs have the same origin (scheme, host, port).
pub(crate) fn same_origin(a: &Url, b: &Url) -> bool {
    a.origin() == b.origin()
}

/// Whether two issuer or resource identifiers are the same: same origin,
/// same path up to a trailing `/`, same query.
pub(crate) fn same_identifier(a: &Url, b: &Url) -> bool {
    same_origin(a, b) && trimmed_path(a) == trimmed_path(b) && a.query() == b.query()
}

/// Whether a protected resource's declared identifier covers the server's
/// URL: same origin, and the declared path is the server's path or one of
/// its parent paths at a `/` boundary (a server at `https://a/mcp` may
/// declare `https://a/` or `https://a/mcp`, never `https://a/other` nor
/// `https://b/mcp`).
pub(crate) fn resource_covers(declared: &Url, server: &Url) -> bool {
    if !same_origin(declared, server) || declared.query().is_some() {
        return false;
    }
    let d = trimmed_path(declared);
    let s = trimmed_path(server);
    d == s || (s.starts_with(d) && s.as_bytes().get(d.len()) == Some(&b'/'))
}

/// The canonical identifier of an MCP server's URL (RFC 8707, MCP
/// authorization): scheme and host in lower case (the parser does that), no
/// fragment, no trailing `/` unless the path is only `/`.
pub(crate) fn canonical_resource(url: &Url) -> String {
    let mut u = url.clone();
    u.set_fragment(None);
    let s = u.to_string();
    if u.path() == "/" && u.query().is_none() {
        return s.trim_end_matches('/').to_owned();
    }
    s
}

/// A URL built from an origin and a path (well-known URLs).
pub(crate) fn with_path(base: &Url, path: &str) -> Url {
    let mut u = base.clone();
    u.set_path(path);
    u.set_query(None);
    u.set_fragment(None);
    u
}

/// Whether a URL's host is an IP literal of this machine or its networks:
/// loopback, private (RFC 1918, unique local), link-local (where cloud
/// metadata services answer), shared (RFC 6598) or unspecified. A name is
/// not resolved here, so a name that resolves to such an address passes.
pub(crate) fn is_internal_ip_literal(url: &Url) -> bool {
    match url.host() {
        Some(Host::Ipv4(ip)) => {
            let [a, b, ..] = ip.octets();
            ip.is_loopback()
                || ip.is_private()
                || ip.is_link_local()
                || ip.is_unspecified()
                || (a == 100 && (64..128).contains(&b))
        }
        Some(Host::Ipv6(ip)) => {
            let first = ip.segments().first().copied().unwrap_or(0);
            ip.is_loopback()
                || ip.is_unspecified()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || ip
                    .to_ipv4_mapped()
                    .is_some_and(|v4| v4.is_loopback() || v4.is_private() || v4.is_link_local())
        }
        _ => false,
    }
}

/// Checks a redirect URI: `http` on a loopback IP literal (`127.0.0.1` or
/// `[::1]`, not a name a resolver could answer), with a port, no fragment,
/// no user information. Anything else is refused: a code must never be
/// sent to another machine.
pub fn check_redirect_uri(uri: &str) -> Result<Url, OAuthError> {
    let refuse = || OAuthError::RedirectNotLoopback {
        uri: uri.to_owned(),
    };
    let url = Url::parse(uri).map_err(|_| refuse())?;
    let loopback_ip = match url.host() {
        Some(Host::Ipv4(ip)) => ip.is_loopback(),
        Some(Host::Ipv6(ip)) => ip.is_loopback(),
        _ => false,
    };
    if url.scheme() != "http"
        || !loopback_ip
        || url.port().is_none()
        || url.fragment().is_some()
        || !url.username().is_empty()
        || url.password().is_some()
    {
        return Err(refuse());
    }
    Ok(url)
}
