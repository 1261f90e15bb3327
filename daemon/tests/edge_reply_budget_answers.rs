//! The reply budget's 503s over real sockets: they are answers like any other (the headers
//! every answer carries, CORS for an accepted origin), and they never come before the Host and
//! Origin checks or the missing-Host 400.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;
use serde_json::json;

const WS: &[&str] = &["worldd_workspace"];
const ORIGIN: &str = "http://localhost:3000";
const SHARE_BODY: &str = r#"{"error":{"class":"Unavailable","message":"too many answers to this credential are waiting unread (a quarter of [server] reply_budget_bytes); read them, then retry"}}"#;

/// A daemon whose reply budget is 1 MiB (a credential's share 256 KiB), with a small send
/// buffer so that an unread answer waits in the daemon, counted.
fn start() -> (Daemon, tempfile::TempDir) {
    start_with(&[])
}

/// The daemon of [`start`], given the further arguments `extra`.
fn start_with(extra: &[&str]) -> (Daemon, tempfile::TempDir) {
    let conf_dir = tempfile::tempdir().unwrap();
    let path = conf_dir.path().join("world.toml");
    std::fs::write(
        &path,
        "[server]\nsend_timeout_ms = 30000\nsend_buffer_bytes = 16384\nreply_budget_bytes = 1048576\n",
    )
    .unwrap();
    let mut args = vec!["--config", path_str(&path)];
    args.extend_from_slice(extra);
    (Daemon::start(WS, &args), conf_dir)
}

/// The path of the payload of an input object of about `bytes` bytes `token`'s episode wrote.
fn object_of(d: &Daemon, token: &str, name: &str, bytes: usize) -> String {
    let args = json!({"path": name, "content": "z".repeat(bytes)});
    let v = tools_call(d, token, "ailang-write", args.clone());
    assert_eq!(v["result"]["structuredContent"]["ok"], true, "{v}");
    let reference = broker_core::object::Ref::of_json(&args).unwrap();
    format!("/v1/objects/{reference}?payload=true")
}

/// `GET path` with `token` on a connection with a small receive window, of which only the
/// status line is read: the rest of the answer waits in the daemon, counted.
fn unread_get(d: &Daemon, path: &str, token: &str) -> (TcpStream, String) {
    let auth = format!("Authorization: Bearer {token}\r\n");
    status_line_only(send_get(d, path, &auth, None, true))
}

/// A connection to `d` (from the local address `from` when given, with a small receive window
/// when `small_window`) on which `GET path` is sent with the head lines `auth` (each ending in
/// CRLF; empty for none).
fn send_get(
    d: &Daemon,
    path: &str,
    auth: &str,
    from: Option<[u8; 4]>,
    small_window: bool,
) -> TcpStream {
    let addr: std::net::SocketAddr = d.addr.parse().unwrap();
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    if small_window {
        s.set_recv_buffer_size(4096).unwrap();
    }
    if let Some(from) = from {
        let local = std::net::SocketAddr::from((from, 0));
        s.bind(&local.into()).unwrap();
    }
    s.connect(&addr.into()).unwrap();
    let mut s = TcpStream::from(s);
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {}\r\n{auth}Connection: close\r\n\r\n",
        d.addr
    )
    .unwrap();
    s
}

/// `s` with only the status line of its answer read (the rest waits in the daemon), and that
/// line.
fn status_line_only(mut s: TcpStream) -> (TcpStream, String) {
    let mut status = [0u8; 12];
    s.read_exact(&mut status).unwrap();
    (s, String::from_utf8_lossy(&status).into_owned())
}

