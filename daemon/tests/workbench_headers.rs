//! The headers the workbench's answers and the log stream carry, read from the real binary over
//! real HTTP: what docs/http-api.md promises for `GET /workbench` and for every answer.

mod common;

use common::*;

const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; \
connect-src 'self'; font-src 'none'; object-src 'none'; base-uri 'none'; form-action 'none'; \
frame-ancestors 'none'";

/// `/workbench/daemon` and the workbench's refusals (an unknown asset, a query) said only
/// `nosniff` and `no-store`: no Content-Security-Policy and no Referrer-Policy, though every
/// answer of `/workbench` is documented to carry them.
#[test]
fn every_workbench_answer_carries_its_policy_refusals_and_the_daemon_route_included() {
    let d = Daemon::start(&[], &[]);
    for (path, status, cache, body) in [
        ("/workbench", 200, "no-cache", None),
        ("/workbench/workbench.js", 200, "no-cache", None),
        ("/workbench/daemon", 200, "no-store", None),
        (
            "/workbench/nope",
            404,
            "no-store",
            Some(r#"{"error":{"class":"NotFound","message":"no such workbench asset"}}"#),
        ),
        (
            "/workbench?x=1",
            400,
            "no-store",
            Some(
                r#"{"error":{"class":"BadRequest","message":"the workbench takes no query parameters (its links use the fragment, e.g. /workbench#entry/42)"}}"#,
            ),
        ),
    ] {
        let a = get(&d.url(path), None);
        assert_eq!(a.status, status, "{path}: {}", a.text());
        if let Some(body) = body {
            assert_eq!(a.text(), body, "{path}");
        }
        assert_eq!(a.field("content-security-policy"), Some(CSP), "{path}");
        assert_eq!(a.field("x-content-type-options"), Some("nosniff"), "{path}");
        assert_eq!(a.field("referrer-policy"), Some("no-referrer"), "{path}");
        assert_eq!(a.field("cache-control"), Some(cache), "{path}");
        // One of each: the layer adds what a route did not set, never a second copy.
        for name in [
            "content-security-policy",
            "x-content-type-options",
            "referrer-policy",
            "cache-control",
        ] {
            assert_eq!(
                a.fields.iter().filter(|(k, _)| k == name).count(),
                1,
                "{path} {name}"
            );
        }
    }
    let daemon = get(&d.url("/workbench/daemon"), None).json();
    assert_eq!(daemon["status"], "ok");
    assert_eq!(
        daemon["store"].as_str().map(|s| s.starts_with('/')),
        Some(true)
    );
}

/// `GET /v1/log/stream` answered `Cache-Control: no-cache` (the SSE default), where every answer
/// but the workbench's page says `no-store`: the stream holds an episode's log.
#[test]
fn the_log_stream_says_no_store_as_every_answer_holding_the_log_does() {
    let d = Daemon::start(&[], &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:1"]);
    let a = raw_exchange(
        &d.addr,
        format!(
            "GET /v1/log/stream?from=0 HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n\r\n",
            d.addr
        )
        .as_bytes(),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(a.content_type, "text/event-stream");
    assert_eq!(a.field("cache-control"), Some("no-store"));
    assert_eq!(
        a.fields
            .iter()
            .filter(|(k, _)| k == "cache-control")
            .count(),
        1
    );
}
