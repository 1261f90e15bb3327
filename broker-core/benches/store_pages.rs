//! What the store writer writes: pages per group commit, by table, and the writer's time per
//! operation, for the calls `worldd` serves, driven straight through the coordinator.
//!
//! Run: `cargo bench -p broker-core --bench store_pages` (options below). It creates a store
//! under the target directory, publishes the se-tools, fills the store with `--fill` calls
//! (alternating a write of unique 1 KiB content and a read returning 1 KiB, as `worldd-bench`
//! fills its store), then runs each row twice at each thread count:
//!
//! - **timed**: `--calls` calls, the writer's own counters (build and LMDB-commit time per
//!   commit and per operation, operations per commit) and the bytes the process passed to
//!   write calls (`/proc/self/io` `wchar`: LMDB's page writes and its meta-page write, nothing
//!   else writes here), divided by the page size: the pages each commit writes;
//! - **census**: the same number of calls with a page census of `data.mdb` after every commit
//!   (`broker_core::pages`), which names the table of every page a commit wrote. The census
//!   takes milliseconds, so while it runs the other threads queue: batches are larger than in
//!   the timed pass. Both passes print their operations per commit. A third line says where
//!   a commit's pages went: past the file's old end (LMDB grew the file) or onto pages its
//!   free list gave back, each side in runs of consecutive pages and lone pages; and how many
//!   of them, by table, the next commit replaced (the copies of each tree's path that every
//!   commit rewrites).
//!
//! Options: `--fill N` (20000), `--calls N` (400 per pass), `--threads LIST` (1,8,32),
//! `--rows LIST` (read,write,refusal), `--dir PATH` (where the store goes; default the
//! target directory, on the repository's disk), `--no-census` (timed passes only, e.g. under
//! a profiler).
//!
//! The handler is in-process (no plugin, no file I/O), so every figure is the store's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use broker_core::broker::HandlerIdentity;
use broker_core::coordinator::{
    Call, Coordinator, CoordinatorConfig, EffectHandler, EffectRequest, HandlerOutcome, Handlers,
    Surface,
};
use broker_core::pages::{self, PageCount, Placement};
use broker_core::refusal_rate::RefusalRate;
use broker_core::registry;
use broker_core::session::{self, Session};
use broker_core::store::Store;
use broker_core::transition::Transition;
use serde_json::{json, Map, Value};

/// Reads return this much text; writes store this much.
const PAYLOAD: usize = 1024;

struct Args {
    fill: u64,
    calls: u64,
    threads: Vec<usize>,
    rows: Vec<String>,
    dir: Option<PathBuf>,
    census: bool,
}

fn args() -> Args {
    let mut a = Args {
        fill: 20_000,
        calls: 400,
        threads: vec![1, 8, 32],
        rows: vec!["read".into(), "write".into(), "refusal".into()],
        dir: None,
        census: true,
    };
    let argv: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < argv.len() {
        let value = argv.get(i + 1).cloned().unwrap_or_default();
        match argv[i].as_str() {
            "--fill" => a.fill = value.parse().expect("--fill N"),
            "--calls" => a.calls = value.parse().expect("--calls N"),
            "--threads" => {
                a.threads = value
                    .split(',')
                    .map(|t| t.parse().expect("--threads LIST"))
                    .collect()
            }
            "--rows" => a.rows = value.split(',').map(str::to_owned).collect(),
            "--dir" => a.dir = Some(PathBuf::from(value)),
            "--no-census" => {
                a.census = false;
                i += 1;
                continue;
            }
            _ => {
                i += 1; // cargo bench passes --bench
                continue;
            }
        }
        i += 2;
    }
    a
}

/// Workspace.Read answers 1 KiB of text; Workspace.Write answers the byte count. Both carry
/// the two refs the real plugin stamps on every output.
struct Handler;

impl EffectHandler for Handler {
    fn identity(&self) -> HandlerIdentity {
        HandlerIdentity::in_process("store-pages-bench", "0.0.0")
    }

    fn execute(&self, req: &EffectRequest<'_>) -> HandlerOutcome {
        let mut out = Map::new();
        out.insert("ok".into(), json!(true));
        if req.effect == "Workspace.Read" {
            out.insert("content".into(), json!("r".repeat(PAYLOAD)));
        } else {
            out.insert("bytes".into(), json!(PAYLOAD));
        }
        let stamp = format!("sha256:{}", "ab".repeat(32));
        out.insert("tool".into(), json!(stamp));
        out.insert("policy_digest".into(), json!(stamp));
        HandlerOutcome::Ok(out)
    }
}

