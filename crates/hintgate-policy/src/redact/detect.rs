//! Values that look like credentials, whatever the key they are under.
//!
//! The audit log's default redaction is decided here, by the value: a
//! server names its tools' arguments, so a rule on names would let it
//! choose what the log leaves out. A string is a secret when it holds a
//! known credential format (a private key block, a URL with a password, an
//! `Authorization` value, a token with a vendor's prefix, a JWT) or a
//! token that looks random (long, mixed letters and digits, high Shannon
//! entropy).
//!
//! The rules lean towards redacting: a long identifier that mixes case and
//! digits may be taken for a token. A redacted value keeps its length and a
//! keyed digest, so two records can still be matched.

/// The shortest text that is checked at all: no rule below matches less.
const MIN_LEN: usize = 16;

/// A token needs at least this many characters to be judged by entropy.
const MIN_RANDOM_LEN: usize = 20;

/// A token of hexadecimal digits only needs at least this many.
const MIN_HEX_LEN: usize = 32;

/// Vendor prefixes of well-known credentials, with the least number of
/// token characters that must follow the prefix.
const PREFIXES: &[(&str, usize)] = &[
    // GitHub: personal, OAuth, user-to-server, server-to-server, refresh, fine-grained.
    ("ghp_", 30),
    ("gho_", 30),
    ("ghu_", 30),
    ("ghs_", 30),
    ("ghr_", 30),
    ("github_pat_", 30),
    // GitLab personal, deploy, runner tokens.
    ("glpat-", 20),
    ("gldt-", 20),
    ("glrt-", 20),
    // Slack bot, user, app, refresh, legacy workspace tokens.
    ("xoxb-", 10),
    ("xoxp-", 10),
    ("xoxa-", 10),
    ("xoxr-", 10),
    ("xoxs-", 10),
    ("xapp-", 10),
    // Stripe live and restricted keys.
    ("sk_live_", 16),
    ("rk_live_", 16),
    ("sk_test_", 16),
    // Anthropic, then OpenAI (and others that copied its `sk-`).
    ("sk-ant-", 20),
    ("sk-", 20),
    // Google API keys.
    ("AIza", 30),
    // npm, PyPI, Hugging Face, DigitalOcean, Shopify, SendGrid.
    ("npm_", 30),
    ("pypi-", 40),
    ("hf_", 30),
    ("dop_v1_", 40),
    ("shpat_", 30),
    ("SG.", 40),
];

/// Whether `text` is, or holds, something that looks like a credential.
pub fn looks_like_secret(text: &str) -> bool {
    text.len() >= MIN_LEN && may_hold_one(text) && any_rule(text)
}

/// Whether a rule matches `text`.
fn any_rule(text: &str) -> bool {
    private_key_block(text)
        || url_with_password(text)
        || authorization_value(text)
        || tokens(text).any(|token| vendor_token(token) || json_web_token(token) || random(token))
}

/// Whether any rule could match `text`, in one pass over its bytes: every
/// rule but two needs a run of at least [`MIN_LEN`] token bytes (a vendor
/// token, a JWT and a random token are such runs, and so is the token of an
/// `Authorization` value), and those two need a `:` (a URL's `://`) or a
/// PEM block's `-----BEGIN `. Most text (words, sentences, numbers) has
/// none, and is told apart here without the rules' own passes.
fn may_hold_one(text: &str) -> bool {
    let mut run = 0;
    for &byte in text.as_bytes() {
        if is_token_byte(byte) {
            run += 1;
            if run >= MIN_LEN {
                return true;
            }
        } else if byte == b':' {
            return true;
        } else {
            run = 0;
        }
    }
    text.contains("-----BEGIN ")
}

/// `-----BEGIN ... PRIVATE KEY-----` (PEM, OpenSSH, PGP private blocks).
fn private_key_block(text: &str) -> bool {
    text.contains("-----BEGIN ")
        && (text.contains("PRIVATE KEY-----") || text.contains("PRIVATE KEY BLOCK-----"))
}

