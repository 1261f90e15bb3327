//! A store's data file rolled back under the process that serves it: a backup's `data.mdb`
//! copied over the live one in place (the same inode, so the watch's look at the files sees
//! nothing). The process's memory of the store (the content-address tail's map, the calls it
//! acknowledged) no longer matches the file, and its writes would go over a store that lacks
//! what it acknowledged: they are refused, as for a replaced store.

mod common;

use broker_core::capacity::Full;
use broker_core::log::{self, LogError};
use broker_core::object::Object;
use broker_core::store::{Store, StoreError};
use common::append_n;

/// A backup taken with the store's own copy, three entries appended, then the backup copied
/// over the data file in place: the store wrote entries 1 to 3 again over the older log, and
/// skipped objects its map said were stored. The next write is refused before anything runs,
/// the file is left as the copy made it, and the store refuses new client work from then on.
#[test]
fn a_write_after_the_data_file_was_rolled_back_in_place_is_refused_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let store = Store::create(&db).unwrap();
    let c = store.write(|w| log::append(w, &append_n(1))).unwrap();
    assert_eq!(c.entry.header.entry_index, 1);
    let backup = dir.path().join("backup.mdb");
    store
        .copy_to(&mut std::fs::File::create(&backup).unwrap(), false)
        .unwrap();
    for n in 2..=4 {
        store.write(move |w| log::append(w, &append_n(n))).unwrap();
    }
    assert!(store.admits_client_work().is_ok());
    let data = db.join("data.mdb");
    let inode =
        |p: &std::path::Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    let was = inode(&data);
    std::fs::copy(&backup, &data).unwrap();
    assert_eq!(inode(&data), was, "not copied in place");
    let copied = std::fs::read(&data).unwrap();

    let err = store.write(|w| log::append(w, &append_n(5))).unwrap_err();
    assert!(
        matches!(err, LogError::Store(StoreError::RolledBack(_))),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "the world store {}'s data file was rolled back or written by another process while this daemon served it: nothing more is written to it; stop the daemon and run `worldd doctor` on the store",
            db.display()
        )
    );
    assert!(store.replaced());
    assert!(matches!(store.admits_client_work(), Err(Full::RolledBack)));
    // Every later write too, without a look at the file.
    let err = store.write(|w| log::append(w, &append_n(6))).unwrap_err();
    assert!(
        matches!(err, LogError::Store(StoreError::RolledBack(_))),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&data).unwrap(),
        copied,
        "the refused write wrote"
    );
    drop(store);

    // Opened again, the store is the backup, whole.
    let store = Store::open(&db, Default::default()).unwrap();
    store.check_head().unwrap();
    let head = store.read(log::head).unwrap().unwrap();
    assert_eq!(head.world.revision, 1);
    let c = store.write(|w| log::append(w, &append_n(2))).unwrap();
    assert_eq!(c.entry.header.entry_index, 2);
}

/// The watch sees it too, with no write: from its first look after the copy, new client work
/// is refused.
#[test]
fn the_watch_sees_a_data_file_rolled_back_in_place_without_a_write() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let store = Store::create(&db).unwrap();
    let backup = dir.path().join("backup.mdb");
    store
        .copy_to(&mut std::fs::File::create(&backup).unwrap(), false)
        .unwrap();
    store.write(|w| log::append(w, &append_n(1))).unwrap();
    store.watch();
    assert!(store.admits_client_work().is_ok());
    std::fs::copy(&backup, db.join("data.mdb")).unwrap();
    store.watch();
    assert!(matches!(store.admits_client_work(), Err(Full::RolledBack)));
}

/// Another process's commits move the store's last transaction on, never back, and leave the
/// log to this handle (a `session mint` stores rows, never entries): a store written beside
/// this handle is no rolled-back one.
#[test]
fn another_process_writing_the_store_is_not_taken_for_a_rollback() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let store = Store::create(&db).unwrap();
    store.write(|w| log::append(w, &append_n(1))).unwrap();
    // A second environment on the same files, as another process has (a test may not open
    // one store twice in a process through LMDB: a child writes instead).
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "helper_appends_to_the_store_in_env",
            "--nocapture",
        ])
        .env("WORLDD_TEST_APPEND_TO", &db)
        .status()
        .unwrap();
    assert!(status.success());
    store.watch();
    assert!(store.admits_client_work().is_ok());
    let c = store.write(|w| log::append(w, &append_n(2))).unwrap();
    assert_eq!(c.entry.header.entry_index, 2);
}

