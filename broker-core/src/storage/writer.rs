//! The one writer thread: it drains whatever operations are queued into one transaction,
//! commits it once and answers every caller (group commit).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use heed::{Env, EnvFlags, FlagSetMode, RwTxn, WithoutTls};

use super::map::{Held, MapLock};
use super::reply::Answer;
use super::table::RawDb;
use super::{LayoutState, StoreError, WriteCtx};
use crate::commit_signal::CommitSignal;

const MAX_BATCH: usize = 256;

/// Called on the writer thread after each group commit, before its callers are answered, with
/// the batch's operation count and whether the commit succeeded (profiling tools: the page
/// census of `benches/store_pages.rs`).
#[doc(hidden)]
pub type CommitObserver = Box<dyn FnMut(usize, bool) + Send>;
pub(super) type ObserverSlot = Arc<Mutex<Option<CommitObserver>>>;
pub(super) type Job = Box<dyn Operation>;

/// One queued write: the caller's operation, which the writer may run more than once (a batch
/// is built again after one of its operations fails), and the caller waiting for its result.
pub(super) trait Operation: Send {
    /// Run in the batch's transaction itself; `true` when it succeeded.
    fn run(&mut self, ctx: &mut WriteCtx<'_, '_>) -> bool;
    /// Run in a nested transaction of the batch's, so that a failure undoes only its writes.
    fn run_nested(&mut self, ctx: &mut WriteCtx<'_, '_>);
    /// The batch's transaction could not begin: fail without running.
    fn fail(&mut self, err: &StoreError);
    /// Answer the caller once the batch's commit is known.
    fn answer(self: Box<Self>, commit_error: Option<&StoreError>);
}

/// A [`super::Store::write`] in the writer's queue.
pub(super) struct Write<F, R, E> {
    pub(super) op: F,
    pub(super) result: Option<Result<R, E>>,
    pub(super) reply: Answer<Result<R, E>>,
    pub(super) map_size: usize,
}

impl<F, R, E> Operation for Write<F, R, E>
where
    F: for<'a, 't> FnMut(&mut WriteCtx<'a, 't>) -> Result<R, E> + Send,
    R: Send,
    E: From<StoreError> + Send,
{
    fn run(&mut self, ctx: &mut WriteCtx<'_, '_>) -> bool {
        let result = guarded(|| (self.op)(ctx));
        let ok = result.is_ok();
        self.result = Some(result);
        ok
    }

    fn run_nested(&mut self, ctx: &mut WriteCtx<'_, '_>) {
        self.result = Some(run_nested(ctx, &mut self.op, self.map_size));
    }

    fn fail(&mut self, err: &StoreError) {
        self.result = Some(Err(E::from(err.clone())));
    }

    fn answer(self: Box<Self>, commit_error: Option<&StoreError>) {
        let Write {
            op, result, reply, ..
        } = *self;
        // What the operation captured goes before its caller hears of it.
        drop(op);
        let answer = match (commit_error, result) {
            (Some(e), Some(Ok(_))) => Err(E::from(e.clone())),
            (_, Some(r)) => r,
            (_, None) => Err(E::from(StoreError::WriterGone)),
        };
        reply.send(answer);
    }
}

/// Counters for operators: group-commit batch sizes, and where the writer's time goes.
#[derive(Debug, Default)]
pub struct WriterStats {
    pub batches: AtomicU64,
    pub operations: AtomicU64,
    pub largest_batch: AtomicU64,
    /// Time spent running the batches' operations (B-tree updates, hashing), ns.
    pub build_nanos: AtomicU64,
    /// Time spent in LMDB's commit (page writes, data sync, meta write) and in the syncs that
    /// make a commit durable when no later commit does, ns.
    pub commit_nanos: AtomicU64,
    /// Syncs of the store's file made because no later commit came to make the last one
    /// durable (the writer was about to wait, or a commit wrote nothing).
    pub syncs: AtomicU64,
    /// Batches built a second time, each operation in a nested transaction, because one of
    /// them failed in the first.
    pub rebuilt_batches: AtomicU64,
    /// Batches whose callers were answered on the answering thread, while the writer went on
    /// with the operations queued behind them.
    pub answered_aside: AtomicU64,
}

