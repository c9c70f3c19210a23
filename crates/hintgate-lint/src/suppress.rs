//! `hintgate.lint.toml`: the findings a server's authors chose to silence, and why.
//!
//! ```toml
//! [[suppress]]
//! code = "implicit-hints"
//! tool = "read_file"        # optional: without it, every tool
//! reason = "read-only tools; destructive and idempotent say nothing for them"
//! ```
//!
//! Every suppression names a known code and gives a reason; a file with an
//! unknown key, an unknown code or an empty reason is refused with the line
//! and key of the problem, never read as "suppress nothing".

use serde::Deserialize;
use toml::Spanned;

use crate::finding::{Code, Finding};

/// A parsed `hintgate.lint.toml`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Suppressions {
    /// The suppressions, in file order.
    pub entries: Vec<Suppression>,
}

/// One suppression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suppression {
    /// The code it silences.
    pub code: Code,
    /// The one tool it silences the code for; `None` for every tool.
    pub tool: Option<String>,
    /// Why the finding does not apply.
    pub reason: String,
    /// The line of its `code` key, 1-based.
    pub line: usize,
}

/// A finding that a suppression silenced, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Suppressed {
    /// The finding.
    #[serde(flatten)]
    pub finding: Finding,
    /// The suppression's reason.
    pub reason: String,
}

