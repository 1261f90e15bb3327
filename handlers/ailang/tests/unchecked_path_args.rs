//! Path arguments the walk beneath the worktree cannot vouch for, and values the binary would
//! read as options.
//!
//! - A symlink chain whose expansion is longer than PATH_MAX: the walk gives up (or its `lstat`
//!   of the whole expanded path fails, `file name too long`) while the kernel, following the
//!   links one at a time for the binary, reaches a file outside the worktree. Such a path was
//!   let through as "the binary's to answer"; a walk that does not finish now refuses the
//!   argument (a loop too).
//! - A hard link in the worktree to a file outside it (or in `.git`): no walk of names sees
//!   it, and the Workspace plugin refuses to read it; the Ailang tools read it for the agent.
//!   A path argument naming a file with more than one link is now refused in the Workspace
//!   plugin's words, unless the operator sets `allowHardLinks`.
//! - `module` / `query` values beginning with `-` reached the binary's command line, where
//!   they read as options; they are now declined.

mod common;

use std::fs;
use std::path::Path;

use common::*;
use handler_kit::serde_json::{json, Value};
use handler_kit::{EffectHandler, Preflight};
use worldd_ailang::{CHECK, CLI, DISCOVER, RUN};

const SECRET: &str = "SECRET-OUTSIDE";

/// A directory name of 200 bytes: 21 of them pass PATH_MAX.
fn long_name() -> String {
    "d".repeat(200)
}

fn chain(depth: usize) -> String {
    vec![long_name(); depth].join("/")
}

/// The worktree of `f` with real directories 21 deep (each name 200 bytes, more than
/// PATH_MAX in all) and `l0 -> D^10/l1`, `D^10/l1 -> D^11/esc`, `D^21/esc -> <outside>`:
/// every link target is under PATH_MAX, the whole expansion is not.
fn plant_long_chain(f: &Fixture) {
    let outside = f.tmp.path().join("outside");
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("creds.ail"), SECRET).unwrap();
    // The first ten levels in place; the other eleven made beside (a path under PATH_MAX)
    // and moved under them.
    let top = f.root.join(chain(10));
    fs::create_dir_all(&top).unwrap();
    let beside = f.tmp.path().join("b");
    fs::create_dir_all(beside.join(chain(11))).unwrap();
    fs::rename(beside.join(long_name()), top.join(long_name())).unwrap();
    let link = |target: String, at: &Path| std::os::unix::fs::symlink(target, at).unwrap();
    link(format!("{}/l1", chain(10)), &f.root.join("l0"));
    link(format!("{}/esc", chain(11)), &top.join("l1"));
    // `esc` at depth 21, whose path is too long to name from here: made beside, moved down.
    let made = beside.join("esc");
    link(outside.join("creds.ail").display().to_string(), &made);
    move_into_bottom(&f.root, &made);
}

