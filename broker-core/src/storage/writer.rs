//! The one writer thread: it drains whatever operations are queued into one transaction,
//! commits it once and answers every caller (group commit).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use heed::{Env, EnvFlags, FlagSetMode, RwTxn, WithoutTls};

use super::durable_waits::DurableWaits;
use super::map::{Held, MapLock};
use super::reply::Answer;
use super::resident::{self, Resident};
use super::table::RawDb;
use super::{Ended, LayoutState, StoreError, WriteCtx};
use crate::commit_signal::CommitSignal;

const MAX_BATCH: usize = 256;
/// How long a batch of nothing but followed operations ([`Operation::followed`]) waits for
/// what follows them: about ten times what a read's handler takes between its intent and its
/// entry. Nobody waits for a followed operation alone, so the wait delays no answer.
pub(super) const FOLLOW_WAIT: Duration = Duration::from_millis(1);

/// The follow wait in nanoseconds, shared by a store and its writer ([`FOLLOW_WAIT`]; tests
/// lengthen it to make a race deterministic).
pub(super) type FollowWait = Arc<AtomicU64>;

pub(super) fn follow_wait() -> FollowWait {
    Arc::new(AtomicU64::new(FOLLOW_WAIT.as_nanos() as u64))
}

/// Called on the writer thread after each group commit, before its callers are answered, with
/// the batch's operation count and whether the commit succeeded (profiling tools: the page
/// census of `benches/store_pages.rs`). A batch split after failing for room
/// ([`Writer::commit_split`]) is told once, as the batch it was.
#[doc(hidden)]
pub type CommitObserver = Box<dyn FnMut(usize, bool) + Send>;
pub(super) type ObserverSlot = Arc<Mutex<Option<CommitObserver>>>;
pub(super) type Job = Box<dyn Operation>;

/// One queued write: the caller's operation, which the writer may run more than once (a batch
/// is built again after one of its operations fails), and the caller waiting for its result.
pub(super) trait Operation: Send {
    /// Run in the batch's transaction itself; `true` when it succeeded.
    fn run(&mut self, ctx: &mut WriteCtx<'_, '_>) -> bool;
    /// Run in a nested transaction of the batch's, so that a failure undoes only its writes;
    /// `true` when it succeeded.
    fn run_nested(&mut self, ctx: &mut WriteCtx<'_, '_>) -> bool;
    /// The batch's transaction could not begin, or the operation's own commit failed: fail
    /// with `err`.
    fn fail(&mut self, err: &StoreError);
    /// Whether its last run succeeded (its writes are in the transaction it ran in).
    fn succeeded(&self) -> bool;
    /// Answer the caller once the batch's commit is known: `commit_error`, when given, in
    /// place of a result that succeeded (a failed commit's error, or, for a commit whose sync
    /// failed, [`StoreError::NotDurable`]).
    fn answer(self: Box<Self>, commit_error: Option<&StoreError>);
    /// The caller submits another operation right after this one and waits for that one, not
    /// for this ([`super::Store::submit_followed`]).
    fn followed(&self) -> bool;
}

