//! The linger that reads the rest of a refused request's small body before its answer goes
//! out (`edge/linger.rs`: at most 64 KiB, for at most 2 s) waits only for a declared
//! `Content-Length`, whose bytes are all the body's own and counted against the 64 KiB. A
//! chunked body, whose chunk-size line could be endless `0`s that no byte count sees, is never
//! waited for: not with a `Content-Length` beside it either way round (the HTTP layer drops
//! that header when `Transfer-Encoding: chunked` is present), nor with `Expect: 100-continue`.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;

const WS: &[&str] = &["worldd_workspace"];

/// A request refused before its body is read (no credential: 401), whose client sends the
/// start of a body and then nothing: its answer, how long it took, and how long until the
/// daemon closed the connection.
fn refused_with_a_stalled_body(d: &Daemon, framing: &str, body: &str) -> (String, Duration) {
    let mut s = TcpStream::connect(&d.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = format!(
        "POST /mcp/ HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{framing}\r\n{body}",
        d.addr
    );
    s.write_all(head.as_bytes()).unwrap();
    let began = Instant::now();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).unwrap();
    (
        String::from_utf8_lossy(&answer).into_owned(),
        began.elapsed(),
    )
}

#[test]
fn a_chunked_body_behind_a_refusal_is_not_lingered_on_whatever_its_headers_say() {
    let d = Daemon::start(WS, &[]);
    // A chunk-size line of zeros, never ended.
    let zeros = "0".repeat(4096);
    for framing in [
        "Transfer-Encoding: chunked\r\n",
        "Content-Length: 100\r\nTransfer-Encoding: chunked\r\n",
        "Transfer-Encoding: chunked\r\nContent-Length: 100\r\n",
        "Expect: 100-continue\r\nTransfer-Encoding: chunked\r\n",
    ] {
        let (answer, took) = refused_with_a_stalled_body(&d, framing, &zeros);
        assert!(answer.starts_with("HTTP/1.1 401 "), "{framing:?}: {answer}");
        // Answered and closed at once, not after the linger's 2 s.
        assert!(took < Duration::from_secs(1), "{framing:?}: {took:?}");
    }
    // What is lingered on: a declared length the client has not finished, read (and counted
    // against the 64 KiB) until the linger's 2 s are up.
    let (answer, took) =
        refused_with_a_stalled_body(&d, "Content-Length: 100\r\n", &"0".repeat(40));
    assert!(answer.starts_with("HTTP/1.1 401 "), "{answer}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(5),
        "{took:?}"
    );
}
