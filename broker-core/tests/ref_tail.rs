//! The tail of the content-address index (schemas 3 to 5): objects, entries and invocation
//! rows stored since the last merge are found through the writing handle's map, by other
//! processes through a scan of the tail's rows, and by every snapshot, however old, whatever
//! merges happened since.

use std::collections::BTreeSet;
use std::process::Command;

use broker_core::coordinator::{Coordinator, CoordinatorConfig};
use broker_core::log;
use broker_core::object::{Object, Ref};
use broker_core::session::Session;
use broker_core::store::{RawTable, Store, StoreError, StoreOptions};
use broker_core::verify::{self, Handle};
use common::*;
use serde_json::json;

mod common;

fn object(tag: &str, i: u32) -> Object {
    Object::new("world/test/v1", "test", format!("{tag}-{i}").into_bytes())
}

fn put(store: &Store, objects: &[Object]) {
    for o in objects {
        let o = o.clone();
        store.write(move |w| w.put_object(&o)).unwrap();
    }
}

/// Keys of `refs` that index objects.
fn indexed_objects(store: &Store) -> BTreeSet<Ref> {
    store
        .raw_rows("refs")
        .unwrap()
        .into_iter()
        .filter(|(k, _)| k.len() == 33 && k[32] == b'o')
        .map(|(k, _)| Ref::from_slice(&k[..32]).unwrap())
        .collect()
}

/// The watermarks of `kind` (`objects` or `entries`) in `ref_index`, by partition; `None`
/// when none is recorded.
fn marks(store: &Store, kind: &str) -> Option<[u64; 16]> {
    let rows = store.raw_rows("ref_index").unwrap();
    let mut marks = [0; 16];
    for (p, mark) in marks.iter_mut().enumerate() {
        let key = format!("{kind}_indexed_{p:x}");
        let (_, v) = rows.iter().find(|(k, _)| k == key.as_bytes())?;
        *mark = u64::from_be_bytes(v.clone().try_into().unwrap());
    }
    Some(marks)
}

/// The partition of a `refs` key: the top four bits of its first byte.
fn partition(r: &Ref) -> usize {
    usize::from(r.as_bytes()[0] >> 4)
}

/// `refs` holds exactly the object keys below their partition's watermark.
fn objects_indexed_exactly_below_their_marks(store: &Store) {
    let marks = marks(store, "objects").unwrap();
    let expected: BTreeSet<Ref> = store
        .raw_rows("object_rows")
        .unwrap()
        .into_iter()
        .map(|(k, v)| {
            (
                u64::from_be_bytes(k.try_into().unwrap()),
                Ref::from_slice(&v[..32]).unwrap(),
            )
        })
        .filter(|(seq, r)| *seq < marks[partition(r)])
        .map(|(_, r)| r)
        .collect();
    assert_eq!(indexed_objects(store), expected);
}

fn all_found(store: &Store, objects: &[Object]) -> Result<(), String> {
    store
        .read(|r| {
            for o in objects {
                match r.object(&o.hash)? {
                    Some(found) if found.payload == o.payload => {}
                    other => {
                        return Ok(Err(format!(
                            "object {} read as {:?}",
                            o.hash,
                            other.map(|f| f.payload)
                        )))
                    }
                }
            }
            Ok::<_, StoreError>(Ok(()))
        })
        .unwrap()
}

fn open(db: &std::path::Path) -> Store {
    Store::open(
        db,
        StoreOptions {
            create: true,
            ..StoreOptions::default()
        },
    )
    .unwrap()
}

/// A new store in a temporary directory whose tail merges a partition every `merge_at / 16`
/// rows.
fn fresh_store(merge_at: u64) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("db"));
    store.set_ref_merge_at(merge_at).unwrap();
    (dir, store)
}

/// Storing objects that are already stored (found through the map, `refs` or a scan) adds no
/// row.
fn stored_again_adds_no_row(store: &Store, objects: &[Object]) {
    let rows = store.raw_rows("object_rows").unwrap().len();
    put(store, objects);
    assert_eq!(store.raw_rows("object_rows").unwrap().len(), rows);
}

