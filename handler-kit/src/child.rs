//! Child processes that can outlive neither their call nor the daemon (Linux).
//!
//! A plugin that runs a program (a compiler, `git`) must make sure that nothing the program
//! starts survives the effect, a timeout, or the daemon being killed with `SIGKILL`.
//! [`Group`] gives every child a process group of its own and these guarantees:
//!
//! 1. **Killed as a group.** [`Group::kill`] (and dropping the group) sends `SIGKILL` to the
//!    whole process group: the program and every descendant that stayed in the group.
//! 2. **Dies with the daemon: parent-death signal.** The child is started with
//!    `PR_SET_PDEATHSIG = SIGKILL`, and checks `getppid()` right after setting it (if the
//!    daemon died in between, the child exits before `exec`). The kernel sends that signal when
//!    the *thread* that forked the child ends, not the process: the caller must wait for the
//!    child on the thread that spawned it (every worldd plugin does: an effect waits for its
//!    child).
//! 3. **Dies with the daemon: the group dies too.** The parent-death signal reaches only the
//!    direct child; its own children would live on under init. So the group is *led* by a
//!    small watchdog process forked from the daemon before the child starts. The watchdog
//!    holds the read end of a pipe whose only write end is the daemon's; it blocks reading it,
//!    and when the daemon dies — however it dies — the read sees end-of-file and the watchdog
//!    kills its group (the child, its descendants and itself). While the call runs normally
//!    the watchdog does nothing; [`Group`]'s `Drop` kills the group and reaps the watchdog.
//!
//! Because the watchdog leads the group and is reaped only after the group has been killed,
//! the group id can never be reused by an unrelated process while a [`Group`] exists.
//!
//! A descendant that leaves the group on purpose (`setsid`, `setpgid`) escapes all of this;
//! the programs worldd runs do not do that, and a plugin that needs more must use cgroups.
//!
//! 4. **Nothing of the daemon's but stdio.** The program starts with its stdin, stdout and
//!    stderr only ([`inherit_only_stdio`]): not every descriptor the daemon holds is
//!    close-on-exec (LMDB keeps its data file inheritable on purpose), and a program that runs
//!    what an agent wrote must not find the store's files, the listening socket or other
//!    clients' connections among its descriptors, nor write to the operator's terminal when
//!    the daemon runs in one (it has no controlling terminal).
//!
//! 5. **The first to go when memory runs out, and no core files.** The child starts with
//!    `oom_score_adj` 1000, so when the machine runs out of memory the kernel's OOM killer
//!    picks the program (or what it started) before the daemon, and with `RLIMIT_CORE` 0, so
//!    a crash of a large program does not write its memory into the worktree. [`limit_memory`]
//!    also caps what one program may allocate (`RLIMIT_DATA`), for plugins whose operator
//!    sets such a limit.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// One process group for one child (see the module docs).
#[derive(Debug)]
pub struct Group {
    /// The watchdog's pid, which is the group id.
    leader: libc::pid_t,
    /// The daemon's end of the lifeline pipe; the watchdog sees end-of-file when the last
    /// copy closes, which is when the daemon exits (or this group is dropped).
    lifeline: Option<OwnedFd>,
}

