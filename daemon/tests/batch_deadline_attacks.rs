//! One MCP batch's shared deadline, through the real `worldd` binary, the real ailang (with
//! the stand-in `ailang`) and git plugins, and real HTTP. Each test is named for the attack it
//! stops.
//!
//! Needs the plugin libraries in the target directory (`cargo build -p worldd-handler-ailang
//! -p worldd-handler-git -p worldd-handler-workspace`).

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

const PLUGINS: &[&str] = &["worldd_workspace", "worldd_ailang", "worldd_git"];
const AUTHOR: &str = "World Test <world@example.invalid>";

fn keyed_call(id: u64, tool: &str, args: Value, key: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": tool, "arguments": args, "_meta": {"world/idempotencyKey": key}}})
}

/// Attack: a batch under `2025-03-26` whose first item hangs until the plugin's time limit
/// (most of the POST's shared deadline), followed by `git-commit` items each with its own
/// idempotency key. The late items were admitted with a few hundred milliseconds left: each
/// journaled its intent and spent a budget unit, then the git plugin failed at once
/// ("0 ms: the daemon's deadline for the call less 750 ms; nothing was committed"), so units
/// were spent on commits that never ran. An item left less than the 1 s a handler is started
/// with is now refused before its intent: the POST is answered with the one timed-out
/// envelope, nothing of the late items is journaled or spent, their keys are safe to send, and
/// sent again in a POST of their own they run.
#[test]
fn late_batch_items_left_under_a_second_of_the_posts_deadline_spend_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("world.toml");
    std::fs::write(&config, "[limits]\ncall_deadline_ms = 3000\nhandler_deadline_ms = 2900\n[server]\nbody_timeout_ms = 2000\n").unwrap();
    let standin = fixtures::ailang_standin();
    let d = Daemon::start(
        PLUGINS,
        &[
            "--config",
            path_str(&config),
            "--plugin-config",
            &format!("ailang.bin={}", path_str(&standin)),
            "--plugin-config",
            &format!("git.author={AUTHOR}"),
        ],
    );
    let token = d.session("ep1", &["Ailang.Run=worktree:50", "Git.Commit=worktree:20"]);
    let wt = d.root().join("ep1");
    git(&wt, &["init", "-q"]);
    std::fs::write(wt.join("README.md"), "# episode\n").unwrap();
    git(&wt, &["add", "-A"]);
    git(&wt, &["commit", "-q", "-m", "initial"]);
    std::fs::write(
        wt.join("hang.ail"),
        format!("-- standin: hang\n{}", fixtures::AILANG_HELLO),
    )
    .unwrap();
    std::fs::write(wt.join("notes.txt"), "to commit\n").unwrap();
    let head = git(&wt, &["rev-parse", "HEAD"]);

    let keys = ["late-1", "late-2", "late-3"];
    let mut batch = vec![keyed_call(
        1,
        "ailang-run",
        json!({"path": "hang.ail"}),
        "hang",
    )];
    for (i, key) in keys.iter().enumerate() {
        batch.push(keyed_call(
            2 + i as u64,
            "git-commit",
            json!({"message": format!("commit {key}")}),
            key,
        ));
    }
    let started = Instant::now();
    let a = mcp_text(
        &d,
        &token,
        "2025-03-26",
        &serde_json::to_vec(&batch).unwrap(),
    );
    let took = started.elapsed();
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(
        a.text(),
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"host callback timed out"}}"#,
        "after {took:?}"
    );
    assert!(
        took < Duration::from_secs(3),
        "answered after the deadline: {took:?}"
    );

    // The hung run ran (and spent its unit); no commit item was journaled or spent.
    assert_eq!(spent(&d, &token, "Ailang.Run"), 1);
    assert_eq!(spent(&d, &token, "Git.Commit"), 0);
    for key in keys {
        let a = get(&d.url(&format!("/v1/calls/mcp/{key}")), Some(&token));
        assert_eq!(a.status, 404, "{key}: {}", a.text());
        assert_eq!(a.json()["state"], "not-found", "{key}: {}", a.text());
    }
    assert_eq!(
        git(&wt, &["rev-parse", "HEAD"]),
        head,
        "nothing was committed"
    );
    // The first late item is refused before its intent (the batch starts no item after it),
    // and counted apart from the hung run: nothing of it ran, so it is not `timed_out`.
    let m = get(&d.url("/v1/metrics"), None).text();
    assert!(
        m.contains("worldd_calls_total{tool=\"git-commit\",outcome=\"too_late\"} 1\n"),
        "{m}"
    );
    assert!(
        !m.contains("worldd_calls_total{tool=\"git-commit\",outcome=\"timed_out\"}"),
        "{m}"
    );
    // Logged when the item is refused, before the batch's answer, and read by the harness's
    // thread after it may be.
    d.wait_for_log("under the 1000 ms a handler is started with; nothing was journaled or spent");

    // The keys are free: sent again on its own, the first commit runs and spends once.
    let v = mcp_text(
        &d,
        &token,
        "2025-03-26",
        &serde_json::to_vec(&batch[1]).unwrap(),
    )
    .sse_json();
    assert_eq!(v["result"]["structuredContent"]["ok"], true, "{v}");
    assert_eq!(spent(&d, &token, "Git.Commit"), 1);
    assert_ne!(git(&wt, &["rev-parse", "HEAD"]), head);
}
