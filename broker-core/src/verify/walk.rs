//! The walk of one entry: world → entry → record → journal → input → plan → replay → effects
//! (and the plugin that ran each) → output, every address recomputed from the bytes a
//! [`Source`] hands over.
//!
//! An entry is checked for what it claims:
//! - the genesis (entry 0) against this build's genesis document;
//! - an invocation (its record is an invocation record) by the full walk, including the
//!   **replay**: the stored plan must be the plan this build's interpreter computes from the
//!   transition document at `transitionFn` and the stored input. An entry naming another
//!   interpreter cannot be replayed, so it is a broken link, not a pass;
//! - a client's invocation: its effect and plugin links are checked for consistency (the
//!   records hash, have a lawful shape and are the plan's effects) but are **claims**
//!   ([`Link::claimed`]): nothing journaled them, so they are not verified facts of an effect
//!   that ran;
//! - a coordinator's invocation (`writtenBy` `coordinator:…`, or a record in the `a2a:`/`mcp:`
//!   namespaces in any letter case, whoever's entry carries it) additionally against what only
//!   the coordinator
//!   writes: the task state of the invocation (committed at this very entry, with this record's
//!   input, output and effects) and the journal's intent and outcome of every effect that ran
//!   (none for a refusal or a denial). An entry a client made up, relabelled or copied has no
//!   such state;
//! - any other client commit for what the log promises: its objects exist and hash to their
//!   addresses, and a stored world selects it.
//!
//! An invocation's output is checked against its record (the `world` block names the plan and
//! the effect records) and, where the body is by contract the handler's output (no finish
//! phase, the effect succeeded), against the effect's result: whoever serves or rewrites an
//! entry cannot have the handler say what its committed result does not.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use super::source::{Source, StoredObject};
use super::{Link, Report};
use crate::broker::{self, EffectRecord};
use crate::canon;
use crate::commit::COORDINATOR_NAMESPACES;
use crate::journal::{JournalState, OutcomeStatus};
use crate::log::{self, Entry, World};
use crate::object::{sid, Ref};
use crate::plan::Plan;
use crate::task::{self, TaskPhase};
use crate::transition::Transition;

/// Said on each effect and plugin link of a client's entry: the committer's word, which no
/// journal or task state of the coordinator backs.
pub(crate) const CLAIMED: &str = " (claimed by a client commit, not journaled)";

/// A transition document, parsed, with the note of its kind; or why it could not be.
type Loaded = Result<(Arc<Transition>, Option<String>), String>;

/// Verifies entries read from one source; caches parsed transition documents (many entries
/// share a few tools).
pub(crate) struct Verifier<'s, S: Source + ?Sized> {
    src: &'s S,
    /// This build's interpreter ref, or why it has none (its identity document has no
    /// canonical form): then no entry is pinned to it and no plan is replayed.
    interpreter: Result<Ref, String>,
    /// Each transition document with the note of its kind, if any ([`Verifier::checked`]).
    transitions: RefCell<HashMap<Ref, Loaded>>,
    /// Notes of the objects checked since the last link was pushed: the link that needed
    /// them carries them.
    notes: RefCell<Vec<String>>,
    /// The source's invocation rows whose id cannot be read, once asked for
    /// ([`Verifier::no_task_state`]).
    unnamed: RefCell<Option<UnnamedRows>>,
}

/// What [`Source::unnamed_invocation_rows`] answered.
type UnnamedRows = Result<Vec<(u64, String, Vec<u8>)>, super::SourceError>;

pub(crate) struct Walk<'n> {
    links: Vec<Link>,
    notes: &'n RefCell<Vec<String>>,
}

impl Walk<'_> {
    fn push(&mut self, kind: &'static str, reference: Option<Ref>, result: Result<String, String>) {
        let (ok, detail) = match result {
            Ok(d) => (true, d),
            Err(d) => (false, d),
        };
        let notes = self.notes.take();
        self.links.push(Link {
            kind,
            reference,
            ok,
            claimed: false,
            detail,
            note: (!notes.is_empty()).then(|| notes.join("; ")),
        });
    }

    /// The last link, if its checks passed, states what a client's commit claims, not a fact:
    /// nothing the coordinator writes backs it.
    fn claim_last(&mut self) {
        if let Some(l) = self.links.last_mut().filter(|l| l.ok) {
            l.claimed = true;
            l.detail.push_str(CLAIMED);
        }
    }

    fn into_report(mut self, index: u64, matched_by: String) -> Report {
        // Present world first, as `why` prints it.
        if let Some(pos) = self.links.iter().position(|l| l.kind == "world") {
            let w = self.links.remove(pos);
            self.links.insert(0, w);
        }
        Report {
            entry_index: index,
            matched_by,
            links: self.links,
        }
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

/// Only the key that decides what a client's record claims to be.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Claim<'a> {
    #[serde(borrow, default)]
    invocation_id: Option<Cow<'a, str>>,
}

/// The invocation id a record's bytes name, if they are JSON that names one.
pub(crate) fn record_invocation_id(payload: &[u8]) -> Option<String> {
    serde_json::from_slice::<Claim<'_>>(payload)
        .ok()
        .and_then(|c| c.invocation_id.map(Cow::into_owned))
}

