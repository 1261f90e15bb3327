//! Instructions per call: each request row's daemon run under Valgrind's callgrind, one
//! client calling in sequence, the daemon's instructions counted between a zeroing and a dump.
//!
//! Rates and CPU times move by several per cent from one run to the next on a shared machine,
//! so a change that saves a few per cent of a call's CPU cannot be told from noise by them. An
//! instruction count can: it is the same from run to run within a fraction of a per cent. It
//! counts user space only (the kernel's side of a system call is not in it), and every thread
//! of the daemon runs one at a time under Valgrind, so it says nothing about waiting.
//!
//! Each thread is counted apart (`--separate-threads`), so the store writer's share, which
//! every call's commit waits for in turn, is reported beside the whole.
//!
//! SHA-256's block function is taken out of the count: Valgrind does not offer the
//! processor's SHA instructions, so the `sha2` crate falls back to its portable code, many
//! times the instructions the daemon runs natively, and half of a read's count. The block
//! function's own instructions are read from the dump and subtracted.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use crate::against::Build;
use crate::daemon::Daemon;
use crate::load::{self, Kind};

/// Calls made before the count starts: the daemon's caches and the store's first pages.
const WARMUP: u64 = 50;

/// The function whose instructions are taken out (see the module's comment).
const LEFT_OUT: &str = "sha2::sha256::compress256";

/// The rows counted, in the order printed: (the `--rows` name, the row's name, its request).
const ROWS: [(&str, &str, Kind); 5] = [
    ("health", "health", Kind::Health),
    ("ping", "mcp-ping", Kind::Ping),
    ("refusal", "plan-refusal", Kind::Refusal),
    ("read", "ailang-read", Kind::Read),
    ("write", "ailang-write", Kind::Write),
];

/// One row's count.
struct Counted {
    name: &'static str,
    calls: u64,
    threads: Threads,
}

impl Counted {
    fn allocations_per_call(&self) -> f64 {
        self.threads.allocations as f64 / self.calls as f64
    }
}

/// A row's instructions over its calls, [`LEFT_OUT`]'s taken out, and by thread.
#[derive(Debug, Default, PartialEq)]
struct Threads {
    /// Every thread of the daemon.
    total: u64,
    /// The store writer's thread (its dump holds `Writer::run`), which every call's commit
    /// waits for in turn.
    writer: u64,
    /// The thread that syncs the writer's commits (its dump holds `Durability::settle`).
    syncing: u64,
    /// [`LEFT_OUT`]'s own instructions, as Valgrind ran them.
    left_out: u64,
    /// Calls into the C allocator's allocating functions ([`ALLOCATING`]), every thread's.
    allocations: u64,
}

/// What an allocation is a call of: Rust's global allocator comes here for every `Box`,
/// `Vec` and `String` (zeroed ones through `calloc`, over-aligned ones through
/// `posix_memalign`), and so do C libraries. A `realloc` resizes; it is not counted.
const ALLOCATING: [&str; 3] = ["malloc", "calloc", "posix_memalign"];

const WRITER_FN: &str = "broker_core::storage::writer::Writer::run";
const SYNCING_FN: &str = "broker_core::storage::writer::Durability::settle";

/// The instructions of one dump per thread ([`count`]), told apart by what each thread ran.
fn tally(dumps: &[String]) -> Result<Threads, String> {
    let mut t = Threads::default();
    for dump in dumps {
        let all = summary(dump).ok_or("a dump has no `summary:` line")?;
        let left_out = own_cost(dump, LEFT_OUT);
        let net = all.saturating_sub(left_out);
        if ran(dump, WRITER_FN) {
            t.writer += net;
        } else if ran(dump, SYNCING_FN) {
            t.syncing += net;
        }
        t.total += net;
        t.left_out += left_out;
        t.allocations += calls_into(dump, &ALLOCATING);
    }
    Ok(t)
}

