//! One log row that no longer decodes (a flipped byte in its entry JSON), served by a running
//! daemon: the route of that entry says it is damaged and which entry, pages of summaries
//! spanning it are still answered with the position marked damaged, and online `why` confines
//! the damage where offline `why` does. The damage is made with LMDB directly, on a stopped
//! store.

mod common;

use std::path::PathBuf;

use common::why::{online, reads_then_stopped, session_file, tamper};
use common::*;
use serde_json::json;

const WS: &[&str] = &["worldd_workspace"];

/// What serde says of the flipped member, in every message that names the damage.
const CAUSE: &str =
    "unknown field `headeR`, expected one of `header`, `entryHash`, `transitionRef`";

/// A stopped store in which episode `ep1` read `a.txt` as tasks `r1`..`r4` (entries 1..4),
/// with row 2's `"header"` member renamed `"headeR"` (one flipped bit).
fn damaged_row_2() -> (tempfile::TempDir, PathBuf) {
    let (kept, db) = reads_then_stopped(4);
    tamper(&db, "entries", |w, table| {
        let key = 2u64.to_be_bytes();
        let mut row = table.get(w, &key).unwrap().unwrap().to_vec();
        let at = row.windows(8).position(|s| s == b"\"header\"").unwrap();
        row[at + 6] = b'R';
        table.put(w, &key, &row).unwrap();
    });
    (kept, db)
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

#[test]
fn a_summaries_page_spanning_an_undecodable_row_is_answered_with_that_position_marked_damaged() {
    let (kept, _db) = damaged_row_2();
    let d = serve(kept);
    let ops = d.operator_session("ops", &[]);
    let agent = d.session("ep1", &["Workspace.Read=worktree:9"]);
    let reason = format!("log entry 2 is damaged: {CAUSE}; run worldd doctor");
    for token in [&ops, &agent] {
        let a = get(&d.url("/v1/log/summaries?from=0&limit=5"), Some(token));
        assert_eq!(a.status, 200, "{}", a.text());
        let page = a.json();
        let listed: Vec<u64> = page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["header"]["entryIndex"].as_u64().unwrap())
            .collect();
        assert_eq!(listed, [0, 1, 3, 4]);
        assert_eq!(
            page["damaged"],
            json!([{"index": 2, "damaged": true, "reason": reason}])
        );
        assert_eq!(
            (&page["from"], &page["next"], &page["head"]),
            (&json!(0), &json!(5), &json!(4))
        );
        // A page that does not span it says nothing of it: no `damaged` member at all.
        let a = get(&d.url("/v1/log/summaries?from=3&limit=2"), Some(token));
        assert_eq!(a.status, 200);
        assert_eq!(a.json().get("damaged"), None, "{}", a.text());
    }
    // `log tail` reads those pages: it lists the entries around the damaged row.
    let scratch = tempfile::tempdir().unwrap();
    let session = session_file(scratch.path(), "ops", &ops);
    let url = d.url("");
    let (code, out, err) = worldd(
        &[
            "log",
            "tail",
            "--addr",
            &url,
            "--session",
            path_str(&session),
        ],
        None,
    );
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    assert_eq!(out.lines().count(), 4, "{out}");
}

#[test]
fn a_log_stream_reaching_an_undecodable_row_ends_with_a_damaged_error_event() {
    let (kept, _db) = damaged_row_2();
    let d = serve(kept);
    let ops = d.operator_session("ops", &[]);
    let a = get(&d.url("/v1/log/stream?from=0"), Some(&ops));
    assert_eq!(a.status, 200);
    let message = format!("log entry 2 is damaged: {CAUSE}; run worldd doctor");
    let data = json!({"error": {"class": "Damaged", "message": message}}).to_string();
    assert_eq!(a.text(), format!("event: error\ndata: {data}\n\n"));
}

/// Offline, entry 3's link to entry 2 is checked through the store's index of entry hashes,
/// which still names entry 2; a daemon serves no such index, and entry 2's row is all that
/// could show the link, so online that one link is broken (said why) and the rest verified.
#[test]
fn online_why_marks_the_entry_link_broken_after_an_undecodable_row_and_verifies_the_rest() {
    let (kept, db) = damaged_row_2();
    let db = path_str(&db).to_owned();
    let handles = ["0", "1", "2", "3", "4", "head"];
    let mut said = String::new();
    let mut offline = Vec::new();
    for i in handles {
        let (code, out, err) = worldd(&["why", i, "--db", &db], None);
        said.push_str(&format!("offline why {i}:\n{out}{err}"));
        offline.push(code);
    }
    let d = serve(kept);
    let ops = d.operator_session("ops", &[]);
    let scratch = tempfile::tempdir().unwrap();
    let session = session_file(scratch.path(), "ops", &ops);
    let mut online_codes = Vec::new();
    for i in handles {
        let (code, out, err) = online(&d.addr, &session, &[i], None);
        said.push_str(&format!("online why {i}:\n{out}{err}"));
        online_codes.push(code);
    }
    assert_eq!(offline, [0, 0, 3, 0, 0, 0], "{said}");
    assert_eq!(online_codes, [0, 0, 3, 3, 0, 0], "{said}");

    let served = format!(
        "the daemon at http://{} does not serve it: log entry 2 is damaged: {CAUSE}; run worldd doctor",
        d.addr
    );
    let (code, out, err) = online(&d.addr, &session, &["2"], None);
    assert_eq!(code, 3);
    assert_eq!(
        out,
        format!("why: entry 2 (matched by index)\n  ✗ entry   -  {served}\n")
    );
    assert_eq!(
        err,
        format!("worldd: why: 1 of 1 link(s) broken: what the daemon at http://{} serves does not match its content address; do not trust this answer\n", d.addr)
    );
    let (code, out, err) = online(&d.addr, &session, &["3"], None);
    assert_eq!(code, 3, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 11, "{out}");
    let broken: Vec<&&str> = lines.iter().filter(|l| l.starts_with("  ✗")).collect();
    assert_eq!(broken.len(), 1, "{out}");
    assert!(broken[0].starts_with("  ✗ entry   sha256:"), "{out}");
    assert!(
        broken[0].ends_with(&format!(
            " cannot be checked: entry 2 cannot be read: {served}"
        )),
        "{out}"
    );
    assert!(broken[0].contains("  prevEntryHash sha256:"), "{out}");
    assert_eq!(
        err,
        format!("worldd: why: 1 of 10 link(s) broken: what the daemon at http://{} serves does not match its content address; do not trust this answer\n", d.addr)
    );
}
