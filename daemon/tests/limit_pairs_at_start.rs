//! Limits as an operator configures them, through the real `worldd serve`: a pair of keys of
//! which one can never trip is refused at start naming both, the flags are applied over the
//! file's keys before anything is checked, and the log streams leave room under the connection
//! limit. Real config files, real stores, real sockets.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;
use serde_json::json;

const WS: &[&str] = &["worldd_workspace"];

/// A start with `world.toml` holding `text` and `flags`, refused: its exit code and line.
fn refused(text: &str, flags: &[&str]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("world.toml");
    std::fs::write(&config, text).unwrap();
    let mut args = vec!["--config", path_str(&config), "--bind", "127.0.0.1:0"];
    args.extend_from_slice(flags);
    let r = refused_start(&args, dir.path());
    assert!(!dir.path().join(".world").exists(), "{text}: a store made");
    (r.code, r.line)
}

/// Each of these was accepted with no word, and then never tripped: the call deadline (or the
/// route's body limit, or the global stream limit) always came first, and the call deadline
/// fired under the other key's name (`408 … ([server] body_timeout_ms)` 2.2 s into a 30 s
/// body timeout).
#[test]
fn a_limit_that_can_never_trip_is_refused_at_start_naming_both_keys() {
    let cases: [(&str, &[&str], &str); 6] = [
        (
            "",
            &["--handler-deadline-ms", "60000"],
            "[limits] handler_deadline_ms 60000 is not under call_deadline_ms 20000: a handler is given at most what is left of its call's deadline, so handler_deadline_ms would never trip; set handler_deadline_ms under 20000, or raise call_deadline_ms",
        ),
        (
            "[limits]\nhandler_deadline_ms = 20000\n",
            &[],
            "[limits] handler_deadline_ms 20000 is not under call_deadline_ms 20000: a handler is given at most what is left of its call's deadline, so handler_deadline_ms would never trip; set handler_deadline_ms under 20000, or raise call_deadline_ms",
        ),
        (
            "[limits]\ncall_deadline_ms = 5000\nhandler_deadline_ms = 4000\nslot_wait_ms = 60000\n[server]\nbody_timeout_ms = 4000\n",
            &[],
            "[limits] slot_wait_ms 60000 is not under call_deadline_ms 5000 less the 1000 ms a handler is started with: a call that waited that long for a slot would be answered timed out, never refused for capacity; set slot_wait_ms under 4000, or raise call_deadline_ms",
        ),
        (
            "[server]\nbody_timeout_ms = 30000\n",
            &[],
            "[server] body_timeout_ms 30000 is not under [limits] call_deadline_ms 20000: an MCP or A2A body is read within its call's deadline, so body_timeout_ms would never trip; set body_timeout_ms under 20000, or raise call_deadline_ms",
        ),
        (
            "[limits]\nlarge_call_bytes = \"8MiB\"\n",
            &[],
            "[limits] large_call_bytes 8388608 is not under mcp_body_bytes 4194304 or a2a_body_bytes 1048576: no body read can be larger, so the large-call lane would never be used; set large_call_bytes under 4194304",
        ),
        (
            "[server]\nlog_streams = 2\nlog_streams_per_episode = 10\n",
            &[],
            "[server] log_streams_per_episode 10 is over log_streams 2: an episode can never hold more streams than all clients together, so log_streams_per_episode would never trip; set it to 2 or less",
        ),
    ];
    for (text, flags, said) in cases {
        let (code, line) = refused(text, flags);
        assert_eq!(code, Some(2), "{text} {flags:?}: {line}");
        assert_eq!(
            line,
            format!("worldd: daemon startup failed at config: {said}"),
            "{text} {flags:?}"
        );
    }
}

/// The file's `[limits]` were checked before the flags over them were applied: a call deadline
/// of 500 ms, valid with the handler deadline of 400 ms given by `--handler-deadline-ms`, was
/// refused as under the 1000 ms a handler is started with, blaming the file for the flag's
/// key. A flag wins over the file, and what is then in force is checked once.
#[test]
fn the_flags_are_applied_over_the_files_limits_before_they_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("world.toml");
    std::fs::write(
        &config,
        "[limits]\ncall_deadline_ms = 500\nslot_wait_ms = 50\n[server]\nbody_timeout_ms = 400\n",
    )
    .unwrap();
    let d = Daemon::start(
        WS,
        &[
            "--config",
            path_str(&config),
            "--handler-deadline-ms",
            "400",
        ],
    );
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let v = tools_call(
        &d,
        &token,
        "ailang-write",
        json!({"path": "a.txt", "content": "hello"}),
    );
    assert_eq!(v["result"]["structuredContent"]["ok"], true, "{v}");
    // The flag lowers a file's handler deadline the call deadline would refuse, too.
    std::fs::write(&config, "[limits]\nhandler_deadline_ms = 30000\n").unwrap();
    let d = Daemon::start(
        WS,
        &[
            "--config",
            path_str(&config),
            "--handler-deadline-ms",
            "5000",
        ],
    );
    assert_eq!(get(&d.url("/v1/health"), None).status, 200);
}

