//! A hostile client's A2A task reads: `tasks/get` with a `historyLength` past 2^53 was answered
//! a bare `-32602 invalid params` (while `-1` got a reason), and an `id` of 900 KB was echoed
//! whole in `Task not found` (while `tasks/send` caps ids at 128 characters). Now the number
//! is named in `data.why`, as any invalid params are, and an id longer than any task id is
//! refused as invalid params without being echoed, on every method that names a task.

mod common;

use common::*;
use serde_json::{json, Value};

const WS: &[&str] = &["worldd_workspace"];
const TASK_ID: &str = "1-128 characters of A-Z a-z 0-9 . _ -";

/// The answer (HTTP 200) to `body` under `version`, and its size.
fn a2a_raw(d: &Daemon, token: &str, version: Option<&str>, body: &str) -> (Value, usize) {
    let a = post_a2a(d, Some(token), version, body);
    assert_eq!(a.status, 200, "{}", a.text());
    (a.json(), a.body.len())
}

fn error_info(reason: &str, metadata: Value) -> Value {
    json!([{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason,
            "domain": "a2a-protocol.org", "metadata": metadata}])
}

#[test]
fn a_history_length_past_2_53_is_invalid_params_that_say_which_number() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("reads", &["Workspace.Read=worktree:5"]);
    let why = "params: number 99999999999999999 is outside the exact integer range of canonical JSON (±2^53−1)";
    let answer = |version, body| a2a_raw(&d, &token, version, body).0;
    assert_eq!(
        answer(
            None,
            r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"t1","historyLength":99999999999999999}}"#
        ),
        json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "invalid params",
               "data": {"why": why}}})
    );
    assert_eq!(
        answer(
            Some("1.0"),
            r#"{"jsonrpc":"2.0","id":2,"method":"GetTask","params":{"id":"t1","historyLength":99999999999999999}}"#
        ),
        json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32602, "message": "invalid params",
               "data": error_info("INVALID_PARAMS", json!({"why": why}))}})
    );
    // As -1 was.
    assert_eq!(
        answer(
            None,
            r#"{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{"id":"t1","historyLength":-1}}"#
        )["error"],
        json!({"code": -32602, "message": "invalid params",
               "data": {"why": "params.historyLength must be a count (0 or more)"}})
    );
}

#[test]
fn a_task_id_longer_than_any_is_refused_not_echoed() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("reads", &["Workspace.Read=worktree:5"]);
    let huge = "x".repeat(900_000);
    let read = |method: &str, id: &str| {
        json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"id": id}}).to_string()
    };
    let why = format!("params.id is longer than any task id: a task id is {TASK_ID}");
    for method in ["tasks/get", "tasks/cancel"] {
        for id in [huge.as_str(), &"x".repeat(129)] {
            let (v, size) = a2a_raw(&d, &token, None, &read(method, id));
            assert!(size < 1024, "{method}: an answer of {size} bytes");
            assert_eq!(
                v["error"],
                json!({"code": -32602, "message": "invalid params", "data": {"why": why}}),
                "{method} of {} characters",
                id.len()
            );
        }
        // 128 characters may name a task: this one names none.
        let id = "x".repeat(128);
        let (v, _) = a2a_raw(&d, &token, None, &read(method, &id));
        assert_eq!(v["error"]["code"], -32001, "{method}: {v}");
        assert_eq!(
            v["error"]["data"][0]["metadata"]["taskId"], id,
            "{method}: {v}"
        );
    }
    for method in ["GetTask", "CancelTask"] {
        let (v, size) = a2a_raw(&d, &token, Some("1.0"), &read(method, &huge));
        assert!(size < 1024, "{method}: an answer of {size} bytes");
        assert_eq!(
            v["error"],
            json!({"code": -32602, "message": "invalid params",
                   "data": error_info("INVALID_PARAMS", json!({"why": why}))}),
            "{method}"
        );
    }
    // A 1.0 message naming a task to continue: not echoed either.
    let send = json!({"jsonrpc": "2.0", "id": "r2", "method": "SendMessage", "params": {
        "message": {"messageId": "m-1", "taskId": huge, "role": "ROLE_USER",
                    "parts": [{"data": {"path": "a.txt"}}],
                    "metadata": {"skillId": "ailang-read"}},
        "configuration": {}}});
    let (v, size) = a2a_raw(&d, &token, Some("1.0"), &send.to_string());
    assert!(size < 1024, "SendMessage: an answer of {size} bytes");
    assert_eq!(
        v["error"],
        json!({"code": -32602, "message": "invalid params",
               "data": error_info("INVALID_PARAMS", json!({"why": format!(
                   "params.message.taskId is longer than any task id: a task id is {TASK_ID}")}))}),
    );
}
