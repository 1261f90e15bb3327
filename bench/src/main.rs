//! `worldd-bench`: end-to-end benchmark of the release `worldd` daemon.
//!
//! Run from the workspace root: `cargo run --release -p worldd-bench -- [--quick]`. It builds
//! the release daemon and the workspace plugin, starts the daemon on a store under
//! `target/bench-tmp/`, drives real MCP `tools/call` requests over loopback HTTP, measures the
//! baselines (`GET /v1/health` with the same load generator, raw fsync of the same disk) in
//! the same run, fills a second store with 100,000 calls, times `worldd doctor` on it and
//! measures its size. Prints one table and writes `target/bench/results.json`.
//! See `docs/benchmarks.md`.

mod against;
mod attacks;
mod daemon;
mod disk;
mod instructions;
mod load;
mod stats;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::{json, Value};

use daemon::{Client, Daemon};
use load::{Kind, Stop};
use stats::{Row, Summary};

#[derive(Parser, Debug)]
#[command(
    name = "worldd-bench",
    about = "End-to-end benchmark of the release worldd daemon"
)]
struct Args {
    /// Short smoke run: 1 s per row after 0.3 s warm-up, 10,000-call store.
    #[arg(long)]
    quick: bool,
    /// Measured seconds per row (default 8; 1 with --quick).
    #[arg(long)]
    seconds: Option<f64>,
    /// Warm-up seconds per row, not recorded (default 2; 0.3 with --quick).
    #[arg(long)]
    warmup: Option<f64>,
    /// Calls made to fill the store that doctor verifies and that is measured for bytes per
    /// call (default 100000; 10000 with --quick).
    #[arg(long)]
    calls: Option<u64>,
    /// Concurrencies of the read, write and health rows.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32,128")]
    concurrency: Vec<usize>,
    /// Which request rows to run besides health (`read`, `write`, `refusal`, `ping`); for
    /// profiling one.
    #[arg(long, value_delimiter = ',', default_value = "read,write,refusal,ping")]
    rows: Vec<String>,
    /// Concurrency of the plan-refusal and MCP ping rows.
    #[arg(long, default_value_t = 32)]
    refusal_concurrency: usize,
    /// Clients filling the store.
    #[arg(long, default_value_t = 8)]
    fill_concurrency: usize,
    /// Wait this long after a `capacity exceeded` answer before the next request, ms.
    #[arg(long, default_value_t = 1.0)]
    backoff_ms: f64,
    /// `WORLDD_LOG` for the daemon (e.g. `off`); default: the daemon's own (`info`).
    #[arg(long)]
    daemon_log: Option<String>,
    /// Do not run `cargo build --release -p worldd -p worldd-handler-workspace` first.
    #[arg(long)]
    no_build: bool,
    /// Keep the stores and daemon logs (under --tmp-dir).
    #[arg(long)]
    keep: bool,
    /// Where the stores and daemon logs go (default target/bench-tmp): e.g. a tmpfs, to take
    /// the disk's sync time out of a comparison of CPU costs.
    #[arg(long)]
    tmp_dir: Option<PathBuf>,
    /// Where to write the JSON results (default target/bench/results.json, or
    /// target/bench/attacks.json with --attacks).
    #[arg(long)]
    out: Option<PathBuf>,
    /// An extra `worldd serve` flag for the benchmark daemons, the attack rows' included
    /// (repeatable), e.g. `--serve-arg=--execution-slots=32`.
    #[arg(long = "serve-arg", allow_hyphen_values = true)]
    serve_args: Vec<String>,
    /// Run the attacks instead (held bodies, huge batches, idle and half-sent connections,
    /// Host/Origin rebinding, one episode looping a slow tool, hung plugins and finish
    /// functions, a plugin flooding the log, bodies of small objects or in one-byte chunks,
    /// …), each against a fresh daemon, measuring a legitimate client of another episode
    /// meanwhile.
    #[arg(long)]
    attacks: bool,
    /// With --attacks: run only these attacks, by their row number (0 is the baseline).
    #[arg(long, value_delimiter = ',')]
    attack_rows: Vec<usize>,
    /// Put the daemons in a CPU control group of their own and this process (the load
    /// generator and the attackers) in another, both made under DIR (a cgroup directory with
    /// the cpu controller, e.g. `/sys/fs/cgroup/cpu`; needs root): each group then gets half
    /// of a busy machine, as a daemon run as a service does beside its clients, instead of a
    /// share per thread.
    #[arg(long, value_name = "DIR")]
    cpu_groups: Option<PathBuf>,
    /// Alternate this build's daemon with another `worldd` binary (its plugins are the ones in
    /// its directory): `--rounds` fresh daemons of each, request rows only, then each row's
    /// share of health, CPU per call and steal side by side.
    #[arg(long, value_name = "WORLDD")]
    against: Option<PathBuf>,
    /// With --against: how many times each build runs.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Count the daemon's instructions per call instead, under Valgrind's callgrind: health
    /// and each of `--rows`, CALLS calls from one client in sequence, each row on a fresh
    /// daemon. Run-to-run noise is a fraction of a per cent, so it shows CPU changes too small
    /// for the rates to tell (user space only; SHA-256's block function left out). With
    /// `--against`, the other build is counted first and the change is printed.
    #[arg(long, value_name = "CALLS", conflicts_with = "attacks")]
    instructions: Option<u64>,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(args) {
        eprintln!("worldd-bench: {e}");
        std::process::exit(1);
    }
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn run(args: Args) -> Result<(), String> {
    if cfg!(debug_assertions) {
        eprintln!("worldd-bench: warning: this is a debug build of the load generator; run with --release");
    }
    let dirs = Dirs::locate()?;
    if !args.no_build {
        build(&dirs.workspace, &dirs.target, args.attacks)?;
    }
    if let Some(dir) = &args.cpu_groups {
        daemon::split_cpu_groups(dir)?;
    }
    if args.attacks {
        return run_attacks(&args, &dirs.release, &dirs.target);
    }
    let worldd = dirs.built_worldd()?;
    let settings = Settings::new(&args);
    let run_dir = RunDir::create(&args, &dirs.target)?;
    if let Some(calls) = args.instructions {
        let out = args
            .out
            .clone()
            .unwrap_or_else(|| dirs.target.join("bench").join("instructions.json"));
        let mut builds = Vec::new();
        if let Some(other) = &args.against {
            builds.push(against::Build::new("baseline", other)?);
        }
        builds.push(against::Build::new("this", &worldd)?);
        return instructions::run(&builds, &run_dir.path, &args.rows, calls.max(1), &out);
    }
    if let Some(baseline) = &args.against {
        let out = args
            .out
            .clone()
            .unwrap_or_else(|| dirs.target.join("bench").join("against.json"));
        return against::run(
            &args,
            &worldd,
            baseline,
            &run_dir.path,
            &out,
            settings.timed(),
        );
    }
    let load_before = loadavg();
    let started = Instant::now();
    announce(&run_dir, &load_before, &settings);

    // Baseline 1: the raw fsync rate of the disk the stores live on.
    // Probed at the start and again after the request rows: shared disks drift.
    let mut fsync_samples = Vec::new();
    let fsync_start = fsync_probe_logged(
        "raw fsync",
        &run_dir.path,
        settings.probe,
        &mut fsync_samples,
    )?;
    let mut errors = Vec::new();
    let bench = Bench {
        args: &args,
        worldd: &worldd,
        release: &dirs.release,
        run_dir: &run_dir.path,
        settings: &settings,
    };
    let rows = measure_request_rows(&bench, &mut errors)?;
    let disk = Disk::probe_after_rows(&run_dir.path, settings.probe, fsync_start, fsync_samples)?;
    let floor = read_floor(&rows, disk.fsync.p50_ns);
    let fill = fill_store(&bench, &mut errors)?;

    let mut table_rows = rows.clone();
    table_rows.push(fill.row.clone());
    let measured = Measured {
        rows,
        errors,
        disk,
        floor,
        fill,
        load_before,
        load_after: loadavg(),
        started,
    };
    let text = report(&mut table_rows, &measured, &run_dir, &settings);
    print!("{text}");
    let _ = std::io::stdout().flush();

    let results = results_json(
        &args,
        &dirs.workspace,
        &table_rows,
        &measured,
        &run_dir,
        &settings,
    );
    write_results(&args, &dirs.target, &results)?;
    if measured.fill.doctor.consistent {
        Ok(())
    } else {
        Err("doctor found the filled store inconsistent".into())
    }
}

/// What every measured stage runs with: the flags, the binaries and the run directory.
#[derive(Clone, Copy)]
struct Bench<'a> {
    args: &'a Args,
    worldd: &'a Path,
    release: &'a Path,
    run_dir: &'a Path,
    settings: &'a Settings,
}

/// The workspace, its target directory and the release binaries in it.
struct Dirs {
    workspace: PathBuf,
    target: PathBuf,
    release: PathBuf,
}

impl Dirs {
    /// The workspace from this crate's manifest; the target directory from this executable.
    fn locate() -> Result<Dirs, String> {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .ok_or("no workspace root")?
            .to_path_buf();
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let target = exe
            .parent()
            .and_then(Path::parent)
            .ok_or("cannot locate the target directory")?
            .to_path_buf();
        let release = target.join("release");
        Ok(Dirs {
            workspace,
            target,
            release,
        })
    }

    /// The release `worldd`, once it and the workspace plugin are built.
    fn built_worldd(&self) -> Result<PathBuf, String> {
        let worldd = self.release.join("worldd");
        if !worldd.exists() || !self.release.join("libworldd_workspace.so").exists() {
            return Err(format!(
                "{} or libworldd_workspace.so missing: run `cargo build --release -p worldd -p worldd-handler-workspace`",
                worldd.display()
            ));
        }
        Ok(worldd)
    }
}

/// How long and how much each part of the run goes, from the flags (`--quick` shortens all).
struct Settings {
    warmup: Duration,
    measure: Duration,
    fill_calls: u64,
    backoff: Duration,
    /// How long each disk probe runs.
    probe: Duration,
}

impl Settings {
    fn new(args: &Args) -> Settings {
        Settings {
            warmup: secs(args.warmup.unwrap_or(if args.quick { 0.3 } else { 2.0 })),
            measure: secs(args.seconds.unwrap_or(if args.quick { 1.0 } else { 8.0 })),
            fill_calls: args
                .calls
                .unwrap_or(if args.quick { 10_000 } else { 100_000 }),
            backoff: secs(args.backoff_ms / 1000.0),
            probe: if args.quick { secs(1.0) } else { secs(3.0) },
        }
    }

