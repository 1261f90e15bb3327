//! `rm db/lock.mdb` under a serving daemon: a store verb run then made a new `lock.mdb`, whose
//! write lock was not the daemon's. `session revoke` and `session mint` said they were done,
//! and their write, or a call the daemon had acknowledged, was gone after a restart. Every verb
//! that opens the store writable now refuses until the daemon is restarted, writing nothing;
//! the daemon's log says so. Through the real binary.

mod common;

use common::*;

const WS: &[&str] = &["worldd_workspace"];

/// The episodes of the live credentials `session list --json` lists in `db`.
fn listed(db: &std::path::Path) -> Vec<String> {
    let (code, out, err) = worldd(&["session", "list", "--json", "--db", path_str(db)], None);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s["episode"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn store_verbs_refuse_beside_a_daemon_that_lost_its_lock_file_and_write_nothing() {
    let d = Daemon::start(WS, &[]);
    d.session("k6", &["Workspace.Read=worktree:100"]);
    let db = d.db();
    let before = listed(&db);
    assert_eq!(before, ["k6"]);
    std::fs::remove_file(db.join("lock.mdb")).unwrap();
    let refusal = format!(
        "worldd: the daemon serving {} lost its lock.mdb (removed or replaced while it served): this verb would open the store without sharing the daemon's locks, so a write of either could be lost and a read could meet pages the daemon reuses; nothing was written: restart the daemon, then run this verb again\n",
        db.display()
    );

    // Refused whether or not the daemon's watch has noticed yet.
    let (code, out, err) = worldd(
        &[
            "session",
            "revoke",
            "--episode",
            "k6",
            "--db",
            path_str(&db),
        ],
        None,
    );
    assert_eq!(
        (code, out.as_str(), err.as_str()),
        (2, "", refusal.as_str())
    );
    // Refused before the open: no lock.mdb of the verb's own was made.
    assert!(!db.join("lock.mdb").exists());

    d.wait_for_log("was replaced or removed while this daemon served it");
    let line = format!(
        "the store {shown} was replaced or removed while this daemon served it (lock.mdb is gone): it refuses new calls and writes nothing more, since what it wrote would go to files no path names; data.mdb is still the file it opened, but the store verbs (`worldd session mint`, `session revoke`, `doctor`, `backup`) refuse to open the store until it is restarted, since they would not share its write lock: stop it and start it again on the store at {shown}",
        shown = db.display()
    );
    assert!(d.log().contains(&line), "{line}\n{}", d.log());
    assert!(
        !d.log().contains("nothing it acknowledged is lost"),
        "{}",
        d.log()
    );

    std::fs::create_dir_all(d.root().join("k7")).unwrap();
    let (code, shown) = mint_at_terminal(
        &db,
        &format!(
            "--episode k7 --grant Workspace.Read=worktree:5 --workspace-root {}",
            d.root().display()
        ),
    );
    assert_eq!(code, 2, "{shown}");
    assert!(shown.contains(refusal.trim_end()), "{refusal}\n{}", shown);
    assert!(!shown.contains("Confirm mint"), "{shown}");
    // The verbs that only read open the store writable too (it makes a lock.mdb): refused.
    for verb in [
        vec!["session", "list", "--db", path_str(&db)],
        vec!["doctor", "--db", path_str(&db)],
    ] {
        let (code, out, err) = worldd(&verb, None);
        assert_eq!(
            (code, out.as_str(), err.as_str()),
            (2, "", refusal.as_str()),
            "{verb:?}"
        );
    }
    assert!(!db.join("lock.mdb").exists());

    // Restarted, the daemon has a lock.mdb of its own again: nothing was written meanwhile,
    // and the verbs work beside it.
    let d = d.restart(WS, &[]);
    assert_eq!(listed(&db), before);
    let (code, out, err) = worldd(
        &[
            "session",
            "revoke",
            "--episode",
            "k6",
            "--db",
            path_str(&db),
        ],
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(listed(&db).is_empty());
    drop(d);
}

/// `quickstart` takes the daemon's lock on the data file itself before it mints into an
/// existing store, which no process has open yet: that is no daemon that lost its lock.mdb,
/// and its question is asked.
#[test]
fn quickstart_on_an_existing_store_is_not_taken_for_a_daemon_that_lost_its_lock_file() {
    let dir = store_where_spent_three_reads("demo");
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    let (code, shown) = at_terminal(
        &format!(
            "{WORLDD} quickstart --dir {} --bind 127.0.0.1:{port} --episode fresh",
            dir.path().display()
        ),
        b"n\n",
    );
    assert!(!shown.contains("lost its lock.mdb"), "{shown}");
    assert!(shown.contains("Confirm mint"), "{shown}");
    assert_eq!(code, 1, "{shown}");
    assert!(!dir.path().join("worktrees/fresh").exists());
}

/// `quickstart --print-only` takes no lock, and reusing the live credential in its `--dir`
/// opened the store directly: beside a daemon that lost its lock.mdb it made a new one and
/// printed the configuration. It is refused as the other store verbs are, making nothing.
#[test]
fn quickstart_print_only_reusing_a_credential_is_refused_beside_a_daemon_that_lost_its_lock_file() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("k8", &["Workspace.Read=worktree:100"]);
    let file = d.session_file("k8", &token);
    let db = d.db();
    let dir = db.parent().unwrap().to_path_buf();
    std::fs::remove_file(db.join("lock.mdb")).unwrap();
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    let bind = format!("127.0.0.1:{port}");
    let (code, out, err) = worldd(
        &[
            "quickstart",
            "--dir",
            path_str(&dir),
            "--episode",
            "k8",
            "--bind",
            &bind,
            "--print-only",
        ],
        None,
    );
    let refusal = format!(
        "worldd: the daemon serving {} lost its lock.mdb (removed or replaced while it served): this verb would open the store without sharing the daemon's locks, so a write of either could be lost and a read could meet pages the daemon reuses; nothing was written: restart the daemon, then run this verb again\n",
        db.display()
    );
    assert_eq!(
        (code, out.as_str(), err.as_str()),
        (2, "", refusal.as_str())
    );
    assert!(!db.join("lock.mdb").exists());
    // The credential file is left as it was.
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        format!("{token}\n")
    );
    drop(d);
}

/// The verbs' refusal line for the store in `db`.
fn refusal(db: &std::path::Path) -> String {
    format!(
        "worldd: the daemon serving {} lost its lock.mdb (removed or replaced while it served): this verb would open the store without sharing the daemon's locks, so a write of either could be lost and a read could meet pages the daemon reuses; nothing was written: restart the daemon, then run this verb again\n",
        db.display()
    )
}

/// A re-run `quickstart` holds the daemon's lock on the data file for seconds (its plugin
/// trial) before it opens the store: a verb run meanwhile was refused as if a daemon had lost
/// its lock.mdb. The lock's holder maps no file of the store, so the verb goes on. This test
/// process takes the lock, as quickstart does, without opening the store.
#[test]
fn a_verb_beside_a_lock_holder_that_has_not_opened_the_store_goes_on() {
    let dir = store_where_spent_three_reads("demo");
    let db = dir.path().join("db");
    let data = std::fs::File::open(db.join("data.mdb")).unwrap();
    data.try_lock().unwrap();
    let (code, out, err) = worldd(&["session", "list", "--json", "--db", path_str(&db)], None);
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v.as_array().unwrap()[0]["episode"], "demo", "{out}");
    drop(data);
}

