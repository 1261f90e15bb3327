//! The call pipeline end to end on a real LMDB store: refusals, successes, denials, failures,
//! budgets, idempotency, R8 and EffectsUnrecorded.

mod common;

use broker_core::broker::EffectRecord;
use broker_core::coordinator::{
    Call, CallError, Coordinator, CoordinatorConfig, Handlers, Surface,
};
use broker_core::journal::{self, Receipt};
use broker_core::log;
use broker_core::object::{sid, Ref};
use broker_core::registry;
use broker_core::store::Store;
use broker_core::transition::Transition;
use broker_core::verify::{self, Handle};
use common::*;
use serde_json::{json, Value};

fn record_of(w: &World, out: &Value) -> EffectRecord {
    let r: Ref = out["world"]["effects"][0]["record"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let o = w.store.read(|rd| rd.object(&r)).unwrap().unwrap();
    assert_eq!(o.semantic_id, sid::EFFECT_RECORD);
    serde_json::from_slice(&o.payload).unwrap()
}

fn spent(w: &World, episode: &str, effect: &str) -> u64 {
    w.store
        .read(|r| journal::spent(r, episode))
        .unwrap()
        .get(&(effect.to_string(), "worktree".to_string()))
        .copied()
        .unwrap_or(0)
}

#[test]
fn genesis_is_entry_zero_and_verifies() {
    let w = World::new();
    let head = w.store.read(log::head).unwrap().unwrap();
    assert_eq!(head.world.revision, 0);
    let e0 = w.store.read(|r| log::entry(r, 0)).unwrap().unwrap();
    assert_eq!(e0.header.prev_entry_hash, Ref::ZERO);
    assert_eq!(
        e0.header.prev_entry_hash.to_string(),
        format!("sha256:{}", "0".repeat(64))
    );
    let report = verify::why(&w.store, &Handle::Index(0), 10).unwrap();
    assert!(report.all_ok(), "{report:?}");
}

#[test]
fn plan_refusal_is_committed_with_zero_effects_and_spends_nothing() {
    let w = World::new();
    let s = w.mint("ep1", &["Workspace.Read=worktree:5"]);
    let out = w
        .call(&s, "ailang-read", json!({"path": "a", "limit": 3}))
        .unwrap();
    let v = output_json(&out);
    assert_eq!(v["ok"], false);
    assert_eq!(
        v["refused"],
        "unknown argument \"limit\"; ailang-read admits only: path"
    );
    assert_eq!(v["world"]["effects"], json!([]));
    assert_eq!(out.entry_index, 1);
    assert_eq!(Ref::of(&out.output), out.output_ref);
    assert_eq!(w.handler.runs(), 0);
    assert_eq!(spent(&w, "ep1", "Workspace.Read"), 0);
    // Exactly the keys the seed shows.
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["ok", "refused", "world"]);
    let why = verify::why(&w.store, &Handle::Output(out.output.clone()), 10).unwrap();
    assert_eq!(why.reports.len(), 1, "{why:?}");
    let report = &why.reports[0];
    assert!(report.all_ok(), "{report:?}");
    assert_eq!(report.matched_by, "output (sha256 of the result)");
    let kinds: Vec<&str> = report.links.iter().map(|l| l.kind).collect();
    assert_eq!(
        kinds,
        ["world", "entry", "record", "journal", "input", "plan", "replay", "output"]
    );
}

