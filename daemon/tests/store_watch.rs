//! What the serving daemon notices of its store while it serves, through the real binary: a
//! reader killed holding a snapshot (a `worldd backup` killed mid-copy) no longer keeps the
//! store from reusing its freed pages; a store directory replaced under the daemon stops it
//! acknowledging calls that would be lost.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

const WS: &[&str] = &["worldd_workspace"];
const HOLD_ENV: &str = "WORLDD_TEST_HOLD_SNAPSHOT";
const HOLDING: &str = "holding a read snapshot";

fn mcp_call(d: &Daemon, token: &str, tool: &str, args: Value) -> Answer {
    mcp(
        d,
        token,
        "tools/call",
        json!({"name": tool, "arguments": args}),
    )
}

/// The value of one metrics line (`name` includes any labels).
fn metric(d: &Daemon, name: &str) -> f64 {
    let text = get(&d.url("/v1/metrics"), None).text();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{name} missing from {text}"))
        .parse()
        .unwrap()
}

fn read_ok(d: &Daemon, token: &str, i: usize) {
    let v = mcp_call(
        d,
        token,
        "ailang-read",
        json!({"path": format!("absent-{i}.txt")}),
    );
    let v = v.sse_json();
    assert!(v.get("result").is_some(), "{v}");
}

