//! Schema 1 → schema 2 (stamped as the current schema, 6, which reads a schema-2 store as it
//! is), in one write transaction when a schema-1 store is opened; and schemas 2, 3, 4 and 5 →
//! 6, which only change the version.
//!
//! Schema 2 cuts the pages a call's commits write (`docs/benchmarks.md`): objects are stored in
//! arrival order and found through one index of refs (which also finds entries by hash and
//! worlds by ref), the semantic-id index is kept in insertion order, an entry and its world
//! share one log row, and an invocation's journal state and task state share one row. What each
//! table holds is unchanged; only where it is kept moves:
//!
//! | schema 1 | schema 2 |
//! |---|---|
//! | `objects` (ref → envelope) | `object_rows` (sequence → ref ‖ envelope) and `refs` (ref ‖ `o` → sequence) |
//! | `by_semantic_id` (semanticId ‖ 0 ‖ ref) | `semantic_ids` (len ‖ semanticId ‖ sequence) |
//! | `log`, `world_refs`, `worlds` | `entries` (one row per index) |
//! | `entry_hashes`, the world refs | `refs` (hash ‖ `e`, ref ‖ `w` → index) |
//! | `journal_by_invocation`, `tasks` | `invocations` (`resolutions` starts empty) |
//! | `heads` | the newest row of `entries` |
//! | `readers` (episode ‖ semanticId ‖ ref), if any | `readers` (episode ‖ object sequence), rebuilt |
//!
//! Every stored byte of objects, entries, worlds, journal records and states is carried over
//! unchanged (damage included: `worldd doctor` judges the migrated store as it would have
//! judged the old one). Objects are numbered in their schema-1 order (by ref), so
//! `by-semantic-id` pages list them as schema 1 did, and newer objects follow.
//!
//! Who may read which object (`readers`, [`crate::access`]) is rebuilt, not converted: every
//! object of a call the coordinator committed becomes readable by that call's episode, and so
//! do the input, request, effect records and results of calls journaled but not committed.
//! Only entries that the coordinator's own task state places at their index count, so a
//! record that a client commit once slipped into the log grants nothing, whatever a build
//! that indexed it may have granted. A call's invocation record and effect records are read
//! as the kinds the log names them, whatever kind their bytes were first stored as (an agent
//! can send them, exactly, as an earlier call's arguments); the episode's grant of such an
//! object carries the kind it names, as a live call's would.
//!
//! The migration either commits whole, with the schema version set to 2, or leaves the file as
//! it was; two processes opening the same store race safely (the second finds version 2).

use std::ops::Bound;
use std::time::Instant;

use heed::byteorder::BigEndian;
use heed::types::{Bytes, Str, U64};
use heed::{CommitOrAbort, Database, Env, PutFlags, RwTxn, WithoutTls};

use crate::access;
use crate::broker::EffectRecord;
use crate::invocations::Row as InvocationRow;
use crate::log::{self, Entry};
use crate::log_row::Row as LogRow;
use crate::object::{sid, Object, ObjectView, Ref};
use crate::schema::{ref_key, semantic_prefix, ENTRY_HASH, OBJECT, SCHEMA_VERSION, WORLD_REF};
use crate::storage::{StoreError, META_TABLE, VERSION_KEY as META_SCHEMA};
use crate::task::{self, TaskPhase, TaskState};

thread_local! {
    /// Set while [`keeping_schema`] opens a store on this thread: the older schema it finds.
    static KEEPING: std::cell::Cell<Option<Option<u32>>> = const { std::cell::Cell::new(None) };
}

/// Run `open` (which opens one store on this thread) without upgrading the store's schema, and
/// say which older schema it found. A schema-2, 3, 4 or 5 store keeps its version: this build
/// reads it as it is, and only its upgrade would change the version, after which builds of that
/// schema refuse the store. A schema-1 store, whose rows would have to move, is refused
/// ([`StoreError::SchemaMismatch`], with the older schema `Some(1)`). For the verbs that only
/// read a store (and `backup`, whose copy must open in the build that wrote the store): only
/// `serve` and the verbs that write upgrade.
pub fn keeping_schema<T>(open: impl FnOnce() -> T) -> (T, Option<u32>) {
    let before = KEEPING.with(|k| k.replace(Some(None)));
    let opened = open();
    let found = KEEPING.with(|k| k.replace(before)).flatten();
    (opened, found)
}

