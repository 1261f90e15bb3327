//! Lock files left in the repository by a git run (or the handler's own index update) that
//! was killed together with the daemon: the next commit clears them itself.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use common::*;
use handler_kit::serde_json::json;
use handler_kit::{EffectHandler, Host, HostServices, LogLevel, Plugin};
use worldd_git::{GitHandler, GitPlugin};

struct Log(Mutex<Vec<String>>);

impl HostServices for Log {
    fn log(&self, _level: LogLevel, message: &str) {
        self.0.lock().unwrap().push(message.to_owned());
    }
}

/// A repository with a linked worktree `ep` on branch `ep` (as `worldd session new --repo`
/// makes one), and a handler whose log is kept.
fn setup() -> (Fixture, PathBuf, GitHandler, Arc<Log>) {
    let f = Fixture::new();
    let ep = f.tmp.path().join("ep");
    git(
        &f.repo(),
        &["worktree", "add", "-q", "-b", "ep", ep.to_str().unwrap()],
    );
    let log = Arc::new(Log(Mutex::default()));
    let state = f.tmp.path().join("state2");
    let handler = GitPlugin::new(
        json!({"author": AUTHOR, "stateDir": state, "timeoutMs": 5000}),
        Host::from_services(log.clone()),
    )
    .unwrap();
    (f, ep, handler, log)
}

fn git_dir(f: &Fixture) -> PathBuf {
    f.repo().join(".git/worktrees/ep")
}

/// Set a file's times `secs` seconds back.
fn age(path: &Path, secs: i64) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for clock_gettime to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) };
    let then = libc::timespec {
        tv_sec: now.tv_sec - secs,
        tv_nsec: 0,
    };
    let times = [then, then];
    // SAFETY: `c` is a NUL-terminated path and `times` holds two valid timespecs.
    let rc = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) };
    assert_eq!(rc, 0);
}

#[test]
fn a_head_lock_left_by_a_killed_commit_is_removed_and_the_next_commit_is_made() {
    let (f, ep, handler, log) = setup();
    let head_lock = git_dir(&f).join("HEAD.lock");
    let branch_lock = f.repo().join(".git/refs/heads/ep.lock");
    // What a `git commit` killed inside its lock window leaves: empty lock files.
    fs::write(&head_lock, "").unwrap();
    fs::write(&branch_lock, "").unwrap();
    age(&branch_lock, 60);
    fs::write(ep.join("a.txt"), "a\n").unwrap();
    let out = ok_output(handler.execute(request(
        &ep,
        json!({"op": "commit", "message": "after a crash"}),
    )));
    assert_eq!(out["ok"], json!(true), "{out:?}");
    assert_eq!(
        git(&ep, &["rev-parse", "HEAD"]).trim(),
        out["commit"].as_str().unwrap()
    );
    assert!(!head_lock.exists());
    assert!(!branch_lock.exists());
    let log = log.0.lock().unwrap();
    for lock in [&head_lock, &branch_lock] {
        let line = format!(
            "git: removed {}, a lock file left by a git run or index update that was killed (no git of this plugin holds it)",
            lock.display()
        );
        assert!(log.contains(&line), "{log:?}");
    }
}

#[test]
fn a_young_lock_in_the_shared_repository_is_left_and_the_refusal_names_no_host_path() {
    let (f, ep, handler, log) = setup();
    // Another episode's worktree of the same repository may hold a fresh lock on refs there.
    let branch_lock = f.repo().join(".git/refs/heads/ep.lock");
    fs::write(&branch_lock, "").unwrap();
    fs::write(ep.join("a.txt"), "a\n").unwrap();
    let out =
        ok_output(handler.execute(request(&ep, json!({"op": "commit", "message": "blocked"}))));
    assert_eq!(
        refused(&out),
        "commit: git commit refused: fatal: cannot lock ref 'HEAD': Unable to create '<git-common-dir>/refs/heads/ep.lock': File exists. Another git process seems to be running in this repository, e.g. an editor opened by 'git commit'. Please make sure all processes are terminated then try again. If it still fails, a git process may have crashed in this repository earlier: remove the file manually to continue."
    );
    assert!(branch_lock.exists());
    assert!(log.0.lock().unwrap().iter().all(|l| !l.contains("removed")));
}

