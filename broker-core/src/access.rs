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
//!   Bytes stored first as a private kind (an agent's arguments) and published afterwards as
//!   a public one are public too, read as the kind published: the store keeps the first
//!   writer's kind, so the publication leaves a grant to every reader (`published`).
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
//! the store's; and since an episode's objects lie among every other episode's, one page
//! examines at most [`MAX_OBJECT_SCAN`] of them, whatever it finds, and says where the next
//! one goes on ([`ObjectPage::next`]).
//!
//! Because the keys follow the store's first arrival, not the order the episode obtained its
//! objects, a grant of bytes another episode stored earlier lands inside the episode's range,
//! before any cursor it holds: a listing continued from that cursor does not show the object,
//! and one from the start does (`docs/http-api.md`, by-semantic-id). Keying grants by the
//! episode's own order would change the `readers` schema and is not done.
//!
//! The tail of each episode's range is still a page of its own, so a group commit of calls
//! from many episodes wrote one such page per call. New grants therefore wait in
//! `readers_tail`, keyed `object sequence ‖ episode`, where the grants of a group commit's new
//! objects are adjacent; when it holds [`READERS_MERGE_AT`] grants, the operation that reached
//! that moves them all into `readers` in its key order (each episode's on one or two pages) and
//! empties the tail, in the same transaction. A grant is found in either table, and a listing
//! merges the episode's keys of both in sequence order; the tail holds few enough grants that
//! a listing reads all of its own (every episode's shares one short B-tree).
//!
//! A log entry is listed by `/v1/log?from&limit` to an agent when it is a call of its episode
//! (the episode its invocation record names, read from the record whatever kind its bytes were
//! first stored as), or, for an entry that is not a call, when the object its `transitionRef`
//! names is of a public kind as the agent reads it (the genesis document). Other entries are
//! skipped, not masked: items keep their `entryIndex`, so the gaps are visible, and the page
//! says where to continue (`next`). Their headers stay readable one by one at `/v1/log/{i}`,
//! so a chain can be followed through them. A row that no longer decodes is named in the
//! page's `damaged` to every reader, like a header, rather than failing the page.

use std::ops::Bound;

use crate::log::{self, Entry, LogError};
use crate::object::{sid, Object, ObjectView, Ref};
use crate::schema::{ref_key, OBJECT, READERS, READERS_TAIL};
use crate::session::Session;
use crate::storage::{ReadCtx, StoreError, WriteCtx};

/// Semantic ids every reader may read.
pub const PUBLIC: [&str; 5] = [
    sid::TRANSITION,
    sid::TRANSITION_REGISTRY,
    sid::TRANSITION_REGISTRY_V2,
    sid::INTERPRETER,
    sid::GENESIS,
];

/// The grantee of bytes a publisher stored as a public kind after some episode had stored
/// them first as a private one (its arguments): every reader reads them, as the kind published
/// ([`published`]). Not an episode: episode names hold no `:`.
const PUBLISHED: &str = "world:published";

/// Grants that wait in `readers_tail` before they are merged into `readers`: a merge puts each
/// episode's grants on the tail page of its range, so the more wait, the fewer pages each costs;
/// a listing reads every waiting grant after its start, so the fewer wait, the cheaper it is.
pub const READERS_MERGE_AT: u64 = 4_096;

/// Most log positions one `/v1/log` page examines, whatever it finds there.
pub const MAX_LOG_SCAN: u64 = 5_000;

/// Most of its own objects one page of an episode's private kind
/// (`/v1/objects/by-semantic-id/…`) examines, whatever their kinds: without it, a page of a
/// kind the episode holds few of read the episode's every grant, and the object of each,
/// which lie across most of the store. A page that stops here says where to go on
/// ([`ObjectPage::next`]).
pub const MAX_OBJECT_SCAN: usize = 5_000;

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
fn prefix(episode: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(episode.len() + 9);
    append_prefix(&mut k, episode);
    k
}

/// [`prefix`] appended to `k`.
fn append_prefix(k: &mut Vec<u8>, episode: &[u8]) {
    k.extend_from_slice(episode);
    k.push(0);
}

/// The key that lets `episode` read the object stored at sequence `seq`.
pub(crate) fn key(episode: &str, seq: u64) -> Vec<u8> {
    key_of(episode.as_bytes(), seq)
}

fn key_of(episode: &[u8], seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(episode.len() + 9);
    append_key_of(&mut k, episode, seq);
    k
}

/// [`key_of`] appended to `k`: the episode's [`prefix`], then the sequence.
fn append_key_of(k: &mut Vec<u8>, episode: &[u8], seq: u64) {
    append_prefix(k, episode);
    k.extend_from_slice(&seq.to_be_bytes());
}

/// The `readers_tail` key of the same grant: the sequence first, so that the grants of new
/// objects go to the end of the table, whichever episode they are for.
fn tail_key(episode: &str, seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + episode.len());
    write_tail_key(&mut k, episode, seq);
    k
}

/// [`tail_key`] into `k`, which is cleared first: one buffer serves an operation's grants.
fn write_tail_key(k: &mut Vec<u8>, episode: &str, seq: u64) {
    k.clear();
    k.extend_from_slice(&seq.to_be_bytes());
    k.extend_from_slice(episode.as_bytes());
}

/// `(episode, sequence)` of a `readers` key.
fn split_key(k: &[u8]) -> Option<(&[u8], u64)> {
    let (head, seq) = k.split_last_chunk::<8>()?;
    let episode = head.strip_suffix(&[0])?;
    Some((episode, u64::from_be_bytes(*seq)))
}

