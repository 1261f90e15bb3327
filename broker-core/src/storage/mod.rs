//! The storage layer: typed tables in one LMDB environment, read transactions on the caller's
//! thread, and one writer thread with group commit. It knows tables by the names and codecs a
//! [`Layout`] gives it, and nothing of what they hold: entries, worlds, intents and sessions
//! are the world layer's ([`crate::store`] opens the world's layout and writes its genesis).
//!
//! Reads run on the caller's thread in their own read transaction. Every write goes through
//! [`Store::write`] or [`Store::submit`]: the operation is sent to the single writer thread,
//! which drains whatever is queued, runs the operations in one transaction and commits it once
//! (the pages synced, the meta page written); a syncing thread then syncs the file, so that the
//! commit is durable, and only then answers every caller, blocked thread or awaiting task
//! (durable when acknowledged). A read may see a commit before that sync: whatever shows a read
//! to the outside waits for [`Store::until_durable`]. Throughput under concurrency comes
//! from that batching, never from weaker syncing. A failing operation's writes are undone alone
//! (the batch is built again with each operation in a nested transaction); a failing commit
//! fails the batch. The layout hears how each transaction ended ([`Layout::ended`]), so that
//! what it keeps in memory forgets nothing an undone one wrote.
//!
//! The LMDB map is reserved (sparse) at the operator's ceiling and the store grows into it by
//! itself; [`crate::capacity`] says why, and how client work is refused before the ceiling.
//! Every transaction of this process holds the map lock shared, so the one remap left
//! (another process grew the store past this map: `MDB_MAP_RESIZED`) happens only when none
//! is active, as LMDB requires.
//!
//! The interface a replicated engine would implement instead is written down in
//! `docs/data-model.md` ("The storage interface"): [`Store::read`], [`Store::write`] and
//! [`Store::submit`], the typed tables' operations, and the commit signal. LMDB's types stay
//! inside this crate.

mod durable_waits;
mod fault;
pub use fault::{crashed_reading, opening, say_faults_in_store_maps, Opening};
mod filesystem;
pub use filesystem::refuses_writes;
mod map;
mod mapping;
mod reply;
mod resident;
mod table;
mod watch;
mod writer;

use std::any::Any;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;

use heed::types::{Bytes, Str};
use heed::{CommitOrAbort, CommitToken, Env, EnvOpenOptions, OnCommit, RoTxn, RwTxn, WithoutTls};

use crate::capacity::{self, BadLimits, Full, Gauge, Limits, Usage};
use crate::commit_signal::CommitSignal;
use durable_waits::{DurableWaits, Wait};
use map::{page_multiple, MapLock};
pub use reply::Submitted;
pub use resident::DEFAULT_RESIDENT_BYTES;
use table::RawDb;
pub(crate) use table::{Seq, Table};
pub use writer::{CommitObserver, WriterStats, DISK_ADVICE};

use writer::{Job, ObserverSlot, Write, Writer};

/// LMDB reader slots: read transactions open at once, over every process of the store.
pub const MAX_READERS: u32 = 1024;

/// Default LMDB map size (the default ceiling): sparse on Linux, so a large reservation costs
/// nothing until used.
pub const DEFAULT_MAP_SIZE: usize = capacity::DEFAULT_CEILING as usize;

/// The table that holds the layout's version, and its key there. The storage layer keeps the
/// version; the rest of the table is the layout's.
pub(crate) const META_TABLE: &str = "meta";
pub(crate) const VERSION_KEY: &str = "schema_version";

