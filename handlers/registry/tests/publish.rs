//! Registry.Publish through the safe `EffectHandler` trait, with test hosts
//! built from `host_callbacks`.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::{Arc, Mutex};

use broker_core::transition::Transition;
use handler_kit::serde_json::{json, Value};
use handler_kit::{
    EffectHandler, Host, HostServices, JsonObject, LogLevel, Outcome, Plugin, Request,
};
use worldd_registry::{RegistryHandler, RegistryPlugin, MAX_PATH_BYTES};

/// A host that records what it was asked to publish and answers like the
/// daemon: it validates every document with the broker's validator.
struct TestRegistry {
    calls: Mutex<Vec<String>>,
    served: Vec<&'static str>,
    answer: Option<Result<String, String>>,
}

impl TestRegistry {
    fn new() -> Arc<TestRegistry> {
        Arc::new(TestRegistry {
            calls: Mutex::new(Vec::new()),
            served: vec!["Workspace.Read", "Registry.Publish"],
            answer: None,
        })
    }

    fn answering(answer: Result<String, String>) -> Arc<TestRegistry> {
        Arc::new(TestRegistry {
            calls: Mutex::new(Vec::new()),
            served: Vec::new(),
            answer: Some(answer),
        })
    }

    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

impl HostServices for TestRegistry {
    fn log(&self, _level: LogLevel, _message: &str) {}

