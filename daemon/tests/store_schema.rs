//! The store's schema through the real binary: `worldd doctor` and `why` on a store written by
//! the schema-1 build (migrated when opened), the daemon serving it, the insertion-ordered
//! `by-semantic-id` paging, and the verbs over a store with a damaged row.

mod common;

use std::path::Path;

use common::*;
use serde_json::{json, Value};

const WS: &[&str] = &["worldd_workspace"];

/// A temp dir holding `db/`, a copy of broker-core's schema-1 fixture store.
fn schema_1_store() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    std::fs::create_dir_all(&db).unwrap();
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../broker-core/tests/fixtures/store-v1");
    std::fs::copy(fixture.join("data.mdb"), db.join("data.mdb")).unwrap();
    dir
}

#[test]
fn doctor_verifies_a_schema_1_store_after_migrating_it_and_the_daemon_serves_it() {
    let dir = schema_1_store();
    let db = dir.path().join("db");
    // Migrated as `worldd serve` migrates it: the verbs that only read refuse a schema-1 store
    // (operator_reads.rs).
    drop(broker_core::store::Store::open(&db, Default::default()).unwrap());
    let (code, out, err) = worldd(&["doctor", "--db", path_str(&db)], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("✓ 14 entr(ies) checked, 0 broken"), "{out}");
    assert!(
        out.contains("✓ 25 journal record(s); spend counters equal the sum of intents"),
        "{out}"
    );
    assert!(out.contains("1 indeterminate intent(s)"), "{out}");
    assert!(out.contains("mcp:ep1:lost"), "{out}");
    let (code, out, err) = worldd(&["doctor", "--db", path_str(&db), "--json"], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!err.contains("migrated"), "{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["consistent"], true);
    assert_eq!(report["entries"], 14);
    // The migration put every key in `refs`: nothing waits in the tail, and each names its row
    // (entry rows of schema 1 do not carry their hash: their stored entry says it).
    assert_eq!(report["indexFindings"], serde_json::json!([]));
    assert!(report["indexKeys"].as_u64().unwrap() > 14 * 2, "{report}");
    assert_eq!(report["indexWaiting"], 0);

    // Every entry written by schema 1 re-verifies through `why`.
    for handle in ["1", "7", "12", "head"] {
        let (code, out, err) = worldd(&["why", "--db", path_str(&db), handle], None);
        assert_eq!(code, 0, "why {handle}: {out}{err}");
    }

    // The daemon serves the migrated store and continues its chain.
    std::fs::create_dir_all(dir.path().join("worktrees/ep9")).unwrap();
    std::fs::write(
        dir.path().join("worktrees/ep9/a.txt"),
        "after the migration",
    )
    .unwrap();
    let d = Daemon::start_in(dir, WS, &[]);
    let token = d.session("ep9", &["Workspace.Read=worktree:5"]);
    let r = a2a(&d, &token, "r1", "ailang-read", json!({"path": "a.txt"}));
    assert_eq!(r["result"]["metadata"]["entry_index"], 14, "{r}");
    let data = &r["result"]["artifacts"][0]["parts"][0]["data"];
    assert_eq!(data["content"], "after the migration");
    let head = get(&d.url("/v1/log/13"), Some(&token));
    assert_eq!(head.status, 200);
    assert_eq!(head.json()["header"]["writtenBy"], "coordinator:mcp");
    // Who reads what was rebuilt by the migration: entry 1 is ep1's call, entry 8 ep2's.
    let (ep1, ep2) = (
        d.session("ep1", &["Workspace.Read=worktree:5"]),
        d.session("ep2", &["Workspace.Read=worktree:5"]),
    );
    for (i, owner, other) in [(1, &ep1, &ep2), (8, &ep2, &ep1)] {
        let record = get(&d.url(&format!("/v1/log/{i}")), Some(&token)).json()["transitionRef"]
            .as_str()
            .unwrap()
            .to_owned();
        let url = d.url(&format!("/v1/objects/{record}"));
        assert_eq!(get(&url, Some(owner)).status, 200, "entry {i}");
        assert_eq!(get(&url, Some(other)).status, 404, "entry {i}");
        assert_eq!(get(&url, Some(&token)).status, 404, "entry {i}");
    }
    let kept = d.halt();
    let (code, out, err) = worldd(&["doctor", "--db", path_str(&kept.path().join("db"))], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("✓ 15 entr(ies) checked, 0 broken"), "{out}");
}

#[test]
fn by_semantic_id_pages_list_objects_in_the_order_they_were_stored() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:50"]);
    for i in 0..5 {
        a2a(
            &d,
            &token,
            &format!("r{i}"),
            "ailang-read",
            json!({"path": "x"}),
        );
    }
    // The invocation records in log order are what the index lists, oldest first.
    let records: Vec<String> = (1..=5)
        .map(|i| {
            get(&d.url(&format!("/v1/log/{i}")), Some(&token)).json()["transitionRef"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    let sid = "world/invocation-record/v2";
    let page = |query: &str| {
        let a = get(
            &d.url(&format!("/v1/objects/by-semantic-id/{sid}{query}")),
            Some(&token),
        );
        assert_eq!(a.status, 200, "{}", a.text());
        a.json()["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["hash"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(page(""), records);
    // Nothing failed in the writer: no group commit was built twice.
    let metrics = get(&d.url("/v1/metrics"), Some(&token)).text();
    assert!(
        metrics.contains("\nworldd_commit_rebuilt_batches_total 0\n"),
        "{metrics}"
    );
    // A commit with nothing queued behind it is synced by the writer before it is answered:
    // these calls came one at a time, so each commit needed its own sync.
    let value = |name: &str| -> u64 {
        let line = metrics
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in {metrics}"));
        line[name.len() + 1..].parse().unwrap()
    };
    let (syncs, batches) = (
        value("worldd_commit_syncs_total"),
        value("worldd_commit_batches_total"),
    );
    assert!(
        syncs >= 5 && syncs <= batches,
        "{syncs} syncs, {batches} batches"
    );
    assert_eq!(page("?limit=2"), records[..2]);
    assert_eq!(
        page(&format!("?limit=2&after={}", records[1])),
        records[2..4]
    );
    assert_eq!(
        page(&format!("?after={}", records[4])),
        Vec::<String>::new()
    );

    // Another episode's records are not listed, and naming one as `after` is answered
    // exactly as naming a ref the store never saw.
    let other = d.session("ep2", &["Workspace.Read=worktree:5"]);
    a2a(&d, &other, "r0", "ailang-read", json!({"path": "x"}));
    let theirs = get(&d.url("/v1/log/6"), Some(&other)).json()["transitionRef"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(page(""), records);

    // `after` must name an object listed under this semantic id.
    let input = get(&d.url("/v1/log/1"), Some(&token)).json()["header"]["transitionFn"]
        .as_str()
        .unwrap()
        .to_owned();
    for after in [format!("sha256:{}", "0".repeat(64)), input, theirs] {
        let a = get(
            &d.url(&format!("/v1/objects/by-semantic-id/{sid}?after={after}")),
            Some(&token),
        );
        assert_eq!(a.status, 400, "{}", a.text());
        assert_eq!(
            a.json(),
            json!({"error":{"class":"BadRequest","message":"after: not an object with this semantic id"}})
        );
    }
}

/// An agent's page of a private kind its episode holds few of examines at most
/// `MAX_OBJECT_SCAN` of the episode's objects (it read all of them, across most of the store,
/// on every request), and one that stopped there before the last says where to go on: the
/// answer's `next`, accepted as `after` from that episode and refused from another exactly as a
/// ref the store never saw.
#[test]
fn an_agents_semantic_id_page_over_http_stops_at_the_scan_bound_and_names_where_to_go_on() {
    use broker_core::object::Object;
    const FEW: &str = "world/test-few/v1";
    let max = broker_core::access::MAX_OBJECT_SCAN;
    let dir = tempfile::tempdir().unwrap();
    // ep1 holds one of the few, as many others as a page examines, and one more of the few.
    let object = |kind: &str, i: usize| Object::new(kind, "test", format!("{kind} {i}").into());
    let mut objects = vec![object(FEW, 0)];
    objects.extend((0..max).map(|i| object("world/test-bulk/v1", i)));
    objects.push(object(FEW, 1));
    let refs: Vec<String> = objects.iter().map(|o| o.hash.to_string()).collect();
    {
        let store = broker_core::store::Store::create(&dir.path().join("db")).unwrap();
        let hashes: Vec<_> = objects.iter().map(|o| o.hash).collect();
        store
            .write(move |w| {
                objects.iter().try_for_each(|o| w.put_object(o))?;
                broker_core::access::grant_stored(w, "ep1", hashes.iter().copied())
            })
            .unwrap();
    }
    let d = Daemon::start_in(dir, WS, &[]);
    let mine = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let theirs = d.session("ep2", &["Workspace.Read=worktree:5"]);
    let page = |token: &str, query: &str| {
        let a = get(
            &d.url(&format!("/v1/objects/by-semantic-id/{FEW}?{query}")),
            Some(token),
        );
        let body = a.json();
        (a.status, body)
    };
    let hashes = |body: &Value| -> Vec<String> {
        body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["hash"].as_str().unwrap().to_owned())
            .collect()
    };
    // One at a time: the first; then a page of nothing that examined the bound and names the
    // last object it examined; from there the second; then the end.
    let (status, first) = page(&mine, "limit=1");
    assert_eq!(status, 200, "{first}");
    assert_eq!(hashes(&first), [refs[0].clone()]);
    assert_eq!(first.get("next"), None, "{first}");
    let (status, gap) = page(&mine, &format!("limit=1&after={}", refs[0]));
    assert_eq!(status, 200, "{gap}");
    assert_eq!(gap, json!({"items": [], "next": refs[max]}));
    let (_, second) = page(&mine, &format!("limit=1&after={}", refs[max]));
    assert_eq!(hashes(&second), [refs[max + 1].clone()]);
    assert_eq!(second.get("next"), None, "{second}");
    let (_, end) = page(&mine, &format!("limit=1&after={}", refs[max + 1]));
    assert_eq!(end, json!({"items": []}));
    // A page with room for more stops at the bound as well, after what it found.
    let (_, wide) = page(&mine, "limit=500");
    assert_eq!(hashes(&wide), [refs[0].clone()]);
    assert_eq!(wide["next"], refs[max - 1]);
    let (_, rest) = page(&mine, &format!("limit=500&after={}", refs[max - 1]));
    assert_eq!(hashes(&rest), [refs[max + 1].clone()]);
    assert_eq!(rest.get("next"), None, "{rest}");
    // Another episode naming ep1's `next`, or a ref never stored, is refused alike.
    for after in [refs[max].clone(), format!("sha256:{}", "0".repeat(64))] {
        let (status, body) = page(&theirs, &format!("after={after}"));
        assert_eq!(status, 400, "{body}");
        assert_eq!(
            body,
            json!({"error":{"class":"BadRequest","message":"after: not an object with this semantic id"}})
        );
    }
}

/// The journal state and task state of a call live in its invocation row and, once resolved,
/// in the resolution of its intent: rewriting either fact where readers find it makes `why`
/// and `doctor` fail the entry (exit 3), and putting it back makes them pass again.
#[test]
fn a_rewritten_invocation_row_or_resolution_makes_why_and_doctor_exit_3() {
    use broker_core::store::{RawTable, Store};
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    std::fs::write(d.root().join("ep1/a.txt"), "alpha").unwrap();
    let v = a2a(&d, &token, "r1", "ailang-read", json!({"path": "a.txt"}));
    let index = v["result"]["metadata"]["entry_index"].as_u64().unwrap();
    let kept = d.halt();
    let db = kept.path().join("db");
    let run = |verb: &str| {
        let index = index.to_string();
        let mut args = vec![verb, "--db", path_str(&db)];
        if verb == "why" {
            args.push(&index);
        }
        worldd(&args, None)
    };
    assert_eq!(run("why").0, 0);
    assert_eq!(run("doctor").0, 0);

    let canon = |v: &Value| broker_core::canon::to_vec(v).unwrap();
    let rewrite = |table: RawTable, key: &[u8], change: &dyn Fn(&mut Value)| -> Vec<u8> {
        let store = Store::open(&db, Default::default()).unwrap();
        let original = store.raw_get(table, key).unwrap().unwrap();
        let mut v: Value = serde_json::from_slice(&original).unwrap();
        change(&mut v);
        store.raw_overwrite(table, key.to_vec(), canon(&v)).unwrap();
        original
    };
    let restore = |table: RawTable, key: &[u8], original: Vec<u8>| {
        let store = Store::open(&db, Default::default()).unwrap();
        store.raw_overwrite(table, key.to_vec(), original).unwrap();
    };

    // The task state (the resolution's `committed`), moved to another entry.
    let task_key = b"ep1\0a2a:r1";
    let original = rewrite(RawTable::Tasks, task_key, &|t| {
        assert_eq!(t["phase"], "committed");
        t["entryIndex"] = json!(index + 3);
    });
    let (code, out, err) = run("why");
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        out.contains(&format!(
            "journal -  the coordinator committed a2a:ep1:r1 at entry {}, not at this one",
            index + 3
        )),
        "{out}"
    );
    let (code, out, _) = run("doctor");
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains(&format!("      entry {index}: journal: ")),
        "{out}"
    );
    restore(RawTable::Tasks, task_key, original);
    assert_eq!(run("why").0, 0);

    // The journal state (the resolution's outcome), naming another effect record.
    let id = b"a2a:ep1:r1";
    let original = rewrite(RawTable::JournalIndex, id, &|j| {
        assert_eq!(j["status"], "succeeded");
        j["resultRef"] = json!(format!("sha256:{}", "1".repeat(64)));
    });
    let (code, out, err) = run("why");
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        out.contains("is not the outcome the index records for a2a:ep1:r1"),
        "{out}"
    );
    assert_eq!(run("doctor").0, 3);
    restore(RawTable::JournalIndex, id, original);
    assert_eq!(run("why").0, 0);
    assert_eq!(run("doctor").0, 0);
}

/// The store of a daemon that served `episodes`' sessions (one credential each, two for the
/// first), stopped: its directory, `db` in it, and the credentials.
fn stopped_with_sessions(episodes: &[&str]) -> (tempfile::TempDir, Vec<String>) {
    let d = Daemon::start(WS, &[]);
    let mut tokens = vec![d.session(episodes[0], &["Workspace.Read=worktree:5"])];
    for e in episodes {
        tokens.push(d.session(e, &["Workspace.Read=worktree:5"]));
    }
    (d.halt(), tokens)
}

// A damaged session record must not lock the operator out of the others: revoking is how an
// operator answers a leak.
#[test]
fn a_damaged_session_record_does_not_stop_listing_or_revoking_the_others() {
    use broker_core::session::credential_id;
    use broker_core::store::{RawTable, Store};
    let (kept, tokens) = stopped_with_sessions(&["ep1", "ep2"]);
    let db = kept.path().join("db");
    let ids: Vec<String> = tokens.iter().map(|t| credential_id(t)).collect();
    let damaged = &ids[2];
    Store::open(&db, Default::default())
        .unwrap()
        .raw_overwrite(
            RawTable::Sessions,
            damaged.as_bytes().to_vec(),
            b"{\"episode".to_vec(),
        )
        .unwrap();
    let session = |args: &[&str]| {
        let mut all = vec!["session"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--db", path_str(&db)]);
        worldd(&all, None)
    };

    let (code, out, err) = session(&["list"]);
    assert_eq!(code, 0, "{out}{err}");
    for id in &ids[..2] {
        assert!(out.contains(&format!("{id}  ep1  live")), "{out}");
    }
    assert!(
        out.contains(&format!(
            "{damaged}  damaged: the record does not decode and authenticates nothing; `worldd session revoke {damaged}` removes it"
        )),
        "{out}"
    );
    assert_eq!(
        out.lines().last(),
        Some("2 session credential(s), 1 damaged")
    );
    let (code, out, _) = session(&["list", "--json"]);
    assert_eq!(code, 0);
    let listed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed[2], json!({"credentialId": damaged, "damaged": true}));

    // The episode's readable credentials are revoked; the damaged one, whose episode nobody can
    // read, is left to be revoked by its id.
    let (code, out, err) = session(&["revoke", "--episode", "ep1"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out.lines().count(), 2, "{out}");
    let (code, out, err) = session(&["revoke", damaged]);
    assert_eq!(
        (code, out.trim()),
        (0, &*format!("revoked session credential {damaged}")),
        "{err}"
    );
    let (_, out, _) = session(&["list"]);
    assert_eq!(out.trim(), "0 session credential(s)");
}

/// A stopped store in which episode `ep1` read `a.txt` once (`a2a:ep1:r1`): the tempdir
/// holding it and its path.
fn one_read_stopped() -> (tempfile::TempDir, std::path::PathBuf) {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    std::fs::write(d.root().join("ep1/a.txt"), "alpha").unwrap();
    a2a(&d, &token, "r1", "ailang-read", json!({"path": "a.txt"}));
    let kept = d.halt();
    let db = kept.path().join("db");
    (kept, db)
}

#[test]
fn a_damaged_spend_counter_is_a_doctor_finding_and_the_audit_goes_on() {
    use broker_core::store::{RawTable, Store};
    let (_kept, db) = one_read_stopped();
    assert_eq!(worldd(&["doctor", "--db", path_str(&db)], None).0, 0);
    Store::open(&db, Default::default())
        .unwrap()
        .raw_overwrite(
            RawTable::Spend,
            b"ep1\0Workspace.Read\0worktree".to_vec(),
            vec![0, 1, 2],
        )
        .unwrap();
    let (code, out, err) = worldd(&["doctor", "--db", path_str(&db)], None);
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        out.contains(
            r#"spend "ep1/Workspace.Read/worktree": unreadable: a counter of 3 bytes, not 8"#
        ),
        "{out}"
    );
    // With the counter unreadable, the journal's intent is one nobody counted.
    assert!(
        out.contains(r#"spend "ep1/Workspace.Read/worktree" is 0 but its intents sum to 1"#),
        "{out}"
    );
}

#[test]
fn a_damaged_registry_head_is_a_doctor_finding() {
    use broker_core::store::{RawTable, Store};
    let kept = Daemon::start(WS, &[]).halt();
    let db = kept.path().join("db");
    let doctor = || worldd(&["doctor", "--db", path_str(&db)], None);
    assert_eq!(doctor().0, 0);
    let put = |value: Vec<u8>| {
        Store::open(&db, Default::default())
            .unwrap()
            .raw_overwrite(RawTable::RegistryHeads, b"tools".to_vec(), value)
            .unwrap()
    };
    let original = Store::open(&db, Default::default())
        .unwrap()
        .raw_get(RawTable::RegistryHeads, b"tools")
        .unwrap()
        .unwrap();
    for (value, finding) in [
        (
            vec![1, 2, 3],
            r#"registry "tools": registry head tools is not a ref"#.to_owned(),
        ),
        (
            vec![7; 32],
            format!(
                r#"registry "tools": registry revision sha256:{} is damaged: missing"#,
                "07".repeat(32)
            ),
        ),
    ] {
        put(value);
        let (code, out, err) = doctor();
        assert_eq!(code, 3, "{out}{err}");
        assert!(out.contains(&format!("      {finding}\n")), "{out}");
    }
    put(original);
    assert_eq!(doctor().0, 0);
}

/// A copy of `db` with every B-tree page's first node offset pointed far out of its page, as
/// a flipped bit could: LMDB, which trusts its pages, follows it out of the map.
fn with_offsets_out_of_their_pages(db: &Path, into: &Path) {
    const PAGE: usize = 4096;
    let mut data = std::fs::read(db.join("data.mdb")).unwrap();
    let mut damaged = 0;
    for page in 2..data.len() / PAGE {
        let at = page * PAGE;
        let flags = u16::from_le_bytes([data[at + 10], data[at + 11]]);
        let lower = u16::from_le_bytes([data[at + 12], data[at + 13]]);
        // A branch or leaf page with at least one node: the high byte of its first offset.
        if flags & 0x03 != 0 && lower > 16 {
            data[at + 17] = 0xf4;
            damaged += 1;
        }
    }
    assert!(damaged > 0);
    std::fs::create_dir_all(into).unwrap();
    std::fs::write(into.join("data.mdb"), data).unwrap();
}

/// A store with a few calls (the tempdir holding it, its path) and a copy of it whose pages all
/// point out of the map.
fn a_damaged_copy() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:20"]);
    for i in 0..12 {
        a2a(
            &d,
            &token,
            &format!("w{i}"),
            "ailang-write",
            json!({"path": format!("f{i}.txt"), "content": "hello"}),
        );
    }
    let db = d.db();
    let dir = d.halt();
    let bad = dir.path().join("bad");
    with_offsets_out_of_their_pages(&db, &bad);
    (dir, db, bad)
}

/// The verbs an operator runs on a damaged store say that it is damaged, instead of dying by
/// SIGBUS or SIGSEGV without a word (LMDB follows a corrupt page out of the map).
#[test]
fn a_store_whose_pages_point_out_of_the_map_is_said_damaged_by_every_verb_that_reads_it() {
    let (_dir, db, bad) = a_damaged_copy();
    let bad_db = path_str(&bad);
    for (verb, args) in [
        ("worldd doctor", vec!["doctor", "--db", bad_db]),
        ("worldd usage", vec!["usage", "--db", bad_db]),
        ("worldd session", vec!["session", "list", "--db", bad_db]),
        ("worldd why", vec!["why", "--db", bad_db, "head"]),
    ] {
        let (code, _, err) = worldd(&args, None);
        assert_eq!(code, 3, "{args:?}: {err}");
        let line = err.lines().last().unwrap_or("");
        assert!(
            line.starts_with(&format!(
                "worldd: store is damaged: {verb} crashed reading it (SIG"
            )),
            "{args:?}: {err}"
        );
        assert!(
            line.ends_with("one of them is corrupt; restore the store from a backup (worldd backup makes one), and keep this copy for inspection"),
            "{args:?}: {err}"
        );
    }
    // The store it was copied from is sound.
    let (code, _, err) = worldd(&["doctor", "--db", path_str(&db)], None);
    assert_eq!(code, 0, "{err}");
}

/// `serve` on such a store says so too, from its signal handler, and still dies by the signal
/// (a supervisor sees the crash it is); it dies on opening, before it listens.
#[test]
fn serve_on_a_store_whose_pages_point_out_of_the_map_says_the_store_is_damaged() {
    let (dir, _, bad) = a_damaged_copy();
    let plugins = plugin_dir_with(dir.path(), &["worldd_workspace"]);
    let root = dir.path().join("roots");
    let (code, _, err) = worldd(
        &[
            "serve",
            "--db",
            path_str(&bad),
            "--workspace-root",
            path_str(&root),
            "--bind",
            "127.0.0.1:0",
            "--plugin-dir",
            path_str(&plugins),
        ],
        None,
    );
    // Killed by the signal: no exit code.
    assert_eq!(code, -1, "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("worldd: store is damaged: "))
        .unwrap_or_else(|| panic!("no word of the damage: {err}"));
    assert!(
        line.starts_with("worldd: store is damaged: worldd serve crashed reading it (SIG"),
        "{line}"
    );
    assert!(
        line.contains("check the store with worldd doctor"),
        "{line}"
    );
    assert!(!err.contains("worldd listening on"), "{err}");
}

/// A stopped store of three reads (`a2a:ep1:r1` to `r3`) whose row `key` of `table` (given
/// the first read's entry index) `damage` changed: the tempdir holding it, its path, and that
/// entry's index. Calls follow the damaged one, so that its row is not one opening the store
/// reads (the newest rows are: a store that cannot be opened is exit 2, as for every verb).
fn with_first_of_three_reads_damaged(
    table: broker_core::store::RawTable,
    key: impl FnOnce(u64) -> Vec<u8>,
    damage: impl FnOnce(&mut Vec<u8>),
) -> (tempfile::TempDir, std::path::PathBuf, u64) {
    use broker_core::store::Store;
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    std::fs::write(d.root().join("ep1/a.txt"), "alpha").unwrap();
    let v = a2a(&d, &token, "r1", "ailang-read", json!({"path": "a.txt"}));
    let index = v["result"]["metadata"]["entry_index"].as_u64().unwrap();
    for t in ["r2", "r3"] {
        a2a(&d, &token, t, "ailang-read", json!({"path": "a.txt"}));
    }
    let kept = d.halt();
    let db = kept.path().join("db");
    let key = key(index);
    let store = Store::open(&db, Default::default()).unwrap();
    let mut row = store.raw_get(table, &key).unwrap().unwrap();
    damage(&mut row);
    store.raw_overwrite(table, key, row).unwrap();
    drop(store);
    (kept, db, index)
}

/// [`with_first_of_three_reads_damaged`]: the first read's log row.
fn with_log_row_damaged(
    damage: impl FnOnce(&mut Vec<u8>),
) -> (tempfile::TempDir, std::path::PathBuf, u64) {
    let key = |index: u64| index.to_be_bytes().to_vec();
    with_first_of_three_reads_damaged(broker_core::store::RawTable::LogRow, key, damage)
}

/// A log row whose entry length points past its end does not decode: `why` of that entry is an
/// integrity failure (exit 3), as a broken link is, not a usage error (it used to exit 1), and
/// names the damaged row (by its index, the entry link broken; by its invocation, which needs
/// the row to find its entry, in the error).
#[test]
fn why_of_an_entry_whose_log_row_length_is_damaged_exits_3() {
    let (_kept, db, index) = with_log_row_damaged(|row| {
        // The entry length (bytes 32..36, after the world ref), made far longer than the row.
        row[33] = 0x7f;
    });
    for handle in [index.to_string(), "a2a:ep1:r1".to_string()] {
        let (code, out, err) = worldd(&["why", "--db", path_str(&db), &handle], None);
        assert_eq!(code, 3, "why {handle}: {out}{err}");
        assert!(
            format!("{out}{err}")
                .contains(&format!("store is damaged: log row {index} is damaged")),
            "why {handle}: {out}{err}"
        );
    }
}

/// A log row's stored entry-hash column damaged: doctor blamed the next entry (`prevEntryHash
/// … is not the hash of entry N`) while `why N` verified entry N, exit 0; the two contradicted
/// each other and neither named the damaged row. Entry N's own link now says its row's hash
/// column is damaged, in `why` and in doctor.
#[test]
fn a_damaged_entry_hash_column_is_blamed_on_its_own_entry_by_why_and_doctor() {
    let (_kept, db, index) = with_log_row_damaged(|row| {
        // The length's top bit says an entry hash follows it (bytes 36..68).
        assert_ne!(row[32] & 0x80, 0, "a row of schema 3 or later");
        row[40] ^= 0xff;
    });
    let said =
        "the store's index of entry hashes does not name this entry under its recomputed hash";
    let (code, out, err) = worldd(&["why", "--db", path_str(&db), &index.to_string()], None);
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        out.contains(said) && out.contains("hash column is damaged"),
        "{out}"
    );
    let (code, out, err) = worldd(&["doctor", "--db", path_str(&db)], None);
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        out.contains(&format!("entry {index}: entry: {said}")),
        "{out}"
    );
    // The next entry, intact, is not blamed for it.
    assert!(!out.contains("is not the hash of entry"), "{out}");
    let next = (index + 1).to_string();
    let (code, out, err) = worldd(&["why", "--db", path_str(&db), &next], None);
    assert_eq!(code, 0, "{out}{err}");
}

/// [`with_first_of_three_reads_damaged`]: the first read's invocation row (`a2a:ep1:r1`, its
/// task and journal states).
fn with_invocation_row_damaged(
    damage: impl FnOnce(&mut Vec<u8>),
) -> (tempfile::TempDir, std::path::PathBuf, u64) {
    let key = |_| b"a2a:ep1:r1".to_vec();
    with_first_of_three_reads_damaged(broker_core::store::RawTable::Invocations, key, damage)
}

/// [`with_invocation_row_damaged`], then the length before the id of every stored copy of
/// `a2a:ep1:r1`'s row in `invocation_rows` made to run past the row, in the store's file itself
/// (the store's writes always put the id's true length): a row whose id cannot be read, which
/// no lookup by id finds.
fn with_invocation_id_length_damaged() -> (tempfile::TempDir, std::path::PathBuf, u64) {
    let (kept, db, index) = with_invocation_row_damaged(|_| {});
    let mut data = std::fs::read(db.join("data.mdb")).unwrap();
    // The id's length (10), the id, and the first bytes of the row's intent sequence.
    let row = b"\x00\x0aa2a:ep1:r1\x00\x00\x00\x00";
    let mut damaged = 0;
    for at in 0..data.len() - row.len() {
        if data[at..at + row.len()] == row[..] {
            data[at] = 0xff;
            damaged += 1;
        }
    }
    assert!(damaged > 0, "the row of a2a:ep1:r1 is in the file");
    std::fs::write(db.join("data.mdb"), data).unwrap();
    (kept, db, index)
}

/// An invocation row whose bytes do not decode read as no row at all: `why` said "no task
/// state for a2a:ep1:r1: the coordinator never committed this invocation", and doctor listed
/// the same, as if the call never happened. A row that holds no state, and a row whose id's
/// length is damaged (no lookup by id finds it), are now named damaged, with what failed, by
/// `why` (exit 3) and by doctor, which counts the row among its findings.
#[test]
fn a_garbage_invocation_row_is_named_damaged_not_never_committed() {
    let never = "the coordinator never committed this invocation";
    let (_kept, db, index) = with_invocation_row_damaged(|row| *row = vec![0; 12]);
    let said = "invocation row a2a:ep1:r1 is damaged: its journal part is empty";
    let (code, out, err) = worldd(&["why", "--db", path_str(&db), "a2a:ep1:r1"], None);
    assert_eq!(code, 3, "{out}{err}");
    assert_eq!(err, format!("worldd: why: store is damaged: {said}\n"));
    let (code, out, err) = worldd(&["why", "--db", path_str(&db), &index.to_string()], None);
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        out.contains(&format!(
            "  ✗ journal -  task state of a2a:ep1:r1: store is damaged: {said}\n"
        )),
        "{out}"
    );
    assert!(!out.contains(never), "{out}");
    let (code, out, err) = worldd(&["doctor", "--db", path_str(&db)], None);
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        out.contains(&format!(
            "  ✗ 3 invocation row(s), some DAMAGED\n      {said}\n"
        )),
        "{out}"
    );
    assert!(!out.contains(never), "{out}");

    let (_kept, db, index) = with_invocation_id_length_damaged();
    let said = "the invocation row of a2a:ep1:r1 is damaged, so no lookup finds its task state: row 0 of invocation_rows holds a2a:ep1:r1, but its id length says 65290 byte(s), where 791 follow";
    for handle in ["a2a:ep1:r1".to_string(), index.to_string()] {
        let (code, out, err) = worldd(&["why", "--db", path_str(&db), &handle], None);
        assert_eq!(code, 3, "why {handle}: {out}{err}");
        assert!(
            out.contains(&format!("  ✗ journal -  {said}\n")),
            "why {handle}: {out}"
        );
        assert!(!out.contains(never), "{out}");
    }
    let (code, out, err) = worldd(&["doctor", "--db", path_str(&db)], None);
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        out.contains(&format!("      entry {index}: journal: {said}\n")),
        "{out}"
    );
    assert!(
        out.contains("  ✗ 3 invocation row(s), some DAMAGED\n      row 0 of invocation_rows names no invocation: its id length says 65290 byte(s), where 791 follow\n"),
        "{out}"
    );
}

