//! Helpers shared by the tests of this crate and of the command line
//! (feature `test-util`; not part of the stable interface).
//!
//! The policy corpus is a folder of TOML files, one case each: a
//! configuration (or wrap mode's settings), a server, a tool definition, the
//! state of the call, and what the decision must be. [`Case::check`] compares
//! an explanation, as JSON, with the expectation, so the same case checks the
//! library and the `hintgate explain --json` output alike.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::config::{self, Enforcement, Profile, Transport, ValidConfig};
use crate::decide::{Policy, Remembered, Scope, SessionState};
use crate::explain::{ExplainInput, explain};
use crate::pin::PinStatus;
use crate::tool::{SandboxProof, Tool, Trust};

/// One corpus case, as written in its file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// What the case shows, in one sentence.
    pub description: String,
    /// The server's configured name.
    #[serde(default = "default_server")]
    pub server: String,
    /// A whole `hintgate.toml`; without it, wrap mode with `wrap`'s settings.
    pub config: Option<String>,
    /// Wrap mode's settings, when there is no `config`.
    #[serde(default)]
    pub wrap: WrapSettings,
    /// The tool definition as JSON text.
    pub tool: Option<String>,
    /// Or a real server's definition: `FILE#TOOL`, from `tests/fixtures/peers`.
    pub tool_fixture: Option<String>,
    /// The call's arguments as JSON text.
    pub arguments: Option<String>,
    /// The pin status to assume.
    #[serde(default)]
    pub pin: PinArg,
    /// The approved definition as JSON text; sets the pin status by digest.
    pub pinned: Option<String>,
    /// The session has read private data.
    #[serde(default)]
    pub tainted: bool,
    /// A standing approval.
    #[serde(default)]
    pub remembered: RememberedArg,
    /// What the host's credentials let it do (`read` or `write`).
    #[serde(default)]
    pub scope: Scope,
    /// Whether the configured sandbox is taken as enforced.
    #[serde(default)]
    pub sandbox: SandboxArg,
    /// The decision hook's answer line, for a configuration with a
    /// `decide_command` (library only: the command line runs the hook).
    pub hook: Option<String>,
    /// Also run this case through the command line.
    #[serde(default)]
    pub cli: bool,
    /// What must come out.
    pub expect: Expect,
}

/// Wrap mode's settings in a case.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WrapSettings {
    /// `--trust`
    #[serde(default)]
    pub trust: TrustArg,
    /// `--profile`
    #[serde(default)]
    pub profile: ProfileArg,
    /// `--unattended`
    #[serde(default)]
    pub unattended: bool,
}

/// The expected outcome; only `verdict` and `reasons` are required.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// `allow`, `ask` or `deny`.
    pub verdict: String,
    /// Every reason code, in order.
    pub reasons: Vec<String>,
    /// Whether the tool is listed.
    pub visible: Option<bool>,
    /// `not-asked`, `this-call-only` or `up-to-always`.
    pub remember: Option<String>,
    /// Whether an automatic retry is allowed.
    pub retry_eligible: Option<bool>,
    /// The effective hints, by their spec names.
    pub effective: Option<Map<String, Value>>,
    /// The display name.
    pub display_name: Option<String>,
    /// The pin status the case ends up with.
    pub pin: Option<String>,
    /// Fields the diff must name.
    pub changed_fields: Option<Vec<String>>,
    /// The decision hook's words, on the reason they belong to.
    pub hook_note: Option<String>,
    /// Which instance the call goes to (`full` or `read-only`); checked
    /// also when absent: a server without a read-only instance has none.
    pub instance: Option<String>,
    /// Texts a caveat must contain; when empty, no caveat may be given.
    #[serde(default)]
    pub caveat_contains: Vec<String>,
    /// Texts the prompt must contain.
    #[serde(default)]
    pub prompt_contains: Vec<String>,
    /// Texts the prompt must not contain.
    #[serde(default)]
    pub prompt_excludes: Vec<String>,
}

/// `pin` in a case.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PinArg {
    /// Never approved.
    #[default]
    New,
    /// As approved.
    Unchanged,
    /// Changed since approved.
    Changed,
}

/// `remembered` in a case.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RememberedArg {
    /// None.
    #[default]
    None,
    /// For the session.
    Session,
    /// Always.
    Always,
}

/// `sandbox` in a case.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxArg {
    /// Enforced unless `best_effort`.
    #[default]
    Auto,
    /// Enforced.
    Enforced,
    /// Not enforced.
    None,
}

