//! A damaged store is said, not crashed on.
//!
//! LMDB trusts the pages it reads: a page whose node offsets were damaged on disk (a flipped
//! bit, a write the disk tore, an edit by hand) can make a read follow an offset out of the
//! page and out of the map, and the process dies by SIGSEGV or SIGBUS without a word. That
//! would happen in `doctor`, and in the other verbs an operator runs on exactly such a store.
//! So the verbs that read a store directly run in a child forked before any thread exists;
//! the parent waits for it, passes its exit code on, and says a death by SIGSEGV or SIGBUS as
//! the damaged store it is (exit 3, an integrity failure). The child dies with its parent, so
//! killing the `worldd` a caller started (SIGKILL) stops the verb. SIGINT, SIGTERM and SIGHUP
//! the parent passes on to the child instead of dying of them: the child decides when they
//! take effect (`session new` and `session mint` hold them until the credential is written),
//! and the parent then dies of the same signal. `serve` is not forked: a second process
//! would stand between a daemon and its supervisor; it says such a crash from a signal handler
//! instead (`broker_core::store::say_faults_in_store_maps`).

/// Run `verb` in a child process and return its exit code; a crash on a bad memory access is
/// said on stderr and is exit 3. Must be called while this process has one thread.
#[cfg(unix)]
pub fn guarded(verb: &str, run: impl FnOnce() -> i32) -> i32 {
    use super::held_signals::HELD;
    use std::sync::atomic::Ordering;
    // SAFETY: getpid cannot fail.
    let parent = unsafe { libc::getpid() };
    // Blocked across the fork (this process has one thread, so its mask is the process's),
    // so that one arriving before the parent passes them on is passed on: not fatal to the
    // parent alone, which would SIGKILL the child mid-way.
    let unblocked = block(HELD);
    // SAFETY: fork in a process with one thread (the caller's contract): the child is a full
    // copy with no lock held by a thread that does not exist there.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        // No child: run here, unguarded, rather than not at all.
        restore(&unblocked);
        return run();
    }
    if pid == 0 {
        // The child takes these signals as any process does, from here on.
        restore(&unblocked);
        // The verb dies with the process its caller knows: a backup whose `worldd` a script
        // kills must not go on copying unseen.
        #[cfg(target_os = "linux")]
        // SAFETY: prctl on this process alone; getppid cannot fail.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() != parent {
                libc::_exit(1);
            }
        }
        let code = run();
        std::process::exit(code);
    }
    CHILD.store(pid, Ordering::SeqCst);
    for signal in HELD {
        // SAFETY: `pass_on` is async-signal-safe (an atomic load and kill); the action struct
        // is initialised before use.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = pass_on as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            // One this process was started ignoring (`nohup`) stays ignored, here and in the
            // child (which inherited that).
            let mut before: libc::sigaction = std::mem::zeroed();
            libc::sigaction(signal, std::ptr::null(), &mut before);
            if before.sa_sigaction != libc::SIG_IGN {
                libc::sigaction(signal, &action, std::ptr::null_mut());
            }
        }
    }
    restore(&unblocked);
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child; `status` is a valid out-pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return 1;
        }
    }
    if libc::WIFEXITED(status) {
        return libc::WEXITSTATUS(status);
    }
    let signal = libc::WTERMSIG(status);
    if matches!(signal, libc::SIGSEGV | libc::SIGBUS) {
        let name = if signal == libc::SIGSEGV {
            "SIGSEGV"
        } else {
            "SIGBUS"
        };
        errln!(
            "{}",
            broker_core::store::crashed_reading(
                verb,
                name,
                "; restore the store from a backup (worldd backup makes one), and keep this copy for inspection"
            )
        );
        return 3;
    }
    if HELD.contains(&signal) {
        // Stopped as asked: die of the same signal, as the caller's shell expects of a verb
        // it interrupted.
        // SAFETY: restores the default action of a signal this process handles, then raises it.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            libc::raise(signal);
        }
    }
    128 + signal
}

/// Block `signals` in this thread: the mask before.
#[cfg(unix)]
fn block(signals: [libc::c_int; 3]) -> libc::sigset_t {
    // SAFETY: the sets are plain values initialised by sigemptyset before use, and
    // pthread_sigmask only reads `set` and writes `old`.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigemptyset(&mut old);
        for signal in signals {
            libc::sigaddset(&mut set, signal);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        old
    }
}

/// Restore the mask `block` returned; a signal that came meanwhile is delivered now.
#[cfg(unix)]
fn restore(old: &libc::sigset_t) {
    // SAFETY: `old` is a mask pthread_sigmask wrote.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, old, std::ptr::null_mut());
    }
}

/// The child the parent passes SIGINT, SIGTERM and SIGHUP on to.
#[cfg(unix)]
static CHILD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

#[cfg(unix)]
extern "C" fn pass_on(signal: libc::c_int) {
    let child = CHILD.load(std::sync::atomic::Ordering::SeqCst);
    if child > 0 {
        // SAFETY: kill is async-signal-safe; `child` is this process's unreaped child.
        unsafe {
            libc::kill(child, signal);
        }
    }
}

/// Elsewhere the verb runs unguarded.
#[cfg(not(unix))]
pub fn guarded(_verb: &str, run: impl FnOnce() -> i32) -> i32 {
    run()
}
