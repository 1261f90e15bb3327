//! `worldd call` with a body the daemon does not take whole, through the real binary and a
//! real daemon: over its limit it answers before it has read the body and closes the
//! connection; a proxy in front of it plays one that stops reading.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::Duration;

use common::why::session_file;
use common::*;

const WS: &[&str] = &["worldd_workspace"];

/// `worldd ARGS` against the daemon `d` with `session`, no `$WORLD_*` inherited.
fn client(
    d: &Daemon,
    session: &Path,
    args: &[&str],
    stdin: Option<&[u8]>,
) -> (i32, String, String) {
    let addr = d.url("");
    let mut all = args.to_vec();
    all.extend(["--addr", &addr, "--session", path_str(session)]);
    worldd(&all, stdin)
}

/// The head the daemon serves, as text.
fn head(d: &Daemon, token: &str) -> String {
    get(&d.url("/v1/head"), Some(token)).text()
}

/// A body over the daemon's 4 MiB limit is answered 413 at once and the connection closed, so
/// `worldd call` met a broken pipe while still sending and said "the call may still run and
/// commit", though nothing can have run. It now asks what the daemon answers to the request's
/// head, and says the body was too large and nothing ran; the log is unchanged.
#[test]
fn call_with_a_body_over_the_daemons_limit_says_it_was_too_large_and_nothing_ran() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let file = session_file(d.dir.path(), "ep1.session", &token);
    let big = d.dir.path().join("big.json");
    let content = "x".repeat(6_000_000);
    std::fs::write(
        &big,
        serde_json::to_vec(&serde_json::json!({"path": "big.txt", "content": content})).unwrap(),
    )
    .unwrap();
    let before = head(&d, &token);
    let at = format!("@{}", path_str(&big));
    for _ in 0..3 {
        let (code, out, err) = client(&d, &file, &["call", "ailang-write", "--json", &at], None);
        assert_eq!(
            (code, out.as_str(), err.as_str()),
            (
                1,
                "",
                "worldd: /mcp/ returned HTTP 413: request body exceeds the 4 MiB limit (4194304 bytes); the daemon answered before it read the whole request, so nothing ran\n"
            )
        );
    }
    assert_eq!(head(&d, &token), before);
    assert!(!d.root().join("ep1/big.txt").exists());
}

/// A proxy to the daemon at `daemon` that passes each request of at most 1 MiB on (one per
/// connection) and stops reading any larger one after its head; its address.
fn proxy_that_stops_reading_large_bodies(daemon: String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            let daemon = daemon.clone();
            std::thread::spawn(move || pass_or_stall(conn, &daemon));
        }
    });
    addr
}

fn pass_or_stall(mut client: TcpStream, daemon: &str) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match client.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let length: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap());
    if length > 1 << 20 {
        // Holds the connection open and reads nothing more.
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    let mut body = vec![0u8; length];
    client.read_exact(&mut body).unwrap();
    let mut up = TcpStream::connect(daemon).unwrap();
    head.truncate(head.len() - 2);
    head.extend_from_slice(b"Connection: close\r\n\r\n");
    up.write_all(&head).unwrap();
    up.write_all(&body).unwrap();
    let _ = std::io::copy(&mut up, &mut client);
}

/// A body the daemon stops reading, so that `--timeout` passes while it is still being sent,
/// was said as a call the daemon did not answer in time, which "may still run and commit":
/// the daemon never had the whole request, so nothing can have run, and that is said.
#[test]
fn call_whose_body_is_not_taken_within_the_timeout_says_nothing_ran() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let file = session_file(d.dir.path(), "ep1.session", &token);
    // More than the socket buffers of both ends hold, so the writer meets the stall.
    let big = d.dir.path().join("big.json");
    let content = "x".repeat(48_000_000);
    std::fs::write(
        &big,
        serde_json::to_vec(&serde_json::json!({"path": "big.txt", "content": content})).unwrap(),
    )
    .unwrap();
    let before = head(&d, &token);
    let proxy = proxy_that_stops_reading_large_bodies(d.addr.clone());
    let at = format!("@{}", path_str(&big));
    let url = format!("http://{proxy}");
    let (code, out, err) = worldd(
        &[
            "call",
            "ailang-write",
            "--json",
            &at,
            "--addr",
            &url,
            "--session",
            path_str(&file),
            "--timeout",
            "2",
        ],
        None,
    );
    let sent = err
        .strip_prefix(&format!(
            "worldd: the daemon at {url} did not take the whole request to /mcp/ ("
        ))
        .and_then(|rest| rest.strip_suffix(" bytes) within 2 s (--timeout SECS waits longer): it never received it whole, so nothing ran\n"))
        .map(|n| n.parse::<usize>().unwrap());
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(sent.is_some_and(|n| n > 48_000_000), "{err}");
    assert_eq!(head(&d, &token), before);
    assert!(!d.root().join("ep1/big.txt").exists());
}
