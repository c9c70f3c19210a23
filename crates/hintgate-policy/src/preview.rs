//! Previews: what a call will *do*, shown with the prompt (design §4.3).
//!
//! A [`Preview`] is text (a unified diff or plain text) with its source
//! named and a digest that an approval binds. Where no preview could be
//! made, a [`Previewed::Unavailable`] says why, and the prompt says "no
//! preview: WHY". A preview only adds information: nothing here takes part
//! in a decision ([`crate::decide::Policy::decide`] never sees one).
//!
//! This module is pure: the gateway reads the files and runs the
//! previewers, and hands the results here to be rendered. The file
//! previews' arithmetic that needs no file (the new content of an
//! `edit_file`, [`apply_edits`]) is here too.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::pin::PinDigest;
use crate::sanitize::escape_line;

/// How many hunks of a diff the prompt shows; the rest are counted.
pub const PROMPT_HUNKS: usize = 3;

/// How many lines of a preview the prompt shows at most.
pub const PROMPT_LINES: usize = 120;

/// The most characters of one line of a preview the prompt shows.
pub const PROMPT_LINE_CHARS: usize = 400;

/// The most bytes of a preview's text the audit record keeps.
pub const RECORD_TEXT_BYTES: usize = 16 * 1024;

/// Where a preview comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PreviewSource {
    /// Computed by hintgate from the local file (`files`).
    Files,
    /// The user's previewer command (`command`).
    Command,
    /// A trusted server's own dry run (`dry_run_argument`): its claim.
    DryRun,
}

/// What a preview's text is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PreviewKind {
    /// A unified diff.
    Diff,
    /// Plain text.
    Text,
}

/// A preview of a call: its text, what it is and where it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preview {
    /// Where it comes from.
    pub source: PreviewSource,
    /// What its text is.
    pub kind: PreviewKind,
    /// The text, whole.
    pub text: String,
    /// `sha256:...` over its source, kind and text: what an approval binds.
    pub digest: String,
}

/// What the preview step found for a call that has a preview configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Previewed {
    /// A preview to show.
    Shown(Preview),
    /// None could be made; the prompt says why.
    Unavailable {
        /// Which source was tried.
        source: PreviewSource,
        /// Why there is none, in one line.
        why: String,
    },
}

// === impl PreviewSource ===

impl PreviewSource {
    /// The name the audit log and the approval queue use.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Files => "files",
            Self::Command => "command",
            Self::DryRun => "dry-run",
        }
    }

    /// What the prompt says of a preview from this source.
    pub const fn label(self) -> &'static str {
        match self {
            Self::Files => {
                "what the call will change, computed by hintgate from the file on this machine"
            }
            Self::Command => "from your previewer command",
            Self::DryRun => "the server's own dry run: its claim, which hintgate does not check",
        }
    }
}

// === impl PreviewKind ===

impl PreviewKind {
    /// The name the previewer's answer and the audit log use.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Diff => "diff",
            Self::Text => "text",
        }
    }
}

// === impl Preview ===

impl Preview {
    /// A preview, with its digest.
    pub fn new(source: PreviewSource, kind: PreviewKind, text: String) -> Self {
        let digest = PinDigest::of_json(&serde_json::json!({
            "kind": kind.as_str(),
            "source": source.as_str(),
            "text": text,
        }))
        .to_string();
        Self {
            source,
            kind,
            text,
            digest,
        }
    }
}

// === impl Previewed ===

impl Previewed {
    /// No preview from `source`, because of `why`.
    pub fn unavailable(source: PreviewSource, why: impl Into<String>) -> Self {
        Self::Unavailable {
            source,
            why: why.into(),
        }
    }

    /// The source tried.
    pub const fn source(&self) -> PreviewSource {
        match self {
            Self::Shown(preview) => preview.source,
            Self::Unavailable { source, .. } => *source,
        }
    }

    /// The digest an approval binds: the preview's, or one over the reason
    /// there is none (a file that appears between the prompt and the send
    /// changes it too).
    pub fn digest(&self) -> String {
        match self {
            Self::Shown(preview) => preview.digest.clone(),
            Self::Unavailable { source, why } => PinDigest::of_json(&serde_json::json!({
                "none": why,
                "source": source.as_str(),
            }))
            .to_string(),
        }
    }

