//! Schema 2 and the migration from schema 1: a store written by the schema-1 build
//! (`tests/fixtures/store-v1`, with the logical dump that build read from it) opens, migrates
//! once, reads exactly as before through every public read path, verifies, and takes new calls
//! that continue its chain. The semantic-id index keeps insertion order.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicI64;
use std::sync::Arc;

use broker_core::access::{self, Reader};
use broker_core::coordinator::{Call, Coordinator, CoordinatorConfig, Surface};
use broker_core::journal;
use broker_core::log;
use broker_core::object::{sid, Object, Ref};
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

fn parsed(text: &Value) -> Value {
    serde_json::from_str(text.as_str().unwrap()).unwrap()
}

#[test]
fn a_schema_1_store_migrates_on_open_and_reads_exactly_as_before() {
    let (_dir, db) = v1_copy();
    assert_eq!(meta_schema(&db).as_deref(), Some("1"));
    let store = Store::open(&db, StoreOptions::default()).unwrap();
    let want = expected();
    let journal_rows = store.raw_rows("journal").unwrap();

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
            for (seq, bytes) in &journal_rows {
                let seq = u64::from_be_bytes(seq.as_slice().try_into().unwrap());
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
        .sessions
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
    assert_eq!(meta_schema(&db).as_deref(), Some("6"));
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
        .sessions
        .into_iter()
        .find(|s| s.episode == "ep1")
        .unwrap();
    let call = |tool: &str, args: Value, task: &str| {
        coordinator.invoke(&Call {
            surface: Surface::A2a,
            session: ep1.clone().into(),
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
            session: ep1.clone().into(),
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

/// Schema 1 kept an intent's state in its invocation row, with no journal sequence beside it to
/// key a resolution by: an outcome journaled for such an intent after the migration goes into
/// the row itself, where readers find it, and the store still verifies.
#[test]
fn an_outcome_for_an_intent_journaled_before_the_migration_resolves_it_in_its_row() {
    let (_dir, db) = v1_copy();
    let store = Store::open(&db, StoreOptions::default()).unwrap();
    let id = "mcp:ep1:lost";
    let before = store.read(|r| journal::state(r, id)).unwrap().unwrap();
    assert_eq!(before.status, None, "{before:?}");
    let result = Ref::of(b"late result");
    let seq = store
        .write(move |w| {
            journal::append_outcome(w, id, journal::OutcomeStatus::Failed, Some(result))
        })
        .unwrap();
    let after = store.read(|r| journal::state(r, id)).unwrap().unwrap();
    assert_eq!(after.status, Some(journal::OutcomeStatus::Failed));
    assert_eq!(after.result_ref, Some(result));
    assert_eq!(after.outcome_seq, Some(seq));
    assert_eq!(after.intent_seq, before.intent_seq);
    assert_eq!(
        store.read(|r| journal::receipt(r, id)).unwrap(),
        journal::Receipt::Resolved {
            status: journal::OutcomeStatus::Failed,
            result_ref: Some(result)
        }
    );
    assert!(!store
        .read(journal::pending)
        .unwrap()
        .iter()
        .any(|p| p.intent.invocation_id == id));
    // A second outcome is refused, as for any resolved intent.
    let again = store
        .write(move |w| journal::append_outcome(w, id, journal::OutcomeStatus::Failed, None))
        .unwrap_err();
    assert!(
        matches!(again, journal::JournalError::AlreadyResolved(ref i) if i == id),
        "{again}"
    );
    let audit = verify::audit_store(&store).unwrap();
    assert!(audit.consistent(), "{audit:?}");
    assert!(audit.indeterminate.is_empty(), "{audit:?}");
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

/// Another process with the store at `db` open, as LMDB sees it: a child holding the lock every
/// process with the environment open holds (a read lock on the first byte of `lock.mdb`), until
/// this is dropped.
struct Held {
    child: libc::pid_t,
    release: libc::c_int,
}

impl Held {
    fn by_another_process(db: &Path) -> Held {
        // Create lock.mdb the way LMDB does, then close the environment again.
        {
            // SAFETY: no other handle on `db` exists in this process.
            let env = unsafe { heed::EnvOpenOptions::new().max_dbs(32).open(db).unwrap() };
            env.prepare_for_closing().wait();
        }
        let lock =
            std::ffi::CString::new(db.join("lock.mdb").into_os_string().into_encoded_bytes())
                .unwrap();
        let (mut ready, mut release) = ([0i32; 2], [0i32; 2]);
        // Close-on-exec: a process another test spawns meanwhile must not keep the release
        // pipe open, or the child never sees its end and Drop waits for ever.
        // SAFETY: two fresh pipes; the arrays have room for both descriptors.
        unsafe {
            assert_eq!(libc::pipe2(ready.as_mut_ptr(), libc::O_CLOEXEC), 0);
            assert_eq!(libc::pipe2(release.as_mut_ptr(), libc::O_CLOEXEC), 0);
        }
        // SAFETY: the child calls only async-signal-safe functions (open, fcntl, write, read,
        // _exit) before it exits: it holds the lock every process with the environment open holds
        // (a read lock on the first byte of lock.mdb) until the parent closes the release pipe.
        let child = unsafe { libc::fork() };
        assert!(child >= 0);
        if child == 0 {
            // SAFETY: async-signal-safe calls only (see the fork above), on descriptors this child
            // owns and on a zeroed `flock`, a plain C struct; `_exit` ends the child here.
            unsafe {
                // Keep only the ends this side uses, so the parent's close reaches us as EOF;
                // and nothing else: the release pipe of another `Held` made meanwhile (by this
                // thread or another) kept open here would keep that child waiting, and both
                // Drops with it.
                let (low, high) = (ready[1].min(release[0]), ready[1].max(release[0]));
                for (first, last) in [(3, low - 1), (low + 1, high - 1), (high + 1, -1)] {
                    if first <= last || last == -1 {
                        libc::syscall(
                            libc::SYS_close_range,
                            first as libc::c_uint,
                            last as libc::c_uint,
                            0 as libc::c_uint,
                        );
                    }
                }
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
        let read = unsafe { libc::read(ready[0], (&mut ok as *mut u8).cast(), 1) };
        // SAFETY: our end of the pipe the child wrote, not used again.
        unsafe { libc::close(ready[0]) };
        assert_eq!(read, 1);
        assert_eq!(ok, 1, "the child took its lock");
        Held {
            child,
            release: release[1],
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // SAFETY: closing our pipe end lets the child exit; waitpid reaps it.
        unsafe {
            libc::close(self.release);
            let mut status = 0;
            assert_eq!(libc::waitpid(self.child, &mut status, 0), self.child);
        }
    }
}

/// A second store held while the first is (two tests at once): the second's child kept the
/// first's release pipe open, so dropping the first waited for ever on a child that waited for
/// the second.
#[test]
fn two_stores_held_at_once_are_each_let_go_in_any_order() {
    let (first_dir, second_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first = Held::by_another_process(first_dir.path());
    let second = Held::by_another_process(second_dir.path());
    let (done, dropped) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(first);
        let _ = done.send(());
    });
    assert!(
        dropped
            .recv_timeout(std::time::Duration::from_secs(10))
            .is_ok(),
        "the first child never ended"
    );
    drop(second);
}

/// A process of an older build that has a schema-1 store open would lose its tables under its
/// feet if another process migrated it: the migration refuses while any other process has the
/// store open, leaves it unchanged, and runs once that process is gone.
#[test]
fn a_schema_1_store_open_in_another_process_is_not_migrated_under_it() {
    let (_dir, db) = v1_copy();
    let held = Held::by_another_process(&db);

    let before = std::fs::read(db.join("data.mdb")).unwrap();
    let e = Store::open(&db, StoreOptions::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "store {} uses schema 1 and another process has it open; stop that process (a worldd of an older build?) so that this build can migrate the store to schema 6",
            db.display()
        )
    );
    assert_eq!(std::fs::read(db.join("data.mdb")).unwrap(), before);
    assert_eq!(meta_schema(&db).as_deref(), Some("1"));

    drop(held);
    let store = Store::open(&db, StoreOptions::default()).unwrap();
    assert!(verify::audit_store(&store).unwrap().consistent());
    drop(store);
    assert_eq!(meta_schema(&db).as_deref(), Some("6"));
}

// -------------------------------------------------------------------------------------------
// Who reads what, rebuilt by the migration.

fn ep(name: &str) -> Reader {
    Reader::Episode(name.into())
}

fn readable(store: &Store, reader: &Reader, r: &Ref) -> bool {
    store
        .read(|rd| access::object(rd, reader, r).map(|o| o.is_some()))
        .unwrap()
}

/// The refs a call's invocation record names, with its effects' requests and results.
fn call_refs(store: &Store, record: &Ref) -> (String, Vec<Ref>) {
    let rec: Value =
        serde_json::from_slice(&store.read(|r| r.object(record)).unwrap().unwrap().payload)
            .unwrap();
    let r = |v: &Value| v.as_str().unwrap().parse::<Ref>().unwrap();
    let mut refs = vec![
        *record,
        r(&rec["input"]),
        r(&rec["output"]),
        r(&rec["plan"]),
    ];
    for e in rec["effects"].as_array().unwrap() {
        refs.extend(effect_refs(store, &r(e)));
    }
    (rec["episodeId"].as_str().unwrap().to_owned(), refs)
}

fn effect_refs(store: &Store, record: &Ref) -> Vec<Ref> {
    let o = store.read(|r| r.object(record)).unwrap().unwrap();
    let ev: Value = serde_json::from_slice(&o.payload).unwrap();
    let mut refs = vec![*record, ev["requestRef"].as_str().unwrap().parse().unwrap()];
    if ev["resultRef"] != "" {
        refs.push(ev["resultRef"].as_str().unwrap().parse().unwrap());
    }
    refs
}

#[test]
fn a_migrated_store_lets_each_episode_read_its_own_calls_and_nothing_else() {
    let (_dir, db) = v1_copy();
    let store = Store::open(&db, StoreOptions::default()).unwrap();
    let want = expected();
    let mut calls: BTreeMap<String, Vec<Ref>> = BTreeMap::new();
    let mut client = Vec::new();
    for e in want["entries"].as_array().unwrap().iter().skip(1) {
        let entry: Value = parsed(&e["entry"]);
        let record: Ref = entry["transitionRef"].as_str().unwrap().parse().unwrap();
        if entry["header"]["writtenBy"]
            .as_str()
            .unwrap()
            .starts_with("coordinator:")
        {
            let (episode, refs) = call_refs(&store, &record);
            calls.entry(episode).or_default().extend(refs);
        } else {
            client.push(record);
        }
    }
    // The call whose effect ran and whose finish failed: never committed, its record is its
    // episode's all the same.
    let unrecorded = want["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| parsed(&t["state"]))
        .find(|s| s["phase"] == "unrecorded")
        .unwrap();
    let record: Ref = unrecorded["effectRecords"][0]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    calls
        .get_mut("ep1")
        .unwrap()
        .extend(effect_refs(&store, &record));
    assert_eq!(calls.len(), 2);
    for (episode, refs) in &calls {
        let other = if episode == "ep1" { "ep2" } else { "ep1" };
        for r in refs {
            assert!(readable(&store, &ep(episode), r), "{episode} reads {r}");
            if !calls[other].contains(r) {
                assert!(
                    !readable(&store, &ep(other), r),
                    "{other} must not read {r}"
                );
            }
        }
    }
    // A client commit's objects belong to no episode.
    assert_eq!(client.len(), 1);
    for reader in [ep("ep1"), ep("ep2")] {
        assert!(!readable(&store, &reader, &client[0]));
    }
    assert!(readable(&store, &Reader::Operator, &client[0]));
    // Listings come from the rebuilt keys too, in arrival order.
    let inputs = store
        .read(|r| -> Result<_, StoreError> {
            Ok(
                access::by_semantic_id(r, &ep("ep2"), sid::INVOCATION_INPUT, None, 100)?
                    .unwrap()
                    .items
                    .len(),
            )
        })
        .unwrap();
    assert_eq!(inputs, 2);
}

/// Builds of schema 1 let any session commit, a client commit could claim `coordinator:` as
/// its writer, and the last of them indexed readers from any entry whose `transitionRef` is an
/// invocation record. An episode could so commit a record of its own that names another
/// episode's objects, and be let read them. The migration grants only what the coordinator's
/// task state places at the entry, and drops whatever such a build had indexed.
#[test]
fn forged_invocation_record_in_a_schema_1_store_grants_no_reads_when_migrated() {
    let (_dir, db) = v1_copy();
    let want = expected();
    let entries = want["entries"].as_array().unwrap();
    let entry_1: Value = parsed(&entries[1]["entry"]);
    let victim: Ref = entry_1["transitionRef"].as_str().unwrap().parse().unwrap();
    // The victim's objects, and a genuine invocation id of the thief's (entry 8 is ep2's).
    let (victims, thief_id) = {
        let (_d, copy) = v1_copy();
        let store = Store::open(&copy, StoreOptions::default()).unwrap();
        let (owner, refs) = call_refs(&store, &victim);
        assert_eq!(owner, "ep1");
        let entry_8: Value = parsed(&entries[8]["entry"]);
        let rec = store
            .read(|r| r.object(&entry_8["transitionRef"].as_str().unwrap().parse().unwrap()))
            .unwrap()
            .unwrap();
        let rec: Value = serde_json::from_slice(&rec.payload).unwrap();
        assert_eq!(rec["episodeId"], "ep2");
        (refs, rec["invocationId"].as_str().unwrap().to_owned())
    };
    let victim_rec = {
        let (_d, copy) = v1_copy();
        let store = Store::open(&copy, StoreOptions::default()).unwrap();
        let o = store.read(|r| r.object(&victim)).unwrap().unwrap();
        serde_json::from_slice::<Value>(&o.payload).unwrap()
    };
    let forged = |invocation: &str, writer: &str| {
        let mut rec = victim_rec.clone();
        rec["invocationId"] = json!(invocation);
        rec["episodeId"] = json!("ep2");
        (
            Object::new(sid::INVOCATION_RECORD, writer, canon(&rec)),
            writer.to_owned(),
        )
    };
    {
        let mut v1 = V1::open(&db);
        // An invented invocation, a genuine one of the thief's reused, a plain client commit.
        for (record, writer) in [
            forged("a2a:ep2:forged", "coordinator:a2a"),
            forged(&thief_id, "coordinator:a2a"),
            forged("rest:forged", "client:ep2"),
        ] {
            v1.append(&record, &writer, victims[2]);
        }
        // What a schema-1 build that indexed readers would have granted the thief: every
        // object of the victim's call, under the old key.
        v1.old_readers("ep2", &victims);
        v1.close();
    }
    let store = Store::open(&db, StoreOptions::default()).unwrap();
    for r in &victims {
        assert!(readable(&store, &ep("ep1"), r), "the owner reads {r}");
        assert!(
            !readable(&store, &ep("ep2"), r),
            "the thief must not read {r}"
        );
    }
    let listed = store
        .read(|r| -> Result<_, StoreError> {
            Ok(
                access::by_semantic_id(r, &ep("ep2"), sid::INVOCATION_OUTPUT, None, 100)?
                    .unwrap()
                    .items
                    .iter()
                    .map(|o| o.hash)
                    .collect::<Vec<_>>(),
            )
        })
        .unwrap();
    assert!(!listed.contains(&victims[2]), "{listed:?}");
    // Only keys of schema 2's layout are left: `episode \0` and an 8-byte sequence.
    let old_layout = store
        .raw_rows("readers")
        .unwrap()
        .iter()
        .filter(|(k, _)| {
            let at = k.iter().position(|b| *b == 0).unwrap();
            k.len() != at + 9
        })
        .count();
    assert_eq!(old_layout, 0);
    // The forged entries are what `doctor` reports; the genuine ones still verify.
    let audit = verify::audit_store(&store).unwrap();
    assert_eq!(audit.entries, 17);
    assert_eq!(
        audit.broken.iter().map(|b| b.0).collect::<Vec<_>>(),
        [14, 15, 16]
    );
    drop(store);
    // The schema-1 marker of the readers index is gone.
    assert_eq!(meta_key(&db, "readers_index"), None);
}

/// An agent could send, as the arguments of an earlier call, the exact bytes of a later call's
/// invocation record or effect record, and the store kept the bytes as the first writer's kind
/// (`world/invocation-input/v1`). The migration reads them as the log names them: the call's
/// episode reads every object of that call, and its record and effect record as their kinds.
#[test]
fn a_call_whose_records_were_first_stored_as_arguments_is_still_its_episodes_when_migrated() {
    let want = expected();
    // A call with an effect, and its episode, read from a copy of its own.
    let (record, effect, episode, refs) = {
        let (_d, copy) = v1_copy();
        let store = Store::open(&copy, StoreOptions::default()).unwrap();
        want["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| parsed(&e["entry"]))
            .filter(|e| {
                e["header"]["writtenBy"]
                    .as_str()
                    .unwrap()
                    .starts_with("coordinator:")
            })
            .find_map(|e| {
                let record: Ref = e["transitionRef"].as_str().unwrap().parse().unwrap();
                let o = store.read(|r| r.object(&record)).unwrap().unwrap();
                let rec: Value = serde_json::from_slice(&o.payload).unwrap();
                let effect: Ref = rec["effects"].get(0)?.as_str()?.parse().ok()?;
                let (episode, refs) = call_refs(&store, &record);
                Some((record, effect, episode, refs))
            })
            .unwrap()
    };
    let other = if episode == "ep1" { "ep2" } else { "ep1" };
    let told = [
        (record, sid::INVOCATION_RECORD, "the invocation record"),
        (effect, sid::EFFECT_RECORD, "the effect record"),
    ];
    for (disguised, kind, what) in told {
        let (_dir, db) = v1_copy();
        let mut v1 = V1::open(&db);
        v1.rekind(&disguised, sid::INVOCATION_INPUT);
        v1.close();
        let store = Store::open(&db, StoreOptions::default()).unwrap();
        for r in &refs {
            assert!(
                readable(&store, &ep(&episode), r),
                "{what} disguised: {episode} reads {r}"
            );
        }
        assert!(!readable(&store, &ep(other), &disguised), "{what}");
        let seen = |reader: &Reader| {
            store
                .read(|rd| {
                    access::object(rd, reader, &disguised)
                        .map(|o| o.map(|o| o.semantic_id.to_owned()))
                })
                .unwrap()
        };
        assert_eq!(seen(&ep(&episode)).as_deref(), Some(kind), "{what}");
        // The store keeps the kind the bytes were first stored as; operators read that.
        assert_eq!(
            seen(&Reader::Operator).as_deref(),
            Some(sid::INVOCATION_INPUT),
            "{what}"
        );
    }
}

fn canon(v: &Value) -> Vec<u8> {
    broker_core::canon::to_vec(v).unwrap()
}

fn meta_key(db: &Path, key: &str) -> Option<Vec<u8>> {
    // SAFETY: no store handle is open on `db` in this process while this one is.
    let env = unsafe { heed::EnvOpenOptions::new().max_dbs(32).open(db).unwrap() };
    let rtxn = env.read_txn().unwrap();
    let mut value = None;
    env.open_databases_and_commit(rtxn, |dbo, rtxn| -> heed::Result<_> {
        let meta = dbo
            .open_database::<heed::types::Str, heed::types::Bytes>(rtxn, Some("meta"))?
            .unwrap();
        value = meta.get(rtxn, key)?.map(<[u8]>::to_vec);
        Ok(heed::CommitOrAbort::<(), ()>::Commit(()))
    })
    .unwrap();
    env.prepare_for_closing().wait();
    value
}

/// Raw writes into a schema-1 store, the way a build of schema 1 laid its tables out.
struct V1 {
    env: heed::Env,
}

type RawDb = heed::Database<'static, heed::types::Bytes, heed::types::Bytes>;

impl V1 {
    fn open(db: &Path) -> V1 {
        // SAFETY: no store handle is open on `db` in this process while this one is.
        let env = unsafe { heed::EnvOpenOptions::new().max_dbs(32).open(db).unwrap() };
        V1 { env }
    }

    fn table(&self, name: &str) -> RawDb {
        let wtxn = self.env.write_txn().unwrap();
        self.env
            .create_databases_and_commit(wtxn, |dbo, wtxn| {
                dbo.create_database(wtxn, Some(name))
                    .map(heed::CommitOrAbort::<_, ()>::Commit)
            })
            .unwrap()
            .unwrap_commit()
    }

    /// Append an entry whose record is `record`, selecting a world with `state_root`.
    fn append(&mut self, record: &Object, writer: &str, state_root: Ref) {
        let t = |n: &str| self.table(n);
        let (objects, by_sid, log_t, world_refs, worlds, hashes, heads) = (
            t("objects"),
            t("by_semantic_id"),
            t("log"),
            t("world_refs"),
            t("worlds"),
            t("entry_hashes"),
            t("heads"),
        );
        let mut wtxn = self.env.write_txn().unwrap();
        let (last, bytes) = log_t.last(&wtxn).unwrap().unwrap();
        let last = u64::from_be_bytes(last.try_into().unwrap());
        let prev = log::Entry::from_bytes(bytes).unwrap();
        let header = log::EntryHeader {
            entry_index: last + 1,
            semantics_epoch: 1,
            transition_fn: prev.header.transition_fn,
            interpreter: log::interpreter_ref().unwrap(),
            prev_entry_hash: prev.entry_hash,
            written_by: writer.into(),
        };
        let entry = log::Entry::new(header, record.hash).unwrap();
        let world = log::World {
            revision: last + 1,
            state_root,
            log_head: entry.entry_hash,
        };
        let world_ref = world.reference().unwrap();
        let index = (last + 1).to_be_bytes();
        // The schema-1 envelope: interfaceHash, then length-prefixed semantic id and
        // provenance, then the payload.
        let mut envelope = record.interface_hash.as_bytes().to_vec();
        for text in [&record.semantic_id, &record.provenance] {
            envelope.extend_from_slice(&(text.len() as u16).to_be_bytes());
            envelope.extend_from_slice(text.as_bytes());
        }
        envelope.extend_from_slice(&record.payload);
        objects
            .put(&mut wtxn, record.hash.as_bytes(), &envelope)
            .unwrap();
        let mut k = record.semantic_id.as_bytes().to_vec();
        k.push(0);
        k.extend_from_slice(record.hash.as_bytes());
        by_sid.put(&mut wtxn, &k, &[]).unwrap();
        log_t
            .put(&mut wtxn, &index, &entry.to_bytes().unwrap())
            .unwrap();
        world_refs
            .put(&mut wtxn, &index, world_ref.as_bytes())
            .unwrap();
        worlds
            .put(&mut wtxn, world_ref.as_bytes(), &world.to_bytes().unwrap())
            .unwrap();
        hashes
            .put(&mut wtxn, entry.entry_hash.as_bytes(), &index)
            .unwrap();
        heads
            .put(&mut wtxn, b"selected", world_ref.as_bytes())
            .unwrap();
        wtxn.commit().unwrap();
    }

    /// Keys of the last schema-1 builds' `readers` table (`episode \0 semanticId \0 ref`), and
    /// their mark that it was built.
    fn old_readers(&mut self, episode: &str, refs: &[Ref]) {
        let (readers, meta, objects) = (
            self.table("readers"),
            self.table("meta"),
            self.table("objects"),
        );
        let mut wtxn = self.env.write_txn().unwrap();
        for r in refs {
            let envelope = objects.get(&wtxn, r.as_bytes()).unwrap().unwrap();
            let len = u16::from_be_bytes(envelope[32..34].try_into().unwrap()) as usize;
            let sid = envelope[34..34 + len].to_vec();
            let mut k = episode.as_bytes().to_vec();
            k.push(0);
            k.extend_from_slice(&sid);
            k.push(0);
            k.extend_from_slice(r.as_bytes());
            readers.put(&mut wtxn, &k, &[]).unwrap();
        }
        meta.put(&mut wtxn, b"readers_index", b"1").unwrap();
        wtxn.commit().unwrap();
    }

    /// Store `r`'s bytes as `semantic_id` (the kind a first writer of the same bytes would
    /// have left), with its index key.
    fn rekind(&mut self, r: &Ref, semantic_id: &str) {
        let (objects, by_sid) = (self.table("objects"), self.table("by_semantic_id"));
        let mut wtxn = self.env.write_txn().unwrap();
        let envelope = objects.get(&wtxn, r.as_bytes()).unwrap().unwrap().to_vec();
        let len = u16::from_be_bytes(envelope[32..34].try_into().unwrap()) as usize;
        let old_sid = envelope[34..34 + len].to_vec();
        let rest = &envelope[34 + len..];
        let plen = u16::from_be_bytes(rest[..2].try_into().unwrap()) as usize;
        let payload = rest[2 + plen..].to_vec();
        let o = Object::new(semantic_id, "coordinator:mcp", payload);
        let mut out = o.interface_hash.as_bytes().to_vec();
        for text in [&o.semantic_id, &o.provenance] {
            out.extend_from_slice(&(text.len() as u16).to_be_bytes());
            out.extend_from_slice(text.as_bytes());
        }
        out.extend_from_slice(&o.payload);
        objects.put(&mut wtxn, r.as_bytes(), &out).unwrap();
        let key = |sid: &[u8]| {
            let mut k = sid.to_vec();
            k.push(0);
            k.extend_from_slice(r.as_bytes());
            k
        };
        assert!(by_sid.delete(&mut wtxn, &key(&old_sid)).unwrap());
        by_sid
            .put(&mut wtxn, &key(semantic_id.as_bytes()), &[])
            .unwrap();
        wtxn.commit().unwrap();
    }

    fn close(self) {
        self.env.prepare_for_closing().wait();
    }
}

/// Schema 6 closes an intent whose handler never started as `withdrawn` and gives its units
/// back, which a build of schema 5 would read as damage and count as spent. A schema-5 store
/// is stamped 6 when a build that writes opens it (nothing moves, and it verifies as before);
/// a verb that only reads keeps it at 5.
#[test]
fn a_schema_5_store_is_stamped_6_by_a_writer_and_kept_at_5_by_a_reader() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    drop(Store::create(&db).unwrap());
    set_meta_schema(&db, "5");
    let (kept, found) =
        broker_core::migrate::keeping_schema(|| Store::open(&db, StoreOptions::default()));
    assert_eq!(found, Some(5));
    let store = kept.unwrap();
    assert!(verify::audit_store(&store).unwrap().consistent());
    drop(store);
    assert_eq!(meta_schema(&db).as_deref(), Some("5"));
    let store = Store::open(&db, StoreOptions::default()).unwrap();
    assert!(verify::audit_store(&store).unwrap().consistent());
    drop(store);
    assert_eq!(meta_schema(&db).as_deref(), Some("6"));
}

/// Upgrade day: the new build's `doctor`, `why --db`, `usage`, `session list` and `backup`
/// (opens that keep an older schema as it is) were refused on a schema-5 store while the old
/// daemon served it, or while another of them ran: `… uses schema 5 and another process has it
/// open; stop that process … so that this build can migrate the store`, though they never
/// migrate anything. They read it as it is now; an open that would upgrade is still refused.
#[test]
fn a_store_of_an_older_schema_open_elsewhere_is_read_as_it_is_by_an_open_that_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    drop(Store::create(&db).unwrap());
    set_meta_schema(&db, "5");
    let held = Held::by_another_process(&db);
    let before = std::fs::read(db.join("data.mdb")).unwrap();
    let (kept, found) =
        broker_core::migrate::keeping_schema(|| Store::open(&db, StoreOptions::default()));
    assert_eq!(found, Some(5));
    let store = kept.unwrap();
    assert!(verify::audit_store(&store).unwrap().consistent());
    drop(store);
    let e = Store::open(&db, StoreOptions::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "store {} uses schema 5 and another process has it open; stop that process (a worldd of an older build?) so that this build can migrate the store to schema 6",
            db.display()
        )
    );
    drop(held);
    assert_eq!(std::fs::read(db.join("data.mdb")).unwrap(), before);
    assert_eq!(meta_schema(&db).as_deref(), Some("5"));
}

/// The same on a read-only filesystem (a snapshot, a backup medium): the read-only verbs
/// refused a schema-5 store there ("read-only it cannot be upgraded to schema 6"), which they
/// never upgrade; they read it as it is now. An open that would upgrade is still refused.
#[test]
fn a_store_of_an_older_schema_opened_read_only_is_read_as_it_is_by_an_open_that_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    drop(Store::create(&db).unwrap());
    set_meta_schema(&db, "5");
    let read_only = || {
        Store::open(
            &db,
            StoreOptions {
                read_only: true,
                ..StoreOptions::default()
            },
        )
    };
    let (kept, found) = broker_core::migrate::keeping_schema(read_only);
    assert_eq!(found, Some(5));
    let store = kept.unwrap();
    assert!(verify::audit_store(&store).unwrap().consistent());
    drop(store);
    assert!(
        matches!(read_only(), Err(StoreError::ReadOnlyUpgrade { .. })),
        "an open that would upgrade it"
    );
    assert_eq!(meta_schema(&db).as_deref(), Some("5"));
}
