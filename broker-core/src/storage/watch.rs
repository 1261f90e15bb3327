//! The serving daemon's periodic look at its store ([`super::Store::watch_every`]): reader
//! slots left by processes that died holding a snapshot, and whether the files it opened are
//! still the ones at the store's path.
//!
//! A read transaction holds a slot in `lock.mdb` naming its snapshot, and LMDB reuses no page
//! freed after the oldest snapshot held. A process killed while it reads (a `worldd backup`
//! killed mid-copy) leaves its slot behind; LMDB clears such slots only when a process opens
//! the environment (or asks, `mdb_reader_check`), so a daemon that had opened the store before
//! kept the dead snapshot for its whole life, and its data file grew by every page it wrote
//! instead of reusing freed ones. The daemon now asks every [`WATCH_EVERY`].
//!
//! A store directory replaced under the daemon (`rm -rf db && cp -a other db`) leaves it
//! writing into files no path names any more: every call it acknowledged was lost, and a second
//! daemon could start on the new directory. The daemon compares the device and inode of
//! `data.mdb` and `lock.mdb` at the store's path with those it opened; on a difference it logs
//! what it found and refuses every write from then on ([`super::StoreError::Replaced`]) and
//! new client calls ([`crate::capacity::Full::Replaced`]). It does not exit: the calls it
//! acknowledged between the swap and the look are only in the deleted data file, which it
//! keeps open, so the operator can still copy them out (`/proc/PID/fd/N`, named in the log);
//! an exit would close that last descriptor and lose them.
//!
//! Only a file that is not there (`ENOENT`, or `ENOTDIR` for a directory on its path) is gone.
//! Any other failure to look (`EACCES` while an operator fixes a directory's mode, `ELOOP`,
//! `EIO`) says nothing of what is there: it was taken for a replaced store, and wedged the
//! daemon for good. It is now warned of once per distinct failure, and looked at again.
//!
//! The path looked at is the store's made absolute when it was opened (`MapLock::at`): a store
//! opened as `.world/db` was "gone" after any `chdir` in the process (plugin code, a library),
//! and the daemon refused every call of every episode until restarted.

use std::path::Path;
use std::time::Duration;

/// How often the serving daemon looks ([`super::Store::watch_every`]).
pub const WATCH_EVERY: Duration = Duration::from_secs(1);

/// Device and inode of a file.
type FileId = (u64, u64);

/// What one look at a file found.
#[derive(Debug)]
enum Look {
    At(FileId),
    /// Nothing is at the path (`ENOENT`), or a directory on the way is no directory any more
    /// (`ENOTDIR`): the store was removed or replaced.
    Gone,
    /// The path could not be looked at (`EACCES` while an operator fixes modes, `ELOOP`,
    /// `EIO`…): nothing is known of what is there, least of all that it is gone.
    Unseen(std::io::Error),
}

fn look(path: &Path) -> Look {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(path) {
        Ok(m) => Look::At((m.dev(), m.ino())),
        Err(e) if is_gone(&e) => Look::Gone,
        Err(e) => Look::Unseen(e),
    }
}

fn is_gone(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR))
}

fn id_of(path: &Path) -> Option<FileId> {
    match look(path) {
        Look::At(id) => Some(id),
        Look::Gone | Look::Unseen(_) => None,
    }
}

/// The store's files as this process opened them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Opened {
    data: Option<FileId>,
    lock: Option<FileId>,
}

impl Opened {
    /// The files at `dir` now (taken right after the environment is opened).
    pub(super) fn of(dir: &Path) -> Opened {
        Opened {
            data: id_of(&dir.join("data.mdb")),
            lock: id_of(&dir.join("lock.mdb")),
        }
    }