fn size(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

/// Not a test of its own: run by [`a_reader_killed_holding_a_snapshot_is_cleared_while_the_daemon_serves`]
/// as a child process (this test binary again), it opens the store, begins a read transaction
/// and holds it until it is killed, as `worldd backup` does while it copies.
#[test]
fn helper_holds_a_read_snapshot_until_killed() {
    let Ok(db) = std::env::var(HOLD_ENV) else {
        return;
    };
    // SAFETY: the store is opened as the daemon opens it, and never written.
    let env = unsafe {
        heed::EnvOpenOptions::new()
            .read_txn_without_tls()
            .max_dbs(32)
            .max_readers(1024)
            .open(&db)
    }
    .unwrap();
    let _snapshot = env.read_txn().unwrap();
    println!("{HOLDING}");
    std::io::stdout().flush().unwrap();
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

/// Start this test binary's helper on `db` and SIGKILL it once it holds its snapshot: a reader
/// slot of a dead process is left in `lock.mdb`.
fn kill_a_reader_holding_a_snapshot(db: &Path) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "helper_holds_a_read_snapshot_until_killed",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(HOLD_ENV, db)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let held = stdout
        .lines()
        .map_while(Result::ok)
        .any(|l| l.contains(HOLDING));
    assert!(held, "the helper never held a snapshot");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A `worldd backup` killed mid-copy (kill -9, `timeout`) left its reader slot in the store's
/// lock file, and the daemon, which had opened the store before, could reuse no page freed
/// since: its data file grew by every page it wrote (80 MB to 1 GB in a minute under load)
/// until some other process opened the store. The daemon now clears such slots every
/// `Store::WATCH_EVERY` (1 s), says so, and counts them; its file then stops growing.
#[test]
fn a_reader_killed_holding_a_snapshot_is_cleared_while_the_daemon_serves() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep", &["Workspace.Read=worktree:100000"]);
    let data = d.db().join("data.mdb");
    // Enough commits for the store to reach its steady size (freed pages being reused).
    for i in 0..200 {
        read_ok(&d, &token, i);
    }
    // What 400 calls add to the file when nothing keeps freed pages from reuse: their rows.
    let before = size(&data);
    for i in 0..400 {
        read_ok(&d, &token, 200 + i);
    }
    let rows = size(&data) - before;
    kill_a_reader_holding_a_snapshot(&d.db());
    let killed = Instant::now();
    d.wait_for_log(&format!(
        "store {}: cleared 1 reader slot(s) left by a process that died holding a read snapshot (a `worldd backup` or `doctor` killed mid-read?); while they stayed, no page freed after that snapshot could be reused, so the data file grew instead",
        d.db().display()
    ));
    // Within the period (1 s), with a margin for a loaded host.
    assert!(
        killed.elapsed() < Duration::from_secs(5),
        "{:?}",
        killed.elapsed()
    );
    assert_eq!(metric(&d, "worldd_store_stale_readers_cleared_total"), 1.0);
    // Measured: 400 more calls grow the file by about what the 400 before did, their rows.
    // With the dead snapshot kept, every page each commit copied was added to the file as
    // well (before this was fixed, this test's 400 calls grew it by 29 MB, against 2.7 MB before the reader was killed).
    let before = size(&data);
    for i in 0..400 {
        read_ok(&d, &token, 1000 + i);
    }
    let grown = size(&data) - before;
    eprintln!("data.mdb grew {grown} bytes over 400 calls after the slot was cleared, {rows} over 400 before the reader was killed");
    assert!(
        grown <= rows + rows / 2 + (256 << 10),
        "data.mdb grew {grown} bytes over 400 calls, against {rows} before"
    );
    // A live reader (this test's own, holding a snapshot over two looks) is never cleared.
    let store = broker_core::store::Store::open(&d.db(), Default::default()).unwrap();
    store
        .read(|_| {
            std::thread::sleep(Duration::from_millis(2500));
            Ok::<_, broker_core::store::StoreError>(())
        })
        .unwrap();
    assert_eq!(metric(&d, "worldd_store_stale_readers_cleared_total"), 1.0);
}

fn inode(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().ino()
}

/// `rm -rf db && cp -a other db` under a running daemon went unnoticed: it acknowledged calls
/// into the deleted data file (lost at its exit). Within the period it now logs what it found,
/// refuses new calls (nothing runs), writes nothing more, and keeps the deleted file open so
/// that what it acknowledged since the swap can be copied out.
#[test]
fn a_store_replaced_under_the_daemon_stops_it_acknowledging_calls() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep", &["Workspace.Read=worktree:100"]);
    read_ok(&d, &token, 0);
    let db = d.db();
    let other = d.dir.path().join("other");
    drop(broker_core::store::Store::create(&other).unwrap());
    let (data_was, lock_was) = (inode(&db.join("data.mdb")), inode(&db.join("lock.mdb")));
    std::fs::remove_dir_all(&db).unwrap();
    let cp = Command::new("cp")
        .arg("-a")
        .arg(&other)
        .arg(&db)
        .status()
        .unwrap();
    assert!(cp.success());
    let (data_is, lock_is) = (inode(&db.join("data.mdb")), inode(&db.join("lock.mdb")));
    let replaced = Instant::now();
    d.wait_for_log("was replaced or removed while this daemon served it");
    assert!(
        replaced.elapsed() < Duration::from_secs(5),
        "{:?}",
        replaced.elapsed()
    );
    // The descriptor of the deleted data file, as the daemon names it.
    let pid = d.child.id();
    let fd = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .find(|e| {
            std::fs::read_link(e.path())
                .is_ok_and(|l| l.to_string_lossy().ends_with("data.mdb (deleted)"))
        })
        .map(|e| format!("/proc/{pid}/fd/{}", e.file_name().to_string_lossy()))
        .expect("the daemon keeps the deleted data file open");
    let shown = db.display();
    let line = format!(
        "the store {shown} was replaced or removed while this daemon served it (data.mdb is another file (inode {data_is}, was {data_was}), lock.mdb is another file (inode {lock_is}, was {lock_was})): it refuses new calls and writes nothing more, since what it wrote would go to files no path names; the calls it acknowledged since the swap are only in the deleted data file, which it keeps open: copy it out (`cp {fd} SAFE_PLACE/data.mdb`) before you stop it, then restart it on the store now at {shown}"
    );
    assert!(d.log().contains(&line), "{line}\n{}", d.log());
    // Refused before anything runs, as a full store refuses.
    let before = std::fs::read(db.join("data.mdb")).unwrap();
    let v = mcp_call(&d, &token, "ailang-read", json!({"path": "x"})).json();
    assert_eq!(
        v,
        json!({"jsonrpc": "2.0", "id": 7, "error": {"code": -32603, "message": "host callback capacity exceeded"}})
    );
    assert_eq!(std::fs::read(db.join("data.mdb")).unwrap(), before);
    // What the daemon wrote before is still there to copy out, and opens as a store.
    let rescued = d.dir.path().join("rescued");
    std::fs::create_dir(&rescued).unwrap();
    std::fs::copy(&fd, rescued.join("data.mdb")).unwrap();
    let (code, out, err) = worldd(
        &["session", "list", "--db", rescued.to_str().unwrap()],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("ep"), "{out}");
}

