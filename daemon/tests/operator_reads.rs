//! The verbs that only read a store (`doctor`, `why --db`, `usage`, `session list`) and
//! `backup`: they leave an older schema as it is, call a serving daemon's calls in flight
//! pending, not indeterminate, and warn of indeterminate effects once a run.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

const WS: &[&str] = &["worldd_workspace"];

/// The `schema_version` recorded in the closed store at `db`.
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

/// Record `version` as the `schema_version` of the closed store at `db`.
fn set_meta_schema(db: &Path, version: &str) {
    // SAFETY: no store handle is open on `db` in this process while this one is.
    let env = unsafe { heed::EnvOpenOptions::new().max_dbs(32).open(db).unwrap() };
    let wtxn = env.write_txn().unwrap();
    env.create_databases_and_commit(wtxn, |dbo, wtxn| -> heed::Result<_> {
        let meta: heed::Database<heed::types::Str, heed::types::Bytes> =
            dbo.create_database(wtxn, Some("meta"))?;
        meta.put(wtxn, "schema_version", version.as_bytes())?;
        Ok(heed::CommitOrAbort::<(), ()>::Commit(()))
    })
    .unwrap();
    env.prepare_for_closing().wait();
}

/// A stopped store in which episode `ep1` read `a.txt` once (entry 1).
fn one_read_stopped() -> (tempfile::TempDir, std::path::PathBuf) {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    std::fs::write(d.root().join("ep1/a.txt"), "alpha").unwrap();
    a2a(&d, &token, "r1", "ailang-read", json!({"path": "a.txt"}));
    let kept = d.halt();
    let db = kept.path().join("db");
    (kept, db)
}

/// A copy of broker-core's schema-1 fixture (one indeterminate intent, `mcp:ep1:lost`),
/// migrated as `worldd serve` would: its directory and the store's path.
fn migrated_schema_1_store() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    std::fs::create_dir_all(&db).unwrap();
    std::fs::copy(
        repo_root().join("broker-core/tests/fixtures/store-v1/data.mdb"),
        db.join("data.mdb"),
    )
    .unwrap();
    drop(broker_core::store::Store::open(&db, Default::default()).unwrap());
    (dir, db)
}

// `backup` upgraded its source (and every read verb its store) from schema 4 to 5, so that the
// build that wrote the store could open neither the store nor the backup taken before upgrading.
#[test]
fn read_verbs_and_backup_leave_an_older_schema_as_it_is() {
    let (kept, db) = one_read_stopped();
    set_meta_schema(&db, "4");
    let shown = path_str(&db);
    let note = format!(
        "worldd: world store {shown} uses schema 4: read as it is, not upgraded; `worldd serve --db {shown}` upgrades it to schema 6 (builds that know only schema 4 cannot open it then: back it up first)"
    );
    let copy = kept.path().join("bk");
    let verbs: [&[&str]; 5] = [
        &["doctor", "--db", shown],
        &["why", "1", "--db", shown],
        &["usage", "--db", shown],
        &["session", "list", "--db", shown],
        &["backup", "--db", shown, path_str(&copy)],
    ];
    for args in verbs {
        let (code, out, err) = worldd(args, None);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
        assert_eq!(err, format!("{note}\n"), "{args:?}");
        assert_eq!(meta_schema(&db).as_deref(), Some("4"), "{args:?}");
    }
    assert_eq!(meta_schema(&copy).as_deref(), Some("4"));
    // The copy reads as the store does, and is upgraded only by what writes.
    let (code, out, _) = worldd(&["doctor", "--db", path_str(&copy)], None);
    assert_eq!(code, 0, "{out}");
    assert_eq!(meta_schema(&copy).as_deref(), Some("4"));
}

// A schema-1 store cannot be read without moving its rows: the read verbs refuse it untouched.
#[test]
fn read_verbs_refuse_a_schema_1_store_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    std::fs::create_dir_all(&db).unwrap();
    let fixture = repo_root().join("broker-core/tests/fixtures/store-v1/data.mdb");
    std::fs::copy(&fixture, db.join("data.mdb")).unwrap();
    let shown = path_str(&db);
    for args in [
        &["doctor", "--db", shown][..],
        &["backup", "--db", shown, path_str(&dir.path().join("bk"))],
    ] {
        let (code, out, err) = worldd(args, None);
        assert_eq!((code, out.as_str()), (1, ""), "{args:?}: {err}");
        assert_eq!(
            err,
            format!("worldd: world store {shown} uses schema 1, which this build reads only once it is migrated to schema 6 (its rows move); nothing was changed: back it up first (a stopped store copies whole with `cp -a`: builds that know only schema 1 cannot open a migrated store), then `worldd serve --db {shown}` migrates it\n")
        );
        assert_eq!(meta_schema(&db).as_deref(), Some("1"));
    }
    assert_eq!(
        std::fs::read(db.join("data.mdb")).unwrap(),
        std::fs::read(fixture).unwrap()
    );
}

