//! Running the system `git`: a scrubbed environment, no hooks, no network, a
//! deadline, and a process group of its own that dies with the call and with
//! the daemon (`handler_kit::child`).

use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use handler_kit::child::Group;
use handler_kit::output::errno_text;
use handler_kit::worktree;

use crate::config::Author;

/// Most bytes kept of one git run's stdout (and, separately, stderr).
const MAX_CAPTURE: usize = 8 << 20;

/// Configuration forced on every run with `-c` (command-line config beats the
/// repository's own): no hooks, no fsmonitor program, no signing program, no
/// background maintenance, no network, no submodule recursion; git's own
/// refusal of `.git` look-alikes (HFS+ ignorable characters, NTFS short names
/// and trailing dots) whatever the platform; one self-contained index file; and no
/// repository found by discovery unless it has a working tree (`safe.bareRepository`): files an
/// agent writes into a plain worktree (`HEAD`, `objects/`, `refs/`, `config`) would otherwise
/// make git take the worktree itself for a bare repository whose config is the agent's.
const FORCED_CONFIG: [&str; 14] = [
    "core.hooksPath=/dev/null",
    // The user's attributes file (git reads it whatever GIT_CONFIG_GLOBAL says); `HOME` is
    // empty already, and `session new --repo` checks out with this same setting.
    "core.attributesFile=/dev/null",
    "core.fsmonitor=false",
    "commit.gpgSign=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "protocol.allow=never",
    "submodule.recurse=false",
    "core.quotePath=false",
    "advice.detachedHead=false",
    "core.protectHFS=true",
    "core.protectNTFS=true",
    "core.splitIndex=false",
    "safe.bareRepository=explicit",
];

/// Where one git run happens.
#[derive(Debug, Clone)]
pub struct Place<'a> {
    /// The working directory.
    pub cwd: &'a Path,
    /// `GIT_CEILING_DIRECTORIES`: no discovery above it.
    pub ceiling: Option<&'a Path>,
    /// `GIT_DIR` (with `GIT_WORK_TREE` = `cwd`): once the repository is known, git
    /// runs pinned to it and discovers nothing.
    pub git_dir: Option<&'a Path>,
    /// `GIT_INDEX_FILE`: a private index.
    pub index_file: Option<&'a Path>,
    /// The directory `cwd` names, opened: git starts there by descriptor
    /// (`handler_kit::worktree::run_in`), not by the path, which may have been swapped for a
    /// symlink since it was opened.
    pub dir: Option<BorrowedFd<'a>>,
    /// Pathspec magic (`:(exclude)…`) is read: without it every run passes
    /// `--literal-pathspecs`, so an agent's path is only ever a name. A caller that sets it
    /// spells each agent's path `:(literal)<path>` itself.
    pub pathspec_magic: bool,
}

/// The finished run of one git command.
#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    /// At most [`MAX_CAPTURE`] bytes of stdout.
    pub stdout: Vec<u8>,
    /// git wrote more stdout than was kept: what `stdout` lists is only a prefix.
    pub stdout_cut: bool,
    /// NUL bytes in the whole of stdout, kept or not: the number of records of a `-z` listing.
    pub stdout_records: usize,
    pub stderr: Vec<u8>,
}

/// Why a git run produced no [`Output`].
#[derive(Debug)]
pub enum RunError {
    /// The program could not be started.
    Spawn(io::Error),
    /// The deadline had passed before it was started: nothing ran.
    NotStarted,
    /// It did not finish before the deadline and was killed.
    Timeout,
    /// Talking to it failed.
    Io(io::Error),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Spawn(e) => write!(f, "cannot start: {}", errno_text(e)),
            RunError::NotStarted => f.write_str("not started: the time limit had run out"),
            RunError::Timeout => f.write_str("did not finish in time"),
            RunError::Io(e) => f.write_str(&errno_text(e)),
        }
    }
}

/// How the handler runs git.
#[derive(Debug)]
pub struct Git {
    /// Absolute path of the `git` program.
    program: PathBuf,
    /// The daemon's `PATH` (git needs none of its own, but helpers it runs
    /// from its exec path may).
    path_var: Option<OsString>,
    /// An empty directory used as `HOME`.
    home: PathBuf,
    /// Where private index files are made (one temporary directory per commit).
    scratch: PathBuf,
    author: Author,
}

