//! The operator's `bin` runs as the daemon's user, beside the store and every worktree: one
//! another user could have written or swapped is refused at start, as the daemon refuses such
//! a plugin library. A binary that cannot be started says which file and why, at start and at
//! call time (the archived copy gone or not executable), and a call that would only meet that
//! is declined before anything is spent.

mod common;

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::*;
use handler_kit::serde_json::{json, Value};
use handler_kit::{EffectHandler, Host, Outcome, Plugin, Preflight};
use handler_test_support::LogLines;
use worldd_ailang::{AilangPlugin, CHECK, RUN, UNRUNNABLE};

fn new(bin: &Path, state: &Path) -> Result<(), String> {
    let config = json!({"bin": bin.display().to_string(), "stateDir": state.display().to_string()});
    AilangPlugin::new(config, Host::noop()).map(drop)
}

/// A copy of the stand-in at `dir/ailang`, mode `mode`.
fn copy_standin(dir: &Path, mode: u32) -> PathBuf {
    fs::create_dir_all(dir).unwrap();
    let bin = dir.join("ailang");
    fs::copy(standin(), &bin).unwrap();
    fs::set_permissions(&bin, fs::Permissions::from_mode(mode)).unwrap();
    bin
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

#[test]
fn a_bin_every_user_may_write_is_refused_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let bin = copy_standin(&tmp.path().join("b"), 0o777);
    assert_eq!(
        new(&bin, &state).unwrap_err(),
        format!(
            "ailang config: bin {0}: refusing to run a binary every user may write (mode 0777); `chmod o-w {0}`",
            bin.display()
        )
    );
    // Nothing was archived.
    assert!(!state.join("bin").exists());
    // A group's write is the owner's grant.
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o775)).unwrap();
    new(&bin, &state).unwrap();
}

#[test]
fn a_bin_owned_by_another_user_than_the_daemons_and_root_is_refused_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let bin = copy_standin(&tmp.path().join("b"), 0o755);
    if euid() != 0 {
        eprintln!("skipped: chown to another user needs root");
        return;
    }
    std::os::unix::fs::chown(&bin, Some(65534), None).unwrap();
    assert_eq!(
        new(&bin, &state).unwrap_err(),
        format!(
            "ailang config: bin {}: refusing to run a binary owned by uid 65534, neither this process's user (uid 0) nor root",
            bin.display()
        )
    );
    // Through a symlink the file's owner is what counts.
    let link = tmp.path().join("link");
    symlink(&bin, &link).unwrap();
    assert_eq!(
        new(&link, &state).unwrap_err(),
        format!(
            "ailang config: bin {}: refusing to run a binary owned by uid 65534, neither this process's user (uid 0) nor root",
            link.display()
        )
    );
    std::os::unix::fs::chown(&bin, Some(0), None).unwrap();
    new(&bin, &state).unwrap();
}

#[test]
fn a_bin_in_a_directory_every_user_may_write_without_the_sticky_bit_is_refused_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let dir = tmp.path().join("open");
    let bin = copy_standin(&dir, 0o755);
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
    let refused = |shown: &Path| {
        format!(
            "ailang config: bin {}: refusing it inside {1}, a directory every user may write, without the sticky bit (mode 0777): anyone could swap it for their own; `chmod o-w {1}`",
            shown.display(),
            dir.display()
        )
    };
    assert_eq!(new(&bin, &state).unwrap_err(), refused(&bin));
    // A link from a safe directory to a file in the open one: the file could still be swapped.
    let link = tmp.path().join("link");
    symlink(&bin, &link).unwrap();
    assert_eq!(new(&link, &state).unwrap_err(), refused(&link));
    // A link in the open directory to a safe file: the link could be swapped.
    let safe = copy_standin(&tmp.path().join("safe"), 0o755);
    let planted = dir.join("to-safe");
    symlink(&safe, &planted).unwrap();
    assert_eq!(new(&planted, &state).unwrap_err(), refused(&planted));
    // Sticky, as /tmp: only the owner of an entry may rename or remove it.
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o1777)).unwrap();
    new(&bin, &state).unwrap();
}

#[test]
fn a_bin_whose_interpreter_is_missing_says_so_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let bin = tmp.path().join("ailang");
    let script = "#!/nonexistent/python9 -u\nprint('x')\n";
    fs::write(&bin, script).unwrap();
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
    let archived = state
        .canonicalize()
        .unwrap_or_else(|_| {
            fs::create_dir_all(&state).unwrap();
            state.canonicalize().unwrap()
        })
        .join("bin")
        .join(sha256_hex(script.as_bytes()))
        .join("ailang");
    assert_eq!(
        new(&bin, &state).unwrap_err(),
        format!(
            "ailang plugin: {} --version could not be started: {}: No such file or directory (os error 2); the file is there, so the interpreter its #! line names (/nonexistent/python9) may be missing",
            bin.display(),
            archived.display()
        )
    );
}

fn check() -> Value {
    json!({"op": "ai_check", "path": "a.ail"})
}

fn run() -> Value {
    json!({"op": "run", "path": "a.ail", "caps": ["IO"]})
}

/// The archived copy removed, or its execute bit taken, while the daemon serves: the call is
/// declined before anything is spent (the agent is told nothing ran), the log names the file
/// and the fix, and a call that reaches `execute` anyway fails naming the file.
#[test]
fn an_archived_binary_gone_or_not_executable_is_declined_and_the_log_names_it_and_the_fix() {
    let logs = Arc::new(LogLines::default());
    let f = Fixture::hosted(json!({}), Host::from_services(logs.clone()));
    f.put("a.ail", HELLO);
    let archived = f.handler.binary().to_path_buf();
    assert!(matches!(
        f.handler.preflight(&f.request(CHECK, check())),
        Preflight::Proceed
    ));

    for (what, errno) in [
        ("chmod", "Permission denied (os error 13)"),
        ("rm", "No such file or directory (os error 2)"),
    ] {
        if what == "chmod" {
            fs::set_permissions(&archived, fs::Permissions::from_mode(0o444)).unwrap();
        } else {
            fs::remove_file(&archived).unwrap();
        }
        for (effect, payload) in [(CHECK, check()), (RUN, run())] {
            match f.handler.preflight(&f.request(effect, payload.clone())) {
                Preflight::Decline(answer) => assert_eq!(
                    Value::Object(answer),
                    json!({"ok": false, "refused": UNRUNNABLE})
                ),
                other => panic!("{what} {effect}: not declined: {other:?}"),
            }
            let logged = logs.lines();
            let line = format!(
                "error: ailang: {effect} declined: the archived binary {} cannot be run: {errno}; restart worldd to archive bin again",
                archived.display()
            );
            assert!(logged.contains(&line), "{logged:?}\nwanted: {line}");
            // A daemon that skips the preflight: the failure names the file and the fix.
            let message = match f.exec(effect, payload) {
                Outcome::Failed { message } => message,
                other => panic!("{what} {effect}: {other:?}"),
            };
            assert_eq!(
                message,
                format!(
                    "broker: {effect} failed: the policy summary failed: ailang policy-tool could not be started: {}: {errno}; restart worldd to archive bin again; nothing ran",
                    archived.display()
                )
            );
        }
    }
    assert_eq!(f.log(), Vec::<Value>::new());
    assert_eq!(UNRUNNABLE, "the ailang binary this daemon runs is missing or not executable; an operator must restart worldd to archive it again");
}