/// A [`super::Store::write`] in the writer's queue.
pub(super) struct Write<F, R, E> {
    pub(super) op: F,
    pub(super) result: Option<Result<R, E>>,
    pub(super) reply: Answer<Result<R, E>>,
    pub(super) map_size: usize,
    pub(super) followed: bool,
    /// Its last run wrote something ([`WriteCtx::wrote`]): only then is a failed sync its
    /// answer.
    pub(super) wrote: bool,
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
        self.wrote = ctx.wrote();
        ok
    }

    fn run_nested(&mut self, ctx: &mut WriteCtx<'_, '_>) -> bool {
        let (result, wrote) = run_nested(ctx, &mut self.op, self.map_size);
        let ok = result.is_ok();
        self.result = Some(result);
        self.wrote = wrote;
        ok
    }

    fn fail(&mut self, err: &StoreError) {
        self.result = Some(Err(E::from(err.clone())));
    }

    fn succeeded(&self) -> bool {
        matches!(self.result, Some(Ok(_)))
    }

    fn answer(self: Box<Self>, commit_error: Option<&StoreError>) {
        let Write {
            op,
            result,
            reply,
            wrote,
            ..
        } = *self;
        // What the operation captured goes before its caller hears of it.
        drop(op);
        let answer = match (commit_error, result) {
            // A failed sync leaves what an operation wrote committed, not durable; one that
            // wrote nothing has nothing waiting for that sync, and its result (a spend
            // refused, a task found committed) stands: answered NotDurable it would be taken
            // for a write that was made.
            (Some(e), Some(Ok(v))) if e.committed_not_durable() && !wrote => Ok(v),
            (Some(e), Some(Ok(_))) => Err(E::from(e.clone())),
            (_, Some(r)) => r,
            (_, None) => Err(E::from(StoreError::WriterGone)),
        };
        reply.send(answer);
    }

    fn followed(&self) -> bool {
        self.followed
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
    /// Time spent in LMDB's commit (page writes, data sync, meta write), ns.
    pub commit_nanos: AtomicU64,
    /// Syncs of the store's file that made committed batches durable (on the syncing thread;
    /// batches committed while one runs share the next).
    pub syncs: AtomicU64,
    /// Time spent in those syncs, ns.
    pub sync_nanos: AtomicU64,
    /// Batches built a second time, each operation in a nested transaction, because one of
    /// them failed in the first.
    pub rebuilt_batches: AtomicU64,
    /// Batches whose commit failed for room (a full disk, the map's ceiling) and whose
    /// operations were then committed in parts ([`Writer::commit_split`]).
    pub split_batches: AtomicU64,
    /// The commits those parts took (their time is in `commit_nanos`).
    pub split_commits: AtomicU64,
    /// Whether the last group commit was split: the split's WARN is said once until one fits.
    pub(crate) splitting: std::sync::atomic::AtomicBool,
    /// Times the store's map was released because the process's file-backed resident memory
    /// had grown by the budget ([`super::Store::keep_resident_under`]).
    pub map_releases: AtomicU64,
    /// File-backed resident memory those releases gave back, bytes.
    pub map_released_bytes: AtomicU64,
    /// Times the writer woke after [`super::resident::IDLE_LOOK`] without work, to look at the
    /// map (never with the budget at 0).
    pub(crate) idle_wakes: AtomicU64,
    /// Reader slots of processes that died holding a read snapshot, cleared by
    /// [`super::Store::watch`].
    pub stale_readers_cleared: AtomicU64,
    /// Whether the store's last commit or sync failed for its disk (no space, a filesystem
    /// turned read-only, an I/O error): set by the batch that failed, cleared by the next one
    /// made durable ([`super::Store::writes_failing`]).
    pub(crate) failing: FailingWrites,
    /// Errors the writer's next commits and syncs meet instead of their own (tests).
    #[cfg(test)]
    pub(crate) faults: Faults,
}

/// Faults a test makes the writer meet, each once and in order: a failed commit (its
/// transaction aborted, as a failed commit leaves it) or a failed sync (the commits before it
/// stay committed, not durable), as a disk that fails does.
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct Faults {
    commits: Mutex<std::collections::VecDeque<StoreError>>,
    syncs: Mutex<std::collections::VecDeque<StoreError>>,
}

#[cfg(test)]
impl Faults {
    /// The next commit fails with `err` (after any queued before it).
    pub(crate) fn fail_commit(&self, err: StoreError) {
        self.commits.lock().unwrap().push_back(err);
    }

    /// The next sync fails with `err` (after any queued before it).
    pub(crate) fn fail_sync(&self, err: StoreError) {
        self.syncs.lock().unwrap().push_back(err);
    }

    fn commit(&self) -> Option<StoreError> {
        self.commits.lock().unwrap().pop_front()
    }

    fn sync(&self) -> Option<StoreError> {
        self.syncs.lock().unwrap().pop_front()
    }
}

/// The store's writes failing for its disk, as the last batch found: monitoring that asks the
/// daemon's health must see a store every commit of which fails, which answered `ok` while each
/// call failed alone (a filesystem an I/O error turned read-only never recovers by itself, and
/// a thin-provisioned disk refuses writes that `statvfs` still has room for).
#[derive(Debug, Default)]
pub(crate) struct FailingWrites {
    failing: std::sync::atomic::AtomicBool,
    /// Who says it when the writes start or stop failing ([`super::StoreOptions::on_failing`]):
    /// the daemon, in words of calls and health; a verb run once, by default, in words of the
    /// disk alone (its own error line says its failure).
    say: Option<super::OnFailing>,
}

impl FailingWrites {
    pub(crate) fn new(say: Option<super::OnFailing>) -> FailingWrites {
        FailingWrites {
            failing: Default::default(),
            say,
        }
    }

