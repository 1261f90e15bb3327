//! Objects are content-addressed and stored once, and the first writer's semantic id sticks
//! to the bytes. An agent can send, as the arguments of a call (even a refused one), the exact
//! bytes of something the daemon will store later under another kind: another episode's
//! invocation record, a transition document a publisher will publish. Who may read or list
//! what must follow the role the log gives those bytes, never the kind they were stored as
//! first. In process: the real router, a real LMDB store, the real coordinator and the
//! se-tools registry with an in-process handler; the attacks go over real MCP.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use broker_core::broker::HandlerIdentity;
use broker_core::coordinator::{
    Coordinator, CoordinatorConfig, EffectHandler, EffectRequest, HandlerOutcome, Handlers,
};
use broker_core::grant::Grant;
use broker_core::log;
use broker_core::object::{Object, Ref};
use broker_core::store::Store;
use broker_core::transition::Transition;
use broker_core::{registry, session};
use http_body_util::BodyExt;
use serde_json::{json, Map, Value};
use tower::ServiceExt;
use worldd::state::{AppState, DaemonInfo};

/// `Workspace.Read` that reads nothing: every path answers its own name.
struct Echo;

impl EffectHandler for Echo {
    fn identity(&self) -> HandlerIdentity {
        HandlerIdentity::in_process("test/echo", "0")
    }
    fn execute(&self, req: &EffectRequest<'_>) -> HandlerOutcome {
        let path = req.payload["path"].as_str().unwrap_or("");
        let mut out = Map::new();
        out.insert("ok".into(), json!(true));
        out.insert("content".into(), json!(format!("read {path}")));
        HandlerOutcome::Ok(out)
    }
}

struct Harness {
    _dir: tempfile::TempDir,
    store: Store,
    state: AppState,
    app: Router,
}

/// The se-tools transition documents.
fn se_tools() -> Vec<Transition> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../transitions/se-tools");
    let mut docs = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        docs.push(Transition::from_slice(&std::fs::read(entry.unwrap().path()).unwrap()).unwrap());
    }
    docs
}

fn harness() -> Harness {
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
            open_reads: false,
        },
    )
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
    fn token(&self, episode: &str) -> String {
        let grants: Vec<Grant> = vec!["Workspace.Read=worktree:10".parse().unwrap()];
        let now = self.state.coordinator().now();
        session::mint(&self.store, episode, grants, 3600, now)
            .unwrap()
            .token
    }

    fn operator_token(&self) -> String {
        let now = self.state.coordinator().now();
        session::mint_operator(&self.store, "ops", Vec::new(), 3600, now)
            .unwrap()
            .token
    }

    /// `tools/call` of `ailang-read` with these arguments and, when given, this idempotency
    /// key; the result.
    async fn call_with(&self, token: &str, arguments: &Value, key: Option<&str>) -> Value {
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
        let text = String::from_utf8(res.into_body().collect().await.unwrap().to_bytes().to_vec())
            .unwrap();
        let data = text
            .lines()
            .find_map(|l| l.strip_prefix("data: "))
            .unwrap_or_else(|| panic!("not SSE: {text}"));
        serde_json::from_str::<Value>(data).unwrap()["result"].clone()
    }

    async fn get_json(&self, token: &str, path: &str) -> (StatusCode, Value) {
        let req = Request::get(path)
            .header("authorization", format!("Bearer {token}"))
            .body(Body::empty())
            .unwrap();
        let res = self.app.clone().oneshot(req).await.unwrap();
        let status = res.status();
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    fn head(&self) -> u64 {
        self.store.read(log::head).unwrap().unwrap().world.revision
    }

    /// The object entry `index` names as its transition: its address, its payload as JSON and
    /// the semantic id it was first stored under.
    fn transition_object(&self, index: u64) -> (Ref, Value, String) {
        let entry = self.store.read(|r| log::entry(r, index)).unwrap().unwrap();
        let (payload, sid) = self
            .store
            .read(|r| {
                r.object_view(&entry.transition_ref)
                    .map(|o| o.map(|o| (o.payload.to_vec(), o.semantic_id.to_owned())))
            })
            .unwrap()
            .unwrap();
        (
            entry.transition_ref,
            serde_json::from_slice(&payload).unwrap(),
            sid,
        )
    }

    /// The entry indexes `token` lists at `/v1/log` from `from`, one page of 100.
    async fn listed(&self, token: &str, from: u64) -> Vec<u64> {
        let (status, page) = self
            .get_json(token, &format!("/v1/log?from={from}&limit=100"))
            .await;
        assert_eq!(status, StatusCode::OK, "{page}");
        page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["header"]["entryIndex"].as_u64().unwrap())
            .collect()
    }
}