#[test]
fn new_objects_wait_in_the_tail_and_are_merged_into_refs_one_partition_at_a_time() {
    // A partition is merged every 100 rows.
    let (_dir, store) = fresh_store(1_600);
    let before = indexed_objects(&store);
    let objects: Vec<_> = (0..250).map(|i| object("a", i)).collect();

    put(&store, &objects[..5]);
    // Stored and found, with no `refs` key of their own yet.
    all_found(&store, &objects[..5]).unwrap();
    assert_eq!(indexed_objects(&store), before);

    put(&store, &objects[5..]);
    all_found(&store, &objects).unwrap();
    // Two partitions merged, each up to the row that was newest then: `refs` holds their keys
    // below their watermarks, and no other object key.
    let marks = marks(&store, "objects").unwrap();
    // (A new store's first row set every watermark to 0.)
    let mut merged: Vec<u64> = marks.iter().copied().filter(|&m| m > 0).collect();
    merged.sort_unstable();
    assert_eq!(merged, [100, 200], "{marks:?}");
    objects_indexed_exactly_below_their_marks(&store);
    let in_refs = objects
        .iter()
        .filter(|o| indexed_objects(&store).contains(&o.hash))
        .count();
    assert!((1..100).contains(&in_refs), "{in_refs} of 250 in refs");

    // Storing an object again stores nothing, in the tail or out of it.
    stored_again_adds_no_row(&store, &[objects[0].clone(), objects[249].clone()]);

    // Every partition merged up to the newest row: every object has its key.
    store.merge_ref_tail().unwrap();
    objects_indexed_exactly_below_their_marks(&store);
    assert!(objects
        .iter()
        .all(|o| indexed_objects(&store).contains(&o.hash)));
    all_found(&store, &objects).unwrap();
}

#[test]
fn every_partition_is_merged_in_turn_and_the_tail_stays_under_its_length() {
    let (_dir, store) = fresh_store(64);
    let objects: Vec<_> = (0..300).map(|i| object("turn", i)).collect();
    for chunk in objects.chunks(30) {
        put(&store, chunk);
        let stored = store.raw_rows("object_rows").unwrap().len() as u64;
        let marks = marks(&store, "objects").unwrap();
        // The oldest partition is never more than 64 rows (plus the 4 of one turn) behind.
        let lag = stored - marks.iter().min().unwrap();
        assert!(lag <= 68, "{lag} rows behind: {marks:?}");
        objects_indexed_exactly_below_their_marks(&store);
    }
    all_found(&store, &objects).unwrap();
}

#[test]
fn a_reopened_store_finds_its_tail_from_the_rows() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let objects: Vec<_> = (0..40).map(|i| object("b", i)).collect();
    {
        let store = open(&db);
        store.set_ref_merge_at(16).unwrap();
        put(&store, &objects[..20]);
    }
    let store = open(&db);
    all_found(&store, &objects[..20]).unwrap();
    assert!(store
        .read(|r| r.object(&objects[30].hash))
        .unwrap()
        .is_none());
    store.set_ref_merge_at(16).unwrap();
    put(&store, &objects[20..]);
    all_found(&store, &objects).unwrap();
    // Stored again after the reopen: found, not duplicated.
    stored_again_adds_no_row(&store, &objects[..3]);
}

#[test]
fn a_failed_write_leaves_no_object_behind_in_the_map() {
    let (_dir, store) = fresh_store(4);
    let (lost, kept) = (object("lost", 0), object("kept", 0));
    let o = lost.clone();
    let err = store
        .write(move |w| -> Result<(), StoreError> {
            w.put_object(&o)?;
            Err(StoreError::Corrupt(
                "the operation fails after storing".into(),
            ))
        })
        .unwrap_err();
    assert!(err.to_string().contains("fails after storing"), "{err}");
    // `kept` takes the sequence `lost` had in the aborted transaction.
    put(&store, std::slice::from_ref(&kept));
    assert!(!store.read(|r| r.has_object(&lost.hash)).unwrap());
    all_found(&store, std::slice::from_ref(&kept)).unwrap();
    // And across merges, `lost` is not indexed under `kept`'s row either: not by the merges
    // that come with new rows, nor once every partition is merged (the map still holds `lost`
    // under that row number; a merge checks every key it takes from the map against its row).
    let more: Vec<_> = (0..8).map(|i| object("more", i)).collect();
    put(&store, &more);
    assert!(!store.read(|r| r.has_object(&lost.hash)).unwrap());
    assert!(!indexed_objects(&store).contains(&lost.hash));
    all_found(&store, &more).unwrap();
    store.merge_ref_tail().unwrap();
    assert!(!indexed_objects(&store).contains(&lost.hash));
    objects_indexed_exactly_below_their_marks(&store);
    all_found(&store, std::slice::from_ref(&kept)).unwrap();
    all_found(&store, &more).unwrap();
}

