//! What plugin code, a library or the daemon's surroundings do to the whole process, against the
//! real binary: a stderr whose reader has gone, a `chdir`, an `exit()` (by
//! `tests/fixtures/unruly-plugin`, built on its own as the other fixtures are), a plugin
//! library that is a dangling symbolic link.

mod common;

use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use common::fixtures::{cargo_build, share_echo_lock};
use common::*;
use serde_json::{json, Value};

const WS: &[&str] = &["worldd_workspace"];

/// `tests/fixtures/unruly-plugin`, built once per test process.
fn unruly_library() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let crate_dir = repo_root().join("tests/fixtures/unruly-plugin");
        share_echo_lock(&crate_dir);
        cargo_build(&crate_dir.join("Cargo.toml"), "worldd_unruly")
    })
}

/// A copy of the unruly plugin in `plugins`; the copy's path.
fn add_unruly(plugins: &Path) -> PathBuf {
    let copy = plugins.join(unruly_library().file_name().unwrap());
    std::fs::copy(unruly_library(), &copy).unwrap();
    copy
}

/// A `serve` command of a daemon in a new directory, with the unruly plugin beside the
/// workspace plugin; the directory.
fn serve_with_unruly() -> (tempfile::TempDir, Command) {
    let dir = tempfile::tempdir().unwrap();
    let cmd = Daemon::serve_command(&dir, WS);
    add_unruly(&dir.path().join("plugins"));
    (dir, cmd)
}

/// `tools/call` of `tool` with `arguments`: the result, which must be one.
fn call(d: &Daemon, token: &str, tool: &str, arguments: Value) -> Value {
    let answer = mcp(
        d,
        token,
        "tools/call",
        json!({"name": tool, "arguments": arguments}),
    );
    assert_eq!(answer.status, 200, "{}", answer.text());
    let body = answer.sse_json();
    assert!(body.get("error").is_none(), "{body}");
    body["result"].clone()
}

/// `ailang-read` of `a.txt`, which holds `text`: answered in full.
fn read_answers(d: &Daemon, token: &str, text: &str) {
    let result = call(d, token, "ailang-read", json!({"path": "a.txt"}));
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(result["structuredContent"]["content"], text, "{result}");
    assert_eq!(
        result["structuredContent"]["world"]["effects"][0]["status"], "ok",
        "{result}"
    );
}

/// `unruly-exit` with status 0 called by a thread of its own: the connection ends with the
/// process, so there is no answer to wait for.
fn call_exit(d: &Daemon, token: String, status: &str) -> std::thread::JoinHandle<()> {
    call_unanswered(d, token, "unruly-exit", json!({"status": status}))
}

/// `tools/call` of `tool` with `arguments` by a thread of its own, which waits for no answer
/// (a call that ends the process has none).
fn call_unanswered(
    d: &Daemon,
    token: String,
    tool: &str,
    arguments: Value,
) -> std::thread::JoinHandle<()> {
    let url = d.url("/mcp/");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": tool, "arguments": arguments}});
    std::thread::spawn(move || {
        let _ = ureq::post(&url)
            .set("Authorization", &format!("Bearer {token}"))
            .set("Accept", "application/json, text/event-stream")
            .set("MCP-Protocol-Version", "2025-11-25")
            .set("Content-Type", "application/json")
            .send_bytes(&serde_json::to_vec(&body).unwrap());
    })
}

/// A pipe: its reading and its writing end.
fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // Close-on-exec: no daemon (this one, or another test's) inherits the reading end.
    // SAFETY: `fds` is a valid array of two descriptors for pipe2(2) to fill.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both descriptors were just made by pipe(2) and are owned by nothing else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// tracing-subscriber said its own failure to write a log line with `eprintln!`, which panics
/// where stderr is a broken pipe: the panic killed the task answering a call after its commit,
/// so every call was committed and its caller got a dropped connection; and a start-up line
/// that could not be written ended the daemon before it listened. A line stderr does not take
/// is lost, nothing else.
#[test]
fn a_log_line_stderr_cannot_take_is_lost_and_never_the_answer_nor_the_start() {
    // Broken while the daemon serves (its reader, `head` or a collector, has gone), and
    // before it starts: its start-up lines already meet EPIPE.
    for broken_from_the_start in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Daemon::serve_command(&dir, WS);
        let (reader, writer) = pipe();
        cmd.stderr(Stdio::from(writer));
        if broken_from_the_start {
            drop(reader);
            let d = Daemon::spawn(dir, cmd);
            calls_answered(d);
        } else {
            let d = Daemon::spawn(dir, cmd);
            drop(reader);
            calls_answered(d);
        }
    }
}

/// Three calls, each of which logs a line at info (which stderr refuses), answered in full;
/// then a clean stop.
fn calls_answered(d: Daemon) {
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    std::fs::write(d.root().join("ep1/a.txt"), "hello\n").unwrap();
    for _ in 0..3 {
        read_answers(&d, &token, "hello\n");
    }
    let status = d.stop();
    assert_eq!(status.code(), Some(0), "{status:?}");
}

