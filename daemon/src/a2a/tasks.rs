//! `tasks/get` and `tasks/cancel` (A2A 0.3), `GetTask` and `CancelTask` (1.0): a task read
//! back by its id, in the caller's episode only, without running anything.
//!
//! A task is a call made through `/a2a/`; its id is the one the send answered with (the
//! idempotency key). What the answer says:
//!
//! | the call | state (0.3 / 1.0) | artifacts |
//! |---|---|---|
//! | planning or running now | `working` / `TASK_STATE_WORKING` | none |
//! | committed | by its outcome, as the message methods answer (`completed`, `rejected`, `failed`; a `tasks/send` task too: the id names the call, not its method) | the committed output |
//! | its intent durable, its outcome not, nothing running it | `failed` / `TASK_STATE_FAILED`, outcome `indeterminate:pending` | none |
//! | an effect recorded, the call not committed | `failed` / `TASK_STATE_FAILED`, outcome `indeterminate:unrecorded` | none |
//! | none in this episode | `-32001 Task not found` | |
//!
//! No call can be canceled once sent (a handler runs to its end and its call commits), so
//! `tasks/cancel` of a task that exists is `-32002 Task cannot be canceled`, saying why.
//! No history is kept: `historyLength` is accepted and every task's history is empty. The
//! `contextId` of a task read back is the episode, as every send answered (the one context of
//! a session's tasks: a send naming another is refused).

use axum::response::Response;
use broker_core::coordinator::{CallError, EffectSummary, Surface, TaskView};
use broker_core::object::Ref;
use broker_core::session::Session;
use broker_core::store::StoreError;
use handler_api::EffectClass;
use serde_json::{json, Value};

use super::errors::{error_info, error_with_data, rpc_error};
use super::params::{count_at, string_at};
use super::task::{committed_task, open_task, rpc_result};
use super::version::{Method, TaskRead};
use crate::outcome::{self, Outcome};
use crate::state::AppState;
use crate::tools;

/// Answer a `tasks/get`, `tasks/cancel`, `GetTask` or `CancelTask`; `shape` is the version's
/// send method, whose task shape the answer takes.
pub(super) async fn answer(
    state: &AppState,
    session: &Session,
    id: &Value,
    read: TaskRead,
    shape: Method,
    params: &Value,
) -> Response {
    let task_id = match task_id_of(read, params) {
        Ok(t) => t,
        Err(why) => {
            return error_with_data(
                id,
                -32602,
                "invalid params".into(),
                json!({ "why": why }),
                shape.version(),
            )
        }
    };
    let context_id = session.episode.as_str();
    let (view, class) = match looked_up(state, session, id, &task_id).await {
        Ok(Found::Task(view, class)) => (view, class),
        // Held behind its episode's running call, nothing of it journaled yet: submitted.
        Ok(Found::Queued) if read == TaskRead::Cancel => return not_cancelable(id, &task_id, None),
        Ok(Found::Queued) => {
            let task = open_task(
                shape,
                &task_id,
                context_id,
                ("submitted", "TASK_STATE_SUBMITTED"),
                json!({ "invocation_id": invocation_id(session, &task_id),
                        "outcome": Outcome::indeterminate("in-flight").to_json() }),
                Some("the daemon holds this task behind its episode's running call and has journaled nothing of it yet; it runs next while your request is open (one that left drops it, and it never ran): read it again later, and do not send it again under another id"),
            );
            return rpc_result(id, task);
        }
        Err(answer) => return answer,
    };
    if read == TaskRead::Cancel {
        return not_cancelable(id, &task_id, Some(&view));
    }
    let task = match &view {
        TaskView::Committed { output, .. } => {
            let outcome = outcome::of_output(output, class);
            return match committed_task(shape, &task_id, context_id, output, &outcome) {
                // A read-back ran nothing and costs nothing to ask again: past the budget it
                // gets the 503 as before, never a withheld form (which the budget counts
                // outside the credential's share).
                Ok(task) => rpc_result(id, task.result(false)),
                Err(answer) => rpc_error(id, -32603, answer),
            };
        }
        TaskView::Running { .. } => open_task(
            shape,
            &task_id,
            context_id,
            ("working", "TASK_STATE_WORKING"),
            json!({ "invocation_id": invocation_id(session, &task_id) }),
            None,
        ),
        TaskView::Indeterminate { effects, .. } => {
            ended_uncommitted(shape, session, &task_id, effects, None)
        }
        TaskView::Unrecorded {
            effects, records, ..
        } => ended_uncommitted(shape, session, &task_id, effects, Some(records)),
        TaskView::Withdrawn { effects, .. } => withdrawn(shape, session, &task_id, effects),
    };
    rpc_result(id, task)
}

