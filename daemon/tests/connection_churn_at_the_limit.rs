//! Connection churn at a low connection limit. One session pipelining reads on twice as many
//! connections as the limit, each reconnecting as soon as the daemon closes it, keeps every
//! connection busy; each of its reconnects takes a place to wait for room. Below a limit of
//! 256 one place was kept for connections whose head carries a known credential, and one
//! credential's share of those places was all of it: the flood held it nearly always, and
//! another session's client connecting for every call found no place and was closed at once
//! (a reset): 88 to 95 of 100 calls lost at a limit of 64. Four are kept now, one credential
//! holding one of them.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;

const WS: &[&str] = &["worldd_workspace"];

/// `threads` threads each keeping a connection with four `GET` of `target` (with `auth`, a
/// header line) pipelined, one more sent as each answer comes, and reconnecting as soon as the
/// daemon closes it, until `stop`.
fn churn(
    addr: &str,
    target: &str,
    auth: &str,
    threads: usize,
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<()>> {
    let one = format!("GET {target} HTTP/1.1\r\nHost: {addr}\r\n{auth}\r\n");
    (0..threads)
        .map(|_| {
            let (addr, one, stop) = (addr.to_owned(), one.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let _ = pipeline(&addr, &one, &stop);
                }
            })
        })
        .collect()
}

/// One connection of [`churn`], until the daemon closes it or `stop`.
fn pipeline(addr: &str, one: &str, stop: &AtomicBool) -> std::io::Result<()> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(one.repeat(4).as_bytes())?;
    let mut r = BufReader::new(s.try_clone()?);
    let mut line = String::new();
    while !stop.load(Ordering::Relaxed) {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            return Ok(());
        }
        if !line.starts_with("HTTP/1.1") {
            continue;
        }
        s.write_all(one.as_bytes())?;
        let mut length = 0;
        loop {
            line.clear();
            if r.read_line(&mut line)? == 0 || line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; length];
        r.read_exact(&mut body)?;
    }
    Ok(())
}

/// An MCP `tools/call` (a read of `x.txt`) of `token` on a connection of its own: its answer's status line, or the
/// error that ended it (a reset, a broken pipe).
fn call(d: &Daemon, token: &str) -> Result<String, std::io::Error> {
    let read = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ailang-read","arguments":{"path":"x.txt"}}}"#;
    let request = format!(
        "POST /mcp/ HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{read}",
        d.addr,
        read.len()
    );
    let mut s = TcpStream::connect(&d.addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(request.as_bytes())?;
    let mut got = Vec::new();
    s.read_to_end(&mut got)?;
    let text = String::from_utf8_lossy(&got);
    Ok(text.lines().next().unwrap_or("").to_owned())
}

/// Alice's reads wait for her one read turn (`reads_per_client`), past her share of requests
/// in flight they are refused, and she reconnects all the while on 128 connections at a limit
/// of 64. Bob, connecting for each MCP call, is served every time.
#[test]
fn a_client_connecting_for_each_call_is_served_while_another_session_churns_connections_at_the_limit(
) {
    let d = Daemon::start(WS, &["--max-connections", "64"]);
    let bob = d.session("bob", &["Workspace.Read=worktree:100000"]);
    std::fs::write(d.root().join("bob").join("x.txt"), "hi\n").unwrap();
    let alice = d.session("alice", &["Workspace.Read=worktree:5"]);
    let stop = Arc::new(AtomicBool::new(false));
    let auth = format!("Authorization: Bearer {alice}\r\n");
    let flood = churn(&d.addr, "/v1/log?from=0&limit=500", &auth, 128, &stop);
    std::thread::sleep(Duration::from_millis(500));
    let mut lost = Vec::new();
    for i in 0..60 {
        match call(&d, &bob) {
            Ok(status) if status == "HTTP/1.1 200 OK" => {}
            other => lost.push((i, format!("{other:?}"))),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    for t in flood {
        t.join().unwrap();
    }
    // 88 to 95 of 100 lost before, in each of three runs; none in three runs after. The margin
    // is for a machine loaded by other tests.
    assert!(lost.len() <= 3, "{} of 60 calls lost: {lost:?}", lost.len());
    assert!(
        trips_after_the_flood(&d, "connections_idle") >= 1,
        "the flood made no room"
    );
}

/// A counter of `/v1/metrics` once the flood has stopped (its connections may still be
/// closing, so the request is tried again a few times).
fn trips_after_the_flood(d: &Daemon, limit: &str) -> u64 {
    let prefix = format!("worldd_limit_trips_total{{limit=\"{limit}\"}} ");
    for _ in 0..50 {
        let Ok(answer) = std::panic::catch_unwind(|| get(&d.url("/v1/metrics"), None)) else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        return answer
            .text()
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()).map(str::to_owned))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
    }
    panic!("no metrics after the flood");
}
