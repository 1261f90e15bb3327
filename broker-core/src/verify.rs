//! Provenance verification: the library behind `worldd why`.
//!
//! From any handle — an entry index, the head, any `sha256:` ref found in a result, an
//! invocation id, or the result bytes themselves — find the log entry and walk
//! world → entry → record → input → plan → effects → output, recomputing every address from the
//! stored bytes. Each link is reported as verified or broken; nothing is trusted because it
//! was stored.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;
use serde_json::Value;

use crate::broker::EffectRecord;
use crate::canon;
use crate::log::{self, Entry, World};
use crate::object::{sid, ObjectView, Ref};
use crate::store::{ReadCtx, Store, StoreError};
use crate::task;

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
    #[error("not a handle: {0} (want head, an entry index, a sha256: ref or an invocation id)")]
    BadHandle(String),
    #[error("{0} not found")]
    NotFound(String),
}

/// One checked link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// `world`, `entry`, `record`, `input`, `plan`, `effect`, `output`.
    pub kind: &'static str,
    pub reference: Option<Ref>,
    pub ok: bool,
    pub detail: String,
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
    pub fn all_ok(&self) -> bool {
        self.links.iter().all(|l| l.ok)
    }

    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "entryIndex": self.entry_index,
            "matchedBy": self.matched_by,
            "verified": self.all_ok(),
            "links": self.links.iter().map(|l| serde_json::json!({
                "kind": l.kind,
                "ref": l.reference.map(|r| r.to_string()),
                "ok": l.ok,
                "detail": l.detail,
            })).collect::<Vec<_>>(),
        })
    }
}

/// Explain `handle`: find its entry (scanning back at most `scan` entries for a ref) and verify.
pub fn why(store: &Store, handle: &Handle, scan: u64) -> Result<Report, VerifyError> {
    store.read(|r| {
        let (index, matched_by) = locate(r, handle, scan)?;
        Ok(verify_in(r, index, matched_by))
    })
}

/// Verify entry `index` without a handle.
pub fn verify_entry(store: &Store, index: u64) -> Result<Report, VerifyError> {
    store.read(|r| Ok(verify_in(r, index, "index".into())))
}

fn head_index(r: &ReadCtx<'_>) -> Result<u64, VerifyError> {
    Ok(log::head(r)?
        .ok_or_else(|| VerifyError::NotFound("world head".into()))?
        .world
        .revision)
}

fn locate(r: &ReadCtx<'_>, handle: &Handle, scan: u64) -> Result<(u64, String), VerifyError> {
    match handle {
        Handle::Head => Ok((head_index(r)?, "head".into())),
        Handle::Index(i) => {
            if log::entry_bytes(r, *i)?.is_none() {
                return Err(VerifyError::NotFound(format!("entry {i}")));
            }
            Ok((*i, "index".into()))
        }
        Handle::Invocation(id) => {
            if let Some((surface, ep, t)) = task::split_invocation_id(id) {
                if let Some(state) = task::get(r, ep, &format!("{surface}:{t}"))? {
                    if state.invocation_id == *id {
                        if let Some(i) = state.entry_index {
                            return Ok((i, "invocation id".into()));
                        }
                    }
                }
            }
            scan_for(r, scan, |_, rec| {
                rec.as_ref()
                    .map(|v| v["invocationId"] == id.as_str())
                    .unwrap_or(false)
                    .then(|| "invocation id".into())
            })
            .and_then(|o| o.ok_or_else(|| VerifyError::NotFound(format!("invocation {id}"))))
        }
        Handle::Output(bytes) => {
            let target = Ref::of(bytes);
            find_ref(r, &target, scan)?
                .ok_or_else(|| VerifyError::NotFound(format!("a result with {target}")))
                .map(|(i, how)| {
                    (
                        i,
                        if how == "output" {
                            "output (sha256 of the result)".into()
                        } else {
                            how
                        },
                    )
                })
        }
        Handle::Ref(target) => {
            if let Some(i) = log::index_of_entry_hash(r, target)? {
                return Ok((i, "entry hash".into()));
            }
            find_ref(r, target, scan)?.ok_or_else(|| VerifyError::NotFound(target.to_string()))
        }
    }
}