    /// When each request row ends.
    fn timed(&self) -> Stop {
        Stop::Timed {
            warmup: self.warmup,
            measure: self.measure,
        }
    }
}

/// This run's directory for stores, logs and probes, under the tmp root, and its filesystem.
/// Removed when the run ends, whichever way it ends (`--keep` keeps it): each run leaves
/// stores of hundreds of megabytes, and runs left behind once filled the disk until the
/// daemons under test refused calls for want of room.
struct RunDir {
    tmp_root: PathBuf,
    path: PathBuf,
    fs: String,
    keep: bool,
}

impl RunDir {
    /// Creates `run-<pid>` under the tmp root; warns if it is on tmpfs.
    fn create(args: &Args, target: &Path) -> Result<RunDir, String> {
        let run = RunDir::under(tmp_root(args, target), "run", args.keep)?;
        if run.fs == "tmpfs" {
            eprintln!(
                "worldd-bench: warning: {} is on tmpfs; fsync figures mean nothing",
                run.path.display()
            );
        }
        Ok(run)
    }

    /// `<name>-<pid>` under `tmp_root`, created.
    fn under(tmp_root: PathBuf, name: &str, keep: bool) -> Result<RunDir, String> {
        let path = tmp_root.join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir_all(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let fs = fs_type(&path);
        Ok(RunDir {
            tmp_root,
            path,
            fs,
            keep,
        })
    }
}

impl Drop for RunDir {
    /// Says where it is with `--keep`; removes it otherwise.
    fn drop(&mut self) {
        if self.keep {
            println!("kept: {}", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// The run's first line on stderr: where, on what, under what load, for how long per row.
fn announce(run_dir: &RunDir, load_before: &str, settings: &Settings) {
    eprintln!(
        "worldd-bench: {} ({}), {} CPUs, load {}; {:.1}s warm-up + {:.1}s per row",
        run_dir.path.display(),
        run_dir.fs,
        cpus(),
        load_before,
        settings.warmup.as_secs_f64(),
        settings.measure.as_secs_f64()
    );
}

/// [`fsync_probe`], its rate and p50 printed after `label`.
fn fsync_probe_logged(
    label: &str,
    dir: &Path,
    duration: Duration,
    all: &mut Vec<u64>,
) -> Result<Summary, String> {
    let fsync = fsync_probe(dir, duration, all)?;
    eprintln!(
        "  {label}: {:.0}/s, p50 {:.3} ms",
        fsync.per_second(),
        ms(fsync.p50_ns)
    );
    Ok(fsync)
}

/// The disk's baselines: raw fsync at the start of the run and after the request rows, both
/// together, and [`PROBE_PAGES`] pages per sync, scattered and adjacent.
struct Disk {
    fsync_start: Summary,
    fsync_end: Summary,
    /// Every sample of both fsync probes.
    fsync: Summary,
    scatter: Summary,
    adjacent: Summary,
}

impl Disk {
    /// The probes after the request rows, joined to `fsync_start` and its `samples`.
    fn probe_after_rows(
        dir: &Path,
        duration: Duration,
        fsync_start: Summary,
        mut samples: Vec<u64>,
    ) -> Result<Disk, String> {
        let fsync_end = fsync_probe_logged("raw fsync again", dir, duration, &mut samples)?;
        let (scatter, adjacent) = page_probes(dir, duration)?;
        eprintln!(
            "  {PROBE_PAGES} pages + fdatasync: p50 {:.3} ms scattered, {:.3} ms adjacent",
            ms(scatter.p50_ns),
            ms(adjacent.p50_ns)
        );
        let fsync =
            Summary::from_latencies(&mut samples, 0, 0, fsync_start.seconds + fsync_end.seconds);
        Ok(Disk {
            fsync_start,
            fsync_end,
            fsync,
            scatter,
            adjacent,
        })
    }

    fn scattered_us(&self) -> f64 {
        page_us(self.scatter.p50_ns, self.fsync.p50_ns)
    }

    fn adjacent_us(&self) -> f64 {
        page_us(self.adjacent.p50_ns, self.fsync.p50_ns)
    }
}

/// The request rows, on one daemon; each row's first unexpected answer goes to `errors`.
fn measure_request_rows(
    bench: &Bench<'_>,
    errors: &mut Vec<(String, usize, String)>,
) -> Result<Vec<Row>, String> {
    let (d, clients) = request_daemon(
        bench.args,
        bench.worldd,
        &bench.run_dir.join("main"),
        bench.release,
    )?;
    let mut ctx = RowCtx {
        d: &d,
        stop: bench.settings.timed(),
        backoff: bench.settings.backoff,
        probe_dir: bench.run_dir,
        errors,
    };
    let rows = request_rows(&mut ctx, &clients, bench.args);
    d.stop()?;
    Ok(rows)
}

/// The 1-episode read against its floor: health p50 + 2 fsyncs (intent and outcome).
/// (read p50, health p50, floor) in ns, if both rows ran.
fn read_floor(rows: &[Row], fsync_p50_ns: u64) -> Option<(u64, u64, u64)> {
    row_at(rows, "health", 1)
        .zip(row_at(rows, "ailang-read", 1))
        .map(|(h, r)| {
            let floor_ns = h.summary.p50_ns + 2 * fsync_p50_ns;
            (r.summary.p50_ns, h.summary.p50_ns, floor_ns)
        })
}

/// The 1-episode read against its floor, then what its group commits cost beyond the floor's
/// two syncs: the syncs they take (LMDB's sync of the pages, then the syncing thread's of the
/// meta page) and LMDB's commit with its page writes.
fn floor_line(
    (read, health, floor): (u64, u64, u64),
    fsync_p50_ns: u64,
    row: Option<&Row>,
) -> String {
    let mut line = format!(
        "ailang-read @1: p50 {:.3} ms vs floor {:.3} ms (health p50 {:.3} + 2 x fsync p50 {:.3}) = {:.2}x",
        ms(read),
        ms(floor),
        ms(health),
        ms(fsync_p50_ns),
        read as f64 / floor.max(1) as f64,
    );
    let commits = row.and_then(|r| {
        r.commits_per_call
            .zip(r.pages_per_commit)
            .zip(r.sync_us_per_commit)
    });
    if let Some(((commits, pages), lmdb_us)) = commits {
        line.push_str(&format!(
            "; its {commits:.2} group commits per call take {:.1} syncs and {lmdb_us:.0} us of LMDB's commit each, for {pages:.1} pages",
            2.0 * commits
        ));
    }
    line.push('\n');
    line
}

/// A fresh store filled through the daemon: the fill's row, the store's size before and after,
/// and doctor's verification of it.
struct Fill {
    row: Row,
    /// Successful calls.
    calls: u64,
    before: daemon::StoreSize,
    after: daemon::StoreSize,
    /// Per call, by table: (table, bytes, entries), most bytes first.
    by_table: Vec<(String, f64, f64)>,
    doctor: Doctor,
}

impl Fill {
    /// How much `size` of the store grew per successful call.
    fn per_call(&self, size: impl Fn(&daemon::StoreSize) -> u64) -> f64 {
        size(&self.after).saturating_sub(size(&self.before)) as f64 / self.calls.max(1) as f64
    }
}

/// Fill a fresh store through the daemon, measure it, verify it with doctor. The fill's first
/// unexpected answer goes to `errors`.
fn fill_store(
    bench: &Bench<'_>,
    errors: &mut Vec<(String, usize, String)>,
) -> Result<Fill, String> {
    eprintln!(
        "  filling a fresh store with {} calls ({} clients, write+read mix)…",
        bench.settings.fill_calls, bench.args.fill_concurrency
    );
    let d = Daemon::start(
        bench.worldd,
        &bench.run_dir.join("fill"),
        bench.release,
        bench.args.daemon_log.as_deref(),
    )?;
    let clients = d.mint("fill-", bench.args.fill_concurrency, 1024)?;
    let before = daemon::store_size(&d.db)?;
    let (row, first_error) = fill_row(&d, &clients, bench.args.fill_concurrency, bench.settings);
    let db = d.db.clone();
    d.stop()?;
    if let Some(e) = first_error {
        errors.push(("fill".into(), bench.args.fill_concurrency, e));
    }
    let after = daemon::store_size(&db)?;
    let calls = row.summary.ok;
    let by_table = growth_by_table(&before, &after, calls);
    let doctor = run_doctor(bench.worldd, &db)?;
    Ok(Fill {
        row,
        calls,
        before,
        after,
        by_table,
        doctor,
    })
}

/// The `fill-mix` row: the write+read mix until `settings.fill_calls` calls succeed, with the
/// daemon's CPU, memory, writes and counters around it; and its first unexpected answer.
fn fill_row(
    d: &Daemon,
    clients: &[Client],
    concurrency: usize,
    settings: &Settings,
) -> (Row, Option<String>) {
    let cpu0 = daemon_cpu_seconds(d.pid());
    d.reset_peak_rss();
    let anon = daemon::ProcSampler::start(d.pid());
    let m0 = Metrics::scrape(&d.addr);
    let io0 = daemon_write_bytes(d.pid());
    let fill = load::run(
        &d.addr,
        Kind::Mix,
        clients,
        Stop::Count(settings.fill_calls),
        settings.backoff,
    );
    let m = Metrics::scrape(&d.addr).zip(m0).map(|(a, b)| a.since(&b));
    let io = daemon_write_bytes(d.pid())
        .zip(io0)
        .map(|(a, b)| a.saturating_sub(b));
    let cpu = daemon_cpu_seconds(d.pid()).zip(cpu0).map(|(a, b)| a - b);
    let peak_rss_kib = d.peak_rss_kib();
    let peak_anon_kib = anon.finish().anon_kib;
    let (server_mean_ns, ops_per_batch, commits_per_call) =
        m.map(|m| m.per_call()).unwrap_or((None, None, None));
    let ok = fill.summary.ok.max(1) as f64;
    let row = Row {
        scenario: "fill-mix".into(),
        concurrency,
        daemon_cpu_us_per_call: cpu.map(|c| c * 1e6 / ok),
        summary: fill.summary,
        attempts: Some(fill.attempts),
        peak_rss_kib,
        peak_anon_kib,
        server_mean_ns,
        ops_per_batch,
        commits_per_call,
        write_kib_per_call: io.map(|b| b as f64 / 1024.0 / ok),
        ..Row::default()
    };
    (row, fill.first_error)
}

/// Per call, by table: (table, bytes of the pages it gained, entries it gained), most bytes
/// first.
fn growth_by_table(
    before: &daemon::StoreSize,
    after: &daemon::StoreSize,
    calls: u64,
) -> Vec<(String, f64, f64)> {
    let mut by_table: Vec<(String, f64, f64)> = after
        .tables
        .iter()
        .map(|t| {
            let b = before.tables.iter().find(|b| b.name == t.name);
            let pages = t.pages - b.map_or(0, |b| b.pages.min(t.pages));
            let entries = t.entries - b.map_or(0, |b| b.entries.min(t.entries));
            (
                t.name.clone(),
                (pages * after.page_size) as f64 / calls.max(1) as f64,
                entries as f64 / calls.max(1) as f64,
            )
        })
        .collect();
    by_table.sort_by(|a, b| b.1.total_cmp(&a.1));
    by_table
}

/// Bytes in the store's live B-tree pages (free list excluded).
fn live_bytes(z: &daemon::StoreSize) -> u64 {
    z.table_pages() * z.page_size
}

/// What the run measured, for the report and the JSON.
struct Measured {
    /// The request rows.
    rows: Vec<Row>,
    /// The first unexpected answer of each row that had one: (scenario, concurrency, answer).
    errors: Vec<(String, usize, String)>,
    disk: Disk,
    /// See [`read_floor`].
    floor: Option<(u64, u64, u64)>,
    fill: Fill,
    load_before: String,
    load_after: String,
    /// When measuring began (after the build): the run's total time counts from here.
    started: Instant,
}

/// The text report. Also records each row's ceiling and page bound in `table_rows` (the request
/// rows and the fill row), for the JSON.
fn report(table_rows: &mut [Row], m: &Measured, run_dir: &RunDir, settings: &Settings) -> String {
    let Measured { disk, fill, .. } = m;
    let fsync = &disk.fsync;
    let table = stats::table(table_rows);
    let mut report = String::new();
    report.push_str(&format!(
        "worldd-bench: {} CPUs, {} ({}), load before {} / after {}, {:.1}s warm-up + {:.1}s per row, total {:.0}s\n",
        cpus(),
        run_dir.tmp_root.display(),
        run_dir.fs,
        m.load_before,
        m.load_after,
        settings.warmup.as_secs_f64(),
        settings.measure.as_secs_f64(),
        m.started.elapsed().as_secs_f64()
    ));
    report.push_str(&table);
    report.push_str(&steal_line(&m.rows));
    report.push_str(&thread_line(&m.rows));
    report.push_str(&cpu_bound_line(&m.rows, cpus()));
    report.push_str(&writer_bound_line(&m.rows));
    report.push_str(&disk::line(&m.rows));
    report.push_str(&format!(
        "raw fsync (4 KiB write + fdatasync): {:.0}/s, p50 {:.3} ms, p99 {:.3} ms (start of run {:.0}/s p50 {:.3} ms; after the request rows {:.0}/s p50 {:.3} ms)\n",
        fsync.per_second(),
        ms(fsync.p50_ns),
        ms(fsync.p99_ns),
        disk.fsync_start.per_second(),
        ms(disk.fsync_start.p50_ns),
        disk.fsync_end.per_second(),
        ms(disk.fsync_end.p50_ns),
    ));
    if let Some(floor) = m.floor {
        report.push_str(&floor_line(
            floor,
            fsync.p50_ns,
            row_at(&m.rows, "ailang-read", 1),
        ));
    }
    report.push_str(&ceilings(table_rows, &m.rows, fsync.p50_ns));
    report.push_str(&tail_line(&m.rows));
    report.push_str(&format!(
        "page writes: {PROBE_PAGES} x 4 KiB + fdatasync p50 {:.3} ms (p99 {:.3}) at random places = {:.1} us per page beyond one fsync; {:.3} ms (p99 {:.3}) adjacent = {:.1} us per page\n",
        ms(disk.scatter.p50_ns),
        ms(disk.scatter.p99_ns),
        disk.scattered_us(),
        ms(disk.adjacent.p50_ns),
        ms(disk.adjacent.p99_ns),
        disk.adjacent_us(),
    ));
    report.push_str(&page_bounds(table_rows, &m.rows, disk.scattered_us()));
    report.push_str(&edge_floor(table_rows, &m.rows));
    let doctor = &fill.doctor;
    report.push_str(&format!(
        "doctor over {} entries: {:.0} entries/s wall ({:.2} s incl. process start and store open); {:.0} entries/s as doctor reports its verification\n",
        doctor.entries,
        doctor.entries as f64 / doctor.wall_seconds,
        doctor.wall_seconds,
        doctor.entries as f64 / doctor.verify_seconds.max(1e-9)
    ));
    report.push_str(&format!(
        "store after {} calls: {:.0} bytes/call by LMDB high-water mark ((last_pgno+1) x {} B page: {:.1} MiB; du-allocated the same: {:.0} bytes/call), {:.0} bytes/call in live B-tree pages (free list excluded)\n",
        fill.calls,
        fill.per_call(|z| z.lmdb_bytes),
        fill.after.page_size,
        fill.after.lmdb_bytes as f64 / (1 << 20) as f64,
        fill.per_call(|z| z.allocated_bytes),
        fill.per_call(live_bytes),
    ));
    report.push_str("  per call by table (bytes, entries):");
    for (name, bytes, entries) in fill.by_table.iter().filter(|t| t.1 >= 1.0) {
        report.push_str(&format!(" {name} {bytes:.0} B/{entries:.2}"));
    }
    report.push('\n');
    for (scenario, c, e) in &m.errors {
        report.push_str(&format!(
            "note: {scenario} @{c}: first unexpected answer: {e}\n"
        ));
    }
    report
}

/// The results JSON: the run's machine and settings, the disk's baselines, every row (with
/// what [`report`] recorded in it), the read's floor, doctor and the filled store.
fn results_json(
    args: &Args,
    workspace: &Path,
    table_rows: &[Row],
    m: &Measured,
    run_dir: &RunDir,
    settings: &Settings,
) -> Value {
    let Measured { disk, fill, .. } = m;
    let (fsync, doctor, before, after) = (&disk.fsync, &fill.doctor, &fill.before, &fill.after);
    json!({
        "version": 1,
        "command": std::env::args().collect::<Vec<_>>(),
        "commit": git_head(workspace),
        "unix_time": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        "machine": {
            "cpus": cpus(), "fs_type": run_dir.fs, "loadavg_before": m.load_before, "loadavg_after": m.load_after,
            "psi_cpu_some_avg10_after": pressure_some_avg10("cpu"), "psi_io_some_avg10_after": pressure_some_avg10("io"),
        },
        "config": {
            "quick": args.quick, "warmup_s": settings.warmup.as_secs_f64(), "measure_s": settings.measure.as_secs_f64(),
            "fill_calls": settings.fill_calls, "backoff_ms": args.backoff_ms,
            "daemon_log": args.daemon_log, "daemon_max_concurrent_calls_note": "by default the daemon runs 128 calls at once ([limits] execution_slots), one per episode",
        },
        "fsync": {
            "per_second": fsync.per_second(), "p50_ms": ms(fsync.p50_ns), "p99_ms": ms(fsync.p99_ns),
            "max_ms": ms(fsync.max_ns), "mean_ms": ms(fsync.mean_ns), "ops": fsync.ok,
            "start": {"per_second": disk.fsync_start.per_second(), "p50_ms": ms(disk.fsync_start.p50_ns), "p99_ms": ms(disk.fsync_start.p99_ns)},
            "end": {"per_second": disk.fsync_end.per_second(), "p50_ms": ms(disk.fsync_end.p50_ns), "p99_ms": ms(disk.fsync_end.p99_ns)},
        },
        "page_writes": {
            "pages_per_sync": PROBE_PAGES,
            "scattered": {"p50_ms": ms(disk.scatter.p50_ns), "p99_ms": ms(disk.scatter.p99_ns), "us_per_page": disk.scattered_us()},
            "adjacent": {"p50_ms": ms(disk.adjacent.p50_ns), "p99_ms": ms(disk.adjacent.p99_ns), "us_per_page": disk.adjacent_us()},
        },
        "rows": table_rows.iter().map(|r| row_json(r, &m.errors)).collect::<Vec<_>>(),
        "read_1_vs_floor": m.floor.map(|(read, health, floor)| json!({
            "read_p50_ms": ms(read), "health_p50_ms": ms(health), "fsync_p50_ms": ms(fsync.p50_ns),
            "floor_ms": ms(floor), "ratio": read as f64 / floor.max(1) as f64,
        })),
        "doctor": {
            "entries": doctor.entries, "wall_seconds": doctor.wall_seconds,
            "entries_per_second_wall": doctor.entries as f64 / doctor.wall_seconds,
            "verify_seconds": doctor.verify_seconds,
            "entries_per_second_verify": doctor.entries as f64 / doctor.verify_seconds.max(1e-9),
            "log_built_by": "the release daemon over MCP (fill-mix row): alternating ailang-write of unique 1 KiB and ailang-read of it back",
        },
        "store": {
            "calls": fill.calls,
            "lmdb_bytes_before": before.lmdb_bytes, "lmdb_bytes_after": after.lmdb_bytes,
            "allocated_bytes_before": before.allocated_bytes, "allocated_bytes_after": after.allocated_bytes,
            "file_bytes_after": after.file_bytes,
            "bytes_per_call_lmdb_pages": fill.per_call(|z| z.lmdb_bytes),
            "bytes_per_call_allocated": fill.per_call(|z| z.allocated_bytes),
            "bytes_per_call_live_btree_pages": fill.per_call(live_bytes),
            "page_size": after.page_size,
            "per_call_by_table": fill.by_table.iter().map(|(n, b, e)| json!({"table": n, "bytes_per_call": b, "entries_per_call": e})).collect::<Vec<_>>(),
            "tables_after": after.tables.iter().map(|t| json!({"table": t.name, "entries": t.entries, "pages": t.pages, "overflow_pages": t.overflow_pages})).collect::<Vec<_>>(),
            "method": "lmdb: (mdb_env_info last_pgno + 1) x page size, the high-water mark of used pages including free-list pages; allocated: st_blocks x 512 of data.mdb (du); live: branch+leaf+overflow pages of every named database (mdb_stat) x page size",
        },
    })
}

/// Writes `results` to `--out` (default target/bench/results.json) and says where.
fn write_results(args: &Args, target: &Path, results: &Value) -> Result<(), String> {
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| target.join("bench").join("results.json"));
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    }
    let text = serde_json::to_string_pretty(results).map_err(|e| e.to_string())?;
    std::fs::write(&out, text + "\n").map_err(|e| format!("{}: {e}", out.display()))?;
    println!("results: {}", out.display());
    Ok(())
}

/// `--attacks`: every attack on a fresh daemon; prints the table, writes the JSON.
fn run_attacks(args: &Args, release: &Path, target: &Path) -> Result<(), String> {
    let worldd = release.join("worldd");
    let stall = stall_library(target);
    if !stall.exists() {
        return Err(format!(
            "{} missing: run `cargo build --release --manifest-path {STALL_MANIFEST} --target-dir target/fixtures`",
            stall.display()
        ));
    }
    let run_dir = RunDir::under(tmp_root(args, target), "attacks", args.keep)?;
    // The attacked daemons load the workspace plugin and the test plugin from a directory of
    // their own: the test plugin is never put where `worldd serve` looks by default.
    let plugin_dir = run_dir.path.join("plugins");
    std::fs::create_dir_all(&plugin_dir).map_err(|e| format!("{}: {e}", plugin_dir.display()))?;
    for lib in [release.join("libworldd_workspace.so"), stall] {
        let to = plugin_dir.join(lib.file_name().unwrap_or_default());
        std::fs::copy(&lib, &to)
            .map_err(|e| format!("{} -> {}: {e}", lib.display(), to.display()))?;
    }
    let dir = &run_dir.path;
    let measure = secs(args.seconds.unwrap_or(if args.quick { 2.0 } else { 8.0 }));
    eprintln!(
        "worldd-bench --attacks: {} CPUs, load {}; {:.1}s of legitimate calls per attack{}",
        cpus(),
        loadavg(),
        measure.as_secs_f64(),
        match &args.cpu_groups {
            Some(dir) => format!(
                "; the daemons and this process in CPU groups of their own under {}",
                dir.display()
            ),
            None => String::new(),
        }
    );
    let log = args.daemon_log.as_deref().or(Some("warn"));
    let rows = attacks::run_all(
        &worldd,
        &plugin_dir,
        dir,
        log,
        measure,
        &args.attack_rows,
        &args.serve_args,
    )?;
    print!("{}", attacks::table(&rows));
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| target.join("bench").join("attacks.json"));
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
    }
    std::fs::write(
        &out,
        serde_json::to_string_pretty(&attacks::to_json(&rows)).map_err(|e| e.to_string())?,
    )
    .map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(())
}

/// The test plugin that hangs on request, built on its own (outside the workspace, as the
/// tests' fixtures are) so that no build of the workspace puts it beside the shipped plugins.
const STALL_MANIFEST: &str = "tests/fixtures/stall-plugin/Cargo.toml";

/// Where [`build`] leaves the test plugin: `<target>/fixtures/release`.
fn stall_library(target: &Path) -> PathBuf {
    target
        .join("fixtures")
        .join("release")
        .join("libworldd_stall.so")
}

fn build(workspace: &Path, target: &Path, attacks: bool) -> Result<(), String> {
    let packages = ["-p", "worldd", "-p", "worldd-handler-workspace"];
    cargo(workspace, &packages)?;
    if attacks {
        let fixtures = target.join("fixtures");
        let fixtures = fixtures.to_string_lossy();
        cargo(
            workspace,
            &["--manifest-path", STALL_MANIFEST, "--target-dir", &fixtures],
        )?;
    }
    Ok(())
}

/// `cargo build --release ARGS` in the workspace.
fn cargo(workspace: &Path, args: &[&str]) -> Result<(), String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!("worldd-bench: cargo build --release {}", args.join(" "));
    let status = Command::new(cargo)
        .current_dir(workspace)
        .arg("build")
        .arg("--release")
        .args(args)
        .status()
        .map_err(|e| format!("cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("cargo build failed: {status}"))
    }
}

/// One read with a full parse: the reply is the SSE event with the file's content.
fn sanity_check(d: &Daemon, client: &Client) -> Result<(), String> {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ailang-read","arguments":{"path":"f.txt"}}}"#;
    let text = ureq::post(&format!("http://{}/mcp/", d.addr))
        .set("Content-Type", "application/json")
        .set("Accept", "application/json, text/event-stream")
        .set("MCP-Protocol-Version", "2025-11-25")
        .set("Authorization", &format!("Bearer {}", client.token))
        .send_string(body)
        .map_err(|e| format!("sanity read: {e}"))?
        .into_string()
        .map_err(|e| e.to_string())?;
    let data = text
        .strip_prefix("event: message\ndata: ")
        .ok_or_else(|| format!("sanity read: not one SSE event: {text}"))?;
    let v: Value =
        serde_json::from_str(data.trim_end()).map_err(|e| format!("sanity read: {e}: {text}"))?;
    let content = v["result"]["structuredContent"]["content"]
        .as_str()
        .unwrap_or("");
    if v["result"]["structuredContent"]["ok"] != true || content.len() != 1024 {
        return Err(format!("sanity read: unexpected result {v}"));
    }
    Ok(())
}

/// A daemon for the request rows (the workspace handler, any `--serve-arg`), its clients
/// minted (as many as the largest concurrency) and one read checked.
fn request_daemon(
    args: &Args,
    worldd: &Path,
    dir: &Path,
    plugins: &Path,
) -> Result<(Daemon, Vec<Client>), String> {
    let max_c = args
        .concurrency
        .iter()
        .copied()
        .chain([args.refusal_concurrency])
        .max()
        .unwrap_or(1);
    let serve_args: Vec<String> = daemon::REFUSALS_UNLIMITED
        .iter()
        .map(|a| a.to_string())
        .chain(args.serve_args.iter().cloned())
        .collect();
    let d = Daemon::start_with(
        &[],
        worldd,
        dir,
        plugins,
        args.daemon_log.as_deref(),
        &["workspace"],
        &serve_args,
    )?;
    let clients = d.mint("bench-", max_c, 1024)?;
    sanity_check(&d, &clients[0])?;
    Ok((d, clients))
}

/// The request rows on one daemon: at each concurrency health, then the read and write rows
/// beside it; then the plan refusals and the MCP pings (with a health row at their concurrency
/// if none ran).
fn request_rows(ctx: &mut RowCtx<'_>, clients: &[Client], args: &Args) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    for &c in &args.concurrency {
        let health = ctx.measure("health", Kind::Health, &clients[..c], None);
        rows.push(health.clone());
        for (row, name, kind) in [
            ("read", "ailang-read", Kind::Read),
            ("write", "ailang-write", Kind::Write),
        ] {
            if !args.rows.iter().any(|r| r == row) {
                continue;
            }
            rows.push(ctx.measure(name, kind, &clients[..c], Some(&health)));
        }
    }
    let rc = args.refusal_concurrency;
    for (row, name, kind) in [
        ("refusal", "plan-refusal", Kind::Refusal),
        ("ping", "mcp-ping", Kind::Ping),
    ] {
        if !args.rows.iter().any(|r| r == row) {
            continue;
        }
        let health = match row_at(&rows, "health", rc).cloned() {
            Some(h) => h,
            None => {
                let h = ctx.measure("health", Kind::Health, &clients[..rc], None);
                rows.push(h.clone());
                h
            }
        };
        rows.push(ctx.measure(name, kind, &clients[..rc], Some(&health)));
    }
    rows
}

