//! `POST /mcp/` against the real `worldd` binary over real sockets, with the real plugins:
//! clients that send what a careful one would not (numbers no double holds, names of
//! megabytes, a batch of refused responses, a null idempotency key, a tool name as a host
//! shows it) and what a model needs to see in a listing. Each test is named for what must hold.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const WS: &[&str] = &["worldd_workspace"];
const WS_STALL: &[&str] = &["worldd_workspace", "worldd_stall"];
/// The ailang plugin without its binary: it declines to start, and its tools cannot run.
const WS_AILANG: &[&str] = &["worldd_workspace", "worldd_ailang"];

fn headers() -> Vec<(&'static str, &'static str)> {
    vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ]
}

/// The 2026-07-28 headers of a request of `method` (and `name`, for a `tools/call`).
fn modern_headers(
    method: &'static str,
    name: Option<&'static str>,
) -> Vec<(&'static str, &'static str)> {
    let mut h = headers();
    h.push(("MCP-Protocol-Version", "2026-07-28"));
    h.push(("Mcp-Method", method));
    if let Some(n) = name {
        h.push(("Mcp-Name", n));
    }
    h
}

/// The `_meta` envelope every 2026-07-28 request carries.
fn envelope() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
           "io.modelcontextprotocol/clientCapabilities": {}})
}

/// The JSON-RPC reply of an SSE answer, which must be 200.
fn sse(a: &Answer) -> Value {
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(a.content_type, "text/event-stream", "{}", a.text());
    a.sse_json()
}

/// A number literal too large for a double (`1e400`) is JSON: it was answered `-32700 Parse
/// error` ("the body is not JSON"), where A2A names the number. In one request's `params` it
/// is invalid params answered to that request's id; anywhere else an invalid request, id null;
/// under every revision, nothing run.
#[test]
fn a_number_too_large_for_a_double_is_no_parse_error_under_any_revision() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    std::fs::write(d.root().join("ep1/hello.txt"), "hi\n").unwrap();
    let in_params = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ailang-read","arguments":{"path":"hello.txt","x":1e400}}}"#;
    let invalid_params = json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602,
        "message": "invalid params: number 1e400 is too large for a 64-bit float"}});
    let invalid_request = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600,
        "message": "invalid request: number 1e400 is too large for a 64-bit float; nothing was run"}});
    for version in ["2025-11-25", "2025-06-18", "2025-03-26"] {
        let a = mcp_text(&d, &token, version, in_params);
        assert_eq!(sse(&a), invalid_params, "{version}");
        let a = mcp_text(
            &d,
            &token,
            version,
            br#"{"jsonrpc":"2.0","id":1e400,"method":"ping"}"#,
        );
        assert_eq!(sse(&a), invalid_request, "{version}");
    }
    // In a batch, which request it belongs to cannot be told: no item runs.
    let batch = br#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ailang-read","arguments":{"path":"hello.txt","x":-1E999}}}]"#;
    let a = mcp_text(&d, &token, "2025-03-26", batch);
    assert_eq!(
        sse(&a),
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600,
            "message": "invalid request: number -1E999 is too large for a 64-bit float; nothing was run"}})
    );
    // Under 2026-07-28, with that revision's status for each code.
    let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta": envelope(), "x": 0}})
        .to_string()
        .replace(r#""x":0"#, r#""x":1e400"#);
    let a = request(
        "POST",
        &d.url("/mcp/"),
        Some(&token),
        &modern_headers("tools/list", None),
        Some(body.as_bytes()),
    );
    assert_eq!(
        (a.status, a.content_type.as_str()),
        (400, "application/json")
    );
    assert_eq!(a.json(), invalid_params);
    let a = request(
        "POST",
        &d.url("/mcp/"),
        Some(&token),
        &modern_headers("tools/list", None),
        Some(br#"{"jsonrpc":"2.0","id":1e400,"method":"tools/list"}"#),
    );
    assert_eq!(
        (a.status, a.content_type.as_str()),
        (400, "application/json")
    );
    assert_eq!(a.json(), invalid_request);
    // Nothing ran: the log is as it was.
    let a = mcp_text(&d, &token, "2025-11-25", br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ailang-read","arguments":{"path":"hello.txt"}}}"#);
    assert_eq!(sse(&a)["result"]["_meta"]["world/entryIndex"], json!(1));
    // Broken JSON is still a parse error, where it broke.
    let a = mcp_text(&d, &token, "2025-11-25", br#"{"x":1e400,"#);
    assert_eq!(
        sse(&a),
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700,
            "message": "Parse error: EOF while parsing a value at line 1 column 11; nothing was run"}})
    );
}

