//! Typed tables: a table is named by its layout and read or written only through a transaction
//! of the storage layer, with its keys and values encoded by fixed codecs.
//!
//! A [`Table`] is a constant (`const JOURNAL: Table<Seq, Bytes> = ...`) that says
//! which slot of the layout it is and how its keys and values are encoded; it holds no handle
//! itself, so the modules that define a schema need nothing from the engine but this type.

use std::marker::PhantomData;
use std::ops::RangeBounds;

use heed::{BytesDecode, BytesEncode, Database, PutFlags};

use super::{ReadCtx, StoreError, WriteCtx};

/// A big-endian `u64` (sequence numbers, counters, watermarks), decoded only from exactly
/// eight bytes: heed's own `U64` reads the first eight of a longer value and ignores the rest,
/// so a damaged row with bytes appended would read as sound.
pub(crate) enum Seq {}

impl<'a> BytesEncode<'a> for Seq {
    type EItem = u64;

    fn bytes_encode(item: &'a u64) -> Result<std::borrow::Cow<'a, [u8]>, heed::BoxedError> {
        Ok(std::borrow::Cow::Owned(item.to_be_bytes().to_vec()))
    }
}

impl<'a> BytesDecode<'a> for Seq {
    type DItem = u64;

    fn bytes_decode(bytes: &'a [u8]) -> Result<u64, heed::BoxedError> {
        let exact: [u8; 8] = bytes
            .try_into()
            .map_err(|_| format!("a u64 of {} bytes, not 8", bytes.len()))?;
        Ok(u64::from_be_bytes(exact))
    }
}

/// The untyped handle of one table, as the environment opened it.
pub(crate) type RawDb = Database<'static, heed::types::Bytes, heed::types::Bytes>;

/// One table of a layout, with the codecs of its keys (`K`) and values (`V`).
pub(crate) struct Table<K, V> {
    slot: usize,
    name: &'static str,
    codecs: PhantomData<fn() -> (K, V)>,
}

impl<K, V> Clone for Table<K, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K, V> Copy for Table<K, V> {}

/// A row as read: its key and value, decoded by the table's codecs.
pub(crate) type Row<'t, K, V> = (<K as BytesDecode<'t>>::DItem, <V as BytesDecode<'t>>::DItem);
/// A row, or why it could not be read.
pub(crate) type RowResult<'t, K, V> = Result<Row<'t, K, V>, StoreError>;

/// Rows read lazily from a transaction, with the engine's errors as [`StoreError`]s.
pub(crate) struct Rows<I> {
    inner: I,
    table: &'static str,
    map_size: usize,
}

impl<I, T> Iterator for Rows<I>
where
    I: Iterator<Item = heed::Result<T>>,
{
    type Item = Result<T, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        let (table, map_size) = (self.table, self.map_size);
        self.inner
            .next()
            .map(|item| item.map_err(|e| read_error(table, e, map_size)))
    }
}

/// A read's failure. A row the table's codecs refuse is damage, and the report names the table
/// (the codec alone would say only "failed to fill whole buffer").
fn read_error(table: &'static str, e: heed::Error, map_size: usize) -> StoreError {
    match e {
        heed::Error::Decoding(e) => {
            StoreError::Corrupt(format!("a row of table {table} does not decode ({e})"))
        }
        other => StoreError::from_heed_read(other, map_size),
    }
}

