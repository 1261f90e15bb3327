//! The object table: content-addressed objects, stored in the order they arrive and found by
//! ref (through `refs`) or by semantic id (through `semantic_ids` and its tail, in arrival order:
//! [`crate::semantic_index`]). Every other world table names objects by ref; this module is the
//! one that stores them.

use crate::access;
use crate::object::{Object, ObjectView, Ref};
use crate::ref_tail;
use crate::schema::{decode_object_row, ref_key, OBJECT, OBJECTS};
use crate::semantic_index;
use crate::storage::{ReadCtx, Store, StoreError, WriteCtx};

/// Refs read lazily from a read transaction.
pub type Refs<'t> = Box<dyn Iterator<Item = Result<Ref, StoreError>> + 't>;
pub use crate::semantic_index::Objects;

impl<'t> ReadCtx<'t> {
    pub fn object(&self, r: &Ref) -> Result<Option<Object>, StoreError> {
        match object_row(self, r)? {
            None => Ok(None),
            Some((_, envelope)) => Object::decode_value(*r, envelope)
                .map(Some)
                .ok_or_else(|| StoreError::Corrupt(format!("object {r} has a damaged envelope"))),
        }
    }

    /// An object borrowed from this read transaction, without copying its payload.
    pub fn object_view(&self, r: &Ref) -> Result<Option<ObjectView<'t>>, StoreError> {
        Ok(self.sequenced(r)?.map(|(_, view)| view))
    }

    /// Whether an object with this ref is stored (without reading it).
    pub fn has_object(&self, r: &Ref) -> Result<bool, StoreError> {
        Ok(ref_tail::find(self, &ref_key(r, OBJECT))?.is_some())
    }

    /// An object and its sequence number (its place in arrival order).
    pub(crate) fn sequenced(&self, r: &Ref) -> Result<Option<(u64, ObjectView<'t>)>, StoreError> {
        match object_row(self, r)? {
            None => Ok(None),
            Some((seq, envelope)) => ObjectView::decode(*r, envelope)
                .map(|view| Some((seq, view)))
                .ok_or_else(|| StoreError::Corrupt(format!("object {r} has a damaged envelope"))),
        }
    }

    /// The object stored at sequence number `seq`.
    pub(crate) fn object_at(&self, seq: u64) -> Result<Option<ObjectView<'t>>, StoreError> {
        OBJECTS
            .get(self, &seq)?
            .map(|row| decode_object_row(seq, row))
            .transpose()
    }

    /// The refs of the objects with `semantic_id`, in the order the store first stored them,
    /// starting after the object `after`. `None` when `after` is not an object with this
    /// semantic id.
    pub fn semantic_id_refs(
        &self,
        semantic_id: &str,
        after: Option<&Ref>,
    ) -> Result<Option<Refs<'t>>, StoreError> {
        Ok(self
            .semantic_id_objects(semantic_id, after)?
            .map(|objects| Box::new(objects.map(|o| o.map(|o| o.hash))) as Refs<'t>))
    }

    /// [`ReadCtx::semantic_id_refs`], yielding the objects themselves (borrowed).
    pub fn semantic_id_objects(
        &self,
        semantic_id: &str,
        after: Option<&Ref>,
    ) -> Result<Option<Objects<'t>>, StoreError> {
        let start = match after {
            None => 0,
            Some(r) => match self.sequenced(r)? {
                Some((seq, view)) if view.semantic_id == semantic_id => seq + 1,
                _ => return Ok(None),
            },
        };
        semantic_index::objects(self, semantic_id, start).map(Some)
    }
}

impl WriteCtx<'_, '_> {
    pub fn object(&self, r: &Ref) -> Result<Option<Object>, StoreError> {
        self.reader().object(r)
    }

    /// Whether an object with this ref is stored (without reading it). One this operation
    /// stored is not looked up.
    pub fn has_object(&self, r: &Ref) -> Result<bool, StoreError> {
        if self.stored_anew(&ref_key(r, OBJECT)).is_some() {
            return Ok(true);
        }
        self.reader().has_object(r)
    }

    /// Insert an object unless present (first writer's provenance wins). The payload must hash
    /// to the object's address. Objects are stored in the order they arrive (the next sequence
    /// number), so a group commit's new objects fill the same pages at the end of the table.
    pub fn put_object(&mut self, object: &Object) -> Result<(), StoreError> {
        if !object.verify() {
            return Err(StoreError::Corrupt(format!(
                "object {} does not hash to its address",
                object.hash
            )));
        }
        self.put_verified_object(object)
    }

    /// [`WriteCtx::put_object`] for an object whose payload the caller has just hashed.
    pub(crate) fn put_verified_object(&mut self, object: &Object) -> Result<(), StoreError> {
        ref_tail::claim(self)?;
        let key = ref_key(&object.hash, OBJECT);
        if ref_tail::find(&self.reader(), &key)?.is_some() {
            // The first writer's kind sticks to the bytes; a publication over bytes stored
            // first as a private kind still makes them public.
            if access::is_public(&object.semantic_id) {
                access::published(self, object)?;
            }
            return Ok(());
        }
        self.store_object_row(object, key)
    }

