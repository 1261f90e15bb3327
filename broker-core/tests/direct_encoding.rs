//! The records the store's writer encodes on every call (worlds, entries, entry hashes, task
//! states) are written directly as canonical JSON instead of through a `serde_json::Value`.
//! Their bytes must be exactly the canonical form of the value they stand for, for any field
//! values: these properties compare the two writings, refusals included.

use broker_core::canon::{self, CanonError};
use broker_core::log::{Entry, EntryHeader, World};
use broker_core::object::Ref;
use broker_core::task::{TaskPhase, TaskState};
use proptest::prelude::*;
use serde_json::json;

fn arb_ref() -> impl Strategy<Value = Ref> {
    any::<[u8; 32]>().prop_map(Ref::from_bytes)
}

/// Integers around the edge of canonical JSON's exact range, and anywhere else.
fn arb_integer() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..1_000,
        (canon::MAX_SAFE_INTEGER - 2)..=(canon::MAX_SAFE_INTEGER + 2),
        any::<u64>(),
    ]
}

/// Text with quotes, backslashes, control characters and characters beyond the BMP.
fn arb_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z:._-]{0,24}",
        any::<String>(),
        Just("\"\\\u{0}\u{1f}\u{7f}\u{2028}é😀".to_owned()),
    ]
}

fn arb_header() -> impl Strategy<Value = EntryHeader> {
    (
        arb_integer(),
        arb_integer(),
        arb_ref(),
        arb_ref(),
        arb_ref(),
        arb_text(),
    )
        .prop_map(
            |(entry_index, semantics_epoch, transition_fn, interpreter, prev, written_by)| {
                EntryHeader {
                    entry_index,
                    semantics_epoch,
                    transition_fn,
                    interpreter,
                    prev_entry_hash: prev,
                    written_by,
                }
            },
        )
}

fn arb_task_state() -> impl Strategy<Value = TaskState> {
    (
        (arb_text(), arb_text(), arb_ref()),
        prop_oneof![
            Just(TaskPhase::Pending),
            Just(TaskPhase::Committed),
            Just(TaskPhase::Unrecorded),
        ],
        (
            proptest::option::of(arb_ref()),
            proptest::option::of(arb_integer()),
            proptest::option::of(arb_ref()),
            proptest::collection::vec(arb_ref(), 0..4),
        ),
    )
        .prop_map(
            |(
                (invocation_id, skill_id, input_ref),
                phase,
                (output_ref, entry_index, world_ref, effect_records),
            )| TaskState {
                invocation_id,
                skill_id,
                input_ref,
                phase,
                output_ref,
                entry_index,
                world_ref,
                effect_records,
            },
        )
}

/// Both writings agree: the same bytes, or both refuse an integer beyond 2^53−1.
fn same(direct: Result<Vec<u8>, CanonError>, through_value: Result<Vec<u8>, CanonError>) {
    match (direct, through_value) {
        (Ok(a), Ok(b)) => assert_eq!(String::from_utf8(a).unwrap(), String::from_utf8(b).unwrap()),
        (Err(a), Err(b)) => {
            assert_eq!(a, b);
            assert!(matches!(a, CanonError::UnsafeInteger { .. }), "{a}");
        }
        (a, b) => panic!("direct {a:?} but through a value {b:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn a_world_is_written_as_the_canonical_form_of_its_value(
        revision in arb_integer(), state_root in arb_ref(), log_head in arb_ref(),
    ) {
        let world = World { revision, state_root, log_head };
        same(world.to_bytes(), canon::to_vec(&world.to_value()));
    }

    #[test]
    fn an_entry_is_written_as_the_canonical_form_of_its_value(
        header in arb_header(), entry_hash in arb_ref(), transition_ref in arb_ref(),
    ) {
        let entry = Entry { header, entry_hash, transition_ref };
        same(entry.to_bytes(), canon::to_vec(&entry.to_value()));
    }

    /// The entry hash is the sha256 of the canonical JSON of the seven fields, as the data
    /// model defines it.
    #[test]
    fn an_entry_hash_is_the_hash_of_its_seven_fields_canonical_form(
        h in arb_header(), transition_ref in arb_ref(),
    ) {
        let fields = json!({
            "entryIndex": h.entry_index,
            "semanticsEpoch": h.semantics_epoch,
            "transitionFn": h.transition_fn.to_string(),
            "interpreter": h.interpreter.to_string(),
            "prevEntryHash": h.prev_entry_hash.to_string(),
            "writtenBy": h.written_by,
            "transitionRef": transition_ref.to_string(),
        });
        match (Entry::compute_hash(&h, &transition_ref), Ref::of_json(&fields)) {
            (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
            (Err(a), Err(b)) => prop_assert_eq!(a, b),
            (a, b) => panic!("direct {a:?} but through a value {b:?}"),
        }
    }

    #[test]
    fn a_task_state_is_written_as_the_canonical_form_of_its_serde_value(
        state in arb_task_state(),
    ) {
        let value = serde_json::to_value(&state).unwrap();
        same(state.to_bytes(), canon::to_vec(&value));
        // And it reads back as itself.
        if let Ok(bytes) = state.to_bytes() {
            prop_assert_eq!(serde_json::from_slice::<TaskState>(&bytes).unwrap(), state);
        }
    }
}
