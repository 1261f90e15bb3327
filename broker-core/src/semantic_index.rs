//! The semantic-id index (`semantic_ids`) and the newest objects, which wait for it.
//!
//! The index lists the objects of each semantic id in arrival order (key: the id's
//! [`semantic_prefix`] ‖ object sequence). Indexing every object as it was stored made each
//! commit write, for every semantic id it stored, the leaf at the end of that id's range and
//! the branches above it: 3.6 of the 17.6 pages a lone read's commit wrote, 7.1 of a write's
//! 24.5 (`docs/benchmarks.md`, fifteenth round). So the newest objects now wait unindexed
//! after a watermark, the *tail*; once [`MERGE_AT`] wait, the operation that stores the next
//! one indexes them all, sorted by key, which fills a few pages per semantic id once instead
//! of touching them in every commit.
//!
//! A listing reads the index below the watermark, then the tail's object rows (at most
//! [`MERGE_AT`], plus what the current transaction stored), keeping those of the id: arrival
//! order either way. No watermark means that every object is indexed: a new store, or one the
//! builds before the tail wrote (schema 4), until this build stores its first object there.

use std::ops::Bound;

use crate::object::ObjectView;
use crate::ref_tail::MAX_FINDINGS;
use crate::schema::{decode_object_row, semantic_prefix, OBJECTS, REF_INDEX, SEMANTIC_IDS};
use crate::storage::{ReadCtx, StoreError, WriteCtx};

/// Objects read lazily from a read transaction.
pub type Objects<'t> = Box<dyn Iterator<Item = Result<ObjectView<'t>, StoreError>> + 't>;

/// Objects waiting for the index before the next stored object indexes them all.
pub const MERGE_AT: u64 = 1024;

/// `ref_index` key of the watermark: every object below this sequence is in the index.
const INDEXED: &str = "semantic_indexed";

/// The first object sequence not in the index, or `None` when every object is in it.
fn indexed_below(r: &ReadCtx<'_>) -> Result<Option<u64>, StoreError> {
    REF_INDEX.get(r, INDEXED)
}

/// Note the object just stored at `seq`: it waits in the tail, and when [`MERGE_AT`] objects
/// wait, they are indexed together.
pub(crate) fn note(w: &mut WriteCtx<'_, '_>, seq: u64) -> Result<(), StoreError> {
    let from = match indexed_below(&w.reader())? {
        Some(from) => from,
        None => {
            // Everything before this object is indexed: the tail starts with it.
            REF_INDEX.put(w, INDEXED, &seq)?;
            seq
        }
    };
    if (seq + 1).saturating_sub(from) >= MERGE_AT {
        merge(w, from, seq + 1)?;
    }
    Ok(())
}

/// Index the objects `from..to` and move the watermark to `to`.
fn merge(w: &mut WriteCtx<'_, '_>, from: u64, to: u64) -> Result<(), StoreError> {
    let mut keys = Vec::with_capacity(usize::try_from(to - from).unwrap_or(0));
    {
        let r = w.reader();
        let range = (Bound::Included(from), Bound::Excluded(to));
        for row in OBJECTS.range(&r, &range)? {
            let (seq, row) = row?;
            match decode_object_row(seq, row) {
                Ok(object) => {
                    keys.push(index_key(object.semantic_id, seq)?);
                }
                // A row that does not decode is listed under no id (no listing could read it
                // either); `worldd doctor` reports it through the entries that name it. Failing
                // here would fail every operation that stores an object from now on.
                Err(e) => tracing::error!("the semantic-id index leaves out object row {seq}: {e}"),
            }
        }
    }
    // In key order, each semantic id's new keys go to the end of its range together.
    keys.sort_unstable();
    for key in &keys {
        SEMANTIC_IDS.put(w, key, &[])?;
    }
    REF_INDEX.put(w, INDEXED, &to)
}

/// The objects with `semantic_id` from object sequence `start` on, in arrival order.
pub(crate) fn objects<'t>(
    r: &ReadCtx<'t>,
    semantic_id: &str,
    start: u64,
) -> Result<Objects<'t>, StoreError> {
    let below = indexed_below(r)?;
    let end = below.unwrap_or(u64::MAX);
    let indexed = (start < end)
        .then(|| indexed(r, semantic_id, start, end))
        .transpose()?
        .into_iter()
        .flatten();
    let Some(below) = below else {
        return Ok(Box::new(indexed));
    };
    let wanted = semantic_id.to_owned();
    let range = (Bound::Included(start.max(below)), Bound::Unbounded);
    let waiting = OBJECTS
        .range(r, &range)?
        .map(move |row| {
            let (seq, row) = row?;
            let object = decode_object_row(seq, row)?;
            Ok((object.semantic_id == wanted).then_some(object))
        })
        .filter_map(Result::transpose);
    Ok(Box::new(indexed.chain(waiting)))
}

