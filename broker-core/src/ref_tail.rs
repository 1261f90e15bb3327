//! The tail of the content-address index: objects, entries and invocation rows stored since
//! `refs` was last brought up to date are found through a map in memory, and `refs` takes them
//! in bulk ("a merge").
//!
//! # Why
//!
//! `refs` is keyed by content hash, so every new key lands on a leaf of its own, and a group
//! commit copied one leaf and its branch pages per new object and two per new entry (its hash
//! and its world's ref): about half of the pages a call wrote (`docs/benchmarks.md`, "The
//! content-address index's tail"). Objects and entries are themselves stored in arrival order
//! (`object_rows`, sequence → ref ‖ envelope; `entries`, index → world ref ‖ entry ‖ world), so
//! the rows at the end of those tables already say which keys are new. Schema 4 stores
//! invocation rows the same way (`invocation_rows`, sequence → id ‖ row, keyed in `refs` by the
//! digest of the id), where a row keyed by its random id cost a leaf of its own. Schema 3
//! lets a row's keys wait before they go into `refs`: the rows not yet indexed, the tail, are
//! found through a map in the memory of the process that writes them, and merged into `refs`
//! in bulk, where a merge's keys, put in key order, share leaves.
//!
//! # Partitions
//!
//! The keys are cut into sixteen partitions by the top four bits of their first byte, and
//! each kind keeps one watermark per partition in `ref_index` (`objects_indexed_0` …
//! `entries_indexed_f`): the keys of partition `p` of rows below its watermark are in `refs`.
//! Every [`MERGE_AT`]` / 16` rows of a kind, the partition whose watermark is oldest is merged:
//! a sixteenth of the keys, which touches a sixteenth of `refs`' leaves, so the commit that
//! carries it is only a little larger than the others. Each partition is merged once every
//! [`MERGE_AT`] rows, so the tail stays under that many rows.
//!
//! # Who may trust its map
//!
//! `ref_index` also records which open store last claimed the tail (`appender`, a random
//! token per [`crate::store::Store`] handle). A handle claims it before it stores its first
//! object or entry, reading the whole tail into its map in that transaction, and then notes
//! every key it adds. In a snapshot whose appender is this handle the map is complete: a ref
//! found neither there nor in `refs` is absent. In any other snapshot (another process stored
//! objects since, or this handle never stored one) a miss scans the snapshot's tail rows,
//! skipping those read into the map when the store was opened. A lookup checks the map's
//! entry against the row it names. A merge believes the map without reading the rows, except
//! for the rows an undone transaction had written: the writer tells the map when one is undone
//! ([`ended`]), and the entries in the rows it spanned (whose numbers other rows take next)
//! are checked against their rows until every partition has dropped them. A merge drops from
//! the map the partition's generation before the one it indexed; a reader whose snapshot is
//! older than both merges of that partition scans.
//!
//! The token is believed only of a store that is the one this handle wrote: a copy of an
//! older state of it (a backup's `data.mdb` copied over the live one in place) carries this
//! handle's token while it lacks rows the map names, and the map then said objects were
//! stored that were not. The store's writer refuses every write from the first snapshot whose
//! last transaction is older than its own last commit (`storage::map::MapLock::rolled_back`),
//! before any operation claims the tail, so no write trusts the map on such a snapshot.
//!
//! Crash safety needs nothing new: the tail's rows, and a merge's keys and watermark, are
//! written in the transactions that write them, and the map is rebuilt from the rows.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use heed::types::Bytes;

use crate::invocation_row;
use crate::log_row::Row as LogRow;
use crate::object::Ref;
use crate::schema::{
    ref_key, ENTRY_HASH, INVOCATION, INVOCATION_ROWS, LOG, OBJECT, OBJECTS, REFS, REF_INDEX,
    WORLD_REF,
};
use crate::storage::{Ended, LayoutState, ReadCtx, Seq, Store, StoreError, Table, WriteCtx};

/// The most rows of one kind whose keys wait in the tail: every `MERGE_AT / PARTITIONS` rows,
/// one partition is merged. A full round of merges copies at most every leaf of `refs` once, so
/// a longer tail spreads that over more rows, while the map (about 50 bytes a key, two
/// generations) and the scans of processes that do not own the tail stay small.
pub const MERGE_AT: u64 = 16_384;

/// Partitions of the keys, by the top four bits of their first byte.
const PARTITIONS: usize = 16;

