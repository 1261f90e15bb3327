//! The REST surface under `/v1/`: health, head, worlds, objects, log, registry, commit,
//! receipts and metrics, with the error envelope `{"error":{"class","message"}}`
//! ([`ApiError`], in [`crate::api_error`]).
//!
//! Reads require a valid session unless the daemon runs with `--open-reads` (then they are
//! open, as in the reference). `/v1/health` is always open: it says nothing about the log's
//! content. `/v1/metrics` is open unless `[server] metrics_for = "operators"`: it reads
//! nothing of the log's content (the store's size and state, the writer's counters), but its
//! call counters tell every call's tool and outcome, so an operator may keep them to operator
//! credentials. What a session may read is
//! [`broker_core::access`]'s model: its episode's objects and the public ones; an operator
//! reads everything. Another episode's object is answered exactly as an absent one.

use std::collections::HashMap;

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine;
use broker_core::access::{self, Reader};
use broker_core::commit::{self, RestCommit};
use broker_core::journal::Receipt;
use broker_core::log::{self, Entry, LogError, World};
use broker_core::object::{Object, ObjectView, Ref};
use broker_core::registry;
use broker_core::store::StoreError;
use serde::Deserialize;
use serde_json::{json, Value};

pub use crate::api_error::ApiError;
use crate::extract::{Params, Segments};
use crate::log_summary::{Damaged, DEFAULT_PAGE, MAX_PAGE};
use crate::state::AppState;

/// Longest `semanticId` or `provenance` of a committed object, in bytes.
pub const MAX_LABEL_BYTES: usize = 1024;

/// The routes that read nothing from the store, and the commit (its body has its own limits).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/health", get(health))
        .route("/v1/metrics", get(metrics))
        .route("/v1/commit", post(crate::operator_commit::route))
}

/// The routes that read the store: each client's requests take turns
/// ([`crate::edge::turns`]).
pub fn read_routes() -> Router<AppState> {
    Router::new()
        .route("/v1/head", get(head))
        .route("/v1/worlds/{reference}", get(world))
        .route(
            "/v1/objects/by-semantic-id/{*id}",
            get(objects_by_semantic_id),
        )
        .route("/v1/objects/{reference}", get(object))
        .route("/v1/log/{index}", get(log_entry))
        .route("/v1/log", get(log_range))
        .route("/v1/registry/{*name}", get(registry_head))
        .route("/v1/receipts/{id}", get(receipt))
        // Reconciliation and budget (session required, own episode only).
        .merge(crate::reconcile::routes())
        .merge(crate::catalog::routes())
        // The stored rows online verification recomputes from (read model as above).
        .merge(crate::verify_reads::routes())
}

/// Reads need a valid session unless `--open-reads`; the answer is who reads.
async fn read_access(state: &AppState, headers: &HeaderMap) -> Result<Reader, ApiError> {
    crate::visibility::reader_of_request(state, headers).await
}

/// Run a read on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    crate::durable_answers::spawn_read(f)
        .await
        .map_err(|e| ApiError::internal("read task", e))?
}

fn parse_ref(field: &str, text: &str) -> Result<Ref, ApiError> {
    text.parse::<Ref>()
        .map_err(|e| ApiError::bad_request(format!("{field}: {e}")))
}

async fn health(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let info = state.info();
    let interpreter = log::interpreter_ref().map_err(|e| ApiError::internal("interpreter", e))?;
    // A daemon whose store's files were swapped under it answers, and refuses every call until
    // restarted; one past its reserve (or on a short disk) refuses every new call until there is
    // room: monitoring that asks only this must see either.
    let status = if state.store().replaced() {
        "store-replaced"
    } else if state.store().admits_client_work().is_err() {
        "store-full"
    } else if state.store().writes_failing() {
        // Every commit fails for the disk (read-only after an I/O error, a thin-provisioned
        // volume out of room): each call fails, and monitoring must see it.
        "store-failing"
    } else {
        "ok"
    };
    Ok(Json(json!({
        "status": status,
        "daemon_version": info.version,
        "db_path": info.db_path,
        "interpreter_ref": interpreter,
        "interpreter_version": format!("worldd-plan/{}", broker_core::plan::INTERPRETER_VERSION),
    })))
}