/// Whether an open under [`keeping_schema`] is under way on this thread.
pub(crate) fn keeping() -> bool {
    KEEPING.with(|k| k.get().is_some())
}

/// Whether the store's schema `from` is to be kept (see [`keeping_schema`]), noting it if so.
fn kept(from: u32) -> bool {
    KEEPING.with(|k| match k.get() {
        Some(_) => {
            k.set(Some(Some(from)));
            true
        }
        None => false,
    })
}

/// Rows copied per pass over a table: bounds the memory a migration holds at once.
const CHUNK: usize = 512;

/// What a migration moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Migrated {
    pub objects: u64,
    pub entries: u64,
    pub invocations: u64,
    /// Keys of the rebuilt `readers` table.
    pub readers: u64,
}

type Raw<'e> = Database<'e, Bytes, Bytes>;
/// Keys and values copied out of a table.
type Rows = Vec<(Vec<u8>, Vec<u8>)>;

/// Migrate the schema-1 store in `env` to schema 2. A no-op if another process already did.
pub(crate) fn schema_1_to_2(
    env: &Env<WithoutTls>,
    map_size: usize,
) -> Result<Migrated, StoreError> {
    if kept(1) {
        return Err(StoreError::SchemaMismatch {
            found: "1".into(),
            expected: SCHEMA_VERSION,
        });
    }
    let started = Instant::now();
    let wtxn = env
        .write_txn()
        .map_err(|e| StoreError::from_heed(e, map_size))?;
    let mut done = Migrated::default();
    let outcome = env
        .create_databases_and_commit(wtxn, |dbo, wtxn| -> Result<_, MigrateError> {
            let meta: Database<Str, Bytes> = dbo.create_database(wtxn, Some(META_TABLE))?;
            if !still_at(&meta, wtxn, b"1")? {
                return Ok(CommitOrAbort::Abort(()));
            }
            macro_rules! open {
                ($wtxn:expr, $name:literal) => {
                    dbo.open_database::<Bytes, Bytes>($wtxn, Some($name))?
                        .ok_or_else(|| corrupt(format!("schema-1 table {} is missing", $name)))?
                };
            }
            let old = Old {
                objects: open!(wtxn, "objects"),
                log: open!(wtxn, "log"),
                world_refs: open!(wtxn, "world_refs"),
                worlds: open!(wtxn, "worlds"),
                entry_hashes: open!(wtxn, "entry_hashes"),
                heads: open!(wtxn, "heads"),
                journal_by_invocation: open!(wtxn, "journal_by_invocation"),
                tasks: open!(wtxn, "tasks"),
                by_semantic_id: open!(wtxn, "by_semantic_id"),
            };
            let new = New {
                objects: dbo.create_database(wtxn, Some("object_rows"))?,
                refs: dbo.create_database(wtxn, Some("refs"))?,
                semantic_ids: dbo.create_database(wtxn, Some("semantic_ids"))?,
                entries: dbo.create_database(wtxn, Some("entries"))?,
                invocations: dbo.create_database(wtxn, Some("invocations"))?,
                // The same name as the last schema-1 builds' table, whose keys it replaces.
                readers: dbo.create_database(wtxn, Some("readers"))?,
            };
            done = Migrated {
                objects: objects(wtxn, &old, &new)?,
                entries: entries(wtxn, &old, &new)?,
                invocations: invocations(wtxn, &old, &new)?,
                readers: readers(wtxn, &new)?,
            };
            for t in [
                old.objects,
                old.log,
                old.world_refs,
                old.worlds,
                old.entry_hashes,
                old.heads,
                old.journal_by_invocation,
                old.tasks,
                old.by_semantic_id,
            ] {
                // SAFETY: these handles were opened in this transaction and only read in it;
                // this process holds no other handle on them (the store opens only schema-2
                // tables), and they are never opened again.
                unsafe { t.remove(wtxn)? };
            }
            // Schema-1 builds marked their readers index built; schema 2 always keeps it.
            meta.delete(wtxn, "readers_index")?;
            meta.put(wtxn, META_SCHEMA, SCHEMA_VERSION.to_string().as_bytes())?;
            Ok(CommitOrAbort::<(), ()>::Commit(()))
        })
        .map_err(|e| e.into_store(map_size))?;
    if let CommitOrAbort::Abort(()) = outcome {
        // Another process migrated the store between our look and our write transaction.
        return Ok(Migrated::default());
    }
    // A warning, so that one-shot verbs (which log warnings only) say it too: builds of
    // schema 1 cannot open the store any more.
    tracing::warn!(
        objects = done.objects,
        entries = done.entries,
        invocations = done.invocations,
        readers = done.readers,
        "migrated the store from schema 1 to schema {SCHEMA_VERSION} in {:.1}s; builds that know only schema 1 can no longer open it",
        started.elapsed().as_secs_f64()
    );
    Ok(done)
}

