//! The LMDB store: one environment, named databases, and one writer thread with group commit.
//!
//! Reads run on the caller's thread in their own read transaction. Every write goes through
//! [`Store::write`]: the operation is sent to the single writer thread, which drains whatever is
//! queued, runs the operations in one transaction, commits it once (LMDB's default full sync:
//! durable when acknowledged) and then answers every caller. Throughput under concurrency comes
//! from that batching, never from weaker syncing. A failing operation's writes are undone alone
//! (the batch is built again with each operation in a nested transaction); a failing commit
//! fails the batch.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use heed::byteorder::BigEndian;
use heed::types::{Bytes, Str, U64};
use heed::{CommitOrAbort, Database, Env, EnvOpenOptions, PutFlags, RoTxn, RwTxn, WithoutTls};

use crate::log::{self, LogError};
use crate::object::{Object, ObjectView, Ref};

/// The schema this build reads and writes. A schema-1 store is migrated when it is opened
/// ([`crate::migrate`]); any other version is refused unmodified.
pub const SCHEMA_VERSION: u32 = 2;
/// Default LMDB map size: sparse on Linux, so a large reservation costs nothing until used.
pub const DEFAULT_MAP_SIZE: usize = 16 << 30;
const MAX_BATCH: usize = 256;

/// Store failures. `Clone` because one failed group commit answers every caller in it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("world store {0} does not exist")]
    NotFound(PathBuf),
    #[error("the store is full: LMDB map size {map_size} bytes reached; restart with a larger --map-size")]
    MapFull { map_size: usize },
    #[error("store schema version {found} is not the version this build uses ({expected}); refusing to open it")]
    SchemaMismatch { found: String, expected: u32 },
    #[error("store {0} is already open in this process")]
    AlreadyOpen(PathBuf),
    #[error("store {0} uses schema 1 and another process has it open; stop that process (a worldd of an older build?) so that this build can migrate the store to schema 2")]
    MigrationBusy(PathBuf),
    #[error("store I/O error: {0}")]
    Io(String),
    #[error("LMDB error: {0}")]
    Lmdb(String),
    #[error("store is damaged: {0}")]
    Corrupt(String),
    #[error("the store's writer thread has stopped")]
    WriterGone,
}

impl StoreError {
    pub(crate) fn from_heed(err: heed::Error, map_size: usize) -> StoreError {
        match err {
            heed::Error::Mdb(heed::MdbError::MapFull) => StoreError::MapFull { map_size },
            heed::Error::Io(e) => StoreError::Io(e.to_string()),
            heed::Error::EnvAlreadyOpened => StoreError::AlreadyOpen(PathBuf::new()),
            other => StoreError::Lmdb(other.to_string()),
        }
    }
}

/// The named databases (schema 2; `docs/data-model.md` §8.2).
#[derive(Clone, Copy)]
pub struct Tables {
    /// object sequence (u64 BE, insertion order) → ref(32) ‖ object envelope (database
    /// `object_rows`).
    pub objects: Database<'static, U64<BigEndian>, Bytes>,
    /// ref(32) ‖ kind → u64 BE: an object's sequence (`o`), an entry's index by its hash (`e`)
    /// or by the ref of the world it selected (`w`).
    pub refs: Database<'static, Bytes, U64<BigEndian>>,
    /// u16 BE length ‖ semanticId ‖ object sequence (u64 BE) → (): the semantic-id index, in
    /// insertion order.
    pub semantic_ids: Database<'static, Bytes, Bytes>,
    /// entry index (u64 BE) → log row: world ref, entry JSON and world JSON (database
    /// `entries`; see [`crate::log`]).
    pub log: Database<'static, U64<BigEndian>, Bytes>,
    /// journal sequence (u64 BE) → canonical journal record JSON.
    pub journal: Database<'static, U64<BigEndian>, Bytes>,
    /// invocation id → journal state and task state of its first durable point
    /// (module `invocations`; `docs/data-model.md` §8.2).
    pub invocations: Database<'static, Str, Bytes>,
    /// intent sequence (u64 BE) → the journal state and task state that resolved that intent.
    pub resolutions: Database<'static, U64<BigEndian>, Bytes>,
    /// invocation id → intent sequence, for intents that have no outcome yet.
    pub pending: Database<'static, Str, U64<BigEndian>>,
    /// episode \0 effect \0 scope → units spent (u64 BE).
    pub spend: Database<'static, Bytes, U64<BigEndian>>,
    /// credential id (64 hex) → canonical session JSON.
    pub sessions: Database<'static, Str, Bytes>,
    /// registry name → registry revision ref(32).
    pub registry_heads: Database<'static, Str, Bytes>,
    /// meta key → value (schema version).
    pub meta: Database<'static, Str, Bytes>,
    /// The environment's map size, for error reports.
    pub map_size: usize,
}

