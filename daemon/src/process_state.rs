//! What plugin code may break for the whole process, checked each time it returns.
//!
//! Plugins run in the daemon's process. Some of what they can change there is not theirs to
//! change, and the harm lands elsewhere, naming nobody:
//!
//! - descriptors 0, 1 and 2: a `close(2)` (what C "close stdio" helpers do) freed stderr's
//!   number, the next accepted connection took it, and every log line of every episode went to
//!   that client's socket. The log is therefore written to a private close-on-exec copy of
//!   stderr made at start ([`log_destination`]), and a 0, 1 or 2 found closed is put back. One
//!   found open on another file is left to whoever opened it there (a connection, another
//!   call's temporary file, a git pipe: a dup2 over it would send that file's bytes into the
//!   log) and said once;
//! - SIGCHLD ignored, given SA_NOCLDWAIT or a handler that reaps: the kernel (or the handler)
//!   reaps every child, and every wait for a git or ailang child fails with ECHILD, each call's
//!   unit spent;
//! - SIGPIPE back to its default action: a write to a pipe whose reader has gone (stderr into a
//!   collector that stopped, a child's stdin) ends the daemon silently, by a status a
//!   supervisor takes for a clean exit;
//! - the handlers the daemon installed for itself (SIGINT, SIGTERM, SIGHUP for its drain,
//!   SIGABRT for its last line), [`remember`]ed once installed;
//! - SIGXFSZ ignored: after a `setrlimit(RLIMIT_FSIZE)` (meant for a child, set in the daemon)
//!   the store's next commit past that size ended the daemon at once, not a word said. Ignored,
//!   such a write fails with EFBIG and is said where the store's failing writes are;
//! - SIGALRM, SIGVTALRM and SIGPROF: a timer plugin code set (`alarm()`, `setitimer()`) ended
//!   the daemon silently when it fired. The daemon catches them with a handler that says the
//!   first of each in one line and does nothing else;
//! - resource limits (RLIMIT_FSIZE, RLIMIT_NOFILE, RLIMIT_CPU, RLIMIT_AS, RLIMIT_DATA): one
//!   lowered fails the store's writes, the daemon's accepts, its allocations, or ends it by
//!   SIGXCPU. A limit lowered below the highest it has been seen at is put back (the daemon
//!   raises the soft RLIMIT_NOFILE itself once the plugins are loaded; a raise harms nothing);
//! - the umask: one widened or narrowed (`umask(0777)`) changed the mode of every file and
//!   directory the daemon and every other plugin made from then on, for every episode (a
//!   Workspace write made `----------` files). It is noted at start and put back.
//!
//! [`check`] runs after each entry point of a plugin returns (its loading, constructor,
//! preflight, execute, finish): a few `fstat`, `sigaction` and `getrlimit` queries and one
//! `umask` call. What it finds changed it puts back, and says in one ERROR line naming the plugin
//! and the call it had just returned from (another plugin's call running at the same time may be
//! the cause: the line says where it was found).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

/// Descriptors 0–2 as they were at start: the file each named, and a private close-on-exec
/// copy to put back.
struct Standard {
    fd: libc::c_int,
    id: Option<(libc::dev_t, libc::ino_t)>,
    copy: Option<OwnedFd>,
}

static STANDARD: OnceLock<Vec<Standard>> = OnceLock::new();

/// Signal dispositions the daemon relies on, as they must be, and the whole action that
/// puts each back (the daemon's own handler keeps its mask and flags).
static SIGNALS: Mutex<Vec<(libc::c_int, Disposition, Action)>> = Mutex::new(Vec::new());

#[derive(Clone, Copy)]
struct Action(libc::sigaction);

// SAFETY: a sigaction is plain data (a function address, a mask, flags).
unsafe impl Send for Action {}

impl Action {
    /// SIG_DFL or SIG_IGN, no flags, an empty mask.
    fn plain(handler: libc::sighandler_t) -> Action {
        // SAFETY: a zeroed action is valid; its mask is then emptied by sigemptyset.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = handler;
        // SAFETY: `sa_mask` is a valid sigset_t to fill.
        unsafe { libc::sigemptyset(&mut action.sa_mask) };
        Action(action)
    }

