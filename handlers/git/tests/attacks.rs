//! Git.Commit under attack: nested repositories and gitfiles, look-alike `.git` names, git
//! runs killed at their deadline. Each test is named for the attack it pins.

mod common;

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use handler_kit::serde_json::json;
use handler_kit::Outcome;

/// `nothing to commit` against a commit would tell an agent whether a repository exists at
/// any host path; the refusal must be the same wherever the gitfile points.
#[test]
fn nested_gitfile_pointing_outside_is_refused_whatever_it_points_at() {
    let f = Fixture::new();
    let elsewhere = f.tmp.path().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    git(&elsewhere, &["init", "-q"]);
    fs::write(elsewhere.join("x"), "x").unwrap();
    git(&elsewhere, &["add", "-A"]);
    git(&elsewhere, &["commit", "-q", "-m", "x"]);
    let before = f.head();
    let targets = [
        format!("gitdir: {}/.git\n", elsewhere.display()),
        "gitdir: /nonexistent/worldd/.git\n".to_string(),
        format!("gitdir: {}\n", f.remote().display()),
    ];
    for target in targets {
        f.put("leak1/.git", &target);
        f.put("leak1/file", "f\n");
        let with_paths = f.commit(json!({"op": "commit", "message": "m", "paths": ["leak1"]}));
        assert_eq!(
            refused(&with_paths),
            "commit leak1: \"leak1/.git\" makes \"leak1\" a repository of its own (a .git directory or gitfile); git-commit never records another repository",
            "{target}"
        );
        let without = f.commit(json!({"op": "commit", "message": "m"}));
        assert_eq!(
            refused(&without),
            "commit: \"leak1/.git\" makes \"leak1\" a repository of its own (a .git directory or gitfile); git-commit never records another repository (name paths that leave it out)",
            "{target}"
        );
        let inside = f.commit(json!({"op": "commit", "message": "m", "paths": ["leak1/file"]}));
        assert!(
            refused(&inside).starts_with("commit leak1/file: \"leak1/.git\" makes \"leak1\""),
            "{inside:?}"
        );
    }
    assert_eq!(f.head(), before, "nothing was committed");
    assert_eq!(f.status(), "?? leak1/\n", "nothing was staged");
    // A path that avoids it commits.
    f.put("ok.txt", "ok\n");
    let out = f.commit(json!({"op": "commit", "message": "m", "paths": ["ok.txt"]}));
    assert_eq!(out["files"], json!(["ok.txt"]));
}

#[test]
fn nested_repository_directory_is_refused() {
    let f = Fixture::new();
    let sub = f.repo().join("vendor/lib");
    fs::create_dir_all(&sub).unwrap();
    git(&sub, &["init", "-q"]);
    fs::write(sub.join("a"), "a").unwrap();
    let out = f.commit(json!({"op": "commit", "message": "m", "paths": ["vendor"]}));
    assert_eq!(
        refused(&out),
        "commit vendor: \"vendor/lib/.git\" makes \"vendor/lib\" a repository of its own (a .git directory or gitfile); git-commit never records another repository"
    );
    let out = f.commit(json!({"op": "commit", "message": "m"}));
    assert!(
        refused(&out).starts_with("commit: \"vendor/lib/.git\""),
        "{out:?}"
    );
}

#[test]
fn look_alike_git_names_are_refused_at_any_depth() {
    let f = Fixture::new();
    for (path, named) in [
        (".GIT/config", ".GIT"),
        ("sub/.git/config", "sub/.git"),
        ("\u{ff0e}git", "\u{ff0e}git"),
        ("a/.Git", "a/.Git"),
    ] {
        let out = f.commit(json!({"op": "commit", "message": "m", "paths": [path]}));
        assert_eq!(
            refused(&out),
            format!("commit {path}: \"{named}\" is named like .git (names are compared after NFKC and case folding); git-commit never commits git's own data or another repository")
        );
    }
    // A look-alike at the root makes the whole worktree uncommittable without paths.
    f.put(".GIT/hooks/pre-commit", "#!/bin/sh\n");
    let out = f.commit(json!({"op": "commit", "message": "m"}));
    assert_eq!(
        refused(&out),
        "commit: \".GIT\" is named like .git (names are compared after NFKC and case folding); git-commit never commits git's own data or another repository (name paths that leave it out)"
    );
}

