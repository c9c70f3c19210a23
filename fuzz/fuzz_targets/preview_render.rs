//! A preview's text as the prompt shows it, and a previewer's answer, from
//! arbitrary bytes (the text of a file, of an agent's arguments, of a
//! previewer or of a server's dry run).
//!
//! Checked: rendering never panics; every line of the preview's section
//! after its heading is marked as the preview's (`    | `) or is the
//! gateway's own count of what was left out, so no text of the preview can
//! start a line that reads as the gateway's; nothing control, bidi or
//! zero-width survives; at most the documented number of lines and
//! characters a line are shown. Reading a previewer's answer never panics,
//! and a preview read from it renders under the same rules.
#![no_main]

use hintgate_policy::preview::{
    PROMPT_LINE_CHARS, PROMPT_LINES, Preview, PreviewKind, PreviewSource, Previewed, read_answer,
};
use libfuzzer_sys::fuzz_target;

fn check(previewed: &Previewed) {
    let shown = previewed.render();
    let mut lines = shown.lines();
    assert_eq!(lines.next(), Some(""), "{shown:?}");
    let heading = lines.next().unwrap_or_default();
    assert!(
        heading.starts_with("  preview (") || heading.starts_with("  no preview: "),
        "{shown:?}"
    );
    let mut marked = 0;
    for line in lines {
        if line.starts_with("    | ") {
            marked += 1;
            assert!(
                line.chars().count() <= "    | ".len() + PROMPT_LINE_CHARS * 12 + 64,
                "{line:?}"
            );
        } else {
            assert!(
                line.starts_with("    ") && line.ends_with("the console shows all"),
                "{shown:?}"
            );
        }
    }
    assert!(marked <= PROMPT_LINES, "{shown:?}");
    assert!(
        !shown.chars().any(|ch| (ch.is_control() && ch != '\n')
            || matches!(ch, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}')),
        "{shown:?}"
    );
}

fuzz_target!(|text: &str| {
    for kind in [PreviewKind::Diff, PreviewKind::Text] {
        check(&Previewed::Shown(Preview::new(
            PreviewSource::Files,
            kind,
            text.to_owned(),
        )));
    }
    check(&Previewed::unavailable(PreviewSource::Command, text));
    let (_, answered) = read_answer(text);
    check(&answered);
});
