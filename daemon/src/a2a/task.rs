//! A task in each version's shape: a committed call's (its output and the outcome's state)
//! and one with no committed result (running, or ended without a commit), and the JSON-RPC
//! result that carries it.
//!
//! A committed task is a typed value ([`CommittedTask`]) holding the committed output as a
//! [`RawValue`], which is written as it is: the output read into a serde_json `Value` would be
//! written again in serde_json's form (`1e+237` as `1e237`, names in UTF-8 order), and the
//! data would no longer be the bytes `outputRef` names. Its members are declared in the order
//! of their names, the order every other answer has (a `Value`'s map is ordered by name).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use broker_core::coordinator::CallOutput;
use serde::Serialize;
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
        // A replay (its task id resent) ran nothing this time: the 503, as for a read-back.
        Ok(task) if out.replayed => rpc_result(id, task.result(method == Method::SendMessage)),
        Ok(task) => super::withheld::committed(id, task, method == Method::SendMessage),
        Err(why) => rpc_error(id, -32603, why),
    }
}

/// The task of a committed call in `method`'s version, its output the committed bytes.
pub(super) fn committed_task<'a>(
    method: Method,
    task_id: &'a str,
    context_id: &'a str,
    out: &'a CallOutput,
    outcome: &Outcome,
) -> Result<CommittedTask<'a>, &'static str> {
    let not_an_object = "transition output is not a JSON object";
    let text = std::str::from_utf8(&out.output).map_err(|_| not_an_object)?;
    let data: &RawValue = serde_json::from_str(text).map_err(|_| not_an_object)?;
    let metadata = outcome::a2a_metadata(out, outcome);
    let status = Status {
        state: task_state(method, outcome),
    };
    Ok(match method {
        Method::TasksSend => CommittedTask::Contract(ContractTask {
            artifacts: [ContractArtifact {
                parts: [ContractPart::Data { data, kind: "data" }],
            }],
            id: task_id,
            metadata,
            status,
        }),
        Method::MessageSend => CommittedTask::V03(Task03 {
            artifacts: [Artifact::output(Part03::Data { data, kind: "data" })],
            context_id,
            id: task_id,
            kind: "task",
            metadata,
            status,
        }),
        Method::SendMessage => CommittedTask::V10(Task10 {
            artifacts: [Artifact::output(Part10::Data {
                data,
                media_type: "application/json",
            })],
            context_id,
            id: task_id,
            metadata,
            status,
        }),
    })
}

/// A committed call's task, in the shape of the version it is answered in.
#[derive(Serialize)]
#[serde(untagged)]
pub(super) enum CommittedTask<'a> {
    /// `tasks/send`'s, the contract's.
    Contract(ContractTask<'a>),
    /// 0.3's (`message/send`, `tasks/get`).
    V03(Task03<'a>),
    /// 1.0's (in `SendMessage`'s `task`, and `GetTask`'s).
    V10(Task10<'a>),
}

impl CommittedTask<'_> {
    /// The bytes of the committed output its artifact carries (0 once withheld).
    pub(super) fn output_bytes(&self) -> usize {
        let data = match self {
            CommittedTask::Contract(t) => match &t.artifacts[0].parts[0] {
                ContractPart::Data { data, .. } => Some(data),
                ContractPart::Text { .. } => None,
            },
            CommittedTask::V03(t) => match &t.artifacts[0].parts[0] {
                Part03::Data { data, .. } => Some(data),
                Part03::Text { .. } => None,
            },
            CommittedTask::V10(t) => match &t.artifacts[0].parts[0] {
                Part10::Data { data, .. } => Some(data),
                Part10::Text { .. } => None,
            },
        };
        data.map_or(0, |d| d.get().len())
    }

    /// Its output left out, `text` in its place as a text part of its version
    /// ([`super::withheld`]); all else (id, context, status, metadata) as it was.
    pub(super) fn withhold_output(&mut self, text: &'static str) {
        match self {
            CommittedTask::Contract(t) => {
                t.artifacts[0].parts[0] = ContractPart::Text { text, kind: "text" }
            }
            CommittedTask::V03(t) => t.artifacts[0].parts[0] = Part03::Text { kind: "text", text },
            CommittedTask::V10(t) => {
                t.artifacts[0].parts[0] = Part10::Text {
                    media_type: "text/plain",
                    text,
                }
            }
        }
    }

    /// The JSON-RPC result that carries it: itself, or under 1.0's send (`sent`) `{"task": …}`.
    pub(super) fn result(&self, sent: bool) -> Carried<'_, '_> {
        if sent {
            Carried::Sent { task: self }
        } else {
            Carried::Task(self)
        }
    }
}

/// A committed task as a JSON-RPC result carries it.
#[derive(Serialize)]
#[serde(untagged)]
pub(super) enum Carried<'t, 'a> {
    /// Read back, or sent under 0.3 or the contract: the task itself.
    Task(&'t CommittedTask<'a>),
    /// 1.0's answer to a send: the task, in `task`.
    Sent { task: &'t CommittedTask<'a> },
}

/// `{"artifacts": [{"parts": [{"data", "type": "data"}]}], "id", "metadata", "status"}`.
#[derive(Serialize)]
pub(super) struct ContractTask<'a> {
    artifacts: [ContractArtifact<'a>; 1],
    id: &'a str,
    metadata: Value,
    status: Status,
}

#[derive(Serialize)]
struct ContractArtifact<'a> {
    parts: [ContractPart<'a>; 1],
}

/// The contract's part: the output, or in a withheld answer the text in its place
/// (`{"text", "type": "text"}`).
#[derive(Serialize)]
#[serde(untagged)]
enum ContractPart<'a> {
    Data {
        data: &'a RawValue,
        #[serde(rename = "type")]
        kind: &'static str,
    },
    Text {
        text: &'static str,
        #[serde(rename = "type")]
        kind: &'static str,
    },
}

