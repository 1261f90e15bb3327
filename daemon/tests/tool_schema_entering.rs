//! A tool whose `outputSchema` no validating client can use (a `type` JSON Schema does not
//! define, a schema forbidding the `world` member every result carries), or whose `access`
//! scope is not the one its plan runs the effect at, is refused where it enters: a plugin
//! shipping it is a `problem:` for `worldd handlers` and stops `worldd serve` (the real misfit
//! library, its manifest changed by `WORLDD_MISFIT_MANIFEST`), and `registry-publish` refuses a
//! bundle holding it and publishes nothing (the real daemon over HTTP).

mod common;

use std::path::{Path, PathBuf};

use common::fixtures::misfit_library;
use common::*;
use serde_json::{json, Value};

const TYPES: &str = "object, array, string, number, integer, boolean, null";
const WORLD: &str = "every result carries \"world\" (an object, the call's receipt), so a client that validates results would refuse every one";

/// A plugin directory holding the misfit library; the library's path there.
fn misfit_dir(dir: &Path) -> (PathBuf, PathBuf) {
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let lib = plugins.join(misfit_library().file_name().unwrap());
    std::fs::copy(misfit_library(), &lib).unwrap();
    (plugins, lib)
}

/// `handlers` lists `problem` (exit 0); `serve` stops at start-up on the same words.
fn refused_at_load(tool: Value, plugins: &Path, lib: &Path, problem: &str) {
    let env = [(
        "WORLDD_MISFIT_MANIFEST",
        json!({"transitions": [tool]}).to_string(),
    )];
    let (code, out, err, _) = worldd_with_plugins("handlers", plugins, &[], &env);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(&format!("  problem: {problem}\n")), "{out}");
    let (code, _, err, _) = worldd_with_plugins("serve", plugins, &[], &env);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(
        err.lines().last().unwrap_or_default(),
        format!(
            "worldd: daemon startup failed at plugins: plugin {}: {problem}",
            lib.display()
        )
    );
}

/// The misfit tool with `outputSchema` replaced.
fn misfit_with_output(schema: Value) -> Value {
    let mut tool = fixtures::misfit_tool("misfit-do", "misfit-do");
    tool["outputSchema"] = schema;
    tool
}

#[test]
fn a_shipped_tool_whose_output_schema_no_validating_client_accepts_is_a_problem_and_stops_serve() {
    let dir = tempfile::tempdir().unwrap();
    let (plugins, lib) = misfit_dir(dir.path());
    let cases = [
        (
            misfit_with_output(json!({"type": "object", "properties": {"lines": {"type": "int"}}})),
            format!("shipped transition: transition \"misfit-do\": outputSchema.properties.lines.type is \"int\", which is not a JSON Schema type ({TYPES}): a client that validates results refuses the schema, and so every call's result; did you mean integer?"),
        ),
        (
            misfit_with_output(json!({"type": "object", "properties": {"rows": {"type": "array", "items": {"type": "dict"}}}})),
            format!("shipped transition: transition \"misfit-do\": outputSchema.properties.rows.items.type is \"dict\", which is not a JSON Schema type ({TYPES}): a client that validates results refuses the schema, and so every call's result; did you mean object?"),
        ),
        (
            misfit_with_output(json!({"type": "object", "additionalProperties": false,
                                      "properties": {"ok": {"type": "boolean"}}})),
            format!("shipped transition: transition \"misfit-do\": outputSchema.additionalProperties is false with no \"world\" in properties, but {WORLD}; add \"world\": {{\"type\": \"object\"}} to properties"),
        ),
    ];
    for (tool, problem) in cases {
        refused_at_load(tool, &plugins, &lib, &problem);
    }
}

#[test]
fn a_shipped_tool_whose_access_scope_is_not_its_effects_is_a_problem_and_stops_serve() {
    let dir = tempfile::tempdir().unwrap();
    let (plugins, lib) = misfit_dir(dir.path());
    let mut tool = fixtures::misfit_tool("misfit-do", "misfit-do");
    tool["access"]["scope"] = json!("anny");
    refused_at_load(
        tool,
        &plugins,
        &lib,
        "shipped transition: transition \"misfit-do\": access.scope is \"anny\", but the plan runs Misfit.Do at scope \"any\": a session would need a grant at each scope (access admits the call, the effect pays for it); give access the effect's scope",
    );
}

