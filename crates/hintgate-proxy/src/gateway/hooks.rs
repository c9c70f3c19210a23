//! The user's decision hooks (`decide_command`, design §4.2 step 3): the
//! hook processes, and the calls that wait for their answers.
//!
//! Each distinct hook configuration is one slot. A persistent hook is one
//! process per slot, started with the gateway and again on the next call
//! after it dies (but not sooner than [`RESTART_AFTER`] after its last
//! start, so a hook that dies at once is not restarted in a loop: calls in
//! between are refused, with the reason). A per-call hook is a process per
//! question. A call asked about waits here, with a deadline (the slot's
//! `decide_timeout_ms`), for an answer that carries its question's id;
//! then it runs through the pipeline again, from the top, with the answer
//! (see `pipeline`). A hook that times out, dies, or answers what is not
//! an answer fails the calls it had: each is refused (`hook-failed`), and
//! the gateway goes on.

use std::collections::HashMap;
use std::time::Duration;

use hintgate_policy::config::{HookConfig, HookMode};
use hintgate_policy::decide::Verdict;
use hintgate_policy::hook::{OwnedAnswer, Reply};
use hintgate_policy::pin::PinDigest;
use hintgate_policy::reason::ReasonCode;
use tokio::time::Instant;

use super::call::{CallContext, CallEnd, HookVerdict, Outcome, Refusal};
use super::inflight::DeadlineKey;
use super::request::SessionId;
use crate::event::{EventSender, HookEvent};
use crate::hook::{HookError, HookProcess};

/// The soonest a persistent hook is started again after its last start.
pub(crate) const RESTART_AFTER: Duration = Duration::from_secs(1);

/// The hooks, and the calls that wait for them.
#[derive(Debug, Default)]
pub(crate) struct Hooks {
    pub(super) slots: Vec<Slot>,
    pub(super) held: HashMap<u64, Held>,
    next_id: u64,
    /// The previewer commands, the hooks' siblings: their events come
    /// through the same channel (slots from
    /// [`PREVIEW_SLOTS`](super::previewers::PREVIEW_SLOTS)) and their
    /// question ids from the same counter.
    pub(crate) previewers: super::previewers::Previewers,
}

#[derive(Debug)]
pub(super) struct Slot {
    config: HookConfig,
    /// The persistent hook's process, while it runs.
    running: Option<HookProcess>,
    /// Which start of the persistent hook is the current one.
    generation: u64,
    /// When it was last started.
    started: Option<Instant>,
    /// Why its last start failed, when it did.
    start_failed: Option<String>,
    /// The per-call processes, by their question's id.
    per_call: HashMap<u64, HookProcess>,
}

/// A call waiting for a hook's answer.
#[derive(Debug)]
pub(super) struct Held {
    pub(super) cx: Box<CallContext>,
    pub(super) slot: usize,
    pub(super) deadline: DeadlineKey,
    pub(super) digest: PinDigest,
    pub(super) so_far: (Verdict, Vec<ReasonCode>),
}

// === impl Hooks ===

impl Hooks {
    /// A slot for each distinct hook of the configuration.
    pub fn new(configs: impl IntoIterator<Item = HookConfig>) -> Self {
        let mut hooks = Self::default();
        for config in configs {
            hooks.slot_of(&config);
        }
        hooks
    }

    /// The slot of a hook configuration (made when new).
    pub fn slot_of(&mut self, config: &HookConfig) -> usize {
        if let Some(idx) = self.slots.iter().position(|slot| &slot.config == config) {
            return idx;
        }
        self.slots.push(Slot {
            config: config.clone(),
            running: None,
            generation: 0,
            started: None,
            start_failed: None,
            per_call: HashMap::new(),
        });
        self.slots.len() - 1
    }

    /// A fresh question id.
    pub fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Starts every persistent hook, as the gateway starts: a hook that
    /// cannot start is logged, and the calls it would decide are refused.
    pub fn start_all(&mut self, events: &EventSender) {
        for slot in 0..self.slots.len() {
            let persistent = self
                .slots
                .get(slot)
                .is_some_and(|slot| slot.config.mode == HookMode::Persistent);
            if persistent && let Err(err) = self.start(slot, events) {
                tracing::error!("{err}; the calls it decides are refused until it starts");
            }
        }
    }

