//! What `doctor` and `why` say of a store damaged in one place: each finding names the row
//! that is wrong and what is wrong with it, where it is, and an intact row is not blamed for
//! it. The damage is made with LMDB directly, on a stopped store, as a bad restore, a
//! byte-level repair or a tamper leaves it.

mod common;

use std::path::{Path, PathBuf};

use common::why::{online, reads_then_stopped, session_file, tamper};
use common::*;
use serde_json::json;

const WS: &[&str] = &["worldd_workspace"];

/// A stopped store in which episode `ep1` read `a.txt` as tasks `r1`..`r6` (entries 1..6).
fn six_reads() -> (tempfile::TempDir, PathBuf) {
    reads_then_stopped(6)
}

fn key(i: u64) -> [u8; 8] {
    i.to_be_bytes()
}

fn doctor(db: &Path) -> (i32, String) {
    let (code, out, err) = worldd(&["doctor", "--db", db.to_str().unwrap()], None);
    (code, format!("{out}{err}"))
}

#[test]
fn doctor_names_a_wrong_pending_row_and_does_not_blame_the_spend_counters() {
    let (_kept, db) = six_reads();
    // The pending row of a call that committed, naming its intent.
    tamper(&db, "pending", |w, t| {
        t.put(w, b"a2a:ep1:r2", &key(3)).unwrap();
    });
    let (code, out) = doctor(&db);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains(
            "  ✗ 12 journal record(s); the pending index DISAGREES with the journal\n      pending row a2a:ep1:r2 names journal #3, but a2a:ep1:r2 has no intent without outcome\n"
        ),
        "{out}"
    );
    assert!(!out.contains("spend counters DISAGREE"), "{out}");
}

/// Append to `invocation_rows` a row for `id` whose body is a byte copy of `of`'s row.
fn alias_invocation_row(db: &Path, id: &str, of: &str) {
    tamper(db, "invocation_rows", |w, t| {
        let mut body = None;
        let mut last = 0;
        for item in t.iter(w).unwrap() {
            let (k, v) = item.unwrap();
            last = u64::from_be_bytes(k.try_into().unwrap());
            let n = 2 + usize::from(u16::from_be_bytes([v[0], v[1]]));
            if &v[2..n] == of.as_bytes() {
                body = Some(v[n..].to_vec());
            }
        }
        let mut row = (id.len() as u16).to_be_bytes().to_vec();
        row.extend_from_slice(id.as_bytes());
        row.extend_from_slice(&body.expect("the row copied"));
        t.put(w, &key(last + 1), &row).unwrap();
    });
}

#[test]
fn an_invocation_row_holding_another_calls_task_state_is_damage_to_doctor_why_and_a_resend() {
    let (kept, db) = six_reads();
    alias_invocation_row(&db, "a2a:ep1:zz", "a2a:ep1:r2");

    let (code, out) = doctor(&db);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains("      invocation row a2a:ep1:zz: its journal state is a2a:ep1:r2's\n"),
        "{out}"
    );
    assert!(
        out.contains("      invocation row a2a:ep1:zz: its task state is a2a:ep1:r2's\n"),
        "{out}"
    );
    assert!(
        out.contains("  ✓ 6 committed call(s), each at the entry its task state names\n"),
        "{out}"
    );

    let (code, out, err) = worldd(&["why", "a2a:ep1:zz", "--db", db.to_str().unwrap()], None);
    assert_eq!(code, 3, "{out}{err}");
    assert_eq!(
        err,
        "worldd: why: the task state stored for a2a:ep1:zz is a2a:ep1:r2's: the store is damaged or was tampered with; do not trust this answer\n"
    );

    // Served: a resend of the key with r2's arguments is not answered with r2's result.
    std::fs::remove_dir_all(kept.path().join("plugins")).unwrap();
    let d = Daemon::start_in(kept, WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:9"]);
    let answer = a2a(&d, &token, "zz", "ailang-read", json!({"path": "a.txt"}));
    assert_eq!(answer["result"], serde_json::Value::Null, "{answer}");
    assert_eq!(answer["error"]["code"], json!(-32603), "{answer}");
    // Store damage reads to the agent as the contract's text; the log says what it is.
    assert_eq!(
        answer["error"]["message"], "transition invocation is not available in this daemon",
        "{answer}"
    );
    // The line is written before the answer, and read by the harness's thread after it may be.
    d.wait_for_log("a2a refusal: store failure: store is damaged: the task state of a2a:ep1:zz says it committed at entry 2, but entry 2's record is a2a:ep1:r2's: the log lost its end or was rewritten; it is not replayed as committed");
    // Read back with tasks/get: not answered as r2's committed task either.
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": "zz"}});
    let got = post_json(&d.url("/a2a/"), Some(&token), &body).json();
    assert_eq!(got["result"], serde_json::Value::Null, "{got}");
    assert_eq!(
        got["error"]["message"],
        "task a2a:ep1:zz is damaged: the task state of a2a:ep1:zz says it committed at entry 2, but entry 2's record is a2a:ep1:r2's: the log lost its end or was rewritten; it is not replayed as committed; it is not answered as committed (run worldd doctor, and restore the store from a backup)",
        "{got}"
    );
}

