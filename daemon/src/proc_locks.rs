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

#[cfg(test)]
mod tests {
    use super::*;

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
