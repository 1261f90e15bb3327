//! Local users against the directories worldd makes and trusts: the store (where plugins keep
//! their state, the ailang plugin's archived binary among it, which the daemon runs), and the
//! workspace root with each episode's worktree. Each test is named for the attack it pins.
//!
//! Under `umask 000` they were all made 0777: `nobody` swapped `<db>/plugin-state` for a
//! directory of theirs holding a script at the archived binary's path, which the next
//! `ailang-run` executed as the daemon's user, and swapped a worktree for theirs, which the
//! agent then wrote into. Now they are made 0700 whatever the umask, and an existing one
//! another user could have written is refused by the rule the daemon applies to plugin
//! libraries and their directory.

mod common;

use std::os::unix::fs::{chown, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().mode() & 0o7777
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// `command` run with `umask 000`, the loosest there is (set in the child, before `exec`).
fn under_umask_000(command: &mut Command) -> &mut Command {
    // SAFETY: umask is async-signal-safe and cannot fail.
    unsafe {
        command.pre_exec(|| {
            libc::umask(0);
            Ok(())
        })
    }
}

/// `worldd ARGS` run in `cwd` (no terminal) until it exits: (exit code, stderr).
fn verb(cwd: &Path, args: &[&str]) -> (Option<i32>, String) {
    let out = run_to_exit(
        Command::new(WORLDD).args(args).current_dir(cwd),
        Duration::from_secs(60),
    );
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `sh -c SCRIPT` run as `nobody` in `cwd`: whether it succeeded.
fn as_nobody(cwd: &Path, script: &str) -> bool {
    Command::new("runuser")
        .args(["-u", "nobody", "--", "sh", "-c", script])
        .current_dir(cwd)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
}

/// The serve flags of these tests: a free port, the workspace plugin, the store `db` and the
/// workspace root `root`.
fn serve_args(plugins: &Path, db: &Path, root: &Path) -> Vec<String> {
    [
        "--bind",
        "127.0.0.1:0",
        "--plugin-dir",
        path_str(plugins),
        "--db",
        path_str(db),
        "--workspace-root",
        path_str(root),
    ]
    .map(str::to_owned)
    .to_vec()
}

/// A store made in `db` (by this process, so 0700 and its own).
fn store_at(db: &Path) {
    drop(broker_core::store::Store::create(db).unwrap());
}

#[test]
fn a_local_user_cannot_plant_a_binary_in_the_store_created_under_a_loose_umask() {
    let dir = tempfile::tempdir().unwrap();
    // Open to every user, as a checkout or a home directory often is: only the modes worldd
    // gives what it makes stand between them and the store.
    set_mode(dir.path(), 0o755);
    let plugins = plugin_dir_with(dir.path(), &["worldd_workspace"]);
    // The defaults: `.world/db` and `.world/worktrees`, made by `serve`.
    let mut serve = Command::new(WORLDD);
    serve
        .args(["serve", "--bind", "127.0.0.1:0", "--plugin-dir"])
        .arg(&plugins)
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    under_umask_000(&mut serve);
    let daemon = Daemon::spawn(dir, serve);
    let d = daemon.dir.path().to_path_buf();
    // `session new` makes carol's worktree, under the same umask, at a terminal that says y.
    let mut script = Command::new("script");
    script
        .args([
            "-qec",
            &format!("{WORLDD} session new carol --grant Workspace.Read=worktree:5"),
            "/dev/null",
        ])
        .current_dir(&d)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    under_umask_000(&mut script);
    let mut child = script.spawn().unwrap();
    {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(b"y\n").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    for made in [
        ".world",
        ".world/db",
        ".world/worktrees",
        ".world/worktrees/carol",
    ] {
        assert_eq!(
            mode_of(&d.join(made)),
            0o700,
            "{made} was made under umask 000"
        );
    }
    if !is_root() {
        eprintln!("*** not root: the attack as `nobody` is not run, only the modes checked ***");
        return;
    }
    // The attack: swap the plugin state for one's own, or plant the archived binary's path in
    // it; take carol's worktree, or read it.
    for attack in [
        "mv .world/db/plugin-state .world/db/gone",
        "mkdir -p .world/db/plugin-state/ailang/bin/planted",
        "mkdir .world/db/plugin-state",
        "mv .world/worktrees/carol .world/worktrees/taken",
        "mkdir .world/worktrees/dave",
        "ls .world/worktrees/carol",
    ] {
        assert!(
            !as_nobody(&d, attack),
            "nobody could: {attack} (modes: .world {:04o}, db {:04o}, worktrees {:04o})",
            mode_of(&d.join(".world")),
            mode_of(&d.join(".world/db")),
            mode_of(&d.join(".world/worktrees"))
        );
    }
    drop(daemon);
}

#[test]
fn a_store_or_plugin_state_another_user_could_write_is_refused_by_serve_and_the_verbs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let plugins = plugin_dir_with(d, &["worldd_workspace"]);
    let db = d.join("db");
    let root = d.join("wt");
    store_at(&db);
    let args = serve_args(&plugins, &db, &root);
    let refused = |what: &str, path: &Path, why: &str| {
        let refusal = refused_start(&args, d);
        assert_eq!(refusal.code, Some(2), "{}", refusal.stderr);
        let expected = format!(
            "worldd: daemon startup failed at store-open: {what} {}: {why}",
            path.display()
        );
        assert!(
            refusal.line.starts_with(&expected),
            "expected {expected:?}…\nprinted {:?}",
            refusal.line
        );
        // The verbs that open the store say the same.
        let (code, err) = verb(d, &["session", "list", "--db", path_str(&db)]);
        assert_eq!(code, Some(2), "{err}");
        assert!(
            err.contains(&format!("{what} {}: {why}", path.display())),
            "{err}"
        );
        refusal.line
    };

    // Every user may write the store.
    set_mode(&db, 0o777);
    let line = refused(
        "store",
        &db,
        "refusing a directory every user may write (mode 0777)",
    );
    assert!(
        line.ends_with(&format!("`chmod 700 {}`", db.display())),
        "{line}"
    );
    // A sticky bit does not help: anyone may still make `plugin-state` there.
    set_mode(&db, 0o1777);
    refused(
        "store",
        &db,
        "refusing a directory every user may write (mode 1777)",
    );
    set_mode(&db, 0o700);

    // Every user may write the plugin state (where the ailang binary the daemon runs is kept).
    let state = db.join("plugin-state");
    std::fs::create_dir(&state).unwrap();
    set_mode(&state, 0o777);
    refused(
        "plugin state",
        &state,
        "refusing a directory every user may write (mode 0777)",
    );
    set_mode(&state, 0o700);

    // The store sits where anyone may swap it.
    let shared = d.join("shared");
    std::fs::create_dir(&shared).unwrap();
    set_mode(&shared, 0o777);
    let swappable = shared.join("db");
    store_at(&swappable);
    let swap_args = serve_args(&plugins, &swappable, &root);
    let refusal = refused_start(&swap_args, d);
    assert_eq!(refusal.code, Some(2), "{}", refusal.stderr);
    assert_eq!(
        refusal.line,
        format!(
            "worldd: daemon startup failed at store-open: store {}: refusing it inside {}, a directory every user may write, without the sticky bit (mode 0777): anyone could swap it for their own; `chmod o-w {}`",
            swappable.display(),
            shared.display(),
            shared.display()
        )
    );

    // A group's write is the owner's grant, as for a plugin library: not refused.
    set_mode(&db, 0o770);
    let (code, err) = verb(d, &["session", "list", "--db", path_str(&db)]);
    assert_eq!(code, Some(0), "{err}");
    set_mode(&db, 0o700);

    if !is_root() {
        eprintln!("*** not root: a store and plugin state owned by another user are not made ***");
        return;
    }
    // `nobody` renamed the plugin state away and made their own.
    chown(&state, Some(65534), None).unwrap();
    let line = refused(
        "plugin state",
        &state,
        "refusing a directory owned by uid 65534, neither this process's user (uid 0) nor root (mode 0700)",
    );
    assert!(
        line.ends_with(&format!(
            "run worldd as its owner, or if what it holds is yours, `chown -R 0 {}`",
            state.display()
        )),
        "{line}"
    );
    chown(&state, Some(0), None).unwrap();
    chown(&db, Some(65534), None).unwrap();
    refused(
        "store",
        &db,
        "refusing a directory owned by uid 65534, neither this process's user (uid 0) nor root (mode 0700)",
    );
}

#[test]
fn a_workspace_root_another_user_could_write_is_refused_by_serve_and_session_new() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let plugins = plugin_dir_with(d, &["worldd_workspace"]);
    let db = d.join("db");
    store_at(&db);
    let refused = |root: &Path, why: &str| {
        let refusal = refused_start(&serve_args(&plugins, &db, root), d);
        assert_eq!(refusal.code, Some(2), "{}", refusal.stderr);
        let expected = format!(
            "worldd: daemon startup failed at config: workspace root {}: {why}",
            root.display()
        );
        assert!(
            refusal.line.starts_with(&expected),
            "expected {expected:?}…\nprinted {:?}",
            refusal.line
        );
        // `session new` refuses it before it asks, and makes no worktree there.
        let (code, err) = verb(
            d,
            &[
                "session",
                "new",
                "carol",
                "--db",
                path_str(&db),
                "--workspace-root",
                path_str(root),
                "--grant",
                "Workspace.Read=worktree:5",
            ],
        );
        assert_eq!(code, Some(2), "{err}");
        assert!(
            err.contains(&format!("workspace root {}: {why}", root.display())),
            "{err}"
        );
        assert!(!root.join("carol").exists());
    };

    // Every user may write the root: anyone could swap carol's worktree for theirs.
    let root = d.join("wt");
    std::fs::create_dir(&root).unwrap();
    set_mode(&root, 0o777);
    refused(
        &root,
        "refusing a directory every user may write (mode 0777)",
    );
    set_mode(&root, 0o1777);
    refused(
        &root,
        "refusing a directory every user may write (mode 1777)",
    );
    set_mode(&root, 0o700);

    // The root sits where anyone may swap it.
    let shared = d.join("shared");
    std::fs::create_dir(&shared).unwrap();
    set_mode(&shared, 0o777);
    let swappable = shared.join("wt");
    std::fs::create_dir(&swappable).unwrap();
    set_mode(&swappable, 0o700);
    refused(
        &swappable,
        &format!(
            "refusing it inside {}, a directory every user may write, without the sticky bit (mode 0777)",
            shared.display()
        ),
    );

    if !is_root() {
        eprintln!("*** not root: a workspace root owned by another user is not made ***");
        return;
    }
    chown(&root, Some(65534), None).unwrap();
    refused(
        &root,
        "refusing a directory owned by uid 65534, neither this process's user (uid 0) nor root (mode 0700)",
    );
}

#[test]
fn a_workspace_root_other_users_may_read_is_warned_of() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("wt");
    std::fs::create_dir(&root).unwrap();
    // As a root made under umask 022 before worldd made it 0700 was.
    set_mode(&root, 0o755);
    let mut serve = Daemon::serve_command_on(&dir, &["worldd_workspace"], "127.0.0.1:0", &root);
    serve.env("WORLDD_LOG", "warn");
    let daemon = Daemon::spawn(dir, serve);
    daemon.wait_for_log(&format!(
        "the workspace root {} (mode 0755) may be listed or entered by users other than its owner, who may then read every episode's worktree; `chmod 700 {}`",
        root.display(),
        root.display()
    ));
}

