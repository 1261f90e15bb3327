//! A handler's run and its outcome as the broker records it: the owned job a runner thread
//! executes, the record and result a handler's answer settles into, and the outcome of a call
//! that is journaled without being committed (a post-effect failure, or a handler that
//! returned after its deadline).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::access;
use crate::broker::{EffectRecord, HandlerIdentity};
use crate::journal::{self, OutcomeStatus};
use crate::object::{sid, Object, Ref};
use crate::plan::PlannedEffect;
use crate::store::{Store, Submitted};
use crate::task::{self, TaskPhase, TaskState};

use super::{Busy, CallError, CallIds, EffectHandler, EffectRequest, HandlerOutcome, Overruns};

/// The most of a handler's failure message the broker passes on, in bytes: an
/// `Outcome::Failed` or `Indeterminate` message, the text of a panic in `execute`, a finish
/// function's error. Longer ones are cut (on a character's edge), saying how many bytes were
/// left out, before the daemon logs them (`effect failed: …`, `post-effect failure: …`), as
/// a plugin's own log messages are cut (`[limits] plugin_log_bytes`, 4096 by default). No
/// stored object keeps such a message: the effect record says only `failed` or
/// `indeterminate`.
pub(super) const MAX_MESSAGE_BYTES: usize = 4096;

/// The deepest an answer the broker commits may nest, counting the answer's own object as
/// level 1: a handler's output, a finish function's output, a preflight's decline. Every
/// reader of a committed answer (the MCP reply and the A2A task, which put it 3 and 7 levels
/// down, and the JSON parsers of the CLI and of clients, most of which stop at 128 levels)
/// can read it with room to spare. A deeper output is the handler's failure, before anything
/// is committed; a deeper decline is committed with a short answer in its place.
pub(super) const MAX_OUTPUT_DEPTH: usize = 100;

/// `message` cut to [`MAX_MESSAGE_BYTES`] (on a character's edge), saying how many bytes were
/// left out.
pub(super) fn cut_message(message: String) -> String {
    if message.len() <= MAX_MESSAGE_BYTES {
        return message;
    }
    let shown = dialect::quote::head(&message, MAX_MESSAGE_BYTES);
    format!(
        "{shown}… ({} bytes more; the broker passes on at most {MAX_MESSAGE_BYTES})",
        message.len() - shown.len()
    )
}

/// Whether `output` nests deeper than [`MAX_OUTPUT_DEPTH`] levels (itself level 1). Looks no
/// deeper than that, so that its own recursion is bounded whatever it is given.
pub(super) fn too_deep(output: &Map<String, Value>) -> bool {
    /// Whether the container `value`, with `left` more levels allowed for it and what it
    /// holds, goes past them.
    fn deeper(value: &Value, left: usize) -> bool {
        match value {
            Value::Array(items) => left == 0 || items.iter().any(|v| deeper(v, left - 1)),
            Value::Object(members) => left == 0 || members.values().any(|v| deeper(v, left - 1)),
            _ => false,
        }
    }
    output
        .values()
        .any(|v| deeper(v, MAX_OUTPUT_DEPTH.saturating_sub(1)))
}

/// Why an output nested past [`MAX_OUTPUT_DEPTH`] is not taken: `what` (e.g. "handler output")
/// and the limit.
pub(super) fn too_deep_message(what: &str) -> String {
    format!("{what} is nested more than {MAX_OUTPUT_DEPTH} levels deep; the limit is {MAX_OUTPUT_DEPTH}, so that every reader of the answer can read it")
}

/// One handler call, owned, so that it can outlive the caller's wait.
pub(super) struct HandlerJob {
    pub(super) handler: Arc<dyn EffectHandler>,
    pub(super) invocation_id: String,
    pub(super) episode: String,
    pub(super) worktree: Option<PathBuf>,
    pub(super) effect: Arc<PlannedEffect>,
    pub(super) deadline: Duration,
    /// The tool's finish function, run after a handler that succeeded, under the same
    /// deadline: it is the plugin's code too, and may hang like its handler.
    pub(super) finish: Option<FinishJob>,
}

/// A finish function to run on the handler's output: its name and the call's arguments.
pub(super) struct FinishJob {
    pub(super) name: String,
    pub(super) args: Value,
}

/// What a finish function made of the handler's output (never with the reserved `world`), or
/// why it made nothing.
pub(super) type Shaped = Result<Map<String, Value>, String>;