/// An agent's tools keep `.git/` read-only, not `HEAD`, `objects/`, `refs/` or `config`: in a
/// worktree that is a plain directory, those files made git take the worktree itself for a bare
/// repository, with the agent's `config` (`core.worktree = .`, a clean filter), and git-commit
/// ran the agent's command on the host while staging.
#[test]
fn files_an_agent_writes_never_make_the_worktree_a_repository_whose_config_is_the_agents() {
    let f = Fixture::new();
    let plain = f.tmp.path().join("plain");
    let ran = f.tmp.path().join("filter-ran");
    let put = |name: &str, text: &str| {
        let path = plain.join(name);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    };
    put("HEAD", "ref: refs/heads/main\n");
    put("objects/keep", "");
    put("refs/keep", "");
    put(
        "config",
        &format!(
            "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = .\n[filter \"x\"]\n\tclean = sh -c 'touch {}; cat'\n",
            ran.display()
        ),
    );
    put("info/attributes", "* filter=x\n");
    put("hello.txt", "hi\n");
    let out = ok_output(f.run_in(&plain, json!({"op": "commit", "message": "m"})));
    assert_eq!(
        refused(&out),
        "commit: the worktree is not a git repository (the operator must make it one, e.g. with git init or git worktree add)"
    );
    assert!(!ran.exists(), "the agent's filter ran");
    // Nothing was staged into the agent's object store either.
    let objects: Vec<_> = fs::read_dir(plain.join("objects")).unwrap().collect();
    assert_eq!(objects.len(), 1, "{objects:?}");
}

fn alive(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        }
        Err(_) => false,
    }
}

