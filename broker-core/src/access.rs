//! Who may read what: the one read model behind every route that serves the store's content
//! (the REST reads, the log stream, online verification).
//!
//! # The model
//!
//! A [`Reader`] is either everyone (`serve --open-reads`, the reference behaviour), an
//! operator credential (reads everything), or an agent session, which reads as its episode.
//!
//! - **Public** to every reader: entry headers (`/v1/log/{i}`), worlds and the head, registry
//!   heads, and the objects whose stored semantic id is one of [`PUBLIC`]: transition
//!   documents, registry revisions, the plan interpreter's identity document and the genesis.
//! - **An episode's own**: every object the coordinator wrote for one of its calls: inputs,
//!   plans, effect requests, effect results, effect records, outputs and invocation records,
//!   including those of a call whose effect ran but was not committed.
//! - **An invocation's own rows**: the task state and journal rows of an invocation
//!   `<surface>:<episode>:<task>` (what online verification recomputes the journal link from)
//!   are that episode's.
//! - **Nobody else's**: another episode's object is answered exactly as an absent one, and
//!   objects committed through `POST /v1/commit` (which belong to no episode) are read by
//!   operators only, unless their semantic id is public.
//!
//! Objects are content-addressed and deduplicated: two episodes that send identical
//! arguments share one input object, whose provenance names only its first writer. So who may
//! read an object is not a property of the object. It is kept in the `readers` table, one
//! key per (episode, object), `episode \0 semanticId \0 ref`, written in the same transactions
//! that write the objects (the intent, the final commit, and the outcome of an unrecorded
//! call). The semantic id in the key makes "this episode's objects of one kind" a prefix scan
//! (`/v1/objects/by-semantic-id/…`), and clusters an episode's keys so one call's writes land
//! on few pages.
//!
//! A log entry is listed by `/v1/log?from&limit` when its reader may read the object its
//! `transitionRef` names (the invocation record, or the genesis document). Other entries are
//! skipped, not masked: items keep their `entryIndex`, so the gaps are visible, and the page
//! says where to continue (`next`). Their headers stay readable one by one at `/v1/log/{i}`,
//! so a chain can be followed through them.

use std::ops::Bound;

use crate::broker::EffectRecord;
use crate::canon;
use crate::log::{Entry, LogError};
use crate::object::{sid, ObjectView, Ref};
use crate::session::Session;
use crate::store::{ReadCtx, Store, StoreError, TxnExt, WriteCtx};
use crate::task::{TaskPhase, TaskState};

/// Semantic ids every reader may read.
pub const PUBLIC: [&str; 4] = [
    sid::TRANSITION,
    sid::TRANSITION_REGISTRY,
    sid::INTERPRETER,
    sid::GENESIS,
];

/// Most log positions one `/v1/log` page examines, whatever it finds there.
pub const MAX_LOG_SCAN: u64 = 5_000;

/// Who is reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reader {
    /// Reads are open (`serve --open-reads`): no credential, everything visible.
    Everyone,
    /// An operator credential: everything visible.
    Operator,
    /// An agent session: the public objects and its episode's own.
    Episode(String),
}

impl Reader {
    /// The reader a valid session reads as.
    pub fn of(session: &Session) -> Reader {
        if session.operator {
            Reader::Operator
        } else {
            Reader::Episode(session.episode.clone())
        }
    }

    /// True for readers that see every object and entry.
    pub fn sees_everything(&self) -> bool {
        matches!(self, Reader::Everyone | Reader::Operator)
    }
}

/// True when every reader may read objects of this semantic id.
pub fn is_public(semantic_id: &str) -> bool {
    PUBLIC.contains(&semantic_id)
}

fn key(episode: &str, semantic_id: &str, reference: &Ref) -> Vec<u8> {
    let mut k = Vec::with_capacity(episode.len() + semantic_id.len() + 34);
    k.extend_from_slice(episode.as_bytes());
    k.push(0);
    k.extend_from_slice(semantic_id.as_bytes());
    k.push(0);
    k.extend_from_slice(reference.as_bytes());
    k
}

/// May `reader` read this stored object?
pub fn may_read(
    r: &ReadCtx<'_>,
    reader: &Reader,
    object: &ObjectView<'_>,
) -> Result<bool, StoreError> {
    let episode = match reader {
        Reader::Everyone | Reader::Operator => return Ok(true),
        Reader::Episode(e) => e,
    };
    if is_public(object.semantic_id) {
        return Ok(true);
    }
    Ok(r.tables
        .readers
        .get(r.txn, &key(episode, object.semantic_id, &object.hash))
        .map_err(r.heed_err())?
        .is_some())
}