/// What every request row shares.
struct RowCtx<'a> {
    d: &'a Daemon,
    stop: Stop,
    backoff: Duration,
    /// Where the short fsync probe before each row runs.
    probe_dir: &'a Path,
    errors: &'a mut Vec<(String, usize, String)>,
}

impl RowCtx<'_> {
    fn measure(
        &mut self,
        scenario: &str,
        kind: Kind,
        clients: &[Client],
        health: Option<&Row>,
    ) -> Row {
        let mut no_samples = Vec::new();
        let fsync_before = fsync_probe(self.probe_dir, secs(0.25), &mut no_samples).ok();
        let cpu_before = CpuTicks::read();
        let disk = disk::Sample::start(self.probe_dir);
        let mut row = measure_row(
            self.d,
            scenario,
            kind,
            clients,
            self.stop,
            self.backoff,
            health,
            self.errors,
        );
        if let Some(disk) = disk {
            disk.finish(&mut row);
        }
        if let Some(f) = fsync_before {
            row.extra
                .push(("fsync_p50_ms_just_before".into(), ms(f.p50_ns)));
        }
        for (name, file) in [("psi_cpu_some_avg10", "cpu"), ("psi_io_some_avg10", "io")] {
            if let Some(v) = pressure_some_avg10(file) {
                row.extra.push((name.into(), v));
            }
        }
        if let Some(steal) = cpu_before
            .zip(CpuTicks::read())
            .and_then(|(a, b)| b.steal_since(&a))
        {
            row.extra.push(("cpu_steal_share".into(), steal));
        }
        row
    }
}

