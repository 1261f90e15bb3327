//! The JSON-RPC and A2A errors `/a2a/` answers with, each in an HTTP 200: the plain
//! JSON-RPC error, one with `data`, A2A's with a `google.rpc.ErrorInfo`, and the fixed texts
//! of the contract for a credential refused and an invocation that failed.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use broker_core::coordinator::{CallError, R8_MESSAGE};
use broker_core::session::AuthError;
use broker_core::store::StoreError;
use serde_json::{json, Value};

use super::version::Version;
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

/// A JSON-RPC error with `data` (an object) in the shape the client's version reads: under 0.3
/// the object itself; under 1.0 a `google.rpc.ErrorInfo` whose `metadata` holds its members as
/// strings, the one place A2A 1.0 (9.5) lays out error details, and the only `data` the
/// a2a-sdk 1.x client keeps (it drops any other). `reason` is the specification's for the code.
pub(super) fn error_with_data(
    id: &Value,
    code: i64,
    message: String,
    data: Value,
    speaks: Version,
) -> Response {
    if speaks == Version::V0_3 {
        return rpc_error_with_data(id, code, message, data);
    }
    let metadata: Vec<(String, String)> = match data {
        Value::Object(members) => members
            .into_iter()
            .map(|(k, v)| (k, metadata_text(v)))
            .collect(),
        other => vec![("data".to_owned(), metadata_text(other))],
    };
    let metadata: Vec<(&str, &str)> = metadata
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    error_info(id, code, &message, reason_of(code), &metadata)
}

/// The `ErrorInfo` reason A2A (and the a2a-sdk) gives each JSON-RPC code.
fn reason_of(code: i64) -> &'static str {
    match code {
        -32600 => "INVALID_REQUEST",
        -32601 => "METHOD_NOT_FOUND",
        -32602 => "INVALID_PARAMS",
        -32603 => "INTERNAL_ERROR",
        -32001 => "TASK_NOT_FOUND",
        _ => "UNKNOWN_ERROR",
    }
}

