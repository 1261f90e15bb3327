//! Where this process maps a store's data file, as `/proc/self/maps` says: what the writer
//! releases ([`super::resident`]) and what a crash inside is said for ([`super::fault`]).

use std::path::{Path, PathBuf};

/// The store's file as `/proc/self/maps` may name it: by its path, or by its device and
/// inode (a file reached through a bind mount or an overlay may show another path).
#[derive(Debug)]
pub(super) struct StoreFile {
    pub(super) path: PathBuf,
    /// Device (major, minor) and inode.
    id: Option<((u64, u64), u64)>,
}

impl StoreFile {
    pub(super) fn of(dir: &Path) -> StoreFile {
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

/// Where this process maps the store in `dir`: the first mapping of its data file, `None`
/// where `/proc/self/maps` is not there to say.
pub(super) fn map_of(dir: &Path) -> Option<(usize, usize)> {
    mappings(&StoreFile::of(dir)).into_iter().next()
}

/// Every mapping of `file` in this process, `(start, length)`; none where `/proc/self/maps` is
/// not there to say.
pub(super) fn mappings(file: &StoreFile) -> Vec<(usize, usize)> {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    maps.lines()
        .filter_map(|line| mapping_of(line, file))
        .collect()
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
