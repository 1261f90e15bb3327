//! Lock files a killed `git commit` can leave behind.
//!
//! git takes a lock by creating `<file>.lock` and releases it by renaming or removing it; a
//! process killed with `SIGKILL` releases nothing, and every later git run that needs the same
//! lock fails (`Unable to create '…/refs/heads/main.lock': File exists`). The index is no
//! concern here (git runs on a private index), but `git commit` also locks the branch it
//! moves, `HEAD`, `packed-refs`, and, with `--only`, a `next-index-<pid>.lock` of its own.
//! The handler notes which of these exist before it runs `git commit`; if it has to kill that
//! run, it removes the ones the run created.
//!
//! A daemon killed while git (or the handler's own index install) holds a lock leaves it too,
//! and no `Locks` record survives the daemon. So before each commit [`clear_stale`] removes
//! the locks no live git of this plugin can hold: the daemon runs one call per episode at a
//! time and one daemon serves a store, so a lock in the episode's own git directory at the
//! start of a call is left over; a lock in a repository's shared directory (which other
//! episodes' worktrees also use) is left over only once it is older than the plugin's git
//! deadline.
//!
//! A killed git also leaves its temporary object files (a half-written pack of a large file it
//! was staging): [`TempObjects`] removes the ones a killed run made, and
//! [`clear_stale_temp_objects`] the ones a daemon that died left; neither removes one that a
//! process holds open (a live git, the operator's own in the shared object store).

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The lock files present before a `git commit` run.
#[derive(Debug)]
pub struct Locks {
    git_dir: PathBuf,
    candidates: Vec<(PathBuf, bool)>,
    next_index: BTreeSet<OsString>,
}

impl Locks {
    /// Note the locks a commit in `git_dir` (with `common_dir` holding the refs) may take.
    pub fn before(git_dir: &Path, common_dir: &Path) -> Locks {
        let mut paths = vec![
            git_dir.join("HEAD.lock"),
            git_dir.join("index.lock"),
            common_dir.join("packed-refs.lock"),
        ];
        if let Some(branch) = branch(git_dir) {
            paths.push(common_dir.join(format!("{branch}.lock")));
        }
        Locks {
            git_dir: git_dir.to_path_buf(),
            candidates: paths
                .into_iter()
                .map(|p| {
                    let existed = p.symlink_metadata().is_ok();
                    (p, existed)
                })
                .collect(),
            next_index: next_index_locks(git_dir),
        }
    }

    /// Remove the lock files that appeared since [`Locks::before`]; returns them.
    pub fn sweep(&self) -> Vec<PathBuf> {
        let mut removed = Vec::new();
        for (path, existed) in &self.candidates {
            if !existed && std::fs::remove_file(path).is_ok() {
                removed.push(path.clone());
            }
        }
        for name in next_index_locks(&self.git_dir).difference(&self.next_index) {
            let path = self.git_dir.join(name);
            if std::fs::remove_file(&path).is_ok() {
                removed.push(path);
            }
        }
        removed
    }
}

/// The branch `HEAD` names (`refs/heads/main`), if it names one.
fn branch(git_dir: &Path) -> Option<String> {
    let head = std::fs::read_to_string(git_dir.join("HEAD")).ok()?;
    let name = head.strip_prefix("ref: ")?.trim_end();
    let safe = name.starts_with("refs/")
        && !name
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
        && !name.contains('\0');
    safe.then(|| name.to_string())
}

fn next_index_locks(git_dir: &Path) -> BTreeSet<OsString> {
    std::fs::read_dir(git_dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name())
                .filter(|n| {
                    let n = n.to_string_lossy();
                    n.starts_with("next-index-") && n.ends_with(".lock")
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The stale lock files [`clear_stale`] removed.
#[derive(Debug, Default)]
pub struct Cleared {
    /// Every lock file removed.
    pub removed: Vec<PathBuf>,
    /// Whether the git directory's `index.lock` was among them: the index may then be older
    /// than `HEAD` (the commit was made, its index never installed).
    pub index: bool,
}

/// Remove the lock files of `git_dir` (and, when older than `max_age`, of `common_dir`) that
/// a commit takes, left by a run that was killed: see the module's comment for why no live
/// run of this plugin holds them.
pub fn clear_stale(git_dir: &Path, common_dir: &Path, max_age: Duration) -> Cleared {
    let shared = !same_dir(git_dir, common_dir);
    let mut own = vec![git_dir.join("HEAD.lock"), git_dir.join("index.lock")];
    own.extend(
        next_index_locks(git_dir)
            .into_iter()
            .map(|n| git_dir.join(n)),
    );
    let mut common = vec![common_dir.join("packed-refs.lock")];
    if let Some(branch) = branch(git_dir) {
        common.push(common_dir.join(format!("{branch}.lock")));
    }
    let mut cleared = Cleared::default();
    let index_lock = git_dir.join("index.lock");
    let candidates = own
        .into_iter()
        .map(|p| (p, false))
        .chain(common.into_iter().map(|p| (p, shared)));
    for (path, needs_age) in candidates {
        let Ok(md) = path.symlink_metadata() else {
            continue;
        };
        if needs_age {
            let age = md.modified().ok().and_then(|m| m.elapsed().ok());
            if age.is_none_or(|a| a <= max_age) {
                continue;
            }
        }
        if std::fs::remove_file(&path).is_ok() {
            if path == index_lock {
                cleared.index = true;
            }
            cleared.removed.push(path);
        }
    }
    cleared
}

/// Whether two directories are one (a repository's own `.git`, where git dir and common dir
/// coincide).
fn same_dir(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (a.metadata(), b.metadata()) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => a == b,
    }
}

/// git's temporary object files in a repository's object store: a loose object being written
/// (`tmp_obj_*`, at the top or in a fan-out directory) and a pack streamed from a large file
/// (`pack/tmp_pack_*`, `pack/tmp_idx_*`, `pack/tmp_rev_*`, …). git renames them into place when
/// it finishes; one killed first leaves them, up to the size of what it was staging, and git's
/// own `gc` removes them only after two weeks.
fn temp_objects(common_dir: &Path) -> BTreeSet<PathBuf> {
    let objects = common_dir.join("objects");
    let mut found = BTreeSet::new();
    let mut look = |dir: &Path, prefix: &str| {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if entry.file_name().to_string_lossy().starts_with(prefix) {
                found.insert(entry.path());
            }
        }
    };
    look(&objects, "tmp_obj_");
    look(&objects.join("pack"), "tmp_");
    for entry in std::fs::read_dir(&objects).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.len() == 2 && name.bytes().all(|b| b.is_ascii_hexdigit()) {
            look(&entry.path(), "tmp_obj_");
        }
    }
    found
}