/// `label: ` and the parts joined by `sep`, one line; nothing when no row gave a part.
pub(crate) fn labelled_line(label: &str, parts: &[String], sep: &str) -> String {
    if parts.is_empty() {
        return String::new();
    }
    format!("{label}: {}\n", parts.join(sep))
}

/// The calls per second of the health row beside `r`, from `r`'s share of it.
fn health_beside(r: &Row) -> Option<f64> {
    Some(r.summary.per_second() / r.vs_health_rate.filter(|x| *x > 0.0)?)
}

/// One line: each row's share of CPU time stolen by the hypervisor (empty where `/proc/stat`
/// gave none).
fn steal_line(rows: &[Row]) -> String {
    let shares: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            let v = r.extra("cpu_steal_share")?;
            Some(format!(
                "{} @{} {:.0} %",
                r.scenario,
                r.concurrency,
                v * 100.0
            ))
        })
        .collect();
    labelled_line("CPU time stolen by the hypervisor", &shares, ", ")
}

/// One line: each durable row's daemon CPU per call by thread: the store's writer (the one
/// serial thread; with `wrtr` near 100 % it is the row's bound), its syncing thread (which
/// makes commits durable and answers their callers), and the rest (the runtime's threads:
/// requests, effects, handlers).
fn thread_line(rows: &[Row]) -> String {
    let parts: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            let (writer, answer) = store_threads_cpu(r)?;
            let all = r.daemon_cpu_us_per_call?;
            Some(format!(
                "{} @{} writer {:.0} us, syncing {:.0} us, the rest {:.0} us",
                r.scenario,
                r.concurrency,
                writer,
                answer,
                (all - writer - answer).max(0.0)
            ))
        })
        .collect();
    labelled_line("daemon CPU per call by thread", &parts, "; ")
}

