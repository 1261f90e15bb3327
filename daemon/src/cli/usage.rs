//! `worldd usage`: how full the store is, and which episodes' calls filled it
//! ([`broker_core::holdings`]).

use broker_core::holdings::{self, Holding};
use broker_core::store::StoreError;
use clap::Args;
use serde_json::json;

use super::session::{open_to_read, seen_is_durable};
use super::{CliResult, DbArg, Failure, StoreDir};
use crate::byte_size::ByteSize;

#[derive(Args, Debug)]
pub struct UsageArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// One JSON document: the store's size and ceiling, and every episode's holdings.
    #[arg(long)]
    pub json: bool,
}

/// A read of the holdings that failed. A row that does not decode is damage (exit 3, with the
/// advice `doctor` gives of it), not a failure to run; anything else (an I/O fault) is exit 2.
fn read_failed(db: &StoreDir, e: StoreError) -> Failure {
    match e {
        StoreError::Corrupt(_) | StoreError::Damaged { .. } => Failure::integrity(format!(
            "cannot read {}: {e}; run worldd doctor, and restore the store from a backup",
            db.display()
        )),
        e => Failure::fatal(format!("cannot read {}: {e}", db.display())),
    }
}

pub fn run(a: UsageArgs) -> CliResult {
    let db = a.db.db()?;
    let store = open_to_read(&db)?;
    let held = store
        .read(holdings::holdings)
        .map_err(|e| read_failed(&db, e))?;
    seen_is_durable(&store)?;
    let usage = store.usage();
    let (used, ceiling) = (usage.used, usage.limits.ceiling);
    if a.json {
        let episodes: Vec<_> = held
            .iter()
            .map(|h| {
                json!({"episode": h.episode, "calls": h.calls, "objects": h.objects, "bytes": h.bytes,
                       "ownObjects": h.own_objects, "ownBytes": h.own_bytes})
            })
            .collect();
        outln!(
            "{}",
            json!({"store": db.display().to_string(), "usedBytes": used,
                   "ceilingBytes": ceiling, "episodes": episodes})
        );
        return Ok(());
    }
    outln!(
        "store {}: {} used of its {} ceiling ({:.1} %)",
        db.display(),
        ByteSize::new(used).human(),
        ByteSize::new(ceiling).human(),
        used as f64 * 100.0 / ceiling.max(1) as f64
    );
    if held.is_empty() {
        outln!("no episode holds an object yet");
        return Ok(());
    }
    print_table(&held)?;
    let (bytes, own): (u64, u64) = held
        .iter()
        .fold((0, 0), |(b, o), h| (b + h.bytes, o + h.own_bytes));
    outln!(
        "{} episode(s) hold {} of objects, {} of them their own (held by no other episode)",
        held.len(),
        ByteSize::new(bytes).human(),
        ByteSize::new(own).human()
    );
    Ok(())
}

/// One line an episode, the columns aligned: the largest own bytes first.
fn print_table(held: &[Holding]) -> CliResult {
    let rows: Vec<[String; 5]> = held
        .iter()
        .map(|h| {
            [
                h.episode.clone(),
                h.calls.to_string(),
                h.objects.to_string(),
                ByteSize::new(h.bytes).human(),
                ByteSize::new(h.own_bytes).human(),
            ]
        })
        .collect();
    let head = ["episode", "calls", "objects", "held", "own"].map(String::from);
    let width = |i: usize| {
        rows.iter()
            .chain([&head])
            .map(|r| r[i].chars().count())
            .max()
            .unwrap_or(0)
    };
    let widths = [0, 1, 2, 3, 4].map(width);
    for r in std::iter::once(&head).chain(&rows) {
        let mut line = format!("{:<w$}", r[0], w = widths[0]);
        for (cell, w) in r[1..].iter().zip(&widths[1..]) {
            line.push_str(&format!("  {cell:>w$}"));
        }
        outln!("{line}");
    }
    Ok(())
}
