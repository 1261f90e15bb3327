//! Task ids: the idempotency keys of invocations within an episode.
//!
//! A task id names one invocation (`<surface>:<episode>:<task>`). Its state is written in the
//! same transactions as the journal and the log, so after a crash it says exactly what
//! happened: `pending` (the intent is durable, the commit is not), `committed` (the result can
//! be returned again without running anything) or `unrecorded` (an effect ran but the call was
//! not committed).

use serde::{Deserialize, Serialize};

use crate::canon::{CanonError, Members};
use crate::invocations::{self, Part};
use crate::object::Ref;
use crate::storage::{ReadCtx, StoreError, WriteCtx};

/// `[A-Za-z0-9._-]{1,128}`
pub fn valid_task_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskPhase {
    Pending,
    Committed,
    Unrecorded,
    /// Its handler was never started (the call's deadline passed while its intent was on its
    /// way to the disk, or the intent was committed but its sync failed): nothing ran, the
    /// intent's units were given back, and the call was not committed. Schema 6 and later.
    Withdrawn,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskState {
    pub invocation_id: String,
    pub skill_id: String,
    /// Ref of the canonical arguments: a reuse with other arguments is another call.
    pub input_ref: Ref,
    pub phase: TaskPhase,
    pub output_ref: Option<Ref>,
    pub entry_index: Option<u64>,
    pub world_ref: Option<Ref>,
    #[serde(default)]
    pub effect_records: Vec<Ref>,
}

impl TaskPhase {
    fn name(self) -> &'static str {
        match self {
            TaskPhase::Pending => "pending",
            TaskPhase::Committed => "committed",
            TaskPhase::Unrecorded => "unrecorded",
            TaskPhase::Withdrawn => "withdrawn",
        }
    }
}

impl TaskState {
    /// Canonical bytes, as stored (the canonical form of its serde value), written directly:
    /// the store's writer encodes one per call.
    pub fn to_bytes(&self) -> Result<Vec<u8>, CanonError> {
        let m = Members::new()
            .plain_array("effectRecords", &self.effect_records)
            .integer_or_null("entryIndex", self.entry_index)?
            .plain("inputRef", self.input_ref)
            .string("invocationId", &self.invocation_id)
            .plain_or_null("outputRef", self.output_ref)
            .plain("phase", self.phase.name())
            .string("skillId", &self.skill_id)
            .plain_or_null("worldRef", self.world_ref);
        Ok(m.finish().into_bytes())
    }
}

/// The invocation id a task key stands for: task keys are `<surface>:<task>` within an episode,
/// invocation ids `<surface>:<episode>:<task>`. Task state lives in the invocation's row.
pub(crate) fn invocation_key(episode: &str, task: &str) -> Result<String, StoreError> {
    let (surface, id) = task.split_once(':').ok_or_else(|| {
        StoreError::Corrupt(format!(
            "task key {task:?} does not start with its surface (\"mcp:\" or \"a2a:\")"
        ))
    })?;
    Ok(format!("{surface}:{episode}:{id}"))
}

pub fn get(r: &ReadCtx<'_>, episode: &str, task: &str) -> Result<Option<TaskState>, StoreError> {
    let id = invocation_key(episode, task)?;
    match invocations::get(r, &id)?.and_then(|row| row.task) {
        None => Ok(None),
        Some(b) => from_bytes(episode, task, b).map(Some),
    }
}

/// A task state from its stored bytes (a store's own, or the bytes a daemon served for it).
pub fn from_bytes(episode: &str, task: &str, bytes: &[u8]) -> Result<TaskState, StoreError> {
    // Written canonical by `put`; a typed parse straight from the bytes is all a read needs.
    serde_json::from_slice(bytes)
        .map_err(|_| StoreError::Corrupt(format!("task state {episode}/{task} is unreadable")))
}

pub fn get_w(
    w: &WriteCtx<'_, '_>,
    episode: &str,
    task: &str,
) -> Result<Option<TaskState>, StoreError> {
    get(&w.reader(), episode, task)
}

pub fn put(
    w: &mut WriteCtx<'_, '_>,
    episode: &str,
    task: &str,
    state: &TaskState,
) -> Result<(), StoreError> {
    let (id, bytes) = row_part(episode, task, state)?;
    // A pending task is written with its intent; any later phase resolves the invocation.
    match state.phase {
        TaskPhase::Pending => invocations::put_initial(w, &id, Part::Task, &bytes, None),
        _ => invocations::put_resolution(w, &id, Part::Task, &bytes),
    }
}

/// [`put`] of the first state of an invocation whose id this process minted for a call that
/// brought none (128 random bits) and which journals no intent: no row can hold the id yet,
/// so none is looked for.
pub(crate) fn put_minted(
    w: &mut WriteCtx<'_, '_>,
    episode: &str,
    task: &str,
    state: &TaskState,
) -> Result<(), StoreError> {
    let (id, bytes) = row_part(episode, task, state)?;
    invocations::minted(w, &id)?.put_initial(w, Part::Task, &bytes, None)
}

/// The invocation id a task state is kept under, and the state's bytes.
fn row_part(episode: &str, task: &str, state: &TaskState) -> Result<(String, Vec<u8>), StoreError> {
    Ok((invocation_key(episode, task)?, stored_bytes(state)?))
}

/// A task state's bytes as [`put`] stores them, for a writer that puts them into the
/// invocation's row itself (`journal::append_intent_with_task`).
pub(crate) fn stored_bytes(state: &TaskState) -> Result<Vec<u8>, StoreError> {
    state
        .to_bytes()
        .map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// Split an invocation id `<surface>:<episode>:<task>`.
pub fn split_invocation_id(id: &str) -> Option<(&str, &str, &str)> {
    let (surface, rest) = id.split_once(':')?;
    let (episode, task) = rest.split_once(':')?;
    Some((surface, episode, task))
}
