//! The writer's batches, and how storage errors read.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use super::reply::{self, Submitted};
use super::writer::{Job, Write, Writer};
use super::*;
use crate::object::{Object, Ref};

type Reply = Submitted<(), StoreError>;

/// A queued write that stores `object`, then fails when `fail` is set; counts its runs.
fn job(object: Object, fail: bool, runs: Arc<AtomicUsize>, map_size: usize) -> (Job, Reply) {
    let (reply, pending) = reply::slot();
    let op = move |w: &mut WriteCtx<'_, '_>| -> Result<(), StoreError> {
        runs.fetch_add(1, Ordering::SeqCst);
        w.put_object(&object)?;
        if fail {
            return Err(StoreError::Corrupt("failed after writing".into()));
        }
        Ok(())
    };
    let job: Job = Box::new(Write {
        op,
        result: None,
        reply,
        map_size,
        followed: false,
        wrote: false,
    });
    (job, Submitted::queued(pending))
}

/// A writer over `inner`'s environment, run on the test's thread.
fn writer_of(inner: &Inner) -> Writer {
    Writer {
        env: inner.env.clone(),
        dbs: inner.dbs.clone(),
        state: inner.state.clone(),
        ended: crate::ref_tail::ended,
        map_size: inner.map_size,
        stats: inner.stats.clone(),
        map: inner.map.clone(),
        signal: inner.committed.clone(),
        waits: inner.waits.clone(),
        observer: inner.observer.clone(),
        follow_wait: inner.follow_wait.clone(),
        resident: inner.resident.clone(),
        log_tip: std::cell::Cell::new(
            super::found_log_tip(
                crate::log::tip,
                &inner.env,
                &inner.dbs,
                &inner.state,
                inner.map_size,
            )
            .unwrap(),
        ),
        tip_of: crate::log::tip,
        meta: inner.meta,
    }
}

fn run_batch(store: &Store, fails: &[bool]) -> (Vec<Result<(), StoreError>>, Vec<usize>, Vec<Ref>) {
    let inner = &store.inner;
    let objects: Vec<Object> = (0..fails.len())
        .map(|i| Object::new("world/test/v1", "t", format!("{fails:?} {i}").into_bytes()))
        .collect();
    let refs = objects.iter().map(|o| o.hash).collect();
    let runs: Vec<Arc<AtomicUsize>> = fails.iter().map(|_| Arc::default()).collect();
    let (mut batch, replies): (Vec<Job>, Vec<Reply>) = objects
        .into_iter()
        .zip(fails)
        .zip(&runs)
        .map(|((o, f), r)| job(o, *f, r.clone(), inner.map_size))
        .unzip();
    let writer = writer_of(inner);
    let outcome = writer.build_and_commit(&mut batch, Instant::now());
    assert!(matches!(outcome, Ok(true)), "{outcome:?}");
    for j in batch {
        j.answer(None);
    }
    let results = replies.into_iter().map(Submitted::wait).collect();
    let runs = runs.iter().map(|r| r.load(Ordering::SeqCst)).collect();
    (results, runs, refs)
}

/// Operations run straight in the batch's transaction; when one fails after writing, the
/// batch is built again with the others in nested transactions: its writes are gone, the
/// others' are committed, and nobody runs more than twice.
#[test]
fn an_operation_that_fails_after_writing_leaves_nothing_and_its_batch_commits_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();

    let (results, runs, _) = run_batch(&store, &[false, false, false]);
    assert!(results.iter().all(Result::is_ok));
    assert_eq!(runs, [1, 1, 1], "no failure: one run each");
    assert_eq!(store.stats().rebuilt_batches.load(Ordering::SeqCst), 0);

    let (results, runs, refs) = run_batch(&store, &[false, true, false, true, false]);
    let ok: Vec<bool> = results.iter().map(Result::is_ok).collect();
    assert_eq!(ok, [true, false, true, false, true]);
    assert_eq!(
        results[1].as_ref().unwrap_err().to_string(),
        "store is damaged: failed after writing"
    );
    // The first failure stops the straight pass; the rebuilt pass runs every other one
    // once more, nested, and the second failure undoes only its own writes.
    assert_eq!(runs, [2, 1, 1, 1, 1]);
    assert_eq!(store.stats().rebuilt_batches.load(Ordering::SeqCst), 1);
    let stored: Vec<bool> = refs
        .iter()
        .map(|r| store.read(|rd| rd.object(r)).unwrap().is_some())
        .collect();
    assert_eq!(stored, ok);
}

/// A batch built twice is still one durable commit: the commit signal is raised once,
/// the observer told once, and the writer's counters count it once.
#[test]
fn a_rebuilt_batch_raises_the_commit_signal_once_and_is_counted_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    let inner = &store.inner;
    let raised = Arc::new(AtomicUsize::new(0));
    let r = raised.clone();
    store.commit_signal().listen(move || {
        r.fetch_add(1, Ordering::SeqCst);
    });
    let observed = Arc::new(Mutex::new(Vec::new()));
    let o = observed.clone();
    store.observe_commits(Some(Box::new(move |ops, ok| {
        o.lock().unwrap().push((ops, ok));
    })));
    let before = |s: &WriterStats| {
        (
            s.batches.load(Ordering::SeqCst),
            s.operations.load(Ordering::SeqCst),
            s.rebuilt_batches.load(Ordering::SeqCst),
        )
    };
    let (batches, ops, rebuilt) = before(store.stats());

    // Three queued writes, the second failing after it wrote: one batch, drained by a
    // writer loop run here on the queue's closing.
    let (sender, receiver) = mpsc::channel();
    let mut replies = Vec::new();
    for (i, fail) in [false, true, false].into_iter().enumerate() {
        let o = Object::new("world/test/v1", "t", vec![i as u8; 3]);
        let (job, reply) = job(o, fail, Arc::default(), inner.map_size);
        sender.send(job).unwrap();
        replies.push(reply);
    }
    drop(sender);
    writer_of(inner).run(receiver);

    let ok: Vec<bool> = replies.into_iter().map(|r| r.wait().is_ok()).collect();
    assert_eq!(ok, [true, false, true]);
    assert_eq!(raised.load(Ordering::SeqCst), 1);
    assert_eq!(*observed.lock().unwrap(), [(3, true)]);
    assert_eq!(
        before(store.stats()),
        (batches + 1, ops + 3, rebuilt + 1),
        "batches, operations, rebuilt batches"
    );
}

/// A tmpfs of `bytes` mounted on a temporary directory, unmounted on drop: a disk that fills.
/// `None` where this process may not mount (not root), unless `WORLDD_TESTS_REQUIRE_MOUNTS` is
/// set (CI runs as root, where a skip would report a pass): then the test fails. (The
/// integration tests' harness has the same rule; a unit test cannot use it.)
struct SmallDisk(tempfile::TempDir);

impl SmallDisk {
    fn mount(bytes: u64) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().ok()?;
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        let required =
            std::env::var_os("WORLDD_TESTS_REQUIRE_MOUNTS").is_some_and(|v| !v.is_empty());
        assert!(
            mounted || !required,
            "mounting a tmpfs failed, and WORLDD_TESTS_REQUIRE_MOUNTS is set"
        );
        mounted.then_some(SmallDisk(dir))
    }

    /// Another program takes all but `left` bytes of the disk.
    fn fill_all_but(&self, left: u64) {
        use std::io::Write as _;
        let free = crate::capacity::disk_free(self.0.path()).unwrap();
        let mut filler = std::fs::File::create(self.0.path().join("filler")).unwrap();
        let chunk = vec![7u8; 64 << 10];
        let mut more = free.saturating_sub(left);
        while more > 0 {
            let n = more.min(chunk.len() as u64) as usize;
            if filler.write_all(&chunk[..n]).is_err() {
                break;
            }
            more -= n as u64;
        }
        let _ = filler.sync_all();
    }

    /// A store on this disk, its ceiling far above it and no reserve: the filesystem is what
    /// runs out.
    fn store(&self) -> Store {
        const MIB: u64 = 1 << 20;
        Store::open(
            &self.0.path().join("db"),
            StoreOptions {
                ceiling: Some(64 * MIB),
                reserve: Some(0),
                create: true,
                ..StoreOptions::default()
            },
        )
        .unwrap()
    }
}

