//! The worktree itself swapped for a symlink after the daemon checked it. The daemon binds the
//! worktree's path (refusing a symlink there); anything that can write the workspace root can
//! exchange the directory for a link to anywhere before the handler opens it. The handler opens
//! the worktree once without following a link at its place, so such a call fails and nothing
//! outside is read or written.

mod common;

use std::fs;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use common::*;
use handler_kit::serde_json::json;
use handler_kit::{EffectHandler, Outcome};
use handler_test_support::exchange;

const SYMLINKED: &str =
    "the episode's worktree is a symbolic link; a worktree must be a directory in the workspace root itself";

const CHANGING: &str = "the episode's worktree kept changing between a directory and something else while it was being opened";

#[test]
fn a_worktree_swapped_for_a_symlink_to_an_outside_directory_is_never_read_or_written_through() {
    let f = Fixture::new();
    f.put("canary.txt", "INSIDE");
    // Beside the worktree, in the workspace root: a link to the directory holding the canary.
    let link = f.tmp.path().join("wt.link");
    std::os::unix::fs::symlink(&f.outside, &link).unwrap();
    let before = f.outside_snapshot();

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicUsize::new(0));
    let swapper = {
        let (stop, swaps) = (stop.clone(), swaps.clone());
        let (root, link) = (f.root.clone(), link.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                exchange(&root, &link);
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let calls = 2000;
    let (mut succeeded, mut symlinked, mut written) = (0, 0, 0);
    for i in 0..calls {
        let (effect, payload) = if i % 2 == 0 {
            (
                "Workspace.Read",
                json!({"op": "read", "path": "canary.txt"}),
            )
        } else {
            (
                "Workspace.Write",
                json!({"op": "write", "path": "planted", "content": "PLANTED"}),
            )
        };
        match f.run(effect, payload.clone()) {
            Outcome::Ok { output } => {
                assert!(is_ok(&output), "call {i}: {payload}: {output:?}");
                if i % 2 == 0 {
                    assert_eq!(output["content"], json!("INSIDE"), "call {i}");
                } else {
                    written += 1;
                }
                succeeded += 1;
            }
            Outcome::Failed { message } => {
                // The rare call that finds the name flipping on every look says so.
                assert!(
                    message == format!("broker: {effect} failed: {SYMLINKED}")
                        || message == format!("broker: {effect} failed: {CHANGING}"),
                    "call {i}: {payload}: {message}"
                );
                symlinked += 1;
            }
            other => panic!("call {i}: {payload}: {other:?}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    // Leave the real worktree at its own name.
    if fs::symlink_metadata(&f.root)
        .unwrap()
        .file_type()
        .is_symlink()
    {
        exchange(&f.root, &link);
    }
    eprintln!(
        "worktree swap: {} swaps, {succeeded} calls ran in the worktree, {symlinked} found it a symlink",
        swaps.load(Ordering::Relaxed)
    );
    assert_eq!(f.outside_snapshot(), before, "nothing outside was written");
    // Every write that ran, ran in the worktree (on a loaded machine the swapper may win every
    // round, and none ran: then none is there either).
    if written > 0 {
        assert_eq!(fs::read_to_string(f.path("planted")).unwrap(), "PLANTED");
    } else {
        assert!(!f.path("planted").exists());
    }
    assert!(
        symlinked > 0,
        "the race was never seen: the test proves nothing"
    );
}

#[test]
fn a_worktree_that_is_a_symlink_is_refused_and_nothing_runs() {
    let f = Fixture::new();
    f.put("a.txt", "INSIDE");
    // Even a link to the real worktree: the worktree must be the directory itself.
    let link = f.tmp.path().join("ep.link");
    std::os::unix::fs::symlink(&f.root, &link).unwrap();
    for (effect, payload) in [
        ("Workspace.Read", json!({"op": "read", "path": "a.txt"})),
        (
            "Workspace.Write",
            json!({"op": "write", "path": "a.txt", "content": "OVER"}),
        ),
        (
            "Workspace.Write",
            json!({"op": "edit", "path": "a.txt", "old_text": "INSIDE", "new_text": "EDIT"}),
        ),
    ] {
        let mut request = f.request(effect, payload);
        request.worktree = Some(link.to_string_lossy().into_owned());
        assert_eq!(
            failed(f.handler.execute(request)),
            format!("broker: {effect} failed: {SYMLINKED}")
        );
    }
    assert_eq!(fs::read_to_string(f.path("a.txt")).unwrap(), "INSIDE");
}