/// The store watch resolved a relative `--db` against the working directory every second:
/// after a plugin's `chdir` the store's files were "gone", and the daemon refused every call of
/// every episode as "the world store is full" and logged that the store was replaced. A chdir
/// in a plugin's constructor also moved the relative workspace root, resolved after the
/// plugins started: every worktree tool was refused. Both paths are absolute from the start.
#[test]
fn a_chdir_by_plugin_code_moves_neither_the_store_nor_the_worktrees() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir_with(dir.path(), WS);
    add_unruly(&plugins);
    let elsewhere = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(WORLDD);
    cmd.current_dir(dir.path())
        .args(["serve", "--db", "db", "--workspace-root", "worktrees"])
        .args(["--bind", "127.0.0.1:0", "--plugin-dir", "plugins"])
        .arg("--plugin-config")
        .arg(format!("unruly.chdirInNew={}", elsewhere.path().display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let d = Daemon::spawn(dir, cmd);
    let token = d.session("ep1", &["Workspace.Read=worktree:5", "Unruly.Chdir=any:5"]);
    std::fs::write(d.root().join("ep1/a.txt"), "hello\n").unwrap();
    read_answers(&d, &token, "hello\n");
    let store = get(&d.url("/workbench/daemon"), None).json()["store"].clone();
    assert_eq!(
        store.as_str(),
        Some(d.db().canonicalize().unwrap().to_str().unwrap())
    );
    let moved = call(&d, &token, "unruly-chdir", json!({"path": "/"}));
    assert_eq!(moved["structuredContent"]["cwd"], "/", "{moved}");
    // Past two looks of the watch (one a second).
    std::thread::sleep(Duration::from_millis(2500));
    read_answers(&d, &token, "hello\n");
    let other = d.session("ep2", &["Workspace.Read=worktree:5"]);
    std::fs::write(d.root().join("ep2/a.txt"), "two\n").unwrap();
    read_answers(&d, &other, "two\n");
    // The path as it was given, still; and the store the workbench knows the daemon by.
    assert_eq!(get(&d.url("/v1/health"), None).json()["db_path"], "db");
    assert_eq!(
        get(&d.url("/workbench/daemon"), None).json()["store"],
        store
    );
    let (status, _, log, _dir) = d.stop_with_log(Duration::from_secs(10));
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(!log.contains("was replaced or removed"), "{log}");
    assert!(!log.contains(" ERROR "), "{log}");
}

/// A plugin that called `exit(0)` while the daemon served ended it with status 0 and not a
/// line in its log: a clean shutdown to a supervisor (`Restart=on-failure` left it down).
#[test]
fn exit_called_by_plugin_code_while_serving_is_said_and_ends_the_daemon_with_70() {
    let (dir, cmd) = serve_with_unruly();
    let d = Daemon::spawn(dir, cmd);
    let token = d.session("ep1", &["Unruly.Exit=any:5"]);
    let caller = call_exit(&d, token, "0");
    let log = ended_by_plugin_code(
        d,
        caller,
        "was called by plugin code",
        " ERROR exit(0) was called by plugin code or a library while the daemon served; the daemon did not choose to stop, so it ends with status 70 instead of 0, which would read as a clean shutdown",
    );
    assert!(!log.contains("shutting down"), "{log}");
}

/// A plugin that called `abort()` while the daemon served ended it by SIGABRT with not a word
/// in its log. The daemon still ends by the signal (a supervisor sees what happened), after one
/// line that says who called it.
#[test]
fn abort_called_by_plugin_code_while_serving_is_said_and_the_daemon_still_ends_by_sigabrt() {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let (dir, mut cmd) = serve_with_unruly();
    // SAFETY: setrlimit in the child before exec, async-signal-safe: no core file is written.
    unsafe {
        cmd.pre_exec(|| {
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &none);
            Ok(())
        });
    }
    let d = Daemon::spawn(dir, cmd);
    let token = d.session("ep1", &["Unruly.Exit=any:5"]);
    let caller = call_exit(&d, token, "abort");
    d.wait_for_log("abort() was called");
    let (status, _, log, _dir) = d.stop_with_log(Duration::from_secs(10));
    caller.join().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{status:?} {log}");
    assert_eq!(
        log.lines().last(),
        Some("worldd: abort() was called by plugin code or a library while the daemon ran (a failure said just above, if any, is why); the daemon did not choose to stop, so it ends by SIGABRT"),
        "{log}"
    );
}

