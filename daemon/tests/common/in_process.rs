//! An in-process daemon for tests that watch what the server does between a client's reads:
//! the real router (`tower::ServiceExt::oneshot`), a real LMDB store, the real coordinator
//! and the se-tools registry, with `Workspace.Read` served by an in-process handler.
//! Included with `#[path]` by the test files that use it, not through `common`, whose tests
//! drive the real binary.
#![allow(dead_code)]

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use broker_core::broker::HandlerIdentity;
use broker_core::coordinator::{
    Coordinator, CoordinatorConfig, EffectHandler, EffectRequest, HandlerOutcome, Handlers,
};
use broker_core::grant::Grant;
use broker_core::log::{self, Append, HeadBinding, LogError};
use broker_core::object::Object;
use broker_core::store::Store;
use broker_core::transition::Transition;
use broker_core::{registry, session};
use http_body_util::BodyExt;
use serde_json::{json, Map, Value};
use tower::ServiceExt;
use worldd::edge::ServerConfig;
use worldd::state::{AppState, DaemonInfo};

/// `Workspace.Read`: `refuse-me` is refused by policy, `break-me` fails, `unsure` cannot
/// tell whether it ran; anything else reads.
pub struct Echo;

impl EffectHandler for Echo {
    fn identity(&self) -> HandlerIdentity {
        HandlerIdentity::in_process("test/echo", "0")
    }
    fn execute(&self, req: &EffectRequest<'_>) -> HandlerOutcome {
        let path = req.payload["path"].as_str().unwrap_or("");
        let mut out = Map::new();
        match path {
            "refuse-me" => {
                out.insert("ok".into(), json!(false));
                out.insert("refused".into(), json!("refused by policy"));
            }
            "break-me" => return HandlerOutcome::Failed("the disk is on fire".into()),
            "unsure" => return HandlerOutcome::Indeterminate("the disk went away".into()),
            _ => {
                out.insert("ok".into(), json!(true));
                out.insert("content".into(), json!(format!("read {path}")));
            }
        }
        HandlerOutcome::Ok(out)
    }
}

pub struct Harness {
    _dir: tempfile::TempDir,
    pub store: Store,
    pub state: AppState,
    pub app: Router,
}

/// A daemon with the default server config; `open_reads` as `--open-reads` sets it.
pub fn harness(open_reads: bool) -> Harness {
    harness_with(open_reads, ServerConfig::default())
}

/// The se-tools transition documents.
pub fn se_tools() -> Vec<Transition> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../transitions/se-tools");
    let mut docs = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        docs.push(Transition::from_slice(&std::fs::read(entry.unwrap().path()).unwrap()).unwrap());
    }
    docs
}

pub fn harness_with(open_reads: bool, server: ServerConfig) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    registry::publish(&store, registry::DEFAULT_REGISTRY, se_tools(), "test").unwrap();
    let mut handlers = Handlers::new();
    handlers.insert("Workspace.Read", Arc::new(Echo)).unwrap();
    let coordinator = Coordinator::new(store.clone(), handlers, CoordinatorConfig::default());
    let state = AppState::builder(
        store.clone(),
        Arc::new(coordinator),
        DaemonInfo {
            db_path: "db".into(),
            version: "test",
            open_reads,
        },
    )
    .server(server)
    .build();
    let app = worldd::server::router(state.clone());
    Harness {
        _dir: dir,
        store,
        state,
        app,
    }
}

impl Harness {
    /// A credential of `episode` holding `grants`.
    pub fn token(&self, episode: &str, grants: &[&str]) -> String {
        let grants: Vec<Grant> = grants.iter().map(|g| g.parse().unwrap()).collect();
        let now = self.state.coordinator().now();
        session::mint(&self.store, episode, grants, 3600, now)
            .unwrap()
            .token
    }

    /// An operator credential: it sees every entry, those of no episode included.
    pub fn operator_token(&self) -> String {
        let now = self.state.coordinator().now();
        session::mint_operator(&self.store, "ops", Vec::new(), 3600, now)
            .unwrap()
            .token
    }

    /// `tools/call` over MCP of `ailang-read` of `path`; the structured result.
    pub async fn call(&self, token: &str, path: &str) -> Value {
        self.call_with(token, &json!({ "path": path }), None).await["structuredContent"].clone()
    }

    /// `tools/call` of `ailang-read` with these arguments and, when given, this idempotency
    /// key, answered (HTTP 200); the JSON-RPC result.
    pub async fn call_with(&self, token: &str, arguments: &Value, key: Option<&str>) -> Value {
        let mut params = json!({"name": "ailang-read", "arguments": arguments});
        if let Some(k) = key {
            params["_meta"] = json!({"world/idempotencyKey": k});
        }
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
        let req = Request::post("/mcp/")
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .body(Body::from(body.to_string()))
            .unwrap();
        let res = self.app.clone().oneshot(req).await.unwrap();
        let status = res.status();
        let text = String::from_utf8(res.into_body().collect().await.unwrap().to_bytes().to_vec())
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{text}");
        let data = text
            .lines()
            .find_map(|l| l.strip_prefix("data: "))
            .unwrap_or_else(|| panic!("not SSE: {text}"));
        serde_json::from_str::<Value>(data).unwrap()["result"].clone()
    }

    /// `GET path`, with `token`'s credential when given and these headers.
    pub async fn get(
        &self,
        token: Option<&str>,
        path: &str,
        headers: &[(&str, &str)],
    ) -> axum::response::Response {
        let mut req = Request::get(path);
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        self.app
            .clone()
            .oneshot(req.body(Body::empty()).unwrap())
            .await
            .unwrap()
    }

    /// Append `n` entries that belong to no episode (only an operator sees them), in one
    /// transaction.
    pub fn bulk_append(&self, n: usize) {
        bulk_append(&self.store, n);
    }
}

/// Append `n` client-built entries that belong to no episode, in one transaction.
pub fn bulk_append(store: &Store, n: usize) {
    let doc = Object::json("test/bulk", "test", &json!({"bulk": true})).unwrap();
    store
        .write(move |w| -> Result<(), LogError> {
            for _ in 0..n {
                log::append(
                    w,
                    &Append {
                        objects: vec![doc.clone()],
                        transition_fn: doc.hash,
                        interpreter: log::interpreter_ref().unwrap(),
                        written_by: "test:bulk".into(),
                        transition_ref: doc.hash,
                        state_root: doc.hash,
                        binding: HeadBinding::AtHead,
                    },
                )?;
            }
            Ok(())
        })
        .unwrap();
}
