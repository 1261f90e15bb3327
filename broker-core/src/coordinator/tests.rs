//! The coordinator's per-call bookkeeping: an episode's turn and a task id's in-flight claim
//! are forgotten as soon as no call holds them, whichever way the call ended, so the maps stay
//! as small as the calls running now.

use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::*;
use crate::broker::HandlerIdentity;
use crate::session;
use crate::transition::Transition;

/// Answers every read after `delay`.
struct Slow {
    delay: Duration,
}

impl EffectHandler for Slow {
    fn identity(&self) -> HandlerIdentity {
        HandlerIdentity::in_process("test/slow", "0")
    }
    fn execute(&self, _: &EffectRequest<'_>) -> HandlerOutcome {
        thread::sleep(self.delay);
        let mut out = Map::new();
        out.insert("ok".into(), json!(true));
        HandlerOutcome::Ok(out)
    }
}

fn coordinator(handler_deadline: Duration, delay: Duration) -> (tempfile::TempDir, Coordinator) {
    coordinator_with(handler_deadline, Arc::new(Slow { delay }), None)
}

/// A coordinator serving `ailang-read` through `handler`, with the finish function `finish`
/// when one is named.
fn coordinator_with(
    handler_deadline: Duration,
    handler: Arc<dyn EffectHandler>,
    finish: Option<&str>,
) -> (tempfile::TempDir, Coordinator) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    let doc = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../transitions/se-tools/ailang-read.json"
    ))
    .unwrap();
    let mut doc: Value = serde_json::from_slice(&doc).unwrap();
    if let Some(name) = finish {
        doc["finish"] = json!(name);
    }
    let tools = vec![Transition::from_slice(&serde_json::to_vec(&doc).unwrap()).unwrap()];
    registry::publish(&store, registry::DEFAULT_REGISTRY, tools, "test").unwrap();
    let mut handlers = Handlers::new();
    handlers.insert("Workspace.Read", handler).unwrap();
    let config = CoordinatorConfig {
        handler_deadline,
        ..CoordinatorConfig::default()
    };
    (dir, Coordinator::new(store, handlers, config))
}

fn read_call(session: &Session, task: &str, path: &str) -> Call {
    Call {
        surface: Surface::Mcp,
        session: session.clone().into(),
        skill_id: "ailang-read".into(),
        task_id: Some(task.into()),
        args: json!({ "path": path }),
        transition_fn: None,
    }
}

fn session_of(c: &Coordinator, episode: &str) -> Session {
    let grant = "Workspace.Read=worktree:10".parse().unwrap();
    session::mint(c.store(), episode, vec![grant], 3600, c.now())
        .unwrap()
        .session
}

/// Mark `id` in flight, as a call that has not finished holds it.
fn hold_claim(c: &Coordinator, id: &str) {
    let attempt = Attempt {
        skill_id: "ailang-read".into(),
        input_ref: Ref::of(b"{}"),
    };
    c.in_flight.lock().unwrap().insert(id.to_owned(), attempt);
}

/// The episodes holding a turn, and the invocation ids claimed in flight.
fn held(c: &Coordinator) -> (Vec<String>, Vec<String>) {
    let mut claims: Vec<String> = c.in_flight.lock().unwrap().keys().cloned().collect();
    claims.sort();
    (c.episodes.held(), claims)
}

#[test]
fn an_episode_turn_is_forgotten_once_no_call_holds_it() {
    let turns = Arc::new(EpisodeTurns::default());
    let busy = EpisodeTurns::held;
    let a = turns.enter("a");
    let b = turns.enter("b");
    assert_eq!(busy(&turns), ["a", "b"]);
    drop(a);
    assert_eq!(busy(&turns), ["b"]);

    // A second call of episode b waits for the turn, takes it when the first lets go, and
    // leaves nothing behind either.
    let waiter = {
        let turns = turns.clone();
        thread::spawn(move || drop(turns.enter("b")))
    };
    thread::sleep(Duration::from_millis(50));
    assert!(
        !waiter.is_finished(),
        "the second call of b waits for its turn"
    );
    drop(b);
    waiter.join().unwrap();
    assert!(busy(&turns).is_empty(), "{:?}", busy(&turns));
}

