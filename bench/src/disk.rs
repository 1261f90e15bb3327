//! What the store's disk did during a row, from `/proc/diskstats`: the write requests it
//! completed, the bytes they carried, the cache flushes, and the share of the time it had
//! requests in flight.
//!
//! The page-write probe says what the disk can take; these say what a row gave it. A row whose
//! disk was busy a fraction of the time while its store writer was near 100 % busy is held by
//! the writer's serial commits (each waits for its own page writes and sync), not by the disk.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Instant;

use crate::stats::Row;

/// One block device's counters, cumulative since boot.
#[derive(Debug, Clone, PartialEq)]
pub struct Counters {
    pub device: String,
    pub writes: u64,
    pub sectors_written: u64,
    pub flushes: u64,
    /// Milliseconds with at least one request in flight (`io_ticks`).
    pub busy_ms: u64,
}

impl Counters {
    /// The counters of the device that holds `dir`, when `/proc/diskstats` names it (a file
    /// system on an anonymous device, such as tmpfs or overlayfs, has none).
    pub fn of(dir: &Path) -> Option<Counters> {
        let dev = std::fs::metadata(dir).ok()?.dev();
        Counters::parse(
            &std::fs::read_to_string("/proc/diskstats").ok()?,
            libc::major(dev).into(),
            libc::minor(dev).into(),
        )
    }

    /// The line of device `major:minor` in `/proc/diskstats` text. The fields after the name:
    /// reads, reads merged, sectors read, ms reading, writes, writes merged, sectors written,
    /// ms writing, in flight, ms busy, weighted ms, four of discards, flushes, ms flushing.
    pub fn parse(text: &str, major: u64, minor: u64) -> Option<Counters> {
        text.lines().find_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let number = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
            if number(0)? != major || number(1)? != minor {
                return None;
            }
            Some(Counters {
                device: (*f.get(2)?).to_owned(),
                writes: number(7)?,
                sectors_written: number(9)?,
                busy_ms: number(12)?,
                // Kernels before 4.18 have no flush fields.
                flushes: number(18).unwrap_or(0),
            })
        })
    }
}

/// The counters before a row, to be read again after it.
pub struct Sample {
    before: Counters,
    at: Instant,
    dir: std::path::PathBuf,
}

impl Sample {
    pub fn start(dir: &Path) -> Option<Sample> {
        Some(Sample {
            before: Counters::of(dir)?,
            at: Instant::now(),
            dir: dir.to_path_buf(),
        })
    }

    /// Add the row's disk figures to `row`: per call at the row's measured rate (the counters
    /// span the whole row, its warm-up included), and the share of the time the device was
    /// busy. The whole machine's writes to that device count, the load generator's included.
    pub fn finish(self, row: &mut Row) {
        let Some(after) = Counters::of(&self.dir) else {
            return;
        };
        let seconds = self.at.elapsed().as_secs_f64();
        let calls = row.summary.per_second() * seconds;
        if after.device != self.before.device || calls <= 0.0 || seconds <= 0.0 {
            return;
        }
        let d = |a: u64, b: u64| a.saturating_sub(b) as f64;
        let b = &self.before;
        for (name, value) in [
            ("disk_writes_per_call", d(after.writes, b.writes) / calls),
            (
                "disk_kib_per_call",
                d(after.sectors_written, b.sectors_written) * 512.0 / 1024.0 / calls,
            ),
            ("disk_flushes_per_call", d(after.flushes, b.flushes) / calls),
            (
                "disk_writes_per_second",
                d(after.writes, b.writes) / seconds,
            ),
            (
                "disk_busy_share",
                (d(after.busy_ms, b.busy_ms) / 1e3 / seconds).min(1.0),
            ),
        ] {
            row.extra.push((name.into(), value));
        }
        row.disk_device = Some(after.device);
    }
}

/// One line: for each durable row, what the disk completed per call and how busy it was.
pub fn line(rows: &[Row]) -> String {
    let mut device = None;
    let parts: Vec<String> = rows
        .iter()
        .filter(|r| r.writer_busy.is_some())
        .filter_map(|r| {
            device = device.or(r.disk_device.as_deref());
            Some(format!(
                "{} @{} {:.1} write requests, {:.1} KiB and {:.2} flushes per call ({:.0} requests/s, busy {:.0} %)",
                r.scenario,
                r.concurrency,
                r.extra("disk_writes_per_call")?,
                r.extra("disk_kib_per_call")?,
                r.extra("disk_flushes_per_call")?,
                r.extra("disk_writes_per_second")?,
                r.extra("disk_busy_share")? * 100.0
            ))
        })
        .collect();
    device.map_or_else(String::new, |device| {
        crate::labelled_line(&format!("disk {device}"), &parts, "; ")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::row;

    const DISKSTATS: &str = "\
 253       0 vda 11861 4036 1105878 3470 8217355 1198521 229914362 3165745 0 5013740 6398437 0 0 0 0 1060549 205839
 253       1 vda1 11000 4000 1100000 3400 8217000 1198000 229900000 3165000 0 5013000 6398000 0 0 0 0 0 0
   7       0 loop0 4 0 8 0 0 0 0 0 0 4 0 0 0 0 0 0 0
";

    /// The device is found by its numbers, not its place, and each counter by its field.
    #[test]
    fn a_devices_counters_are_read_from_its_own_line() {
        assert_eq!(
            Counters::parse(DISKSTATS, 253, 0),
            Some(Counters {
                device: "vda".into(),
                writes: 8_217_355,
                sectors_written: 229_914_362,
                flushes: 1_060_549,
                busy_ms: 5_013_740,
            })
        );
        assert_eq!(
            Counters::parse(DISKSTATS, 253, 1).map(|c| c.device),
            Some("vda1".into())
        );
        assert_eq!(Counters::parse(DISKSTATS, 8, 0), None, "no such device");
        let old_kernel = " 8 0 sda 1 0 2 0 5 0 80 0 0 7 0";
        assert_eq!(
            Counters::parse(old_kernel, 8, 0).map(|c| (c.writes, c.flushes, c.busy_ms)),
            Some((5, 0, 7)),
            "no flush fields: none counted"
        );
    }

    /// Durable rows only; a row without disk figures leaves itself out, and no figures at all
    /// leave no line.
    #[test]
    fn the_disk_line_gives_each_durable_rows_requests_bytes_and_flushes_per_call() {
        let mut read = Row {
            writer_busy: Some(0.96),
            disk_device: Some("vda".into()),
            ..row("ailang-read", 5_000)
        };
        for (name, v) in [
            ("disk_writes_per_call", 3.3),
            ("disk_kib_per_call", 19.5),
            ("disk_flushes_per_call", 0.22),
            ("disk_writes_per_second", 16_000.0),
            ("disk_busy_share", 0.62),
        ] {
            read.extra.push((name.into(), v));
        }
        let health = row("health", 30_000);
        assert_eq!(
            line(&[health.clone(), read.clone()]),
            "disk vda: ailang-read @32 3.3 write requests, 19.5 KiB and 0.22 flushes per call (16000 requests/s, busy 62 %)\n"
        );
        read.extra.retain(|(k, _)| k != "disk_busy_share");
        assert_eq!(line(&[health, read]), "");
    }
}