/// Count `calls` calls of each row named in `rows` (health always) on each build, each row on
/// a fresh daemon and store under `run_dir`; print each build's table, and with two builds
/// (`--against`: the other build first) the change from the first to the second; write them
/// to `out`.
pub fn run(
    builds: &[Build],
    run_dir: &Path,
    rows: &[String],
    calls: u64,
    out: &Path,
) -> Result<(), String> {
    check_valgrind()?;
    println!(
        "worldd-bench: instructions per call under callgrind ({calls} calls per row after {WARMUP}, one client in sequence; user space only, {LEFT_OUT} left out)"
    );
    let mut results = Vec::new();
    let mut tables = Vec::new();
    for build in builds {
        println!("{}: {}", build.name, build.worldd.display());
        let counted = count_rows(build, run_dir, rows, calls)?;
        print!("{}", table(&counted));
        results.push(json!({
            "build": build.name,
            "worldd": build.worldd.display().to_string(),
            "rows": counted.iter().map(|c| json!({
                "scenario": c.name,
                "calls": c.calls,
                "instructions": c.threads.total,
                "instructions_per_call": c.threads.total / c.calls,
                "writer_per_call": c.threads.writer / c.calls,
                "syncing_per_call": c.threads.syncing / c.calls,
                "left_out_per_call": c.threads.left_out / c.calls,
                "allocations_per_call": c.allocations_per_call(),
            })).collect::<Vec<_>>(),
        }));
        tables.push(counted);
    }
    if let [before, after] = &tables[..] {
        print!("{}", change(&builds[0], before, &builds[1], after));
    }
    let results = json!({"left_out": LEFT_OUT, "warmup_calls": WARMUP, "builds": results});
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    std::fs::write(
        out,
        serde_json::to_string_pretty(&results).unwrap_or_default(),
    )
    .map_err(|e| format!("{}: {e}", out.display()))?;
    println!("results: {}", out.display());
    Ok(())
}

/// Every row of one build.
fn count_rows(
    build: &Build,
    run_dir: &Path,
    rows: &[String],
    calls: u64,
) -> Result<Vec<Counted>, String> {
    let mut counted = Vec::new();
    for (row, name, kind) in ROWS {
        if kind != Kind::Health && !rows.iter().any(|r| r == row) {
            continue;
        }
        let dir = run_dir.join(format!("instructions-{}-{row}", build.name));
        let threads = tally(&count(&build.worldd, &build.plugins, &dir, kind, calls)?)
            .map_err(|e| format!("{}, {row}: {e}", build.name))?;
        let c = Counted {
            name,
            calls,
            threads,
        };
        println!(
            "  {name} … {} instructions per call, {} of them the store writer's ({} more in {LEFT_OUT}); {:.1} allocations per call",
            c.threads.total / calls,
            c.threads.writer / calls,
            c.threads.left_out / calls,
            c.allocations_per_call()
        );
        counted.push(c);
    }
    Ok(counted)
}

/// Each row's count per call on two builds, and the change from the first to the second.
fn change(first: &Build, before: &[Counted], second: &Build, after: &[Counted]) -> String {
    let pct = |b: u64, a: u64| {
        if b == 0 {
            "-".to_owned()
        } else {
            format!("{:+.1} %", (a as f64 - b as f64) * 100.0 / b as f64)
        }
    };
    let mut text = format!(
        "{} -> {}\n{:<14}{:>14}{:>14}{:>10}{:>12}{:>12}{:>10}{:>9}{:>9}\n",
        first.name,
        second.name,
        "scenario",
        "instr/call",
        "instr/call",
        "change",
        "writer",
        "writer",
        "change",
        "allocs",
        "allocs"
    );
    for b in before {
        let Some(a) = after.iter().find(|a| a.name == b.name) else {
            continue;
        };
        let (tb, ta) = (b.threads.total / b.calls, a.threads.total / a.calls);
        let (wb, wa) = (b.threads.writer / b.calls, a.threads.writer / a.calls);
        text.push_str(&format!(
            "{:<14}{:>14}{:>14}{:>10}{:>12}{:>12}{:>10}{:>9.1}{:>9.1}\n",
            b.name,
            thousands(tb),
            thousands(ta),
            pct(tb, ta),
            thousands(wb),
            thousands(wa),
            pct(wb, wa),
            b.allocations_per_call(),
            a.allocations_per_call()
        ));
    }
    text
}

fn check_valgrind() -> Result<(), String> {
    for tool in ["valgrind", "callgrind_control"] {
        let found = Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Err(format!(
                "--instructions needs Valgrind: `{tool}` did not run (Debian: apt-get install valgrind)"
            ));
        }
    }
    Ok(())
}

