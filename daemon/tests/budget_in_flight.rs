//! What the budget says of a call the daemon is still running: its intent has no outcome yet,
//! but it is no crash's leftover, through the real binary, a real daemon and the AILANG
//! stand-in's `hang` mode.

mod common;

use common::*;

/// `GET /v1/budget` (and `worldd budget`, and the operator's `?episode=`) listed a call still
/// running as an indeterminate intent, "it may have run; never retried", where `/v1/calls`
/// says in-flight: it is marked `"inFlight": true`, and said as in flight; once the call ends
/// it is gone from the list.
#[test]
fn the_budget_marks_a_call_the_daemon_is_still_running_in_flight_not_indeterminate() {
    let bin = format!("ailang.bin={}", path_str(&fixtures::ailang_standin()));
    let d = Daemon::start(
        &["worldd_workspace", "worldd_ailang"],
        &["--plugin-config", &bin, "--handler-deadline-ms", "4000"],
    );
    let token = d.session("ep1", &["Ailang.Run=worktree:5"]);
    let ops = d.operator_session("ops", &[]);
    let mut caller = fixtures::start_a_hanging_run(&d, "ep1", &token);
    let file = d.session_file("ep1", &token);
    let addr = d.url("");

    let own = get(&d.url("/v1/budget"), Some(&token));
    assert_eq!(own.status, 200, "{}", own.text());
    let pending = own.json()["indeterminate"].clone();
    let request = pending[0]["requestRef"].clone();
    assert!(request.is_string(), "{pending}");
    let expected = serde_json::json!([{
        "invocationId": "mcp:ep1:h1",
        "effect": "Ailang.Run",
        "scope": "worktree",
        "cost": 1,
        "requestRef": request,
        "inFlight": true,
    }]);
    assert_eq!(pending, expected);
    let other = get(&d.url("/v1/budget?episode=ep1"), Some(&ops));
    assert_eq!(other.status, 200, "{}", other.text());
    assert_eq!(other.json()["indeterminate"], expected);

    let (code, out, err) = worldd(
        &["budget", "--addr", &addr, "--session", path_str(&file)],
        None,
    );
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    assert_eq!(
        out.lines().last(),
        Some("in flight: mcp:ep1:h1 Ailang.Run@worktree cost 1 (the daemon is still running it; ask again later, and do not resend it)"),
        "{out}"
    );
    assert!(!out.contains("indeterminate:"), "{out}");

    // Past its deadline the call ends with an outcome: nothing is left without one.
    caller.wait().unwrap();
    let own = get(&d.url("/v1/budget"), Some(&token));
    assert_eq!(own.json()["indeterminate"], serde_json::json!([]));
    let (code, out, err) = worldd(
        &["budget", "--addr", &addr, "--session", path_str(&file)],
        None,
    );
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    assert!(
        !out.contains("in flight") && !out.contains("indeterminate"),
        "{out}"
    );
}
