//! A task in each version's shape: a committed call's (its output and the outcome's state)
//! and one with no committed result (running, or ended without a commit), and the JSON-RPC
//! result that carries it.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use broker_core::coordinator::CallOutput;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::errors::rpc_error;
use super::version::Method;
use crate::outcome::{self, Kind, Outcome};

/// The A2A task state of a committed call.
fn task_state(method: Method, outcome: &Outcome) -> &'static str {
    let (v03, v10) = match outcome.kind {
        Kind::Ok => ("completed", "TASK_STATE_COMPLETED"),
        Kind::Refused | Kind::Denied => ("rejected", "TASK_STATE_REJECTED"),
        Kind::Failed | Kind::Indeterminate => ("failed", "TASK_STATE_FAILED"),
    };
    match method {
        // The contract: every committed result is a completed task.
        Method::TasksSend => "completed",
        Method::MessageSend => v03,
        Method::SendMessage => v10,
    }
}

/// The answer to a send that committed: its task in `method`'s version.
pub(super) fn success(
    id: &Value,
    method: Method,
    task_id: &str,
    context_id: &str,
    out: &CallOutput,
    outcome: &Outcome,
) -> Response {
    match committed_task(method, task_id, context_id, out, outcome) {
        // 1.0 answers a send with the task in `task` (a send may also answer a message).
        Ok((task, raw)) if method == Method::SendMessage => {
            rpc_result_verbatim(id, json!({ "task": task }), &raw)
        }
        Ok((task, raw)) => rpc_result_verbatim(id, task, &raw),
        Err(why) => rpc_error(id, -32603, why),
    }
}

/// The task of a committed call in `method`'s version, with [`OUTPUT_MARK`] where its output
/// goes, and the output, to be written there verbatim ([`rpc_result_verbatim`]).
pub(super) fn committed_task(
    method: Method,
    task_id: &str,
    context_id: &str,
    out: &CallOutput,
    outcome: &Outcome,
) -> Result<(Value, Box<RawValue>), &'static str> {
    let not_an_object = "transition output is not a JSON object";
    let text = std::str::from_utf8(&out.output).map_err(|_| not_an_object)?;
    let output = RawValue::from_string(text.to_owned()).map_err(|_| not_an_object)?;
    let raw = OUTPUT_MARK;
    let metadata = outcome::a2a_metadata(out, outcome);
    let state = task_state(method, outcome);
    let task = match method {
        Method::TasksSend => json!({
            "id": task_id,
            "status": {"state": state},
            "artifacts": [{"parts": [{"type": "data", "data": raw}]}],
            "metadata": metadata,
        }),
        Method::MessageSend => json!({
            "kind": "task",
            "id": task_id,
            "contextId": context_id,
            "status": {"state": state},
            "artifacts": [{"artifactId": "output", "name": "output",
                           "parts": [{"kind": "data", "data": raw}]}],
            "metadata": metadata,
        }),
        Method::SendMessage => json!({
            "id": task_id,
            "contextId": context_id,
            "status": {"state": state},
            "artifacts": [{"artifactId": "output", "name": "output",
                           "parts": [{"data": raw, "mediaType": "application/json"}]}],
            "metadata": metadata,
        }),
    };
    Ok((task, output))
}

/// A task with no committed result, in `shape`'s version: `states` holds the 0.3 and the 1.0
/// word, `why` the status message an agent reads.
pub(super) fn open_task(
    shape: Method,
    task_id: &str,
    context_id: &str,
    (v03, v10): (&str, &str),
    metadata: Value,
    why: Option<&str>,
) -> Value {
    let modern = shape == Method::SendMessage;
    let mut status = json!({ "state": if modern { v10 } else { v03 } });
    if let Some(text) = why {
        status["message"] = if modern {
            json!({"messageId": format!("{task_id}.status"), "role": "ROLE_AGENT",
                   "parts": [{"text": text}]})
        } else {
            json!({"kind": "message", "messageId": format!("{task_id}.status"), "role": "agent",
                   "parts": [{"kind": "text", "text": text}]})
        };
    }
    let mut task = json!({
        "id": task_id,
        "contextId": context_id,
        "status": status,
        "metadata": metadata,
    });
    if !modern {
        task["kind"] = json!("task");
    }
    task
}

/// A JSON-RPC result in an HTTP 200.
pub(super) fn rpc_result(id: &Value, result: Value) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": id, "result": result});
    (StatusCode::OK, Json(body)).into_response()
}

/// Where a committed call's output goes in a task ([`committed_task`]): a string no other
/// member of an answer holds, replaced by the output's own bytes when the answer is written.
const OUTPUT_MARK: &str = "\u{0}world/committed-output\u{0}";

/// [`rpc_result`] of a task holding [`OUTPUT_MARK`], with the committed `output` written in
/// its place byte for byte: a serde_json value would write its numbers again in its own form
/// (`1e+237` as `1e237`), and the data would no longer be the bytes `outputRef` names.
pub(super) fn rpc_result_verbatim(id: &Value, mut result: Value, output: &RawValue) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": id, "result": result});
    let text = body.to_string();
    let mark = Value::String(OUTPUT_MARK.to_owned()).to_string();
    if text.matches(mark.as_str()).count() == 1 {
        let text = text.replacen(mark.as_str(), output.get(), 1);
        return (
            StatusCode::OK,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            text,
        )
            .into_response();
    }
    // The mark also in a string of the caller's (its request id): the output as a value.
    let data = serde_json::from_str(output.get()).unwrap_or(Value::Null);
    for at in [
        "/artifacts/0/parts/0/data",
        "/task/artifacts/0/parts/0/data",
    ] {
        if let Some(slot) = result.pointer_mut(at) {
            *slot = data;
            break;
        }
    }
    rpc_result(id, result)
}
