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

use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
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
    /// The mapped file, held open by the [`Noted`] (-1: none): a SIGBUS is a read past the
    /// file's end, and the handler asks the file's size (fstat) to tell a file cut short under
    /// the map (a copy put over it) from a page that points past a whole file's end.
    fd: AtomicI32,
    /// Bytes of the file the store used at its last measure ([`Noted::used`]).
    used: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot {
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    fd: AtomicI32::new(-1),
    used: AtomicUsize::new(0),
};

static MAPS: [Slot; SLOTS] = [FREE; SLOTS];

/// A noted map; dropping it forgets the map (the environment closed).
#[derive(Debug)]
pub(super) struct Noted(Option<usize>, Option<std::fs::File>);

/// Note the map `[start, start + len)`; `None` (not found) notes nothing.
pub(super) fn note(map: Option<(usize, usize)>) -> Noted {
    let Some((start, len)) = map.filter(|(start, len)| *start != 0 && *len != 0) else {
        return Noted(None, None);
    };
    for (i, slot) in MAPS.iter().enumerate() {
        if slot
            .start
            .compare_exchange(0, start, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            slot.end.store(start.saturating_add(len), Ordering::Release);
            return Noted(Some(i), None);
        }
    }
    Noted(None, None)
}

impl Noted {
    /// Hold `file` (the mapped file, opened again) for the handler to ask its size.
    pub(super) fn of_file(mut self, file: Option<std::fs::File>) -> Noted {
        use std::os::fd::AsRawFd;
        if let (Some(i), Some(file)) = (self.0, &file) {
            MAPS[i].fd.store(file.as_raw_fd(), Ordering::Release);
        }
        self.1 = file;
        self
    }

    /// The store now uses the file's first `bytes`.
    pub(super) fn used(&self, bytes: u64) {
        if let Some(i) = self.0 {
            let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
            MAPS[i].used.store(bytes, Ordering::Release);
        }
    }

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
            // Before the file closes (fields drop after this).
            MAPS[i].fd.store(-1, Ordering::Release);
            MAPS[i].used.store(0, Ordering::Release);
            MAPS[i].end.store(0, Ordering::Release);
            MAPS[i].start.store(0, Ordering::Release);
        }
    }
}

/// Whether `addr` lies inside a noted map or just past its end.
#[cfg(test)]
fn in_a_store_map(addr: usize) -> bool {
    store_map_of(addr).is_some()
}

/// The noted map `addr` lies inside or just past the end of.
fn store_map_of(addr: usize) -> Option<&'static Slot> {
    MAPS.iter().find(|slot| {
        let start = slot.start.load(Ordering::Acquire);
        let end = slot.end.load(Ordering::Acquire);
        start != 0 && end > start && addr >= start && addr < end.saturating_add(PAST_THE_END)
    })
}

/// Whether the file mapped by `slot` changed under the map where `addr` read it: it is now
/// shorter than the part the store used, or it now reaches past `addr` (a read past a file's
/// end raises SIGBUS, so it was shorter a moment ago). Either is a file cut short or copied
/// over while mapped, not a page pointing past a whole file's end. Only fstat (async-signal-
/// safe) and atomics.
fn file_changed_under(slot: &Slot, addr: usize) -> bool {
    let fd = slot.fd.load(Ordering::Acquire);
    if fd < 0 {
        return false;
    }
    // SAFETY: fstat into a zeroed struct on a descriptor the slot's Noted holds open.
    let size = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0 {
            return false;
        }
        usize::try_from(st.st_size).unwrap_or(0)
    };
    let offset = addr.saturating_sub(slot.start.load(Ordering::Acquire));
    size < slot.used.load(Ordering::Acquire) || size > offset
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
/// store is being opened, then SIGBUS on a data file changed under the map.
static MESSAGES: OnceLock<[Vec<u8>; 5]> = OnceLock::new();

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
            changed_line(who),
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

/// The line for a SIGBUS on a data file that changed under the map ([`file_changed_under`]):
/// most likely a copy put over it in place, which leaves the store whole.
fn changed_line(who: &str) -> Vec<u8> {
    format!(
        "worldd: {who} crashed reading the store (SIGBUS): its data file was truncated or copied over while this daemon served it (cp BACKUP/data.mdb over the live one?), so nothing in it may be corrupt; check the store with worldd doctor before starting the daemon again, and copy a backup into place only while no daemon serves the store\n"
    )
    .into_bytes()
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
    if let Some((addr, slot)) = addr.and_then(|a| store_map_of(a).map(|slot| (a, slot))) {
        if let Some(messages) = MESSAGES.get() {
            let changed = signal == libc::SIGBUS && file_changed_under(slot, addr);
            let m = &messages[if changed { 4 } else { which }];
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

    /// A data file cut short under the map while the store used more of it (a copy put over
    /// it with `cp`, which truncates first): the SIGBUS line says so, and that nothing may be
    /// corrupt, not that a page is. A read past the end of a whole file is still said as a
    /// corrupt page.
    #[test]
    fn a_sigbus_on_a_data_file_cut_short_under_the_map_says_it_was_copied_over_not_corrupt() {
        let file = tempfile::tempfile().unwrap();
        let len = 4 * 4096;
        file.set_len(len as u64).unwrap();
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
        // The store used all four pages; the file is cut to one.
        file.set_len(4096).unwrap();
        let held = file.try_clone().unwrap();
        let (status, out) = in_a_child(|| {
            let noted = note(Some((start, len))).of_file(Some(held));
            noted.used(len as u64);
            // SAFETY: none: the page past the file's end raises SIGBUS, which is the test.
            let byte = unsafe { std::ptr::read_volatile((start + 2 * 4096) as *const u8) };
            std::hint::black_box(byte);
        });
        assert!(libc::WIFSIGNALED(status), "{status}: {out}");
        assert_eq!(libc::WTERMSIG(status), libc::SIGBUS, "{out}");
        assert_eq!(
            out,
            "worldd: worldd serve crashed reading the store (SIGBUS): its data file was truncated or copied over while this daemon served it (cp BACKUP/data.mdb over the live one?), so nothing in it may be corrupt; check the store with worldd doctor before starting the daemon again, and copy a backup into place only while no daemon serves the store\n"
        );
        // The store used only the one page the file holds: a read past it is a page that
        // points past a whole file's end.
        let held = file.try_clone().unwrap();
        let (status, out) = in_a_child(|| {
            let noted = note(Some((start, len))).of_file(Some(held));
            noted.used(4096);
            // SAFETY: as above.
            let byte = unsafe { std::ptr::read_volatile((start + 2 * 4096) as *const u8) };
            std::hint::black_box(byte);
        });
        assert!(libc::WIFSIGNALED(status), "{status}: {out}");
        assert_eq!(libc::WTERMSIG(status), libc::SIGBUS, "{out}");
        assert!(
            out.starts_with("worldd: store is damaged: worldd serve crashed reading it (SIGBUS): "),
            "{out}"
        );
        // SAFETY: the map made above.
        unsafe { libc::munmap(map, len) };
    }
}
