//! A chunk-size line of endless `0`s behind a request the daemon answers without reading its
//! body (no credential: 401; a foreign `Host`: 403; an unknown route: 404; the same with
//! `Expect: 100-continue`). The body reader's bound on framing (`chunk_size_line_flood.rs`)
//! never saw it: the HTTP layer decoded the line a byte at a time when it read ahead before the
//! route ran and when it drained the unread body after the answer, until the socket ran dry
//! (a client that kept sending cost the daemon seconds of CPU per connection). Now every
//! request's connection may read at most 64 KiB to linger on, 64 KiB of framing and a request
//! head past its own head unless a body it reads allows more; past that its reads end, it
//! closes, and `limit_trips_total{limit="body_framing"}` counts it.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use common::*;

const WS: &[&str] = &["worldd_workspace"];

/// Most a client's writes can get into the daemon's connection and the sockets' buffers
/// between them once the daemon stops reading: the 144 KiB it reads, loopback's receive
/// buffer (at most 6 MiB) and the client's send buffer (4 MiB). Without the bound the daemon
/// reads the whole 64 MiB flood.
const SENT_AT_MOST: u64 = 16 << 20;

/// The daemon's CPU time so far (user and system, from `/proc/<pid>/stat`).
fn cpu(d: &Daemon) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", d.child.id())).unwrap();
    // Fields after the command's closing parenthesis; utime and stime are the 14th and 15th.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis(ticks * 1000 / hz)
}

/// What one attack did: its answer, how long it took from the first byte of the body, how
/// many bytes of the flood the client got written, and whether the daemon closed the
/// connection on it (a write failed) before the 64 MiB were sent.
struct Flooded {
    answer: Answer,
    took: Duration,
    sent: u64,
    closed: bool,
}

/// `head` (ending in its blank line), then a chunk-size line of `0`s for as long as the
/// daemon reads, at most 64 MiB.
fn flood(d: &Daemon, head: &str) -> Flooded {
    let mut s = TcpStream::connect(&d.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let began = Instant::now();
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let block = vec![b'0'; 64 * 1024];
        let mut sent = 0u64;
        while sent < 64 << 20 {
            match w.write(&block) {
                Ok(n) => sent += n as u64,
                Err(_) => return (sent, true),
            }
        }
        (sent, false)
    });
    let (answer_head, body) = read_one_answer(&mut s);
    let took = began.elapsed();
    // The connection ends: at once with the bound, once the flood is read without it.
    let mut rest = [0u8; 4096];
    while matches!(s.read(&mut rest), Ok(n) if n > 0) {}
    let _ = s.shutdown(Shutdown::Both);
    let (sent, closed) = writer.join().unwrap();
    Flooded {
        answer: answer_of(&answer_head, body),
        took,
        sent,
        closed,
    }
}

#[test]
fn endless_zeros_behind_a_request_answered_unread_end_its_connection_past_a_small_allowance() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let head = |path: &str, host: &str, extra: &str| {
        format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{extra}Transfer-Encoding: chunked\r\n\r\n"
        )
    };
    let bearer = format!("Authorization: Bearer {token}\r\n");
    let attacks = [
        (head("/mcp/", &d.addr, ""), 401),
        (head("/mcp/", &d.addr, "Expect: 100-continue\r\n"), 401),
        (head("/mcp/", "evil.example", &bearer), 403),
        (head("/no/such/route", &d.addr, &bearer), 404),
        (
            head(
                "/no/such/route",
                &d.addr,
                &format!("{bearer}Expect: 100-continue\r\n"),
            ),
            404,
        ),
    ];
    let cpu_before = cpu(&d);
    for (head, status) in &attacks {
        let f = flood(&d, head);
        assert_eq!(f.answer.status, *status, "{head}: {}", f.answer.text());
        assert!(
            f.took < Duration::from_secs(2),
            "{head}: answered after {:?}",
            f.took
        );
        assert!(
            f.closed && f.sent <= SENT_AT_MOST,
            "{head}: the daemon read on: {} bytes sent, closed {}",
            f.sent,
            f.closed
        );
    }
    let spent = cpu(&d).saturating_sub(cpu_before);
    eprintln!("daemon CPU for {} attacks: {spent:?}", attacks.len());
    // Measured on a debug build: 1.58 s without the bound (0.3 s to 0.4 s each), 30 ms to 70 ms with it.
    assert!(
        spent < Duration::from_millis(60) * attacks.len() as u32,
        "{spent:?}"
    );
    // Whether a connection reads past its allowance or finds the socket dry first and closes
    // depends on how fast the flood arrives (a fresh clone's run saw none past it): at most
    // one trip a connection.
    let tripped = limit_trips(&d, "body_framing");
    assert!(tripped <= attacks.len() as u64, "{tripped}");
}

