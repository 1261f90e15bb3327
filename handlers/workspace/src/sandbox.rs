//! Confinement to one worktree.
//!
//! The worktree is opened once as a cap-std [`Dir`]; every later file system
//! call is relative to that handle, and cap-std refuses any resolution that
//! would leave it (openat2 `RESOLVE_BENEATH` where the kernel has it, careful
//! manual resolution otherwise). On top of that this module resolves paths
//! itself, one component at a time, so that it knows the *canonical*
//! worktree-relative path a request ends at (to apply `.git/` and deny-glob
//! rules to where a write really lands, the `.git/` rule to what a read really
//! reads, and to say "escapes sandbox" instead of a bare errno):
//!
//! 1. **Resolve** (check): walk the requested path from the root
//!    (`handler_kit::beneath`, which the ailang plugin's check of its path
//!    arguments walks too). `..` pops a component we hold (never the
//!    kernel's `..`); a symlink is read and its target spliced into the walk (an
//!    absolute target, or `..` above the root, is an escape). The result is a chain of real
//!    directories plus a final name. A link that is a directory again, or gone,
//!    when it is read was swapped since it was looked at: the walk starts over,
//!    as for a change found in step 2.
//! 2. **Use**: re-open that chain from the root with `O_NOFOLLOW` on every
//!    component and open the final name with `O_NOFOLLOW`. If anything was
//!    swapped for a symlink in between, the open fails (and the operation is
//!    retried from step 1) instead of following it. So a race can at worst
//!    make a call fail; it can never redirect it outside the worktree, or into
//!    a place the check did not approve.
//!
//! Writes are atomic: a temporary file in the target's directory is written
//! and fsynced, renamed over the target (an edit's exchanged with it: see
//! `install_over_read`), and the directory is fsynced. A crash
//! leaves the old or the new content, never a mix (at worst an orphaned
//! `.worldd-tmp-<pid>-…` file beside it, which this process's first write in
//! that directory removes once process `<pid>` is gone: one listing per
//! directory per process, not one per write, so a write into a directory of
//! many entries costs what any write does). `rename` replaces a name; it never writes
//! through a symlink or into another inode (a hard link to an outside file is
//! replaced, not modified).

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use cap_fs_ext::{DirExt, FollowSymlinks, OpenOptionsFollowExt, OpenOptionsMaybeDirExt};
use cap_std::fs::{
    Dir, File, MetadataExt, OpenOptions, OpenOptionsExt, Permissions, PermissionsExt,
};
use handler_kit::beneath::{self, End, Kind, Tree, WalkError};
/// An errno-style text as Go prints it: `no such file or directory`.
pub use handler_kit::output::errno_text;
use handler_kit::worktree::{self, WorktreeError};

/// Attempts when the tree changes between check and use.
const ATTEMPTS: usize = 3;

/// `S_ISUID | S_ISGID`: the mode bits a write never carries over to the file it installs.
const SET_ID_BITS: u32 = 0o6000;

/// Why a path could not be used. The handler turns each into a refusal text.
#[derive(Debug)]
pub enum PathError {
    /// The path (or a symlink on it) leads outside the worktree.
    Escape,
    /// The path names a directory where a file was expected.
    IsADirectory,
    /// The path ends in `/`, so it can only name a directory, and nothing is there: a write
    /// has no file name to create (said apart: "is a directory" sent an agent looking for one).
    EndsInSlash,
    /// The path names something that is neither a regular file nor a
    /// directory (a FIFO, a socket, a device).
    NotAFile,
    /// The tree kept changing under the operation.
    Changed,
    /// The path with its symlinks' targets spliced in is too long to check
    /// ([`WalkError::TooLong`]): refused, never opened.
    TooLong,
    /// The file is larger than the limit (its size in bytes).
    TooLarge(u64),
    /// The file has this many hard links (more than one) and the policy refuses them.
    HardLinked(u64),
    /// An operating-system error, reported as `openat <path>: <text>`.
    Io(io::Error),
    /// The caller's [`Vet`] refused the resolved target, in these words.
    Refused(String),
    /// The file an edit read is no longer the one at its name (written, replaced or removed
    /// since): the edit, built on the older content, would overwrite that change.
    Modified,
}

/// The file an edit read, as `fstat` saw it: an in-place write changes its size, mtime or
/// ctime; a replacement, its device and inode.
pub use handler_kit::file_identity::FileIdentity as Identity;

/// Directories a write made, each with a handle on the directory holding it, outermost
/// first: removed again (deepest first, only while empty) when the write then fails, so a
/// failure that says "nothing was changed" leaves none behind.
#[derive(Default)]
struct Made(Vec<(Dir, OsString)>);

impl Made {
    fn undo(self) {
        for (parent, name) in self.0.into_iter().rev() {
            // ENOTEMPTY (something was put there since) leaves it, as it should.
            if parent.remove_dir(&name).is_ok() {
                let _ = sync_dir(&parent);
            }
        }
    }
}

/// A caller's rule for where a read's path resolves (the canonical [`Target`]): `Some(text)`
/// refuses the read before anything there is opened.
pub type Vet<'a> = &'a dyn Fn(&Target) -> Option<String>;

impl From<io::Error> for PathError {
    fn from(e: io::Error) -> Self {
        // cap-std's own escape refusal (the backstop behind our resolver).
        if e.kind() == io::ErrorKind::PermissionDenied
            && e.raw_os_error().is_none()
            && e.to_string().contains("outside of the filesystem")
        {
            return PathError::Escape;
        }
        PathError::Io(e)
    }
}

/// A resolved, canonical location inside the worktree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Existing real directories from the root down to the file's directory.
    pub parent: Vec<OsString>,
    /// Directories that do not exist yet (a write creates them).
    pub missing: Vec<OsString>,
    /// The final component.
    pub name: OsString,
    /// Its size at check time, when it existed (a regular file; anything else but a directory
    /// or a symlink is refused by [`Sandbox::resolve`]); `None` when it did not.
    pub size: Option<u64>,
}

impl Target {
    /// Whether `name` existed (as a regular file) at check time.
    pub fn exists(&self) -> bool {
        self.size.is_some()
    }

    /// The worktree-relative path of `name` in the target's directory.
    pub fn sibling(&self, name: &OsStr) -> String {
        let mut parts: Vec<String> = self
            .parent
            .iter()
            .chain(&self.missing)
            .map(|c| c.to_string_lossy().into_owned())
            .collect();
        parts.push(name.to_string_lossy().into_owned());
        parts.join("/")
    }

    /// The canonical worktree-relative path, `/`-separated.
    pub fn canonical(&self) -> String {
        let parts: Vec<String> = self
            .parent
            .iter()
            .chain(&self.missing)
            .chain(std::iter::once(&self.name))
            .map(|c| c.to_string_lossy().into_owned())
            .collect();
        parts.join("/")
    }
}

/// Lexical normalisation of a relative path (see [`beneath::lexical`]): used only to apply the
/// `.git/` and deny rules to the path *as requested* (in addition to where it resolves), never
/// to decide what gets opened.
pub use handler_kit::beneath::lexical;

/// The sandbox's handle as the [`Tree`] a walk looks at: `lstat` and `readlink` relative to it
/// (cap-std refuses a look that would leave it).
struct Handle<'a>(&'a Dir);

impl Tree for Handle<'_> {
    fn kind(&self, rel: &Path) -> io::Result<Kind> {
        let md = self.0.symlink_metadata(rel)?;
        let ft = md.file_type();
        Ok(Kind::of(
            ft.is_symlink(),
            ft.is_dir(),
            ft.is_file(),
            md.len(),
        ))
    }

    fn link(&self, rel: &Path) -> io::Result<PathBuf> {
        self.0.read_link_contents(rel)
    }
}

/// One worktree, opened once per request.
pub struct Sandbox {
    root: Dir,
}

impl Sandbox {
    /// Open the worktree directory (the one lookup by host path), refusing a worktree that is
    /// a symlink: the daemon checked the path when it bound it, but anything that can write
    /// the workspace root can swap it for a link since, and following it would redirect every
    /// read and write of the request ([`worktree::open`]).
    pub fn open(worktree: &Path) -> Result<Sandbox, WorktreeError> {
        let fd = worktree::open(worktree)?;
        Ok(Sandbox {
            root: Dir::from_std_file(std::fs::File::from(fd)),
        })
    }

