//! A2A sends at the edges of what the card and the documentation promise, through the real
//! binary: a send asking for push notifications (which the card declines) is refused before
//! anything runs; a `null` metadata is no metadata; an integer past what the strict parser
//! takes outside `params` is an invalid request answered with id null, never invalid params
//! (nor to an id the client did not send); and an MCP name sent as a skill id is answered with
//! that tool's id.

mod common;

use common::fixtures::{misfit_daemon, misfit_mode_tool};
use common::*;
use serde_json::{json, Value};

const WS: &[&str] = &["worldd_workspace"];
const ERROR_INFO: &str = "type.googleapis.com/google.rpc.ErrorInfo";

/// A daemon with the workspace plugin and a session that may read `hello.txt`.
fn workspace() -> (Daemon, String) {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep", &["Workspace.Read=worktree:50"]);
    std::fs::write(d.root().join("ep").join("hello.txt"), "hi there").unwrap();
    (d, token)
}

fn v03_send(message_id: &str, params_extra: Value) -> Value {
    let mut params = json!({
        "message": {"kind": "message", "messageId": message_id, "role": "user",
                    "parts": [{"kind": "data", "data": {"path": "hello.txt"}}]},
        "metadata": {"skill_id": "ailang-read"}});
    for (k, v) in params_extra.as_object().unwrap() {
        params[k] = v.clone();
    }
    json!({"jsonrpc": "2.0", "id": "r1", "method": "message/send", "params": params})
}

fn v10_send(message_id: &str, params_extra: Value) -> Value {
    let mut params = json!({
        "message": {"messageId": message_id, "role": "ROLE_USER",
                    "parts": [{"data": {"path": "hello.txt"}}]},
        "metadata": {"skillId": "ailang-read"}});
    for (k, v) in params_extra.as_object().unwrap() {
        params[k] = v.clone();
    }
    json!({"jsonrpc": "2.0", "id": "r2", "method": "SendMessage", "params": params})
}

/// Whether a task of this id was committed: `tasks/get` finds it, or says `-32001`.
fn task_exists(d: &Daemon, token: &str, task: &str) -> bool {
    let v = a2a_answer(
        d,
        Some(token),
        None,
        &json!({"jsonrpc": "2.0", "id": 9, "method": "tasks/get", "params": {"id": task}}),
    );
    match v["error"]["code"].as_i64() {
        Some(-32001) => false,
        None => true,
        _ => panic!("{v}"),
    }
}

#[test]
fn a_send_asking_for_push_notifications_is_refused_32003_before_anything_runs() {
    let (d, token) = workspace();
    let push_why = |member: &str| {
        format!("push notifications are not supported (the agent card's capabilities.pushNotifications is false), so params.configuration.{member} cannot be honoured; nothing ran: send the message without it, and read the task back by its id")
    };
    let refused = |id: &str, member: &str| {
        json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32003,
            "message": "Push Notification is not supported",
            "data": [{"@type": ERROR_INFO, "reason": "PUSH_NOTIFICATION_NOT_SUPPORTED",
                      "domain": "a2a-protocol.org",
                      "metadata": {"member": member, "why": push_why(member)}}]}})
    };
    let hook = json!({"url": "http://127.0.0.1:1/hook"});

    // 0.3's member, under 0.3.
    let v = a2a_answer(
        &d,
        Some(&token),
        None,
        &v03_send(
            "push-1",
            json!({"configuration": {"blocking": false, "pushNotificationConfig": hook}}),
        ),
    );
    assert_eq!(v, refused("r1", "pushNotificationConfig"));
    assert!(!task_exists(&d, &token, "push-1"));

    // 1.0's member, under 1.0.
    let v = a2a_answer(
        &d,
        Some(&token),
        Some("1.0"),
        &v10_send(
            "push-2",
            json!({"configuration": {"taskPushNotificationConfig": hook}}),
        ),
    );
    assert_eq!(v, refused("r2", "taskPushNotificationConfig"));
    assert!(!task_exists(&d, &token, "push-2"));

    // An ill-typed config is invalid params, as its ill-typed siblings are; nothing runs.
    for (member, send, version, id) in [
        (
            "pushNotificationConfig",
            v03_send as fn(&str, Value) -> Value,
            None,
            "r1",
        ),
        ("taskPushNotificationConfig", v10_send, Some("1.0"), "r2"),
    ] {
        let v = a2a_answer(
            &d,
            Some(&token),
            version,
            &send("push-3", json!({"configuration": {member: 5}})),
        );
        assert_eq!(v["id"], id, "{v}");
        assert_eq!(v["error"]["code"], -32602, "{v}");
        assert_eq!(v["error"]["message"], "invalid params", "{v}");
        let why =
            format!("params.configuration.{member} must be an object (a push notification config)");
        match version {
            None => assert_eq!(v["error"]["data"], json!({"why": why}), "{v}"),
            Some(_) => assert_eq!(v["error"]["data"][0]["metadata"]["why"], why, "{v}"),
        }
        assert!(!task_exists(&d, &token, "push-3"));
    }

    // A null config is no config: the send runs.
    let v = a2a_answer(
        &d,
        Some(&token),
        None,
        &v03_send(
            "push-4",
            json!({"configuration": {"pushNotificationConfig": null}}),
        ),
    );
    assert_eq!(v["result"]["status"]["state"], "completed", "{v}");
}

