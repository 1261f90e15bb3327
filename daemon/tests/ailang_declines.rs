//! How the real daemon commits the Ailang plugin's refusals, over real HTTP with the `ailang`
//! STAND-IN (`tests/ailang-standin/ailang`, test code only, never shipped).
//!
//! - A run `ailang` refused before execution (`admitted: false`: the program never ran) was
//!   committed as a successful call: outcome `ok`, `isError: false` on MCP. Its output now
//!   says `"ok": false` and why, so it is the policy refusal it is.
//! - The operator gates (a capability not enabled by `runAllowCaps`, a Net run without
//!   `runNetAllow`) and an `args_json` too large to start a run were failed effects: a unit
//!   spent, no reason for the agent. They are now declined before anything is spent
//!   (`denied:handler`, the reason in `refused`).
//!
//! The ailang plugin library must be built: `cargo build -p worldd-handler-ailang`.

mod common;

use common::*;
use serde_json::{json, Value};

const PLUGINS: &[&str] = &["worldd_workspace", "worldd_ailang"];

fn start() -> Daemon {
    let bin = format!("ailang.bin={}", path_str(&fixtures::ailang_standin()));
    Daemon::start(PLUGINS, &["--plugin-config", bin.as_str()])
}

/// An MCP tools/call's whole result (structuredContent, isError, _meta).
fn tools_call(d: &Daemon, token: &str, tool: &str, args: Value) -> Value {
    let v = mcp(
        d,
        token,
        "tools/call",
        json!({"name": tool, "arguments": args}),
    )
    .sse_json();
    v["result"].clone()
}

#[test]
fn a_run_refused_before_execution_is_a_policy_refusal_not_a_successful_run() {
    let d = start();
    let token = d.session("ep1", &["Ailang.Run=worktree:5"]);
    std::fs::write(
        d.root().join("ep1/net.ail"),
        "-- standin: plain\nmodule m\n\nexport func main() -> () ! {IO, Net} {\n  ()\n}\n",
    )
    .unwrap();
    let r = tools_call(&d, &token, "ailang-run", json!({"path": "net.ail"}));
    let out = &r["structuredContent"];
    assert_eq!(out["admitted"], false, "{r}");
    assert_eq!(out["ok"], false, "{r}");
    assert_eq!(
        out["refused"],
        "ailang run refused the program before it ran: declared effects exceed policy (missing from the policy: Net); see decision"
    );
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(
        r["_meta"]["world/outcome"],
        json!({"kind": "refused", "reason": "policy", "retryable": false}),
        "{r}"
    );
    // The effect ran `ailang`: its unit is spent, as for any policy refusal.
    assert_eq!(out["world"]["effects"][0]["status"], "ok");
    assert_eq!(spent(&d, &token, "Ailang.Run"), 1);
}

#[test]
fn operator_gates_and_an_args_json_too_large_to_start_are_declined_with_nothing_spent() {
    let d = start();
    let token = d.session(
        "ep1",
        &[
            "Ailang.Run=worktree:5",
            "Ailang.RunEnv=worktree:5",
            "Ailang.RunNet=worktree:5",
        ],
    );
    std::fs::write(
        d.root().join("ep1/p.ail"),
        "-- standin: plain\nmodule m\n\nexport func main() -> () ! {IO} {\n  ()\n}\n",
    )
    .unwrap();
    let big = format!("{{\"k\":\"{}\"}}", "x".repeat(199_992));
    let cases = [
        (
            json!({"path": "p.ail", "caps": ["IO", "Env"]}),
            "Ailang.RunEnv",
            "capability \"Env\" is not enabled by the operator (ailang config runAllowCaps)"
                .to_string(),
        ),
        (
            json!({"path": "p.ail", "caps": ["Net"]}),
            "Ailang.RunNet",
            "capability \"Net\" is not enabled by the operator (ailang config runAllowCaps)"
                .to_string(),
        ),
        (
            json!({"path": "p.ail", "args_json": big}),
            "Ailang.Run",
            "argument \"args_json\" is 200000 bytes; the limit is 65536".to_string(),
        ),
    ];
    for (args, effect, why) in cases {
        let r = tools_call(&d, &token, "ailang-run", args);
        let out = &r["structuredContent"];
        assert_eq!(out["refused"], why.as_str(), "{r}");
        assert_eq!(out["world"]["effects"][0]["status"], "denied", "{r}");
        assert_eq!(
            r["_meta"]["world/outcome"],
            json!({"kind": "denied", "reason": "denied:handler", "retryable": false}),
            "{r}"
        );
        assert_eq!(r["isError"], true, "{r}");
        assert_eq!(spent(&d, &token, effect), 0, "{effect}");
    }
    // Nothing ran: no child at all, not even the policy summary.
    let log = d.db().join("plugin-state/ailang/cache/ep1/standin.log");
    assert!(!log.exists(), "{:?}", std::fs::read_to_string(&log));
}