/// A store file the daemon could not look at for a moment (`EACCES` while an operator fixes a
/// directory's mode, a link loop, an I/O error) was taken for a store "replaced or removed":
/// the daemon refused every call until restarted and told the operator to copy a "deleted"
/// file out of /proc. Only a file that is not there (or a path whose directory is no directory)
/// is gone; any other failure is warned of once and looked at again, and the daemon serves on.
/// (Run as root, a mode does not stop a look: a link loop where `data.mdb` was, put there and
/// taken away by `rename`, so that the path never names nothing, fails it the same way.)
#[test]
fn a_store_the_daemon_cannot_look_at_for_a_moment_is_warned_of_once_and_still_served() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep", &["Workspace.Read=worktree:100"]);
    read_ok(&d, &token, 0);
    let db = d.db();
    let data = db.join("data.mdb");
    let kept = db.join("kept");
    std::fs::hard_link(&data, &kept).unwrap();
    let looping = db.join("loop");
    std::os::unix::fs::symlink("data.mdb", &looping).unwrap();
    std::fs::rename(&looping, &data).unwrap();
    let warning = format!(
        "store {}: cannot look at the store's files (data.mdb: Too many levels of symbolic links (os error 40)); still serving, looking again every 1s (a store replaced meanwhile is seen once they can be looked at)",
        db.display()
    );
    d.wait_for_log(&warning);
    // Two more looks meet the same failure: not said again.
    std::thread::sleep(Duration::from_millis(2500));
    std::fs::rename(&kept, &data).unwrap();
    d.wait_for_log(&format!(
        "store {}: its files can be looked at again, and are the ones this daemon opened",
        db.display()
    ));
    let log = d.log();
    assert_eq!(log.matches(&warning).count(), 1, "{log}");
    assert!(!log.contains("was replaced or removed"), "{log}");
    read_ok(&d, &token, 1);
    assert_eq!(
        get(&d.url("/v1/health"), None).json()["status"],
        "ok",
        "{log}"
    );
}

/// A backup's `data.mdb` copied over a serving daemon's in place (`cp`, the same inode) went
/// unnoticed: the daemon answered `ok` to the next calls and wrote them over the older log,
/// told agents that calls it had run were "safe to send", and committed entries naming results
/// it never stored (its memory of the store vouched for them). From its next look (or write)
/// it now logs what it found and refuses new calls, and the file keeps what the copy put there:
/// a store `doctor` finds whole.
#[test]
fn a_backup_copied_over_the_served_data_file_stops_the_daemon_writing() {
    let d = Daemon::start(WS, &[]);
    let token = d.session(
        "ep",
        &[
            "Workspace.Read=worktree:100",
            "Workspace.Write=worktree:100",
        ],
    );
    let db = d.db();
    let backup = d.dir.path().join("bk");
    let (code, out, err) = worldd(&["backup", "--db", path_str(&db), path_str(&backup)], None);
    assert_eq!(code, 0, "{out}{err}");
    let write = |name: &str| {
        mcp_call(
            &d,
            &token,
            "ailang-write",
            json!({"path": format!("{name}.txt"), "content": name}),
        )
        .sse_json()
    };
    for name in ["a1", "a2", "a3"] {
        let v = write(name);
        assert_eq!(v["result"]["structuredContent"]["ok"], true, "{name}: {v}");
    }
    let data = db.join("data.mdb");
    let was = inode(&data);
    std::fs::copy(backup.join("data.mdb"), &data).unwrap();
    assert_eq!(inode(&data), was, "not copied in place");
    d.wait_for_log(&format!(
        "the store {}'s data file was rolled back or written by another process while this daemon served it (its last transaction is ",
        db.display()
    ));
    assert!(
        d.log().contains(": a backup copied over it?): it refuses new calls and writes nothing more, since what it wrote would go over a store that no longer holds what it acknowledged; stop it, run `worldd doctor` on the store, and start it again"),
        "{}",
        d.log()
    );
    let copied = std::fs::read(&data).unwrap();
    let v = mcp_call(
        &d,
        &token,
        "ailang-write",
        json!({"path": "b1.txt", "content": "b1"}),
    )
    .json();
    assert_eq!(
        v,
        json!({"jsonrpc": "2.0", "id": 7, "error": {"code": -32603, "message": "host callback capacity exceeded"}})
    );
    assert!(!d.root().join("ep").join("b1.txt").exists());
    assert_eq!(std::fs::read(&data).unwrap(), copied);
    // The refused call's line says what the daemon found: a rollback, not replaced files.
    d.wait_for_log("call: the store's data file was rolled back or written by another process while this daemon served it (the error logged when it was seen says what it found); stop the daemon, run `worldd doctor` on the store, and start it again");
    assert!(
        d.log().lines().any(|l| l.contains("outcome=store_replaced")
            && l.contains("call: the store's data file was rolled back")),
        "{}",
        d.log()
    );
    assert!(
        !d.log()
            .contains("call: the store's files were replaced or removed"),
        "{}",
        d.log()
    );
    // Beside the refusing daemon, which writes nothing more.
    let (code, out, err) = worldd(&["doctor", "--db", path_str(&db)], None);
    assert_eq!(code, 0, "{out}{err}");
}

