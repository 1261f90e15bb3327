//! Real agent clients against the real daemon: the official Python MCP SDK (pinned in
//! `tests/python/requirements.txt`, installed by `.ci/run`).

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

fn python_script(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/python")
        .join(name)
        .display()
        .to_string()
}

fn require_module(module: &str) {
    let ok = Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(
        ok,
        "python3 cannot import {module}: run `pip install -r tests/python/requirements.txt` (.ci/run does)"
    );
}

#[test]
fn python_mcp_sdk_lists_reads_writes_edits_and_sees_refusals() {
    require_module("mcp");
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let token = d.session(
        "py",
        &["Workspace.Read=worktree:10", "Workspace.Write=worktree:10"],
    );
    let worktree = d.root().join("py");
    let out = Command::new("python3")
        .arg(python_script("mcp_client.py"))
        .arg(d.url("/mcp/"))
        .arg(&token)
        .arg(&worktree)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "client failed:\n{stdout}\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["server"], "worldd");
    assert_eq!(v["read"], "hello agents\n");
    assert_eq!(
        std::fs::read_to_string(worktree.join("src/hello.txt")).unwrap(),
        "hello agents\n"
    );
}