    fn publish(&self, bundle_json: &str) -> Result<String, String> {
        self.calls.lock().unwrap().push(bundle_json.to_string());
        if let Some(answer) = &self.answer {
            return answer.clone();
        }
        let bundle: Value = handler_kit::serde_json::from_str(bundle_json)
            .map_err(|e| format!("bundle is not JSON: {e}"))?;
        let docs = bundle["transitions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut ids = Vec::new();
        let mut unserved = Vec::new();
        for (i, d) in docs.into_iter().enumerate() {
            let t = Transition::from_value(d).map_err(|e| format!("transitions[{i}]: {e}"))?;
            if t.declared_effects
                .iter()
                .any(|e| !self.served.contains(&e.effect.as_str()))
            {
                unserved.push(t.id.clone());
            }
            ids.push(t.id);
        }
        Ok(json!({
            "registry": format!("sha256:{}", "ab".repeat(32)),
            "revision": 2,
            "changed": true,
            "published": ids,
            "unserved": unserved,
        })
        .to_string())
    }
}

fn handler_with(host: Arc<TestRegistry>, config: Value) -> RegistryHandler {
    RegistryPlugin::new(config, Host::from_services(host)).unwrap()
}

fn request(worktree: &Path, payload: Value) -> Request {
    Request {
        invocation_id: "inv-1".into(),
        episode: "ep".into(),
        worktree: Some(worktree.to_string_lossy().into_owned()),
        effect: "Registry.Publish".into(),
        scope: "worktree".into(),
        cost: 1,
        payload,
        deadline_ms: 10_000,
    }
}

fn ok_output(outcome: Outcome) -> JsonObject {
    match outcome {
        Outcome::Ok { output } => output,
        other => panic!("expected ok, got {other:?}"),
    }
}

fn refused(outcome: Outcome) -> String {
    let out = ok_output(outcome);
    assert_eq!(out["ok"], json!(false), "{out:?}");
    assert!(out["tool"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(out["policy_digest"].as_str().unwrap().len(), 64);
    out["refused"].as_str().unwrap().to_string()
}

fn failed(outcome: Outcome) -> String {
    match outcome {
        Outcome::Failed { message } => message,
        other => panic!("expected failed, got {other:?}"),
    }
}

/// A read-only tool limited to docs/** (the plan language's own example).
fn docs_read() -> Value {
    json!({
        "id": "docs-read",
        "title": "Read a document",
        "description": "Read one file under docs/ in this episode's worktree.",
        "inputSchema": {"type": "object", "additionalProperties": false, "required": ["path"],
                        "properties": {"path": {"type": "string", "description": "File under docs/"}}},
        "outputSchema": {"type": "object"},
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

fn with_id(mut doc: Value, id: &str) -> Value {
    doc["id"] = json!(id);
    doc
}

fn model_tool() -> Value {
    let mut doc = with_id(docs_read(), "model-ask");
    doc["access"]["effect"] = json!("Model.Infer");
    doc["declaredEffects"][0]["effect"] = json!("Model.Infer");
    doc["plan"]["effect"]["effect"] = json!("Model.Infer");
    doc
}

// ---------------------------------------------------------------- publish

#[test]
fn an_inline_bundle_is_published_and_the_host_answer_returned() {
    let host = TestRegistry::new();
    let h = handler_with(host.clone(), json!({}));
    let tmp = tempfile::tempdir().unwrap();
    let bundle = json!({"transitions": [docs_read(), model_tool()]});
    let out = ok_output(h.execute(request(
        tmp.path(),
        json!({"op": "publish", "bundle": bundle.clone()}),
    )));
    assert_eq!(out["ok"], json!(true), "{out:?}");
    assert_eq!(
        out["registry"],
        json!(format!("sha256:{}", "ab".repeat(32)))
    );
    assert_eq!(out["revision"], json!(2));
    assert_eq!(out["changed"], json!(true));
    assert_eq!(out["published"], json!(["docs-read", "model-ask"]));
    assert_eq!(out["unserved"], json!(["model-ask"]));
    assert_eq!(out["tool"].as_str().unwrap().len(), 71);
    assert_eq!(out["policy_digest"], json!(h.policy_digest()));
    assert_eq!(out.len(), 8, "{out:?}");
    let calls = host.calls();
    assert_eq!(calls.len(), 1);
    let sent: Value = handler_kit::serde_json::from_str(&calls[0]).unwrap();
    assert_eq!(sent, bundle, "the host gets the bundle as given");
}

#[test]
fn a_bundle_file_in_the_worktree_is_published() {
    let host = TestRegistry::new();
    let h = handler_with(host.clone(), json!({}));
    let tmp = tempfile::tempdir().unwrap();
    fs::create_dir_all(tmp.path().join("tools")).unwrap();
    let bundle = json!({"transitions": [docs_read()]});
    fs::write(
        tmp.path().join("tools/docs.bundle.json"),
        handler_kit::serde_json::to_string_pretty(&bundle).unwrap(),
    )
    .unwrap();
    let out = ok_output(h.execute(request(
        tmp.path(),
        json!({"op": "publish", "path": "tools/docs.bundle.json"}),
    )));
    assert_eq!(out["ok"], json!(true), "{out:?}");
    assert_eq!(out["published"], json!(["docs-read"]));
    assert_eq!(out["unserved"], json!([]));
    let sent: Value = handler_kit::serde_json::from_str(&host.calls()[0]).unwrap();
    assert_eq!(sent, bundle);
    // A symlink that stays inside the worktree is followed.
    symlink("tools/docs.bundle.json", tmp.path().join("link.json")).unwrap();
    let out = ok_output(h.execute(request(
        tmp.path(),
        json!({"op": "publish", "path": "link.json"}),
    )));
    assert_eq!(out["ok"], json!(true), "{out:?}");
}

#[test]
fn the_handler_validates_every_document_before_the_host_sees_it() {
    let host = TestRegistry::new();
    let h = handler_with(host.clone(), json!({"maxDocuments": 3}));
    let tmp = tempfile::tempdir().unwrap();
    let mut no_effects = docs_read();
    no_effects
        .as_object_mut()
        .unwrap()
        .remove("declaredEffects");
    let mut empty_effects = docs_read();
    empty_effects["declaredEffects"] = json!([]);
    let long = "x".repeat(63) + "_"; // 65 bytes escaped
    let cases = [
        (json!({}), "bundle must be {\"transitions\":[…]} with at least one document".to_string()),
        (json!({"transitions": []}), "bundle must be {\"transitions\":[…]} with at least one document".to_string()),
        (json!({"transitions": {"a": 1}}), "bundle must be {\"transitions\":[…]} with at least one document".to_string()),
        (json!({"transitions": [docs_read()], "tools": []}), "bundle has key \"tools\"; a bundle holds only \"transitions\"".to_string()),
        (json!({"transitions": [docs_read(), with_id(docs_read(), "b"), with_id(docs_read(), "c"), with_id(docs_read(), "d")]}), "bundle holds 4 documents; the limit is 3".to_string()),
        (json!({"transitions": [docs_read(), "docs-read"]}), "transitions[1]: a transition document must be a JSON object".to_string()),
        (json!({"transitions": [{"title": "x"}]}), "transitions[0]: id is missing".to_string()),
        (json!({"transitions": [with_id(docs_read(), "x").as_object().map(|o| { let mut o = o.clone(); o.insert("id".into(), json!(7)); Value::Object(o) }).unwrap()]}), "transitions[0]: id must be a string".to_string()),
        (json!({"transitions": [with_id(docs_read(), "a b")]}), "transitions[0]: id \"a b\" must match ^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$".to_string()),
        (json!({"transitions": [with_id(docs_read(), "-x")]}), "transitions[0]: id \"-x\" must match ^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$".to_string()),
        (json!({"transitions": [with_id(docs_read(), "q\"\n")]}), "transitions[0]: id \"q\\\"\\n\" must match ^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$".to_string()),
        (json!({"transitions": [docs_read(), with_id(docs_read(), "b"), docs_read()]}), "transitions[2]: id \"docs-read\" is also the id of transitions[0]; a bundle names each tool once".to_string()),
        (json!({"transitions": [with_id(docs_read(), &long)]}), format!("transitions[0]: tool \"{long}\" has an MCP name of 65 bytes; the limit is 64")),
        (json!({"transitions": [no_effects]}), "transitions[0] (\"docs-read\"): declaredEffects is missing; list every effect the tool may request".to_string()),
        (json!({"transitions": [empty_effects]}), "transitions[0] (\"docs-read\"): declaredEffects must be a non-empty array of {effect, scope, cost}".to_string()),
    ];
    for (bundle, text) in cases {
        let outcome = h.execute(request(
            tmp.path(),
            json!({"op": "publish", "bundle": bundle.clone()}),
        ));
        assert_eq!(refused(outcome), text, "{bundle}");
    }
    assert!(host.calls().is_empty(), "the host was called");
    // 64 bytes escaped is fine.
    let fits = "x".repeat(62) + "_";
    let out = ok_output(h.execute(request(
        tmp.path(),
        json!({"op": "publish", "bundle": {"transitions": [with_id(docs_read(), &fits)]}}),
    )));
    assert_eq!(out["ok"], json!(true), "{out:?}");
}

#[test]
fn the_hosts_refusal_is_returned_verbatim() {
    let host = TestRegistry::new();
    let h = handler_with(host.clone(), json!({}));
    let tmp = tempfile::tempdir().unwrap();
    let mut bad = with_id(docs_read(), "docs-read-2");
    bad["plan"]["language"] = json!("world/plan-language/v2");
    let outcome = h.execute(request(
        tmp.path(),
        json!({"op": "publish", "bundle": {"transitions": [docs_read(), bad]}}),
    ));
    assert_eq!(
        refused(outcome),
        "transitions[1]: transition \"docs-read-2\": plan.language is \"world/plan-language/v2\"; this interpreter speaks only world/plan-language/v1"
    );
    assert_eq!(host.calls().len(), 1);
}

#[test]
fn a_host_that_cannot_publish_is_a_failure() {
    let tmp = tempfile::tempdir().unwrap();
    let payload = json!({"op": "publish", "bundle": {"transitions": [docs_read()]}});
    let h = RegistryPlugin::new(json!({}), Host::noop()).unwrap();
    assert_eq!(
        failed(h.execute(request(tmp.path(), payload.clone()))),
        "broker: Registry.Publish failed: publishing is not available to this plugin"
    );
    let h = handler_with(
        TestRegistry::answering(Err("publishing failed: store: map full".into())),
        json!({}),
    );
    assert_eq!(
        failed(h.execute(request(tmp.path(), payload.clone()))),
        "broker: Registry.Publish failed: publishing failed: store: map full"
    );
    // An unreadable answer after a successful publish is still a success.
    let h = handler_with(TestRegistry::answering(Ok("not json".into())), json!({}));
    let out = ok_output(h.execute(request(tmp.path(), payload.clone())));
    assert_eq!(out["ok"], json!(true));
    assert_eq!(out["answer"], json!("not json"));
    // The host cannot overwrite the handler's own keys.
    let h = handler_with(
        TestRegistry::answering(Ok(
            json!({"ok": false, "tool": "x", "revision": 9}).to_string()
        )),
        json!({}),
    );
    let out = ok_output(h.execute(request(tmp.path(), payload)));
    assert_eq!(out["ok"], json!(true));
    assert_eq!(out["revision"], json!(9));
    assert_eq!(out["tool"], json!(h.tool()));
}

// ------------------------------------------------------------- bundle files

#[test]
fn bundle_files_are_confined_to_the_worktree() {
    let host = TestRegistry::new();
    let h = handler_with(host.clone(), json!({"maxBundleBytes": 4096}));
    let tmp = tempfile::tempdir().unwrap();
    let wt = tmp.path().join("wt");
    fs::create_dir_all(wt.join("dir")).unwrap();
    let outside = tmp.path().join("outside.json");
    fs::write(&outside, json!({"transitions": [docs_read()]}).to_string()).unwrap();
    symlink(&outside, wt.join("abs-link.json")).unwrap();
    symlink("../outside.json", wt.join("rel-link.json")).unwrap();
    symlink(tmp.path(), wt.join("up")).unwrap();
    fs::write(wt.join("big.json"), vec![b' '; 5000]).unwrap();
    fs::write(wt.join("bad.json"), "{\"transitions\": [").unwrap();
    // A reviewer who read the first list would approve what the last one publishes.
    let twice = format!(
        r#"{{"transitions": [{}], "transitions": [{}]}}"#,
        docs_read(),
        json!({"id": "docs.other"})
    );
    fs::write(wt.join("twice.json"), twice).unwrap();
    fs::write(wt.join("list.json"), "[1, 2]").unwrap();
    fs::create_dir_all(wt.join(".git")).unwrap();
    fs::write(wt.join(".git/config"), "[core]\n").unwrap();
    symlink(".git/config", wt.join("git-link.json")).unwrap();
    symlink(".git", wt.join("gd")).unwrap();
    let fifo = std::ffi::CString::new(wt.join("fifo.json").to_str().unwrap()).unwrap();
    // SAFETY: `fifo` is a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    let cases = [
        ("/etc/passwd", "publish /etc/passwd: path \"/etc/passwd\" escapes sandbox \"<worktree>\""),
        ("../outside.json", "publish ../outside.json: path \"../outside.json\" escapes sandbox \"<worktree>\""),
        ("dir/../../outside.json", "publish dir/../../outside.json: path \"dir/../../outside.json\" escapes sandbox \"<worktree>\""),
        ("abs-link.json", "publish abs-link.json: path \"abs-link.json\" escapes sandbox \"<worktree>\""),
        ("rel-link.json", "publish rel-link.json: path \"rel-link.json\" escapes sandbox \"<worktree>\""),
        ("up/outside.json", "publish up/outside.json: path \"up/outside.json\" escapes sandbox \"<worktree>\""),
        ("nope.json", "publish nope.json: openat nope.json: no such file or directory"),
        ("dir", "publish dir: dir is a directory, not a file"),
        ("fifo.json", "publish fifo.json: fifo.json is not a regular file"),
        ("big.json", "publish big.json: file is 5000 bytes; the limit is 4096"),
        ("bad.json", "publish bad.json: the file is not JSON: EOF while parsing a list at line 1 column 17"),
        ("twice.json", "publish twice.json: the file is not JSON: duplicate key \"transitions\""),
        ("list.json", "bundle must be {\"transitions\":[…]} with at least one document"),
        ("", "publish: the path is empty"),
        ("a\u{0}b", "publish a\\0b: the path contains a NUL byte"),
        // git's own data, as spelled or where a link lands: nothing is opened, so the answer
        // says nothing of whether the file exists, its size or its first line.
        (".git/config", "publish .git/config: .git/ is git's own data, not worktree content; the lane's tools do not read it"),
        (".git/nope", "publish .git/nope: .git/ is git's own data, not worktree content; the lane's tools do not read it"),
        ("dir/../.git/HEAD", "publish dir/../.git/HEAD: .git/ is git's own data, not worktree content; the lane's tools do not read it"),
        (".GIT/config", "publish .GIT/config: \".GIT\" is named like .git (names are compared after NFKC and case folding); .git/ is git's own data, not worktree content; the lane's tools do not read it"),
        ("git-link.json", "publish git-link.json: .git/ is git's own data, not worktree content; the lane's tools do not read it"),
        ("gd/config", "publish gd/config: .git/ is git's own data, not worktree content; the lane's tools do not read it"),
    ];
    for (path, text) in cases {
        let outcome = h.execute(request(&wt, json!({"op": "publish", "path": path})));
        assert_eq!(refused(outcome), text, "{path}");
    }
    assert!(host.calls().is_empty());
}

/// The path was judged (where each link lands) before the open, which follows links itself:
/// a link swapped between the two landed the open in `.git`, and the refusal then told the
/// agent the file's size, or where its first line stops being JSON. A thread swaps
/// `swap.json` between a plain file and `.git/config` as fast as it can while publish reads it;
/// no answer may ever say what `.git/config` holds.
#[test]
fn a_link_swapped_to_git_data_between_the_check_and_the_open_is_refused_not_read() {
    let host = TestRegistry::new();
    let h = handler_with(host.clone(), json!({}));
    let tmp = tempfile::tempdir().unwrap();
    let wt = tmp.path().to_path_buf();
    fs::create_dir_all(wt.join(".git")).unwrap();
    // Where its first line stops being JSON is what a leak would say: column 2.
    fs::write(wt.join(".git/config"), "[core]\n").unwrap();
    fs::write(wt.join("plain.txt"), "x").unwrap();
    symlink("plain.txt", wt.join("swap.json")).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (wt, stop) = (wt.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let target = if n % 2 == 0 {
                    ".git/config"
                } else {
                    "plain.txt"
                };
                let _ = fs::remove_file(wt.join("next"));
                symlink(target, wt.join("next")).unwrap();
                fs::rename(wt.join("next"), wt.join("swap.json")).unwrap();
                n += 1;
            }
        })
    };
    let git = "publish swap.json: .git/ is git's own data, not worktree content; the lane's tools do not read it";
    let plain = "publish swap.json: the file is not JSON: expected value at line 1 column 1";
    let (mut refused_as_git, mut read_plain) = (0, 0);
    // 3000 calls at least, and on until both answers were seen (a loaded machine may leave the
    // swapping thread unscheduled for a while), for 20 s at most.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut calls = 0;
    while calls < 3000
        || ((refused_as_git == 0 || read_plain == 0) && std::time::Instant::now() < until)
    {
        calls += 1;
        let outcome = h.execute(request(&wt, json!({"op": "publish", "path": "swap.json"})));
        let text = refused(outcome);
        match text.as_str() {
            t if t == git => refused_as_git += 1,
            t if t == plain => read_plain += 1,
            // The link was being replaced at that moment: the path kept changing, or was absent.
            t if t.contains("kept changing") || t.contains("no such file") => {}
            other => panic!("an answer that read git's data: {other}"),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    swapper.join().unwrap();
    assert!(
        refused_as_git > 0 && read_plain > 0,
        "{refused_as_git} {read_plain}"
    );
    assert!(host.calls().is_empty());
}

/// A bundle path naming a file with a second hard link outside the worktree was read and
/// published (or its key names quoted in the refusal), though the Workspace plugin refuses to
/// read the same file. Refused in its words, nothing read.
#[test]
fn a_bundle_file_with_another_hard_link_is_refused_not_read() {
    let host = TestRegistry::new();
    let h = handler_with(host.clone(), json!({}));
    let tmp = tempfile::tempdir().unwrap();
    let wt = tmp.path().join("wt");
    fs::create_dir(&wt).unwrap();
    let outside = tmp.path().join("creds.json");
    fs::write(&outside, r#"{"api_key": "s3cret"}"#).unwrap();
    fs::hard_link(&outside, wt.join("bundle.json")).unwrap();
    let outcome = h.execute(request(
        &wt,
        json!({"op": "publish", "path": "bundle.json"}),
    ));
    assert_eq!(
        refused(outcome),
        "publish bundle.json: the file has 2 hard links; a hard link can name a file outside the worktree, so this policy reads only files with one link"
    );
    assert!(host.calls().is_empty());
}

#[test]
fn a_megabyte_bundle_path_with_a_nul_byte_is_refused_by_its_length_and_not_echoed() {
    let host = TestRegistry::new();
    let h = handler_with(host.clone(), json!({}));
    let tmp = tempfile::tempdir().unwrap();
    let wt = tmp.path();
    // A path one byte over the limit, and a megabyte one ending in a NUL byte, are refused by
    // their length; neither is copied into the answer, which the log keeps.
    let over = "a".repeat(MAX_PATH_BYTES + 1);
    let mut huge = "a/".repeat(1 << 19);
    huge.push('\0');
    for path in [over, huge] {
        let outcome = h.execute(request(wt, json!({"op": "publish", "path": path})));
        assert_eq!(
            refused(outcome),
            format!(
                "publish: the path is {} bytes; the limit is {}",
                path.len(),
                MAX_PATH_BYTES
            )
        );
    }
    // At the limit the path is opened: one name of 4096 bytes is longer than a name may be.
    let at = "a".repeat(MAX_PATH_BYTES);
    let outcome = h.execute(request(wt, json!({"op": "publish", "path": &at})));
    assert_eq!(
        refused(outcome),
        format!("publish {at}: openat {at}: file name too long")
    );
    assert!(host.calls().is_empty());
}

// ---------------------------------------------------------------- requests

#[test]
fn malformed_requests_fail_with_the_reference_texts() {
    let host = TestRegistry::new();
    let h = handler_with(host.clone(), json!({}));
    let tmp = tempfile::tempdir().unwrap();
    let bundle = json!({"transitions": [docs_read()]});
    let mut r = request(
        tmp.path(),
        json!({"op": "publish", "bundle": bundle.clone()}),
    );
    r.scope = "x".into();
    assert_eq!(
        failed(h.execute(r)),
        "broker: Registry.Publish refused: scope \"x\" is not \"worktree\""
    );
    let cases = [
        (json!({"op": "delete", "bundle": bundle.clone()}), "broker: Registry.Publish refuses op \"delete\": not in this effect's op allowlist"),
        (json!({"op": "publish", "Bundle": bundle.clone()}), "broker: Registry.Publish refused: key \"Bundle\" aliases \"bundle\""),
        (json!({"op": "publish", "PATH": "a"}), "broker: Registry.Publish refused: key \"PATH\" aliases \"path\""),
        (json!({"OP": "publish", "path": "a"}), "broker: Registry.Publish refused: key \"OP\" aliases \"op\""),
        (json!({"bundle": bundle.clone()}), "broker: Registry.Publish refused: payload has no \"op\""),
        (json!({"op": true, "bundle": bundle.clone()}), "broker: Registry.Publish refused: payload key \"op\" must be a string"),
        (json!({"op": "publish"}), "broker: Registry.Publish refused: op \"publish\" needs exactly one of payload keys \"path\" and \"bundle\""),
        (json!({"op": "publish", "path": "a", "bundle": bundle.clone()}), "broker: Registry.Publish refused: op \"publish\" needs exactly one of payload keys \"path\" and \"bundle\""),
        (json!({"op": "publish", "path": 1}), "broker: Registry.Publish refused: payload key \"path\" of op \"publish\" must be a string"),
        (json!({"op": "publish", "bundle": "{}"}), "broker: Registry.Publish refused: payload key \"bundle\" of op \"publish\" must be a JSON object"),
        (json!({"op": "publish", "bundle": bundle.clone(), "replace": true}), "broker: Registry.Publish refused: op \"publish\" takes no payload key \"replace\""),
        (json!("publish"), "broker: Registry.Publish refused: payload is not a JSON object"),
    ];
    for (payload, text) in cases {
        assert_eq!(
            failed(h.execute(request(tmp.path(), payload.clone()))),
            text,
            "{payload}"
        );
    }
    let mut r = request(tmp.path(), json!({"op": "publish", "path": "b.json"}));
    r.worktree = None;
    assert_eq!(
        failed(h.execute(r)),
        "broker: Registry.Publish refused: the request binds no worktree (scope \"worktree\" needs one)"
    );
    let mut r = request(tmp.path(), json!({"op": "publish", "bundle": bundle}));
    r.effect = "Registry.Delete".into();
    assert_eq!(
        failed(h.execute(r)),
        "broker: the registry plugin does not handle effect \"Registry.Delete\""
    );
    assert!(host.calls().is_empty());
}

// ------------------------------------------------------------------ config

#[test]
fn config_is_validated() {
    let h = RegistryPlugin::new(json!({}), Host::noop()).unwrap();
    assert_eq!(
        h.policy().canonical_json(),
        "{\"maxBundleBytes\":1048576,\"maxDocuments\":256,\"policy\":\"worldd/registry-policy/v1\",\"sandbox\":\"worktree\"}"
    );
    let other = RegistryPlugin::new(json!({"maxBundleBytes": 10}), Host::noop()).unwrap();
    assert_ne!(other.policy_digest(), h.policy_digest());
    let cases = [
        (json!({"stateDir": "/x"}), "registry config: unknown key \"stateDir\"; registry accepts only: maxBundleBytes, maxDocuments"),
        (json!({"maxBundleBytes": 0}), "registry config: \"maxBundleBytes\" must be an integer from 1 to 67108864"),
        (json!({"maxDocuments": 5000}), "registry config: \"maxDocuments\" must be an integer from 1 to 4096"),
        (json!({"maxDocuments": -1}), "registry config: \"maxDocuments\" must be an integer from 1 to 4096"),
        (json!("x"), "registry config must be a JSON object"),
    ];
    for (config, text) in cases {
        assert_eq!(
            RegistryPlugin::new(config.clone(), Host::noop())
                .err()
                .unwrap(),
            text,
            "{config}"
        );
    }
}

// ------------------------------------------------------- the worktree itself

const SYMLINKED: &str = "broker: Registry.Publish failed: the episode's worktree is a symbolic link; a worktree must be a directory in the workspace root itself";
const CHANGING: &str = "broker: Registry.Publish failed: the episode's worktree kept changing between a directory and something else while it was being opened";

use handler_test_support::exchange;

/// A worktree with `tools/b.json` publishing `id`, in `parent/name`.
fn worktree_with_bundle(parent: &Path, name: &str, id: &str) -> std::path::PathBuf {
    let wt = parent.join(name);
    fs::create_dir_all(wt.join("tools")).unwrap();
    let bundle = json!({"transitions": [with_id(docs_read(), id)]});
    fs::write(wt.join("tools/b.json"), bundle.to_string()).unwrap();
    wt
}

#[test]
fn a_worktree_swapped_for_a_symlink_to_an_outside_directory_never_publishes_what_lies_there() {
    let host = TestRegistry::new();
    let h = handler_with(host.clone(), json!({}));
    let tmp = tempfile::tempdir().unwrap();
    let wt = worktree_with_bundle(tmp.path(), "ep", "inside-tool");
    let outside = worktree_with_bundle(tmp.path(), "outside", "outside-tool");
    let link = tmp.path().join("ep.link");
    symlink(&outside, &link).unwrap();

    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (stop, wt, link) = (stop.clone(), wt.clone(), link.clone());
        std::thread::spawn(move || {
            let mut swaps = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                exchange(&wt, &link);
                swaps += 1;
            }
            // Leave the real worktree at its own name.
            if swaps % 2 == 1 {
                exchange(&wt, &link);
            }
        })
    };
    let mut refused_symlink = 0;
    // 1000 calls at least, and on until the race was seen (a loaded machine may leave the
    // swapping thread unscheduled for a while), for 20 s at most.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut i = 0;
    while i < 1000 || (refused_symlink == 0 && std::time::Instant::now() < until) {
        i += 1;
        match h.execute(request(
            &wt,
            json!({"op": "publish", "path": "tools/b.json"}),
        )) {
            // The check of where the opened file lies reads two names that a rename between
            // the reads can set apart (again and again, under this loop): it then refuses,
            // which publishes nothing.
            Outcome::Ok { output }
                if [
                    "publish tools/b.json: cannot tell where the opened file lies (not beneath the worktree); nothing was read",
                    "publish tools/b.json: cannot tell where the opened file lies (the worktree kept being renamed); nothing was read",
                ]
                .iter()
                .any(|said| output.get("refused") == Some(&json!(said))) => {}
            Outcome::Ok { output } => assert_eq!(
                output.get("published"),
                Some(&json!(["inside-tool"])),
                "call {i}: {output:?}"
            ),
            Outcome::Failed { message } => {
                assert!(
                    message == SYMLINKED || message == CHANGING,
                    "call {i}: {message}"
                );
                refused_symlink += 1;
            }
            other => panic!("call {i}: {other:?}"),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    swapper.join().unwrap();
    assert!(
        host.calls().iter().all(|c| !c.contains("outside-tool")),
        "a bundle outside the worktree reached the registry"
    );
    assert!(
        refused_symlink > 0,
        "the race was never seen: the test proves nothing"
    );
}

#[test]
fn a_worktree_that_is_a_symlink_is_refused_and_nothing_is_published() {
    let host = TestRegistry::new();
    let h = handler_with(host.clone(), json!({}));
    let tmp = tempfile::tempdir().unwrap();
    let wt = worktree_with_bundle(tmp.path(), "ep", "inside-tool");
    let link = tmp.path().join("ep.link");
    symlink(&wt, &link).unwrap();
    assert_eq!(
        failed(h.execute(request(
            &link,
            json!({"op": "publish", "path": "tools/b.json"})
        ))),
        SYMLINKED
    );
    assert!(host.calls().is_empty());
}

#[test]
fn a_bundle_path_whose_links_expand_past_path_max_is_refused_as_too_long_to_check() {
    let host = TestRegistry::new();
    let h = handler_with(host.clone(), json!({}));
    let tmp = tempfile::tempdir().unwrap();
    let wt = worktree_with_bundle(tmp.path(), "ep", "inside-tool");
    // Two links of 3 KB each, each within the kernel's limits: 6 KB once expanded.
    fs::create_dir_all(wt.join("a".repeat(200))).unwrap();
    let up = format!("{}/../", "a".repeat(200)).repeat(15);
    symlink(format!("{up}l1"), wt.join("l0")).unwrap();
    symlink(format!("{up}tools/b.json"), wt.join("l1")).unwrap();
    assert_eq!(
        refused(h.execute(request(&wt, json!({"op": "publish", "path": "l0"})))),
        "publish l0: the path's links expand past 4096 bytes; cannot be checked"
    );
    assert!(host.calls().is_empty());
    // Either link alone is checked and published.
    let out = ok_output(h.execute(request(&wt, json!({"op": "publish", "path": "l1"}))));
    assert_eq!(out["published"], json!(["inside-tool"]), "{out:?}");
}