/// After a backup's `data.mdb` was copied over the served one, the daemon refused new calls
/// but still answered a call the copy lacks as `404 not-found` ("safe to send"), though it had
/// run and been acknowledged: resending it would run its effect twice. Once the rollback is
/// seen, a call absent from the store is `503`, saying why it cannot be told from one never sent.
#[test]
fn a_call_absent_from_a_rolled_back_store_is_not_said_safe_to_send() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep", &["Workspace.Write=worktree:100"]);
    let db = d.db();
    let backup = d.dir.path().join("bk");
    let (code, out, err) = worldd(&["backup", "--db", path_str(&db), path_str(&backup)], None);
    assert_eq!(code, 0, "{out}{err}");
    let v = mcp(
        &d,
        &token,
        "tools/call",
        json!({"name": "ailang-write", "arguments": {"path": "k1.txt", "content": "k1"},
               "_meta": {"world/idempotencyKey": "k1"}}),
    )
    .sse_json();
    assert_eq!(v["result"]["structuredContent"]["ok"], true, "{v}");
    let a = get(&d.url("/v1/calls/mcp/k1"), Some(&token));
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(a.json()["state"], "committed", "{}", a.text());

    let data = db.join("data.mdb");
    std::fs::copy(backup.join("data.mdb"), &data).unwrap();
    d.wait_for_log(&format!(
        "the store {}'s data file was rolled back or written by another process while this daemon served it (its last transaction is ",
        db.display()
    ));
    for key in ["k1", "never-sent"] {
        let a = get(&d.url(&format!("/v1/calls/mcp/{key}")), Some(&token));
        assert_eq!(a.status, 503, "{key}: {}", a.text());
        assert_eq!(
            a.json()["error"],
            json!({"class": "Unavailable", "message": format!("call mcp:ep:{key} is not in the store, but whether it ran cannot be said: the store's data file was rolled back or written by another process while this daemon served it, and what it holds now may lack calls the daemon acknowledged; do not send it again before the daemon is stopped and `worldd doctor` has checked the store")}),
            "{key}"
        );
        let a = get(
            &d.url(&format!("/v1/invocations/mcp:ep:{key}")),
            Some(&token),
        );
        assert_eq!(a.status, 503, "{key}: {}", a.text());
    }
    // A2A's task reads said "Task not found" (never sent) for the same reason.
    for method in ["tasks/get", "tasks/cancel"] {
        let a = post_json(
            &d.url("/a2a/"),
            Some(&token),
            &json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"id": "a1"}}),
        );
        assert_eq!(
            a.json()["error"],
            json!({"code": -32603, "message": "call a2a:ep:a1 is not in the store, but whether it ran cannot be said: the store's data file was rolled back or written by another process while this daemon served it, and what it holds now may lack calls the daemon acknowledged; do not send it again before the daemon is stopped and `worldd doctor` has checked the store"}),
            "{method}: {}",
            a.text()
        );
    }
}