/// A row whose layout holds but whose journal state is damaged (a byte of its JSON that is no
/// UTF-8) was a finding of its entry's walk, while doctor's row line still said `✓ … invocation
/// row(s), each decodes`. The row line decodes each row's states now, and names this one.
#[test]
fn doctor_names_an_invocation_row_whose_journal_state_does_not_decode() {
    let (_kept, db, _) = with_invocation_row_damaged(|row| {
        // The first byte of the journal part's first string member, past the 12 of the
        // intent sequence and the journal length.
        let quote = 12 + row[12..].iter().position(|b| *b == b'"').unwrap();
        row[quote + 1] = 0xff;
    });
    let (code, out, err) = worldd(&["doctor", "--db", path_str(&db)], None);
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        out.contains(
            "  ✗ 3 invocation row(s), some DAMAGED\n      invocation row a2a:ep1:r1: its journal state does not decode ("
        ),
        "{out}"
    );
}

/// A call whose invocation row holds no state was answered `404 not-found` by the reconcile
/// routes, "nothing was journaled under it in your episode; it is safe to send", though it ran
/// and committed: an agent would send it again. The routes now answer `500 Damaged` naming the
/// row and what failed to decode, and `worldd calls get` exits 3.
#[test]
fn reconciling_a_call_whose_invocation_row_is_garbage_does_not_say_safe_to_send() {
    let (kept, _db, _) = with_invocation_row_damaged(|row| *row = vec![0; 12]);
    let d = Daemon::start_in(kept, WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let said = "call a2a:ep1:r1 is damaged: invocation row a2a:ep1:r1 is damaged: its journal part is empty; what became of it cannot be read (run worldd doctor, and restore the store from a backup)";
    for route in ["/v1/calls/a2a/r1", "/v1/invocations/a2a:ep1:r1"] {
        let a = get(&d.url(route), Some(&token));
        assert_eq!(a.status, 500, "{route}: {}", a.text());
        assert_eq!(
            a.json(),
            json!({"error": {"class": "Damaged", "message": said}}),
            "{route}"
        );
    }
    let session = d.session_file("ep1", &token);
    let url = d.url("");
    let (code, out, err) = worldd(
        &[
            "calls",
            "get",
            "a2a:ep1:r1",
            "--addr",
            &url,
            "--session",
            path_str(&session),
        ],
        None,
    );
    assert_eq!((code, out.as_str()), (3, ""), "{err}");
    assert_eq!(err, format!("worldd: calls get: {said}\n"));
    // The calls whose rows are intact are answered as before.
    let a = get(&d.url("/v1/calls/a2a/r2"), Some(&token));
    assert_eq!(
        (a.status, a.json()["state"].clone()),
        (200, json!("committed"))
    );
}

/// A section of `doctor` printed one line per finding with no end: a table damaged throughout
/// (here 25 session records of garbage) printed every one. It shows 20 and counts the rest;
/// `--json` lists every one.
#[test]
fn doctor_shows_twenty_findings_a_section_and_counts_the_rest() {
    use broker_core::store::{RawTable, Store};
    let (_kept, db) = one_read_stopped();
    let store = Store::open(&db, Default::default()).unwrap();
    let ids: Vec<String> = (0..25).map(|i| format!("{i:064x}")).collect();
    for id in &ids {
        store
            .raw_overwrite(RawTable::Sessions, id.clone().into_bytes(), b"{".to_vec())
            .unwrap();
    }
    drop(store);
    let (code, out, err) = worldd(&["doctor", "--db", path_str(&db)], None);
    assert_eq!(code, 3, "{out}{err}");
    let shown: String = ids[..20]
        .iter()
        .map(|id| format!("      session record {id} is damaged: it does not decode and authenticates nothing (`worldd session revoke {id}` removes it)\n"))
        .collect();
    assert!(
        out.contains(&format!(
            "\n  ✗ 26 session record(s), some DAMAGED\n{shown}      … and 5 more (worldd doctor --json lists every one)\n  "
        )),
        "{out}"
    );
    let (code, out, _) = worldd(&["doctor", "--db", path_str(&db), "--json"], None);
    assert_eq!(code, 3);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["sessionFindings"].as_array().unwrap().len(), 25);
}

