//! Enforced handler deadlines: a handler that hangs is answered at its deadline, its episode
//! stays busy until it really returns, its outcome is then journaled (never committed), and
//! other episodes are served meanwhile.

mod common;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use broker_core::broker::HandlerIdentity;
use broker_core::coordinator::{
    Call, CallError, CallState, Coordinator, CoordinatorConfig, EffectHandler, EffectRequest,
    HandlerOutcome, Handlers, Surface, MIN_HANDLER_TIME,
};
use broker_core::journal::{self, OutcomeStatus, Receipt};
use broker_core::log;
use broker_core::session::{self, Session};
use broker_core::store::Store;
use serde_json::{json, Map};

use common::a2a_call as call;

/// `Workspace.Write` waits at the gate (reporting its deadline); `Workspace.Read` answers.
struct Hanging {
    gate: common::Gate<Duration>,
}

impl EffectHandler for Hanging {
    fn identity(&self) -> HandlerIdentity {
        HandlerIdentity::in_process("test/hanging", "0")
    }
    fn execute(&self, req: &EffectRequest<'_>) -> HandlerOutcome {
        let mut out = Map::new();
        out.insert("ok".into(), json!(true));
        if req.effect == "Workspace.Write" {
            self.gate.pass(req.deadline);
            out.insert("late".into(), json!(true));
        }
        HandlerOutcome::Ok(out)
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    store: Store,
    handler: Arc<Hanging>,
    entered: mpsc::Receiver<Duration>,
    coordinator: Arc<Coordinator>,
}

fn setup(handler_deadline: Duration) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    common::publish_se_tools(&store);
    let (gate, entered) = common::Gate::new();
    let handler = Arc::new(Hanging { gate });
    let mut handlers = Handlers::new();
    for e in ["Workspace.Read", "Workspace.Write"] {
        handlers.insert(e, handler.clone()).unwrap();
    }
    let config = CoordinatorConfig {
        handler_deadline,
        ..CoordinatorConfig::default()
    };
    let coordinator = Arc::new(Coordinator::new(store.clone(), handlers, config));
    Setup {
        _dir: dir,
        store,
        handler,
        entered,
        coordinator,
    }
}