/// Writes that fail after storing objects, alone and among others queued with them (so that
/// batches are built again, and a second failure undoes a nested transaction), with a merge
/// after every row: no merge indexes a lost object, under its old row number or any other, and
/// every committed object is found. Debug builds also compare every merge's keys with the rows.
#[test]
fn failed_writes_in_and_among_batches_never_index_a_lost_key() {
    let (_dir, store) = fresh_store(16);
    let mut committed = Vec::new();
    let mut lost = Vec::new();
    for round in 0..40u32 {
        let mut queued = Vec::new();
        for op in 0..6u32 {
            let fails = (round * 7 + op * 3) % 5 == 0;
            let objects: Vec<Object> = (0..1 + op % 2)
                .map(|i| object(&format!("r{round}-op{op}"), i))
                .collect();
            let stored = objects.clone();
            let submitted = store.submit(move |w| -> Result<(), StoreError> {
                for o in &stored {
                    w.put_object(o)?;
                }
                if fails {
                    return Err(StoreError::Corrupt("fails after storing".into()));
                }
                Ok(())
            });
            queued.push((fails, objects, submitted));
        }
        for (fails, objects, submitted) in queued {
            assert_eq!(submitted.wait().is_err(), fails);
            if fails {
                lost.extend(objects);
            } else {
                committed.extend(objects);
            }
        }
        all_found(&store, &committed).unwrap();
        for o in &lost {
            assert!(
                !store.read(|r| r.has_object(&o.hash)).unwrap(),
                "{}",
                o.hash
            );
        }
    }
    store.merge_ref_tail().unwrap();
    objects_indexed_exactly_below_their_marks(&store);
    let indexed = indexed_objects(&store);
    assert!(lost.iter().all(|o| !indexed.contains(&o.hash)));
    all_found(&store, &committed).unwrap();
}

#[test]
fn a_snapshot_older_than_two_merges_still_finds_its_objects() {
    // A partition is merged every row.
    let (_dir, store) = fresh_store(16);
    let early: Vec<_> = (0..5).map(|i| object("early", i)).collect();
    let late: Vec<_> = (0..64).map(|i| object("late", i)).collect();
    put(&store, &early);
    let marks_then = marks(&store, "objects").unwrap();
    store
        .read(|r| {
            // Every partition is merged four times while this snapshot is open: its tail is no
            // longer in the map.
            put(&store, &late);
            let marks_now = marks(&store, "objects").unwrap();
            assert!(marks_now
                .iter()
                .zip(marks_then)
                .all(|(now, then)| *now > then));
            for o in &early {
                assert!(r.has_object(&o.hash)?, "{}", o.hash);
                assert_eq!(r.object(&o.hash)?.unwrap().payload, o.payload);
            }
            for o in &late {
                assert!(
                    !r.has_object(&o.hash)?,
                    "{} is newer than the snapshot",
                    o.hash
                );
            }
            Ok::<_, StoreError>(())
        })
        .unwrap();
    all_found(&store, &early).unwrap();
    all_found(&store, &late).unwrap();
}

const CHILD_DB: &str = "REF_TAIL_TEST_CHILD_DB";

/// Run as a second process by the test below: store forty objects, merging a partition after
/// each (so that the partitions' watermarks differ by up to a round), and exit.
fn child_stores_objects(db: &str) {
    let store = Store::open(std::path::Path::new(db), StoreOptions::default()).unwrap();
    store.set_ref_merge_at(16).unwrap();
    let objects: Vec<_> = (0..40).map(|i| object("child", i)).collect();
    put(&store, &objects);
    all_found(&store, &objects).unwrap();
}

