//! The invocation record a call's log entry names (`world/invocation-record/v2`,
//! `docs/data-model.md` §3.4), written as canonical JSON directly: one per committed call, so
//! building a `serde_json::Value` only to write it was a cost of every call.

use crate::canon::{CanonError, Members};
use crate::object::Ref;

/// What the record names, borrowed from the call being committed.
pub(super) struct InvocationRecord<'a> {
    pub invocation_id: &'a str,
    pub episode_id: &'a str,
    pub skill_id: &'a str,
    pub transition_fn: Ref,
    pub interpreter: Ref,
    pub semantics_epoch: u64,
    pub input: Ref,
    pub output: Ref,
    pub plan: Ref,
    pub effects: &'a [Ref],
}

impl InvocationRecord<'_> {
    /// The record's canonical JSON, the payload of its object: the bytes of
    /// `canon::to_vec` of the same members as a value.
    pub fn canonical(&self) -> Result<Vec<u8>, CanonError> {
        Ok(Members::new()
            .plain_array("effects", self.effects)
            .string("episodeId", self.episode_id)
            .plain("input", self.input)
            .plain("interpreter", self.interpreter)
            .string("invocationId", self.invocation_id)
            .plain("output", self.output)
            .plain("plan", self.plan)
            .integer("semanticsEpoch", self.semantics_epoch)?
            .string("skillId", self.skill_id)
            .plain("transitionFn", self.transition_fn)
            .finish()
            .into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The record as the daemon wrote it before it was written directly: a value, canonicalized.
    fn as_value(r: &InvocationRecord<'_>) -> Vec<u8> {
        crate::canon::to_vec(&json!({
            "invocationId": r.invocation_id,
            "episodeId": r.episode_id,
            "skillId": r.skill_id,
            "transitionFn": r.transition_fn,
            "interpreter": r.interpreter,
            "semanticsEpoch": r.semantics_epoch,
            "input": r.input,
            "output": r.output,
            "plan": r.plan,
            "effects": r.effects,
        }))
        .unwrap()
    }

    #[test]
    fn an_invocation_record_written_directly_is_its_value_written_canonically() {
        let effects = [Ref::of(b"e1"), Ref::of(b"e2")];
        let max = (1u64 << 53) - 1;
        let cases = [
            ("mcp:ep:t1", "ep", "ailang-read", 1, &effects[..1]),
            (
                "a2a:é \"q\"\n:\u{e000}",
                "ep\\\u{1F600}",
                "skill\t\u{7f}",
                max,
                &effects[..],
            ),
            ("rest:x:y", "", "", 0, &[][..]),
        ];
        for (invocation_id, episode_id, skill_id, semantics_epoch, effects) in cases {
            let record = InvocationRecord {
                invocation_id,
                episode_id,
                skill_id,
                transition_fn: Ref::of(b"tf"),
                interpreter: Ref::of(b"interp"),
                semantics_epoch,
                input: Ref::of(b"in"),
                output: Ref::of(b"out"),
                plan: Ref::of(b"plan"),
                effects,
            };
            assert_eq!(
                String::from_utf8(record.canonical().unwrap()).unwrap(),
                String::from_utf8(as_value(&record)).unwrap()
            );
        }
        let over = InvocationRecord {
            invocation_id: "i",
            episode_id: "e",
            skill_id: "s",
            transition_fn: Ref::of(b"tf"),
            interpreter: Ref::of(b"interp"),
            semantics_epoch: max + 1,
            input: Ref::of(b"in"),
            output: Ref::of(b"out"),
            plan: Ref::of(b"plan"),
            effects: &[],
        };
        assert!(over.canonical().is_err());
        assert!(crate::canon::to_vec(&json!({"semanticsEpoch": max + 1})).is_err());
    }
}
