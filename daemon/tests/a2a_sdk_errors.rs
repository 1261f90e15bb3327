//! A2A errors as a client reads them, through the real binary: the JSON-RPC envelope judged
//! before params, whatever they hold; under A2A 1.0 every error with `data` carries it in a
//! `google.rpc.ErrorInfo` (the only `data` the a2a-sdk 1.x keeps), the credential errors
//! included, so that `-32001` for a dead credential is not taken for `Task not found`; under
//! 0.3 `data` stays the plain object. The last test drives the official a2a-sdk 1.x
//! (`tests/python/a2a_errors.py`, installed as `python_clients.rs` installs it).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const WS: &[&str] = &["worldd_workspace"];
const WS_STALL: &[&str] = &["worldd_workspace", "worldd_stall"];
const ERROR_INFO: &str = "type.googleapis.com/google.rpc.ErrorInfo";

/// A JSON-RPC error `data` as A2A 1.0 lays it out: one `ErrorInfo`.
fn error_info(reason: &str, metadata: Value) -> Value {
    json!([{"@type": ERROR_INFO, "reason": reason, "domain": "a2a-protocol.org", "metadata": metadata}])
}

fn v10_send(message_id: &str, skill: &str, args: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": "r2", "method": "SendMessage", "params": {
        "message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"data": args}]},
        "metadata": {"skill_id": skill}}})
}

fn v03_send(message_id: &str, skill: &str, args: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": "r1", "method": "message/send", "params": {
        "message": {"kind": "message", "messageId": message_id, "role": "user",
                    "parts": [{"kind": "data", "data": args}]},
        "metadata": {"skill_id": skill}}})
}

#[test]
fn an_integer_beyond_2_53_inside_a2a_params_does_not_skip_the_json_rpc_envelope_checks() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("wide", &["Workspace.Write=worktree:5"]);
    let wide = r#"{"path":"w.txt","content":"x","n":9007199254740993}"#;
    let send = |envelope: &str| {
        format!(
            r#"{{"jsonrpc":"2.0",{envelope}"params":{{"id":"w-1","metadata":{{"skill_id":"ailang-write"}},"message":{{"role":"user","parts":[{{"type":"data","data":{wide}}}]}}}}}}"#
        )
    };
    // A notification is not answered, and nothing runs.
    let answer = post_a2a(&d, Some(&token), None, &send(r#""method":"tasks/send","#));
    let (status, text) = (answer.status, answer.text());
    assert_eq!((status, text.as_str()), (202, ""));
    let invalid = |why: &str| {
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600,
               "message": format!("invalid JSON-RPC request: {why}")}})
    };
    for (envelope, want) in [
        (
            r#""id":{"a":[1,2]},"method":"tasks/send","#,
            invalid("\"id\" must be a string, a number or null"),
        ),
        (r#""id":true,"#, invalid("a request needs \"method\"")),
        (
            r#""id":1,"method":7,"#,
            invalid("\"method\" must be a string"),
        ),
        (
            r#""id":1,"method":"tasks/send","result":{},"#,
            invalid("a message is a request (\"method\") or a response (\"result\", \"error\"), not both"),
        ),
        (
            r#""id":1,"method":"tasks/nope","#,
            json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32601, "message": "method not found"}}),
        ),
        // Sound otherwise, the number in params is invalid params, answered to the id.
        (
            r#""id":"w","method":"tasks/send","#,
            json!({"jsonrpc": "2.0", "id": "w", "error": {"code": -32602, "message": "invalid params",
                   "data": {"why": "params: number 9007199254740993 is outside the exact integer range of canonical JSON (±2^53−1)"}}}),
        ),
    ] {
        let answer = post_a2a(&d, Some(&token), None, &send(envelope));
        let (status, text) = (answer.status, answer.text());
        assert_eq!(status, 200, "{envelope}: {text}");
        let got: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(got, want, "{envelope}");
    }
    // The version rule comes before params too: SendMessage without A2A-Version: 1.0.
    let answer = post_a2a(
        &d,
        Some(&token),
        None,
        &send(r#""id":5,"method":"SendMessage","#),
    );
    let text = answer.text();
    let got: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(got["error"]["code"], -32009, "{text}");
    assert_eq!(
        got["error"]["message"],
        "A2A version \"0.3\" is not supported by SendMessage; send A2A-Version: 1.0 (or use message/send for 0.3)"
    );
    assert!(!d.root().join("wide/w.txt").exists(), "a refused call ran");
}

