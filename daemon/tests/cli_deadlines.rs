//! The client verbs' deadlines, each tripped by a peer on a real socket that stops answering:
//! `--timeout` for a daemon that never answers or stops half-way through its answer, and
//! `log tail --follow`'s `--idle-timeout` for a stream that goes silent (it reconnects, resumes
//! after the last entry it printed, and gives up after five silent reconnections in a row).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{lines_of, next_line, WORLDD};
use serde_json::{json, Value};

/// What a fake daemon does with each request it reads.
#[derive(Clone, Copy)]
enum Play {
    /// Read the request, answer nothing, keep the connection open.
    Silent,
    /// Send a status line, headers and the first bytes of a longer body, then nothing.
    HalfAnswer,
    /// `/v1/log/summaries`: an empty page whose next entry is 5. `/v1/log/stream`: the
    /// event-stream head, then the entry after the `Last-Event-ID` the client sent when
    /// `with_entry`, then nothing.
    Log { with_entry: bool },
    /// `/v1/log/summaries` of a log of a million entries none of which the session may see:
    /// every page empty, `from` where it was asked to start (or 999,500).
    LongLog,
}

/// A fake daemon on loopback. Every request head it reads is sent on the returned channel
/// before it is answered (a test reads the channel once the client has its answers);
/// connections stay open until the test ends.
fn fake_daemon(play: Play) -> (String, mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let Some(head) = request_head(&mut conn) else {
                continue;
            };
            if tx.send(head.clone()).is_err() {
                return;
            }
            answer(&mut conn, &head, play);
            held.push(conn);
        }
    });
    (addr, rx)
}

fn request_head(conn: &mut TcpStream) -> Option<String> {
    let mut head = String::new();
    let mut reader = BufReader::new(conn.try_clone().ok()?);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line == "\r\n" {
            return Some(head);
        }
        head.push_str(&line);
    }
}

fn header<'h>(head: &'h str, name: &str) -> Option<&'h str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

fn answer(conn: &mut TcpStream, head: &str, play: Play) {
    let bytes = match play {
        Play::Silent => return,
        Play::HalfAnswer => "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"status\":".to_owned(),
        Play::Log { .. } if head.starts_with("GET /v1/log/summaries") => {
            let body = json!({"items": [], "next": 5}).to_string();
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
        }
        Play::LongLog => {
            let from = head
                .split_once("from=")
                .and_then(|(_, rest)| rest.split(['&', ' ']).next())
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(999_500);
            let body =
                json!({"items": [], "from": from, "next": 1_000_000, "head": 999_999}).to_string();
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
        }
        Play::Log { with_entry } => {
            let mut out =
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
                    .to_owned();
            // An index, or an index and the entry hash the client saw there.
            let last = header(head, "Last-Event-ID").unwrap();
            let last: u64 = last.split(' ').next().unwrap().parse().unwrap();
            if with_entry {
                let i = last + 1;
                let summary = json!({"header": {"entryIndex": i}, "outcome": "ok", "tool": "ailang-read", "episode": "ep1", "invocationId": format!("mcp:ep1:{i}"), "entryHash": "sha256:00"});
                out.push_str(&format!("id: {i}\nevent: entry\ndata: {summary}\n\n"));
            }
            out
        }
    };
    let _ = conn.write_all(bytes.as_bytes());
}