/// `objects`, each a queued write, built into one group commit by a writer over `store`;
/// whether each was stored, as answered and as read back.
fn one_group_commit(
    store: &Store,
    objects: Vec<Object>,
) -> (Vec<Result<(), StoreError>>, Vec<bool>) {
    let inner = &store.inner;
    let refs: Vec<Ref> = objects.iter().map(|o| o.hash).collect();
    let (mut batch, replies): (Vec<Job>, Vec<Reply>) = objects
        .into_iter()
        .map(|o| job(o, false, Arc::default(), inner.map_size))
        .unzip();
    let outcome = writer_of(inner).build_and_commit(&mut batch, Instant::now());
    let commit_error = outcome.as_ref().err().cloned();
    for j in batch {
        j.answer(commit_error.as_ref());
    }
    let results = replies.into_iter().map(Submitted::wait).collect();
    let stored = refs
        .iter()
        .map(|r| store.read(|rd| rd.object(r)).unwrap().is_some())
        .collect();
    (results, stored)
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.0.path())
            .status();
    }
}

/// One episode's large write that meets a full disk at its group commit fails alone: the
/// small operations batched with it (other episodes' reads, whose effects ran) are committed
/// one by one after the batch's commit failed for room, and only the large one holds the
/// error.
#[test]
fn a_large_write_that_meets_a_full_disk_at_its_group_commit_does_not_fail_the_small_ones_batched_with_it(
) {
    const MIB: u64 = 1 << 20;
    let Some(disk) = SmallDisk::mount(4 * MIB) else {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    };
    let store = disk.store();
    disk.fill_all_but(256 << 10);
    // Fifteen small reads of other episodes, and one large write second among them.
    let mut objects: Vec<Object> = (0..15)
        .map(|i| Object::new("world/test/v1", "t", format!("read {i}").into_bytes()))
        .collect();
    objects.insert(
        1,
        Object::new("world/test/v1", "t", vec![1u8; MIB as usize]),
    );
    let (results, stored) = one_group_commit(&store, objects);
    let ok: Vec<bool> = results.iter().map(Result::is_ok).collect();
    let mut expected = [true; 16];
    expected[1] = false;
    assert_eq!(ok, expected, "{results:?}");
    assert!(
        results[1].as_ref().unwrap_err().is_disk_full(),
        "{results:?}"
    );
    assert_eq!(stored, ok);
    let stats = store.stats();
    assert_eq!(stats.split_batches.load(Ordering::SeqCst), 1);
    // Halves of 8, of 4, of 2, of 1, each failing first half split again: 8 commits, not 16.
    assert_eq!(stats.split_commits.load(Ordering::SeqCst), 8);
}

/// A disk that takes nothing more: the split stops at its first two halves instead of paying a
/// commit and a sync for every operation, and every operation holds the room error, as the
/// whole batch did.
#[test]
fn a_group_commit_on_a_disk_that_takes_nothing_is_split_once_not_per_operation() {
    const MIB: u64 = 1 << 20;
    let Some(disk) = SmallDisk::mount(4 * MIB) else {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    };
    let store = disk.store();
    disk.fill_all_but(0);
    let objects = (0..64)
        .map(|i| Object::new("world/test/v1", "t", vec![i as u8; 64 << 10]))
        .collect();
    let (results, stored) = one_group_commit(&store, objects);
    assert!(
        results
            .iter()
            .all(|r| r.as_ref().is_err_and(StoreError::is_disk_full)),
        "{results:?}"
    );
    assert!(stored.iter().all(|s| !s));
    let stats = store.stats();
    assert_eq!(stats.split_batches.load(Ordering::SeqCst), 1);
    assert_eq!(stats.split_commits.load(Ordering::SeqCst), 2);
}

/// `n` small objects, `"{what} 0"`, `"{what} 1"`, …, and their refs.
fn objects_named(what: &str, n: usize) -> (Vec<Object>, Vec<Ref>) {
    let objects: Vec<Object> = (0..n)
        .map(|i| Object::new("world/test/v1", "t", format!("{what} {i}").into_bytes()))
        .collect();
    let refs = objects.iter().map(|o| o.hash).collect();
    (objects, refs)
}

/// `objects`, each a queued write (the `i`th failing on its own after writing when `fails[i]`,
/// none past the end of `fails`), drained as one batch by a writer loop run here (its syncing
/// thread included); each one's answer, and how many times the commit signal was raised.
fn one_batch_through_the_writer(
    store: &Store,
    objects: Vec<Object>,
    fails: &[bool],
) -> (Vec<Result<(), StoreError>>, usize) {
    let inner = &store.inner;
    let raised = Arc::new(AtomicUsize::new(0));
    let r = raised.clone();
    store.commit_signal().listen(move || {
        r.fetch_add(1, Ordering::SeqCst);
    });
    let (sender, receiver) = mpsc::channel();
    let replies: Vec<Reply> = objects
        .into_iter()
        .enumerate()
        .map(|(i, o)| {
            let fail = fails.get(i).copied().unwrap_or(false);
            let (job, reply) = job(o, fail, Arc::default(), inner.map_size);
            sender.send(job).unwrap();
            reply
        })
        .collect();
    drop(sender);
    writer_of(inner).run(receiver);
    let results = replies.into_iter().map(Submitted::wait).collect();
    (results, raised.load(Ordering::SeqCst))
}

/// A split part that failed for something other than room (an I/O error at its commit) was
/// counted as fitted: a batch none of whose parts committed was handed on as committed, its
/// sync raised the commit signal and cleared the store's failing state ("the store's writes
/// succeed again", health `ok`) although every operation had failed. Such a part now holds
/// its error, stops the split, and fits nothing.
#[test]
fn a_split_part_that_fails_for_other_than_room_is_not_taken_for_one_that_fitted() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    let stats = store.stats();
    let syncs = stats.syncs.load(Ordering::SeqCst);
    let eio = StoreError::Io("Input/output error (os error 5)".into());
    let full = || StoreError::DiskFull("No space left on device (os error 28)".into());
    let stored = |refs: &[Ref]| -> Vec<bool> {
        refs.iter()
            .map(|r| store.read(|rd| rd.object(r)).unwrap().is_some())
            .collect()
    };

    // The batch fails for room; its first half then fails for I/O at its commit, and the
    // second commits: only the committed half succeeds, and the other is not split again.
    stats.faults.fail_commit(full());
    stats.faults.fail_commit(eio.clone());
    let (objects, refs) = objects_named("half", 4);
    let (results, raised) = one_batch_through_the_writer(&store, objects, &[]);
    assert_eq!(
        results,
        [Err(eio.clone()), Err(eio.clone()), Ok(()), Ok(())]
    );
    assert_eq!(raised, 1);
    assert!(!store.writes_failing(), "a part was made durable");
    assert_eq!(stats.syncs.load(Ordering::SeqCst), syncs + 1);
    assert_eq!(stats.split_commits.load(Ordering::SeqCst), 2);
    assert_eq!(stored(&refs), [false, false, true, true]);

    // The batch fails for room, then both halves for I/O: nothing committed.
    let txn = store.inner.env.info().last_txn_id;
    stats.faults.fail_commit(full());
    stats.faults.fail_commit(eio.clone());
    stats.faults.fail_commit(eio.clone());
    let (objects, refs) = objects_named("split", 4);
    let (results, raised) = one_batch_through_the_writer(&store, objects, &[]);
    assert_eq!(results, vec![Err(eio); 4]);
    assert!(
        store.writes_failing(),
        "no part committed: the writes still fail"
    );
    assert_eq!(raised, 0, "nothing was made durable");
    assert_eq!(
        stats.syncs.load(Ordering::SeqCst),
        syncs + 1,
        "no sync credited"
    );
    assert_eq!(stats.split_batches.load(Ordering::SeqCst), 2);
    assert_eq!(
        stats.split_commits.load(Ordering::SeqCst),
        4,
        "not split further"
    );
    assert_eq!(store.inner.env.info().last_txn_id, txn, "nothing committed");
    assert_eq!(stored(&refs), [false; 4]);
}

