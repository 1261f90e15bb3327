//! A damaged store is said, not crashed on.
//!
//! LMDB trusts the pages it reads: a page whose node offsets were damaged on disk (a flipped
//! bit, a write the disk tore, an edit by hand) can make a read follow an offset out of the
//! page and out of the map, and the process dies by SIGSEGV or SIGBUS without a word. That
//! would happen in `doctor`, and in the other verbs an operator runs on exactly such a store.
//! So the verbs that read a store directly run in a child forked before any thread exists;
//! the parent waits for it, passes its exit code on, and says a death by SIGSEGV or SIGBUS as
//! the damaged store it is (exit 3, an integrity failure). The child dies with its parent, so
//! killing the `worldd` a caller started stops the verb. `serve` is not forked: a second process
//! would stand between a daemon and its supervisor; it says such a crash from a signal handler
//! instead (`broker_core::store::say_faults_in_store_maps`).

/// Run `verb` in a child process and return its exit code; a crash on a bad memory access is
/// said on stderr and is exit 3. Must be called while this process has one thread.
#[cfg(unix)]
pub fn guarded(verb: &str, run: impl FnOnce() -> i32) -> i32 {
    // SAFETY: getpid cannot fail.
    let parent = unsafe { libc::getpid() };
    // SAFETY: fork in a process with one thread (the caller's contract): the child is a full
    // copy with no lock held by a thread that does not exist there.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        // No child: run here, unguarded, rather than not at all.
        return run();
    }
    if pid == 0 {
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
    128 + signal
}

/// Elsewhere the verb runs unguarded.
#[cfg(not(unix))]
pub fn guarded(_verb: &str, run: impl FnOnce() -> i32) -> i32 {
    run()
}