/// A durable row's CPU per call on the store's writer and on its syncing thread, µs; `None`
/// for a row that does not reach the store.
fn store_threads_cpu(r: &Row) -> Option<(f64, f64)> {
    let writer = r.extra("writer_cpu_us_per_call")?;
    Some((writer, r.extra("answer_cpu_us_per_call").unwrap_or(0.0)))
}

/// One line: for each durable row, the most calls per second the machine's CPUs allow at the
/// row's own CPU per call (the daemon's plus the load generator's, which share the machine),
/// as a share of the health row beside it; and the same were the store's two threads to cost
/// nothing. A row near its first figure is bound by CPU, and no change to the store alone can
/// take it past the second.
fn cpu_bound_line(rows: &[Row], cpus: usize) -> String {
    let parts: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            let (writer, syncing) = store_threads_cpu(r)?;
            let load = r.extra("load_cpu_us_per_call")?;
            let daemon = r.daemon_cpu_us_per_call?;
            let health = health_beside(r)?;
            let allows = |us: f64| cpus as f64 * 1e6 / us.max(1e-9);
            let whole = allows(daemon + load);
            let free = allows((daemon - writer - syncing).max(0.0) + load);
            Some(format!(
                "{} @{} daemon {:.0} us + load generator {:.0} us per call allow {:.0}/s = {:.3}x health (measured {:.3}x); with the store's threads free {:.3}x",
                r.scenario,
                r.concurrency,
                daemon,
                load,
                whole,
                whole / health,
                r.vs_health_rate?,
                free / health
            ))
        })
        .collect();
    labelled_line(&format!("CPU bound on {cpus} CPUs"), &parts, "; ")
}

/// One line: for each durable row, the most calls per second the one store writer allows at
/// the group commits the row made: its time per group commit (building the batch, then LMDB's
/// commit with its page writes and sync) times the group commits per call, as a share of the
/// health row beside it. A row whose measured share is near this figure, with the writer near
/// 100 % busy, is bound by the writer's serial cycle at that batch size, not by the CPUs.
fn writer_bound_line(rows: &[Row]) -> String {
    let parts: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            let (build, lmdb) = (r.build_us_per_commit?, r.sync_us_per_commit?);
            let commits = r.commits_per_call.filter(|c| *c > 0.0)?;
            let health = health_beside(r)?;
            let allows = 1e6 / ((build + lmdb) * commits).max(1e-9);
            Some(format!(
                "{} @{} {:.0} us per group commit ({:.0} building, {:.0} in LMDB's commit) x {:.3} commits per call allow {:.0}/s = {:.3}x health (measured {:.3}x, the writer {:.0}% busy)",
                r.scenario,
                r.concurrency,
                build + lmdb,
                build,
                lmdb,
                commits,
                allows,
                allows / health,
                r.vs_health_rate?,
                r.writer_busy? * 100.0
            ))
        })
        .collect();
    labelled_line("store writer bound", &parts, "; ")
}

/// The @128 target holds each durable row's p99 to 4× its p99 @32. In a closed loop whose rate
/// no longer grows with its clients, the mean latency grows with them (Little's law: clients ÷
/// rate), so the ratio is about the clients' ratio over the rates', times how each p99 stands
/// to its own mean. The line sets those side by side for every durable row above 32 clients.
fn tail_line(rows: &[Row]) -> String {
    rows.iter()
        .filter(|r| {
            r.concurrency > 32
                && matches!(
                    r.scenario.as_str(),
                    "ailang-read" | "ailang-write" | "plan-refusal"
                )
        })
        .filter_map(|r| {
            let base = row_at(rows, &r.scenario, 32)?;
            let (s, b) = (&r.summary, &base.summary);
            if [s.p99_ns, s.mean_ns, b.p99_ns, b.mean_ns].contains(&0) {
                return None;
            }
            let rates = s.per_second() / b.per_second().max(1e-9);
            let clients = r.concurrency as f64 / 32.0;
            Some(format!(
                "{} @{}: p99 {:.1} ms = {:.2}x p99 @32 (the target allows 4x); mean {:.1} ms = {:.2}x @32's, at {:.2}x its rate with {:.0}x its clients (Little's law: {:.2}x); p99 {:.2}x the mean, @32 {:.2}x\n",
                r.scenario,
                r.concurrency,
                ms(s.p99_ns),
                s.p99_ns as f64 / b.p99_ns as f64,
                ms(s.mean_ns),
                s.mean_ns as f64 / b.mean_ns as f64,
                rates,
                clients,
                clients / rates.max(1e-9),
                s.p99_ns as f64 / s.mean_ns as f64,
                b.p99_ns as f64 / b.mean_ns as f64,
            ))
        })
        .collect()
}

/// The machine's CPU time from the first line of `/proc/stat`, in ticks: all of it, and what
/// the hypervisor gave to other guests while this one wanted to run (steal). On a shared host
/// steal is what moves a row's figures between runs; each row records its share.
struct CpuTicks {
    total: u64,
    steal: u64,
}

impl CpuTicks {
    fn read() -> Option<CpuTicks> {
        CpuTicks::parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    fn parse(text: &str) -> Option<CpuTicks> {
        let fields: Vec<u64> = text
            .lines()
            .next()?
            .strip_prefix("cpu ")?
            .split_whitespace()
            .map(|f| f.parse().ok())
            .collect::<Option<_>>()?;
        // user nice system idle iowait irq softirq steal (guest time is inside user).
        Some(CpuTicks {
            total: fields.iter().take(8).sum(),
            steal: *fields.get(7)?,
        })
    }

    /// The share of the CPU time since `before` that was stolen.
    fn steal_since(&self, before: &CpuTicks) -> Option<f64> {
        let total = self.total.checked_sub(before.total).filter(|t| *t > 0)?;
        Some(self.steal.saturating_sub(before.steal) as f64 / total as f64)
    }
}

/// `some avg10` of `/proc/pressure/<file>`: the share of the last 10 s (percent) in which
/// some task waited for that resource; other work on the machine shows here.
fn pressure_some_avg10(file: &str) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/pressure/{file}")).ok()?;
    text.lines()
        .find(|l| l.starts_with("some "))?
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("avg10="))?
        .parse()
        .ok()
}

#[allow(clippy::too_many_arguments)]
fn measure_row(
    d: &Daemon,
    scenario: &str,
    kind: Kind,
    clients: &[Client],
    stop: Stop,
    backoff: Duration,
    health: Option<&Row>,
    errors: &mut Vec<(String, usize, String)>,
) -> Row {
    let c = clients.len();
    eprint!("  {scenario} @{c} … ");
    let _ = std::io::stderr().flush();
    d.reset_peak_rss();
    let anon = daemon::ProcSampler::start(d.pid());
    // CPU is sampled around the whole run; scaled to the measured window below.
    let m0 = Metrics::scrape(&d.addr);
    let cpu0 = daemon_cpu_seconds(d.pid());
    let load0 = own_cpu_seconds();
    let threads0 = [WRITER_THREAD, SYNC_THREAD].map(|t| thread_cpu_seconds(d.pid(), t));
    let io0 = daemon_write_bytes(d.pid());
    let writer0 = store_writer_write_bytes(d.pid());
    let t0 = Instant::now();
    let out = load::run(&d.addr, kind, clients, stop, backoff);
    let total = t0.elapsed().as_secs_f64();
    let cpu = daemon_cpu_seconds(d.pid()).zip(cpu0).map(|(a, b)| a - b);
    let load = own_cpu_seconds().zip(load0).map(|(a, b)| a - b);
    let threads = [WRITER_THREAD, SYNC_THREAD]
        .map(|t| thread_cpu_seconds(d.pid(), t))
        .into_iter()
        .zip(threads0)
        .map(|(a, b)| a.zip(b).map(|(a, b)| a - b));
    let m = Metrics::scrape(&d.addr).zip(m0).map(|(a, b)| a.since(&b));
    let io = daemon_write_bytes(d.pid())
        .zip(io0)
        .map(|(a, b)| a.saturating_sub(b));
    let writer_bytes = store_writer_write_bytes(d.pid())
        .zip(writer0)
        .map(|(a, b)| a.saturating_sub(b));
    let peak_anon_kib = anon.finish().anon_kib;
    let s = out.summary;
    let window_share = s.seconds / total.max(1e-9);
    let per_call = |seconds: f64| seconds * window_share * 1e6 / s.ok.max(1) as f64;
    let cpu_per_call = cpu.map(per_call);
    let mut extra = Vec::new();
    // This process is the load generator: its clients' CPU shares the machine with the daemon.
    if let Some(load) = load {
        extra.push(("load_cpu_us_per_call".to_owned(), per_call(load)));
    }
    // The store's threads by name; the rest of the daemon's CPU is the runtime's (requests,
    // effects, handlers). Health and ping leave the store's threads idle.
    if !matches!(kind, Kind::Health | Kind::Ping) {
        for (name, seconds) in ["writer_cpu_us_per_call", "answer_cpu_us_per_call"]
            .into_iter()
            .zip(threads)
        {
            if let Some(seconds) = seconds {
                extra.push((name.to_owned(), per_call(seconds)));
            }
        }
    }
    let write_kib_per_call = io.map(|b| b as f64 * window_share / 1024.0 / s.ok.max(1) as f64);
    if let Some(e) = out.first_error {
        errors.push((scenario.into(), c, e));
    }
    eprintln!(
        "{:.0}/s p50 {:.3} ms p99 {:.3} ms, {} rejected, {} errors",
        s.per_second(),
        ms(s.p50_ns),
        ms(s.p99_ns),
        s.rejected,
        s.errors
    );
    // Health and ping write nothing: no writer figures.
    let (server_mean_ns, ops_per_batch, commits_per_call) = match (kind, m) {
        (Kind::Health | Kind::Ping, _) | (_, None) => (None, None, None),
        (_, Some(m)) => m.per_call(),
    };
    let (writer_busy, build_us_per_commit, sync_us_per_commit) = match (kind, m) {
        (Kind::Health | Kind::Ping, _) | (_, None) => (None, None, None),
        (_, Some(m)) => m.writer(total),
    };
    let pages_per_commit = match (kind, m, writer_bytes) {
        (Kind::Health | Kind::Ping, _, _) | (_, None, _) | (_, _, None) => None,
        (_, Some(m), Some(bytes)) => (m.batches > 0.0).then(|| bytes as f64 / 4096.0 / m.batches),
    };
    Row {
        scenario: scenario.into(),
        concurrency: c,
        peak_rss_kib: d.peak_rss_kib(),
        peak_anon_kib,
        vs_health_rate: health.map(|h| s.per_second() / h.summary.per_second().max(1e-9)),
        vs_health_p50: health.map(|h| s.p50_ns as f64 / h.summary.p50_ns.max(1) as f64),
        daemon_cpu_us_per_call: cpu_per_call,
        attempts: Some(out.attempts),
        server_mean_ns,
        ops_per_batch,
        commits_per_call,
        writer_busy,
        build_us_per_commit,
        sync_us_per_commit,
        pages_per_commit,
        write_kib_per_call,
        summary: s,
        disk_device: None,
        extra,
    }
}

