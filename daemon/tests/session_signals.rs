//! Ctrl-C, SIGTERM or a closed terminal after the `y` of `session new` left things half-made:
//! a partly checked-out worktree registered in the repository and no credential (the next run
//! refused the worktree as existing), or a live credential nobody held. The verb now holds
//! those signals from the answer until the credential is written, and the `worldd` the caller
//! started passes them on to the process doing the work instead of dying of them (which killed
//! it mid-way); the signal takes effect after.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

/// The git on PATH, by its full path.
fn real_git() -> String {
    let out = Command::new("sh")
        .args(["-c", "command -v git"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A directory holding a `git` that, for `worktree add`, marks `started` and sleeps a second
/// before running the real git: the window the signal is sent in.
fn slow_git(dir: &Path, started: &Path) -> std::path::PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir(&bin).unwrap();
    let script = bin.join("git");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncase \"$*\" in *'worktree add'*) : > {}; sleep 1;; esac\nexec {} \"$@\"\n",
            started.display(),
            real_git()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    bin
}

/// The pid of the `worldd` a caller started with `needle` among its arguments: of the two
/// processes running the verb, the one whose parent is not the other.
fn outer_worldd_pid(needle: &str) -> u32 {
    let pid = worldd_pid(needle);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // `pid (comm) state ppid ...`
    let ppid: u32 = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let parent_cmd = std::fs::read(format!("/proc/{ppid}/cmdline")).unwrap_or_default();
    if parent_cmd
        .split(|b| *b == 0)
        .any(|a| a == needle.as_bytes())
    {
        ppid
    } else {
        pid
    }
}

/// `session new ep --repo` at a terminal, answered `y`; `interrupt` is called while git checks
/// the worktree out; `shell` runs before it, in the same shell. Returns the directory and the exit code `script` passed on.
fn new_interrupted(
    shell: &str,
    interrupt: impl FnOnce(&mut std::process::Child, &str),
) -> (tempfile::TempDir, Option<i32>) {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    std::fs::write(repo.join("WHO"), "repo\n").unwrap();
    git(&repo, &["add", "WHO"]);
    git(&repo, &["commit", "-q", "-m", "first"]);
    let db = dir.path().join("db");
    drop(broker_core::store::Store::create(&db).unwrap());
    let started = dir.path().join("STARTED");
    let bin = slow_git(dir.path(), &started);
    let out = dir.path().join("ep.session");
    let cmd = format!(
        "{shell} PATH={}:$PATH exec {WORLDD} session new ep --db {} --workspace-root {} --repo {} --preset se-tools --out {}",
        bin.display(),
        db.display(),
        dir.path().join("wt").display(),
        repo.display(),
        out.display()
    );
    let shown = dir.path().join("SHOWN");
    let mut script = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::fs::File::create(&shown).unwrap())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let began = Instant::now();
    while !std::fs::read_to_string(&shown).unwrap().contains("[y/N] ") {
        assert!(began.elapsed() < Duration::from_secs(30), "no question");
        std::thread::sleep(Duration::from_millis(10));
    }
    script.stdin.as_mut().unwrap().write_all(b"y\n").unwrap();
    let began = Instant::now();
    while !started.exists() {
        assert!(began.elapsed() < Duration::from_secs(30), "git never ran");
        std::thread::sleep(Duration::from_millis(10));
    }
    interrupt(&mut script, path_str(&out));
    let status = script.wait().unwrap();
    (dir, status.code())
}

/// The worktree checked out and registered, and the credential in its file, live.
fn made_whole(dir: &Path) {
    let worktree = dir.join("wt/ep");
    assert_eq!(
        std::fs::read_to_string(worktree.join("WHO")).unwrap(),
        "repo\n"
    );
    assert!(worktree.join(".git").is_file());
    let token = std::fs::read_to_string(dir.join("ep.session")).unwrap();
    assert!(token.ends_with('\n') && token.len() > 1, "{token:?}");
    let (code, listed, err) = worldd(
        &["session", "list", "--db", path_str(&dir.join("db"))],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let rows: Vec<&str> = listed
        .lines()
        .filter(|l| l.contains("  ep  live  "))
        .collect();
    assert_eq!(rows.len(), 1, "{listed}");
    assert!(
        !names_in(dir).iter().any(|n| n.contains(".tmp-")),
        "{:?}",
        names_in(dir)
    );
}

#[test]
fn ctrl_c_during_session_news_checkout_takes_effect_once_worktree_and_credential_are_made() {
    let (dir, code) = new_interrupted("", |script, _| {
        // Ctrl-C typed at the terminal: SIGINT to every process of the foreground group.
        script.stdin.as_mut().unwrap().write_all(b"\x03").unwrap();
    });
    eprintln!("{:?}", names_in(dir.path()));
    eprintln!(
        "{}",
        std::fs::read_to_string(dir.path().join("SHOWN")).unwrap()
    );
    made_whole(dir.path());
    // Then the Ctrl-C ended it, as `script` says of a command that died of SIGINT.
    assert_eq!(code, Some(128 + libc::SIGINT));
}

#[test]
fn sigterm_to_the_worldd_started_during_session_news_checkout_takes_effect_once_all_is_made() {
    let (dir, code) = new_interrupted("", |_, needle| {
        let pid = outer_worldd_pid(needle);
        let sent = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
    });
    eprintln!("{:?}", names_in(dir.path()));
    eprintln!(
        "{}",
        std::fs::read_to_string(dir.path().join("SHOWN")).unwrap()
    );
    made_whole(dir.path());
    assert_eq!(code, Some(128 + libc::SIGTERM));
}

#[test]
fn a_hangup_of_the_worldd_started_during_session_news_checkout_takes_effect_once_all_is_made() {
    let (dir, code) = new_interrupted("", |_, needle| {
        let pid = outer_worldd_pid(needle);
        let sent = Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
    });
    made_whole(dir.path());
    assert_eq!(code, Some(128 + libc::SIGHUP));
}

/// A Ctrl-C the verb was started ignoring stays ignored: the hold does not turn it into one
/// that takes effect at the end.
#[test]
fn a_ctrl_c_session_new_was_started_ignoring_stays_ignored() {
    let (dir, code) = new_interrupted("trap '' INT;", |script, _| {
        script.stdin.as_mut().unwrap().write_all(b"\x03").unwrap();
    });
    made_whole(dir.path());
    assert_eq!(code, Some(0));
}