#[test]
fn an_index_lock_left_by_a_killed_index_update_is_removed_and_the_index_follows_head_again() {
    let (f, ep, handler, log) = setup();
    let index = git_dir(&f).join("index");
    let before = fs::read(&index).unwrap();
    fs::write(ep.join("b.txt"), "b\n").unwrap();
    let commit = |message: &str, payload_paths: Option<&[&str]>| {
        let mut payload = json!({"op": "commit", "message": message});
        if let Some(paths) = payload_paths {
            payload["paths"] = json!(paths);
        }
        ok_output(handler.execute(request(&ep, payload)))
    };
    assert_eq!(commit("b", None)["ok"], json!(true));
    // The daemon killed between making the commit and installing its index: the index is
    // the one before the commit, and the lock it was writing is left.
    fs::write(&index, &before).unwrap();
    fs::write(git_dir(&f).join("index.lock"), "partial").unwrap();
    fs::write(ep.join("c.txt"), "c\n").unwrap();
    let out = commit("c", Some(&["c.txt"]));
    assert_eq!(out["ok"], json!(true), "{out:?}");
    assert_eq!(out["files"], json!(["c.txt"]));
    assert!(!git_dir(&f).join("index.lock").exists());
    assert_eq!(git(&ep, &["status", "--porcelain"]), "");
    assert_eq!(git(&ep, &["ls-files"]), "README.md\nb.txt\nc.txt\n");
    let log = log.0.lock().unwrap();
    assert!(
        log.contains(&"git: the repository's index may be older than HEAD (its update was killed); this commit stages into an index read from HEAD, and the worktree's index is replaced by it once the commit is made".to_string()),
        "{log:?}"
    );
    assert!(
        log.iter().all(|l| !l.contains("index was not updated")),
        "{log:?}"
    );
}

/// A git killed with the daemon while it wrote objects left its temporary files (a
/// half-written pack of a large file, a loose object) in the shared object store for good: the
/// next commit removes those not written to for longer than `timeoutMs`, and leaves younger
/// ones, which a live git may be writing.
#[test]
fn temporary_object_files_left_by_a_killed_git_are_removed_by_the_next_commit_once_stale() {
    let (f, ep, handler, log) = setup();
    let objects = f.repo().join(".git/objects");
    fs::create_dir_all(objects.join("ab")).unwrap();
    let stale = [
        objects.join("pack/tmp_pack_Ab12Cd"),
        objects.join("pack/tmp_idx_Ab12Cd"),
        objects.join("ab/tmp_obj_Xy34Zw"),
        objects.join("tmp_obj_Qr56St"),
    ];
    let young = objects.join("pack/tmp_pack_Young1");
    for path in stale.iter().chain([&young]) {
        fs::write(path, "partial").unwrap();
    }
    for path in &stale {
        age(path, 60);
    }
    fs::write(ep.join("a.txt"), "a\n").unwrap();
    let out = ok_output(handler.execute(request(&ep, json!({"op": "commit", "message": "m"}))));
    assert_eq!(out["files"], json!(["a.txt"]));
    for path in &stale {
        assert!(!path.exists(), "{} was left", path.display());
    }
    assert!(young.exists(), "a young temporary file was removed");
    let removed: Vec<String> = log
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("temporary object file"))
        .cloned()
        .collect();
    assert_eq!(removed.len(), 4, "{removed:?}");
    assert!(removed.iter().all(|l| l.ends_with(
        ", a temporary object file left by a git run that was killed (not written to for longer than timeoutMs)"
    )));
}

/// A process (here a shell standing in for the operator's `git fetch`) holding `path` open
/// for appending and writing to it every `every` seconds; returned once the file is open.
fn slow_writer(path: &Path, every: &str) -> std::process::Child {
    let child = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec 3>>'{}'; while :; do sleep {every}; printf x >&3; done",
            path.display()
        ))
        .spawn()
        .unwrap();
    let fd3 = PathBuf::from(format!("/proc/{}/fd/3", child.id()));
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while fs::read_link(&fd3).ok().as_deref() != Some(path) {
        assert!(
            std::time::Instant::now() < until,
            "the writer never opened {path:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    child
}

/// The object store of a `--repo` worktree is the operator's repository's: a git of the
/// operator's (a fetch resolving deltas, stalled on the network) may leave its temporary pack
/// unwritten for longer than `timeoutMs` while it still holds it open, and removing it fails
/// that fetch (`unable to rename temporary '*.pack' file`). The start-of-commit sweep leaves a
/// file any process holds open and removes the stale ones beside it.
#[test]
fn a_temporary_pack_another_process_holds_open_is_left_by_the_start_of_commit_sweep_however_stale()
{
    let (f, ep, handler, log) = setup();
    let objects = f.repo().join(".git/objects");
    let live = objects.join("pack/tmp_pack_Fetch1");
    fs::write(&live, "half a pack").unwrap();
    let mut writer = slow_writer(&live, "30");
    age(&live, 60);
    let stale = objects.join("pack/tmp_pack_Killed");
    fs::write(&stale, "partial").unwrap();
    age(&stale, 60);
    fs::write(ep.join("a.txt"), "a\n").unwrap();
    let out = ok_output(handler.execute(request(&ep, json!({"op": "commit", "message": "m"}))));
    let still_there = live.exists();
    writer.kill().unwrap();
    writer.wait().unwrap();
    assert_eq!(out["files"], json!(["a.txt"]));
    assert!(
        still_there,
        "the temporary pack a live process holds open was removed"
    );
    assert!(!stale.exists(), "the stale temporary pack was left");
    let removed: Vec<String> = log
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("temporary object file"))
        .cloned()
        .collect();
    assert_eq!(
        removed,
        vec![format!(
            "git: removed {}, a temporary object file left by a git run that was killed (not written to for longer than timeoutMs)",
            stale.display()
        )]
    );
}
