//! A serving daemon that plugin code or a library ends with `exit()`.
//!
//! Plugins run in the daemon's process, and `exit()` is what many C libraries call on a fatal
//! error (and what a careless plugin calls). Without a word from the daemon, the process then
//! ended with the status the caller chose, `exit(0)` looking like a clean shutdown to a
//! supervisor (`Restart=on-failure` left the service down) and `exit(3)` like an integrity
//! failure, with nothing in the log. While [`arm`]ed (from before the plugins load until
//! `serve` returns on its own), an exit handler says so in one ERROR line and ends the process
//! with [`EXIT_CALLED`] instead.
//!
//! The line is written by a thread of the daemon's own, started when the handler is armed: the
//! thread that called `exit()` has had its thread-locals destroyed by then (glibc runs their
//! destructors first), and the log writer needs its own.
//!
//! `abort()` (what plugin code, a C library, or Rust itself on a failed allocation calls) ends
//! the process by SIGABRT: a supervisor sees that much, the log nothing. While armed, a
//! SIGABRT handler writes one line of its own to stderr, then lets the signal end the process
//! as it would have. A handler may only write a buffer made beforehand, so the line says who
//! was ended but not what it was doing.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Condvar, Mutex, Once, OnceLock, PoisonError};
use std::time::Duration;

/// The exit status of a daemon that plugin code or a library ended with `exit()` (sysexits'
/// `EX_SOFTWARE`): never 0, which a supervisor takes for a clean shutdown, nor the CLI's 1–3.
pub const EXIT_CALLED: i32 = 70;

/// How long the exit handler waits for the line to be written before it ends the process
/// without it (a log writer stuck on a full pipe must not keep a dead daemon alive).
const SAY_WITHIN: Duration = Duration::from_secs(2);

/// Set while `serve` runs; cleared by its own way out ([`Armed`]'s drop).
static ARMED: AtomicBool = AtomicBool::new(false);
/// The process that armed the handler: a child forked by plugin code that calls `exit()`
/// ends as it asked (it is not the daemon).
static PID: AtomicI32 = AtomicI32::new(0);
/// Who was ended, as the line says it.
static WHO: Mutex<Who> = Mutex::new(Who::Daemon);

/// What an `exit()` ends: the serving daemon, or a command that loads plugins and reports.
#[derive(Debug, Clone, Copy)]
pub enum Who {
    Daemon,
    /// The command as typed, `worldd handlers`.
    Command(&'static str),
}

impl Who {
    fn name(self) -> &'static str {
        match self {
            Who::Daemon => "the daemon",
            Who::Command(c) => c,
        }
    }

    /// What status 0 would have told whoever waits for it.
    fn zero_reads_as(self) -> &'static str {
        match self {
            Who::Daemon => "a clean shutdown",
            Who::Command(_) => "success",
        }
    }
}
/// What it is doing, as the line says it ("while the daemon …").
static DOING: Mutex<String> = Mutex::new(String::new());
/// An exit to report, handed from the exit handler to the reporting thread, and whether the
/// line was written.
static REPORT: Mutex<Report> = Mutex::new(Report {
    asked: None,
    said: false,
});
static ASKED: Condvar = Condvar::new();
static SAID: Condvar = Condvar::new();

struct Report {
    /// The call and the status it was called with (`None` where the C library does not tell
    /// it).
    asked: Option<(Call, Option<i32>)>,
    said: bool,
}

/// Which way out plugin code took.
#[derive(Debug, Clone, Copy)]
enum Call {
    Exit,
    /// C11's `quick_exit`, which runs `at_quick_exit` handlers and no `atexit` one.
    QuickExit,
}

/// The daemon's own way out: while this lives, an `exit()` by anyone else is reported and
/// replaced by [`EXIT_CALLED`]. Dropped when `serve` returns, before the process exits with
/// the status it chose.
#[derive(Debug)]
pub struct Armed(());

impl Drop for Armed {
    fn drop(&mut self) {
        ARMED.store(false, Ordering::SeqCst);
    }
}

/// Arm the exit handler for the daemon; `doing` is what it does now ([`doing`]).
pub fn arm(doing: &str) -> Armed {
    arm_for(Who::Daemon, doing)
}

