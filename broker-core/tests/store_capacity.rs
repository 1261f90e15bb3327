//! How full the store may get: the ceiling and its reserve, the warnings on the way, a full
//! disk, and another process growing the map under this one.

mod common;

use std::path::Path;

use broker_core::capacity::Full;
use broker_core::coordinator::{Call, CallError, Coordinator, CoordinatorConfig, Surface};
use broker_core::journal;
use broker_core::log;
use broker_core::object::{Object, Ref};
use broker_core::session;
use broker_core::store::{Store, StoreError, StoreOptions};
use common::*;
use serde_json::json;

const MIB: u64 = 1 << 20;

fn open(dir: &Path, ceiling: u64, reserve: u64) -> Store {
    Store::open(
        dir,
        StoreOptions {
            ceiling: Some(ceiling),
            reserve: Some(reserve),
            create: true,
            ..StoreOptions::default()
        },
    )
    .unwrap()
}

fn blob(seed: u32, len: usize) -> Object {
    let mut payload = vec![0u8; len];
    payload[..4].copy_from_slice(&seed.to_be_bytes());
    Object::new("world/test/v1", "test", payload)
}

fn put(store: &Store, o: Object) -> Result<(), StoreError> {
    store.write(move |w| w.put_object(&o))
}

#[test]
fn filling_the_store_warns_then_refuses_client_work_past_the_reserve() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("db"), 4 * MIB, 512 << 10);
    publish_se_tools(&store);
    let handler = TestHandler::new();
    let coordinator = Coordinator::new(
        store.clone(),
        handlers_for(handler.clone()),
        CoordinatorConfig::default(),
    );
    let s = session::mint(
        &store,
        "ep1",
        vec!["Workspace.Read=worktree:5".parse().unwrap()],
        3600,
        coordinator.now(),
    )
    .unwrap()
    .session;
    let call = |task: &str| {
        coordinator.invoke(&Call {
            surface: Surface::A2a,
            session: s.clone().into(),
            skill_id: "ailang-read".into(),
            task_id: Some(task.into()),
            args: json!({"path": "a"}),
            transition_fn: None,
        })
    };
    call("before").unwrap();

    // Grow the store by quarter mebibytes; the gauge follows every group commit.
    let mut warnings = Vec::new();
    let mut seed = 0;
    while store.admits_client_work().is_ok() {
        let u = store.usage();
        assert!(u.used + u.limits.reserve <= u.limits.ceiling, "{u:?}");
        warnings.push(u.warning());
        seed += 1;
        put(&store, blob(seed, 256 << 10)).unwrap();
    }
    let u = store.usage();
    assert!(u.used + u.limits.reserve > u.limits.ceiling, "{u:?}");
    assert!(
        warnings.contains(&None) && warnings.contains(&Some(80)),
        "{warnings:?}"
    );
    assert_eq!(
        store.admits_client_work(),
        Err(Full::Ceiling {
            used: u.used,
            ceiling: 4 * MIB,
            reserve: 512 << 10
        })
    );

    // A new call is refused before anything is written or spent.
    let head = store.read(log::head).unwrap().unwrap();
    let err = call("after").unwrap_err();
    assert!(matches!(err, CallError::StoreFull(_)), "{err}");
    assert_eq!(
        err.to_string(),
        "the world store is full; new calls are refused until an operator makes room"
    );
    assert_eq!(store.read(log::head).unwrap().unwrap(), head);
    assert_eq!(handler.runs(), 1);
    assert_eq!(
        store.read(|r| journal::spent(r, "ep1")).unwrap()
            [&("Workspace.Read".to_string(), "worktree".to_string())],
        1
    );
    // The committed call can still be fetched again: that is not new work.
    assert!(call("before").unwrap().replayed);

    // The reserve stays writable (calls in flight, the operator's verbs) up to the map.
    let mut saw_95 = false;
    let full = loop {
        seed += 1;
        match put(&store, blob(seed, 32 << 10)) {
            Ok(()) => saw_95 |= store.usage().warning() == Some(95),
            Err(e) => break e,
        }
    };
    assert!(saw_95);
    assert!(matches!(full, StoreError::MapFull { .. }), "{full}");
    // Reads go on.
    assert!(store
        .read(|r| r.object(&blob(1, 256 << 10).hash))
        .unwrap()
        .is_some());
}

