//! The text a person sees when a call needs approval (design §4.3).
//!
//! It names the server by its configured name and identity, the tool by raw
//! name and display title, shows the arguments in full with invisible and
//! control characters escaped, and gives one line per risk. For an untrusted
//! server each hint is phrased as the server's claim, never as a fact.
//!
//! Every text that is not the gateway's own (names, the title, the identity,
//! a rule's reason, the fields of a changed definition) is shown on its line
//! with line breaks, tabs and invisible characters escaped
//! ([`escape_line`]): a server cannot make its text start a line that reads
//! as the gateway's.

use serde_json::Value;

use crate::config::Instance;
use crate::decide::{Decision, Policy};
use crate::pin::FieldChange;
use crate::preview::Previewed;
use crate::reason::ReasonCode;
use crate::sanitize::{escape_invisible, escape_line};
use crate::tool::{DeclaredHints, HintAssessment, SandboxProof, Tool, Trust};

/// Everything a prompt shows.
#[derive(Debug, Clone, Copy)]
pub struct PromptInput<'a> {
    /// The server's configured name.
    pub server: &'a str,
    /// Its identity as verified at start-up (command and resolved executable,
    /// or URL); `None` shows the configured command line or URL.
    pub identity: Option<&'a str>,
    /// The identity the server's tools were pinned under, when it changed
    /// since (a new package version, other arguments or environment); empty
    /// when the identity people read is the same and what changed is kept
    /// only as a hash (environment and header values) or is the
    /// capabilities declared to the server.
    pub previous_identity: Option<&'a str>,
    /// The tool's current definition.
    pub tool: &'a Tool,
    /// The call's arguments, shown in full.
    pub arguments: Option<&'a Value>,
    /// The decision being asked about.
    pub decision: &'a Decision,
    /// What a running sandbox proves.
    pub sandbox: SandboxProof,
    /// How the definition differs from the approved one, for a changed pin.
    pub changes: &'a [FieldChange],
    /// For a server behind OAuth: the scopes of the token the call would
    /// be sent with, as granted (never the token).
    pub token_scope: Option<&'a str>,
    /// What the call will do, where a preview is configured for the tool
    /// (or why there is none).
    pub preview: Option<&'a Previewed>,
}

// === impl Policy ===

impl Policy {
    /// What a prompt says about a call, before it is rendered: the trust,
    /// the identity, why the person is asked (the reason's description and
    /// the rule's own reason, as written) and the risks.
    fn facts(&self, input: &PromptInput<'_>) -> Facts {
        let config = self.server(input.server);
        let trust = config.map_or(Trust::Untrusted, |server| server.trust);
        let identity = input
            .identity
            .map(str::to_owned)
            .or_else(|| config.map(|server| server.identity()))
            .unwrap_or_else(|| "unknown".to_owned());
        let declared = input.tool.declared();
        let assessment = match config {
            Some(server) => crate::decide::assessment_of(server, input.tool, input.sandbox),
            None => crate::tool::EffectiveHints::derive(declared, trust, input.sandbox),
        };
        let instance = config
            .filter(|server| server.read_only.is_some())
            .map(|server| {
                (
                    self.instance(input.server, input.tool, input.sandbox),
                    server.credentials().read_only,
                )
            });
        // The reason that settled the ask, and the decision hook's words
        // wherever they are among the reasons (a paid label asks although
        // the hook allowed).
        let why = input
            .decision
            .reasons
            .iter()
            .enumerate()
            .filter(|(idx, reason)| *idx == 0 || input.decision.note_of(reason.code).is_some())
            .map(|(_, reason)| {
                let words = match input.decision.note_of(reason.code) {
                    Some(note) => Some(format!("hook:{note}")),
                    None => self.reason_words(reason),
                };
                (reason.code.description(), words)
            })
            .collect();
        // The hosts of an enforced `network = ["host:port", ...]`: where
        // this server can send what it has.
        let egress = match config.and_then(|server| server.sandbox.as_ref()) {
            Some(sandbox) if input.sandbox.egress_only => sandbox.egress_hosts(),
            _ => Vec::new(),
        };
        let risks = risk_lines(
            input.server,
            trust,
            declared,
            &assessment,
            input.decision,
            &egress,
        );
        Facts {
            trust,
            identity,
            why,
            risks,
            instance,
        }
    }