/// Store failures. `Clone` because one failed group commit answers every caller in it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("world store {0} does not exist")]
    NotFound(PathBuf),
    #[error(
        "world store {0} is not a directory (a store is a directory holding data.mdb and lock.mdb)"
    )]
    NotADirectory(PathBuf),
    #[error("world store {0} has an empty data.mdb: no store was ever written there, or the file was emptied; refusing to make a new store in its place (worldd serve makes one)")]
    Empty(PathBuf),
    #[error("world store {dir} lies on a network filesystem ({kind}): LMDB shares its locks and its map only between processes of one host, so a process on another host could write the store at the same time and corrupt it; put the store on a local disk (to read a copy where it is, mount it read-only)")]
    NetworkFilesystem { dir: PathBuf, kind: &'static str },
    #[error("world store {dir} is damaged: its data.mdb holds {len} bytes, and its last commit names pages up to byte {needed} (a copy or a disk that stopped short?); restore the directory from a backup")]
    Truncated { dir: PathBuf, len: u64, needed: u64 },
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
    #[error("store {dir} uses schema {found} and another process has it open; stop that process (a worldd of an older build?) so that this build can migrate the store to schema {expected}")]
    MigrationBusy {
        dir: PathBuf,
        found: String,
        expected: u32,
    },
    #[error("store I/O error: {0}")]
    Io(String),
    /// A store file that is no regular file (`refuse_odd_store_files`).
    #[error("world store file {path} is {what}; a store's data.mdb and lock.mdb are regular files in its directory, and neither is opened through a link or made where one points: put the store's own files there (restore the directory from a backup)")]
    OddFile { path: PathBuf, what: &'static str },
    #[error("world store {0} is open read-only (it is on a read-only filesystem); this command writes, so copy the directory to a writable disk first")]
    ReadOnly(PathBuf),
    #[error("world store {dir} uses schema {found}, and read-only it cannot be upgraded to schema {expected}; copy the directory to a writable disk and open it there")]
    ReadOnlyUpgrade {
        dir: PathBuf,
        found: String,
        expected: u32,
    },
    #[error("LMDB error: {0}")]
    Lmdb(String),
    /// LMDB found a page the store names missing or malformed while opening it
    /// ([`StoreError::Corrupt`] once open).
    #[error("world store {dir} is damaged: {what} (a copy taken while a daemon wrote it, or a failing disk?); restore the directory from a backup")]
    Damaged { dir: PathBuf, what: String },
    /// The LMDB map could not be reserved at the ceiling: more address space than the host
    /// gives a process.
    #[error("the store's map {0}; lower the ceiling (serve --store-ceiling, or store_ceiling in [serve] of world.toml) to what this host can map")]
    CeilingUnmapped(String),
    /// The store's files were replaced or removed under this process ([`Store::watch`]).
    #[error("the world store {0} was replaced or removed while this daemon served it: nothing more is written to the files it opened; restart the daemon")]
    Replaced(PathBuf),
    /// The store's data file was rolled back under this process ([`Store::watch`]).
    #[error("the world store {0}'s data file was rolled back or written by another process while this daemon served it: nothing more is written to it; stop the daemon and run `worldd doctor` on the store")]
    RolledBack(PathBuf),
    #[error("store is damaged: {0}")]
    Corrupt(String),
    #[error("the store's writer thread has stopped")]
    WriterGone,
    /// The write was committed (its rows are in the store, and readers see them), but the sync
    /// that was to make it durable failed. It becomes durable once a later commit that writes a
    /// fresh meta page is synced (the writer's next batch writes a marker for it, even one with
    /// nothing else to write; a process opening the store syncs what it finds): a sync that
    /// follows no new meta page proves nothing, since the failed one may have left the meta page
    /// marked clean but unwritten. Until then a power cut or the disk itself can take it back.
    /// Only an operation that wrote something is answered so: one that wrote nothing keeps its
    /// own result. Not "nothing was written": a caller that journaled something must not act as
    /// if it had not.
    #[error("the write was committed, but the store could not make it durable ({0}); a later commit synced makes it durable")]
    NotDurable(Box<StoreError>),
    /// A bug, never an input: the operation's writes were undone, the rest of its group commit
    /// committed, and the writer went on.
    #[error("a store operation panicked, and its writes were undone: {0}")]
    OperationPanicked(String),
}

impl StoreError {
    pub(crate) fn from_heed(err: heed::Error, map_size: usize) -> StoreError {
        match err {
            heed::Error::Mdb(heed::MdbError::MapFull) => StoreError::MapFull { map_size },
            heed::Error::Mdb(heed::MdbError::MapResized) => StoreError::MapResized,
            // heed turns LMDB's errno values into I/O errors: ENOSPC is one of them.
            heed::Error::Io(e) => StoreError::from_io(e),
            heed::Error::EnvAlreadyOpened => StoreError::AlreadyOpen(PathBuf::new()),
            // A torn copy (`cp` while a daemon writes), a failing disk: the damaged-store
            // error, not LMDB's words alone.
            heed::Error::Mdb(
                e @ (heed::MdbError::PageNotFound
                | heed::MdbError::Corrupted
                | heed::MdbError::Invalid),
            ) => StoreError::Corrupt(format!("{e}{PAGE_DAMAGED}")),
            // A tree deeper than LMDB's cursor stack (32 levels: more rows than any disk
            // holds), or a table's record in the main table that no longer matches the handle
            // opened from it: only pages that point where no store LMDB wrote points.
            heed::Error::Mdb(e @ (heed::MdbError::CursorFull | heed::MdbError::BadDbi)) => {
                StoreError::Corrupt(format!("{e}{TREE_DAMAGED}"))
            }
            other => StoreError::Lmdb(other.to_string()),
        }
    }

    /// A failure of a read from the store. Besides [`StoreError::from_heed`]'s, a transaction
    /// LMDB marked failed (it met a bad page earlier) and a key or value of a size no table
    /// holds are damage when they come from reading rows: this process's own writes can make
    /// both (a write after a failed write, a key too long), its reads only from a bad page.
    pub(crate) fn from_heed_read(err: heed::Error, map_size: usize) -> StoreError {
        match err {
            heed::Error::Mdb(e @ (heed::MdbError::BadTxn | heed::MdbError::BadValSize)) => {
                StoreError::Corrupt(format!("{e}{TREE_DAMAGED}"))
            }
            other => StoreError::from_heed(other, map_size),
        }
    }

    /// This failure of opening the store in `dir`: LMDB finding its pages damaged is said as
    /// the damaged store in `dir`, with the way out. (A migration's own `Corrupt`, an older
    /// store inconsistent in its rows, is left as it is: its advice is the older build's doctor.)
    pub(crate) fn said_at_open(self, dir: &Path) -> StoreError {
        match self {
            StoreError::Corrupt(what)
                if what.ends_with(PAGE_DAMAGED) || what.ends_with(TREE_DAMAGED) =>
            {
                StoreError::damaged(dir, what)
            }
            other => other,
        }
    }

    /// This failure of the first reads of an opened store's rows (in `dir`): any damage met
    /// there, a row that does not decode included, is said as the damaged store.
    pub(crate) fn said_at_first_read(self, dir: &Path) -> StoreError {
        match self {
            StoreError::Corrupt(what) => StoreError::damaged(dir, what),
            other => other,
        }
    }

    fn damaged(dir: &Path, what: String) -> StoreError {
        StoreError::Damaged {
            dir: dir.to_path_buf(),
            what,
        }
    }

    /// An I/O error, with "disk full" told apart from other faults.
    pub fn from_io(e: std::io::Error) -> StoreError {
        match e.raw_os_error() {
            Some(code) if is_disk_full(code) => StoreError::DiskFull(e.to_string()),
            _ => StoreError::Io(e.to_string()),
        }
    }

    /// True for the "no space" failures (ENOSPC, and EDQUOT: a quota is a full disk too), a
    /// write committed but not made durable for one included.
    pub fn is_disk_full(&self) -> bool {
        match self {
            StoreError::DiskFull(_) => true,
            StoreError::NotDurable(why) => why.is_disk_full(),
            _ => false,
        }
    }

    /// Whether the write this answers was committed, only its sync failing
    /// ([`StoreError::NotDurable`]).
    pub fn committed_not_durable(&self) -> bool {
        matches!(self, StoreError::NotDurable(_))
    }
}

/// Stored bytes as a report shows them when they may be damaged: a quoted JSON string, cut
/// like every quoted value in a message ([`dialect::quote::quote`]), so that neither their
/// bytes nor their length reach a terminal raw.
pub(crate) fn shown_bytes(bytes: &[u8]) -> String {
    dialect::quote::quote(&String::from_utf8_lossy(bytes))
}

/// How a page LMDB found missing or malformed ends its [`StoreError::Corrupt`].
const PAGE_DAMAGED: &str = ": a page the store names is missing or malformed";

/// How LMDB lost its way in the store's pages ends its [`StoreError::Corrupt`].
const TREE_DAMAGED: &str = ": the store's pages lead where no page of a whole store leads";

fn is_disk_full(code: i32) -> bool {
    code == libc::ENOSPC || code == libc::EDQUOT
}

/// Keys and values copied out of a table ([`Store::raw_rows`]).
#[cfg(any(test, feature = "fixtures"))]
#[doc(hidden)]
pub type RawRows = Vec<(Vec<u8>, Vec<u8>)>;

/// The LMDB environment, for a layout's upgrades (they run before its tables are opened).
pub(crate) type RawEnv = Env<WithoutTls>;

/// What the storage layer knows of a schema: its version, its tables' names and how to bring
/// an older version's store up to date. The world's layout is [`crate::store`]'s.
pub(crate) struct Layout {
    /// The version this build reads and writes; a new store is stamped with it.
    pub version: u32,
    /// The tables, by slot: [`Table::new`]'s `slot` indexes this list.
    pub tables: &'static [&'static str],
    /// Tables (of this or an older version) whose rows mean that the directory holds a store
    /// even where no version is recorded: such a store is not this layout's and is refused.
    pub occupied: &'static [&'static str],
    /// Upgrades from older versions, run on the raw environment before the tables are opened,
    /// in one write transaction each that also records the new version.
    pub upgrades: &'static [Upgrade],
    /// The layout's own state for one open store, made when it opens: what its modules keep in
    /// memory beside the tables (the world's is the unindexed tail of `refs`). Every read and
    /// write view hands it out ([`ReadCtx::state`]); the storage layer never looks inside.
    pub state: fn() -> Arc<LayoutState>,
    /// Told, on the writer thread, how each write transaction ended, so that the state can
    /// forget what an undone one wrote.
    pub ended: fn(&LayoutState, Ended),
    /// The log's newest row ([`LogTip`]), read by the writer when another process committed
    /// last: only the daemon appends to the log, so a log that no longer ends where it left it
    /// is a data file copied over. The world's is [`crate::log::tip`].
    pub log_tip: TipReader,
    /// Whether the open under way keeps an older version as it is (the world's:
    /// [`crate::migrate::keeping_schema`], for the verbs that only read): its upgrade then only
    /// notes the version found, so another process having the store open is no reason to
    /// refuse it.
    pub keeps_older: fn() -> bool,
}

/// How a layout reads its log's newest row ([`Layout::log_tip`]).
pub(crate) type TipReader = fn(&ReadCtx<'_>) -> Result<Option<LogTip>, StoreError>;

/// A layout's in-memory state for one open store ([`Layout::state`]).
pub(crate) type LayoutState = dyn Any + Send + Sync;

/// How a write transaction ended ([`Layout::ended`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// A group commit committed: what its operations wrote is in the store.
    Committed,
    /// Undone: a failed operation's nested transaction, a batch built again after one of its
    /// operations failed, or a commit that failed. What was written since the last commit may
    /// not be in the store, and the row numbers it took will be taken again.
    Undone,
}

/// An upgrade of a store of version `from` to the layout's version.
pub(crate) struct Upgrade {
    pub from: &'static str,
    pub run: fn(&RawEnv, usize) -> Result<(), StoreError>,
}

/// The read view of one transaction: a read transaction of its own ([`Store::read`]), or the
/// writer's ([`WriteCtx::reader`]), which sees the writes made so far.
#[derive(Clone, Copy)]
pub struct ReadCtx<'t> {
    txn: &'t RoTxn<'t>,
    dbs: &'t [RawDb],
    state: &'t LayoutState,
    map_size: usize,
    /// The writer's view after its operation claimed the content-address tail
    /// ([`WriteCtx::claimed_tail`]); `false` in a read transaction of its own.
    tail_claimed: bool,
}

/// The writable view handed to an operation running on the writer thread.
pub struct WriteCtx<'a, 't> {
    txn: &'a mut RwTxn<'t>,
    dbs: &'a [RawDb],
    state: &'a LayoutState,
    env: &'a Env<WithoutTls>,
    map_size: usize,
    /// What this operation stored anew, so that its later writes about those rows need not
    /// look them up ([`WriteCtx::stored_anew`]).
    fresh: Vec<Fresh>,
    /// This operation made its handle the appender of the content-address tail, or found it
    /// was ([`WriteCtx::claimed_tail`]).
    tail_claimed: bool,
    /// The log row this operation appended ([`WriteCtx::note_log_row`]).
    log_row: Option<LogTip>,
    /// This operation wrote something (a put, append or delete), or asked to be answered as if
    /// it had ([`WriteCtx::answer_as_written`]): only such an operation is answered
    /// [`StoreError::NotDurable`] when its batch's sync fails. One that wrote nothing keeps its
    /// own result (a budget found spent, a task found committed): nothing of it waits for a sync.
    wrote: bool,
}