fn find_ref(
    r: &ReadCtx<'_>,
    target: &Ref,
    scan: u64,
) -> Result<Option<(u64, String)>, VerifyError> {
    let t = target.to_string();
    let t = t.as_str();
    scan_for(r, scan, |entry, rec| {
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
        (world.reference() == *target).then(|| "world".into())
    })
}

/// Scan entries from the head backwards, at most `scan` of them.
fn scan_for(
    r: &ReadCtx<'_>,
    scan: u64,
    mut test: impl FnMut(&Entry, &Option<Value>) -> Option<String>,
) -> Result<Option<(u64, String)>, VerifyError> {
    let head = head_index(r)?;
    let lowest = head.saturating_sub(scan.saturating_sub(1));
    for i in (lowest..=head).rev() {
        let Ok(Some(entry)) = log::entry(r, i) else {
            continue;
        };
        let rec = r
            .object(&entry.transition_ref)?
            .and_then(|o| canon::parse(&o.payload).ok());
        if let Some(how) = test(&entry, &rec) {
            return Ok(Some((i, how)));
        }
    }
    Ok(None)
}

struct Walk {
    links: Vec<Link>,
}

impl Walk {
    fn push(&mut self, kind: &'static str, reference: Option<Ref>, result: Result<String, String>) {
        let (ok, detail) = match result {
            Ok(d) => (true, d),
            Err(d) => (false, d),
        };
        self.links.push(Link {
            kind,
            reference,
            ok,
            detail,
        });
    }
}

/// The fields of an invocation record `why` follows, borrowed from its bytes. Absent fields are
/// reported on the link that needs them.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RecordFields<'a> {
    #[serde(borrow, default)]
    invocation_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    episode_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    skill_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    transition_fn: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    interpreter: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    input: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    plan: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    output: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    effects: Option<Vec<Cow<'a, str>>>,
}

/// The part of a call's output `why` checks: the reserved `world` block.
#[derive(Deserialize)]
struct OutputWorld<'a> {
    #[serde(borrow, default)]
    world: Option<WorldBlock<'a>>,
}

#[derive(Deserialize, Default)]
struct WorldBlock<'a> {
    #[serde(borrow, default)]
    plan: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    effects: Vec<WorldEffect<'a>>,
}

#[derive(Deserialize)]
struct WorldEffect<'a> {
    #[serde(borrow, default)]
    record: Option<Cow<'a, str>>,
}

/// Load an object and check it hashes to its address.
fn hashed_object<'t>(r: &ReadCtx<'t>, reference: &Ref) -> Result<ObjectView<'t>, String> {
    let obj = r
        .object_view(reference)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| "missing from the store".to_string())?;
    if !obj.verify() {
        return Err(format!(
            "stored bytes hash to {}, not to their address",
            Ref::of(obj.payload)
        ));
    }
    Ok(obj)
}

/// Load an object and check it hashes to its address and has the expected semantic id.
fn checked_object<'t>(
    r: &ReadCtx<'t>,
    reference: &Ref,
    semantic_id: &str,
) -> Result<ObjectView<'t>, String> {
    let obj = hashed_object(r, reference)?;
    if obj.semantic_id != semantic_id {
        return Err(format!(
            "semantic id is {}, expected {semantic_id}",
            obj.semantic_id
        ));
    }
    Ok(obj)
}

fn ref_field(value: &Option<Cow<'_, str>>, key: &str) -> Result<Ref, String> {
    value
        .as_deref()
        .ok_or_else(|| format!("{key} is missing"))?
        .parse()
        .map_err(|e: crate::object::RefError| format!("{key}: {e}"))
}

