//! Where a relative path really leads beneath a root directory.
//!
//! [`walk`] follows a path one component at a time from the root, the way the kernel would,
//! but reads every symlink itself instead of letting the kernel follow it: `..` pops a
//! directory the walk holds (never the kernel's `..`), a symlink's target is spliced into the
//! rest of the path, and a target that is absolute, or a `..` above the root, is an escape
//! ([`WalkError::Escape`]). What comes back is the chain of real directories the path passes
//! through and what it ends at, so a caller can judge where a path *lands* (git's own data, a
//! deny glob), not only how it is spelled.
//!
//! The walk only looks (`lstat`, `readlink`, through a [`Tree`]); it opens nothing. A caller
//! that then opens what it found must do so without following symlinks, and treat a no-follow
//! failure as [`WalkError::Changed`] (the workspace plugin re-opens the chain with
//! `O_NOFOLLOW`). A caller that hands the path to another program can only decline before it
//! runs: the program resolves the path again, later.
//!
//! A tree that changes under the walk — a directory swapped for a symlink between the `lstat`
//! that called it a symlink and the `readlink` that found a directory again (`EINVAL`), or a
//! link that vanished in between (`ENOENT`), or a directory of the chain that stopped being one
//! (`ENOTDIR`) — is [`WalkError::Changed`]: the caller walks again, and says the path kept
//! changing if it still does, never an errno the agent cannot act on.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Symlinks followed in one walk before giving up (Linux's limit).
pub const MAX_SYMLINK_HOPS: usize = 40;

/// The most bytes a path may expand to, its symlinks' targets spliced in, before the walk gives
/// up ([`WalkError::TooLong`]): `PATH_MAX`. Every step of a walk looks at the whole prefix from
/// the root, so without a bound a chain of deep links (each under the kernel's own limits)
/// makes one walk cost seconds; and a path no look can name in one piece cannot be checked.
pub const MAX_EXPANDED_BYTES: usize = 4096;

/// What one entry of the tree is, not following a symlink at its place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A regular file of this many bytes.
    File {
        /// Its size.
        size: u64,
    },
    /// Anything else: a FIFO, a socket, a device.
    Other,
}

impl Kind {
    /// What an `lstat` found: whether it is a symlink, a directory or a regular file, and its
    /// length (std's and cap-std's metadata both say these, in types of their own).
    pub fn of(symlink: bool, dir: bool, file: bool, len: u64) -> Kind {
        if symlink {
            Kind::Symlink
        } else if dir {
            Kind::Dir
        } else if file {
            Kind::File { size: len }
        } else {
            Kind::Other
        }
    }
}

/// The two looks a walk takes at a tree, relative to its root. `rel` is a chain of directories
/// the walk found real, then one name.
pub trait Tree {
    /// What `rel` is (`lstat`: a symlink at `rel` is not followed).
    fn kind(&self, rel: &Path) -> io::Result<Kind>;
    /// The target of the symlink at `rel` (`readlink`).
    fn link(&self, rel: &Path) -> io::Result<PathBuf>;
}

/// A root directory of the host, named by its path: looks through `std::fs`. A directory of
/// the chain swapped for a symlink after the walk passed it is followed by the kernel on the
/// next look, so this tree suits a check made before another program resolves the path itself;
/// confinement of what is then opened is that program's.
#[derive(Debug, Clone, Copy)]
pub struct HostDir<'a>(pub &'a Path);

impl Tree for HostDir<'_> {
    fn kind(&self, rel: &Path) -> io::Result<Kind> {
        let md = match std::fs::symlink_metadata(self.0.join(rel)) {
            #[cfg(feature = "worktree")]
            Err(e) if too_long(&e) => return beneath_root::kind(self.0, rel),
            md => md?,
        };
        let ft = md.file_type();
        Ok(Kind::of(
            ft.is_symlink(),
            ft.is_dir(),
            ft.is_file(),
            md.len(),
        ))
    }

    fn link(&self, rel: &Path) -> io::Result<PathBuf> {
        match std::fs::read_link(self.0.join(rel)) {
            #[cfg(feature = "worktree")]
            Err(e) if too_long(&e) => beneath_root::link(self.0, rel),
            target => target,
        }
    }
}