    /// Step 1: resolve `path` to a canonical [`Target`] ([`beneath::walk`], through this
    /// sandbox's handle).
    ///
    /// `create` allows missing intermediate directories (a write creates
    /// them). POSIX semantics: `a/..` is the parent of wherever `a` resolves.
    pub fn resolve(&self, path: &str, create: bool) -> Result<Target, PathError> {
        let walked = beneath::walk(&Handle(&self.root), path).map_err(|e| match e {
            WalkError::Escape => PathError::Escape,
            WalkError::Changed => PathError::Changed,
            WalkError::TooLong => PathError::TooLong,
            WalkError::TooManyLinks => PathError::Io(io::Error::from_raw_os_error(libc::ELOOP)),
            WalkError::EmptyLink => PathError::Io(io::Error::from_raw_os_error(libc::ENOENT)),
            WalkError::Io(e) => e.into(),
        })?;
        let parent = walked.dirs;
        match walked.end {
            // The walk ended on a directory (the root itself, `a/..`, `dir`).
            End::Dir => Err(PathError::IsADirectory),
            // Anything left after a file, `.` included (`a.txt/`, `a.txt/.`, a link to
            // `a.txt/`), needs it to be a directory.
            End::Entry { name, kind, rest } => {
                if !rest.is_empty() {
                    return Err(PathError::Io(io::Error::from_raw_os_error(libc::ENOTDIR)));
                }
                match kind {
                    Kind::File { size } => Ok(Target {
                        parent,
                        missing: Vec::new(),
                        name,
                        size: Some(size),
                    }),
                    _ => Err(PathError::NotAFile),
                }
            }
            End::Absent {
                name,
                mut rest,
                error,
            } => {
                // The walk's mark of a path (or a link's target) ending in `/` or `/.`: the
                // last name must be a directory.
                let trailing_slash = rest.last().is_some_and(|r| r == ".");
                if trailing_slash {
                    rest.pop();
                }
                if rest.is_empty() {
                    if trailing_slash {
                        return Err(if create {
                            PathError::EndsInSlash
                        } else {
                            PathError::Io(error)
                        });
                    }
                    return Ok(Target {
                        parent,
                        missing: Vec::new(),
                        name,
                        size: None,
                    });
                }
                // `..` below a missing directory cannot be resolved.
                if !create || rest.iter().any(|r| r == "..") {
                    return Err(PathError::Io(error));
                }
                if trailing_slash {
                    return Err(PathError::EndsInSlash);
                }
                let last = rest.pop().unwrap_or_default();
                let mut missing = vec![name];
                missing.extend(rest);
                Ok(Target {
                    parent,
                    missing,
                    name: last,
                    size: None,
                })
            }
        }
    }

    /// Step 2: open the target's directory without following any symlink (a write creates
    /// missing directories: [`Sandbox::open_or_make_parent`]). `None`: the target is in the root itself,
    /// which is used as it is (no descriptor is duplicated for it).
    fn open_parent(&self, target: &Target) -> Result<Option<Dir>, PathError> {
        if !target.missing.is_empty() {
            return Err(PathError::Io(io::Error::from_raw_os_error(libc::ENOENT)));
        }
        self.open_or_make_parent(target).map(|(opened, _)| opened)
    }