#[test]
fn success_commits_handler_output_plus_world_and_debits_once() {
    let w = World::new();
    let s = w.mint("ep1", &["Workspace.Read=worktree:5"]);
    let out = w
        .call(&s, "ailang-read", json!({"path": "hello.ail"}))
        .unwrap();
    let v = output_json(&out);
    assert_eq!(v["ok"], true);
    assert_eq!(v["echo"], json!({"op": "read", "path": "hello.ail"}));
    assert_eq!(v["world"]["effects"][0]["id"], "e1");
    assert_eq!(v["world"]["effects"][0]["status"], "ok");
    let rec = record_of(&w, &v);
    assert!(rec.allowed && !rec.failed && rec.result_ref.is_some());
    assert_eq!((rec.budget_before, rec.budget_after), (5, 4));
    assert_eq!(spent(&w, "ep1", "Workspace.Read"), 1);
    assert_eq!(w.handler.runs(), 1);
    // The bytes returned are exactly the stored output (canonical) and the world's stateRoot.
    let head = w.store.read(log::head).unwrap().unwrap();
    assert_eq!(head.world.state_root, out.output_ref);
    assert_eq!(head.world_ref, out.world_ref);
    assert_eq!(out.output, broker_core::canon::to_vec(&v).unwrap());
    let receipt = w
        .store
        .read(|r| journal::receipt(r, &out.invocation_id))
        .unwrap();
    assert!(matches!(receipt, Receipt::Resolved { .. }));
    for handle in [
        Handle::Head,
        Handle::Index(out.entry_index),
        Handle::Ref(out.output_ref),
        Handle::Ref(out.world_ref),
        Handle::Ref(v["world"]["plan"].as_str().unwrap().parse().unwrap()),
        Handle::Ref(
            v["world"]["effects"][0]["record"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap(),
        ),
        Handle::Invocation(out.invocation_id.clone()),
        Handle::Output(out.output.clone()),
    ] {
        let why = verify::why(&w.store, &handle, 10).unwrap();
        assert_eq!(why.reports.len(), 1, "{handle:?}: {why:?}");
        let report = &why.reports[0];
        assert_eq!(report.entry_index, out.entry_index, "{handle:?}");
        assert!(report.all_ok(), "{handle:?}: {report:?}");
        let kinds: Vec<&str> = report.links.iter().map(|l| l.kind).collect();
        assert_eq!(
            kinds,
            [
                "world", "entry", "record", "journal", "input", "plan", "replay", "effect",
                "plugin", "output"
            ]
        );
    }
}

#[test]
fn a_denial_spends_nothing_and_carries_only_the_world_block() {
    let w = World::new();
    let s = w.mint("ep1", &["Workspace.Read=worktree:0"]);
    let out = w.call(&s, "ailang-read", json!({"path": "a"})).unwrap();
    let v = output_json(&out);
    assert_eq!(v.as_object().unwrap().len(), 1, "{v}");
    assert_eq!(v["world"]["effects"][0]["status"], "denied");
    let rec = record_of(&w, &v);
    assert_eq!(rec.denial, "denied:budget");
    assert!(!rec.allowed && !rec.failed && rec.result_ref.is_none());
    assert_eq!(spent(&w, "ep1", "Workspace.Read"), 0);
    assert_eq!(w.handler.runs(), 0);
    assert!(verify::why(&w.store, &Handle::Head, 10).unwrap().all_ok());
}

#[test]
fn a_denied_finish_tool_says_the_effect_ended_denied() {
    let w = World::new();
    let s = w.mint("ep1", &["Ailang.Check=worktree:0"]);
    let out = w
        .call(&s, "ailang-check", json!({"path": "a.ail"}))
        .unwrap();
    let v = output_json(&out);
    assert_eq!(v["ok"], false);
    assert_eq!(v["status"], "denied");
    assert_eq!(v["refused"], "the Ailang.Check effect ended denied");
    assert_eq!(v["world"]["effects"][0]["status"], "denied");
}

#[test]
fn denial_labels_effect_name_and_expired() {
    let w = World::new();
    // ailang-run is visible through Ailang.Run, but caps Env plans Ailang.RunEnv.
    let s = w.mint("ep1", &["Ailang.Run=worktree:3"]);
    let out = w
        .call(&s, "ailang-run", json!({"path": "a.ail", "caps": ["Env"]}))
        .unwrap();
    assert_eq!(
        record_of(&w, &output_json(&out)).denial,
        "denied:effect-name"
    );
    // At the expiry second the session is valid but its grants are not live.
    w.clock
        .0
        .store(s.expires_at, std::sync::atomic::Ordering::SeqCst);
    let out = w.call(&s, "ailang-run", json!({"path": "a.ail"})).unwrap();
    assert_eq!(record_of(&w, &output_json(&out)).denial, "denied:expired");
    assert_eq!(w.handler.runs(), 0);
}

#[test]
fn a_session_without_the_access_grant_is_not_authorized() {
    let w = World::new();
    let s = w.mint("ep1", &["Workspace.Write=worktree:3"]);
    let e = w.call(&s, "ailang-read", json!({"path": "a"})).unwrap_err();
    assert!(matches!(e, CallError::NotAuthorized), "{e}");
    let e = w.call(&s, "no-such-tool", json!({})).unwrap_err();
    assert_eq!(e.to_string(), "not authorized");
    let visible: Vec<String> = w
        .coordinator
        .visible(&s)
        .unwrap()
        .iter()
        .map(|e| e.transition.id.clone())
        .collect();
    assert_eq!(visible, ["ailang-edit", "ailang-write"]);
}

#[test]
fn a_failed_handler_keeps_its_debit() {
    let w = World::new();
    let s = w.mint("ep1", &["Workspace.Write=worktree:2"]);
    w.handler.set(Mode::Fail);
    let out = w
        .call(&s, "ailang-write", json!({"path": "a", "content": "x"}))
        .unwrap();
    let v = output_json(&out);
    assert_eq!(v.as_object().unwrap().len(), 1);
    assert_eq!(v["world"]["effects"][0]["status"], "failed");
    let rec = record_of(&w, &v);
    assert!(rec.allowed && rec.failed && rec.result_ref.is_none());
    assert_eq!(spent(&w, "ep1", "Workspace.Write"), 1);
    assert!(verify::why(&w.store, &Handle::Head, 10).unwrap().all_ok());
}

#[test]
fn a_panicking_handler_is_a_failed_effect_and_the_next_call_works() {
    let w = World::new();
    let s = w.mint("ep1", &["Workspace.Read=worktree:3"]);
    w.handler.set(Mode::Panic);
    let out = w.call(&s, "ailang-read", json!({"path": "a"})).unwrap();
    assert_eq!(output_json(&out)["world"]["effects"][0]["status"], "failed");
    w.handler.set(Mode::Ok);
    let out = w.call(&s, "ailang-read", json!({"path": "a"})).unwrap();
    assert_eq!(output_json(&out)["ok"], true);
    assert_eq!(spent(&w, "ep1", "Workspace.Read"), 2);
}

#[test]
fn reserved_world_key_from_a_handler_is_a_failure() {
    let w = World::new();
    let s = w.mint("ep1", &["Workspace.Read=worktree:3"]);
    w.handler.set(Mode::Reserved);
    let out = w.call(&s, "ailang-read", json!({"path": "a"})).unwrap();
    assert_eq!(output_json(&out)["world"]["effects"][0]["status"], "failed");
}

#[test]
fn handler_output_without_a_canonical_form_is_a_failed_effect_with_an_outcome() {
    let w = World::new();
    let s = w.mint("ep1", &["Workspace.Read=worktree:3"]);
    w.handler.set(Mode::Unsafe);
    let out = w.call(&s, "ailang-read", json!({"path": "a"})).unwrap();
    assert_eq!(output_json(&out)["world"]["effects"][0]["status"], "failed");
    let receipt = w
        .store
        .read(|r| journal::receipt(r, &out.invocation_id))
        .unwrap();
    assert!(matches!(receipt, Receipt::Resolved { .. }), "{receipt:?}");
    assert!(w.store.indeterminate().unwrap().is_empty());
}

#[test]
fn an_indeterminate_outcome_is_reported_as_such() {
    let w = World::new();
    let s = w.mint("ep1", &["Workspace.Write=worktree:3"]);
    w.handler.set(Mode::Indeterminate);
    let out = w
        .call(&s, "ailang-write", json!({"path": "a", "content": "x"}))
        .unwrap();
    assert_eq!(output_json(&out)["world"]["effects"][0]["status"], "failed");
    let receipt = w
        .store
        .read(|r| journal::receipt(r, &out.invocation_id))
        .unwrap();
    assert_eq!(receipt, Receipt::Indeterminate);
    assert_eq!(spent(&w, "ep1", "Workspace.Write"), 1);
}

#[test]
fn finish_reshapes_the_output() {
    let w = World::new();
    let s = w.mint("ep1", &["Ailang.Check=worktree:3"]);
    let out = w
        .call(&s, "ailang-check", json!({"path": "a.ail"}))
        .unwrap();
    let v = output_json(&out);
    assert_eq!(v["finished"], "check-report");
    assert_eq!(v["args"], json!({"path": "a.ail"}));
}

#[test]
fn a_failing_finish_is_effects_unrecorded_with_the_record_and_one_debit() {
    let w = World::new();
    let s = w.mint("ep1", &["Ailang.Check=worktree:3"]);
    *w.handler.finish_fails.lock().unwrap() = true;
    let head_before = w.store.read(log::head).unwrap().unwrap();
    let err = w
        .call_task(&s, "ailang-check", json!({"path": "a.ail"}), Some("t1"))
        .unwrap_err();
    let CallError::EffectsUnrecorded { records } = &err else {
        panic!("{err}")
    };
    assert_eq!(records.len(), 1);
    assert!(err
        .to_string()
        .starts_with("effects were requested but the invocation was not confirmed committed; effect records: sha256:"));
    // The record is durable, the log did not move, the budget was debited once.
    let rec = w.store.read(|r| r.object(&records[0])).unwrap().unwrap();
    assert_eq!(rec.semantic_id, sid::EFFECT_RECORD);
    assert_eq!(w.store.read(log::head).unwrap().unwrap(), head_before);
    assert_eq!(spent(&w, "ep1", "Ailang.Check"), 1);
    // Resending the task id never re-runs the effect.
    let again = w
        .call_task(&s, "ailang-check", json!({"path": "a.ail"}), Some("t1"))
        .unwrap_err();
    assert!(matches!(again, CallError::EffectsUnrecorded { .. }));
    assert_eq!(w.handler.runs(), 1);
}

#[test]
fn arguments_over_1_mib_are_refused_before_anything_is_journaled() {
    let w = World::new();
    let s = w.mint("ep1", &["Workspace.Read=worktree:5"]);
    let head_before = w.store.read(log::head).unwrap().unwrap();
    // {"path":"…"} canonically: 11 bytes around the path.
    let over = "a".repeat((1 << 20) - 10);
    let err = w
        .call_task(&s, "ailang-read", json!({"path": over}), Some("t1"))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid params: arguments are 1048577 bytes; the limit is 1048576"
    );
    assert!(matches!(err, CallError::InvalidArguments(_)), "{err:?}");
    assert_eq!(w.store.read(log::head).unwrap().unwrap(), head_before);
    assert_eq!(w.handler.runs(), 0);
    assert_eq!(spent(&w, "ep1", "Workspace.Read"), 0);
    // Exactly at the limit the call is admitted and its effect runs (the test handler echoes
    // its request, so that output is over the output limit in turn: the handler's failure,
    // recorded and committed).
    let at = "a".repeat((1 << 20) - 11);
    let done = w
        .call_task(&s, "ailang-read", json!({"path": at}), Some("t1"))
        .unwrap();
    assert_eq!(done.effects[0].status, "failed", "{done:?}");
    assert_eq!(w.handler.runs(), 1);
}

