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

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt as _, PermissionsExt};
use std::path::{Path, PathBuf};

use broker_core::store::{Store, StoreError};
use cap_std::fs::{Dir, DirBuilder, DirBuilderExt, OpenOptions, OpenOptionsExt as _};

/// The plugins' state directory inside a store directory.
pub const PLUGIN_STATE: &str = "plugin-state";

/// Where a backup writes its copy before moving it into place, inside the destination: a
/// backup killed midway leaves this and no `data.mdb`, so nothing takes it for a store.
pub const PARTIAL: &str = ".partial";

/// A file a backup leaves in the destination from just before `data.mdb` is moved into place
/// until the copy has been opened and checked ([`Taken::checked`]): a backup killed during its check
/// leaves a whole copy that looks like a finished one, and this tells it apart.
pub const UNVERIFIED: &str = ".unverified";

/// What `serve` and `doctor` say of a store directory that still holds [`UNVERIFIED`]: a
/// backup copy restored before (or without) its check passing.
pub fn unverified_warning(db: &Path) -> Option<String> {
    std::fs::symlink_metadata(db.join(UNVERIFIED)).ok()?;
    Some(format!(
        "{} holds {UNVERIFIED}: it is a backup copy that was never checked (its backup was interrupted, or its check failed), so it may be incomplete; restore from another backup, or run worldd doctor --db {} on it with no daemon serving and remove {UNVERIFIED} only if it reports the store consistent",
        db.display(),
        db.display()
    ))
}

/// What [`UNVERIFIED`] says to whoever finds it.
const UNVERIFIED_TEXT: &str = "worldd backup wrote this copy but has not checked it: the backup was interrupted, or its check failed. Do not restore from it; back up again into an empty directory.\n";

/// The unfinished copy an interrupted backup left in `db`, when `db` holds that and no store:
/// a directory nothing may open as a store, nor make a new store beside.
pub fn interrupted_copy(db: &Path) -> Option<PathBuf> {
    let partial = db.join(PARTIAL);
    (partial.is_dir() && !db.join("data.mdb").exists()).then_some(partial)
}

/// The lock file LMDB makes beside `data.mdb` when a store is opened for writing, as the
/// copy's check opens it.
const LOCK: &str = "lock.mdb";

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
    /// The destination's directory, open (and locked: [`BackupError::Busy`]) until this is
    /// dropped: until the copy has been checked, another backup into it is refused as running,
    /// not interrupted, and [`Taken::discard`] removes the copy through it, never through the
    /// destination's path, which may name another directory by then.
    held: Option<Dir>,
    /// Whether the destination directory was made by this backup, and the entries of it this
    /// backup wrote: what [`Taken::discard`] removes.
    made: bool,
    wrote: Vec<&'static str>,
}

impl Taken {
    /// Remove the copy (its check found the destination full): what the backup wrote, the
    /// `lock.mdb` the check's open made, and the destination when the backup made it. An
    /// error when anything of it may be left: one that could not be removed, or every entry
    /// where the destination's directory is not held (nothing is removed by path then).
    pub fn discard(mut self, dest: &Path) -> Result<(), BackupError> {
        let Some(target) = self.held.take() else {
            return Err(BackupError::Unheld(dest.to_path_buf()));
        };
        let mut names = vec![LOCK];
        names.extend(self.wrote.iter().copied().filter(|n| *n != LOCK));
        undo(&target, dest, self.made, &names)
    }

    /// Refuse unless `dest` (not followed) still names the directory the copy was written
    /// into: the copy's check opens it by that path, and a path that names another directory
    /// by then (moved away, a link put in its place) would have another store checked and
    /// reported as this copy.
    pub fn still_at(&self, dest: &Path) -> Result<(), BackupError> {
        match &self.held {
            None => Err(BackupError::Unheld(dest.to_path_buf())),
            Some(held) if names_the_same(held, dest) => Ok(()),
            Some(_) => Err(BackupError::Moved(dest.to_path_buf())),
        }
    }

