//! The filesystem a store lies on. LMDB shares its lock table (`lock.mdb`, mapped into every
//! process that opens the store) and its data map only between processes of one host: on a
//! network filesystem, a daemon on another host that opens the same store takes no lock this one
//! sees, and both write it, which corrupts it. The one-daemon-per-store lock (`flock` beside the
//! store) is not shared across hosts by every such filesystem either. So a store is refused on a
//! filesystem that other hosts can mount (two replicas of a service sharing a volume, a store
//! moved to a shared disk), by the type the kernel reports for it.

use std::path::Path;

/// The network or cluster filesystem `dir` (or, when it does not exist yet, the nearest of its
/// ancestors that does) lies on, by name; `None` for any other, or where it cannot be told.
pub(crate) fn network(dir: &Path) -> Option<&'static str> {
    let existing = dir.ancestors().find(|d| d.exists())?;
    named(type_of(existing)?)
}

/// The kernel's magic number of the filesystem holding `path`.
#[cfg(target_os = "linux")]
fn type_of(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: `statfs` is plain data, for which all zero bytes are a valid value.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a NUL-terminated string and `fs` a buffer of the type statfs fills.
    (unsafe { libc::statfs(path.as_ptr(), &mut fs) } == 0).then_some(fs.f_type as u64)
}

#[cfg(not(target_os = "linux"))]
fn type_of(_path: &Path) -> Option<u64> {
    None
}

/// The filesystems that hosts share, by the magic numbers of `linux/magic.h` and their own
/// headers (32 bits: some are negative as a signed `f_type`).
fn named(magic: u64) -> Option<&'static str> {
    Some(match magic & 0xFFFF_FFFF {
        0x6969 => "nfs",
        0x517B => "smb",
        0xFF53_4D42 => "cifs",
        0xFE53_4D42 => "smb2",
        0x00C3_6400 => "ceph",
        0x5346_414F | 0x6B41_4653 => "afs",
        0x7375_7245 => "coda",
        0x0102_1997 => "9p",
        0x564C => "ncp",
        0x7461_636F => "ocfs2",
        0x0116_1970 => "gfs2",
        0x4750_4653 => "gpfs",
        0x0BD0_0BD0 => "lustre",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_filesystems_are_named_and_local_ones_are_not() {
        for (magic, name) in [
            (0x6969, "nfs"),
            (0xFF53_4D42, "cifs"),
            // A negative signed `f_type`, as a 64-bit value.
            (0xFFFF_FFFF_FF53_4D42, "cifs"),
            (0xFE53_4D42, "smb2"),
            (0x0102_1997, "9p"),
            (0x00C3_6400, "ceph"),
        ] {
            assert_eq!(named(magic), Some(name), "{magic:#x}");
        }
        // ext4, tmpfs, xfs, btrfs, overlayfs, FUSE (local or not: it cannot be told).
        for local in [
            0xEF53,
            0x0102_1994,
            0x5846_5342,
            0x9123_683E,
            0x794C_7630,
            0x6573_5546,
        ] {
            assert_eq!(named(local), None, "{local:#x}");
        }
    }

    #[test]
    fn a_directory_not_made_yet_is_judged_by_the_nearest_one_that_is() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(network(&dir.path().join("a/b/c")), None);
        assert!(type_of(dir.path()).is_some() || cfg!(not(target_os = "linux")));
    }
}