/// A batch whose commit succeeded and whose sync failed was answered with the sync's error,
/// which reads as "nothing was written" although its rows were committed (readers see them,
/// and the next sync makes them durable). It is answered `NotDurable`, naming the sync's
/// error; an operation that failed on its own keeps its own error; the store says its writes
/// fail until a sync succeeds, and the rows are there once it has.
#[test]
fn a_commit_whose_sync_fails_is_answered_committed_but_not_durable() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let store = Store::create(&db).unwrap();
    let eio = StoreError::Io("Input/output error (os error 5)".into());
    store.stats().faults.fail_sync(eio.clone());
    let (objects, refs) = objects_named("unsynced", 3);
    let (results, _) = one_batch_through_the_writer(&store, objects, &[false, true, false]);
    let not_durable = StoreError::NotDurable(Box::new(eio.clone()));
    assert_eq!(
        results,
        [
            Err(not_durable.clone()),
            Err(StoreError::Corrupt("failed after writing".into())),
            Err(not_durable.clone()),
        ]
    );
    assert!(not_durable.committed_not_durable());
    assert!(!eio.committed_not_durable());
    assert_eq!(
        not_durable.to_string(),
        "the write was committed, but the store could not make it durable (store I/O error: Input/output error (os error 5)); a later commit synced makes it durable"
    );
    assert!(store.writes_failing());
    let stored = |store: &Store| -> Vec<bool> {
        refs.iter()
            .map(|r| store.read(|rd| rd.object(r)).unwrap().is_some())
            .collect()
    };
    assert_eq!(
        stored(&store),
        [true, false, true],
        "committed: readers see them"
    );
    // The next write's sync succeeds: it makes the earlier commit durable too.
    store.write(|_| Ok::<(), StoreError>(())).unwrap();
    assert!(!store.writes_failing());
    drop(store);
    let store = Store::open(&db, StoreOptions::default()).unwrap();
    assert_eq!(stored(&store), [true, false, true]);
}

/// After a failed sync, a write with nothing in it committed no meta page (LMDB skips a
/// transaction without changes), so the next sync that succeeded "made durable" a commit whose
/// own meta page the failed fsync may have left marked clean but unwritten, and raised the
/// watermark past it. The writer's next batch writes a marker: its commit writes a fresh meta
/// page, and only that page's sync is credited. While it fails too, the wait is told so.
#[test]
fn after_a_failed_sync_an_empty_wait_is_credited_only_by_a_fresh_meta_page_synced() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    let eio = StoreError::Io("Input/output error (os error 5)".into());
    let not_durable = StoreError::NotDurable(Box::new(eio.clone()));
    let object = Object::new("world/test/v1", "t", b"unsynced".to_vec());
    store.stats().faults.fail_sync(eio.clone());
    let put = object.clone();
    assert_eq!(
        store.write(move |w| w.put_object(&put).map(|_| ())),
        Err(not_durable.clone())
    );
    let failed = store.inner.env.info().last_txn_id;
    assert!(store.commit_signal().durable() < failed);
    // The wait's batch has the marker; its sync fails as well: not credited, and told.
    store.stats().faults.fail_sync(eio.clone());
    let wait = store.until_durable(failed).expect("not durable: it waits");
    assert_eq!(wait.wait(), Err(not_durable.clone()));
    assert_eq!(store.inner.env.info().last_txn_id, failed + 1, "the marker");
    assert!(store.commit_signal().durable() < failed);
    // The next one's marker commits a fresh meta page whose sync succeeds: credited.
    let wait = store.until_durable(failed).expect("not durable: it waits");
    assert_eq!(wait.wait(), Ok(()));
    let marked = store.inner.env.info().last_txn_id;
    assert_eq!(marked, failed + 2, "a fresh meta page was written");
    assert_eq!(store.commit_signal().durable(), marked);
    assert!(store.until_durable(failed).is_none());
    // No marker is owed any more: an empty write commits nothing.
    store.write(|_| Ok::<(), StoreError>(())).unwrap();
    assert_eq!(store.inner.env.info().last_txn_id, marked);
    assert!(store.read(|r| r.object(&object.hash)).unwrap().is_some());
}

/// A sync that succeeds for commits no newer than one whose sync failed proves nothing: it is
/// not credited, and its waiters hear the failure.
#[test]
fn a_sync_that_follows_no_fresh_meta_page_is_not_credited() {
    use super::durable_waits::DurableWaits;
    let waits = DurableWaits::default();
    assert_eq!(waits.unproven(7), None);
    let eio = StoreError::Io("Input/output error (os error 5)".into());
    waits.failed(7, &eio);
    assert_eq!(waits.unproven(7), Some(eio.clone()));
    assert_eq!(waits.unproven(6), Some(eio));
    assert_eq!(waits.unproven(8), None);
}

#[test]
fn enospc_and_edquot_read_disk_full_other_io_errors_do_not() {
    let io = |code| heed::Error::Io(std::io::Error::from_raw_os_error(code));
    assert_eq!(
        StoreError::from_heed(io(libc::ENOSPC), 0).to_string(),
        "disk full: the store's filesystem has no space left (No space left on device (os error 28))"
    );
    assert!(StoreError::from_heed(io(libc::EDQUOT), 0).is_disk_full());
    assert_eq!(
        StoreError::from_heed(io(libc::EACCES), 0),
        StoreError::Io("Permission denied (os error 13)".into())
    );
    assert!(StoreError::from_io(std::io::Error::from_raw_os_error(libc::ENOSPC)).is_disk_full());
    assert_eq!(
        StoreError::from_heed(heed::Error::Mdb(heed::MdbError::MapResized), 0),
        StoreError::MapResized
    );
}

/// A store path that names a file (or lies under one) is refused with what it is, and the
/// path, before anything is created.
#[test]
fn a_store_path_that_is_a_file_is_refused_as_not_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "not a store").unwrap();
    let e = Store::create(&file).unwrap_err();
    assert_eq!(e, StoreError::NotADirectory(file.clone()));
    assert_eq!(
        e.to_string(),
        format!("world store {} is not a directory (a store is a directory holding data.mdb and lock.mdb)", file.display())
    );
    let under = file.join("db");
    assert_eq!(
        Store::create(&under).unwrap_err(),
        StoreError::Io(format!(
            "{}: Not a directory (os error 20)",
            under.display()
        ))
    );
    assert_eq!(std::fs::read(&file).unwrap(), b"not a store");
}