/// The exit handler waits at most 2 s for its line to be written: a log writer stuck on a full
/// stderr pipe (a collector that stopped reading) must not keep alive a daemon that plugin code
/// ended. The pipe is shrunk to one page and filled before the call, so the line cannot be
/// written; the daemon still ends with 70, once the wait has run out.
#[test]
fn exit_called_while_stderr_takes_nothing_still_ends_the_daemon_with_70_after_its_wait() {
    let (dir, mut cmd) = serve_with_unruly();
    let (reader, writer) = pipe();
    let filler = writer.try_clone().unwrap();
    cmd.stderr(Stdio::from(writer)).env("WORLDD_LOG", "error");
    let d = Daemon::spawn(dir, cmd);
    let token = d.session("ep1", &["Unruly.Exit=any:5"]);
    // One page of room, filled: the daemon's next write to stderr blocks (the reading end
    // stays open, so it is not EPIPE).
    use std::os::fd::AsRawFd;
    // SAFETY: F_SETPIPE_SZ on a pipe this test owns a descriptor of.
    let size = unsafe { libc::fcntl(filler.as_raw_fd(), libc::F_SETPIPE_SZ, 4096) };
    assert!(size >= 4096, "F_SETPIPE_SZ: {size}");
    // Filled without blocking, up to whatever the daemon already wrote there: a blocking write
    // of a whole page into a pipe already holding a line of the daemon's would wait for a
    // reader forever. Through a new open of the pipe, so the daemon's end stays blocking.
    use std::os::unix::fs::OpenOptionsExt;
    let mut nonblocking = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(format!("/proc/self/fd/{}", filler.as_raw_fd()))
        .unwrap();
    // A write of up to a page into a pipe is all or nothing: halved until one byte is refused.
    let page = vec![b'.'; size as usize];
    let (mut chunk, mut filled) = (page.len(), 0);
    while chunk > 0 {
        match std::io::Write::write(&mut nonblocking, &page[..chunk]) {
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => chunk /= 2,
            Err(e) => panic!("filling the pipe: {e}"),
        }
    }
    assert!(filled > 0, "the pipe took nothing");
    let started = std::time::Instant::now();
    let caller = call_exit(&d, token, "0");
    let mut d = d;
    let status = loop {
        if let Some(status) = d.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the daemon still runs"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = started.elapsed();
    caller.join().unwrap();
    assert_eq!(status.code(), Some(70), "{status:?}");
    // It ended when the wait ran out, the line unwritten.
    assert!(took >= Duration::from_secs(2), "{took:?}");
    drop(reader);
}

/// The same in a plugin's constructor: the daemon exited with the plugin's status (here 3, the
/// "integrity failure" code) without a `daemon startup failed` line. And a library that exits
/// while it is loaded is named by the line before it.
#[test]
fn exit_called_by_plugin_code_at_start_up_is_said_ends_the_daemon_with_70_and_the_library_is_named()
{
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir_with(dir.path(), WS);
    let lib = add_unruly(&plugins);
    let serve = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = Command::new(WORLDD);
        cmd.current_dir(dir.path())
            .args(["serve", "--db", "db", "--workspace-root", "worktrees"])
            .args(["--bind", "127.0.0.1:0", "--plugin-dir"])
            .arg(&plugins)
            .args(args)
            .envs(env.iter().copied());
        let out = run_to_exit(&mut cmd, Duration::from_secs(60));
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };

    let (code, log) = serve(&["--plugin-config", "unruly.exitInNew=3"], &[]);
    assert_eq!(code, Some(70), "{log}");
    assert!(
        log.lines().last().unwrap_or_default().ends_with(" ERROR exit(3) was called by plugin code or a library while the daemon started its plugins (their constructors, Plugin::new); the daemon did not choose to stop, so it ends with status 70 instead of 3"),
        "{log}"
    );
    assert!(!log.contains("daemon startup failed"), "{log}");

    let (code, log) = serve(&[], &[("WORLDD_UNRULY_MANIFEST", "exit")]);
    assert_eq!(code, Some(70), "{log}");
    let lines: Vec<&str> = log.lines().collect();
    let n = lines.len();
    assert!(n >= 2, "{log}");
    assert!(
        lines[n - 2].ends_with(&format!(
            " INFO loading plugin library path={}",
            lib.display()
        )),
        "{log}"
    );
    assert!(
        lines[n - 1].ends_with(&format!(" ERROR exit(0) was called by plugin code or a library while the daemon loaded the plugin library {}; the daemon did not choose to stop, so it ends with status 70 instead of 0, which would read as a clean shutdown", lib.display())),
        "{log}"
    );

    // `worldd handlers` ended with the plugin's status, 0, its report unwritten: a success to
    // a script. It ends with 70 too, and its last two lines name the library, then say why.
    let (code, out, err, _) = worldd_with_plugins(
        "handlers",
        &plugins,
        &[],
        &[("WORLDD_UNRULY_MANIFEST", "exit".to_owned())],
    );
    assert_eq!(code, Some(70), "{out}{err}");
    assert_eq!(out, "", "{err}");
    let lines: Vec<&str> = err.lines().collect();
    let n = lines.len();
    assert!(n >= 2, "{err}");
    assert_eq!(
        lines[n - 2],
        format!("worldd handlers: loading {}", lib.display()),
        "{err}"
    );
    assert!(
        lines[n - 1].ends_with(&format!(" ERROR exit(0) was called by plugin code or a library while worldd handlers loaded the plugin library {}; worldd handlers did not choose to stop, so it ends with status 70 instead of 0, which would read as success", lib.display())),
        "{err}"
    );
}

/// A `*.so` entry that is a dangling symbolic link (its build directory removed) was skipped
/// without a word, even without `--handler`: `serve` started without the plugin, whose tools
/// were then refused by R8. It is a library that cannot be read, as any other.
#[test]
fn a_plugin_library_that_is_a_dangling_symlink_is_named_not_loadable() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir_with(dir.path(), WS);
    let target = dir.path().join("build/libworldd_gone.so");
    let link = plugins.join("libworldd_gone.so");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let cause = format!(
        "cannot read the library: No such file or directory (os error 2) (it is a symbolic link to {})",
        target.display()
    );

    let (code, out, err, _) = worldd_with_plugins("handlers", &plugins, &[], &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains(&format!("\n{}\n  not loadable: {cause}\n", link.display())),
        "{out}"
    );
    assert!(
        out.ends_with("\n1 plugin(s), 1 library(ies) not loadable\n"),
        "{out}"
    );

    let (code, _, err, _) = worldd_with_plugins(
        "serve",
        &plugins,
        &["--db", path_str(&dir.path().join("db"))],
        &[],
    );
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(
        err.lines().last().unwrap_or_default(),
        format!(
            "worldd: daemon startup failed at plugins: plugin {}: {cause}",
            link.display()
        )
    );
}

