//! Ailang.Check, Ailang.Discover and Ailang.CLI: the policy-tool ops, their stamps, the
//! examples refusal, op allowlists, key aliases and the reply checks.

mod common;

use std::fs;

use common::*;
use handler_kit::serde_json::{json, Value};
use handler_kit::{EffectHandler, Outcome, Preflight};
use worldd_ailang::{PolicySpec, CHECK, CLI, DISCOVER, NO_CORPUS, RUN};

#[test]
fn ai_check_returns_the_policy_tool_reply_stamped_with_tool_and_policy_digest() {
    let f = Fixture::new();
    f.put("hello.ail", HELLO);
    let out = f.ok(CHECK, json!({"op": "ai_check", "path": "hello.ail"}));
    assert_eq!(out["ok"], true);
    assert_eq!(out["exit_code"], 0);
    assert_eq!(
        out["argv"],
        json!(["ailang", "check", "--json", "hello.ail"])
    );
    let report: Value = handler_kit::serde_json::from_str(out["stdout"].as_str().unwrap()).unwrap();
    assert_eq!(report["check"]["passed"], true);
    // tool = sha256 of the binary as configured; policy_digest = sha256 of the base policy.
    assert_eq!(out["tool"], json!(f.tool()));
    assert_eq!(f.handler.tool(), f.tool());
    let base = fs::read(f.policy("ep.toml")).unwrap();
    assert_eq!(base, PolicySpec::base().text(&f.worktree()).as_bytes());
    assert_eq!(out["policy_digest"], json!(sha256_hex(&base)));
    // The checked payload went to the policy-tool after one summary.
    assert_eq!(f.ran("policy-tool", Some("summary")), 1);
    assert_eq!(f.ran("policy-tool", Some("ai_check")), 1);
}

#[test]
fn a_policy_layer_refusal_is_an_ok_effect_with_ok_false() {
    let f = Fixture::new();
    let out = f.ok(CHECK, json!({"op": "ai_check", "path": "nope.ail"}));
    assert_eq!(out["ok"], false);
    assert_eq!(
        out["refused"],
        "ai_check nope.ail: open nope.ail: no such file or directory"
    );
    assert_eq!(out["tool"], json!(f.tool()));
    assert!(out["policy_digest"].is_string());
}

#[test]
fn builtins_list_returns_the_text_inventory() {
    let f = Fixture::new();
    let out = f.ok(DISCOVER, json!({"op": "builtins_list"}));
    assert_eq!(out["ok"], true);
    assert!(out["stdout"]
        .as_str()
        .unwrap()
        .starts_with("Total: 22 builtins\n"));
}

#[test]
fn examples_search_without_a_corpus_refuses_without_running_anything() {
    let f = Fixture::new();
    let out = f.ok(
        DISCOVER,
        json!({"op": "examples_search", "query": "pattern"}),
    );
    let digest = sha256_hex(PolicySpec::base().text(&f.worktree()).as_bytes());
    assert_eq!(
        Value::Object(out),
        json!({"ok": false, "refused": NO_CORPUS, "tool": f.tool(), "policy_digest": digest})
    );
    assert!(NO_CORPUS.starts_with(
        "no examples corpus configured: start worldd serve with --plugin-config ailang.examplesDir=DIR (an AILANG examples corpus: manifest.json plus runnable/;"
    ));
    // The same for ailang-cli's examples ops.
    let out = f.ok(CLI, json!({"op": "examples_list"}));
    assert_eq!(out["refused"], NO_CORPUS);
    assert!(f.log().is_empty(), "nothing may run");
}