/// May `reader` read the task state and journal rows of `invocation_id`? They are the
/// episode's the id names (`<surface>:<episode>:<task>`); an id without one is nobody's.
pub fn may_read_invocation(reader: &Reader, invocation_id: &str) -> bool {
    match reader {
        Reader::Everyone | Reader::Operator => true,
        Reader::Episode(e) => crate::task::split_invocation_id(invocation_id)
            .is_some_and(|(_, episode, _)| episode == e),
    }
}

/// The object at `reference` when it exists and `reader` may read it. `None` for both an
/// absent object and another episode's: callers answer both alike.
pub fn object<'t>(
    r: &ReadCtx<'t>,
    reader: &Reader,
    reference: &Ref,
) -> Result<Option<ObjectView<'t>>, StoreError> {
    match r.object_view(reference)? {
        Some(o) if may_read(r, reader, &o)? => Ok(Some(o)),
        _ => Ok(None),
    }
}

/// May `reader` see `entry` in a log listing? (Every header is readable by index.)
pub fn may_list(r: &ReadCtx<'_>, reader: &Reader, entry: &Entry) -> Result<bool, StoreError> {
    if reader.sees_everything() {
        return Ok(true);
    }
    Ok(object(r, reader, &entry.transition_ref)?.is_some())
}

/// One page of `/v1/log?from&limit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogPage {
    /// Entries the reader may list, in index order, at most `limit`.
    pub items: Vec<Entry>,
    /// Where the next page starts: one past the last position examined.
    pub next: u64,
}

/// Up to `limit` entries from `from` that `reader` may list, examining at most `max_scan`
/// positions (the routes pass [`MAX_LOG_SCAN`]) and stopping at the end of the log.
pub fn log_page(
    r: &ReadCtx<'_>,
    reader: &Reader,
    from: u64,
    limit: usize,
    max_scan: u64,
) -> Result<LogPage, LogError> {
    let mut items = Vec::new();
    let mut next = from;
    for item in r.tables.log.range(r.txn, &(from..)).map_err(r.heed_err())? {
        let (idx, bytes) = item.map_err(r.heed_err())?;
        // The log has no holes; stop at one rather than skip it silently.
        if idx != next || items.len() >= limit || next - from >= max_scan {
            break;
        }
        next = idx + 1;
        let entry = Entry::from_bytes(bytes)?;
        if may_list(r, reader, &entry)? {
            items.push(entry);
        }
    }
    Ok(LogPage { items, next })
}

/// Up to `limit` objects with this semantic id that `reader` may read, in ref order, after
/// `after`. Public kinds (and every kind for readers that see everything) come from the
/// semantic-id index; an episode's private kinds come from its own readers keys, so the
/// cost follows the episode's size, not the store's.
pub fn by_semantic_id<'t>(
    r: &ReadCtx<'t>,
    reader: &Reader,
    semantic_id: &str,
    after: Option<Ref>,
    limit: usize,
) -> Result<Vec<ObjectView<'t>>, StoreError> {
    let (table, prefix) = match reader {
        Reader::Episode(e) if !is_public(semantic_id) => {
            let mut p = key(e, semantic_id, &Ref::ZERO);
            p.truncate(p.len() - 32);
            (r.tables.readers, p)
        }
        _ => {
            let mut p = semantic_id.as_bytes().to_vec();
            p.push(0);
            (r.tables.by_semantic_id, p)
        }
    };
    // Start right after `after` instead of walking the pages before it.
    let start = match after {
        Some(a) => {
            let mut k = prefix.clone();
            k.extend_from_slice(a.as_bytes());
            Bound::Excluded(k)
        }
        None => Bound::Included(prefix.clone()),
    };
    let bounds = (start.as_ref().map(Vec::as_slice), Bound::Unbounded);
    let mut out = Vec::new();
    for item in table.range(r.txn, &bounds).map_err(r.heed_err())? {
        let (k, _) = item.map_err(r.heed_err())?;
        let Some(rest) = k.strip_prefix(prefix.as_slice()) else {
            break;
        };
        let Some(reference) = Ref::from_slice(rest) else {
            continue;
        };
        // Checked again through the one rule: the key's kind must be the stored kind.
        if let Some(o) = object(r, reader, &reference)? {
            if o.semantic_id == semantic_id {
                out.push(o);
            }
        }
        if out.len() >= limit {
            break;
        }
    }
    Ok(out)
}

