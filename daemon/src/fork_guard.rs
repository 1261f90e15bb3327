//! A plugin's `fork()` without `exec` does not keep the daemon's store, locks or port.
//!
//! Plugin code runs in the daemon's process, and a fork there (a library that daemonizes, a
//! plugin that forks a worker and lets it linger) copies every descriptor the daemon holds. The
//! child then outlived the daemon holding the listening socket (clients connected to it and
//! hung), the store's files and the directory `flock`s (the next daemon was refused: "another
//! worldd already serves"), and the daemon's SIGTERM handler (a plain `kill` of it did
//! nothing: the handler signals a runtime the child does not have).
//!
//! So `serve`, once its listener, locks and store are open, arms a `pthread_atfork` child
//! handler: in every child forked from then on, before the code that forked goes on, each of
//! the daemon's own descriptors is put over with `/dev/null` (`dup3`, which keeps the number
//! taken so that nothing in the child mistakes a new file for an old one, and drops the child's
//! hold on the open file, so its `flock` and the port go with the daemon), and SIGTERM, SIGINT
//! and SIGHUP, where a handler catches them, are set back to their default action.
//!
//! Only the daemon's own descriptors are registered, never "all of them": a child that
//! `std::process::Command` (or the kit's `child` module) forks relies on the pipes made for it
//! and on what the plugin opened until it execs. A descriptor is put over only while it still
//! names the file it was registered with (device and inode), so a number closed and reused
//! since is left alone. Connections the daemon accepted are not registered either: a forked
//! child still holds a client's connection until it exits. `posix_spawn` (what `Command` uses
//! where it can) runs no fork handlers and needs none: it execs at once, and every descriptor
//! of the daemon's is close-on-exec ([`crate::descriptors`]).

use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Mutex, Once, PoisonError};

/// How many descriptors can be registered: the listener, the store's few, the workspace
/// root's, one per `stateDir` and one per directory above the store and the root.
const CAPACITY: usize = 256;

/// One registered descriptor and the file it named when registered. Plain atomics: the child
/// handler reads them with no lock and no allocation.
struct Slot {
    /// `-1` for a free slot; written last, so a handler that sees a number sees its file too.
    fd: AtomicI32,
    dev: AtomicU64,
    ino: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)] // only the initialiser of the registry's slots
const FREE: Slot = Slot {
    fd: AtomicI32::new(-1),
    dev: AtomicU64::new(0),
    ino: AtomicU64::new(0),
};

/// The registered descriptors: a fixed table, since the child handler may not allocate.
struct Registry<const N: usize> {
    slots: [Slot; N],
    /// The table was full once: said once.
    full_said: AtomicBool,
}

impl<const N: usize> Registry<N> {
    const fn new() -> Self {
        Registry {
            slots: [FREE; N],
            full_said: AtomicBool::new(false),
        }
    }

    /// Put `fd` in the table with the file it names now, unless it is there already; `false`
    /// when the table is full (said once in the log) and `fd` stays open in forked children.
    fn register(&self, fd: RawFd) -> bool {
        let Some((dev, ino)) = file_of(fd) else {
            return true;
        };
        let same = |slot: &Slot| {
            slot.dev.load(Ordering::Relaxed) == dev && slot.ino.load(Ordering::Relaxed) == ino
        };
        // The number again, for another file (closed and reused since): that slot is taken
        // over.
        let slot = match self
            .slots
            .iter()
            .find(|slot| slot.fd.load(Ordering::Acquire) == fd)
        {
            Some(slot) if same(slot) => return true,
            Some(slot) => slot,
            None => match self
                .slots
                .iter()
                .find(|slot| slot.fd.load(Ordering::Acquire) < 0)
            {
                Some(slot) => slot,
                None => {
                    if !self.full_said.swap(true, Ordering::Relaxed) {
                        tracing::warn!("more than {N} descriptors of the daemon's: a process plugin code forks keeps the ones past that");
                    }
                    return false;
                }
            },
        };
        slot.fd.store(-1, Ordering::Release);
        slot.dev.store(dev, Ordering::Relaxed);
        slot.ino.store(ino, Ordering::Relaxed);
        slot.fd.store(fd, Ordering::Release);
        true
    }

