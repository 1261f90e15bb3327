//! A failed write removes the still-empty directories it made. A write that had just found
//! and opened such a directory (another episode sharing the tree, an operator's `mkdir -p`)
//! then created its file in the removed directory and was refused `openat nd/ok.txt: no such
//! file or directory`, although a write makes the directories it needs. That write now starts
//! again and makes the directory anew.

mod common;

use std::sync::{Arc, Barrier};

use common::*;
use handler_kit::serde_json::json;

#[test]
fn a_write_whose_directory_a_failed_write_removed_meanwhile_starts_again_and_succeeds() {
    let f = Arc::new(Fixture::new());
    // The window is narrow (about one round in 2500 hit it before the fix): this loop is the
    // end-to-end check; the unit tests in src/sandbox.rs (one of the same name) open the
    // window deterministically.
    let rounds = 2000;
    let barrier = Arc::new(Barrier::new(2));
    let long = format!("nd/{}", "z".repeat(256));
    let failing = {
        let (f, barrier, long) = (f.clone(), barrier.clone(), long.clone());
        std::thread::spawn(move || {
            for _ in 0..rounds {
                barrier.wait();
                // Makes nd/, fails at the rename (the name is too long), removes nd/ again.
                let out = f.out(
                    "Workspace.Write",
                    json!({"op": "write", "path": long, "content": "x"}),
                );
                assert_eq!(out["ok"], json!(false), "{out:?}");
                barrier.wait();
            }
        })
    };
    let mut failed = Vec::new();
    for round in 0..rounds {
        let _ = std::fs::remove_dir_all(f.path("nd"));
        // The file in nd/ (its temporary file created in the removed directory), or in a
        // directory to make below nd/ (that directory created in it).
        let path = if round % 2 == 0 {
            "nd/ok.txt"
        } else {
            "nd/sub/ok.txt"
        };
        barrier.wait();
        let out = f.out(
            "Workspace.Write",
            json!({"op": "write", "path": path, "content": "ok"}),
        );
        if out["ok"] != json!(true) {
            failed.push(format!("round {round}: {out:?}"));
        } else {
            assert_eq!(std::fs::read_to_string(f.path(path)).unwrap(), "ok");
        }
        barrier.wait();
    }
    failing.join().unwrap();
    assert!(
        failed.is_empty(),
        "{} of {rounds}: {failed:#?}",
        failed.len()
    );
}
