//! Hostile clients against the real `worldd` binary over real sockets: each test is named for
//! the attack it repels. The limits are shortened through `[server]`/`[limits]` in a config
//! file so that every deadline trips within the test.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

const WS: &[&str] = &["worldd_workspace"];

/// What a request past its credential's share of requests in flight is told.
const REQUESTS_TEXT: &str = "too many requests from this credential in flight (a quarter of [server] max_connections); retry shortly";
const WS_STALL: &[&str] = &["worldd_workspace", "worldd_stall"];

/// A daemon with `config` as its TOML file (plus `extra` flags).
fn start_with(plugins: &[&str], config: &str, extra: &[&str]) -> (Daemon, tempfile::TempDir) {
    let conf_dir = tempfile::tempdir().unwrap();
    let path = conf_dir.path().join("world.toml");
    std::fs::write(&path, config).unwrap();
    let mut args = vec!["--config", path_str(&path)];
    args.extend_from_slice(extra);
    (Daemon::start(plugins, &args), conf_dir)
}

fn connect(d: &Daemon) -> TcpStream {
    let s = TcpStream::connect(&d.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

/// Read until the peer closes; true when it closed (EOF or reset) rather than timing out.
fn closed_by_peer(s: &mut TcpStream) -> bool {
    matches!(read_to_close(s).1, End::Eof | End::Reset)
}

/// How reading a connection ended.
#[derive(Debug)]
enum End {
    Eof,
    Reset,
    /// Anything else: the read timeout, another error.
    Failed(std::io::Error),
}

/// Everything the peer sends until the connection ends, and how it ended.
fn read_to_close(s: &mut TcpStream) -> (Vec<u8>, End) {
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (got, End::Eof),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return (got, End::Reset),
            Err(e) => return (got, End::Failed(e)),
        }
    }
}

/// The head of an MCP `POST` with `token` declaring a `length`-byte body (and
/// `Expect: 100-continue` when `expect`).
fn mcp_post_head(d: &Daemon, token: &str, length: usize, expect: bool) -> String {
    let expect = if expect {
        "Expect: 100-continue\r\n"
    } else {
        ""
    };
    format!(
        "POST /mcp/ HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{expect}Content-Length: {length}\r\n\r\n",
        d.addr
    )
}

/// A connection whose request is in flight: the daemon asked for its 100-byte body
/// (`100 Continue`) and got one byte of it.
fn body_in_flight(d: &Daemon, token: &str) -> TcpStream {
    let mut s = connect(d);
    s.write_all(mcp_post_head(d, token, 100, true).as_bytes())
        .unwrap();
    let mut continued = [0u8; 25];
    s.read_exact(&mut continued).unwrap();
    assert_eq!(&continued, b"HTTP/1.1 100 Continue\r\n\r\n");
    s.write_all(b"{").unwrap();
    s
}

/// A `503` that asks its client to come back in a second, with `text` as its body.
fn assert_busy(a: &Answer, text: &str) {
    assert_eq!(a.status, 503);
    assert_eq!(a.retry_after.as_deref(), Some("1"));
    assert_eq!(a.text(), text);
}

/// Whether `done` holds within `tries` looks, 20 ms apart.
fn eventually(tries: usize, mut done: impl FnMut() -> bool) -> bool {
    (0..tries).any(|_| {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
        false
    })
}

/// One counter or gauge of `/v1/metrics` (0 when absent).
fn metric(d: &Daemon, line_prefix: &str) -> u64 {
    let text = get(&d.url("/v1/metrics"), None).text();
    text.lines()
        .find_map(|l| l.strip_prefix(line_prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn trips(d: &Daemon, limit: &str) -> u64 {
    metric(
        d,
        &format!("worldd_limit_trips_total{{limit=\"{limit}\"}} "),
    )
}

/// One request written as raw bytes on a fresh connection (`Host` the daemon's address, the
/// body's length declared, the connection closed after it): `fields` are further header lines,
/// each ending in CRLF, sent as they are, repeated fields included.
fn raw(d: &Daemon, method: &str, target: &str, fields: &str, body: &str) -> Answer {
    let request = format!(
        "{method} {target} HTTP/1.1\r\nHost: {}\r\n{fields}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        d.addr,
        body.len()
    );
    raw_exchange(&d.addr, request.as_bytes())
}

fn mcp_headers() -> Vec<(&'static str, &'static str)> {
    vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ]
}

// ------------------------------------------------------------------------------------------
// Browsers on accepted origins.

/// A browser sends a preflight before a request with `Authorization`, a JSON body or an MCP
/// header, and hands the page only an answer that names its origin. The daemon answered the
/// preflight 405 and named no origin, so the operator's `allowed_origins` let a browser-based
/// client (the MCP Inspector connecting directly, a web-hosted agent) past the Origin check
/// and no further. A foreign origin is still refused before anything else.
#[test]
fn a_browser_on_an_accepted_origin_gets_its_preflight_and_answers_it_can_read() {
    let d = Daemon::start(WS, &["--allowed-origin", "https://agents.example.com"]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    for origin in ["http://localhost:6274", "https://agents.example.com"] {
        let a = raw(
            &d,
            "OPTIONS",
            "/mcp/",
            &format!(
                "Origin: {origin}\r\nAccess-Control-Request-Method: POST\r\n\
                 Access-Control-Request-Headers: authorization, content-type, mcp-protocol-version\r\n"
            ),
            "",
        );
        assert_eq!(a.status, 204, "{origin}: {:?}", a.fields);
        assert_eq!(a.field("access-control-allow-origin"), Some(origin));
        assert_eq!(a.field("access-control-allow-methods"), Some("GET, POST"));
        let allowed = a.field("access-control-allow-headers").unwrap();
        for name in [
            "authorization",
            "content-type",
            "mcp-protocol-version",
            "a2a-version",
        ] {
            assert!(
                allowed.split(", ").any(|a| a == name),
                "{name} in {allowed}"
            );
        }
        assert_eq!(a.field("access-control-max-age"), Some("600"));
        assert_eq!(a.field("access-control-allow-credentials"), None);

        // The request itself, and a refusal, each name the origin back.
        for (credential, expected) in [(Some(token.as_str()), 200), (None, 401)] {
            let auth =
                credential.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
            let a = raw(
                &d,
                "POST",
                "/mcp/",
                &format!(
                    "Origin: {origin}\r\n{auth}Content-Type: application/json\r\n\
                     Accept: application/json, text/event-stream\r\n"
                ),
                ping,
            );
            assert_eq!(a.status, expected, "{origin}: {:?}", a.fields);
            assert_eq!(a.field("access-control-allow-origin"), Some(origin));
            assert_eq!(
                a.field("access-control-expose-headers"),
                Some("retry-after, allow, www-authenticate")
            );
            assert_eq!(a.field("vary"), Some("origin"));
        }
    }
    // A foreign origin's preflight is refused before anything else, and names no origin.
    let a = raw(
        &d,
        "OPTIONS",
        "/mcp/",
        "Origin: http://evil.example.com\r\nAccess-Control-Request-Method: POST\r\n",
        "",
    );
    assert_eq!(a.status, 403);
    assert_eq!(a.field("access-control-allow-origin"), None);
    // Without an Origin (any client but a browser) nothing changes, and OPTIONS stays unserved.
    let a = raw(&d, "GET", "/v1/health", "", "");
    assert_eq!(a.status, 200);
    assert_eq!(a.field("access-control-allow-origin"), None);
    assert_eq!(raw(&d, "OPTIONS", "/mcp/", "", "").status, 405);
}

// ------------------------------------------------------------------------------------------
// DNS rebinding.

#[test]
fn rebinding_host_and_origin_are_refused_403_on_every_route() {
    let d = Daemon::start(
        WS,
        &[
            "--allowed-host",
            "worldd.internal",
            "--allowed-origin",
            "https://agents.example.com",
        ],
    );
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let ping = br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let routes: [(&str, &str); 6] = [
        ("POST", "/mcp/"),
        ("POST", "/a2a/"),
        ("POST", "/v1/commit"),
        ("GET", "/v1/health"),
        ("GET", "/.well-known/agent.json"),
        ("GET", "/v1/head"),
    ];
    for (method, path) in routes {
        for headers in [
            vec![("Host", "evil.example.com")],
            vec![("Host", "evil.example.com:7644")],
            vec![("Origin", "http://evil.example.com")],
            vec![("Origin", "null")],
            // Credentials change nothing.
            vec![("Host", "a\"b<script>")],
        ] {
            let mut h = mcp_headers();
            h.extend(headers.iter().copied());
            let body = (method == "POST").then_some(&ping[..]);
            let a = request(method, &d.url(path), Some(&token), &h, body);
            assert_eq!(a.status, 403, "{method} {path} {headers:?}: {}", a.text());
            assert_eq!(a.content_type, "application/json");
            let v = a.json();
            assert_eq!(v["error"]["class"], "Forbidden", "{v}");
        }
    }
    let a = request(
        "GET",
        &d.url("/v1/health"),
        None,
        &[("Host", "evil.example.com")],
        None,
    );
    assert_eq!(
        a.json()["error"]["message"],
        "Host \"evil.example.com\" is not allowed: this daemon answers only to loopback names (localhost, 127.0.0.1, [::1]) and the [server] allowed_hosts of its configuration"
    );
    // Loopback names with any port, the listed host and origin, and no Origin at all pass.
    for headers in [
        vec![("Host", "localhost:1")],
        vec![("Host", "[::1]:7644")],
        vec![("Host", "127.0.0.1")],
        vec![("Host", "worldd.internal")],
        vec![("Origin", "http://localhost:5173")],
        vec![("Origin", "https://agents.example.com")],
        vec![],
    ] {
        let a = request("GET", &d.url("/v1/health"), None, &headers, None);
        assert_eq!(a.status, 200, "{headers:?}");
    }
    assert!(trips(&d, "host") >= 18);
    assert!(trips(&d, "origin") >= 12);
}

#[test]
fn an_http11_request_without_host_is_refused_400_and_runs_nothing() {
    // RFC 9112 §3.2: a server must answer 400 to an HTTP/1.1 request without Host. It was
    // served: the host check passed a request that named no host at all.
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let write = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ailang-write","arguments":{"path":"a.txt","content":"x"}}}"#;
    let send = |request: String| raw_exchange(&d.addr, request.as_bytes());
    let refused = json!({"error": {"class": "BadRequest", "message": "an HTTP/1.1 request must carry a Host header (RFC 9112 §3.2): send the name and port you reach this daemon by, e.g. Host: 127.0.0.1:7644"}});
    let a = send("GET /v1/health HTTP/1.1\r\nConnection: close\r\n\r\n".into());
    assert_eq!((a.status, a.json()), (400, refused.clone()));
    let a = send(format!(
        "POST /mcp/ HTTP/1.1\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{write}",
        write.len()
    ));
    assert_eq!((a.status, a.json()), (400, refused));
    assert!(!d.root().join("ep1/a.txt").exists(), "nothing ran");
    assert_eq!(trips(&d, "host"), 2);
    // HTTP/1.0 has no Host to require, and a target in absolute form names its host.
    let a = send("GET /v1/health HTTP/1.0\r\n\r\n".into());
    assert_eq!(a.status, 200, "{}", a.text());
    let a = send(format!(
        "GET http://{}/v1/health HTTP/1.1\r\nConnection: close\r\n\r\n",
        d.addr
    ));
    assert_eq!(a.status, 200, "{}", a.text());
    // With Host, the same write runs.
    let a = send(format!(
        "POST /mcp/ HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{write}",
        d.addr,
        write.len()
    ));
    assert_eq!(
        a.sse_json()["result"]["isError"],
        json!(false),
        "{}",
        a.text()
    );
    assert_eq!(trips(&d, "host"), 2);
}

#[test]
fn an_absolute_form_target_naming_a_foreign_host_is_refused_403() {
    // RFC 9112 §3.2.2: with `GET http://name/path` the target's authority is the host, and a
    // server ignores Host. Checking only Host let `http://evil.example.com/…` through.
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let write = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ailang-write","arguments":{"path":"a.txt","content":"x"}}}"#;
    let fields = format!(
        "Authorization: Bearer {token}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
    );
    let send = |method: &str, target: &str, body: &str| raw(&d, method, target, &fields, body);
    let loopback = d.addr.as_str();
    for (method, path, body) in [
        ("GET", "/v1/health", ""),
        ("GET", "/v1/head", ""),
        ("POST", "/mcp/", write),
    ] {
        for authority in [
            "evil.example.com",
            "evil.example.com:7644",
            "evil.example.com@127.0.0.1",
        ] {
            let a = send(method, &format!("http://{authority}{path}"), body);
            assert_eq!(a.status, 403, "{method} {authority}{path}: {}", a.text());
            assert_eq!(
                a.json()["error"]["message"],
                format!("Host \"{authority}\" is not allowed: this daemon answers only to loopback names (localhost, 127.0.0.1, [::1]) and the [server] allowed_hosts of its configuration")
            );
        }
    }
    assert!(!d.root().join("ep1/a.txt").exists());
    // A loopback target is served, whatever form it takes.
    let a = send("GET", &format!("http://{loopback}/v1/health"), "");
    assert_eq!(a.status, 200, "{}", a.text());
    let a = send(
        "POST",
        &format!(
            "http://localhost{}/mcp/",
            &loopback[loopback.rfind(':').unwrap()..]
        ),
        write,
    );
    assert_eq!(a.status, 200, "{}", a.text());
    assert!(d.root().join("ep1/a.txt").is_file());
}

// Two credentials on one request: whichever a proxy in front checks, the daemon must not act
// on the other.
#[test]
fn a_request_carrying_two_credentials_is_refused_as_malformed_and_runs_nothing() {
    let d = Daemon::start(WS, &[]);
    let grants = ["Workspace.Write=worktree:5", "Workspace.Read=worktree:5"];
    let first = d.session("ep1", &grants);
    let second = d.session("ep2", &grants);
    let mcp_write = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "ailang-write", "arguments": {"path": "mcp.txt", "content": "x"}}});
    let a2a_write = json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/send", "params": {
        "id": "t1", "metadata": {"skill_id": "ailang-write"}, "message": {"role": "user",
        "parts": [{"type": "data", "data": {"path": "a2a.txt", "content": "x"}}]}}});
    let send = |method: &str, path: &str, body: &Value, credentials: &[&str]| {
        let body = if body.is_null() {
            String::new()
        } else {
            body.to_string()
        };
        let fields: String = credentials
            .iter()
            .map(|c| format!("Authorization: Bearer {c}\r\n"))
            .collect();
        let fields = format!(
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{fields}"
        );
        raw(&d, method, path, &fields, &body)
    };
    let head = || get(&d.url("/v1/head"), Some(&first)).text();
    let before = head();
    // Each surface answers as it does any malformed credential.
    let routes = [
        ("POST", "/mcp/", &mcp_write, 401),
        ("POST", "/a2a/", &a2a_write, 200),
        ("POST", "/v1/commit", &json!({}), 400),
        ("GET", "/v1/budget", &Value::Null, 400),
        ("GET", "/v1/log", &Value::Null, 400),
        ("GET", "/v1/log/stream", &Value::Null, 400),
    ];
    for (method, path, body, status) in routes {
        for two in [[&first, &second], [&first, &first]] {
            let a = send(method, path, body, &[two[0], two[1]]);
            assert_eq!(a.status, status, "{method} {path}: {}", a.text());
            assert!(
                a.text().contains(
                    "malformed Authorization header: expected Bearer <64-hex-credential>"
                ),
                "{method} {path}: {}",
                a.text()
            );
        }
    }
    // Nothing ran: no file in either worktree, nothing committed.
    for episode in ["ep1", "ep2"] {
        let files: Vec<_> = std::fs::read_dir(d.root().join(episode)).unwrap().collect();
        assert!(files.is_empty(), "{episode}: {files:?}");
    }
    assert_eq!(head(), before);
    // The same writes with one credential each run: the refusals above are what stopped them.
    let a = send("POST", "/mcp/", &mcp_write, &[&first]);
    assert_eq!(a.status, 200, "{}", a.text());
    let a = send("POST", "/a2a/", &a2a_write, &[&second]);
    assert_eq!(a.status, 200, "{}", a.text());
    assert!(d.root().join("ep1/mcp.txt").is_file());
    assert!(d.root().join("ep2/a2a.txt").is_file());
    assert_ne!(head(), before);
}

