//! A crash inside a store's map is said as the damaged store it is.
//!
//! LMDB trusts the pages it reads: a page whose node offsets were damaged on disk can make a
//! read follow an offset out of its page, past the end of the file (SIGBUS) or of the map
//! (SIGSEGV). No error can be returned from there, and a daemon that dies by a bare "Bus error"
//! leaves its operator guessing. So every open environment's map is noted here, and a process
//! that asks for it ([`say_faults_in_store_maps`], the daemon does) has a handler for SIGSEGV
//! and SIGBUS that, for a fault inside or just past a noted map, writes one line to stderr
//! and lets the process die by the same signal. Any other fault goes to the handler that was
//! there before (Rust's own, which reports a stack overflow), or to the default.
//!
//! The handler only loads atomics and calls `write`, `sigaction` and the previous handler,
//! which is what a signal handler may do.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Maps noted at once: a process opens its store, and at most a few others (a backup's copy,
/// a test's stores); past that a map is simply not noted.
const SLOTS: usize = 16;

/// How far past a map's end a fault is still taken for a read of it: LMDB's node offsets are
/// 16 bits from the start of a page, and a copy that runs off the end faults at the end.
const PAST_THE_END: usize = (1 << 16) + 4096;

struct Slot {
    start: AtomicUsize,
    end: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot {
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
};

static MAPS: [Slot; SLOTS] = [FREE; SLOTS];

/// A noted map; dropping it forgets the map (the environment closed).
#[derive(Debug)]
pub(super) struct Noted(Option<usize>);

/// Note the map `[start, start + len)`; `None` (not found) notes nothing.
pub(super) fn note(map: Option<(usize, usize)>) -> Noted {
    let Some((start, len)) = map.filter(|(start, len)| *start != 0 && *len != 0) else {
        return Noted(None);
    };
    for (i, slot) in MAPS.iter().enumerate() {
        if slot
            .start
            .compare_exchange(0, start, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            slot.end.store(start.saturating_add(len), Ordering::Release);
            return Noted(Some(i));
        }
    }
    Noted(None)
}

impl Noted {
    /// The map moved (it was remapped at another size); `None`: not found where it went.
    pub(super) fn moved(&self, map: Option<(usize, usize)>) {
        if let Some(i) = self.0 {
            let (start, len) = map.unwrap_or((0, 0));
            let slot = &MAPS[i];
            // Never empty for a moment: a reader sees the old range or the new one.
            slot.end.store(0, Ordering::Release);
            // The slot stays taken (start never 0 while noted); an empty range matches nothing.
            slot.start.store(start.max(1), Ordering::Release);
            slot.end.store(start.saturating_add(len), Ordering::Release);
        }
    }
}

impl Drop for Noted {
    fn drop(&mut self) {
        if let Some(i) = self.0 {
            MAPS[i].end.store(0, Ordering::Release);
            MAPS[i].start.store(0, Ordering::Release);
        }
    }
}

/// Whether `addr` lies inside a noted map or just past its end.
fn in_a_store_map(addr: usize) -> bool {
    MAPS.iter().any(|slot| {
        let start = slot.start.load(Ordering::Acquire);
        let end = slot.end.load(Ordering::Acquire);
        start != 0 && end > start && addr >= start && addr < end.saturating_add(PAST_THE_END)
    })
}

/// Stores being opened in this process now ([`opening`]).
static OPENING: AtomicUsize = AtomicUsize::new(0);

/// A store being opened, for as long as this lives: a fault outside every noted map is then
/// said too, as the store's likely doing ([`say_faults_in_store_maps`]). A corrupt page can
/// send LMDB's reads anywhere (a wild pointer lands outside the map as often as inside it),
/// and while a process only opens its store and reads its first rows, little else runs.
#[derive(Debug)]
pub struct Opening(());

/// Mark a store's opening until the returned value is dropped.
pub fn opening() -> Opening {
    OPENING.fetch_add(1, Ordering::AcqRel);
    Opening(())
}

impl Drop for Opening {
    fn drop(&mut self) {
        OPENING.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The handlers found for SIGSEGV and SIGBUS when ours was installed.
static PREVIOUS: OnceLock<[libc::sigaction; 2]> = OnceLock::new();

/// The lines said for SIGSEGV and SIGBUS: inside a store's map, then outside every map while a
/// store is being opened.
static MESSAGES: OnceLock<[Vec<u8>; 4]> = OnceLock::new();

/// Say a fault inside a store's map on stderr, starting the line with `who` (such as
/// `worldd serve`), then die by it. Installs the handler once; `who` is kept from the first
/// call.
pub fn say_faults_in_store_maps(who: &str) {
    MESSAGES.get_or_init(|| {
        [
            line(who, "SIGSEGV"),
            line(who, "SIGBUS"),
            unsure_line(who, "SIGSEGV"),
            unsure_line(who, "SIGBUS"),
        ]
    });
    PREVIOUS.get_or_init(|| {
        // SAFETY: sigaction with a zeroed, then filled, action struct and valid out-pointers;
        // the handler is an `extern "C"` function of the signature SA_SIGINFO asks for.
        unsafe {
            let mut ours: libc::sigaction = std::mem::zeroed();
            ours.sa_sigaction = on_fault as *const () as usize;
            ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut ours.sa_mask);
            let mut previous: [libc::sigaction; 2] = std::mem::zeroed();
            libc::sigaction(libc::SIGSEGV, &ours, &mut previous[0]);
            libc::sigaction(libc::SIGBUS, &ours, &mut previous[1]);
            previous
        }
    });
}

fn line(who: &str, signal: &str) -> Vec<u8> {
    let mut line = crashed_reading(
        who,
        signal,
        ", so a restart meets it again; check the store with worldd doctor, restore it from a backup (worldd backup makes one), and keep this copy for inspection",
    );
    line.push('\n');
    line.into_bytes()
}

/// The line for a fault outside every store's map while a store was being opened: the store is
/// the likely cause, not a certain one, and the line says no more.
fn unsure_line(who: &str, signal: &str) -> Vec<u8> {
    format!(
        "worldd: store is likely damaged: {who} crashed ({signal}) while it opened the store, at an address outside the store's map: a corrupt page sends LMDB's reads astray, so the store is the likely cause, though not a certain one; check the store with worldd doctor, restore it from a backup (worldd backup makes one) if doctor finds it damaged, and keep this copy for inspection\n"
    )
    .into_bytes()
}

/// The line for a process that crashed (by `signal`) reading a store, `advice` said last: the
/// daemon's own (this handler) and the verbs' (their parent sees the child's death) alike.
pub fn crashed_reading(who: &str, signal: &str, advice: &str) -> String {
    format!(
        "worldd: store is damaged: {who} crashed reading it ({signal}): LMDB follows the store's pages as they are written, and one of them is corrupt{advice}"
    )
}

extern "C" fn on_fault(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    let which = usize::from(signal == libc::SIGBUS);
    // SAFETY: the kernel hands a valid siginfo to an SA_SIGINFO handler. Only a fault the
    // kernel raised (si_code > 0) has an address worth reading.
    let addr = unsafe {
        if (*info).si_code > 0 {
            Some((*info).si_addr() as usize)
        } else {
            None
        }
    };
    if addr.is_some_and(in_a_store_map) {
        if let Some(messages) = MESSAGES.get() {
            let m = &messages[which];
            // SAFETY: write(2) of a 'static buffer; async-signal-safe.
            unsafe { libc::write(2, m.as_ptr().cast(), m.len()) };
        }
        default(signal);
        return;
    }
    if addr.is_some() && OPENING.load(Ordering::Acquire) > 0 {
        if let Some(messages) = MESSAGES.get() {
            let m = &messages[2 + which];
            // SAFETY: write(2) of a 'static buffer; async-signal-safe.
            unsafe { libc::write(2, m.as_ptr().cast(), m.len()) };
        }
        // Then as any other fault: a stack overflow is still reported as one.
    }
    match PREVIOUS.get().map(|p| p[which]) {
        Some(previous)
            if previous.sa_sigaction != libc::SIG_DFL && previous.sa_sigaction != libc::SIG_IGN =>
        {
            // SAFETY: the handler that was installed before ours, called as it asked to be.
            unsafe {
                if previous.sa_flags & libc::SA_SIGINFO != 0 {
                    let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                        std::mem::transmute(previous.sa_sigaction);
                    f(signal, info, context);
                } else {
                    let f: extern "C" fn(libc::c_int) = std::mem::transmute(previous.sa_sigaction);
                    f(signal);
                }
            }
        }
        _ => {
            default(signal);
            if addr.is_none() {
                // A signal sent, not a fault: nothing repeats it on return.
                // SAFETY: raise is async-signal-safe; the signal stays pending until we return.
                unsafe { libc::raise(signal) };
            }
        }
    }
}

/// The default action for `signal`: returning from the handler repeats the access, which then
/// ends the process by that signal, as it would have without us.
fn default(signal: libc::c_int) {
    // SAFETY: sigaction with a zeroed struct (SIG_DFL) is async-signal-safe.
    unsafe {
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut dfl.sa_mask);
        libc::sigaction(signal, &dfl, std::ptr::null_mut());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::FromRawFd;

    #[test]
    fn a_fault_is_taken_for_a_maps_only_inside_it_or_just_past_its_end() {
        let noted = note(Some((0x7000_0000, 0x10_0000)));
        assert!(in_a_store_map(0x7000_0000));
        assert!(in_a_store_map(0x7010_0000 + PAST_THE_END - 1));
        assert!(!in_a_store_map(0x7010_0000 + PAST_THE_END));
        assert!(!in_a_store_map(0x6fff_ffff));
        noted.moved(Some((0x9000_0000, 0x1000)));
        assert!(!in_a_store_map(0x7000_0000));
        assert!(in_a_store_map(0x9000_0fff));
        drop(noted);
        assert!(!in_a_store_map(0x9000_0fff));
    }

    /// Run `touch` in a forked child whose stderr is a pipe: its status and what it wrote.
    fn in_a_child(touch: impl FnOnce()) -> (libc::c_int, String) {
        let mut fds = [0; 2];
        // Installed here, not in the child: a child forked from the test's threads may not
        // allocate.
        say_faults_in_store_maps("worldd serve");
        // SAFETY: pipe, fork and dup2 with valid arguments; the child only runs `touch` and
        // exits, never returning into the test harness. Close-on-exec keeps the pipe out of
        // the other tests' children, which would hold it open.
        unsafe {
            assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC), 0);
            let pid = libc::fork();
            assert!(pid >= 0);
            if pid == 0 {
                libc::dup2(fds[1], 2);
                libc::close(fds[0]);
                touch();
                libc::_exit(0);
            }
            libc::close(fds[1]);
            let mut out = String::new();
            std::fs::File::from_raw_fd(fds[0])
                .read_to_string(&mut out)
                .unwrap();
            let mut status = 0;
            assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
            (status, out)
        }
    }