/// A read-only tool served by Workspace.Read (no code), as a publisher writes one.
fn docs_read(id: &str) -> Value {
    json!({
        "id": id,
        "title": "Read a document",
        "description": "Read one file under docs/ in this episode's worktree. Returns {ok, content}.",
        "inputSchema": {"type": "object", "additionalProperties": false, "required": ["path"],
                        "properties": {"path": {"type": "string"}}},
        "outputSchema": {"type": "object", "required": ["world"],
                         "properties": {"ok": {"type": "boolean"}, "content": {"type": "string"},
                                        "world": {"type": "object"}}},
        "access": {"effect": "Workspace.Read", "scope": "worktree", "cost": 0},
        "declaredEffects": [{"effect": "Workspace.Read", "scope": "worktree", "cost": 1}],
        "plan": {
            "language": "world/plan-language/v1",
            "arguments": [{"name": "path", "type": "string", "required": true,
                           "rules": [{"rule": "relative-path"}, {"rule": "path-glob", "globs": ["docs/**"]}]}],
            "effect": {"effect": "Workspace.Read", "scope": "worktree", "cost": 1},
            "payload": {"fields": {"op": {"const": "read"}, "path": {"argument": "path"}}}
        }
    })
}

/// MCP `tools/call`; the structured result of a committed call.
fn mcp_call(d: &Daemon, token: &str, tool: &str, args: Value) -> Value {
    let a = mcp(
        d,
        token,
        "tools/call",
        json!({"name": tool, "arguments": args}),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    let v = a.sse_json();
    assert!(v.get("error").is_none(), "{v}");
    v["result"]["structuredContent"].clone()
}

/// The MCP tool names the session sees.
fn mcp_tools(d: &Daemon, token: &str) -> Vec<String> {
    let a = mcp(d, token, "tools/list", json!({}));
    assert_eq!(a.status, 200, "{}", a.text());
    let mut names: Vec<String> = a.sse_json()["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn registry_publish_refuses_an_output_schema_no_validating_client_accepts_and_a_stray_access_scope()
{
    let d = Daemon::start(&["worldd_workspace", "worldd_registry"], &[]);
    let token = d.session(
        "ep1",
        &["Registry.Publish=worktree:10", "Workspace.Read=worktree:10"],
    );
    let before = mcp_tools(&d, &token);
    let mut int = docs_read("docs-int");
    int["outputSchema"]["properties"]["lines"] = json!({"type": "int"});
    let mut closed = docs_read("docs-closed");
    closed["outputSchema"] = json!({"type": "object", "additionalProperties": false,
                                    "properties": {"ok": {"type": "boolean"}}});
    let mut world = docs_read("docs-world");
    world["outputSchema"]["properties"]["world"] = json!({"type": "string"});
    let mut scope = docs_read("docs-scope");
    scope["access"]["scope"] = json!("worktrees");
    let cases = [
        (
            int,
            format!("transitions[1]: transition \"docs-int\": outputSchema.properties.lines.type is \"int\", which is not a JSON Schema type ({TYPES}): a client that validates results refuses the schema, and so every call's result; did you mean integer?"),
        ),
        (
            closed,
            format!("transitions[1]: transition \"docs-closed\": outputSchema.additionalProperties is false with no \"world\" in properties, but {WORLD}; add \"world\": {{\"type\": \"object\"}} to properties"),
        ),
        (
            world,
            format!("transitions[1]: transition \"docs-world\": outputSchema.properties.world.type is \"string\", but {WORLD}; give it \"type\": \"object\""),
        ),
        (
            scope,
            "transitions[1]: transition \"docs-scope\": access.scope is \"worktrees\", but the plan runs Workspace.Read at scope \"worktree\": a session would need a grant at each scope (access admits the call, the effect pays for it); give access the effect's scope".to_owned(),
        ),
    ];
    for (bad, refusal) in cases {
        let out = mcp_call(
            &d,
            &token,
            "registry-publish",
            json!({"bundle": {"transitions": [docs_read("docs-fine"), bad]}}),
        );
        assert_eq!(out["refused"], refusal);
    }
    assert_eq!(mcp_tools(&d, &token), before, "nothing was published");
    // The same bundle with only the fine tool publishes it.
    let out = mcp_call(
        &d,
        &token,
        "registry-publish",
        json!({"bundle": {"transitions": [docs_read("docs-fine")]}}),
    );
    assert_eq!(out["published"], json!(["docs-fine"]), "{out}");
}
