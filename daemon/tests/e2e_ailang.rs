//! The real `worldd` binary with the real `worldd_workspace` and `worldd_ailang` plugins over
//! real HTTP, running the `ailang` STAND-IN (`tests/ailang-standin/ailang`, a Python script
//! that imitates the documented CLI; test code only, never shipped).
//!
//! The ailang plugin library must be built: `cargo build -p worldd-handler-ailang` (or
//! `cargo build --workspace`) before `cargo test -p worldd --test e2e_ailang`.

mod common;
// The executed-docs reader, for the page this file holds to the plugin.
#[allow(dead_code)]
#[path = "common/transcript.rs"]
mod transcript;

use std::path::Path;

use common::*;
use serde_json::{json, Value};

const PLUGINS: &[&str] = &["worldd_workspace", "worldd_ailang"];

const SE_TOOLS: &[&str] = &[
    "Workspace.Read=worktree:50",
    "Workspace.Write=worktree:50",
    "Ailang.Check=worktree:50",
    "Ailang.Run=worktree:50",
    "Ailang.RunEnv=worktree:50",
    "Ailang.RunNet=worktree:50",
    "Ailang.Discover=worktree:50",
    "Ailang.CLI=worktree:50",
];

/// A program with a stand-in mode (see the stand-in's docs) and an effect row.
fn program(mode: &str, row: &str) -> String {
    format!("-- standin: {mode}\nmodule m\n\nexport func main() -> () ! {{{row}}} {{\n  ()\n}}\n")
}

/// A daemon serving both plugins with the stand-in as the tool binary, plus `extra` flags.
fn start(extra: &[&str]) -> Daemon {
    let bin = format!("ailang.bin={}", path_str(&fixtures::ailang_standin()));
    let mut args = vec!["--plugin-config", bin.as_str()];
    args.extend_from_slice(extra);
    Daemon::start(PLUGINS, &args)
}

/// The tool output of an A2A call (the artifact's data part).
fn call(d: &Daemon, token: &str, task: &str, skill: &str, args: Value) -> Value {
    let v = a2a(d, token, task, skill, args);
    assert_eq!(v["result"]["status"]["state"], "completed", "{v}");
    v["result"]["artifacts"][0]["parts"][0]["data"].clone()
}

/// The tool output of an MCP tools/call (structuredContent).
fn mcp_call(d: &Daemon, token: &str, tool: &str, args: Value) -> Value {
    let v = mcp(
        d,
        token,
        "tools/call",
        json!({"name": tool, "arguments": args}),
    )
    .sse_json();
    v["result"]["structuredContent"].clone()
}

