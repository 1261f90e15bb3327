//! What became of one task of an episode, read without running anything: the answer to an
//! A2A `GetTask` (`tasks/get`) and `CancelTask` (`tasks/cancel`).
//!
//! It joins the two places a call lives: the in-flight marks (a call planning or running in
//! this process) and the durable task state (its phase once an intent or a commit is on disk).

use super::{Attempt, CallError, CallOutput, Coordinator, EffectSummary, Surface};
use crate::object::Ref;
use crate::session::Session;
use crate::store::StoreError;
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
        let key = surface.task_key(task_id);
        let read = || self.store.read(|r| task::get(r, &session.episode, &key));
        self.task_view_reading(session, surface, task_id, read)
    }

    /// [`Coordinator::task_view`] with the task's state read by `read` (a test starts a call
    /// inside it, between the two looks at its mark).
    pub(super) fn task_view_reading(
        &self,
        session: &Session,
        surface: Surface,
        task_id: &str,
        read: impl FnOnce() -> Result<Option<task::TaskState>, StoreError>,
    ) -> Result<Option<TaskView>, CallError> {
        let episode = &session.episode;
        let (stored, running) = self.read_beside_mark(surface, episode, task_id, read);
        Ok(match (stored?, running) {
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

    /// `read` (what the store holds of a task), and the call running it in this daemon if any:
    /// its in-flight mark looked at before `read` and again after. Looked at only before, a
    /// queued call that claims its mark and journals its intent in between is read pending
    /// with no mark, and answered as a crash left it (terminal `failed`) while it runs; only
    /// after, one that committed and let go of its mark in between is read pending too.
    pub fn read_beside_mark<T>(
        &self,
        surface: Surface,
        episode: &str,
        task_id: &str,
        read: impl FnOnce() -> T,
    ) -> (T, Option<Attempt>) {
        let before = self.running_attempt(surface, episode, task_id);
        let value = read();
        let running = before.or_else(|| self.running_attempt(surface, episode, task_id));
        (value, running)
    }
}
