//! What `quickstart`, `session new` and `serve` check before they make anything, through the
//! real binary: arguments first (an episode that would name a directory outside `--dir`, a
//! bind `serve` refuses, a `--repo` that is no repository), the question before the store and
//! the worktree (so an interrupted question leaves nothing), and a failed start that takes
//! away what it made.

mod common;

use std::path::Path;

use common::*;

/// The names in `dir`, sorted.
fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// `--bind example.com:80` is HOST:PORT; what it breaks is the loopback rule, and that is said.
#[test]
fn a_bind_of_a_name_other_than_localhost_is_told_the_loopback_rule() {
    let dir = tempfile::tempdir().unwrap();
    let r = refused_start(&["--bind", "example.com:80"], dir.path());
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert_eq!(
        r.line,
        r#"worldd: daemon startup failed at bind-policy: --bind "example.com:80": host "example.com" is not loopback: the daemon binds loopback only, 127.0.0.1:PORT, [::1]:PORT or localhost:PORT"#
    );
    assert_eq!(names_in(dir.path()), Vec::<String>::new());
}

/// A start that cannot make its store (a file where its parent should be) left the workspace
/// root, and the directory above it, that it had just made.
#[test]
fn serve_that_cannot_create_its_store_leaves_no_workspace_root_it_made() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("srvfile"), "").unwrap();
    let r = refused_start(
        &[
            "--db",
            "srvfile/db",
            "--workspace-root",
            "new/wt",
            "--bind",
            "127.0.0.1:0",
        ],
        dir.path(),
    );
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert_eq!(
        r.line,
        "worldd: daemon startup failed at store-open: store I/O error: srvfile/db: Not a directory (os error 20)"
    );
    assert_eq!(names_in(dir.path()), ["srvfile"]);
}

/// A workspace root inside the store was refused on a fresh start as "its data file was lost"
/// (the root it had made there taken for a store's remains), and served once the store
/// existed, agents' worktrees beside its data file. One rule now, at `config`.
#[test]
fn a_workspace_root_inside_the_store_is_refused_at_config_fresh_or_not() {
    let dir = tempfile::tempdir().unwrap();
    let at = dir.path().canonicalize().unwrap();
    let start = |db: &str, root: &str| {
        refused_start(
            &[
                "--db",
                db,
                "--workspace-root",
                root,
                "--bind",
                "127.0.0.1:0",
            ],
            dir.path(),
        )
    };
    for (db, root) in [("db2", "db2/wt"), (".world/db", ".world/db/wt")] {
        let r = start(db, root);
        assert_eq!(r.code, Some(2), "{}", r.stderr);
        assert_eq!(
            r.line,
            format!(
                "worldd: daemon startup failed at config: the workspace root {} is inside the store {}",
                at.join(root).display(),
                at.join(db).display()
            )
        );
        assert_eq!(names_in(dir.path()), Vec::<String>::new(), "{db}");
    }
    drop(broker_core::store::Store::create(&dir.path().join("db")).unwrap());
    let r = start("db", "db/wt");
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert_eq!(
        r.line,
        format!(
            "worldd: daemon startup failed at config: the workspace root {} is inside the store {}",
            at.join("db/wt").display(),
            at.join("db").display()
        )
    );
    assert_eq!(names_in(&dir.path().join("db")), ["data.mdb", "lock.mdb"]);
}
