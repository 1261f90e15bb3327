//! Two daemons on one machine keep apart: neither's store or workspace root may lie inside the
//! other's workspace root, nor hold the other's store or root. A second daemon given the
//! directory above the first's store and worktrees (or a root or store inside one of its
//! worktrees) started without a word, and an agent of one then wrote into the other's store
//! directory (its `data.mdb` among it) or worktrees, recorded by neither. Two real daemons,
//! real stores; the second is refused at start, exit 2, naming both paths, and leaves nothing.

mod common;

use std::path::{Path, PathBuf};

use common::*;

const WS: &[&str] = &["worldd_workspace"];

/// The serve flags of a second daemon: a free port, no plugins, the store `db`, the workspace
/// root `root`.
fn second(cwd: &Path, db: &Path, root: &Path) -> Refusal {
    let args: Vec<String> = [
        "--bind",
        "127.0.0.1:0",
        "--plugin-dir",
        path_str(&cwd.join("no-plugins")),
        "--db",
        path_str(db),
        "--workspace-root",
        path_str(root),
    ]
    .map(str::to_owned)
    .to_vec();
    refused_start(&args, cwd)
}

fn real(path: &Path) -> PathBuf {
    path.canonicalize().unwrap()
}

/// The first daemon still serves and answers.
fn still_serves(daemon: &Daemon) {
    let health = get(&daemon.url("/v1/health"), None);
    assert_eq!(health.status, 200, "{}", health.text());
}

#[test]
fn a_workspace_root_holding_another_daemons_store_and_root_is_refused_at_start() {
    let first = Daemon::start(WS, &[]);
    let above = first.dir.path().to_path_buf();
    let elsewhere = tempfile::tempdir().unwrap();
    let db = elsewhere.path().join("db");
    let refusal = second(elsewhere.path(), &db, &above);
    assert_eq!(refusal.code, Some(2), "{}", refusal.stderr);
    assert_eq!(
        refusal.line,
        format!(
            "worldd: daemon startup failed at config: the workspace root {} holds the workspace root or store of another running worldd ({}): an episode of this daemon could write into it; give this daemon a --workspace-root that holds neither",
            above.display(),
            above.join("db").display()
        )
    );
    // Refused before it made a store.
    assert!(!db.exists());
    still_serves(&first);
}

#[test]
fn a_store_holding_another_daemons_store_and_root_is_refused_at_start() {
    let first = Daemon::start(WS, &[]);
    let above = first.dir.path().to_path_buf();
    let elsewhere = tempfile::tempdir().unwrap();
    let root = elsewhere.path().join("worktrees");
    let refusal = second(elsewhere.path(), &above, &root);
    assert_eq!(refusal.code, Some(2), "{}", refusal.stderr);
    assert_eq!(
        refusal.line,
        format!(
            "worldd: daemon startup failed at config: the store {} holds the workspace root or store of another running worldd ({}): its agents could then write into this daemon's store; give this daemon a --db that holds neither",
            above.display(),
            above.join("db").display()
        )
    );
    // The root this start made went again; nothing was made in the first's directory.
    assert!(!root.exists());
    assert!(!above.join("data.mdb").exists());
    still_serves(&first);
}

/// `--db` naming another daemon's workspace root was refused as "another worldd already serves
/// it (one daemon per store)", which it does not (no store is served there), and the refused
/// start left the new workspace root it had made. It is now said as the directory another
/// process holds, and the root goes again.
#[test]
fn a_store_that_is_another_daemons_workspace_root_is_refused_as_held_not_as_served() {
    let first = Daemon::start(WS, &[]);
    first.session("demo", &["Workspace.Write=worktree:5"]);
    let elsewhere = tempfile::tempdir().unwrap();
    let root = elsewhere.path().join("worktrees");
    let refusal = second(elsewhere.path(), &first.root(), &root);
    assert_eq!(refusal.code, Some(2), "{}", refusal.stderr);
    assert_eq!(
        refusal.line,
        format!(
            "worldd: daemon startup failed at config: the store {} is a directory another running worldd process holds as its own (a daemon's workspace root, a plugin's stateDir, a backup's destination), not a store it serves: what writes there could write into this daemon's store; give this daemon a --db outside it",
            first.root().display()
        )
    );
    assert!(!root.exists());
    assert!(!first.root().join("data.mdb").exists());
    still_serves(&first);
}

