//! `/v1/metrics` counts what the broker decided and what handlers did, once: a replay (the
//! committed answer again, `world/replayed: true`) decides and runs nothing, so it adds to
//! `worldd_calls_total{outcome="replayed"}` and to nothing else. Each replay of a denied call
//! was counted as one more denial, so an agent resending its keys (as reconciling does) made
//! the denial count, and the workbench's tile, grow without end.

mod common;

use common::*;
use serde_json::json;

const WS: &[&str] = &["worldd_workspace"];

/// The value of one metrics line (`name` includes any labels), 0 when absent.
fn metric(d: &Daemon, name: &str) -> f64 {
    get(&d.url("/v1/metrics"), None)
        .text()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn a_replayed_denial_is_counted_as_a_replay_and_not_as_another_denial() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:0"]);
    let keyed = json!({"name": "ailang-write", "arguments": {"path": "a.txt", "content": "x"},
                       "_meta": {"world/idempotencyKey": "k1"}});
    let first = mcp(&d, &token, "tools/call", keyed.clone()).sse_json();
    assert_eq!(
        first["result"]["_meta"]["world/outcome"]["reason"], "denied:budget",
        "{first}"
    );
    for _ in 0..3 {
        let again = mcp(&d, &token, "tools/call", keyed.clone()).sse_json();
        assert_eq!(again["result"]["_meta"]["world/replayed"], true, "{again}");
    }
    assert_eq!(
        metric(&d, "worldd_denials_total{label=\"denied:budget\"}"),
        1.0
    );
    assert_eq!(
        metric(
            &d,
            "worldd_calls_total{tool=\"ailang-write\",outcome=\"replayed\"}"
        ),
        3.0
    );
}
