//! Ctrl-C, SIGTERM and a closed terminal's SIGHUP held off while a verb makes something that
//! must be made whole or not at all (a store with its credential, a worktree with its
//! credential, a credential with its file): one that arrives meanwhile takes effect once the
//! hold is dropped.
//!
//! Held by a handler that notes the signal, not by the signal mask: a mask is per thread, and
//! by the time a verb holds them it has threads (the store's, a plugin's) that would take a
//! signal sent to the process with its usual effect, ending it half-way.

use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

/// The signals held: those an operator, a supervisor or a terminal sends to stop a verb.
pub(crate) const HELD: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Holds in force.
static HOLDS: AtomicUsize = AtomicUsize::new(0);
/// The signal that arrived while held (0: none).
static PENDING: AtomicI32 = AtomicI32::new(0);

/// SIGINT, SIGTERM and SIGHUP held while this lives: one that arrives meanwhile takes its
/// usual effect (the process ends of it) once the hold is dropped.
pub(crate) struct HeldSignals {
    /// What each signal of [`HELD`] did before, restored on drop.
    before: [libc::sigaction; 3],
}

impl HeldSignals {
    pub(crate) fn hold() -> HeldSignals {
        HOLDS.fetch_add(1, Ordering::SeqCst);
        // SAFETY: the action structs are plain values initialised before use; `noted` is
        // async-signal-safe (atomics, signal, raise).
        unsafe {
            let mut before: [libc::sigaction; 3] = std::mem::zeroed();
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = noted as extern "C" fn(libc::c_int) as libc::sighandler_t;
            // Restarted: the writes and waits under way go on as if nothing came.
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            for (signal, old) in HELD.iter().zip(before.iter_mut()) {
                libc::sigaction(*signal, std::ptr::null(), old);
                // One this process was started ignoring (`nohup`, a shell's background job)
                // stays ignored: held, it would take effect at the end.
                if old.sa_sigaction != libc::SIG_IGN {
                    libc::sigaction(*signal, &action, std::ptr::null_mut());
                }
            }
            HeldSignals { before }
        }
    }

    /// Hold them from `command`'s process too, while it runs: a Ctrl-C at the terminal or
    /// its hangup reaches every process of the terminal's foreground group, so a git run while
    /// they are held would otherwise stop half-way. Its own process group takes it out of
    /// that group (the handler does not outlive exec), and the blocked mask keeps off what is
    /// sent to the group it leaves behind.
    pub(crate) fn also_in(&self, command: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        command.process_group(0);
        // SAFETY: between fork and exec only sigemptyset, sigaddset and pthread_sigmask run,
        // all async-signal-safe, on a set local to the closure.
        unsafe {
            command.pre_exec(|| {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                for signal in HELD {
                    libc::sigaddset(&mut set, signal);
                }
                libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
                Ok(())
            });
        }
    }
}

impl Drop for HeldSignals {
    fn drop(&mut self) {
        HOLDS.fetch_sub(1, Ordering::SeqCst);
        // SAFETY: restores the actions `hold` saved.
        unsafe {
            for (signal, old) in HELD.iter().zip(self.before.iter()) {
                libc::sigaction(*signal, old, std::ptr::null_mut());
            }
        }
        if HOLDS.load(Ordering::SeqCst) == 0 {
            let signal = PENDING.swap(0, Ordering::SeqCst);
            if signal != 0 {
                take_effect(signal);
            }
        }
    }
}

/// The handler while held: note the signal, or, if the hold ended meanwhile, let it act.
/// Noted before the holds are read, so that a drop racing it sees it.
extern "C" fn noted(signal: libc::c_int) {
    PENDING.store(signal, Ordering::SeqCst);
    if HOLDS.load(Ordering::SeqCst) == 0 {
        take_effect(signal);
    }
}

/// End the process of `signal`, as it would have without the hold.
fn take_effect(signal: libc::c_int) {
    // SAFETY: signal and raise are async-signal-safe; the default action of these signals
    // ends the whole process.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
}