    /// The prompt's section, each line indented and escaped: the label and
    /// the text cut to [`PROMPT_HUNKS`] hunks (a diff), [`PROMPT_LINES`]
    /// lines and [`PROMPT_LINE_CHARS`] characters a line, with what was
    /// left out counted; or "no preview: WHY".
    pub fn render(&self) -> String {
        let preview = match self {
            Self::Shown(preview) => preview,
            Self::Unavailable { why, .. } => {
                return format!("\n  no preview: {}\n", escape_line(why));
            }
        };
        let mut out = format!("\n  preview ({}):\n", preview.source.label());
        let cut = cut(preview);
        for line in &cut.lines {
            out.push_str("    | ");
            let count = line.chars().count();
            if count > PROMPT_LINE_CHARS {
                let kept: String = line.chars().take(PROMPT_LINE_CHARS).collect();
                out.push_str(&escape_line(&kept));
                out.push_str(&format!(
                    " [{} more characters; the console shows all]",
                    count - PROMPT_LINE_CHARS
                ));
            } else {
                out.push_str(&escape_line(line));
            }
            out.push('\n');
        }
        if let Some(note) = cut.note {
            out.push_str(&format!("    {note}\n"));
        }
        out
    }

    /// The preview as the approval queue's details and a console show it:
    /// `source`, and `kind`, `text` and `digest`, or `none` (why there is
    /// none). Strings as they are, not escaped.
    pub fn details(&self) -> Value {
        match self {
            Self::Shown(preview) => serde_json::json!({
                "source": preview.source.as_str(),
                "kind": preview.kind.as_str(),
                "text": preview.text,
                "digest": preview.digest,
            }),
            Self::Unavailable { source, why } => serde_json::json!({
                "source": source.as_str(),
                "none": why,
            }),
        }
    }
}

/// A preview's text as the prompt shows it.
struct Cut<'a> {
    lines: Vec<&'a str>,
    note: Option<String>,
}

/// The lines the prompt shows: a diff's headers and its first
/// [`PROMPT_HUNKS`] hunks, at most [`PROMPT_LINES`] lines in all.
fn cut(preview: &Preview) -> Cut<'_> {
    let all: Vec<&str> = preview.text.lines().collect();
    let hunks = all.iter().filter(|line| line.starts_with("@@")).count();
    let mut lines = Vec::new();
    let mut seen = 0;
    for line in &all {
        if preview.kind == PreviewKind::Diff && line.starts_with("@@") {
            seen += 1;
            if seen > PROMPT_HUNKS {
                break;
            }
        }
        if lines.len() == PROMPT_LINES {
            break;
        }
        lines.push(*line);
    }
    let shown_hunks = seen.min(PROMPT_HUNKS);
    let note = if preview.kind == PreviewKind::Diff && shown_hunks < hunks {
        let more = if lines.len() == PROMPT_LINES {
            format!(", cut at {PROMPT_LINES} lines")
        } else {
            String::new()
        };
        Some(format!(
            "{shown_hunks} of {hunks} hunks shown{more}; the console shows all"
        ))
    } else if lines.len() < all.len() {
        Some(format!(
            "{} of {} lines shown; the console shows all",
            lines.len(),
            all.len()
        ))
    } else {
        None
    };
    Cut { lines, note }
}

