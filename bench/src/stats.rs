//! Latency summaries and the printed table. Pure code: unit-tested on fixed data.

use std::fmt::Write as _;

/// Nearest-rank percentile of an ascending-sorted slice of nanoseconds (`p` in 0..=100).
/// `None` for an empty slice.
pub fn percentile(sorted: &[u64], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len();
    let rank = ((p / 100.0) * n as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, n) - 1])
}

/// What one row measured: per-request latencies of the successful requests plus counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    /// Successful requests in the measured window.
    pub ok: u64,
    /// Requests answered with the `capacity exceeded` envelope (not counted in `ok`).
    pub rejected: u64,
    /// Any other unexpected answer or transport error.
    pub errors: u64,
    /// Length of the measured window, seconds.
    pub seconds: f64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    pub mean_ns: u64,
}

impl Summary {
    /// Summarise `latencies` (any order; sorted in place).
    pub fn from_latencies(
        latencies: &mut [u64],
        rejected: u64,
        errors: u64,
        seconds: f64,
    ) -> Summary {
        latencies.sort_unstable();
        let sum: u128 = latencies.iter().map(|&x| x as u128).sum();
        Summary {
            ok: latencies.len() as u64,
            rejected,
            errors,
            seconds,
            p50_ns: percentile(latencies, 50.0).unwrap_or(0),
            p99_ns: percentile(latencies, 99.0).unwrap_or(0),
            max_ns: latencies.last().copied().unwrap_or(0),
            mean_ns: if latencies.is_empty() {
                0
            } else {
                (sum / latencies.len() as u128) as u64
            },
        }
    }

    /// Successful requests per second.
    pub fn per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.ok as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// Share of all answered requests that were capacity rejections, 0..=1.
    pub fn rejected_share(&self) -> f64 {
        let all = self.ok + self.rejected + self.errors;
        if all == 0 {
            0.0
        } else {
            self.rejected as f64 / all as f64
        }
    }
}

/// One printed row.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Row {
    pub scenario: String,
    pub concurrency: usize,
    /// Per call, from its first attempt to its successful answer (retries after capacity
    /// rejections and their back-off included).
    pub summary: Summary,
    /// Per successful attempt only (the request that got a slot); JSON only.
    pub attempts: Option<Summary>,
    /// Peak daemon RSS during the row (VmHWM after a reset), KiB.
    pub peak_rss_kib: Option<u64>,
    /// Peak anonymous RSS (`RssAnon`, sampled every 25 ms), KiB: RSS without the mapped
    /// store file.
    pub peak_anon_kib: Option<u64>,
    /// Daemon CPU time (user + system) ÷ successful calls, µs.
    pub daemon_cpu_us_per_call: Option<f64>,
    /// Mean server-side call time (the daemon's `worldd_call_seconds`), ns.
    pub server_mean_ns: Option<u64>,
    /// Store operations per group commit (`worldd_commit_operations_total` ÷
    /// `worldd_commit_batches_total`).
    pub ops_per_batch: Option<f64>,
    /// Group commits per call.
    pub commits_per_call: Option<f64>,
    /// Share of the row's wall time the store writer spent building or committing batches.
    pub writer_busy: Option<f64>,
    /// Mean µs per group commit running its operations.
    pub build_us_per_commit: Option<f64>,
    /// Mean µs per group commit inside LMDB's commit (page writes, their sync and the meta
    /// page's write; the meta page's sync is the syncing thread's).
    pub sync_us_per_commit: Option<f64>,
    /// 4 KiB pages the store writer wrote per group commit: its thread's `wchar`
    /// (`/proc/PID/task/TID/io`) ÷ group commits ÷ 4096 (LMDB's page writes plus one small
    /// meta-page write per commit; nothing else writes on that thread).
    pub pages_per_commit: Option<f64>,
    /// Bytes the daemon passed to write system calls (`/proc/PID/io` `wchar`) ÷ calls, KiB.
    pub write_kib_per_call: Option<f64>,
    /// calls/s of this row ÷ calls/s of the health baseline at the same concurrency.
    pub vs_health_rate: Option<f64>,
    /// p50 of this row ÷ p50 of the health baseline at the same concurrency.
    pub vs_health_p50: Option<f64>,
    /// The block device that holds the store, as `/proc/diskstats` names it, when the row's
    /// disk figures (`disk_*` in [`Row::extra`]) were read from it.
    pub disk_device: Option<String>,
    /// Further named facts for the JSON (conditions of the machine during the row).
    pub extra: Vec<(String, f64)>,
}

impl Row {
    /// The named fact `name` of [`Row::extra`], if recorded.
    pub fn extra(&self, name: &str) -> Option<f64> {
        self.extra.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
    }
}

