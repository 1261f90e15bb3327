//! Schema 2 and the migration from schema 1: a store written by the schema-1 build
//! (`tests/fixtures/store-v1`, with the logical dump that build read from it) opens, migrates
//! once, reads exactly as before through every public read path, verifies, and takes new calls
//! that continue its chain. The semantic-id index keeps insertion order.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicI64;
use std::sync::Arc;

use broker_core::coordinator::{Call, Coordinator, CoordinatorConfig, Surface};
use broker_core::journal;
use broker_core::log;
use broker_core::object::{Object, Ref};
use broker_core::registry;
use broker_core::session;
use broker_core::store::{Store, StoreError, StoreOptions};
use broker_core::task;
use broker_core::verify::{self, Handle};
use common::*;
use serde_json::{json, Value};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store-v1")
}

/// A private copy of the schema-1 store.
fn v1_copy() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    std::fs::create_dir_all(&db).unwrap();
    std::fs::copy(fixture().join("data.mdb"), db.join("data.mdb")).unwrap();
    (dir, db)
}

fn expected() -> Value {
    serde_json::from_slice(&std::fs::read(fixture().join("expected.json")).unwrap()).unwrap()
}

fn meta_schema(db: &Path) -> Option<String> {
    // SAFETY: no store handle is open on `db` in this process while this one is.
    let env = unsafe { heed::EnvOpenOptions::new().max_dbs(32).open(db).unwrap() };
    let rtxn = env.read_txn().unwrap();
    let mut version = None;
    env.open_databases_and_commit(rtxn, |dbo, rtxn| -> heed::Result<_> {
        let meta = dbo
            .open_database::<heed::types::Str, heed::types::Bytes>(rtxn, Some("meta"))?
            .unwrap();
        version = meta
            .get(rtxn, "schema_version")?
            .map(|v| String::from_utf8_lossy(v).into_owned());
        Ok(heed::CommitOrAbort::<(), ()>::Commit(()))
    })
    .unwrap();
    env.prepare_for_closing().wait();
    version
}

fn parsed(text: &Value) -> Value {
    serde_json::from_str(text.as_str().unwrap()).unwrap()
}

