//! A call whose deadline passes while its intent is on its way to the disk (a store whose
//! syncs stall): its handler is never started, its intent is closed `withdrawn` with its unit
//! given back, and every way an agent asks about it says so: `GET /v1/calls`, A2A
//! `tasks/get`, `/v1/budget`, and a resend of its key. They all said "an effect ran … do not
//! retry", its record showed the unit spent, and a resend was answered as unrecorded.

mod common;

use common::*;
use serde_json::{json, Value};

#[test]
fn a_call_withdrawn_at_its_deadline_is_said_so_everywhere_and_spends_nothing() {
    let Some((d, mut strace)) = daemon_whose_syncs_stall() else {
        return;
    };
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let args = json!({"path": "a.txt", "content": "x"});
    let first = a2a(&d, &token, "w1", "ailang-write", args.clone());
    assert_eq!(first["error"]["code"], -32603, "{first}");
    // The coordinator closes the intent once its sync returns, after the answer.
    d.wait_for_log("the call's deadline passed before its handler could start");
    let _ = strace.kill();
    let _ = strace.wait();

    let call = get(&d.url("/v1/calls/a2a/w1"), Some(&token));
    assert_eq!(call.status, 200, "{}", call.text());
    let call = call.json();
    assert_eq!(call["state"], "withdrawn", "{call}");
    assert_eq!(
        call["outcome"],
        json!({"kind": "refused", "reason": "deadline", "retryable": true})
    );
    assert_eq!(call["effects"][0]["status"], "failed", "{call}");
    assert_eq!(call["effects"][0]["budgetAfter"], 5, "{call}");
    let budget = get(&d.url("/v1/budget"), Some(&token)).json();
    assert_eq!(budget["grants"][0]["spent"], 0, "{budget}");

    let task = post_json(
        &d.url("/a2a/"),
        Some(&token),
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": "w1"}}),
    )
    .json();
    let status = &task["result"]["status"];
    assert_eq!(status["state"], "failed", "{task}");
    assert!(
        status.to_string().contains("its handler was never started: nothing ran, nothing was spent, and nothing was committed; send it again as a new task"),
        "{task}"
    );
    // The key stays used: a resend runs nothing and is told why.
    let again: Value = a2a(&d, &token, "w1", "ailang-write", args);
    assert_eq!(
        again["error"],
        json!({"code": -32602, "message": "task id already used: its call was withdrawn at its deadline (its handler was never started): nothing ran and nothing was spent; send it again as a new task"}),
        "{again}"
    );
    assert!(!d.root().join("ep1/a.txt").exists());
    let budget = get(&d.url("/v1/budget"), Some(&token)).json();
    assert_eq!(budget["grants"][0]["spent"], 0, "{budget}");
}