/// The log's newest row as its key and world ref (`None` when the row does not decode): what
/// the writer remembers of the row it appended last, or found when the store opened, so that a
/// data file whose log no longer ends there is seen ([`writer::Writer`]). Only this process
/// appends to the log; other processes' commits leave it as it was.
pub(crate) type LogTip = (u64, Option<crate::object::Ref>);

/// `log_tip` ([`Layout::log_tip`]) in a read transaction of its own; `None` too when the row
/// cannot be read.
pub(super) fn found_log_tip(
    log_tip: TipReader,
    env: &Env<WithoutTls>,
    dbs: &[RawDb],
    state: &LayoutState,
    map_size: usize,
) -> Result<Option<LogTip>, StoreError> {
    let txn = env
        .read_txn()
        .map_err(|e| StoreError::from_heed(e, map_size))?;
    let ctx = ReadCtx {
        txn: &txn,
        dbs,
        state,
        map_size,
        tail_claimed: false,
    };
    Ok(log_tip(&ctx).ok().flatten())
}

/// A row an operation stored anew: its key in the content-address index, its sequence number
/// and a flag its writer chose (the object store: whether every reader may read it).
#[derive(Debug, Clone, Copy)]
struct Fresh {
    address: [u8; 33],
    seq: u64,
    flag: bool,
    /// Set by [`WriteCtx::stored_anew_marking`]: a later writer of the same operation has
    /// already been to the row (the grants: whether it granted the row to anyone).
    marked: bool,
}

impl<'t> ReadCtx<'t> {
    /// The id of the snapshot this read sees (LMDB's transaction id), for
    /// [`Store::until_durable`].
    pub fn snapshot(&self) -> usize {
        self.txn.id()
    }

    /// Whether this is the writer's view after its operation claimed the content-address tail
    /// ([`WriteCtx::claimed_tail`]).
    pub(crate) fn claimed_tail(&self) -> bool {
        self.tail_claimed
    }

    /// The layout's state of this store, if it is a `T`.
    pub(crate) fn state<T: Any>(&self) -> Option<&'t T> {
        self.state.downcast_ref()
    }

    fn err(&self) -> impl Fn(heed::Error) -> StoreError + Copy + 'static {
        let map_size = self.map_size;
        move |e| StoreError::from_heed_read(e, map_size)
    }
}

impl<'a, 't> WriteCtx<'a, 't> {
    /// The context of one operation in `txn`: nothing stored anew yet.
    pub(super) fn new(
        txn: &'a mut RwTxn<'t>,
        dbs: &'a [RawDb],
        state: &'a LayoutState,
        env: &'a Env<WithoutTls>,
        map_size: usize,
    ) -> WriteCtx<'a, 't> {
        WriteCtx {
            txn,
            dbs,
            state,
            env,
            map_size,
            fresh: Vec::new(),
            tail_claimed: false,
            log_row: None,
            wrote: false,
        }
    }

    /// Remember that this operation wrote to the transaction ([`WriteCtx::wrote`]).
    pub(crate) fn note_wrote(&mut self) {
        self.wrote = true;
    }

    /// Answer this operation as one that wrote, though it may write nothing: its answer is
    /// about durability itself ([`Store::until_durable`]'s write), so a failed sync must reach it.
    pub(crate) fn answer_as_written(&mut self) {
        self.wrote = true;
    }

    /// Whether this operation wrote anything (or asked to be answered as if it had).
    pub(super) fn wrote(&self) -> bool {
        self.wrote
    }

    /// Remember that this operation appended the log row `index`, holding `world_ref`.
    pub(crate) fn note_log_row(&mut self, index: u64, world_ref: crate::object::Ref) {
        self.log_row = Some((index, Some(world_ref)));
    }

    /// The log row this operation appended, if it appended one.
    pub(super) fn log_row(&self) -> Option<LogTip> {
        self.log_row
    }

    /// The layout's state of this store, if it is a `T`.
    pub(crate) fn state<T: Any>(&self) -> Option<&'a T> {
        self.state.downcast_ref()
    }

    /// Remember that this operation stored the row `address` anew at `seq`.
    pub(crate) fn note_stored_anew(&mut self, address: &[u8; 33], seq: u64, flag: bool) {
        self.fresh.push(Fresh {
            address: *address,
            seq,
            flag,
            marked: false,
        });
    }

    /// `(seq, flag)` when this operation stored the row `address` anew; `None` when it did not
    /// (it may still be stored, by an earlier transaction or operation).
    pub(crate) fn stored_anew(&self, address: &[u8; 33]) -> Option<(u64, bool)> {
        // An operation stores a handful of rows: a scan beats a map.
        self.fresh
            .iter()
            .find(|f| &f.address == address)
            .map(|f| (f.seq, f.flag))
    }

    /// The rows this operation stored anew: their keys in the content-address index and their
    /// sequence numbers.
    pub(crate) fn fresh_rows(&self) -> impl Iterator<Item = (&[u8; 33], u64)> + '_ {
        self.fresh.iter().map(|f| (&f.address, f.seq))
    }

    /// [`WriteCtx::stored_anew`], with whether an earlier call of this marked the row too;
    /// marks it.
    pub(crate) fn stored_anew_marking(&mut self, address: &[u8; 33]) -> Option<(u64, bool, bool)> {
        let fresh = self.fresh.iter_mut().find(|f| &f.address == address)?;
        let marked = std::mem::replace(&mut fresh.marked, true);
        Some((fresh.seq, fresh.flag, marked))
    }

    /// A read view of this transaction, its own writes included.
    pub fn reader(&self) -> ReadCtx<'_> {
        ReadCtx {
            txn: &*self.txn,
            dbs: self.dbs,
            state: self.state,
            map_size: self.map_size,
            tail_claimed: self.tail_claimed,
        }
    }

    /// Whether this operation already made its handle the content-address tail's appender.
    /// Only the writer of a transaction changes the appender, so once claimed it stays so for
    /// the rest of the operation; the next operation asks the table again.
    pub(crate) fn claimed_tail(&self) -> bool {
        self.tail_claimed
    }

    /// Remember that this operation's handle is the tail's appender ([`WriteCtx::claimed_tail`]).
    pub(crate) fn note_tail_claimed(&mut self) {
        self.tail_claimed = true;
    }

    fn err(&self) -> impl Fn(heed::Error) -> StoreError + Copy + 'static {
        let map_size = self.map_size;
        move |e| StoreError::from_heed(e, map_size)
    }
}

struct Inner {
    env: Env<WithoutTls>,
    dbs: Arc<[RawDb]>,
    /// The meta table (the schema stamp), for [`restamp`]; `None` on a read-only store.
    meta: Option<RawDb>,
    /// The [`restamp`] queued last: [`Store::watch`] queues no other until it has settled.
    restamping: Mutex<Option<Submitted<(), StoreError>>>,
    state: Arc<LayoutState>,
    /// The tables' names, for [`Store::raw_rows`].
    #[cfg(any(test, feature = "fixtures"))]
    names: &'static [&'static str],
    path: PathBuf,
    map_size: usize,
    sender: Mutex<Option<Sender<Job>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    stats: Arc<WriterStats>,
    observer: ObserverSlot,
    map: Arc<MapLock>,
    committed: Arc<CommitSignal>,
    /// Reads waiting for a sync the writer already handed over ([`Store::until_durable`]).
    waits: Arc<DurableWaits>,
    /// Told the snapshot id of every read transaction ([`Store::on_read`]).
    read_hook: std::sync::OnceLock<ReadHook>,
    /// Shared with the writer; tests lengthen it.
    #[cfg_attr(not(test), allow(dead_code))]
    follow_wait: writer::FollowWait,
    resident: resident::Budget,
    /// Opened with [`StoreOptions::read_only`]: every write is refused before it is queued.
    read_only: bool,
}