/// JSON-RPC 2.0 answers no notification, so an A2A notification runs nothing (it wrote a file
/// and was answered); a message that is both a request and a response (`method` beside
/// `result`, which a proxy reading responses would let through) is refused on both surfaces;
/// and an A2A id or method JSON-RPC forbids is an invalid request, not echoed back.
#[test]
fn notifications_and_messages_json_rpc_forbids_run_nothing_on_either_surface() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:9"]);
    let head = || get(&d.url("/v1/head"), Some(&token)).text();
    let before = head();
    let write = |envelope: &str| {
        format!(
            r#"{{"jsonrpc":"2.0",{envelope}"params":{{"id":"n-1","metadata":{{"skill_id":"ailang-write"}},"message":{{"role":"user","parts":[{{"type":"data","data":{{"path":"ran.txt","content":"ran"}}}}]}}}}}}"#
        )
    };
    let a2a_post = |body: String| {
        request(
            "POST",
            &d.url("/a2a/"),
            Some(&token),
            &[("Content-Type", "application/json")],
            Some(body.as_bytes()),
        )
    };
    let a = a2a_post(write(r#""method":"tasks/send","#));
    assert_eq!((a.status, a.text()), (202, String::new()));
    for (envelope, why) in [
        (
            r#""id":{"x":[1]},"method":"tasks/send","#,
            r#""id" must be a string, a number or null"#,
        ),
        (
            r#""id":[1],"method":"tasks/send","#,
            r#""id" must be a string, a number or null"#,
        ),
        (
            r#""id":true,"method":"tasks/send","#,
            r#""id" must be a string, a number or null"#,
        ),
        (r#""id":1,"method":7,"#, r#""method" must be a string"#),
        (
            r#""id":1,"result":{},"method":"tasks/send","#,
            r#"a message is a request ("method") or a response ("result", "error"), not both"#,
        ),
        (
            r#""id":1,"error":{"code":1,"message":"x"},"method":"tasks/send","#,
            r#"a message is a request ("method") or a response ("result", "error"), not both"#,
        ),
    ] {
        let a = a2a_post(write(envelope));
        assert_eq!(a.status, 200, "{envelope}");
        assert_eq!(
            a.json(),
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600,
                   "message": format!("invalid JSON-RPC request: {why}")}}),
            "{envelope}"
        );
    }
    // Over MCP, the same both-at-once message.
    let body = r#"{"jsonrpc":"2.0","id":5,"result":{},"method":"tools/call","params":{"name":"ailang-write","arguments":{"path":"ran.txt","content":"ran"}}}"#;
    let a = request(
        "POST",
        &d.url("/mcp/"),
        Some(&token),
        &mcp_headers(),
        Some(body.as_bytes()),
    );
    assert_eq!(
        a.sse_json(),
        json!({"jsonrpc": "2.0", "id": 5, "error": {"code": -32600, "message":
               "invalid request: a message is a request (\"method\") or a response (\"result\", \"error\"), not both"}})
    );
    assert_eq!(head(), before);
    assert!(!d.root().join("ep1/ran.txt").exists());
}

#[test]
fn a_member_named_twice_in_an_mcp_message_is_refused_and_runs_nothing() {
    // serde_json keeps the last of two members, many parsers the first: a policy proxy that
    // checked `"path":"first.txt"` would pass a call that writes `second.txt`.
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let head = || get(&d.url("/v1/head"), Some(&token)).text();
    let before = head();
    let post = |body: &str, version: &str| {
        let mut headers = mcp_headers();
        headers.push(("MCP-Protocol-Version", version));
        request(
            "POST",
            &d.url("/mcp/"),
            Some(&token),
            &headers,
            Some(body.as_bytes()),
        )
    };
    let call = |params: &str| {
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{params}}}"#)
    };
    let bodies = [
        (
            call(
                r#"{"name":"ailang-write","arguments":{"path":"first.txt","content":"x","path":"second.txt"}}"#,
            ),
            "path",
        ),
        // Compared after unescaping.
        (
            call(
                r#"{"name":"ailang-write","arguments":{"path":"first.txt","content":"x","\u0070ath":"second.txt"}}"#,
            ),
            "path",
        ),
        (
            call(
                r#"{"name":"ailang-read","arguments":{"path":"first.txt","content":"x"},"name":"ailang-write"}"#,
            ),
            "name",
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#.to_owned(),
            "id",
        ),
        // One item of a batch: the whole POST is refused, its first item does not run.
        (
            format!(
                "[{},{}]",
                call(r#"{"name":"ailang-write","arguments":{"path":"first.txt","content":"x"}}"#),
                call(
                    r#"{"name":"ailang-write","arguments":{"path":"b.txt","content":"x","content":"y"}}"#
                )
            ),
            "content",
        ),
    ];
    for (body, key) in &bodies {
        let a = post(body, "2025-03-26");
        assert_eq!(a.status, 200, "{body}: {}", a.text());
        assert_eq!(
            a.sse_json(),
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700,
                "message": format!("Parse error: duplicate key \"{key}\"; nothing was run")}}),
            "{body}"
        );
    }
    // The stateless revision answers the same error with its status for -32700.
    let a = post(&bodies[0].0, "2026-07-28");
    assert_eq!(a.status, 400, "{}", a.text());
    assert_eq!(
        a.json()["error"]["message"],
        "Parse error: duplicate key \"path\"; nothing was run"
    );
    let files: Vec<_> = std::fs::read_dir(d.root().join("ep1")).unwrap().collect();
    assert!(files.is_empty(), "{files:?}");
    assert_eq!(head(), before);
    // A2A parses strictly too.
    let a2a = r#"{"jsonrpc":"2.0","id":1,"method":"tasks/send","params":{"id":"t1","metadata":{"skill_id":"ailang-write"},"message":{"role":"user","parts":[{"type":"data","data":{"path":"first.txt","content":"x","path":"second.txt"}}]}}}"#;
    let a = request(
        "POST",
        &d.url("/a2a/"),
        Some(&token),
        &[("Content-Type", "application/json")],
        Some(a2a.as_bytes()),
    );
    assert_eq!(
        a.json()["error"],
        json!({"code": -32700, "message": "Parse error: duplicate key \"path\"; nothing was run"}),
        "{}",
        a.text()
    );
    assert_eq!(head(), before);
    // The same call with its member once runs: the duplicate is what stopped it.
    let once = call(r#"{"name":"ailang-write","arguments":{"path":"first.txt","content":"x"}}"#);
    let a = post(&once, "2025-03-26");
    assert_eq!(
        a.sse_json()["result"]["structuredContent"]["ok"],
        true,
        "{}",
        a.text()
    );
    assert!(d.root().join("ep1/first.txt").is_file());
    assert_ne!(head(), before);
}

#[test]
fn a_query_parameter_given_twice_is_refused_400_on_every_route() {
    // A map keeps one of `from=0&from=1`, and parsers disagree on which: a proxy that checked
    // the first would pass a request the daemon served from the second.
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    // An object the reader may read: the registry revision of the tools.
    let revision = get(&d.url("/v1/registry/tools"), Some(&token)).json();
    let object = revision["head"].as_str().unwrap().to_owned();
    let routes = [
        ("/v1/log", "from=0&from=1", "from"),
        ("/v1/log", "limit=1&limit=500", "limit"),
        ("/v1/log/summaries", "from=1&%66rom=0", "from"),
        ("/v1/log/stream", "from=0&from=1", "from"),
        (
            &format!("/v1/objects/{object}") as &str,
            "payload=false&payload=true",
            "payload",
        ),
        ("/v1/objects/by-semantic-id/x", "limit=1&limit=2", "limit"),
        ("/v1/budget", "episode=ep1&episode=ep2", "episode"),
    ];
    for (path, query, name) in routes {
        let a = get(&d.url(&format!("{path}?{query}")), Some(&token));
        assert_eq!(a.status, 400, "{path}?{query}: {}", a.text());
        assert_eq!(
            a.json(),
            json!({"error": {"class": "BadRequest",
                "message": format!("query parameter \"{name}\" is given twice")}}),
            "{path}?{query}"
        );
        // Once is served (the stream is not read: its head is enough).
        let once = query.split('&').next().unwrap();
        if *path != *"/v1/log/stream" {
            let a = get(&d.url(&format!("{path}?{once}")), Some(&token));
            assert_eq!(a.status, 200, "{path}?{once}: {}", a.text());
        }
    }
}

/// An A2A body that is not strict JSON is refused with the parser's account of what and where,
/// in one bounded line: a syntax error, a body nested past 128 levels (20,000 arrays), a
/// member named twice with a 10,000-byte name (quoted to 256 bytes). Nothing runs.
#[test]
fn an_a2a_body_that_is_not_strict_json_says_what_and_where_and_runs_nothing() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let head = || get(&d.url("/v1/head"), Some(&token)).text();
    let before = head();
    let send = |body: &[u8]| {
        let a = request(
            "POST",
            &d.url("/a2a/"),
            Some(&token),
            &mcp_headers(),
            Some(body),
        );
        assert_eq!(a.status, 200, "{}", a.text());
        a.json()
    };
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tasks/send","params":{{"id":"t1","metadata":{{"skill_id":"ailang-write"}},"message":{{"role":"user","parts":[{{"type":"data","data":{{"path":{}{}}}}}]}}}}}}"#,
        "[".repeat(20_000),
        "]".repeat(20_000)
    );
    let key = "k".repeat(10_000);
    let twice = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tasks/send","params":{{"{key}":1,"{key}":2}}}}"#
    );
    let quoted = format!("\"{}…\"", "k".repeat(256));
    // Text that is no JSON value is JSON-RPC's (and A2A's) parse error, as over MCP; JSON past
    // this daemon's bounds is an invalid request.
    for (body, code, message) in [
        (
            r#"{"jsonrpc":"2.0","id":1,"#.to_owned(),
            -32700,
            "Parse error: invalid JSON: expected a string member name, found end of input at line 1, column 25 (byte 24); nothing was run".to_owned(),
        ),
        (
            deep,
            -32700,
            "Parse error: nesting deeper than 128 levels; nothing was run".to_owned(),
        ),
        (
            twice,
            -32700,
            format!("Parse error: duplicate key {quoted}; nothing was run"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","x":1e400}"#.to_owned(),
            -32600,
            "invalid JSON-RPC request: number 1e400 is too large for a 64-bit float".to_owned(),
        ),
    ] {
        assert_eq!(
            send(body.as_bytes()),
            json!({"jsonrpc": "2.0", "id": null,
                   "error": {"code": code, "message": message}}),
        );
    }
    assert_eq!(head(), before, "nothing was committed");
}

/// A body of small objects is refused at `[limits] json_values`, before it is built, on every
/// surface that reads one. `{"a":0}` is 7 bytes of text and several hundred bytes parsed: a
/// 4 MiB MCP body of them took the daemon to 346 MiB, a 1 MiB A2A body to 177 MiB. Both sides
/// of a limit of 200 values; then the default limit against those bodies, with the daemon's
/// memory measured; the nesting limit is counted beside it.
#[test]
fn a_body_of_small_objects_is_refused_at_its_value_limit_before_it_is_built() {
    let (d, _c) = start_with(WS, "[limits]\njson_values = 200\n", &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let ops = d.operator_session("ops", &["World.Commit=log:5"]);
    let head = || get(&d.url("/v1/head"), Some(&token)).text();
    let before = head();
    let numbers = |n: usize| vec!["0"; n].join(",");
    let post = |d: &Daemon, path: &str, credential: &str, headers: &[(&str, &str)], body: &str| {
        request(
            "POST",
            &d.url(path),
            Some(credential),
            headers,
            Some(body.as_bytes()),
        )
    };
    // A ping with an array of `n` numbers in its params holds 6 + n values.
    let ping = |n: usize| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"a":[{}]}}}}"#,
            numbers(n)
        )
    };
    let a = post(&d, "/mcp/", &token, &mcp_headers(), &ping(194));
    assert_eq!(a.status, 200);
    assert_eq!(
        a.sse_json(),
        json!({"jsonrpc": "2.0", "id": 1, "result": {}})
    );
    let refused = "invalid request: a body of more than 200 JSON values ([limits] json_values); nothing was run";
    let a = post(&d, "/mcp/", &token, &mcp_headers(), &ping(195));
    assert_eq!(a.status, 200);
    assert_eq!(
        a.sse_json(),
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": refused}})
    );
    // The stateless revision answers the same with its 400.
    let mut modern = mcp_headers();
    modern.push(("MCP-Protocol-Version", "2026-07-28"));
    let a = post(&d, "/mcp/", &token, &modern, &ping(195));
    assert_eq!(a.status, 400, "{}", a.text());
    assert_eq!(
        a.json(),
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": refused}})
    );
    // A2A: `tasks/get` of an unknown task with an array beside its id holds 7 + n values.
    let get_task = |n: usize| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{{"id":"t1","a":[{}]}}}}"#,
            numbers(n)
        )
    };
    let a = post(&d, "/a2a/", &token, &mcp_headers(), &get_task(193));
    assert_eq!(a.status, 200);
    assert_ne!(a.json()["error"]["code"], json!(-32600), "{}", a.text());
    let a = post(&d, "/a2a/", &token, &mcp_headers(), &get_task(194));
    assert_eq!(
        a.json(),
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600,
               "message": "invalid JSON-RPC request: a body of more than 200 JSON values ([limits] json_values)"}})
    );
    // An operator's commit: an object with one array member holds 2 + n values.
    let commit = |n: usize| format!(r#"{{"a":[{}]}}"#, numbers(n));
    let a = post(&d, "/v1/commit", &ops, &mcp_headers(), &commit(198));
    assert_eq!(a.status, 400);
    assert!(
        !a.text().contains("json_values"),
        "at the limit the body is read: {}",
        a.text()
    );
    let a = post(&d, "/v1/commit", &ops, &mcp_headers(), &commit(199));
    assert_eq!(
        (a.status, a.json()),
        (
            400,
            json!({"error": {"class": "BadRequest",
                   "message": "invalid commit JSON: a body of more than 200 JSON values ([limits] json_values)"}})
        )
    );
    assert_eq!(trips(&d, "json_values"), 4);
    // Nesting past the parsers' limit is counted beside it, on both parsers.
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let a = post(&d, "/mcp/", &token, &mcp_headers(), &deep);
    assert_eq!(a.sse_json()["error"]["code"], json!(-32700));
    let a = post(&d, "/a2a/", &token, &mcp_headers(), &deep);
    assert_eq!(
        a.json()["error"]["message"],
        json!("Parse error: nesting deeper than 128 levels; nothing was run")
    );
    assert_eq!(trips(&d, "json_depth"), 2);
    assert_eq!(head(), before, "nothing was committed");
    drop(d);

    // The default limit against the bodies that took hundreds of megabytes.
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let objects = |bytes: usize| {
        let mut body = String::from(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ailang-write","arguments":{"path":"a.txt","content":"x","a":["#,
        );
        // Each object and its comma is 8 bytes; the last, and the brackets closing, 11.
        while body.len() + 8 + 11 <= bytes {
            body.push_str(r#"{"a":0},"#);
        }
        body.push_str(r#"{"a":0}]}}}"#);
        assert!(body.len() <= bytes && body.len() > bytes - 8);
        body
    };
    let a = post(
        &d,
        "/mcp/",
        &token,
        &mcp_headers(),
        &objects(4 * 1024 * 1024),
    );
    assert_eq!(
        a.sse_json()["error"]["message"],
        json!("invalid request: a body of more than 16384 JSON values ([limits] json_values); nothing was run")
    );
    let a = post(&d, "/a2a/", &token, &mcp_headers(), &objects(1024 * 1024));
    assert_eq!(
        a.json()["error"]["message"],
        json!("invalid JSON-RPC request: a body of more than 16384 JSON values ([limits] json_values)")
    );
    let rss = rss_kib(d.child.id());
    assert!(
        rss < 64 * 1024,
        "daemon RSS {rss} KiB after a 4 MiB MCP body and a 1 MiB A2A body of small objects"
    );
}

/// What a body's parse builds counts against the body budget while its call is in flight, at
/// 256 bytes a value beyond what the body's bytes hold (or the first 16 KiB of each, never
/// counted), counted by a scan before the parse (so a refusal costs no parse): eight sessions
/// sending calls of 16,380 values, nine at a time each, held 269 MiB while they waited their
/// turn. Both sides of a
/// 256 KiB budget part of which another session's upload holds, over MCP and A2A; a call that
/// needs more than the whole budget takes all of it when it is free.
#[test]
fn what_a_bodys_parse_holds_counts_against_the_body_budget() {
    let (d, _c) = start_with(WS, "[server]\nbody_budget_bytes = \"256 KiB\"\n", &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let other = d.session("ep2", &["Workspace.Write=worktree:5"]);
    let numbers = |n: usize| vec!["0"; n].join(",");
    let post = |path: &str, body: &str| {
        request(
            "POST",
            &d.url(path),
            Some(&token),
            &mcp_headers(),
            Some(body.as_bytes()),
        )
    };
    // 6 + n values: n = 1,000 take 235.5 KiB past the 16 KiB never counted, 600 135.5 KiB.
    let ping = |n: usize| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"a":[{}]}}}}"#,
            numbers(n)
        )
    };
    let held = || metric(&d, "worldd_body_budget_bytes_held ");
    let a = post("/mcp/", &ping(1_000));
    assert_eq!(a.sse_json()["result"], json!({}), "{}", a.text());
    // Another session's 100 KiB upload holds 84 KiB of the budget, leaving 172.
    let mut upload = connect(&d);
    upload
        .write_all(mcp_post_head(&d, &other, 100 * 1024, false).as_bytes())
        .unwrap();
    upload.write_all(b"{").unwrap();
    assert!(eventually(500, || held() == 84 * 1024), "{}", held());
    let busy = "too many request bodies in flight ([server] body_budget_bytes); retry shortly";
    assert_busy(&post("/mcp/", &ping(1_000)), busy);
    let a = post("/mcp/", &ping(600));
    assert_eq!(a.sse_json()["result"], json!({}), "{}", a.text());
    // A2A: 7 + n values.
    let get_task = |n: usize| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{{"id":"t1","a":[{}]}}}}"#,
            numbers(n)
        )
    };
    let a = post("/a2a/", &get_task(1_000));
    assert_eq!(
        a.json(),
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32603, "message": busy}})
    );
    let a = post("/a2a/", &get_task(600));
    assert_ne!(a.json()["error"]["code"], json!(-32603), "{}", a.text());
    assert_eq!(trips(&d, "body_budget"), 2);
    drop(upload);
    assert!(eventually(500, || held() == 0), "{}", held());
    // 2,006 values would take 501.5 KiB: the whole budget, when it is free.
    let a = post("/mcp/", &ping(2_000));
    assert_eq!(a.sse_json()["result"], json!({}), "{}", a.text());
    assert_eq!(held(), 0, "answered calls hold nothing");
}

