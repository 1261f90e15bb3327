//! The ailang plugin runs the copy of `bin` it archived at start
//! (`<db>/plugin-state/ailang/bin/<sha256>/ailang`). That copy removed while the daemon serves
//! made every call fail with `could not be started: No such file or directory`, naming no file,
//! spending a unit, and told the agent a write may have partly run. Through the real daemon
//! and plugins: the call is declined before anything is spent (`denied:handler`, nothing ran)
//! and the daemon's log names the copy and the fix.

mod common;

use common::*;
use serde_json::{json, Value};

const PLUGINS: &[&str] = &["worldd_workspace", "worldd_ailang"];

fn tool_call(d: &Daemon, token: &str, tool: &str, args: Value) -> Value {
    let a = mcp(
        d,
        token,
        "tools/call",
        json!({"name": tool, "arguments": args}),
    );
    let v = if a.content_type.starts_with("text/event-stream") {
        a.sse_json()
    } else {
        a.json()
    };
    v["result"].clone()
}

#[test]
fn a_call_after_the_archived_ailang_binary_was_removed_is_declined_with_nothing_spent_and_the_log_names_the_file(
) {
    let bin = format!("ailang.bin={}", path_str(&fixtures::ailang_standin()));
    let d = Daemon::start(PLUGINS, &["--plugin-config", bin.as_str()]);
    let token = d.session(
        "ep1",
        &["Ailang.Check=worktree:5", "Workspace.Write=worktree:5"],
    );
    std::fs::write(d.root().join("ep1/a.ail"), "module a\n").unwrap();

    let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(
        std::fs::read(fixtures::ailang_standin()).unwrap(),
    ));
    let archived = d
        .db()
        .canonicalize()
        .unwrap()
        .join("plugin-state/ailang/bin")
        .join(&digest)
        .join("ailang");
    std::fs::remove_file(&archived).unwrap();

    let r = tool_call(&d, &token, "ailang-check", json!({"path": "a.ail"}));
    assert_eq!(
        r["structuredContent"]["refused"],
        "the ailang binary this daemon runs is missing or not executable; an operator must restart worldd to archive it again",
        "{r}"
    );
    assert_eq!(
        r["_meta"]["world/outcome"],
        json!({"kind": "denied", "reason": "denied:handler", "retryable": false}),
        "{r}"
    );
    let effect = &r["_meta"]["world/effects"][0];
    assert_eq!(effect["status"], "denied", "{r}");
    // Nothing spent.
    assert_eq!(effect["budgetAfter"], 5, "{r}");
    d.wait_for_log(&format!(
        "ailang: Ailang.Check declined: the archived binary {} cannot be run: No such file or directory (os error 2); restart worldd to archive bin again",
        archived.display()
    ));
}
