//! Who may write what the daemon loads. Loading a library runs its code inside the daemon,
//! beside the store and every credential, so a library another user could have written is
//! refused, and so is a directory where anyone could put or swap one: every user may write the
//! library, or it belongs to a user other than this process's and root; every user may write
//! the directory and it is not sticky (in a sticky one, such as `/tmp`, a library planted by
//! someone else is refused as theirs).
//!
//! The rules themselves ([`another_could_write`], [`anyone_could_swap`]) are
//! the crate's: `serve` and the store's verbs judge the store, its plugin state and the
//! workspace root by them too.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::PluginError;

/// Why another user than this process's (and root) could have written a file or directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OtherWriter {
    /// Every user may write it (`mode` has `o+w`).
    Everyone { mode: u32 },
    /// It belongs to `uid`, neither this process's user (`me`) nor root.
    Owner { uid: u32, me: u32 },
}

/// The library rule: every user may write it, or it belongs to a user other than this
/// process's and root. A group's write is the owner's grant, and allowed.
pub(crate) fn another_could_write(meta: &std::fs::Metadata) -> Option<OtherWriter> {
    let mode = meta.mode() & 0o7777;
    if mode & 0o002 != 0 {
        return Some(OtherWriter::Everyone { mode });
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me && meta.uid() != 0 {
        return Some(OtherWriter::Owner {
            uid: meta.uid(),
            me,
        });
    }
    None
}

/// The plugin-directory rule: every user may write the directory and it is not sticky, so
/// anyone could swap an entry in it. Its mode then.
pub(crate) fn anyone_could_swap(meta: &std::fs::Metadata) -> Option<u32> {
    let mode = meta.mode() & 0o7777;
    (mode & 0o002 != 0 && mode & 0o1000 == 0).then_some(mode)
}

pub(super) fn check_library(path: &Path, meta: &std::fs::Metadata) -> Result<(), PluginError> {
    match another_could_write(meta) {
        None => Ok(()),
        Some(OtherWriter::Everyone { mode }) => Err(PluginError::new(
            path,
            format!("refusing to load a library every user may write (mode {mode:04o}); `chmod o-w` it"),
        )),
        Some(OtherWriter::Owner { uid, me }) => Err(PluginError::new(
            path,
            format!(
                "refusing to load a library owned by uid {uid}, neither this process's user (uid {me}) nor root"
            ),
        )),
    }
}

pub(super) fn check_dir(dir: &Path, meta: &std::fs::Metadata) -> Result<(), PluginError> {
    match anyone_could_swap(meta) {
        None => Ok(()),
        Some(mode) => Err(PluginError::new(
            dir,
            format!("refusing a plugin directory every user may write, without the sticky bit (mode {mode:04o}): anyone could swap a library in it; `chmod o-w` it"),
        )),
    }
}