/// A body larger than the whole body budget (its size less the 16 KiB never counted) takes
/// all of the budget when it is free, on every route that reads one: it was answered "503 …
/// retry shortly" for ever on an idle daemon, since it asked the budget for more than it
/// holds. While it is held, the budget is full for everyone else.
#[test]
fn a_body_larger_than_the_whole_body_budget_takes_all_of_it_when_it_is_free() {
    let (d, _c) = start_with(WS, "[server]\nbody_budget_bytes = \"512KiB\"\n", &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let ops = d.operator_session("ops", &["World.Commit=log:5"]);
    let held = || metric(&d, "worldd_body_budget_bytes_held ");
    let v = tools_call(
        &d,
        &token,
        "ailang-write",
        json!({"path": "big.txt", "content": "z".repeat(700_000)}),
    );
    assert_eq!(v["result"]["structuredContent"]["ok"], true, "{v}");
    // A2A: a request padded with JSON's own whitespace past the budget.
    let task = r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"t1"}}"#;
    let padded = |json: &str, n: usize| format!("{json}{}", " ".repeat(n - json.len()));
    let a = request(
        "POST",
        &d.url("/a2a/"),
        Some(&token),
        &mcp_headers(),
        Some(padded(task, 700_000).as_bytes()),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(a.json()["error"]["code"], json!(-32001), "{}", a.text());
    assert_eq!(a.json()["error"]["message"], json!("Task not found"));
    // An operator commit within `commit_body_bytes` (1 MiB) is read and answered on its
    // merits (a commit of no records).
    let a = request(
        "POST",
        &d.url("/v1/commit"),
        Some(&ops),
        &mcp_headers(),
        Some(padded("{}", 700_000).as_bytes()),
    );
    assert_ne!(a.status, 503, "{}", a.text());
    assert_eq!(trips(&d, "body_budget"), 0);
    assert_eq!(held(), 0, "answered calls hold nothing");
    // One held open takes the whole budget; a second body past the uncounted 16 KiB is
    // refused meanwhile, and runs once the first is gone.
    let mut upload = connect(&d);
    upload
        .write_all(mcp_post_head(&d, &token, 700_000, false).as_bytes())
        .unwrap();
    upload.write_all(b"{").unwrap();
    assert!(eventually(500, || held() == 512 * 1024), "{}", held());
    let other = d.session("ep2", &["Workspace.Write=worktree:5"]);
    let write = |token: &str| {
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "ailang-write",
                       "arguments": {"path": "b.txt", "content": "y".repeat(100_000)}}});
        mcp_text(&d, token, "2025-11-25", &serde_json::to_vec(&body).unwrap())
    };
    // Refused at its head, before a byte of its body is read.
    let head = mcp_post_head(&d, &other, 100_000, false);
    assert_busy(
        &raw_exchange(&d.addr, head.as_bytes()),
        "too many request bodies in flight ([server] body_budget_bytes); retry shortly",
    );
    assert_eq!(trips(&d, "body_budget"), 1);
    drop(upload);
    assert!(eventually(500, || held() == 0), "{}", held());
    let a = write(&other);
    assert_eq!(
        a.rpc_json()["result"]["structuredContent"]["ok"],
        true,
        "{}",
        a.text()
    );
}

/// A body sent in one-byte chunks is refused at `[server] body_small_pieces`: each chunk costs
/// the daemon a hand-over between two tasks whatever its size, and a megabyte sent so took
/// 2.2 s of its CPU for six megabytes on the wire. Both sides of a limit of 100 on every
/// surface; chunks of 512 bytes and more are not counted.
#[test]
fn a_body_sent_in_one_byte_chunks_is_refused_at_its_small_pieces_limit() {
    let (d, _c) = start_with(WS, "[server]\nbody_small_pieces = 100\n", &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let ops = d.operator_session("ops", &["World.Commit=log:5"]);
    let head = || get(&d.url("/v1/head"), Some(&token)).text();
    let before = head();
    // `body` in chunks of `size` bytes; the terminating chunk only when `end`, so that a
    // refusal finds nothing unread and its client reads it rather than a reset.
    let chunked = |path: &str, credential: &str, body: &[u8], size: usize, end: bool| {
        let mut request = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {credential}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
            d.addr
        )
        .into_bytes();
        for part in body.chunks(size) {
            request.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
            request.extend_from_slice(part);
            request.extend_from_slice(b"\r\n");
        }
        if end {
            request.extend_from_slice(b"0\r\n\r\n");
        }
        raw_exchange(&d.addr, &request)
    };
    // A ping padded with JSON's own whitespace to `n` bytes.
    let padded = |json: &str, n: usize| format!("{json}{}", " ".repeat(n - json.len()));
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let refused = "request body arrives in more than 100 pieces of under 512 bytes ([server] body_small_pieces); send it with a Content-Length, or in larger chunks";

    let a = chunked("/mcp/", &token, padded(ping, 100).as_bytes(), 1, true);
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(a.sse_json()["result"], json!({}));
    let a = chunked("/mcp/", &token, padded(ping, 101).as_bytes(), 1, false);
    assert_eq!((a.status, a.text()), (400, refused.to_owned()));
    // Chunks of 512 bytes are not small, however many.
    let a = chunked(
        "/mcp/",
        &token,
        padded(ping, 512 * 120).as_bytes(),
        512,
        true,
    );
    assert_eq!(a.sse_json()["result"], json!({}), "{}", a.text());

    let task = r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"t1"}}"#;
    let a = chunked("/a2a/", &token, padded(task, 100).as_bytes(), 1, true);
    assert_ne!(a.json()["error"]["code"], json!(-32600), "{}", a.text());
    let a = chunked("/a2a/", &token, padded(task, 101).as_bytes(), 1, false);
    assert_eq!(
        a.json(),
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600,
               "message": format!("invalid JSON-RPC request: {refused}")}})
    );
    let a = chunked("/v1/commit", &ops, padded("{}", 100).as_bytes(), 1, true);
    assert_eq!(a.status, 400);
    assert!(!a.text().contains("pieces"), "{}", a.text());
    let a = chunked("/v1/commit", &ops, padded("{}", 101).as_bytes(), 1, false);
    assert_eq!(
        (a.status, a.json()),
        (
            400,
            json!({"error": {"class": "BadRequest", "message": refused}})
        )
    );
    assert_eq!(trips(&d, "body_small_pieces"), 3);
    assert_eq!(head(), before, "nothing was committed");
}

#[test]
fn a_body_with_broken_chunked_framing_is_refused_with_its_cause_and_runs_nothing() {
    // Each breaks one rule of chunked framing, two of them one of hyper's own bounds (16 KiB
    // of chunk extensions, of trailers). The answer said only "could not be read"; a client
    // (or whoever debugs its HTTP stack) is told which rule.
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let ops = d.operator_session("ops", &["World.Commit=log:5"]);
    let head = || get(&d.url("/v1/head"), Some(&token)).text();
    let before = head();
    let write = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ailang-write","arguments":{"path":"a.txt","content":"x"}}}"#;
    let chunk = |part: &str| format!("{:x}\r\n{part}\r\n", part.len());
    let trailers: String = (0..20)
        .map(|i| format!("X-Pad-{i}: {}\r\n", "a".repeat(1000)))
        .collect();
    let broken: [(String, &str); 5] = [
        (
            format!("{}zz\r\n", chunk(write)),
            "Invalid chunk size line: missing size digit",
        ),
        (
            format!("{}fffffffffffffffffff\r\n", chunk(write)),
            "invalid chunk size: overflow",
        ),
        (
            format!("{:x}\r\n{write}XX0\r\n\r\n", write.len()),
            "Invalid chunk body CR",
        ),
        (
            format!("{:x};{}\r\n", write.len(), "e".repeat(20_000)),
            "chunk extensions over limit",
        ),
        (
            format!("{}0\r\n{trailers}\r\n", chunk(write)),
            "chunk trailers bytes over limit",
        ),
    ];
    let send = |path: &str, credential: &str, body: &str| {
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {credential}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{body}",
            d.addr
        );
        raw_exchange(&d.addr, request.as_bytes())
    };
    for (body, cause) in &broken {
        let refused = format!("request body could not be read: {cause}");
        let a = send("/mcp/", &token, body);
        assert_eq!((a.status, a.text()), (400, refused.clone()));
        let a = send("/a2a/", &token, body);
        assert_eq!(
            a.json(),
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600,
                   "message": format!("invalid JSON-RPC request: {refused}")}})
        );
        let a = send("/v1/commit", &ops, body);
        assert_eq!(
            (a.status, a.json()),
            (
                400,
                json!({"error": {"class": "BadRequest", "message": refused}})
            )
        );
    }
    assert_eq!(head(), before, "nothing was committed");
    assert!(
        !d.root().join("ep1").join("a.txt").exists(),
        "nothing was written"
    );
    // The same call, framed well, runs.
    let a = send("/mcp/", &token, &format!("{}0\r\n\r\n", chunk(write)));
    assert_eq!(
        a.sse_json()["result"]["isError"],
        json!(false),
        "{}",
        a.text()
    );
    assert!(d.root().join("ep1").join("a.txt").exists());
}

#[test]
fn a_coded_body_is_refused_415_or_501_and_runs_nothing() {
    // Nothing here decodes a body: read as JSON, gzip'd bytes were answered "Parse error",
    // and a plain body labelled gzip ran as if the label were not there.
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let ops = d.operator_session("ops", &["World.Commit=log:5"]);
    let write = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ailang-write","arguments":{"path":"a.txt","content":"x"}}}"#;
    let a2a_write = br#"{"jsonrpc":"2.0","id":1,"method":"tasks/send","params":{"id":"t1","metadata":{"skill_id":"ailang-write"},"message":{"role":"user","parts":[{"type":"data","data":{"path":"b.txt","content":"x"}}]}}}"#;
    let head = || get(&d.url("/v1/head"), Some(&token)).text();
    let before = head();
    let coded = |path: &str, credential: &str, body: &[u8], coding: &str| {
        let mut headers = mcp_headers();
        headers.push(("Content-Encoding", coding));
        request("POST", &d.url(path), Some(credential), &headers, Some(body))
    };
    for coding in ["gzip", "br", "identity, gzip", "x-unknown"] {
        let text =
            format!("Content-Encoding \"{coding}\" is not supported: send the body uncompressed");
        let a = coded("/mcp/", &token, write, coding);
        assert_eq!(a.status, 415, "{coding}: {}", a.text());
        assert_eq!(a.text(), text);
        let a = coded("/a2a/", &token, a2a_write, coding);
        assert_eq!(a.status, 200);
        assert_eq!(
            a.json()["error"],
            json!({"code": -32600, "message": format!("invalid JSON-RPC request: {text}")})
        );
        let a = coded("/v1/commit", &ops, b"{}", coding);
        assert_eq!(a.status, 415, "{coding}: {}", a.text());
        assert_eq!(
            a.json(),
            json!({"error": {"class": "UnsupportedMediaType", "message": text}})
        );
    }
    // A transfer coding hyper does not decode passes its bytes through as they came.
    let chunked = |path: &str, credential: &str, body: &[u8], coding: &str| {
        let mut request = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {credential}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nTransfer-Encoding: {coding}\r\nConnection: close\r\n\r\n{:x}\r\n",
            d.addr,
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(body);
        request.extend_from_slice(b"\r\n0\r\n\r\n");
        raw_exchange(&d.addr, &request)
    };
    for coding in ["gzip, chunked", "chunked, chunked", "x-unknown, chunked"] {
        let text =
            format!("Transfer-Encoding \"{coding}\" is not supported: send the body uncompressed");
        let a = chunked("/mcp/", &token, write, coding);
        assert_eq!(a.status, 501, "{coding}: {}", a.text());
        assert_eq!(a.text(), text);
        let a = chunked("/a2a/", &token, a2a_write, coding);
        assert_eq!(
            a.json()["error"]["message"],
            format!("invalid JSON-RPC request: {text}")
        );
        let a = chunked("/v1/commit", &ops, b"{}", coding);
        assert_eq!(a.status, 501, "{coding}: {}", a.text());
        assert_eq!(a.json()["error"]["class"], "NotImplemented");
    }
    let files: Vec<_> = std::fs::read_dir(d.root().join("ep1")).unwrap().collect();
    assert!(files.is_empty(), "{files:?}");
    assert_eq!(head(), before);
    // Plain chunked framing is no coding of the content: served.
    let a = chunked("/a2a/", &token, a2a_write, "chunked");
    assert_eq!(
        a.json()["result"]["status"]["state"],
        "completed",
        "{}",
        a.text()
    );
    // Nor is `identity`.
    let a = coded("/mcp/", &token, write, "identity");
    assert_eq!(a.status, 200, "{}", a.text());
    assert!(d.root().join("ep1/a.txt").is_file());
}

#[test]
fn a_second_content_type_or_protocol_version_field_is_refused_400_and_runs_nothing() {
    // With two fields the daemon read the first; a proxy in front may act on the last
    // (`text/html`, or `2025-11-25`, under which batches are refused).
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ailang-write","arguments":{"path":"a.txt","content":"x"}}}]"#;
    let send = |fields: &str| {
        let fields = format!(
            "Authorization: Bearer {token}\r\nAccept: application/json, text/event-stream\r\n{fields}"
        );
        raw(&d, "POST", "/mcp/", &fields, batch)
    };
    let json = "Content-Type: application/json\r\n";
    for (fields, text) in [
        (
            format!("{json}Content-Type: text/html\r\n"),
            "Content-Type must be application/json",
        ),
        (
            format!("{json}{json}"),
            "Content-Type must be application/json",
        ),
        (
            format!(
                "{json}MCP-Protocol-Version: 2025-03-26\r\nMCP-Protocol-Version: 2025-11-25\r\n"
            ),
            "MCP-Protocol-Version must be sent once",
        ),
    ] {
        let a = send(&fields);
        assert_eq!(a.status, 400, "{fields:?}: {}", a.text());
        assert_eq!(a.text(), text, "{fields:?}");
    }
    assert!(!d.root().join("ep1/a.txt").exists());
    // One of each: the batch runs.
    let a = send(&format!("{json}MCP-Protocol-Version: 2025-03-26\r\n"));
    assert_eq!(a.status, 200, "{}", a.text());
    assert!(d.root().join("ep1/a.txt").is_file());
}

#[test]
fn a_second_a2a_version_or_last_event_id_field_is_refused() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let send_message = r#"{"jsonrpc":"2.0","id":"r2","method":"SendMessage","params":{"message":{"messageId":"m-1","role":"ROLE_USER","parts":[{"data":{"path":"a.txt","content":"x"}}],"metadata":{"skillId":"ailang-write"}},"configuration":{}}}"#;
    let send = |method: &str, path: &str, fields: &str, body: &str| {
        let fields =
            format!("Authorization: Bearer {token}\r\nContent-Type: application/json\r\n{fields}");
        raw(&d, method, path, &fields, body)
    };
    let a = send(
        "POST",
        "/a2a/",
        "A2A-Version: 1.0\r\nA2A-Version: 0.3\r\n",
        send_message,
    );
    assert_eq!(
        a.json()["error"],
        json!({"code": -32009, "message": "A2A version \"1.0, 0.3\" is not supported by SendMessage; send A2A-Version: 1.0 (or use message/send for 0.3)",
               "data": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                         "reason": "VERSION_NOT_SUPPORTED", "domain": "a2a-protocol.org",
                         "metadata": {"requested": "1.0, 0.3", "supported": "1.0, 0.3"}}]})
    );
    assert!(!d.root().join("ep1/a.txt").exists());
    let a = send("POST", "/a2a/", "A2A-Version: 1.0\r\n", send_message);
    assert_eq!(
        a.json()["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{}",
        a.text()
    );
    assert!(d.root().join("ep1/a.txt").is_file());
    let a = send(
        "GET",
        "/v1/log/stream",
        "Last-Event-ID: 0\r\nLast-Event-ID: 5\r\n",
        "",
    );
    assert_eq!(a.status, 400, "{}", a.text());
    assert_eq!(
        a.json(),
        json!({"error": {"class": "BadRequest", "message": "Last-Event-ID must be sent once"}})
    );
}