    fn start(&mut self, idx: usize, events: &EventSender) -> Result<(), HookError> {
        let Some(slot) = self.slots.get_mut(idx) else {
            return Err(HookError::Gone);
        };
        slot.generation += 1;
        slot.started = Some(Instant::now());
        match HookProcess::spawn(&slot.config, idx, slot.generation, events.clone()) {
            Ok(process) => {
                slot.running = Some(process);
                slot.start_failed = None;
                Ok(())
            }
            Err(err) => {
                slot.start_failed = Some(err.to_string());
                Err(err)
            }
        }
    }

    /// Sends hook `idx` question `id`: its mode and deadline in
    /// milliseconds, or why it cannot be asked.
    pub(super) fn ask(
        &mut self,
        idx: usize,
        id: u64,
        line: String,
        events: &EventSender,
    ) -> Result<u64, String> {
        let Some((mode, timeout_ms)) = self
            .slots
            .get(idx)
            .map(|slot| (slot.config.mode, slot.config.timeout_ms))
        else {
            return Err("no such hook".to_owned());
        };
        match mode {
            HookMode::Persistent => self.ask_persistent(idx, line, events)?,
            HookMode::PerCall => self.ask_per_call(idx, id, line, events)?,
        }
        Ok(timeout_ms)
    }

    fn ask_persistent(
        &mut self,
        idx: usize,
        line: String,
        events: &EventSender,
    ) -> Result<(), String> {
        let (running, recent, start_failed) = match self.slots.get(idx) {
            Some(slot) => (
                slot.running.is_some(),
                slot.started
                    .is_some_and(|started| started.elapsed() < RESTART_AFTER),
                slot.start_failed.clone(),
            ),
            None => return Err("no such hook".to_owned()),
        };
        if !running {
            if recent {
                let seconds = RESTART_AFTER.as_secs();
                return Err(match start_failed {
                    Some(why) => {
                        format!("{why}; it is tried again on a call {seconds} s after that")
                    }
                    None => format!(
                        "the decision hook exited within {seconds} s of its start; it is started again on a call after that"
                    ),
                });
            }
            self.start(idx, events).map_err(|err| err.to_string())?;
        }
        let Some(process) = self
            .slots
            .get_mut(idx)
            .and_then(|slot| slot.running.as_mut())
        else {
            return Err("the decision hook is not running".to_owned());
        };
        process.ask(line).map_err(|err| err.to_string())
    }

    fn ask_per_call(
        &mut self,
        idx: usize,
        id: u64,
        line: String,
        events: &EventSender,
    ) -> Result<(), String> {
        let Some(slot) = self.slots.get_mut(idx) else {
            return Err("no such hook".to_owned());
        };
        let mut process = HookProcess::spawn(&slot.config, idx, id, events.clone())
            .map_err(|err| err.to_string())?;
        process.ask(line).map_err(|err| err.to_string())?;
        process.close_input();
        slot.per_call.insert(id, process);
        Ok(())
    }

