//! The layout of one row of `invocation_rows`: an invocation's id beside its row
//! ([`crate::invocations`]), stored in arrival order and found by id through the `refs` key of
//! the id's digest ([`crate::ref_tail`]).
//!
//! `u16 BE id length | id | row`. The id is in the row so that a key found in the index (or in
//! the tail's map) is checked against the invocation it names, and so that the index's keys can
//! be taken from the rows alone.

use crate::object::Ref;
use crate::schema::{ref_key, INVOCATION};
use crate::storage::StoreError;

/// The `refs` key of invocation `id`: the SHA-256 of the id, tagged [`INVOCATION`].
pub(crate) fn key(id: &[u8]) -> [u8; 33] {
    ref_key(&Ref::of(id), INVOCATION)
}

/// A stored row: `(id, row)`; `None` when it is damaged.
pub(crate) fn split(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = usize::from(u16::from_be_bytes(bytes.get(..2)?.try_into().ok()?));
    let id = bytes.get(2..2 + len)?;
    Some((id, bytes.get(2 + len..)?))
}

/// The stored form of `id`'s row.
pub(crate) fn join(id: &str, row: &[u8]) -> Result<Vec<u8>, StoreError> {
    let len = u16::try_from(id.len()).map_err(|_| {
        StoreError::Corrupt(format!(
            "an invocation id of {} bytes is longer than the store keeps",
            id.len()
        ))
    })?;
    let mut out = Vec::with_capacity(2 + id.len() + row.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(row);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_splits_back_into_its_id_and_row_and_damage_is_none() {
        let joined = join("mcp:e:t", b"row bytes").unwrap();
        assert_eq!(split(&joined), Some((&b"mcp:e:t"[..], &b"row bytes"[..])));
        assert_eq!(
            split(&join("a2a:e:t", b"").unwrap()),
            Some((&b"a2a:e:t"[..], &b""[..]))
        );
        assert_eq!(split(&joined[..5]), None);
        assert_eq!(split(&[0]), None);
        assert!(join(&"x".repeat(70_000), b"").is_err());
    }
}
