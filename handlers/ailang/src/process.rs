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
//! that spawned it, which the parent-death signal requires.

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
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
    pub cwd: PathBuf,
    /// The child's entire environment.
    pub env: Vec<(String, String)>,
    pub stdin: Vec<u8>,
    /// Kill the group at this instant.
    pub deadline: Instant,
    /// The time limit the deadline stands for (the whole effect's), for messages.
    pub limit: Duration,
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
    /// It could not be started.
    Spawn(io::Error),
    /// The deadline passed; the group was killed.
    Timeout(Duration),
    /// A stream exceeded the cap; the group was killed.
    Overflow(&'static str),
    /// Waiting or reading failed, or a descendant outside the group kept a pipe open.
    Io(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Spawn(e) => write!(f, "could not be started: {e}"),
            Failure::Timeout(d) => write!(
                f,
                "did not finish within the effect's time limit of {} ms; its process group was killed",
                d.as_millis()
            ),
            Failure::Overflow(stream) => write!(
                f,
                "wrote more than {OUTPUT_CAP} bytes to {stream}; its process group was killed (output is never truncated)"
            ),
            Failure::Io(e) => write!(f, "failed: {e}"),
        }
    }
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

/// Stream names by reader index.
const STREAMS: [&str; 2] = ["stdout", "stderr"];

fn reader(
    mut source: impl Read + Send + 'static,
    cap: usize,
    overflow: Arc<AtomicUsize>,
    tx: mpsc::Sender<(usize, io::Result<Vec<u8>>)>,
    index: usize,
) {
    thread::spawn(move || {
        let mut data = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        let result = loop {
            match source.read(&mut buf) {
                Ok(0) => break Ok(data),
                Ok(n) => {
                    if data.len() + n > cap {
                        // Stop reading: the main loop kills the group, which closes the pipe.
                        // The first stream to overflow is the one reported (index + 1).
                        let _ = overflow.compare_exchange(
                            0,
                            index + 1,
                            Ordering::SeqCst,
                            Ordering::SeqCst,
                        );
                        break Ok(data);
                    }
                    data.extend_from_slice(&buf[..n]);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => break Err(e),
            }
        };
        let _ = tx.send((index, result));
    });
}

fn overflowed(flag: &AtomicUsize) -> Option<&'static str> {
    STREAMS
        .get(flag.load(Ordering::SeqCst).checked_sub(1)?)
        .copied()
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
    command
        .args(&spec.args)
        .current_dir(&spec.cwd)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let group = Group::new().map_err(Failure::Spawn)?;
    group.prepare(&mut command);
    handler_kit::child::limit_memory(&mut command, spec.memory);
    let mut child = spawn(&mut command).map_err(Failure::Spawn)?;
    let pid = child.id() as i32;

    let overflow = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = mpsc::channel();
    if let Some(out) = child.stdout.take() {
        reader(out, spec.cap, overflow.clone(), tx.clone(), 0);
    }
    if let Some(err) = child.stderr.take() {
        reader(err, spec.cap, overflow.clone(), tx.clone(), 1);
    }
    drop(tx);
    if let Some(mut stdin) = child.stdin.take() {
        let bytes = spec.stdin;
        // A child that never reads stdin makes this write fail (EPIPE) or block until the
        // group is killed; either way the thread ends and nothing waits for it.
        thread::spawn(move || {
            let _ = stdin.write_all(&bytes);
        });
    }

    let mut pause = Duration::from_millis(1);
    let ended: Result<(), Failure> = loop {
        match exited(pid) {
            Ok(true) => break Ok(()),
            Ok(false) => {}
            Err(e) => break Err(Failure::Io(format!("waiting for it failed: {e}"))),
        }
        if let Some(name) = overflowed(&overflow) {
            break Err(Failure::Overflow(name));
        }
        let now = Instant::now();
        if now >= spec.deadline {
            break Err(Failure::Timeout(spec.limit));
        }
        thread::sleep(pause.min(spec.deadline - now));
        pause = (pause * 2).min(Duration::from_millis(10));
    };
    group.kill();
    let status = child.wait();
    drop(group);

    // Collect both streams; with the group dead the pipes close at once.
    let mut streams: [Option<io::Result<Vec<u8>>>; 2] = [None, None];
    let drain_until = Instant::now() + DRAIN_GRACE;
    while streams.iter().any(Option::is_none) {
        let left = drain_until.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((i, r)) => streams[i] = Some(r),
            Err(_) => {
                ended?;
                return Err(Failure::Io(
                    "its output pipes stayed open after its process group was killed (a descendant left the group)"
                        .to_string(),
                ));
            }
        }
    }
    ended?;
    // A reader may have seen the overflow only after the leader exited.
    if let Some(name) = overflowed(&overflow) {
        return Err(Failure::Overflow(name));
    }
    let status = status.map_err(|e| Failure::Io(format!("reaping it failed: {e}")))?;
    let [out, err] = streams;
    let take = |s: Option<io::Result<Vec<u8>>>, name: &str| match s {
        Some(Ok(v)) => Ok(v),
        Some(Err(e)) => Err(Failure::Io(format!("reading its {name} failed: {e}"))),
        None => Ok(Vec::new()),
    };
    Ok(Finished {
        status,
        stdout: take(out, "stdout")?,
        stderr: take(err, "stderr")?,
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