    /// [`Sandbox::open_parent`], creating the missing directories, and which of them it made
    /// (none left made when it fails).
    fn open_or_make_parent(&self, target: &Target) -> Result<(Option<Dir>, Made), PathError> {
        let mut opened: Option<Dir> = None;
        for c in &target.parent {
            let dir = opened.as_ref().unwrap_or(&self.root);
            opened = Some(dir.open_dir_nofollow(c).map_err(changed)?);
        }
        let mut made = Made::default();
        for c in &target.missing {
            let dir = opened.as_ref().unwrap_or(&self.root);
            #[cfg(test)]
            tests::BEFORE_MAKE.with_borrow_mut(|hook| hook.take().map(|h| h()));
            let step = match dir.create_dir(c) {
                Ok(()) => dir
                    .try_clone()
                    .map_err(PathError::from)
                    .map(|holder| made.0.push((holder, c.clone())))
                    .and_then(|()| sync_dir(dir)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
                // ENOENT: the directory held open was removed since (as in `install`).
                Err(e) => Err(changed(e)),
            };
            let next = step.and_then(|()| dir.open_dir_nofollow(c).map_err(changed));
            match next {
                Ok(next) => opened = Some(next),
                Err(e) => {
                    made.undo();
                    return Err(e);
                }
            }
        }
        Ok((opened, made))
    }

    /// Read a whole file of at most `rules.limit` bytes (resolve, then use). `vet` sees where
    /// the path resolves before anything is opened there; its text refuses the read
    /// ([`PathError::Refused`]).
    pub fn read(&self, path: &str, rules: ReadRules, vet: Vet) -> Result<Vec<u8>, PathError> {
        retry(|| {
            let target = self.resolved(path, vet)?;
            self.read_target(&target, rules)
        })
    }

    /// Like [`Sandbox::read`] (the same checks, in the same order), but a file of at most
    /// `skip_at_most` bytes is not read: `Ok(None)`. For checks that need the bytes of large
    /// files only: a file that small when its path is resolved is not even opened, so the
    /// checks made on the opened file (its links, its size since) are the reader's to make.
    pub fn read_if_larger(
        &self,
        path: &str,
        rules: ReadRules,
        skip_at_most: u64,
        vet: Vet,
    ) -> Result<Option<Vec<u8>>, PathError> {
        retry(|| {
            let target = self.resolved(path, vet)?;
            if target.size.is_some_and(|size| size <= skip_at_most) {
                return Ok(None);
            }
            let opened = self.open_target_parent(&target)?;
            let dir = opened.as_ref().unwrap_or(&self.root);
            read_in(dir, &target.name, rules, Some(skip_at_most))
        })
    }

    /// [`Sandbox::resolve`] for a read, then `vet` on the target.
    fn resolved(&self, path: &str, vet: Vet) -> Result<Target, PathError> {
        let target = self.resolve(path, false)?;
        match vet(&target) {
            Some(refusal) => Err(PathError::Refused(refusal)),
            None => Ok(target),
        }
    }

    /// Read the file a resolved target names. `Changed` when the chain was
    /// swapped since [`Sandbox::resolve`].
    pub fn read_target(&self, target: &Target, rules: ReadRules) -> Result<Vec<u8>, PathError> {
        let opened = self.open_target_parent(target)?;
        let dir = opened.as_ref().unwrap_or(&self.root);
        read_in(dir, &target.name, rules, None).map(Option::unwrap_or_default)
    }

    /// [`Sandbox::read_target`] for an edit: the content and the [`Identity`] of the file it
    /// was read from, to give [`Sandbox::write_over`]. `Changed` when the file changed while it
    /// was read (its identity after the read is not the one before it).
    pub fn read_target_for_edit(
        &self,
        target: &Target,
        rules: ReadRules,
    ) -> Result<(Vec<u8>, Identity), PathError> {
        let opened = self.open_target_parent(target)?;
        let dir = opened.as_ref().unwrap_or(&self.root);
        let read = read_opened(dir, &target.name, rules, None)?;
        if read.before != read.after {
            return Err(PathError::Changed);
        }
        Ok((read.content.unwrap_or_default(), read.before))
    }

    fn open_target_parent(&self, target: &Target) -> Result<Option<Dir>, PathError> {
        if !target.exists() {
            return Err(PathError::Io(io::Error::from_raw_os_error(libc::ENOENT)));
        }
        self.open_parent(target)
    }

    /// Atomically replace (or create) the file at `target` with `content`.
    /// Returns `Err(PathError::Changed)` when the target's chain changed.
    pub fn write(&self, target: &Target, content: &[u8]) -> Result<(), WriteError> {
        self.write_over(target, content, None)
    }

    /// [`Sandbox::write`]; with `read`, only over the file of that [`Identity`] (the one an
    /// edit read): `Err(PathError::Modified)`, nothing changed, when the name holds anything
    /// else just before the rename. Directories the write made are removed again when it fails
    /// before the rename.
    pub fn write_over(
        &self,
        target: &Target,
        content: &[u8],
        read: Option<Identity>,
    ) -> Result<(), WriteError> {
        let (opened, made) = self
            .open_or_make_parent(target)
            .map_err(WriteError::Before)?;
        let dir = opened.as_ref().unwrap_or(&self.root);
        match self.install(dir, target, content, read) {
            Err(WriteError::Before(e)) => {
                made.undo();
                Err(WriteError::Before(e))
            }
            done => done,
        }
    }

    /// The write itself, in the target's opened directory `dir`.
    fn install(
        &self,
        dir: &Dir,
        target: &Target,
        content: &[u8],
        read: Option<Identity>,
    ) -> Result<(), WriteError> {
        // Keep an existing file's permission bits (rename installs a new inode), but not
        // setuid and setgid: the new inode is the daemon's, with the agent's content, and the
        // kernel drops both when anyone but the owner writes a file.
        let permissions = match dir.symlink_metadata(&target.name) {
            Ok(md) if md.is_file() => Some(Permissions::from_mode(
                md.permissions().mode() & !SET_ID_BITS,
            )),
            Ok(md) if md.is_dir() => return Err(WriteError::Before(PathError::IsADirectory)),
            Ok(md) if md.file_type().is_symlink() => {
                return Err(WriteError::Before(PathError::Changed))
            }
            Ok(_) => return Err(WriteError::Before(PathError::NotAFile)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(WriteError::Before(e.into())),
        };
        // Created with the bits it will have (a new file's usual 0644), never wider than the
        // file it replaces while the content is written into it.
        let mode = permissions.as_ref().map_or(0o644, |p| p.mode() & 0o777);
        // ENOENT creating a plain name in a directory held open means the directory itself was
        // removed since it was opened (another write's cleanup of a directory it made, an
        // operator's rm): the tree changed, so the write starts again and makes it anew.
        let (tmp_name, file) = create_temp(dir, mode).map_err(|e| match e {
            PathError::Io(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                WriteError::Before(PathError::Changed)
            }
            e => WriteError::Before(e),
        })?;
        let ours = file.metadata().map(|md| Identity::of(&md).file());
        let staged = ours.and_then(|ours| stage(file, content, permissions).map(|()| ours));
        let ours = match staged {
            Ok(ours) => ours,
            Err(e) => {
                let _ = dir.remove_file(&tmp_name);
                return Err(WriteError::Before(e.into()));
            }
        };
        match read {
            Some(read) => install_over_read(dir, &tmp_name, target, read, ours)?,
            None => {
                #[cfg(test)]
                tests::BEFORE_RENAME.with_borrow_mut(|hook| hook.take().map(|h| h()));
                if let Err(e) = dir.rename(&tmp_name, dir, &target.name) {
                    let _ = dir.remove_file(&tmp_name);
                    // The temporary file made in the directory held open is gone: the
                    // directory was removed since, and the write starts again, as above.
                    if e.raw_os_error() == Some(libc::ENOENT) {
                        return Err(WriteError::Before(PathError::Changed));
                    }
                    return Err(WriteError::Before(e.into()));
                }
            }
        }
        // The new content is in place; only its durability is now at stake.
        sync_dir(dir).map_err(WriteError::After)?;
        sweep_once(dir);
        Ok(())
    }
}

/// An edit's install: `tmp_name` (the staged file, `ours` its device and inode) takes the
/// target's name only if the name still holds the file `read`; otherwise `Modified`, with the
/// name holding what it held and no temporary file left, or `Stranded`: another writer's save
/// that could not be given its name back (the name was removed and taken again meanwhile, an
/// I/O error) is left at `tmp_name`, never removed; or `Displaced`: that save was moved or
/// removed from `tmp_name` by something else before it was put back, and the edit holds the
/// name.
///
/// A check and then a rename leave a window between them in which another writer's save can
/// land and be overwritten. So the staged file is *exchanged* with the name
/// (`renameat2(RENAME_EXCHANGE)`, one atomic step), and what was swapped out, now at
/// `tmp_name`, is looked at: the file read is removed; anything else is exchanged back. A
/// reader may see the edit's content at the name for that instant; no save is lost. Where the
/// filesystem cannot exchange (`EINVAL`, `ENOSYS`), the check before a plain rename is all there
/// is: the window is narrowed, not closed.
fn install_over_read(
    dir: &Dir,
    tmp_name: &OsStr,
    target: &Target,
    read: Identity,
    ours: (u64, u64),
) -> Result<(), WriteError> {
    let name = target.name.as_os_str();
    let refuse = |e: PathError| {
        let _ = dir.remove_file(tmp_name);
        Err(WriteError::Before(e))
    };
    // Checked first all the same: a change seen here costs no exchange, and this is all the
    // check there is where the exchange is refused. ctime is compared here only: the exchange
    // sets it.
    let now = dir.symlink_metadata(name);
    if !matches!(&now, Ok(md) if md.is_file() && Identity::of(md) == read) {
        return refuse(PathError::Modified);
    }
    #[cfg(test)]
    tests::BEFORE_INSTALL.with_borrow_mut(|hook| hook.take().map(|h| h()));
    match exchange(dir, tmp_name, name) {
        Ok(()) => {}
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) => {
            if let Err(e) = dir.rename(tmp_name, dir, name) {
                return refuse(e.into());
            }
            return Ok(());
        }
        // The name holds nothing now (the file read was removed), or the staged file was moved
        // away: either way the exchange did nothing.
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return refuse(PathError::Modified),
        Err(e) => return refuse(e.into()),
    }
    #[cfg(test)]
    tests::AFTER_EXCHANGE.with_borrow_mut(|hook| hook.take().map(|h| h()));
    let out = dir.symlink_metadata(tmp_name);
    if matches!(&out, Ok(md) if md.is_file() && Identity::of(md).moved_from(&read)) {
        // The file read, swapped out: the edit is in place over it.
        let _ = dir.remove_file(tmp_name);
        return Ok(());
    }
    // Another writer's save was there: it gets its name back. `tmp_name` is removed only
    // once it is seen to hold a file that may go (the edit; a save a newer one replaced),
    // never on the assumption that the exchange back happened.
    let theirs = out.ok().map(|md| Identity::of(&md).file());
    let holds = |file: Option<(u64, u64)>| {
        file.is_some()
            && dir
                .symlink_metadata(tmp_name)
                .is_ok_and(|md| Some(Identity::of(&md).file()) == file)
    };
    // `Ok(true)`: `tmp_name` holds a file that may go; `Ok(false)`: it holds nothing now.
    let back = match exchange_back(dir, tmp_name, name) {
        Ok(()) if holds(Some(ours)) => Ok(true),
        Ok(()) => {
            // The name was replaced again while it held the edit: that save is newer than
            // the one swapped out, and keeps the name; the older one goes, as that save's
            // rename would have removed it had the edit not been there.
            match exchange(dir, tmp_name, name) {
                Ok(()) if holds(theirs) => Ok(true),
                Ok(()) => Err(io::Error::other(
                    "the name was replaced again while the saves were put back",
                )),
                Err(e) => Err(e),
            }
        }
        // The name was removed or renamed away while it held the edit: the save takes the
        // name back, unless something else has taken it since.
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
            rename_noreplace(dir, tmp_name, name).map(|()| false)
        }
        Err(e) => Err(e),
    };
    // "Nothing was changed" (`Modified`) is answered only where the name is not seen to hold
    // the edit: a put-back can fail with the edit still there, and something else can move
    // files between these steps. `None`: the name could not be looked at.
    let edit_at_name = || match dir.symlink_metadata(name) {
        Ok(md) => Some(Identity::of(&md).file() == ours),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Some(false),
        Err(_) => None,
    };
    let displaced = || {
        Err(WriteError::Displaced {
            was_at: target.sibling(tmp_name),
        })
    };
    let outcome = match back {
        Ok(removable) => {
            if removable {
                let _ = dir.remove_file(tmp_name);
            }
            // The save was put back: the edit is off the name unless something else moved
            // it there again.
            if edit_at_name() == Some(true) {
                displaced()
            } else {
                Err(WriteError::Before(PathError::Modified))
            }
        }
        // Moved or removed from the temporary name by something else meanwhile, before it
        // could be put back: the put-back failed, so the edit holds the name unless it is
        // seen not to.
        Err(_) if is_absent(dir, tmp_name) => {
            if edit_at_name() == Some(false) {
                Err(WriteError::Before(PathError::Modified))
            } else {
                displaced()
            }
        }
        Err(cause) => Err(WriteError::Stranded {
            kept: target.sibling(tmp_name),
            cause,
        }),
    };
    let _ = sync_dir(dir);
    outcome
}

/// Whether `name` is seen to name nothing in `dir`: any other failure to look leaves it
/// possibly there.
fn is_absent(dir: &Dir, name: &OsStr) -> bool {
    matches!(dir.symlink_metadata(name), Err(e) if e.kind() == io::ErrorKind::NotFound)
}

/// The exchange that gives a swapped-out save its name back ([`exchange`]; a test can make it
/// fail).
fn exchange_back(dir: &Dir, tmp_name: &OsStr, name: &OsStr) -> io::Result<()> {
    #[cfg(test)]
    if let Some(errno) = tests::EXCHANGE_BACK_FAILS.take() {
        return Err(io::Error::from_raw_os_error(errno));
    }
    exchange(dir, tmp_name, name)
}

