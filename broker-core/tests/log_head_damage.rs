//! A log whose newest row is not the entry its key says: every append continues the newest
//! row's world, so such a row must stop the append (and the serving daemon's open) instead of
//! letting it write over committed entries or chain onto a hash no entry has.

mod common;

use broker_core::log::{self, LogError};
use broker_core::object::Ref;
use broker_core::store::{RawTable, Store, StoreError, StoreOptions};
use common::append_n;

/// A store with its genesis and entries 1 to 3.
fn store_with_three_entries() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    for n in 1..=3 {
        let c = store.write(move |w| log::append(w, &append_n(n))).unwrap();
        assert_eq!(c.entry.header.entry_index, n);
    }
    (dir, store)
}

fn key(index: u64) -> Vec<u8> {
    index.to_be_bytes().to_vec()
}

fn row(store: &Store, index: u64) -> Option<Vec<u8>> {
    store.raw_get(RawTable::LogRow, &key(index)).unwrap()
}

/// Every row of the log, by index.
fn rows(store: &Store) -> Vec<(u64, Vec<u8>)> {
    (0..200)
        .filter_map(|i| row(store, i).map(|bytes| (i, bytes)))
        .collect()
}

/// The world JSON of row `index`, changed by `edit`, written back beside its old world ref.
fn edit_world(store: &Store, index: u64, edit: impl Fn(&str) -> String) {
    let world_ref = log_world_ref(store, index);
    let bytes = store
        .raw_get(RawTable::Worlds, world_ref.as_bytes())
        .unwrap()
        .unwrap();
    let edited = edit(std::str::from_utf8(&bytes).unwrap());
    assert_ne!(edited.as_bytes(), &bytes[..], "the edit changed nothing");
    store
        .raw_overwrite(
            RawTable::Worlds,
            world_ref.as_bytes().to_vec(),
            edited.into(),
        )
        .unwrap();
}

fn log_world_ref(store: &Store, index: u64) -> Ref {
    store
        .read(|r| log::world_ref_at(r, index))
        .unwrap()
        .unwrap()
}

