//! The LMDB map: the lock every transaction of this process holds shared (so that a remap
//! happens only when none is active), the size gauge, and the map's size in pages.

use std::path::{Path, PathBuf};
use std::sync::{RwLock, RwLockReadGuard};
use std::time::Duration;

use heed::{Env, WithoutTls};

use super::StoreError;
use crate::capacity::{self, Gauge};

/// Free space under which a short write (EIO) is taken for a full disk.
const SHORT_WRITE_SLACK: u64 = 1 << 20;
/// How often, and how long apart, a remap after `MDB_MAP_RESIZED` waits for this process's
/// open transactions to end before it gives up.
const REMAP_ATTEMPTS: u32 = 200;
const REMAP_PAUSE: Duration = Duration::from_millis(5);

/// The lock every transaction of this process holds shared, and the size gauge.
pub(super) struct MapLock {
    pub(super) lock: RwLock<()>,
    /// The map as a crash inside it is said ([`super::fault`]).
    pub(super) noted: super::fault::Noted,
    pub(super) gauge: Gauge,
    pub(super) page_size: u64,
    /// The store's directory as it was given, as messages say it.
    pub(super) dir: PathBuf,
    /// The store's directory made absolute when it was opened: what is looked at again later
    /// (the watch, a remap, the file's residency), whatever the working directory is by then.
    pub(super) at: PathBuf,
    /// The store's directory, held open so that asking for its free space resolves no path.
    pub(super) dir_file: Option<std::fs::File>,
    /// When [`MapLock::remeasure`] last read the disk, in ms since [`MapLock::made`].
    pub(super) remeasured_ms: std::sync::atomic::AtomicU64,
    pub(super) made: std::time::Instant,
    /// The store's files as this process opened them ([`super::Store::watch`]).
    pub(super) opened: super::watch::Opened,
    /// Set, with the error logged, once the files at the store's path are no longer those:
    /// every write is refused from then on.
    pub(super) replaced: std::sync::OnceLock<String>,
    /// What the watch could not look at, as last warned of.
    pub(super) unseen: super::watch::Unseen,
    /// The id of the last transaction this process committed, or found committed when it
    /// opened the store: the store's own never goes below it ([`MapLock::rolled_back`]).
    pub(super) ours: std::sync::atomic::AtomicUsize,
    /// Set with [`MapLock::replaced`] when what was seen is the data file rolled back, not
    /// the files replaced: the error writes are refused with says so.
    pub(super) rolled_back: std::sync::atomic::AtomicBool,
    /// This process appends to the log ([`super::Store::appends_the_log`]: the daemon that
    /// serves the store). Only then is a log that no longer ends where this process left it a
    /// data file copied over; in any other process (a `session mint`, a `backup`) the daemon
    /// appends meanwhile.
    pub(super) appends_log: std::sync::atomic::AtomicBool,
}

/// How often, at most, a refusing store reads the disk again to see whether room was made.
const REMEASURE_EVERY: Duration = Duration::from_millis(500);

/// A transaction and the shared hold on the map lock it needs (dropped after the transaction:
/// fields drop in declaration order).
pub(super) struct Held<'m, T> {
    pub(super) txn: T,
    pub(super) _shared: RwLockReadGuard<'m, ()>,
}

impl MapLock {
    /// Whether the store's data file was rolled back under this process: its last committed
    /// transaction is older than one this process committed (a backup's `data.mdb` copied
    /// over it in place, which keeps the inode the watch compares). Every write would then go
    /// over a store that no longer holds what this process acknowledged, and its memory of
    /// the store (the content-address tail's map) would vouch for rows that are not there:
    /// from the first time, logged and refused as a replaced store is. One read of the meta
    /// pages (no transaction); the caller holds the map shared.
    pub(super) fn rolled_back(&self, env: &Env<WithoutTls>) -> bool {
        use std::sync::atomic::Ordering;
        if self.replaced.get().is_some() {
            return self.rolled_back.load(Ordering::Acquire);
        }
        // Ours first: a commit between the two reads only raises the store's id.
        let ours = self.ours.load(Ordering::Acquire);
        let now = env.info().last_txn_id;
        if now >= ours {
            return false;
        }
        let message = super::watch::rolled_back_message(&self.dir, now, ours);
        self.rolled_back.store(true, Ordering::Release);
        if self.replaced.set(message.clone()).is_ok() {
            tracing::error!("{message}");
        }
        true
    }

    /// The store's log no longer ends at the row this process appended last, or found when it
    /// opened the store (`ours`): the data file was replaced by a copy that another daemon
    /// served (its last transaction may be higher than this process's, so
    /// [`MapLock::rolled_back`] cannot see it). Logged once and refused from then on, as a
    /// rolled-back data file is.
    pub(super) fn log_replaced(&self, ours: Option<super::LogTip>, found: Option<super::LogTip>) {
        let entry = |tip: Option<super::LogTip>| match tip {
            Some((index, _)) => format!("entry {index}"),
            None => "no entry".to_owned(),
        };
        let found_is = match (found, ours) {
            (Some((a, _)), Some((b, _))) if a == b => format!("another entry {a}"),
            _ => entry(found),
        };
        let message = super::watch::log_replaced_message(&self.dir, &found_is, &entry(ours));
        self.rolled_back
            .store(true, std::sync::atomic::Ordering::Release);
        if self.replaced.set(message.clone()).is_ok() {
            tracing::error!("{message}");
        }
    }

