//! A consistent copy of a store, taken while the daemon serves it (`worldd backup`).
//!
//! The store's data file is copied by LMDB under one read transaction, so the copy holds one
//! commit's state whatever the daemon commits meanwhile. The plugins' state directory
//! (`plugin-state/`) is copied after it, file by file: every effect the copied log records was
//! done before that copy began (the state may also hold effects of calls committed after the
//! store's copy, which the restored log does not know of). A copy that fails midway is removed,
//! so that no partial copy looks like a backup.
//!
//! ```no_run
//! use broker_core::store::Store;
//! use std::path::Path;
//!
//! let db = Path::new(".world/db");
//! let store = Store::open(db, Default::default())?;
//! let taken = worldd::backup::take(&store, db, Path::new("/backup/world-db"), false)?;
//! println!("{} bytes of store", taken.data_bytes);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use broker_core::store::{Store, StoreError};

/// The plugins' state directory inside a store directory.
pub const PLUGIN_STATE: &str = "plugin-state";

/// Deeper than any plugin's state needs; a bound so that a directory nested without end ends
/// the copy with an error instead of the process's stack.
const MAX_DEPTH: usize = 128;

/// What a backup copied.
#[derive(Debug, Default)]
pub struct Taken {
    /// The size of the copied `data.mdb`.
    pub data_bytes: u64,
    /// Regular files copied from `plugin-state/`, and their bytes.
    pub state_files: u64,
    pub state_bytes: u64,
    /// Entries of `plugin-state/` that are no file, directory or symbolic link (a FIFO, a
    /// socket, a device): not copied.
    pub skipped: Vec<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("destination {0} exists and is not an empty directory; refusing to write over it")]
    Occupied(PathBuf),
    #[error("destination {dest} is inside the store {db}; choose a directory outside it")]
    InsideStore { dest: PathBuf, db: PathBuf },
    #[error("plugin state {0} is nested deeper than {MAX_DEPTH} directories; not copied")]
    TooDeep(PathBuf),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("copying the store into {path}: {source}")]
    Store {
        path: PathBuf,
        #[source]
        source: StoreError,
    },
}

impl BackupError {
    /// The destination was refused before anything was written.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            BackupError::Occupied(_) | BackupError::InsideStore { .. }
        )
    }
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> BackupError + '_ {
    move |source| BackupError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Copy the store open as `store` (its directory `db`) into `dest`, which must be absent or an
/// empty directory outside `db`. Everything written is synced before this returns; on failure,
/// what was written is removed.
pub fn take(store: &Store, db: &Path, dest: &Path, compact: bool) -> Result<Taken, BackupError> {
    let made = prepare(db, dest)?;
    let mut wrote = Vec::new();
    let copied = copy_store(store, db, dest, compact, &mut wrote);
    if copied.is_err() {
        undo(dest, made, &wrote);
    }
    copied
}

/// Check `dest` and make it (mode 0700: the store holds credentials' hashes) when absent.
/// Returns whether it was made here.
fn prepare(db: &Path, dest: &Path) -> Result<bool, BackupError> {
    let inside = match (db.canonicalize(), resolved_target(dest)) {
        (Ok(db), Some(dest)) => dest.starts_with(db),
        _ => false,
    };
    if inside {
        return Err(BackupError::InsideStore {
            dest: dest.to_path_buf(),
            db: db.to_path_buf(),
        });
    }
    match fs::symlink_metadata(dest) {
        Ok(md) if md.is_dir() => {
            let mut entries = fs::read_dir(dest).map_err(io_at(dest))?;
            if entries.next().is_some() {
                return Err(BackupError::Occupied(dest.to_path_buf()));
            }
            Ok(false)
        }
        Ok(_) => Err(BackupError::Occupied(dest.to_path_buf())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            DirBuilder::new()
                .mode(0o700)
                .create(dest)
                .map_err(io_at(dest))?;
            Ok(true)
        }
        Err(e) => Err(io_at(dest)(e)),
    }
}

/// Where `dest` would be, through its existing ancestors (it need not exist yet).
fn resolved_target(dest: &Path) -> Option<PathBuf> {
    let absolute = std::path::absolute(dest).ok()?;
    let mut tail = Vec::new();
    let mut at = absolute.as_path();
    loop {
        if let Ok(real) = at.canonicalize() {
            return Some(tail.iter().rev().fold(real, |p, name| p.join(name)));
        }
        tail.push(at.file_name()?.to_owned());
        at = at.parent()?;
    }
}

/// Copy into `dest`, noting in `wrote` each entry of `dest` this made.
fn copy_store(
    store: &Store,
    db: &Path,
    dest: &Path,
    compact: bool,
    wrote: &mut Vec<PathBuf>,
) -> Result<Taken, BackupError> {
    let data = dest.join("data.mdb");
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&data)
        .map_err(io_at(&data))?;
    wrote.push(data.clone());
    let store_err = |source| BackupError::Store {
        path: dest.to_path_buf(),
        source,
    };
    store.copy_to(&mut file, compact).map_err(store_err)?;
    file.sync_all().map_err(io_at(&data))?;
    let mut taken = Taken {
        data_bytes: file.metadata().map_err(io_at(&data))?.len(),
        ..Taken::default()
    };
    // The snapshot copied may be one the daemon has committed and not yet synced: it is made
    // durable at the source too, so that the copy never holds more than the store can.
    store.sync_seen().map_err(store_err)?;
    let state = db.join(PLUGIN_STATE);
    if fs::symlink_metadata(&state).is_ok_and(|md| md.is_dir()) {
        let into = dest.join(PLUGIN_STATE);
        make_dir_like(&state, &into)?;
        wrote.push(into.clone());
        copy_tree(&state, &into, 0, &mut taken)?;
    }
    sync_dir(dest)?;
    Ok(taken)
}

