//! A handler's preflight: a request the handler declines before admission is committed as
//! `denied:handler` with the handler's answer (bounded like any output), nothing is journaled
//! or spent, and `why` verifies it; a preflight that panics proceeds; one that hangs is
//! answered at the deadline and keeps its episode busy until it returns, with nothing spent.

mod common;

use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use broker_core::broker::{EffectRecord, HandlerIdentity};
use broker_core::coordinator::{
    Call, CallError, CallOutput, Coordinator, CoordinatorConfig, EffectHandler, EffectRequest,
    HandlerOutcome, Handlers, Surface,
};
use broker_core::journal;
use broker_core::object::Ref;
use broker_core::refusal_rate::RefusalRate;
use broker_core::session::{self, Session};
use broker_core::store::Store;
use broker_core::verify::{self, Handle};
use serde_json::{json, Map, Value};

/// Reads and checks: the preflight declines `big` (and `huge`, with a 2 MiB reason, `bignum`,
/// with an integer past 2^53, `deep-N`, nested N levels), panics on `boom`, waits for the gate on `slow`, and proceeds otherwise; `execute` always succeeds and
/// counts its runs.
struct Picky {
    runs: Mutex<usize>,
    gate: common::Gate<()>,
}

impl EffectHandler for Picky {
    fn identity(&self) -> HandlerIdentity {
        HandlerIdentity::in_process("test/picky", "1.2.3")
    }

    fn preflight(&self, req: &EffectRequest<'_>) -> Option<Map<String, Value>> {
        match req.payload["path"].as_str() {
            Some("big") => {
                let mut out = Map::new();
                out.insert("ok".into(), json!(false));
                out.insert("refused".into(), json!("read big: too big to answer"));
                Some(out)
            }
            Some("huge") => {
                let mut out = Map::new();
                out.insert("ok".into(), json!(false));
                out.insert("refused".into(), json!("x".repeat(2 << 20)));
                Some(out)
            }
            Some("bignum") => {
                let mut out = Map::new();
                out.insert("ok".into(), json!(false));
                out.insert("big".into(), json!(u64::MAX));
                Some(out)
            }
            Some(deep) if deep.starts_with("deep-") => {
                // `{"ok":false,"deep":…}` nested N levels, the object itself level 1.
                let levels: usize = deep["deep-".len()..].parse().unwrap();
                let inner = (1..levels).fold(json!(1), |v, _| json!({ "a": v }));
                let mut out = Map::new();
                out.insert("ok".into(), json!(false));
                out.insert("deep".into(), inner);
                Some(out)
            }
            Some("boom") => panic!("preflight panicked on purpose"),
            Some("slow") => {
                self.gate.pass(());
                None
            }
            _ => None,
        }
    }

    fn execute(&self, _: &EffectRequest<'_>) -> HandlerOutcome {
        *self.runs.lock().unwrap() += 1;
        let mut out = Map::new();
        out.insert("ok".into(), json!(true));
        HandlerOutcome::Ok(out)
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    store: Store,
    handler: Arc<Picky>,
    entered: mpsc::Receiver<()>,
    coordinator: Arc<Coordinator>,
    session: Session,
}

fn setup(handler_deadline: Duration) -> Setup {
    setup_with(handler_deadline, RefusalRate::default())
}

fn setup_with(handler_deadline: Duration, refusal_rate: RefusalRate) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    common::publish_se_tools(&store);
    let (gate, entered) = common::Gate::new();
    let handler = Arc::new(Picky {
        runs: Mutex::new(0),
        gate,
    });
    let mut handlers = Handlers::new();
    for e in ["Workspace.Read", "Ailang.Check"] {
        handlers.insert(e, handler.clone()).unwrap();
    }
    let config = CoordinatorConfig {
        handler_deadline,
        refusal_rate,
        ..CoordinatorConfig::default()
    };
    let coordinator = Arc::new(Coordinator::new(store.clone(), handlers, config));
    let grants = ["Workspace.Read=worktree:3", "Ailang.Check=worktree:3"]
        .iter()
        .map(|g| g.parse().unwrap())
        .collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let session = session::mint(&store, "ep1", grants, 3600, now)
        .unwrap()
        .session;
    Setup {
        _dir: dir,
        store,
        handler,
        entered,
        coordinator,
        session,
    }
}