#[test]
fn a_reserve_as_large_as_the_ceiling_is_refused_before_the_store_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let err = Store::open(
        &db,
        StoreOptions {
            ceiling: Some(MIB),
            reserve: Some(MIB),
            create: true,
            ..StoreOptions::default()
        },
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the store reserve (1048576 bytes) must be smaller than its ceiling (1048576 bytes)"
    );
    assert!(!db.join("data.mdb").exists());
}

#[test]
fn a_full_disk_reads_disk_full_and_the_store_keeps_serving_reads() {
    let Some(fs) = Tmpfs::mount(4 * MIB) else {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    };
    // A ceiling far above the disk and no reserve: the filesystem is what runs out.
    let store = open(&fs.dir.path().join("db"), 64 * MIB, 0);
    let first = blob(0, 256 << 10);
    let first_ref = first.hash;
    put(&store, first).unwrap();
    let err = (1..64)
        .find_map(|i| put(&store, blob(i, 256 << 10)).err())
        .expect("a 4 MiB tmpfs fills up");
    assert!(err.is_disk_full(), "{err:?}");
    // The write that ran out of room partly fitted: LMDB reports the short write as EIO,
    // which, with the disk full, reads "disk full".
    assert_eq!(
        err.to_string(),
        "disk full: the store's filesystem has no space left (a write stopped short: Input/output error (os error 5))"
    );
    // Take the last bytes too: still "disk full" (ENOSPC itself, or again a short write
    // over pages the file already had).
    {
        use std::io::Write;
        let mut filler = std::fs::File::create(fs.dir.path().join("filler")).unwrap();
        while filler.write_all(&[0u8; 4096]).is_ok() {}
    }
    let err = put(&store, blob(99, 256 << 10)).unwrap_err();
    assert!(err.is_disk_full(), "{err:?}");
    assert!(store.read(|r| r.object(&first_ref)).unwrap().is_some());
    assert!(store.read(log::head).unwrap().is_some());
}

/// Run by `another_process_growing_the_map_is_adopted` in a child process: open the store
/// named by `WORLDD_TEST_GROW` with a 64 MiB map and write 8 MiB into it.
#[test]
#[ignore = "a helper: another test runs it in a child process"]
fn grow_the_store_from_another_process() {
    let Ok(db) = std::env::var("WORLDD_TEST_GROW") else {
        return;
    };
    let store = Store::open(
        Path::new(&db),
        StoreOptions {
            ceiling: Some(64 * MIB),
            ..StoreOptions::default()
        },
    )
    .unwrap();
    for i in 0..8 {
        put(&store, blob(1000 + i, MIB as usize)).unwrap();
    }
}

fn grow_in_child(db: &Path) {
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "grow_the_store_from_another_process",
        ])
        .env("WORLDD_TEST_GROW", db)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
}

fn grown_refs() -> Vec<Ref> {
    (0..8).map(|i| blob(1000 + i, MIB as usize).hash).collect()
}

#[test]
fn another_process_growing_the_map_is_adopted() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let store = open(&db, 2 * MIB, 256 << 10);
    assert!(store.map_size() < 4 * MIB as usize);
    grow_in_child(&db);
    // The data now lies beyond this process's map: the next transaction adopts the new size.
    for r in grown_refs() {
        assert!(store.read(|rd| rd.object(&r)).unwrap().is_some(), "{r}");
    }
    assert!(
        store.map_size() >= 64 * MIB as usize,
        "{}",
        store.map_size()
    );
    put(&store, blob(1, 1024)).unwrap();
    // The ceiling is still this process's: it is far exceeded, so client work is refused.
    assert!(matches!(
        store.admits_client_work(),
        Err(Full::Ceiling { .. })
    ));
}

#[test]
fn a_remap_under_an_open_transaction_of_this_process_is_refused_not_deadlocked() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let store = open(&db, 2 * MIB, 256 << 10);
    let inner = store
        .read(|_outer| -> Result<_, StoreError> {
            grow_in_child(&db);
            // This thread still holds a transaction: LMDB forbids the remap, so it is refused.
            Ok(store.read(|rd| rd.object(&grown_refs()[0])))
        })
        .unwrap();
    let err = inner.unwrap_err();
    assert_eq!(err, StoreError::MapResized);
    assert!(err.to_string().starts_with(
        "another process grew the store beyond this process's map, and this process could not adopt"
    ));
    // Once it is closed, the next transaction adopts the new size.
    assert!(store
        .read(|rd| rd.object(&grown_refs()[0]))
        .unwrap()
        .is_some());
}
