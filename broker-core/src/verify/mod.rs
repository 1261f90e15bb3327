//! Provenance verification: the library behind `worldd why` and `worldd doctor`.
//!
//! From any handle — an entry index, the head, any `sha256:` ref found in a result, an
//! invocation id, or the result bytes themselves — find the log entries that carry it and walk
//! each: world → entry → record → journal → input → plan → replay → effects → plugin →
//! output, recomputing every address from the stored bytes. Each link is reported as verified
//! or broken; nothing is trusted because it was stored. When several entries carry the same
//! ref, every one is reported and verified: a forged copy can neither hide behind a genuine
//! entry nor stand in for it.
//!
//! The verifier reads through one small trait, [`Source`]: [`LocalSource`] reads a store;
//! a remote source (the REST routes of a running daemon, `worldd why --addr`) plugs in through
//! [`why_in`] and [`verify_entry_in`], and hands over the coordinator's rows of an invocation as
//! [`InvocationRows`], which it checks with the same code a store read uses. What each link
//! checks is described in the `walk` module.

mod audit;
mod rows;
mod source;
mod walk;

use serde_json::Value;

pub use audit::{audit_store, StoreAudit};
pub use rows::InvocationRows;
pub use source::{LocalSource, Source, SourceError, StoredObject};

use crate::canon;
use crate::log::{Entry, World};
use crate::object::Ref;
use crate::store::{ReadCtx, Store, StoreError};
use crate::task;
use walk::Verifier;

/// Default number of entries scanned back from the head to find a ref.
pub const DEFAULT_SCAN: u64 = 500;

/// What to explain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handle {
    Index(u64),
    Head,
    Ref(Ref),
    Invocation(String),
    /// The exact bytes of a result; found by their sha256.
    Output(Vec<u8>),
}

impl Handle {
    /// `head`, a decimal index, a `sha256:` ref, or an invocation id (`mcp:…`, `a2a:…`).
    pub fn parse(text: &str) -> Result<Handle, VerifyError> {
        let text = text.trim();
        if text == "head" {
            return Ok(Handle::Head);
        }
        if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
            return text
                .parse()
                .map(Handle::Index)
                .map_err(|_| VerifyError::BadHandle(text.to_owned()));
        }
        if text.starts_with("sha256:") {
            return text
                .parse()
                .map(Handle::Ref)
                .map_err(|e: crate::object::RefError| VerifyError::BadHandle(e.to_string()));
        }
        if task::split_invocation_id(text).is_some() {
            return Ok(Handle::Invocation(text.to_owned()));
        }
        Err(VerifyError::BadHandle(text.to_owned()))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error("not a handle: {0} (want head, an entry index, a sha256: ref or an invocation id)")]
    BadHandle(String),
    #[error("{0} not found")]
    NotFound(String),
    /// What the source holds does not match its address before any entry could be walked
    /// (the head's world): an integrity failure, like a broken link.
    #[error("{0}")]
    Integrity(String),
}

impl VerifyError {
    /// True when nothing could be walked because what the source holds is damaged or is not
    /// what its address names: an integrity failure, as a broken link is.
    pub fn is_integrity(&self) -> bool {
        match self {
            VerifyError::Integrity(_) => true,
            VerifyError::Store(e) => {
                matches!(e, StoreError::Corrupt(_) | StoreError::Truncated { .. })
            }
            VerifyError::Source(e) => e.is_damage(),
            VerifyError::BadHandle(_) | VerifyError::NotFound(_) => false,
        }
    }
}

/// One checked link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// `world`, `entry`, `record`, `journal`, `input`, `plan`, `replay`, `effect`, `plugin`,
    /// `output`.
    pub kind: &'static str,
    pub reference: Option<Ref>,
    /// Its checks passed (false: broken).
    pub ok: bool,
    /// What a client's commit claims, not a verified fact: the effect and plugin links of an
    /// entry the coordinator did not write. Consistent (`ok`), but nothing the coordinator
    /// writes (journal, task state) says the effect ran; the detail says so.
    pub claimed: bool,
    pub detail: String,
    /// Said beside the verdict, not part of it: e.g. that an object's bytes were first stored
    /// as another kind than the one its record gives them.
    pub note: Option<String>,
}

/// The verified chain of one entry.
#[derive(Debug, Clone)]
pub struct Report {
    pub entry_index: u64,
    /// How the handle matched, e.g. `output (sha256 of the result)`.
    pub matched_by: String,
    pub links: Vec<Link>,
}

