//! Diagnostics: problems found in a configuration, each with its position.
//!
//! Validation never stops at the first problem: it pushes every [`Diagnostic`]
//! it finds, and a configuration is valid only when none is an error.

use std::ops::Range;

use serde::{Serialize, Serializer};

/// How serious a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    /// The configuration is not used until this is fixed.
    Error,
    /// The configuration works, but probably not as meant.
    Warning,
}

/// The stable code of a configuration diagnostic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum DiagCode {
    /// The file is not valid TOML.
    TomlSyntax,
    /// A key that hintgate does not know; never silently ignored.
    UnknownKey,
    /// A value of the wrong type.
    WrongType,
    /// A value of the right type that is not allowed.
    InvalidValue,
    /// A required key is absent.
    MissingKey,
    /// Two keys that cannot be used together.
    ConflictingKeys,
    /// A glob that cannot be compiled.
    BadGlob,
    /// A `${VAR}` reference that is malformed.
    BadVariable,
    /// A server name that cannot be used as a tool-name prefix.
    InvalidServerName,
    /// A rule names a server that is not configured.
    UnknownRuleServer,
    /// An allow rule matches every tool of every server.
    AllowEverything,
    /// A URL that sends requests, and any credentials, in clear text.
    InsecureUrl,
    /// A sandbox path that is not absolute.
    RelativePath,
    /// A `${VAR}` reference to a variable the environment does not have.
    UnsetVariable,
    /// A JSON pointer that cannot be used (an `[audit] redact` pattern).
    BadPointer,
    /// Two servers whose prefixes make one host-facing tool name.
    CollidingServerNames,
    /// Two servers whose names look the same (`Docs` and `docs`).
    LookAlikeServerNames,
    /// A `[servers.NAME.read_only]` table that overrides nothing of how
    /// the server is reached: its instance would run with the same
    /// credentials as the full one.
    ReadOnlyUnchanged,
    /// A stdio server that vouches for its read-only instance and has no
    /// sandbox: the credentials guard only what they reach, and nothing
    /// stops the server writing this machine's files.
    VouchWithoutSandbox,
    /// A client secret written in the config file (`[servers.NAME.oauth]
    /// client_secret`), where every reader of the file sees it.
    SecretInConfig,
    /// `prepare = "on-start"` in the sandbox of a server whose command is
    /// no launcher that fetches a package: nothing would be installed.
    NothingToPrepare,
    /// A `[[previews]]` dry run for a server that is not trusted: it is
    /// never sent, and the prompt says "no preview".
    DryRunUntrusted,
}

/// One problem in a configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// The stable code.
    pub code: DiagCode,
    /// The dotted key the problem is about, such as `servers.fs.trust` or
    /// `rules[2].action`; empty for problems of the whole file.
    pub key: String,
    /// What is wrong, in one lowercase line.
    pub message: String,
    /// Byte range in the source, when known.
    #[serde(skip)]
    pub span: Option<Range<usize>>,
    /// How to fix it, when there is a likely fix.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub help: Option<String>,
}

/// A 1-based line and column (in characters) in a source text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Position {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, counted in characters.
    pub column: usize,
}

/// A diagnostic together with the file it was found in and its position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Located<'a> {
    /// The file's name as the user gave it.
    pub file: &'a str,
    /// Where the problem starts, when known.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub position: Option<Position>,
    /// The diagnostic itself.
    #[serde(flatten)]
    pub diagnostic: &'a Diagnostic,
}

// === impl DiagCode ===

impl DiagCode {
    /// Every code, in the order the documentation lists them.
    pub const ALL: [Self; 22] = [
        Self::TomlSyntax,
        Self::UnknownKey,
        Self::WrongType,
        Self::InvalidValue,
        Self::MissingKey,
        Self::ConflictingKeys,
        Self::BadGlob,
        Self::BadVariable,
        Self::InvalidServerName,
        Self::UnknownRuleServer,
        Self::AllowEverything,
        Self::InsecureUrl,
        Self::RelativePath,
        Self::UnsetVariable,
        Self::BadPointer,
        Self::CollidingServerNames,
        Self::LookAlikeServerNames,
        Self::ReadOnlyUnchanged,
        Self::VouchWithoutSandbox,
        Self::SecretInConfig,
        Self::NothingToPrepare,
        Self::DryRunUntrusted,
    ];