/// Without a corpus an examples op is known to be refused before anything runs, so the
/// preflight declines it (`denied:handler`, its unit not spent) instead of letting an effect
/// that runs nothing cost one; with a corpus it proceeds.
#[test]
fn examples_ops_without_a_corpus_are_declined_before_anything_is_spent() {
    let f = Fixture::new();
    for (effect, payload) in [
        (
            DISCOVER,
            json!({"op": "examples_search", "query": "pattern"}),
        ),
        (CLI, json!({"op": "examples_list"})),
        (CLI, json!({"op": "examples_search", "query": "x"})),
        (CLI, json!({"op": "examples_show", "module": "m"})),
        (CLI, json!({"op": "examples_tags"})),
    ] {
        match f.handler.preflight(&f.request(effect, payload.clone())) {
            Preflight::Decline(answer) => assert_eq!(
                Value::Object(answer),
                json!({"ok": false, "refused": NO_CORPUS}),
                "{effect} {payload}"
            ),
            other => panic!("{effect} {payload}: not declined: {other:?}"),
        }
    }
    // Other ops of the same effects proceed.
    for (effect, payload) in [
        (DISCOVER, json!({"op": "builtins_list"})),
        (CLI, json!({"op": "version"})),
    ] {
        let request = f.request(effect, payload.clone());
        assert!(
            matches!(f.handler.preflight(&request), Preflight::Proceed),
            "{payload}"
        );
    }
    let corpus = tempfile::tempdir().unwrap();
    let g = Fixture::with(json!({"examplesDir": corpus.path().display().to_string()}));
    let request = g.request(DISCOVER, json!({"op": "examples_search", "query": "x"}));
    assert!(matches!(g.handler.preflight(&request), Preflight::Proceed));
    assert!(f.log().is_empty() && g.log().is_empty(), "nothing may run");
}

#[test]
fn examples_search_with_a_corpus_searches_it() {
    let corpus = tempfile::tempdir().unwrap();
    fs::create_dir(corpus.path().join("runnable")).unwrap();
    fs::write(corpus.path().join("manifest.json"), "{}").unwrap();
    fs::write(
        corpus.path().join("runnable/match.ail"),
        "-- pattern matching on lists\nmodule m\n",
    )
    .unwrap();
    let f = Fixture::with(json!({"examplesDir": corpus.path().display().to_string()}));
    let out = f.ok(
        DISCOVER,
        json!({"op": "examples_search", "query": "Pattern"}),
    );
    assert_eq!(out["ok"], true, "{out:?}");
    assert_eq!(
        out["stdout"],
        "runnable/match.ail: -- pattern matching on lists\n"
    );
    assert_eq!(out["tool"], json!(f.tool()));
}

#[test]
fn cli_ops_run_through_the_policy_tool() {
    let f = Fixture::new();
    let out = f.ok(CLI, json!({"op": "version"}));
    assert_eq!(out["ok"], true);
    assert!(out["stdout"]
        .as_str()
        .unwrap()
        .starts_with("AILANG v0.52.1"));
    f.put("a.ail", "x  \ny\n");
    let out = f.ok(CLI, json!({"op": "fmt", "path": "a.ail"}));
    assert_eq!(out["stdout"], "x\ny\n");
    let out = f.ok(
        CLI,
        json!({"op": "check", "path": "a.ail", "flags": {"json": ""}}),
    );
    assert_eq!(out["ok"], true);
    // Flag admission is the policy-tool's: an ok effect with ok:false.
    let out = f.ok(
        CLI,
        json!({"op": "check", "path": "a.ail", "flags": {"zz": ""}}),
    );
    assert_eq!(
        out["refused"],
        "op check does not admit flag --zz (admitted: --json --quiet --strict-syntax)"
    );
}

#[test]
fn cli_never_writes() {
    let f = Fixture::new();
    for flag in ["write", "Write", "--write"] {
        let mut flags = handler_kit::JsonObject::new();
        flags.insert(flag.into(), json!(""));
        assert_eq!(
            f.failed(CLI, json!({"op": "fmt", "path": "a.ail", "flags": flags})),
            "broker: Ailang.CLI refused: flag \"write\" writes the worktree; Ailang.CLI never writes (use Workspace.Write)"
        );
    }
    assert!(f.log().is_empty());
}

