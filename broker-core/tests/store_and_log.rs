//! The store and the log: hash vectors, schema and map-size errors, commit checks, tamper
//! detection by `verify`.

mod common;

use broker_core::log::{
    self, Append, Entry, EntryHeader, HeadBinding, LogError, World as WorldDoc,
};
use broker_core::object::{sid, Object, Ref};
use broker_core::store::{RawTable, Store, StoreError, StoreOptions};
use broker_core::verify::{self, Handle};
use common::*;
use serde_json::json;

fn r(s: &str) -> Ref {
    s.parse().unwrap()
}

fn rep(c: char) -> Ref {
    r(&format!("sha256:{}", c.to_string().repeat(64)))
}

#[test]
fn entry_and_world_hash_vectors() {
    // Expected values computed independently (sha256 over the canonical JSON text).
    let header = EntryHeader {
        entry_index: 1,
        semantics_epoch: 1,
        transition_fn: rep('a'),
        interpreter: rep('b'),
        prev_entry_hash: Ref::ZERO,
        written_by: "coordinator:mcp".into(),
    };
    let entry = Entry::new(header, rep('c')).unwrap();
    assert_eq!(
        entry.entry_hash.to_string(),
        "sha256:01c343aec5c91c9e68994c3f7cf295988367ce1ecae38a42470f3bdbf275973e"
    );
    let world = WorldDoc {
        revision: 1,
        state_root: rep('d'),
        log_head: entry.entry_hash,
    };
    assert_eq!(
        String::from_utf8(world.to_bytes().unwrap()).unwrap(),
        r#"{"logHead":"sha256:01c343aec5c91c9e68994c3f7cf295988367ce1ecae38a42470f3bdbf275973e","revision":1,"stateRoot":"sha256:dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"}"#
    );
    assert_eq!(
        world.reference().unwrap().to_string(),
        "sha256:2f5f79fbb80e5469222103cbe8ee760907675d50645a526daaea7141ee04ac37"
    );
}

#[test]
fn opening_a_missing_store_without_create_is_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let e = Store::open(&dir.path().join("nope"), StoreOptions::default()).unwrap_err();
    assert!(matches!(e, StoreError::NotFound(_)), "{e}");
    assert!(!dir.path().join("nope").exists(), "nothing may be created");
}

/// A new store with `value` put under `key` of its table `name` behind its back (heed
/// directly, as a future build or a damaged disk would): why opening it fails. The open must
/// leave the file byte for byte as it was.
fn refused_after_raw_put(name: &str, key: &[u8], value: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    drop(Store::create(&db).unwrap());
    {
        // SAFETY: the store is closed; nothing else maps this environment.
        let env = unsafe { heed::EnvOpenOptions::new().max_dbs(32).open(&db).unwrap() };
        let wtxn = env.write_txn().unwrap();
        let table: heed::Database<heed::types::Bytes, heed::types::Bytes> = env
            .create_databases_and_commit(wtxn, |dbo, wtxn| {
                dbo.create_database(wtxn, Some(name))
                    .map(heed::CommitOrAbort::<_, ()>::Commit)
            })
            .unwrap()
            .unwrap_commit();
        let mut wtxn = env.write_txn().unwrap();
        table.put(&mut wtxn, key, value).unwrap();
        wtxn.commit().unwrap();
        env.prepare_for_closing().wait();
    }
    let before = std::fs::read(db.join("data.mdb")).unwrap();
    let e = Store::open(&db, StoreOptions::default()).unwrap_err();
    assert_eq!(std::fs::read(db.join("data.mdb")).unwrap(), before);
    e.to_string()
}

#[test]
fn a_store_of_another_schema_version_is_refused_unmodified() {
    assert_eq!(
        refused_after_raw_put("meta", b"schema_version", b"99"),
        "store schema version 99 is not the version this build uses (6); refusing to open it"
    );
}

#[test]
fn a_damaged_schema_version_reaches_no_terminal_raw() {
    assert_eq!(
        refused_after_raw_put("meta", b"schema_version", b"5\x1b]0;owned\x07\xff"),
        "store schema version \"5\\u001b]0;owned\\u0007\u{fffd}\" is not the version this build uses (6); refusing to open it"
    );
}

