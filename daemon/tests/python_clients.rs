//! Real agent clients against the real daemon: the official Python MCP SDK 2.x (in its default
//! 2026-07-28 mode and forced to the legacy handshake) and the A2A Python SDK 1.x, pinned in
//! `tests/python/requirements.txt` and installed by the tests into a virtual environment under
//! `target/` (see `common::clients`); and, over raw HTTP, what an
//! agent loop relies on across a daemon restart: exactly-once keyed writes, reconciliation,
//! budget, and truthful effect classes for every tool that loads.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::{json, Value};

const WS: &[&str] = &["worldd_workspace"];

fn python_script(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/python")
        .join(name)
        .display()
        .to_string()
}

/// Run one client script against `url`; its last stdout line is its findings.
fn run_script(script: &str, url: &str, token: &str, worktree: &Path) -> Value {
    let out = Command::new(clients::python())
        .arg(python_script(script))
        .arg(url)
        .arg(token)
        .arg(worktree)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{script} failed:\n{stdout}\n{stderr}");
    let v: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    v
}

fn writer_session(d: &Daemon, episode: &str) -> String {
    d.session(
        episode,
        &["Workspace.Read=worktree:10", "Workspace.Write=worktree:10"],
    )
}

#[test]
fn python_mcp_sdk_lists_reads_writes_edits_and_sees_refusals() {
    let d = Daemon::start(WS, &[]);
    let token = writer_session(&d, "py");
    let worktree = d.root().join("py");
    let v = run_script("mcp_client.py", &d.url("/mcp/"), &token, &worktree);
    assert_eq!(v["server"], "worldd");
    assert_eq!(v["protocolVersion"], "2026-07-28");
    assert_eq!(v["read"], "hello agents\n");
    assert_eq!(
        std::fs::read_to_string(worktree.join("src/hello.txt")).unwrap(),
        "hello agents\n"
    );
}

