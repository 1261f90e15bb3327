//! `worldd why HANDLE`: find the entry of one call and re-verify its whole provenance chain from
//! the stored bytes, the plan's replay and the coordinator's journal included. `-` reads the
//! result bytes themselves from stdin (as printed by `worldd call … --json-out`). When several
//! entries carry the handle, each is listed and verified; any that fails makes the exit code 3.

use std::io::Read;

use broker_core::verify::{self, Handle, Report, VerifyError};
use clap::Args;

use super::session::open_existing;
use super::{CliResult, DbArg, Failure};

#[derive(Args, Debug)]
pub struct WhyArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// `head`, an entry index, a sha256: ref from a result, an invocation id, or `-` for the
    /// result bytes on stdin.
    pub handle: String,
    /// How many entries to scan back from the head to find a ref.
    #[arg(long, default_value_t = verify::DEFAULT_SCAN)]
    pub scan: u64,
    /// Print the chain as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: WhyArgs) -> CliResult {
    let handle = if a.handle == "-" {
        let mut bytes = Vec::new();
        std::io::stdin()
            .read_to_end(&mut bytes)
            .map_err(|e| Failure::usage(format!("cannot read stdin: {e}")))?;
        // `--json-out` adds one newline after the committed bytes.
        if bytes.last() == Some(&b'\n') {
            bytes.pop();
        }
        Handle::Output(bytes)
    } else {
        Handle::parse(&a.handle).map_err(|e| Failure::usage(e.to_string()))?
    };
    let store = open_existing(&a.db.db)?;
    let why = match verify::why(&store, &handle, a.scan) {
        Ok(w) => w,
        Err(VerifyError::NotFound(what)) => {
            return Err(Failure::usage(format!(
                "why: {what} not found (scanned back {} entries; raise --scan to look further)",
                a.scan
            )))
        }
        Err(e) => return Err(Failure::usage(format!("why: {e}"))),
    };
    let several = why.reports.len() > 1;
    if a.json {
        println!("{}", why.to_json());
    } else {
        if several {
            println!(
                "why: {} entries carry this handle; each is verified on its own",
                why.reports.len()
            );
        }
        for report in &why.reports {
            print_report(report, several);
        }
    }
    let failing: Vec<&Report> = why.reports.iter().filter(|r| !r.all_ok()).collect();
    match failing.as_slice() {
        [] => Ok(()),
        [only] if !several => {
            let broken = only.links.iter().filter(|l| !l.ok).count();
            Err(Failure::integrity(format!(
                "why: {broken} of {} link(s) broken: what the store holds does not match its content address; do not trust this answer",
                only.links.len()
            )))
        }
        many => Err(Failure::integrity(format!(
            "why: {} of {} entries carrying this handle do not verify (entry {}): do not trust them",
            many.len(),
            why.reports.len(),
            many.iter()
                .map(|r| r.entry_index.to_string())
                .collect::<Vec<_>>()
                .join(", entry ")
        ))),
    }
}

/// One entry's chain, then its verdict.
fn print_report(report: &Report, several: bool) {
    println!(
        "why: entry {} (matched by {})",
        report.entry_index, report.matched_by
    );
    for l in &report.links {
        println!(
            "  {} {:<7} {}  {}",
            if l.ok { "✓" } else { "✗" },
            l.kind,
            l.reference
                .map(|r| r.short(8))
                .unwrap_or_else(|| "-".into()),
            l.detail
        );
    }
    let broken = report.links.iter().filter(|l| !l.ok).count();
    if broken == 0 {
        println!("all {} link(s) verified", report.links.len());
    } else if several {
        println!(
            "✗ entry {}: {broken} of {} link(s) broken: it is not what it claims",
            report.entry_index,
            report.links.len()
        );
    }
}