fn verify_in(r: &ReadCtx<'_>, index: u64, matched_by: String) -> Report {
    let mut walk = Walk { links: Vec::new() };

    // Entry: its bytes, its hash, its place in the chain.
    let entry = match log::entry_bytes(r, index) {
        Ok(Some(bytes)) => check_entry(r, index, &bytes),
        Ok(None) => Err("missing from the log".to_string()),
        Err(e) => Err(e.to_string()),
    };
    let entry = match entry {
        Ok((entry, detail)) => {
            walk.push("entry", Some(entry.entry_hash), Ok(detail));
            Some(entry)
        }
        Err(why) => {
            walk.push("entry", None, Err(why));
            None
        }
    };
    let Some(entry) = entry else {
        return Report {
            entry_index: index,
            matched_by,
            links: walk.links,
        };
    };

    if index == 0 || entry.header.written_by == log::GENESIS_WRITER {
        verify_genesis(r, &entry, &mut walk);
        return finish(walk, index, matched_by);
    }
    if !entry.header.written_by.starts_with("coordinator:") {
        verify_client_commit(r, &entry, &mut walk);
        return finish(walk, index, matched_by);
    }

    // Invocation record.
    let record = checked_object(r, &entry.transition_ref, sid::INVOCATION_RECORD).and_then(|o| {
        let v: RecordFields<'_> =
            serde_json::from_slice(o.payload).map_err(|e| format!("unreadable: {e}"))?;
        if v.transition_fn.as_deref() != Some(entry.header.transition_fn.to_string().as_str())
            || v.interpreter.as_deref() != Some(entry.header.interpreter.to_string().as_str())
        {
            return Err("transitionFn or interpreter differ from the entry's".into());
        }
        Ok(v)
    });
    let record = match record {
        Ok(v) => {
            walk.push(
                "record",
                Some(entry.transition_ref),
                Ok(format!(
                    "world/invocation-record/v2 invocation {} episode {} skill {}",
                    v.invocation_id.as_deref().unwrap_or("?"),
                    v.episode_id.as_deref().unwrap_or("?"),
                    v.skill_id.as_deref().unwrap_or("?")
                )),
            );
            v
        }
        Err(why) => {
            walk.push("record", Some(entry.transition_ref), Err(why));
            verify_world_from_head(r, &entry, &mut walk);
            return finish(walk, index, matched_by);
        }
    };

    // Input.
    match ref_field(&record.input, "input") {
        Ok(input) => walk.push(
            "input",
            Some(input),
            checked_object(r, &input, sid::INVOCATION_INPUT).map(|o| {
                String::from_utf8_lossy(o.payload)
                    .chars()
                    .take(120)
                    .collect()
            }),
        ),
        Err(e) => walk.push("input", None, Err(e)),
    }

    // Plan.
    let plan_ref = ref_field(&record.plan, "plan");
    let plan = plan_ref.clone().and_then(|p| {
        let o = checked_object(r, &p, sid::EFFECT_PLAN)?;
        canon::parse(o.payload).map_err(|e| format!("unreadable: {e}"))
    });
    match (&plan_ref, &plan) {
        (Ok(p), Ok(v)) => {
            let effects = v["effects"].as_array().cloned().unwrap_or_default();
            let desc: Vec<String> = effects
                .iter()
                .map(|e| {
                    format!(
                        "{} {}@{} cost {}",
                        e["id"].as_str().unwrap_or("?"),
                        e["effect"].as_str().unwrap_or("?"),
                        e["scope"].as_str().unwrap_or("?"),
                        e["cost"]
                    )
                })
                .collect();
            walk.push(
                "plan",
                Some(*p),
                Ok(format!(
                    "{} effect(s){}{}",
                    effects.len(),
                    if desc.is_empty() { "" } else { ": " },
                    desc.join(", ")
                )),
            );
        }
        (Ok(p), Err(e)) => walk.push("plan", Some(*p), Err(e.clone())),
        (Err(e), _) => walk.push("plan", None, Err(e.clone())),
    }

    // Effects.
    let effect_refs: Vec<Result<Ref, String>> = match &record.effects {
        Some(a) => a
            .iter()
            .map(|s| {
                s.parse()
                    .map_err(|e: crate::object::RefError| e.to_string())
            })
            .collect(),
        None => vec![Err("effects is not a list".into())],
    };
    let planned = plan
        .as_ref()
        .ok()
        .and_then(|v| v["effects"].as_array().map(Vec::len));
    if let Some(n) = planned {
        if n != effect_refs.len() {
            walk.push(
                "plan",
                plan_ref.clone().ok(),
                Err(format!(
                    "plan has {n} effect(s) but the record lists {}",
                    effect_refs.len()
                )),
            );
        }
    }
    for (i, er) in effect_refs.iter().enumerate() {
        match er {
            Ok(er) => walk.push("effect", Some(*er), check_effect(r, er, i)),
            Err(e) => walk.push("effect", None, Err(e.clone())),
        }
    }

    // Output, and the world that selects it.
    let output_ref = ref_field(&record.output, "output");
    match &output_ref {
        Ok(out) => {
            let res = checked_object(r, out, sid::INVOCATION_OUTPUT).and_then(|o| {
                // Only the `world` block is checked; the rest (the tool's output, often the
                // bulk of the bytes) is skipped rather than built into values.
                let v: OutputWorld<'_> =
                    serde_json::from_slice(o.payload).map_err(|e| format!("unreadable: {e}"))?;
                let world = v.world.unwrap_or_default();
                if let Ok(p) = &plan_ref {
                    if world.plan.as_deref() != Some(p.to_string().as_str()) {
                        return Err("the result's world.plan is not the record's plan".into());
                    }
                }
                let listed: Vec<Option<&str>> =
                    world.effects.iter().map(|e| e.record.as_deref()).collect();
                let recorded: Vec<String> = effect_refs
                    .iter()
                    .filter_map(|e| e.as_ref().ok().map(Ref::to_string))
                    .collect();
                if listed.len() != recorded.len()
                    || listed
                        .iter()
                        .zip(&recorded)
                        .any(|(a, b)| *a != Some(b.as_str()))
                {
                    return Err(
                        "the result's world.effects do not name the record's effects".into(),
                    );
                }
                Ok(format!(
                    "{} B = world.stateRoot; the result is these exact bytes",
                    o.payload.len()
                ))
            });
            walk.push("output", Some(*out), res);
            let world = World {
                revision: index,
                state_root: *out,
                log_head: entry.entry_hash,
            };
            verify_world(r, &world, &mut walk);
        }
        Err(e) => walk.push("output", None, Err(e.clone())),
    }
    finish(walk, index, matched_by)
}

