//! `worldd doctor`: check an existing store offline — every entry's links, every spend
//! counter against the journal, the pending-intent index, the head and the registry heads,
//! every committed call against the entry its task state names, and the content-address
//! index. Exit 3 on any inconsistency. Indeterminate intents are listed but are not
//! inconsistencies.

use std::path::Path;

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
    let db = a.db.db()?;
    let store = open_to_read(&db)?;
    if let Some(warning) = crate::backup::unverified_warning(&db) {
        errln!("worldd doctor: warning: {warning}");
    }
    // Asked once the store is open: a daemon that stopped meanwhile left its calls in flight
    // indeterminate, and then they are said as such.
    let served = daemon_serves(&db);
    let started = std::time::Instant::now();
    let audit = verify::audit_store(&store).map_err(audit_failed)?;
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
                "daemonServes": served,
                "seconds": secs,
            })
        );
    } else {
        outln!("doctor: {}", db.display());
        outln!(
            "  {} {} entr(ies) checked, {} broken ({:.0} entries/s)",
            mark(audit.broken.is_empty()),
            audit.entries,
            audit.broken.len(),
            audit.entries as f64 / secs.max(1e-9)
        );
        for (i, d) in audit.broken.iter().take(SHOWN) {
            outln!("      entry {i}: {d}");
        }
        more(audit.broken.len())?;
        // Verified entries with something to say (not inconsistencies).
        for (i, d) in audit.notes.iter().take(SHOWN) {
            outln!("      entry {i}: note: {d}");
        }
        more(audit.notes.len())?;
        // Client commits' effect claims: not broken, and not verified either.
        let mut claiming: Vec<u64> = audit.claims.iter().map(|(i, _)| *i).collect();
        claiming.dedup();
        if !claiming.is_empty() {
            outln!(
                "  ? {} client commit(s) claim effects that nothing journaled (not verified: the committer's word)",
                claiming.len()
            );
            for (i, d) in audit.claims.iter().take(SHOWN) {
                outln!("      entry {i}: {d}");
            }
            more(audit.claims.len())?;
        }
        section(
            format!(
                "{} journal record(s); {}",
                audit.journal_records,
                journal_verdict(&audit.journal_findings)
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
        for n in audit.session_notes.iter().take(SHOWN) {
            outln!("      note: {n}");
        }
        more(audit.session_notes.len())?;
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
        // None at all reads as before, daemon or not.
        if served && !audit.indeterminate.is_empty() {
            outln!(
                "  {} intent(s) without an outcome yet: a daemon serves this store, and its calls in flight may still finish (any left from before it started are indeterminate: never retried; budget stays spent)",
                audit.indeterminate.len()
            );
        } else {
            outln!(
                "  {} indeterminate intent(s) (never retried; budget stays spent)",
                audit.indeterminate.len()
            );
        }
        for i in audit.indeterminate.iter().take(SHOWN) {
            outln!("      {i}");
        }
        more(audit.indeterminate.len())?;
    }
    if audit.consistent() {
        Ok(())
    } else {
        Err(Failure::integrity("doctor: the store is inconsistent"))
    }
}

/// An audit that could not go on. What it could not read is damage (exit 3, with the advice
/// the damaged store's line gives at open): a store that opened holds a head and reads row by
/// row, so a missing head or a row LMDB cannot follow is no usage error. Anything else (an I/O
/// fault) fails the verb (exit 2).
fn audit_failed(e: verify::VerifyError) -> Failure {
    if e.is_integrity() || matches!(e, verify::VerifyError::NotFound(_)) {
        let said = e.to_string();
        let damaged = if said.starts_with("store is damaged") {
            said
        } else {
            format!("store is damaged: {said}")
        };
        Failure::integrity(format!(
            "doctor: {damaged}; restore the directory from a backup"
        ))
    } else {
        Failure::fatal(format!("doctor: {e}"))
    }
}

/// One checked part of the store: its line, marked by whether it has findings, then each
/// finding.
fn section(line: String, findings: &[String]) -> CliResult {
    outln!("  {} {line}", mark(findings.is_empty()));
    for f in findings.iter().take(SHOWN) {
        outln!("      {f}");
    }
    more(findings.len())?;
    Ok(())
}

/// The lines shown under one heading: a store damaged throughout (a registry or a session
/// table of garbage) would otherwise print a line per row. `--json` lists every one.
const SHOWN: usize = 20;

/// Say how many of `total` lines went unshown.
fn more(total: usize) -> CliResult {
    if total > SHOWN {
        outln!(
            "      … and {} more (worldd doctor --json lists every one)",
            total - SHOWN
        );
    }
    Ok(())
}

/// The journal line's verdict: what disagrees, told by its findings (a spend counter, the
/// pending index, the journal's own rows), so that a wrong pending row does not blame the
/// spend counters.
fn journal_verdict(findings: &[String]) -> String {
    if findings.is_empty() {
        return "spend counters equal the sum of intents".into();
    }
    let spend = findings.iter().any(|f| f.starts_with("spend "));
    let pending = findings
        .iter()
        .any(|f| f.starts_with("pending ") || f.contains("the pending index has no row"));
    let rows = findings
        .iter()
        .any(|f| f.starts_with("journal #") && !f.contains("the pending index has no row"));
    match (spend, pending, rows) {
        (true, false, false) => "spend counters DISAGREE with the journal".into(),
        (false, true, false) => "the pending index DISAGREES with the journal".into(),
        (false, false, _) => "the journal's rows are DAMAGED".into(),
        _ => {
            let parts = [
                (spend, "spend counters"),
                (pending, "the pending index"),
                (rows, "its rows"),
            ];
            let parts: Vec<&str> = parts
                .into_iter()
                .filter_map(|(on, what)| on.then_some(what))
                .collect();
            format!("the journal is DAMAGED ({})", parts.join(", "))
        }
    }
}

fn mark(ok: bool) -> &'static str {
    if ok {
        "✓"
    } else {
        "✗"
    }
}