/// See [`Store::on_read`].
pub type ReadHook = Box<dyn Fn(usize) + Send + Sync>;

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
    /// Open without writing anything (LMDB's `MDB_RDONLY`): for a store on a read-only
    /// filesystem, which LMDB then reads without its lock file. Every write is refused with
    /// [`StoreError::ReadOnly`]; nothing is created, synced or upgraded.
    pub read_only: bool,
    /// Open a store on a network filesystem all the same ([`StoreError::NetworkFilesystem`]):
    /// only for a store no other process can have reached, such as a backup's fresh copy
    /// checked by the process that wrote it.
    pub allow_network_filesystem: bool,
    /// Said when the store's writes start failing for its disk (`Some(fault)`) and when they
    /// succeed again (`None`), once each, from the writer: the daemon says what that does to
    /// calls and health. Unset, the store says the disk fault and what to check.
    pub on_failing: Option<OnFailing>,
}

/// A [`StoreOptions::on_failing`] hook.
pub type OnFailing = fn(Option<&StoreError>);

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

/// A layout's tables, opened in the transaction that creates them; usable once it commits.
struct Opened<'t>(Vec<heed::Database<'t, Bytes, Bytes>>);

impl OnCommit for Opened<'_> {
    type Committed = Vec<RawDb>;

    fn on_commit(self, token: &CommitToken) -> Vec<RawDb> {
        self.0.into_iter().map(|db| db.on_commit(token)).collect()
    }
}

/// What a store's recorded version says, against a layout.
enum Version {
    /// The layout's version.
    Current,
    /// An older version this layout upgrades.
    Upgradable(&'static Upgrade, String),
    /// No version and no rows: a store being created.
    New,
    /// Another version: refused.
    Other(String),
    /// No version beside rows of some version's tables: every store was stamped when it was
    /// made (schema 1 too), so its meta table or version key was lost to damage.
    Unstamped { meta_table: bool },
}

/// A stored version as reports show it: a number as it is; anything else (a damaged row) as a
/// quoted JSON string, so that its bytes reach no terminal raw.
fn shown_version(stored: &[u8]) -> String {
    match std::str::from_utf8(stored) {
        Ok(v) if !v.is_empty() && v.len() <= 10 && v.bytes().all(|b| b.is_ascii_digit()) => {
            v.to_owned()
        }
        _ => shown_bytes(stored),
    }
}

/// Read the recorded version in a read transaction (creating nothing).
fn read_version(env: &Env<WithoutTls>, layout: &'static Layout) -> heed::Result<Version> {
    let rtxn = env.read_txn()?;
    let mut found = Version::New;
    env.open_databases_and_commit(rtxn, |dbo, rtxn| -> heed::Result<_> {
        let meta = dbo.open_database::<Str, Bytes>(rtxn, Some(META_TABLE))?;
        let version = match meta {
            Some(meta) => meta.get(rtxn, VERSION_KEY)?.map(shown_version),
            None => None,
        };
        found = match version {
            Some(v) if v == layout.version.to_string() => Version::Current,
            Some(v) => match layout.upgrades.iter().find(|u| u.from == v) {
                Some(upgrade) => Version::Upgradable(upgrade, v),
                None => Version::Other(v),
            },
            None => {
                let mut rows = 0;
                for name in layout.occupied {
                    if let Some(t) = dbo.open_database::<Bytes, Bytes>(rtxn, Some(name))? {
                        rows += t.len(rtxn)?;
                    }
                }
                if rows == 0 {
                    Version::New
                } else {
                    Version::Unstamped {
                        meta_table: meta.is_some(),
                    }
                }
            }
        };
        Ok(CommitOrAbort::<(), ()>::Commit(()))
    })?;
    Ok(found)
}

/// Whether `dir` holds a store already (its data file). An absent one is refused unless
/// `create`, which makes the directory, and the parents it lacks, with mode 0700 whatever the
/// umask (which can only narrow it): the store holds every credential and effect, and the
/// plugins keep their state, the binaries the daemon runs among it, under it. A directory
/// another user may write (made under `umask 000`, 0777) let them swap that state for
/// theirs, and one they may read would show them what the store's rules keep from them.
fn check_or_create_dir(dir: &Path, create: bool) -> Result<bool, StoreError> {
    // An empty data file is a store whose making stopped before LMDB wrote its first page (or a
    // file emptied since): LMDB would make a new store in it, which only `create` may do.
    let exists = match std::fs::metadata(dir.join("data.mdb")) {
        Ok(m) if m.len() == 0 && !create => return Err(StoreError::Empty(dir.to_path_buf())),
        Ok(m) => m.len() > 0,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => false,
        // Not "does not exist": a directory this user may not search (another user's store)
        // is said as what it is, with whose it is and what to do.
        Err(e) => return Err(StoreError::Io(access_refused(dir, &e))),
    };
    if !exists {
        if !create {
            return Err(StoreError::NotFound(dir.to_path_buf()));
        }
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| {
                if dir.exists() && !dir.is_dir() {
                    return StoreError::NotADirectory(dir.to_path_buf());
                }
                // "disk full" as such; any other cause with the directory it concerns.
                match StoreError::from_io(e) {
                    StoreError::Io(e) => StoreError::Io(format!("{}: {e}", dir.display())),
                    other => other,
                }
            })?;
    }
    Ok(exists)
}

/// Refuse a `data.mdb` or `lock.mdb` that is not a regular file, naming it. LMDB opens both by
/// path, following links and creating what is absent: a link would have it make (or write) its
/// file wherever the link points, even for a verb that only reads, and a directory or a device
/// in their place failed with the bare `Is a directory`/`Invalid argument` of its open. Asked
/// with `lstat`, so a link is never followed.
fn refuse_odd_store_files(dir: &Path) -> Result<(), StoreError> {
    for name in ["data.mdb", "lock.mdb"] {
        let path = dir.join(name);
        // Absent, or not to be looked at (a directory this user may not enter): the steps
        // after this say what is wrong, as they did.
        let Ok(md) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let kind = md.file_type();
        let what = if kind.is_file() {
            continue;
        } else if kind.is_symlink() {
            "a symbolic link"
        } else if kind.is_dir() {
            "a directory"
        } else {
            "neither a regular file nor a directory (a device, a FIFO or a socket)"
        };
        return Err(StoreError::OddFile { path, what });
    }
    Ok(())
}

/// The map size to open the environment with. A given ceiling is the map size; none adopts the
/// store's own (LMDB keeps it in the meta page), or the default for a new store.
fn wanted_map_size(ceiling: Option<u64>, exists: bool) -> Option<usize> {
    ceiling
        .or((!exists).then_some(capacity::DEFAULT_CEILING))
        .map(page_multiple)
}

/// The map for a ceiling at or below what `data.mdb` already holds: the reserve's room past the
/// file, for the daemon's own small writes (publishing its plugins' tools at start), which a
/// map the file's size has none for. The limits still hold the ceiling, so calls are refused.
fn room_past_file(dir: &Path, wanted: usize, options: &StoreOptions) -> usize {
    let (Some(ceiling), Ok(meta)) = (options.ceiling, std::fs::metadata(dir.join("data.mdb")))
    else {
        return wanted;
    };
    if meta.len() < ceiling {
        return wanted;
    }
    let reserve = Limits::new(ceiling, options.reserve).map_or(0, |l| l.reserve);
    wanted.max(page_multiple(meta.len().saturating_add(reserve)))
}

/// Refuse a given ceiling that leaves no room for the reserve, before the environment is opened.
fn check_ceiling(options: &StoreOptions) -> Result<(), StoreError> {
    if let Some(ceiling) = options.ceiling {
        Limits::new(ceiling, options.reserve)?;
    }
    Ok(())
}

/// The bytes of `lock.mdb` LMDB maps for [`MAX_READERS`] reader slots: its header (two cache
/// lines, the first slot included) and one 64-byte slot for each other reader.
const LOCK_FILE_BYTES: u64 = 64 * MAX_READERS as u64 + 128;

