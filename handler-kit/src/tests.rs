//! Unit tests of the authoring helpers: every text, in the plugins' words.

use handler_api::serde_json::{json, Value};

use super::config;
use super::manifest::embedded_transitions;
use super::output::{errno_text, refusal, stamped, Stamp};
use super::request::{check, json_quote, op_not_allowed, Checked, Quote, Rules};
use crate::{Outcome, Request};

const RULES: Rules<'static> = Rules {
    ops: &["read", "write"],
    known_keys: &["op", "path", "content"],
    quote: Quote::Plain,
};

const JSON_RULES: Rules<'static> = Rules {
    quote: Quote::Json,
    ..RULES
};

fn request(scope: &str, worktree: Option<&str>, payload: Value) -> Request {
    Request {
        invocation_id: "inv-1".into(),
        episode: "ep".into(),
        worktree: worktree.map(str::to_string),
        effect: "Demo.Write".into(),
        scope: scope.into(),
        cost: 1,
        payload,
        deadline_ms: 10_000,
    }
}

fn failed(outcome: Outcome) -> String {
    match outcome {
        Outcome::Failed { message } => message,
        other => panic!("expected failed, got {other:?}"),
    }
}

fn check_err(request: &Request, rules: &Rules<'_>) -> String {
    failed(check(request, rules).expect_err("the check refuses"))
}

fn checked<'r>(request: &'r Request, rules: &Rules<'_>) -> Checked<'r> {
    check(request, rules).unwrap_or_else(|o| panic!("{o:?}"))
}

#[test]
fn quotes() {
    assert_eq!(Quote::Plain.quote("a\"b"), "\"a\"b\"");
    assert_eq!(Quote::Json.quote("a\"b"), "\"a\\\"b\"");
    assert_eq!(json_quote("x\n"), "\"x\\n\"");
    let long = "é".repeat(200);
    let q = json_quote(&long);
    assert!(q.ends_with("…\""), "{q}");
    assert_eq!(q.len(), 1 + 256 + "…".len() + 1);
    assert_eq!(
        json_quote(&"a".repeat(256)),
        format!("\"{}\"", "a".repeat(256))
    );
}

#[test]
fn check_refuses_in_order_with_the_plugins_texts() {
    let wt = Some("/w");
    assert_eq!(
        check_err(&request("x", wt, json!(1)), &RULES),
        "broker: Demo.Write refused: scope \"x\" is not \"worktree\""
    );
    assert_eq!(
        check_err(&request("x\"", wt, json!(1)), &JSON_RULES),
        "broker: Demo.Write refused: scope \"x\\\"\" is not \"worktree\""
    );
    assert_eq!(
        check_err(&request("worktree", wt, json!([])), &RULES),
        "broker: Demo.Write refused: payload is not a JSON object"
    );
    assert_eq!(
        check_err(
            &request("worktree", wt, json!({"OP": "read", "op": 1})),
            &RULES
        ),
        "broker: Demo.Write refused: key \"OP\" aliases \"op\""
    );
    assert_eq!(
        check_err(&request("worktree", wt, json!({"Path": "a"})), &JSON_RULES),
        "broker: Demo.Write refused: key \"Path\" aliases \"path\""
    );
    assert_eq!(
        check_err(&request("worktree", wt, json!({"op": 1})), &RULES),
        "broker: Demo.Write refused: payload key \"op\" must be a string"
    );
    assert_eq!(
        check_err(&request("worktree", wt, json!({"path": "a"})), &RULES),
        "broker: Demo.Write refused: payload has no \"op\""
    );
    assert_eq!(
        check_err(&request("worktree", wt, json!({"op": "edit"})), &RULES),
        "broker: Demo.Write refuses op \"edit\": not in this effect's op allowlist"
    );
    assert_eq!(
        failed(op_not_allowed("Demo.Write", "a\"", Quote::Json)),
        "broker: Demo.Write refuses op \"a\\\"\": not in this effect's op allowlist"
    );
    // Unknown keys that are no alias pass the common checks.
    let r = request("worktree", wt, json!({"op": "read", "extra": 1}));
    let c = checked(&r, &RULES);
    assert_eq!((c.effect, c.op), ("Demo.Write", "read"));
    assert_eq!(c.payload.len(), 2);
}

#[test]
fn the_worktree_must_be_bound_and_absolute() {
    let r = request("worktree", None, json!({"op": "read"}));
    assert_eq!(
        failed(checked(&r, &RULES).worktree().unwrap_err()),
        "broker: Demo.Write refused: the request binds no worktree (scope \"worktree\" needs one)"
    );
    let r = request("worktree", Some("rel/wt"), json!({"op": "read"}));
    assert_eq!(
        failed(checked(&r, &RULES).worktree().unwrap_err()),
        "broker: Demo.Write refused: the bound worktree is not an absolute path"
    );
    let r = request("worktree", Some("/srv/wt"), json!({"op": "read"}));
    assert_eq!(checked(&r, &RULES).worktree().unwrap(), "/srv/wt");
    let gone = std::io::Error::from_raw_os_error(2);
    assert_eq!(
        failed(checked(&r, &RULES).worktree_unopenable(&gone)),
        format!(
            "broker: Demo.Write failed: the episode's worktree cannot be opened: {}",
            errno_text(&gone)
        )
    );
}

