//! The coordinator's stored rows of one invocation, as bytes.
//!
//! The journal link of `why` checks a coordinator's entry against what only the coordinator
//! writes: the invocation's task state and journal state, and the journal rows the latter
//! names. A store keeps the first two in the invocation's row (as its first durable point left
//! them) and in the resolution of its intent (as its outcome left them), `docs/data-model.md`
//! §8.2. Those rows have no content address, so a remote verifier cannot check them by hash;
//! what it can do is recompute the verdict itself. [`InvocationRows::read`] takes the stored
//! bytes out of a store (the daemon serves them at `GET /v1/invocations/{id}/rows`);
//! [`InvocationRows::task_state`] and [`InvocationRows::journal_state`] decode, merge and
//! cross-check those bytes with the very functions a store read uses, so a served row is
//! trusted no more than a stored one.

use std::collections::BTreeMap;

use super::source::SourceError;
use crate::invocations::{self, Row};
use crate::journal::{self, JournalState};
use crate::store::{ReadCtx, StoreError};
use crate::task::{self, TaskState};

/// The rows of one invocation, each as stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InvocationRows {
    /// The invocation's row (table `invocations`): its intent's journal sequence and the
    /// journal and task states of its first durable point.
    pub invocation: Option<Vec<u8>>,
    /// The resolution of that intent (table `resolutions`, keyed by the row's intent
    /// sequence): the journal and task states its outcome wrote.
    pub resolution: Option<Vec<u8>>,
    /// The journal rows the visible journal state names (its intent and outcome), by sequence.
    pub journal_rows: BTreeMap<u64, Vec<u8>>,
}

