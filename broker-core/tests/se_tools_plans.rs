//! The eight se-tools as `world/transition/v1` documents, planned by the interpreter.
//!
//! Every refusal text asserted here is a byte-for-byte contract (seed 000 "Plan refusals" and
//! the reference behaviour §1).

// `u64::is_multiple_of` needs Rust 1.87; the workspace's rust-version is 1.85.
#![allow(clippy::manual_is_multiple_of)]

use std::path::PathBuf;

use broker_core::plan::{interpreter_document, Plan, PlannedEffect, PLAN_SEMANTIC_ID};
use broker_core::transition::{EffectSpec, Transition, TransitionError};
use serde_json::{json, Map, Value};

const TOOLS: [&str; 8] = [
    "ailang-read",
    "ailang-write",
    "ailang-edit",
    "ailang-check",
    "ailang-run",
    "builtins-search",
    "examples-search",
    "ailang-cli",
];

const PATH_RULE: &str =
    "refused: it must be relative and non-empty, with no \"..\" segment and no leading \"-\"";

fn doc_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../transitions/se-tools")
        .join(format!("{name}.json"))
}

fn raw(name: &str) -> Value {
    let bytes = std::fs::read(doc_path(name)).unwrap_or_else(|e| panic!("read {name}: {e}"));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{name} is not JSON: {e}"))
}

fn load(name: &str) -> Transition {
    let bytes = std::fs::read(doc_path(name)).unwrap_or_else(|e| panic!("read {name}: {e}"));
    Transition::from_slice(&bytes).unwrap_or_else(|e| panic!("{name} does not load: {e}"))
}

fn refusal(tool: &str, args: Value) -> String {
    let t = load(tool);
    match t.plan_call(&args) {
        Plan::Refused { message } => message,
        other => panic!("{tool} {args} should refuse, planned {other:?}"),
    }
}

fn assert_refused(tool: &str, args: Value, expected: &str) {
    assert_eq!(refusal(tool, args.clone()), expected, "{tool} {args}");
}

