//! The whole-store audit behind `worldd doctor`.

use std::sync::atomic::{AtomicU64, Ordering};

use super::source::LocalSource;
use super::walk::{self, Verifier};
use super::VerifyError;
use crate::journal::{JournalState, OutcomeStatus};
use crate::log;
use crate::object::Ref;
use crate::store::{ReadCtx, Store, StoreError};
use crate::task::{TaskPhase, TaskState};

/// The result of checking a whole store offline (`worldd doctor`).
#[derive(Debug, Clone, Default)]
pub struct StoreAudit {
    /// Entries checked (genesis included).
    pub entries: u64,
    /// Entries with at least one broken link, with the first broken link's description.
    pub broken: Vec<(u64, String)>,
    /// Journal records read.
    pub journal_records: u64,
    /// Spend and journal inconsistencies.
    pub journal_findings: Vec<String>,
    /// Notes of entries that verify, by entry: e.g. an object whose bytes were first stored
    /// as another kind than its record gives it. Not inconsistencies.
    pub notes: Vec<(u64, String)>,
    /// Effect and plugin links of client commits, by entry: what the committer claims, which
    /// nothing the coordinator writes backs. Not inconsistencies, and not verified facts.
    pub claims: Vec<(u64, String)>,
    /// Intents without an outcome (indeterminate effects; not an inconsistency).
    pub indeterminate: Vec<String>,
    /// The head does not select the last entry, or the log has a gap; a registry head that
    /// names no revision whose transitions load.
    pub head_findings: Vec<String>,
    /// Committed calls (task states marked committed) checked against the entry they name.
    pub committed_calls: u64,
    /// Committed calls whose entry the log does not hold, or holds another call's record: the
    /// log lost its end (perhaps grown again over the same indexes) or was rewritten.
    pub call_findings: Vec<String>,
    /// Invocation rows read (the coordinator's journal and task states of each invocation).
    pub invocation_rows: u64,
    /// Invocation rows that do not decode, or whose id cannot be read (a lookup by id does not
    /// find them: their invocation would read as never committed), each with what failed.
    pub row_findings: Vec<String>,
    /// Object rows checked (envelope, payload hash, interface hash).
    pub objects: u64,
    /// Object rows that do not decode, or whose payload or interface hash is not what the
    /// object says.
    pub object_findings: Vec<String>,
    /// Read grants checked (merged into `readers` or waiting in `readers_tail`).
    pub grants: u64,
    /// Grants that name no stored object, or whose header does not decode.
    pub grant_findings: Vec<String>,
    /// Session records read.
    pub sessions: u64,
    /// Session records that do not decode.
    pub session_findings: Vec<String>,
    /// Sessions that hold two grants of one effect and scope (minted before such sessions were
    /// refused). Not inconsistencies.
    pub session_notes: Vec<String>,
    /// Keys of the content-address index (`refs`) checked against their rows.
    pub index_keys: u64,
    /// Keys of the newest rows, found through the tail instead (not yet merged into `refs`).
    pub index_waiting: u64,
    /// Keys in `refs` that name no row holding them, and indexed rows `refs` does not name;
    /// keys in `semantic_ids` that name no object of their semantic id, and objects below its
    /// watermark it does not list.
    pub index_findings: Vec<String>,
}

impl StoreAudit {
    /// True when nothing is inconsistent (indeterminate intents are allowed).
    pub fn consistent(&self) -> bool {
        self.broken.is_empty()
            && self.journal_findings.is_empty()
            && self.head_findings.is_empty()
            && self.call_findings.is_empty()
            && self.row_findings.is_empty()
            && self.object_findings.is_empty()
            && self.grant_findings.is_empty()
            && self.session_findings.is_empty()
            && self.index_findings.is_empty()
    }
}

/// Entries a doctor worker verifies per claim.
const AUDIT_BLOCK: u64 = 256;

/// A journal the audit could not read: the store's failure as it is (a damaged row is damage),
/// any other as damage to the journal.
fn unreadable_journal(e: crate::journal::JournalError) -> VerifyError {
    match e {
        crate::journal::JournalError::Store(e) => VerifyError::Store(e),
        other => VerifyError::Integrity(format!(
            "store is damaged: the journal cannot be read: {other}"
        )),
    }
}