/// Once the daemon's lock.mdb is removed, another process that made and holds a new one (a
/// verb let through just before the removal, `mdb_stat`, an older worldd) does not let the
/// verbs through: their write lock would be that process's, still not the daemon's.
#[test]
fn a_lock_file_another_process_made_after_the_removal_does_not_let_the_verbs_through() {
    let d = Daemon::start(WS, &[]);
    d.session("k9", &["Workspace.Read=worktree:100"]);
    let db = d.db();
    std::fs::remove_file(db.join("lock.mdb")).unwrap();
    // This test process opens the store: a new lock.mdb, held by it.
    // SAFETY: the environment is only opened (LMDB's lock taken), never read or written, and
    // dropped before the daemon restarts.
    let env = unsafe { heed::EnvOpenOptions::new().max_dbs(32).open(&db).unwrap() };
    assert!(db.join("lock.mdb").exists());
    let (code, out, err) = worldd(
        &[
            "session",
            "revoke",
            "--episode",
            "k9",
            "--db",
            path_str(&db),
        ],
        None,
    );
    assert_eq!(
        (code, out.as_str(), err.as_str()),
        (2, "", refusal(&db).as_str())
    );
    drop(env);
    // Nothing was revoked: restarted, the daemon still lists the credential.
    let d = d.restart(WS, &[]);
    assert_eq!(listed(&db), ["k9"]);
    drop(d);
}
