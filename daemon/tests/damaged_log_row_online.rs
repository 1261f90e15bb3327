//! One log row that no longer decodes (a flipped byte in its entry JSON), served by a running
//! daemon: the route of that entry says it is damaged and which entry, pages of entries and of
//! summaries spanning it are still answered with the position marked damaged, a log stream
//! sends the entries before it and then names it, and online `why` confines the damage where
//! offline `why` does. The damage is made with LMDB directly, on a stopped store.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::net::TcpStream;
use std::path::PathBuf;

use common::why::{online, reads_then_stopped, session_file, tamper};
use common::*;
use serde_json::{json, Value};

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
fn a_log_page_spanning_an_undecodable_row_lists_the_intact_entries_and_names_it_damaged() {
    let (kept, _db) = damaged_row_2();
    let d = serve(kept);
    let ops = d.operator_session("ops", &[]);
    let agent = d.session("ep1", &["Workspace.Read=worktree:9"]);
    let other = d.session("ep2", &["Workspace.Read=worktree:9"]);
    let damaged = json!([{
        "index": 2,
        "damaged": true,
        "reason": format!("log entry 2 is damaged: {CAUSE}; run worldd doctor"),
    }]);
    // Each listed entry is served as its own route serves it.
    let entries = |at: &[u64]| -> Vec<Value> {
        at.iter()
            .map(|i| get(&d.url(&format!("/v1/log/{i}")), Some(&ops)).json())
            .collect()
    };
    // The damaged row is named to every reader, as summaries name it: headers are public by
    // index. Another episode's calls stay unlisted.
    for (token, listed) in [
        (&ops, &[0, 1, 3, 4][..]),
        (&agent, &[0, 1, 3, 4][..]),
        (&other, &[0][..]),
    ] {
        let a = get(&d.url("/v1/log?from=0"), Some(token));
        assert_eq!(
            (a.status, a.json()),
            (
                200,
                json!({"items": entries(listed), "next": 5, "damaged": damaged})
            )
        );
    }
    // The damaged row counts towards `limit`, and `next` goes past it so a client pages on.
    let a = get(&d.url("/v1/log?from=0&limit=3"), Some(&ops));
    assert_eq!(
        (a.status, a.json()),
        (
            200,
            json!({"items": entries(&[0, 1]), "next": 3, "damaged": damaged})
        )
    );
    // A page that does not span it says nothing of it: no `damaged` member at all.
    let a = get(&d.url("/v1/log?from=3"), Some(&ops));
    assert_eq!(
        (a.status, a.json()),
        (200, json!({"items": entries(&[3, 4]), "next": 5}))
    );
    let a = get(&d.url("/v1/log?from=0&limit=2"), Some(&ops));
    assert_eq!(
        (a.status, a.json()),
        (200, json!({"items": entries(&[0, 1]), "next": 2}))
    );
}

/// An SSE event: its `id` (when it has one), its name and its data.
type SseEvent = (Option<String>, String, Value);

/// The events of an SSE body as `(id, event, data)`: each event this stream sends has one
/// `data` line (its JSON), so an event is complete at its `data` line. Lines that are neither
/// (blank separators, the chunk sizes of a raw HTTP/1.1 body) are skipped.
fn sse_events(lines: impl IntoIterator<Item = String>) -> Vec<SseEvent> {
    let mut events = Vec::new();
    let (mut id, mut event) = (None, None);
    for line in lines {
        if let Some(v) = line.strip_prefix("id: ") {
            id = Some(v.to_owned());
        } else if let Some(v) = line.strip_prefix("event: ") {
            event = Some(v.to_owned());
        } else if let Some(v) = line.strip_prefix("data: ") {
            let data = serde_json::from_str(v).unwrap_or_else(|e| panic!("{e}: {v}"));
            events.push((id.take(), event.take().expect("an event name"), data));
        }
    }
    events
}

/// The `entry` events of `summaries` (a summaries page's items), as the stream sends them.
fn entry_events(summaries: &[&Value]) -> Vec<SseEvent> {
    summaries
        .iter()
        .map(|s| {
            let id = format!(
                "{} {}",
                s["header"]["entryIndex"],
                s["entryHash"].as_str().unwrap()
            );
            (Some(id), "entry".to_owned(), (*s).clone())
        })
        .collect()
}