/// Not a test of its own: run by [`another_process_writing_the_store_is_not_taken_for_a_rollback`]
/// as a child process, it stores an object in the store it is given (as another process
/// writing it does: the log is the daemon's alone).
#[test]
fn helper_appends_to_the_store_in_env() {
    let Ok(db) = std::env::var("WORLDD_TEST_APPEND_TO") else {
        return;
    };
    let store = Store::open(std::path::Path::new(&db), Default::default()).unwrap();
    let object = Object::new("test/other-process", "test", b"written beside".to_vec());
    store.write(move |w| w.put_object(&object)).unwrap();
}

/// A copy of the same store that another daemon served longer (more transactions than this
/// handle committed, so its last transaction id is higher, not lower) put over the data file
/// in place: its log ends at another entry than the one this handle appended last. The next
/// write is refused before anything runs, and writes nothing.
#[test]
fn a_copy_served_longer_by_another_daemon_put_over_the_data_file_is_refused_as_rolled_back() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let store = Store::create(&db).unwrap();
    store.appends_the_log();
    store.write(|w| log::append(w, &append_n(1))).unwrap();
    let db2 = dir.path().join("db2");
    std::fs::create_dir(&db2).unwrap();
    store
        .copy_to(
            &mut std::fs::File::create(db2.join("data.mdb")).unwrap(),
            false,
        )
        .unwrap();
    // The copy served by another handle for twelve entries: many more transactions.
    let other = Store::open(&db2, Default::default()).unwrap();
    for n in 2..=13 {
        other.write(move |w| log::append(w, &append_n(n))).unwrap();
    }
    drop(other);
    for n in 2..=4 {
        store.write(move |w| log::append(w, &append_n(n))).unwrap();
    }
    let data = db.join("data.mdb");
    std::fs::copy(db2.join("data.mdb"), &data).unwrap();
    let copied = std::fs::read(&data).unwrap();

    let err = store.write(|w| log::append(w, &append_n(5))).unwrap_err();
    assert!(
        matches!(err, LogError::Store(StoreError::RolledBack(_))),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "the world store {}'s data file was rolled back or written by another process while this daemon served it: nothing more is written to it; stop the daemon and run `worldd doctor` on the store",
            db.display()
        )
    );
    assert!(matches!(store.admits_client_work(), Err(Full::RolledBack)));
    // Nor a write that appends nothing.
    let object = Object::new("test/after", "test", b"after".to_vec());
    let err = store.write(move |w| w.put_object(&object)).unwrap_err();
    assert!(matches!(err, StoreError::RolledBack(_)), "{err}");
    assert_eq!(
        std::fs::read(&data).unwrap(),
        copied,
        "the refused write wrote"
    );
}

/// New calls refused once a rollback was seen are refused as that, not as replaced files
/// (whose advice, to restart on the store at the path, would serve the rolled-back copy
/// without a look by `worldd doctor`).
#[test]
fn new_calls_refused_after_a_rollback_say_the_data_file_was_rolled_back_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let store = Store::create(&db).unwrap();
    let backup = dir.path().join("backup.mdb");
    store
        .copy_to(&mut std::fs::File::create(&backup).unwrap(), false)
        .unwrap();
    store.write(|w| log::append(w, &append_n(1))).unwrap();
    std::fs::copy(&backup, db.join("data.mdb")).unwrap();
    store.watch();
    let refused = store.admits_client_work().unwrap_err();
    assert_eq!(refused, Full::RolledBack);
    assert_eq!(
        refused.to_string(),
        "the store's data file was rolled back or written by another process while this daemon served it (the error logged when it was seen says what it found); stop the daemon, run `worldd doctor` on the store, and start it again"
    );
}
