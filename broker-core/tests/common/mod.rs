//! Shared harness for broker-core's integration tests: a temp store with the eight se-tools
//! published, in-process test handlers, and a settable clock.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};

use broker_core::broker::HandlerIdentity;
use broker_core::coordinator::{
    Call, CallError, CallOutput, Clock, Coordinator, CoordinatorConfig, EffectHandler,
    EffectRequest, HandlerOutcome, Handlers, Hooks, Surface,
};
use broker_core::grant::Grant;
use broker_core::log::{Append, HeadBinding};
use broker_core::object::{sid, Object};
use broker_core::refusal_rate::RefusalRate;
use broker_core::registry;
use broker_core::session::{self, Session};
use broker_core::store::Store;
use broker_core::transition::Transition;
use serde_json::{json, Map, Value};

pub const SE_TOOLS: [&str; 8] = [
    "ailang-read",
    "ailang-write",
    "ailang-edit",
    "ailang-check",
    "ailang-run",
    "builtins-search",
    "examples-search",
    "ailang-cli",
];

pub const ALL_EFFECTS: [&str; 8] = [
    "Workspace.Read",
    "Workspace.Write",
    "Ailang.Check",
    "Ailang.Run",
    "Ailang.RunEnv",
    "Ailang.RunNet",
    "Ailang.Discover",
    "Ailang.CLI",
];

