//! Paths as a start takes them, before anything is made: absolute against the working
//! directory now, resolved as far as they exist, and the store's file a daemon locks. Used by
//! the placement checks and the directory locks alike, and depending on neither.

use std::path::PathBuf;

/// `path` made absolute against the working directory now (as given where that cannot be read).
pub(super) fn absolute_now(path: &std::path::Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// `path` as it will be once made: each part that exists resolved (symlinks, `..`), and the
/// rest, not made yet, taken as the directories `create_dir_all` will make, a `..` after one
/// of them going back up (`a/new/../db` is `a/db`). The path [`lock_ancestors`](super::dir_locks::lock_ancestors) will name.
pub(super) fn real_so_far(path: &std::path::Path) -> PathBuf {
    use std::path::Component;
    let abs = absolute_now(path);
    let mut at = PathBuf::from("/");
    // Whether `at` exists, and so is a real path whose parent is its `..`.
    let mut real = true;
    for part in abs.components() {
        match part {
            Component::Prefix(_) | Component::RootDir | Component::CurDir => {}
            Component::ParentDir => {
                // Back up a part made up above, or out of a real one: either way what is left
                // is real again when it exists (the real prefix the made-up parts were added to).
                at.pop();
                real = at.exists();
            }
            Component::Normal(name) => {
                let next = at.join(name);
                match real.then(|| next.canonicalize().ok()).flatten() {
                    Some(resolved) => at = resolved,
                    None => {
                        real = false;
                        at = next;
                    }
                }
            }
        }
    }
    at
}

/// The file a serving daemon locks: the store's own data file. A lock file beside it
/// (`worldd.lock`, once) could be removed while the daemon ran, as lock files are after a crash,
/// and a second daemon then started on the same store; the data file is the store.
pub(super) fn store_lock_file(db: &std::path::Path) -> std::path::PathBuf {
    db.join("data.mdb")
}
