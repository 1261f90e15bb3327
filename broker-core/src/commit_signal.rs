//! A signal raised after every durable group commit, so readers can follow the log live, and
//! the newest snapshot known to be durable.
//!
//! The store's syncing thread raises it once per sync that made committed batches durable,
//! before answering their callers (so a caller that got its answer knows the listeners were
//! told). Raising costs one read-lock and one call per listener; a listener must be as cheap
//! (e.g. bump a `tokio::sync::watch` value) and never block, because every commit waits for
//! that thread before it is answered. Listeners learn only *that* something was committed:
//! they read what changed themselves, in their own read transactions, so a burst of commits
//! coalesces into one wake-up and a slow reader never slows the writer.
//!
//! A read transaction may see a commit before it is durable (the writer leaves a commit's meta
//! page to the syncing thread, `docs/data-model.md` §8.6). [`CommitSignal::durable`] is the
//! newest transaction id known to be on the disk: whoever shows a reader's snapshot to the
//! outside compares its id with it first ([`crate::store::Store::until_durable`]).
//!
//! Commits made by another process that opened the same environment are not signalled.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::RwLock;

type Listener = Box<dyn Fn() + Send + Sync>;

/// The listeners to call after each durable commit, and the durable watermark.
#[derive(Default)]
pub struct CommitSignal {
    listeners: RwLock<Vec<Listener>>,
    durable: AtomicUsize,
}

impl std::fmt::Debug for CommitSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.listeners.read().map(|l| l.len()).unwrap_or(0);
        f.debug_struct("CommitSignal")
            .field("listeners", &n)
            .field("durable", &self.durable())
            .finish()
    }
}

impl CommitSignal {
    /// Call `listener` after every durable commit from now on. It runs on the store's syncing
    /// thread: it must return at once.
    pub fn listen(&self, listener: impl Fn() + Send + Sync + 'static) {
        if let Ok(mut l) = self.listeners.write() {
            l.push(Box::new(listener));
        }
    }

    /// The newest transaction id known to be durable: every snapshot with an id up to it is
    /// on the disk.
    pub fn durable(&self) -> usize {
        self.durable.load(Ordering::Acquire)
    }

    /// Everything up to transaction `txn_id` is durable (it never goes back).
    pub(crate) fn mark_durable(&self, txn_id: usize) {
        self.durable.fetch_max(txn_id, Ordering::AcqRel);
    }

    /// Called by the syncing thread after batches became durable.
    pub(crate) fn raise(&self) {
        if let Ok(listeners) = self.listeners.read() {
            for l in listeners.iter() {
                l();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use crate::store::{Store, StoreError};

    #[test]
    fn every_durable_commit_raises_the_signal_before_its_callers_are_answered() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("db")).unwrap();
        let seen = Arc::new(AtomicU64::new(0));
        let s = seen.clone();
        store.commit_signal().listen(move || {
            s.fetch_add(1, Ordering::SeqCst);
        });
        // The writer raises the signal before it answers the batch's callers.
        store.write(|_| Ok::<_, StoreError>(())).unwrap();
        assert_eq!(seen.load(Ordering::SeqCst), 1);
        // A failing operation aborts only itself; its (empty) batch is still committed.
        let _ = store.write(|_| Err::<(), _>(StoreError::Corrupt("no".into())));
        assert_eq!(seen.load(Ordering::SeqCst), 2);
    }
}