/// An output over 1 MiB was a post-effect failure: nothing committed, the unit spent, the agent
/// told only that the host failed. It is the handler's failure: recorded, committed, one debit.
#[test]
fn an_output_over_1_mib_is_the_handlers_failure_committed_with_its_record_and_one_debit() {
    let w = World::new();
    let s = w.mint("ep1", &["Workspace.Read=worktree:5"]);
    w.handler.set(Mode::Huge);
    let head_before = w.store.read(log::head).unwrap().unwrap();
    let done = w
        .call_task(&s, "ailang-read", json!({"path": "a"}), Some("t1"))
        .unwrap();
    assert_eq!(done.effects[0].status, "failed", "{done:?}");
    // The effect ran: its record is committed with the call, and its unit spent.
    let rec = w
        .store
        .read(|r| r.object(&done.effects[0].record))
        .unwrap()
        .unwrap();
    assert_eq!(rec.semantic_id, sid::EFFECT_RECORD);
    let head = w.store.read(log::head).unwrap().unwrap();
    assert_eq!(head.world.revision, head_before.world.revision + 1);
    assert_eq!(spent(&w, "ep1", "Workspace.Read"), 1);
    assert!(w.store.indeterminate().unwrap().is_empty());
    // Resending the task id returns the committed failure and never runs the effect again.
    w.handler.set(Mode::Ok);
    let again = w
        .call_task(&s, "ailang-read", json!({"path": "a"}), Some("t1"))
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.output, done.output);
    assert_eq!(w.handler.runs(), 1);
}

