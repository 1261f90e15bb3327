//! The command line's second round of edges, through the real binary: a session file saved
//! with a byte-order mark, `allowed_hosts` entries and `--addr` values told what is wrong with
//! them, quickstart's checks before its question (a linked or file worktree, a store path in
//! the way, an unwritable parent), two quickstarts on one `--dir`, a signal just after the
//! answer, and a restored backup copy that was never checked.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

/// Notepad saves "UTF-8" with a byte-order mark first: such a session file was "not a
/// session credential". The mark is skipped, as surrounding whitespace is.
#[test]
fn a_session_file_starting_with_a_byte_order_mark_is_read() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let file = d.dir.path().join("bom.session");
    std::fs::write(&file, format!("\u{feff}{token}\r\n")).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let (code, out, err) = worldd(
        &["budget", "--addr", &d.url(""), "--session", path_str(&file)],
        None,
    );
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    assert!(out.contains("Workspace.Read"), "{out}");
    // `session revoke FILE` reads it the same way.
    let (code, out, err) = worldd(
        &[
            "session",
            "revoke",
            "--db",
            path_str(&d.db()),
            path_str(&file),
        ],
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
}

/// An internationalised name, a name with a trailing dot and a bare IPv6 address were each
/// told "give names without scheme or port", though none has either: each is told its rule.
#[test]
fn allowed_host_shapes_are_told_what_is_wrong_with_them_not_scheme_or_port() {
    let dir = tempfile::tempdir().unwrap();
    for (entry, why) in [
        (
            "bücher.de",
            "give an internationalised name in its ASCII (xn--) form, as clients send it in Host",
        ),
        (
            "localhost.",
            "give it without the trailing dot, \"localhost\"",
        ),
        (
            "example.com.",
            "give it without the trailing dot, \"example.com\"",
        ),
        ("::1", "bracket an IPv6 address, \"[::1]\""),
        ("fe80::1%eth0", "IPv6 zone ids are not supported"),
    ] {
        let r = refused_start(
            &[
                "--db",
                "db",
                "--workspace-root",
                "wt",
                "--bind",
                "127.0.0.1:0",
                "--allowed-host",
                entry,
            ],
            dir.path(),
        );
        assert_eq!(r.code, Some(2), "{}", r.stderr);
        assert_eq!(
            r.line,
            format!("worldd: daemon startup failed at config: [server] allowed_hosts: {entry:?} is not a host name: {why}"),
            "{}",
            r.stderr
        );
        assert_eq!(names_in(dir.path()), Vec::<String>::new(), "{entry}");
    }
}

/// `\` is read as `/` by the URL parser (a path before the route: "no route for GET
/// //v1/head"), `http:/HOST` was taken for a host named `http:`, and `http://HOST:` went to
/// port 80: each is refused with the form wanted.
#[test]
fn an_address_with_a_backslash_one_slash_or_an_empty_port_is_refused() {
    for (addr, why) in [
        (
            "http://127.0.0.1:7644\\",
            "a backslash has no place in the address",
        ),
        ("http:/127.0.0.1:7644", "the scheme wants two slashes"),
        ("HTTP:127.0.0.1:7644", "the scheme wants two slashes"),
        ("http://127.0.0.1:", "the port is empty"),
        ("127.0.0.1:", "the port is empty"),
    ] {
        let (code, out, err) = worldd(&["health", "--addr", addr], None);
        assert_eq!(
            (code, out.as_str(), err.as_str()),
            (
                1,
                "",
                format!("worldd: --addr {addr}: {why}: want http://HOST:PORT, e.g. http://127.0.0.1:7644\n").as_str()
            ),
            "{addr}"
        );
    }
}

