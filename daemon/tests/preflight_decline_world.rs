//! A preflight decline whose answer carries the reserved key `world`, through the real daemon
//! and the real library (`tests/fixtures/misfit-plugin`, mode `decline-world`): the broker read
//! it as "proceed", so the effect the handler had declined ran and its unit was spent, and
//! nothing was logged. It stays a decline.

mod common;

use common::fixtures::{misfit_daemon, misfit_mode_tool};
use common::*;
use serde_json::json;

/// The handler said "do not run this": the call is declined (`denied`, nothing spent), its
/// answer the handler's own less the `world` member, where the daemon's world block goes, and
/// one WARN line names the plugin.
#[test]
fn a_preflight_decline_carrying_world_stays_a_decline_and_the_plugin_is_named() {
    let d = misfit_daemon(&json!({"transitions": [misfit_mode_tool("misfit-do")]}));
    // One unit: a call that spends it leaves none for the last call.
    let token = d.session("ep", &["Misfit.Do=any:1"]);
    let v = a2a(
        &d,
        &token,
        "t1",
        "misfit-do",
        json!({"mode": "decline-world"}),
    );
    let data = &v["result"]["artifacts"][0]["parts"][0]["data"];
    assert_eq!(data["ok"], false, "{v}");
    assert_eq!(data["refused"], "no", "{v}");
    assert_eq!(data["world"]["effects"][0]["status"], "denied", "{v}");
    assert!(data["world"].get("forged").is_none(), "{v}");
    let v = a2a(&d, &token, "t2", "misfit-do", json!({"mode": "plain"}));
    let data = &v["result"]["artifacts"][0]["parts"][0]["data"];
    assert_eq!(
        data["world"]["effects"][0]["status"], "ok",
        "the unit was spent: {v}"
    );
    let (_, _, log, _dir) = d.stop_with_log(std::time::Duration::from_secs(10));
    let said: Vec<&str> = log.lines().filter(|l| l.contains("reserved key")).collect();
    assert_eq!(said.len(), 1, "{log}");
    assert!(
        said[0].contains(r#" WARN plugin misfit's preflight declined with the reserved key "world" in its answer; the member is dropped and the call stays declined invocation=a2a:ep:t1 effect=Misfit.Do"#),
        "{log}"
    );
}
