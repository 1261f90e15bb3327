//! What the operator's verbs write must not land inside the workspace root: the agents' tools
//! read and write there as the daemon's user, so a file the checks of its own verb pass (owned
//! by this user, mode 0700 or 0600) is still the agents'. Through the real binary.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

fn store_in(dir: &Path) -> std::path::PathBuf {
    let db = dir.join("db");
    drop(broker_core::store::Store::create(&db).unwrap());
    db
}

fn sessions(db: &Path) -> String {
    let (code, out, err) = worldd(&["session", "list", "--db", path_str(db)], None);
    assert_eq!(code, 0, "{err}");
    out
}

/// `worldd backup --db .world/db .world/worktrees/demo/bk` copied the whole store into agent
/// demo's worktree, where its tools could rewrite the copy (and what a restore brings back) or
/// read every episode's rows. Refused before anything is written, exit 1, with the root given
/// or the default one, and through a link into the root.
#[test]
fn a_backup_into_the_workspace_root_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let db = store_in(dir.path());
    let root = dir.path().join("roots");
    std::fs::create_dir_all(root.join("demo")).unwrap();
    let dest = root.join("demo/bk");
    let (code, out, err) = worldd(
        &[
            "backup",
            "--db",
            path_str(&db),
            "--workspace-root",
            path_str(&root),
            path_str(&dest),
        ],
        None,
    );
    assert_eq!(code, 1, "{err}");
    assert_eq!(out, "");
    assert_eq!(
        err,
        format!(
            "worldd: backup: destination {} is inside the workspace root {}, where agents write files: an agent could change the copy (and so what a restore brings back) or read every episode's data in it; choose a directory outside it\n",
            dest.display(),
            root.display()
        )
    );
    assert!(!dest.exists());
    // Through a link that leads into the root.
    std::os::unix::fs::symlink(root.join("demo"), dir.path().join("looks-outside")).unwrap();
    let linked = dir.path().join("looks-outside/bk");
    let (code, _, err) = worldd(
        &[
            "backup",
            "--db",
            path_str(&db),
            "--workspace-root",
            path_str(&root),
            path_str(&linked),
        ],
        None,
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("is inside the workspace root"), "{err}");
    assert!(!root.join("demo/bk").exists());
    // Without the flag, the root is serve's default, .world/worktrees under the directory the
    // verb runs in.
    let world = dir.path().join("site");
    std::fs::create_dir_all(world.join(".world/worktrees/demo")).unwrap();
    drop(broker_core::store::Store::create(&world.join(".world/db")).unwrap());
    let output = Command::new(WORLDD)
        .args(["backup", ".world/worktrees/demo/bk"])
        .current_dir(&world)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "worldd: backup: destination .world/worktrees/demo/bk is inside the workspace root .world/worktrees, where agents write files: an agent could change the copy (and so what a restore brings back) or read every episode's data in it; choose a directory outside it\n"
    );
    assert!(!world.join(".world/worktrees/demo/bk").exists());
    // Outside the root, beside it, the backup is taken.
    let beside = dir.path().join("roots-backup");
    let (code, out, err) = worldd(
        &[
            "backup",
            "--db",
            path_str(&db),
            "--workspace-root",
            path_str(&root),
            path_str(&beside),
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("✓ the copy opens and doctor's checks pass"),
        "{out}"
    );
}