    /// The copy (in the directory shown as `dest`) opened and passed its checks: its
    /// [`UNVERIFIED`] marker goes, and that is made durable, both through the directory the
    /// copy was written into, never through `dest`, which may name another directory by now
    /// (whose own marker would go instead).
    pub fn checked(&self, dest: &Path) -> Result<(), BackupError> {
        let Some(held) = &self.held else {
            return Err(BackupError::Unheld(dest.to_path_buf()));
        };
        held.remove_file(UNVERIFIED)
            .map_err(io_at(&dest.join(UNVERIFIED)))?;
        sync_dir(held, dest)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("destination {0} exists and is not an empty directory; refusing to write over it")]
    Occupied(PathBuf),
    #[error("destination {dest}: its parent directory {parent} does not exist; backup makes the destination itself, not the directories above it: make {parent} first (mode 0700), or choose a destination in an existing directory")]
    NoParent { dest: PathBuf, parent: PathBuf },
    #[error("destination {0} is being written by another worldd backup; wait for it")]
    Busy(PathBuf),
    #[error("destination {}: refusing it inside {}, a directory every user may write, without the sticky bit (mode {mode:04o}): anyone could swap it for their own; `chmod o-w {}`", dest.display(), parent.display(), crate::text::shell_path(parent))]
    LooseParent {
        dest: PathBuf,
        parent: PathBuf,
        mode: u32,
    },
    #[error("destination {0} holds an interrupted backup (its {PARTIAL} directory, and no store); remove the directory, then back up again")]
    Interrupted(PathBuf),
    #[error("destination {0} holds a backup that was never checked (its {UNVERIFIED} marker: the backup that wrote it was interrupted, or its copy failed the check); do not restore from it: remove the directory, then back up again")]
    Unverified(PathBuf),
    #[error("destination {dest} is inside the store {db}; choose a directory outside it")]
    InsideStore { dest: PathBuf, db: PathBuf },
    #[error("destination {dest} is inside the workspace root {root}, where agents write files: an agent could change the copy (and so what a restore brings back) or read every episode's data in it; choose a directory outside it")]
    InsideWorkspace { dest: PathBuf, root: PathBuf },
    #[error("destination {dest} is inside {dir}, which a running worldd holds as its workspace root or store: its agents could change the copy (and so what a restore brings back) or read every episode's data in it; choose a directory outside it")]
    InsideDaemon { dest: PathBuf, dir: PathBuf },
    #[error("destination {0} is the workspace root or store of a running worldd; choose a directory outside it")]
    DaemonsOwn(PathBuf),
    #[error("destination {dest} is owned by uid {uid} with mode {mode:04o}, so another user could change the copy as it is written; use a directory that only this user (uid {euid}) may write")]
    Foreign {
        dest: PathBuf,
        uid: u32,
        mode: u32,
        euid: u32,
    },
    #[error("plugin state {0} is nested deeper than {MAX_DEPTH} directories; not copied")]
    TooDeep(PathBuf),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The copy is written to the destination: a disk that fills is the destination's, not
    /// the store's, whatever the store's error says.
    #[error("copying the store into {path}: disk full: the destination's filesystem has no space left ({detail})")]
    DestinationFull { path: PathBuf, detail: String },
    #[error("copying the store into {path}: {source}")]
    Store {
        path: PathBuf,
        #[source]
        source: StoreError,
    },
    /// Said where a copy's writes would be removed: the destination's directory was not held
    /// open, and its path may name another directory by now.
    #[error("{0} was not held open, and what the backup wrote there is not removed through its path, which may name another directory by now")]
    Unheld(PathBuf),
    /// The destination's path names another directory than the one the copy was written
    /// into (moved away, or a link put in its place, after it was opened).
    #[error("{0} no longer names the directory the copy was written into (it was moved or replaced while the backup ran); the copy is not checked through it, and nothing is removed: the copy, wherever that directory is now, keeps its {UNVERIFIED} marker; back up again")]
    Moved(PathBuf),
    /// The copy failed (`error`, said as itself), and what it wrote could not all be removed
    /// (`left`, why): [`BackupError::left`].
    #[error("{error}")]
    NotUndone {
        error: Box<BackupError>,
        left: Box<BackupError>,
    },
}

impl BackupError {
    /// Why what a failed copy wrote is still (in part) in its destination; `None` when it
    /// was all removed.
    pub fn left(&self) -> Option<&BackupError> {
        match self {
            BackupError::NotUndone { left, .. } => Some(left),
            _ => None,
        }
    }

    /// The destination was refused before anything was written.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            BackupError::Occupied(_)
                | BackupError::Busy(_)
                | BackupError::LooseParent { .. }
                | BackupError::NoParent { .. }
                | BackupError::Interrupted(_)
                | BackupError::Unverified(_)
                | BackupError::InsideStore { .. }
                | BackupError::InsideWorkspace { .. }
                | BackupError::InsideDaemon { .. }
                | BackupError::DaemonsOwn(_)
                | BackupError::Foreign { .. }
        )
    }
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> BackupError + '_ {
    move |source| BackupError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Refuse a destination inside the daemon's workspace root `root`: the agents' tools write
/// there as the daemon's user, so the ownership check of [`take`] passes, yet an agent could
/// change the copy (a restore then brings back what it wrote, plugin state included) or read
/// every episode's rows in it.
pub fn refuse_inside_workspace(dest: &Path, root: &Path) -> Result<(), BackupError> {
    if lies_within(dest, root) {
        return Err(BackupError::InsideWorkspace {
            dest: dest.to_path_buf(),
            root: root.to_path_buf(),
        });
    }
    Ok(())
}

/// Whether `path` is `dir` or lies inside it, through symbolic links, whether or not either
/// exists yet.
pub fn lies_within(path: &Path, dir: &Path) -> bool {
    match (resolved_target(dir), resolved_target(path)) {
        (Some(dir), Some(path)) => path.starts_with(dir),
        _ => false,
    }
}

/// Copy the store open as `store` (its directory `db`) into `dest`, which must be absent or an
/// empty directory outside `db` that only this user may write. Everything written is synced
/// before this returns; on failure, what was written is removed.
pub fn take(store: &Store, db: &Path, dest: &Path, compact: bool) -> Result<Taken, BackupError> {
    let (target, made) = prepare(db, dest)?;
    let mut wrote = Vec::new();
    let copied = copy_store(store, db, &target, dest, compact, &mut wrote);
    match copied {
        Ok(mut taken) => {
            // The open directory itself: it keeps the lock, and a discard needs no path.
            taken.held = Some(target);
            taken.made = made;
            taken.wrote = wrote;
            Ok(taken)
        }
        Err(e) => {
            let e = e.full_in(dest);
            match undo(&target, dest, made, &wrote) {
                Ok(()) => Err(e),
                Err(left) => Err(BackupError::NotUndone {
                    error: Box::new(e),
                    left: Box::new(left),
                }),
            }
        }
    }
}

