//! `worldd doctor`: check an existing store offline — every entry's links, every spend
//! counter against the journal, the pending-intent index, the head and the registry heads,
//! every committed call against the entry its task state names, and the content-address
//! index. Exit 3 on any inconsistency. Indeterminate intents are listed but are not
//! inconsistencies.

use broker_core::verify;
use clap::Args;

use super::session::{open_to_read, seen_is_durable};
use super::{CliResult, DbArg, Failure};

#[derive(Args, Debug)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Print the findings as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: DoctorArgs) -> CliResult {
    let store = open_to_read(&a.db.db)?;
    let started = std::time::Instant::now();
    let audit = verify::audit_store(&store).map_err(|e| Failure::usage(format!("doctor: {e}")))?;
    let secs = started.elapsed().as_secs_f64();
    seen_is_durable(&store)?;
    if a.json {
        outln!(
            "{}",
            serde_json::json!({
                "consistent": audit.consistent(),
                "entries": audit.entries,
                "brokenEntries": audit.broken.iter().map(|(i, d)| serde_json::json!({"entry": i, "detail": d})).collect::<Vec<_>>(),
                "notes": audit.notes.iter().map(|(i, d)| serde_json::json!({"entry": i, "detail": d})).collect::<Vec<_>>(),
                "claims": audit.claims.iter().map(|(i, d)| serde_json::json!({"entry": i, "detail": d})).collect::<Vec<_>>(),
                "journalRecords": audit.journal_records,
                "journalFindings": audit.journal_findings,
                "headFindings": audit.head_findings,
                "committedCalls": audit.committed_calls,
                "callFindings": audit.call_findings,
                "invocationRows": audit.invocation_rows,
                "rowFindings": audit.row_findings,
                "objects": audit.objects,
                "objectFindings": audit.object_findings,
                "grants": audit.grants,
                "grantFindings": audit.grant_findings,
                "sessions": audit.sessions,
                "sessionFindings": audit.session_findings,
                "sessionNotes": audit.session_notes,
                "indexKeys": audit.index_keys,
                "indexWaiting": audit.index_waiting,
                "indexFindings": audit.index_findings,
                "indeterminate": audit.indeterminate,
                "seconds": secs,
            })
        );
    } else {
        outln!("doctor: {}", a.db.db.display());
        outln!(
            "  {} {} entr(ies) checked, {} broken ({:.0} entries/s)",
            mark(audit.broken.is_empty()),
            audit.entries,
            audit.broken.len(),
            audit.entries as f64 / secs.max(1e-9)
        );
        for (i, d) in audit.broken.iter().take(20) {
            outln!("      entry {i}: {d}");
        }
        // Verified entries with something to say (not inconsistencies).
        for (i, d) in audit.notes.iter().take(20) {
            outln!("      entry {i}: note: {d}");
        }
        // Client commits' effect claims: not broken, and not verified either.
        let mut claiming: Vec<u64> = audit.claims.iter().map(|(i, _)| *i).collect();
        claiming.dedup();
        if !claiming.is_empty() {
            outln!(
                "  ? {} client commit(s) claim effects that nothing journaled (not verified: the committer's word)",
                claiming.len()
            );
            for (i, d) in audit.claims.iter().take(20) {
                outln!("      entry {i}: {d}");
            }
        }
        let journal = if audit.journal_findings.is_empty() {
            "equal the sum of intents"
        } else {
            "DISAGREE with the journal"
        };
        section(
            format!(
                "{} journal record(s); spend counters {journal}",
                audit.journal_records
            ),
            &audit.journal_findings,
        )?;
        section("head".into(), &audit.head_findings)?;
        let counted = [
            (
                audit.committed_calls,
                "committed call(s)",
                "each at the entry its task state names",
                "some NOT at the entry their task state names",
                &audit.call_findings,
            ),
            (
                audit.invocation_rows,
                "invocation row(s)",
                "each decodes",
                "some DAMAGED",
                &audit.row_findings,
            ),
            (
                audit.objects,
                "object(s)",
                "each hashes to its address",
                "some DAMAGED",
                &audit.object_findings,
            ),
            (
                audit.grants,
                "read grant(s)",
                "each names a stored object",
                "some DAMAGED",
                &audit.grant_findings,
            ),
            (
                audit.sessions,
                "session record(s)",
                "each decodes",
                "some DAMAGED",
                &audit.session_findings,
            ),
        ];
        for (n, what, good, bad, findings) in counted {
            let verdict = if findings.is_empty() { good } else { bad };
            section(format!("{n} {what}, {verdict}"), findings)?;
        }
        // Sessions that work, but whose budgets read oddly: not inconsistencies.
        for n in audit.session_notes.iter().take(20) {
            outln!("      note: {n}");
        }
        let index = if audit.index_findings.is_empty() {
            "each names its row"
        } else {
            "some DISAGREE with the rows"
        };
        section(
            format!(
                "{} key(s) in the content-address index, {} waiting in its tail; {index}",
                audit.index_keys, audit.index_waiting
            ),
            &audit.index_findings,
        )?;
        outln!(
            "  {} indeterminate intent(s) (never retried; budget stays spent)",
            audit.indeterminate.len()
        );
        for i in audit.indeterminate.iter().take(20) {
            outln!("      {i}");
        }
    }
    if audit.consistent() {
        Ok(())
    } else {
        Err(Failure::integrity("doctor: the store is inconsistent"))
    }
}

/// One checked part of the store: its line, marked by whether it has findings, then each
/// finding.
fn section(line: String, findings: &[String]) -> CliResult {
    outln!("  {} {line}", mark(findings.is_empty()));
    for f in findings {
        outln!("      {f}");
    }
    Ok(())
}

fn mark(ok: bool) -> &'static str {
    if ok {
        "✓"
    } else {
        "✗"
    }
}