/// The writable view handed to an operation running on the writer thread.
pub struct WriteCtx<'a, 't> {
    pub txn: &'a mut RwTxn<'t>,
    pub tables: &'a Tables,
    env: &'a Env<WithoutTls>,
}

/// The read-only view for readers.
pub struct ReadCtx<'a> {
    pub txn: &'a RoTxn<'a, WithoutTls>,
    pub tables: &'a Tables,
}

/// Called on the writer thread after each group commit, before its callers are answered, with
/// the batch's operation count and whether the commit succeeded (profiling tools: the page
/// census of `benches/store_pages.rs`).
#[doc(hidden)]
pub type CommitObserver = Box<dyn FnMut(usize, bool) + Send>;
type ObserverSlot = Arc<Mutex<Option<CommitObserver>>>;
type Job = Box<dyn Operation>;

/// One queued write: the caller's operation, which the writer may run more than once (a batch
/// is built again after one of its operations fails), and the caller waiting for its result.
trait Operation: Send {
    /// Run in the batch's transaction itself; `true` when it succeeded.
    fn run(&mut self, ctx: &mut WriteCtx<'_, '_>) -> bool;
    /// Run in a nested transaction of the batch's, so that a failure undoes only its writes.
    fn run_nested(&mut self, ctx: &mut WriteCtx<'_, '_>);
    /// The batch's transaction could not begin: fail without running.
    fn fail(&mut self, err: &StoreError);
    /// Answer the caller once the batch's commit is known.
    fn answer(self: Box<Self>, commit_error: Option<&StoreError>);
}

/// A [`Store::write`] in the writer's queue.
struct Write<F, R, E> {
    op: F,
    result: Option<Result<R, E>>,
    reply: SyncSender<Result<R, E>>,
    map_size: usize,
}

impl<F, R, E> Operation for Write<F, R, E>
where
    F: for<'a, 't> FnMut(&mut WriteCtx<'a, 't>) -> Result<R, E> + Send,
    R: Send,
    E: From<StoreError> + Send,
{
    fn run(&mut self, ctx: &mut WriteCtx<'_, '_>) -> bool {
        let result = (self.op)(ctx);
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
        let answer = match (commit_error, self.result) {
            (Some(e), Some(Ok(_))) => Err(E::from(e.clone())),
            (_, Some(r)) => r,
            (_, None) => Err(E::from(StoreError::WriterGone)),
        };
        let _ = self.reply.send(answer);
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
    /// Time spent in LMDB's commit (page writes, data sync, meta sync), ns.
    pub commit_nanos: AtomicU64,
    /// Batches built a second time, each operation in a nested transaction, because one of
    /// them failed in the first.
    pub rebuilt_batches: AtomicU64,
}

struct Inner {
    env: Env<WithoutTls>,
    tables: Tables,
    path: PathBuf,
    map_size: usize,
    sender: Mutex<Option<Sender<Job>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    stats: Arc<WriterStats>,
    observer: ObserverSlot,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Closing the channel ends the writer loop; joining releases its Env clone so the
        // environment really closes and the directory can be opened again in this process.
        if let Ok(mut s) = self.sender.lock() {
            s.take();
        }
        if let Ok(mut w) = self.writer.lock() {
            if let Some(handle) = w.take() {
                let _ = handle.join();
            }
        }
    }
}

/// Options for [`Store::open`].
#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub map_size: usize,
    /// Create the directory and the genesis when absent.
    pub create: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            map_size: DEFAULT_MAP_SIZE,
            create: false,
        }
    }
}

/// A handle to the store; cheap to clone and usable from any thread.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.inner.path)
            .finish()
    }
}

pub(crate) const META_SCHEMA: &str = "schema_version";

/// What the store's `meta` says about its schema.
enum Schema {
    /// This build's version.
    Current,
    /// Version 1: migrated on open.
    Version1,
    /// No version and no log: a store being created.
    New,
    /// Another version, or none beside a non-empty log: refused.
    Other(String),
}

