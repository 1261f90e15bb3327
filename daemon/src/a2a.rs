//! A2A: `POST /a2a/` and the agent card at `GET /.well-known/agent-card.json` (and the older
//! `/.well-known/agent.json`).
//!
//! Three methods reach the same invocation path, each answering in its own version's shape:
//!
//! | method | version | params | result |
//! |---|---|---|---|
//! | `tasks/send` | the contract (pre-0.2) | `id`, `metadata.skill_id`, one `{"type":"data"}` part | a task, `status.state: "completed"` |
//! | `message/send` | 0.3 | `message` with one `{"kind":"data"}` part | a task with `"kind":"task"`, states like `completed` |
//! | `SendMessage` | 1.0 (`A2A-Version: 1.0`) | `message` with one `{"data":…}` part | `{"task": …}`, states like `TASK_STATE_COMPLETED` |
//!
//! For the message methods the skill is named by `skill_id` (or `skillId`) in the request's
//! `metadata` or in `message.metadata`, and the idempotency key is `message.taskId` when
//! present, else `message.messageId` (0.3), or `message.messageId` (1.0, where a `taskId` must
//! name an existing task); the task id of the answer is that key. A committed
//! task's state follows the outcome classification ([`crate::outcome`]): `ok` → completed,
//! `refused`/`denied` → rejected, `failed` → failed (`tasks/send` keeps `completed`).
//!
//! `A2A-Version` (a header, or a query parameter) names `1.0` or `0.3` exactly
//! ([`version::requested_version`]); absent, 0.3. Any other value is the specification's
//! `VersionNotSupportedError` (-32009) for every method, and so is a method sent under the
//! version it is not of ([`version::METHODS`]). Tasks are read back by id, never canceled
//! ([`tasks`]); the methods of what the card declines (streaming, push notifications, the
//! extended card, listing) answer the specification's errors ([`version::Unsupported`]).
//!
//! Errors are JSON-RPC errors in an HTTP 200, with the fixed messages of the contract; the
//! message methods add `data` with the outcome classification where the question "did it
//! run?" has an answer. Under 1.0 every `data` is a `google.rpc.ErrorInfo`, the credential
//! errors' included ([`errors::error_with_data`], [`errors::auth_error`]). The task id is the idempotency key within the episode: resending a
//! committed task id returns the committed result without running the tool again.
//!
//! The handler [`a2a`] reads a request top to bottom; its steps live in modules named for
//! what they hold: [`request`] (the credential, the body, the JSON-RPC envelope), [`version`]
//! (the `A2A-Version` rules and the method table), [`params`] (a send's params checked),
//! [`task`] (a task in each version's shape), [`tasks`] (tasks read back), [`withheld`] (a
//! committed task's answer with its output left out, for when the reply budget has no room for
//! it), [`errors`] (the JSON-RPC and A2A errors) and [`card`](mod@card) (the agent card).

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use broker_core::coordinator::{Call, CallError, Surface};
use broker_core::session::Session;
use handler_api::EffectClass;
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::outcome;
use crate::state::{AppState, InvokeFailure};
use crate::tools::{self, Unresolved};

use errors::{error_text, error_with_data, invoke_error, revoked_error, rpc_error};
use params::TaskSend;
use version::{Method, Op};

mod card;
mod errors;
mod params;
mod request;
mod task;
mod tasks;
mod version;
mod withheld;

pub use card::{card, Skill, CANNOT_RUN_TAG};

/// The protocol versions the card advertises for the JSON-RPC binding at `/a2a/`.
pub const A2A_VERSIONS: [&str; 2] = ["1.0", "0.3"];

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/a2a/", post(a2a))
        .route("/a2a", post(a2a))
        .route("/.well-known/agent-card.json", get(card::agent_card))
        .route("/.well-known/agent.json", get(card::agent_card))
}