/// `session mint --operator --out .world/worktrees/demo/ops.session` wrote a credential that
/// reads every episode where agent demo's tools read files. Refused before the question, exit 1,
/// nothing minted.
#[test]
fn an_operator_credential_is_never_written_inside_the_workspace_root() {
    let dir = tempfile::tempdir().unwrap();
    let db = store_in(dir.path());
    let root = dir.path().join("worktrees");
    std::fs::create_dir_all(root.join("demo")).unwrap();
    let out = root.join("demo/ops.session");
    let (code, shown) = mint_at_terminal(
        &db,
        &format!(
            "--operator --episode ops --workspace-root {} --out {}",
            root.display(),
            out.display()
        ),
    );
    assert_eq!(code, 1, "{shown}");
    assert!(
        shown.contains(&format!(
            "worldd: refusing to write the credential to {}: it is inside the workspace root {}, where agents' tools read files, and an operator credential reads every episode; write it outside the root",
            out.display(),
            root.display()
        )),
        "{shown}"
    );
    assert!(!shown.contains("Confirm mint"), "{shown}");
    assert!(!out.exists());
    assert!(sessions(&db)
        .trim_end()
        .ends_with("0 session credential(s)"));
    // Outside the root it is minted.
    let outside = dir.path().join("ops.session");
    let (code, shown) = mint_at_terminal(
        &db,
        &format!(
            "--operator --episode ops --workspace-root {} --out {}",
            root.display(),
            outside.display()
        ),
    );
    assert_eq!(code, 0, "{shown}");
    assert!(outside.is_file());
}

/// An episode's credential written into a worktree is readable by the agent working there: said
/// before the question, so that the operator can answer n (`session mint` and `session new`).
#[test]
fn a_session_credential_inside_the_workspace_root_is_warned_of_before_the_question() {
    let dir = tempfile::tempdir().unwrap();
    let db = store_in(dir.path());
    let root = dir.path().join("worktrees");
    std::fs::create_dir_all(root.join("demo")).unwrap();
    let out = root.join("demo/demo.session");
    let warning = format!(
        "worldd session: warning: {} is inside the workspace root {}, where agents' tools read files: an agent may read this credential; answer n and write it outside the root",
        out.display(),
        root.display()
    );
    let (code, shown) = mint_at_terminal(
        &db,
        &format!(
            "--episode demo --grant Workspace.Read=worktree:3 --workspace-root {} --out {}",
            root.display(),
            out.display()
        ),
    );
    assert_eq!(code, 0, "{shown}");
    let warned = shown.find(&warning).unwrap_or_else(|| panic!("{shown}"));
    assert!(warned < shown.find("Confirm mint").unwrap(), "{shown}");
    // `session new` for another episode, its credential put in demo's worktree.
    let other = root.join("demo/feat.session");
    let (code, shown) = at_terminal(
        &format!(
            "{WORLDD} session new feat --db {} --workspace-root {} --preset se-tools --out {}",
            db.display(),
            root.display(),
            other.display()
        ),
        b"n\n",
    );
    assert_eq!(code, 1, "{shown}");
    let warning = format!(
        "worldd session: warning: {} is inside the workspace root {}, where agents' tools read files: an agent may read this credential; answer n and write it outside the root",
        other.display(),
        root.display()
    );
    let warned = shown.find(&warning).unwrap_or_else(|| panic!("{shown}"));
    assert!(warned < shown.find("Confirm mint").unwrap(), "{shown}");
    assert!(shown.contains("aborted (not confirmed)"), "{shown}");
    assert!(!other.exists());
    assert!(!root.join("feat").exists());
}

/// `worldd backup /tmp/nonex/a/b` (its parents missing) answered `…/b: No such file or
/// directory (os error 2); nothing was left in …/b`, exit 2: the destination is documented as
/// made when absent, so its own "No such file" read as a contradiction. It is refused as what it
/// is, before anything is written, exit 1, naming the missing parent.
#[test]
fn a_backup_whose_destination_has_no_parent_is_refused_naming_the_parent() {
    let dir = tempfile::tempdir().unwrap();
    let db = store_in(dir.path());
    let parent = dir.path().join("nonex/a");
    let dest = parent.join("b");
    let (code, out, err) = worldd(&["backup", "--db", path_str(&db), path_str(&dest)], None);
    assert_eq!(code, 1, "{err}");
    assert_eq!(out, "");
    assert_eq!(
        err,
        format!(
            "worldd: backup: destination {}: its parent directory {} does not exist; backup makes the destination itself, not the directories above it: make {} first (mode 0700), or choose a destination in an existing directory\n",
            dest.display(),
            parent.display(),
            parent.display()
        )
    );
    assert!(!dir.path().join("nonex").exists());
}
