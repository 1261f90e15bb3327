//! An Ailang.CLI op may run code (`test`): one whose child was started but could not be waited
//! for may have run to its end, so the effect is indeterminate, never failed. Its own test
//! binary: it sets SIGCHLD to SIG_IGN for the whole process, so the kernel reaps each child at
//! exit and waiting for it fails with ECHILD, deterministically.

mod common;

use common::*;
use handler_kit::serde_json::json;
use handler_kit::Outcome;
use worldd_ailang::{CHECK, CLI};

#[test]
fn a_cli_op_that_started_and_could_not_be_waited_for_is_indeterminate_not_failed() {
    let f = Fixture::new();
    f.put("a.ail", HELLO);
    // The first call verifies the episode's base policy, so the next calls only run the op.
    f.ok(CLI, json!({"op": "version"}));
    let before = f.ran("policy-tool", Some("version"));

    // SAFETY: this test binary holds this one test; no other thread starts children meanwhile.
    let previous = unsafe { libc::signal(libc::SIGCHLD, libc::SIG_IGN) };
    let cli = f.exec(CLI, json!({"op": "version"}));
    let check = f.exec(CHECK, json!({"op": "ai_check", "path": "a.ail"}));
    // SAFETY: as above; the previous disposition is put back.
    unsafe { libc::signal(libc::SIGCHLD, previous) };

    assert_eq!(
        cli,
        Outcome::Indeterminate {
            message: "broker: Ailang.CLI indeterminate: the op was started, then ailang policy-tool failed: waiting for it failed: No child processes (os error 10); it may have run".into()
        }
    );
    assert_eq!(f.ran("policy-tool", Some("version")), before + 1);
    // A read changed nothing either way: its failure stays failed.
    assert_eq!(
        check,
        Outcome::Failed {
            message: "broker: Ailang.Check failed: ailang policy-tool failed: waiting for it failed: No child processes (os error 10)".into()
        }
    );
}