#[test]
fn payload_keys_and_string_arguments() {
    let r = request(
        "worktree",
        Some("/w"),
        json!({"op": "write", "path": "a", "content": 3, "more": true}),
    );
    let c = checked(&r, &RULES);
    assert_eq!(
        failed(c.only_keys(&RULES.known_keys[..2]).unwrap_err()),
        "broker: Demo.Write refused: op \"write\" takes no payload key \"content\""
    );
    assert_eq!(c.string("path").unwrap(), "a");
    assert_eq!(c.optional_string("nope").unwrap(), None);
    assert_eq!(
        failed(c.string("nope").unwrap_err()),
        "broker: Demo.Write refused: op \"write\" needs payload key \"nope\""
    );
    assert_eq!(
        failed(c.optional_string("content").unwrap_err()),
        "broker: Demo.Write refused: payload key \"content\" of op \"write\" must be a string"
    );
    assert_eq!(
        failed(c.refused("anything")),
        "broker: Demo.Write refused: anything"
    );
    let c = checked(&r, &JSON_RULES);
    assert_eq!(
        failed(c.string("nope").unwrap_err()),
        "broker: Demo.Write refused: op \"write\" needs payload key \"nope\""
    );
}

#[test]
fn outputs_are_stamped() {
    let stamp = Stamp::new("sha256:t", "d");
    assert_eq!((stamp.tool(), stamp.policy_digest()), ("sha256:t", "d"));
    let Outcome::Ok { output } = stamp.refuse("no") else {
        panic!()
    };
    assert_eq!(
        Value::Object(output.clone()),
        json!({"ok": false, "refused": "no", "tool": "sha256:t", "policy_digest": "d"})
    );
    let keys: Vec<&str> = output.keys().map(String::as_str).collect();
    assert_eq!(keys.len(), 4);
    let mut fields = refusal("x");
    fields.insert("tool".into(), json!("forged"));
    let Outcome::Ok { output } = stamped(fields, "sha256:t", "d") else {
        panic!()
    };
    assert_eq!(output["tool"], json!("sha256:t"));
    assert_eq!(output["refused"], json!("x"));
}

#[cfg(target_os = "linux")]
#[test]
fn errno_text_is_go_style() {
    assert_eq!(
        errno_text(&std::io::Error::from_raw_os_error(2)),
        "no such file or directory"
    );
    assert_eq!(
        errno_text(&std::io::Error::from_raw_os_error(36)),
        "file name too long"
    );
    assert_eq!(
        errno_text(&std::io::Error::other("Custom thing")),
        "custom thing"
    );
    assert_eq!(errno_text(&std::io::Error::other("")), "");
}

#[test]
fn config_objects() {
    let keys = ["a", "b"];
    assert!(config::object(&Value::Null, "demo", &keys)
        .unwrap()
        .is_empty());
    let v = json!({"a": 1});
    assert_eq!(config::object(&v, "demo", &keys).unwrap()["a"], json!(1));
    assert_eq!(
        config::object(&json!([]), "demo", &keys).unwrap_err(),
        "demo config must be a JSON object"
    );
    assert_eq!(
        config::object(&json!({"a": 1, "c": 2}), "demo", &keys).unwrap_err(),
        "demo config: unknown key \"c\"; demo accepts only: a, b"
    );
    assert_eq!(config::json_string("a\"\u{1}"), "\"a\\\"\\u0001\"");
}

#[test]
fn embedded_transitions_parse_in_order_and_name_the_bad_file() {
    assert_eq!(
        embedded_transitions(&[("a.json", "{\"id\":\"a\"}"), ("b.json", "[]")]).unwrap(),
        vec![json!({"id": "a"}), json!([])]
    );
    let err = embedded_transitions(&[("a.json", "{}"), ("b.json", "{")]).unwrap_err();
    assert!(
        err.starts_with("embedded transition b.json is not valid JSON: "),
        "{err}"
    );
}

#[cfg(feature = "identity")]
mod identity {
    use crate::identity::{library_path, sha256_file, sha256_hex, tool_ref_at, ToolSource};

    #[test]
    fn sha256_helpers() {
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let dir = std::env::temp_dir().join(format!("handler-api-sha-{}", std::process::id()));
        std::fs::write(&dir, vec![7u8; 200_000]).unwrap();
        let from_file = sha256_file(&dir).unwrap();
        std::fs::remove_file(&dir).unwrap();
        assert_eq!(from_file, sha256_hex(vec![7u8; 200_000]));
    }

    fn anchor() {}

    fn ours() -> &'static (String, ToolSource) {
        crate::tool_ref!()
    }

    #[test]
    fn the_tool_ref_names_the_file_holding_the_anchor() {
        // Linked statically into this test executable: the executable.
        let exe = std::env::current_exe().unwrap();
        let found = library_path(anchor as fn() as *const ()).unwrap();
        assert_eq!(found.canonicalize().unwrap(), exe.canonicalize().unwrap());
        let (tool, source) = ours();
        let ToolSource::File(path) = source else {
            panic!("{source:?}")
        };
        assert_eq!(path.canonicalize().unwrap(), exe.canonicalize().unwrap());
        assert_eq!(*tool, format!("sha256:{}", sha256_file(&exe).unwrap()));
        // Computed once per process.
        assert!(std::ptr::eq(ours(), ours()));
    }

    #[test]
    fn an_unknown_address_falls_back_to_the_name() {
        let (tool, source) = tool_ref_at(std::ptr::null(), "demo@1.0.0");
        assert_eq!(source, ToolSource::Name);
        assert_eq!(tool, format!("sha256:{}", sha256_hex("demo@1.0.0")));
    }
}