/// The next append is refused as store damage naming `what`, writes nothing, and reopening the
/// store to serve it is refused with the same words.
fn append_and_serve_refused(dir: &tempfile::TempDir, store: Store, what: &str) {
    let before = rows(&store);
    let err = store.write(|w| log::append(w, &append_n(9))).unwrap_err();
    let said = format!(
        "store is damaged: the log's newest row, {what}: a new entry would be written over committed ones or chained to no entry, so none is appended; run `worldd doctor` on the store to see what else is damaged"
    );
    assert!(
        matches!(err, LogError::Store(StoreError::Corrupt(_))),
        "{err}"
    );
    assert_eq!(err.to_string(), said);
    assert_eq!(rows(&store), before, "a row was written or replaced");
    drop(store);
    let db = dir.path().join("db");
    let store = Store::open(&db, StoreOptions::default()).unwrap();
    let err = store.check_head().unwrap_err();
    assert!(matches!(err, StoreError::Damaged { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "world store {} is damaged: the log's newest row, {what}: a new entry would be written over committed ones or chained to no entry, so none is appended; run `worldd doctor` on the store to see what else is damaged (a copy taken while a daemon wrote it, or a failing disk?); restore the directory from a backup",
            db.display()
        )
    );
    assert_eq!(rows(&store), before, "the check wrote");
}

#[test]
fn a_stray_copy_of_an_older_row_past_the_head_stops_the_append_before_it_overwrites_an_entry() {
    let (dir, store) = store_with_three_entries();
    let stray = row(&store, 1).unwrap();
    store
        .raw_overwrite(RawTable::LogRow, key(4), stray)
        .unwrap();
    append_and_serve_refused(&dir, store, "4, holds the world of revision 1");
}

#[test]
fn a_copy_of_the_newest_entry_in_the_next_row_stops_the_append_before_it_overwrites_the_copy() {
    let (dir, store) = store_with_three_entries();
    let copy = row(&store, 3).unwrap();
    store.raw_overwrite(RawTable::LogRow, key(4), copy).unwrap();
    append_and_serve_refused(&dir, store, "4, holds the world of revision 3");
}

#[test]
fn a_newest_world_whose_revision_digit_changed_stops_the_append_before_it_overwrites_an_entry() {
    let (dir, store) = store_with_three_entries();
    edit_world(&store, 3, |w| w.replace("\"revision\":3", "\"revision\":1"));
    append_and_serve_refused(&dir, store, "3, holds the world of revision 1");
}

#[test]
fn a_newest_world_whose_revision_jumped_stops_the_append_before_it_leaves_a_gap() {
    let (dir, store) = store_with_three_entries();
    edit_world(&store, 3, |w| {
        w.replace("\"revision\":3", "\"revision\":99")
    });
    append_and_serve_refused(&dir, store, "3, holds the world of revision 99");
}

#[test]
fn a_newest_world_whose_log_head_changed_stops_the_append_before_it_chains_to_no_entry() {
    let (dir, store) = store_with_three_entries();
    let entry_hash = store
        .read(|r| log::entry(r, 3))
        .unwrap()
        .unwrap()
        .entry_hash;
    let forged = Ref::of(b"no entry");
    edit_world(&store, 3, |w| {
        w.replace(&entry_hash.to_string(), &forged.to_string())
    });
    append_and_serve_refused(
        &dir,
        store,
        &format!("3, holds a world whose logHead {forged} is not its entry's hash {entry_hash}"),
    );
}

#[test]
fn a_newest_world_that_does_not_hash_to_its_ref_is_refused_when_the_store_is_opened_to_serve() {
    let (dir, store) = store_with_three_entries();
    let world_ref = log_world_ref(&store, 3);
    let state_root = store.read(log::head).unwrap().unwrap().world.state_root;
    let other = Ref::of(b"another state");
    edit_world(&store, 3, |w| {
        w.replace(&state_root.to_string(), &other.to_string())
    });
    drop(store);
    let db = dir.path().join("db");
    let store = Store::open(&db, StoreOptions::default()).unwrap();
    let err = store.check_head().unwrap_err().to_string();
    let world = store
        .raw_get(RawTable::Worlds, world_ref.as_bytes())
        .unwrap()
        .unwrap();
    let recomputed = Ref::of(&world);
    assert!(
        err.starts_with(&format!(
            "world store {} is damaged: the log's newest row, 3, holds world bytes that hash to {recomputed}, not to its world ref {world_ref}: ",
            db.display()
        )),
        "{err}"
    );
    assert!(err.contains("run `worldd doctor` on the store"), "{err}");
}

#[test]
fn a_whole_log_passes_the_head_check_and_takes_appends() {
    let (_dir, store) = store_with_three_entries();
    store.check_head().unwrap();
    let c = store.write(|w| log::append(w, &append_n(4))).unwrap();
    assert_eq!(c.entry.header.entry_index, 4);
    store.check_head().unwrap();
}

/// Attack (a busy daemon beside `worldd doctor`): the audit read the head and the log's last
/// index in two read transactions, so a group commit landing between them made a healthy
/// store's head look one revision behind its log (`the head selects revision N but the last
/// entry is N+1`, doctor's exit 3). Both are read in one snapshot now.
#[test]
fn a_commit_landing_while_the_audit_reads_the_head_is_no_finding() {
    let (_dir, store) = store_with_three_entries();
    let writer = store.clone();
    let once = std::sync::atomic::AtomicBool::new(true);
    // The audit's first read transaction has begun (its snapshot fixed) when a commit lands.
    assert!(store.on_read(Box::new(move |_| {
        if once.swap(false, std::sync::atomic::Ordering::SeqCst) {
            writer.write(|w| log::append(w, &append_n(4))).unwrap();
        }
    })));
    let audit = broker_core::verify::audit_store(&store).unwrap();
    assert!(audit.head_findings.is_empty(), "{:?}", audit.head_findings);
    assert_eq!(store.read(log::last_index).unwrap(), Some(4));
}