fn ms(ns: u64) -> String {
    let v = ns as f64 / 1e6;
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

fn opt<T>(v: Option<T>, f: impl Fn(T) -> String) -> String {
    v.map(f).unwrap_or_else(|| "-".into())
}

fn mib(kib: Option<u64>) -> String {
    opt(kib, |k| format!("{:.1}", k as f64 / 1024.0))
}

fn ratio(r: Option<f64>) -> String {
    opt(r, |x| {
        if x >= 10.0 {
            format!("{x:.1}x")
        } else {
            format!("{x:.3}x")
        }
    })
}

/// The table of request rows, fixed-width, one header line.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let line = |out: &mut String, c: [&str; 18]| {
        let _ = writeln!(
            out,
            "{:<13} {:>4} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7} {:>5} {:>5} {:>6} {:>5} {:>6} {:>6} {:>6} {:>5} {:>8} {:>8}",
            c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11], c[12], c[13], c[14], c[15], c[16], c[17]
        );
    };
    line(
        &mut out,
        [
            "scenario", "conc", "calls/s", "p50 ms", "p99 ms", "max ms", "rejectd", "srv ms",
            "batch", "wrtr", "lmdbus", "pg/cm", "cpu us", "wr KiB", "RSS M", "anonM", "rate/hl",
            "p50/hl",
        ],
    );
    for r in rows {
        let s = &r.summary;
        let rejected = if s.rejected == 0 && s.errors == 0 {
            "0".to_string()
        } else if s.errors == 0 {
            format!("{:.0}%", s.rejected_share() * 100.0)
        } else {
            format!("{:.0}%+{}e", s.rejected_share() * 100.0, s.errors)
        };
        let cells = [
            r.scenario.clone(),
            r.concurrency.to_string(),
            format!("{:.0}", s.per_second()),
            ms(s.p50_ns),
            ms(s.p99_ns),
            ms(s.max_ns),
            rejected,
            opt(r.server_mean_ns, ms),
            opt(r.ops_per_batch, |b| format!("{b:.1}")),
            opt(r.writer_busy, |w| format!("{:.0}%", w * 100.0)),
            opt(r.sync_us_per_commit, |u| format!("{u:.0}")),
            opt(r.pages_per_commit, |p| format!("{p:.1}")),
            opt(r.daemon_cpu_us_per_call, |c| format!("{c:.0}")),
            opt(r.write_kib_per_call, |k| format!("{k:.1}")),
            mib(r.peak_rss_kib),
            mib(r.peak_anon_kib),
            ratio(r.vs_health_rate),
            ratio(r.vs_health_p50),
        ];
        line(&mut out, cells.each_ref().map(String::as_str));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles_on_fixed_data() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 99.0), Some(99));
        assert_eq!(percentile(&v, 100.0), Some(100));
        assert_eq!(percentile(&v, 0.0), Some(1));
        assert_eq!(percentile(&[7], 99.0), Some(7));
        assert_eq!(percentile(&[], 50.0), None);
        // Ten samples: p50 is the 5th, p99 the 10th.
        let w = [10, 20, 30, 40, 50, 60, 70, 80, 90, 1000];
        assert_eq!(percentile(&w, 50.0), Some(50));
        assert_eq!(percentile(&w, 99.0), Some(1000));
    }

    #[test]
    fn summary_and_table_on_fixed_data() {
        // Unsorted input, in nanoseconds: 1..=4 ms plus one 9 ms outlier.
        let mut lat = vec![4_000_000, 1_000_000, 9_000_000, 2_000_000, 3_000_000];
        let s = Summary::from_latencies(&mut lat, 5, 0, 2.0);
        assert_eq!(lat, [1_000_000, 2_000_000, 3_000_000, 4_000_000, 9_000_000]);
        assert_eq!(
            (s.ok, s.p50_ns, s.p99_ns, s.max_ns),
            (5, 3_000_000, 9_000_000, 9_000_000)
        );
        assert_eq!(s.mean_ns, 3_800_000);
        assert_eq!(s.per_second(), 2.5);
        assert_eq!(s.rejected_share(), 0.5);
        let rows = [
            Row {
                scenario: "health".into(),
                concurrency: 1,
                summary: Summary {
                    ok: 2000,
                    seconds: 1.0,
                    p50_ns: 100_000,
                    p99_ns: 250_000,
                    max_ns: 12_345_678,
                    ..Summary::default()
                },
                peak_rss_kib: Some(10 * 1024),
                peak_anon_kib: Some(2560),
                daemon_cpu_us_per_call: Some(41.6),
                write_kib_per_call: Some(0.0),
                ..Row::default()
            },
            Row {
                scenario: "ailang-read".into(),
                concurrency: 1,
                summary: s,
                server_mean_ns: Some(2_500_000),
                ops_per_batch: Some(1.34),
                writer_busy: Some(0.716),
                sync_us_per_commit: Some(498.3),
                pages_per_commit: Some(23.46),
                vs_health_rate: Some(0.00125),
                vs_health_p50: Some(30.0),
                ..Row::default()
            },
        ];
        let t = table(&rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        assert!(lines[0].starts_with("scenario"), "{t}");
        let health: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(
            health,
            [
                "health", "1", "2000", "0.100", "0.250", "12.3", "0", "-", "-", "-", "-", "-",
                "42", "0.0", "10.0", "2.5", "-", "-"
            ]
        );
        let read: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(
            read,
            [
                "ailang-read",
                "1",
                "2",
                "3.000",
                "9.000",
                "9.000",
                "50%",
                "2.500",
                "1.3",
                "72%",
                "498",
                "23.5",
                "-",
                "-",
                "-",
                "-",
                "0.001x",
                "30.0x"
            ]
        );
        // Columns line up: every line has the same width.
        assert!(lines.iter().all(|l| l.len() == lines[0].len()), "{t}");
    }
}
