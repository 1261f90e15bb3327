//! The finish functions `check-report` and `builtins-inventory`: good input, bad input, and
//! real handler output from the stand-in.

mod common;

use common::*;
use handler_kit::serde_json::{json, Value};
use handler_kit::{EffectHandler, FinishInput, JsonObject};
use worldd_ailang::{BUILTINS_INVENTORY, CHECK, CHECK_REPORT, DISCOVER};

fn input(args: Value, output: Value) -> FinishInput {
    FinishInput {
        args,
        output: output.as_object().unwrap().clone(),
    }
}

fn finish(f: &Fixture, name: &str, input: FinishInput) -> Value {
    Value::Object(f.handler.finish(name, input).unwrap())
}

fn refused(message: &str) -> Value {
    json!({"ok": false, "status": "ok", "refused": message})
}

#[test]
fn check_report_reshapes_a_real_report() {
    let f = Fixture::new();
    f.put("hello.ail", HELLO);
    f.put("bad.ail", "-- standin: type-error\nmodule bad\n");
    let out = f.ok(CHECK, json!({"op": "ai_check", "path": "hello.ail"}));
    assert_eq!(
        finish(
            &f,
            CHECK_REPORT,
            input(json!({"path": "hello.ail"}), Value::Object(out))
        ),
        json!({"ok": true, "passed": true, "error_count": 0, "errors": []})
    );
    let out = f.ok(CHECK, json!({"op": "ai_check", "path": "bad.ail"}));
    assert_eq!(out["ok"], false, "the check ran and found errors");
    assert_eq!(
        finish(
            &f,
            CHECK_REPORT,
            input(json!({"path": "bad.ail"}), Value::Object(out))
        ),
        json!({"ok": true, "passed": false, "error_count": 1, "errors": [
            {"code": "TC_MISMATCH", "file": "bad.ail",
             "message": "bad.ail:3:5: type mismatch: expected int, found string"}]})
    );
}

#[test]
fn check_report_without_a_report_is_a_refusal_never_a_success() {
    let f = Fixture::new();
    f.put("crash.ail", "-- standin: no-report\n");
    let out = f.ok(CHECK, json!({"op": "ai_check", "path": "crash.ail"}));
    assert_eq!(
        finish(&f, CHECK_REPORT, input(json!({}), Value::Object(out))),
        refused("ai_check returned no check report; stderr: ai_check: internal error: the checker crashed")
    );
    // The policy-tool's own refusal passes through.
    let out = f.ok(CHECK, json!({"op": "ai_check", "path": "nope.ail"}));
    assert_eq!(
        finish(&f, CHECK_REPORT, input(json!({}), Value::Object(out))),
        refused("ai_check nope.ail: open nope.ail: no such file or directory")
    );
    let bad = [
        json!({"ok": true}),
        json!({"ok": true, "stdout": "not json", "stderr": ""}),
        json!({"ok": true, "stdout": "{\"check\":{\"passed\":true,\"error_count\":\"0\",\"errors\":[]}}"}),
        json!({"ok": true, "stdout": "{\"check\":{\"passed\":true,\"error_count\":0,\"errors\":[1]}}"}),
        json!({"ok": true, "stdout": "{\"check\":{\"passed\":true,\"error_count\":0}}"}),
        json!({"ok": true, "stdout": "{\"file\":\"a\"}"}),
    ];
    for output in bad {
        assert_eq!(
            finish(&f, CHECK_REPORT, input(json!({}), output.clone())),
            refused("ai_check returned no check report; stderr: (empty)"),
            "{output}"
        );
    }
}

fn inventory(f: &Fixture) -> JsonObject {
    f.ok(DISCOVER, json!({"op": "builtins_list"}))
}

