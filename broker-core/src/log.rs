//! The append-only, hash-chained log and the worlds it selects.
//!
//! Entry `i` names its invocation record (`transitionRef`) and links to entry `i-1` through
//! `prevEntryHash`. `entryHash = sha256(canonical {entryIndex, semanticsEpoch, transitionFn,
//! interpreter, prevEntryHash, writtenBy, transitionRef})`. Each entry selects a world
//! `{revision: i, stateRoot: output ref, logHead: entryHash}` whose ref is the sha256 of its
//! canonical bytes; the head points at the newest world.
//!
//! Every append recomputes and checks the entry hash, the world ref, index continuity and the
//! `prevEntryHash` link, whoever supplied them.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::canon::{self, CanonError, Members};
use crate::log_row::Row;
use crate::object::{sid, Object, Ref};
use crate::ref_tail;
use crate::schema::{ref_key, ENTRY_HASH, LOG, WORLD_REF};
use crate::storage::{ReadCtx, Store, StoreError, WriteCtx};

/// The semantics epoch written into every entry: the plan interpreter's
/// ([`crate::plan::SEMANTICS_EPOCH`], the one definition).
pub use crate::plan::SEMANTICS_EPOCH;
/// `writtenBy` of the genesis entry.
pub const GENESIS_WRITER: &str = "world:genesis";
/// `writtenBy` of every entry the coordinator commits, whichever surface (MCP or A2A) the call
/// came through: they share one invocation path, and the invocation id names the surface
/// (seed 004).
pub const COORDINATOR_WRITER: &str = "coordinator:a2a";
/// `writtenBy` of MCP calls committed by earlier builds; still verified as coordinator entries.
pub const LEGACY_MCP_WRITER: &str = "coordinator:mcp";
/// `writtenBy` values with this prefix are written only by the coordinator.
pub const COORDINATOR_PREFIX: &str = "coordinator:";

/// True for `writtenBy` values no client commit may carry: the coordinator's (`coordinator:…`)
/// and the store's own (`world:…`, the genesis).
pub fn is_reserved_writer(written_by: &str) -> bool {
    written_by.starts_with(COORDINATOR_PREFIX) || written_by.starts_with("world:")
}

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("conflict: observed {observed} selected {selected}")]
    HeadConflict { observed: String, selected: String },
    #[error("no world is selected; the store has no genesis")]
    NoHead,
    #[error("invalid commit: {0}")]
    Invalid(String),
    #[error("log is damaged: {0}")]
    Corrupt(String),
}

