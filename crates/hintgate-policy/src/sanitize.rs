//! The description sanitizer (design §7).
//!
//! Tool descriptions and titles are written by the server and read by both the
//! model and the person approving calls. Characters that render differently
//! from what they are, or not at all, let a server hide instructions from the
//! person while the model still reads them. The sanitizer removes:
//!
//! - ANSI escape sequences (CSI such as `ESC [ 31 m`, OSC such as a terminal
//!   title or hyperlink, and two-byte escapes);
//! - every other C0 and C1 control character, and DEL, except newline and tab;
//! - bidirectional overrides, embeddings, isolates and marks;
//! - zero-width characters and the byte order mark;
//! - Unicode tag characters (U+E0000 to U+E007F), which can spell out hidden
//!   ASCII text.
//!
//! It reports what it removed, so the finding can be logged and linted.

use serde::Serialize;

/// The kinds of characters the sanitizer removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Removed {
    /// A whole ANSI escape sequence.
    AnsiEscape,
    /// A C0 or C1 control character other than newline and tab, or DEL.
    Control,
    /// A bidirectional override, embedding, isolate or mark.
    Bidi,
    /// A zero-width character or the byte order mark.
    ZeroWidth,
    /// A Unicode tag character.
    Tag,
}

/// The result of sanitizing one text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Sanitized {
    /// The text with the dangerous characters removed.
    pub text: String,
    /// How many of each kind were removed (kinds with none are left out).
    pub removed: Vec<(Removed, usize)>,
}

/// Where a character falls, for the sanitizer and the prompt escaper.
pub(crate) fn classify(ch: char) -> Option<Removed> {
    match ch {
        '\n' | '\t' => None,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => Some(Removed::Control),
        '\u{200e}'
        | '\u{200f}'
        | '\u{061c}'
        | '\u{202a}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}' => Some(Removed::Bidi),
        '\u{200b}'..='\u{200d}' | '\u{2060}'..='\u{2064}' | '\u{feff}' | '\u{180e}' => {
            Some(Removed::ZeroWidth)
        }
        '\u{e0000}'..='\u{e007f}' => Some(Removed::Tag),
        _ => None,
    }
}

/// Removes every dangerous character from `text` and counts what it removed.
pub fn sanitize(text: &str) -> Sanitized {
    let mut counts = [0usize; 5];
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(ch) = chars.next() {
        if ch == '\u{1b}' || ch == '\u{9b}' || ch == '\u{9d}' {
            skip_escape(ch, &mut chars);
            bump(&mut counts, Removed::AnsiEscape);
            continue;
        }
        match classify(ch) {
            Some(kind) => bump(&mut counts, kind),
            None => out.push(ch),
        }
    }
    let kinds = [
        Removed::AnsiEscape,
        Removed::Control,
        Removed::Bidi,
        Removed::ZeroWidth,
        Removed::Tag,
    ];
    let removed = kinds
        .into_iter()
        .zip(counts)
        .filter(|(_, count)| *count > 0)
        .collect();
    Sanitized { text: out, removed }
}

impl Sanitized {
    /// Nothing was removed.
    pub fn is_clean(&self) -> bool {
        self.removed.is_empty()
    }
}

fn bump(counts: &mut [usize; 5], kind: Removed) {
    if let Some(count) = counts.get_mut(kind as usize) {
        *count += 1;
    }
}

/// Skips the rest of an escape sequence whose introducer was `first`.
fn skip_escape(first: char, chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    // Normalise the 8-bit introducers to their 7-bit meaning.
    let kind = match first {
        '\u{9b}' => '[',
        '\u{9d}' => ']',
        _ => match chars.peek() {
            Some(&next @ ('[' | ']' | 'P' | 'X' | '^' | '_')) => {
                chars.next();
                next
            }
            Some(next) if ('\u{20}'..='\u{7e}').contains(next) => {
                // A two-character escape such as `ESC c` or `ESC (B` (with one
                // intermediate byte).
                let next = *next;
                chars.next();
                if ('\u{20}'..='\u{2f}').contains(&next)
                    && chars
                        .peek()
                        .is_some_and(|c| ('\u{30}'..='\u{7e}').contains(c))
                {
                    chars.next();
                }
                return;
            }
            _ => return,
        },
    };
    if kind == '[' {
        // CSI: parameter and intermediate bytes, then one final byte.
        while let Some(&ch) = chars.peek() {
            chars.next();
            if ('\u{40}'..='\u{7e}').contains(&ch) {
                return;
            }
            if !('\u{20}'..='\u{3f}').contains(&ch) {
                return;
            }
        }
        return;
    }
    // OSC, DCS, SOS, PM, APC: a string ended by BEL or ST (`ESC \`).
    while let Some(ch) = chars.next() {
        match ch {
            '\u{7}' | '\u{9c}' => return,
            '\u{1b}' => {
                if chars.peek() == Some(&'\\') {
                    chars.next();
                }
                return;
            }
            _ => {}
        }
    }
}

/// Escapes every character the sanitizer would remove as `\u{XXXX}`, so a
/// person sees that it is there without the terminal acting on it. Used for
/// arguments, which must be shown in full rather than cleaned.
pub fn escape_invisible(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        if ch == '\u{1b}' || classify(ch).is_some() {
            out.push_str(&format!("\\u{{{:04x}}}", u32::from(ch)));
        } else {
            out.push(ch);
        }
    }
    out
}