/// The end of the line the daemon logs when plugin code changed process-wide state, found when
/// `who` returned, with `changes`.
fn restored_line(who: &str, changes: &str) -> String {
    format!(
        " ERROR plugin code changed what the whole process relies on, found when {who} returned: {changes}; the daemon put it back (a plugin must leave descriptors 0-2, signal dispositions, resource limits and the umask alone: docs/handler-authors.md §9)"
    )
}

/// The log's ERROR lines.
fn errors(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.contains(" ERROR ")).collect()
}

/// `log` holds one ERROR line, and it ends with `end`.
fn assert_one_error_ending(log: &str, end: &str) {
    let said = errors(log);
    assert_eq!(said.len(), 1, "{log}");
    assert!(said[0].ends_with(end), "{log}");
}

/// `d` stopped: it ends with 0, and its log's one ERROR line says that plugin code changed
/// `changes`, found when `who` returned (and put back); the log.
fn stopped_after_one_put_back(d: Daemon, who: &str, changes: &str) -> String {
    let (status, _, log, _dir) = d.stop_with_log(Duration::from_secs(10));
    assert_eq!(status.code(), Some(0), "{status:?} {log}");
    assert_one_error_ending(&log, &restored_line(who, changes));
    log
}

/// `d` once plugin code has ended it (its log has `cue`), `caller` with it: the daemon ended
/// with 70, and its log's one ERROR line ends with `line`; the log.
fn ended_by_plugin_code(
    d: Daemon,
    caller: std::thread::JoinHandle<()>,
    cue: &str,
    line: &str,
) -> String {
    d.wait_for_log(cue);
    let (status, _, log, _dir) = d.stop_with_log(Duration::from_secs(10));
    caller.join().unwrap();
    assert_eq!(status.code(), Some(70), "{status:?} {log}");
    assert_one_error_ending(&log, line);
    log
}

/// What the kernel says `signal`'s disposition in process `pid` is: `ignored`, `caught` or
/// `default` (from the SigIgn and SigCgt masks of /proc/PID/status).
fn disposition(pid: u32, signal: libc::c_int) -> &'static str {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let mask = |key: &str| {
        let hex = status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap()
            .trim();
        u64::from_str_radix(hex, 16).unwrap()
    };
    let bit = 1u64 << (signal - 1);
    if mask("SigIgn:") & bit != 0 {
        "ignored"
    } else if mask("SigCgt:") & bit != 0 {
        "caught"
    } else {
        "default"
    }
}

/// A daemon with the unruly plugin beside the workspace plugin, and a session that may use
/// both.
fn unruly_daemon(env: &[(&str, &str)]) -> (Daemon, String) {
    let (dir, mut cmd) = serve_with_unruly();
    cmd.envs(env.iter().copied());
    let d = Daemon::spawn(dir, cmd);
    let token = d.session(
        "ep1",
        &["Workspace.Read=worktree:20", "Unruly.Process=any:5"],
    );
    std::fs::write(d.root().join("ep1/a.txt"), "hello\n").unwrap();
    (d, token)
}

/// `unruly-process` doing `what`: answered ok.
fn misbehave(d: &Daemon, token: &str, what: &str) {
    let result = call(d, token, "unruly-process", json!({"what": what}));
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(result["structuredContent"]["did"], what, "{result}");
}