fn se_tool(id: &str) -> Transition {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../transitions/se-tools")
        .join(format!("{id}.json"));
    Transition::from_slice(&std::fs::read(path).expect("se-tool document")).expect("se-tool")
}

/// The arguments of call `n` of a row: unique write content, so no two calls share objects.
fn call_args(row: &str, n: u64) -> (&'static str, Value) {
    match row {
        "write" => {
            let head = format!("{n:016x}");
            let content = format!("{head}{}", "w".repeat(PAYLOAD - head.len()));
            ("ailang-write", json!({"path": "w.txt", "content": content}))
        }
        "refusal" => ("ailang-read", json!({"path": "f.txt", "limit": 1})),
        _ => ("ailang-read", json!({"path": "f.txt"})),
    }
}

/// Run `calls` calls of `row` from `threads` threads, each its own episode.
fn drive(coordinator: &Coordinator, sessions: &[Session], row: &str, calls: u64, seq: &AtomicU64) {
    let left = AtomicU64::new(calls);
    std::thread::scope(|s| {
        for session in sessions {
            let left = &left;
            s.spawn(move || {
                while left
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| l.checked_sub(1))
                    .is_ok()
                {
                    let n = seq.fetch_add(1, Ordering::Relaxed);
                    // The fill alternates writes and reads.
                    let kind = match row {
                        "fill" if n.is_multiple_of(2) => "write",
                        "fill" => "read",
                        other => other,
                    };
                    let (tool, args) = call_args(kind, n);
                    let out = coordinator.invoke(&Call {
                        surface: Surface::Mcp,
                        session: session.clone().into(),
                        skill_id: tool.into(),
                        task_id: None,
                        args,
                        transition_fn: None,
                    });
                    let out = out.unwrap_or_else(|e| panic!("{tool}: {e}"));
                    let v: Value = serde_json::from_slice(&out.output).expect("output");
                    let expect_ok = kind != "refusal";
                    assert_eq!(v["ok"], json!(expect_ok), "{tool}: {v}");
                }
            });
        }
    });
}

/// Bytes this process passed to write calls (`wchar`). `write_bytes` would count whole
/// page-cache folios, several pages each, not the pages LMDB writes.
fn written() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("wchar: "))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

struct Counters {
    batches: u64,
    ops: u64,
    build: u64,
    commit: u64,
}

fn counters(store: &Store) -> Counters {
    let s = store.stats();
    Counters {
        batches: s.batches.load(Ordering::Relaxed),
        ops: s.operations.load(Ordering::Relaxed),
        build: s.build_nanos.load(Ordering::Relaxed),
        commit: s.commit_nanos.load(Ordering::Relaxed),
    }
}

#[derive(Default)]
struct Tally {
    commits: u64,
    ops: u64,
    /// Runs of consecutive page numbers among the pages written, summed over commits.
    runs: u64,
    tables: BTreeMap<String, PageCount>,
    /// Where the pages went (past the file's old end, or reused), summed over commits.
    placement: Placement,
    /// By table: pages a commit wrote that the next commit's snapshot no longer holds (it
    /// wrote them again elsewhere), summed over `followed` commits.
    replaced: BTreeMap<String, u64>,
    followed: u64,
    /// The last commit's new pages, by table, to be checked against the next snapshot.
    last_written: BTreeMap<String, Vec<u64>>,
}

/// The store, the coordinator and one session per thread, after the fill.
struct Bench {
    db: PathBuf,
    store: Store,
    coordinator: Coordinator,
    sessions: Vec<Session>,
    seq: AtomicU64,
}