/// The answer to a 1.0 message whose `taskId` names a task other than the one its message id
/// starts: every task here takes one message and ends, so an existing task is `-32004` (it
/// takes no further message), and one that does not exist `-32001` (a client does not choose
/// a new task's id, A2A 1.0 3.4.2). Nothing runs.
pub(super) async fn continued(
    state: &AppState,
    session: &Session,
    id: &Value,
    task_id: &str,
) -> Response {
    let why = match looked_up(state, session, id, task_id).await {
        Ok(Found::Task(TaskView::Running { .. }, _) | Found::Queued) => "the task is still running and takes no further message: each task here is one call; send a new message (a new messageId, no taskId)",
        Ok(_) => "the task has ended (its state is terminal) and takes no further message: each task here is one call; send a new message (a new messageId, no taskId)",
        Err(answer) => return answer,
    };
    error_info(
        id,
        -32004,
        "This operation is not supported",
        "UNSUPPORTED_OPERATION",
        &[("taskId", task_id), ("why", why)],
    )
}

/// What the daemon knows of a task of the caller's episode.
enum Found {
    /// Journaled: its view, and the class of the tool it called.
    Task(TaskView, EffectClass),
    /// Held in its episode's queue, nothing of it journaled yet
    /// ([`crate::admission::Admission::holds`]).
    Queued,
}

/// The task `task_id` of the caller's episode, or the answer when there is none (`-32001`, an
/// id no call could have had included) or it cannot be read (`-32603`; a committed task its
/// entry no longer holds is named damaged).
async fn looked_up(
    state: &AppState,
    session: &Session,
    id: &Value,
    task_id: &str,
) -> Result<Found, Response> {
    if !broker_core::task::valid_task_id(task_id) {
        return Err(not_found(id, task_id));
    }
    let s = state.clone();
    let who = session.clone();
    let t = task_id.to_owned();
    let found = crate::durable_answers::spawn_read(move || {
        let view = s.coordinator().task_view(&who, Surface::A2a, &t)?;
        let class = view.as_ref().map(|v| tools::class_of(&s, v.skill_id()));
        Ok::<_, CallError>(view.zip(class))
    })
    .await;
    let unavailable = |e: &dyn std::fmt::Display| {
        tracing::error!("a2a task read: {e}");
        rpc_error(
            id,
            -32603,
            "transition invocation is not available in this daemon",
        )
    };
    match found {
        Ok(Ok(Some((view, class)))) => Ok(Found::Task(view, class)),
        Ok(Ok(None))
            if state
                .admission()
                .holds(&session.episode, &invocation_id(session, task_id)) =>
        {
            Ok(Found::Queued)
        }
        // A store rolled back under the daemon may lack tasks it acknowledged: "never sent"
        // would tell the client to send it again, and run its effect twice.
        Ok(Ok(None)) if state.store().rolled_back() => Err(rpc_error(
            id,
            -32603,
            crate::reconcile::rolled_back_absent_text(&invocation_id(session, task_id)),
        )),
        Ok(Ok(None)) => Err(not_found(id, task_id)),
        Ok(Err(CallError::Store(StoreError::Corrupt(what)))) => {
            let invocation = invocation_id(session, task_id);
            let message = format!("task {invocation} is damaged: {what}; it is not answered as committed (run worldd doctor, and restore the store from a backup)");
            tracing::error!("{message}");
            Err(rpc_error(id, -32603, message))
        }
        Ok(Err(e)) => Err(unavailable(&e)),
        Err(e) => Err(unavailable(&e)),
    }
}

/// A task whose effect may have run and which was not committed: its intent alone is
/// durable (`records` none: `indeterminate` / `pending`), or its effect's records are
/// (`unrecorded`). Failed, with what to do in its status message.
fn ended_uncommitted(
    shape: Method,
    session: &Session,
    task_id: &str,
    effects: &[EffectSummary],
    records: Option<&[Ref]>,
) -> Value {
    let (outcome, why) = match records {
        None => (
            Outcome::indeterminate("pending"),
            "the effect's intent is durable and its outcome is not: it may have run, and no call is running it now; do not resend it, read the worktree (or the effect's record) first",
        ),
        Some(_) => (
            Outcome::indeterminate("unrecorded"),
            "effects were requested but the invocation was not confirmed committed: an effect ran and was recorded; do not resend it, read its records first",
        ),
    };
    failed_task(shape, session, task_id, effects, records, outcome, why)
}

