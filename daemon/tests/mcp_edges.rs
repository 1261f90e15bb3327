//! `POST /mcp/` against the real binary, where an answer contradicted the documentation: an
//! integer past 64 bits outside `params` is an invalid request (id null) whatever else the
//! request holds; a tool's id sent as its name is answered with that tool's MCP name; and a
//! notification the server cannot accept is refused with an HTTP error, never answered on a
//! stream; a notification is answered alike under every revision (one whose `params` hold a
//! number this server cannot take is `202`, one with `method` beside `result` or `error` is
//! refused `400`: 2026-07-28 answered them `400` and `202`). Each test is named for what must
//! hold.

mod common;

use common::fixtures::{misfit_daemon, misfit_mode_tool};
use common::*;
use serde_json::{json, Value};

const WS: &[&str] = &["worldd_workspace"];

/// The 2026-07-28 headers of a request of `method`.
fn modern_headers(method: &'static str) -> Vec<(&'static str, &'static str)> {
    vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", method),
    ]
}

/// The JSON-RPC reply of an SSE answer, which must be 200.
fn sse(a: &Answer) -> Value {
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(a.content_type, "text/event-stream", "{}", a.text());
    a.sse_json()
}

const WIDE: &str = "18446744073709551616";

fn outside_64_bits() -> Value {
    json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": format!(
        "invalid request: number {WIDE} is outside the 64-bit integer range (−2^63 to 2^64−1) in which this server reads integers exactly; nothing was run"
    )}})
}

#[test]
fn an_integer_past_64_bits_outside_params_is_an_invalid_request_with_id_null_though_params_are_sent(
) {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    std::fs::write(d.root().join("ep1/hello.txt"), "hi\n").unwrap();
    for body in [
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{}},"x":{WIDE}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","x":{WIDE}}}"#),
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"ailang-read","arguments":{{"path":"hello.txt"}}}},"x":{WIDE}}}"#
        ),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{}},"x":{WIDE}}}"#),
        // Outside and inside: the one outside decides.
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","x":{WIDE},"params":{{"y":{WIDE}}}}}"#),
        // In the id.
        format!(r#"{{"jsonrpc":"2.0","id":{WIDE},"method":"ping","params":{{}}}}"#),
    ] {
        for version in ["2025-11-25", "2025-06-18", "2025-03-26"] {
            let a = mcp_text(&d, &token, version, body.as_bytes());
            assert_eq!(sse(&a), outside_64_bits(), "{version} {body}");
        }
    }
    // Inside one request's params alone it stays invalid params, to that request's id.
    let a = mcp_text(
        &d,
        &token,
        "2025-11-25",
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"y":{WIDE}}}}}"#).as_bytes(),
    );
    assert_eq!(
        sse(&a),
        json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": format!(
            "invalid params: number {WIDE} is outside the exact integer range of canonical JSON (±2^53−1)"
        )}})
    );
    // Under 2026-07-28, with that revision's status.
    let meta = r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}"#;
    let body =
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{meta},"x":{WIDE}}}"#);
    let a = request(
        "POST",
        &d.url("/mcp/"),
        Some(&token),
        &modern_headers("tools/list"),
        Some(body.as_bytes()),
    );
    assert_eq!(
        (a.status, a.content_type.as_str()),
        (400, "application/json"),
        "{}",
        a.text()
    );
    assert_eq!(a.json(), outside_64_bits());
}