/// `{"artifacts": [{"artifactId", "name", "parts": [{"data", "kind": "data"}]}], "contextId",
/// "id", "kind": "task", "metadata", "status"}`.
#[derive(Serialize)]
pub(super) struct Task03<'a> {
    artifacts: [Artifact<Part03<'a>>; 1],
    #[serde(rename = "contextId")]
    context_id: &'a str,
    id: &'a str,
    kind: &'static str,
    metadata: Value,
    status: Status,
}

/// 0.3's part: the output, or in a withheld answer the text in its place
/// (`{"kind": "text", "text"}`).
#[derive(Serialize)]
#[serde(untagged)]
enum Part03<'a> {
    Data {
        data: &'a RawValue,
        kind: &'static str,
    },
    Text {
        kind: &'static str,
        text: &'static str,
    },
}

/// `{"artifacts": [{"artifactId", "name", "parts": [{"data", "mediaType"}]}], "contextId",
/// "id", "metadata", "status"}`.
#[derive(Serialize)]
pub(super) struct Task10<'a> {
    artifacts: [Artifact<Part10<'a>>; 1],
    #[serde(rename = "contextId")]
    context_id: &'a str,
    id: &'a str,
    metadata: Value,
    status: Status,
}

/// 1.0's part: the output, or in a withheld answer the text in its place
/// (`{"mediaType": "text/plain", "text"}`).
#[derive(Serialize)]
#[serde(untagged)]
enum Part10<'a> {
    Data {
        data: &'a RawValue,
        #[serde(rename = "mediaType")]
        media_type: &'static str,
    },
    Text {
        #[serde(rename = "mediaType")]
        media_type: &'static str,
        text: &'static str,
    },
}

/// The one artifact of a 0.3 or 1.0 task, named `output`.
#[derive(Serialize)]
struct Artifact<P> {
    #[serde(rename = "artifactId")]
    artifact_id: &'static str,
    name: &'static str,
    parts: [P; 1],
}

impl<P> Artifact<P> {
    fn output(part: P) -> Self {
        Artifact {
            artifact_id: "output",
            name: "output",
            parts: [part],
        }
    }
}

#[derive(Serialize)]
struct Status {
    state: &'static str,
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
pub(super) fn rpc_result(id: &Value, result: impl Serialize) -> Response {
    let body = RpcResult {
        id,
        jsonrpc: "2.0",
        result,
    };
    (StatusCode::OK, Json(body)).into_response()
}

/// The body of [`rpc_result`]'s answer.
pub(super) fn rpc_result_json(id: &Value, result: impl Serialize) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(&RpcResult {
        id,
        jsonrpc: "2.0",
        result,
    })
}

/// `{"id", "jsonrpc": "2.0", "result"}`, in the order of their names.
#[derive(Serialize)]
struct RpcResult<'a, T> {
    id: &'a Value,
    jsonrpc: &'static str,
    result: T,
}

#[cfg(test)]
mod tests {
    use broker_core::coordinator::EffectSummary;
    use broker_core::object::Ref;
    use handler_api::EffectClass;

    use super::*;

    /// A committed output whose numbers serde_json writes in another form (`1e+21` as `1e21`)
    /// and whose names canonical JSON orders otherwise than UTF-8 (U+1F600 before U+FB01).
    const OUTPUT: &str = "{\"g\":1.4541676939305423e+237,\"h\":1e+21,\"m\":0.000001,\"ok\":true,\"\u{1F600}\":2,\"\u{FB01}\":1}";

    /// The metadata of [`committed`]'s task, as every shape writes it.
    const METADATA: &str = r#""metadata":{"effects":[{"budgetAfter":49,"effect":"Workspace.Read","id":"e1","record":"sha256:70ce871f8a3d3fb449bc3c3ace6547cef02dfc74ffe48d912532a724bfdbe5b9","status":"ok"}],"entry_index":3,"invocation_id":"a2a:ep-1:t-1","outcome":{"kind":"ok","retryable":true},"output_ref":"sha256:89668fcd145de2d9fe58c4181cdef9cc3d2f3707ad20c5c0507bbfec554021c9","replayed":false,"world_ref":"sha256:486ea46224d1bb4fb680f34f7c9ad96a8f24ec88be73ea8e5a6c65260e9cb8a7"}"#;