#[test]
fn the_cli_allowlist_is_the_summary_cli_list() {
    let f = Fixture::new();
    f.control(json!({"summary": {"cli": ["version", "check"]}}));
    assert_eq!(f.ok(CLI, json!({"op": "version"}))["ok"], true);
    assert_eq!(
        f.failed(CLI, json!({"op": "test"})),
        "broker: Ailang.CLI refuses op \"test\": not in this effect's op allowlist"
    );
    // Ops this plugin does not know are refused whatever the summary says.
    f.control(json!({"summary": {"cli": ["version", "run", "write"]}}));
    for op in ["run", "write", "read"] {
        assert_eq!(
            f.failed(CLI, json!({"op": op})),
            format!("broker: Ailang.CLI refuses op \"{op}\": not in this effect's op allowlist")
        );
    }
}

#[test]
fn handler_refusals_fail_the_effect() {
    let f = Fixture::new();
    let cases = [
        (CHECK, json!({"op": "read", "path": "a"}), "broker: Ailang.Check refuses op \"read\": not in this effect's op allowlist"),
        (DISCOVER, json!({"op": "ai_check", "path": "a"}), "broker: Ailang.Discover refuses op \"ai_check\": not in this effect's op allowlist"),
        (CLI, json!({"op": "run", "path": "a"}), "broker: Ailang.CLI refuses op \"run\": not in this effect's op allowlist"),
        (CHECK, json!({"OP": "ai_check", "path": "a"}), "broker: Ailang.Check refused: key \"OP\" aliases \"op\""),
        (CLI, json!({"op": "check", "Flags": {}}), "broker: Ailang.CLI refused: key \"Flags\" aliases \"flags\""),
        (CHECK, json!({"op": "ai_check", "Path": "a", "path": "b"}), "broker: Ailang.Check refused: key \"Path\" aliases \"path\""),
        (CHECK, json!(["op"]), "broker: Ailang.Check refused: payload is not a JSON object"),
        (CHECK, json!({"path": "a"}), "broker: Ailang.Check refused: payload has no \"op\""),
        (CHECK, json!({"op": "ai_check"}), "broker: Ailang.Check refused: op \"ai_check\" needs payload key \"path\""),
        (CHECK, json!({"op": "ai_check", "path": "a", "flags": {}}), "broker: Ailang.Check refused: payload key \"flags\" is not admitted by op \"ai_check\""),
        (DISCOVER, json!({"op": "builtins_list", "flags": {"json": ""}}), "broker: Ailang.Discover refused: payload key \"flags\" is not admitted by op \"builtins_list\""),
        (DISCOVER, json!({"op": "examples_search"}), "broker: Ailang.Discover refused: op \"examples_search\" needs payload key \"query\""),
        (CLI, json!({"op": "check", "flags": {"json": true}}), "broker: Ailang.CLI refused: payload key \"flags\" of op \"check\" must be an object of string values"),
        (CLI, json!({"op": "check", "path": 1}), "broker: Ailang.CLI refused: payload key \"path\" of op \"check\" must be a string"),
        ("Ailang.Other", json!({"op": "x"}), "broker: the ailang plugin does not handle effect \"Ailang.Other\""),
    ];
    for (effect, payload, message) in cases {
        assert_eq!(f.failed(effect, payload), message);
    }
    let mut request = f.request(CHECK, json!({"op": "ai_check", "path": "a"}));
    request.scope = "repo".into();
    let Outcome::Failed { message } = f.handler.execute(request) else {
        panic!()
    };
    assert_eq!(
        message,
        "broker: Ailang.Check refused: scope \"repo\" is not \"worktree\""
    );
    let mut request = f.request(CHECK, json!({"op": "ai_check", "path": "a"}));
    request.worktree = None;
    assert!(matches!(f.handler.execute(request), Outcome::Failed { .. }));
    let mut request = f.request(CHECK, json!({"op": "ai_check", "path": "a"}));
    request.episode = "../x".into();
    let Outcome::Failed { message } = f.handler.execute(request) else {
        panic!()
    };
    assert_eq!(
        message,
        "broker: Ailang.Check refused: episode \"../x\" is not a valid episode name"
    );
    assert!(f.log().is_empty(), "nothing may run");
}

