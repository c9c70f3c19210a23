//! Server-rendered HTML: one escaping helper that every text not written by
//! the console itself goes through, and the page around each view.
//!
//! Server names, tool names, titles, descriptions, arguments and the
//! prompt come from MCP servers or from whoever can write the store: they
//! are attacker-controlled. Each is written with [`escape`], which leaves
//! no character that can open a tag, end an attribute value or start an
//! entity, so a hostile string shows as text and can neither run script nor
//! change the page's structure. The page loads its script and style from
//! the console itself (the Content-Security-Policy allows nothing else).

use std::fmt::Write as _;

use hintgate_policy::sanitize::{escape_invisible, escape_line};

/// Escapes `text` for an HTML text node or a double- or single-quoted
/// attribute value: `&`, `<`, `>`, `"` and `'` become character references.
#[must_use]
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            other => out.push(other),
        }
    }
    out
}

/// Text from a server or the store shown on one line (a name, an identity,
/// a reason): what would break the line, turn text around (bidi overrides)
/// or hide (zero-width and other invisible characters) is written as a
/// visible escape first, as the terminal prompt does, then [`escape`]d.
#[must_use]
pub fn line(text: &str) -> String {
    escape(&escape_line(text))
}

/// Text from a server or the store shown as a block (a description, a
/// prompt, a value of a changed field): line breaks kept, every invisible or
/// text-turning character written as a visible escape, then [`escape`]d.
#[must_use]
pub fn block(text: &str) -> String {
    escape(&escape_invisible(text))
}

/// A changed field's value (canonical JSON, as the pin diff gives it) as
/// people read it: a string's own text, anything else as pretty JSON,
/// `(absent)` for none. Not escaped.
#[must_use]
pub fn readable(canonical: Option<&str>) -> String {
    let Some(text) = canonical else {
        return "(absent)".to_owned();
    };
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::String(string)) => string,
        Ok(other) => serde_json::to_string_pretty(&other).unwrap_or_else(|_| text.to_owned()),
        Err(_) => text.to_owned(),
    }
}

/// Percent-encodes `text` for a query value in a link the console writes
/// (the link is then written into an attribute through [`escape`] as well).
#[must_use]
pub fn query_value(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// The console's views, for the navigation bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// Waiting calls.
    Waiting,
    /// Pinned definitions and held changes.
    Definitions,
    /// The audit log.
    Log,
}

/// A whole page: the head (title, style, script, the CSRF token for the
/// script), the navigation and `body`, which the caller built escaped.
#[must_use]
pub fn page(title: &str, view: View, csrf: &str, body: &str) -> String {
    let mut out = String::with_capacity(body.len() + 1024);
    let nav = |target: View, href: &str, label: &str| {
        let current = if view == target {
            " aria-current=\"page\""
        } else {
            ""
        };
        format!("<a href=\"{href}\"{current}>{label}</a>")
    };
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta name=\"hintgate-csrf\" content=\"{csrf}\">\n\
         <title>{title}</title>\n\
         <link rel=\"stylesheet\" href=\"/static/console.css\">\n\
         <script src=\"/static/console.js\" defer></script>\n\
         </head>\n<body data-view=\"{view_name}\">\n\
         <header><strong>hintgate console</strong><nav>{waiting}{definitions}{log}</nav></header>\n\
         <main>\n{body}</main>\n</body>\n</html>\n",
        csrf = escape(csrf),
        title = escape(title),
        view_name = match view {
            View::Waiting => "waiting",
            View::Definitions => "definitions",
            View::Log => "log",
        },
        waiting = nav(View::Waiting, "/", "Waiting calls"),
        definitions = nav(View::Definitions, "/definitions", "Definitions"),
        log = nav(View::Log, "/log", "Log"),
    );
    out
}

/// A hidden form field with the CSRF token.
#[must_use]
pub fn csrf_field(csrf: &str) -> String {
    format!(
        "<input type=\"hidden\" name=\"csrf\" value=\"{}\">",
        escape(csrf)
    )
}

/// Seconds since the Unix epoch as `YYYY-MM-DD HH:MM:SS UTC`.
#[must_use]
pub fn utc(seconds: i64) -> String {
    let at = hintgate_store::time::civil(seconds);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
        at.year, at.month, at.day, at.hour, at.minute, at.second
    )
}

/// A duration in seconds as people read it: `42 s`, `3 min 5 s`, `2 h 4 min`.
#[must_use]
pub fn span(seconds: i64) -> String {
    let seconds = seconds.max(0);
    if seconds < 60 {
        format!("{seconds} s")
    } else if seconds < 3_600 {
        format!("{} min {} s", seconds / 60, seconds % 60)
    } else {
        format!("{} h {} min", seconds / 3_600, seconds % 3_600 / 60)
    }
}

#[cfg(test)]
mod tests {
    use super::{View, block, escape, line, page, query_value, span, utc};

    #[test]
    fn every_character_that_can_open_markup_is_escaped() {
        assert_eq!(
            escape(r#"<script>alert("x")</script> & 'y'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
        let hostile = "\" onmouseover=\"alert(1)\" x='<img src=x onerror=alert(1)>";
        let escaped = escape(hostile);
        assert!(!escaped.contains(['<', '>', '"', '\'']), "{escaped}");
    }

    #[test]
    fn text_without_markup_is_unchanged() {
        assert_eq!(
            escape("read_file / fs — ünïcode"),
            "read_file / fs — ünïcode"
        );
    }

    #[test]
    fn text_that_turns_around_or_hides_shows_its_escape() {
        // A right-to-left override would show `evil_tool` as `loot_live`...
        assert_eq!(line("a\u{202e}loot_live"), "a\\u{202e}loot_live");
        assert_eq!(
            line("read\u{200b}_file\nsecond"),
            "read\\u{200b}_file\\nsecond"
        );
        assert_eq!(block("one\ntwo\u{2066}<b>"), "one\ntwo\\u{2066}&lt;b&gt;");
    }

    #[test]
    fn a_hostile_title_cannot_leave_the_title_element() {
        let html = page("</title><script>x()</script>", View::Waiting, "t", "");
        assert!(!html.contains("<script>x()"), "{html}");
        assert!(html.contains("&lt;/title&gt;&lt;script&gt;x()"), "{html}");
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(query_value("a b&c=d/é"), "a+b%26c%3Dd%2F%C3%A9");
    }

    #[test]
    fn times_and_spans_read_plainly() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_764_590_400), "2025-12-01 12:00:00 UTC");
        assert_eq!(span(42), "42 s");
        assert_eq!(span(185), "3 min 5 s");
        assert_eq!(span(7_440), "2 h 4 min");
        assert_eq!(span(-3), "0 s");
    }
}