#[test]
fn undecodable_paths_and_queries_are_answered_in_the_rest_envelope() {
    // axum's own rejections are plain text; every /v1 error is JSON.
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    for (path, text) in [
        ("/v1/registry/%ff", "Invalid URL: Invalid UTF-8 in `name`"),
        (
            "/v1/objects/%ff%fe",
            "Invalid URL: Invalid UTF-8 in `reference`",
        ),
        (
            "/v1/calls/mcp/%c3",
            "Invalid URL: Invalid UTF-8 in `task_id`",
        ),
    ] {
        let a = get(&d.url(path), Some(&token));
        assert_eq!(a.status, 400, "{path}: {}", a.text());
        assert_eq!(a.content_type, "application/json", "{path}");
        assert_eq!(a.json()["error"]["class"], "BadRequest", "{path}");
        assert!(
            a.json()["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with(text),
            "{path}: {}",
            a.text()
        );
    }
    // A query decodes lossily, so its bytes reach the route's own check.
    let a = get(&d.url("/v1/log?from=%ff"), Some(&token));
    assert_eq!(a.status, 400, "{}", a.text());
    assert_eq!(
        a.json(),
        json!({"error": {"class": "BadRequest", "message": "from must be a non-negative integer"}})
    );
}

#[test]
fn the_agent_card_never_echoes_the_host_header() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let a = request(
        "GET",
        &d.url("/.well-known/agent.json"),
        Some(&token),
        &[("Host", "localhost:1")],
        None,
    );
    assert_eq!(a.json()["url"], format!("http://{}/a2a/", d.addr));
    let d = Daemon::start(WS, &["--public-url", "https://agents.example.com/world/"]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let v = get(&d.url("/.well-known/agent-card.json"), Some(&token)).json();
    assert_eq!(v["url"], "https://agents.example.com/world/a2a/");
    assert_eq!(
        v["supportedInterfaces"][0]["url"],
        "https://agents.example.com/world/a2a/"
    );
}

// ------------------------------------------------------------------------------------------
// Bodies.

#[test]
fn held_4mib_bodies_without_credentials_are_answered_without_reading_them() {
    let d = Daemon::start(WS, &[]);
    let mut held = Vec::new();
    for i in 0..60 {
        let path = ["/a2a/", "/mcp/", "/v1/commit"][i % 3];
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 4194304\r\n\r\n",
            d.addr
        );
        let mut s = connect(&d);
        s.write_all(head.as_bytes()).unwrap();
        // The answer comes without a byte of the body.
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "closed without an answer");
            answer.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8_lossy(&answer);
        let status = if path == "/a2a/" { "200" } else { "401" };
        assert!(
            text.starts_with(&format!("HTTP/1.1 {status}")),
            "{path}: {text}"
        );
        held.push(s);
    }
    let rss = rss_kib(d.child.id());
    assert!(
        rss < 256 * 1024,
        "daemon RSS {rss} KiB after 60 held 4 MiB uploads"
    );
}

#[test]
fn held_4mib_bodies_with_credentials_stay_within_the_body_budget() {
    let (d, _c) = start_with(WS, "[server]\nbody_budget_bytes = 16777216\n", &[]);
    let tokens: Vec<String> = (1..=5)
        .map(|i| d.session(&format!("ep{i}"), &["Workspace.Read=worktree:5"]))
        .collect();
    let head = |token: &str| mcp_post_head(&d, token, 4194304, false);
    // Four sessions' 4 MiB uploads fill the 16 MiB budget and are held open; the rest are
    // refused at once, before a byte of their body is buffered.
    let mut held = Vec::new();
    for token in &tokens[..4] {
        let mut s = connect(&d);
        s.write_all(head(token).as_bytes()).unwrap();
        s.write_all(&vec![b' '; 1 << 20]).unwrap();
        held.push(s);
    }
    // Once the daemon has taken the four declared lengths (all of the budget but the first
    // 16 KiB of each, which are never counted), a fifth session is refused at once.
    let full = 4 * (4 * 1024 * 1024 - 16 * 1024);
    let taken = eventually(1500, || {
        metric(&d, "worldd_body_budget_bytes_held ") == full
    });
    assert!(taken, "the held uploads never took the budget");
    let a = raw_exchange(&d.addr, head(&tokens[4]).as_bytes());
    assert_busy(
        &a,
        "too many request bodies in flight ([server] body_budget_bytes); retry shortly",
    );
    // `POST /v1/commit` shares the budget and refuses the same way, in the REST envelope (a
    // body within its own 1 MiB limit).
    let operator = d.operator_session("ops", &["World.Commit=log:5"]);
    let commit = format!(
        "POST /v1/commit HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {operator}\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n",
        d.addr
    );
    let a = raw_exchange(&d.addr, commit.as_bytes());
    assert_eq!(a.status, 503);
    assert_eq!(a.retry_after.as_deref(), Some("1"));
    assert_eq!(
        a.json(),
        json!({"error": {"class": "Unavailable", "message": "too many request bodies in flight ([server] body_budget_bytes); retry shortly"}})
    );
    assert!(trips(&d, "body_budget") >= 2);
    let rss = rss_kib(d.child.id());
    assert!(rss < 256 * 1024, "daemon RSS {rss} KiB");
    drop(held);
}

/// One session holding large uploads open on many connections takes at most a quarter of the
/// body budget: its further uploads are refused at once, and another session's large write
/// still runs (before, four held uploads took the whole budget from everyone).
#[test]
fn one_session_holding_large_uploads_open_cannot_refuse_another_sessions_writes() {
    let (d, _c) = start_with(WS, "", &[]);
    let attacker = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let victim = d.session("ep2", &["Workspace.Write=worktree:5"]);
    let head = mcp_post_head(&d, &attacker, 4194304, false);
    let mut held = connect(&d);
    held.write_all(head.as_bytes()).unwrap();
    held.write_all(&vec![b' '; 1 << 20]).unwrap();
    let quarter = 4 * 1024 * 1024 - 16 * 1024;
    let taken = eventually(1500, || {
        metric(&d, "worldd_body_budget_bytes_held ") == quarter
    });
    assert!(taken, "the held upload never took its share");
    for _ in 0..3 {
        let a = raw_exchange(&d.addr, head.as_bytes());
        assert_busy(
            &a,
            "too many request bodies from this credential in flight (a quarter of [server] body_budget_bytes); retry shortly",
        );
    }
    assert_eq!(trips(&d, "body_share"), 3);
    assert_eq!(trips(&d, "body_budget"), 0);
    let v = tools_call(
        &d,
        &victim,
        "ailang-write",
        json!({"path": "big.txt", "content": "z".repeat(1_000_000)}),
    );
    assert_eq!(v["result"]["structuredContent"]["ok"], true, "{v}");
    drop(held);
}

/// One session trickling small bodies in under the body deadline keeps each connection busy
/// (so a new client cannot take it over); its share of requests in flight (a quarter of the
/// connection limit) bounds the bodies it has being read at once, since every route that reads
/// a body authenticates first (the separate quarter of bodies being read, which could never
/// trip before it, is gone).
#[test]
fn one_session_trickling_bodies_holds_at_most_a_quarter_of_the_connections() {
    let (d, _c) = start_with(
        WS,
        "[server]\nbody_timeout_ms = 60000\n[limits]\ncall_deadline_ms = 120000\n",
        &["--max-connections", "8"],
    );
    let attacker = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let other = d.session("ep2", &["Workspace.Read=worktree:5"]);
    let held: Vec<TcpStream> = (0..2).map(|_| body_in_flight(&d, &attacker)).collect();
    // A third is refused before its body is read (sent whole, so the answer is not held
    // back waiting for it): the two bodies are the credential's whole share of requests in
    // flight.
    let whole = mcp_post_head(&d, &attacker, 100, false) + &" ".repeat(100);
    let a = raw_exchange(&d.addr, whole.as_bytes());
    assert_eq!(a.status, 503);
    assert_eq!(a.retry_after.as_deref(), Some("1"));
    assert_eq!(
        a.json(),
        json!({"error": {"class": "Unavailable", "message": REQUESTS_TEXT}})
    );
    assert_eq!(trips(&d, "requests_in_flight"), 1);
    let v = tools_call(&d, &other, "ailang-read", json!({"path": "nope.txt"}));
    assert_eq!(v["result"]["structuredContent"]["ok"], false, "{v}");
    drop(held);
}

/// A client that overshoots a route's limit by a little reads its 413: the daemon reads (and
/// drops) the rest of the body before closing, so the kernel does not reset the connection
/// over unread bytes and destroy the answer on its way. Both ways of overshooting: a declared
/// length over the limit, and a chunked body that grows past it.
#[test]
fn a_body_slightly_over_the_limit_still_gets_its_413() {
    let (d, _c) = start_with(WS, "", &["--commit-body-bytes", "4096"]);
    let operator = d.operator_session("ops", &["World.Commit=log:5"]);
    let body = vec![b' '; 12 * 1024];
    let heads = [
        format!("Content-Length: {}\r\n", body.len()),
        "Transfer-Encoding: chunked\r\n".to_owned(),
    ];
    for framing in heads {
        let mut s = connect(&d);
        let head = format!(
            "POST /v1/commit HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {operator}\r\nContent-Type: application/json\r\nConnection: close\r\n{framing}\r\n",
            d.addr
        );
        s.write_all(head.as_bytes()).unwrap();
        let chunked = framing.starts_with("Transfer-Encoding");
        // The daemon has the head (and, chunked, the first 8 KiB past the limit) well before
        // the rest arrives: without the linger it answered and closed in between.
        for part in body.chunks(8 * 1024) {
            let bytes = if chunked {
                [format!("{:x}\r\n", part.len()).as_bytes(), part, b"\r\n"].concat()
            } else {
                part.to_vec()
            };
            // Many clients give up on a failed write without reading the answer (ureq reports
            // "Broken pipe"), so every write must land.
            s.write_all(&bytes)
                .unwrap_or_else(|e| panic!("{framing}: the daemon closed mid-body: {e}"));
            std::thread::sleep(Duration::from_millis(300));
        }
        if chunked {
            s.write_all(b"0\r\n\r\n")
                .unwrap_or_else(|e| panic!("{framing}: the daemon closed mid-body: {e}"));
        }
        let mut answer = Vec::new();
        let read = s.read_to_end(&mut answer);
        let text = String::from_utf8_lossy(&answer);
        assert!(read.is_ok(), "{framing}: {read:?} after {text:?}");
        assert!(text.starts_with("HTTP/1.1 413 "), "{framing}: {text}");
        assert!(
            text.ends_with(r#"{"error":{"class":"PayloadTooLarge","message":"commit body exceeds 4096 bytes"}}"#),
            "{framing}: {text}"
        );
    }
    assert_eq!(trips(&d, "body_size"), 2);
}

/// Refusals that come before the body is read (a foreign Origin, no credential, an unknown
/// route) still reach a client that sends its head and its body separately: the daemon reads
/// the small rest of the body before it answers and closes, instead of resetting the
/// connection under the client's feet ("broken pipe", the answer lost).
#[test]
fn refusals_before_the_body_still_reach_a_client_that_sends_it_late() {
    let d = Daemon::start(WS, &[]);
    let body = vec![b' '; 4000];
    let cases = [
        ("/mcp/", "Origin: http://evil.example.com\r\n", "403"),
        ("/mcp/", "", "401"),
        ("/v1/commit", "", "401"),
        ("/nowhere", "", "404"),
    ];
    for (path, extra, status) in cases {
        let mut s = connect(&d);
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\n{extra}Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
            d.addr,
            body.len()
        );
        s.write_all(head.as_bytes()).unwrap();
        for part in body.chunks(2000) {
            std::thread::sleep(Duration::from_millis(300));
            s.write_all(part)
                .unwrap_or_else(|e| panic!("{path} {extra}: the daemon closed mid-body: {e}"));
        }
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).unwrap();
        let text = String::from_utf8_lossy(&answer);
        assert!(
            text.starts_with(&format!("HTTP/1.1 {status} ")),
            "{path} {extra}: {text}"
        );
    }
}

/// The wait for a small unread body is bounded: a client that declares 1000 bytes on a
/// refused request and never sends them gets its 403 once the linger's 2 s are up, then the
/// connection closes (without the bound it would hang until the client gave up).
#[test]
fn a_refused_request_whose_small_body_never_comes_is_answered_when_the_linger_ends() {
    let d = Daemon::start(WS, &[]);
    let mut s = connect(&d);
    s.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
    let head = format!(
        "POST /mcp/ HTTP/1.1\r\nHost: {}\r\nOrigin: http://evil.example.com\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n",
        d.addr
    );
    s.write_all(head.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let read = s.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    assert!(read.is_ok(), "{read:?} after {text:?}");
    assert!(text.starts_with("HTTP/1.1 403 "), "{text}");
}

#[test]
fn a_body_that_never_arrives_is_cut_at_the_body_deadline() {
    let (d, _c) = start_with(WS, "[server]\nbody_timeout_ms = 300\n", &[]);
    let agent = d.session("ep1", &["Workspace.Read=worktree:5"]);
    // Commits are an operator's act: only an operator's body reaches the deadline.
    let operator = d.operator_session("ops", &["World.Commit=log:5"]);
    for (path, expect) in [
        ("/mcp/", "HTTP/1.1 408"),
        ("/a2a/", "HTTP/1.1 200"),
        ("/v1/commit", "HTTP/1.1 408"),
    ] {
        let token = if path == "/v1/commit" {
            &operator
        } else {
            &agent
        };
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n{{\"jsonrpc\"",
            d.addr
        );
        let a = raw_exchange(&d.addr, head.as_bytes());
        let line = format!("HTTP/1.1 {}", a.status);
        assert!(line.starts_with(expect), "{path}: {line} {}", a.text());
        match path {
            "/mcp/" => assert_eq!(
                a.text(),
                "request body not received in time ([server] body_timeout_ms)"
            ),
            "/a2a/" => assert_eq!(
                a.json()["error"]["message"],
                "invalid JSON-RPC request: body not received in time"
            ),
            _ => assert_eq!(a.json()["error"]["class"], "RequestTimeout"),
        }
    }
    assert_eq!(trips(&d, "body_timeout"), 3);
}

/// Any session holder can make an MCP body time out as fast as it can open POSTs, and each
/// wrote a WARN line: its first is logged, then at most one every 10 s with how many went
/// unlogged, as the credential refusals are; the metric counts every one.
#[test]
fn mcp_body_timeouts_cannot_flood_the_log() {
    let (d, _c) = start_with(WS, "[server]\nbody_timeout_ms = 100\n", &[]);
    let agent = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let head = format!(
        "POST /mcp/ HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {agent}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n{{\"jsonrpc\"",
        d.addr
    );
    for _ in 0..10 {
        let a = raw_exchange(&d.addr, head.as_bytes());
        assert_eq!(
            (a.status, a.text()),
            (
                408,
                "request body not received in time ([server] body_timeout_ms)".to_owned()
            )
        );
    }
    assert_eq!(trips(&d, "body_timeout"), 10);
    let line = "mcp: request body not received in time ([server] body_timeout_ms)";
    d.wait_for_log(line);
    // The first line only: the rest came within 10 s of it. Each is logged before its 408,
    // so every one there is has been read once the log is read so far.
    let log = d.log_so_far();
    assert_eq!(log.matches(line).count(), 1, "{log}");
}

/// A stop "lets in-flight requests finish", and a request whose body was still arriving
/// counted as in flight: any session holder sending half a body held every stop and restart
/// up for the whole `body_timeout_ms` (25 s at 25,000), the daemon accepting nothing
/// meanwhile. Such a body is refused at once when the drain begins, on every route, and the
/// daemon stops.
#[test]
fn a_body_still_arriving_when_the_daemon_stops_is_refused_not_waited_for() {
    let (d, _c) = start_with(
        WS,
        "[server]\nbody_timeout_ms = 25000\n[limits]\ncall_deadline_ms = 30000\n",
        &[],
    );
    let agent = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let operator = d.operator_session("ops", &["World.Commit=log:5"]);
    let half_sent: Vec<(&str, TcpStream)> = ["/mcp/", "/a2a/", "/v1/commit"]
        .into_iter()
        .map(|path| {
            let token = if path == "/v1/commit" {
                &operator
            } else {
                &agent
            };
            let mut s = connect(&d);
            write!(
                s,
                "POST {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{{",
                d.addr
            )
            .unwrap();
            (path, s)
        })
        .collect();
    // The three bodies are being read.
    std::thread::sleep(Duration::from_millis(300));
    let (status, took, log, _dir) = d.stop_with_log(Duration::from_secs(20));
    assert!(status.success(), "{status:?}\n{log}");
    assert!(
        took < Duration::from_secs(5),
        "the stop took {took:?}\n{log}"
    );
    for (path, mut s) in half_sent {
        let (head, body) = read_one_answer(&mut s);
        let a = answer_of(&head, body);
        match path {
            "/mcp/" => {
                assert_eq!(a.status, 503, "{path}: {}", a.text());
                assert_eq!(a.text(), "the daemon is shutting down");
            }
            "/a2a/" => assert_eq!(
                a.json(),
                json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32603, "message": "the daemon is shutting down"}})
            ),
            _ => {
                assert_eq!(a.status, 503, "{path}: {}", a.text());
                assert_eq!(
                    a.json(),
                    json!({"error": {"class": "Unavailable", "message": "the daemon is shutting down"}})
                );
            }
        }
    }
}