/// Schema 2 → schema 6: nothing moves. Schema 3 lets the newest objects and entries wait for
/// their `refs` keys ([`crate::ref_tail`]); a schema-2 store has every key, which is read as a
/// tail that is empty. Its invocation rows stay where schema 4 and later still read them (see
/// [`schema_3_to_6`]), and its semantic-id index is whole (see [`schema_4_to_6`]). Only the
/// version changes, so that builds of schema 2, which would not find the tail's objects, refuse
/// the store from now on.
pub(crate) fn schema_2_to_6(env: &Env<WithoutTls>, map_size: usize) -> Result<(), StoreError> {
    stamp(env, map_size, 2)
}

/// Schema 3 → schema 6: nothing moves. Schema 4 stores new invocation rows in arrival order
/// (`invocation_rows`) and still reads, and rewrites in place, the rows schema 3 keyed by id
/// ([`crate::invocations`]). Only the version changes, so that builds of schema 3, which would
/// not find the new rows, refuse the store from now on.
pub(crate) fn schema_3_to_6(env: &Env<WithoutTls>, map_size: usize) -> Result<(), StoreError> {
    stamp(env, map_size, 3)
}

/// Schema 4 → schema 6: nothing moves. Schema 5 lets the newest objects wait for the
/// semantic-id index ([`crate::semantic_index`]); a store without the tail's watermark has
/// every object indexed. Only the version changes, so that builds of schema 4, which would not
/// list the waiting objects by semantic id, refuse the store from now on.
pub(crate) fn schema_4_to_6(env: &Env<WithoutTls>, map_size: usize) -> Result<(), StoreError> {
    stamp(env, map_size, 4)
}

/// Schema 5 → schema 6: nothing moves. Schema 6 closes an intent whose handler was never
/// started as `withdrawn` and gives its units back ([`crate::journal`]); a schema-5 store has
/// no such intent. Only the version changes, so that builds of schema 5, which would read the
/// status as damage and count the units as spent, refuse the store from now on.
pub(crate) fn schema_5_to_6(env: &Env<WithoutTls>, map_size: usize) -> Result<(), StoreError> {
    stamp(env, map_size, 5)
}

/// Record [`SCHEMA_VERSION`] over `from`, unless another process did first or the schema is
/// kept ([`keeping_schema`]).
fn stamp(env: &Env<WithoutTls>, map_size: usize, from: u32) -> Result<(), StoreError> {
    if kept(from) {
        return Ok(());
    }
    let wtxn = env
        .write_txn()
        .map_err(|e| StoreError::from_heed(e, map_size))?;
    let outcome = env
        .create_databases_and_commit(wtxn, |dbo, wtxn| -> Result<_, MigrateError> {
            let meta: Database<Str, Bytes> = dbo.create_database(wtxn, Some(META_TABLE))?;
            if !still_at(&meta, wtxn, from.to_string().as_bytes())? {
                return Ok(CommitOrAbort::Abort(()));
            }
            meta.put(wtxn, META_SCHEMA, SCHEMA_VERSION.to_string().as_bytes())?;
            Ok(CommitOrAbort::<(), ()>::Commit(()))
        })
        .map_err(|e| e.into_store(map_size))?;
    if let CommitOrAbort::Commit(()) = outcome {
        tracing::warn!(
            "upgraded the store from schema {from} to schema {SCHEMA_VERSION} (no data moved); builds that know only schema {from} can no longer open it"
        );
    }
    Ok(())
}

/// Whether the store in `wtxn` still has schema `from`: `false` when another process upgraded
/// it between our look and this transaction; any other version is refused.
fn still_at(
    meta: &Database<Str, Bytes>,
    wtxn: &RwTxn<'_>,
    from: &[u8],
) -> Result<bool, MigrateError> {
    match meta.get(wtxn, META_SCHEMA)? {
        Some(v) if v == from => Ok(true),
        Some(v) if v == SCHEMA_VERSION.to_string().as_bytes() => Ok(false),
        other => Err(MigrateError::Store(StoreError::SchemaMismatch {
            found: other.map_or("none".into(), |v| String::from_utf8_lossy(v).into_owned()),
            expected: SCHEMA_VERSION,
        })),
    }
}

