//! The built plugin library, loaded the way the daemon loads it.

mod common;

use std::path::PathBuf;

use common::*;
use handler_kit::serde_json::json;
use handler_kit::{LoadedPlugin, Outcome};
use handler_test_support::{built_library, file_tool_ref};

/// `target/<profile>/libworldd_git.so`, found from this test binary.
fn library() -> PathBuf {
    built_library("worldd_git")
}

#[test]
fn the_built_library_loads_and_commits() {
    let plugin = LoadedPlugin::load(&library()).unwrap_or_else(|e| panic!("{e}\n{}", e.detail()));
    let manifest = plugin.manifest().unwrap();
    assert_eq!(manifest.name, "git");
    assert_eq!(manifest.transitions[0]["id"], "git-commit");
    let f = Fixture::new();
    let handler = plugin
        .new_handler(
            &json!({"author": AUTHOR}),
            handler_kit::Host::noop().callbacks(),
        )
        .unwrap();
    f.put("lib.txt", "from the library\n");
    let outcome = handler.execute(&request(
        &f.repo(),
        json!({"op": "commit", "message": "via the cdylib"}),
    ));
    let Outcome::Ok { output } = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(output["ok"], json!(true), "{output:?}");
    assert_eq!(output["files"], json!(["lib.txt"]));
    assert_eq!(output["commit"].as_str().unwrap(), f.head());
    // The tool ref is the library file's own sha256.
    assert_eq!(output["tool"], json!(file_tool_ref(&library())));
}