#[test]
fn python_mcp_sdk_default_mode_negotiates_2026_07_28_and_writes_exactly_once() {
    let d = Daemon::start(WS, &[]);
    let token = writer_session(&d, "modern");
    let worktree = d.root().join("modern");
    let v = run_script("mcp_modern.py", &d.url("/mcp/"), &token, &worktree);
    assert_eq!(v["protocolVersion"], "2026-07-28");
    assert_eq!(v["server"], "worldd");
    assert_eq!(v["invocationId"], "mcp:modern:py-write-1");
    assert_eq!(v["budgetAfter"], 9);
    assert_eq!(
        v["conflict"],
        json!({"code": -32602,
               "message": "idempotency key \"py-write-1\" was already used with other arguments in this episode",
               "data": {"kind": "refused", "reason": "key-conflict", "retryable": false,
                        "idempotencyKey": "py-write-1", "invocationId": "mcp:modern:py-write-1"}})
    );
    assert_eq!(
        v["refusedOutcome"],
        json!({"kind": "refused", "reason": "plan", "retryable": false})
    );
    // Two sends and a conflicting third: one write ran, one unit spent.
    let b = get(&d.url("/v1/budget"), Some(&token)).json();
    let write = b["grants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["effect"] == "Workspace.Write")
        .unwrap()
        .clone();
    assert_eq!(write["spent"], 1, "{b}");
    let r = get(&d.url("/v1/calls/mcp/py-write-1"), Some(&token)).json();
    assert_eq!(r["state"], "committed");
    assert_eq!(r["entryIndex"], v["entryIndex"]);
}

#[test]
fn python_mcp_sdk_forced_to_the_legacy_handshake_still_works() {
    let d = Daemon::start(WS, &[]);
    let token = writer_session(&d, "legacy");
    let worktree = d.root().join("legacy");
    let v = run_script("mcp_legacy.py", &d.url("/mcp/"), &token, &worktree);
    assert_eq!(v["protocolVersion"], "2025-11-25");
    assert_eq!(v["server"], "worldd");
    assert_eq!(v["outcome"], json!({"kind": "ok", "retryable": false}));
    assert_eq!(
        v["refusedOutcome"],
        json!({"kind": "refused", "reason": "plan", "retryable": false})
    );
}

/// Also the task read back with the SDK's `get_task` and refused by its `cancel_task`, over
/// both transports: they answered `method not found`, which the SDK raises.
#[test]
fn python_a2a_sdk_sends_a_message_that_runs_a_tool() {
    let d = Daemon::start(WS, &[]);
    let token = writer_session(&d, "agent");
    let worktree = d.root().join("agent");
    let v = run_script("a2a_client.py", &d.url(""), &token, &worktree);
    assert_eq!(v["read"], "via a2a\n");
    assert_eq!(v["outcome"], json!({"kind": "ok", "retryable": true}));
    assert!(v["invocation"].as_str().unwrap().starts_with("a2a:agent:"));
    assert!(v["v03"].as_str().unwrap().starts_with("a2a:agent:"));
    assert_eq!(v["gotTask"], "a2a:agent:a2a-w-1");
    assert_eq!(v["skills"]["ailang-edit"], json!(["write"]));
}

/// docs/agents.md's Python clients (the MCP SDK snippet's and the A2A SDK recipe's `httpx`
/// client, taken from the page) wait out a call that takes longer than httpx's default 5 s: an
/// `ailang-run` stopped by the plugin's time limit after about 9.5 s. A client left at 5 s gave
/// up while the call ran on and committed.
#[test]
fn the_agents_page_python_clients_wait_out_a_call_longer_than_five_seconds() {
    let bin = format!("ailang.bin={}", path_str(&fixtures::ailang_standin()));
    let d = Daemon::start(
        &["worldd_workspace", "worldd_ailang"],
        &["--plugin-config", bin.as_str()],
    );
    let hang = "-- standin: hang\nmodule hang\n\nexport func main() -> () ! {IO} {\n  ()\n}\n";
    let mut tokens = Vec::new();
    for episode in ["viamcp", "viaa2a"] {
        tokens.push(d.session(episode, &["Ailang.Run=worktree:5"]));
        std::fs::write(d.root().join(episode).join("hang.ail"), hang).unwrap();
    }
    let out = Command::new(clients::python())
        .arg(python_script("doc_clients_slow_call.py"))
        .arg(d.url(""))
        .args(&tokens)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let v: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    // The answers came after the 5 s a default client waits, and are the committed results.
    assert!(v["mcp"]["seconds"].as_f64().unwrap() > 5.0, "{v}");
    assert!(v["a2a"]["seconds"].as_f64().unwrap() > 5.0, "{v}");
    assert_eq!(v["mcp"]["isError"], true, "{v}");
    assert_eq!(
        v["mcp"]["outcome"],
        json!({"kind": "failed", "reason": "handler", "retryable": false})
    );
    // What the page says an overrun ailang run answers: the `world` block alone, no reason.
    let world = &v["mcp"]["structured"]["world"];
    assert_eq!(world["effects"][0]["status"], "failed", "{v}");
    assert_eq!(v["mcp"]["structured"].as_object().unwrap().len(), 1, "{v}");
    assert_eq!(v["a2a"]["states"], json!(["TASK_STATE_FAILED"]), "{v}");
    assert_eq!(spent(&d, &tokens[0], "Ailang.Run"), 1);
    assert_eq!(spent(&d, &tokens[1], "Ailang.Run"), 1);
}

// -------------------------------------------------------------------------------------------
// Raw HTTP against the real binary.

/// An MCP `tools/call` under 2025-11-25 carrying an idempotency key; the JSON-RPC reply.
fn keyed_call(d: &Daemon, token: &str, tool: &str, args: Value, key: &str) -> Value {
    let a = mcp(
        d,
        token,
        "tools/call",
        json!({"name": tool, "arguments": args, "_meta": {"world/idempotencyKey": key}}),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    a.sse_json()
}

#[test]
fn a_keyed_mcp_write_runs_once_across_a_daemon_restart() {
    let d = Daemon::start(WS, &[]);
    let token = writer_session(&d, "ep1");
    let args = json!({"path": "notes/once.txt", "content": "one\n"});
    let first = keyed_call(&d, &token, "ailang-write", args.clone(), "write-7");
    let text = first["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    let meta = first["result"]["_meta"].clone();
    assert_eq!(meta["world/invocationId"], "mcp:ep1:write-7");
    assert_eq!(meta["world/replayed"], false);
    assert_eq!(meta["world/effects"][0]["budgetAfter"], 9);
    let head = get(&d.url("/v1/head"), Some(&token)).text();
    assert_eq!(spent(&d, &token, "Workspace.Write"), 1);

    // The daemon dies and comes back on the same store; the agent resends its write.
    std::fs::write(d.root().join("ep1/notes/once.txt"), "changed since\n").unwrap();
    let d = d.restart(WS, &[]);
    let again = keyed_call(&d, &token, "ailang-write", args.clone(), "write-7");
    assert_eq!(
        again["result"]["content"][0]["text"].as_str().unwrap(),
        text,
        "the replay is not the committed bytes"
    );
    assert_eq!(again["result"]["_meta"]["world/replayed"], true);
    assert_eq!(
        again["result"]["_meta"]["world/entryIndex"],
        meta["world/entryIndex"]
    );
    // Nothing ran: no new entry, no spend, the file keeps what happened to it since.
    assert_eq!(get(&d.url("/v1/head"), Some(&token)).text(), head);
    assert_eq!(spent(&d, &token, "Workspace.Write"), 1);
    assert_eq!(
        std::fs::read_to_string(d.root().join("ep1/notes/once.txt")).unwrap(),
        "changed since\n"
    );
    // One entry in the log carries this invocation.
    let log = get(&d.url("/v1/log?from=0&limit=500"), Some(&token)).json();
    let records: Vec<String> = log["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["transitionRef"].as_str().unwrap_or("").to_owned())
        .collect();
    let mine = records
        .iter()
        .filter(|r| {
            let o = get(
                &d.url(&format!("/v1/objects/{r}?payload=true")),
                Some(&token),
            )
            .json();
            let payload = base64_decode(o["payload"].as_str().unwrap_or(""));
            serde_json::from_slice::<Value>(&payload)
                .map(|v| v["invocationId"] == "mcp:ep1:write-7")
                .unwrap_or(false)
        })
        .count();
    assert_eq!(mine, 1);

    // A conflicting reuse after the restart is still named.
    let other = keyed_call(
        &d,
        &token,
        "ailang-write",
        json!({"path": "x", "content": ""}),
        "write-7",
    );
    assert_eq!(
        other["error"]["message"],
        "idempotency key \"write-7\" was already used with other arguments in this episode"
    );
    assert_eq!(other["error"]["code"], -32602);

    // Reconciliation, over REST and from the command line.
    let r = get(&d.url("/v1/calls/mcp/write-7"), Some(&token)).json();
    assert_eq!(r["state"], "committed");
    assert_eq!(r["outputRef"], meta["world/outputRef"]);
    assert_eq!(r["outcome"], json!({"kind": "ok", "retryable": false}));
    let addr = d.url("");
    let cli = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--addr", addr.as_str(), "--session", token.as_str()]);
        worldd(&all, None)
    };
    let (code, out, err) = cli(&["calls", "get", "write-7"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.starts_with("mcp:ep1:write-7  ailang-write  committed\n"),
        "{out}"
    );
    assert!(out.contains("  outcome   ok  retryable: false\n"), "{out}");
    assert!(out.contains("Workspace.Write ok budgetAfter 9"), "{out}");
    let (code, out, _) = cli(&["calls", "get", "mcp:ep1:write-7", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(serde_json::from_str::<Value>(out.trim()).unwrap(), r);
    let (code, _, err) = cli(&["calls", "get", "never-sent"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("calls get: not found: mcp:ep1:never-sent (nothing was journaled under it in your episode, over mcp or over a2a; it is safe to send)"),
        "{err}"
    );
    let (code, out, err) = cli(&["budget"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "effect                   scope         granted    spent  remaining  live",
            "Workspace.Read           worktree           10        0         10  yes",
            "Workspace.Write          worktree           10        1          9  yes",
        ]
    );
}

fn base64_decode(s: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .unwrap_or_default()
}

/// Every plugin library that is built, or just the workspace plugin when the set does not
/// start together (other plugins are being written alongside this test).
fn start_with_what_loads() -> Daemon {
    let all = [
        "worldd_workspace",
        "worldd_ailang",
        "worldd_git",
        "worldd_registry",
    ];
    let built: Vec<&str> = all
        .into_iter()
        .filter(|p| {
            let f = format!("lib{p}.so");
            target_dir().join(&f).exists() || target_dir().join("deps").join(&f).exists()
        })
        .collect();
    let attempt = std::panic::catch_unwind(|| Daemon::start(&built, &[]));
    attempt.unwrap_or_else(|_| Daemon::start(WS, &[]))
}

/// The plugins the daemon reported as not started. It warns on stderr before its ready line,
/// and the harness's thread reads those lines after it: every one is read once the log is
/// read so far (half a second without a line was taken for the end of them).
fn plugins_not_started(d: &Daemon) -> Vec<String> {
    let mut out = Vec::new();
    for line in d.log_so_far().lines() {
        if let Some(rest) = line.split("plugin ").nth(1) {
            if let Some((name, _)) = rest.split_once(" not started") {
                out.push(name.to_owned());
            }
        }
    }
    out
}

/// `effect NAME [class]` lines of `worldd handlers`, for the plugins that started; an effect of
/// a plugin that did not start has no handler in this daemon, so its class is unknown.
fn effect_classes(d: &Daemon, not_started: &[String]) -> BTreeMap<String, String> {
    let dir = d.plugin_dir();
    let (code, out, err) = worldd(&["handlers", "--plugin-dir", path_str(&dir)], None);
    assert_eq!(code, 0, "{out}{err}");
    let mut plugin = String::new();
    let mut classes = BTreeMap::new();
    for line in out.lines() {
        if !line.starts_with(' ') && !line.is_empty() {
            plugin = line.split(' ').next().unwrap_or("").to_owned();
        }
        let Some(rest) = line.trim().strip_prefix("effect ") else {
            continue;
        };
        let Some((name, rest)) = rest.split_once(" [") else {
            continue;
        };
        let Some((class, _)) = rest.split_once(']') else {
            continue;
        };
        let class = if not_started.contains(&plugin) {
            "unknown"
        } else {
            class
        };
        classes.insert(name.to_owned(), class.to_owned());
    }
    classes
}

/// Every transition document in the repository, by id.
fn transition_docs() -> BTreeMap<String, Value> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../transitions");
    let mut out = BTreeMap::new();
    for dir in std::fs::read_dir(root).unwrap() {
        let dir = dir.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(dir).unwrap() {
            let f = f.unwrap().path();
            if f.extension().is_some_and(|e| e == "json") {
                let v: Value = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
                if let Some(id) = v["id"].as_str() {
                    out.insert(id.to_owned(), v);
                }
            }
        }
    }
    out
}

#[test]
fn annotations_and_card_tags_of_every_tool_that_loads_match_its_effects() {
    let d = start_with_what_loads();
    let not_started = plugins_not_started(&d);
    let classes = effect_classes(&d, &not_started);
    assert_eq!(
        classes.get("Workspace.Read").map(String::as_str),
        Some("read")
    );
    assert_eq!(
        classes.get("Workspace.Write").map(String::as_str),
        Some("write")
    );
    let docs = transition_docs();
    // A session that may see every tool: one grant per access of every transition.
    let mut grants: Vec<String> = docs
        .values()
        .map(|t| {
            format!(
                "{}={}:1",
                t["access"]["effect"].as_str().unwrap(),
                t["access"]["scope"].as_str().unwrap()
            )
        })
        .collect();
    grants.sort();
    grants.dedup();
    let grant_refs: Vec<&str> = grants.iter().map(String::as_str).collect();
    let token = d.session("all", &grant_refs);
    let list = mcp(&d, &token, "tools/list", json!({})).sse_json();
    let tools = list["result"]["tools"].as_array().unwrap();
    let card = get(&d.url("/.well-known/agent-card.json"), Some(&token)).json();
    let tags: BTreeMap<String, Value> = card["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["id"].as_str().unwrap().to_owned(), s["tags"].clone()))
        .collect();
    let mut checked = Vec::new();
    for tool in tools {
        let name = tool["name"].as_str().unwrap();
        // Tool names of these ids need no escaping.
        let Some(doc) = docs.get(name) else { continue };
        let mut class = "read";
        for e in doc["declaredEffects"].as_array().unwrap() {
            match classes
                .get(e["effect"].as_str().unwrap())
                .map(String::as_str)
            {
                Some("read") => {}
                Some("write") if class == "read" => class = "write",
                Some("write") => {}
                _ => class = "unknown",
            }
            if class == "unknown" {
                break;
            }
        }
        let read = class == "read";
        assert_eq!(
            tool["annotations"],
            json!({"readOnlyHint": read, "destructiveHint": !read, "idempotentHint": read,
                   "openWorldHint": class == "unknown"}),
            "{name} is {class}"
        );
        // A tool this daemon cannot run (its plugin did not start) is tagged so after its class.
        let mut want = vec![json!(class)];
        if tool["_meta"].get("world/cannotRun").is_some() {
            want.push(json!("cannot-run"));
        }
        assert_eq!(tags[name], Value::Array(want), "card tag of {name}");
        checked.push(format!("{name}:{class}"));
    }
    for needed in [
        "ailang-read:read",
        "ailang-write:write",
        "ailang-edit:write",
    ] {
        assert!(
            checked.iter().any(|c| c == needed),
            "{needed} not checked: {checked:?}"
        );
    }
}