/// Call `each` with every grant in the store, `(episode, object sequence)`, merged into
/// `readers` or waiting in `readers_tail`: each table in its key order.
pub(crate) fn for_each_grant(
    r: &ReadCtx<'_>,
    mut each: impl FnMut(&[u8], u64),
) -> Result<(), StoreError> {
    let damaged = |table: &str, k: &[u8]| {
        StoreError::Corrupt(format!("{table} holds a damaged key of {} bytes", k.len()))
    };
    for item in READERS.iter(r)? {
        let (k, _) = item?;
        let (episode, seq) = split_key(k).ok_or_else(|| damaged("readers", k))?;
        if episode != PUBLISHED.as_bytes() {
            each(episode, seq);
        }
    }
    for item in READERS_TAIL.iter(r)? {
        let (k, _) = item?;
        let (seq, episode) = split_tail_key(k).ok_or_else(|| damaged("readers_tail", k))?;
        if episode != PUBLISHED.as_bytes() {
            each(episode, seq);
        }
    }
    Ok(())
}

/// What [`audit`] found: how many grants it read, and what is wrong with any of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GrantAudit {
    pub grants: u64,
    pub findings: Vec<String>,
}

/// Every read grant, merged or waiting (`worldd doctor`): its key must decode, the object
/// sequence it names must hold an object, and its value must be empty or a header that
/// decodes. A grant that fails would make an episode's own object read as another's (absent),
/// or make reading it fail. One object lookup per grant.
pub fn audit(r: &ReadCtx<'_>) -> Result<GrantAudit, StoreError> {
    let mut out = GrantAudit::default();
    let mut check = |table: &str, key: &[u8], grant: Option<(&[u8], u64)>, header: &[u8]| {
        out.grants += 1;
        let Some((episode, seq)) = grant else {
            out.findings.push(format!(
                "{table} holds a key of {} byte(s) that names no episode and object",
                key.len()
            ));
            return Ok(());
        };
        let episode = String::from_utf8_lossy(episode);
        match r.object_at(seq) {
            Ok(Some(o)) => {
                if !header.is_empty() && o.with_header(header).is_none() {
                    out.findings.push(format!(
                        "the read grant of episode {episode:?} for object {} (row {seq}, in {table}) has a damaged header of {} byte(s)",
                        o.hash,
                        header.len()
                    ));
                }
            }
            Ok(None) => out.findings.push(format!(
                "the read grant of episode {episode:?} (in {table}) names object row {seq}, which the store does not hold"
            )),
            Err(StoreError::Corrupt(why)) => out.findings.push(format!(
                "the read grant of episode {episode:?} (in {table}) names object row {seq}: {why}"
            )),
            Err(e) => return Err(e),
        }
        Ok(())
    };
    for item in READERS.iter(r)? {
        let (k, header) = item?;
        check("readers", k, split_key(k), header)?;
    }
    for item in READERS_TAIL.iter(r)? {
        let (k, header) = item?;
        let grant = split_tail_key(k).map(|(seq, episode)| (episode, seq));
        check("readers_tail", k, grant, header)?;
    }
    Ok(out)
}

/// `(sequence, episode)` of a `readers_tail` key.
fn split_tail_key(k: &[u8]) -> Option<(u64, &[u8])> {
    let (seq, episode) = k.split_first_chunk::<8>()?;
    Some((u64::from_be_bytes(*seq), episode))
}

/// `episode`'s grant of the object at `seq`, waiting or merged: its value is empty, or the
/// header the episode stored those bytes under where the stored object says otherwise
/// ([`grant`]).
fn grant_of<'t>(r: &ReadCtx<'t>, episode: &str, seq: u64) -> Result<Option<&'t [u8]>, StoreError> {
    match READERS_TAIL.get(r, &tail_key(episode, seq))? {
        Some(header) => Ok(Some(header)),
        None => READERS.get(r, &key(episode, seq)),
    }
}

/// The object at `seq` as a grant of it shows it: under the grant's own header, if it has one.
fn as_granted<'t>(
    seq: u64,
    object: ObjectView<'t>,
    header: &'t [u8],
) -> Result<ObjectView<'t>, StoreError> {
    if header.is_empty() {
        return Ok(object);
    }
    let hash = object.hash;
    object.with_header(header).ok_or_else(|| {
        StoreError::Corrupt(format!(
            "the read grant of object {hash} (row {seq}) is damaged"
        ))
    })
}

/// The object stored at `seq` as `reader` sees it, or `None` when it may not read it. An
/// episode sees the bytes as the kind it stored them as, whoever stored them first; bytes it
/// did not store but a publisher published are public whatever kind they were stored as first,
/// and read as the kind published.
fn seen_at<'t>(
    r: &ReadCtx<'t>,
    reader: &Reader,
    seq: u64,
    object: ObjectView<'t>,
) -> Result<Option<ObjectView<'t>>, StoreError> {
    match reader {
        Reader::Everyone | Reader::Operator => Ok(Some(object)),
        _ if is_public(object.semantic_id) => Ok(Some(object)),
        Reader::Episode(e) => match grant_of(r, e, seq)? {
            Some(header) => as_granted(seq, object, header).map(Some),
            None => match grant_of(r, PUBLISHED, seq)? {
                Some(header) => as_granted(seq, object, header).map(Some),
                None => Ok(None),
            },
        },
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
        Some((seq, stored)) => Ok(seen_at(r, reader, seq, stored)?.is_some()),
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

/// The object at `reference` when it exists and `reader` may read it, as it sees it. `None`
/// for both an absent object and another episode's: callers answer both alike.
///
/// Objects are deduplicated by content, so the bytes an episode sent may have been stored
/// first by another episode as another kind (its plan, its output). The episode is shown the
/// kind and provenance it stored them under, never the first writer's: otherwise sending a
/// guess of another episode's bytes and reading them back would say whether that episode
/// made them.
pub fn object<'t>(
    r: &ReadCtx<'t>,
    reader: &Reader,
    reference: &Ref,
) -> Result<Option<ObjectView<'t>>, StoreError> {
    match r.sequenced(reference)? {
        Some((seq, o)) => seen_at(r, reader, seq, o),
        None => Ok(None),
    }
}