#[test]
fn policy_tool_replies_are_checked() {
    let f = Fixture::new();
    let cases = [
        (json!({"reply": "{\"ok\":true,\"tool\":\"x\"}"}), "broker: Ailang.Check failed: the policy-tool reply carries the reserved key \"tool\""),
        (json!({"reply": "{\"ok\":true,\"policy_digest\":\"x\"}"}), "broker: Ailang.Check failed: the policy-tool reply carries the reserved key \"policy_digest\""),
        (json!({"reply": "{\"ok\":true,\"world\":{}}"}), "broker: Ailang.Check failed: the policy-tool reply carries the reserved key \"world\""),
        (json!({"reply": "{\"ok\":\"yes\"}"}), "broker: Ailang.Check failed: the policy-tool reply has no boolean \"ok\""),
        (json!({"reply": "[1]"}), "broker: Ailang.Check failed: ailang policy-tool replied with something that is not one JSON object: \"[1]\""),
        (json!({"reply": "not json"}), "broker: Ailang.Check failed: ailang policy-tool replied with something that is not one JSON object: \"not json\""),
        (json!({"reply": "", "reply_rc": 2}), "broker: Ailang.Check failed: ailang policy-tool exited with rc 2: (no stderr)"),
        // Larger than any tool result may be: refused before it is parsed.
        (
            json!({"reply": format!("{{\"ok\":true,\"x\":\"{}\"}}", "y".repeat(1 << 20))}),
            "broker: Ailang.Check failed: ailang policy-tool replied with 1048594 bytes; a reply is at most 1048576 (the most a tool's result may hold)",
        ),
    ];
    for (control, message) in cases {
        f.control(control);
        assert_eq!(
            f.failed(CHECK, json!({"op": "ai_check", "path": "a"})),
            message
        );
    }
}

#[test]
fn a_state_dir_inside_the_worktree_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("wt");
    fs::create_dir(&root).unwrap();
    let handler = <worldd_ailang::AilangPlugin as handler_kit::Plugin>::new(
        Fixture::config(&root.join(".state"), json!({})),
        handler_kit::Host::noop(),
    )
    .unwrap();
    for effect in [CHECK, RUN] {
        let request = handler_kit::Request {
            invocation_id: "i".into(),
            episode: "ep".into(),
            worktree: Some(root.display().to_string()),
            effect: effect.into(),
            scope: "worktree".into(),
            cost: 1,
            payload: if effect == RUN {
                json!({"op": "run", "path": "a.ail"})
            } else {
                json!({"op": "ai_check", "path": "a.ail"})
            },
            deadline_ms: 10_000,
        };
        let Outcome::Failed { message } = handler.execute(request) else {
            panic!()
        };
        assert_eq!(
            message,
            format!("broker: {effect} refused: the ailang plugin's stateDir overlaps the episode's worktree; an agent could rewrite its own policy")
        );
    }
}