/// The refusal of an agent's credential when metrics are for operators.
const METRICS_FOR_OPERATORS: &str = "GET /v1/metrics is for operators on this daemon ([server] \
     metrics_for = \"operators\"): this session credential is not an operator credential (mint \
     one with worldd session mint --operator)";

async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    if state.server().metrics_for == crate::metrics::MetricsFor::Operators {
        let session = state
            .authenticate(&headers)
            .await
            .map_err(ApiError::from_auth)?;
        if !session.operator {
            return Err(ApiError::new(
                axum::http::StatusCode::FORBIDDEN,
                "Forbidden",
                METRICS_FOR_OPERATORS,
            ));
        }
    }
    let body = state
        .metrics()
        .render(state.store(), state.coordinator().overruns());
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response())
}

async fn head(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    read_access(&state, &headers).await?;
    let store = state.store().clone();
    let head = blocking(move || Ok(store.read(log::head)?)).await?;
    match head {
        Some(h) => Ok((
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            h.world_ref.to_string(),
        )
            .into_response()),
        None => Err(ApiError::not_found("no world head has been selected yet")),
    }
}

async fn world(
    State(state): State<AppState>,
    headers: HeaderMap,
    Segments(reference): Segments<String>,
) -> Result<Json<Value>, ApiError> {
    read_access(&state, &headers).await?;
    let r = parse_ref("ref", &reference)?;
    let store = state.store().clone();
    let w = blocking(move || Ok(store.read(|rd| log::world(rd, &r))?)).await?;
    let w = w.ok_or_else(|| ApiError::not_found("world not found"))?;
    Ok(Json(json!({
        "ref": r,
        "revision": w.revision,
        "stateRoot": w.state_root,
        "logHead": w.log_head,
    })))
}

fn object_json(o: &ObjectView<'_>, with_payload: bool) -> Value {
    let mut v = json!({
        "hash": o.hash,
        "interfaceHash": o.interface_hash,
        "semanticId": o.semantic_id,
        "provenance": o.provenance,
    });
    if with_payload {
        v["payload"] = json!(base64::engine::general_purpose::STANDARD.encode(o.payload));
    }
    v
}

async fn object(
    State(state): State<AppState>,
    headers: HeaderMap,
    Segments(reference): Segments<String>,
    Params(q): Params,
) -> Result<Json<Value>, ApiError> {
    let reader = read_access(&state, &headers).await?;
    let r = parse_ref("ref", &reference)?;
    let with_payload = match q.get("payload").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "payload must be true or false, not {other:?}"
            )))
        }
    };
    let store = state.store().clone();
    let o = blocking(move || {
        store.read(|rd| -> Result<_, ApiError> {
            let Some(o) = access::object(rd, &reader, &r)? else {
                return Ok(None);
            };
            // Served bytes are vouched for by their address: damaged ones are refused, not
            // passed on as genuine (one hash, cheap beside the answer).
            if with_payload && !o.verify() {
                return Err(ApiError::damaged_object(&r, &Ref::of(o.payload)));
            }
            Ok(Some(object_json(&o, with_payload)))
        })
    })
    .await?;
    // Absent and another episode's: one answer, so it says nothing about existence.
    Ok(Json(
        o.ok_or_else(|| ApiError::not_found("object not found"))?,
    ))
}

/// A page's `limit` query parameter: absent or below 1 is the default, above the maximum is
/// the maximum, however many digits it has (a client asking for "as many as possible" may send
/// `u64::MAX`); only what is not an integer is refused.
pub(crate) fn page_limit(q: &HashMap<String, String>) -> Result<usize, ApiError> {
    let Some(s) = q.get("limit") else {
        return Ok(DEFAULT_PAGE);
    };
    let (negative, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s.as_str()),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ApiError::bad_request("limit must be an integer"));
    }
    let significant = digits.trim_start_matches('0');
    Ok(if negative || significant.is_empty() {
        DEFAULT_PAGE
    } else {
        // Past the maximum's digits it is past the maximum.
        significant
            .parse::<usize>()
            .map_or(MAX_PAGE, |n| n.min(MAX_PAGE))
    })
}