/// Met while the store opens, it is the damaged store, with the way out (it was the bare
/// `store is damaged: a row …`, without the advice every other damage at open gives).
#[test]
fn a_row_its_codec_refuses_is_damage_that_names_its_table() {
    // A watermark is a u64; three bytes are not one, and neither are nine (heed's own codec
    // read the first eight of those and ignored the ninth).
    for (value, len) in [(&b"abc"[..], 3), (&[0, 0, 0, 0, 0, 0, 0, 0, 7][..], 9)] {
        let e = refused_after_raw_put("ref_index", b"objects_indexed_0", value);
        assert!(e.starts_with("world store "), "{e}");
        assert!(
            e.ends_with(&format!(" is damaged: a row of table ref_index does not decode (a u64 of {len} bytes, not 8) (a copy taken while a daemon wrote it, or a failing disk?); restore the directory from a backup")),
            "{e}"
        );
    }
}

#[test]
fn a_full_map_is_a_typed_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        &dir.path().join("db"),
        StoreOptions {
            ceiling: Some(1 << 20),
            create: true,
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let mut saw_full = false;
    for i in 0..64u32 {
        let o = Object::new("world/test/v1", "test", vec![i as u8; 256 * 1024]);
        let res = store.write(move |w| w.put_object(&o));
        if let Err(e) = res {
            assert!(matches!(e, StoreError::MapFull { .. }), "{e}");
            assert!(e.to_string().contains("map size"));
            assert!(e
                .to_string()
                .ends_with("restart with a larger --store-ceiling"));
            saw_full = true;
            break;
        }
    }
    assert!(saw_full);
    // The store still works for small writes and reads after the failed one.
    let small = Object::new("world/test/v1", "test", b"small".to_vec());
    let h = small.hash;
    store.write(move |w| w.put_object(&small)).unwrap();
    assert!(store.read(|rd| rd.object(&h)).unwrap().is_some());
}