fn wait_dead(pid: i32) {
    let until = Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        assert!(Instant::now() < until, "process {pid} outlived its git run");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A clean filter (the operator's config) that hangs while the gate file exists, writing its
/// shell's pid first.
fn slow_filter(f: &Fixture) -> (std::path::PathBuf, std::path::PathBuf) {
    let gate = f.tmp.path().join("hang");
    let pids = f.tmp.path().join("filter.pids");
    let cmd = format!(
        "if [ -e {g} ]; then echo $$ >> {p}; sleep 300; fi; cat",
        g = gate.display(),
        p = pids.display()
    );
    git(&f.repo(), &["config", "filter.slow.clean", &cmd]);
    git(&f.repo(), &["config", "filter.slow.required", "true"]);
    fs::write(&gate, "").unwrap();
    (gate, pids)
}

#[test]
fn commit_that_times_out_in_git_add_leaves_no_index_lock_and_no_child() {
    let f = Fixture::with_config(
        |state| json!({"author": AUTHOR, "stateDir": state, "timeoutMs": 1500}),
    );
    let (gate, pids) = slow_filter(&f);
    // The repository's own attributes (the operator's) route *.txt through the filter.
    fs::write(f.repo().join(".git/info/attributes"), "*.txt filter=slow\n").unwrap();
    f.put("a.txt", "a\n");
    let before = f.head();
    let message = failed(f.run(json!({"op": "commit", "message": "m"})));
    assert_eq!(
        message,
        "commit: git add did not finish within the time limit (1500 ms); nothing was committed"
    );
    // The filter (git's grandchild) died with git's process group.
    let pid: i32 = fs::read_to_string(&pids).unwrap().trim().parse().unwrap();
    wait_dead(pid);
    assert!(
        !f.repo().join(".git/index.lock").exists(),
        "index.lock was left behind"
    );
    assert_eq!(f.head(), before);
    // The repository is usable: the next commit works.
    fs::remove_file(&gate).unwrap();
    let out = f.commit(json!({"op": "commit", "message": "m"}));
    assert_eq!(out["files"], json!(["a.txt"]));
    assert_eq!(f.status(), "", "the worktree's index holds the commit");
}

#[test]
fn commit_killed_while_moving_the_branch_leaves_no_ref_lock() {
    let f = Fixture::with_config(
        |state| json!({"author": AUTHOR, "stateDir": state, "timeoutMs": 1500}),
    );
    // The branch's reflog is a FIFO: `git commit` blocks opening it while it holds the lock on
    // refs/heads/main, so the deadline kills it exactly there.
    let reflog = f.repo().join(".git/logs/refs/heads/main");
    fs::remove_file(&reflog).unwrap();
    mkfifo(&reflog);
    f.put("a.txt", "a\n");
    let before = f.head();
    let outcome = f.run(json!({"op": "commit", "message": "m"}));
    let Outcome::Indeterminate { message } = outcome else {
        panic!("expected indeterminate, got {outcome:?}")
    };
    assert_eq!(
        message,
        "commit: git commit did not finish within the time limit (1500 ms) and was stopped; the commit may or may not have been made"
    );
    let git_dir = f.repo().join(".git");
    for lock in ["refs/heads/main.lock", "HEAD.lock", "index.lock"] {
        assert!(!git_dir.join(lock).exists(), "{lock} was left behind");
    }
    assert_eq!(f.head(), before, "the branch did not move");
    fs::remove_file(&reflog).unwrap();
    let out = f.commit(json!({"op": "commit", "message": "m"}));
    assert_eq!(out["files"], json!(["a.txt"]));
    assert_ne!(f.head(), before);
}

#[test]
fn a_refused_commit_leaves_the_worktree_index_untouched() {
    // Staging happens in a private index: a refusal after `git add` changes nothing.
    let f = Fixture::new();
    let index = f.repo().join(".git/index");
    let before = fs::read(&index).unwrap();
    f.put("a.txt", "a\n");
    let out = f.commit(json!({"op": "commit", "message": "m", "paths": ["nope.txt"]}));
    assert!(
        refused(&out).starts_with("commit: git add refused:"),
        "{out:?}"
    );
    let out = f.commit(json!({"op": "commit", "message": "m", "paths": ["README.md"]}));
    assert_eq!(refused(&out), worldd_git::NOTHING_IN_PATHS);
    assert_eq!(fs::read(&index).unwrap(), before);
    assert_eq!(f.status(), "?? a.txt\n");
}

/// The gitlink check reads the whole list of staged changes: a list longer than the handler
/// keeps (thousands of files with 3 KB paths) could hide a gitlink past its end, so the
/// commit is refused instead of checked in part.
#[test]
fn staged_changes_too_many_to_check_for_gitlinks_are_refused_and_nothing_is_committed() {
    let f = Fixture::new();
    let before = f.head();
    let index = f.repo().join(".git/index");
    let index_before = fs::read(&index).unwrap();
    // Twelve 250-byte directory names and a 200-byte file name: each `--raw` record is 3,314
    // bytes, so 2,570 files list 8.52 MB, past the 8 MiB the handler keeps, while the
    // `git status` records of the hard link check before (3,218 bytes each, 8.27 MB) still fit.
    deep_files(&f.repo(), 2570);
    let out = f.commit(json!({"op": "commit", "message": "m"}));
    // (The outcome lists 1,000 long names when it commits: keep a failure's message short.)
    assert_eq!(out["ok"], json!(false), "committed: {:.200}", out["commit"]);
    assert_eq!(refused(&out), worldd_git::TOO_MANY_STAGED);
    assert_eq!(f.head(), before, "nothing was committed");
    assert_eq!(
        fs::read(&index).unwrap(),
        index_before,
        "the index is untouched"
    );
}

fn mkfifo(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

/// A `git add` stopped at the time limit while it streamed a large file into a pack left the
/// half-written `objects/pack/tmp_pack_*` in the repository's object store, every time.
#[test]
fn a_git_add_stopped_at_the_time_limit_leaves_no_temporary_object_files() {
    let f = Fixture::with_config(
        |state| json!({"author": AUTHOR, "stateDir": state, "timeoutMs": 1500}),
    );
    // Files over core.bigFileThreshold are streamed into a pack; at the slowest compression a
    // 96 MiB file of random bytes takes git longer than the time limit.
    git(&f.repo(), &["config", "core.bigFileThreshold", "1m"]);
    git(&f.repo(), &["config", "core.compression", "9"]);
    let mut big = fs::File::create(f.repo().join("big.bin")).unwrap();
    let mut random = fs::File::open("/dev/urandom").unwrap();
    std::io::copy(&mut std::io::Read::take(&mut random, 96 << 20), &mut big).unwrap();
    drop(big);
    let before = f.head();
    let message = failed(f.run(json!({"op": "commit", "message": "m"})));
    assert_eq!(
        message,
        "commit: git add did not finish within the time limit (1500 ms); nothing was committed"
    );
    assert_eq!(f.head(), before);
    let objects = f.repo().join(".git/objects");
    // The store's top and every directory in it (the fan-out directories and pack/).
    let mut left = std::collections::BTreeSet::new();
    for dir in std::iter::once(objects.clone())
        .chain(fs::read_dir(&objects).unwrap().flatten().map(|e| e.path()))
    {
        for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
            if entry.file_name().to_string_lossy().starts_with("tmp_") {
                left.insert(entry.path());
            }
        }
    }
    assert_eq!(left, std::collections::BTreeSet::new());
}

/// After a run stopped at the time limit the commit removes the temporary object files that
/// appeared since it began (the stopped git's half-written pack), but the object store is the
/// operator's repository's: a fetch of the operator's that began receiving its pack meanwhile
/// had its live `tmp_pack_*` removed and failed. A file a process holds open is left.
#[test]
fn a_stopped_commit_leaves_a_temporary_pack_another_process_is_still_writing() {
    let f = Fixture::with_config(
        |state| json!({"author": AUTHOR, "stateDir": state, "timeoutMs": 1500}),
    );
    let (gate, pids) = slow_filter(&f);
    fs::write(f.repo().join(".git/info/attributes"), "*.txt filter=slow\n").unwrap();
    f.put("a.txt", "a\n");
    // The operator's fetch starts receiving its pack once the commit's git add is running
    // (the filter has started), and writes to it now and then.
    let live = f.repo().join(".git/objects/pack/tmp_pack_Fetch2");
    let mut writer = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "while [ ! -s '{p}' ]; do sleep 0.05; done; exec 3>>'{l}'; while :; do printf x >&3; sleep 0.2; done",
            p = pids.display(),
            l = live.display()
        ))
        .spawn()
        .unwrap();
    let message = failed(f.run(json!({"op": "commit", "message": "m"})));
    let still_there = live.exists();
    writer.kill().unwrap();
    writer.wait().unwrap();
    fs::remove_file(&gate).unwrap();
    assert_eq!(
        message,
        "commit: git add did not finish within the time limit (1500 ms); nothing was committed"
    );
    assert!(
        still_there,
        "the temporary pack another process was writing was removed"
    );
    assert!(fs::metadata(&live).unwrap().len() > 0);
}