/// An object answer's payload (base64), as JSON.
fn payload(o: &Value) -> Value {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(o["payload"].as_str().unwrap())
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// A refused call's arguments: ailang-read plans no read outside the worktree.
fn refused() -> Value {
    json!({"path": "/etc/passwd"})
}

/// One agent stores, as its own arguments, the record another episode's next call will have
/// (a plan refusal's record is predictable from one of its own, and the idempotency key is
/// guessable). `GET /v1/log` lists that call to its episode and operators only, not to the
/// agent that stored its record's bytes first.
#[tokio::test]
async fn an_agent_that_stored_another_episodes_record_first_is_not_listed_that_call_in_the_log() {
    let h = harness();
    let ep1 = h.token("ep1");
    let ep2 = h.token("ep2");
    let ep3 = h.token("ep3");
    let ops = h.operator_token();
    h.call_with(&ep1, &refused(), Some("k1")).await;
    let own = h.head();
    let (_, mut record, _) = h.transition_object(own);
    record["invocationId"] = json!("mcp:ep2:step-1");
    record["episodeId"] = json!("ep2");
    let predicted = Object::json("any", "any", &record).unwrap().hash;
    let answer = h.call_with(&ep1, &record, None).await;
    assert_eq!(answer["isError"], true, "{answer}");
    h.call_with(&ep2, &refused(), Some("step-1")).await;
    let theirs = h.head();
    let (reference, _, sid) = h.transition_object(theirs);
    assert_eq!(reference, predicted, "ep2's record is the bytes ep1 sent");
    assert_eq!(sid, "world/invocation-input/v1");

    assert_eq!(h.listed(&ep1, own).await, vec![own, own + 1]);
    assert_eq!(h.listed(&ep2, own).await, vec![theirs]);
    assert_eq!(h.listed(&ep3, own).await, Vec::<u64>::new());
    assert_eq!(h.listed(&ops, own).await, vec![own, own + 1, theirs]);
    // ep1 still reads the bytes it sent, as the arguments it sent them as.
    let (status, o) = h.get_json(&ep1, &format!("/v1/objects/{reference}")).await;
    assert_eq!(status, StatusCode::OK, "{o}");
    assert_eq!(o["semanticId"], "world/invocation-input/v1");
}

/// An agent sends, as a call's arguments, the exact bytes of a transition document a publisher
/// is about to publish (a tool's document is no secret: it is in the plugin). The store keeps
/// the first writer's kind (`world/invocation-input/v1`), but the published document is public
/// all the same: every agent reads it, as the transition it was published as, and the agent
/// that sent the bytes first still reads them as its own arguments.
#[tokio::test]
async fn a_transition_document_an_agent_stored_first_as_arguments_is_public_once_published() {
    let h = harness();
    let ep1 = h.token("ep1");
    let ep2 = h.token("ep2");
    let ops = h.operator_token();
    let mut doc = se_tools()
        .into_iter()
        .find(|t| t.to_value()["id"] == "ailang-read")
        .unwrap()
        .to_value()
        .clone();
    doc["id"] = json!("ailang-read-again");
    let next = Transition::from_value(doc.clone()).unwrap();
    let predicted = Object::json("any", "any", &doc).unwrap().hash;
    let answer = h.call_with(&ep1, &doc, None).await;
    assert_eq!(answer["isError"], true, "{answer}");
    registry::publish(&h.store, registry::DEFAULT_REGISTRY, vec![next], "test").unwrap();
    let stored = h
        .store
        .read(|r| {
            r.object_view(&predicted)
                .map(|o| o.map(|o| o.semantic_id.to_owned()))
        })
        .unwrap();
    assert_eq!(
        stored.as_deref(),
        Some("world/invocation-input/v1"),
        "the document's bytes keep their first writer's kind"
    );
    // The registry names the document: it is the tool's transition.
    let (status, head) = h.get_json(&ep2, "/v1/registry/tools").await;
    assert_eq!(status, StatusCode::OK, "{head}");
    let (status, revision) = h
        .get_json(
            &ep2,
            &format!(
                "/v1/objects/{}?payload=true",
                head["head"].as_str().unwrap()
            ),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{revision}");
    let entries = payload(&revision)["entries"].as_array().unwrap().clone();
    let listed = entries
        .iter()
        .find(|e| e["id"] == "ailang-read-again")
        .unwrap();
    assert_eq!(listed["transitionFn"], json!(predicted.to_string()));

    let path = format!("/v1/objects/{predicted}?payload=true");
    for token in [&ep2, &h.token("ep3")] {
        let (status, o) = h.get_json(token, &path).await;
        assert_eq!(status, StatusCode::OK, "{o}");
        assert_eq!(o["semanticId"], "world/transition/v1");
        assert_eq!(o["provenance"], "test");
        assert_eq!(payload(&o), doc);
    }
    let (status, o) = h.get_json(&ep1, &path).await;
    assert_eq!(status, StatusCode::OK, "{o}");
    assert_eq!(o["semanticId"], "world/invocation-input/v1");
    assert_eq!(payload(&o), doc);
    // Operators read the stored object, as for every object.
    let (status, o) = h.get_json(&ops, &path).await;
    assert_eq!(status, StatusCode::OK, "{o}");
    assert_eq!(o["semanticId"], "world/invocation-input/v1");
}