/// Find `git` on `PATH`.
pub fn find_program(path_var: Option<&OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path_var = path_var?;
    std::env::split_paths(path_var)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join("git"))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

impl Git {
    /// A runner for `program`, with `home` as HOME and private indexes under
    /// `scratch`.
    pub fn new(
        program: PathBuf,
        path_var: Option<OsString>,
        home: PathBuf,
        scratch: PathBuf,
        author: Author,
    ) -> Git {
        Git {
            program,
            path_var,
            home,
            scratch,
            author,
        }
    }

    /// The directory private indexes are made in.
    pub fn scratch(&self) -> &Path {
        &self.scratch
    }

    /// The empty directory git sees as HOME.
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// The command with the scrubbed environment, forced config and place.
    fn command(&self, place: &Place<'_>, args: &[&OsStr]) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.env_clear();
        if let Some(p) = &self.path_var {
            cmd.env("PATH", p);
        }
        cmd.env("HOME", &self.home)
            .env("XDG_CONFIG_HOME", self.home.join(".config"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_ASKPASS", "/bin/false")
            .env("SSH_ASKPASS", "/bin/false")
            .env("GIT_NO_LAZY_FETCH", "1")
            .env("GIT_OPTIONAL_LOCKS", "0")
            .env("GIT_PAGER", "cat")
            .env("GIT_AUTHOR_NAME", &self.author.name)
            .env("GIT_AUTHOR_EMAIL", &self.author.email)
            .env("GIT_COMMITTER_NAME", &self.author.name)
            .env("GIT_COMMITTER_EMAIL", &self.author.email)
            .env("LC_ALL", "C")
            .env("LANG", "C");
        if let Some(c) = place.ceiling {
            cmd.env("GIT_CEILING_DIRECTORIES", c);
        }
        if let Some(dir) = place.git_dir {
            cmd.env("GIT_DIR", dir).env("GIT_WORK_TREE", place.cwd);
        }
        if let Some(index) = place.index_file {
            cmd.env("GIT_INDEX_FILE", index);
        }
        cmd.arg("--no-pager");
        if !place.pathspec_magic {
            cmd.arg("--literal-pathspecs");
        }
        for c in FORCED_CONFIG {
            cmd.arg("-c").arg(c);
        }
        cmd.args(args).current_dir(place.cwd);
        cmd
    }

    /// Run `git <args>` at `place`, feeding `stdin`; at `deadline` its whole
    /// process group (git and anything it started: filters, helpers) is killed.
    pub fn run(
        &self,
        place: &Place<'_>,
        args: &[&OsStr],
        stdin: Option<&[u8]>,
        deadline: Instant,
    ) -> Result<Output, RunError> {
        if Instant::now() >= deadline {
            return Err(RunError::NotStarted);
        }
        let group = Group::new().map_err(RunError::Spawn)?;
        let mut cmd = self.command(place, args);
        if let Some(dir) = place.dir {
            worktree::run_in(&mut cmd, dir).map_err(RunError::Spawn)?;
        }
        // The readers of git's stdout and stderr start before git does, and are handed its
        // pipes once it runs: a thread the OS refuses (a pids limit) then fails the run with
        // nothing started, no child to kill and reap, and a `git commit` that made nothing.
        let (out_pipe, out) = capture().map_err(RunError::Spawn)?;
        let (err_pipe, err) = capture().map_err(RunError::Spawn)?;
        cmd.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        group.prepare(&mut cmd);
        // Not started: the readers, never handed a pipe, end with nothing read.
        let mut child = cmd.spawn().map_err(RunError::Spawn)?;
        // A reader ends only after it was handed its pipe, so neither send can fail.
        if let Some(pipe) = child.stdout.take() {
            let _ = out_pipe.send(pipe);
        }
        if let Some(pipe) = child.stderr.take() {
            let _ = err_pipe.send(pipe);
        }
        if let (Some(bytes), Some(mut pipe)) = (stdin, child.stdin.take()) {
            // A commit message is at most a few KiB, under any pipe buffer, so
            // this cannot block on a child that does not read. A broken pipe is git gone
            // (or done with its input) before it read: its exit status and stderr say why.
            match pipe.write_all(bytes) {
                Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
                    drop(group);
                    let _ = child.wait();
                    return Err(RunError::Io(e));
                }
                _ => {}
            }
        }
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Ok(status),
                Ok(None) if Instant::now() >= deadline => break Err(RunError::Timeout),
                Ok(None) => thread::sleep(Duration::from_millis(2)),
                Err(e) => break Err(RunError::Io(e)),
            }
        };
        // Kill the group (on a timeout: git and its helpers; after an exit:
        // any straggler), then reap; the pipes close with the group.
        drop(group);
        let _ = child.wait();
        let (stdout, stderr) = (join(out), join(err));
        Ok(Output {
            status: status?,
            stdout: stdout.kept,
            stdout_cut: stdout.cut,
            stdout_records: stdout.nuls,
            stderr: stderr.kept,
        })
    }
}

