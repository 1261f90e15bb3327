//! Who holds which `flock`, read from `/proc/locks`. A daemon's store, workspace root and the
//! directories above them are told apart by their locks, and they are looked at without taking
//! one: a lock taken even for a moment to see whether another is held could refuse a daemon
//! (or a backup) starting at that moment.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// One granted `flock` (a waiter's line is left out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flock {
    /// `WRITE` (exclusive) rather than `READ` (shared).
    pub exclusive: bool,
    pub pid: String,
    /// The locked file as `/proc/locks` names it ([`file_key`]).
    pub file: String,
}

/// `path`'s file as `/proc/locks` names it: `MAJ:MIN:INODE`, the device in hex.
pub fn file_key(path: &Path) -> Option<String> {
    let md = std::fs::metadata(path).ok()?;
    Some(format!(
        "{:02x}:{:02x}:{}",
        libc::major(md.dev()),
        libc::minor(md.dev()),
        md.ino()
    ))
}

/// Every granted `flock` now; `None` where `/proc/locks` cannot be read.
pub fn held() -> Option<Vec<Flock>> {
    Some(parse(&std::fs::read_to_string("/proc/locks").ok()?))
}

/// `/proc/locks`'s lines as [`Flock`]s: `1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234 0 EOF`, a
/// waiter's with `->` after the id.
fn parse(text: &str) -> Vec<Flock> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields.as_slice() {
                [_, "FLOCK", _, kind, pid, file, ..] => Some(Flock {
                    exclusive: *kind == "WRITE",
                    pid: (*pid).to_owned(),
                    file: (*file).to_owned(),
                }),
                _ => None,
            }
        })
        .collect()
}

/// The process holding an exclusive `flock` on `path`, by its pid; `None` when none does or
/// that cannot be read.
pub fn exclusive_holder(path: &Path) -> Option<String> {
    let (file, locks) = (file_key(path)?, held()?);
    locks
        .into_iter()
        .find(|l| l.exclusive && l.file == file)
        .map(|l| l.pid)
}

/// Whether some process holds an exclusive `flock` on `path`; `false` where that cannot be
/// read.
pub fn held_exclusively(path: &Path) -> bool {
    let (Some(file), Some(locks)) = (file_key(path), held()) else {
        return false;
    };
    locks.iter().any(|l| l.exclusive && l.file == file)
}

/// A file as `/proc` names it: its device's major and minor numbers and its inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    pub major: u32,
    pub minor: u32,
    pub ino: u64,
}

/// `path`'s [`FileId`] now; `None` where it cannot be stat'ed (absent).
pub fn file_id(path: &Path) -> Option<FileId> {
    let md = std::fs::metadata(path).ok()?;
    Some(FileId {
        major: libc::major(md.dev()),
        minor: libc::minor(md.dev()),
        ino: md.ino(),
    })
}

/// One file a process maps, from `/proc/<pid>/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapped {
    pub file: FileId,
    /// The path the kernel gives, without its ` (deleted)` mark.
    pub path: String,
    /// The file was unlinked since it was mapped (` (deleted)`): an inode number equal to
    /// the one at the path now is a reused one, not this file.
    pub deleted: bool,
}

/// The files process `pid` maps now; `None` where its `/proc/<pid>/maps` cannot be read
/// (another user's process, `/proc` mounted `hidepid`, the process gone).
pub fn mapped(pid: &str) -> Option<Vec<Mapped>> {
    Some(parse_maps(
        &std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?,
    ))
}

/// `/proc/<pid>/maps`'s file lines as [`Mapped`]s: `addr perms offset MAJ:MIN inode path`,
/// the device in hex; anonymous mappings (inode 0) are left out.
fn parse_maps(text: &str) -> Vec<Mapped> {
    const DELETED: &str = " (deleted)";
    text.lines()
        .filter_map(|line| {
            let mut rest = line;
            let mut fields = [""; 5];
            for field in &mut fields {
                rest = rest.trim_start();
                let end = rest.find(char::is_whitespace)?;
                (*field, rest) = rest.split_at(end);
            }
            let [_, _, _, dev, ino] = fields;
            let (major, minor) = dev.split_once(':')?;
            let file = FileId {
                major: u32::from_str_radix(major, 16).ok()?,
                minor: u32::from_str_radix(minor, 16).ok()?,
                ino: ino.parse().ok().filter(|&ino| ino != 0)?,
            };
            // The path is the rest of the line after its padding; it may hold spaces.
            let path = rest.trim_start();
            let (path, deleted) = match path.strip_suffix(DELETED) {
                Some(path) => (path, true),
                None => (path, false),
            };
            Some(Mapped {
                file,
                path: path.to_owned(),
                deleted,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// File lines are read with their device in hex, a path with spaces and the mark of an
    /// unlinked file; anonymous and malformed lines are left out.
    #[test]
    fn maps_lines_are_read_as_files() {
        let text = "7f1c2a000000-7f1c2b000000 r--s 00000000 fd:01 1234                       /srv/w db/data.mdb\n\
                    7f1c2b000000-7f1c2b002000 rw-s 00000000 103:0a 99 /srv/w db/lock.mdb (deleted)\n\
                    7f1c2b002000-7f1c2b003000 rw-p 00000000 00:00 0 \n\
                    7ffd1000-7ffd2000 rw-p 00000000 00:00 0                          [stack]\n\
                    garbage\n";
        assert_eq!(
            parse_maps(text),
            [
                Mapped {
                    file: FileId {
                        major: 0xfd,
                        minor: 1,
                        ino: 1234
                    },
                    path: "/srv/w db/data.mdb".into(),
                    deleted: false,
                },
                Mapped {
                    file: FileId {
                        major: 0x103,
                        minor: 0x0a,
                        ino: 99
                    },
                    path: "/srv/w db/lock.mdb".into(),
                    deleted: true,
                },
            ]
        );
    }

    /// A waiter holds nothing: its line (`->` after the id) is not a lock held.
    #[test]
    fn granted_flocks_are_read_and_a_waiters_line_is_not_one() {
        let text = "1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234 0 EOF\n\
                    1: -> FLOCK  ADVISORY  WRITE 4343 fd:01:1234 0 EOF\n\
                    2: FLOCK  ADVISORY  READ  4242 fd:01:99 0 EOF\n\
                    3: POSIX  ADVISORY  WRITE 4444 fd:01:5 0 EOF\n";
        assert_eq!(
            parse(text),
            [
                Flock {
                    exclusive: true,
                    pid: "4242".into(),
                    file: "fd:01:1234".into()
                },
                Flock {
                    exclusive: false,
                    pid: "4242".into(),
                    file: "fd:01:99".into()
                },
            ]
        );
    }
}