#[test]
fn a2a_1_0_errors_with_data_carry_it_in_an_error_info_and_0_3_keeps_the_plain_object() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("info", &["Workspace.Read=worktree:10"]);
    let near = "no skill of this session is named \"ailang-reed\"; did you mean ailang-read? (the agent card lists this session's skills)";
    // Not authorized, with the nearest skill in `why`.
    let v = a2a_answer(
        &d,
        Some(&token),
        Some("1.0"),
        &v10_send("n-1", "ailang-reed", json!({"path": "a"})),
    );
    assert_eq!(
        v,
        json!({"jsonrpc": "2.0", "id": "r2", "error": {"code": -32602, "message": "not authorized",
               "data": error_info("INVALID_PARAMS", json!({"why": near}))}})
    );
    let v = a2a_answer(
        &d,
        Some(&token),
        None,
        &v03_send("n-1", "ailang-reed", json!({"path": "a"})),
    );
    assert_eq!(
        v["error"],
        json!({"code": -32602, "message": "not authorized", "data": {"why": near}})
    );
    // Params of the wrong shape: a send's and a read's.
    let mut body = v10_send("n-2", "ailang-read", json!({"path": "a"}));
    body["params"]["message"]["role"] = json!("ROLE_AGENT");
    let v = a2a_answer(&d, Some(&token), Some("1.0"), &body);
    assert_eq!(
        v["error"],
        json!({"code": -32602, "message": "invalid params", "data": error_info("INVALID_PARAMS",
               json!({"why": "params.message.role must be \"ROLE_USER\" (A2A 1.0: a message sent to an agent is the user's); it is \"ROLE_AGENT\""}))})
    );
    let get = |method: &str| json!({"jsonrpc": "2.0", "id": 4, "method": method, "params": {"id": "n-3", "historyLength": -1}});
    let v = a2a_answer(&d, Some(&token), Some("1.0"), &get("GetTask"));
    assert_eq!(
        v["error"],
        json!({"code": -32602, "message": "invalid params", "data": error_info("INVALID_PARAMS",
               json!({"why": "params.historyLength must be a count (0 or more)"}))})
    );
    let v = a2a_answer(&d, Some(&token), None, &get("tasks/get"));
    assert_eq!(
        v["error"],
        json!({"code": -32602, "message": "invalid params",
               "data": {"why": "params.historyLength must be a count (0 or more)"}})
    );
    // A task id used with other arguments: the classification and the task id, as strings.
    let ok = a2a_answer(
        &d,
        Some(&token),
        Some("1.0"),
        &v10_send("k-1", "ailang-read", json!({"path": "a"})),
    );
    assert_eq!(ok["result"]["task"]["id"], "k-1", "{ok}");
    let v = a2a_answer(
        &d,
        Some(&token),
        Some("1.0"),
        &v10_send("k-1", "ailang-read", json!({"path": "b"})),
    );
    assert_eq!(
        v["error"],
        json!({"code": -32602, "message": "task id already used in this session",
               "data": error_info("INVALID_PARAMS", json!({"kind": "refused", "reason": "key-conflict",
                                                          "retryable": "false", "taskId": "k-1"}))})
    );
    let v = a2a_answer(
        &d,
        Some(&token),
        None,
        &v03_send("k-1", "ailang-read", json!({"path": "b"})),
    );
    assert_eq!(
        v["error"],
        json!({"code": -32602, "message": "task id already used in this session",
               "data": {"kind": "refused", "reason": "key-conflict", "retryable": false, "taskId": "k-1"}})
    );
    // R8: the episode has no worktree: -32603 with the classification.
    let homeless = d.session_without_worktree("nowhere", &["Workspace.Read=worktree:5"]);
    let v = a2a_answer(
        &d,
        Some(&homeless),
        Some("1.0"),
        &v10_send("r-1", "ailang-read", json!({"path": "a"})),
    );
    assert_eq!(
        v["error"],
        json!({"code": -32603, "message": "transition declares an effect this daemon has no handler for: episode nowhere's worktree does not exist: an operator creates it (the directory nowhere in the workspace root; worldd session new makes a worktree and a credential together, for an episode that has neither)",
               "data": error_info("INTERNAL_ERROR", json!({"kind": "refused", "reason": "unavailable",
                                                          "retryable": "false", "taskId": "r-1"}))}),
        "{v}"
    );
}