/// A store with the se-tools published and a session for each of `threads` (at least 8, the
/// fill's threads).
fn setup(db: PathBuf, threads: usize) -> Bench {
    let store = Store::create(&db).expect("store");
    let docs = ["ailang-read", "ailang-write"].map(se_tool).to_vec();
    registry::publish(&store, registry::DEFAULT_REGISTRY, docs, "bench").expect("publish");
    let mut handlers = Handlers::new();
    for effect in ["Workspace.Read", "Workspace.Write"] {
        handlers.insert(effect, Arc::new(Handler)).expect("handler");
    }
    // As the daemon runs them: the Workspace plugin declares reads of class `read`, and the
    // daemon is its store's only spender, so a read runs beside its intent.
    handlers.mark_read_only("Workspace.Read");
    // The refusal row measures committed refusals, not their rate limit.
    let config = CoordinatorConfig {
        refusal_rate: RefusalRate::new(0.0, 1).expect("rate off"),
        sole_spender: true,
        ..CoordinatorConfig::default()
    };
    let coordinator = Coordinator::new(store.clone(), handlers, config);
    let sessions: Vec<Session> = (0..threads.max(8))
        .map(|i| {
            let grants = vec![
                "Workspace.Read=worktree:1000000000".parse().expect("grant"),
                "Workspace.Write=worktree:1000000000"
                    .parse()
                    .expect("grant"),
            ];
            session::mint(&store, &format!("ep{i}"), grants, 86_400, coordinator.now())
                .expect("mint")
                .session
        })
        .collect();
    Bench {
        db,
        store,
        coordinator,
        sessions,
        seq: AtomicU64::new(0),
    }
}

/// What the writer's counters and the process's write bytes say of one timed pass.
struct Timed {
    commits: f64,
    ops: f64,
    pages: f64,
    build_us: f64,
    lmdb_us: f64,
}

impl Timed {
    /// The timed pass's columns: operations and pages per commit, pages and writer µs per
    /// operation.
    fn columns(&self) -> String {
        let (commits, ops) = (self.commits, self.ops);
        format!(
            "{:>6.2} {:>7.1} {:>7.2} {:>7.1} {:>7.1} {:>7.1}",
            ops / commits,
            self.pages / commits,
            self.pages / ops,
            self.build_us / ops,
            self.lmdb_us / ops,
            (self.build_us + self.lmdb_us) / ops
        )
    }
}

fn timed_pass(b: &Bench, sessions: &[Session], row: &str, calls: u64) -> Timed {
    let c0 = counters(&b.store);
    let w0 = written();
    drive(&b.coordinator, sessions, row, calls, &b.seq);
    let c1 = counters(&b.store);
    let w1 = written();
    Timed {
        commits: (c1.batches - c0.batches).max(1) as f64,
        ops: (c1.ops - c0.ops).max(1) as f64,
        pages: (w1 - w0) as f64 / 4096.0,
        build_us: (c1.build - c0.build) as f64 / 1e3,
        lmdb_us: (c1.commit - c0.commit) as f64 / 1e3,
    }
}

/// `calls` calls with a census after every commit, tallied by table.
fn census_pass(b: &Bench, sessions: &[Session], row: &str, calls: u64) -> Tally {
    let slot = Arc::new(Mutex::new((
        pages::census(&b.db).expect("census"),
        Tally::default(),
    )));
    let observer = slot.clone();
    let dir = b.db.clone();
    b.store.observe_commits(Some(Box::new(move |n, ok| {
        if !ok {
            return;
        }
        let Ok(after) = pages::census(&dir) else {
            return;
        };
        let mut guard = observer.lock().expect("census");
        let (before, tally) = &mut *guard;
        tally.commits += 1;
        tally.ops += n as u64;
        tally.runs += after.runs_since(before).1;
        for (table, count) in after.written_since(before) {
            tally.tables.entry(table).or_default().add(count);
        }
        let placed = after.placement_since(before);
        tally.placement.appended.add(placed.appended);
        tally.placement.reused.add(placed.reused);
        let held = after.all_pages();
        let last = std::mem::replace(&mut tally.last_written, after.new_pages_since(before));
        if !last.is_empty() {
            tally.followed += 1;
        }
        for (table, written) in last {
            let gone = written.iter().filter(|p| !held.contains(p)).count() as u64;
            *tally.replaced.entry(table).or_default() += gone;
        }
        *before = after;
    })));
    drive(&b.coordinator, sessions, row, calls, &b.seq);
    b.store.observe_commits(None);
    let mut guard = slot.lock().expect("census");
    std::mem::take(&mut guard.1)
}