fn row_json(r: &Row, errors: &[(String, usize, String)]) -> Value {
    let s = &r.summary;
    let mut v = json!({
        "scenario": r.scenario,
        "concurrency": r.concurrency,
        "calls_per_second": s.per_second(),
        "p50_ms": ms(s.p50_ns), "p99_ms": ms(s.p99_ns), "max_ms": ms(s.max_ns), "mean_ms": ms(s.mean_ns),
        "ok": s.ok, "rejected": s.rejected, "errors": s.errors, "seconds": s.seconds,
        "peak_rss_kib": r.peak_rss_kib, "peak_anon_kib": r.peak_anon_kib,
        "daemon_cpu_us_per_call": r.daemon_cpu_us_per_call,
        "server_mean_call_ms": r.server_mean_ns.map(ms),
        "store_ops_per_group_commit": r.ops_per_batch,
        "group_commits_per_call": r.commits_per_call,
        "store_writer_busy_share": r.writer_busy,
        "store_build_us_per_group_commit": r.build_us_per_commit,
        "store_lmdb_commit_us_per_group_commit": r.sync_us_per_commit,
        "store_pages_per_group_commit": r.pages_per_commit,
        "store_pages_per_call": r.pages_per_commit.zip(r.commits_per_call).map(|(p, c)| p * c),
        "daemon_write_syscall_kib_per_call": r.write_kib_per_call,
        "disk_device": r.disk_device,
        "attempt_p50_ms": r.attempts.as_ref().map(|a| ms(a.p50_ns)),
        "attempt_p99_ms": r.attempts.as_ref().map(|a| ms(a.p99_ns)),
        "attempt_max_ms": r.attempts.as_ref().map(|a| ms(a.max_ns)),
        "ratio_to_health_calls_per_second": r.vs_health_rate,
        "ratio_to_health_p50": r.vs_health_p50,
        "first_error": errors.iter().find(|(n, c, _)| *n == r.scenario && *c == r.concurrency).map(|e| &e.2),
    });
    for (k, x) in &r.extra {
        v[k.as_str()] = json!(x);
    }
    v
}

/// 4 KiB write + fdatasync in a loop for `duration`, each timed.
/// The samples are also appended to `all`.
fn fsync_probe(dir: &Path, duration: Duration, all: &mut Vec<u64>) -> Result<Summary, String> {
    let path = dir.join("fsync.probe");
    let mut f = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let block = [0x5au8; 4096];
    let mut lat = Vec::new();
    let start = Instant::now();
    while start.elapsed() < duration {
        let t = Instant::now();
        f.write_all(&block).map_err(|e| e.to_string())?;
        f.sync_data().map_err(|e| e.to_string())?;
        lat.push(t.elapsed().as_nanos() as u64);
    }
    let seconds = start.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(path);
    all.extend_from_slice(&lat);
    Ok(Summary::from_latencies(&mut lat, 0, 0, seconds))
}

/// Pages per sync in [`page_probes`]: about what one group commit writes at 32 clients.
const PROBE_PAGES: u64 = 64;
/// The probe file's size in pages (64 MiB): larger than a group commit's spread, small enough
/// to write in a moment.
const PROBE_FILE_PAGES: u64 = 16_384;

/// Where [`page_probes`] writes a sync's pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// At distinct random places, as LMDB's commits mostly do: it copies on write and reuses
    /// freed pages wherever they lie (the store-pages census counts 0.85-0.9 runs of adjacent
    /// pages per page written), and each run is an I/O of its own for the disk.
    Scattered,
    /// One run of adjacent pages at a random place: what the same commit would cost if its
    /// pages were adjacent.
    Adjacent,
}

/// What a commit of [`PROBE_PAGES`] pages costs this disk, scattered and adjacent: that many
/// 4 KiB pages written into one 64 MiB file, then one fdatasync, in a loop for `duration`
/// each.
fn page_probes(dir: &Path, duration: Duration) -> Result<(Summary, Summary), String> {
    use std::os::unix::fs::FileExt;
    let path = dir.join("pages.probe");
    let f = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let block = [0xa5u8; 4096];
    let chunk = block.repeat(256);
    for at in (0..PROBE_FILE_PAGES).step_by(256) {
        f.write_all_at(&chunk, at * 4096)
            .map_err(|e| e.to_string())?;
    }
    f.sync_all().map_err(|e| e.to_string())?;
    let mut state = u64::from(std::process::id()) << 32 | 0x9e37_79b9;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % PROBE_FILE_PAGES
    };
    let mut probe = |placement: Placement| -> Result<Summary, String> {
        let mut lat = Vec::new();
        let start = Instant::now();
        while start.elapsed() < duration {
            // Distinct pages, written in file order as LMDB writes a commit's pages.
            let mut pages = Vec::with_capacity(PROBE_PAGES as usize);
            if placement == Placement::Adjacent {
                let first = next() % (PROBE_FILE_PAGES - PROBE_PAGES);
                pages.extend(first..first + PROBE_PAGES);
            }
            while pages.len() < PROBE_PAGES as usize {
                let p = next();
                if !pages.contains(&p) {
                    pages.push(p);
                }
            }
            pages.sort_unstable();
            let t = Instant::now();
            for p in pages {
                f.write_all_at(&block, p * 4096)
                    .map_err(|e| e.to_string())?;
            }
            f.sync_data().map_err(|e| e.to_string())?;
            lat.push(t.elapsed().as_nanos() as u64);
        }
        Ok(Summary::from_latencies(
            &mut lat,
            0,
            0,
            start.elapsed().as_secs_f64(),
        ))
    };
    let scattered = probe(Placement::Scattered);
    let adjacent = probe(Placement::Adjacent);
    let _ = std::fs::remove_file(path);
    Ok((scattered?, adjacent?))
}

/// µs of disk time per page beyond the first: a page probe's p50 less one plain fsync's, over
/// the pages it added.
fn page_us(probe_p50_ns: u64, fsync_p50_ns: u64) -> f64 {
    probe_p50_ns.saturating_sub(fsync_p50_ns) as f64 / 1e3 / (PROBE_PAGES - 1) as f64
}

struct Doctor {
    entries: u64,
    wall_seconds: f64,
    verify_seconds: f64,
    consistent: bool,
}

/// `worldd doctor --db <db> --json` on the stopped store: wall time and its own figures.
fn run_doctor(worldd: &Path, db: &Path) -> Result<Doctor, String> {
    eprintln!("  worldd doctor --db {} …", db.display());
    let t = Instant::now();
    let out = Command::new(worldd)
        .arg("doctor")
        .arg("--db")
        .arg(db)
        .arg("--json")
        .output()
        .map_err(|e| format!("doctor: {e}"))?;
    let wall_seconds = t.elapsed().as_secs_f64();
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(text.trim()).map_err(|e| {
        format!(
            "doctor output is not JSON ({e}): {text} {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    Ok(Doctor {
        entries: v["entries"].as_u64().unwrap_or(0),
        wall_seconds,
        verify_seconds: v["seconds"].as_f64().unwrap_or(0.0),
        consistent: v["consistent"] == true && out.status.success(),
    })
}

/// Execution slots of the daemon by default (`[limits] execution_slots`); more calls wait.
const CALLBACK_SLOTS: usize = 128;

/// The most a durable row could reach on this disk if CPU, page writes and HTTP were free:
/// every call in flight shares every group commit, and each commit costs LMDB's two syncs.
/// A read or write is two commits (intent, then outcome); a refusal is one. Recorded in each
/// row's JSON and printed for the rows at or above the slot count.
fn ceilings(table_rows: &mut [Row], rows: &[Row], fsync_p50_ns: u64) -> String {
    let mut out = String::new();
    for row in table_rows.iter_mut() {
        let commits = match row.scenario.as_str() {
            "ailang-read" | "ailang-write" => 2.0,
            "plan-refusal" => 1.0,
            _ => continue,
        };
        let Some(health) = row_at(rows, "health", row.concurrency) else {
            continue;
        };
        let slots = row.concurrency.min(CALLBACK_SLOTS) as f64;
        let ceiling = slots / (commits * 2.0 * fsync_p50_ns.max(1) as f64 / 1e9);
        let health_rate = health.summary.per_second().max(1e-9);
        row.extra.push(("ceiling_calls_per_second".into(), ceiling));
        row.extra
            .push(("ceiling_ratio_to_health".into(), ceiling / health_rate));
        if row.concurrency >= CALLBACK_SLOTS {
            out.push_str(&format!(
                "{} @{}: {:.0}/s = {:.3}x health; ceiling {} slots / ({} commit(s) x 2 syncs x fsync p50 {:.3} ms) = {:.0}/s = {:.3}x health\n",
                row.scenario,
                row.concurrency,
                row.summary.per_second(),
                row.summary.per_second() / health_rate,
                slots,
                commits,
                ms(fsync_p50_ns),
                ceiling,
                ceiling / health_rate,
            ));
        }
    }
    out
}

/// What the disk allows each durable row at the pages it writes, however large its group
/// commits grow: every store operation writes its pages (scattered: each about one I/O),
/// while the syncs' fixed cost is shared by the batch. Printed for rows at 32 clients or
/// more, with the pages per operation a row would need for the issue's share of health.
fn page_bounds(table_rows: &mut [Row], rows: &[Row], page_us: f64) -> String {
    let mut out = String::new();
    if page_us <= 0.0 {
        return out;
    }
    for row in table_rows.iter_mut() {
        let target = match row.scenario.as_str() {
            "ailang-read" => 0.20,
            "ailang-write" => 0.10,
            "plan-refusal" => 0.35,
            _ => continue,
        };
        let (Some(pages_per_commit), Some(ops_per_commit), Some(commits_per_call)) = (
            row.pages_per_commit,
            row.ops_per_batch,
            row.commits_per_call,
        ) else {
            continue;
        };
        let Some(health) = row_at(rows, "health", row.concurrency) else {
            continue;
        };
        if row.concurrency < 32 || ops_per_commit <= 0.0 {
            continue;
        }
        let ops_per_call = ops_per_commit * commits_per_call;
        let pages_per_op = pages_per_commit / ops_per_commit;
        let bound = 1e6 / (pages_per_op * page_us * ops_per_call);
        let health_rate = health.summary.per_second().max(1e-9);
        let needed = 1e6 / (target * health_rate * page_us * ops_per_call);
        row.extra
            .push(("page_bound_calls_per_second".into(), bound));
        row.extra.push(("pages_per_op_for_target".into(), needed));
        out.push_str(&format!(
            "{} @{}: {:.0}/s = {:.3}x health; its {:.1} pages per store op x {:.2} ops per call x {:.1} us per scattered page bound it at {:.0}/s = {:.3}x health; {:.0}% of health needs <= {:.2} pages per op\n",
            row.scenario,
            row.concurrency,
            row.summary.per_second(),
            row.summary.per_second() / health_rate,
            pages_per_op,
            ops_per_call,
            page_us,
            bound,
            bound / health_rate,
            target * 100.0,
            needed,
        ));
    }
    out
}

/// What the MCP edge alone costs (the ping row: a credential checked, JSON-RPC parsed, an SSE
/// answer written) and what each MCP row at its concurrency costs beyond it, in daemon CPU per
/// request. Records `cpu_us_beyond_ping` in those rows.
fn edge_floor(table_rows: &mut [Row], rows: &[Row]) -> String {
    let Some(ping) = rows.iter().find(|r| r.scenario == "mcp-ping") else {
        return String::new();
    };
    let (Some(ping_cpu), Some(share)) = (ping.daemon_cpu_us_per_call, ping.vs_health_rate) else {
        return String::new();
    };
    let mut beyond = Vec::new();
    for row in table_rows.iter_mut() {
        if row.concurrency != ping.concurrency
            || !row.scenario.starts_with("ailang-") && row.scenario != "plan-refusal"
        {
            continue;
        }
        let Some(cpu) = row.daemon_cpu_us_per_call else {
            continue;
        };
        row.extra
            .push(("cpu_us_beyond_ping".into(), cpu - ping_cpu));
        beyond.push(format!("{} {:.0} us", row.scenario, cpu - ping_cpu));
    }
    let mut out = format!(
        "mcp-ping @{}: {:.0}/s = {:.3}x health, {:.0} us of daemon CPU per ping (the MCP edge alone: credential, JSON-RPC, SSE answer)",
        ping.concurrency,
        ping.summary.per_second(),
        share,
        ping_cpu,
    );
    if !beyond.is_empty() {
        out.push_str(&format!("; beyond it per call: {}", beyond.join(", ")));
    }
    out.push('\n');
    out
}

/// The row of `scenario` at `concurrency`, if it ran.
fn row_at<'a>(rows: &'a [Row], scenario: &str, concurrency: usize) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.scenario == scenario && r.concurrency == concurrency)
}