    fn committed() -> CallOutput {
        CallOutput {
            invocation_id: "a2a:ep-1:t-1".into(),
            output: OUTPUT.as_bytes().to_vec(),
            output_ref: Ref::of(OUTPUT.as_bytes()),
            entry_index: 3,
            world_ref: Ref::of(b"world"),
            replayed: false,
            effects: vec![EffectSummary {
                id: "e1".into(),
                effect: "Workspace.Read".into(),
                status: "ok".into(),
                record: Ref::of(b"record"),
                budget_after: 49,
                denial: None,
            }],
        }
    }

    async fn text(answer: Response) -> String {
        assert_eq!(answer.status(), StatusCode::OK);
        assert_eq!(answer.headers()["content-type"], "application/json");
        let bytes = axum::body::to_bytes(answer.into_body(), usize::MAX)
            .await
            .unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    /// A send's answer, each version's, byte for byte: members in name order (as a serde_json
    /// map writes them), the output as committed.
    #[tokio::test]
    async fn each_versions_committed_task_is_written_in_name_order_with_the_output_as_committed() {
        let out = committed();
        let outcome = outcome::of_output(&out, EffectClass::Read);
        let expected = [
            (
                Method::TasksSend,
                format!(
                    r#"{{"id":7,"jsonrpc":"2.0","result":{{"artifacts":[{{"parts":[{{"data":{OUTPUT},"type":"data"}}]}}],"id":"t-1",{METADATA},"status":{{"state":"completed"}}}}}}"#
                ),
            ),
            (
                Method::MessageSend,
                format!(
                    r#"{{"id":7,"jsonrpc":"2.0","result":{{"artifacts":[{{"artifactId":"output","name":"output","parts":[{{"data":{OUTPUT},"kind":"data"}}]}}],"contextId":"ep-1","id":"t-1","kind":"task",{METADATA},"status":{{"state":"completed"}}}}}}"#
                ),
            ),
            (
                Method::SendMessage,
                format!(
                    r#"{{"id":7,"jsonrpc":"2.0","result":{{"task":{{"artifacts":[{{"artifactId":"output","name":"output","parts":[{{"data":{OUTPUT},"mediaType":"application/json"}}]}}],"contextId":"ep-1","id":"t-1",{METADATA},"status":{{"state":"TASK_STATE_COMPLETED"}}}}}}}}"#
                ),
            ),
        ];
        for (method, body) in &expected {
            let answer = success(&json!(7), *method, "t-1", "ep-1", &out, &outcome);
            assert_eq!(&text(answer).await, body, "{method:?}");
        }
        // Read back (`tasks/get`, `GetTask`): the version's task as its send has it, unwrapped.
        let get_task = format!(
            r#"{{"id":"r","jsonrpc":"2.0","result":{{"artifacts":[{{"artifactId":"output","name":"output","parts":[{{"data":{OUTPUT},"mediaType":"application/json"}}]}}],"contextId":"ep-1","id":"t-1",{METADATA},"status":{{"state":"TASK_STATE_COMPLETED"}}}}}}"#
        );
        let tasks_get = expected[1].1.replacen(r#"{"id":7,"#, r#"{"id":"r","#, 1);
        for (shape, body) in [
            (Method::SendMessage, get_task),
            (Method::MessageSend, tasks_get),
        ] {
            let task = committed_task(shape, "t-1", "ep-1", &out, &outcome).unwrap();
            assert_eq!(text(rpc_result(&json!("r"), task)).await, body, "{shape:?}");
        }
    }

    /// The committed output was once spliced into the answer's text at a marker string, and a
    /// request id holding that string made the answer fall back to the output read into a
    /// value (`1e+21` written `1e21`, names in UTF-8 order): not the bytes `outputRef` names.
    /// Whatever the request id holds, the data is the committed bytes.
    #[tokio::test]
    async fn a_request_id_holding_any_string_leaves_the_committed_output_byte_for_byte() {
        let out = committed();
        let outcome = outcome::of_output(&out, EffectClass::Read);
        let ids = [
            json!("\u{0}world/committed-output\u{0}"),
            json!(OUTPUT),
            json!(format!("{OUTPUT}\"\\\u{0}")),
        ];
        for id in ids {
            for method in [Method::TasksSend, Method::MessageSend, Method::SendMessage] {
                let body = text(success(&id, method, "t-1", "ep-1", &out, &outcome)).await;
                assert!(
                    body.contains(&format!(r#""data":{OUTPUT}"#)),
                    "{method:?} {id}: {body}"
                );
                let v: Value = serde_json::from_str(&body).unwrap();
                assert_eq!(v["id"], id, "{body}");
            }
        }
    }
}