fn call(s: &Setup, tool: &str, task: &str, path: &str) -> Result<CallOutput, CallError> {
    s.coordinator.invoke(&Call {
        surface: Surface::A2a,
        session: s.session.clone().into(),
        skill_id: tool.into(),
        task_id: Some(task.into()),
        args: json!({"path": path}),
        transition_fn: None,
    })
}

fn spent(s: &Setup) -> u64 {
    s.store
        .read(|r| journal::spent(r, "ep1"))
        .unwrap()
        .values()
        .sum()
}

fn record(s: &Setup, r: &Ref) -> EffectRecord {
    let o = s.store.read(|rd| rd.object(r)).unwrap().unwrap();
    serde_json::from_slice(&o.payload).unwrap()
}

#[test]
fn a_declined_read_is_committed_as_denied_by_the_handler_and_spends_nothing() {
    let s = setup(Duration::from_secs(10));
    let out = call(&s, "ailang-read", "t1", "big").unwrap();
    let v: Value = serde_json::from_slice(&out.output).unwrap();
    // The handler's answer, with the world block of a denial.
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(v["refused"], "read big: too big to answer");
    assert_eq!(v["world"]["effects"][0]["status"], "denied");
    assert_eq!(out.effects[0].denial.as_deref(), Some("denied:handler"));
    assert_eq!(out.effects[0].budget_after, 3);
    // The record names the plugin that declined; nothing ran, nothing was journaled.
    let rec = record(&s, &out.effects[0].record);
    assert!(rec.is_lawful());
    assert_eq!(
        (rec.allowed, rec.failed, rec.result_ref),
        (false, false, None)
    );
    assert_eq!((rec.budget_before, rec.budget_after), (3, 3));
    assert_eq!(rec.handler.as_ref().unwrap().plugin, "test/picky");
    assert_eq!(*s.handler.runs.lock().unwrap(), 0);
    assert_eq!(spent(&s), 0);
    // Provenance verifies, the plugin named as the one that declined.
    let why = verify::why(&s.store, &Handle::Output(out.output.clone()), 10).unwrap();
    assert!(why.all_ok(), "{:#}", why.to_json());
    let text = why.to_json().to_string();
    assert!(text.contains("declined (nothing ran) e1"), "{text}");
    // The same task id is committed: asking again returns it without asking the handler.
    let again = call(&s, "ailang-read", "t1", "big").unwrap();
    assert!(again.replayed);
    // A read the handler does not decline runs and spends.
    call(&s, "ailang-read", "t2", "small").unwrap();
    assert_eq!((*s.handler.runs.lock().unwrap(), spent(&s)), (1, 1));
}

#[test]
fn a_flood_of_declined_calls_is_bounded_by_the_refusal_rate() {
    // Declines spend no budget, so like denials they cost the credential a refusal token.
    let s = setup_with(
        Duration::from_secs(10),
        RefusalRate::new(0.0001, 2).unwrap(),
    );
    for task in ["t1", "t2"] {
        let out = call(&s, "ailang-read", task, "big").unwrap();
        assert_eq!(out.effects[0].denial.as_deref(), Some("denied:handler"));
    }
    let err = call(&s, "ailang-read", "t3", "big").unwrap_err();
    assert!(matches!(err, CallError::RefusalRate), "{err:?}");
    // A call whose effect runs still goes through: the rate bounds what costs nothing.
    call(&s, "ailang-read", "t4", "small").unwrap();
    assert_eq!(spent(&s), 1);
}

#[test]
fn a_decline_whose_answer_is_over_the_output_limit_is_committed_with_a_short_one() {
    let s = setup(Duration::from_secs(10));
    let out = call(&s, "ailang-read", "t1", "huge").unwrap();
    let v: Value = serde_json::from_slice(&out.output).unwrap();
    assert_eq!(v["ok"], false);
    let refused = v["refused"].as_str().unwrap();
    assert!(
        refused.starts_with("the Workspace.Read handler declined the request; its ")
            && refused.ends_with("-byte answer is over the 1048576-byte limit"),
        "{refused}"
    );
    assert_eq!(v["world"]["effects"][0]["status"], "denied");
    assert!(out.output.len() < 1024, "{}", out.output.len());
    assert_eq!(spent(&s), 0);
}

