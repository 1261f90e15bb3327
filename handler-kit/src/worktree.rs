//! Opening an episode's worktree once, by descriptor, so that no later lookup by path can be
//! redirected (Linux).
//!
//! The daemon checks the worktree (`<workspace root>/<episode>` is a directory, not a symlink)
//! when it binds it to a request, and hands the handler the *path*. Anything that can write the
//! workspace root (a program an agent runs, whose `..` is that root) can swap the directory for
//! a symlink to anywhere between that check and the handler's open; an open that follows the
//! link would then read and write outside. So a handler opens the worktree once with [`open`]
//! (`O_DIRECTORY | O_NOFOLLOW`: a symlink at the last component is refused, never followed),
//! works beneath the descriptor it got (cap-std's `Dir::from_std_file(File::from(fd))`), and
//! starts programs in it with [`run_in`] (`fchdir` to that descriptor in the child, not
//! `chdir` to the path). The directories above the worktree are the operator's (the workspace
//! root and its parents), and are followed as the operator set them up.
//!
//! ```no_run
//! use std::process::Command;
//! use handler_kit::worktree;
//!
//! let dir = worktree::open("/srv/work/ep1".as_ref()).map_err(|e| e.to_string())?;
//! let mut git = Command::new("git");
//! git.arg("status");
//! worktree::run_in(&mut git, &dir).map_err(|e| e.to_string())?;
//! git.status().map_err(|e| e.to_string())?;
//! # Ok::<(), String>(())
//! ```

use std::ffi::CString;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use crate::output::errno_text;
use crate::Outcome;

/// Opens of a worktree that was a directory again when looked at after a failed open.
const ATTEMPTS: usize = 3;

/// Why [`open`] gave no worktree.
#[derive(Debug)]
pub enum WorktreeError {
    /// The worktree's last component is a symbolic link (wherever it leads).
    Symlink,
    /// The worktree exists and is neither a directory nor a symlink.
    NotADirectory,
    /// The worktree was a directory and then not, again and again, while it was being opened.
    Changed,
    /// Any other failure of the open (`ENOENT`, `EACCES`, ...).
    Io(io::Error),
}

impl fmt::Display for WorktreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorktreeError::Symlink => f.write_str(
                "the episode's worktree is a symbolic link; a worktree must be a directory in \
                 the workspace root itself",
            ),
            WorktreeError::NotADirectory => {
                f.write_str("the episode's worktree is not a directory")
            }
            WorktreeError::Changed => f.write_str(
                "the episode's worktree kept changing between a directory and something else \
                 while it was being opened",
            ),
            WorktreeError::Io(e) => write!(
                f,
                "the episode's worktree cannot be opened: {}",
                errno_text(e)
            ),
        }
    }
}

impl std::error::Error for WorktreeError {}

impl WorktreeError {
    /// `failed("broker: <effect> failed: <this error>")`: the effect could not run at all and
    /// nothing was read or written. No host path in the text.
    pub fn outcome(&self, effect: &str) -> Outcome {
        Outcome::failed(format!("broker: {effect} failed: {self}"))
    }
}