/// Give `lock.mdb` its disk blocks before LMDB maps it. LMDB sizes the file with `ftruncate`,
/// which allocates nothing, then writes the reader table through its map: on a full disk the
/// first write to a page without a block is a SIGBUS, which killed the daemon at start without
/// a word and made `doctor` call a sound store damaged. Allocated here, a full disk is an
/// error that says so. Blocks already there (another process has the store open) are kept.
fn reserve_lock_file(dir: &Path) -> Result<(), StoreError> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join("lock.mdb");
    let Ok(file) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        // As LMDB's own open must not (see `refuse_odd_store_files`): never through a link.
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
    else {
        // LMDB's own open says what is wrong (a read-only directory, permissions).
        return Ok(());
    };
    let len = libc::off_t::try_from(LOCK_FILE_BYTES).unwrap_or(libc::off_t::MAX);
    // SAFETY: an open descriptor this function owns, and a range inside what LMDB maps.
    match unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) } {
        0 => Ok(()),
        code if code == libc::ENOSPC || code == libc::EDQUOT => Err(StoreError::DiskFull(format!(
            "{}: its {LOCK_FILE_BYTES} bytes of reader slots cannot be allocated: {}",
            path.display(),
            std::io::Error::from_raw_os_error(code)
        ))),
        // A filesystem without allocation (EOPNOTSUPP, EINVAL): as before, LMDB's way.
        _ => Ok(()),
    }
}

/// Open the LMDB environment in `dir`, with the map size `wanted` when there is one.
fn open_env(
    dir: &Path,
    wanted: Option<usize>,
    read_only: bool,
) -> Result<Env<WithoutTls>, StoreError> {
    unsafe {
        // SAFETY: heed requires that the environment is not opened twice in one process
        // (it checks and reports EnvAlreadyOpened) and that the files are not modified by
        // other means; every process uses the same flags.
        let mut o = EnvOpenOptions::new().read_txn_without_tls();
        if let Some(size) = wanted {
            o.map_size(size);
        }
        // A read transaction takes a reader slot for its life. A daemon can have one open
        // on each of tokio's (up to 512) blocking threads and each worker at once, and
        // other processes (doctor, why) need theirs: 1024 slots keep MDB_READERS_FULL out
        // of reach (a slot is 64 bytes of lock file, and only slots in use are scanned).
        if read_only {
            o.flags(heed::EnvFlags::READ_ONLY);
        }
        o.max_dbs(32).max_readers(MAX_READERS).open(dir)
    }
    .map_err(|e| match e {
        heed::Error::EnvAlreadyOpened => StoreError::AlreadyOpen(dir.to_path_buf()),
        heed::Error::Io(io)
            if matches!(
                io.raw_os_error(),
                Some(libc::EACCES | libc::EPERM | libc::EROFS)
            ) =>
        {
            StoreError::Io(access_refused(dir, &io))
        }
        heed::Error::Io(io) if io.raw_os_error() == Some(libc::ENOMEM) => {
            StoreError::CeilingUnmapped(match wanted {
                Some(size) => format!(
                    "of {size} bytes ({}, its ceiling) cannot be reserved: {io}",
                    binary_size(size as u64)
                ),
                None => format!(
                    "at the size the store records (the ceiling of the daemon that last grew it) cannot be reserved: {io}"
                ),
            })
        }
        // LMDB's bare "version mismatch" read like a store written by an incompatible worldd;
        // it is nearly always another program holding the lock file in another LMDB's format.
        heed::Error::Mdb(heed::MdbError::VersionMismatch) => StoreError::Io(format!(
            "{}: LMDB's lock file is held in another format (MDB_VERSION_MISMATCH): a process that uses another LMDB build has the store open (mdb_stat, mdb_copy, a Python lmdb script?); stop it, then try again: nothing was changed (if no other process has it open, its data.mdb was written by an LMDB this build cannot read)",
            dir.display()
        )),
        // Any other fault of the open with the store it concerns (LMDB names no file).
        heed::Error::Io(io) => match StoreError::from_io(io) {
            StoreError::Io(e) => StoreError::Io(format!("{}: {e}", dir.display())),
            other => other,
        },
        other => StoreError::from_heed(other, wanted.unwrap_or(0)),
    })
}

/// `bytes` in the largest binary unit, to a tenth (`120TiB`, `1.5GiB`): as an operator writes
/// a ceiling.
fn binary_size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let (mut value, mut unit) = (bytes as f64, 0);
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    let shown = format!("{value:.1}");
    let shown = shown.strip_suffix(".0").unwrap_or(&shown);
    format!("{shown}{}", UNITS[unit])
}

/// What a store that could not be opened for reading and writing was refused by: LMDB says
/// only "Permission denied", not which of its files, whose they are, or what to do.
fn access_refused(dir: &Path, io: &std::io::Error) -> String {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    if io.raw_os_error() == Some(libc::EROFS) {
        return format!(
            "{}: {io}: worldd opens a store for reading and writing, so it cannot open one on a read-only filesystem (copy the directory to a writable disk)",
            dir.display()
        );
    }
    // The files first: the directory needs writing only to make a lock file that is absent.
    let wanted = [
        (dir.join("lock.mdb"), libc::R_OK | libc::W_OK),
        (dir.join("data.mdb"), libc::R_OK | libc::W_OK),
        (dir.to_path_buf(), libc::R_OK | libc::W_OK | libc::X_OK),
    ];
    for (path, mode) in wanted {
        let Ok(md) = std::fs::metadata(&path) else {
            continue;
        };
        let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
            continue;
        };
        // SAFETY: a query on a NUL-terminated path this function owns; no memory is shared.
        let allowed =
            unsafe { libc::faccessat(libc::AT_FDCWD, c_path.as_ptr(), mode, libc::AT_EACCESS) }
                == 0;
        if !allowed {
            // SAFETY: geteuid cannot fail and touches no memory.
            let euid = unsafe { libc::geteuid() };
            return format!(
                "{}: {io} (owned by uid {}, mode {:04o}; this process runs as uid {euid}): run worldd as the store's owner, or give this user read and write access to the directory and its files",
                path.display(),
                md.uid(),
                md.mode() & 0o7777
            );
        }
    }
    format!("{}: {io}", dir.display())
}

/// Refuse a data file shorter than its last commit says: LMDB reads pages through its map, and
/// a page past the end of the file is a SIGBUS, not an error (a copy of a store that stopped
/// short, on a full disk or when interrupted, is such a file).
fn check_length(env: &Env<WithoutTls>, dir: &Path) -> Result<(), StoreError> {
    let page_size = env.unnamed_database_stat().page_size as u64;
    let needed = (env.info().last_page_number as u64 + 1) * page_size;
    let len = std::fs::metadata(dir.join("data.mdb"))
        .map_err(StoreError::from_io)?
        .len();
    if len < needed {
        return Err(StoreError::Truncated {
            dir: dir.to_path_buf(),
            len,
            needed,
        });
    }
    Ok(())
}

/// The version: refuse an unknown one without touching anything; upgrade an older one, unless
/// the store is opened `read_only`, which can neither upgrade a store nor make a new one.
/// Returns whether the store is new (its tables and version are still to be made).
fn check_or_upgrade_version(
    env: &Env<WithoutTls>,
    layout: &'static Layout,
    dir: &Path,
    shared: bool,
    read_only: bool,
    map_size: usize,
) -> Result<bool, StoreError> {
    let heed_err = |e| StoreError::from_heed_read(e, map_size);
    match read_version(env, layout).map_err(heed_err)? {
        Version::Current => Ok(false),
        Version::New if read_only => Err(StoreError::SchemaMismatch {
            found: "none".into(),
            expected: layout.version,
        }),
        Version::New => Ok(true),
        // A read-only open that keeps the older version writes nothing: read as it is.
        Version::Upgradable(_, found) if read_only && !(layout.keeps_older)() => {
            Err(StoreError::ReadOnlyUpgrade {
                dir: dir.to_path_buf(),
                found,
                expected: layout.version,
            })
        }
        // A process of an older build would lose its tables under its feet (an open that
        // keeps the older version changes nothing: its upgrade only notes the version).
        Version::Upgradable(_, found) if shared && !(layout.keeps_older)() => {
            Err(StoreError::MigrationBusy {
                dir: dir.to_path_buf(),
                found,
                expected: layout.version,
            })
        }
        Version::Upgradable(upgrade, _) => {
            (upgrade.run)(env, map_size)?;
            Ok(false)
        }
        Version::Unstamped { meta_table } => Err(StoreError::Damaged {
            dir: dir.to_path_buf(),
            what: format!(
                "its tables hold rows but no schema version ({} is gone; every store is stamped with its version when it is made)",
                if meta_table {
                    format!("the {VERSION_KEY} key of its {META_TABLE} table")
                } else {
                    format!("its {META_TABLE} table")
                }
            ),
        }),
        Version::Other(found) => Err(StoreError::SchemaMismatch {
            found,
            expected: layout.version,
        }),
    }
}