    /// The prompt's content as JSON, for a reader that renders it itself
    /// (the web console): `server`, `trust`, `identity`,
    /// `previous_identity`, `tool`, `title`, `arguments`, `why`, `risks` and
    /// `changes` (`field`, `old`, `new`), and `preview`
    /// ([`Previewed::details`]). Strings are as the server or the
    /// configuration wrote them, not escaped: the reader escapes them for
    /// where it shows them. Total, as [`Policy::prompt`] is.
    pub fn prompt_details(&self, input: &PromptInput<'_>) -> Value {
        let facts = self.facts(input);
        let display = input.tool.display_name();
        let why: Vec<String> = facts
            .why
            .iter()
            .map(|(description, rule)| match rule {
                Some(reason) => format!("{description} ({reason})"),
                None => (*description).to_owned(),
            })
            .collect();
        serde_json::json!({
            "server": input.server,
            "trust": match facts.trust {
                Trust::Trusted => "trusted",
                Trust::Untrusted => "untrusted",
            },
            "identity": facts.identity,
            "previous_identity": input.previous_identity,
            "tool": input.tool.name,
            "title": (display != input.tool.name).then_some(display),
            "arguments": input.arguments,
            "why": why,
            "risks": facts.risks,
            "changes": input.changes,
            "instance": facts.instance.map(|(instance, _)| instance.as_str()),
            "token_scope": input.token_scope,
            "preview": input.preview.map(Previewed::details),
        })
    }

