//! The built plugin library, loaded the way the daemon loads it.

mod common;

use std::path::PathBuf;

use common::*;
use handler_kit::serde_json::json;
use handler_kit::{FinishInput, Host, LoadedPlugin, Outcome, Request};

/// `target/<profile>/libworldd_ailang.so`, found from this test binary.
fn library() -> PathBuf {
    handler_test_support::built_library("worldd_ailang")
}

#[test]
fn the_built_library_loads_declines_without_bin_and_serves_a_check() {
    let plugin = LoadedPlugin::load(&library()).unwrap_or_else(|e| panic!("{e}\n{}", e.detail()));
    let manifest = plugin.manifest().unwrap();
    assert_eq!(manifest.name, "ailang");
    assert_eq!(manifest.abi, handler_kit::ABI_VERSION);
    assert_eq!(manifest.transitions.len(), 5);

    let host = Host::noop().callbacks();
    assert_eq!(
        plugin.new_handler(&json!({}), host).unwrap_err(),
        worldd_ailang::DECLINE
    );

    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("wt");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("hello.ail"), HELLO).unwrap();
    let handler = plugin
        .new_handler(&Fixture::config(&tmp.path().join("state"), json!({})), host)
        .unwrap();
    let request = Request {
        invocation_id: "inv-1".into(),
        episode: "ep".into(),
        worktree: Some(root.display().to_string()),
        effect: "Ailang.Check".into(),
        scope: "worktree".into(),
        cost: 1,
        payload: json!({"op": "ai_check", "path": "hello.ail"}),
        deadline_ms: 10_000,
    };
    let Outcome::Ok { output } = handler.execute(&request) else {
        panic!("check failed")
    };
    assert_eq!(output["ok"], true);
    let shaped = handler
        .finish(
            "check-report",
            &FinishInput {
                args: json!({"path": "hello.ail"}),
                output,
            },
        )
        .unwrap();
    assert_eq!(
        json!(shaped),
        json!({"ok": true, "passed": true, "error_count": 0, "errors": []})
    );
    // Malformed JSON through the real boundary is a failed outcome.
    let answer = handler.execute_raw("{not json");
    assert!(
        answer.starts_with("{\"status\":\"failed\",\"message\":\"malformed request: "),
        "{answer}"
    );
}
