//! The built plugin library, loaded the way the daemon loads it.

mod common;

use std::path::PathBuf;

use common::*;
use handler_api::serde_json::json;
use handler_api::{LoadedPlugin, Outcome};

/// `target/<profile>/libworldd_git.so`, found from this test binary.
fn library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let name = format!(
        "{}worldd_git{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    );
    [deps.join(&name), deps.parent().unwrap().join(&name)]
        .into_iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{name} not found next to {}", deps.display()))
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
            handler_api::Host::noop().callbacks(),
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
    let bytes = std::fs::read(library()).unwrap();
    use sha2::Digest;
    assert_eq!(
        output["tool"],
        json!(format!(
            "sha256:{}",
            hex::encode(sha2::Sha256::digest(bytes))
        ))
    );
}