/// The temporary object files present before a commit's git runs.
#[derive(Debug)]
pub struct TempObjects {
    common_dir: PathBuf,
    before: BTreeSet<PathBuf>,
}

impl TempObjects {
    /// Note the temporary object files in the object store of `common_dir`.
    pub fn before(common_dir: &Path) -> TempObjects {
        TempObjects {
            common_dir: common_dir.to_path_buf(),
            before: temp_objects(common_dir),
        }
    }

    /// Remove the temporary object files that appeared since [`TempObjects::before`] (after a
    /// git run was killed); returns them.
    pub fn sweep(&self) -> Vec<PathBuf> {
        let new: BTreeSet<PathBuf> = temp_objects(&self.common_dir)
            .difference(&self.before)
            .cloned()
            .collect();
        remove_unheld(new)
    }
}

/// Remove the temporary object files of `common_dir` not written to for longer than `max_age`
/// and open in no process (left by a git killed with the daemon: no live run of this plugin
/// outlasts its deadline, and a git still writing one, the operator's own included, holds it
/// open however long it stalls); returns them.
pub fn clear_stale_temp_objects(common_dir: &Path, max_age: Duration) -> Vec<PathBuf> {
    let stale: BTreeSet<PathBuf> = temp_objects(common_dir)
        .into_iter()
        .filter(|path| {
            let age = path
                .symlink_metadata()
                .and_then(|md| md.modified())
                .ok()
                .and_then(|m| m.elapsed().ok());
            age.is_some_and(|a| a > max_age)
        })
        .collect();
    remove_unheld(stale)
}

/// Remove those of `candidates` that no process holds open; returns the ones removed.
///
/// The object store of a `--repo` worktree is the operator's repository's, so a temporary
/// file in it may be a live git's that is not the plugin's (a fetch resolving deltas, a
/// repack): git keeps the file open until it renames it into place, while a killed git's
/// descriptors are closed once it has been reaped.
fn remove_unheld(candidates: BTreeSet<PathBuf>) -> Vec<PathBuf> {
    if candidates.is_empty() {
        return Vec::new();
    }
    let held = held_open(&candidates);
    candidates
        .into_iter()
        .filter(|path| !held.contains(path) && std::fs::remove_file(path).is_ok())
        .collect()
}

/// Those of `candidates` that a process's descriptor refers to, found in `/proc/*/fd`
/// (processes whose descriptors cannot be read, another user's without privilege, are
/// skipped). Links are matched by file name first, then by device and inode, so a path
/// spelled through a symbolic link is still recognised.
fn held_open(candidates: &BTreeSet<PathBuf>) -> BTreeSet<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let ids: Vec<((u64, u64), &PathBuf)> = candidates
        .iter()
        .filter_map(|path| {
            let md = path.symlink_metadata().ok()?;
            Some(((md.dev(), md.ino()), path))
        })
        .collect();
    let names: BTreeSet<&std::ffi::OsStr> = candidates
        .iter()
        .filter_map(|path| path.file_name())
        .collect();
    let mut held = BTreeSet::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return held;
    };
    for proc in procs.flatten() {
        if !proc
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(proc.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            if !target.file_name().is_some_and(|n| names.contains(n)) {
                continue;
            }
            let Ok(md) = std::fs::metadata(fd.path()) else {
                continue;
            };
            for (id, path) in &ids {
                if *id == (md.dev(), md.ino()) {
                    held.insert((*path).clone());
                }
            }
        }
    }
    held
}
