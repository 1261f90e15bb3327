//! A plugin's answer nested past the 128 levels at which serde_json stops, through the real
//! daemon and the real library (`tests/fixtures/misfit-plugin`, whose handler answers by the
//! call's `mode`): the host read none of it, so a decline counted as proceed and an output as
//! indeterminate. The broker's own limit (100 levels) must judge it, as it judges one nested
//! 101 levels deep.

mod common;

use common::fixtures::{misfit_daemon, misfit_mode_tool};
use common::*;
use serde_json::{json, Value};

/// The misfit tool `id`, taking a `mode` that its payload passes on, with the finish function
/// `finish` when given.
fn tool(id: &str, finish: Option<&str>) -> Value {
    let mut tool = misfit_mode_tool(id);
    if let Some(finish) = finish {
        tool["finish"] = json!(finish);
    }
    tool
}

/// A daemon serving the misfit plugin with `misfit-do` and `misfit-finish` (finish function
/// `deep`), and a session of episode `ep` whose grant has `budget` units.
fn daemon(budget: u32) -> (Daemon, String) {
    let d = misfit_daemon(&json!({
        "transitions": [tool("misfit-do", None), tool("misfit-finish", Some("deep"))],
        "finish": ["deep"]
    }));
    let token = d.session("ep", &[&format!("Misfit.Do=any:{budget}")]);
    (d, token)
}

/// The tool's answer (the A2A task's data part) and the status of its effect.
fn call(d: &Daemon, token: &str, task: &str, skill: &str, mode: &str) -> (Value, String) {
    let v = a2a(d, token, task, skill, json!({"mode": mode}));
    let data = v["result"]["artifacts"][0]["parts"][0]["data"].clone();
    let status = data["world"]["effects"][0]["status"]
        .as_str()
        .unwrap_or_else(|| panic!("{mode}: no effect status in {v}"))
        .to_owned();
    (data, status)
}

/// The daemon's log once it holds `count` lines with `needle` (at most 10 s; its stderr is
/// read by a thread of its own), which must then be all there are.
fn logged(d: &Daemon, needle: &str, count: usize) -> String {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while d.log().matches(needle).count() < count && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let log = d.log();
    assert_eq!(log.matches(needle).count(), count, "{needle}\n{log}");
    log
}

/// A decline nested 200 levels deep was read as no answer at all: the call proceeded, the
/// handler ran and the unit was spent. It is a decline, answered as one too deep to commit.
#[test]
fn a_preflight_decline_nested_past_128_levels_is_still_a_decline_and_spends_nothing() {
    // One unit: a call that spends it leaves none for the last call.
    let (d, token) = daemon(1);
    for (task, levels) in [("t1", 101), ("t2", 200), ("t3", 1000)] {
        let (data, status) = call(
            &d,
            &token,
            task,
            "misfit-do",
            &format!("decline-deep-{levels}"),
        );
        assert_eq!(status, "denied", "{levels}: {data}");
        assert_eq!(data["ok"], false, "{levels}: {data}");
        assert_eq!(
            data["refused"],
            "the Misfit.Do handler declined the request; its answer is nested more than 100 levels deep; the limit is 100",
            "{levels}"
        );
    }
    let (data, status) = call(&d, &token, "t4", "misfit-do", "plain");
    assert_eq!(status, "ok", "the unit was spent: {data}");
    assert_eq!(data["ok"], true, "{data}");
}

/// An output nested 200 levels deep was recorded `indeterminate` ("the handler returned a
/// malformed outcome: recursion limit exceeded"), as if the handler had not answered in full.
/// It is a failed effect, as one nested 101 levels deep is.
#[test]
fn an_output_nested_past_128_levels_is_a_failed_effect_not_indeterminate() {
    let (d, token) = daemon(10);
    for (task, levels) in [("t1", 101), ("t2", 200), ("t3", 1000)] {
        let (data, status) = call(&d, &token, task, "misfit-do", &format!("deep-{levels}"));
        assert_eq!(status, "failed", "{levels}: {data}");
    }
    let log = logged(&d, "effect failed: handler output is nested more than 100 levels deep; the limit is 100, so that every reader of the answer can read it invocation=a2a:ep:t", 3);
    assert!(!log.contains("indeterminate"), "{log}");
}

/// A finish function's output nested 200 levels deep was "returned a non-object: recursion
/// limit exceeded"; it fails the finish function as one nested too deep, as 101 levels do.
#[test]
fn a_finish_output_nested_past_128_levels_fails_as_one_nested_too_deep() {
    let (d, token) = daemon(10);
    for (task, levels) in [("t1", 101), ("t2", 200)] {
        let v = a2a(
            &d,
            &token,
            task,
            "misfit-finish",
            json!({"mode": format!("finish-deep-{levels}")}),
        );
        assert!(v["error"].is_object(), "{levels}: {v}");
    }
    let log = logged(&d, "post-effect failure: finish deep output is nested more than 100 levels deep; the limit is 100, so that every reader of the answer can read it invocation=a2a:ep:t", 2);
    assert!(!log.contains("recursion limit"), "{log}");
}