/// A `GET /v1/log/stream` on a fresh connection: its status line, and the connection, held.
fn open_stream(d: &Daemon, token: &str) -> (String, TcpStream) {
    let mut s = TcpStream::connect(&d.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET /v1/log/stream HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n\r\n",
        d.addr
    )
    .unwrap();
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        if s.read(&mut byte).unwrap() == 0 {
            break;
        }
        line.push(byte[0]);
    }
    (String::from_utf8_lossy(&line).trim_end().to_owned(), s)
}

/// A log stream is a request that never ends: its connection is never idle, so never closed
/// to make room. Under `max_connections` 2 one session's two streams (within its 4) took both,
/// and every other client's request was reset until it closed them. The streams are lowered to
/// half the connections at start, with a WARN line, and the other half serves.
#[test]
fn log_streams_leave_half_the_connections_to_other_requests() {
    let d = Daemon::start(WS, &["--max-connections", "2"]);
    d.wait_for_log("log_streams lowered from 32 to 1 (log_streams_per_episode from 4 to 1) to keep half of max_connections (2) for other requests: a log stream holds its connection while it is open");
    let reader = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let writer = d.session("ep2", &["Workspace.Write=worktree:5"]);
    let (status, _held) = open_stream(&d, &reader);
    assert_eq!(status, "HTTP/1.1 200 OK");
    let (status, _refused) = open_stream(&d, &reader);
    assert_eq!(status, "HTTP/1.1 503 Service Unavailable");
    drop(_refused);
    let v = tools_call(
        &d,
        &writer,
        "ailang-write",
        json!({"path": "b.txt", "content": "served"}),
    );
    assert_eq!(v["result"]["structuredContent"]["ok"], true, "{v}");
    assert_eq!(get(&d.url("/v1/health"), None).status, 200);
}

/// `--handler-deadline-ms 300` (or 10, meant as seconds) was accepted without a word, and
/// every call of the shipped plugins that needs time then failed having spent its unit, or
/// timed out. The daemon serves with it (a plugin may need less), and says so once at start.
#[test]
fn a_handler_deadline_under_a_second_is_said_once_at_start() {
    let d = Daemon::start(WS, &["--handler-deadline-ms", "300"]);
    let line = "handler_deadline_ms 300 is under the 1000 ms a handler is otherwise started with: the shipped plugins keep up to 750 ms of it back to answer a clear failure, so their calls may fail (spending their unit) or time out; raise handler_deadline_ms (or --handler-deadline-ms) to 1000 or more unless every plugin here needs less";
    d.wait_for_log(line);
    assert_eq!(get(&d.url("/v1/health"), None).status, 200);
    assert_eq!(d.log().matches(line).count(), 1, "{}", d.log());
    let d = Daemon::start(WS, &["--handler-deadline-ms", "1000"]);
    assert_eq!(get(&d.url("/v1/health"), None).status, 200);
    assert!(!d.log().contains("handler_deadline_ms"), "{}", d.log());
}

/// An operator who shortens only `call_deadline_ms` was refused for keys never written: the
/// defaults of `handler_deadline_ms` (10 s), `slot_wait_ms` (0.5 s, under what a handler
/// needs to start) and `[server] body_timeout_ms` (10 s) could not fit under it. Unset, they
/// follow it now (half of it); set, they are still checked.
#[test]
fn a_shorter_call_deadline_alone_carries_the_unset_deadlines_under_it() {
    for call in ["1000", "5000", "10000"] {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("world.toml");
        std::fs::write(&config, format!("[limits]\ncall_deadline_ms = {call}\n")).unwrap();
        let mut cmd = Daemon::serve_command(&dir, WS);
        cmd.arg("--config").arg(&config);
        let d = Daemon::spawn(dir, cmd);
        assert_eq!(get(&d.url("/v1/health"), None).status, 200, "{call}");
    }
    // One that was written is still refused.
    let (code, line) = refused(
        "[limits]\ncall_deadline_ms = 5000\nhandler_deadline_ms = 8000\n",
        &[],
    );
    assert_eq!(code, Some(2));
    assert!(
        line.contains("handler_deadline_ms 8000 is not under call_deadline_ms 5000"),
        "{line}"
    );
}
