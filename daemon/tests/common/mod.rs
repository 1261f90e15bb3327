//! Harness for end-to-end tests: the real `worldd` binary, real plugin libraries from the
//! target directory, a real LMDB store in a temp dir, real HTTP on loopback.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

pub mod clients;
pub mod fixtures;
pub mod why;

pub const WORLDD: &str = env!("CARGO_BIN_EXE_worldd");

/// The cargo target profile directory (…/target/debug).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// The worldd checkout (the parent of `daemon/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Find a built plugin library by its lib name (e.g. `worldd_workspace`). The test plugin
/// `worldd_stall` is a fixture built on its own ([`fixtures::stall_library`]).
pub fn plugin_library(name: &str) -> PathBuf {
    if name == "worldd_stall" {
        return fixtures::stall_library().to_path_buf();
    }
    let file = format!("lib{name}.so");
    let dir = target_dir();
    for candidate in [dir.join(&file), dir.join("deps").join(&file)] {
        if candidate.exists() {
            return candidate;
        }
    }
    panic!(
        "{file} is not built in {}; run `cargo build --workspace` first",
        dir.display()
    );
}

pub struct Daemon {
    pub dir: tempfile::TempDir,
    pub child: Child,
    pub addr: String,
    /// Its stderr, read as it comes ([`Log`]).
    log: Option<Log>,
}

/// A daemon's stderr (its log), read by a thread of its own from the ready line on: a daemon
/// whose stderr pipe nobody read blocked writing its log once the pipe was full (64 KiB), and
/// stopped accepting (a worker blocked holding the log's lock, the other waiting for it).
struct Log {
    seen: Arc<Mutex<Seen>>,
    /// In a mutex so that a daemon stays unwind-safe (tests catch panics around requests).
    reader: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// What a [`Log`] has read so far, and who follows its lines.
#[derive(Default)]
struct Seen {
    text: String,
    followers: Vec<mpsc::Sender<String>>,
    /// The daemon's stderr has ended.
    ended: bool,
}

impl Log {
    fn read(stderr: std::process::ChildStderr) -> Log {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let sink = seen.clone();
        let reader = std::thread::spawn(move || {
            // Bytes that are not UTF-8 do not stop the reading (the pipe would fill again).
            for line in BufReader::new(stderr).split(b'\n') {
                let Ok(line) = line else { break };
                let line = String::from_utf8_lossy(&line).into_owned();
                let mut seen = sink.lock().unwrap();
                seen.text.push_str(&line);
                seen.text.push('\n');
                seen.followers.retain(|f| f.send(line.clone()).is_ok());
            }
            // The followers' receivers end here.
            let mut seen = sink.lock().unwrap();
            seen.followers.clear();
            seen.ended = true;
        });
        Log {
            seen,
            reader: Mutex::new(Some(reader)),
        }
    }

    /// Every line so far, then each as it comes.
    fn lines(&self) -> mpsc::Receiver<String> {
        let (tx, rx) = mpsc::channel();
        let mut seen = self.seen.lock().unwrap();
        for line in seen.text.lines() {
            let _ = tx.send(line.to_owned());
        }
        if !seen.ended {
            seen.followers.push(tx);
        }
        rx
    }

    /// Everything read once the daemon has exited.
    fn finish(self) -> String {
        if let Some(reader) = self.reader.lock().unwrap().take() {
            let _ = reader.join();
        }
        std::mem::take(&mut self.seen.lock().unwrap().text)
    }
}

impl Daemon {
    pub fn db(&self) -> PathBuf {
        self.dir.path().join("db")
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().join("worktrees")
    }

    pub fn plugin_dir(&self) -> PathBuf {
        self.dir.path().join("plugins")
    }

    /// Start `worldd serve` on a free port with the given plugins and extra args; waits for
    /// the one ready line.
    pub fn start(plugins: &[&str], extra: &[&str]) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        Daemon::start_in(dir, plugins, extra)
    }

    /// Start with extra environment variables for the daemon.
    pub fn start_env(plugins: &[&str], extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        Daemon::start_in_env(dir, plugins, extra, env)
    }

    pub fn start_in(dir: tempfile::TempDir, plugins: &[&str], extra: &[&str]) -> Daemon {
        Daemon::start_in_env(dir, plugins, extra, &[])
    }