/// Run one operation, a panic in it becoming its error: the writer thread outlives any
/// operation, and the batch undoes a panicked one's writes as it does a failed one's. What
/// the operation changed in memory is no worse off than after an error: the content-address
/// tail checks every key it keeps against its row.
fn guarded<R, E: From<StoreError>>(op: impl FnOnce() -> Result<R, E>) -> Result<R, E> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(op)).unwrap_or_else(|payload| {
        let text = crate::panics::text(&*payload);
        tracing::error!(panic = %text, "a store operation panicked; its writes are undone");
        Err(E::from(StoreError::OperationPanicked(text)))
    })
}

fn run_nested<R, E>(
    ctx: &mut WriteCtx<'_, '_>,
    op: &mut impl for<'a, 't> FnMut(&mut WriteCtx<'a, 't>) -> Result<R, E>,
    map_size: usize,
) -> Result<R, E>
where
    E: From<StoreError>,
{
    let (dbs, state, env) = (ctx.dbs, ctx.state, ctx.env);
    let mut nested = env
        .nested_write_txn(ctx.txn)
        .map_err(|e| StoreError::from_heed(e, map_size))?;
    let mut inner = WriteCtx::new(&mut nested, dbs, state, env, map_size);
    let result = guarded(|| op(&mut inner));
    match result {
        Ok(v) => {
            nested
                .commit()
                .map_err(|e| StoreError::from_heed(e, map_size))?;
            Ok(v)
        }
        Err(e) => {
            nested.abort();
            Err(e)
        }
    }
}

/// The writer thread's state: everything a group commit needs besides its operations.
pub(super) struct Writer {
    pub(super) env: Env<WithoutTls>,
    pub(super) dbs: Arc<[RawDb]>,
    pub(super) state: Arc<LayoutState>,
    pub(super) map_size: usize,
    pub(super) stats: Arc<WriterStats>,
    pub(super) map: Arc<MapLock>,
    pub(super) signal: Arc<CommitSignal>,
    pub(super) observer: ObserverSlot,
}

