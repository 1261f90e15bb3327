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
//! The path looked at is the store's made absolute when it was opened (`MapLock::at`): a store
//! opened as `.world/db` was "gone" after any `chdir` in the process (plugin code, a library),
//! and the daemon refused every call of every episode until restarted.

use std::path::Path;
use std::time::Duration;

/// How often the serving daemon looks ([`super::Store::watch_every`]).
pub const WATCH_EVERY: Duration = Duration::from_secs(1);

/// Device and inode of a file.
type FileId = (u64, u64);

fn id_of(path: &Path) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
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

    /// What is no longer the file this process opened, as the log says it; `None` when both
    /// still are (or were never known).
    pub(super) fn changed(&self, dir: &Path) -> Option<String> {
        let now = Opened::of(dir);
        let said = |name: &str, was: Option<FileId>, is: Option<FileId>| match (was, is) {
            (Some(_), None) => Some(format!("{name} is gone")),
            (Some((_, was)), Some((_, is))) if was != is => {
                Some(format!("{name} is another file (inode {is}, was {was})"))
            }
            (Some(w), Some(i)) if w != i => Some(format!("{name} is on another device")),
            _ => None,
        };
        let found: Vec<String> = [
            said("data.mdb", self.data, now.data),
            said("lock.mdb", self.lock, now.lock),
        ]
        .into_iter()
        .flatten()
        .collect();
        (!found.is_empty()).then(|| found.join(", "))
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
        // Only lock.mdb changed: every acknowledged call is in the data file still at the path,
        // and only a restart is needed (another daemon could open the store beside this one).
        let data_in_place = self.data.is_some() && id_of(&dir.join("data.mdb")) == self.data;
        let keep = match self.held_data_file() {
            _ if data_in_place => format!(
                "data.mdb is still the file it opened, so nothing it acknowledged is lost: stop it and start it again on the store at {}",
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

/// The warning logged when `n` stale reader slots were cleared.
pub(super) fn stale_readers_message(dir: &Path, n: usize) -> String {
    format!(
        "store {}: cleared {n} reader slot(s) left by a process that died holding a read snapshot (a `worldd backup` or `doctor` killed mid-read?); while they stayed, no page freed after that snapshot could be reused, so the data file grew instead",
        dir.display()
    )
}
