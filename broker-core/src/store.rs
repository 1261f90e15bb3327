//! The LMDB store: one environment, named databases, and one writer thread with group commit.
//!
//! Reads run on the caller's thread in their own read transaction. Every write goes through
//! [`Store::write`]: the operation is sent to the single writer thread, which drains whatever is
//! queued, runs the operations in one transaction, commits it once (LMDB's default full sync:
//! durable when acknowledged) and then answers every caller. Throughput under concurrency comes
//! from that batching, never from weaker syncing. A failing operation's writes are undone alone
//! (the batch is built again with each operation in a nested transaction); a failing commit
//! fails the batch.
//!
//! The LMDB map is reserved (sparse) at the operator's ceiling and the store grows into it by
//! itself; [`crate::capacity`] says why, and how client work is refused before the ceiling.
//! Every transaction of this process holds the map lock shared, so the one remap left
//! (another process grew the store past this map: `MDB_MAP_RESIZED`) happens only when none
//! is active, as LMDB requires.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use heed::byteorder::BigEndian;
use heed::types::{Bytes, Str, U64};
use heed::{CommitOrAbort, Database, Env, EnvOpenOptions, PutFlags, RoTxn, RwTxn, WithoutTls};

use crate::capacity::{self, BadLimits, Full, Gauge, Limits, Usage};
use crate::commit_signal::CommitSignal;
use crate::invocations::{self, Part};
use crate::log::{self, LogError};
use crate::object::{Object, ObjectView, Ref};

/// The schema this build reads and writes. A schema-1 store is migrated when it is opened
/// ([`crate::migrate`]); any other version is refused unmodified.
pub const SCHEMA_VERSION: u32 = 2;
/// Default LMDB map size (the default ceiling): sparse on Linux, so a large reservation costs
/// nothing until used.
pub const DEFAULT_MAP_SIZE: usize = capacity::DEFAULT_CEILING as usize;
const MAX_BATCH: usize = 256;
/// Free space under which a short write (EIO) is taken for a full disk.
const SHORT_WRITE_SLACK: u64 = 1 << 20;
/// How often, and how long apart, a remap after `MDB_MAP_RESIZED` waits for this process's
/// open transactions to end before it gives up.
const REMAP_ATTEMPTS: u32 = 200;
const REMAP_PAUSE: Duration = Duration::from_millis(5);

/// Store failures. `Clone` because one failed group commit answers every caller in it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("world store {0} does not exist")]
    NotFound(PathBuf),
    #[error("the store is full: LMDB map size {map_size} bytes reached (its ceiling); restart with a larger --store-ceiling")]
    MapFull { map_size: usize },
    #[error("disk full: the store's filesystem has no space left ({0})")]
    DiskFull(String),
    #[error("another process grew the store beyond this process's map, and this process could not adopt the new size while its own transactions were open; retry, or restart it")]
    MapResized,
    #[error(transparent)]
    Limits(#[from] BadLimits),
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
            heed::Error::Mdb(heed::MdbError::MapResized) => StoreError::MapResized,
            // heed turns LMDB's errno values into I/O errors: ENOSPC is one of them.
            heed::Error::Io(e) => StoreError::from_io(e),
            heed::Error::EnvAlreadyOpened => StoreError::AlreadyOpen(PathBuf::new()),
            other => StoreError::Lmdb(other.to_string()),
        }
    }

    /// An I/O error, with "disk full" told apart from other faults.
    pub fn from_io(e: std::io::Error) -> StoreError {
        match e.raw_os_error() {
            Some(code) if is_disk_full(code) => StoreError::DiskFull(e.to_string()),
            _ => StoreError::Io(e.to_string()),
        }
    }

    /// True for the "no space" failures (ENOSPC, and EDQUOT: a quota is a full disk too).
    pub fn is_disk_full(&self) -> bool {
        matches!(self, StoreError::DiskFull(_))
    }
}