/// `ref_index` keys of the watermarks, by kind and partition.
const MARKS: [[&str; PARTITIONS]; KINDS.len()] = [
    [
        "objects_indexed_0",
        "objects_indexed_1",
        "objects_indexed_2",
        "objects_indexed_3",
        "objects_indexed_4",
        "objects_indexed_5",
        "objects_indexed_6",
        "objects_indexed_7",
        "objects_indexed_8",
        "objects_indexed_9",
        "objects_indexed_a",
        "objects_indexed_b",
        "objects_indexed_c",
        "objects_indexed_d",
        "objects_indexed_e",
        "objects_indexed_f",
    ],
    [
        "entries_indexed_0",
        "entries_indexed_1",
        "entries_indexed_2",
        "entries_indexed_3",
        "entries_indexed_4",
        "entries_indexed_5",
        "entries_indexed_6",
        "entries_indexed_7",
        "entries_indexed_8",
        "entries_indexed_9",
        "entries_indexed_a",
        "entries_indexed_b",
        "entries_indexed_c",
        "entries_indexed_d",
        "entries_indexed_e",
        "entries_indexed_f",
    ],
    [
        "invocations_indexed_0",
        "invocations_indexed_1",
        "invocations_indexed_2",
        "invocations_indexed_3",
        "invocations_indexed_4",
        "invocations_indexed_5",
        "invocations_indexed_6",
        "invocations_indexed_7",
        "invocations_indexed_8",
        "invocations_indexed_9",
        "invocations_indexed_a",
        "invocations_indexed_b",
        "invocations_indexed_c",
        "invocations_indexed_d",
        "invocations_indexed_e",
        "invocations_indexed_f",
    ],
];

/// Watermarks of one kind, by partition.
type Marks = [u64; PARTITIONS];

fn partition(key: &Key) -> usize {
    usize::from(key[0] >> 4)
}

/// `ref_index` key: the token of the handle that claimed the tail last.
const APPENDER: &str = "appender";

/// A `refs` key: ref ‖ kind ([`ref_key`]).
type Key = [u8; 33];

/// The kinds of rows whose keys wait in the tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `object_rows`: one key per row, the object's ref.
    Objects,
    /// `entries`: two keys per row, the entry's hash and the ref of the world it selects.
    Entries,
    /// `invocation_rows`: one key per row, the digest of the invocation's id.
    Invocations,
}

const KINDS: [Kind; 3] = [Kind::Objects, Kind::Entries, Kind::Invocations];

impl Kind {
    fn table(self) -> Table<Seq, Bytes> {
        match self {
            Kind::Objects => OBJECTS,
            Kind::Entries => LOG,
            Kind::Invocations => INVOCATION_ROWS,
        }
    }

    /// The `ref_index` key of partition `p`'s watermark.
    fn mark(self, p: usize) -> &'static str {
        MARKS[self.slot()][p]
    }

    fn slot(self) -> usize {
        match self {
            Kind::Objects => 0,
            Kind::Entries => 1,
            Kind::Invocations => 2,
        }
    }

    fn of(key: &Key) -> Kind {
        match key[32] {
            OBJECT => Kind::Objects,
            INVOCATION => Kind::Invocations,
            _ => Kind::Entries,
        }
    }

    /// The `refs` keys of a row (at most two; none allocated: merges and scans read thousands
    /// of rows). A damaged row gives the keys that can still be read from it (none, or only
    /// its world's ref): damage is `worldd doctor`'s to report, and must not stop the store
    /// from writing or merging.
    fn keys(self, row: &[u8]) -> [Option<Key>; 2] {
        match self {
            Kind::Objects => [
                row.get(..32)
                    .and_then(Ref::from_slice)
                    .map(|object| ref_key(&object, OBJECT)),
                None,
            ],
            Kind::Entries => match LogRow::decode(row) {
                // Every row written since schema 3 carries its entry's hash; older rows are all
                // in `refs` (their store had no tail), so none of them is read here.
                Some(row) => [
                    Some(ref_key(&row.world_ref, WORLD_REF)),
                    row.entry_hash.map(|hash| ref_key(&hash, ENTRY_HASH)),
                ],
                None => [None, None],
            },
            Kind::Invocations => [
                invocation_row::split(row).map(|(id, _)| invocation_row::key(id)),
                None,
            ],
        }
    }

    /// Whether `key` is one of the keys of `row` (cheaper than [`Kind::keys`] where it can be).
    fn holds(self, row: &[u8], key: &Key) -> bool {
        match (self, key[32]) {
            (Kind::Objects, _) | (Kind::Entries, WORLD_REF) => row.get(..32) == Some(&key[..32]),
            (Kind::Entries | Kind::Invocations, _) => self.keys(row).contains(&Some(*key)),
        }
    }
}

/// A store handle's map of the tail, and its token.
pub(crate) struct RefTail {
    me: u64,
    merge_at: AtomicU64,
    known: RwLock<Known>,
}

/// `refs` key → row, one map per kind and partition, so that a merge drops the generation it
/// no longer needs from its own partition's map without visiting the others'.
#[derive(Default)]
struct Maps([[HashMap<Key, u64>; PARTITIONS]; KINDS.len()]);

impl Maps {
    fn of(&mut self, kind: Kind, p: usize) -> &mut HashMap<Key, u64> {
        &mut self.0[kind.slot()][p]
    }

    fn get(&self, key: &Key) -> Option<u64> {
        self.0[Kind::of(key).slot()][partition(key)]
            .get(key)
            .copied()
    }

    fn insert(&mut self, key: Key, seq: u64) {
        self.of(Kind::of(&key), partition(&key)).insert(key, seq);
    }
}