    /// The daemon's handler of a timer's signal ([`on_timer`]), restarting what it interrupts.
    fn timer() -> Action {
        let mut action = Action::plain(on_timer as *const () as libc::sighandler_t);
        action.0.sa_flags = libc::SA_RESTART;
        action
    }

    fn install(&self, signal: libc::c_int) {
        // SAFETY: sigaction with a valid action: SIG_DFL, SIG_IGN, or the very action the
        // daemon had installed (whose handler lives as long as the process).
        unsafe { libc::sigaction(signal, &self.0, std::ptr::null_mut()) };
    }
}

/// One check at a time: two calls returning together must not both restore and say one change.
static CHECKING: Mutex<()> = Mutex::new(());
/// The umask at start, which [`restore`] puts back; `None` before [`settle`].
static UMASK: OnceLock<libc::mode_t> = OnceLock::new();
/// A file found on 0–2 and left there, by descriptor: one seen again is not said again.
static LEFT: Mutex<[Option<(libc::dev_t, libc::ino_t)>; 3]> = Mutex::new([None; 3]);

/// What a signal's disposition is, as far as the daemon cares.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Disposition {
    handler: libc::sighandler_t,
    /// SA_NOCLDWAIT (only SIGCHLD's matters) and SA_SIGINFO (which makes `handler` another
    /// function type).
    flags: libc::c_int,
}

const FLAGS: libc::c_int = libc::SA_NOCLDWAIT | libc::SA_SIGINFO;

impl Disposition {
    const DEFAULT: Disposition = Disposition {
        handler: libc::SIG_DFL,
        flags: 0,
    };
    const IGNORE: Disposition = Disposition {
        handler: libc::SIG_IGN,
        flags: 0,
    };

    fn of(signal: libc::c_int) -> Option<(Disposition, libc::sigaction)> {
        // SAFETY: a query only (no new action); `now` is a valid out-pointer.
        unsafe {
            let mut now: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut now) != 0 {
                return None;
            }
            Some((
                Disposition {
                    handler: now.sa_sigaction,
                    flags: now.sa_flags & FLAGS,
                },
                now,
            ))
        }
    }

    fn said(self) -> String {
        let what = match self.handler {
            libc::SIG_DFL => "its default action (SIG_DFL)".to_owned(),
            libc::SIG_IGN => "ignored (SIG_IGN)".to_owned(),
            h if h == on_timer as *const () as libc::sighandler_t => {
                "the daemon's handler".to_owned()
            }
            _ => "a handler of the plugin's".to_owned(),
        };
        if self.flags & libc::SA_NOCLDWAIT != 0 {
            format!("{what} with SA_NOCLDWAIT")
        } else {
            what
        }
    }
}

/// Called once, first thing (before any thread and any plugin): descriptors 0–2 that are
/// closed are opened on `/dev/null` (so that no file the daemon opens takes their number), a
/// copy of each is kept, and SIGCHLD and SIGPIPE are set as the daemon needs them: SIGCHLD
/// default (an ignored one, inherited across `exec`, would fail every wait for a child),
/// SIGPIPE ignored (as Rust's start-up sets it), SIGXFSZ ignored; SIGALRM, SIGVTALRM and SIGPROF
/// caught by [`on_timer`] where they are at their default; and the resource limits and the
/// umask noted.
pub fn settle() {
    STANDARD.get_or_init(|| {
        (0..3)
            .map(|fd| {
                if id_of(fd).is_none() {
                    open_null_at(fd);
                }
                // SAFETY: F_DUPFD_CLOEXEC makes a new descriptor (3 or above) this code owns.
                let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
                Standard {
                    fd,
                    id: id_of(fd),
                    // SAFETY: `copy`, when valid, was just made and is owned by nothing else.
                    copy: (copy >= 0).then(|| unsafe { OwnedFd::from_raw_fd(copy) }),
                }
            })
            .collect()
    });
    let stderr_copy = STANDARD
        .get()
        .and_then(|all| all.get(2)?.copy.as_ref())
        .map_or(2, AsRawFd::as_raw_fd);
    TIMER_LOG_FD.store(stderr_copy, Ordering::SeqCst);
    let mut signals = SIGNALS.lock().unwrap_or_else(PoisonError::into_inner);
    for (signal, must) in [
        (libc::SIGCHLD, Disposition::DEFAULT),
        (libc::SIGPIPE, Disposition::IGNORE),
        (libc::SIGXFSZ, Disposition::IGNORE),
    ] {
        let action = Action::plain(must.handler);
        if Disposition::of(signal).is_none_or(|(now, _)| now != must) {
            action.install(signal);
        }
        if !signals.iter().any(|(s, _, _)| *s == signal) {
            signals.push((signal, must, action));
        }
    }
    for signal in TIMERS {
        // One ignored or caught already (by whoever started the daemon, a preloaded profiler)
        // is left as it is, and kept so.
        if Disposition::of(signal).is_some_and(|(now, _)| now == Disposition::DEFAULT) {
            Action::timer().install(signal);
        }
        if let Some((now, action)) = Disposition::of(signal) {
            if !signals.iter().any(|(s, _, _)| *s == signal) {
                signals.push((signal, now, Action(action)));
            }
        }
    }
    drop(signals);
    UMASK.get_or_init(|| {
        // umask(2) only sets, returning the old value: read, then set back at once. Before any
        // thread, so nothing is made under the interim 0077 (which only narrows, in any case).
        // SAFETY: umask cannot fail and touches nothing but the process's mask.
        unsafe {
            let was = libc::umask(0o077);
            libc::umask(was);
            was
        }
    });
    let mut limits = LIMITS.lock().unwrap_or_else(PoisonError::into_inner);
    if limits.is_empty() {
        *limits = WATCHED
            .iter()
            .filter_map(|watched| Some((watched.resource, limit_of(watched.resource)?)))
            .collect();
    }
}