/// Text made one line: line breaks, tabs and the line and paragraph
/// separators become spaces. For a sanitized title, which names a tool on
/// one line wherever a host shows it.
pub fn one_line(text: &str) -> String {
    text.chars()
        .map(|ch| match ch {
            '\n' | '\r' | '\t' | '\u{85}' | '\u{2028}' | '\u{2029}' => ' ',
            other => other,
        })
        .collect()
}

/// Escapes, for text shown on one line of its own (a name, a title, an
/// identity), everything [`escape_invisible`] escapes and also line breaks,
/// tabs and the other characters that show as nothing or as blank space:
/// newline, carriage return and tab as `\n`, `\r` and `\t`, the rest as
/// `\u{XXXX}`. What the text holds can then neither start a line of its own
/// nor hide, so it cannot pass for a line the program wrote.
pub fn escape_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            _ if breaks_or_hides(ch) => {
                out.push_str(&format!("\\u{{{:04x}}}", u32::from(ch)));
            }
            _ => out.push(ch),
        }
    }
    out
}

/// Whether [`escape_line`] escapes `ch`: a character that breaks a line,
/// controls a terminal, turns text around, or shows as nothing or as blank
/// space other than the ASCII space. Text without one reads as it is.
pub fn breaks_or_hides(ch: char) -> bool {
    matches!(ch, '\n' | '\r' | '\t' | '\u{1b}') || classify(ch).is_some() || blank_or_invisible(ch)
}

/// Characters beyond the sanitizer's classes that show as blank space or as
/// nothing: every white space but the ASCII space (line and paragraph
/// separators included), and the invisible format and filler characters
/// (soft hyphen, combining grapheme joiner, Hangul and Khmer fillers,
/// Mongolian and other variation selectors, interlinear annotations,
/// shorthand format controls, musical formatting, braille blank).
fn blank_or_invisible(ch: char) -> bool {
    (ch.is_whitespace() && ch != ' ')
        || matches!(
            ch,
            '\u{ad}'
                | '\u{34f}'
                | '\u{115f}'
                | '\u{1160}'
                | '\u{17b4}'
                | '\u{17b5}'
                | '\u{180b}'..='\u{180f}'
                | '\u{2800}'
                | '\u{3164}'
                | '\u{fe00}'..='\u{fe0f}'
                | '\u{ffa0}'
                | '\u{fff9}'..='\u{fffb}'
                | '\u{1bca0}'..='\u{1bca3}'
                | '\u{1d173}'..='\u{1d17a}'
                | '\u{e0100}'..='\u{e01ef}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn removes_ansi_sequences_whole() {
        let s = sanitize(
            "\u{1b}[31mred\u{1b}[0m and \u{1b}]0;title\u{7}done \u{1b}]8;;http://x\u{1b}\\link",
        );
        assert_eq!(s.text, "red and done link");
        assert_eq!(s.removed, vec![(Removed::AnsiEscape, 4)]);
    }

    #[test]
    fn removes_bidi_zero_width_tags_and_controls_but_keeps_newlines() {
        let hidden: String = "ignore"
            .chars()
            .map(|c| char::from_u32(0xe0000 + c as u32).unwrap())
            .collect();
        let text = format!("a\u{202e}b\u{200b}c\u{feff}\r\n\td\u{7}{hidden}é");
        let s = sanitize(&text);
        assert_eq!(s.text, "abc\n\tdé");
        assert_eq!(
            s.removed,
            vec![
                (Removed::Control, 2),
                (Removed::Bidi, 1),
                (Removed::ZeroWidth, 2),
                (Removed::Tag, 6)
            ]
        );
    }

    #[test]
    fn escaping_shows_what_is_hidden() {
        assert_eq!(
            escape_invisible("rm\u{202e} -rf\u{1b}"),
            "rm\\u{202e} -rf\\u{001b}"
        );
    }

    #[test]
    fn a_line_escaped_stays_one_line_and_shows_what_is_hidden() {
        assert_eq!(
            escape_line("a\nb\r\tc\u{2028}d\u{a0}e\u{3164}f\u{202e}g h"),
            "a\\nb\\r\\tc\\u{2028}d\\u{00a0}e\\u{3164}f\\u{202e}g h"
        );
    }

    proptest! {
        #[test]
        fn an_escaped_line_has_no_line_break_and_nothing_invisible(text in "\\PC*|[\\x00-\\x7f\\u{80}-\\u{9f}\\u{2000}-\\u{206f}\\u{e0000}-\\u{e007f}]*") {
            let line = escape_line(&text);
            prop_assert_eq!(line.lines().count(), usize::from(!line.is_empty()));
            prop_assert!(line.chars().all(|c| c == ' ' || !(c.is_whitespace() || c == '\x1b' || classify(c).is_some() || blank_or_invisible(c))));
        }


        #[test]
        fn output_is_clean_and_sanitizing_is_idempotent(text in "\\PC*|[\\x00-\\x7f\\u{80}-\\u{9f}\\u{200b}-\\u{202e}]*") {
            let once = sanitize(&text);
            prop_assert!(once.text.chars().all(|c| c != '\x1b' && classify(c).is_none()));
            prop_assert_eq!(sanitize(&once.text).text, once.text);
        }
    }
}