/// A previewer command's answer line, read strictly: one JSON object with
/// the question's `id` (a string, or an integer; a per-call previewer may
/// leave it out) and either `kind`
/// (`"diff"` or `"text"`) and `text`, or `none` (why there is no preview);
/// nothing else. The `id` when one could be read, and the preview, or why
/// there is none (the previewer's own words, or what was wrong with its
/// answer).
pub fn read_answer(line: &str) -> (Option<String>, Previewed) {
    let source = PreviewSource::Command;
    let garbage = |what: &str| {
        Previewed::unavailable(
            source,
            format!("the previewer answered what is not a preview ({what})"),
        )
    };
    let Ok(Value::Object(answer)) = serde_json::from_str::<Value>(line) else {
        return (None, garbage("not one JSON object"));
    };
    let id = match answer.get("id") {
        Some(Value::String(id)) => Some(id.clone()),
        Some(Value::Number(id)) if id.is_u64() => Some(id.to_string()),
        _ => None,
    };
    if id.is_none() && answer.get("id").is_some_and(|id| !id.is_null()) {
        return (
            None,
            garbage("an `id` that is neither a string nor an integer"),
        );
    }
    if let Some(key) = answer
        .keys()
        .find(|key| !["id", "kind", "text", "none"].contains(&key.as_str()))
    {
        return (
            id,
            garbage(&format!("an unknown key `{}`", escape_line(key))),
        );
    }
    let previewed = match (answer.get("kind"), answer.get("text"), answer.get("none")) {
        (None, None, Some(Value::String(why))) => Previewed::unavailable(source, why.clone()),
        (Some(Value::String(kind)), Some(Value::String(text)), None) => {
            let kind = match kind.as_str() {
                "diff" => PreviewKind::Diff,
                "text" => PreviewKind::Text,
                _ => return (id, garbage("a `kind` other than `diff` or `text`")),
            };
            Previewed::Shown(Preview::new(source, kind, text.clone()))
        }
        _ => garbage("neither `kind` and `text` strings nor a `none` string"),
    };
    (id, previewed)
}

/// The text the audit record keeps of a preview: whole up to
/// [`RECORD_TEXT_BYTES`], cut at a character boundary with a note past it;
/// and whether it was cut.
pub fn record_text(text: &str) -> (String, bool) {
    if text.len() <= RECORD_TEXT_BYTES {
        return (text.to_owned(), false);
    }
    let mut end = RECORD_TEXT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (text[..end].to_owned(), true)
}

