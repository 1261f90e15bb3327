//! What `docs/agents.md` tells an agent about slow, failed and lost calls, checked against the
//! real daemon (with the ailang plugin and its test STAND-IN, `tests/ailang-standin/ailang`) and
//! then against the page's own words:
//!
//! - an ailang run that overruns its time limit is committed `failed`, with no reason in the
//!   answer or the effect record; the page promised `host callback timed out`, not committed;
//! - an unkeyed MCP call still running is absent from the log but listed `inFlight` by
//!   `/v1/budget`, and an invocation record's `input` is a ref; the page said "not in the log"
//!   was the sign to resend, and that `input` was the arguments;
//! - an A2A task id resent while its first send runs is refused as `task id already used`,
//!   which the page counted among the "invalid params: nothing ran" errors;
//! - under A2A 0.3, `Task not found`, `-32002` and `-32005` carry a list of one `ErrorInfo`,
//!   where the page said 0.3 `data` was a plain object;
//! - the ailang tools are served and tagged `unknown`, where the page said `unknown` meant
//!   that no loaded plugin serves the effect.
//!
//! The ailang plugin library must be built: `cargo build -p worldd-handler-ailang`.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const PLUGINS: &[&str] = &["worldd_workspace", "worldd_ailang"];

/// A program the stand-in runs until the plugin's time limit kills it.
const HANG: &str = "-- standin: hang\nmodule hang\n\nexport func main() -> () ! {IO} {\n  ()\n}\n";

fn start() -> Daemon {
    let bin = format!("ailang.bin={}", path_str(&fixtures::ailang_standin()));
    Daemon::start(PLUGINS, &["--plugin-config", bin.as_str()])
}

/// docs/agents.md with its line breaks folded into spaces, as a reader takes the prose.
fn page() -> String {
    let text = std::fs::read_to_string(repo_root().join("docs/agents.md")).unwrap();
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn says(page: &str, sentence: &str) {
    let folded = sentence.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        page.contains(&folded),
        "docs/agents.md does not say: {folded}"
    );
}

fn does_not_say(page: &str, sentence: &str) {
    let folded = sentence.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        !page.contains(&folded),
        "docs/agents.md still says: {folded}"
    );
}

/// An MCP `tools/call` (2025-11-25) by URL, so that a thread can send it; the JSON-RPC reply.
fn mcp_call(url: &str, token: &str, tool: &str, args: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": tool, "arguments": args}});
    let a = request(
        "POST",
        url,
        Some(token),
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2025-11-25"),
        ],
        Some(&serde_json::to_vec(&body).unwrap()),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    a.rpc_json()
}

fn a2a_raw(url: &str, token: &str, body: &Value) -> String {
    let a = post_json(url, Some(token), body);
    assert_eq!(a.status, 200, "{}", a.text());
    a.text()
}