fn mint(store: &Store, episode: &str) -> Session {
    let grants = ["Workspace.Read=worktree:10", "Workspace.Write=worktree:10"]
        .iter()
        .map(|g| g.parse().unwrap())
        .collect();
    session::mint(store, episode, grants, 3600, now())
        .unwrap()
        .session
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn write(session: &Session, task: &str) -> Call {
    call(
        session,
        "ailang-write",
        task,
        json!({"path": "a.ail", "content": "x"}),
    )
}

/// What the journal says of invocation `id`.
fn receipt(store: &Store, id: &str) -> Receipt {
    store.read(|r| journal::receipt(r, id)).unwrap()
}

/// An `ailang-read` of `session` that must run its effect.
fn read_ok(coordinator: &Coordinator, session: &Session, task: &str) {
    let out = coordinator
        .invoke(&call(
            session,
            "ailang-read",
            task,
            json!({"path": "a.ail"}),
        ))
        .unwrap();
    assert_eq!(out.effects[0].status, "ok");
}

fn revision(store: &Store) -> u64 {
    store.read(log::head).unwrap().unwrap().world.revision
}

#[test]
fn hung_handler_is_answered_at_its_deadline_and_journaled_when_it_returns() {
    let s = setup(Duration::from_millis(200));
    let hung = mint(&s.store, "hung");
    let other = mint(&s.store, "other");
    let before = revision(&s.store);

    // The first call's handler hangs: the caller is answered at the deadline.
    let err = s.coordinator.invoke(&write(&hung, "w1")).unwrap_err();
    assert!(matches!(err, CallError::HandlerTimedOut), "{err:?}");
    // The handler was told its deadline.
    assert_eq!(
        s.entered.recv_timeout(Duration::from_secs(30)).unwrap(),
        Duration::from_millis(200)
    );
    assert_eq!(s.coordinator.overruns().total(), 1);
    assert_eq!(s.coordinator.overruns().running(), 1);

    // Meanwhile: the intent is durable and indeterminate, nothing is committed.
    assert_eq!(receipt(&s.store, "a2a:hung:w1"), Receipt::Indeterminate);
    let rec = s
        .coordinator
        .reconcile(&hung, Surface::A2a, "w1")
        .unwrap()
        .unwrap();
    assert_eq!(rec.state, CallState::Indeterminate);

    // Other episodes keep full service.
    read_ok(&s.coordinator, &other, "r1");
    assert_eq!(revision(&s.store), before + 1);

    // The same episode's next call waits for the hung handler (on another thread).
    let (done_tx, done_rx) = mpsc::channel();
    let coordinator = s.coordinator.clone();
    let hung2 = hung.clone();
    let next = std::thread::spawn(move || {
        let r = coordinator.invoke(&call(&hung2, "ailang-read", "r2", json!({"path": "b"})));
        done_tx.send(()).unwrap();
        r
    });

    // The handler returns: its outcome and record are journaled, the call is not committed.
    s.handler.gate.release();
    let second = next.join().unwrap().unwrap();
    done_rx.recv().unwrap();
    // The episode's next call ran only after the late outcome was journaled.
    let receipt = receipt(&s.store, "a2a:hung:w1");
    assert!(
        matches!(
            receipt,
            Receipt::Resolved {
                status: OutcomeStatus::Succeeded,
                result_ref: Some(_)
            }
        ),
        "{receipt:?}"
    );
    let rec = s
        .coordinator
        .reconcile(&hung, Surface::A2a, "w1")
        .unwrap()
        .unwrap();
    assert_eq!(rec.state, CallState::Unrecorded);
    assert_eq!(rec.entry_index, None);
    assert_eq!(rec.effects.len(), 1);
    assert_eq!(rec.effects[0].status, "ok");
    // Two reads committed; the late write never was.
    assert_eq!(second.entry_index, before + 2);
    assert_eq!(revision(&s.store), before + 2);
    assert_eq!(s.coordinator.overruns().running(), 0);

    // The write's budget was spent exactly once; resending its task id names the outcome.
    let budget = s.coordinator.budget(&hung).unwrap();
    let spent: Vec<(String, u64)> = budget.iter().map(|b| (b.effect.clone(), b.spent)).collect();
    assert!(spent.contains(&("Workspace.Write".into(), 1)), "{spent:?}");
    let again = s.coordinator.invoke(&write(&hung, "w1")).unwrap_err();
    assert!(
        matches!(again, CallError::EffectsUnrecorded { ref records } if *records == vec![rec.effects[0].record]),
        "{again:?}"
    );
}

#[test]
fn a_callers_earlier_deadline_shortens_the_handlers() {
    let s = setup(Duration::from_secs(60));
    let hung = mint(&s.store, "hung");
    // More than the least a handler is started with, far less than its own 60 s.
    let left = MIN_HANDLER_TIME + Duration::from_millis(200);
    let until = Instant::now() + left;
    let err = s
        .coordinator
        .invoke_until(&write(&hung, "w1"), Some(until), ())
        .unwrap_err();
    assert!(matches!(err, CallError::HandlerTimedOut), "{err:?}");
    let told = s.entered.recv_timeout(Duration::from_secs(30)).unwrap();
    assert!(told <= left, "{told:?}");
    s.handler.gate.release();
}

/// The budget the episode spent on `effect`.
fn spent(coordinator: &Coordinator, session: &Session, effect: &str) -> u64 {
    coordinator
        .budget(session)
        .unwrap()
        .iter()
        .find(|b| b.effect == effect)
        .map(|b| b.spent)
        .unwrap()
}

/// Attack: the late items of one MCP batch share the POST's deadline; an item reached with a
/// few milliseconds (or none) of it left was admitted all the same: its intent journaled, a
/// budget unit spent, then its plugin failed at once (or was told `deadlineMs: 0`, no limit,
/// and ran on after the caller was answered). A call left less than the least a handler is
/// started with is now refused before its intent, both ways a caller waits: answered timed
/// out, its handler never started, nothing journaled or spent, and its task id free for a
/// resend, which then runs.
#[test]
fn a_call_left_under_the_minimum_handler_time_is_refused_before_its_intent_and_spends_nothing() {
    let s = setup(Duration::from_secs(10));
    let writer = mint(&s.store, "writer");
    let before = revision(&s.store);
    let watch = s.coordinator.watch();
    let lefts = [
        Duration::ZERO,
        Duration::from_micros(500),
        Duration::from_millis(8),
        Duration::from_millis(42),
        MIN_HANDLER_TIME - Duration::from_millis(5),
    ];
    for (i, left) in lefts.into_iter().enumerate() {
        for watched in [false, true] {
            let task = format!("late-{i}-{watched}");
            let w = write(&writer, &task);
            let until = Some(Instant::now() + left);
            let err = if watched {
                s.coordinator.invoke_watched(&w, until, (), &watch)
            } else {
                s.coordinator.invoke_until(&w, until, ())
            }
            .unwrap_err();
            assert!(matches!(err, CallError::NoTimeToStart), "{left:?}: {err:?}");
            assert_eq!(
                receipt(&s.store, &format!("a2a:writer:{task}")),
                Receipt::NotStarted,
                "{left:?}"
            );
            assert!(
                s.entered.try_recv().is_err(),
                "{left:?}: its handler started"
            );
            assert!(s
                .coordinator
                .reconcile(&writer, Surface::A2a, &task)
                .unwrap()
                .is_none());
        }
    }
    assert_eq!(spent(&s.coordinator, &writer, "Workspace.Write"), 0);
    assert_eq!(revision(&s.store), before, "nothing was committed");
    assert_eq!(s.coordinator.overruns().total(), 0);
    // The task id is free: sent again with time to run, the call runs once and spends once.
    s.handler.gate.release();
    let out = s
        .coordinator
        .invoke(&write(&writer, "late-0-false"))
        .unwrap();
    assert_eq!(out.effects[0].status, "ok");
    assert!(!out.replayed);
    assert_eq!(s.entered.try_recv().unwrap(), Duration::from_secs(10));
    assert_eq!(spent(&s.coordinator, &writer, "Workspace.Write"), 1);
}

/// Sleeps past the call's deadline once its intent is journaled.
struct SlowIntent(Duration);

impl broker_core::coordinator::Hooks for SlowIntent {
    fn reached(&self, point: broker_core::coordinator::CrashPoint) {
        if point == broker_core::coordinator::CrashPoint::AfterIntent {
            std::thread::sleep(self.0);
        }
    }
}

/// Attack (the same, one step later): a call's deadline runs out while its intent is on its
/// way to the disk. Its handler used to start with the deadline already due (`deadlineMs: 0`,
/// no limit), so the git plugin really committed for a call answered "timed out". The handler
/// is now never started and the call is not committed. Its intent was then closed as failed,
/// which kept the unit it had spent on an effect that never ran: it is now closed withdrawn,
/// with the unit given back in the same transaction, and the caller is told nothing ran.
#[test]
fn a_handler_whose_deadline_passed_during_its_intent_is_never_started_and_spends_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    common::publish_se_tools(&store);
    let (gate, entered) = common::Gate::new();
    let mut handlers = Handlers::new();
    handlers
        .insert("Workspace.Write", Arc::new(Hanging { gate }))
        .unwrap();
    let left = MIN_HANDLER_TIME + Duration::from_millis(100);
    let config = CoordinatorConfig {
        hooks: Arc::new(SlowIntent(left + Duration::from_millis(100))),
        ..CoordinatorConfig::default()
    };
    let coordinator = Coordinator::new(store.clone(), handlers, config);
    let writer = mint(&store, "writer");
    let before = revision(&store);
    let err = coordinator
        .invoke_until(&write(&writer, "w1"), Some(Instant::now() + left), ())
        .unwrap_err();
    assert!(matches!(err, CallError::NotStarted), "{err:?}");
    assert_eq!(
        err.to_string(),
        "the call's deadline passed while its intent was journaled: its handler was not started, nothing was spent, and the call was not committed; its key stays used: send it again under another key"
    );
    assert!(entered.try_recv().is_err(), "the handler was started");
    assert!(
        matches!(
            receipt(&store, "a2a:writer:w1"),
            Receipt::Resolved {
                status: OutcomeStatus::Withdrawn,
                ..
            }
        ),
        "{:?}",
        receipt(&store, "a2a:writer:w1")
    );
    // The unit the intent spent is back, and the audit agrees with the counter.
    assert_eq!(spent(&coordinator, &writer, "Workspace.Write"), 0);
    let audit = broker_core::verify::audit_store(&store).unwrap();
    assert!(audit.consistent(), "{audit:?}");
    let rec = coordinator
        .reconcile(&writer, Surface::A2a, "w1")
        .unwrap()
        .unwrap();
    assert_eq!(rec.state, CallState::Withdrawn);
    assert_eq!(rec.effects[0].status, "failed");
    // Its record says nothing was spent, as the counter does.
    assert_eq!(rec.effects[0].budget_after, 10);
    assert_eq!(revision(&store), before, "nothing was committed");
    assert_eq!(coordinator.overruns().total(), 0);
    assert_eq!(coordinator.overruns().running(), 0);
    // Its task id stays used: sent again, it is told so (its own variant, which only a resend
    // meets) and runs nothing.
    let again = coordinator.invoke(&write(&writer, "w1")).unwrap_err();
    assert!(matches!(again, CallError::Withdrawn), "{again:?}");
    assert_eq!(
        again.to_string(),
        "the first call with this key was withdrawn at its deadline: its handler was never started, nothing ran and nothing was spent; its key stays used: send it again under another key"
    );
    assert!(entered.try_recv().is_err(), "the handler was started");
    assert_eq!(spent(&coordinator, &writer, "Workspace.Write"), 0);
}