#[test]
fn a_schema_1_store_migrates_on_open_and_reads_exactly_as_before() {
    let (_dir, db) = v1_copy();
    assert_eq!(meta_schema(&db).as_deref(), Some("1"));
    let store = Store::open(&db, StoreOptions::default()).unwrap();
    let want = expected();

    store
        .read(|r| -> Result<(), StoreError> {
            // The log: every entry's bytes, its world, both hash lookups, the head.
            let entries = want["entries"].as_array().unwrap();
            for e in entries {
                let i = e["index"].as_u64().unwrap();
                let world_ref: Ref = e["worldRef"].as_str().unwrap().parse().unwrap();
                let entry_hash: Ref = e["entryHash"].as_str().unwrap().parse().unwrap();
                let entry = log::entry_bytes(r, i)?.unwrap();
                assert_eq!(entry, e["entry"].as_str().unwrap().as_bytes(), "entry {i}");
                assert_eq!(log::world_ref_at(r, i)?, Some(world_ref), "entry {i}");
                let world = log::world_bytes(r, &world_ref)?.unwrap();
                assert_eq!(world, e["world"].as_str().unwrap().as_bytes(), "world {i}");
                assert_eq!(log::index_of_entry_hash(r, &entry_hash)?, Some(i));
            }
            assert_eq!(log::entry_bytes(r, entries.len() as u64)?, None);
            let head = log::head(r)?.unwrap();
            assert_eq!(head.world_ref.to_string(), want["head"].as_str().unwrap());
            assert_eq!(head.world.revision, entries.len() as u64 - 1);

            // Objects: each by ref, and each semantic id's listing in schema 1's order.
            let mut listed: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for o in want["objects"].as_array().unwrap() {
                let r_: Ref = o["ref"].as_str().unwrap().parse().unwrap();
                let got = r.object(&r_)?.unwrap();
                assert!(got.verify());
                assert_eq!(got.semantic_id, o["semanticId"].as_str().unwrap());
                assert_eq!(got.provenance, o["provenance"].as_str().unwrap());
                assert_eq!(
                    got.interface_hash.to_string(),
                    o["interfaceHash"].as_str().unwrap()
                );
                listed
                    .entry(got.semantic_id.clone())
                    .or_default()
                    .push(r_.to_string());
            }
            for (sid, refs) in &listed {
                let got: Vec<String> = r
                    .semantic_id_refs(sid, None)?
                    .unwrap()
                    .map(|x| x.unwrap().to_string())
                    .collect();
                assert_eq!(&got, refs, "{sid}");
            }

            // The journal, each invocation's journal state and task state, the pending
            // intents and the spend counters.
            let mut records = Vec::new();
            for item in r.tables.journal.iter(r.txn).unwrap() {
                let (seq, bytes) = item.unwrap();
                records.push(
                    json!({"seq": seq, "record": String::from_utf8(bytes.to_vec()).unwrap()}),
                );
            }
            assert_eq!(Value::Array(records), want["journal"]);
            for (id, state) in want["invocations"].as_object().unwrap() {
                let got = journal::state(r, id).unwrap().unwrap();
                assert_eq!(serde_json::to_value(got).unwrap(), parsed(state), "{id}");
            }
            for t in want["tasks"].as_array().unwrap() {
                let (episode, key) = (t["episode"].as_str().unwrap(), t["task"].as_str().unwrap());
                let got = task::get(r, episode, key)?.unwrap();
                assert_eq!(
                    serde_json::to_value(got).unwrap(),
                    parsed(&t["state"]),
                    "{key}"
                );
            }
            let pending: Vec<String> = journal::pending(r)
                .unwrap()
                .into_iter()
                .map(|s| s.intent.invocation_id)
                .collect();
            assert_eq!(json!(pending), want["pending"]);
            let mut spend = BTreeMap::new();
            for ep in ["ep1", "ep2", "<rest>"] {
                for ((effect, scope), n) in journal::spent(r, ep).unwrap() {
                    spend.insert(format!("{ep}/{effect}/{scope}"), n);
                }
            }
            assert_eq!(json!(spend), want["spend"]);
            assert_eq!(
                json!(registry::head(r, registry::DEFAULT_REGISTRY)?),
                want["registry"]
            );
            Ok(())
        })
        .unwrap();
    let sessions: Vec<String> = session::list(&store)
        .unwrap()
        .into_iter()
        .map(|s| s.episode)
        .collect();
    assert_eq!(json!(sessions), want["sessions"]);
    assert_eq!(
        broker_core::commit::receipt(&store, "rest:c1")
            .unwrap()
            .state(),
        "resolved"
    );

    // The migrated store verifies whole, the indeterminate intent included.
    let audit = verify::audit_store(&store).unwrap();
    assert!(audit.consistent(), "{audit:?}");
    assert_eq!(audit.entries, 14);
    assert_eq!(audit.indeterminate.len(), 1);
    drop(store);
    assert_eq!(meta_schema(&db).as_deref(), Some("2"));
}

#[test]
fn calls_after_the_migration_continue_the_chain_and_a_second_open_changes_nothing() {
    let (_dir, db) = v1_copy();
    let store = Store::open(&db, StoreOptions::default()).unwrap();
    let before = store.read(log::head).unwrap().unwrap();
    let clock = Arc::new(TestClock(AtomicI64::new(T0)));
    let handler = TestHandler::new();
    let coordinator = Coordinator::new(
        store.clone(),
        handlers_for(handler.clone()),
        CoordinatorConfig {
            clock,
            ..CoordinatorConfig::default()
        },
    );
    let ep1 = session::list(&store)
        .unwrap()
        .into_iter()
        .find(|s| s.episode == "ep1")
        .unwrap();
    let call = |tool: &str, args: Value, task: &str| {
        coordinator.invoke(&Call {
            surface: Surface::A2a,
            session: ep1.clone(),
            skill_id: tool.into(),
            task_id: Some(task.into()),
            args,
            transition_fn: None,
        })
    };
    let out = call("ailang-read", json!({"path": "new.txt"}), "n1").unwrap();
    assert_eq!(out.entry_index, before.world.revision + 1);
    let report = verify::why(&store, &Handle::Output(out.output.clone()), 10).unwrap();
    assert!(report.all_ok(), "{report:?}");
    // Idempotency keys written by schema 1 still replay without running anything.
    let replay = call("ailang-read", json!({"path": "f0.txt"}), "t1").unwrap();
    assert!(replay.replayed);
    // The indeterminate intent from before the migration still refuses a resend.
    let lost = coordinator
        .invoke(&Call {
            surface: Surface::Mcp,
            session: ep1.clone(),
            skill_id: "ailang-read".into(),
            task_id: Some("lost".into()),
            args: serde_json::from_slice(b"{}").unwrap(),
            transition_fn: None,
        })
        .unwrap_err();
    assert!(
        matches!(lost, broker_core::coordinator::CallError::TaskIdReused),
        "{lost}"
    );
    assert_eq!(handler.runs(), 1, "only the new call ran");
    // Spend continues from the migrated counters (7 reads of ep1 before, one more now).
    let spent = store.read(|r| journal::spent(r, "ep1")).unwrap();
    assert_eq!(spent[&("Workspace.Read".into(), "worktree".into())], 8);
    drop(coordinator);
    drop(store);

    let bytes = std::fs::read(db.join("data.mdb")).unwrap();
    let store = Store::open(&db, StoreOptions::default()).unwrap();
    assert!(verify::audit_store(&store).unwrap().consistent());
    drop(store);
    assert_eq!(std::fs::read(db.join("data.mdb")).unwrap(), bytes);
}

