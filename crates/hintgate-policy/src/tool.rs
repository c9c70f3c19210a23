//! The tool definition model and the two views of its hints.
//!
//! A [`Tool`] is one entry of a `tools/list` result, kept whole: every field the
//! spec names is typed, and anything else (newer spec fields, vendor keys) is
//! kept in `extra` so that it survives a trip through the gateway.
//!
//! From a tool the policy derives two views of its annotations:
//! [`DeclaredHints`] (exactly what the server sent, absent fields absent) and
//! [`EffectiveHints`] (what the policy may act on; see [`EffectiveHints::derive`]).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::reason::ReasonCode;
use crate::sanitize::sanitize;

/// One tool definition as it appears in a `tools/list` result.
///
/// Parsing is strict about the types of the fields the spec names (a
/// `readOnlyHint` that is not a boolean makes the whole definition invalid, and
/// an invalid definition is denied), and lenient about everything else.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    /// The tool's programmatic name, unique per server.
    pub name: String,
    /// Display title (spec 2025-06-18 and later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Human-readable description, shown to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of the arguments; the spec requires it, broken servers omit it.
    #[serde(
        rename = "inputSchema",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub input_schema: Option<Value>,
    /// JSON Schema of `structuredContent`, when the tool declares one.
    #[serde(
        rename = "outputSchema",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub output_schema: Option<Value>,
    /// The behavioural hints: claims the server makes about the tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Annotations>,
    /// Icons (spec 2025-11-25 and later), kept as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icons: Option<Value>,
    /// Protocol metadata, kept as sent.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Map<String, Value>>,
    /// Every other field, kept so that it survives the trip to the host.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The `annotations` object of a tool (`ToolAnnotations` in the spec).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Annotations {
    /// Display title; used when the tool has no top-level `title`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The tool does not modify its environment (spec default: false).
    #[serde(
        rename = "readOnlyHint",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub read_only_hint: Option<bool>,
    /// The tool may perform destructive updates (spec default: true).
    #[serde(
        rename = "destructiveHint",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub destructive_hint: Option<bool>,
    /// Repeating a call with the same arguments has no extra effect (spec default: false).
    #[serde(
        rename = "idempotentHint",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub idempotent_hint: Option<bool>,
    /// The tool interacts with an open world of external entities (spec default: true).
    #[serde(
        rename = "openWorldHint",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub open_world_hint: Option<bool>,
    /// Every other annotation, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Why a JSON value is not a valid tool definition.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// The value does not have the shape of a tool definition.
    #[error("invalid tool definition: {0}")]
    Invalid(String),
}

/// The four hints exactly as the server declared them; `None` where absent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeclaredHints {
    /// `readOnlyHint` as sent.
    #[serde(rename = "readOnlyHint")]
    pub read_only: Option<bool>,
    /// `destructiveHint` as sent.
    #[serde(rename = "destructiveHint")]
    pub destructive: Option<bool>,
    /// `idempotentHint` as sent.
    #[serde(rename = "idempotentHint")]
    pub idempotent: Option<bool>,
    /// `openWorldHint` as sent.
    #[serde(rename = "openWorldHint")]
    pub open_world: Option<bool>,
}

/// The four hints the policy acts on, always decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EffectiveHints {
    /// The tool is taken not to modify its environment.
    #[serde(rename = "readOnlyHint")]
    pub read_only: bool,
    /// The tool is taken to be able to destroy or overwrite data.
    #[serde(rename = "destructiveHint")]
    pub destructive: bool,
    /// Repeating a call is taken to have no extra effect.
    #[serde(rename = "idempotentHint")]
    pub idempotent: bool,
    /// The tool is taken to reach outside this machine.
    #[serde(rename = "openWorldHint")]
    pub open_world: bool,
}

/// Whether the user's configuration trusts a server's claims about itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Trust {
    /// Declared annotations are believed, with the spec defaults for absent ones.
    Trusted,
    /// Declared annotations are claims; the cautious defaults apply (the default).
    #[default]
    Untrusted,
}

