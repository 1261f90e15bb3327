//! A git step after `git commit` that does not finish (`rev-parse HEAD`, `diff-tree`): the
//! commit exists, and the outcome says so (`ok`, with what is known and a `note`), where it was
//! `failed` "the commit was made but …", a failure for an effect that happened.
//!
//! The handler finds `git` on `PATH` when it is built: this file (one test, so no other test of
//! the process reads `PATH` meanwhile) puts a wrapper first that stops the chosen step.

mod common;

use std::fs;
use std::path::Path;

use common::*;
use handler_kit::serde_json::json;
use handler_kit::{EffectHandler, Host, Plugin};
use worldd_git::GitPlugin;

/// A `git` in `bin` that runs `real`, except that the step named in `bin/stall` (a shell `case`
/// pattern over the arguments) sleeps past any time limit first.
fn wrapper(bin: &Path, real: &str) {
    let script = format!(
        "#!/bin/sh\nstall=$(cat {stall} 2>/dev/null)\ncase \" $* \" in\n  *\"$stall\"*) [ -n \"$stall\" ] && sleep 60 ;;\nesac\nexec {real} \"$@\"\n",
        stall = bin.join("stall").display()
    );
    let git = bin.join("git");
    fs::write(&git, script).unwrap();
    fs::set_permissions(&git, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

#[test]
fn a_git_step_failing_after_the_commit_is_ok_with_what_is_known_and_a_note() {
    let real = String::from_utf8(
        std::process::Command::new("sh")
            .args(["-c", "command -v git"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .to_string();
    let f = Fixture::new();
    let bin = f.tmp.path().join("bin");
    fs::create_dir(&bin).unwrap();
    wrapper(&bin, &real);
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    // Only this test runs in this process: nothing else reads PATH meanwhile.
    std::env::set_var("PATH", path);
    let state = f.tmp.path().join("state2");
    let handler = GitPlugin::new(
        json!({"author": AUTHOR, "stateDir": state, "timeoutMs": 3000}),
        Host::noop(),
    )
    .unwrap();
    let commit = |stall: &str, file: &str| {
        fs::write(bin.join("stall"), stall).unwrap();
        f.put(file, "x\n");
        let before = f.head();
        let out = ok_output(
            handler.execute(request(&f.repo(), json!({"op": "commit", "message": file}))),
        );
        assert_ne!(f.head(), before, "a commit was made");
        out
    };

    // `rev-parse HEAD` after the commit runs out of time: no id, but a commit.
    let out = commit("rev-parse --verify HEAD^{commit} ", "a.txt");
    assert_eq!(out["ok"], json!(true), "{out:?}");
    assert_eq!(out["commit"], json!(null));
    assert_eq!(out["files"], json!([]));
    assert_eq!(
        out["note"],
        json!("the commit was made but git rev-parse failed afterwards (the time limit was reached): its id is not known; git log in the worktree shows it")
    );

    // `diff-tree` runs out of time: the id, no files.
    let out = commit(" diff-tree ", "b.txt");
    assert_eq!(out["ok"], json!(true), "{out:?}");
    assert_eq!(out["commit"], json!(f.head()));
    assert_eq!(out["files"], json!([]));
    assert_eq!(
        out["note"],
        json!("the commit was made but git diff-tree failed afterwards (the time limit was reached): its files are not listed; git log in the worktree shows it")
    );

    // Nothing stalls: the whole output, and no note.
    let out = commit("", "c.txt");
    assert_eq!(out["commit"], json!(f.head()));
    assert_eq!(out["files"], json!(["c.txt"]));
    assert!(out.get("note").is_none(), "{out:?}");
    assert_eq!(f.status(), "", "each commit's index was installed");
}
