//! Unit tests: the JSON shapes, the adapters' panic handling, the host side.

use std::sync::{Arc, Mutex};

use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::{ROption, RResult, RStr, RString};
use serde_json::{json, Value};

use crate::host::{rebuild_hint, summarise_layout_report};
use crate::*;

fn request(payload: Value) -> Request {
    Request {
        invocation_id: "inv-1".into(),
        episode: "ep-1".into(),
        worktree: Some("/w/ep-1".into()),
        effect: "Test.Echo".into(),
        scope: "worktree".into(),
        cost: 1,
        payload,
        deadline_ms: 5000,
    }
}

// ---------------------------------------------------------------- JSON shapes

#[test]
fn request_round_trips_in_camel_case() {
    let r = request(json!({"op": "read", "path": "a.txt"}));
    let text = serde_json::to_value(&r).unwrap();
    assert_eq!(
        text,
        json!({"invocationId": "inv-1", "episode": "ep-1", "worktree": "/w/ep-1",
               "effect": "Test.Echo", "scope": "worktree", "cost": 1,
               "payload": {"op": "read", "path": "a.txt"}, "deadlineMs": 5000})
    );
    let back: Request = serde_json::from_value(text).unwrap();
    assert_eq!(back, r);
}

#[test]
fn request_without_worktree_omits_it_and_tolerates_unknown_fields() {
    let mut r = request(json!({}));
    r.worktree = None;
    let text = serde_json::to_string(&r).unwrap();
    assert!(!text.contains("\"worktree\":"), "{text}");
    let mut v: Value = serde_json::from_str(&text).unwrap();
    v["addedInAFutureVersion"] = json!(true);
    let back: Request = serde_json::from_value(v).unwrap();
    assert_eq!(back, r);
}