impl Writer {
    /// Drain the queue into group commits until every sender is gone.
    ///
    /// A commit syncs its pages but not its meta page (`MDB_NOMETASYNC`, set here
    /// before the first): LMDB's next commit syncs that meta page with its own pages, before it
    /// writes its own meta page. So a batch's callers are answered only once it is durable:
    /// after the next commit when more work is queued, or after an explicit sync of the file
    /// when none is. Either way the disk sees one flush per commit instead of two, and no
    /// caller hears of a write that a power cut could still undo.
    ///
    /// Answering a batch wakes each of its callers, about a tenth of the writer's time. When
    /// more work follows, the batch's callers are answered on a thread of its own while the
    /// writer goes on; otherwise here, where nothing waits for it.
    pub(super) fn run(self, receiver: Receiver<Job>) {
        // SAFETY: the flag only changes when a commit's meta page reaches the disk; this
        // thread makes every commit of this environment from here on (the tables were opened
        // and any upgrade committed before it started) and answers none before a later
        // commit or an explicit sync has made it durable.
        if let Err(err) = unsafe {
            self.env
                .set_flags(EnvFlags::NO_META_SYNC, FlagSetMode::Enable)
        } {
            tracing::warn!(error = %err, "store writer keeps LMDB's meta sync: the flag was refused");
        }
        let answerer = Answerer::spawn();
        let mut queued = None;
        // The last committed batch, not yet known to be durable.
        let mut unsynced: Option<Unsynced> = None;
        loop {
            let first = match queued.take() {
                Some(job) => job,
                None => {
                    // Nothing to commit after it: sync the last batch and answer it before
                    // waiting.
                    if let Some(last) = unsynced.take() {
                        let synced = self.sync();
                        self.settle(last, synced, None);
                    }
                    match receiver.recv() {
                        Ok(job) => job,
                        Err(_) => break,
                    }
                }
            };
            let started = Instant::now();
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match receiver.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            let n = batch.len() as u64;
            let stats = &self.stats;
            stats.batches.fetch_add(1, Ordering::Relaxed);
            stats.operations.fetch_add(n, Ordering::Relaxed);
            stats.largest_batch.fetch_max(n, Ordering::Relaxed);
            let outcome = self.build_and_commit(&mut batch, started);
            let committed = matches!(outcome, Ok(true));
            let txn_id = self.env.info().last_txn_id;
            if let Ok(mut slot) = self.observer.lock() {
                if let Some(observe) = slot.as_mut() {
                    observe(batch.len(), committed);
                }
            }
            if let Some(previous) = unsynced.take() {
                // Any commit after the previous one's synced it: LMDB syncs a commit's pages,
                // and with them every earlier write to the file, before its meta page. A
                // commit that wrote nothing (every operation failed) syncs nothing.
                let synced = if txn_id > previous.txn_id {
                    Ok(previous.txn_id)
                } else {
                    self.sync()
                };
                self.settle(previous, synced, answerer.as_ref());
            }
            match outcome {
                Ok(true) => unsynced = Some(Unsynced { batch, txn_id }),
                Ok(false) => answer(batch, None),
                Err(err) => answer(batch, Some(&err)),
            }
            queued = receiver.try_recv().ok();
        }
        if let Some(answerer) = answerer {
            answerer.finish();
        }
    }

