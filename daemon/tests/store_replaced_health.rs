//! A daemon whose store's files were replaced or removed under it refuses every call until it
//! is restarted; what monitoring reads of it says so. Through the real binary.

mod common;

use common::*;
use serde_json::json;

const WS: &[&str] = &["worldd_workspace"];

/// The value of one metrics line (`name` includes any labels).
fn metric(d: &Daemon, name: &str) -> String {
    let text = get(&d.url("/v1/metrics"), None).text();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{name} missing from {text}"))
        .to_owned()
}

fn read(d: &Daemon, token: &str) -> serde_json::Value {
    mcp(
        d,
        token,
        "tools/call",
        json!({"name": "ailang-read", "arguments": {"path": "absent.txt"}}),
    )
    .json()
}

/// `rm db/lock.mdb` under a serving daemon: it logged the swap once and refused every call
/// from then on, yet `/v1/health` answered `"status":"ok"`, `worldd_store_refusing` stayed 0,
/// and each refusal was logged and counted as `the world store is full` / `store_full`, which
/// sends an operator to free disk space. Health says `store-replaced`, the gauges say 1, and
/// each refusal names what the daemon found.
#[test]
fn a_daemon_whose_store_was_replaced_says_so_in_health_metrics_and_each_refusal() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep", &["Workspace.Read=worktree:100"]);
    let health = get(&d.url("/v1/health"), None);
    assert_eq!(health.status, 200);
    assert_eq!(health.json()["status"], "ok");
    assert_eq!(metric(&d, "worldd_store_refusing"), "0");
    assert_eq!(metric(&d, "worldd_store_replaced"), "0");
    std::fs::remove_file(d.db().join("lock.mdb")).unwrap();
    d.wait_for_log("was replaced or removed while this daemon served it");
    // Only lock.mdb went: the data file is where it was, and the operator is not sent to
    // rescue a deleted one.
    assert!(
        d.log().contains("(lock.mdb is gone): it refuses new calls and writes nothing more, since what it wrote would go to files no path names; data.mdb is still the file it opened, but the store verbs (`worldd session mint`, `session revoke`, `doctor`, `backup`) refuse to open the store until it is restarted, since they would not share its write lock: stop it and start it again on the store at "),
        "{}",
        d.log()
    );
    assert!(!d.log().contains("copy it out"), "{}", d.log());
    let health = get(&d.url("/v1/health"), None);
    assert_eq!(health.status, 200);
    assert_eq!(
        health.json()["status"],
        "store-replaced",
        "{}",
        health.text()
    );
    assert_eq!(metric(&d, "worldd_store_refusing"), "1");
    assert_eq!(metric(&d, "worldd_store_replaced"), "1");
    assert_eq!(
        read(&d, &token),
        json!({"jsonrpc": "2.0", "id": 7, "error": {"code": -32603, "message": "host callback capacity exceeded"}})
    );
    d.wait_for_log("outcome=store_replaced");
    let line = d
        .log()
        .lines()
        .find(|l| l.contains("outcome=store_replaced"))
        .unwrap()
        .to_owned();
    assert!(
        line.contains("call: the store's files were replaced or removed while this daemon served them (the error logged when it was seen says how to keep what it wrote since); restart the daemon on the store now at its path"),
        "{line}"
    );
    assert!(!d.log().contains("the world store is full"), "{}", d.log());
    assert_eq!(
        metric(
            &d,
            "worldd_calls_total{tool=\"ailang-read\",outcome=\"store_replaced\"}"
        ),
        "1"
    );
}
