//! The description sanitizer and the one-line escaper.
//!
//! Checked: sanitizing is idempotent and its output has no control, bidi,
//! zero-width or tag character and no escape; what it reports removed is
//! what went (at least one character per kind counted); an escaped line is
//! one line with nothing invisible, and `one_line` leaves no line break.
#![no_main]

use hintgate_policy::sanitize::{escape_invisible, escape_line, one_line, sanitize};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let once = sanitize(text);
    for ch in once.text.chars() {
        assert!(
            ch == '\n' || ch == '\t' || !(ch.is_control() || is_hidden(ch)),
            "{text:?}: {ch:?} survived in {:?}",
            once.text
        );
    }
    let twice = sanitize(&once.text);
    assert_eq!(twice.text, once.text, "{text:?}: not idempotent");
    assert!(
        twice.is_clean(),
        "{text:?}: the second pass removed {:?}",
        twice.removed
    );
    let counted: usize = once.removed.iter().map(|(_, count)| count).sum();
    let gone = text.chars().count() - once.text.chars().count();
    assert!(
        counted <= gone,
        "{text:?}: {counted} counted, {gone} removed"
    );
    assert_eq!(
        counted == 0,
        gone == 0,
        "{text:?}: {counted} counted, {gone} removed"
    );
    if once.is_clean() {
        assert_eq!(once.text, text);
    }

    let line = escape_line(text);
    assert!(
        !line.contains(['\n', '\r', '\u{85}', '\u{2028}', '\u{2029}']),
        "{text:?} -> {line:?}"
    );
    assert!(
        line.chars()
            .all(|ch| ch == ' ' || !(ch.is_whitespace() || ch.is_control() || is_hidden(ch))),
        "{text:?} -> {line:?}"
    );
    assert!(
        escape_invisible(text)
            .chars()
            .all(|ch| ch == '\n' || ch == '\t' || !(ch.is_control() || is_hidden(ch)))
    );
    assert!(!one_line(text).contains(['\n', '\r']));
});

/// Bidi controls, zero-width characters, the byte order mark and tags.
fn is_hidden(ch: char) -> bool {
    matches!(ch,
        '\u{200b}'..='\u{200f}'
        | '\u{061c}'
        | '\u{202a}'..='\u{202e}'
        | '\u{2060}'..='\u{2064}'
        | '\u{2066}'..='\u{2069}'
        | '\u{feff}'
        | '\u{180e}'
        | '\u{e0000}'..='\u{e007f}')
}