    fn start_in_env(
        dir: tempfile::TempDir,
        plugins: &[&str],
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Daemon {
        let mut cmd = Daemon::serve_command(&dir, plugins);
        cmd.args(extra).envs(env.iter().copied());
        Daemon::spawn(dir, cmd)
    }

    /// `worldd serve` on `dir` (store, worktrees, a plugin directory holding `plugins`) on a
    /// free loopback port, its output piped; add flags, environment or a working directory,
    /// then [`Daemon::spawn`] it.
    pub fn serve_command(dir: &tempfile::TempDir, plugins: &[&str]) -> Command {
        Daemon::serve_command_on(dir, plugins, "127.0.0.1:0", &dir.path().join("worktrees"))
    }

    /// [`Daemon::serve_command`] bound to `bind`, with the workspace root `root`.
    pub fn serve_command_on(
        dir: &tempfile::TempDir,
        plugins: &[&str],
        bind: &str,
        root: &Path,
    ) -> Command {
        let plugin_dir = plugin_dir_with(dir.path(), plugins);
        let mut cmd = Command::new(WORLDD);
        cmd.arg("serve")
            .arg("--db")
            .arg(dir.path().join("db"))
            .arg("--workspace-root")
            .arg(root)
            .arg("--bind")
            .arg(bind)
            .arg("--plugin-dir")
            .arg(&plugin_dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// Spawn a prepared `worldd serve` command (stdout piped) and wait for its ready line, at
    /// most a minute: a daemon that neither listens nor ends fails the test instead of holding
    /// the whole run.
    pub fn spawn(dir: tempfile::TempDir, mut cmd: Command) -> Daemon {
        let mut child = cmd.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let read = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(read.map(|_| line));
        });
        let line = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(read) => read.unwrap(),
            Err(_) => {
                let _ = child.kill();
                let out = child.wait_with_output().unwrap();
                panic!(
                    "daemon neither listened nor ended in 60 s; stderr: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        };
        let addr = match line.trim().strip_prefix("worldd listening on http://") {
            Some(a) => a.to_owned(),
            None => {
                let _ = child.kill();
                let out = child.wait_with_output().unwrap();
                panic!(
                    "daemon did not start: {line:?}; stderr: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        };
        let log = child.stderr.take().map(Log::read);
        Daemon {
            dir,
            child,
            addr,
            log,
        }
    }

    /// Everything the daemon has written to stderr (its log) so far.
    pub fn log(&self) -> String {
        self.log
            .as_ref()
            .map(|l| l.seen.lock().unwrap().text.clone())
            .unwrap_or_default()
    }

    /// Wait (at most 10 s) until the daemon's log contains `needle`: its stderr is read by a
    /// thread of its own, so a line written just before an answer may not be read yet.
    pub fn wait_for_log(&self, needle: &str) {
        self.wait_for_log_where(&format!("{needle:?}"), |log| log.contains(needle));
    }

    /// Wait (at most 10 s) until the daemon's log holds `needle` at least `count` times (as
    /// [`Daemon::wait_for_log`] waits for one); the log read then.
    pub fn wait_for_log_count(&self, needle: &str, count: usize) -> String {
        self.wait_for_log_where(&format!("{needle:?} {count} times"), |log| {
            log.matches(needle).count() >= count
        })
    }

    /// Wait (at most 10 s) until `done` holds of the daemon's log (`what` names it in the
    /// failure); the log read then.
    pub fn wait_for_log_where(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let log = self.log();
            if done(&log) {
                return log;
            }
            assert!(
                Instant::now() < until,
                "the daemon never logged {what}; its log:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The daemon's log with every line it wrote before this call read. For a line that must
    /// be absent: a log read at once may not hold yet a line written before an answer. The
    /// daemon is sent SIGUSR1, which it says (and ignores) in a WARN line written after every
    /// earlier one; the log is read once that line is. (Not for a daemon started with SIGUSR1
    /// ignored or its log above WARN.)
    pub fn log_so_far(&self) -> String {
        const SAID: &str = "SIGUSR1 ignored: worldd does not reopen its log";
        let before = self.log().matches(SAID).count();
        self.signal(libc::SIGUSR1);
        self.wait_for_log_count(SAID, before + 1)
    }

    /// Every line the daemon has written to stderr so far, then each as it comes; the
    /// receiver ends when the daemon's stderr does.
    pub fn log_lines(&self) -> mpsc::Receiver<String> {
        match &self.log {
            Some(log) => log.lines(),
            None => mpsc::channel().1,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Mint a session directly in the store (the daemon keeps running: LMDB serialises
    /// writers across processes). Also creates the episode's worktree.
    pub fn session(&self, episode: &str, grants: &[&str]) -> String {
        std::fs::create_dir_all(self.root().join(episode)).unwrap();
        self.session_without_worktree(episode, grants)
    }

    /// A session of `episode` minted straight into the store, without creating its worktree.
    pub fn session_without_worktree(&self, episode: &str, grants: &[&str]) -> String {
        self.mint_with(broker_core::session::mint, episode, grants)
    }

    /// `token` in the session file `NAME.session` of the daemon's directory (mode 0600), as
    /// an agent or the operator keeps it for the client verbs' `--session`.
    pub fn session_file(&self, name: &str, token: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let file = self.dir.path().join(format!("{name}.session"));
        std::fs::write(&file, format!("{token}\n")).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        file
    }

    /// Revoke `token`'s credential with `worldd session revoke` (another process than the
    /// daemon, as an operator does it).
    pub fn revoke_by_cli(&self, token: &str) {
        let id = broker_core::session::credential_id(token);
        let (code, _, err) = worldd(
            &["session", "revoke", "--db", path_str(&self.db()), &id],
            None,
        );
        assert_eq!(code, 0, "{err}");
    }

    /// Mint an operator credential directly in the store (as `session mint --operator`).
    pub fn operator_session(&self, episode: &str, grants: &[&str]) -> String {
        self.mint_with(broker_core::session::mint_operator, episode, grants)
    }

    fn mint_with<E: std::fmt::Debug>(
        &self,
        mint: impl FnOnce(
            &broker_core::store::Store,
            &str,
            Vec<broker_core::grant::Grant>,
            i64,
            i64,
        ) -> Result<broker_core::session::Minted, E>,
        episode: &str,
        grants: &[&str],
    ) -> String {
        let store = broker_core::store::Store::open(&self.db(), Default::default()).unwrap();
        let grants = grants.iter().map(|g| g.parse().unwrap()).collect();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        mint(&store, episode, grants, 3600, now).unwrap().token
    }

    /// Kill this daemon and start another on the same directory (store, worktrees).
    pub fn restart(mut self, plugins: &[&str], extra: &[&str]) -> Daemon {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap());
        let _ = std::fs::remove_dir_all(dir.path().join("plugins"));
        Daemon::start_in(dir, plugins, extra)
    }

    /// Kill the daemon and keep its directory (store, worktrees).
    pub fn halt(mut self) -> tempfile::TempDir {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap())
    }

    /// SIGTERM and wait; returns the exit status.
    pub fn stop(mut self) -> std::process::ExitStatus {
        self.terminate(Duration::from_secs(5)).0
    }

    /// A credential of `episode` that expired a minute ago (`Workspace.Read`), minted in the
    /// daemon's store beside it.
    pub fn expired_session(&self, episode: &str) -> String {
        let store = broker_core::store::Store::open(&self.db(), Default::default()).unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let g = vec!["Workspace.Read=worktree:5".parse().unwrap()];
        broker_core::session::mint(&store, episode, g, 1, now - 60)
            .unwrap()
            .token
    }

    /// SIGTERM and wait up to `limit`; keep the directory (store, worktrees). The exit status,
    /// how long the exit took, everything the daemon wrote to stderr (its log), and the
    /// directory.
    pub fn stop_with_log(
        mut self,
        limit: Duration,
    ) -> (
        std::process::ExitStatus,
        Duration,
        String,
        tempfile::TempDir,
    ) {
        let (status, took) = self.terminate(limit);
        let (dir, log) = self.into_dir_and_log();
        (status, took, log, dir)
    }

    /// Send `signal` to the daemon and wait up to `limit` for it to exit; the exit status and
    /// everything it wrote to stderr.
    pub fn stop_by(
        mut self,
        signal: libc::c_int,
        limit: Duration,
    ) -> (std::process::ExitStatus, String) {
        let (status, _) = self.signalled(signal, limit);
        (status, self.into_dir_and_log().1)
    }

    /// Send `signal` to the daemon (which may go on serving).
    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: a plain kill(2) of our own child; no memory is involved.
        unsafe {
            libc::kill(self.child.id() as i32, signal);
        }
    }

    /// SIGTERM, then wait up to `limit` for the exit (killed, and the test fails, past it).
    fn terminate(&mut self, limit: Duration) -> (std::process::ExitStatus, Duration) {
        self.signalled(libc::SIGTERM, limit)
    }

    fn signalled(
        &mut self,
        signal: libc::c_int,
        limit: Duration,
    ) -> (std::process::ExitStatus, Duration) {
        let started = std::time::Instant::now();
        self.signal(signal);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (status, started.elapsed());
            }
            if started.elapsed() > limit {
                let _ = self.child.kill();
                panic!("daemon did not stop on signal {signal} within {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The directory, and everything the (exited or killed) daemon wrote to stderr.
    fn into_dir_and_log(mut self) -> (tempfile::TempDir, String) {
        let text = self.log.take().map(Log::finish).unwrap_or_default();
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap());
        (dir, text)
    }
}

impl Daemon {
    /// Kill the daemon; keep its directory and return everything it wrote to stderr (its
    /// log).
    pub fn halt_with_log(mut self) -> (tempfile::TempDir, String) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.into_dir_and_log()
    }
}

/// Run `cmd` to its exit, its output captured. A process still running after `within` (a
/// daemon that started where it should have stopped) is killed, and its output returned with
/// `(still running after N s: killed)` appended to its stderr, instead of keeping the test
/// waiting.
pub fn run_to_exit(cmd: &mut Command, within: Duration) -> std::process::Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = std::time::Instant::now() + within;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > until {
            let _ = child.kill();
            let mut out = child.wait_with_output().unwrap();
            let note = format!("\n(still running after {} s: killed)", within.as_secs());
            out.stderr.extend_from_slice(note.as_bytes());
            return out;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// How `worldd serve` stopped at start-up.
pub struct Refusal {
    /// Its exit code (`None` when it was still serving after 30 s and was stopped).
    pub code: Option<i32>,
    /// Its `worldd: …` line: log lines before it start with their time, and a TOML error's
    /// excerpt of the file follows it.
    pub line: String,
    pub stderr: String,
}

/// Run `worldd serve ARGS` in `cwd` with `WORLDD_LOG=warn`, expecting it to stop at start-up.
pub fn refused_start<S: AsRef<std::ffi::OsStr>>(args: &[S], cwd: &Path) -> Refusal {
    refused_start_by(Command::new(WORLDD), args, cwd)
}

/// [`refused_start`] with `worldd` run by `command` (e.g. `runuser -u nobody -- WORLDD`).
pub fn refused_start_by<S: AsRef<std::ffi::OsStr>>(
    mut command: Command,
    args: &[S],
    cwd: &Path,
) -> Refusal {
    let out = run_to_exit(
        command
            .arg("serve")
            .args(args)
            .current_dir(cwd)
            .env("WORLDD_LOG", "warn"),
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let line = stderr
        .lines()
        .rfind(|l| l.starts_with("worldd: "))
        .unwrap_or("")
        .to_owned();
    Refusal {
        code: out.status.code(),
        line,
        stderr,
    }
}

/// [`refused_start`] of `worldd serve` on the store `db` with the workspace root `root`, on a
/// free port, with `flags` after those.
pub fn refused_serve_on(db: &Path, root: &Path, flags: &[&str], cwd: &Path) -> Refusal {
    let args = [
        &[
            "--db",
            path_str(db),
            "--workspace-root",
            path_str(root),
            "--bind",
            "127.0.0.1:0",
        ][..],
        flags,
    ]
    .concat();
    refused_start(&args, cwd)
}

/// A test that needs to mount (root) and could not: `None`, and the test skips, unless
/// `WORLDD_TESTS_REQUIRE_MOUNTS` is set (CI runs as root), where a skip would report a pass
/// for a test that never ran.
pub fn mount_failed<T>(what: &str) -> Option<T> {
    if std::env::var_os("WORLDD_TESTS_REQUIRE_MOUNTS").is_some_and(|v| !v.is_empty()) {
        panic!("{what} failed, and WORLDD_TESTS_REQUIRE_MOUNTS is set");
    }
    None
}

/// A small tmpfs mounted on a temporary directory, unmounted on drop: a real filesystem that
/// runs out of space. `None` when this process may not mount (not root; see [`mount_failed`]).
pub struct Tmpfs {
    pub dir: tempfile::TempDir,
}

impl Tmpfs {
    pub fn mount(bytes: u64) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().ok()?;
        let ok = Command::new("mount")
            // 0700, as worldd makes its directories: a tmpfs's root is 1777 by default, which
            // worldd refuses for a store or a workspace root (anyone could swap what is there).
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={bytes},mode=0700"),
                "tmpfs",
            ])
            .arg(dir.path())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return mount_failed("mounting a tmpfs");
        }
        Some(Tmpfs { dir })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// `source` bind-mounted read-only at `at`, unmounted on drop: a store on a read-only
/// filesystem. `None` when this process may not mount (not root).
pub struct BindMount {
    at: PathBuf,
}

impl BindMount {
    pub fn read_only(source: &Path, at: &Path) -> Option<BindMount> {
        let run = |args: &[&std::ffi::OsStr]| {
            Command::new("mount")
                .args(args)
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if !run(&["--bind".as_ref(), source.as_os_str(), at.as_os_str()]) {
            return mount_failed("a bind mount");
        }
        let mount = BindMount {
            at: at.to_path_buf(),
        };
        if !run(&["-o".as_ref(), "remount,bind,ro".as_ref(), at.as_os_str()]) {
            drop(mount);
            return mount_failed("remounting a bind mount read-only");
        }
        Some(mount)
    }
}

impl Drop for BindMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.at).status();
    }
}

/// A library that, preloaded (`LD_PRELOAD`), makes the kernel's answer to `statfs` name NFS
/// for every path under `$SHIM_NFS_UNDER`: a store on a network filesystem, for a test with no
/// NFS server. Built with the C compiler into `dir`; its path.
pub fn nfs_shim(dir: &Path) -> PathBuf {
    let source = dir.join("nfs_shim.c");
    std::fs::write(
        &source,
        r#"#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>

static int under(const char *path) {
    const char *dir = getenv("SHIM_NFS_UNDER");
    return dir && path && strncmp(path, dir, strlen(dir)) == 0;
}

int statfs(const char *path, struct statfs *buf) {
    int (*real)(const char *, struct statfs *) = dlsym(RTLD_NEXT, "statfs");
    int r = real(path, buf);
    if (r == 0 && under(path)) buf->f_type = 0x6969;
    return r;
}

int statfs64(const char *path, struct statfs64 *buf) {
    int (*real)(const char *, struct statfs64 *) = dlsym(RTLD_NEXT, "statfs64");
    int r = real(path, buf);
    if (r == 0 && under(path)) buf->f_type = 0x6969;
    return r;
}
"#,
    )
    .unwrap();
    let lib = dir.join("libnfs_shim.so");
    let built = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&source)
        .arg("-ldl")
        .status()
        .unwrap();
    assert!(built.success(), "cc could not build the statfs shim");
    lib
}

/// `worldd` run with [`nfs_shim`] preloaded, every path under `nfs` on "NFS".
pub fn worldd_on_nfs(shim: &Path, nfs: &Path) -> Command {
    let mut cmd = Command::new(WORLDD);
    cmd.env("LD_PRELOAD", shim).env("SHIM_NFS_UNDER", nfs);
    cmd
}

/// Mint a session with `worldd session mint` at a pseudo-terminal (`script`), answering `y`.
/// Returns (exit code, what the terminal showed).
pub fn mint_at_terminal(db: &Path, args: &str) -> (i32, String) {
    at_terminal(
        &format!("{WORLDD} session mint --db {} {args}", db.display()),
        b"y\n",
    )
}

/// Run the shell command `cmd` at a pseudo-terminal (`script`), typing `typed` into it.
/// Returns (exit code, what the terminal showed).
pub fn at_terminal(cmd: &str, typed: &[u8]) -> (i32, String) {
    let mut child = Command::new("script")
        .args(["-qec", cmd, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(typed).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP answer.
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    /// The `Retry-After` header, when there was one.
    pub retry_after: Option<String>,
    /// Every header field, its name lowercased, in the order sent.
    pub fields: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    /// The first header field named `name` (lowercase), when there was one.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The JSON-RPC object in an SSE `message` event.
    pub fn sse_json(&self) -> Value {
        let text = self.text();
        let data = text
            .lines()
            .find_map(|l| l.strip_prefix("data: "))
            .unwrap_or_else(|| panic!("not SSE: {text}"));
        serde_json::from_str(data).unwrap()
    }

    /// The JSON-RPC reply, whether it came as an SSE event or a plain envelope.
    pub fn rpc_json(&self) -> Value {
        if self.content_type.starts_with("text/event-stream") {
            self.sse_json()
        } else {
            self.json()
        }
    }
}

pub fn request(
    method: &str,
    url: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Answer {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build();
    let mut req = agent.request(method, url);
    if let Some(t) = token {
        req = req.set("Authorization", &format!("Bearer {t}"));
    }
    for (k, v) in headers {
        req = req.set(k, v);
    }
    let res = match body {
        Some(b) => req.send_bytes(b),
        None => req.call(),
    };
    let res = match res {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{method} {url}: {e}"),
    };
    let status = res.status();
    let content_type = res.header("content-type").unwrap_or("").to_owned();
    let retry_after = res.header("retry-after").map(str::to_owned);
    let fields = res
        .headers_names()
        .into_iter()
        .flat_map(|name| {
            let values: Vec<(String, String)> = res
                .all(&name)
                .into_iter()
                .map(|v| (name.to_ascii_lowercase(), v.to_owned()))
                .collect();
            values
        })
        .collect();
    let mut body = Vec::new();
    std::io::Read::read_to_end(&mut res.into_reader(), &mut body).unwrap();
    Answer {
        status,
        content_type,
        retry_after,
        fields,
        body,
    }
}

pub fn get(url: &str, token: Option<&str>) -> Answer {
    request("GET", url, token, &[], None)
}

pub fn post_json(url: &str, token: Option<&str>, body: &Value) -> Answer {
    request(
        "POST",
        url,
        token,
        &[("Content-Type", "application/json")],
        Some(&serde_json::to_vec(body).unwrap()),
    )
}

/// An agent, `mallory`, calls `ailang-read` with arguments equal to the plan the victim's next
/// read of `notes.txt` makes (plans are deterministic): its call is refused, but those bytes are
/// stored first as its input. Then the victim reads. The victim's credential, the plan, and
/// the victim's entry index.
pub fn a_plan_stored_first_as_another_calls_input(d: &Daemon) -> (String, Value, u64) {
    let mallory = d.session("mallory", &["Workspace.Read=worktree:5"]);
    let victim = d.session("victim", &["Workspace.Read=worktree:5"]);
    std::fs::write(d.root().join("victim/notes.txt"), "password=hunter2\n").unwrap();
    let plan = serde_json::json!({"effects": [{"cost": 1, "effect": "Workspace.Read", "id": "e1",
        "payload": {"op": "read", "path": "notes.txt"}, "scope": "worktree"}],
        "finish": false, "plan": "world/effect-plan/v1", "result": null});
    a2a(d, &mallory, "poison", "ailang-read", plan.clone());
    let v = a2a(
        d,
        &victim,
        "read",
        "ailang-read",
        serde_json::json!({"path": "notes.txt"}),
    );
    let index = v["result"]["metadata"]["entry_index"].as_u64().unwrap();
    (victim, plan, index)
}

/// A2A `tasks/send`.
pub fn a2a(d: &Daemon, token: &str, task: &str, skill: &str, args: Value) -> Value {
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "tasks/send",
        "params": {"id": task, "metadata": {"skill_id": skill},
                   "message": {"role": "user", "parts": [{"type": "data", "data": args}]}}
    });
    let a = post_json(&d.url("/a2a/"), Some(token), &body);
    assert_eq!(a.status, 200, "{}", a.text());
    a.json()
}

/// `POST /a2a/` of `body` as written (text a serializer would not write included), with
/// `A2A-Version: version` if given.
pub fn post_a2a(d: &Daemon, token: Option<&str>, version: Option<&str>, body: &str) -> Answer {
    let mut headers = vec![("Content-Type", "application/json")];
    if let Some(v) = version {
        headers.push(("A2A-Version", v));
    }
    request(
        "POST",
        &d.url("/a2a/"),
        token,
        &headers,
        Some(body.as_bytes()),
    )
}

/// The JSON-RPC answer to `body` under `version` ([`post_a2a`]), which must come with status
/// 200.
pub fn a2a_answer(d: &Daemon, token: Option<&str>, version: Option<&str>, body: &Value) -> Value {
    let a = post_a2a(d, token, version, &body.to_string());
    assert_eq!(a.status, 200, "{}", a.text());
    a.json()
}

/// MCP `tools/call` of `tool` with `args`: the JSON-RPC reply (SSE or plain envelope), which
/// must come with status 200.
pub fn tools_call(d: &Daemon, token: &str, tool: &str, args: Value) -> Value {
    let a = mcp(
        d,
        token,
        "tools/call",
        serde_json::json!({"name": tool, "arguments": args}),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    a.rpc_json()
}

/// MCP `tools/call` (2025-11-25).
pub fn mcp(d: &Daemon, token: &str, method: &str, params: Value) -> Answer {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    mcp_text(d, token, "2025-11-25", &serde_json::to_vec(&body).unwrap())
}

/// POST `body` to `/mcp/` as it is (text a serializer would not write, such as an integer
/// wider than 64 bits), under MCP revision `version`.
pub fn mcp_text(d: &Daemon, token: &str, version: &str, body: &[u8]) -> Answer {
    mcp_post(d, token, version, &[], body)
}

/// POST `body` to `/mcp/` under revision `version`, with the `more` header fields after the
/// ones every MCP POST carries.
fn mcp_post(d: &Daemon, token: &str, version: &str, more: &[(&str, &str)], body: &[u8]) -> Answer {
    let mut fields = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", version),
    ];
    fields.extend_from_slice(more);
    request("POST", &d.url("/mcp/"), Some(token), &fields, Some(body))
}

/// Run `worldd` with args; returns (exit code, stdout, stderr).
/// How long [`worldd`] waits for a verb to end.
const WORLDD_VERB_LIMIT: Duration = Duration::from_secs(120);

pub fn worldd(args: &[&str], stdin: Option<&[u8]>) -> (i32, String, String) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let mut child = Command::new(WORLDD)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut sin = child.stdin.take().unwrap();
        if let Some(b) = stdin {
            sin.write_all(b).unwrap();
        }
    }
    // A verb that does not end (a `serve` a test expected to be refused, which started) fails
    // the test after two minutes instead of holding the suite forever.
    let (pid, ended, killed) = (
        child.id() as libc::pid_t,
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let watch = (ended.clone(), killed.clone());
    std::thread::spawn(move || {
        let until = std::time::Instant::now() + WORLDD_VERB_LIMIT;
        while std::time::Instant::now() < until {
            if watch.0.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if !watch.0.load(Ordering::SeqCst) {
            watch.1.store(true, Ordering::SeqCst);
            // SAFETY: signals the child this test started, which has not been waited for.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    });
    let out = child.wait_with_output().unwrap();
    ended.store(true, Ordering::SeqCst);
    assert!(
        !killed.load(Ordering::SeqCst),
        "worldd {args:?} did not exit within {WORLDD_VERB_LIMIT:?}; its stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Flip one bit of the stored envelope of object `reference` in the stopped store at `db`: the
/// byte `at` bytes from its start (`0`: the interface hash's first byte) or, with `from_end`,
/// from its end (`0`: the payload's last byte).
pub fn flip_object_byte(
    db: &Path,
    reference: &broker_core::object::Ref,
    at: usize,
    from_end: bool,
) {
    use broker_core::store::{RawTable, Store};
    let store = Store::open(db, Default::default()).unwrap();
    let mut bytes = store
        .raw_get(RawTable::Objects, reference.as_bytes())
        .unwrap()
        .unwrap();
    let i = if from_end { bytes.len() - 1 - at } else { at };
    bytes[i] ^= 1;
    store
        .raw_overwrite(RawTable::Objects, reference.as_bytes().to_vec(), bytes)
        .unwrap();
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// How many times `limit` has tripped (`worldd_limit_trips_total{limit="…"}`), 0 before its
/// first.
pub fn limit_trips(d: &Daemon, limit: &str) -> u64 {
    let row = format!("worldd_limit_trips_total{{limit=\"{limit}\"}} ");
    get(&d.url("/v1/metrics"), None)
        .text()
        .lines()
        .find_map(|l| l.strip_prefix(row.as_str()))
        .map_or(0, |n| n.trim().parse().unwrap())
}

/// Read one HTTP response from `s` (its head, and a body of its `Content-Length`): the head as
/// text and the body's bytes. Panics when the connection ends first.
pub fn read_one_answer(s: &mut std::net::TcpStream) -> (String, Vec<u8>) {
    read_one_answer_unless_closed(s).unwrap_or_else(|buf| {
        panic!(
            "connection closed before a full response: {:?}",
            String::from_utf8_lossy(&buf)
        )
    })
}

/// `n` HTTP responses read from `s` in order, for requests sent pipelined: the bytes of one
/// read past an answer are the next answer's (a loaded machine hands several small answers to
/// one read), which [`read_one_answer`] would drop. Panics when the connection ends first.
pub fn read_answers(s: &mut std::net::TcpStream, n: usize) -> Vec<(String, Vec<u8>)> {
    use std::io::Read;
    let mut buf = Vec::new();
    let mut answers = Vec::new();
    let mut chunk = [0u8; 8192];
    while answers.len() < n {
        if let Some((answer, used)) = whole_answer(&buf) {
            answers.push(answer);
            buf.drain(..used);
            continue;
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => panic!(
                "connection closed after {} of {n} answers: {:?}",
                answers.len(),
                String::from_utf8_lossy(&buf)
            ),
            Ok(k) => buf.extend_from_slice(&chunk[..k]),
        }
    }
    assert!(
        buf.is_empty(),
        "more than {n} answers: {:?}",
        String::from_utf8_lossy(&buf)
    );
    answers
}

/// The first whole HTTP response in `buf` (its head as text, a body of its `Content-Length`),
/// and how many bytes of `buf` it took; `None` until all of it is there.
fn whole_answer(buf: &[u8]) -> Option<((String, Vec<u8>), usize)> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let length = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let used = end + 4 + length;
    (buf.len() >= used).then(|| ((head, buf[end + 4..used].to_vec()), used))
}

/// [`read_one_answer`], or, when the connection ends (or fails) first, what it had read.
pub fn read_one_answer_unless_closed(
    s: &mut std::net::TcpStream,
) -> Result<(String, Vec<u8>), Vec<u8>> {
    use std::io::Read;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some((answer, _)) = whole_answer(&buf) {
            return Ok(answer);
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return Err(buf),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Send raw bytes on a fresh connection and read one HTTP response (head and a body of its
/// `Content-Length`), without sending anything more: for requests whose body is held back.
pub fn raw_exchange(addr: &str, bytes: &[u8]) -> Answer {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(bytes).unwrap();
    let (head, body) = read_one_answer(&mut s);
    answer_of(&head, body)
}

/// The [`Answer`] of a response head (status line and fields) and its body, as
/// [`read_one_answer`] returns them.
pub fn answer_of(head: &str, body: Vec<u8>) -> Answer {
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let fields: Vec<(String, String)> = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let header = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    Answer {
        status,
        content_type: header("content-type").unwrap_or_default(),
        retry_after: header("retry-after"),
        body,
        fields,
    }
}

/// What an earlier build let any session commit: the coordinator's label on an invented
/// invocation (`a2a:ep1:never-happened`) that reuses a genuine call's `record` (its plan,
/// effects and output) under `entry`'s transition and interpreter, appended at the head of the
/// halted daemon's store at `db` straight through the library. Returns the forged entry's index.
pub fn forge_coordinator_entry(db: &Path, entry: &Value, record: &Value, output_ref: &str) -> u64 {
    use broker_core::log::{self, Append, HeadBinding};
    use broker_core::object::{sid, Object};
    let store = broker_core::store::Store::open(db, Default::default()).unwrap();
    let mut forged = record.clone();
    forged["invocationId"] = Value::from("a2a:ep1:never-happened");
    let rec = Object::json(sid::INVOCATION_RECORD, "coordinator:a2a", &forged).unwrap();
    let header_ref = |field: &str| entry["header"][field].as_str().unwrap().parse().unwrap();
    let a = Append {
        objects: vec![rec.clone()],
        transition_fn: header_ref("transitionFn"),
        interpreter: header_ref("interpreter"),
        written_by: "coordinator:a2a".into(),
        transition_ref: rec.hash,
        state_root: output_ref.parse().unwrap(),
        binding: HeadBinding::AtHead,
    };
    store
        .write(move |w| log::append(w, &a))
        .unwrap()
        .entry
        .header
        .entry_index
}

/// A test proxy's first half: read one request head from `client` (a GET, no body) and forward
/// it to `upstream` with `Connection: close`, so the answer ends with the connection. Returns
/// the request's path and the upstream connection, or `None` when the client left first.
pub fn forward_request_head(
    client: &mut std::net::TcpStream,
    upstream: &str,
) -> std::io::Result<Option<(String, std::net::TcpStream)>> {
    use std::io::{Read, Write};
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if client.read(&mut byte)? == 0 {
            return Ok(None);
        }
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let path = text.split(' ').nth(1).unwrap_or("").to_owned();
    let mut forwarded: String = text
        .lines()
        .filter(|l| !l.is_empty() && !l.to_ascii_lowercase().starts_with("connection:"))
        .map(|l| format!("{l}\r\n"))
        .collect();
    forwarded.push_str("Connection: close\r\n\r\n");
    let mut server = std::net::TcpStream::connect(upstream)?;
    server.write_all(forwarded.as_bytes())?;
    Ok(Some((path, server)))
}

/// `<dir>/plugins`, holding copies of the built plugin libraries `libs`.
pub fn plugin_dir_with(dir: &Path, libs: &[&str]) -> PathBuf {
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    for p in libs {
        let lib = plugin_library(p);
        std::fs::copy(&lib, plugins.join(lib.file_name().unwrap())).unwrap();
    }
    plugins
}

/// Lines of a stream (a child's stdout, a connection) read on a thread, handed over a channel.
pub fn lines_of(reader: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(reader).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// The next line from [`lines_of`], waiting at most 30 s.
pub fn next_line(rx: &std::sync::mpsc::Receiver<String>, what: &str) -> String {
    rx.recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("no {what}: {e}"))
}

/// `worldd ARGS` run in the directory `cwd`, with `env` set and `$WORLD_ADDR` and
/// `$WORLD_SESSION` taken from `env` alone: (exit code, stdout, stderr).
pub fn worldd_in(cwd: &Path, env: &[(&str, &str)], args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(WORLDD);
    cmd.args(args)
        .current_dir(cwd)
        .env_remove("WORLD_ADDR")
        .env_remove("WORLD_SESSION")
        .envs(env.iter().copied())
        .stdin(Stdio::null());
    let out = run_to_exit(&mut cmd, WORLDD_VERB_LIMIT);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `git <args>` in `dir` for set-up and inspection (own identity, no user config).
#[allow(dead_code)] // not every test binary sets up a repository
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=Setup Person",
            "-c",
            "user.email=setup@example.invalid",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("HOME", dir)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `worldd VERB --plugin-dir PLUGINS ARGS` in a fresh directory with `env` set, run to its exit
/// (killed after 60 s; `serve` on a free port): its exit code (`None` when it was killed),
/// stdout, stderr and how long it took.
#[allow(dead_code)] // not every test binary loads plugins of its own
pub fn worldd_with_plugins(
    verb: &str,
    plugins: &Path,
    args: &[&str],
    env: &[(&str, String)],
) -> (Option<i32>, String, String, Duration) {
    let cwd = tempfile::tempdir().unwrap();
    let mut command = Command::new(WORLDD);
    command
        .arg(verb)
        .arg("--plugin-dir")
        .arg(plugins)
        .args(args)
        .current_dir(cwd.path())
        .env("WORLDD_LOG", "warn");
    for (k, v) in env {
        command.env(k, v);
    }
    if verb == "serve" {
        command.args(["--bind", "127.0.0.1:0"]);
    }
    let began = Instant::now();
    let out = run_to_exit(&mut command, Duration::from_secs(60));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        began.elapsed(),
    )
}

/// The pid of a running `worldd` whose command line holds `needle` as one argument, waited
/// for up to 5 s (a verb a test started at a terminal, to signal it).
pub fn worldd_pid(needle: &str) -> u32 {
    for _ in 0..500 {
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
                continue;
            };
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            if args.first().is_some_and(|a| a.ends_with(b"worldd"))
                && args.contains(&needle.as_bytes())
            {
                return pid;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("no worldd running with {needle}");
}

/// A new store at `world/db` holding one live credential of `episode` (`Workspace.Read`, an
/// hour), written to `world/<file>` as a session file; the credential.
pub fn store_with_credential_file(world: &Path, episode: &str, file: &str) -> String {
    let store = broker_core::store::Store::create(&world.join("db")).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let token = broker_core::session::mint(
        &store,
        episode,
        vec!["Workspace.Read=worktree:5".parse().unwrap()],
        3600,
        now,
    )
    .unwrap()
    .token;
    std::fs::write(world.join(file), format!("{token}\n")).unwrap();
    token
}

/// The shell command `cmd` started at a pseudo-terminal (`script`), returned once its mint
/// question shows: the child (to signal or answer) and a receiver told again each time more
/// output holds the question.
pub fn asking_at_terminal(cmd: &str) -> (Child, mpsc::Receiver<()>) {
    use std::io::Read;
    let mut script = Command::new("script")
        .args(["-qec", cmd, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut shown = script.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut text = Vec::new();
        let mut buf = [0u8; 256];
        while let Ok(n @ 1..) = shown.read(&mut buf) {
            text.extend_from_slice(&buf[..n]);
            if text.windows(12).any(|w| w == b"Confirm mint") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("the question never showed");
    (script, rx)
}

/// What the episode of `token` spent on `effect` (`GET /v1/budget`).
pub fn spent(d: &Daemon, token: &str, effect: &str) -> u64 {
    let a = get(&d.url("/v1/budget"), Some(token));
    assert_eq!(a.status, 200, "{}", a.text());
    let v = a.json();
    v["grants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["effect"] == effect)
        .unwrap_or_else(|| panic!("no grant for {effect}: {v}"))["spent"]
        .as_u64()
        .unwrap()
}

/// The names in `dir`, sorted.
pub fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// What was shown at the terminal, without what was typed ahead (`script` echoes it) and
/// without line ends.
pub fn said(shown: &str, typed: &str) -> Vec<String> {
    shown
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| *l != typed)
        .map(str::to_owned)
        .collect()
}

/// `quickstart --print-only` into `world` at a terminal, answering `typed`.
pub fn quickstart_at_terminal(world: &Path, extra: &str, typed: &[u8]) -> (i32, String) {
    at_terminal(
        &format!(
            "{WORLDD} quickstart --dir {} --print-only --bind 127.0.0.1:7999 {extra}",
            world.display()
        ),
        typed,
    )
}

/// A stopped daemon's directory (`db`, `worktrees`) whose store holds three reads spent by
/// `episode` under a `Workspace.Read=worktree:5` grant: for the warnings of a budget already
/// spent.
pub fn store_where_spent_three_reads(episode: &str) -> tempfile::TempDir {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let token = d.session(episode, &["Workspace.Read=worktree:5"]);
    std::fs::write(d.root().join(episode).join("a.txt"), "a").unwrap();
    for i in 0..3 {
        let v = a2a(
            &d,
            &token,
            &format!("r{i}"),
            "ailang-read",
            serde_json::json!({"path": "a.txt"}),
        );
        assert!(v.get("result").is_some(), "{v}");
    }
    d.halt()
}

/// Why strace may not attach to the daemon here, which is our child and not strace's: under
/// Yama's `kernel.yama.ptrace_scope` 1 or 2 (Ubuntu's default is 1) that takes
/// `CAP_SYS_PTRACE`, and 3 forbids it to everyone.
fn ptrace_attach_refused() -> Option<String> {
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").ok()?;
    let scope: u8 = scope.trim().parse().ok()?;
    // CAP_SYS_PTRACE is capability 19.
    let cap_sys_ptrace = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
            u64::from_str_radix(hex.trim(), 16).ok()
        })
        .is_some_and(|caps| caps & (1 << 19) != 0);
    match scope {
        0 => None,
        1 | 2 if cap_sys_ptrace => None,
        3 => Some("kernel.yama.ptrace_scope is 3".to_owned()),
        _ => Some(format!(
            "kernel.yama.ptrace_scope is {scope} and this process lacks CAP_SYS_PTRACE"
        )),
    }
}

/// Skip the test for `why`, or fail it where `WORLDD_TESTS_REQUIRE_STRACE` is set (CI).
fn attach_not_permitted(why: &str) {
    assert!(
        std::env::var_os("WORLDD_TESTS_REQUIRE_STRACE").is_none(),
        "strace is required (WORLDD_TESTS_REQUIRE_STRACE) and ptrace attach is not permitted here: {why}"
    );
    eprintln!("skipped: ptrace attach is not permitted here: {why}");
}

/// Every thread of process `pid` is traced.
fn traced(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|t| {
        std::fs::read_to_string(t.path().join("status")).is_ok_and(|s| {
            s.lines()
                .any(|l| l.starts_with("TracerPid:") && l.trim_end() != "TracerPid:\t0")
        })
    })
}

/// A daemon (the Workspace plugin; a 2 s call deadline, 1.9 s for handlers) every sync of
/// which takes 2.5 s from now on, through strace's fault injection, so that a call's intent
/// outlasts its deadline; and the strace, to kill at the end. `None` where the test must skip:
/// no strace, or ptrace attach refused (which fails the test where
/// `WORLDD_TESTS_REQUIRE_STRACE` is set).
pub fn daemon_whose_syncs_stall() -> Option<(Daemon, std::process::Child)> {
    if !have_strace() {
        eprintln!("skipped: no strace here");
        return None;
    }
    if let Some(why) = ptrace_attach_refused() {
        attach_not_permitted(&why);
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("worldd.toml");
    std::fs::write(
        &config,
        "[limits]\ncall_deadline_ms = 2000\nhandler_deadline_ms = 1900\n[server]\nbody_timeout_ms = 1500\n",
    )
    .unwrap();
    let mut cmd = Daemon::serve_command(&dir, &["worldd_workspace"]);
    cmd.arg("--config").arg(&config);
    let d = Daemon::spawn(dir, cmd);
    let mut strace = Command::new("strace")
        .args([
            "-qq",
            "-f",
            "-o",
            "/dev/null",
            "-e",
            "trace=fdatasync,fsync",
        ])
        .args(["-e", "inject=fdatasync,fsync:delay_enter=2500000"])
        .arg("-p")
        .arg(d.child.id().to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while !traced(d.child.id()) {
        // Refused the attach (a container's seccomp profile, an LSM), strace says so and ends.
        if let Some(status) = strace.try_wait().unwrap() {
            let mut said = String::new();
            let _ = std::io::Read::read_to_string(&mut strace.stderr.take().unwrap(), &mut said);
            attach_not_permitted(&format!("strace -p ended ({status}): {}", said.trim()));
            return None;
        }
        assert!(Instant::now() < until, "strace did not attach");
        std::thread::sleep(Duration::from_millis(20));
    }
    Some((d, strace))
}

/// Whether strace runs here. Where `WORLDD_TESTS_REQUIRE_STRACE` is set (CI), its absence is a
/// failure, not a skip.
pub fn have_strace() -> bool {
    let here = Command::new("strace")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        here || std::env::var_os("WORLDD_TESTS_REQUIRE_STRACE").is_none(),
        "strace is required (WORLDD_TESTS_REQUIRE_STRACE) and is not installed"
    );
    here
}

/// A connection whose receive buffer is 4 KiB before it connects: its advertised window
/// stays small, so an answer it does not read waits on the daemon's side, as for a remote
/// client that keeps its window shut (loopback would otherwise grow the buffer to megabytes).
pub fn connect_small_window(d: &Daemon) -> std::net::TcpStream {
    let addr: std::net::SocketAddr = d.addr.parse().unwrap();
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.set_recv_buffer_size(4096).unwrap();
    s.connect(&addr.into()).unwrap();
    let s = std::net::TcpStream::from(s);
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

/// Send `GET path` with `token` on a small-window connection and read only the status line.
pub fn unread_get(d: &Daemon, path: &str, token: &str) -> (std::net::TcpStream, String) {
    use std::io::{Read, Write};
    let mut s = connect_small_window(d);
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n",
        d.addr
    )
    .unwrap();
    let mut status = [0u8; 12];
    s.read_exact(&mut status).unwrap();
    (s, String::from_utf8_lossy(&status).into_owned())
}

/// MCP `tools/call` of `tool` with `arguments`, request id `id`, under 2026-07-28: its headers
/// (`Mcp-Method`, `Mcp-Name`) and its `_meta` envelope. The answer is plain JSON, with the
/// revision's status.
pub fn modern_tools_call(d: &Daemon, token: &str, id: u64, tool: &str, arguments: Value) -> Answer {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": tool, "arguments": arguments,
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}});
    mcp_post(
        d,
        token,
        "2026-07-28",
        &[("Mcp-Method", "tools/call"), ("Mcp-Name", tool)],
        &serde_json::to_vec(&body).unwrap(),
    )
}

/// Try `attempt` every 20 ms until it gives a value, at most 10 s (`what` names what is waited
/// for in the failure); that value. For what the daemon does once it has seen something
/// happen (a connection closed, its share of the reply budget freed), which a loaded machine
/// may take longer to see than any fixed sleep.
pub fn until<T>(what: &str, mut attempt: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(done) = attempt() {
            return done;
        }
        assert!(Instant::now() < deadline, "waited 10 s for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A daemon whose credentials have a 1 MiB share of a 4 MiB reply budget (`reply_bytes`
/// follows at 512 KiB), whose small send buffer leaves an answer read by nobody waiting in it.
pub fn small_share_daemon() -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("world.toml");
    std::fs::write(
        &config,
        "[server]\nreply_budget_bytes = \"4MiB\"\nsend_buffer_bytes = 16384\nsend_timeout_ms = 30000\n",
    )
    .unwrap();
    // The file is read at start: the daemon needs it no longer.
    Daemon::start(&["worldd_workspace"], &["--config", path_str(&config)])
}

/// The object `output` read by `token` with its payload, once `holder`, the connection holding
/// an unread answer of `token`'s, is closed and the daemon has freed its share (which it does
/// when it sees the connection close).
pub fn object_once_the_held_answer_is_gone(
    d: &Daemon,
    token: &str,
    output: &str,
    holder: std::net::TcpStream,
) -> Value {
    drop(holder);
    let got = until("the held answer's share to be freed", || {
        let got = get(
            &d.url(&format!("/v1/objects/{output}?payload=true")),
            Some(token),
        );
        (got.status != 503).then_some(got)
    });
    assert_eq!(got.status, 200, "{}", got.text());
    let object = got.json();
    assert_eq!(object["hash"], output);
    object
}