#[derive(Default)]
struct Known {
    /// `refs` key → row of the tail keys this handle added or read.
    map: Maps,
    /// By kind and partition: keys of rows below `base` may have been dropped from the map
    /// (the generation before a merge's).
    base: [Marks; KINDS.len()],
    /// By kind: rows from the lowest watermark up to `loaded` were read into the map from a
    /// committed snapshot at open.
    loaded: [u64; KINDS.len()],
    /// By kind: the watermarks as this handle last wrote or read them, which choose the next
    /// merge (a merge reads the real ones in its transaction).
    marks: [Marks; KINDS.len()],
    /// By kind: the lowest and highest rows noted since the last commit ended.
    written: [Option<(u64, u64)>; KINDS.len()],
    /// By kind: rows an undone transaction had written ([`Ended::Undone`]), lowest and highest:
    /// a merge checks the map's entries among them against their rows.
    doubtful: [Vec<(u64, u64)>; KINDS.len()],
}

impl Known {
    fn doubts(&self, kind: Kind, seq: u64) -> bool {
        self.doubtful[kind.slot()]
            .iter()
            .any(|&(low, high)| (low..=high).contains(&seq))
    }
}

impl RefTail {
    fn new() -> RefTail {
        let mut token = [0u8; 8];
        // Without randomness the process id still tells this process's handles apart from
        // other processes'; two handles of one process never coexist on one store.
        let me = match getrandom::fill(&mut token) {
            Ok(()) => u64::from_le_bytes(token),
            Err(_) => u64::from(std::process::id()),
        };
        RefTail {
            me,
            merge_at: AtomicU64::new(MERGE_AT),
            known: RwLock::new(Known::default()),
        }
    }

    fn read(&self) -> RwLockReadGuard<'_, Known> {
        self.known.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Known> {
        self.known.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// The world layout's state for a newly opened store ([`crate::storage::Layout::state`]).
pub(crate) fn state() -> Arc<LayoutState> {
    Arc::new(RefTail::new())
}

/// How a write transaction ended ([`crate::storage::Layout::ended`]): after an undone one, the
/// map's entries in the rows noted since the last commit are doubted until merged past.
pub(crate) fn ended(state: &LayoutState, how: Ended) {
    let Some(tail) = state.downcast_ref::<RefTail>() else {
        return;
    };
    let mut known = tail.write();
    let known = &mut *known;
    for (written, doubtful) in known.written.iter_mut().zip(known.doubtful.iter_mut()) {
        match how {
            Ended::Committed => *written = None,
            // Kept until the commit: a nested transaction's undoing leaves its batch open, and
            // the batch may still be undone.
            Ended::Undone => {
                if let Some(span) = *written {
                    doubt(doubtful, span);
                }
            }
        }
    }
}

/// The most spans of doubted rows kept apart; past it they are doubted as one span, which
/// costs merges more row reads, never a wrong key.
const DOUBTFUL_SPANS: usize = 64;

/// Add `span` to `doubtful`, joined with the last span when they meet (an undone batch, then
/// its undone rebuild, cover the same rows).
fn doubt(doubtful: &mut Vec<(u64, u64)>, span: (u64, u64)) {
    if let Some(last) = doubtful.last_mut() {
        if span.0 <= last.1.saturating_add(1) && last.0 <= span.1.saturating_add(1) {
            *last = (last.0.min(span.0), last.1.max(span.1));
            return;
        }
    }
    doubtful.push(span);
    if doubtful.len() > DOUBTFUL_SPANS {
        let low = doubtful.iter().map(|s| s.0).min().unwrap_or(span.0);
        let high = doubtful.iter().map(|s| s.1).max().unwrap_or(span.1);
        *doubtful = vec![(low, high)];
    }
}

fn tail<'t>(r: &ReadCtx<'t>) -> Result<&'t RefTail, StoreError> {
    r.state::<RefTail>().ok_or_else(not_world)
}

fn written_tail<'a>(w: &WriteCtx<'a, '_>) -> Result<&'a RefTail, StoreError> {
    w.state::<RefTail>().ok_or_else(not_world)
}

fn not_world() -> StoreError {
    StoreError::Corrupt("the store was opened without the world's tables".into())
}

/// Below which row the keys of partition `p` of `kind` are in `refs`, in this snapshot;
/// `None`: all of them (a store from before schema 3 that no handle has written to since).
fn indexed(r: &ReadCtx<'_>, kind: Kind, p: usize) -> Result<Option<u64>, StoreError> {
    REF_INDEX.get(r, kind.mark(p))
}

/// Every partition's watermark of `kind` in this snapshot; `None`: none is recorded.
fn marks(r: &ReadCtx<'_>, kind: Kind) -> Result<Option<Marks>, StoreError> {
    let mut marks = [0; PARTITIONS];
    for (p, mark) in marks.iter_mut().enumerate() {
        match indexed(r, kind, p)? {
            Some(m) => *mark = m,
            None => return Ok(None),
        }
    }
    Ok(Some(marks))
}

fn lowest(marks: &Marks) -> u64 {
    marks.iter().copied().min().unwrap_or(0)
}

/// The number of rows of `kind` in this snapshot (the next row's number).
fn stored(r: &ReadCtx<'_>, kind: Kind) -> Result<u64, StoreError> {
    Ok(kind.table().last(r)?.map_or(0, |(last, _)| last + 1))
}