/// Read the schema version in a read transaction (creating nothing).
fn read_schema(env: &Env<WithoutTls>) -> heed::Result<Schema> {
    let rtxn = env.read_txn()?;
    let mut schema = Schema::New;
    env.open_databases_and_commit(rtxn, |dbo, rtxn| -> heed::Result<_> {
        let meta = dbo.open_database::<Str, Bytes>(rtxn, Some("meta"))?;
        let version = match meta {
            Some(meta) => meta
                .get(rtxn, META_SCHEMA)?
                .map(|v| String::from_utf8_lossy(v).into_owned()),
            None => None,
        };
        schema = match version.as_deref() {
            Some(v) if v == SCHEMA_VERSION.to_string() => Schema::Current,
            Some("1") => Schema::Version1,
            Some(other) => Schema::Other(other.to_owned()),
            None => {
                // Either schema's log: a store with entries but no version is not ours.
                let mut entries = 0;
                for name in ["log", "entries"] {
                    if let Some(t) = dbo.open_database::<Bytes, Bytes>(rtxn, Some(name))? {
                        entries += t.len(rtxn)?;
                    }
                }
                if entries == 0 {
                    Schema::New
                } else {
                    Schema::Other("none".into())
                }
            }
        };
        Ok(CommitOrAbort::<(), ()>::Commit(()))
    })?;
    Ok(schema)
}

impl Store {
    /// Open (or with `create`, create) the store in `dir`. A new store gets its genesis entry.
    pub fn open(dir: &Path, options: StoreOptions) -> Result<Store, StoreError> {
        let exists = dir.join("data.mdb").exists();
        if !exists {
            if !options.create {
                return Err(StoreError::NotFound(dir.to_path_buf()));
            }
            std::fs::create_dir_all(dir).map_err(|e| StoreError::Io(e.to_string()))?;
        }
        let map_size = options.map_size;
        let heed_err = |e| StoreError::from_heed(e, map_size);
        // Asked before this process opens the environment (see `open_elsewhere`).
        let shared = exists && crate::migrate::open_elsewhere(dir);
        let env = unsafe {
            // SAFETY: heed requires that the environment is not opened twice in one process
            // (it checks and reports EnvAlreadyOpened) and that the files are not modified by
            // other means; every process uses the same flags.
            EnvOpenOptions::new()
                .read_txn_without_tls()
                .map_size(map_size)
                .max_dbs(32)
                .max_readers(512)
                .open(dir)
        }
        .map_err(|e| match e {
            heed::Error::EnvAlreadyOpened => StoreError::AlreadyOpen(dir.to_path_buf()),
            other => heed_err(other),
        })?;
        // Reader slots of crashed processes would otherwise leak.
        let _ = env.clear_stale_readers();

        // Schema: refuse an unknown version without touching anything; migrate schema 1.
        match read_schema(&env).map_err(heed_err)? {
            Schema::Current | Schema::New => {}
            // A process of an older build would lose its tables under its feet.
            Schema::Version1 if shared => return Err(StoreError::MigrationBusy(dir.to_path_buf())),
            Schema::Version1 => {
                crate::migrate::schema_1_to_2(&env, map_size)?;
            }
            Schema::Other(found) => {
                return Err(StoreError::SchemaMismatch {
                    found,
                    expected: SCHEMA_VERSION,
                })
            }
        }

        let wtxn = env.write_txn().map_err(heed_err)?;
        let tables = env
            .create_databases_and_commit(wtxn, |dbo, wtxn| -> heed::Result<_> {
                Ok(CommitOrAbort::<_, ()>::Commit((
                    (
                        dbo.create_database(wtxn, Some("object_rows"))?,
                        dbo.create_database(wtxn, Some("semantic_ids"))?,
                        dbo.create_database(wtxn, Some("entries"))?,
                        dbo.create_database(wtxn, Some("refs"))?,
                        dbo.create_database(wtxn, Some("journal"))?,
                        dbo.create_database(wtxn, Some("invocations"))?,
                        dbo.create_database(wtxn, Some("resolutions"))?,
                    ),
                    (
                        dbo.create_database(wtxn, Some("pending"))?,
                        dbo.create_database(wtxn, Some("spend"))?,
                        dbo.create_database(wtxn, Some("sessions"))?,
                        dbo.create_database(wtxn, Some("registry_heads"))?,
                        dbo.create_database(wtxn, Some("meta"))?,
                    ),
                )))
            })
            .map_err(heed_err)?
            .commit()
            .ok_or_else(|| StoreError::Lmdb("database creation aborted".into()))?;
        let (
            (objects, semantic_ids, log, refs, journal, invocations, resolutions),
            (pending, spend, sessions, registry_heads, meta),
        ) = tables;
        let tables = Tables {
            objects,
            refs,
            semantic_ids,
            log,
            journal,
            invocations,
            resolutions,
            pending,
            spend,
            sessions,
            registry_heads,
            meta,
            map_size,
        };

        let (sender, receiver) = mpsc::channel::<Job>();
        let stats = Arc::new(WriterStats::default());
        let observer = ObserverSlot::default();
        let writer = {
            let env = env.clone();
            let stats = stats.clone();
            let observer = observer.clone();
            std::thread::Builder::new()
                .name("worldd-store-writer".into())
                .spawn(move || writer_loop(env, tables, receiver, map_size, stats, observer))
                .map_err(|e| StoreError::Io(e.to_string()))?
        };
        let store = Store {
            inner: Arc::new(Inner {
                env,
                tables,
                path: dir.to_path_buf(),
                map_size,
                sender: Mutex::new(Some(sender)),
                writer: Mutex::new(Some(writer)),
                stats,
                observer,
            }),
        };
        store.ensure_genesis()?;
        store.report_indeterminate();
        Ok(store)
    }