/// The daemon's own counters, from `GET /v1/metrics`.
#[derive(Debug, Clone, Copy)]
struct Metrics {
    batches: f64,
    operations: f64,
    build_seconds: f64,
    sync_seconds: f64,
    call_seconds_sum: f64,
    call_count: f64,
}

impl Metrics {
    fn scrape(addr: &str) -> Option<Metrics> {
        let text = ureq::get(&format!("http://{addr}/v1/metrics"))
            .call()
            .ok()?
            .into_string()
            .ok()?;
        let value = |name: &str| -> Option<f64> {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
                .and_then(|v| v.trim().parse().ok())
        };
        Some(Metrics {
            batches: value("worldd_commit_batches_total")?,
            operations: value("worldd_commit_operations_total")?,
            build_seconds: value("worldd_commit_build_seconds_total").unwrap_or(0.0),
            sync_seconds: value("worldd_commit_sync_seconds_total").unwrap_or(0.0),
            call_seconds_sum: value("worldd_call_seconds_sum").unwrap_or(0.0),
            call_count: value("worldd_call_seconds_count").unwrap_or(0.0),
        })
    }

    fn since(&self, before: &Metrics) -> Metrics {
        Metrics {
            batches: self.batches - before.batches,
            operations: self.operations - before.operations,
            build_seconds: self.build_seconds - before.build_seconds,
            sync_seconds: self.sync_seconds - before.sync_seconds,
            call_seconds_sum: self.call_seconds_sum - before.call_seconds_sum,
            call_count: self.call_count - before.call_count,
        }
    }

    /// (mean server-side call ns, store operations per group commit, group commits per call).
    fn per_call(&self) -> (Option<u64>, Option<f64>, Option<f64>) {
        let mean =
            (self.call_count > 0.0).then(|| (self.call_seconds_sum / self.call_count * 1e9) as u64);
        let per_batch = (self.batches > 0.0).then(|| self.operations / self.batches);
        let commits = (self.call_count > 0.0).then(|| self.batches / self.call_count);
        (mean, per_batch, commits)
    }

    /// (share of `elapsed` the store writer was busy, mean µs per group commit building it,
    /// mean µs per group commit inside LMDB's commit).
    fn writer(&self, elapsed: f64) -> (Option<f64>, Option<f64>, Option<f64>) {
        if self.batches <= 0.0 {
            return (None, None, None);
        }
        (
            Some((self.build_seconds + self.sync_seconds) / elapsed.max(1e-9)),
            Some(self.build_seconds / self.batches * 1e6),
            Some(self.sync_seconds / self.batches * 1e6),
        )
    }
}

/// Bytes a process passed to write system calls (`/proc/PID/io` `wchar`): LMDB's page and
/// meta writes, worktree files, HTTP answers and logs. (`write_bytes` is not used: with large
/// page-cache folios it counts whole folios per dirtied 4 KiB page, ~10x too much here.)
fn daemon_write_bytes(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("wchar: "))
        .and_then(|v| v.trim().parse().ok())
}

/// The store's writer thread (`worldd-store-writer`, shown as `worldd-store-wr`).
const WRITER_THREAD: &[&str] = &["worldd-store-wr"];
/// The thread that syncs committed batches and answers their callers while the writer goes
/// on (`worldd-store-sync`, shown as `worldd-store-sy`). Older builds only answered there
/// (`worldd-store-answer`); `--against` measures either.
const SYNC_THREAD: &[&str] = &["worldd-store-sy", "worldd-store-an"];

/// The `/proc/<pid>/task/<tid>` directory of the daemon's thread named one of `comms`.
fn named_thread(pid: u32, comms: &[&str]) -> Option<PathBuf> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
        .map(|task| task.path())
        .find(|task| {
            std::fs::read_to_string(task.join("comm")).is_ok_and(|c| comms.contains(&c.trim_end()))
        })
}

/// Bytes the store's writer thread passed to write system calls: LMDB's page writes and
/// meta-page writes, and nothing else.
fn store_writer_write_bytes(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(named_thread(pid, WRITER_THREAD)?.join("io")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("wchar: "))
        .and_then(|v| v.trim().parse().ok())
}

/// User + system CPU seconds of the daemon's thread named one of `comms`.
fn thread_cpu_seconds(pid: u32, comms: &[&str]) -> Option<f64> {
    cpu_seconds(&named_thread(pid, comms)?.join("stat"))
}

/// User + system CPU seconds of a process, from `/proc/<pid>/stat`.
pub(crate) fn daemon_cpu_seconds(pid: u32) -> Option<f64> {
    cpu_seconds(Path::new(&format!("/proc/{pid}/stat")))
}

/// This process's CPU seconds, all its threads: the load generator's.
fn own_cpu_seconds() -> Option<f64> {
    cpu_seconds(Path::new("/proc/self/stat"))
}

