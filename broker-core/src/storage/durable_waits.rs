//! Reads waiting for a commit of this store's writer to become durable.
//!
//! A read transaction can see a commit whose meta page the syncing thread has not synced yet
//! (`docs/data-model.md` §8.6); whoever shows such a read outside the process waits first
//! ([`super::Store::until_durable`]). When the commit is this writer's, the sync it was handed
//! to will cover it: the reader waits for that sync here. Queueing an empty write instead would
//! wait for the next group commit and its sync as well, and add an operation to that commit.
//! A commit of another process (seen past anything this writer committed) still takes that
//! empty write: nothing here would sync it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use super::reply::{self, Answer, Submitted};
use super::StoreError;
use crate::commit_signal::CommitSignal;

/// The answer a waiting read gets once its snapshot is durable (or the sync failed).
type Told = Answer<Result<(), StoreError>>;

/// Who waits for which transaction, and the newest one this writer committed.
#[derive(Default)]
pub(super) struct DurableWaits {
    committed: AtomicUsize,
    waiting: Mutex<Vec<(usize, Told)>>,
}

/// What a read of snapshot `txn_id` must wait for.
pub(super) enum Wait {
    /// Nothing: it is durable.
    Durable,
    /// The sync of a commit this writer already made.
    Sync(Submitted<(), StoreError>),
    /// A commit this writer has not made (another process's): a sync of its own.
    NotOurs,
}

impl DurableWaits {
    /// The writer committed transaction `txn_id` and is handing it to be synced.
    pub(super) fn committed(&self, txn_id: usize) {
        self.committed.fetch_max(txn_id, Ordering::AcqRel);
    }

    /// What a read of snapshot `txn_id` waits for. The watermark is compared under the lock
    /// that [`DurableWaits::durable`] takes after raising it, so no waiter is left behind.
    pub(super) fn wait_for(&self, txn_id: usize, signal: &CommitSignal) -> Wait {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        if txn_id <= signal.durable() {
            return Wait::Durable;
        }
        if txn_id > self.committed.load(Ordering::Acquire) {
            return Wait::NotOurs;
        }
        let (answer, pending) = reply::slot();
        waiting.push((txn_id, answer));
        Wait::Sync(Submitted::queued(pending))
    }

    /// The watermark rose to `durable`: answer who waited for it.
    pub(super) fn durable(&self, durable: usize) {
        for answer in self.take(|txn_id| txn_id <= durable) {
            answer.send(Ok(()));
        }
    }

    /// The sync that was to make everything up to `newest` durable failed: who waited for any
    /// of it hears why.
    pub(super) fn failed(&self, newest: usize, err: &StoreError) {
        for answer in self.take(|txn_id| txn_id <= newest) {
            answer.send(Err(err.clone()));
        }
    }

    /// The waiters `done` picks, out of the list (answered outside the lock).
    fn take(&self, done: impl Fn(usize) -> bool) -> Vec<Told> {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        let (ready, rest) = std::mem::take(&mut *waiting)
            .into_iter()
            .partition::<Vec<_>, _>(|(txn_id, _)| done(*txn_id));
        *waiting = rest;
        ready.into_iter().map(|(_, answer)| answer).collect()
    }
}