/// Write the store's schema stamp in `meta` (its meta table) again, unchanged: one page
/// written and synced, nothing else touched. [`Store::watch`]'s look at a disk that refused
/// the last writes.
pub(super) fn restamp(w: &mut WriteCtx<'_, '_>, meta: RawDb) -> Result<(), StoreError> {
    let map_size = w.map_size;
    let heed = |e| StoreError::from_heed(e, map_size);
    let stamp = meta
        .get(w.txn, VERSION_KEY.as_bytes())
        .map_err(heed)?
        .map(<[u8]>::to_vec)
        .ok_or_else(|| {
            StoreError::Corrupt(format!("its {META_TABLE} table has no {VERSION_KEY} key"))
        })?;
    w.wrote = true;
    meta.put(w.txn, VERSION_KEY.as_bytes(), &stamp)
        .map_err(heed)
}

/// Open the layout's tables, creating any that is absent, in one write transaction that also
/// stamps a `new` store with the layout's version; and the meta table (for [`restamp`]).
fn open_tables(
    env: &Env<WithoutTls>,
    dir: &Path,
    layout: &'static Layout,
    new: bool,
    map_size: usize,
) -> Result<(Arc<[RawDb]>, RawDb), StoreError> {
    // The tables of a store that exists are only looked up in its main table here, which is a
    // read: what a read meets there is damage as anywhere else.
    let heed_err = |e| match e {
        heed::Error::Mdb(heed::MdbError::BadTxn | heed::MdbError::BadValSize) if !new => {
            StoreError::from_heed_read(e, map_size)
        }
        e => map::write_error(e, map_size, || crate::capacity::disk_free(dir)),
    };
    let wtxn = env.write_txn().map_err(heed_err)?;
    let dbs = env
        .create_databases_and_commit(wtxn, |dbo, wtxn| -> heed::Result<_> {
            let mut dbs = layout
                .tables
                .iter()
                .map(|name| dbo.create_database::<Bytes, Bytes>(wtxn, Some(name)))
                .collect::<heed::Result<Vec<_>>>()?;
            let meta = dbo.create_database::<Bytes, Bytes>(wtxn, Some(META_TABLE))?;
            if new {
                meta.put(
                    wtxn,
                    VERSION_KEY.as_bytes(),
                    layout.version.to_string().as_bytes(),
                )?;
            }
            dbs.push(meta);
            Ok(CommitOrAbort::<_, ()>::Commit(Opened(dbs)))
        })
        .map_err(heed_err)?
        .commit()
        .ok_or_else(|| StoreError::Lmdb("database creation aborted".into()))?;
    // Opened with the others so that the commit hands it over too; kept apart from them.
    let mut dbs = dbs;
    let meta = dbs
        .pop()
        .ok_or_else(|| StoreError::Lmdb("the meta table was not opened".into()))?;
    Ok((dbs.into(), meta))
}

/// The layout's tables opened in a read transaction, for a store opened read-only (its version
/// checked already): every table must exist, since nothing can be created.
fn open_tables_read_only(
    env: &Env<WithoutTls>,
    layout: &'static Layout,
    map_size: usize,
) -> Result<Arc<[RawDb]>, StoreError> {
    let heed_err = |e| StoreError::from_heed_read(e, map_size);
    let rtxn = env.read_txn().map_err(heed_err)?;
    let opened = env
        .open_databases_and_commit(rtxn, |dbo, rtxn| -> heed::Result<_> {
            let mut dbs = Vec::with_capacity(layout.tables.len());
            for name in layout.tables {
                match dbo.open_database::<Bytes, Bytes>(rtxn, Some(name))? {
                    Some(db) => dbs.push(db),
                    None => return Ok(CommitOrAbort::Abort(*name)),
                }
            }
            Ok(CommitOrAbort::Commit(Opened(dbs)))
        })
        .map_err(heed_err)?;
    match opened {
        CommitOrAbort::Commit(dbs) => Ok(dbs.into()),
        CommitOrAbort::Abort(missing) => Err(StoreError::Corrupt(format!("no table {missing}"))),
    }
}

/// The map lock and the capacity gauge against `limits` (the store's size is read by
/// [`Store::start`], once the tables are made).
fn map_lock(
    env: &Env<WithoutTls>,
    dir: &Path,
    at: PathBuf,
    limits: Limits,
    noted: fault::Noted,
    opened: watch::Opened,
) -> Arc<MapLock> {
    Arc::new(MapLock {
        lock: RwLock::new(()),
        noted,
        gauge: Gauge::new(limits),
        page_size: env.unnamed_database_stat().page_size as u64,
        dir: dir.to_path_buf(),
        dir_file: std::fs::File::open(&at).ok(),
        at,
        remeasured_ms: std::sync::atomic::AtomicU64::new(0),
        made: std::time::Instant::now(),
        opened,
        replaced: std::sync::OnceLock::new(),
        unseen: watch::Unseen::default(),
        ours: std::sync::atomic::AtomicUsize::new(env.info().last_txn_id),
        rolled_back: std::sync::atomic::AtomicBool::new(false),
        appends_log: std::sync::atomic::AtomicBool::new(false),
    })
}

/// Start the store's writer thread, which runs the jobs `receiver` brings.
fn spawn_writer(writer: Writer, receiver: Receiver<Job>) -> Result<JoinHandle<()>, StoreError> {
    std::thread::Builder::new()
        .name("worldd-store-writer".into())
        .spawn(move || writer.run(receiver))
        .map_err(StoreError::from_io)
}

impl Store {
    /// Whether some process has the LMDB environment in `dir` open: holds LMDB's lock on its
    /// `lock.mdb` (`false` where there is none). Asked before this process opens the store
    /// (its own lock is not seen, and closing the file to ask would drop it): a verb about to
    /// open a store writable beside a serving daemon that holds no such lock (its `lock.mdb`
    /// removed while it served) would make a new one, and the two would not share LMDB's
    /// write lock.
    pub fn lock_file_held(dir: &Path) -> bool {
        map::open_elsewhere(dir)
    }

    /// Open (or with `options.create`, create) the store in `dir` with `layout`'s tables,
    /// upgrading an older version first and refusing an unknown one untouched. A new store is
    /// stamped with the layout's version.
    /// A page LMDB found missing or malformed on the way is said as the damaged store in `dir`
    /// ([`StoreError::Damaged`]).
    pub(crate) fn open_layout(
        dir: &Path,
        options: StoreOptions,
        layout: &'static Layout,
    ) -> Result<Store, StoreError> {
        Store::open_layout_unsaid(dir, options, layout).map_err(|e| e.said_at_open(dir))
    }

    fn open_layout_unsaid(
        dir: &Path,
        options: StoreOptions,
        layout: &'static Layout,
    ) -> Result<Store, StoreError> {
        let read_only = options.read_only;
        // Before anything is made: a store being created is judged by the directory it goes in.
        if !read_only && !options.allow_network_filesystem {
            if let Some(kind) = filesystem::network(dir) {
                return Err(StoreError::NetworkFilesystem {
                    dir: dir.to_path_buf(),
                    kind,
                });
            }
        }
        refuse_odd_store_files(dir)?;
        let exists = check_or_create_dir(dir, options.create && !read_only)?;
        let wanted =
            wanted_map_size(options.ceiling, exists).map(|w| room_past_file(dir, w, &options));
        check_ceiling(&options)?;
        // Asked before this process opens the environment (see `open_elsewhere`).
        let shared = exists && !read_only && map::open_elsewhere(dir);
        if !read_only {
            reserve_lock_file(dir)?;
        }
        let env = open_env(dir, wanted, read_only)?;
        // Where the store is, resolved once now: the watch looks at the path again every
        // second, and a chdir by anything in the process (plugin code, a library) must not
        // move what a relative path names. `dir` as given is what messages say.
        let at = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
        // The files just opened, which the daemon's watch compares the path's with.
        let opened = watch::Opened::of(&at);
        // Before the first page is read: a crash on a corrupt one is then said as such.
        let noted = fault::note(mapping::map_of(&at))
            .of_file(std::fs::File::open(at.join("data.mdb")).ok());
        check_length(&env, dir)?;
        let map_size = env.info().map_size;
        let limits = Limits::new(options.ceiling.unwrap_or(map_size as u64), options.reserve)?;
        // Reader slots of crashed processes would otherwise leak (read-only, nothing is written).
        if !read_only {
            let _ = env.clear_stale_readers();
        }

        let new = check_or_upgrade_version(&env, layout, dir, shared, read_only, map_size)?;
        let (dbs, meta) = if read_only {
            (open_tables_read_only(&env, layout, map_size)?, None)
        } else {
            let (dbs, meta) = open_tables(&env, dir, layout, new, map_size)?;
            (dbs, Some(meta))
        };
        let map = map_lock(&env, dir, at, limits, noted, opened);
        Store::start(env, (dbs, meta), layout, dir, map_size, map, &options)
    }

