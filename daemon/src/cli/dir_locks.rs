//! The `flock`s a daemon holds on its directories for its life, and the refusals they give:
//! one daemon per store and per workspace root, no store or root inside another daemon's (a
//! shared lock on every directory above each), a plugin's `stateDir` held by one daemon. Every
//! lock is non-blocking: a start is refused at once, naming what holds the path.

use std::path::PathBuf;

use super::paths::{real_so_far, store_lock_file};
use super::{startup, CliResult, Failure};
use crate::flock;
use crate::plugins::PluginOptions;

/// A path this daemon would take that lies inside a directory another running worldd process
/// holds as its own ([`held_above`]).
pub(super) struct HeldAbove {
    /// `workspace root` or `store`.
    pub what: &'static str,
    /// The path as it will be once made ([`super::paths::real_so_far`]).
    pub real: PathBuf,
    /// The directory the other process holds.
    pub above: PathBuf,
    /// The flag that gives the path.
    pub flag: &'static str,
}

/// Hold an exclusive, non-blocking `flock` on the workspace root directory for the daemon's
/// lifetime: two daemons on different stores writing one episode's worktree would each record
/// only its own calls, and order them apart. `None` where the filesystem has no `flock` (the
/// daemon then serves unguarded, and says so).
pub(super) fn workspace_lock(root: &std::path::Path) -> Result<Option<std::fs::File>, Failure> {
    let dir = std::fs::File::open(root)
        .map_err(|e| startup("config", format!("workspace root {}: {e}", root.display())))?;
    match flock::exclusive(&dir) {
        Ok(true) => Ok(Some(dir)),
        Ok(false) if !held_exclusively(&dir) => Err(holds_another(
            "workspace root",
            root,
            "--workspace-root",
            "an episode of this daemon could write into it",
        )),
        Ok(false) => Err(startup(
            "config",
            format!(
                "another worldd already serves the workspace root {} (one daemon per workspace root: each records only its own calls to a worktree); give this daemon its own --workspace-root",
                root.display()
            ),
        )),
        Err(e) => {
            tracing::warn!(
                "cannot lock the workspace root {} ({e}); a second daemon on it would not be refused",
                root.display()
            );
            Ok(None)
        }
    }
}

/// Exclusive `flock`s, held for the daemon's life, on each `stateDir` the operator set for a
/// plugin that started: the default (`<db>/plugin-state/NAME`) is the store's, one daemon's, but
/// one absolute path in a config file two daemons share would have both keep their episodes'
/// files there by episode name, and the calls of same-named episodes fail at random.
pub(super) fn lock_state_dirs(
    opts: &PluginOptions,
    started: &[String],
) -> Result<Vec<std::fs::File>, Failure> {
    let mut held = Vec::new();
    let set: Vec<(&str, String)> = opts
        .configs
        .iter()
        .filter(|(name, _)| opts.is_selected(name))
        .filter_map(|(name, config)| {
            let dir = config.get("stateDir").and_then(serde_json::Value::as_str)?;
            Some((name.as_str(), dir.to_owned()))
        })
        .collect();
    // The default, `<db>/plugin-state/NAME`, is locked too: another daemon's config may name
    // it as its own stateDir.
    let defaults = started.iter().filter_map(|name| {
        let root = opts.state_root.as_ref()?;
        (!set.iter().any(|(n, _)| n == name))
            .then(|| (name.as_str(), root.join(name).display().to_string()))
    });
    let all: Vec<(&str, String)> = set.iter().cloned().chain(defaults).collect();
    for (name, dir) in &all {
        let (name, dir) = (*name, dir.as_str());
        // A plugin that declined or keeps nothing there may not have made it.
        let Ok(file) = std::fs::File::open(dir) else {
            continue;
        };
        match flock::exclusive(&file) {
            Ok(true) => held.push(file),
            Ok(false) => {
                return Err(startup(
                    "plugins",
                    format!(
                        "[plugins.{name}] stateDir {dir} is in use by another worldd (a plugin keeps its episodes' files there by episode name, so two daemons would overwrite each other's): give each daemon its own, or leave stateDir out (it is then <db>/plugin-state/{name})"
                    ),
                ))
            }
            Err(e) => tracing::warn!(
                "cannot lock [plugins.{name}] stateDir {dir} ({e}); a second daemon on it would not be refused"
            ),
        }
    }
    Ok(held)
}

