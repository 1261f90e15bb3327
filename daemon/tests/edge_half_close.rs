//! A client that half-closes its connection (`shutdown(SHUT_WR)`: `nc -N`, `socat`, many
//! HTTP/1.0-era tools) right after its request. The daemon takes the end of the request stream
//! for its client gone (the same end is how it notices a caller that leaves mid-call, and frees
//! that call's place), so the request is dropped unanswered. Whether its call ran depends on how
//! far it had got when the daemon saw the end: dropped before it started, nothing ran; started,
//! it runs to its end and is committed like the call of any caller that left. This is the
//! documented behaviour (docs/http-api.md, docs/operators.md "Limits and the edge"); the test
//! pins what holds whichever way the race goes: no answer, and nothing half done.

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

/// The calls of `tool` counted in `/v1/metrics` with the outcome `ok`.
fn calls_ok(d: &Daemon, tool: &str) -> u64 {
    let prefix = format!("worldd_calls_total{{tool=\"{tool}\",outcome=\"ok\"}} ");
    get(&d.url("/v1/metrics"), None)
        .text()
        .lines()
        .find_map(|l| l.strip_prefix(&prefix).map(|n| n.trim().parse().unwrap()))
        .unwrap_or(0)
}

/// The revision of the world the log's head selects: one more for every committed call.
fn revision(d: &Daemon, token: &str) -> u64 {
    let head = get(&d.url("/v1/head"), Some(token));
    assert_eq!(head.status, 200, "{}", head.text());
    let world = get(&d.url(&format!("/v1/worlds/{}", head.text())), Some(token));
    world.json()["revision"].as_u64().unwrap()
}

#[test]
fn a_call_whose_client_half_closes_after_sending_it_gets_no_answer_and_none_is_half_done() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:100"]);
    let before = revision(&d, &token);
    for i in 0..20 {
        let mut s = TcpStream::connect(&d.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(write_call(&d, &token, &format!("half-{i}.txt")).as_bytes())
            .unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let got = until_closed(&mut s);
        assert_eq!(String::from_utf8_lossy(&got), "", "try {i}: no answer");
    }
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

    // A call that had started when its client's end came ran to its end: each file written is a
    // call counted and committed, and no call is committed without its file. The episode runs
    // its calls one at a time in the order they came, so every such call had ended before the
    // kept one ran; counting only once it is answered leaves no call between file and commit.
    // (The count is read again for up to 5 s: a call's metrics follow its answer.)
    let until = std::time::Instant::now() + Duration::from_secs(5);
    let (written, counted, committed) = loop {
        let written = (0..20)
            .filter(|i| d.root().join(format!("ep1/half-{i}.txt")).exists())
            .count() as u64;
        let seen = (
            written,
            calls_ok(&d, "ailang-write"),
            revision(&d, &token) - before,
        );
        if (seen.1, seen.2) == (written + 1, written + 1) || std::time::Instant::now() > until {
            break seen;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!((counted, committed), (written + 1, written + 1));
}
