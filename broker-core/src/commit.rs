//! Client-built commits (`POST /v1/commit`) and their receipts.
//!
//! A REST commit carries the whole entry, the next world and the objects it names. Unlike the
//! reference, the store recomputes and checks every hash and link ([`crate::log::commit_exact`])
//! and the head must be the client's `observedHead` (compare-and-swap). A commit that names an
//! invocation id (`rest:<id>`) journals its intent first and its outcome in the commit's own
//! transaction, so `GET /v1/receipts/rest:<id>` answers `resolved` exactly when it landed,
//! and `not-started` otherwise (intent, commit and outcome share one transaction, so a
//! refused commit leaves no trace). Resending the same id with the same commit is an
//! idempotent no-op.

use crate::journal::{self, Intent, JournalError, OutcomeStatus, Receipt};
use crate::log::{self, Committed, Entry, LogError, World};
use crate::object::{Object, Ref};
use crate::store::{Store, StoreError};

/// The effect name REST intents are journaled under (cost 0: commits spend no budget).
pub const REST_EFFECT: &str = "World.Commit";
/// The journal "episode" of REST commits: not a valid episode name, so it never collides.
pub const REST_EPISODE: &str = "<rest>";

#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error("invocationId must start with \"rest:\"")]
    BadInvocationId,
    #[error("invocation id {0} was already used for another commit")]
    Reused(String),
    #[error(transparent)]
    Log(LogError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("journal: {0}")]
    Journal(String),
}

impl From<LogError> for CommitError {
    fn from(e: LogError) -> Self {
        match e {
            LogError::Store(s) => CommitError::Store(s),
            other => CommitError::Log(other),
        }
    }
}

impl From<JournalError> for CommitError {
    fn from(e: JournalError) -> Self {
        match e {
            JournalError::Store(s) => CommitError::Store(s),
            other => CommitError::Journal(other.to_string()),
        }
    }
}

/// A client-built commit.
#[derive(Debug, Clone)]
pub struct RestCommit {
    pub invocation_id: Option<String>,
    pub observed_head: Option<Ref>,
    pub objects: Vec<Object>,
    pub entry: Entry,
    pub world: World,
    pub world_ref: Ref,
}

impl RestCommit {
    /// What the intent promises: this entry selecting this world. (The observed head is not
    /// part of it: a commit refused for a stale head may be resent against the new head.)
    fn request_ref(&self) -> Ref {
        let text = format!("{}|{}", self.entry.entry_hash, self.world_ref);
        Ref::of(text.as_bytes())
    }
}

/// Apply a REST commit; returns the selected world ref.
///
/// With an invocation id, the intent, the commit and the outcome are written in ONE
/// transaction: the receipt says `resolved` exactly when the commit landed, and a commit that
/// was refused (a stale head, a bad hash) leaves nothing behind, so the id can be used again
/// for a commit rebuilt on the new head.
pub fn rest_commit(store: &Store, commit: RestCommit) -> Result<Ref, CommitError> {
    // The commit must be self-consistent before anything else, including an idempotent resend.
    if !commit.entry.hash_is_valid() {
        return Err(CommitError::Log(LogError::Invalid(format!(
            "entryHash {} does not match the recomputed {}",
            commit.entry.entry_hash,
            Entry::compute_hash(&commit.entry.header, &commit.entry.transition_ref)
        ))));
    }
    if commit.world.reference() != commit.world_ref {
        return Err(CommitError::Log(LogError::Invalid(format!(
            "world ref {} does not match the recomputed {}",
            commit.world_ref,
            commit.world.reference()
        ))));
    }
    if let Some(id) = &commit.invocation_id {
        if id.strip_prefix("rest:").is_none_or(str::is_empty) {
            return Err(CommitError::BadInvocationId);
        }
    }
    let request_ref = commit.request_ref();
    store.write(move |w| -> Result<Ref, CommitError> {
        let c = &commit;
        if let Some(id) = &c.invocation_id {
            if let Some(state) = journal::state_in(w, id)? {
                if state.intent.request_ref != request_ref {
                    return Err(CommitError::Reused(id.clone()));
                }
                if state.status == Some(OutcomeStatus::Committed) {
                    return Ok(c.world_ref);
                }
            }
        }
        let committed: Committed = log::commit_exact(
            w,
            &c.objects,
            c.observed_head,
            &c.entry,
            &c.world,
            &c.world_ref,
        )?;
        if let Some(id) = &c.invocation_id {
            if journal::state_in(w, id)?.is_none() {
                let intent = Intent {
                    invocation_id: id.clone(),
                    // REST commits belong to no episode; cost 0 keeps every counter unchanged.
                    episode: REST_EPISODE.into(),
                    effect: REST_EFFECT.into(),
                    scope: "rest".into(),
                    cost: 0,
                    request_ref,
                };
                journal::append_intent(w, &intent, 0)?;
            }
            journal::append_outcome(w, id, OutcomeStatus::Committed, Some(committed.world_ref))?;
        }
        Ok(committed.world_ref)
    })
}

/// The receipt of a `rest:` invocation id.
pub fn receipt(store: &Store, id: &str) -> Result<Receipt, CommitError> {
    if !id.starts_with("rest:") {
        return Err(CommitError::BadInvocationId);
    }
    Ok(store.read(|r| journal::receipt(r, id))?)
}
