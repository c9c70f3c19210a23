//! What a check reports: a [`Finding`] with a stable [`Code`] and a [`Severity`].

use serde::{Serialize, Serializer};

/// How serious a finding is, from the most to the least.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    /// The definition is wrong: a host or the gateway will misread the tool.
    Error,
    /// The definition is probably wrong, or hides a hazard.
    Warning,
    /// Advice: the tool works, but could say more.
    Note,
}

/// The stable code of a lint finding. Codes are never renamed or reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Code {
    /// The tool declares none of the four hints.
    MissingAnnotations,
    /// The tool declares some of the four hints and leaves others implicit.
    ImplicitHints,
    /// `readOnlyHint: true` together with `destructiveHint: true`.
    ReadOnlyDestructive,
    /// `readOnlyHint: true` together with `idempotentHint: false`.
    ReadOnlyNotIdempotent,
    /// `destructiveHint: false` on a tool whose name or description says it destroys.
    DestructiveNameNotDestructive,
    /// `readOnlyHint: true` on a tool whose name or mode argument says it writes.
    WriteNameReadOnly,
    /// `openWorldHint: false` on a tool that takes a URL, reaches the web or sends mail.
    NetworkToolClosedWorld,
    /// Control or invisible characters in the name, title, description or schema.
    HiddenCharacters,
    /// Text in the description that addresses the model rather than describing the tool.
    InstructionsToModel,
    /// The description or schema refers to secrets (SSH keys, `.env`, environment variables).
    SecretReference,
    /// A description longer than the limit.
    LongDescription,
    /// The tool has no description.
    MissingDescription,
    /// `inputSchema` is missing or is not an object schema.
    InputSchemaNotObject,
    /// `inputSchema` has properties but no `required` list.
    MissingRequired,
    /// A name outside the spec's character set or length.
    InvalidToolName,
    /// Two tools with the same name.
    DuplicateToolName,
    /// Two tools whose names look the same (`notes` and `Notes`).
    LookAlikeToolName,
    /// A prompt name outside the tool-name rule.
    InvalidPromptName,
    /// Two prompts whose names look the same.
    LookAlikePromptName,
    /// A prompt's arguments that would not read one way only (a name that
    /// breaks a line or hides, is empty, or looks like another's).
    InvalidPromptArguments,
    /// The definition does not parse (a hint that is not a boolean, no name).
    InvalidToolDefinition,
    /// The tool has no `title`.
    MissingTitle,
    /// The tool's real result does not satisfy its `outputSchema`.
    OutputSchemaMismatch,
    /// Calling a read-only tool failed.
    ReadOnlyCallFailed,
    /// The tool is listed only with (or only without) the optional client capabilities.
    CapabilityDependentTool,
    /// A suppression in `hintgate.lint.toml` that matched no finding.
    UnusedSuppression,
}

/// One problem found in a server's tool definitions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// The stable code.
    pub code: Code,
    /// Error, warning or note.
    pub severity: Severity,
    /// The tool's name, or `None` for a finding about the server as a whole.
    pub tool: Option<String>,
    /// What is wrong, in one line.
    pub message: String,
    /// How to fix it, in one line.
    pub fix: String,
}

// === impl Severity ===

impl Severity {
    /// The kebab-case name (`error`, `warning`, `note`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Error => "error",
            Self::Warning => "warning",
            Self::Note => "note",
        }
    }

    /// Whether a finding of this severity counts against a threshold:
    /// `Error.at_least(Warning)` is true.
    pub fn at_least(self, threshold: Self) -> bool {
        self <= threshold
    }
}

// === impl Code ===