/// `scheme://user:password@host`: a password in a URL's user info.
fn url_with_password(text: &str) -> bool {
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let after = &rest[at + 3..];
        let authority_end = after
            .find(|ch: char| ch == '/' || ch == '?' || ch == '#' || ch.is_whitespace())
            .unwrap_or(after.len());
        let authority = &after[..authority_end];
        if let Some((user_info, _host)) = authority.rsplit_once('@')
            && let Some((_user, password)) = user_info.split_once(':')
            && !password.is_empty()
        {
            return true;
        }
        rest = after;
    }
    false
}

/// `Bearer TOKEN`, `Basic TOKEN`, `token TOKEN` as an `Authorization`
/// header's value, with a token of some length.
fn authorization_value(text: &str) -> bool {
    let mut words = text.split_whitespace().peekable();
    while let Some(word) = words.next() {
        let scheme = word.trim_start_matches(['"', '\'', ':', '=']);
        if ["bearer", "basic", "token", "digest"]
            .iter()
            .any(|name| scheme.eq_ignore_ascii_case(name))
            && words
                .peek()
                .is_some_and(|next| next.len() >= MIN_LEN && next.bytes().all(is_token_byte))
        {
            return true;
        }
    }
    false
}

/// The runs of token characters in `text`: letters, digits and the
/// punctuation of base64, base64url and vendor tokens.
fn tokens(text: &str) -> impl Iterator<Item = &str> {
    text.split(|ch: char| !(ch.is_ascii() && is_token_byte(ch as u8)))
        .filter(|token| token.len() >= MIN_LEN)
}

fn is_token_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'+' | b'/' | b'=' | b'_' | b'-' | b'.')
}

/// A token that starts with a known vendor prefix (at the start of the
/// token, or after a `/`, `.` or `=` inside it).
fn vendor_token(token: &str) -> bool {
    let starts = std::iter::once(0).chain(
        token
            .match_indices(['/', '=', '.'])
            .map(|(idx, _)| idx + 1)
            .filter(|idx| *idx < token.len()),
    );
    for start in starts {
        let candidate = &token[start..];
        // AWS access key ids: `AKIA` or `ASIA` and 16 upper-case letters or digits.
        if (candidate.starts_with("AKIA") || candidate.starts_with("ASIA"))
            && candidate.len() >= 20
            && candidate.as_bytes().get(4..20).is_some_and(|id| {
                id.iter()
                    .all(|byte| byte.is_ascii_uppercase() || byte.is_ascii_digit())
            })
        {
            return true;
        }
        for (prefix, least) in PREFIXES {
            if let Some(rest) = candidate.strip_prefix(prefix) {
                let body = rest
                    .bytes()
                    .take_while(|byte| {
                        byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-' | b'.')
                    })
                    .count();
                if body >= *least {
                    return true;
                }
            }
        }
    }
    false
}

/// A JSON Web Token: three base64url parts joined by dots, the first a
/// JSON object (`eyJ` is `{"` encoded).
fn json_web_token(token: &str) -> bool {
    let Some(start) = token.find("eyJ") else {
        return false;
    };
    let mut parts = token[start..].split('.');
    let (Some(header), Some(payload), Some(signature)) = (parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    header.len() >= 10 && payload.len() >= 10 && !signature.is_empty()
}

/// A token that looks random: long, and either hexadecimal with digits and
/// letters mixed, or with lower-case letters, upper-case letters and digits
/// all present, at high Shannon entropy for its length.
fn random(token: &str) -> bool {
    // Dots split names (`archive.tar.gz`, host names) but not base64; judge
    // each dotted part as well as the whole.
    token
        .split('.')
        .filter(|part| part.len() >= MIN_RANDOM_LEN)
        .any(random_part)
}

fn random_part(part: &str) -> bool {
    let bytes = part.as_bytes();
    let (mut lower, mut upper, mut digit, mut hex_letters, mut other) = (0, 0, 0, 0, 0);
    for byte in bytes {
        match byte {
            b'0'..=b'9' => digit += 1,
            b'a'..=b'f' | b'A'..=b'F' => {
                hex_letters += 1;
                if byte.is_ascii_lowercase() {
                    lower += 1;
                } else {
                    upper += 1;
                }
            }
            b'a'..=b'z' => lower += 1,
            b'A'..=b'Z' => upper += 1,
            _ => other += 1,
        }
    }
    let entropy = shannon_entropy(bytes);
    let hex_only = other == 0 && digit + hex_letters == bytes.len();
    if hex_only {
        return bytes.len() >= MIN_HEX_LEN && digit > 0 && hex_letters > 0 && entropy >= 3.0;
    }
    if lower == 0 || upper == 0 || digit == 0 {
        return false;
    }
    // Random text over 62 or 64 symbols sits close to log2(len) bits per
    // character until the alphabet runs out; words and identifiers repeat
    // letters and fall below.
    #[expect(
        clippy::cast_precision_loss,
        reason = "a token's length is far below 2^52"
    )]
    let ceiling = (bytes.len() as f64).log2().min(6.0);
    entropy >= 0.85 * ceiling
}