/// Hold an exclusive, non-blocking `flock` on the store directory from before a start looks at
/// what it holds until the daemon ends: two starts at once on a new store would otherwise both
/// make it (and the one refused take it away again). `None` where the directory cannot be
/// opened (the store's open says why) or locked (the store's own lock then decides). A refusal
/// comes with whether another daemon may serve the store (`false`: it only holds another's).
pub(super) fn lock_store_dir(
    db: &std::path::Path,
) -> Result<Option<std::fs::File>, (Failure, bool)> {
    use std::os::unix::fs::OpenOptionsExt;
    // Only a directory: opening a FIFO in its place would wait for a writer.
    let Ok(dir) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(db)
    else {
        return Ok(None);
    };
    match flock::exclusive(&dir) {
        Ok(true) => Ok(Some(dir)),
        Ok(false) if !held_exclusively(&dir) => Err((
            holds_another(
                "store",
                db,
                "--db",
                "its agents could then write into this daemon's store",
            ),
            false,
        )),
        // Held, and holding what only something else holds (another daemon's worktrees, say):
        // no store is made or served there, so what this start made (the root) goes again.
        Ok(false) if holds_no_store(db) => Err((held_not_as_a_store(db), false)),
        // Held, and a store is served there, or may be being made (an empty directory another
        // daemon starting at this moment holds): left as it is.
        Ok(false) => Err((already_serves(db), true)),
        Err(_) => Ok(None),
    }
}

/// Whether `db` is certainly no store, served or being made: it has entries, and none of a
/// store's (`data.mdb`, `lock.mdb`, `plugin-state`). An empty directory may be a store another
/// daemon is just making.
fn holds_no_store(db: &std::path::Path) -> bool {
    let Ok(entries) = std::fs::read_dir(db) else {
        return false;
    };
    let mut any = false;
    for entry in entries.flatten() {
        if matches!(
            entry.file_name().to_str(),
            Some("data.mdb" | "lock.mdb" | "plugin-state")
        ) {
            return false;
        }
        any = true;
    }
    any
}

/// The refusal of a `--db` directory another worldd process holds exclusively as its own,
/// though no daemon serves a store in it: another daemon's workspace root, a plugin's
/// `stateDir`, a backup's destination.
fn held_not_as_a_store(db: &std::path::Path) -> Failure {
    startup(
        "config",
        format!(
            "the store {} is a directory another running worldd process holds as its own (a daemon's workspace root, a plugin's stateDir, a backup's destination), not a store it serves: what writes there could write into this daemon's store; give this daemon a --db outside it",
            db.display()
        ),
    )
}

/// Shared `flock`s, held for the daemon's life, on every directory above its store and its
/// workspace root (`db` and `root` exist by now). Another daemon's agents write anywhere below
/// its workspace root, so neither path may lie inside another daemon's root, nor contain it
/// or its store: an episode of that daemon could otherwise write into this one's store (its
/// `data.mdb` among it) or worktrees, unrecorded here. Each daemon holds its own root and store
/// directory exclusively: a directory above this one's paths that is held so is another's
/// root or store, and refused here; and a daemon that would make one of this daemon's
/// ancestors its root or store cannot take it exclusively while these are held, and refuses
/// ([`workspace_lock`], [`lock_store_dir`]). No tree is walked: the locks meet on the path.
/// A directory that cannot be opened or locked (no read permission, a filesystem without
/// `flock`) is passed over.
pub(super) fn lock_ancestors(
    db: &std::path::Path,
    root: &std::path::Path,
) -> Result<Vec<std::fs::File>, Failure> {
    let mut held: Vec<(std::path::PathBuf, std::fs::File)> = Vec::new();
    for (what, path, flag) in [
        ("workspace root", root, "--workspace-root"),
        ("store", db, "--db"),
    ] {
        let Ok(real) = path.canonicalize() else {
            continue;
        };
        for above in real.ancestors().skip(1) {
            if held.iter().any(|(p, _)| p == above) {
                continue;
            }
            let Ok(dir) = std::fs::File::open(above) else {
                continue;
            };
            match flock::shared(&dir) {
                Ok(true) => held.push((above.to_path_buf(), dir)),
                Ok(false) => return Err(inside_another(what, &real, above, flag)),
                Err(_) => {}
            }
        }
    }
    Ok(held.into_iter().map(|(_, f)| f).collect())
}