/// A data file shorter than its last commit says (a copy that stopped short) is refused by
/// its length before any page is read, and left as it is: LMDB would read past its end through
/// the map, which is a SIGBUS. The whole file still opens.
#[test]
fn a_store_cut_short_is_refused_as_damaged_and_never_read_past_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let (needed, page, kept) = {
        let store = Store::create(&db).unwrap();
        let objects: Vec<Object> = (0..300)
            .map(|i| Object::new("world/test/v1", "t", vec![i as u8; 1000 + i]))
            .collect();
        let kept = objects[299].hash;
        store
            .write(move |w| {
                for o in &objects {
                    w.put_object(o)?;
                }
                Ok::<_, StoreError>(())
            })
            .unwrap();
        let page = store.inner.env.unnamed_database_stat().page_size as u64;
        let needed = (store.inner.env.info().last_page_number as u64 + 1) * page;
        (needed, page, kept)
    };
    let data = db.join("data.mdb");
    let whole = std::fs::read(&data).unwrap();
    assert!(needed > 16 * page, "{needed}");
    for len in [
        2 * page,
        needed / 2 / page * page,
        needed - page,
        needed - 1,
    ] {
        std::fs::write(&data, &whole[..len as usize]).unwrap();
        let e = Store::open(&db, StoreOptions::default()).unwrap_err();
        assert_eq!(
            e,
            StoreError::Truncated {
                dir: db.clone(),
                len,
                needed
            }
        );
        assert_eq!(std::fs::metadata(&data).unwrap().len(), len);
    }
    assert_eq!(
        Store::open(&db, StoreOptions::default()).unwrap_err().to_string(),
        format!(
            "world store {} is damaged: its data.mdb holds {} bytes, and its last commit names pages up to byte {needed} (a copy or a disk that stopped short?); restore the directory from a backup",
            db.display(),
            needed - 1
        )
    );
    std::fs::write(&data, &whole).unwrap();
    let store = Store::open(&db, StoreOptions::default()).unwrap();
    assert!(store.read(|r| r.object(&kept)).unwrap().is_some());
}

/// An empty data file holds no store: a command that opens an existing store refuses it
/// without writing one there; only a command that creates stores makes one in its place.
#[test]
fn an_empty_data_file_is_no_store_and_only_creating_one_writes_there() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    std::fs::create_dir(&db).unwrap();
    std::fs::write(db.join("data.mdb"), b"").unwrap();
    let e = Store::open(&db, StoreOptions::default()).unwrap_err();
    assert_eq!(e, StoreError::Empty(db.clone()));
    assert_eq!(
        e.to_string(),
        format!("world store {} has an empty data.mdb: no store was ever written there, or the file was emptied; refusing to make a new store in its place (worldd serve makes one)", db.display())
    );
    assert_eq!(std::fs::metadata(db.join("data.mdb")).unwrap().len(), 0);
    drop(Store::create(&db).unwrap());
    assert!(std::fs::metadata(db.join("data.mdb")).unwrap().len() > 0);
    Store::open(&db, StoreOptions::default()).unwrap();
}

/// A store opened read-only (its filesystem is: a snapshot, a backup medium) reads as any
/// other, refuses every write before it is queued, and has nothing to wait for to be durable;
/// an older schema, which it could not upgrade, is refused untouched.
#[test]
fn a_store_opened_read_only_reads_and_refuses_every_write() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let kept = Object::new("world/test/v1", "t", b"kept".to_vec());
    {
        let store = Store::create(&db).unwrap();
        let object = kept.clone();
        store
            .write(move |w| w.put_object(&object).map(drop))
            .unwrap();
    }
    let read_only = StoreOptions {
        read_only: true,
        ..StoreOptions::default()
    };
    let bytes = std::fs::read(db.join("data.mdb")).unwrap();
    {
        let store = Store::open(&db, read_only.clone()).unwrap();
        assert!(store.read(|r| r.object(&kept.hash)).unwrap().is_some());
        let other = Object::new("world/test/v1", "t", b"other".to_vec());
        let e = store
            .write(move |w| w.put_object(&other).map(drop))
            .unwrap_err();
        assert_eq!(e, StoreError::ReadOnly(db.clone()));
        assert_eq!(
            e.to_string(),
            format!("world store {} is open read-only (it is on a read-only filesystem); this command writes, so copy the directory to a writable disk first", db.display())
        );
        store.sync_seen().unwrap();
    }
    assert_eq!(std::fs::read(db.join("data.mdb")).unwrap(), bytes);

    {
        // SAFETY: no other handle on `db` is open in this process now.
        let env = unsafe { heed::EnvOpenOptions::new().max_dbs(32).open(&db).unwrap() };
        let meta: heed::Database<'static, Str, Bytes> = env
            .create_databases_and_commit(env.write_txn().unwrap(), |dbo, wtxn| {
                dbo.create_database(wtxn, Some(META_TABLE))
                    .map(CommitOrAbort::<_, ()>::Commit)
            })
            .unwrap()
            .unwrap_commit();
        let mut wtxn = env.write_txn().unwrap();
        meta.put(&mut wtxn, VERSION_KEY, b"4").unwrap();
        wtxn.commit().unwrap();
        env.prepare_for_closing().wait();
    }
    let bytes = std::fs::read(db.join("data.mdb")).unwrap();
    assert_eq!(
        Store::open(&db, read_only).unwrap_err(),
        StoreError::ReadOnlyUpgrade {
            dir: db.clone(),
            found: "4".into(),
            expected: crate::schema::SCHEMA_VERSION,
        }
    );
    assert_eq!(std::fs::read(db.join("data.mdb")).unwrap(), bytes);
}

/// A write that stopped short (EIO) is a full disk only when the filesystem has (almost) no
/// room left; with room, or when its room cannot be read, it is an I/O fault.
#[test]
fn a_short_write_is_disk_full_only_on_a_disk_without_room() {
    let eio = || heed::Error::Io(std::io::Error::from_raw_os_error(libc::EIO));
    assert_eq!(
        map::write_error(eio(), 0, || Some(4096)).to_string(),
        "disk full: the store's filesystem has no space left (a write stopped short: Input/output error (os error 5))"
    );
    assert_eq!(
        map::write_error(eio(), 0, || Some(1 << 30)),
        StoreError::Io("Input/output error (os error 5)".into())
    );
    assert_eq!(
        map::write_error(eio(), 0, || None),
        StoreError::Io("Input/output error (os error 5)".into())
    );
    let enospc = heed::Error::Io(std::io::Error::from_raw_os_error(libc::ENOSPC));
    assert!(map::write_error(enospc, 0, || unreachable!("asked only for EIO")).is_disk_full());
}

/// A daemon's worth of concurrent readers (one per tokio blocking thread, 512, and more) fit;
/// one past the slots is an error of its own, and a slot comes back when its reader ends.
#[test]
fn read_transactions_fit_until_the_reader_slots_are_full() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    let slots = MAX_READERS as usize;
    // tokio's default blocking pool (512 threads) and its workers all reading at once, with
    // room left for the operator's own processes.
    assert!(slots >= 512 + 256, "{slots}");
    let (ready, release) = (
        Arc::new(std::sync::Barrier::new(slots + 1)),
        Arc::new(std::sync::Barrier::new(slots + 1)),
    );
    let readers: Vec<_> = (0..slots)
        .map(|_| {
            let (store, ready, release) = (store.clone(), ready.clone(), release.clone());
            std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    store.read(|_| {
                        ready.wait();
                        release.wait();
                        Ok::<_, StoreError>(())
                    })
                })
                .unwrap()
        })
        .collect();
    ready.wait();
    let full = store.read(|_| Ok::<_, StoreError>(()));
    assert!(
        matches!(&full, Err(StoreError::Lmdb(m)) if m.contains("MDB_READERS_FULL")),
        "{full:?}"
    );
    release.wait();
    for r in readers {
        r.join().unwrap().unwrap();
    }
    store.read(|_| Ok::<_, StoreError>(())).unwrap();
}

/// A write the tests below queue.
type TestOp = Box<dyn FnMut(&mut WriteCtx<'_, '_>) -> Result<(), StoreError> + Send>;