#[test]
fn budgets_survive_reopening_and_a_fresh_credential() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    {
        let w = World::in_dir(tempfile::tempdir().unwrap(), TestHandler::new(), None);
        drop(w);
    }
    let handler = TestHandler::new();
    let grants = ["Workspace.Read=worktree:2"];
    {
        let store = Store::create(&db).unwrap();
        publish_se_tools(&store);
        let c = Coordinator::new(
            store.clone(),
            handlers_for(handler.clone()),
            CoordinatorConfig::default(),
        );
        let s = mint(&store, "ep1", &grants);
        call(&c, &s, json!({"path": "a"})).unwrap();
    }
    // Reopen the same directory: the spend is still there.
    let store = Store::open(&db, Default::default()).unwrap();
    let c = Coordinator::new(
        store.clone(),
        handlers_for(handler.clone()),
        CoordinatorConfig::default(),
    );
    let fresh = mint(&store, "ep1", &grants);
    let out = call(&c, &fresh, json!({"path": "a"})).unwrap();
    assert_eq!(output_json(&out)["ok"], true);
    let out = call(&c, &fresh, json!({"path": "a"})).unwrap();
    let v = output_json(&out);
    assert_eq!(v["world"]["effects"][0]["status"], "denied");
    assert_eq!(handler.runs(), 2);
    // Another episode has its own budget.
    let other = mint(&store, "ep2", &grants);
    assert_eq!(
        output_json(&call(&c, &other, json!({"path": "a"})).unwrap())["ok"],
        true
    );

    fn mint(store: &Store, ep: &str, grants: &[&str]) -> broker_core::session::Session {
        let g = grants.iter().map(|g| g.parse().unwrap()).collect();
        broker_core::session::mint(store, ep, g, 3600, T0)
            .unwrap()
            .session
    }
    fn call(
        c: &Coordinator,
        s: &broker_core::session::Session,
        args: Value,
    ) -> Result<broker_core::coordinator::CallOutput, CallError> {
        c.invoke(&Call {
            surface: Surface::Mcp,
            session: s.clone().into(),
            skill_id: "ailang-read".into(),
            task_id: None,
            args,
            transition_fn: None,
        })
    }
}