#[test]
fn commits_are_checked_hash_index_link_and_cas() {
    let w = World::new();
    let head = w.store.read(log::head).unwrap().unwrap();
    let out = Object::json(sid::INVOCATION_OUTPUT, "rest", &json!({"x": 1})).unwrap();
    let rec = Object::json(sid::INVOCATION_RECORD, "rest", &json!({"y": 1})).unwrap();
    let header = EntryHeader {
        entry_index: 1,
        semantics_epoch: 1,
        transition_fn: rep('a'),
        interpreter: rep('b'),
        prev_entry_hash: head.world.log_head,
        written_by: "rest".into(),
    };
    let good = Entry::new(header.clone(), rec.hash).unwrap();
    let world = WorldDoc {
        revision: 1,
        state_root: out.hash,
        log_head: good.entry_hash,
    };
    let objs = vec![out.clone(), rec.clone()];
    let try_commit = |observed: Option<Ref>, entry: Entry, world: WorldDoc, world_ref: Ref| {
        let objs = objs.clone();
        w.store
            .write(move |wc| log::commit_exact(wc, &objs, observed, &entry, &world, &world_ref))
    };
    // Wrong observed head: conflict, nothing written.
    let e = try_commit(
        Some(rep('e')),
        good.clone(),
        world.clone(),
        world.reference().unwrap(),
    )
    .unwrap_err();
    assert!(matches!(e, LogError::HeadConflict { .. }), "{e}");
    assert!(e.to_string().starts_with("conflict: observed sha256:eeee"));
    // Forged entry hash.
    let mut forged = good.clone();
    forged.entry_hash = rep('f');
    let e = try_commit(
        Some(head.world_ref),
        forged,
        world.clone(),
        world.reference().unwrap(),
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("does not match the recomputed"),
        "{e}"
    );
    // Wrong world ref.
    let e = try_commit(Some(head.world_ref), good.clone(), world.clone(), rep('9')).unwrap_err();
    assert!(e.to_string().contains("world ref"), "{e}");
    // Index gap.
    let mut gap = header.clone();
    gap.entry_index = 5;
    let gap = Entry::new(gap, rec.hash).unwrap();
    let e = try_commit(
        Some(head.world_ref),
        gap,
        world.clone(),
        world.reference().unwrap(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("does not continue the log"), "{e}");
    // Broken link.
    let mut bad_prev = header.clone();
    bad_prev.prev_entry_hash = rep('1');
    let bad_prev = Entry::new(bad_prev, rec.hash).unwrap();
    let e = try_commit(
        Some(head.world_ref),
        bad_prev,
        world.clone(),
        world.reference().unwrap(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("prevEntryHash"), "{e}");
    // Nothing landed so far.
    assert_eq!(w.store.read(log::head).unwrap().unwrap(), head);
    // The honest commit lands.
    let c = try_commit(
        Some(head.world_ref),
        good,
        world.clone(),
        world.reference().unwrap(),
    )
    .unwrap();
    assert_eq!(c.world_ref, world.reference().unwrap());
    // An append bound at the head continues from it.
    let a = Append {
        objects: vec![out.clone(), rec.clone()],
        transition_fn: rep('a'),
        interpreter: rep('b'),
        written_by: "test".into(),
        transition_ref: rec.hash,
        state_root: out.hash,
        binding: HeadBinding::AtHead,
    };
    let c2 = w.store.write(move |wc| log::append(wc, &a)).unwrap();
    assert_eq!(c2.entry.header.entry_index, 2);
    assert_eq!(c2.entry.header.prev_entry_hash, c.entry.entry_hash);
}

fn flip(bytes: &mut [u8], at: usize) {
    bytes[at] ^= 0x01;
}

#[test]
fn tampering_with_any_stored_object_entry_or_world_breaks_a_link() {
    let w = World::new();
    let s = w.mint("ep1", &["Workspace.Read=worktree:5"]);
    let out = w.call(&s, "ailang-read", json!({"path": "x"})).unwrap();
    let v = output_json(&out);
    let index = out.entry_index;
    let entry = w.store.read(|rd| log::entry(rd, index)).unwrap().unwrap();
    let record_ref = entry.transition_ref;
    let record: serde_json::Value = serde_json::from_slice(
        &w.store
            .read(|rd| rd.object(&record_ref))
            .unwrap()
            .unwrap()
            .payload,
    )
    .unwrap();
    let effect_ref = r(v["world"]["effects"][0]["record"].as_str().unwrap());
    let effect: serde_json::Value = serde_json::from_slice(
        &w.store
            .read(|rd| rd.object(&effect_ref))
            .unwrap()
            .unwrap()
            .payload,
    )
    .unwrap();
    let targets: Vec<(&str, Ref)> = vec![
        ("record", record_ref),
        ("input", r(record["input"].as_str().unwrap())),
        ("plan", r(record["plan"].as_str().unwrap())),
        ("effect", effect_ref),
        ("effect", r(effect["requestRef"].as_str().unwrap())),
        ("effect", r(effect["resultRef"].as_str().unwrap())),
        ("output", out.output_ref),
    ];
    for (kind, target) in targets {
        let original = w
            .store
            .raw_get(RawTable::Objects, target.as_bytes())
            .unwrap()
            .unwrap();
        // Flip one byte of the payload (the last byte) and one of the envelope's interface hash.
        for at in [original.len() - 1, 3] {
            let mut damaged = original.clone();
            flip(&mut damaged, at);
            w.store
                .raw_overwrite(RawTable::Objects, target.as_bytes().to_vec(), damaged)
                .unwrap();
            let report = verify::why(&w.store, &Handle::Index(index), 10)
                .unwrap()
                .reports
                .remove(0);
            if at == 3 {
                // The interface hash is not part of the address: the payload still verifies.
                assert!(
                    report.all_ok(),
                    "{kind}: envelope-only flip broke {report:?}"
                );
            } else {
                let broken: Vec<&str> = report
                    .links
                    .iter()
                    .filter(|l| !l.ok)
                    .map(|l| l.kind)
                    .collect();
                assert!(
                    broken.contains(&kind),
                    "{kind} {target}: {broken:?} {report:?}"
                );
            }
            w.store
                .raw_overwrite(
                    RawTable::Objects,
                    target.as_bytes().to_vec(),
                    original.clone(),
                )
                .unwrap();
        }
        assert!(verify::why(&w.store, &Handle::Index(index), 10)
            .unwrap()
            .all_ok());
    }

    // Every byte of the stored entry: any flip is detected.
    let key = index.to_be_bytes().to_vec();
    let original = w.store.raw_get(RawTable::Log, &key).unwrap().unwrap();
    for at in 0..original.len() {
        let mut damaged = original.clone();
        flip(&mut damaged, at);
        w.store
            .raw_overwrite(RawTable::Log, key.clone(), damaged)
            .unwrap();
        let report = verify::verify_entry(&w.store, index).unwrap();
        assert!(!report.all_ok(), "entry flip at byte {at} went unnoticed");
    }
    w.store.raw_overwrite(RawTable::Log, key, original).unwrap();

    // Every byte of the stored world.
    let world_ref = out.world_ref;
    let original = w
        .store
        .raw_get(RawTable::Worlds, world_ref.as_bytes())
        .unwrap()
        .unwrap();
    for at in 0..original.len() {
        let mut damaged = original.clone();
        flip(&mut damaged, at);
        w.store
            .raw_overwrite(RawTable::Worlds, world_ref.as_bytes().to_vec(), damaged)
            .unwrap();
        let report = verify::verify_entry(&w.store, index).unwrap();
        let world = report.links.iter().find(|l| l.kind == "world").unwrap();
        assert!(!world.ok, "world flip at byte {at} went unnoticed");
    }
    w.store
        .raw_overwrite(RawTable::Worlds, world_ref.as_bytes().to_vec(), original)
        .unwrap();
    assert!(verify::verify_entry(&w.store, index).unwrap().all_ok());
}

/// The offline audit splits the log into blocks claimed by worker threads: damage in the first,
/// a middle and the last block is each reported once, under its own index, and nothing else.
#[test]
fn the_store_audit_names_every_damaged_entry_across_worker_blocks() {
    let w = World::new();
    let episodes: Vec<String> = (0..4).map(|i| format!("ep{i}")).collect();
    std::thread::scope(|scope| {
        for ep in &episodes {
            let w = &w;
            scope.spawn(move || {
                let s = w.mint(ep, &["Workspace.Read=worktree:1000"]);
                for _ in 0..150 {
                    w.call(&s, "ailang-read", json!({"path": "x"})).unwrap();
                }
            });
        }
    });
    let audit = verify::audit_store(&w.store).unwrap();
    assert!(audit.consistent(), "{:?}", audit.broken);
    let total = audit.entries;
    assert!(total > 600, "{total} entries");

    let damaged = [3, total / 2, total - 1];
    let mut originals = Vec::new();
    for index in damaged {
        let key = index.to_be_bytes().to_vec();
        let original = w.store.raw_get(RawTable::Log, &key).unwrap().unwrap();
        let mut bytes = original.clone();
        flip(&mut bytes, original.len() / 2);
        w.store
            .raw_overwrite(RawTable::Log, key.clone(), bytes)
            .unwrap();
        originals.push((key, original));
    }
    let audit = verify::audit_store(&w.store).unwrap();
    assert!(!audit.consistent());
    assert_eq!(audit.entries, total);
    let broken: Vec<u64> = audit.broken.iter().map(|(i, _)| *i).collect();
    assert_eq!(broken, damaged.to_vec(), "{:?}", audit.broken);
    assert!(
        audit
            .broken
            .iter()
            .all(|(_, why)| why.starts_with("entry: ")),
        "{:?}",
        audit.broken
    );

    for (key, original) in originals {
        w.store.raw_overwrite(RawTable::Log, key, original).unwrap();
    }
    assert!(verify::audit_store(&w.store).unwrap().consistent());
}

#[test]
fn handles_parse() {
    assert_eq!(Handle::parse("head").unwrap(), Handle::Head);
    assert_eq!(Handle::parse("12").unwrap(), Handle::Index(12));
    assert_eq!(
        Handle::parse(&rep('a').to_string()).unwrap(),
        Handle::Ref(rep('a'))
    );
    assert_eq!(
        Handle::parse("mcp:ep1:abc").unwrap(),
        Handle::Invocation("mcp:ep1:abc".into())
    );
    assert!(Handle::parse("sha256:xyz").is_err());
    assert!(Handle::parse("what").is_err());
}

mod rest {
    use super::*;
    use broker_core::commit::{self, CommitError, CommitGrant, RestCommit};
    use broker_core::journal::Receipt;

    /// An operator's commit grant with room for every commit of these tests.
    fn ops() -> CommitGrant {
        CommitGrant {
            episode: "ops".into(),
            budget: 100,
        }
    }

    fn next_commit(store: &Store, id: Option<&str>, tag: &str) -> RestCommit {
        let head = store.read(log::head).unwrap().unwrap();
        let out = Object::json(sid::INVOCATION_OUTPUT, "rest", &json!({ "tag": tag })).unwrap();
        let rec = Object::json(sid::INVOCATION_RECORD, "rest", &json!({ "rec": tag })).unwrap();
        let entry = Entry::new(
            EntryHeader {
                entry_index: head.world.revision + 1,
                semantics_epoch: 1,
                transition_fn: rep('a'),
                interpreter: rep('b'),
                prev_entry_hash: head.world.log_head,
                written_by: "rest".into(),
            },
            rec.hash,
        )
        .unwrap();
        let world = WorldDoc {
            revision: entry.header.entry_index,
            state_root: out.hash,
            log_head: entry.entry_hash,
        };
        RestCommit {
            invocation_id: id.map(str::to_owned),
            observed_head: Some(head.world_ref),
            objects: vec![out, rec],
            world_ref: world.reference().unwrap(),
            entry,
            world,
        }
    }

    #[test]
    fn receipts_answer_not_started_resolved_and_resends_are_idempotent() {
        let w = World::new();
        assert_eq!(
            commit::receipt(&w.store, "rest:c1").unwrap(),
            Receipt::NotStarted
        );
        assert!(matches!(
            commit::receipt(&w.store, "mcp:x:y"),
            Err(CommitError::BadInvocationId)
        ));
        let c = next_commit(&w.store, Some("rest:c1"), "one");
        let selected = commit::rest_commit(&w.store, c.clone(), &ops()).unwrap();
        assert_eq!(selected, c.world_ref);
        match commit::receipt(&w.store, "rest:c1").unwrap() {
            Receipt::Resolved { result_ref, .. } => assert_eq!(result_ref, Some(selected)),
            other => panic!("{other:?}"),
        }
        // Same id, same commit: a no-op that answers the same world.
        let c_again = c.clone();
        assert_eq!(commit::rest_commit(&w.store, c, &ops()).unwrap(), selected);
        // Same id, another commit: refused.
        let other = next_commit(&w.store, Some("rest:c1"), "two");
        assert!(matches!(
            commit::rest_commit(&w.store, other, &ops()),
            Err(CommitError::Reused(_))
        ));
        // A stale observed head is a conflict that leaves no trace: the receipt still says
        // not-started, and the same id works for the commit rebuilt on the current head.
        let mut stale = next_commit(&w.store, Some("rest:c2"), "three");
        stale.observed_head = Some(rep('7'));
        let e = commit::rest_commit(&w.store, stale, &ops()).unwrap_err();
        assert!(e.to_string().starts_with("conflict: observed"), "{e}");
        assert_eq!(
            commit::receipt(&w.store, "rest:c2").unwrap(),
            Receipt::NotStarted
        );
        let rebuilt = next_commit(&w.store, Some("rest:c2"), "three");
        commit::rest_commit(&w.store, rebuilt, &ops()).unwrap();
        assert!(matches!(
            commit::receipt(&w.store, "rest:c2").unwrap(),
            Receipt::Resolved { .. }
        ));
        // A resend must be self-consistent: a forged header under a committed id is refused.
        let mut forged = c_again.clone();
        forged.entry.header.written_by = "someone else".into();
        assert!(matches!(
            commit::rest_commit(&w.store, forged, &ops()),
            Err(CommitError::Log(_))
        ));
        let bad = next_commit(&w.store, Some("c3"), "four");
        assert!(matches!(
            commit::rest_commit(&w.store, bad, &ops()),
            Err(CommitError::BadInvocationId)
        ));
    }

    #[test]
    fn a_coordinator_call_after_a_rest_commit_continues_the_chain() {
        let w = World::new();
        commit::rest_commit(&w.store, next_commit(&w.store, None, "x"), &ops()).unwrap();
        let s = w.mint("ep1", &["Workspace.Read=worktree:5"]);
        let out = w.call(&s, "ailang-read", json!({"path": "a"})).unwrap();
        assert_eq!(out.entry_index, 2);
        for i in [0, 1, 2] {
            assert!(verify::verify_entry(&w.store, i).unwrap().all_ok());
        }
    }
}

#[test]
fn a_tampered_transition_document_is_named_as_the_transition_not_as_its_registry_revision() {
    use broker_core::registry::{self, DEFAULT_REGISTRY};
    let w = World::new();
    let reg = registry::load(&w.store, DEFAULT_REGISTRY).unwrap();
    let revision = reg.reference.unwrap();
    let tf = reg.get("ailang-read").unwrap().transition_fn;
    let mut row = w
        .store
        .raw_get(RawTable::Objects, tf.as_bytes())
        .unwrap()
        .unwrap();
    let last = row.len() - 1;
    flip(&mut row, last);
    w.store
        .raw_overwrite(RawTable::Objects, tf.as_bytes().to_vec(), row)
        .unwrap();
    let named = format!(
        "transition document {tf} (listed by registry revision {revision}) is damaged: its stored bytes hash to sha256:"
    );
    let e = registry::load(&w.store, DEFAULT_REGISTRY)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with(&named), "{e}");
    let audit = verify::audit_store(&w.store).unwrap();
    assert_eq!(audit.head_findings.len(), 1, "{:?}", audit.head_findings);
    assert!(
        audit.head_findings[0].starts_with(&format!("registry \"tools\": {named}")),
        "{:?}",
        audit.head_findings
    );
}
