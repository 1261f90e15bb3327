//! `POST /mcp/` against the real binary, where an answer contradicted the documentation: a
//! notification the server cannot accept is refused with an HTTP error, never answered on a
//! stream. Each test is named for what must hold.

mod common;

use common::*;
use serde_json::{json, Value};

const WS: &[&str] = &["worldd_workspace"];

/// The JSON-RPC reply of an SSE answer, which must be 200.
fn sse(a: &Answer) -> Value {
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(a.content_type, "text/event-stream", "{}", a.text());
    a.sse_json()
}

#[test]
fn a_notification_the_server_cannot_accept_is_refused_400_and_a_well_formed_one_is_202() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let refused = |why: &str| {
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600,
               "message": format!("invalid request: {why}")}})
    };
    for version in ["2025-11-25", "2025-06-18", "2025-03-26"] {
        // Well-formed, whatever its params: acknowledged, as under 2026-07-28.
        for body in [
            r#"{"jsonrpc":"2.0","method":"notifications/initialized","params":null}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized","params":5}"#,
        ] {
            let a = mcp_text(&d, &token, version, body.as_bytes());
            assert_eq!(
                (a.status, a.text()),
                (202, String::new()),
                "{version} {body}"
            );
        }
        for (body, why) in [
            (
                r#"{"method":"notifications/cancelled","params":{"requestId":1}}"#,
                r#""jsonrpc" must be "2.0""#,
            ),
            (
                r#"{"jsonrpc":"2.0","method":5}"#,
                r#""method" must be a string"#,
            ),
            (r#"{"jsonrpc":"2.0"}"#, r#"a request needs "method""#),
            (
                r#"{"jsonrpc":"2.0","method":"ping","result":{}}"#,
                r#"a message is a request ("method") or a response ("result", "error"), not both"#,
            ),
        ] {
            let a = mcp_text(&d, &token, version, body.as_bytes());
            assert_eq!(
                (a.status, a.content_type.as_str()),
                (400, "application/json"),
                "{version} {body}: {}",
                a.text()
            );
            assert_eq!(a.json(), refused(why), "{version} {body}");
        }
    }
    // A 2025-03-26 batch of only notifications, one malformed: the 400 array; one that holds
    // a request is answered on the stream, the malformed notification's error in it.
    let a = mcp_text(
        &d,
        &token,
        "2025-03-26",
        br#"[{"method":"notifications/initialized"},{"jsonrpc":"2.0","method":"notifications/initialized","params":null}]"#,
    );
    assert_eq!(
        (a.status, a.content_type.as_str()),
        (400, "application/json"),
        "{}",
        a.text()
    );
    assert_eq!(a.json(), json!([refused(r#""jsonrpc" must be "2.0""#)]));
    let a = mcp_text(
        &d,
        &token,
        "2025-03-26",
        br#"[{"method":"notifications/initialized"},{"jsonrpc":"2.0","id":3,"method":"ping"}]"#,
    );
    assert_eq!(
        sse(&a),
        json!([refused(r#""jsonrpc" must be "2.0""#),
               {"jsonrpc": "2.0", "id": 3, "result": {}}])
    );
}