impl Report {
    /// No link is broken (claims are not broken).
    pub fn all_ok(&self) -> bool {
        self.links.iter().all(|l| l.ok)
    }

    /// Links that are only a client commit's claim.
    pub fn claimed(&self) -> usize {
        self.links.iter().filter(|l| l.claimed).count()
    }

    /// Every link verified: none broken, none only claimed.
    pub fn verified(&self) -> bool {
        self.all_ok() && self.claimed() == 0
    }

    pub fn to_json(&self) -> Value {
        let mut v = serde_json::json!({
            "entryIndex": self.entry_index,
            "matchedBy": self.matched_by,
            "verified": self.verified(),
            "links": self.links.iter().map(|l| {
                let mut link = serde_json::json!({
                    "kind": l.kind,
                    "ref": l.reference.map(|r| r.to_string()),
                    "ok": l.ok,
                    "detail": l.detail,
                });
                if l.claimed {
                    link["claimed"] = true.into();
                }
                if let Some(note) = &l.note {
                    link["note"] = note.as_str().into();
                }
                link
            }).collect::<Vec<_>>(),
        });
        if self.claimed() > 0 {
            v["claimed"] = self.claimed().into();
        }
        v
    }
}

/// Every entry a handle matched, oldest first, each verified.
#[derive(Debug, Clone)]
pub struct Explanation {
    pub reports: Vec<Report>,
}

impl Explanation {
    /// True when every matched entry verified.
    pub fn all_ok(&self) -> bool {
        self.reports.iter().all(Report::all_ok)
    }

    /// One entry: its report. Several: `{"matches": n, "verified": bool, "entries": [reports]}`.
    pub fn to_json(&self) -> Value {
        match self.reports.as_slice() {
            [one] => one.to_json(),
            many => serde_json::json!({
                "matches": many.len(),
                "verified": self.reports.iter().all(Report::verified),
                "entries": many.iter().map(Report::to_json).collect::<Vec<_>>(),
            }),
        }
    }
}

/// Explain `handle` from a store: find every entry that carries it (scanning back at most
/// `scan` entries for a ref) and verify each.
pub fn why(store: &Store, handle: &Handle, scan: u64) -> Result<Explanation, VerifyError> {
    store.read(|r| why_in(&LocalSource::new(r), handle, scan))
}

/// [`why`] over any [`Source`].
pub fn why_in<S: Source + ?Sized>(
    src: &S,
    handle: &Handle,
    scan: u64,
) -> Result<Explanation, VerifyError> {
    let matches = locate(src, handle, scan)?;
    let verifier = Verifier::new(src);
    Ok(Explanation {
        reports: matches
            .into_iter()
            .map(|(i, how)| verifier.report(i, how))
            .collect(),
    })
}

/// Verify entry `index` of a store without a handle.
pub fn verify_entry(store: &Store, index: u64) -> Result<Report, VerifyError> {
    store.read(|r| Ok(verify_entry_in(&LocalSource::new(r), index)))
}

/// [`verify_entry`] over any [`Source`].
pub fn verify_entry_in<S: Source + ?Sized>(src: &S, index: u64) -> Report {
    Verifier::new(src).report(index, "index".into())
}

fn head_index<S: Source + ?Sized>(src: &S) -> Result<u64, VerifyError> {
    let head = src
        .head()?
        .ok_or_else(|| VerifyError::NotFound("world head".into()))?;
    let bytes = src
        .world(&head)?
        .ok_or_else(|| VerifyError::NotFound(format!("head world {head}")))?;
    let world = World::from_bytes(&bytes).map_err(|e| SourceError(e.to_string()))?;
    // The head only says where to start; its world must still be what its ref names.
    let canonical = world.to_bytes().map_err(|e| {
        VerifyError::Integrity(format!("the head world has no canonical form: {e}"))
    })?;
    if canonical != *bytes || Ref::of(&canonical) != head {
        return Err(VerifyError::Integrity(format!(
            "the head world's bytes hash to {}, not to the head ref {head}",
            Ref::of(&bytes)
        )));
    }
    Ok(world.revision)
}