#[derive(Debug)]
enum MigrateError {
    Store(StoreError),
    Heed(heed::Error),
}

impl MigrateError {
    fn into_store(self, map_size: usize) -> StoreError {
        match self {
            MigrateError::Store(s) => s,
            MigrateError::Heed(h) => StoreError::from_heed(h, map_size),
        }
    }
}

impl From<heed::Error> for MigrateError {
    fn from(e: heed::Error) -> Self {
        MigrateError::Heed(e)
    }
}

impl From<StoreError> for MigrateError {
    fn from(e: StoreError) -> Self {
        MigrateError::Store(e)
    }
}

fn corrupt(why: String) -> MigrateError {
    MigrateError::Store(StoreError::Corrupt(format!(
        "cannot migrate this schema-1 store: {why}"
    )))
}

struct Old<'e> {
    objects: Raw<'e>,
    log: Raw<'e>,
    world_refs: Raw<'e>,
    worlds: Raw<'e>,
    entry_hashes: Raw<'e>,
    heads: Raw<'e>,
    journal_by_invocation: Raw<'e>,
    tasks: Raw<'e>,
    by_semantic_id: Raw<'e>,
}

struct New<'e> {
    objects: Database<'e, U64<BigEndian>, Bytes>,
    refs: Database<'e, Bytes, U64<BigEndian>>,
    semantic_ids: Raw<'e>,
    entries: Database<'e, U64<BigEndian>, Bytes>,
    invocations: Database<'e, Str, Bytes>,
    readers: Raw<'e>,
}

/// Up to [`CHUNK`] rows of `table` after `after`, copied out of the transaction.
fn chunk(wtxn: &RwTxn<'_>, table: Raw<'_>, after: Option<&[u8]>) -> Result<Rows, MigrateError> {
    let range = (
        after.map_or(Bound::Unbounded, Bound::Excluded),
        Bound::<&[u8]>::Unbounded,
    );
    let mut rows = Vec::with_capacity(CHUNK);
    for item in table.range(wtxn, &range)?.take(CHUNK) {
        let (k, v) = item?;
        rows.push((k.to_vec(), v.to_vec()));
    }
    Ok(rows)
}