#[test]
fn objects_another_process_stored_are_found_and_the_tail_is_claimed_back() {
    if let Ok(db) = std::env::var(CHILD_DB) {
        return child_stores_objects(&db);
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let store = open(&db);
    store.set_ref_merge_at(12).unwrap();
    let mine: Vec<_> = (0..6).map(|i| object("parent", i)).collect();
    put(&store, &mine);

    // Another process opens the store beside this one and stores objects into the tail.
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "objects_another_process_stored_are_found_and_the_tail_is_claimed_back",
        ])
        .env(CHILD_DB, &db)
        .status()
        .unwrap();
    assert!(status.success());
    let theirs: Vec<_> = (0..40).map(|i| object("child", i)).collect();

    // This handle's map knows none of them: they are found by scanning the tail.
    all_found(&store, &theirs).unwrap();
    all_found(&store, &mine).unwrap();
    // Storing one of theirs again stores nothing: the claim read the tail into the map.
    stored_again_adds_no_row(&store, &theirs[..2]);
    let more: Vec<_> = (0..20).map(|i| object("again", i)).collect();
    put(&store, &more);
    all_found(&store, &theirs).unwrap();
    all_found(&store, &mine).unwrap();
    all_found(&store, &more).unwrap();
    objects_indexed_exactly_below_their_marks(&store);
}

/// Turn the closed schema-3 store in `db`, whose objects are all in `refs`, into the schema-2
/// store it would have been: no `ref_index` table, version 2.
fn make_schema_2(db: &std::path::Path) {
    // SAFETY: the store is closed; nothing else maps this environment.
    let env = unsafe { heed::EnvOpenOptions::new().max_dbs(32).open(db).unwrap() };
    let wtxn = env.write_txn().unwrap();
    env.create_databases_and_commit(wtxn, |dbo, wtxn| -> heed::Result<_> {
        let meta: heed::Database<heed::types::Str, heed::types::Bytes> =
            dbo.create_database(wtxn, Some("meta"))?;
        meta.put(wtxn, "schema_version", b"2")?;
        let index: heed::Database<heed::types::Bytes, heed::types::Bytes> =
            dbo.create_database(wtxn, Some("ref_index"))?;
        // SAFETY: opened in this transaction, used nowhere else.
        unsafe { index.remove(wtxn)? };
        Ok(heed::CommitOrAbort::<(), ()>::Commit(()))
    })
    .unwrap();
    env.prepare_for_closing().wait();
}

#[test]
fn a_schema_2_store_is_upgraded_in_place_and_its_new_objects_form_the_tail() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let old: Vec<_> = (0..7).map(|i| object("old", i)).collect();
    {
        let store = open(&db);
        put(&store, &old);
        store.merge_ref_tail().unwrap();
        store.merge_semantic_tail().unwrap();
        let stored = store.raw_rows("object_rows").unwrap().len() as u64;
        assert_eq!(marks(&store, "objects"), Some([stored; 16]));
    }
    make_schema_2(&db);

    let store = open(&db);
    // Nothing moved: the tail is empty, every object is found through `refs`.
    assert_eq!(marks(&store, "objects"), None);
    all_found(&store, &old).unwrap();
    let stored = store.raw_rows("object_rows").unwrap().len() as u64;
    store.set_ref_merge_at(1_000).unwrap();
    let new: Vec<_> = (0..5).map(|i| object("new", i)).collect();
    put(&store, &new);
    // The first object stored records where the tail starts.
    assert_eq!(marks(&store, "objects"), Some([stored; 16]));
    assert!(new
        .iter()
        .all(|o| !indexed_objects(&store).contains(&o.hash)));
    all_found(&store, &old).unwrap();
    all_found(&store, &new).unwrap();
    drop(store);
    let store = open(&db);
    all_found(&store, &new).unwrap();
}

/// A test of merges means nothing unless some keys were merged and some still wait.
fn both_merged_and_waiting(merged: usize, waiting: usize) {
    assert!(
        merged > 0 && waiting > 0,
        "{merged} merged, {waiting} waiting"
    );
}

/// Every entry found by its hash and its world by its ref, each link verified, the store audit
/// clean.
fn every_entry_is_found(store: &Store) {
    let last = store.read(log::last_index).unwrap().unwrap();
    store
        .read(|r| {
            for index in 0..=last {
                let entry = log::entry(r, index).unwrap().unwrap();
                assert_eq!(log::index_of_entry_hash(r, &entry.entry_hash)?, Some(index));
                let world_ref = log::world_ref_at(r, index)?.unwrap();
                let world = log::world(r, &world_ref).unwrap().unwrap();
                assert_eq!(world.revision, index);
            }
            Ok::<_, StoreError>(())
        })
        .unwrap();
    let audit = verify::audit_store(store).unwrap();
    assert!(audit.consistent() && audit.entries == last + 1, "{audit:?}");
    let report = verify::why(store, &Handle::Index(last), 10).unwrap();
    assert!(report.all_ok(), "{report:?}");
}

