//! A2A: `POST /a2a/` (`tasks/send`) and the agent card at `GET /.well-known/agent.json`.
//!
//! Errors are JSON-RPC errors in an HTTP 200, with the fixed messages of the contract. The
//! task id is the idempotency key within the episode: resending a committed task id returns
//! the committed result without running the tool again.

use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use broker_core::coordinator::{Call, CallError, Surface};
use broker_core::object::Ref;
use broker_core::session::AuthError;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::rest::ApiError;
use crate::state::{AppState, AuthFailure, InvokeFailure, INVOKE_DEADLINE};
use crate::tools;

/// Largest `POST /a2a/` body.
pub const MAX_A2A_BYTES: usize = 1 << 20;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/a2a/", post(a2a))
        .route("/a2a", post(a2a))
        .route("/.well-known/agent.json", get(agent_card))
}

/// A JSON-RPC error reply in an HTTP 200.
fn rpc_error(id: &Value, code: i64, message: impl Into<String>) -> Response {
    let body =
        json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}});
    (StatusCode::OK, Json(body)).into_response()
}

fn auth_error(id: &Value, f: AuthFailure) -> Response {
    match f {
        AuthFailure::Denied(AuthError::Absent) => rpc_error(
            id,
            -32001,
            "session credential is absent: send Authorization: Bearer <session-credential>",
        ),
        AuthFailure::Denied(AuthError::Malformed) => rpc_error(
            id,
            -32600,
            "malformed Authorization header: expected Bearer <64-hex-credential>",
        ),
        AuthFailure::Denied(AuthError::Unknown) => {
            rpc_error(id, -32001, "unknown session credential")
        }
        AuthFailure::Denied(AuthError::Expired) => {
            rpc_error(id, -32001, "session credential has expired")
        }
        AuthFailure::Timeout | AuthFailure::Internal => rpc_error(
            id,
            -32603,
            "transition invocation is not available in this daemon",
        ),
    }
}

/// The parsed `tasks/send` params.
struct TaskSend {
    task_id: String,
    skill_id: String,
    args: Value,
    transition_fn: Option<Ref>,
}

fn parse_params(params: &Value) -> Option<Result<TaskSend, Response>> {
    let task_id = params.get("id")?.as_str()?.to_owned();
    let metadata = params.get("metadata")?.as_object()?;
    let skill_id = metadata.get("skill_id")?.as_str()?.to_owned();
    let parts = params.get("message")?.get("parts")?.as_array()?;
    let [part] = parts.as_slice() else {
        return None;
    };
    if part.get("type")?.as_str()? != "data" {
        return None;
    }
    let args = part.get("data")?.clone();
    if !args.is_object() {
        return None;
    }
    let transition_fn = match metadata.get("transition_fn") {
        None => None,
        Some(v) => Some(v.as_str()?.parse::<Ref>().ok()?),
    };
    Some(Ok(TaskSend {
        task_id,
        skill_id,
        args,
        transition_fn,
    }))
}

async fn a2a(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let started = Instant::now();
    let null = Value::Null;
    // Authorization first: an unauthorized caller learns nothing about the transport.
    let session = match state.authenticate(&headers).await {
        Ok(s) => s,
        Err(f) => {
            let id = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| v.get("id").cloned())
                .unwrap_or(Value::Null);
            return auth_error(&id, f);
        }
    };
    if body.len() > MAX_A2A_BYTES {
        return rpc_error(
            &null,
            -32600,
            format!("invalid JSON-RPC request: body exceeds {MAX_A2A_BYTES} bytes"),
        );
    }
    let Ok(req) = broker_core::canon::parse(&body) else {
        return rpc_error(&null, -32600, "invalid JSON-RPC request");
    };
    let id = req.get("id").cloned().unwrap_or(Value::Null);
    if req.get("jsonrpc").and_then(Value::as_str) != Some("2.0") || !req.is_object() {
        return rpc_error(&id, -32600, "invalid JSON-RPC request");
    }
    match req.get("method").and_then(Value::as_str) {
        Some("tasks/send") => {}
        _ => return rpc_error(&id, -32601, "method not found"),
    }
    let params = req.get("params").cloned().unwrap_or(Value::Null);
    let send = match parse_params(&params) {
        Some(Ok(s)) => s,
        Some(Err(r)) => return r,
        None => return rpc_error(&id, -32602, "invalid params"),
    };
    if !broker_core::task::valid_task_id(&send.task_id) {
        return rpc_error(&id, -32602, "invalid params");
    }
    // Visibility is rebuilt for this request: having seen a skill conveys no authority.
    match tools::visible(&state, &session).await {
        Ok(v) if v.iter().any(|e| e.transition.id == send.skill_id) => {}
        Ok(_) => return rpc_error(&id, -32602, "not authorized"),
        Err(e) => {
            tracing::error!("a2a refusal: {e}");
            return rpc_error(
                &id,
                -32603,
                "transition invocation is not available in this daemon",
            );
        }
    }
    let call = Call {
        surface: Surface::A2a,
        session,
        skill_id: send.skill_id,
        task_id: Some(send.task_id.clone()),
        args: send.args,
        transition_fn: send.transition_fn,
    };
    let remaining = INVOKE_DEADLINE.saturating_sub(started.elapsed());
    match state
        .invoke(call, remaining.max(Duration::from_millis(1)))
        .await
    {
        Ok(out) => success(&id, &send.task_id, &out),
        Err(f) => invoke_error(&id, f),
    }
}