#[test]
fn a_workspace_root_inside_another_daemons_worktree_is_refused_at_start() {
    let first = Daemon::start(WS, &[]);
    first.session("demo", &["Workspace.Write=worktree:5"]);
    let nested = first.root().join("demo/nested");
    let elsewhere = tempfile::tempdir().unwrap();
    let db = elsewhere.path().join("db");
    let refusal = second(elsewhere.path(), &db, &nested);
    assert_eq!(refusal.code, Some(2), "{}", refusal.stderr);
    assert_eq!(
        refusal.line,
        format!(
            "worldd: daemon startup failed at config: the workspace root {}/nested is inside {}, which another running worldd process holds as its own (a daemon's workspace root or store, a plugin's stateDir, a backup's destination): what writes there could write into this daemon's workspace root; give this daemon a --workspace-root outside it",
            real(&first.root().join("demo")).display(),
            real(&first.root()).display()
        )
    );
    // Neither the root it made in the worktree nor its store is left.
    assert!(!nested.exists());
    assert!(!db.exists());
    still_serves(&first);
}

#[test]
fn a_store_inside_another_daemons_worktree_is_refused_at_start() {
    let first = Daemon::start(WS, &[]);
    first.session("demo", &["Workspace.Write=worktree:5"]);
    let db = first.root().join("demo/sdb");
    let elsewhere = tempfile::tempdir().unwrap();
    let root = elsewhere.path().join("worktrees");
    let refusal = second(elsewhere.path(), &db, &root);
    assert_eq!(refusal.code, Some(2), "{}", refusal.stderr);
    assert_eq!(
        refusal.line,
        format!(
            "worldd: daemon startup failed at config: the store {}/sdb is inside {}, which another running worldd process holds as its own (a daemon's workspace root or store, a plugin's stateDir, a backup's destination): what writes there could write into this daemon's store; give this daemon a --db outside it",
            real(&first.root().join("demo")).display(),
            real(&first.root()).display()
        )
    );
    assert!(!db.exists());
    assert!(!root.exists());
    still_serves(&first);
}

/// The other way round: the daemon whose root holds the other's paths serves first, and the
/// one whose store would lie inside it is refused.
#[test]
fn a_store_made_inside_a_serving_daemons_workspace_root_later_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let outer = dir.path().join("outer");
    std::fs::create_dir(&outer).unwrap();
    let cmd = Daemon::serve_command_on(&dir, WS, "127.0.0.1:0", &outer);
    let first = Daemon::spawn(dir, cmd);
    let inner_db = outer.join("db");
    let elsewhere = tempfile::tempdir().unwrap();
    let refusal = second(elsewhere.path(), &inner_db, &elsewhere.path().join("wt"));
    assert_eq!(refusal.code, Some(2), "{}", refusal.stderr);
    assert_eq!(
        refusal.line,
        format!(
            "worldd: daemon startup failed at config: the store {} is inside {}, which another running worldd process holds as its own (a daemon's workspace root or store, a plugin's stateDir, a backup's destination): what writes there could write into this daemon's store; give this daemon a --db outside it",
            real(&outer).join("db").display(),
            real(&outer).display()
        )
    );
    assert!(!inner_db.exists());
    still_serves(&first);
}

/// Two daemons side by side (their paths in one directory, neither inside the other's) both
/// serve: the directories above them are held shared, which the other's shared hold meets.
#[test]
fn daemons_side_by_side_in_one_directory_both_serve() {
    let first = Daemon::start(WS, &[]);
    let dir = first.dir.path();
    let db = dir.join("db-2");
    let root = dir.join("worktrees-2");
    let mut cmd = std::process::Command::new(WORLDD);
    cmd.arg("serve")
        .arg("--db")
        .arg(&db)
        .arg("--workspace-root")
        .arg(&root)
        .args(["--bind", "127.0.0.1:0", "--plugin-dir"])
        .arg(first.plugin_dir())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let beside = Daemon::spawn(tempfile::tempdir().unwrap(), cmd);
    still_serves(&first);
    still_serves(&beside);
}

