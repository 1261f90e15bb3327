//! What one plugin may ship, checked when the real daemon loads the real library
//! (`tests/fixtures/misfit-plugin`, its manifest written to a file that
//! `WORLDD_MISFIT_MANIFEST=@FILE` names: the tools are larger than one variable may hold).

mod common;

use std::path::Path;

use common::fixtures::misfit_library;
use common::*;
use serde_json::{json, Value};

/// `n` tools of the misfit plugin (`misfit-0`, …), each with a `pad`-byte description in its
/// input schema (within the schema's own 64 KiB).
fn tools(n: usize, pad: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let mut t = fixtures::misfit_tool("misfit-do", &format!("misfit-{i}"));
            t["inputSchema"]["description"] = json!("d".repeat(pad));
            t
        })
        .collect()
}

/// `worldd VERB` over a plugin directory holding the misfit plugin, whose manifest ships
/// `transitions`.
fn with_tools(verb: &str, dir: &Path, transitions: &[Value]) -> (Option<i32>, String, String) {
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let lib = misfit_library();
    std::fs::copy(lib, plugins.join(lib.file_name().unwrap())).unwrap();
    let manifest = dir.join("manifest.json");
    std::fs::write(&manifest, json!({ "transitions": transitions }).to_string()).unwrap();
    let env = [("WORLDD_MISFIT_MANIFEST", format!("@{}", manifest.display()))];
    let (code, out, err, _) = worldd_with_plugins(verb, &plugins, &[], &env);
    (code, out, err)
}

/// A plugin shipping 2000 tools with 60 kB descriptions in their schemas loaded without a word; the registry it
/// was published into at every start then refused every agent's publication, and every
/// session's tools/list was 120 MB. A plugin whose shipped tools take more than an eighth of the
/// registry is now a `problem:` of `worldd handlers`, and `serve` does not start.
#[test]
fn a_plugin_shipping_more_than_an_eighth_of_the_registry_is_a_problem_and_serve_does_not_start() {
    use broker_core::registry::{entry_bytes, MAX_SHIPPED_BYTES};
    use broker_core::transition::Transition;
    let dir = tempfile::tempdir().unwrap();
    let lib = dir
        .path()
        .join("plugins")
        .join(misfit_library().file_name().unwrap());

    // 17 tools of 60 kB fit.
    let (code, out, err) = with_tools("handlers", dir.path(), &tools(17, 60_000));
    assert_eq!(code, Some(0), "{err}");
    assert!(!out.contains("problem:"), "{out}");

    let big = tools(18, 60_000);
    let bytes: usize = big
        .iter()
        .map(|t| entry_bytes(&Transition::from_value(t.clone()).unwrap()).unwrap())
        .sum();
    assert!(bytes > MAX_SHIPPED_BYTES, "{bytes}");
    let problem = format!("its 18 shipped transitions take {bytes} bytes of the tool registry; one plugin may ship at most 1048576 (an eighth of the registry's 8388608 bytes): ship fewer or smaller tools");
    let (code, out, err) = with_tools("handlers", dir.path(), &big);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(&format!("  problem: {problem}\n")), "{out}");
    let (code, _, err) = with_tools("serve", dir.path(), &big);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(
        err.lines().last().unwrap_or_default(),
        format!(
            "worldd: daemon startup failed at plugins: plugin {}: {problem}",
            lib.display()
        )
    );
}
