//! The semantic-id index and its tail (schema 5 and later): the newest objects wait unindexed after a
//! watermark and are indexed together once `MERGE_AT` wait; listings by semantic id read the
//! index, then the tail, in arrival order, whatever side of the watermark `after` falls on.

use broker_core::object::{Object, Ref};
use broker_core::store::{RawTable, Store, SEMANTIC_MERGE_AT};
use broker_core::verify;
use common::*;

mod common;

/// Objects of two kinds, interleaved two to one, in the order they are stored.
fn objects(n: u64) -> Vec<Object> {
    (0..n)
        .map(|i| {
            let kind = if i % 3 == 2 {
                "world/b/v1"
            } else {
                "world/a/v1"
            };
            Object::new(kind, "test", format!("object {i}").into_bytes())
        })
        .collect()
}

fn put_each(store: &Store, objects: &[Object]) {
    for o in objects {
        let o = o.clone();
        store.write(move |w| w.put_object(&o)).unwrap();
    }
}

/// The refs listed for `kind` after `after`, `None` when `after` is not of that kind.
fn listed(store: &Store, kind: &str, after: Option<&Ref>) -> Option<Vec<Ref>> {
    store
        .read(|r| {
            r.semantic_id_refs(kind, after)?
                .map(Iterator::collect::<Result<Vec<_>, _>>)
                .transpose()
        })
        .unwrap()
}

fn of_kind(objects: &[Object], kind: &str) -> Vec<Ref> {
    objects
        .iter()
        .filter(|o| o.semantic_id == kind)
        .map(|o| o.hash)
        .collect()
}

/// Keys in `semantic_ids`.
fn indexed(store: &Store) -> usize {
    store.raw_rows("semantic_ids").unwrap().len()
}

/// Every kind's listing, from the start and after its first, last and every 29th object, is
/// that kind's objects in the order they were stored.
fn every_listing_in_order(store: &Store, stored: &[Object]) {
    for kind in ["world/a/v1", "world/b/v1"] {
        let all = of_kind(stored, kind);
        assert_eq!(listed(store, kind, None).as_ref(), Some(&all), "{kind}");
        for (i, r) in all.iter().enumerate() {
            if i % 29 != 0 && i + 2 < all.len() {
                continue;
            }
            assert_eq!(
                listed(store, kind, Some(r)).as_deref(),
                Some(&all[i + 1..]),
                "{kind} after its object {i}"
            );
        }
    }
    let a = of_kind(stored, "world/a/v1");
    assert_eq!(
        listed(store, "world/b/v1", a.first()),
        None,
        "after another kind's object"
    );
}

#[test]
fn new_objects_wait_unindexed_until_merge_at_wait_then_are_indexed_together() {
    let w = World::new();
    let stored = objects(2 * SEMANTIC_MERGE_AT + 10);
    let before = indexed(&w.store);
    let genesis_objects = w.store.raw_rows("object_rows").unwrap().len() as u64;

    // Just short of the merge, none of them is in the index, and all are listed.
    let first = (SEMANTIC_MERGE_AT - genesis_objects - 1) as usize;
    put_each(&w.store, &stored[..first]);
    assert_eq!(indexed(&w.store), before);
    every_listing_in_order(&w.store, &stored[..first]);

    // The next one makes MERGE_AT waiting: all are indexed in that transaction.
    put_each(&w.store, &stored[first..first + 1]);
    assert_eq!(indexed(&w.store) as u64, SEMANTIC_MERGE_AT);
    every_listing_in_order(&w.store, &stored[..first + 1]);

    // Listings span the index and a new tail, whichever side `after` is on.
    put_each(&w.store, &stored[first + 1..]);
    assert_eq!(indexed(&w.store) as u64, 2 * SEMANTIC_MERGE_AT);
    every_listing_in_order(&w.store, &stored);

    // An object stored again is not stored twice, nor listed twice.
    put_each(&w.store, &stored[..5]);
    every_listing_in_order(&w.store, &stored);
}

#[test]
fn objects_stored_in_one_transaction_are_listed_within_it() {
    let w = World::new();
    let stored = objects(SEMANTIC_MERGE_AT + 3);
    let batch = stored.clone();
    let (inside, count) = w
        .store
        .write(move |wc| {
            for o in &batch {
                wc.put_object(o)?;
            }
            let r = wc.reader();
            let listed = r
                .semantic_id_refs("world/b/v1", None)?
                .unwrap()
                .collect::<Result<Vec<_>, _>>()?;
            Ok::<_, broker_core::store::StoreError>((listed, batch.len()))
        })
        .unwrap();
    assert_eq!(count, stored.len());
    assert_eq!(inside, of_kind(&stored, "world/b/v1"));
    every_listing_in_order(&w.store, &stored);
}