/// A schema-1 store whose head does not select its last entry cannot be carried over as is
/// (schema 2 derives the head from the last entry): the open is refused and the file is left
/// byte for byte as it was, still schema 1.
#[test]
fn a_schema_1_store_whose_head_lags_its_log_is_refused_and_left_unmodified() {
    let (_dir, db) = v1_copy();
    {
        // SAFETY: no store handle is open on `db` in this process.
        let env = unsafe { heed::EnvOpenOptions::new().max_dbs(32).open(&db).unwrap() };
        let wtxn = env.write_txn().unwrap();
        let heads: heed::Database<heed::types::Str, heed::types::Bytes> = env
            .create_databases_and_commit(wtxn, |dbo, wtxn| {
                dbo.create_database(wtxn, Some("heads"))
                    .map(heed::CommitOrAbort::<_, ()>::Commit)
            })
            .unwrap()
            .unwrap_commit();
        let mut wtxn = env.write_txn().unwrap();
        let first_world: Ref = expected()["entries"][0]["worldRef"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        heads
            .put(&mut wtxn, "selected", first_world.as_bytes())
            .unwrap();
        wtxn.commit().unwrap();
        env.prepare_for_closing().wait();
    }
    let before = std::fs::read(db.join("data.mdb")).unwrap();
    let e = Store::open(&db, StoreOptions::default()).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("store is damaged: cannot migrate this schema-1 store: the head (sha256:"),
        "{e}"
    );
    assert_eq!(std::fs::read(db.join("data.mdb")).unwrap(), before);
    assert_eq!(meta_schema(&db).as_deref(), Some("1"));
}

#[test]
fn the_semantic_id_index_lists_objects_in_the_order_they_were_first_stored() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    // Hashes in descending order of insertion, so ref order and insertion order differ.
    let mut objects: Vec<Object> = (0..40u8)
        .map(|i| Object::new("world/test/v1", "test", vec![i; 10]))
        .collect();
    objects.sort_by_key(|o| std::cmp::Reverse(o.hash));
    for chunk in objects.chunks(7) {
        let chunk = chunk.to_vec();
        // The same object again is not listed twice; other semantic ids do not interleave.
        let again = chunk[0].clone();
        store
            .write(move |w| -> Result<(), StoreError> {
                for o in &chunk {
                    w.put_object(o)?;
                    w.put_object(&Object::new(
                        "world/other/v1",
                        "t",
                        o.hash.to_string().into_bytes(),
                    ))?;
                }
                w.put_object(&again)
            })
            .unwrap();
    }
    let want: Vec<Ref> = objects.iter().map(|o| o.hash).collect();
    let page = |after: Option<&Ref>| -> Option<Vec<Ref>> {
        store
            .read(|r| -> Result<_, StoreError> {
                Ok(r.semantic_id_refs("world/test/v1", after)?
                    .map(|it| it.map(Result::unwrap).collect()))
            })
            .unwrap()
    };
    assert_eq!(page(None).unwrap(), want);
    assert_eq!(page(Some(&want[12])).unwrap(), want[13..].to_vec());
    assert_eq!(page(Some(&want[39])).unwrap(), Vec::<Ref>::new());
    // `after` must be an object of this semantic id.
    assert_eq!(page(Some(&Ref::of(b"nothing stored"))), None);
    let other = Object::new("world/other/v1", "t", want[0].to_string().into_bytes()).hash;
    assert_eq!(page(Some(&other)), None);
}