/// The episode an invocation record names.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct RecordEpisode<'a> {
    #[serde(borrow)]
    episode_id: std::borrow::Cow<'a, str>,
}

/// May `reader` see `entry` in a log listing? (Every header is readable by index.)
///
/// A coordinator's entry is a call of the episode its invocation record names. That is read
/// from the record, not from who may read its bytes: objects are deduplicated by content, so
/// an agent that sent another episode's predictable record as its own arguments first holds a
/// grant of those bytes, and listing by grant showed it that episode's call.
pub fn may_list(r: &ReadCtx<'_>, reader: &Reader, entry: &Entry) -> Result<bool, StoreError> {
    let episode = match reader {
        Reader::Everyone | Reader::Operator => return Ok(true),
        Reader::Episode(e) => e,
    };
    if entry.header.written_by.starts_with(log::COORDINATOR_PREFIX) {
        return Ok(r.object_view(&entry.transition_ref)?.is_some_and(|o| {
            serde_json::from_slice::<RecordEpisode<'_>>(o.payload)
                .is_ok_and(|rec| rec.episode_id == episode.as_str())
        }));
    }
    // Not a call (the genesis, a client-built commit): what an operator commits is the
    // operators' to read, so an agent lists it only when its record is of a public kind. An
    // agent may read a record's bytes because it stored them as its own: that does not make
    // the operator's entry its.
    Ok(object(r, reader, &entry.transition_ref)?.is_some_and(|o| is_public(o.semantic_id)))
}

/// One page of `/v1/log?from&limit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogPage {
    /// Entries the reader may list, in index order, at most `limit` with `damaged`.
    pub items: Vec<Entry>,
    /// Where the next page starts: one past the last position examined.
    pub next: u64,
    /// Positions examined whose entry no longer decodes, in index order. Named to every
    /// reader (headers are public by index) so that one damaged row does not fail every page
    /// that spans it, and a client pages on past it.
    pub damaged: Vec<DamagedRow>,
}

/// A log row whose entry no longer decodes: where, and what serde or the canonical-JSON
/// parser said of it (what `GET /v1/log/{index}` says after `log entry N is damaged: `).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedRow {
    pub index: u64,
    pub cause: String,
}