/// `unknown tool "…"` and `method not found: "…"` quoted the client's whole name: a name of
/// 3 MB made a reply of 3 MB. The name is quoted to at most 256 bytes, as every other echo of
/// client text.
#[test]
fn an_unknown_tool_or_method_named_in_megabytes_is_quoted_to_at_most_256_bytes() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let huge = "a".repeat(3_000_000);
    let quoted = format!("\"{}…\"", "a".repeat(256));
    let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name": huge, "arguments": {}}});
    let a = mcp_text(&d, &token, "2025-11-25", body.to_string().as_bytes());
    assert!(a.body.len() < 2000, "{} bytes", a.body.len());
    let v = sse(&a);
    assert_eq!(v["error"]["code"], json!(-32602));
    assert_eq!(
        v["error"]["message"],
        json!(format!("unknown tool {quoted}"))
    );
    assert_eq!(
        v["error"]["data"]["why"],
        json!(format!(
            "no tool of this session is named {quoted}; tools/list shows this session's tools"
        ))
    );
    let body = json!({"jsonrpc":"2.0","id":2,"method": huge});
    let a = mcp_text(&d, &token, "2025-11-25", body.to_string().as_bytes());
    assert!(a.body.len() < 2000, "{} bytes", a.body.len());
    assert_eq!(
        sse(&a),
        json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32601,
            "message": format!("method not found: {quoted}")}})
    );
}

/// MCP 2025-03-26: input made only of responses and notifications that the server cannot
/// accept MUST get an HTTP error status. Alone, such a response was 400; in a batch it was
/// 200 with an SSE array.
#[test]
fn a_batch_of_only_responses_and_notifications_that_is_refused_is_answered_400() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let refused = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600,
        "message": "invalid request: a response needs the \"id\" of the request it answers"}});
    for body in [
        json!([{"jsonrpc":"2.0","result":{}}]),
        json!([{"jsonrpc":"2.0","result":{}},{"jsonrpc":"2.0","method":"n"}]),
        json!([{"jsonrpc":"2.0","id":5,"result":{}},{"jsonrpc":"2.0","result":{}}]),
    ] {
        let a = mcp_text(&d, &token, "2025-03-26", body.to_string().as_bytes());
        assert_eq!(
            (a.status, a.content_type.as_str()),
            (400, "application/json"),
            "{body}: {}",
            a.text()
        );
        assert_eq!(a.json(), json!([refused]), "{body}");
    }
    // Acceptable ones are still 202; with a request among them, 200 SSE as ever.
    let ok = json!([{"jsonrpc":"2.0","id":5,"result":{}},{"jsonrpc":"2.0","method":"n"}]);
    let a = mcp_text(&d, &token, "2025-03-26", ok.to_string().as_bytes());
    assert_eq!((a.status, a.text()), (202, String::new()));
    let mixed = json!([{"jsonrpc":"2.0","result":{}},{"jsonrpc":"2.0","id":1,"method":"ping"}]);
    let a = mcp_text(&d, &token, "2025-03-26", mixed.to_string().as_bytes());
    assert_eq!(
        sse(&a),
        json!([refused, {"jsonrpc": "2.0", "id": 1, "result": {}}])
    );
}

