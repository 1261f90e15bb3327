//! The JSON-RPC and A2A errors `/a2a/` answers with, each in an HTTP 200: the plain
//! JSON-RPC error, one with `data`, A2A's with a `google.rpc.ErrorInfo`, and the fixed texts
//! of the contract for a credential refused and an invocation that failed.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use broker_core::coordinator::CallError;
use broker_core::session::AuthError;
use broker_core::store::StoreError;
use serde_json::{json, Value};

use crate::state::{AuthFailure, InvokeFailure};

/// A JSON-RPC error reply in an HTTP 200.
pub(super) fn rpc_error(id: &Value, code: i64, message: impl Into<String>) -> Response {
    let body =
        json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}});
    (StatusCode::OK, Json(body)).into_response()
}

/// A JSON-RPC error reply with `data`, in an HTTP 200.
pub(super) fn rpc_error_with_data(id: &Value, code: i64, message: String, data: Value) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": id,
                      "error": {"code": code, "message": message, "data": data}});
    (StatusCode::OK, Json(body)).into_response()
}

/// An A2A-specific error (`-32001` to `-32099`) with the `google.rpc.ErrorInfo` in `data` that
/// A2A 1.0 requires of them (9.5): `reason` names the error, `metadata` says about what.
pub(super) fn error_info(
    id: &Value,
    code: i64,
    message: &str,
    reason: &str,
    metadata: &[(&str, &str)],
) -> Response {
    let metadata: serde_json::Map<String, Value> = metadata
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Value::String((*v).to_owned())))
        .collect();
    let info = json!({
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason,
        "domain": "a2a-protocol.org",
        "metadata": metadata,
    });
    rpc_error_with_data(id, code, message.to_owned(), json!([info]))
}

pub(super) fn auth_error(id: &Value, f: AuthFailure) -> Response {
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
        AuthFailure::Internal => rpc_error(
            id,
            -32603,
            "transition invocation is not available in this daemon",
        ),
    }
}

pub(super) fn invoke_error(id: &Value, f: InvokeFailure) -> Response {
    let (code, message) = error_text(f);
    rpc_error(id, code, message)
}

/// The contract's code and message for a failed invocation.
pub(super) fn error_text(f: InvokeFailure) -> (i64, String) {
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
                // The contract's timeout text; the classification says nothing ran.
                CallError::NoTimeToStart | CallError::PreflightTimedOut => {
                    "invocation exceeded its deadline".to_owned()
                }
                // No room to write: the store-full text; the log says "disk full" or the map size.
                CallError::Store(s)
                    if s.is_disk_full() || matches!(s, StoreError::MapFull { .. }) =>
                {
                    tracing::error!("a2a refusal: {e}");
                    broker_core::capacity::Full::AGENT_MESSAGE.to_owned()
                }
                CallError::Store(_) | CallError::Registry(_) | CallError::Internal(_) => {
                    tracing::error!("a2a refusal: {e}");
                    "transition invocation is not available in this daemon".to_owned()
                }
                other => other.to_string(),
            };
            (code, message)
        }
        InvokeFailure::Capacity | InvokeFailure::RefusalRate => {
            (-32603, "host callback capacity exceeded".to_owned())
        }
        InvokeFailure::Busy => (
            -32603,
            "episode busy: an earlier call of this episode has not finished; nothing ran; retry later"
                .to_owned(),
        ),
        InvokeFailure::TimedOut => (-32603, "invocation exceeded its deadline".to_owned()),
        InvokeFailure::Canceled => (
            -32603,
            "invocation outcome is not confirmed; resend the same task id".to_owned(),
        ),
        InvokeFailure::Revoked => (-32001, crate::state::REVOKED_WHILE_WAITING.to_owned()),
    };
    (code, message)
}
