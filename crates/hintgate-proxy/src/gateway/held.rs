//! The asking part's steps for the calls it holds for a process of the
//! gateway's: the decision hooks (step 3, where a hook takes part) and the
//! previewer commands (a preview before a person is asked).
//!
//! [`Hooks`](super::hooks::Hooks) and
//! [`Previewers`](super::previewers::Previewers) own the processes and the
//! calls waiting for them; these steps ask them, take their answers and
//! deadlines, and leave each call to the gateway (through the pipeline
//! again, or ended) or to the person's question.

use std::time::Duration;

use hintgate_policy::config::HookConfig;
use hintgate_policy::hook::OwnedAnswer;
use hintgate_policy::preview::{PreviewSource, Previewed};

use super::ask::Desk;
use super::call::{CallContext, CallEnd, HookAsk};
use super::hooks::{Heard, Held, answered};
use super::inflight::Expired;
use super::previewers::{self, PREVIEW_SLOTS};
use super::request::SessionId;
use crate::event::HookEvent;

// === impl Desk: the decision hooks ===

impl Desk<'_> {
    /// Step 3 of the pipeline, for a call the hook takes part in: the
    /// question goes to the hook, and the call waits for the answer.
    pub(super) fn ask_hook(&mut self, cx: Box<CallContext>, ask: HookAsk) {
        let HookAsk {
            slot: idx,
            id,
            line,
            digest,
            so_far,
        } = ask;
        let timeout_ms = match self.hooks.ask(idx, id, line, self.events) {
            Ok(timeout_ms) => timeout_ms,
            Err(why) => {
                if self.hooks.slots.get(idx).is_some() {
                    tracing::warn!(tool.name = %cx.tool(), "the decision hook could not be asked: {why}");
                }
                self.again(answered(cx, digest, so_far, OwnedAnswer::Failed(why)));
                return;
            }
        };
        let deadline = self
            .inflight
            .deadline(Duration::from_millis(timeout_ms), Expired::Hook(id));
        self.hooks.held.insert(
            id,
            Held {
                cx,
                slot: idx,
                deadline,
                digest,
                so_far,
            },
        );
    }

    /// A line, or the end, from a hook: the calls it answers, or every call
    /// it had when it broke, go through the pipeline again.
    pub(super) fn on_hook_event(&mut self, idx: usize, generation: u64, event: HookEvent) {
        if let Some(previewer) = idx.checked_sub(PREVIEW_SLOTS) {
            self.on_previewer_event(previewer, generation, event);
            return;
        }
        match self.hooks.on_event(idx, generation, event) {
            Heard::Nothing => {}
            Heard::Reply(id, answer) => self.hook_reply(idx, id, answer),
            Heard::Broke(why) => {
                for id in self.hooks.broke(idx) {
                    self.hook_reply(idx, id, OwnedAnswer::Failed(why.clone()));
                }
            }
        }
    }

    /// The answer to question `id` of hook `idx`; a late one (its call timed
    /// out, or was withdrawn) is dropped.
    fn hook_reply(&mut self, idx: usize, id: u64, answer: OwnedAnswer) {
        let Some(held) = self.hooks.take_answered(idx, id) else {
            return;
        };
        self.inflight.cancel_deadline(&held.deadline);
        self.again(answered(held.cx, held.digest, held.so_far, answer));
    }

    /// A hook did not answer in time: its call is refused. A persistent
    /// hook goes on (its late answer is dropped); a per-call one is killed.
    pub(super) fn hook_timed_out(&mut self, id: u64) {
        if self.previewer_timed_out(id) {
            return;
        }
        let Some((held, timeout_ms)) = self.hooks.timed_out(id) else {
            return;
        };
        let why = format!("the decision hook did not answer within {timeout_ms} ms");
        tracing::warn!(tool.name = %held.cx.tool(), "{why}");
        self.again(answered(
            held.cx,
            held.digest,
            held.so_far,
            OwnedAnswer::Failed(why),
        ));
    }

    /// The host cancelled a call, or its session ended, while the hook was
    /// asked about it: it ends here, on record, and the hook's answer, when
    /// it comes, is dropped. `request_id` picks one call; `None` every call
    /// of the session.
    pub(super) fn withdraw_hook_calls(
        &mut self,
        session: SessionId,
        request_id: Option<&str>,
        end: &CallEnd,
    ) {
        for held in self.hooks.withdraw(session, request_id) {
            self.inflight.cancel_deadline(&held.deadline);
            self.end(held.cx, end.clone());
        }
        self.withdraw_previewed_calls(session, request_id, end);
    }
}

