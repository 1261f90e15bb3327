//! Where `worldd backup` may write its copy, through the real binary on real stores: not into a
//! destination another backup is writing (two runs into one directory, a cron line and an
//! operator), and not into a new directory inside one every user may write without the sticky
//! bit, where anyone could swap the finished copy.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// A store in `db` with `files` files of plugin state: each is copied and synced on its own, so
/// that a backup of it takes a while.
fn store_with_state(db: &Path, files: usize) {
    drop(broker_core::store::Store::create(db).unwrap());
    let state = db.join("plugin-state/p");
    std::fs::create_dir_all(&state).unwrap();
    for i in 0..files {
        std::fs::write(state.join(format!("f{i:05}")), [b'x'; 512]).unwrap();
    }
}

fn backup(cwd: &Path, db: &Path, dest: &Path) -> Command {
    let mut cmd = Command::new(WORLDD);
    cmd.arg("backup")
        .arg("--db")
        .arg(db)
        .arg("--workspace-root")
        .arg(cwd.join("worktrees"))
        .arg(dest)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn signal(child: &std::process::Child, signal: libc::c_int) {
    // SAFETY: kill on the id of a child this test spawned and has not reaped.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A backup of `db` into a new destination in `cwd` (named `name-N`), stopped (`SIGSTOP`) once
/// its copy has begun, and that destination: a run that ended before it could be stopped is
/// tried again into another destination.
fn stopped_mid_copy(cwd: &Path, db: &Path, name: &str) -> (std::process::Child, PathBuf) {
    (0..10)
        .find_map(|attempt| {
            let dest = cwd.join(format!("{name}-{attempt}"));
            let mut child = backup(cwd, db, &dest).spawn().unwrap();
            let until = Instant::now() + Duration::from_secs(60);
            while !dest.join(".partial").exists() {
                assert!(Instant::now() < until, "the backup never began its copy");
                if child.try_wait().unwrap().is_some() {
                    return None;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            signal(&child, libc::SIGSTOP);
            if dest.join(".partial").exists() {
                Some((child, dest))
            } else {
                signal(&child, libc::SIGCONT);
                child.wait().unwrap();
                None
            }
        })
        .expect("every backup ended before it could be stopped mid-copy")
}

/// A second `backup` into a destination the first was still writing called the first's
/// `.partial` an interrupted backup and told the operator to remove the directory; one who did
/// got, from the first, a ✓ and exit 0 for a copy that was gone. The first now holds the
/// destination for its whole run, and the second is refused as what it meets: a backup being
/// written, to wait for. The first finishes a checked copy.
#[test]
fn a_second_backup_into_a_destination_being_written_is_told_to_wait_not_to_remove_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let db = d.join("db");
    store_with_state(&db, 3000);
    let (mut first, dest) = stopped_mid_copy(d, &db, "bk");

    let second = run_to_exit(&mut backup(d, &db, &dest), Duration::from_secs(60));
    assert_eq!(
        String::from_utf8_lossy(&second.stderr),
        format!(
            "worldd: backup: destination {} is being written by another worldd backup; wait for it\n",
            dest.display()
        )
    );
    assert_eq!(second.status.code(), Some(1));
    assert!(second.stdout.is_empty());
    // The second took nothing away from the first.
    assert!(dest.join(".partial").is_dir());

    signal(&first, libc::SIGCONT);
    let until = Instant::now() + Duration::from_secs(120);
    while first.try_wait().unwrap().is_none() {
        assert!(Instant::now() < until, "the first backup never ended");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = first.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("✓ the copy opens and doctor's checks pass"),
        "{stdout}"
    );
    assert!(
        stdout.contains("  plugin-state: 3000 file(s), 1536000 bytes"),
        "{stdout}"
    );
    assert!(dest.join("data.mdb").is_file());
    assert!(!dest.join(".partial").exists());
    assert!(!dest.join(".unverified").exists());

    // Finished, the copy is an occupied directory, not a running backup.
    let third = run_to_exit(&mut backup(d, &db, &dest), Duration::from_secs(60));
    assert_eq!(third.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&third.stderr),
        format!(
            "worldd: backup: destination {} exists and is not an empty directory; refusing to write over it\n",
            dest.display()
        )
    );

    // A `.partial` nobody holds is what an interrupted backup left, and said so.
    let left = d.join("left");
    std::fs::create_dir_all(left.join(".partial")).unwrap();
    set_mode(&left, 0o700);
    let out = run_to_exit(&mut backup(d, &db, &left), Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "worldd: backup: destination {} holds an interrupted backup (its .partial directory, and no store); remove the directory, then back up again\n",
            left.display()
        )
    );
}

/// The copy was written through the directory opened once, but then opened for its check,
/// and its `.unverified` marker removed, through the destination's path: a destination moved
/// away mid-copy and replaced by a link had the linked directory's store checked and reported
/// with a ✓ and exit 0 as the copy, and that directory's own marker removed. The backup now
/// refuses (exit 3) before the check, and removes nothing where the link points nor from the
/// copy, which keeps its marker where it was moved.
#[test]
fn a_destination_swapped_for_a_link_mid_copy_is_refused_before_its_check_and_nothing_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let db = d.join("db");
    store_with_state(&db, 3000);
    // Another directory, holding a store a check would pass, and a marker of its own.
    let elsewhere = d.join("elsewhere");
    let out = run_to_exit(&mut backup(d, &db, &elsewhere), Duration::from_secs(120));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(elsewhere.join(".unverified"), "theirs").unwrap();
    let theirs = names_in(&elsewhere);
    assert_eq!(
        theirs,
        [".unverified", "data.mdb", "lock.mdb", "plugin-state"]
    );

    let (mut first, dest) = stopped_mid_copy(d, &db, "bk");
    let moved = d.join("moved");
    std::fs::rename(&dest, &moved).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &dest).unwrap();
    signal(&first, libc::SIGCONT);
    let until = Instant::now() + Duration::from_secs(120);
    while first.try_wait().unwrap().is_none() {
        assert!(Instant::now() < until, "the backup never ended");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = first.wait_with_output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "worldd: backup: {} no longer names the directory the copy was written into (it was moved or replaced while the backup ran); the copy is not checked through it, and nothing is removed: the copy, wherever that directory is now, keeps its .unverified marker; back up again\n",
            dest.display()
        )
    );
    assert_eq!(out.status.code(), Some(3));
    // What was copied is said; no check is.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("  plugin-state: 3000 file(s), 1536000 bytes\n"),
        "{stdout}"
    );
    assert!(!stdout.contains('✓'), "{stdout}");

    assert_eq!(names_in(&elsewhere), theirs);
    assert_eq!(
        std::fs::read_to_string(elsewhere.join(".unverified")).unwrap(),
        "theirs"
    );
    assert!(std::fs::symlink_metadata(&dest).unwrap().is_symlink());
    // The copy is whole where it was moved, and still says it was never checked.
    assert_eq!(
        names_in(&moved),
        [".unverified", "data.mdb", "lock.mdb", "plugin-state"]
    );
    assert_eq!(
        std::fs::read_dir(moved.join("plugin-state/p"))
            .unwrap()
            .count(),
        3000
    );
}

