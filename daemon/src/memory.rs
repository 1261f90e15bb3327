//! Handing freed heap back to the kernel once a burst of large requests is over.
//!
//! glibc's allocator keeps what it frees for reuse, in every thread's arena: after a burst of
//! megabyte writes the daemon went on holding about 200 MiB of anonymous memory it no longer
//! used, until it exited. A fixed `mmap` threshold would return each large buffer at once, but
//! made megabyte writes a quarter slower (see `docs/benchmarks.md`, "Attacks"). Instead, every
//! [`ServerConfig::memory_trim`](crate::edge::ServerConfig::memory_trim) the daemon compares
//! its anonymous resident memory with what its allocator has in use. When the difference,
//! memory resident but free, has grown by [`GROWTH_BYTES`] since the last trim and no request
//! body is held (the burst is over), it asks the allocator to return its free pages
//! (`malloc_trim`). A daemon at rest never trims twice for the same memory.

use std::time::Duration;

use crate::metrics::Metrics;

/// How much resident free memory must have grown since the last trim before another: small
/// enough to catch a burst of large bodies, large enough that ordinary traffic never trims.
pub const GROWTH_BYTES: u64 = 16 * 1024 * 1024;

/// Look every `every`, and trim when resident free memory grew and no body is held. Runs
/// until dropped.
pub async fn trim_after_bursts(every: Duration, metrics: Metrics) {
    let Some(first) = resident_free() else {
        return;
    };
    let mut watch = Watch::new(first);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        // Counting the allocator's use walks its arenas under their locks: off the workers.
        let Ok(Some(free)) = tokio::task::spawn_blocking(resident_free).await else {
            return;
        };
        if !watch.due(free, metrics.body_bytes_in_flight() > 0) {
            continue;
        }
        let Ok(after) = tokio::task::spawn_blocking(|| {
            let before = anonymous_bytes();
            release_free_heap();
            (before, anonymous_bytes(), resident_free())
        })
        .await
        else {
            return;
        };
        let (before, anon_after, free_after) = after;
        let returned = before
            .zip(anon_after)
            .map_or(0, |(b, a)| b.saturating_sub(a));
        metrics.memory_trimmed(returned);
        tracing::debug!(returned, "returned free heap to the kernel");
        watch.trimmed(free_after.unwrap_or(free));
    }
}

/// When to trim: the least resident free memory seen since the last trim (or what a trim
/// left), so that memory a trim cannot give back is never trimmed for again.
#[derive(Debug)]
struct Watch {
    floor: u64,
}

impl Watch {
    fn new(now: u64) -> Watch {
        Watch { floor: now }
    }

    /// Whether to trim now, with `free` bytes resident but unused and `busy` when a request
    /// body is held.
    fn due(&mut self, free: u64, busy: bool) -> bool {
        self.floor = self.floor.min(free);
        !busy && free >= self.floor + GROWTH_BYTES
    }

    fn trimmed(&mut self, free_after: u64) {
        self.floor = free_after;
    }
}

/// Anonymous resident memory the allocator does not have in use: its free chunks whose pages
/// are still resident (plus thread stacks and the like, which stay about the same). `None`
/// where either figure is not available.
fn resident_free() -> Option<u64> {
    Some(anonymous_bytes()?.saturating_sub(heap_in_use()?))
}

/// Bytes the allocator has handed out and not had back, in its arenas and its own mappings.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn heap_in_use() -> Option<u64> {
    // SAFETY: mallinfo2 only reads the allocator's statistics, under its locks.
    let info = unsafe { libc::mallinfo2() };
    Some((info.uordblks + info.hblkhd) as u64)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn heap_in_use() -> Option<u64> {
    None
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

    /// Set in the process of its own that
    /// [`anonymous_memory_is_read_and_trimming_returns_a_freed_burst`] runs in.
    const ALONE: &str = "WORLDD_TEST_TRIM_ALONE";

    #[test]
    fn anonymous_memory_is_read_and_trimming_returns_a_freed_burst() {
        // The figures are the whole process's, and the other tests of this binary allocate
        // and free beside this one: it runs alone, in a process of its own, as the store's
        // map-release test does.
        if std::env::var_os(ALONE).is_none() {
            let status = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "memory::tests::anonymous_memory_is_read_and_trimming_returns_a_freed_burst",
                ])
                .env(ALONE, "1")
                .status()
                .unwrap();
            assert!(status.success(), "the test, alone in its process: {status}");
            return;
        }
        let Some(before) = anonymous_bytes() else {
            return; // not Linux
        };
        assert!(before > 0);
        // Many mid-sized blocks, below the mmap threshold, freed but for the last: glibc
        // cannot shrink its heap past the block still in use, so the pages stay resident.
        let mut blocks: Vec<Vec<u8>> = (0..512).map(|_| vec![1u8; 64 * 1024]).collect();
        let kept = blocks.pop();
        let free_in_use = resident_free();
        drop(blocks);
        let held = anonymous_bytes().unwrap();
        let free_held = resident_free();
        release_free_heap();
        let after = anonymous_bytes().unwrap();
        let free_after = resident_free();
        drop(kept);
        if cfg!(all(target_os = "linux", target_env = "gnu")) {
            let (in_use, freed, trimmed) = (
                free_in_use.unwrap(),
                free_held.unwrap(),
                free_after.unwrap(),
            );
            // Freed and resident shows as free; trimmed, it is gone.
            assert!(freed >= in_use + 16 * MIB, "{in_use} then {freed}");
            assert!(
                held.saturating_sub(after) > 16 * MIB,
                "held {held} after {after}"
            );
            assert!(
                freed.saturating_sub(trimmed) > 16 * MIB,
                "{freed} then {trimmed}"
            );
        }
    }
}