/// Where a commit's pages went, and which of them the next commit replaced: the pages LMDB
/// reuses lie between pages that stay, so each is a run of its own on the disk.
fn placement_line(tally: &Tally) -> String {
    let commits = tally.commits.max(1) as f64;
    let per = |n: u64| n as f64 / commits;
    let (a, r) = (tally.placement.appended, tally.placement.reused);
    let followed = tally.followed.max(1) as f64;
    let mut replaced: Vec<(&String, &u64)> =
        tally.replaced.iter().filter(|(_, n)| **n > 0).collect();
    replaced.sort_by_key(|(_, n)| std::cmp::Reverse(**n));
    let total: u64 = replaced.iter().map(|(_, n)| **n).sum();
    let by_table = replaced
        .iter()
        .map(|(t, n)| format!("{t} {:.1}", **n as f64 / followed))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "per commit: {:.1} pages past the old end in {:.1} runs; {:.1} reused in {:.1} runs, {:.1} of them lone; replaced by the next commit {:.1}: {by_table}",
        per(a.pages),
        per(a.runs),
        per(r.pages),
        per(r.runs),
        per(r.lone),
        total as f64 / followed,
    )
}

/// The census columns and the line of pages by table, then the line of page kinds.
fn census_lines(tally: &Tally) -> (String, String) {
    let total: u64 = tally.tables.values().map(PageCount::total).sum();
    let cops = tally.ops.max(1) as f64;
    let commits = tally.commits.max(1) as f64;
    let mut by_table: Vec<(&String, &PageCount)> = tally.tables.iter().collect();
    by_table.sort_by_key(|(_, c)| std::cmp::Reverse(c.total()));
    let breakdown = by_table
        .iter()
        .map(|(t, c)| format!("{t} {:.2}", c.total() as f64 / cops))
        .collect::<Vec<_>>()
        .join(", ");
    let columns = format!(
        "{:>6.2} {:>7.1} {:>7.2} {:>7.1} | {breakdown}",
        cops / commits,
        total as f64 / commits,
        total as f64 / cops,
        tally.runs as f64 / commits,
    );
    let kinds = by_table
        .iter()
        .take(6)
        .map(|(t, c)| {
            format!(
                "{t} b{:.2}/l{:.2}/o{:.2}",
                c.branch as f64 / cops,
                c.leaf as f64 / cops,
                c.overflow as f64 / cops
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    (columns, kinds)
}

fn print_header() {
    println!(
        "{:<8} {:>3} | {:>6} {:>7} {:>7} {:>7} {:>7} {:>7} | {:>6} {:>7} {:>7} {:>7}",
        "row",
        "thr",
        "op/cm",
        "pg/cm",
        "pg/op",
        "bld/op",
        "lmdb/op",
        "us/op",
        "op/cm",
        "pg/cm",
        "pg/op",
        "run/cm"
    );
    println!(
        "{:<12} | {:<48} | census: op/cm pg/cm pg/op, runs of consecutive pages per commit; pages per op by table",
        "", "timed: pages written (wchar), writer µs"
    );
}

fn main() {
    let a = args();
    let base = a
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")));
    std::fs::create_dir_all(&base).expect("bench directory");
    let tmp = tempfile::tempdir_in(&base).expect("temp dir");
    let most = a.threads.iter().copied().max().unwrap_or(1);
    let b = setup(tmp.path().join("db"), most);

    let started = Instant::now();
    drive(&b.coordinator, &b.sessions[..8], "fill", a.fill, &b.seq);
    let fill_secs = started.elapsed().as_secs_f64();
    let size = std::fs::metadata(b.db.join("data.mdb")).map_or(0, |m| m.len());
    println!(
        "store-pages: filled {} calls in {fill_secs:.1}s ({:.0} calls/s, 8 threads), data.mdb {:.0} MiB, dir {}",
        a.fill,
        a.fill as f64 / fill_secs,
        size as f64 / (1 << 20) as f64,
        base.display()
    );
    print_header();
    for row in &a.rows {
        for &threads in &a.threads {
            let sessions = &b.sessions[..threads];
            let timed = timed_pass(&b, sessions, row, a.calls).columns();
            if !a.census {
                println!("{row:<8} {threads:>3} | {timed} |");
                continue;
            }
            let tally = census_pass(&b, sessions, row, a.calls);
            let (columns, kinds) = census_lines(&tally);
            println!("{row:<8} {threads:>3} | {timed} | {columns}");
            println!(
                "{:<12} | {:<48} | branch/leaf/overflow per op: {kinds}",
                "", ""
            );
            println!("{:<12} | {:<48} | {}", "", "", placement_line(&tally));
        }
    }
}