/// One row: a daemon under callgrind, [`WARMUP`] calls, the count zeroed, `calls` calls, a
/// dump, the daemon stopped; the dump's text, one per thread.
fn count(
    worldd: &Path,
    release: &Path,
    dir: &Path,
    kind: Kind,
    calls: u64,
) -> Result<Vec<String>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let dump: PathBuf = dir.join("callgrind.out");
    let wrapper = [
        "valgrind".to_owned(),
        "--tool=callgrind".to_owned(),
        format!("--callgrind-out-file={}", dump.display()),
        "--dump-instr=no".to_owned(),
        "--separate-threads=yes".to_owned(),
    ];
    let d = Daemon::start_with(
        &wrapper,
        worldd,
        dir,
        release,
        Some("off"),
        &["workspace"],
        &crate::daemon::REFUSALS_UNLIMITED.map(String::from),
    )?;
    let client = d
        .mint("instructions-", 1, 1024)?
        .pop()
        .ok_or("no session minted")?;
    load::in_sequence(&d.addr, &client, kind, 0, WARMUP)?;
    callgrind_control(d.pid(), "-z")?;
    load::in_sequence(&d.addr, &client, kind, WARMUP, calls)?;
    callgrind_control(d.pid(), "-d")?;
    let pid = d.pid();
    d.stop()?;
    // callgrind numbers the dumps a client asks for after the file's name, the first `.1`,
    // and with threads apart, each thread's after that: `callgrind.out.1-01`, `-02`, …
    let first = "callgrind.out.1-";
    let mut dumps = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(first))
        {
            dumps.push(
                std::fs::read_to_string(&path)
                    .map_err(|e| format!("{} (daemon {pid}): {e}", path.display()))?,
            );
        }
    }
    if dumps.is_empty() {
        return Err(format!(
            "no {first}* dump in {} (daemon {pid})",
            dir.display()
        ));
    }
    Ok(dumps)
}