    /// In a forked child: put `null` over every registered descriptor that still names its
    /// file. Async-signal-safe: atomic reads, `fstat` and `dup3`.
    fn cover(&self, null: RawFd) {
        for slot in &self.slots {
            let fd = slot.fd.load(Ordering::Acquire);
            if fd < 0 {
                continue;
            }
            let file = (
                slot.dev.load(Ordering::Relaxed),
                slot.ino.load(Ordering::Relaxed),
            );
            if file_of(fd) == Some(file) {
                // SAFETY: dup3 onto a descriptor of this (child) process that names the
                // daemon's file; it keeps the number open, on /dev/null, close-on-exec.
                unsafe { libc::dup3(null, fd, libc::O_CLOEXEC) };
            }
        }
    }
}

static REGISTRY: Registry<CAPACITY> = Registry::new();

/// `/dev/null`, opened read-write and close-on-exec when first armed; `-1` before.
static DEV_NULL: AtomicI32 = AtomicI32::new(-1);

/// Registration happens in the parent only, one caller at a time.
static REGISTERING: Mutex<()> = Mutex::new(());

static HANDLER: Once = Once::new();

/// The signals the daemon catches for its runtime, which a forked child cannot answer.
const SHUTDOWN_SIGNALS: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// Arm the guard (the handler is registered once) and register `held`, the daemon's own
/// descriptors (its listener, its `flock`s), together with every descriptor this process has
/// open on the store in `store` (the directory itself, `data.mdb`, `lock.mdb`: LMDB's and the
/// daemon's locks alike). Called again, it registers what it is given in addition.
pub fn arm<'a>(store: &Path, held: impl IntoIterator<Item = BorrowedFd<'a>>) {
    let _one = REGISTERING.lock().unwrap_or_else(PoisonError::into_inner);
    if DEV_NULL.load(Ordering::Acquire) < 0 {
        // Rust opens it close-on-exec: a program a plugin starts does not inherit it.
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
        {
            Ok(file) => {
                DEV_NULL.store(std::os::fd::IntoRawFd::into_raw_fd(file), Ordering::Release)
            }
            Err(e) => {
                tracing::warn!("a process plugin code forks would keep the daemon's store, locks and port: cannot open /dev/null: {e}");
                return;
            }
        }
    }
    HANDLER.call_once(|| {
        // SAFETY: registers a handler that makes only async-signal-safe calls (fstat, dup3,
        // sigaction) and reads plain atomics; it is never unregistered.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        if rc != 0 {
            tracing::warn!(
                "a process plugin code forks would keep the daemon's store, locks and port: pthread_atfork: {}",
                std::io::Error::from_raw_os_error(rc)
            );
        }
    });
    let mut fds: Vec<RawFd> = held.into_iter().map(|fd| fd.as_raw_fd()).collect();
    fds.extend(store_descriptors(store));
    for fd in fds {
        REGISTRY.register(fd);
    }
}

/// The file `fd` names: its device and inode.
fn file_of(fd: RawFd) -> Option<(u64, u64)> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: fstat writes one stat into `st`, which has room for it; a closed `fd` fails.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: zeroed is a valid stat, and fstat filled it.
    let st = unsafe { st.assume_init() };
    #[allow(clippy::unnecessary_cast)] // their widths differ between targets
    Some((st.st_dev as u64, st.st_ino as u64))
}