/// The signals a timer sends: SIGALRM (`alarm()`, `setitimer(ITIMER_REAL)`), SIGVTALRM and
/// SIGPROF (`setitimer`'s other two). Their default action ends the process.
const TIMERS: [libc::c_int; 3] = [libc::SIGALRM, libc::SIGVTALRM, libc::SIGPROF];

/// Where [`on_timer`] writes: the private copy of stderr, set by [`settle`].
static TIMER_LOG_FD: AtomicI32 = AtomicI32::new(2);
/// Whether each of [`TIMERS`] has been said: a timer that repeats is said once.
static TIMER_SAID: [AtomicBool; 3] = [
    AtomicBool::new(false),
    AtomicBool::new(false),
    AtomicBool::new(false),
];

/// The line for the first arrival of each of [`TIMERS`].
const TIMER_LINES: [&str; 3] = [
    "worldd: SIGALRM arrived: plugin code or a library set a timer (alarm(), setitimer()); its default action would have ended the process without a word, so the daemon catches it and does nothing (said once; docs/handler-authors.md §9)\n",
    "worldd: SIGVTALRM arrived: plugin code or a library set a timer (setitimer(ITIMER_VIRTUAL)); its default action would have ended the process without a word, so the daemon catches it and does nothing (said once; docs/handler-authors.md §9)\n",
    "worldd: SIGPROF arrived: plugin code or a library set a timer (setitimer(ITIMER_PROF)); its default action would have ended the process without a word, so the daemon catches it and does nothing (said once; docs/handler-authors.md §9)\n",
];

/// The daemon's handler of [`TIMERS`]: the first of each is said, then nothing. Only atomics
/// and `write`, which a signal handler may call.
extern "C" fn on_timer(signal: libc::c_int) {
    let Some(i) = TIMERS.iter().position(|&s| s == signal) else {
        return;
    };
    if TIMER_SAID[i].swap(true, Ordering::SeqCst) {
        return;
    }
    let line = TIMER_LINES[i].as_bytes();
    // SAFETY: write(2) of a static buffer; errno is saved and put back, as a handler must.
    unsafe {
        let errno = *libc::__errno_location();
        libc::write(
            TIMER_LOG_FD.load(Ordering::SeqCst),
            line.as_ptr().cast(),
            line.len(),
        );
        *libc::__errno_location() = errno;
    }
}

/// `getrlimit`'s resource type, which glibc declares apart.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
type Resource = libc::__rlimit_resource_t;
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
type Resource = libc::c_int;

/// A resource limit the daemon relies on: its name, and what lowering it does.
struct Watched {
    resource: Resource,
    name: &'static str,
    harm: &'static str,
}

