//! Limits as an operator configures them, through the real `worldd serve`: a pair of keys of
//! which one can never trip is said once at start naming both (and lowered where that is
//! safe), not refused; the flags are applied over the file's keys before anything is checked,
//! and the log streams leave room under the connection limit. Real config files, real stores,
//! real sockets.

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

/// A daemon started with `world.toml` holding `text`, and `flags`.
fn started(text: &str, flags: &[&str]) -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("world.toml");
    std::fs::write(&config, text).unwrap();
    let mut cmd = Daemon::serve_command(&dir, WS);
    cmd.arg("--config").arg(&config).args(flags);
    Daemon::spawn(dir, cmd)
}

/// The daemon serves, and said `said` once, in a WARN line.
fn said_once(d: &Daemon, said: &str) {
    assert_eq!(get(&d.url("/v1/health"), None).status, 200);
    d.wait_for_log(said);
    let log = d.log();
    assert_eq!(log.matches(said).count(), 1, "{log}");
    let line = log.lines().find(|l| l.contains(said)).unwrap();
    assert!(line.contains("WARN"), "{line}");
}

/// Each of these pairs has one limit that can never trip (the call deadline, the route's body
/// limit or the global stream limit always comes first). Older builds served with them, and
/// the previous release's example file wrote `reply_bytes = "16MiB"`: refused at start, a
/// config that worked stopped the daemon's restart. The daemon serves, and says each once at
/// start in a WARN naming both keys and where each value came from, and what it does.
#[test]
fn a_limit_pair_of_which_one_can_never_trip_is_warned_of_once_and_the_daemon_serves() {
    let cases: [(&str, &[&str], &str); 5] = [
        (
            "",
            &["--handler-deadline-ms", "60000"],
            "--handler-deadline-ms 60000 is not under [limits] call_deadline_ms 20000 (its default): a handler is given at most what is left of its call's deadline, so handler_deadline_ms can never trip; serving with it as it is: set handler_deadline_ms under 20000, or raise call_deadline_ms",
        ),
        (
            "[limits]\nhandler_deadline_ms = 20000\n",
            &[],
            "[limits] handler_deadline_ms 20000 is not under [limits] call_deadline_ms 20000 (its default): a handler is given at most what is left of its call's deadline, so handler_deadline_ms can never trip; serving with it as it is: set handler_deadline_ms under 20000, or raise call_deadline_ms",
        ),
        (
            "[limits]\ncall_deadline_ms = 5000\nhandler_deadline_ms = 4000\nslot_wait_ms = 60000\n[server]\nbody_timeout_ms = 4000\n",
            &[],
            "[limits] slot_wait_ms 60000 is not under [limits] call_deadline_ms 5000 less the 1000 ms a handler is started with: a call that waited that long for a slot would be answered timed out, never refused for capacity, so slot_wait_ms can never trip; serving with it as it is: set slot_wait_ms under 4000, or raise call_deadline_ms",
        ),
        (
            "[server]\nbody_timeout_ms = 30000\n",
            &[],
            "[server] body_timeout_ms 30000 is not under [limits] call_deadline_ms 20000 (its default): MCP and A2A bodies are cut at call_deadline_ms first, and answered under its name; body_timeout_ms still bounds POST /v1/commit; serving with it as it is: set body_timeout_ms under 20000 for it to bound MCP and A2A bodies too",
        ),
        (
            "[limits]\nlarge_call_bytes = \"8MiB\"\n",
            &[],
            "[limits] large_call_bytes 8388608 is not under [limits] mcp_body_bytes 4194304 (its default) or [limits] a2a_body_bytes 1048576 (its default): no body read can be larger, so the large-call lane is never used; serving with it as it is: set large_call_bytes under 4194304 to use it",
        ),
    ];
    for (text, flags, said) in cases {
        let d = started(text, flags);
        said_once(&d, said);
        let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
        let v = tools_call(
            &d,
            &token,
            "ailang-write",
            json!({"path": "a.txt", "content": "served"}),
        );
        assert_eq!(v["result"]["structuredContent"]["ok"], true, "{text}: {v}");
    }
}

/// A `log_streams_per_episode` over `log_streams` could never trip: it is lowered to
/// `log_streams`, said once, and an episode past it is then refused under the episode's limit.
#[test]
fn a_per_episode_stream_limit_over_the_global_one_is_lowered_to_it_and_said() {
    let d = started(
        "[server]\nlog_streams = 2\nlog_streams_per_episode = 10\n",
        &[],
    );
    said_once(&d, "[server] log_streams_per_episode 10 is over [server] log_streams 2: an episode can never hold more streams than all clients together, so log_streams_per_episode could never trip; lowered to 2");
    let reader = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let (status, _one) = open_stream(&d, &reader);
    assert_eq!(status, "HTTP/1.1 200 OK");
    let (status, _two) = open_stream(&d, &reader);
    assert_eq!(status, "HTTP/1.1 200 OK");
    let (status, _three) = open_stream(&d, &reader);
    assert_eq!(status, "HTTP/1.1 503 Service Unavailable");
    // Refused at the episode's limit, in force at 2: the global one took no trip.
    assert_eq!(limit_trips(&d, "log_streams_per_episode"), 1);
    assert_eq!(limit_trips(&d, "log_streams"), 0);
}