    /// Start the writer thread over the opened tables and hand out the store.
    fn start(
        env: Env<WithoutTls>,
        (dbs, meta): (Arc<[RawDb]>, Option<RawDb>),
        layout: &'static Layout,
        dir: &Path,
        map_size: usize,
        map: Arc<MapLock>,
        options: &StoreOptions,
    ) -> Result<Store, StoreError> {
        let read_only = options.read_only;
        let (sender, receiver) = mpsc::channel::<Job>();
        let stats = Arc::new(WriterStats {
            failing: writer::FailingWrites::new(options.on_failing),
            ..WriterStats::default()
        });
        let observer = ObserverSlot::default();
        map.measure(&env);
        let committed = Arc::new(CommitSignal::default());
        // What this process found on opening is made durable before it is taken as such:
        // another process's last commit may still wait for its meta page's sync (the daemon
        // leaves it to its syncing thread), and a sync by anyone flushes it.
        // Read-only, nothing can be written (a read-only filesystem): what is there is durable.
        if !read_only {
            env.force_sync()
                .map_err(|e| map::write_error(e, map_size, || crate::capacity::disk_free(dir)))?;
        }
        committed.mark_durable(env.info().last_txn_id);
        map.ours
            .store(env.info().last_txn_id, std::sync::atomic::Ordering::Release);
        let waits = Arc::new(DurableWaits::default());
        let follow_wait = writer::follow_wait();
        let resident = resident::budget();
        let state = (layout.state)();
        // Read once here: the writer compares the log's newest row with it when another
        // process committed last. A store without a log, or one whose newest row cannot be
        // read, is remembered as having none (such a read fails again where it matters).
        let log_tip = found_log_tip(layout.log_tip, &env, &dbs, &state, map_size)?;
        let writer = spawn_writer(
            Writer {
                env: env.clone(),
                dbs: dbs.clone(),
                state: state.clone(),
                ended: layout.ended,
                tip_of: layout.log_tip,
                map_size,
                stats: stats.clone(),
                map: map.clone(),
                signal: committed.clone(),
                waits: waits.clone(),
                observer: observer.clone(),
                follow_wait: follow_wait.clone(),
                resident: resident.clone(),
                log_tip: std::cell::Cell::new(log_tip),
                meta,
            },
            receiver,
        )?;
        Ok(Store {
            inner: Arc::new(Inner {
                env,
                dbs,
                meta,
                restamping: Mutex::new(None),
                state,
                #[cfg(any(test, feature = "fixtures"))]
                names: layout.tables,
                path: dir.to_path_buf(),
                map_size,
                sender: Mutex::new(Some(sender)),
                writer: Mutex::new(Some(writer)),
                stats,
                observer,
                map,
                committed,
                waits,
                read_hook: std::sync::OnceLock::new(),
                follow_wait,
                resident,
                read_only,
            }),
        })
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The store's directory made absolute when it was opened: where it is whatever the
    /// process's working directory is now ([`Store::path`] is the path as it was given).
    pub fn location(&self) -> &Path {
        &self.inner.map.at
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

    /// Say that this process is the one that appends to the store's log (the daemon serving
    /// it, which holds the store's lock): from now on, a log that no longer ends at the row
    /// this process appended last (or found when it opened) is taken for a data file copied
    /// over, and writes are refused. Other processes' commits (a `session mint`) leave the log
    /// as it was. Not for a process that writes beside a daemon (`backup`, the session verbs):
    /// there the daemon appends.
    pub fn appends_the_log(&self) {
        self.inner
            .map
            .appends_log
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether the store's files were found replaced or removed under this process
    /// ([`Store::watch`]): it then writes nothing more and refuses every new call until the
    /// daemon is restarted.
    pub fn replaced(&self) -> bool {
        self.inner.map.replaced.get().is_some()
    }

    /// Whether the store's data file was found rolled back (or replaced by another daemon's
    /// copy) under this process: what it reads now may lack calls it acknowledged, so an
    /// absent call is not one that never ran.
    pub fn rolled_back(&self) -> bool {
        self.inner
            .map
            .rolled_back
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether the store's last commit or sync failed for its disk (no space, a read-only
    /// filesystem, an I/O error), and none has been made durable since
    /// (`writer::FailingWrites`).
    pub fn writes_failing(&self) -> bool {
        self.inner.stats.failing.now()
    }

    /// `Err` when new client work must be refused: past the reserve, or the disk is short.
    /// Operator verbs and calls already admitted are not asked.
    pub fn admits_client_work(&self) -> Result<(), Full> {
        if self.inner.map.replaced.get().is_some() {
            if self
                .inner
                .map
                .rolled_back
                .load(std::sync::atomic::Ordering::Acquire)
            {
                return Err(Full::RolledBack);
            }
            return Err(Full::Replaced);
        }
        if self.usage().refusal().is_some() {
            // Room may have been made since (disk space freed): look again, now and then.
            self.inner.map.remeasure(&self.inner.env);
        }
        match self.usage().refusal() {
            Some(full) => Err(full),
            None => Ok(()),
        }
    }

    /// How often the serving daemon calls [`Store::watch`] ([`Store::watch_every`]).
    pub const WATCH_EVERY: std::time::Duration = watch::WATCH_EVERY;

    /// One look at the store while a daemon serves it: clear the reader slots of processes
    /// that died holding a read snapshot (which keep LMDB from reusing any page freed since),
    /// counted in [`WriterStats::stale_readers_cleared`] and logged; check that the files at
    /// the store's path are still the ones this process opened, and from the first time they
    /// are not, log it and refuse every write and new client call ([`StoreError::Replaced`],
    /// [`Full::Replaced`]); and read the store's size and free disk space into the gauge.
    /// Returns how many reader slots it cleared. A read-only store is only measured.
    pub fn watch(&self) -> usize {
        use std::sync::atomic::Ordering;
        let inner = &self.inner;
        let map = &inner.map;
        {
            let _shared = map.shared();
            map.measure(&inner.env);
        }
        if inner.read_only {
            return 0;
        }
        {
            let _shared = map.shared();
            map.rolled_back(&inner.env);
        }
        if map.replaced.get().is_none() {
            let looked = match map.opened.changed(&map.at) {
                Ok(Some(what)) => {
                    let message = map.opened.replaced_message(&inner.path, &what);
                    if map.replaced.set(message.clone()).is_ok() {
                        tracing::error!("{message}");
                    }
                    None
                }
                Ok(None) => map.unseen.after(&inner.path, Ok(())),
                // Not known to be replaced: warned of, and looked at again next time.
                Err(why) => map.unseen.after(&inner.path, Err(why)),
            };
            match looked {
                Some(watch::Said::Warn(line)) => tracing::warn!("{line}"),
                Some(watch::Said::Info(line)) => tracing::info!("{line}"),
                None => {}
            }
        }
        if inner.stats.failing.now() && map.replaced.get().is_none() {
            // Nothing else commits while every call fails on the disk: a look writes one page
            // (the schema stamp, as it is) and syncs it, so that health says when the disk
            // takes writes again, not only at the next call.
            // One at a time: a sync that hangs on the failing disk must not pile them up. The
            // one queued last is looked at (never waited for) at the next look.
            if let (Some(meta), Ok(mut queued)) = (inner.meta, inner.restamping.lock()) {
                let settled = queued.as_mut().is_none_or(|q| {
                    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
                    std::future::Future::poll(std::pin::Pin::new(q), &mut cx).is_ready()
                });
                if settled {
                    *queued = Some(self.submit(move |w: &mut WriteCtx<'_, '_>| restamp(w, meta)));
                }
            }
        }
        match inner.env.clear_stale_readers() {
            Ok(0) => 0,
            Ok(n) => {
                inner
                    .stats
                    .stale_readers_cleared
                    .fetch_add(n as u64, Ordering::Relaxed);
                tracing::warn!("{}", watch::stale_readers_message(&inner.path, n));
                n
            }
            Err(e) => {
                tracing::debug!(error = %e, "store reader check failed");
                0
            }
        }
    }

    /// Call [`Store::watch`] every `period` on a thread of its own, for as long as this store
    /// is open (the thread holds no handle between looks).
    pub fn watch_every(&self, period: std::time::Duration) -> Result<(), StoreError> {
        let weak = Arc::downgrade(&self.inner);
        std::thread::Builder::new()
            .name("worldd-store-watch".into())
            .spawn(move || loop {
                std::thread::sleep(period);
                let Some(inner) = weak.upgrade() else { break };
                Store { inner }.watch();
            })
            .map(drop)
            .map_err(StoreError::from_io)
    }

    pub fn stats(&self) -> &WriterStats {
        &self.inner.stats
    }

    /// Release the map's resident pages whenever the process's file-backed resident memory
    /// has grown by `bytes` since the last release (checked after commits, at most every
    /// 100 ms); 0 never releases. Default [`DEFAULT_RESIDENT_BYTES`]. The data stays in the
    /// kernel's page cache: this bounds what the store adds to the process's RSS, not I/O.
    pub fn keep_resident_under(&self, bytes: u64) {
        self.inner.resident.set(bytes);
    }

    /// Whether the writer also looks at the map after a second without work (on by default).
    /// Tests that measure what their reads map turn it off while they read.
    #[cfg(test)]
    pub(crate) fn look_at_the_map_when_idle(&self, on: bool) {
        self.inner.resident.set_idle_looks(on);
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

    /// The id of the newest committed transaction, by this process or another, read from the
    /// map without beginning a transaction: what a snapshot taken now would see
    /// ([`ReadCtx::snapshot`]). A value read at snapshot `s` is still current while this is `s`.
    pub fn last_commit(&self) -> usize {
        // Under a shared hold, like every transaction: a remap replaces the map being read.
        let _shared = self.inner.map.shared();
        self.inner.env.info().last_txn_id
    }

    /// Write a consistent copy of the store's data file into `file` (LMDB's copy, made under
    /// one read transaction: other processes, the daemon among them, go on writing meanwhile).
    /// `compact` leaves out free pages and renumbers the rest, so the copy is as small as its
    /// rows. The copy is not synced here; the caller owns `file`.
    pub fn copy_to(&self, file: &mut std::fs::File, compact: bool) -> Result<(), StoreError> {
        // Begun first to adopt a size another process may have grown the store to, and held so
        // that this process's map is not replaced under the copy.
        let _held = self
            .inner
            .map
            .begin(&self.inner.env, |env| env.read_txn())?;
        let option = if compact {
            heed::CompactionOption::Enabled
        } else {
            heed::CompactionOption::Disabled
        };
        self.inner
            .env
            .copy_to_file(file, option)
            .map_err(|e| StoreError::from_heed(e, self.inner.map_size))
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
        if let Some(hook) = self.inner.read_hook.get() {
            hook(held.txn.id());
        }
        let ctx = ReadCtx {
            txn: &held.txn,
            dbs: &self.inner.dbs,
            state: &*self.inner.state,
            map_size: self.inner.map_size,
            tail_claimed: false,
        };
        op(&ctx)
    }

    /// Call `hook` with the snapshot id of every read transaction this store begins from now
    /// on, on the reading thread (the daemon notes the newest snapshot a request read, so that
    /// its answer waits for [`Store::until_durable`]). Set once; `false` when a hook was set.
    pub fn on_read(&self, hook: ReadHook) -> bool {
        self.inner.read_hook.set(hook).is_ok()
    }

    /// `None` when the snapshot `txn_id` (a [`ReadCtx::snapshot`]) is durable; otherwise what
    /// answers once it is. A read transaction can see a commit the writer has not yet made
    /// durable (§8.6 of `docs/data-model.md`); what is shown outside the process waits for this
    /// first, so that a power cut never takes back what someone has seen. A commit of this
    /// store's writer is waited for through the sync it was handed to; a newer one (another
    /// process's) through an empty write, whose own sync covers it.
    pub fn until_durable(&self, txn_id: usize) -> Option<Submitted<(), StoreError>> {
        match self.inner.waits.wait_for(txn_id, &self.inner.committed) {
            Wait::Durable => None,
            Wait::Sync(sync) => Some(sync),
            Wait::NotOurs => Some(self.submit(|w: &mut WriteCtx<'_, '_>| {
                w.answer_as_written();
                Ok::<(), StoreError>(())
            })),
        }
    }

    /// Block until every commit this process may have read so far is durable: for a tool that
    /// prints what it read from a store another process writes (`worldd why --db`, `doctor`),
    /// so that it never prints what a power cut could take back.
    pub fn sync_seen(&self) -> Result<(), StoreError> {
        let newest = self.read(|r| Ok::<_, StoreError>(r.snapshot()))?;
        match self.until_durable(newest) {
            Some(wait) => wait.wait(),
            None => Ok(()),
        }
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
        self.submit(op).wait()
    }

    /// [`Store::write`] without waiting: `op` is queued for the next group commit, and the
    /// returned [`Submitted`] is its result once that commit is durable, for a thread to wait
    /// for or a task to await. What `op` captures is dropped before its result is given.
    pub fn submit<R, E>(
        &self,
        op: impl for<'a, 't> FnMut(&mut WriteCtx<'a, 't>) -> Result<R, E> + Send + 'static,
    ) -> Submitted<R, E>
    where
        R: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        self.queue(op, false)
    }

    /// [`Store::submit`] for an operation the caller follows at once with another, which it
    /// waits for instead (a read's intent, then the call's entry: the handler runs between).
    /// A group commit of nothing but such operations waits up to a millisecond for what
    /// follows them, so that both share one commit and one sync.
    pub fn submit_followed<R, E>(
        &self,
        op: impl for<'a, 't> FnMut(&mut WriteCtx<'a, 't>) -> Result<R, E> + Send + 'static,
    ) -> Submitted<R, E>
    where
        R: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        self.queue(op, true)
    }

    fn queue<R, E>(
        &self,
        op: impl for<'a, 't> FnMut(&mut WriteCtx<'a, 't>) -> Result<R, E> + Send + 'static,
        followed: bool,
    ) -> Submitted<R, E>
    where
        R: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        if self.inner.read_only {
            return Submitted::failed(StoreError::ReadOnly(self.inner.path.clone()).into());
        }
        if self.inner.map.replaced.get().is_some() {
            return Submitted::failed(self.inner.map.wedged().into());
        }
        let (reply, pending) = reply::slot();
        let job: Job = Box::new(Write {
            op,
            result: None,
            reply,
            map_size: self.inner.map_size,
            followed,
            wrote: false,
        });
        let Ok(guard) = self.inner.sender.lock() else {
            return Submitted::failed(StoreError::WriterGone.into());
        };
        match guard.as_ref().map(|sender| sender.send(job)) {
            Some(Ok(())) => Submitted::queued(pending),
            _ => Submitted::failed(StoreError::WriterGone.into()),
        }
    }

    /// Every row of the table `name`, as stored, for tests that look at a table's bytes (the
    /// `fixtures` feature: see [`crate::store::RawTable`]).
    #[cfg(any(test, feature = "fixtures"))]
    #[doc(hidden)]
    pub fn raw_rows(&self, name: &str) -> Result<RawRows, StoreError> {
        let (slot, name) = self
            .inner
            .names
            .iter()
            .enumerate()
            .find(|(_, n)| **n == name)
            .ok_or_else(|| StoreError::Corrupt(format!("no table {name}")))?;
        self.read(|r| {
            Table::<Bytes, Bytes>::new(slot, name)
                .iter(r)?
                .map(|row| row.map(|(k, v)| (k.to_vec(), v.to_vec())))
                .collect()
        })
    }
}

#[cfg(test)]
mod tests;