/// Up to `limit` entries from `from` that `reader` may list, examining at most `max_scan`
/// positions (the routes pass [`MAX_LOG_SCAN`]) and stopping at the end of the log. A row
/// whose entry does not decode is put in `damaged` instead and counts towards `limit`, so a
/// page's answer stays bounded however many rows are damaged.
pub fn log_page(
    r: &ReadCtx<'_>,
    reader: &Reader,
    from: u64,
    limit: usize,
    max_scan: u64,
) -> Result<LogPage, LogError> {
    let mut items = Vec::new();
    let mut damaged = Vec::new();
    let mut next = from;
    for entry in log::entries(r, from)? {
        if items.len() + damaged.len() >= limit || next - from >= max_scan {
            break;
        }
        let (idx, entry) = match entry {
            Ok(row) => row,
            // A row whose own framing does not decode: the log has no holes, so it is the next
            // position, and the range has stepped past it.
            Err(StoreError::Corrupt(cause)) => {
                damaged.push(DamagedRow { index: next, cause });
                next += 1;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        // The log has no holes; stop at one rather than skip it silently.
        if idx != next {
            break;
        }
        next = idx + 1;
        let entry = match Entry::from_bytes(entry) {
            Ok(entry) => entry,
            Err(LogError::Corrupt(cause)) => {
                damaged.push(DamagedRow { index: idx, cause });
                continue;
            }
            Err(e) => return Err(e),
        };
        if may_list(r, reader, &entry)? {
            items.push(entry);
        }
    }
    Ok(LogPage {
        items,
        next,
        damaged,
    })
}

/// One page of `/v1/objects/by-semantic-id/{id}`.
#[derive(Debug, Clone)]
pub struct ObjectPage<'t> {
    /// Objects of the kind the reader may read, in arrival order, at most `limit`.
    pub items: Vec<ObjectView<'t>>,
    /// Set only when an episode's page stopped after examining [`MAX_OBJECT_SCAN`] of its
    /// objects, before its last one: the last object examined (of any kind), which the next
    /// page passes as `after`. Otherwise the last item, if any, is where to go on.
    pub next: Option<Ref>,
}

/// Up to `limit` objects with this semantic id that `reader` may read, in the order the store
/// first stored them, after the object `after`. Public kinds (and every kind for readers that
/// see everything) come from the semantic-id index; an episode's private kinds from its own
/// readers keys, examining at most [`MAX_OBJECT_SCAN`] of them per page, so the cost of a page
/// is bounded however few of them are of the kind.
///
/// `None` when `after` is no place in this listing: for an episode's private kinds, any object
/// of its own (of any kind, so that a page's `next` is one); otherwise an object of this kind.
/// Another episode's object is answered exactly as an unknown ref (no existence oracle).
pub fn by_semantic_id<'t>(
    r: &ReadCtx<'t>,
    reader: &Reader,
    semantic_id: &str,
    after: Option<Ref>,
    limit: usize,
) -> Result<Option<ObjectPage<'t>>, StoreError> {
    let episode = match reader {
        Reader::Episode(e) if !is_public(semantic_id) => e,
        _ => {
            let Some(objects) = r.semantic_id_objects(semantic_id, after.as_ref())? else {
                return Ok(None);
            };
            let items = objects.take(limit).collect::<Result<_, _>>()?;
            return Ok(Some(ObjectPage { items, next: None }));
        }
    };
    let start = match after {
        None => 0,
        Some(a) => match r.sequenced(&a)? {
            Some((seq, _)) if grant_of(r, episode, seq)?.is_some() => seq + 1,
            _ => return Ok(None),
        },
    };
    let own = prefix(episode.as_bytes());
    let bounds = (
        Bound::Included(key(episode, start)),
        Bound::Included(key(episode, u64::MAX)),
    );
    let bounds = (
        bounds.0.as_ref().map(Vec::as_slice),
        bounds.1.as_ref().map(Vec::as_slice),
    );
    let mut merged = READERS.range(r, &bounds)?.filter_map(|item| match item {
        Ok((k, header)) => k
            .strip_prefix(own.as_slice())
            .and_then(|s| <[u8; 8]>::try_from(s).ok())
            .map(|s| Ok((u64::from_be_bytes(s), header))),
        Err(e) => Some(Err(e)),
    });
    // The episode's grants waiting in `readers_tail`, read as the listing goes: a page that
    // stops early reads no further.
    let from = start.to_be_bytes();
    let tail_bounds = (Bound::Included(&from[..]), Bound::Unbounded);
    let mut waiting = READERS_TAIL
        .range(r, &tail_bounds)?
        .filter_map(|item| match item {
            Ok((k, header)) => split_tail_key(k)
                .filter(|(_, e)| *e == episode.as_bytes())
                .map(|(seq, _)| Ok((seq, header))),
            Err(e) => Some(Err(e)),
        });
    // Both lists in sequence order, each sequence once.
    let (mut a, mut b) = (merged.next().transpose()?, waiting.next().transpose()?);
    let mut items = Vec::new();
    let (mut examined, mut last) = (0, None);
    while items.len() < limit {
        if a.is_none() && b.is_none() {
            break;
        }
        if examined >= MAX_OBJECT_SCAN {
            // Only a grant that names no object (a damaged store: `worldd doctor` says so)
            // leaves nothing to go on from.
            let next = last.ok_or_else(|| {
                StoreError::Corrupt(format!(
                    "the read grants of episode {episode:?} from object row {start} on name no stored object"
                ))
            })?;
            return Ok(Some(ObjectPage {
                items,
                next: Some(next),
            }));
        }
        let (seq, header) = match (a, b) {
            (Some(x), Some(y)) if y.0 <= x.0 => {
                b = waiting.next().transpose()?;
                if x.0 == y.0 {
                    a = merged.next().transpose()?;
                }
                y
            }
            (Some(x), _) => {
                a = merged.next().transpose()?;
                x
            }
            (None, Some(y)) => {
                b = waiting.next().transpose()?;
                y
            }
            (None, None) => break,
        };
        examined += 1;
        // The kind the episode stored the bytes as decides, as for every read of its own.
        if let Some(o) = r.object_at(seq)? {
            let o = as_granted(seq, o, header)?;
            last = Some(o.hash);
            if o.semantic_id == semantic_id {
                items.push(o);
            }
        }
    }
    Ok(Some(ObjectPage { items, next: None }))
}

/// Let `episode` read these objects (each already written in this transaction or before), as
/// the kinds it made them. Public objects and keys already present cost no write.
///
/// A grant's value is empty when the stored object says of its bytes what the episode's
/// object says (the common case: the episode stored them, or made the same kind of them as
/// the first writer did); otherwise it is the episode's own header ([`Object::encode_header`]),
/// which its reads show in place of the stored one ([`object`]).
pub(crate) fn grant<'o>(
    w: &mut WriteCtx<'_, '_>,
    episode: &str,
    objects: impl IntoIterator<Item = &'o Object>,
) -> Result<(), StoreError> {
    let mut added = false;
    let mut key = Vec::with_capacity(8 + episode.len());
    for o in objects {
        // An object this operation stored anew for the first time is not looked up: its place
        // and header (the caller's) are known, and no grant of it can exist yet. One it stored
        // anew and granted already is looked up like any other: it may be granted as another
        // kind.
        let (seq, header) = match w.stored_anew_marking(&ref_key(&o.hash, OBJECT)) {
            Some((_, true, _)) => continue,
            Some((seq, false, false)) => {
                write_tail_key(&mut key, episode, seq);
                READERS_TAIL.put(w, &key, &[])?;
                added = true;
                continue;
            }
            Some((_, false, true)) | None => match w.reader().sequenced(&o.hash)? {
                Some((seq, stored)) if !is_public(stored.semantic_id) => {
                    (seq, (!o.same_header(&stored)).then(|| o.encode_header()))
                }
                _ => continue,
            },
        };
        if grant_of(&w.reader(), episode, seq)?.is_none() {
            write_tail_key(&mut key, episode, seq);
            READERS_TAIL.put(w, &key, header.as_deref().unwrap_or_default())?;
            added = true;
        }
    }
    if added && READERS_TAIL.len(&w.reader())? >= READERS_MERGE_AT {
        merge_tail(w)?;
    }
    Ok(())
}