/// A store another user's process may not enter was told `world store … does not exist;
/// refusing to create one` by `doctor` and `session list` (run as that user), which sent an
/// operator looking for a store that was there. It is said as what it is now: whose the
/// directory is, its mode, and what to do, as `serve` says it.
#[test]
fn a_store_this_user_may_not_enter_is_said_to_be_refused_not_missing() {
    if !is_root() {
        eprintln!("*** not root: a store of another user is not tried ***");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    set_mode(dir.path(), 0o755);
    let db = dir.path().join("db");
    store_at(&db);
    assert_eq!(mode_of(&db) & 0o777, 0o700);
    for verb in [&["doctor", "--db"][..], &["session", "list", "--db"][..]] {
        let out = Command::new("runuser")
            .args(["-u", "nobody", "--", WORLDD])
            .args(verb)
            .arg(&db)
            .current_dir(dir.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{verb:?}: {err}");
        assert!(!err.contains("does not exist"), "{verb:?}: {err}");
        assert!(
            err.contains(&format!(
                "{}: Permission denied (os error 13) (owned by uid 0, mode 0700; this process runs as uid 65534): run worldd as the store's owner, or give this user read and write access to the directory and its files",
                db.display()
            )),
            "{verb:?}: {err}"
        );
    }
}

/// A `--db` naming something that is not a directory but that every user may write (a device
/// such as /dev/null, a FIFO or a file chmodded 0666) was called "a directory every user may
/// write", exit 2, with `chmod 700 /dev/null` to paste, which as root breaks every other
/// program on the machine. It is said as any other file in a store's place: not a directory,
/// exit 1 (serve: its start fails, exit 2, in the same words).
#[test]
fn a_db_that_is_a_device_fifo_or_open_file_is_said_not_to_be_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let fifo = d.join("fifo");
    let c = std::ffi::CString::new(path_str(&fifo)).unwrap();
    // SAFETY: mkfifo on a NUL-terminated path we own; no memory is shared.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
    set_mode(&fifo, 0o666);
    let file = d.join("file");
    std::fs::write(&file, "").unwrap();
    set_mode(&file, 0o666);
    let plugins = plugin_dir_with(d, &["worldd_workspace"]);
    for db in [Path::new("/dev/null"), &fifo, &file] {
        let not_a_dir = format!(
            "world store {} is not a directory (a store is a directory holding data.mdb and lock.mdb)",
            db.display()
        );
        for args in [&["doctor", "--db"][..], &["session", "list", "--db"][..]] {
            let mut args = args.to_vec();
            args.push(path_str(db));
            let (code, err) = verb(d, &args);
            assert_eq!(code, Some(1), "{args:?}: {err}");
            assert_eq!(err, format!("worldd: {not_a_dir}\n"), "{args:?}");
        }
        let refusal = refused_start(&serve_args(&plugins, db, &d.join("worktrees")), d);
        assert_eq!(refusal.code, Some(2), "{}", refusal.stderr);
        assert_eq!(
            refusal.line,
            format!("worldd: daemon startup failed at store-open: {not_a_dir}")
        );
    }
    // Nothing was changed or made in their place.
    assert_eq!(mode_of(&fifo), 0o666);
    assert_eq!(mode_of(&file), 0o666);
    assert_eq!(mode_of(Path::new("/dev/null")), 0o666);
}

/// The fix commands given to paste (`chmod 700 PATH`, `chmod o-w PATH`) named a path with a
/// space unquoted: pasted, `chmod` ran on its two halves. A path that needs it is now quoted
/// for the shell (single quotes, a `'` in it as `'\''`); a plain one is as it was.
#[test]
fn a_fix_command_to_paste_quotes_a_path_holding_a_space_or_quote() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let spaced = d.join("sp ace");
    std::fs::create_dir(&spaced).unwrap();
    let db = spaced.join("it's db");
    store_at(&db);
    set_mode(&db, 0o777);
    let (code, err) = verb(d, &["doctor", "--db", path_str(&db)]);
    assert_eq!(code, Some(2), "{err}");
    let quoted = format!("'{}/sp ace/it'\\''s db'", d.display());
    assert_eq!(
        err,
        format!(
            "worldd: store {}: refusing a directory every user may write (mode 0777): another user could put or swap what worldd keeps and runs there; `chmod 700 {quoted}`\n",
            db.display()
        )
    );
    // Pasted into a shell, the command names that one directory.
    let pasted = Command::new("sh")
        .arg("-c")
        .arg(format!("chmod 700 {quoted}"))
        .status()
        .unwrap();
    assert!(pasted.success());
    assert_eq!(mode_of(&db), 0o700);

    // The directory holding the store, open to all and not sticky.
    set_mode(&spaced, 0o777);
    let (code, err) = verb(d, &["doctor", "--db", path_str(&db)]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(
        err,
        format!(
            "worldd: store {}: refusing it inside {}, a directory every user may write, without the sticky bit (mode 0777): anyone could swap it for their own; `chmod o-w '{}'`\n",
            db.display(),
            spaced.display(),
            spaced.display()
        )
    );
    set_mode(&spaced, 0o700);

    // A plain path is left as it is.
    let plain = d.join("plain_db-1.x");
    store_at(&plain);
    set_mode(&plain, 0o777);
    let (_, err) = verb(d, &["doctor", "--db", path_str(&plain)]);
    assert!(
        err.ends_with(&format!("`chmod 700 {}`\n", plain.display())),
        "{err}"
    );
}