/// A body whose last bytes never came was answered `408` only `LINGER_TIME` (2 s) after the
/// body deadline: the refusal waited to read the rest its client had just failed to send. It
/// goes out at the deadline now, on MCP, A2A and REST alike, and the connection is closed.
#[test]
fn a_body_that_stalls_is_answered_at_the_body_deadline_without_the_refusal_linger() {
    let (d, _c) = start_with(WS, "[server]\nbody_timeout_ms = 300\n", &[]);
    let agent = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let operator = d.operator_session("ops", &["World.Commit=log:5"]);
    for (path, status) in [("/mcp/", 408), ("/a2a/", 200), ("/v1/commit", 408)] {
        let token = if path == "/v1/commit" {
            &operator
        } else {
            &agent
        };
        // Five bytes declared and never sent: a small remainder, which a refusal given before
        // the body was read would wait for.
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 5\r\n\r\n{{}}",
            d.addr
        );
        let mut s = TcpStream::connect(&d.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let sent = Instant::now();
        s.write_all(head.as_bytes()).unwrap();
        let mut answer = Vec::new();
        // The whole answer, then the end of the connection: nothing more is read from it.
        let read = s.read_to_end(&mut answer);
        let took = sent.elapsed();
        let text = String::from_utf8_lossy(&answer);
        assert!(read.is_ok(), "{path}: {read:?} after {text:?}");
        assert!(
            text.starts_with(&format!("HTTP/1.1 {status} ")),
            "{path}: {text}"
        );
        match path {
            "/mcp/" => assert!(
                text.ends_with(
                    "\r\n\r\nrequest body not received in time ([server] body_timeout_ms)"
                ),
                "{text}"
            ),
            "/a2a/" => assert!(
                text.contains(
                    "\"message\":\"invalid JSON-RPC request: body not received in time\""
                ),
                "{text}"
            ),
            _ => assert!(text.contains("\"class\":\"RequestTimeout\""), "{text}"),
        }
        // 300 ms of body deadline, not 300 ms and the 2 s linger.
        assert!(
            took < Duration::from_millis(1900),
            "{path}: answered after {took:?}"
        );
    }
    assert_eq!(trips(&d, "body_timeout"), 3);
}

// ------------------------------------------------------------------------------------------
// Connections.

#[test]
fn half_sent_request_heads_and_idle_connections_are_closed_at_the_header_deadline() {
    let (d, _c) = start_with(WS, "[server]\nheader_timeout_ms = 300\n", &[]);
    // Half a request head, never finished.
    let mut half = connect(&d);
    half.write_all(b"POST /mcp/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
        .unwrap();
    // An idle connection that never sends a byte.
    let mut idle = connect(&d);
    // A keep-alive connection idle after one complete request.
    let mut kept = connect(&d);
    kept.write_all(format!("GET /v1/health HTTP/1.1\r\nHost: {}\r\n\r\n", d.addr).as_bytes())
        .unwrap();
    assert!(
        closed_by_peer(&mut half),
        "the half-sent head was not closed"
    );
    assert!(
        closed_by_peer(&mut idle),
        "the idle connection was not closed"
    );
    assert!(
        closed_by_peer(&mut kept),
        "the idle keep-alive connection was not closed"
    );
    assert!(trips(&d, "header_timeout") >= 2);
}

/// `header_timeout_ms` is also the keep-alive idle timeout, and every idle keep-alive
/// connection it closed was counted a `header_timeout` trip: an agent's pooled connection
/// idle between calls looked like a slow-head attack. Only connections waiting for a head
/// their client began (or never sent a byte of) are counted.
#[test]
fn idle_keep_alive_connections_are_not_counted_as_header_timeouts() {
    let (d, _c) = start_with(WS, "[server]\nheader_timeout_ms = 300\n", &[]);
    let health = format!("GET /v1/health HTTP/1.1\r\nHost: {}\r\n\r\n", d.addr);
    for _ in 0..3 {
        let mut kept = connect(&d);
        kept.write_all(health.as_bytes()).unwrap();
        let (got, end) = read_to_close(&mut kept);
        assert!(matches!(end, End::Eof | End::Reset), "{end:?}");
        assert!(
            String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200 "),
            "{}",
            String::from_utf8_lossy(&got)
        );
    }
    assert_eq!(trips(&d, "header_timeout"), 0);
    // A second head begun on a kept connection and never finished is a trip.
    let mut begun = connect(&d);
    begun.write_all(health.as_bytes()).unwrap();
    let mut answer = [0u8; 12];
    begun.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"HTTP/1.1 200");
    begun.write_all(b"GET /v1/health HTTP/1.1\r\nHo").unwrap();
    assert!(closed_by_peer(&mut begun));
    assert_eq!(trips(&d, "header_timeout"), 1);
    // So are a first head never finished, and a connection that sends nothing.
    let mut half = connect(&d);
    half.write_all(b"GET /v1/health HTTP/1.1\r\nHo").unwrap();
    assert!(closed_by_peer(&mut half));
    let mut silent = connect(&d);
    assert!(closed_by_peer(&mut silent));
    assert_eq!(trips(&d, "header_timeout"), 3);
}

/// What the peer sends until it closes (EOF or reset): a reset after the answer must not
/// hide the answer.
fn read_until_closed(s: &mut TcpStream) -> String {
    String::from_utf8_lossy(&read_to_close(s).0).into_owned()
}

/// A request head of `bytes` bytes in all (one padding header makes up the size).
fn head_of(d: &Daemon, bytes: usize) -> Vec<u8> {
    let start = format!(
        "GET /v1/health HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nX-Pad: ",
        d.addr
    );
    let pad = bytes - start.len() - 4;
    let mut head = start.into_bytes();
    head.extend(std::iter::repeat_n(b'a', pad));
    head.extend_from_slice(b"\r\n\r\n");
    assert_eq!(head.len(), bytes);
    head
}

#[test]
fn an_oversized_request_head_is_answered_431_and_its_connection_closed() {
    let (d, _c) = start_with(WS, "[server]\nmax_head_bytes = 16384\n", &[]);
    let mut fits = connect(&d);
    fits.write_all(&head_of(&d, 12 * 1024)).unwrap();
    let answer = read_until_closed(&mut fits);
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer:.80}");
    let mut over = connect(&d);
    over.write_all(&head_of(&d, 24 * 1024)).unwrap();
    let answer = read_until_closed(&mut over);
    assert!(
        answer.starts_with("HTTP/1.1 431 "),
        "the oversized head got {answer:.80}"
    );
    // Counted when the connection's task ends, which may be just after the client saw it close.
    let counted = eventually(500, || trips(&d, "head_size") == 1);
    assert!(counted, "the oversized head was not counted");
    // The daemon goes on serving.
    assert_eq!(get(&d.url("/v1/health"), None).status, 200);
}

#[test]
fn a_client_that_stops_reading_its_answer_is_reset_at_the_send_deadline() {
    let (d, _c) = start_with(
        WS,
        "[server]\nsend_timeout_ms = 300\nsend_buffer_bytes = 16384\n",
        &[],
    );
    let token = d.session("ep1", &["Workspace.Read=worktree:100000000"]);
    let content = "z".repeat(600_000);
    std::fs::write(d.root().join("ep1/big.txt"), &content).unwrap();
    // A client that reads its answer gets all of it through the small send buffer.
    let v = tools_call(&d, &token, "ailang-read", json!({"path": "big.txt"}));
    assert_eq!(
        v["result"]["structuredContent"]["content"]
            .as_str()
            .map(str::len),
        Some(600_000),
        "{}",
        &v.to_string()[..200]
    );
    assert_eq!(trips(&d, "send_timeout"), 0);

    // The same call from a client that reads the status line and then nothing.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "ailang-read", "arguments": {"path": "big.txt"}}})
    .to_string();
    let mut s = connect_small_window(&d);
    write!(
        s,
        "POST /mcp/ HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
        d.addr,
        body.len()
    )
    .unwrap();
    let mut status = [0u8; 12];
    s.read_exact(&mut status).unwrap();
    assert_eq!(&status, b"HTTP/1.1 200");
    std::thread::sleep(Duration::from_millis(1500));
    // What reached this side's buffers, then the reset: far less than the answer.
    let (got, reset) = drain(&mut s);
    assert!(
        reset,
        "the connection ended without a reset after {got} bytes"
    );
    assert!(got < 300_000, "{got} bytes of a 600 KB answer arrived");
    assert_eq!(trips(&d, "send_timeout"), 1);
    // The daemon serves on: the next read is whole.
    let v = tools_call(&d, &token, "ailang-read", json!({"path": "big.txt"}));
    assert_eq!(
        v["result"]["structuredContent"]["content"]
            .as_str()
            .map(str::len),
        Some(600_000)
    );
}

/// Read what is left: the bytes that arrived, and whether the connection then ended with a
/// reset (rather than a close).
fn drain(s: &mut TcpStream) -> (usize, bool) {
    match read_to_close(s) {
        (got, End::Eof) => (got.len(), false),
        (got, End::Reset) => (got.len(), true),
        (got, End::Failed(e)) => panic!("no reset and no end: {e} after {} bytes", got.len()),
    }
}