/// Arm the exit handler for `who` (a command that loads plugins, `worldd handlers`: an
/// `exit(0)` in a library it loads would otherwise end it with 0 and half its report unsaid,
/// a success to a script). The handler is registered, and the reporting thread started, once
/// per process. Where neither can be (no thread), `exit()` is left as it was, and that is said
/// once.
pub fn arm_for(who: Who, doing: &str) -> Armed {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        let reporter = std::thread::Builder::new()
            .name("worldd-exit-watch".into())
            .spawn(report_exits);
        if let Err(e) = reporter {
            tracing::warn!(
                "an exit() called by plugin code will not be reported: no thread to report it ({e})"
            );
            return;
        }
        if !register() {
            tracing::warn!(
                "an exit() called by plugin code will not be reported: the C library refused an exit handler"
            );
        }
        if !register_quick() {
            tracing::warn!(
                "a quick_exit() called by plugin code will not be reported: the C library refused an at_quick_exit handler"
            );
        }
        ABORT_LINE.get_or_init(|| abort_line(who));
        LOG_FD.store(crate::process_state::log_fd(), Ordering::SeqCst);
        say_aborts();
        // The daemon's own SIGABRT handler: plugin code that replaces it is put back.
        crate::process_state::remember(&[libc::SIGABRT]);
    });
    // SAFETY: getpid has no preconditions.
    PID.store(unsafe { libc::getpid() }, Ordering::SeqCst);
    *WHO.lock().unwrap_or_else(PoisonError::into_inner) = who;
    self::doing(doing);
    ARMED.store(true, Ordering::SeqCst);
    Armed(())
}

/// Say what the daemon does from now on, as the line would end "while the daemon {what}".
pub fn doing(what: &str) {
    let mut now = DOING.lock().unwrap_or_else(PoisonError::into_inner);
    now.clear();
    now.push_str(what);
}

/// The reporting thread: waits for an exit to report, logs it, says it did. The line is
/// written without holding [`REPORT`]: a write stuck on a full stderr would otherwise keep the
/// exit handler from taking the lock back when its wait runs out, and the process alive.
fn report_exits() {
    let (call, asked) = {
        let mut report = REPORT.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(asked) = report.asked {
                break asked;
            }
            report = ASKED.wait(report).unwrap_or_else(PoisonError::into_inner);
        }
    };
    let doing = DOING.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let who = *WHO.lock().unwrap_or_else(PoisonError::into_inner);
    tracing::error!("{}", line(call, asked, who, &doing));
    REPORT.lock().unwrap_or_else(PoisonError::into_inner).said = true;
    SAID.notify_all();
}

/// The line an `exit(asked)` (or `quick_exit`) gets while `who` is `doing` something.
fn line(call: Call, asked: Option<i32>, who: Who, doing: &str) -> String {
    let name = match call {
        Call::Exit => "exit",
        Call::QuickExit => "quick_exit",
    };
    let (call, instead) = match asked {
        Some(0) => (
            format!("{name}(0)"),
            format!(" instead of 0, which would read as {}", who.zero_reads_as()),
        ),
        Some(s) => (format!("{name}({s})"), format!(" instead of {s}")),
        None => (format!("{name}()"), String::new()),
    };
    format!(
        "{call} was called by plugin code or a library while {who} {doing}; {who} did not choose to stop, so it ends with status {EXIT_CALLED}{instead}",
        who = who.name()
    )
}

/// Where the SIGABRT line is written: the log's descriptor, read before the handler is armed.
static LOG_FD: AtomicI32 = AtomicI32::new(2);

/// The line a SIGABRT gets, made when the handler is armed ([`say_aborts`]).
static ABORT_LINE: OnceLock<Vec<u8>> = OnceLock::new();

fn abort_line(who: Who) -> Vec<u8> {
    format!(
        "worldd: abort() was called by plugin code or a library while {who} ran (a failure said just above, if any, is why); {who} did not choose to stop, so it ends by SIGABRT\n",
        who = who.name()
    )
    .into_bytes()
}

/// Install the SIGABRT handler, unless another is installed already (a plugin's or an embedding
/// program's: left to it).
fn say_aborts() {
    // SAFETY: sigaction with a zeroed, then filled, action struct and valid pointers; the
    // handler is an `extern "C"` function of the signature a plain handler has.
    unsafe {
        let mut previous: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGABRT, std::ptr::null(), &mut previous) != 0
            || previous.sa_sigaction != libc::SIG_DFL
        {
            return;
        }
        let mut ours: libc::sigaction = std::mem::zeroed();
        ours.sa_sigaction = on_abort as *const () as usize;
        libc::sigemptyset(&mut ours.sa_mask);
        libc::sigaction(libc::SIGABRT, &ours, std::ptr::null_mut());
    }
}