/// Make the directory `to` with the mode of the directory `from`.
fn make_dir_like(from: &Path, to: &Path) -> Result<(), BackupError> {
    let mode = fs::symlink_metadata(from)
        .map_err(io_at(from))?
        .permissions()
        .mode();
    DirBuilder::new()
        .mode(mode & 0o7777)
        .create(to)
        .map_err(io_at(to))
}

/// Copy the directory `from` into the made directory `to`, keeping modes and symbolic links
/// (never followed).
fn copy_tree(from: &Path, to: &Path, depth: usize, taken: &mut Taken) -> Result<(), BackupError> {
    if depth > MAX_DEPTH {
        return Err(BackupError::TooDeep(from.to_path_buf()));
    }
    let mut entries = fs::read_dir(from)
        .map_err(io_at(from))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(io_at(from))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let src = entry.path();
        let dst = to.join(entry.file_name());
        let md = fs::symlink_metadata(&src).map_err(io_at(&src))?;
        let kind = md.file_type();
        if kind.is_dir() {
            make_dir_like(&src, &dst)?;
            copy_tree(&src, &dst, depth + 1, taken)?;
        } else if kind.is_file() {
            taken.state_bytes += copy_file(&src, &dst, md.permissions().mode())?;
            taken.state_files += 1;
        } else if kind.is_symlink() {
            let target = fs::read_link(&src).map_err(io_at(&src))?;
            std::os::unix::fs::symlink(target, &dst).map_err(io_at(&dst))?;
        } else {
            taken.skipped.push(src);
        }
    }
    sync_dir(to)
}

fn copy_file(from: &Path, to: &Path, mode: u32) -> Result<u64, BackupError> {
    let mut src = File::open(from).map_err(io_at(from))?;
    let mut dst = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode & 0o7777)
        .open(to)
        .map_err(io_at(to))?;
    let bytes = io::copy(&mut src, &mut dst).map_err(io_at(to))?;
    dst.sync_all().map_err(io_at(to))?;
    Ok(bytes)
}

fn sync_dir(dir: &Path) -> Result<(), BackupError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_at(dir))
}

/// Remove what a failed backup wrote, and the destination when it was made here and is empty
/// again. Only what this process made is removed: another backup racing it into the same
/// directory keeps its files.
fn undo(dest: &Path, made: bool, wrote: &[PathBuf]) {
    for path in wrote.iter().rev() {
        let _ = match fs::symlink_metadata(path) {
            Ok(md) if md.is_dir() => fs::remove_dir_all(path),
            _ => fs::remove_file(path),
        };
    }
    if made {
        let _ = fs::remove_dir(dest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failed backup removes what it wrote and nothing else: a file another backup put in the
    /// same directory meanwhile stays, and so does the directory holding it.
    #[test]
    fn undoing_a_failed_backup_removes_only_what_it_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("dest");
        fs::create_dir(&dest).unwrap();
        fs::write(dest.join("data.mdb"), "ours").unwrap();
        fs::create_dir_all(dest.join("plugin-state/a")).unwrap();
        fs::write(dest.join("plugin-state/a/f"), "ours").unwrap();
        fs::write(dest.join("theirs"), "theirs").unwrap();
        undo(
            &dest,
            true,
            &[dest.join("data.mdb"), dest.join("plugin-state")],
        );
        let left: Vec<_> = fs::read_dir(&dest)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["theirs"]);
        fs::remove_file(dest.join("theirs")).unwrap();
        undo(&dest, true, &[]);
        assert!(!dest.exists());
    }

    /// Plugin state nested past the bound ends the copy with an error naming where, not the
    /// process's stack; at the bound it is copied.
    #[test]
    fn plugin_state_nested_past_the_bound_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("state");
        let mut deepest = from.clone();
        for _ in 0..=MAX_DEPTH {
            deepest.push("d");
        }
        fs::create_dir_all(&deepest).unwrap();
        let to = dir.path().join("copy");
        fs::create_dir(&to).unwrap();
        let e = copy_tree(&from, &to, 0, &mut Taken::default()).unwrap_err();
        assert!(
            matches!(&e, BackupError::TooDeep(at) if *at == deepest),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            format!(
                "plugin state {} is nested deeper than 128 directories; not copied",
                deepest.display()
            )
        );
        fs::remove_dir(&deepest).unwrap();
        let to = dir.path().join("copy-2");
        fs::create_dir(&to).unwrap();
        copy_tree(&from, &to, 0, &mut Taken::default()).unwrap();
    }

    /// A destination inside the store is refused however it is reached: through a symbolic
    /// link, or with `..`, and before it exists.
    #[test]
    fn a_destination_inside_the_store_is_refused_through_links_and_dots() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        fs::create_dir_all(db.join("plugin-state")).unwrap();
        std::os::unix::fs::symlink(&db, dir.path().join("link")).unwrap();
        for dest in [
            db.join("copy"),
            dir.path().join("link/new/copy"),
            db.join("plugin-state/../copy"),
        ] {
            let e = prepare(&db, &dest).unwrap_err();
            assert!(
                matches!(e, BackupError::InsideStore { .. }),
                "{dest:?}: {e}"
            );
            assert!(!dest.exists());
        }
        assert!(prepare(&db, &dir.path().join("db-copy")).unwrap());
    }
}