const WATCHED: [Watched; 5] = [
    Watched {
        resource: libc::RLIMIT_FSIZE,
        name: "RLIMIT_FSIZE",
        harm:
            "which fails every write of the daemon's past that size, the store's commits among them",
    },
    Watched {
        resource: libc::RLIMIT_NOFILE,
        name: "RLIMIT_NOFILE",
        harm: "which fails the daemon's accepts and opens with EMFILE",
    },
    Watched {
        resource: libc::RLIMIT_CPU,
        name: "RLIMIT_CPU",
        harm: "which ends the daemon by SIGXCPU once it has used that much CPU time",
    },
    Watched {
        resource: libc::RLIMIT_AS,
        name: "RLIMIT_AS",
        harm: "which fails the daemon's allocations (an abort)",
    },
    Watched {
        resource: libc::RLIMIT_DATA,
        name: "RLIMIT_DATA",
        harm: "which fails the daemon's allocations (an abort)",
    },
];

/// The highest each [`WATCHED`] limit has been seen at (soft, hard), from [`settle`] on.
static LIMITS: Mutex<Vec<(Resource, (libc::rlim_t, libc::rlim_t))>> = Mutex::new(Vec::new());

/// A resource's limit now: (soft, hard).
fn limit_of(resource: Resource) -> Option<(libc::rlim_t, libc::rlim_t)> {
    let mut now = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct this code owns.
    (unsafe { libc::getrlimit(resource, &mut now) } == 0).then_some((now.rlim_cur, now.rlim_max))
}

/// Set a resource's limit; whether it took.
fn set_limit(resource: Resource, (soft, hard): (libc::rlim_t, libc::rlim_t)) -> bool {
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads the struct this code owns.
    unsafe { libc::setrlimit(resource, &limit) == 0 }
}

/// A limit as said: a number, or `unlimited`.
fn said_limit(value: libc::rlim_t) -> String {
    if value == libc::RLIM_INFINITY {
        "unlimited".to_owned()
    } else {
        value.to_string()
    }
}

/// Put back the [`WATCHED`] limits that were lowered; one phrase each.
fn restore_limits() -> Vec<String> {
    let mut changes = Vec::new();
    let mut limits = LIMITS.lock().unwrap_or_else(PoisonError::into_inner);
    for (resource, was) in limits.iter_mut() {
        let Some(now) = limit_of(*resource) else {
            continue;
        };
        if now.0 >= was.0 && now.1 >= was.1 {
            // Unchanged or raised: kept as the limit to hold from now on.
            *was = now;
            continue;
        }
        let Some(watched) = WATCHED.iter().find(|w| w.resource == *resource) else {
            continue;
        };
        // A hard limit lowered cannot be raised again without privilege: then as much of the
        // soft one as the hard one allows.
        let put_back = set_limit(*resource, *was);
        if !put_back {
            set_limit(*resource, (was.0.min(now.1), now.1));
        }
        let what = format!(
            "{} was lowered to {}/{} (soft/hard) from {}/{}, {}",
            watched.name,
            said_limit(now.0),
            said_limit(now.1),
            said_limit(was.0),
            said_limit(was.1),
            watched.harm
        );
        changes.push(if put_back {
            what
        } else {
            format!("{what}, and could not be put back in full (a hard limit is raised again only with privilege)")
        });
        if let Some(in_force) = limit_of(*resource) {
            *was = in_force;
        }
    }
    changes
}

/// Where the log is written: the private copy of stderr made by [`settle`], which no
/// `close(2)` by plugin code takes away. `None` before `settle`, or where it had no copy.
pub fn log_destination() -> Option<&'static std::fs::File> {
    static FILE: OnceLock<Option<std::fs::File>> = OnceLock::new();
    FILE.get_or_init(|| {
        let stderr = STANDARD.get()?.get(2)?.copy.as_ref()?;
        stderr.try_clone().ok().map(std::fs::File::from)
    })
    .as_ref()
}

/// The raw descriptor of [`log_destination`], for a signal handler's `write`; 2 without one.
pub fn log_fd() -> libc::c_int {
    log_destination().map_or(2, AsRawFd::as_raw_fd)
}

/// Keep `signals` as they are now: the daemon installed their handlers itself.
pub fn remember(signals: &[libc::c_int]) {
    let mut known = SIGNALS.lock().unwrap_or_else(PoisonError::into_inner);
    for &signal in signals {
        let Some((now, action)) = Disposition::of(signal) else {
            continue;
        };
        known.retain(|(s, _, _)| *s != signal);
        known.push((signal, now, Action(action)));
    }
}