#[test]
fn a2a_1_0_credential_errors_say_in_an_error_info_that_the_credential_is_refused_not_a_task() {
    let d = Daemon::start(WS, &[]);
    let expired = d.expired_session("ep1");
    let unknown = "ef".repeat(32);
    let body = v10_send("c-1", "ailang-read", json!({"path": "a"}));
    for (token, code, message, reason, credential, why) in [
        (
            None,
            -32001,
            "session credential is absent: send Authorization: Bearer <session-credential>",
            "UNAUTHENTICATED",
            "absent",
            "the request carried no credential: this is no task error, no task was looked up and nothing ran; send Authorization: Bearer <session-credential>",
        ),
        (
            Some("not-a-token"),
            -32600,
            "malformed Authorization header: expected Bearer <64-hex-credential>",
            "UNAUTHENTICATED",
            "malformed",
            "the Authorization header is not Bearer and 64 hex digits, once: this is no task error, no task was looked up and nothing ran",
        ),
        (
            Some(unknown.as_str()),
            -32001,
            "unknown session credential",
            "UNAUTHENTICATED",
            "unknown",
            "the credential is not one of this daemon's sessions (never minted, or revoked): this is no task error, no task was looked up and nothing ran; ask the operator for a new credential",
        ),
        (
            Some(expired.as_str()),
            -32001,
            "session credential has expired",
            "SESSION_EXPIRED",
            "expired",
            "the session's credential has expired: this is no task error, no task was looked up and nothing ran; ask the operator for a new credential, and send the task again with it",
        ),
    ] {
        let v = a2a_answer(&d, token, Some("1.0"), &body);
        assert_eq!(
            v,
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message,
                   "data": error_info(reason, json!({"credential": credential, "why": why}))}}),
            "{credential}"
        );
        // 0.3 (no A2A-Version) is answered as before: no data.
        let v = a2a_answer(&d, token, None, &v03_send("c-1", "ailang-read", json!({"path": "a"})));
        assert_eq!(
            v,
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}}),
            "{credential}"
        );
    }
}