#[test]
fn builtins_inventory_filters_by_query_and_module() {
    let f = Fixture::new();
    let out = Value::Object(inventory(&f));
    // No filter: the full inventory.
    let all = finish(&f, BUILTINS_INVENTORY, input(json!({}), out.clone()));
    assert_eq!(all["count"], 22);
    assert_eq!(
        all["matches"][0],
        json!({"name": "readFile", "module": "std/fs", "effect": "FS"})
    );
    // query: case-insensitive substring of name, module or effect.
    let q = finish(
        &f,
        BUILTINS_INVENTORY,
        input(json!({"query": "READFILE"}), out.clone()),
    );
    assert_eq!(
        q,
        json!({"count": 1, "matches": [{"name": "readFile", "module": "std/fs", "effect": "FS"}]})
    );
    let q = finish(
        &f,
        BUILTINS_INVENTORY,
        input(json!({"query": "net"}), out.clone()),
    );
    assert_eq!(q["count"], 2, "{q}");
    // module only (no cap without a query).
    let m = finish(
        &f,
        BUILTINS_INVENTORY,
        input(json!({"module": "STD/String"}), out.clone()),
    );
    assert_eq!(m["count"], 6);
    // Both.
    let b = finish(
        &f,
        BUILTINS_INVENTORY,
        input(json!({"module": "std/fs", "query": "file"}), out.clone()),
    );
    let names: Vec<&str> = b["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["readFile", "writeFile", "fileExists"]);
    // At most 10 matches when a query is given.
    let capped = finish(
        &f,
        BUILTINS_INVENTORY,
        input(json!({"query": "std"}), out.clone()),
    );
    assert_eq!(capped["count"], 10);
    assert_eq!(capped["matches"].as_array().unwrap().len(), 10);
    // No match is an empty, successful answer (the inventory itself was fine).
    let none = finish(&f, BUILTINS_INVENTORY, input(json!({"query": "zzz"}), out));
    assert_eq!(none, json!({"count": 0, "matches": []}));
}

#[test]
fn a_bad_inventory_is_a_refusal_never_an_empty_success() {
    let f = Fixture::new();
    let cases = [
        ("truncated", "builtins_list returned a truncated inventory: the header says 22 builtins, 5 are listed; stderr: (empty)"),
        ("garbled", "builtins_list printed an unreadable inventory line \"??? this is not an inventory line\" (expected \"name [effect] module\"); stderr: (empty)"),
        ("empty", "builtins_list printed nothing; stderr: (empty)"),
    ];
    for (mode, message) in cases {
        f.control(json!({"builtins": mode}));
        let out = Value::Object(inventory(&f));
        assert_eq!(
            finish(&f, BUILTINS_INVENTORY, input(json!({"query": "x"}), out)),
            refused(message)
        );
    }
    let by_hand = [
        (json!({"ok": true, "stdout": "Total: 0 builtins\n", "stderr": "warn"}), "builtins_list reported an empty inventory (Total: 0 builtins); stderr: warn"),
        (json!({"ok": true, "stdout": "readFile [FS] std/fs\n"}), "builtins_list printed no \"Total: N builtins\" header (first line \"readFile [FS] std/fs\"); stderr: (empty)"),
        (json!({"ok": true, "stdout": "Total: 1 builtins\nreadFile [FS] std fs\n"}), "builtins_list printed an unreadable inventory line \"readFile [FS] std fs\" (expected \"name [effect] module\"); stderr: (empty)"),
        (json!({"ok": true, "stdout": "Total: 1 builtins\nreadFile FS std/fs\n"}), "builtins_list printed an unreadable inventory line \"readFile FS std/fs\" (expected \"name [effect] module\"); stderr: (empty)"),
        (json!({"ok": true}), "builtins_list returned no inventory; stderr: (empty)"),
        (json!({"ok": false, "refused": "policy says no"}), "policy says no"),
    ];
    for (output, message) in by_hand {
        assert_eq!(
            finish(&f, BUILTINS_INVENTORY, input(json!({}), output)),
            refused(message)
        );
    }
    let out = json!({"ok": true, "stdout": "Total: 1 builtins\nreadFile [FS] std/fs\n"});
    assert_eq!(
        finish(&f, BUILTINS_INVENTORY, input(json!({"query": 3}), out)),
        refused("builtins-search arguments \"query\" and \"module\" must be strings")
    );
}

#[test]
fn finish_functions_are_deterministic_and_named() {
    let f = Fixture::new();
    let out = Value::Object(inventory(&f));
    let a = finish(
        &f,
        BUILTINS_INVENTORY,
        input(json!({"query": "e"}), out.clone()),
    );
    let b = finish(&f, BUILTINS_INVENTORY, input(json!({"query": "e"}), out));
    assert_eq!(a, b);
    assert_eq!(
        f.handler
            .finish("nope", input(json!({}), json!({})))
            .unwrap_err(),
        "no finish function \"nope\""
    );
}