/// Every row of `table`, in key order, a chunk at a time.
fn each_row(
    wtxn: &mut RwTxn<'_>,
    table: Raw<'_>,
    mut f: impl FnMut(&mut RwTxn<'_>, &[u8], &[u8]) -> Result<(), MigrateError>,
) -> Result<u64, MigrateError> {
    let mut last: Option<Vec<u8>> = None;
    let mut n = 0;
    loop {
        let rows = chunk(wtxn, table, last.as_deref())?;
        let Some((k, _)) = rows.last() else {
            return Ok(n);
        };
        last = Some(k.clone());
        for (k, v) in &rows {
            f(wtxn, k, v)?;
            n += 1;
        }
    }
}

/// The semantic id of a schema-1 object envelope: `interfaceHash(32) | u16 len | semanticId | …`
/// (schema 2 keeps the envelope as it is).
fn semantic_id(envelope: &[u8]) -> Option<&str> {
    let len = u16::from_be_bytes(envelope.get(32..34)?.try_into().ok()?) as usize;
    std::str::from_utf8(envelope.get(34..34 + len)?).ok()
}

fn objects(wtxn: &mut RwTxn<'_>, old: &Old<'_>, new: &New<'_>) -> Result<u64, MigrateError> {
    let mut seq = 0u64;
    let n = each_row(wtxn, old.objects, |wtxn, key, envelope| {
        let r = Ref::from_slice(key).ok_or_else(|| corrupt("an object key is not a ref".into()))?;
        let sid = semantic_id(envelope)
            .ok_or_else(|| corrupt(format!("object {r} has a damaged envelope")))?;
        let mut row = Vec::with_capacity(32 + envelope.len());
        row.extend_from_slice(key);
        row.extend_from_slice(envelope);
        new.objects
            .put_with_flags(wtxn, PutFlags::APPEND, &seq, &row)?;
        new.refs.put(wtxn, &ref_key(&r, OBJECT), &seq)?;
        let mut index_key = semantic_prefix(sid)?;
        index_key.extend_from_slice(&seq.to_be_bytes());
        new.semantic_ids.put(wtxn, &index_key, &[])?;
        seq += 1;
        Ok(())
    })?;
    let indexed = old.by_semantic_id.len(wtxn)?;
    if indexed != n {
        return Err(corrupt(format!(
            "{n} objects but {indexed} semantic-id index entries"
        )));
    }
    Ok(n)
}

fn entries(wtxn: &mut RwTxn<'_>, old: &Old<'_>, new: &New<'_>) -> Result<u64, MigrateError> {
    let mut last_world = None;
    let n = each_row(wtxn, old.log, |wtxn, key, entry| {
        let index = <[u8; 8]>::try_from(key)
            .map(u64::from_be_bytes)
            .map_err(|_| corrupt("a log key is not 8 bytes".into()))?;
        let world_ref = old
            .world_refs
            .get(wtxn, key)?
            .and_then(Ref::from_slice)
            .ok_or_else(|| corrupt(format!("entry {index} has no world ref")))?;
        let world = old
            .worlds
            .get(wtxn, world_ref.as_bytes())?
            .ok_or_else(|| corrupt(format!("the world of entry {index} is missing")))?
            .to_vec();
        let row = LogRow {
            world_ref,
            // Schema 2's form: every migrated entry is in `refs`, and none is read back for it.
            entry_hash: None,
            entry,
            world: &world,
        }
        .encode();
        new.entries.put(wtxn, &index, &row)?;
        new.refs
            .put(wtxn, &ref_key(&world_ref, WORLD_REF), &index)?;
        last_world = Some(world_ref);
        Ok(())
    })?;
    each_row(wtxn, old.entry_hashes, |wtxn, key, index| {
        let hash =
            Ref::from_slice(key).ok_or_else(|| corrupt("an entry hash is not 32 bytes".into()))?;
        let index = <[u8; 8]>::try_from(index)
            .map(u64::from_be_bytes)
            .map_err(|_| corrupt("an entry-hash index value is not 8 bytes".into()))?;
        new.refs.put(wtxn, &ref_key(&hash, ENTRY_HASH), &index)?;
        Ok(())
    })?;
    // Schema 2 has no head pointer: the newest entry selects the head. Schema 1's must agree.
    let head = old.heads.get(wtxn, b"selected")?.and_then(Ref::from_slice);
    if head != last_world {
        return Err(corrupt(format!(
            "the head ({}) is not the world of the last entry ({})",
            head.map_or("none".into(), |r| r.to_string()),
            last_world.map_or("none".into(), |r| r.to_string())
        )));
    }
    Ok(n)
}

fn invocations(wtxn: &mut RwTxn<'_>, old: &Old<'_>, new: &New<'_>) -> Result<u64, MigrateError> {
    let n = each_row(wtxn, old.journal_by_invocation, |wtxn, key, state| {
        let id = std::str::from_utf8(key)
            .map_err(|_| corrupt("an invocation id is not UTF-8".into()))?;
        // Schema 1 kept only each invocation's current state: it is the row, with nothing to
        // resolve it later (an intent left indeterminate is never retried).
        let row = InvocationRow {
            intent: None,
            journal: Some(state),
            task: None,
        };
        new.invocations.put(wtxn, id, &row.encode())?;
        Ok(())
    })?;
    let mut tasks_only = 0;
    each_row(wtxn, old.tasks, |wtxn, key, state| {
        let split = key
            .iter()
            .position(|b| *b == 0)
            .ok_or_else(|| corrupt("a task key has no episode".into()))?;
        let (episode, task_key) = match (
            std::str::from_utf8(&key[..split]),
            std::str::from_utf8(&key[split + 1..]),
        ) {
            (Ok(e), Ok(t)) => (e, t),
            _ => return Err(corrupt("a task key is not UTF-8".into())),
        };
        let id = task::invocation_key(episode, task_key)?;
        let journal = new
            .invocations
            .get(wtxn, &id)?
            .map(|bytes| {
                InvocationRow::decode(bytes)
                    .and_then(|r| r.journal.map(<[u8]>::to_vec))
                    .ok_or_else(|| corrupt(format!("invocation row {id} is damaged")))
            })
            .transpose()?;
        if journal.is_none() {
            tasks_only += 1;
        }
        let row = InvocationRow {
            intent: None,
            journal: journal.as_deref(),
            task: Some(state),
        };
        new.invocations.put(wtxn, &id, &row.encode())?;
        Ok(())
    })?;
    Ok(n + tasks_only)
}

/// The refs an invocation record names.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct RecordRefs {
    invocation_id: String,
    episode_id: String,
    input: Ref,
    output: Ref,
    plan: Ref,
    #[serde(default)]
    effects: Vec<Ref>,
}