    #[test]
    fn a_read_past_a_noted_maps_file_dies_by_sigbus_with_the_line_and_any_other_fault_without() {
        let file = tempfile::tempfile().unwrap();
        file.set_len(4096).unwrap();
        let len = 4 * 4096;
        use std::os::fd::AsRawFd;
        // SAFETY: a shared read-only map of a file this test owns; the child reads past the
        // file's end on purpose.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED);
        let start = map as usize;
        let (status, out) = in_a_child(|| {
            let _noted = note(Some((start, len)));
            // SAFETY: none: the page past the file's end raises SIGBUS, which is the test.
            let byte = unsafe { std::ptr::read_volatile((start + 2 * 4096) as *const u8) };
            std::hint::black_box(byte);
        });
        assert!(libc::WIFSIGNALED(status), "{status}: {out}");
        assert_eq!(libc::WTERMSIG(status), libc::SIGBUS, "{out}");
        assert!(
            out.starts_with("worldd: store is damaged: worldd serve crashed reading it (SIGBUS): "),
            "{out}"
        );
        // The same read with the map not noted: the bare signal, no word of a store.
        let (status, out) = in_a_child(|| {
            // SAFETY: as above.
            let byte = unsafe { std::ptr::read_volatile((start + 2 * 4096) as *const u8) };
            std::hint::black_box(byte);
        });
        assert!(libc::WIFSIGNALED(status));
        assert_eq!(libc::WTERMSIG(status), libc::SIGBUS);
        assert_eq!(out, "");
        // A fault elsewhere while a map is noted: passed on to the handler before ours.
        let (status, out) = in_a_child(|| {
            let _noted = note(Some((start, len)));
            // SAFETY: an inaccessible page, read on purpose: SIGSEGV is the test.
            let byte = unsafe {
                let elsewhere = libc::mmap(
                    std::ptr::null_mut(),
                    4096,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                std::ptr::read_volatile(elsewhere as *const u8)
            };
            std::hint::black_box(byte);
        });
        assert!(libc::WIFSIGNALED(status));
        assert_eq!(libc::WTERMSIG(status), libc::SIGSEGV);
        assert_eq!(out, "");
        // SAFETY: the map made above.
        unsafe { libc::munmap(map, len) };
    }
}
