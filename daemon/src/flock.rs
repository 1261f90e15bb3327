//! Non-blocking `flock`s: how a daemon holds its store, its workspace root and the directories
//! above them, and how a backup holds its destination and looks for a daemon's paths. One
//! `flock` meets another on the same file whichever process or open file took it, never an
//! `fcntl` lock (LMDB's).

use std::io;
use std::os::fd::{AsFd, AsRawFd};

/// Take an exclusive `flock` on `file` without waiting: `Ok(false)` when another open file
/// holds one (shared or exclusive), an error where the filesystem cannot lock.
pub(crate) fn exclusive(file: &impl AsFd) -> io::Result<bool> {
    lock(file, libc::LOCK_EX)
}

/// Take a shared `flock` on `file` without waiting: `Ok(false)` when another open file holds
/// an exclusive one, an error where the filesystem cannot lock.
pub(crate) fn shared(file: &impl AsFd) -> io::Result<bool> {
    lock(file, libc::LOCK_SH)
}

/// Release this open file's `flock` (one taken only to look).
pub(crate) fn unlock(file: &impl AsFd) {
    // SAFETY: flock on a descriptor the caller holds open; no memory is shared.
    unsafe { libc::flock(file.as_fd().as_raw_fd(), libc::LOCK_UN) };
}

fn lock(file: &impl AsFd, kind: libc::c_int) -> io::Result<bool> {
    // SAFETY: flock on a descriptor the caller holds open; no memory is shared.
    if unsafe { libc::flock(file.as_fd().as_raw_fd(), kind | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EWOULDBLOCK) => Ok(false),
        _ => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two open files of one directory: an exclusive lock refuses the other's shared and
    /// exclusive ones until it is let go; shared ones share.
    #[test]
    fn locks_meet_across_open_files_and_unlock_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (
            std::fs::File::open(dir.path()).unwrap(),
            std::fs::File::open(dir.path()).unwrap(),
        );
        assert!(exclusive(&a).unwrap());
        assert!(!shared(&b).unwrap());
        assert!(!exclusive(&b).unwrap());
        unlock(&a);
        assert!(shared(&b).unwrap());
        assert!(shared(&a).unwrap());
    }
}
