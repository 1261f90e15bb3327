//! The LMDB store: one environment, named databases, and one writer thread with group commit.
//!
//! Reads run on the caller's thread in their own read transaction. Every write goes through
//! [`Store::write`]: the operation is sent to the single writer thread, which drains whatever is
//! queued, runs each operation in a nested transaction of one parent transaction, commits the
//! parent once (LMDB's default full sync: durable when acknowledged) and then answers every
//! caller. Throughput under concurrency comes from that batching, never from weaker syncing.
//! A failing operation aborts only its own nested transaction; a failing commit fails the batch.
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
use heed::{CommitOrAbort, Database, Env, EnvOpenOptions, RoTxn, RwTxn, WithoutTls};

use crate::capacity::{self, BadLimits, Full, Gauge, Limits, Usage};
use crate::commit_signal::CommitSignal;
use crate::log::{self, LogError};
use crate::object::{Object, ObjectView, Ref};

/// The schema this build reads and writes. An store with another version is refused unmodified.
pub const SCHEMA_VERSION: u32 = 1;
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

/// The named databases (DESIGN §4).
#[derive(Clone, Copy)]
pub struct Tables {
    /// ref(32) → object encoding.
    pub objects: Database<'static, Bytes, Bytes>,
    /// semanticId \0 ref(32) → (): the semantic-id index.
    pub by_semantic_id: Database<'static, Bytes, Bytes>,
    /// world ref(32) → canonical world JSON.
    pub worlds: Database<'static, Bytes, Bytes>,
    /// entry index (u64 BE) → canonical entry JSON.
    pub log: Database<'static, U64<BigEndian>, Bytes>,
    /// entry hash(32) → entry index (u64 BE).
    pub entry_hashes: Database<'static, Bytes, U64<BigEndian>>,
    /// entry index (u64 BE) → the ref of the world that entry selected.
    pub world_refs: Database<'static, U64<BigEndian>, Bytes>,
    /// head name → world ref(32).
    pub heads: Database<'static, Str, Bytes>,
    /// journal sequence (u64 BE) → canonical journal record JSON.
    pub journal: Database<'static, U64<BigEndian>, Bytes>,
    /// invocation id → canonical journal state JSON.
    pub journal_by_invocation: Database<'static, Str, Bytes>,
    /// invocation id → intent sequence, for intents that have no outcome yet.
    pub pending: Database<'static, Str, U64<BigEndian>>,
    /// episode \0 effect \0 scope → units spent (u64 BE).
    pub spend: Database<'static, Bytes, U64<BigEndian>>,
    /// credential id (64 hex) → canonical session JSON.
    pub sessions: Database<'static, Str, Bytes>,
    /// episode \0 task id → canonical task state JSON (task ids and idempotency keys).
    pub tasks: Database<'static, Bytes, Bytes>,
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

type Completion = Box<dyn FnOnce(Option<&StoreError>) + Send>;
type Job = Box<
    dyn for<'a, 'b, 't> FnOnce(Result<&'b mut WriteCtx<'a, 't>, StoreError>) -> Completion + Send,
>;

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
}

struct Inner {
    env: Env<WithoutTls>,
    tables: Tables,
    path: PathBuf,
    map_size: usize,
    sender: Mutex<Option<Sender<Job>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    stats: Arc<WriterStats>,
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

const META_SCHEMA: &str = "schema_version";

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