/// [`lock_ancestors`]' refusal said before anything is opened or made (the root, the store,
/// its `data.mdb`), on the directories that exist above each path (or the path not made yet):
/// a start refused only after opening its store had written one into another daemon's
/// worktree, and one given a worktree holding files was told to remove it as a lost store.
/// The shared locks taken to look are let go: [`lock_ancestors`] holds them once the paths
/// are made.
pub(super) fn refuse_inside_another(db: &std::path::Path, root: &std::path::Path) -> CliResult {
    match held_above(db, root) {
        Some(h) => Err(inside_another(h.what, &h.real, &h.above, h.flag)),
        None => Ok(()),
    }
}

/// The first of `root` and `db` that lies inside a directory another running worldd process
/// holds as its own: which one, its real path, that directory and the flag that gives it.
pub(super) fn held_above(db: &std::path::Path, root: &std::path::Path) -> Option<HeldAbove> {
    for (what, path, flag) in [
        ("workspace root", root, "--workspace-root"),
        ("store", db, "--db"),
    ] {
        let real = real_so_far(path);
        for above in real.ancestors().skip(1) {
            let Ok(dir) = std::fs::File::open(above) else {
                continue;
            };
            if let Ok(false) = flock::shared(&dir) {
                let above = above.to_path_buf();
                return Some(HeldAbove {
                    what,
                    real,
                    above,
                    flag,
                });
            }
        }
    }
    None
}

fn inside_another(
    what: &str,
    real: &std::path::Path,
    above: &std::path::Path,
    flag: &str,
) -> Failure {
    startup(
        "config",
        format!(
            "the {what} {} is inside {}, which another running worldd process holds as its own (a daemon's workspace root or store, a plugin's stateDir, a backup's destination): what writes there could write into this daemon's {what}; give this daemon a {flag} outside it",
            real.display(),
            above.display()
        ),
    )
}

/// Whether another process holds an exclusive `flock` on `dir` (which this one failed to lock
/// exclusively): a daemon's own root or store, where shared locks only mean `dir` lies above
/// another daemon's ([`lock_ancestors`]).
pub(super) fn held_exclusively(dir: &std::fs::File) -> bool {
    match flock::shared(dir) {
        Ok(true) => {
            flock::unlock(dir);
            false
        }
        Ok(false) | Err(_) => true,
    }
}

/// The refusal of a `path` (`what`, given with `flag`) that holds, below it, another running
/// daemon's store or workspace root (they hold a shared lock on `path`): named when a short
/// search along the locked directories finds it.
fn holds_another(what: &str, path: &std::path::Path, flag: &str, why: &str) -> Failure {
    let below = match held_below(path) {
        Some(found) => format!(" ({})", found.display()),
        None => String::new(),
    };
    startup(
        "config",
        format!(
            "the {what} {} holds the workspace root or store of another running worldd{below}: {why}; give this daemon a {flag} that holds neither",
            path.display()
        ),
    )
}

/// The directory below `top` another daemon holds exclusively (its workspace root or store),
/// found by descending only into directories others hold shared locks on, a bounded number.
fn held_below(top: &std::path::Path) -> Option<std::path::PathBuf> {
    let mut budget = 4096_usize;
    let mut at = top.to_path_buf();
    'down: for _ in 0..64 {
        let mut dirs = Vec::new();
        for entry in std::fs::read_dir(&at).ok()?.filter_map(Result::ok) {
            budget = budget.checked_sub(1)?;
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(entry.path());
            }
        }
        // The same one named each time, where two are held.
        dirs.sort();
        // Read from /proc/locks: a lock taken here to look, even for a moment, could refuse a
        // daemon or a backup starting then.
        let locks = crate::proc_locks::held()?;
        let mut shared = None;
        for path in dirs {
            let Some(file) = crate::proc_locks::file_key(&path) else {
                continue;
            };
            let mut held = locks.iter().filter(|l| l.file == file);
            match held.clone().any(|l| l.exclusive) {
                true => return Some(path),
                false if shared.is_none() && held.next().is_some() => shared = Some(path),
                false => {}
            }
        }
        // Held shared: a directory above another daemon's paths.
        match shared {
            Some(path) => {
                at = path;
                continue 'down;
            }
            None => return None,
        }
    }
    None
}

/// The store's lock taken now when the store already exists, `None` otherwise (a store not yet
/// created has no other daemon).
pub(super) fn existing_store_lock(db: &std::path::Path) -> Result<Option<std::fs::File>, Failure> {
    if store_lock_file(db).is_file() {
        writer_lock(db).map(Some)
    } else {
        Ok(None)
    }
}