/// Move `made` into the deepest directory of the 21-level chain under `root`, whose path is
/// too long for one system call: go down with relative opens (`openat`) and `renameat`.
fn move_into_bottom(root: &Path, made: &Path) {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let name = CString::new(long_name()).unwrap();
    let root_c = CString::new(root.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path; the descriptor is closed below.
    let mut fd = unsafe { libc::open(root_c.as_ptr(), libc::O_DIRECTORY | libc::O_RDONLY) };
    assert!(fd >= 0);
    for _ in 0..21 {
        // SAFETY: `fd` is an open directory, `name` NUL-terminated.
        let next = unsafe {
            libc::openat(
                fd,
                name.as_ptr(),
                libc::O_DIRECTORY | libc::O_RDONLY | libc::O_NOFOLLOW,
            )
        };
        assert!(next >= 0, "{}", std::io::Error::last_os_error());
        // SAFETY: `fd` is ours and no longer used.
        unsafe { libc::close(fd) };
        fd = next;
    }
    let from = CString::new(made.as_os_str().as_bytes()).unwrap();
    let esc = CString::new("esc").unwrap();
    // SAFETY: NUL-terminated paths; `fd` is an open directory.
    let r = unsafe { libc::renameat(libc::AT_FDCWD, from.as_ptr(), fd, esc.as_ptr()) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    // SAFETY: `fd` is ours.
    unsafe { libc::close(fd) };
}

fn declined(f: &Fixture, effect: &str, payload: Value) -> Value {
    match f.handler.preflight(&f.request(effect, payload.clone())) {
        Preflight::Decline(answer) => Value::Object(answer),
        other => panic!("{effect} {payload}: not declined: {other:?}"),
    }
}

#[test]
fn a_path_argument_whose_symlink_chain_is_too_long_to_check_is_refused_and_the_binary_never_runs() {
    let f = Fixture::new();
    plant_long_chain(&f);
    // The kernel follows the chain out of the worktree: what the binary would have read.
    assert_eq!(fs::read_to_string(f.root.join("l0")).unwrap(), SECRET);
    let why =
        "argument \"path\" \"l0\": the path's links expand past 4096 bytes; cannot be checked; nothing ran";
    for (effect, payload) in [
        (CLI, json!({"op": "fmt", "path": "l0"})),
        (CHECK, json!({"op": "ai_check", "path": "l0"})),
        (RUN, json!({"op": "run", "path": "l0"})),
    ] {
        assert_eq!(
            declined(&f, effect, payload.clone()),
            json!({"ok": false, "refused": why}),
            "{effect}"
        );
        // A daemon that skips the preflight still runs nothing.
        assert_eq!(
            f.failed(effect, payload),
            format!("broker: {effect} refused: {why}")
        );
    }
    assert!(f.log().is_empty(), "the binary ran: {:?}", f.log());
}

/// A symlink loop cannot be checked either: refused, where the binary was left to answer it.
#[test]
fn a_path_argument_through_a_symlink_loop_is_refused_and_the_binary_never_runs() {
    let f = Fixture::new();
    std::os::unix::fs::symlink("loop2", f.root.join("loop1")).unwrap();
    std::os::unix::fs::symlink("loop1", f.root.join("loop2")).unwrap();
    assert_eq!(
        declined(&f, CLI, json!({"op": "fmt", "path": "loop1/x.ail"})),
        json!({"ok": false, "refused": "argument \"path\" \"loop1/x.ail\": path \"loop1/x.ail\" cannot be checked: too many levels of symbolic links; nothing ran"})
    );
    assert!(f.log().is_empty());
}

#[test]
fn a_path_argument_naming_a_hard_linked_file_is_refused_in_the_workspace_plugins_words() {
    let f = Fixture::new();
    let outside = f.tmp.path().join("creds.txt");
    fs::write(&outside, SECRET).unwrap();
    fs::hard_link(&outside, f.root.join("hard.ail")).unwrap();
    f.put(
        ".git/config",
        &format!("[remote \"origin\"]\n\turl = https://user:{SECRET}@example.com/r.git\n"),
    );
    fs::hard_link(f.root.join(".git/config"), f.root.join("gconf.ail")).unwrap();
    f.put("hello.ail", HELLO);
    let links = |path: &str| {
        format!(
            "argument \"path\" \"{path}\": the file has 2 hard links; a hard link can name a file outside the worktree, so this policy reads only files with one link (the operator can allow them with allowHardLinks)"
        )
    };
    for path in ["hard.ail", "gconf.ail"] {
        for (effect, payload) in [
            (CLI, json!({"op": "fmt", "path": path})),
            (CLI, json!({"op": "check", "path": path})),
            (CHECK, json!({"op": "ai_check", "path": path})),
            (RUN, json!({"op": "run", "path": path})),
        ] {
            assert_eq!(
                declined(&f, effect, payload.clone()),
                json!({"ok": false, "refused": links(path)}),
                "{effect} {payload}"
            );
            let failed = f.failed(effect, payload);
            assert_eq!(failed, format!("broker: {effect} refused: {}", links(path)));
        }
    }
    assert!(f.log().is_empty(), "the binary ran: {:?}", f.log());
    // A file with one link is an ordinary argument.
    let out = f.ok(CLI, json!({"op": "fmt", "path": "hello.ail"}));
    assert_eq!(out["ok"], true, "{out:?}");

    // The operator's switch, as the Workspace plugin's: the binary gets the file.
    let g = Fixture::with(json!({"allowHardLinks": true}));
    fs::hard_link(&outside, g.root.join("hard.ail")).unwrap();
    let request = g.request(CLI, json!({"op": "fmt", "path": "hard.ail"}));
    assert!(matches!(g.handler.preflight(&request), Preflight::Proceed));
    let out = g.ok(CLI, json!({"op": "fmt", "path": "hard.ail"}));
    assert_eq!(out["stdout"], format!("{SECRET}\n"), "{out:?}");
}

#[test]
fn a_module_or_query_beginning_with_a_dash_is_declined_and_never_reaches_the_binary() {
    let f = Fixture::new();
    let option = |key: &str, value: &str| {
        format!(
            "argument \"{key}\" \"{value}\": begins with \"-\", which the ailang command line would read as an option; nothing ran"
        )
    };
    let cases = [
        (
            CLI,
            json!({"op": "iface", "module": "--policy=/tmp/p.toml"}),
            option("module", "--policy=/tmp/p.toml"),
        ),
        (
            CLI,
            json!({"op": "docs_search", "query": "-o/etc/passwd"}),
            option("query", "-o/etc/passwd"),
        ),
        (
            DISCOVER,
            json!({"op": "examples_search", "query": "--write"}),
            option("query", "--write"),
        ),
        (
            CLI,
            json!({"op": "test", "package": "-x"}),
            option("package", "-x"),
        ),
        (
            CHECK,
            json!({"op": "ai_check", "path": "-h.ail"}),
            option("path", "-h.ail"),
        ),
    ];
    for (effect, payload, why) in cases {
        assert_eq!(
            declined(&f, effect, payload.clone()),
            json!({"ok": false, "refused": why}),
            "{payload}"
        );
        assert_eq!(
            f.failed(effect, payload),
            format!("broker: {effect} refused: {why}")
        );
    }
    assert!(f.log().is_empty(), "the binary ran: {:?}", f.log());
    // A dash inside a value is fine.
    let request = f.request(CLI, json!({"op": "docs_search", "query": "a-b"}));
    assert!(matches!(f.handler.preflight(&request), Preflight::Proceed));
}

/// The worktree was taken by its path (`canonicalize`, then the child's cwd by path): one
/// swapped for a symlink after the daemon checked it led every child, and the path walk, to
/// wherever the link points. It is now opened once without following a symlink at its place
/// and the child starts in that descriptor: a symlinked worktree fails the call, nothing runs.
#[test]
fn a_worktree_swapped_for_a_symlink_fails_the_call_and_no_child_runs_where_it_leads() {
    let f = Fixture::new();
    let elsewhere = f.tmp.path().join("elsewhere");
    fs::create_dir_all(&elsewhere).unwrap();
    fs::write(elsewhere.join("hello.ail"), HELLO).unwrap();
    fs::remove_dir_all(&f.root).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &f.root).unwrap();
    for (effect, payload) in [
        (CLI, json!({"op": "fmt", "path": "hello.ail"})),
        (CHECK, json!({"op": "ai_check", "path": "hello.ail"})),
        (RUN, json!({"op": "run", "path": "hello.ail"})),
    ] {
        assert_eq!(
            f.failed(effect, payload),
            format!("broker: {effect} failed: the episode's worktree is a symbolic link; a worktree must be a directory in the workspace root itself")
        );
    }
    assert!(f.log().is_empty(), "the binary ran: {:?}", f.log());
}

/// The child starts in the opened worktree, by descriptor: its working directory is the
/// worktree (the stand-in logs it), as it was by path.
#[test]
fn every_child_starts_in_the_worktree_opened_by_descriptor() {
    let f = Fixture::new();
    f.put("hello.ail", HELLO);
    let out = f.ok(RUN, json!({"op": "run", "path": "hello.ail"}));
    assert_eq!(out["admitted"], true, "{out:?}");
    let real = f.root.canonicalize().unwrap().display().to_string();
    let log = f.log();
    assert!(!log.is_empty());
    for line in log {
        assert_eq!(line["cwd"], real.as_str(), "{line}");
    }
}