    /// Create the store in `dir` if absent, with default options.
    pub fn create(dir: &Path) -> Result<Store, StoreError> {
        Store::open(
            dir,
            StoreOptions {
                create: true,
                ..StoreOptions::default()
            },
        )
    }

    fn ensure_genesis(&self) -> Result<(), StoreError> {
        let has_head = self.read(|r| Ok(log::head(r)?.is_some()))?;
        if has_head {
            return Ok(());
        }
        self.write(|w| -> Result<(), StoreError> {
            w.tables
                .meta
                .put(w.txn, META_SCHEMA, SCHEMA_VERSION.to_string().as_bytes())
                .map_err(w.heed_err())?;
            log::write_genesis(w).map(|_| ()).map_err(|e| match e {
                LogError::Store(s) => s,
                other => StoreError::Corrupt(other.to_string()),
            })
        })
    }

    /// Intents without an outcome are indeterminate: report each one when the store opens.
    /// They are never retried; their budget stays spent.
    fn report_indeterminate(&self) {
        match self.indeterminate() {
            // One line on open; `report_indeterminate_each` lists them (the daemon does).
            Ok(pending) if !pending.is_empty() => tracing::warn!(
                "{} indeterminate effect(s): intent journaled, no outcome; they are never retried",
                pending.len()
            ),
            Ok(_) => {}
            Err(e) => tracing::error!("cannot read pending intents: {e}"),
        }
    }

    /// Log every indeterminate effect, one line each.
    pub fn report_indeterminate_each(&self) {
        if let Ok(pending) = self.indeterminate() {
            for p in &pending {
                tracing::warn!(
                    invocation = %p.intent.invocation_id,
                    episode = %p.intent.episode,
                    effect = %p.intent.effect,
                    "indeterminate effect: intent journaled, no outcome; it will not be retried"
                );
            }
        }
    }

