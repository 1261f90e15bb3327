//! The coordinator's per-call bookkeeping: an episode's turn and a task id's in-flight claim
//! are forgotten as soon as no call holds them, whichever way the call ended, so the maps stay
//! as small as the calls running now.

use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::outcome::Unrecorded;
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
    (
        dir,
        coordinator_on(store, handler_deadline, handler, finish),
    )
}

/// [`coordinator_with`] on `store`.
fn coordinator_on(
    store: Store,
    handler_deadline: Duration,
    handler: Arc<dyn EffectHandler>,
    finish: Option<&str>,
) -> Coordinator {
    let config = CoordinatorConfig {
        handler_deadline,
        ..CoordinatorConfig::default()
    };
    coordinator_configured(store, handler, finish, config)
}

/// [`coordinator_on`] with `config`.
fn coordinator_configured(
    store: Store,
    handler: Arc<dyn EffectHandler>,
    finish: Option<&str>,
    config: CoordinatorConfig,
) -> Coordinator {
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
    // Its reads run beside their intents only when declared to only read.
    if config.sole_spender {
        handlers.mark_read_only("Workspace.Read");
    }
    Coordinator::new(store, handlers, config)
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

/// The output `{"deep": …}` nested `levels` levels, the output object itself being level 1.
fn nested(levels: usize) -> Map<String, Value> {
    let inner = (1..levels).fold(json!(1), |v, _| json!({ "a": v }));
    let mut out = Map::new();
    out.insert("deep".into(), inner);
    out
}

/// Answers by the read's path: `fail-big` fails with a message of 3 MB over several lines,
/// `deep-N` answers an output nested N levels, `big-N` a text of N bytes; its finish function fails with a 3 MB error
/// for `finish-err-big`, answers an output nested N levels for `finish-deep-N`, and passes the
/// handler's output on otherwise.
struct Hostile;

/// The number after `prefix` in `path`.
fn levels_in(path: &str, prefix: &str) -> Option<usize> {
    path.strip_prefix(prefix).and_then(|n| n.parse().ok())
}

impl EffectHandler for Hostile {
    fn identity(&self) -> HandlerIdentity {
        HandlerIdentity::in_process("test/hostile", "0")
    }
    fn execute(&self, req: &EffectRequest<'_>) -> HandlerOutcome {
        let path = req.payload["path"].as_str().unwrap_or_default();
        if path == "fail-big" {
            return HandlerOutcome::Failed(format!("F\nFORGED\n{}", "F".repeat(3_000_000)));
        }
        if let Some(levels) = levels_in(path, "deep-") {
            return HandlerOutcome::Ok(nested(levels));
        }
        if let Some(len) = levels_in(path, "big-") {
            let mut out = Map::new();
            out.insert("text".into(), json!("x".repeat(len)));
            return HandlerOutcome::Ok(out);
        }
        let mut out = Map::new();
        out.insert("ok".into(), json!(true));
        HandlerOutcome::Ok(out)
    }
    fn finish(&self, _: &str, input: &Value) -> Result<Map<String, Value>, String> {
        let path = input["args"]["path"].as_str().unwrap_or_default();
        if path == "finish-err-big" {
            return Err(format!("E\r\n{}", "E".repeat(3_000_000)));
        }
        match levels_in(path, "finish-deep-") {
            Some(levels) => Ok(nested(levels)),
            None => Ok(input["output"].as_object().cloned().unwrap_or_default()),
        }
    }
}

/// Every event's message, in order.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<String>>>);

impl tracing::Subscriber for Captured {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                if f.name() == "message" {
                    self.0 = format!("{v:?}");
                }
            }
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        self.0.lock().unwrap().push(message.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

impl Captured {
    /// The one message that starts with `prefix`.
    fn line(&self, prefix: &str) -> String {
        let lines = self.0.lock().unwrap();
        let found: Vec<&String> = lines.iter().filter(|l| l.starts_with(prefix)).collect();
        assert_eq!(found.len(), 1, "{prefix}: {:?}", lines.len());
        found[0].clone()
    }
}

/// A plugin's 3 MB failure message, or its finish function's 3 MB error, became one 3 MB log
/// line per call, past the 4 KiB a plugin's own log messages are cut to.
#[test]
fn a_megabyte_failure_message_is_cut_to_4096_bytes_where_it_is_logged() {
    let (_dir, c) = coordinator_with(HANDLER_DEADLINE, Arc::new(Hostile), Some("f"));
    let session = session_of(&c, "ep");
    let logs = Captured::default();
    tracing::subscriber::with_default(logs.clone(), || {
        let failed = c.invoke(&read_call(&session, "t1", "fail-big")).unwrap();
        assert_eq!(failed.effects[0].status, "failed");
        let unrecorded = c.invoke(&read_call(&session, "t2", "finish-err-big"));
        assert!(
            matches!(unrecorded, Err(CallError::EffectsUnrecorded { .. })),
            "{unrecorded:?}"
        );
    });
    assert_eq!(
        logs.line("effect failed: "),
        format!(
            "effect failed: F\nFORGED\n{}… (2995913 bytes more; the broker passes on at most 4096)",
            "F".repeat(4096 - 9)
        )
    );
    assert_eq!(
        logs.line("post-effect failure: "),
        format!(
            "post-effect failure: E\r\n{}… (2995907 bytes more; the broker passes on at most 4096)",
            "E".repeat(4096 - 3)
        )
    );
}

/// An output nested 125 levels was committed and spent, but `worldd call` could not read its
/// reply (serde_json stops at 128 levels, the reply's envelope included). Outputs nest at most
/// 100 levels: one at the limit commits and reads inside the deepest envelope (A2A's, 7 levels
/// around it), one past it is the handler's failure, and a finish output past it is a
/// post-effect failure.
#[test]
fn an_output_nested_past_100_levels_is_refused_before_commit() {
    let (_dir, c) = coordinator_with(HANDLER_DEADLINE, Arc::new(Hostile), Some("f"));
    let session = session_of(&c, "ep");
    let logs = Captured::default();
    tracing::subscriber::with_default(logs.clone(), || {
        for (task, path) in [("t1", "deep-100"), ("t2", "finish-deep-100")] {
            let done = c.invoke(&read_call(&session, task, path)).unwrap();
            assert_eq!(done.effects[0].status, "ok", "{path}");
            let output = String::from_utf8(done.output).unwrap();
            let enveloped = format!(
                r#"{{"jsonrpc":"2.0","id":1,"result":{{"artifacts":[{{"parts":[{{"data":{output}}}]}}]}}}}"#
            );
            serde_json::from_str::<Value>(&enveloped).unwrap();
        }
        let failed = c.invoke(&read_call(&session, "t3", "deep-101")).unwrap();
        assert_eq!(failed.effects[0].status, "failed");
        let unrecorded = c.invoke(&read_call(&session, "t4", "finish-deep-101"));
        assert!(
            matches!(unrecorded, Err(CallError::EffectsUnrecorded { .. })),
            "{unrecorded:?}"
        );
    });
    assert_eq!(
        logs.line("effect failed: "),
        "effect failed: handler output is nested more than 100 levels deep; the limit is 100, so that every reader of the answer can read it"
    );
    assert_eq!(
        logs.line("post-effect failure: "),
        "post-effect failure: finish f output is nested more than 100 levels deep; the limit is 100, so that every reader of the answer can read it"
    );
}

/// An answer that fits the 1 MiB limit on its own but not with the `world` block the broker
/// adds (an `ailang-cli` reply a few hundred bytes under 1 MiB) ended as a post-effect failure:
/// the call unrecorded, the agent told `host callback failed`, its unit spent. It is now the
/// handler's failure, recorded failed and committed like one the handler reported.
#[test]
fn an_answer_under_the_limit_alone_but_over_it_with_its_world_block_is_a_recorded_failure() {
    let (_dir, c) = coordinator_with(HANDLER_DEADLINE, Arc::new(Hostile), None);
    let session = session_of(&c, "ep");
    let logs = Captured::default();
    let len = MAX_IO_BYTES - r#"{"text":""}"#.len();
    tracing::subscriber::with_default(logs.clone(), || {
        let failed = c
            .invoke(&read_call(&session, "t1", &format!("big-{len}")))
            .unwrap();
        assert_eq!(failed.effects[0].status, "failed");
        assert!(failed.output.len() < 4096, "{}", failed.output.len());
        let fits = c
            .invoke(&read_call(&session, "t2", &format!("big-{}", len - 1024)))
            .unwrap();
        assert_eq!(fits.effects[0].status, "ok");
        assert!(fits.output.len() <= MAX_IO_BYTES);
    });
    let line = logs.line("effect failed: ");
    assert!(
        line.starts_with("effect failed: its answer is 10")
            && line.ends_with(" bytes with its world block; the limit is 1048576"),
        "{line}"
    );
    assert!(
        logs.0
            .lock()
            .unwrap()
            .iter()
            .all(|l| !l.starts_with("post-effect failure")),
        "no post-effect failure"
    );
}

/// A call whose commit failed after its effect, on a store that could not take even the
/// outcome and record on their own (here a map the output does not fit; a disk turned
/// read-only does the same), was answered EffectsUnrecorded naming a record that was never
/// stored: an agent told to read it found nothing, and its resend and reconciliation said
/// pending. It names no record, and says the effect may have run (not the resend's "not
/// committed; send a new task id", which would have the agent run it again).
#[test]
fn an_outcome_the_store_cannot_take_after_a_failed_commit_names_no_record() {
    let dir = tempfile::tempdir().unwrap();
    let options = crate::storage::StoreOptions {
        ceiling: Some(1 << 20),
        create: true,
        ..Default::default()
    };
    let store = Store::open(&dir.path().join("db"), options).unwrap();
    let c = coordinator_on(store, HANDLER_DEADLINE, Arc::new(Hostile), None);
    let session = session_of(&c, "ep");
    let answer = c.invoke(&read_call(&session, "t1", "big-1000000"));
    assert!(
        matches!(answer, Err(CallError::EffectUnrecordable)),
        "{answer:?}"
    );
    assert_eq!(
        answer.unwrap_err().to_string(),
        "effects were requested but the invocation was not confirmed committed, and its outcome could not be stored: the effect may have run; check what it changed before sending it again"
    );
    // The resend finds the intent open, as a crash leaves one.
    let again = c.invoke(&read_call(&session, "t1", "big-1000000"));
    assert!(matches!(again, Err(CallError::KeyPending)), "{again:?}");
    // A call whose output fits is served as ever.
    let fits = c.invoke(&read_call(&session, "t2", "big-10")).unwrap();
    assert_eq!(fits.effects[0].status, "ok");
}

/// Counts its runs; answers every read.
#[derive(Default)]
struct Counted(std::sync::atomic::AtomicUsize);

impl EffectHandler for Counted {
    fn identity(&self) -> HandlerIdentity {
        HandlerIdentity::in_process("test/counted", "0")
    }
    fn execute(&self, _: &EffectRequest<'_>) -> HandlerOutcome {
        self.0.fetch_add(1, Ordering::SeqCst);
        let mut out = Map::new();
        out.insert("ok".into(), json!(true));
        HandlerOutcome::Ok(out)
    }
}

fn eio() -> crate::storage::StoreError {
    crate::storage::StoreError::Io("Input/output error (os error 5)".into())
}

/// What the store holds of episode `ep`'s call `task`: its task state, its journal state's
/// status, and the units its episode has spent on reads.
fn call_rows(store: &Store, task: &str) -> (Option<TaskState>, Option<Option<OutcomeStatus>>, u64) {
    let id = Surface::Mcp.invocation_id("ep", task);
    store
        .read(|r| -> Result<_, CallError> {
            let state = task::get(r, "ep", &Surface::Mcp.task_key(task))?;
            let journal = journal::state(r, &id)?.map(|s| s.status);
            let spent = journal::spent(r, "ep")?
                .get(&("Workspace.Read".to_owned(), "worktree".to_owned()))
                .copied()
                .unwrap_or(0);
            Ok((state, journal, spent))
        })
        .unwrap()
}

/// An intent whose commit was made and whose sync failed was answered as a store failure, as
/// if nothing had been written: nothing closed it, so after the next sync it stayed durable,
/// its unit spent and its task pending for good (a resend answered "not committed", and the
/// unit never came back). The handler is not started; the intent is closed withdrawn, its
/// unit given back, and the caller told `IntentNotDurable` (known not committed, never a deadline).
#[test]
fn an_intent_whose_sync_fails_is_withdrawn_and_its_handler_never_started() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let store = Store::create(&db).unwrap();
    let handler = Arc::new(Counted::default());
    let c = coordinator_on(store.clone(), HANDLER_DEADLINE, handler.clone(), None);
    let session = session_of(&c, "ep");
    store.stats().faults.fail_sync(eio());
    let answer = c.invoke(&read_call(&session, "t1", "a.txt"));
    assert!(
        matches!(answer, Err(CallError::IntentNotDurable)),
        "{answer:?}"
    );
    // Known not committed, for the store, not a deadline: the seed's words.
    assert_eq!(
        answer.unwrap_err().to_string(),
        "invocation was not committed; send a new task id"
    );
    assert_eq!(handler.0.load(Ordering::SeqCst), 0, "the handler never ran");
    let (state, journal, spent) = call_rows(&store, "t1");
    assert_eq!(state.map(|s| s.phase), Some(TaskPhase::Withdrawn));
    assert_eq!(journal, Some(Some(OutcomeStatus::Withdrawn)));
    assert_eq!(spent, 0, "its unit was given back");
    assert!(
        !store.writes_failing(),
        "the withdrawal's sync made everything durable"
    );
    // A resend is told the key is used; nothing runs.
    let again = c.invoke(&read_call(&session, "t1", "a.txt"));
    assert!(matches!(again, Err(CallError::Withdrawn)), "{again:?}");
    assert_eq!(handler.0.load(Ordering::SeqCst), 0);

    // Reopened, the store holds the intent closed.
    drop((c, store));
    let store = Store::open(&db, crate::storage::StoreOptions::default()).unwrap();
    let (state, journal, spent) = call_rows(&store, "t1");
    assert_eq!(state.map(|s| s.phase), Some(TaskPhase::Withdrawn));
    assert_eq!(journal, Some(Some(OutcomeStatus::Withdrawn)));
    assert_eq!(spent, 0);
    assert!(store.indeterminate().unwrap().is_empty());
}

/// Makes the store's next sync fail once a call's intent is journaled: its entry's.
struct FailTheEntrysSync(Store);

impl Hooks for FailTheEntrysSync {
    fn reached(&self, point: CrashPoint) {
        if point == CrashPoint::AfterIntent {
            self.0.stats().faults.fail_sync(eio());
        }
    }
}

/// An entry whose commit was made and whose sync failed was answered as a failed commit: the
/// outcome was then written alone, putting "unrecorded" over the committed task state. After
/// the next sync the log held the entry while its task said unrecorded: the entry's task link
/// was broken, doctor failed the store, and a resend did not replay it. The task state stays
/// committed, the caller is told to resend the same task id, and the resend replays the entry,
/// every link of which verifies.
#[test]
fn an_entry_whose_sync_fails_stays_committed_and_a_resend_replays_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let store = Store::create(&db).unwrap();
    let handler = Arc::new(Counted::default());
    let config = CoordinatorConfig {
        hooks: Arc::new(FailTheEntrysSync(store.clone())),
        ..CoordinatorConfig::default()
    };
    let c = coordinator_configured(store.clone(), handler.clone(), None, config);
    let session = session_of(&c, "ep");
    let answer = c.invoke(&read_call(&session, "t1", "a.txt"));
    assert!(matches!(answer, Err(CallError::NotConfirmed)), "{answer:?}");
    assert_eq!(
        answer.unwrap_err().to_string(),
        "invocation outcome is not confirmed; resend the same task id"
    );
    assert_eq!(handler.0.load(Ordering::SeqCst), 1);
    assert!(store.writes_failing());
    let (state, journal, spent) = call_rows(&store, "t1");
    let state = state.unwrap();
    assert_eq!(state.phase, TaskPhase::Committed);
    let index = state.entry_index.expect("the committed entry's index");
    assert_eq!(journal, Some(Some(OutcomeStatus::Succeeded)));
    assert_eq!(spent, 1);

    // A resend while the store's syncs still fail is not answered as committed: the replay
    // waits for a commit with a fresh meta page to be synced, and that sync fails too.
    store.stats().faults.fail_sync(eio());
    let again = c.invoke(&read_call(&session, "t1", "a.txt"));
    assert!(matches!(again, Err(CallError::NotConfirmed)), "{again:?}");
    assert_eq!(handler.0.load(Ordering::SeqCst), 1, "nothing ran again");
    // Once a sync succeeds, the resend replays it.
    let replayed = c.invoke(&read_call(&session, "t1", "a.txt")).unwrap();
    assert!(replayed.replayed);
    assert_eq!(replayed.entry_index, index);
    assert!(!store.writes_failing());

    // Reopened (its opening syncs the store), a resend replays the entry and runs nothing.
    drop((c, store));
    let store = Store::open(&db, crate::storage::StoreOptions::default()).unwrap();
    let c = coordinator_on(store.clone(), HANDLER_DEADLINE, handler.clone(), None);
    let replayed = c.invoke(&read_call(&session, "t1", "a.txt")).unwrap();
    assert!(replayed.replayed);
    assert_eq!(replayed.entry_index, index);
    assert_eq!(handler.0.load(Ordering::SeqCst), 1, "nothing ran again");
    let report = crate::verify::verify_entry(&store, index).unwrap();
    assert!(report.all_ok(), "{report:?}");
    assert!(
        report.links.iter().any(|l| l.kind == "journal"),
        "{report:?}"
    );
    assert!(store.indeterminate().unwrap().is_empty());
}