    /// What is no longer the file this process opened, as the log says it; `Ok(None)` when
    /// both still are (or were never known). `Err` says which file could not be looked at, and
    /// why, when nothing was found changed: a file that cannot be looked at for a moment (its
    /// directory's mode being fixed) is not a replaced one, and taking it for one wedged the
    /// daemon for good.
    pub(super) fn changed(&self, dir: &Path) -> Result<Option<String>, String> {
        let mut unseen = Vec::new();
        let mut said = |name: &str, was: Option<FileId>| {
            let was = was?;
            let is = match look(&dir.join(name)) {
                Look::At(is) => is,
                Look::Gone => return Some(format!("{name} is gone")),
                Look::Unseen(e) => {
                    unseen.push(format!("{name}: {e}"));
                    return None;
                }
            };
            match (was, is) {
                ((_, was), (_, is)) if was != is => {
                    Some(format!("{name} is another file (inode {is}, was {was})"))
                }
                (w, i) if w != i => Some(format!("{name} is on another device")),
                _ => None,
            }
        };
        let found: Vec<String> = [said("data.mdb", self.data), said("lock.mdb", self.lock)]
            .into_iter()
            .flatten()
            .collect();
        match (found.is_empty(), unseen.is_empty()) {
            (false, _) => Ok(Some(found.join(", "))),
            (true, true) => Ok(None),
            (true, false) => Err(unseen.join(", ")),
        }
    }

    /// `/proc/PID/fd/N` of the data file this process opened, where it still has it open.
    fn held_data_file(&self) -> Option<String> {
        let data = self.data?;
        let pid = std::process::id();
        std::fs::read_dir("/proc/self/fd")
            .ok()?
            .flatten()
            .find(|fd| id_of(&fd.path()) == Some(data))
            .map(|fd| format!("/proc/{pid}/fd/{}", fd.file_name().to_string_lossy()))
    }

    /// The error logged once when the files at `dir` are no longer these (`what` says how).
    pub(super) fn replaced_message(&self, dir: &Path, what: &str) -> String {
        // Only lock.mdb changed: the data file at the path is the one this daemon writes, but
        // a process that opened the store since made its own lock.mdb, whose write lock is not
        // this daemon's; the store verbs refuse to open it beside this daemon (what they wrote
        // could be lost, or lose what it acknowledged), and only a restart mends that.
        let data_in_place = self.data.is_some() && id_of(&dir.join("data.mdb")) == self.data;
        let keep = match self.held_data_file() {
            _ if data_in_place => format!(
                "data.mdb is still the file it opened, but the store verbs (`worldd session mint`, `session revoke`, `doctor`, `backup`) refuse to open the store until it is restarted, since they would not share its write lock: stop it and start it again on the store at {}",
                dir.display()
            ),
            Some(fd) => format!(
                "the calls it acknowledged since the swap are only in the deleted data file, which it keeps open: copy it out (`cp {fd} SAFE_PLACE/data.mdb`) before you stop it, then restart it on the store now at {}",
                dir.display()
            ),
            None => format!("restart it on the store now at {}", dir.display()),
        };
        format!(
            "the store {} was replaced or removed while this daemon served it ({what}): it refuses new calls and writes nothing more, since what it wrote would go to files no path names; {keep}",
            dir.display()
        )
    }
}

/// The error logged once when the store's last committed transaction (`now`) is older than
/// the last one this process committed (`ours`) ([`super::map::MapLock::rolled_back`]).
pub(super) fn rolled_back_message(dir: &Path, now: usize, ours: usize) -> String {
    format!(
        "the store {}'s data file was rolled back or written by another process while this daemon served it (its last transaction is {now}, and this daemon had committed {ours}: a backup copied over it?): it refuses new calls and writes nothing more, since what it wrote would go over a store that no longer holds what it acknowledged; stop it, run `worldd doctor` on the store, and start it again",
        dir.display()
    )
}

/// The error logged once when the store's log no longer ends at the row this process appended
/// last (`ours`: "entry 5"), but at `found` ([`super::map::MapLock::log_replaced`]).
pub(super) fn log_replaced_message(dir: &Path, found: &str, ours: &str) -> String {
    format!(
        "the store {}'s data file was rolled back or written by another process while this daemon served it (its log now ends at {found}, where this daemon had appended {ours} last and nothing else appends to it: a copy of the store that another daemon served put over it?): it refuses new calls and writes nothing more, since what it wrote would go over a store that no longer holds what it acknowledged; stop it, run `worldd doctor` on the store, and start it again",
        dir.display()
    )
}

/// The warning logged when `n` stale reader slots were cleared.
pub(super) fn stale_readers_message(dir: &Path, n: usize) -> String {
    format!(
        "store {}: cleared {n} reader slot(s) left by a process that died holding a read snapshot (a `worldd backup` or `doctor` killed mid-read?); while they stayed, no page freed after that snapshot could be reused, so the data file grew instead",
        dir.display()
    )
}