/// Every key of rows `from..` of `kind` in this snapshot, with its row.
fn keys_from<'t>(
    r: &ReadCtx<'t>,
    kind: Kind,
    from: u64,
) -> Result<impl Iterator<Item = Result<(Key, u64), StoreError>> + 't, StoreError> {
    Ok(kind.table().range(r, &(from..))?.flat_map(move |row| {
        let (keys, failed) = match row {
            Ok((seq, bytes)) => (kind.keys(bytes).map(|key| key.map(|key| (key, seq))), None),
            Err(e) => ([None, None], Some(e)),
        };
        keys.into_iter().flatten().map(Ok).chain(failed.map(Err))
    }))
}

/// The row (object sequence or entry index) that `key` of `refs` names in this snapshot,
/// through the tail's map, `refs`, or (where the map cannot vouch for this snapshot) a scan of
/// the tail's rows.
pub(crate) fn find(r: &ReadCtx<'_>, key: &Key) -> Result<Option<u64>, StoreError> {
    Ok(search(r, key, false)?.map(|(seq, _)| seq))
}

/// A key's row number, with the row itself when it was asked for and exists.
pub(crate) type Found<'t> = (u64, Option<&'t [u8]>);

/// Whether row `seq` of `invocation_rows` was written by the transaction under way, as the
/// writer sees it once its operation claimed the tail. The rows this handle noted since its
/// last commit begin just past the last committed row (an undone transaction's rows are taken
/// again by the next), so a row at or past the lowest of them is this transaction's. Any other
/// view, or a row another handle wrote, is said not to be: the caller then treats the row as
/// committed, which is always sound.
pub(crate) fn invocation_written_here(r: &ReadCtx<'_>, seq: u64) -> bool {
    r.claimed_tail()
        && tail(r).is_ok_and(|tail| {
            tail.read().written[Kind::Invocations.slot()].is_some_and(|(low, _)| seq >= low)
        })
}

/// [`find`], with the row it names in the table of `key`'s kind (`None`: there is no such
/// row, damage the caller reports). A key found through the map was checked against its row
/// already, so the row is not read a second time.
pub(crate) fn find_row<'t>(r: &ReadCtx<'t>, key: &Key) -> Result<Option<Found<'t>>, StoreError> {
    search(r, key, true)
}

fn search<'t>(r: &ReadCtx<'t>, key: &Key, want_row: bool) -> Result<Option<Found<'t>>, StoreError> {
    let tail = tail(r)?;
    let kind = Kind::of(key);
    let p = partition(key);
    // The map and its bounds as of one instant: a key dropped before it is below `base`.
    let (mapped, base, loaded) = {
        let known = tail.read();
        let slot = kind.slot();
        (known.map.get(key), known.base[slot][p], known.loaded[slot])
    };
    if let Some(seq) = mapped {
        if let Some(row) = kind.table().get(r, &seq)? {
            if kind.holds(row, key) {
                return Ok(Some((seq, Some(row))));
            }
        }
    }
    let with_row = |seq: u64| -> Result<Option<Found<'t>>, StoreError> {
        let row = if want_row {
            kind.table().get(r, &seq)?
        } else {
            None
        };
        Ok(Some((seq, row)))
    };
    if let Some(seq) = REFS.get(r, key)? {
        return with_row(seq);
    }
    let Some(indexed) = indexed(r, kind, p)? else {
        return Ok(None);
    };
    let from = if indexed < base {
        // This partition was merged twice since this snapshot: its tail has left the map.
        indexed
    } else if r.claimed_tail() || REF_INDEX.get(r, APPENDER)? == Some(tail.me) {
        return Ok(None);
    } else {
        indexed.max(loaded)
    };
    for found in keys_from(r, kind, from)? {
        let (found, seq) = found?;
        if found == *key {
            return with_row(seq);
        }
    }
    Ok(None)
}

/// Read the committed tail into the map of a newly opened store.
pub(crate) fn load(store: &Store) -> Result<(), StoreError> {
    store.read(|r| {
        let tail = tail(r)?;
        let mut known = Known::default();
        for kind in KINDS {
            let Some(marks) = marks(r, kind)? else {
                continue;
            };
            for found in keys_from(r, kind, lowest(&marks))? {
                let (key, seq) = found?;
                known.map.insert(key, seq);
            }
            known.base[kind.slot()] = marks;
            known.marks[kind.slot()] = marks;
            known.loaded[kind.slot()] = stored(r, kind)?;
        }
        *tail.write() = known;
        Ok(())
    })
}