/// `object`, of a public kind, is being stored, and its bytes are stored already. When they
/// were stored first as a private kind (an agent can send, as a call's arguments, the exact
/// bytes of a transition document a publisher will publish), every reader may still read them,
/// as the kind published: a grant to [`PUBLISHED`] says so. Without it the first writer's kind
/// decided, and the published document answered every other agent `404`.
pub(crate) fn published(w: &mut WriteCtx<'_, '_>, object: &Object) -> Result<(), StoreError> {
    debug_assert!(is_public(&object.semantic_id));
    let seq = match w.reader().sequenced(&object.hash)? {
        Some((seq, stored)) if !is_public(stored.semantic_id) => seq,
        _ => return Ok(()),
    };
    if grant_of(&w.reader(), PUBLISHED, seq)?.is_some() {
        return Ok(());
    }
    READERS_TAIL.put(w, &tail_key(PUBLISHED, seq), &object.encode_header())?;
    if READERS_TAIL.len(&w.reader())? >= READERS_MERGE_AT {
        merge_tail(w)?;
    }
    Ok(())
}

/// Move every grant waiting in `readers_tail` into `readers`, in `readers`' key order, and
/// empty the tail.
fn merge_tail(w: &mut WriteCtx<'_, '_>) -> Result<(), StoreError> {
    // Thousands of keys: laid end to end in one buffer, and sorted as slices of it.
    // Each grant's key, then its value (usually empty).
    let mut bytes = Vec::new();
    let mut spans = Vec::new();
    for item in READERS_TAIL.iter(&w.reader())? {
        let (k, header) = item?;
        if let Some((seq, episode)) = split_tail_key(k) {
            let start = bytes.len();
            append_key_of(&mut bytes, episode, seq);
            let split = bytes.len();
            bytes.extend_from_slice(header);
            spans.push((start..split, split..bytes.len()));
        }
    }
    spans.sort_unstable_by(|a, b| bytes[a.0.clone()].cmp(&bytes[b.0.clone()]));
    for (k, v) in &spans {
        READERS.put(w, &bytes[k.clone()], &bytes[v.clone()])?;
    }
    READERS_TAIL.clear(w)?;
    tracing::debug!(grants = spans.len(), "readers merged");
    Ok(())
}

