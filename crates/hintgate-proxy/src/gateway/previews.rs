//! Previews in the pipeline (design §4.3): what a call will do, shown to
//! the person asked about it, and bound to their approval.
//!
//! Step 5 previews a call before a person is asked about it
//! ([`Lookup::preview_of`]: a `[[previews]]` entry, or the built-in file
//! previews of the reference filesystem server); the prompt shows the
//! preview, or why there is none. The approval binds the preview's digest
//! with the definition's: just before the call is sent, a file preview is
//! computed again, and a call whose file changed since the person saw it is
//! asked about again with the new diff, never sent on the old approval
//! ([`Lookup::still_as_shown`], [`steps::preview_stands`]). A standing
//! approval ("this tool for the session", "always") is for the tool's
//! definition, not for one preview: it still lets a call through without a
//! prompt, and the preview is computed and recorded with the call.
//!
//! A preview never takes part in a decision: it is computed after step 3
//! has decided, only where the decision asks (or a remembered approval
//! answered the ask), and all it can do is ask again.

use hintgate_policy::config::Previewer;
use hintgate_policy::decide::Decision;
use hintgate_policy::preview::{Preview, PreviewSource, Previewed, record_text};
use hintgate_policy::reason::ReasonCode;
use hintgate_policy::redact::looks_like_secret;
use hintgate_store::record::PreviewRecord;
use serde_json::Value;

use super::call::{CallContext, Exit};
use super::lookup::Lookup;
use super::steps;
use crate::preview;

/// What replaces a line of a stored preview that looks like a credential.
const WITHHELD_LINE: &str = "[withheld: a line that looks like a credential]";

/// What replaces, in a stored preview, a value the log redacts in the
/// arguments (a path that looks like a credential, say).
const REDACTED_VALUE: &str = "[redacted]";

/// What the sealed question of a 2026-07-28 host binds besides the
/// definition's pin: the preview's digest.
const PREVIEW_MARK: &str = " preview:";

// === impl Lookup ===

