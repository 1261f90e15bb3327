//! `worldd why` of an invocation id with an empty episode or task id: no call has one, and both
//! sources refuse it as a handle before reading anything, as they refuse `0x2`.

mod common;

use common::why::{online, session_file};
use common::*;

const WS: &[&str] = &["worldd_workspace"];

#[test]
fn an_invocation_id_with_an_empty_episode_or_task_id_is_not_a_handle_on_either_source() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("demo", &["Workspace.Read=worktree:1"]);
    let scratch = tempfile::tempdir().unwrap();
    let session = session_file(scratch.path(), "demo", &token);
    // Nothing listens here: a request would say it cannot reach the daemon.
    let nowhere = tempfile::tempdir().unwrap();
    let db = d.db();
    for id in ["mcp:demo:", "a2a:demo:", "mcp::k", "mcp::"] {
        let said = (
            1,
            String::new(),
            format!("worldd: not a handle: {id} (want head, an entry index, a sha256: ref or an invocation id)\n"),
        );
        assert_eq!(online(&d.addr, &session, &[id], None), said, "online {id}");
        assert_eq!(
            worldd(
                &[
                    "why",
                    id,
                    "--addr",
                    "http://127.0.0.1:9",
                    "--session",
                    path_str(&session)
                ],
                None
            ),
            said,
            "no daemon {id}"
        );
        assert_eq!(
            worldd(&["why", id, "--db", path_str(&db)], None),
            said,
            "offline {id}"
        );
        let missing = nowhere.path().join("no-store");
        assert_eq!(
            worldd(&["why", id, "--db", path_str(&missing)], None),
            said,
            "no store {id}"
        );
    }
    // A whole id is still looked for.
    let (code, _, err) = online(&d.addr, &session, &["mcp:demo:k"], None);
    assert_eq!(code, 1);
    assert!(
        err.starts_with("worldd: why: invocation mcp:demo:k not found"),
        "{err}"
    );
}