#[test]
fn entries_are_found_by_hash_and_world_ref_in_the_tail_and_after_merges() {
    let w = merging_world();
    let s = w.mint("ep1", &["Workspace.Read=worktree:100"]);
    // Two rounds of merges over the sixteen partitions, with every lookup checked after each.
    for i in 0..30 {
        w.call(&s, "ailang-read", json!({"path": format!("a{i}.ail")}))
            .unwrap();
        every_entry_is_found(&w.store);
    }
    // Entries below their partition's watermark have their key in `refs`; the tail's have
    // none yet.
    let hash_marks = marks(&w.store, "entries").unwrap();
    let last = w.store.read(log::last_index).unwrap().unwrap();
    let keys = w.store.raw_rows("refs").unwrap();
    let (mut merged, mut waiting) = (0, 0);
    for index in 0..=last {
        let (hash, world) = w
            .store
            .read(|r| {
                let hash = log::entry(r, index).unwrap().unwrap().entry_hash;
                Ok::<_, StoreError>((hash, log::world_ref_at(r, index)?.unwrap()))
            })
            .unwrap();
        for (r, kind) in [(hash, b'e'), (world, b'w')] {
            let mut key = r.as_bytes().to_vec();
            key.push(kind);
            let indexed = keys.iter().any(|(k, _)| *k == key);
            assert_eq!(
                indexed,
                index < hash_marks[partition(&r)],
                "entry {index}, {}",
                kind as char
            );
            if indexed {
                merged += 1
            } else {
                waiting += 1
            }
        }
    }
    both_merged_and_waiting(merged, waiting);

    // Reopened, the tail is read back from the rows.
    let (_dir, store) = reopened(w);
    every_entry_is_found(&store);
}

/// `(sequence, id, row)` of every row of `invocation_rows`: `u16 BE id length | id | row`.
fn invocation_rows(store: &Store) -> Vec<(u64, String, Vec<u8>)> {
    store
        .raw_rows("invocation_rows")
        .unwrap()
        .into_iter()
        .map(|(k, v)| {
            let len = usize::from(u16::from_be_bytes([v[0], v[1]]));
            let id = String::from_utf8(v[2..2 + len].to_vec()).unwrap();
            (
                u64::from_be_bytes(k.try_into().unwrap()),
                id,
                v[2 + len..].to_vec(),
            )
        })
        .collect()
}

/// The `refs` key of invocation `id`.
fn invocation_key(id: &str) -> Vec<u8> {
    let mut key = Ref::of(id.as_bytes()).as_bytes().to_vec();
    key.push(b'i');
    key
}

/// Every invocation of `ids` is found by its id: its row as stored, its journal state, and
/// the store audit is clean.
fn invocations_found(store: &Store, ids: &[(String, Vec<u8>)]) {
    for (id, row) in ids {
        let found = store.raw_get(RawTable::Invocations, id.as_bytes()).unwrap();
        assert_eq!(found.as_ref(), Some(row), "{id}");
        let journal = store
            .raw_get(RawTable::JournalIndex, id.as_bytes())
            .unwrap();
        assert!(journal.is_some(), "{id} has no journal state");
    }
    let audit = verify::audit_store(store).unwrap();
    assert!(audit.consistent(), "{audit:?}");
}

fn rows_by_id(store: &Store) -> Vec<(String, Vec<u8>)> {
    invocation_rows(store)
        .into_iter()
        .map(|(_, id, row)| (id, row))
        .collect()
}

