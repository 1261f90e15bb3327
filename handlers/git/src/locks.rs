//! Lock files a killed `git commit` can leave behind.
//!
//! git takes a lock by creating `<file>.lock` and releases it by renaming or removing it; a
//! process killed with `SIGKILL` releases nothing, and every later git run that needs the same
//! lock fails (`Unable to create '…/refs/heads/main.lock': File exists`). The index is no
//! concern here (git runs on a private index), but `git commit` also locks the branch it
//! moves, `HEAD`, `packed-refs`, and, with `--only`, a `next-index-<pid>.lock` of its own.
//! The handler notes which of these exist before it runs `git commit`; if it has to kill that
//! run, it removes the ones the run created.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

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