/// Make this handle the tail's appender in `w`'s transaction, before it stores an object or
/// an entry: if another handle (or none since schema 3) was, record this one and read the
/// tail of this transaction into the map, so that the map holds every key of the tail from
/// here on.
pub(crate) fn claim(w: &mut WriteCtx<'_, '_>) -> Result<(), StoreError> {
    if w.claimed_tail() {
        return Ok(());
    }
    let tail = written_tail(w)?;
    if REF_INDEX.get(&w.reader(), APPENDER)? == Some(tail.me) {
        w.note_tail_claimed();
        return Ok(());
    }
    let mut all = [[0; PARTITIONS]; KINDS.len()];
    for kind in KINDS {
        let r = w.reader();
        let marks = match marks(&r, kind)? {
            Some(marks) => marks,
            None => [stored(&r, kind)?; PARTITIONS],
        };
        let (base, loaded) = {
            let known = tail.read();
            (known.base[kind.slot()], known.loaded[kind.slot()])
        };
        // Rows read into the map at open are still there, unless a merge dropped them.
        let from = (0..PARTITIONS)
            .map(|p| {
                if marks[p] >= base[p] {
                    marks[p].max(loaded)
                } else {
                    marks[p]
                }
            })
            .min()
            .unwrap_or(0);
        let found = keys_from(&r, kind, from)?.collect::<Result<Vec<_>, _>>()?;
        let mut known = tail.write();
        for (key, seq) in found {
            known.map.insert(key, seq);
        }
        for (base, mark) in known.base[kind.slot()].iter_mut().zip(marks) {
            *base = (*base).min(mark);
        }
        known.marks[kind.slot()] = marks;
        all[kind.slot()] = marks;
    }
    for kind in KINDS {
        for (p, mark) in all[kind.slot()].iter().enumerate() {
            REF_INDEX.put(w, kind.mark(p), mark)?;
        }
    }
    REF_INDEX.put(w, APPENDER, &tail.me)?;
    w.note_tail_claimed();
    Ok(())
}

/// Note the keys of the row just stored at `seq` (after [`claim`]), and merge the partition
/// whose watermark is oldest when [`MERGE_AT`]` / 16` rows have come since the last merge.
pub(crate) fn note(w: &mut WriteCtx<'_, '_>, keys: &[Key], seq: u64) -> Result<(), StoreError> {
    let tail = written_tail(w)?;
    let Some(kind) = keys.first().map(Kind::of) else {
        return Ok(());
    };
    let every = (tail.merge_at.load(Ordering::Relaxed) / PARTITIONS as u64).max(1);
    let due = {
        let mut known = tail.write();
        for key in keys {
            known.map.insert(*key, seq);
        }
        let written = &mut known.written[kind.slot()];
        *written = Some(written.map_or((seq, seq), |(low, high)| (low.min(seq), high.max(seq))));
        let marks = known.marks[kind.slot()];
        let newest = marks.iter().copied().max().unwrap_or(0);
        (seq + 1)
            .checked_sub(newest)
            .is_some_and(|since| since >= every)
            .then(|| (0..PARTITIONS).min_by_key(|&p| marks[p]).unwrap_or(0))
    };
    if let Some(p) = due {
        merge(w, kind, p, seq + 1)?;
    }
    Ok(())
}

/// Index partition `p` of rows of `kind` from its watermark up to `to` in `refs`, in key
/// order, and record `to` as its watermark.
fn merge(w: &mut WriteCtx<'_, '_>, kind: Kind, p: usize, to: u64) -> Result<(), StoreError> {
    let tail = written_tail(w)?;
    let from = indexed(&w.reader(), kind, p)?.unwrap_or(to);
    if from >= to {
        // Another handle merged this far already: a watermark never moves back.
        return Ok(());
    }
    let mut keys = match mapped(w, kind, p, from, to)? {
        Some(keys) => {
            // Debug builds (every test run of the store and the daemon) check the map against
            // the rows it stands for: a key it lacked would leave `refs` for good.
            #[cfg(debug_assertions)]
            {
                let mut from_map = keys.clone();
                let mut from_rows = scanned(w, kind, p, from, to)?;
                from_map.sort_unstable();
                from_rows.sort_unstable();
                assert_eq!(
                    from_map, from_rows,
                    "the tail's map disagrees with the rows of {kind:?} partition {p} from {from} to {to}"
                );
            }
            keys
        }
        None => scanned(w, kind, p, from, to)?,
    };
    keys.sort_unstable();
    for (key, seq) in &keys {
        REFS.put(w, key, seq)?;
    }
    REF_INDEX.put(w, kind.mark(p), &to)?;
    // Snapshots from before this merge still find these rows' keys through the map; those
    // from before the partition's previous merge scan.
    let mut known = tail.write();
    known.map.of(kind, p).retain(|_, seq| *seq >= from);
    let base = &mut known.base[kind.slot()][p];
    *base = (*base).max(from);
    known.marks[kind.slot()][p] = to;
    // A partition's entries below its base have left the map, and no merge asks for them
    // again (`mapped` scans instead), whether or not this transaction commits: doubts below
    // every partition's base are settled.
    let floor = lowest(&known.base[kind.slot()]);
    known.doubtful[kind.slot()].retain(|&(_, high)| high >= floor);
    tracing::debug!(
        ?kind,
        partition = p,
        keys = keys.len(),
        from,
        to,
        "content-address index merged"
    );
    Ok(())
}