#[test]
fn invocation_rows_are_found_by_id_in_the_tail_and_after_merges() {
    let w = merging_world();
    let s = reads_with_task_ids(&w, 30, |store| invocations_found(store, &rows_by_id(store)));
    let rows = invocation_rows(&w.store);
    assert_eq!(rows.len(), 30);
    // Rows are stored in arrival order, and only those below their partition's watermark have
    // their key in `refs`.
    let invocation_marks = marks(&w.store, "invocations").unwrap();
    let keys: BTreeSet<Vec<u8>> = w
        .store
        .raw_rows("refs")
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    let (mut merged, mut waiting) = (0, 0);
    for (i, (seq, id, _)) in rows.iter().enumerate() {
        assert_eq!(*seq, i as u64);
        assert_eq!(id, &format!("a2a:ep1:t{i}"));
        let indexed = keys.contains(&invocation_key(id));
        assert_eq!(
            indexed,
            *seq < invocation_marks[partition(&Ref::of(id.as_bytes()))],
            "{id}"
        );
        if indexed {
            merged += 1
        } else {
            waiting += 1
        }
    }
    both_merged_and_waiting(merged, waiting);
    // A task id is found whether its key was merged or waits: resent, the committed result
    // comes back and nothing runs again.
    let runs = w.handler.runs();
    for i in 0..30 {
        let again = w
            .call_task(
                &s,
                "ailang-read",
                json!({"path": format!("a{i}.ail")}),
                Some(&format!("t{i}")),
            )
            .unwrap();
        assert_eq!(output_json(&again)["ok"], true);
    }
    assert_eq!(w.handler.runs(), runs);
    assert_eq!(invocation_rows(&w.store).len(), 30);

    // Reopened, the tail is read back from the rows.
    let (_dir, store) = reopened(w);
    invocations_found(
        &store,
        &rows
            .into_iter()
            .map(|(_, id, row)| (id, row))
            .collect::<Vec<_>>(),
    );
}

/// `w`'s store, closed and opened again (its directory kept alive beside it).
fn reopened(w: World) -> (tempfile::TempDir, Store) {
    let World {
        store,
        coordinator,
        dir,
        ..
    } = w;
    drop(coordinator);
    drop(store);
    let store = open(&dir.path().join("db"));
    (dir, store)
}

/// A world whose every row of each kind merges a partition of the tail, so that its keys
/// are soon both merged and waiting.
fn merging_world() -> World {
    let w = World::new();
    w.store.set_ref_merge_at(16).unwrap();
    w
}

/// `n` A2A reads of episode `ep1`, task ids `t0` … (`a0.ail` …, absent files: each call is
/// committed with its effect), `after` run after each; the episode's session.
fn reads_with_task_ids(w: &World, n: u32, mut after: impl FnMut(&Store)) -> Session {
    let s = w.mint("ep1", &["Workspace.Read=worktree:100"]);
    for i in 0..n {
        w.call_task(
            &s,
            "ailang-read",
            json!({"path": format!("a{i}.ail")}),
            Some(&format!("t{i}")),
        )
        .unwrap();
        after(&w.store);
    }
    s
}

/// Turn the closed store in `db` into the schema-3 store it would have been: every
/// invocation row keyed by its id in `invocations`, none in `invocation_rows`, no invocation
/// key in `refs` or watermark in `ref_index`, version 3.
fn make_schema_3(db: &std::path::Path) {
    use heed::types::{Bytes, Str};
    // SAFETY: the store is closed; nothing else maps this environment.
    let env = unsafe { heed::EnvOpenOptions::new().max_dbs(32).open(db).unwrap() };
    let wtxn = env.write_txn().unwrap();
    env.create_databases_and_commit(wtxn, |dbo, wtxn| -> heed::Result<_> {
        let meta: heed::Database<Str, Bytes> = dbo.create_database(wtxn, Some("meta"))?;
        meta.put(wtxn, "schema_version", b"3")?;
        let rows: heed::Database<Bytes, Bytes> =
            dbo.create_database(wtxn, Some("invocation_rows"))?;
        let by_id: heed::Database<Str, Bytes> = dbo.create_database(wtxn, Some("invocations"))?;
        let moved: Vec<(Vec<u8>, Vec<u8>)> = rows
            .iter(wtxn)?
            .map(|row| {
                row.map(|(_, v)| {
                    let len = usize::from(u16::from_be_bytes([v[0], v[1]]));
                    (v[2..2 + len].to_vec(), v[2 + len..].to_vec())
                })
            })
            .collect::<heed::Result<_>>()?;
        for (id, row) in &moved {
            by_id.put(wtxn, std::str::from_utf8(id).unwrap(), row)?;
        }
        rows.clear(wtxn)?;
        let refs: heed::Database<Bytes, Bytes> = dbo.create_database(wtxn, Some("refs"))?;
        for (id, _) in &moved {
            let key = invocation_key(std::str::from_utf8(id).unwrap());
            refs.delete(wtxn, &key)?;
        }
        let index: heed::Database<Str, Bytes> = dbo.create_database(wtxn, Some("ref_index"))?;
        for p in 0..16 {
            index.delete(wtxn, &format!("invocations_indexed_{p:x}"))?;
        }
        Ok(heed::CommitOrAbort::<(), ()>::Commit(()))
    })
    .unwrap();
    env.prepare_for_closing().wait();
}

