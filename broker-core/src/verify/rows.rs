//! The coordinator's stored rows of one invocation, as bytes.
//!
//! The journal link of `why` checks a coordinator's entry against what only the coordinator
//! writes: the invocation's task state and its journal rows. Those rows have no content
//! address, so a remote verifier cannot check them by hash; what it can do is recompute the
//! verdict itself. [`InvocationRows::read`] takes the stored bytes out of a store (the daemon
//! serves them at `GET /v1/invocations/{id}/rows`); [`InvocationRows::task_state`] and
//! [`InvocationRows::journal_state`] parse and cross-check those bytes with the very functions
//! a store read uses, so a served row is trusted no more than a stored one.

use std::collections::BTreeMap;

use super::source::SourceError;
use crate::journal::{self, JournalState};
use crate::store::{ReadCtx, StoreError};
use crate::task::{self, TaskState};

/// The task row and journal rows of one invocation, each as stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InvocationRows {
    /// The task state (key: the id's episode and `<surface>:<task>`).
    pub task: Option<Vec<u8>>,
    /// The journal's index row of the invocation (its [`JournalState`]).
    pub journal: Option<Vec<u8>>,
    /// The journal rows that index row names (its intent and outcome), by sequence number.
    pub journal_rows: BTreeMap<u64, Vec<u8>>,
}

/// The sequence numbers an index row names; only to know which rows to hand over.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Seqs {
    intent_seq: u64,
    #[serde(default)]
    outcome_seq: Option<u64>,
}

impl InvocationRows {
    /// The rows of `invocation_id` (`<surface>:<episode>:<task>`) in a store; `None` when the
    /// id is not of that form.
    pub fn read(r: &ReadCtx<'_>, invocation_id: &str) -> Result<Option<Self>, StoreError> {
        let Some((surface, episode, task_id)) = task::split_invocation_id(invocation_id) else {
            return Ok(None);
        };
        let task = task::get_bytes(r, episode, &format!("{surface}:{task_id}"))?;
        let index = journal::index_row(r, invocation_id)?;
        let mut journal_rows = BTreeMap::new();
        // An unreadable index row is handed over as it is, without rows: the reader's parse
        // reports it.
        if let Some(seqs) = index.and_then(|b| serde_json::from_slice::<Seqs>(b).ok()) {
            for seq in std::iter::once(seqs.intent_seq).chain(seqs.outcome_seq) {
                if let Some(bytes) = journal::row(r, seq)? {
                    journal_rows.insert(seq, bytes.to_vec());
                }
            }
        }
        Ok(Some(InvocationRows {
            task: task.map(<[u8]>::to_vec),
            journal: index.map(<[u8]>::to_vec),
            journal_rows,
        }))
    }

    /// The task state of `invocation_id`, parsed from the bytes as a store read parses them.
    pub fn task_state(&self, invocation_id: &str) -> Result<Option<TaskState>, SourceError> {
        let Some(bytes) = &self.task else {
            return Ok(None);
        };
        let (surface, episode, task_id) = task::split_invocation_id(invocation_id)
            .ok_or_else(|| SourceError(format!("{invocation_id} is not an invocation id")))?;
        Ok(Some(task::from_bytes(
            episode,
            &format!("{surface}:{task_id}"),
            bytes,
        )?))
    }

    /// The journal state of `invocation_id`, checked against the journal rows it names exactly
    /// as a store read checks it ([`journal::verified_state`]).
    pub fn journal_state(&self, invocation_id: &str) -> Result<Option<JournalState>, SourceError> {
        let Some(index) = &self.journal else {
            return Ok(None);
        };
        let rows = &self.journal_rows;
        Ok(Some(journal::state_from_rows(
            invocation_id,
            index,
            |seq| Ok(rows.get(&seq).map(Vec::as_slice)),
        )?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canon;
    use serde_json::json;

    fn rows(index: serde_json::Value, intent: serde_json::Value) -> InvocationRows {
        InvocationRows {
            task: None,
            journal: Some(canon::to_vec(&index).unwrap()),
            journal_rows: BTreeMap::from([(3, canon::to_vec(&intent).unwrap())]),
        }
    }

    fn intent(id: &str, cost: u64) -> serde_json::Value {
        json!({"invocationId": id, "episode": "ep1", "effect": "Workspace.Read",
               "scope": "worktree", "cost": cost, "requestRef": format!("sha256:{}", "ab".repeat(32))})
    }

    fn index(id: &str) -> serde_json::Value {
        json!({"intent": intent(id, 1), "intentSeq": 3, "outcomeSeq": null, "status": null,
               "resultRef": null})
    }

    #[test]
    fn served_rows_are_checked_as_a_store_checks_its_own() {
        let mut row = intent("a2a:ep1:t", 1);
        row["kind"] = json!("intent");
        row["seq"] = json!(3);
        let good = rows(index("a2a:ep1:t"), row.clone());
        let state = good.journal_state("a2a:ep1:t").unwrap().unwrap();
        assert_eq!((state.intent_seq, state.intent.cost), (3, 1));

        // A row whose cost was rewritten no longer is the intent its index records.
        row["cost"] = json!(0);
        let e = rows(index("a2a:ep1:t"), row.clone())
            .journal_state("a2a:ep1:t")
            .unwrap_err();
        assert_eq!(
            e.0,
            "journal is damaged: journal row #3 is not the intent the index records for a2a:ep1:t"
        );
    }

    #[test]
    fn another_invocations_rows_served_under_this_id_are_refused() {
        let mut row = intent("a2a:ep1:other", 1);
        row["kind"] = json!("intent");
        row["seq"] = json!(3);
        let e = rows(index("a2a:ep1:other"), row)
            .journal_state("a2a:ep1:t")
            .unwrap_err();
        assert_eq!(
            e.0,
            "journal is damaged: the journal index row given for a2a:ep1:t is a2a:ep1:other's"
        );
    }

    #[test]
    fn absent_rows_are_none_and_unreadable_ones_an_error() {
        let none = InvocationRows::default();
        assert_eq!(none.journal_state("a2a:ep1:t").unwrap(), None);
        assert_eq!(none.task_state("a2a:ep1:t").unwrap(), None);
        let bad = InvocationRows {
            task: Some(b"{not json".to_vec()),
            ..Default::default()
        };
        assert_eq!(
            bad.task_state("a2a:ep1:t").unwrap_err().0,
            "store is damaged: task state ep1/a2a:t is unreadable"
        );
    }
}
