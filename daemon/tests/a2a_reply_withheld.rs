//! An A2A answer carrying a committed task, through the real `worldd` binary and real HTTP,
//! when the reply budget has no room for it: the call already ran, so it is sent withheld (its
//! task with the output left out and a statement in its place), not replaced by a bare `503`.

mod common;

use common::*;
use serde_json::{json, Value};

/// What stands in a withheld task's output.
const WITHHELD_TASK: &str = "not sent: this task's output was too large to hold while the reply budget has no room for it ([server] reply_budget_bytes, a quarter of it per credential); the call was answered and committed: the task's status and metadata are as committed (metadata.outcome says how it ended); read its output by metadata.output_ref (GET /v1/objects/REF?payload=true), or read the task again later with tasks/get (GetTask); sending the same message again runs nothing twice (its task id is the idempotency key)";

/// What a credential whose share is full is told.
const SHARE_TEXT: &str = "too many answers to this credential are waiting unread (a quarter of [server] reply_budget_bytes); read them, then retry";

/// `POST /a2a/` of a JSON-RPC request of `method` with `params` (under `A2A-Version: 1.0` for
/// `SendMessage`).
fn a2a_request(d: &Daemon, token: &str, method: &str, params: Value) -> Answer {
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": method, "params": params});
    let headers: &[(&str, &str)] = match method {
        "SendMessage" => &[("A2A-Version", "1.0"), ("Content-Type", "application/json")],
        _ => &[("Content-Type", "application/json")],
    };
    let body = serde_json::to_vec(&body).unwrap();
    request("POST", &d.url("/a2a/"), Some(token), headers, Some(&body))
}

/// [`a2a_request`], whose answer must be an HTTP 200: its body.
fn a2a_post(d: &Daemon, token: &str, method: &str, params: Value) -> Value {
    let a = a2a_request(d, token, method, params);
    assert_eq!(a.status, 200, "{}", a.text());
    let v = a.json();
    assert_eq!(v["id"], 5, "{v}");
    v
}

/// `message/send` (0.3) of `ailang-read` of `path`, its task id `key`.
fn read_by_message(d: &Daemon, token: &str, key: &str, path: &str) -> Value {
    a2a_post(
        d,
        token,
        "message/send",
        json!({"message": {"role": "user", "messageId": key,
                           "parts": [{"kind": "data", "data": {"path": path}}],
                           "metadata": {"skillId": "ailang-read"}}}),
    )
}

/// The second after a withheld answer, when the credential's requests are refused before they
/// run while its share still has no room for one that size (the `Retry-After` it was told).
fn past_the_refusals_hold() {
    std::thread::sleep(std::time::Duration::from_millis(1100));
}