/// The previous release's example file wrote `reply_bytes = "16MiB"`, over half of one
/// credential's share of the 64 MiB reply budget; refused at start, it stopped the restart of
/// every daemon configured from it. It is lowered to half a share, and said once.
#[test]
fn reply_bytes_over_half_a_credentials_reply_share_is_lowered_and_said_once() {
    let d = started("[limits]\nreply_bytes = \"16MiB\"\n", &[]);
    said_once(&d, "[limits] reply_bytes 16777216 is over 8388608 bytes, half of one credential's share of [server] reply_budget_bytes 67108864 (its default): lowered to 8388608, so that a batch's answer, which passes reply_bytes by its last reply, is counted against no more than half its credential's share");
    // Under a small budget, the batch is cut at the lowered value.
    let d = started(
        "[limits]\nreply_bytes = \"16MiB\"\n[server]\nreply_budget_bytes = 1024\n",
        &[],
    );
    said_once(&d, "[limits] reply_bytes 16777216 is over 128 bytes, half of one credential's share of [server] reply_budget_bytes 1024: lowered to 128");
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
    let a = mcp_text(
        &d,
        &token,
        "2025-03-26",
        &serde_json::to_vec(&json!([list, ping])).unwrap(),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    let v = a.sse_json();
    assert_eq!(
        v[1],
        json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32600, "message": "invalid request: not run: the replies to this batch reached the 128-byte limit ([limits] reply_bytes); send it again in another POST"}})
    );
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
    // Said (if at all) before the ready line, and read by the harness's thread after it.
    let log = d.log_so_far();
    assert!(!log.contains("handler_deadline_ms"), "{log}");
}

/// An operator who shortens only `call_deadline_ms` was refused for keys never written (the
/// defaults of `handler_deadline_ms`, `slot_wait_ms` and `[server] body_timeout_ms` do not fit
/// under it), and then had them halved without a word (a handler given 2.5 s of a 5 s call
/// where it had all of what was left). A default is the call deadline's to cut, as it always
/// was: nothing is said of it, and nothing changes; a value written is kept, and said.
#[test]
fn a_shorter_call_deadline_alone_starts_without_a_word_of_the_defaults_under_it() {
    for call in ["1000", "5000", "10000"] {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("world.toml");
        std::fs::write(&config, format!("[limits]\ncall_deadline_ms = {call}\n")).unwrap();
        let mut cmd = Daemon::serve_command(&dir, WS);
        cmd.arg("--config").arg(&config);
        let d = Daemon::spawn(dir, cmd);
        assert_eq!(get(&d.url("/v1/health"), None).status, 200, "{call}");
        let (_dir, log) = d.halt_with_log();
        assert!(
            log.contains("listening") || log.contains("loaded plugin"),
            "{log}"
        );
        assert!(!log.contains("can never trip"), "{call}: {log}");
    }
    // One that was written is kept, and said.
    let d = started(
        "[limits]\ncall_deadline_ms = 5000\nhandler_deadline_ms = 8000\n",
        &[],
    );
    said_once(&d, "[limits] handler_deadline_ms 8000 is not under [limits] call_deadline_ms 5000: a handler is given at most what is left of its call's deadline");
}

/// Values contradictory in themselves are still refused at start, and nothing is made.
#[test]
fn a_limit_contradictory_in_itself_is_still_refused() {
    let cases = [
        (
            "[limits]\ncall_deadline_ms = 500\nhandler_deadline_ms = 600\n",
            "[limits] call_deadline_ms 500 is under the 600 ms a handler is started with (1000, or handler_deadline_ms when that is shorter): every call with an effect would be answered timed out; set it to 600 or more",
        ),
        (
            "[server]\nlog_streams_per_episode = 0\n",
            "[server] log_streams and log_streams_per_episode must be at least 1",
        ),
        (
            "[limits]\nreply_bytes = 0\n",
            "[limits] reply_bytes must be at least 1",
        ),
    ];
    for (text, said) in cases {
        let (code, line) = refused(text, &[]);
        assert_eq!(code, Some(2), "{text}: {line}");
        assert_eq!(
            line,
            format!("worldd: daemon startup failed at config: {said}"),
            "{text}"
        );
    }
}

/// A small `--store-ceiling` left a default reserve (an eighth of it) below what one large call
/// stores: a 700 KB write admitted near a 4 MiB ceiling ran, was spent, and met the full map at
/// its commit, unrecorded, with nothing said at start. Such a reserve is said at start, naming
/// where it came from; one of 4 MiB or more is not.
#[test]
fn a_store_reserve_below_one_large_call_is_said_at_start() {
    let d = started("", &["--store-ceiling", "4MiB"]);
    said_once(
        &d,
        "the store reserve is 524288 bytes (its default, an eighth of the ceiling), below the 4194304 bytes one large call can store (its arguments about three times): a write admitted near the ceiling may run and be left unrecorded; set --store-reserve 4MiB or more, under a larger --store-ceiling if need be",
    );
    let d = started("[serve]\nstore_reserve = \"1MiB\"\n", &[]);
    said_once(
        &d,
        "the store reserve is 1048576 bytes (--store-reserve or [serve] store_reserve), below",
    );
    let d = started("", &["--store-ceiling", "64MiB", "--store-reserve", "4MiB"]);
    assert_eq!(get(&d.url("/v1/health"), None).status, 200);
    // Said (if at all) before the ready line, and read by the harness's thread after it.
    let log = d.log_so_far();
    assert!(!log.contains("the store reserve is"), "{log}");
}