/// The indexed objects with `semantic_id` whose sequences are in `start..below`.
fn indexed<'t>(
    r: &ReadCtx<'t>,
    semantic_id: &str,
    start: u64,
    below: u64,
) -> Result<Objects<'t>, StoreError> {
    let range = (
        Bound::Included(index_key(semantic_id, start)?),
        Bound::Excluded(index_key(semantic_id, below)?),
    );
    let range = (
        range.0.as_ref().map(Vec::as_slice),
        range.1.as_ref().map(Vec::as_slice),
    );
    let reader = *r;
    let wanted = semantic_id.to_owned();
    let iter = SEMANTIC_IDS
        .range(r, &range)?
        .map(move |item| {
            let (key, _) = item?;
            let (_, seq) = split_key(key)
                .ok_or_else(|| StoreError::Corrupt("a semantic-id index key is damaged".into()))?;
            let row = OBJECTS.get(&reader, &seq)?.ok_or_else(|| {
                StoreError::Corrupt(format!("the semantic-id index names no object {seq}"))
            })?;
            let object = decode_object_row(seq, row)?;
            // A damaged envelope may name another kind: it is not listed as this one.
            Ok((object.semantic_id == wanted).then_some(object))
        })
        .filter_map(Result::transpose);
    Ok(Box::new(iter))
}

/// Check `semantic_ids` against `object_rows`, in one snapshot (`worldd doctor`): every object
/// below the watermark is indexed under its own semantic id, and every key names an object
/// below the watermark that has the key's semantic id. A missing key would leave an object out
/// of its listing; a stray one would list an object twice, or under another kind. Returns the
/// disagreements (the first [`MAX_FINDINGS`], then a count).
pub(crate) fn audit(r: &ReadCtx<'_>) -> Result<Vec<String>, StoreError> {
    let below = indexed_below(r)?.unwrap_or(u64::MAX);
    let mut findings = Vec::new();
    let mut more = 0u64;
    let mut finding = |f: String| {
        if findings.len() < MAX_FINDINGS {
            findings.push(f);
        } else {
            more += 1;
        }
    };
    for row in OBJECTS.iter(r)? {
        let (seq, row) = row?;
        if seq >= below {
            break;
        }
        // A damaged row is reported by the entries that name it; it is listed under no id.
        let Ok(object) = decode_object_row(seq, row) else {
            continue;
        };
        if SEMANTIC_IDS
            .get(r, &index_key(object.semantic_id, seq)?)?
            .is_none()
        {
            finding(format!(
                "object {} (row {seq} of object_rows) is below the semantic-id watermark, but \
                 semantic_ids does not list it under {}",
                object.hash, object.semantic_id
            ));
        }
    }
    for key in SEMANTIC_IDS.iter(r)? {
        let (key, _) = key?;
        let Some((semantic_id, seq)) = split_key(key) else {
            finding(format!(
                "semantic_ids holds a damaged key of {} bytes",
                key.len()
            ));
            continue;
        };
        if seq >= below {
            finding(format!(
                "semantic_ids lists row {seq} of object_rows under {semantic_id}, at or above \
                 its watermark {below}"
            ));
            continue;
        }
        match OBJECTS.get(r, &seq)?.map(|row| decode_object_row(seq, row)) {
            Some(Ok(object)) if object.semantic_id == semantic_id => {}
            Some(Ok(object)) => finding(format!(
                "semantic_ids lists row {seq} of object_rows under {semantic_id}, but its object \
                 {} has the semantic id {}",
                object.hash, object.semantic_id
            )),
            // Reported by the entries that name the object.
            Some(Err(_)) => {}
            None => finding(format!(
                "semantic_ids lists row {seq} of object_rows under {semantic_id}, which is not \
                 stored"
            )),
        }
    }
    if more > 0 {
        findings.push(format!(
            "… and {more} more disagreement(s) of semantic_ids and the object rows"
        ));
    }
    Ok(findings)
}

/// The `semantic_ids` key of the object at `seq` with `semantic_id`.
fn index_key(semantic_id: &str, seq: u64) -> Result<Vec<u8>, StoreError> {
    let mut key = semantic_prefix(semantic_id)?;
    key.extend_from_slice(&seq.to_be_bytes());
    Ok(key)
}

/// A `semantic_ids` key's semantic id and object sequence.
fn split_key(key: &[u8]) -> Option<(&str, u64)> {
    let len = usize::from(u16::from_be_bytes(key.get(..2)?.try_into().ok()?));
    let semantic_id = std::str::from_utf8(key.get(2..2 + len)?).ok()?;
    let seq = u64::from_be_bytes(key.get(2 + len..)?.try_into().ok()?);
    Some((semantic_id, seq))
}

impl crate::storage::Store {
    /// Index every waiting object and drop the watermark: the form a store of schema 4 has
    /// (tests build one this way).
    #[doc(hidden)]
    pub fn merge_semantic_tail(&self) -> Result<(), StoreError> {
        self.write(|w| {
            let r = w.reader();
            let (Some(from), to) = (
                indexed_below(&r)?,
                OBJECTS.last(&r)?.map_or(0, |(last, _)| last + 1),
            ) else {
                return Ok(());
            };
            merge(w, from, to)?;
            REF_INDEX.delete(w, INDEXED).map(drop)
        })
    }
}