impl Group {
    /// Fork the watchdog that leads a new process group.
    pub fn new() -> io::Result<Group> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created by pipe2 and are owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: the child branch below calls only async-signal-safe functions (setpgid,
        // close_range/close, read, kill, _exit) and never returns, as required after fork in a
        // multi-threaded process.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: see above; this function never returns.
            unsafe { watchdog(read.as_raw_fd()) }
        }
        // Set the group from the parent too, so that it exists before any child joins it,
        // whichever process runs first.
        // SAFETY: plain syscall on our own child.
        let r = unsafe { libc::setpgid(pid, pid) };
        if r != 0 {
            let e = io::Error::last_os_error();
            // EACCES: the watchdog already did it itself (it never execs, so this is the only
            // reason). Anything else is a real failure.
            if e.raw_os_error() != Some(libc::EACCES) {
                reap_now(pid);
                return Err(e);
            }
        }
        drop(read);
        Ok(Group {
            leader: pid,
            lifeline: Some(write),
        })
    }

    /// The process group id (the watchdog's pid).
    pub fn id(&self) -> i32 {
        self.leader
    }

    /// Make `command` start in this group with the parent-death signal set, holding no
    /// descriptor but its stdio ([`inherit_only_stdio`]), first in line for the OOM killer and
    /// without core files (the module docs, 5).
    pub fn prepare(&self, command: &mut Command) {
        // SAFETY: getpid is always safe.
        let daemon = unsafe { libc::getpid() };
        command.process_group(self.leader);
        inherit_only_stdio(command);
        // SAFETY: the closure runs between fork and exec and uses only async-signal-safe
        // calls (prctl, getppid, setrlimit, open, write, close); it allocates nothing.
        unsafe {
            command.pre_exec(move || {
                let no_core = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                if libc::setrlimit(libc::RLIMIT_CORE, &no_core) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // Raising one's own score needs no privilege; without /proc (a bare chroot)
                // the program runs with the daemon's score, as before.
                let adj = libc::open(
                    c"/proc/self/oom_score_adj".as_ptr(),
                    libc::O_WRONLY | libc::O_CLOEXEC,
                );
                if adj >= 0 {
                    libc::write(adj, b"1000".as_ptr().cast(), 4);
                    libc::close(adj);
                }
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return Err(io::Error::last_os_error());
                }
                // The daemon may have died before the signal was armed.
                if libc::getppid() != daemon {
                    return Err(io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
    }

    /// `SIGKILL` to every process of the group (the watchdog included).
    pub fn kill(&self) {
        // SAFETY: plain syscall; the group id is reserved by the unreaped watchdog.
        unsafe {
            libc::kill(-self.leader, libc::SIGKILL);
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
        self.lifeline = None;
        reap_now(self.leader);
    }
}

/// Make `command`'s program start with at most `bytes` of data (`RLIMIT_DATA`: its heap and
/// every private writable mapping, which is where a runaway program's memory goes). An
/// allocation past it fails inside the program (`MemoryError`, `out of memory`), which then
/// exits as it does on any such failure; what it started inherits the limit.
pub fn limit_memory(command: &mut Command, bytes: u64) {
    // SAFETY: the closure runs between fork and exec and makes one async-signal-safe
    // syscall (setrlimit) on the child itself; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(libc::RLIMIT_DATA, &limit) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Make `command`'s program start with its stdin, stdout and stderr only: every other
/// descriptor of this process is marked close-on-exec in the child, between `fork` and `exec`
/// (so `Command`'s own exec-error pipe still reports a failed `exec`), and the child gives up
/// the controlling terminal of a daemon started in one, so that it cannot open `/dev/tty`.
pub fn inherit_only_stdio(command: &mut Command) {
    // SAFETY: the closure runs between fork and exec and makes only async-signal-safe
    // syscalls (open, ioctl, close, close_range, getrlimit, fcntl) on the child's own
    // descriptor table and terminal; it allocates nothing.
    unsafe {
        command.pre_exec(|| {
            // The child is no session leader, so TIOCNOTTY detaches it (and what it starts)
            // alone; without a controlling terminal the open fails and nothing changes.
            let tty = libc::open(
                c"/dev/tty".as_ptr(),
                libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
            );
            if tty >= 0 {
                libc::ioctl(tty, libc::TIOCNOTTY);
                libc::close(tty);
            }
            if libc::syscall(
                libc::SYS_close_range,
                3u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            ) != 0
            {
                // Kernels before 5.11 have no CLOSE_RANGE_CLOEXEC.
                close_on_exec_one_by_one(3);
            }
            Ok(())
        });
    }
}

/// Mark every descriptor from `first` up to the descriptor limit close-on-exec, one by one.
///
/// # Safety
///
/// Only to be called in the child of `fork` (or where no other thread opens descriptors).
unsafe fn close_on_exec_one_by_one(first: libc::c_int) {
    // SAFETY: fcntl is an async-signal-safe syscall on our own descriptor table; on a
    // descriptor that is not open it fails with EBADF and changes nothing.
    unsafe {
        for fd in first..descriptor_limit() as libc::c_int {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
}

/// One past the highest descriptor number this process may hold (its soft `RLIMIT_NOFILE`,
/// at most 2^20; 4096 when it cannot be read), for the fallbacks that visit every descriptor.
/// Async-signal-safe: fit for the child of `fork`.
fn descriptor_limit() -> libc::c_uint {
    // SAFETY: getrlimit is an async-signal-safe syscall; `limit` is plain old data for it to
    // fill, so all-zero is a valid value.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur.min(1 << 20) as libc::c_uint
        } else {
            4096
        }
    }
}

/// Wait for `pid` (already killed or about to exit).
fn reap_now(pid: libc::pid_t) {
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child; `status` is a valid out-pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

/// The watchdog: lead a new group, hold only the lifeline, wait for its end, kill the group.
///
/// # Safety
///
/// Only to be called in the child of `fork`; uses async-signal-safe calls only.
unsafe fn watchdog(lifeline: libc::c_int) -> ! {
    // SAFETY: plain syscalls on our own process and descriptors, all async-signal-safe (the
    // caller's contract: we are the child of `fork`); `byte` is a valid one-byte buffer.
    unsafe {
        libc::setpgid(0, 0);
        close_all_but(lifeline);
        let mut byte = 0u8;
        loop {
            let n = libc::read(lifeline, (&mut byte as *mut u8).cast(), 1);
            if n == 0 {
                break;
            }
            if n < 0 && *libc::__errno_location() != libc::EINTR {
                break;
            }
        }
        libc::kill(0, libc::SIGKILL);
        libc::_exit(0)
    }
}

/// Close every descriptor except `keep`: the watchdog must hold no copy of the daemon's pipes
/// (the child's stdout, `Command`'s exec-error pipe, other groups' lifelines), or it would
/// keep them open.
///
/// # Safety
///
/// Only to be called in the child of `fork`.
unsafe fn close_all_but(keep: libc::c_int) {
    let keep = keep as libc::c_uint;
    // SAFETY: close_range and close are async-signal-safe syscalls on our own descriptor
    // table (the caller's contract: we are the child of `fork`).
    unsafe {
        let below = keep == 0 || libc::syscall(libc::SYS_close_range, 0u32, keep - 1, 0u32) == 0;
        let above = libc::syscall(libc::SYS_close_range, keep + 1, u32::MAX, 0u32) == 0;
        if below && above {
            return;
        }
        // Kernels before 5.9 have no close_range: close one by one up to the descriptor limit.
        for fd in 0..descriptor_limit() {
            if fd != keep {
                libc::close(fd as libc::c_int);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::process::Stdio;

    fn alive(pid: i32) -> bool {
        // A zombie has exited; only a running (or sleeping) process counts.
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => {
                let state = stat.rsplit(')').next().unwrap_or("").trim_start();
                !state.starts_with('Z') && !state.starts_with('X')
            }
            Err(_) => false,
        }
    }

    #[test]
    fn killing_the_group_kills_the_child_and_its_children() {
        let group = Group::new().unwrap();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 300 & echo $$ $!; exec sleep 301"])
            .stdout(Stdio::piped());
        group.prepare(&mut cmd);
        let mut child = cmd.spawn().unwrap();
        let mut line = String::new();
        let mut out = child.stdout.take().unwrap();
        let mut buf = [0u8; 64];
        while !line.ends_with('\n') {
            let n = out.read(&mut buf).unwrap();
            assert!(n > 0, "the child closed stdout early");
            line.push_str(std::str::from_utf8(&buf[..n]).unwrap());
        }
        let pids: Vec<i32> = line
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .collect();
        assert_eq!(pids[0] as u32, child.id());
        // The child and its grandchild are in the watchdog's group.
        for pid in &pids {
            // SAFETY: plain syscall.
            assert_eq!(unsafe { libc::getpgid(*pid) }, group.id());
        }
        assert!(alive(group.id()));
        drop(group);
        let status = child.wait().unwrap();
        assert!(!status.success());
        // The grandchild is not our child: it was killed, then reparented.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while alive(pids[1]) {
            assert!(
                std::time::Instant::now() < deadline,
                "the grandchild survived"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// An inheritable descriptor of this process (as LMDB's data file is), and the
    /// descriptors a child sees: `ls` of its own `/proc/self/fd`, less the listing's own.
    fn descriptors_seen(prepare: impl FnOnce(&mut Command)) -> (libc::c_int, Vec<libc::c_int>) {
        // SAFETY: a copy of our own stderr at 200 or above (not close-on-exec, and far from
        // the low number `sh` takes for its listing); it is closed below.
        let leaked = unsafe { libc::fcntl(2, libc::F_DUPFD, 200) };
        assert!(leaked >= 200);
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "cd /proc/self/fd && echo *"])
            .stdout(Stdio::piped());
        prepare(&mut cmd);
        let out = cmd.output().unwrap();
        // SAFETY: closes the copy made above.
        unsafe { libc::close(leaked) };
        let seen = String::from_utf8(out.stdout)
            .unwrap()
            .split_whitespace()
            .map(|fd| fd.parse().unwrap())
            .collect();
        (leaked, seen)
    }

    #[test]
    fn a_child_of_the_group_holds_its_stdio_and_nothing_else_of_ours() {
        // Without it, the child holds the inheritable descriptor.
        let (leaked, seen) = descriptors_seen(|_| {});
        assert!(seen.contains(&leaked), "{seen:?}");
        let group = Group::new().unwrap();
        let (_, seen) = descriptors_seen(|cmd| group.prepare(cmd));
        // `sh` keeps one descriptor of its own (the directory it lists, or its script).
        assert!(seen.len() <= 4 && seen.starts_with(&[0, 1, 2]), "{seen:?}");
        assert!(!seen.contains(&leaked), "{seen:?}");
    }

    #[test]
    fn without_close_range_each_descriptor_is_marked_close_on_exec() {
        let (leaked, seen) = descriptors_seen(|cmd| {
            // SAFETY: as in `inherit_only_stdio`, with the fallback alone.
            unsafe {
                cmd.pre_exec(|| {
                    close_on_exec_one_by_one(3);
                    Ok(())
                });
            }
        });
        assert!(seen.len() <= 4 && seen.starts_with(&[0, 1, 2]), "{seen:?}");
        assert!(!seen.contains(&leaked), "{seen:?}");
    }

    /// Set in the copy of this test binary that [`a_child_cannot_open_the_daemons_terminal`]
    /// runs on a terminal of its own: `prepare` or not, then say whether `sh` could open
    /// `/dev/tty`.
    const TTY_PROBE: &str = "WORLDD_CHILD_TTY_PROBE";

    #[test]
    fn a_child_cannot_open_the_daemons_terminal() {
        if let Ok(mode) = std::env::var(TTY_PROBE) {
            let mut cmd = Command::new("sh");
            cmd.args(["-c", "true 3<>/dev/tty && echo has-tty || echo no-tty"])
                .stderr(Stdio::null());
            let group = Group::new().unwrap();
            if mode == "prepared" {
                group.prepare(&mut cmd);
            }
            let out = cmd.output().unwrap();
            println!("tty-probe: {}", String::from_utf8_lossy(&out.stdout).trim());
            return;
        }
        // This test again, as a daemon started in a terminal: `script` gives it a pseudo
        // terminal as its controlling terminal.
        let exe = std::env::current_exe().unwrap();
        let probe = |mode: &str| {
            let line = format!(
                "{} --exact child::tests::a_child_cannot_open_the_daemons_terminal --nocapture",
                exe.display()
            );
            let out = Command::new("script")
                .args(["-qec", &line, "/dev/null"])
                .env(TTY_PROBE, mode)
                .stdin(Stdio::null())
                .output()
                .expect("script(1) from util-linux runs this probe");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.lines()
                .find_map(|l| l.trim().strip_prefix("tty-probe: ").map(str::to_owned))
                .unwrap_or_else(|| panic!("no probe line in {text:?}"))
        };
        assert_eq!(probe("plain"), "has-tty");
        assert_eq!(probe("prepared"), "no-tty");
    }

    #[test]
    fn a_child_that_cannot_start_reports_its_error() {
        let group = Group::new().unwrap();
        let mut cmd = Command::new("/nonexistent/worldd-test-program");
        group.prepare(&mut cmd);
        let e = cmd.spawn().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    /// The shell and what it runs: the OOM killer's first choice, no core file, no data
    /// limit unless one is set.
    fn limits_seen(memory: Option<u64>) -> String {
        let group = Group::new().unwrap();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "cat /proc/self/oom_score_adj; ulimit -c; ulimit -d"]);
        group.prepare(&mut cmd);
        if let Some(bytes) = memory {
            limit_memory(&mut cmd, bytes);
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn a_child_goes_first_when_memory_runs_out_and_writes_no_core_file() {
        assert_eq!(limits_seen(None), "1000\n0\nunlimited\n");
        // `ulimit -d` counts KiB.
        assert_eq!(limits_seen(Some(64 << 20)), "1000\n0\n65536\n");
    }

    /// What `dd` says when it allocates a block of `block` under a 64 MiB data limit.
    fn dd_with_a_block_of(block: &str) -> std::process::Output {
        let group = Group::new().unwrap();
        let mut cmd = Command::new("dd");
        cmd.args([
            "if=/dev/zero",
            "of=/dev/null",
            "count=1",
            &format!("bs={block}"),
        ]);
        group.prepare(&mut cmd);
        limit_memory(&mut cmd, 64 << 20);
        cmd.output().unwrap()
    }

    #[test]
    fn an_allocation_past_the_memory_limit_fails_in_the_program() {
        let small = dd_with_a_block_of("16M");
        assert!(small.status.success(), "{small:?}");
        let large = dd_with_a_block_of("256M");
        assert_eq!(large.status.code(), Some(1), "{large:?}");
        assert!(
            String::from_utf8_lossy(&large.stderr).contains("memory exhausted"),
            "{large:?}"
        );
    }
}
