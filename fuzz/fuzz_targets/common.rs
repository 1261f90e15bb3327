//! A router over a real store with the se-tools published and an in-process handler, built
//! once per fuzzing process; requests carry a valid session.

use std::sync::{Arc, OnceLock};

use broker_core::coordinator::{Coordinator, CoordinatorConfig, EffectHandler, EffectRequest, HandlerOutcome, Handlers};
use broker_core::store::Store;
use broker_core::transition::Transition;
use worldd::state::{AppState, DaemonInfo};

struct Echo;

impl EffectHandler for Echo {
    fn identity(&self) -> broker_core::broker::HandlerIdentity {
        broker_core::broker::HandlerIdentity::in_process("fuzz-echo", "0.0.0")
    }

    fn execute(&self, req: &EffectRequest<'_>) -> HandlerOutcome {
        let mut out = req.payload.clone();
        out.insert("ok".into(), serde_json::Value::Bool(true));
        HandlerOutcome::Ok(out)
    }
}

pub struct Fixture {
    pub runtime: tokio::runtime::Runtime,
    pub router: axum::Router,
    pub token: String,
    _dir: tempfile::TempDir,
}

pub fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        // Prefer memory-backed storage: fuzzing is about parsing, not fsync.
        let dir = if std::path::Path::new("/dev/shm").is_dir() {
            tempfile::tempdir_in("/dev/shm").expect("temp dir")
        } else {
            tempfile::tempdir().expect("temp dir")
        };
        let store = Store::create(&dir.path().join("db")).expect("store");
        let docs = [
            include_str!("../../transitions/se-tools/ailang-read.json"),
            include_str!("../../transitions/se-tools/ailang-write.json"),
            include_str!("../../transitions/se-tools/ailang-run.json"),
        ];
        let ts = docs.iter().map(|d| Transition::from_slice(d.as_bytes()).expect("doc")).collect();
        broker_core::registry::publish(&store, broker_core::registry::DEFAULT_REGISTRY, ts, "fuzz").expect("publish");
        let mut handlers = Handlers::new();
        for e in ["Workspace.Read", "Workspace.Write", "Ailang.Run", "Ailang.RunEnv", "Ailang.RunNet"] {
            handlers.insert(e, Arc::new(Echo)).expect("handler");
        }
        let coordinator = Coordinator::new(store.clone(), handlers, CoordinatorConfig::default());
        let grants = ["Workspace.Read=worktree:1000000000", "Workspace.Write=worktree:1000000000", "Ailang.Run=worktree:1000000000"]
            .iter()
            .map(|g| g.parse().expect("grant"))
            .collect();
        // The longest a credential may live: the fuzz run never sees it expire.
        let token = broker_core::session::mint(&store, "fuzz", grants, broker_core::session::MAX_TTL_SECS, coordinator.now()).expect("mint").token;
        let info = DaemonInfo { db_path: "fuzz".into(), version: "fuzz", open_reads: false };
        let router = worldd::server::router(AppState::new(store, Arc::new(coordinator), info));
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
        Fixture { runtime, router, token, _dir: dir }
    })
}

/// POST `body` to `path` with the fixture's session and MCP-style headers.
pub fn post(path: &str, body: &[u8], version: Option<&str>) -> u16 {
    use tower::ServiceExt;
    let f = fixture();
    let mut req = axum::http::Request::post(path)
        .header("Authorization", format!("Bearer {}", f.token))
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream");
    if let Some(v) = version {
        req = req.header("MCP-Protocol-Version", v);
    }
    let req = req.body(axum::body::Body::from(body.to_vec())).expect("request");
    let res = f.runtime.block_on(f.router.clone().oneshot(req)).expect("infallible");
    let status = res.status().as_u16();
    assert!(status < 500, "a request must never be a server error: {status}");
    status
}
