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

/// How long a verb waits for a daemon that holds the store's data file to hold its `lock.mdb`
/// too: a daemon starting takes the first a moment before it opens the store.
const LOCK_FILE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Refuse a verb's writable open of the store in `db` while a daemon serves it (its `flock` on
/// `data.mdb`) but no process holds LMDB's lock on its `lock.mdb` (removed, or replaced, while
/// the daemon served): the verb's open would make a new `lock.mdb`, whose write lock is not the
/// daemon's, and each would write over the other's pages (a mint or revoke reported done and
/// then lost, a call the daemon acknowledged gone). Asked before the store is opened, so
/// nothing is made or written.
pub(super) fn refuse_beside_lockless_daemon(db: &std::path::Path) -> CliResult {
    let until = std::time::Instant::now() + LOCK_FILE_WAIT;
    loop {
        if !another_serves(db) || broker_core::store::Store::lock_file_held(db) {
            return Ok(());
        }
        if std::time::Instant::now() >= until {
            return Err(Failure::fatal(lockless_daemon(db)));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Whether another process than this one holds the daemon's `flock` on the store's data file
/// (read from `/proc/locks`, as [`super::doctor::daemon_serves`] reads it): `quickstart` takes
/// it itself before it mints into an existing store, which no daemon serves yet.
fn another_serves(db: &std::path::Path) -> bool {
    crate::proc_locks::exclusive_holder(&store_lock_file(db))
        .is_some_and(|pid| pid != std::process::id().to_string())
}

/// [`refuse_beside_lockless_daemon`]'s refusal.
fn lockless_daemon(db: &std::path::Path) -> String {
    format!(
        "the daemon serving {} lost its lock.mdb (removed or replaced while it served): this verb would write to the store without the daemon's write lock, and one of their writes would be lost; nothing was written: restart the daemon, then run this verb again",
        db.display()
    )
}