/// A task whose handler was never started: failed, nothing ran or was spent, and its id is
/// used (a resend of it is answered the same way): a new task runs it.
fn withdrawn(shape: Method, session: &Session, task_id: &str, effects: &[EffectSummary]) -> Value {
    failed_task(
        shape,
        session,
        task_id,
        effects,
        None,
        Outcome::too_late(),
        WITHDRAWN,
    )
}

/// A task that ended without a commit: failed, its effects (and records) and classification in
/// its metadata, `why` its status message.
fn failed_task(
    shape: Method,
    session: &Session,
    task_id: &str,
    effects: &[EffectSummary],
    records: Option<&[Ref]>,
    outcome: Outcome,
    why: &str,
) -> Value {
    let mut metadata = json!({
        "invocation_id": invocation_id(session, task_id),
        "effects": outcome::effects_json(effects),
    });
    if let Some(records) = records {
        metadata["records"] = json!(records);
    }
    metadata["outcome"] = outcome.to_json();
    open_task(
        shape,
        task_id,
        &session.episode,
        ("failed", "TASK_STATE_FAILED"),
        metadata,
        Some(why),
    )
}

/// What a task whose handler was never started says.
const WITHDRAWN: &str = "the call's deadline passed while its intent was being written, so its handler was never started: nothing ran, nothing was spent, and nothing was committed; send it again as a new task";

/// `params.id`, and for a read, a `historyLength` that is a count if present.
fn task_id_of(read: TaskRead, params: &Value) -> Result<String, String> {
    if !params.is_object() {
        return Err("params must be an object with the task's \"id\"".into());
    }
    let task_id = string_at(params, "id", "params.id")?;
    // Not echoed back in a `Task not found` (a 900 KB id made a 900 KB answer): no task can
    // have it. A shorter id that is no task id's is simply not found.
    if task_id.chars().count() > MAX_TASK_ID_CHARS {
        return Err(too_long("params.id"));
    }
    if read == TaskRead::Get {
        count_at(params.get("historyLength"), "params.historyLength")?;
    }
    Ok(task_id)
}

/// The most characters of a task id ([`broker_core::task::valid_task_id`]).
pub(super) const MAX_TASK_ID_CHARS: usize = 128;

/// Why a task id sent at `at` names no task: it is longer than any task id.
pub(super) fn too_long(at: &str) -> String {
    format!("{at} is longer than any task id: a task id is 1-{MAX_TASK_ID_CHARS} characters of A-Z a-z 0-9 . _ -")
}

fn invocation_id(session: &Session, task_id: &str) -> String {
    Surface::A2a.invocation_id(&session.episode, task_id)
}

/// `-32001 Task not found`: no task of this id in the caller's episode (another episode's
/// task of the same id is not the caller's to learn of).
fn not_found(id: &Value, task_id: &str) -> Response {
    error_info(
        id,
        -32001,
        "Task not found",
        "TASK_NOT_FOUND",
        &[
            ("taskId", task_id),
            (
                "why",
                "no task with this id was sent in this session's episode",
            ),
        ],
    )
}

/// `-32002 Task cannot be canceled`, with why for the task's state (`None`: queued).
fn not_cancelable(id: &Value, task_id: &str, view: Option<&TaskView>) -> Response {
    let why = match view {
        None => "a call cannot be canceled once sent: this one waits behind its episode's running call, then runs to its end and commits while your request is open (one that left drops it before it runs); read it again with tasks/get (GetTask)",
        Some(TaskView::Running { .. }) => "a call cannot be canceled once sent: its handler runs to its end and the call commits; read it again with tasks/get (GetTask)",
        Some(TaskView::Committed { .. }) => "the task is committed: its result is in the log",
        Some(TaskView::Indeterminate { .. } | TaskView::Unrecorded { .. }) => {
            "the task has ended: its effect may have run, and nothing is running it"
        }
        Some(TaskView::Withdrawn { .. }) => {
            "the task has ended: its handler was never started, and nothing ran"
        }
    };
    error_info(
        id,
        -32002,
        "Task cannot be canceled",
        "TASK_NOT_CANCELABLE",
        &[("taskId", task_id), ("why", why)],
    )
}
