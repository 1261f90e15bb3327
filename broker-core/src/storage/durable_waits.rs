//! Reads waiting for a commit of this store's writer to become durable.
//!
//! A read transaction can see a commit whose meta page the syncing thread has not synced yet
//! (`docs/data-model.md` §8.6); whoever shows such a read outside the process waits first
//! ([`super::Store::until_durable`]). When the commit is this writer's, the sync it was handed
//! to will cover it: the reader waits for that sync here. Queueing an empty write instead would
//! wait for the next group commit and its sync as well, and add an operation to that commit.
//! A commit of another process (seen past anything this writer committed) still takes that
//! empty write: nothing here would sync it. So does a commit whose sync failed: no sync may
//! come after it unless something is written, and the empty write's batch tries again.

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
    /// The newest transaction a failed sync was to make durable.
    failed: AtomicUsize,
    /// That failed sync's error, for a later sync that proves nothing newer
    /// ([`DurableWaits::unproven`]).
    failure: Mutex<Option<StoreError>>,
    waiting: Mutex<Vec<(usize, Told)>>,
}

/// What a read of snapshot `txn_id` must wait for.
pub(super) enum Wait {
    /// Nothing: it is durable.
    Durable,
    /// The sync of a commit this writer already made.
    Sync(Submitted<(), StoreError>),
    /// A commit this writer has not made (another process's), or one whose sync failed: a
    /// sync of its own.
    NotOurs,
}

impl DurableWaits {
    /// The writer committed transaction `txn_id` and is handing it to be synced.
    pub(super) fn committed(&self, txn_id: usize) {
        self.committed.fetch_max(txn_id, Ordering::AcqRel);
    }

    /// What a read of snapshot `txn_id` waits for. Every answer a request gives asks this, so
    /// a durable snapshot is told so without the lock; otherwise the watermark is compared
    /// again under the lock that [`DurableWaits::made_durable`] takes after raising it, so no
    /// waiter is left behind.
    pub(super) fn wait_for(&self, txn_id: usize, signal: &CommitSignal) -> Wait {
        if txn_id <= signal.durable() {
            return Wait::Durable;
        }
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        if txn_id <= signal.durable() {
            return Wait::Durable;
        }
        if txn_id > self.committed.load(Ordering::Acquire)
            || txn_id <= self.failed.load(Ordering::Acquire)
        {
            return Wait::NotOurs;
        }
        let (answer, pending) = reply::slot();
        waiting.push((txn_id, answer));
        Wait::Sync(Submitted::queued(pending))
    }

    /// Everything up to `durable` is on the disk: raise the watermark, then answer who waited
    /// for it.
    pub(super) fn made_durable(&self, signal: &CommitSignal, durable: usize) {
        signal.mark_durable(durable);
        for answer in self.take(|txn_id| txn_id <= durable) {
            answer.send(Ok(()));
        }
    }

    /// Whether a sync failed for a commit the watermark has not passed since: the writer's next
    /// batch writes a marker so that its commit writes a fresh meta page
    /// ([`super::writer::Writer`]).
    pub(super) fn meta_owed(&self, signal: &CommitSignal) -> bool {
        self.failed.load(Ordering::Acquire) > signal.durable()
    }

    /// A sync succeeded for commits up to `newest`: `None` when that proves them durable; the
    /// error to answer with when `newest` is no newer than a commit whose sync failed. No meta
    /// page was written since that failure, and one that failed to sync may never reach the
    /// disk (an fsync failing with EIO can leave its page marked clean, unwritten), so this
    /// sync proves nothing.
    pub(super) fn unproven(&self, newest: usize) -> Option<StoreError> {
        if newest > self.failed.load(Ordering::Acquire) {
            return None;
        }
        let failure = self.failure.lock().unwrap_or_else(PoisonError::into_inner);
        Some(
            failure.clone().unwrap_or_else(|| {
                StoreError::Io("a sync of the store failed before this one".into())
            }),
        )
    }

    /// The sync that was to make everything up to `newest` durable failed: who waited for any
    /// of it hears why.
    pub(super) fn failed(&self, newest: usize, err: &StoreError) {
        *self.failure.lock().unwrap_or_else(PoisonError::into_inner) = Some(err.clone());
        self.failed.fetch_max(newest, Ordering::AcqRel);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn waits_at(durable: usize, committed: usize) -> (DurableWaits, CommitSignal) {
        let signal = CommitSignal::default();
        signal.mark_durable(durable);
        let waits = DurableWaits::default();
        waits.committed(committed);
        (waits, signal)
    }

    #[test]
    fn a_durable_snapshot_waits_for_nothing_and_a_newer_one_of_another_process_for_a_write() {
        let (waits, signal) = waits_at(5, 7);
        assert!(matches!(waits.wait_for(5, &signal), Wait::Durable));
        assert!(matches!(waits.wait_for(8, &signal), Wait::NotOurs));
    }

    #[test]
    fn a_waiter_is_answered_once_the_watermark_passes_its_snapshot_and_not_before() {
        let (waits, signal) = waits_at(5, 7);
        let Wait::Sync(six) = waits.wait_for(6, &signal) else {
            panic!("a commit of this writer waits for its sync")
        };
        let Wait::Sync(seven) = waits.wait_for(7, &signal) else {
            panic!("a commit of this writer waits for its sync")
        };
        waits.made_durable(&signal, 6);
        assert_eq!(six.wait(), Ok(()));
        assert_eq!(waits.waiting.lock().unwrap().len(), 1, "seven still waits");
        waits.made_durable(&signal, 7);
        assert_eq!(seven.wait(), Ok(()));
    }

    #[test]
    fn a_failed_sync_tells_its_waiters_and_later_reads_of_it_take_a_write_of_their_own() {
        let (waits, signal) = waits_at(5, 7);
        let Wait::Sync(seven) = waits.wait_for(7, &signal) else {
            panic!("a commit of this writer waits for its sync")
        };
        let err = StoreError::Corrupt("sync failed".into());
        waits.failed(7, &err);
        assert_eq!(seven.wait(), Err(err));
        // No sync may come after it unless something is written: a later read of it takes a
        // write (whose batch syncs again) instead of waiting for a sync that may never come.
        assert!(matches!(waits.wait_for(6, &signal), Wait::NotOurs));
        assert!(matches!(waits.wait_for(7, &signal), Wait::NotOurs));
        waits.committed(8);
        assert!(matches!(waits.wait_for(8, &signal), Wait::Sync(_)));
    }
}
