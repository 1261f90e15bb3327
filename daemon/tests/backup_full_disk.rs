//! `worldd backup` where a disk fills, through the real binary on real stores: a report whose
//! stdout (a cron job's log) is on a full disk.

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

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
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
    assert_eq!(names(&dest), ["data.mdb", "lock.mdb"]);
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