/// An outcome written alone never replaces a committed task state: the commit was made after
/// all, and the entry it names stays the truth. Nothing is written, and the caller is told to
/// resend the same task id.
#[test]
fn an_unrecorded_outcome_is_never_written_over_a_committed_task() {
    let CommittedT1 {
        _dir,
        c,
        session,
        entry_index,
        before,
        ids,
        record,
    } = committed_t1();
    let hash = record.hash;
    let recorded = write_unrecorded(c.store(), &ids, OutcomeStatus::Failed, vec![record], hash);
    assert_eq!(recorded, Unrecorded::Committed);
    assert_eq!(call_rows(c.store(), "t1"), before);
    assert_eq!(c.store().read(|r| r.object(&hash)).unwrap(), None);
    assert!(matches!(
        unrecorded_error(recorded, hash),
        CallError::NotConfirmed
    ));
    let replayed = c.invoke(&read_call(&session, "t1", "a.txt")).unwrap();
    assert_eq!(replayed.entry_index, entry_index);
}

/// Episode `ep`'s call `t1` committed on a fresh coordinator, and what an outcome written
/// alone over it would carry: its rows as committed, its ids, and an effect record.
struct CommittedT1 {
    _dir: tempfile::TempDir,
    c: Coordinator,
    session: Session,
    entry_index: u64,
    before: (Option<TaskState>, Option<Option<OutcomeStatus>>, u64),
    ids: CallIds,
    record: Object,
}

