//! A client reading a large answer slowly, at the default kernel send buffer (256 KiB, which
//! Linux doubles). The send deadline asks for 64 KiB in every `send_timeout_ms` of waiting,
//! but Linux wakes a blocked writer only once about a third of its send queue has drained
//! (~170 KiB here), so the daemon used to see no progress at all from a client taking 64 KiB
//! every 4 s under the default 10 s timeout, and reset it after 20 s: it asked for about
//! 17 KiB/s, not the documented 6.4 KiB/s. The deadline now also counts what left the socket's
//! send queue while the writer waited.

mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

const WS: &[&str] = &["worldd_workspace"];

/// The send timeout of these tests: short, so that a test takes seconds.
const TIMEOUT: Duration = Duration::from_millis(1500);

/// A daemon with a send timeout of [`TIMEOUT`] and the default send buffer, and a
/// small-window connection on which a batch of four 1 MB reads has begun to be answered
/// (`200`): an answer of 4 MB and more, which the client then reads at its own pace.
fn slow_reader() -> (Daemon, tempfile::TempDir, std::net::TcpStream) {
    let conf_dir = tempfile::tempdir().unwrap();
    let path = conf_dir.path().join("world.toml");
    std::fs::write(
        &path,
        format!("[server]\nsend_timeout_ms = {}\n", TIMEOUT.as_millis()),
    )
    .unwrap();
    let d = Daemon::start(WS, &["--config", path_str(&path)]);
    let token = d.session("ep1", &["Workspace.Read=worktree:100000000"]);
    let mut batch = Vec::new();
    for id in 1..=4 {
        let file = format!("f{id}.txt");
        std::fs::write(d.root().join("ep1").join(&file), "z".repeat(1_000_000)).unwrap();
        batch.push(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "ailang-read", "arguments": {"path": file}}}));
    }
    let body = Value::Array(batch).to_string();
    let head = format!(
        "POST /mcp/ HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-03-26\r\nContent-Length: {}\r\n\r\n",
        d.addr,
        body.len()
    );
    let mut s = connect_small_window(&d);
    s.write_all((head + &body).as_bytes()).unwrap();
    let mut status = [0u8; 12];
    s.read_exact(&mut status).unwrap();
    assert_eq!(&status, b"HTTP/1.1 200");
    (d, conf_dir, s)
}

/// Read `chunk` bytes, then nothing for `pause`, again and again for `lasting`: how many bytes
/// arrived, and whether the daemon reset the connection (`false`: still open at the end).
fn read_at_pace(
    s: &mut std::net::TcpStream,
    chunk: usize,
    pause: Duration,
    lasting: Duration,
) -> (usize, bool) {
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    let mut total = 0;
    while start.elapsed() < lasting {
        let mut got = 0;
        while got < chunk {
            match s.read(&mut buf[..(chunk - got).min(4096)]) {
                Ok(0) => panic!("the answer ended after {total} bytes"),
                Ok(n) => {
                    got += n;
                    total += n;
                }
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return (total, true),
                Err(e) => panic!("{e} after {total} bytes"),
            }
        }
        std::thread::sleep(pause);
    }
    (total, false)
}

/// 64 KiB every second under a 1.5 s timeout, for 9 s: never reset. The daemon's writer sat
/// blocked through several of those reads, and reset the client at the first timeout.
#[test]
fn a_client_taking_64_kib_in_every_send_timeout_is_not_reset_at_the_default_send_buffer() {
    let (d, _c, mut s) = slow_reader();
    let (got, reset) = read_at_pace(
        &mut s,
        64 * 1024,
        TIMEOUT - Duration::from_millis(500),
        Duration::from_secs(9),
    );
    assert!(!reset, "reset after {got} bytes");
    assert!(got >= 9 * 64 * 1024, "{got} bytes");
    assert_eq!(limit_trips(&d, "send_timeout"), 0);
}

/// 32 KiB every second under a 1.5 s timeout: less than 64 KiB in a timeout of waiting, so it
/// is reset, within two timeouts of its last 64 KiB.
#[test]
fn a_client_taking_less_than_64_kib_in_a_send_timeout_is_reset_at_the_default_send_buffer() {
    let (d, _c, mut s) = slow_reader();
    let start = Instant::now();
    let (got, reset) = read_at_pace(
        &mut s,
        32 * 1024,
        TIMEOUT - Duration::from_millis(500),
        Duration::from_secs(20),
    );
    assert!(reset, "not reset: {got} bytes in {:?}", start.elapsed());
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "reset after {:?}",
        start.elapsed()
    );
    assert_eq!(limit_trips(&d, "send_timeout"), 1);
}