#[test]
fn a_committed_task_id_returns_the_committed_result_without_running_again() {
    let w = World::new();
    let s = w.mint("ep1", &["Workspace.Write=worktree:5"]);
    let args = json!({"path": "a", "content": "x"});
    let first = w
        .call_task(&s, "ailang-write", args.clone(), Some("task-1"))
        .unwrap();
    let again = w
        .call_task(&s, "ailang-write", args, Some("task-1"))
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.output, first.output);
    assert_eq!(again.entry_index, first.entry_index);
    assert_eq!(w.handler.runs(), 1);
    assert_eq!(first.invocation_id, "a2a:ep1:task-1");
    let e = w
        .call_task(
            &s,
            "ailang-write",
            json!({"path": "b", "content": "x"}),
            Some("task-1"),
        )
        .unwrap_err();
    assert_eq!(e.to_string(), "task id already used in this session");
    let e = w
        .call_task(&s, "ailang-write", json!({}), Some("bad id"))
        .unwrap_err();
    assert!(matches!(e, CallError::InvalidTaskId));
    // 128 characters is the longest task id; one more is refused before anything runs.
    let runs = w.handler.runs();
    let e = w
        .call_task(&s, "ailang-write", json!({}), Some(&"t".repeat(129)))
        .unwrap_err();
    assert!(matches!(e, CallError::InvalidTaskId), "{e}");
    assert_eq!(w.handler.runs(), runs);
    w.call_task(
        &s,
        "ailang-write",
        json!({"path": "c", "content": "x"}),
        Some(&"t".repeat(128)),
    )
    .unwrap();
    assert_eq!(w.handler.runs(), runs + 1);
    // Refusals are idempotent too.
    let r1 = w
        .call_task(&s, "ailang-write", json!({}), Some("task-2"))
        .unwrap();
    let r2 = w
        .call_task(&s, "ailang-write", json!({}), Some("task-2"))
        .unwrap();
    assert_eq!(r1.output, r2.output);
    assert!(r2.replayed);
}