/// Hold the writer with one write until `ops` are queued behind it, then let it go: the first
/// group commit after it takes as many of `ops` as one may. Their results, in order.
fn queued_behind_a_held_write(store: &Store, ops: Vec<TestOp>) -> Vec<Result<(), StoreError>> {
    let (release, held) = std::sync::mpsc::channel::<()>();
    let (started, running) = std::sync::mpsc::channel::<()>();
    let (held, started) = (std::sync::Mutex::new(held), std::sync::Mutex::new(started));
    let first = store.submit(move |_w: &mut WriteCtx<'_, '_>| -> Result<(), StoreError> {
        let _ = started.lock().unwrap().send(());
        let _ = held.lock().unwrap().recv();
        Ok(())
    });
    running.recv().unwrap();
    let queued: Vec<_> = ops
        .into_iter()
        .map(|mut op| store.submit(move |w: &mut WriteCtx<'_, '_>| op(w)))
        .collect();
    release.send(()).unwrap();
    first.wait().unwrap();
    queued.into_iter().map(Submitted::wait).collect()
}

/// However many writes queue up while the writer is busy, one group commit takes at most
/// `MAX_BATCH` (256) of them; the rest go into the next commits, in order, and every caller is
/// answered whichever thread answers its batch.
#[test]
fn a_group_commit_takes_at_most_256_operations() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    let sizes = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = sizes.clone();
    store.observe_commits(Some(Box::new(move |ops, ok| {
        assert!(ok);
        seen.lock().unwrap().push(ops);
    })));
    let ops = (0..600)
        .map(|i| {
            let object = Object::new("world/test/v1", "t", format!("queued {i}").into_bytes());
            Box::new(move |w: &mut WriteCtx<'_, '_>| w.put_object(&object)) as TestOp
        })
        .collect();
    let syncs_before = store.stats().syncs.load(Ordering::SeqCst);
    let results = queued_behind_a_held_write(&store, ops);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    store.observe_commits(None);
    assert_eq!(*sizes.lock().unwrap(), [1, 256, 256, 88]);
    // Batches committed while a sync ran shared the next one.
    let syncs = store.stats().syncs.load(Ordering::SeqCst) - syncs_before;
    assert!((1..=4).contains(&syncs), "{syncs} syncs for 4 batches");
}

/// An operation that panics fails alone, whichever pass of its batch it panics in: its writes
/// are undone, the rest of its batch commits, and the writer thread goes on serving writes.
#[test]
fn an_operation_that_panics_fails_alone_and_the_writer_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    let object = |tag: &str| Object::new("world/test/v1", "t", tag.as_bytes().to_vec());
    let storing = |o: Object, fail: Option<&'static str>| {
        Box::new(move |w: &mut WriteCtx<'_, '_>| -> Result<(), StoreError> {
            w.put_object(&o)?;
            match fail {
                Some("panic") => panic!("boom after writing {}", o.hash),
                Some(_) => Err(StoreError::Corrupt("failed after writing".into())),
                None => Ok(()),
            }
        }) as TestOp
    };
    let stored = |o: &Object| store.read(|r| r.has_object(&o.hash)).unwrap();

    // Panicking in the batch's own transaction: the batch is built again without it.
    let (a, p, c) = (object("a"), object("p"), object("c"));
    let results = queued_behind_a_held_write(
        &store,
        vec![
            storing(a.clone(), None),
            storing(p.clone(), Some("panic")),
            storing(c.clone(), None),
        ],
    );
    assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
    assert_eq!(
        results[1],
        Err(StoreError::OperationPanicked(format!(
            "boom after writing {}",
            p.hash
        )))
    );
    assert!(stored(&a) && stored(&c) && !stored(&p));
    assert_eq!(store.stats().rebuilt_batches.load(Ordering::SeqCst), 1);

    // Panicking in the rebuilt pass, in a nested transaction, after another operation failed.
    let (a, f, p, c) = (object("a2"), object("f2"), object("p2"), object("c2"));
    let results = queued_behind_a_held_write(
        &store,
        vec![
            storing(a.clone(), None),
            storing(f.clone(), Some("fail")),
            storing(p.clone(), Some("panic")),
            storing(c.clone(), None),
        ],
    );
    assert!(results[0].is_ok() && results[3].is_ok(), "{results:?}");
    assert_eq!(
        results[1],
        Err(StoreError::Corrupt("failed after writing".into()))
    );
    assert!(
        matches!(&results[2], Err(StoreError::OperationPanicked(m)) if m.contains("boom")),
        "{results:?}"
    );
    assert!(stored(&a) && stored(&c) && !stored(&f) && !stored(&p));
    assert_eq!(store.stats().rebuilt_batches.load(Ordering::SeqCst), 2);

    // The writer is still there.
    let later = object("later");
    let o = later.clone();
    store.write(move |w| w.put_object(&o)).unwrap();
    assert!(stored(&later));
}

/// A commit leaves its meta page unsynced (`MDB_NOMETASYNC`); the syncing thread syncs the
/// file before the caller hears of it: one sync for each write made alone.
#[test]
fn a_write_made_alone_is_synced_before_its_caller_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    let syncs = || store.stats().syncs.load(Ordering::SeqCst);
    for i in 0..3 {
        let before = syncs();
        let o = Object::new("world/test/v1", "t", format!("alone {i}").into_bytes());
        store.write(move |w| w.put_object(&o)).unwrap();
        assert_eq!(syncs(), before + 1, "write {i}");
    }
}

/// However many callers write at once, each is answered only once a sync that began after its
/// commit has made it durable: the durable watermark has passed its transaction by then.
#[test]
fn every_caller_is_answered_only_once_its_commit_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    std::thread::scope(|scope| {
        for t in 0..8 {
            let store = &store;
            scope.spawn(move || {
                for i in 0..50 {
                    let o = Object::new("world/test/v1", "t", format!("{t} {i}").into_bytes());
                    let txn_id = store
                        .write(move |w| {
                            w.put_object(&o)?;
                            Ok::<_, StoreError>(w.txn.id())
                        })
                        .unwrap();
                    let durable = store.commit_signal().durable();
                    assert!(
                        durable >= txn_id,
                        "answered at {durable}, committed as {txn_id}"
                    );
                }
            });
        }
    });
    let stats = store.stats();
    let (syncs, batches) = (
        stats.syncs.load(Ordering::SeqCst),
        stats.batches.load(Ordering::SeqCst),
    );
    assert!(
        syncs >= 1 && syncs <= batches,
        "{syncs} syncs, {batches} batches"
    );
}

/// The writer stops after each commit, before it hands the batch to be synced, until `go`
/// says on; `committed` hears of each stop.
fn hold_after_each_commit(store: &Store) -> (mpsc::Receiver<()>, mpsc::Sender<()>) {
    let (entered, committed) = mpsc::channel::<()>();
    let (go, gate) = mpsc::channel::<()>();
    let gate = Mutex::new(gate);
    store.observe_commits(Some(Box::new(move |_, _| {
        let _ = entered.send(());
        let _ = gate.lock().unwrap().recv();
    })));
    (committed, go)
}

/// A read can see a commit before it is durable (its meta page waits for the syncing
/// thread); `until_durable` says so and answers once the sync the commit was handed to is
/// done, with no commit of its own.
#[test]
fn a_snapshot_that_sees_a_commit_not_yet_durable_is_told_when_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    let (committed, go) = hold_after_each_commit(&store);
    let o = Object::new("world/test/v1", "t", b"seen early".to_vec());
    let put = o.clone();
    let write = store.submit(move |w: &mut WriteCtx<'_, '_>| w.put_object(&put));
    committed.recv().unwrap();

    let (seen, snapshot) = store
        .read(|r| Ok::<_, StoreError>((r.has_object(&o.hash)?, r.snapshot())))
        .unwrap();
    assert!(seen, "the commit is visible");
    assert!(
        store.commit_signal().durable() < snapshot,
        "but not durable"
    );
    let durable = store
        .until_durable(snapshot)
        .expect("a snapshot past the durable one waits");
    let batches = store.stats().batches.load(Ordering::SeqCst);
    let syncs = store.stats().syncs.load(Ordering::SeqCst);

    // One go, for the write's own commit: the wait rides on its sync. (A wait that queued a
    // write of its own would be held at the gate a second time.)
    let (answered, answer) = mpsc::channel();
    std::thread::spawn(move || answered.send(durable.wait()));
    go.send(()).unwrap();
    answer
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("answered by the sync of the commit it saw")
        .unwrap();
    write.wait().unwrap();
    assert!(store.commit_signal().durable() >= snapshot);
    assert!(store.until_durable(snapshot).is_none());
    assert_eq!(
        store.stats().batches.load(Ordering::SeqCst),
        batches,
        "the wait added no commit"
    );
    assert_eq!(store.stats().syncs.load(Ordering::SeqCst), syncs + 1);
    assert!(
        committed.try_recv().is_err(),
        "no other commit reached the writer"
    );
}