/// A connection the daemon accepted onto descriptor 2 while plugin code had it closed was cut
/// when the daemon put stderr back (a dup2 over it), and its answer was written into the log.
/// A socket found there is left as it is and said once; its client is answered.
#[test]
fn a_connection_accepted_onto_descriptor_2_while_plugin_code_had_it_closed_is_left_and_answered() {
    use std::io::{Read, Write};
    let (d, token) = unruly_daemon(&[]);
    let calling = {
        let (url, token) = (d.url("/mcp/"), token.clone());
        std::thread::spawn(move || {
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "unruly-process", "arguments": {"what": "close-stderr-and-wait"}}});
            ureq::post(&url)
                .set("Authorization", &format!("Bearer {token}"))
                .set("Accept", "application/json, text/event-stream")
                .set("MCP-Protocol-Version", "2025-11-25")
                .set("Content-Type", "application/json")
                .send_string(&body.to_string())
                .map(|r| r.into_string().unwrap())
                .map_err(|e| e.to_string())
        })
    };
    // While the plugin waits with descriptor 2 closed, the lowest free number: this
    // connection's, once the daemon accepts it. Tried until the call has returned.
    let mut held = Vec::new();
    while !calling.is_finished() {
        held.push(std::net::TcpStream::connect(&d.addr).unwrap());
        std::thread::sleep(Duration::from_millis(50));
    }
    let answer = calling.join().unwrap().unwrap();
    assert!(
        answer.contains(r#""did":"close-stderr-and-wait""#),
        "{answer}"
    );
    for mut conn in held {
        write!(
            conn,
            "GET /v1/health HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            d.addr
        )
        .unwrap();
        let mut got = String::new();
        conn.read_to_string(&mut got).unwrap();
        assert!(got.starts_with("HTTP/1.1 200 "), "{got:?}");
        assert!(got.contains(r#""status":"ok""#), "{got:?}");
    }
    let log = stopped_after_one_put_back(
        d,
        "plugin unruly's execute (Unruly.Process)",
        "descriptor 2 (stderr) was closed or replaced, and a socket holds its number now (a connection accepted meanwhile, as a rule); it is left as it is, and the log goes to its own copy",
    );
    assert!(
        !log.contains("HTTP/1.1"),
        "an answer went into the log: {log}"
    );
}

/// After plugin code closed descriptor 2, the next open anywhere in the daemon took that
/// number: another episode's temporary file, a git pipe, a directory handle. The put-back
/// step then saw stderr "pointed at another file" and did a dup2 over it: the owner's writes
/// went into the operator's log and its file stayed empty (a workspace write renamed an empty
/// temporary over its target, and said ok). A file found on 0-2 is left to its owner and said
/// once; only a closed number is put back. The fixture holds a file of its own on descriptor
/// 2, which makes certain what the daemon's next open gets by chance.
#[test]
fn a_file_another_call_opened_onto_descriptor_2_is_left_to_it_and_its_writes_never_reach_the_log() {
    let (d, token) = unruly_daemon(&[]);
    misbehave(&d, &token, "hold-file-on-stderr");
    // The held file's writes stay in it (the fixture reads them back), out of the log.
    misbehave(&d, &token, "write-held-file");
    // Another episode's writes read back whole, while the file holds the number.
    let writer = d.session(
        "ep2",
        &["Workspace.Write=worktree:20", "Workspace.Read=worktree:20"],
    );
    let marker = "EP2-WRITE-MARKER-".repeat(512 * 1024 / 17);
    for n in 0..3 {
        let path = format!("w{n}.txt");
        let wrote = call(
            &d,
            &writer,
            "ailang-write",
            json!({"path": path, "content": marker}),
        );
        assert_eq!(wrote["isError"], false, "{wrote}");
        assert_eq!(
            std::fs::read_to_string(d.root().join("ep2").join(&path)).unwrap(),
            marker
        );
    }
    read_answers(&d, &token, "hello\n");
    let log = stopped_after_one_put_back(
        d,
        "plugin unruly's execute (Unruly.Process)",
        "descriptor 2 (stderr) was closed or replaced, and another file holds its number now (one the daemon opened meanwhile, as a rule: another call's file, pipe or directory); it is left as it is, and the log goes to its own copy",
    );
    assert!(
        !log.contains("UNRULY-HELD-FILE-MARKER"),
        "the held file's text went into the log"
    );
    assert!(
        !log.contains("EP2-WRITE-MARKER"),
        "a written file's text went into the log"
    );
    // The log still reached the daemon's stderr after the call.
    assert!(
        log.contains("INFO call tool=ailang-read episode=ep1 outcome=ok"),
        "{log}"
    );
}

/// After plugin code closed descriptor 2, the daemon's log went to whatever took that number
/// next: an idle, unauthenticated connection received every episode's log lines. The log is
/// written to a private copy of stderr, descriptor 2 is put back, and that is said once,
/// naming the plugin.
#[test]
fn after_plugin_code_closes_stderr_a_new_connection_never_receives_log_text_and_the_log_still_reaches_stderr(
) {
    use std::io::Read;
    let (d, token) = unruly_daemon(&[]);
    misbehave(&d, &token, "close-stderr");
    // A connection that sends nothing, then calls that log a line each.
    let mut idle = std::net::TcpStream::connect(&d.addr).unwrap();
    for _ in 0..3 {
        read_answers(&d, &token, "hello\n");
    }
    d.wait_for_log("INFO call tool=ailang-read episode=ep1 outcome=ok");
    idle.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut got = [0u8; 4096];
    match idle.read(&mut got) {
        Ok(n) => panic!(
            "the idle connection received {n} bytes: {:?}",
            String::from_utf8_lossy(&got[..n])
        ),
        Err(e) => assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "{e}"
        ),
    }
    drop(idle);
    let log = stopped_after_one_put_back(
        d,
        "plugin unruly's execute (Unruly.Process)",
        "descriptor 2 (stderr) was closed",
    );
    // Every call after it is in the log on the daemon's stderr.
    assert_eq!(
        log.matches("INFO call tool=ailang-read episode=ep1 outcome=ok")
            .count(),
        3,
        "{log}"
    );
}

/// A plugin that set SIGCHLD to SIG_IGN (the C idiom "to avoid zombies") made the kernel reap
/// every child, and every git and ailang call of every episode failed with ECHILD, its unit
/// spent, nothing naming the plugin. So did a SIGCHLD handler that reaps. The daemon puts
/// SIGCHLD back to its default and says who changed it.
#[test]
fn sigchld_ignored_or_caught_by_plugin_code_is_put_back_to_default_and_the_plugin_named() {
    for (what, set_to) in [
        ("sigchld-ignore", "ignored (SIG_IGN)"),
        ("sigchld-reaper", "a handler of the plugin's"),
    ] {
        let (d, token) = unruly_daemon(&[]);
        let pid = d.child.id();
        assert_eq!(disposition(pid, libc::SIGCHLD), "default");
        misbehave(&d, &token, what);
        assert_eq!(disposition(pid, libc::SIGCHLD), "default", "{what}");
        read_answers(&d, &token, "hello\n");
        stopped_after_one_put_back(
            d,
            "plugin unruly's execute (Unruly.Process)",
            &format!("SIGCHLD was set to {set_to}, which makes the daemon's waits for its children (git, ailang) fail with ECHILD"),
        );
    }
}

/// The same done by a library while it loads (its initialisers or manifest): every later
/// wait for a child failed, and the daemon's start blamed the next plugin that ran a program.
/// It is put back after the library's code returns, and the library is named.
#[test]
fn sigchld_ignored_while_a_plugin_library_loads_is_put_back_and_the_library_named() {
    let (d, _token) = unruly_daemon(&[("WORLDD_UNRULY_MANIFEST", "sigchld")]);
    let lib = d.plugin_dir().join(unruly_library().file_name().unwrap());
    assert_eq!(disposition(d.child.id(), libc::SIGCHLD), "default");
    stopped_after_one_put_back(
        d,
        &format!("the initialisers and manifest of the plugin library {}", lib.display()),
        "SIGCHLD was set to ignored (SIG_IGN), which makes the daemon's waits for its children (git, ailang) fail with ECHILD",
    );
}

/// A plugin that set SIGPIPE back to SIG_DFL turned a write to a dead pipe (stderr into a
/// collector that stopped reading, a child's stdin) into a silent death of the daemon, status
/// 141. SIGPIPE is ignored again after the call, and the plugin named.
#[test]
fn sigpipe_set_to_default_by_plugin_code_is_ignored_again_and_the_plugin_named() {
    let (d, token) = unruly_daemon(&[]);
    let pid = d.child.id();
    assert_eq!(disposition(pid, libc::SIGPIPE), "ignored");
    misbehave(&d, &token, "sigpipe-default");
    assert_eq!(disposition(pid, libc::SIGPIPE), "ignored");
    stopped_after_one_put_back(
        d,
        "plugin unruly's execute (Unruly.Process)",
        "SIGPIPE was set to its default action (SIG_DFL), which ends the daemon without a word on a write to a closed pipe",
    );
}

/// A plugin that set SIGTERM back to SIG_DFL made the supervisor's stop kill the daemon at
/// once, calls in flight and all, instead of draining it. The daemon's own handler is put
/// back: SIGTERM still drains, and the daemon ends with 0.
#[test]
fn sigterm_reset_by_plugin_code_still_drains_the_daemon() {
    let (d, token) = unruly_daemon(&[]);
    misbehave(&d, &token, "sigterm-default");
    assert_eq!(disposition(d.child.id(), libc::SIGTERM), "caught");
    stopped_after_one_put_back(
        d,
        "plugin unruly's execute (Unruly.Process)",
        "SIGTERM was set to its default action (SIG_DFL)",
    );
}

/// A limit as the daemon says it: a number, or `unlimited`.
fn said_limit(value: libc::rlim_t) -> String {
    if value == libc::RLIM_INFINITY {
        "unlimited".to_owned()
    } else {
        value.to_string()
    }
}

/// This process's limit of `resource` (the daemon inherits it): soft, hard.
fn limit_here(resource: libc::__rlimit_resource_t) -> (libc::rlim_t, libc::rlim_t) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct this test owns.
    assert_eq!(unsafe { libc::getrlimit(resource, &mut limit) }, 0);
    (limit.rlim_cur, limit.rlim_max)
}

