//! Running one `ailang` child: exact environment, own process group, deadline with a
//! group-wide SIGKILL, a hard cap on each output stream, and a memory limit.
//!
//! The child runs in a process group of its own, led by a watchdog
//! (`handler_kit::child::Group`), so everything it starts can be killed with one
//! `kill(-pgid, SIGKILL)`, and the child (parent-death signal) and the whole group (the
//! watchdog) die with the daemon, however the daemon dies. The group is killed on timeout, on
//! overflow, and also after a normal exit (stragglers must not outlive the effect or hold the
//! pipes open). The group id stays reserved until the watchdog is reaped, after the kill, so
//! the kill can never hit an unrelated process group. The child is waited for on the thread
//! that spawned it, which the parent-death signal requires. That thread also serves the
//! pipes (poll(2), non-blocking): no reader or writer thread exists that a descendant outside
//! the group could keep blocked after the call.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use handler_kit::child::Group;

/// Each of stdout and stderr may hold at most this much (8 MiB); more is a failure, never a
/// silent truncation.
pub const OUTPUT_CAP: usize = 8 << 20;

/// How long to wait for the output pipes to close once the whole group has been killed. Only
/// a descendant that left the group (setsid) can keep them open that long.
const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// One child to run.
#[derive(Debug, Clone)]
pub struct Spec {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// The working directory by path, when no `dir` is given (the start-up probe).
    pub cwd: PathBuf,
    /// The worktree opened by descriptor: the child starts there (`fchdir`), never at a path
    /// that may have been swapped for a symlink since.
    pub dir: Option<Arc<OwnedFd>>,
    /// The child's entire environment.
    pub env: Vec<(String, String)>,
    pub stdin: Vec<u8>,
    /// Kill the group at this instant.
    pub deadline: Instant,
    /// The time limit the deadline stands for (the whole effect's), for messages.
    pub limit: Duration,
    /// When the caller must be answering: waiting for the pipes after the child's exit stops
    /// there even within [`DRAIN_GRACE`] (`None`: only the grace applies).
    pub answer_by: Option<Instant>,
    /// Per-stream byte cap.
    pub cap: usize,
    /// The most the child may allocate, in bytes (`RLIMIT_DATA`).
    pub memory: u64,
}

/// A child that ran to completion.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Finished {
    /// `rc N`, or `no rc: killed by signal S`.
    pub fn rc_text(&self) -> String {
        rc_text(&self.status)
    }
}

/// `rc N`, or `no rc: killed by signal S`.
pub fn rc_text(status: &ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("rc {code}"),
        (None, Some(sig)) => format!("no rc: killed by signal {sig}"),
        (None, None) => "no rc".to_string(),
    }
}

/// Why a child did not produce a usable result.
#[derive(Debug)]
pub enum Failure {
    /// It could not be started: nothing ran. `program` is the file that was to run.
    Spawn { program: PathBuf, error: io::Error },
    /// The deadline passed; the group was killed.
    Timeout(Duration),
    /// A stream exceeded the cap; the group was killed.
    Overflow(&'static str),
    /// Waiting for the started child failed: whether it ran to its end is unknown.
    Wait(String),
    /// Reading failed, or a descendant outside the group kept a pipe open.
    Io(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Spawn { program, error } => {
                write!(f, "could not be started: {}: {error}", program.display())?;
                if let Some(why) = missing_interpreter(program, error) {
                    write!(f, "; {why}")?;
                }
                Ok(())
            }
            Failure::Timeout(d) => write!(
                f,
                "did not finish within the effect's time limit of {} ms; its process group was killed",
                d.as_millis()
            ),
            Failure::Overflow(stream) => write!(
                f,
                "wrote more than {OUTPUT_CAP} bytes to {stream}; its process group was killed (output is never truncated)"
            ),
            Failure::Wait(e) | Failure::Io(e) => write!(f, "failed: {e}"),
        }
    }
}

/// Why exec said "No such file or directory" of a file that is there: a script whose `#!`
/// interpreter is missing fails exactly so, and the bare errno sends the operator looking for
/// the file itself.
fn missing_interpreter(program: &Path, error: &io::Error) -> Option<String> {
    if error.kind() != io::ErrorKind::NotFound || !program.is_file() {
        return None;
    }
    let mut head = [0u8; 256];
    let n = File::open(program)
        .and_then(|mut f| f.read(&mut head))
        .ok()?;
    let interpreter = head[..n]
        .strip_prefix(b"#!")
        .and_then(|line| line.split(|b| *b == b'\n').next())
        .and_then(|line| {
            line.split(|b| *b == b' ' || *b == b'\t')
                .find(|w| !w.is_empty())
        })
        .map(|w| String::from_utf8_lossy(w).into_owned());
    Some(match interpreter {
        Some(i) => {
            format!("the file is there, so the interpreter its #! line names ({i}) may be missing")
        }
        None => {
            "the file is there, so an interpreter or library it needs may be missing".to_string()
        }
    })
}

