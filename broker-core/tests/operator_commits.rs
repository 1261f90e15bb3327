//! Client commits (`POST /v1/commit` underneath): what a client may not claim, and the commit
//! grant every commit spends.

mod common;

use broker_core::commit::{self, CommitError, CommitGrant, RestCommit};
use broker_core::journal;
use broker_core::log::{self, Entry, EntryHeader, World as WorldDoc};
use broker_core::object::{sid, Object, Ref};
use broker_core::store::Store;
use broker_core::verify;
use common::*;
use serde_json::{json, Value};

fn grant(budget: u64) -> CommitGrant {
    CommitGrant {
        episode: "ops".into(),
        budget,
    }
}

fn spent(store: &Store) -> u64 {
    store
        .read(|r| journal::spent(r, "ops"))
        .unwrap()
        .get(&("World.Commit".to_owned(), "log".to_owned()))
        .copied()
        .unwrap_or(0)
}

/// A commit on the current head of `written_by`, whose record is `record` (a new object) or,
/// with `record_ref`, an object already in the store.
fn commit_on_head(
    store: &Store,
    written_by: &str,
    record: &Value,
    record_ref: Option<Ref>,
) -> RestCommit {
    let head = store.read(log::head).unwrap().unwrap();
    let out = Object::json(sid::INVOCATION_OUTPUT, "rest:ops", &json!({"note": record})).unwrap();
    let rec = Object::json(sid::INVOCATION_RECORD, "rest:ops", record).unwrap();
    let transition_ref = record_ref.unwrap_or(rec.hash);
    let entry = Entry::new(
        EntryHeader {
            entry_index: head.world.revision + 1,
            semantics_epoch: 1,
            transition_fn: Ref::of(b"fn"),
            interpreter: log::interpreter_ref().unwrap(),
            prev_entry_hash: head.world.log_head,
            written_by: written_by.into(),
        },
        transition_ref,
    )
    .unwrap();
    let world = WorldDoc {
        revision: entry.header.entry_index,
        state_root: out.hash,
        log_head: entry.entry_hash,
    };
    RestCommit {
        invocation_id: None,
        observed_head: Some(head.world_ref),
        objects: vec![out, rec],
        world_ref: world.reference().unwrap(),
        entry,
        world,
    }
}

#[test]
fn a_commit_claiming_a_coordinator_or_store_writer_is_refused_and_spends_nothing() {
    let w = World::new();
    let head = w.store.read(log::head).unwrap().unwrap();
    for writer in [
        "coordinator:a2a",
        "coordinator:mcp",
        "coordinator:x",
        "world:genesis",
    ] {
        let c = commit_on_head(&w.store, writer, &json!({"k": writer}), None);
        let e = commit::rest_commit(&w.store, c, &grant(5)).unwrap_err();
        assert!(matches!(e, CommitError::ReservedWriter(_)), "{e}");
        assert_eq!(
            e.to_string(),
            format!("invalid commit: writtenBy {writer:?} is reserved: coordinator:* and world:* entries are written only by the daemon itself")
        );
    }
    assert_eq!(w.store.read(log::head).unwrap().unwrap(), head);
    assert_eq!(spent(&w.store), 0);
}

#[test]
fn a_commit_whose_record_is_a_coordinator_invocation_is_refused() {
    let w = World::new();
    let s = w.mint("ep1", &["Workspace.Read=worktree:5"]);
    let out = w.call(&s, "ailang-read", json!({"path": "a"})).unwrap();
    let genuine = w
        .store
        .read(|r| log::entry(r, out.entry_index))
        .unwrap()
        .unwrap();
    let head = w.store.read(log::head).unwrap().unwrap();

    // The genuine record again, under a client's label.
    let copy = commit_on_head(
        &w.store,
        "rest:mallory",
        &json!({}),
        Some(genuine.transition_ref),
    );
    let e = commit::rest_commit(&w.store, copy, &grant(5)).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("invalid commit: transitionRef is an invocation record of the coordinator ({}); only the coordinator commits those", out.invocation_id)
    );
    // An invented one in the coordinator's namespaces.
    for id in ["a2a:ep1:never-happened", "mcp:ep1:never-happened"] {
        let invented = commit_on_head(&w.store, "rest:mallory", &json!({"invocationId": id}), None);
        let e = commit::rest_commit(&w.store, invented, &grant(5)).unwrap_err();
        assert!(
            matches!(e, CommitError::ReservedInvocation(ref i) if i == id),
            "{e}"
        );
    }
    assert_eq!(w.store.read(log::head).unwrap().unwrap(), head);
    assert_eq!(spent(&w.store), 0);

    // A client's own invocation namespace is the client's.
    let own = commit_on_head(
        &w.store,
        "rest:ops",
        &json!({"invocationId": "rest:mine"}),
        None,
    );
    commit::rest_commit(&w.store, own, &grant(5)).unwrap();
    assert_eq!(spent(&w.store), 1);
}