/// Why a `hintgate.lint.toml` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SuppressionsError {
    /// Not TOML, an unknown key or a value of the wrong type.
    #[error("line {line}: {message}")]
    Syntax {
        /// The line, 1-based.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A suppression with a problem in one key.
    #[error("line {line}: `{key}`: {message}")]
    Invalid {
        /// The line, 1-based.
        line: usize,
        /// The dotted key (`suppress[2].reason`).
        key: String,
        /// What is wrong.
        message: String,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    suppress: Vec<RawSuppression>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSuppression {
    code: Spanned<String>,
    #[serde(default)]
    tool: Option<Spanned<String>>,
    reason: Spanned<String>,
}

// === impl Suppressions ===

impl Suppressions {
    /// Parses the text of a `hintgate.lint.toml`.
    ///
    /// # Errors
    ///
    /// [`SuppressionsError`] with the line (and key) of the first problem.
    pub fn parse(text: &str) -> Result<Self, SuppressionsError> {
        let raw: RawFile = toml::from_str(text).map_err(|error| SuppressionsError::Syntax {
            line: error.span().map_or(1, |span| line_of(text, span.start)),
            message: error.message().trim().to_owned(),
        })?;
        let mut entries = Vec::new();
        for (idx, entry) in raw.suppress.into_iter().enumerate() {
            let key = |field: &str| format!("suppress[{}].{field}", idx + 1);
            let line = line_of(text, entry.code.span().start);
            let Some(code) = Code::parse(entry.code.get_ref()) else {
                return Err(SuppressionsError::Invalid {
                    line,
                    key: key("code"),
                    message: format!(
                        "unknown code `{}` (the codes are listed in docs/diagnostics.md)",
                        entry.code.get_ref()
                    ),
                });
            };
            if entry.reason.get_ref().trim().is_empty() {
                return Err(SuppressionsError::Invalid {
                    line: line_of(text, entry.reason.span().start),
                    key: key("reason"),
                    message: "say why the finding does not apply".to_owned(),
                });
            }
            if let Some(tool) = &entry.tool
                && tool.get_ref().is_empty()
            {
                return Err(SuppressionsError::Invalid {
                    line: line_of(text, tool.span().start),
                    key: key("tool"),
                    message: "name a tool, or leave `tool` out to suppress the code for every tool"
                        .to_owned(),
                });
            }
            entries.push(Suppression {
                code,
                tool: entry.tool.map(Spanned::into_inner),
                reason: entry.reason.into_inner().trim().to_owned(),
                line,
            });
        }
        Ok(Self { entries })
    }

    /// Splits findings into those that stand and those a suppression
    /// silenced, and adds an `unused-suppression` note for every
    /// suppression that matched nothing.
    pub fn apply(&self, findings: Vec<Finding>) -> (Vec<Finding>, Vec<Suppressed>) {
        let mut used = vec![false; self.entries.len()];
        let mut kept = Vec::new();
        let mut suppressed = Vec::new();
        for finding in findings {
            let matched = self.entries.iter().enumerate().find(|(_, entry)| {
                entry.code == finding.code
                    && entry
                        .tool
                        .as_deref()
                        .is_none_or(|tool| finding.tool.as_deref() == Some(tool))
            });
            match matched {
                Some((idx, entry)) => {
                    if let Some(flag) = used.get_mut(idx) {
                        *flag = true;
                    }
                    suppressed.push(Suppressed {
                        finding,
                        reason: entry.reason.clone(),
                    });
                }
                None => kept.push(finding),
            }
        }
        for (entry, used) in self.entries.iter().zip(used) {
            if !used {
                let target = entry
                    .tool
                    .as_deref()
                    .map_or_else(|| "any tool".to_owned(), |tool| format!("tool `{tool}`"));
                kept.push(Finding::new(
                    Code::UnusedSuppression,
                    None,
                    format!(
                        "the suppression of `{}` for {target} on line {} matched no finding",
                        entry.code, entry.line
                    ),
                    "remove it, so that the finding is reported again if it comes back",
                ));
            }
        }
        (kept, suppressed)
    }
}

fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset)
        .map_or(1, |before| before.matches('\n').count() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(code: Code, tool: &str) -> Finding {
        Finding::new(code, Some(tool), "m", "f")
    }

    #[test]
    fn parses_suppressions_with_and_without_a_tool() {
        let parsed = Suppressions::parse(
            "[[suppress]]\ncode = \"missing-title\"\nreason = \"names are clear\"\n\n[[suppress]]\ncode = \"implicit-hints\"\ntool = \"read_file\"\nreason = \"read-only\"\n",
        )
        .unwrap();
        assert_eq!(parsed.entries.len(), 2);
        assert_eq!(parsed.entries[0].code, Code::MissingTitle);
        assert_eq!(parsed.entries[0].tool, None);
        assert_eq!(parsed.entries[1].tool.as_deref(), Some("read_file"));
        assert_eq!(parsed.entries[1].line, 6);
        assert_eq!(Suppressions::parse("").unwrap(), Suppressions::default());
    }

    #[test]
    fn a_missing_reason_is_an_error_with_its_line() {
        let error = Suppressions::parse("[[suppress]]\ncode = \"missing-title\"\n").unwrap_err();
        let text = error.to_string();
        assert!(text.starts_with("line 1:"), "{text}");
        assert!(text.contains("reason"), "{text}");
    }

    #[test]
    fn an_empty_reason_is_an_error_with_its_key() {
        let error = Suppressions::parse(
            "[[suppress]]\ncode = \"missing-title\"\nreason = \"\"\n\n[[suppress]]\ncode = \"missing-title\"\nreason = \"  \"\n",
        )
        .unwrap_err();
        assert_eq!(
            error,
            SuppressionsError::Invalid {
                line: 3,
                key: "suppress[1].reason".to_owned(),
                message: "say why the finding does not apply".to_owned()
            }
        );
    }

    #[test]
    fn an_unknown_code_or_key_is_an_error() {
        let error =
            Suppressions::parse("[[suppress]]\ncode = \"missing-titel\"\nreason = \"typo\"\n")
                .unwrap_err();
        assert_eq!(
            error.to_string(),
            "line 2: `suppress[1].code`: unknown code `missing-titel` (the codes are listed in docs/diagnostics.md)"
        );
        let error = Suppressions::parse(
            "[[suppress]]\ncode = \"missing-title\"\nreason = \"r\"\ntools = \"x\"\n",
        )
        .unwrap_err();
        let text = error.to_string();
        assert!(text.starts_with("line 4:"), "{text}");
        assert!(text.contains("tools"), "{text}");
        let error = Suppressions::parse("[[suppress]\n").unwrap_err();
        assert!(
            matches!(error, SuppressionsError::Syntax { line: 1, .. }),
            "{error}"
        );
    }

    #[test]
    fn suppressions_match_code_and_tool_and_report_unused_ones() {
        let suppressions = Suppressions::parse(
            "[[suppress]]\ncode = \"implicit-hints\"\ntool = \"read_file\"\nreason = \"read-only\"\n\n[[suppress]]\ncode = \"long-description\"\nreason = \"never\"\n",
        )
        .unwrap();
        let (kept, suppressed) = suppressions.apply(vec![
            finding(Code::ImplicitHints, "read_file"),
            finding(Code::ImplicitHints, "write_file"),
        ]);
        assert_eq!(suppressed.len(), 1);
        assert_eq!(suppressed[0].finding.tool.as_deref(), Some("read_file"));
        assert_eq!(suppressed[0].reason, "read-only");
        assert_eq!(kept.len(), 2);
        assert_eq!(kept[0].tool.as_deref(), Some("write_file"));
        assert_eq!(kept[1].code, Code::UnusedSuppression);
        assert!(kept[1].message.contains("line 7"), "{}", kept[1].message);
    }
}