/// Why `payload` does not read as an object of kind `semantic_id`, if it does not: the check
/// for bytes first stored as another kind. Each kind's own link checks the rest (the plan is
/// replayed, the effect record parsed, the request decoded, the output's world block compared).
fn reads_as(payload: &[u8], semantic_id: &str) -> Result<(), String> {
    let json = || canon::parse(payload).map_err(|e| format!("not canonical JSON: {e}"));
    match semantic_id {
        sid::EFFECT_REQUEST => broker::decode_request(payload)
            .map(|_| ())
            .ok_or_else(|| "not a broker request".to_string()),
        sid::EFFECT_PLAN => match json()? {
            v if v["plan"] == sid::EFFECT_PLAN => Ok(()),
            _ => Err(format!("its \"plan\" is not {}", sid::EFFECT_PLAN)),
        },
        sid::INVOCATION_RECORD | sid::INVOCATION_OUTPUT | sid::EFFECT_RECORD | sid::TRANSITION => {
            match json()? {
                Value::Object(_) => Ok(()),
                _ => Err("not a JSON object".into()),
            }
        }
        _ => json().map(|_| ()),
    }
}

/// One effect of a record: its ref and parsed record, or why it could not be read.
struct EffectRow {
    reference: Option<Ref>,
    record: Result<EffectRecord, String>,
    /// The note of the record's kind, said on its effect link (it is read before the others).
    notes: Vec<String>,
}

/// What the output link compares the output with: the plan and the effects of the record, and
/// the result object of each effect (read by its link).
#[derive(Clone, Copy)]
struct Made<'m, 's> {
    plan_ref: &'m Result<Ref, String>,
    plan: &'m Result<Value, String>,
    effects: &'m [EffectRow],
    results: &'m [Option<StoredObject<'s>>],
}

/// The effect result a call's body must be, when the body is by contract the handler's output
/// (data-model.md §3.2): the plan has no finish phase and its one effect succeeded. Its number
/// (`e<n>`), ref and bytes. `None` for every other body: a refusal's, a denial's, a failed
/// effect's (the broker's words, under a world block that says how the call ended), a
/// decline's (the plugin's, stored nowhere else) and a finish function's (which `why` cannot
/// re-run). `None` too when the plan or the effect cannot be read: their own links are broken
/// then.
fn handler_output<'r>(
    plan: &Result<Value, String>,
    effects: &[EffectRow],
    results: &'r [Option<StoredObject<'_>>],
) -> Option<(usize, Ref, &'r [u8])> {
    if plan.as_ref().ok()?.get("finish")?.as_bool()? {
        return None;
    }
    let mut succeeded = effects.iter().enumerate().filter_map(|(i, row)| {
        let reference = row.record.as_ref().ok()?.result_ref?;
        Some((i, reference))
    });
    // One effect per plan: a record listing more breaks the plan link already.
    let (i, reference) = succeeded.next()?;
    if succeeded.next().is_some() {
        return None;
    }
    let result = results.get(i)?.as_ref()?;
    Some((i + 1, reference, &result.payload))
}

/// The output's body (all but its `world` member) is, canonically, effect `e<n>`'s result:
/// the answer says what the handler said, not what whoever serves the entry would have it say.
fn body_is(output: Ref, payload: &[u8], n: usize, result: Ref, bytes: &[u8]) -> Result<(), String> {
    let Value::Object(mut body) = canon::parse(payload).map_err(|e| format!("unreadable: {e}"))?
    else {
        return Err("not a JSON object".into());
    };
    body.remove("world");
    let body = canon::object_to_vec(&body).map_err(|e| format!("no canonical form: {e}"))?;
    let said = canon::canonicalize(bytes)
        .map_err(|e| format!("e{n}'s effect result {result} is not JSON: {e}"))?;
    if body != said {
        return Err(format!(
            "the body of output {output} (all but `world`) is not e{n}'s effect result {result}: a tool without a finish phase answers with its handler's output unchanged"
        ));
    }
    Ok(())
}

/// An invocation id, and its parts.
#[derive(Clone, Copy)]
struct Invocation<'r> {
    id: &'r str,
    surface: &'r str,
    episode: &'r str,
    task_id: &'r str,
}

/// Where and with what the entry committed its invocation.
struct Committed {
    index: u64,
    output: Ref,
    world_ref: Ref,
}

/// The invocation the record names: an id in a surface's namespace, of the record's episode,
/// and of MCP when the entry's writer is the legacy MCP writer.
fn invocation_of<'r>(
    entry: &Entry,
    record: &'r RecordFields<'_>,
) -> Result<Invocation<'r>, String> {
    let id = record
        .invocation_id
        .as_deref()
        .ok_or("invocationId is missing")?;
    let (surface, episode, task_id) = task::split_invocation_id(id)
        .ok_or_else(|| format!("invocation id {id} is not <surface>:<episode>:<task>"))?;
    if !coordinator_namespace(id) {
        return Err(format!(
            "invocation id {id} is in no surface's namespace (a2a: or mcp:)"
        ));
    }
    if entry.header.written_by == log::LEGACY_MCP_WRITER && surface != "mcp" {
        return Err(format!(
            "writtenBy {} names MCP but the invocation is {id}",
            log::LEGACY_MCP_WRITER
        ));
    }
    if record.episode_id.as_deref() != Some(episode) {
        return Err(format!(
            "the record's episode {} is not the invocation id's ({episode})",
            record.episode_id.as_deref().unwrap_or("?")
        ));
    }
    Ok(Invocation {
        id,
        surface,
        episode,
        task_id,
    })
}

