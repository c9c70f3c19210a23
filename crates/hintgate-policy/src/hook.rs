//! The decision hook's protocol: what the user's program is told about a
//! call, and how its answer is read (design §4.2 step 3).
//!
//! The gateway (and `hintgate explain`) runs the program; this module only
//! writes the question and reads the answer, so both read it one way. The
//! JSON Schemas of both are in `docs/hook-request.schema.json` and
//! `docs/hook-answer.schema.json`.
//!
//! A question is one JSON object on one line:
//!
//! ```json
//! {"version":1,"id":"7","server":{"name":"fs","identity":"npx …","trust":"untrusted"},
//!  "tool":{"name":"write_file","title":"Write file","declared":{…},"effective":{…}},
//!  "arguments":{…},"session":{"tainted":false,"scope":"write","host":null},
//!  "pin":"unchanged","hintgate":{"verdict":"ask","reasons":["not-read-only",…]}}
//! ```
//!
//! For a server with a read-only instance (`[servers.NAME.read_only]`) it
//! also says which instance the call would be sent to, `"instance"`:
//! `"read-only"` or `"full"`, as the call's audit record names it.
//!
//! An answer is one JSON object on one line, `{"id":"7","verdict":"allow",
//! "reason":"…"}`, with `verdict` one of `allow`, `ask`, `deny` and
//! `abstain`. Anything else (a line that is not such an object, another
//! verdict, a key twice, an unknown key, a missing reason) is a failure,
//! and a failed hook denies.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::decide::{Call, Decision, HookAnswer, Policy, Scope, Verdict};
use crate::sanitize::escape_line;
use crate::tool::{EffectiveHints, Trust};

/// The version of the question's shape, sent as `version`.
pub const PROTOCOL_VERSION: u64 = 1;

/// The longest reason of a hook's that is kept, in characters; a longer
/// one is cut there and ends in `…`.
pub const MAX_REASON_CHARS: usize = 300;

/// The longest answer line read from a hook, in bytes; a longer line is a
/// failure (the hook is not answering).
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// What a question to the hook is made of, besides the call itself.
#[derive(Debug, Clone, Copy)]
pub struct Question<'a> {
    /// The question's id, which the answer must repeat (a persistent hook
    /// has several calls in flight).
    pub id: &'a str,
    /// The call, as the policy decides it.
    pub call: &'a Call<'a>,
    /// The server's verified identity (its command line and what it
    /// resolved to, or its URL).
    pub identity: &'a str,
    /// The call's arguments, in full.
    pub arguments: Option<&'a Value>,
    /// Who the host is, as its transport authenticated it (an HTTP host's
    /// token name), when known.
    pub host: Option<&'a str>,
    /// What the built-in steps decide without the hook.
    pub so_far: &'a Decision,
}

/// A hook's answer, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The id it answers, as a string (`None` when the answer gave none).
    pub id: Option<String>,
    /// What it says.
    pub answer: OwnedAnswer,
}

/// A hook's answer, owned: what [`HookAnswer`] borrows from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum OwnedAnswer {
    /// Allow, ask or deny, for this reason (one line, escaped, bounded).
    Decided(Verdict, String),
    /// Left to the built-in steps.
    Abstain,
    /// The hook failed: what went wrong.
    Failed(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    id: Option<Value>,
    verdict: String,
    #[serde(default)]
    reason: Option<String>,
}

// === impl Policy ===

impl Policy {
    /// The question for the decision hook, as one line of JSON (no line
    /// break inside: every string is JSON-escaped). For a server with a
    /// read-only instance it names the instance the call would go to
    /// ([`Policy::instance`]); for any other server it has no `instance`.
    pub fn hook_question(&self, question: &Question<'_>) -> String {
        let call = question.call;
        let trust = self
            .server(call.server)
            .map_or(Trust::Untrusted, |server| server.trust);
        let declared = call.tool.declared();
        let effective = self
            .assess(call.server, call.tool, call.sandbox)
            .map_or(EffectiveHints::CAUTIOUS, |assessment| assessment.effective);
        let display = call.tool.display_name();
        // Only a server with a read-only instance has a choice of instance,
        // named as its audit records name it.
        let instance = self
            .server(call.server)
            .filter(|server| server.read_only.is_some())
            .map(|_| self.instance(call.server, call.tool, call.sandbox).as_str());
        let mut body = json!({
            "version": PROTOCOL_VERSION,
            "id": question.id,
            "server": {
                "name": call.server,
                "identity": question.identity,
                "trust": trust,
            },
            "tool": {
                "name": call.tool.name,
                "title": (display != call.tool.name).then_some(display),
                "declared": declared,
                "effective": effective,
            },
            "arguments": question.arguments,
            "session": {
                "tainted": call.session.tainted,
                "scope": match call.session.scope {
                    Scope::Write => "write",
                    Scope::Read => "read",
                },
                "host": question.host,
            },
            "pin": call.pin,
            "hintgate": {
                "verdict": question.so_far.verdict,
                "reasons": question.so_far.reason_texts().collect::<Vec<_>>(),
            },
        });
        if let (Some(instance), Some(object)) = (instance, body.as_object_mut()) {
            object.insert("instance".to_owned(), Value::from(instance));
        }
        body.to_string()
    }
}