async fn objects_by_semantic_id(
    State(state): State<AppState>,
    headers: HeaderMap,
    Segments(id): Segments<String>,
    Params(q): Params,
) -> Result<Json<Value>, ApiError> {
    let reader = read_access(&state, &headers).await?;
    let limit = page_limit(&q)?;
    let after = match q.get("after") {
        Some(a) => Some(parse_ref("after", a)?),
        None => None,
    };
    let store = state.store().clone();
    let page = blocking(move || {
        Ok(store.read(|rd| -> Result<Option<Value>, StoreError> {
            // Arrival order; `after` names the last object of the previous page (or its
            // `next`), and one the reader may not read is answered as an unknown one.
            Ok(
                access::by_semantic_id(rd, &reader, &id, after, limit)?.map(|page| {
                    let items: Vec<Value> =
                        page.items.iter().map(|o| object_json(o, false)).collect();
                    match page.next {
                        // An episode's page that stopped at the scan bound: go on from there.
                        Some(next) => json!({ "items": items, "next": next.to_string() }),
                        None => json!({ "items": items }),
                    }
                }),
            )
        })?)
    })
    .await?
    .ok_or_else(|| ApiError::bad_request("after: not an object with this semantic id"))?;
    Ok(Json(page))
}

async fn log_entry(
    State(state): State<AppState>,
    headers: HeaderMap,
    Segments(index): Segments<String>,
) -> Result<Json<Value>, ApiError> {
    read_access(&state, &headers).await?;
    let i: u64 = index
        .parse()
        .map_err(|_| ApiError::bad_request("log index must be a non-negative integer"))?;
    let store = state.store().clone();
    let e = blocking(move || {
        store.read(|rd| match log::entry(rd, i) {
            // A row that no longer decodes is that entry's damage, not the daemon's failure.
            Err(LogError::Corrupt(why)) => Err(ApiError::damaged_entry(i, why)),
            Err(LogError::Store(StoreError::Corrupt(why))) => Err(ApiError::damaged_entry(i, why)),
            other => Ok(other?),
        })
    })
    .await?;
    let e = e.ok_or_else(|| ApiError::not_found("log entry not found"))?;
    Ok(Json(e.to_value()))
}

async fn log_range(
    State(state): State<AppState>,
    headers: HeaderMap,
    Params(q): Params,
) -> Result<Json<Value>, ApiError> {
    let reader = read_access(&state, &headers).await?;
    let from: u64 = match q.get("from") {
        None => 0,
        Some(s) => s
            .parse()
            .map_err(|_| ApiError::bad_request("from must be a non-negative integer"))?,
    };
    let limit = page_limit(&q)?;
    let store = state.store().clone();
    let page = blocking(move || {
        Ok(store.read(|rd| access::log_page(rd, &reader, from, limit, access::MAX_LOG_SCAN))?)
    })
    .await?;
    let mut body = json!({
        "items": page.items.iter().map(Entry::to_value).collect::<Vec<_>>(),
        "next": page.next,
    });
    // As `/v1/log/summaries` names them: present only when the page spans a damaged row.
    if !page.damaged.is_empty() {
        body["damaged"] = page
            .damaged
            .into_iter()
            .map(|d| {
                Damaged {
                    index: d.index,
                    cause: d.cause,
                }
                .to_json()
            })
            .collect();
    }
    Ok(Json(body))
}

async fn registry_head(
    State(state): State<AppState>,
    headers: HeaderMap,
    Segments(name): Segments<String>,
) -> Result<Json<Value>, ApiError> {
    read_access(&state, &headers).await?;
    let store = state.store().clone();
    let n = name.clone();
    let head = blocking(move || Ok(store.read(|rd| registry::head(rd, &n))?)).await?;
    let head = head.ok_or_else(|| ApiError::not_found("registry head not found"))?;
    Ok(Json(json!({"name": name, "head": head})))
}

