//! What a plugin whose config schema declares `stateDir` is given, against the real binary and
//! the real library (`tests/fixtures/misfit-plugin`, which answers the config its constructor
//! got): docs/handler-authors.md said the daemon fills in nothing in a plugin's config, while
//! `serve` fills in `stateDir`, does not create the directory, and `worldd handlers` shows the
//! config without it. The page now says so; this holds it to what the daemon does.

mod common;

use common::fixtures::{misfit_daemon, misfit_mode_tool};
use common::*;
use serde_json::{json, Value};

/// The misfit manifest's changes: a tool passing `mode` on, and a schema declaring `stateDir`.
fn manifest() -> String {
    json!({
        "transitions": [misfit_mode_tool("misfit-do")],
        "configSchema": {
            "type": "object",
            "additionalProperties": false,
            "properties": {"stateDir": {"type": "string"}}
        }
    })
    .to_string()
}

#[test]
fn a_plugin_declaring_state_dir_is_given_one_under_the_store_and_creates_it_itself() {
    let d = misfit_daemon(&serde_json::from_str(&manifest()).unwrap());
    let plugins = d.dir.path().join("plugins");
    let token = d.session("ep", &["Misfit.Do=any:10"]);
    let v = a2a(&d, &token, "t1", "misfit-do", json!({"mode": "config"}));
    let data = &v["result"]["artifacts"][0]["parts"][0]["data"];
    let state_dir = d.db().join("plugin-state/misfit");
    assert_eq!(
        data["config"],
        json!({"stateDir": state_dir.display().to_string()}),
        "{v}"
    );
    assert_eq!(data["stateDirExists"], Value::Bool(false), "{v}");
    assert!(!d.db().join("plugin-state").exists());

    let (code, out, err, _) = worldd_with_plugins(
        "handlers",
        &plugins,
        &[],
        &[("WORLDD_MISFIT_MANIFEST", manifest())],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("\n  config {}\n"), "{out}");
}
