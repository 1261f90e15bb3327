//! An output that does not conform to its tool's own `outputSchema` was committed `ok` and
//! served as `structuredContent`; the official MCP SDK then raised for a call that ran and was
//! committed, and an agent would call a write again. Through the real daemon and the real
//! misfit plugin (whose `config` mode answers an object where the schema below says string):
//! the journal keeps the call `ok`, and the MCP answer is `isError: true`, without
//! `structuredContent`, with the output as text and a second text saying the call ran and was
//! committed and what does not conform; one WARN names the plugin.

mod common;

use std::process::Command;

use common::fixtures::{misfit_daemon, misfit_mode_tool};
use common::*;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// The misfit tool whose `outputSchema` says `config` is a string: the `config` mode answers
/// an object there; every other mode leaves `config` out and conforms.
fn daemon() -> (Daemon, String) {
    let mut tool = misfit_mode_tool("misfit-do");
    tool["outputSchema"] = json!({
        "type": "object",
        "required": ["world", "ok"],
        "properties": {"ok": {"type": "boolean"}, "config": {"type": "string"}}
    });
    let d = misfit_daemon(&json!({"transitions": [tool]}));
    let token = d.session("ep", &["Misfit.Do=any:10"]);
    (d, token)
}

fn call(d: &Daemon, token: &str, mode: &str) -> Value {
    let a = mcp(
        d,
        token,
        "tools/call",
        json!({"name": "misfit-do", "arguments": {"mode": mode}}),
    );
    let v = if a.content_type.starts_with("text/event-stream") {
        a.sse_json()
    } else {
        a.json()
    };
    v["result"].clone()
}

#[test]
fn an_output_that_breaks_its_tools_output_schema_is_answered_is_error_as_text_and_stays_committed_ok(
) {
    let (d, token) = daemon();

    // A conforming output is served as before.
    let fine = call(&d, &token, "plain");
    assert_eq!(fine["isError"], false, "{fine}");
    assert_eq!(fine["structuredContent"]["ok"], true, "{fine}");

    let r = call(&d, &token, "config");
    assert_eq!(r["isError"], true, "{r}");
    assert!(r.get("structuredContent").is_none(), "{r}");
    let meta = &r["_meta"];
    // The journal's truth rides beside it: the effect ran and the call is committed.
    assert_eq!(meta["world/outcome"]["kind"], "ok", "{r}");
    assert_eq!(meta["world/effects"][0]["status"], "ok", "{r}");
    let entry = meta["world/entryIndex"].as_u64().unwrap();
    let invocation = meta["world/invocationId"].as_str().unwrap();
    let content = r["content"].as_array().unwrap();
    assert_eq!(content.len(), 2, "{r}");
    assert_eq!(
        content[1],
        json!({"type": "text", "text": format!(
            "misfit-do ran and its result was committed (log entry {entry}, invocation {invocation}), but its output does not conform to the tool's outputSchema (at /config: an object where the outputSchema says string), so it is not served as structuredContent. Do not call misfit-do again to get this result: it is the text before this one."
        )})
    );
    // The first text is the committed output, byte for byte: its sha256 is its ref.
    let text = content[0]["text"].as_str().unwrap();
    assert_eq!(
        meta["world/outputRef"],
        format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes()))),
        "{r}"
    );
    let output: Value = serde_json::from_str(text).unwrap();
    assert_eq!(output["ok"], true, "{output}");
    assert!(output["config"].is_object(), "{output}");
    assert_eq!(output["world"]["effects"][0]["status"], "ok", "{output}");

    d.wait_for_log("mcp tools/call: the committed output does not conform to the tool's outputSchema (at /config: an object where the outputSchema says string); answered isError with the output as text, without structuredContent");
    let log = d.log();
    let warned: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("does not conform to the tool's outputSchema"))
        .collect();
    assert_eq!(warned.len(), 1, "{log}");
    assert!(
        warned[0].contains("WARN") && warned[0].contains("plugin=misfit"),
        "{}",
        warned[0]
    );
}

/// The official Python MCP SDK raised `Invalid structured content returned by tool` for such a
/// call; it now gets a result it can read.
#[test]
fn the_python_mcp_sdk_reads_a_call_whose_output_breaks_the_schema_instead_of_raising() {
    let (d, token) = daemon();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/python/mcp_output_schema.py");
    let out = Command::new(clients::python())
        .arg(&script)
        .arg(d.url("/mcp/"))
        .arg(&token)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let v: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(
        v,
        json!({"ok": true, "fine": true, "isError": true, "structured": false,
               "ran": true, "outputOk": true})
    );
}

/// JSON Schema 2020-12 (MCP's default dialect) applies `items` only to the elements after
/// `prefixItems`: `[1, "a"]` conforms to `prefixItems: [integer], items: string`. It was
/// checked as draft-07 would (`items` for every element), withheld, and the plugin blamed.
/// An element after the prefix that breaks `items` is still caught.
#[test]
fn an_output_conforming_to_prefix_items_and_items_is_served_as_structured_content() {
    let with = |id: &str, member: &str, items: &str| {
        let mut tool = misfit_mode_tool(id);
        tool["outputSchema"] = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "required": ["world", "ok"],
            "properties": {"ok": {"type": "boolean"}, "config": {"type": "object", "properties": {
                member: {"type": "array", "prefixItems": [{"type": "integer"}],
                         "items": {"type": items}}}}}
        });
        tool
    };
    // The config keys this test sets, declared beside the plugin's own.
    let manifest = json!({"transitions": [
        with("misfit-do", "arr", "string"),
        with("misfit-bad", "bad", "integer"),
    ], "configSchema": {"type": "object", "additionalProperties": false, "properties": {
        "arr": {"type": "array"}, "bad": {"type": "array"},
        "panic": {"type": "boolean"}, "dropPanic": {"type": "boolean"}}}});
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Daemon::serve_command(&dir, &[]);
    let lib = common::fixtures::misfit_library();
    std::fs::copy(
        lib,
        dir.path().join("plugins").join(lib.file_name().unwrap()),
    )
    .unwrap();
    cmd.env("WORLDD_MISFIT_MANIFEST", manifest.to_string())
        .args(["--plugin-config", r#"misfit.arr=[1,"a"]"#])
        .args(["--plugin-config", r#"misfit.bad=[1,2,"c"]"#]);
    let d = Daemon::spawn(dir, cmd);
    let token = d.session("ep", &["Misfit.Do=any:10"]);

    let r = call(&d, &token, "config");
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(
        r["structuredContent"]["config"]["arr"],
        json!([1, "a"]),
        "{r}"
    );

    let r = tools_call(&d, &token, "misfit-bad", json!({"mode": "config"}))["result"].clone();
    assert_eq!(r["isError"], true, "{r}");
    assert!(r.get("structuredContent").is_none(), "{r}");
    let why = r["content"][1]["text"].as_str().unwrap();
    assert!(
        why.contains("(at /config/bad/2: a string where the outputSchema says integer)"),
        "{why}"
    );
    // The second call's warning is logged before its answer and after anything the first
    // call logged: once it is read, a line about /config/arr would have been too.
    d.wait_for_log("mcp tools/call: the committed output does not conform to the tool's outputSchema (at /config/bad/2: a string where the outputSchema says integer); answered isError with the output as text, without structuredContent");
    assert!(!d.log().contains("/config/arr"), "{}", d.log());
}