fn committed_t1() -> CommittedT1 {
    let (dir, c) = coordinator_with(HANDLER_DEADLINE, Arc::new(Counted::default()), None);
    let session = session_of(&c, "ep");
    let done = c.invoke(&read_call(&session, "t1", "a.txt")).unwrap();
    let before = call_rows(c.store(), "t1");
    let ids = CallIds {
        invocation_id: Surface::Mcp.invocation_id("ep", "t1"),
        episode: "ep".into(),
        task: Surface::Mcp.task_key("t1"),
        skill_id: "ailang-read".into(),
        input_ref: before.0.as_ref().unwrap().input_ref,
    };
    CommittedT1 {
        _dir: dir,
        c,
        session,
        entry_index: done.entry_index,
        before,
        ids,
        record: Object::new(sid::EFFECT_RECORD, "host/broker", b"{}".to_vec()),
    }
}

/// A read beside its intent ([`CoordinatorConfig::sole_spender`]) whose intent's sync fails:
/// the intent was committed, so the call is not lost with it. Whether the intent shared its
/// entry's commit (then both are not confirmed) or not (the entry's own sync makes both
/// durable), the task stays committed and a resend replays the entry.
#[test]
fn a_read_beside_its_intent_whose_sync_fails_is_not_lost_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    let handler = Arc::new(Counted::default());
    let config = CoordinatorConfig {
        sole_spender: true,
        ..CoordinatorConfig::default()
    };
    let c = coordinator_configured(store.clone(), handler.clone(), None, config);
    let session = session_of(&c, "ep");
    store.stats().faults.fail_sync(eio());
    let answer = c.invoke(&read_call(&session, "t1", "a.txt"));
    assert!(
        matches!(answer, Ok(_) | Err(CallError::NotConfirmed)),
        "{answer:?}"
    );
    let (state, journal, spent) = call_rows(&store, "t1");
    let state = state.unwrap();
    assert_eq!(state.phase, TaskPhase::Committed);
    assert_eq!(journal, Some(Some(OutcomeStatus::Succeeded)));
    assert_eq!(spent, 1);
    store.write(|_| Ok::<(), CallError>(())).unwrap();
    let replayed = c.invoke(&read_call(&session, "t1", "a.txt")).unwrap();
    assert!(replayed.replayed);
    assert_eq!(Some(replayed.entry_index), state.entry_index);
    assert_eq!(handler.0.load(Ordering::SeqCst), 1, "nothing ran again");
}

