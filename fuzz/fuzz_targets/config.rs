//! Config parsing of arbitrary text.
//!
//! Checked: nothing panics; every diagnostic names where it is (a span in
//! the text, or a key), its span lies in the text, and its message, help
//! and key are each one line with nothing invisible in them, so a
//! diagnostic can neither hide text nor pass for another line of output;
//! rendering it does not panic; a text with no error gives a config.
#![no_main]

use hintgate_policy::config::parse_str;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|source: &str| {
    let (config, diagnostics) = parse_str(source);
    let errors = diagnostics.iter().filter(|d| d.is_error()).count();
    assert_eq!(
        config.is_some(),
        errors == 0,
        "{source:?}: {diagnostics:#?}"
    );
    for diagnostic in &diagnostics {
        assert!(
            diagnostic.span.is_some() || !diagnostic.key.is_empty(),
            "{source:?}: a diagnostic that names no place: {diagnostic:?}"
        );
        if let Some(span) = &diagnostic.span {
            assert!(
                span.start <= span.end && span.end <= source.len(),
                "{source:?}: a span outside the text: {diagnostic:?}"
            );
        }
        let texts = [
            Some(&diagnostic.message),
            diagnostic.help.as_ref(),
            Some(&diagnostic.key),
        ];
        for text in texts.into_iter().flatten() {
            assert!(
                one_clean_line(text),
                "{source:?}: a diagnostic's text is not one clean line: {text:?}"
            );
        }
        let _ = diagnostic.render("hintgate.toml", source);
        let _ = diagnostic.locate("hintgate.toml", source);
    }
});

/// One line, and nothing in it that the escaper for one-line text would
/// have escaped.
fn one_clean_line(text: &str) -> bool {
    hintgate_policy::sanitize::escape_line(text) == text
}
