//! An authenticated client sent a chunked body whose chunk-size line was endless `0` digits
//! (or `1` and endless blanks): the HTTP layer reads such a line a byte at a time and no data
//! frame ever reaches the body's reader, so neither the size limit nor the small-pieces limit
//! saw it. Two connections cost the daemon 10 s of CPU in 10 s, until `body_timeout_ms`. Now
//! the connection's reads while the body is read are bounded by the body's limit and an
//! allowance for framing: past it the body is refused at once, on every route that reads one,
//! and `limit_trips_total{limit="body_framing"}` counts it. The HTTP layer reads such a line
//! ahead before the route starts reading, within every request's own allowance (64 KiB to
//! linger on, 64 KiB of framing and a request head): when that is passed first, the refusal
//! names it instead (`chunk_size_line_behind_an_unread_body.rs` for routes that never read).

mod common;

use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

const WS: &[&str] = &["worldd_workspace"];
const LIMIT: u64 = 65536;
const SMALL_PIECES: u64 = 100;
/// The limit, its sixteenth, 20 bytes per small piece and 64 KiB (`framing_allowance`).
const ALLOWANCE: u64 = LIMIT + LIMIT / 16 + 20 * SMALL_PIECES + 65536;
/// Every request's: 64 KiB to linger on, 64 KiB of framing and a head of the default 16 KiB
/// (`listener::request_allowance`).
const REQUEST_ALLOWANCE: u64 = 65536 + 65536 + 16384;

fn start() -> (Daemon, tempfile::TempDir) {
    let conf = tempfile::tempdir().unwrap();
    let path = conf.path().join("world.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\nbody_timeout_ms = 30000\nbody_small_pieces = {SMALL_PIECES}\n\
             [limits]\nmcp_body_bytes = {LIMIT}\na2a_body_bytes = {LIMIT}\ncommit_body_bytes = {LIMIT}\n"
        ),
    )
    .unwrap();
    let d = Daemon::start(WS, &["--config", path_str(&path)]);
    (d, conf)
}

/// A chunked POST to `path` whose body is `prefix` and then `filler` for as long as the
/// daemon reads (at most 64 MiB): its answer, and how long it took from the first byte of the
/// body.
fn flood(d: &Daemon, path: &str, token: &str, prefix: &[u8], filler: u8) -> (Answer, Duration) {
    let mut s = TcpStream::connect(&d.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
        d.addr
    );
    s.write_all(head.as_bytes()).unwrap();
    let began = Instant::now();
    s.write_all(prefix).unwrap();
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let block = vec![filler; 64 * 1024];
        let mut sent = 0usize;
        while sent < 64 << 20 {
            match w.write(&block) {
                Ok(n) => sent += n,
                Err(_) => break,
            }
        }
    });
    let (head, body) = read_one_answer(&mut s);
    let took = began.elapsed();
    let _ = s.shutdown(Shutdown::Both);
    writer.join().unwrap();
    (answer_of(&head, body), took)
}

/// The `N` of "the connection sent N bytes … past the M …", checked to be past the body's
/// allowance, or the request's (passed while the line was read ahead), by at most one read of
/// the HTTP layer's buffer (about 400 KiB).
fn read_past_allowance(text: &str) -> u64 {
    let rest = text
        .split_once("the connection sent ")
        .unwrap_or_else(|| panic!("{text}"))
        .1;
    let n: u64 = rest.split(' ').next().unwrap().parse().unwrap();
    let m: u64 = rest
        .split_once("past the ")
        .and_then(|(_, m)| m.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!(m == ALLOWANCE || m == REQUEST_ALLOWANCE, "{text}");
    assert_eq!(
        rest,
        format!("{n} bytes while its body was read, past the {m} its limit and chunked framing allow, before the body was whole (a chunk-size line of endless zeros or blanks?)"),
    );
    assert!(n > m && n <= m + (512 << 10), "{n}");
    n
}

#[test]
fn a_chunk_size_line_of_endless_zeros_or_blanks_is_refused_past_the_limit_and_its_allowance() {
    let (d, _conf) = start();
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let ops = d.operator_session("ops", &["World.Commit=log:5"]);
    let head = || get(&d.url("/v1/head"), Some(&token)).text();
    let before = head();
    let prefix = "request body could not be read: ";

    // MCP: endless zeros, then `1` and endless blanks.
    for (first, filler) in [(&b"0"[..], b'0'), (&b"1"[..], b' ')] {
        let (a, took) = flood(&d, "/mcp/", &token, first, filler);
        assert!(took < Duration::from_secs(10), "answered after {took:?}");
        assert_eq!(a.status, 400, "{}", a.text());
        let text = a.text();
        assert!(text.starts_with(prefix), "{text}");
        read_past_allowance(&text);
    }
    // A2A.
    let (a, took) = flood(&d, "/a2a/", &token, b"0", b'0');
    assert!(took < Duration::from_secs(10), "answered after {took:?}");
    let v = a.json();
    assert_eq!(
        (v["error"]["code"].clone(), v["id"].clone()),
        (json!(-32600), json!(null)),
        "{v}"
    );
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("invalid JSON-RPC request: {prefix}")),
        "{message}"
    );
    read_past_allowance(message);
    // An operator commit.
    let (a, took) = flood(&d, "/v1/commit", &ops, b"0", b'0');
    assert!(took < Duration::from_secs(10), "answered after {took:?}");
    assert_eq!(a.status, 400, "{}", a.text());
    let v = a.json();
    assert_eq!(v["error"]["class"], "BadRequest", "{v}");
    read_past_allowance(v["error"]["message"].as_str().unwrap());

    assert_eq!(limit_trips(&d, "body_framing"), 4);
    assert_eq!(limit_trips(&d, "body_timeout"), 0);
    assert_eq!(head(), before, "nothing was committed");

    // A body of the whole limit in chunks of 512 bytes, and one of small chunks up to the
    // small-pieces limit, are read and answered as before.
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    for (size, len) in [(512, LIMIT as usize), (1, SMALL_PIECES as usize)] {
        let body = format!("{ping}{}", " ".repeat(len - ping.len()));
        let mut request = format!(
            "POST /mcp/ HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
            d.addr
        )
        .into_bytes();
        for part in body.as_bytes().chunks(size) {
            // Each size line as long as a client may send it (leading zeros, 16 digits).
            request.extend_from_slice(format!("{:016x}\r\n", part.len()).as_bytes());
            request.extend_from_slice(part);
            request.extend_from_slice(b"\r\n");
        }
        request.extend_from_slice(b"0\r\n\r\n");
        let a = raw_exchange(&d.addr, &request);
        assert_eq!(a.status, 200, "{}", a.text());
        assert_eq!(a.sse_json()["result"], json!({}), "{}", a.text());
    }
    assert_eq!(limit_trips(&d, "body_framing"), 4);
}