/// The sequence and semantic id of a migrated object.
fn object_kind(
    wtxn: &RwTxn<'_>,
    new: &New<'_>,
    r: &Ref,
) -> Result<Option<(u64, String)>, MigrateError> {
    let Some(seq) = new.refs.get(wtxn, &ref_key(r, OBJECT))? else {
        return Ok(None);
    };
    let view = new
        .objects
        .get(wtxn, &seq)?
        .and_then(|row| ObjectView::decode(*r, row.get(32..)?));
    Ok(view.map(|v| (seq, v.semantic_id.to_owned())))
}

/// An object and the header its grant carries (see [`told_as`]).
type Header = (Ref, Vec<u8>);

/// An object's payload, and its grant's header when it was stored first as another kind.
type Told = (Vec<u8>, Option<Header>);

/// A migrated object read as the kind the log names it (`semantic_id`, made by
/// `provenance`), whatever kind its bytes were first stored as: its payload, and the header a
/// grant of it carries when the stored kind is another ([`access::grant`]). An agent could send
/// a call's record or effect record, exactly, as the arguments of an earlier call; requiring
/// the stored kind left that call's episode without its grants.
fn told_as(
    wtxn: &RwTxn<'_>,
    new: &New<'_>,
    r: &Ref,
    semantic_id: &str,
    provenance: &str,
) -> Result<Option<Told>, MigrateError> {
    let Some(seq) = new.refs.get(wtxn, &ref_key(r, OBJECT))? else {
        return Ok(None);
    };
    let Some(view) = new
        .objects
        .get(wtxn, &seq)?
        .and_then(|row| ObjectView::decode(*r, row.get(32..)?))
    else {
        return Ok(None);
    };
    let header = (view.semantic_id != semantic_id).then(|| {
        let told = Object::new(semantic_id, provenance, view.payload.to_vec());
        (*r, told.encode_header())
    });
    Ok(Some((view.payload.to_vec(), header)))
}

/// The task state in a migrated invocation row.
fn task_state(
    wtxn: &RwTxn<'_>,
    new: &New<'_>,
    id: &str,
) -> Result<Option<TaskState>, MigrateError> {
    Ok(new
        .invocations
        .get(wtxn, id)?
        .and_then(InvocationRow::decode)
        .and_then(|row| row.task)
        .and_then(|t| serde_json::from_slice(t).ok()))
}

/// `records` and the request and result each names; the headers of the records stored first
/// as another kind are added to `headers`.
fn with_effects(
    wtxn: &RwTxn<'_>,
    new: &New<'_>,
    records: &[Ref],
    headers: &mut Vec<Header>,
) -> Result<Vec<Ref>, MigrateError> {
    let mut out = Vec::with_capacity(records.len() * 3);
    for record in records {
        out.push(*record);
        let Some((payload, header)) =
            told_as(wtxn, new, record, sid::EFFECT_RECORD, EFFECT_RECORD_WRITER)?
        else {
            continue;
        };
        if let Ok(rec) = serde_json::from_slice::<EffectRecord>(&payload) {
            out.push(rec.request_ref);
            out.extend(rec.result_ref);
            headers.extend(header);
        }
    }
    Ok(out)
}

/// The provenance the coordinator gives every effect record.
const EFFECT_RECORD_WRITER: &str = "host/broker";

/// Let `episode` read `refs` (as [`access::grant`] does for live calls), each as the kind
/// `headers` says where it names it.
fn grant(
    wtxn: &mut RwTxn<'_>,
    new: &New<'_>,
    episode: &str,
    refs: &[Ref],
    headers: &[Header],
) -> Result<u64, MigrateError> {
    let mut n = 0;
    for r in refs {
        let Some((seq, kind)) = object_kind(wtxn, new, r)? else {
            continue;
        };
        if access::is_public(&kind) {
            continue;
        }
        let key = access::key(episode, seq);
        if new.readers.get(wtxn, &key)?.is_none() {
            let header = headers.iter().find(|(h, _)| h == r).map(|(_, h)| h);
            new.readers
                .put(wtxn, &key, header.map_or(&[][..], Vec::as_slice))?;
            n += 1;
        }
    }
    Ok(n)
}