/// Every stand-in invocation in an episode (its log, kept in the episode's cache directory
/// `<db>/plugin-state/ailang/cache/<ep>/standin.log`).
fn standin_log(d: &Daemon, episode: &str) -> Vec<Value> {
    let file = d
        .db()
        .join("plugin-state/ailang/cache")
        .join(episode)
        .join("standin.log");
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Kill the daemon and return everything it wrote to stderr.
fn daemon_stderr(d: Daemon) -> String {
    d.halt_with_log().1
}

fn status(out: &Value) -> &str {
    out["world"]["effects"][0]["status"].as_str().unwrap_or("?")
}

#[test]
fn ailang_run_returns_each_of_the_four_outcome_shapes() {
    let d = start(&[]);
    let token = d.session("ep1", SE_TOOLS);
    let wt = d.root().join("ep1");

    // (a) admitted: the program is written through ailang-write, then run over A2A.
    let w = call(
        &d,
        &token,
        "w1",
        "ailang-write",
        json!({"path": "hello.ail", "content": fixtures::AILANG_HELLO}),
    );
    assert_eq!(w["ok"], true, "{w}");
    let a = call(&d, &token, "a", "ailang-run", json!({"path": "hello.ail"}));
    assert_eq!(status(&a), "ok", "{a}");
    assert_eq!(a["admitted"], true);
    assert_eq!(a["exit_code"], 0);
    assert_eq!(a["limit"], Value::Null);
    assert_eq!(a["stdout"], "hello from pi\n");
    assert_eq!(
        a["decision"],
        json!({"allowed_caps": ["FS", "IO"], "declared_effects": ["IO"], "function": "main", "ok": true})
    );
    assert!(a["stderr"]
        .as_str()
        .unwrap()
        .starts_with("policy: {\"ok\":true"));
    assert_eq!(a["policy"]["security_mode"], "restricted");
    assert_eq!(a["policy"]["caps"], json!(["IO", "FS"]));
    let policy_file = d
        .db()
        .join("plugin-state/ailang/policies/ep1.run-IO-FS.toml");
    let bytes = std::fs::read(&policy_file).unwrap();
    assert_eq!(
        a["policy"]["digest"],
        json!(hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes)))
    );
    let text = String::from_utf8(bytes).unwrap();
    assert!(
        text.contains(&format!("fs_sandbox = \"{}\"\n", wt.display())),
        "{text}"
    );

    // (b) admitted, then refused at runtime: exit 1, the reason before the policy line.
    std::fs::write(wt.join("escape.ail"), program("escape", "IO, FS")).unwrap();
    let b = call(&d, &token, "b", "ailang-run", json!({"path": "escape.ail"}));
    assert_eq!(
        (b["admitted"].clone(), b["exit_code"].clone()),
        (json!(true), json!(1))
    );
    assert!(b["stderr"]
        .as_str()
        .unwrap()
        .starts_with("Error: execution failed: readFile: path \"/etc/hosts\" escapes sandbox \"<worktree>\"\npolicy: "));

    // (c) refused before execution, over MCP this time.
    std::fs::write(wt.join("net.ail"), program("plain", "IO, Net")).unwrap();
    let c = mcp_call(&d, &token, "ailang-run", json!({"path": "net.ail"}));
    assert_eq!(status(&c), "ok", "{c}");
    assert_eq!(
        (c["admitted"].clone(), c["exit_code"].clone()),
        (json!(false), json!(2))
    );
    assert_eq!(c["decision"]["error_kind"], "policy_violation");
    assert_eq!(c["decision"]["message"], "declared effects exceed policy");
    assert_eq!(c["decision"]["missing_from_policy"], json!(["Net"]));

    // (d) supervisor limit: exit 3, limit = the parsed policy-result line.
    std::fs::write(wt.join("slow.ail"), program("limit", "IO")).unwrap();
    let dd = call(&d, &token, "d", "ailang-run", json!({"path": "slow.ail"}));
    assert_eq!(
        (dd["admitted"].clone(), dd["exit_code"].clone()),
        (json!(true), json!(3))
    );
    assert_eq!(dd["stdout"], "tick 1\ntick 2\n");
    assert_eq!(dd["limit"]["reason"], "timeout");
    assert_eq!(dd["limit"]["stage"], "execute");

    // Anything else: a failed effect, and the result holds only `world`.
    std::fs::write(wt.join("garbage.ail"), program("garbage", "IO")).unwrap();
    let g = call(
        &d,
        &token,
        "g",
        "ailang-run",
        json!({"path": "garbage.ail"}),
    );
    assert_eq!(status(&g), "failed");
    assert_eq!(g.as_object().unwrap().len(), 1, "{g}");

    // The run is provenance like any call: `why` verifies every link.
    let (code, out, err) = worldd(&["why", "--db", path_str(&d.db()), "a2a:ep1:a"], None);
    assert_eq!(code, 0, "{out}{err}");

    // The garbage run's failure reached the operator's log with the contract's text.
    let log = daemon_stderr(d);
    assert!(
        log.contains("broker: ailang run produced no recognised outcome envelope (rc 0)"),
        "{log}"
    );
}