/// Hold an exclusive, non-blocking `flock` on the store's data file for the daemon's lifetime.
/// LMDB locks only `lock.mdb` (with `fcntl`, which `flock` does not meet). Other verbs (session
/// mint, why, doctor) do not take it: LMDB serialises their writes with the daemon's through
/// the one `lock.mdb` they share, and a verb refuses to open the store where the daemon holds
/// none ([`refuse_beside_lockless_daemon`]).
pub(super) fn writer_lock(db: &std::path::Path) -> Result<std::fs::File, Failure> {
    let path = store_lock_file(db);
    let file = std::fs::File::open(&path).map_err(|e| {
        let e = broker_core::store::StoreError::from_io(e);
        startup("store-open", format!("{}: {e}", path.display()))
    })?;
    if !matches!(flock::exclusive(&file), Ok(true)) {
        return Err(already_serves(db));
    }
    Ok(file)
}

fn already_serves(db: &std::path::Path) -> Failure {
    startup(
        "store-open",
        format!(
            "another worldd already serves {} (one daemon per store: it orders each episode's calls)",
            db.display()
        ),
    )
}

/// Whether no daemon holds the store's lock now (none where the store has no data file).
pub(super) fn nobody_serves(db: &std::path::Path) -> bool {
    match std::fs::File::open(store_lock_file(db)) {
        Ok(file) => matches!(flock::exclusive(&file), Ok(true)),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

/// How long [`refuse_beside_lockless_daemon`] waits, where it cannot read the daemon's
/// mappings, for a daemon that holds the store's data file to hold its `lock.mdb` too: a
/// daemon starting takes the first a moment before it opens the store.
const LOCK_FILE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Refuse a verb's writable open of the store in `db` while a daemon serves it (its `flock` on
/// `data.mdb`, and the store open) without the `lock.mdb` at the path now (removed, or
/// replaced, while the daemon served): the verb's open would use or make a `lock.mdb` whose
/// write lock is not the daemon's, and each would write over the other's pages (a mint or
/// revoke reported done and then lost, a call the daemon acknowledged gone). Asked before the
/// store is opened, so nothing is made or written.
///
/// Decided from the files the `flock`'s holder maps (LMDB maps both `data.mdb` and
/// `lock.mdb`): one that maps neither has not opened the store (`quickstart` trying its
/// plugins, a daemon starting) and is let through at once, whoever else holds a `lock.mdb`.
pub(super) fn refuse_beside_lockless_daemon(db: &std::path::Path) -> CliResult {
    let Some(holder) = other_holder(db) else {
        return Ok(());
    };
    let Some(maps) = crate::proc_locks::mapped(&holder) else {
        return refuse_unless_lock_file_held(db);
    };
    let lock_path = db.join("lock.mdb");
    // The kernel names a mapped file by its absolute path, symlinks resolved.
    let shown = std::fs::canonicalize(db).map(|db| db.join("lock.mdb"));
    let data = crate::proc_locks::file_id(&store_lock_file(db));
    let lock = crate::proc_locks::file_id(&lock_path);
    match serving(&maps, data, lock, shown.ok().as_deref()) {
        Serving::NotYet | Serving::WithItsLockFile => Ok(()),
        Serving::WithoutItsLockFile => Err(Failure::fatal(lockless_daemon(db))),
    }
}

/// What the holder of a store's `flock` does with the store, from its mappings.
#[derive(Debug, PartialEq, Eq)]
enum Serving {
    /// It maps neither the store's data file nor any `lock.mdb` of it: not opened yet.
    NotYet,
    /// It maps the `lock.mdb` at the path now.
    WithItsLockFile,
    /// It has the store open but not with the `lock.mdb` at the path now (none there, another
    /// inode, or its own unlinked).
    WithoutItsLockFile,
}

/// [`Serving`] for a holder mapping `maps`, where the store's data file is `data`, its
/// `lock.mdb` is `lock` (`None`: absent) and is named `lock_path` in `/proc`.
fn serving(
    maps: &[crate::proc_locks::Mapped],
    data: Option<crate::proc_locks::FileId>,
    lock: Option<crate::proc_locks::FileId>,
    lock_path: Option<&std::path::Path>,
) -> Serving {
    if maps.iter().any(|m| !m.deleted && Some(m.file) == lock) {
        return Serving::WithItsLockFile;
    }
    let opened = maps.iter().any(|m| {
        Some(m.file) == data || lock_path.is_some_and(|p| std::path::Path::new(&m.path) == p)
    });
    if opened {
        Serving::WithoutItsLockFile
    } else {
        Serving::NotYet
    }
}

/// Where the holder's mappings cannot be read (another user's daemon, `/proc` mounted
/// `hidepid`): refuse when nobody holds LMDB's lock on `lock.mdb`, after waiting
/// [`LOCK_FILE_WAIT`] for a daemon starting. Less exact: a daemon not serving yet for longer
/// (`quickstart` trying its plugins) is refused, and a `lock.mdb` made and held by another
/// process since the daemon's was removed lets the verb through.
fn refuse_unless_lock_file_held(db: &std::path::Path) -> CliResult {
    let until = std::time::Instant::now() + LOCK_FILE_WAIT;
    loop {
        if other_holder(db).is_none() || broker_core::store::Store::lock_file_held(db) {
            return Ok(());
        }
        if std::time::Instant::now() >= until {
            return Err(Failure::fatal(lockless_daemon(db)));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The process other than this one holding the daemon's `flock` on the store's data file, by
/// its pid (read from `/proc/locks`, as [`super::doctor::daemon_serves`] reads it):
/// `quickstart` takes it itself before it mints into an existing store, which no daemon
/// serves yet.
fn other_holder(db: &std::path::Path) -> Option<String> {
    crate::proc_locks::exclusive_holder(&store_lock_file(db))
        .filter(|pid| *pid != std::process::id().to_string())
}

/// [`refuse_beside_lockless_daemon`]'s refusal.
fn lockless_daemon(db: &std::path::Path) -> String {
    format!(
        "the daemon serving {} lost its lock.mdb (removed or replaced while it served): this verb would open the store without sharing the daemon's locks, so a write of either could be lost and a read could meet pages the daemon reuses; nothing was written: restart the daemon, then run this verb again",
        db.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proc_locks::{FileId, Mapped};

    const DATA: FileId = FileId {
        major: 0xfd,
        minor: 1,
        ino: 10,
    };
    const LOCK: FileId = FileId {
        major: 0xfd,
        minor: 1,
        ino: 11,
    };
    const PATH: &str = "/srv/db/lock.mdb";

    fn mapped(file: FileId, path: &str, deleted: bool) -> Mapped {
        Mapped {
            file,
            path: path.into(),
            deleted,
        }
    }

    fn serving_with(maps: &[Mapped], lock: Option<FileId>) -> Serving {
        serving(maps, Some(DATA), lock, Some(std::path::Path::new(PATH)))
    }

    /// A holder that maps no file of the store has not opened it; one that maps the
    /// `lock.mdb` at the path serves with it; one that maps the data file without it (none
    /// there, another inode there, its own unlinked and its inode number reused) lost it.
    #[test]
    fn a_holders_mappings_say_whether_it_serves_with_the_lock_file_at_the_path() {
        let other = mapped(
            FileId {
                major: 8,
                minor: 2,
                ino: 10,
            },
            "/usr/lib/libc.so.6",
            false,
        );
        let data = mapped(DATA, "/srv/db/data.mdb", false);
        assert_eq!(
            serving_with(std::slice::from_ref(&other), Some(LOCK)),
            Serving::NotYet
        );
        assert_eq!(serving_with(&[], None), Serving::NotYet);
        assert_eq!(
            serving_with(&[data.clone(), mapped(LOCK, PATH, false)], Some(LOCK)),
            Serving::WithItsLockFile
        );
        assert_eq!(
            serving_with(std::slice::from_ref(&data), None),
            Serving::WithoutItsLockFile
        );
        assert_eq!(
            serving_with(&[data.clone(), mapped(LOCK, PATH, true)], None),
            Serving::WithoutItsLockFile
        );
        let fresh = FileId { ino: 12, ..LOCK };
        assert_eq!(
            serving_with(&[data.clone(), mapped(LOCK, PATH, true)], Some(fresh)),
            Serving::WithoutItsLockFile
        );
        assert_eq!(
            serving_with(&[data, mapped(LOCK, PATH, true)], Some(LOCK)),
            Serving::WithoutItsLockFile
        );
        // Its own unlinked lock.mdb alone (it was removed while the store was being opened).
        assert_eq!(
            serving_with(&[other, mapped(LOCK, PATH, true)], None),
            Serving::WithoutItsLockFile
        );
    }
}
