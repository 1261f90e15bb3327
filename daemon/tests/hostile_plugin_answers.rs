//! What a hostile plugin answers, through the real daemon and the real library
//! (`tests/fixtures/misfit-plugin`, whose handler answers by the call's `mode`): a failure
//! message or a panic's message of 3 MB is logged cut to 4096 bytes on one line, not as a 3 MB
//! line per call; a panic in `preflight` is said to let the call proceed, as it does.

mod common;

use common::fixtures::{misfit_daemon, misfit_mode_tool};
use common::*;
use serde_json::json;

/// A daemon serving the misfit plugin with its tool taking a `mode`, and a session for it.
fn daemon() -> (Daemon, String) {
    let d = misfit_daemon(&json!({"transitions": [misfit_mode_tool("misfit-do")]}));
    let token = d.session("ep", &["Misfit.Do=any:10"]);
    (d, token)
}

/// The one log line holding `needle`, once it is written.
fn line_with(d: &Daemon, needle: &str) -> String {
    d.wait_for_log(needle);
    let log = d.log();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(needle)).collect();
    assert_eq!(lines.len(), 1, "{needle}: {} lines", lines.len());
    lines[0].to_owned()
}

/// Each was a single log line of 3,000,128 or 3,000,164 bytes, every call.
#[test]
fn a_plugins_3_mb_failure_or_panic_message_is_logged_cut_to_4096_bytes() {
    let (d, token) = daemon();
    for (task, mode) in [("t1", "fail-big"), ("t2", "panic-big")] {
        let v = a2a(&d, &token, task, "misfit-do", json!({"mode": mode}));
        let status =
            &v["result"]["artifacts"][0]["parts"][0]["data"]["world"]["effects"][0]["status"];
        assert_eq!(status, "failed", "{mode}: {v}");
    }
    // The daemon's log writes each event on one line, its line breaks escaped.
    let failed = line_with(&d, "effect failed: F\\nFORGED\\nFFF");
    assert!(
        failed.contains(&format!(
            "effect failed: F\\nFORGED\\n{}… (2995913 bytes more; the broker passes on at most 4096)",
            "F".repeat(4087)
        )),
        "{}",
        &failed[failed.len().saturating_sub(300)..]
    );
    assert!(failed.len() < 4600, "{}", failed.len());
    let panicked = line_with(&d, "effect failed: handler panicked: P\\nFORGED\\nPPP");
    assert!(
        panicked.contains(&format!(
            "effect failed: handler panicked: P\\nFORGED\\n{}… (2995931 bytes more; the broker passes on at most 4096)",
            "P".repeat(4096 - 27)
        )),
        "{}",
        &panicked[panicked.len().saturating_sub(300)..]
    );
    assert!(panicked.len() < 4600, "{}", panicked.len());
}

/// A panic in `preflight` was said to fail the call, which then ran and succeeded.
#[test]
fn a_panic_in_preflight_is_said_to_let_the_call_proceed() {
    let (d, token) = daemon();
    let v = a2a(
        &d,
        &token,
        "t1",
        "misfit-do",
        json!({"mode": "preflight-panic"}),
    );
    let data = &v["result"]["artifacts"][0]["parts"][0]["data"];
    assert_eq!(data["ok"], true, "{v}");
    let said = line_with(&d, "misfit: preflight panicked on purpose");
    assert!(
        said.ends_with(
            ": misfit: preflight panicked on purpose (the preflight counts as proceed; execute answers for the call) plugin=misfit"
        ),
        "{said}"
    );
}