/// `--plugin-config ailang.memoryMiB=256`: a program that allocates 1 GiB fails inside ailang,
/// the agent gets the contract's failure and the operator's log what ailang printed; the same
/// program runs on a daemon with the default limit.
#[test]
fn a_program_past_the_operators_memory_limit_fails_and_the_log_says_why() {
    let d = start(&["--plugin-config", "ailang.memoryMiB=256"]);
    let token = d.session("ep1", SE_TOOLS);
    std::fs::write(d.root().join("ep1/hog.ail"), program("hog", "IO")).unwrap();
    let out = call(&d, &token, "hog1", "ailang-run", json!({"path": "hog.ail"}));
    assert_eq!(status(&out), "failed", "{out}");
    let log = daemon_stderr(d);
    assert!(
        log.contains("broker: ailang run produced no recognised outcome envelope (rc 2)")
            && log.contains(
                "ailang: run in episode \"ep1\" produced no recognised outcome envelope (rc 2); stderr: fatal error: runtime: out of memory"
            ),
        "{log}"
    );

    let d = start(&[]);
    let token = d.session("ep1", SE_TOOLS);
    std::fs::write(d.root().join("ep1/hog.ail"), program("hog", "IO")).unwrap();
    let out = call(&d, &token, "hog1", "ailang-run", json!({"path": "hog.ail"}));
    assert_eq!(
        (
            status(&out),
            out["exit_code"].clone(),
            out["stdout"].clone()
        ),
        ("ok", json!(0), json!("allocated 1024 MiB\n")),
        "{out}"
    );
}

#[test]
fn a_capability_the_operator_did_not_enable_is_declined_and_nothing_runs() {
    let d = start(&[]);
    let token = d.session("ep1", SE_TOOLS);
    let wt = d.root().join("ep1");
    std::fs::write(wt.join("env.ail"), program("plain", "IO, Env")).unwrap();
    let out = call(
        &d,
        &token,
        "env1",
        "ailang-run",
        json!({"path": "env.ail", "caps": ["IO", "Env"]}),
    );
    // Declined before anything is spent, the gate's text in `refused`.
    assert_eq!(status(&out), "denied", "{out}");
    assert_eq!(
        out["refused"],
        "capability \"Env\" is not enabled by the operator (ailang config runAllowCaps)"
    );
    // Nothing ran: not the program, not even the policy summary.
    assert!(standin_log(&d, "ep1").is_empty());
    let (dir, _) = d.halt_with_log();

    // The same call on a deployment started with runAllowCaps ["Env"] runs the program
    // under a trusted_host variant of the policy.
    let bin = fixtures::ailang_standin();
    let d = Daemon::start_in(
        dir,
        PLUGINS,
        &[
            "--plugin-config",
            &format!("ailang.bin={}", path_str(&bin)),
            "--plugin-config",
            r#"ailang.runAllowCaps=["Env"]"#,
        ],
    );
    let out = call(
        &d,
        &token,
        "env2",
        "ailang-run",
        json!({"path": "env.ail", "caps": ["IO", "Env"]}),
    );
    assert_eq!(status(&out), "ok", "{out}");
    assert_eq!(out["admitted"], true);
    assert_eq!(out["policy"]["security_mode"], "trusted_host");
    let runs = standin_log(&d, "ep1")
        .iter()
        .filter(|l| l["cmd"] == "run")
        .count();
    assert_eq!(runs, 1);

    // Net is enabled nowhere: refused, with the contract's text in the operator's log.
    std::fs::write(wt.join("net.ail"), program("plain", "IO, Net")).unwrap();
    let out = call(
        &d,
        &token,
        "net1",
        "ailang-run",
        json!({"path": "net.ail", "caps": ["Net"]}),
    );
    assert_eq!(status(&out), "denied", "{out}");
    assert_eq!(
        out["refused"],
        "capability \"Net\" is not enabled by the operator (ailang config runAllowCaps)"
    );
}