impl BackupError {
    /// A write into `dest` that found its filesystem full (`ENOSPC`, `EDQUOT`), wherever the
    /// copy met it (the marker, a plugin's state file, a rename's directory entry), is the
    /// destination full, said one way: it was said as a bare path error when the last block
    /// went to the `.unverified` marker.
    fn full_in(self, dest: &Path) -> BackupError {
        match self {
            BackupError::Io { path, source }
                if matches!(source.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)) =>
            {
                BackupError::DestinationFull {
                    path: dest.to_path_buf(),
                    detail: format!("{}: {source}", path.display()),
                }
            }
            e => e,
        }
    }
}

/// Check `dest`, make it (mode 0700: the store holds credentials' hashes) when absent, and open
/// it. Everything is then written through that handle, never by path: a directory above it
/// that another user may write could otherwise be swapped for a link mid-copy, and the writes
/// follow it elsewhere. Returns the handle and whether the directory was made here.
fn prepare(db: &Path, dest: &Path) -> Result<(Dir, bool), BackupError> {
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
    refuse_daemons_paths(dest)?;
    // As `serve` refuses for a store: in a directory every user may write without the sticky
    // bit, anyone could rename the finished copy away and put their own under its name, which
    // a restore would then bring back as a checked backup.
    if let Some((parent, mode)) = swappable_above(dest) {
        return Err(BackupError::LooseParent {
            dest: dest.to_path_buf(),
            parent,
            mode,
        });
    }
    let made = match fs::symlink_metadata(dest) {
        Ok(md) if md.is_dir() => false,
        Ok(_) => return Err(BackupError::Occupied(dest.to_path_buf())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::os::unix::fs::DirBuilderExt::mode(&mut fs::DirBuilder::new(), 0o700)
                .create(dest)
                .map_err(|e| missing_parent(dest, e))?;
            true
        }
        Err(e) => return Err(io_at(dest)(e)),
    };
    let opened = open_own_dir(dest);
    // A directory another backup holds is its own, even one this call made: it opened it first.
    if made
        && opened
            .as_ref()
            .is_err_and(|e| !matches!(e, BackupError::Busy(_)))
    {
        let _ = fs::remove_dir(dest);
    }
    Ok((opened?, made))
}

/// The nearest directory above `path` that every user may write without the sticky bit, and
/// its mode: anyone may rename whatever lies in it, and so swap the whole subtree `path` is
/// in, however many levels down (`mv open/sub open/x && mkdir open/sub`), not only a `path`
/// directly inside it. Every directory up to `/` is looked at: those of `path` as given, then,
/// for a relative one, those of the working directory.
pub fn swappable_above(path: &Path) -> Option<(PathBuf, u32)> {
    let given = path
        .ancestors()
        .skip(1)
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf);
    let cwd = path
        .is_relative()
        .then(std::env::current_dir)
        .and_then(Result::ok)
        .map(|cwd| cwd.ancestors().map(Path::to_path_buf).collect::<Vec<_>>())
        .unwrap_or_default();
    // `.` stands for the working directory where `path` is a bare name.
    let bare = path.is_relative() && path.parent().is_none_or(|p| p.as_os_str().is_empty());
    let dot = bare.then(|| PathBuf::from("."));
    given
        .chain(dot)
        .chain(cwd.into_iter().skip(usize::from(bare)))
        .find_map(|dir| {
            // Only a directory holds anything (a device such as /dev/null is 0666, and holds
            // nothing: what lies "below" it is said not to be there).
            let mode = fs::metadata(&dir)
                .ok()
                .filter(fs::Metadata::is_dir)
                .and_then(|m| crate::plugins::writers::anyone_could_swap(&m))?;
            Some((dir, mode))
        })
}

/// Refuse a destination inside (or being) a running daemon's workspace root or store, any
/// daemon's, whatever `--workspace-root` says: its agents write below its root. Each daemon
/// holds its root and store with an exclusive `flock` and every directory above them with a
/// shared one (`serve`'s `lock_ancestors`); a backup holds only its destination, exclusively.
/// So a directory held exclusively whose holder also holds its parent is a daemon's.
fn refuse_daemons_paths(dest: &Path) -> Result<(), BackupError> {
    let Some(real) = resolved_target(dest) else {
        return Ok(());
    };
    for dir in real.ancestors() {
        let Ok(file) = File::open(dir) else {
            continue;
        };
        // A shared lock meets only an exclusive one, so looking disturbs no daemon's; it is let
        // go when `file` is dropped. A filesystem without `flock` holds no daemon's lock.
        if !matches!(crate::flock::shared(&file), Ok(false)) {
            continue;
        }
        if dir == real {
            // Held exclusively: another backup writing it (said by `open_own_dir`), or a daemon.
            if held_by_a_daemon(dir) {
                return Err(BackupError::DaemonsOwn(dest.to_path_buf()));
            }
        } else {
            return Err(BackupError::InsideDaemon {
                dest: dest.to_path_buf(),
                dir: dir.to_path_buf(),
            });
        }
    }
    Ok(())
}