    /// Intents without an outcome (indeterminate effects).
    pub fn indeterminate(
        &self,
    ) -> Result<Vec<crate::journal::JournalState>, crate::journal::JournalError> {
        self.read(crate::journal::pending)
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    pub fn map_size(&self) -> usize {
        self.inner.map_size
    }

    pub fn stats(&self) -> &WriterStats {
        &self.inner.stats
    }

    /// Install (or with `None`, remove) the observer called after every group commit.
    #[doc(hidden)]
    pub fn observe_commits(&self, observer: Option<CommitObserver>) {
        if let Ok(mut slot) = self.inner.observer.lock() {
            *slot = observer;
        }
    }

    /// Run `op` in a read transaction on this thread.
    pub fn read<R, E>(&self, op: impl FnOnce(&ReadCtx<'_>) -> Result<R, E>) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        let txn = self
            .inner
            .env
            .read_txn()
            .map_err(|e| StoreError::from_heed(e, self.inner.map_size))?;
        let ctx = ReadCtx {
            txn: &txn,
            tables: &self.inner.tables,
        };
        op(&ctx)
    }

    /// Run `op` on the writer thread inside the next group commit and wait until that commit is
    /// durable. `op`'s writes are discarded when it returns an error; other operations of the
    /// same batch are unaffected. `op` may run more than once (when another operation of its
    /// batch fails, the batch is built again; only the last run's writes and result count), so
    /// it must not consume what it captures or act outside the transaction. Blocks the calling
    /// thread.
    pub fn write<R, E>(
        &self,
        op: impl for<'a, 't> FnMut(&mut WriteCtx<'a, 't>) -> Result<R, E> + Send + 'static,
    ) -> Result<R, E>
    where
        R: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        let (reply, rx): (SyncSender<Result<R, E>>, _) = mpsc::sync_channel(1);
        let job: Job = Box::new(Write {
            op,
            result: None,
            reply,
            map_size: self.inner.map_size,
        });
        {
            let guard = self
                .inner
                .sender
                .lock()
                .map_err(|_| StoreError::WriterGone)?;
            let sender = guard.as_ref().ok_or(StoreError::WriterGone)?;
            sender.send(job).map_err(|_| StoreError::WriterGone)?;
        }
        rx.recv().map_err(|_| E::from(StoreError::WriterGone))?
    }

    /// Maintenance access to stored bytes, for `doctor`-style tools and tamper tests: an
    /// object's envelope (by ref), an entry's JSON (by index, u64 BE) or a world's JSON (by
    /// world ref). The rest of the row is kept.
    #[doc(hidden)]
    pub fn raw_overwrite(
        &self,
        table: RawTable,
        key: Vec<u8>,
        value: Vec<u8>,
    ) -> Result<(), StoreError> {
        self.write(move |w| -> Result<(), StoreError> {
            let e = w.heed_err();
            match table {
                RawTable::Objects => {
                    let r = raw_ref(&key)?;
                    let (seq, _) = object_row(w.txn, w.tables, &r)?
                        .ok_or_else(|| StoreError::Corrupt(format!("no object {r}")))?;
                    let mut row = key.clone();
                    row.extend_from_slice(&value);
                    w.tables.objects.put(w.txn, &seq, &row).map_err(e)
                }
                RawTable::Worlds => {
                    let world_ref = raw_ref(&key)?;
                    let index = log::index_of_world(w.txn, w.tables, &world_ref)?
                        .ok_or_else(|| StoreError::Corrupt(format!("no world {world_ref}")))?;
                    log::overwrite_row(w, index, None, Some(&value))
                }
                RawTable::Log => log::overwrite_row(w, raw_index(&key)?, Some(&value), None),
            }
        })
    }

    /// Raw stored bytes (see [`Store::raw_overwrite`]).
    #[doc(hidden)]
    pub fn raw_get(&self, table: RawTable, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.read(|r| {
            Ok(match table {
                RawTable::Objects => {
                    object_row(r.txn, r.tables, &raw_ref(key)?)?.map(|(_, v)| v.to_vec())
                }
                RawTable::Worlds => log::world_bytes(r, &raw_ref(key)?)?,
                RawTable::Log => log::entry_bytes(r, raw_index(key)?)?,
            })
        })
    }
}

fn raw_ref(key: &[u8]) -> Result<Ref, StoreError> {
    Ref::from_slice(key).ok_or_else(|| StoreError::Corrupt("a ref key must be 32 bytes".into()))
}

fn raw_index(key: &[u8]) -> Result<u64, StoreError> {
    key.try_into()
        .map(u64::from_be_bytes)
        .map_err(|_| StoreError::Corrupt("log key must be 8 bytes".into()))
}

/// Tables reachable through the raw maintenance accessors.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub enum RawTable {
    Objects,
    Worlds,
    Log,
}