#[test]
fn builtins_search_and_ailang_check_are_reshaped_by_their_finish() {
    let d = start(&[]);
    let token = d.session("ep1", SE_TOOLS);
    let wt = d.root().join("ep1");

    let out = call(
        &d,
        &token,
        "b1",
        "builtins-search",
        json!({"query": "FILE", "module": "std/fs"}),
    );
    assert_eq!(status(&out), "ok");
    let mut body = out.clone();
    body.as_object_mut().unwrap().remove("world");
    assert_eq!(
        body,
        json!({"count": 3, "matches": [
            {"name": "readFile", "module": "std/fs", "effect": "FS"},
            {"name": "writeFile", "module": "std/fs", "effect": "FS"},
            {"name": "fileExists", "module": "std/fs", "effect": "FS"}]})
    );
    // Over MCP, with the 10-match cap of a query.
    let out = mcp_call(&d, &token, "builtins-search", json!({"query": "std"}));
    assert_eq!(out["count"], 10, "{out}");

    // ailang-check: the finish turns ai_check's report into structured diagnostics.
    std::fs::write(wt.join("hello.ail"), fixtures::AILANG_HELLO).unwrap();
    let out = call(
        &d,
        &token,
        "c1",
        "ailang-check",
        json!({"path": "hello.ail"}),
    );
    let mut body = out.clone();
    body.as_object_mut().unwrap().remove("world");
    assert_eq!(
        body,
        json!({"ok": true, "passed": true, "error_count": 0, "errors": []})
    );
    std::fs::write(wt.join("bad.ail"), "-- standin: type-error\nmodule bad\n").unwrap();
    let out = mcp_call(&d, &token, "ailang-check", json!({"path": "bad.ail"}));
    assert_eq!(out["ok"], true, "{out}");
    assert_eq!(out["passed"], false);
    assert_eq!(out["error_count"], 1);
    assert_eq!(
        out["errors"][0],
        json!({"code": "TC_MISMATCH", "file": "bad.ail",
               "message": "bad.ail:3:5: type mismatch: expected int, found string"})
    );
    // The policy layer's refusal passes through the finish.
    let out = call(
        &d,
        &token,
        "c2",
        "ailang-check",
        json!({"path": "nope.ail"}),
    );
    assert_eq!(
        (
            out["ok"].clone(),
            out["status"].clone(),
            out["refused"].clone()
        ),
        (
            json!(false),
            json!("ok"),
            json!("ai_check nope.ail: open nope.ail: no such file or directory")
        )
    );

    // examples-search without an examplesDir: declined before anything is spent, nothing run.
    let before = standin_log(&d, "ep1").len();
    let out = call(
        &d,
        &token,
        "e1",
        "examples-search",
        json!({"query": "match"}),
    );
    assert_eq!(status(&out), "denied", "{out}");
    assert_eq!(out["ok"], false);
    assert!(out["refused"]
        .as_str()
        .unwrap()
        .starts_with("no examples corpus configured: start worldd serve with --plugin-config ailang.examplesDir=DIR"));
    let tool = format!(
        "sha256:{}",
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(
            std::fs::read(fixtures::ailang_standin()).unwrap()
        ))
    );
    assert_eq!(standin_log(&d, "ep1").len(), before);

    // ailang-cli: an allowlisted op runs; the write flag is refused by the plan.
    let out = call(&d, &token, "v1", "ailang-cli", json!({"op": "version"}));
    assert_eq!(out["ok"], true, "{out}");
    assert_eq!(out["tool"], json!(tool));
    let out = call(
        &d,
        &token,
        "f1",
        "ailang-cli",
        json!({"op": "fmt", "path": "hello.ail", "flags": {"write": ""}}),
    );
    assert_eq!(
        out["refused"],
        "op \"fmt\" flag \"write\" writes the worktree; ailang-cli never writes (fmt without it returns the formatted text; write it with ailang-write)"
    );
}