#[test]
fn a_slow_reader_of_large_objects_fills_its_share_of_the_reply_budget_until_the_send_deadline() {
    let (d, _c) = start_with(
        WS,
        "[server]\nsend_timeout_ms = 1500\nsend_buffer_bytes = 16384\nreply_budget_bytes = 1048576\n",
        &[],
    );
    let grants = [
        "Workspace.Read=worktree:100000000",
        "Workspace.Write=worktree:100000000",
    ];
    let (attacker, other) = (d.session("ep1", &grants), d.session("ep2", &grants));
    // A 600 KB input object, the arguments of a write, which both episodes send.
    let args = json!({"path": "big.txt", "content": "z".repeat(600_000)});
    for token in [&attacker, &other] {
        let v = tools_call(&d, token, "ailang-write", args.clone());
        assert_eq!(v["result"]["structuredContent"]["ok"], true, "{v}");
    }
    let reference = broker_core::object::Ref::of_json(&args).unwrap();
    let path = format!("/v1/objects/{reference}?payload=true");
    let whole = get(&d.url(&path), Some(&attacker));
    assert_eq!(whole.status, 200);
    let size = whole.body.len();
    assert!(size > 600_000, "{size}");

    // The slow reader's answer waits in the daemon and takes its credential's whole share
    // (a quarter of 1 MiB); its next request is refused before it runs.
    let (mut held, status) = unread_get(&d, &path, &attacker);
    assert_eq!(status, "HTTP/1.1 200");
    let (mut refused, status) = unread_get(&d, &path, &attacker);
    assert_eq!(status, "HTTP/1.1 503");
    let mut rest = String::new();
    refused.read_to_string(&mut rest).unwrap();
    assert!(rest.contains("\r\nretry-after: 1\r\n"), "{rest}");
    assert!(
        rest.ends_with(r#"{"error":{"class":"Unavailable","message":"too many answers to this credential are waiting unread (a quarter of [server] reply_budget_bytes); read them, then retry"}}"#),
        "{rest}"
    );
    assert_eq!(trips(&d, "reply_share"), 1);
    // Every request of that credential waits until it reads (or is cut); health probes and
    // another episode's large answer are served meanwhile.
    let small = get(&d.url(&format!("/v1/objects/{reference}")), Some(&attacker));
    assert_eq!(small.status, 503);
    assert_eq!(trips(&d, "reply_share"), 2);
    // Spelling the same credential another way (a tab between its fields) gets no second
    // share.
    let (_respelled, status) = unread_get(&d, &path, &format!("\t{attacker}"));
    assert_eq!(status, "HTTP/1.1 503");
    assert_eq!(trips(&d, "reply_share"), 3);
    assert_eq!(get(&d.url("/v1/health"), None).status, 200);
    let others = get(&d.url(&path), Some(&other));
    assert_eq!(others.status, 200);
    assert_eq!(others.body.len(), size);

    // At the send deadline the held answer is reset and the share freed.
    std::thread::sleep(Duration::from_millis(2500));
    let (got, reset) = drain(&mut held);
    assert!(reset, "the slow reader was not reset ({got} bytes)");
    assert!(got < size / 2, "{got} of {size} bytes arrived");
    assert_eq!(trips(&d, "send_timeout"), 1);
    let again = get(&d.url(&path), Some(&attacker));
    assert_eq!(again.status, 200);
    assert_eq!(again.body.len(), size);
    assert_eq!(trips(&d, "reply_budget"), 0);
}

/// Under `--open-reads` the `Authorization` header of a read is ignored, yet the answer budget
/// was shared out by the token as sent: a reader who made up a new token for each request got
/// a share of its own each time, and could hold the whole budget with unread answers. A token
/// that names no session is nobody's: it takes the anonymous share, as a request without one
/// does.
#[test]
fn made_up_credentials_under_open_reads_share_the_anonymous_share_of_the_reply_budget() {
    let (d, _c) = start_with(
        WS,
        "[server]\nsend_timeout_ms = 30000\nsend_buffer_bytes = 16384\nreply_budget_bytes = 1048576\n",
        &["--open-reads"],
    );
    let grants = ["Workspace.Write=worktree:100000000"];
    let writer = d.session("ep1", &grants);
    let args = json!({"path": "big.txt", "content": "z".repeat(600_000)});
    let v = tools_call(&d, &writer, "ailang-write", args.clone());
    assert_eq!(v["result"]["structuredContent"]["ok"], true, "{v}");
    let reference = broker_core::object::Ref::of_json(&args).unwrap();
    let path = format!("/v1/objects/{reference}?payload=true");

    // The first made-up token's unread answer takes its address's part of the anonymous share
    // (a sixteenth of 1 MiB); another made-up token from that address finds it taken, as a
    // request without a token would.
    let (_held, status) = unread_get(&d, &path, &"a1".repeat(32));
    assert_eq!(status, "HTTP/1.1 200");
    let (mut refused, status) = unread_get(&d, &path, &"b2".repeat(32));
    assert_eq!(status, "HTTP/1.1 503");
    let mut rest = String::new();
    refused.read_to_string(&mut rest).unwrap();
    assert!(
        rest.ends_with(r#"{"error":{"class":"Unavailable","message":"too many answers to this address without a credential are waiting unread (a sixteenth of [server] reply_budget_bytes); read them, then retry"}}"#),
        "{rest}"
    );
    assert_eq!(trips(&d, "reply_share"), 1);
    // A session's own token keeps a share of its own.
    let (_own, status) = unread_get(&d, &path, &writer);
    assert_eq!(status, "HTTP/1.1 200");
    assert_eq!(trips(&d, "reply_budget"), 0);
}

/// Connections that send nothing, or half a request head, no longer lock other clients out
/// by filling the connection limit: a new connection at the limit closes an idle one.
#[test]
fn idle_connections_at_the_limit_make_room_for_a_new_client() {
    let d = Daemon::start(WS, &["--max-connections", "8"]);
    let mut held: Vec<TcpStream> = (0..8).map(|_| connect(&d)).collect();
    for s in &mut held[..4] {
        write!(s, "GET /v1/health HTTP/1.1\r\nHost: {}\r\n", d.addr).unwrap();
    }
    for s in &mut held {
        s.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
    }
    // Once the daemon holds all eight, each new client closes one of them to be served.
    let mut closed = 0;
    for _ in 0..100 {
        assert_eq!(get(&d.url("/v1/health"), None).status, 200);
        held.retain_mut(|s| {
            let open = !closed_by_peer(s);
            closed += usize::from(!open);
            open
        });
        if closed >= 1 {
            break;
        }
    }
    assert!(closed >= 1, "no idle connection was closed to make room");
    assert!(trips(&d, "connections_idle") >= 1);
    assert_eq!(trips(&d, "connections"), 0);
}

/// Refused requests whose small body never comes hold their connections while the daemon
/// waits (up to 2 s) for the body so that the refusal can be read; at the limit such a
/// connection is closed to make room (its refusal unsent), as an idle one would be.
#[test]
fn refusals_waiting_for_a_body_that_never_comes_make_room_for_a_new_client() {
    let d = Daemon::start(WS, &["--max-connections", "8"]);
    let head = format!(
        "POST /mcp/ HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 30000\r\n\r\n",
        d.addr
    );
    let mut held: Vec<TcpStream> = (0..8)
        .map(|_| {
            let mut s = connect(&d);
            s.write_all(head.as_bytes()).unwrap();
            s.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    // Closed without its 401: made room. (Past 2 s the 401 would come, then the close.)
    let mut made_room = 0;
    for _ in 0..40 {
        assert_eq!(get(&d.url("/v1/health"), None).status, 200);
        held.retain_mut(|s| match read_to_close(s) {
            (got, End::Eof | End::Reset) => {
                made_room += usize::from(got.is_empty());
                false
            }
            (_, End::Failed(_)) => true,
        });
        if made_room >= 1 {
            break;
        }
    }
    assert!(made_room >= 1, "no waiting refusal made room");
    assert!(trips(&d, "connections_idle") >= 1);
}

/// Anyone can make the daemon refuse a request for its credential, thousands of times a
/// second. Each refusal was a WARN line: 7,723 lines (633 KB) in 3 s of such a flood, enough to
/// fill an operator's disk, and to stop the daemon outright when its stderr is a pipe read
/// slower than that (a worker blocked writing the log holds the log's lock, and the other
/// waits for it). Each reason is now logged at its first refusal, then at most once every
/// 10 s with how many went unlogged; the metrics count every one.
#[test]
fn requests_refused_for_their_credential_cannot_flood_the_log() {
    let d = Daemon::start(WS, &[]);
    let unknown = "7".repeat(64);
    for _ in 0..300 {
        assert_eq!(get(&d.url("/v1/budget"), None).status, 401);
        assert_eq!(
            get(&d.url("/v1/budget"), Some(unknown.as_str())).status,
            401
        );
    }
    let refused = |reason: &str| {
        metric(
            &d,
            &format!("worldd_credentials_refused_total{{reason=\"{reason}\"}} "),
        )
    };
    assert_eq!(refused("absent"), 300);
    assert_eq!(refused("unknown"), 300);
    let (_, _, log, _) = d.stop_with_log(Duration::from_secs(5));
    let lines = |text: &str| log.lines().filter(|l| l.contains(text)).count();
    assert_eq!(
        lines("refused a request: session credential is absent"),
        1,
        "{log}"
    );
    assert_eq!(
        lines("refused a request: unknown session credential"),
        1,
        "{log}"
    );
}

/// A flood of connections that each send a request head and reconnect as soon as the daemon
/// closes them keeps every place to wait for room taken. A client that writes its request a
/// few milliseconds after connecting, as one on a busy machine does, had nothing on its
/// connection when the daemon accepted it, and was closed at once (bench row 20 lost one call
/// in five). Its connection now waits for its first bytes, and is then placed by its
/// credential.
#[test]
fn a_client_writing_its_request_late_is_served_while_heads_flood_every_place_at_the_limit() {
    let d = Daemon::start(WS, &["--max-connections", "8"]);
    let token = d.session("late", &["Workspace.Read=worktree:5"]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let head = format!(
        "POST /mcp/ HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 30000\r\n\r\n",
        d.addr
    );
    let flood: Vec<_> = (0..40)
        .map(|_| {
            let (addr, head, stop) = (d.addr.clone(), head.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let Ok(mut s) = TcpStream::connect(&addr) else {
                        continue;
                    };
                    let _ = s.set_read_timeout(Some(Duration::from_secs(3)));
                    let _ = s.write_all(head.as_bytes());
                    let _ = read_to_close(&mut s);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let request = format!(
        "POST /mcp/ HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{ping}",
        d.addr,
        ping.len()
    );
    let mut lost = Vec::new();
    for i in 0..40 {
        let mut s = connect(&d);
        std::thread::sleep(Duration::from_millis(5));
        // A reset on the write is a connection closed at once too.
        let _ = s.write_all(request.as_bytes());
        let (answer, _) = read_to_close(&mut s);
        if !answer.starts_with(b"HTTP/1.1 200") {
            lost.push((i, String::from_utf8_lossy(&answer).into_owned()));
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in flood {
        t.join().unwrap();
    }
    // Without the wait, 25 to 30 of the 40 were lost in each of three runs; with it, none in
    // ten runs of this debug build. The margin is for a machine loaded by other tests.
    assert!(lost.len() <= 4, "late requests lost: {lost:?}");
    assert!(
        trips(&d, "connections_look") >= 1,
        "no connection waited for its bytes"
    );
}

/// When every connection has a request in flight, a connection past the limit is accepted and
/// closed at once: not queued, not left hanging.
#[test]
fn connections_past_the_limit_are_closed_at_once_when_none_is_idle() {
    let (d, _c) = start_with(
        WS,
        "[server]\nbody_timeout_ms = 60000\n[limits]\ncall_deadline_ms = 120000\n",
        &["--max-connections", "8"],
    );
    // Eight requests whose bodies never finish keep their connections busy. Each is in flight
    // once the daemon asks for its body (`100 Continue`). Eight sessions: one may have only a
    // quarter of the connections' bodies being read.
    let mut held: Vec<TcpStream> = (0..8)
        .map(|i| {
            let token = d.session(&format!("ep{i}"), &["Workspace.Read=worktree:5"]);
            body_in_flight(&d, &token)
        })
        .collect();
    let refused = (0..500).any(|_| {
        let mut s = connect(&d);
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        closed_by_peer(&mut s)
    });
    assert!(refused, "the ninth connection was kept open");
    // Free one slot: service resumes.
    drop(held.pop());
    let ok = (0..500).any(|_| {
        let r = std::panic::catch_unwind(|| get(&d.url("/v1/health"), None).status);
        if r.as_ref().is_ok_and(|s| *s == 200) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
        false
    });
    assert!(ok, "service did not resume after a connection closed");
    drop(held);
    // The metrics request itself may be turned away until the daemon sees the closes.
    let ok = eventually(500, || {
        std::panic::catch_unwind(|| trips(&d, "connections")).is_ok_and(|n| n >= 1)
    });
    assert!(ok, "the refused connection was not counted");
}

#[test]
fn idle_connections_past_the_fd_limit_are_refused_not_queued() {
    // A descriptor limit of 256 (soft and hard): the daemon keeps its connection limit below it.
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir_with(dir.path(), &["worldd_workspace"]);
    let mut child = std::process::Command::new("prlimit")
        .args(["--nofile=256:256", WORLDD, "serve", "--bind", "127.0.0.1:0"])
        .arg("--db")
        .arg(dir.path().join("db"))
        .arg("--workspace-root")
        .arg(dir.path().join("wt"))
        .arg("--plugin-dir")
        .arg(&plugins)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let addr = line
        .trim()
        .strip_prefix("worldd listening on http://")
        .unwrap()
        .to_owned();
    let mut conns = Vec::new();
    for _ in 0..400 {
        if let Ok(s) = TcpStream::connect(&addr) {
            conns.push(s);
        }
    }
    // Every connection is either served or closed at once; the daemon keeps answering once
    // the attackers go.
    drop(conns);
    let url = format!("http://{addr}/v1/health");
    let ok = eventually(300, || {
        std::panic::catch_unwind(|| get(&url, None).status).is_ok_and(|s| s == 200)
    });
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(ok, "no service after the attack; stderr: {stderr}");
    assert!(!stderr.contains("Too many open files"), "{stderr}");
    assert!(
        stderr.contains("max_connections lowered from 4096 to 84"),
        "{stderr}"
    );
}

/// A burst of clients connecting at once (a fleet of agents starting, a load balancer's
/// health checks) waits in the kernel's accept queue while the daemon is busy, here stopped
/// outright: with the standard library's backlog of 128 the 130th handshake was dropped and
/// its client waited a second or more for the retransmission.
#[test]
fn a_burst_of_connections_queues_for_accept_instead_of_losing_handshakes() {
    let d = Daemon::start(WS, &[]);
    let somaxconn: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let n = somaxconn.min(1000) - 8;
    assert!(
        n > 256,
        "net.core.somaxconn is {somaxconn}: too small to tell"
    );
    let pid = i32::try_from(d.child.id()).unwrap();
    let addr: std::net::SocketAddr = d.addr.parse().unwrap();
    // SAFETY: kill(2) of our own child; SIGCONT below (or the fixture's SIGKILL) ends the stop.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let mut burst = Vec::with_capacity(n);
    for i in 0..n {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(3)) {
            Ok(s) => burst.push(s),
            Err(e) => {
                panic!("connection {i} of {n} was not completed while the daemon was busy: {e}")
            }
        }
    }
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    // Every queued connection is served once the daemon runs again.
    let request = format!(
        "GET /v1/health HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        d.addr
    );
    for s in &mut burst {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.write_all(request.as_bytes()).unwrap();
    }
    for (i, s) in burst.iter_mut().enumerate() {
        let answer = read_until_closed(s);
        assert!(
            answer.starts_with("HTTP/1.1 200 "),
            "connection {i}: {answer:.80}"
        );
    }
}

/// Set the soft descriptor limit of process `pid`, keeping its hard limit; returns the old
/// soft limit.
fn set_soft_fd_limit(pid: u32, soft: u64) -> u64 {
    let pid = i32::try_from(pid).unwrap();
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit only writes the limits into `old`, which is owned here.
    let got = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, std::ptr::null(), &mut old) };
    assert_eq!(got, 0, "{}", std::io::Error::last_os_error());
    let new = libc::rlimit {
        rlim_cur: soft,
        rlim_max: old.rlim_max,
    };
    // SAFETY: prlimit only reads `new`; lowering or restoring a soft limit below the hard one
    // of our own child needs no privilege.
    let set = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, &new, std::ptr::null_mut()) };
    assert_eq!(set, 0, "{}", std::io::Error::last_os_error());
    old.rlim_cur
}

/// Another process took the daemon's last descriptors (here: its own limit is lowered to
/// what it has open): `accept` fails, the daemon backs off instead of spinning, counts it, and
/// serves again once descriptors are free.
#[test]
fn accept_failing_for_lack_of_descriptors_backs_off_and_recovers() {
    let d = Daemon::start(WS, &[]);
    let pid = d.child.id();
    let open = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count() as u64;
    let before = set_soft_fd_limit(pid, open);
    let cpu = |pid: u32| -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let after_name = &stat[stat.rfind(')').unwrap() + 2..];
        let f: Vec<&str> = after_name.split(' ').collect();
        f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
    };
    let (ticks, started) = (cpu(pid), std::time::Instant::now());
    // The kernel completes these handshakes; the daemon cannot take them.
    let waiting: Vec<TcpStream> = (0..8).map(|_| connect(&d)).collect();
    std::thread::sleep(Duration::from_millis(1000));
    let spent = cpu(pid) - ticks;
    // A loop retrying accept without a pause would burn the whole second (100 ticks).
    assert!(
        spent < 30,
        "{spent} ticks of CPU in {:?} while accept failed",
        started.elapsed()
    );
    set_soft_fd_limit(pid, before);
    drop(waiting);
    let ok = eventually(300, || {
        std::panic::catch_unwind(|| get(&d.url("/v1/health"), None).status).is_ok_and(|s| s == 200)
    });
    assert!(ok, "no service once descriptors were free again");
    assert!(trips(&d, "accept_error") >= 1);
}

// ------------------------------------------------------------------------------------------
// Slow tools and hung plugins.

#[test]
fn one_credential_flooding_log_scans_takes_turns_and_another_is_served_at_once() {
    // A log page from an episode that sees few entries scans up to 5,000 of them: 64 in flight
    // from one credential took another episode's calls from 1.7 ms to 217 ms at p50. Now one
    // credential's reads run one at a time; one that waits past `read_wait_ms` (1 ms here, so
    // that the queue trips it) is answered 503.
    let (d, _c) = start_with(WS, "[server]\nread_wait_ms = 1\n", &[]);
    let attacker = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let other = d.session("ep2", &["Workspace.Read=worktree:5"]);
    let url = d.url("/v1/log?from=0&limit=500");
    let flood: Vec<_> = (0..32)
        .map(|_| {
            let (url, token) = (url.clone(), attacker.clone());
            std::thread::spawn(move || {
                (0..5)
                    .map(|_| {
                        let a = request("GET", &url, Some(&token), &[], None);
                        (a.status, a.retry_after.clone(), a.text())
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    // Another credential has its own turn: served at once, never refused.
    for _ in 0..20 {
        let a = get(&d.url("/v1/head"), Some(&other));
        assert_eq!(a.status, 200, "{}", a.text());
    }
    let answers: Vec<_> = flood.into_iter().flat_map(|t| t.join().unwrap()).collect();
    let refused = answers.iter().filter(|(status, ..)| *status == 503).count();
    assert!(refused >= 1, "no read waited past its turn's deadline");
    for (status, retry_after, text) in &answers {
        match status {
            200 => assert!(text.starts_with("{\"items\":"), "{text}"),
            503 => {
                assert_eq!(retry_after.as_deref(), Some("1"));
                assert_eq!(
                    text,
                    r#"{"error":{"class":"Unavailable","message":"too many reads from this credential in flight ([server] reads_per_client); retry shortly"}}"#
                );
            }
            other => panic!("{other}: {text}"),
        }
    }
    assert_eq!(trips(&d, "read_wait") as usize, refused);
}

/// Three calls of `tool` (which sleeps 20 s past a 300 ms handler deadline) from three
/// episodes, more than the two execution slots: each is answered timed out at the deadline,
/// and while all three still run another episode keeps full service.
fn hung_calls_leave_other_episodes_served(tool: &str) {
    let (d, _c) = start_with(
        WS_STALL,
        "[limits]\nexecution_slots = 2\nhandler_deadline_ms = 300\n",
        &[],
    );
    let reader = d.session("reader", &["Workspace.Read=worktree:100"]);
    std::fs::write(d.root().join("reader/a.txt"), "hello").unwrap();
    let hung: Vec<_> = (0..3)
        .map(|i| {
            let t = d.session(&format!("hung{i}"), &["Stall.Wait=any:5"]);
            let url = d.url("/mcp/");
            let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":tool,"arguments":{"ms":"20000"}}});
            std::thread::spawn(move || {
                let started = Instant::now();
                let v = request("POST", &url, Some(&t), &mcp_headers(), Some(&serde_json::to_vec(&body).unwrap())).json();
                (v, started.elapsed())
            })
        })
        .collect();
    for h in hung {
        let (v, took) = h.join().unwrap();
        assert_eq!(
            v,
            json!({"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"host callback timed out"}})
        );
        assert!(took < Duration::from_secs(10), "answered after {took:?}");
    }
    assert_eq!(metric(&d, "worldd_handlers_overrunning "), 3);
    for _ in 0..10 {
        let v = tools_call(&d, &reader, "ailang-read", json!({"path": "a.txt"}));
        assert_eq!(v["result"]["structuredContent"]["content"], "hello", "{v}");
    }
    assert_eq!(metric(&d, "worldd_handlers_overrunning "), 3);
}

#[test]
fn hung_plugins_do_not_stop_other_episodes() {
    hung_calls_leave_other_episodes_served("stall-wait");
}

/// A plugin's finish function is plugin code like its handler: one that hangs after the
/// effect returned is answered at the handler deadline and keeps no global slot; the effect's
/// outcome is journaled when it returns, the call not committed.
#[test]
fn a_finish_function_that_hangs_is_answered_at_the_deadline_and_keeps_no_slot() {
    hung_calls_leave_other_episodes_served("stall-finish");
}

/// A finish function that returns in time reshapes the output as before.
#[test]
fn a_finish_function_that_returns_in_time_shapes_the_answer() {
    let (d, _c) = start_with(WS_STALL, "[limits]\nhandler_deadline_ms = 5000\n", &[]);
    let t = d.session("finisher", &["Stall.Wait=any:5"]);
    let v = tools_call(&d, &t, "stall-finish", json!({"ms": "10"}));
    let out = &v["result"]["structuredContent"];
    assert_eq!(out["ok"], true, "{v}");
    assert_eq!(out["slept_ms"], 10, "{v}");
    assert!(out["world"]["plan"].is_string(), "{v}");
}

/// A plugin's log messages are bounded: a megabyte message is cut to `plugin_log_bytes`, a
/// flood past `plugin_log_per_second` is dropped and counted, and a line break in a message
/// cannot forge a line of the daemon's log.
#[test]
fn a_plugin_flooding_the_log_is_cut_and_dropped_and_cannot_forge_a_line() {
    let (d, _c) = start_with(
        WS_STALL,
        "[limits]\nplugin_log_bytes = 1000\nplugin_log_per_second = 20\n",
        &[],
    );
    let t = d.session("flood", &["Stall.Log=any:10"]);
    // One message of a megabyte.
    let v = tools_call(
        &d,
        &t,
        "stall-log",
        json!({"lines": "1", "bytes": "1000000", "text": "big:"}),
    );
    assert_eq!(v["result"]["structuredContent"]["ok"], true, "{v}");
    // 100,000 messages in one call, each trying to start a line of its own.
    let forged = "one\n2026-12-03T16:00:00.000000Z  INFO worldd: forged by the plugin\r\n";
    let v = tools_call(
        &d,
        &t,
        "stall-log",
        json!({"lines": "100000", "bytes": "0", "text": forged}),
    );
    assert_eq!(v["result"]["structuredContent"]["ok"], true, "{v}");
    assert_eq!(trips(&d, "plugin_log_bytes"), 1);
    // Counted in the metrics as they were dropped, before the plugin logs again (a flood that
    // ended was never counted there).
    assert!(trips(&d, "plugin_log_rate") >= 100_000 - 40);
    // The next message after a pause (a whole burst available again) counts what was
    // dropped in the log.
    std::thread::sleep(Duration::from_millis(1100));
    tools_call(
        &d,
        &t,
        "stall-log",
        json!({"lines": "1", "bytes": "0", "text": "after"}),
    );
    let dropped = trips(&d, "plugin_log_rate");
    assert!(dropped >= 100_000 - 40, "{dropped} dropped");
    let (_dir, log) = d.halt_with_log();
    assert!(log.len() < 64 * 1024, "the log grew to {} bytes", log.len());
    let big = log
        .lines()
        .find(|l| l.contains("big:"))
        .expect("the big message");
    assert!(
        big.ends_with(&format!(
            "big:{}… (999004 bytes more; [limits] plugin_log_bytes) plugin=stall",
            "x".repeat(996)
        )),
        "{big}"
    );
    assert!(
        !log.lines()
            .any(|l| l.contains("INFO worldd: forged") && !l.contains("one\\n")),
        "{log}"
    );
    let forged_lines: Vec<_> = log
        .lines()
        .filter(|l| l.contains("forged by the plugin"))
        .collect();
    assert!(
        (19..=40).contains(&forged_lines.len()),
        "{} lines",
        forged_lines.len()
    );
    for l in &forged_lines {
        assert!(l.ends_with("WARN one\\n2026-12-03T16:00:00.000000Z  INFO worldd: forged by the plugin\\r\\n plugin=stall"), "{l}");
    }
    assert_eq!(
        log.matches("the plugin sends more than 20 log messages a second ([limits] plugin_log_per_second); past that rate its messages are dropped and counted").count(),
        1,
        "{log}"
    );
    assert!(
        log.contains(&format!(
            "{dropped} log messages of the plugin were dropped ([limits] plugin_log_per_second)"
        )),
        "{log}"
    );
    assert!(log.contains("after"), "{log}");
}

/// With `WORLDD_LOG_FORMAT=json` every line of the daemon's log is one JSON object, and what a
/// plugin writes stays inside its record's `message`, however it tries to start a line or a
/// record of its own.
#[test]
fn json_log_lines_are_one_record_each_and_a_plugin_cannot_forge_one() {
    let d = Daemon::start_env(WS_STALL, &[], &[("WORLDD_LOG_FORMAT", "json")]);
    let t = d.session("forger", &["Stall.Log=any:10", "Stall.Wait=any:10"]);
    let forged = "one\n{\"timestamp\":\"2026-12-03T16:00:00Z\",\"level\":\"INFO\",\"message\":\"forged\"}\r\n\u{1b}[2J";
    let v = tools_call(
        &d,
        &t,
        "stall-log",
        json!({"lines": "3", "bytes": "0", "text": forged}),
    );
    assert_eq!(v["result"]["structuredContent"]["ok"], true, "{v}");
    let v = tools_call(&d, &t, "stall-wait", json!({"ms": "1"}));
    assert_eq!(v["result"]["structuredContent"]["ok"], true, "{v}");
    let (_dir, log) = d.halt_with_log();
    let records: Vec<Value> = log
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}\n{log}")))
        .collect();
    let level_and_message = |r: &Value| {
        (
            r["level"].as_str().unwrap().to_owned(),
            r["message"].as_str().unwrap().to_owned(),
        )
    };
    let plugin_lines: Vec<_> = records
        .iter()
        .filter(|r| r["plugin"] == "stall" && r["message"].as_str() == Some(forged))
        .map(level_and_message)
        .collect();
    assert_eq!(plugin_lines.len(), 3, "{log}");
    assert!(
        !records.iter().any(|r| r["message"] == "forged"),
        "a record of the plugin's making: {log}"
    );
    // The daemon's own records keep their fields as JSON values.
    let loaded = records
        .iter()
        .find(|r| r["message"] == "loaded plugin" && r["plugin"] == "stall")
        .unwrap_or_else(|| panic!("{log}"));
    assert_eq!(loaded["level"], "INFO");
    assert!(
        loaded["timestamp"].as_str().unwrap().ends_with('Z'),
        "{loaded}"
    );
    let call_line = records
        .iter()
        .find(|r| r["message"] == "call" && r["tool"] == "stall-wait")
        .unwrap_or_else(|| panic!("{log}"));
    assert_eq!(
        (&call_line["episode"], &call_line["outcome"]),
        (&json!("forger"), &json!("ok"))
    );
    assert!(call_line["ms"].is_u64(), "{call_line}");
    assert_eq!(call_line["target"], "worldd::metrics");
}

/// Hang one `stall-wait` call of `ms` milliseconds past the handler deadline (its caller
/// gets the seed's timeout; the handler keeps running), SIGTERM the daemon, check that it
/// exits 0 saying it waits for that handler, and start it again on the same store. How long
/// the stop took, the new daemon, and the hung episode's credential.
fn stop_with_one_hung_handler(episode: &str, ms: u64) -> (Duration, Daemon, String) {
    let (d, _c) = start_with(WS_STALL, "[limits]\nhandler_deadline_ms = 300\n", &[]);
    let token = d.session(episode, &["Stall.Wait=any:5"]);
    let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"stall-wait","arguments":{"ms": ms.to_string()}}});
    let a = request(
        "POST",
        &d.url("/mcp/"),
        Some(&token),
        &mcp_headers(),
        Some(&serde_json::to_vec(&body).unwrap()),
    );
    assert_eq!(
        a.json(),
        json!({"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"host callback timed out"}})
    );
    assert_eq!(metric(&d, "worldd_handlers_overrunning "), 1);
    let (status, took, log, dir) = d.stop_with_log(Duration::from_secs(30));
    assert!(status.success(), "{status:?}\n{log}");
    assert!(
        log.contains("1 handler(s) past their deadline still run; waiting up to 5 s for them"),
        "{log}"
    );
    (took, Daemon::start_in(dir, WS_STALL, &[]), token)
}

/// The episode's intents without an outcome, by `GET /v1/budget`.
fn indeterminate(d: &Daemon, token: &str) -> Vec<Value> {
    let a = get(&d.url("/v1/budget"), Some(token));
    assert_eq!(a.status, 200, "{}", a.text());
    a.json()["indeterminate"].as_array().unwrap().clone()
}

#[test]
fn shutdown_leaves_a_handler_hung_past_5_s_and_its_intent_is_indeterminate_at_the_next_start() {
    let (took, d, token) = stop_with_one_hung_handler("hung", 60_000);
    // It waited the 5 s, not the handler's 60.
    assert!(took >= Duration::from_secs(5), "{took:?}");
    assert!(took < Duration::from_secs(20), "{took:?}");
    let open = indeterminate(&d, &token);
    assert_eq!(open.len(), 1, "{open:?}");
    assert_eq!(open[0]["effect"], "Stall.Wait");
    assert!(open[0]["invocationId"]
        .as_str()
        .unwrap()
        .starts_with("mcp:hung:"));
}

#[test]
fn shutdown_waits_for_a_hung_handler_that_returns_within_5_s_and_journals_its_outcome() {
    let (took, d, token) = stop_with_one_hung_handler("late", 2_500);
    // Done when the handler returned, before the 5 s were up.
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(indeterminate(&d, &token), Vec::<Value>::new());
}

#[test]
fn one_episode_looping_a_slow_tool_cannot_starve_another() {
    let (d, _c) = start_with(
        WS_STALL,
        "[limits]\nexecution_slots = 2\nepisode_queue = 3\n",
        &[],
    );
    let looping = d.session("loop", &["Stall.Wait=any:50"]);
    let reader = d.session("reader", &["Workspace.Read=worktree:100"]);
    std::fs::write(d.root().join("reader/a.txt"), "hello").unwrap();
    // Eight slow calls at once from one episode: one runs, three wait, four are refused.
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let t = looping.clone();
            let url = d.url("/mcp/");
            std::thread::spawn(move || {
                let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"stall-wait","arguments":{"ms":"1500"}}});
                let a = request("POST", &url, Some(&t), &mcp_headers(), Some(&serde_json::to_vec(&body).unwrap()));
                a.content_type.starts_with("text/event-stream")
            })
        })
        .collect();
    // Meanwhile the other episode is served every time.
    for _ in 0..10 {
        let v = tools_call(&d, &reader, "ailang-read", json!({"path": "a.txt"}));
        assert_eq!(v["result"]["structuredContent"]["content"], "hello", "{v}");
    }
    let served = calls
        .into_iter()
        .filter_map(|c| c.join().ok())
        .filter(|ok| *ok)
        .count();
    // The running call and the three queued behind it ran; the rest were turned away at once.
    assert_eq!(served, 4);
    assert_eq!(
        metric(
            &d,
            "worldd_admission_refused_total{reason=\"episode_queue_full\"} "
        ),
        4
    );
}

/// The resident set of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

// ------------------------------------------------------------------------------------------
// Memory a burst leaves behind.

/// Many episodes writing megabyte files at once leave the allocator holding what their calls
/// freed; once the burst is over (no body held) the daemon hands it back to the kernel.
#[test]
fn a_burst_of_megabyte_writes_leaves_no_freed_heap_held_once_it_is_over() {
    let (d, _c) = start_with(WS, "[server]\nmemory_trim_ms = 200\n", &[]);
    let tokens: Vec<String> = (0..16)
        .map(|i| d.session(&format!("ep{i}"), &["Workspace.Write=worktree:1000"]))
        .collect();
    let trims_before = metric(&d, "worldd_memory_trims_total ");
    let content = "z".repeat(1_000_000);
    std::thread::scope(|s| {
        for (i, token) in tokens.iter().enumerate() {
            let (d, content) = (&d, &content);
            s.spawn(move || {
                for n in 0..4 {
                    let args = json!({"path": format!("f{i}-{n}.ail"), "content": content});
                    let v = tools_call(d, token, "ailang-write", args);
                    assert_eq!(v["result"]["structuredContent"]["ok"], true, "{v}");
                }
            });
        }
    });
    let held_after_burst = metric(&d, "worldd_memory_anonymous_bytes ");
    let trimmed = (0..100).find_map(|_| {
        std::thread::sleep(Duration::from_millis(100));
        let bytes = metric(&d, "worldd_memory_trimmed_bytes_total ");
        (metric(&d, "worldd_memory_trims_total ") > trims_before && bytes >= 16 << 20)
            .then_some(bytes)
    });
    let now = metric(&d, "worldd_memory_anonymous_bytes ");
    assert!(
        trimmed.is_some(),
        "no trim gave back 16 MiB: {held_after_burst} bytes held after the burst, {now} now"
    );
}

/// The resident size of the daemon's mappings of its store's data file (`/proc/PID/smaps`).
fn store_pages_mapped(d: &Daemon) -> u64 {
    let data = std::fs::canonicalize(d.db().join("data.mdb")).unwrap();
    let data = data.to_str().unwrap();
    let smaps = std::fs::read_to_string(format!("/proc/{}/smaps", d.child.id())).unwrap();
    let (mut ours, mut kib) = (false, 0);
    for line in smaps.lines() {
        match line.strip_prefix("Rss:") {
            Some(rss) if ours => {
                kib += rss
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .unwrap()
            }
            Some(_) => {}
            None if line.split(' ').next().is_some_and(|f| f.contains('-')) => {
                ours = line.ends_with(data);
            }
            None => {}
        }
    }
    kib * 1024
}

/// Megabyte writes read back map the store's pages into the daemon's memory (they count in its
/// RSS until it exits, though the kernel caches them anyway); past `store_resident_bytes` of
/// growth the daemon releases its map, and with the budget at 0 it never does.
#[test]
fn megabyte_objects_read_back_stay_mapped_only_up_to_the_resident_budget() {
    const MIB: u64 = 1 << 20;
    for budget in [4 * MIB, 0] {
        let config = format!("[serve]\nstore_resident_bytes = {budget}\n");
        let (d, _c) = start_with(WS, &config, &[]);
        let token = d.session("ep1", &["Workspace.Write=worktree:1000"]);
        let refs: Vec<String> = (0..16u8)
            .map(|i| {
                let args = json!({"path": format!("f{i}.ail"), "content": char::from(b'a' + i).to_string().repeat(1_000_000)});
                let v = tools_call(&d, &token, "ailang-write", args.clone());
                assert_eq!(v["result"]["structuredContent"]["ok"], true, "{v}");
                broker_core::object::Ref::of_json(&args).unwrap().to_string()
            })
            .collect();
        let mapped_before = store_pages_mapped(&d);
        let releases_before = metric(&d, "worldd_store_map_releases_total ");
        let released_before = metric(&d, "worldd_store_map_released_bytes_total ");
        for r in &refs {
            let object = get(
                &d.url(&format!("/v1/objects/{r}?payload=true")),
                Some(&token),
            );
            assert_eq!(object.status, 200);
            assert!(object.body.len() > 1_000_000);
        }
        let read_back = store_pages_mapped(&d);
        // With a budget, the writer also looks after a second without work: on a loaded
        // machine the read-back can take longer, and the map may be released during it (what
        // the budget is for). Only a read-back that no release cut short shows every page.
        if metric(&d, "worldd_store_map_releases_total ") == releases_before {
            assert!(
                read_back >= mapped_before + 15 * MIB,
                "{mapped_before} then {read_back} bytes mapped after reading 16 MiB back"
            );
        }
        // The next commit past the writer's look interval releases the map.
        std::thread::sleep(Duration::from_millis(150));
        let v = tools_call(
            &d,
            &token,
            "ailang-write",
            json!({"path": "small.ail", "content": "x"}),
        );
        assert_eq!(v["result"]["structuredContent"]["ok"], true, "{v}");
        let (releases, released) = (
            metric(&d, "worldd_store_map_releases_total ") - releases_before,
            metric(&d, "worldd_store_map_released_bytes_total ") - released_before,
        );
        let after = store_pages_mapped(&d);
        if budget == 0 {
            assert_eq!((releases, released), (0, 0));
            assert!(after >= read_back, "{read_back} then {after} bytes mapped");
        } else {
            // One release at least (an idle look during the read-back, or the commit after
            // it; the call's own commits, if more than 100 ms apart, may map enough again for
            // another): of all the read-back mapped but what the budget lets stay.
            assert!(releases >= 1, "{releases} releases");
            assert!(
                released >= 16 * MIB - budget - MIB,
                "{released} bytes released"
            );
            assert!(
                after <= mapped_before + budget + MIB,
                "{mapped_before} before, {read_back} after the read-back, then {after} bytes mapped"
            );
            // The store reads on as before.
            let object = get(
                &d.url(&format!("/v1/objects/{}?payload=true", refs[0])),
                Some(&token),
            );
            assert_eq!(object.status, 200);
        }
    }
}

/// At shutdown the daemon drains what is in flight; connections that never sent a whole
/// request head have nothing to finish and are closed at once, not waited for until the
/// header deadline (a minute here).
#[test]
fn shutdown_does_not_wait_for_connections_that_never_sent_a_request() {
    let (d, _c) = start_with(WS, "[server]\nheader_timeout_ms = 60000\n", &[]);
    let mut idle: Vec<TcpStream> = (0..3).map(|_| connect(&d)).collect();
    let mut half = connect(&d);
    write!(half, "GET /v1/health HTTP/1.1\r\nHost: {}\r\n", d.addr).unwrap();
    idle.push(half);
    // A served keep-alive connection is closed too.
    let mut served = connect(&d);
    write!(
        served,
        "GET /v1/health HTTP/1.1\r\nHost: {}\r\n\r\n",
        d.addr
    )
    .unwrap();
    let mut status = [0u8; 12];
    served.read_exact(&mut status).unwrap();
    assert_eq!(&status, b"HTTP/1.1 200");
    assert!(eventually(500, || metric(&d, "worldd_connections_open ") >= 6));
    let exit = d.stop();
    assert!(exit.success(), "{exit}");
    for s in &mut idle {
        assert!(closed_by_peer(s));
    }
}

/// A revoked agent's calls that were queued behind its episode's running call ran after the
/// revocation (the credential was checked when the request arrived): they wrote files and
/// spent budget. A call that waited is now checked against its credential as it is when its
/// turn comes. One revoked meanwhile runs nothing and writes nothing: it is answered with the
/// authentication errors' code (-32001), and its key stays unused, so the same call sent again
/// with a valid credential of the episode runs. (It used to be committed as `denied:expired`,
/// which misnamed the revocation and used up the key.)
#[test]
fn calls_queued_behind_their_episode_run_nothing_once_their_credential_is_revoked() {
    const REVOKED: &str = "session credential was revoked while this call waited: nothing ran and nothing was journaled (its task id is unused); send it again with a valid credential";
    let (d, _c) = start_with(WS_STALL, "[limits]\nhandler_deadline_ms = 10000\n", &[]);
    let holder = d.session("revoked", &["Stall.Wait=any:5"]);
    let queued = d.session("revoked", &["Workspace.Write=worktree:5"]);
    let keyed_write = |key: &str| {
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ailang-write",
            "arguments":{"path": "after-revoke.txt", "content": "x"},
            "_meta": {"world/idempotencyKey": key}}})
    };
    let in_background = |token: &str, body: Value| {
        let (url, token) = (d.url("/mcp/"), token.to_owned());
        std::thread::spawn(move || {
            let a = request(
                "POST",
                &url,
                Some(&token),
                &mcp_headers(),
                Some(&serde_json::to_vec(&body).unwrap()),
            );
            if a.content_type.starts_with("text/event-stream") {
                a.sse_json()
            } else {
                a.json()
            }
        })
    };
    let slow = in_background(
        &holder,
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"stall-wait","arguments":{"ms": "2500"}}}),
    );
    std::thread::sleep(Duration::from_millis(300));
    let write = in_background(&queued, keyed_write("w1"));
    std::thread::sleep(Duration::from_millis(300));
    d.revoke_by_cli(&queued);
    let v = write.join().unwrap();
    assert_eq!(
        v,
        json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32001, "message": REVOKED}})
    );
    assert!(
        !d.root().join("revoked/after-revoke.txt").exists(),
        "the revoked credential's queued call wrote its file"
    );
    let v = slow.join().unwrap();
    assert_eq!(v["result"]["structuredContent"]["ok"], true, "{v}");
    let after = v["result"]["_meta"]["world/entryIndex"].as_u64().unwrap();
    // The key is unused: a valid credential of the episode sends the call again, and it runs.
    let renewed = d.session("revoked", &["Workspace.Write=worktree:5"]);
    let a = request(
        "POST",
        &d.url("/mcp/"),
        Some(&renewed),
        &mcp_headers(),
        Some(&serde_json::to_vec(&keyed_write("w1")).unwrap()),
    );
    let v = if a.content_type.starts_with("text/event-stream") {
        a.sse_json()
    } else {
        a.json()
    };
    assert_eq!(
        v["result"]["structuredContent"]["ok"], true,
        "the key was used up: {v}"
    );
    assert_eq!(v["result"]["_meta"]["world/replayed"], json!(false), "{v}");
    assert!(d.root().join("revoked/after-revoke.txt").exists());
    assert_eq!(
        v["result"]["_meta"]["world/entryIndex"],
        json!(after + 1),
        "the revoked call committed nothing"
    );

    // The same through one JSON-RPC batch: its later requests waited for the first (a slow
    // tool), and ran after the revocation; now each runs on the credential as it is then.
    let batcher = d.session(
        "batched",
        &["Stall.Wait=any:5", "Workspace.Write=worktree:5"],
    );
    let body = json!([
        {"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"stall-wait","arguments":{"ms":"2500"}}},
        {"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ailang-write","arguments":{"path":"b2.txt","content":"x"}}},
        {"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"ailang-write","arguments":{"path":"b3.txt","content":"x"}}},
    ]);
    let batch = {
        let (url, batcher) = (d.url("/mcp/"), batcher.clone());
        std::thread::spawn(move || {
            let mut headers = mcp_headers();
            headers.push(("MCP-Protocol-Version", "2025-03-26"));
            request(
                "POST",
                &url,
                Some(&batcher),
                &headers,
                Some(&serde_json::to_vec(&body).unwrap()),
            )
            .sse_json()
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    d.revoke_by_cli(&batcher);
    let replies = batch.join().unwrap();
    let replies = replies.as_array().unwrap();
    assert_eq!(replies.len(), 3, "{replies:?}");
    assert_eq!(
        replies[0]["result"]["structuredContent"]["ok"], true,
        "{replies:?}"
    );
    for (reply, id) in replies[1..].iter().zip([2, 3]) {
        assert_eq!(
            reply,
            &json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32001, "message": REVOKED}})
        );
    }
    for file in ["b2.txt", "b3.txt"] {
        assert!(
            !d.root().join("batched").join(file).exists(),
            "{file} was written"
        );
    }

    // The same over A2A: the queued task runs nothing and is told so with the same code.
    let holder = d.session("a2a-revoked", &["Stall.Wait=any:5"]);
    let queued = d.session("a2a-revoked", &["Workspace.Write=worktree:5"]);
    let slow = in_background(
        &holder,
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"stall-wait","arguments":{"ms": "2500"}}}),
    );
    std::thread::sleep(Duration::from_millis(300));
    let task = {
        let (url, queued) = (d.url("/a2a/"), queued.clone());
        std::thread::spawn(move || {
            let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tasks/send",
                "params": {"id": "t1", "metadata": {"skill_id": "ailang-write"},
                    "message": {"role": "user", "parts": [{"type": "data",
                        "data": {"path": "a2a.txt", "content": "x"}}]}}});
            post_json(&url, Some(&queued), &body).json()
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    d.revoke_by_cli(&queued);
    assert_eq!(
        task.join().unwrap(),
        json!({"jsonrpc": "2.0", "id": 9, "error": {"code": -32001, "message": REVOKED}})
    );
    slow.join().unwrap();
    assert!(!d.root().join("a2a-revoked/a2a.txt").exists());
}