fn finish(mut walk: Walk, index: u64, matched_by: String) -> Report {
    // Present world first, as `why` prints it.
    if let Some(pos) = walk.links.iter().position(|l| l.kind == "world") {
        let w = walk.links.remove(pos);
        walk.links.insert(0, w);
    }
    Report {
        entry_index: index,
        matched_by,
        links: walk.links,
    }
}

fn check_entry(r: &ReadCtx<'_>, index: u64, bytes: &[u8]) -> Result<(Entry, String), String> {
    // Strict parsing (no duplicate keys, no unknown fields) plus the recomputed hash below
    // cover every field; the bytes need not be re-serialised to be trusted.
    let entry = Entry::from_bytes(bytes).map_err(|e| format!("unreadable: {e}"))?;
    if entry.header.entry_index != index {
        return Err(format!(
            "header says index {} at position {index}",
            entry.header.entry_index
        ));
    }
    if !entry.hash_is_valid() {
        return Err(format!(
            "entryHash {} does not match the recomputed {}",
            entry.entry_hash,
            Entry::compute_hash(&entry.header, &entry.transition_ref)
        ));
    }
    // The link: entry i-1 is the one whose hash this entry names. The entry-hash index answers
    // that without parsing entry i-1 again (its own bytes are checked when it is verified).
    let linked = if index == 0 {
        entry.header.prev_entry_hash == Ref::ZERO
    } else {
        matches!(log::index_of_entry_hash(r, &entry.header.prev_entry_hash), Ok(Some(i)) if i == index - 1)
    };
    if !linked {
        return Err(format!(
            "prevEntryHash {} is not the hash of entry {}",
            entry.header.prev_entry_hash,
            index.saturating_sub(1)
        ));
    }
    let detail = format!(
        "#{index} writtenBy {} prev {} transitionFn {} interpreter {} (recomputed)",
        entry.header.written_by,
        entry.header.prev_entry_hash.short(8),
        entry.header.transition_fn.short(8),
        entry.header.interpreter.short(8)
    );
    Ok((entry, detail))
}