/// Semantic ids are free text (a client commit chooses them): one that extends another with a
/// NUL byte and what looks like a position must not enter the other's listing or take its
/// positions.
#[test]
fn a_semantic_id_crafted_to_extend_another_never_mixes_into_its_listing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    let crafted = format!("world/a/v1\0{}", "\u{7f}".repeat(8));
    let mut plain = Vec::new();
    for i in 0..5u8 {
        let a = Object::new("world/a/v1", "t", vec![i]);
        let b = Object::new(&crafted, "t", vec![i, i]);
        plain.push(a.hash);
        store
            .write(move |w| -> Result<(), StoreError> {
                w.put_object(&b)?;
                w.put_object(&a)
            })
            .unwrap();
    }
    let listed: Vec<Ref> = store
        .read(|r| -> Result<_, StoreError> {
            Ok(r.semantic_id_refs("world/a/v1", None)?
                .unwrap()
                .map(Result::unwrap)
                .collect())
        })
        .unwrap();
    assert_eq!(listed, plain);
    let crafted_count = store
        .read(|r| -> Result<_, StoreError> {
            Ok(r.semantic_id_refs(&crafted, None)?.unwrap().count())
        })
        .unwrap();
    assert_eq!(crafted_count, 5);
}

/// A process of an older build that has a schema-1 store open would lose its tables under its
/// feet if another process migrated it: the migration refuses while any other process has the
/// store open, leaves it unchanged, and runs once that process is gone.
#[test]
fn a_schema_1_store_open_in_another_process_is_not_migrated_under_it() {
    let (_dir, db) = v1_copy();
    // Create lock.mdb the way LMDB does, then close the environment again.
    {
        // SAFETY: no other handle on `db` exists in this process.
        let env = unsafe { heed::EnvOpenOptions::new().max_dbs(32).open(&db).unwrap() };
        env.prepare_for_closing().wait();
    }
    let lock =
        std::ffi::CString::new(db.join("lock.mdb").into_os_string().into_encoded_bytes()).unwrap();
    let (mut ready, mut release) = ([0i32; 2], [0i32; 2]);
    // SAFETY: two fresh pipes; the arrays have room for both descriptors.
    unsafe {
        assert_eq!(libc::pipe(ready.as_mut_ptr()), 0);
        assert_eq!(libc::pipe(release.as_mut_ptr()), 0);
    }
    // SAFETY: the child calls only async-signal-safe functions (open, fcntl, write, read,
    // _exit) before it exits: it holds the lock every process with the environment open holds
    // (a read lock on the first byte of lock.mdb) until the parent closes the release pipe.
    let child = unsafe { libc::fork() };
    assert!(child >= 0);
    if child == 0 {
        unsafe {
            // Keep only the ends this side uses, so the parent's close reaches us as EOF.
            libc::close(ready[0]);
            libc::close(release[1]);
            let fd = libc::open(lock.as_ptr(), libc::O_RDWR);
            let mut l: libc::flock = std::mem::zeroed();
            l.l_type = libc::F_RDLCK as libc::c_short;
            l.l_whence = libc::SEEK_SET as libc::c_short;
            l.l_len = 1;
            let ok = fd >= 0 && libc::fcntl(fd, libc::F_SETLK, &l) == 0;
            libc::write(ready[1], [u8::from(ok)].as_ptr().cast(), 1);
            let mut b = 0u8;
            libc::read(release[0], (&mut b as *mut u8).cast(), 1);
            libc::_exit(0);
        }
    }
    // SAFETY: the child's ends, not used here.
    unsafe {
        libc::close(ready[1]);
        libc::close(release[0]);
    }
    let mut ok = 0u8;
    // SAFETY: reads one byte into a local from the pipe the child writes.
    assert_eq!(
        unsafe { libc::read(ready[0], (&mut ok as *mut u8).cast(), 1) },
        1
    );
    assert_eq!(ok, 1, "the child took its lock");

    let before = std::fs::read(db.join("data.mdb")).unwrap();
    let e = Store::open(&db, StoreOptions::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "store {} uses schema 1 and another process has it open; stop that process (a worldd of an older build?) so that this build can migrate the store to schema 2",
            db.display()
        )
    );
    assert_eq!(std::fs::read(db.join("data.mdb")).unwrap(), before);
    assert_eq!(meta_schema(&db).as_deref(), Some("1"));

    // SAFETY: closing our pipe ends lets the child exit; waitpid reaps it.
    unsafe {
        libc::close(release[1]);
        let mut status = 0;
        assert_eq!(libc::waitpid(child, &mut status, 0), child);
    }
    let store = Store::open(&db, StoreOptions::default()).unwrap();
    assert!(verify::audit_store(&store).unwrap().consistent());
    drop(store);
    assert_eq!(meta_schema(&db).as_deref(), Some("2"));
}