/// After plugin code returned: put back what it changed of descriptors 0–2, of the signal
/// dispositions, of the resource limits and of the umask the daemon relies on, and say it in one
/// ERROR line naming `who`, the plugin's call that had just returned ("plugin git's execute
/// (Git.Commit)").
pub fn check(who: impl FnOnce() -> String) {
    let changes = restore();
    if !changes.is_empty() {
        tracing::error!("{}", line(&who(), &changes));
    }
}

fn line(who: &str, changes: &[String]) -> String {
    format!(
        "plugin code changed what the whole process relies on, found when {who} returned: {}; the daemon put it back (a plugin must leave descriptors 0-2, signal dispositions, resource limits and the umask alone: docs/handler-authors.md §9)",
        changes.join("; ")
    )
}

/// What was changed and is now put back, one phrase each.
fn restore() -> Vec<String> {
    let _one = CHECKING.lock().unwrap_or_else(PoisonError::into_inner);
    let mut changes = Vec::new();
    for standard in STANDARD.get().map(Vec::as_slice).unwrap_or_default() {
        let fd = standard.fd;
        let mut now = id_of(fd);
        if now == standard.id {
            continue;
        }
        let name = ["stdin", "stdout", "stderr"][fd as usize];
        if now.is_none() {
            match put_back(standard) {
                Placed::Put => {
                    LEFT.lock().unwrap_or_else(PoisonError::into_inner)[fd as usize] = None;
                    changes.push(format!("descriptor {fd} ({name}) was closed"));
                    continue;
                }
                Placed::Failed => {
                    changes.push(format!(
                        "descriptor {fd} ({name}) was closed, and could not be put back"
                    ));
                    continue;
                }
                // Another thread opened a file onto the number since it was seen closed.
                Placed::Taken => now = id_of(fd),
            }
            if now.is_none() || now == standard.id {
                continue;
            }
        }
        // Open on another file: as a rule one the daemon opened onto the number plugin code
        // had just freed (an accepted connection, another call's temporary file, a git pipe,
        // a directory handle). A dup2 over it would take it from its owner: a client cut off
        // and its answer written into the log, a file's content written into the log and the
        // file left empty. It is left (the log has its own copy, and the daemon's children
        // are given their stderr), and said once.
        let mut left = LEFT.lock().unwrap_or_else(PoisonError::into_inner);
        let seen = &mut left[fd as usize];
        if *seen != now {
            *seen = now;
            let holder = if is_socket(fd) {
                "a socket holds its number now (a connection accepted meanwhile, as a rule)"
            } else {
                "another file holds its number now (one the daemon opened meanwhile, as a rule: another call's file, pipe or directory)"
            };
            changes.push(format!(
                "descriptor {fd} ({name}) was closed or replaced, and {holder}; it is left as it is, and the log goes to its own copy"
            ));
        }
    }
    let signals = SIGNALS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    for (signal, must, action) in signals {
        let Some((now, _)) = Disposition::of(signal) else {
            continue;
        };
        if now == must {
            continue;
        }
        action.install(signal);
        changes.push(format!(
            "{} was set to {}{}",
            name_of(signal),
            now.said(),
            why(signal, now)
        ));
    }
    changes.extend(restore_limits());
    changes.extend(restore_umask());
    changes
}

/// Put back the umask noted at start, if it changed; the phrase that says so. One `umask` call
/// both sets and reads it (no `/proc` read each call); the caller holds [`CHECKING`], so two
/// checks never take each other's value for the plugin's.
fn restore_umask() -> Option<String> {
    let expected = *UMASK.get()?;
    // SAFETY: umask cannot fail and touches nothing but the process's mask.
    let was = unsafe { libc::umask(expected) };
    (was != expected).then(|| said_umask(was, expected))
}

fn said_umask(was: libc::mode_t, expected: libc::mode_t) -> String {
    format!(
        "the umask was set to {was:04o} from {expected:04o}, which changes the mode of every file and directory the daemon and every plugin make, for every episode"
    )
}