/// Whether the process holding an exclusive `flock` on `dir` holds a shared one on its parent,
/// as a daemon does above its root and store and a backup does not above its destination
/// (read from `/proc/locks`, which takes no lock: false where it cannot be read).
fn held_by_a_daemon(dir: &Path) -> bool {
    use crate::proc_locks::{file_key, held};
    let (Some(own), Some(parent), Some(locks)) =
        (file_key(dir), dir.parent().and_then(file_key), held())
    else {
        return false;
    };
    locks
        .iter()
        .filter(|l| l.exclusive && l.file == own)
        .any(|l| {
            locks
                .iter()
                .any(|m| !m.exclusive && m.pid == l.pid && m.file == parent)
        })
}

/// A destination that could not be made because a directory above it is missing is refused as
/// that: "No such file or directory" for the very path `backup` was asked to make reads as a
/// contradiction.
fn missing_parent(dest: &Path, e: io::Error) -> BackupError {
    match dest.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent)
            if e.kind() == io::ErrorKind::NotFound && fs::symlink_metadata(parent).is_err() =>
        {
            BackupError::NoParent {
                dest: dest.to_path_buf(),
                parent: parent.to_path_buf(),
            }
        }
        _ => io_at(dest)(e),
    }
}

/// `dest` opened (never through a link), refused unless it is this user's, writable by no one
/// else, not being written by another backup, and empty. The handle holds an exclusive `flock`
/// on the directory: two backups into one destination once saw each other's `.partial` as an
/// interrupted backup, and an operator who removed it as told took the copy from under the
/// one still running, which then said ✓ for a copy that was gone.
fn open_own_dir(dest: &Path) -> Result<Dir, BackupError> {
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(dest)
        .map_err(io_at(dest))?;
    let md = file.metadata().map_err(io_at(dest))?;
    // SAFETY: geteuid cannot fail and touches no memory.
    let euid = unsafe { libc::geteuid() };
    if md.uid() != euid || md.mode() & 0o022 != 0 {
        return Err(BackupError::Foreign {
            dest: dest.to_path_buf(),
            uid: md.uid(),
            mode: md.mode() & 0o7777,
            euid,
        });
    }
    // On a filesystem without `flock` the copy is made, unguarded against a second backup.
    if let Ok(false) = crate::flock::exclusive(&file) {
        return Err(BackupError::Busy(dest.to_path_buf()));
    }
    let dir = Dir::from_std_file(file);
    // A backup leaves at most `.partial`, `.unverified`, `plugin-state`, `data.mdb`, and
    // `lock.mdb` once the copy is opened: a few more names tell another directory apart.
    let mut names = Vec::new();
    for entry in dir.entries().map_err(io_at(dest))?.take(8) {
        names.push(entry.map_err(io_at(dest))?.file_name());
    }
    let has = |name: &str| names.iter().any(|n| n.as_os_str() == name);
    match names.as_slice() {
        [] => Ok(dir),
        _ if has(UNVERIFIED) && has("data.mdb") => Err(BackupError::Unverified(dest.to_path_buf())),
        // Killed before `data.mdb` was moved into place: what is there is no store.
        _ if has(PARTIAL)
            && names.iter().all(|n| {
                [PARTIAL, UNVERIFIED, PLUGIN_STATE, LOCK].contains(&&*n.to_string_lossy())
            }) =>
        {
            Err(BackupError::Interrupted(dest.to_path_buf()))
        }
        _ => Err(BackupError::Occupied(dest.to_path_buf())),
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

/// Copy into `target` (the directory `dest`), noting in `wrote` each entry of it this made.
/// Everything is written into [`PARTIAL`] first and synced, then moved into place, the plugins'
/// state first and `data.mdb` last: the destination holds a store only once the copy is whole.
fn copy_store(
    store: &Store,
    db: &Path,
    target: &Dir,
    dest: &Path,
    compact: bool,
    wrote: &mut Vec<&'static str>,
) -> Result<Taken, BackupError> {
    let partial = dest.join(PARTIAL);
    target
        .create_dir_with(PARTIAL, DirBuilder::new().mode(0o700))
        .map_err(io_at(&partial))?;
    wrote.push(PARTIAL);
    let stage = target.open_dir(PARTIAL).map_err(io_at(&partial))?;
    let has_lock = reserve_lock(db, &stage, dest)?;
    let data = partial.join("data.mdb");
    let mut file = stage
        .open_with(
            "data.mdb",
            OpenOptions::new().write(true).create_new(true).mode(0o600),
        )
        .map_err(io_at(&data))?
        .into_std();
    let store_err = |source| match source {
        StoreError::DiskFull(detail) => BackupError::DestinationFull {
            path: dest.to_path_buf(),
            detail,
        },
        source => BackupError::Store {
            path: dest.to_path_buf(),
            source,
        },
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
    let state_md = fs::symlink_metadata(&state).ok().filter(|md| md.is_dir());
    let has_state = state_md.is_some();
    if let Some(md) = state_md {
        let shown = partial.join(PLUGIN_STATE);
        let into = make_dir_like(&md, &stage, PLUGIN_STATE.as_ref(), &shown)?;
        copy_tree(&state, &into, &shown, 0, &mut taken)?;
    }
    sync_dir(&stage, &partial)?;
    let moved = |name: &'static str, wrote: &mut Vec<&'static str>| {
        stage
            .rename(name, target, name)
            .map_err(io_at(&dest.join(name)))?;
        wrote.push(name);
        Ok::<_, BackupError>(())
    };
    // Marked unchecked before the copy looks like a store; the marker goes once it is checked.
    let marker = dest.join(UNVERIFIED);
    let mut note = target
        .open_with(
            UNVERIFIED,
            OpenOptions::new().write(true).create_new(true).mode(0o600),
        )
        .map_err(io_at(&marker))?;
    wrote.push(UNVERIFIED);
    io::Write::write_all(&mut note, UNVERIFIED_TEXT.as_bytes())
        .and_then(|()| note.sync_all())
        .map_err(io_at(&marker))?;
    sync_dir(target, dest)?;
    if has_state {
        moved(PLUGIN_STATE, wrote)?;
    }
    if has_lock {
        moved(LOCK, wrote)?;
    }
    moved("data.mdb", wrote)?;
    target.remove_dir(PARTIAL).map_err(io_at(&partial))?;
    sync_dir(target, dest)?;
    Ok(taken)
}

/// Take the room of the copy's `lock.mdb` in `stage` before the copy is written: opening the
/// copy for its check makes that file (its reader slots, 64 KiB and more), and a destination
/// with room for `data.mdb` alone then filled during the check, leaving a whole unchecked copy
/// on a full disk. Sized as the source's own lock file, which this build's open made (or
/// resized) as it will make the copy's; none is reserved when the source has none (read where
/// it is, on a read-only filesystem), and a full disk at the check's open is said the same.
/// Whether the file was made.
fn reserve_lock(db: &Path, stage: &Dir, dest: &Path) -> Result<bool, BackupError> {
    use std::os::fd::AsRawFd;
    let Some(bytes) = fs::symlink_metadata(db.join(LOCK))
        .ok()
        .filter(|md| md.is_file() && md.len() > 0)
        .map(|md| md.len())
    else {
        return Ok(false);
    };
    let shown = dest.join(LOCK);
    let file = stage
        .open_with(
            LOCK,
            OpenOptions::new().write(true).create_new(true).mode(0o600),
        )
        .map_err(io_at(&shown))?
        .into_std();
    let len = libc::off_t::try_from(bytes).unwrap_or(libc::off_t::MAX);
    // SAFETY: an open descriptor this function owns; no memory is shared.
    match unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) } {
        0 => {}
        code if code == libc::ENOSPC || code == libc::EDQUOT => {
            return Err(BackupError::DestinationFull {
                path: dest.to_path_buf(),
                detail: format!(
                    "{}: the {bytes} bytes of the copy's lock file, which its check makes, cannot be allocated: {}",
                    shown.display(),
                    io::Error::from_raw_os_error(code)
                ),
            })
        }
        // A filesystem without allocation: the check's open meets a full disk instead.
        _ => {}
    }
    file.sync_all().map_err(io_at(&shown))?;
    Ok(true)
}

/// Make `name` in `parent` with the mode of a directory whose metadata is `like`, and open it;
/// `shown` is its path, for messages.
fn make_dir_like(
    like: &fs::Metadata,
    parent: &Dir,
    name: &Path,
    shown: &Path,
) -> Result<Dir, BackupError> {
    parent
        .create_dir_with(
            name,
            DirBuilder::new().mode(like.permissions().mode() & 0o7777),
        )
        .map_err(io_at(shown))?;
    parent.open_dir(name).map_err(io_at(shown))
}

/// Copy the directory `from` into the made directory `to` (at `shown`), keeping modes and
/// symbolic links (never followed).
fn copy_tree(
    from: &Path,
    to: &Dir,
    shown: &Path,
    depth: usize,
    taken: &mut Taken,
) -> Result<(), BackupError> {
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
        let name = PathBuf::from(entry.file_name());
        let dst = shown.join(&name);
        let md = fs::symlink_metadata(&src).map_err(io_at(&src))?;
        let kind = md.file_type();
        if kind.is_dir() {
            let sub = make_dir_like(&md, to, &name, &dst)?;
            copy_tree(&src, &sub, &dst, depth + 1, taken)?;
        } else if kind.is_file() {
            let mut source = File::open(&src).map_err(io_at(&src))?;
            let mut copy = to
                .open_with(
                    &name,
                    OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(md.permissions().mode() & 0o7777),
                )
                .map_err(io_at(&dst))?;
            taken.state_bytes += io::copy(&mut source, &mut copy).map_err(io_at(&dst))?;
            copy.sync_all().map_err(io_at(&dst))?;
            taken.state_files += 1;
        } else if kind.is_symlink() {
            let link = fs::read_link(&src).map_err(io_at(&src))?;
            to.symlink_contents(link, &name).map_err(io_at(&dst))?;
        } else {
            taken.skipped.push(src);
        }
    }
    sync_dir(to, shown)
}