fn is_disk_full(code: i32) -> bool {
    code == libc::ENOSPC || code == libc::EDQUOT
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
    /// episode \0 semanticId \0 ref(32) → (): which episode may read which object
    /// ([`crate::access`]).
    pub readers: Database<'static, Bytes, Bytes>,
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
    map: Arc<MapLock>,
    committed: Arc<CommitSignal>,
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
#[derive(Debug, Clone, Default)]
pub struct StoreOptions {
    /// The most the store may occupy, in bytes: the LMDB map is reserved at this size.
    /// `None` adopts the size the store records (the daemon's), or [`DEFAULT_MAP_SIZE`] for a
    /// new store: tools that open a store beside the daemon pass `None`.
    pub ceiling: Option<u64>,
    /// Room kept below the ceiling for calls in flight and the operator's verbs; past it, new
    /// client work is refused. `None`: [`capacity::Limits::new`]'s default.
    pub reserve: Option<u64>,
    /// Create the directory and the genesis when absent.
    pub create: bool,
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
            std::fs::create_dir_all(dir).map_err(StoreError::from_io)?;
        }
        // A given ceiling is the map size; none adopts the store's own (LMDB keeps it in the
        // meta page), or the default for a new store.
        let wanted = options
            .ceiling
            .or((!exists).then_some(capacity::DEFAULT_CEILING))
            .map(page_multiple);
        if let Some(ceiling) = options.ceiling {
            Limits::new(ceiling, options.reserve)?;
        }
        // Asked before this process opens the environment (see `open_elsewhere`).
        let shared = exists && crate::migrate::open_elsewhere(dir);
        let env = unsafe {
            // SAFETY: heed requires that the environment is not opened twice in one process
            // (it checks and reports EnvAlreadyOpened) and that the files are not modified by
            // other means; every process uses the same flags.
            let mut o = EnvOpenOptions::new().read_txn_without_tls();
            if let Some(size) = wanted {
                o.map_size(size);
            }
            o.max_dbs(32).max_readers(512).open(dir)
        }
        .map_err(|e| match e {
            heed::Error::EnvAlreadyOpened => StoreError::AlreadyOpen(dir.to_path_buf()),
            other => StoreError::from_heed(other, wanted.unwrap_or(0)),
        })?;
        let map_size = env.info().map_size;
        let heed_err = |e| StoreError::from_heed(e, map_size);
        let limits = Limits::new(options.ceiling.unwrap_or(map_size as u64), options.reserve)?;
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
                        dbo.create_database(wtxn, Some("readers"))?,
                    ),
                )))
            })
            .map_err(heed_err)?
            .commit()
            .ok_or_else(|| StoreError::Lmdb("database creation aborted".into()))?;
        let (
            (objects, semantic_ids, log, refs, journal, invocations, resolutions),
            (pending, spend, sessions, registry_heads, meta, readers),
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
            readers,
            map_size,
        };

        let (sender, receiver) = mpsc::channel::<Job>();
        let stats = Arc::new(WriterStats::default());
        let observer = ObserverSlot::default();
        let map = Arc::new(MapLock {
            lock: RwLock::new(()),
            gauge: Gauge::new(limits),
            page_size: env.unnamed_database_stat().page_size as u64,
            dir: dir.to_path_buf(),
        });
        map.measure(&env);
        let committed = Arc::new(CommitSignal::default());
        let writer = {
            let writer = Writer {
                env: env.clone(),
                tables,
                map_size,
                stats: stats.clone(),
                map: map.clone(),
                signal: committed.clone(),
                observer: observer.clone(),
            };
            std::thread::Builder::new()
                .name("worldd-store-writer".into())
                .spawn(move || writer.run(receiver))
                .map_err(StoreError::from_io)?
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
                map,
                committed,
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
        let has_head = self.read(|r| Ok::<_, StoreError>(log::head(r)?.is_some()))?;
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

    /// The LMDB map size now (it changes only when another process grew the store).
    pub fn map_size(&self) -> usize {
        self.inner.env.info().map_size
    }

    /// The latest reading of the store's size against its ceiling (taken after every group
    /// commit of this process).
    pub fn usage(&self) -> Usage {
        self.inner.map.gauge.usage()
    }

    /// `Err` when new client work must be refused: past the reserve, or the disk is short.
    /// Operator verbs and calls already admitted are not asked.
    pub fn admits_client_work(&self) -> Result<(), Full> {
        match self.usage().refusal() {
            Some(full) => Err(full),
            None => Ok(()),
        }
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

    /// Raised after every durable group commit of this handle's writer.
    pub fn commit_signal(&self) -> &CommitSignal {
        &self.inner.committed
    }

    /// Run `op` in a read transaction on this thread.
    pub fn read<R, E>(&self, op: impl FnOnce(&ReadCtx<'_>) -> Result<R, E>) -> Result<R, E>
    where
        E: From<StoreError>,
    {
        let held = self
            .inner
            .map
            .begin(&self.inner.env, |env| env.read_txn())?;
        let ctx = ReadCtx {
            txn: &held.txn,
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
    /// object's envelope (by ref), an entry's JSON (by index, u64 BE), a world's JSON (by
    /// world ref), a journal record (by seq, u64 BE), the journal or task state of an
    /// invocation (the rest of its row is kept), or an invocation row or a resolution whole
    /// (see [`RawTable`]).
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
                RawTable::Journal => w
                    .tables
                    .journal
                    .put(w.txn, &raw_index(&key)?, &value)
                    .map_err(e),
                RawTable::JournalIndex => {
                    invocations::overwrite_visible(w, str_key(&key)?, Part::Journal, &value)
                }
                RawTable::Tasks => {
                    let id = task_invocation(&key)?;
                    invocations::overwrite_visible(w, &id, Part::Task, &value)
                }
                RawTable::Invocations => w
                    .tables
                    .invocations
                    .put(w.txn, str_key(&key)?, &value)
                    .map_err(e),
                RawTable::Resolutions => w
                    .tables
                    .resolutions
                    .put(w.txn, &raw_index(&key)?, &value)
                    .map_err(e),
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
                RawTable::Journal => r
                    .tables
                    .journal
                    .get(r.txn, &raw_index(key)?)
                    .map_err(r.heed_err())?
                    .map(<[u8]>::to_vec),
                RawTable::JournalIndex => invocations::get(r.txn, r.tables, str_key(key)?)?
                    .and_then(|row| row.journal)
                    .map(<[u8]>::to_vec),
                RawTable::Tasks => invocations::get(r.txn, r.tables, &task_invocation(key)?)?
                    .and_then(|row| row.task)
                    .map(<[u8]>::to_vec),
                RawTable::Invocations => r
                    .tables
                    .invocations
                    .get(r.txn, str_key(key)?)
                    .map_err(r.heed_err())?
                    .map(<[u8]>::to_vec),
                RawTable::Resolutions => r
                    .tables
                    .resolutions
                    .get(r.txn, &raw_index(key)?)
                    .map_err(r.heed_err())?
                    .map(<[u8]>::to_vec),
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
        .map_err(|_| StoreError::Corrupt("a u64 key must be 8 bytes".into()))
}

/// The invocation a task key (`episode \0 task`) belongs to.
fn task_invocation(key: &[u8]) -> Result<String, StoreError> {
    let (episode, task) = str_key(key)?
        .split_once('\0')
        .ok_or_else(|| StoreError::Corrupt("a task key is `episode \\0 task`".into()))?;
    crate::task::invocation_key(episode, task)
}

fn str_key(key: &[u8]) -> Result<&str, StoreError> {
    std::str::from_utf8(key).map_err(|_| StoreError::Corrupt("key is not UTF-8".into()))
}

/// Tables reachable through the raw maintenance accessors.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub enum RawTable {
    Objects,
    Worlds,
    Log,
    /// Journal rows by sequence (u64 big-endian key).
    Journal,
    /// An invocation's journal state as readers see it, by invocation id (UTF-8 key): the
    /// part of its resolution, else of its row (`docs/data-model.md` §8.2).
    JournalIndex,
    /// A task's state as readers see it, by `episode \0 task`: also a part of its
    /// invocation's resolution or row.
    Tasks,
    /// An invocation's row as stored, by invocation id (UTF-8 key): intent sequence, journal
    /// state and task state in the layout of `docs/data-model.md` §8.2.
    Invocations,
    /// The resolution of an intent as stored, by the intent's journal sequence (u64
    /// big-endian key), in the same layout.
    Resolutions,
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

/// The lock every transaction of this process holds shared, and the size gauge.
struct MapLock {
    lock: RwLock<()>,
    gauge: Gauge,
    page_size: u64,
    dir: PathBuf,
}

/// A transaction and the shared hold on the map lock it needs (dropped after the transaction:
/// fields drop in declaration order).
struct Held<'m, T> {
    txn: T,
    _shared: RwLockReadGuard<'m, ()>,
}

impl MapLock {
    fn shared(&self) -> RwLockReadGuard<'_, ()> {
        self.lock.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Begin a transaction under a shared hold. When another process has grown the store past
    /// this map (`MDB_MAP_RESIZED`), adopt the size it recorded and begin again.
    fn begin<'e, T>(
        &self,
        env: &'e Env<WithoutTls>,
        begin: impl Fn(&'e Env<WithoutTls>) -> heed::Result<T>,
    ) -> Result<Held<'_, T>, StoreError> {
        let shared = self.shared();
        match begin(env) {
            Ok(txn) => {
                return Ok(Held {
                    txn,
                    _shared: shared,
                })
            }
            Err(heed::Error::Mdb(heed::MdbError::MapResized)) => drop(shared),
            Err(e) => return Err(StoreError::from_heed(e, env.info().map_size)),
        }
        self.adopt_grown_map(env)?;
        let shared = self.shared();
        let txn = begin(env).map_err(|e| StoreError::from_heed(e, env.info().map_size))?;
        Ok(Held {
            txn,
            _shared: shared,
        })
    }

    /// `mdb_env_set_mapsize(0)`: take the map size another process recorded. Waits a bounded
    /// time for this process's open transactions to end; never blocks new readers while it
    /// waits (it only tries the exclusive hold), so a thread that holds a transaction while
    /// it asks for another cannot deadlock here: it gets [`StoreError::MapResized`].
    fn adopt_grown_map(&self, env: &Env<WithoutTls>) -> Result<(), StoreError> {
        for _ in 0..REMAP_ATTEMPTS {
            if let Ok(_exclusive) = self.lock.try_write() {
                // SAFETY: every transaction of this process is begun under a shared hold of
                // `lock` and ends before that hold is released; holding it exclusively means
                // no transaction is active, which is what mdb_env_set_mapsize requires.
                unsafe { env.resize(0) }.map_err(|e| StoreError::from_heed(e, 0))?;
                tracing::info!(
                    map_size = env.info().map_size,
                    "another process grew the store; adopted its map size"
                );
                return Ok(());
            }
            std::thread::sleep(REMAP_PAUSE);
        }
        Err(StoreError::MapResized)
    }

    /// A failed commit. LMDB reports a write that stopped short as EIO, which is what a disk
    /// that fills up mid-write produces: with (almost) nothing left on the filesystem, that is
    /// "disk full", not an I/O fault.
    fn write_error(&self, e: heed::Error, map_size: usize) -> StoreError {
        match e {
            heed::Error::Io(io)
                if io.raw_os_error() == Some(libc::EIO)
                    && capacity::disk_free(&self.dir).is_some_and(|f| f < SHORT_WRITE_SLACK) =>
            {
                StoreError::DiskFull(format!("a write stopped short: {io}"))
            }
            other => StoreError::from_heed(other, map_size),
        }
    }

    /// Read the high-water mark and the free disk space into the gauge.
    fn measure(&self, env: &Env<WithoutTls>) {
        let used = (env.info().last_page_number as u64 + 1).saturating_mul(self.page_size);
        self.gauge.observe(used, capacity::disk_free(&self.dir));
    }
}

/// The writer thread's state: everything a group commit needs besides its operations.
struct Writer {
    env: Env<WithoutTls>,
    tables: Tables,
    map_size: usize,
    stats: Arc<WriterStats>,
    map: Arc<MapLock>,
    signal: Arc<CommitSignal>,
    observer: ObserverSlot,
}

impl Writer {
    /// Drain the queue into group commits until every sender is gone.
    fn run(self, receiver: Receiver<Job>) {
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
            let stats = &self.stats;
            stats.batches.fetch_add(1, Ordering::Relaxed);
            stats.operations.fetch_add(n, Ordering::Relaxed);
            stats.largest_batch.fetch_max(n, Ordering::Relaxed);
            let outcome = self.build_and_commit(&mut batch, started);
            let committed = matches!(outcome, Ok(true));
            // Once per durable commit, never for a rebuilt pass or a failed commit: followers
            // of the log wake once for everything this batch made durable.
            if committed {
                self.signal.raise();
            }
            let err = outcome.err();
            if let Ok(mut slot) = self.observer.lock() {
                if let Some(observe) = slot.as_mut() {
                    observe(batch.len(), committed);
                }
            }
            for job in batch {
                job.answer(err.as_ref());
            }
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
    fn build_and_commit(&self, batch: &mut [Job], started: Instant) -> Result<bool, StoreError> {
        let (env, tables) = (&self.env, &self.tables);
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
            let mut ctx = WriteCtx {
                txn: &mut held.txn,
                tables,
                env,
            };
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
                    let mut ctx = WriteCtx {
                        txn: &mut held.txn,
                        tables,
                        env,
                    };
                    job.run_nested(&mut ctx);
                }
            }
        }
        let built = Instant::now();
        let Held { txn, _shared } = held;
        let outcome = txn
            .commit()
            .map_err(|e| self.map.write_error(e, self.map_size));
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

/// `size` rounded up to the OS page size (LMDB map sizes must be multiples of it).
fn page_multiple(size: u64) -> usize {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let page = u64::try_from(page).ok().filter(|p| *p > 0).unwrap_or(4096);
    let size = size.max(page).div_ceil(page).saturating_mul(page);
    usize::try_from(size).unwrap_or(usize::MAX / 2)
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
        Ok(self.sequenced(r)?.map(|(_, view)| view))
    }

    /// An object and its sequence number (its place in arrival order).
    pub(crate) fn sequenced(&self, r: &Ref) -> Result<Option<(u64, ObjectView<'t>)>, StoreError> {
        sequenced(self.txn, self.tables, r)
    }

    /// The object stored at sequence number `seq`.
    pub(crate) fn object_at(&self, seq: u64) -> Result<Option<ObjectView<'t>>, StoreError> {
        let Some(row) = self
            .tables
            .objects
            .get(self.txn, &seq)
            .map_err(self.heed_err())?
        else {
            return Ok(None);
        };
        row.split_at_checked(32)
            .and_then(|(r, envelope)| ObjectView::decode(Ref::from_slice(r)?, envelope))
            .map(Some)
            .ok_or_else(|| StoreError::Corrupt(format!("object row {seq} is damaged")))
    }
}

impl WriteCtx<'_, '_> {
    pub fn object(&self, r: &Ref) -> Result<Option<Object>, StoreError> {
        get_object(self.txn, self.tables, r)
    }

    /// An object, borrowed, and its sequence number.
    pub(crate) fn sequenced(&self, r: &Ref) -> Result<Option<(u64, ObjectView<'_>)>, StoreError> {
        sequenced(self.txn, self.tables, r)
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
/// Objects read lazily from a read transaction.
pub type Objects<'t> = Box<dyn Iterator<Item = Result<ObjectView<'t>, StoreError>> + 't>;

impl<'t> ReadCtx<'t> {
    /// The refs of the objects with `semantic_id`, in the order the store first stored them,
    /// starting after the object `after`. `None` when `after` is not an object with this
    /// semantic id.
    pub fn semantic_id_refs(
        &self,
        semantic_id: &str,
        after: Option<&Ref>,
    ) -> Result<Option<Refs<'t>>, StoreError> {
        Ok(self
            .semantic_id_objects(semantic_id, after)?
            .map(|objects| Box::new(objects.map(|o| o.map(|o| o.hash))) as Refs<'t>))
    }

    /// [`ReadCtx::semantic_id_refs`], yielding the objects themselves (borrowed).
    pub fn semantic_id_objects(
        &self,
        semantic_id: &str,
        after: Option<&Ref>,
    ) -> Result<Option<Objects<'t>>, StoreError> {
        let e = self.heed_err();
        let prefix = semantic_prefix(semantic_id)?;
        let start = match after {
            None => 0,
            Some(r) => match self.sequenced(r)? {
                Some((seq, view)) if view.semantic_id == semantic_id => seq + 1,
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
        let reader = ReadCtx {
            txn: self.txn,
            tables: self.tables,
        };
        let wanted = semantic_id.to_owned();
        let iter = self
            .tables
            .semantic_ids
            .range(self.txn, &range)
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
                let object = reader.object_at(seq)?.ok_or_else(|| {
                    StoreError::Corrupt(format!("the semantic-id index names no object {seq}"))
                })?;
                // A damaged envelope may name another kind: it is not listed as this one.
                Ok((object.semantic_id == wanted).then_some(object))
            })
            .filter_map(Result::transpose);
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

/// The sequence number of object `r` and its envelope, decoded.
fn sequenced<'t>(
    txn: &'t RoTxn<'_>,
    tables: &Tables,
    r: &Ref,
) -> Result<Option<(u64, ObjectView<'t>)>, StoreError> {
    match object_row(txn, tables, r)? {
        None => Ok(None),
        Some((seq, envelope)) => ObjectView::decode(*r, envelope)
            .map(|view| Some((seq, view)))
            .ok_or_else(|| StoreError::Corrupt(format!("object {r} has a damaged envelope"))),
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
        let writer = Writer {
            env: inner.env.clone(),
            tables: inner.tables,
            map_size: inner.map_size,
            stats: inner.stats.clone(),
            map: inner.map.clone(),
            signal: inner.committed.clone(),
            observer: inner.observer.clone(),
        };
        let outcome = writer.build_and_commit(&mut batch, Instant::now());
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

    /// A batch built twice is still one durable commit: the commit signal is raised once,
    /// the observer told once, and the writer's counters count it once.
    #[test]
    fn a_rebuilt_batch_raises_the_commit_signal_once_and_is_counted_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("db")).unwrap();
        let inner = &store.inner;
        let raised = Arc::new(AtomicUsize::new(0));
        let r = raised.clone();
        store.commit_signal().listen(move || {
            r.fetch_add(1, Ordering::SeqCst);
        });
        let observed = Arc::new(Mutex::new(Vec::new()));
        let o = observed.clone();
        store.observe_commits(Some(Box::new(move |ops, ok| {
            o.lock().unwrap().push((ops, ok));
        })));
        let before = |s: &WriterStats| {
            (
                s.batches.load(Ordering::SeqCst),
                s.operations.load(Ordering::SeqCst),
                s.rebuilt_batches.load(Ordering::SeqCst),
            )
        };
        let (batches, ops, rebuilt) = before(store.stats());

        // Three queued writes, the second failing after it wrote: one batch, drained by a
        // writer loop run here on the queue's closing.
        let (sender, receiver) = mpsc::channel();
        let mut replies = Vec::new();
        for (i, fail) in [false, true, false].into_iter().enumerate() {
            let o = Object::new("world/test/v1", "t", vec![i as u8; 3]);
            let (job, reply) = job(o, fail, Arc::default(), inner.map_size);
            sender.send(job).unwrap();
            replies.push(reply);
        }
        drop(sender);
        Writer {
            env: inner.env.clone(),
            tables: inner.tables,
            map_size: inner.map_size,
            stats: inner.stats.clone(),
            map: inner.map.clone(),
            signal: inner.committed.clone(),
            observer: inner.observer.clone(),
        }
        .run(receiver);

        let ok: Vec<bool> = replies.iter().map(|r| r.recv().unwrap().is_ok()).collect();
        assert_eq!(ok, [true, false, true]);
        assert_eq!(raised.load(Ordering::SeqCst), 1);
        assert_eq!(*observed.lock().unwrap(), [(3, true)]);
        assert_eq!(
            before(store.stats()),
            (batches + 1, ops + 3, rebuilt + 1),
            "batches, operations, rebuilt batches"
        );
    }

    #[test]
    fn enospc_and_edquot_read_disk_full_other_io_errors_do_not() {
        let io = |code| heed::Error::Io(std::io::Error::from_raw_os_error(code));
        assert_eq!(
            StoreError::from_heed(io(libc::ENOSPC), 0).to_string(),
            "disk full: the store's filesystem has no space left (No space left on device (os error 28))"
        );
        assert!(StoreError::from_heed(io(libc::EDQUOT), 0).is_disk_full());
        assert_eq!(
            StoreError::from_heed(io(libc::EACCES), 0),
            StoreError::Io("Permission denied (os error 13)".into())
        );
        assert!(
            StoreError::from_io(std::io::Error::from_raw_os_error(libc::ENOSPC)).is_disk_full()
        );
        assert_eq!(
            StoreError::from_heed(heed::Error::Mdb(heed::MdbError::MapResized), 0),
            StoreError::MapResized
        );
    }
}