impl Table<Seq, heed::types::Bytes> {
    /// Every row up to the last one when the walk starts, in key order, `block` rows to a read
    /// transaction of their own; returns the key after the last row read (0 for an empty
    /// table), where a reader that wants the rows added since reads on. For a table whose rows
    /// are only ever appended, read beside a serving daemon (`worldd doctor`): one transaction
    /// over the whole table held a snapshot while every row was read, and the daemon could
    /// reuse no page it freed meanwhile, so its file grew by every page it rewrote. A row never
    /// changes once written, so the blocks read what one snapshot would have.
    pub(crate) fn read_in_blocks<E: From<StoreError>>(
        &self,
        store: &super::Store,
        block: u64,
        mut row: impl FnMut(u64, &[u8]),
    ) -> Result<u64, E> {
        let Some(last) = store.read(|r| Ok::<_, E>(self.last(r)?.map(|(seq, _)| seq)))? else {
            return Ok(0);
        };
        let mut from = 0u64;
        loop {
            let to = from.saturating_add(block.max(1) - 1).min(last);
            store.read(|r| {
                for item in self.range(r, &(from..=to))? {
                    let (seq, bytes) = item?;
                    row(seq, bytes);
                }
                Ok::<_, E>(())
            })?;
            if to >= last {
                return Ok(last.saturating_add(1));
            }
            from = to + 1;
        }
    }
}

impl<K: 'static, V: 'static> Table<K, V> {
    /// The table at `slot` of its layout's table list, where it is called `name`.
    pub(crate) const fn new(slot: usize, name: &'static str) -> Table<K, V> {
        Table {
            slot,
            name,
            codecs: PhantomData,
        }
    }

    #[cfg(test)]
    pub(crate) const fn slot(&self) -> usize {
        self.slot
    }