    /// Whether the last batch's commit or sync failed for the disk.
    pub(crate) fn now(&self) -> bool {
        self.failing.load(Ordering::Acquire)
    }

    /// A batch settled: `durable` when one was made durable, else the disk fault it failed
    /// with, if any. Said once when the writes start failing and once when they recover.
    pub(super) fn settled(&self, durable: bool, fault: Option<&StoreError>) {
        if durable {
            if self.failing.swap(false, Ordering::AcqRel) {
                match self.say {
                    Some(say) => say(None),
                    None => tracing::warn!("the store's writes succeed again"),
                }
            }
        } else if let Some(fault) = fault.filter(|e| is_disk_fault(e)) {
            if !self.failing.swap(true, Ordering::AcqRel) {
                match self.say {
                    Some(say) => say(Some(fault)),
                    None => tracing::warn!("the store's writes fail ({fault}): {DISK_ADVICE}"),
                }
            }
        }
    }
}

/// What to do about a store whose writes fail for its disk.
pub const DISK_ADVICE: &str = "check the disk (a full or thin-provisioned volume, a filesystem remounted read-only after an I/O error: see the kernel's log): make room, or copy the store off a disk turned read-only and check the copy with worldd doctor";

/// A fault of the store's disk, not of one operation.
fn is_disk_fault(e: &StoreError) -> bool {
    matches!(e, StoreError::Io(_) | StoreError::DiskFull(_))
}

/// Run one operation, a panic in it becoming its error: the writer thread outlives any
/// operation, and the batch undoes a panicked one's writes as it does a failed one's. What
/// the operation changed in memory is no worse off than after an error: the layout's state
/// hears that the writes were undone ([`Ended::Undone`]).
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
) -> (Result<R, E>, bool)
where
    E: From<StoreError>,
{
    let (dbs, state, env) = (ctx.dbs, ctx.state, ctx.env);
    let mut nested = match env.nested_write_txn(ctx.txn) {
        Ok(nested) => nested,
        Err(e) => return (Err(StoreError::from_heed(e, map_size).into()), false),
    };
    let mut inner = WriteCtx::new(&mut nested, dbs, state, env, map_size);
    let result = guarded(|| op(&mut inner));
    let log_row = inner.log_row();
    let wrote = inner.wrote();
    match result {
        Ok(v) => {
            if let Err(e) = nested.commit() {
                return (Err(StoreError::from_heed(e, map_size).into()), false);
            }
            if let Some((index, Some(world_ref))) = log_row {
                ctx.note_log_row(index, world_ref);
            }
            (Ok(v), wrote)
        }
        Err(e) => {
            nested.abort();
            (Err(e), false)
        }
    }
}

/// The writer thread's state: everything a group commit needs besides its operations.
pub(super) struct Writer {
    pub(super) env: Env<WithoutTls>,
    pub(super) dbs: Arc<[RawDb]>,
    pub(super) state: Arc<LayoutState>,
    pub(super) ended: fn(&LayoutState, Ended),
    pub(super) map_size: usize,
    pub(super) stats: Arc<WriterStats>,
    pub(super) map: Arc<MapLock>,
    pub(super) signal: Arc<CommitSignal>,
    pub(super) waits: Arc<DurableWaits>,
    pub(super) observer: ObserverSlot,
    pub(super) follow_wait: FollowWait,
    pub(super) resident: resident::Budget,
    /// The log's newest row as this writer appended it last, or as the store held it when
    /// opened ([`super::LogTip`]).
    pub(super) log_tip: std::cell::Cell<Option<super::LogTip>>,
    /// How the layout reads the log's newest row ([`super::Layout::log_tip`]).
    pub(super) tip_of: super::TipReader,
    /// The meta table, for the marker a batch writes after a failed sync
    /// ([`DurableWaits::meta_owed`]); `None` on a read-only store.
    pub(super) meta: Option<RawDb>,
}