impl From<CanonError> for LogError {
    fn from(e: CanonError) -> Self {
        LogError::Invalid(e.to_string())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EntryHeader {
    pub entry_index: u64,
    pub semantics_epoch: u64,
    pub transition_fn: Ref,
    pub interpreter: Ref,
    pub prev_entry_hash: Ref,
    pub written_by: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Entry {
    pub header: EntryHeader,
    pub entry_hash: Ref,
    pub transition_ref: Ref,
}

impl Entry {
    /// The entry hash for `header` and `transition_ref`: the sha256 of the canonical JSON of
    /// the seven fields. `Err` when they have no canonical form (an `entryIndex` beyond
    /// 2^53−1), never the hash of something else.
    pub fn compute_hash(header: &EntryHeader, transition_ref: &Ref) -> Result<Ref, CanonError> {
        let hashed = Members::new()
            .integer("entryIndex", header.entry_index)?
            .plain("interpreter", header.interpreter)
            .plain("prevEntryHash", header.prev_entry_hash)
            .integer("semanticsEpoch", header.semantics_epoch)?
            .plain("transitionFn", header.transition_fn)
            .plain("transitionRef", transition_ref)
            .string("writtenBy", &header.written_by)
            .finish();
        Ok(Ref::of(hashed.as_bytes()))
    }

    /// Build an entry with its hash computed.
    pub fn new(header: EntryHeader, transition_ref: Ref) -> Result<Entry, CanonError> {
        let entry_hash = Entry::compute_hash(&header, &transition_ref)?;
        Ok(Entry {
            header,
            entry_hash,
            transition_ref,
        })
    }

    /// `{header:{entryIndex, semanticsEpoch, transitionFn, interpreter, prevEntryHash,
    /// writtenBy}, entryHash, transitionRef}`.
    pub fn to_value(&self) -> Value {
        let h = &self.header;
        let header = Map::from_iter([
            ("entryIndex".to_owned(), Value::from(h.entry_index)),
            ("semanticsEpoch".to_owned(), Value::from(h.semantics_epoch)),
            ("transitionFn".to_owned(), ref_value(&h.transition_fn)),
            ("interpreter".to_owned(), ref_value(&h.interpreter)),
            ("prevEntryHash".to_owned(), ref_value(&h.prev_entry_hash)),
            ("writtenBy".to_owned(), Value::String(h.written_by.clone())),
        ]);
        Value::Object(Map::from_iter([
            ("header".to_owned(), Value::Object(header)),
            ("entryHash".to_owned(), ref_value(&self.entry_hash)),
            ("transitionRef".to_owned(), ref_value(&self.transition_ref)),
        ]))
    }

    /// Canonical bytes, as stored: [`Entry::to_value`]'s, written directly. `Err` when the
    /// entry has no canonical form.
    pub fn to_bytes(&self) -> Result<Vec<u8>, CanonError> {
        let h = &self.header;
        let bytes = Members::new()
            .plain("entryHash", self.entry_hash)
            .object("header", |header| {
                Ok(header
                    .integer("entryIndex", h.entry_index)?
                    .plain("interpreter", h.interpreter)
                    .plain("prevEntryHash", h.prev_entry_hash)
                    .integer("semanticsEpoch", h.semantics_epoch)?
                    .plain("transitionFn", h.transition_fn)
                    .string("writtenBy", &h.written_by))
            })?
            .plain("transitionRef", self.transition_ref)
            .finish();
        Ok(bytes.into_bytes())
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Entry, LogError> {
        let v = canon::parse(bytes).map_err(|e| LogError::Corrupt(e.to_string()))?;
        serde_json::from_value(v).map_err(|e| LogError::Corrupt(e.to_string()))
    }

    /// Whether `entryHash` is the hash of the other fields. An entry whose fields have no
    /// canonical form has no valid hash.
    pub fn hash_is_valid(&self) -> bool {
        Entry::compute_hash(&self.header, &self.transition_ref).is_ok_and(|h| h == self.entry_hash)
    }
}

fn ref_value(r: &Ref) -> Value {
    Value::String(r.to_string())
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct World {
    pub revision: u64,
    pub state_root: Ref,
    pub log_head: Ref,
}

impl World {
    /// `{revision, stateRoot, logHead}`.
    pub fn to_value(&self) -> Value {
        Value::Object(Map::from_iter([
            ("revision".to_owned(), Value::from(self.revision)),
            ("stateRoot".to_owned(), ref_value(&self.state_root)),
            ("logHead".to_owned(), ref_value(&self.log_head)),
        ]))
    }

    /// Canonical bytes, as stored and hashed. `Err` when the world has no canonical form (a
    /// revision beyond 2^53−1).
    pub fn to_bytes(&self) -> Result<Vec<u8>, CanonError> {
        let bytes = Members::new()
            .plain("logHead", self.log_head)
            .integer("revision", self.revision)?
            .plain("stateRoot", self.state_root)
            .finish();
        Ok(bytes.into_bytes())
    }

    /// The world in exactly the bytes [`World::to_bytes`] writes, read without a JSON parser;
    /// `None` for any other bytes, which a JSON parser then reads or refuses. The store's
    /// writer reads the head's world on every append, and parsing it cost about 4 % of its
    /// time.
    pub(crate) fn from_canonical(bytes: &[u8]) -> Option<World> {
        let rest = bytes.strip_prefix(b"{\"logHead\":\"")?;
        let (log_head, rest) = canonical_ref(rest)?;
        let rest = rest.strip_prefix(b"\",\"revision\":")?;
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        let (revision, rest) = rest.split_at(digits);
        let rest = rest.strip_prefix(b",\"stateRoot\":\"")?;
        let (state_root, rest) = canonical_ref(rest)?;
        if rest != b"\"}" || revision.is_empty() || (revision.len() > 1 && revision[0] == b'0') {
            return None;
        }
        let revision: u64 = std::str::from_utf8(revision).ok()?.parse().ok()?;
        (revision <= canon::MAX_SAFE_INTEGER).then_some(World {
            revision,
            state_root,
            log_head,
        })
    }

    /// The world ref: sha256 of the canonical bytes.
    pub fn reference(&self) -> Result<Ref, CanonError> {
        Ok(Ref::of(&self.to_bytes()?))
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<World, LogError> {
        let v = canon::parse(bytes).map_err(|e| LogError::Corrupt(e.to_string()))?;
        serde_json::from_value(v).map_err(|e| LogError::Corrupt(e.to_string()))
    }
}

/// A ref's text at the start of `bytes` (`sha256:` and 64 lowercase hex digits), and what
/// follows it.
fn canonical_ref(bytes: &[u8]) -> Option<(Ref, &[u8])> {
    let text = bytes.get(..71)?;
    let r = std::str::from_utf8(text).ok()?.parse().ok()?;
    Some((r, &bytes[71..]))
}

/// The selected head: its ref and world.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub world_ref: Ref,
    pub world: World,
}

/// What a committed append produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub entry: Entry,
    pub world: World,
    pub world_ref: Ref,
}

/// The genesis output object (payload of `stateRoot` and `transitionRef` of entry 0).
pub fn genesis_document() -> serde_json::Value {
    json!({
        "genesis": true,
        "semanticsEpoch": SEMANTICS_EPOCH,
        "note": "world genesis: entry 0 of an empty log",
    })
}

/// The ref of the plan interpreter's identity document (`interpreter` in every entry).
pub fn interpreter_ref() -> Result<Ref, CanonError> {
    // A constant of the build, hashed once: every call's entry names it.
    static INTERPRETER: std::sync::OnceLock<Result<Ref, CanonError>> = std::sync::OnceLock::new();
    INTERPRETER
        .get_or_init(|| Ref::of_json(&crate::plan::interpreter_document()))
        .clone()
}

fn row_at<'t>(r: &ReadCtx<'t>, index: u64) -> Result<Option<Row<'t>>, StoreError> {
    match LOG.get(r, &index)? {
        None => Ok(None),
        Some(bytes) => Row::decode(bytes)
            .map(Some)
            .ok_or_else(|| StoreError::Corrupt(format!("log row {index} is damaged"))),
    }
}

/// The index of the entry that selected the world `world_ref`, if that row holds it.
fn world_row<'t>(r: &ReadCtx<'t>, world_ref: &Ref) -> Result<Option<Row<'t>>, StoreError> {
    let Some(index) = index_of_world(r, world_ref)? else {
        return Ok(None);
    };
    Ok(row_at(r, index)?.filter(|row| row.world_ref == *world_ref))
}