/// User + system CPU seconds from a `stat` file of `/proc` (a process's or a thread's).
fn cpu_seconds(stat: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(stat).ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &text[text.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    // SAFETY: sysconf only reads a system constant.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some((utime + stime) / tick.max(1.0))
}

fn cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn git_head(workspace: &Path) -> Option<String> {
    let out = Command::new("git")
        .current_dir(workspace)
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The filesystem type of `dir` (statfs magic), for the report.
/// Where this run's stores and logs go.
fn tmp_root(args: &Args, target: &Path) -> PathBuf {
    args.tmp_dir
        .clone()
        .unwrap_or_else(|| target.join("bench-tmp"))
}

fn fs_type(dir: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return "unknown".into();
    };
    // SAFETY: `statfs` is plain old data; all-zero is a valid value for statfs(2) to fill.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `s` a valid out-pointer.
    if unsafe { libc::statfs(c.as_ptr(), &mut s) } != 0 {
        return "unknown".into();
    }
    match s.f_type as i64 {
        0x01021994 => "tmpfs".into(),
        0xEF53 => "ext4".into(),
        0x58465342 => "xfs".into(),
        0x9123683E => "btrfs".into(),
        0x794c7630 => "overlayfs".into(),
        other => format!("0x{other:x}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run's directory goes with the run, on an early error as on success, unless kept:
    /// the stores left by `--against` runs once filled the disk.
    #[test]
    fn a_run_directory_is_removed_when_the_run_ends_unless_kept() {
        let root = tempfile::tempdir().unwrap();
        let run = RunDir::under(root.path().to_path_buf(), "run", false).unwrap();
        let path = run.path.clone();
        std::fs::create_dir_all(path.join("baseline-0/db")).unwrap();
        std::fs::write(path.join("baseline-0/db/data.mdb"), b"pages").unwrap();
        let failed = || -> Result<(), String> {
            let _run = run;
            Err("sanity read failed".into())
        };
        assert!(failed().is_err());
        assert!(!path.exists(), "{} is still there", path.display());

        let kept = RunDir::under(root.path().to_path_buf(), "attacks", true).unwrap();
        let path = kept.path.clone();
        drop(kept);
        assert!(path.is_dir());
    }

    #[test]
    fn the_steal_share_is_the_stolen_part_of_all_cpu_time_between_two_readings() {
        // user nice system idle iowait irq softirq steal guest guest_nice
        let a = CpuTicks::parse("cpu  100 0 50 800 20 0 10 20 7 0\ncpu0 1 2 3\n").unwrap();
        let b = CpuTicks::parse("cpu  400 0 150 1100 20 0 30 220 9 0\n").unwrap();
        // 920 ticks passed, 200 of them stolen; guest time is inside user and not added.
        let share = b.steal_since(&a).unwrap();
        assert!((share - 200.0 / 920.0).abs() < 1e-12, "{share}");
        assert!(a.steal_since(&a).is_none(), "no time passed");
        assert!(CpuTicks::parse("intr 1 2 3\n").is_none());
        let mut health = row("health", 30_000);
        health.extra.push(("cpu_steal_share".into(), 0.31));
        assert_eq!(
            steal_line(&[health, row("ailang-read", 2_000)]),
            "CPU time stolen by the hypervisor: health @32 31 %\n"
        );
        assert_eq!(steal_line(&[row("health", 1)]), "");
    }

    /// A row of `per_second` calls in one second, at 32 clients.
    pub(crate) fn row(scenario: &str, per_second: u64) -> Row {
        Row {
            scenario: scenario.into(),
            concurrency: 32,
            summary: Summary {
                ok: per_second,
                seconds: 1.0,
                ..Summary::default()
            },
            ..Row::default()
        }
    }

    /// Each durable row's CPU per call is split into the store's threads and the rest.
    #[test]
    fn the_thread_line_splits_a_rows_cpu_into_the_writer_the_syncing_thread_and_the_rest() {
        let mut read = Row {
            daemon_cpu_us_per_call: Some(300.0),
            ..row("ailang-read", 4_000)
        };
        read.extra.push(("writer_cpu_us_per_call".into(), 110.0));
        read.extra.push(("answer_cpu_us_per_call".into(), 8.0));
        let health = Row {
            daemon_cpu_us_per_call: Some(20.0),
            ..row("health", 40_000)
        };
        assert_eq!(
            thread_line(&[health.clone(), read]),
            "daemon CPU per call by thread: ailang-read @32 writer 110 us, syncing 8 us, the rest 182 us\n"
        );
        assert_eq!(thread_line(&[health]), "", "no store threads, no line");
    }

    /// The machine's CPUs over a row's whole CPU per call bound its rate; without the store's
    /// threads, a second bound no store change can pass.
    #[test]
    fn the_cpu_bound_line_divides_the_machine_by_each_rows_cpu_per_call() {
        let mut read = Row {
            daemon_cpu_us_per_call: Some(160.0),
            vs_health_rate: Some(0.125),
            ..row("ailang-read", 8_000)
        };
        read.extra.push(("writer_cpu_us_per_call".into(), 50.0));
        read.extra.push(("answer_cpu_us_per_call".into(), 10.0));
        read.extra.push(("load_cpu_us_per_call".into(), 40.0));
        // Health 64,000/s; 2 CPUs at 200 us per call: 10,000/s = 0.156x; at 140 us: 0.223x.
        assert_eq!(
            cpu_bound_line(&[read.clone()], 2),
            "CPU bound on 2 CPUs: ailang-read @32 daemon 160 us + load generator 40 us per call allow 10000/s = 0.156x health (measured 0.125x); with the store's threads free 0.223x\n"
        );
        let health = Row {
            daemon_cpu_us_per_call: Some(14.0),
            ..row("health", 64_000)
        };
        assert_eq!(
            cpu_bound_line(&[health], 2),
            "",
            "no store threads, no line"
        );
        read.extra.retain(|(k, _)| k != "load_cpu_us_per_call");
        assert_eq!(cpu_bound_line(&[read], 2), "", "no load figure, no line");
    }

    /// The @1 read against the floor the target names, and what its own commits cost beyond it;
    /// without the row's commit figures, the comparison alone.
    #[test]
    fn the_floor_line_sets_the_reads_commits_beside_the_floor_it_is_held_to() {
        let read = Row {
            commits_per_call: Some(1.0),
            pages_per_commit: Some(19.1),
            sync_us_per_commit: Some(635.0),
            ..row("ailang-read", 900)
        };
        let floor = (1_157_000, 65_000, 377_000);
        assert_eq!(
            floor_line(floor, 156_000, Some(&read)),
            "ailang-read @1: p50 1.157 ms vs floor 0.377 ms (health p50 0.065 + 2 x fsync p50 0.156) = 3.07x; its 1.00 group commits per call take 2.0 syncs and 635 us of LMDB's commit each, for 19.1 pages\n"
        );
        assert_eq!(
            floor_line(floor, 156_000, None),
            "ailang-read @1: p50 1.157 ms vs floor 0.377 ms (health p50 0.065 + 2 x fsync p50 0.156) = 3.07x\n"
        );
    }

    /// The writer's time per group commit, times the group commits per call, bounds a row by
    /// the one serial thread; a row without writer figures gets no line.
    #[test]
    fn the_writer_bound_line_divides_a_second_by_the_writers_time_per_call() {
        let read = Row {
            vs_health_rate: Some(0.075),
            build_us_per_commit: Some(400.0),
            sync_us_per_commit: Some(1_200.0),
            commits_per_call: Some(0.125),
            writer_busy: Some(0.96),
            ..row("ailang-read", 4_800)
        };
        // Health 64,000/s; 1,600 us per commit x 0.125 commits per call = 200 us: 5,000/s.
        assert_eq!(
            writer_bound_line(std::slice::from_ref(&read)),
            "store writer bound: ailang-read @32 1600 us per group commit (400 building, 1200 in LMDB's commit) x 0.125 commits per call allow 5000/s = 0.078x health (measured 0.075x, the writer 96% busy)\n"
        );
        let health = row("health", 64_000);
        assert_eq!(
            writer_bound_line(&[health]),
            "",
            "no writer figures, no line"
        );
        let idle = Row {
            commits_per_call: Some(0.0),
            ..read
        };
        assert_eq!(writer_bound_line(&[idle]), "", "no commits, no line");
    }

    /// The @128 line: p99 against p99 @32, the mean latencies against Little's law, and each
    /// p99 against its own mean; a row without its @32 counterpart gets no line.
    #[test]
    fn the_tail_line_sets_the_p99_ratio_beside_littles_law() {
        let at = |c: usize, per_second: u64, mean_ms: u64, p99_ms: u64| Row {
            concurrency: c,
            summary: Summary {
                mean_ns: mean_ms * 1_000_000,
                p99_ns: p99_ms * 1_000_000,
                ..row("ailang-read", per_second).summary
            },
            ..row("ailang-read", per_second)
        };
        // 32 clients at 6,400/s wait 5 ms on average; 128 at 6,400/s wait 20 ms.
        let rows = [at(32, 6_400, 5, 10), at(128, 6_400, 20, 36)];
        assert_eq!(
            tail_line(&rows),
            "ailang-read @128: p99 36.0 ms = 3.60x p99 @32 (the target allows 4x); mean 20.0 ms = 4.00x @32's, at 1.00x its rate with 4x its clients (Little's law: 4.00x); p99 1.80x the mean, @32 2.00x\n"
        );
        assert_eq!(tail_line(&rows[1..]), "", "no row @32, no line");
        assert_eq!(tail_line(&rows[..1]), "", "nothing above 32 clients");
    }

    /// The ping row's CPU is what every MCP call pays at the edge; the rest is the call's own.
    #[test]
    fn the_edge_floor_is_the_ping_row_and_each_mcp_row_is_measured_beyond_it() {
        let with = |scenario: &str, per_second: u64, cpu: f64| Row {
            daemon_cpu_us_per_call: Some(cpu),
            vs_health_rate: Some(per_second as f64 / 40_000.0),
            ..row(scenario, per_second)
        };
        let rows = vec![
            row("health", 40_000),
            with("ailang-read", 4_000, 400.0),
            with("plan-refusal", 8_000, 160.0),
            with("mcp-ping", 16_000, 70.0),
        ];
        let mut table = rows.clone();
        assert_eq!(
            edge_floor(&mut table, &rows),
            "mcp-ping @32: 16000/s = 0.400x health, 70 us of daemon CPU per ping (the MCP edge alone: credential, JSON-RPC, SSE answer); beyond it per call: ailang-read 330 us, plan-refusal 90 us\n"
        );
        assert_eq!(
            table[1].extra,
            vec![("cpu_us_beyond_ping".to_owned(), 330.0)]
        );
        assert!(table[0].extra.is_empty() && table[3].extra.is_empty());
        assert_eq!(
            edge_floor(&mut table, &rows[..3]),
            "",
            "no ping row, no line"
        );
    }

    /// A read row writing 6 pages per store operation, two operations per call, at 16 µs per
    /// scattered page: the disk allows 1e6 / (6 x 16 x 2) calls/s, and 20 % of a 40,000/s
    /// health row would need 1e6 / (8,000 x 16 x 2) pages per operation.
    #[test]
    fn the_page_bound_of_a_row_follows_its_pages_per_operation() {
        let health = row("health", 40_000);
        let mut read = row("ailang-read", 2_500);
        read.ops_per_batch = Some(12.0);
        read.pages_per_commit = Some(72.0);
        read.commits_per_call = Some(2.0 / 12.0);
        let mut table = vec![health.clone(), read];
        let text = page_bounds(&mut table, &[health], 16.0);
        assert!(
            text.starts_with("ailang-read @32: 2500/s = 0.062x health; its 6.0 pages per store op x 2.00 ops per call x 16.0 us per scattered page bound it at 5208/s = 0.130x health; 20% of health needs <= 3.91 pages per op"),
            "{text}"
        );
        let extra = &table[1].extra;
        assert_eq!(extra[0].0, "page_bound_calls_per_second");
        assert!((extra[0].1 - 1e6 / 192.0).abs() < 1e-6, "{extra:?}");
        assert!((extra[1].1 - 1e6 / 256_000.0).abs() < 1e-9, "{extra:?}");
        // Without a probe figure, or below 32 clients, nothing is claimed.
        assert_eq!(
            page_bounds(&mut table.clone(), &[table[0].clone()], 0.0),
            ""
        );
        table[1].concurrency = 8;
        assert_eq!(
            page_bounds(&mut table.clone(), &[table[0].clone()], 16.0),
            ""
        );
    }

    #[test]
    fn a_page_costs_the_probe_beyond_one_fsync_over_the_pages_it_added() {
        let us = page_us(300_000 + 63 * 15_000, 300_000);
        assert!((us - 15.0).abs() < 1e-9, "{us}");
        assert_eq!(page_us(100_000, 300_000), 0.0);
    }
}
