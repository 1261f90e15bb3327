//! `worldd why` of a call whose intent the journal closed without an entry: withdrawn at its
//! deadline (nothing ran or was spent), or unrecorded (the effect ran and its record is stored,
//! the commit failed). Online `why` said what became of it; offline `why --db` said `not found
//! (scanned back all N entries of the log)`, as if nothing of the call existed. Both now say
//! it, with the same exit code.

mod common;

use common::*;
use serde_json::json;

/// `why HANDLE` against the daemon (`--addr`, with `token`'s session file) and, once it is
/// stopped, against its store: exit code and stderr of each.
fn why_both_ways(d: Daemon, token: &str, handle: &str) -> ((i32, String), (i32, String)) {
    let session = d.session_file("agent", token);
    let (code, out, err) = worldd(
        &[
            "why",
            handle,
            "--addr",
            &d.url(""),
            "--session",
            path_str(&session),
        ],
        None,
    );
    assert_eq!(out, "");
    let online = (code, err);
    let kept = d.halt();
    let (code, out, err) = worldd(
        &["why", handle, "--db", path_str(&kept.path().join("db"))],
        None,
    );
    assert_eq!(out, "");
    ((online.0, online.1), (code, err))
}

#[test]
fn why_of_an_unrecorded_call_says_so_offline_as_online_and_names_its_effect_record() {
    // A store ceiling of 2 MiB: a 1 MB read is admitted (the reserve is not reached), its
    // commit does not fit, and its outcome and record alone do: EffectsUnrecorded.
    let d = Daemon::start(
        &["worldd_workspace"],
        &["--store-ceiling", "2MiB", "--store-reserve", "64KiB"],
    );
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    std::fs::write(d.root().join("ep1/big.txt"), "x".repeat(1_000_000)).unwrap();
    let v = a2a(&d, &token, "r1", "ailang-read", json!({"path": "big.txt"}));
    assert_eq!(v["error"]["code"], -32603, "{v}");
    let call = get(&d.url("/v1/calls/a2a/r1"), Some(&token)).json();
    assert_eq!(call["state"], "unrecorded", "{call}");
    let record = call["effects"][0]["record"].as_str().unwrap().to_owned();
    let base = d.url("");
    let (online, offline) = why_both_ways(d, &token, "a2a:ep1:r1");
    // The outcome's reason is the state's own name: said once.
    assert_eq!(
        online,
        (1, format!("worldd: why: invocation a2a:ep1:r1 is not committed: the daemon at {base} says it is unrecorded, so no entry records it; `worldd calls get a2a:ep1:r1` says what to do\n"))
    );
    assert_eq!(
        offline,
        (1, format!("worldd: why: invocation a2a:ep1:r1 is journaled but not committed: its intent was closed unrecorded (the effect ran; its effect record {record}), so no entry records it; `worldd calls get a2a:ep1:r1` says what to do\n"))
    );
}

#[test]
fn why_of_a_call_withdrawn_at_its_deadline_says_so_offline_as_online() {
    let Some((d, mut strace)) = daemon_whose_syncs_stall() else {
        return;
    };
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let v = a2a(
        &d,
        &token,
        "w1",
        "ailang-write",
        json!({"path": "a.txt", "content": "x"}),
    );
    assert_eq!(v["error"]["code"], -32603, "{v}");
    // The coordinator closes the intent once its sync returns, after the answer.
    d.wait_for_log("the call's deadline passed before its handler could start");
    let _ = strace.kill();
    let _ = strace.wait();
    let call = get(&d.url("/v1/calls/a2a/w1"), Some(&token)).json();
    assert_eq!(call["state"], "withdrawn", "{call}");
    let base = d.url("");
    let (online, offline) = why_both_ways(d, &token, "a2a:ep1:w1");
    assert_eq!(
        online,
        (1, format!("worldd: why: invocation a2a:ep1:w1 is not committed: the daemon at {base} says it is withdrawn (deadline), so no entry records it; `worldd calls get a2a:ep1:w1` says what to do\n"))
    );
    assert_eq!(
        offline,
        (1, "worldd: why: invocation a2a:ep1:w1 is journaled but not committed: its intent was closed withdrawn (its deadline passed before its handler started: nothing ran or was spent), so no entry records it; `worldd calls get a2a:ep1:w1` says what to do\n".to_owned())
    );
}
