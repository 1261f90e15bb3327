//! How full the store is, and when it stops taking client work.
//!
//! The operator sets a **ceiling** (the most the store may occupy) and a **reserve** (room
//! kept for calls already in flight and for the operator's own verbs). The store grows by
//! itself up to the ceiling; at 80 % and 95 % of it the daemon warns (a log line on each
//! crossing, gauges in `/v1/metrics`); once the used size plus the reserve passes the ceiling,
//! or the filesystem has less free space than the reserve, new client work is refused with
//! [`Full`] before anything is written or spent. Calls already admitted still commit into the
//! reserve, and `session mint`, `session revoke` and `doctor` keep working.
//!
//! # Why a sparse map reserved at the ceiling, not a map grown at run time
//!
//! LMDB's `mdb_env_set_mapsize` may only be called while no transaction of this process is
//! active, readers on other threads included: growing the map in the writer would need a lock
//! that every read takes shared and the writer takes exclusively between batches, and a read
//! that calls into the writer (several do) would then have to be kept from deadlocking with
//! it. Reserving the map at the ceiling from the start needs none of that: without
//! `MDB_WRITEMAP` the data file is not preallocated, so the reservation is address space only
//! and the file grows page by page as LMDB writes. What must be enforced is then a size, not a
//! mapping: the used size is LMDB's high-water mark, `(last page number + 1) × page size`
//! (`mdb_env_info`, read without a transaction after every group commit), which is also what
//! the data file occupies. The map itself is the hard stop (`MapFull`) that the reserve keeps
//! admitted calls away from.
//!
//! The one remap left is LMDB's `MDB_MAP_RESIZED`: another process that opened the store with
//! a larger map wrote past ours. The store adopts the size that process recorded
//! (`mdb_env_set_mapsize(0)`) under an exclusive hold of the map lock that every transaction
//! of this process holds shared, so the precondition is checked, not assumed; see
//! [`crate::store`].

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

/// Default ceiling: 16 GiB (the map is sparse, so the reservation costs nothing until used).
pub const DEFAULT_CEILING: u64 = 16 << 30;
/// Default reserve: 256 MiB, or an eighth of a smaller ceiling.
pub const DEFAULT_RESERVE: u64 = 256 << 20;
/// The warning thresholds, in percent of the ceiling.
pub const WARN_PERCENT: [u8; 2] = [80, 95];

/// Why new client work is refused. The agent-facing text is [`Full::AGENT_MESSAGE`]; this
/// Display, with the figures, is for the operator's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Full {
    #[error("the store has used {used} of its {ceiling}-byte ceiling and keeps a {reserve}-byte reserve; raise the ceiling (serve --store-ceiling) to take new calls")]
    Ceiling {
        used: u64,
        ceiling: u64,
        reserve: u64,
    },
    #[error("the store's filesystem has {free} bytes free, less than the {reserve}-byte reserve; free space on it, or lower the reserve (serve --store-reserve, or store_reserve in [serve] of world.toml) below what is free, to take new calls")]
    Disk { free: u64, reserve: u64 },
    /// The store's files were replaced or removed under the daemon ([`crate::store::Store::watch`]
    /// logged what it found): whatever it wrote would go to the deleted file.
    #[error("the store's files were replaced or removed while this daemon served them (the error logged when it was seen says how to keep what it wrote since); restart the daemon on the store now at its path")]
    Replaced,
    /// The store's data file was rolled back (or replaced by another daemon's copy) under the
    /// daemon ([`crate::store::Store::watch`] or the writer logged what it found): whatever it
    /// wrote would go over a store that lacks what it acknowledged.
    #[error("the store's data file was rolled back or written by another process while this daemon served it (the error logged when it was seen says what it found); stop the daemon, run `worldd doctor` on the store, and start it again")]
    RolledBack,
}

impl Full {
    /// What a refused client is told: no figures about the host.
    pub const AGENT_MESSAGE: &'static str =
        "the world store is full; new calls are refused until an operator makes room";
}

/// Ceiling and reserve, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub ceiling: u64,
    pub reserve: u64,
}

/// Why a ceiling or reserve was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the store reserve ({reserve} bytes) must be smaller than its ceiling ({ceiling} bytes)")]
pub struct BadLimits {
    pub ceiling: u64,
    pub reserve: u64,
}