/// Under 2026-07-28 every error has its HTTP status; the `-32001` of a call whose credential
/// was revoked while it waited rode on 200, the status of a result. It is 401, as the
/// transport answers a revoked credential, with its challenge.
#[test]
fn a_call_whose_credential_is_revoked_while_it_waits_is_answered_401_under_2026_07_28() {
    const REVOKED: &str = "session credential was revoked while this call waited: nothing ran and nothing was journaled (its task id is unused); send it again with a valid credential";
    let conf = tempfile::tempdir().unwrap();
    let path = conf.path().join("world.toml");
    std::fs::write(&path, "[limits]\nhandler_deadline_ms = 10000\n").unwrap();
    let d = Daemon::start(WS_STALL, &["--config", path_str(&path)]);
    let holder = d.session("ep1", &["Stall.Wait=any:5"]);
    let queued = d.session("ep1", &["Workspace.Read=worktree:5"]);
    std::fs::write(d.root().join("ep1/hello.txt"), "hi\n").unwrap();
    let slow = {
        let (url, token) = (d.url("/mcp/"), holder.clone());
        std::thread::spawn(move || {
            let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"stall-wait","arguments":{"ms":"2500"}}});
            request(
                "POST",
                &url,
                Some(&token),
                &headers(),
                Some(body.to_string().as_bytes()),
            )
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let waiting = {
        let (url, token) = (d.url("/mcp/"), queued.clone());
        std::thread::spawn(move || {
            let body = json!({"jsonrpc":"2.0","id":9,"method":"tools/call","params":{
                "name":"ailang-read","arguments":{"path":"hello.txt"},"_meta": envelope()}});
            request(
                "POST",
                &url,
                Some(&token),
                &modern_headers("tools/call", Some("ailang-read")),
                Some(body.to_string().as_bytes()),
            )
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    d.revoke_by_cli(&queued);
    let a = waiting.join().unwrap();
    assert_eq!(
        (a.status, a.content_type.as_str()),
        (401, "application/json"),
        "{}",
        a.text()
    );
    assert_eq!(
        a.json(),
        json!({"jsonrpc": "2.0", "id": 9, "error": {"code": -32001, "message": REVOKED}})
    );
    assert_eq!(
        a.field("www-authenticate"),
        Some(
            r#"Bearer realm="worldd", error="invalid_token", error_description="session credential was revoked while this call waited""#
        )
    );
    assert_eq!(slow.join().unwrap().status, 200);
}

/// A `null` idempotency key ran the call unkeyed: a client whose key variable was unset
/// believed it sent an at-most-once call, and a resend ran and spent again. It is refused as
/// every other key that is no string is, and nothing runs.
#[test]
fn a_null_idempotency_key_is_refused_like_every_other_key_that_is_no_string() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let refused = json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602,
        "message": "invalid params: _meta \"world/idempotencyKey\" must be 1-128 characters of A-Z a-z 0-9 . _ -"}});
    for key in [json!(null), json!(true), json!({})] {
        let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ailang-write",
            "arguments":{"path":"once.txt","content":"x"},"_meta":{"world/idempotencyKey": key}}});
        let a = mcp_text(&d, &token, "2025-11-25", body.to_string().as_bytes());
        assert_eq!(sse(&a), refused, "{key}");
    }
    assert!(
        !d.root().join("ep1/once.txt").exists(),
        "a refused call wrote"
    );
    // Nothing was journaled: the first call that runs is the log's first entry.
    let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ailang-write",
        "arguments":{"path":"once.txt","content":"x"},"_meta":{"world/idempotencyKey": "k1"}}});
    let v = sse(&mcp_text(
        &d,
        &token,
        "2025-11-25",
        body.to_string().as_bytes(),
    ));
    assert_eq!(v["result"]["_meta"]["world/entryIndex"], json!(1), "{v}");
}

/// `tools/list` listed tools this daemon cannot run (no loaded plugin handles their effect)
/// exactly like the others; a model picked one and got `host callback failed`, which reads as
/// "the effect may have run". Each such tool stays listed, and says so after its description
/// and in `_meta`.
#[test]
fn tools_list_marks_each_tool_this_daemon_cannot_run_and_only_those() {
    let d = Daemon::start(WS_AILANG, &[]);
    let token = d.session(
        "ep1",
        &["Workspace.Read=worktree:5", "Ailang.Check=worktree:5"],
    );
    let why = "transition declares an effect this daemon has no handler for (Ailang.Check)";
    let registered = |name: &str| -> String {
        let doc: Value = serde_json::from_slice(
            &std::fs::read(repo_root().join(format!("transitions/se-tools/{name}.json"))).unwrap(),
        )
        .unwrap();
        doc["description"].as_str().unwrap().to_owned()
    };
    for version in ["2025-11-25", "2026-07-28"] {
        let v = if version == "2026-07-28" {
            let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta": envelope()}});
            request(
                "POST",
                &d.url("/mcp/"),
                Some(&token),
                &modern_headers("tools/list", None),
                Some(body.to_string().as_bytes()),
            )
            .json()
        } else {
            sse(&mcp(&d, &token, "tools/list", json!({})))
        };
        let tools = v["result"]["tools"].as_array().unwrap();
        let tool = |name: &str| tools.iter().find(|t| t["name"] == name).unwrap().clone();
        let check = tool("ailang-check");
        assert_eq!(
            check["description"],
            json!(format!(
                "{}\n\nCannot run here: {why}. A call is refused before anything runs (host callback failed; nothing ran, nothing was spent): use another tool.",
                registered("ailang-check")
            )),
            "{version}"
        );
        assert_eq!(check["_meta"], json!({"world/cannotRun": why}), "{version}");
        let read = tool("ailang-read");
        assert_eq!(
            read["description"],
            json!(registered("ailang-read")),
            "{version}"
        );
        assert!(read.get("_meta").is_none(), "{version}: {read}");
    }
}

