//! The user's previewer commands (`[[previews]] command`, design §4.3):
//! the decision hook's sibling, run just before a person is asked.
//!
//! A previewer is told the call as one JSON object (the question the
//! decision hook gets, `docs/preview-request.schema.json`) and answers one
//! line: a preview (`kind` and `text`) or why there is none (`none`),
//! `docs/preview-answer.schema.json`. Its processes are the hook's
//! ([`HookProcess`]: one persistent process per distinct command, or one
//! per call; a line under 64 KiB; stderr logged; killed on drop), its
//! events come through the hooks' channel in slots of their own
//! ([`PREVIEW_SLOTS`] and above), and its deadlines are the hooks'
//! (`Expired::Hook`, one counter of question ids for both).
//!
//! A previewer can only add to the prompt. One that cannot be started,
//! hangs past its `timeout_ms`, crashes, answers a line too long, or
//! answers anything but a preview leaves the prompt as it was, saying "no
//! preview: WHY"; the call is asked about all the same, never allowed or
//! refused for it.

use std::collections::HashMap;
use std::time::Duration;

use hintgate_policy::config::{HookConfig, HookMode, Previewer};
use hintgate_policy::preview::{PreviewSource, Previewed, read_answer};

use super::ask::Desk;
use super::call::{CallContext, CallEnd};
use super::inflight::{DeadlineKey, Expired};
use super::lookup::Lookup;
use super::request::SessionId;
use super::steps::SessionFacts;
use crate::event::HookEvent;
use crate::hook::HookProcess;

/// The first event slot of the previewers: the decision hooks' slots are
/// below it.
pub(crate) const PREVIEW_SLOTS: usize = usize::MAX / 2;

/// The previewer processes, and the calls that wait for their previews.
#[derive(Debug, Default)]
pub(crate) struct Previewers {
    slots: Vec<Slot>,
    held: HashMap<u64, Held>,
}

#[derive(Debug)]
struct Slot {
    config: HookConfig,
    /// The persistent previewer's process, while it runs.
    running: Option<HookProcess>,
    /// Which start of it is the current one.
    generation: u64,
    /// The per-call processes, by their question's id.
    per_call: HashMap<u64, HookProcess>,
}

#[derive(Debug)]
struct Held {
    cx: Box<CallContext>,
    slot: usize,
    deadline: DeadlineKey,
}

// === impl Previewers ===

impl Previewers {
    fn slot_of(&mut self, config: &HookConfig) -> usize {
        if let Some(idx) = self.slots.iter().position(|slot| &slot.config == config) {
            return idx;
        }
        self.slots.push(Slot {
            config: config.clone(),
            running: None,
            generation: 0,
            per_call: HashMap::new(),
        });
        self.slots.len() - 1
    }

    /// Sends previewer `idx` question `id` (a persistent one is started
    /// when it is not running).
    fn ask(
        &mut self,
        idx: usize,
        id: u64,
        line: String,
        events: &crate::event::EventSender,
    ) -> Result<(), String> {
        let Some(slot) = self.slots.get_mut(idx) else {
            return Err("is not configured".to_owned());
        };
        let event_slot = PREVIEW_SLOTS.saturating_add(idx);
        let start_error = |err: crate::hook::HookError| match err {
            crate::hook::HookError::Spawn { command, why } => {
                format!("`{command}` could not be started: {why}")
            }
            crate::hook::HookError::Full => "is not reading its input".to_owned(),
            crate::hook::HookError::Gone => "exited".to_owned(),
        };
        match slot.config.mode {
            HookMode::PerCall => {
                let mut process = HookProcess::spawn(&slot.config, event_slot, id, events.clone())
                    .map_err(start_error)?;
                process.ask(line).map_err(start_error)?;
                process.close_input();
                slot.per_call.insert(id, process);
            }
            HookMode::Persistent => {
                if slot.running.is_none() {
                    slot.generation += 1;
                    let process = HookProcess::spawn(
                        &slot.config,
                        event_slot,
                        slot.generation,
                        events.clone(),
                    )
                    .map_err(start_error)?;
                    slot.running = Some(process);
                }
                let asked = slot
                    .running
                    .as_ref()
                    .map_or(Err(crate::hook::HookError::Gone), |process| {
                        process.ask(line)
                    });
                if let Err(err) = asked {
                    slot.running = None;
                    return Err(start_error(err));
                }
            }
        }
        Ok(())
    }

