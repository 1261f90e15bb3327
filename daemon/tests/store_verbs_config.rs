//! The store-side verbs (`session`, `doctor`, `backup`, `usage`) take the daemon's `--config`:
//! its `[serve] db` and `workspace_root`, relative to the working directory as `serve` takes
//! them, unless `--db` or `--workspace-root` says otherwise. A deployment kept in a config file
//! once had `session new` refuse the store (it looked in .world/db), or, given `--db` alone,
//! make the worktree where the daemon never looked.

mod common;

use std::path::Path;

use common::*;

/// A directory holding `world.toml` (the store in `state/db`, worktrees in `state/wt`, the
/// workspace plugin) and a daemon serving it, started there with `--config world.toml`.
fn configured_daemon() -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    plugin_dir_with(dir.path(), &["worldd_workspace"]);
    std::fs::write(
        dir.path().join("world.toml"),
        "[serve]\ndb = \"state/db\"\nworkspace_root = \"state/wt\"\nbind = \"127.0.0.1:0\"\nplugin_dir = \"plugins\"\n",
    )
    .unwrap();
    let mut cmd = std::process::Command::new(WORLDD);
    cmd.args(["serve", "--config", "world.toml"])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    Daemon::spawn(dir, cmd)
}

/// `worldd ARGS` run at a terminal in `dir`, answering `y`.
fn at_terminal_in(dir: &Path, args: &str) -> (i32, Vec<String>) {
    let (code, shown) = at_terminal(&format!("cd {} && {WORLDD} {args}", dir.display()), b"y\n");
    (code, said(&shown, "y"))
}

#[test]
fn session_new_with_the_daemons_config_makes_a_worktree_the_daemon_serves() {
    let d = configured_daemon();
    let dir = d.dir.path().to_path_buf();
    let (code, shown) = at_terminal_in(
        &dir,
        "session new ep --preset se-tools --config world.toml --out ep.session",
    );
    assert_eq!(code, 0, "{shown:?}");
    assert_eq!(
        shown.last().unwrap(),
        "worldd session new: worktree state/wt/ep",
        "{shown:?}"
    );
    assert!(dir.join("state/wt/ep").is_dir());
    assert!(!dir.join(".world").exists());
    let (code, out, err) = worldd_in(
        &dir,
        &[],
        &[
            "call",
            "ailang-write",
            "--arg",
            "path=hello.txt",
            "--arg",
            "content=hi",
            "--addr",
            &d.addr,
            "--session",
            "ep.session",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        std::fs::read_to_string(dir.join("state/wt/ep/hello.txt")).unwrap(),
        "hi"
    );
    // The other store-side verbs find the same store through the same file.
    let (code, out, err) = worldd_in(&dir, &[], &["session", "list", "--config", "world.toml"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().last(), Some("1 session credential(s)"), "{out}");
    let (code, out, err) = worldd_in(&dir, &[], &["doctor", "--config", "world.toml"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().next(), Some("doctor: state/db"), "{out}");
    let (code, out, err) = worldd_in(&dir, &[], &["usage", "--config", "world.toml", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["store"],
        "state/db"
    );
    // `backup` takes the workspace root from the file too: a destination inside it is refused.
    let (code, _, err) = worldd_in(
        &dir,
        &[],
        &["backup", "--config", "world.toml", "state/wt/copy"],
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.starts_with("worldd: backup: ") && err.contains("state/wt"),
        "{err}"
    );
    // `session mint` looks for the worktree in the file's workspace root: no warning of a
    // missing one.
    let (code, shown) = at_terminal_in(
        &dir,
        "session mint --config world.toml --episode ep --grant Workspace.Read=worktree:5 --out ep2.session",
    );
    assert_eq!(code, 0, "{shown:?}");
    assert!(
        !shown.iter().any(|l| l.contains("has no worktree")),
        "{shown:?}"
    );
}

/// An explicit `--db` wins over the file's `[serve] db`; without `--config` the default is
/// what it was.
#[test]
fn an_explicit_db_wins_over_the_config_and_no_config_keeps_the_default() {
    let d = configured_daemon();
    let dir = d.dir.path();
    let (code, _, err) = worldd_in(
        dir,
        &[],
        &[
            "session",
            "list",
            "--config",
            "world.toml",
            "--db",
            "elsewhere",
        ],
    );
    assert_eq!(code, 1);
    assert_eq!(
        err,
        format!(
            "worldd: world store {}/elsewhere does not exist; refusing to create one: run this in the directory the daemon was started in, or pass --db with the daemon's store (worldd serve creates a store, for a new world only)\n",
            dir.display()
        )
    );
    let (code, _, err) = worldd_in(dir, &[], &["doctor"]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        format!(
            "worldd: world store {}/.world/db does not exist; refusing to create one: run this in the directory the daemon was started in, or pass --db with the daemon's store (worldd serve creates a store, for a new world only)\n",
            dir.display()
        )
    );
}

/// A config file that cannot be read, does not parse, or holds a path no shell expanded is
/// refused before any store is opened, as `serve` refuses it.
#[test]
fn a_config_the_store_verbs_cannot_use_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = worldd_in(dir.path(), &[], &["usage", "--config", "none.toml"]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "worldd: none.toml: No such file or directory (os error 2)\n"
    );
    std::fs::write(
        dir.path().join("tilde.toml"),
        "[serve]\ndb = \"~/world/db\"\n",
    )
    .unwrap();
    let (code, _, err) = worldd_in(dir.path(), &[], &["doctor", "--config", "tilde.toml"]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "worldd: [serve] db \"~/world/db\": a config file's paths are not expanded as a shell would (`~` is a directory named ~ here); write the path in full\n"
    );
    std::fs::write(dir.path().join("typo.toml"), "[serve]\ndatabase = \"db\"\n").unwrap();
    let (code, _, err) = worldd_in(
        dir.path(),
        &[],
        &["session", "list", "--config", "typo.toml"],
    );
    assert_eq!(code, 1);
    assert!(
        err.starts_with("worldd: typo.toml: ") && err.contains("unknown field `database`"),
        "{err}"
    );
}