    /// The stable kebab-case code.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::TomlSyntax => "toml-syntax",
            Self::UnknownKey => "unknown-key",
            Self::WrongType => "wrong-type",
            Self::InvalidValue => "invalid-value",
            Self::MissingKey => "missing-key",
            Self::ConflictingKeys => "conflicting-keys",
            Self::BadGlob => "bad-glob",
            Self::BadVariable => "bad-variable",
            Self::InvalidServerName => "invalid-server-name",
            Self::UnknownRuleServer => "unknown-rule-server",
            Self::AllowEverything => "allow-everything",
            Self::InsecureUrl => "insecure-url",
            Self::RelativePath => "relative-path",
            Self::UnsetVariable => "unset-variable",
            Self::BadPointer => "bad-pointer",
            Self::CollidingServerNames => "colliding-server-names",
            Self::LookAlikeServerNames => "look-alike-server-names",
            Self::ReadOnlyUnchanged => "read-only-unchanged",
            Self::VouchWithoutSandbox => "vouch-without-sandbox",
            Self::SecretInConfig => "secret-in-config",
            Self::NothingToPrepare => "nothing-to-prepare",
            Self::DryRunUntrusted => "dry-run-untrusted",
        }
    }
}

impl std::fmt::Display for DiagCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for DiagCode {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

// === impl Diagnostic ===

impl Diagnostic {
    /// An error about `key`.
    pub fn error(code: DiagCode, key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            severity: Severity::Error,
            code,
            key: key.into(),
            message: message.into(),
            span: None,
            help: None,
        }
    }

    /// A warning about `key`.
    pub fn warning(code: DiagCode, key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            severity: Severity::Warning,
            ..Self::error(code, key, message)
        }
    }

    /// Attaches the source range the problem is at.
    #[must_use]
    pub fn at(mut self, span: Range<usize>) -> Self {
        self.span = Some(span);
        self
    }

    /// Attaches a hint on how to fix the problem.
    #[must_use]
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// This diagnostic is an error.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// Places the diagnostic in `file` whose text is `source`.
    pub fn locate<'a>(&'a self, file: &'a str, source: &str) -> Located<'a> {
        Located {
            file,
            position: self.span.as_ref().map(|span| position(source, span.start)),
            diagnostic: self,
        }
    }

    /// Renders the diagnostic the way compilers do: a `file:line:column`
    /// header, the source line and a caret under the problem.
    pub fn render(&self, file: &str, source: &str) -> String {
        let severity = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let mut out = format!("{severity}[{}]: {}\n", self.code, self.message);
        match &self.span {
            Some(span) => {
                let pos = position(source, span.start);
                let pad = " ".repeat(pos.line.to_string().len());
                out.push_str(&format!("{pad}--> {file}:{}:{}", pos.line, pos.column));
                if !self.key.is_empty() {
                    out.push_str(&format!(" (key `{}`)", self.key));
                }
                out.push('\n');
                let line_text = source.lines().nth(pos.line.saturating_sub(1)).unwrap_or("");
                let gutter = pos.line.to_string();
                let width = source
                    .get(span.clone())
                    .map(|text| text.lines().next().unwrap_or("").chars().count())
                    .unwrap_or(1)
                    .max(1);
                out.push_str(&format!("{pad} |\n{gutter} | {line_text}\n{pad} | "));
                out.push_str(&" ".repeat(pos.column.saturating_sub(1)));
                out.push_str(&"^".repeat(width));
                out.push('\n');
            }
            None => {
                out.push_str(&format!("  --> {file}"));
                if !self.key.is_empty() {
                    out.push_str(&format!(" (key `{}`)", self.key));
                }
                out.push('\n');
            }
        }
        if let Some(help) = &self.help {
            let width = self.span.as_ref().map_or(1, |span| {
                position(source, span.start).line.to_string().len()
            });
            out.push_str(&format!("{} = help: {help}\n", " ".repeat(width)));
        }
        out
    }
}

/// The 1-based line and character column of byte `offset` in `source`.
///
/// An offset past the end, or inside a character, is clamped to the nearest
/// earlier character boundary.
pub fn position(source: &str, offset: usize) -> Position {
    let mut offset = offset.min(source.len());
    while !source.is_char_boundary(offset) {
        offset = offset.saturating_sub(1);
    }
    let before = source.get(..offset).unwrap_or("");
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |idx| idx + 1);
    let column = before.get(line_start..).unwrap_or("").chars().count() + 1;
    Position { line, column }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_lines_and_characters() {
        let source = "a = 1\nbé = 2\n";
        assert_eq!(position(source, 0), Position { line: 1, column: 1 });
        assert_eq!(position(source, 6), Position { line: 2, column: 1 });
        // `=` after the two-byte `é`.
        assert_eq!(position(source, 10), Position { line: 2, column: 4 });
        assert_eq!(position(source, 999).line, 3);
    }

    #[test]
    fn codes_are_unique() {
        let codes: std::collections::BTreeSet<_> =
            DiagCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(codes.len(), DiagCode::ALL.len());
    }
}