impl Limits {
    /// `reserve` defaults to [`DEFAULT_RESERVE`] or an eighth of the ceiling, the smaller.
    pub fn new(ceiling: u64, reserve: Option<u64>) -> Result<Limits, BadLimits> {
        let reserve = reserve.unwrap_or((ceiling / 8).min(DEFAULT_RESERVE));
        if reserve >= ceiling {
            return Err(BadLimits { ceiling, reserve });
        }
        Ok(Limits { ceiling, reserve })
    }
}

/// One reading of the store's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// LMDB's high-water mark, bytes.
    pub used: u64,
    pub limits: Limits,
    /// Bytes available to this process on the store's filesystem; `None` when unknown.
    pub disk_free: Option<u64>,
}

impl Usage {
    /// `used / ceiling`.
    pub fn ratio(&self) -> f64 {
        self.used as f64 / self.limits.ceiling.max(1) as f64
    }

    /// The highest warning threshold reached (80 or 95), if any.
    pub fn warning(&self) -> Option<u8> {
        WARN_PERCENT
            .iter()
            .rev()
            .copied()
            .find(|p| self.used.saturating_mul(100) >= self.limits.ceiling * u64::from(*p))
    }

    /// Why client work must be refused now, if it must.
    pub fn refusal(&self) -> Option<Full> {
        let Limits { ceiling, reserve } = self.limits;
        if self.used.saturating_add(reserve) > ceiling {
            return Some(Full::Ceiling {
                used: self.used,
                ceiling,
                reserve,
            });
        }
        match self.disk_free {
            Some(free) if free < reserve => Some(Full::Disk { free, reserve }),
            _ => None,
        }
    }
}

/// The latest reading, shared between the writer (which takes it after every group commit)
/// and admission (which consults it for every call without touching LMDB).
#[derive(Debug)]
pub struct Gauge {
    limits: Limits,
    used: AtomicU64,
    /// `u64::MAX`: unknown.
    disk_free: AtomicU64,
    /// What was last reported: 0 none, 80, 95, or [`REFUSING`].
    reported: AtomicU8,
}

const REFUSING: u8 = 100;

/// Whether this process logs its stores' thresholds ([`log_thresholds`]).
static LOG_THRESHOLDS: AtomicBool = AtomicBool::new(false);

/// Log each store's crossings of the warning thresholds and of the reserve: for the daemon,
/// which takes client calls. The operator's verbs open a store with default limits, not the
/// daemon's, and refuse no calls: a "new client calls are refused" line from `doctor` or
/// `session new` on a small disk was false.
pub fn log_thresholds() {
    LOG_THRESHOLDS.store(true, Ordering::Relaxed);
}