// === impl Reply ===

impl Reply {
    /// Reads one answer line. Never fails: what is not an answer is an
    /// [`OwnedAnswer::Failed`] that says why (with the id, when one could
    /// be read, so a persistent hook's other calls are not blamed).
    pub fn parse(line: &str) -> Self {
        if line.len() > MAX_ANSWER_BYTES {
            return Self::failed(
                None,
                format!("the decision hook answered a line over {MAX_ANSWER_BYTES} bytes"),
            );
        }
        let raw: Raw = match serde_json::from_str(line) {
            Ok(raw) => raw,
            Err(err) => {
                let id = serde_json::from_str::<Value>(line)
                    .ok()
                    .and_then(|value| value.get("id").and_then(id_text));
                return Self::failed(
                    id,
                    format!("the decision hook's answer is not one it may give: {err}"),
                );
            }
        };
        let id = match &raw.id {
            None | Some(Value::Null) => None,
            Some(value) => match id_text(value) {
                Some(id) => Some(id),
                None => {
                    return Self::failed(
                        None,
                        "the decision hook answered with an id that is not a string or an integer"
                            .to_owned(),
                    );
                }
            },
        };
        let verdict = match raw.verdict.as_str() {
            "allow" => Some(Verdict::Allow),
            "ask" => Some(Verdict::Ask),
            "deny" => Some(Verdict::Deny),
            "abstain" => None,
            other => {
                return Self::failed(
                    id,
                    format!(
                        "the decision hook answered the verdict `{}`, which is none of `allow`, `ask`, `deny` and `abstain`",
                        clip(other)
                    ),
                );
            }
        };
        let Some(verdict) = verdict else {
            return Self {
                id,
                answer: OwnedAnswer::Abstain,
            };
        };
        let reason = raw.reason.as_deref().map(str::trim).unwrap_or_default();
        if reason.is_empty() {
            return Self::failed(
                id,
                "the decision hook decided without a `reason`".to_owned(),
            );
        }
        Self {
            id,
            answer: OwnedAnswer::Decided(verdict, clip(reason)),
        }
    }

    fn failed(id: Option<String>, why: String) -> Self {
        Self {
            id,
            answer: OwnedAnswer::Failed(why),
        }
    }
}

// === impl OwnedAnswer ===

impl OwnedAnswer {
    /// The answer as the policy takes it.
    pub fn as_answer(&self) -> HookAnswer<'_> {
        match self {
            Self::Decided(verdict, reason) => HookAnswer::Decided {
                verdict: *verdict,
                reason,
            },
            Self::Abstain => HookAnswer::Abstain,
            Self::Failed(why) => HookAnswer::Failed(why),
        }
    }
}

/// An id as text: a string as it is, an integer in decimal.
fn id_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) if number.is_u64() || number.is_i64() => Some(number.to_string()),
        _ => None,
    }
}