/// Large legitimate bodies are never cut by the allowance: a 4 MiB MCP call (the default
/// `mcp_body_bytes`) with a `Content-Length`, chunked in 16 KiB chunks, or with
/// `Expect: 100-continue`, on one keep-alive connection, with small calls and pipelined
/// requests between them.
#[test]
fn bodies_up_to_the_limit_are_read_whole_however_they_are_framed() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let whole = format!("{ping}{}", " ".repeat((4 << 20) - ping.len()));
    let head = |framing: &str| {
        format!(
            "POST /mcp/ HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{framing}\r\n",
            d.addr
        )
    };
    let mut chunked = head("Transfer-Encoding: chunked\r\n").into_bytes();
    for part in whole.as_bytes().chunks(16 << 10) {
        chunked.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
        chunked.extend_from_slice(part);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let mut declared = head(&format!("Content-Length: {}\r\n", whole.len())).into_bytes();
    declared.extend_from_slice(whole.as_bytes());
    let small = format!(
        "{}{ping}",
        head(&format!("Content-Length: {}\r\n", ping.len()))
    );

    let mut s = TcpStream::connect(&d.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    for request in [chunked.as_slice(), &declared, small.as_bytes()] {
        s.write_all(request).unwrap();
        let (head, body) = read_one_answer(&mut s);
        let a = answer_of(&head, body);
        assert_eq!(a.status, 200, "{}", a.text());
    }
    // Pipelined requests on one connection, more than one request's allowance in all: the
    // allowance starts again at every request.
    let bearer = format!("Authorization: Bearer {token}\r\n");
    let mut s = TcpStream::connect(&d.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut pipelined = Vec::new();
    for _ in 0..4 {
        // 96 KiB of padding each: 384 KiB in all, more than a request's allowance.
        let body = format!("{ping}{}", " ".repeat(96 << 10));
        pipelined.extend_from_slice(
            format!(
                "POST /mcp/ HTTP/1.1\r\nHost: {}\r\n{bearer}Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
                d.addr,
                body.len()
            )
            .as_bytes(),
        );
    }
    s.write_all(&pipelined).unwrap();
    for (head, body) in read_answers(&mut s, 4) {
        let a = answer_of(&head, body);
        assert_eq!(a.status, 200, "{}", a.text());
    }
    // Requests without a body, pipelined, whose heads (8 KiB each) are read after the
    // answer before them: 240 KiB in all, and no body to raise the allowance.
    let mut pipelined = Vec::new();
    for _ in 0..30 {
        pipelined.extend_from_slice(
            format!(
                "GET /v1/head HTTP/1.1\r\nHost: {}\r\n{bearer}X-Padding: {}\r\n\r\n",
                d.addr,
                "p".repeat(8 << 10)
            )
            .as_bytes(),
        );
    }
    s.write_all(&pipelined).unwrap();
    for (head, body) in read_answers(&mut s, 30) {
        let a = answer_of(&head, body);
        assert_eq!(a.status, 200, "{}", a.text());
    }
    // Sent after its `100 Continue`.
    let expecting = head(&format!(
        "Content-Length: {}\r\nExpect: 100-continue\r\n",
        whole.len()
    ));
    s.write_all(expecting.as_bytes()).unwrap();
    let (interim, _) = read_one_answer(&mut s);
    assert!(interim.starts_with("HTTP/1.1 100 "), "{interim}");
    s.write_all(whole.as_bytes()).unwrap();
    let (head, body) = read_one_answer(&mut s);
    let a = answer_of(&head, body);
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(limit_trips(&d, "body_framing"), 0);
}