#[test]
fn a_schema_3_store_is_upgraded_in_place_and_its_invocation_rows_stay_where_they_are() {
    let w = World::new();
    let s = reads_with_task_ids(&w, 5, |_| {});
    let old = rows_by_id(&w.store);
    assert_eq!(old.len(), 5);
    let db = w.dir.path().join("db");
    let World {
        dir,
        store,
        coordinator,
        handler,
        clock,
        ..
    } = w;
    drop(coordinator);
    // Schema 3 indexed every object by semantic id as it was stored.
    store.merge_semantic_tail().unwrap();
    drop(store);
    make_schema_3(&db);

    let store = open(&db);
    // Nothing moved: the old rows are read where schema 3 put them.
    assert!(invocation_rows(&store).is_empty());
    assert_eq!(store.raw_rows("invocations").unwrap().len(), 5);
    invocations_found(&store, &old);
    let c = Coordinator::new(
        store.clone(),
        handlers_for(handler.clone()),
        CoordinatorConfig {
            clock: clock.clone(),
            ..CoordinatorConfig::default()
        },
    );
    let call = |task: &str, path: &str| {
        c.invoke(&broker_core::coordinator::Call {
            surface: broker_core::coordinator::Surface::A2a,
            session: s.clone().into(),
            skill_id: "ailang-read".into(),
            task_id: Some(task.into()),
            args: json!({ "path": path }),
            transition_fn: None,
        })
        .unwrap()
    };
    // An old task id still answers with its committed result, running nothing.
    let runs = handler.runs();
    assert_eq!(output_json(&call("t2", "a2.ail"))["ok"], true);
    assert_eq!(handler.runs(), runs);
    // New invocations go to `invocation_rows`; the old rows stay, and are rewritten in place.
    assert_eq!(output_json(&call("t9", "a9.ail"))["ok"], true);
    assert_eq!(handler.runs(), runs + 1);
    let new = rows_by_id(&store);
    assert_eq!(new.len(), 1);
    assert_eq!(new[0].0, "a2a:ep1:t9");
    let (id, row) = &old[0];
    store
        .raw_overwrite(RawTable::Invocations, id.as_bytes().to_vec(), row.clone())
        .unwrap();
    assert_eq!(store.raw_rows("invocations").unwrap().len(), 5);
    assert_eq!(invocation_rows(&store).len(), 1);
    invocations_found(&store, &old);
    invocations_found(&store, &new);
    drop(c);
    drop(store);
    assert_eq!(meta_schema(&db).as_deref(), Some("6"));
    drop(dir);
}

/// The index findings of an audit that finds the store inconsistent (a missing or misdirected
/// key can also break the links of an entry that needs it).
fn index_findings(store: &Store) -> Vec<String> {
    let audit = verify::audit_store(store).unwrap();
    assert!(!audit.consistent(), "{audit:?}");
    audit.index_findings
}