/// Write the line (when armed, in the process that armed it), then end the process by the
/// signal: the default action is restored and the signal raised again, pending until this
/// returns (a `kill -ABRT` too, which nothing else would repeat). Only atomics, `write`,
/// `sigaction` and `raise`, which a signal handler may call.
extern "C" fn on_abort(signal: libc::c_int) {
    // SAFETY: getpid has no preconditions and is async-signal-safe.
    let this = unsafe { libc::getpid() };
    if ARMED.load(Ordering::SeqCst) && PID.load(Ordering::SeqCst) == this {
        if let Some(line) = ABORT_LINE.get() {
            // To the log's own copy of stderr: plugin code may have closed descriptor 2.
            // SAFETY: write(2) of a buffer that lives as long as the process.
            unsafe {
                libc::write(
                    LOG_FD.load(Ordering::SeqCst),
                    line.as_ptr().cast(),
                    line.len(),
                )
            };
        }
    }
    // SAFETY: sigaction with a zeroed struct (SIG_DFL) and raise are async-signal-safe.
    unsafe {
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut dfl.sa_mask);
        libc::sigaction(signal, &dfl, std::ptr::null_mut());
        libc::raise(signal);
    }
}

/// The exit handler's work: nothing unless armed in this process; else the line, then the
/// process ended with [`EXIT_CALLED`]. Never unwinds (it runs inside `exit()`).
fn exiting(call: Call, asked: Option<i32>) {
    // SAFETY: getpid has no preconditions.
    let this = unsafe { libc::getpid() };
    if !ARMED.load(Ordering::SeqCst) || PID.load(Ordering::SeqCst) != this {
        return;
    }
    if let Ok(mut report) = REPORT.lock() {
        report.asked = Some((call, asked));
        ASKED.notify_all();
        let _ = SAID.wait_timeout_while(report, SAY_WITHIN, |r| !r.said);
    }
    // SAFETY: `_exit` has no preconditions; it ends the process without running the other
    // exit handlers (calling `exit` again from inside one is undefined).
    unsafe { libc::_exit(EXIT_CALLED) }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn register() -> bool {
    extern "C" {
        /// glibc's `on_exit`: `atexit`, and the handler is told the status.
        fn on_exit(
            function: extern "C" fn(libc::c_int, *mut libc::c_void),
            arg: *mut libc::c_void,
        ) -> libc::c_int;
    }
    extern "C" fn handler(status: libc::c_int, _arg: *mut libc::c_void) {
        exiting(Call::Exit, Some(status));
    }
    // SAFETY: `handler` is a plain function that lives as long as the process; the argument
    // is unused.
    unsafe { on_exit(handler, std::ptr::null_mut()) == 0 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn register() -> bool {
    extern "C" fn handler() {
        exiting(Call::Exit, None);
    }
    // SAFETY: `handler` is a plain function that lives as long as the process.
    unsafe { libc::atexit(handler) == 0 }
}

/// Register [`exiting`] with `at_quick_exit` too: `quick_exit()` (C11, C++11) runs no `atexit`
/// handler, and ended the daemon with the status asked and no line.
#[cfg(target_os = "linux")]
fn register_quick() -> bool {
    extern "C" {
        fn at_quick_exit(function: extern "C" fn()) -> libc::c_int;
    }
    extern "C" fn handler() {
        exiting(Call::QuickExit, None);
    }
    // SAFETY: `handler` is a plain function that lives as long as the process.
    unsafe { at_quick_exit(handler) == 0 }
}

#[cfg(not(target_os = "linux"))]
fn register_quick() -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_the_call_its_status_and_what_the_daemon_was_doing() {
        assert_eq!(
            line(Call::Exit, Some(0), Who::Daemon, "served"),
            "exit(0) was called by plugin code or a library while the daemon served; the daemon did not choose to stop, so it ends with status 70 instead of 0, which would read as a clean shutdown"
        );
        assert_eq!(
            line(Call::Exit, Some(3), Who::Daemon, "started its plugins"),
            "exit(3) was called by plugin code or a library while the daemon started its plugins; the daemon did not choose to stop, so it ends with status 70 instead of 3"
        );
        assert_eq!(
            line(Call::QuickExit, Some(0), Who::Daemon, "served"),
            "quick_exit(0) was called by plugin code or a library while the daemon served; the daemon did not choose to stop, so it ends with status 70 instead of 0, which would read as a clean shutdown"
        );
        assert_eq!(
            line(Call::QuickExit, None, Who::Daemon, "served"),
            "quick_exit() was called by plugin code or a library while the daemon served; the daemon did not choose to stop, so it ends with status 70"
        );
        assert_eq!(
            line(Call::Exit, None, Who::Daemon, "served"),
            "exit() was called by plugin code or a library while the daemon served; the daemon did not choose to stop, so it ends with status 70"
        );
        assert_eq!(
            line(
                Call::Exit,
                Some(0),
                Who::Command("worldd handlers"),
                "loaded the plugin library /p/libx.so"
            ),
            "exit(0) was called by plugin code or a library while worldd handlers loaded the plugin library /p/libx.so; worldd handlers did not choose to stop, so it ends with status 70 instead of 0, which would read as success"
        );
    }
}