/// At most 200 characters of `text` on one line, for messages.
pub fn excerpt(text: &str) -> String {
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() > 200 {
        line.chars().take(200).collect::<String>() + "…"
    } else {
        line
    }
}

/// Whether the child has exited, without reaping it.
fn exited(pid: i32) -> io::Result<bool> {
    // SAFETY: siginfo_t is plain data; all-zero is valid (si_pid 0 = "no child changed").
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid only writes into `info`; WNOWAIT leaves the child waitable.
    let r = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: waitid filled `info` (or left it zeroed when nothing changed).
    Ok(unsafe { info.si_pid() } != 0)
}

/// Stream names by pipe index.
const STREAMS: [&str; 2] = ["stdout", "stderr"];

/// Set `O_NONBLOCK` on `fd`, so reading or writing it never blocks the calling thread.
fn nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor the caller owns; only the status flags change.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The child's three pipes, served from the calling thread with poll(2) on non-blocking
/// descriptors. No thread reads or writes them: a descendant that left the group and holds a
/// pipe cannot keep anything of the call alive once [`run`] returns, which drops them.
struct Pipes {
    /// stdout and stderr, until their end of file (or an overflow).
    outputs: [Option<File>; 2],
    data: [Vec<u8>; 2],
    /// The first stream to pass the cap.
    overflow: Option<&'static str>,
    cap: usize,
    stdin: Option<File>,
    input: Vec<u8>,
    written: usize,
    buf: Vec<u8>,
}

impl Pipes {
    fn new(child: &mut std::process::Child, input: Vec<u8>, cap: usize) -> io::Result<Pipes> {
        let out = child.stdout.take().map(|p| File::from(OwnedFd::from(p)));
        let err = child.stderr.take().map(|p| File::from(OwnedFd::from(p)));
        let stdin = child.stdin.take().map(|p| File::from(OwnedFd::from(p)));
        for f in out.iter().chain(&err).chain(&stdin) {
            nonblocking(f.as_raw_fd())?;
        }
        let mut pipes = Pipes {
            outputs: [out, err],
            data: [Vec::new(), Vec::new()],
            overflow: None,
            cap,
            stdin,
            input,
            written: 0,
            buf: vec![0u8; 64 * 1024],
        };
        if pipes.input.is_empty() {
            pipes.stdin = None;
        }
        Ok(pipes)
    }

    /// Whether stdout or stderr is still open.
    fn open(&self) -> bool {
        self.outputs.iter().any(Option::is_some)
    }

