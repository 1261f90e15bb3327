//! Attack: ailang-cli `flags` keys that are not plain flag names. The `write` check compared
//! whole names (`trim_start_matches('-')`, any case), so `{"write ": ""}` or
//! `{"write=true": ""}` reached the binary, which the policy-tool hands each flag as
//! `--name=value`: `--write=true=` is the write flag to a command line that splits at the first
//! `=`. A key that names `write` however spelled is refused as the write flag, any other key
//! that is not a plain flag name (lower-case letters, digits and `-`, not first) is refused as
//! such; both are declined by the preflight (nothing spent) and refused by the effect if they
//! come anyway. The binary never runs.

mod common;

use common::*;
use handler_kit::serde_json::{json, Value};
use handler_kit::{EffectHandler, JsonObject, Preflight};
use worldd_ailang::{CLI, WRITE_FLAG};

fn payload(key: &str) -> Value {
    let mut flags = JsonObject::new();
    flags.insert(key.into(), json!(""));
    json!({"op": "fmt", "path": "a.ail", "flags": flags})
}

fn not_plain(key: &str) -> String {
    format!(
        "flag {} is not a plain flag name (lower-case letters, digits and \"-\", not first); nothing ran",
        Value::from(key)
    )
}

#[test]
fn flag_keys_that_are_not_plain_names_are_declined_and_the_binary_never_runs() {
    let f = Fixture::new();
    f.put("a.ail", "x\n");
    let mut cases: Vec<(&str, String)> = Vec::new();
    for key in [
        "write",
        "Write",
        "--write",
        "write ",
        " write",
        "write=true",
        "WRITE=1",
        "-write\t",
    ] {
        cases.push((key, WRITE_FLAG.to_string()));
    }
    for key in [
        "json ",
        "JSON",
        "-json",
        "",
        "a=b",
        "limit=5",
        "j\u{0}son",
        "jsön",
    ] {
        cases.push((key, not_plain(key)));
    }
    for (key, why) in cases {
        let p = payload(key);
        match f.handler.preflight(&f.request(CLI, p.clone())) {
            Preflight::Decline(answer) => assert_eq!(
                Value::Object(answer),
                json!({"ok": false, "refused": why}),
                "{key:?}"
            ),
            other => panic!("{key:?}: not declined: {other:?}"),
        }
        // A daemon that skips the preflight still runs nothing.
        assert_eq!(
            f.failed(CLI, p),
            format!("broker: Ailang.CLI refused: {why}"),
            "{key:?}"
        );
    }
    assert!(f.log().is_empty(), "the binary ran: {:?}", f.log());
    assert_eq!(
        WRITE_FLAG,
        "flag \"write\" writes the worktree; Ailang.CLI never writes (use Workspace.Write)"
    );
}

/// Plain names pass to the binary, whose policy-tool judges which an op admits.
#[test]
fn plain_flag_names_still_reach_the_binary() {
    let f = Fixture::new();
    f.put("a.ail", "x\n");
    let request = f.request(
        CLI,
        json!({"op": "check", "path": "a.ail", "flags": {"json": "", "strict-syntax": ""}}),
    );
    assert!(matches!(f.handler.preflight(&request), Preflight::Proceed));
    let out = f.ok(
        CLI,
        json!({"op": "check", "path": "a.ail", "flags": {"json": "", "strict-syntax": ""}}),
    );
    assert_eq!(out["ok"], true, "{out:?}");
}