/// Read the selected head, if any: the world of the newest entry.
pub fn head(r: &ReadCtx<'_>) -> Result<Option<Head>, StoreError> {
    Ok(newest(r)?.map(|(_, _, head)| head))
}

/// The newest row of the log: its key, the row, and the world it holds.
fn newest<'t>(r: &ReadCtx<'t>) -> Result<Option<(u64, Row<'t>, Head)>, StoreError> {
    let Some((index, bytes)) = LOG.last(r)? else {
        return Ok(None);
    };
    let row = Row::decode(bytes)
        .ok_or_else(|| StoreError::Corrupt(format!("log row {index} is damaged")))?;
    // Written canonical by `store`, and read by every append: read in the one layout
    // `World::to_bytes` writes, or else by a typed parse straight from the bytes.
    let world = match World::from_canonical(row.world) {
        Some(world) => world,
        None => serde_json::from_slice(row.world)
            .map_err(|e| StoreError::Corrupt(format!("log row {index}'s world: {e}")))?,
    };
    let head = Head {
        world_ref: row.world_ref,
        world,
    };
    Ok(Some((index, row, head)))
}

/// The head an append continues. The next entry's index and link are taken from the head's
/// world, so a newest row that is not the entry its key says (a stray copy of an older row, a
/// damaged revision or logHead) would make the append write over committed entries, or chain
/// onto a hash no entry has: refused as damage. Both checks read only the row already read.
fn head_to_continue(r: &ReadCtx<'_>) -> Result<Option<Head>, StoreError> {
    let Some((index, row, head)) = newest(r)? else {
        return Ok(None);
    };
    let revision = head.world.revision;
    if revision != index {
        return Err(head_damage(
            index,
            &format!("holds the world of revision {revision}"),
        ));
    }
    if let Some(hash) = row.entry_hash.filter(|h| *h != head.world.log_head) {
        return Err(head_damage(
            index,
            &format!(
                "holds a world whose logHead {} is not its entry's hash {hash}",
                head.world.log_head
            ),
        ));
    }
    Ok(Some(head))
}

/// The store error for a newest log row (`index`) that `what`.
fn head_damage(index: u64, what: &str) -> StoreError {
    StoreError::Corrupt(format!(
        "the log's newest row, {index}, {what}: a new entry would be written over committed ones or chained to no entry, so none is appended; run `worldd doctor` on the store to see what else is damaged"
    ))
}