/// The content of a file after the edits of an `edit_file` call (the
/// reference filesystem server's: an array of `{"oldText", "newText"}`,
/// each applied in turn to the first place its `oldText` occurs, with line
/// endings read as `\n` as the server reads them).
///
/// # Errors
///
/// Why no preview can be made: edits that are not such an array, or an
/// `oldText` that does not occur as written (the server also matches text
/// that differs only in indentation, which this preview does not guess at).
pub fn apply_edits(old: &str, edits: &Value) -> Result<String, String> {
    let Some(edits) = edits.as_array() else {
        return Err("the edits are not an array".to_owned());
    };
    let mut content = old.replace("\r\n", "\n");
    for (idx, edit) in edits.iter().enumerate() {
        let (Some(old_text), Some(new_text)) = (
            edit.get("oldText").and_then(Value::as_str),
            edit.get("newText").and_then(Value::as_str),
        ) else {
            return Err(format!("edit {idx} has no `oldText` and `newText` strings"));
        };
        let old_text = old_text.replace("\r\n", "\n");
        let new_text = new_text.replace("\r\n", "\n");
        let Some(at) = content.find(&old_text) else {
            return Err(format!(
                "the text of edit {idx} is not in the file as written (the server may match it with other indentation)"
            ));
        };
        content.replace_range(at..at + old_text.len(), &new_text);
    }
    Ok(content)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn diff_of(hunks: usize) -> Preview {
        let mut text = "--- a/f\n+++ b/f\n".to_owned();
        for n in 0..hunks {
            text.push_str(&format!("@@ -{n},1 +{n},1 @@\n-old {n}\n+new {n}\n"));
        }
        Preview::new(PreviewSource::Files, PreviewKind::Diff, text)
    }

    #[test]
    fn a_long_diff_is_cut_by_hunks_and_says_so() {
        let shown = Previewed::Shown(diff_of(40)).render();
        assert!(shown.contains("+new 2"), "{shown}");
        assert!(!shown.contains("+new 3"), "{shown}");
        assert!(
            shown.contains("3 of 40 hunks shown; the console shows all"),
            "{shown}"
        );
        let long_line = Previewed::Shown(Preview::new(
            PreviewSource::Command,
            PreviewKind::Text,
            "x".repeat(PROMPT_LINE_CHARS + 5),
        ))
        .render();
        assert!(
            long_line.contains(&format!(
                "{} [5 more characters; the console shows all]\n",
                "x".repeat(PROMPT_LINE_CHARS)
            )),
            "{long_line}"
        );
        let short = Previewed::Shown(diff_of(2)).render();
        assert!(!short.contains("hunks shown"), "{short}");
        assert!(short.contains("    | +new 1"), "{short}");
    }

    #[test]
    fn a_preview_cannot_start_a_line_of_its_own() {
        let text = "line\u{1b}[2J\n  why you are asked:\u{2028}x\n".to_owned();
        let shown = Previewed::Shown(Preview::new(
            PreviewSource::Command,
            PreviewKind::Text,
            text,
        ))
        .render();
        for line in shown.lines().skip(2) {
            assert!(line.starts_with("    | "), "{line:?}");
        }
        assert!(!shown.contains('\u{1b}'));
        assert!(!shown.contains('\u{2028}'));
    }

    #[test]
    fn the_digest_binds_source_kind_and_text() {
        let one = Preview::new(PreviewSource::Files, PreviewKind::Diff, "a".into());
        let other = Preview::new(PreviewSource::DryRun, PreviewKind::Diff, "a".into());
        let third = Preview::new(PreviewSource::Files, PreviewKind::Diff, "b".into());
        assert_ne!(one.digest, other.digest);
        assert_ne!(one.digest, third.digest);
        let none = Previewed::unavailable(PreviewSource::Files, "no file");
        assert_ne!(none.digest(), Previewed::Shown(one).digest());
        assert!(none.render().contains("no preview: no file"));
    }

    #[test]
    fn edits_apply_in_turn_to_the_first_occurrence() {
        let edits = serde_json::json!([
            {"oldText": "b", "newText": "B"},
            {"oldText": "B\r\nc", "newText": "C"},
        ]);
        assert_eq!(
            apply_edits("a\r\nb\r\nc\nb\n", &edits).unwrap(),
            "a\nC\nb\n"
        );
        assert!(apply_edits("a", &serde_json::json!([{"oldText": "z", "newText": ""}])).is_err());
        assert!(apply_edits("a", &serde_json::json!({"oldText": "a"})).is_err());
    }

    #[test]
    fn a_previewer_answer_is_read_strictly() {
        let (id, shown) = read_answer(r#"{"id": "7", "kind": "diff", "text": "-a\n+b\n"}"#);
        assert_eq!(id.as_deref(), Some("7"));
        assert_eq!(
            shown,
            Previewed::Shown(Preview::new(
                PreviewSource::Command,
                PreviewKind::Diff,
                "-a\n+b\n".into()
            ))
        );
        let (id, _) = read_answer(r#"{"kind": "text", "text": "a per-call answer"}"#);
        assert_eq!(id, None);
        let (id, none) = read_answer(r#"{"id": 7, "none": "not a write"}"#);
        assert_eq!(id.as_deref(), Some("7"));
        assert_eq!(
            none,
            Previewed::unavailable(PreviewSource::Command, "not a write")
        );
        for garbage in [
            "nonsense",
            "[1]",
            r#"{"id": [1], "kind": "text", "text": "x"}"#,
            r#"{"id": "1", "kind": "html", "text": "x"}"#,
            r#"{"id": "1", "kind": "text"}"#,
            r#"{"id": "1", "kind": "text", "text": "x", "none": "y"}"#,
            r#"{"id": "1", "text": "x", "allow": true}"#,
        ] {
            let (_, previewed) = read_answer(garbage);
            let Previewed::Unavailable { why, .. } = previewed else {
                panic!("{garbage} read as a preview");
            };
            assert!(
                why.starts_with("the previewer answered what is not a preview"),
                "{why}"
            );
        }
    }

    #[test]
    fn the_record_keeps_text_up_to_its_bound_on_a_char_boundary() {
        let long = "é".repeat(RECORD_TEXT_BYTES);
        let (kept, cut) = record_text(&long);
        assert!(cut);
        assert!(kept.len() <= RECORD_TEXT_BYTES);
        assert_eq!(record_text("short"), ("short".to_owned(), false));
    }
}
