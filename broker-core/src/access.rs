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
//! - **An invocation's own rows**: the invocation row, the resolution of its intent and the
//!   journal rows of an invocation `<surface>:<episode>:<task>` (what online verification
//!   recomputes the journal link from) are that episode's.
//! - **Nobody else's**: another episode's object is answered exactly as an absent one, and
//!   objects committed through `POST /v1/commit` (which belong to no episode) are read by
//!   operators only, unless their semantic id is public.
//!
//! Objects are content-addressed and deduplicated: two episodes that send identical
//! arguments share one input object, whose provenance names only its first writer. So who may
//! read an object is not a property of the object. It is kept in the `readers` table, one
//! key per (episode, object), `episode \0 object sequence`, written in the same transactions
//! that write the objects (the intent, the final commit, and the outcome of an unrecorded
//! call). The sequence is the object's place in the store's arrival order, so an episode's
//! keys grow at the end of its range: the keys one operation writes are adjacent, on the one
//! page at the tail of its episode, instead of one randomly placed leaf per object. Listing an
//! episode's objects of one kind (`/v1/objects/by-semantic-id/…`) walks that episode's keys
//! in arrival order and keeps those of the kind, so its cost follows the episode's size, not
//! the store's.
//!
//! A log entry is listed by `/v1/log?from&limit` when its reader may read the object its
//! `transitionRef` names (the invocation record, or the genesis document). Other entries are
//! skipped, not masked: items keep their `entryIndex`, so the gaps are visible, and the page
//! says where to continue (`next`). Their headers stay readable one by one at `/v1/log/{i}`,
//! so a chain can be followed through them.

use std::ops::Bound;

use crate::log::{self, Entry, LogError};
use crate::object::{sid, ObjectView, Ref};
use crate::schema::READERS;
use crate::session::Session;
use crate::storage::{ReadCtx, StoreError, WriteCtx};

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

/// The prefix of an episode's keys: `episode \0`. Episode names hold no NUL, and every key
/// has exactly 8 bytes after it, so no episode's range holds another's keys.
fn prefix(episode: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(episode.len() + 9);
    k.extend_from_slice(episode.as_bytes());
    k.push(0);
    k
}

/// The key that lets `episode` read the object stored at sequence `seq`.
pub(crate) fn key(episode: &str, seq: u64) -> Vec<u8> {
    let mut k = prefix(episode);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// Has `episode` a key for the object at `seq`?
fn granted(r: &ReadCtx<'_>, episode: &str, seq: u64) -> Result<bool, StoreError> {
    Ok(READERS.get(r, &key(episode, seq))?.is_some())
}

/// May `reader` read the object stored at `seq`?
fn may_read_at(
    r: &ReadCtx<'_>,
    reader: &Reader,
    seq: u64,
    object: &ObjectView<'_>,
) -> Result<bool, StoreError> {
    match reader {
        Reader::Everyone | Reader::Operator => Ok(true),
        _ if is_public(object.semantic_id) => Ok(true),
        Reader::Episode(e) => granted(r, e, seq),
    }
}

/// May `reader` read this stored object?
pub fn may_read(
    r: &ReadCtx<'_>,
    reader: &Reader,
    object: &ObjectView<'_>,
) -> Result<bool, StoreError> {
    if reader.sees_everything() || is_public(object.semantic_id) {
        return Ok(true);
    }
    match r.sequenced(&object.hash)? {
        Some((seq, _)) => may_read_at(r, reader, seq, object),
        None => Ok(false),
    }
}

/// May `reader` read the stored rows of `invocation_id` (its invocation row, its intent's
/// resolution and its journal rows)? They are the episode's the id names
/// (`<surface>:<episode>:<task>`); an id without one is nobody's.
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
    match r.sequenced(reference)? {
        Some((seq, o)) if may_read_at(r, reader, seq, &o)? => Ok(Some(o)),
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
    for entry in log::entries(r, from)? {
        let (idx, entry) = entry?;
        // The log has no holes; stop at one rather than skip it silently.
        if idx != next || items.len() >= limit || next - from >= max_scan {
            break;
        }
        next = idx + 1;
        let entry = Entry::from_bytes(entry)?;
        if may_list(r, reader, &entry)? {
            items.push(entry);
        }
    }
    Ok(LogPage { items, next })
}

/// Up to `limit` objects with this semantic id that `reader` may read, in the order the store
/// first stored them, after the object `after`. Public kinds (and every kind for readers that
/// see everything) come from the semantic-id index; an episode's private kinds from its own
/// readers keys, so the cost follows the episode's size, not the store's.
///
/// `None` when `after` is not an object of this kind that `reader` may read: another
/// episode's object is answered exactly as an unknown ref (no existence oracle).
pub fn by_semantic_id<'t>(
    r: &ReadCtx<'t>,
    reader: &Reader,
    semantic_id: &str,
    after: Option<Ref>,
    limit: usize,
) -> Result<Option<Vec<ObjectView<'t>>>, StoreError> {
    let episode = match reader {
        Reader::Episode(e) if !is_public(semantic_id) => e,
        _ => {
            let Some(objects) = r.semantic_id_objects(semantic_id, after.as_ref())? else {
                return Ok(None);
            };
            return objects.take(limit).collect::<Result<_, _>>().map(Some);
        }
    };
    let start = match after {
        None => 0,
        Some(a) => match r.sequenced(&a)? {
            Some((seq, o)) if o.semantic_id == semantic_id && granted(r, episode, seq)? => seq + 1,
            _ => return Ok(None),
        },
    };
    let own = prefix(episode);
    let bounds = (
        Bound::Included(key(episode, start)),
        Bound::Included(key(episode, u64::MAX)),
    );
    let bounds = (
        bounds.0.as_ref().map(Vec::as_slice),
        bounds.1.as_ref().map(Vec::as_slice),
    );
    let mut out = Vec::new();
    for item in READERS.range(r, &bounds)? {
        if out.len() >= limit {
            break;
        }
        let (k, _) = item?;
        let Some(seq) = k
            .strip_prefix(own.as_slice())
            .and_then(|s| <[u8; 8]>::try_from(s).ok())
            .map(u64::from_be_bytes)
        else {
            continue;
        };
        // The stored kind decides, as for every read.
        if let Some(o) = r.object_at(seq)? {
            if o.semantic_id == semantic_id {
                out.push(o);
            }
        }
    }
    Ok(Some(out))
}

/// Let `episode` read these objects (each already written in this transaction or before).
/// Public objects and keys already present cost no write.
pub(crate) fn grant(
    w: &mut WriteCtx<'_, '_>,
    episode: &str,
    refs: impl IntoIterator<Item = Ref>,
) -> Result<(), StoreError> {
    for reference in refs {
        // The stored kind, not the caller's: the first writer's semantic id wins.
        let seq = match w.reader().sequenced(&reference)? {
            Some((seq, o)) if !is_public(o.semantic_id) => seq,
            _ => continue,
        };
        let k = key(episode, seq);
        if READERS.get(&w.reader(), &k)?.is_none() {
            READERS.put(w, &k, &[])?;
        }
    }
    Ok(())
}