impl Gauge {
    pub fn new(limits: Limits) -> Gauge {
        Gauge {
            limits,
            used: AtomicU64::new(0),
            disk_free: AtomicU64::new(u64::MAX),
            reported: AtomicU8::new(0),
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The latest reading.
    pub fn usage(&self) -> Usage {
        let free = self.disk_free.load(Ordering::Relaxed);
        Usage {
            used: self.used.load(Ordering::Relaxed),
            limits: self.limits,
            disk_free: (free != u64::MAX).then_some(free),
        }
    }

    /// Record a reading; log one line whenever the state crosses a threshold (up or down).
    pub fn observe(&self, used: u64, disk_free: Option<u64>) {
        self.used.store(used, Ordering::Relaxed);
        self.disk_free
            .store(disk_free.unwrap_or(u64::MAX), Ordering::Relaxed);
        let usage = self.usage();
        let refusal = usage.refusal();
        let level = match (refusal, usage.warning()) {
            (Some(_), _) => REFUSING,
            (None, Some(p)) => p,
            (None, None) => 0,
        };
        let before = self.reported.swap(level, Ordering::Relaxed);
        if !LOG_THRESHOLDS.load(Ordering::Relaxed) {
            return;
        }
        match crossing(before, level, &usage) {
            Some((tracing::Level::ERROR, line)) => {
                tracing::error!(used = usage.used, ceiling = usage.limits.ceiling, "{line}")
            }
            Some((tracing::Level::WARN, line)) => {
                tracing::warn!(used = usage.used, ceiling = usage.limits.ceiling, "{line}")
            }
            Some((_, line)) => {
                tracing::info!(used = usage.used, ceiling = usage.limits.ceiling, "{line}")
            }
            None => {}
        }
    }
}

/// The line a change of state from `before` to `level` (0 none, 80, 95, or refusing) is logged
/// with, at its level; `None` when the state did not change. Each says what happened: a store
/// that takes calls again after refusing them says so (and not "below 80 % again" of a store
/// that was never above it, as after a full disk was enlarged).
fn crossing(before: u8, level: u8, usage: &Usage) -> Option<(tracing::Level, String)> {
    use tracing::Level;
    if before == level {
        return None;
    }
    let pct = usage.ratio() * 100.0;
    let warning = |p: u8| {
        format!(
            "store at {pct:.1}% of its ceiling (warning threshold {p}%); new calls are refused past the {}-byte reserve; raise --store-ceiling (`worldd usage` names the episodes whose calls filled it)",
            usage.limits.reserve
        )
    };
    let line = match (usage.refusal(), level) {
        (Some(why), _) => (
            Level::ERROR,
            format!("store full: new client calls are refused: {why}"),
        ),
        (None, 0) if before == REFUSING => {
            let free = usage
                .disk_free
                .map(|f| format!(", {f} bytes free on its filesystem"))
                .unwrap_or_default();
            (
                Level::INFO,
                format!(
                    "store takes new client calls again ({pct:.1}% of its ceiling used{free}; the reserve is {} bytes)",
                    usage.limits.reserve
                ),
            )
        }
        (None, 0) => (
            Level::INFO,
            format!(
                "store below {}% of its ceiling again ({pct:.1}%)",
                WARN_PERCENT[0]
            ),
        ),
        (None, p) if before == REFUSING => (
            Level::WARN,
            format!("store takes new client calls again; {}", warning(p)),
        ),
        (None, p) => (Level::WARN, warning(p)),
    };
    Some(line)
}

/// Bytes available to an unprivileged writer on the filesystem holding `path`.
pub fn disk_free(path: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: `c` is a valid NUL-terminated path; `st` is what `available` hands over.
    available(|st| unsafe { libc::statvfs(c.as_ptr(), st) })
}

/// [`disk_free`] of the filesystem holding an open file: no path to resolve, which matters to
/// the store's writer, which asks after every group commit.
pub(crate) fn disk_free_of(file: &std::fs::File) -> Option<u64> {
    use std::os::fd::AsRawFd;
    // SAFETY: `file` is an open descriptor for the call's duration; `st` is what `available`
    // hands over.
    available(|st| unsafe { libc::fstatvfs(file.as_raw_fd(), st) })
}

/// The free bytes of the `statvfs` structure that `fill` writes into the memory it is given,
/// returning 0 when it did; `None` when it failed.
fn available(fill: impl FnOnce(*mut libc::statvfs) -> libc::c_int) -> Option<u64> {
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // `st` is writable memory of the right type, read only after `fill` reports success.
    if fill(st.as_mut_ptr()) != 0 {
        return None;
    }
    // SAFETY: `fill` returned 0, so it initialised the structure.
    let st = unsafe { st.assume_init() };
    #[allow(clippy::unnecessary_cast)] // the field types differ between libc targets
    Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The writer's way of asking (an open directory) and the path's way agree.
    #[test]
    fn an_open_directorys_free_space_is_its_paths() {
        let dir = tempfile::tempdir().unwrap();
        let by_path = disk_free(dir.path()).unwrap();
        let by_file = disk_free_of(&std::fs::File::open(dir.path()).unwrap()).unwrap();
        // Other processes may write meanwhile; a wrong field would be off by far more.
        assert!(
            by_path.abs_diff(by_file) < 256 * MIB,
            "{by_path} vs {by_file}"
        );
        assert!(by_file > 0);
    }

    const MIB: u64 = 1 << 20;

    fn usage(used: u64, free: Option<u64>) -> Usage {
        Usage {
            used,
            limits: Limits::new(100 * MIB, Some(3 * MIB)).unwrap(),
            disk_free: free,
        }
    }

    #[test]
    fn warnings_start_at_80_and_95_percent_of_the_ceiling() {
        assert_eq!(usage(79 * MIB, None).warning(), None);
        assert_eq!(usage(80 * MIB, None).warning(), Some(80));
        assert_eq!(usage(95 * MIB - 1, None).warning(), Some(80));
        assert_eq!(usage(95 * MIB, None).warning(), Some(95));
    }

    #[test]
    fn client_work_is_refused_past_the_reserve_or_when_the_disk_is_short() {
        assert_eq!(usage(97 * MIB, Some(10 * MIB)).refusal(), None);
        assert_eq!(
            usage(97 * MIB + 1, None).refusal(),
            Some(Full::Ceiling {
                used: 97 * MIB + 1,
                ceiling: 100 * MIB,
                reserve: 3 * MIB
            })
        );
        assert_eq!(
            usage(MIB, Some(3 * MIB - 1)).refusal(),
            Some(Full::Disk {
                free: 3 * MIB - 1,
                reserve: 3 * MIB
            })
        );
    }

    #[test]
    fn the_reserve_defaults_and_must_stay_below_the_ceiling() {
        assert_eq!(
            Limits::new(16 << 30, None).unwrap().reserve,
            DEFAULT_RESERVE
        );
        assert_eq!(Limits::new(8 * MIB, None).unwrap().reserve, MIB);
        assert_eq!(
            Limits::new(MIB, Some(MIB)).unwrap_err().to_string(),
            "the store reserve (1048576 bytes) must be smaller than its ceiling (1048576 bytes)"
        );
    }

    #[test]
    fn the_gauge_reports_the_latest_reading() {
        let g = Gauge::new(Limits::new(100 * MIB, Some(3 * MIB)).unwrap());
        assert_eq!(g.usage().disk_free, None);
        g.observe(96 * MIB, Some(50 * MIB));
        assert_eq!(g.usage().warning(), Some(95));
        assert_eq!(g.usage().refusal(), None);
        g.observe(98 * MIB, Some(50 * MIB));
        assert!(g.usage().refusal().is_some());
        g.observe(10 * MIB, None);
        assert_eq!((g.usage().warning(), g.usage().refusal()), (None, None));
    }

    /// After a full disk was enlarged, the line says that calls are taken again, not that the
    /// store is "below 80% of its ceiling again" (it never was above).
    #[test]
    fn a_full_disk_made_larger_says_calls_are_taken_again() {
        let after = usage(MIB, Some(50 * MIB));
        assert_eq!(
            crossing(REFUSING, 0, &after),
            Some((
                tracing::Level::INFO,
                "store takes new client calls again (1.0% of its ceiling used, 52428800 bytes free on its filesystem; the reserve is 3145728 bytes)".to_owned()
            ))
        );
        // Still past a warning threshold: both said, as a warning.
        assert_eq!(
            crossing(REFUSING, 80, &usage(90 * MIB, None)),
            Some((
                tracing::Level::WARN,
                "store takes new client calls again; store at 90.0% of its ceiling (warning threshold 80%); new calls are refused past the 3145728-byte reserve; raise --store-ceiling (`worldd usage` names the episodes whose calls filled it)".to_owned()
            ))
        );
        // Below 80% again is said only of a store that was above it and took calls.
        assert_eq!(
            crossing(80, 0, &usage(10 * MIB, None)),
            Some((
                tracing::Level::INFO,
                "store below 80% of its ceiling again (10.0%)".to_owned()
            ))
        );
        assert_eq!(crossing(0, 0, &usage(10 * MIB, None)), None);
    }

    /// A disk smaller than the reserve (the default 256 MiB on a 20 MB disk) refuses every
    /// call: the line names the reserve's setting as a way out, not only freeing space.
    #[test]
    fn a_disk_smaller_than_the_reserve_names_the_reserve_setting() {
        let small = usage(MIB, Some(2 * MIB));
        assert_eq!(
            crossing(0, REFUSING, &small),
            Some((
                tracing::Level::ERROR,
                "store full: new client calls are refused: the store's filesystem has 2097152 bytes free, less than the 3145728-byte reserve; free space on it, or lower the reserve (serve --store-reserve, or store_reserve in [serve] of world.toml) below what is free, to take new calls".to_owned()
            ))
        );
    }
}