/// Quickstart minted for a worktree that is a symbolic link, said "episode demo with worktree
/// …", and handed over a credential every workspace call of which is refused. It is refused
/// before the question, as `session new` refuses it, and nothing is made.
#[test]
fn quickstart_refuses_a_worktree_that_is_a_symbolic_link_before_the_question() {
    let dir = tempfile::tempdir().unwrap();
    let world = dir.path().join("w");
    std::fs::create_dir_all(world.join("worktrees")).unwrap();
    std::fs::create_dir(dir.path().join("elsewhere")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("elsewhere"), world.join("worktrees/demo")).unwrap();
    let (code, shown) = quickstart_at_terminal(&world, "", b"y\n");
    assert_eq!(code, 1, "{shown}");
    assert_eq!(
        said(&shown, "y"),
        [format!(
            "worldd: worktree {} is a symbolic link, and a worktree must be a directory in the workspace root itself (a daemon refuses every call in a linked one); remove the link first, or put the directory it names there in its place, then run quickstart --episode demo again",
            world.join("worktrees/demo").display()
        )]
    );
    assert_eq!(names_in(&world), ["worktrees"]);
}

/// A file at `worktrees/<episode>` or at `db`, or a `--dir` under a directory this user cannot
/// write, was asked about, then failed naming another path (`…/worktrees: File exists`, or
/// `…/q/worktrees: Permission denied` for a directory that did not exist). Each is said before
/// the question, naming what is in the way.
#[test]
fn quickstart_says_what_is_in_its_way_before_the_question_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let world = dir.path().join("w");
    std::fs::create_dir_all(world.join("worktrees")).unwrap();
    std::fs::write(world.join("worktrees/demo"), "").unwrap();
    let (code, shown) = quickstart_at_terminal(&world, "", b"y\n");
    assert_eq!(code, 1, "{shown}");
    assert_eq!(
        said(&shown, "y"),
        [format!(
            "worldd: {} is a file, not a worktree (a worktree is a directory); remove it first",
            world.join("worktrees/demo").display()
        )]
    );

    let world = dir.path().join("x");
    std::fs::create_dir(&world).unwrap();
    std::fs::write(world.join("db"), "").unwrap();
    let (code, shown) = quickstart_at_terminal(&world, "", b"y\n");
    assert_eq!(code, 1, "{shown}");
    assert_eq!(
        said(&shown, "y"),
        [format!(
            "worldd: {} is not a directory, and quickstart puts the store there; remove it first, or give another --dir",
            world.join("db").display()
        )]
    );
    assert_eq!(names_in(&world), ["db"]);

    // Not writable by this user: as root, the check is made as `nobody`.
    let locked = dir.path().join("ro");
    std::fs::create_dir(&locked).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o555)).unwrap();
    }
    let as_nobody = unsafe_is_root();
    let target = locked.join("q/a");
    let cmd = format!(
        "{}{WORLDD} quickstart --dir {} --print-only --bind 127.0.0.1:7999",
        if as_nobody {
            "runuser -u nobody -- "
        } else {
            ""
        },
        target.display()
    );
    let (code, shown) = at_terminal(&cmd, b"y\n");
    assert_eq!(code, 1, "{shown}");
    assert_eq!(
        said(&shown, "y"),
        [format!(
            "worldd: cannot make {}: the directory {} is not writable by you (Permission denied (os error 13))",
            target.join("worktrees/demo").display(),
            locked.display()
        )]
    );
    assert_eq!(names_in(&locked), Vec::<String>::new());
}

/// Whether this process runs as root.
fn unsafe_is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// `quickstart ARGS` at a terminal under `strace`, which holds each mkdir of the traced
/// process for `delay_us` before it runs: the window after the answer, widened. Started, its
/// question answered `y`; the child returned.
fn slowed_quickstart(world: &Path, episode: &str, delay_us: u32) -> std::process::Child {
    let cmd = format!(
        "strace -f -qq -o /dev/null -e trace=mkdir,mkdirat -e inject=mkdir,mkdirat:delay_enter={delay_us} {WORLDD} quickstart --dir {} --episode {episode} --print-only --bind 127.0.0.1:7999",
        world.display()
    );
    let (mut child, _shown) = asking_at_terminal(&cmd);
    use std::io::Write;
    child.stdin.as_mut().unwrap().write_all(b"y\n").unwrap();
    child
}