/// Unknown-tool hints offered a name only within two edits: `read`, `write` and a host's
/// prefixed name (`mcp__worldd__ailang-read`, as hosts show tools to a model) got none.
#[test]
fn an_unknown_tool_hint_sees_through_host_prefixes_and_parts_of_names() {
    let d = Daemon::start(WS, &[]);
    let token = d.session(
        "ep1",
        &["Workspace.Read=worktree:5", "Workspace.Write=worktree:5"],
    );
    for (given, meant) in [
        ("mcp__worldd__ailang-read", "ailang-read"),
        ("worldd__ailang-write", "ailang-write"),
        ("write", "ailang-write"),
        ("ailang-readfile", "ailang-read"),
    ] {
        let v = tools_call(&d, &token, given, json!({}));
        assert_eq!(
            v["error"],
            json!({"code": -32602, "message": format!("unknown tool \"{given}\""),
                "data": {"why": format!("no tool of this session is named \"{given}\"; did you mean {meant}? (tools/list shows this session's tools)")}}),
            "{given}"
        );
    }
    // Never a tool the session does not see: this one holds no Ailang grant.
    let v = tools_call(&d, &token, "check", json!({}));
    assert_eq!(
        v["error"]["data"]["why"],
        json!("no tool of this session is named \"check\"; tools/list shows this session's tools")
    );
}

