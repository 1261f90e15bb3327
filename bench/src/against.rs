//! `--against WORLDD`: this build's daemon alternated with another binary, round after round,
//! on the same machine in the same minutes.
//!
//! On a shared host one run's figures move by a third between sittings (steal, the disk's
//! sync time), far more than most changes move them, so a change is judged by alternating
//! the two builds and comparing each row's share of health, measured beside it on the same
//! daemon. Each round starts a fresh daemon of each build with its own plugins (those in the
//! binary's directory) and runs the request rows only (no fill, doctor or page probes).

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::stats::Row;
use crate::{request_daemon, request_rows, row_at, Args, RowCtx, Stop};

/// One build: what it is called in the report, its binary and its plugin directory.
pub(crate) struct Build {
    pub(crate) name: &'static str,
    pub(crate) worldd: PathBuf,
    /// The directory the daemon loads its plugins from: the binary's own.
    pub(crate) plugins: PathBuf,
}

impl Build {
    pub(crate) fn new(name: &'static str, worldd: &Path) -> Result<Build, String> {
        let plugins = worldd
            .parent()
            .ok_or_else(|| format!("{}: no directory", worldd.display()))?
            .to_path_buf();
        for needed in [worldd.to_path_buf(), plugins.join("libworldd_workspace.so")] {
            if !needed.exists() {
                return Err(format!(
                    "{} missing (--against takes a worldd binary with libworldd_workspace.so beside it)",
                    needed.display()
                ));
            }
        }
        Ok(Build {
            name,
            worldd: worldd.to_path_buf(),
            plugins,
        })
    }
}

/// Run the alternation and print the comparison.
pub(crate) fn run(
    args: &Args,
    this: &Path,
    baseline: &Path,
    run_dir: &Path,
    out: &Path,
    stop: Stop,
) -> Result<(), String> {
    let builds = [Build::new("baseline", baseline)?, Build::new("this", this)?];
    let rounds = args.rounds.max(1);
    // runs[round][build]
    let mut runs: Vec<[Vec<Row>; 2]> = Vec::new();
    let mut errors = Vec::new();
    for round in 0..rounds {
        let mut pair: [Vec<Row>; 2] = [Vec::new(), Vec::new()];
        for (b, build) in builds.iter().enumerate() {
            eprintln!(
                "round {}/{rounds}: {} ({})",
                round + 1,
                build.name,
                build.worldd.display()
            );
            let dir = run_dir.join(format!("{}-{round}", build.name));
            let (d, clients) = request_daemon(args, &build.worldd, &dir, &build.plugins)?;
            let mut ctx = RowCtx {
                d: &d,
                stop,
                backoff: crate::secs(args.backoff_ms / 1000.0),
                probe_dir: run_dir,
                errors: &mut errors,
            };
            pair[b] = request_rows(&mut ctx, &clients, args);
            d.stop()?;
        }
        runs.push(pair);
    }
    let compared = compare(&runs);
    eprintln!();
    print!("{}", report(&builds, &compared, rounds));
    let doc = json!({
        "baseline": builds[0].worldd.display().to_string(),
        "this": builds[1].worldd.display().to_string(),
        "rounds": rounds,
        "rows": compared.iter().map(Compared::to_json).collect::<Vec<_>>(),
        "errors": errors.iter().map(|(s, c, e)| json!({"scenario": s, "concurrency": c, "error": e})).collect::<Vec<_>>(),
    });
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    std::fs::write(
        out,
        serde_json::to_vec_pretty(&doc).map_err(|e| e.to_string())?,
    )
    .map_err(|e| format!("{}: {e}", out.display()))?;
    eprintln!("results: {}", out.display());
    Ok(())
}

/// One round of one row on one build.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Sample {
    calls_per_second: f64,
    share_of_health: f64,
    cpu_us_per_call: Option<f64>,
    /// The store writer's thread alone: the serial part of the call.
    writer_us_per_call: Option<f64>,
    steal: Option<f64>,
}

/// One request row (not health), every round, both builds.
#[derive(Debug, Clone, PartialEq)]
struct Compared {
    scenario: String,
    concurrency: usize,
    /// [baseline, this], one sample per round.
    samples: [Vec<Sample>; 2],
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

impl Compared {
    fn mean_share(&self, b: usize) -> Option<f64> {
        mean(self.samples[b].iter().map(|s| s.share_of_health))
    }

    fn mean_cpu(&self, b: usize) -> Option<f64> {
        mean(self.samples[b].iter().filter_map(|s| s.cpu_us_per_call))
    }

    fn mean_writer(&self, b: usize) -> Option<f64> {
        mean(self.samples[b].iter().filter_map(|s| s.writer_us_per_call))
    }

    /// This build's mean share of health over the baseline's, as a change (+0.10 = 10 % more).
    fn change(&self) -> Option<f64> {
        let (base, this) = (self.mean_share(0)?, self.mean_share(1)?);
        (base > 0.0).then(|| this / base - 1.0)
    }

