//! Hashing never hides a failure: a value with no canonical form is an error, never the hash
//! of empty bytes or the zero ref (as `unwrap_or_default()` once made it).

use broker_core::canon::CanonError;
use broker_core::log::{self, Entry, EntryHeader, World};
use broker_core::object::Ref;

/// The first integer canonical JSON cannot hold exactly.
const UNSAFE: u64 = 1 << 53;

fn header(entry_index: u64) -> EntryHeader {
    EntryHeader {
        entry_index,
        semantics_epoch: log::SEMANTICS_EPOCH,
        transition_fn: Ref::of(b"fn"),
        interpreter: log::interpreter_ref().unwrap(),
        prev_entry_hash: Ref::ZERO,
        written_by: "rest:test".into(),
    }
}

#[test]
fn entry_index_beyond_the_exact_integer_range_is_an_error_not_the_hash_of_empty_bytes() {
    let err = Entry::compute_hash(&header(UNSAFE), &Ref::of(b"rec")).unwrap_err();
    assert!(matches!(err, CanonError::UnsafeInteger { .. }), "{err}");
    assert!(Entry::new(header(UNSAFE), Ref::of(b"rec")).is_err());
    // An entry carrying such an index (parsed, not built) has no valid hash, whatever it claims.
    let forged = Entry {
        header: header(UNSAFE),
        entry_hash: Ref::of(b""),
        transition_ref: Ref::of(b"rec"),
    };
    assert!(!forged.hash_is_valid());
    assert!(forged.to_bytes().is_err());
    // One below the bound is fine.
    let fine = Entry::new(header(UNSAFE - 1), Ref::of(b"rec")).unwrap();
    assert!(fine.hash_is_valid());
    assert_ne!(fine.entry_hash, Ref::of(b""));
}

#[test]
fn world_revision_beyond_the_exact_integer_range_has_no_ref() {
    let world = World {
        revision: UNSAFE,
        state_root: Ref::of(b"out"),
        log_head: Ref::of(b"head"),
    };
    assert!(matches!(
        world.reference(),
        Err(CanonError::UnsafeInteger { .. })
    ));
    assert!(world.to_bytes().is_err());
    let world = World {
        revision: 7,
        ..world
    };
    assert_eq!(
        world.reference().unwrap(),
        Ref::of(&world.to_bytes().unwrap())
    );
}

#[test]
fn one_semantics_epoch_for_the_log_and_the_interpreter() {
    assert_eq!(log::SEMANTICS_EPOCH, broker_core::plan::SEMANTICS_EPOCH);
    assert_eq!(
        broker_core::plan::interpreter_document()["semanticsEpoch"],
        log::SEMANTICS_EPOCH
    );
}