fn callgrind_control(pid: u32, action: &str) -> Result<(), String> {
    let out = Command::new("callgrind_control")
        .arg(action)
        .arg(pid.to_string())
        .output()
        .map_err(|e| format!("callgrind_control: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "callgrind_control {action} {pid}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The total of a callgrind dump's first event (`summary: N …`; `totals:` in older dumps).
fn summary(dump: &str) -> Option<u64> {
    dump.lines().find_map(|line| {
        let rest = line
            .strip_prefix("summary:")
            .or_else(|| line.strip_prefix("totals:"))?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// The instructions a dump counts in `function` itself (not in what it calls).
///
/// In callgrind's format a `fn=` line starts a function's block; a name is given once, with
/// its number in brackets, and later lines name it by the number alone (`cfn=` lines may give
/// it first). In a block, each line of numbers is a position and its cost, except the line
/// after a `calls=` line, which is the cost of that call.
fn own_cost(dump: &str, function: &str) -> u64 {
    let mut names: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
    let mut inside = false;
    let mut call_cost_next = false;
    let mut total = 0u64;
    for line in dump.lines() {
        if let Some(spec) = line.strip_prefix("fn=") {
            inside = named(&mut names, spec) == Some(function);
            call_cost_next = false;
        } else if let Some(spec) = line.strip_prefix("cfn=") {
            named(&mut names, spec);
        } else if line.starts_with("calls=") {
            call_cost_next = true;
        } else if line.starts_with(|c: char| c.is_ascii_digit() || "+-*".contains(c)) {
            if std::mem::take(&mut call_cost_next) || !inside {
                continue;
            }
            total += line
                .split_whitespace()
                .nth(1)
                .and_then(|cost| cost.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    total
}

/// Whether a dump has a block of `function`'s own (its name may be given first by a `cfn=`).
fn ran(dump: &str, function: &str) -> bool {
    let mut names = std::collections::HashMap::new();
    dump.lines().any(|line| {
        if let Some(spec) = line.strip_prefix("fn=") {
            named(&mut names, spec) == Some(function)
        } else {
            if let Some(spec) = line.strip_prefix("cfn=") {
                named(&mut names, spec);
            }
            false
        }
    })
}

/// How many calls a dump counts into any of `functions`, from anywhere: the sum of the
/// `calls=N` lines whose `cfn=` names one of them (callgrind names the callee before each).
fn calls_into(dump: &str, functions: &[&str]) -> u64 {
    let mut names = std::collections::HashMap::new();
    let mut callee = None;
    let mut total = 0u64;
    for line in dump.lines() {
        if let Some(spec) = line.strip_prefix("fn=") {
            named(&mut names, spec);
            callee = None;
        } else if let Some(spec) = line.strip_prefix("cfn=") {
            callee = named(&mut names, spec);
        } else if let Some(rest) = line.strip_prefix("calls=") {
            if callee.is_some_and(|c| functions.contains(&c)) {
                total += rest
                    .split_whitespace()
                    .next()
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
    }
    total
}

/// The name a `fn=`/`cfn=` specification gives, `(id) name` or `(id)`, recording new ones.
fn named<'a>(
    names: &mut std::collections::HashMap<&'a str, &'a str>,
    spec: &'a str,
) -> Option<&'a str> {
    match spec.strip_prefix('(').and_then(|s| s.split_once(')')) {
        Some((id, rest)) => {
            let name = rest.trim();
            if name.is_empty() {
                names.get(id).copied()
            } else {
                names.insert(id, name);
                Some(name)
            }
        }
        None => Some(spec.trim()),
    }
}

/// The rows side by side, each against health's count, with the store threads' shares.
fn table(counted: &[Counted]) -> String {
    let health = counted
        .iter()
        .find(|c| c.name == "health")
        .map(|c| c.threads.total / c.calls);
    let mut text = format!(
        "{:<14}{:>7}{:>14}{:>10}{:>12}{:>10}{:>13}\n",
        "scenario", "calls", "instr/call", "x health", "writer", "syncing", "allocs/call"
    );
    for c in counted {
        let per_call = c.threads.total / c.calls;
        let ratio = match health {
            Some(h) if h > 0 => format!("{:.2}x", per_call as f64 / h as f64),
            _ => "-".to_owned(),
        };
        text.push_str(&format!(
            "{:<14}{:>7}{:>14}{:>10}{:>12}{:>10}{:>13.1}\n",
            c.name,
            c.calls,
            thousands(per_call),
            ratio,
            thousands(c.threads.writer / c.calls),
            thousands(c.threads.syncing / c.calls),
            c.allocations_per_call()
        ));
    }
    text
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_is_the_dumps_summary_line() {
        let dump = "# callgrind format\nversion: 1\ncreator: callgrind-3.19.0\npid: 7\n\
                    positions: line\nevents: Ir\nsummary: 184561454\n\nfn=(1) main\n0 12\n\
                    totals: 184575775\n";
        assert_eq!(summary(dump), Some(184_561_454));
        assert_eq!(summary("events: Ir\ntotals: 42\n"), Some(42));
        assert_eq!(summary("events: Ir\nfn=(1) summary\n0 5\n"), None);
    }

    #[test]
    fn a_functions_own_cost_leaves_out_the_calls_it_makes_and_follows_its_number() {
        // compress256 is named once, in a `cfn=` line, then its block comes twice by number;
        // the `calls=` cost inside Ref::of belongs to compress256, not to Ref::of.
        let dump = "events: Ir\nsummary: 1000\n\
                    fn=(1) broker_core::object::Ref::of\n0 40\n\
                    cfn=(2) sha2::sha256::compress256\ncalls=3 0\n0 600\n+2 10\n\
                    fn=(2)\n0 500\n\
                    fn=(3) other\n0 7\ncfn=(2)\ncalls=1 0\n0 100\n\
                    fn=(2)\n* 100\n-1 0\n";
        assert_eq!(own_cost(dump, "sha2::sha256::compress256"), 600);
        assert_eq!(own_cost(dump, "broker_core::object::Ref::of"), 50);
        assert_eq!(own_cost(dump, "other"), 7);
        assert_eq!(own_cost(dump, "absent"), 0);
    }

    #[test]
    fn allocations_are_the_calls_into_the_allocating_functions_from_anywhere() {
        // malloc named first in a call, then by number from another function; calloc once;
        // realloc and free are not allocations, nor is a `calls=` line with no callee named.
        let dump = "events: Ir\nsummary: 10\n\
                    fn=(1) alloc::raw_vec::finish_grow\ncfn=(2) malloc\ncalls=3 0\n0 90\n\
                    cfn=(3) realloc\ncalls=2 0\n0 40\n\
                    fn=(4) mdb_txn_begin\ncfn=(5) calloc\ncalls=1 0\n0 30\ncfn=(2)\ncalls=4 0\n0 120\n\
                    fn=(6) drop\ncfn=(7) free\ncalls=7 0\n0 70\n\
                    fn=(2)\n0 5\ncalls=9 0\n0 1\n";
        assert_eq!(calls_into(dump, &ALLOCATING), 8);
        assert_eq!(calls_into(dump, &["free"]), 7);
        let t = tally(&[dump.to_owned(), dump.to_owned()]).unwrap();
        assert_eq!(t.allocations, 16);
    }

    #[test]
    fn each_thread_is_told_apart_by_what_it_ran_and_the_left_out_function_taken_out() {
        // The writer's name comes first in a call to it, then its block by number.
        let writer = format!(
            "events: Ir\nsummary: 900\nfn=(3) start\ncfn=(1) {WRITER_FN}\ncalls=1 0\n0 0\n\
             fn=(1)\n0 700\nfn=(2) {LEFT_OUT}\n0 200\n"
        );
        let syncing = format!("events: Ir\nsummary: 50\nfn=(1) {SYNCING_FN}\n0 50\n");
        let worker = "events: Ir\nsummary: 1000\nfn=(7) hyper::parse\n0 1000\n\
                      cfn=(8) broker_core::storage::writer::Writer::run_soon\ncalls=1 0\n0 0\n"
            .to_owned();
        let t = tally(&[writer, syncing, worker]).unwrap();
        assert_eq!(
            t,
            Threads {
                total: 1_750,
                writer: 700,
                syncing: 50,
                left_out: 200,
                allocations: 0,
            }
        );
        assert!(tally(&["events: Ir\n".to_owned()]).is_err());
    }

    #[test]
    fn two_builds_are_set_side_by_side_with_the_change() {
        let build = |name| Build {
            name,
            worldd: PathBuf::from(format!("/{name}/worldd")),
            plugins: PathBuf::from(format!("/{name}")),
        };
        let row = |name, total, writer| Counted {
            name,
            calls: 100,
            threads: Threads {
                total,
                writer,
                syncing: 0,
                left_out: 0,
                allocations: total / 1_000,
            },
        };
        let before = [
            row("health", 4_400_000, 0),
            row("ailang-read", 45_843_000, 11_120_700),
        ];
        let after = [
            row("health", 4_400_000, 0),
            row("ailang-read", 44_204_400, 11_120_700),
        ];
        let text = change(&build("baseline"), &before, &build("this"), &after);
        assert_eq!(text.lines().next(), Some("baseline -> this"));
        line_ends(
            &text,
            2,
            "44,000        44,000    +0.0 %           0           0         -     44.0     44.0",
        );
        line_ends(
            &text,
            3,
            "458,430       442,044    -3.6 %     111,207     111,207    +0.0 %    458.4    442.0",
        );
    }

    /// Line `n` of a printed table ends with `tail`.
    fn line_ends(text: &str, n: usize, tail: &str) {
        let line = text.lines().nth(n).unwrap_or_default();
        assert!(line.ends_with(tail), "line {n} of:\n{text}");
    }

    #[test]
    fn each_row_is_set_beside_healths_count() {
        let threads = |total, writer| Threads {
            total,
            writer,
            syncing: writer / 10,
            left_out: 0,
            allocations: 3_235,
        };
        let rows = [
            Counted {
                name: "health",
                calls: 10,
                threads: threads(400_000, 0),
            },
            Counted {
                name: "ailang-read",
                calls: 10,
                threads: threads(4_580_020, 1_100_000),
            },
        ];
        let text = table(&rows);
        assert_eq!(text.lines().count(), 3);
        assert!(text.lines().nth(1).is_some_and(|l| l.starts_with("health")));
        line_ends(
            &text,
            1,
            "40,000     1.00x           0         0        323.5",
        );
        line_ends(
            &text,
            2,
            "458,002    11.45x     110,000    11,000        323.5",
        );
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(999), "999");
    }
}
