//! What became of one task of an episode, read without running anything: the answer to an
//! A2A `GetTask` (`tasks/get`) and `CancelTask` (`tasks/cancel`).
//!
//! It joins the two places a call lives: the in-flight marks (a call planning or running in
//! this process) and the durable task state (its phase once an intent or a commit is on disk).

use super::{CallError, CallOutput, Coordinator, EffectSummary, Surface};
use crate::object::Ref;
use crate::session::Session;
use crate::task::{self, TaskPhase};

/// One task as its episode may see it.
#[derive(Debug, Clone)]
pub enum TaskView {
    /// Planning or running in this daemon now; nothing about its outcome is known yet.
    Running { skill_id: String },
    /// Committed: its result, read back from the store and checked as a replay is.
    Committed {
        skill_id: String,
        output: CallOutput,
    },
    /// Its intent is durable and its outcome is not, and no call of this daemon is running it
    /// (a daemon stopped or killed mid-effect): the effect may have run.
    Indeterminate {
        skill_id: String,
        effects: Vec<EffectSummary>,
    },
    /// An effect ran and was recorded, and the call was not committed to the log.
    Unrecorded {
        skill_id: String,
        records: Vec<Ref>,
        effects: Vec<EffectSummary>,
    },
    /// Its handler was never started (the call's deadline passed while its intent was
    /// journaled): nothing ran, nothing was spent, and the call was not committed.
    Withdrawn {
        skill_id: String,
        effects: Vec<EffectSummary>,
    },
}

impl TaskView {
    /// The tool the task called.
    pub fn skill_id(&self) -> &str {
        match self {
            TaskView::Running { skill_id }
            | TaskView::Committed { skill_id, .. }
            | TaskView::Indeterminate { skill_id, .. }
            | TaskView::Unrecorded { skill_id, .. }
            | TaskView::Withdrawn { skill_id, .. } => skill_id,
        }
    }
}

impl Coordinator {
    /// The task `task_id` of the session's episode on `surface`, or `None` when this episode
    /// has no such task (another episode's task with the same id is not this one). Runs
    /// nothing and writes nothing. A committed task whose entry no longer holds it is an
    /// error (`CallError::Store(Corrupt)`), never answered as committed.
    pub fn task_view(
        &self,
        session: &Session,
        surface: Surface,
        task_id: &str,
    ) -> Result<Option<TaskView>, CallError> {
        let episode = &session.episode;
        let key = surface.task_key(task_id);
        let running = self.running_attempt(surface, episode, task_id);
        let stored = self.store.read(|r| task::get(r, episode, &key))?;
        Ok(match (stored, running) {
            (None, None) => None,
            (None, Some(attempt)) => Some(TaskView::Running {
                skill_id: attempt.skill_id,
            }),
            (Some(state), running) => match state.phase {
                // Checked for the task asked about, not the id its stored state names.
                TaskPhase::Committed => Some(TaskView::Committed {
                    output: self
                        .replay_committed_as(&surface.invocation_id(episode, task_id), &state)?,
                    skill_id: state.skill_id,
                }),
                TaskPhase::Unrecorded => Some(TaskView::Unrecorded {
                    effects: self.summaries(&state.effect_records)?,
                    records: state.effect_records,
                    skill_id: state.skill_id,
                }),
                TaskPhase::Withdrawn => Some(TaskView::Withdrawn {
                    effects: self.summaries(&state.effect_records)?,
                    skill_id: state.skill_id,
                }),
                TaskPhase::Pending if running.is_some() => Some(TaskView::Running {
                    skill_id: state.skill_id,
                }),
                TaskPhase::Pending => Some(TaskView::Indeterminate {
                    effects: self.summaries(&state.effect_records)?,
                    skill_id: state.skill_id,
                }),
            },
        })
    }
}