#[test]
fn an_entry_missing_from_the_middle_of_the_log_is_said_as_a_hole_not_a_lost_end() {
    let (kept, db) = six_reads();
    tamper(&db, "entries", |w, t| {
        assert!(t.delete(w, &key(3)).unwrap());
    });
    let db = db.to_str().unwrap();

    let (code, out, err) = worldd(&["why", "3", "--db", db], None);
    assert_eq!(code, 3, "{out}{err}");
    assert_eq!(
        err,
        "worldd: why: entry 3 is missing from the log (entries 2 and 4 are there): run worldd doctor; do not trust this answer\n"
    );
    let (code, out, err) = worldd(&["why", "a2a:ep1:r3", "--db", db], None);
    assert_eq!(code, 3, "{out}{err}");
    assert_eq!(
        err,
        "worldd: why: the task state of a2a:ep1:r3 says it committed at entry 3, but entry 3 is missing from the log (entries 2 and 4 are there): run worldd doctor; do not trust this answer\n"
    );
    let (code, out) = doctor(Path::new(db));
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains("      the task state of a2a:ep1:r3 says it committed at entry 3, but entry 3 is missing from the log (entries 2 and 4 are there)\n"),
        "{out}"
    );
    assert!(!out.contains("lost its end"), "{out}");
    // Past the head it is not a hole: an entry the log does not hold yet.
    let (code, _, err) = worldd(&["why", "9", "--db", db], None);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "worldd: why: entry 9 not found (the log's last entry is 6)\n"
    );
    // Online alike: the hole is damage (exit 3), and the entry after it is broken on both.
    let (offline, online, said) = why_each(kept, Path::new(db));
    assert_eq!(offline, [0, 0, 0, 3, 3, 0, 0], "{said}");
    assert_eq!(online, offline, "{said}");
    assert!(
        said.contains("online why 3:\nworldd: why: entry 3 is missing from the log (entries 2 and 4 are there): run worldd doctor; do not trust this answer\n"),
        "{said}"
    );
}

/// The row of entry `i` as stored: world ref, entry length, hash column, entry, world.
fn log_row(db: &Path, i: u64) -> Vec<u8> {
    let mut row = None;
    tamper(db, "entries", |w, t| {
        row = t.get(w, &key(i)).unwrap().map(<[u8]>::to_vec);
    });
    row.expect("the row")
}

/// `why I` for each entry `0..=6`, offline and through a daemon serving the store: the exit
/// codes, in that order.
fn why_each(kept: tempfile::TempDir, db: &Path) -> (Vec<i32>, Vec<i32>, String) {
    let db = db.to_str().unwrap();
    let mut said = String::new();
    let offline = (0..=6)
        .map(|i| {
            let (code, out, err) = worldd(&["why", &i.to_string(), "--db", db], None);
            said.push_str(&format!("offline why {i}:\n{out}{err}"));
            code
        })
        .collect();
    std::fs::remove_dir_all(kept.path().join("plugins")).unwrap();
    let d = Daemon::start_in(kept, WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:9"]);
    let scratch = tempfile::tempdir().unwrap();
    let session = session_file(scratch.path(), "agent", &token);
    let online = (0..=6)
        .map(|i| {
            let (code, out, err) = online(&d.addr, &session, &[&i.to_string()], None);
            said.push_str(&format!("online why {i}:\n{out}{err}"));
            code
        })
        .collect();
    (offline, online, said)
}

#[test]
fn an_edited_entry_hash_text_is_blamed_once_where_it_is_online_and_offline() {
    let (kept, db) = six_reads();
    tamper(&db, "entries", |w, t| {
        let mut row = t.get(w, &key(3)).unwrap().unwrap().to_vec();
        let at = row
            .windows(20)
            .position(|s| s == b"\"entryHash\":\"sha256:")
            .unwrap()
            + 20;
        row[at] = if row[at] == b'0' { b'1' } else { b'0' };
        t.put(w, &key(3), &row).unwrap();
    });
    let (offline, online, said) = why_each(kept, &db);
    assert_eq!(offline, [0, 0, 0, 3, 0, 0, 0], "{said}");
    assert_eq!(online, offline, "{said}");
}

#[test]
fn a_copy_of_an_entry_in_the_next_row_is_named_and_the_entry_it_copies_is_not_blamed() {
    let (kept, db) = six_reads();
    let entry_2 = log_row(&db, 2);
    tamper(&db, "entries", |w, t| {
        t.put(w, &key(3), &entry_2).unwrap();
    });
    let (code, out) = doctor(&db);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains("      entry 3: entry: this row holds a copy of entry 2 (its header says index 2 at position 3)\n"),
        "{out}"
    );
    assert!(!out.contains("entry 2: "), "{out}");
    assert!(!out.contains("hash column"), "{out}");
    let (code, out, _) = worldd(&["why", "2", "--db", db.to_str().unwrap()], None);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(
            "; row 3 holds a copy of it, which the store's index of entry hashes finds first\n"
        ),
        "{out}"
    );
    // Entry 4 names the hash of the entry 3 that is gone: it is blamed on both sources, as
    // is the copy; entry 2 on neither.
    let (offline, online, said) = why_each(kept, &db);
    assert_eq!(offline, [0, 0, 0, 3, 3, 0, 0], "{said}");
    assert_eq!(online, offline, "{said}");
}

