//! Other repositories inside the worktree.
//!
//! A directory holding an entry named like `.git` (a `.git` directory, or a *gitfile* whose
//! `gitdir: <path>` line can point anywhere on the host) is, to git, a repository of its own:
//! `git add` would follow the gitfile to read that repository's `HEAD` and record a gitlink to
//! it, and whether a commit or "nothing to commit" comes back would tell an agent whether a
//! repository exists at an arbitrary host path. So before git runs at all, the handler looks
//! for such entries itself, on the file system alone (nothing is followed, nothing is read),
//! and refuses: the answer is the same whatever the gitfile points at.
//!
//! Where it looks: every directory on the way to a named path (a path *inside* another
//! repository), and everything below a named directory, or below the worktree's root when no
//! paths are named. Only the root's own `.git` is exempt. Symbolic links are never followed
//! (git commits a link as a link).

use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

use cap_std::fs::Dir;
use handler_kit::protect::is_git_name;

/// Why the scan did not finish.
#[derive(Debug)]
pub enum ScanError {
    /// The deadline passed.
    Timeout,
    /// A directory could not be listed.
    Io(PathBuf, io::Error),
}

/// Entries checked between two looks at the clock.
const CLOCK_EVERY: usize = 256;

/// The first entry named like `.git` that makes a repository of its own out of a directory
/// on the way to, or below, the path made of `parts` (empty = the whole worktree), as a
/// worktree-relative path (`leak1/.git`).
pub fn find(root: &Dir, parts: &[&str], deadline: Instant) -> Result<Option<String>, ScanError> {
    let mut seen = 0usize;
    // The directories on the way (the root's look-alikes count, its own `.git` does not).
    let mut dir = PathBuf::new();
    for (depth, part) in parts.iter().enumerate() {
        if let Some(found) = git_entry(root, &dir, depth == 0, &mut seen, deadline)? {
            return Ok(Some(found));
        }
        dir.push(part);
        match root.symlink_metadata(&dir) {
            Ok(md) if md.is_dir() => {}
            // A file, a link, or nothing: there is nothing below it to look at.
            _ => return Ok(None),
        }
    }
    // Everything below the path (a directory, or the root).
    let mut stack = vec![dir];
    while let Some(dir) = stack.pop() {
        let top = dir.as_os_str().is_empty();
        if let Some(found) = git_entry(root, &dir, top, &mut seen, deadline)? {
            return Ok(Some(found));
        }
        for entry in list(root, &dir)? {
            let entry = entry.map_err(|e| ScanError::Io(dir.clone(), e))?;
            let is_dir = entry
                .file_type()
                .map_err(|e| ScanError::Io(dir.clone(), e))?
                .is_dir();
            if is_dir {
                let name = entry.file_name();
                if !(top && name == ".git") {
                    stack.push(dir.join(name));
                }
            }
        }
    }
    Ok(None)
}

fn list(root: &Dir, dir: &Path) -> Result<cap_std::fs::ReadDir, ScanError> {
    let listed = if dir.as_os_str().is_empty() {
        root.entries()
    } else {
        root.read_dir(dir)
    };
    listed.map_err(|e| ScanError::Io(dir.to_path_buf(), e))
}

/// An entry of `dir` named like `.git` (at the root, other than `.git` itself).
fn git_entry(
    root: &Dir,
    dir: &Path,
    top: bool,
    seen: &mut usize,
    deadline: Instant,
) -> Result<Option<String>, ScanError> {
    for entry in list(root, dir)? {
        let entry = entry.map_err(|e| ScanError::Io(dir.to_path_buf(), e))?;
        *seen += 1;
        if *seen % CLOCK_EVERY == 0 && Instant::now() >= deadline {
            return Err(ScanError::Timeout);
        }
        let name = entry.file_name();
        if top && name == ".git" {
            continue;
        }
        let text = name.to_string_lossy();
        if is_git_name(&text) {
            return Ok(Some(dir.join(&*text).to_string_lossy().into_owned()));
        }
    }
    Ok(None)
}

/// The entries at or below `start` (worktree-relative; empty = the root) that are neither a
/// regular file, a directory nor a symbolic link (FIFOs, sockets, devices), which `git add`
/// skips without a word: worktree-relative paths, in no set order, as many as are found before
/// `deadline`. The root's own `.git` is not looked in; a directory that cannot be listed is
/// passed over.
pub fn special_files(root: &Dir, start: &Path, deadline: Instant) -> Vec<String> {
    let special =
        |kind: cap_std::fs::FileType| !(kind.is_file() || kind.is_dir() || kind.is_symlink());
    let mut found = Vec::new();
    if !start.as_os_str().is_empty() {
        match root.symlink_metadata(start) {
            Ok(md) if md.is_dir() => {}
            Ok(md) => {
                if special(md.file_type()) {
                    found.push(start.to_string_lossy().into_owned());
                }
                return found;
            }
            Err(_) => return found,
        }
    }
    let mut seen = 0usize;
    let mut stack = vec![start.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let top = dir.as_os_str().is_empty();
        let Ok(entries) = list(root, &dir) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen % CLOCK_EVERY == 0 && Instant::now() >= deadline {
                return found;
            }
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let name = entry.file_name();
            if kind.is_dir() {
                if !(top && name == ".git") {
                    stack.push(dir.join(name));
                }
            } else if special(kind) {
                found.push(dir.join(name).to_string_lossy().into_owned());
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_scan_past_its_deadline_stops_with_timeout() {
        let tmp = tempfile::tempdir().unwrap();
        for i in 0..300 {
            std::fs::create_dir(tmp.path().join(format!("d{i}"))).unwrap();
        }
        let root = Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).unwrap();
        let far = Instant::now() + Duration::from_secs(60);
        assert!(matches!(find(&root, &[], far), Ok(None)));
        assert!(matches!(
            find(&root, &[], Instant::now()),
            Err(ScanError::Timeout)
        ));
    }
}
