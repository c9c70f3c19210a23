//! Edit, then approve (design §4.3): a person answering a queued call may
//! change its arguments (`hintgate approvals approve ID --arguments FILE`,
//! the web console).
//!
//! An edit is never an approval of what the person has not seen. The
//! answer that carries it ([`Answer::arguments`], canonical JSON under the
//! answer's seal) sends the call through the pipeline again, from the top,
//! as a call of the edited arguments:
//!
//! - read one way only ([`hintgate_store::edit::read_stored`]: one object,
//!   canonical, no repeated key, no integer beyond 64 bits, no `_meta`) and
//!   checked against the input schema of the definition decided on; the
//!   call's idempotency key stays the call's (an edit that leaves it out
//!   gets it back; one that changes it is refused). An edit that cannot be
//!   used changes nothing: the call is asked about again as it was, the
//!   prompt saying why;
//! - decided again (a deny ends it, recorded with both versions; the
//!   decision hook is asked about the edited arguments), checked again
//!   (step 4), and previewed again;
//! - asked about again, in the approval queue, with the edited arguments
//!   and their preview: the approval that lets it run is given on a prompt
//!   that shows the edited call, and binds it as any approval does (the
//!   definition's digest and the preview's, a file preview computed again
//!   before the send). Only a decision that allows the edited call outright
//!   lets it run without that second answer, as it would for a host.
//!
//! The edited arguments live in the gateway's own copy of the call (the
//! host's line is never read for them again): what is decided, shown,
//! recorded and sent is the edited canonical text, byte for byte, and no
//! host or server can change it. The audit record keeps both versions
//! (`edit` holds the host's arguments, redacted as `arguments` are), and
//! the host's result says, in a text block and under `_meta`
//! (`hintgate/edited`), that a person edited the call and how.
//!
//! [`Answer::arguments`]: hintgate_store::Answer::arguments

use hintgate_policy::pin::canonical_json;
use hintgate_policy::sanitize::escape_line;
use serde_json::{Map, Value, json};
use sha2::{Digest as _, Sha256};

use super::ask::Desk;
use super::call::{CallContext, Edit};
use super::lookup::Lookup;

/// The `_meta` key of a result that says the call was edited.
pub(crate) const EDITED_META: &str = "hintgate/edited";

// === impl Desk ===

impl Desk<'_> {
    /// A person approved queued call `#entry` with edited arguments `text`
    /// (as stored): the edited call goes through the pipeline again, or,
    /// when the edit cannot be used, the call is asked about again as it
    /// was.
    pub(super) fn apply_edit(
        &mut self,
        mut cx: Box<CallContext>,
        entry: u64,
        by: &str,
        text: &str,
    ) {
        let server = cx
            .server()
            .map_or("", |idx| self.upstreams.name(idx))
            .to_owned();
        let arguments = match self.lookup().edited_arguments(&cx, text) {
            Ok(arguments) => arguments,
            Err(why) => {
                tracing::warn!(server.id = %server, tool.name = %cx.tool(), "the edit of #{entry} by {by} was not used: {why}");
                cx.edit_refused = Some(format!(
                    "the edit of #{entry} by {by} could not be used ({why}); below is the call as the host asked it."
                ));
                self.ask(cx);
                return;
            }
        };
        tracing::info!(server.id = %server, tool.name = %cx.tool(), "edited in the approval queue by {by} (#{entry}): decided, checked and asked about again");
        let canonical = canonical_json(&Value::Object(arguments.clone()));
        // The host's arguments, kept for the record through further edits.
        let original = match cx.edit.take() {
            Some(earlier) => earlier.original,
            None => cx.arguments.clone(),
        };
        if let Some(idem) = cx.idem.as_mut() {
            idem.digest = hex::encode(Sha256::digest(canonical.as_bytes()));
        }
        cx.arguments = Some(Value::Object(arguments));
        cx.arguments_filled = Some(canonical);
        cx.edit = Some(Box::new(Edit {
            by: by.to_owned(),
            original,
            entry,
        }));
        cx.edit_refused = None;
        // Everything decided on the host's arguments is decided again.
        cx.decision = None;
        cx.hook = None;
        cx.hook_asks = 0;
        cx.withdraw_consent();
        cx.preview = None;
        cx.preview_changed = false;
        self.again(cx);
    }
}

// === impl Lookup ===