/// The whole check of the newest log row, made once when a daemon opens the store to serve
/// it ([`crate::store::Store::check_head`]): its key is its entry's index and its world's
/// revision, its entry hashes to the hash beside it and to its world's logHead, and its world
/// to the world ref beside it. What each append checks ([`head_to_continue`]) without hashing.
pub(crate) fn check_head(r: &ReadCtx<'_>) -> Result<(), StoreError> {
    let Some((index, row, head)) = newest(r)? else {
        return Ok(());
    };
    head_to_continue(r)?;
    let recomputed = Ref::of(row.world);
    if recomputed != row.world_ref {
        return Err(head_damage(
            index,
            &format!(
                "holds world bytes that hash to {recomputed}, not to its world ref {}",
                row.world_ref
            ),
        ));
    }
    let entry = Entry::from_bytes(row.entry)
        .map_err(|e| head_damage(index, &format!("holds an entry that does not parse ({e})")))?;
    if entry.header.entry_index != index {
        return Err(head_damage(
            index,
            &format!("holds entry {}", entry.header.entry_index),
        ));
    }
    let hash = Entry::compute_hash(&entry.header, &entry.transition_ref)
        .map_err(|e| head_damage(index, &format!("holds an entry with no hash ({e})")))?;
    if hash != entry.entry_hash || hash != head.world.log_head {
        return Err(head_damage(
            index,
            &format!(
                "holds an entry that hashes to {hash}, not to its entryHash {} or its world's logHead {}",
                entry.entry_hash, head.world.log_head
            ),
        ));
    }
    Ok(())
}

/// The log's newest row as its key and world ref, read with one cursor step (the world ref
/// `None` when the row does not decode): what the store's writer remembers of the row it
/// appended last ([`crate::storage::Layout::log_tip`]).
pub(crate) fn tip(r: &ReadCtx<'_>) -> Result<Option<crate::storage::LogTip>, StoreError> {
    Ok(LOG.last(r)?.map(|(index, bytes)| {
        (
            index,
            crate::log_row::Row::decode(bytes).map(|row| row.world_ref),
        )
    }))
}

/// The index of the newest row of the log, whatever the head says.
pub fn last_index(r: &ReadCtx<'_>) -> Result<Option<u64>, StoreError> {
    Ok(LOG.last(r)?.map(|(index, _)| index))
}

/// The entry at `index`, parsed but not verified.
pub fn entry(r: &ReadCtx<'_>, index: u64) -> Result<Option<Entry>, LogError> {
    match row_at(r, index)? {
        None => Ok(None),
        Some(row) => Entry::from_bytes(row.entry).map(Some),
    }
}

/// The stored bytes of entry `index`, borrowed from the read transaction.
pub(crate) fn stored_entry<'t>(
    r: &ReadCtx<'t>,
    index: u64,
) -> Result<Option<&'t [u8]>, StoreError> {
    Ok(row_at(r, index)?.map(|row| row.entry))
}

/// The stored bytes of world `world_ref`, borrowed from the read transaction.
pub(crate) fn stored_world<'t>(
    r: &ReadCtx<'t>,
    world_ref: &Ref,
) -> Result<Option<&'t [u8]>, StoreError> {
    Ok(world_row(r, world_ref)?.map(|row| row.world))
}

/// Raw stored bytes of entry `index`.
pub fn entry_bytes(r: &ReadCtx<'_>, index: u64) -> Result<Option<Vec<u8>>, StoreError> {
    Ok(row_at(r, index)?.map(|row| row.entry.to_vec()))
}