    /// The error a write is refused with once [`MapLock::replaced`] is set.
    pub(super) fn wedged(&self) -> StoreError {
        if self.rolled_back.load(std::sync::atomic::Ordering::Acquire) {
            StoreError::RolledBack(self.dir.clone())
        } else {
            StoreError::Replaced(self.dir.clone())
        }
    }

    pub(super) fn shared(&self) -> RwLockReadGuard<'_, ()> {
        self.lock.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Begin a transaction under a shared hold. When another process has grown the store past
    /// this map (`MDB_MAP_RESIZED`), adopt the size it recorded and begin again.
    pub(super) fn begin<'e, T>(
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
                self.noted.moved(super::mapping::map_of(&self.at));
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

    /// A failed commit ([`write_error`]).
    pub(super) fn write_error(&self, e: heed::Error, map_size: usize) -> StoreError {
        write_error(e, map_size, || self.disk_free())
    }

    /// Read the high-water mark and the free disk space into the gauge.
    pub(super) fn measure(&self, env: &Env<WithoutTls>) {
        let used = (env.info().last_page_number as u64 + 1).saturating_mul(self.page_size);
        self.noted.used(used);
        self.gauge.observe(used, self.disk_free());
    }

    /// Read the store's size and the disk's free space again, at most every
    /// [`REMEASURE_EVERY`]: for a store that refuses client work, which otherwise learns only
    /// from its own commits, and makes none while it refuses; an operator who frees disk space
    /// must not wait for some other write to be noticed.
    pub(super) fn remeasure(&self, env: &Env<WithoutTls>) {
        use std::sync::atomic::Ordering;
        let now = u64::try_from(self.made.elapsed().as_millis()).unwrap_or(u64::MAX);
        let last = self.remeasured_ms.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= REMEASURE_EVERY.as_millis() as u64;
        if due
            && self
                .remeasured_ms
                .compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.measure(env);
        }
    }

    fn disk_free(&self) -> Option<u64> {
        match &self.dir_file {
            Some(file) => capacity::disk_free_of(file),
            None => capacity::disk_free(&self.at),
        }
    }
}

/// A failed write to the store (a commit, a sync). LMDB reports a write that stopped short as
/// EIO, which is what a disk that fills up mid-write produces: with (almost) nothing left on
/// the filesystem (`free`, asked only then), that is "disk full", not an I/O fault. The writer's
/// commits and the commits that create or open a store both meet it.
pub(super) fn write_error(
    e: heed::Error,
    map_size: usize,
    free: impl FnOnce() -> Option<u64>,
) -> StoreError {
    match e {
        heed::Error::Io(io)
            if io.raw_os_error() == Some(libc::EIO)
                && free().is_some_and(|f| f < SHORT_WRITE_SLACK) =>
        {
            StoreError::DiskFull(format!("a write stopped short: {io}"))
        }
        other => StoreError::from_heed(other, map_size),
    }
}

/// The OS page size (4096 where the system does not say).
pub(super) fn os_page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(page).ok().filter(|p| *p > 0).unwrap_or(4096)
}

/// `size` rounded up to the OS page size (LMDB map sizes must be multiples of it).
pub(super) fn page_multiple(size: u64) -> usize {
    let page = os_page_size();
    // Past the largest page multiple, the largest page multiple: a saturated product is no
    // multiple, and LMDB refused it with its own words instead of the ceiling's.
    let size = size
        .max(page)
        .div_ceil(page)
        .checked_mul(page)
        .unwrap_or(u64::MAX / page * page);
    usize::try_from(size).unwrap_or(usize::MAX / 2 / page as usize * page as usize)
}

/// Whether another process has the LMDB environment in `dir` open. Every process that opens an
/// environment holds an `fcntl` lock on the first byte of `lock.mdb` until it closes it; this
/// asks whether such a lock exists. Call it before this process opens the environment: POSIX
/// drops all of a process's locks on a file when it closes any descriptor of that file.
pub(super) fn open_elsewhere(dir: &Path) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(file) = std::fs::File::open(dir.join("lock.mdb")) else {
        return false;
    };
    // SAFETY: `flock` is a plain C struct for which all-zero is a valid value.
    let mut query: libc::flock = unsafe { std::mem::zeroed() };
    query.l_type = libc::F_WRLCK as libc::c_short;
    query.l_whence = libc::SEEK_SET as libc::c_short;
    query.l_start = 0;
    query.l_len = 1;
    // SAFETY: `file` is an open descriptor for the duration of the call and `query` a valid,
    // exclusively borrowed `flock`; F_GETLK only reads the lock table and fills `query`.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETLK, &mut query) };
    rc == 0 && query.l_type != libc::F_UNLCK as libc::c_short
}
