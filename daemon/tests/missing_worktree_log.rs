//! A call refused because the episode's worktree is missing: the agent's envelope keeps the
//! contract's text, which names no host path, and the daemon's log line names the directory it
//! looked for (an operator whose `session new` used another workspace root made the worktree
//! where this daemon never looks, and the line gave no way to see it).

mod common;

use common::*;
use serde_json::json;

const WS: &[&str] = &["worldd_workspace"];

#[test]
fn the_log_line_of_a_call_refused_for_a_missing_worktree_names_the_directory_the_daemon_looked_for()
{
    let d = Daemon::start(WS, &[]);
    let token = d.session_without_worktree("nowhere", &["Workspace.Read=worktree:5"]);
    let read = json!({"name": "ailang-read", "arguments": {"path": "a.txt"}});
    let v = mcp(&d, &token, "tools/call", read).rpc_json();
    assert_eq!(v["error"]["message"], "host callback failed", "{v}");
    let looked_for = d.root().canonicalize().unwrap().join("nowhere");
    d.wait_for_log(&format!(
        "mcp tools/call: host callback failed: episode nowhere's worktree does not exist: an operator creates it (the directory nowhere in the workspace root; worldd session new makes a worktree and a credential together, for an episode that has neither) (this daemon looked for {})",
        looked_for.display()
    ));
    // The agent's copy names no host path.
    assert!(!v.to_string().contains(&*d.root().to_string_lossy()), "{v}");
}

/// A worktree gone (an operator's mistake, or a plugin that deleted it) read in the daemon's log
/// as `call: transition declares an effect this daemon has no handler for: episode …'s
/// worktree does not exist …`: R8's text, a missing plugin, stuck before another cause. The
/// operator's lines name the worktree alone; the A2A refusal keeps the contract's R8 text.
#[test]
fn the_log_names_a_missing_worktree_alone_and_a2a_keeps_the_r8_text() {
    let d = Daemon::start(WS, &[]);
    let token = d.session_without_worktree("nowhere", &["Workspace.Read=worktree:5"]);
    let cause = "episode nowhere's worktree does not exist: an operator creates it (the directory nowhere in the workspace root; worldd session new makes a worktree and a credential together, for an episode that has neither)";
    let read = json!({"name": "ailang-read", "arguments": {"path": "a.txt"}});
    let v = mcp(&d, &token, "tools/call", read).rpc_json();
    assert_eq!(v["error"]["message"], "host callback failed", "{v}");
    let v = a2a(&d, &token, "t-1", "ailang-read", json!({"path": "a.txt"}));
    assert_eq!(
        v["error"]["message"],
        format!("transition declares an effect this daemon has no handler for: {cause}"),
        "{v}"
    );
    d.wait_for_log(&format!(" INFO call: {cause}"));
    let log = d.log_so_far();
    assert!(!log.contains("no handler for"), "{log}");
}