#[test]
fn calls_of_many_episodes_leave_no_turn_and_no_claim_behind() {
    let (_dir, c) = coordinator(HANDLER_DEADLINE, Duration::ZERO);
    for i in 0..64 {
        let session = session_of(&c, &format!("ep{i}"));
        // An effect committed, its replay, a plan refusal, and a task id resent with other
        // arguments (refused after the call took its turn).
        let done = c.invoke(&read_call(&session, "t1", "a.ail")).unwrap();
        assert!(!done.replayed);
        assert!(
            c.invoke(&read_call(&session, "t1", "a.ail"))
                .unwrap()
                .replayed
        );
        let refused = c.invoke(&read_call(&session, "t2", "../a.ail")).unwrap();
        let refused: Value = serde_json::from_slice(&refused.output).unwrap();
        assert_eq!(refused["ok"], false, "{refused}");
        assert!(matches!(
            c.invoke(&read_call(&session, "t1", "b.ail")),
            Err(CallError::TaskIdReused)
        ));
    }
    assert_eq!(held(&c), (vec![], vec![]));
}

#[test]
fn a_handler_past_its_deadline_holds_its_turn_until_it_returns_and_then_frees_it() {
    let (_dir, c) = coordinator(Duration::from_millis(50), Duration::from_millis(400));
    let session = session_of(&c, "slow");
    assert!(matches!(
        c.invoke(&read_call(&session, "t1", "a.ail")),
        Err(CallError::HandlerTimedOut)
    ));
    assert_eq!(
        held(&c),
        (vec!["slow".to_owned()], vec!["mcp:slow:t1".to_owned()]),
        "the overrunning handler keeps its episode and its task id"
    );
    let until = Instant::now() + Duration::from_secs(10);
    while held(&c) != (vec![], vec![]) {
        assert!(Instant::now() < until, "still held: {:?}", held(&c));
        thread::sleep(Duration::from_millis(10));
    }
}

/// Answers every read at once, and sleeps `delay` in its finish function.
struct SlowFinish {
    delay: Duration,
}

impl EffectHandler for SlowFinish {
    fn identity(&self) -> HandlerIdentity {
        HandlerIdentity::in_process("test/slow-finish", "0")
    }
    fn execute(&self, _: &EffectRequest<'_>) -> HandlerOutcome {
        let mut out = Map::new();
        out.insert("ok".into(), json!(true));
        HandlerOutcome::Ok(out)
    }
    fn finish(&self, _: &str, input: &Value) -> Result<Map<String, Value>, String> {
        thread::sleep(self.delay);
        let mut out = Map::new();
        out.insert("shaped".into(), input["output"]["ok"].clone());
        Ok(out)
    }
}

/// A coordinator whose `ailang-read` has the finish function `slow`, sleeping `delay`.
fn finishing_coordinator(
    handler_deadline: Duration,
    delay: Duration,
) -> (tempfile::TempDir, Coordinator) {
    coordinator_with(
        handler_deadline,
        Arc::new(SlowFinish { delay }),
        Some("slow"),
    )
}

#[test]
fn a_finish_function_in_time_shapes_the_output() {
    let (_dir, c) = finishing_coordinator(HANDLER_DEADLINE, Duration::ZERO);
    let session = session_of(&c, "ep");
    let done = c.invoke(&read_call(&session, "t1", "a.ail")).unwrap();
    let out: Value = serde_json::from_slice(&done.output).unwrap();
    assert_eq!(out["shaped"], true, "{out}");
}

