//! `session list` on a store damaged where its session records are: it exited 2, the code of
//! a store that does not open, with no advice; damage met reading is exit 3, with the way out,
//! as `doctor` and `why` say it.

mod common;

use common::*;

#[test]
fn session_list_meeting_a_damaged_page_is_an_integrity_failure_with_the_way_out() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let id = {
        let store = broker_core::store::Store::create(&db).unwrap();
        broker_core::session::mint(
            &store,
            "ep",
            vec!["Workspace.Read=worktree:5".parse().unwrap()],
            3600,
            1_800_000_000,
        )
        .unwrap()
        .session
        .credential_id
    };
    // The leaf pages holding the session record (keyed by its id) made no leaf: LMDB finds a
    // page of the wrong type reading the table, past the open.
    let path = db.join("data.mdb");
    let mut bytes = std::fs::read(&path).unwrap();
    let page = 4096;
    let mut hit = 0;
    for start in (0..bytes.len()).step_by(page) {
        let p = &bytes[start..start + page];
        let leaf = u16::from_le_bytes([p[10], p[11]]) & 0x02 != 0;
        if leaf && p.windows(id.len()).any(|w| w == id.as_bytes()) {
            bytes[start + 10..start + 12].copy_from_slice(&0x10u16.to_le_bytes());
            hit += 1;
        }
    }
    assert!(hit > 0, "no leaf page holds {id}");
    std::fs::write(&path, bytes).unwrap();
    let (code, out, err) = worldd(&["session", "list", "--db", path_str(&db)], None);
    assert_eq!((code, out.as_str()), (3, ""), "{err}");
    assert_eq!(
        err,
        "worldd: store is damaged: MDB_CORRUPTED: Located page was wrong type: a page the store names is missing or malformed; run worldd doctor, and restore the store from a backup\n"
    );
}