/// `Stall.Wait` units the episode of `token` has spent: an intent is journaled just before
/// its handler starts.
fn stall_spent(d: &Daemon, token: &str) -> u64 {
    let a = get(&d.url("/v1/budget"), Some(token));
    assert_eq!(a.status, 200, "{}", a.text());
    a.json()["grants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["effect"] == "Stall.Wait")
        .map_or(0, |g| g["spent"].as_u64().unwrap())
}

/// One agent looping a slow large call (its handler waiting seconds, as an `ailang-run` child
/// does) held the large-call lane for each whole run: every other episode's large calls waited
/// a handler's run each, and behind three such agents they all timed out. A large call gives
/// its place in the lane up while it runs on, so another episode's large writes go through, all
/// of them, while the slow call still runs.
#[test]
fn one_agent_looping_a_slow_large_call_does_not_hold_the_large_call_lane_from_other_episodes() {
    let (d, _c) = start_with(WS_STALL, "[limits]\nlarge_call_bytes = 1024\n", &[]);
    let attacker = d.session("looping", &["Stall.Wait=any:5"]);
    let victim = d.session("victim", &["Workspace.Write=worktree:50"]);
    // A slow call over the large-call size: 5 s of handler, its body padded past 1 KiB.
    let mut slow = serde_json::to_vec(&json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"stall-wait","arguments":{"ms":"5000"}}})).unwrap();
    slow.extend_from_slice(&[b' '; 2048]);
    let looping = std::thread::spawn({
        let (url, token) = (d.url("/mcp/"), attacker.clone());
        move || {
            (0..2)
                .map(|_| request("POST", &url, Some(&token), &mcp_headers(), Some(&slow)).text())
                .collect::<Vec<_>>()
        }
    });
    // The first slow call's handler runs (its intent journaled) and its call holds the lane.
    let waiting = Instant::now();
    while stall_spent(&d, &attacker) == 0 {
        assert!(waiting.elapsed() < Duration::from_secs(30), "never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    for n in 0..3 {
        let v = tools_call(
            &d,
            &victim,
            "ailang-write",
            json!({"path": format!("big-{n}.txt"), "content": "v".repeat(4000)}),
        );
        assert_eq!(v["result"]["structuredContent"]["ok"], true, "{n}: {v}");
    }
    // All three went through while the first slow call still ran.
    assert!(
        !looping.is_finished(),
        "the victim waited for the slow call"
    );
    assert_eq!(stall_spent(&d, &attacker), 1);
    let slow_answers = looping.join().unwrap();
    for a in &slow_answers {
        assert!(a.contains(r#""ok":true"#), "{a}");
    }
    assert_eq!(
        metric(
            &d,
            "worldd_admission_refused_total{reason=\"no_large_call_lane\"} "
        ),
        0
    );
}

/// One credential opened every connection the daemon allows and sent slow log reads on each,
/// back to back. Its reads take turns, one at a time, and every one waiting for its turn (up
/// to `read_wait_ms`) held its connection busy: with all 32 busy, none could be closed to make
/// room, and a new connection of any other client was closed at once. Now a credential has at
/// most a quarter of the connections' requests in flight; past that it is answered 503 at once,
/// and its connection counts as idle meanwhile, so a new client closes one of them and is
/// served.
#[test]
fn one_credential_looping_slow_reads_on_every_connection_cannot_shut_another_out() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let d = Daemon::start(WS, &["--max-connections", "32"]);
    let attacker = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let other = d.session("ep2", &["Workspace.Read=worktree:5"]);
    let read = format!(
        "GET /v1/log?from=0&limit=500 HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {attacker}\r\n\r\n",
        d.addr
    );
    let stop = Arc::new(AtomicBool::new(false));
    let flood: Vec<_> = (0..32)
        .map(|_| {
            let (addr, read, stop) = (d.addr.clone(), read.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut statuses = Vec::new();
                // Reconnect whenever the daemon closes a connection, as an attacker would.
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut s) = TcpStream::connect(&addr) else {
                        continue;
                    };
                    let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
                    while !stop.load(Ordering::Relaxed) {
                        if s.write_all(read.as_bytes()).is_err() {
                            break;
                        }
                        match answer_unless_closed(&mut s) {
                            Some(a) => statuses.push(a),
                            None => break,
                        }
                    }
                }
                statuses
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    // Fresh connections of another credential, each served while the flood goes on.
    let head = format!(
        "GET /v1/head HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {other}\r\nConnection: close\r\n\r\n",
        d.addr
    );
    let mut shut_out = Vec::new();
    for i in 0..10 {
        let mut s = connect(&d);
        let _ = s.write_all(head.as_bytes());
        let (got, _) = read_to_close(&mut s);
        if !got.starts_with(b"HTTP/1.1 200") {
            shut_out.push((i, String::from_utf8_lossy(&got).into_owned()));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    let answers: Vec<Answer> = flood.into_iter().flat_map(|t| t.join().unwrap()).collect();
    assert!(shut_out.is_empty(), "shut out: {shut_out:?}");
    // The flood was served its share, and refused past it at once, with the share's text (or,
    // for a read that waited its turn too long, the turn's).
    let mut refused = 0;
    for a in &answers {
        match a.status {
            200 => assert!(a.text().starts_with("{\"items\":"), "{}", a.text()),
            503 => {
                refused += 1;
                assert_eq!(a.retry_after.as_deref(), Some("1"));
                let message = a.json()["error"]["message"].as_str().unwrap().to_owned();
                assert!(
                    message == REQUESTS_TEXT
                        || message == "too many reads from this credential in flight ([server] reads_per_client); retry shortly",
                    "{message}"
                );
            }
            status => panic!("{status}: {}", a.text()),
        }
    }
    assert!(refused >= 1, "the flood was never refused");
    assert!(trips(&d, "requests_in_flight") >= 1);
}

/// The next answer on `s` (its body by `Content-Length`), or `None` when the connection ends
/// (or fails) first.
fn answer_unless_closed(s: &mut TcpStream) -> Option<Answer> {
    let (head, body) = read_one_answer_unless_closed(s).ok()?;
    Some(answer_of(&head, body))
}

/// A client that takes 64 KiB of a large answer just inside each send timeout is never cut
/// while the daemon serves, and held its drain at SIGTERM for as long as the answer lasted at
/// that pace (about 20 s for this 2 MiB one; ten minutes for 4 MiB at the default 10 s, past
/// systemd's 60 s stop timeout). Once the daemon drains, its waits add up without reset: it has
/// one send timeout (1.5 s here) for the rest of its answer, and is then reset.
#[test]
fn a_slow_reader_of_a_large_answer_cannot_hold_the_drain_past_one_send_timeout() {
    let (d, _c) = start_with(
        WS,
        "[server]\nsend_timeout_ms = 1500\nsend_buffer_bytes = 16384\n",
        &[],
    );
    let token = d.session("ep1", &["Workspace.Read=worktree:100000000"]);
    // Two reads of a megabyte each in one batch (a read is at most 1 MiB): a 2 MiB answer and
    // more.
    let mut batch = Vec::new();
    for (id, file) in [(1, "a.txt"), (2, "b.txt")] {
        std::fs::write(d.root().join("ep1").join(file), "z".repeat(1_000_000)).unwrap();
        batch.push(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "ailang-read", "arguments": {"path": file}}}));
    }
    let body = Value::Array(batch).to_string();
    let head = mcp_post_head(&d, &token, body.len(), false).replace(
        "Content-Length",
        "MCP-Protocol-Version: 2025-03-26\r\nContent-Length",
    );
    let mut s = connect_small_window(&d);
    s.write_all((head + &body).as_bytes()).unwrap();
    let mut status = [0u8; 12];
    s.read_exact(&mut status).unwrap();
    assert_eq!(&status, b"HTTP/1.1 200");
    // 64 KiB at once, then 700 ms of nothing, again and again.
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        // The first bytes, to say what came if it is not the answer.
        let mut first = Vec::new();
        let mut total = 0usize;
        loop {
            let mut chunk = 0;
            while chunk < 64 * 1024 {
                match s.read(&mut buf) {
                    Ok(0) => return (total, false, first),
                    Ok(n) => {
                        if first.len() < 512 {
                            first.extend_from_slice(&buf[..n.min(512)]);
                        }
                        chunk += n;
                        total += n;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                        return (total, true, first)
                    }
                    Err(e) => panic!("{e} after {total} bytes"),
                }
            }
            std::thread::sleep(Duration::from_millis(700));
        }
    });
    // Served at that pace, it is not cut.
    std::thread::sleep(Duration::from_millis(3000));
    assert!(
        !reader.is_finished(),
        "the reader was cut while the daemon served"
    );
    assert_eq!(trips(&d, "send_timeout"), 0);
    let (status, took, log, _dir) = d.stop_with_log(Duration::from_secs(60));
    assert!(status.success(), "{status:?}\n{log}");
    // One send timeout of waiting, then the drain and the exit: well under the ~17 s the rest
    // of the answer takes at that pace.
    assert!(
        took < Duration::from_secs(6),
        "the stop took {took:?}\n{log}"
    );
    let (got, reset, first) = reader.join().unwrap();
    let first = String::from_utf8_lossy(&first);
    assert!(
        reset,
        "the slow reader was not reset ({got} bytes: {first}…)"
    );
    assert!(got < 2 * 1024 * 1024, "{got} bytes arrived");
}

