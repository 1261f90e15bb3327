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

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::map::{os_page_size, MapLock};
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

/// The store's file as `/proc/self/maps` may name it: by its path, or by its device and
/// inode (a file reached through a bind mount or an overlay may show another path).
#[derive(Debug)]
struct StoreFile {
    path: PathBuf,
    /// Device (major, minor) and inode.
    id: Option<((u64, u64), u64)>,
}

impl StoreFile {
    fn of(dir: &Path) -> StoreFile {
        use std::os::unix::fs::MetadataExt;
        let file = dir.join("data.mdb");
        let id = std::fs::metadata(&file).ok().map(|m| {
            let dev = m.dev();
            (
                (u64::from(libc::major(dev)), u64::from(libc::minor(dev))),
                m.ino(),
            )
        });
        StoreFile {
            path: std::fs::canonicalize(&file).unwrap_or(file),
            id,
        }
    }
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
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return 0;
    };
    let mut released = 0;
    for (start, len) in maps.lines().filter_map(|line| mapping_of(line, file)) {
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

/// Where this process maps the store in `dir`: the first mapping of its data file, `None`
/// where `/proc/self/maps` is not there to say.
pub(super) fn map_of(dir: &Path) -> Option<(usize, usize)> {
    let file = StoreFile::of(dir);
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| mapping_of(line, &file))
}

/// The address range of a `/proc/self/maps` line when it maps `file`.
fn mapping_of(line: &str, file: &StoreFile) -> Option<(usize, usize)> {
    // start-end perms offset dev inode path
    let mut fields = line.splitn(6, ' ');
    let range = fields.next()?;
    let shared = fields.next()?.ends_with('s');
    let (dev, inode) = (fields.nth(1)?, fields.next()?);
    let path = fields.next()?.trim_start();
    let id = || -> Option<((u64, u64), u64)> {
        let (major, minor) = dev.split_once(':')?;
        let major = u64::from_str_radix(major, 16).ok()?;
        let minor = u64::from_str_radix(minor, 16).ok()?;
        Some(((major, minor), inode.parse().ok()?))
    };
    if !shared || (Path::new(path) != file.path && (file.id.is_none() || id() != file.id)) {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    let start = usize::from_str_radix(start, 16).ok()?;
    let end = usize::from_str_radix(end, 16).ok()?;
    Some((start, end.checked_sub(start)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_maps_line_is_the_stores_mapping_only_when_shared_and_of_its_file() {
        let file = &StoreFile {
            path: PathBuf::from("/srv/world db/data.mdb"),
            id: Some(((0xfd, 1), 1234)),
        };
        let line = "7f0000000000-7f0000100000 r--s 00000000 fd:01 1234   /srv/world db/data.mdb";
        assert_eq!(mapping_of(line, file), Some((0x7f00_0000_0000, 0x10_0000)));
        // A private mapping of the same file, or another file, is not the store's map.
        let private = line.replace("r--s", "r--p");
        assert_eq!(mapping_of(&private, file), None);
        let other = line
            .replace("data.mdb", "lock.mdb")
            .replace(" 1234 ", " 1235 ");
        assert_eq!(mapping_of(&other, file), None);
        assert_eq!(mapping_of("7f0-7f1 rw-p 00000000 00:00 0", file), None);
        // The same device and inode under another path (a bind mount, an overlay) is.
        let elsewhere = line.replace("/srv/world db/", "/mnt/store/");
        assert_eq!(
            mapping_of(&elsewhere, file),
            Some((0x7f00_0000_0000, 0x10_0000))
        );
        let unknown = &StoreFile {
            path: file.path.clone(),
            id: None,
        };
        assert_eq!(mapping_of(&elsewhere, unknown), None);
    }

    #[test]
    fn the_store_file_is_known_by_the_path_and_inode_this_process_maps_it_under() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("data.mdb"), [0u8; 4096]).unwrap();
        let file = StoreFile::of(dir.path());
        let mapped = std::fs::File::open(dir.path().join("data.mdb")).unwrap();
        // SAFETY: a shared read-only map of a file this test owns, unmapped below.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&mapped),
                0,
            )
        };
        assert_ne!(at, libc::MAP_FAILED);
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let found: Vec<_> = maps.lines().filter_map(|l| mapping_of(l, &file)).collect();
        assert_eq!(found, [(at as usize, 4096)]);
        // Known by its device and inode alone, as under another path.
        let by_id = StoreFile {
            path: PathBuf::from("/elsewhere/data.mdb"),
            id: file.id,
        };
        let found: Vec<_> = maps.lines().filter_map(|l| mapping_of(l, &by_id)).collect();
        assert_eq!(found, [(at as usize, 4096)]);
        // SAFETY: the map made above, no longer used.
        unsafe { libc::munmap(at, 4096) };
    }
}
