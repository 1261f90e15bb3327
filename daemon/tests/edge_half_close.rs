//! A client that half-closes its connection (`shutdown(SHUT_WR)`: `nc -N`, `socat`, many
//! HTTP/1.0-era tools) right after its request. The daemon takes the end of the request stream
//! for its client gone (the same end is how it notices a caller that leaves mid-call, and frees
//! that call's place), so the request is dropped unanswered. This is the documented behaviour
//! (docs/http-api.md, docs/operators.md "Limits and the edge"); these tests pin it, and that
//! nothing of such a request runs, so that neither can change unnoticed.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

use common::*;

const WS: &[&str] = &["worldd_workspace"];

/// An MCP `tools/call` of `ailang-write` writing `path`, complete (head and body), as raw bytes.
fn write_call(d: &Daemon, token: &str, path: &str) -> String {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"ailang-write","arguments":{{"path":"{path}","content":"x"}}}}}}"#
    );
    format!(
        "POST /mcp/ HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
        d.addr,
        body.len()
    )
}

/// Everything the daemon sends on a connection until it closes it.
fn until_closed(s: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    s.read_to_end(&mut got)
        .unwrap_or_else(|e| panic!("{e} after {:?}", String::from_utf8_lossy(&got)));
    got
}

/// The calls of `tool` counted in `/v1/metrics` (any outcome).
fn calls_counted(d: &Daemon, tool: &str) -> usize {
    get(&d.url("/v1/metrics"), None)
        .text()
        .lines()
        .filter(|l| l.starts_with(&format!("worldd_calls_total{{tool=\"{tool}\"")))
        .count()
}

#[test]
fn a_call_whose_client_half_closes_after_sending_it_gets_no_answer_and_nothing_runs() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:100"]);
    let head = get(&d.url("/v1/head"), Some(&token));
    assert_eq!(head.status, 200, "{}", head.text());
    for i in 0..20 {
        let mut s = TcpStream::connect(&d.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(write_call(&d, &token, &format!("half-{i}.txt")).as_bytes())
            .unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let got = until_closed(&mut s);
        assert_eq!(String::from_utf8_lossy(&got), "", "try {i}: no answer");
    }
    // Nothing ran: no file, no call counted, nothing journaled (the world head is where it was).
    std::thread::sleep(Duration::from_millis(500));
    for i in 0..20 {
        assert!(!d.root().join(format!("ep1/half-{i}.txt")).exists(), "{i}");
    }
    assert_eq!(calls_counted(&d, "ailang-write"), 0);
    let still = get(&d.url("/v1/head"), Some(&token));
    assert_eq!((still.status, still.text()), (200, head.text()));

    // The same call on a connection kept open until the answer is read runs and is answered.
    let mut s = TcpStream::connect(&d.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let request =
        write_call(&d, &token, "kept.txt").replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).unwrap();
    let got = String::from_utf8_lossy(&until_closed(&mut s)).into_owned();
    assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
    assert!(got.contains(r#""isError":false"#), "{got}");
    assert!(d.root().join("ep1/kept.txt").exists());
    assert_eq!(calls_counted(&d, "ailang-write"), 1);
    let moved = get(&d.url("/v1/head"), Some(&token));
    assert_eq!(moved.status, 200);
    assert_ne!(
        moved.text(),
        head.text(),
        "the kept call selected a new world"
    );
}