/// The `Max …` line of /proc/PID/limits named `row`: its soft and hard limits as the kernel
/// prints them.
fn limits_row(pid: u32, row: &str) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits.lines().find(|l| l.starts_with(row)).unwrap();
    let mut words = line[row.len()..].split_whitespace();
    (
        words.next().unwrap().to_owned(),
        words.next().unwrap().to_owned(),
    )
}

/// A plugin that lowered RLIMIT_FSIZE (meant for a child, set in the daemon) made the store's
/// next commit past that size end the daemon by SIGXFSZ, without a word: the call's client got
/// a closed connection, every episode lost. One that lowered RLIMIT_NOFILE failed the daemon's
/// accepts and opens. A lowered limit is put back when the call returns, said naming the plugin,
/// and the call and the next ones are answered.
#[test]
fn a_resource_limit_lowered_by_plugin_code_is_put_back_and_the_plugin_named() {
    let hard_files = limit_here(libc::RLIMIT_NOFILE).1;
    for (what, row, resource, lowered, was, harm) in [
        (
            "rlimit-fsize",
            "Max file size",
            "RLIMIT_FSIZE",
            4096,
            limit_here(libc::RLIMIT_FSIZE),
            "which fails every write of the daemon's past that size, the store's commits among them",
        ),
        (
            "rlimit-nofile",
            "Max open files",
            "RLIMIT_NOFILE",
            64,
            // The daemon raises its soft limit to the hard one.
            (hard_files, hard_files),
            "which fails the daemon's accepts and opens with EMFILE",
        ),
    ] {
        let (d, token) = unruly_daemon(&[]);
        let pid = d.child.id();
        // /proc/PID/limits says a limit as the daemon does.
        let before = limits_row(pid, row);
        assert_eq!(before, (said_limit(was.0), said_limit(was.1)), "{what}");
        misbehave(&d, &token, what);
        assert_eq!(limits_row(pid, row), before, "{what}");
        for _ in 0..3 {
            read_answers(&d, &token, "hello\n");
        }
        stopped_after_one_put_back(
            d,
            "plugin unruly's execute (Unruly.Process)",
            &format!(
                "{resource} was lowered to {lowered}/{} (soft/hard) from {}/{}, {harm}",
                said_limit(was.1),
                said_limit(was.0),
                said_limit(was.1)
            ),
        );
    }
}