fn check_effect(r: &ReadCtx<'_>, reference: &Ref, i: usize) -> Result<String, String> {
    let o = checked_object(r, reference, sid::EFFECT_RECORD)?;
    // The bytes hash to their address, so a typed parse is all that is left to check.
    let rec: EffectRecord =
        serde_json::from_slice(o.payload).map_err(|e| format!("not an effect record: {e}"))?;
    if !rec.is_lawful() {
        return Err("record is not one of the three lawful shapes".into());
    }
    let req = checked_object(r, &rec.request_ref, sid::EFFECT_REQUEST)
        .map_err(|e| format!("request {}: {e}", rec.request_ref))?;
    let res_len = match rec.result_ref {
        Some(res) => Some(
            checked_object(r, &res, sid::EFFECT_RESULT)
                .map_err(|e| format!("result {res}: {e}"))?
                .payload
                .len(),
        ),
        None => None,
    };
    let verdict = if rec.allowed {
        if rec.failed {
            "failed"
        } else {
            "allowed"
        }
    } else {
        rec.denial.as_str()
    };
    Ok(format!(
        "e{} {verdict} {}@{} cost {} budget {}→{} request {} B{}",
        i + 1,
        rec.effect,
        rec.scope,
        rec.cost,
        rec.budget_before,
        rec.budget_after,
        req.payload.len(),
        res_len
            .map(|n| format!(" result {n} B"))
            .unwrap_or_default()
    ))
}

fn verify_world(r: &ReadCtx<'_>, world: &World, walk: &mut Walk) {
    let reference = world.reference();
    let res = match log::world_bytes(r, &reference) {
        Ok(Some(bytes)) if bytes == world.to_bytes() => Ok(format!(
            "revision {}, stateRoot {}, logHead {} (recomputed)",
            world.revision,
            world.state_root.short(8),
            world.log_head.short(8)
        )),
        Ok(Some(bytes)) => Err(format!(
            "stored world bytes hash to {}, not to its ref",
            Ref::of(&bytes)
        )),
        Ok(None) => Err("no stored world selects this entry".into()),
        Err(e) => Err(e.to_string()),
    };
    walk.push("world", Some(reference), res);
}

/// When the record is unreadable, the world can still be checked if it is the head.
fn verify_world_from_head(r: &ReadCtx<'_>, entry: &Entry, walk: &mut Walk) {
    if let Ok(Some(head)) = log::head(r) {
        if head.world.revision == entry.header.entry_index {
            verify_world(r, &head.world, walk);
        }
    }
}

fn verify_genesis(r: &ReadCtx<'_>, entry: &Entry, walk: &mut Walk) {
    let res = checked_object(r, &entry.transition_ref, sid::GENESIS).and_then(|o| {
        let expected = canon::to_vec(&log::genesis_document()).map_err(|e| e.to_string())?;
        if o.payload != expected {
            return Err("genesis document differs from this build's".into());
        }
        Ok(format!("{} B genesis document", o.payload.len()))
    });
    walk.push("output", Some(entry.transition_ref), res);
    let world = World {
        revision: 0,
        state_root: entry.transition_ref,
        log_head: entry.entry_hash,
    };
    verify_world(r, &world, walk);
}

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
    /// Intents without an outcome (indeterminate effects; not an inconsistency).
    pub indeterminate: Vec<String>,
    /// The head does not select the last entry, or the log has a gap.
    pub head_findings: Vec<String>,
}

impl StoreAudit {
    /// True when nothing is inconsistent (indeterminate intents are allowed).
    pub fn consistent(&self) -> bool {
        self.broken.is_empty() && self.journal_findings.is_empty() && self.head_findings.is_empty()
    }
}

/// Entries a doctor worker verifies per claim.
const AUDIT_BLOCK: u64 = 256;

