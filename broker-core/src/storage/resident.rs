//! Keeping the store's map from holding its file resident in the process.
//!
//! LMDB reads through a shared, read-only map of `data.mdb`. A page that a reader (or the
//! writer's free-list search) touches stays mapped until the process ends, and counts in its
//! RSS and its OOM score, though it is the kernel's clean page cache. Recent kernels map a whole
//! large folio on a read fault (Linux 6.18 with ext4: a 1 MiB value written in one `pwrite` is
//! one 1 MiB folio), so touching one 4 KiB page of a region a large value once filled maps all
//! of it: with megabyte writes, the map came to hold hundreds of MiB.
//!
//! So after a commit, at most every [`LOOK_EVERY`], the writer reads the process's file-backed
//! resident memory; once that has grown by the budget (`[serve] store_resident_bytes`) since
//! the last release, it drops the map's page-table entries (`MADV_DONTNEED`). The page cache
//! keeps the data: the next access maps the same page again, without I/O.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::map::{os_page_size, MapLock};
use super::mapping::{self, StoreFile};
use super::WriterStats;

/// Default growth of file-backed resident memory after which the map is released.
pub const DEFAULT_RESIDENT_BYTES: u64 = 64 * 1024 * 1024;

/// How often, at most, the writer looks at the process's resident memory (one read of
/// `/proc/self/statm`).
pub(super) const LOOK_EVERY: Duration = Duration::from_millis(100);

/// The budget in bytes, shared by a store and its writer; 0 turns releasing off.
pub(super) type Budget = Arc<AtomicU64>;

pub(super) fn budget() -> Budget {
    Arc::new(AtomicU64::new(DEFAULT_RESIDENT_BYTES))
}

/// The writer's watch over the map.
pub(super) struct Resident {
    budget: Budget,
    file: StoreFile,
    next_look: Option<Instant>,
    /// The least file-backed resident memory seen since the last release (or what it left).
    floor: Option<u64>,
    /// A release found no mapping of the store's file, and that was said once.
    unfound_told: bool,
}

impl Resident {
    pub(super) fn new(budget: Budget, dir: &Path) -> Resident {
        Resident {
            budget,
            file: StoreFile::of(dir),
            next_look: None,
            floor: None,
            unfound_told: false,
        }
    }

    /// After a commit: release the map when it is due.
    pub(super) fn after_commit(&mut self, map: &MapLock, stats: &WriterStats) {
        let budget = self.budget.load(Ordering::Relaxed);
        if budget == 0 {
            return;
        }
        let now = Instant::now();
        if self.next_look.is_some_and(|next| now < next) {
            return;
        }
        self.next_look = Some(now + LOOK_EVERY);
        let Some(resident) = file_resident_bytes() else {
            return;
        };
        let floor = self.floor.map_or(resident, |f| f.min(resident));
        self.floor = Some(floor);
        if resident < floor.saturating_add(budget) {
            return;
        }
        let released = {
            // No remap while the map's ranges are released: remaps take this lock exclusively.
            let _shared = map.shared();
            release(&self.file)
        };
        let after = file_resident_bytes().unwrap_or(resident);
        self.floor = Some(after);
        if released == 0 {
            if !std::mem::replace(&mut self.unfound_told, true) {
                tracing::warn!(
                    file = %self.file.path.display(),
                    "the store's map is not in /proc/self/maps under its path or inode; the pages it reads stay mapped (serve.store_resident_bytes has no effect)"
                );
            }
            return;
        }
        tracing::debug!(resident, after, "released the store's map");
        stats.map_releases.fetch_add(1, Ordering::Relaxed);
        stats
            .map_released_bytes
            .fetch_add(resident.saturating_sub(after), Ordering::Relaxed);
    }
}

/// The process's file-backed (and shared-memory) resident bytes: `/proc/self/statm`'s third
/// field. `None` where the kernel does not report it.
fn file_resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(2)?.parse().ok()?;
    Some(pages.saturating_mul(os_page_size()))
}

/// Drop the page-table entries of every mapping of `file` in this process; returns how many
/// mappings there were.
fn release(file: &StoreFile) -> usize {
    let mut released = 0;
    for (start, len) in mapping::mappings(file) {
        // SAFETY: the range is one whole mapping of the store's file, shared and read-only
        // (LMDB writes through the file, not the map). Dropping its page-table entries changes
        // no byte that anyone reads through it: the next access maps the same page-cache page.
        let rc = unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_DONTNEED) };
        if rc == 0 {
            released += 1;
        }
    }
    released
}