/// What a running sandbox proves about a server, whatever the server says.
///
/// Only properties the kernel actually enforces belong here: a sandbox that was
/// asked for but could not be enforced proves nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SandboxProof {
    /// The server runs in a network namespace with no route out.
    pub no_network: bool,
    /// The server can write nowhere outside its own process.
    pub no_writes: bool,
    /// The server's network namespace reaches only the hosts its sandbox
    /// table lists (`network = ["host:port", ...]`), through the gateway's
    /// egress proxy. Not a closed world: it can send data to those hosts,
    /// so this lowers no friction; the prompt names the hosts.
    #[serde(default)]
    pub egress_only: bool,
}

/// What a server's read-only instance proves, whatever the server says:
/// only what the configuration vouches (`vouch = true` in
/// `[servers.NAME.read_only]`), never what the server claims.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CredentialProof {
    /// A call that goes to the read-only instance runs with credentials
    /// that cannot change anything the server reaches through them: a tool
    /// that claims to only read is sent there, and its writes, if the claim
    /// is a lie, are refused where the credentials are checked.
    pub read_only: bool,
}

/// Effective hints together with the facts that shaped them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HintAssessment {
    /// The hints the policy acts on.
    pub effective: EffectiveHints,
    /// The declared hints contradict each other (read-only and destructive).
    pub contradictory: bool,
    /// The server declared none of the four hints.
    pub missing: bool,
    /// A sandbox proof changed at least one effective hint.
    pub sandbox_confined: bool,
    /// Vouched read-only credentials changed at least one effective hint
    /// (beyond what the sandbox proves).
    pub read_only_credentials: bool,
}

// === impl Tool ===

impl Tool {
    /// Parses one tool definition from a JSON value.
    ///
    /// # Errors
    ///
    /// [`ToolError::Invalid`] when the value is not an object with a string
    /// `name`, or when a field the spec names has the wrong type.
    pub fn from_value(value: Value) -> Result<Self, ToolError> {
        serde_json::from_value(value).map_err(|err| ToolError::Invalid(err.to_string()))
    }

    /// Parses one tool definition from JSON text.
    ///
    /// # Errors
    ///
    /// [`ToolError::Invalid`] when the text is not JSON or not a tool definition.
    pub fn from_json(text: &str) -> Result<Self, ToolError> {
        serde_json::from_str(text).map_err(|err| ToolError::Invalid(err.to_string()))
    }

    /// A tool with only a name and an empty object input schema.
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            title: None,
            description: None,
            input_schema: Some(serde_json::json!({ "type": "object" })),
            output_schema: None,
            annotations: None,
            icons: None,
            meta: None,
            extra: Map::new(),
        }
    }

    /// The name to show a person: `title`, then `annotations.title`, then `name`
    /// (the spec's order). A title that is empty once invisible characters and
    /// white space are removed is skipped, so it cannot blank out the name.
    pub fn display_name(&self) -> &str {
        let shows_something = |title: &&str| !sanitize(title).text.trim().is_empty();
        self.title
            .as_deref()
            .filter(shows_something)
            .or_else(|| {
                self.annotations
                    .as_ref()
                    .and_then(|annotations| annotations.title.as_deref())
                    .filter(shows_something)
            })
            .unwrap_or(&self.name)
    }

    /// The four hints exactly as declared.
    pub fn declared(&self) -> DeclaredHints {
        self.annotations
            .as_ref()
            .map(Annotations::declared)
            .unwrap_or_default()
    }
}

// === impl Annotations ===

impl Annotations {
    /// The four hints of this object, absent ones `None`.
    pub fn declared(&self) -> DeclaredHints {
        DeclaredHints {
            read_only: self.read_only_hint,
            destructive: self.destructive_hint,
            idempotent: self.idempotent_hint,
            open_world: self.open_world_hint,
        }
    }
}

// === impl DeclaredHints ===

impl DeclaredHints {
    /// None of the four hints is declared.
    pub fn is_empty(&self) -> bool {
        self.read_only.is_none()
            && self.destructive.is_none()
            && self.idempotent.is_none()
            && self.open_world.is_none()
    }