/// The keys of partition `p` of rows `from..to`, from the map, when it holds all of them: this
/// handle is the appender in this transaction and has dropped none of the partition's keys
/// from `from` on. Only a key in rows an undone transaction had written is checked against
/// its row ([`Known::doubtful`]): it may be that transaction's, and another row may have
/// its number now. The rest are what committed transactions wrote, which no one rewrites.
fn mapped(
    w: &WriteCtx<'_, '_>,
    kind: Kind,
    p: usize,
    from: u64,
    to: u64,
) -> Result<Option<Vec<(Key, u64)>>, StoreError> {
    let tail = written_tail(w)?;
    let r = w.reader();
    if !r.claimed_tail() && REF_INDEX.get(&r, APPENDER)? != Some(tail.me) {
        return Ok(None);
    }
    let mut keys: Vec<(Key, u64)> = Vec::new();
    let mut doubtful: Vec<(u64, Key)> = Vec::new();
    {
        let known = tail.read();
        if known.base[kind.slot()][p] > from {
            return Ok(None);
        }
        for (key, &seq) in known.map.0[kind.slot()][p].iter() {
            if !(from..to).contains(&seq) {
                continue;
            }
            if known.doubts(kind, seq) {
                doubtful.push((seq, *key));
            } else {
                keys.push((*key, seq));
            }
        }
    }
    // In row order, so that the rows are read in the order they are stored.
    doubtful.sort_unstable();
    let table = kind.table();
    for (seq, key) in doubtful {
        if table
            .get(&r, &seq)?
            .is_some_and(|row| kind.holds(row, &key))
        {
            keys.push((key, seq));
        }
    }
    Ok(Some(keys))
}

/// The keys of partition `p` of rows `from..to`, read from the rows themselves.
fn scanned(
    w: &WriteCtx<'_, '_>,
    kind: Kind,
    p: usize,
    from: u64,
    to: u64,
) -> Result<Vec<(Key, u64)>, StoreError> {
    let mut keys = Vec::new();
    for found in keys_from(&w.reader(), kind, from)? {
        let (key, seq) = found?;
        if seq >= to {
            break;
        }
        if partition(&key) == p {
            keys.push((key, seq));
        }
    }
    Ok(keys)
}

/// What [`audit`] found: `worldd doctor`'s view of the content-address index.
#[derive(Debug, Clone, Default)]
pub(crate) struct IndexAudit {
    /// Keys in `refs`.
    pub(crate) indexed: u64,
    /// Keys of rows at or above their partition's watermark: found through the tail.
    pub(crate) waiting: u64,
    /// Where `refs` and the rows disagree (the first [`MAX_FINDINGS`], then a count).
    pub(crate) findings: Vec<String>,
}

/// Findings [`audit`] lists one by one; a store damaged further is summed up in one more line.
pub(crate) const MAX_FINDINGS: usize = 100;

impl IndexAudit {
    fn finding(&mut self, more: &mut u64, finding: impl FnOnce() -> String) {
        if self.findings.len() < MAX_FINDINGS {
            self.findings.push(finding());
        } else {
            *more += 1;
        }
    }
}

fn describe(key: &[u8]) -> String {
    let what = match key.get(32) {
        Some(&OBJECT) => "object",
        Some(&ENTRY_HASH) => "entry hash",
        Some(&WORLD_REF) => "world",
        Some(&INVOCATION) => "invocation id digest",
        _ => "key",
    };
    match key.get(..32).and_then(Ref::from_slice) {
        Some(r) => format!("{what} {r}"),
        None => format!("{what} of {} bytes", key.len()),
    }
}

/// Whether `row` of `kind` is the row `key` names. An entry's row written before schema 3
/// does not carry its entry's hash (its keys were all put in `refs` when it was written): its
/// stored entry says what the hash is.
fn names(kind: Kind, row: &[u8], key: &Key) -> bool {
    if kind.holds(row, key) {
        return true;
    }
    kind == Kind::Entries
        && key[32] == ENTRY_HASH
        && LogRow::decode(row).is_some_and(|row| {
            row.entry_hash.is_none()
                && crate::canon::parse(row.entry).is_ok_and(|entry| {
                    entry["entryHash"]
                        .as_str()
                        .and_then(|h| h.parse::<Ref>().ok())
                        == Ref::from_slice(&key[..32])
                })
        })
}

