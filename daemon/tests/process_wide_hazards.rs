//! What plugin code, a library or the daemon's surroundings do to the whole process, against the
//! real binary: a stderr whose reader has gone, a `chdir`, an `exit()` (by
//! `tests/fixtures/unruly-plugin`, built on its own as the other fixtures are), a plugin
//! library that is a dangling symbolic link.

mod common;

use std::os::fd::{FromRawFd, OwnedFd};
use std::process::Stdio;

use common::*;
use serde_json::{json, Value};

const WS: &[&str] = &["worldd_workspace"];

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