fn run_nested<R, E>(
    ctx: &mut WriteCtx<'_, '_>,
    op: &mut impl for<'a, 't> FnMut(&mut WriteCtx<'a, 't>) -> Result<R, E>,
    map_size: usize,
) -> Result<R, E>
where
    E: From<StoreError>,
{
    let tables = ctx.tables;
    let env = ctx.env;
    let mut nested = env
        .nested_write_txn(ctx.txn)
        .map_err(|e| StoreError::from_heed(e, map_size))?;
    let mut inner = WriteCtx {
        txn: &mut nested,
        tables,
        env,
    };
    let result = op(&mut inner);
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

fn writer_loop(
    env: Env<WithoutTls>,
    tables: Tables,
    receiver: Receiver<Job>,
    map_size: usize,
    stats: Arc<WriterStats>,
    observer: ObserverSlot,
) {
    while let Ok(first) = receiver.recv() {
        let started = Instant::now();
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match receiver.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let n = batch.len() as u64;
        stats.batches.fetch_add(1, Ordering::Relaxed);
        stats.operations.fetch_add(n, Ordering::Relaxed);
        stats.largest_batch.fetch_max(n, Ordering::Relaxed);
        let outcome = build_and_commit(&env, &tables, &mut batch, map_size, &stats, started);
        let committed = matches!(outcome, Ok(true));
        let err = outcome.err();
        if let Ok(mut slot) = observer.lock() {
            if let Some(observe) = slot.as_mut() {
                observe(batch.len(), committed);
            }
        }
        for job in batch {
            job.answer(err.as_ref());
        }
    }
}

/// Build one group commit from `batch` and commit it (LMDB's full sync); `Ok(false)` when no
/// transaction could begin (every operation then holds that error).
///
/// Every operation first runs straight in the batch's transaction: nested transactions cost
/// each operation a copy of every page it touches that the batch has already touched. If one
/// fails, its partial writes are in that transaction, so it is aborted and the batch is built
/// again with every other operation in its own nested transaction (as if each had been alone),
/// the failed one keeping its error. Operations before it run twice; none runs more than
/// twice.
fn build_and_commit(
    env: &Env<WithoutTls>,
    tables: &Tables,
    batch: &mut [Job],
    map_size: usize,
    stats: &WriterStats,
    started: Instant,
) -> Result<bool, StoreError> {
    let heed_err = |e| StoreError::from_heed(e, map_size);
    let begin = || {
        env.write_txn().map_err(heed_err).inspect_err(|err| {
            tracing::error!(error = %err, "store writer could not begin a transaction");
        })
    };
    let mut txn = match begin() {
        Ok(t) => t,
        Err(err) => {
            // Each job must still answer: nothing ran, nothing was committed.
            batch.iter_mut().for_each(|job| job.fail(&err));
            return Ok(false);
        }
    };
    let mut failed = None;
    for (i, job) in batch.iter_mut().enumerate() {
        let mut ctx = WriteCtx {
            txn: &mut txn,
            tables,
            env,
        };
        if !job.run(&mut ctx) {
            failed = Some(i);
            break;
        }
    }
    if let Some(failed) = failed {
        txn.abort();
        stats.rebuilt_batches.fetch_add(1, Ordering::Relaxed);
        txn = match begin() {
            Ok(t) => t,
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
                let mut ctx = WriteCtx {
                    txn: &mut txn,
                    tables,
                    env,
                };
                job.run_nested(&mut ctx);
            }
        }
    }
    let built = Instant::now();
    let outcome = txn.commit().map_err(heed_err);
    let committed = Instant::now();
    let nanos = |d: std::time::Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    stats
        .build_nanos
        .fetch_add(nanos(built - started), Ordering::Relaxed);
    stats
        .commit_nanos
        .fetch_add(nanos(committed - built), Ordering::Relaxed);
    outcome.map(|()| true)
}

/// Helpers shared by read and write contexts.
pub trait TxnExt {
    fn tables(&self) -> &Tables;
    /// Convert heed errors into [`StoreError`] (with the real map size for `MapFull`).
    fn heed_err(&self) -> impl Fn(heed::Error) -> StoreError + Copy + 'static {
        let map_size = self.tables().map_size;
        move |e| StoreError::from_heed(e, map_size)
    }
}

impl TxnExt for ReadCtx<'_> {
    fn tables(&self) -> &Tables {
        self.tables
    }
}

impl TxnExt for WriteCtx<'_, '_> {
    fn tables(&self) -> &Tables {
        self.tables
    }
}

impl<'t> ReadCtx<'t> {
    pub fn object(&self, r: &Ref) -> Result<Option<Object>, StoreError> {
        get_object(self.txn, self.tables, r)
    }

    /// An object borrowed from this read transaction, without copying its payload.
    pub fn object_view(&self, r: &Ref) -> Result<Option<ObjectView<'t>>, StoreError> {
        match object_row(self.txn, self.tables, r)? {
            None => Ok(None),
            Some((_, envelope)) => ObjectView::decode(*r, envelope)
                .map(Some)
                .ok_or_else(|| StoreError::Corrupt(format!("object {r} has a damaged envelope"))),
        }
    }
}

impl WriteCtx<'_, '_> {
    pub fn object(&self, r: &Ref) -> Result<Option<Object>, StoreError> {
        get_object(self.txn, self.tables, r)
    }

    /// Insert an object unless present (first writer's provenance wins). The payload must hash
    /// to the object's address. Objects are stored in the order they arrive (the next sequence
    /// number), so a group commit's new objects fill the same pages at the end of the table.
    pub fn put_object(&mut self, object: &Object) -> Result<(), StoreError> {
        if !object.verify() {
            return Err(StoreError::Corrupt(format!(
                "object {} does not hash to its address",
                object.hash
            )));
        }
        self.put_verified_object(object)
    }

    /// Whether an object with this ref is stored (without reading it).
    pub fn has_object(&self, r: &Ref) -> Result<bool, StoreError> {
        Ok(self
            .tables
            .refs
            .get(self.txn, &ref_key(r, OBJECT))
            .map_err(self.heed_err())?
            .is_some())
    }