/// The entries `handle` names, oldest first, each with how it matched.
fn locate<S: Source + ?Sized>(
    src: &S,
    handle: &Handle,
    scan: u64,
) -> Result<Vec<(u64, String)>, VerifyError> {
    match handle {
        Handle::Head => Ok(vec![(head_index(src)?, "head".into())]),
        Handle::Index(i) => {
            // A row the source holds but cannot serve (a damaged row a daemon will not pass
            // off as an entry) is walked all the same: its entry link says why it is broken.
            if matches!(src.entry(*i), Ok(None)) {
                // Below the head it is a hole, which no scan finds: damage, said as such.
                if let Some(hole) = hole_at(src, *i) {
                    return Err(VerifyError::Integrity(format!("{hole}: run worldd doctor")));
                }
                return Err(VerifyError::NotFound(format!("entry {i}")));
            }
            Ok(vec![(*i, "index".into())])
        }
        Handle::Invocation(id) => {
            let mut found = scan_for(src, scan, |_, rec| {
                rec.as_ref()
                    .is_some_and(|v| v["invocationId"] == id.as_str())
                    .then(|| "invocation id".into())
            })?;
            // The coordinator's task state names where the invocation committed, even beyond
            // the scanned window.
            if let Some((surface, ep, t)) = task::split_invocation_id(id) {
                if let Some(state) = src.task(ep, &format!("{surface}:{t}"))? {
                    // A row holding another call's task state answers for nothing: said as
                    // damage, not as a call never sent.
                    if state.invocation_id != *id {
                        return Err(VerifyError::Integrity(format!(
                            "the task state stored for {id} is {}'s: the store is damaged or was tampered with",
                            state.invocation_id
                        )));
                    }
                    if let Some(i) = state.entry_index {
                        named_entry_is(src, id, i, Unreadable::ToTheWalk)?;
                        if !found.iter().any(|(j, _)| *j == i) {
                            found.push((i, "invocation id".into()));
                        }
                    }
                }
            }
            if found.is_empty() {
                return Err(VerifyError::NotFound(format!("invocation {id}")));
            }
            found.sort_by_key(|(i, _)| *i);
            Ok(found)
        }
        Handle::Output(bytes) => {
            let target = Ref::of(bytes);
            let found = find_ref(src, &target, scan)?;
            if found.is_empty() {
                return Err(VerifyError::NotFound(format!("a result with {target}")));
            }
            Ok(found
                .into_iter()
                .map(|(i, how)| {
                    if how == "output" {
                        (i, "output (sha256 of the result)".into())
                    } else {
                        (i, how)
                    }
                })
                .collect())
        }
        Handle::Ref(target) => {
            // An entry hash names exactly one entry.
            if let Some(i) = src.entry_index(target)? {
                return Ok(vec![(i, "entry hash".into())]);
            }
            let found = find_ref(src, target, scan)?;
            if found.is_empty() {
                return Err(VerifyError::NotFound(target.to_string()));
            }
            Ok(found)
        }
    }
}

/// Whether entry `index` of a store holds invocation `id`'s record, as `id`'s committed task
/// state says: the check `why` makes of the entry a task state names, for a reader that answers
/// from the task state (`GET /v1/calls/…`, `GET /v1/invocations/{id}`). It reads that entry and
/// its record, nothing else (the head too, to name the last entry, when the entry is gone).
/// [`VerifyError::Integrity`] when the log does not hold the entry, holds another call's, or
/// holds an entry or record that cannot be read: an answer that says "committed" has no walk
/// behind it to report the damage.
pub fn committed_entry_holds(r: &ReadCtx<'_>, id: &str, index: u64) -> Result<(), VerifyError> {
    named_entry_is(&LocalSource::new(r), id, index, Unreadable::Damage)
}

/// What [`named_entry_is`] makes of an entry or record it cannot read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Unreadable {
    /// Left to the walk, whose link says why (`why`).
    ToTheWalk,
    /// Damage, said now (an answer from the task state alone).
    Damage,
}