/// The summaries of entries 0..=4 that `token` may see, by index (entry 2 has none).
fn summaries(d: &Daemon, token: &str) -> BTreeMap<u64, Value> {
    let a = get(&d.url("/v1/log/summaries?from=0&limit=5"), Some(token));
    assert_eq!(a.status, 200, "{}", a.text());
    a.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["header"]["entryIndex"].as_u64().unwrap(), s.clone()))
        .collect()
}

/// The last event of a stream that reached row 2.
fn damaged_2() -> SseEvent {
    let message = format!("log entry 2 is damaged: {CAUSE}; run worldd doctor");
    (
        None,
        "error".to_owned(),
        json!({"error": {"class": "Damaged", "message": message, "index": 2}}),
    )
}

#[test]
fn a_log_stream_sends_the_entries_before_an_undecodable_row_then_a_damaged_error_event_naming_it() {
    let (kept, _db) = damaged_row_2();
    let d = serve(kept);
    let ops = d.operator_session("ops", &[]);
    let agent = d.session("ep1", &["Workspace.Read=worktree:9"]);
    for token in [&ops, &agent] {
        let s = summaries(&d, token);
        assert_eq!(s.keys().copied().collect::<Vec<_>>(), [0, 1, 3, 4]);
        // (`from`, `Last-Event-ID`, the entries the stream sends before the error event)
        let cases = [
            ("?from=0", None, vec![&s[&0], &s[&1]]),
            ("?from=1", None, vec![&s[&1]]),
            ("", Some("0"), vec![&s[&1]]),
            // A read that starts at the damaged row itself: the error event alone.
            ("?from=2", None, vec![]),
            ("", Some("1"), vec![]),
        ];
        for (query, last_event_id, before) in cases {
            let url = d.url(&format!("/v1/log/stream{query}"));
            let headers = last_event_id.map(|v| ("Last-Event-ID", v));
            let headers = headers.as_slice();
            // `request` reads the body to its end: the stream ended after the error event.
            let a = request("GET", &url, Some(token), headers, None);
            assert_eq!(a.status, 200, "{query} {headers:?}: {}", a.text());
            let mut expected = entry_events(&before);
            expected.push(damaged_2());
            assert_eq!(
                sse_events(a.text().lines().map(str::to_owned)),
                expected,
                "{query} {headers:?}: {}",
                a.text()
            );
        }
    }
    // The whole body, byte for byte, of the stream that reaches it first.
    let a = get(&d.url("/v1/log/stream?from=2"), Some(&ops));
    let data = damaged_2().2.to_string();
    assert_eq!(a.text(), format!("event: error\ndata: {data}\n\n"));
}

#[test]
fn a_log_stream_resumed_past_an_undecodable_row_continues_with_the_entries_after_it() {
    let (kept, _db) = damaged_row_2();
    let d = serve(kept);
    let ops = d.operator_session("ops", &[]);
    let s = summaries(&d, &ops);
    // The two resumes the error event's `index` allows: `?from=I+1` and `Last-Event-ID: I`.
    for (query, header) in [("?from=3", ""), ("", "Last-Event-ID: 2\r\n")] {
        let mut conn = TcpStream::connect(&d.addr).unwrap();
        write!(
            conn,
            "GET /v1/log/stream{query} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {ops}\r\n{header}\r\n",
            d.addr
        )
        .unwrap();
        let rx = lines_of(conn.try_clone().unwrap());
        assert_eq!(next_line(&rx, "status line"), "HTTP/1.1 200 OK");
        // The stream stays open once caught up: read until entry 4 (the head) has come.
        let mut lines = Vec::new();
        loop {
            let line = next_line(&rx, "entry 4");
            let last = line
                .strip_prefix("data: ")
                .and_then(|v| serde_json::from_str::<Value>(v).ok())
                .is_some_and(|v| v["header"]["entryIndex"] == 4);
            lines.push(line);
            if last {
                break;
            }
        }
        assert_eq!(
            sse_events(lines.iter().cloned()),
            entry_events(&[&s[&3], &s[&4]]),
            "{query}{header}: {lines:?}"
        );
    }
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
        format!("worldd: why: 1 of 1 link(s) broken in what the daemon at http://{} serves; do not trust this answer\n", d.addr)
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
        format!("worldd: why: 1 of 10 link(s) broken in what the daemon at http://{} serves; do not trust this answer\n", d.addr)
    );
}