/// Open the worktree directory at `worktree` without following a symlink at its last
/// component (`O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC`). The descriptor names the directory that
/// was there at this moment; a later swap of the path does not move it.
pub fn open(worktree: &Path) -> Result<OwnedFd, WorktreeError> {
    open_with(worktree, |c| {
        // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by open and is owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    })
}

/// [`open`], each attempt made by `open_once` (the system's `open` but in tests, which must
/// make the worktree flip between a failed open and the look after it on every attempt).
fn open_with(
    worktree: &Path,
    open_once: impl Fn(&CString) -> io::Result<OwnedFd>,
) -> Result<OwnedFd, WorktreeError> {
    let c = CString::new(worktree.as_os_str().as_bytes())
        .map_err(|_| WorktreeError::Io(io::Error::from_raw_os_error(libc::EINVAL)))?;
    for _ in 0..ATTEMPTS {
        let e = match open_once(&c) {
            Ok(fd) => return Ok(fd),
            Err(e) => e,
        };
        if !matches!(e.raw_os_error(), Some(libc::ENOTDIR) | Some(libc::ELOOP)) {
            return Err(WorktreeError::Io(e));
        }
        // Linux says ENOTDIR for a symlink and for a file alike: a look without following
        // tells them apart (only the wording depends on it). A directory again by then was
        // swapped in between: open again.
        match std::fs::symlink_metadata(worktree) {
            Ok(md) if md.file_type().is_symlink() => return Err(WorktreeError::Symlink),
            Ok(md) if !md.is_dir() => return Err(WorktreeError::NotADirectory),
            Ok(_) => continue,
            Err(_) => return Err(WorktreeError::Io(e)),
        }
    }
    Err(WorktreeError::Changed)
}

/// Make `command` start in the directory `dir` names: the child `fchdir`s to (a duplicate of)
/// the descriptor right before `exec`, after any `current_dir` by path, so the program starts
/// where `dir` is even if its path was swapped since [`open`].
///
/// Works with `child::Group::prepare` in either order: the group only marks descriptors
/// close-on-exec, and the duplicate is close-on-exec already, so the program never holds it.
pub fn run_in(command: &mut Command, dir: impl AsFd) -> io::Result<()> {
    // The closure owns its own duplicate (close-on-exec), so the caller's descriptor may be
    // dropped before the spawn.
    let dup = dir.as_fd().try_clone_to_owned()?;
    // SAFETY: the closure runs between fork and exec and makes one async-signal-safe call
    // (fchdir); it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if libc::fchdir(dup.as_raw_fd()) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn scratch(name: &str) -> std::path::PathBuf {
        let tmp = std::env::temp_dir().join(format!(
            "handler-kit-worktree-{name}-{}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&tmp);
        fs::create_dir_all(&tmp).unwrap();
        tmp
    }

    /// A worktree that is a directory again at every look after a failed open (a swap racing
    /// each attempt) is given up on after [`ATTEMPTS`] opens, said as changing, not retried for
    /// ever nor said to be a link.
    #[test]
    fn a_worktree_that_flips_at_every_attempt_is_given_up_on_after_three_opens() {
        let dir = scratch("flips");
        let tries = std::cell::Cell::new(0);
        let got = open_with(&dir, |_| {
            tries.set(tries.get() + 1);
            Err(io::Error::from_raw_os_error(libc::ENOTDIR))
        });
        assert!(matches!(got, Err(WorktreeError::Changed)), "{got:?}");
        assert_eq!(tries.get(), ATTEMPTS);
        assert_eq!(
            got.unwrap_err().to_string(),
            "the episode's worktree kept changing between a directory and something else while it was being opened"
        );
        // One failed attempt, then the directory: opened on the second.
        let tries = std::cell::Cell::new(0);
        let got = open_with(&dir, |c| {
            tries.set(tries.get() + 1);
            if tries.get() == 1 {
                return Err(io::Error::from_raw_os_error(libc::ELOOP));
            }
            open(Path::new(std::ffi::OsStr::from_bytes(c.as_bytes())))
                .map_err(|e| io::Error::other(e.to_string()))
        });
        assert!(got.is_ok(), "{got:?}");
        assert_eq!(tries.get(), 2);
    }

    #[test]
    fn a_worktree_that_is_a_symlink_is_refused_not_followed() {
        let tmp = scratch("link");
        fs::create_dir(tmp.join("outside")).unwrap();
        std::os::unix::fs::symlink(tmp.join("outside"), tmp.join("ep")).unwrap();
        let e = open(&tmp.join("ep")).unwrap_err();
        assert!(matches!(e, WorktreeError::Symlink), "{e:?}");
        assert_eq!(
            e.outcome("Workspace.Read"),
            Outcome::failed(
                "broker: Workspace.Read failed: the episode's worktree is a symbolic link; a \
                 worktree must be a directory in the workspace root itself"
            )
        );
        fs::write(tmp.join("file"), "x").unwrap();
        assert!(matches!(
            open(&tmp.join("file")),
            Err(WorktreeError::NotADirectory)
        ));
        assert_eq!(
            open(&tmp.join("missing")).unwrap_err().to_string(),
            "the episode's worktree cannot be opened: no such file or directory"
        );
        fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn a_child_runs_in_the_opened_worktree_even_after_its_path_is_swapped() {
        let tmp = scratch("swap");
        fs::create_dir(tmp.join("ep")).unwrap();
        fs::write(tmp.join("ep/mark"), "inside").unwrap();
        fs::create_dir(tmp.join("outside")).unwrap();
        fs::write(tmp.join("outside/mark"), "outside").unwrap();
        let dir = open(&tmp.join("ep")).unwrap();
        // The swap after the open: the path now leads outside.
        fs::rename(tmp.join("ep"), tmp.join("ep.moved")).unwrap();
        std::os::unix::fs::symlink(tmp.join("outside"), tmp.join("ep")).unwrap();
        let mut cat = Command::new("cat");
        cat.arg("mark").current_dir(tmp.join("ep"));
        run_in(&mut cat, &dir).unwrap();
        drop(dir);
        let out = cat.output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "inside");
        fs::remove_dir_all(&tmp).unwrap();
    }

    /// With a child group, in either order: the program starts in the worktree and does not
    /// hold the worktree's descriptor.
    #[cfg(feature = "child")]
    #[test]
    fn run_in_and_a_child_group_start_the_program_in_the_worktree_in_either_order() {
        let tmp = scratch("group");
        fs::create_dir(tmp.join("ep")).unwrap();
        fs::write(tmp.join("ep/mark"), "inside").unwrap();
        let dir = open(&tmp.join("ep")).unwrap();
        let group = crate::child::Group::new().unwrap();
        for run_in_first in [true, false] {
            let mut sh = Command::new("sh");
            sh.args(["-c", "cat mark; ls /proc/self/fd | wc -l"]);
            if run_in_first {
                run_in(&mut sh, &dir).unwrap();
                group.prepare(&mut sh);
            } else {
                group.prepare(&mut sh);
                run_in(&mut sh, &dir).unwrap();
            }
            let out = sh.output().unwrap();
            // cat's output, then ls's count: stdio 0-2 and the directory ls reads (4 lines).
            assert_eq!(String::from_utf8_lossy(&out.stdout), "inside4\n");
        }
        fs::remove_dir_all(&tmp).unwrap();
    }
}
