//! Client-built commits (`POST /v1/commit`) and their receipts.
//!
//! A REST commit carries the whole entry, the next world and the objects it names. Unlike the
//! reference, the store recomputes and checks every hash and link ([`crate::log::commit_exact`])
//! and the head must be the client's `observedHead` (compare-and-swap). A commit that names an
//! invocation id (`rest:<id>`) journals its intent first and its outcome in the commit's own
//! transaction, so `GET /v1/receipts/rest:<id>` answers `resolved` exactly when it landed,
//! `indeterminate` when the intent is durable but the commit is not, and `not-started`
//! otherwise. Resending the same id with the same commit is an idempotent no-op.

use crate::journal::{self, Intent, JournalError, OutcomeStatus, Receipt};
use crate::log::{self, Committed, Entry, LogError, World};
use crate::object::{Object, Ref};
use crate::store::{Store, StoreError};

/// The effect name REST intents are journaled under (cost 0: commits spend no budget).
pub const REST_EFFECT: &str = "World.Commit";

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
pub fn rest_commit(store: &Store, commit: RestCommit) -> Result<Ref, CommitError> {
    let Some(id) = commit.invocation_id.clone() else {
        let c = commit;
        let done: Committed = store.write(move |w| -> Result<Committed, CommitError> {
            Ok(log::commit_exact(
                w,
                &c.objects,
                c.observed_head,
                &c.entry,
                &c.world,
                &c.world_ref,
            )?)
        })?;
        return Ok(done.world_ref);
    };
    if id.strip_prefix("rest:").is_none_or(str::is_empty) {
        return Err(CommitError::BadInvocationId);
    }
    let request_ref = commit.request_ref();
    // Reconcile a resend before writing anything.
    if let Some(state) = store.read(|r| journal::state(r, &id))? {
        if state.intent.request_ref != request_ref {
            return Err(CommitError::Reused(id));
        }
        if state.status == Some(OutcomeStatus::Committed) {
            return Ok(commit.world_ref);
        }
    } else {
        let intent = Intent {
            invocation_id: id.clone(),
            // REST commits belong to no episode; cost 0 keeps every spend counter unchanged.
            episode: "rest".into(),
            effect: REST_EFFECT.into(),
            scope: "rest".into(),
            cost: 0,
            request_ref,
        };
        store.write(move |w| -> Result<u64, CommitError> {
            Ok(journal::append_intent(w, &intent, 0)?)
        })?;
    }
    let c = commit;
    let done = store.write(move |w| -> Result<Committed, CommitError> {
        let committed = log::commit_exact(
            w,
            &c.objects,
            c.observed_head,
            &c.entry,
            &c.world,
            &c.world_ref,
        )?;
        journal::append_outcome(w, &id, OutcomeStatus::Committed, Some(committed.world_ref))?;
        Ok(committed)
    })?;
    Ok(done.world_ref)
}

/// The receipt of a `rest:` invocation id.
pub fn receipt(store: &Store, id: &str) -> Result<Receipt, CommitError> {
    if !id.starts_with("rest:") {
        return Err(CommitError::BadInvocationId);
    }
    Ok(store.read(|r| journal::receipt(r, id))?)
}