/// What was read from one of git's pipes.
#[derive(Default)]
struct Captured {
    /// The first [`MAX_CAPTURE`] bytes.
    kept: Vec<u8>,
    /// More came than was kept.
    cut: bool,
    /// NUL bytes in all that came.
    nuls: usize,
}

/// A reader: it waits for the pipe sent to it, then reads it to its end (so git never blocks
/// on it), keeping the first [`MAX_CAPTURE`] bytes and counting what is not kept. Nothing is
/// read when no pipe comes. The error of a thread the OS refused.
fn capture<R: Read + Send + 'static>() -> io::Result<(mpsc::Sender<R>, JoinHandle<Captured>)> {
    #[cfg(test)]
    if FAIL_CAPTURE.with(std::cell::Cell::get) {
        return Err(io::Error::from_raw_os_error(libc::EAGAIN));
    }
    let (send, receive) = mpsc::channel::<R>();
    let reader = thread::Builder::new().spawn(move || {
        let mut c = Captured::default();
        let Ok(mut pipe) = receive.recv() else {
            return c;
        };
        let mut buf = [0u8; 8192];
        loop {
            match pipe.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let room = MAX_CAPTURE.saturating_sub(c.kept.len());
                    c.cut |= n > room;
                    c.nuls += buf[..n].iter().filter(|b| **b == 0).count();
                    c.kept.extend_from_slice(&buf[..n.min(room)]);
                }
            }
        }
        c
    })?;
    Ok((send, reader))
}