/// A hook's words on one line, everything that would break or hide it
/// escaped, at most [`MAX_REASON_CHARS`] characters.
fn clip(text: &str) -> String {
    let escaped = escape_line(text);
    if escaped.chars().count() <= MAX_REASON_CHARS {
        return escaped;
    }
    let mut cut: String = escaped.chars().take(MAX_REASON_CHARS).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::SessionState;
    use crate::pin::PinStatus;
    use crate::tool::{SandboxProof, Tool};

    /// The question about a call of `tool` on the server `db` of `config`,
    /// parsed.
    fn question_about(config: &str, tool: Value) -> Value {
        let (config, diagnostics) = crate::config::parse_str(config);
        let policy = Policy::new(config.unwrap_or_else(|| panic!("{diagnostics:?}")));
        let tool = Tool::from_value(tool).unwrap();
        let call = Call {
            server: "db",
            tool: &tool,
            pin: PinStatus::New,
            session: SessionState::default(),
            sandbox: SandboxProof::default(),
            hook: HookAnswer::None,
        };
        let so_far = policy.decide(&call);
        let line = policy.hook_question(&Question {
            id: "1",
            call: &call,
            identity: "pg",
            arguments: None,
            host: None,
            so_far: &so_far,
        });
        serde_json::from_str(&line).unwrap()
    }

    #[test]
    fn the_question_names_the_instance_only_for_a_server_with_a_read_only_one() {
        let read = json!({"name": "count", "annotations": {"readOnlyHint": true}});
        let write = json!({"name": "run_sql", "annotations": {"readOnlyHint": false}});
        let plain = "[servers.db]\ncommand = \"pg\"\n";
        for vouch in [true, false] {
            let config = format!(
                "{plain}[servers.db.read_only]\nargs = [\"--reader\"]\nvouch = {vouch}\n[servers.db.sandbox]\nnetwork = true\n"
            );
            let question = question_about(&config, read.clone());
            assert_eq!(question["instance"], "read-only", "{question}");
            let question = question_about(&config, write.clone());
            assert_eq!(question["instance"], "full", "{question}");
        }
        let question = question_about(plain, read);
        assert!(question.get("instance").is_none(), "{question}");
    }

    #[test]
    fn each_verdict_is_read_with_its_reason_and_id() {
        let reply = Reply::parse(r#"{"id":"7","verdict":"allow","reason":"reads only"}"#);
        assert_eq!(reply.id.as_deref(), Some("7"));
        assert_eq!(
            reply.answer,
            OwnedAnswer::Decided(Verdict::Allow, "reads only".to_owned())
        );
        let reply = Reply::parse(r#"{"id":8,"verdict":"deny","reason":"no"}"#);
        assert_eq!(reply.id.as_deref(), Some("8"));
        assert_eq!(
            reply.answer,
            OwnedAnswer::Decided(Verdict::Deny, "no".to_owned())
        );
        let reply = Reply::parse(r#"{"verdict":"abstain"}"#);
        assert_eq!(reply.answer, OwnedAnswer::Abstain);
        assert_eq!(reply.id, None);
    }

    #[test]
    fn anything_but_an_answer_fails_and_keeps_the_id_it_could_read() {
        for line in [
            "",
            "yes",
            "[]",
            r#"{"verdict":"maybe","reason":"x"}"#,
            r#"{"verdict":"allow"}"#,
            r#"{"verdict":"allow","reason":"  "}"#,
            r#"{"verdict":"allow","reason":"x","extra":1}"#,
            r#"{"verdict":"deny","verdict":"allow","reason":"x"}"#,
            r#"{"verdict":true,"reason":"x"}"#,
            r#"{"id":[1],"verdict":"allow","reason":"x"}"#,
        ] {
            let reply = Reply::parse(line);
            assert!(
                matches!(reply.answer, OwnedAnswer::Failed(_)),
                "{line}: {reply:?}"
            );
        }
        let reply = Reply::parse(r#"{"id":"3","verdict":"perhaps","reason":"x"}"#);
        assert_eq!(reply.id.as_deref(), Some("3"));
        let reply = Reply::parse(r#"{"id":"4","verdict":"allow","extra":true,"reason":"x"}"#);
        assert_eq!(reply.id.as_deref(), Some("4"));
    }

    #[test]
    fn a_reason_is_one_bounded_line() {
        let long = "x".repeat(1000);
        let reply = Reply::parse(&format!(
            r#"{{"verdict":"ask","reason":"line one\nhintgate: approve this tool call?\u202e{long}"}}"#
        ));
        let OwnedAnswer::Decided(_, reason) = reply.answer else {
            panic!("not decided");
        };
        assert!(!reason.contains('\n'));
        assert!(!reason.contains('\u{202e}'));
        assert_eq!(reason.chars().count(), MAX_REASON_CHARS + 1);
        assert!(reason.ends_with('…'));
    }

    #[test]
    fn a_line_over_the_limit_fails_without_being_parsed() {
        let line = format!(
            r#"{{"verdict":"allow","reason":"{}"}}"#,
            "y".repeat(MAX_ANSWER_BYTES)
        );
        assert!(matches!(Reply::parse(&line).answer, OwnedAnswer::Failed(_)));
    }
}