// === impl Desk: the previewer commands ===

impl Desk<'_> {
    /// Asks the previewer command about a call a person is to be asked
    /// about; the call waits for its preview (or its failure) and is then
    /// asked about.
    pub(super) fn preview_then_ask(&mut self, mut cx: Box<CallContext>, config: &HookConfig) {
        let id = self.hooks.next_id();
        let Some(line) = self.lookup().previewer_question(&cx, id) else {
            cx.preview = Some(Previewed::unavailable(
                PreviewSource::Command,
                "the call could not be described to the previewer",
            ));
            self.ask(cx);
            return;
        };
        let previewers = &mut self.hooks.previewers;
        let slot = previewers.slot_of(config);
        if let Err(why) = previewers.ask(slot, id, line, self.events) {
            tracing::warn!(tool.name = %cx.tool(), "the previewer {why}");
            cx.preview = Some(Previewed::unavailable(
                PreviewSource::Command,
                format!("the previewer {why}"),
            ));
            self.ask(cx);
            return;
        }
        let deadline = self
            .inflight
            .deadline(Duration::from_millis(config.timeout_ms), Expired::Hook(id));
        self.hooks
            .previewers
            .held
            .insert(id, previewers::Held { cx, slot, deadline });
    }

    /// A line, or the end, of a previewer: each call it answers is asked
    /// about, with the preview or why there is none.
    pub(super) fn on_previewer_event(&mut self, idx: usize, generation: u64, event: HookEvent) {
        for (id, previewed) in self.hooks.previewers.on_event(idx, generation, event) {
            let Some(held) = self.hooks.previewers.held.remove(&id) else {
                tracing::debug!(question = id, "a late or unknown answer of a previewer");
                continue;
            };
            self.inflight.cancel_deadline(&held.deadline);
            let mut cx = held.cx;
            cx.preview = Some(previewed);
            self.ask(cx);
        }
    }

    /// A previewer did not answer question `id` in time: the call is asked
    /// about without a preview (a per-call previewer is killed). Whether
    /// the question was a previewer's.
    pub(super) fn previewer_timed_out(&mut self, id: u64) -> bool {
        let Some(held) = self.hooks.previewers.held.remove(&id) else {
            return false;
        };
        let timeout_ms = self
            .hooks
            .previewers
            .slots
            .get_mut(held.slot)
            .map_or(0, |slot| {
                if let Some(mut process) = slot.per_call.remove(&id) {
                    process.kill();
                }
                slot.config.timeout_ms
            });
        let mut cx = held.cx;
        tracing::warn!(tool.name = %cx.tool(), "the previewer did not answer within {timeout_ms} ms");
        cx.preview = Some(Previewed::unavailable(
            PreviewSource::Command,
            format!("the previewer did not answer within {timeout_ms} ms"),
        ));
        self.ask(cx);
        true
    }

    /// The host cancelled a call, or its session ended, while a previewer
    /// was asked about it: it ends here, on record, with `end`.
    pub(super) fn withdraw_previewed_calls(
        &mut self,
        session: SessionId,
        request_id: Option<&str>,
        end: &CallEnd,
    ) {
        for held in self.hooks.previewers.withdraw(session, request_id) {
            self.inflight.cancel_deadline(&held.deadline);
            self.end(held.cx, end.clone());
        }
    }
}