/// The entry a task state names must hold that invocation's record: an index alone would have
/// `why` verify whichever call now sits there, as after a log lost its end and grew again. An
/// entry or record that cannot be read is left to the walk, whose link says why.
fn named_entry_is<S: Source + ?Sized>(
    src: &S,
    id: &str,
    i: u64,
    unreadable: Unreadable,
) -> Result<(), VerifyError> {
    let unread = |what: String| match unreadable {
        Unreadable::ToTheWalk => Ok(()),
        Unreadable::Damage => Err(VerifyError::Integrity(format!(
            "the task state of {id} says it committed at entry {i}, but {what}"
        ))),
    };
    let Some(bytes) = src.entry(i)? else {
        if let Some(hole) = hole_at(src, i) {
            return Err(VerifyError::Integrity(format!(
                "the task state of {id} says it committed at entry {i}, but {hole}: run worldd doctor"
            )));
        }
        let last = head_index(src)
            .map(|h| format!(" (its last entry is {h})"))
            .unwrap_or_default();
        return Err(VerifyError::Integrity(format!(
            "the task state of {id} says it committed at entry {i}, which the log does not hold{last}: the log lost its end"
        )));
    };
    let entry = match Entry::from_bytes(&bytes) {
        Ok(entry) => entry,
        Err(e) => return unread(format!("entry {i} does not decode ({e})")),
    };
    let record = entry.transition_ref;
    let Some(record) = src.object(&record).ok().flatten() else {
        return unread(format!("entry {i}'s record {record} cannot be read"));
    };
    if Ref::of(&record.payload) != entry.transition_ref {
        return unread(format!(
            "entry {i}'s record {} does not hash to its address",
            entry.transition_ref
        ));
    }
    match walk::record_invocation_id(&record.payload) {
        Some(named) if named == id => Ok(()),
        named => Err(VerifyError::Integrity(format!(
            "the task state of {id} says it committed at entry {i}, but entry {i}'s record is {}: the log lost its end or was rewritten",
            named.map_or_else(|| "no invocation's".to_string(), |n| format!("{n}'s"))
        ))),
    }
}

/// `entry i is missing from the log (…)` when entry `i`, which the source does not hold, is
/// below the head: a hole in the log, not a lost end (and not a ref a wider scan would find).
/// `None` at or past the head, or when the head cannot be read.
pub(crate) fn hole_at<S: Source + ?Sized>(src: &S, i: u64) -> Option<String> {
    let last = head_index(src).ok()?;
    if i >= last {
        return None;
    }
    let there = |j: u64| matches!(src.entry(j), Ok(Some(_)));
    let around = match i.checked_sub(1) {
        Some(before) if there(before) && there(i + 1) => {
            format!("entries {before} and {} are there", i + 1)
        }
        None if there(1) => "entry 1 is there".to_string(),
        _ => format!("its last entry is {last}"),
    };
    Some(format!("entry {i} is missing from the log ({around})"))
}

/// Every entry in the scanned window whose entry hash, record or record fields name `target`.
fn find_ref<S: Source + ?Sized>(
    src: &S,
    target: &Ref,
    scan: u64,
) -> Result<Vec<(u64, String)>, VerifyError> {
    let t = target.to_string();
    let t = t.as_str();
    scan_for(src, scan, |entry, rec| {
        if entry.entry_hash == *target {
            return Some("entry hash".into());
        }
        if entry.transition_ref == *target {
            return Some("record".into());
        }
        let rec = rec.as_ref()?;
        for key in ["output", "input", "plan"] {
            if rec[key] == t {
                return Some(key.into());
            }
        }
        if rec["effects"]
            .as_array()
            .is_some_and(|a| a.iter().any(|e| e == t))
        {
            return Some("effect record".into());
        }
        let output: Ref = rec["output"].as_str()?.parse().ok()?;
        let world = World {
            revision: entry.header.entry_index,
            state_root: output,
            log_head: entry.entry_hash,
        };
        (world.reference().ok()? == *target).then(|| "world".into())
    })
}

/// Every entry from the head back, at most `scan` of them, that `test` matches; oldest first.
fn scan_for<S: Source + ?Sized>(
    src: &S,
    scan: u64,
    mut test: impl FnMut(&Entry, &Option<Value>) -> Option<String>,
) -> Result<Vec<(u64, String)>, VerifyError> {
    let head = head_index(src)?;
    let lowest = head.saturating_sub(scan.saturating_sub(1));
    let mut found = Vec::new();
    for i in (lowest..=head).rev() {
        let Some(entry) = src
            .entry(i)?
            .and_then(|bytes| Entry::from_bytes(&bytes).ok())
        else {
            continue;
        };
        let rec = src
            .object(&entry.transition_ref)?
            .and_then(|o| canon::parse(&o.payload).ok());
        if let Some(how) = test(&entry, &rec) {
            found.push((i, how));
        }
    }
    found.reverse();
    Ok(found)
}