/// The files of the store that could not be looked at, as last warned of: one warning per
/// distinct failure, not one a second for as long as it lasts.
#[derive(Debug, Default)]
pub(super) struct Unseen(std::sync::Mutex<Option<String>>);

impl Unseen {
    /// The line to log after a look that could (`Ok`) or could not (`Err`, why) see the
    /// store's files, if any: a warning the first time a failure is met, a note when the files
    /// can be looked at again.
    pub(super) fn after(&self, dir: &Path, look: Result<(), String>) -> Option<Said> {
        let mut last = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match look {
            Ok(()) => last.take().map(|_| {
                Said::Info(format!(
                    "store {}: its files can be looked at again, and are the ones this daemon opened",
                    dir.display()
                ))
            }),
            Err(why) if last.as_deref() == Some(why.as_str()) => None,
            Err(why) => {
                let line = format!(
                    "store {}: cannot look at the store's files ({why}); still serving, looking again every {}s (a store replaced meanwhile is seen once they can be looked at)",
                    dir.display(),
                    WATCH_EVERY.as_secs()
                );
                *last = Some(why);
                Some(Said::Warn(line))
            }
        }
    }
}

/// A line for the log, and its level.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Said {
    Warn(String),
    Info(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only "nothing there" and "not a directory" are a store gone; any other failure to look
    /// (a mode being fixed, a link loop, an I/O error) knows nothing of the store.
    #[test]
    fn a_store_file_that_cannot_be_looked_at_is_not_taken_for_gone() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("data.mdb"), b"d").unwrap();
        std::fs::write(dir.path().join("lock.mdb"), b"l").unwrap();
        let opened = Opened::of(dir.path());
        assert_eq!(opened.changed(dir.path()), Ok(None));
        for errno in [libc::ENOENT, libc::ENOTDIR] {
            assert!(
                is_gone(&std::io::Error::from_raw_os_error(errno)),
                "{errno}"
            );
        }
        for errno in [libc::EACCES, libc::ELOOP, libc::EIO, libc::ENAMETOOLONG] {
            assert!(
                !is_gone(&std::io::Error::from_raw_os_error(errno)),
                "{errno}"
            );
        }
        // A loop where data.mdb was: not looked at, so not gone.
        let data = dir.path().join("data.mdb");
        std::fs::rename(&data, dir.path().join("kept")).unwrap();
        std::os::unix::fs::symlink("data.mdb", &data).unwrap();
        assert_eq!(
            opened.changed(dir.path()),
            Err("data.mdb: Too many levels of symbolic links (os error 40)".into())
        );
        // Removed: gone.
        std::fs::remove_file(&data).unwrap();
        assert_eq!(
            opened.changed(dir.path()),
            Ok(Some("data.mdb is gone".into()))
        );
        // Back where it was: the file opened.
        std::fs::rename(dir.path().join("kept"), &data).unwrap();
        assert_eq!(opened.changed(dir.path()), Ok(None));
    }

    /// One warning per distinct failure, one note when the files can be looked at again.
    #[test]
    fn a_store_that_cannot_be_looked_at_is_warned_of_once_per_failure() {
        let unseen = Unseen::default();
        let dir = Path::new("/srv/db");
        assert_eq!(unseen.after(dir, Ok(())), None);
        let denied = || Err("data.mdb: Permission denied (os error 13)".to_string());
        assert_eq!(
            unseen.after(dir, denied()),
            Some(Said::Warn("store /srv/db: cannot look at the store's files (data.mdb: Permission denied (os error 13)); still serving, looking again every 1s (a store replaced meanwhile is seen once they can be looked at)".into()))
        );
        for _ in 0..5 {
            assert_eq!(unseen.after(dir, denied()), None);
        }
        let other = unseen.after(dir, Err("data.mdb: Input/output error (os error 5)".into()));
        assert!(matches!(other, Some(Said::Warn(_))), "{other:?}");
        assert_eq!(
            unseen.after(dir, Ok(())),
            Some(Said::Info(
                "store /srv/db: its files can be looked at again, and are the ones this daemon opened".into()
            ))
        );
        assert_eq!(unseen.after(dir, Ok(())), None);
        assert!(matches!(unseen.after(dir, denied()), Some(Said::Warn(_))));
    }
}