/// `grant` of objects already stored, as the kinds they were stored as: for tests that
/// build an episode's holdings without calls (thousands of them in one transaction).
#[doc(hidden)]
pub fn grant_stored(
    w: &mut WriteCtx<'_, '_>,
    episode: &str,
    refs: impl IntoIterator<Item = Ref>,
) -> Result<(), StoreError> {
    let mut objects = Vec::new();
    for r in refs {
        let (_, o) = w
            .reader()
            .sequenced(&r)?
            .ok_or_else(|| StoreError::Corrupt(format!("no object {r} to grant")))?;
        objects.push(Object {
            hash: o.hash,
            interface_hash: o.interface_hash,
            semantic_id: o.semantic_id.to_owned(),
            provenance: o.provenance.to_owned(),
            payload: o.payload.to_vec(),
        });
    }
    grant(w, episode, &objects)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::Object;
    use crate::store::Store;

    const KIND: &str = "world/test-private/v1";

    /// `n` new objects of [`KIND`], stored in one transaction, in order.
    fn stored(store: &Store, tag: &str, n: usize) -> Vec<Ref> {
        let objects: Vec<Object> = (0..n)
            .map(|i| Object::new(KIND, "test", format!("{tag}-{i}").into_bytes()))
            .collect();
        let refs = objects.iter().map(|o| o.hash).collect();
        store
            .write(move |w| objects.iter().try_for_each(|o| w.put_object(o)))
            .unwrap();
        refs
    }

    fn rows(store: &Store, table: &str) -> usize {
        store.raw_rows(table).unwrap().len()
    }

    /// Every object of [`KIND`] `episode` lists, a page of `limit` at a time.
    fn listed(store: &Store, episode: &str, limit: usize) -> Vec<Ref> {
        let reader = Reader::Episode(episode.into());
        let mut all = Vec::new();
        loop {
            let page = store
                .read(|r| {
                    let page = by_semantic_id(r, &reader, KIND, all.last().copied(), limit)?;
                    let page = page.unwrap();
                    assert_eq!(page.next, None, "fewer than the bound");
                    Ok::<_, StoreError>(page.items.iter().map(|o| o.hash).collect::<Vec<_>>())
                })
                .unwrap();
            if page.is_empty() {
                return all;
            }
            all.extend(page);
        }
    }

    fn may(store: &Store, episode: &str, object: &Ref) -> bool {
        let reader = Reader::Episode(episode.into());
        store
            .read(|r| Ok::<_, StoreError>(super::object(r, &reader, object)?.is_some()))
            .unwrap()
    }

    /// An operation that stores objects and grants them in one go grants what it stored anew
    /// without looking it up, and still looks up what was stored before: an object another
    /// transaction stored is granted once per episode, and a public one never.
    #[test]
    fn an_operation_grants_what_it_stored_anew_and_what_was_stored_before_alike() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("db")).unwrap();
        let before = stored(&store, "before", 1)[0];
        let store_and_grant = |episode: &str, objects: Vec<Object>| {
            let episode = episode.to_owned();
            store
                .write(move |w| {
                    for o in &objects {
                        w.put_object(o)?;
                    }
                    grant(w, &episode, &objects)?;
                    // Granted again in the same operation: nothing more is added.
                    grant(w, &episode, &objects)
                })
                .unwrap();
        };
        let private = Object::new(KIND, "test", b"new".to_vec());
        let public = Object::new(crate::object::sid::TRANSITION, "test", b"{}".to_vec());
        let again = Object::new(KIND, "test", b"before-0".to_vec());
        assert_eq!(again.hash, before);
        store_and_grant("ep-a", vec![private.clone(), public.clone(), again.clone()]);
        assert_eq!(
            rows(&store, "readers_tail"),
            2,
            "the new private object and the old one"
        );
        assert!(may(&store, "ep-a", &private.hash) && may(&store, "ep-a", &before));
        assert!(!may(&store, "ep-b", &private.hash) && !may(&store, "ep-b", &before));
        // Another episode sends the same objects: none is new, each private one is granted.
        store_and_grant("ep-b", vec![private.clone(), public, again]);
        assert_eq!(rows(&store, "readers_tail"), 4);
        assert!(may(&store, "ep-b", &private.hash) && may(&store, "ep-b", &before));
        assert_eq!(listed(&store, "ep-a", 10), vec![before, private.hash]);
        assert_eq!(listed(&store, "ep-b", 10), vec![before, private.hash]);
    }

    /// The first grant of an object the operation stored anew is written without a lookup.
    /// A second grant of it in the same operation looks, and finds the first even where it
    /// made the tail full and moved with it into `readers`: it is not written again.
    #[test]
    fn a_grant_repeated_in_the_operation_that_merged_the_tail_is_found_and_not_written_twice() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("db")).unwrap();
        let fill = stored(&store, "fill", READERS_MERGE_AT as usize - 1);
        store
            .write(move |w| grant_stored(w, "ep", fill.iter().copied()))
            .unwrap();
        assert_eq!(rows(&store, "readers_tail"), READERS_MERGE_AT as usize - 1);
        let new = Object::new(KIND, "test", b"the last one".to_vec());
        let hash = new.hash;
        store
            .write(move |w| {
                w.put_object(&new)?;
                grant(w, "ep", [&new])?;
                grant(w, "ep", [&new])
            })
            .unwrap();
        assert_eq!(rows(&store, "readers_tail"), 0);
        assert_eq!(rows(&store, "readers"), READERS_MERGE_AT as usize);
        let listed = listed(&store, "ep", 10_000);
        assert_eq!(listed.len(), READERS_MERGE_AT as usize);
        assert_eq!(listed.last(), Some(&hash));
    }

    /// Grants wait in `readers_tail` until it holds [`READERS_MERGE_AT`]; the operation that
    /// reaches it moves them all into `readers`. Before and after, each episode reads and lists
    /// exactly its own objects, in the order they were stored, across both tables.
    #[test]
    fn grants_wait_in_the_tail_and_move_to_readers_in_one_operation_when_it_is_full() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("db")).unwrap();
        let early = stored(&store, "early", 10);
        let per_episode = READERS_MERGE_AT as usize / 2 + 52;
        let a = stored(&store, "a", per_episode);
        let b = stored(&store, "b", per_episode);
        let grant_in = |episode: &str, refs: &[Ref]| {
            let episode = episode.to_owned();
            let refs = refs.to_vec();
            store
                .write(move |w| grant_stored(w, &episode, refs.iter().copied()))
                .unwrap();
        };
        let (mut merged_at, mut granted) = (None, 0);
        for (ca, cb) in a.chunks(16).zip(b.chunks(16)) {
            grant_in("ep-a", ca);
            grant_in("ep-b", cb);
            granted += ca.len() + cb.len();
            let (waiting, indexed) = (rows(&store, "readers_tail"), rows(&store, "readers"));
            if indexed == 0 {
                assert_eq!(waiting, granted);
            } else {
                merged_at.get_or_insert(granted);
                assert_eq!(indexed, READERS_MERGE_AT as usize);
                assert_eq!(waiting + indexed, granted);
            }
        }
        assert_eq!(merged_at, Some(READERS_MERGE_AT as usize));
        assert_eq!(rows(&store, "readers_tail"), 2 * 52);
        // Granted again: nothing is added, waiting or merged.
        grant_in("ep-a", &a);
        assert_eq!(rows(&store, "readers_tail"), 2 * 52);
        assert_eq!(rows(&store, "readers"), READERS_MERGE_AT as usize);
        // Objects stored before all of them, granted last, wait below the merged ones.
        grant_in("ep-a", &early);

        let mut want_a = early.clone();
        want_a.extend(&a);
        for limit in [1, 7, 1000] {
            assert_eq!(listed(&store, "ep-a", limit), want_a, "limit {limit}");
            assert_eq!(listed(&store, "ep-b", limit), b, "limit {limit}");
        }
        assert!(listed(&store, "ep-c", 100).is_empty());
        for (own, theirs) in a.iter().zip(&b) {
            assert!(may(&store, "ep-a", own) && may(&store, "ep-b", theirs));
            assert!(!may(&store, "ep-a", theirs) && !may(&store, "ep-b", own));
        }
        assert!(early
            .iter()
            .all(|o| may(&store, "ep-a", o) && !may(&store, "ep-b", o)));
        // Another episode's object is no place to start a listing from.
        let reader = Reader::Episode("ep-a".into());
        let from_theirs = store
            .read(|r| {
                Ok::<_, StoreError>(by_semantic_id(r, &reader, KIND, Some(b[0]), 5)?.is_none())
            })
            .unwrap();
        assert!(from_theirs);
    }

    /// Objects are deduplicated by content, first writer wins. An episode that sends bytes
    /// another episode stored first as another kind (a guess of its plan or its output) reads
    /// them, and lists them, as the kind it stored them as: what it reads says nothing of who
    /// made them first. The first writer and operators still see the stored object. The same
    /// holds once the grants have moved from the tail into `readers`.
    #[test]
    fn an_episode_reads_bytes_another_stored_first_as_the_kind_it_sent_them_as() {
        const THEIRS: &str = "world/test-plan/v1";
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("db")).unwrap();
        let first = Object::new(THEIRS, "host/broker", b"the victim's plan".to_vec());
        let guess = Object::new(KIND, "coordinator", b"the victim's plan".to_vec());
        assert_eq!(first.hash, guess.hash);
        let store_and_grant = |episode: &'static str, o: Object| {
            store
                .write(move |w| {
                    w.put_object(&o)?;
                    grant(w, episode, [&o])
                })
                .unwrap();
        };
        store_and_grant("victim", first.clone());
        store_and_grant("mallory", guess.clone());
        let seen = |reader: Reader| {
            store
                .read(|r| {
                    let o = super::object(r, &reader, &first.hash)?.unwrap();
                    Ok::<_, StoreError>((
                        o.semantic_id.to_owned(),
                        o.provenance.to_owned(),
                        o.interface_hash,
                        o.payload.to_vec(),
                    ))
                })
                .unwrap()
        };
        let as_made = |o: &Object| {
            let h = (
                o.semantic_id.clone(),
                o.provenance.clone(),
                o.interface_hash,
            );
            (h.0, h.1, h.2, o.payload.clone())
        };
        let check = |when: &str| {
            assert_eq!(
                seen(Reader::Episode("mallory".into())),
                as_made(&guess),
                "{when}"
            );
            assert_eq!(
                seen(Reader::Episode("victim".into())),
                as_made(&first),
                "{when}"
            );
            assert_eq!(seen(Reader::Operator), as_made(&first), "{when}");
            assert_eq!(listed(&store, "mallory", 10), vec![guess.hash], "{when}");
            let in_kind = |episode: &str, kind: &str, after: Option<Ref>| {
                let reader = Reader::Episode(episode.into());
                store
                    .read(|r| {
                        Ok::<_, StoreError>(
                            by_semantic_id(r, &reader, kind, after, 10)?
                                .map(|page| page.items.iter().map(|o| o.hash).collect::<Vec<_>>()),
                        )
                    })
                    .unwrap()
            };
            assert_eq!(in_kind("mallory", THEIRS, None), Some(vec![]), "{when}");
            assert_eq!(
                in_kind("victim", THEIRS, None),
                Some(vec![first.hash]),
                "{when}"
            );
            assert_eq!(in_kind("victim", KIND, None), Some(vec![]), "{when}");
            // A page of an episode's own goes on after any object of its own, whatever its
            // kind, and finds nothing of the first writer's kind there.
            assert_eq!(
                in_kind("mallory", KIND, Some(guess.hash)),
                Some(vec![]),
                "{when}"
            );
            assert_eq!(
                in_kind("mallory", THEIRS, Some(guess.hash)),
                Some(vec![]),
                "{when}"
            );
        };
        check("waiting in the tail");
        assert_eq!(rows(&store, "readers_tail"), 2);
        let fill = stored(&store, "fill", READERS_MERGE_AT as usize - 2);
        store
            .write(move |w| grant_stored(w, "filler", fill.iter().copied()))
            .unwrap();
        assert_eq!(rows(&store, "readers_tail"), 0);
        check("merged into readers");
    }

    /// An episode's listing follows the store's first arrival: an object it obtains after it
    /// kept a cursor, whose bytes another episode stored before that cursor's object, is its
    /// own and readable, but a listing continued from the cursor shows only what is new to the
    /// store; a listing from the start shows it in the first writer's place. The docs tell a
    /// client that must hold every object to list from the start (or follow its calls).
    #[test]
    fn an_agents_kept_cursor_does_not_show_an_object_whose_bytes_another_episode_stored_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("db")).unwrap();
        let store_and_grant = |episode: &'static str, objects: Vec<Object>| {
            store
                .write(move |w| {
                    for o in &objects {
                        w.put_object(o)?;
                    }
                    grant(w, episode, &objects)
                })
                .unwrap();
        };
        let object = |bytes: &str| Object::new(KIND, "coordinator", bytes.as_bytes().to_vec());
        let (shared, c_old, c_new) = (object("shared"), object("c-old"), object("c-new"));
        store_and_grant("ep-d", vec![shared.clone()]);
        store_and_grant("ep-c", vec![c_old.clone()]);
        // C pages to the end and keeps its cursor: its last object.
        assert_eq!(listed(&store, "ep-c", 10), vec![c_old.hash]);
        let cursor = c_old.hash;
        store_and_grant("ep-c", vec![shared.clone(), c_new.clone()]);
        assert!(may(&store, "ep-c", &shared.hash));
        let reader = Reader::Episode("ep-c".into());
        let from_cursor = store
            .read(|r| {
                let page = by_semantic_id(r, &reader, KIND, Some(cursor), 10)?.unwrap();
                Ok::<_, StoreError>((
                    page.items.iter().map(|o| o.hash).collect::<Vec<_>>(),
                    page.next,
                ))
            })
            .unwrap();
        assert_eq!(from_cursor, (vec![c_new.hash], None));
        assert_eq!(
            listed(&store, "ep-c", 10),
            vec![shared.hash, c_old.hash, c_new.hash]
        );
    }

    /// Bytes an episode stored first as a private kind, then published as a public kind, are
    /// read by every other episode as the kind published (the store keeps the first kind), by
    /// the episode that stored them as its own kind, and by operators as stored. The grant that
    /// says so is nobody's holding, and holds once the grants have moved into `readers`.
    #[test]
    fn bytes_published_after_an_episode_stored_them_as_a_private_kind_are_public() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("db")).unwrap();
        let first = Object::new(KIND, "coordinator", b"{\"id\":\"a-tool\"}".to_vec());
        let doc = Object::new(sid::TRANSITION, "publisher", first.payload.clone());
        let (f, d) = (first.clone(), doc.clone());
        store
            .write(move |w| {
                w.put_object(&f)?;
                grant(w, "mallory", [&f])
            })
            .unwrap();
        assert!(
            !may(&store, "alice", &first.hash),
            "private before it is published"
        );
        store.write(move |w| w.put_object(&d)).unwrap();
        let kind = |reader: Reader| {
            store
                .read(|r| {
                    Ok::<_, StoreError>(
                        super::object(r, &reader, &doc.hash)?
                            .map(|o| (o.semantic_id.to_owned(), o.provenance.to_owned())),
                    )
                })
                .unwrap()
        };
        let grantees = || {
            let mut out = Vec::new();
            store
                .read(|r| for_each_grant(r, |e, _| out.push(e.to_vec())))
                .unwrap();
            out
        };
        let check = |when: &str| {
            let published = Some((sid::TRANSITION.to_owned(), "publisher".to_owned()));
            assert_eq!(kind(Reader::Episode("alice".into())), published, "{when}");
            let own = Some((KIND.to_owned(), "coordinator".to_owned()));
            assert_eq!(kind(Reader::Episode("mallory".into())), own, "{when}");
            assert_eq!(kind(Reader::Operator), own, "{when}");
            let stored = store
                .read(|r| {
                    r.object_view(&doc.hash)
                        .map(|o| o.map(|o| o.semantic_id.to_owned()))
                })
                .unwrap();
            assert_eq!(stored.as_deref(), Some(KIND), "{when}");
            let reader = Reader::Episode("alice".into());
            let readable = store
                .read(|r| {
                    let stored = r.object_view(&doc.hash)?.unwrap();
                    may_read(r, &reader, &stored)
                })
                .unwrap();
            assert!(readable, "{when}");
        };
        check("waiting in the tail");
        assert_eq!(grantees(), vec![b"mallory".to_vec()]);
        // Published again: nothing more is written.
        let again = Object::new(sid::TRANSITION, "publisher", first.payload.clone());
        store.write(move |w| w.put_object(&again)).unwrap();
        assert_eq!(rows(&store, "readers_tail"), 2);
        let fill = stored(&store, "fill", READERS_MERGE_AT as usize - 2);
        store
            .write(move |w| grant_stored(w, "filler", fill.iter().copied()))
            .unwrap();
        assert_eq!(rows(&store, "readers_tail"), 0);
        check("merged into readers");
        assert_eq!(grantees().iter().filter(|e| *e == b"mallory").count(), 1);
        assert!(grantees().iter().all(|e| e == b"mallory" || e == b"filler"));
    }

    /// A page that examined nothing but grants naming no stored object has no object to say it
    /// stopped at: that is a damaged store (`worldd doctor` names each such grant), not a page
    /// that sends its client round in a circle.
    #[test]
    fn a_page_of_grants_naming_no_object_is_a_damaged_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("db")).unwrap();
        let first = 1_000_000;
        store
            .write(move |w| {
                for seq in first..=first + MAX_OBJECT_SCAN as u64 {
                    READERS_TAIL.put(w, &tail_key("ep", seq), &[])?;
                }
                Ok::<_, StoreError>(())
            })
            .unwrap();
        let reader = Reader::Episode("ep".into());
        let err = store
            .read(|r| by_semantic_id(r, &reader, KIND, None, 1).map(|p| p.is_some()))
            .unwrap_err();
        assert!(
            err.to_string().contains(
                "the read grants of episode \"ep\" from object row 0 on name no stored object"
            ),
            "{err}"
        );
    }

    /// A grant's header that does not decode is a damaged store, not a silent fallback to the
    /// first writer's kind.
    #[test]
    fn a_damaged_grant_header_is_a_damaged_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("db")).unwrap();
        let o = Object::new(KIND, "test", b"bytes".to_vec());
        let h = o.hash;
        let seq = store
            .write(move |w| {
                w.put_object(&o)?;
                let (seq, _) = w.reader().sequenced(&o.hash)?.unwrap();
                READERS_TAIL.put(w, &tail_key("ep", seq), &[1, 2, 3])?;
                Ok::<_, StoreError>(seq)
            })
            .unwrap();
        let reader = Reader::Episode("ep".into());
        let err = store
            .read(|r| super::object(r, &reader, &h).map(|o| o.is_some()))
            .unwrap_err();
        assert!(
            err.to_string().contains(&format!(
                "the read grant of object {h} (row {seq}) is damaged"
            )),
            "{err}"
        );
    }
}