// `why` of a call journaled and never committed said `not found (… raise --scan …)`, which no
// --scan changes.
#[test]
fn why_of_an_invocation_journaled_but_not_committed_says_so() {
    let (_dir, db) = migrated_schema_1_store();
    let (code, out, err) = worldd(&["why", "mcp:ep1:lost", "--db", path_str(&db)], None);
    assert_eq!((code, out.as_str()), (1, ""));
    assert_eq!(
        err.lines().last(),
        Some("worldd: why: invocation mcp:ep1:lost is journaled but not committed: its intent has no recorded outcome (indeterminate, or still in flight where a daemon serves the store), so no entry records it; `worldd calls get mcp:ep1:lost` asks the daemon what became of it")
    );
    // An id the journal does not know is still not found.
    let (code, _, err) = worldd(&["why", "mcp:ep1:never", "--db", path_str(&db)], None);
    assert_eq!(code, 1);
    assert!(err.contains("not found (scanned back"), "{err}");
}

// Online, `why` of the same call said `not found (scanned back 100000 entries; raise --scan to
// look further)`, where offline it said what the call is: the daemon is now asked.
#[test]
fn why_online_of_an_invocation_the_daemon_has_not_committed_says_what_it_is() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, _db) = migrated_schema_1_store();
    let d = Daemon::start_in(dir, &[], &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let file = d.dir.path().join("ep1.session");
    std::fs::write(&file, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let url = d.url("");
    let url = url.trim_end_matches('/');
    let ask = |id: &str| {
        worldd(
            &[
                "why",
                id,
                "--addr",
                url,
                "--session",
                path_str(&file),
                "--scan",
                "100000",
            ],
            None,
        )
    };
    let (code, out, err) = ask("mcp:ep1:lost");
    assert_eq!((code, out.as_str()), (1, ""));
    assert_eq!(
        err.lines().last(),
        Some(format!("worldd: why: invocation mcp:ep1:lost is not committed: the daemon at {url} says it is indeterminate (pending), so no entry records it; `worldd calls get mcp:ep1:lost` says what to do").as_str())
    );
    let (code, _, err) = ask("mcp:ep1:never");
    assert_eq!(code, 1);
    assert!(err.contains("not found (scanned back all "), "{err}");
}

const WARNED: &str =
    "WARN 1 indeterminate effect(s): intent journaled, no outcome; they are never retried";

// `backup` warned of the store's indeterminate effects twice: on opening the store and its copy.
#[test]
fn backup_warns_of_indeterminate_effects_once() {
    let (dir, db) = migrated_schema_1_store();
    let (code, out, err) = worldd(
        &[
            "backup",
            "--db",
            path_str(&db),
            path_str(&dir.path().join("bk")),
        ],
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(err.matches(WARNED).count(), 1, "{err}");
    let (code, out, err) = worldd(&["doctor", "--db", path_str(&db)], None);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(err.matches(WARNED).count(), 1, "{err}");
}

// With a daemon serving the store, `doctor` and `backup` called its calls in flight
// indeterminate ("never retried; budget stays spent"), and backup and the session verbs warned
// of them.
#[test]
fn doctor_and_backup_call_a_serving_daemons_calls_in_flight_pending() {
    let d = Daemon::start(&["worldd_workspace", "worldd_stall"], &[]);
    let token = d.session("hung", &["Stall.Wait=any:5"]);
    let other = broker_core::session::credential_id(&d.session("other", &["Stall.Wait=any:1"]));
    let url = d.url("/mcp/");
    let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"stall-wait","arguments":{"ms":"6000"}}});
    let call = std::thread::spawn(move || {
        request(
            "POST",
            &url,
            Some(&token),
            &[
                ("Content-Type", "application/json"),
                ("Accept", "application/json, text/event-stream"),
            ],
            Some(&serde_json::to_vec(&body).unwrap()),
        )
        .status
    });
    let db = d.db();
    let started = Instant::now();
    let (out, err) = loop {
        let (code, out, err) = worldd(&["doctor", "--db", path_str(&db)], None);
        assert_eq!(code, 0, "{out}{err}");
        // Until the call's intent is journaled, doctor finds none, and says so in the words it
        // uses whether or not a daemon serves the store.
        if out.contains(" intent(s) without an outcome yet") {
            break (out, err);
        }
        assert!(started.elapsed() < Duration::from_secs(5), "{out}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        out.contains("  1 intent(s) without an outcome yet: a daemon serves this store, and its calls in flight may still finish (any left from before it started are indeterminate: never retried; budget stays spent)\n"),
        "{out}"
    );
    assert!(!out.contains("indeterminate intent(s)"), "{out}");
    assert!(!err.contains("indeterminate effect"), "{err}");
    let copy = d.dir.path().join("bk");
    let (code, out, err) = worldd(&["backup", "--db", path_str(&db), path_str(&copy)], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!err.contains("indeterminate effect"), "{err}");
    // Nor do the session verbs that write the store beside the daemon (they said the call in
    // flight was an indeterminate effect, "never retried").
    let (code, out, err) = worldd(&["session", "revoke", "--db", path_str(&db), &other], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!err.contains("indeterminate effect"), "{err}");
    call.join().unwrap();
}