    /// The table's name in its layout (reports of damage name the table).
    pub(crate) const fn name(&self) -> &'static str {
        self.name
    }

    /// The same table with its keys and values as stored bytes: for a reader that must
    /// survive a row its codecs would refuse (`worldd doctor` reports such a row instead of
    /// stopping at it).
    pub(crate) const fn raw(&self) -> Table<heed::types::Bytes, heed::types::Bytes> {
        Table::new(self.slot, self.name)
    }

    /// How a read of this table fails ([`read_error`]).
    fn read_err(&self, r: &ReadCtx<'_>) -> impl Fn(heed::Error) -> StoreError {
        let (table, map_size) = (self.name, r.map_size);
        move |e| read_error(table, e, map_size)
    }

    fn db(&self, dbs: &[RawDb]) -> Result<Database<'static, K, V>, StoreError> {
        dbs.get(self.slot)
            .map(|db| db.remap_types::<K, V>())
            .ok_or_else(|| StoreError::Corrupt(format!("table {} is not open", self.name)))
    }

    pub(crate) fn get<'a, 't>(
        &self,
        r: &ReadCtx<'t>,
        key: &'a K::EItem,
    ) -> Result<Option<V::DItem>, StoreError>
    where
        K: BytesEncode<'a>,
        V: BytesDecode<'t>,
    {
        self.db(r.dbs)?.get(r.txn, key).map_err(self.read_err(r))
    }

    /// The row with the greatest key.
    pub(crate) fn last<'t>(&self, r: &ReadCtx<'t>) -> Result<Option<Row<'t, K, V>>, StoreError>
    where
        K: BytesDecode<'t>,
        V: BytesDecode<'t>,
    {
        self.db(r.dbs)?.last(r.txn).map_err(self.read_err(r))
    }

    /// How many rows the table holds (read from the B-tree's header, not counted).
    pub(crate) fn len(&self, r: &ReadCtx<'_>) -> Result<u64, StoreError> {
        self.db(r.dbs)?.len(r.txn).map_err(r.err())
    }

    /// Every row, in key order.
    pub(crate) fn iter<'t>(
        &self,
        r: &ReadCtx<'t>,
    ) -> Result<impl Iterator<Item = RowResult<'t, K, V>> + 't, StoreError>
    where
        K: BytesDecode<'t>,
        V: BytesDecode<'t>,
    {
        Ok(Rows {
            inner: self.db(r.dbs)?.iter(r.txn).map_err(r.err())?,
            table: self.name,
            map_size: r.map_size,
        })
    }

    /// The rows whose keys are in `range`, in key order.
    pub(crate) fn range<'a, 't, R>(
        &self,
        r: &ReadCtx<'t>,
        range: &'a R,
    ) -> Result<impl Iterator<Item = RowResult<'t, K, V>> + 't, StoreError>
    where
        K: BytesEncode<'a> + BytesDecode<'t>,
        V: BytesDecode<'t>,
        R: RangeBounds<K::EItem>,
    {
        Ok(Rows {
            inner: self.db(r.dbs)?.range(r.txn, range).map_err(r.err())?,
            table: self.name,
            map_size: r.map_size,
        })
    }

    /// The rows whose keys start with `prefix`, in key order.
    pub(crate) fn prefix<'a, 't>(
        &self,
        r: &ReadCtx<'t>,
        prefix: &'a K::EItem,
    ) -> Result<impl Iterator<Item = RowResult<'t, K, V>> + 't, StoreError>
    where
        K: BytesEncode<'a> + BytesDecode<'t>,
        V: BytesDecode<'t>,
    {
        Ok(Rows {
            inner: self
                .db(r.dbs)?
                .prefix_iter(r.txn, prefix)
                .map_err(r.err())?,
            table: self.name,
            map_size: r.map_size,
        })
    }

    pub(crate) fn put<'a>(
        &self,
        w: &mut WriteCtx<'_, '_>,
        key: &'a K::EItem,
        value: &'a V::EItem,
    ) -> Result<(), StoreError>
    where
        K: BytesEncode<'a>,
        V: BytesEncode<'a>,
    {
        let err = w.err();
        w.note_wrote();
        self.db(w.dbs)?.put(w.txn, key, value).map_err(err)
    }

    /// [`Table::put`] for a key greater than every key in the table (cheaper: no search).
    pub(crate) fn append<'a>(
        &self,
        w: &mut WriteCtx<'_, '_>,
        key: &'a K::EItem,
        value: &'a V::EItem,
    ) -> Result<(), StoreError>
    where
        K: BytesEncode<'a>,
        V: BytesEncode<'a>,
    {
        let err = w.err();
        w.note_wrote();
        self.db(w.dbs)?
            .put_with_flags(w.txn, PutFlags::APPEND, key, value)
            .map_err(err)
    }

    /// [`Table::append`], refusing (`Ok(false)`, nothing written) a key that is not greater
    /// than every key in the table instead of failing with LMDB's error: a row is never
    /// written over.
    pub(crate) fn append_new<'a>(
        &self,
        w: &mut WriteCtx<'_, '_>,
        key: &'a K::EItem,
        value: &'a V::EItem,
    ) -> Result<bool, StoreError>
    where
        K: BytesEncode<'a>,
        V: BytesEncode<'a>,
    {
        let err = w.err();
        match self.db(w.dbs)?.put_with_flags(
            w.txn,
            PutFlags::APPEND | PutFlags::NO_OVERWRITE,
            key,
            value,
        ) {
            Ok(()) => {
                w.note_wrote();
                Ok(true)
            }
            Err(heed::Error::Mdb(heed::MdbError::KeyExist)) => Ok(false),
            Err(e) => Err(err(e)),
        }
    }

    /// Remove every row (the table's pages go to the free list).
    pub(crate) fn clear(&self, w: &mut WriteCtx<'_, '_>) -> Result<(), StoreError> {
        let err = w.err();
        w.note_wrote();
        self.db(w.dbs)?.clear(w.txn).map_err(err)
    }

    /// Remove the row with `key`; `false` when there was none.
    pub(crate) fn delete<'a>(
        &self,
        w: &mut WriteCtx<'_, '_>,
        key: &'a K::EItem,
    ) -> Result<bool, StoreError>
    where
        K: BytesEncode<'a>,
    {
        let err = w.err();
        let deleted = self.db(w.dbs)?.delete(w.txn, key).map_err(err)?;
        if deleted {
            w.note_wrote();
        }
        Ok(deleted)
    }
}