/// Every 401 said only `WWW-Authenticate: Bearer`, whatever the credential's fault: a client
/// could not tell "authenticate again" from "not configured" without the body (which some
/// SDKs hide). RFC 6750 §3.1: `invalid_request` for a malformed header, `invalid_token` for a
/// credential that names no live session, a bare challenge when none was sent.
#[test]
fn a_401_names_the_credentials_fault_in_its_bearer_challenge() {
    let d = Daemon::start(WS, &[]);
    let post = |auth: Option<&str>| {
        let mut h = headers();
        if let Some(a) = auth {
            h.push(("Authorization", a));
        }
        request(
            "POST",
            &d.url("/mcp/"),
            None,
            &h,
            Some(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
        )
    };
    let revoked = d.session("ep1", &["Workspace.Read=worktree:5"]);
    d.revoke_by_cli(&revoked);
    let revoked = format!("Bearer {revoked}");
    let unknown = format!("Bearer {}", "ab".repeat(32));
    for (auth, challenge, text) in [
        (
            None,
            r#"Bearer realm="worldd""#,
            "session credential is absent: send Authorization: Bearer <session-credential>",
        ),
        (
            Some("Bearer nope"),
            r#"Bearer realm="worldd", error="invalid_request", error_description="malformed Authorization header: expected Bearer <64-hex-credential>""#,
            "malformed Authorization header: expected Bearer <64-hex-credential>",
        ),
        (
            Some(unknown.as_str()),
            r#"Bearer realm="worldd", error="invalid_token", error_description="unknown session credential""#,
            "unknown session credential",
        ),
        (
            Some(revoked.as_str()),
            r#"Bearer realm="worldd", error="invalid_token", error_description="unknown session credential""#,
            "unknown session credential",
        ),
    ] {
        let a = post(auth);
        assert_eq!((a.status, a.text().as_str()), (401, text), "{auth:?}");
        assert_eq!(a.field("www-authenticate"), Some(challenge), "{auth:?}");
    }
}

/// A request without a credential got `WWW-Authenticate: Bearer`, a bare scheme RFC 6750 §3
/// forbids ("MUST be followed by one or more auth-param values"), and a page could read no
/// challenge at all: CORS did not expose the header. Every route of a session answers
/// `Bearer realm="worldd"`, and a page from an accepted origin may read it.
#[test]
fn a_401_without_a_credential_names_the_realm_and_a_browser_page_may_read_its_challenge() {
    let d = Daemon::start(WS, &[]);
    let unknown = "ab".repeat(32);
    for (method, path, body) in [
        (
            "POST",
            "/mcp/",
            Some(&br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#[..]),
        ),
        ("GET", "/v1/budget", None),
        ("GET", "/v1/log/stream", None),
        ("GET", "/.well-known/agent-card.json", None),
    ] {
        for (token, challenge) in [
            (None, r#"Bearer realm="worldd""#.to_owned()),
            (
                Some(unknown.as_str()),
                r#"Bearer realm="worldd", error="invalid_token", error_description="unknown session credential""#
                    .to_owned(),
            ),
        ] {
            let mut h = headers();
            h.push(("Origin", "http://localhost:6274"));
            let a = request(method, &d.url(path), token, &h, body);
            assert_eq!(a.status, 401, "{path}: {}", a.text());
            assert_eq!(
                a.field("www-authenticate"),
                Some(challenge.as_str()),
                "{path}"
            );
            assert_eq!(
                a.field("access-control-expose-headers"),
                Some("retry-after, allow, www-authenticate"),
                "{path}"
            );
            assert_eq!(
                a.field("access-control-allow-origin"),
                Some("http://localhost:6274"),
                "{path}"
            );
        }
    }
}

/// "Quoted to at most 256 bytes" counted the name's bytes before JSON escaping: 256 control
/// characters were quoted as 1.5 KB of `\u0001`. The bound holds for what is written between
/// the quotes, escapes counted, cut at a whole escape.
#[test]
fn an_unknown_tool_or_method_quoted_in_a_message_is_at_most_256_bytes_as_sent() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    // 42 escapes of six bytes are 252; a 43rd would pass 256. A quote escapes in two bytes.
    for (name, quoted) in [
        (
            "\u{1}".repeat(1000),
            format!("\"{}…\"", "\\u0001".repeat(42)),
        ),
        ("\"".repeat(1000), format!("\"{}…\"", "\\\"".repeat(128))),
        (
            format!("{}\u{1}", "a".repeat(250)),
            format!("\"{}\\u0001\"", "a".repeat(250)),
        ),
    ] {
        let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name": name, "arguments": {}}});
        let v = sse(&mcp_text(
            &d,
            &token,
            "2025-11-25",
            body.to_string().as_bytes(),
        ));
        assert_eq!(
            v["error"]["message"],
            json!(format!("unknown tool {quoted}")),
            "{quoted}"
        );
        assert_eq!(
            v["error"]["data"]["why"],
            json!(format!(
                "no tool of this session is named {quoted}; tools/list shows this session's tools"
            ))
        );
        let body = json!({"jsonrpc":"2.0","id":2,"method": name});
        let v = sse(&mcp_text(
            &d,
            &token,
            "2025-11-25",
            body.to_string().as_bytes(),
        ));
        assert_eq!(
            v["error"]["message"],
            json!(format!("method not found: {quoted}"))
        );
    }
}

/// A part of a name that several tools hold was answered with one of them, the longest then
/// the first in sort order (`search` → `builtins-search`, `ailang` → `ailang-check`), which a
/// model reads as the tool it meant. Every tool that fits is named, in sort order.
#[test]
fn a_name_part_that_several_tools_hold_names_them_all() {
    let d = Daemon::start(WS, &[]);
    let token = d.session(
        "ep1",
        &["Workspace.Read=worktree:5", "Workspace.Write=worktree:5"],
    );
    let names: Vec<String> = sse(&mcp(&d, &token, "tools/list", json!({})))["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    let holding = |part: &str| -> Vec<String> {
        let mut v: Vec<String> = names.iter().filter(|n| n.contains(part)).cloned().collect();
        v.sort();
        v
    };
    // The session's tools that hold "ailang" are several; "write" ends one name only.
    let ailang = holding("ailang");
    assert!(ailang.len() > 1, "{names:?}");
    for (given, hint) in [
        (
            "ailang",
            format!("did you mean one of {}?", ailang.join(", ")),
        ),
        ("ail", format!("did you mean one of {}?", ailang.join(", "))),
        ("write", "did you mean ailang-write?".to_owned()),
    ] {
        let v = tools_call(&d, &token, given, json!({}));
        assert_eq!(
            v["error"]["data"]["why"],
            json!(format!(
                "no tool of this session is named \"{given}\"; {hint} (tools/list shows this session's tools)"
            )),
            "{given}"
        );
    }
}

/// A lone notification or response, or a 2025-03-26 batch of only those, holding `1e400` or
/// an integer past 64 bits was answered `200` with an SSE error, where MCP's transport wants
/// `202` for input it accepts and an HTTP error for input it cannot: it is answered as the
/// same message without the number is, and nothing runs.
#[test]
fn a_notification_or_response_holding_a_number_this_server_cannot_take_is_answered_as_without_it() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let no_id = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600,
        "message": "invalid request: a response needs the \"id\" of the request it answers"}});
    for version in ["2025-11-25", "2025-06-18", "2025-03-26"] {
        for body in [
            r#"{"jsonrpc":"2.0","method":"notifications/x","params":{"n":1e400}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/x","params":{"n":18446744073709551616}}"#,
            r#"{"jsonrpc":"2.0","id":4,"result":{"x":1e400}}"#,
            r#"{"jsonrpc":"2.0","id":4,"result":{"x":-99999999999999999999}}"#,
        ] {
            let a = mcp_text(&d, &token, version, body.as_bytes());
            assert_eq!(
                (a.status, a.text()),
                (202, String::new()),
                "{version} {body}"
            );
        }
        let a = mcp_text(
            &d,
            &token,
            version,
            br#"{"jsonrpc":"2.0","result":{"x":1e400}}"#,
        );
        assert_eq!(
            (a.status, a.content_type.as_str()),
            (400, "application/json"),
            "{version}: {}",
            a.text()
        );
        assert_eq!(a.json(), no_id, "{version}");
    }
    let a = mcp_text(
        &d,
        &token,
        "2025-03-26",
        br#"[{"jsonrpc":"2.0","method":"notifications/x","params":{"n":1e400}}]"#,
    );
    assert_eq!((a.status, a.text()), (202, String::new()));
    let a = mcp_text(
        &d,
        &token,
        "2025-03-26",
        br#"[{"jsonrpc":"2.0","method":"n","params":{"n":1e400}},{"jsonrpc":"2.0","result":{"y":18446744073709551616}}]"#,
    );
    assert_eq!(
        (a.status, a.content_type.as_str()),
        (400, "application/json")
    );
    assert_eq!(a.json(), json!([no_id]));
    // A request among them is still refused whole, as before.
    let a = mcp_text(
        &d,
        &token,
        "2025-03-26",
        br#"[{"jsonrpc":"2.0","method":"n","params":{"n":1e400}},{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
    );
    assert_eq!(
        sse(&a),
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600,
            "message": "invalid request: number 1e400 is too large for a 64-bit float; nothing was run"}})
    );
}