/// `renameat2(RENAME_NOREPLACE)` of `from` to `to` in `dir`: `EEXIST` when `to` names anything.
fn rename_noreplace(dir: &Dir, from: &OsStr, to: &OsStr) -> io::Result<()> {
    let from = std::ffi::CString::new(from.as_bytes())?;
    let to = std::ffi::CString::new(to.as_bytes())?;
    let fd = dir.as_fd().as_raw_fd();
    // SAFETY: `fd` is a directory descriptor `dir` holds open for the call; `from` and `to`
    // are NUL-terminated names that outlive it.
    let r = unsafe { libc::renameat2(fd, from.as_ptr(), fd, to.as_ptr(), libc::RENAME_NOREPLACE) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `renameat2(RENAME_EXCHANGE)` of two names in `dir`: in one step each names the other's file.
fn exchange(dir: &Dir, a: &OsStr, b: &OsStr) -> io::Result<()> {
    #[cfg(test)]
    if tests::NO_EXCHANGE.get() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let a = std::ffi::CString::new(a.as_bytes())?;
    let b = std::ffi::CString::new(b.as_bytes())?;
    let fd = dir.as_fd().as_raw_fd();
    // SAFETY: `fd` is a directory descriptor `dir` holds open for the call; `a` and `b` are
    // NUL-terminated names that outlive it.
    let r = unsafe { libc::renameat2(fd, a.as_ptr(), fd, b.as_ptr(), libc::RENAME_EXCHANGE) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// What a read accepts.
#[derive(Debug, Clone, Copy)]
pub struct ReadRules {
    /// Largest file, in bytes.
    pub limit: u64,
    /// Whether a file with more than one hard link may be read. A hard link is
    /// not a path: no resolver can tell that it names a file outside the
    /// worktree, so the link count is the only sign, checked on the open file.
    pub hard_links: bool,
}

/// How a write failed.
#[derive(Debug)]
pub enum WriteError {
    /// Nothing changed.
    Before(PathError),
    /// The target was replaced but its directory could not be synced.
    After(PathError),
    /// An edit's exchange swapped another writer's save out of the name, and it could not be
    /// given the name back (`cause`): it is kept at `kept`, a temporary name in the same
    /// directory (worktree-relative), for the operator to move back.
    Stranded { kept: String, cause: io::Error },
    /// An edit's exchange swapped another writer's save out of the name to `was_at` (a
    /// temporary name in the same directory, worktree-relative), and something else moved or
    /// removed it from there before it was given the name back: the edit holds the name.
    Displaced { was_at: String },
}

/// Run `op` again when the tree changed between check and use.
pub fn retry<T>(mut op: impl FnMut() -> Result<T, PathError>) -> Result<T, PathError> {
    let mut last = PathError::Changed;
    for _ in 0..ATTEMPTS {
        match op() {
            Err(PathError::Changed) => last = PathError::Changed,
            other => return other,
        }
    }
    Err(last)
}

/// A no-follow open failing because a component turned into a symlink (or
/// stopped being a directory) means the tree changed since the check.
fn changed(e: io::Error) -> PathError {
    match e.raw_os_error() {
        Some(libc::ELOOP) | Some(libc::ENOTDIR) | Some(libc::ENOENT) => PathError::Changed,
        _ => e.into(),
    }
}

/// Read `name` in `dir` (no symlink following, no blocking on FIFOs); `None` when the file has
/// at most `skip_at_most` bytes.
fn read_in(
    dir: &Dir,
    name: &OsStr,
    rules: ReadRules,
    skip_at_most: Option<u64>,
) -> Result<Option<Vec<u8>>, PathError> {
    read_opened(dir, name, rules, skip_at_most).map(|read| read.content)
}

/// What [`read_opened`] read, and the file's [`Identity`] before and after.
struct Opened {
    content: Option<Vec<u8>>,
    before: Identity,
    after: Identity,
}

/// [`read_in`], with the opened file's identity.
fn read_opened(
    dir: &Dir,
    name: &OsStr,
    rules: ReadRules,
    skip_at_most: Option<u64>,
) -> Result<Opened, PathError> {
    let limit = rules.limit;
    let mut options = OpenOptions::new();
    options
        .read(true)
        .follow(FollowSymlinks::No)
        // A FIFO swapped in after the check must not block the handler.
        .custom_flags(libc::O_NONBLOCK);
    let file = dir.open_with(name, &options).map_err(changed)?;
    let md = file.metadata()?;
    if md.is_dir() {
        return Err(PathError::IsADirectory);
    }
    if !md.is_file() {
        return Err(PathError::NotAFile);
    }
    // Checked on the opened file (fstat), so a link made after resolution is seen too.
    if md.nlink() > 1 && !rules.hard_links {
        return Err(PathError::HardLinked(md.nlink()));
    }
    if md.len() > limit {
        return Err(PathError::TooLarge(md.len()));
    }
    let before = Identity::of(&md);
    if skip_at_most.is_some_and(|small| md.len() <= small) {
        return Ok(Opened {
            content: None,
            before,
            after: before,
        });
    }
    // Read at most limit + 1 bytes: the file may grow after the stat.
    let mut content = Vec::with_capacity(usize::try_from(md.len()).unwrap_or(0));
    (&file)
        .take(limit.saturating_add(1))
        .read_to_end(&mut content)?;
    let len = content.len() as u64;
    if len > limit {
        return Err(PathError::TooLarge(len));
    }
    let after = Identity::of(&file.metadata()?);
    Ok(Opened {
        content: Some(content),
        before,
        after,
    })
}

fn stage(mut file: File, content: &[u8], permissions: Option<Permissions>) -> io::Result<()> {
    file.write_all(content)?;
    if let Some(p) = permissions {
        file.set_permissions(p)?;
    }
    file.sync_all()
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Temporary files are `.worldd-tmp-<pid>-<counter>-<nanos>`. The sweep removes names of this
/// shape, so the handler refuses to write or edit a file named so.
pub const TEMP_PREFIX: &str = ".worldd-tmp-";

/// Create a fresh temporary file in `dir`, with permission bits `mode` (less the umask) from
/// its creation on. The name is short (independent of
/// the target's, which may already be at NAME_MAX) and unique per process,
/// call and moment; `create_new` (O_EXCL) never follows or reuses a name.
fn create_temp(dir: &Dir, mode: u32) -> Result<(OsString, File), PathError> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true).mode(mode);
    let mut last = None;
    for _ in 0..16 {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = OsString::from(format!("{TEMP_PREFIX}{}-{n}-{nanos:x}", std::process::id()));
        match dir.open_with(&name, &options) {
            Ok(file) => return Ok((name, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e.into()),
        }
    }
    Err(PathError::Io(last.unwrap_or_else(|| {
        io::Error::from_raw_os_error(libc::EEXIST)
    })))
}

/// Directories this process has swept, by (device, inode). What a sweep
/// removes was left by processes that are gone, and this one never leaves an
/// orphan it would sweep (its own are skipped), so one sweep per directory per
/// process finds them all. Bounded: past [`SWEPT_MAX`] it starts over, which
/// costs only sweeps again.
static SWEPT: Mutex<Option<HashSet<(u64, u64)>>> = Mutex::new(None);
const SWEPT_MAX: usize = 4096;

/// [`sweep_orphans`] the first time this process writes into `dir`.
fn sweep_once(dir: &Dir) {
    let Ok(md) = dir.dir_metadata() else {
        return;
    };
    let first = {
        let mut swept = SWEPT.lock().unwrap_or_else(PoisonError::into_inner);
        first_sweep(
            swept.get_or_insert_with(HashSet::new),
            (md.dev(), md.ino()),
            SWEPT_MAX,
        )
    };
    if first {
        sweep_orphans(dir);
    }
}

/// Note `dir` in `swept`; `true` when it was not there. Past `max` entries
/// the set starts over.
fn first_sweep(swept: &mut HashSet<(u64, u64)>, dir: (u64, u64), max: usize) -> bool {
    if swept.len() >= max {
        swept.clear();
    }
    swept.insert(dir)
}

/// Remove temporary files that a killed process left in `dir` (best effort).
/// Only names of our own pattern whose creating process no longer exists
/// are touched, so an in-flight write of a live process is never disturbed.
fn sweep_orphans(dir: &Dir) {
    let Ok(entries) = dir.entries() else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(TEMP_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        if pid <= 0 || pid as u32 == std::process::id() {
            continue;
        }
        // SAFETY: signal 0 only checks whether the process exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0
            || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH);
        if !alive {
            let _ = dir.remove_file(&name);
        }
    }
}

/// fsync a directory, making renames and creations in it durable.
fn sync_dir(dir: &Dir) -> Result<(), PathError> {
    // cap-std holds directories as O_PATH handles, which cannot be fsynced;
    // open the directory itself for reading.
    let mut options = OpenOptions::new();
    options.read(true).maybe_dir(true);
    dir.open_with(".", &options)?.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    #[test]
    fn errno_text_is_go_style() {
        assert_eq!(
            errno_text(&io::Error::from_raw_os_error(libc::ENOENT)),
            "no such file or directory"
        );
        assert_eq!(
            errno_text(&io::Error::from_raw_os_error(libc::ENAMETOOLONG)),
            "file name too long"
        );
        assert_eq!(
            errno_text(&io::Error::other("Custom thing")),
            "custom thing"
        );
    }

    #[test]
    fn canonical_joins_parent_missing_and_name() {
        let t = Target {
            parent: vec!["a".into()],
            missing: vec!["b".into(), "c".into()],
            name: "f.txt".into(),
            size: None,
        };
        assert_eq!(t.canonical(), "a/b/c/f.txt");
    }

    #[test]
    fn resolve_reports_canonical_targets() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("real/sub")).unwrap();
        std::fs::write(tmp.path().join("real/sub/f"), "x").unwrap();
        std::os::unix::fs::symlink("real/sub", tmp.path().join("link")).unwrap();
        let sandbox = Sandbox::open(tmp.path()).unwrap();
        let t = sandbox.resolve("link/f", false).unwrap();
        assert_eq!(t.canonical(), "real/sub/f");
        assert!(t.exists());
        // POSIX: `link/..` is the parent of link's target, not the root.
        let t = sandbox.resolve("link/../sub/f", false).unwrap();
        assert_eq!(t.canonical(), "real/sub/f");
        let t = sandbox.resolve("new/dirs/f", true).unwrap();
        assert_eq!(t.missing, vec![OsString::from("new"), "dirs".into()]);
        assert!(matches!(
            sandbox.resolve("new/dirs/f", false),
            Err(PathError::Io(_))
        ));
        assert!(matches!(
            sandbox.resolve("link/../../..", false),
            Err(PathError::Escape)
        ));
        assert!(matches!(
            sandbox.resolve("real", false),
            Err(PathError::IsADirectory)
        ));
    }

    /// A directory is listed for a dead process's temporary files on this
    /// process's first write into it, not on every write (a write into a
    /// directory of many entries would otherwise list them all each time).
    #[test]
    fn a_directory_of_many_entries_is_listed_for_orphans_once_not_on_every_write() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let pid = gone.id();
        gone.wait().unwrap();
        let orphan = |n: u32| root.join(format!("{TEMP_PREFIX}{pid}-{n}-0"));
        std::fs::write(orphan(1), "left by a killed writer").unwrap();
        let sandbox = Sandbox::open(root).unwrap();
        let target = sandbox.resolve("f.txt", true).unwrap();
        sandbox.write(&target, b"one").unwrap();
        assert!(!orphan(1).exists(), "the first write swept it");

        std::fs::write(orphan(2), "left later").unwrap();
        let target = sandbox.resolve("f.txt", true).unwrap();
        sandbox.write(&target, b"two").unwrap();
        assert!(
            orphan(2).exists(),
            "the second write listed the directory again"
        );
        assert_eq!(std::fs::read_to_string(root.join("f.txt")).unwrap(), "two");
    }

    /// The set of swept directories is bounded: past its size it starts over,
    /// so a directory may be swept again, never the set grow without end.
    #[test]
    fn the_swept_directories_start_over_past_their_bound() {
        let mut swept = HashSet::new();
        assert!(first_sweep(&mut swept, (1, 1), 2));
        assert!(!first_sweep(&mut swept, (1, 1), 2), "swept once");
        assert!(first_sweep(&mut swept, (1, 2), 2));
        assert!(first_sweep(&mut swept, (1, 3), 2), "the bound cleared it");
        assert_eq!(swept.len(), 1);
        assert!(
            first_sweep(&mut swept, (1, 1), 2),
            "swept again after the clear"
        );
    }

    /// A file no larger than the skip size when its path is resolved is not opened: the checks
    /// made on an opened file (here its hard links) are left to the read that follows, which
    /// still makes them. A larger file is opened and checked as before.
    #[test]
    fn read_if_larger_does_not_open_a_file_small_at_resolution() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::write(root.join("small"), "12345").unwrap();
        std::fs::hard_link(root.join("small"), root.join("small-link")).unwrap();
        std::fs::write(root.join("large"), "x".repeat(64)).unwrap();
        std::fs::hard_link(root.join("large"), root.join("large-link")).unwrap();
        std::fs::write(root.join("plain"), "y".repeat(64)).unwrap();
        let sandbox = Sandbox::open(root).unwrap();
        let rules = ReadRules {
            limit: 1024,
            hard_links: false,
        };
        let target = sandbox.resolve("small-link", false).unwrap();
        assert_eq!(target.size, Some(5));
        assert!(matches!(
            sandbox.read_if_larger("small-link", rules, 5, &|_| None),
            Ok(None)
        ));
        assert!(matches!(
            sandbox.read("small-link", rules, &|_| None),
            Err(PathError::HardLinked(2))
        ));
        assert!(matches!(
            sandbox.read_if_larger("large-link", rules, 5, &|_| None),
            Err(PathError::HardLinked(2))
        ));
        assert_eq!(
            sandbox
                .read_if_larger("plain", rules, 5, &|_| None)
                .unwrap(),
            Some("y".repeat(64).into_bytes())
        );
        assert_eq!(sandbox.resolve("missing", true).unwrap().size, None);
    }

    /// The window between resolving a path and using it, opened deterministically: the tree
    /// is changed by hand after `resolve` and before `read_target` / `write`.
    #[test]
    fn a_directory_swapped_for_a_symlink_after_the_check_is_changed_and_nothing_escapes() {
        let tmp = tempfile::tempdir().unwrap();
        let (root, outside) = (tmp.path().join("wt"), tmp.path().join("outside"));
        std::fs::create_dir_all(root.join("d")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(root.join("d/f"), "inside").unwrap();
        std::fs::write(outside.join("f"), "secret").unwrap();
        let sandbox = Sandbox::open(&root).unwrap();
        let rules = ReadRules {
            limit: 1024,
            hard_links: false,
        };
        let swap = || {
            std::fs::rename(root.join("d"), root.join("d.old")).unwrap();
            std::os::unix::fs::symlink(&outside, root.join("d")).unwrap();
        };
        let read = sandbox.resolve("d/f", false).unwrap();
        let write = sandbox.resolve("d/f", true).unwrap();
        swap();
        assert!(matches!(
            sandbox.read_target(&read, rules),
            Err(PathError::Changed)
        ));
        assert!(matches!(
            sandbox.write(&write, b"overwritten"),
            Err(WriteError::Before(PathError::Changed))
        ));
        assert_eq!(
            std::fs::read_to_string(outside.join("f")).unwrap(),
            "secret"
        );
        // Resolved afresh, the path now leads outside and is refused as such.
        assert!(matches!(
            sandbox.read("d/f", rules, &|_| None),
            Err(PathError::Escape)
        ));
    }

    /// An edit reads, replaces in memory and renames a new file over the name: a change made
    /// to the file in between (an operator's editor, another episode sharing the tree) was
    /// overwritten by the edit built on the older content. The write is installed only over
    /// the file that was read; anything else there is `Modified`, nothing changed.
    #[test]
    fn an_edit_is_not_installed_over_a_file_changed_after_it_was_read() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let sandbox = Sandbox::open(root).unwrap();
        let rules = ReadRules {
            limit: 1 << 20,
            hard_links: false,
        };
        let changes: [(&str, &dyn Fn()); 4] = [
            ("written in place, another size", &|| {
                std::fs::write(root.join("f.txt"), "theirs, longer").unwrap()
            }),
            ("replaced by a rename", &|| {
                std::fs::write(root.join("other"), "theirs").unwrap();
                std::fs::rename(root.join("other"), root.join("f.txt")).unwrap();
            }),
            ("removed", &|| {
                std::fs::remove_file(root.join("f.txt")).unwrap()
            }),
            ("touched", &|| {
                let f = std::fs::File::options()
                    .write(true)
                    .open(root.join("f.txt"))
                    .unwrap();
                f.set_modified(UNIX_EPOCH).unwrap();
            }),
        ];
        for (how, change) in changes {
            std::fs::write(root.join("f.txt"), "original").unwrap();
            let target = sandbox.resolve("f.txt", false).unwrap();
            let (bytes, read) = sandbox.read_target_for_edit(&target, rules).unwrap();
            assert_eq!(bytes, b"original");
            change();
            let before = std::fs::read(root.join("f.txt")).ok();
            assert!(
                matches!(
                    sandbox.write_over(&target, b"edited", Some(read)),
                    Err(WriteError::Before(PathError::Modified))
                ),
                "{how}"
            );
            assert_eq!(std::fs::read(root.join("f.txt")).ok(), before, "{how}");
            let names: Vec<_> = std::fs::read_dir(root)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert!(
                names
                    .iter()
                    .all(|n| !n.to_string_lossy().starts_with(TEMP_PREFIX)),
                "{how}: {names:?}"
            );
        }
        // Unchanged since the read: installed.
        std::fs::write(root.join("f.txt"), "original").unwrap();
        let target = sandbox.resolve("f.txt", false).unwrap();
        let (_, read) = sandbox.read_target_for_edit(&target, rules).unwrap();
        sandbox.write_over(&target, b"edited", Some(read)).unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("f.txt")).unwrap(),
            "edited"
        );
    }

    /// What an edit's read accepts in these tests.
    fn edit_rules() -> ReadRules {
        ReadRules {
            limit: 1 << 20,
            hard_links: false,
        }
    }

    /// The files in `root` named like temporary files.
    fn temporaries(root: &Path) -> Vec<OsString> {
        std::fs::read_dir(root)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.to_string_lossy().starts_with(TEMP_PREFIX))
            .collect()
    }

    /// A save renamed over the name (as editors save) by another writer just after the edit's
    /// check of the name and before its rename was overwritten by the edit built on the older
    /// content, which answered `replacements:1`. The edit now exchanges its file with the name
    /// and, finding the save there, exchanges it back: `Modified`, the save kept.
    #[test]
    fn a_save_renamed_over_the_name_between_an_edits_check_and_its_install_is_not_overwritten() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_owned();
        let sandbox = Sandbox::open(&root).unwrap();
        let rules = ReadRules {
            limit: 1 << 20,
            hard_links: false,
        };
        std::fs::write(root.join("f.txt"), "original").unwrap();
        let target = sandbox.resolve("f.txt", false).unwrap();
        let (_, read) = sandbox.read_target_for_edit(&target, rules).unwrap();
        let at = root.clone();
        BEFORE_INSTALL.set(Some(Box::new(move || {
            std::fs::write(at.join("save"), "theirs").unwrap();
            std::fs::rename(at.join("save"), at.join("f.txt")).unwrap();
        })));
        let out = sandbox.write_over(&target, b"edited", Some(read));
        assert!(BEFORE_INSTALL.with_borrow(Option::is_none), "the hook ran");
        assert!(
            matches!(out, Err(WriteError::Before(PathError::Modified))),
            "{out:?}"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("f.txt")).unwrap(),
            "theirs"
        );
        assert_eq!(temporaries(&root), Vec::<OsString>::new());
    }

    /// The same, with a second save renamed over the name while it held the edit, between the
    /// exchange and the exchange back: that save is the newest and keeps the name (the one
    /// the exchange swapped out is not put back over it).
    #[test]
    fn a_save_renamed_over_the_name_while_an_edit_is_withdrawn_keeps_the_name() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_owned();
        let sandbox = Sandbox::open(&root).unwrap();
        let rules = ReadRules {
            limit: 1 << 20,
            hard_links: false,
        };
        std::fs::write(root.join("f.txt"), "original").unwrap();
        let target = sandbox.resolve("f.txt", false).unwrap();
        let (_, read) = sandbox.read_target_for_edit(&target, rules).unwrap();
        let save = |at: PathBuf, text: &'static str| {
            move || {
                std::fs::write(at.join("save"), text).unwrap();
                std::fs::rename(at.join("save"), at.join("f.txt")).unwrap();
            }
        };
        BEFORE_INSTALL.set(Some(Box::new(save(root.clone(), "first save"))));
        AFTER_EXCHANGE.set(Some(Box::new(save(root.clone(), "second save"))));
        let out = sandbox.write_over(&target, b"edited", Some(read));
        assert!(AFTER_EXCHANGE.with_borrow(Option::is_none), "the hook ran");
        assert!(
            matches!(out, Err(WriteError::Before(PathError::Modified))),
            "{out:?}"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("f.txt")).unwrap(),
            "second save"
        );
        assert_eq!(temporaries(&root), Vec::<OsString>::new());
    }

    /// An edit read `f.txt`; a save `X` is renamed over it before the exchange, which swaps
    /// `X` out to the temporary name; then the name (holding the edit) is removed, so the
    /// exchange back fails with ENOENT. The temporary name was removed all the same, unlinking
    /// `X`, and the answer said nothing was changed. `X` now takes the name back.
    #[test]
    fn a_save_swapped_out_gets_the_name_back_when_the_name_is_removed_before_the_exchange_back() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_owned();
        let sandbox = Sandbox::open(&root).unwrap();
        std::fs::write(root.join("f.txt"), "original").unwrap();
        let target = sandbox.resolve("f.txt", false).unwrap();
        let (_, read) = sandbox.read_target_for_edit(&target, edit_rules()).unwrap();
        let at = root.clone();
        BEFORE_INSTALL.set(Some(Box::new(move || {
            std::fs::write(at.join("save"), "theirs").unwrap();
            std::fs::rename(at.join("save"), at.join("f.txt")).unwrap();
        })));
        let at = root.clone();
        AFTER_EXCHANGE.set(Some(Box::new(move || {
            assert_eq!(std::fs::read_to_string(at.join("f.txt")).unwrap(), "edited");
            std::fs::remove_file(at.join("f.txt")).unwrap();
        })));
        let out = sandbox.write_over(&target, b"edited", Some(read));
        assert!(AFTER_EXCHANGE.with_borrow(Option::is_none), "the hook ran");
        assert!(
            matches!(out, Err(WriteError::Before(PathError::Modified))),
            "{out:?}"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("f.txt")).unwrap(),
            "theirs"
        );
        assert_eq!(temporaries(&root), Vec::<OsString>::new());
    }

    /// The same save swapped out, and the exchange back failing (an I/O error, or ENOENT with
    /// the name taken again, so that the save cannot take it without replacing something):
    /// the save stays at the temporary name, which the answer gives, and nothing removes it.
    #[test]
    fn a_save_that_cannot_be_given_its_name_back_is_kept_and_named() {
        // ENOENT with the edit still at the name: the put-back finds the name taken (EEXIST),
        // as when it was removed and saved to again just before.
        for (errno, cause_errno) in [(libc::EIO, libc::EIO), (libc::ENOENT, libc::EEXIST)] {
            let tmp = tempfile::tempdir().unwrap();
            let root = tmp.path().to_owned();
            std::fs::create_dir(root.join("d")).unwrap();
            let sandbox = Sandbox::open(&root).unwrap();
            std::fs::write(root.join("d/f.txt"), "original").unwrap();
            let target = sandbox.resolve("d/f.txt", false).unwrap();
            let (_, read) = sandbox.read_target_for_edit(&target, edit_rules()).unwrap();
            let at = root.clone();
            BEFORE_INSTALL.set(Some(Box::new(move || {
                std::fs::write(at.join("save"), "theirs").unwrap();
                std::fs::rename(at.join("save"), at.join("d/f.txt")).unwrap();
            })));
            EXCHANGE_BACK_FAILS.set(Some(errno));
            let out = sandbox.write_over(&target, b"edited", Some(read));
            assert_eq!(
                EXCHANGE_BACK_FAILS.get(),
                None,
                "the exchange back was tried"
            );
            let Err(WriteError::Stranded { kept, cause }) = out else {
                panic!("{errno}: {out:?}")
            };
            assert_eq!(cause.raw_os_error(), Some(cause_errno));
            let left = temporaries(&root.join("d"));
            assert_eq!(left.len(), 1, "{left:?}");
            assert_eq!(kept, format!("d/{}", left[0].to_string_lossy()));
            assert_eq!(std::fs::read_to_string(root.join(&kept)).unwrap(), "theirs");
            // The exchange back never happened: the edit holds the name.
            assert_eq!(
                std::fs::read_to_string(root.join("d/f.txt")).unwrap(),
                "edited"
            );
        }
    }

    /// The handler's answer to a stranded save: `failed`, naming where the save is, logged.
    #[test]
    fn an_edit_that_strands_a_save_fails_and_says_where_the_save_is() {
        use handler_kit::serde_json::json;
        use handler_kit::{EffectHandler, Host, HostServices, LogLevel, Outcome, Plugin};
        struct Lines(Mutex<Vec<String>>);
        impl HostServices for Lines {
            fn log(&self, _level: LogLevel, message: &str) {
                self.0.lock().unwrap().push(message.to_owned());
            }
        }
        let lines = std::sync::Arc::new(Lines(Mutex::default()));
        let handler =
            crate::WorkspacePlugin::new(json!({}), Host::from_services(lines.clone())).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_owned();
        std::fs::write(root.join("f.txt"), "one two").unwrap();
        let at = root.clone();
        BEFORE_INSTALL.set(Some(Box::new(move || {
            std::fs::write(at.join("save"), "theirs").unwrap();
            std::fs::rename(at.join("save"), at.join("f.txt")).unwrap();
        })));
        EXCHANGE_BACK_FAILS.set(Some(libc::EIO));
        let out = handler.execute(handler_kit::Request {
            invocation_id: "inv-test".into(),
            episode: "ep".into(),
            worktree: Some(root.to_string_lossy().into_owned()),
            effect: "Workspace.Write".into(),
            scope: "worktree".into(),
            cost: 1,
            payload: json!({"op": "edit", "path": "f.txt", "old_text": "one", "new_text": "1"}),
            deadline_ms: 10_000,
        });
        let left = temporaries(&root);
        assert_eq!(left.len(), 1, "{left:?}");
        let kept = left[0].to_string_lossy();
        let message = format!(
            "edit f.txt: something else saved the file while the edit was being installed, and that save could not be given its name back (input/output error); it is kept at {kept}: move it back to f.txt by hand before the daemon restarts (the workspace then removes files named so)"
        );
        assert!(
            matches!(&out, Outcome::Failed { message: m } if *m == message),
            "{out:?}"
        );
        assert_eq!(*lines.0.lock().unwrap(), [format!("workspace: {message}")]);
        assert_eq!(
            std::fs::read_to_string(root.join(&*kept)).unwrap(),
            "theirs"
        );
    }

    /// Lands a save `theirs` at `root/name` in the window before an edit's exchange, and
    /// runs `then` just after the exchange (the save swapped out to the temporary name, given
    /// to `then`; the edit at the name).
    fn save_lands_then(root: &Path, name: &str, then: impl FnOnce(&Path, &OsStr) + 'static) {
        let (at, name) = (root.to_owned(), name.to_owned());
        let (at2, name2) = (at.clone(), name.clone());
        BEFORE_INSTALL.set(Some(Box::new(move || {
            std::fs::write(at.join("save"), "theirs").unwrap();
            std::fs::rename(at.join("save"), at.join(&name)).unwrap();
        })));
        AFTER_EXCHANGE.set(Some(Box::new(move || {
            assert_eq!(std::fs::read_to_string(at2.join(&name2)).unwrap(), "edited");
            let tmp = temporaries(&at2);
            assert_eq!(tmp.len(), 1, "{tmp:?}");
            assert_eq!(
                std::fs::read_to_string(at2.join(&tmp[0])).unwrap(),
                "theirs"
            );
            then(&at2, &tmp[0]);
        })));
    }

    /// A save swapped out to the temporary name is moved or removed from there by something
    /// else before the exchange back, which fails (ENOENT), as does the rename that would give
    /// it its name back: the answer was `Modified`, "nothing was changed", with the edit in
    /// place at the name. It is `Displaced` now, naming where the save was set aside.
    #[test]
    fn a_save_moved_away_from_the_temporary_name_leaves_the_edit_in_place_and_says_so() {
        for moved in [true, false] {
            let tmp = tempfile::tempdir().unwrap();
            let root = tmp.path().to_owned();
            let sandbox = Sandbox::open(&root).unwrap();
            std::fs::write(root.join("f.txt"), "original").unwrap();
            let target = sandbox.resolve("f.txt", false).unwrap();
            let (_, read) = sandbox.read_target_for_edit(&target, edit_rules()).unwrap();
            let set_aside = Rc::new(RefCell::new(OsString::new()));
            let seen = set_aside.clone();
            save_lands_then(&root, "f.txt", move |at, tmp_name| {
                *seen.borrow_mut() = tmp_name.to_owned();
                if moved {
                    std::fs::rename(at.join(tmp_name), at.join("elsewhere")).unwrap();
                } else {
                    std::fs::remove_file(at.join(tmp_name)).unwrap();
                }
            });
            let out = sandbox.write_over(&target, b"edited", Some(read));
            assert!(AFTER_EXCHANGE.with_borrow(Option::is_none), "the hook ran");
            let Err(WriteError::Displaced { was_at }) = out else {
                panic!("moved {moved}: {out:?}")
            };
            assert_eq!(was_at, set_aside.borrow().to_string_lossy());
            assert_eq!(
                std::fs::read_to_string(root.join("f.txt")).unwrap(),
                "edited"
            );
            assert_eq!(temporaries(&root), Vec::<OsString>::new());
            if moved {
                assert_eq!(
                    std::fs::read_to_string(root.join("elsewhere")).unwrap(),
                    "theirs"
                );
            }
        }
    }

    /// The save moved away as above, and the edit too (removed, or replaced by a third save):
    /// the name does not hold the edit, so `Modified` is true, and is the answer.
    #[test]
    fn a_save_moved_away_with_the_edit_gone_from_the_name_too_is_modified() {
        for replaced in [false, true] {
            let tmp = tempfile::tempdir().unwrap();
            let root = tmp.path().to_owned();
            let sandbox = Sandbox::open(&root).unwrap();
            std::fs::write(root.join("f.txt"), "original").unwrap();
            let target = sandbox.resolve("f.txt", false).unwrap();
            let (_, read) = sandbox.read_target_for_edit(&target, edit_rules()).unwrap();
            save_lands_then(&root, "f.txt", move |at, tmp_name| {
                std::fs::remove_file(at.join(tmp_name)).unwrap();
                if replaced {
                    std::fs::write(at.join("third"), "third").unwrap();
                    std::fs::rename(at.join("third"), at.join("f.txt")).unwrap();
                } else {
                    std::fs::remove_file(at.join("f.txt")).unwrap();
                }
            });
            let out = sandbox.write_over(&target, b"edited", Some(read));
            assert!(AFTER_EXCHANGE.with_borrow(Option::is_none), "the hook ran");
            assert!(
                matches!(out, Err(WriteError::Before(PathError::Modified))),
                "replaced {replaced}: {out:?}"
            );
            let now = std::fs::read_to_string(root.join("f.txt")).ok();
            assert_eq!(now.as_deref(), replaced.then_some("third"));
            assert_eq!(temporaries(&root), Vec::<OsString>::new());
        }
    }

    /// The put-back succeeding, with the name found to hold the edit all the same: the save
    /// was moved away from the temporary name and the edit renamed into its place, so the
    /// save's rename back (ENOENT from the exchange: the name was empty) put the edit at the
    /// name. `Modified` would say nothing changed; the answer is `Displaced`.
    #[test]
    fn a_put_back_that_puts_the_edit_at_the_name_is_not_modified() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_owned();
        let sandbox = Sandbox::open(&root).unwrap();
        std::fs::write(root.join("f.txt"), "original").unwrap();
        let target = sandbox.resolve("f.txt", false).unwrap();
        let (_, read) = sandbox.read_target_for_edit(&target, edit_rules()).unwrap();
        save_lands_then(&root, "f.txt", |at, tmp_name| {
            std::fs::rename(at.join(tmp_name), at.join("elsewhere")).unwrap();
            std::fs::rename(at.join("f.txt"), at.join(tmp_name)).unwrap();
        });
        let out = sandbox.write_over(&target, b"edited", Some(read));
        assert!(AFTER_EXCHANGE.with_borrow(Option::is_none), "the hook ran");
        assert!(
            matches!(&out, Err(WriteError::Displaced { was_at }) if was_at.starts_with(TEMP_PREFIX)),
            "{out:?}"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("f.txt")).unwrap(),
            "edited"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("elsewhere")).unwrap(),
            "theirs"
        );
        assert_eq!(temporaries(&root), Vec::<OsString>::new());
    }

    /// The handler's answer when the save was moved away: `failed`, saying the edit holds the
    /// name and where the save had been set aside, logged; never "nothing was changed".
    #[test]
    fn an_edit_whose_swapped_out_save_is_moved_away_fails_and_says_the_edit_is_in_place() {
        use handler_kit::serde_json::json;
        use handler_kit::{EffectHandler, Host, HostServices, LogLevel, Outcome, Plugin};
        struct Lines(Mutex<Vec<String>>);
        impl HostServices for Lines {
            fn log(&self, _level: LogLevel, message: &str) {
                self.0.lock().unwrap().push(message.to_owned());
            }
        }
        let lines = std::sync::Arc::new(Lines(Mutex::default()));
        let handler =
            crate::WorkspacePlugin::new(json!({}), Host::from_services(lines.clone())).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_owned();
        std::fs::create_dir(root.join("d")).unwrap();
        std::fs::write(root.join("d/f.txt"), "one two").unwrap();
        let set_aside = Rc::new(RefCell::new(OsString::new()));
        let seen = set_aside.clone();
        let (at, at2) = (root.clone(), root.clone());
        BEFORE_INSTALL.set(Some(Box::new(move || {
            std::fs::write(at.join("save"), "theirs").unwrap();
            std::fs::rename(at.join("save"), at.join("d/f.txt")).unwrap();
        })));
        AFTER_EXCHANGE.set(Some(Box::new(move || {
            let tmp = temporaries(&at2.join("d"));
            assert_eq!(tmp.len(), 1, "{tmp:?}");
            std::fs::remove_file(at2.join("d").join(&tmp[0])).unwrap();
            *seen.borrow_mut() = tmp[0].clone();
        })));
        let out = handler.execute(handler_kit::Request {
            invocation_id: "inv-test".into(),
            episode: "ep".into(),
            worktree: Some(root.to_string_lossy().into_owned()),
            effect: "Workspace.Write".into(),
            scope: "worktree".into(),
            cost: 1,
            payload: json!({"op": "edit", "path": "d/f.txt", "old_text": "one", "new_text": "1"}),
            deadline_ms: 10_000,
        });
        assert!(AFTER_EXCHANGE.with_borrow(Option::is_none), "the hook ran");
        let was_at = set_aside.borrow().to_string_lossy().into_owned();
        let message = format!(
            "edit d/f.txt: something else saved the file while the edit was being installed, and that save, set aside at d/{was_at} to be given its name back, was moved or removed from there by something else first; d/f.txt holds the edit's content, not that save's"
        );
        assert!(
            matches!(&out, Outcome::Failed { message: m } if *m == message),
            "{out:?}"
        );
        assert_eq!(*lines.0.lock().unwrap(), [format!("workspace: {message}")]);
        assert_eq!(
            std::fs::read_to_string(root.join("d/f.txt")).unwrap(),
            "1 two"
        );
        assert_eq!(temporaries(&root.join("d")), Vec::<OsString>::new());
    }

    /// Where the filesystem refuses the exchange (`EINVAL`), an edit falls back to the check
    /// before a plain rename: a change made before the check is `Modified`, an unchanged file
    /// is edited; a save landing between the check and the rename is overwritten (the window
    /// the docs say is narrowed there, not closed).
    #[test]
    fn where_the_exchange_is_refused_an_edit_is_checked_just_before_its_rename() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_owned();
        let sandbox = Sandbox::open(&root).unwrap();
        let rules = ReadRules {
            limit: 1 << 20,
            hard_links: false,
        };
        NO_EXCHANGE.set(true);
        let read_fresh = |text: &str| {
            std::fs::write(root.join("f.txt"), text).unwrap();
            let target = sandbox.resolve("f.txt", false).unwrap();
            let (_, read) = sandbox.read_target_for_edit(&target, rules).unwrap();
            (target, read)
        };
        let (target, read) = read_fresh("original");
        std::fs::write(root.join("save"), "theirs").unwrap();
        std::fs::rename(root.join("save"), root.join("f.txt")).unwrap();
        assert!(matches!(
            sandbox.write_over(&target, b"edited", Some(read)),
            Err(WriteError::Before(PathError::Modified))
        ));
        assert_eq!(
            std::fs::read_to_string(root.join("f.txt")).unwrap(),
            "theirs"
        );
        let (target, read) = read_fresh("original");
        sandbox.write_over(&target, b"edited", Some(read)).unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("f.txt")).unwrap(),
            "edited"
        );
        let (target, read) = read_fresh("original");
        let at = root.clone();
        BEFORE_INSTALL.set(Some(Box::new(move || {
            std::fs::write(at.join("save"), "theirs").unwrap();
            std::fs::rename(at.join("save"), at.join("f.txt")).unwrap();
        })));
        sandbox.write_over(&target, b"edited", Some(read)).unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("f.txt")).unwrap(),
            "edited"
        );
        NO_EXCHANGE.set(false);
        assert_eq!(temporaries(&root), Vec::<OsString>::new());
    }

    /// A failed write removes the still-empty directories it made. Another write that had
    /// just found and opened such a directory then created its temporary file in an unlinked
    /// directory: ENOENT, refused `openat nd/ok.txt: no such file or directory` although a
    /// write makes its directories. The window between opening the directory and creating
    /// the file, opened by hand: the write is `Changed` (so it starts again), and written
    /// again it makes the directory anew.
    #[test]
    fn a_write_whose_directory_a_failed_write_removed_meanwhile_starts_again_and_succeeds() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir(root.join("nd")).unwrap();
        let sandbox = Sandbox::open(root).unwrap();
        let target = sandbox.resolve("nd/ok.txt", true).unwrap();
        let (opened, _made) = sandbox.open_or_make_parent(&target).unwrap();
        let dir = opened.expect("nd was opened");
        // What the other write's cleanup does: remove the empty directory by its name.
        std::fs::remove_dir(root.join("nd")).unwrap();
        assert!(matches!(
            sandbox.install(&dir, &target, b"ok", None),
            Err(WriteError::Before(PathError::Changed))
        ));
        // Started again (as the handler does on `Changed`): resolved afresh, written.
        let target = sandbox.resolve("nd/ok.txt", true).unwrap();
        sandbox.write(&target, b"ok").unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("nd/ok.txt")).unwrap(),
            "ok"
        );
    }

    thread_local! {
        /// Run once between an edit's check of the name and its exchange: the window another
        /// writer's save can fall into, opened on purpose.
        pub(super) static BEFORE_INSTALL: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
            const { std::cell::RefCell::new(None) };
        /// Run once just after an edit's exchange, before it looks at what it swapped out.
        pub(super) static AFTER_EXCHANGE: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
            const { std::cell::RefCell::new(None) };
        /// The exchange refused as by a filesystem without it (`EINVAL`).
        pub(super) static NO_EXCHANGE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
        /// The exchange that gives a swapped-out save its name back fails once, with this errno.
        pub(super) static EXCHANGE_BACK_FAILS: std::cell::Cell<Option<i32>> =
            const { std::cell::Cell::new(None) };
    }

    thread_local! {
        /// Run once just before a write makes a missing directory in the one it holds open:
        /// the window another writer's cleanup can fall into, opened on purpose.
        pub(super) static BEFORE_MAKE: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
            const { std::cell::RefCell::new(None) };
        /// Run once just before a plain write renames its temporary file into place.
        pub(super) static BEFORE_RENAME: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
            const { std::cell::RefCell::new(None) };
    }

    /// Attack (an operator's `rm -rf` racing an agent's writes): the directory was removed
    /// after the write had made its temporary file there and before the rename, which then got
    /// ENOENT: refused `openat …: no such file or directory`, a unit spent, although the guide
    /// says such a write starts again. It is `Changed` now, and written again it makes the
    /// directory anew; no temporary file is left.
    #[test]
    fn a_write_whose_directory_is_removed_before_its_rename_starts_again_and_succeeds() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_owned();
        std::fs::create_dir(root.join("nd")).unwrap();
        let sandbox = Sandbox::open(&root).unwrap();
        let target = sandbox.resolve("nd/ok.txt", true).unwrap();
        let gone = root.join("nd");
        BEFORE_RENAME.set(Some(Box::new(move || {
            std::fs::remove_dir_all(gone).unwrap()
        })));
        assert!(matches!(
            sandbox.write(&target, b"ok"),
            Err(WriteError::Before(PathError::Changed))
        ));
        assert!(BEFORE_RENAME.with_borrow(Option::is_none), "the hook ran");
        let target = sandbox.resolve("nd/ok.txt", true).unwrap();
        sandbox.write(&target, b"ok").unwrap();
        let names: Vec<_> = std::fs::read_dir(root.join("nd"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["ok.txt"]);
    }

    /// The same, for a write that makes a directory in the removed one (`nd/sub/ok.txt`):
    /// that `mkdirat` got ENOENT, refused as `no such file or directory`.
    #[test]
    fn a_write_making_a_directory_in_one_removed_meanwhile_starts_again_and_succeeds() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_owned();
        std::fs::create_dir(root.join("nd")).unwrap();
        let sandbox = Sandbox::open(&root).unwrap();
        let target = sandbox.resolve("nd/sub/ok.txt", true).unwrap();
        let gone = root.join("nd");
        BEFORE_MAKE.set(Some(Box::new(move || std::fs::remove_dir(gone).unwrap())));
        assert!(matches!(
            sandbox.write(&target, b"ok"),
            Err(WriteError::Before(PathError::Changed))
        ));
        assert!(BEFORE_MAKE.with_borrow(Option::is_none), "the hook ran");
        let target = sandbox.resolve("nd/sub/ok.txt", true).unwrap();
        sandbox.write(&target, b"ok").unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("nd/sub/ok.txt")).unwrap(),
            "ok"
        );
    }

    #[test]
    fn a_tree_that_keeps_changing_is_given_up_after_three_attempts() {
        let mut attempts = 0;
        let r: Result<(), PathError> = retry(|| {
            attempts += 1;
            Err(PathError::Changed)
        });
        assert!(matches!(r, Err(PathError::Changed)));
        assert_eq!(attempts, ATTEMPTS);
        // A change that settles is retried to success; any other error ends at once.
        let mut attempts = 0;
        let r = retry(|| {
            attempts += 1;
            if attempts < ATTEMPTS {
                Err(PathError::Changed)
            } else {
                Ok(attempts)
            }
        });
        assert_eq!(r.unwrap(), ATTEMPTS);
        let mut attempts = 0;
        let r: Result<(), PathError> = retry(|| {
            attempts += 1;
            Err(PathError::NotAFile)
        });
        assert!(matches!(r, Err(PathError::NotAFile)));
        assert_eq!(attempts, 1);
    }
}