async fn receipt(
    State(state): State<AppState>,
    headers: HeaderMap,
    Segments(id): Segments<String>,
) -> Result<Json<Value>, ApiError> {
    let reader = read_access(&state, &headers).await?;
    if !id.starts_with("rest:") {
        return Err(ApiError::bad_request("receipt id must be rest:<id>"));
    }
    // `rest:` commits belong to no episode: their receipts are the operator's.
    if !reader.sees_everything() {
        return Err(ApiError::not_found("receipt not found"));
    }
    let store = state.store().clone();
    let i = id.clone();
    let r =
        blocking(move || commit::receipt(&store, &i).map_err(|e| ApiError::internal("receipt", e)))
            .await?;
    let result_ref = match &r {
        Receipt::Resolved { result_ref, .. } => {
            result_ref.map(|r| r.to_string()).unwrap_or_default()
        }
        _ => String::new(),
    };
    Ok(Json(
        json!({"invocationId": id, "state": r.state(), "resultRef": result_ref}),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CommitBody {
    #[serde(default)]
    invocation_id: Option<String>,
    observed_head: String,
    objects: Vec<CommitObject>,
    next_world: NextWorld,
    entry: Entry,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CommitObject {
    hash: String,
    interface_hash: String,
    semantic_id: String,
    provenance: String,
    payload: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct NextWorld {
    #[serde(rename = "ref")]
    reference: String,
    revision: u64,
    state_root: String,
    log_head: String,
}

/// Parse a `POST /v1/commit` body (strict JSON within `[limits] json_values`, every ref and
/// object checked).
pub(crate) fn parse_commit(state: &AppState, body: &[u8]) -> Result<RestCommit, ApiError> {
    let v = crate::json_bounds::parse_strict(state, body).map_err(|e| {
        ApiError::bad_request(format!(
            "invalid commit JSON: {}",
            crate::json_bounds::strict_account(&e)
        ))
    })?;
    let c: CommitBody = serde_json::from_value(v)
        .map_err(|e| ApiError::bad_request(format!("invalid commit JSON: {e}")))?;
    let observed_head = if c.observed_head.is_empty() {
        None
    } else {
        Some(parse_ref("observedHead", &c.observed_head)?)
    };
    let mut objects = Vec::with_capacity(c.objects.len());
    for (i, o) in c.objects.iter().enumerate() {
        let hash = parse_ref(&format!("objects[{i}].hash"), &o.hash)?;
        let interface_hash = parse_ref(&format!("objects[{i}].interfaceHash"), &o.interface_hash)?;
        let payload = base64::engine::general_purpose::STANDARD
            .decode(&o.payload)
            .map_err(|e| {
                ApiError::bad_request(format!("objects[{i}].payload: invalid base64: {e}"))
            })?;
        if Ref::of(&payload) != hash {
            return Err(ApiError::bad_request(format!(
                "objects[{i}].hash: payload hashes to {}, not {hash}",
                Ref::of(&payload)
            )));
        }
        for (field, text) in [
            ("semanticId", &o.semantic_id),
            ("provenance", &o.provenance),
        ] {
            if text.len() > MAX_LABEL_BYTES {
                return Err(ApiError::bad_request(format!(
                    "objects[{i}].{field}: {} bytes; the limit is {MAX_LABEL_BYTES}",
                    text.len()
                )));
            }
        }
        if interface_hash != Ref::of(o.semantic_id.as_bytes()) {
            return Err(ApiError::bad_request(format!(
                "objects[{i}].interfaceHash: must be the sha256 of the semanticId {:?}",
                o.semantic_id
            )));
        }
        objects.push(Object {
            hash,
            interface_hash,
            semantic_id: o.semantic_id.clone(),
            provenance: o.provenance.clone(),
            payload,
        });
    }
    let world = World {
        revision: c.next_world.revision,
        state_root: parse_ref("nextWorld.stateRoot", &c.next_world.state_root)?,
        log_head: parse_ref("nextWorld.logHead", &c.next_world.log_head)?,
    };
    Ok(RestCommit {
        invocation_id: c.invocation_id,
        observed_head,
        objects,
        world_ref: parse_ref("nextWorld.ref", &c.next_world.reference)?,
        world,
        entry: c.entry,
    })
}
