//! `worldd why HANDLE`: find one call's entry and re-verify its whole provenance chain from
//! the stored bytes. `-` reads the result bytes themselves from stdin (as printed by
//! `worldd call … --json-out`).

use std::io::Read;

use broker_core::verify::{self, Handle, VerifyError};
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
    let report = match verify::why(&store, &handle, a.scan) {
        Ok(r) => r,
        Err(VerifyError::NotFound(what)) => {
            return Err(Failure::usage(format!(
                "why: {what} not found (scanned back {} entries; raise --scan to look further)",
                a.scan
            )))
        }
        Err(e) => return Err(Failure::usage(format!("why: {e}"))),
    };
    if a.json {
        println!("{}", report.to_json());
    } else {
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
    }
    let broken = report.links.iter().filter(|l| !l.ok).count();
    if broken == 0 {
        if !a.json {
            println!("all {} link(s) verified", report.links.len());
        }
        Ok(())
    } else {
        Err(Failure::integrity(format!(
            "why: {broken} of {} link(s) broken: what the store holds does not match its content address; do not trust this answer",
            report.links.len()
        )))
    }
}