const AILANG_TOOLS: [(&str, &str); 5] = [
    ("ailang-check", r#"{"path": "a.ail"}"#),
    ("ailang-run", r#"{"path": "a.ail"}"#),
    ("builtins-search", r#"{}"#),
    ("examples-search", r#"{"query": "x"}"#),
    ("ailang-cli", r#"{"op": "version"}"#),
];

fn assert_r8(d: &Daemon, token: &str, prefix: &str) {
    for (tool, args) in AILANG_TOOLS {
        let args: Value = serde_json::from_str(args).unwrap();
        let v = a2a(d, token, &format!("{prefix}-{tool}"), tool, args);
        assert_eq!(v["error"]["code"], -32603, "{tool}: {v}");
        assert_eq!(
            v["error"]["message"], "transition declares an effect this daemon has no handler for",
            "{tool}"
        );
    }
}

#[test]
fn a_workspace_only_deployment_refuses_every_ailang_tool_by_r8() {
    // Publish every tool with a full deployment, then restart with --handler workspace.
    let d = start(&[]).restart(PLUGINS, &["--handler", "workspace"]);
    let token = d.session("ep1", SE_TOOLS);
    let w = call(
        &d,
        &token,
        "w1",
        "ailang-write",
        json!({"path": "a.ail", "content": fixtures::AILANG_HELLO}),
    );
    assert_eq!(w["ok"], true, "{w}");
    let r = call(&d, &token, "r1", "ailang-read", json!({"path": "a.ail"}));
    assert_eq!(r["content"], fixtures::AILANG_HELLO);
    assert_r8(&d, &token, "ws");
    assert!(standin_log(&d, "ep1").is_empty());
}

#[test]
fn without_tool_ailang_bin_the_plugin_declines_and_its_tools_are_refused_by_r8() {
    let d = Daemon::start(PLUGINS, &[]);
    let token = d.session("ep1", SE_TOOLS);
    let r = call(
        &d,
        &token,
        "w1",
        "ailang-write",
        json!({"path": "a.txt", "content": "x"}),
    );
    assert_eq!(r["ok"], true);
    assert_r8(&d, &token, "nobin");
    let log = daemon_stderr(d);
    assert!(
        log.contains("declined: no ailang binary configured (start worldd serve with --plugin-config ailang.bin=PATH)"),
        "{log}"
    );
}

/// `docs/plugins/ailang.md` says what the plugin writes and answers; this holds the page to the
/// plugin run with the stand-in: its configuration example starts a daemon; the base policy it
/// shows is the file written for an episode, byte for byte but the worktree's path; the policy
/// files, cache and archived binary lie where and with the modes it lists; the run variant of
/// the default caps has the name it gives; and the refusals it quotes (no corpus, a config
/// entry, an unknown key, the decline) are what the daemon says.
#[test]
fn the_ailang_page_is_what_the_plugin_writes_and_says() {
    let page = transcript::page("docs/plugins/ailang.md");
    let toml_blocks: Vec<String> = page
        .split("```toml\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap().to_owned())
        .collect();
    assert_eq!(
        toml_blocks.len(),
        2,
        "the configuration and the base policy"
    );
    fn quoted<'t>(page: &str, text: &'t str) -> &'t str {
        assert!(page.contains(text), "the page does not say {text:?}");
        text
    }

    // The configuration example, with this machine's binary and corpus.
    let corpus = tempfile::tempdir().unwrap();
    let config = toml_blocks[0]
        .replace(
            "/usr/local/bin/ailang",
            path_str(&fixtures::ailang_standin()),
        )
        .replace("/srv/ailang/examples", path_str(corpus.path()));
    assert_ne!(
        config, toml_blocks[0],
        "the example names a binary and a corpus"
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("world.toml"), &config).unwrap();
    let file = path_str(&dir.path().join("world.toml")).to_owned();
    let configured = Daemon::start_in(dir, PLUGINS, &["--config", &file]);
    drop(configured);

    // One check and one run in episode ep1 write the base policy and the default run variant.
    let d = start(&[]);
    let token = d.session("ep1", SE_TOOLS);
    let wt = d.root().join("ep1");
    std::fs::write(wt.join("hello.ail"), fixtures::AILANG_HELLO).unwrap();
    let out = call(
        &d,
        &token,
        "c1",
        "ailang-check",
        json!({"path": "hello.ail"}),
    );
    assert_eq!(out["passed"], true, "{out}");
    let out = call(&d, &token, "r1", "ailang-run", json!({"path": "hello.ail"}));
    assert_eq!(out["admitted"], true, "{out}");
    let state = d.db().join("plugin-state/ailang");
    let written = std::fs::read_to_string(state.join("policies/ep1.toml")).unwrap();
    let shown = toml_blocks[1].replace(
        "\"/srv/world/worktrees/ep1\"",
        &format!("\"{}\"", path_str(&wt.canonicalize().unwrap())),
    );
    assert_eq!(
        written, shown,
        "the base policy the page shows is the one written"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    quoted(
        &page,
        "policies/<ep>.toml                     base policy (check, discover, cli), mode 0600",
    );
    assert_eq!(mode(&state.join("policies/ep1.toml")), 0o600);
    quoted(&page, "`ep1.run-IO-FS.toml`");
    assert_eq!(mode(&state.join("policies/ep1.run-IO-FS.toml")), 0o600);
    quoted(
        &page,
        "cache/<ep>/                            the episode's HOME and AILANG_CACHE_DIR, mode 0700",
    );
    assert_eq!(mode(&state.join("cache/ep1")), 0o700);
    quoted(
        &page,
        "bin/<sha256>/ailang                    the archived binary, mode 0555",
    );
    let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(
        std::fs::read(fixtures::ailang_standin()).unwrap(),
    ));
    let archived = state.join("bin").join(&digest).join("ailang");
    assert_eq!(mode(&archived), 0o555);
    assert_eq!(
        std::fs::read(&archived).unwrap(),
        std::fs::read(fixtures::ailang_standin()).unwrap()
    );

    // examples-search without a corpus: the page's refusal, whole.
    let out = call(&d, &token, "e1", "examples-search", json!({"query": "x"}));
    let refused = out["refused"].as_str().unwrap().to_owned();
    quoted(
        &page,
        &format!("{{\"ok\": false, \"refused\": \"{refused}\"}}"),
    );
    drop(d);

    // The refusals the configuration section quotes.
    let refused_config = |config: &str| {
        let dir = tempfile::tempdir().unwrap();
        let bin = format!("ailang.bin={}", path_str(&fixtures::ailang_standin()));
        let mut cmd = Daemon::serve_command(&dir, PLUGINS);
        cmd.args(["--plugin-config", &bin, "--plugin-config", config]);
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        String::from_utf8_lossy(&out.stderr).trim_end().to_owned()
    };
    let err = refused_config(r#"ailang.runNetAllow=["10.0.0.1:80"]"#);
    let said = quoted(
        &page,
        r#"the plugin rejected its config: ailang config: runNetAllow entry "10.0.0.1:80" must be a canonical loopback IP:PORT with a port from 1 to 65535 (e.g. 127.0.0.1:8080 or [::1]:8080)"#,
    );
    assert!(err.ends_with(said), "{err}");
    let err = refused_config("ailang.x=1");
    let said = quoted(
        &page,
        r#"unknown config key "x" (known: allowHardLinks, bin, examplesDir, memoryMiB, runAllowCaps, runNetAllow, runNetAllowHttp, stateDir)"#,
    );
    assert!(err.ends_with(said), "{err}");

    // Without `bin` the plugin declines with the page's line.
    let (_, log) = Daemon::start(PLUGINS, &[]).halt_with_log();
    let said = quoted(
        &page,
        "plugin ailang not started: declined: no ailang binary configured (start worldd serve with --plugin-config ailang.bin=PATH)",
    );
    assert!(log.contains(said), "{log}");
}

/// Attack (or accident): two arguments that differ in a decimal's last digits, resent under
/// one idempotency key. The MCP body parser read `36.103759997804964` as its neighbouring
/// double `36.10375999780496` (serde_json's default float parser is not correctly rounded),
/// so the second call, with other arguments, was answered as a replay of the first, and the
/// committed input was not what the agent sent. Both are now read as the doubles they name:
/// the resend is a key conflict, and the input committed is the one sent.
#[test]
fn a_resend_whose_decimal_differs_in_its_last_digits_is_a_key_conflict_not_a_replay() {
    let d = start(&[]);
    let token = d.session("ep1", SE_TOOLS);
    std::fs::write(d.root().join("ep1").join("hello.txt"), "hi\n").unwrap();
    let send = |x: &str| {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"ailang-read","arguments":{{"path":"hello.txt","x":{x}}},"_meta":{{"world/idempotencyKey":"k-float"}}}}}}"#
        );
        mcp_text(&d, &token, "2025-06-18", body.as_bytes()).sse_json()
    };
    let first = send("36.103759997804964");
    assert_eq!(first["result"]["_meta"]["world/replayed"], false, "{first}");
    let again = send("36.10375999780496");
    assert_eq!(
        again["error"]["message"],
        "idempotency key \"k-float\" was already used with other arguments in this episode",
        "{again}"
    );
    let (code, out, err) = worldd(&["why", "--db", path_str(&d.db()), "1"], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(r#""x":36.103759997804964"#), "{out}");
}