impl Code {
    /// Every code, in documentation order.
    pub const ALL: [Self; 26] = [
        Self::MissingAnnotations,
        Self::ImplicitHints,
        Self::ReadOnlyDestructive,
        Self::ReadOnlyNotIdempotent,
        Self::DestructiveNameNotDestructive,
        Self::WriteNameReadOnly,
        Self::NetworkToolClosedWorld,
        Self::HiddenCharacters,
        Self::InstructionsToModel,
        Self::SecretReference,
        Self::LongDescription,
        Self::MissingDescription,
        Self::InputSchemaNotObject,
        Self::MissingRequired,
        Self::InvalidToolName,
        Self::DuplicateToolName,
        Self::LookAlikeToolName,
        Self::InvalidPromptName,
        Self::LookAlikePromptName,
        Self::InvalidPromptArguments,
        Self::InvalidToolDefinition,
        Self::MissingTitle,
        Self::OutputSchemaMismatch,
        Self::ReadOnlyCallFailed,
        Self::CapabilityDependentTool,
        Self::UnusedSuppression,
    ];

    /// The stable kebab-case code.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::MissingAnnotations => "missing-annotations",
            Self::ImplicitHints => "implicit-hints",
            Self::ReadOnlyDestructive => "read-only-destructive",
            Self::ReadOnlyNotIdempotent => "read-only-not-idempotent",
            Self::DestructiveNameNotDestructive => "destructive-name-not-destructive",
            Self::WriteNameReadOnly => "write-name-read-only",
            Self::NetworkToolClosedWorld => "network-tool-closed-world",
            Self::HiddenCharacters => "hidden-characters",
            Self::InstructionsToModel => "instructions-to-model",
            Self::SecretReference => "secret-reference",
            Self::LongDescription => "long-description",
            Self::MissingDescription => "missing-description",
            Self::InputSchemaNotObject => "input-schema-not-object",
            Self::MissingRequired => "missing-required",
            Self::InvalidToolName => "invalid-tool-name",
            Self::DuplicateToolName => "duplicate-tool-name",
            Self::LookAlikeToolName => "look-alike-tool-name",
            Self::InvalidPromptName => "invalid-prompt-name",
            Self::LookAlikePromptName => "look-alike-prompt-name",
            Self::InvalidPromptArguments => "invalid-prompt-arguments",
            Self::InvalidToolDefinition => "invalid-tool-definition",
            Self::MissingTitle => "missing-title",
            Self::OutputSchemaMismatch => "output-schema-mismatch",
            Self::ReadOnlyCallFailed => "read-only-call-failed",
            Self::CapabilityDependentTool => "capability-dependent-tool",
            Self::UnusedSuppression => "unused-suppression",
        }
    }

    /// The code for a kebab-case string, if it is one.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|code| code.as_str() == text)
    }

    /// How serious a finding with this code is.
    pub const fn severity(self) -> Severity {
        match self {
            Self::ReadOnlyDestructive
            | Self::HiddenCharacters
            | Self::InputSchemaNotObject
            | Self::InvalidToolName
            | Self::DuplicateToolName
            | Self::LookAlikeToolName
            | Self::InvalidPromptName
            | Self::LookAlikePromptName
            | Self::InvalidPromptArguments
            | Self::InvalidToolDefinition
            | Self::OutputSchemaMismatch => Severity::Error,
            Self::MissingAnnotations
            | Self::ImplicitHints
            | Self::ReadOnlyNotIdempotent
            | Self::DestructiveNameNotDestructive
            | Self::WriteNameReadOnly
            | Self::NetworkToolClosedWorld
            | Self::InstructionsToModel
            | Self::SecretReference
            | Self::LongDescription => Severity::Warning,
            Self::MissingDescription
            | Self::MissingRequired
            | Self::MissingTitle
            | Self::ReadOnlyCallFailed
            | Self::CapabilityDependentTool
            | Self::UnusedSuppression => Severity::Note,
        }
    }

    /// What the code means, in one sentence (the SARIF rule's description).
    pub const fn description(self) -> &'static str {
        match self {
            Self::MissingAnnotations => {
                "The tool declares none of readOnlyHint, destructiveHint, idempotentHint and openWorldHint."
            }
            Self::ImplicitHints => {
                "The tool leaves some of the four hints implicit, so hosts fall back to the spec's defaults for them."
            }
            Self::ReadOnlyDestructive => "The tool claims to be read-only and destructive at once.",
            Self::ReadOnlyNotIdempotent => {
                "The tool claims to be read-only but not idempotent, although a call that changes nothing can be repeated."
            }
            Self::DestructiveNameNotDestructive => {
                "The tool says destructiveHint: false while its name or description says it deletes, overwrites, sends or pays."
            }
            Self::WriteNameReadOnly => {
                "The tool says readOnlyHint: true while its name or a mode argument says it writes."
            }
            Self::NetworkToolClosedWorld => {
                "The tool says openWorldHint: false while it takes a URL, reaches the web or sends mail."
            }
            Self::HiddenCharacters => {
                "The tool's text holds control or invisible characters that a person does not see but the model reads."
            }
            Self::InstructionsToModel => {
                "The description addresses the model (to ignore instructions, to call other tools, to hide something from the user)."
            }
            Self::SecretReference => {
                "The description or input schema refers to secrets such as SSH keys, .env files or environment variables."
            }
            Self::LongDescription => "The description is longer than model APIs accept.",
            Self::MissingDescription => "The tool has no description.",
            Self::InputSchemaNotObject => {
                "The tool's inputSchema is missing or is not a JSON Schema of type object."
            }
            Self::MissingRequired => {
                "The inputSchema has properties without defaults but no required list."
            }
            Self::InvalidToolName => {
                "The tool's name is outside the spec's 1 to 128 characters of A-Z, a-z, 0-9, _, - and ."
            }
            Self::DuplicateToolName => "Two tools of the server have the same name.",
            Self::LookAlikeToolName => {
                "Two tools of the server have names that look the same, so a person could approve one for the other."
            }
            Self::InvalidPromptName => {
                "A prompt's name is empty, longer than 128 characters, or holds characters outside A-Z a-z 0-9 _ - ."
            }
            Self::LookAlikePromptName => {
                "Two prompts of the server have names that look the same, so a person could pick one for the other."
            }
            Self::InvalidPromptArguments => {
                "A prompt's argument has a name that is empty, breaks a line or hides characters, or looks like another argument's."
            }
            Self::InvalidToolDefinition => {
                "The tool definition does not parse: a field the spec names has the wrong type."
            }
            Self::MissingTitle => "The tool has no human-readable title.",
            Self::OutputSchemaMismatch => {
                "The tool's real result does not satisfy its outputSchema."
            }
            Self::ReadOnlyCallFailed => "Calling a read-only tool to check its result failed.",
            Self::CapabilityDependentTool => {
                "The tool is listed only when the client declares (or does not declare) optional capabilities."
            }
            Self::UnusedSuppression => "A suppression in hintgate.lint.toml matched no finding.",
        }
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Code {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

// === impl Finding ===

impl Finding {
    /// A finding with the code's severity.
    pub fn new(
        code: Code,
        tool: Option<&str>,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self {
            code,
            severity: code.severity(),
            tool: tool.map(str::to_owned),
            message: message.into(),
            fix: fix.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_kebab_case_and_parse_back() {
        let mut seen = std::collections::BTreeSet::new();
        for code in Code::ALL {
            let text = code.as_str();
            assert!(seen.insert(text), "duplicate code {text}");
            assert!(
                text.chars().all(|ch| ch.is_ascii_lowercase() || ch == '-'),
                "{text} is not kebab-case"
            );
            assert_eq!(Code::parse(text), Some(code));
            assert!(!code.description().is_empty());
        }
        assert_eq!(Code::parse("no-such-code"), None);
    }

    #[test]
    fn thresholds_count_more_serious_findings() {
        assert!(Severity::Error.at_least(Severity::Warning));
        assert!(Severity::Warning.at_least(Severity::Warning));
        assert!(!Severity::Note.at_least(Severity::Warning));
        assert!(Severity::Note.at_least(Severity::Note));
        assert!(!Severity::Warning.at_least(Severity::Error));
    }
}