#[test]
fn r8_refuses_before_planning_with_no_entry_and_no_spend() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    publish_se_tools(&store);
    let handler = TestHandler::new();
    let mut handlers = Handlers::new();
    handlers.insert("Workspace.Read", handler.clone()).unwrap();
    let c = Coordinator::new(store.clone(), handlers, CoordinatorConfig::default());
    let g = vec!["Ailang.Run=worktree:5".parse().unwrap()];
    let s = broker_core::session::mint(&store, "ep1", g, 3600, T0)
        .unwrap()
        .session;
    let head = store.read(log::head).unwrap();
    // Even arguments that would be refused by the plan are not planned.
    let err = c
        .invoke(&Call {
            surface: Surface::A2a,
            session: s.into(),
            skill_id: "ailang-run".into(),
            task_id: None,
            args: json!({"nope": 1}),
            transition_fn: None,
        })
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "transition declares an effect this daemon has no handler for"
    );
    assert_eq!(store.read(log::head).unwrap(), head);
    assert!(store.read(|r| journal::spent(r, "ep1")).unwrap().is_empty());
    assert_eq!(handler.runs(), 0);
}

#[test]
fn a_transition_fn_pin_must_match() {
    let w = World::new();
    let s = w.mint("ep1", &["Workspace.Read=worktree:5"]);
    let reg = registry::load(&w.store, registry::DEFAULT_REGISTRY).unwrap();
    let real = reg.get("ailang-read").unwrap().transition_fn;
    let mut call = Call {
        surface: Surface::A2a,
        session: s.into(),
        skill_id: "ailang-read".into(),
        task_id: None,
        args: json!({"path": "a"}),
        transition_fn: Some(Ref::of(b"other")),
    };
    let e = w.coordinator.invoke(&call).unwrap_err();
    assert_eq!(
        e.to_string(),
        "proposal does not match the registered transition"
    );
    call.transition_fn = Some(real);
    w.coordinator.invoke(&call).unwrap();
}