#[test]
fn a_tool_id_sent_as_its_name_is_answered_with_that_tools_mcp_name_before_any_near_name() {
    let tools: Vec<Value> = ["x.y", "x_y", "x/y"]
        .into_iter()
        .map(misfit_mode_tool)
        .collect();
    let d = misfit_daemon(&json!({ "transitions": tools }));
    let token = d.session("ep", &["Misfit.Do=any:50"]);
    for (sent, meant) in [("x.y", "x_dy"), ("x_y", "x_uy"), ("x/y", "x_sy")] {
        let a = mcp(
            &d,
            &token,
            "tools/call",
            json!({"name": sent, "arguments": {"mode": "plain"}}),
        );
        assert_eq!(
            sse(&a)["error"],
            json!({"code": -32602, "message": format!("unknown tool \"{sent}\""),
                   "data": {"why": format!(
                "no tool of this session is named \"{sent}\"; did you mean {meant}? (tools/list shows this session's tools)"
            )}})
        );
    }
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

/// A POST under `version`: the older revisions' headers, or 2026-07-28's.
fn post_as(d: &Daemon, token: &str, version: &str, body: &str) -> Answer {
    if version == "2026-07-28" {
        request(
            "POST",
            &d.url("/mcp/"),
            Some(token),
            &modern_headers("notifications/initialized"),
            Some(body.as_bytes()),
        )
    } else {
        mcp_text(d, token, version, body.as_bytes())
    }
}

const EVERY_REVISION: [&str; 4] = ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"];

#[test]
fn a_notification_whose_params_hold_a_number_this_server_cannot_take_is_202_under_every_revision() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    for body in [
        format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/initialized","params":{{"x":{WIDE}}}}}"#
        ),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized","params":{"x":1e400}}"#.to_owned(),
        format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{WIDE}}}}}"#
        ),
    ] {
        for version in EVERY_REVISION {
            let a = post_as(&d, &token, version, &body);
            assert_eq!(
                (a.status, a.text()),
                (202, String::new()),
                "{version} {body}"
            );
        }
    }
    // A request holding one is still refused under 2026-07-28 (its id outside params here).
    let a = post_as(
        &d,
        &token,
        "2026-07-28",
        &format!(r#"{{"jsonrpc":"2.0","id":{WIDE},"method":"tools/list","params":{{}}}}"#),
    );
    assert_eq!(
        (a.status, a.content_type.as_str()),
        (400, "application/json"),
        "{}",
        a.text()
    );
    assert_eq!(a.json(), outside_64_bits());
}

#[test]
fn a_message_with_method_and_result_or_error_and_no_id_is_refused_400_not_both_under_every_revision(
) {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let not_both = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600,
        "message": r#"invalid request: a message is a request ("method") or a response ("result", "error"), not both"#}});
    for body in [
        r#"{"jsonrpc":"2.0","method":"ping","result":{}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized","error":{"code":1,"message":"m"}}"#,
    ] {
        for version in EVERY_REVISION {
            let a = post_as(&d, &token, version, body);
            assert_eq!(
                (a.status, a.content_type.as_str()),
                (400, "application/json"),
                "{version} {body}: {}",
                a.text()
            );
            assert_eq!(a.json(), not_both, "{version} {body}");
        }
    }
}

/// Under 2026-07-28 a message without `id` is told apart as every revision tells it
/// (`jsonrpc::classify`): only a well-formed notification is acknowledged; one with `method`
/// beside `result`/`error` is refused naming that; anything else without `id` (no `jsonrpc`,
/// a `method` that is no string or none, a response without the id it answers) is no single
/// request or notification.
#[test]
fn a_message_without_id_under_2026_07_28_is_202_only_when_every_revision_takes_it_as_a_notification(
) {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    for body in [
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized","params":5}"#,
    ] {
        let a = post_as(&d, &token, "2026-07-28", body);
        assert_eq!((a.status, a.text()), (202, String::new()), "{body}");
    }
    let not_one = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600,
        "message": "invalid request: the body must be a single JSON-RPC request or notification object under MCP-Protocol-Version 2026-07-28"}});
    let not_both = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600,
        "message": r#"invalid request: a message is a request ("method") or a response ("result", "error"), not both"#}});
    for (body, expected) in [
        (r#"{"method":"notifications/initialized"}"#, &not_one),
        (
            r#"{"jsonrpc":"1.0","method":"notifications/initialized"}"#,
            &not_one,
        ),
        (r#"{"jsonrpc":"2.0","method":5}"#, &not_one),
        (r#"{"jsonrpc":"2.0"}"#, &not_one),
        (r#"{"jsonrpc":"2.0","result":{}}"#, &not_one),
        (
            r#"{"jsonrpc":"2.0","error":{"code":1,"message":"m"}}"#,
            &not_one,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"ping","result":{}}"#,
            &not_both,
        ),
        (r#"{"method":"ping","result":{}}"#, &not_one),
    ] {
        let a = post_as(&d, &token, "2026-07-28", body);
        assert_eq!(
            (a.status, a.content_type.as_str()),
            (400, "application/json"),
            "{body}: {}",
            a.text()
        );
        assert_eq!(&a.json(), expected, "{body}");
    }
}
