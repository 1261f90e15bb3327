//! Calls, their results and their errors: what a surface hands the coordinator and what it
//! gets back.

use std::sync::Arc;

use serde_json::Value;

use crate::canon::CanonError;
use crate::journal::JournalError;
use crate::log::{self, LogError};
use crate::object::Ref;
use crate::registry::RegistryError;
use crate::session::Session;
use crate::store::StoreError;
use crate::task::TaskPhase;

use super::R8_MESSAGE;

/// The surface a call came through; it names invocation ids and `writtenBy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    Mcp,
    A2a,
}

impl Surface {
    pub fn prefix(self) -> &'static str {
        match self {
            Surface::Mcp => "mcp",
            Surface::A2a => "a2a",
        }
    }

    /// `<surface>:<episode>:<task>`: the invocation id of the call with task id `task`
    /// ([`crate::task::split_invocation_id`] reads it back).
    pub fn invocation_id(self, episode: &str, task: &str) -> String {
        format!("{}:{episode}:{task}", self.prefix())
    }

    /// `<surface>:<task>`: where the task is kept in its episode's tasks (task ids are per
    /// surface: an A2A task id and an MCP key never collide).
    pub fn task_key(self, task: &str) -> String {
        format!("{}:{task}", self.prefix())
    }

    /// `coordinator:a2a` for both surfaces, as seed 004 says: the invocation id tells them
    /// apart.
    pub fn written_by(self) -> &'static str {
        log::COORDINATOR_WRITER
    }
}

/// One tool call.
#[derive(Debug, Clone)]
pub struct Call {
    pub surface: Surface,
    /// Shared, not copied: a surface hands on the session its request authenticated.
    pub session: Arc<Session>,
    pub skill_id: String,
    /// The idempotency key within the episode; `None` mints a fresh random one.
    pub task_id: Option<String>,
    pub args: Value,
    /// Optional pin of the exact transition document.
    pub transition_fn: Option<Ref>,
}

/// The effect of a call, as reported back to surfaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectSummary {
    pub id: String,
    pub effect: String,
    pub status: String,
    pub record: Ref,
    pub budget_after: u64,
    pub denial: Option<String>,
}

/// What became of a call, as its task state says ([`Reconciliation::state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallState {
    /// In the log: the result can be fetched again.
    Committed,
    /// The effect's intent is durable, its outcome is not: it may have run.
    Indeterminate,
    /// An effect ran and was recorded, but the call was not committed.
    Unrecorded,
    /// Its handler was never started (its deadline passed while its intent was written):
    /// nothing ran or stays spent, nothing was committed, and its key stays used.
    Withdrawn,
}

impl CallState {
    /// The state as the reconciliation routes and `worldd calls get` name it.
    pub fn as_str(self) -> &'static str {
        match self {
            CallState::Committed => "committed",
            CallState::Indeterminate => "indeterminate",
            CallState::Unrecorded => "unrecorded",
            CallState::Withdrawn => "withdrawn",
        }
    }

    /// What became of a call, as its task phase says: the one reading of a phase that the
    /// reconciliation routes and `worldd why` of a store share.
    pub fn of(phase: TaskPhase) -> CallState {
        match phase {
            TaskPhase::Committed => CallState::Committed,
            TaskPhase::Unrecorded => CallState::Unrecorded,
            TaskPhase::Withdrawn => CallState::Withdrawn,
            TaskPhase::Pending => CallState::Indeterminate,
        }
    }
}

/// What is known of one call, for an agent asking "did my call land?".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reconciliation {
    pub invocation_id: String,
    pub skill_id: String,
    pub state: CallState,
    pub entry_index: Option<u64>,
    pub output_ref: Option<Ref>,
    pub world_ref: Option<Ref>,
    pub effects: Vec<EffectSummary>,
}

/// One grant's budget in the episode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetLine {
    pub effect: String,
    pub scope: String,
    pub granted: u64,
    pub spent: u64,
    pub remaining: u64,
    /// `now < expiresAt`.
    pub live: bool,
}

/// A committed call.
#[derive(Debug, Clone)]
pub struct CallOutput {
    pub invocation_id: String,
    /// Exactly the committed output bytes (canonical JSON); `sha256(output) == output_ref`.
    pub output: Vec<u8>,
    pub output_ref: Ref,
    pub entry_index: u64,
    pub world_ref: Ref,
    /// True when a committed task id was resent and nothing ran.
    pub replayed: bool,
    pub effects: Vec<EffectSummary>,
}

