//! `worldd backup` where a disk fills, through the real binary on real stores: a destination
//! with room for the data file but not for the lock file the copy's check makes, and a report
//! whose stdout (a cron job's log) is on a full disk.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::*;

/// A new store in `db` (its genesis entry), closed again.
fn store(db: &Path) {
    drop(broker_core::store::Store::create(db).unwrap());
}

/// `worldd backup --db DB DEST` with `stdout` as given: its exit code, stdout and stderr.
fn backup(db: &Path, dest: &Path, stdout: Stdio) -> (i32, String, String) {
    let out = Command::new(WORLDD)
        .arg("backup")
        .arg("--db")
        .arg(db)
        .arg("--workspace-root")
        .arg(db.with_file_name("worktrees"))
        .arg(dest)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Exit 2 in the documented disk-full shape, and nothing left on the destination's filesystem.
fn assert_disk_full(code: i32, out: &str, err: &str, dest: &Path, mount: &Path) {
    assert_eq!((code, out), (2, ""), "{err}");
    assert!(
        err.starts_with(&format!(
            "worldd: backup: copying the store into {}: disk full: the destination's filesystem has no space left (",
            dest.display()
        )) && err.ends_with(&format!("; nothing was left in {}\n", dest.display())),
        "{err}"
    );
    assert_eq!(names_in(mount), Vec::<String>::new(), "{err}");
}

/// A destination with room for the copy's `data.mdb` but not for the 65,664-byte `lock.mdb`
/// that opening the copy for its check makes: the backup exited 3, as for a damaged copy, and
/// left the whole unchecked copy taking the full disk's room. It is now disk full (exit 2) as a
/// copy that fails midway is, and nothing is left; with room for both it is a checked backup.
#[test]
fn a_backup_whose_destination_fills_while_its_copy_is_checked_is_disk_full_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    store(&db);
    let data = std::fs::metadata(db.join("data.mdb")).unwrap().len();
    let Some(fs) = Tmpfs::mount(data + (8 << 10)) else {
        eprintln!("*** not root: a backup onto a nearly full disk is not tried ***");
        return;
    };
    for dest in [fs.dir.path().join("dest"), fs.dir.path().to_path_buf()] {
        let (code, out, err) = backup(&db, &dest, Stdio::piped());
        assert_disk_full(code, &out, &err, &dest, fs.dir.path());
        // Found before the copy was moved into place: the lock file's room is taken with it.
        assert!(
            err.contains(&format!(
                "({}: the 65664 bytes of the copy's lock file, which its check makes, cannot be allocated: No space left on device (os error 28));",
                dest.join("lock.mdb").display()
            )),
            "{err}"
        );
    }
    let Some(roomy) = Tmpfs::mount(data + (256 << 10)) else {
        return;
    };
    let dest = roomy.dir.path().join("dest");
    let (code, out, err) = backup(&db, &dest, Stdio::piped());
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("✓ the copy opens and doctor's checks pass"),
        "{out}"
    );
    assert_eq!(names_in(&dest), ["data.mdb", "lock.mdb"]);
}

/// The same full destination, from a store on a read-only filesystem that holds no `lock.mdb`
/// (a snapshot: read where it is, without a lock file), so that nothing says how large the
/// copy's lock file will be before the check's open makes it: that open's disk full is the
/// destination's, exit 2, and what the backup wrote is removed, not left as a copy that "does
/// not open" (exit 3).
#[test]
fn a_backup_whose_checks_open_meets_a_full_destination_is_disk_full_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("source");
    store(&source);
    std::fs::remove_file(source.join("lock.mdb")).unwrap();
    let db = dir.path().join("db");
    std::fs::create_dir(&db).unwrap();
    let Some(_ro) = BindMount::read_only(&source, &db) else {
        eprintln!("*** not root: a backup of a read-only store onto a full disk is not tried ***");
        return;
    };
    let data = std::fs::metadata(db.join("data.mdb")).unwrap().len();
    let Some(fs) = Tmpfs::mount(data + (8 << 10)) else {
        return;
    };
    let dest = fs.dir.path().join("dest");
    let (code, out, err) = backup(&db, &dest, Stdio::piped());
    assert_disk_full(code, &out, &err, &dest, fs.dir.path());
    assert!(
        err.contains("lock.mdb: its 65664 bytes of reader slots cannot be allocated: No space left on device (os error 28)"),
        "{err}"
    );
}

/// `worldd backup … >> LOG` with the log's disk full: the copy was made, then the first report
/// line failed and the verb returned before checking it, leaving a good copy marked unchecked
/// that refused every later backup into DEST. The copy is now checked first; the verb then
/// exits with the failed write (1), saying that the copy is checked.
#[test]
fn a_backup_whose_report_cannot_be_written_still_checks_its_copy_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    store(&db);
    let dest = dir.path().join("bk");
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let (code, _, err) = backup(&db, &dest, Stdio::from(full));
    assert_eq!(
        (code, err.as_str()),
        (
            1,
            format!(
                "worldd: backup: the copy in {} is checked (it opens and doctor's checks pass: 1 entr(ies), 0 indeterminate intent(s)), but its report could not be written: cannot write to stdout: No space left on device (os error 28)\n",
                dest.display()
            )
            .as_str()
        )
    );
    assert_eq!(names_in(&dest), ["data.mdb", "lock.mdb"]);
    let (code, out, err) = worldd(&["doctor", "--db", path_str(&dest)], None);
    assert_eq!(code, 0, "{out}{err}");
    // Not refused as a backup never checked: an ordinary occupied destination.
    let (code, _, err) = backup(&db, &dest, Stdio::piped());
    assert_eq!(
        (code, err),
        (
            1,
            format!(
                "worldd: backup: destination {} exists and is not an empty directory; refusing to write over it\n",
                dest.display()
            )
        )
    );
}

/// A destination with room for the copy's `data.mdb` and `lock.mdb` and not a block more: the
/// last block went to the `.unverified` marker, whose full disk was said as a bare path error
/// (`DEST/.unverified: No space left on device`), not the destination full as documented. Any
/// write into the destination that finds it full is said one way, exit 2, nothing left.
#[test]
fn a_destination_full_at_the_copys_marker_is_said_as_the_destination_full() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    store(&db);
    let data = std::fs::metadata(db.join("data.mdb")).unwrap().len();
    // The lock file's 65,664 bytes take 17 pages.
    let Some(fs) = Tmpfs::mount(data + 17 * 4096) else {
        eprintln!("*** not root: a backup onto a nearly full disk is not tried ***");
        return;
    };
    let dest = fs.dir.path().join("dest");
    let (code, out, err) = backup(&db, &dest, Stdio::piped());
    assert_disk_full(code, &out, &err, &dest, fs.dir.path());
    assert!(
        err.contains(&format!(
            "({}: No space left on device (os error 28));",
            dest.join(".unverified").display()
        )),
        "{err}"
    );
}
