//! What `stat` says of a regular file that makes it the same file, unchanged: one place for
//! the plugins that must tell whether a file is still the one they read or hashed (the
//! workspace plugin's edits, the ailang plugin's archived binary).

/// A regular file as `stat` saw it: its device and inode (a replacement changes them), its
/// size, mtime and ctime with nanoseconds (an in-place write, a `touch`, a `chmod` change
/// them). Equal identities: the same file, and as far as `stat` can tell, the same bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileIdentity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileIdentity {
    /// The identity in `md`: [`std::fs::Metadata`], or cap-std's (feature `cap-std`).
    pub fn of(md: &impl Stat) -> FileIdentity {
        FileIdentity {
            dev: md.dev(),
            ino: md.ino(),
            size: md.size(),
            mtime: md.mtime(),
            ctime: md.ctime(),
        }
    }

    /// The device and inode alone: which file, whatever has been written into it.
    pub fn file(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }

    /// Whether this is `read` moved by a rename since: the same device, inode, size and mtime.
    /// A rename sets the moved file's ctime (ext4, tmpfs), so ctime cannot be compared.
    pub fn moved_from(&self, read: &FileIdentity) -> bool {
        (self.dev, self.ino, self.size, self.mtime) == (read.dev, read.ino, read.size, read.mtime)
    }
}

/// The `stat` fields a [`FileIdentity`] is made of. std's and cap-std's `Metadata` each have
/// their own `MetadataExt`, so both are given here (a plugin cannot implement a foreign trait
/// for a foreign type).
pub trait Stat {
    /// `st_dev`.
    fn dev(&self) -> u64;
    /// `st_ino`.
    fn ino(&self) -> u64;
    /// `st_size`.
    fn size(&self) -> u64;
    /// `st_mtime` and its nanoseconds.
    fn mtime(&self) -> (i64, i64);
    /// `st_ctime` and its nanoseconds.
    fn ctime(&self) -> (i64, i64);
}

impl Stat for std::fs::Metadata {
    fn dev(&self) -> u64 {
        std::os::unix::fs::MetadataExt::dev(self)
    }
    fn ino(&self) -> u64 {
        std::os::unix::fs::MetadataExt::ino(self)
    }
    fn size(&self) -> u64 {
        std::os::unix::fs::MetadataExt::size(self)
    }
    fn mtime(&self) -> (i64, i64) {
        use std::os::unix::fs::MetadataExt;
        (MetadataExt::mtime(self), self.mtime_nsec())
    }
    fn ctime(&self) -> (i64, i64) {
        use std::os::unix::fs::MetadataExt;
        (MetadataExt::ctime(self), self.ctime_nsec())
    }
}

#[cfg(feature = "cap-std")]
impl Stat for cap_std::fs::Metadata {
    fn dev(&self) -> u64 {
        cap_std::fs::MetadataExt::dev(self)
    }
    fn ino(&self) -> u64 {
        cap_std::fs::MetadataExt::ino(self)
    }
    fn size(&self) -> u64 {
        self.len()
    }
    fn mtime(&self) -> (i64, i64) {
        use cap_std::fs::MetadataExt;
        (MetadataExt::mtime(self), self.mtime_nsec())
    }
    fn ctime(&self) -> (i64, i64) {
        use cap_std::fs::MetadataExt;
        (MetadataExt::ctime(self), self.ctime_nsec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_written_touched_or_replaced_has_another_identity_and_an_unchanged_one_the_same() {
        let tmp = tempfile_dir();
        let path = tmp.join("f");
        std::fs::write(&path, "one").unwrap();
        let of = || FileIdentity::of(&std::fs::symlink_metadata(&path).unwrap());
        let first = of();
        assert_eq!(of(), first);
        std::fs::write(&path, "three").unwrap();
        let written = of();
        assert_ne!(written, first, "written in place");
        assert_eq!(written.file(), first.file());
        std::fs::write(tmp.join("g"), "two").unwrap();
        std::fs::rename(tmp.join("g"), &path).unwrap();
        assert_ne!(of().file(), first.file(), "replaced by a rename");
        // Moved by a rename (which sets its ctime), still the file that was read.
        let moved = of();
        std::fs::rename(&path, tmp.join("h")).unwrap();
        let after = FileIdentity::of(&std::fs::symlink_metadata(tmp.join("h")).unwrap());
        assert!(after.moved_from(&moved));
        assert!(!after.moved_from(&first));
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("handler-kit-file-identity-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