/// The journal's intent and outcome for effect e`n` of the record, which ran.
fn journal_of_effect(
    invocation: &Invocation<'_>,
    n: usize,
    reference: Option<Ref>,
    rec: &EffectRecord,
    j: &JournalState,
) -> Result<String, String> {
    let Invocation { id, episode, .. } = *invocation;
    let intent = &j.intent;
    if intent.episode != episode
        || intent.effect != rec.effect
        || intent.scope != rec.scope
        || intent.cost != rec.cost
        || intent.request_ref != rec.request_ref
    {
        return Err(format!(
            "the journal's intent for {id} is not effect e{n} of this record"
        ));
    }
    let expected: &[OutcomeStatus] = if rec.failed {
        &[OutcomeStatus::Failed, OutcomeStatus::Indeterminate]
    } else {
        &[OutcomeStatus::Succeeded]
    };
    let status = j.status.filter(|s| expected.contains(s)).ok_or_else(|| {
        format!(
            "the journal's outcome of {id} ({}) is not how effect e{n} ended",
            j.status
                .map_or("none".into(), |s| format!("{s:?}").to_lowercase())
        )
    })?;
    if j.result_ref != reference {
        return Err(format!(
            "the journal's outcome of {id} names another effect record"
        ));
    }
    Ok(format!(
        "journal: intent e{n} {}@{} cost {}, outcome {}",
        intent.effect,
        intent.scope,
        intent.cost,
        format!("{status:?}").to_lowercase()
    ))
}

/// The invocation record's fields, which must name the entry's transition and interpreter.
fn record_fields<'o>(
    entry: &Entry,
    record: &'o StoredObject<'_>,
) -> Result<RecordFields<'o>, String> {
    let v = serde_json::from_slice::<RecordFields<'_>>(&record.payload)
        .map_err(|e| format!("unreadable: {e}"))?;
    if v.transition_fn.as_deref() != Some(entry.header.transition_fn.to_string().as_str())
        || v.interpreter.as_deref() != Some(entry.header.interpreter.to_string().as_str())
    {
        return Err("transitionFn or interpreter differ from the entry's".into());
    }
    Ok(v)
}

/// What the record link says of a readable invocation record.
fn record_text(entry: &Entry, v: &RecordFields<'_>) -> String {
    let client = !entry.header.written_by.starts_with(log::COORDINATOR_PREFIX);
    format!(
        "{}world/invocation-record/v2 invocation {} episode {} skill {}",
        if client {
            format!("client commit by {}: ", entry.header.written_by)
        } else {
            String::new()
        },
        v.invocation_id.as_deref().unwrap_or("?"),
        v.episode_id.as_deref().unwrap_or("?"),
        v.skill_id.as_deref().unwrap_or("?")
    )
}

/// The world that selects `entry` with `output` as its state, its ref and canonical bytes.
fn selected_world(entry: &Entry, output: Ref) -> Result<(Ref, Vec<u8>, World), String> {
    let world = World {
        revision: entry.header.entry_index,
        state_root: output,
        log_head: entry.entry_hash,
    };
    let bytes = world
        .to_bytes()
        .map_err(|e| format!("the world has no canonical form: {e}"))?;
    Ok((Ref::of(&bytes), bytes, world))
}

fn ref_field(value: &Option<Cow<'_, str>>, key: &str) -> Result<Ref, String> {
    value
        .as_deref()
        .ok_or_else(|| format!("{key} is missing"))?
        .parse()
        .map_err(|e: crate::object::RefError| format!("{key}: {e}"))
}

/// True when an invocation id is in one of the coordinator's namespaces, in any letter case:
/// `MCP:…` passes for the coordinator's with a reader, so it is held to the coordinator's rows.
pub(crate) fn coordinator_namespace(id: &str) -> bool {
    COORDINATOR_NAMESPACES.iter().any(|ns| {
        id.get(..ns.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(ns))
    })
}

impl<'s, S: Source + ?Sized> Verifier<'s, S> {
    pub(crate) fn new(src: &'s S) -> Self {
        Verifier {
            src,
            interpreter: log::interpreter_ref().map_err(|e| e.to_string()),
            transitions: RefCell::new(HashMap::new()),
            notes: RefCell::new(Vec::new()),
            unnamed: RefCell::new(None),
        }
    }

