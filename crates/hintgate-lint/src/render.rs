//! The three reports: a table for people, JSON for scripts, SARIF 2.1.0 for
//! code-scanning services.

use hintgate_policy::sanitize::escape_line;
use serde_json::{Value, json};

use crate::check::{CallCheck, CallOutcome};
use crate::finding::{Code, Finding, Severity};
use crate::suppress::Suppressed;

/// Where the documentation of every code lives, for SARIF's `helpUri`.
const DOCS_URI: &str = "https://github.com/hintgate/hintgate/blob/main/docs/diagnostics.md";

/// The schema a SARIF log names (the OASIS standard, errata 01).
const SARIF_SCHEMA: &str =
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json";

/// What one lint run found, ready to render.
#[derive(Debug, Clone, Copy)]
pub struct Report<'a> {
    /// The server as the user named it: its command line or URL.
    pub server: &'a str,
    /// How many tools it lists.
    pub n_tools: usize,
    /// The findings that stand.
    pub findings: &'a [Finding],
    /// The findings a suppression silenced.
    pub suppressed: &'a [Suppressed],
    /// The read-only tools that were called (`--call-read-only`), and how
    /// each call went.
    pub calls: &'a [CallCheck],
}

// === impl Report ===

impl Report<'_> {
    /// How many standing findings have each severity: errors, warnings, notes.
    pub fn counts(&self) -> (usize, usize, usize) {
        let count = |severity| {
            self.findings
                .iter()
                .filter(|finding| finding.severity == severity)
                .count()
        };
        (
            count(Severity::Error),
            count(Severity::Warning),
            count(Severity::Note),
        )
    }

    /// Whether any standing finding is at least as serious as `threshold`.
    pub fn fails(&self, threshold: Severity) -> bool {
        self.findings
            .iter()
            .any(|finding| finding.severity.at_least(threshold))
    }

    /// A table for a terminal: one row per finding, its fix under it, and a
    /// summary line.
    pub fn table(&self) -> String {
        // A tool's name and what a message quotes come from the server:
        // each is shown on its row with what would break or hide escaped.
        let tools: Vec<String> = self
            .findings
            .iter()
            .map(|finding| escape_line(finding.tool.as_deref().unwrap_or("-")))
            .collect();
        let tool_width = tools
            .iter()
            .map(|tool| tool.chars().count())
            .max()
            .unwrap_or(4)
            .clamp(4, 40);
        let code_width = self
            .findings
            .iter()
            .map(|finding| finding.code.as_str().len())
            .max()
            .unwrap_or(4)
            .max(4);
        let mut out = String::new();
        if !self.findings.is_empty() {
            out.push_str(&format!(
                "{:<8} {:<code_width$} {:<tool_width$} {}\n",
                "SEVERITY", "CODE", "TOOL", "MESSAGE"
            ));
            for (finding, tool) in self.findings.iter().zip(&tools) {
                out.push_str(&format!(
                    "{:<8} {:<code_width$} {:<tool_width$} {}\n",
                    finding.severity.as_str(),
                    finding.code.as_str(),
                    tool,
                    escape_line(&finding.message)
                ));
                out.push_str(&format!(
                    "{:<8} {:<code_width$} {:<tool_width$} fix: {}\n",
                    "",
                    "",
                    "",
                    escape_line(&finding.fix)
                ));
            }
            out.push('\n');
        }
        let (errors, warnings, notes) = self.counts();
        out.push_str(&format!(
            "{}: {}, {}, {}, {}",
            self.server,
            plural(self.n_tools, "tool"),
            plural(errors, "error"),
            plural(warnings, "warning"),
            plural(notes, "note"),
        ));
        if !self.suppressed.is_empty() {
            out.push_str(&format!(" ({} suppressed)", self.suppressed.len()));
        }
        out.push('\n');
        out
    }

    /// One JSON object: the server, the number of tools, the findings, the
    /// suppressed findings with their reasons, the read-only tools called
    /// and how each call went, and the counts.
    pub fn json(&self) -> Value {
        let (errors, warnings, notes) = self.counts();
        let calls: Vec<Value> = self
            .calls
            .iter()
            .map(|call| {
                let outcome = match call.outcome {
                    CallOutcome::Conforms => "conforms",
                    CallOutcome::Mismatch(_) => "mismatch",
                    CallOutcome::NoStructuredContent => "no-structured-content",
                    CallOutcome::Failed(_) => "failed",
                };
                json!({"tool": call.tool, "outcome": outcome})
            })
            .collect();
        json!({
            "server": self.server,
            "tools": self.n_tools,
            "findings": self.findings,
            "suppressed": self.suppressed,
            "calls": calls,
            "summary": {"error": errors, "warning": warnings, "note": notes},
        })
    }

    /// A SARIF 2.1.0 log with one run. Every code is a rule (with its
    /// documentation as `helpUri`); every finding, suppressed ones included
    /// (with their reason), is a result. Code scanning pins a result to a
    /// file of the repository, so each result's physical location is
    /// `artifact` (a path relative to the repository root); the tool is its
    /// logical location.
    pub fn sarif(&self, artifact: &str) -> Value {
        let rules: Vec<Value> = Code::ALL
            .iter()
            .map(|code| {
                json!({
                    "id": code.as_str(),
                    "name": rule_name(*code),
                    "shortDescription": {"text": code.description()},
                    "helpUri": format!("{DOCS_URI}#lint-{}", code.as_str()),
                    "defaultConfiguration": {"level": level(code.severity())},
                })
            })
            .collect();
        let mut results: Vec<Value> = self
            .findings
            .iter()
            .map(|finding| self.sarif_result(finding, artifact))
            .collect();
        for suppressed in self.suppressed {
            let mut result = self.sarif_result(&suppressed.finding, artifact);
            if let Some(object) = result.as_object_mut() {
                object.insert(
                    "suppressions".to_owned(),
                    json!([{"kind": "external", "justification": suppressed.reason}]),
                );
            }
            results.push(result);
        }
        json!({
            "$schema": SARIF_SCHEMA,
            "version": "2.1.0",
            "runs": [{
                "tool": {"driver": {
                    "name": "hintgate",
                    "version": env!("CARGO_PKG_VERSION"),
                    "informationUri": "https://github.com/hintgate/hintgate",
                    "rules": rules,
                }},
                "results": results,
            }],
        })
    }

    fn sarif_result(&self, finding: &Finding, artifact: &str) -> Value {
        let rule_index = Code::ALL
            .iter()
            .position(|code| *code == finding.code)
            .unwrap_or(0);
        let subject = finding
            .tool
            .as_deref()
            .map_or_else(|| "server".to_owned(), |tool| format!("tool `{tool}`"));
        let mut location = json!({
            "physicalLocation": {"artifactLocation": {"uri": artifact}},
        });
        if let (Some(tool), Some(object)) = (&finding.tool, location.as_object_mut()) {
            object.insert(
                "logicalLocations".to_owned(),
                json!([{"name": tool, "fullyQualifiedName": format!("{}/{tool}", self.server), "kind": "function"}]),
            );
        }
        json!({
            "ruleId": finding.code.as_str(),
            "ruleIndex": rule_index,
            "level": level(finding.severity),
            "message": {"text": format!("{subject}: {}. Fix: {}.", finding.message, finding.fix)},
            "locations": [location],
            "partialFingerprints": {
                "hintgate/finding/v1": format!("{}:{}", finding.code.as_str(), finding.tool.as_deref().unwrap_or("")),
            },
        })
    }
}