/// `doctor` read neither the read grants nor the session records: a grant whose header does
/// not decode (the episode's own object then fails to read), a grant naming an object row the
/// store does not hold, and a session record that does not decode all passed as consistent.
/// Each is now a finding under its own line (exit 3); a session minted with two grants of one
/// effect and scope (before such sessions were refused) is a note, not an inconsistency.
#[test]
fn doctor_finds_damaged_read_grants_and_session_records_and_notes_doubled_grants() {
    use broker_core::store::{RawTable, Store};
    let (_kept, db) = one_read_stopped();
    let doctor = || worldd(&["doctor", "--db", path_str(&db)], None);
    let (code, out, err) = doctor();
    assert_eq!(code, 0, "{out}{err}");
    let grants = Store::open(&db, Default::default())
        .unwrap()
        .raw_rows("readers_tail")
        .unwrap();
    assert!(
        out.contains(&format!(
            "\n  ✓ {} read grant(s), each names a stored object\n  ✓ 1 session record(s), each decodes\n",
            grants.len()
        )),
        "{out}"
    );
    assert!(
        out.contains(" object(s), each hashes to its address\n"),
        "{out}"
    );

    let store = Store::open(&db, Default::default()).unwrap();
    let (first, _) = grants[0].clone();
    let seq = u64::from_be_bytes(first[..8].try_into().unwrap());
    store
        .raw_overwrite(RawTable::ReadersTail, first, vec![1, 2, 3])
        .unwrap();
    let mut absent = 999_999u64.to_be_bytes().to_vec();
    absent.extend_from_slice(b"ep1");
    store
        .raw_overwrite(RawTable::ReadersTail, absent, Vec::new())
        .unwrap();
    let damaged_id = "ab".repeat(32);
    store
        .raw_overwrite(
            RawTable::Sessions,
            damaged_id.clone().into_bytes(),
            b"{not json".to_vec(),
        )
        .unwrap();
    let doubled_id = "cd".repeat(32);
    let doubled = json!({"credentialId": doubled_id, "episode": "twice", "createdAt": 0,
        "expiresAt": 4_102_444_800i64, "grants": [
            {"effect": "Workspace.Read", "scope": "worktree", "budget": 1},
            {"effect": "Workspace.Read", "scope": "worktree", "budget": 4}]});
    store
        .raw_overwrite(
            RawTable::Sessions,
            doubled_id.clone().into_bytes(),
            serde_json::to_vec(&doubled).unwrap(),
        )
        .unwrap();
    drop(store);

    let (code, out, err) = doctor();
    assert_eq!(code, 3, "{out}{err}");
    let object = out
        .lines()
        .find_map(|l| l.split("for object ").nth(1))
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("{out}"))
        .to_owned();
    assert!(
        out.contains(&format!(
            "\n  ✗ {} read grant(s), some DAMAGED\n      the read grant of episode \"ep1\" for object {object} (row {seq}, in readers_tail) has a damaged header of 3 byte(s)\n      the read grant of episode \"ep1\" (in readers_tail) names object row 999999, which the store does not hold\n",
            grants.len() + 1
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "\n  ✗ 3 session record(s), some DAMAGED\n      session record {damaged_id} is damaged: it does not decode and authenticates nothing (`worldd session revoke {damaged_id}` removes it)\n      note: session {doubled_id} (episode twice) holds two grants of Workspace.Read@worktree, minted before such sessions were refused; revoke it and mint one grant per effect and scope\n"
        )),
        "{out}"
    );
    let (code, out, _) = worldd(&["doctor", "--db", path_str(&db), "--json"], None);
    assert_eq!(code, 3);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["grantFindings"].as_array().unwrap().len(), 2);
    assert_eq!(v["sessions"], 3);
    assert_eq!(v["sessionFindings"].as_array().unwrap().len(), 1);
    assert_eq!(v["sessionNotes"].as_array().unwrap().len(), 1);
}