#[test]
fn registry_publication_is_a_content_addressed_chain() {
    let w = World::new();
    let reg = registry::load(&w.store, registry::DEFAULT_REGISTRY).unwrap();
    assert_eq!(reg.len(), 8);
    assert_eq!(reg.revision, 1);
    // Publishing the same documents again changes nothing.
    let p = registry::publish(
        &w.store,
        registry::DEFAULT_REGISTRY,
        vec![se_tool("ailang-read")],
        "test",
    )
    .unwrap();
    assert!(!p.changed);
    assert_eq!(Some(p.reference), reg.reference);
    // A new tool makes revision 2 whose parent is revision 1.
    let mut doc = se_tool("ailang-read").to_value().clone();
    doc["id"] = json!("docs-read");
    let t = Transition::from_value(doc).unwrap();
    let p2 = registry::publish(&w.store, registry::DEFAULT_REGISTRY, vec![t], "test").unwrap();
    assert!(p2.changed);
    assert_eq!(p2.revision, 2);
    let obj = w.store.read(|r| r.object(&p2.reference)).unwrap().unwrap();
    let v: Value = serde_json::from_slice(&obj.payload).unwrap();
    assert_eq!(v["parent"], reg.reference.unwrap().to_string());
    assert_eq!(v["semanticId"], "world/transition-registry/v2");
    assert_eq!(
        registry::load(&w.store, registry::DEFAULT_REGISTRY)
            .unwrap()
            .len(),
        9
    );
    // The coordinator sees the new tool on the next call.
    let s = w.mint("ep1", &["Workspace.Read=worktree:5"]);
    assert_eq!(
        output_json(&w.call(&s, "docs-read", json!({"path": "x"})).unwrap())["ok"],
        true
    );
}

/// The coordinator keeps the registry it loaded while nothing is committed, and reads the head
/// again after any commit: a publication is seen by the very next call.
#[test]
fn the_registry_is_kept_until_a_commit_and_a_publication_is_seen_at_once() {
    let w = World::new();
    let first = w.coordinator.registry().unwrap();
    assert!(std::sync::Arc::ptr_eq(
        &first,
        &w.coordinator.registry().unwrap()
    ));
    let before = w.store.last_commit();
    // A commit that leaves the head alone: the head is read again, the registry kept.
    let s = w.mint("ep1", &["Workspace.Read=worktree:5"]);
    assert!(w.store.last_commit() > before);
    assert!(std::sync::Arc::ptr_eq(
        &first,
        &w.coordinator.registry().unwrap()
    ));
    let mut doc = se_tool("ailang-read").to_value().clone();
    doc["id"] = json!("docs-read");
    let t = Transition::from_value(doc).unwrap();
    registry::publish(&w.store, registry::DEFAULT_REGISTRY, vec![t], "test").unwrap();
    let published = w.coordinator.registry().unwrap();
    assert_eq!((first.len(), published.len()), (8, 9));
    assert_eq!(
        output_json(&w.call(&s, "docs-read", json!({"path": "x"})).unwrap())["ok"],
        true
    );
}

#[test]
fn concurrent_episodes_chain_without_conflicts() {
    let w = std::sync::Arc::new(World::new());
    let mut threads = Vec::new();
    for i in 0..8 {
        let w = w.clone();
        threads.push(std::thread::spawn(move || {
            let s = w.mint(&format!("ep{i}"), &["Workspace.Read=worktree:100"]);
            for _ in 0..10 {
                w.call(&s, "ailang-read", json!({"path": "a"})).unwrap();
            }
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
    let head = w.store.read(log::head).unwrap().unwrap();
    assert_eq!(head.world.revision, 80);
    for i in 0..=80 {
        assert!(
            verify::verify_entry(&w.store, i).unwrap().all_ok(),
            "entry {i}"
        );
    }
    let (findings, _) = w.store.read(journal::audit).unwrap();
    assert!(findings.is_empty(), "{findings:?}");
}