/// Lengthen `store`'s follow wait (a race becomes certain).
fn follow_wait(store: &Store, wait: std::time::Duration) {
    store
        .inner
        .follow_wait
        .store(wait.as_nanos() as u64, Ordering::Relaxed);
}

/// A read's intent is followed by its call's entry once the handler has run: the writer,
/// finding nothing but the intent queued, waits for the entry, and both share one group commit.
/// The entry comes 50 ms after the intent, when the writer has long taken the intent alone.
#[test]
fn a_followed_operation_and_what_follows_it_share_one_commit() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    follow_wait(&store, std::time::Duration::from_secs(10));
    let batches = store.stats().batches.load(Ordering::SeqCst);
    let (a, b) = (
        Object::new("world/test/v1", "t", b"the intent".to_vec()),
        Object::new("world/test/v1", "t", b"the entry".to_vec()),
    );
    let intent = store.submit_followed(move |w: &mut WriteCtx<'_, '_>| w.put_object(&a));
    std::thread::sleep(std::time::Duration::from_millis(50));
    let entry = store.submit(move |w: &mut WriteCtx<'_, '_>| w.put_object(&b));
    entry.wait().unwrap();
    intent.wait().unwrap();
    assert_eq!(
        store.stats().batches.load(Ordering::SeqCst),
        batches + 1,
        "one commit for both"
    );
}

/// A followed operation whose follower never comes (a read whose handler hangs) is committed
/// alone once the wait is over, and not before.
#[test]
fn a_followed_operation_nothing_follows_is_committed_when_the_wait_is_over() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    let wait = std::time::Duration::from_millis(200);
    follow_wait(&store, wait);
    let batches = store.stats().batches.load(Ordering::SeqCst);
    let o = Object::new("world/test/v1", "t", b"alone".to_vec());
    let started = Instant::now();
    store
        .submit_followed(move |w: &mut WriteCtx<'_, '_>| w.put_object(&o))
        .wait()
        .unwrap();
    assert!(
        started.elapsed() >= wait,
        "committed before the wait was over: {:?}",
        started.elapsed()
    );
    assert_eq!(store.stats().batches.load(Ordering::SeqCst), batches + 1);
}

/// Anything not followed ends the wait at once: a plain write queued behind a followed one is
/// answered without waiting out a 10 s follow wait.
#[test]
fn an_operation_not_followed_ends_the_wait() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    follow_wait(&store, std::time::Duration::from_secs(10));
    let o = Object::new("world/test/v1", "t", b"followed".to_vec());
    let intent = store.submit_followed(move |w: &mut WriteCtx<'_, '_>| w.put_object(&o));
    std::thread::sleep(std::time::Duration::from_millis(50));
    let (answered, answer) = mpsc::channel();
    let plain = store.clone();
    std::thread::spawn(move || {
        let p = Object::new("world/test/v1", "t", b"plain".to_vec());
        answered.send(plain.write(move |w: &mut WriteCtx<'_, '_>| w.put_object(&p)))
    });
    answer
        .recv_timeout(std::time::Duration::from_secs(5))
        .expect("the plain write ended the wait")
        .unwrap();
    intent.wait().unwrap();
}

/// A tool that prints what it read (`why --db`, `doctor`) first waits, with `sync_seen`, until
/// everything it may have seen is durable: here a commit it saw while the writer held it before
/// its sync.
#[test]
fn sync_seen_returns_only_once_what_was_seen_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    let (committed, go) = hold_after_each_commit(&store);
    let o = Object::new("world/test/v1", "t", b"seen before it is durable".to_vec());
    let put = o.clone();
    let write = store.submit(move |w: &mut WriteCtx<'_, '_>| w.put_object(&put));
    committed.recv().unwrap();
    assert!(store.read(|r| r.has_object(&o.hash)).unwrap(), "seen");

    let (answered, answer) = mpsc::channel();
    let seer = store.clone();
    std::thread::spawn(move || answered.send(seer.sync_seen()));
    assert!(
        answer
            .recv_timeout(std::time::Duration::from_millis(300))
            .is_err(),
        "sync_seen returned while what it saw was not durable"
    );
    go.send(()).unwrap();
    answer
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("answered by the commit's sync")
        .unwrap();
    write.wait().unwrap();
    drop(go);
    // Nothing unsynced to see: it returns at once.
    store.sync_seen().unwrap();
}

/// A snapshot newer than anything this store's writer committed is another process's commit:
/// nothing here would sync it, so the wait is a commit (and sync) of its own.
#[test]
fn a_snapshot_past_this_writers_commits_is_waited_for_with_a_commit_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    let snapshot = store.read(|r| Ok::<_, StoreError>(r.snapshot())).unwrap();
    let batches = store.stats().batches.load(Ordering::SeqCst);
    store
        .until_durable(snapshot + 1)
        .expect("not known to be durable")
        .wait()
        .unwrap();
    // (Nothing is written, so LMDB makes no new transaction: the sync covers whatever the
    // other process committed, which is the store's newest transaction by then.)
    assert_eq!(store.stats().batches.load(Ordering::SeqCst), batches + 1);
}

/// Many readers waiting on the same sync are all answered by it, and each only once the
/// watermark has passed its snapshot.
#[test]
fn every_reader_waiting_on_a_sync_is_answered_once_it_is_done() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    let (committed, go) = hold_after_each_commit(&store);
    let write = store.submit(|w: &mut WriteCtx<'_, '_>| {
        w.put_object(&Object::new("world/test/v1", "t", b"many".to_vec()))
    });
    committed.recv().unwrap();
    let snapshot = store.read(|r| Ok::<_, StoreError>(r.snapshot())).unwrap();
    let waiters: Vec<_> = (0..16)
        .map(|_| {
            let wait = store.until_durable(snapshot).expect("waits");
            let store = store.clone();
            std::thread::spawn(move || {
                wait.wait().unwrap();
                store.commit_signal().durable()
            })
        })
        .collect();
    go.send(()).unwrap();
    for w in waiters {
        assert!(w.join().unwrap() >= snapshot);
    }
    write.wait().unwrap();
}

/// The resident size of this process's mappings of `file`, in bytes (from `/proc/self/smaps`).
fn mapped_resident(file: &std::path::Path) -> u64 {
    let file = std::fs::canonicalize(file).unwrap();
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut ours = false;
    let mut kib = 0;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            ours = line.ends_with(file.to_str().unwrap());
        } else if let Some(rss) = line.strip_prefix("Rss:").filter(|_| ours) {
            kib += rss
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .unwrap();
        }
    }
    kib * 1024
}

/// Set in the process of its own that
/// [`the_map_is_released_once_what_reads_touched_outgrows_the_budget`] runs in.
const RESIDENT_ALONE: &str = "WORLDD_TEST_RESIDENT_ALONE";