fn object_payload(d: &Daemon, token: &str, r: &str) -> Value {
    let o = get(
        &d.url(&format!("/v1/objects/{r}?payload=true")),
        Some(token),
    )
    .json();
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(o["payload"].as_str().unwrap())
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// The daemon's `indeterminate` list of `/v1/budget`, polled until it holds `n` entries.
fn indeterminate_once(d: &Daemon, token: &str, n: usize) -> Vec<Value> {
    for _ in 0..100 {
        let b = get(&d.url("/v1/budget"), Some(token)).json();
        let list = b["indeterminate"].as_array().unwrap().clone();
        if list.len() == n {
            return list;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("/v1/budget never listed {n} indeterminate entries");
}

#[test]
fn an_overrun_ailang_run_is_committed_failed_with_no_reason_and_the_agents_page_says_so() {
    let d = start();
    let token = d.session("ep1", &["Ailang.Run=worktree:5"]);
    std::fs::write(d.root().join("ep1/hang.ail"), HANG).unwrap();
    let r = mcp_call(
        &d.url("/mcp/"),
        &token,
        "ailang-run",
        json!({"path": "hang.ail"}),
    );
    let result = &r["result"];
    assert_eq!(result["isError"], true, "{r}");
    assert_eq!(
        result["_meta"]["world/outcome"],
        json!({"kind": "failed", "reason": "handler", "retryable": false})
    );
    // The world block alone, and a record that says only `failed`.
    let out = result["structuredContent"].as_object().unwrap();
    assert_eq!(out.keys().collect::<Vec<_>>(), ["world"], "{r}");
    let record = object_payload(
        &d,
        &token,
        out["world"]["effects"][0]["record"].as_str().unwrap(),
    );
    assert_eq!(record["failed"], true, "{record}");
    assert_eq!(record["denial"], "", "{record}");
    assert_eq!(record["resultRef"], "", "{record}");
    assert_eq!(spent(&d, &token, "Ailang.Run"), 1);
    // Why is in the daemon's log only.
    d.wait_for_log("did not finish within the effect's time limit of 9500 ms");

    let page = page();
    does_not_say(
        &page,
        "| a tool's handler | 10 s, enforced: past it you get `host callback timed out` and the call is not committed |",
    );
    says(
        &page,
        "the plugin's own limit of 9.5 s ends whatever still runs, and commits the call with its \
         effect `failed` (`failed` / `handler`, one unit spent, no reason you can read",
    );
    says(
        &page,
        "A call that waited behind your episode's running call has less: the plugin's limit is \
         what is left of the call's 20 s deadline less 0.5 s",
    );
    says(
        &page,
        "**Why it failed is not in the answer.** The handler's message goes to the daemon's log \
         only: no stored object keeps it, and the effect record says `failed: true`, with an \
         empty `denial` and no `resultRef`.",
    );
}

#[test]
fn an_unkeyed_mcp_call_still_running_is_absent_from_the_log_and_the_agents_page_says_to_ask_budget()
{
    let d = start();
    let token = d.session("ep1", &["Ailang.Run=worktree:5"]);
    std::fs::write(d.root().join("ep1/hang.ail"), HANG).unwrap();
    let next = get(&d.url("/v1/log?from=0&limit=500"), Some(&token)).json()["next"]
        .as_u64()
        .unwrap();
    let url = d.url("/mcp/");
    std::thread::scope(|s| {
        let call = s.spawn(|| mcp_call(&url, &token, "ailang-run", json!({"path": "hang.ail"})));
        // While it runs: nothing new in the log, but /v1/budget lists it in flight.
        let listed = indeterminate_once(&d, &token, 1);
        assert_eq!(listed[0]["inFlight"], true, "{listed:?}");
        assert_eq!(listed[0]["effect"], "Ailang.Run", "{listed:?}");
        let log = get(&d.url(&format!("/v1/log?from={next}")), Some(&token)).json();
        assert_eq!(log["items"], json!([]), "{log}");
        let r = call.join().unwrap();
        assert_eq!(r["result"]["_meta"]["world/outcome"]["kind"], "failed");
    });
    // Committed now; its invocation record's input and output are refs, not values.
    let log = get(&d.url(&format!("/v1/log?from={next}")), Some(&token)).json();
    let entry = &log["items"][0];
    let record = object_payload(&d, &token, entry["transitionRef"].as_str().unwrap());
    assert!(
        record["input"].as_str().unwrap().starts_with("sha256:"),
        "{record}"
    );
    assert!(
        record["output"].as_str().unwrap().starts_with("sha256:"),
        "{record}"
    );
    assert_eq!(
        object_payload(&d, &token, record["input"].as_str().unwrap()),
        json!({"path": "hang.ail"})
    );

    let page = page();
    does_not_say(
        &page,
        "look for your tool (`skillId`) and arguments (`input`). If it is there, it committed; do not resend.",
    );
    says(
        &page,
        "a call still running is not in the log yet, and its absence there proves nothing: \
         `GET /v1/budget` (`worldd budget --json`) lists a call of yours the daemon is still \
         running under `indeterminate`, with `\"inFlight\": true` and its `invocationId`",
    );
    says(
        &page,
        "So wait until the 20 s a POST may take have passed since you sent it and no \
         `indeterminate` entry is `inFlight`.",
    );
    says(
        &page,
        "The record's `input` is a `sha256:` ref, not the arguments: fetch it (`GET \
         /v1/objects/<input>?payload=true`), or compare it with the sha256 of your arguments \
         object in canonical JSON",
    );
}

#[test]
fn an_a2a_task_id_resent_while_it_runs_is_refused_as_already_used_and_the_agents_page_says_tasks_get_tells(
) {
    let d = start();
    let token = d.session("ep1", &["Ailang.Run=worktree:5"]);
    std::fs::write(d.root().join("ep1/hang.ail"), HANG).unwrap();
    let url = d.url("/a2a/");
    let send = json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/send",
        "params": {"id": "hang-1", "metadata": {"skill_id": "ailang-run"},
                   "message": {"role": "user", "parts": [{"type": "data", "data": {"path": "hang.ail"}}]}}});
    std::thread::scope(|s| {
        let first = s.spawn(|| a2a_raw(&url, &token, &send));
        indeterminate_once(&d, &token, 1);
        assert_eq!(
            a2a_raw(&url, &token, &send),
            r#"{"error":{"code":-32602,"message":"task id already used in this session"},"id":1,"jsonrpc":"2.0"}"#
        );
        let got: Value = serde_json::from_str(&a2a_raw(
            &url,
            &token,
            &json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": "hang-1"}}),
        ))
        .unwrap();
        assert_eq!(got["result"]["status"]["state"], "working", "{got}");
        let first: Value = serde_json::from_str(&first.join().unwrap()).unwrap();
        assert_eq!(first["result"]["metadata"]["outcome"]["kind"], "failed");
    });

    let page = page();
    does_not_say(
        &page,
        "4. `host callback capacity exceeded` and A2A `invalid params` / `not authorized` mean nothing ran",
    );
    says(
        &page,
        "Not so `task id already used in this session` (also `-32602`): it may mean your first \
         send of that task id is still running. Ask `tasks/get` before anything else, and do \
         not take a new task id for the same call",
    );
    says(
        &page,
        "While the first send is still running, the resend is refused with `-32602 task id \
         already used in this session` (under `tasks/send` with no `data`;",
    );
    says(
        &page,
        "`\"state\": \"working\"` (`TASK_STATE_WORKING`, or `indeterminate` / `in-flight`) means \
         it is still running: ask again later, and never send it under a new task id",
    );
}

#[test]
fn a2a_0_3_task_errors_carry_a_list_of_one_error_info_as_the_agents_page_says() {
    let d = start();
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let url = d.url("/a2a/");
    let ask =
        |body: Value| -> Value { serde_json::from_str(&a2a_raw(&url, &token, &body)).unwrap() };
    let listed = |v: &Value, reason: &str| {
        let data = v["error"]["data"]
            .as_array()
            .unwrap_or_else(|| panic!("{v}"));
        assert_eq!(data.len(), 1, "{v}");
        assert_eq!(data[0]["@type"], "type.googleapis.com/google.rpc.ErrorInfo");
        assert_eq!(data[0]["reason"], reason, "{v}");
        assert!(data[0]["metadata"]["why"].is_string(), "{v}");
    };
    let never = json!({"id": "never"});
    let got = ask(json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": never}));
    assert_eq!(got["error"]["code"], -32001);
    listed(&got, "TASK_NOT_FOUND");
    let cancel = ask(json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/cancel", "params": never}));
    listed(&cancel, "TASK_NOT_FOUND");
    let text = ask(
        json!({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {
        "metadata": {"skill_id": "ailang-read"},
        "message": {"kind": "message", "messageId": "t-1", "role": "user",
                    "parts": [{"kind": "text", "text": "hello.txt"}]}}}),
    );
    assert_eq!(text["error"]["code"], -32005);
    listed(&text, "CONTENT_TYPE_NOT_SUPPORTED");
    // The classification and `why` stay plain objects under 0.3.
    let bad = ask(json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {}}));
    assert_eq!(bad["error"]["data"], json!({"why": "params.id is missing"}));

    let page = page();
    does_not_say(
        &page,
        "is a plain object under 0.3 (`tasks/send`, `message/send`, `tasks/get`)",
    );
    says(
        &page,
        "`Task not found` and the A2A errors `-32002` to `-32009` carry a list of one \
         `google.rpc.ErrorInfo` under every method, 0.3 ones included (`tasks/get`, \
         `tasks/cancel`, `message/send`): read `data[0].metadata.why`.",
    );
}

#[test]
fn the_served_ailang_tools_are_tagged_unknown_and_the_agents_page_gives_the_whole_rule() {
    let d = start();
    let token = d.session("ep1", &["Ailang.Run=worktree:5"]);
    std::fs::write(
        d.root().join("ep1/ok.ail"),
        "module ok\n\nexport func main() -> () ! {IO} {\n  println(\"hi\")\n}\n",
    )
    .unwrap();
    let card = get(&d.url("/.well-known/agent-card.json"), Some(&token)).json();
    let run = card["skills"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "ailang-run")
        .unwrap()
        .clone();
    assert_eq!(run["tags"], json!(["unknown"]), "{run}");
    // Served, and it runs.
    let r = mcp_call(
        &d.url("/mcp/"),
        &token,
        "ailang-run",
        json!({"path": "ok.ail"}),
    );
    assert_eq!(r["result"]["structuredContent"]["admitted"], true, "{r}");
    assert_eq!(r["result"]["_meta"]["world/outcome"]["kind"], "ok", "{r}");

    let page = page();
    does_not_say(
        &page,
        "an effect no loaded plugin serves is `unknown` and also `openWorldHint: true`",
    );
    says(
        &page,
        "a tool with an effect its plugin declares `unknown` (the ailang plugin so declares \
         `Ailang.Run`, `Ailang.RunEnv`, `Ailang.RunNet` and `Ailang.CLI`",
    );
    says(&page, "or one no loaded plugin serves, is `unknown`");
}

/// The batch row of the limits table, from the limits in force by default: the page said
/// replies went up to 16 MiB, where `[limits] reply_bytes` is 8 MiB and is held to an eighth of
/// `[server] reply_budget_bytes`.
#[test]
fn the_agents_page_gives_the_batch_limits_in_force() {
    let limits = worldd::limits::Limits::default();
    let server = worldd::edge::ServerConfig::default();
    let reply_bytes = limits
        .reply_bytes
        .min(worldd::limits::most_reply_bytes(&server));
    assert_eq!(reply_bytes % (1024 * 1024), 0, "{reply_bytes}");
    let page = page();
    says(
        &page,
        &format!(
            "| a JSON-RPC batch | {} messages; once the replies reach {} MiB (the operator's \
             `[limits] reply_bytes`, at most an eighth of `[server] reply_budget_bytes`), no \
             further item runs and each left is answered \"not run\" |",
            limits.batch_items,
            reply_bytes / (1024 * 1024)
        ),
    );
    does_not_say(&page, "replies up to 16 MiB");
}