fn planned(tool: &str, args: Value) -> (PlannedEffect, bool) {
    let t = load(tool);
    match t.plan_call(&args) {
        Plan::Effect { effect, finish } => (effect, finish),
        Plan::Refused { message } => {
            panic!("{tool} {args} should plan an effect, refused: {message}")
        }
    }
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

fn assert_effect(tool: &str, args: Value, effect: &str, payload: Value, finish: bool) {
    let (e, f) = planned(tool, args.clone());
    assert_eq!(
        e,
        PlannedEffect {
            id: "e1".into(),
            effect: effect.into(),
            scope: "worktree".into(),
            cost: 1,
            payload: obj(payload),
        },
        "{tool} {args}"
    );
    assert_eq!(f, finish, "{tool} finish");
}

fn load_err(doc: Value) -> String {
    match Transition::from_value(doc) {
        Ok(t) => panic!("document {} should be refused", t.id),
        Err(e) => e.to_string(),
    }
}

// ───────────────────────────── documents ─────────────────────────────

#[test]
fn all_eight_documents_load_with_their_declared_triples() {
    let expect: [(&str, &str, Option<&str>); 8] = [
        ("ailang-read", "Workspace.Read", None),
        ("ailang-write", "Workspace.Write", None),
        ("ailang-edit", "Workspace.Write", None),
        ("ailang-check", "Ailang.Check", Some("check-report")),
        ("ailang-run", "Ailang.Run", None),
        (
            "builtins-search",
            "Ailang.Discover",
            Some("builtins-inventory"),
        ),
        ("examples-search", "Ailang.Discover", None),
        ("ailang-cli", "Ailang.CLI", None),
    ];
    for (name, effect, finish) in expect {
        let t = load(name);
        assert_eq!(t.id, name);
        assert!(!t.title.is_empty() && t.description.len() > 80, "{name}");
        assert_eq!(
            t.access,
            EffectSpec {
                effect: effect.into(),
                scope: "worktree".into(),
                cost: 0
            }
        );
        assert_eq!(t.finish.as_deref(), finish, "{name}");
        assert_eq!(t.input_schema["type"], "object");
        assert_eq!(t.input_schema["additionalProperties"], false);
        assert_eq!(t.output_schema["type"], "object");
        assert_eq!(t.output_schema["required"], json!(["world"]));
        assert!(t.output_schema["properties"]["ok"].is_object(), "{name}");
        assert!(
            t.output_schema["properties"]["refused"].is_object(),
            "{name}"
        );
        for (k, p) in t.input_schema["properties"]
            .as_object()
            .into_iter()
            .flatten()
        {
            assert!(
                p["description"].as_str().is_some_and(|d| d.len() > 10),
                "{name}.{k} needs a description"
            );
        }
        assert_eq!(
            t.to_value(),
            &raw(name),
            "to_value is the document as given"
        );
        if name != "ailang-run" {
            assert_eq!(
                t.declared_effects,
                vec![EffectSpec {
                    effect: effect.into(),
                    scope: "worktree".into(),
                    cost: 1
                }]
            );
            assert_eq!(t.effect_names().collect::<Vec<_>>(), vec![effect]);
        }
    }
    let run = load("ailang-run");
    let names: Vec<&str> = run.effect_names().collect();
    assert_eq!(names, ["Ailang.Run", "Ailang.RunEnv", "Ailang.RunNet"]);
    assert!(run
        .declared_effects
        .iter()
        .all(|e| e.scope == "worktree" && e.cost == 1));
}

#[test]
fn interpreter_identity() {
    assert_eq!(
        interpreter_document(),
        json!({"name":"worldd-plan","version":1,"semanticsEpoch":1,"language":"world/plan-language/v1"})
    );
}

// ───────────────────────────── generic refusals ─────────────────────────────

#[test]
fn non_object_arguments_are_refused() {
    for tool in TOOLS {
        for args in [
            json!(null),
            json!([]),
            json!("path"),
            json!(1),
            json!(true),
            json!([{"path": "a"}]),
        ] {
            assert_refused(tool, args, "arguments must be a JSON object");
        }
    }
}

#[test]
fn unknown_arguments_name_the_declared_list() {
    let cases = [
        ("ailang-read", json!({"path": "a", "limit": 5}), "path"),
        (
            "ailang-write",
            json!({"path": "a", "content": "", "limit": 5}),
            "path, content",
        ),
        (
            "ailang-edit",
            json!({"limit": 5}),
            "path, old_text, new_text",
        ),
        ("ailang-check", json!({"path": "a", "limit": 5}), "path"),
        (
            "ailang-run",
            json!({"path": "a", "limit": 5}),
            "path, args_json, stdin, argv, caps",
        ),
        ("builtins-search", json!({"limit": 5}), "query, module"),
        (
            "examples-search",
            json!({"query": "x", "limit": 5}),
            "query",
        ),
        (
            "ailang-cli",
            json!({"op": "check", "limit": 5}),
            "op, path, module, query, package, flags",
        ),
    ];
    for (tool, args, keys) in cases {
        assert_refused(
            tool,
            args,
            &format!("unknown argument \"limit\"; {tool} admits only: {keys}"),
        );
    }
    // The seed's own example.
    assert_refused(
        "ailang-read",
        json!({"path": "a.ail", "limit": 1}),
        "unknown argument \"limit\"; ailang-read admits only: path",
    );
}

#[test]
fn several_unknown_keys_report_the_bytewise_first() {
    assert_refused(
        "ailang-read",
        json!({"zeta": 1, "beta": 2, "Alpha": 3, "path": "a"}),
        "unknown argument \"Alpha\"; ailang-read admits only: path",
    );
    // Case variants are unknown keys, not aliases.
    assert_refused(
        "ailang-cli",
        json!({"op": "check", "OP": "fmt", "Flags": {}}),
        "unknown argument \"Flags\"; ailang-cli admits only: op, path, module, query, package, flags",
    );
    // Unknown keys come before every other check, and keys are rendered JSON-style.
    assert_refused(
        "ailang-write",
        json!({"a\"b\n": 1}),
        "unknown argument \"a\\\"b\\n\"; ailang-write admits only: path, content",
    );
}

#[test]
fn missing_required_arguments() {
    assert_refused(
        "ailang-read",
        json!({}),
        "missing required argument \"path\"",
    );
    assert_refused(
        "ailang-check",
        json!({}),
        "missing required argument \"path\"",
    );
    assert_refused(
        "ailang-run",
        json!({"stdin": "x"}),
        "missing required argument \"path\"",
    );
    assert_refused(
        "ailang-write",
        json!({"path": "a"}),
        "missing required argument \"content\"",
    );
    // Declaration order: path before old_text before new_text.
    assert_refused(
        "ailang-edit",
        json!({"new_text": "x"}),
        "missing required argument \"path\"",
    );
    assert_refused(
        "ailang-edit",
        json!({"path": "a", "new_text": "x"}),
        "missing required argument \"old_text\"",
    );
    assert_refused(
        "ailang-edit",
        json!({"path": "a", "old_text": "x"}),
        "missing required argument \"new_text\"",
    );
    assert_refused(
        "examples-search",
        json!({}),
        "missing required argument \"query\"",
    );
    assert_refused(
        "ailang-cli",
        json!({"path": "a.ail"}),
        "missing required argument \"op\"",
    );
}

#[test]
fn string_arguments_must_be_strings() {
    let cases = [
        ("ailang-read", json!({"path": 3}), "path"),
        ("ailang-read", json!({"path": null}), "path"),
        (
            "ailang-write",
            json!({"path": "a", "content": ["x"]}),
            "content",
        ),
        (
            "ailang-edit",
            json!({"path": "a", "old_text": {}, "new_text": "b"}),
            "old_text",
        ),
        (
            "ailang-edit",
            json!({"path": "a", "old_text": "a", "new_text": false}),
            "new_text",
        ),
        ("ailang-check", json!({"path": 1.5}), "path"),
        (
            "ailang-run",
            json!({"path": "a", "args_json": 3}),
            "args_json",
        ),
        ("ailang-run", json!({"path": "a", "stdin": ["x"]}), "stdin"),
        ("builtins-search", json!({"query": 1}), "query"),
        ("builtins-search", json!({"module": null}), "module"),
        ("examples-search", json!({"query": {}}), "query"),
        ("ailang-cli", json!({"op": 7}), "op"),
        ("ailang-cli", json!({"op": "iface", "module": []}), "module"),
        (
            "ailang-cli",
            json!({"op": "docs_search", "query": 2}),
            "query",
        ),
        (
            "ailang-cli",
            json!({"op": "test", "package": true}),
            "package",
        ),
    ];
    for (tool, args, key) in cases {
        assert_refused(tool, args, &format!("argument \"{key}\" must be a string"));
    }
}

// ───────────────────────────── the path rule ─────────────────────────────

const REFUSED_PATHS: [&str; 7] = ["", "/etc/hosts", "-x", "..", "../a", "a/..", "a/../b"];
const ACCEPTED_PATHS: [&str; 6] = ["..a", "a/b..c", "./x", "a/-b.ail", "a..", "src/main.ail"];

fn path_args(tool: &str, key: &str, p: &str) -> Value {
    match (tool, key) {
        ("ailang-write", _) => json!({"path": p, "content": "x"}),
        ("ailang-edit", _) => json!({"path": p, "old_text": "a", "new_text": "b"}),
        ("ailang-cli", "package") => json!({"op": "test", "package": p}),
        ("ailang-cli", _) => json!({"op": "check", "path": p}),
        _ => json!({ key: p }),
    }
}

#[test]
fn path_rule_refuses_and_accepts_exactly() {
    let targets = [
        ("ailang-read", "path"),
        ("ailang-write", "path"),
        ("ailang-edit", "path"),
        ("ailang-check", "path"),
        ("ailang-run", "path"),
        ("ailang-cli", "path"),
        ("ailang-cli", "package"),
    ];
    for (tool, key) in targets {
        for p in REFUSED_PATHS {
            assert_refused(
                tool,
                path_args(tool, key, p),
                &format!("path \"{p}\" {PATH_RULE}"),
            );
        }
        for p in ACCEPTED_PATHS {
            let (e, _) = planned(tool, path_args(tool, key, p));
            assert_eq!(e.payload.get(key), Some(&json!(p)), "{tool} {key} {p}");
        }
    }
    // The exact seed text.
    assert_refused(
        "ailang-read",
        json!({"path": "/etc/hosts"}),
        "path \"/etc/hosts\" refused: it must be relative and non-empty, with no \"..\" segment and no leading \"-\"",
    );
}

#[test]
fn refused_paths_are_quoted_json_style_and_bounded() {
    assert_refused(
        "ailang-read",
        json!({"path": "/a\"b\\c\nd\u{1}"}),
        &format!("path \"/a\\\"b\\\\c\\nd\\u0001\" {PATH_RULE}"),
    );
    let long = format!("/{}", "x".repeat(10_000));
    let msg = refusal("ailang-read", json!({ "path": long }));
    assert_eq!(msg, format!("path \"/{}…\" {PATH_RULE}", "x".repeat(255)));
}

// ───────────────────────────── ailang-run ─────────────────────────────

#[test]
fn run_defaults_and_effect_selection() {
    assert_effect(
        "ailang-run",
        json!({"path": "main.ail"}),
        "Ailang.Run",
        json!({"op": "run", "path": "main.ail", "stdin": "", "argv": [], "caps": ["IO", "FS"]}),
        false,
    );
    assert_effect(
        "ailang-run",
        json!({"path": "env.ail", "caps": ["Env"]}),
        "Ailang.RunEnv",
        json!({"op": "run", "path": "env.ail", "stdin": "", "argv": [], "caps": ["Env"]}),
        false,
    );
    assert_effect(
        "ailang-run",
        json!({"path": "api.ail", "caps": ["Net"]}),
        "Ailang.RunNet",
        json!({"op": "run", "path": "api.ail", "stdin": "", "argv": [], "caps": ["Net"]}),
        false,
    );
    assert_effect(
        "ailang-run",
        json!({"path": "sum.ail", "caps": ["IO", "FS", "Env"], "argv": ["numbers.txt"], "stdin": "1\n2\n", "args_json": "{\"n\":3}"}),
        "Ailang.RunEnv",
        json!({"op": "run", "path": "sum.ail", "stdin": "1\n2\n", "argv": ["numbers.txt"], "caps": ["IO", "FS", "Env"], "args_json": "{\"n\":3}"}),
        false,
    );
    let (e, _) = planned(
        "ailang-run",
        json!({"path": "a.ail", "caps": ["Net", "IO"]}),
    );
    assert_eq!(e.effect, "Ailang.RunNet");
    let (e, _) = planned(
        "ailang-run",
        json!({"path": "a.ail", "caps": ["Declassify"]}),
    );
    assert_eq!(e.effect, "Ailang.Run");
    let (e, _) = planned(
        "ailang-run",
        json!({"path": "a.ail", "args_json": "\"data.txt\""}),
    );
    assert_eq!(e.payload["args_json"], "\"data.txt\"");
}

#[test]
fn run_args_json_must_hold_json() {
    for bad in ["{not json", "", "   ", "{\"a\":1} x", "[1,", "nul"] {
        assert_refused(
            "ailang-run",
            json!({"path": "a.ail", "args_json": bad}),
            "argument \"args_json\" must be a string holding JSON",
        );
    }
    for good in [
        "{}",
        "3",
        "\"x\"",
        "null",
        " [1, {\"a\": [true]}] ",
        "1e400",
    ] {
        planned("ailang-run", json!({"path": "a.ail", "args_json": good}));
    }
}

#[test]
fn run_stdin_limit_counts_bytes() {
    assert_refused(
        "ailang-run",
        json!({"path": "a.ail", "stdin": "x".repeat(65_537)}),
        "argument \"stdin\" is 65537 bytes; the limit is 65536",
    );
    planned(
        "ailang-run",
        json!({"path": "a.ail", "stdin": "x".repeat(65_536)}),
    );
    // UTF-8 bytes, not characters: 32 769 × "é" = 65 538 bytes.
    assert_refused(
        "ailang-run",
        json!({"path": "a.ail", "stdin": "é".repeat(32_769)}),
        "argument \"stdin\" is 65538 bytes; the limit is 65536",
    );
}

#[test]
fn run_argv_limits() {
    let items = |n: usize| Value::Array((0..n).map(|i| json!(format!("a{i}"))).collect());
    assert_refused(
        "ailang-run",
        json!({"path": "a.ail", "argv": items(33)}),
        "argument \"argv\" has 33 items; the limit is 32",
    );
    planned("ailang-run", json!({"path": "a.ail", "argv": items(32)}));
    assert_refused(
        "ailang-run",
        json!({"path": "a.ail", "argv": ["ok", "y".repeat(1025)]}),
        "an argv item is 1025 bytes; the limit is 1024",
    );
    planned(
        "ailang-run",
        json!({"path": "a.ail", "argv": ["y".repeat(1024)]}),
    );
    assert_refused(
        "ailang-run",
        json!({"path": "a.ail", "argv": ["ok", "a\u{0}b"]}),
        "an argv item contains a NUL byte",
    );
    // Item by item: the first item's NUL is reported before the second item's length.
    assert_refused(
        "ailang-run",
        json!({"path": "a.ail", "argv": ["\u{0}", "y".repeat(2000)]}),
        "an argv item contains a NUL byte",
    );
    for bad in [
        json!("a b"),
        json!(["a", 1]),
        json!({"0": "a"}),
        json!(null),
    ] {
        assert_refused(
            "ailang-run",
            json!({"path": "a.ail", "argv": bad}),
            "argument \"argv\" must be an array of strings",
        );
    }
}

#[test]
fn run_caps_rules() {
    assert_refused(
        "ailang-run",
        json!({"path": "a.ail", "caps": ["IO", "Process"]}),
        "unknown capability \"Process\"; caps admits only: Declassify, Env, FS, IO, Net",
    );
    assert_refused(
        "ailang-run",
        json!({"path": "a.ail", "caps": ["io"]}),
        "unknown capability \"io\"; caps admits only: Declassify, Env, FS, IO, Net",
    );
    assert_refused(
        "ailang-run",
        json!({"path": "a.ail", "caps": ["IO", "FS", "IO"]}),
        "capability \"IO\" is listed twice",
    );
    assert_refused(
        "ailang-run",
        json!({"path": "a.ail", "caps": ["Env", "IO", "Net"]}),
        "caps names both Env and Net; one run takes at most one of them",
    );
    assert_refused(
        "ailang-run",
        json!({"path": "a.ail", "caps": ["Net", "Env"]}),
        "caps names both Env and Net; one run takes at most one of them",
    );
    assert_refused(
        "ailang-run",
        json!({"path": "a.ail", "caps": "IO,Net"}),
        "argument \"caps\" must be an array of capability names",
    );
    assert_refused(
        "ailang-run",
        json!({"path": "a.ail", "caps": ["IO", 1]}),
        "argument \"caps\" must be an array of capability names",
    );
    assert_refused(
        "ailang-run",
        json!({"path": "a.ail", "caps": []}),
        "argument \"caps\" names no capability",
    );
}

#[test]
fn run_checks_arguments_in_declaration_order() {
    // path (declared first) before stdin, argv and caps.
    assert_refused(
        "ailang-run",
        json!({"path": "-x", "stdin": "x".repeat(70_000), "caps": ["Process"]}),
        &format!("path \"-x\" {PATH_RULE}"),
    );
    // args_json before stdin.
    assert_refused(
        "ailang-run",
        json!({"path": "a", "args_json": "{", "stdin": "x".repeat(70_000)}),
        "argument \"args_json\" must be a string holding JSON",
    );
    // argv before caps.
    assert_refused(
        "ailang-run",
        json!({"path": "a", "argv": ["\u{0}"], "caps": ["Process"]}),
        "an argv item contains a NUL byte",
    );
    // Within caps: per-item rules before the Env/Net rule.
    assert_refused(
        "ailang-run",
        json!({"path": "a", "caps": ["Env", "Net", "Net"]}),
        "capability \"Net\" is listed twice",
    );
}

// ───────────────────────────── ailang-cli ─────────────────────────────

#[test]
fn cli_ops() {
    for op in ["read", "write", "edit", "run", "summary", "", "Check"] {
        assert_refused(
            "ailang-cli",
            json!({"op": op, "path": "a.ail"}),
            &format!("op \"{op}\" is not an ailang-cli op; reads, writes and edits have their own tools, and run is ailang-run"),
        );
    }
    for op in [
        "agent_prompt",
        "ai_check",
        "axioms",
        "builtins_list",
        "builtins_show",
        "check",
        "devtools_prompt",
        "docs_search",
        "examples_list",
        "examples_search",
        "examples_show",
        "examples_tags",
        "fmt",
        "iface",
        "pkg_docs",
        "policy_check",
        "prompt",
        "test",
        "tree",
        "version",
    ] {
        assert_effect(
            "ailang-cli",
            json!({"op": op}),
            "Ailang.CLI",
            json!({"op": op}),
            false,
        );
    }
}

#[test]
fn cli_fmt_never_writes() {
    let text = "op \"fmt\" flag \"write\" writes the worktree; ailang-cli never writes (fmt without it returns the formatted text; write it with ailang-write)";
    assert_refused(
        "ailang-cli",
        json!({"op": "fmt", "path": "a.ail", "flags": {"write": ""}}),
        text,
    );
    assert_refused(
        "ailang-cli",
        json!({"op": "fmt", "path": "a.ail", "flags": {"json": "", "write": "true"}}),
        text,
    );
    assert_effect(
        "ailang-cli",
        json!({"op": "fmt", "path": "a.ail", "flags": {"json": ""}}),
        "Ailang.CLI",
        json!({"op": "fmt", "path": "a.ail", "flags": {"json": ""}}),
        false,
    );
    // Only fmt's write flag is refused by the plan; other ops' flags are the handler's business.
    planned(
        "ailang-cli",
        json!({"op": "check", "path": "a.ail", "flags": {"write": ""}}),
    );
    // Argument checks come before the cross-argument check.
    assert_refused(
        "ailang-cli",
        json!({"op": "fmt", "path": "/a.ail", "flags": {"write": ""}}),
        &format!("path \"/a.ail\" {PATH_RULE}"),
    );
}

#[test]
fn cli_flags_must_be_a_string_map() {
    for flags in [
        json!(["--limit"]),
        json!({"limit": 2}),
        json!({"json": null}),
        json!("json"),
        json!(null),
    ] {
        assert_refused(
            "ailang-cli",
            json!({"op": "examples_search", "query": "x", "flags": flags}),
            "argument \"flags\" must be an object of string values",
        );
    }
}

#[test]
fn cli_payload_is_the_arguments_verbatim() {
    let args = json!({"op": "check", "path": "world/contracts.ail", "flags": {"json": ""}});
    assert_effect("ailang-cli", args.clone(), "Ailang.CLI", args, false);
    let args = json!({"op": "test", "path": "t.ail", "package": "pkg/x", "module": "m", "query": "q", "flags": {}});
    assert_effect("ailang-cli", args.clone(), "Ailang.CLI", args, false);
    // The op is checked before the path.
    assert_refused(
        "ailang-cli",
        json!({"op": "read", "path": "../x"}),
        "op \"read\" is not an ailang-cli op; reads, writes and edits have their own tools, and run is ailang-run",
    );
}

// ───────────────────────────── happy paths ─────────────────────────────

#[test]
fn happy_payloads() {
    assert_effect(
        "ailang-read",
        json!({"path": "src/main.ail"}),
        "Workspace.Read",
        json!({"op": "read", "path": "src/main.ail"}),
        false,
    );
    assert_effect(
        "ailang-write",
        json!({"path": "a.ail", "content": "module a\n"}),
        "Workspace.Write",
        json!({"op": "write", "path": "a.ail", "content": "module a\n"}),
        false,
    );
    assert_effect(
        "ailang-edit",
        json!({"path": "a.ail", "old_text": "x", "new_text": ""}),
        "Workspace.Write",
        json!({"op": "edit", "path": "a.ail", "old_text": "x", "new_text": ""}),
        false,
    );
    assert_effect(
        "ailang-check",
        json!({"path": "a.ail"}),
        "Ailang.Check",
        json!({"op": "ai_check", "path": "a.ail"}),
        true,
    );
    assert_effect(
        "builtins-search",
        json!({"query": "readFile", "module": "std/fs"}),
        "Ailang.Discover",
        json!({"op": "builtins_list"}),
        true,
    );
    assert_effect(
        "builtins-search",
        json!({}),
        "Ailang.Discover",
        json!({"op": "builtins_list"}),
        true,
    );
    assert_effect(
        "examples-search",
        json!({"query": "pattern matching"}),
        "Ailang.Discover",
        json!({"op": "examples_search", "query": "pattern matching"}),
        false,
    );
}

#[test]
fn plan_documents_are_exact() {
    let read = load("ailang-read");
    let refused = read.plan_call(&json!({"path": "a", "limit": 5}));
    assert_eq!(
        refused.to_value(),
        json!({
            "plan": "world/effect-plan/v1",
            "effects": [],
            "finish": false,
            "result": {"ok": false, "refused": "unknown argument \"limit\"; ailang-read admits only: path"}
        })
    );
    assert_eq!(
        serde_json::to_string(&refused.to_value()).ok().as_deref(),
        Some("{\"effects\":[],\"finish\":false,\"plan\":\"world/effect-plan/v1\",\"result\":{\"ok\":false,\"refused\":\"unknown argument \\\"limit\\\"; ailang-read admits only: path\"}}")
    );
    let check = load("ailang-check");
    let effect = check.plan_call(&json!({"path": "hello.ail"}));
    assert_eq!(
        effect.to_value(),
        json!({
            "plan": PLAN_SEMANTIC_ID,
            "effects": [{
                "id": "e1",
                "effect": "Ailang.Check",
                "scope": "worktree",
                "cost": 1,
                "payload": {"op": "ai_check", "path": "hello.ail"}
            }],
            "finish": true,
            "result": null
        })
    );
    assert_eq!(
        refused.refusal(),
        Some("unknown argument \"limit\"; ailang-read admits only: path")
    );
    assert_eq!(effect.refusal(), None);
}

#[test]
fn planning_is_deterministic() {
    let inputs = [
        json!({"path": "main.ail", "caps": ["Env", "IO"], "argv": ["a"], "stdin": "s"}),
        json!({"path": "main.ail", "caps": ["Env", "Net"]}),
        json!({"zz": 1, "yy": 2, "path": "x"}),
        json!([1, 2]),
    ];
    for tool in TOOLS {
        let a = load(tool);
        let b = load(tool);
        assert_eq!(a, b);
        for input in &inputs {
            let p1 = a.plan_call(input);
            let p2 = b.plan_call(input);
            let p3 = a.clone().plan_call(&input.clone());
            assert_eq!(p1, p2);
            assert_eq!(p1, p3);
            assert_eq!(p1.to_value(), p2.to_value());
        }
    }
}

// ───────────────────────────── document validation ─────────────────────────────

/// Sets the value at a JSON pointer; a missing last key is added to its parent object.
fn with(mut doc: Value, pointer: &str, v: Value) -> Value {
    if let Some(slot) = doc.pointer_mut(pointer) {
        *slot = v;
        return doc;
    }
    let (parent, key) = pointer.rsplit_once('/').unwrap_or(("", pointer));
    match doc.pointer_mut(parent).and_then(Value::as_object_mut) {
        Some(m) => {
            m.insert(key.to_string(), v);
        }
        None => panic!("no {parent} object in document"),
    }
    doc
}

fn without(mut doc: Value, key: &str) -> Value {
    if let Some(m) = doc.as_object_mut() {
        m.remove(key);
    }
    doc
}

#[test]
fn document_validation_failures() {
    let read = raw("ailang-read");
    assert_eq!(
        load_err(with(read.clone(), "/plan/arguments/0/rules/0/rule", json!("frobnicate"))),
        "transition \"ailang-read\": plan.arguments[0].rules[0].rule is \"frobnicate\", which world/plan-language/v1 does not define (rules for a string argument: relative-path, path-glob, max-bytes, min-bytes, no-nul, json, one-of)"
    );
    assert_eq!(
        load_err(with(read.clone(), "/plan/arguments/0/rules/0/rule", json!("max-items"))),
        "transition \"ailang-read\": plan.arguments[0].rules[0].rule is \"max-items\", which does not apply for a string argument (rules for a string argument: relative-path, path-glob, max-bytes, min-bytes, no-nul, json, one-of)"
    );
    for bad in [json!(-1), json!(1.5), json!("1"), json!(null)] {
        assert_eq!(
            load_err(with(read.clone(), "/declaredEffects/0/cost", bad)),
            "transition \"ailang-read\": declaredEffects[0].cost must be a non-negative integer"
        );
    }
    assert_eq!(
        load_err(with(read.clone(), "/access/cost", json!(-3))),
        "transition \"ailang-read\": access.cost must be a non-negative integer"
    );
    assert_eq!(
        load_err(with(read.clone(), "/plan/effect/cost", json!(1.0))),
        "transition \"ailang-read\": plan.effect.cost must be a non-negative integer"
    );
    assert_eq!(
        load_err(without(read.clone(), "id")),
        "transition document: id is missing"
    );
    assert_eq!(
        load_err(with(read.clone(), "/id", json!("bad id"))),
        "transition document: id must match ^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$"
    );
    assert_eq!(
        load_err(with(read.clone(), "/plan/language", json!("world/plan-language/v2"))),
        "transition \"ailang-read\": plan.language is \"world/plan-language/v2\"; this interpreter speaks only world/plan-language/v1"
    );
    let mut no_lang = read.clone();
    if let Some(p) = no_lang.pointer_mut("/plan").and_then(Value::as_object_mut) {
        p.remove("language");
    }
    assert_eq!(
        load_err(no_lang),
        "transition \"ailang-read\": plan.language is missing (use \"world/plan-language/v1\")"
    );
    assert_eq!(
        load_err(with(read.clone(), "/plan/script", json!("rm -rf /"))),
        "transition \"ailang-read\": plan has key \"script\", which world/plan-language/v1 does not define here (keys here: language, arguments, checks, effect, payload)"
    );
    assert_eq!(
        load_err(with(read.clone(), "/plan/arguments/0/maxLength", json!(3))),
        "transition \"ailang-read\": plan.arguments[0] has key \"maxLength\", which world/plan-language/v1 does not define here (keys here: name, type, required, default, typeMessage, rules)"
    );
    assert_eq!(
        load_err(with(read.clone(), "/plan/arguments/0/type", json!("path"))),
        "transition \"ailang-read\": plan.arguments[0].type is \"path\", which world/plan-language/v1 does not define (types: string, string-array, string-map, boolean, integer, object)"
    );
    assert_eq!(
        load_err(with(read.clone(), "/extra", json!(1))),
        "transition \"ailang-read\": document has key \"extra\", which world/transition/v1 does not define (keys: id, title, description, inputSchema, outputSchema, access, declaredEffects, finish, plan)"
    );
    // The plan may only request declared effects, and every declared effect must be reachable.
    assert_eq!(
        load_err(with(read.clone(), "/plan/effect/effect", json!("Workspace.Write"))),
        "transition \"ailang-read\": plan.effect plans effect Workspace.Write at scope \"worktree\" cost 1, which declaredEffects does not list"
    );
    let run = raw("ailang-run");
    let mut fewer = run.clone();
    if let Some(cases) = fewer
        .pointer_mut("/plan/effect/cases")
        .and_then(Value::as_array_mut)
    {
        cases.pop();
    }
    assert_eq!(
        load_err(fewer),
        "transition \"ailang-run\": declaredEffects[2] (Ailang.RunNet at scope \"worktree\" cost 1) is never planned by the plan section; declare exactly the effects the plan may request"
    );
    assert_eq!(
        load_err(with(read.clone(), "/access/effect", json!("Ailang.Run"))),
        "transition \"ailang-read\": access.effect is \"Ailang.Run\", which declaredEffects does not name"
    );
    // Defaults must pass their own rules.
    assert_eq!(
        load_err(with(run.clone(), "/plan/arguments/4/default", json!(["IO", "Process"]))),
        "transition \"ailang-run\": plan.arguments[4].default is refused by the argument's own type and rules: unknown capability \"Process\"; caps admits only: Declassify, Env, FS, IO, Net"
    );
    // Message templates may only use the placeholders their rule provides.
    assert_eq!(
        load_err(with(run.clone(), "/plan/arguments/4/rules/1/message", json!("{value} is empty"))),
        "transition \"ailang-run\": plan.arguments[4].rules[1].message uses placeholder \"{value}\", which is not available here (available: {tool}, {argument}, {actual}, {limit})"
    );
    // The published schema must match the plan's arguments.
    assert_eq!(
        load_err(with(read.clone(), "/inputSchema/required", json!([]))),
        "transition \"ailang-read\": inputSchema.required must list exactly the plan's required arguments; \"path\" is required in the plan"
    );
    assert_eq!(
        load_err(with(read.clone(), "/inputSchema/additionalProperties", json!(true))),
        "transition \"ailang-read\": inputSchema.additionalProperties must be false (the plan refuses every argument it does not declare)"
    );
    assert_eq!(
        load_err(with(read.clone(), "/inputSchema/properties/extra", json!({"type": "string"}))),
        "transition \"ailang-read\": inputSchema.properties has \"extra\", which the plan does not declare (the plan would refuse it)"
    );
    // Conditions name declared arguments.
    assert_eq!(
        load_err(with(run.clone(), "/plan/effect/cases/0/when/0/argument", json!("capz"))),
        "transition \"ailang-run\": plan.effect.cases[0].when[0].argument names \"capz\", which is not a declared argument"
    );
    assert_eq!(
        load_err(with(read.clone(), "/finish", json!(3))),
        "transition \"ailang-read\": finish must be a string or null"
    );
}

#[test]
fn not_json_and_not_object() {
    match Transition::from_slice(b"{\"id\":") {
        Err(TransitionError::NotJson(_)) => {}
        other => panic!("expected NotJson, got {other:?}"),
    }
    match Transition::from_value(json!(["ailang-read"])) {
        Err(e @ TransitionError::NotObject) => {
            assert_eq!(e.to_string(), "transition document must be a JSON object")
        }
        other => panic!("expected NotObject, got {other:?}"),
    }
}

// ───────────────────────────── a tool with no code ─────────────────────────────

fn docs_read() -> Transition {
    let doc = json!({
        "id": "docs-read",
        "title": "Read a document",
        "description": "Read one file under docs/ in this episode's worktree.",
        "inputSchema": {"type": "object", "additionalProperties": false, "required": ["path"],
                        "properties": {"path": {"type": "string", "description": "File under docs/"}}},
        "outputSchema": {"type": "object", "required": ["world"],
                         "properties": {"ok": {"type": "boolean"}, "refused": {"type": "string"},
                                        "world": {"type": "object"}}},
        "access": {"effect": "Workspace.Read", "scope": "worktree", "cost": 0},
        "declaredEffects": [{"effect": "Workspace.Read", "scope": "worktree", "cost": 1}],
        "plan": {
            "language": "world/plan-language/v1",
            "arguments": [
                {"name": "path", "type": "string", "required": true,
                 "rules": [{"rule": "relative-path"}, {"rule": "path-glob", "globs": ["docs/**"]}]}
            ],
            "effect": {"effect": "Workspace.Read", "scope": "worktree", "cost": 1},
            "payload": {"fields": {"op": {"const": "read"}, "path": {"argument": "path"}}}
        }
    });
    Transition::from_value(doc).unwrap_or_else(|e| panic!("docs-read: {e}"))
}

#[test]
fn docs_only_read_tool() {
    let t = docs_read();
    match t.plan_call(&json!({"path": "docs/guide/intro.md"})) {
        Plan::Effect { effect, finish } => {
            assert_eq!(effect.effect, "Workspace.Read");
            assert_eq!(
                effect.payload,
                obj(json!({"op": "read", "path": "docs/guide/intro.md"}))
            );
            assert!(!finish);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        t.plan_call(&json!({"path": "src/main.rs"})).refusal(),
        Some("path \"src/main.rs\" refused: it must match one of: docs/**")
    );
    assert_eq!(
        t.plan_call(&json!({"path": "docs/../secret"})).refusal(),
        Some(format!("path \"docs/../secret\" {PATH_RULE}").as_str())
    );
    // A path-glob with no relative-path before it is refused at load time.
    let mut doc = t.to_value().clone();
    if let Some(rules) = doc
        .pointer_mut("/plan/arguments/0/rules")
        .and_then(Value::as_array_mut)
    {
        rules.remove(0);
    }
    assert_eq!(
        load_err(doc),
        "transition \"docs-read\": plan.arguments[0].rules[0] is a path-glob rule with no relative-path rule before it in the same list; globs match text, so the relative-path rule must refuse \"..\" segments first"
    );
}

#[test]
fn a_path_glob_with_zero_directories_between_matches_as_the_deny_globs_do() {
    let mut doc = docs_read().to_value().clone();
    *doc.pointer_mut("/plan/arguments/0/rules/1/globs").unwrap() = json!(["docs/**/*.md"]);
    let t = Transition::from_value(doc).unwrap();
    for path in ["docs/a.md", "docs/x/y/a.md"] {
        assert!(
            matches!(t.plan_call(&json!({"path": path})), Plan::Effect { .. }),
            "{path}"
        );
    }
    assert_eq!(
        t.plan_call(&json!({"path": "docs/a.txt"})).refusal(),
        Some("path \"docs/a.txt\" refused: it must match one of: docs/**/*.md")
    );
}

#[test]
fn path_glob_with_a_reserved_character_is_refused_at_load() {
    let mut doc = docs_read().to_value().clone();
    *doc.pointer_mut("/plan/arguments/0/rules/1/globs").unwrap() = json!(["docs/**", "*.{md,txt}"]);
    assert_eq!(
        load_err(doc),
        "transition \"docs-read\": plan.arguments[0].rules[1].globs[1] uses the reserved character \"{\"; worldd globs have only *, ** and ? (no classes, alternatives or escapes)"
    );
}

// ───────────────────────────── never panics ─────────────────────────────

/// A small deterministic generator (xorshift64*), so the loop needs no extra crates.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        let i = (self.next() % xs.len() as u64) as usize;
        &xs[i]
    }
    fn string(&mut self) -> String {
        let pieces = [
            "", "a", "..", "/", "-", "docs/", "\u{0}", "é", "\"", "\\", "\n", "IO", "Env", "Net",
            "fmt", "write", "check", "{", "}", "[1]", "{}", "../", "/..", "x.ail", "Process",
        ];
        let n = self.next() % 6;
        let mut s = String::new();
        for _ in 0..n {
            s.push_str(self.pick::<&str>(&pieces));
        }
        if self.next() % 50 == 0 {
            s.push_str(&"z".repeat((self.next() % 70_000) as usize));
        }
        s
    }
    fn value(&mut self, depth: u32) -> Value {
        match self.next() % if depth > 2 { 6 } else { 9 } {
            0 => Value::Null,
            1 => json!(self.next() % 2 == 0),
            2 => json!(self.next() as i64),
            3 => json!(-1.5),
            4 | 5 => json!(self.string()),
            6 => Value::Array(
                (0..self.next() % 40)
                    .map(|_| self.value(depth + 1))
                    .collect(),
            ),
            7 => Value::Array((0..self.next() % 6).map(|_| json!(self.string())).collect()),
            _ => {
                let mut m = Map::new();
                for _ in 0..self.next() % 4 {
                    let k = self.string();
                    let v = if self.next() % 2 == 0 {
                        json!(self.string())
                    } else {
                        self.value(depth + 1)
                    };
                    m.insert(k, v);
                }
                Value::Object(m)
            }
        }
    }
}