#[cfg(test)]
thread_local! {
    /// Tests: the capture threads this thread starts are refused, as the OS refuses a thread
    /// under a pids limit.
    static FAIL_CAPTURE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Tests: refuse (or allow again) the capture threads git runs started by this thread start.
#[cfg(test)]
pub(crate) fn refuse_capture_threads(refuse: bool) {
    FAIL_CAPTURE.with(|f| f.set(refuse));
}

fn join(handle: JoinHandle<Captured>) -> Captured {
    handle.join().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `program` run as git under `dir` (its state and home), on the test's `PATH`.
    fn git_in(program: PathBuf, dir: &Path) -> Git {
        Git::new(
            program,
            std::env::var_os("PATH"),
            dir.into(),
            dir.into(),
            Author {
                name: "T".into(),
                email: "t@example.invalid".into(),
            },
        )
    }

    #[test]
    fn a_capture_keeps_its_cap_and_counts_all_it_read() {
        let mut listing = b"a\0".repeat(MAX_CAPTURE / 2);
        let read = |bytes: Vec<u8>| {
            let (pipe, reader) = capture().unwrap();
            pipe.send(io::Cursor::new(bytes)).unwrap();
            join(reader)
        };
        let whole = read(listing.clone());
        assert_eq!(
            (whole.kept.len(), whole.cut, whole.nuls),
            (MAX_CAPTURE, false, MAX_CAPTURE / 2)
        );
        listing.extend_from_slice(b"bb\0");
        let over = read(listing);
        assert_eq!(
            (over.kept.len(), over.cut, over.nuls),
            (MAX_CAPTURE, true, MAX_CAPTURE / 2 + 1)
        );
    }

    /// The processes that are children of this one and run `name` (zombies too: the kernel
    /// keeps a zombie's name).
    fn children_named(name: &str) -> Vec<String> {
        let me = std::process::id().to_string();
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|entry| std::fs::read_to_string(entry.ok()?.path().join("stat")).ok())
            .filter(|stat| {
                // `pid (comm) state ppid …`: comm may hold spaces and parentheses.
                let Some((comm, rest)) =
                    stat.split_once(" (").and_then(|(_, r)| r.rsplit_once(") "))
                else {
                    return false;
                };
                comm == name && rest.split(' ').nth(1) == Some(me.as_str())
            })
            .collect()
    }

    /// A reader thread of git's output that the OS refused (a pids limit) panicked after git
    /// had started, and git, killed with its group, was never waited for: a zombie holding a
    /// pids slot. The readers start first now: the run fails as one that could not start, and
    /// no git ran.
    #[test]
    fn a_refused_reader_thread_fails_the_run_before_git_starts_and_leaves_no_child() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let started = tmp.path().join("started");
        // A program named for this test alone, which says that it ran.
        let probe = tmp.path().join("gitprobe-reader");
        std::fs::write(
            &probe,
            format!("#!/bin/sh\necho ran >> '{}'\n", started.display()),
        )
        .unwrap();
        std::fs::set_permissions(&probe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let git = git_in(probe, tmp.path());
        let place = Place {
            cwd: tmp.path(),
            ceiling: Some(tmp.path()),
            git_dir: None,
            index_file: None,
            dir: None,
            pathspec_magic: false,
        };
        let run = || {
            git.run(
                &place,
                &[OsStr::new("status")],
                None,
                Instant::now() + Duration::from_secs(10),
            )
        };
        refuse_capture_threads(true);
        let refused = run();
        refuse_capture_threads(false);
        match refused {
            Err(RunError::Spawn(e)) => assert_eq!(e.raw_os_error(), Some(libc::EAGAIN)),
            other => panic!("expected a run that could not start, got {other:?}"),
        }
        // Time enough for a program that had been started to say so.
        thread::sleep(Duration::from_millis(300));
        assert!(!started.exists(), "the program ran");
        assert_eq!(children_named("gitprobe-reader"), Vec::<String>::new());
        // The probe is a fair one: allowed its readers, it runs, and is reaped.
        let ran = run().unwrap();
        assert!(ran.status.success());
        assert_eq!(std::fs::read_to_string(&started).unwrap(), "ran\n");
        assert_eq!(children_named("gitprobe-reader"), Vec::<String>::new());
    }

    /// The worktree swapped for a symlink to another directory after it was opened: git
    /// starts in the directory opened, not where the path leads now.
    #[test]
    fn a_git_run_starts_in_the_opened_worktree_even_after_its_path_is_swapped_for_a_symlink() {
        let tmp = tempfile::tempdir().unwrap();
        let (ep, outside) = (tmp.path().join("ep"), tmp.path().join("outside"));
        for (dir, mark) in [(&ep, "inside\n"), (&outside, "outside\n")] {
            std::fs::create_dir(dir).unwrap();
            std::fs::write(dir.join("mark"), mark).unwrap();
        }
        let dir = worktree::open(&ep).unwrap();
        std::fs::rename(&ep, tmp.path().join("ep.moved")).unwrap();
        std::os::unix::fs::symlink(&outside, &ep).unwrap();
        let git = git_in("git".into(), tmp.path());
        // `git hash-object mark` needs no repository: the id of the mark where git runs.
        let hash = |place: &Place<'_>| {
            let out = git
                .run(
                    place,
                    &[OsStr::new("hash-object"), OsStr::new("mark")],
                    None,
                    Instant::now() + Duration::from_secs(10),
                )
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap()
        };
        let by_path = |cwd| Place {
            cwd,
            ceiling: Some(tmp.path()),
            git_dir: None,
            index_file: None,
            dir: None,
            pathspec_magic: false,
        };
        let moved = tmp.path().join("ep.moved");
        let (inside, outside) = (hash(&by_path(&moved)), hash(&by_path(&ep)));
        assert_ne!(inside, outside);
        let opened = Place {
            dir: Some(std::os::fd::AsFd::as_fd(&dir)),
            ..by_path(&ep)
        };
        assert_eq!(hash(&opened), inside, "git ran where the path leads now");
    }
}