    /// [`WriteCtx::put_object`] for an object whose payload the caller has just hashed.
    pub(crate) fn put_verified_object(&mut self, object: &Object) -> Result<(), StoreError> {
        let e = self.heed_err();
        let key = ref_key(&object.hash, OBJECT);
        if self.tables.refs.get(self.txn, &key).map_err(e)?.is_some() {
            return Ok(());
        }
        let mut index_key = semantic_prefix(&object.semantic_id)?;
        let seq = match self.tables.objects.last(self.txn).map_err(e)? {
            Some((last, _)) => last + 1,
            None => 0,
        };
        let envelope = object.encode_value();
        let mut row = Vec::with_capacity(32 + envelope.len());
        row.extend_from_slice(object.hash.as_bytes());
        row.extend_from_slice(&envelope);
        self.tables
            .objects
            .put_with_flags(self.txn, PutFlags::APPEND, &seq, &row)
            .map_err(e)?;
        self.tables.refs.put(self.txn, &key, &seq).map_err(e)?;
        index_key.extend_from_slice(&seq.to_be_bytes());
        self.tables
            .semantic_ids
            .put(self.txn, &index_key, &[])
            .map_err(e)?;
        Ok(())
    }
}

/// `refs` key kinds: the same digest may name an object, an entry and a world at once.
pub(crate) const OBJECT: u8 = b'o';
pub(crate) const ENTRY_HASH: u8 = b'e';
pub(crate) const WORLD_REF: u8 = b'w';

/// The `refs` key of `r` as a `kind`.
pub(crate) fn ref_key(r: &Ref, kind: u8) -> [u8; 33] {
    let mut key = [0u8; 33];
    key[..32].copy_from_slice(r.as_bytes());
    key[32] = kind;
    key
}

/// The key prefix of a semantic id in `semantic_ids`: its length (u16 BE) then its bytes, so
/// that no semantic id's range contains another's.
pub(crate) fn semantic_prefix(semantic_id: &str) -> Result<Vec<u8>, StoreError> {
    let len = u16::try_from(semantic_id.len()).map_err(|_| {
        StoreError::Corrupt(format!(
            "a semantic id of {} bytes is longer than the store keeps",
            semantic_id.len()
        ))
    })?;
    let mut key = Vec::with_capacity(semantic_id.len() + 10);
    key.extend_from_slice(&len.to_be_bytes());
    key.extend_from_slice(semantic_id.as_bytes());
    Ok(key)
}

/// Refs read lazily from a read transaction.
pub type Refs<'t> = Box<dyn Iterator<Item = Result<Ref, StoreError>> + 't>;

impl<'t> ReadCtx<'t> {
    /// The refs of the objects with `semantic_id`, in the order the store first stored them,
    /// starting after the object `after`. `None` when `after` is not an object with this
    /// semantic id.
    pub fn semantic_id_refs(
        &self,
        semantic_id: &str,
        after: Option<&Ref>,
    ) -> Result<Option<Refs<'t>>, StoreError> {
        let e = self.heed_err();
        let prefix = semantic_prefix(semantic_id)?;
        let start = match after {
            None => 0,
            Some(r) => match object_row(self.txn, self.tables, r)? {
                Some((seq, envelope))
                    if ObjectView::decode(*r, envelope)
                        .is_some_and(|v| v.semantic_id == semantic_id) =>
                {
                    seq + 1
                }
                _ => return Ok(None),
            },
        };
        let mut from = prefix.clone();
        from.extend_from_slice(&start.to_be_bytes());
        let mut to = prefix.clone();
        to.extend_from_slice(&u64::MAX.to_be_bytes());
        let range = (
            std::ops::Bound::Included(from.as_slice()),
            std::ops::Bound::Included(to.as_slice()),
        );
        let (txn, tables) = (self.txn, self.tables);
        let iter = tables
            .semantic_ids
            .range(txn, &range)
            .map_err(e)?
            .map(move |item| {
                let (key, _) = item.map_err(e)?;
                let seq = key
                    .get(prefix.len()..)
                    .and_then(|k| <[u8; 8]>::try_from(k).ok())
                    .map(u64::from_be_bytes)
                    .ok_or_else(|| {
                        StoreError::Corrupt("a semantic-id index key is damaged".into())
                    })?;
                tables
                    .objects
                    .get(txn, &seq)
                    .map_err(e)?
                    .and_then(|row| row.get(..32))
                    .and_then(Ref::from_slice)
                    .ok_or_else(|| {
                        StoreError::Corrupt(format!("the semantic-id index names no object {seq}"))
                    })
            });
        Ok(Some(Box::new(iter)))
    }
}