/// A key lost from the content-address index makes its invocation read as absent: the daemon
/// cannot tell a lost key from one never sent without reading every invocation row, which it
/// does not do per call, so a keyed call resent then runs again (cli.md, `doctor`). `doctor`
/// names the row whose key is gone: it must pass before `serve` after a repair or a restore.
#[test]
fn a_lost_index_key_of_a_committed_call_is_named_by_doctor_and_its_resend_runs_again() {
    use sha2::Digest;
    let (kept, db) = six_reads();
    {
        let store = broker_core::store::Store::open(&db, Default::default()).unwrap();
        store.merge_ref_tail().unwrap();
        let mut k = sha2::Sha256::digest(b"a2a:ep1:r2").to_vec();
        k.push(b'i');
        assert!(store
            .raw_get(broker_core::store::RawTable::Refs, &k)
            .unwrap()
            .is_some());
        store
            .raw_overwrite(broker_core::store::RawTable::Refs, k, Vec::new())
            .unwrap();
    }
    let (code, out) = doctor(&db);
    assert_eq!(code, 3, "{out}");
    let digest = hex::encode(sha2::Sha256::digest(b"a2a:ep1:r2"));
    assert!(
        out.contains(&format!("      row 1 of invocation_rows (invocation id digest sha256:{digest}) is below its partition's watermark 6, but refs has no key for it\n")),
        "{out}"
    );

    std::fs::remove_dir_all(kept.path().join("plugins")).unwrap();
    let d = Daemon::start_in(kept, WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:9"]);
    let answer = a2a(&d, &token, "r2", "ailang-read", json!({"path": "a.txt"}));
    assert_eq!(
        answer["result"]["metadata"]["replayed"],
        json!(false),
        "{answer}"
    );
    assert_eq!(
        answer["result"]["metadata"]["entry_index"],
        json!(7),
        "{answer}"
    );
}

/// A stray journal row at the last sequence number: the sequence wrapped to 0 and the next
/// call's outcome was written over its own intent (the call answered ok). Such a store now
/// stops the start at store-open, as a damaged log head does, and nothing is written.
#[test]
fn a_stray_last_journal_row_stops_the_start_and_overwrites_nothing() {
    let (kept, db) = six_reads();
    tamper(&db, "journal", |w, t| {
        let row = t.get(w, &key(12)).unwrap().unwrap().to_vec();
        t.put(w, &key(u64::MAX), &row).unwrap();
    });
    let rows = |db: &Path| {
        let mut all = Vec::new();
        tamper(db, "journal", |w, t| {
            for item in t.iter(w).unwrap() {
                let (k, v) = item.unwrap();
                all.push((k.to_vec(), v.to_vec()));
            }
        });
        all
    };
    let before = rows(&db);
    let root = kept.path().join("worktrees");
    let r = refused_serve_on(&db, &root, &[], kept.path());
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.line.starts_with(&format!(
            "worldd: daemon startup failed at store-open: world store {} is damaged: the journal's last row is #18446744073709551615, and no sequence number follows it",
            db.display()
        )),
        "{}",
        r.stderr
    );
    assert_eq!(rows(&db), before);
}

/// `usage` over an invocation row that does not decode exited 2 with `cannot read …: store is
/// damaged: …` and no advice, where `doctor` and `why` exit 3 and say to restore the store. It
/// is damage too, said with what to do.
#[test]
fn usage_over_a_damaged_invocation_row_exits_3_sending_to_doctor_and_a_backup() {
    let (_kept, db) = six_reads();
    let mut last = 0;
    tamper(&db, "invocation_rows", |w, t| {
        for item in t.iter(w).unwrap() {
            last = u64::from_be_bytes(item.unwrap().0.try_into().unwrap());
        }
        t.put(w, &key(last + 1), b"\xff").unwrap();
    });
    let (code, out, err) = worldd(&["usage", "--db", db.to_str().unwrap()], None);
    assert_eq!(
        (code, out.as_str(), err),
        (
            3,
            "",
            format!(
                "worldd: cannot read {}: store is damaged: invocation row {} is damaged; run worldd doctor, and restore the store from a backup\n",
                db.display(),
                last + 1
            )
        )
    );
}