fn worldd() -> Command {
    let mut c = Command::new(WORLDD);
    c.env_remove("WORLD_ADDR")
        .env_remove("WORLD_SESSION")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Run a verb to its end; the exit code, stderr and how long it took.
fn run(args: &[&str]) -> (Output, Duration) {
    let started = Instant::now();
    let out = worldd().args(args).output().unwrap();
    (out, started.elapsed())
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim().to_owned()
}

#[test]
fn a_daemon_that_never_answers_is_given_up_on_at_the_timeout() {
    let (addr, heads) = fake_daemon(Play::Silent);
    let (out, took) = run(&["health", "--addr", &addr, "--timeout", "0.5"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        format!("worldd: the daemon at {addr} did not answer /v1/health within 0.5 s (--timeout SECS waits longer)")
    );
    assert!(heads.try_recv().unwrap().starts_with("GET /v1/health "));
    // Far below the 30 s default: the deadline given is the one that fired.
    assert!(took < Duration::from_secs(10), "{took:?}");

    // `why` reads through the same client.
    let (out, _) = run(&["why", "1", "--addr", &addr, "--timeout", "0.5"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        format!("worldd: why: the daemon at {addr} did not answer /v1/log/1 within 0.5 s (--timeout SECS waits longer)")
    );
}

/// A tool call that timed out may still run and commit: the message says how to find out.
#[test]
fn a_call_that_times_out_says_it_may_still_commit() {
    let (addr, heads) = fake_daemon(Play::Silent);
    let dir = tempfile::tempdir().unwrap();
    let session = dir.path().join("session");
    std::fs::write(&session, "ab".repeat(32)).unwrap();
    std::fs::set_permissions(
        &session,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    // A write, then a read with a key; each answered by nobody.
    let call = |tool: &str, extra: &[&str]| {
        let mut args = vec!["call", tool, "--arg", "path=a.txt"];
        args.extend_from_slice(extra);
        let session = session.to_str().unwrap();
        args.extend(["--addr", &addr, "--session", session, "--timeout", "0.5"]);
        let (out, _) = run(&args);
        assert_eq!(out.status.code(), Some(1));
        stderr(&out)
    };
    let gave_up = format!(
        "worldd: the daemon at {addr} did not answer /mcp/ within 0.5 s (--timeout SECS waits longer)"
    );
    assert_eq!(
        call("ailang-write", &["--arg", "content=hi"]),
        format!("{gave_up} — the call may still run and commit; `worldd log tail` shows what committed: check it before retrying a write")
    );
    assert!(heads.try_recv().unwrap().starts_with("POST /mcp/ "));
    // With a key, the message names the way to reconcile it, and that resending is safe.
    assert_eq!(
        call("ailang-read", &["--idempotency-key", "r-1"]),
        format!("{gave_up} — the call may still run and commit; `worldd calls get r-1` says whether it landed, and resending it with the same key never runs it twice")
    );
}

/// `publish` is a tool call too, but its timeout said only that the daemon did not answer: a
/// script resent a publish that may have committed. It adds what `call` adds.
#[test]
fn a_publish_that_times_out_says_it_may_still_commit() {
    let (addr, heads) = fake_daemon(Play::Silent);
    let dir = tempfile::tempdir().unwrap();
    let session = dir.path().join("session");
    std::fs::write(&session, "ab".repeat(32)).unwrap();
    std::fs::set_permissions(
        &session,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let bundle = dir.path().join("b.bundle.json");
    std::fs::write(&bundle, r#"{"transitions": []}"#).unwrap();
    let (out, _) = run(&[
        "publish",
        bundle.to_str().unwrap(),
        "--addr",
        &addr,
        "--session",
        session.to_str().unwrap(),
        "--timeout",
        "0.5",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        format!("worldd: the daemon at {addr} did not answer /mcp/ within 0.5 s (--timeout SECS waits longer) — the call may still run and commit; `worldd log tail` shows what committed: check it before retrying a write")
    );
    assert!(heads.try_recv().unwrap().starts_with("POST /mcp/ "));
}

#[test]
fn a_daemon_that_stops_half_way_through_its_answer_is_given_up_on_at_the_timeout() {
    let (addr, _heads) = fake_daemon(Play::HalfAnswer);
    let (out, _) = run(&["health", "--addr", &addr, "--timeout", "0.5"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        format!("worldd: the daemon at {addr} began its answer to /v1/health but did not finish it within 0.5 s (--timeout SECS waits longer)")
    );
}

#[test]
fn a_timeout_that_is_not_a_positive_number_of_seconds_is_refused() {
    for (given, why) in [
        (
            "0",
            "0 is out of range: more than 0 and at most 86400 seconds",
        ),
        (
            "-1",
            "-1 is out of range: more than 0 and at most 86400 seconds",
        ),
        (
            "90000",
            "90000 is out of range: more than 0 and at most 86400 seconds",
        ),
        (
            "soon",
            "\"soon\" is not a number of seconds (e.g. 30 or 0.5)",
        ),
    ] {
        let (out, _) = run(&["health", &format!("--timeout={given}")]);
        assert_eq!(out.status.code(), Some(1), "{given}");
        let err = stderr(&out);
        assert!(
            err.starts_with(&format!(
                "error: invalid value '{given}' for '--timeout <SECS>': {why}"
            )),
            "{err}"
        );
    }
}

fn next<T>(rx: &mpsc::Receiver<T>, what: &str) -> T {
    rx.recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("no {what}: {e}"))
}

#[test]
fn log_tail_follow_reconnects_when_the_stream_goes_silent_and_resumes_after_its_last_entry() {
    let (addr, heads) = fake_daemon(Play::Log { with_entry: true });
    let mut tail = worldd()
        .args(["log", "tail", "-f", "--json", "--addr", &addr])
        .args(["--idle-timeout", "0.5"])
        .spawn()
        .unwrap();
    let lines = lines_of(tail.stdout.take().unwrap());
    assert!(next(&heads, "the page").starts_with("GET /v1/log/summaries?limit=500 "));
    // The page said the next entry is 5: the stream starts after entry 4.
    let first = next(&heads, "the stream");
    assert!(first.starts_with("GET /v1/log/stream "), "{first}");
    assert_eq!(header(&first, "Last-Event-ID"), Some("4"));
    let printed: Value = serde_json::from_str(&next_line(&lines, "entry 5")).unwrap();
    assert_eq!(printed["header"]["entryIndex"], 5);
    let silent_since = Instant::now();
    // Nothing more comes on that stream: after the idle timeout (and a short pause) tail asks
    // again, after the entry it printed, named by its index and entry hash.
    let second = next(&heads, "the reconnection");
    assert!(silent_since.elapsed() >= Duration::from_millis(500));
    assert_eq!(header(&second, "Last-Event-ID"), Some("5 sha256:00"));
    let printed: Value = serde_json::from_str(&next_line(&lines, "entry 6")).unwrap();
    assert_eq!(printed["header"]["entryIndex"], 6);
    let _ = tail.kill();
    let _ = tail.wait();
}

/// `log tail` reads back until it has the session's newest entries: a session that sees none of
/// a long log's would read all of it, a request per 500 positions. It stops after 200 pages
/// (100,000 positions) and says so.
#[test]
fn log_tail_reads_back_at_most_200_pages_and_says_where_it_stopped() {
    let (addr, heads) = fake_daemon(Play::LongLog);
    let (out, _) = run(&["log", "tail", "-n", "3", "--addr", &addr]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "worldd: log tail: 0 of the 3 entries asked for are among the newest 100000 log positions, as far back as it reads; `worldd log range --from N` reads from any position\n"
    );
    assert_eq!(heads.try_iter().count(), 200);
}

/// `-n 0` prints nothing: only what is committed from now on, with `--follow`.
#[test]
fn log_tail_of_no_entries_prints_none() {
    let (addr, heads) = fake_daemon(Play::LongLog);
    let (out, _) = run(&["log", "tail", "-n", "0", "--addr", &addr]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
    let asked: Vec<String> = heads.try_iter().collect();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(
        asked[0].starts_with("GET /v1/log/summaries?limit=1 "),
        "{asked:?}"
    );
}

#[test]
fn log_tail_follow_gives_up_after_five_silent_reconnections_in_a_row() {
    let (addr, heads) = fake_daemon(Play::Log { with_entry: false });
    let (out, _) = run(&[
        "log",
        "tail",
        "-f",
        "--addr",
        &addr,
        "--idle-timeout",
        "0.2",
    ]);
    assert_eq!(out.status.code(), Some(1));
    // An idle timeout under the daemon's keep-alive is warned of first: on a real daemon, a
    // quiet log would end the same way.
    assert_eq!(
        stderr(&out),
        "worldd: warning: --idle-timeout 0.2 is not longer than the 15 s between the daemon's keep-alive comments: a quiet log will read as a dead stream, and tail gives up after 5 reconnections that bring nothing; give more than 15 (the default is 45)\nworldd: the log stream ended and could not be resumed"
    );
    let heads: Vec<String> = heads.try_iter().collect();
    let streams: Vec<&String> = heads
        .iter()
        .filter(|h| h.starts_with("GET /v1/log/stream "))
        .collect();
    // The first connection and five reconnections, each after the entry before 5.
    assert_eq!(streams.len(), 6, "{heads:?}");
    assert!(streams
        .iter()
        .all(|h| header(h, "Last-Event-ID") == Some("4")));
}
