//! A graceful stop with calls whose clients have left: each such call runs on without a
//! waiter, on a task of its own, and the stop waits for it as for a request. The runtime's own
//! shutdown dropped those tasks unpolled: the call's effect ran, nothing was committed, and its
//! intent stayed indeterminate for good (its unit spent, its key answering "may have run")
//! after an orderly `systemctl stop`.

mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

#[test]
fn sigterm_waits_for_a_call_whose_client_left_and_it_commits() {
    let bin = format!("ailang.bin={}", path_str(&fixtures::ailang_standin()));
    let d = Daemon::start(
        &["worldd_workspace", "worldd_ailang"],
        &["--plugin-config", &bin],
    );
    let token = d.session("ep1", &["Ailang.Run=worktree:5"]);
    let wt = d.root().join("ep1");
    // A program that runs 6 s and ends well (the stand-in's `slow`): past the 5 s the stop
    // gives handlers past their deadline, so only a wait for the call itself sees it commit.
    std::fs::write(
        wt.join("slow.ail"),
        format!(
            "-- standin: slow\n-- slow-seconds: 6\n{}",
            fixtures::AILANG_HELLO
        ),
    )
    .unwrap();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "ailang-run", "arguments": {"path": "slow.ail"},
                   "_meta": {"world/idempotencyKey": "left-1"}}})
    .to_string();
    let mut client = std::net::TcpStream::connect(&d.addr).unwrap();
    write!(
        client,
        "POST /mcp/ HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
        d.addr,
        body.len()
    )
    .unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    while !wt.join("slow.pid").exists() {
        assert!(Instant::now() < until, "the call never started its program");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The client goes away, as one that timed out or was killed does, and the daemon sees it
    // gone (its gauge of calls running on without a client says so) before it is told to stop.
    drop(client);
    let until = Instant::now() + Duration::from_secs(30);
    while !get(&d.url("/v1/metrics"), None)
        .text()
        .contains("\nworldd_calls_detached 1\n")
    {
        assert!(
            Instant::now() < until,
            "the call was never seen without its client"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status, _, log, dir) = d.stop_with_log(Duration::from_secs(30));
    assert!(status.success(), "{status:?}\n{log}");
    assert!(
        log.contains("waiting for 1 call(s) whose client left to finish and commit"),
        "{log}"
    );
    // Nothing is left without an outcome: the call committed.
    let db = dir.path().join("db");
    let (code, out, err) = worldd(&["doctor", "--db", path_str(&db)], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("\n  0 indeterminate intent(s)"), "{out}");
    assert!(out.contains("1 committed call(s)"), "{out}");
}