/// What a call lets its episode read: the episode, the refs, and the grant headers of those
/// stored first as another kind.
type CallGrants = (String, Vec<Ref>, Vec<Header>);

/// What entry `index` lets its episode read: every object of a call the coordinator committed
/// there (its task state says so), else nothing.
fn committed_call(
    wtxn: &RwTxn<'_>,
    new: &New<'_>,
    index: u64,
    entry: &[u8],
) -> Result<Option<CallGrants>, MigrateError> {
    let Ok(entry) = Entry::from_bytes(entry) else {
        return Ok(None);
    };
    if !entry.header.written_by.starts_with(log::COORDINATOR_PREFIX) {
        return Ok(None);
    }
    let record = entry.transition_ref;
    // The entry names its invocation record: that is its kind, whatever kind was stored first.
    let Some((payload, header)) = told_as(
        wtxn,
        new,
        &record,
        sid::INVOCATION_RECORD,
        &entry.header.written_by,
    )?
    else {
        return Ok(None);
    };
    let Ok(refs) = serde_json::from_slice::<RecordRefs>(&payload) else {
        return Ok(None);
    };
    let Some((surface, episode, _)) = task::split_invocation_id(&refs.invocation_id) else {
        return Ok(None);
    };
    let state = task_state(wtxn, new, &refs.invocation_id)?;
    let ours = matches!(surface, "mcp" | "a2a")
        && episode == refs.episode_id
        && state.is_some_and(|s| {
            s.phase == TaskPhase::Committed
                && s.entry_index == Some(index)
                && s.invocation_id == refs.invocation_id
        });
    if !ours {
        return Ok(None);
    }
    let mut headers = Vec::from_iter(header);
    let mut all = vec![record, refs.input, refs.output, refs.plan];
    all.extend(with_effects(wtxn, new, &refs.effects, &mut headers)?);
    Ok(Some((refs.episode_id, all, headers)))
}

/// Rebuild `readers` from the migrated log and invocation rows (see the module doc).
fn readers(wtxn: &mut RwTxn<'_>, new: &New<'_>) -> Result<u64, MigrateError> {
    new.readers.clear(wtxn)?;
    let mut n = 0;
    let entries = new.entries.remap_types::<Bytes, Bytes>();
    each_row(wtxn, entries, |wtxn, key, row| {
        let index = <[u8; 8]>::try_from(key)
            .map(u64::from_be_bytes)
            .map_err(|_| corrupt("a log key is not 8 bytes".into()))?;
        let entry = LogRow::decode(row)
            .ok_or_else(|| corrupt(format!("log row {index} is damaged")))?
            .entry;
        if let Some((episode, refs, headers)) = committed_call(wtxn, new, index, entry)? {
            n += grant(wtxn, new, &episode, &refs, &headers)?;
        }
        Ok(())
    })?;
    // Calls journaled but never committed: pending, or their effect ran and was not recorded.
    let rows = new.invocations.remap_types::<Bytes, Bytes>();
    each_row(wtxn, rows, |wtxn, key, row| {
        let Ok(id) = std::str::from_utf8(key) else {
            return Ok(());
        };
        let Some(row) = InvocationRow::decode(row) else {
            return Ok(());
        };
        let Some(state) = row
            .task
            .and_then(|t| serde_json::from_slice::<TaskState>(t).ok())
        else {
            return Ok(());
        };
        let Some((_, episode, _)) = task::split_invocation_id(id) else {
            return Ok(());
        };
        if state.phase == TaskPhase::Committed || state.invocation_id != id {
            return Ok(());
        }
        let request = row
            .journal
            .and_then(|j| serde_json::from_slice::<crate::journal::JournalState>(j).ok())
            .map(|j| j.intent.request_ref);
        let mut all = vec![state.input_ref];
        all.extend(request);
        let episode = episode.to_owned();
        let mut headers = Vec::new();
        all.extend(with_effects(
            wtxn,
            new,
            &state.effect_records,
            &mut headers,
        )?);
        n += grant(wtxn, new, &episode, &all, &headers)?;
        Ok(())
    })?;
    Ok(n)
}