#[test]
fn a_null_metadata_of_the_request_or_the_message_is_read_as_absent() {
    let (d, token) = workspace();
    // 0.3: the request's metadata null, the skill in the message's.
    let mut body = v03_send("nm-1", json!({"metadata": null}));
    body["params"]["message"]["metadata"] = json!({"skill_id": "ailang-read"});
    let v = a2a_answer(&d, Some(&token), None, &body);
    assert_eq!(v["result"]["status"]["state"], "completed", "{v}");
    assert_eq!(v["result"]["id"], "nm-1", "{v}");
    // 0.3: the message's metadata null, the skill in the request's.
    let mut body = v03_send("nm-2", json!({}));
    body["params"]["message"]["metadata"] = Value::Null;
    let v = a2a_answer(&d, Some(&token), None, &body);
    assert_eq!(v["result"]["status"]["state"], "completed", "{v}");
    // 1.0: both ways.
    let mut body = v10_send("nm-3", json!({"metadata": null}));
    body["params"]["message"]["metadata"] = json!({"skillId": "ailang-read"});
    let v = a2a_answer(&d, Some(&token), Some("1.0"), &body);
    assert_eq!(
        v["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{v}"
    );
    let mut body = v10_send("nm-4", json!({}));
    body["params"]["message"]["metadata"] = Value::Null;
    let v = a2a_answer(&d, Some(&token), Some("1.0"), &body);
    assert_eq!(
        v["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{v}"
    );
    // Metadata that is no object is still refused.
    let v = a2a_answer(
        &d,
        Some(&token),
        None,
        &v03_send("nm-5", json!({"metadata": 5})),
    );
    assert_eq!(v["error"]["code"], -32602, "{v}");
}

#[test]
fn an_integer_past_the_canonical_range_outside_params_is_an_invalid_request_with_id_null() {
    let (d, token) = workspace();
    let invalid = |text: &str| {
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600,
               "message": format!("invalid JSON-RPC request: number {text} is outside the exact integer range of canonical JSON (±2^53−1)")}})
    };
    for (body, literal) in [
        // An id the strict parser refuses, beside valid params: never echoed as a double.
        (
            r#"{"jsonrpc":"2.0","id":12345678901234567890123,"method":"tasks/get","params":{"id":"m-1"}}"#,
            "12345678901234567890123",
        ),
        (
            r#"{"jsonrpc":"2.0","id":18446744073709551616,"method":"tasks/get","params":{"id":"m-1"}}"#,
            "18446744073709551616",
        ),
        // Another member of the envelope, beside valid params.
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"m-1"},"x":12345678901234567890123}"#,
            "12345678901234567890123",
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"m-1"},"x":9007199254740993}"#,
            "9007199254740993",
        ),
        // A notification: its envelope is no request's either.
        (
            r#"{"jsonrpc":"2.0","method":"tasks/get","params":{"id":"m-1"},"x":12345678901234567890123}"#,
            "12345678901234567890123",
        ),
        // The same number in params too: the one outside decides.
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","x":9007199254740993,"params":{"id":"m-1","n":9007199254740993}}"#,
            "9007199254740993",
        ),
    ] {
        let answer = post_a2a(&d, Some(&token), None, body);
        let (status, text) = (answer.status, answer.text());
        assert_eq!(status, 200, "{body}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v, invalid(literal), "{body}");
    }
    // Inside params alone it stays invalid params, to the id sent.
    let answer = post_a2a(
        &d,
        Some(&token),
        None,
        r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"m-1","n":12345678901234567890123}}"#,
    );
    let (status, text) = (answer.status, answer.text());
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        v,
        json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "invalid params",
               "data": {"why": "params: number 12345678901234567890123 is outside the exact integer range of canonical JSON (±2^53−1)"}}})
    );
}

#[test]
fn an_mcp_name_sent_as_a_skill_id_is_answered_with_that_tools_id_before_any_near_name() {
    let tools: Vec<Value> = ["x.y", "x_y", "x/y"]
        .into_iter()
        .map(misfit_mode_tool)
        .collect();
    let d = misfit_daemon(&json!({ "transitions": tools }));
    let token = d.session("ep", &["Misfit.Do=any:50"]);
    for (sent, meant) in [("x_dy", "x.y"), ("x_uy", "x_y"), ("x_sy", "x/y")] {
        let mut body = v03_send(&format!("h-{sent}"), json!({}));
        body["params"]["metadata"] = json!({"skill_id": sent});
        body["params"]["message"]["parts"][0]["data"] = json!({"mode": "plain"});
        let v = a2a_answer(&d, Some(&token), None, &body);
        assert_eq!(
            v["error"],
            json!({"code": -32602, "message": "not authorized", "data": {"why": format!(
                "no skill of this session is named \"{sent}\"; did you mean {meant}? (the agent card lists this session's skills)"
            )}}),
            "{v}"
        );
    }
}
