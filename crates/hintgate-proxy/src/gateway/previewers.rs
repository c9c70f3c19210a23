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

use hintgate_policy::config::{HookConfig, HookMode, Previewer};
use hintgate_policy::preview::{PreviewSource, Previewed, read_answer};

use super::call::CallContext;
use super::inflight::DeadlineKey;
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
    pub(super) slots: Vec<Slot>,
    pub(super) held: HashMap<u64, Held>,
}

#[derive(Debug)]
pub(super) struct Slot {
    pub(super) config: HookConfig,
    /// The persistent previewer's process, while it runs.
    running: Option<HookProcess>,
    /// Which start of it is the current one.
    generation: u64,
    /// The per-call processes, by their question's id.
    pub(super) per_call: HashMap<u64, HookProcess>,
}

#[derive(Debug)]
pub(super) struct Held {
    pub(super) cx: Box<CallContext>,
    pub(super) slot: usize,
    pub(super) deadline: DeadlineKey,
}

// === impl Previewers ===

impl Previewers {
    pub(super) fn slot_of(&mut self, config: &HookConfig) -> usize {
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
    pub(super) fn ask(
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
    pub(super) fn on_event(
        &mut self,
        idx: usize,
        generation: u64,
        event: HookEvent,
    ) -> Vec<(u64, Previewed)> {
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

    /// The calls of `session` waiting for a previewer (one, for
    /// `request_id`), taken in the order they were asked about; a per-call
    /// previewer asked about one is killed.
    pub(super) fn withdraw(&mut self, session: SessionId, request_id: Option<&str>) -> Vec<Held> {
        let slots = &mut self.slots;
        super::call::take_held(
            &mut self.held,
            |held| &*held.cx,
            session,
            request_id,
            |id, held| {
                if let Some(slot) = slots.get_mut(held.slot)
                    && let Some(mut process) = slot.per_call.remove(&id)
                {
                    process.kill();
                }
            },
        )
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

// === impl Lookup ===

impl Lookup<'_> {
    /// The previewer command configured for a call's tool, if any.
    pub(super) fn previewer_command(&self, cx: &CallContext) -> Option<HookConfig> {
        let name = self.upstreams.name(cx.server()?);
        match self.policy.config().preview_for(name, cx.tool())? {
            Previewer::Command(config) => Some(config.clone()),
            Previewer::Files(_) | Previewer::DryRun { .. } => None,
        }
    }

    /// The question for a previewer: the decision hook's, for this call
    /// and its decision.
    pub(super) fn previewer_question(&self, cx: &CallContext, id: u64) -> Option<String> {
        let idx = cx.server()?;
        let entry = self.catalog.tool(idx, cx.tool())?;
        let (Ok(tool), Some(digest), Some(decision)) = (&entry.tool, entry.digest, &cx.decision)
        else {
            return None;
        };
        let session = SessionFacts::of(cx.request.session, self.sessions.get(&cx.request.session));
        let facts = self.call_facts(idx, cx.tool(), tool, digest, session);
        Some(self.hook_question(cx, idx, tool, &facts, id, decision))
    }
}