/// Two quickstarts on one `--dir`, answered at once: the one that failed (its worktree could
/// not be made) removed with `remove_dir_all` the store the other had made and minted into,
/// for it had noted the store absent before its answer. A run removes only what its own mkdir
/// made.
#[test]
fn a_failing_quickstart_never_removes_the_store_another_quickstart_made() {
    if !have_strace() {
        eprintln!("skipped: no strace");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let world = dir.path().join("w");
    std::fs::create_dir_all(world.join("worktrees")).unwrap();
    // `bad` answers with no store there, and its mkdirs are held 3 s each.
    let mut bad = slowed_quickstart(&world, "bad", 3_000_000);
    std::thread::sleep(Duration::from_millis(500));
    // Meanwhile the other run makes the store and mints into it.
    let (code, shown) = quickstart_at_terminal(&world, "", b"y\n");
    assert_eq!(code, 0, "{shown}");
    assert!(world.join("db/data.mdb").is_file());
    // And `bad`'s worktree cannot be made: a file where its parent was.
    std::fs::rename(world.join("worktrees"), dir.path().join("kept")).unwrap();
    std::fs::write(world.join("worktrees"), "").unwrap();
    drop(bad.stdin.take());
    let status = bad.wait().unwrap();
    assert!(!status.success());
    assert!(
        world.join("db/data.mdb").is_file(),
        "the store the other run made is gone: {:?}",
        names_in(&world)
    );
    assert!(world.join("demo.session").is_file());
}

/// Ctrl-C, SIGTERM or a closed terminal in the moment after `y` (store made, credential not
/// yet written) killed quickstart with the store and worktree left and no credential, and the
/// next run's `n` kept them. The signals wait until the credential is written.
#[test]
fn a_signal_just_after_quickstarts_answer_leaves_no_store_without_a_credential() {
    if !have_strace() {
        eprintln!("skipped: no strace");
        return;
    }
    for signal in ["-INT", "-TERM", "-HUP"] {
        let dir = tempfile::tempdir().unwrap();
        let world = dir.path().join("w");
        let mut child = slowed_quickstart(&world, "demo", 300_000);
        // Once the first directory is on its way, the signal.
        let until = std::time::Instant::now() + Duration::from_secs(20);
        while !world.exists() && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        let pid = worldd_pid(path_str(&world));
        let sent = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        drop(child.stdin.take());
        child.wait().unwrap();
        let names = names_in(&world);
        assert_eq!(names, ["db", "demo.session", "worktrees"], "{signal}");
        assert!(world.join("db/data.mdb").is_file(), "{signal}");
        assert!(world.join("worktrees/demo").is_dir(), "{signal}");
    }
}

/// A backup copy restored with `.unverified` still in it (its check never passed) was served
/// and doctored without a word. Both now warn, naming the marker and what to do.
#[test]
fn serve_and_doctor_warn_of_a_store_that_still_holds_unverified() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let dir = d.halt();
    let db = dir.path().join("db");
    std::fs::write(db.join(".unverified"), "").unwrap();
    let warning = format!(
        "{} holds .unverified: it is a backup copy that was never checked (its backup was interrupted, or its check failed), so it may be incomplete; restore from another backup, or run worldd doctor --db {} on it with no daemon serving and remove .unverified only if it reports the store consistent",
        db.display(),
        db.display()
    );
    let (code, out, err) = worldd(&["doctor", "--db", path_str(&db)], None);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(err, format!("worldd doctor: warning: {warning}\n"), "{out}");
    let d = Daemon::start_in(dir, &["worldd_workspace"], &[]);
    d.wait_for_log(&warning);
}