/// `backup` into a new directory inside one every user may write, without the sticky bit, was
/// accepted: anyone could rename the finished copy away and put theirs under its name, to be
/// restored later as a checked backup. `serve` refuses exactly that for a store; `backup` now
/// refuses it for its destination, in the same words, before it makes anything.
#[test]
fn a_backup_into_a_directory_every_user_may_write_without_the_sticky_bit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let db = d.join("db");
    store_with_state(&db, 1);
    let open = d.join("open");
    std::fs::create_dir(&open).unwrap();
    set_mode(&open, 0o777);
    let dest = open.join("bk");
    let refused = |dest: &Path| {
        let out = run_to_exit(&mut backup(d, &db, dest), Duration::from_secs(60));
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!(
                "worldd: backup: destination {}: refusing it inside {}, a directory every user may write, without the sticky bit (mode 0777): anyone could swap it for their own; `chmod o-w {}`\n",
                dest.display(),
                open.display(),
                open.display()
            )
        );
    };
    refused(&dest);
    assert!(!dest.exists());
    // An empty destination made there beforehand is refused the same.
    std::fs::create_dir(&dest).unwrap();
    set_mode(&dest, 0o700);
    refused(&dest);
    assert_eq!(std::fs::read_dir(&dest).unwrap().count(), 0);
    std::fs::remove_dir(&dest).unwrap();

    // Sticky (as /tmp is), nobody may rename what is not theirs: the backup is made.
    set_mode(&open, 0o1777);
    let out = run_to_exit(&mut backup(d, &db, &dest), Duration::from_secs(60));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dest.join("data.mdb").is_file());
}