#[test]
fn outcome_wire_forms() {
    let mut out = JsonObject::new();
    out.insert("ok".into(), json!(true));
    let cases = [
        (Outcome::ok(out), r#"{"status":"ok","output":{"ok":true}}"#),
        (
            Outcome::failed("nope"),
            r#"{"status":"failed","message":"nope"}"#,
        ),
        (
            Outcome::indeterminate("who knows"),
            r#"{"status":"indeterminate","message":"who knows"}"#,
        ),
    ];
    for (outcome, wire) in cases {
        assert_eq!(serde_json::to_string(&outcome).unwrap(), wire);
        assert_eq!(serde_json::from_str::<Outcome>(wire).unwrap(), outcome);
    }
    // An ok outcome's output must be an object.
    assert!(serde_json::from_str::<Outcome>(r#"{"status":"ok","output":[1]}"#).is_err());
    assert!(serde_json::from_str::<Outcome>(r#"{"status":"maybe","message":"x"}"#).is_err());
}

/// The host reads an answer member by member: in any order, past members it does not know,
/// escapes included, and with serde's own words for what is wrong.
#[test]
fn an_outcome_is_read_in_any_order_and_refused_in_serdes_words() {
    let read = |wire: &str| serde_json::from_str::<Outcome>(wire).map_err(|e| e.to_string());
    let mut out = JsonObject::new();
    out.insert("text".into(), json!("a \"quoted\"\nline \u{e9}"));
    out.insert("n".into(), json!(9007199254740993u64));
    assert_eq!(
        read(
            r#"{"output":{"n":9007199254740993,"text":"a \"quoted\"\nline \u00e9"},"extra":[1,{"x":2}],"status":"ok"}"#
        ),
        Ok(Outcome::ok(out))
    );
    assert_eq!(
        read(r#"{"message":"line\tbreak","status":"failed","output":{}}"#),
        Ok(Outcome::failed("line\tbreak"))
    );
    assert_eq!(
        read(r#"{"status":"indeterminate","message":"timed out"}"#),
        Ok(Outcome::indeterminate("timed out"))
    );
    let refused = [
        (r#"{"message":"x"}"#, "missing field `status`"),
        (r#"{"status":"ok"}"#, "missing field `output`"),
        (r#"{"status":"failed"}"#, "missing field `message`"),
        (
            r#"{"status":"indeterminate","output":{}}"#,
            "missing field `message`",
        ),
        (
            r#"{"status":"maybe","message":"x"}"#,
            "unknown variant `maybe`, expected one of `ok`, `failed`, `indeterminate`",
        ),
        (
            r#"{"status":"output","output":{}}"#,
            "unknown variant `output`, expected one of `ok`, `failed`, `indeterminate`",
        ),
        (
            r#"{"status":"ok","status":"ok","output":{}}"#,
            "duplicate field `status`",
        ),
        (
            r#"{"status":"ok","output":{},"output":{}}"#,
            "duplicate field `output`",
        ),
        (r#"{"status":1,"message":"x"}"#, "invalid type: integer `1`"),
        (
            r#"{"status":"ok","output":[1]}"#,
            "invalid type: sequence, expected a map",
        ),
        (r#"["ok"]"#, "invalid type: sequence"),
    ];
    for (wire, why) in refused {
        match read(wire) {
            Err(e) => assert!(e.contains(why), "{wire}: {e}"),
            Ok(o) => panic!("{wire} was read as {o:?}"),
        }
    }
}

#[test]
fn manifest_round_trips_in_camel_case() {
    let m = Manifest {
        name: "t".into(),
        version: "1.2.3".into(),
        abi: 1,
        description: "d".into(),
        effects: vec![EffectDecl {
            name: "T.W".into(),
            class: EffectClass::Write,
            ops: vec!["write".into()],
            description: "w".into(),
        }],
        transitions: vec![json!({"id": "t-w"})],
        finish: vec!["reshape".into()],
        config_schema: json!({"type": "object"}),
    };
    let v = serde_json::to_value(&m).unwrap();
    assert_eq!(
        v,
        json!({"name": "t", "version": "1.2.3", "abi": 1, "description": "d",
               "effects": [{"name": "T.W", "class": "write", "ops": ["write"], "description": "w"}],
               "transitions": [{"id": "t-w"}], "finish": ["reshape"],
               "configSchema": {"type": "object"}})
    );
    assert_eq!(serde_json::from_value::<Manifest>(v).unwrap(), m);
    for (class, word) in [
        (EffectClass::Read, "read"),
        (EffectClass::Write, "write"),
        (EffectClass::Unknown, "unknown"),
    ] {
        assert_eq!(serde_json::to_value(class).unwrap(), json!(word));
    }
}

#[test]
fn finish_input_round_trips() {
    let v = json!({"args": {"path": "a"}, "output": {"ok": true}});
    let f: FinishInput = serde_json::from_value(v.clone()).unwrap();
    assert_eq!(f.args, json!({"path": "a"}));
    assert_eq!(serde_json::to_value(&f).unwrap(), v);
}

#[test]
fn log_levels_map_both_ways() {
    for l in [
        LogLevel::Error,
        LogLevel::Warn,
        LogLevel::Info,
        LogLevel::Debug,
        LogLevel::Trace,
    ] {
        assert_eq!(LogLevel::from_u8(l as u8), l);
    }
    assert_eq!(LogLevel::from_u8(200), LogLevel::Info);
}

// ------------------------------------------------------- a misbehaving plugin

/// Behaviour selected by the payload's `do` key.
struct Wild;

impl EffectHandler for Wild {
    fn execute(&self, request: Request) -> Outcome {
        match request.payload.get("do").and_then(Value::as_str) {
            Some("panic-str") => panic!("boom"),
            Some("panic-string") => panic!("boom {}", 42),
            Some("panic-other") => std::panic::panic_any(7_u32),
            Some("indeterminate") => Outcome::indeterminate("lost the reply"),
            _ => {
                let mut out = JsonObject::new();
                out.insert("echo".into(), request.payload);
                Outcome::ok(out)
            }
        }
    }

    fn preflight(&self, request: &Request) -> Preflight {
        match request.payload.get("do").and_then(Value::as_str) {
            Some("decline") => {
                let mut out = JsonObject::new();
                out.insert("ok".into(), json!(false));
                out.insert("refused".into(), json!("too big"));
                Preflight::Decline(out)
            }
            Some("preflight-panic") => panic!("preflight boom"),
            _ => Preflight::Proceed,
        }
    }

    fn finish(&self, name: &str, input: FinishInput) -> Result<JsonObject, String> {
        match name {
            "explode" => panic!("finish boom"),
            "copy" => Ok(input.output),
            _ => Err(format!("no finish function {name:?}")),
        }
    }
}

struct WildPlugin;

impl Plugin for WildPlugin {
    type Handler = Wild;

    fn manifest() -> Result<Manifest, String> {
        Ok(Manifest {
            name: "wild".into(),
            version: "0.0.1".into(),
            abi: 999, // the adapter must overwrite this
            effects: vec![EffectDecl {
                name: "Test.Echo".into(),
                class: EffectClass::Read,
                ops: vec![],
                description: String::new(),
            }],
            ..Manifest::default()
        })
    }

    fn new(config: Value, _host: Host) -> Result<Wild, String> {
        match config.get("mode").and_then(Value::as_str) {
            Some("panic") => panic!("constructor boom"),
            Some("refuse") => Err("config refused: mode".into()),
            _ => Ok(Wild),
        }
    }
}

struct BrokenManifestPlugin;

impl Plugin for BrokenManifestPlugin {
    type Handler = Wild;
    fn manifest() -> Result<Manifest, String> {
        Err("embedded transition ailang-read.json is not JSON".into())
    }
    fn new(_: Value, _: Host) -> Result<Wild, String> {
        Ok(Wild)
    }
}

struct PanickingManifestPlugin;

/// Where `PanickingManifestPlugin::manifest` panics: the line after the next one's.
const MANIFEST_BOOM_LINE: u32 = line!() + 5;

impl Plugin for PanickingManifestPlugin {
    type Handler = Wild;
    fn manifest() -> Result<Manifest, String> {
        panic!("manifest boom")
    }
    fn new(_: Value, _: Host) -> Result<Wild, String> {
        Ok(Wild)
    }
}

fn wild_handler() -> LoadedHandler {
    LoadedPlugin::from_module(plugin_module::<WildPlugin>())
        .new_handler(&json!({}), Host::noop().callbacks())
        .unwrap()
}

#[test]
fn execute_through_the_ffi_entries() {
    let h = wild_handler();
    let Outcome::Ok { output } = h.execute(&request(json!({"x": 1}))) else {
        panic!("expected ok")
    };
    assert_eq!(output["echo"], json!({"x": 1}));
    assert_eq!(
        h.execute(&request(json!({"do": "indeterminate"}))),
        Outcome::indeterminate("lost the reply")
    );
}

#[test]
fn a_panic_in_execute_becomes_failed() {
    let h = wild_handler();
    assert_eq!(
        h.execute(&request(json!({"do": "panic-str"}))),
        Outcome::failed("handler panicked: boom")
    );
    assert_eq!(
        h.execute(&request(json!({"do": "panic-string"}))),
        Outcome::failed("handler panicked: boom 42")
    );
    assert_eq!(
        h.execute(&request(json!({"do": "panic-other"}))),
        Outcome::failed("handler panicked: a non-string panic payload")
    );
    // The handler is still usable afterwards.
    assert!(matches!(h.execute(&request(json!({}))), Outcome::Ok { .. }));
}

#[test]
fn a_malformed_request_becomes_failed() {
    let h = wild_handler();
    for bad in [
        "",
        "not json",
        "[1,2]",
        r#"{"episode":"e"}"#,
        r#"{"invocationId":1}"#,
    ] {
        let answer: Outcome = serde_json::from_str(&h.execute_raw(bad)).unwrap();
        let Outcome::Failed { message } = answer else {
            panic!("{bad:?} gave {answer:?}")
        };
        assert!(message.starts_with("malformed request: "), "{message}");
    }
}

#[test]
fn execute_json_is_usable_without_any_ffi() {
    let answer = execute_json(
        &Wild,
        &serde_json::to_string(&request(json!({"do": "panic-str"}))).unwrap(),
    );
    assert_eq!(
        answer,
        r#"{"status":"failed","message":"handler panicked: boom"}"#
    );
}

#[test]
fn finish_through_the_ffi_entries() {
    let h = wild_handler();
    let input = FinishInput {
        args: json!({}),
        output: serde_json::from_value(json!({"ok": true, "n": 2})).unwrap(),
    };
    assert_eq!(h.finish("copy", &input).unwrap(), input.output);
    assert_eq!(
        h.finish("nope", &input).unwrap_err(),
        "no finish function \"nope\""
    );
    assert_eq!(
        h.finish("explode", &input).unwrap_err(),
        "finish function panicked: finish boom"
    );
    // The default finish refuses every name.
    struct Plain;
    impl EffectHandler for Plain {
        fn execute(&self, _: Request) -> Outcome {
            Outcome::failed("x")
        }
    }
    assert_eq!(
        finish_json(&Plain, "check-report", r#"{"args":{},"output":{}}"#).unwrap_err(),
        "no finish function \"check-report\""
    );
    assert!(finish_json(&Plain, "x", "{")
        .unwrap_err()
        .starts_with("malformed finish input"));
}

#[test]
fn preflight_through_the_ffi_entries() {
    let h = wild_handler();
    let Preflight::Decline(out) = h.preflight(&request(json!({"do": "decline"}))) else {
        panic!("expected a decline")
    };
    assert_eq!(
        Value::Object(out),
        json!({"ok": false, "refused": "too big"})
    );
    // Anything else proceeds: no objection, a panic, a request the plugin cannot read.
    assert_eq!(h.preflight(&request(json!({}))), Preflight::Proceed);
    assert_eq!(
        h.preflight(&request(json!({"do": "preflight-panic"}))),
        Preflight::Proceed
    );
    assert_eq!(preflight_json(&Wild, "not json"), None);
    // The default proceeds.
    struct Plain;
    impl EffectHandler for Plain {
        fn execute(&self, _: Request) -> Outcome {
            Outcome::failed("x")
        }
    }
    let decline = serde_json::to_string(&request(json!({"do": "decline"}))).unwrap();
    assert_eq!(preflight_json(&Plain, &decline), None);
    assert_eq!(
        preflight_json(&Wild, &decline).as_deref(),
        Some(r#"{"ok":false,"refused":"too big"}"#)
    );
}

#[test]
fn constructor_errors_and_panics_become_errors() {
    let plugin = LoadedPlugin::from_module(plugin_module::<WildPlugin>());
    let host = Host::noop().callbacks();
    assert_eq!(
        plugin
            .new_handler(&json!({"mode": "refuse"}), host)
            .unwrap_err(),
        "config refused: mode"
    );
    assert_eq!(
        plugin
            .new_handler(&json!({"mode": "panic"}), host)
            .unwrap_err(),
        "handler constructor panicked: constructor boom"
    );
    // Raw entry: config text that is not JSON; empty text means {}.
    let new_handler = plugin.module().new_handler();
    match new_handler(RStr::from_str("{oops"), host) {
        abi_stable::std_types::RErr(e) => assert!(e.as_str().starts_with("config is not JSON: ")),
        abi_stable::std_types::ROk(_) => panic!("accepted bad config"),
    }
    assert!(new_handler(RStr::from_str("  "), host).is_ok());
}

#[test]
fn manifest_entry_forces_the_abi_version_and_reports_errors() {
    let m = LoadedPlugin::from_module(plugin_module::<WildPlugin>())
        .manifest()
        .unwrap();
    assert_eq!(m.abi, ABI_VERSION);
    assert_eq!(m.name, "wild");
    assert_eq!((plugin_module::<WildPlugin>().abi_version())(), ABI_VERSION);

    let err = LoadedPlugin::from_module(plugin_module::<BrokenManifestPlugin>())
        .manifest()
        .unwrap_err();
    assert_eq!(
        err,
        "the plugin could not describe itself: embedded transition ailang-read.json is not JSON"
    );
    let err = LoadedPlugin::from_module(plugin_module::<PanickingManifestPlugin>())
        .manifest()
        .unwrap_err();
    // No host is given to `manifest`: where it panicked is said in its error.
    assert_eq!(
        err,
        format!(
            "the plugin could not describe itself: manifest panicked at {}:{MANIFEST_BOOM_LINE}:9: manifest boom",
            file!()
        )
    );
}

/// A handler implemented directly on the FFI trait, answering garbage.
struct Garbage;

impl Handler for Garbage {
    fn execute(&self, _request_json: RStr<'_>) -> RString {
        RString::from("{\"status\":\"ok\"")
    }
    fn finish(&self, _name: RStr<'_>, _input_json: RStr<'_>) -> RResult<RString, RString> {
        abi_stable::std_types::ROk(RString::from("[1]"))
    }
}

#[test]
fn a_malformed_outcome_is_indeterminate() {
    let boxed: HandlerBox = Handler_TO::from_value(Garbage, TD_Opaque);
    let h = LoadedHandler::from_box(boxed);
    let Outcome::Indeterminate { message } = h.execute(&request(json!({}))) else {
        panic!("expected indeterminate")
    };
    assert!(
        message.starts_with("the handler returned a malformed outcome"),
        "{message}"
    );
    let input = FinishInput {
        args: json!({}),
        output: JsonObject::new(),
    };
    assert!(h
        .finish("x", &input)
        .unwrap_err()
        .contains("returned a non-object"));
}

/// A handler implemented on the FFI trait whose every answer is well-formed JSON one byte
/// over the host's limit.
struct Huge;

fn huge_answer(prefix: &str, suffix: &str) -> RString {
    let pad = MAX_ANSWER_BYTES + 1 - prefix.len() - suffix.len();
    RString::from(format!("{prefix}{}{suffix}", "a".repeat(pad)))
}

impl Handler for Huge {
    fn execute(&self, _request_json: RStr<'_>) -> RString {
        huge_answer("{\"status\":\"ok\",\"output\":{\"x\":\"", "\"}}")
    }
    fn preflight(&self, _request_json: RStr<'_>) -> ROption<RString> {
        abi_stable::std_types::RSome(huge_answer("{\"x\":\"", "\"}"))
    }
    fn finish(&self, _name: RStr<'_>, _input_json: RStr<'_>) -> RResult<RString, RString> {
        abi_stable::std_types::ROk(huge_answer("{\"x\":\"", "\"}"))
    }
}

#[test]
fn an_answer_over_the_limit_is_not_read() {
    let boxed: HandlerBox = Handler_TO::from_value(Huge, TD_Opaque);
    let h = LoadedHandler::from_box(boxed);
    let over = MAX_ANSWER_BYTES + 1;
    assert_eq!(
        h.execute(&request(json!({}))),
        Outcome::indeterminate(format!(
            "the handler's answer is {over} bytes; the host reads at most 4194304"
        ))
    );
    assert_eq!(h.preflight(&request(json!({}))), Preflight::Proceed);
    let input = FinishInput {
        args: json!({}),
        output: JsonObject::new(),
    };
    assert_eq!(
        h.finish("x", &input).unwrap_err(),
        format!("finish function \"x\": the handler's answer is {over} bytes; the host reads at most 4194304")
    );
}

/// A handler implemented on the FFI trait, as a plugin using `unsafe` can be, whose every
/// answer is JSON holding two bytes that are not UTF-8 in a string.
struct NotUtf8;

fn not_utf8_answer(prefix: &str, suffix: &str) -> RString {
    let mut bytes = prefix.as_bytes().to_vec();
    bytes.extend_from_slice(b"\xff\xfe");
    bytes.extend_from_slice(suffix.as_bytes());
    // SAFETY: not sound, on purpose: this is the `RString` a hostile plugin can send, and the
    // host under test must read it as bytes, never as the `str` it claims to be.
    RString::from(unsafe { String::from_utf8_unchecked(bytes) })
}

impl Handler for NotUtf8 {
    fn execute(&self, _request_json: RStr<'_>) -> RString {
        not_utf8_answer("{\"status\":\"ok\",\"output\":{\"s\":\"", "\"}}")
    }
    fn preflight(&self, _request_json: RStr<'_>) -> ROption<RString> {
        abi_stable::std_types::RSome(not_utf8_answer("{\"s\":\"", "\"}"))
    }
    fn finish(&self, _name: RStr<'_>, _input_json: RStr<'_>) -> RResult<RString, RString> {
        abi_stable::std_types::ROk(not_utf8_answer("{\"s\":\"", "\"}"))
    }
}

/// An answer whose bytes are not UTF-8 was read as text: its output was committed with those
/// bytes (which no client can read as JSON), and `why` verified it.
#[test]
fn an_answer_whose_bytes_are_not_utf8_is_malformed() {
    let boxed: HandlerBox = Handler_TO::from_value(NotUtf8, TD_Opaque);
    let h = LoadedHandler::from_box(boxed);
    assert_eq!(
        h.execute(&request(json!({}))),
        Outcome::indeterminate(
            "the handler returned a malformed outcome: its bytes are not UTF-8 (invalid utf-8 sequence of 1 bytes from index 30)"
        )
    );
    assert_eq!(h.preflight(&request(json!({}))), Preflight::Proceed);
    let input = FinishInput {
        args: json!({}),
        output: JsonObject::new(),
    };
    assert_eq!(
        h.finish("x", &input).unwrap_err(),
        "finish function \"x\" returned a non-object: its bytes are not UTF-8 (invalid utf-8 sequence of 1 bytes from index 6)"
    );
}

/// `{"d":[[…"x"…]]}` nested `levels` deep, the object itself level 1, as JSON text.
fn nested_text(levels: usize) -> String {
    let arrays = levels.saturating_sub(1);
    format!(
        "{{\"ok\":false,\"d\":{}\"x\"{}}}",
        "[".repeat(arrays),
        "]".repeat(arrays)
    )
}

/// How many levels `value` nests, a scalar being 0.
fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(members) => 1 + members.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// A handler implemented on the FFI trait whose every answer nests `0` levels deep.
struct Deep(usize);

impl Handler for Deep {
    fn execute(&self, _request_json: RStr<'_>) -> RString {
        RString::from(format!(
            "{{\"status\":\"ok\",\"output\":{}}}",
            nested_text(self.0)
        ))
    }
    fn preflight(&self, _request_json: RStr<'_>) -> ROption<RString> {
        abi_stable::std_types::RSome(RString::from(nested_text(self.0)))
    }
    fn finish(&self, _name: RStr<'_>, _input_json: RStr<'_>) -> RResult<RString, RString> {
        abi_stable::std_types::ROk(RString::from(nested_text(self.0)))
    }
}

/// An answer nested past serde_json's 128 levels was not read at all: a preflight's decline
/// proceeded (and the call spent its budget), an outcome was `indeterminate` ("recursion limit
/// exceeded"), a finish output an error. Each is read, to 120 levels: deep enough for the
/// broker's own limit (100) to refuse it as what it is.
#[test]
fn an_answer_nested_past_serde_jsons_limit_is_still_read_deep_enough_to_be_judged() {
    let input = FinishInput {
        args: json!({}),
        output: JsonObject::new(),
    };
    for levels in [129, 200, 100_000] {
        let h = LoadedHandler::from_box(Handler_TO::from_value(Deep(levels), TD_Opaque));
        let Outcome::Ok { output } = h.execute(&request(json!({}))) else {
            panic!("{levels}: not read as ok")
        };
        let Preflight::Decline(declined) = h.preflight(&request(json!({}))) else {
            panic!("{levels}: the decline proceeded")
        };
        let finished = h.finish("x", &input).unwrap();
        for answer in [output, declined, finished] {
            assert_eq!(answer["ok"], json!(false), "{levels}");
            assert_eq!(depth(&Value::Object(answer)), crate::answer::READ_DEPTH);
        }
    }
    // Up to that depth an answer is read as serde_json reads it.
    for levels in [1, 100, 101, 119] {
        let h = LoadedHandler::from_box(Handler_TO::from_value(Deep(levels), TD_Opaque));
        let text = nested_text(levels);
        let expected: JsonObject = serde_json::from_str(&text).unwrap();
        assert_eq!(
            h.execute(&request(json!({}))),
            Outcome::ok(expected.clone())
        );
        assert_eq!(
            h.preflight(&request(json!({}))),
            Preflight::Decline(expected.clone())
        );
        assert_eq!(h.finish("x", &input).unwrap(), expected);
    }
    // A deep answer that is not JSON is still refused, in serde_json's words.
    let broken = format!("{}1,]{}", "[".repeat(300), "]".repeat(299));
    assert_eq!(
        serde_json::from_str::<Outcome>(&format!(r#"{{"status":"ok","output":{{"d":{broken}}}}}"#))
            .unwrap_err()
            .to_string(),
        "expected value at line 1 column 332"
    );
}

// ------------------------------------------------------------------ host side

#[derive(Default)]
struct Recorder {
    logs: Mutex<Vec<(LogLevel, String)>>,
    accept_publish: bool,
    /// Levels not logged (`logs` says no).
    quiet: Vec<LogLevel>,
}

impl HostServices for Recorder {
    fn logs(&self, level: LogLevel) -> bool {
        !self.quiet.contains(&level)
    }
    fn log(&self, level: LogLevel, message: &str) {
        if message == "panic" {
            panic!("logger boom");
        }
        self.logs.lock().unwrap().push((level, message.to_string()));
    }
    fn publish(&self, bundle_json: &str) -> Result<String, String> {
        if !self.accept_publish {
            return Err(NO_PUBLISH.into());
        }
        if bundle_json == "panic" {
            panic!("publish boom");
        }
        Ok(format!("{{\"published\":{bundle_json}}}"))
    }
}

#[test]
fn host_callbacks_forward_to_services() {
    let recorder = Arc::new(Recorder {
        accept_publish: true,
        ..Recorder::default()
    });
    let host = Host::from_services(recorder.clone());
    host.log(LogLevel::Warn, "careful");
    host.log(LogLevel::Info, "panic"); // must not unwind into the plugin
    assert_eq!(
        *recorder.logs.lock().unwrap(),
        vec![(LogLevel::Warn, "careful".to_string())]
    );
    assert_eq!(host.publish("[1]").unwrap(), "{\"published\":[1]}");
    assert_eq!(
        host.publish("panic").unwrap_err(),
        "host publish panicked: publish boom"
    );

    let refusing = Host::from_services(Arc::new(Recorder::default()));
    assert_eq!(refusing.publish("{}").unwrap_err(), NO_PUBLISH);
    assert_eq!(Host::noop().publish("{}").unwrap_err(), NO_PUBLISH);
    Host::noop().log(LogLevel::Error, "discarded");
}

/// A plugin whose unsafe code logs (or publishes) bytes that are not UTF-8 through a `RStr`:
/// the host read them as the `str` the type promises, which is undefined behaviour. It reads
/// them as bytes now: a log line with the bad bytes replaced, a publish refused.
#[test]
fn a_log_message_or_bundle_whose_bytes_are_not_utf8_is_read_as_bytes() {
    let recorder = Arc::new(Recorder {
        accept_publish: true,
        ..Recorder::default()
    });
    let host = Host::from_services(recorder.clone());
    let callbacks = host.callbacks();
    let bad: &[u8] = b"bad \xff\xfe bytes";
    // SAFETY: not sound, on purpose: this is the `RStr` a hostile plugin can send; the host
    // under test must read it as bytes.
    let message = unsafe { RStr::from_raw_parts(bad.as_ptr(), bad.len()) };
    // SAFETY: the table's own context goes to the table's function.
    unsafe { (callbacks.log())(callbacks.context(), LogLevel::Warn as u8, message) };
    assert_eq!(
        *recorder.logs.lock().unwrap(),
        vec![(LogLevel::Warn, "bad \u{fffd}\u{fffd} bytes".to_string())]
    );
    // SAFETY: as above.
    let answer = unsafe { (callbacks.publish())(callbacks.context(), message) };
    assert_eq!(
        answer.into_result().unwrap_err().as_str(),
        "the bundle is not UTF-8"
    );
}

/// A plugin flooding the log at a level the daemon does not log had every message's bytes
/// read (a lossy UTF-8 pass over each) before the daemon looked at the level: most of the
/// daemon's runtime samples under the log-flood attack. Such a message is now dropped unread.
#[test]
fn a_message_at_a_level_the_host_does_not_log_is_not_read() {
    let recorder = Arc::new(Recorder {
        quiet: vec![LogLevel::Debug],
        ..Recorder::default()
    });
    let host = Host::from_services(recorder.clone());
    let callbacks = host.callbacks();
    let bad: &[u8] = b"\xff";
    // SAFETY: not sound, on purpose, as above; a message that is not read cannot hurt.
    let message = unsafe { RStr::from_raw_parts(bad.as_ptr(), bad.len()) };
    // SAFETY: the table's own context goes to the table's function.
    unsafe { (callbacks.log())(callbacks.context(), LogLevel::Debug as u8, message) };
    // SAFETY: as above.
    unsafe { (callbacks.log())(callbacks.context(), LogLevel::Info as u8, message) };
    assert_eq!(
        *recorder.logs.lock().unwrap(),
        vec![(LogLevel::Info, "\u{fffd}".to_string())]
    );
}

#[test]
fn root_symbol_matches_abi_stable() {
    assert_eq!(
        __private::ROOT_SYMBOL,
        abi_stable::library::ROOT_MODULE_LOADER_NAME
    );
}

#[test]
fn load_errors_are_one_line_and_name_the_file() {
    let missing = std::path::Path::new("/nonexistent/libnothing.so");
    let err = load_plugin(missing).unwrap_err();
    assert_eq!(err.kind(), LoadErrorKind::Open);
    let line = err.to_string();
    assert!(
        line.starts_with("plugin /nonexistent/libnothing.so: cannot be opened: "),
        "{line}"
    );
    assert!(!line.contains('\n'));

    // A real shared library that is not a worldd plugin.
    let libm = [
        "/lib/x86_64-linux-gnu/libm.so.6",
        "/usr/lib/x86_64-linux-gnu/libm.so.6",
        "/lib64/libm.so.6",
    ]
    .iter()
    .map(std::path::Path::new)
    .find(|p| p.exists());
    if let Some(libm) = libm {
        let err = load_plugin(libm).unwrap_err();
        assert_eq!(err.kind(), LoadErrorKind::NotAPlugin, "{err}");
        assert!(err.to_string().contains(": not a worldd plugin"), "{err}");
        assert!(!err.to_string().contains('\n'));
    }

    // A file that is not a shared object at all.
    let dir = std::env::temp_dir().join(format!("handler-api-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let junk = dir.join("libjunk.so");
    std::fs::write(&junk, b"this is not an ELF file").unwrap();
    let err = load_plugin(&junk).unwrap_err();
    assert_eq!(err.kind(), LoadErrorKind::Open);
    assert!(!err.to_string().contains('\n'));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn layout_reports_are_summarised() {
    let report = "\nCompared <this>:\n    PluginMod\nTo <other>:\n    PluginMod\n\n1 error(s)inside:\n    <other>\n\n\
                  Layout of expected type:\n    lots\n\nLayout of found type:\n    lots\n\n\n\
                  Error:incompatible package versions\nExpected:\n    0.1.0\nFound:\n    0.2.0\n";
    assert_eq!(
        summarise_layout_report(report),
        "handler-api 0.1.0 expected, 0.2.0 found"
    );
    let report = "1 error(s).\n\nError:too many fields\nExpected:\n    3\nFound:\n    4\n";
    assert_eq!(
        summarise_layout_report(report),
        "too many fields: 3 expected, 4 found"
    );
    // The shape of abi_stable 0.11's report for a plugin whose
    // `abi_version` returns u64 (captured from a real build, abridged).
    let report = [
        "0 error(s).",
        "",
        "0 error(s)inside:",
        "    <other>",
        "",
        "    field_name:0",
        "    type:PluginMod",
        "",
        "1 error(s)inside:",
        "    <other>",
        "",
        "    field_name:0",
        "    type:PluginMod",
        "",
        "    field_name:abi_version",
        "    type:AFunctionPointer",
        "        fn()->u64",
        "",
        "    field_name:__returns",
        "    type:u64",
        "",
        "Layout of expected type:",
        "    --- Type Layout ---",
        "        field_name:ignored",
        "",
        "Layout of found type:",
        "    x",
        "",
        "Error:mismatched type",
        "Expected:",
        "    u32",
        "Found:",
        "    u64",
    ]
    .join("\n");
    assert_eq!(
        summarise_layout_report(&report),
        "mismatched type at abi_version.__returns: u32 expected, u64 found"
    );
    assert_eq!(
        summarise_layout_report("\n\nsomething odd\nmore"),
        "something odd"
    );
}

#[test]
fn an_abi_mismatch_names_the_handler_api_to_rebuild_against_and_the_librarys_own() {
    let ours = env!("CARGO_PKG_VERSION");
    let hint =
        format!("; rebuild the plugin against handler-api {ours}, the version this worldd expects");
    // The version mismatch already names the library's version.
    assert_eq!(
        rebuild_hint(
            "incompatible ABI: handler-api 0.3.0 expected, 0.4.0 found",
            Some("0.4.0")
        ),
        hint
    );
    // A layout mismatch does not: the hint does.
    assert_eq!(
        rebuild_hint(
            "incompatible ABI: mismatched type at abi_version.__returns: u32 expected, u64 found",
            Some("0.3.1")
        ),
        format!("{hint} (the library was built against 0.3.1)")
    );
    // An abi_stable header that differs: the library's version cannot be read.
    assert_eq!(
        rebuild_hint(
            "incompatible ABI: built against an incompatible abi_stable (ABI header differs)",
            None
        ),
        hint
    );
}