/// A member of `data` as an `ErrorInfo` metadata value, which is a string: a string as it is,
/// a list of strings (records) joined by ", ", anything else as its JSON text (`true`, `3`).
fn metadata_text(v: Value) -> String {
    match v {
        Value::String(s) => s,
        Value::Array(items) if items.iter().all(Value::is_string) => items
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
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

/// A credential refused, in the contract's code and message. Under 0.3 that is all; under 1.0
/// an `ErrorInfo` says it is the credential (`reason` `UNAUTHENTICATED`, `SESSION_EXPIRED`),
/// since A2A's `-32001` is `TaskNotFoundError`, which is what an SDK raises for it: without it a
/// client could not tell a dead credential from a task it may send afresh.
pub(super) fn auth_error(id: &Value, f: AuthFailure, speaks: Version) -> Response {
    let (code, message, reason, credential, why) = match f {
        AuthFailure::Denied(AuthError::Absent) => (
            -32001,
            "session credential is absent: send Authorization: Bearer <session-credential>",
            "UNAUTHENTICATED",
            "absent",
            NO_TASK_ABSENT,
        ),
        AuthFailure::Denied(AuthError::Malformed) => (
            -32600,
            "malformed Authorization header: expected Bearer <64-hex-credential>",
            "UNAUTHENTICATED",
            "malformed",
            NO_TASK_MALFORMED,
        ),
        AuthFailure::Denied(AuthError::Unknown) => (
            -32001,
            "unknown session credential",
            "UNAUTHENTICATED",
            "unknown",
            NO_TASK_UNKNOWN,
        ),
        AuthFailure::Denied(AuthError::Expired) => (
            -32001,
            "session credential has expired",
            "SESSION_EXPIRED",
            "expired",
            NO_TASK_EXPIRED,
        ),
        AuthFailure::Internal => {
            return rpc_error(
                id,
                -32603,
                "transition invocation is not available in this daemon",
            )
        }
    };
    match speaks {
        Version::V0_3 => rpc_error(id, code, message),
        Version::V1_0 => error_info(
            id,
            code,
            message,
            reason,
            &[("credential", credential), ("why", why)],
        ),
    }
}

/// The credential errors' `why`: each says that no task is concerned, since A2A's `-32001`
/// reads as `TaskNotFoundError`.
const NO_TASK_ABSENT: &str = "the request carried no credential: this is no task error, no task was looked up and nothing ran; send Authorization: Bearer <session-credential>";
const NO_TASK_MALFORMED: &str = "the Authorization header is not Bearer and 64 hex digits, once: this is no task error, no task was looked up and nothing ran";
const NO_TASK_UNKNOWN: &str = "the credential is not one of this daemon's sessions (never minted, or revoked): this is no task error, no task was looked up and nothing ran; ask the operator for a new credential";
const NO_TASK_EXPIRED: &str = "the session's credential has expired: this is no task error, no task was looked up and nothing ran; ask the operator for a new credential, and send the task again with it";

/// `-32001`: the credential was revoked while the call waited (nothing ran, its task id is
/// unused); under 1.0 with the `ErrorInfo` that says so (`reason` `SESSION_REVOKED`).
pub(super) fn revoked_error(id: &Value, task_id: &str, speaks: Version) -> Response {
    let message = crate::state::REVOKED_WHILE_WAITING;
    match speaks {
        Version::V0_3 => rpc_error(id, -32001, message),
        Version::V1_0 => error_info(
            id,
            -32001,
            message,
            "SESSION_REVOKED",
            &[
                ("credential", "revoked"),
                ("taskId", task_id),
                ("why", "the session's credential was revoked while this call waited: this is no task error; nothing ran and nothing was journaled, so the task id is unused; ask the operator for a new credential, and send the task again with it"),
            ],
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
                CallError::NotAuthorized
                | CallError::PinMismatch
                | CallError::TaskIdReused
                | CallError::Withdrawn => -32602,
                _ => -32603,
            };
            let message = match &e {
                CallError::InvalidTaskId | CallError::InvalidArguments(_) => {
                    "invalid params".to_owned()
                }
                // The contract's timeout text; the classification says nothing ran.
                // A first attempt withdrawn at its deadline too: it is answered as when the
                // edge's deadline answers first.
                CallError::NoTimeToStart | CallError::NotStarted | CallError::PreflightTimedOut => {
                    "invocation exceeded its deadline".to_owned()
                }
                // The contract's R8 text, then the cause (the error itself names the cause alone,
                // as the operator's log takes it).
                CallError::NoWorktree(why) => format!("{R8_MESSAGE}: {why}"),
                // A resend: its task id is used for good, which the agent must know to move on.
                CallError::Withdrawn => "task id already used: its call was withdrawn at its deadline (its handler was never started): nothing ran and nothing was spent; send it again as a new task".to_owned(),
                // No room to write: the store-full text; the log says "disk full" or the map size.
                CallError::Store(s)
                    if s.is_disk_full() || matches!(s, StoreError::MapFull { .. }) =>
                {
                    tracing::error!("a2a refusal: {e}");
                    broker_core::capacity::Full::AGENT_MESSAGE.to_owned()
                }
                CallError::Store(_)
                | CallError::Registry(_)
                | CallError::Log(_)
                | CallError::Journal(_)
                | CallError::Canon(_)
                | CallError::Internal(_) => {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A first attempt can itself meet `NotStarted` (its intent's sync returned just after the
    /// deadline, before the edge's timer): it is answered as when the edge answers first,
    /// never "task id already used", which only a resend (`Withdrawn`) is told.
    #[test]
    fn a_first_attempt_withdrawn_at_its_deadline_is_not_told_its_task_id_was_used() {
        let (code, text) = error_text(InvokeFailure::Call(CallError::NotStarted));
        assert_eq!(
            (code, text.as_str()),
            (-32603, "invocation exceeded its deadline")
        );
        let (code, text) = error_text(InvokeFailure::Call(CallError::Withdrawn));
        assert_eq!(code, -32602);
        assert!(
            text.starts_with("task id already used: its call was withdrawn at its deadline"),
            "{text}"
        );
    }

    /// An intent whose sync failed was withdrawn before its handler started and told
    /// "invocation exceeded its deadline", though no deadline passed: it is known not
    /// committed, in the seed's words for that.
    #[test]
    fn an_intent_the_store_could_not_make_durable_is_not_told_of_a_deadline() {
        let (code, text) = error_text(InvokeFailure::Call(CallError::IntentNotDurable));
        assert_eq!(
            (code, text.as_str()),
            (-32603, "invocation was not committed; send a new task id")
        );
    }

    /// A call whose effect ran and whose outcome the store could not take was told "invocation
    /// was not committed; send a new task id": an agent doing so ran its write twice. It is
    /// told that the effect may have run, and counted `unrecorded`.
    #[test]
    fn an_effect_whose_outcome_could_not_be_stored_is_never_told_to_send_a_new_task_id() {
        let (code, text) = error_text(InvokeFailure::Call(CallError::EffectUnrecordable));
        assert_eq!(code, -32603);
        assert_eq!(
            text,
            "effects were requested but the invocation was not confirmed committed, and its outcome could not be stored: the effect may have run; check what it changed before sending it again"
        );
        assert!(!text.contains("send a new task id"), "{text}");
        assert_eq!(
            crate::metrics::outcome_label(&Err(CallError::EffectUnrecordable)),
            "unrecorded"
        );
    }

    /// A host fault, whether its cause is typed (the log's, the journal's, the registry's, a
    /// document with no canonical form) or only text, is logged and answered with the fixed
    /// words, never its own text; its metrics label is `error`.
    #[test]
    fn a_host_fault_is_answered_with_the_fixed_words_whatever_its_cause() {
        use broker_core::canon::CanonError;
        use broker_core::journal::JournalError;
        use broker_core::log::LogError;
        use broker_core::registry::RegistryError;
        let faults = || {
            [
                CallError::Registry(RegistryError::Duplicate("r".into())),
                CallError::Log(LogError::Corrupt("l".into())),
                CallError::Journal(JournalError::Corrupt("j".into())),
                CallError::Canon(CanonError::NonFinite),
                CallError::Internal("i".into()),
                CallError::Store(StoreError::MapResized),
            ]
        };
        for e in faults() {
            let text = e.to_string();
            assert_eq!(
                error_text(InvokeFailure::Call(e)),
                (
                    -32603,
                    "transition invocation is not available in this daemon".to_owned()
                ),
                "{text}"
            );
        }
        for e in faults() {
            assert_eq!(crate::metrics::outcome_label(&Err(e)), "error");
        }
    }

    /// A2A's half of the one table of failures (MCP's is `every_failure_is_classified_over_mcp_as_over_a2a`):
    /// what `outcome::of_failure` classifies nothing of is a refused request, `-32602`, or
    /// the revoked credential's `-32001`, as MCP answers the same failures.
    #[test]
    fn what_the_table_leaves_unclassified_is_a_refused_request() {
        for failure in crate::outcome::every_failure() {
            if crate::outcome::of_failure(&failure).is_some() {
                continue;
            }
            let revoked = matches!(failure, InvokeFailure::Revoked);
            let text = format!("{failure:?}");
            let (code, _) = error_text(failure);
            assert_eq!(code, if revoked { -32001 } else { -32602 }, "{text}");
        }
    }
}