/// Watched (the daemon's way): the handler runs on the call's own thread, and the waiter gives
/// up on it through the watch, no later than its deadline. The intent is then indeterminate,
/// other episodes are served, and when the handler returns its thread journals the outcome
/// (not committed) and frees the episode.
#[test]
fn a_watched_call_is_abandoned_by_its_waiter_and_journaled_by_its_own_thread() {
    let s = setup(Duration::from_millis(200));
    let hung = mint(&s.store, "hung");
    let other = mint(&s.store, "other");
    let before = revision(&s.store);
    let watch = Arc::new(s.coordinator.watch());
    let looked = Instant::now();
    let first_look = watch.next_look(looked);
    let pipeline = std::thread::spawn({
        let (coordinator, watch) = (s.coordinator.clone(), watch.clone());
        let w = write(&hung, "w1");
        move || coordinator.invoke_watched(&w, None, (), &watch)
    });
    s.entered.recv_timeout(Duration::from_secs(30)).unwrap();
    let due = watch.handler_deadline().expect("a handler runs");
    assert!(
        first_look <= due,
        "the first look comes no later than the deadline"
    );
    assert!(!watch.abandon_if_due(Instant::now().min(due - Duration::from_millis(1))));
    std::thread::sleep(due.saturating_duration_since(Instant::now()));
    assert!(watch.abandon_if_due(Instant::now()));
    assert_eq!(s.coordinator.overruns().running(), 1);
    assert_eq!(receipt(&s.store, "a2a:hung:w1"), Receipt::Indeterminate);
    read_ok(&s.coordinator, &other, "r1");

    s.handler.gate.release();
    let err = pipeline.join().unwrap().unwrap_err();
    assert!(matches!(err, CallError::HandlerTimedOut), "{err:?}");
    let rec = s
        .coordinator
        .reconcile(&hung, Surface::A2a, "w1")
        .unwrap()
        .unwrap();
    assert_eq!(rec.state, CallState::Unrecorded);
    assert_eq!(rec.effects[0].status, "ok");
    assert_eq!(
        revision(&s.store),
        before + 1,
        "only the other episode's read"
    );
    assert_eq!(s.coordinator.overruns().running(), 0);
    assert_eq!(s.coordinator.overruns().total(), 1);
    // The episode is free again.
    read_ok(&s.coordinator, &hung, "r2");
}