/// Check every entry's links, every spend counter against the journal, the pending-intent
/// index, the head and the registry heads, the content-address index and the semantic-id
/// index.
pub fn audit_store(store: &Store) -> Result<StoreAudit, VerifyError> {
    let mut audit = StoreAudit::default();
    // One snapshot for both: a commit between two reads moves the last index past the head
    // read first, and a healthy store beside its daemon was reported inconsistent.
    let (head, last) = store.read(|r| Ok::<_, StoreError>((log::head(r)?, log::last_index(r)?)))?;
    let head = head.ok_or_else(|| VerifyError::NotFound("world head".into()))?;
    if last != Some(head.world.revision) {
        audit.head_findings.push(match last {
            Some(last) => format!(
                "the head selects revision {} but the last entry is {last}",
                head.world.revision
            ),
            None => format!(
                "the head selects revision {} but the log holds no entry",
                head.world.revision
            ),
        });
    }
    audit
        .head_findings
        .extend(store.read(crate::registry::audit)?);
    // Entries verify independently. Worker threads claim blocks of the log from a shared
    // counter (so no core idles while another still has a long tail), each block in its own
    // read transaction (LMDB readers never block each other or the writer); the journal audit
    // runs beside them.
    let total = last.map_or(0, |l| l + 1);
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 16);
    let next = AtomicU64::new(0);
    type Found = (Vec<(u64, String)>, Vec<(u64, String)>, Vec<(u64, String)>);
    let verify_blocks = || -> Result<Found, VerifyError> {
        let (mut broken, mut notes, mut claims) = (Vec::new(), Vec::new(), Vec::new());
        loop {
            let from = next.fetch_add(AUDIT_BLOCK, Ordering::Relaxed);
            if from >= total {
                return Ok((broken, notes, claims));
            }
            let to = (from + AUDIT_BLOCK).min(total);
            store.read(|r| {
                let source = LocalSource::new(r);
                let verifier = Verifier::new(&source);
                for i in from..to {
                    let report = verifier.report(i, String::new());
                    if let Some(l) = report.links.iter().find(|l| !l.ok) {
                        broken.push((i, format!("{}: {}", l.kind, l.detail)));
                    }
                    for l in &report.links {
                        if let Some(note) = &l.note {
                            notes.push((i, format!("{}: {note}", l.kind)));
                        }
                        if l.claimed {
                            claims.push((i, format!("{}: {}", l.kind, l.detail)));
                        }
                    }
                }
                Ok::<_, VerifyError>(())
            })?;
        }
    };
    let (results, journal, index, calls, grants, objects) = std::thread::scope(|scope| {
        let journal = scope.spawn(|| crate::journal::audit_store(store));
        let calls = scope.spawn(|| store.read(committed_calls));
        let objects = scope.spawn(|| crate::objects::audit(store));
        let grants = scope.spawn(|| {
            store.read(|r| {
                Ok::<_, StoreError>((crate::access::audit(r)?, crate::session::audit(r)?))
            })
        });
        let index = scope.spawn(|| {
            store.read(|r| {
                let mut index = crate::ref_tail::audit(r)?;
                index.findings.extend(crate::semantic_index::audit(r)?);
                Ok::<_, crate::storage::StoreError>(index)
            })
        });
        let handles: Vec<_> = (0..workers).map(|_| scope.spawn(verify_blocks)).collect();
        let results: Vec<Result<Found, VerifyError>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(VerifyError::NotFound("a verifier thread".into())))
            })
            .collect();
        let journal = journal.join().unwrap_or_else(|_| {
            Err(crate::journal::JournalError::Corrupt(
                "the journal audit thread panicked".into(),
            ))
        });
        let index = index.join().unwrap_or_else(|_| {
            Err(crate::storage::StoreError::Corrupt(
                "the index audit thread panicked".into(),
            ))
        });
        let calls = calls.join().unwrap_or_else(|_| {
            Err(crate::storage::StoreError::Corrupt(
                "the committed-call audit thread panicked".into(),
            ))
        });
        let grants = grants.join().unwrap_or_else(|_| {
            Err(crate::storage::StoreError::Corrupt(
                "the grant audit thread panicked".into(),
            ))
        });
        let objects = objects.join().unwrap_or_else(|_| {
            Err(crate::storage::StoreError::Corrupt(
                "the object audit thread panicked".into(),
            ))
        });
        (results, journal, index, calls, grants, objects)
    });
    audit.entries = total;
    for r in results {
        let (broken, notes, claims) = r?;
        audit.broken.extend(broken);
        audit.notes.extend(notes);
        audit.claims.extend(claims);
    }
    audit.broken.sort_by_key(|(i, _)| *i);
    audit.notes.sort_by_key(|(i, _)| *i);
    // Stable: an entry's effect and plugin lines stay in walk order.
    audit.claims.sort_by_key(|(i, _)| *i);
    let (findings, n) = journal.map_err(unreadable_journal)?;
    audit.journal_records = n;
    audit.journal_findings = findings.into_iter().map(|f| f.0).collect();
    let calls = calls?;
    (audit.committed_calls, audit.call_findings) = (calls.committed, calls.findings);
    (audit.invocation_rows, audit.row_findings) = (calls.rows, calls.damaged);
    let objects = objects?;
    (audit.objects, audit.object_findings) = (objects.objects, objects.findings);
    let (grants, sessions) = grants?;
    (audit.grants, audit.grant_findings) = (grants.grants, grants.findings);
    audit.sessions = sessions.records;
    (audit.session_findings, audit.session_notes) = (sessions.damaged, sessions.doubled);
    let index = index?;
    audit.index_keys = index.indexed;
    audit.index_waiting = index.waiting;
    audit.index_findings = index.findings;
    audit.indeterminate = store
        .indeterminate()
        .map_err(unreadable_journal)?
        .into_iter()
        .map(|s| {
            format!(
                "{} ({} {}@{})",
                s.intent.invocation_id, s.intent.effect, s.intent.scope, s.intent.cost
            )
        })
        .collect();
    Ok(audit)
}

