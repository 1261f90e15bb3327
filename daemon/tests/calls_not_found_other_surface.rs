//! A key names a call on each surface. Sent over A2A as task `k-a2a`, it was answered
//! `GET /v1/calls/mcp/k-a2a` → 404 `not-found` ("safe to send" in agents.md's table), and
//! `worldd calls get mcp:demo:k-a2a` said "it is safe to send": sent again over MCP it would
//! run twice. Only the CLI's bare-key form looked at the other surface. The 404 now says what
//! the other surface holds (`otherSurface`), on both reconcile routes, and the CLI's id form
//! says it too.

mod common;

use common::*;
use serde_json::json;

/// MCP `tools/call` under idempotency key `key`: the JSON-RPC reply.
fn mcp_keyed(
    d: &Daemon,
    token: &str,
    key: &str,
    tool: &str,
    args: serde_json::Value,
) -> serde_json::Value {
    let a = mcp(
        d,
        token,
        "tools/call",
        json!({"name": tool, "arguments": args, "_meta": {"world/idempotencyKey": key}}),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    a.rpc_json()
}

#[test]
fn a_key_sent_over_one_surface_is_not_called_safe_to_send_over_the_other() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let token = d.session("demo", &["Workspace.Read=worktree:5"]);
    let operator = d.operator_session("ops", &[]);
    std::fs::write(d.root().join("demo/hello.txt"), "hi").unwrap();
    let answer = a2a(
        &d,
        &token,
        "k-a2a",
        "ailang-read",
        json!({"path": "hello.txt"}),
    );
    assert_eq!(answer["result"]["status"]["state"], "completed", "{answer}");
    let reply = mcp_keyed(
        &d,
        &token,
        "k-mcp",
        "ailang-read",
        json!({"path": "hello.txt"}),
    );
    assert_eq!(reply["result"]["isError"], false, "{reply}");

    // Asked over the surface it was not sent on, by key and by invocation id alike.
    let mcp_side = json!({
        "state": "not-found", "surface": "mcp", "taskId": "k-a2a",
        "invocationId": "mcp:demo:k-a2a",
        "otherSurface": {"surface": "a2a", "invocationId": "a2a:demo:k-a2a", "state": "committed"},
        "error": {"class": "NotFound", "message": "no call with task id \"k-a2a\" on surface mcp in this session's episode, but a2a:demo:k-a2a was sent over a2a (committed): do not send it over mcp, which would run it again"},
    });
    for route in ["/v1/calls/mcp/k-a2a", "/v1/invocations/mcp:demo:k-a2a"] {
        let a = get(&d.url(route), Some(&token));
        assert_eq!((a.status, a.json()), (404, mcp_side.clone()), "{route}");
    }
    let a = get(&d.url("/v1/calls/a2a/k-mcp"), Some(&token));
    assert_eq!(a.status, 404);
    assert_eq!(
        a.json()["otherSurface"],
        json!({"surface": "mcp", "invocationId": "mcp:demo:k-mcp", "state": "committed"})
    );
    // An operator naming the episode's id is told the same, of that episode.
    let a = get(&d.url("/v1/invocations/mcp:demo:k-a2a"), Some(&operator));
    assert_eq!(a.status, 404, "{}", a.text());
    assert_eq!(a.json()["otherSurface"], mcp_side["otherSurface"]);
    assert_eq!(
        a.json()["error"]["message"],
        "no call with task id \"k-a2a\" on surface mcp in episode demo, but a2a:demo:k-a2a was sent over a2a (committed): do not send it over mcp, which would run it again"
    );
    // Sent over neither: the answer is what it always was, without `otherSurface`.
    let a = get(&d.url("/v1/calls/mcp/never-sent"), Some(&token));
    assert_eq!(
        (a.status, a.json()),
        (
            404,
            json!({"state": "not-found", "surface": "mcp", "taskId": "never-sent",
                   "invocationId": "mcp:demo:never-sent",
                   "error": {"class": "NotFound", "message": "no call with task id \"never-sent\" on surface mcp in this session's episode"}})
        )
    );
    // Another episode's id, asked by an agent, says nothing of either surface.
    let stranger = d.session("stranger", &["Workspace.Read=worktree:5"]);
    let a = get(&d.url("/v1/invocations/mcp:demo:k-a2a"), Some(&stranger));
    assert_eq!(a.status, 404);
    assert_eq!(a.json().get("otherSurface"), None, "{}", a.text());

    // The CLI's invocation-id form looks at the other surface too.
    let session = d.session_file("demo", &token);
    let ops = d.session_file("ops", &operator);
    let calls_get = |session: &std::path::Path, handle: &str| {
        worldd(
            &[
                "calls",
                "get",
                handle,
                "--addr",
                &d.addr,
                "--session",
                path_str(session),
            ],
            None,
        )
    };
    let (code, out, err) = calls_get(&session, "mcp:demo:k-a2a");
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert_eq!(
        err,
        "worldd: calls get: not found: mcp:demo:k-a2a (nothing was journaled under it over mcp), but a2a:demo:k-a2a was sent over a2a: do not send it over mcp, which would run it again; `worldd calls get a2a:demo:k-a2a` says how it ended\n"
    );
    // Where it says to look, the call is.
    let (code, out, err) = calls_get(&session, "a2a:demo:k-a2a");
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("a2a:demo:k-a2a  ailang-read  committed\n"),
        "{out}"
    );
    let (code, _, err) = calls_get(&session, "a2a:demo:k-mcp");
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "worldd: calls get: not found: a2a:demo:k-mcp (nothing was journaled under it over a2a), but mcp:demo:k-mcp was sent over mcp: do not send it over a2a, which would run it again; `worldd calls get mcp:demo:k-mcp` says how it ended\n"
    );
    let (code, _, err) = calls_get(&ops, "mcp:demo:k-a2a");
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "worldd: calls get: not found: mcp:demo:k-a2a (nothing was journaled under it over mcp), but a2a:demo:k-a2a was sent over a2a: do not send it over mcp, which would run it again; `worldd calls get a2a:demo:k-a2a` says how it ended\n"
    );
    // Sent over neither: safe to send, said of both surfaces.
    let (code, _, err) = calls_get(&session, "mcp:demo:never-sent");
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "worldd: calls get: not found: mcp:demo:never-sent (nothing was journaled under it in your episode, over mcp or over a2a; it is safe to send)\n"
    );
    let (code, _, err) = calls_get(&ops, "mcp:demo:never-sent");
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "worldd: calls get: not found: mcp:demo:never-sent (nothing was journaled under it in episode demo, and the daemon holds no such call: that episode may send it)\n"
    );
}