impl FinishJob {
    /// Run the finish function on `output`: a panic, an error (cut to [`MAX_MESSAGE_BYTES`]),
    /// a reserved `world` key or nesting past [`MAX_OUTPUT_DEPTH`] is why it made nothing.
    fn run(self, handler: &dyn EffectHandler, output: &Map<String, Value>) -> Shaped {
        let FinishJob { name, args } = self;
        let input = serde_json::json!({"args": args, "output": output});
        let shaped = catch_unwind(AssertUnwindSafe(|| handler.finish(&name, &input)))
            .map_err(|panic| format!("finish {name} panicked: {}", crate::panics::text(&*panic)))
            .and_then(|shaped| shaped)
            .map_err(cut_message)?;
        if shaped.contains_key("world") {
            return Err(format!(
                "finish {name} output carries the reserved key \"world\""
            ));
        }
        if too_deep(&shaped) {
            return Err(too_deep_message(&format!("finish {name} output")));
        }
        Ok(shaped)
    }
}

impl HandlerJob {
    pub(super) fn request(&self) -> EffectRequest<'_> {
        EffectRequest {
            invocation_id: &self.invocation_id,
            episode: &self.episode,
            worktree: self.worktree.as_deref(),
            effect: &self.effect.effect,
            scope: &self.effect.scope,
            cost: self.effect.cost,
            payload: &self.effect.payload,
            deadline: self.deadline,
        }
    }

    /// The handler's preflight: the declining output, or `None` to proceed. A panic proceeds:
    /// `execute` answers for it. A decline that claims the reserved `world` key stays a decline
    /// (the handler said "do not run this"): the member is dropped, as the committed answer
    /// puts the daemon's own there, and that is said once, naming the plugin.
    pub(super) fn preflight(self) -> Option<Map<String, Value>> {
        let request = self.request();
        let mut decline = catch_unwind(AssertUnwindSafe(|| self.handler.preflight(&request)))
            .ok()
            .flatten()?;
        if decline.remove("world").is_some() {
            let plugin = catch_unwind(AssertUnwindSafe(|| self.handler.identity()))
                .map_or_else(|_| "?".to_owned(), |id| id.plugin);
            tracing::warn!(
                invocation = %self.invocation_id,
                effect = %self.effect.effect,
                "plugin {plugin}'s preflight declined with the reserved key \"world\" in its answer; the member is dropped and the call stays declined"
            );
        }
        Some(decline)
    }

    /// Execute the handler, then the finish function (when the tool has one and the handler
    /// succeeded) on its output.
    pub(super) fn run(self) -> (HandlerOutcome, Option<Shaped>) {
        let request = self.request();
        // An in-process handler that panics must not take the daemon or the episode down.
        let outcome = match catch_unwind(AssertUnwindSafe(|| self.handler.execute(&request))) {
            Ok(HandlerOutcome::Ok(out)) if out.contains_key("world") => {
                HandlerOutcome::Failed("handler output carries the reserved key \"world\"".into())
            }
            Ok(HandlerOutcome::Ok(out)) if too_deep(&out) => {
                HandlerOutcome::Failed(too_deep_message("handler output"))
            }
            Ok(o) => o,
            Err(panic) => HandlerOutcome::Failed(format!(
                "handler panicked: {}",
                crate::panics::text(&*panic)
            )),
        };
        let shaped = match (&outcome, self.finish) {
            (HandlerOutcome::Ok(out), Some(finish)) => Some(finish.run(&*self.handler, out)),
            _ => None,
        };
        (outcome, shaped)
    }
}

/// What the runner needs to journal the outcome of a handler that overran its deadline.
pub(super) struct LateCall {
    pub(super) store: Store,
    pub(super) ids: CallIds,
    pub(super) effect: Arc<PlannedEffect>,
    pub(super) budget_before: u64,
    pub(super) request_ref: Ref,
    pub(super) overruns: Arc<Overruns>,
}

/// A handler's outcome and the identity of the plugin that ran it (`None`: no handler ran).
pub(super) type Ran = (HandlerOutcome, Option<HandlerIdentity>);

impl LateCall {
    /// The handler returned after its caller was answered: journal its outcome and record
    /// (the call stays uncommitted, as after any post-effect failure), then free the episode.
    pub(super) fn record(self, ran: Ran, busy: Busy) {
        self.journal(
            ran,
            "a handler that overran its deadline returned; its outcome is journaled and the call is not committed",
        );
        self.overruns.running.fetch_sub(1, Ordering::Relaxed);
        drop(busy);
    }

    /// The call's deadline was already due when its handler was to start (its intent is
    /// journaled): the handler is not started, the intent is closed withdrawn and its units
    /// given back (the call stays uncommitted, its record a failed effect that spent nothing),
    /// then the episode is freed. Whether the withdrawal was written: where it was not, the
    /// intent stays open, its units spent.
    pub(super) fn not_started(self, busy: Busy) -> bool {
        self.withdraw(busy, "the call's deadline passed before its handler could start; the handler was not started, the intent is journaled withdrawn with its units given back, and the call is not committed")
    }