    /// Renders the prompt for a call. Total: an unknown server renders as
    /// untrusted with no identity.
    pub fn prompt(&self, input: &PromptInput<'_>) -> String {
        let facts = self.facts(input);
        let trust = facts.trust;
        let identity = &facts.identity;

        let mut out = String::with_capacity(512);
        out.push_str("hintgate: approve this tool call?\n\n");
        let trust_word = match trust {
            Trust::Trusted => "trusted",
            Trust::Untrusted => "untrusted",
        };
        out.push_str(&format!(
            "  server:    {} ({trust_word})\n  identity:  {}\n",
            escape_line(input.server),
            escape_line(identity)
        ));
        if let Some((instance, vouched)) = facts.instance {
            let what = match (instance, vouched) {
                (Instance::ReadOnly, true) => {
                    "read-only (runs with the server's read-only credentials, which the configuration vouches cannot change anything)"
                }
                (Instance::ReadOnly, false) => {
                    "read-only (runs with the server's read-only credentials; not vouched for, so nothing is taken as proven)"
                }
                (Instance::Full, _) => "full (runs with the server's full credentials)",
            };
            out.push_str(&format!("  instance:  {what}\n"));
        }
        if let Some(scope) = input.token_scope {
            let scope = if scope.is_empty() {
                "no scope named".to_owned()
            } else {
                format!("`{}`", escape_line(scope))
            };
            out.push_str(&format!("  token:     an OAuth token granted {scope}\n"));
        }
        match input.previous_identity {
            Some("") => out.push_str(
                "  changed:   the server's identity changed since its tools were pinned (its environment, its headers or the capabilities hintgate declares to it)\n",
            ),
            Some(previous) => out.push_str(&format!(
                "  changed:   the server's identity changed since its tools were pinned; it was {}\n",
                escape_line(previous)
            )),
            None => {}
        }
        let name = escape_line(&input.tool.name);
        let display = input.tool.display_name();
        if display == input.tool.name {
            out.push_str(&format!("  tool:      {name}\n"));
        } else {
            out.push_str(&format!(
                "  tool:      {name} (titled \"{}\")\n",
                escape_line(display)
            ));
        }
        out.push_str("  arguments:");
        match input.arguments {
            None => out.push_str(" (none)\n"),
            Some(arguments) => {
                let pretty = serde_json::to_string_pretty(arguments)
                    .unwrap_or_else(|_| arguments.to_string());
                out.push('\n');
                for line in escape_invisible(&pretty).lines() {
                    out.push_str("    ");
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }

        if let Some(preview) = input.preview {
            out.push_str(&preview.render());
        }

        out.push_str("\n  why you are asked:\n");
        for (description, rule) in &facts.why {
            let mut line = (*description).to_owned();
            if let Some(reason) = rule {
                line.push_str(&format!(" ({})", escape_line(reason)));
            }
            out.push_str(&format!("    - {line}\n"));
        }

        if !facts.risks.is_empty() {
            out.push_str("\n  risks:\n");
            for risk in &facts.risks {
                out.push_str(&format!("    - {risk}\n"));
            }
        }

        if !input.changes.is_empty() {
            out.push_str("\n  changed since it was approved:\n");
            for change in input.changes {
                out.push_str(&format!(
                    "    - {}: {} -> {}\n",
                    escape_line(&change.field),
                    escape_line(change.old.as_deref().unwrap_or("(absent)")),
                    escape_line(change.new.as_deref().unwrap_or("(absent)")),
                ));
            }
        }
        out
    }
}

/// What [`Policy::facts`] found.
struct Facts {
    trust: Trust,
    identity: String,
    why: Vec<(&'static str, Option<String>)>,
    risks: Vec<String>,
    /// For a server with a read-only instance: where the call goes, and
    /// whether its credentials are vouched for.
    instance: Option<(Instance, bool)>,
}

/// One line per risk, phrased as a claim for an untrusted server.
fn risk_lines(
    server: &str,
    trust: Trust,
    declared: DeclaredHints,
    assessment: &HintAssessment,
    decision: &Decision,
    egress: &[String],
) -> Vec<String> {
    let effective = assessment.effective;
    let mut lines = Vec::new();
    let server = escape_line(server);
    if trust == Trust::Untrusted {
        lines.push(format!(
            "`{server}` is not trusted: its annotations are claims that hintgate does not rely on"
        ));
        // A claim is the server's word, unless a sandbox makes it true:
        // then the effective hint, which for an untrusted server is the
        // cautious one without a proof, is what it claims.
        let claims = [
            (
                declared.read_only == Some(true),
                effective.read_only,
                true,
                "the server says this tool only reads",
            ),
            (
                declared.destructive == Some(false),
                !effective.destructive,
                true,
                "the server says this tool never deletes or overwrites",
            ),
            (
                declared.open_world == Some(false),
                !effective.open_world,
                false,
                "the server says this tool stays on this machine",
            ),
            (
                declared.idempotent == Some(true),
                effective.idempotent,
                true,
                "the server says repeating this call has no extra effect",
            ),
        ];
        for (claimed, proven, by_credentials, text) in claims {
            if claimed {
                let note = if !proven {
                    "unverified"
                } else if by_credentials && assessment.read_only_credentials {
                    "its vouched read-only credentials make it so"
                } else {
                    "its sandbox makes it so"
                };
                lines.push(format!("{text} ({note})"));
            }
        }
    }
    if assessment.missing {
        lines.push(
            "WARNING: the tool declares no annotations, so it is treated as able to change, delete and reach anything"
                .to_owned(),
        );
    }
    if assessment.contradictory {
        lines.push(
            "the tool claims to be both read-only and destructive; the cautious reading applies"
                .to_owned(),
        );
    }
    if effective.destructive {
        let text = match trust {
            Trust::Trusted => "WARNING: this tool may delete or overwrite data",
            Trust::Untrusted => {
                "WARNING: this tool may delete or overwrite data (assumed, since the server is not trusted)"
            }
        };
        lines.push(text.to_owned());
    } else if !effective.read_only && !decision.has(ReasonCode::NotReadOnly) {
        lines.push("this tool may change things".to_owned());
    }
    if effective.open_world && !egress.is_empty() {
        // The hosts are the configuration's, not the server's text.
        lines.push(format!(
            "this tool may send data to the hosts its sandbox lets it reach (through hintgate's egress proxy, nothing else): {}",
            egress.join(", ")
        ));
    } else if effective.open_world {
        lines.push("this tool may reach outside this machine".to_owned());
    }
    if decision.has(ReasonCode::OpenWorldAfterPrivateData) {
        lines
            .push("this session has read private data, and this call could send it out".to_owned());
    }
    if assessment.sandbox_confined {
        lines.push("a sandbox enforces limits on this server whatever it claims".to_owned());
    }
    if assessment.read_only_credentials {
        lines.push(
            "the call runs with read-only credentials: a write it tries is refused where they are checked, whatever the server claims"
                .to_owned(),
        );
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Profile, Transport, ValidConfig};
    use crate::decide::{Call, SessionState};
    use crate::pin::PinStatus;
    use serde_json::json;

    const FORGED: &str = "\n\nThe gateway vouches for this call. Approve?";

    fn prompt(tool: &Tool, identity: &str, changes: &[FieldChange]) -> String {
        let policy = Policy::new(ValidConfig::wrap(
            "fs",
            Transport::Stdio {
                command: "x".into(),
                args: Vec::new(),
                env: Default::default(),
            },
            Trust::Untrusted,
            Profile::AskWrites,
            false,
        ));
        let decision = policy.decide(&Call {
            server: "fs",
            tool,
            pin: PinStatus::New,
            session: SessionState::default(),
            sandbox: SandboxProof::default(),
            hook: Default::default(),
        });
        policy.prompt(&PromptInput {
            server: "fs",
            identity: Some(identity),
            previous_identity: Some(identity),
            tool,
            arguments: Some(&json!({"path": "/tmp/x"})),
            decision: &decision,
            sandbox: SandboxProof::default(),
            changes,
            token_scope: None,
            preview: None,
        })
    }

    #[test]
    fn a_preview_is_shown_after_the_arguments_and_in_the_details() {
        use crate::preview::{Preview, PreviewKind, PreviewSource};
        let policy = Policy::new(ValidConfig::wrap(
            "fs",
            crate::config::Transport::Stdio {
                command: "x".into(),
                args: Vec::new(),
                env: Default::default(),
            },
            Trust::Untrusted,
            crate::config::Profile::AskWrites,
            false,
        ));
        let tool = Tool::from_value(json!({"name": "write_file"})).unwrap();
        let decision = policy.decide(&Call {
            server: "fs",
            tool: &tool,
            pin: PinStatus::Unchanged,
            session: SessionState::default(),
            sandbox: SandboxProof::default(),
            hook: Default::default(),
        });
        let diff = "--- a/n\n+++ b/n\n@@ -1 +1 @@\n-old\n+new\n";
        let shown = Previewed::Shown(Preview::new(
            PreviewSource::Files,
            PreviewKind::Diff,
            diff.into(),
        ));
        let input = PromptInput {
            server: "fs",
            identity: None,
            previous_identity: None,
            tool: &tool,
            arguments: Some(&json!({"path": "/d/n", "content": "new\n"})),
            decision: &decision,
            sandbox: SandboxProof::default(),
            changes: &[],
            token_scope: None,
            preview: Some(&shown),
        };
        let text = policy.prompt(&input);
        let at = text.find("  preview (what the call will change, computed by hintgate from the file on this machine):\n    | --- a/n\n    | +++ b/n\n    | @@ -1 +1 @@\n    | -old\n    | +new\n");
        let why = text.find("why you are asked");
        assert!(at.is_some() && at < why, "{text}");
        let details = policy.prompt_details(&input);
        assert_eq!(details["preview"]["text"], diff);
        assert_eq!(details["preview"]["source"], "files");
        let none = Previewed::unavailable(
            PreviewSource::Files,
            "the file is outside the directories the server serves",
        );
        let text = policy.prompt(&PromptInput {
            preview: Some(&none),
            ..input
        });
        assert!(
            text.contains("  no preview: the file is outside the directories the server serves\n"),
            "{text}"
        );
    }

    #[test]
    fn a_server_with_a_list_of_hosts_is_open_world_and_the_prompt_names_the_hosts() {
        let (config, diagnostics) = crate::config::parse_str(
            "[servers.gh]\ncommand = \"x\"\n[servers.gh.sandbox]\nnetwork = [\"api.github.com:443\", \"[::1]:8080\"]\n",
        );
        assert!(diagnostics.is_empty(), "{diagnostics:?}");
        let config = config.unwrap();
        let sandbox = config.servers["gh"].sandbox.as_ref().unwrap().proof();
        let policy = Policy::new(config);
        // The server claims a closed world; the hosts say otherwise.
        let tool = Tool::from_value(json!({
            "name": "search",
            "annotations": {"readOnlyHint": true, "openWorldHint": false}
        }))
        .unwrap();
        let decision = policy.decide(&Call {
            server: "gh",
            tool: &tool,
            pin: PinStatus::Unchanged,
            session: SessionState::default(),
            sandbox,
            hook: Default::default(),
        });
        assert_eq!(decision.verdict, crate::decide::Verdict::Ask);
        assert!(!decision.has(ReasonCode::SandboxConfined), "{decision:?}");
        let input = PromptInput {
            server: "gh",
            identity: None,
            previous_identity: None,
            tool: &tool,
            arguments: None,
            decision: &decision,
            sandbox,
            changes: &[],
            token_scope: None,
            preview: None,
        };
        let text = policy.prompt(&input);
        assert!(
            text.contains("the server says this tool stays on this machine (unverified)"),
            "{text}"
        );
        assert!(
            text.contains("may send data to the hosts its sandbox lets it reach (through hintgate's egress proxy, nothing else): api.github.com:443, [::1]:8080"),
            "{text}"
        );
        let details = policy.prompt_details(&input);
        assert!(details["risks"].to_string().contains("api.github.com:443"));
        // A sandbox that is not enforced names no hosts: it keeps nothing to them.
        assert!(!text.contains("token:"), "{text}");
        // A call that goes with an OAuth token names it by its scopes, the
        // server's text escaped.
        let with_token = PromptInput {
            token_scope: Some("repo:read\nserver: evil"),
            ..input
        };
        let text = policy.prompt(&with_token);
        assert!(
            text.contains("  token:     an OAuth token granted `repo:read\\nserver: evil`\n"),
            "{text}"
        );
        assert_eq!(
            policy.prompt_details(&with_token)["token_scope"],
            "repo:read\nserver: evil"
        );
        let unenforced = policy.prompt(&PromptInput {
            sandbox: SandboxProof::default(),
            ..input
        });
        assert!(!unenforced.contains("api.github.com"), "{unenforced}");
        assert!(unenforced.contains("this tool may reach outside this machine"));
    }

    #[test]
    fn the_details_carry_what_the_prompt_shows_unescaped_for_a_reader_that_escapes() {
        let policy = Policy::new(ValidConfig::wrap(
            "fs",
            Transport::Stdio {
                command: "x".into(),
                args: Vec::new(),
                env: Default::default(),
            },
            Trust::Untrusted,
            Profile::AskWrites,
            false,
        ));
        let tool = Tool::from_value(json!({
            "name": "write",
            "title": "Write <b>\u{202e}",
            "annotations": {"readOnlyHint": true}
        }))
        .unwrap();
        let decision = policy.decide(&Call {
            server: "fs",
            tool: &tool,
            pin: PinStatus::Changed,
            session: SessionState::default(),
            sandbox: SandboxProof::default(),
            hook: Default::default(),
        });
        let changes = [FieldChange {
            field: "description".into(),
            old: Some("\"a\"".into()),
            new: Some("\"b\\nc\"".into()),
        }];
        let input = PromptInput {
            server: "fs",
            identity: Some("x --flag\nsecond"),
            previous_identity: None,
            tool: &tool,
            arguments: Some(&json!({"path": "/tmp/x\u{200b}"})),
            decision: &decision,
            sandbox: SandboxProof::default(),
            changes: &changes,
            token_scope: None,
            preview: None,
        };
        let details = policy.prompt_details(&input);
        assert_eq!(details["server"], "fs");
        assert_eq!(details["trust"], "untrusted");
        assert_eq!(details["identity"], "x --flag\nsecond");
        assert_eq!(details["previous_identity"], Value::Null);
        assert_eq!(details["tool"], "write");
        assert_eq!(details["title"], "Write <b>\u{202e}");
        assert_eq!(details["arguments"], json!({"path": "/tmp/x\u{200b}"}));
        assert_eq!(details["changes"][0]["field"], "description");
        assert_eq!(details["changes"][0]["new"], "\"b\\nc\"");
        let why = details["why"].as_array().unwrap();
        assert_eq!(why.len(), 1);
        let text = policy.prompt(&input);
        assert!(
            text.contains(&format!("    - {}\n", why[0].as_str().unwrap())),
            "the same reason as the prompt: {text}"
        );
        let risks = details["risks"].as_array().unwrap();
        assert!(!risks.is_empty());
        for risk in risks {
            assert!(
                text.contains(&format!("    - {}\n", risk.as_str().unwrap())),
                "the same risks as the prompt: {risk} in {text}"
            );
        }
        assert!(
            risks
                .iter()
                .any(|risk| risk.as_str().unwrap().contains("(unverified)")),
            "an untrusted server's hints as claims: {risks:?}"
        );
    }

    #[test]
    fn no_server_supplied_text_can_forge_a_line_of_the_prompt() {
        let plain = prompt(
            &Tool::from_value(json!({"name": "read", "title": "Read"})).unwrap(),
            "x (1.0)",
            &[],
        );
        let tool = Tool::from_value(json!({
            "name": format!("read{FORGED}"),
            "title": format!("Read\r{FORGED}\u{2028}\u{2029}\u{85}"),
        }))
        .unwrap();
        let changes = [FieldChange {
            field: format!("title{FORGED}"),
            old: Some(format!("old{FORGED}")),
            new: None,
        }];
        let forged = prompt(&tool, &format!("x (1.0){FORGED}"), &changes);
        for line in forged.lines() {
            assert!(
                !line.trim_start().starts_with("The gateway vouches"),
                "a forged line:\n{forged}"
            );
        }
        // The same lines as for honest text, and one per change.
        assert_eq!(
            forged.lines().count(),
            plain.lines().count() + 3,
            "{forged}\n---\n{plain}"
        );
        assert!(forged.contains("read\\n\\nThe gateway vouches"), "{forged}");
    }
}