/// `GET path` with `token` and the head lines `fields` (each ending in CRLF; `Host` among
/// them when wanted), written raw.
fn raw_get(d: &Daemon, path: &str, token: &str, fields: &str) -> Answer {
    let request = format!(
        "GET {path} HTTP/1.1\r\n{fields}Authorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    raw_exchange(&d.addr, request.as_bytes())
}

/// Every field of `a` but `date` and `content-length`, in the order sent (`connection: close`
/// answers the request's own).
fn fields(a: &Answer) -> Vec<(&str, &str)> {
    a.fields
        .iter()
        .filter(|(k, _)| k != "date" && k != "content-length")
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// The fields of a 503 of the reply budget to a request from the accepted `ORIGIN`.
fn busy_fields_for_origin() -> Vec<(&'static str, &'static str)> {
    vec![
        ("content-type", "application/json"),
        ("retry-after", "1"),
        (
            "access-control-expose-headers",
            "retry-after, allow, www-authenticate",
        ),
        ("access-control-allow-origin", ORIGIN),
        ("vary", "origin"),
        ("x-content-type-options", "nosniff"),
        ("cache-control", "no-store"),
        ("connection", "close"),
    ]
}

/// A browser page on an accepted origin could not read the reply budget's 503 (no
/// `Access-Control-Allow-Origin`: a CORS network error instead of "retry in 1 s"), and the
/// 503 lacked the `nosniff` and `no-store` every other answer carries: it was built outside
/// the router's edge. Both its forms are checked: a request refused before it runs (the
/// credential's share full, or held for a second after a substitution) and an answer replaced
/// because the share had no room for it.
#[test]
fn the_reply_budgets_503_carries_the_edge_headers_and_names_an_accepted_origin() {
    let (d, _c) = start();
    let grants = [
        "Workspace.Read=worktree:100000000",
        "Workspace.Write=worktree:100000000",
    ];
    let ep1 = d.session("ep1", &grants);
    let small = object_of(&d, &ep1, "small.txt", 100_000);
    let big = object_of(&d, &ep1, "big.txt", 600_000);
    let host = format!("Host: {}\r\n", d.addr);
    let with_origin = format!("{host}Origin: {ORIGIN}\r\n");

    // An unread 100 KB answer holds part of ep1's share: the 600 KB one has no room and is
    // replaced.
    let (held_small, status) = unread_get(&d, &small, &ep1);
    assert_eq!(status, "HTTP/1.1 200");
    let replaced = raw_get(&d, &big, &ep1, &with_origin);
    assert_eq!(replaced.status, 503, "{}", replaced.text());
    assert_eq!(fields(&replaced), busy_fields_for_origin());
    assert_eq!(replaced.text(), SHARE_BODY);
    // Within the second it was told, ep1's requests are refused before they run, the same way.
    let early = raw_get(&d, "/v1/head", &ep1, &with_origin);
    assert_eq!(early.status, 503, "{}", early.text());
    assert_eq!(fields(&early), busy_fields_for_origin());
    assert_eq!(early.text(), SHARE_BODY);

    // A full share: refused before running, with the same headers. (The small answer's
    // connection closed frees its part; the hold of a second passes.)
    drop(held_small);
    std::thread::sleep(Duration::from_millis(1200));
    let (_held_big, status) = unread_get(&d, &big, &ep1);
    assert_eq!(status, "HTTP/1.1 200");
    let full = raw_get(&d, "/v1/head", &ep1, &with_origin);
    assert_eq!(full.status, 503, "{}", full.text());
    assert_eq!(fields(&full), busy_fields_for_origin());
    assert_eq!(full.text(), SHARE_BODY);
    // Without an Origin: the same 503, no CORS fields.
    let plain = raw_get(&d, "/v1/head", &ep1, &host);
    assert_eq!(plain.status, 503);
    assert_eq!(
        fields(&plain),
        vec![
            ("content-type", "application/json"),
            ("retry-after", "1"),
            ("x-content-type-options", "nosniff"),
            ("cache-control", "no-store"),
            ("connection", "close"),
        ]
    );
    assert_eq!(plain.text(), SHARE_BODY);
}

/// With its credential's share full, a request with a foreign `Host`, a foreign `Origin` or
/// (HTTP/1.1) no `Host` was answered the budget's `503 … retry` instead of the `403` / `400`
/// that every route gives them before credentials are looked at.
#[test]
fn a_foreign_host_or_origin_or_no_host_is_refused_before_the_reply_budget_is_consulted() {
    let (d, _c) = start();
    let grants = [
        "Workspace.Read=worktree:100000000",
        "Workspace.Write=worktree:100000000",
    ];
    let ep1 = d.session("ep1", &grants);
    let big = object_of(&d, &ep1, "big.txt", 600_000);
    let (_held, status) = unread_get(&d, &big, &ep1);
    assert_eq!(status, "HTTP/1.1 200");
    let host = format!("Host: {}\r\n", d.addr);
    assert_eq!(raw_get(&d, "/v1/head", &ep1, &host).status, 503);

    let foreign_host = raw_get(&d, "/v1/head", &ep1, "Host: evil.example.com\r\n");
    assert_eq!(foreign_host.status, 403);
    assert_eq!(
        foreign_host.text(),
        r#"{"error":{"class":"Forbidden","message":"Host \"evil.example.com\" is not allowed: this daemon answers only to loopback names (localhost, 127.0.0.1, [::1]) and the [server] allowed_hosts of its configuration"}}"#
    );
    let foreign_origin = raw_get(
        &d,
        "/v1/head",
        &ep1,
        &format!("{host}Origin: http://evil.example.com\r\n"),
    );
    assert_eq!(foreign_origin.status, 403);
    assert_eq!(
        foreign_origin.text(),
        r#"{"error":{"class":"Forbidden","message":"Origin \"http://evil.example.com\" is not allowed: this daemon answers only to loopback origins and the [server] allowed_origins of its configuration"}}"#
    );
    let no_host = raw_get(&d, "/v1/head", &ep1, "");
    assert_eq!(no_host.status, 400);
    assert_eq!(
        no_host.text(),
        r#"{"error":{"class":"BadRequest","message":"an HTTP/1.1 request must carry a Host header (RFC 9112 §3.2): send the name and port you reach this daemon by, e.g. Host: 127.0.0.1:7644"}}"#
    );
    // The share is still full: the legitimate request is still refused.
    assert_eq!(raw_get(&d, "/v1/head", &ep1, &host).status, 503);
}

/// `GET path` without a credential on a connection from the local address `from` (any of
/// 127.0.0.0/8) with a small receive window, of which only the status line is read.
fn unread_anonymous_get(d: &Daemon, path: &str, from: [u8; 4]) -> (TcpStream, String) {
    status_line_only(send_get(d, path, "", Some(from), true))
}

/// `GET path` without a credential from the local address `from`, read to its end.
fn anonymous_get_from(d: &Daemon, path: &str, from: [u8; 4]) -> Answer {
    let mut s = send_get(d, path, "", Some(from), false);
    let (head, body) = read_one_answer(&mut s);
    answer_of(&head, body)
}

fn reply_trips(d: &Daemon, limit: &str) -> u64 {
    let m = get(&d.url("/v1/metrics"), None).text();
    let key = format!("worldd_limit_trips_total{{limit=\"{limit}\"}} ");
    m.lines()
        .find_map(|l| l.strip_prefix(key.as_str()))
        .map_or(0, |n| n.trim().parse().unwrap())
}

/// Connections without a credential asking for the workbench's script and reading nothing
/// filled the one anonymous share with it, and every browser then got `503` for the script:
/// the workbench was dead for everyone. Its page and scripts are compiled into the binary, hold
/// no memory while unread, and are not counted: the flood's answers and a browser's are all
/// `200`, and no share is tripped.
#[test]
fn static_workbench_assets_are_not_charged_to_the_reply_budget_so_an_unread_flood_cannot_refuse_them(
) {
    let (d, _c) = start();
    // 24 unread copies of the script (over 40 KiB counted each, before) is more than the
    // anonymous share of 256 KiB.
    let mut flood = Vec::new();
    for _ in 0..24 {
        let (held, status) = unread_anonymous_get(&d, "/workbench/workbench.js", [127, 0, 0, 1]);
        assert_eq!(status, "HTTP/1.1 200");
        flood.push(held);
    }
    for path in [
        "/workbench/workbench.js",
        "/workbench/verify.js",
        "/workbench",
    ] {
        let a = get(&d.url(path), None);
        assert_eq!(a.status, 200, "{path}: {}", a.text());
        let length: usize = a.field("content-length").unwrap().parse().unwrap();
        assert_eq!(a.body.len(), length, "{path}");
    }
    assert_eq!(reply_trips(&d, "reply_share"), 0);
    assert_eq!(reply_trips(&d, "reply_budget"), 0);
    drop(flood);
}

const PEER_BODY: &str = r#"{"error":{"class":"Unavailable","message":"too many answers to this address without a credential are waiting unread (a sixteenth of [server] reply_budget_bytes); read them, then retry"}}"#;

/// Under `--open-reads`, every request without a credential shared one anonymous share, so
/// one client reading nothing refused every other anonymous reader's large answers. Each peer
/// address now holds at most a quarter of the anonymous share: the flooding address is refused
/// (with its own words), another address's reader is served.
#[test]
fn an_anonymous_client_reading_nothing_cannot_refuse_the_large_reads_of_another_address() {
    let (d, _c) = start_with(&["--open-reads"]);
    let grants = [
        "Workspace.Read=worktree:100000000",
        "Workspace.Write=worktree:100000000",
    ];
    let ep1 = d.session("ep1", &grants);
    // About 100 KB: 84 KiB counted, more than an address's part (64 KiB) of the anonymous
    // share (256 KiB).
    let object = object_of(&d, &ep1, "page.txt", 100_000);
    let (held, status) = unread_anonymous_get(&d, &object, [127, 0, 0, 2]);
    assert_eq!(status, "HTTP/1.1 200");
    // The flooding address's part is full: its next answer is replaced.
    let refused = anonymous_get_from(&d, &object, [127, 0, 0, 2]);
    assert_eq!(refused.status, 503);
    assert_eq!(refused.text(), PEER_BODY);
    // Three more unread from three more addresses would fill the anonymous share; two leave
    // room for a reader elsewhere.
    let mut others = Vec::new();
    for from in [[127, 0, 0, 3], [127, 0, 0, 4]] {
        let (more, status) = unread_anonymous_get(&d, &object, from);
        assert_eq!(status, "HTTP/1.1 200");
        others.push(more);
    }
    let reader = anonymous_get_from(&d, &object, [127, 0, 0, 1]);
    assert_eq!(reader.status, 200, "{}", reader.text());
    assert!(reader.body.len() > 100_000);
    assert_eq!(reply_trips(&d, "reply_share"), 1);
    drop((held, others));
}