/// The refusal of a store `db` (which exists) inside `held`, a directory the first daemon holds.
fn store_inside(db: &Path, held: &Path) -> String {
    format!(
        "worldd: daemon startup failed at config: the store {} is inside {}, which another running worldd process holds as its own (a daemon's workspace root or store, a plugin's stateDir, a backup's destination): what writes there could write into this daemon's store; give this daemon a --db outside it",
        real(db).display(),
        real(held).display()
    )
}

/// A store given as an existing, empty worktree of another daemon's episode: the start was
/// refused only after it had opened its store there, and left `data.mdb` and `lock.mdb` in the
/// other daemon's agent's worktree.
#[test]
fn a_refused_store_in_another_daemons_empty_worktree_leaves_nothing_in_it() {
    let first = Daemon::start(WS, &[]);
    first.session("e9", &["Workspace.Write=worktree:5"]);
    let db = first.root().join("e9");
    assert!(names_in(&db).is_empty());
    let elsewhere = tempfile::tempdir().unwrap();
    let root = elsewhere.path().join("worktrees");
    let refusal = second(elsewhere.path(), &db, &root);
    assert_eq!(refusal.code, Some(2), "{}", refusal.stderr);
    assert_eq!(refusal.line, store_inside(&db, &first.root()));
    assert_eq!(names_in(&db), Vec::<String>::new());
    assert!(!root.exists());
    still_serves(&first);
}

/// A store given as another daemon's worktree holding its agent's files was refused as the
/// remains of a lost store, advising to "remove it to start a new world": the other daemon's
/// agent's work. It is refused as inside that daemon's workspace root, its files untouched.
#[test]
fn a_store_in_another_daemons_worktree_holding_files_is_refused_as_inside_it_not_as_a_lost_store() {
    let first = Daemon::start(WS, &[]);
    first.session("demo", &["Workspace.Write=worktree:5"]);
    let db = first.root().join("demo");
    std::fs::write(db.join("u.txt"), "the agent's work").unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let root = elsewhere.path().join("worktrees");
    let refusal = second(elsewhere.path(), &db, &root);
    assert_eq!(refusal.code, Some(2), "{}", refusal.stderr);
    assert_eq!(refusal.line, store_inside(&db, &first.root()));
    assert_eq!(names_in(&db), ["u.txt"]);
    assert_eq!(
        std::fs::read_to_string(db.join("u.txt")).unwrap(),
        "the agent's work"
    );
    assert!(!root.exists());
    still_serves(&first);
}

/// A store given as another daemon's plugin state (inside its store directory) was refused as
/// a lost store ("remove it to start a new world": that daemon's plugins' state), and an empty
/// directory below it got a new store's files before the refusal. Both are refused as inside
/// the other daemon's store, and nothing is made there.
#[test]
fn a_store_in_another_daemons_plugin_state_is_refused_as_inside_its_store_and_nothing_is_made() {
    let first = Daemon::start(WS, &[]);
    let state = first.db().join("plugin-state");
    std::fs::create_dir_all(state.join("git/empty")).unwrap();
    std::fs::write(state.join("git/kept"), "state").unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let root = elsewhere.path().join("worktrees");

    let refusal = second(elsewhere.path(), &state, &root);
    assert_eq!(refusal.code, Some(2), "{}", refusal.stderr);
    assert_eq!(refusal.line, store_inside(&state, &first.db()));
    assert_eq!(names_in(&state), ["git"]);
    assert_eq!(names_in(&state.join("git")), ["empty", "kept"]);

    let empty = state.join("git/empty");
    let refusal = second(elsewhere.path(), &empty, &root);
    assert_eq!(refusal.code, Some(2), "{}", refusal.stderr);
    assert_eq!(refusal.line, store_inside(&empty, &first.db()));
    assert_eq!(names_in(&empty), Vec::<String>::new());
    assert!(!root.exists());
    still_serves(&first);
}
