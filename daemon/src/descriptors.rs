//! No descriptor of the daemon's reaches a program a plugin starts.
//!
//! Rust opens every descriptor close-on-exec, but LMDB opens the store's data file read-write
//! without the flag, and a daemon inherits whatever its shell or supervisor left open. A
//! plugin that starts a program with plain `std::process::Command` (the kit's `child` module
//! closes everything itself) would hand that program the store's file to write, and a
//! program an agent can steer (a test runner, a build) could then rewrite the log under the
//! daemon. So `serve` marks every descriptor above stderr close-on-exec once the store is
//! open and again once the plugins are loaded (their libraries may open descriptors too).
//! Descriptors opened later are Rust's, or LMDB's copies for a backup, all close-on-exec.

/// Mark every open descriptor above stderr close-on-exec. It sets a flag only: nothing is
/// closed, and the daemon's own use of its descriptors is unchanged.
pub fn keep_from_programs() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: close_range with CLOSE_RANGE_CLOEXEC closes nothing: it sets the
        // close-on-exec flag on this process's own descriptors from 3 up.
        let marked = unsafe {
            libc::syscall(
                libc::SYS_close_range,
                3u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            )
        };
        if marked == 0 {
            return;
        }
        // Kernels before 5.11 have no CLOSE_RANGE_CLOEXEC: mark them one by one.
    }
    one_by_one();
}

/// The descriptors this process holds, listed by the kernel (`/proc/self/fd` on Linux,
/// `/dev/fd` elsewhere), each marked close-on-exec.
fn one_by_one() {
    let dir = if cfg!(target_os = "linux") {
        "/proc/self/fd"
    } else {
        "/dev/fd"
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        tracing::warn!("cannot list this process's descriptors in {dir}: programs plugins start may inherit them");
        return;
    };
    let descriptors: Vec<libc::c_int> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd > 2)
        .collect();
    for fd in descriptors {
        // SAFETY: fcntl reads and sets the flags of one of this process's descriptors; on
        // one closed meanwhile (the listing's own) it fails with EBADF and changes nothing.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn close_on_exec(fd: libc::c_int) -> bool {
        // SAFETY: reads the flags of a descriptor this test holds open.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        assert!(flags >= 0, "descriptor {fd} is open");
        flags & libc::FD_CLOEXEC != 0
    }

    /// A descriptor opened without the flag, as LMDB opens the store's data file.
    fn inheritable() -> std::os::fd::OwnedFd {
        let file = tempfile::tempfile().unwrap();
        // SAFETY: clears the flag on the descriptor `file` owns.
        unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFD, 0) };
        assert!(!close_on_exec(file.as_raw_fd()));
        file.into()
    }

    #[test]
    fn every_descriptor_above_stderr_is_marked_close_on_exec_and_stays_open() {
        let fd = inheritable();
        keep_from_programs();
        assert!(close_on_exec(fd.as_raw_fd()));
        let other = inheritable();
        one_by_one();
        assert!(close_on_exec(other.as_raw_fd()));
    }
}