    /// [`WriteCtx::put_verified_object`] for an object no row can hold yet, so none is looked
    /// for: its payload names something this process minted for the operation's call from
    /// 128 random bits (the invocation record of a call that brought no task id). Debug builds
    /// (every test run) look anyway and fail loudly on a second row.
    pub(crate) fn put_minted_object(&mut self, object: &Object) -> Result<(), StoreError> {
        ref_tail::claim(self)?;
        let key = ref_key(&object.hash, OBJECT);
        debug_assert!(
            ref_tail::find(&self.reader(), &key)?.is_none(),
            "object {} was minted but is stored already",
            object.hash
        );
        self.store_object_row(object, key)
    }

    /// Append `object`'s row after the table's last one and index it under `key`.
    fn store_object_row(&mut self, object: &Object, key: [u8; 33]) -> Result<(), StoreError> {
        let r = self.reader();
        // Objects this operation stored are the table's last rows (nothing else appends to
        // it): the next follows them without a search for the end.
        let newest_fresh = self
            .fresh_rows()
            .filter(|(address, _)| address[32] == OBJECT)
            .map(|(_, seq)| seq)
            .max();
        let seq = match newest_fresh {
            Some(newest) => newest + 1,
            None => OBJECTS.last(&r)?.map_or(0, |(last, _)| last + 1),
        };
        let envelope = object.encode_value();
        let mut row = Vec::with_capacity(32 + envelope.len());
        row.extend_from_slice(object.hash.as_bytes());
        row.extend_from_slice(&envelope);
        OBJECTS.append(self, &seq, &row)?;
        semantic_index::note(self, seq)?;
        ref_tail::note(self, &[key], seq)?;
        let public = access::is_public(&object.semantic_id);
        self.note_stored_anew(&key, seq, public);
        Ok(())
    }
}

/// The sequence number and envelope of the object `r`. The row must hold `r` itself: an
/// index pointing elsewhere is damage, never another object.
pub(crate) fn object_row<'t>(
    r: &ReadCtx<'t>,
    object: &Ref,
) -> Result<Option<(u64, &'t [u8])>, StoreError> {
    let Some((seq, row)) = ref_tail::find_row(r, &ref_key(object, OBJECT))? else {
        return Ok(None);
    };
    let row =
        row.ok_or_else(|| StoreError::Corrupt(format!("object {object} is indexed but missing")))?;
    match row.split_at_checked(32) {
        Some((stored, envelope)) if stored == object.as_bytes() => Ok(Some((seq, envelope))),
        _ => Err(StoreError::Corrupt(format!(
            "object {object} is indexed at a row of another object"
        ))),
    }
}

/// What [`audit`] found in the object rows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectAudit {
    /// Object rows read.
    pub objects: u64,
    /// Rows that do not decode, payloads that do not hash to their ref, and interface hashes
    /// that are not the sha256 of their semantic id (the first [`ref_tail::MAX_FINDINGS`],
    /// then a count).
    pub findings: Vec<String>,
}

/// Every object row (`worldd doctor`): its envelope must decode, its payload must hash to the
/// ref it is stored under, and its `interfaceHash` must be the sha256 of its semantic id, as
/// every writer makes it. The entry walk checks only the objects entries name, and not the
/// interface hash (it is not part of the address); an object no entry names (the input of a
/// call never committed, a grant's) is read here alone. One hash of every payload.
pub fn audit(store: &Store) -> Result<ObjectAudit, StoreError> {
    // A block at a time, up to the last row at the start (`Table::read_in_blocks` says why).
    const BLOCK: u64 = 4096;
    let mut out = ObjectAudit::default();
    let mut more = 0u64;
    OBJECTS.read_in_blocks::<StoreError>(store, BLOCK, |seq, row| {
        audit_row(&mut out, &mut more, seq, row)
    })?;
    if more > 0 {
        out.findings
            .push(format!("… and {more} more damaged object row(s)"));
    }
    Ok(out)
}

/// One object row of [`audit`]: counted, and its findings kept (the first
/// [`ref_tail::MAX_FINDINGS`], then only counted in `more`).
fn audit_row(out: &mut ObjectAudit, more: &mut u64, seq: u64, row: &[u8]) {
    let mut finding = |f: String| {
        if out.findings.len() < ref_tail::MAX_FINDINGS {
            out.findings.push(f);
        } else {
            *more += 1;
        }
    };
    out.objects += 1;
    let o = match decode_object_row(seq, row) {
        Ok(o) => o,
        Err(_) => {
            finding(format!(
                "row {seq} of object_rows does not decode ({} bytes)",
                row.len()
            ));
            return;
        }
    };
    if !o.verify() {
        finding(format!(
            "object {} (row {seq} of object_rows) is damaged: its payload hashes to {}, not to its address",
            o.hash,
            Ref::of(o.payload)
        ));
    }
    if o.interface_hash != Ref::of(o.semantic_id.as_bytes()) {
        finding(format!(
            "object {} (row {seq} of object_rows) has the interfaceHash {}, which is not the sha256 of its semanticId {:?}",
            o.hash, o.interface_hash, o.semantic_id
        ));
    }
}
