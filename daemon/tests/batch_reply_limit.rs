//! `[limits] reply_bytes` of an MCP batch through the real `worldd` binary and real HTTP: the
//! limit trips, and is counted, only when a request of the batch was held back.

mod common;

use common::*;
use serde_json::{json, Value};

/// `worldd_limit_trips_total{limit="reply_bytes"}` (0 when absent).
fn reply_bytes_trips(d: &Daemon) -> u64 {
    get(&d.url("/v1/metrics"), None)
        .text()
        .lines()
        .find_map(|l| l.strip_prefix("worldd_limit_trips_total{limit=\"reply_bytes\"} "))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// A batch whose replies reached the limit with its last request was counted as tripped
/// although every item ran (a one-item batch; a call and a notification): an operator alerting
/// on the metric saw trips where nothing was held back. Counted now once a batch, when a
/// request of it is answered `not run`.
#[test]
fn reply_bytes_is_counted_only_when_an_item_was_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("world.toml");
    std::fs::write(&config, "[limits]\nreply_bytes = 100\n").unwrap();
    let d = Daemon::start(&["worldd_workspace"], &["--config", path_str(&config)]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let batch = |items: Value| {
        let a = mcp_text(
            &d,
            &token,
            "2025-03-26",
            &serde_json::to_vec(&items).unwrap(),
        );
        assert_eq!(a.status, 200, "{}", a.text());
        a.sse_json()
    };
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let ping = |id: u64| json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
    // The list's reply alone passes 100 bytes: every item ran.
    let v = batch(json!([list]));
    assert!(v[0]["result"]["tools"].is_array(), "{v}");
    let v = batch(json!([list, note]));
    assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
    assert!(v[0]["result"]["tools"].is_array(), "{v}");
    assert_eq!(reply_bytes_trips(&d), 0);
    // Two requests held back: one trip for the batch.
    let v = batch(json!([list, ping(2), ping(3)]));
    let not_run = "invalid request: not run: the replies to this batch reached the 100-byte limit ([limits] reply_bytes); send it again in another POST";
    assert_eq!(
        v[1],
        json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32600, "message": not_run}})
    );
    assert_eq!(v[2]["id"], json!(3));
    assert_eq!(reply_bytes_trips(&d), 1);
}

/// `reply_bytes` defaulted to exactly one credential's quarter of the reply budget, so a batch
/// cut at it (its answer a little over) ran, spent its units, and was answered `503` whenever
/// its credential had any other answer unread. It is at most half that quarter: an unset one
/// follows a smaller budget (a larger one set is lowered at start and said:
/// `limit_pairs_at_start.rs`).
#[test]
fn reply_bytes_stays_within_half_a_credentials_reply_share() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("world.toml");
    // Unset under a 4 MiB reply budget: 512 KiB.
    std::fs::write(&config, "[server]\nreply_budget_bytes = \"4MiB\"\n").unwrap();
    let d = Daemon::start(&["worldd_workspace"], &["--config", path_str(&config)]);
    let token = d.session("ep1", &["Workspace.Read=worktree:10"]);
    std::fs::write(d.root().join("ep1/big.txt"), "x".repeat(150_000)).unwrap();
    let read = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "ailang-read", "arguments": {"path": "big.txt"}}})
    };
    let items = json!([read(1), read(2), read(3)]);
    let a = mcp_text(
        &d,
        &token,
        "2025-03-26",
        &serde_json::to_vec(&items).unwrap(),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    let v = a.sse_json();
    assert!(v[1]["result"].is_object(), "{}", v[1]);
    assert_eq!(
        v[2],
        json!({"jsonrpc": "2.0", "id": 3, "error": {"code": -32600, "message": "invalid request: not run: the replies to this batch reached the 524288-byte limit ([limits] reply_bytes); send it again in another POST"}})
    );
}