/// The sequence numbers a journal state names; only to know which rows to hand over.
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
        if task::split_invocation_id(invocation_id).is_none() {
            return Ok(None);
        }
        let Some((row, resolution)) = invocations::stored(r, invocation_id)? else {
            return Ok(Some(InvocationRows::default()));
        };
        let mut journal_rows = BTreeMap::new();
        // Unreadable rows are handed over as they are, without journal rows: the reader's
        // decoding reports them.
        let seqs = invocations::visible(invocation_id, row, resolution)
            .ok()
            .and_then(|v| v.journal)
            .and_then(|j| serde_json::from_slice::<Seqs>(j).ok());
        if let Some(seqs) = seqs {
            for seq in std::iter::once(seqs.intent_seq).chain(seqs.outcome_seq) {
                if let Some(bytes) = journal::row_bytes(r, seq)? {
                    journal_rows.insert(seq, bytes.to_vec());
                }
            }
        }
        Ok(Some(InvocationRows {
            invocation: Some(row.to_vec()),
            resolution: resolution.map(<[u8]>::to_vec),
            journal_rows,
        }))
    }

    /// What a store read sees of the invocation: its row with the resolution's parts over it.
    fn visible(&self, invocation_id: &str) -> Result<Option<Row<'_>>, SourceError> {
        match &self.invocation {
            Some(row) => Ok(Some(invocations::visible(
                invocation_id,
                row,
                self.resolution.as_deref(),
            )?)),
            None if self.resolution.is_some() => Err(SourceError::from(StoreError::Corrupt(
                format!("a resolution is given for {invocation_id}, which has no invocation row"),
            ))),
            None => Ok(None),
        }
    }

    /// The task state of `invocation_id`, decoded from the bytes as a store read decodes them.
    pub fn task_state(&self, invocation_id: &str) -> Result<Option<TaskState>, SourceError> {
        let Some(bytes) = self.visible(invocation_id)?.and_then(|row| row.task) else {
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
        let Some(state) = self.visible(invocation_id)?.and_then(|row| row.journal) else {
            return Ok(None);
        };
        let rows = &self.journal_rows;
        Ok(Some(journal::state_from_rows(
            invocation_id,
            state,
            |seq| Ok(rows.get(&seq).map(Vec::as_slice)),
        )?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canon;
    use serde_json::json;

    fn encode(intent: Option<u64>, journal: Option<&serde_json::Value>) -> Vec<u8> {
        let journal = journal.map(|j| canon::to_vec(j).unwrap());
        Row {
            intent,
            journal: journal.as_deref(),
            task: None,
        }
        .encode()
    }

    fn rows(state: serde_json::Value, intent: serde_json::Value) -> InvocationRows {
        InvocationRows {
            invocation: Some(encode(Some(3), Some(&state))),
            resolution: None,
            journal_rows: BTreeMap::from([(3, canon::to_vec(&intent).unwrap())]),
        }
    }

    fn intent(id: &str, cost: u64) -> serde_json::Value {
        json!({"invocationId": id, "episode": "ep1", "effect": "Workspace.Read",
               "scope": "worktree", "cost": cost, "requestRef": format!("sha256:{}", "ab".repeat(32))})
    }

    fn state(id: &str) -> serde_json::Value {
        json!({"intent": intent(id, 1), "intentSeq": 3, "outcomeSeq": null, "status": null,
               "resultRef": null})
    }

    /// [`state`] resolved by the outcome at journal row 4.
    fn resolved_state(id: &str) -> serde_json::Value {
        let mut resolved = state(id);
        resolved["outcomeSeq"] = json!(4);
        resolved["status"] = json!("succeeded");
        resolved
    }

    /// The outcome row [`resolved_state`] names.
    fn outcome_row(id: &str) -> serde_json::Value {
        json!({"kind": "outcome", "seq": 4, "invocationId": id, "status": "succeeded",
               "resultRef": null})
    }

    /// `served`, with its outcome row saying another status than its state, is refused.
    fn refuses_another_outcome_row(served: &mut InvocationRows, mut outcome: serde_json::Value) {
        outcome["status"] = json!("failed");
        served
            .journal_rows
            .insert(4, canon::to_vec(&outcome).unwrap());
        assert_eq!(
            served.journal_state("a2a:ep1:t").unwrap_err().0,
            "journal is damaged: journal row #4 is not the outcome the index records for a2a:ep1:t"
        );
    }

    fn intent_row(id: &str, cost: u64) -> serde_json::Value {
        let mut row = intent(id, cost);
        row["kind"] = json!("intent");
        row["seq"] = json!(3);
        row
    }

    #[test]
    fn served_rows_are_checked_as_a_store_checks_its_own() {
        let good = rows(state("a2a:ep1:t"), intent_row("a2a:ep1:t", 1));
        let s = good.journal_state("a2a:ep1:t").unwrap().unwrap();
        assert_eq!((s.intent_seq, s.intent.cost), (3, 1));

        // A row whose cost was rewritten no longer is the intent its state records.
        let e = rows(state("a2a:ep1:t"), intent_row("a2a:ep1:t", 0))
            .journal_state("a2a:ep1:t")
            .unwrap_err();
        assert_eq!(
            e.0,
            "journal is damaged: journal row #3 is not the intent the index records for a2a:ep1:t"
        );
    }

    #[test]
    fn a_resolution_is_read_over_the_row_it_resolves() {
        let resolved = resolved_state("a2a:ep1:t");
        let outcome = outcome_row("a2a:ep1:t");
        let mut served = rows(state("a2a:ep1:t"), intent_row("a2a:ep1:t", 1));
        served.resolution = Some(encode(None, Some(&resolved)));
        served
            .journal_rows
            .insert(4, canon::to_vec(&outcome).unwrap());
        let s = served.journal_state("a2a:ep1:t").unwrap().unwrap();
        assert_eq!(s.outcome_seq, Some(4));

        // The resolution's outcome must be the outcome row's.
        refuses_another_outcome_row(&mut served, outcome);

        // A resolution resolves the intent of a row; without one (or without a row) it is
        // refused, not read.
        let mut orphan = served.clone();
        orphan.invocation = Some(encode(None, Some(&state("a2a:ep1:t"))));
        assert_eq!(
            orphan.journal_state("a2a:ep1:t").unwrap_err().0,
            "store is damaged: a resolution is given for invocation row a2a:ep1:t, which journals no intent"
        );
        orphan.invocation = None;
        assert_eq!(
            orphan.task_state("a2a:ep1:t").unwrap_err().0,
            "store is damaged: a resolution is given for a2a:ep1:t, which has no invocation row"
        );
    }

    /// A row whose outcome came in its intent's group commit holds the resolved state itself
    /// and is served without a resolution: it is checked against both journal rows it names.
    #[test]
    fn a_row_resolved_in_place_is_read_and_checked_without_a_resolution() {
        let resolved = resolved_state("a2a:ep1:t");
        let outcome = outcome_row("a2a:ep1:t");
        let mut served = rows(resolved, intent_row("a2a:ep1:t", 1));
        served
            .journal_rows
            .insert(4, canon::to_vec(&outcome).unwrap());
        let s = served.journal_state("a2a:ep1:t").unwrap().unwrap();
        assert_eq!((s.intent_seq, s.outcome_seq), (3, Some(4)));
        refuses_another_outcome_row(&mut served, outcome);
    }

    #[test]
    fn another_invocations_rows_served_under_this_id_are_refused() {
        let e = rows(state("a2a:ep1:other"), intent_row("a2a:ep1:other", 1))
            .journal_state("a2a:ep1:t")
            .unwrap_err();
        assert_eq!(
            e.0,
            "journal is damaged: the journal state given for a2a:ep1:t is a2a:ep1:other's"
        );
    }

    #[test]
    fn absent_rows_are_none_and_unreadable_ones_an_error() {
        let none = InvocationRows::default();
        assert_eq!(none.journal_state("a2a:ep1:t").unwrap(), None);
        assert_eq!(none.task_state("a2a:ep1:t").unwrap(), None);
        let bad_task = InvocationRows {
            invocation: Some(
                Row {
                    intent: None,
                    journal: None,
                    task: Some(b"{not json"),
                }
                .encode(),
            ),
            ..Default::default()
        };
        assert_eq!(
            bad_task.task_state("a2a:ep1:t").unwrap_err().0,
            "store is damaged: task state ep1/a2a:t is unreadable"
        );
        // A row cut short is no row: the store's own decoding says so.
        let mut cut = encode(Some(3), Some(&state("a2a:ep1:t")));
        cut.truncate(20);
        let damaged = InvocationRows {
            invocation: Some(cut),
            ..Default::default()
        };
        assert_eq!(
            damaged.journal_state("a2a:ep1:t").unwrap_err().0,
            "store is damaged: invocation row a2a:ep1:t is damaged: its journal part's length says 259 byte(s), but 8 follow"
        );
    }
}
