//! `worldd call` with a body over the daemon's limit, through the real binary and a real
//! daemon: the daemon answers before it has read the body and closes the connection.

mod common;

use std::path::Path;

use common::why::session_file;
use common::*;

const WS: &[&str] = &["worldd_workspace"];

/// `worldd ARGS` against the daemon `d` with `session`, no `$WORLD_*` inherited.
fn client(
    d: &Daemon,
    session: &Path,
    args: &[&str],
    stdin: Option<&[u8]>,
) -> (i32, String, String) {
    let addr = d.url("");
    let mut all = args.to_vec();
    all.extend(["--addr", &addr, "--session", path_str(session)]);
    worldd(&all, stdin)
}

/// The head the daemon serves, as text.
fn head(d: &Daemon, token: &str) -> String {
    get(&d.url("/v1/head"), Some(token)).text()
}

/// A body over the daemon's 4 MiB limit is answered 413 at once and the connection closed, so
/// `worldd call` met a broken pipe while still sending and said "the call may still run and
/// commit", though nothing can have run. It now asks what the daemon answers to the request's
/// head, and says the body was too large and nothing ran; the log is unchanged.
#[test]
fn call_with_a_body_over_the_daemons_limit_says_it_was_too_large_and_nothing_ran() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let file = session_file(d.dir.path(), "ep1.session", &token);
    let big = d.dir.path().join("big.json");
    let content = "x".repeat(6_000_000);
    std::fs::write(
        &big,
        serde_json::to_vec(&serde_json::json!({"path": "big.txt", "content": content})).unwrap(),
    )
    .unwrap();
    let before = head(&d, &token);
    let at = format!("@{}", path_str(&big));
    for _ in 0..3 {
        let (code, out, err) = client(&d, &file, &["call", "ailang-write", "--json", &at], None);
        assert_eq!(
            (code, out.as_str(), err.as_str()),
            (
                1,
                "",
                "worldd: /mcp/ returned HTTP 413: request body exceeds the 4 MiB limit (4194304 bytes); the daemon answered before it read the whole request, so nothing ran\n"
            )
        );
    }
    assert_eq!(head(&d, &token), before);
    assert!(!d.root().join("ep1/big.txt").exists());
}