/// `backup` into a running daemon's workspace root (or a directory inside it) was accepted
/// unless `--workspace-root` named that root: a copy of the whole store, credentials' hashes
/// and all, where that daemon's agents write and read. And a running daemon's empty workspace
/// root as the destination was "being written by another worldd backup; wait for it", which
/// waited for ever. Any running daemon's root or store is refused, named, with nothing made.
#[test]
fn a_backup_into_or_inside_a_running_daemons_workspace_root_is_refused_naming_it() {
    let a = Daemon::start(&["worldd_workspace"], &[]);
    a.session("demo", &["Workspace.Write=worktree:5"]);
    let c = Daemon::start(&["worldd_workspace"], &[]);
    let elsewhere = tempfile::tempdir().unwrap();
    let e = elsewhere.path();
    let refused = |dest: &Path, said: String| {
        let out = run_to_exit(&mut backup(e, &a.db(), dest), Duration::from_secs(60));
        assert_eq!(String::from_utf8_lossy(&out.stderr), said);
        assert_eq!(out.status.code(), Some(1));
        assert!(out.stdout.is_empty());
    };
    let inside = |dest: &Path, root: &Path| {
        format!(
            "worldd: backup: destination {} is inside {}, which a running worldd holds as its workspace root or store: its agents could change the copy (and so what a restore brings back) or read every episode's data in it; choose a directory outside it\n",
            dest.display(),
            root.canonicalize().unwrap().display()
        )
    };
    // Inside the backed-up daemon's own root, its --workspace-root not given.
    let bk = a.root().join("demo/bk");
    refused(&bk, inside(&bk, &a.root()));
    assert!(!bk.exists());
    // Another daemon's empty root is that daemon's, not a backup being written.
    refused(
        &c.root(),
        format!(
            "worldd: backup: destination {} is the workspace root or store of a running worldd; choose a directory outside it\n",
            c.root().display()
        ),
    );
    let sub = c.root().join("sub");
    refused(&sub, inside(&sub, &c.root()));
    assert_eq!(std::fs::read_dir(c.root()).unwrap().count(), 0);
    // Beside them, outside every daemon's root and store, the backup is made.
    let beside = a.dir.path().join("bk");
    let out = run_to_exit(&mut backup(e, &a.db(), &beside), Duration::from_secs(60));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(beside.join("data.mdb").is_file());
    assert_eq!(get(&a.url("/v1/health"), None).status, 200);
    assert_eq!(get(&c.url("/v1/health"), None).status, 200);
}

/// Only the destination's own parent was looked at: a destination one level below a directory
/// every user may write without the sticky bit was accepted, though anyone could rename the
/// directory between (`mv open/sub open/x && mkdir open/sub`) and swap the finished copy with
/// it. Every directory above is looked at; the nearest such one is named.
#[test]
fn a_backup_below_a_directory_every_user_may_write_however_deep_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let db = d.join("db");
    store_with_state(&db, 1);
    let open = d.join("open");
    std::fs::create_dir_all(open.join("sub/deeper")).unwrap();
    set_mode(&open, 0o777);
    for dest in [open.join("sub/bk"), open.join("sub/deeper/bk")] {
        let out = run_to_exit(&mut backup(d, &db, &dest), Duration::from_secs(60));
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!(
                "worldd: backup: destination {}: refusing it inside {}, a directory every user may write, without the sticky bit (mode 0777): anyone could swap it for their own; `chmod o-w {}`\n",
                dest.display(),
                open.display(),
                open.display()
            )
        );
        assert_eq!(out.status.code(), Some(1));
        assert!(!dest.exists());
    }
    // Sticky (as /tmp is), nobody may rename what is not theirs: the backup is made.
    set_mode(&open, 0o1777);
    let dest = open.join("sub/deeper/bk");
    let out = run_to_exit(&mut backup(d, &db, &dest), Duration::from_secs(60));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dest.join("data.mdb").is_file());
}
