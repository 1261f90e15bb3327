//! `worldd backup DEST`: a consistent copy of a store while the daemon serves it
//! ([`crate::backup`]), then the copy opened and checked as `worldd doctor` checks a store.

use std::path::{Path, PathBuf};

use broker_core::store::{Store, StoreError, StoreOptions};
use broker_core::verify;
use clap::Args;

use super::session::open_to_read;
use super::{output, CliResult, DbArg, Failure};
use crate::backup;

#[derive(Args, Debug)]
pub struct BackupArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// The directory to copy into: absent (it is made, mode 0700) or empty, outside the store,
    /// and writable by this user alone.
    pub dest: PathBuf,
    /// The daemon's workspace root (default: .world/worktrees): the destination must lie
    /// outside it, since agents write there.
    #[arg(long)]
    pub workspace_root: Option<PathBuf>,
    /// Leave out the store's free pages: a copy as small as its rows, which takes longer.
    #[arg(long)]
    pub compact: bool,
}

pub fn run(a: BackupArgs) -> CliResult {
    let super::StorePaths {
        db,
        workspace_root: root,
    } = a.db.paths(a.workspace_root.as_deref())?;
    let db = &db;
    backup::refuse_inside_workspace(&a.dest, &root)
        .map_err(|e| Failure::usage(format!("backup: {e}")))?;
    let store = open_to_read(db)?;
    let taken = backup::take(&store, db, &a.dest, a.compact).map_err(|e| {
        if e.is_refusal() {
            Failure::usage(format!("backup: {e}"))
        } else {
            failed(&e, &a.dest, e.left())
        }
    })?;
    drop(store);
    let mut report = format!(
        "backup: {} -> {}\n  data.mdb: {} bytes\n  {}: {} file(s), {} bytes\n",
        db.display(),
        a.dest.display(),
        taken.data_bytes,
        backup::PLUGIN_STATE,
        taken.state_files,
        taken.state_bytes
    );
    for skipped in &taken.skipped {
        report.push_str(&format!(
            "  skipped {} (not a file, a directory or a symbolic link)\n",
            skipped.display()
        ));
    }
    // The copy is checked before anything is reported: a report that cannot be written (a
    // cron job's log on a full disk) once ended the verb first, leaving a good copy marked
    // unchecked, which refused every later backup into DEST.
    let audit = check(taken, &a.dest, &report)?;
    let checks = format!(
        "opens and doctor's checks pass: {} entr(ies), {} indeterminate intent(s)",
        audit.entries,
        audit.indeterminate.len()
    );
    report.push_str(&format!("  ✓ the copy {checks}\n"));
    output::try_write(&report).map_err(|e| {
        if output::reader_gone(&e) {
            return output::failure(e);
        }
        Failure::usage(format!(
            "backup: the copy in {} is checked (it {checks}), but its report could not be written: {}",
            a.dest.display(),
            output::unwritten(&e)
        ))
    })
}

/// A copy that failed (`e`): "nothing was left" only where what it wrote was all removed,
/// else what may be left and why (`left`).
fn failed(e: &backup::BackupError, dest: &Path, left: Option<&backup::BackupError>) -> Failure {
    let dest = dest.display();
    Failure::fatal(match left {
        None => format!("backup: {e}; nothing was left in {dest}"),
        Some(left) => format!(
            "backup: {e}; what it wrote may be left in {dest} ({left}): remove it before backing up into {dest} again"
        ),
    })
}

/// Open and check the copy `taken` wrote into `dest`, then mark it checked; on failure, what
/// was copied (`report`) is said first where it can be. `taken` holds the destination's
/// directory until this returns.
fn check(taken: backup::Taken, dest: &Path, report: &str) -> Result<verify::StoreAudit, Failure> {
    // What was copied, then why it is no checked backup; the failure is the verb's answer
    // even where the report cannot be written.
    let unchecked = |failure: Failure| {
        let _ = output::try_write(report);
        failure
    };
    // The check opens the copy by its path: where that names another directory by now, that
    // directory would be checked and reported as the copy. Asked again once the check is done,
    // so that a path swapped during it is refused too.
    let still_at = |taken: &backup::Taken| {
        taken
            .still_at(dest)
            .map_err(|e| unchecked(Failure::integrity(format!("backup: {e}"))))
    };
    still_at(&taken)?;
    let audit = match check_copy(dest) {
        Ok(audit) => audit,
        Err(Unchecked::DestinationFull(detail)) => {
            let e = backup::BackupError::DestinationFull {
                path: dest.to_path_buf(),
                detail,
            };
            let undone = taken.discard(dest);
            return Err(failed(&e, dest, undone.as_ref().err()));
        }
        Err(Unchecked::Failed(failure)) => return Err(unchecked(failure)),
    };
    still_at(&taken)?;
    // Only now is the copy a checked backup: until here its marker says it is not.
    taken.checked(dest).map_err(|e| {
        Failure::fatal(format!(
            "backup: the copy in {} passed its checks, but {e}",
            dest.display()
        ))
    })?;
    Ok(audit)
}

/// Why the copy is not a checked backup.
enum Unchecked {
    /// Opening the copy met a full disk (the lock file it makes): the destination's, not a
    /// copy that does not open.
    DestinationFull(String),
    /// The copy does not open, or is inconsistent (exit 3).
    Failed(Failure),
}