fn success(id: &Value, task_id: &str, out: &broker_core::coordinator::CallOutput) -> Response {
    // Embed the committed output bytes verbatim.
    let Ok(text) = std::str::from_utf8(&out.output) else {
        return rpc_error(id, -32603, "transition output is not a JSON object");
    };
    let Ok(raw) = RawValue::from_string(text.to_owned()) else {
        return rpc_error(id, -32603, "transition output is not a JSON object");
    };
    let body = json!({
        "jsonrpc": "2.0",
        "id": id,
        "result": {
            "id": task_id,
            "status": {"state": "completed"},
            "artifacts": [{"parts": [{"type": "data", "data": raw}]}],
            "metadata": {
                "invocation_id": out.invocation_id,
                "world_ref": out.world_ref,
                "entry_index": out.entry_index,
            },
        },
    });
    (StatusCode::OK, Json(body)).into_response()
}

fn invoke_error(id: &Value, f: InvokeFailure) -> Response {
    let (code, message) = match f {
        InvokeFailure::Call(e) => {
            let code = match e {
                CallError::InvalidTaskId | CallError::InvalidArguments(_) => -32602,
                CallError::NotAuthorized | CallError::PinMismatch | CallError::TaskIdReused => {
                    -32602
                }
                _ => -32603,
            };
            let message = match &e {
                CallError::InvalidTaskId | CallError::InvalidArguments(_) => {
                    "invalid params".to_owned()
                }
                CallError::Store(_) | CallError::Registry(_) | CallError::Internal(_) => {
                    tracing::error!("a2a refusal: {e}");
                    "transition invocation is not available in this daemon".to_owned()
                }
                other => other.to_string(),
            };
            (code, message)
        }
        InvokeFailure::Capacity => (-32603, "host callback capacity exceeded".to_owned()),
        InvokeFailure::TimedOut => (-32603, "invocation exceeded its deadline".to_owned()),
        InvokeFailure::Canceled => (
            -32603,
            "invocation outcome is not confirmed; resend the same task id".to_owned(),
        ),
    };
    rpc_error(id, code, message)
}

async fn agent_card(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let session = state
        .authenticate(&headers)
        .await
        .map_err(ApiError::from_auth)?;
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1:7644")
        .to_owned();
    let tools = tools::visible(&state, &session)
        .await
        .map_err(|e| ApiError::internal("agent card", e))?;
    Ok(Json(card(&host, &tools)).into_response())
}

/// The agent card for these tools.
pub fn card(host: &str, tools: &[broker_core::registry::RegistryEntry]) -> Value {
    let skills: Vec<Value> = tools
        .iter()
        .map(|e| {
            let t = &e.transition;
            json!({
                "id": t.id,
                "name": t.title,
                "description": t.description,
                "tags": [],
                "examples": [],
            })
        })
        .collect();
    json!({
        "name": "worldd",
        "description": "World effect broker: every tool call is planned, admitted against capability grants, executed by a plugin and committed to a verifiable log.",
        "url": format!("http://{host}/a2a/"),
        "version": env!("CARGO_PKG_VERSION"),
        "capabilities": {"streaming": false, "pushNotifications": false, "stateTransitionHistory": false},
        "defaultInputModes": ["application/json"],
        "defaultOutputModes": ["application/json"],
        "skills": skills,
    })
}