fn level(severity: Severity) -> &'static str {
    severity.as_str()
}

/// The code in PascalCase, as SARIF rule names are written.
fn rule_name(code: Code) -> String {
    code.as_str()
        .split('-')
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_uppercase().chain(chars).collect()
            })
        })
        .collect()
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (Vec<Finding>, Vec<Suppressed>) {
        let findings = vec![
            Finding::new(Code::ReadOnlyDestructive, Some("wipe"), "bad", "fix it"),
            Finding::new(Code::MissingTitle, Some("wipe"), "no title", "add one"),
        ];
        let suppressed = vec![Suppressed {
            finding: Finding::new(Code::ImplicitHints, Some("read"), "implicit", "declare"),
            reason: "read-only".to_owned(),
        }];
        (findings, suppressed)
    }

    #[test]
    fn issue_11_the_table_shows_a_tool_name_escaped_on_its_row() {
        let name = "\u{1b}[2Jwipe\n\nerror    read-only-destructive  read  forged\u{202e}";
        let findings = [Finding::new(
            Code::InvalidToolName,
            Some(name),
            "the name holds `\n`\nsecond line",
            "rename it",
        )];
        let report = Report {
            server: "srv",
            n_tools: 1,
            findings: &findings,
            suppressed: &[],
            calls: &[],
        };
        let table = report.table();
        // The header, the finding, its fix, a blank line and the summary.
        assert_eq!(table.lines().count(), 5, "{table}");
        assert!(
            !table.contains('\u{1b}') && !table.contains('\u{202e}'),
            "{table:?}"
        );
        assert!(table.contains("\\u{001b}[2Jwipe\\n\\nerror"), "{table}");
    }

    #[test]
    fn counts_and_thresholds() {
        let (findings, suppressed) = sample();
        let report = Report {
            server: "srv",
            n_tools: 2,
            findings: &findings,
            suppressed: &suppressed,
            calls: &[],
        };
        assert_eq!(report.counts(), (1, 0, 1));
        assert!(report.fails(Severity::Error));
        let notes_only = [Finding::new(Code::MissingTitle, Some("t"), "m", "f")];
        let report = Report {
            findings: &notes_only,
            ..report
        };
        assert!(!report.fails(Severity::Warning));
        assert!(report.fails(Severity::Note));
    }

    #[test]
    fn table_lists_each_finding_with_its_fix_and_a_summary() {
        let (findings, suppressed) = sample();
        let report = Report {
            server: "srv",
            n_tools: 2,
            findings: &findings,
            suppressed: &suppressed,
            calls: &[],
        };
        insta::assert_snapshot!(report.table(), @r"
        SEVERITY CODE                  TOOL MESSAGE
        error    read-only-destructive wipe bad
                                            fix: fix it
        note     missing-title         wipe no title
                                            fix: add one

        srv: 2 tools, 1 error, 0 warnings, 1 note (1 suppressed)
        ");
    }

    #[test]
    fn sarif_marks_suppressed_results_and_names_every_rule() {
        let (findings, suppressed) = sample();
        let report = Report {
            server: "srv",
            n_tools: 2,
            findings: &findings,
            suppressed: &suppressed,
            calls: &[],
        };
        let log = report.sarif("hintgate.lint.toml");
        let run = &log["runs"][0];
        assert_eq!(
            run["tool"]["driver"]["rules"].as_array().unwrap().len(),
            Code::ALL.len()
        );
        let results = run["results"].as_array().unwrap();
        assert_eq!(results.len(), 3);
        assert_eq!(results[0]["ruleId"], "read-only-destructive");
        assert_eq!(results[0]["level"], "error");
        assert_eq!(
            run["tool"]["driver"]["rules"][results[0]["ruleIndex"].as_u64().unwrap() as usize]["id"],
            "read-only-destructive"
        );
        assert_eq!(results[2]["suppressions"][0]["justification"], "read-only");
        assert_eq!(rule_name(Code::ReadOnlyDestructive), "ReadOnlyDestructive");
    }
}
