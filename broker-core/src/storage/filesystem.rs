//! The filesystem a store lies on: whether it is mounted read-only, and whether other hosts
//! share it. LMDB shares its lock table (`lock.mdb`, mapped into every
//! process that opens the store) and its data map only between processes of one host: on a
//! network filesystem, a daemon on another host that opens the same store takes no lock this one
//! sees, and both write it, which corrupts it. The one-daemon-per-store lock (`flock` beside the
//! store) is not shared across hosts by every such filesystem either. So a store is refused on a
//! filesystem that other hosts can mount (two replicas of a service sharing a volume, a store
//! moved to a shared disk), by the type the kernel reports for it. Every FUSE filesystem has one
//! type, local or not, so on FUSE the mount table's name for it decides (`fuse.sshfs`,
//! `fuse.juicefs`).

use std::path::Path;

/// The network or cluster filesystem `dir` (or, when it does not exist yet, the nearest of its
/// ancestors that does) lies on, by name; `None` for any other, or where it cannot be told.
pub(crate) fn network(dir: &Path) -> Option<&'static str> {
    let existing = dir.ancestors().find(|d| d.exists())?;
    match type_of(existing)? & 0xFFFF_FFFF {
        FUSE => {
            let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
            named_fuse(mount_type(&table, &existing.canonicalize().ok()?)?)
        }
        magic => named(magic),
    }
}

/// `FUSE_SUPER_MAGIC`: every FUSE filesystem's type.
const FUSE: u64 = 0x6573_5546;

/// The filesystem type the mount table (`/proc/self/mountinfo`) gives for the mount holding
/// `path`, an absolute path with no links: the mount point that is the longest prefix of it.
fn mount_type<'t>(table: &'t str, path: &Path) -> Option<&'t str> {
    table
        .lines()
        .filter_map(|line| {
            // `id parent major:minor root mountpoint options [optional…] - type source …`
            let mut fields = line.split(' ');
            let point = unescape(fields.nth(4)?);
            let (_, after) = line.split_once(" - ")?;
            Some((point, after.split(' ').next()?))
        })
        .filter(|(point, _)| path.starts_with(point))
        // The last mount of the longest point is the one on top.
        .max_by_key(|(point, _)| point.len())
        .map(|(_, kind)| kind)
}

/// A mount table field with its `\ooo` escapes (space, tab, newline, backslash) undone.
fn unescape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let code = rest.get(at + 1..at + 4);
        match code.and_then(|c| u8::from_str_radix(c, 8).ok()) {
            Some(byte) => {
                out.push(char::from(byte));
                rest = &rest[at + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The FUSE filesystems that reach other hosts, by the mount table's type (`fuse.NAME`, or
/// `fuseblk.NAME`).
fn named_fuse(kind: &str) -> Option<&'static str> {
    let name = kind.split_once('.')?.1;
    Some(match name {
        "sshfs" => "sshfs",
        "glusterfs" => "glusterfs",
        "ceph-fuse" | "ceph" => "ceph",
        "juicefs" => "juicefs",
        "s3fs" => "s3fs",
        "gcsfuse" => "gcsfuse",
        "rclone" => "rclone",
        "goofys" => "goofys",
        "mfs" | "moosefs" => "moosefs",
        "lizardfs" => "lizardfs",
        "davfs" => "davfs",
        _ => return None,
    })
}

/// Whether `dir` lies on a filesystem mounted read-only (a snapshot, a backup medium), or one
/// that refuses writing though mounted for it: a store there can be opened only
/// [`read_only`](super::StoreOptions::read_only).
pub fn refuses_writes(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `statvfs` is a plain C struct for which all-zero is a valid value; the call only
    // fills it, from a NUL-terminated path that lives through it.
    let flagged = unsafe {
        let mut fs: libc::statvfs = std::mem::zeroed();
        libc::statvfs(path.as_ptr(), &mut fs) == 0 && fs.f_flag & libc::ST_RDONLY != 0
    };
    flagged || refuses_writing(dir)
}

/// Whether the store's files in `dir` cannot be opened for writing because their filesystem is
/// read-only. An ext4 that an I/O error turned read-only (`errors=remount-ro`, shown as
/// `emergency_ro`) still says `rw` to `statvfs`, and every open for writing answers `EROFS`:
/// exactly when an operator wants `doctor` and `backup` to read the store where it is. The
/// files are opened and closed, nothing written; a link or a FIFO in their place is not
/// followed or waited for.
fn refuses_writing(dir: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    ["data.mdb", "lock.mdb"].iter().any(|name| {
        std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(dir.join(name))
            .is_err_and(|e| e.raw_os_error() == Some(libc::EROFS))
    })
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

    /// On FUSE the mount table names the filesystem: the mount holding the path is the longest
    /// mount point above it, the last one mounted there, escapes undone.
    #[test]
    fn a_fuse_mount_is_judged_by_its_name_in_the_mount_table() {
        let table = "\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 253:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
40 27 0:50 / /srv rw,nosuid,nodev,relatime shared:30 - fuse.sshfs host:/srv rw,user_id=0
41 40 0:51 / /srv/local rw,relatime - fuse.bindfs /data rw
42 27 0:52 / /mnt/with\\040space rw,relatime - fuse.juicefs redis://h/1 rw
43 27 0:53 / /mnt/mem rw,relatime - tmpfs tmpfs rw
44 43 0:54 / /mnt/mem rw,relatime - fuse.glusterfs g:/v rw
";
        let kind = |p: &str| mount_type(table, Path::new(p));
        assert_eq!(kind("/srv/world/db"), Some("fuse.sshfs"));
        assert_eq!(kind("/srv"), Some("fuse.sshfs"));
        assert_eq!(kind("/srv/local/db"), Some("fuse.bindfs"));
        assert_eq!(
            kind("/srvx/db"),
            Some("ext4"),
            "a prefix of a name is not a parent"
        );
        assert_eq!(kind("/mnt/with space/db"), Some("fuse.juicefs"));
        assert_eq!(
            kind("/mnt/mem/db"),
            Some("fuse.glusterfs"),
            "the mount on top"
        );
        assert_eq!(kind("/var/lib/worldd"), Some("ext4"));
        for (kind, name) in [
            ("fuse.sshfs", Some("sshfs")),
            ("fuse.juicefs", Some("juicefs")),
            ("fuse.ceph-fuse", Some("ceph")),
            ("fuse.glusterfs", Some("glusterfs")),
            ("fuseblk.ntfs", None),
            ("fuse.bindfs", None),
            ("fuse", None),
            ("ext4", None),
        ] {
            assert_eq!(named_fuse(kind), name, "{kind}");
        }
        assert_eq!(unescape("a\\040b\\134c\\0"), "a b\\c\\0");
    }

    #[test]
    fn a_directory_not_made_yet_is_judged_by_the_nearest_one_that_is() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(network(&dir.path().join("a/b/c")), None);
        assert!(type_of(dir.path()).is_some() || cfg!(not(target_os = "linux")));
    }
}