/// `wrap.trust` in a case.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TrustArg {
    /// Trusted.
    Trusted,
    /// Untrusted.
    #[default]
    Untrusted,
}

/// `wrap.profile` in a case.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProfileArg {
    /// ask-writes
    #[default]
    AskWrites,
    /// hide-writes
    HideWrites,
    /// ask-all
    AskAll,
}

fn default_server() -> String {
    "srv".to_owned()
}

// === impl Case ===

impl Case {
    /// Parses a case file's text.
    ///
    /// # Errors
    ///
    /// The TOML error, when the case is malformed.
    pub fn parse(text: &str) -> Result<Self, String> {
        let case: Self = toml::from_str(text).map_err(|err| err.to_string())?;
        if case.tool.is_some() == case.tool_fixture.is_some() {
            return Err("a case needs exactly one of `tool` and `tool_fixture`".to_owned());
        }
        Ok(case)
    }

    /// The tool definition as JSON; `fixture` reads a peers fixture file's text.
    ///
    /// # Errors
    ///
    /// When the JSON is malformed or the fixture has no such tool.
    pub fn tool_value(&self, fixture: &dyn Fn(&str) -> String) -> Result<Value, String> {
        if let Some(text) = &self.tool {
            return serde_json::from_str(text).map_err(|err| format!("tool: {err}"));
        }
        let reference = self.tool_fixture.as_deref().unwrap_or("");
        let (file, name) = reference
            .split_once('#')
            .ok_or_else(|| format!("tool_fixture `{reference}` is not FILE#TOOL"))?;
        let document: Value =
            serde_json::from_str(&fixture(file)).map_err(|err| format!("{file}: {err}"))?;
        document
            .get("tools")
            .and_then(Value::as_array)
            .and_then(|tools| {
                tools
                    .iter()
                    .find(|tool| tool.get("name") == Some(&Value::from(name)))
            })
            .cloned()
            .ok_or_else(|| format!("{file} has no tool `{name}`"))
    }

    /// The configuration the case decides by.
    ///
    /// # Errors
    ///
    /// The rendered diagnostics, when the case's config is invalid.
    pub fn config(&self) -> Result<ValidConfig, String> {
        match &self.config {
            Some(text) => {
                let (config, diagnostics) = config::parse_str(text);
                config.ok_or_else(|| {
                    diagnostics
                        .iter()
                        .map(|diagnostic| diagnostic.render("case", text))
                        .collect::<String>()
                })
            }
            None => Ok(ValidConfig::wrap(
                &self.server,
                Transport::Stdio {
                    command: "(command not given)".to_owned(),
                    args: Vec::new(),
                    env: Default::default(),
                },
                match self.wrap.trust {
                    TrustArg::Trusted => Trust::Trusted,
                    TrustArg::Untrusted => Trust::Untrusted,
                },
                match self.wrap.profile {
                    ProfileArg::AskWrites => Profile::AskWrites,
                    ProfileArg::HideWrites => Profile::HideWrites,
                    ProfileArg::AskAll => Profile::AskAll,
                },
                self.wrap.unattended,
            )),
        }
    }

    /// Runs the case through the library and returns the explanation as JSON.
    ///
    /// # Errors
    ///
    /// When the case's inputs are malformed.
    pub fn run_library(&self, fixture: &dyn Fn(&str) -> String) -> Result<Value, String> {
        let policy = Policy::new(self.config()?);
        let tool = self.tool_value(fixture)?;
        let arguments = self
            .arguments
            .as_deref()
            .map(serde_json::from_str::<Value>)
            .transpose()
            .map_err(|err| format!("arguments: {err}"))?;
        let pinned = self
            .pinned
            .as_deref()
            .map(Tool::from_json)
            .transpose()
            .map_err(|err| format!("pinned: {err}"))?;
        let sandbox = self.sandbox_proof(&policy);
        let reply = self.hook.as_deref().map(crate::hook::Reply::parse);
        let explanation = explain(
            &policy,
            &ExplainInput {
                server: &self.server,
                tool: &tool,
                arguments: arguments.as_ref(),
                pinned: pinned.as_ref(),
                pin: match self.pin {
                    PinArg::New => PinStatus::New,
                    PinArg::Unchanged => PinStatus::Unchanged,
                    PinArg::Changed => PinStatus::Changed,
                },
                session: SessionState {
                    tainted: self.tainted,
                    remembered: match self.remembered {
                        RememberedArg::None => Remembered::None,
                        RememberedArg::Session => Remembered::Session,
                        RememberedArg::Always => Remembered::Always,
                    },
                    scope: self.scope,
                },
                sandbox,
                hook: reply
                    .as_ref()
                    .map_or(crate::decide::HookAnswer::None, |reply| {
                        reply.answer.as_answer()
                    }),
            },
        );
        serde_json::to_value(&explanation).map_err(|err| err.to_string())
    }