/// Whether a daemon serves the store in `db`: `worldd serve` holds an exclusive `flock` on its
/// `data.mdb` for its lifetime (how it refuses a second daemon). Read from `/proc/locks`, so
/// that nothing is taken: a lock held even for a moment could refuse a daemon starting then.
/// `false` where that cannot be read.
pub(crate) fn daemon_serves(db: &Path) -> bool {
    flock_held(&db.join("data.mdb"))
}

/// Whether some process holds an exclusive `flock` on `path` (a daemon's store data file, or
/// the workspace root it serves), read from `/proc/locks`; `false` where that cannot be read.
pub(crate) fn flock_held(path: &Path) -> bool {
    crate::proc_locks::held_exclusively(path)
}

/// Run `open` (which opens a store) without the warning the store logs on opening for intents
/// without an outcome: said by the caller instead, once a run, and as what they are (calls in
/// flight where a daemon serves the store). Every other event goes where it went.
pub(crate) fn without_pending_warning<T>(open: impl FnOnce() -> T) -> T {
    let inner = tracing::dispatcher::get_default(|d| d.clone());
    let quiet = tracing::Dispatch::new(WithoutPending { inner });
    tracing::dispatcher::with_default(&quiet, open)
}

/// See [`without_pending_warning`].
struct WithoutPending {
    inner: tracing::Dispatch,
}

impl WithoutPending {
    /// The store's warning of intents without an outcome (its journal's, at open).
    fn quiet(metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() == tracing::Level::WARN
            && metadata.target() == "broker_core::journal"
            && metadata.is_event()
    }
}

impl tracing::Subscriber for WithoutPending {
    fn register_callsite(
        &self,
        metadata: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        if Self::quiet(metadata) {
            return tracing::subscriber::Interest::sometimes();
        }
        self.inner.register_callsite(metadata)
    }
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        !Self::quiet(metadata) && self.inner.enabled(metadata)
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        self.inner.new_span(span)
    }
    fn record(&self, span: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        self.inner.record(span, values)
    }
    fn record_follows_from(&self, span: &tracing::span::Id, follows: &tracing::span::Id) {
        self.inner.record_follows_from(span, follows)
    }
    fn event(&self, event: &tracing::Event<'_>) {
        if !Self::quiet(event.metadata()) {
            self.inner.event(event)
        }
    }
    fn enter(&self, span: &tracing::span::Id) {
        self.inner.enter(span)
    }
    fn exit(&self, span: &tracing::span::Id) {
        self.inner.exit(span)
    }
    fn clone_span(&self, id: &tracing::span::Id) -> tracing::span::Id {
        self.inner.clone_span(id)
    }
    fn try_close(&self, id: tracing::span::Id) -> bool {
        self.inner.try_close(id)
    }
}