/// Looks relative to the opened root, for a root whose own path and `rel` together pass
/// `PATH_MAX`: the bound on a walk is then its [`MAX_EXPANDED_BYTES`] beneath the root, the
/// same under a long workspace root (or `/proc/self/fd/N`) as under a short one, and the same
/// as the workspace plugin's, which looks beneath a descriptor.
#[cfg(feature = "worktree")]
mod beneath_root {
    use std::ffi::{CString, OsString};
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    use std::path::{Path, PathBuf};

    use super::Kind;

    fn c(path: &Path) -> io::Result<CString> {
        CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
    }

    /// The root, opened as the kernel resolves its path (as a look through the path would).
    fn open(root: &Path) -> io::Result<OwnedFd> {
        let root = c(root)?;
        // SAFETY: `root` is a NUL-terminated string that outlives the call.
        let fd = unsafe {
            libc::open(
                root.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by open and is owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    pub fn kind(root: &Path, rel: &Path) -> io::Result<Kind> {
        let dir = open(root)?;
        let rel = c(rel)?;
        // SAFETY: an all-zero `stat` is a valid value for fstatat to overwrite.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `dir` is open, `rel` NUL-terminated, `st` a valid out-pointer.
        let rc = unsafe {
            libc::fstatat(
                dir.as_raw_fd(),
                rel.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        let fmt = st.st_mode & libc::S_IFMT;
        Ok(Kind::of(
            fmt == libc::S_IFLNK,
            fmt == libc::S_IFDIR,
            fmt == libc::S_IFREG,
            u64::try_from(st.st_size).unwrap_or(0),
        ))
    }

    pub fn link(root: &Path, rel: &Path) -> io::Result<PathBuf> {
        let dir = open(root)?;
        let rel = c(rel)?;
        let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
        // SAFETY: `dir` is open, `rel` NUL-terminated, `buf` writable for its length.
        let n = unsafe {
            libc::readlinkat(
                dir.as_raw_fd(),
                rel.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
        buf.truncate(n);
        Ok(PathBuf::from(OsString::from_vec(buf)))
    }
}

/// Where a walk ended.
#[derive(Debug)]
pub struct Walk {
    /// Real directories from the root down, as the path resolves (canonical names).
    pub dirs: Vec<OsString>,
    /// What the walk stopped at, in the last of [`Walk::dirs`].
    pub end: End,
}

/// What a walk stopped at.
#[derive(Debug)]
pub enum End {
    /// The path names a directory: [`Walk::dirs`] is it (empty: the root).
    Dir,
    /// An existing entry that is not a directory (a regular file or [`Kind::Other`]), and the
    /// components the path still had after it (none for a path that ends there; any makes the
    /// path `ENOTDIR`).
    Entry {
        /// Its name.
        name: OsString,
        /// Its kind: [`Kind::File`] or [`Kind::Other`].
        kind: Kind,
        /// The components left after it, as requested.
        rest: Vec<OsString>,
    },
    /// A name that does not exist, and the components the path still had after it.
    Absent {
        /// The missing name.
        name: OsString,
        /// The components left after it, as requested (`..` included: they cannot be
        /// resolved below a missing directory).
        rest: Vec<OsString>,
        /// The `lstat` error that said so.
        error: io::Error,
    },
}

impl Walk {
    /// The canonical root-relative path the walk reached, `/`-separated: the directories, then
    /// the entry or missing name and the components left after it, as requested (so a caller
    /// can still apply a lexical rule to a part that could not be resolved).
    pub fn reached(&self) -> String {
        let (name, rest): (Option<&OsString>, &[OsString]) = match &self.end {
            End::Dir => (None, &[]),
            End::Entry { name, rest, .. } | End::Absent { name, rest, .. } => (Some(name), rest),
        };
        let parts: Vec<String> = self
            .dirs
            .iter()
            .chain(name)
            .chain(rest)
            .map(|c| c.to_string_lossy().into_owned())
            .collect();
        parts.join("/")
    }
}

/// Why a walk stopped without an answer.
#[derive(Debug)]
pub enum WalkError {
    /// The path is absolute, climbs above the root with `..`, or passes a symlink whose target
    /// is absolute or climbs above the root.
    Escape,
    /// More than [`MAX_SYMLINK_HOPS`] symlinks (`ELOOP`).
    TooManyLinks,
    /// A symlink with an empty target (`ENOENT`, as the kernel says).
    EmptyLink,
    /// The tree changed under the walk (see the module docs): walk again.
    Changed,
    /// The path with its symlinks' targets spliced in passes [`MAX_EXPANDED_BYTES`], or a look
    /// at it failed with `ENAMETOOLONG` (for a [`HostDir`], a look relative to the opened root
    /// is tried first, so only a tree that names the whole path in one piece says so short of
    /// the bound): the walk stopped without knowing where it leads. A caller must refuse the path (fail closed),
    /// saying [`TOO_LONG`], never let it through as a path "the walk cannot finish".
    TooLong,
    /// Any other error of a look, as the [`Tree`] returned it.
    Io(io::Error),
}

/// What a caller says of a path the walk gave up on ([`WalkError::TooLong`]).
pub const TOO_LONG: &str = "the path's links expand past 4096 bytes; cannot be checked";

/// Split a path on `/`, dropping empty and `.` components.
pub fn components(path: &OsStr) -> VecDeque<OsString> {
    path.as_bytes()
        .split(|b| *b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .map(|c| OsStr::from_bytes(c).to_os_string())
        .collect()
}

/// Lexical normalisation of a relative path: `.` dropped, `..` pops. `None` when `..` climbs
/// above the start. For rules about a path *as spelled* (in addition to where it resolves),
/// never to decide what gets opened.
pub fn lexical(path: &str) -> Option<String> {
    let mut out: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                out.pop()?;
            }
            c => out.push(c),
        }
    }
    Some(out.join("/"))
}

/// `ENAMETOOLONG` from a look past a symlink: the expanded path (with the root's own path, for
/// a tree that names it) passes `PATH_MAX`, so no look can name the place, while the kernel, following one link at a time,
/// still can reach it. Too long to check, not an error a caller may let through.
fn too_long(e: &io::Error) -> bool {
    // ENAMETOOLONG on Linux.
    e.raw_os_error() == Some(36)
}

fn join(stack: &[OsString], last: &OsStr) -> PathBuf {
    let mut p = PathBuf::new();
    for c in stack {
        p.push(c);
    }
    p.push(last);
    p
}

/// Whether a path ends in a way that makes its last component a directory, as POSIX has it:
/// a trailing `/`, or a final `.` (`a/`, `a/.`, `a/./`).
fn ends_as_directory(path: &OsStr) -> bool {
    matches!(
        path.as_bytes().rsplit(|b| *b == b'/').next(),
        Some(b"" | b".")
    )
}

/// The component that says "the name before me must be a directory": the one [`walk`] keeps
/// from a path (or a symlink's target) ending in `/` or `/.`, so a regular file there ends the
/// walk with something left ([`End::Entry`] with a non-empty `rest`: `ENOTDIR`).
const MUST_BE_DIR: &str = ".";

/// Walk `path` beneath the root of `tree` (see the module docs). POSIX semantics: `a/..` is the
/// parent of wherever `a` resolves, and `a/` or `a/.` (also through a symlink whose target ends
/// so) names a directory: a regular file there is an entry with `.` left in its `rest`, as
/// `a/b` is with `b`.
pub fn walk(tree: &impl Tree, path: &str) -> Result<Walk, WalkError> {
    if path.starts_with('/') {
        return Err(WalkError::Escape);
    }
    // The path itself is the caller's to bound (a look at it says `ENAMETOOLONG`); what the
    // links add to it is the walk's.
    let mut expanded = path.len();
    let mut queue = components(OsStr::new(path));
    if !queue.is_empty() && ends_as_directory(OsStr::new(path)) {
        queue.push_back(MUST_BE_DIR.into());
    }
    let mut dirs: Vec<OsString> = Vec::new();
    let mut hops = 0;
    while let Some(c) = queue.pop_front() {
        // Everything in `dirs` is a directory: `.` after it is that directory.
        if c == MUST_BE_DIR {
            continue;
        }
        if c == ".." {
            if dirs.pop().is_none() {
                return Err(WalkError::Escape);
            }
            continue;
        }
        let rel = join(&dirs, &c);
        let kind = match tree.kind(&rel) {
            Ok(kind) => kind,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                return Ok(Walk {
                    dirs,
                    end: End::Absent {
                        name: c,
                        rest: queue.into(),
                        error,
                    },
                });
            }
            // Every directory of the chain was one when the walk passed it.
            Err(e) if e.kind() == io::ErrorKind::NotADirectory && !dirs.is_empty() => {
                return Err(WalkError::Changed)
            }
            Err(e) if hops > 0 && too_long(&e) => return Err(WalkError::TooLong),
            Err(e) => return Err(WalkError::Io(e)),
        };
        match kind {
            Kind::Symlink => {
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return Err(WalkError::TooManyLinks);
                }
                let target = match tree.link(&rel) {
                    Ok(target) => target,
                    // Not a symlink any more (EINVAL), or gone: swapped since the lstat.
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::InvalidInput | io::ErrorKind::NotFound
                        ) =>
                    {
                        return Err(WalkError::Changed)
                    }
                    Err(e) if hops > 0 && too_long(&e) => return Err(WalkError::TooLong),
                    Err(e) => return Err(WalkError::Io(e)),
                };
                let target = target.as_os_str();
                if target.as_bytes().first() == Some(&b'/') {
                    return Err(WalkError::Escape);
                }
                if target.is_empty() {
                    return Err(WalkError::EmptyLink);
                }
                expanded += target.len() + 1;
                if expanded > MAX_EXPANDED_BYTES {
                    return Err(WalkError::TooLong);
                }
                let mut spliced = components(target);
                // A target ending in `/` makes the link's place a directory; a name after the
                // link does that already.
                if queue.is_empty() && !spliced.is_empty() && ends_as_directory(target) {
                    spliced.push_back(MUST_BE_DIR.into());
                }
                spliced.extend(queue);
                queue = spliced;
            }
            Kind::Dir => dirs.push(c),
            kind => {
                return Ok(Walk {
                    dirs,
                    end: End::Entry {
                        name: c,
                        kind,
                        rest: queue.into(),
                    },
                })
            }
        }
    }
    Ok(Walk {
        dirs,
        end: End::Dir,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::collections::HashMap;

    #[test]
    fn lexical_normalises_and_detects_climbing() {
        assert_eq!(lexical("a/./b//c/").as_deref(), Some("a/b/c"));
        assert_eq!(lexical("a/../.git/config").as_deref(), Some(".git/config"));
        assert_eq!(lexical("./.git").as_deref(), Some(".git"));
        assert_eq!(lexical("."), Some(String::new()));
        assert_eq!(lexical(".."), None);
        assert_eq!(lexical("a/../../b"), None);
    }

    #[test]
    fn components_drop_empty_and_dot() {
        let c: Vec<OsString> = components(OsStr::new("./a//b/./c/")).into();
        assert_eq!(c, vec![OsString::from("a"), "b".into(), "c".into()]);
    }

    /// A tree in memory: each path's kind, each symlink's target; `swapped` paths are
    /// symlinks to `lstat` and directories again to `readlink`, as a path exchanged between
    /// the two looks is.
    #[derive(Default)]
    struct Fake {
        kinds: HashMap<PathBuf, Kind>,
        links: HashMap<PathBuf, PathBuf>,
        swapped: Vec<PathBuf>,
        vanished: Vec<PathBuf>,
        looks: Cell<usize>,
    }

    impl Tree for Fake {
        fn kind(&self, rel: &Path) -> io::Result<Kind> {
            self.looks.set(self.looks.get() + 1);
            if self.swapped.iter().any(|p| p == rel) || self.vanished.iter().any(|p| p == rel) {
                return Ok(Kind::Symlink);
            }
            self.kinds
                .get(rel)
                .copied()
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
        }

        fn link(&self, rel: &Path) -> io::Result<PathBuf> {
            if self.swapped.iter().any(|p| p == rel) {
                return Err(io::Error::from_raw_os_error(22)); // EINVAL
            }
            if self.vanished.iter().any(|p| p == rel) {
                return Err(io::Error::from_raw_os_error(2)); // ENOENT
            }
            self.links
                .get(rel)
                .cloned()
                .ok_or_else(|| io::Error::from_raw_os_error(22))
        }
    }

    fn fake(kinds: &[(&str, Kind)], links: &[(&str, &str)]) -> Fake {
        Fake {
            kinds: kinds.iter().map(|(p, k)| (PathBuf::from(p), *k)).collect(),
            links: links
                .iter()
                .map(|(p, t)| (PathBuf::from(p), PathBuf::from(t)))
                .collect(),
            ..Fake::default()
        }
    }

    #[test]
    fn a_walk_reaches_the_canonical_place_through_symlinks_inside() {
        let tree = fake(
            &[
                ("real", Kind::Dir),
                ("real/sub", Kind::Dir),
                ("real/sub/f", Kind::File { size: 3 }),
                ("link", Kind::Symlink),
            ],
            &[("link", "real/sub")],
        );
        let w = walk(&tree, "link/f").unwrap();
        assert_eq!(w.reached(), "real/sub/f");
        assert!(matches!(
            w.end,
            End::Entry {
                kind: Kind::File { size: 3 },
                ..
            }
        ));
        // POSIX: `link/..` is the parent of link's target.
        assert_eq!(
            walk(&tree, "link/../sub/f").unwrap().reached(),
            "real/sub/f"
        );
        let w = walk(&tree, "link/new/x/../y").unwrap();
        assert_eq!(w.reached(), "real/sub/new/x/../y");
        assert!(matches!(w.end, End::Absent { .. }));
        let w = walk(&tree, "link").unwrap();
        assert!(matches!(w.end, End::Dir));
        assert_eq!(w.reached(), "real/sub");
    }

    #[test]
    fn absolute_paths_climbing_and_symlinks_out_are_escapes() {
        let tree = fake(
            &[
                ("out", Kind::Symlink),
                ("up", Kind::Symlink),
                ("d", Kind::Dir),
            ],
            &[("out", "/etc"), ("up", "d/../../x")],
        );
        for path in [
            "/etc/passwd",
            "..",
            "d/../..",
            "out/hostname",
            "up",
            "d/../up/f",
        ] {
            assert!(
                matches!(walk(&tree, path), Err(WalkError::Escape)),
                "{path}"
            );
        }
    }

    #[test]
    fn a_symlink_cycle_and_an_empty_link_end_the_walk() {
        let tree = fake(
            &[
                ("a", Kind::Symlink),
                ("b", Kind::Symlink),
                ("e", Kind::Symlink),
            ],
            &[("a", "b"), ("b", "a"), ("e", "")],
        );
        assert!(matches!(walk(&tree, "a"), Err(WalkError::TooManyLinks)));
        assert!(matches!(walk(&tree, "e"), Err(WalkError::EmptyLink)));
    }

    /// Attack: a second process exchanges a directory of the path with a symlink in a loop.
    /// `lstat` saw a symlink, `readlink` then found a directory (`EINVAL`) or nothing
    /// (`ENOENT`): the tree changed, which is what the walk says, not the errno.
    #[test]
    fn a_link_that_is_a_directory_again_or_gone_when_read_is_a_changed_tree_not_an_errno() {
        let mut tree = fake(&[("d/f", Kind::File { size: 1 })], &[]);
        tree.swapped.push("d".into());
        assert!(matches!(walk(&tree, "d/f"), Err(WalkError::Changed)));
        let mut tree = fake(&[], &[]);
        tree.vanished.push("d".into());
        assert!(matches!(walk(&tree, "d/f"), Err(WalkError::Changed)));
    }

    #[test]
    fn a_directory_of_the_chain_that_stopped_being_one_is_a_changed_tree() {
        struct Flips;
        impl Tree for Flips {
            fn kind(&self, rel: &Path) -> io::Result<Kind> {
                match rel.to_str() {
                    Some("d") => Ok(Kind::Dir),
                    // ENOTDIR
                    _ => Err(io::Error::from_raw_os_error(20)),
                }
            }
            fn link(&self, _: &Path) -> io::Result<PathBuf> {
                Err(io::Error::from_raw_os_error(22))
            }
        }
        assert!(matches!(walk(&Flips, "d/f"), Err(WalkError::Changed)));
    }

    #[test]
    fn a_host_directory_is_walked_through_its_real_symlinks() {
        let tmp = std::env::temp_dir().join(format!("handler-kit-beneath-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(tmp.join("wt/real")).unwrap();
        std::fs::write(tmp.join("wt/real/f"), "x").unwrap();
        std::os::unix::fs::symlink("real", tmp.join("wt/in")).unwrap();
        std::os::unix::fs::symlink("../outside", tmp.join("wt/out")).unwrap();
        let root = tmp.join("wt");
        let tree = HostDir(&root);
        let w = walk(&tree, "in/f").unwrap();
        assert_eq!(w.reached(), "real/f");
        assert!(matches!(walk(&tree, "out/f"), Err(WalkError::Escape)));
        assert!(matches!(
            walk(&tree, "in/f/g").unwrap().end,
            End::Entry { ref rest, .. } if rest.len() == 1
        ));
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    /// `f/.` and `f/` name a directory, as they do to the kernel (`ENOTDIR` for a file), also
    /// when the slash or the dot comes from a symlink's target; a directory is unchanged.
    #[test]
    fn a_path_ending_in_slash_dot_or_a_link_whose_target_ends_in_slash_names_a_directory() {
        let tree = fake(
            &[
                ("f", Kind::File { size: 1 }),
                ("d", Kind::Dir),
                ("ts", Kind::Symlink),
                ("tsd", Kind::Symlink),
                ("td", Kind::Symlink),
            ],
            &[("ts", "f/"), ("tsd", "./f/."), ("td", "d/.")],
        );
        for path in ["f/.", "f/", "f/./", "./f/.", "ts", "tsd", "ts/", "d/../f/."] {
            match walk(&tree, path).unwrap().end {
                End::Entry { name, rest, .. } => {
                    assert_eq!(name, "f", "{path}");
                    assert!(!rest.is_empty(), "{path}: a file where a directory must be");
                }
                other => panic!("{path}: {other:?}"),
            }
        }
        for path in ["d/.", "d/", "td", "td/", "."] {
            assert!(matches!(walk(&tree, path).unwrap().end, End::Dir), "{path}");
        }
        // A missing name that must be a directory keeps the mark in its rest.
        match walk(&tree, "nd/.").unwrap().end {
            End::Absent { name, rest, .. } => {
                assert_eq!(
                    (name.as_os_str(), rest),
                    (OsStr::new("nd"), vec![".".into()])
                )
            }
            other => panic!("{other:?}"),
        }
        // Unchanged: a file named plainly is a file with nothing left.
        assert!(matches!(
            walk(&tree, "f").unwrap().end,
            End::Entry { ref rest, .. } if rest.is_empty()
        ));
    }

    /// Attack: 38 links, each to a 680-deep directory and back up (`a/`x680 `../`x680 `lN+1`),
    /// each within the kernel's limits: every step looks at the whole prefix, so the walk cost
    /// depth x links x depth. Past 4096 expanded bytes the walk stops: too long to check.
    #[test]
    fn a_chain_of_deep_links_expanding_past_path_max_is_too_long_and_stops_early() {
        let depth = 680;
        let mut kinds: Vec<(String, Kind)> = Vec::new();
        let mut dir = String::new();
        for _ in 0..depth {
            dir = if dir.is_empty() {
                "a".into()
            } else {
                format!("{dir}/a")
            };
            kinds.push((dir.clone(), Kind::Dir));
        }
        kinds.push(("target.txt".into(), Kind::File { size: 3 }));
        let mut links: Vec<(String, String)> = Vec::new();
        for n in 0..38 {
            let next = if n == 37 {
                "target.txt".to_string()
            } else {
                format!("l{}", n + 1)
            };
            kinds.push((format!("l{n}"), Kind::Symlink));
            links.push((
                format!("l{n}"),
                format!("{}{}{next}", "a/".repeat(depth), "../".repeat(depth)),
            ));
        }
        let kinds: Vec<(&str, Kind)> = kinds.iter().map(|(p, k)| (p.as_str(), *k)).collect();
        let links: Vec<(&str, &str)> = links
            .iter()
            .map(|(p, t)| (p.as_str(), t.as_str()))
            .collect();
        let tree = fake(&kinds, &links);
        assert!(matches!(walk(&tree, "l0"), Err(WalkError::TooLong)));
        // One link's worth of steps, not 38.
        assert!(
            tree.looks.get() <= 2 * depth + 2,
            "{} looks",
            tree.looks.get()
        );
        // The last link alone expands within the bound and is walked to its end.
        assert_eq!(walk(&tree, "l37").unwrap().reached(), "target.txt");
    }

    /// The same on a real directory, as a checked-out repository can plant it: `l0` leads
    /// 2040 directories down (a 4082-byte target, within the kernel's limit) to `l1`, a link
    /// out of the worktree. The look at `<root>/` + 4082 bytes fails with `ENAMETOOLONG` while
    /// the kernel, following one link at a time, reaches the outside file: the walk says the
    /// path is too long to check, never an errno a caller could let through. With `worktree`,
    /// the look is made again relative to the opened root and the walk reaches `l1`: an escape.
    #[test]
    fn a_host_link_chain_past_path_max_is_too_long_not_an_errno() {
        let tmp =
            std::env::temp_dir().join(format!("handler-kit-beneath-long-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(tmp.join("wt")).unwrap();
        std::fs::write(tmp.join("secret"), "SECRET").unwrap();
        // Made relative to the worktree: named from the root, the path is too long for mkdir.
        let made = std::process::Command::new("sh")
            .current_dir(tmp.join("wt"))
            .args([
                "-c",
                "d=\"$(printf 'a/%.0s' $(seq 2040))\" && mkdir -p \"$d\" && \
                 ln -s \"${d}l1\" l0 && ln -s \"$0\" \"${d}l1\"",
            ])
            .arg(tmp.join("secret"))
            .status()
            .unwrap();
        assert!(made.success());
        // What the kernel makes of it.
        assert_eq!(
            std::fs::read_to_string(tmp.join("wt/l0")).unwrap(),
            "SECRET"
        );
        let root = tmp.join("wt");
        #[cfg(not(feature = "worktree"))]
        assert!(matches!(
            walk(&HostDir(&root), "l0"),
            Err(WalkError::TooLong)
        ));
        #[cfg(feature = "worktree")]
        assert!(matches!(
            walk(&HostDir(&root), "l0"),
            Err(WalkError::Escape)
        ));
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