    fn sandbox_proof(&self, policy: &Policy) -> SandboxProof {
        let Some(sandbox) = policy.server(&self.server).and_then(|s| s.sandbox.as_ref()) else {
            return SandboxProof::default();
        };
        sandbox.proof_when(match self.sandbox {
            SandboxArg::Auto => Enforcement::Auto,
            SandboxArg::Enforced => Enforcement::Enforced,
            SandboxArg::None => Enforcement::None,
        })
    }

    /// Compares an explanation (as JSON) with the expectation; every mismatch
    /// is listed.
    ///
    /// # Errors
    ///
    /// The list of mismatches.
    pub fn check(&self, got: &Value) -> Result<(), String> {
        let mut problems = Vec::new();
        let expect = &self.expect;
        let mut field = |name: &str, want: Value| {
            let found = got.get(name).cloned().unwrap_or(Value::Null);
            if found != want {
                problems.push(format!("{name}: expected {want}, got {found}"));
            }
        };
        field("verdict", Value::from(expect.verdict.clone()));
        field("reasons", Value::from(expect.reasons.clone()));
        if let Some(visible) = expect.visible {
            field("visible", Value::from(visible));
        }
        if let Some(remember) = &expect.remember {
            field("remember", Value::from(remember.clone()));
        }
        if let Some(retry) = expect.retry_eligible {
            field("retry_eligible", Value::from(retry));
        }
        if let Some(display_name) = &expect.display_name {
            field("display_name", Value::from(display_name.clone()));
        }
        if let Some(pin) = &expect.pin {
            field("pin", Value::from(pin.clone()));
        }
        field(
            "instance",
            expect.instance.clone().map_or(Value::Null, Value::from),
        );
        if let Some(effective) = &expect.effective {
            let found = got.get("effective").and_then(Value::as_object);
            for (hint, want) in effective {
                let value = found.and_then(|hints| hints.get(hint));
                if value != Some(want) {
                    problems.push(format!("effective.{hint}: expected {want}, got {value:?}"));
                }
            }
        }
        if let Some(fields) = &expect.changed_fields {
            let found: Vec<Value> = got
                .get("changes")
                .and_then(Value::as_array)
                .map(|changes| {
                    changes
                        .iter()
                        .filter_map(|c| c.get("field").cloned())
                        .collect()
                })
                .unwrap_or_default();
            let want: Vec<Value> = fields.iter().cloned().map(Value::from).collect();
            if found != want {
                problems.push(format!("changes: expected fields {want:?}, got {found:?}"));
            }
        }
        if let Some(note) = &expect.hook_note {
            let found: Vec<&str> = got
                .get("reason_details")
                .and_then(Value::as_array)
                .map(|details| {
                    details
                        .iter()
                        .filter_map(|detail| detail.get("note").and_then(Value::as_str))
                        .collect()
                })
                .unwrap_or_default();
            if found != [note.as_str()] {
                problems.push(format!("hook note: expected {note:?}, got {found:?}"));
            }
        }
        let caveats: Vec<&str> = got
            .get("caveats")
            .and_then(Value::as_array)
            .map(|caveats| caveats.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if expect.caveat_contains.is_empty() && !caveats.is_empty() {
            problems.push(format!("caveats: expected none, got {caveats:?}"));
        }
        for text in &expect.caveat_contains {
            if !caveats.iter().any(|caveat| caveat.contains(text.as_str())) {
                problems.push(format!(
                    "caveats: expected one to contain {text:?}, got {caveats:?}"
                ));
            }
        }
        let prompt = got.get("prompt").and_then(Value::as_str);
        for text in &expect.prompt_contains {
            if !prompt.is_some_and(|prompt| prompt.contains(text.as_str())) {
                problems.push(format!(
                    "prompt: expected it to contain {text:?}, got {prompt:?}"
                ));
            }
        }
        for text in &expect.prompt_excludes {
            if prompt.is_some_and(|prompt| prompt.contains(text.as_str())) {
                problems.push(format!("prompt: expected it not to contain {text:?}"));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("\n"))
        }
    }
}