/// Bits per byte of `bytes`' own distribution.
fn shannon_entropy(bytes: &[u8]) -> f64 {
    let mut counts = [0u32; 256];
    for byte in bytes {
        if let Some(count) = counts.get_mut(usize::from(*byte)) {
            *count += 1;
        }
    }
    #[expect(
        clippy::cast_precision_loss,
        reason = "counts and lengths are far below 2^52"
    )]
    let len = bytes.len() as f64;
    counts
        .iter()
        .filter(|count| **count > 0)
        .map(|count| {
            let share = f64::from(*count) / len;
            -share * share.log2()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_credential_formats_are_found_inside_any_text() {
        for text in [
            "ghp_ZW1EBspxf6wDDsAwfqtxKrSHMetJ1afJAYFV",
            "export GITHUB_TOKEN=github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuv",
            "AKIAIOSFODNN7EXAMPLE",
            "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
            "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789",
            "sk_live_51H8abcdefghijklmnop",
            "AIzaSyA-abcdefghijklmnopqrstuvwxyz12345",
            "glpat-abcdefghijklmnopqrst",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU=\n-----END OPENSSH PRIVATE KEY-----",
            "postgres://app:hunter2@db.internal:5432/prod",
            "Authorization: Bearer abcdefghijklmnop1234",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        ] {
            assert!(looks_like_secret(text), "not found: {text}");
        }
    }

    #[test]
    fn ordinary_values_are_not_taken_for_secrets() {
        for text in [
            "/usr/local/lib/python3.11/site-packages/requests",
            "550e8400-e29b-41d4-a716-446655440000",
            "2026-12-01T04:53:39Z",
            "SELECT name FROM users WHERE id = 42",
            "getUserProfileInformationById",
            "the quick brown fox jumps over the lazy dog",
            "deadbeefdeadbeefdeadbeefdeadbeef",
            "https://example.com/docs/getting-started?page=2",
            "node_modules/@modelcontextprotocol/server-filesystem",
            "short",
        ] {
            assert!(!looks_like_secret(text), "taken for a secret: {text}");
        }
    }

    #[test]
    fn random_tokens_are_found_by_their_entropy() {
        assert!(looks_like_secret("q8Z3vN1xK7mB2wR9tY4uP6sD"));
        assert!(looks_like_secret(
            "token: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b"
        ));
        // Letters alone repeat too much, however long.
        assert!(!looks_like_secret(
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        ));
    }

    proptest::proptest! {
        /// The one-pass look passes every text a rule matches (so it
        /// changes no answer): texts built from the pieces rules look for.
        #[test]
        fn the_first_look_passes_whatever_a_rule_matches(
            pieces in proptest::collection::vec(proptest::sample::select(vec![
                "a", "Z", "9", "+", "/", "=", "_", "-", ".", " ", "\t", ":", "@", "//", "é",
                "\u{2003}", "eyJ", "AKIA", "ghp_", "sk-", "Bearer ", "-----BEGIN ",
                "PRIVATE KEY-----", "https://", "u:p@", "0123456789abcdef", "QWxhZGRpbjpvcGVu",
            ]), 0..24),
        ) {
            let text = pieces.concat();
            if any_rule(&text) {
                proptest::prop_assert!(may_hold_one(&text), "{text:?}");
            }
        }
    }
}