#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("invalid params: task id must be 1-128 characters of A-Z a-z 0-9 . _ -")]
    InvalidTaskId,
    #[error("invalid params: {0}")]
    InvalidArguments(String),
    #[error("not authorized")]
    NotAuthorized,
    #[error("proposal does not match the registered transition")]
    PinMismatch,
    #[error("task id already used in this session")]
    TaskIdReused,
    /// The call is known not committed, and its intent may stay open with its units spent (its
    /// withdrawal could not be written): a first attempt's answer.
    #[error("invocation was not committed; send a new task id")]
    NotCommitted,
    /// A resend whose key's first call is pending (its intent open, no outcome): the same
    /// words as [`CallError::NotCommitted`], its own variant because only a resend stores and
    /// spends nothing (the daemon throttles its log lines as it does a reused key's).
    #[error("invocation was not committed; send a new task id")]
    KeyPending,
    /// The call's intent was committed, but the store could not make it durable (its sync
    /// failed): the handler was never started, the intent is closed withdrawn with its units
    /// given back, and the call is not committed (its task `withdrawn`, its key used). Known not
    /// committed, for the store's fault, not a deadline: the seed's words for that.
    #[error("invocation was not committed; send a new task id")]
    IntentNotDurable,
    #[error("{R8_MESSAGE}")]
    NoHandler,
    /// Rule R8 for a worktree-scoped effect: the handler is loaded, but the episode has no
    /// worktree (no directory named for it in the workspace root, or a symbolic link, a file,
    /// a FIFO or a socket there); the text says which ([`crate::coordinator::worktree_of`]).
    /// It names that cause alone: R8's text before it sent operators reading the log looking
    /// for a missing plugin. The A2A refusal, whose text the contract fixes (R8's), puts R8's
    /// text before it.
    #[error("{0}")]
    NoWorktree(String),
    #[error("no world is selected; commit a genesis world first")]
    NoWorld,
    /// The credential's refusals and denials outran its rate ([`crate::refusal_rate`]).
    #[error("host callback capacity exceeded")]
    RefusalRate,
    /// The store is past its reserve: new calls are refused before anything is written.
    #[error("{}", crate::capacity::Full::AGENT_MESSAGE)]
    StoreFull(crate::capacity::Full),
    #[error("effects were requested but the invocation was not confirmed committed; effect records: {}", join_refs(.records))]
    EffectsUnrecorded { records: Vec<Ref> },
    /// An effect ran, and then neither the call's commit nor its outcome and record on their
    /// own could be stored (a disk turned read-only, a map the result does not fit). Its intent
    /// stays open, so a resend and reconciliation say pending; no record is named, since none
    /// was stored. Said as [`CallError::EffectsUnrecorded`] begins, so that an agent never
    /// takes it for a call that did not run (the seed's "not committed; send a new task id"
    /// would have it run a write twice).
    #[error("effects were requested but the invocation was not confirmed committed, and its outcome could not be stored: the effect may have run; check what it changed before sending it again")]
    EffectUnrecordable,
    /// The call's commit was made (its entry is in the log and its task says committed), but
    /// the store's sync that was to make it durable failed: a later commit synced makes
    /// it durable, and a resend of the same task id then replays it (only a power cut or the
    /// disk before then can take it back, and the resend then finds the intent open). Never
    /// "send a new task id": the effect ran and was committed. The seed's words for an outcome
    /// not confirmed.
    #[error("invocation outcome is not confirmed; resend the same task id")]
    NotConfirmed,
    /// The handler overran the call's deadline: its intent is journaled; its outcome and record
    /// are journaled when it returns, and the call is never committed to the log.
    #[error("the call's deadline ran out for its handler: it overran (its outcome is journaled when it returns and the call is not committed)")]
    HandlerTimedOut,
    /// The call's deadline passed while its intent was on its way to the disk: the handler was
    /// not started, the intent is closed withdrawn with its units given back, and the call is
    /// not committed (its task `withdrawn`). Unlike [`CallError::NoTimeToStart`] the task id
    /// stays used: a resend of it gets this again.
    #[error("the call's deadline passed while its intent was journaled: its handler was not started, nothing was spent, and the call was not committed; its key stays used: send it again under another key")]
    NotStarted,
    /// A resend of a call that was withdrawn at its deadline ([`CallError::NotStarted`]):
    /// nothing ran and nothing was spent, and its key is used for good. Its own variant, so
    /// that only a resend is answered "already used" (a first attempt can meet
    /// [`CallError::NotStarted`] itself, when its intent's sync returns just after the
    /// deadline).
    #[error("the first call with this key was withdrawn at its deadline: its handler was never started, nothing ran and nothing was spent; its key stays used: send it again under another key")]
    Withdrawn,
    /// Too little of the caller's deadline was left to start the handler
    /// ([`super::MIN_HANDLER_TIME`]): refused before its intent, nothing journaled or spent, the
    /// task id left free. Unlike [`CallError::HandlerTimedOut`], nothing can have run.
    #[error("too little of the call's deadline was left to start its handler (under {} ms): nothing was journaled or spent, and its task id is free", super::MIN_HANDLER_TIME.as_millis())]
    NoTimeToStart,
    /// The handler's preflight overran the call's deadline: nothing was journaled or spent
    /// and the task id is free (a preflight runs no effect); the episode stays busy until the
    /// preflight returns.
    #[error("the handler's preflight overran the call's deadline: nothing was journaled or spent, and its task id is free")]
    PreflightTimedOut,
    #[error("store failure: {0}")]
    Store(#[from] StoreError),
    /// The registry could not be read for a reason other than the store's (whose failures are
    /// [`CallError::Store`]): a damaged revision or transition document.
    #[error("transition registry is unreadable: {0}")]
    Registry(#[source] RegistryError),
    /// The log refused or could not read what the coordinator asked of it, for a reason other
    /// than the store's ([`CallError::Store`]) or a missing genesis ([`CallError::NoWorld`]).
    /// Said as [`CallError::Internal`] is, which it was before it kept its cause.
    #[error("internal error: {0}")]
    Log(#[source] LogError),
    /// The journal refused what the coordinator asked of it (an intent twice, a budget spent
    /// under it, a damaged row), for a reason other than the store's ([`CallError::Store`]).
    /// Said as [`CallError::Internal`] is.
    #[error("internal error: {0}")]
    Journal(#[source] JournalError),
    /// A document the coordinator builds itself has no canonical form: the host's fault. (The
    /// arguments are canonicalised first, in admission, where a failure is `InvalidArguments`;
    /// later canonical-form failures must never look like a bad request, which promises that
    /// nothing ran.) Said as [`CallError::Internal`] is.
    #[error("internal error: no canonical form: {0}")]
    Canon(#[source] CanonError),
    /// A fault the coordinator can only describe (a poisoned lock, a committed task without
    /// its refs): no typed cause to keep.
    #[error("internal error: {0}")]
    Internal(String),
}

impl CallError {
    /// A store error for a write that was committed, only its sync failing
    /// ([`StoreError::NotDurable`]): not "nothing was written".
    pub(crate) fn committed_not_durable(&self) -> bool {
        matches!(self, CallError::Store(e) if e.committed_not_durable())
    }
}

fn join_refs(refs: &[Ref]) -> String {
    refs.iter()
        .map(Ref::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

impl From<LogError> for CallError {
    fn from(e: LogError) -> Self {
        match e {
            LogError::Store(s) => CallError::Store(s),
            LogError::NoHead => CallError::NoWorld,
            other => CallError::Log(other),
        }
    }
}

impl From<JournalError> for CallError {
    fn from(e: JournalError) -> Self {
        match e {
            JournalError::Store(s) => CallError::Store(s),
            other => CallError::Journal(other),
        }
    }
}

impl From<CanonError> for CallError {
    fn from(e: CanonError) -> Self {
        CallError::Canon(e)
    }
}

impl From<RegistryError> for CallError {
    fn from(e: RegistryError) -> Self {
        match e {
            RegistryError::Store(s) => CallError::Store(s),
            other => CallError::Registry(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    /// Each typed variant reads as the text it was flattened to before it kept its cause (the
    /// operators' log and every answer that quotes it), and hands the cause on as its source.
    #[test]
    fn typed_causes_read_as_their_flattened_text_and_are_kept_as_sources() {
        let log = CallError::from(LogError::Corrupt("entry 3".into()));
        assert!(
            matches!(log, CallError::Log(LogError::Corrupt(_))),
            "{log:?}"
        );
        assert_eq!(log.to_string(), "internal error: log is damaged: entry 3");
        let source = log.source().and_then(|s| s.downcast_ref::<LogError>());
        assert!(matches!(source, Some(LogError::Corrupt(w)) if w == "entry 3"));

        let journal = CallError::from(JournalError::BudgetExhausted {
            remaining: 0,
            cost: 2,
        });
        assert!(matches!(journal, CallError::Journal(_)), "{journal:?}");
        assert_eq!(
            journal.to_string(),
            "internal error: budget exhausted: 0 unit(s) left, 2 needed"
        );
        let source = journal
            .source()
            .and_then(|s| s.downcast_ref::<JournalError>());
        assert!(matches!(
            source,
            Some(JournalError::BudgetExhausted {
                remaining: 0,
                cost: 2
            })
        ));

        let canon = CallError::from(CanonError::NonFinite);
        assert_eq!(
            canon.to_string(),
            "internal error: no canonical form: non-finite number (NaN or infinity) has no JSON form"
        );
        let source = canon.source().and_then(|s| s.downcast_ref::<CanonError>());
        assert_eq!(source, Some(&CanonError::NonFinite));

        let registry = CallError::from(RegistryError::Duplicate("ailang-read".into()));
        assert_eq!(
            registry.to_string(),
            "transition registry is unreadable: duplicate transition id \"ailang-read\" in one publication"
        );
        let source = registry
            .source()
            .and_then(|s| s.downcast_ref::<RegistryError>());
        assert!(matches!(source, Some(RegistryError::Duplicate(id)) if id == "ailang-read"));
    }

    /// The store's failures stay `Store` whichever layer met them, and a log without a genesis
    /// is `NoWorld`: only the other causes take the typed variants.
    #[test]
    fn store_failures_and_a_missing_genesis_keep_their_own_variants() {
        let store = || StoreError::MapResized;
        assert!(matches!(
            CallError::from(LogError::Store(store())),
            CallError::Store(StoreError::MapResized)
        ));
        assert!(matches!(
            CallError::from(JournalError::Store(store())),
            CallError::Store(StoreError::MapResized)
        ));
        assert!(matches!(
            CallError::from(RegistryError::Store(store())),
            CallError::Store(StoreError::MapResized)
        ));
        assert!(matches!(
            CallError::from(LogError::NoHead),
            CallError::NoWorld
        ));
    }
}