/// Sync `dir` (at `shown`). Its handle may be an `O_PATH` one, which cannot be synced: the
/// directory is opened for reading through it.
fn sync_dir(dir: &Dir, shown: &Path) -> Result<(), BackupError> {
    dir.open(".")
        .and_then(|d| d.sync_all())
        .map_err(io_at(shown))
}

/// Remove what a failed backup wrote, and the destination when it was made here and is empty
/// again. Only what this process made is removed: another backup racing it into the same
/// directory keeps its files. Every entry is tried; the first that could not be removed is the
/// error (one already gone is not left). The destination is removed by its path only while the
/// path still names the directory held.
fn undo(target: &Dir, dest: &Path, made: bool, wrote: &[&str]) -> Result<(), BackupError> {
    let mut first = None;
    for name in wrote.iter().rev() {
        let removed = match target.symlink_metadata(name) {
            Ok(md) if md.is_dir() => target.remove_dir_all(name),
            _ => target.remove_file(name),
        };
        match removed {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                first.get_or_insert_with(|| io_at(&dest.join(name))(e));
            }
            _ => {}
        }
    }
    if made && first.is_none() && names_the_same(target, dest) {
        // Not empty: another backup's files, which stay with it.
        let _ = fs::remove_dir(dest);
    }
    first.map_or(Ok(()), Err)
}