    /// Wait up to `wait` for any pipe to be ready, then move what it can without blocking.
    fn pump(&mut self, wait: Duration) -> io::Result<()> {
        let mut fds: Vec<libc::pollfd> = Vec::with_capacity(3);
        for f in self.outputs.iter().flatten() {
            fds.push(libc::pollfd {
                fd: f.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        if let Some(f) = &self.stdin {
            fds.push(libc::pollfd {
                fd: f.as_raw_fd(),
                events: libc::POLLOUT,
                revents: 0,
            });
        }
        // Round up: a zero timeout with nothing ready would spin.
        let ms = wait.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd structures.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::Interrupted => Ok(()),
                _ => Err(e),
            };
        }
        let ready = |fd: RawFd| fds.iter().any(|p| p.fd == fd && p.revents != 0);
        for i in 0..2 {
            if self.outputs[i]
                .as_ref()
                .is_some_and(|f| ready(f.as_raw_fd()))
            {
                self.read(i)?;
            }
        }
        if self.stdin.as_ref().is_some_and(|f| ready(f.as_raw_fd())) {
            self.write();
        }
        Ok(())
    }

    /// Read stream `i` until it would block, ends, or passes the cap.
    fn read(&mut self, i: usize) -> io::Result<()> {
        let Some(f) = self.outputs[i].as_mut() else {
            return Ok(());
        };
        loop {
            match f.read(&mut self.buf) {
                Ok(0) => {
                    self.outputs[i] = None;
                    return Ok(());
                }
                Ok(n) => {
                    if self.data[i].len() + n > self.cap {
                        // Stop reading: the caller kills the group.
                        self.overflow.get_or_insert(STREAMS[i]);
                        self.outputs[i] = None;
                        return Ok(());
                    }
                    self.data[i].extend_from_slice(&self.buf[..n]);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("reading its {} failed: {e}", STREAMS[i]),
                    ))
                }
            }
        }
    }

    /// Write what stdin's pipe takes now. A child that never reads stdin leaves the rest
    /// unwritten (the pipe closes when the call ends); one that closed it ends the writing.
    fn write(&mut self) {
        let Some(f) = self.stdin.as_mut() else {
            return;
        };
        loop {
            match f.write(&self.input[self.written..]) {
                Ok(n) => {
                    self.written += n;
                    if self.written == self.input.len() {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        // All written, or the reading end is gone (EPIPE): close it, the child sees EOF.
        self.stdin = None;
    }
}

fn spawn(command: &mut Command) -> io::Result<std::process::Child> {
    // ETXTBSY: another thread of this process may have forked while the archived binary was
    // still open for writing (the fd lives on in that child until it execs). It clears as soon
    // as that child execs, so a short retry is the standard remedy.
    let mut attempt = 0;
    loop {
        match command.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && attempt < 20 => {
                attempt += 1;
                thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// Run `spec` to completion, the deadline, or an overflow.
pub fn run(spec: Spec) -> Result<Finished, Failure> {
    if Instant::now() >= spec.deadline {
        return Err(Failure::Timeout(spec.limit));
    }
    let mut command = Command::new(&spec.program);
    command.args(&spec.args);
    match &spec.dir {
        Some(dir) => handler_kit::worktree::run_in(&mut command, dir.as_fd()).map_err(|error| {
            Failure::Spawn {
                program: spec.program.clone(),
                error,
            }
        })?,
        None => {
            command.current_dir(&spec.cwd);
        }
    }
    command
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let spawn_failed = |error| Failure::Spawn {
        program: spec.program.clone(),
        error,
    };
    let group = Group::new().map_err(spawn_failed)?;
    group.prepare(&mut command);
    handler_kit::child::limit_memory(&mut command, spec.memory);
    let mut child = spawn(&mut command).map_err(spawn_failed)?;
    let pid = child.id() as i32;

    let mut pipes = match Pipes::new(&mut child, spec.stdin, spec.cap) {
        Ok(p) => p,
        Err(e) => {
            group.kill();
            let _ = child.wait();
            return Err(Failure::Io(format!("setting up its pipes failed: {e}")));
        }
    };

    let mut pause = Duration::from_millis(1);
    let ended: Result<(), Failure> = loop {
        match exited(pid) {
            Ok(true) => break Ok(()),
            Ok(false) => {}
            Err(e) => break Err(Failure::Wait(format!("waiting for it failed: {e}"))),
        }
        if let Some(name) = pipes.overflow {
            break Err(Failure::Overflow(name));
        }
        let now = Instant::now();
        if now >= spec.deadline {
            break Err(Failure::Timeout(spec.limit));
        }
        // Also the pause between looks at the child: output wakes it early.
        if let Err(e) = pipes.pump(pause.min(spec.deadline - now)) {
            break Err(Failure::Io(e.to_string()));
        }
        pause = (pause * 2).min(Duration::from_millis(10));
    };
    group.kill();
    let status = child.wait();
    drop(group);
    // The child is gone: nothing is to read its stdin any more.
    pipes.stdin = None;
    // A failure needs nothing more from the pipes (dropping them closes them).
    ended?;

    // Collect the rest of both streams; with the group dead the pipes close at once.
    let grace = Instant::now() + DRAIN_GRACE;
    let drain_until = spec.answer_by.map_or(grace, |by| by.min(grace));
    while pipes.open() {
        let left = drain_until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Failure::Io(
                "its output pipes stayed open after its process group was killed (a descendant left the group)"
                    .to_string(),
            ));
        }
        pipes.pump(left).map_err(|e| Failure::Io(e.to_string()))?;
    }
    // A stream may have passed the cap only after the leader exited.
    if let Some(name) = pipes.overflow {
        return Err(Failure::Overflow(name));
    }
    let status = status.map_err(|e| Failure::Wait(format!("reaping it failed: {e}")))?;
    let [stdout, stderr] = pipes.data;
    Ok(Finished {
        status,
        stdout,
        stderr,
    })
}

/// The exact child environment: `HOME` and `AILANG_CACHE_DIR` = the episode's cache,
/// `PATH=/usr/bin:/bin`, `LANG=C`, `LC_ALL=C`, plus `AILANG_EXAMPLES` when a corpus is set.
/// Nothing of the daemon's own environment (keys, tokens, proxies) reaches the child.
pub fn child_env(cache: &Path, examples: Option<&Path>) -> Vec<(String, String)> {
    let cache = cache.display().to_string();
    let mut env = vec![
        ("HOME".to_string(), cache.clone()),
        ("PATH".to_string(), "/usr/bin:/bin".to_string()),
        ("LANG".to_string(), "C".to_string()),
        ("LC_ALL".to_string(), "C".to_string()),
        ("AILANG_CACHE_DIR".to_string(), cache),
    ];
    if let Some(dir) = examples {
        env.push(("AILANG_EXAMPLES".to_string(), dir.display().to_string()));
    }
    env
}