    /// The intent was committed but its sync failed (`why`), so the call cannot be answered
    /// as journaled: the handler is not started, and the intent is closed withdrawn as in
    /// [`LateCall::not_started`] (the withdrawal's own sync makes the intent durable with it).
    /// Whether the withdrawal was written.
    pub(super) fn not_durable(self, busy: Busy, why: &CallError) -> bool {
        let what = format!("the store could not make the call's intent durable ({why}); the handler was not started, the intent is journaled withdrawn with its units given back, and the call is not committed");
        self.withdraw(busy, &what)
    }

    /// Close the intent withdrawn, saying `what` once written, then free the episode.
    fn withdraw(self, busy: Busy, what: &str) -> bool {
        let id = &self.ids.invocation_id;
        let (e, s, c) = (&self.effect.effect, &self.effect.scope, self.effect.cost);
        let record =
            EffectRecord::failed(e, s, c, self.budget_before, self.request_ref).not_spent();
        match record.canonical() {
            Ok(bytes) => {
                let record_obj = Object::new(sid::EFFECT_RECORD, "host/broker", bytes);
                let hash = record_obj.hash;
                // A failed write is logged by `write_unrecorded`, and leaves the intent open:
                // it was not withdrawn, so this line would say what did not happen.
                let written = write_unrecorded(
                    &self.store,
                    &self.ids,
                    OutcomeStatus::Withdrawn,
                    vec![record_obj],
                    hash,
                ) == Unrecorded::Written;
                if written {
                    tracing::warn!(invocation = %id, record = %hash, effect = %e, "{what}");
                }
                drop(busy);
                written
            }
            Err(err) => {
                tracing::error!(invocation = %id, "withdrawn call not recorded: {err}");
                drop(busy);
                false
            }
        }
    }

    /// Journal `ran` as the call's outcome and record, without a commit.
    fn journal(&self, ran: Ran, what: &str) {
        let id = &self.ids.invocation_id;
        match settle(id, &self.effect, self.budget_before, self.request_ref, ran) {
            Ok(s) => {
                let objects = std::iter::once(s.record_obj.clone())
                    .chain(s.result.map(|(obj, _)| obj))
                    .collect();
                write_unrecorded(&self.store, &self.ids, s.status, objects, s.record_obj.hash);
                tracing::warn!(invocation = %id, record = %s.record_obj.hash, "{what}");
            }
            Err(e) => tracing::error!(invocation = %id, "late handler outcome not recorded: {e}"),
        }
    }
}

/// One handler outcome as the broker records it.
pub(super) struct Settled {
    pub(super) record: EffectRecord,
    pub(super) record_obj: Object,
    pub(super) status: OutcomeStatus,
    /// When the handler succeeded: its result object, whose payload is the output's canonical
    /// JSON, and the output object itself.
    pub(super) result: Option<(Object, Map<String, Value>)>,
}

/// The effect record, the result object and the journal status of a handler outcome. An
/// output without a canonical form (e.g. an integer beyond 2^53) is the handler's failure: the
/// intent must still be closed with an outcome.
pub(super) fn settle(
    invocation_id: &str,
    effect: &PlannedEffect,
    budget_before: u64,
    request_ref: Ref,
    (outcome, ran_by): Ran,
) -> Result<Settled, CallError> {
    let (e, s, c) = (&effect.effect, &effect.scope, effect.cost);
    let outcome = match outcome {
        HandlerOutcome::Ok(out) => {
            let value = Value::Object(out);
            // Serialise the output once.
            match Object::json(sid::EFFECT_RESULT, "host/broker", &value) {
                Ok(result) => Ok((value, result)),
                Err(err) => Err((
                    OutcomeStatus::Failed,
                    format!("handler output has no canonical form: {err}"),
                )),
            }
        }
        HandlerOutcome::Failed(msg) => Err((OutcomeStatus::Failed, cut_message(msg))),
        HandlerOutcome::Indeterminate(msg) => Err((OutcomeStatus::Indeterminate, cut_message(msg))),
    };
    let (record, status, result) = match outcome {
        Ok((value, result)) => {
            let record = EffectRecord::succeeded(e, s, c, budget_before, request_ref, result.hash)
                .ran_by(ran_by);
            let out = match value {
                Value::Object(m) => m,
                _ => Map::new(),
            };
            (record, OutcomeStatus::Succeeded, Some((result, out)))
        }
        Err((status, msg)) => {
            let how = if status == OutcomeStatus::Indeterminate {
                "indeterminate"
            } else {
                "failed"
            };
            tracing::warn!(invocation = %invocation_id, effect = %e, "effect {how}: {msg}");
            let record = EffectRecord::failed(e, s, c, budget_before, request_ref).ran_by(ran_by);
            (record, status, None)
        }
    };
    let record_obj = Object::new(sid::EFFECT_RECORD, "host/broker", record.canonical()?);
    Ok(Settled {
        record,
        record_obj,
        status,
        result,
    })
}