#[test]
fn each_commit_spends_one_unit_journaled_and_refused_commits_spend_nothing() {
    let w = World::new();
    let c = commit_on_head(&w.store, "rest:ops", &json!({"n": 1}), None);
    let mut stale = c.clone();
    stale.observed_head = Some(Ref::of(b"stale"));
    assert!(matches!(
        commit::rest_commit(&w.store, stale, &grant(1)),
        Err(CommitError::Log(_))
    ));
    assert_eq!(spent(&w.store), 0);
    commit::rest_commit(&w.store, c, &grant(1)).unwrap();
    assert_eq!(spent(&w.store), 1);
    // The journal holds an intent and its outcome; the spend counter equals the intents.
    let (findings, records) = w.store.read(journal::audit).unwrap();
    assert!(findings.is_empty(), "{findings:?}");
    assert_eq!(records, 2);

    // The last unit is gone: refused inside the writer, nothing lands.
    let head = w.store.read(log::head).unwrap().unwrap();
    let next = commit_on_head(&w.store, "rest:ops", &json!({"n": 2}), None);
    let e = commit::rest_commit(&w.store, next.clone(), &grant(1)).unwrap_err();
    assert!(matches!(e, CommitError::Budget { remaining: 0 }), "{e}");
    assert_eq!(
        e.to_string(),
        "denied:budget: the World.Commit=log grant has 0 commit(s) left"
    );
    assert_eq!(w.store.read(log::head).unwrap().unwrap(), head);

    // The spend survives reopening the store.
    let dir = w.dir;
    drop(w.coordinator);
    drop(w.store);
    let store = Store::open(&dir.path().join("db"), Default::default()).unwrap();
    assert_eq!(spent(&store), 1);
    assert!(matches!(
        commit::rest_commit(&store, next, &grant(1)),
        Err(CommitError::Budget { .. })
    ));
    // A larger grant on the same episode has its remaining units.
    let again = commit_on_head(&store, "rest:ops", &json!({"n": 3}), None);
    commit::rest_commit(&store, again, &grant(2)).unwrap();
    assert_eq!(spent(&store), 2);
}

#[test]
fn concurrent_commits_never_spend_more_than_the_grant() {
    let w = World::new();
    const BUDGET: u64 = 3;
    let landed = std::sync::atomic::AtomicU64::new(0);
    let refused = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|scope| {
        for t in 0..4 {
            let (w, landed, refused) = (&w, &landed, &refused);
            scope.spawn(move || {
                for n in 0.. {
                    // Rebuild on the current head until the budget says no.
                    let c = commit_on_head(&w.store, "rest:ops", &json!({"t": t, "n": n}), None);
                    match commit::rest_commit(&w.store, c, &grant(BUDGET)) {
                        Ok(_) => {
                            landed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                        Err(CommitError::Log(_)) => continue,
                        Err(CommitError::Budget { .. }) => {
                            refused.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            return;
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            });
        }
    });
    assert_eq!(landed.into_inner(), BUDGET);
    assert_eq!(refused.into_inner(), 4);
    assert_eq!(spent(&w.store), BUDGET);
    let audit = verify::audit_store(&w.store).unwrap();
    assert!(audit.consistent(), "{audit:?}");
    assert_eq!(audit.entries, BUDGET + 1);
}

/// A REST commit's receipt names the world it selected; a log cut after that entry leaves a
/// receipt that says `resolved` for a world no row holds: an audit finding.
#[test]
fn the_audit_finds_a_rest_commit_whose_world_the_cut_log_lost() {
    use broker_core::store::RawTable;
    let w = World::new();
    let mut c = commit_on_head(&w.store, "rest:ops", &json!({"n": 1}), None);
    c.invocation_id = Some("rest:note-1".into());
    let (world, index) = (c.world_ref, c.entry.header.entry_index);
    assert_eq!(commit::rest_commit(&w.store, c, &grant(1)).unwrap(), world);
    let audit = verify::audit_store(&w.store).unwrap();
    assert!(audit.consistent(), "{audit:?}");
    assert_eq!(audit.committed_calls, 1);

    w.store
        .raw_overwrite(RawTable::LogRow, index.to_be_bytes().to_vec(), Vec::new())
        .unwrap();
    let audit = verify::audit_store(&w.store).unwrap();
    assert_eq!(
        audit.call_findings,
        [format!(
            "the REST commit rest:note-1 landed as world {world} (its receipt says so), which no log row holds (its last entry is {}): the log lost its end or was rewritten",
            index - 1
        )]
    );
    assert!(!audit.consistent());
}

#[test]
fn a_commit_passing_for_the_coordinator_with_lookalike_letters_or_another_letter_case_is_refused() {
    let w = World::new();
    let head = w.store.read(log::head).unwrap().unwrap();
    let refused = |writer: &str, record: Value| {
        let c = commit_on_head(&w.store, writer, &record, None);
        commit::rest_commit(&w.store, c, &grant(5))
            .unwrap_err()
            .to_string()
    };
    for writer in ["Coordinator:a2a", "COORDINATOR:mcp", "World:genesis"] {
        assert_eq!(
            refused(writer, json!({})),
            format!("invalid commit: writtenBy {writer:?} is reserved: coordinator:* and world:* entries are written only by the daemon itself")
        );
    }
    // A Greek omicron in the writer, a Cyrillic es in the record's invocation id.
    let not_ascii = |what: &str, c: &str| {
        format!("invalid commit: {what} holds {c}, which is not ASCII: writtenBy and a record's invocationId are ASCII, so that no lookalike letter can pass for the coordinator's names (coordinator:a2a, a2a:…, mcp:…)")
    };
    assert_eq!(
        refused("coordinat\u{3bf}r:a2a", json!({})),
        not_ascii("writtenBy", "U+03BF")
    );
    assert_eq!(
        refused("rest:ops", json!({"invocationId": "m\u{441}p:demo:7f3a9c"})),
        not_ascii("the record's invocationId", "U+0441")
    );
    for id in ["MCP:demo:7f3a9c", "A2a:ep1:t1", "REST:mine"] {
        assert_eq!(
            refused("rest:ops", json!({"invocationId": id})),
            format!("invalid commit: the record's invocationId {id:?} is spelled like a daemon's id (a2a:, mcp:, rest:) in another letter case; only the coordinator writes a2a: and mcp: ids, and a client's rest: ids are in lower case")
        );
    }
    assert_eq!(w.store.read(log::head).unwrap().unwrap(), head);
    assert_eq!(spent(&w.store), 0);
}