/// Spends the episode's whole read budget under another invocation, as another writer would
/// between the broker's decision and the intent, and makes the next sync fail.
struct SpendsFirst(Store);

impl EffectHandler for SpendsFirst {
    fn identity(&self) -> HandlerIdentity {
        HandlerIdentity::in_process("test/spends-first", "0")
    }
    fn preflight(&self, _: &EffectRequest<'_>) -> Option<Map<String, Value>> {
        let intent = journal::Intent {
            invocation_id: Surface::Mcp.invocation_id("ep", "other"),
            episode: "ep".into(),
            effect: "Workspace.Read".into(),
            scope: "worktree".into(),
            cost: 10,
            request_ref: Ref::of(b"other"),
        };
        self.0
            .write(move |w| journal::append_intent(w, &intent, 10))
            .unwrap();
        self.0.stats().faults.fail_sync(eio());
        None
    }
    fn execute(&self, _: &EffectRequest<'_>) -> HandlerOutcome {
        panic!("the budget was spent: the handler must not run")
    }
}

/// An intent refused for a budget spent by another writer writes nothing; when its batch's
/// sync failed it was answered NotDurable all the same, taken for an intent committed, and
/// its withdrawal found no intent: the caller was told "not committed" and the denial was
/// never journaled. A step that wrote nothing keeps its own answer: the call is denied.
#[test]
fn an_intent_refused_for_a_spent_budget_is_denied_when_its_batchs_sync_fails() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    let handler = Arc::new(SpendsFirst(store.clone()));
    let c = coordinator_on(store.clone(), HANDLER_DEADLINE, handler, None);
    let session = session_of(&c, "ep");
    let out = c.invoke(&read_call(&session, "t1", "a.txt")).unwrap();
    assert_eq!(out.effects[0].status, "denied", "{out:?}");
    let (state, journal, spent) = call_rows(&store, "t1");
    assert_eq!(state.map(|s| s.phase), Some(TaskPhase::Committed));
    assert_eq!(journal, None, "no intent was journaled for it");
    assert_eq!(spent, 10, "the other writer's spend alone");
}

