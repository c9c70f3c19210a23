//! A trusted server's own dry run as a preview (`[[previews]]
//! dry_run_argument`, design §4.3): just before a person is asked, the
//! gateway sends the same call with that argument set to `true`, and shows
//! the answer labelled as the server's own claim.
//!
//! Besides the pipeline's sends ([`Gateway::send_call`]), this is the one
//! `tools/call` the gateway sends, and only under these conditions:
//! - only to a trusted server (`trust = "trusted"`): an untrusted one is
//!   never sent it, since nothing says it honours the argument; its prompt
//!   says "no preview: ..." instead;
//! - only for a call already decided `ask`, to the start of the server
//!   (and the instance) the call was decided on, with the call's own
//!   arguments, the dry-run argument set and any idempotency key removed
//!   (a dry run never uses up the call's key);
//! - what it answers is shown, never decided on: an error, a question, a
//!   silence past the call timeout, or a server that stops gives "no
//!   preview: WHY", and the person is asked all the same.
//!
//! It is no record of its own: the call's record keeps it as the call's
//! preview (`source: dry-run`).
//!
//! [`Gateway::send_call`]: super::Gateway::send_call

use hintgate_policy::config::Previewer;
use hintgate_policy::preview::{Preview, PreviewKind, PreviewSource, Previewed};
use hintgate_policy::tool::Trust;
use serde_json::Value;

use super::ask::Desk;
use super::call::CallContext;
use super::inflight::UpPurpose;
use super::lookup::Lookup;
use super::request::ServerIdx;
use crate::frame::Message;

/// The most of a dry run's text a preview keeps.
const MAX_DRY_RUN_TEXT: usize = 64 * 1024;

// === impl Desk ===

impl Desk<'_> {
    /// Asks a trusted server for its dry run of a call a person is to be
    /// asked about; the call waits for the answer (or its failure) and is
    /// then asked about.
    pub(super) fn dry_run_then_ask(&mut self, mut cx: Box<CallContext>, argument: &str) {
        match self.send_dry_run(&cx, argument) {
            Ok((target, id)) => {
                let timeout = self.limits.call_timeout;
                self.inflight
                    .wait_up(target, id, UpPurpose::DryRun(cx), timeout);
            }
            Err(why) => {
                cx.preview = Some(Previewed::unavailable(PreviewSource::DryRun, why));
                self.ask(cx);
            }
        }
    }

    /// Sends the dry run: where it went and under which id, or why it was
    /// not sent.
    fn send_dry_run(
        &mut self,
        cx: &CallContext,
        argument: &str,
    ) -> Result<(ServerIdx, u64), String> {
        let idx = cx.server().ok_or("the call has no server")?;
        let name = self.upstreams.name(idx).to_owned();
        let config = self.policy.server(&name);
        if config.is_none_or(|server| server.trust != Trust::Trusted) {
            return Err(format!(
                "a dry run is asked only of a trusted server, and `{name}` is not trusted"
            ));
        }
        let target = super::pipeline::send_target(self.upstreams, self.catalog, cx, idx)?;
        let mut arguments = cx.arguments_or_empty().clone();
        let Some(object) = arguments.as_object_mut() else {
            return Err("the call's arguments are not an object".to_owned());
        };
        if let (Some(_), Some(key)) = (
            &cx.idem,
            config.and_then(|server| server.idempotency_key.as_deref()),
        ) {
            object.remove(key);
        }
        object.insert(argument.to_owned(), Value::Bool(true));
        let arguments = arguments.to_string();
        let Some(up) = self.upstreams.get_mut(target) else {
            return Err(format!("server `{name}` is not running"));
        };
        let id = up.next_id();
        let modern = up.modern;
        let meta = self
            .declared
            .for_level(self.sessions.log_level(cx.request.session))
            .into_owned();
        let line = super::pipeline::call_line_with(
            cx,
            Some(&arguments),
            *self.mode == super::Mode::Wrap,
            modern,
            &meta,
            id,
            None,
        )
        .ok_or("the call's params could not be rebuilt")?;
        let turn = self.turn;
        // The dry run goes with the same login the call would.
        let principal = self.sessions.principal(cx.request.session);
        self.upstreams
            .get_mut(target)
            .map_or(Ok(()), |up| up.send_now(line, turn, principal))
            .map_err(|_| format!("server `{name}` has left too much unread"))?;
        Ok((target, id))
    }

    /// The server answered the dry run: its text is the preview (its own
    /// claim), or why there is none; then the person is asked.
    pub(super) fn on_dry_run_answer(
        &mut self,
        idx: ServerIdx,
        mut cx: Box<CallContext>,
        message: &Message<'_>,
    ) {
        let name = self.upstreams.name(idx).to_owned();
        cx.preview = Some(dry_run_preview(&name, message));
        self.ask(cx);
    }

    /// The dry run will not be answered (the server failed, or did not
    /// answer in time): the person is asked without it.
    pub(super) fn dry_run_failed(&mut self, mut cx: Box<CallContext>, why: &str) {
        cx.preview = Some(Previewed::unavailable(
            PreviewSource::DryRun,
            format!("the server's dry run failed: {why}"),
        ));
        self.ask(cx);
    }
}

// === impl Lookup ===

impl Lookup<'_> {
    /// The dry-run argument configured for a call's tool, if any.
    pub(super) fn dry_run_argument(&self, cx: &CallContext) -> Option<String> {
        let name = self.upstreams.name(cx.server()?);
        match self.policy.config().preview_for(name, cx.tool())? {
            Previewer::DryRun { argument } => Some(argument.clone()),
            Previewer::Files(_) | Previewer::Command(_) => None,
        }
    }
}

/// The preview a server's answer to a dry run gives.
fn dry_run_preview(server: &str, message: &Message<'_>) -> Previewed {
    let none = |why: String| Previewed::unavailable(PreviewSource::DryRun, why);
    let Some(raw) = message.result else {
        return none(format!(
            "server `{server}` answered its dry run with an error"
        ));
    };
    let Ok(result) = serde_json::from_str::<Value>(raw) else {
        return none(format!(
            "server `{server}` answered its dry run with what cannot be read"
        ));
    };
    if result.get("resultType").and_then(Value::as_str) == Some("input_required") {
        return none(format!(
            "server `{server}` asked for input during its dry run"
        ));
    }
    let text: Vec<&str> = result
        .get("content")
        .and_then(Value::as_array)
        .map(|blocks| {
            blocks
                .iter()
                .filter(|block| block.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|block| block.get("text").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    let mut text = text.join("\n");
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        return none(format!(
            "server `{server}` reported an error in its dry run: {}",
            text.lines().next().unwrap_or("(no text)")
        ));
    }
    if text.is_empty() {
        return none(format!(
            "server `{server}` answered its dry run with no text"
        ));
    }
    if text.len() > MAX_DRY_RUN_TEXT {
        let mut end = MAX_DRY_RUN_TEXT;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    let kind = if text.starts_with("--- ") || text.contains("\n@@ ") || text.starts_with("```diff")
    {
        PreviewKind::Diff
    } else {
        PreviewKind::Text
    };
    Previewed::Shown(Preview::new(PreviewSource::DryRun, kind, text))
}