/// A 1.0 send queued behind its episode's running call, its credential revoked meanwhile:
/// `-32001` with an `ErrorInfo` saying the credential was revoked (reason `SESSION_REVOKED`).
#[test]
fn a2a_1_0_a_send_whose_credential_was_revoked_while_it_waited_says_so_in_an_error_info() {
    let d = Daemon::start(WS_STALL, &[]);
    let holder = d.session("revoked", &["Stall.Wait=any:5"]);
    let queued = d.session("revoked", &["Workspace.Write=worktree:5"]);
    let in_background = |token: &str, body: Value| {
        let (url, token) = (d.url("/a2a/"), token.to_owned());
        std::thread::spawn(move || {
            let a = request(
                "POST",
                &url,
                Some(&token),
                &[("Content-Type", "application/json"), ("A2A-Version", "1.0")],
                Some(&serde_json::to_vec(&body).unwrap()),
            );
            a.json()
        })
    };
    let slow = in_background(
        &holder,
        v10_send("hold-1", "stall-wait", json!({"ms": "2500"})),
    );
    std::thread::sleep(Duration::from_millis(300));
    let write = in_background(
        &queued,
        v10_send(
            "late-1",
            "ailang-write",
            json!({"path": "late.txt", "content": "x"}),
        ),
    );
    std::thread::sleep(Duration::from_millis(300));
    d.revoke_by_cli(&queued);
    let v = write.join().unwrap();
    assert_eq!(
        v,
        json!({"jsonrpc": "2.0", "id": "r2", "error": {"code": -32001,
               "message": "session credential was revoked while this call waited: nothing ran and nothing was journaled (its task id is unused); send it again with a valid credential",
               "data": error_info("SESSION_REVOKED", json!({"credential": "revoked", "taskId": "late-1",
                   "why": "the session's credential was revoked while this call waited: this is no task error; nothing ran and nothing was journaled, so the task id is unused; ask the operator for a new credential, and send the task again with it"}))}})
    );
    let v = slow.join().unwrap();
    assert_eq!(
        v["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{v}"
    );
    assert!(!d.root().join("revoked/late.txt").exists());
}

/// The official a2a-sdk 1.x raises each error with the `ErrorInfo`'s metadata as its `data`:
/// the nearest skill's name, the classification and the task id, and for a dead credential
/// what tells it from `Task not found`.
#[test]
fn the_a2a_sdk_reads_the_data_of_1_0_errors_and_tells_a_dead_credential_from_a_missing_task() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("sdk", &["Workspace.Read=worktree:10"]);
    let expired = d.expired_session("sdk");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/python/a2a_errors.py");
    let out = Command::new(clients::python())
        .arg(&script)
        .arg(d.url(""))
        .arg(&token)
        .arg(&expired)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let v: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(
        v,
        json!({
            "ok": true,
            "misspelt": ["InvalidParamsError", "not authorized",
                {"why": "no skill of this session is named \"ailang-reed\"; did you mean ailang-read? (the agent card lists this session's skills)"}],
            "conflict": ["InvalidParamsError", "task id already used in this session",
                {"kind": "refused", "reason": "key-conflict", "retryable": "false", "taskId": "sdk-1"}],
            "missingTask": ["TaskNotFoundError", "Task not found",
                {"taskId": "never-sent", "why": "no task with this id was sent in this session's episode"}],
            "expired": ["TaskNotFoundError", "session credential has expired",
                {"credential": "expired", "why": "the session's credential has expired: this is no task error, no task was looked up and nothing ran; ask the operator for a new credential, and send the task again with it"}],
        })
    );
}

/// `tasks/send` answers `completed` whatever the outcome; the task read back with `tasks/get`
/// (0.3) or `GetTask` (1.0) takes the state of its outcome, as the message methods answer it:
/// a task id names the call, not the method that sent it.
#[test]
fn a_task_sent_with_tasks_send_reads_back_in_the_state_of_its_outcome() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ref", &["Workspace.Read=worktree:5"]);
    let sent = a2a(&d, &token, "ref-1", "ailang-read", json!({"path": 5}));
    assert_eq!(
        sent["result"]["status"],
        json!({"state": "completed"}),
        "{sent}"
    );
    assert_eq!(
        sent["result"]["metadata"]["outcome"],
        json!({"kind": "refused", "reason": "plan", "retryable": false})
    );
    let get = |method: &str| json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": {"id": "ref-1"}});
    let v = a2a_answer(&d, Some(&token), None, &get("tasks/get"));
    assert_eq!(v["result"]["status"], json!({"state": "rejected"}), "{v}");
    let v = a2a_answer(&d, Some(&token), Some("1.0"), &get("GetTask"));
    assert_eq!(
        v["result"]["status"],
        json!({"state": "TASK_STATE_REJECTED"}),
        "{v}"
    );
}