/// With the session's worktree missing every tool was marked "Cannot run here: transition
/// declares an effect this daemon has no handler for: episode …'s worktree does not exist …
/// use another tool": the cause came third, and a model told to use another tool walked
/// through all of them. The paragraph names the worktree and says no other tool of the
/// session that works in it can run; the server's instructions, which said a host callback
/// error may mean the effect ran, make the exception of a tool marked so.
#[test]
fn a_missing_worktree_marks_tools_with_its_own_cause_and_no_use_another_tool() {
    let d = Daemon::start(WS, &[]);
    let token = d.session_without_worktree(
        "nowhere",
        &["Workspace.Read=worktree:5", "Workspace.Write=worktree:5"],
    );
    let cause = "episode nowhere's worktree does not exist: an operator creates it (the directory nowhere in the workspace root; worldd session new makes a worktree and a credential together, for an episode that has neither)";
    let v = sse(&mcp(&d, &token, "tools/list", json!({})));
    let tools = v["result"]["tools"].as_array().unwrap();
    assert!(tools.len() > 1, "{v}");
    for tool in tools {
        let description = tool["description"].as_str().unwrap();
        let paragraph = description.rsplit("\n\n").next().unwrap();
        assert_eq!(
            paragraph,
            format!("Cannot run here: {cause}. A call is refused before anything runs (host callback failed; nothing ran, nothing was spent); no tool of this session that works in its worktree can run until an operator has fixed that, so do not try another such tool."),
            "{}",
            tool["name"]
        );
        assert_eq!(tool["_meta"], json!({"world/cannotRun": cause}));
    }
    // GET /v1/handlers leads with the worktree, not with a handler missing (the call's own
    // refusal keeps the contract's R8 text).
    let h = request("GET", &d.url("/v1/handlers"), Some(&token), &[], None).json();
    assert_eq!(
        h["tools"][0]["reason"],
        json!(format!("no usable worktree for this episode: {cause}"))
    );
    let init = sse(&mcp(
        &d,
        &token,
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {},
               "clientInfo": {"name": "t", "version": "1"}}),
    ));
    let instructions = init["result"]["instructions"].as_str().unwrap();
    assert!(
        instructions.ends_with("The exception is a tool whose description ends with a \"Cannot run here\" paragraph (and whose _meta holds \"world/cannotRun\"): a call of it is refused before anything runs, so its host callback error means nothing ran and nothing was spent; do not pick such a tool."),
        "{instructions}"
    );
}