/// A ceiling below what the store already holds: operators.md says the daemon starts and
/// refuses new calls, but a start that had to publish its plugins' tools (a store never
/// served, or one whose plugin set changed) failed at `registry-bootstrap`, for the map at the
/// file's size had no page left for it. It starts, and refuses new calls.
#[test]
fn a_ceiling_below_what_the_store_holds_still_starts_when_it_must_publish_its_tools() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    {
        // Grown past 1 MiB by credentials, never served: no tool published yet.
        let store = broker_core::store::Store::create(&db).unwrap();
        let grants: Vec<_> = (0..200)
            .map(|i| format!("Grown.Effect{i}=worktree:5").parse().unwrap())
            .collect();
        while std::fs::metadata(db.join("data.mdb")).unwrap().len() < (1 << 20) + (128 << 10) {
            broker_core::session::mint(&store, "grown", grants.clone(), 3600, 0).unwrap();
        }
    }
    let d = Daemon::start_in(dir, &["worldd_workspace"], &["--store-ceiling", "1MiB"]);
    d.wait_for_log("store full: new client calls are refused");
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let refused = a2a(
        &d,
        &token,
        "t1",
        "ailang-read",
        serde_json::json!({"path": "a"}),
    );
    assert_eq!(refused["error"]["code"], -32603, "{refused}");
    assert_eq!(
        refused["error"]["message"],
        "the world store is full; new calls are refused until an operator makes room",
        "{refused}"
    );
}

/// A quickstart that made the store and then failed to write its credential removed the store
/// whole, though another quickstart on the same `--dir` had minted into it meanwhile. A store
/// holding a credential this run did not mint stays; one holding none goes, as before.
#[test]
fn a_failing_quickstart_keeps_the_store_it_made_once_another_minted_into_it() {
    if !have_strace() {
        eprintln!("skipped: no strace");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let world = dir.path().join("alone");
    let (code, shown) = failing_at_delivery(&world, false);
    assert_eq!(code, 1, "{shown}");
    assert!(
        shown.contains(&format!(
            "; quickstart removed what it had just made ({}, {})",
            world.join("db").display(),
            world.join("worktrees/a").display()
        )),
        "{shown}"
    );
    assert_eq!(names_in(&world), ["a.session", "worktrees"]);

    let world = dir.path().join("w");
    let (code, shown) = failing_at_delivery(&world, true);
    assert_eq!(code, 1, "{shown}");
    let store = broker_core::store::Store::open(&world.join("db"), Default::default())
        .unwrap_or_else(|e| panic!("the store another run minted into is gone: {e}"));
    let listed = broker_core::session::list(&store).unwrap().sessions;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].episode, "b");
}

/// `quickstart --episode a` into `world` (its `worktrees` made first), answered `y`, whose
/// credential file turns into a directory once the store is made; with `other`, a credential
/// of episode `b` is minted into that store first. (exit code, what the terminal showed.)
fn failing_at_delivery(world: &Path, other: bool) -> (i32, String) {
    use std::io::Read;
    std::fs::create_dir_all(world.join("worktrees")).unwrap();
    let token_file = world.join("a.session");
    // Every look at `a.session` held 2 s: the last, when the credential is written, comes
    // after the store is made.
    let cmd = format!(
        "strace -f -qq -o /dev/null -P {} -e trace=statx,openat -e inject=statx,openat:delay_enter=2000000 {WORLDD} quickstart --dir {} --episode a --print-only --bind 127.0.0.1:7999",
        token_file.display(),
        world.display()
    );
    let mut child = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        child.stdin.as_mut().unwrap().write_all(b"y\n").unwrap();
    }
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while !world.join("db/data.mdb").is_file() && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    if other {
        let store = broker_core::store::Store::open(&world.join("db"), Default::default()).unwrap();
        broker_core::session::mint(
            &store,
            "b",
            vec!["Workspace.Read=worktree:5".parse().unwrap()],
            3600,
            0,
        )
        .unwrap();
    }
    std::fs::create_dir(&token_file).unwrap();
    drop(child.stdin.take());
    let mut shown = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut shown)
        .unwrap();
    let status = child.wait().unwrap();
    (status.code().unwrap_or(-1), shown)
}