#[test]
fn plan_never_panics_on_generated_arguments() {
    let keys = [
        "path",
        "content",
        "old_text",
        "new_text",
        "args_json",
        "stdin",
        "argv",
        "caps",
        "query",
        "module",
        "op",
        "package",
        "flags",
        "limit",
        "PATH",
        "",
    ];
    let tools: Vec<Transition> = TOOLS.iter().map(|n| load(n)).chain([docs_read()]).collect();
    let mut g = Gen(0x9e37_79b9_7f4a_7c15);
    let mut planned_effects = 0;
    for round in 0..400 {
        let args = if round % 25 == 0 {
            g.value(0)
        } else {
            let mut m = Map::new();
            for _ in 0..g.next() % 5 {
                let k = g.pick(&keys).to_string();
                let v = match g.next() % 3 {
                    0 => json!(g.string()),
                    _ => g.value(0),
                };
                m.insert(k, v);
            }
            if g.next() % 2 == 0 {
                m.insert(
                    "path".into(),
                    json!(g.pick(&["a.ail", "docs/x", "ok/x.ail"]).to_string()),
                );
            }
            if g.next() % 2 == 0 {
                m.insert(
                    "op".into(),
                    json!(g.pick(&["check", "fmt", "read"]).to_string()),
                );
            }
            Value::Object(m)
        };
        for t in &tools {
            let p = t.plan_call(&args);
            assert_eq!(p, t.plan_call(&args), "deterministic");
            match &p {
                Plan::Refused { message } => assert!(!message.is_empty()),
                Plan::Effect { effect, .. } => {
                    planned_effects += 1;
                    assert_eq!(effect.id, "e1");
                    assert!(t.declared_effects.contains(&EffectSpec {
                        effect: effect.effect.clone(),
                        scope: effect.scope.clone(),
                        cost: effect.cost
                    }));
                }
            }
            let v = p.to_value();
            assert_eq!(v["plan"], PLAN_SEMANTIC_ID);
        }
    }
    assert!(
        planned_effects > 20,
        "the generator should also reach effects ({planned_effects})"
    );
}