/// Every descriptor this process has open on the store directory, its `data.mdb` or its
/// `lock.mdb`, found by the file each names (a path can be spelled many ways; a file cannot).
fn store_descriptors(store: &Path) -> Vec<RawFd> {
    let files: Vec<(u64, u64)> = [
        store.to_path_buf(),
        store.join("data.mdb"),
        store.join("lock.mdb"),
    ]
    .iter()
    .filter_map(|path| std::fs::metadata(path).ok())
    .map(|md| (md.dev(), md.ino()))
    .collect();
    let dir = if cfg!(target_os = "linux") {
        "/proc/self/fd"
    } else {
        "/dev/fd"
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        tracing::warn!("cannot list this process's descriptors in {dir}: a process plugin code forks would keep the store's files open");
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<RawFd>().ok())
        .filter(|fd| file_of(*fd).is_some_and(|file| files.contains(&file)))
        .collect()
}

/// The fork handler, run in the child only: async-signal-safe calls and atomic reads, nothing
/// that allocates or locks.
extern "C" fn in_child() {
    let null = DEV_NULL.load(Ordering::Acquire);
    if null < 0 {
        return;
    }
    REGISTRY.cover(null);
    for signal in SHUTDOWN_SIGNALS {
        // SAFETY: sigaction reads, then sets, the disposition of one signal of this child;
        // both structs are zeroed (valid) and owned here.
        unsafe {
            let mut now: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut now) != 0 {
                continue;
            }
            // Ignored stays ignored (`nohup`), as a program the child execs would have it.
            if now.sa_sigaction == libc::SIG_DFL || now.sa_sigaction == libc::SIG_IGN {
                continue;
            }
            let mut default: libc::sigaction = std::mem::zeroed();
            default.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(signal, &default, std::ptr::null_mut());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// A registered descriptor is /dev/null in a forked child and the file itself in the
    /// parent; one that is not registered is the file in both.
    #[test]
    fn a_forked_child_finds_registered_descriptors_on_dev_null_and_others_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let held = std::fs::File::create(dir.path().join("held")).unwrap();
        let other = std::fs::File::create(dir.path().join("other")).unwrap();
        arm(dir.path(), [held.as_fd()]);
        let null = std::fs::metadata("/dev/null").unwrap();
        let null = (null.dev(), null.ino());
        let (held_fd, other_fd) = (held.as_raw_fd(), other.as_raw_fd());
        let other_file = file_of(other_fd);
        // SAFETY: the child makes only async-signal-safe calls (fstat) before _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let status = if file_of(held_fd) != Some(null) {
                1
            } else if file_of(other_fd) != other_file {
                2
            } else {
                0
            };
            // SAFETY: ends the child without running the parent's destructors.
            unsafe { libc::_exit(status) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked; `status` is owned here.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status));
        assert_eq!(libc::WEXITSTATUS(status), 0, "1: registered, 2: other");
        assert_ne!(file_of(held_fd), Some(null));
    }

    /// The table holds as many descriptors as it has slots: one more is refused (and stays
    /// open in a forked child), while one already there, or a number reused for another file,
    /// takes no new slot.
    #[test]
    fn a_full_table_refuses_one_more_descriptor_and_keeps_what_it_holds() {
        let dir = tempfile::tempdir().unwrap();
        let files: Vec<std::fs::File> = (0..3)
            .map(|i| std::fs::File::create(dir.path().join(i.to_string())).unwrap())
            .collect();
        let table = Registry::<2>::new();
        assert!(table.register(files[0].as_raw_fd()));
        assert!(table.register(files[1].as_raw_fd()));
        assert!(table.register(files[0].as_raw_fd()), "already held");
        assert!(!table.register(files[2].as_raw_fd()), "past the capacity");
        assert!(table.full_said.load(Ordering::Relaxed));
        let held: Vec<RawFd> = table
            .slots
            .iter()
            .map(|slot| slot.fd.load(Ordering::Relaxed))
            .collect();
        assert_eq!(held, [files[0].as_raw_fd(), files[1].as_raw_fd()]);
    }
}