impl Lookup<'_> {
    /// The preview of a call, where its tool has one: the first
    /// `[[previews]]` entry that matches, else the built-in file previews
    /// of a server recognised as the reference filesystem server. `None`
    /// when its tool has none.
    pub(super) fn preview_of(&self, cx: &CallContext) -> Option<Previewed> {
        let idx = cx.server()?;
        let name = self.upstreams.name(idx);
        let config = self.policy.config();
        let built_in;
        let previewer = match config.preview_for(name, cx.tool()) {
            Some(previewer) => previewer,
            None => {
                let server = config.servers.get(name)?;
                let roots = preview::builtin_roots(server).or_else(|| {
                    let identity = self.catalog.identity(idx)?;
                    preview::builtin_roots_by_identity(server, identity)
                })?;
                built_in = Previewer::Files(preview::builtin(cx.tool(), roots)?);
                &built_in
            }
        };
        match previewer {
            Previewer::Files(spec) => Some(preview::file_preview(spec, cx.arguments_or_empty())),
            // Asked for while the call waits, just before a person is
            // asked (`previewers`, `dry_run`), never computed again.
            Previewer::Command(_) | Previewer::DryRun { .. } => None,
        }
    }

    /// Step 5, a call a person approved: its file preview is computed
    /// again; if it differs from the one approved, the approval is void and
    /// the call is asked about again with the new one.
    pub(super) fn still_as_shown(&self, cx: &mut CallContext) -> Result<(), Exit> {
        let again = self
            .preview_of(cx)
            .filter(|now| now.source() == PreviewSource::Files);
        let now = again.as_ref().map(Previewed::digest);
        if steps::preview_stands(
            cx.consent().and_then(|consent| consent.preview.as_deref()),
            now.as_deref(),
        ) {
            return Ok(());
        }
        tracing::warn!(
            tool.name = %cx.tool(),
            "the file changed after the person approved the call: it is asked about again"
        );
        cx.preview = again;
        cx.withdraw_consent();
        cx.preview_changed = true;
        Err(Exit::Ask)
    }

    /// A 2026-07-28 host's retry carries an approval sealed for another
    /// preview than the one computed now, for this very call otherwise: the
    /// file changed since the person saw it.
    pub(super) fn sealed_for_another_preview(&self, cx: &CallContext) -> bool {
        let Some(state) = cx.params.request_state.as_deref() else {
            return false;
        };
        let Ok(claim) = self.sealer.peek(state) else {
            return false;
        };
        let pin = cx.digest_text().unwrap_or_default();
        let same_definition = claim
            .pin
            .split_once(PREVIEW_MARK)
            .map_or(claim.pin.as_str(), |(pin, _)| pin)
            == pin;
        let same_call = claim.tool == cx.params.name
            && claim.arguments == crate::seal::arguments_digest(cx.arguments_or_empty());
        same_call && same_definition && claim.pin != sealed_pin(cx)
    }

    /// For a call a remembered approval let through: its preview, for the
    /// record (nobody is shown it).
    pub(super) fn preview_for_record(&self, cx: &mut CallContext) {
        if cx.decision.as_ref().is_some_and(remembered) {
            cx.preview = self.preview_of(cx);
        }
    }

    /// The preview as it may be kept in the store (the approval queue, the
    /// audit log): lines that look like credentials withheld, the values
    /// the log redacts in the arguments replaced, and all of it when such a
    /// value spans lines. The digest stays the one the person's approval
    /// binds.
    pub(super) fn storable_preview(&self, cx: &CallContext) -> Option<Previewed> {
        let previewed = cx.preview.as_ref()?;
        let Previewed::Shown(shown) = previewed else {
            return Some(previewed.clone());
        };
        let arguments = cx.arguments_or_empty();
        let mut redacted = Vec::new();
        redacted_values(arguments, &self.journal.redacted(arguments), &mut redacted);
        // A value the log redacts that spans lines reaches the diff in
        // pieces, which cannot be told apart: the text is withheld.
        if redacted.iter().any(|value| value.contains('\n')) {
            return Some(Previewed::unavailable(
                shown.source,
                "withheld from the store: the call's arguments hold text the audit log redacts",
            ));
        }
        let mut text = String::with_capacity(shown.text.len());
        for line in shown.text.split_inclusive('\n') {
            if looks_like_secret(line) {
                text.push_str(WITHHELD_LINE);
                text.push_str(if line.ends_with('\n') { "\n" } else { "" });
            } else {
                text.push_str(line);
            }
        }
        for value in redacted.iter().filter(|value| !value.is_empty()) {
            text = text.replace(value.as_str(), REDACTED_VALUE);
        }
        Some(Previewed::Shown(Preview {
            text,
            ..shown.clone()
        }))
    }

    /// The call's preview as its audit record keeps it.
    pub(super) fn preview_record(&self, cx: &CallContext) -> Option<PreviewRecord> {
        let digest = cx.preview.as_ref()?.digest();
        Some(match self.storable_preview(cx)? {
            Previewed::Shown(shown) => {
                let (text, truncated) = record_text(&shown.text);
                PreviewRecord {
                    digest,
                    kind: Some(shown.kind),
                    none: None,
                    source: shown.source,
                    text: Some(text),
                    truncated,
                }
            }
            Previewed::Unavailable { source, why } => PreviewRecord {
                digest,
                kind: None,
                none: Some(why),
                source,
                text: None,
                truncated: false,
            },
        })
    }
}

/// What the sealed question of a 2026-07-28 host binds for `cx`: the pin of
/// the definition and, where there is one, the file preview's digest.
pub(super) fn sealed_pin(cx: &CallContext) -> String {
    let pin = cx.digest_text().unwrap_or_default();
    match &cx.preview {
        // Only a file preview is computed again when the host returns.
        Some(previewed) if previewed.source() == PreviewSource::Files => {
            format!("{pin}{PREVIEW_MARK}{}", previewed.digest())
        }
        Some(_) | None => pin.to_owned(),
    }
}

/// The values of `original` that `redacted` (the same arguments as the log
/// keeps them) replaced, as text.
fn redacted_values(original: &Value, redacted: &Value, out: &mut Vec<String>) {
    match (original, redacted) {
        (Value::Object(one), Value::Object(other)) => {
            for (key, value) in one {
                match other.get(key) {
                    Some(kept) => redacted_values(value, kept, out),
                    None => out.push(text_of(value)),
                }
            }
        }
        (Value::Array(one), Value::Array(other)) if one.len() == other.len() => {
            for (value, kept) in one.iter().zip(other) {
                redacted_values(value, kept, out);
            }
        }
        (one, other) if one != other => out.push(text_of(one)),
        _ => {}
    }
}

/// A value as a preview's text would hold it: a string as it is, anything
/// else as JSON.
fn text_of(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Whether a remembered approval answered the decision's ask.
fn remembered(decision: &Decision) -> bool {
    decision.has(ReasonCode::RememberedApproval)
}