/// Check every entry's links, every spend counter against the journal, the pending-intent
/// index and the head.
pub fn audit_store(store: &Store) -> Result<StoreAudit, VerifyError> {
    let mut audit = StoreAudit::default();
    let head = store
        .read(log::head)?
        .ok_or_else(|| VerifyError::NotFound("world head".into()))?;
    let last = store.read(|r| -> Result<Option<u64>, StoreError> {
        Ok(r.tables
            .log
            .last(r.txn)
            .map_err(crate::store::TxnExt::heed_err(r))?
            .map(|(k, _)| k))
    })?;
    if last != Some(head.world.revision) {
        audit.head_findings.push(format!(
            "the head selects revision {} but the last entry is {:?}",
            head.world.revision, last
        ));
    }
    // Entries verify independently. Worker threads claim blocks of the log from a shared
    // counter (so no core idles while another still has a long tail), each block in its own
    // read transaction (LMDB readers never block each other or the writer); the journal audit
    // runs beside them.
    let total = last.map_or(0, |l| l + 1);
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 16);
    let next = AtomicU64::new(0);
    let verify_blocks = || -> Result<Vec<(u64, String)>, VerifyError> {
        let mut broken = Vec::new();
        loop {
            let from = next.fetch_add(AUDIT_BLOCK, Ordering::Relaxed);
            if from >= total {
                return Ok(broken);
            }
            let to = (from + AUDIT_BLOCK).min(total);
            store.read(|r| {
                for i in from..to {
                    let report = verify_in(r, i, String::new());
                    if let Some(l) = report.links.iter().find(|l| !l.ok) {
                        broken.push((i, format!("{}: {}", l.kind, l.detail)));
                    }
                }
                Ok::<_, VerifyError>(())
            })?;
        }
    };
    let (results, journal) = std::thread::scope(|scope| {
        let journal = scope.spawn(|| store.read(crate::journal::audit));
        let handles: Vec<_> = (0..workers).map(|_| scope.spawn(verify_blocks)).collect();
        let results: Vec<Result<Vec<(u64, String)>, VerifyError>> = handles
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
        (results, journal)
    });
    audit.entries = total;
    for r in results {
        audit.broken.extend(r?);
    }
    audit.broken.sort_by_key(|(i, _)| *i);
    let (findings, n) =
        journal.map_err(|e| VerifyError::NotFound(format!("a readable journal ({e})")))?;
    audit.journal_records = n;
    audit.journal_findings = findings.into_iter().map(|f| f.0).collect();
    audit.indeterminate = store
        .indeterminate()
        .map_err(|e| VerifyError::NotFound(format!("a readable journal ({e})")))?
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

/// An entry committed by a client (`POST /v1/commit`): its record and output are whatever the
/// client stored, so check what the log promises — both objects exist and hash to their
/// addresses, and the stored world selects them.
fn verify_client_commit(r: &ReadCtx<'_>, entry: &Entry, walk: &mut Walk) {
    let any_object = |reference: &Ref| hashed_object(r, reference);
    walk.push(
        "record",
        Some(entry.transition_ref),
        any_object(&entry.transition_ref).map(|o| {
            format!(
                "client commit by {}: {} ({} B)",
                entry.header.written_by,
                o.semantic_id,
                o.payload.len()
            )
        }),
    );
    let index = entry.header.entry_index;
    let world_ref = match log::world_ref_at(r, index) {
        Ok(Some(w)) => w,
        Ok(None) => {
            walk.push(
                "world",
                None,
                Err("no stored world selects this entry".into()),
            );
            return;
        }
        Err(e) => {
            walk.push("world", None, Err(e.to_string()));
            return;
        }
    };
    let world = log::world_bytes(r, &world_ref)
        .map_err(|e| e.to_string())
        .and_then(|b| b.ok_or_else(|| "missing".to_string()))
        .and_then(|b| {
            let w = World::from_bytes(&b).map_err(|e| e.to_string())?;
            if w.to_bytes() != b || w.reference() != world_ref {
                return Err(format!(
                    "stored world bytes hash to {}, not to its ref",
                    Ref::of(&b)
                ));
            }
            if w.revision != index || w.log_head != entry.entry_hash {
                return Err("the world does not select this entry".into());
            }
            Ok(w)
        });
    match world {
        Ok(w) => {
            walk.push(
                "world",
                Some(world_ref),
                Ok(format!(
                    "revision {}, stateRoot {}, logHead {} (recomputed)",
                    w.revision,
                    w.state_root.short(8),
                    w.log_head.short(8)
                )),
            );
            walk.push(
                "output",
                Some(w.state_root),
                any_object(&w.state_root).map(|o| {
                    format!(
                        "{} B = world.stateRoot ({})",
                        o.payload.len(),
                        o.semantic_id
                    )
                }),
            );
        }
        Err(e) => walk.push("world", Some(world_ref), Err(e)),
    }
}