/// A call's credential was checked when its request head arrived; one revoked while the
/// call's body was still arriving (trickled in under `body_timeout_ms`) ran all the same, and
/// committed. A call now runs on its credential as it is when it is admitted: this one runs
/// nothing, journals nothing, and is told so with the authentication errors' code.
#[test]
fn a_credential_revoked_while_its_calls_body_trickles_in_runs_nothing() {
    const REVOKED: &str = "session credential was revoked while this call waited: nothing ran and nothing was journaled (its task id is unused); send it again with a valid credential";
    let (d, _c) = start_with(
        WS,
        "[server]\nbody_timeout_ms = 20000\n[limits]\ncall_deadline_ms = 30000\n",
        &[],
    );
    let token = d.session("slow-body", &["Workspace.Write=worktree:5"]);
    let reader = d.session("watcher", &["Workspace.Read=worktree:5"]);
    let world = || {
        let a = get(&d.url("/v1/head"), Some(&reader));
        assert_eq!(a.status, 200, "{}", a.text());
        a.text()
    };
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "ailang-write", "arguments": {"path": "late.txt", "content": "x"}}})
    .to_string();
    let (first, rest) = body.split_at(body.len() / 2);
    let mut s = connect(&d);
    s.write_all(mcp_post_head(&d, &token, body.len(), false).as_bytes())
        .unwrap();
    s.write_all(first.as_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let before = world();
    d.revoke_by_cli(&token);
    s.write_all(rest.as_bytes()).unwrap();
    let (head, answer) = read_one_answer(&mut s);
    let a = answer_of(&head, answer);
    assert_eq!(a.status, 200, "{}", a.text());
    let v = if a.content_type.starts_with("text/event-stream") {
        a.sse_json()
    } else {
        a.json()
    };
    assert_eq!(
        v,
        json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32001, "message": REVOKED}})
    );
    assert!(!d.root().join("slow-body/late.txt").exists());
    assert_eq!(world(), before, "the revoked call journaled something");
}