/// `POST /a2a/`: one JSON-RPC request, read, routed by its version and method, and answered.
async fn a2a(
    State(state): State<AppState>,
    headers: HeaderMap,
    uri: Uri,
    body: axum::body::Body,
) -> Response {
    let deadline = Instant::now() + state.limits().call_deadline;
    // `_share` keeps the request's place in the body budget until it is answered: queued
    // behind its episode or the large-call lane, a call holds what was parsed from its body.
    let asked = version::requested_version(&headers, &uri);
    let speaks = asked.clone().unwrap_or(version::Version::V0_3);
    let request::Received {
        session,
        req,
        params_unreadable,
        body_bytes,
        share: _share,
    } = match request::received(&state, &headers, body, deadline, speaks).await {
        Ok(received) => received,
        Err(answer) => return answer,
    };
    let id = match request::envelope(&req) {
        Ok(Some(id)) => id,
        // A notification: JSON-RPC gives it no answer, so nothing is run that no one hears of.
        Ok(None) => return StatusCode::ACCEPTED.into_response(),
        Err(why) => {
            return rpc_error(
                &Value::Null,
                -32600,
                format!("invalid JSON-RPC request: {why}"),
            )
        }
    };
    let method = match version::routed(&req, asked, &id) {
        Ok(Op::Unsupported(what)) => return what.answer(&id),
        // The envelope, the method and its version are sound, and params cannot be read as
        // arguments: nothing runs.
        Ok(Op::Send(shape) | Op::Read(_, shape)) if params_unreadable.is_some() => {
            let why = params_unreadable.as_deref().unwrap_or_default();
            return request::params_unreadable(&id, why, shape.version());
        }
        Ok(Op::Send(method)) => method,
        Ok(Op::Read(read, shape)) => {
            let params = req.get("params").unwrap_or(&Value::Null);
            return tasks::answer(&state, &session, &id, read, shape, params).await;
        }
        Err(answer) => return *answer,
    };
    let send = match params::sent(method, &req, &id, &session.episode) {
        Ok(send) => send,
        Err(answer) => return *answer,
    };
    if let Some(task) = &send.continues {
        return tasks::continued(&state, &session, &id, task).await;
    }
    let class = match skill_class(&state, &session, &send.skill_id, &id, method).await {
        Ok(class) => class,
        Err(answer) => return answer,
    };
    // The one context of every task of this session (a send naming another was refused).
    let context_id = session.episode.clone();
    let call_session = session.clone();
    let call = Call {
        surface: Surface::A2a,
        session,
        skill_id: send.skill_id.clone(),
        task_id: Some(send.task_id.clone()),
        args: send.args.clone(),
        transition_fn: send.transition_fn,
    };
    match state.invoke(call, deadline, body_bytes).await {
        Ok(out) => {
            let outcome = outcome::of_output(&out, class);
            task::success(&id, method, &send.task_id, &context_id, &out, &outcome)
        }
        Err(f) if method == Method::TasksSend => invoke_error(&id, f),
        Err(f) => failed(&state, &call_session, &id, method, &send, f).await,
    }
}

/// The class of the skill, when this session sees it ([`tools::resolve`]), or the JSON-RPC
/// error that answers the send instead.
async fn skill_class(
    state: &AppState,
    session: &Session,
    skill_id: &str,
    id: &Value,
    method: Method,
) -> Result<EffectClass, Response> {
    match tools::resolve(state, session, skill_id, Surface::A2a).await {
        Ok(e) => Ok(tools::tool_class(state, &e.transition)),
        // The contract's message, with the hint in `data` (an `ErrorInfo` under 1.0).
        Err(Unresolved::Unknown { why }) => Err(error_with_data(
            id,
            -32602,
            "not authorized".into(),
            json!({ "why": why }),
            method.version(),
        )),
        Err(Unresolved::Surface(e)) => {
            tracing::error!("a2a refusal: {e}");
            Err(rpc_error(
                id,
                -32603,
                "transition invocation is not available in this daemon",
            ))
        }
    }
}

/// The JSON-RPC error of a `message/send` or `SendMessage` that did not commit, with the
/// outcome in its data where one is known (under 1.0 in an `ErrorInfo`'s metadata).
async fn failed(
    state: &AppState,
    session: &Session,
    id: &Value,
    method: Method,
    send: &TaskSend,
    f: InvokeFailure,
) -> Response {
    if matches!(f, InvokeFailure::Revoked) {
        return revoked_error(id, &send.task_id, method.version());
    }
    let mut o = outcome::of_failure(&f);
    if matches!(f, InvokeFailure::Call(CallError::TaskIdReused)) {
        o = Some(
            outcome::reuse(
                state,
                session,
                Surface::A2a,
                &send.task_id,
                &send.skill_id,
                &send.args,
            )
            .await,
        );
    }
    let records = match &f {
        InvokeFailure::Call(CallError::EffectsUnrecorded { records }) => Some(records.clone()),
        _ => None,
    };
    let (code, message) = error_text(f);
    match o {
        None => rpc_error(id, code, message),
        Some(o) => {
            let mut data = o.to_json();
            data["taskId"] = json!(send.task_id);
            if let Some(r) = records {
                data["records"] = json!(r);
            }
            error_with_data(id, code, message, data, method.version())
        }
    }
}
