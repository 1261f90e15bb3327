//! A path swapped while it is being resolved. A second process exchanges a directory of the
//! path with a symlink (`renameat2(RENAME_EXCHANGE)`, so the name always exists): the resolver
//! can see `d` as a symlink and then find a directory when it reads the link (`EINVAL`). That
//! was answered `openat d/f: invalid argument` about once in six calls; it is a path that
//! changed, retried and, when it keeps changing, refused with the documented words.

mod common;

use std::fs;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use common::*;
use handler_kit::serde_json::json;
use handler_kit::Outcome;
use handler_test_support::exchange;

#[test]
fn a_directory_swapped_with_a_symlink_mid_resolution_is_a_changed_path_never_invalid_argument() {
    let f = Fixture::new();
    // `d` flips between a real directory and a symlink to another directory of the worktree:
    // every state of the tree is a legitimate place to read and write, so the only answers a
    // call may give are its success and the changed-path refusal.
    f.put("d/f", "INSIDE d");
    f.put("e/f", "INSIDE e");
    f.link("d.alt", "e");

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicUsize::new(0));
    let swapper = {
        let (stop, swaps) = (stop.clone(), swaps.clone());
        let (d, d_alt) = (f.path("d"), f.path("d.alt"));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                exchange(&d, &d_alt);
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let calls = 3000;
    let (mut succeeded, mut changed) = (0, 0);
    for i in 0..calls {
        let (effect, payload, op) = match i % 3 {
            0 => (
                "Workspace.Read",
                json!({"op": "read", "path": "d/f"}),
                "read",
            ),
            1 => (
                "Workspace.Write",
                json!({"op": "write", "path": "d/f", "content": format!("INSIDE {i}")}),
                "write",
            ),
            _ => (
                "Workspace.Write",
                json!({"op": "edit", "path": "d/f", "old_text": "INSIDE", "new_text": "INSIDE"}),
                "edit",
            ),
        };
        let Outcome::Ok { output } = f.run(effect, payload.clone()) else {
            panic!("{payload}: not an ok outcome")
        };
        if is_ok(&output) {
            succeeded += 1;
            continue;
        }
        assert_eq!(
            refused(&output),
            format!(
                "{op} d/f: the path kept changing while it was being opened; nothing was done, try again"
            ),
            "call {i}: {payload}"
        );
        changed += 1;
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    eprintln!(
        "swap race: {} swaps, {succeeded} calls succeeded, {changed} said the path changed",
        swaps.load(Ordering::Relaxed)
    );
    assert!(
        swaps.load(Ordering::Relaxed) > 100,
        "the swapper barely ran"
    );
    assert!(succeeded > 0, "no call got through");
    for dir in ["d", "e", "d.alt"] {
        let text = fs::read_to_string(f.path(dir).join("f")).unwrap();
        assert!(text.starts_with("INSIDE"), "{dir}/f: {text}");
    }
}
