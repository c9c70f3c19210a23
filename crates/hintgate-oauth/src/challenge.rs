//! The `WWW-Authenticate` header of a 401 or a 403 (RFC 6750 §3, RFC 9110
//! §11.6.1, RFC 9728 §5.1).

/// What a `Bearer` challenge says. Unknown parameters are ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BearerChallenge {
    /// `resource_metadata`: where the protected resource metadata is.
    pub resource_metadata: Option<String>,
    /// `scope`: the scopes the request needs, split on spaces.
    pub scope: Option<Vec<String>>,
    /// `error`: `invalid_token`, `insufficient_scope`, ...
    pub error: Option<String>,
}

impl BearerChallenge {
    /// Whether this is a step-up request (`error="insufficient_scope"`).
    pub fn is_insufficient_scope(&self) -> bool {
        self.error.as_deref() == Some("insufficient_scope")
    }
}

/// A byte cursor over one header value.
struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.i += 1;
        }
    }

    fn skip_ws_commas(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b',')) {
            self.i += 1;
        }
    }

    /// A token (RFC 9110 `tchar`s), or `None` when none is here.
    fn token(&mut self) -> Option<&'a str> {
        let start = self.i;
        while let Some(c) = self.peek() {
            if c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c) {
                self.i += 1;
            } else {
                break;
            }
        }
        let t = self.s.get(start..self.i)?;
        if t.is_empty() {
            return None;
        }
        std::str::from_utf8(t).ok()
    }

    /// A quoted string with its escapes removed, or `None` when unterminated.
    fn quoted(&mut self) -> Option<String> {
        if self.peek() != Some(b'"') {
            return None;
        }
        self.i += 1;
        let mut out = Vec::new();
        loop {
            match self.peek()? {
                b'"' => {
                    self.i += 1;
                    return String::from_utf8(out).ok();
                }
                b'\\' => {
                    self.i += 1;
                    out.push(self.peek()?);
                    self.i += 1;
                }
                c => {
                    out.push(c);
                    self.i += 1;
                }
            }
        }
    }
}

/// One challenge: its scheme and its parameters (`None` when malformed).
type Challenge = (String, Vec<(String, String)>);

/// Parses one header value into its challenges. A value that does not
/// parse gives what was read before the fault.
fn parse_value(value: &str) -> Vec<Challenge> {
    let mut c = Cursor {
        s: value.as_bytes(),
        i: 0,
    };
    let mut out: Vec<Challenge> = Vec::new();
    loop {
        c.skip_ws_commas();
        let Some(scheme) = c.token() else { break };
        let mut params = Vec::new();
        // Parameters until the next scheme (a token not followed by `=`).
        loop {
            c.skip_ws_commas();
            let save = c.i;
            let Some(name) = c.token() else { break };
            c.skip_ws();
            if c.peek() != Some(b'=') {
                // The next challenge's scheme, or a token68 (ignored).
                c.i = save;
                break;
            }
            c.i += 1;
            c.skip_ws();
            let value = if c.peek() == Some(b'"') {
                match c.quoted() {
                    Some(v) => v,
                    None => {
                        out.push((scheme.to_owned(), params));
                        return out;
                    }
                }
            } else if let Some(t) = c.token() {
                // Trailing `=` of a token68 are consumed with it.
                t.to_owned()
            } else {
                String::new()
            };
            params.push((name.to_ascii_lowercase(), value));
        }
        out.push((scheme.to_owned(), params));
        if c.i >= c.s.len() {
            break;
        }
        // The next scheme starts here; else skip a token68's tail or
        // garbage up to the next comma.
        c.skip_ws_commas();
        let save = c.i;
        if c.token().is_some() {
            c.i = save;
            continue;
        }
        if c.peek().is_some_and(|b| b != b',') {
            while c.peek().is_some_and(|b| b != b',') {
                c.i += 1;
            }
        }
    }
    out
}

/// The first well-formed `Bearer` challenge among the values of every
/// `WWW-Authenticate` header of a response. A challenge that repeats a
/// parameter (RFC 9110: each name at most once) is malformed and skipped.
pub fn parse_www_authenticate(values: &[&str]) -> Option<BearerChallenge> {
    for value in values {
        for (scheme, params) in parse_value(value) {
            if !scheme.eq_ignore_ascii_case("bearer") {
                continue;
            }
            let mut seen: Vec<&str> = Vec::new();
            let mut dup = false;
            for (name, _) in &params {
                if seen.contains(&name.as_str()) {
                    dup = true;
                }
                seen.push(name);
            }
            if dup {
                continue;
            }
            let get = |n: &str| params.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
            return Some(BearerChallenge {
                resource_metadata: get("resource_metadata").filter(|v| !v.is_empty()),
                scope: get("scope").map(|s| {
                    s.split(' ')
                        .filter(|p| !p.is_empty())
                        .map(str::to_owned)
                        .collect()
                }),
                error: get("error").map(|e| crate::safe_code(&e)),
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_with_every_parameter() {
        let c = parse_www_authenticate(&[
            r#"Bearer realm="mcp", error="insufficient_scope", scope="files:read files:write", resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource""#,
        ])
        .unwrap();
        assert_eq!(
            c.resource_metadata.as_deref(),
            Some("https://mcp.example.com/.well-known/oauth-protected-resource")
        );
        assert_eq!(
            c.scope,
            Some(vec!["files:read".to_owned(), "files:write".to_owned()])
        );
        assert!(c.is_insufficient_scope());
    }

    #[test]
    fn bearer_after_another_scheme_and_in_a_second_header() {
        let c = parse_www_authenticate(&[
            r#"Basic realm="a, b", Bearer resource_metadata="https://x/m""#,
        ])
        .unwrap();
        assert_eq!(c.resource_metadata.as_deref(), Some("https://x/m"));
        let c = parse_www_authenticate(&["Negotiate abc==", "bearer error=invalid_token"]).unwrap();
        assert_eq!(c.error.as_deref(), Some("invalid_token"));
        assert_eq!(c.resource_metadata, None);
    }

    #[test]
    fn bare_bearer_and_escapes() {
        assert_eq!(
            parse_www_authenticate(&["Bearer"]),
            Some(BearerChallenge::default())
        );
        let c = parse_www_authenticate(&[r#"Bearer scope="a\"b""#]).unwrap();
        assert_eq!(c.scope, Some(vec!["a\"b".to_owned()]));
    }

    #[test]
    fn no_bearer_or_malformed_gives_none() {
        assert_eq!(parse_www_authenticate(&[]), None);
        assert_eq!(parse_www_authenticate(&[r#"Basic realm="x""#]), None);
        // A repeated parameter makes the challenge malformed.
        assert_eq!(
            parse_www_authenticate(&[
                r#"Bearer resource_metadata="https://a/m", resource_metadata="https://evil/m""#
            ]),
            None
        );
    }

    #[test]
    fn unterminated_quote_keeps_what_was_read() {
        let c = parse_www_authenticate(&[r#"Bearer error="invalid_token", scope="a b"#]).unwrap();
        assert_eq!(c.error.as_deref(), Some("invalid_token"));
        assert_eq!(c.scope, None);
    }

    #[test]
    fn error_code_is_reduced_to_safe_characters() {
        let c = parse_www_authenticate(&["Bearer error=\"bad\r\ncode token=abc\""]).unwrap();
        assert_eq!(c.error.as_deref(), Some("badcodetokenabc"));
    }
}