/// `doctor` hashed only the objects entries name, and checked no object's interfaceHash: an
/// object no entry names (here one stored on its own, as the input of a call never committed
/// is) with a damaged payload, and an entry's input whose interfaceHash was rewritten, both
/// passed as consistent. Every object row is now read: each is a finding (exit 3).
#[test]
fn doctor_finds_damaged_objects_no_entry_names_and_interface_hashes_that_are_not_their_kinds() {
    use broker_core::object::{Object, Ref};
    use broker_core::store::Store;
    let (_kept, db) = one_read_stopped();
    let input = Ref::of(br#"{"path":"a.txt"}"#);
    let orphan = Object::new("world/invocation-input/v1", "coordinator", b"{}".to_vec());
    let orphan_ref = orphan.hash;
    Store::open(&db, Default::default())
        .unwrap()
        .write(move |w| w.put_object(&orphan))
        .unwrap();
    flip_object_byte(&db, &orphan_ref, 0, true);
    flip_object_byte(&db, &input, 0, false);
    let (code, out, err) = worldd(&["doctor", "--db", path_str(&db)], None);
    assert_eq!(code, 3, "{out}{err}");
    assert!(out.contains("  ✓ 2 entr(ies) checked, 0 broken"), "{out}");
    let section = out
        .split_once(" object(s), some DAMAGED\n")
        .unwrap_or_else(|| panic!("{out}"))
        .1;
    assert!(
        section.contains(&format!("      object {input} (row ")),
        "{section}"
    );
    assert!(
        section.contains(
            ", which is not the sha256 of its semanticId \"world/invocation-input/v1\"\n"
        ),
        "{section}"
    );
    assert!(
        section.contains(&format!("      object {orphan_ref} (row ")),
        "{section}"
    );
    assert!(
        section.contains(&format!(
            ") is damaged: its payload hashes to {}, not to its address\n",
            Ref::of(b"{|")
        )),
        "{section}"
    );
}