    /// Sync the store's file: every commit so far becomes durable, meta pages included. The
    /// newest transaction id it covers.
    fn sync(&self) -> Result<usize, StoreError> {
        self.stats.syncs.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let txn_id = self.env.info().last_txn_id;
        let synced = self
            .env
            .force_sync()
            .map(|()| txn_id)
            .map_err(|e| StoreError::from_heed(e, self.map_size));
        self.stats.commit_nanos.fetch_add(
            u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        synced.inspect_err(|err| {
            tracing::error!(error = %err, "store writer could not sync its last commit");
        })
    }

    /// Answer a committed batch once its durability is known (`synced`: the newest
    /// transaction id now durable): each operation's own result when it is durable, the sync's
    /// error otherwise. Aside, on the answering thread, when `aside` is given.
    fn settle(
        &self,
        unsynced: Unsynced,
        synced: Result<usize, StoreError>,
        aside: Option<&Answerer>,
    ) {
        let err = match synced {
            Ok(txn_id) => {
                self.signal.mark_durable(txn_id.max(unsynced.txn_id));
                // Once per durable commit, never for a rebuilt pass or a failed commit:
                // followers of the log wake once for everything this batch made durable.
                self.signal.raise();
                None
            }
            Err(err) => Some(err),
        };
        match aside {
            Some(answerer) => {
                self.stats.answered_aside.fetch_add(1, Ordering::Relaxed);
                answerer.answer(unsynced.batch, err)
            }
            None => answer(unsynced.batch, err.as_ref()),
        }
    }

    /// Begin the batch's write transaction under the map lock.
    fn begin(&self) -> Result<Held<'_, RwTxn<'_>>, StoreError> {
        self.map
            .begin(&self.env, |env| env.write_txn())
            .inspect_err(|err| {
                tracing::error!(error = %err, "store writer could not begin a transaction");
            })
    }

    /// Build one group commit from `batch` and commit it (LMDB's full sync); `Ok(false)` when
    /// no transaction could begin (every operation then holds that error).
    ///
    /// Every operation first runs straight in the batch's transaction: nested transactions cost
    /// each operation a copy of every page it touches that the batch has already touched. If
    /// one fails, its partial writes are in that transaction, so it is aborted and the batch is
    /// built again with every other operation in its own nested transaction (as if each had
    /// been alone), the failed one keeping its error. Operations before it run twice; none
    /// runs more than twice. The map lock is held shared from each transaction's beginning to
    /// its end, and the size gauge is read after the commit.
    pub(super) fn build_and_commit(
        &self,
        batch: &mut [Job],
        started: Instant,
    ) -> Result<bool, StoreError> {
        let (env, dbs, map_size) = (&self.env, &self.dbs[..], self.map_size);
        let state = &*self.state;
        let mut held = match self.begin() {
            Ok(held) => held,
            Err(err) => {
                // Each job must still answer: nothing ran, nothing was committed.
                batch.iter_mut().for_each(|job| job.fail(&err));
                return Ok(false);
            }
        };
        let mut failed = None;
        for (i, job) in batch.iter_mut().enumerate() {
            let mut ctx = WriteCtx::new(&mut held.txn, dbs, state, env, map_size);
            if !job.run(&mut ctx) {
                failed = Some(i);
                break;
            }
        }
        if let Some(failed) = failed {
            // The aborted transaction's shared hold ends before the next one is taken.
            let Held { txn, _shared } = held;
            txn.abort();
            drop(_shared);
            self.stats.rebuilt_batches.fetch_add(1, Ordering::Relaxed);
            held = match self.begin() {
                Ok(held) => held,
                Err(err) => {
                    for (i, job) in batch.iter_mut().enumerate() {
                        if i != failed {
                            job.fail(&err);
                        }
                    }
                    return Ok(false);
                }
            };
            for (i, job) in batch.iter_mut().enumerate() {
                if i != failed {
                    let mut ctx = WriteCtx::new(&mut held.txn, dbs, state, env, map_size);
                    job.run_nested(&mut ctx);
                }
            }
        }
        let built = Instant::now();
        let Held { txn, _shared } = held;
        let outcome = txn.commit().map_err(|e| self.map.write_error(e, map_size));
        drop(_shared);
        self.map.measure(env);
        let committed = Instant::now();
        let nanos = |d: std::time::Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.stats
            .build_nanos
            .fetch_add(nanos(built - started), Ordering::Relaxed);
        self.stats
            .commit_nanos
            .fetch_add(nanos(committed - built), Ordering::Relaxed);
        outcome.map(|()| true)
    }
}

/// A committed batch whose meta page may not be on the disk yet.
struct Unsynced {
    batch: Vec<Job>,
    /// The store's last transaction id once it was committed.
    txn_id: usize,
}

/// Answer every operation of a finished batch.
fn answer(batch: Vec<Job>, commit_error: Option<&StoreError>) {
    for job in batch {
        job.answer(commit_error);
    }
}

/// The thread that answers a batch's callers while the writer builds the next one.
struct Answerer {
    sender: Sender<(Vec<Job>, Option<StoreError>)>,
    thread: JoinHandle<()>,
}

impl Answerer {
    /// `None` when no thread can be started: the writer then answers every batch itself.
    fn spawn() -> Option<Answerer> {
        let (sender, receiver) = channel::<(Vec<Job>, Option<StoreError>)>();
        let thread = std::thread::Builder::new()
            .name("worldd-store-answer".into())
            .spawn(move || {
                for (batch, err) in receiver {
                    answer(batch, err.as_ref());
                }
            })
            .inspect_err(|err| {
                tracing::warn!(error = %err, "store writer answers its own batches: no thread for it");
            })
            .ok()?;
        Some(Answerer { sender, thread })
    }

    fn answer(&self, batch: Vec<Job>, err: Option<StoreError>) {
        // The thread only ends when the sender is dropped; should it have died, answer here.
        if let Err(std::sync::mpsc::SendError((batch, err))) = self.sender.send((batch, err)) {
            answer(batch, err.as_ref());
        }
    }

    /// Every batch handed over is answered before the writer thread ends.
    fn finish(self) {
        drop(self.sender);
        let _ = self.thread.join();
    }
}