    /// The names of the hints left implicit, in the spec's order.
    pub fn implicit(&self) -> Vec<&'static str> {
        let mut names = Vec::new();
        if self.read_only.is_none() {
            names.push("readOnlyHint");
        }
        if self.destructive.is_none() {
            names.push("destructiveHint");
        }
        if self.idempotent.is_none() {
            names.push("idempotentHint");
        }
        if self.open_world.is_none() {
            names.push("openWorldHint");
        }
        names
    }

    /// The declared hints claim both read-only and destructive.
    pub fn is_contradictory(&self) -> bool {
        self.read_only == Some(true) && self.destructive == Some(true)
    }

    /// The tool claims to only read: `readOnlyHint` is `true` and the
    /// claim does not contradict itself (a tool that also says it is
    /// destructive claims nothing one way only).
    pub fn claims_read_only(&self) -> bool {
        self.read_only == Some(true) && !self.is_contradictory()
    }
}

// === impl EffectiveHints ===

impl EffectiveHints {
    /// The spec's defaults for a tool that declares nothing: it may write,
    /// destroy, repeat with effect and reach the open world.
    pub const CAUTIOUS: Self = Self {
        read_only: false,
        destructive: true,
        idempotent: false,
        open_world: true,
    };

    /// Derives the effective hints (design §4.1).
    ///
    /// - Trusted server: the declared values, spec defaults for absent ones. A
    ///   read-only tool is non-destructive and idempotent (it changes nothing, so
    ///   it can neither destroy nor repeat with effect). A declaration that is
    ///   both read-only and destructive contradicts itself and resolves to the
    ///   cautious side: not read-only, destructive.
    /// - Untrusted server: the cautious defaults, whatever was declared.
    /// - Either way, a sandbox proof overrides: no network proves a closed world,
    ///   no network and no writes prove the server cannot change anything outside
    ///   its own process (read-only, non-destructive, idempotent).
    pub fn derive(declared: DeclaredHints, trust: Trust, sandbox: SandboxProof) -> HintAssessment {
        Self::derive_with(declared, trust, sandbox, CredentialProof::default())
    }

    /// As [`EffectiveHints::derive`], with what vouched read-only
    /// credentials prove: a tool that claims to only read
    /// ([`DeclaredHints::claims_read_only`]) runs on the read-only
    /// instance, so it is read-only (and so non-destructive and
    /// idempotent) whatever the server's trust. Nothing else changes: a
    /// tool that does not claim to only read goes to the full instance, and
    /// a read still reaches whatever the credentials let it read (the open
    /// world is not closed).
    pub fn derive_with(
        declared: DeclaredHints,
        trust: Trust,
        sandbox: SandboxProof,
        credentials: CredentialProof,
    ) -> HintAssessment {
        let contradictory = declared.is_contradictory();
        let base = match trust {
            Trust::Untrusted => Self::CAUTIOUS,
            Trust::Trusted if contradictory => Self {
                read_only: false,
                destructive: true,
                idempotent: declared.idempotent.unwrap_or(false),
                open_world: declared.open_world.unwrap_or(true),
            },
            Trust::Trusted => {
                let read_only = declared.read_only.unwrap_or(false);
                Self {
                    read_only,
                    destructive: !read_only && declared.destructive.unwrap_or(true),
                    idempotent: read_only || declared.idempotent.unwrap_or(false),
                    open_world: declared.open_world.unwrap_or(true),
                }
            }
        };
        let mut effective = base;
        if sandbox.no_network {
            effective.open_world = false;
        }
        if sandbox.no_network && sandbox.no_writes {
            effective.read_only = true;
            effective.destructive = false;
            effective.idempotent = true;
        }
        let sandboxed = effective;
        // INVARIANT: only the configuration's vouch makes a claim true, and
        // only for a tool that claims to only read, which is sent to the
        // read-only instance (`Policy::instance`).
        if credentials.read_only && declared.claims_read_only() {
            effective.read_only = true;
            effective.destructive = false;
            effective.idempotent = true;
        }
        HintAssessment {
            effective,
            contradictory,
            missing: declared.is_empty(),
            sandbox_confined: sandboxed != base,
            read_only_credentials: effective != sandboxed,
        }
    }
}

// === impl HintAssessment ===