/// Values read through the map stay mapped, and count in the process's RSS, until the writer
/// sees the file-backed resident memory grown by the budget and releases the map: then what
/// the reads touched is no longer resident in the process, and the store still reads it.
#[test]
fn the_map_is_released_once_what_reads_touched_outgrows_the_budget() {
    // The writer watches the whole process's file-backed resident memory, and the other tests
    // of this binary map and unmap their stores beside this one: a store closed meanwhile
    // offset this one's growth, and no release came (a fresh clone's run). So the test runs
    // alone, in a process of its own.
    if std::env::var_os(RESIDENT_ALONE).is_none() {
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "storage::tests::the_map_is_released_once_what_reads_touched_outgrows_the_budget",
            ])
            .env(RESIDENT_ALONE, "1")
            .status()
            .unwrap();
        assert!(status.success(), "the test, alone in its process: {status}");
        return;
    }
    const MIB: usize = 1024 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let store = Store::create(&db).unwrap();
    store.keep_resident_under(8 * MIB as u64);
    // Only commits release the map here: an idle look could release it halfway through the
    // reads measured below, or take the release the commit is meant to make.
    store.look_at_the_map_when_idle(false);
    let objects: Vec<Object> = (0..24u8)
        .map(|i| Object::new("world/test/v1", "t", vec![i; MIB]))
        .collect();
    for o in objects.clone() {
        store.write(move |w| w.put_object(&o)).unwrap();
    }
    let touch_all = || {
        store
            .read(|r| {
                let mut sum = 0u64;
                for o in &objects {
                    let view = r.object_view(&o.hash)?.expect("stored");
                    sum += view.payload.iter().map(|b| u64::from(*b)).sum::<u64>();
                }
                Ok::<_, StoreError>(sum)
            })
            .unwrap()
    };
    let expected: u64 = (0..24u64).map(|i| i * MIB as u64).sum();
    assert_eq!(touch_all(), expected);
    let data = db.join("data.mdb");
    let touched = mapped_resident(&data);
    assert!(
        touched >= 24 * MIB as u64,
        "{touched} bytes resident after reading 24 MiB"
    );
    let releases = || store.stats().map_releases.load(Ordering::SeqCst);
    let released = || store.stats().map_released_bytes.load(Ordering::SeqCst);
    let (before, released_before) = (releases(), released());
    // The writer looks at the map after it has handed a batch to the syncing thread, which may
    // answer the batch first; it takes the next batch only after looking. So a second write
    // returns once the writer is done with the first.
    let settled_write = |content: &[u8]| {
        for bytes in [content.to_vec(), [content, b" (settled)"].concat()] {
            let o = Object::new("world/test/v1", "t", bytes);
            store.write(move |w| w.put_object(&o)).unwrap();
        }
    };

    // The next commit past the look interval releases the map.
    std::thread::sleep(resident::LOOK_EVERY + std::time::Duration::from_millis(20));
    settled_write(b"after the reads");
    assert_eq!(releases(), before + 1);
    let left = mapped_resident(&data);
    assert!(
        left < 4 * MIB as u64,
        "{left} bytes resident after the release"
    );
    let given_back = released() - released_before;
    assert!(given_back >= 16 * MIB as u64, "{given_back} bytes released");
    // Nothing was lost: the pages come back on the next read.
    assert_eq!(touch_all(), expected);

    // Off, nothing is released however much is touched.
    store.keep_resident_under(0);
    std::thread::sleep(resident::LOOK_EVERY + std::time::Duration::from_millis(20));
    settled_write(b"released no more");
    assert_eq!(releases(), before + 1);
    assert!(mapped_resident(&data) >= 24 * MIB as u64);
}