/// The `Umask:` line of /proc/PID/status: the process's umask, in octal.
fn umask_of(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .unwrap()
        .trim()
        .to_owned()
}

/// A plugin's `umask(0777)` stayed for the daemon's life: another episode's Workspace write
/// then made a `----------` file, and the directories the daemon makes 0700 were narrowed
/// too. The umask noted at start is put back when the call returns, and the plugin named.
#[test]
fn a_umask_changed_by_plugin_code_is_put_back_and_the_plugin_named() {
    let (d, token) = unruly_daemon(&[]);
    let pid = d.child.id();
    let before = umask_of(pid);
    assert_ne!(before, "0777");
    misbehave(&d, &token, "umask");
    assert_eq!(umask_of(pid), before);
    // Another episode's write makes a file with the mode the umask at start gives.
    let other = d.session("ep2", &["Workspace.Write=worktree:5"]);
    let wrote = call(
        &d,
        &other,
        "ailang-write",
        json!({"path": "b.txt", "content": "x"}),
    );
    assert_eq!(wrote["isError"], false, "{wrote}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(d.root().join("ep2/b.txt"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    let umask = u32::from_str_radix(&before, 8).unwrap();
    assert_eq!(mode & umask, 0, "b.txt is {mode:o} under umask {before}");
    assert_ne!(mode, 0, "b.txt is {mode:o}");
    stopped_after_one_put_back(
        d,
        "plugin unruly's execute (Unruly.Process)",
        &format!("the umask was set to 0777 from {before}, which changes the mode of every file and directory the daemon and every plugin make, for every episode"),
    );
}

/// SIGXFSZ's default action ends the process without a word: the daemon ignores it (a write past
/// a file-size limit then fails with EFBIG, said where the write was), and a plugin that sets it
/// back to its default is put right and named.
#[test]
fn sigxfsz_is_ignored_and_plugin_code_that_resets_it_is_put_back_and_named() {
    let (d, token) = unruly_daemon(&[]);
    let pid = d.child.id();
    assert_eq!(disposition(pid, libc::SIGXFSZ), "ignored");
    misbehave(&d, &token, "sigxfsz-default");
    assert_eq!(disposition(pid, libc::SIGXFSZ), "ignored");
    read_answers(&d, &token, "hello\n");
    stopped_after_one_put_back(
        d,
        "plugin unruly's execute (Unruly.Process)",
        "SIGXFSZ was set to its default action (SIG_DFL), which ends the daemon without a word on a write past a file-size limit",
    );
}

/// An `alarm()` by plugin code (old C code timing out a blocking call) ended the daemon by
/// SIGALRM a second later, every episode lost, not a word in the log. The daemon catches SIGALRM
/// (and SIGVTALRM, SIGPROF), says the first in one line, and keeps serving.
#[test]
fn an_alarm_set_by_plugin_code_is_said_once_and_never_ends_the_daemon() {
    let (d, token) = unruly_daemon(&[]);
    let pid = d.child.id();
    for signal in [libc::SIGALRM, libc::SIGVTALRM, libc::SIGPROF] {
        assert_eq!(disposition(pid, signal), "caught", "{signal}");
    }
    misbehave(&d, &token, "alarm");
    let line = "worldd: SIGALRM arrived: plugin code or a library set a timer (alarm(), setitimer()); its default action would have ended the process without a word, so the daemon catches it and does nothing (said once; docs/handler-authors.md §9)";
    d.wait_for_log(line);
    misbehave(&d, &token, "alarm");
    // The second alarm has fired before the stop, or "said once" would prove nothing.
    misbehave(&d, &token, "alarm-fired");
    read_answers(&d, &token, "hello\n");
    let (status, _, log, _dir) = d.stop_with_log(Duration::from_secs(10));
    assert_eq!(status.code(), Some(0), "{status:?} {log}");
    assert_eq!(log.lines().filter(|l| *l == line).count(), 1, "{log}");
    assert!(errors(&log).is_empty(), "{log}");
}

/// `quick_exit(0)` (C11, C++11) runs no `atexit` handler: plugin code that called it ended the
/// daemon with status 0 and not a line, a clean shutdown to a supervisor. It is said as
/// `exit()` is, and ends the daemon with 70.
#[test]
fn quick_exit_called_by_plugin_code_is_said_and_ends_the_daemon_with_70() {
    let (d, token) = unruly_daemon(&[]);
    let caller = call_unanswered(&d, token, "unruly-process", json!({"what": "quick-exit"}));
    ended_by_plugin_code(
        d,
        caller,
        "quick_exit() was called by plugin code",
        " ERROR quick_exit() was called by plugin code or a library while the daemon served; the daemon did not choose to stop, so it ends with status 70",
    );
}

/// A plugin's decline text kept a real line break in `worldd tools list`, starting a line of
/// the plugin's making in the operator's listing; and the log kept its bidi override (U+202E,
/// which shows the rest of the line, ` plugin=unruly` included, reversed) and U+2028. Both
/// print it escaped, on one line.
#[test]
fn a_plugins_decline_text_is_one_line_in_tools_list_and_in_the_log() {
    let (dir, mut cmd) = serve_with_unruly();
    cmd.arg("--plugin-config")
        .arg("unruly.declineWith=\u{1b}[31mRED \u{202e}evil\nplugin x did not start: forged\u{2028}third");
    let d = Daemon::spawn(dir, cmd);
    let token = d.session("ep1", &["Workspace.Read=worktree:5", "Unruly.Chdir=any:5"]);
    let addr = d.url("");
    let (code, out, err) = worldd(
        &["tools", "list", "--addr", &addr, "--session", &token],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines.last().copied(),
        Some("plugin unruly did not start: declined: \\u001b[31mRED \\u202eevil\\nplugin x did not start: forged\\u2028third"),
        "{out}"
    );
    assert_eq!(
        lines.iter().filter(|l| l.contains("did not start")).count(),
        1,
        "{out}"
    );
    let (_, _, log, _dir) = d.stop_with_log(Duration::from_secs(10));
    let said: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("not started: declined"))
        .collect();
    assert_eq!(said.len(), 1, "{log}");
    assert!(
        said[0].contains(" WARN plugin unruly not started: declined: \\u{1b}[31mRED \\u{202e}evil\\nplugin x did not start: forged\\u{2028}third plugin=unruly "),
        "{log}"
    );
}