    /// Load an object and check it hashes to its address.
    fn hashed(&self, reference: &Ref) -> Result<StoredObject<'s>, String> {
        let obj = self
            .src
            .object(reference)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "missing from the store".to_string())?;
        if Ref::of(&obj.payload) != *reference {
            return Err(format!(
                "stored bytes hash to {}, not to their address",
                Ref::of(&obj.payload)
            ));
        }
        Ok(obj)
    }

    /// Load an object the referring record says is a `semantic_id`, and check it hashes to its
    /// address. The kind is the record's word, not the stored row's: objects are deduplicated by
    /// content, first writer wins, so the same bytes written earlier as another kind (anyone's
    /// call arguments can equal another call's plan) keep that writer's semantic id. Such bytes
    /// must still read as `semantic_id`; the link then verifies with a note saying so.
    fn checked(&self, reference: &Ref, semantic_id: &str) -> Result<StoredObject<'s>, String> {
        let obj = self.hashed(reference)?;
        if obj.semantic_id != semantic_id {
            reads_as(&obj.payload, semantic_id).map_err(|e| {
                format!(
                    "semantic id is {}, expected {semantic_id}, and the bytes do not read as one: {e}",
                    obj.semantic_id
                )
            })?;
            self.notes.borrow_mut().push(format!(
                "{} was first stored as {} (objects are deduplicated by content); it reads as {semantic_id}, the kind its record gives it",
                reference.short(8),
                obj.semantic_id
            ));
        }
        Ok(obj)
    }

    /// The transition document at `transition_fn`, parsed (cached per verifier).
    fn transition(&self, transition_fn: &Ref) -> Result<Arc<Transition>, String> {
        let cached = self.transitions.borrow().get(transition_fn).cloned();
        let parsed = match cached {
            Some(parsed) => parsed,
            None => {
                let before = self.notes.borrow().len();
                let parsed = self
                    .checked(transition_fn, sid::TRANSITION)
                    .and_then(|o| {
                        Transition::from_slice(&o.payload)
                            .map(Arc::new)
                            .map_err(|e| format!("not a transition document: {e}"))
                    })
                    .map_err(|e| format!("transition {transition_fn}: {e}"))
                    .map(|t| (t, self.notes.borrow_mut().split_off(before).pop()));
                self.transitions
                    .borrow_mut()
                    .insert(*transition_fn, parsed.clone());
                parsed
            }
        };
        parsed.map(|(t, note)| {
            // Every entry of this tool carries the note, not only the first walked.
            self.notes.borrow_mut().extend(note);
            t
        })
    }

    /// Verify entry `index`.
    pub(crate) fn report(&self, index: u64, matched_by: String) -> Report {
        self.notes.take();
        let mut walk = Walk {
            links: Vec::new(),
            notes: &self.notes,
        };
        let entry = match self.src.entry(index) {
            Ok(Some(bytes)) => self.check_entry(index, &bytes),
            Ok(None) => Err("missing from the log".to_string()),
            Err(e) => Err(e.to_string()),
        };
        let entry = match entry {
            Ok((entry, detail)) => {
                walk.push("entry", Some(entry.entry_hash), detail);
                entry
            }
            Err(why) => {
                walk.push("entry", None, Err(why));
                return walk.into_report(index, matched_by);
            }
        };
        let writer = entry.header.written_by.as_str();
        if index == 0 || writer == log::GENESIS_WRITER {
            self.genesis(&entry, &mut walk);
        } else if writer.starts_with(log::COORDINATOR_PREFIX) {
            if writer == log::COORDINATOR_WRITER || writer == log::LEGACY_MCP_WRITER {
                self.invocation(&entry, true, &mut walk);
            } else {
                walk.push(
                    "record",
                    Some(entry.transition_ref),
                    Err(format!(
                        "writtenBy {writer} is not a writer of this coordinator"
                    )),
                );
                self.world_from_head(&entry, &mut walk);
            }
        } else {
            self.client_commit(&entry, &mut walk);
        }
        walk.into_report(index, matched_by)
    }

    /// The entry at `index` and its link's verdict. `Err` when the entry itself cannot be
    /// walked; a link that fails only because entry `index − 1` cannot be read is a broken
    /// link of an entry that is still walked, as the damage is that other row's.
    fn check_entry(
        &self,
        index: u64,
        bytes: &[u8],
    ) -> Result<(Entry, Result<String, String>), String> {
        // Strict parsing (no duplicate keys, no unknown fields) plus the recomputed hash below
        // cover every field; the bytes need not be re-serialised to be trusted.
        let entry = Entry::from_bytes(bytes).map_err(|e| format!("unreadable: {e}"))?;
        if entry.header.entry_index != index {
            let n = entry.header.entry_index;
            // A copy of another entry (a bad restore, a tamper) is named as one: the entry it
            // copies is intact, and its own walk says so.
            let copy = matches!(self.src.entry(n), Ok(Some(b)) if *b == *bytes);
            return Err(if copy {
                format!("this row holds a copy of entry {n} (its header says index {n} at position {index})")
            } else {
                format!("header says index {n} at position {index}")
            });
        }
        let recomputed = Entry::compute_hash(&entry.header, &entry.transition_ref)
            .map_err(|e| format!("the entry has no canonical form: {e}"))?;
        if recomputed != entry.entry_hash {
            return Err(format!(
                "entryHash {} does not match the recomputed {recomputed}",
                entry.entry_hash
            ));
        }
        // The next entry's link is checked against the store's index of entry hashes: a
        // damaged index would blame that entry, so this one's place in it is checked here.
        let mut copied = String::new();
        if !matches!(self.src.indexes(&recomputed, index), Ok(true)) {
            match self.copy_named_instead(&recomputed, index) {
                // The index names a copy of this entry in another row: that row is the
                // damage (its own walk names it), not this entry's hash column.
                Some(row) => {
                    copied = format!("; row {row} holds a copy of it, which the store's index of entry hashes finds first")
                }
                None => return Err(format!(
                    "the store's index of entry hashes does not name this entry under its recomputed hash {recomputed}: the log row's hash column is damaged"
                )),
            }
        }
        // Genesis has no entry before it: its rule is the 64 zeros, said as such.
        match index.checked_sub(1) {
            None if entry.header.prev_entry_hash != Ref::ZERO => {
                return Err(format!(
                    "prevEntryHash {} of entry 0 is not {}: entry 0 has no entry before it",
                    entry.header.prev_entry_hash,
                    Ref::ZERO
                ));
            }
            Some(before) => match self.src.links(&entry.header.prev_entry_hash, before) {
                Ok(true) => {}
                Ok(false) => {
                    return Err(format!(
                        "prevEntryHash {} is not the hash of entry {before}",
                        entry.header.prev_entry_hash
                    ))
                }
                Err(e) => {
                    let why = format!(
                        "prevEntryHash {} cannot be checked: entry {before} cannot be read: {e}",
                        entry.header.prev_entry_hash
                    );
                    return Ok((entry, Err(why)));
                }
            },
            None => {}
        }
        let pin = if self.interpreter.as_ref() == Ok(&entry.header.interpreter) {
            " (this build's interpreter)"
        } else {
            ""
        };
        let detail = format!(
            "#{index} writtenBy {} prev {} transitionFn {} interpreter {}{pin} (recomputed){copied}",
            entry.header.written_by,
            entry.header.prev_entry_hash.short(8),
            entry.header.transition_fn.short(8),
            entry.header.interpreter.short(8)
        );
        Ok((entry, Ok(detail)))
    }

    /// The row, other than `index`, that the source's index of entry hashes names under
    /// `hash` when that row holds an entry with this very hash (a copy of entry `index`);
    /// `None` when it names none, or a row that is no copy (the hash column is what is damaged).
    fn copy_named_instead(&self, hash: &Ref, index: u64) -> Option<u64> {
        let row = self.src.entry_index(hash).ok()??;
        if row == index {
            return None;
        }
        let bytes = self.src.entry(row).ok()??;
        let copy = Entry::from_bytes(&bytes).ok()?;
        (Entry::compute_hash(&copy.header, &copy.transition_ref).ok()? == *hash).then_some(row)
    }

    fn genesis(&self, entry: &Entry, walk: &mut Walk) {
        let res = if entry.header.entry_index != 0 {
            Err(format!(
                "writtenBy {} belongs to entry 0 only",
                log::GENESIS_WRITER
            ))
        } else if entry.header.written_by != log::GENESIS_WRITER {
            Err(format!(
                "entry 0 is the genesis, but it says writtenBy {}",
                entry.header.written_by
            ))
        } else {
            self.checked(&entry.transition_ref, sid::GENESIS)
                .and_then(|o| {
                    let expected =
                        canon::to_vec(&log::genesis_document()).map_err(|e| e.to_string())?;
                    if *o.payload != *expected {
                        return Err("genesis document differs from this build's".into());
                    }
                    Ok(format!("{} B genesis document", o.payload.len()))
                })
        };
        walk.push("output", Some(entry.transition_ref), res);
        let world = World {
            revision: entry.header.entry_index,
            state_root: entry.transition_ref,
            log_head: entry.entry_hash,
        };
        self.world(&world, walk);
    }

    /// A client's entry: an invocation when its record says so, otherwise opaque objects.
    fn client_commit(&self, entry: &Entry, walk: &mut Walk) {
        let claim = self.hashed(&entry.transition_ref).map(|o| {
            serde_json::from_slice::<Claim<'_>>(&o.payload)
                .ok()
                .and_then(|c| c.invocation_id.map(|id| id.into_owned()))
        });
        match claim {
            Ok(Some(id)) => self.invocation(entry, coordinator_namespace(&id), walk),
            Ok(None) => self.opaque_commit(entry, walk),
            Err(why) => {
                walk.push("record", Some(entry.transition_ref), Err(why));
                self.world_from_head(entry, walk);
            }
        }
    }

    /// The full walk of an invocation; `coordinator`: also check it against what only the
    /// coordinator writes.
    fn invocation(&self, entry: &Entry, coordinator: bool, walk: &mut Walk) {
        let record_obj = self.checked(&entry.transition_ref, sid::INVOCATION_RECORD);
        let record = match record_obj
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|o| record_fields(entry, o))
        {
            Ok(v) => {
                walk.push(
                    "record",
                    Some(entry.transition_ref),
                    Ok(record_text(entry, &v)),
                );
                v
            }
            Err(why) => {
                walk.push("record", Some(entry.transition_ref), Err(why));
                self.world_from_head(entry, walk);
                return;
            }
        };
        // The effect records, read once for the journal, the effect and the plugin links.
        let effects = self.effect_rows(&record);
        let output_ref = ref_field(&record.output, "output");
        // The world that selects this entry, serialised once for the journal and world links.
        let world = output_ref
            .clone()
            .and_then(|out| selected_world(entry, out));

        // What only the coordinator writes.
        if coordinator {
            let res = world.as_ref().map_err(Clone::clone).and_then(|(r, _, w)| {
                self.coordinator_state(entry, &record, &effects, w.state_root, *r)
            });
            walk.push("journal", None, res);
        }

        let input = self.input_link(&record, walk);
        let (plan_ref, plan) = self.plan_link(&record, walk);
        let planned: Vec<Value> = plan
            .as_ref()
            .ok()
            .and_then(|v| v["effects"].as_array().cloned())
            .unwrap_or_default();

        // Replay: the interpreter recomputes the plan from the transition and the input.
        let replay = match (&plan_ref, &input) {
            (Ok(p), Ok(i)) => self.replay(entry, &record, &i.payload, p),
            _ => Err("needs a readable input and plan".into()),
        };
        walk.push("replay", plan_ref.clone().ok(), replay);
        if plan.is_ok() && planned.len() != effects.len() {
            walk.push(
                "plan",
                plan_ref.clone().ok(),
                Err(format!(
                    "plan has {} effect(s) but the record lists {}",
                    planned.len(),
                    effects.len()
                )),
            );
        }

        // A client's effect records are its word: nothing the coordinator wrote says they ran.
        let client = !entry.header.written_by.starts_with(log::COORDINATOR_PREFIX);
        let results = self.effect_links(&effects, &planned, client, walk);

        // Output, and the world that selects it.
        match (&output_ref, &world) {
            (Ok(out), Ok((reference, bytes, world))) => {
                let res = self.checked(out, sid::INVOCATION_OUTPUT).and_then(|o| {
                    let made = Made {
                        plan_ref: &plan_ref,
                        plan: &plan,
                        effects: &effects,
                        results: &results,
                    };
                    self.check_output(*out, &o.payload, &made)
                });
                walk.push("output", Some(*out), res);
                self.world_known(world, *reference, bytes, walk);
            }
            (Err(e), _) | (_, Err(e)) => {
                walk.push("output", None, Err(e.clone()));
                self.world_from_head(entry, walk);
            }
        }
    }

    /// Each effect record the invocation record lists, read and parsed.
    fn effect_rows(&self, record: &RecordFields<'_>) -> Vec<EffectRow> {
        match &record.effects {
            Some(list) => list
                .iter()
                .map(|s| match s.parse::<Ref>() {
                    Ok(r) => EffectRow {
                        reference: Some(r),
                        record: self.effect_record(&r),
                        notes: self.notes.take(),
                    },
                    Err(e) => EffectRow {
                        reference: None,
                        record: Err(e.to_string()),
                        notes: Vec::new(),
                    },
                })
                .collect(),
            None => vec![EffectRow {
                reference: None,
                record: Err("effects is not a list".into()),
                notes: Vec::new(),
            }],
        }
    }

    /// The input link: the stored input, its first 120 characters shown.
    fn input_link(
        &self,
        record: &RecordFields<'_>,
        walk: &mut Walk,
    ) -> Result<StoredObject<'s>, String> {
        let input_ref = ref_field(&record.input, "input");
        let input = input_ref
            .clone()
            .and_then(|i| self.checked(&i, sid::INVOCATION_INPUT));
        match (&input_ref, &input) {
            (Ok(i), Ok(o)) => walk.push(
                "input",
                Some(*i),
                Ok(String::from_utf8_lossy(&o.payload)
                    .chars()
                    .take(120)
                    .collect()),
            ),
            (Ok(i), Err(e)) => walk.push("input", Some(*i), Err(e.clone())),
            (Err(e), _) => walk.push("input", None, Err(e.clone())),
        }
        input
    }

    /// The plan link: the stored plan, parsed, its effects listed.
    fn plan_link(
        &self,
        record: &RecordFields<'_>,
        walk: &mut Walk,
    ) -> (Result<Ref, String>, Result<Value, String>) {
        let plan_ref = ref_field(&record.plan, "plan");
        let plan = plan_ref.clone().and_then(|p| {
            let o = self.checked(&p, sid::EFFECT_PLAN)?;
            canon::parse(&o.payload).map_err(|e| format!("unreadable: {e}"))
        });
        match (&plan_ref, &plan) {
            (Ok(p), Ok(v)) => {
                let planned = v["effects"].as_array().map(Vec::as_slice).unwrap_or(&[]);
                let desc: Vec<String> = planned
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
                        planned.len(),
                        if desc.is_empty() { "" } else { ": " },
                        desc.join(", ")
                    )),
                );
            }
            (Ok(p), Err(e)) => walk.push("plan", Some(*p), Err(e.clone())),
            (Err(e), _) => walk.push("plan", None, Err(e.clone())),
        }
        (plan_ref, plan)
    }

    /// The effect links, and the plugin that ran (or declined) each; `claimed`: a client's
    /// entry, whose links say what it claims. Returns each effect's result object, read and
    /// hashed by its link (`None` where there is none or the link is broken), for the output
    /// link to compare.
    fn effect_links(
        &self,
        effects: &[EffectRow],
        planned: &[Value],
        claimed: bool,
        walk: &mut Walk,
    ) -> Vec<Option<StoredObject<'s>>> {
        let mut results = Vec::with_capacity(effects.len());
        for (i, row) in effects.iter().enumerate() {
            self.notes.borrow_mut().extend(row.notes.iter().cloned());
            let res = row
                .record
                .clone()
                .and_then(|rec| self.check_effect(&rec, planned.get(i), i));
            let (res, result) = match res {
                Ok((detail, result)) => (Ok(detail), result),
                Err(e) => (Err(e), None),
            };
            results.push(result);
            walk.push("effect", row.reference, res);
            if claimed {
                walk.claim_last();
            }
            if let Ok(
                rec @ EffectRecord {
                    handler: Some(h), ..
                },
            ) = &row.record
            {
                let did = if rec.allowed {
                    "ran"
                } else {
                    "declined (nothing ran)"
                };
                walk.push(
                    "plugin",
                    Some(h.library),
                    Ok(format!("{} {} {did} e{}", h.plugin, h.version, i + 1)),
                );
                if claimed {
                    walk.claim_last();
                }
            }
        }
        results
    }

    fn effect_record(&self, reference: &Ref) -> Result<EffectRecord, String> {
        let o = self.checked(reference, sid::EFFECT_RECORD)?;
        // The bytes hash to their address, so a typed parse is all that is left to check.
        let rec: EffectRecord =
            serde_json::from_slice(&o.payload).map_err(|e| format!("not an effect record: {e}"))?;
        if !rec.is_lawful() {
            return Err("record is not one of the three lawful shapes".into());
        }
        Ok(rec)
    }

    /// The task state and the journal of a coordinator's invocation must say that this entry
    /// is where it committed, with these objects and these effects.
    fn coordinator_state(
        &self,
        entry: &Entry,
        record: &RecordFields<'_>,
        effects: &[EffectRow],
        output: Ref,
        world_ref: Ref,
    ) -> Result<String, String> {
        let index = entry.header.entry_index;
        let invocation = invocation_of(entry, record)?;
        let id = invocation.id;
        let committed = Committed {
            index,
            output,
            world_ref,
        };
        self.task_state_agrees(&invocation, record, effects, &committed)?;
        let journaled = self.journaled(&invocation, effects)?;
        Ok(format!(
            "{id}: committed at #{index} (task state); {journaled}"
        ))
    }

    /// The coordinator's task state of the invocation names this entry, and agrees with it on
    /// everything it records.
    fn task_state_agrees(
        &self,
        invocation: &Invocation<'_>,
        record: &RecordFields<'_>,
        effects: &[EffectRow],
        committed: &Committed,
    ) -> Result<(), String> {
        let Invocation {
            id,
            surface,
            episode,
            task_id,
        } = *invocation;
        let state = self
            .src
            .task(episode, &format!("{surface}:{task_id}"))
            .map_err(|e| format!("task state of {id}: {e}"))?
            .map_or_else(|| Err(self.no_task_state(id)), Ok)?;
        let mut differ = Vec::new();
        if state.invocation_id != id {
            differ.push("invocation id");
        }
        if state.phase != TaskPhase::Committed {
            differ.push("phase");
        }
        if record.skill_id.as_deref() != Some(state.skill_id.as_str()) {
            differ.push("skill");
        }
        if ref_field(&record.input, "input").ok() != Some(state.input_ref) {
            differ.push("input");
        }
        if state.output_ref != Some(committed.output) {
            differ.push("output");
        }
        if state.world_ref != Some(committed.world_ref) {
            differ.push("world");
        }
        let listed: Vec<Option<Ref>> = effects.iter().map(|e| e.reference).collect();
        let recorded: Vec<Option<Ref>> = state.effect_records.iter().copied().map(Some).collect();
        if listed != recorded {
            differ.push("effects");
        }
        if state.entry_index != Some(committed.index) {
            return Err(format!(
                "the coordinator committed {id} at entry {}, not at this one",
                state
                    .entry_index
                    .map_or_else(|| "none".to_string(), |i| i.to_string())
            ));
        }
        if !differ.is_empty() {
            return Err(format!(
                "the task state of {id} disagrees with this entry on: {}",
                differ.join(", ")
            ));
        }
        Ok(())
    }

    /// Why a coordinator's invocation has no task state: the coordinator never committed it, or
    /// its row is there but names no invocation, so no lookup by id finds it.
    /// The source's rows are read once per verifier: a store with many such entries is read
    /// through once, not once per entry.
    fn no_task_state(&self, id: &str) -> String {
        let mut unnamed = self.unnamed.borrow_mut();
        let rows = match unnamed.get_or_insert_with(|| self.src.unnamed_invocation_rows()) {
            Ok(rows) => rows,
            Err(e) => {
                return format!(
                "no task state for {id} is found, and the invocation rows could not be read: {e}"
            )
            }
        };
        // The id, and then no character an id may hold: `…:r1` is not `…:r10`'s row (a row
        // goes on with its intent sequence, whose first byte is 0 for any sequence in use).
        let holds = |start: &[u8]| {
            start.starts_with(id.as_bytes())
                && start.get(id.len()).is_none_or(|b| {
                    !(b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':'))
                })
        };
        match rows.iter().find(|(_, _, start)| holds(start)).or(rows.first()) {
            None => {
                format!("no task state for {id}: the coordinator never committed this invocation")
            }
            Some((seq, why, start)) if holds(start) => format!(
                "the invocation row of {id} is damaged, so no lookup finds its task state: row {seq} of invocation_rows holds {id}, but {why}"
            ),
            Some((seq, why, _)) => format!(
                "no task state for {id} is found, but the invocation rows are damaged: row {seq} of invocation_rows names no invocation ({why}), and it may be {id}'s{}",
                match rows.len() {
                    1 => String::new(),
                    n => format!(" ({} more such row(s))", n - 1),
                }
            ),
        }
    }

    /// The journal holds an intent and outcome exactly for the one effect of the record that
    /// ran, or nothing when none ran.
    fn journaled(
        &self,
        invocation: &Invocation<'_>,
        effects: &[EffectRow],
    ) -> Result<String, String> {
        let id = invocation.id;
        let journal = self
            .src
            .journal(id)
            .map_err(|e| format!("journal of {id}: {e}"))?;
        let mut ran = Vec::new();
        for (i, row) in effects.iter().enumerate() {
            let rec = row
                .record
                .as_ref()
                .map_err(|e| format!("effect e{}: {e}", i + 1))?;
            if rec.allowed {
                ran.push((i, row.reference, rec));
            }
        }
        match (ran.as_slice(), journal) {
            ([], None) => Ok("nothing journaled (no effect ran)".to_string()),
            ([], Some(_)) => Err(format!(
                "the journal has an intent for {id}, but no effect of this record ran"
            )),
            ([(i, reference, rec)], Some(j)) => {
                journal_of_effect(invocation, i + 1, *reference, rec, &j)
            }
            ([(i, _, _)], None) => Err(format!(
                "effect e{} ran but the journal has no intent for {id}",
                i + 1
            )),
            (_, _) => Err(format!(
                "{} effects ran; an invocation journals one",
                ran.len()
            )),
        }
    }

    /// The stored plan must be what this build's interpreter plans for the stored input.
    fn replay(
        &self,
        entry: &Entry,
        record: &RecordFields<'_>,
        input: &[u8],
        plan_ref: &Ref,
    ) -> Result<String, String> {
        let ours = self.interpreter.as_ref().map_err(|e| {
            format!("this build's interpreter has no ref ({e}): no plan can be replayed")
        })?;
        if entry.header.interpreter != *ours {
            return Err(format!(
                "the entry names interpreter {}, this build's is {}: its plan cannot be replayed",
                entry.header.interpreter.short(8),
                ours.short(8)
            ));
        }
        let t = self.transition(&entry.header.transition_fn)?;
        if record.skill_id.as_deref() != Some(t.id.as_str()) {
            return Err(format!(
                "the record's skill {} is not the transition's id {}",
                record.skill_id.as_deref().unwrap_or("?"),
                t.id
            ));
        }
        let args = canon::parse(input).map_err(|e| format!("input is not JSON: {e}"))?;
        let replayed = t.plan_call(&args);
        let bytes = canon::to_vec(&replayed.to_value()).map_err(|e| e.to_string())?;
        let recomputed = Ref::of(&bytes);
        if recomputed != *plan_ref {
            return Err(format!(
                "the stored plan is not what {} plans for this input (recomputed {})",
                t.id,
                recomputed.short(8)
            ));
        }
        let what = match &replayed {
            Plan::Refused { .. } => "a refusal".to_string(),
            Plan::Effect { effect, .. } => {
                format!(
                    "{} {}@{} cost {}",
                    effect.id, effect.effect, effect.scope, effect.cost
                )
            }
        };
        Ok(format!(
            "recomputed from {} ({}) and the input by this build's interpreter: {what}",
            t.id,
            entry.header.transition_fn.short(8)
        ))
    }

    /// An effect record against the plan's effect `i` and its request; the link's detail, and
    /// the effect's result object when it has one.
    fn check_effect(
        &self,
        rec: &EffectRecord,
        planned: Option<&Value>,
        i: usize,
    ) -> Result<(String, Option<StoredObject<'s>>), String> {
        let req = self
            .checked(&rec.request_ref, sid::EFFECT_REQUEST)
            .map_err(|e| format!("request {}: {e}", rec.request_ref))?;
        let (effect, scope, cost, _, payload) = broker::decode_request(&req.payload)
            .ok_or_else(|| format!("request {} is not a broker request", rec.request_ref))?;
        if (effect, scope, cost) != (rec.effect.as_str(), rec.scope.as_str(), rec.cost) {
            return Err(format!(
                "request {} asks for {effect}@{scope} cost {cost}, not the record's effect",
                rec.request_ref
            ));
        }
        if let Some(p) = planned {
            let payload_planned = canon::to_vec(&p["payload"]).map_err(|e| e.to_string())?;
            if p["effect"] != rec.effect.as_str()
                || p["scope"] != rec.scope.as_str()
                || p["cost"] != rec.cost
                || payload_planned != payload
            {
                return Err(format!(
                    "e{} is not the effect the plan requested (effect, scope, cost or payload differ)",
                    i + 1
                ));
            }
        }
        let result = match rec.result_ref {
            Some(res) => Some(
                self.checked(&res, sid::EFFECT_RESULT)
                    .map_err(|e| format!("result {res}: {e}"))?,
            ),
            None => None,
        };
        let res_len = result.as_ref().map(|r| r.payload.len());
        let verdict = if rec.allowed {
            if rec.failed {
                "failed"
            } else {
                "allowed"
            }
        } else {
            rec.denial.as_str()
        };
        let detail = format!(
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
        );
        Ok((detail, result))
    }

    fn check_output(
        &self,
        output_ref: Ref,
        payload: &[u8],
        made: &Made<'_, 's>,
    ) -> Result<String, String> {
        let Made {
            plan_ref,
            plan,
            effects,
            results,
        } = *made;
        // The `world` block first, read without building the rest (the tool's output, often
        // the bulk of the bytes) into values.
        let v: OutputWorld<'_> =
            serde_json::from_slice(payload).map_err(|e| format!("unreadable: {e}"))?;
        let world = v.world.unwrap_or_default();
        if let Ok(p) = plan_ref {
            if world.plan.as_deref() != Some(p.to_string().as_str()) {
                return Err("the result's world.plan is not the record's plan".into());
            }
        }
        let listed: Vec<Option<&str>> = world.effects.iter().map(|e| e.record.as_deref()).collect();
        let recorded: Vec<String> = effects
            .iter()
            .filter_map(|e| e.reference.map(|r| r.to_string()))
            .collect();
        if listed.len() != recorded.len()
            || listed
                .iter()
                .zip(&recorded)
                .any(|(a, b)| *a != Some(b.as_str()))
        {
            return Err("the result's world.effects do not name the record's effects".into());
        }
        if let Some((n, result, bytes)) = handler_output(plan, effects, results) {
            body_is(output_ref, payload, n, result, bytes)?;
        }
        Ok(format!(
            "{} B = world.stateRoot; the result is these exact bytes",
            payload.len()
        ))
    }

    fn world(&self, world: &World, walk: &mut Walk) {
        match world.to_bytes() {
            Ok(bytes) => self.world_known(world, Ref::of(&bytes), &bytes, walk),
            Err(e) => walk.push(
                "world",
                None,
                Err(format!("the world has no canonical form: {e}")),
            ),
        }
    }

    /// The world link, for a world whose canonical bytes and ref are already known.
    fn world_known(&self, world: &World, reference: Ref, expected: &[u8], walk: &mut Walk) {
        let res = match self.src.world(&reference) {
            Ok(Some(bytes)) if *bytes == *expected => Ok(format!(
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

    /// The head's world, when it selects this entry.
    fn head_world(&self, index: u64) -> Option<(Ref, World)> {
        let head = self.src.head().ok()??;
        let bytes = self.src.world(&head).ok()??;
        let world = World::from_bytes(&bytes).ok()?;
        (world.revision == index).then_some((head, world))
    }

    /// When the record is unreadable, the world can still be checked if it is the head.
    fn world_from_head(&self, entry: &Entry, walk: &mut Walk) {
        if let Some((_, world)) = self.head_world(entry.header.entry_index) {
            self.world(&world, walk);
        }
    }

    /// A client commit of opaque objects: check what the log promises — the record and output
    /// exist and hash to their addresses, and a stored world selects them.
    fn opaque_commit(&self, entry: &Entry, walk: &mut Walk) {
        walk.push(
            "record",
            Some(entry.transition_ref),
            self.hashed(&entry.transition_ref).map(|o| {
                format!(
                    "client commit by {}: {} ({} B)",
                    entry.header.written_by,
                    o.semantic_id,
                    o.payload.len()
                )
            }),
        );
        let index = entry.header.entry_index;
        let world_ref = match self.src.world_at(index) {
            Ok(Some(w)) => Some(w),
            Ok(None) => self.head_world(index).map(|(r, _)| r),
            Err(e) => {
                walk.push("world", None, Err(e.to_string()));
                return;
            }
        };
        let Some(world_ref) = world_ref else {
            walk.push(
                "world",
                None,
                Err("no stored world selects this entry".into()),
            );
            return;
        };
        let world = self
            .src
            .world(&world_ref)
            .map_err(|e| e.to_string())
            .and_then(|b| b.ok_or_else(|| "missing".to_string()))
            .and_then(|b| {
                let w = World::from_bytes(&b).map_err(|e| e.to_string())?;
                if w.to_bytes().ok().as_deref() != Some(&b[..]) || Ref::of(&b) != world_ref {
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
                    self.hashed(&w.state_root).map(|o| {
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
}
