//! One log row that no longer decodes (a flipped byte in its entry JSON), served by a running
//! daemon: the route of that entry says it is damaged and which entry, pages of summaries
//! spanning it are still answered with the position marked damaged, and online `why` confines
//! the damage where offline `why` does. The damage is made with LMDB directly, on a stopped
//! store.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::json;

const WS: &[&str] = &["worldd_workspace"];

/// What serde says of the flipped member, in every message that names the damage.
const CAUSE: &str =
    "unknown field `headeR`, expected one of `header`, `entryHash`, `transitionRef`";

type Table = heed::Database<'static, heed::types::Bytes, heed::types::Bytes>;

/// A stopped store in which episode `ep1` read `a.txt` as tasks `r1`..`r4` (entries 1..4),
/// with row 2's `"header"` member renamed `"headeR"` (one flipped bit).
fn damaged_row_2() -> (tempfile::TempDir, PathBuf) {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:9"]);
    std::fs::write(d.root().join("ep1/a.txt"), "alpha").unwrap();
    for i in 1..=4 {
        a2a(
            &d,
            &token,
            &format!("r{i}"),
            "ailang-read",
            json!({"path": "a.txt"}),
        );
    }
    let kept = d.halt();
    let db = kept.path().join("db");
    flip_header(&db, 2);
    (kept, db)
}

fn flip_header(db: &Path, index: u64) {
    // SAFETY: no store handle is open on `db` in this process while this one is, and the
    // daemon that wrote it has stopped.
    let env = unsafe { heed::EnvOpenOptions::new().max_dbs(32).open(db).unwrap() };
    let table: Table = env
        .create_databases_and_commit(env.write_txn().unwrap(), |dbo, wtxn| {
            dbo.create_database(wtxn, Some("entries"))
                .map(heed::CommitOrAbort::<_, ()>::Commit)
        })
        .unwrap()
        .unwrap_commit();
    let mut w = env.write_txn().unwrap();
    let key = index.to_be_bytes();
    let mut row = table.get(&w, &key).unwrap().unwrap().to_vec();
    let at = row.windows(8).position(|s| s == b"\"header\"").unwrap();
    row[at + 6] = b'R';
    table.put(&mut w, &key, &row).unwrap();
    w.commit().unwrap();
    env.prepare_for_closing().wait();
}

fn serve(kept: tempfile::TempDir) -> Daemon {
    std::fs::remove_dir_all(kept.path().join("plugins")).unwrap();
    Daemon::start_in(kept, WS, &[])
}

#[test]
fn the_route_of_an_undecodable_log_row_answers_500_damaged_naming_the_entry() {
    let (kept, _db) = damaged_row_2();
    let d = serve(kept);
    let ops = d.operator_session("ops", &[]);
    let a = get(&d.url("/v1/log/2"), Some(&ops));
    assert_eq!(
        (a.status, a.json()),
        (
            500,
            json!({"error": {"class": "Damaged", "message": format!(
                "log entry 2 is damaged: {CAUSE}; run worldd doctor"
            )}})
        )
    );
    // Its neighbours are served as ever.
    assert_eq!(get(&d.url("/v1/log/1"), Some(&ops)).status, 200);
    assert_eq!(get(&d.url("/v1/log/3"), Some(&ops)).status, 200);
}