/// An outcome written alone over a task already committed writes nothing; when its batch's
/// sync failed it was answered NotDurable, taken for written, and the caller was told of an
/// effect record never stored. It stays `Committed`: a resend replays the call.
#[test]
fn an_unrecorded_outcome_over_a_committed_task_stays_committed_when_the_sync_fails() {
    let CommittedT1 {
        _dir,
        c,
        before,
        ids,
        record,
        ..
    } = committed_t1();
    let hash = record.hash;
    c.store().stats().faults.fail_sync(eio());
    let recorded = write_unrecorded(c.store(), &ids, OutcomeStatus::Failed, vec![record], hash);
    assert_eq!(recorded, Unrecorded::Committed);
    assert_eq!(call_rows(c.store(), "t1"), before);
    assert_eq!(
        unrecorded_error(recorded, hash).to_string(),
        "invocation outcome is not confirmed; resend the same task id"
    );
}

/// Attack (an A2A client polling `tasks/get` for a call still queued behind its episode's
/// running call): the call claimed its in-flight mark and journaled its intent after the view
/// had looked for the mark and before it read the store. Pending, with no mark seen, it was
/// answered as a crash leaves a call (terminal `failed`) while it ran. Looked at again after
/// the read, the mark says it runs.
#[test]
fn a_call_that_starts_between_a_task_views_look_at_its_mark_and_its_read_is_running() {
    let (_dir, c) = coordinator(Duration::from_secs(5), Duration::ZERO);
    let s = session_of(&c, "ep");
    let id = Surface::A2a.invocation_id("ep", "t1");
    let key = Surface::A2a.task_key("t1");
    let starts_then_reads = || {
        hold_claim(&c, &id);
        let pending = TaskState {
            invocation_id: id.clone(),
            skill_id: "ailang-read".into(),
            input_ref: Ref::of(b"{}"),
            phase: TaskPhase::Pending,
            output_ref: None,
            entry_index: None,
            world_ref: None,
            effect_records: vec![],
        };
        let k = key.clone();
        c.store()
            .write(move |w| task::put(w, "ep", &k, &pending))
            .unwrap();
        c.store().read(|r| task::get(r, "ep", &key))
    };
    let view = c
        .task_view_reading(&s, Surface::A2a, "t1", starts_then_reads)
        .unwrap();
    assert!(
        matches!(&view, Some(TaskView::Running { skill_id }) if skill_id == "ailang-read"),
        "{view:?}"
    );
    // Its mark gone and its state still pending (a daemon that died mid-effect): indeterminate.
    c.in_flight.lock().unwrap().clear();
    let view = c.task_view(&s, Surface::A2a, "t1").unwrap();
    assert!(
        matches!(&view, Some(TaskView::Indeterminate { skill_id, effects }) if skill_id == "ailang-read" && effects.is_empty()),
        "{view:?}"
    );
    // A call that let go of its mark during the read was running when it was read.
    hold_claim(&c, &id);
    let (_, seen) = c.read_beside_mark(Surface::A2a, "ep", "t1", || {
        c.in_flight.lock().unwrap().clear()
    });
    assert_eq!(seen.map(|a| a.skill_id), Some("ailang-read".to_owned()));
    // One that runs neither before nor after is not.
    assert_eq!(c.read_beside_mark(Surface::A2a, "ep", "t1", || ()).1, None);
}
