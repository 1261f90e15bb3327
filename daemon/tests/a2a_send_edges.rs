//! A2A requests at the edges of what the documentation promises, through the real binary: an
//! integer past what the strict parser takes outside `params` is an invalid request answered
//! with id null, never invalid params (nor to an id the client did not send).

mod common;

use common::*;
use serde_json::{json, Value};

const WS: &[&str] = &["worldd_workspace"];
/// `POST /a2a/` of `body` as written, with `A2A-Version: version` if given: status and text.
fn post(d: &Daemon, token: &str, version: Option<&str>, body: &str) -> (u16, String) {
    let mut headers = vec![("Content-Type", "application/json")];
    if let Some(v) = version {
        headers.push(("A2A-Version", v));
    }
    let a = request(
        "POST",
        &d.url("/a2a/"),
        Some(token),
        &headers,
        Some(body.as_bytes()),
    );
    (a.status, a.text())
}

/// A daemon with the workspace plugin and a session that may read `hello.txt`.
fn workspace() -> (Daemon, String) {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep", &["Workspace.Read=worktree:50"]);
    std::fs::write(d.root().join("ep").join("hello.txt"), "hi there").unwrap();
    (d, token)
}

#[test]
fn an_integer_past_the_canonical_range_outside_params_is_an_invalid_request_with_id_null() {
    let (d, token) = workspace();
    let invalid = |text: &str| {
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600,
               "message": format!("invalid JSON-RPC request: number {text} is outside the exact integer range of canonical JSON (±2^53−1)")}})
    };
    for (body, literal) in [
        // An id the strict parser refuses, beside valid params: never echoed as a double.
        (
            r#"{"jsonrpc":"2.0","id":12345678901234567890123,"method":"tasks/get","params":{"id":"m-1"}}"#,
            "12345678901234567890123",
        ),
        (
            r#"{"jsonrpc":"2.0","id":18446744073709551616,"method":"tasks/get","params":{"id":"m-1"}}"#,
            "18446744073709551616",
        ),
        // Another member of the envelope, beside valid params.
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"m-1"},"x":12345678901234567890123}"#,
            "12345678901234567890123",
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"m-1"},"x":9007199254740993}"#,
            "9007199254740993",
        ),
        // A notification: its envelope is no request's either.
        (
            r#"{"jsonrpc":"2.0","method":"tasks/get","params":{"id":"m-1"},"x":12345678901234567890123}"#,
            "12345678901234567890123",
        ),
        // The same number in params too: the one outside decides.
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","x":9007199254740993,"params":{"id":"m-1","n":9007199254740993}}"#,
            "9007199254740993",
        ),
    ] {
        let (status, text) = post(&d, &token, None, body);
        assert_eq!(status, 200, "{body}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v, invalid(literal), "{body}");
    }
    // Inside params alone it stays invalid params, to the id sent.
    let (status, text) = post(
        &d,
        &token,
        None,
        r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"m-1","n":12345678901234567890123}}"#,
    );
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        v,
        json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "invalid params"}})
    );
}