/// A notification whose `params` held a wide integer was acknowledged `202`, the same one
/// holding `1e400` answered `-32600`: the number was refused before the envelope was looked
/// at. Both are notifications: `202`, nothing run; a request holding `1e400` is still refused.
#[test]
fn an_a2a_notification_holding_a_number_too_large_for_a_double_is_acknowledged_202() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("huge", &["Workspace.Write=worktree:5"]);
    let send = |envelope: &str, number: &str| {
        format!(
            r#"{{"jsonrpc":"2.0",{envelope}"method":"tasks/send","params":{{"id":"h-1","metadata":{{"skill_id":"ailang-write"}},"message":{{"role":"user","parts":[{{"type":"data","data":{{"path":"h.txt","content":"x","n":{number}}}}}]}}}}}}"#
        )
    };
    for number in ["1e400", "-1E999", "9007199254740993"] {
        let answer = post_a2a(&d, Some(&token), None, &send("", number));
        let (status, text) = (answer.status, answer.text());
        assert_eq!((status, text.as_str()), (202, ""), "{number}");
    }
    // Outside params, or in a request: refused as before.
    let answer = post_a2a(
        &d,
        Some(&token),
        None,
        r#"{"jsonrpc":"2.0","method":"tasks/get","n":1e400,"params":{"id":"x"}}"#,
    );
    let (status, text) = (answer.status, answer.text());
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600,
            "message": "invalid JSON-RPC request: number 1e400 is too large for a 64-bit float"}})
    );
    let answer = post_a2a(&d, Some(&token), None, &send(r#""id":"h","#, "1e400"));
    let (status, text) = (answer.status, answer.text());
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["error"]["code"],
        json!(-32600),
        "{text}"
    );
    assert!(!d.root().join("huge/h.txt").exists(), "a notification ran");
}

/// MCP `tools/list` marked a tool this daemon cannot run; the agent card, which an A2A agent
/// reads to pick a skill, did not, and the agent learned it from the refusal. A skill that
/// cannot run here ends its description with the same paragraph and carries the tag
/// `cannot-run`; the others are as they were.
#[test]
fn the_agent_card_marks_each_skill_this_daemon_cannot_run_as_tools_list_does() {
    let d = Daemon::start(&["worldd_workspace", "worldd_ailang"], &[]);
    let token = d.session(
        "ep1",
        &["Workspace.Read=worktree:5", "Ailang.Check=worktree:5"],
    );
    let registered = |name: &str| -> String {
        let doc: Value = serde_json::from_slice(
            &std::fs::read(repo_root().join(format!("transitions/se-tools/{name}.json"))).unwrap(),
        )
        .unwrap();
        doc["description"].as_str().unwrap().to_owned()
    };
    let card = request(
        "GET",
        &d.url("/.well-known/agent-card.json"),
        Some(&token),
        &[],
        None,
    )
    .json();
    let listed = sse_json_of(&mcp(&d, &token, "tools/list", json!({})));
    let skill = |id: &str| {
        card["skills"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .unwrap()
            .clone()
    };
    let check = skill("ailang-check");
    assert_eq!(
        check["description"],
        json!(format!(
            "{}\n\nCannot run here: transition declares an effect this daemon has no handler for (Ailang.Check). A call is refused before anything runs (host callback failed; nothing ran, nothing was spent): use another tool.",
            registered("ailang-check")
        ))
    );
    assert_eq!(check["tags"], json!(["unknown", "cannot-run"]));
    // The same words as tools/list gives the tool.
    let tool = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "ailang-check")
        .unwrap()
        .clone();
    assert_eq!(check["description"], tool["description"]);
    let read = skill("ailang-read");
    assert_eq!(read["description"], json!(registered("ailang-read")));
    assert_eq!(read["tags"], json!(["read"]));
}

fn sse_json_of(a: &Answer) -> Value {
    assert_eq!(a.status, 200, "{}", a.text());
    a.sse_json()
}
