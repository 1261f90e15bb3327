//! The invocation row: what the journal and the task table know of one invocation id, in one
//! record.
//!
//! An effectful call writes its journal state (intent, then outcome) and its task state
//! (pending, then committed) in the same two transactions. Keyed by the invocation id, both
//! parts share one row, so each of the call's commits rewrites one randomly placed B-tree leaf
//! for them instead of two (schema 2; schema 1 kept `journal_by_invocation` and `tasks` apart).
//!
//! Row layout: `u32 BE length of the journal part (u32::MAX: none) | journal part | task part`
//! (the rest; empty: none). Each part is the canonical JSON its module writes.

use crate::store::{StoreError, Tables, TxnExt, WriteCtx};

const NONE: u32 = u32::MAX;

/// The two parts of a row, borrowed from the stored bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Row<'a> {
    pub journal: Option<&'a [u8]>,
    pub task: Option<&'a [u8]>,
}

impl<'a> Row<'a> {
    pub(crate) fn decode(bytes: &'a [u8]) -> Option<Row<'a>> {
        let len = u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?);
        let rest = bytes.get(4..)?;
        let (journal, task) = if len == NONE {
            (None, rest)
        } else {
            let len = usize::try_from(len).ok()?;
            (Some(rest.get(..len)?), rest.get(len..)?)
        };
        Some(Row {
            journal,
            task: (!task.is_empty()).then_some(task),
        })
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let j = self.journal.unwrap_or_default();
        let t = self.task.unwrap_or_default();
        let mut out = Vec::with_capacity(4 + j.len() + t.len());
        let len = match self.journal {
            Some(j) => u32::try_from(j.len()).unwrap_or(NONE - 1),
            None => NONE,
        };
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(j);
        out.extend_from_slice(t);
        out
    }
}

/// The row of `id`, borrowed from the transaction.
pub(crate) fn get<'t>(
    txn: &'t heed::RoTxn<'_>,
    t: &Tables,
    id: &str,
) -> Result<Option<Row<'t>>, StoreError> {
    match t
        .invocations
        .get(txn, id)
        .map_err(|e| StoreError::from_heed(e, t.map_size))?
    {
        None => Ok(None),
        Some(bytes) => Row::decode(bytes)
            .map(Some)
            .ok_or_else(|| StoreError::Corrupt(format!("invocation row {id} is damaged"))),
    }
}

/// Which part of the row a write replaces.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Part {
    Journal,
    Task,
}

/// Replace one part of `id`'s row, keeping the other.
pub(crate) fn put(
    w: &mut WriteCtx<'_, '_>,
    id: &str,
    part: Part,
    bytes: &[u8],
) -> Result<(), StoreError> {
    let current = get(w.txn, w.tables, id)?.unwrap_or_default();
    let (journal, task) = match part {
        Part::Journal => (Some(bytes.to_vec()), current.task.map(<[u8]>::to_vec)),
        Part::Task => (current.journal.map(<[u8]>::to_vec), Some(bytes.to_vec())),
    };
    let row = Row {
        journal: journal.as_deref(),
        task: task.as_deref(),
    }
    .encode();
    w.tables
        .invocations
        .put(w.txn, id, &row)
        .map_err(w.heed_err())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_with_either_part_absent_and_damage_is_refused() {
        for (journal, task) in [
            (Some(&b"{\"j\":1}"[..]), Some(&b"{\"t\":2}"[..])),
            (Some(&b"{}"[..]), None),
            (None, Some(&b"{\"t\":2}"[..])),
            (None, None),
        ] {
            let row = Row { journal, task };
            assert_eq!(Row::decode(&row.encode()), Some(row));
        }
        let full = Row {
            journal: Some(b"{\"j\":1}"),
            task: None,
        }
        .encode();
        assert_eq!(Row::decode(&full[..3]), None);
        assert_eq!(Row::decode(&full[..full.len() - 1]), None);
    }
}