    fn to_json(&self) -> Value {
        let side = |b: usize| {
            json!({
                "rounds": self.samples[b].iter().map(|s| json!({
                    "calls_per_second": s.calls_per_second,
                    "ratio_to_health_calls_per_second": s.share_of_health,
                    "daemon_cpu_us_per_call": s.cpu_us_per_call,
                    "writer_cpu_us_per_call": s.writer_us_per_call,
                    "cpu_steal_share": s.steal,
                })).collect::<Vec<_>>(),
                "mean_ratio_to_health": self.mean_share(b),
                "mean_daemon_cpu_us_per_call": self.mean_cpu(b),
                "mean_writer_cpu_us_per_call": self.mean_writer(b),
            })
        };
        json!({
            "scenario": self.scenario,
            "concurrency": self.concurrency,
            "baseline": side(0),
            "this": side(1),
            "change_of_mean_ratio": self.change(),
        })
    }
}

/// Every request row of the runs, in the order the first run measured them, with its share of
/// the health row measured beside it on the same daemon.
fn compare(runs: &[[Vec<Row>; 2]]) -> Vec<Compared> {
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    first[0]
        .iter()
        .filter(|r| r.scenario != "health")
        .map(|r| {
            let sample = |rows: &[Row]| -> Option<Sample> {
                let row = row_at(rows, &r.scenario, r.concurrency)?;
                Some(Sample {
                    calls_per_second: row.summary.per_second(),
                    share_of_health: row.vs_health_rate?,
                    cpu_us_per_call: row.daemon_cpu_us_per_call,
                    writer_us_per_call: row.extra("writer_cpu_us_per_call"),
                    steal: row.extra("cpu_steal_share"),
                })
            };
            Compared {
                scenario: r.scenario.clone(),
                concurrency: r.concurrency,
                samples: [0, 1].map(|b| runs.iter().filter_map(|run| sample(&run[b])).collect()),
            }
        })
        .collect()
}

fn report(builds: &[Build; 2], compared: &[Compared], rounds: usize) -> String {
    let pct = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{:.1} %", v * 100.0));
    let us = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.0} µs"));
    let mut out = format!(
        "worldd-bench --against: {rounds} round(s), alternated; a row's share of the health row beside it\n  baseline {}\n  this     {}\n",
        builds[0].worldd.display(),
        builds[1].worldd.display()
    );
    for c in compared {
        out.push_str(&format!("{} @{}\n", c.scenario, c.concurrency));
        for (b, build) in builds.iter().enumerate() {
            let rounds: Vec<String> = c.samples[b]
                .iter()
                .map(|s| {
                    let steal = s
                        .steal
                        .map_or(String::new(), |v| format!(", steal {:.0} %", v * 100.0));
                    format!(
                        "{:.0}/s ({:.1} %{steal})",
                        s.calls_per_second,
                        s.share_of_health * 100.0
                    )
                })
                .collect();
            let writer = c.mean_writer(b).map_or(String::new(), |w| {
                format!(" ({w:.0} µs of it the store writer's)")
            });
            out.push_str(&format!(
                "  {:<8} {}; mean {} of health, {} CPU per call{writer}\n",
                build.name,
                rounds.join(" · "),
                pct(c.mean_share(b)),
                us(c.mean_cpu(b))
            ));
        }
        let change = c
            .change()
            .map_or("-".to_owned(), |v| format!("{:+.1} %", v * 100.0));
        out.push_str(&format!("  change of the mean share: {change}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bench's test row (`per_second` calls in one second @32), with its share of health,
    /// CPU per call and steal.
    fn row(scenario: &str, per_second: u64, share: Option<f64>, cpu: f64, steal: f64) -> Row {
        Row {
            vs_health_rate: share,
            daemon_cpu_us_per_call: Some(cpu),
            extra: vec![("cpu_steal_share".into(), steal)],
            ..crate::tests::row(scenario, per_second)
        }
    }

    /// [`row`], with the store writer's CPU per call (a build that records it).
    fn with_writer(mut row: Row, writer: f64) -> Row {
        row.extra.push(("writer_cpu_us_per_call".into(), writer));
        row
    }

    fn run(base_share: f64, this_share: f64) -> [Vec<Row>; 2] {
        [
            vec![
                row("health", 40_000, None, 20.0, 0.0),
                row("ailang-read", 2_000, Some(base_share), 500.0, 0.1),
            ],
            vec![
                row("health", 40_000, None, 20.0, 0.0),
                with_writer(
                    row("ailang-read", 2_400, Some(this_share), 400.0, 0.0),
                    120.0,
                ),
            ],
        ]
    }

    #[test]
    fn rows_are_compared_by_their_mean_share_of_the_health_beside_them() {
        let compared = compare(&[run(0.05, 0.06), run(0.07, 0.06)]);
        assert_eq!(compared.len(), 1, "health is the baseline, not a row");
        let c = &compared[0];
        assert_eq!((c.scenario.as_str(), c.concurrency), ("ailang-read", 32));
        assert_eq!(c.samples[0].len(), 2);
        assert!((c.mean_share(0).unwrap() - 0.06).abs() < 1e-12);
        assert!((c.mean_share(1).unwrap() - 0.06).abs() < 1e-12);
        assert!(c.change().unwrap().abs() < 1e-12);
        assert_eq!(c.mean_cpu(1), Some(400.0));
        assert_eq!((c.mean_writer(0), c.mean_writer(1)), (None, Some(120.0)));
        let compared = compare(&[run(0.05, 0.06)]);
        assert!((compared[0].change().unwrap() - 0.2).abs() < 1e-9);

        let builds = [
            Build {
                name: "baseline",
                worldd: "/old/worldd".into(),
                plugins: "/old".into(),
            },
            Build {
                name: "this",
                worldd: "/new/worldd".into(),
                plugins: "/new".into(),
            },
        ];
        let text = report(&builds, &compared, 1);
        assert!(
            text.contains("ailang-read @32\n  baseline 2000/s (5.0 %, steal 10 %); mean 5.0 % of health, 500 µs CPU per call\n  this     2400/s (6.0 %, steal 0 %); mean 6.0 % of health, 400 µs CPU per call (120 µs of it the store writer's)\n  change of the mean share: +20.0 %\n"),
            "{text}"
        );
        assert_eq!(compare(&[]), Vec::new());
    }
}
