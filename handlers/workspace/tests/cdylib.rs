//! The built plugin library, loaded the way the daemon loads it.

use std::fs;
use std::path::PathBuf;
use std::sync::Arc;

use handler_kit::serde_json::json;
use handler_kit::{host_callbacks, LoadedPlugin, Outcome, Request};
use handler_test_support::{built_library, file_tool_ref, LogLines};

/// `target/<profile>/libworldd_workspace.so`, found from this test binary.
fn library() -> PathBuf {
    built_library("worldd_workspace")
}

#[test]
fn the_built_library_loads_and_serves_a_read() {
    let path = library();
    let plugin = LoadedPlugin::load(&path).unwrap_or_else(|e| panic!("{e}\n{}", e.detail()));
    let manifest = plugin.manifest().unwrap();
    assert_eq!(manifest.name, "workspace");
    assert_eq!(manifest.abi, handler_kit::ABI_VERSION);
    assert_eq!(manifest.transitions.len(), 3);

    let host = host_callbacks(Arc::new(LogLines::default()));
    let handler = plugin
        .new_handler(&json!({"maxReadBytes": 1000}), host)
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("hello.ail"), "module hello\n").unwrap();
    let request = Request {
        invocation_id: "inv-1".into(),
        episode: "ep".into(),
        worktree: Some(tmp.path().to_string_lossy().into_owned()),
        effect: "Workspace.Read".into(),
        scope: "worktree".into(),
        cost: 1,
        payload: json!({"op": "read", "path": "hello.ail"}),
        deadline_ms: 10_000,
    };
    let Outcome::Ok { output } = handler.execute(&request) else {
        panic!("read failed")
    };
    assert_eq!(output["ok"], json!(true));
    assert_eq!(output["content"], json!("module hello\n"));
    // Inside the real plugin, `tool` is the SHA-256 of the library file.
    assert_eq!(output["tool"], json!(file_tool_ref(&path)));

    // A second load of the same file gives a working module too (no
    // per-type caching in the loader).
    let again = LoadedPlugin::load(&path).unwrap();
    assert_eq!(again.manifest().unwrap().name, "workspace");

    // A bad config is a one-line error from the plugin.
    let err = plugin.new_handler(&json!({"nope": 1}), host).err().unwrap();
    assert_eq!(
        err,
        "workspace config: unknown key \"nope\"; workspace accepts only: allowHardLinks, denyWrite, maxReadBytes, maxWriteBytes"
    );

    // Malformed JSON through the real boundary is a failed outcome.
    let answer = handler.execute_raw("{not json");
    assert!(
        answer.starts_with("{\"status\":\"failed\",\"message\":\"malformed request: "),
        "{answer}"
    );
}