/// Let `episode` read these objects (each already written in this transaction or before).
/// Public objects and keys already present cost no write.
pub(crate) fn grant(
    w: &mut WriteCtx<'_, '_>,
    episode: &str,
    refs: impl IntoIterator<Item = Ref>,
) -> Result<(), StoreError> {
    let e = w.heed_err();
    for reference in refs {
        // The stored kind, not the caller's: the first writer's semantic id wins.
        let Some(o) = w.object(&reference)? else {
            continue;
        };
        if is_public(&o.semantic_id) {
            continue;
        }
        let k = key(episode, &o.semantic_id, &reference);
        if w.tables.readers.get(w.txn, &k).map_err(e)?.is_none() {
            w.tables.readers.put(w.txn, &k, &[]).map_err(e)?;
        }
    }
    Ok(())
}

/// The effect records' request and result refs, for [`grant`].
pub(crate) fn effect_refs(w: &WriteCtx<'_, '_>, record: &Ref) -> Result<Vec<Ref>, StoreError> {
    let Some(o) = w.object(record)? else {
        return Ok(Vec::new());
    };
    let Some(rec) = canon::parse(&o.payload)
        .ok()
        .and_then(|v| serde_json::from_value::<EffectRecord>(v).ok())
    else {
        return Ok(Vec::new());
    };
    Ok(std::iter::once(rec.request_ref)
        .chain(rec.result_ref)
        .collect())
}

const META_KEY: &str = "readers_index";
const BACKFILL_CHUNK: u64 = 2_000;

/// Build the readers index of a store written before it existed, once: every coordinator
/// entry's objects become readable by the episode its invocation record names, and so do the
/// objects of calls that were journaled but not committed.
pub(crate) fn ensure_readers_index(store: &Store) -> Result<(), StoreError> {
    let done = store.read(|r| -> Result<bool, StoreError> {
        Ok(r.tables
            .meta
            .get(r.txn, META_KEY)
            .map_err(r.heed_err())?
            .is_some())
    })?;
    if done {
        return Ok(());
    }
    let mut from = 0;
    while let Some(next) = store.write(move |w| backfill_entries(w, from))? {
        from = next;
    }
    store.write(|w| -> Result<(), StoreError> {
        backfill_tasks(w)?;
        w.tables
            .meta
            .put(w.txn, META_KEY, b"1")
            .map_err(w.heed_err())
    })
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct RecordRefs {
    episode_id: String,
    input: Ref,
    output: Ref,
    plan: Ref,
    #[serde(default)]
    effects: Vec<Ref>,
}

/// Index the entries `[from, from + BACKFILL_CHUNK)`; `Some(next)` while entries remain.
fn backfill_entries(w: &mut WriteCtx<'_, '_>, from: u64) -> Result<Option<u64>, StoreError> {
    let e = w.heed_err();
    let mut records = Vec::new();
    let mut next = None;
    for item in w.tables.log.range(w.txn, &(from..)).map_err(e)? {
        let (idx, bytes) = item.map_err(e)?;
        if idx >= from + BACKFILL_CHUNK {
            next = Some(idx);
            break;
        }
        if let Ok(entry) = Entry::from_bytes(bytes) {
            records.push(entry.transition_ref);
        }
    }
    for record in records {
        let Some(o) = w.object(&record)? else {
            continue;
        };
        if o.semantic_id != sid::INVOCATION_RECORD {
            continue;
        }
        let Some(refs) = canon::parse(&o.payload)
            .ok()
            .and_then(|v| serde_json::from_value::<RecordRefs>(v).ok())
        else {
            continue;
        };
        let mut all = vec![record, refs.input, refs.output, refs.plan];
        for effect in &refs.effects {
            all.push(*effect);
            all.extend(effect_refs(w, effect)?);
        }
        grant(w, &refs.episode_id, all)?;
    }
    Ok(next)
}

/// Index the calls that never reached the log: journaled (pending) or unrecorded.
fn backfill_tasks(w: &mut WriteCtx<'_, '_>) -> Result<(), StoreError> {
    let e = w.heed_err();
    let mut open = Vec::new();
    for item in w.tables.tasks.iter(w.txn).map_err(e)? {
        let (k, bytes) = item.map_err(e)?;
        let Some(episode) = k.split(|b| *b == 0).next() else {
            continue;
        };
        let Some(state) = canon::parse(bytes)
            .ok()
            .and_then(|v| serde_json::from_value::<TaskState>(v).ok())
        else {
            continue;
        };
        if state.phase != TaskPhase::Committed {
            open.push((String::from_utf8_lossy(episode).into_owned(), state));
        }
    }
    for (episode, state) in open {
        let mut all = vec![state.input_ref];
        if let Some(j) = crate::journal::state_in(w, &state.invocation_id)
            .map_err(|e| StoreError::Corrupt(e.to_string()))?
        {
            all.push(j.intent.request_ref);
        }
        for record in &state.effect_records {
            all.push(*record);
            all.extend(effect_refs(w, record)?);
        }
        grant(w, &episode, all)?;
    }
    Ok(())
}