impl Lookup<'_> {
    /// The edited arguments, read one way only, fitting the input schema
    /// of the definition decided on, with the call's idempotency key.
    fn edited_arguments(&self, cx: &CallContext, text: &str) -> Result<Map<String, Value>, String> {
        let edited = hintgate_store::edit::read_stored(text).map_err(|err| err.to_string())?;
        let mut arguments = edited.arguments;
        let idx = cx.server().ok_or("the call has no server")?;
        if let Some(idem) = &cx.idem
            && let Some(property) = self
                .policy
                .server(self.upstreams.name(idx))
                .and_then(|server| server.idempotency_key.clone())
        {
            match arguments.get(&property) {
                None => {
                    arguments.insert(property, Value::String(idem.key.clone()));
                }
                Some(Value::String(key)) if *key == idem.key => {}
                Some(_) => {
                    return Err(format!(
                        "it changes the call's idempotency key `{}`, which stays the call's",
                        escape_line(&property)
                    ));
                }
            }
        }
        let entry = self
            .catalog
            .tool(idx, cx.tool())
            .ok_or("the tool is gone")?;
        if entry.digest.is_none() || entry.digest != cx.digest() {
            return Err("the server changed the tool's definition since".to_owned());
        }
        if let Some(validator) = entry.input_validator() {
            let value = Value::Object(arguments);
            if !validator.is_valid(&value) {
                // Where, not what: the reason reaches the queue's prompt,
                // which keeps no value a person typed (the command line and
                // the console say what is wrong before an edit is given).
                let places: Vec<String> = validator
                    .iter_errors(&value)
                    .take(5)
                    .map(|err| {
                        let place = err.instance_path().to_string();
                        let place = if place.is_empty() {
                            "/".to_owned()
                        } else {
                            place
                        };
                        format!("`{}`", escape_line(&place))
                    })
                    .collect();
                return Err(format!(
                    "the edited arguments do not match the tool's input schema, at {}",
                    places.join(", ")
                ));
            }
            let Value::Object(arguments) = value else {
                return Err("not an object".to_owned());
            };
            return Ok(arguments);
        }
        Ok(arguments)
    }

    /// What a prompt says first about a call a person edited (or whose
    /// edit could not be used).
    pub(super) fn edit_note(cx: &CallContext) -> Option<String> {
        if let Some(why) = &cx.edit_refused {
            return Some(format!("hintgate: {why}"));
        }
        let edit = cx.edit.as_deref()?;
        Some(format!(
            "hintgate: {} edited this call in the approval queue (#{}); below is the call as edited, and what it would do. Approve it to run it as edited; the host asked for other arguments.",
            escape_line(&edit.by),
            edit.entry
        ))
    }

    /// What the queue entry of an edited call holds besides the prompt's
    /// details: who edited it, which entry, and the host's arguments
    /// (redacted, as the prompt's are).
    pub(super) fn edit_details(&self, cx: &CallContext) -> Option<Value> {
        let edit = cx.edit.as_deref()?;
        Some(json!({
            "by": edit.by,
            "of": edit.entry,
            "original": edit.original.as_ref().map(|original| self.journal.redacted(original)),
        }))
    }

    /// The host's answer to a call a person edited, saying so: a text block
    /// after the content, and `_meta["hintgate/edited"]` (who, the
    /// arguments the answer is about, redacted as the record keeps them,
    /// and which top-level arguments changed). `ran`: the server answered
    /// the edited call (else it ended at the gateway). Any other line is
    /// `line`.
    pub(super) fn note_edit(&self, cx: &CallContext, line: String, ran: bool) -> String {
        let Some(edit) = cx.edit.as_deref() else {
            return line;
        };
        let Ok(mut message) = serde_json::from_str::<Value>(&line) else {
            return line;
        };
        let Some(result) = message.get_mut("result").and_then(Value::as_object_mut) else {
            return line;
        };
        let arguments = self.journal.redacted(cx.arguments_or_empty());
        let original = edit
            .original
            .as_ref()
            .map_or(Value::Null, |original| self.journal.redacted(original));
        let changed = changed_keys(&original, &arguments);
        let what = if ran {
            "It ran with these arguments, not the ones the call sent"
        } else {
            "This answer is about the call with these arguments, not the ones the call sent"
        };
        let text = format!(
            "hintgate: a person ({}) edited this call before approving it. {what}: {}. Changed: {}.",
            escape_line(&edit.by),
            canonical_json(&arguments),
            if changed.is_empty() {
                "nothing but their spelling".to_owned()
            } else {
                changed
                    .iter()
                    .map(|key| format!("`{}`", escape_line(key)))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        );
        let block = json!({"type": "text", "text": text});
        match result.get_mut("content") {
            Some(Value::Array(content)) => content.push(block),
            _ => {
                result.insert("content".to_owned(), Value::Array(vec![block]));
            }
        }
        let note = json!({
            "by": edit.by,
            "arguments": arguments,
            "original": original,
            "changed": changed,
        });
        match result.get_mut("_meta") {
            Some(Value::Object(meta)) => {
                meta.insert(EDITED_META.to_owned(), note);
            }
            _ => {
                result.insert("_meta".to_owned(), json!({ EDITED_META: note }));
            }
        }
        serde_json::to_string(&message).unwrap_or(line)
    }
}

/// The top-level arguments whose value differs between `original` and
/// `edited` (added, removed or changed), sorted.
fn changed_keys(original: &Value, edited: &Value) -> Vec<String> {
    let empty = Map::new();
    let before = original.as_object().unwrap_or(&empty);
    let after = edited.as_object().unwrap_or(&empty);
    let mut keys: Vec<String> = before
        .keys()
        .chain(after.keys())
        .filter(|key| before.get(*key) != after.get(*key))
        .cloned()
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::changed_keys;

    #[test]
    fn the_changed_arguments_are_named() {
        assert_eq!(
            changed_keys(
                &json!({"path": "/a", "content": "x", "gone": 1}),
                &json!({"path": "/a", "content": "y", "new": 2})
            ),
            ["content", "gone", "new"]
        );
        assert!(changed_keys(&json!({"a": 1}), &json!({"a": 1})).is_empty());
        assert_eq!(changed_keys(&json!(null), &json!({"a": 1})), ["a"]);
    }
}