#[test]
fn doctor_finds_a_refs_key_missing_misdirected_dangling_of_no_kind_or_with_no_row_number() {
    let w = merging_world();
    reads_with_task_ids(&w, 30, |_| {});
    let refs = w.store.raw_rows("refs").unwrap();
    let rows = |name: &str| w.store.raw_rows(name).unwrap().len() as u64;
    // Every key of every row is either in `refs` or waiting in the tail; an entry has two.
    let audit = verify::audit_store(&w.store).unwrap();
    assert!(audit.consistent(), "{audit:?}");
    assert_eq!(audit.index_keys, refs.len() as u64);
    assert_eq!(
        audit.index_keys + audit.index_waiting,
        rows("object_rows") + 2 * rows("entries") + rows("invocation_rows")
    );
    both_merged_and_waiting(audit.index_keys as usize, audit.index_waiting as usize);

    let key_of = |kind: u8| {
        refs.iter()
            .find(|(k, _)| k[32] == kind)
            .map(|(k, v)| (k.clone(), u64::from_be_bytes(v.clone().try_into().unwrap())))
            .unwrap()
    };
    let hex = |k: &[u8]| Ref::from_slice(&k[..32]).unwrap().to_string();
    let overwrite = |key: &[u8], value: Vec<u8>| {
        w.store
            .raw_overwrite(RawTable::Refs, key.to_vec(), value)
            .unwrap()
    };

    // A merged object's key deleted: the object would read as absent.
    let (object, seq) = key_of(b'o');
    overwrite(&object, Vec::new());
    assert_eq!(w.store.raw_get(RawTable::Refs, &object).unwrap(), None);
    assert_eq!(
        index_findings(&w.store),
        [format!(
            "row {seq} of object_rows (object {}) is below its partition's watermark {}, but refs has no key for it",
            hex(&object),
            marks(&w.store, "objects").unwrap()[usize::from(object[0] >> 4)]
        )]
    );
    overwrite(&object, seq.to_be_bytes().to_vec());

    // An entry hash pointed at another entry: it would read as that entry.
    let (entry, index) = key_of(b'e');
    let other = if index == 0 { 1 } else { index - 1 };
    overwrite(&entry, other.to_be_bytes().to_vec());
    assert_eq!(
        index_findings(&w.store),
        [
            format!(
                "row {index} of entries (entry hash {}) is indexed, but refs names row {other}",
                hex(&entry)
            ),
            format!(
                "refs names row {other} of entries for entry hash {}, which holds something else",
                hex(&entry)
            ),
        ]
    );
    overwrite(&entry, index.to_be_bytes().to_vec());

    // An invocation's key pointed past the last row, and a key of no known kind.
    let (invocation, seq) = key_of(b'i');
    overwrite(&invocation, 1_000_000u64.to_be_bytes().to_vec());
    let mut odd = invocation.clone();
    odd[32] = b'z';
    overwrite(&odd, 0u64.to_be_bytes().to_vec());
    let findings = index_findings(&w.store);
    assert!(
        findings.contains(&format!(
            "refs names row 1000000 of invocation_rows for invocation id digest {}, which is not stored",
            hex(&invocation)
        )) && findings.contains(&format!(
            "refs holds a key of no known kind (key {})",
            hex(&odd)
        )) && findings.contains(&format!(
            "row {seq} of invocation_rows (invocation id digest {}) is indexed, but refs names row 1000000",
            hex(&invocation)
        )),
        "{findings:?}"
    );
    overwrite(&invocation, seq.to_be_bytes().to_vec());
    overwrite(&odd, Vec::new());
    let audit = verify::audit_store(&w.store).unwrap();
    assert!(audit.consistent(), "{audit:?}");

    // A value that is no row number: reported once, and the audit goes on past it.
    for (kind, what) in [
        (b'o', "object"),
        (b'e', "entry hash"),
        (b'w', "world"),
        (b'i', "invocation id digest"),
    ] {
        let (key, seq) = key_of(kind);
        overwrite(&key, vec![7; 3]);
        assert_eq!(
            w.store.raw_get(RawTable::Refs, &key).unwrap(),
            Some(vec![7; 3])
        );
        assert_eq!(
            index_findings(&w.store),
            [format!(
                "refs holds 3 byte(s) for {what} {}, not a row number",
                hex(&key)
            )]
        );
        overwrite(&key, seq.to_be_bytes().to_vec());
    }
    let audit = verify::audit_store(&w.store).unwrap();
    assert!(audit.consistent(), "{audit:?}");
}

#[test]
fn doctor_lists_the_first_hundred_index_findings_and_counts_the_rest() {
    // A partition is merged every row: all but the last sixteen objects are in `refs`.
    let (_dir, store) = fresh_store(16);
    let objects: Vec<_> = (0..400).map(|i| object("many", i)).collect();
    put(&store, &objects);
    let merged = indexed_objects(&store);
    assert!(merged.len() >= 300, "{}", merged.len());
    for r in merged.iter().take(130) {
        let mut key = r.as_bytes().to_vec();
        key.push(b'o');
        store
            .raw_overwrite(RawTable::Refs, key, Vec::new())
            .unwrap();
    }
    // `ref_tail::MAX_FINDINGS` (100) are listed, one line counts the rest.
    let findings = index_findings(&store);
    assert_eq!(findings.len(), 101, "{findings:#?}");
    assert!(findings[..100]
        .iter()
        .all(|f| f.contains("of object_rows (object sha256:")
            && f.ends_with("refs has no key for it")));
    assert_eq!(
        findings[100],
        "… and 30 more disagreement(s) of refs and the rows"
    );
}