/// Open the copy in `dest` as a store of its own and run doctor's checks on it.
fn check_copy(dest: &Path) -> Result<verify::StoreAudit, Unchecked> {
    // The copy is this process's alone until the verb ends: it may lie on a network share.
    let options = StoreOptions {
        allow_network_filesystem: true,
        ..StoreOptions::default()
    };
    // As the store was copied: an older schema stays what it was (see `open_to_read`), so that
    // the build that wrote the store can still restore the copy.
    // The source's opening warned of its intents without an outcome already (once a run).
    let (copy, _) = super::doctor::without_pending_warning(|| {
        broker_core::migrate::keeping_schema(|| Store::open(dest, options))
    });
    let copy = copy.map_err(|e| match e {
        StoreError::DiskFull(detail) => Unchecked::DestinationFull(detail),
        e => Unchecked::Failed(Failure::integrity(format!(
            "backup: the copy in {} does not open: {e}",
            dest.display()
        ))),
    })?;
    let audit = verify::audit_store(&copy).map_err(|e| {
        Unchecked::Failed(Failure::integrity(format!(
            "backup: checking the copy: {e}"
        )))
    })?;
    if !audit.consistent() {
        return Err(Unchecked::Failed(Failure::integrity(format!(
            "backup: the copy in {} is inconsistent; `worldd doctor --db {}` says where",
            dest.display(),
            dest.display()
        ))));
    }
    Ok(audit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::BackupError;

    /// The entries of `dir`, sorted.
    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// The copy was checked, and its `.unverified` marker removed, through the destination's
    /// path, while its discard went through the directory it was written into: with the
    /// destination swapped for a link between the copy and its check, another directory's
    /// store was checked and reported as the copy, and that directory lost its own marker. The
    /// swap is now refused (exit 3) before the check, and nothing is removed on either side.
    #[test]
    fn a_destination_swapped_for_a_link_before_its_check_is_refused_and_nothing_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let store = Store::create(&db).unwrap();
        std::fs::create_dir_all(db.join("plugin-state/p")).unwrap();
        std::fs::write(db.join("plugin-state/p/f"), "state").unwrap();
        let dest = dir.path().join("dest");
        let taken = backup::take(&store, &db, &dest, false).unwrap();
        // Another directory, holding an unchecked copy of its own that a check would pass.
        let elsewhere = dir.path().join("elsewhere");
        drop(backup::take(&store, &db, &elsewhere, false).unwrap());
        let moved = dir.path().join("moved");
        std::fs::rename(&dest, &moved).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &dest).unwrap();
        let copy = [".unverified", "data.mdb", "lock.mdb", "plugin-state"];
        assert_eq!(names(&elsewhere), copy);
        let failure = check(taken, &dest, "").unwrap_err();
        assert_eq!(failure.code, 3);
        assert_eq!(
            failure.message,
            format!(
                "backup: {} no longer names the directory the copy was written into (it was moved or replaced while the backup ran); the copy is not checked through it, and nothing is removed: the copy, wherever that directory is now, keeps its .unverified marker; back up again",
                dest.display()
            )
        );
        assert_eq!(names(&elsewhere), copy);
        assert_eq!(names(&moved), copy);
        assert!(std::fs::symlink_metadata(&dest).unwrap().is_symlink());
        // A destination left where it was is checked, and loses its marker, as before.
        let kept = dir.path().join("kept");
        let taken = backup::take(&store, &db, &kept, false).unwrap();
        drop(store);
        let audit = check(taken, &kept, "").unwrap();
        assert!(audit.consistent());
        assert_eq!(names(&kept), ["data.mdb", "lock.mdb", "plugin-state"]);
        assert_eq!(names(&elsewhere), copy);
    }

    /// A failed copy said "nothing was left in DEST" whatever its undo did. That is said now
    /// only where the undo removed it all; otherwise what may be left and why.
    #[test]
    fn a_failed_copy_says_nothing_was_left_only_where_its_undo_removed_it_all() {
        let dest = Path::new("/b/dest");
        let full = || BackupError::DestinationFull {
            path: dest.to_path_buf(),
            detail: "x".into(),
        };
        assert_eq!(
            failed(&full(), dest, full().left()).message,
            "backup: copying the store into /b/dest: disk full: the destination's filesystem has no space left (x); nothing was left in /b/dest"
        );
        let not_undone = BackupError::NotUndone {
            error: Box::new(full()),
            left: Box::new(BackupError::Io {
                path: dest.join("data.mdb"),
                source: std::io::Error::from_raw_os_error(libc::EPERM),
            }),
        };
        assert_eq!(
            failed(&not_undone, dest, not_undone.left()).message,
            "backup: copying the store into /b/dest: disk full: the destination's filesystem has no space left (x); what it wrote may be left in /b/dest (/b/dest/data.mdb: Operation not permitted (os error 1)): remove it before backing up into /b/dest again"
        );
        let unheld = BackupError::Unheld(dest.to_path_buf());
        assert_eq!(
            failed(&full(), dest, Some(&unheld)).message,
            "backup: copying the store into /b/dest: disk full: the destination's filesystem has no space left (x); what it wrote may be left in /b/dest (/b/dest was not held open, and what the backup wrote there is not removed through its path, which may name another directory by now): remove it before backing up into /b/dest again"
        );
    }
}