/// The sequence number and envelope of the object `r`. The row must hold `r` itself: an
/// index pointing elsewhere is damage, never another object.
fn object_row<'t>(
    txn: &'t RoTxn<'_>,
    tables: &Tables,
    r: &Ref,
) -> Result<Option<(u64, &'t [u8])>, StoreError> {
    let e = |e| StoreError::from_heed(e, tables.map_size);
    let Some(seq) = tables.refs.get(txn, &ref_key(r, OBJECT)).map_err(e)? else {
        return Ok(None);
    };
    let row = tables
        .objects
        .get(txn, &seq)
        .map_err(e)?
        .ok_or_else(|| StoreError::Corrupt(format!("object {r} is indexed but missing")))?;
    match row.split_at_checked(32) {
        Some((stored, envelope)) if stored == r.as_bytes() => Ok(Some((seq, envelope))),
        _ => Err(StoreError::Corrupt(format!(
            "object {r} is indexed at a row of another object"
        ))),
    }
}

fn get_object(txn: &RoTxn<'_>, tables: &Tables, r: &Ref) -> Result<Option<Object>, StoreError> {
    match object_row(txn, tables, r)? {
        None => Ok(None),
        Some((_, envelope)) => Object::decode_value(*r, envelope)
            .map(Some)
            .ok_or_else(|| StoreError::Corrupt(format!("object {r} has a damaged envelope"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    type Reply = Receiver<Result<(), StoreError>>;

    /// A queued write that stores `object`, then fails when `fail` is set; counts its runs.
    fn job(object: Object, fail: bool, runs: Arc<AtomicUsize>, map_size: usize) -> (Job, Reply) {
        let (reply, rx) = mpsc::sync_channel(1);
        let op = move |w: &mut WriteCtx<'_, '_>| -> Result<(), StoreError> {
            runs.fetch_add(1, Ordering::SeqCst);
            w.put_object(&object)?;
            if fail {
                return Err(StoreError::Corrupt("failed after writing".into()));
            }
            Ok(())
        };
        let job: Job = Box::new(Write {
            op,
            result: None,
            reply,
            map_size,
        });
        (job, rx)
    }

    fn run_batch(
        store: &Store,
        fails: &[bool],
    ) -> (Vec<Result<(), StoreError>>, Vec<usize>, Vec<Ref>) {
        let inner = &store.inner;
        let objects: Vec<Object> = (0..fails.len())
            .map(|i| Object::new("world/test/v1", "t", format!("{fails:?} {i}").into_bytes()))
            .collect();
        let refs = objects.iter().map(|o| o.hash).collect();
        let runs: Vec<Arc<AtomicUsize>> = fails.iter().map(|_| Arc::default()).collect();
        let (mut batch, replies): (Vec<Job>, Vec<Reply>) = objects
            .into_iter()
            .zip(fails)
            .zip(&runs)
            .map(|((o, f), r)| job(o, *f, r.clone(), inner.map_size))
            .unzip();
        let outcome = build_and_commit(
            &inner.env,
            &inner.tables,
            &mut batch,
            inner.map_size,
            &inner.stats,
            Instant::now(),
        );
        assert!(matches!(outcome, Ok(true)), "{outcome:?}");
        for j in batch {
            j.answer(None);
        }
        let results = replies.iter().map(|r| r.recv().unwrap()).collect();
        let runs = runs.iter().map(|r| r.load(Ordering::SeqCst)).collect();
        (results, runs, refs)
    }

    /// Operations run straight in the batch's transaction; when one fails after writing, the
    /// batch is built again with the others in nested transactions: its writes are gone, the
    /// others' are committed, and nobody runs more than twice.
    #[test]
    fn an_operation_that_fails_after_writing_leaves_nothing_and_its_batch_commits_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("db")).unwrap();

        let (results, runs, _) = run_batch(&store, &[false, false, false]);
        assert!(results.iter().all(Result::is_ok));
        assert_eq!(runs, [1, 1, 1], "no failure: one run each");
        assert_eq!(store.stats().rebuilt_batches.load(Ordering::SeqCst), 0);

        let (results, runs, refs) = run_batch(&store, &[false, true, false, true, false]);
        let ok: Vec<bool> = results.iter().map(Result::is_ok).collect();
        assert_eq!(ok, [true, false, true, false, true]);
        assert_eq!(
            results[1].as_ref().unwrap_err().to_string(),
            "store is damaged: failed after writing"
        );
        // The first failure stops the straight pass; the rebuilt pass runs every other one
        // once more, nested, and the second failure undoes only its own writes.
        assert_eq!(runs, [2, 1, 1, 1, 1]);
        assert_eq!(store.stats().rebuilt_batches.load(Ordering::SeqCst), 1);
        let stored: Vec<bool> = refs
            .iter()
            .map(|r| store.read(|rd| rd.object(r)).unwrap().is_some())
            .collect();
        assert_eq!(stored, ok);
    }
}
