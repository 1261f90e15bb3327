//! The store's schema through the real binary: `worldd doctor` and `why` on a store written by
//! the schema-1 build (migrated when opened), the daemon serving it, and the insertion-ordered
//! `by-semantic-id` paging.

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
    let (code, out, err) = worldd(&["doctor", "--db", path_str(&db)], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("✓ 14 entr(ies) checked, 0 broken"), "{out}");
    assert!(
        out.contains("✓ 25 journal record(s); spend counters equal the sum of intents"),
        "{out}"
    );
    assert!(out.contains("1 indeterminate intent(s)"), "{out}");
    assert!(out.contains("mcp:ep1:lost"), "{out}");
    // The migration is announced once, on the open that made it.
    assert!(
        err.contains("migrated the store from schema 1 to schema 2"),
        "{err}"
    );
    let (code, out, err) = worldd(&["doctor", "--db", path_str(&db), "--json"], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!err.contains("migrated"), "{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["consistent"], true);
    assert_eq!(report["entries"], 14);

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
    assert_eq!(page("?limit=2"), records[..2]);
    assert_eq!(
        page(&format!("?limit=2&after={}", records[1])),
        records[2..4]
    );
    assert_eq!(
        page(&format!("?after={}", records[4])),
        Vec::<String>::new()
    );

    // `after` must name an object listed under this semantic id.
    let input = get(&d.url("/v1/log/1"), Some(&token)).json()["header"]["transitionFn"]
        .as_str()
        .unwrap()
        .to_owned();
    for after in [format!("sha256:{}", "0".repeat(64)), input] {
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