/// Check `refs` against the rows it indexes, in one snapshot (`worldd doctor`): every key of
/// a row below its partition's watermark is in `refs` and names that row, and every key in
/// `refs` holds a row number and names a row that holds it. A disagreement would make a stored object, entry or
/// invocation read as absent, or as another.
pub(crate) fn audit(r: &ReadCtx<'_>) -> Result<IndexAudit, StoreError> {
    let mut audit = IndexAudit::default();
    let mut more = 0;
    for kind in KINDS {
        // No watermarks: nothing has been written since schema 2, and every key is in `refs`.
        let marks = match marks(r, kind)? {
            Some(marks) => marks,
            None => [stored(r, kind)?; PARTITIONS],
        };
        for found in keys_from(r, kind, 0)? {
            let (key, seq) = found?;
            let mark = marks[partition(&key)];
            if seq >= mark {
                audit.waiting += 1;
                continue;
            }
            // Read raw: a value that is no row number is reported once, by the pass over
            // `refs` below, instead of stopping the audit with a decoding error.
            match REFS.raw().get(r, &key)?.map(row_number) {
                Some(Some(named)) if named == seq => {}
                Some(None) => {}
                Some(Some(named)) => audit.finding(&mut more, || {
                    format!(
                        "row {seq} of {} ({}) is indexed, but refs names row {named}",
                        kind.table().name(),
                        describe(&key)
                    )
                }),
                None => audit.finding(&mut more, || {
                    format!(
                        "row {seq} of {} ({}) is below its partition's watermark {mark}, but \
                         refs has no key for it",
                        kind.table().name(),
                        describe(&key)
                    )
                }),
            }
        }
    }
    for found in REFS.raw().iter(r)? {
        let (key, value) = found?;
        audit.indexed += 1;
        let known =
            key.len() == 33 && [OBJECT, ENTRY_HASH, WORLD_REF, INVOCATION].contains(&key[32]);
        let Some(key) = <&Key>::try_from(key).ok().filter(|_| known) else {
            audit.finding(&mut more, || {
                format!("refs holds a key of no known kind ({})", describe(key))
            });
            continue;
        };
        let Some(seq) = row_number(value) else {
            audit.finding(&mut more, || {
                format!(
                    "refs holds {} byte(s) for {}, not a row number",
                    value.len(),
                    describe(key)
                )
            });
            continue;
        };
        let kind = Kind::of(key);
        match kind.table().get(r, &seq)? {
            Some(row) if names(kind, row, key) => {}
            Some(_) => audit.finding(&mut more, || {
                format!(
                    "refs names row {seq} of {} for {}, which holds something else",
                    kind.table().name(),
                    describe(key)
                )
            }),
            None => audit.finding(&mut more, || {
                format!(
                    "refs names row {seq} of {} for {}, which is not stored",
                    kind.table().name(),
                    describe(key)
                )
            }),
        }
    }
    if more > 0 {
        audit.findings.push(format!(
            "… and {more} more disagreement(s) of refs and the rows"
        ));
    }
    Ok(audit)
}

/// A `refs` value as the row number it must be (8 bytes, big-endian).
fn row_number(value: &[u8]) -> Option<u64> {
    value.try_into().ok().map(u64::from_be_bytes)
}

impl Store {
    /// Let at most `rows` rows of each kind wait in the tail of the content-address index
    /// instead of [`MERGE_AT`] (tests that need merges without storing thousands of objects):
    /// a partition is merged every `rows / 16` rows.
    #[doc(hidden)]
    pub fn set_ref_merge_at(&self, rows: u64) -> Result<(), StoreError> {
        self.read(|r| {
            tail(r)?.merge_at.store(rows.max(1), Ordering::Relaxed);
            Ok(())
        })
    }