    /// What a line, or the end, of previewer `idx` answers: each question
    /// answered, with its preview (or why there is none).
    fn on_event(&mut self, idx: usize, generation: u64, event: HookEvent) -> Vec<(u64, Previewed)> {
        let Some(slot) = self.slots.get_mut(idx) else {
            return Vec::new();
        };
        let per_call = slot.config.mode == HookMode::PerCall;
        if !per_call && generation != slot.generation {
            return Vec::new();
        }
        let failed = |why: String| Previewed::unavailable(PreviewSource::Command, why);
        match event {
            HookEvent::Line(line) => {
                let (id, previewed) = read_answer(&line);
                if per_call {
                    if let Some(mut process) = slot.per_call.remove(&generation) {
                        process.kill();
                    }
                    let previewed = match id {
                        Some(id) if id != generation.to_string() => {
                            failed("the previewer answered another question".to_owned())
                        }
                        _ => previewed,
                    };
                    return vec![(generation, previewed)];
                }
                match id.and_then(|id| id.parse::<u64>().ok()) {
                    Some(id) => vec![(id, previewed)],
                    // An answer that names no question cannot be matched:
                    // the previewer is stopped, and its questions fail.
                    None => {
                        let why = match &previewed {
                            Previewed::Unavailable { why, .. } => {
                                why.strip_prefix("the previewer ").unwrap_or(why).to_owned()
                            }
                            Previewed::Shown(_) => {
                                "answered without the question's `id`".to_owned()
                            }
                        };
                        self.broke(idx, &why)
                    }
                }
            }
            HookEvent::Broken(why) | HookEvent::Closed(why) => {
                if per_call {
                    slot.per_call.remove(&generation);
                    return vec![(generation, failed(format!("the previewer {why}")))];
                }
                self.broke(idx, &why)
            }
        }
    }

    /// Persistent previewer `idx` broke: it is stopped (started again on
    /// the next question), and each question it had fails.
    fn broke(&mut self, idx: usize, why: &str) -> Vec<(u64, Previewed)> {
        tracing::warn!("the previewer {why}; it is started again on the next question");
        if let Some(mut process) = self.slots.get_mut(idx).and_then(|slot| slot.running.take()) {
            process.kill();
        }
        let mut ids: Vec<u64> = self
            .held
            .iter()
            .filter(|(_, held)| held.slot == idx)
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids.into_iter()
            .map(|id| {
                (
                    id,
                    Previewed::unavailable(PreviewSource::Command, format!("the previewer {why}")),
                )
            })
            .collect()
    }

    /// Every previewer process is stopped (the gateway shuts down).
    pub fn stop_all(&mut self) {
        for slot in &mut self.slots {
            if let Some(mut process) = slot.running.take() {
                process.kill();
            }
            for (_, mut process) in slot.per_call.drain() {
                process.kill();
            }
        }
    }
}

// === impl Desk ===

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
            tracing::warn!(tool.name = %cx.tool, "the previewer {why}");
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
            .insert(id, Held { cx, slot, deadline });
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
        tracing::warn!(tool.name = %cx.tool, "the previewer did not answer within {timeout_ms} ms");
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
        let previewers = &mut self.hooks.previewers;
        let mut ids: Vec<u64> = previewers
            .held
            .iter()
            .filter(|(_, held)| {
                held.cx.request.session == session
                    && request_id.is_none_or(|id| held.cx.request.id() == id)
            })
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        for id in ids {
            let Some(held) = self.hooks.previewers.held.remove(&id) else {
                continue;
            };
            if let Some(slot) = self.hooks.previewers.slots.get_mut(held.slot)
                && let Some(mut process) = slot.per_call.remove(&id)
            {
                process.kill();
            }
            self.inflight.cancel_deadline(&held.deadline);
            self.end(held.cx, end.clone());
        }
    }
}

// === impl Lookup ===

impl Lookup<'_> {
    /// The previewer command configured for a call's tool, if any.
    pub(super) fn previewer_command(&self, cx: &CallContext) -> Option<HookConfig> {
        let name = self.upstreams.name(cx.server?);
        match self.policy.config().preview_for(name, &cx.tool)? {
            Previewer::Command(config) => Some(config.clone()),
            Previewer::Files(_) | Previewer::DryRun { .. } => None,
        }
    }

    /// The question for a previewer: the decision hook's, for this call
    /// and its decision.
    fn previewer_question(&self, cx: &CallContext, id: u64) -> Option<String> {
        let idx = cx.server?;
        let entry = self.catalog.tool(idx, &cx.tool)?;
        let (Ok(tool), Some(digest), Some(decision)) = (&entry.tool, entry.digest, &cx.decision)
        else {
            return None;
        };
        let session = SessionFacts::of(cx.request.session, self.sessions.get(&cx.request.session));
        let facts = self.call_facts(idx, &cx.tool, tool, digest, session);
        Some(self.hook_question(cx, idx, tool, &facts, id, decision))
    }
}
