//! A hostile agent's calls that run nothing and store nothing (a tool under rule R8, a reused
//! idempotency key with other arguments, a replay of a committed call, over MCP and A2A) cost
//! it nothing, and each wrote one or two log lines: at 8,000 calls a second, 220 GiB of log a
//! day. Now each kind is logged at most once per episode every 10 s, with how many went
//! unlogged since (the R8 host-failure line too); the metrics count every call.

mod common;

use std::time::Instant;

use common::*;
use serde_json::{json, Value};

const WS: &[&str] = &["worldd_workspace"];
const N: usize = 40;

/// Lines of `log` that name `episode`.
fn lines_of(log: &str, episode: &str) -> Vec<String> {
    let needle = format!("episode={episode}");
    log.lines()
        .filter(|l| l.contains(&needle))
        .map(str::to_owned)
        .collect()
}

/// The `worldd_calls_total` count of `tool` and `outcome`.
fn calls_total(d: &Daemon, tool: &str, outcome: &str) -> u64 {
    let metrics = get(&d.url("/v1/metrics"), None).text();
    let row = format!("worldd_calls_total{{tool=\"{tool}\",outcome=\"{outcome}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(row.as_str()))
        .map_or(0, |n| n.trim().parse().unwrap())
}

fn keyed(path: &str, key: &str) -> Value {
    json!({"name": "ailang-read", "arguments": {"path": path},
           "_meta": {"world/idempotencyKey": key}})
}

/// At most one line per kind for every 10 s the calls took (and the one that began them).
fn bound(kinds: usize, began: Instant) -> usize {
    kinds * (1 + began.elapsed().as_secs() as usize / 10)
}

#[test]
fn calls_that_store_nothing_write_a_bounded_number_of_log_lines_and_are_all_counted() {
    let d = Daemon::start(WS, &[]);

    // MCP, rule R8: the episode's worktree does not exist.
    let r8 = d.session_without_worktree("nowhere", &["Workspace.Read=worktree:5"]);
    let began = Instant::now();
    for _ in 0..N {
        let v = tools_call(&d, &r8, "ailang-read", json!({"path": "a.txt"}));
        assert_eq!(v["error"]["message"], "host callback failed", "{v}");
    }
    let log = d.log_so_far();
    let lines = lines_of(&log, "nowhere");
    // Its `call` line and its host-failure line, which names the worktree looked for.
    assert!(
        lines.len() >= 2 && lines.len() <= bound(2, began),
        "{N} R8 calls wrote {} lines:\n{}",
        lines.len(),
        lines.join("\n")
    );
    assert!(
        lines[0].contains("outcome=no_handler"),
        "the first is logged: {}",
        lines[0]
    );
    assert!(
        lines.iter().any(|l| l.contains(
            "mcp tools/call: host callback failed: episode nowhere's worktree does not exist"
        )),
        "{}",
        lines.join("\n")
    );
    assert_eq!(calls_total(&d, "ailang-read", "no_handler"), N as u64);

    // MCP, one committed keyed call, then replays and a reused key with other arguments.
    let token = d.session("keys", &["Workspace.Read=worktree:5"]);
    std::fs::write(d.root().join("keys/a.txt"), "a\n").unwrap();
    std::fs::write(d.root().join("keys/b.txt"), "b\n").unwrap();
    let first = mcp(&d, &token, "tools/call", keyed("a.txt", "k1")).rpc_json();
    assert_eq!(first["result"]["isError"], false, "{first}");
    let began = Instant::now();
    for _ in 0..N {
        let v = mcp(&d, &token, "tools/call", keyed("a.txt", "k1")).rpc_json();
        assert_eq!(
            v["result"]["structuredContent"],
            first["result"]["structuredContent"]
        );
        let v = mcp(&d, &token, "tools/call", keyed("b.txt", "k1")).rpc_json();
        assert_eq!(
            v["error"]["message"],
            "idempotency key \"k1\" was already used with other arguments in this episode",
            "{v}"
        );
    }
    let log = d.log_so_far();
    let lines = lines_of(&log, "keys");
    // The committed call's line, then at most one of each kind per interval: the replay's
    // `call` line, the conflict's `call` line and its keyed WARN line.
    assert!(
        lines.len() <= 1 + bound(3, began),
        "{} free keyed calls wrote {} lines:\n{}",
        2 * N,
        lines.len(),
        lines.join("\n")
    );
    assert_eq!(
        lines.iter().filter(|l| l.contains("outcome=ok")).count(),
        1,
        "the committed call is logged: {}",
        lines.join("\n")
    );
    assert!(lines.iter().any(|l| l.contains("outcome=replayed")));
    assert!(lines
        .iter()
        .any(|l| l.contains("mcp tools/call with key k1")));
    assert_eq!(calls_total(&d, "ailang-read", "replayed"), N as u64);
    assert_eq!(calls_total(&d, "ailang-read", "error"), N as u64);

    // A2A: R8, then a committed task, its replays and its id sent with other arguments.
    let a2a_r8 = d.session_without_worktree("nowhere-a2a", &["Workspace.Read=worktree:5"]);
    let a2a_keys = d.session("keys-a2a", &["Workspace.Read=worktree:5"]);
    std::fs::write(d.root().join("keys-a2a/a.txt"), "a\n").unwrap();
    std::fs::write(d.root().join("keys-a2a/b.txt"), "b\n").unwrap();
    let sent = a2a(&d, &a2a_keys, "t1", "ailang-read", json!({"path": "a.txt"}));
    assert_eq!(sent["result"]["status"]["state"], "completed", "{sent}");
    let began = Instant::now();
    for i in 0..N {
        let v = a2a(
            &d,
            &a2a_r8,
            &format!("r8-{i}"),
            "ailang-read",
            json!({"path": "a.txt"}),
        );
        assert_eq!(v["error"]["code"], -32603, "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("transition declares an effect this daemon has no handler for"),
            "{v}"
        );
        let v = a2a(&d, &a2a_keys, "t1", "ailang-read", json!({"path": "a.txt"}));
        assert_eq!(v["result"]["metadata"]["replayed"], true, "{v}");
        let v = a2a(&d, &a2a_keys, "t1", "ailang-read", json!({"path": "b.txt"}));
        assert_eq!(v["error"]["code"], -32602, "{v}");
    }
    let log = d.log_so_far();
    let r8_lines = lines_of(&log, "nowhere-a2a");
    assert!(
        !r8_lines.is_empty() && r8_lines.len() <= bound(1, began),
        "{N} A2A R8 calls wrote {} lines:\n{}",
        r8_lines.len(),
        r8_lines.join("\n")
    );
    let key_lines = lines_of(&log, "keys-a2a");
    assert!(
        key_lines.len() <= 1 + bound(2, began),
        "{} free A2A calls wrote {} lines:\n{}",
        2 * N,
        key_lines.len(),
        key_lines.join("\n")
    );
    assert_eq!(calls_total(&d, "ailang-read", "no_handler"), 2 * N as u64);
    assert_eq!(calls_total(&d, "ailang-read", "replayed"), 2 * N as u64);
    assert_eq!(calls_total(&d, "ailang-read", "error"), 2 * N as u64);
    // A call that ran is still logged every time.
    assert_eq!(
        calls_total(&d, "ailang-read", "ok"),
        2,
        "one committed call on each surface"
    );
}