/// Every committed task state against the entry it names, which must exist and hold that
/// invocation's record. The entry walk checks only the other way (entry → task state), so a log
/// cut after its end, or grown again over the cut indexes, passes it. One log row read per
/// committed call: the row's world ref, which the entry's own walk ties to its record, must be
/// the task state's; only when it is not is the record read, to say whose the entry is.
fn committed_calls(r: &ReadCtx<'_>) -> Result<Calls, StoreError> {
    let last = log::last_index(r)?.map_or_else(|| "none".to_string(), |l| l.to_string());
    let mut committed = 0;
    let mut findings = Vec::new();
    // Counted by both callbacks.
    let rows = std::cell::Cell::new(0);
    let damaged = std::cell::RefCell::new(Vec::new());
    crate::invocations::for_each_visible(
        r,
        |id, row| {
            rows.set(rows.get() + 1);
            // A REST commit's outcome (what its receipt says) names the world it selected; only
            // `rest:` journal states are parsed, so effects' states cost nothing here.
            if id.starts_with("rest:") {
                let landed = row
                    .journal
                    .and_then(|b| serde_json::from_slice::<JournalState>(b).ok())
                    .filter(|j| j.status == Some(OutcomeStatus::Committed))
                    .and_then(|j| j.result_ref);
                if let Some(world) = landed {
                    committed += 1;
                    if matches!(log::stored_world(r, &world), Ok(None)) {
                        findings.push(format!(
                        "the REST commit {id} landed as world {world} (its receipt says so), which no log row holds (its last entry is {last}): the log lost its end or was rewritten"
                    ));
                    }
                }
                return;
            }
            // Each part must decode: a row whose layout holds but whose states are damaged is
            // damaged (the walk of an entry that names it says so too, but a row no entry names
            // has no walk: an intent without an outcome, a call never committed).
            match row.journal.map(serde_json::from_slice::<JournalState>) {
                Some(Err(e)) => damaged.borrow_mut().push(format!(
                    "invocation row {id}: its journal state does not decode ({e})"
                )),
                // The states carry their invocation's id: a row holding another call's would
                // answer for it (its entry holds that call's record, so the walk finds no fault).
                Some(Ok(j)) if j.intent.invocation_id != id => damaged.borrow_mut().push(format!(
                    "invocation row {id}: its journal state is {}'s",
                    j.intent.invocation_id
                )),
                _ => {}
            }
            let state = match row.task.map(serde_json::from_slice::<TaskState>) {
                None => return,
                Some(Ok(state)) if state.invocation_id != id => {
                    damaged.borrow_mut().push(format!(
                        "invocation row {id}: its task state is {}'s",
                        state.invocation_id
                    ));
                    return;
                }
                Some(Ok(state)) => state,
                Some(Err(e)) => {
                    damaged.borrow_mut().push(format!(
                        "invocation row {id}: its task state does not decode ({e})"
                    ));
                    return;
                }
            };
            let (TaskPhase::Committed, Some(i)) = (state.phase, state.entry_index) else {
                return;
            };
            committed += 1;
            match log::world_ref_at(r, i) {
            Ok(None) => findings.push(match super::hole_at(&LocalSource::new(r), i) {
                Some(hole) => format!(
                    "the task state of {id} says it committed at entry {i}, but {hole}"
                ),
                None => format!(
                    "the task state of {id} says it committed at entry {i}, which the log does not hold (its last entry is {last}): the log lost its end"
                ),
            }),
            Ok(Some(world)) if Some(world) == state.world_ref => {}
            Ok(Some(_)) => match entry_invocation(r, i) {
                // Unreadable, or this call's with another world: the entry's walk says so.
                None => {}
                Some(Some(named)) if named == id => {}
                Some(named) => findings.push(format!(
                    "the task state of {id} says it committed at entry {i}, but entry {i}'s record is {}: the log lost its end or was rewritten",
                    named.map_or_else(|| "no invocation's".to_string(), |n| format!("{n}'s"))
                )),
            },
            // A damaged row: the walk of its entry reports it.
            Err(_) => {}
        }
        },
        |why| {
            rows.set(rows.get() + 1);
            damaged.borrow_mut().push(why);
        },
    )?;
    Ok(Calls {
        committed,
        findings,
        rows: rows.get(),
        damaged: damaged.into_inner(),
    })
}

/// What [`committed_calls`] found.
struct Calls {
    committed: u64,
    findings: Vec<String>,
    /// Invocation rows read, and those that do not decode or name no invocation.
    rows: u64,
    damaged: Vec<String>,
}

/// The invocation entry `i`'s record names (`None` inside when it names none); `None` when the
/// entry or its record cannot be read, which the entry's walk reports.
fn entry_invocation(r: &ReadCtx<'_>, i: u64) -> Option<Option<String>> {
    let entry = log::entry(r, i).ok()??;
    let record = r.object_view(&entry.transition_ref).ok()??;
    if Ref::of(record.payload) != entry.transition_ref {
        return None;
    }
    Some(walk::record_invocation_id(record.payload))
}