/// Watched, a handler that returns in time is never abandoned: the call commits as usual.
#[test]
fn a_watched_call_in_time_commits_as_usual() {
    let s = setup(Duration::from_secs(30));
    let reader = mint(&s.store, "reader");
    let watch = s.coordinator.watch();
    let out = s
        .coordinator
        .invoke_watched(
            &call(&reader, "ailang-read", "r1", json!({"path": "a.ail"})),
            None,
            (),
            &watch,
        )
        .unwrap();
    assert_eq!(out.effects[0].status, "ok");
    assert_eq!(watch.handler_deadline(), None);
    assert!(!watch.abandon_if_due(Instant::now() + Duration::from_secs(3600)));
    assert_eq!(s.coordinator.overruns().total(), 0);
}

/// A withdrawal gives the intent's units back, so it is the coordinator's alone, for a handler
/// it never started: the public `append_outcome` refuses it, and the intent stays open.
#[test]
fn an_intent_is_not_withdrawn_through_the_public_journal_api() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    let intent = journal::Intent {
        invocation_id: "a2a:ep:t1".into(),
        episode: "ep".into(),
        effect: "Workspace.Write".into(),
        scope: "worktree".into(),
        cost: 1,
        request_ref: broker_core::object::Ref::of(b"r"),
    };
    store
        .write(move |w| journal::append_intent(w, &intent, 5))
        .unwrap();
    let err = store
        .write(|w| journal::append_outcome(w, "a2a:ep:t1", OutcomeStatus::Withdrawn, None))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invocation a2a:ep:t1: an intent is withdrawn only by the coordinator, for a handler it never started"
    );
    assert_eq!(receipt(&store, "a2a:ep:t1"), Receipt::Indeterminate);
}