    /// What a line, or the end, from hook `idx` means for its calls.
    pub(super) fn on_event(&mut self, idx: usize, generation: u64, event: HookEvent) -> Heard {
        let Some(slot) = self.slots.get(idx) else {
            return Heard::Nothing;
        };
        let per_call = slot.config.mode == HookMode::PerCall;
        if !per_call && generation != slot.generation {
            // An earlier start's last words: its calls were failed already.
            return Heard::Nothing;
        }
        match event {
            HookEvent::Line(line) => {
                let reply = Reply::parse(&line);
                if per_call {
                    // One process, one question: the answer is for it,
                    // and an id it gives must be that question's.
                    if let Some(mut process) = self
                        .slots
                        .get_mut(idx)
                        .and_then(|slot| slot.per_call.remove(&generation))
                    {
                        process.kill();
                    }
                    let answer = match &reply.id {
                        Some(id) if *id != generation.to_string() => OwnedAnswer::Failed(format!(
                            "the decision hook answered for question `{}`, not for `{generation}`",
                            hintgate_policy::sanitize::escape_line(id)
                        )),
                        _ => reply.answer,
                    };
                    return Heard::Reply(generation, answer);
                }
                let question = reply.id.as_deref().and_then(|id| id.parse::<u64>().ok());
                match (question, reply.answer) {
                    (Some(id), answer) => Heard::Reply(id, answer),
                    // A line that names no question cannot be matched to
                    // a call: the hook is not speaking the protocol, so
                    // every call it has is refused and it is started again.
                    (None, answer) => {
                        let why = match answer {
                            OwnedAnswer::Failed(why) => why,
                            OwnedAnswer::Decided(..) | OwnedAnswer::Abstain => {
                                "the decision hook answered without the question's `id`".to_owned()
                            }
                        };
                        tracing::warn!("{why}; its calls are refused and it is started again");
                        Heard::Broke(why)
                    }
                }
            }
            HookEvent::Broken(why) | HookEvent::Closed(why) => {
                let why = format!("the decision hook {why}");
                if per_call {
                    self.slots
                        .get_mut(idx)
                        .and_then(|slot| slot.per_call.remove(&generation));
                    Heard::Reply(generation, OwnedAnswer::Failed(why))
                } else {
                    tracing::warn!(
                        "{why}; its calls are refused, and it is started again on the next call"
                    );
                    Heard::Broke(why)
                }
            }
        }
    }

    /// The call waiting for question `id` of hook `idx`, taken; `None` for
    /// a late or unknown answer (its call timed out, or was withdrawn).
    pub(super) fn take_answered(&mut self, idx: usize, id: u64) -> Option<Held> {
        let owned = self.held.get(&id).is_some_and(|held| held.slot == idx);
        if !owned {
            tracing::debug!(
                question = id,
                "a late or unknown answer of the decision hook"
            );
            return None;
        }
        self.held.remove(&id)
    }

    /// A persistent hook stopped speaking the protocol, or ended: it is
    /// stopped (and started again on the next call); the questions it had,
    /// in order, whose calls are refused.
    pub(super) fn broke(&mut self, idx: usize) -> Vec<u64> {
        if let Some(slot) = self.slots.get_mut(idx)
            && let Some(mut process) = slot.running.take()
        {
            process.kill();
        }
        let mut ids: Vec<u64> = self
            .held
            .iter()
            .filter(|(_, held)| held.slot == idx)
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Question `id` was not answered in time: its call, taken, and its
    /// deadline in milliseconds. A per-call hook is killed.
    pub(super) fn timed_out(&mut self, id: u64) -> Option<(Held, u64)> {
        let held = self.held.remove(&id)?;
        let timeout_ms = self.slots.get_mut(held.slot).map_or(0, |slot| {
            if let Some(mut process) = slot.per_call.remove(&id) {
                process.kill();
            }
            slot.config.timeout_ms
        });
        Some((held, timeout_ms))
    }

    /// The calls of `session` waiting for a hook (one, for `request_id`),
    /// taken in the order they were asked about; a per-call hook asked
    /// about one is killed.
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

    /// Every hook and previewer process is stopped (the gateway shuts
    /// down).
    pub fn stop_all(&mut self) {
        self.previewers.stop_all();
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

/// What a hook's line or end means for the calls waiting on it.
pub(super) enum Heard {
    /// Nothing: an earlier start's last words, or an unknown hook.
    Nothing,
    /// The answer to a question.
    Reply(u64, OwnedAnswer),
    /// The hook broke: every call it has is refused, for this reason.
    Broke(String),
}

/// The call with the hook's answer, to go through the pipeline again.
pub(super) fn answered(
    mut cx: Box<CallContext>,
    digest: PinDigest,
    so_far: (Verdict, Vec<ReasonCode>),
    answer: OwnedAnswer,
) -> Box<CallContext> {
    cx.hook = Some(HookVerdict {
        answer,
        digest,
        so_far,
    });
    cx
}

/// The outcome a call withdrawn while the hook was asked ends with.
pub(crate) fn withdrawn(ending_shutdown: bool) -> CallEnd {
    if ending_shutdown {
        CallEnd::Refused(Refusal::Shutdown)
    } else {
        CallEnd::Withdrawn(Outcome::HostGone)
    }
}