/// What the change to `now` would have done, for the signals whose harm is not plain (a
/// default action that ends the process harms only at its default).
fn why(signal: libc::c_int, now: Disposition) -> &'static str {
    let default = now.handler == libc::SIG_DFL;
    match signal {
        libc::SIGCHLD => {
            ", which makes the daemon's waits for its children (git, ailang) fail with ECHILD"
        }
        libc::SIGPIPE if default => {
            ", which ends the daemon without a word on a write to a closed pipe"
        }
        libc::SIGXFSZ if default => {
            ", which ends the daemon without a word on a write past a file-size limit"
        }
        libc::SIGALRM | libc::SIGVTALRM | libc::SIGPROF if default => {
            ", which ends the daemon without a word when a timer fires"
        }
        _ => "",
    }
}

fn name_of(signal: libc::c_int) -> &'static str {
    match signal {
        libc::SIGCHLD => "SIGCHLD",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGALRM => "SIGALRM",
        libc::SIGVTALRM => "SIGVTALRM",
        libc::SIGPROF => "SIGPROF",
        _ => "a signal",
    }
}

/// The file `fd` names (device, inode), or `None` when it is closed.
fn id_of(fd: libc::c_int) -> Option<(libc::dev_t, libc::ino_t)> {
    // SAFETY: fstat into a zeroed struct, a valid out-pointer.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        (libc::fstat(fd, &mut st) == 0).then_some((st.st_dev, st.st_ino))
    }
}

/// Whether `fd` is a socket.
fn is_socket(fd: libc::c_int) -> bool {
    // SAFETY: fstat into a zeroed struct, a valid out-pointer.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(fd, &mut st) == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFSOCK
    }
}

/// What [`put_back`] did.
enum Placed {
    /// The number holds the daemon's copy again.
    Put,
    /// Another file took the number before it could be put back: left to its owner.
    Taken,
    /// Nothing could be put there.
    Failed,
}

/// Put `standard`'s copy (or `/dev/null`, without one) back on its number, only while that
/// number is free: `F_DUPFD` takes the lowest free number from it up, so a file another thread
/// opened there meanwhile is never replaced, as a `dup2` would replace it.
fn put_back(standard: &Standard) -> Placed {
    let fd = standard.fd;
    let (from, null) = match &standard.copy {
        Some(copy) => (copy.as_raw_fd(), None),
        None => {
            // SAFETY: open of a constant C string; the descriptor is owned here.
            let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
            if null < 0 {
                return Placed::Failed;
            }
            if null == fd {
                // Landed on `fd` itself: it must be inherited as 0-2 are.
                // SAFETY: fcntl on the descriptor just opened.
                unsafe {
                    let flags = libc::fcntl(fd, libc::F_GETFD);
                    libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC);
                }
                return Placed::Put;
            }
            (null, Some(null))
        }
    };
    // SAFETY: F_DUPFD of a descriptor this module owns makes a new one (inherited, as 0-2
    // must be); closing the null just opened, or a copy that missed `fd`, which nothing else
    // holds.
    unsafe {
        let got = libc::fcntl(from, libc::F_DUPFD, fd);
        if let Some(null) = null {
            libc::close(null);
        }
        if got == fd {
            Placed::Put
        } else if got >= 0 {
            libc::close(got);
            Placed::Taken
        } else {
            Placed::Failed
        }
    }
}

/// Open `/dev/null` on `fd`; whether it is open now.
fn open_null_at(fd: libc::c_int) -> bool {
    // SAFETY: open of a constant C string; dup2 and close of descriptors just made.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if null < 0 {
            return false;
        }
        if null == fd {
            // Landed on `fd` itself: it must be inherited as 0–2 are.
            let flags = libc::fcntl(fd, libc::F_GETFD);
            libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC);
            return true;
        }
        let done = libc::dup2(null, fd) >= 0;
        libc::close(null);
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_the_call_and_each_change() {
        assert_eq!(
            line(
                "plugin rogue's execute (Rogue.Read)",
                &["descriptor 2 (stderr) was closed".to_owned(), format!("SIGCHLD was set to ignored (SIG_IGN){}", why(libc::SIGCHLD, Disposition::IGNORE))]
            ),
            "plugin code changed what the whole process relies on, found when plugin rogue's execute (Rogue.Read) returned: descriptor 2 (stderr) was closed; SIGCHLD was set to ignored (SIG_IGN), which makes the daemon's waits for its children (git, ailang) fail with ECHILD; the daemon put it back (a plugin must leave descriptors 0-2, signal dispositions, resource limits and the umask alone: docs/handler-authors.md §9)"
        );
    }
}