/// An A2A `message/send` (or `SendMessage`, `tasks/send`) whose answer, a task
/// with the call's output in its artifact, found no room in its credential's share (another
/// answer of its held unread) was replaced by a bare `503` after the call ran: its units spent,
/// its entry committed, and the agent told nothing of it. It is sent withheld now: the same
/// envelope and task (id, context, state, metadata with the output ref), its output part a text
/// part saying it ran and how to read it; the output is then read by its ref. A small answer in
/// the same conditions is sent whole, as ever. A read-back (`tasks/get`) or a resend of the
/// task id, which run nothing, still get the share's `503`.
#[test]
fn a2a_sends_that_find_no_room_in_the_reply_share_are_answered_withheld_and_read_backs_and_resends_get_the_503(
) {
    let d = small_share_daemon();
    let grants = [
        "Workspace.Read=worktree:100",
        "Workspace.Write=worktree:100",
    ];
    let token = d.session("ep1", &grants);
    std::fs::write(d.root().join("ep1/big.txt"), "x".repeat(150_000)).unwrap();
    std::fs::write(d.root().join("ep1/small.txt"), "s".repeat(100)).unwrap();
    // A 700 KB object of this credential's, read by a client that reads nothing of it.
    let args = json!({"path": "held.txt", "content": "z".repeat(700_000)});
    let v = a2a(&d, &token, "write-held", "ailang-write", args.clone());
    assert_eq!(v["result"]["status"]["state"], "completed", "{v}");
    let held = broker_core::object::Ref::of_json(&args).unwrap();
    let (holder, status) = unread_get(&d, &format!("/v1/objects/{held}?payload=true"), &token);
    assert_eq!(status, "HTTP/1.1 200");

    // 0.3's send: the task as committed, its output part the statement.
    let v = read_by_message(&d, &token, "read-1", "big.txt");
    let task = &v["result"];
    assert_eq!(task["kind"], "task", "{v}");
    assert_eq!(task["id"], "read-1", "{v}");
    assert_eq!(task["contextId"], "ep1", "{v}");
    assert_eq!(task["status"], json!({"state": "completed"}), "{v}");
    assert_eq!(
        task["artifacts"],
        json!([{"artifactId": "output", "name": "output",
                "parts": [{"kind": "text", "text": WITHHELD_TASK}]}]),
        "{v}"
    );
    let metadata = &task["metadata"];
    assert_eq!(metadata["invocation_id"], "a2a:ep1:read-1", "{v}");
    assert_eq!(metadata["outcome"]["kind"], "ok", "{v}");
    assert_eq!(metadata["replayed"], false, "{v}");
    assert!(metadata["entry_index"].is_u64(), "{v}");
    let output = metadata["output_ref"].as_str().unwrap().to_owned();

    // Read back, or sent again under its task id: nothing runs, so nothing is withheld (the
    // form is counted outside the share: free asks would fill the budget with it); the 503.
    past_the_refusals_hold();
    let read_back = a2a_request(&d, &token, "tasks/get", json!({"id": "read-1"}));
    assert_eq!(read_back.status, 503, "{}", read_back.text());
    assert_eq!(read_back.json()["error"]["message"], SHARE_TEXT);
    past_the_refusals_hold();
    let again = a2a_request(
        &d,
        &token,
        "message/send",
        json!({"message": {"role": "user", "messageId": "read-1",
                           "parts": [{"kind": "data", "data": {"path": "big.txt"}}],
                           "metadata": {"skillId": "ailang-read"}}}),
    );
    assert_eq!(again.status, 503, "{}", again.text());

    // 1.0's send: its task in `task`, its text part 1.0's.
    past_the_refusals_hold();
    let v = a2a_post(
        &d,
        &token,
        "SendMessage",
        json!({"message": {"role": "ROLE_USER", "messageId": "read-2",
                           "parts": [{"data": {"path": "big.txt"}}]},
               "metadata": {"skill_id": "ailang-read"}}),
    );
    let task = &v["result"]["task"];
    assert_eq!(task["id"], "read-2", "{v}");
    assert_eq!(
        task["status"],
        json!({"state": "TASK_STATE_COMPLETED"}),
        "{v}"
    );
    assert_eq!(
        task["artifacts"][0]["parts"],
        json!([{"mediaType": "text/plain", "text": WITHHELD_TASK}]),
        "{v}"
    );
    assert_eq!(task["metadata"]["invocation_id"], "a2a:ep1:read-2", "{v}");

    // The contract's tasks/send too.
    past_the_refusals_hold();
    let v = a2a(
        &d,
        &token,
        "read-3",
        "ailang-read",
        json!({"path": "big.txt"}),
    );
    assert_eq!(v["result"]["status"]["state"], "completed", "{v}");
    assert_eq!(
        v["result"]["artifacts"],
        json!([{"parts": [{"text": WITHHELD_TASK, "type": "text"}]}]),
        "{v}"
    );
    assert_eq!(
        v["result"]["metadata"]["invocation_id"], "a2a:ep1:read-3",
        "{v}"
    );

    // A small answer in the same conditions is sent whole (the budget never counts it).
    past_the_refusals_hold();
    let v = read_by_message(&d, &token, "read-small", "small.txt");
    let part = &v["result"]["artifacts"][0]["parts"][0];
    assert_eq!(part["kind"], "data", "{v}");
    assert!(part["data"].is_object(), "{v}");

    // Once the held answer is gone, the output is read by its ref.
    let object = object_once_the_held_answer_is_gone(&d, &token, &output, holder);
    assert!(object["payload"].as_str().unwrap().len() > 150_000);
    // And the task read back whole.
    let v = a2a_post(&d, &token, "tasks/get", json!({"id": "read-1"}));
    assert_eq!(
        v["result"]["artifacts"][0]["parts"][0]["kind"], "data",
        "{v}"
    );
}
