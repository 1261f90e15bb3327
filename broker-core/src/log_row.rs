//! The layout of one row of the log (`entries`): an entry and the world it selects, with the
//! entry's hash beside them. The log writes and reads rows ([`crate::log`]); the
//! content-address index takes an entry's keys from them ([`crate::ref_tail`]).

use crate::object::Ref;

/// One log row: an entry and the world it selects, stored together under the entry's index:
/// `world ref (32) | u32 BE entry length | entry JSON | world JSON`. Rows written by schema 3
/// also carry the entry's hash, flagged by the top bit of the length: `world ref (32) | u32 BE
/// (entry length | 0x8000_0000) | entry hash (32) | entry JSON | world JSON`, so that the
/// content-address index can take an entry's keys from its row without parsing it
/// ([`crate::ref_tail`]). Appending an entry writes the tail of one B-tree; the two lookups by
/// hash go through the store's `refs` index and its tail.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Row<'a> {
    pub world_ref: Ref,
    /// The entry's hash as written beside it (an index aid: verification recomputes it from
    /// `entry`); `None` in rows of schema 2.
    pub entry_hash: Option<Ref>,
    pub entry: &'a [u8],
    pub world: &'a [u8],
}

/// The length's top bit: an entry hash follows it.
const HASHED: u32 = 0x8000_0000;

impl<'a> Row<'a> {
    pub(crate) fn decode(bytes: &'a [u8]) -> Option<Row<'a>> {
        let world_ref = Ref::from_slice(bytes.get(..32)?)?;
        let field = u32::from_be_bytes(bytes.get(32..36)?.try_into().ok()?);
        let (entry_hash, rest) = if field & HASHED != 0 {
            (Some(Ref::from_slice(bytes.get(36..68)?)?), bytes.get(68..)?)
        } else {
            (None, bytes.get(36..)?)
        };
        let len = usize::try_from(field & !HASHED).ok()?;
        Some(Row {
            world_ref,
            entry_hash,
            entry: rest.get(..len)?,
            world: rest.get(len..)?,
        })
    }

    /// The row's bytes. An entry of 2 GiB or more cannot be stored (its length would take the
    /// flag bit); commits are far smaller than that (`docs/operators.md`, body limits).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(68 + self.entry.len() + self.world.len());
        out.extend_from_slice(self.world_ref.as_bytes());
        let len = self.entry.len() as u32 & !HASHED;
        match &self.entry_hash {
            Some(hash) => {
                out.extend_from_slice(&(len | HASHED).to_be_bytes());
                out.extend_from_slice(hash.as_bytes());
            }
            None => out.extend_from_slice(&len.to_be_bytes()),
        }
        out.extend_from_slice(self.entry);
        out.extend_from_slice(self.world);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both row forms read back as written, and a truncated row of either is damage.
    #[test]
    fn a_log_row_reads_back_with_and_without_its_entry_hash() {
        let world_ref = Ref::of(b"world");
        for entry_hash in [None, Some(Ref::of(b"entry"))] {
            let row = Row {
                world_ref,
                entry_hash,
                entry: b"{\"e\":1}",
                world: b"{\"w\":2}",
            };
            let bytes = row.encode();
            assert_eq!(bytes.len(), 36 + 14 + entry_hash.map_or(0, |_| 32));
            let back = Row::decode(&bytes).unwrap();
            assert_eq!(
                (back.world_ref, back.entry_hash, back.entry, back.world),
                (world_ref, entry_hash, &b"{\"e\":1}"[..], &b"{\"w\":2}"[..])
            );
            let cut = if entry_hash.is_some() { 60 } else { 40 };
            assert!(Row::decode(&bytes[..cut]).is_none());
        }
    }
}