/// Whether `path` (not followed) is the directory open as `dir`.
fn names_the_same(dir: &Dir, path: &Path) -> bool {
    use cap_std::fs::MetadataExt as _;
    match (dir.dir_metadata(), fs::symlink_metadata(path)) {
        (Ok(held), Ok(now)) => now.is_dir() && held.dev() == now.dev() && held.ino() == now.ino(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opened(path: &Path) -> Dir {
        Dir::open_ambient_dir(path, cap_std::ambient_authority()).unwrap()
    }

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
        let target = opened(&dest);
        undo(&target, &dest, true, &["data.mdb", PLUGIN_STATE]).unwrap();
        let left: Vec<_> = fs::read_dir(&dest)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["theirs"]);
        fs::remove_file(dest.join("theirs")).unwrap();
        undo(&target, &dest, true, &[]).unwrap();
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
        let e = copy_tree(&from, &opened(&to), &to, 0, &mut Taken::default()).unwrap_err();
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
        copy_tree(&from, &opened(&to), &to, 0, &mut Taken::default()).unwrap();
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
        assert!(prepare(&db, &dir.path().join("db-copy")).unwrap().1);
    }

    /// Another user who may write a directory above the destination moves it away mid-copy and
    /// puts a link to a directory of their choosing in its place: every write still lands in
    /// the directory that was checked, none where the link points.
    #[test]
    fn a_destination_swapped_for_a_link_mid_copy_does_not_redirect_the_writes() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let store = Store::create(&db).unwrap();
        fs::create_dir_all(db.join("plugin-state/p")).unwrap();
        fs::write(db.join("plugin-state/p/f"), "state").unwrap();
        let dest = dir.path().join("dest");
        let (target, made) = prepare(&db, &dest).unwrap();
        assert!(made);
        let moved = dir.path().join("moved");
        fs::rename(&dest, &moved).unwrap();
        let elsewhere = dir.path().join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &dest).unwrap();
        let taken = copy_store(&store, &db, &target, &dest, false, &mut Vec::new()).unwrap();
        assert_eq!(taken.state_files, 1);
        assert!(moved.join("data.mdb").is_file());
        assert_eq!(
            fs::read_to_string(moved.join("plugin-state/p/f")).unwrap(),
            "state"
        );
        assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0);
    }

    /// `discard` reopened the destination by its path when it held no handle of the directory
    /// (one that could not be cloned, out of descriptors), and removed `data.mdb`, `lock.mdb`,
    /// `plugin-state` and `.unverified` in whatever directory the path named by then. Without
    /// the handle it now removes nothing, and says the copy may be left.
    #[test]
    fn discarding_a_copy_whose_directory_is_not_held_removes_nothing_through_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("elsewhere");
        fs::create_dir_all(elsewhere.join(PLUGIN_STATE)).unwrap();
        for name in ["data.mdb", LOCK, UNVERIFIED, "plugin-state/f"] {
            fs::write(elsewhere.join(name), "theirs").unwrap();
        }
        let dest = dir.path().join("dest");
        std::os::unix::fs::symlink(&elsewhere, &dest).unwrap();
        let taken = Taken {
            made: true,
            wrote: vec![PLUGIN_STATE, UNVERIFIED, "data.mdb"],
            ..Taken::default()
        };
        let e = taken.discard(&dest).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{} was not held open, and what the backup wrote there is not removed through its path, which may name another directory by now",
                dest.display()
            )
        );
        let mut left: Vec<_> = fs::read_dir(&elsewhere)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [".unverified", "data.mdb", "lock.mdb", "plugin-state"]
        );
        assert!(elsewhere.join("plugin-state/f").is_file());
    }

    /// The copy is discarded through the directory the backup wrote it into, kept in
    /// [`Taken`]: a destination swapped for a link meanwhile loses nothing where it points.
    #[test]
    fn a_discarded_copy_is_removed_from_the_directory_it_was_written_to_not_a_swapped_path() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let store = Store::create(&db).unwrap();
        fs::create_dir_all(db.join("plugin-state/p")).unwrap();
        fs::write(db.join("plugin-state/p/f"), "state").unwrap();
        let dest = dir.path().join("dest");
        let taken = take(&store, &db, &dest, false).unwrap();
        let moved = dir.path().join("moved");
        fs::rename(&dest, &moved).unwrap();
        let elsewhere = dir.path().join("elsewhere");
        fs::create_dir_all(elsewhere.join(PLUGIN_STATE)).unwrap();
        for name in ["data.mdb", LOCK, UNVERIFIED] {
            fs::write(elsewhere.join(name), "theirs").unwrap();
        }
        std::os::unix::fs::symlink(&elsewhere, &dest).unwrap();
        taken.discard(&dest).unwrap();
        assert_eq!(fs::read_dir(&moved).unwrap().count(), 0);
        assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 4);
        // The link is no directory the backup made: it stays.
        assert!(fs::symlink_metadata(&dest).unwrap().is_symlink());
    }

    /// A test that could not set up what it needs (a mount, a flag the filesystem refuses):
    /// skipped, unless `WORLDD_TESTS_REQUIRE_MOUNTS` is set (CI, which runs as root), where a
    /// skip would report a pass for a test that never ran. The rule of `mount_failed` in
    /// daemon/tests/common, read here on its own: a unit test cannot use that harness, which is
    /// the integration tests' module.
    fn required(what: &str) {
        if std::env::var_os("WORLDD_TESTS_REQUIRE_MOUNTS").is_some_and(|v| !v.is_empty()) {
            panic!("{what} failed, and WORLDD_TESTS_REQUIRE_MOUNTS is set");
        }
        eprintln!("skipped: {what} failed (it needs root)");
    }

    /// A small tmpfs mounted on a temporary directory, unmounted on drop.
    struct Tmpfs(tempfile::TempDir);

    impl Tmpfs {
        fn mount() -> Option<Tmpfs> {
            let dir = tempfile::tempdir().ok()?;
            std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs"])
                .arg(dir.path())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
                .then_some(Tmpfs(dir))
        }
    }

    impl Drop for Tmpfs {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(self.0.path())
                .status();
        }
    }

    /// `chattr FLAG path`, and whether it took.
    fn chattr(flag: &str, path: &Path) -> bool {
        std::process::Command::new("chattr")
            .arg(flag)
            .arg(path)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// A copy's `data.mdb` and marker written in a new `dest`, its `data.mdb` made immutable:
    /// whether the flag took.
    fn copy_with_a_stuck_file(dest: &Path) -> bool {
        fs::create_dir(dest).unwrap();
        fs::write(dest.join("data.mdb"), "ours").unwrap();
        fs::write(dest.join(UNVERIFIED), "ours").unwrap();
        chattr("+i", &dest.join("data.mdb"))
    }

    /// Undo ignored its errors, so a failed backup said "nothing was left in DEST" beside a
    /// copy it could not remove. An entry that cannot be removed (immutable here) is now its
    /// error, naming the entry; the others are removed all the same. It needs root, and a
    /// filesystem that takes the immutable flag: where the temporary directory's does not (a
    /// tmpfs before Linux 6.0 may not), one this test mounts; it fails rather than skips under
    /// `WORLDD_TESTS_REQUIRE_MOUNTS` ([`required`]).
    #[test]
    fn an_undo_that_cannot_remove_what_it_wrote_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let mut _mounted = None;
        let mut dest = dir.path().join("dest");
        if !copy_with_a_stuck_file(&dest) {
            let Some(tmpfs) = Tmpfs::mount() else {
                return required(
                    "mounting a tmpfs (chattr +i did not take in the temporary directory)",
                );
            };
            dest = tmpfs.0.path().join("dest");
            _mounted = Some(tmpfs);
            if !copy_with_a_stuck_file(&dest) {
                return required("chattr +i in a tmpfs (Linux 6.0 or later takes it)");
            }
        }
        let stuck = dest.join("data.mdb");
        /// Clears the flag however the test ends (before the mount and the directory go), so
        /// that the directory can be removed.
        struct Mutable<'a>(&'a Path);
        impl Drop for Mutable<'_> {
            fn drop(&mut self) {
                chattr("-i", self.0);
            }
        }
        let _mutable = Mutable(&stuck);
        let e = undo(&opened(&dest), &dest, true, &["data.mdb", UNVERIFIED]).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{}: Operation not permitted (os error 1)", stuck.display())
        );
        assert!(!dest.join(UNVERIFIED).exists());
        assert!(stuck.is_file());
    }

    /// The immutable-file test passed, skipped, wherever `chattr +i` failed, in CI too. Run
    /// again as a child with neither `chattr` nor `mount` on its `PATH`, it now fails where
    /// `WORLDD_TESTS_REQUIRE_MOUNTS` is set, and skips only where it is unset or empty.
    #[test]
    fn the_immutable_file_test_fails_rather_than_skips_where_mounts_are_required() {
        let empty = tempfile::tempdir().unwrap();
        let run = |require: &str| {
            std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "backup::tests::an_undo_that_cannot_remove_what_it_wrote_says_so",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("PATH", empty.path())
                .env("WORLDD_TESTS_REQUIRE_MOUNTS", require)
                .output()
                .unwrap()
        };
        let said = "mounting a tmpfs (chattr +i did not take in the temporary directory) failed";
        let required = run("1");
        let stderr = String::from_utf8_lossy(&required.stderr);
        assert!(!required.status.success(), "{stderr}");
        assert!(
            stderr.contains(&format!("{said}, and WORLDD_TESTS_REQUIRE_MOUNTS is set")),
            "{stderr}"
        );
        let optional = run("");
        let stderr = String::from_utf8_lossy(&optional.stderr);
        assert!(optional.status.success(), "{stderr}");
        assert!(
            stderr.contains(&format!("skipped: {said} (it needs root)")),
            "{stderr}"
        );
    }

    /// A destination holding only an interrupted backup's partial copy is refused as such; one
    /// holding anything besides is refused as occupied.
    #[test]
    fn a_destination_holding_an_interrupted_backup_is_refused_as_such() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        fs::create_dir(&db).unwrap();
        let dest = dir.path().join("dest");
        fs::create_dir_all(dest.join(PARTIAL)).unwrap();
        fs::set_permissions(&dest, fs::Permissions::from_mode(0o700)).unwrap();
        let e = prepare(&db, &dest).unwrap_err();
        assert!(matches!(e, BackupError::Interrupted(_)), "{e}");
        assert!(e.is_refusal());
        fs::write(dest.join("other"), "x").unwrap();
        assert!(matches!(
            prepare(&db, &dest).unwrap_err(),
            BackupError::Occupied(_)
        ));
    }

    /// A backup killed after its copy reached the destination, while it opened and checked the
    /// copy, left what looked like a finished backup. The copy is now marked unchecked until
    /// the check passes ([`Taken::checked`]), and a backup into such a destination says what it is.
    #[test]
    fn a_copy_not_yet_checked_is_marked_so_and_a_backup_into_it_says_it() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let store = Store::create(&db).unwrap();
        fs::create_dir_all(db.join("plugin-state/p")).unwrap();
        fs::write(db.join("plugin-state/p/f"), "state").unwrap();
        let dest = dir.path().join("dest");
        // Dropped unchecked: where a kill during the check leaves it.
        drop(take(&store, &db, &dest, false).unwrap());
        let mut names: Vec<String> = fs::read_dir(&dest)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        // The lock file the check's open makes is in place already: its room is the copy's.
        assert_eq!(names, [UNVERIFIED, "data.mdb", "lock.mdb", PLUGIN_STATE]);
        assert_eq!(
            fs::read_to_string(dest.join(UNVERIFIED)).unwrap(),
            UNVERIFIED_TEXT
        );
        // Opened for the check, the copy gains its lock file.
        fs::write(dest.join("lock.mdb"), "").unwrap();
        let e = take(&store, &db, &dest, false).unwrap_err();
        assert!(e.is_refusal());
        assert_eq!(
            e.to_string(),
            format!("destination {} holds a backup that was never checked (its .unverified marker: the backup that wrote it was interrupted, or its copy failed the check); do not restore from it: remove the directory, then back up again", dest.display())
        );
        // Killed before data.mdb was moved into place (the lock file's room already was): an
        // interrupted backup, as before.
        let early = dir.path().join("early");
        fs::create_dir_all(early.join(PARTIAL)).unwrap();
        fs::create_dir_all(early.join(PLUGIN_STATE)).unwrap();
        fs::write(early.join(UNVERIFIED), UNVERIFIED_TEXT).unwrap();
        fs::write(early.join(LOCK), "").unwrap();
        fs::set_permissions(&early, fs::Permissions::from_mode(0o700)).unwrap();
        assert!(matches!(
            prepare(&db, &early).unwrap_err(),
            BackupError::Interrupted(_)
        ));
        // Checked, the marker goes and the copy is an ordinary (occupied) directory.
        let done = dir.path().join("done");
        let taken = take(&store, &db, &done, false).unwrap();
        taken.still_at(&done).unwrap();
        taken.checked(&done).unwrap();
        drop(taken);
        assert!(!done.join(UNVERIFIED).exists());
        assert!(done.join("data.mdb").is_file());
        assert!(matches!(
            prepare(&db, &done).unwrap_err(),
            BackupError::Occupied(_)
        ));
    }

    /// A destination another user owns, or may write, is refused before anything is written:
    /// they could swap what is inside it for links while the copy is written (a directory left
    /// empty in /tmp for an operator to back up into). A destination that is a link is refused
    /// too, and a directory made here passes.
    #[test]
    fn a_destination_another_user_could_change_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        fs::create_dir(&db).unwrap();
        let open_to_all = dir.path().join("open");
        fs::create_dir(&open_to_all).unwrap();
        fs::set_permissions(&open_to_all, fs::Permissions::from_mode(0o777)).unwrap();
        let e = prepare(&db, &open_to_all).unwrap_err();
        assert!(e.is_refusal());
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        assert_eq!(
            e.to_string(),
            format!("destination {} is owned by uid {euid} with mode 0777, so another user could change the copy as it is written; use a directory that only this user (uid {euid}) may write", open_to_all.display())
        );
        let link = dir.path().join("link");
        let empty = dir.path().join("empty");
        fs::create_dir(&empty).unwrap();
        std::os::unix::fs::symlink(&empty, &link).unwrap();
        assert!(matches!(
            prepare(&db, &link).unwrap_err(),
            BackupError::Occupied(_)
        ));
        if euid == 0 {
            let theirs = dir.path().join("theirs");
            fs::create_dir(&theirs).unwrap();
            fs::set_permissions(&theirs, fs::Permissions::from_mode(0o700)).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
            let e = prepare(&db, &theirs).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("destination {} is owned by uid 65534 with mode 0700, so another user could change the copy as it is written; use a directory that only this user (uid 0) may write", theirs.display())
            );
            assert_eq!(fs::read_dir(&theirs).unwrap().count(), 0);
        }
        let (_, made) = prepare(&db, &dir.path().join("mine")).unwrap();
        assert!(made);
    }
}