/// How an outcome journaled without a commit went ([`submit_unrecorded`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unrecorded {
    /// The outcome and record are stored and the task says `unrecorded` (or `withdrawn`):
    /// durable, or committed with only the sync failing (the next sync makes them durable).
    Written,
    /// Nothing was written: the call's task already says `committed`. Its commit was made
    /// after all, and `unrecorded` must never replace it (the log holds its entry).
    Committed,
    /// Nothing was written: the intent stays open.
    Failed,
}

/// Make an effect's outcome and record durable without committing the call: the task state
/// says `unrecorded`. If even that fails, the intent stays open and its receipt says
/// indeterminate, which is the truth.
pub(super) fn write_unrecorded(
    store: &Store,
    ids: &CallIds,
    status: OutcomeStatus,
    objects: Vec<Object>,
    record: Ref,
) -> Unrecorded {
    let written = submit_unrecorded(store, ids, status, objects, record).wait();
    settle_unrecorded(ids, written)
}

/// [`write_unrecorded`], submitted. A task state already `committed` is left as it is and
/// nothing is written ([`Unrecorded::Committed`]).
pub(super) fn submit_unrecorded(
    store: &Store,
    ids: &CallIds,
    status: OutcomeStatus,
    objects: Vec<Object>,
    record: Ref,
) -> Submitted<Unrecorded, CallError> {
    let id = ids.invocation_id.clone();
    let episode = ids.episode.clone();
    let task = ids.task.clone();
    let state = TaskState {
        invocation_id: id.clone(),
        skill_id: ids.skill_id.clone(),
        input_ref: ids.input_ref,
        phase: match status {
            OutcomeStatus::Withdrawn => TaskPhase::Withdrawn,
            _ => TaskPhase::Unrecorded,
        },
        output_ref: None,
        entry_index: None,
        world_ref: None,
        effect_records: vec![record],
    };
    store.submit(move |w| -> Result<Unrecorded, CallError> {
        // A commit whose answer was lost or failed late may still have been made: its
        // committed task state and the entry it names stay the truth.
        if task::get_w(w, &episode, &task)?.is_some_and(|s| s.phase == TaskPhase::Committed) {
            return Ok(Unrecorded::Committed);
        }
        for o in &objects {
            w.put_object(o)?;
        }
        access::grant(w, &episode, &objects)?;
        if journal::state_in(w, &id)?.and_then(|s| s.status).is_none() {
            match status {
                OutcomeStatus::Withdrawn => journal::withdraw(w, &id, record)?,
                status => journal::append_outcome(w, &id, status, Some(record))?,
            };
        }
        task::put(w, &episode, &task, &state)?;
        Ok(Unrecorded::Written)
    })
}

/// The end of [`submit_unrecorded`]: a failure is logged, and the intent stays open. An
/// outcome committed whose sync failed is written: the next sync makes it durable.
pub(super) fn settle_unrecorded(
    ids: &CallIds,
    written: Result<Unrecorded, CallError>,
) -> Unrecorded {
    match written {
        Ok(Unrecorded::Committed) => {
            tracing::warn!(invocation = %ids.invocation_id, "the outcome is not recorded as unrecorded: the call's task already says committed, and its entry stands");
            Unrecorded::Committed
        }
        Ok(recorded) => recorded,
        Err(e) if e.committed_not_durable() => {
            tracing::warn!(invocation = %ids.invocation_id, "the outcome is recorded, not yet durable: {e}");
            Unrecorded::Written
        }
        Err(e) => {
            tracing::error!(invocation = %ids.invocation_id, "could not record the outcome: {e}");
            Unrecorded::Failed
        }
    }
}

/// The caller's answer after a post-effect failure: [`CallError::EffectsUnrecorded`] naming
/// `record` where the outcome and record were made durable on their own; where even that
/// failed (a store whose disk turned read-only, a map the result does not fit), the intent
/// stays open and the call is [`CallError::EffectUnrecordable`]: a record never stored is not
/// named, and the effect may have run. A call whose task says committed after all is
/// [`CallError::NotConfirmed`]: a resend of its task id replays it.
pub(super) fn unrecorded_error(recorded: Unrecorded, record: Ref) -> CallError {
    match recorded {
        Unrecorded::Written => CallError::EffectsUnrecorded {
            records: vec![record],
        },
        Unrecorded::Committed => CallError::NotConfirmed,
        Unrecorded::Failed => CallError::EffectUnrecordable,
    }
}