    /// Merge every partition of both kinds up to the newest row, leaving the tail empty (the
    /// form a store of schema 2 has; tests build one this way).
    #[doc(hidden)]
    pub fn merge_ref_tail(&self) -> Result<(), StoreError> {
        self.write(|w| {
            claim(w)?;
            for kind in KINDS {
                let to = stored(&w.reader(), kind)?;
                for p in 0..PARTITIONS {
                    merge(w, kind, p, to)?;
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::Object;

    /// A handle that is not the appender finds a key by scanning from its own partition's
    /// watermark, however far the other partitions' have moved.
    #[test]
    fn a_scan_starts_at_the_watermark_of_the_keys_own_partition() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("db")).unwrap();
        store.set_ref_merge_at(u64::MAX).unwrap();
        let objects: Vec<_> = (0..64)
            .map(|i| Object::new("world/test/v1", "test", format!("scan-{i}").into_bytes()))
            .collect();
        for o in objects.clone() {
            store.write(move |w| w.put_object(&o)).unwrap();
        }
        store
            .write(|w| {
                // Partition 0 alone is indexed up to the newest row, and another handle has
                // claimed the tail since, so this handle's map no longer vouches for it.
                let to = stored(&w.reader(), Kind::Objects)?;
                merge(w, Kind::Objects, 0, to)?;
                REF_INDEX.put(w, APPENDER, &!tail(&w.reader())?.me)
            })
            .unwrap();
        store
            .read(|r| {
                tail(r)?.write().map = Maps::default();
                Ok::<_, StoreError>(())
            })
            .unwrap();
        let in_other_partitions = objects
            .iter()
            .filter(|o| partition(&ref_key(&o.hash, OBJECT)) != 0)
            .count();
        assert!(in_other_partitions > 40);
        for o in &objects {
            let found = store.read(|r| find(r, &ref_key(&o.hash, OBJECT))).unwrap();
            assert!(found.is_some(), "{} not found", o.hash);
        }
    }

    /// Spans of doubted rows join where they meet, and past their bound collapse into one that
    /// covers them all: never fewer rows doubted.
    #[test]
    fn doubted_spans_join_where_they_meet_and_collapse_past_their_bound() {
        let mut doubtful = Vec::new();
        doubt(&mut doubtful, (10, 12));
        doubt(&mut doubtful, (10, 15));
        doubt(&mut doubtful, (16, 16));
        assert_eq!(doubtful, [(10, 16)]);
        doubt(&mut doubtful, (20, 21));
        assert_eq!(doubtful, [(10, 16), (20, 21)]);
        let apart: Vec<u64> = (0..2 * DOUBTFUL_SPANS as u64)
            .map(|i| 100 + 3 * i)
            .collect();
        for (i, &row) in apart.iter().enumerate() {
            doubt(&mut doubtful, (row, row));
            assert!(doubtful.len() <= DOUBTFUL_SPANS, "{} spans", doubtful.len());
            // The bound was passed once: the first row and everything since are one span.
            if i + 2 == DOUBTFUL_SPANS {
                assert_eq!(doubtful, [(10, row)]);
            }
        }
        let doubted = |row: u64| {
            doubtful
                .iter()
                .any(|&(low, high)| (low..=high).contains(&row))
        };
        assert!([10, 16, 20, 21].into_iter().chain(apart).all(doubted));
    }

    /// A merge takes its keys from the map when the map vouches for them, and from the rows
    /// when it does not; both index the same keys under the same rows.
    #[test]
    fn a_merge_reads_the_rows_where_the_map_cannot_vouch_for_them() {
        let indexed = |from_map: bool| {
            let dir = tempfile::tempdir().unwrap();
            let store = Store::create(&dir.path().join("db")).unwrap();
            store.set_ref_merge_at(u64::MAX).unwrap();
            for i in 0..64 {
                let o = Object::new("world/test/v1", "test", format!("merge-{i}").into_bytes());
                store.write(move |w| w.put_object(&o)).unwrap();
            }
            if !from_map {
                // As if every partition's keys before the newest row had left the map.
                store
                    .read(|r| {
                        let mut known = tail(r)?.write();
                        known.map = Maps::default();
                        known.base = [[u64::MAX; PARTITIONS]; KINDS.len()];
                        Ok::<_, StoreError>(())
                    })
                    .unwrap();
            }
            store.merge_ref_tail().unwrap();
            let refs: Vec<(Vec<u8>, u64)> = store
                .read(|r| {
                    REFS.raw()
                        .iter(r)?
                        .map(|kv| kv.map(|(k, v)| (k.to_vec(), row_number(v).unwrap())))
                        .collect::<Result<_, _>>()
                })
                .unwrap();
            refs
        };
        let from_map = indexed(true);
        assert!(from_map.len() >= 64, "{}", from_map.len());
        assert_eq!(indexed(false), from_map);
    }

    /// An operation asks the table whether its handle is the appender once; the next
    /// operation asks again, so that a claim by another handle in between is seen and the map
    /// read again.
    #[test]
    fn an_operation_claims_the_tail_once_and_the_next_one_asks_again() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("db")).unwrap();
        store
            .write(|w| {
                assert!(!w.claimed_tail() && !w.reader().claimed_tail());
                claim(w)?;
                assert!(w.claimed_tail() && w.reader().claimed_tail());
                claim(w)
            })
            .unwrap();
        let me = store.read(|r| Ok::<_, StoreError>(tail(r)?.me)).unwrap();
        store
            .write(move |w| {
                // Another handle claims the tail in a later transaction.
                assert!(!w.claimed_tail(), "the claim outlived its operation");
                REF_INDEX.put(w, APPENDER, &!me)
            })
            .unwrap();
        store
            .read(|r| {
                assert!(!r.claimed_tail());
                Ok::<_, StoreError>(())
            })
            .unwrap();
        store.write(claim).unwrap();
        let appender = store.read(|r| REF_INDEX.get(r, APPENDER)).unwrap();
        assert_eq!(appender, Some(me));
    }

    /// A minted object is stored after what its operation stored before it, once, and is found
    /// by its address like any other.
    #[test]
    fn a_minted_object_follows_the_operations_other_objects_and_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("db")).unwrap();
        let plain = Object::new("world/test/v1", "test", b"plain".to_vec());
        let minted = Object::new("world/test/v1", "test", b"minted".to_vec());
        let (p, m) = (plain.clone(), minted.clone());
        store
            .write(move |w| {
                w.put_verified_object(&p)?;
                w.put_minted_object(&m)
            })
            .unwrap();
        let seqs = store
            .read(|r| {
                let seq = |o: &Object| find(r, &ref_key(&o.hash, OBJECT));
                Ok::<_, StoreError>((seq(&plain)?, seq(&minted)?))
            })
            .unwrap();
        match seqs {
            (Some(plain), Some(minted)) => assert_eq!(minted, plain + 1),
            other => panic!("not both found: {other:?}"),
        }
        store.merge_ref_tail().unwrap();
        let found = store.read(|r| r.has_object(&minted.hash)).unwrap();
        assert!(found);
    }

    /// Debug builds, every test run among them, look for a minted object anyway: a second row
    /// for one address would be damage. The operation fails and stores nothing.
    #[test]
    #[cfg(debug_assertions)]
    fn a_minted_object_already_stored_fails_loudly_in_debug_builds() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("db")).unwrap();
        let o = Object::new("world/test/v1", "test", b"twice".to_vec());
        let again = o.clone();
        store.write(move |w| w.put_verified_object(&o)).unwrap();
        let rows = || store.read(|r| stored(r, Kind::Objects)).unwrap();
        let before = rows();
        match store.write(move |w| w.put_minted_object(&again)) {
            Err(StoreError::OperationPanicked(text)) => {
                assert!(text.contains("was minted but is stored already"), "{text}")
            }
            other => panic!("expected the operation to fail: {other:?}"),
        }
        assert_eq!(rows(), before);
    }
}
