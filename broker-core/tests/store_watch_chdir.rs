//! The store's watch after the process changes its working directory. A test binary of its
//! own: the working directory is the whole process's, and no other test may run beside a
//! `chdir`.

use broker_core::store::{Store, StoreOptions};

/// The watch resolved a relative store path against the working directory of each look: after
/// any `chdir` in the process (plugin code, a library), the store's files were "gone", and the
/// store refused every write and new call as replaced. The path looked at is the one the store
/// was opened at.
#[test]
fn a_store_opened_at_a_relative_path_is_not_replaced_by_a_chdir() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::env::set_current_dir(dir.path()).unwrap();
    let store = Store::open(
        std::path::Path::new("db"),
        StoreOptions {
            create: true,
            ..StoreOptions::default()
        },
    )
    .unwrap();
    store.watch();
    assert!(store.admits_client_work().is_ok());

    std::env::set_current_dir(elsewhere.path()).unwrap();
    store.watch();
    assert_eq!(
        store.admits_client_work().map_err(|e| e.to_string()),
        Ok(())
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let grants = vec!["Hello.Greet=any:1".parse().unwrap()];
    broker_core::session::mint(&store, "ep1", grants, 3600, now).unwrap();

    // The store as given still names it in what is said of it.
    assert_eq!(store.path(), std::path::Path::new("db"));
    // A store really replaced (here: moved away, its path empty) is still seen.
    std::fs::rename(dir.path().join("db"), dir.path().join("moved")).unwrap();
    store.watch();
    assert!(store.admits_client_work().is_err());
}
