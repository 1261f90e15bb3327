//! `calls get KEY` of a key sent over A2A, asked on MCP's surface (the default), said "it is
//! safe to send" though the call had run: sent again over MCP it would run twice. A bare key is
//! looked for on both surfaces before anything is called safe to send.

mod common;

use common::*;
use serde_json::json;

#[test]
fn a_key_sent_over_a2a_is_not_called_safe_to_send_on_mcp() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let token = d.session("demo", &["Workspace.Read=worktree:5"]);
    std::fs::write(d.root().join("demo/hello.txt"), "hi").unwrap();
    let answer = a2a(
        &d,
        &token,
        "read-1",
        "ailang-read",
        json!({"path": "hello.txt"}),
    );
    assert_eq!(answer["result"]["status"]["state"], "completed", "{answer}");
    let session = d.session_file("demo", &token);
    let calls_get = |args: &[&str]| {
        let mut all = vec!["calls", "get"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--addr", &d.addr, "--session", path_str(&session)]);
        worldd(&all, None)
    };
    let (code, out, err) = calls_get(&["read-1"]);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert_eq!(
        err,
        "worldd: calls get: not found: mcp:demo:read-1 (nothing was journaled under it over mcp), but a2a:demo:read-1 was sent over a2a: do not send it over mcp, which would run it again; `worldd calls get read-1 --surface a2a` says how it ended\n"
    );
    // Where it says to look, the call is.
    let (code, out, err) = calls_get(&["read-1", "--surface", "a2a"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("a2a:demo:read-1  ailang-read  committed\n"),
        "{out}"
    );
    // Sent over neither: safe to send, said once both were asked.
    let (code, out, err) = calls_get(&["never-sent"]);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert_eq!(
        err,
        "worldd: calls get: not found: mcp:demo:never-sent (nothing was journaled under it in your episode, over mcp or over a2a; it is safe to send)\n"
    );
}