pub fn se_tool(id: &str) -> Transition {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../transitions/se-tools")
        .join(format!("{id}.json"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Transition::from_slice(&bytes).unwrap_or_else(|e| panic!("{id}: {e}"))
}

/// A settable clock.
#[derive(Default)]
pub struct TestClock(pub AtomicI64);

impl Clock for TestClock {
    fn now(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// How the test handler behaves.
#[derive(Clone, Debug, PartialEq)]
pub enum Mode {
    Ok,
    Fail,
    Panic,
    Indeterminate,
    /// Output that carries the reserved `world` key.
    Reserved,
    /// Output with no canonical form (an integer beyond 2^53).
    Unsafe,
    /// Output of more than 1 MiB (a 1 MiB string).
    Huge,
}

/// An in-process handler for every se-tools effect. It counts executions, can be told to
/// misbehave, optionally appends one line per execution to a file (to count runs across
/// processes), and exports the two finish functions.
pub struct TestHandler {
    pub runs: AtomicUsize,
    pub mode: Mutex<Mode>,
    pub effects_log: Option<PathBuf>,
    pub finish_fails: Mutex<bool>,
}

impl TestHandler {
    pub fn new() -> Arc<TestHandler> {
        Arc::new(TestHandler {
            runs: AtomicUsize::new(0),
            mode: Mutex::new(Mode::Ok),
            effects_log: None,
            finish_fails: Mutex::new(false),
        })
    }

    pub fn with_log(path: PathBuf) -> Arc<TestHandler> {
        Arc::new(TestHandler {
            runs: AtomicUsize::new(0),
            mode: Mutex::new(Mode::Ok),
            effects_log: Some(path),
            finish_fails: Mutex::new(false),
        })
    }

    pub fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    pub fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

impl EffectHandler for TestHandler {
    fn identity(&self) -> HandlerIdentity {
        HandlerIdentity::in_process("test-handler", "0.0.0")
    }

    fn execute(&self, req: &EffectRequest<'_>) -> HandlerOutcome {
        self.runs.fetch_add(1, Ordering::SeqCst);
        if let Some(path) = &self.effects_log {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .unwrap();
            writeln!(f, "{}", req.invocation_id).unwrap();
            f.sync_all().unwrap();
        }
        let mode = self.mode.lock().unwrap().clone();
        match mode {
            Mode::Fail => return HandlerOutcome::Failed("test failure".into()),
            Mode::Panic => panic!("test handler panicked on purpose"),
            Mode::Indeterminate => return HandlerOutcome::Indeterminate("lost track".into()),
            Mode::Reserved => {
                let mut m = Map::new();
                m.insert("ok".into(), json!(true));
                m.insert("world".into(), json!("mine"));
                return HandlerOutcome::Ok(m);
            }
            Mode::Unsafe => {
                let mut m = Map::new();
                m.insert("n".into(), json!(1u64 << 60));
                return HandlerOutcome::Ok(m);
            }
            Mode::Huge => {
                let mut m = Map::new();
                m.insert("blob".into(), json!("x".repeat(1 << 20)));
                return HandlerOutcome::Ok(m);
            }
            Mode::Ok => {}
        }
        let mut out = Map::new();
        out.insert("ok".into(), json!(true));
        out.insert("effect".into(), json!(req.effect));
        out.insert("echo".into(), Value::Object(req.payload.clone()));
        HandlerOutcome::Ok(out)
    }

    fn finish(&self, name: &str, input: &Value) -> Result<Map<String, Value>, String> {
        if *self.finish_fails.lock().unwrap() {
            return Err("finish failed on purpose".into());
        }
        let mut m = Map::new();
        m.insert("ok".into(), json!(true));
        m.insert("finished".into(), json!(name));
        m.insert("args".into(), input["args"].clone());
        Ok(m)
    }
}

/// Crash hooks that SIGKILL the process at one named point.
pub struct KillAt(pub broker_core::coordinator::CrashPoint);

impl Hooks for KillAt {
    fn reached(&self, point: broker_core::coordinator::CrashPoint) {
        if point == self.0 {
            // SAFETY: plain getpid(2) and kill(2) of this very process; no memory is involved.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
            std::thread::sleep(std::time::Duration::from_secs(10));
        }
    }
}

pub struct World {
    pub dir: tempfile::TempDir,
    pub store: Store,
    pub handler: Arc<TestHandler>,
    pub clock: Arc<TestClock>,
    pub coordinator: Coordinator,
}

pub const T0: i64 = 1_800_000_000;

pub fn handlers_for(handler: Arc<TestHandler>) -> Handlers {
    let mut h = Handlers::new();
    for e in ALL_EFFECTS {
        h.insert(e, handler.clone()).unwrap();
    }
    h
}

pub fn publish_se_tools(store: &Store) {
    let docs = SE_TOOLS.iter().map(|id| se_tool(id)).collect();
    registry::publish(store, registry::DEFAULT_REGISTRY, docs, "test").unwrap();
}

impl World {
    pub fn new() -> World {
        World::with(TestHandler::new(), None)
    }

    pub fn with(handler: Arc<TestHandler>, hooks: Option<Arc<dyn Hooks>>) -> World {
        let dir = tempfile::tempdir().unwrap();
        World::in_dir(dir, handler, hooks)
    }

    pub fn in_dir(
        dir: tempfile::TempDir,
        handler: Arc<TestHandler>,
        hooks: Option<Arc<dyn Hooks>>,
    ) -> World {
        World::configured(dir, handler, hooks, RefusalRate::default())
    }

    /// A world whose coordinator charges refusals and denials at `rate`.
    pub fn with_refusal_rate(rate: RefusalRate) -> World {
        World::configured(tempfile::tempdir().unwrap(), TestHandler::new(), None, rate)
    }

    fn configured(
        dir: tempfile::TempDir,
        handler: Arc<TestHandler>,
        hooks: Option<Arc<dyn Hooks>>,
        refusal_rate: RefusalRate,
    ) -> World {
        let store = Store::create(&dir.path().join("db")).unwrap();
        publish_se_tools(&store);
        let clock = Arc::new(TestClock(AtomicI64::new(T0)));
        let mut config = CoordinatorConfig {
            clock: clock.clone(),
            refusal_rate,
            ..CoordinatorConfig::default()
        };
        if let Some(h) = hooks {
            config.hooks = h;
        }
        let coordinator = Coordinator::new(store.clone(), handlers_for(handler.clone()), config);
        World {
            dir,
            store,
            handler,
            clock,
            coordinator,
        }
    }

    pub fn mint(&self, episode: &str, grants: &[&str]) -> Session {
        let grants: Vec<Grant> = grants.iter().map(|g| g.parse().unwrap()).collect();
        session::mint(&self.store, episode, grants, 3600, self.clock.now())
            .unwrap()
            .session
    }

    pub fn call(
        &self,
        session: &Session,
        tool: &str,
        args: Value,
    ) -> Result<CallOutput, CallError> {
        self.call_task(session, tool, args, None)
    }

    pub fn call_task(
        &self,
        session: &Session,
        tool: &str,
        args: Value,
        task: Option<&str>,
    ) -> Result<CallOutput, CallError> {
        self.coordinator.invoke(&Call {
            surface: Surface::A2a,
            session: session.clone().into(),
            skill_id: tool.into(),
            task_id: task.map(str::to_owned),
            args,
            transition_fn: None,
        })
    }
}

/// An A2A call of `tool` by `session` with task id `task`.
pub fn a2a_call(session: &Session, tool: &str, task: &str, args: Value) -> Call {
    Call {
        surface: Surface::A2a,
        session: session.clone().into(),
        skill_id: tool.into(),
        task_id: Some(task.into()),
        args,
        transition_fn: None,
    }
}

pub fn output_json(out: &CallOutput) -> Value {
    serde_json::from_slice(&out.output).unwrap()
}

/// A test that needs to mount (root) and could not: `None`, and the test skips, unless
/// `WORLDD_TESTS_REQUIRE_MOUNTS` is set (CI runs as root), where a skip would report a pass
/// for a test that never ran. The daemon's tests follow the same rule.
pub fn mount_failed<T>(what: &str) -> Option<T> {
    if std::env::var_os("WORLDD_TESTS_REQUIRE_MOUNTS").is_some_and(|v| !v.is_empty()) {
        panic!("{what} failed, and WORLDD_TESTS_REQUIRE_MOUNTS is set");
    }
    None
}

/// A small tmpfs mounted on a temporary directory, unmounted on drop: a real filesystem that
/// runs out of space. `None` when this process may not mount (not root; see [`mount_failed`]).
pub struct Tmpfs {
    pub dir: tempfile::TempDir,
}

impl Tmpfs {
    pub fn mount(bytes: u64) -> Option<Tmpfs> {
        let dir = match tempfile::tempdir() {
            Ok(dir) => dir,
            Err(e) => return mount_failed(&format!("making a directory to mount on ({e})")),
        };
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return mount_failed("mounting a tmpfs");
        }
        Some(Tmpfs { dir })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Where a test handler waits until the test lets it go, telling the test each time a call
/// arrives (with what the handler chose to report).
pub struct Gate<T> {
    open: Mutex<bool>,
    cv: Condvar,
    arrived: Mutex<mpsc::Sender<T>>,
}

impl<T> Gate<T> {
    /// A closed gate and the receiver of its arrivals.
    pub fn new() -> (Gate<T>, mpsc::Receiver<T>) {
        let (tx, rx) = mpsc::channel();
        let gate = Gate {
            open: Mutex::new(false),
            cv: Condvar::new(),
            arrived: Mutex::new(tx),
        };
        (gate, rx)
    }

    /// Report `arrival`, then wait until the gate is open.
    pub fn pass(&self, arrival: T) {
        let _ = self.arrived.lock().unwrap().send(arrival);
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.cv.wait(open).unwrap();
        }
    }

    /// Open the gate for every call waiting now and every later one.
    pub fn release(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }
}

/// The `schema_version` recorded in the store at `db` (no store handle may be open on it in
/// this process).
pub fn meta_schema(db: &Path) -> Option<String> {
    // SAFETY: no store handle is open on `db` in this process while this one is.
    let env = unsafe { heed::EnvOpenOptions::new().max_dbs(32).open(db).unwrap() };
    let rtxn = env.read_txn().unwrap();
    let mut version = None;
    env.open_databases_and_commit(rtxn, |dbo, rtxn| -> heed::Result<_> {
        let meta = dbo
            .open_database::<heed::types::Str, heed::types::Bytes>(rtxn, Some("meta"))?
            .unwrap();
        version = meta
            .get(rtxn, "schema_version")?
            .map(|v| String::from_utf8_lossy(v).into_owned());
        Ok(heed::CommitOrAbort::<(), ()>::Commit(()))
    })
    .unwrap();
    env.prepare_for_closing().wait();
    version
}

/// Record `version` as the `schema_version` of the closed store at `db` (no store handle may be
/// open on it in this process).
pub fn set_meta_schema(db: &Path, version: &str) {
    // SAFETY: no store handle is open on `db` in this process while this one is.
    let env = unsafe { heed::EnvOpenOptions::new().max_dbs(32).open(db).unwrap() };
    let wtxn = env.write_txn().unwrap();
    env.create_databases_and_commit(wtxn, |dbo, wtxn| -> heed::Result<_> {
        let meta: heed::Database<heed::types::Str, heed::types::Bytes> =
            dbo.create_database(wtxn, Some("meta"))?;
        meta.put(wtxn, "schema_version", version.as_bytes())?;
        Ok(heed::CommitOrAbort::<(), ()>::Commit(()))
    })
    .unwrap();
    env.prepare_for_closing().wait();
}

/// An append at the head whose output and record objects carry `n`, so each `n` makes an
/// entry of its own objects.
pub fn append_n(n: u64) -> Append {
    let out = Object::json(sid::INVOCATION_OUTPUT, "test", &json!({ "out": n })).unwrap();
    let rec = Object::json(sid::INVOCATION_RECORD, "test", &json!({ "rec": n })).unwrap();
    Append {
        transition_fn: out.hash,
        interpreter: rec.hash,
        written_by: "test".into(),
        transition_ref: rec.hash,
        state_root: out.hash,
        objects: vec![out, rec],
        binding: HeadBinding::AtHead,
    }
}