#[test]
fn a_schema_4_store_whose_index_is_whole_lists_the_same_and_grows_a_tail() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let stored = objects(300);
    {
        let store = open_store(&db);
        put_each(&store, &stored[..200]);
        // The form a store of schema 4 has: every object indexed, no watermark.
        store.merge_semantic_tail().unwrap();
        assert!(!watermarked(&store));
        every_listing_in_order(&store, &stored[..200]);
    }
    set_meta_schema(&db, "4");
    let store = open_store(&db);
    every_listing_in_order(&store, &stored[..200]);
    let whole = indexed(&store);
    put_each(&store, &stored[200..]);
    assert!(watermarked(&store));
    assert_eq!(indexed(&store), whole, "the new objects wait in the tail");
    every_listing_in_order(&store, &stored);
    drop(store);
    assert_eq!(meta_schema(&db).as_deref(), Some("6"));
}

fn open_store(db: &std::path::Path) -> Store {
    Store::open(
        db,
        broker_core::store::StoreOptions {
            create: true,
            ..Default::default()
        },
    )
    .unwrap()
}

fn watermarked(store: &Store) -> bool {
    store
        .raw_rows("ref_index")
        .unwrap()
        .iter()
        .any(|(k, _)| k == b"semantic_indexed")
}

/// The `semantic_ids` key of the object stored at `seq` under `kind`.
fn index_key(kind: &str, seq: u64) -> Vec<u8> {
    let mut key = (kind.len() as u16).to_be_bytes().to_vec();
    key.extend_from_slice(kind.as_bytes());
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

/// The sequence, ref and semantic id of each of `stored` in `object_rows`, in order.
fn rows(store: &Store, stored: &[Object]) -> Vec<(u64, Ref, String)> {
    store
        .raw_rows("object_rows")
        .unwrap()
        .into_iter()
        .filter_map(|(k, v)| {
            let r = Ref::from_slice(&v[..32]).unwrap();
            let o = stored.iter().find(|o| o.hash == r)?;
            let seq = u64::from_be_bytes(k.try_into().unwrap());
            Some((seq, r, o.semantic_id.clone()))
        })
        .collect()
}

#[test]
fn doctor_finds_an_object_left_out_of_the_index_and_keys_that_list_objects_wrongly() {
    let w = World::new();
    let stored = objects(SEMANTIC_MERGE_AT + 20);
    put_each(&w.store, &stored);
    let audit = verify::audit_store(&w.store).unwrap();
    assert!(audit.consistent(), "{audit:?}");

    let rows = rows(&w.store, &stored);
    let (left_out, left_out_ref, _) = rows.iter().find(|(_, _, k)| k == "world/a/v1").unwrap();
    let (misfiled, misfiled_ref, _) = rows.iter().find(|(_, _, k)| k == "world/b/v1").unwrap();
    let (waiting, _, _) = rows.last().unwrap();
    for (key, value) in [
        (index_key("world/a/v1", *left_out), vec![]),
        (index_key("world/a/v1", *misfiled), vec![1]),
        (index_key("world/a/v1", *waiting), vec![1]),
        (b"\x00\x09short".to_vec(), vec![1]),
    ] {
        w.store
            .raw_overwrite(RawTable::SemanticIds, key, value)
            .unwrap();
    }
    let mark = SEMANTIC_MERGE_AT;
    let audit = verify::audit_store(&w.store).unwrap();
    assert!(!audit.consistent());
    assert_eq!(
        audit.index_findings,
        vec![
            format!(
                "object {left_out_ref} (row {left_out} of object_rows) is below the semantic-id \
                 watermark, but semantic_ids does not list it under world/a/v1"
            ),
            "semantic_ids holds a damaged key of 7 bytes".to_owned(),
            format!(
                "semantic_ids lists row {misfiled} of object_rows under world/a/v1, but its \
                 object {misfiled_ref} has the semantic id world/b/v1"
            ),
            format!(
                "semantic_ids lists row {waiting} of object_rows under world/a/v1, at or above \
                 its watermark {mark}"
            ),
        ]
    );
}
