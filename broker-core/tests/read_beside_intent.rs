//! A read runs beside its intent: in a coordinator that is its store's only spender, an effect
//! that only reads runs while its intent is on its way to the disk, and its call is answered
//! only once the intent and the entry are durable. An effect that changes something still
//! waits for its intent.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use broker_core::coordinator::{Call, CallError, CallOutput, Coordinator, CoordinatorConfig};
use broker_core::journal::{self, Intent, Receipt};
use broker_core::log;
use broker_core::object::Ref;
use broker_core::store::{Store, WriteCtx};
use common::{a2a_call, handlers_for, TestHandler, World};
use serde_json::json;

/// A coordinator over `world`'s store that is its only spender, with `Workspace.Read` declared
/// read-only.
fn sole_spender(world: &World) -> Arc<Coordinator> {
    let mut handlers = handlers_for(world.handler.clone());
    handlers.mark_read_only("Workspace.Read");
    let config = CoordinatorConfig {
        clock: world.clock.clone(),
        sole_spender: true,
        ..CoordinatorConfig::default()
    };
    Arc::new(Coordinator::new(world.store.clone(), handlers, config))
}

/// Holds the writer after each commit, before its sync, until released; `entered` tells when
/// a commit is held.
struct Held {
    entered: mpsc::Receiver<()>,
    released: Arc<AtomicBool>,
    go: mpsc::Sender<()>,
}

impl Held {
    fn on(store: &Store) -> Held {
        let (tell, entered) = mpsc::channel::<()>();
        let (go, gate) = mpsc::channel::<()>();
        let gate = Mutex::new(gate);
        let released = Arc::new(AtomicBool::new(false));
        let open = released.clone();
        store.observe_commits(Some(Box::new(move |_, _| {
            if open.load(Ordering::SeqCst) {
                return;
            }
            let _ = tell.send(());
            let _ = gate.lock().unwrap().recv();
        })));
        Held {
            entered,
            released,
            go,
        }
    }

    /// Wait until a commit is held.
    fn commit_held(&self) {
        self.entered
            .recv_timeout(Duration::from_secs(10))
            .expect("a commit reached the writer");
    }

    /// Let every commit through from now on.
    fn release(&self) {
        self.released.store(true, Ordering::SeqCst);
        let _ = self.go.send(());
    }
}

/// Make `call` on a thread of its own; its answer comes on the receiver.
fn spawn_call(
    coordinator: &Arc<Coordinator>,
    call: Call,
) -> mpsc::Receiver<Result<CallOutput, CallError>> {
    let (answered, answer) = mpsc::channel();
    let coordinator = coordinator.clone();
    std::thread::spawn(move || {
        let _ = answered.send(coordinator.invoke(&call));
    });
    answer
}

/// Waits up to 10 s for the handler to have run `n` times.
fn ran(handler: &TestHandler, n: usize) -> bool {
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        if handler.runs() >= n {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    false
}

fn revision(store: &Store) -> u64 {
    store.read(log::head).unwrap().unwrap().world.revision
}

#[test]
fn a_read_runs_while_its_intent_is_held_and_is_answered_once_both_are_durable() {
    let world = World::new();
    let coordinator = sole_spender(&world);
    let session = world.mint("e1", &["Workspace.Read=worktree:5"]);
    let held = Held::on(&world.store);

    let read = a2a_call(&session, "ailang-read", "r1", json!({"path": "a.ail"}));
    let answer = spawn_call(&coordinator, read);
    held.commit_held();
    // The intent is committed but not durable, and the writer is held: the handler ran anyway.
    assert!(ran(&world.handler, 1), "the read ran beside its intent");
    assert!(
        answer.recv_timeout(Duration::from_millis(200)).is_err(),
        "no answer while the intent is not durable"
    );
    held.release();
    let out = answer
        .recv_timeout(Duration::from_secs(10))
        .expect("answered once released")
        .expect("the read is committed");
    assert_eq!(out.effects[0].status, "ok");
    let receipt = world
        .store
        .read(|r| journal::receipt(r, &out.invocation_id))
        .unwrap();
    assert!(
        matches!(
            receipt,
            Receipt::Resolved {
                status: journal::OutcomeStatus::Succeeded,
                ..
            }
        ),
        "{receipt:?}"
    );
    let spent = world.store.read(|r| journal::spent(r, "e1")).unwrap();
    assert_eq!(
        spent.get(&("Workspace.Read".into(), "worktree".into())),
        Some(&1)
    );
}

#[test]
fn a_write_still_waits_for_its_intent_to_be_durable() {
    let world = World::new();
    let coordinator = sole_spender(&world);
    let session = world.mint("e1", &["Workspace.Write=worktree:5"]);
    let held = Held::on(&world.store);

    let args = json!({"path": "a.ail", "content": "x"});
    let answer = spawn_call(&coordinator, a2a_call(&session, "ailang-write", "w1", args));
    held.commit_held();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        world.handler.runs(),
        0,
        "a write runs only once its intent is durable"
    );
    held.release();
    let out = answer
        .recv_timeout(Duration::from_secs(10))
        .expect("answered once released")
        .expect("the write is committed");
    assert_eq!(out.effects[0].status, "ok");
    assert_eq!(world.handler.runs(), 1);
}

/// The safety net of a misconfiguration: `sole_spender` set while something else spends the
/// same budget. The read's intent is refused by the writer after the read ran; the call is an
/// error, nothing of it is journaled or committed, and the budget is not overspent.
#[test]
fn a_read_whose_budget_another_writer_spent_while_it_ran_is_an_error_and_leaves_nothing() {
    let world = World::new();
    let coordinator = sole_spender(&world);
    let session = world.mint("e1", &["Workspace.Read=worktree:1"]);
    let before = revision(&world.store);
    let held = Held::on(&world.store);

    // Hold the writer on a commit of its own, then queue another writer's spend of the
    // episode's only unit: the read's admission cannot see it yet.
    let noop = world
        .store
        .submit(|_: &mut WriteCtx<'_, '_>| Ok::<(), broker_core::store::StoreError>(()));
    held.commit_held();
    let other = Intent {
        invocation_id: "a2a:e1:elsewhere".into(),
        episode: "e1".into(),
        effect: "Workspace.Read".into(),
        scope: "worktree".into(),
        cost: 1,
        request_ref: Ref::of(b"elsewhere"),
    };
    let spend = world
        .store
        .submit(move |w: &mut WriteCtx<'_, '_>| journal::append_intent(w, &other, 1));

    let read = a2a_call(&session, "ailang-read", "r1", json!({"path": "a.ail"}));
    let answer = spawn_call(&coordinator, read);
    assert!(ran(&world.handler, 1), "the read ran beside its intent");
    held.release();
    noop.wait().unwrap();
    spend.wait().unwrap();

    let err = answer
        .recv_timeout(Duration::from_secs(10))
        .expect("answered")
        .expect_err("the read's intent was refused");
    match err {
        CallError::Internal(m) => assert!(m.contains("spent by another writer"), "{m}"),
        other => panic!("unexpected answer {other:?}"),
    }
    assert_eq!(
        world
            .store
            .read(|r| journal::receipt(r, "a2a:e1:r1"))
            .unwrap(),
        Receipt::NotStarted
    );
    assert_eq!(revision(&world.store), before, "nothing was committed");
    let spent = world.store.read(|r| journal::spent(r, "e1")).unwrap();
    assert_eq!(
        spent.get(&("Workspace.Read".into(), "worktree".into())),
        Some(&1),
        "the other writer's unit only"
    );
}