/// Reads alone (an agent's log streamed from the start on an idle daemon) mapped the store into
/// the process and it stayed there until the next commit, hours away perhaps: 1.75 GB resident
/// 30 s after one such stream. The writer looks at the map after a second without work too.
#[test]
fn the_map_is_released_after_reads_alone_with_no_commit() {
    // Alone in its process, as the test above (it watches the whole process's memory).
    if std::env::var_os(RESIDENT_ALONE).is_none() {
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "storage::tests::the_map_is_released_after_reads_alone_with_no_commit",
            ])
            .env(RESIDENT_ALONE, "1")
            .status()
            .unwrap();
        assert!(status.success(), "the test, alone in its process: {status}");
        return;
    }
    const MIB: usize = 1024 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let store = Store::create(&db).unwrap();
    store.keep_resident_under(8 * MIB as u64);
    // No idle look while the reads are measured: one could release the map halfway through.
    // The writes' looks note what the process holds before the reads.
    store.look_at_the_map_when_idle(false);
    let objects: Vec<Object> = (0..24u8)
        .map(|i| Object::new("world/test/v1", "t", vec![i; MIB]))
        .collect();
    for o in objects.clone() {
        store.write(move |w| w.put_object(&o)).unwrap();
    }
    let releases = || store.stats().map_releases.load(Ordering::SeqCst);
    let before = releases();
    let read = store
        .read(|r| {
            let mut sum = 0u64;
            for o in &objects {
                let view = r.object_view(&o.hash)?.expect("stored");
                sum += view.payload.iter().map(|b| u64::from(*b)).sum::<u64>();
            }
            Ok::<_, StoreError>(sum)
        })
        .unwrap();
    assert_eq!(read, (0..24u64).map(|i| i * MIB as u64).sum::<u64>());
    let data = db.join("data.mdb");
    let touched = mapped_resident(&data);
    assert!(
        touched >= 24 * MIB as u64,
        "{touched} bytes resident after reading 24 MiB"
    );
    assert_eq!(releases(), before, "released with idle looks off");
    // No write follows: an idle look releases the map all the same.
    store.look_at_the_map_when_idle(true);
    let until = std::time::Instant::now() + resident::IDLE_LOOK * 5;
    while releases() == before {
        assert!(
            std::time::Instant::now() < until,
            "no release without a commit"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let left = mapped_resident(&data);
    assert!(
        left < 4 * MIB as u64,
        "{left} bytes resident after the release"
    );
}

/// With `store_resident_bytes = 0` there is nothing to look for, yet the writer woke every
/// second to find that out. It waits for work alone.
#[test]
fn with_the_budget_at_0_the_writer_sleeps_until_there_is_work() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    let wakes = || store.stats().idle_wakes.load(Ordering::SeqCst);
    store.keep_resident_under(0);
    // The writer sees the budget at the top of its loop: a second write returns once it has
    // taken the first, so it next waits with the budget at 0.
    for content in [&b"first"[..], b"second"] {
        let o = Object::new("world/test/v1", "t", content.to_vec());
        store.write(move |w| w.put_object(&o)).unwrap();
    }
    let before = wakes();
    std::thread::sleep(resident::IDLE_LOOK * 2 + std::time::Duration::from_millis(300));
    assert_eq!(wakes(), before, "the writer woke without work");
    // With a budget it wakes to look again, from the next commit on.
    store.keep_resident_under(8 * 1024 * 1024);
    let o = Object::new("world/test/v1", "t", b"third".to_vec());
    store.write(move |w| w.put_object(&o)).unwrap();
    let until = std::time::Instant::now() + resident::IDLE_LOOK * 5;
    while wakes() == before {
        assert!(
            std::time::Instant::now() < until,
            "no idle wake with a budget"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A page LMDB finds missing or malformed while a store is read (a torn copy, a failing disk)
/// is the damaged-store error, not LMDB's words alone.
#[test]
fn a_missing_or_malformed_page_is_a_damaged_store() {
    use heed::MdbError;
    let said = |e| StoreError::from_heed(heed::Error::Mdb(e), 0).to_string();
    assert_eq!(
        said(MdbError::PageNotFound),
        "store is damaged: MDB_PAGE_NOTFOUND: Requested page not found: a page the store names is missing or malformed"
    );
    assert_eq!(
        said(MdbError::Corrupted),
        "store is damaged: MDB_CORRUPTED: Located page was wrong type: a page the store names is missing or malformed"
    );
    assert_eq!(
        said(MdbError::Invalid),
        "store is damaged: MDB_INVALID: File is not an LMDB file: a page the store names is missing or malformed"
    );
}

/// A cursor stack overflow and a table handle changed under it meet only pages that point
/// astray; a transaction LMDB marked failed and a key or value of a size no table holds are
/// that too when a read meets them. Each was said as a bare `LMDB error: MDB_…`, without the
/// damaged store's advice; a write's own `MDB_BAD_VALSIZE` is still LMDB's.
#[test]
fn lmdb_errors_a_read_meets_only_in_a_damaged_store_are_said_as_damage() {
    use heed::MdbError;
    let read = |e| StoreError::from_heed_read(heed::Error::Mdb(e), 0).to_string();
    let tail = ": the store's pages lead where no page of a whole store leads";
    for (e, said) in [
        (
            MdbError::CursorFull,
            "MDB_CURSOR_FULL: Internal error - cursor stack limit reached",
        ),
        (
            MdbError::BadDbi,
            "MDB_BAD_DBI: The specified DBI handle was closed/changed unexpectedly",
        ),
        (
            MdbError::BadTxn,
            "MDB_BAD_TXN: Transaction must abort, has a child, or is invalid",
        ),
        (
            MdbError::BadValSize,
            "MDB_BAD_VALSIZE: Unsupported size of key/DB name/data, or wrong DUPFIXED size",
        ),
    ] {
        assert_eq!(read(e), format!("store is damaged: {said}{tail}"));
    }
    assert_eq!(
        read(MdbError::PageNotFound),
        "store is damaged: MDB_PAGE_NOTFOUND: Requested page not found: a page the store names is missing or malformed"
    );
    assert_eq!(
        StoreError::from_heed(heed::Error::Mdb(MdbError::BadValSize), 0).to_string(),
        "LMDB error: MDB_BAD_VALSIZE: Unsupported size of key/DB name/data, or wrong DUPFIXED size"
    );
    let dir = std::path::Path::new("db");
    assert_eq!(
        StoreError::from_heed(heed::Error::Mdb(MdbError::CursorFull), 0)
            .said_at_open(dir)
            .to_string(),
        format!("world store db is damaged: MDB_CURSOR_FULL: Internal error - cursor stack limit reached{tail} (a copy taken while a daemon wrote it, or a failing disk?); restore the directory from a backup")
    );
}

/// A store whose tables hold rows but whose schema version is gone was refused as `store
/// schema version none is not the version this build uses`, which sends an operator looking
/// for another build: every store was stamped when it was made, so it is damaged.
#[test]
fn a_store_with_rows_and_no_schema_version_is_damaged_not_of_another_version() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    drop(crate::store::Store::create(&db).unwrap());
    {
        // SAFETY: the only environment of this store in the process; it is closed before the
        // store is opened again.
        let env = unsafe { EnvOpenOptions::new().max_dbs(32).open(&db) }.unwrap();
        let wtxn = env.write_txn().unwrap();
        env.create_databases_and_commit(wtxn, |dbo, wtxn| -> heed::Result<_> {
            let meta = dbo
                .open_database::<Str, Bytes>(wtxn, Some(META_TABLE))?
                .unwrap();
            assert!(meta.delete(wtxn, VERSION_KEY)?);
            Ok(CommitOrAbort::<(), ()>::Commit(()))
        })
        .unwrap();
        env.prepare_for_closing().wait();
    }
    let e = crate::store::Store::open(&db, StoreOptions::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "world store {} is damaged: its tables hold rows but no schema version (the schema_version key of its meta table is gone; every store is stamped with its version when it is made) (a copy taken while a daemon wrote it, or a failing disk?); restore the directory from a backup",
            db.display()
        )
    );
}

/// `lock.mdb` (or `data.mdb`) a symbolic link was followed by LMDB's open, which made its file
/// where the link pointed, even for `doctor`; a directory or a device in their place failed
/// with a bare `Is a directory` or `Invalid argument`. Each is refused with the file's name,
/// and nothing is made where a link points.
#[test]
fn a_store_file_that_is_a_link_a_directory_or_a_device_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    drop(crate::store::Store::create(&db).unwrap());
    let said = |path: &std::path::Path, what: &str| {
        format!("world store file {} is {what}; a store's data.mdb and lock.mdb are regular files in its directory, and neither is opened through a link or made where one points: put the store's own files there (restore the directory from a backup)", path.display())
    };
    let lock = db.join("lock.mdb");
    let elsewhere = dir.path().join("elsewhere.mdb");
    std::fs::remove_file(&lock).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &lock).unwrap();
    for read_only in [false, true] {
        let options = StoreOptions {
            read_only,
            ..StoreOptions::default()
        };
        let e = crate::store::Store::open(&db, options).unwrap_err();
        assert_eq!(e.to_string(), said(&lock, "a symbolic link"));
    }
    assert_eq!(
        crate::store::Store::create(&db).unwrap_err().to_string(),
        said(&lock, "a symbolic link")
    );
    assert!(std::fs::symlink_metadata(&elsewhere).is_err());
    std::fs::remove_file(&lock).unwrap();
    std::fs::create_dir(&lock).unwrap();
    assert_eq!(
        crate::store::Store::open(&db, StoreOptions::default())
            .unwrap_err()
            .to_string(),
        said(&lock, "a directory")
    );
    std::fs::remove_dir(&lock).unwrap();
    std::os::unix::fs::symlink("/dev/null", &lock).unwrap();
    assert_eq!(
        crate::store::Store::open(&db, StoreOptions::default())
            .unwrap_err()
            .to_string(),
        said(&lock, "a symbolic link")
    );
    std::fs::remove_file(&lock).unwrap();
    // The data file too, even where its target exists.
    let data = db.join("data.mdb");
    let moved = dir.path().join("moved.mdb");
    std::fs::rename(&data, &moved).unwrap();
    std::os::unix::fs::symlink(&moved, &data).unwrap();
    assert_eq!(
        crate::store::Store::open(&db, StoreOptions::default())
            .unwrap_err()
            .to_string(),
        said(&data, "a symbolic link")
    );
    std::fs::remove_file(&data).unwrap();
    std::fs::rename(&moved, &data).unwrap();
    crate::store::Store::open(&db, StoreOptions::default()).unwrap();
}

/// A store whose last commit failed for its disk was said failing until a call committed: a
/// thin-provisioned disk given room again left health at `store-failing` while no call came.
/// The next look writes the schema stamp again (changing nothing) and, on a disk that takes it,
/// clears the state; on one that still refuses it, the state stays.
#[test]
fn a_look_at_a_store_whose_writes_failed_clears_the_failure_once_a_write_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let store = Store::create(&db).unwrap();
    let txn = store.inner.env.info().last_txn_id;
    store.watch();
    assert_eq!(
        store.inner.env.info().last_txn_id,
        txn,
        "no write while nothing failed"
    );
    let fault = StoreError::Io("Read-only file system (os error 30)".into());
    store.stats().failing.settled(false, Some(&fault));
    assert!(store.writes_failing());
    store.watch();
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    while store.writes_failing() && Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(!store.writes_failing(), "the look's write cleared it");
    assert!(
        store.inner.env.info().last_txn_id > txn,
        "one commit was made"
    );
    let stamp = store
        .read(|r| {
            let meta = store.inner.meta.unwrap();
            Ok::<_, StoreError>(
                meta.get(r.txn, VERSION_KEY.as_bytes())
                    .unwrap()
                    .map(<[u8]>::to_vec),
            )
        })
        .unwrap();
    assert_eq!(
        stamp,
        Some(crate::schema::SCHEMA_VERSION.to_string().into_bytes())
    );
}