/// Attack: in a linked worktree `.git` is a file naming the operator's repository by its host
/// path, and `.git/config` may hold credentialed remote URLs; `ailang-cli fmt` of `.git/config`
/// printed the file, credential included. A path argument in git's own data (at any depth, and
/// names like it) is now declined by the preflight, before any spend, and refused by the
/// effect if it comes anyway; the binary never runs. (A program run with `FS` can still read
/// them: the binary's policy has no read rule. docs/plugins/ailang.md says so.)
#[test]
fn a_path_argument_in_gits_own_data_is_declined_before_anything_runs() {
    let f = Fixture::new();
    f.put(
        ".git/config",
        "[remote \"origin\"]\n\turl = https://user:secret@example.com/r\n",
    );
    let rule = ".git/ is git's own data, not worktree content; the lane's tools do not read it";
    let cases = [
        (CLI, json!({"op": "fmt", "path": ".git/config"}), format!("argument \"path\" \".git/config\": {rule}")),
        (CHECK, json!({"op": "ai_check", "path": ".git"}), format!("argument \"path\" \".git\": {rule}")),
        (
            CLI,
            json!({"op": "check", "module": "sub/.GIT/x.ail"}),
            format!("argument \"module\" \"sub/.GIT/x.ail\": \"sub/.GIT\" is named like .git (names are compared after NFKC and case folding); {rule}"),
        ),
        (RUN, json!({"op": "run", "path": ".git/hooks/x.ail"}), format!("argument \"path\" \".git/hooks/x.ail\": {rule}")),
    ];
    for (effect, payload, why) in cases {
        let request = f.request(effect, payload.clone());
        match f.handler.preflight(&request) {
            handler_kit::Preflight::Decline(answer) => {
                assert_eq!(
                    Value::Object(answer),
                    json!({"ok": false, "refused": why}),
                    "{payload}"
                );
            }
            other => panic!("{payload}: {other:?}"),
        }
        let failed = f.failed(effect, payload.clone());
        assert!(failed.ends_with(&why), "{payload}: {failed}");
        assert!(!failed.contains("secret"), "{failed}");
    }
    assert_eq!(
        f.ran("policy-tool", None) + f.ran("run", None),
        0,
        "the binary never ran"
    );
    // Names that only look close still run.
    f.put(".gitignore.ail", "x\n");
    assert_eq!(
        f.ok(CLI, json!({"op": "fmt", "path": ".gitignore.ail"}))["ok"],
        true
    );
}

/// Attack: an `ailang-cli` reply a few hundred bytes under 1 MiB. The handler checked the
/// reply's length before it added its `tool` and `policy_digest` stamps, and left no room for
/// the `world` block the daemon adds: the answer it returned was over the daemon's 1 MiB limit,
/// so the agent never saw the handler's own words. The result as returned, stamps included,
/// must now leave 4 KiB for the `world` block; one byte more is the handler's failure, saying
/// so.
#[test]
fn a_cli_reply_that_fits_only_without_its_stamps_and_world_block_is_the_handlers_failure() {
    const FITS: usize = (1 << 20) - 4096;
    let f = Fixture::new();
    let reply =
        |n: usize| json!({"reply": format!("{{\"ok\":true,\"stdout\":\"{}\"}}", "y".repeat(n))});
    let result_len =
        |out: &handler_kit::JsonObject| handler_kit::serde_json::to_string(out).unwrap().len();
    f.control(reply(1));
    let small = result_len(&f.ok(CLI, json!({"op": "fmt", "path": "a.ail"})));
    // The largest stdout whose stamped result is exactly FITS bytes.
    let n = FITS - small + 1;
    f.control(reply(n));
    let out = f.ok(CLI, json!({"op": "fmt", "path": "a.ail"}));
    assert_eq!(result_len(&out), FITS);
    assert_eq!(out["tool"], json!(f.tool()));
    f.control(reply(n + 1));
    let message = match f.exec(CLI, json!({"op": "fmt", "path": "a.ail"})) {
        Outcome::Failed { message } => message,
        // Not the megabyte itself: its size says it.
        Outcome::Ok { output } => panic!("ok, with a result of {} bytes", result_len(&output)),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        message,
        format!(
            "broker: Ailang.CLI failed: ailang policy-tool's reply is {} bytes as the tool's result (with its tool and policy_digest stamps); a result may take at most {FITS}, leaving 4096 of the 1048576 a tool's answer may hold for the daemon's world block",
            FITS + 1
        )
    );
    // The reply of the report: 4 bytes under 1 MiB as the binary wrote it, over it once stamped.
    let raw = |n: usize| format!("{{\"ok\":true,\"stdout\":\"{}\"}}", "y".repeat(n)).len();
    let n = (1 << 20) - 4 - raw(0);
    assert_eq!(raw(n), (1 << 20) - 4);
    f.control(reply(n));
    match f.exec(CLI, json!({"op": "fmt", "path": "a.ail"})) {
        Outcome::Failed { message } => assert!(
            message.starts_with("broker: Ailang.CLI failed: ailang policy-tool's reply is 1048"),
            "{message}"
        ),
        Outcome::Ok { output } => panic!("ok, with a result of {} bytes", result_len(&output)),
        other => panic!("{other:?}"),
    }
}
