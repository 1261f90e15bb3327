//! Keeping the store's map from holding its file resident in the process.
//!
//! LMDB reads through a shared, read-only map of `data.mdb`. A page that a reader (or the
//! writer's free-list search) touches stays mapped until the process ends, and counts in its
//! RSS and its OOM score, though it is the kernel's clean page cache. Recent kernels map a whole
//! large folio on a read fault (Linux 6.18 with ext4: a 1 MiB value written in one `pwrite` is
//! one 1 MiB folio), so touching one 4 KiB page of a region a large value once filled maps all
//! of it: with megabyte writes, the map came to hold hundreds of MiB.
//!
//! So after a commit (or a second without one), at most every [`LOOK_EVERY`], the writer reads
//! the process's file-backed resident memory; once that has grown by the budget (`[serve]
//! store_resident_bytes`) since the last release, it drops the map's page-table entries
//! (`MADV_DONTNEED`). The page cache keeps the data: the next access maps the same page again,
//! without I/O.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

/// How long the writer waits for work before it looks at the map all the same.
pub(super) const IDLE_LOOK: Duration = Duration::from_secs(1);

/// The longest wait between two releases when each is refilled at once ([`Pace`]).
pub(super) const MAX_GAP: Duration = Duration::from_secs(30);

/// What a store tells its writer about releasing the map, shared by both.
pub(super) type Budget = Arc<Watch>;

pub(super) fn budget() -> Budget {
    Arc::new(Watch {
        bytes: AtomicU64::new(DEFAULT_RESIDENT_BYTES),
        idle_looks: AtomicBool::new(true),
    })
}

#[derive(Debug)]
pub(super) struct Watch {
    /// The budget in bytes; 0 turns releasing off.
    bytes: AtomicU64,
    /// Whether the writer looks after [`IDLE_LOOK`] without work. Always on but in tests that
    /// measure the map while they read, which an idle look would release at a moment they do
    /// not control.
    idle_looks: AtomicBool,
}

impl Watch {
    pub(super) fn set(&self, bytes: u64) {
        self.bytes.store(bytes, Ordering::Relaxed);
    }

    pub(super) fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    #[cfg(test)]
    pub(super) fn set_idle_looks(&self, on: bool) {
        self.idle_looks.store(on, Ordering::Relaxed);
    }

    pub(super) fn idle_looks(&self) -> bool {
        self.idle_looks.load(Ordering::Relaxed)
    }
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
    pace: Pace,
}

/// How soon the map may be released again. Reads that spread over more of a large store than
/// the budget map it back within a look or two of each release: releasing on every look then
/// only churns page tables (six releases a second on a 1 GB store, a third more CPU per call).
/// A release due again as soon as it is allowed doubles the wait before the next (from 1 s, at
/// most [`MAX_GAP`]); one that fell due more than four waits plus ten seconds after the last
/// starts the wait over. Between two releases the map may then hold more than the budget.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Pace {
    last: Option<Instant>,
    gap: Duration,
}

impl Pace {
    /// Whether a release that is due by the budget may happen at `now`.
    pub(super) fn allows(&self, now: Instant) -> bool {
        self.last.is_none_or(|last| now >= last + self.gap)
    }

    /// A release happened at `now`.
    pub(super) fn released(&mut self, now: Instant) {
        if let Some(last) = self.last {
            let since = now.saturating_duration_since(last);
            if since <= self.gap + 2 * LOOK_EVERY {
                self.gap = (self.gap * 2).clamp(Duration::from_secs(1), MAX_GAP);
            } else if since > self.gap * 4 + Duration::from_secs(10) {
                self.gap = Duration::ZERO;
            }
        }
        self.last = Some(now);
    }
}

impl Resident {
    /// The budget is not 0: there is something to look for.
    pub(super) fn watching(&self) -> bool {
        self.budget.bytes() != 0
    }

    /// Whether a wait of [`IDLE_LOOK`] without work ends in a look.
    pub(super) fn looks_when_idle(&self) -> bool {
        self.budget.idle_looks()
    }

    pub(super) fn new(budget: Budget, dir: &Path) -> Resident {
        Resident {
            budget,
            file: StoreFile::of(dir),
            next_look: None,
            floor: None,
            unfound_told: false,
            pace: Pace::default(),
        }
    }

    /// After a commit, or a second without one: release the map when it is due.
    pub(super) fn look(&mut self, map: &MapLock, stats: &WriterStats) {
        let budget = self.budget.bytes();
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
        if resident < floor.saturating_add(budget) || !self.pace.allows(now) {
            return;
        }
        self.pace.released(now);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads that map the released store back within a look or two (a working set larger
    /// than the budget) released it on every look, about six times a second, for a third more
    /// CPU per call. A release due again as soon as it is allowed backs off, doubling to at
    /// most [`MAX_GAP`]; a calm spell starts over.
    #[test]
    fn releases_refilled_at_once_back_off_and_a_calm_spell_starts_over() {
        let t0 = Instant::now();
        let mut pace = Pace::default();
        assert!(pace.allows(t0));
        pace.released(t0);
        // Refilled by the next look: released again at once, then after 1, 2, 4 … s.
        let mut at = t0 + LOOK_EVERY;
        let mut gaps = Vec::new();
        for _ in 0..8 {
            assert!(pace.allows(at), "{at:?}");
            pace.released(at);
            gaps.push(pace.gap.as_secs());
            assert!(!pace.allows(at + pace.gap - LOOK_EVERY));
            at += pace.gap + LOOK_EVERY;
        }
        assert_eq!(gaps, [1, 2, 4, 8, 16, 30, 30, 30]);
        // A release that took long to fall due: the next may follow at once again.
        at += Duration::from_secs(200);
        pace.released(at);
        assert_eq!(pace.gap, Duration::ZERO);
        assert!(pace.allows(at + LOOK_EVERY));
    }
}
