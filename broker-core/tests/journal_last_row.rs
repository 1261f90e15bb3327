//! A journal whose last row leaves no sequence number after it: every call journals its
//! intent at the next one, so a daemon opening such a store to serve it must refuse to start
//! rather than start and fail every call.

mod common;

use broker_core::log;
use broker_core::store::{RawTable, Store, StoreOptions};
use common::append_n;

#[test]
fn a_journal_whose_last_row_is_at_the_final_sequence_number_is_refused_when_the_store_is_opened_to_serve(
) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let store = Store::create(&db).unwrap();
    store.write(|w| log::append(w, &append_n(1))).unwrap();
    store.check_head().unwrap();
    store
        .raw_overwrite(
            RawTable::Journal,
            u64::MAX.to_be_bytes().to_vec(),
            b"a stray row".to_vec(),
        )
        .unwrap();
    drop(store);
    let store = Store::open(&db, StoreOptions::default()).unwrap();
    let err = store.check_head().unwrap_err().to_string();
    assert_eq!(
        err,
        format!(
            "world store {} is damaged: the journal's last row is #18446744073709551615, and no sequence number follows it: no call could be journaled, so the daemon takes none; run `worldd doctor` on the store to see what else is damaged (a copy taken while a daemon wrote it, or a failing disk?); restore the directory from a backup",
            db.display()
        )
    );
    // The check wrote nothing: the stray row is still the last.
    assert_eq!(
        store
            .raw_get(RawTable::Journal, &u64::MAX.to_be_bytes())
            .unwrap()
            .as_deref(),
        Some(&b"a stray row"[..])
    );
}

/// A journal with rows at ordinary sequence numbers passes.
#[test]
fn a_journal_with_room_after_its_last_row_passes_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let store = Store::create(&db).unwrap();
    store
        .raw_overwrite(
            RawTable::Journal,
            (u64::MAX - 1).to_be_bytes().to_vec(),
            b"a row".to_vec(),
        )
        .unwrap();
    store.check_head().unwrap();
}