impl HintAssessment {
    /// The risk reasons these hints imply, in a fixed order.
    pub(crate) fn risk_codes(&self, trust: Trust) -> impl Iterator<Item = ReasonCode> {
        [
            (trust == Trust::Untrusted, ReasonCode::UntrustedServer),
            (self.missing, ReasonCode::MissingAnnotations),
            (self.contradictory, ReasonCode::ContradictoryAnnotations),
            (self.effective.destructive, ReasonCode::Destructive),
            (self.effective.open_world, ReasonCode::OpenWorld),
            (self.sandbox_confined, ReasonCode::SandboxConfined),
            (self.read_only_credentials, ReasonCode::ReadOnlyCredentials),
        ]
        .into_iter()
        .filter_map(|(applies, code)| applies.then_some(code))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hints(
        ro: Option<bool>,
        de: Option<bool>,
        id: Option<bool>,
        ow: Option<bool>,
    ) -> DeclaredHints {
        DeclaredHints {
            read_only: ro,
            destructive: de,
            idempotent: id,
            open_world: ow,
        }
    }

    #[test]
    fn unknown_fields_survive_a_round_trip() {
        let value = json!({
            "name": "t",
            "inputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": true, "x-vendor": 1},
            "execution": {"taskSupport": "optional"},
            "_meta": {"a/b": 2}
        });
        let tool = Tool::from_value(value.clone()).unwrap();
        assert_eq!(serde_json::to_value(&tool).unwrap(), value);
    }

    #[test]
    fn a_hint_of_the_wrong_type_is_an_invalid_definition() {
        let err = Tool::from_value(json!({"name": "t", "annotations": {"readOnlyHint": "yes"}}));
        assert!(matches!(err, Err(ToolError::Invalid(_))));
    }

    #[test]
    fn display_name_follows_the_spec_order() {
        let mut tool = Tool::named("raw");
        assert_eq!(tool.display_name(), "raw");
        tool.annotations = Some(Annotations {
            title: Some("Annotated".into()),
            ..Annotations::default()
        });
        assert_eq!(tool.display_name(), "Annotated");
        tool.title = Some("Top".into());
        assert_eq!(tool.display_name(), "Top");
    }

    #[test]
    fn trusted_read_only_is_neither_destructive_nor_repeatable_with_effect() {
        let a = EffectiveHints::derive(
            hints(Some(true), None, None, Some(false)),
            Trust::Trusted,
            SandboxProof::default(),
        );
        assert_eq!(
            a.effective,
            EffectiveHints {
                read_only: true,
                destructive: false,
                idempotent: true,
                open_world: false
            }
        );
    }

    #[test]
    fn untrusted_claims_are_ignored() {
        let a = EffectiveHints::derive(
            hints(Some(true), Some(false), Some(true), Some(false)),
            Trust::Untrusted,
            SandboxProof::default(),
        );
        assert_eq!(a.effective, EffectiveHints::CAUTIOUS);
        assert!(!a.sandbox_confined);
    }

    #[test]
    fn a_confining_sandbox_proves_read_only_even_when_untrusted() {
        let a = EffectiveHints::derive(
            DeclaredHints::default(),
            Trust::Untrusted,
            SandboxProof {
                no_network: true,
                no_writes: true,
                egress_only: false,
            },
        );
        assert!(a.effective.read_only && !a.effective.open_world && !a.effective.destructive);
        assert!(a.sandbox_confined);
    }

    #[test]
    fn vouched_credentials_make_a_read_only_claim_true_and_nothing_else() {
        let vouched = CredentialProof { read_only: true };
        let claim = hints(Some(true), None, None, None);
        let a =
            EffectiveHints::derive_with(claim, Trust::Untrusted, SandboxProof::default(), vouched);
        assert!(a.effective.read_only && !a.effective.destructive && a.effective.idempotent);
        assert!(a.effective.open_world, "a read still reaches the world");
        assert!(a.read_only_credentials && !a.sandbox_confined);
        for other in [
            hints(None, None, None, None),
            hints(Some(false), None, None, None),
            hints(Some(true), Some(true), None, None),
        ] {
            let a = EffectiveHints::derive_with(
                other,
                Trust::Untrusted,
                SandboxProof::default(),
                vouched,
            );
            assert_eq!(a.effective, EffectiveHints::CAUTIOUS, "{other:?}");
            assert!(!a.read_only_credentials);
        }
    }
}