impl Writer {
    /// Drain the queue into group commits until every sender is gone.
    ///
    /// A commit syncs its pages but not its meta page (`MDB_NOMETASYNC`, set here before the
    /// first). The writer hands the committed batch to the syncing thread and goes on with the
    /// next batch at once; that thread syncs the file (making every commit so far durable, meta
    /// pages included) and only then answers the batch's callers. So the second flush of each
    /// commit leaves the one thread that writes, batches handed over while a sync runs share
    /// the next one, and no caller hears of a write that a power cut could still undo. LMDB
    /// keeps the store whole meanwhile: a commit's pages are synced before its meta page is
    /// written, and that sync also carries the meta page of the commit before.
    pub(super) fn run(self, receiver: Receiver<Job>) {
        // SAFETY: the flag only changes when a commit's meta page reaches the disk; this
        // thread makes every commit of this environment from here on (the tables were opened
        // and any upgrade committed before it started), and no commit is answered before a
        // sync that began after it.
        if let Err(err) = unsafe {
            self.env
                .set_flags(EnvFlags::NO_META_SYNC, FlagSetMode::Enable)
        } {
            tracing::warn!(error = %err, "store writer keeps LMDB's meta sync: the flag was refused");
        }
        let durability = Durability {
            env: self.env.clone(),
            map_size: self.map_size,
            stats: self.stats.clone(),
            signal: self.signal.clone(),
            waits: self.waits.clone(),
        };
        let syncer = Syncer::spawn(durability.clone());
        let mut resident = Resident::new(self.resident.clone(), &self.map.at);
        loop {
            // Idle, the map is looked at all the same: reads alone (a log streamed from the
            // start, listings) map the store, and nothing else would release it until the next
            // commit, which may be hours away.
            // With the budget at 0 there is nothing to look for: wait for work alone (a budget
            // raised from 0 is looked at from the next commit on).
            let first = if resident.watching() {
                match receiver.recv_timeout(resident::IDLE_LOOK) {
                    Ok(job) => job,
                    Err(RecvTimeoutError::Timeout) => {
                        self.stats.idle_wakes.fetch_add(1, Ordering::Relaxed);
                        if resident.looks_when_idle() {
                            resident.look(&self.map, &self.stats);
                        }
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            } else {
                match receiver.recv() {
                    Ok(job) => job,
                    Err(_) => break,
                }
            };
            let mut batch = vec![first];
            drain(&receiver, &mut batch);
            // A batch of nothing but followed operations (the intents of reads whose handlers
            // run meanwhile) waits a moment for what follows them, so that an intent and its
            // call's entry share one commit and one sync. Anything else ends the wait.
            let wait = Duration::from_nanos(self.follow_wait.load(Ordering::Relaxed));
            let until = Instant::now() + wait;
            while batch.len() < MAX_BATCH && batch.iter().all(|job| job.followed()) {
                match receiver.recv_timeout(until.saturating_duration_since(Instant::now())) {
                    Ok(job) => {
                        batch.push(job);
                        drain(&receiver, &mut batch);
                    }
                    Err(_) => break,
                }
            }
            let started = Instant::now();
            let n = batch.len() as u64;
            let stats = &self.stats;
            stats.batches.fetch_add(1, Ordering::Relaxed);
            stats.operations.fetch_add(n, Ordering::Relaxed);
            stats.largest_batch.fetch_max(n, Ordering::Relaxed);
            let outcome = match self.build_and_commit(&mut batch, started) {
                Ok(true) => {
                    let txn_id = self.env.info().last_txn_id;
                    self.map.ours.store(txn_id, Ordering::Release);
                    // Readers may see it from now on; the sync it is handed to answers them.
                    self.waits.committed(txn_id);
                    Ok(Some(txn_id))
                }
                Ok(false) => Ok(None),
                Err(err) => Err(err),
            };
            if let Ok(mut slot) = self.observer.lock() {
                if let Some(observe) = slot.as_mut() {
                    observe(batch.len(), matches!(outcome, Ok(Some(_))));
                }
            }
            let committed = matches!(outcome, Ok(Some(_)));
            let settled = Settled { batch, outcome };
            match &syncer {
                Some(syncer) => syncer.hand(settled),
                None => durability.settle(vec![settled]),
            }
            // After the hand-over: a release delays the next batch, not this one's answers.
            if committed {
                resident.look(&self.map, &self.stats);
            }
        }
        if let Some(syncer) = syncer {
            syncer.finish();
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

    /// Begin a write transaction under the writer's checks, before anything runs in it: the
    /// store's files replaced under this process (a commit would go to files no path names any
    /// more), its data file rolled back, or its log replaced by another daemon's; each is the
    /// wedged store's error, the transaction undone.
    fn checked_begin(&self) -> Result<Held<'_, RwTxn<'_>>, StoreError> {
        let (env, dbs, map_size) = (&self.env, &self.dbs[..], self.map_size);
        let state = &*self.state;
        if self.map.replaced.get().is_some() {
            return Err(self.map.wedged());
        }
        let mut held = self.begin()?;
        let refuse = |held: Held<'_, RwTxn<'_>>| {
            let Held { txn, _shared } = held;
            txn.abort();
            drop(_shared);
            Err(self.map.wedged())
        };
        // Under the writer's lock, before anything runs: a data file rolled back under this
        // process is seen before a commit of this one would cover it (LMDB numbers a write
        // transaction from the lock file, not from the data file's meta pages).
        if self.map.rolled_back(env) {
            return refuse(held);
        }
        // Another transaction than this writer's came last: a second process's (a session
        // mint), which leaves the log alone, or a copy put over the data file that another
        // daemon served longer (a higher id than ours). In the daemon, which alone appends to
        // the log, its newest row tells them apart; in a verb writing beside a daemon
        // (`backup`, the session verbs) the daemon's appends are expected. The common case
        // (ours came last) reads nothing.
        let now = env.info().last_txn_id;
        if now != self.map.ours.load(Ordering::Acquire) {
            let found = if self.map.appends_log.load(Ordering::Acquire) {
                let ctx = WriteCtx::new(&mut held.txn, dbs, state, env, map_size);
                (self.tip_of)(&ctx.reader()).ok()
            } else {
                None
            };
            match found {
                Some(found) if found != self.log_tip.get() => {
                    self.map.log_replaced(self.log_tip.get(), found);
                    return refuse(held);
                }
                // The same log (or a row that cannot be read: the operations meet it
                // themselves and say so): the commits were another process's, or the split's
                // own ([`Writer::commit_split`]).
                _ => {
                    self.map.ours.fetch_max(now, Ordering::AcqRel);
                }
            }
        }
        Ok(held)
    }

    /// Build one group commit from `batch` and commit it (its pages synced, its meta page
    /// written: the syncing thread makes it durable); `Ok(false)` when
    /// no transaction could begin (every operation then holds that error).
    ///
    /// Every operation first runs straight in the batch's transaction: nested transactions cost
    /// each operation a copy of every page it touches that the batch has already touched. If
    /// one fails, its partial writes are in that transaction, so it is aborted and the batch is
    /// built again with every other operation in its own nested transaction (as if each had
    /// been alone), the failed one keeping its error. Operations before it run twice; none
    /// runs more than twice, unless the commit then fails for room ([`Writer::commit_split`]). The map lock is held shared from each transaction's
    /// beginning to its end, and the size gauge is read after the commit.
    pub(super) fn build_and_commit(
        &self,
        batch: &mut [Job],
        started: Instant,
    ) -> Result<bool, StoreError> {
        let (env, dbs, map_size) = (&self.env, &self.dbs[..], self.map_size);
        let state = &*self.state;
        let mut held = match self.checked_begin() {
            Ok(held) => held,
            Err(err) => {
                // Each job must still answer: nothing ran, nothing was committed.
                batch.iter_mut().for_each(|job| job.fail(&err));
                return Ok(false);
            }
        };
        let mut failed = None;
        let mut appended = None;
        for (i, job) in batch.iter_mut().enumerate() {
            let mut ctx = WriteCtx::new(&mut held.txn, dbs, state, env, map_size);
            if !job.run(&mut ctx) {
                failed = Some(i);
                break;
            }
            appended = ctx.log_row().or(appended);
        }
        if let Some(failed) = failed {
            // The aborted transaction's shared hold ends before the next one is taken.
            let Held { txn, _shared } = held;
            txn.abort();
            drop(_shared);
            (self.ended)(state, Ended::Undone);
            self.stats.rebuilt_batches.fetch_add(1, Ordering::Relaxed);
            held = match self.checked_begin() {
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
            appended = None;
            for (i, job) in batch.iter_mut().enumerate() {
                if i != failed {
                    let mut ctx = WriteCtx::new(&mut held.txn, dbs, state, env, map_size);
                    if job.run_nested(&mut ctx) {
                        appended = ctx.log_row().or(appended);
                    } else {
                        (self.ended)(state, Ended::Undone);
                    }
                }
            }
        }
        self.mark_after_failed_sync(&mut held.txn);
        let built = Instant::now();
        let Held { txn, _shared } = held;
        let outcome = self.commit(txn);
        drop(_shared);
        let ended = match outcome {
            Ok(()) => {
                if appended.is_some() {
                    self.log_tip.set(appended);
                }
                Ended::Committed
            }
            Err(_) => Ended::Undone,
        };
        (self.ended)(state, ended);
        self.map.measure(env);
        let committed = Instant::now();
        let nanos = |d: std::time::Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.stats
            .build_nanos
            .fetch_add(nanos(built - started), Ordering::Relaxed);
        self.stats
            .commit_nanos
            .fetch_add(nanos(committed - built), Ordering::Relaxed);
        match outcome {
            Err(err) if is_room(&err) && batch.iter().filter(|j| j.succeeded()).count() > 1 => {
                self.commit_split(batch, err)
            }
            outcome => {
                if outcome.is_ok() {
                    self.stats.splitting.store(false, Ordering::Release);
                }
                outcome.map(|()| true)
            }
        }
    }

    /// A group commit that failed for room is made to fail by what its pages need, which is
    /// mostly its largest operations': one episode's megabyte write at a full disk must not
    /// take down the few-kilobyte reads of other episodes batched with it (their effects ran;
    /// they would be answered unrecorded). So the operations that had succeeded are committed
    /// again in halves, in order, each half split again only where it fails for room: those
    /// that fit are committed, and only those that do not fit hold the error. One large
    /// operation among n costs about 2·log2(n) commits. A part whose two halves both fail for
    /// room is not split further (a disk that takes nothing would otherwise cost a commit and
    /// a sync per operation): it holds the error, as the whole batch did. Nor is anything split
    /// while the store's writes are already failing for the disk. The pages a failed commit
    /// wrote past the file's old end stay the file's, so the small commits after it mostly
    /// need no new room. Operations may run again here, each in a nested transaction of its
    /// part's. `Ok(true)` when any part committed (the others' operations hold their own
    /// errors, answered as such); otherwise the first commit's error, answered to all.
    fn commit_split(&self, batch: &mut [Job], first: StoreError) -> Result<bool, StoreError> {
        if self.stats.failing.now() {
            return Err(first);
        }
        let started = Instant::now();
        self.stats.split_batches.fetch_add(1, Ordering::Relaxed);
        if !self.stats.splitting.swap(true, Ordering::AcqRel) {
            tracing::warn!(error = %first, operations = batch.len(), "a group commit failed for room: its operations are committed in parts, so that only those that do not fit fail (said once until a group commit fits again; worldd_commit_split_batches_total counts them)");
        }
        let part: Vec<usize> = (0..batch.len()).filter(|&i| batch[i].succeeded()).collect();
        let any = self.commit_halves(batch, &part, &first);
        self.map.measure(&self.env);
        let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.stats.commit_nanos.fetch_add(nanos, Ordering::Relaxed);
        if any {
            Ok(true)
        } else {
            Err(first)
        }
    }

    /// Commit the two halves of `part` (indices into `batch`) one after the other, splitting a
    /// half again where it fails for room and the other half committed; whether any part
    /// committed. A half that failed for anything else holds that error and ends the split
    /// there: it is not counted as fitting, so a batch none of whose parts committed is
    /// answered (and the store's health said) as failed, never as made durable.
    fn commit_halves(&self, batch: &mut [Job], part: &[usize], err: &StoreError) -> bool {
        if part.len() < 2 {
            part.iter().for_each(|&i| batch[i].fail(err));
            return false;
        }
        let (a, b) = part.split_at(part.len() / 2);
        let first = self.commit_part(batch, a);
        let second = self.commit_part(batch, b);
        let fail = |batch: &mut [Job], half: &[usize], e: &StoreError| {
            half.iter().for_each(|&i| batch[i].fail(e));
        };
        match (first, second) {
            (Part::Committed, Part::Committed) => true,
            (Part::Committed, Part::Failed) | (Part::Failed, Part::Committed) => true,
            (Part::Room(ea), Part::Committed) => {
                self.commit_halves(batch, a, &ea);
                true
            }
            (Part::Committed, Part::Room(eb)) => {
                self.commit_halves(batch, b, &eb);
                true
            }
            // Neither half fits: the disk takes nothing more, or each holds a large one; or a
            // half failed for another reason, which a smaller part would meet again.
            (Part::Room(ea), Part::Room(eb)) => {
                fail(batch, a, &ea);
                fail(batch, b, &eb);
                false
            }
            (Part::Room(ea), Part::Failed) => {
                fail(batch, a, &ea);
                false
            }
            (Part::Failed, Part::Room(eb)) => {
                fail(batch, b, &eb);
                false
            }
            (Part::Failed, Part::Failed) => false,
        }
    }

    /// Commit the operations of `part` in one transaction, each in a nested transaction of its
    /// own (one that fails holds its error, the others are kept).
    fn commit_part(&self, batch: &mut [Job], part: &[usize]) -> Part {
        let (env, dbs, map_size) = (&self.env, &self.dbs[..], self.map_size);
        let state = &*self.state;
        self.stats.split_commits.fetch_add(1, Ordering::Relaxed);
        let mut held = match self.checked_begin() {
            Ok(held) => held,
            Err(err) => {
                part.iter().for_each(|&i| batch[i].fail(&err));
                return Part::Failed;
            }
        };
        let mut appended = None;
        for &i in part {
            let mut ctx = WriteCtx::new(&mut held.txn, dbs, state, env, map_size);
            if batch[i].run_nested(&mut ctx) {
                appended = ctx.log_row().or(appended);
            } else {
                (self.ended)(state, Ended::Undone);
            }
        }
        let Held { txn, _shared } = held;
        let outcome = self.commit(txn);
        drop(_shared);
        match outcome {
            Ok(()) => {
                if appended.is_some() {
                    self.log_tip.set(appended);
                }
                (self.ended)(state, Ended::Committed);
                Part::Committed
            }
            Err(err) => {
                (self.ended)(state, Ended::Undone);
                if is_room(&err) {
                    Part::Room(err)
                } else {
                    part.iter().for_each(|&i| batch[i].fail(&err));
                    Part::Failed
                }
            }
        }
    }

    /// After a failed sync, write a marker (the schema stamp, as it is) in `txn`: a batch that
    /// wrote nothing else commits no meta page (LMDB skips a transaction without changes), and
    /// a sync that succeeds then proves nothing of the commit whose sync failed (its meta page
    /// may never have reached the disk: an fsync that failed with EIO can leave it marked clean
    /// but unwritten). The marker's commit writes a fresh meta page, whose tree holds every
    /// commit before it; its sync succeeding makes them durable ([`Durability::settle`]).
    fn mark_after_failed_sync(&self, txn: &mut RwTxn<'_>) {
        let Some(meta) = self.meta else { return };
        if !self.waits.meta_owed(&self.signal) {
            return;
        }
        let mut ctx = WriteCtx::new(txn, &self.dbs, &self.state, &self.env, self.map_size);
        if let Err(err) = super::restamp(&mut ctx, meta) {
            tracing::warn!(error = %err, "store writer could not write the marker that makes its commits durable again after a failed sync");
        }
    }

    /// Commit a batch's (or a part's) transaction: its pages synced, its meta page written.
    fn commit(&self, txn: RwTxn<'_>) -> Result<(), StoreError> {
        #[cfg(test)]
        if let Some(err) = self.stats.faults.commit() {
            txn.abort();
            return Err(err);
        }
        txn.commit()
            .map_err(|e| self.map.write_error(e, self.map_size))
    }
}

/// How one part of a split batch went ([`Writer::commit_part`]).
enum Part {
    /// Committed: its operations' results stand (those that failed hold their own errors).
    Committed,
    /// Failed for room, its operations not yet answered: a smaller part may fit.
    Room(StoreError),
    /// Failed for something else (no transaction could begin, an I/O error at its commit):
    /// its operations hold that error, and no smaller part would fare better.
    Failed,
}

/// A commit that failed for want of room, which a smaller commit may still find.
fn is_room(e: &StoreError) -> bool {
    matches!(e, StoreError::DiskFull(_) | StoreError::MapFull { .. })
}

/// Answer every operation of a finished batch.
fn answer(batch: Vec<Job>, commit_error: Option<&StoreError>) {
    for job in batch {
        job.answer(commit_error);
    }
}

/// A batch the writer is done with: committed (with the store's transaction id after it), or
/// never begun (`Ok(None)`: each operation holds that error), or its commit failed.
struct Settled {
    batch: Vec<Job>,
    outcome: Result<Option<usize>, StoreError>,
}

/// What making batches durable and answering them needs, on whichever thread does it.
#[derive(Clone)]
struct Durability {
    env: Env<WithoutTls>,
    map_size: usize,
    stats: Arc<WriterStats>,
    signal: Arc<CommitSignal>,
    waits: Arc<DurableWaits>,
}

impl Durability {
    /// Sync once for every committed batch of `settled`, then answer them all: each
    /// operation's own result when the sync succeeded; otherwise, for an operation that
    /// succeeded and wrote, [`StoreError::NotDurable`] with the sync's error (its writes are
    /// committed: readers see them, and a later commit synced makes them durable). A sync after
    /// a failed one credits nothing until a batch has written a fresh meta page
    /// ([`DurableWaits::unproven`]).
    fn settle(&self, settled: Vec<Settled>) {
        let newest = settled
            .iter()
            .filter_map(|s| s.outcome.as_ref().ok().copied().flatten())
            .max();
        let synced = newest.map(|txn_id| {
            self.sync().and_then(|()| {
                // A sync proves only the meta pages written since the last one failed: a batch
                // that wrote none (its id no newer than that failure's) is not credited.
                self.waits.unproven(txn_id).map_or(Ok(txn_id), Err)
            })
        });
        if let Some(Ok(txn_id)) = synced {
            self.waits.made_durable(&self.signal, txn_id);
            // Once per sync, never for a rebuilt pass or a failed commit: followers of the
            // log wake once for everything it made durable.
            self.signal.raise();
        }
        let sync_error = match (&synced, newest) {
            (Some(Err(err)), Some(newest)) => {
                self.waits.failed(newest, err);
                Some(err)
            }
            _ => None,
        };
        let commit_error = settled.iter().find_map(|s| s.outcome.as_ref().err());
        self.stats
            .failing
            .settled(matches!(synced, Some(Ok(_))), sync_error.or(commit_error));
        let not_durable = sync_error.map(|err| StoreError::NotDurable(Box::new(err.clone())));
        for Settled { batch, outcome } in settled {
            match &outcome {
                Ok(Some(_)) => answer(batch, not_durable.as_ref()),
                Ok(None) => answer(batch, None),
                Err(err) => answer(batch, Some(err)),
            }
        }
    }

    /// Sync the store's file: every commit so far becomes durable, meta pages included.
    fn sync(&self) -> Result<(), StoreError> {
        self.stats.syncs.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        #[cfg(test)]
        if let Some(err) = self.stats.faults.sync() {
            tracing::error!(error = %err, "store writer could not sync its commits");
            return Err(err);
        }
        let synced = self
            .env
            .force_sync()
            .map_err(|e| StoreError::from_heed(e, self.map_size));
        self.stats.sync_nanos.fetch_add(
            u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        synced.inspect_err(|err| {
            tracing::error!(error = %err, "store writer could not sync its commits");
        })
    }
}

/// Move what is queued into `batch`, up to [`MAX_BATCH`] operations.
fn drain(receiver: &Receiver<Job>, batch: &mut Vec<Job>) {
    while batch.len() < MAX_BATCH {
        match receiver.try_recv() {
            Ok(job) => batch.push(job),
            Err(_) => break,
        }
    }
}

/// The thread that makes committed batches durable and answers their callers while the
/// writer builds the next ones.
struct Syncer {
    sender: Sender<Settled>,
    thread: JoinHandle<()>,
    /// For settling on the writer should the thread be gone.
    durability: Durability,
}

impl Syncer {
    /// `None` when no thread can be started: the writer then syncs and answers every batch
    /// itself.
    fn spawn(durability: Durability) -> Option<Syncer> {
        let (sender, receiver) = channel::<Settled>();
        let own = durability.clone();
        let thread = std::thread::Builder::new()
            .name("worldd-store-sync".into())
            .spawn(move || {
                while let Ok(first) = receiver.recv() {
                    // Whatever the writer committed meanwhile shares this sync.
                    let mut settled = vec![first];
                    settled.extend(receiver.try_iter());
                    own.settle(settled);
                }
            })
            .inspect_err(|err| {
                tracing::warn!(error = %err, "store writer syncs its own batches: no thread for it");
            })
            .ok()?;
        Some(Syncer {
            sender,
            thread,
            durability,
        })
    }

    fn hand(&self, settled: Settled) {
        // The thread only ends when the sender is dropped; should it have died, settle here.
        if let Err(std::sync::mpsc::SendError(settled)) = self.sender.send(settled) {
            self.durability.settle(vec![settled]);
        }
    }

    /// Every batch handed over is synced and answered before the writer thread ends.
    fn finish(self) {
        drop(self.sender);
        let _ = self.thread.join();
    }
}