/// A plugin's decline reason was kept whole: a 20 MB `declined: …` was one 20 MB log line, and
/// every `GET /v1/handlers` of every session carried it. It is cut at 4096 bytes, on a
/// character's edge, as a handler's failure message is, saying how much was left out.
#[test]
fn a_plugins_decline_reason_is_cut_at_4096_bytes_in_the_log_and_in_get_handlers() {
    let (dir, mut cmd) = serve_with_unruly();
    // "declined: " is 10 bytes: the 4096th byte falls inside an é, which is kept out whole.
    // (Less than a pipe holds: uncut, the daemon's log line must not block its start-up here.)
    let reason = format!("{}é{}", "A".repeat(4085), "B".repeat(50_000));
    cmd.arg("--plugin-config")
        .arg(format!("unruly.declineWith={reason}"));
    let d = Daemon::spawn(dir, cmd);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let cut = format!(
        "declined: {}… (50002 bytes more; the daemon passes on at most 4096 of a plugin's text)",
        "A".repeat(4085)
    );
    let handlers = get(&d.url("/v1/handlers"), Some(&token));
    assert_eq!(handlers.status, 200, "{}", handlers.text());
    let v = handlers.json();
    assert_eq!(v["declined"][0]["name"], "unruly", "{v}");
    assert_eq!(v["declined"][0]["reason"], cut.as_str());
    let (_, _, log, _dir) = d.stop_with_log(Duration::from_secs(10));
    let said: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("not started: declined"))
        .collect();
    assert_eq!(said.len(), 1, "{}", log.len());
    assert!(
        said[0].contains(&format!(
            " WARN plugin unruly not started: {cut} plugin=unruly "
        )),
        "{}",
        said[0]
    );
}

/// Two distinct ports nothing listens on now: both are bound at once, so they cannot be the
/// same one (two binds one after the other could be given the same port back).
fn two_free_ports() -> (u16, u16) {
    let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    (
        a.local_addr().unwrap().port(),
        b.local_addr().unwrap().port(),
    )
}

/// quickstart "starts the plugins once and stops them", but never stopped them: the trial
/// handlers lived on beside the ones serving built again, and a plugin holding anything
/// exclusive (a port, as a plugin serving a webhook does) failed the real start, after the
/// store and the credential were made. The trial's handlers are dropped before it serves.
#[test]
fn quickstart_stops_the_plugins_its_trial_started_before_it_serves() {
    let dir = tempfile::tempdir().unwrap();
    let world = dir.path().join("w");
    std::fs::create_dir_all(&world).unwrap();
    // A store and a live credential already: quickstart asks nothing.
    store_with_credential_file(&world, "demo", "demo.session");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    add_unruly(&plugins);
    let err = || std::fs::read_to_string(dir.path().join("err")).unwrap();
    // The ports are free when chosen, but another process may take one before quickstart
    // binds it: then it is tried again with two others.
    let mut attempts = 0;
    let (mut child, held) = loop {
        attempts += 1;
        let (bind, held) = two_free_ports();
        let mut child = Command::new(WORLDD)
            .args(["quickstart", "--dir"])
            .arg(&world)
            .args(["--bind", &format!("127.0.0.1:{bind}"), "--plugin-dir"])
            .arg(&plugins)
            .args([
                "--plugin-config",
                &format!("unruly.listenOn=127.0.0.1:{held}"),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("err")).unwrap())
            .spawn()
            .unwrap();
        let health = format!("http://127.0.0.1:{bind}/v1/health");
        let until = std::time::Instant::now() + Duration::from_secs(30);
        let served = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Err(status);
            }
            if ureq::get(&health).call().is_ok() {
                break Ok(());
            }
            assert!(std::time::Instant::now() < until, "quickstart never served");
            std::thread::sleep(Duration::from_millis(50));
        };
        match served {
            Ok(()) => break (child, held),
            Err(_) if attempts < 3 && err().contains("Address already in use") => continue,
            Err(status) => panic!(
                "quickstart ended ({status:?}) instead of serving:\n{}",
                err()
            ),
        }
    };
    // The serving handler holds the port; the trial's let it go.
    assert!(std::net::TcpListener::bind(("127.0.0.1", held)).is_err());
    // SAFETY: kill(2) of the child this test started.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{}", err());
    let log = err();
    // Started twice: the trial's, then the one serving.
    assert_eq!(log.matches("loaded plugin").count(), 2, "{log}");
    assert!(!log.contains(" ERROR "), "{log}");
    assert!(!log.contains(" WARN "), "{log}");
}
