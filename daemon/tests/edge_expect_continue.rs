//! `Expect: 100-continue` over real sockets: a request whose refusal is decided from its head
//! is answered at once with its final status, never invited to upload its body, and a client
//! that sends the body anyway still reads its answer instead of a reset.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;

const WS: &[&str] = &["worldd_workspace"];
const MIB: usize = 1024 * 1024;

/// One request of the table: what it is, its method, target, `Host`, further fields (each
/// ending in CRLF), declared body length, and the status it is refused with.
struct Case {
    what: &'static str,
    method: &'static str,
    target: &'static str,
    host: String,
    fields: String,
    length: usize,
    status: u16,
}

/// A request for every refusal decided from the head: no credential, a foreign `Host` or
/// `Origin`, an unknown route, a method the route does not serve, a declared length over the
/// route's limit (the MCP route's 4 MiB, and `/v1/commit`'s, here 4096 bytes).
fn refusals(d: &Daemon) -> Vec<Case> {
    let agent = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let operator = d.operator_session("ops", &["World.Commit=log:5"]);
    let ours = d.addr.clone();
    let mcp = "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n";
    let case = |what, method, target, host: &str, fields: String, length, status| Case {
        what,
        method,
        target,
        host: host.to_owned(),
        fields,
        length,
        status,
    };
    vec![
        case(
            "no credential",
            "POST",
            "/mcp/",
            &ours,
            mcp.to_owned(),
            1000,
            401,
        ),
        case(
            "foreign Host",
            "POST",
            "/mcp/",
            "evil.example.com",
            format!("Authorization: Bearer {agent}\r\n{mcp}"),
            1000,
            403,
        ),
        case(
            "foreign Origin",
            "POST",
            "/mcp/",
            &ours,
            format!("Origin: http://evil.example.com\r\nAuthorization: Bearer {agent}\r\n{mcp}"),
            1000,
            403,
        ),
        case(
            "unknown route",
            "POST",
            "/nowhere",
            &ours,
            String::new(),
            1000,
            404,
        ),
        case(
            "method not served",
            "POST",
            "/v1/health",
            &ours,
            String::new(),
            1000,
            405,
        ),
        case(
            "over the MCP limit",
            "POST",
            "/mcp/",
            &ours,
            format!("Authorization: Bearer {agent}\r\n{mcp}"),
            4 * MIB + 1,
            413,
        ),
        case(
            "over the commit limit",
            "POST",
            "/v1/commit",
            &ours,
            format!("Authorization: Bearer {operator}\r\nContent-Type: application/json\r\n"),
            5000,
            413,
        ),
    ]
}

fn start() -> Daemon {
    Daemon::start(WS, &["--commit-body-bytes", "4096"])
}

fn head(c: &Case, expect: bool) -> String {
    let expect = if expect {
        "Expect: 100-continue\r\n"
    } else {
        ""
    };
    format!(
        "{} {} HTTP/1.1\r\nHost: {}\r\n{}{expect}Content-Length: {}\r\nConnection: close\r\n\r\n",
        c.method, c.target, c.host, c.fields, c.length
    )
}

/// The answer to `c` sent without the expectation, its body whole: what the refusal says.
fn control(d: &Daemon, c: &Case) -> Vec<u8> {
    let mut s = TcpStream::connect(&d.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(head(c, false).as_bytes()).unwrap();
    s.write_all(&vec![b' '; c.length]).unwrap();
    let (head, body) = read_one_answer(&mut s);
    assert!(
        head.starts_with(&format!("HTTP/1.1 {} ", c.status)),
        "{}: {head}",
        c.what
    );
    body
}

/// The daemon sent `100 Continue` to requests it had already refused from their head (no
/// credential, a foreign Host or Origin, an unknown route, a method not served, a declared
/// length over the limit), read up to 4 MiB + 64 KiB of body it then threw away, and made a
/// client that waited for the `100` wait the 2 s linger for its refusal.
#[test]
fn a_request_expecting_100_continue_that_is_refused_from_its_head_gets_its_final_status_at_once() {
    let d = start();
    for c in refusals(&d) {
        let said = control(&d, &c);
        let mut s = TcpStream::connect(&d.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let sent = Instant::now();
        s.write_all(head(&c, true).as_bytes()).unwrap();
        let (head, body) = read_one_answer(&mut s);
        let took = sent.elapsed();
        assert!(
            head.starts_with(&format!("HTTP/1.1 {} ", c.status)),
            "{}: {head}",
            c.what
        );
        assert_eq!(
            String::from_utf8_lossy(&body),
            String::from_utf8_lossy(&said),
            "{}",
            c.what
        );
        assert!(
            took < Duration::from_millis(1000),
            "{}: answered after {took:?}",
            c.what
        );
    }
    // The exact refusal of the commit over its limit, as the table's last case gave it.
    let commit = refusals(&d).pop().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&control(&d, &commit)),
        r#"{"error":{"class":"PayloadTooLarge","message":"commit body exceeds 4096 bytes"}}"#
    );
}

/// A client may send its body without waiting for the `100` (RFC 9110 §10.1.1): once its
/// refusal has gone out, at once, the body it sends anyway is read and dropped, so the client
/// reads its answer instead of having the connection reset under it.
#[test]
fn a_client_that_sends_its_body_anyway_after_expecting_100_continue_still_reads_its_refusal() {
    let d = start();
    for c in refusals(&d) {
        let said = control(&d, &c);
        let mut s = TcpStream::connect(&d.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(head(&c, true).as_bytes()).unwrap();
        // The refusal is out before the body comes.
        std::thread::sleep(Duration::from_millis(300));
        let body = vec![b' '; c.length];
        for part in body.chunks(64 * 1024) {
            s.write_all(part)
                .unwrap_or_else(|e| panic!("{}: the daemon closed mid-body: {e}", c.what));
        }
        let mut answer = Vec::new();
        let read = s.read_to_end(&mut answer);
        let text = String::from_utf8_lossy(&answer);
        assert!(read.is_ok(), "{}: {read:?} after {text:?}", c.what);
        assert!(
            text.starts_with(&format!("HTTP/1.1 {} ", c.status)),
            "{}: {text}",
            c.what
        );
        assert!(
            text.ends_with(&*String::from_utf8_lossy(&said)),
            "{}: {text}",
            c.what
        );
    }
}

/// What a refused client sends after expecting `100 Continue` is read for at most the linger's
/// 2 s: one that never sends its body, and keeps its connection open, does not hold the
/// connection (and the reading task) for ever. The daemon closes it once the 2 s are up.
#[test]
fn a_refused_client_that_never_sends_its_body_is_closed_when_the_linger_ends() {
    let d = start();
    let c = refusals(&d).remove(0);
    assert_eq!(c.what, "no credential");
    let mut s = TcpStream::connect(&d.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let sent = Instant::now();
    s.write_all(head(&c, true).as_bytes()).unwrap();
    let (head, _) = read_one_answer(&mut s);
    assert!(head.starts_with("HTTP/1.1 401 "), "{head}");
    // The body never comes; the connection stays open on this side.
    let mut rest = Vec::new();
    let read = s.read_to_end(&mut rest);
    let took = sent.elapsed();
    assert!(
        read.is_ok(),
        "{read:?} after {took:?}: the daemon kept the connection"
    );
    assert_eq!(rest, b"");
    assert!(took >= Duration::from_secs(2), "closed after {took:?}");
}