/// The stored entries from index `from` on, in index order, borrowed from the read
/// transaction: `(index, entry JSON)`.
pub(crate) fn entries<'t>(
    r: &ReadCtx<'t>,
    from: u64,
) -> Result<impl Iterator<Item = Result<(u64, &'t [u8]), StoreError>> + 't, StoreError> {
    Ok(LOG.range(r, &(from..))?.map(move |item| {
        let (index, bytes) = item?;
        let row = Row::decode(bytes)
            .ok_or_else(|| StoreError::Corrupt(format!("log row {index} is damaged")))?;
        Ok((index, row.entry))
    }))
}

/// Up to `limit` consecutive entries from `from`, stopping at the first gap.
pub fn range(r: &ReadCtx<'_>, from: u64, limit: usize) -> Result<Vec<Entry>, LogError> {
    let mut out = Vec::new();
    for item in LOG.range(r, &(from..))? {
        let (idx, bytes) = item?;
        if idx != from + out.len() as u64 || out.len() >= limit {
            break;
        }
        let row = Row::decode(bytes)
            .ok_or_else(|| StoreError::Corrupt(format!("log row {idx} is damaged")))?;
        out.push(Entry::from_bytes(row.entry)?);
    }
    Ok(out)
}

/// Index of the entry with this hash.
pub fn index_of_entry_hash(r: &ReadCtx<'_>, hash: &Ref) -> Result<Option<u64>, StoreError> {
    ref_tail::find(r, &ref_key(hash, ENTRY_HASH))
}

/// The stored world with this ref, parsed but not verified.
pub fn world(r: &ReadCtx<'_>, world_ref: &Ref) -> Result<Option<World>, LogError> {
    match world_row(r, world_ref)? {
        None => Ok(None),
        Some(row) => World::from_bytes(row.world).map(Some),
    }
}

/// The ref of the world entry `index` selected.
pub fn world_ref_at(r: &ReadCtx<'_>, index: u64) -> Result<Option<Ref>, StoreError> {
    Ok(row_at(r, index)?.map(|row| row.world_ref))
}

/// Raw stored bytes of a world.
pub fn world_bytes(r: &ReadCtx<'_>, world_ref: &Ref) -> Result<Option<Vec<u8>>, StoreError> {
    Ok(world_row(r, world_ref)?.map(|row| row.world.to_vec()))
}

/// Replace the stored bytes of entry `index` or of the world it selects, keeping the rest of
/// its row (tamper tests; nothing is checked).
#[cfg(any(test, feature = "fixtures"))]
pub(crate) fn overwrite_row(
    w: &mut WriteCtx<'_, '_>,
    index: u64,
    entry: Option<&[u8]>,
    world: Option<&[u8]>,
) -> Result<(), StoreError> {
    let reader = w.reader();
    let row = row_at(&reader, index)?
        .ok_or_else(|| StoreError::Corrupt(format!("no log row {index}")))?;
    let bytes = Row {
        world_ref: row.world_ref,
        entry_hash: row.entry_hash,
        entry: entry.unwrap_or(row.entry),
        world: world.unwrap_or(row.world),
    }
    .encode();
    LOG.put(w, &index, &bytes)
}

/// The index of the row holding world `world_ref` (maintenance).
pub(crate) fn index_of_world(r: &ReadCtx<'_>, world_ref: &Ref) -> Result<Option<u64>, StoreError> {
    ref_tail::find(r, &ref_key(world_ref, WORLD_REF))
}

/// How an append relates to the head.
#[derive(Debug, Clone)]
pub enum HeadBinding {
    /// Bind index and `prevEntryHash` at the current head inside the writer (coordinator).
    AtHead,
    /// Compare-and-swap: the head must be this world (REST commits); `None` = genesis.
    Observed(Option<Ref>),
}

/// An append whose index and link are bound by the writer.
#[derive(Debug, Clone)]
pub struct Append {
    pub objects: Vec<Object>,
    pub transition_fn: Ref,
    pub interpreter: Ref,
    pub written_by: String,
    /// The invocation record.
    pub transition_ref: Ref,
    /// The output object.
    pub state_root: Ref,
    pub binding: HeadBinding,
}

/// An [`Append`] whose objects were checked against their addresses ([`Append::checked`]),
/// before it was queued for the writer: the one thread that sets the store's rate does not
/// hash them again.
#[derive(Debug, Clone)]
pub struct CheckedAppend {
    append: Append,
    /// The last object is the invocation record of a call that brought no task id, which
    /// names an id minted from 128 random bits: it is stored without a look for it.
    minted_last: bool,
}

impl CheckedAppend {
    /// The objects the append stores, the invocation record last.
    pub(crate) fn objects(&self) -> &[Object] {
        &self.append.objects
    }
}

impl Append {
    /// Check every object against its address, on the caller's thread.
    pub fn checked(self) -> Result<CheckedAppend, LogError> {
        check_objects(&self.objects)?;
        Ok(CheckedAppend {
            append: self,
            minted_last: false,
        })
    }

    /// [`Append::checked`], for an append whose last object, the invocation record its entry
    /// names (`transition_ref`), no row can hold yet: it names an invocation id minted for this
    /// call (`coordinator`: a call that brought no task id), so it is stored without a look for
    /// it. Any other last object is looked for as usual.
    pub(crate) fn checked_minted_last(self) -> Result<CheckedAppend, LogError> {
        let mut checked = self.checked()?;
        let a = &checked.append;
        checked.minted_last = a.objects.last().is_some_and(|o| o.hash == a.transition_ref);
        Ok(checked)
    }
}

/// Append at the head: binds index and link, writes objects, entry, world and head.
///
/// The entry and world are built here from the head, so their hashes are computed once and
/// not checked again; the caller's objects are, and the record and output must be stored.
pub fn append(w: &mut WriteCtx<'_, '_>, a: &Append) -> Result<Committed, LogError> {
    append_at_head(w, a, false, false)
}

/// [`append`], for objects checked before the append was queued.
pub fn append_checked(w: &mut WriteCtx<'_, '_>, a: &CheckedAppend) -> Result<Committed, LogError> {
    append_at_head(w, &a.append, true, a.minted_last)
}

fn append_at_head(
    w: &mut WriteCtx<'_, '_>,
    a: &Append,
    objects_checked: bool,
    minted_last: bool,
) -> Result<Committed, LogError> {
    let head = head_to_continue(&w.reader())?;
    if let HeadBinding::Observed(observed) = &a.binding {
        check_observed(observed, head.as_ref())?;
    }
    let head = head.ok_or(LogError::NoHead)?;
    let header = EntryHeader {
        entry_index: head.world.revision + 1,
        semantics_epoch: SEMANTICS_EPOCH,
        transition_fn: a.transition_fn,
        interpreter: a.interpreter,
        prev_entry_hash: head.world.log_head,
        written_by: a.written_by.clone(),
    };
    let entry = Entry::new(header, a.transition_ref)?;
    let world = World {
        revision: entry.header.entry_index,
        state_root: a.state_root,
        log_head: entry.entry_hash,
    };
    let world_bytes = world.to_bytes()?;
    let world_ref = Ref::of(&world_bytes);
    if !objects_checked {
        check_objects(&a.objects)?;
    }
    let (objects, minted) = match a.objects.split_last() {
        Some((last, rest)) if minted_last => (rest, Some(last)),
        _ => (&a.objects[..], None),
    };
    store(w, objects, minted, &entry, &world, &world_bytes, &world_ref)?;
    Ok(Committed {
        entry,
        world,
        world_ref,
    })
}

/// A fully client-built commit (REST): everything is recomputed and checked, and the head must
/// be `observed`.
pub fn commit_exact(
    w: &mut WriteCtx<'_, '_>,
    objects: &[Object],
    observed: Option<Ref>,
    entry: &Entry,
    world: &World,
    world_ref: &Ref,
) -> Result<Committed, LogError> {
    let head = head_to_continue(&w.reader())?;
    check_observed(&observed, head.as_ref())?;
    let world_bytes = check_exact(head.as_ref(), entry, world, world_ref)?;
    check_objects(objects)?;
    store(w, objects, None, entry, world, &world_bytes, world_ref)?;
    Ok(Committed {
        entry: entry.clone(),
        world: world.clone(),
        world_ref: *world_ref,
    })
}

fn check_observed(observed: &Option<Ref>, head: Option<&Head>) -> Result<(), LogError> {
    let selected = head.map(|h| h.world_ref);
    if *observed != selected {
        return Err(LogError::HeadConflict {
            observed: observed.map(|r| r.to_string()).unwrap_or_default(),
            selected: selected.map(|r| r.to_string()).unwrap_or_default(),
        });
    }
    Ok(())
}

/// A client-built entry and world against the head: index, link, entry hash, world and world
/// ref all recomputed. The world's canonical bytes, to be stored as they were hashed.
fn check_exact(
    head: Option<&Head>,
    entry: &Entry,
    world: &World,
    world_ref: &Ref,
) -> Result<Vec<u8>, LogError> {
    let (expect_index, expect_prev) = match head {
        Some(h) => (h.world.revision + 1, h.world.log_head),
        None => (0, Ref::ZERO),
    };
    let h = &entry.header;
    if h.entry_index != expect_index {
        return Err(LogError::Invalid(format!(
            "entryIndex {} does not continue the log (expected {expect_index})",
            h.entry_index
        )));
    }
    if h.prev_entry_hash != expect_prev {
        return Err(LogError::Invalid(format!(
            "prevEntryHash {} is not the head's logHead {expect_prev}",
            h.prev_entry_hash
        )));
    }
    let recomputed = Entry::compute_hash(h, &entry.transition_ref)?;
    if recomputed != entry.entry_hash {
        return Err(LogError::Invalid(format!(
            "entryHash {} does not match the recomputed {recomputed}",
            entry.entry_hash
        )));
    }
    if world.revision != h.entry_index || world.log_head != entry.entry_hash {
        return Err(LogError::Invalid(
            "nextWorld must have revision = entryIndex and logHead = entryHash".into(),
        ));
    }
    let world_bytes = world.to_bytes()?;
    let recomputed = Ref::of(&world_bytes);
    if recomputed != *world_ref {
        return Err(LogError::Invalid(format!(
            "world ref {world_ref} does not match the recomputed {recomputed}"
        )));
    }
    Ok(world_bytes)
}

/// Every object hashes to its address.
pub(crate) fn check_objects(objects: &[Object]) -> Result<(), LogError> {
    match objects.iter().find(|o| !o.verify()) {
        Some(o) => Err(LogError::Invalid(format!(
            "object {} does not hash to its address",
            o.hash
        ))),
        None => Ok(()),
    }
}

/// The one place an entry reaches the log, once its entry and world are known to continue the
/// head ([`append`] built them, [`check_exact`] checked them) and its objects to hash to their
/// addresses ([`check_objects`]): the record and output must be stored. `minted`, stored
/// last, is an object no row can hold yet ([`Append::checked_minted_last`]).
fn store(
    w: &mut WriteCtx<'_, '_>,
    objects: &[Object],
    minted: Option<&Object>,
    entry: &Entry,
    world: &World,
    world_bytes: &[u8],
    world_ref: &Ref,
) -> Result<(), LogError> {
    let entry_bytes = entry.to_bytes()?;
    for o in objects {
        w.put_verified_object(o)?;
    }
    if let Some(minted) = minted {
        w.put_minted_object(minted)?;
    }
    for (what, r) in [
        ("transitionRef", &entry.transition_ref),
        ("stateRoot", &world.state_root),
    ] {
        if !w.has_object(r)? {
            return Err(LogError::Invalid(format!(
                "{what} {r} names no stored object"
            )));
        }
    }
    let row = Row {
        world_ref: *world_ref,
        entry_hash: Some(entry.entry_hash),
        entry: &entry_bytes,
        world: world_bytes,
    }
    .encode();
    let index = entry.header.entry_index;
    ref_tail::claim(w)?;
    // The log is append-only: a row is never written over, whatever the head said.
    if !LOG.append_new(w, &index, &row)? {
        return Err(StoreError::Corrupt(format!(
            "entry {index} would be written over a row the log already holds at or past that index, so it is not appended; run `worldd doctor` on the store to see what is damaged"
        ))
        .into());
    }
    w.note_log_row(index, *world_ref);
    ref_tail::note(
        w,
        &[
            ref_key(&entry.entry_hash, ENTRY_HASH),
            ref_key(world_ref, WORLD_REF),
        ],
        index,
    )?;
    Ok(())
}

/// Give a store without entries its genesis (entry 0 and world 0): every store has a head.
pub(crate) fn ensure_genesis(store: &Store) -> Result<(), StoreError> {
    if store.read(|r| Ok::<_, StoreError>(head(r)?.is_some()))? {
        return Ok(());
    }
    store.write(|w| -> Result<(), StoreError> {
        // Another process may have written it since the read above.
        if head(&w.reader())?.is_some() {
            return Ok(());
        }
        write_genesis(w).map(drop).map_err(|e| match e {
            LogError::Store(s) => s,
            other => StoreError::Corrupt(other.to_string()),
        })
    })
}

/// Write entry 0 and world 0.
fn write_genesis(w: &mut WriteCtx<'_, '_>) -> Result<Committed, LogError> {
    let doc = Object::json(sid::GENESIS, GENESIS_WRITER, &genesis_document())?;
    let interpreter = interpreter_ref()?;
    let header = EntryHeader {
        entry_index: 0,
        semantics_epoch: SEMANTICS_EPOCH,
        transition_fn: doc.hash,
        interpreter,
        prev_entry_hash: Ref::ZERO,
        written_by: GENESIS_WRITER.into(),
    };
    let entry = Entry::new(header, doc.hash)?;
    let world = World {
        revision: 0,
        state_root: doc.hash,
        log_head: entry.entry_hash,
    };
    let world_ref = world.reference()?;
    // The interpreter's identity document, so the `interpreter` ref of every entry resolves.
    let identity = Object::json(
        sid::INTERPRETER,
        GENESIS_WRITER,
        &crate::plan::interpreter_document(),
    )?;
    let world_bytes = check_exact(None, &entry, &world, &world_ref)?;
    store(
        w,
        &[doc, identity],
        None,
        &entry,
        &world,
        &world_bytes,
        &world_ref,
    )?;
    Ok(Committed {
        entry,
        world,
        world_ref,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arb_world() -> impl Strategy<Value = World> {
        (
            prop_oneof![
                0u64..1_000,
                (canon::MAX_SAFE_INTEGER - 2)..=canon::MAX_SAFE_INTEGER,
                0..=canon::MAX_SAFE_INTEGER,
            ],
            any::<[u8; 32]>(),
            any::<[u8; 32]>(),
        )
            .prop_map(|(revision, state_root, log_head)| World {
                revision,
                state_root: Ref::from_bytes(state_root),
                log_head: Ref::from_bytes(log_head),
            })
    }

    /// The one write of a log row refuses a key the log already holds, whatever built the
    /// entry: committed entry 1 stays as it was.
    #[test]
    fn the_log_never_writes_an_entry_over_a_row_it_holds() {
        let dir = tempfile::tempdir().unwrap();
        let db = Store::create(&dir.path().join("db")).unwrap();
        let out = Object::json(sid::INVOCATION_OUTPUT, "t", &json!({"o": 1})).unwrap();
        let rec = Object::json(sid::INVOCATION_RECORD, "t", &json!({"r": 1})).unwrap();
        let a = Append {
            objects: vec![out.clone(), rec.clone()],
            transition_fn: out.hash,
            interpreter: rec.hash,
            written_by: "t".into(),
            transition_ref: rec.hash,
            state_root: out.hash,
            binding: HeadBinding::AtHead,
        };
        let first = db.write(move |w| append(w, &a)).unwrap();
        assert_eq!(first.entry.header.entry_index, 1);
        let stored = db.read(|r| entry_bytes(r, 1)).unwrap();
        // Entry 1 again, built by hand with another writer, as a stale head would build it.
        let mut header = first.entry.header.clone();
        header.written_by = "someone else".into();
        let entry = Entry::new(header, rec.hash).unwrap();
        let world = World {
            revision: 1,
            state_root: out.hash,
            log_head: entry.entry_hash,
        };
        let world_bytes = world.to_bytes().unwrap();
        let world_ref = Ref::of(&world_bytes);
        let err = db
            .write(move |w| store(w, &[], None, &entry, &world, &world_bytes, &world_ref))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "store is damaged: entry 1 would be written over a row the log already holds at or past that index, so it is not appended; run `worldd doctor` on the store to see what is damaged"
        );
        assert_eq!(db.read(|r| entry_bytes(r, 1)).unwrap(), stored);
    }

    /// What a JSON parser makes of `bytes`, as `head` would read them without the fast path.
    fn parsed(bytes: &[u8]) -> Option<World> {
        serde_json::from_slice(bytes).ok()
    }

    #[test]
    fn a_world_past_canonical_jsons_range_or_in_another_layout_is_left_to_the_parser() {
        let r = Ref::of(b"r");
        let layouts = [
            // Past 2^53 - 1: a parser reads it, the canonical writer refuses it.
            format!(r#"{{"logHead":"{r}","revision":9007199254740992,"stateRoot":"{r}"}}"#),
            format!(r#"{{"logHead":"{r}","revision":07,"stateRoot":"{r}"}}"#),
            format!(r#"{{ "logHead":"{r}","revision":7,"stateRoot":"{r}"}}"#),
            format!(r#"{{"revision":7,"logHead":"{r}","stateRoot":"{r}"}}"#),
            format!(r#"{{"logHead":"{r}","revision":7,"stateRoot":"{r}"}} "#),
            format!(r#"{{"logHead":"{r}","revision":,"stateRoot":"{r}"}}"#),
            format!(
                r#"{{"logHead":"{}","revision":7,"stateRoot":"{r}"}}"#,
                r.to_string().to_uppercase()
            ),
        ];
        for layout in layouts {
            assert_eq!(World::from_canonical(layout.as_bytes()), None, "{layout}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        #[test]
        fn a_world_read_in_its_canonical_layout_is_the_world_written(world in arb_world()) {
            let bytes = world.to_bytes().unwrap();
            prop_assert_eq!(World::from_canonical(&bytes), Some(world.clone()));
            prop_assert_eq!(parsed(&bytes), Some(world));
        }

        /// Damaged bytes are read by the layout only where a parser reads the same world.
        #[test]
        fn a_damaged_world_is_read_by_its_layout_only_as_a_parser_reads_it(
            world in arb_world(),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
            cut in any::<bool>(),
        ) {
            let mut bytes = world.to_bytes().unwrap();
            let at = at.index(bytes.len());
            if cut {
                bytes.truncate(at);
            } else {
                bytes[at] = byte;
            }
            if let Some(read) = World::from_canonical(&bytes) {
                prop_assert_eq!(parsed(&bytes), Some(read));
            }
        }
    }
}
