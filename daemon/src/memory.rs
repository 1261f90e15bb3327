//! Handing freed heap back to the kernel once a burst of large requests is over.
//!
//! glibc's allocator keeps what it frees for reuse, in every thread's arena: after a burst of
//! megabyte writes the daemon went on holding about 100 MiB of anonymous memory it no longer
//! used, until it exited. A fixed `mmap` threshold would return each large buffer at once, but
//! made megabyte writes a quarter slower (see `docs/benchmarks.md`, "Attacks"). Instead, every
//! [`ServerConfig::memory_trim`](crate::edge::ServerConfig::memory_trim) the daemon looks at
//! its anonymous memory, and when it has grown by [`GROWTH_BYTES`] since the last trim and no
//! request body is held (the burst is over), it asks the allocator to return its free pages
//! (`malloc_trim`). A daemon at rest never trims twice for the same memory.

use std::time::Duration;

use crate::metrics::Metrics;

/// How much the anonymous memory must have grown since the last trim before another: small
/// enough to catch a burst of large bodies, large enough that ordinary traffic never trims.
pub const GROWTH_BYTES: u64 = 16 * 1024 * 1024;

/// Look every `every`, and trim when memory grew and no body is held. Runs until dropped.
pub async fn trim_after_bursts(every: Duration, metrics: Metrics) {
    let mut watch = Watch::new(anonymous_bytes().unwrap_or(0));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(now) = anonymous_bytes() else {
            return;
        };
        if !watch.due(now, metrics.body_bytes_in_flight() > 0) {
            continue;
        }
        // The trim walks every arena under its lock; keep it off the runtime's workers.
        let Ok(after) = tokio::task::spawn_blocking(move || {
            release_free_heap();
            anonymous_bytes()
        })
        .await
        else {
            return;
        };
        let after = after.unwrap_or(now);
        metrics.memory_trimmed(now.saturating_sub(after));
        tracing::debug!(before = now, after, "returned free heap to the kernel");
        watch.trimmed(after);
    }
}

/// When to trim: the lowest anonymous memory seen since the last trim (or what a trim left),
/// so that memory a trim cannot give back is never trimmed for again.
#[derive(Debug)]
struct Watch {
    floor: u64,
}

impl Watch {
    fn new(now: u64) -> Watch {
        Watch { floor: now }
    }

    /// Whether to trim now, with `now` bytes held and `busy` when a request body is held.
    fn due(&mut self, now: u64, busy: bool) -> bool {
        self.floor = self.floor.min(now);
        !busy && now >= self.floor + GROWTH_BYTES
    }

    fn trimmed(&mut self, after: u64) {
        self.floor = after;
    }
}

/// The process's anonymous resident memory (`RssAnon`), in bytes; `None` where the kernel does
/// not report it.
pub fn anonymous_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kib * 1024)
}

/// Return the allocator's free pages to the kernel.
fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists, under its locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    #[test]
    fn a_trim_is_due_after_growth_once_no_body_is_held_and_never_twice_for_the_same_memory() {
        let mut w = Watch::new(40 * MIB);
        // Ordinary growth, and a dip that lowers the floor.
        assert!(!w.due(50 * MIB, false));
        assert!(!w.due(30 * MIB, false));
        // 16 MiB over the floor, but a body is still held: the burst is not over.
        assert!(!w.due(46 * MIB, true));
        assert!(w.due(46 * MIB, false));
        // What the trim could not give back becomes the floor.
        w.trimmed(44 * MIB);
        assert!(!w.due(44 * MIB, false));
        assert!(!w.due(59 * MIB, false));
        assert!(w.due(60 * MIB, false));
    }

    #[test]
    fn anonymous_memory_is_read_and_trimming_returns_a_freed_burst() {
        let Some(before) = anonymous_bytes() else {
            return; // not Linux
        };
        assert!(before > 0);
        // Many mid-sized blocks, below the mmap threshold, freed but for the last: glibc
        // cannot shrink its heap past the block still in use, so the pages stay resident.
        let mut blocks: Vec<Vec<u8>> = (0..512).map(|_| vec![1u8; 64 * 1024]).collect();
        let kept = blocks.pop();
        drop(blocks);
        let held = anonymous_bytes().unwrap();
        release_free_heap();
        let after = anonymous_bytes().unwrap();
        drop(kept);
        if cfg!(all(target_os = "linux", target_env = "gnu")) {
            assert!(
                held.saturating_sub(after) > 16 * 1024 * 1024,
                "held {held} after {after}"
            );
        }
    }
}