/// A decline holding an integer past ±(2^53−1) has no canonical form: it was answered as an
/// internal error ("host callback failed … check the log"), though nothing was journaled or
/// spent. It is a decline like any other, committed with a short answer saying why.
#[test]
fn a_decline_with_an_integer_past_2_53_is_committed_with_a_short_answer_not_an_internal_error() {
    let s = setup(Duration::from_secs(10));
    let out = call(&s, "ailang-read", "t1", "bignum").unwrap();
    let v: Value = serde_json::from_slice(&out.output).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(
        v["refused"],
        "the Workspace.Read handler declined the request; its answer has no canonical form: number 18446744073709551615 is outside the exact integer range of canonical JSON (±2^53−1)"
    );
    assert_eq!(v["world"]["effects"][0]["status"], "denied");
    assert_eq!(out.effects[0].denial.as_deref(), Some("denied:handler"));
    assert_eq!((*s.handler.runs.lock().unwrap(), spent(&s)), (0, 0));
    let why = verify::why(&s.store, &Handle::Output(out.output.clone()), 10).unwrap();
    assert!(why.all_ok(), "{:#}", why.to_json());
}

/// A decline nests at most 100 levels, as any answer the broker commits: at the limit it is
/// the answer, past it the answer is a short one saying why, and either way nothing is spent.
#[test]
fn a_decline_nested_past_100_levels_is_committed_with_a_short_answer() {
    let s = setup(Duration::from_secs(10));
    let at = call(&s, "ailang-read", "t1", "deep-100").unwrap();
    let v: Value = serde_json::from_slice(&at.output).unwrap();
    assert!(v["deep"].is_object(), "{v}");
    let past = call(&s, "ailang-read", "t2", "deep-101").unwrap();
    let v: Value = serde_json::from_slice(&past.output).unwrap();
    assert_eq!(
        v["refused"],
        "the Workspace.Read handler declined the request; its answer is nested more than 100 levels deep; the limit is 100"
    );
    assert_eq!(v["world"]["effects"][0]["status"], "denied");
    assert_eq!((*s.handler.runs.lock().unwrap(), spent(&s)), (0, 0));
}

#[test]
fn a_tool_with_a_finish_phase_answers_a_decline_in_that_phase_shape() {
    let s = setup(Duration::from_secs(10));
    let out = call(&s, "ailang-check", "c1", "big").unwrap();
    let v: Value = serde_json::from_slice(&out.output).unwrap();
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(v["status"], "denied");
    assert_eq!(v["refused"], "read big: too big to answer");
    assert_eq!(spent(&s), 0);
}

#[test]
fn a_preflight_that_panics_proceeds_to_the_effect() {
    let s = setup(Duration::from_secs(10));
    let out = call(&s, "ailang-read", "t1", "boom").unwrap();
    let v: Value = serde_json::from_slice(&out.output).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!((*s.handler.runs.lock().unwrap(), spent(&s)), (1, 1));
}

#[test]
fn a_preflight_past_its_deadline_is_answered_as_timed_out_and_nothing_is_spent() {
    let s = setup(Duration::from_millis(200));
    let started = Instant::now();
    let err = call(&s, "ailang-read", "t1", "slow").unwrap_err();
    // Its own error: a preflight runs no effect, so the call is not one that may have run
    // (the handler-overran text said its outcome would be journaled, which it never is).
    assert!(matches!(err, CallError::PreflightTimedOut), "{err:?}");
    assert_eq!(
        err.to_string(),
        "the handler's preflight overran the call's deadline: nothing was journaled or spent, and its task id is free"
    );
    assert!(started.elapsed() >= Duration::from_millis(200));
    s.entered.recv().unwrap();
    assert_eq!(s.coordinator.overruns().running(), 1);
    // The episode stays busy while the preflight runs: the next call waits its turn...
    let c = s.coordinator.clone();
    let session = s.session.clone();
    let next = std::thread::spawn(move || {
        c.invoke(&Call {
            surface: Surface::A2a,
            session: session.into(),
            skill_id: "ailang-read".into(),
            task_id: Some("t2".into()),
            args: json!({"path": "small"}),
            transition_fn: None,
        })
    });
    std::thread::sleep(Duration::from_millis(100));
    assert!(!next.is_finished());
    assert_eq!(spent(&s), 0);
    // ...and runs once the preflight returns; nothing was journaled for the first.
    s.handler.gate.release();
    next.join().unwrap().unwrap();
    assert_eq!(s.coordinator.overruns().running(), 0);
    assert_eq!(s.coordinator.overruns().total(), 1);
    assert_eq!((*s.handler.runs.lock().unwrap(), spent(&s)), (1, 1));
    let state = s.store.read(|r| journal::state(r, "a2a:ep1:t1")).unwrap();
    assert!(state.is_none(), "{state:?}");
}