/// The finish function runs under the handler's deadline: past it the caller is answered as
/// timed out, the turn is held until it returns, and then the effect's outcome is journaled
/// without a commit, as for a late handler.
#[test]
fn a_finish_function_past_the_deadline_is_answered_as_timed_out_and_its_effect_journaled() {
    let (_dir, c) = finishing_coordinator(Duration::from_millis(50), Duration::from_millis(400));
    let session = session_of(&c, "slow");
    let asked = Instant::now();
    assert!(matches!(
        c.invoke(&read_call(&session, "t1", "a.ail")),
        Err(CallError::HandlerTimedOut)
    ));
    assert!(
        asked.elapsed() < Duration::from_millis(400),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(held(&c).0, vec!["slow".to_owned()]);
    let until = Instant::now() + Duration::from_secs(10);
    while held(&c) != (vec![], vec![]) {
        assert!(Instant::now() < until, "still held: {:?}", held(&c));
        thread::sleep(Duration::from_millis(10));
    }
    assert!(
        matches!(
            c.invoke(&read_call(&session, "t1", "a.ail")),
            Err(CallError::EffectsUnrecorded { .. })
        ),
        "the late effect's outcome is journaled, the call not committed"
    );
}

/// A late handler's outcome is journaled just before its call releases its task id's claim.
/// A resend in between must get what the store says, not "still running": here the claim is
/// held by hand over a call already committed. The daemon asks [`Coordinator::in_flight`]
/// before admission, and answered "in-flight" in that window while the store said
/// "unrecorded"; it now answers as the store does too.
#[test]
fn a_resend_gets_the_durable_outcome_even_while_the_claim_is_still_held() {
    let (_dir, c) = coordinator(HANDLER_DEADLINE, Duration::ZERO);
    let session = session_of(&c, "ep");
    let first = c.invoke(&read_call(&session, "t1", "a.ail")).unwrap();
    hold_claim(&c, "mcp:ep:t1");
    assert!(
        !c.in_flight(Surface::Mcp, "ep", "t1"),
        "resolved in the store"
    );
    let again = c.invoke(&read_call(&session, "t1", "a.ail")).unwrap();
    assert!(again.replayed);
    assert_eq!(again.output, first.output);
    // Other arguments under the same key are still refused, and a key whose call has not
    // resolved is still running.
    assert!(matches!(
        c.invoke(&read_call(&session, "t1", "b.ail")),
        Err(CallError::TaskIdReused)
    ));
    hold_claim(&c, "mcp:ep:t2");
    assert!(
        c.in_flight(Surface::Mcp, "ep", "t2"),
        "claimed, nothing durable yet"
    );
    assert!(
        !c.in_flight(Surface::A2a, "ep", "t2"),
        "another surface's key"
    );
    assert!(matches!(
        c.invoke(&read_call(&session, "t2", "a.ail")),
        Err(CallError::TaskIdReused)
    ));
    c.in_flight.lock().unwrap().clear();
    assert_eq!(held(&c), (vec![], vec![]));
}

#[test]
fn a_worktree_binds_only_as_a_real_directory_of_its_own_name() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let real_root = dir.path().join("real-root");
    std::fs::create_dir_all(real_root.join("ep")).unwrap();
    std::fs::create_dir_all(dir.path().join("elsewhere")).unwrap();
    std::fs::write(real_root.join("plain-file"), b"x").unwrap();
    symlink(dir.path().join("elsewhere"), real_root.join("linked")).unwrap();
    symlink(real_root.join("ep"), real_root.join("alias")).unwrap();
    // The operator's root may itself be reached through a symlink: it is resolved once.
    let via_link = dir.path().join("root-link");
    symlink(&real_root, &via_link).unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    let config = CoordinatorConfig {
        workspace_root: Some(via_link),
        ..CoordinatorConfig::default()
    };
    let c = Coordinator::new(store, Handlers::new(), config);
    let root = c.workspace_root().unwrap().to_path_buf();
    assert_eq!(root, real_root.canonicalize().unwrap());

    assert_eq!(bind_worktree(&root, "ep"), Some(root.join("ep")));
    // A symlinked worktree, whether it leads out of the root or to another episode's
    // worktree, binds nothing; nor does a file, a missing name or a name that is not an
    // episode.
    for episode in [
        "linked",
        "alias",
        "plain-file",
        "missing",
        "..",
        "ep/..",
        "EP",
        "",
    ] {
        assert_eq!(bind_worktree(&root, episode), None, "{episode:?}");
    }
}