        let wtxn = env.write_txn().map_err(heed_err)?;
        let tables = env
            .create_databases_and_commit(wtxn, |dbo, wtxn| -> heed::Result<_> {
                Ok(CommitOrAbort::<_, ()>::Commit((
                    (
                        dbo.create_database(wtxn, Some("objects"))?,
                        dbo.create_database(wtxn, Some("by_semantic_id"))?,
                        dbo.create_database(wtxn, Some("worlds"))?,
                        dbo.create_database(wtxn, Some("log"))?,
                        dbo.create_database(wtxn, Some("entry_hashes"))?,
                        dbo.create_database(wtxn, Some("heads"))?,
                        dbo.create_database(wtxn, Some("journal"))?,
                        dbo.create_database(wtxn, Some("journal_by_invocation"))?,
                    ),
                    (
                        dbo.create_database(wtxn, Some("world_refs"))?,
                        dbo.create_database(wtxn, Some("pending"))?,
                        dbo.create_database(wtxn, Some("spend"))?,
                        dbo.create_database(wtxn, Some("sessions"))?,
                        dbo.create_database(wtxn, Some("tasks"))?,
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
            (
                objects,
                by_semantic_id,
                worlds,
                log,
                entry_hashes,
                heads,
                journal,
                journal_by_invocation,
            ),
            (world_refs, pending, spend, sessions, tasks, registry_heads, meta, readers),
        ) = tables;
        let tables = Tables {
            objects,
            by_semantic_id,
            worlds,
            log,
            entry_hashes,
            world_refs,
            heads,
            journal,
            journal_by_invocation,
            pending,
            spend,
            sessions,
            tasks,
            registry_heads,
            meta,
            readers,
            map_size,
        };

        // Schema: refuse an unknown version without touching anything.
        {
            let rtxn = env.read_txn().map_err(heed_err)?;
            match tables.meta.get(&rtxn, META_SCHEMA).map_err(heed_err)? {
                Some(v) => {
                    let found = String::from_utf8_lossy(v).into_owned();
                    if found != SCHEMA_VERSION.to_string() {
                        return Err(StoreError::SchemaMismatch {
                            found,
                            expected: SCHEMA_VERSION,
                        });
                    }
                }
                None => {
                    if tables.log.len(&rtxn).map_err(heed_err)? != 0 {
                        return Err(StoreError::SchemaMismatch {
                            found: "none".into(),
                            expected: SCHEMA_VERSION,
                        });
                    }
                }
            }
        }

        let (sender, receiver) = mpsc::channel::<Job>();
        let stats = Arc::new(WriterStats::default());
        let map = Arc::new(MapLock {
            lock: RwLock::new(()),
            gauge: Gauge::new(limits),
            page_size: env.unnamed_database_stat().page_size as u64,
            dir: dir.to_path_buf(),
        });
        map.measure(&env);
        let committed = Arc::new(CommitSignal::default());
        let writer = {
            let env = env.clone();
            let stats = stats.clone();
            let map = map.clone();
            let committed = committed.clone();
            std::thread::Builder::new()
                .name("worldd-store-writer".into())
                .spawn(move || writer_loop(env, tables, receiver, map_size, stats, map, committed))
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
                map,
                committed,
            }),
        };
        store.ensure_genesis()?;
        crate::access::ensure_readers_index(&store)?;
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
    /// same batch are unaffected. Blocks the calling thread.
    pub fn write<R, E>(
        &self,
        op: impl for<'a, 't> FnOnce(&mut WriteCtx<'a, 't>) -> Result<R, E> + Send + 'static,
    ) -> Result<R, E>
    where
        R: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        let (tx, rx): (SyncSender<Result<R, E>>, _) = mpsc::sync_channel(1);
        let map_size = self.inner.map_size;
        let job: Job = Box::new(move |ctx: Result<&mut WriteCtx<'_, '_>, StoreError>| {
            let result = match ctx {
                Ok(ctx) => run_nested(ctx, op, map_size),
                Err(e) => Err(E::from(e)),
            };
            Box::new(move |commit_error: Option<&StoreError>| {
                let answer = match (commit_error, result) {
                    (Some(e), Ok(_)) => Err(E::from(e.clone())),
                    (_, r) => r,
                };
                let _ = tx.send(answer);
            }) as Completion
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

    /// Maintenance access to a raw table, for `doctor`-style tools and tamper tests.
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
                RawTable::Objects => w.tables.objects.put(w.txn, &key, &value).map_err(e),
                RawTable::Worlds => w.tables.worlds.put(w.txn, &key, &value).map_err(e),
                RawTable::Log => {
                    let idx = u64::from_be_bytes(
                        key.as_slice()
                            .try_into()
                            .map_err(|_| StoreError::Corrupt("log key must be 8 bytes".into()))?,
                    );
                    w.tables.log.put(w.txn, &idx, &value).map_err(e)
                }
                RawTable::Journal => w
                    .tables
                    .journal
                    .put(w.txn, &u64_key(&key)?, &value)
                    .map_err(e),
                RawTable::JournalIndex => w
                    .tables
                    .journal_by_invocation
                    .put(w.txn, str_key(&key)?, &value)
                    .map_err(e),
                RawTable::Tasks => w.tables.tasks.put(w.txn, &key, &value).map_err(e),
            }
        })
    }

    /// Raw bytes of a table row, for maintenance tools and tamper tests.
    #[doc(hidden)]
    pub fn raw_get(&self, table: RawTable, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.read(|r| {
            let e = r.heed_err();
            Ok(match table {
                RawTable::Objects => r
                    .tables
                    .objects
                    .get(r.txn, key)
                    .map_err(e)?
                    .map(<[u8]>::to_vec),
                RawTable::Worlds => r
                    .tables
                    .worlds
                    .get(r.txn, key)
                    .map_err(e)?
                    .map(<[u8]>::to_vec),
                RawTable::Log => {
                    let idx = u64::from_be_bytes(
                        key.try_into()
                            .map_err(|_| StoreError::Corrupt("log key must be 8 bytes".into()))?,
                    );
                    r.tables
                        .log
                        .get(r.txn, &idx)
                        .map_err(e)?
                        .map(<[u8]>::to_vec)
                }
                RawTable::Journal => r
                    .tables
                    .journal
                    .get(r.txn, &u64_key(key)?)
                    .map_err(e)?
                    .map(<[u8]>::to_vec),
                RawTable::JournalIndex => r
                    .tables
                    .journal_by_invocation
                    .get(r.txn, str_key(key)?)
                    .map_err(e)?
                    .map(<[u8]>::to_vec),
                RawTable::Tasks => r
                    .tables
                    .tasks
                    .get(r.txn, key)
                    .map_err(e)?
                    .map(<[u8]>::to_vec),
            })
        })
    }
}

fn u64_key(key: &[u8]) -> Result<u64, StoreError> {
    Ok(u64::from_be_bytes(key.try_into().map_err(|_| {
        StoreError::Corrupt("a u64 key must be 8 bytes".into())
    })?))
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
    /// Journal state by invocation id (UTF-8 key).
    JournalIndex,
    /// Task states by `episode \0 task`.
    Tasks,
}

fn run_nested<R, E>(
    ctx: &mut WriteCtx<'_, '_>,
    op: impl for<'a, 't> FnOnce(&mut WriteCtx<'a, 't>) -> Result<R, E>,
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

fn writer_loop(
    env: Env<WithoutTls>,
    tables: Tables,
    receiver: Receiver<Job>,
    map_size: usize,
    stats: Arc<WriterStats>,
    map: Arc<MapLock>,
    signal: Arc<CommitSignal>,
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
        let Held {
            mut txn,
            _shared: shared,
        } = match map.begin(&env, |env| env.write_txn()) {
            Ok(held) => held,
            Err(err) => {
                // Each job must still answer: run it against nothing is impossible, so report.
                tracing::error!(error = %err, "store writer could not begin a transaction");
                for job in batch {
                    job(Err(err.clone()))(None);
                }
                continue;
            }
        };
        let mut completions = Vec::with_capacity(batch.len());
        for job in batch {
            let mut ctx = WriteCtx {
                txn: &mut txn,
                tables: &tables,
                env: &env,
            };
            completions.push(job(Ok(&mut ctx)));
        }
        let built = Instant::now();
        let outcome = txn.commit().map_err(|e| map.write_error(e, map_size));
        drop(shared);
        map.measure(&env);
        let committed = Instant::now();
        let nanos = |d: std::time::Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        stats
            .build_nanos
            .fetch_add(nanos(built - started), Ordering::Relaxed);
        stats
            .commit_nanos
            .fetch_add(nanos(committed - built), Ordering::Relaxed);
        let err = outcome.err();
        if err.is_none() {
            signal.raise();
        }
        for done in completions {
            done(err.as_ref());
        }
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
        match self
            .tables
            .objects
            .get(self.txn, r.as_bytes())
            .map_err(self.heed_err())?
        {
            None => Ok(None),
            Some(bytes) => ObjectView::decode(*r, bytes)
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
    /// to the object's address.
    pub fn put_object(&mut self, object: &Object) -> Result<(), StoreError> {
        if !object.verify() {
            return Err(StoreError::Corrupt(format!(
                "object {} does not hash to its address",
                object.hash
            )));
        }
        let e = self.heed_err();
        if self
            .tables
            .objects
            .get(self.txn, object.hash.as_bytes())
            .map_err(e)?
            .is_some()
        {
            return Ok(());
        }
        self.tables
            .objects
            .put(self.txn, object.hash.as_bytes(), &object.encode_value())
            .map_err(e)?;
        let mut key = Vec::with_capacity(object.semantic_id.len() + 33);
        key.extend_from_slice(object.semantic_id.as_bytes());
        key.push(0);
        key.extend_from_slice(object.hash.as_bytes());
        self.tables
            .by_semantic_id
            .put(self.txn, &key, &[])
            .map_err(e)?;
        Ok(())
    }
}

fn get_object(txn: &RoTxn<'_>, tables: &Tables, r: &Ref) -> Result<Option<Object>, StoreError> {
    match tables
        .objects
        .get(txn, r.as_bytes())
        .map_err(|e| StoreError::from_heed(e, DEFAULT_MAP_SIZE))?
    {
        None => Ok(None),
        Some(bytes) => Object::decode_value(*r, bytes)
            .map(Some)
            .ok_or_else(|| StoreError::Corrupt(format!("object {r} has a damaged envelope"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
