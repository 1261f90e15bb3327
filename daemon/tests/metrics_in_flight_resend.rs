//! A keyed call resent while its first send still runs is refused before it is admitted; it
//! was answered and logged, but `worldd_calls_total` did not count it. It is counted as every
//! reused key is, `outcome="error"` (the metrics table's "reused task id"), once per resend.

mod common;

use common::*;
use serde_json::json;

fn metrics(d: &Daemon) -> String {
    get(&d.url("/v1/metrics"), None).text()
}

#[test]
fn a_resend_of_a_key_whose_call_is_still_running_is_counted() {
    let bin = format!("ailang.bin={}", path_str(&fixtures::ailang_standin()));
    let d = Daemon::start(
        &["worldd_workspace", "worldd_ailang"],
        &["--plugin-config", &bin, "--handler-deadline-ms", "4000"],
    );
    let token = d.session("ep1", &["Ailang.Run=worktree:5"]);
    let mut caller = fixtures::start_a_hanging_run(&d, "ep1", &token);
    let errors = "worldd_calls_total{tool=\"ailang-run\",outcome=\"error\"}";
    assert!(!metrics(&d).contains(errors), "{}", metrics(&d));
    let resend = json!({"name": "ailang-run", "arguments": {"path": "hang.ail"},
                        "_meta": {"world/idempotencyKey": "h1"}});
    for _ in 0..3 {
        let again = mcp(&d, &token, "tools/call", resend.clone()).sse_json();
        assert_eq!(again["error"]["data"]["reason"], "in-flight", "{again}");
    }
    let m = metrics(&d);
    assert!(m.contains(&format!("{errors} 3\n")), "{m}");
    caller.wait().unwrap();
    // The first send, once ended, is counted once as itself; the resends stay 3.
    let m = metrics(&d);
    assert!(m.contains(&format!("{errors} 3\n")), "{m}");
    let first: f64 = m
        .lines()
        .filter(|l| {
            l.starts_with("worldd_calls_total{tool=\"ailang-run\",") && !l.starts_with(errors)
        })
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum();
    assert_eq!(first, 1.0, "{m}");
}
