//! Ailang.Run / RunEnv / RunNet through the safe trait, with the `ailang` stand-in: the four
//! outcome shapes, unrecognised envelopes, operator gates, policy variants, the child's
//! environment and process group, the timeout, the output cap and the memory limit.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use handler_kit::serde_json::{self, json, Value};
use handler_kit::{EffectHandler, Host, Outcome, Preflight};
use handler_test_support::LogLines;
use worldd_ailang::{PolicySpec, ANSWER_MARGIN, HARD_CAP, RUN, RUN_ENV, RUN_NET};

fn run(path: &str) -> Value {
    json!({"op": "run", "path": path, "stdin": "", "argv": [], "caps": ["IO", "FS"]})
}

#[test]
fn a_admitted_run_prints_its_output_and_one_policy_line() {
    let f = Fixture::new();
    f.put("hello.ail", HELLO);
    let out = f.ok(RUN, run("hello.ail"));
    let keys: Vec<&str> = out.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "admitted",
            "decision",
            "exit_code",
            "limit",
            "policy",
            "stderr",
            "stdout"
        ]
    );
    assert_eq!(out["admitted"], true);
    assert_eq!(out["exit_code"], 0);
    assert_eq!(out["limit"], Value::Null);
    assert_eq!(out["stdout"], "hello from pi\n");
    assert_eq!(
        out["decision"],
        json!({"allowed_caps": ["FS", "IO"], "declared_effects": ["IO"], "function": "main", "ok": true})
    );
    let stderr = out["stderr"].as_str().unwrap();
    assert!(stderr.starts_with("policy: {\"ok\":true"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1);

    // The run used its own variant file, verified once and named in the output.
    let file = f.policy("ep.run-IO-FS.toml");
    let bytes = fs::read(&file).unwrap();
    assert_eq!(bytes, PolicySpec::base().text(&f.worktree()).as_bytes());
    assert_eq!(
        out["policy"],
        json!({"digest": sha256_hex(&bytes), "security_mode": "restricted",
               "caps": ["IO", "FS"], "net_allow": []})
    );
    assert!(stderr.contains(&sha256_hex(&bytes)));
    assert_eq!(
        fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        fs::metadata(f.cache()).unwrap().permissions().mode() & 0o777,
        0o700
    );
    // No `tool`/`policy_digest` stamp on run outputs: `policy.digest` names the rules.
    assert!(!out.contains_key("tool"));
}

#[test]
fn b_admitted_then_refused_at_runtime_exits_1_with_the_reason_before_the_policy_line() {
    let f = Fixture::new();
    f.put("escape.ail", &program("escape", "IO, FS"));
    let out = f.ok(RUN, run("escape.ail"));
    assert_eq!(
        (out["admitted"].clone(), out["exit_code"].clone()),
        (json!(true), json!(1))
    );
    let stderr = out["stderr"].as_str().unwrap();
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines[0],
        "Error: execution failed: readFile: path \"/etc/hosts\" escapes sandbox \"<worktree>\""
    );
    assert!(lines[1].starts_with("policy: "));
    assert_eq!(out["limit"], Value::Null);
}

#[test]
fn c_refused_before_execution_names_what_is_missing() {
    let f = Fixture::new();
    f.put("net.ail", &program("plain", "IO, Net"));
    let out = f.ok(RUN, run("net.ail"));
    assert_eq!(out["admitted"], false);
    assert_eq!(out["exit_code"], 2);
    assert_eq!(out["limit"], Value::Null);
    assert_eq!(out["stderr"], "");
    assert_eq!(
        out["decision"],
        json!({"ok": false, "error_kind": "policy_violation",
               "message": "declared effects exceed policy", "function": "main",
               "declared_effects": ["IO", "Net"], "allowed_caps": ["FS", "IO"],
               "missing_from_policy": ["Net"]})
    );

    // A wrong path: read_failed, exit 1.
    let out = f.ok(RUN, run("nope.ail"));
    assert_eq!(
        (out["admitted"].clone(), out["exit_code"].clone()),
        (json!(false), json!(1))
    );
    assert_eq!(out["decision"]["error_kind"], "read_failed");
    assert_eq!(
        out["decision"]["message"],
        "open nope.ail: no such file or directory"
    );

    // A type error is refused here too (exit 2).
    f.put("bad.ail", &program("type-error", "IO"));
    let out = f.ok(RUN, run("bad.ail"));
    assert_eq!(
        (out["admitted"].clone(), out["exit_code"].clone()),
        (json!(false), json!(2))
    );
    assert_eq!(out["decision"]["error_kind"], "type_error");
}

#[test]
fn d_supervisor_limit_is_the_parsed_policy_result_line() {
    let f = Fixture::new();
    f.put("slow.ail", &program("limit", "IO"));
    let out = f.ok(RUN, run("slow.ail"));
    assert_eq!(out["admitted"], true);
    assert_eq!(out["exit_code"], 3);
    assert_eq!(out["stdout"], "tick 1\ntick 2\n");
    assert_eq!(
        out["limit"],
        json!({"reason": "timeout", "stage": "execute", "timeout_ms": 8000})
    );

    // A program printing its own policy-result line without exit 3: no limit.
    f.put("forged.ail", &program("forged-limit", "IO"));
    let out = f.ok(RUN, run("forged.ail"));
    assert_eq!(
        (out["exit_code"].clone(), out["limit"].clone()),
        (json!(0), Value::Null)
    );
}

#[test]
fn anything_else_is_a_failed_effect() {
    let f = Fixture::new();
    f.put("garbage.ail", &program("garbage", "IO"));
    assert_eq!(
        f.failed(RUN, run("garbage.ail")),
        "broker: ailang run produced no recognised outcome envelope (rc 0)"
    );
    f.put("two.ail", &program("two-policies", "IO"));
    assert_eq!(
        f.failed(RUN, run("two.ail")),
        "broker: ailang run produced no recognised outcome envelope (rc 0)"
    );
}

#[test]
fn stdin_argv_and_args_json_reach_the_program() {
    let f = Fixture::new();
    f.put("echo.ail", &program("echo", "IO"));
    let out = f.ok(
        RUN,
        json!({"op": "run", "path": "echo.ail", "stdin": "line one\n", "argv": ["-x", "--", "two words"],
               "args_json": "{\"n\": 3}", "caps": ["IO"]}),
    );
    let echoed: Value = serde_json::from_str(out["stdout"].as_str().unwrap()).unwrap();
    assert_eq!(
        echoed,
        json!({"stdin": "line one\n", "argv": ["-x", "--", "two words"], "args_json": "{\"n\": 3}"})
    );
    // caps [IO] alone: its own variant, FS budget 0.
    let text = fs::read_to_string(f.policy("ep.run-IO.toml")).unwrap();
    assert!(text.contains("allowed_caps = [\"IO\"]\n"), "{text}");
    assert!(text.ends_with("[budgets]\nFS = 0\n"));
    assert_eq!(out["policy"]["caps"], json!(["IO"]));
    // Absent optional fields take the plan's defaults.
    let out = f.ok(RUN, json!({"op": "run", "path": "echo.ail"}));
    let echoed: Value = serde_json::from_str(out["stdout"].as_str().unwrap()).unwrap();
    assert_eq!(echoed, json!({"stdin": "", "argv": [], "args_json": null}));
}

#[test]
fn the_child_gets_exactly_the_documented_environment_cwd_and_its_own_process_group() {
    let corpus = tempfile::tempdir().unwrap();
    let f = Fixture::with(json!({"examplesDir": corpus.path().display().to_string()}));
    f.put("env.ail", &program("env", "IO"));
    let out = f.ok(RUN, run("env.ail"));
    let seen: Value = serde_json::from_str(out["stdout"].as_str().unwrap()).unwrap();
    let cache = f.state.canonicalize().unwrap().join("cache/ep");
    let cache = cache.display().to_string();
    assert_eq!(
        seen["env"],
        json!({
            "HOME": cache, "PATH": "/usr/bin:/bin", "LANG": "C", "LC_ALL": "C",
            "AILANG_CACHE_DIR": cache,
            "AILANG_EXAMPLES": corpus.path().canonicalize().unwrap().display().to_string(),
        })
    );
    assert_eq!(
        seen["cwd"],
        json!(f.root.canonicalize().unwrap().display().to_string())
    );
    // In a group of its own, not ours, led by the watchdog (not by the child), and the
    // whole group is gone once the effect is over.
    assert_ne!(seen["pgid"], seen["pid"]);
    // SAFETY: getpgrp has no preconditions.
    let ours = unsafe { libc::getpgrp() };
    assert_ne!(seen["pgid"], json!(ours));
    let pgid = seen["pgid"].as_i64().unwrap() as i32;
    // SAFETY: signal 0 only checks whether the group has members.
    let r = unsafe { libc::kill(-pgid, 0) };
    assert_eq!(r, -1, "the group outlived the effect");
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::ESRCH)
    );

    // The policy-tool children get the same environment (from the stand-in's log).
    for line in f.log() {
        assert_eq!(line["env"], seen["env"], "{line}");
    }
    // Without a corpus there is no AILANG_EXAMPLES.
    let g = Fixture::new();
    g.put("env.ail", &program("env", "IO"));
    let out = g.ok(RUN, run("env.ail"));
    let seen: Value = serde_json::from_str(out["stdout"].as_str().unwrap()).unwrap();
    let keys: Vec<&str> = seen["env"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["AILANG_CACHE_DIR", "HOME", "LANG", "LC_ALL", "PATH"]);
}

fn dead(pid: i32) -> bool {
    // Gone, or a zombie waiting for a reaper that is not us.
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

#[test]
fn the_timeout_kills_the_whole_process_group() {
    let f = Fixture::new();
    f.put("hang.ail", &program("hang", "IO"));
    let mut request = f.request(RUN, run("hang.ail"));
    request.deadline_ms = 1500;
    let started = Instant::now();
    let outcome = f.handler.execute(request);
    let elapsed = started.elapsed();
    let Outcome::Failed { message } = outcome else {
        panic!("{outcome:?}")
    };
    // The limit keeps a quarter of a deadline under 2 s for killing, reaping and answering.
    assert_eq!(
        message,
        "broker: Ailang.Run failed: ailang run did not finish within the effect's time limit of 1125 ms; its process group was killed"
    );
    // Killed at the limit, not after the child's 300 s sleep, and answered before the
    // request's deadline.
    assert!(elapsed < Duration::from_millis(1500), "{elapsed:?}");
    let pids = fs::read_to_string(f.root.join("hang.pids")).unwrap();
    let pids: Vec<i32> = pids
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2);
    // The grandchild (a `sleep 300` in the same group) died with its parent.
    for _ in 0..100 {
        if pids.iter().all(|p| dead(*p)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for p in &pids {
        assert!(dead(*p), "process {p} survived the timeout");
    }
}

/// The handler never runs a child longer than its 10 s hard cap, whatever the request allows:
/// a longer deadline (an operator's `handler_deadline_ms = 60000`) and none at all (`0`, a
/// host that sets no deadline) are both cut to it. The daemon's default deadline, 10 s, is
/// cut to 9.5 s: the handler keeps 500 ms to kill, reap and answer before the daemon stops
/// waiting for it.
#[test]
fn a_run_is_held_to_the_hard_cap_when_the_deadline_is_longer_or_absent() {
    let runs: Vec<_> = [
        (60_000, HARD_CAP),
        (0, HARD_CAP),
        (10_000, HARD_CAP - ANSWER_MARGIN),
    ]
    .into_iter()
    .map(|(deadline_ms, limit)| {
        std::thread::spawn(move || {
            let f = Fixture::new();
            f.put("hang.ail", &program("hang", "IO"));
            let mut request = f.request(RUN, run("hang.ail"));
            request.deadline_ms = deadline_ms;
            let started = Instant::now();
            let outcome = f.handler.execute(request);
            (deadline_ms, limit, outcome, started.elapsed())
        })
    })
    .collect();
    for r in runs {
        let (deadline_ms, limit, outcome, took) = r.join().unwrap();
        let Outcome::Failed { message } = outcome else {
            panic!("{deadline_ms}: {outcome:?}")
        };
        assert_eq!(
            message,
            format!("broker: Ailang.Run failed: ailang run did not finish within the effect's time limit of {} ms; its process group was killed", limit.as_millis()),
            "{deadline_ms}"
        );
        assert!(took >= limit, "{deadline_ms}: {took:?}");
        assert!(took < HARD_CAP * 3, "{deadline_ms}: {took:?}");
    }
}

/// A program forks a descendant that leaves the process group (`setsid`) and keeps the
/// output pipe open: the group kill cannot reach it, so the handler waits for the pipes only
/// for a short grace and fails the effect instead of waiting for the descendant.
#[test]
fn a_descendant_that_leaves_the_group_ends_the_run_at_the_drain_grace() {
    let f = Fixture::new();
    f.put("leave.ail", &program("leave-group", "IO"));
    let started = Instant::now();
    let message = f.failed(RUN, run("leave.ail"));
    let elapsed = started.elapsed();
    let pid: i32 = fs::read_to_string(f.root.join("leave.pids"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: plain kill(2) of the escaped `sleep`, which this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert_eq!(
        message,
        "broker: Ailang.Run failed: ailang run failed: its output pipes stayed open after its process group was killed (a descendant left the group)"
    );
    // Not the descendant's 30 s (a loose bound: CI machines vary).
    assert!(elapsed < Duration::from_secs(20), "{elapsed:?}");
}

#[test]
fn output_over_8_mib_is_a_failed_effect_never_a_truncated_one() {
    let f = Fixture::new();
    f.put("out.ail", &program("flood-stdout", "IO"));
    assert_eq!(
        f.failed(RUN, run("out.ail")),
        "broker: Ailang.Run failed: ailang run wrote more than 8388608 bytes to stdout; its process group was killed (output is never truncated)"
    );
    f.put("err.ail", &program("flood-stderr", "IO"));
    assert_eq!(
        f.failed(RUN, run("err.ail")),
        "broker: Ailang.Run failed: ailang run wrote more than 8388608 bytes to stderr; its process group was killed (output is never truncated)"
    );
}

/// The operator gates were failed effects: a unit spent, the reason only in the daemon's log,
/// and the agent told a write may have partly run. They are decided before anything is spent:
/// the preflight declines the run with the reason in `refused`; a daemon that skips the
/// preflight still gets the failed effect, and nothing runs either way.
#[test]
fn operator_gates_are_declined_before_anything_is_spent_and_nothing_runs() {
    let f = Fixture::new();
    f.put("p.ail", &program("plain", "IO"));
    let env = "capability \"Env\" is not enabled by the operator (ailang config runAllowCaps)";
    let net = "capability \"Net\" is not enabled by the operator (ailang config runAllowCaps)";
    let declassify =
        "capability \"Declassify\" is not enabled by the operator (ailang config runAllowCaps)";
    let cases = [
        (RUN_ENV, json!(["IO", "Env"]), env),
        (RUN_NET, json!(["Net"]), net),
        (RUN, json!(["IO", "Declassify"]), declassify),
    ];
    let declined = |f: &Fixture, effect: &str, payload: Value| match f
        .handler
        .preflight(&f.request(effect, payload))
    {
        Preflight::Decline(answer) => Value::Object(answer),
        other => panic!("{effect}: not declined: {other:?}"),
    };
    for (effect, caps, why) in cases {
        let payload = json!({"op": "run", "path": "p.ail", "caps": caps});
        assert_eq!(
            declined(&f, effect, payload.clone()),
            json!({"ok": false, "refused": why})
        );
        assert_eq!(
            f.failed(effect, payload),
            format!("broker: {effect} refused: {why}")
        );
    }
    // Net enabled but no host to reach.
    let g = Fixture::with(json!({"runAllowCaps": ["Net"]}));
    let payload = json!({"op": "run", "path": "p.ail", "caps": ["IO", "Net"]});
    let why = "Net names no reachable host:port (ailang config runNetAllow)";
    assert_eq!(
        declined(&g, RUN_NET, payload.clone()),
        json!({"ok": false, "refused": why})
    );
    assert_eq!(
        g.failed(RUN_NET, payload),
        format!("broker: Ailang.RunNet refused: {why}")
    );
    // Nothing ran: no child at all, not even the policy summary, and no policy file.
    assert!(f.log().is_empty() && g.log().is_empty());
    assert_eq!(fs::read_dir(f.state.join("policies")).unwrap().count(), 0);
    // Caps the operator enabled pass the preflight.
    let request = f.request(RUN, json!({"op": "run", "path": "p.ail", "caps": ["IO"]}));
    assert!(matches!(f.handler.preflight(&request), Preflight::Proceed));
}

/// `args_json` reaches `ailang run` as one argv string, which Linux caps at 128 KiB: a larger
/// one passed every check, then could not start (a failed effect, a unit spent, no reason).
/// Over 64 KiB it is declined before anything is spent, as stdin over 64 KiB is.
#[test]
fn an_args_json_too_large_to_start_the_run_is_declined_before_anything_is_spent() {
    let f = Fixture::new();
    f.put("echo.ail", &program("echo", "IO"));
    let args_json = |len: usize| {
        let filler = "x".repeat(len - 8);
        let j = format!("{{\"k\":\"{filler}\"}}");
        assert_eq!(j.len(), len);
        j
    };
    let big = json!({"op": "run", "path": "echo.ail", "args_json": args_json(200_000)});
    let why = "argument \"args_json\" is 200000 bytes; the limit is 65536";
    match f.handler.preflight(&f.request(RUN, big.clone())) {
        Preflight::Decline(answer) => {
            assert_eq!(Value::Object(answer), json!({"ok": false, "refused": why}))
        }
        other => panic!("not declined: {other:?}"),
    }
    assert_eq!(
        f.failed(RUN, big),
        format!("broker: Ailang.Run refused: {why}")
    );
    assert!(f.log().is_empty(), "{:?}", f.log());
    // At the limit it runs, and the program gets it whole.
    let at = json!({"op": "run", "path": "echo.ail", "args_json": args_json(65536)});
    assert!(matches!(
        f.handler.preflight(&f.request(RUN, at.clone())),
        Preflight::Proceed
    ));
    let out = f.ok(RUN, at);
    let echoed: Value = serde_json::from_str(out["stdout"].as_str().unwrap()).unwrap();
    assert_eq!(echoed["args_json"].as_str().unwrap().len(), 65536);
}

/// A run `ailang` refused before it started (outcome (c)) was an `ok` output without `ok`,
/// which the daemon classifies as a successful run (`isError: false`). It now says
/// `"ok": false` and why in `refused`, so the call is the policy refusal it is.
#[test]
fn a_run_refused_before_execution_says_ok_false_and_why() {
    let f = Fixture::new();
    f.put("net.ail", &program("plain", "IO, Net"));
    let out = f.ok(RUN, run("net.ail"));
    assert_eq!(out["ok"], false);
    assert_eq!(
        out["refused"],
        "ailang run refused the program before it ran: declared effects exceed policy (missing from the policy: Net); see decision"
    );
    assert_eq!(out["admitted"], false);
    let out = f.ok(RUN, run("nope.ail"));
    assert_eq!(out["ok"], false);
    assert_eq!(
        out["refused"],
        "ailang run refused the program before it ran: open nope.ail: no such file or directory; see decision"
    );
    // An admitted run carries no `ok` (its shape is the contract's).
    f.put("hello.ail", HELLO);
    let out = f.ok(RUN, run("hello.ail"));
    assert!(
        !out.contains_key("ok") && !out.contains_key("refused"),
        "{out:?}"
    );
}

#[test]
fn an_enabled_env_run_uses_a_trusted_host_variant() {
    let f = Fixture::with(json!({"runAllowCaps": ["Env"]}));
    f.put("env.ail", &program("plain", "IO, Env"));
    let out = f.ok(
        RUN_ENV,
        json!({"op": "run", "path": "env.ail", "caps": ["Env", "IO"]}),
    );
    assert_eq!(out["admitted"], true, "{out:?}");
    let text = fs::read_to_string(f.policy("ep.run-IO-Env.toml")).unwrap();
    assert!(
        text.starts_with("security_mode = \"trusted_host\"\nallowed_caps = [\"IO\", \"Env\"]\n")
    );
    assert!(text.contains("fs_deny_write = [\".git/**\", \".github/**\""));
    assert!(text.contains("max_output_bytes = 8388608\n"));
    assert_eq!(out["policy"]["security_mode"], "trusted_host");
    assert_eq!(out["policy"]["caps"], json!(["IO", "Env"]));
    assert_eq!(out["policy"]["digest"], json!(sha256_hex(text.as_bytes())));
}

#[test]
fn an_enabled_net_run_lists_the_operator_hosts() {
    let f = Fixture::with(json!({"runAllowCaps": ["Net"],
        "runNetAllow": ["127.0.0.1:8080", "[::1]:9090"], "runNetAllowHttp": true}));
    f.put("net.ail", &program("plain", "IO, Net"));
    let out = f.ok(
        RUN_NET,
        json!({"op": "run", "path": "net.ail", "caps": ["IO", "Net"]}),
    );
    assert_eq!(out["admitted"], true, "{out:?}");
    let text = fs::read_to_string(f.policy("ep.run-IO-Net.toml")).unwrap();
    assert!(
        text.contains("net_allow = [\"127.0.0.1:8080\", \"[::1]:9090\"]\nnet_allow_http = true\n")
    );
    assert!(text.starts_with("security_mode = \"restricted\"\n"));
    assert_eq!(
        out["policy"]["net_allow"],
        json!(["127.0.0.1:8080", "[::1]:9090"])
    );
}

#[test]
fn the_effect_must_match_the_caps_and_the_plan_limits_are_rechecked() {
    let f = Fixture::with(json!({"runAllowCaps": ["Env", "Net"]}));
    let cases = [
        (RUN, json!({"caps": ["Env"]}), "broker: Ailang.Run refused: caps [Env] make this run the Ailang.RunEnv effect"),
        (RUN_ENV, json!({}), "broker: Ailang.RunEnv refused: caps [IO, FS] make this run the Ailang.Run effect"),
        (RUN_NET, json!({"caps": ["IO"]}), "broker: Ailang.RunNet refused: caps [IO] make this run the Ailang.Run effect"),
        (RUN, json!({"stdin": "x".repeat(65537)}), "broker: Ailang.Run refused: argument \"stdin\" is 65537 bytes; the limit is 65536"),
        (RUN, json!({"argv": vec!["a"; 33]}), "broker: Ailang.Run refused: argument \"argv\" has 33 items; the limit is 32"),
        (RUN, json!({"argv": ["x".repeat(1025)]}), "broker: Ailang.Run refused: an argv item is 1025 bytes; the limit is 1024"),
        (RUN, json!({"argv": ["a\u{0}b"]}), "broker: Ailang.Run refused: an argv item contains a NUL byte"),
        (RUN, json!({"caps": ["Process"]}), "broker: Ailang.Run refused: unknown capability \"Process\"; caps admits only: Declassify, Env, FS, IO, Net"),
        (RUN, json!({"caps": ["IO", "IO"]}), "broker: Ailang.Run refused: capability \"IO\" is listed twice"),
        (RUN, json!({"caps": []}), "broker: Ailang.Run refused: argument \"caps\" names no capability"),
        (RUN_ENV, json!({"caps": ["Env", "Net"]}), "broker: Ailang.RunEnv refused: caps names both Env and Net; one run takes at most one of them"),
        (RUN, json!({"args_json": "{"}), "broker: Ailang.Run refused: argument \"args_json\" must be a string holding JSON"),
        (RUN, json!({"stdin": 3}), "broker: Ailang.Run refused: payload key \"stdin\" of op \"run\" must be a string"),
        (RUN, json!({"argv": "a"}), "broker: Ailang.Run refused: payload key \"argv\" of op \"run\" must be an array of strings"),
        (RUN, json!({"query": "a"}), "broker: Ailang.Run refused: payload key \"query\" is not admitted by op \"run\""),
        (RUN, json!({"Caps": ["IO"]}), "broker: Ailang.Run refused: key \"Caps\" aliases \"caps\""),
        (RUN, json!({"op": "ai_check"}), "broker: Ailang.Run refuses op \"ai_check\": not in this effect's op allowlist"),
    ];
    for (effect, extra, message) in cases {
        let mut payload = json!({"op": "run", "path": "p.ail"});
        for (k, v) in extra.as_object().unwrap() {
            payload[k] = v.clone();
        }
        assert_eq!(f.failed(effect, payload), message);
    }
    assert!(f.log().is_empty());
}

#[test]
fn a_policy_file_is_verified_once_and_again_after_tampering() {
    let f = Fixture::new();
    f.put("hello.ail", HELLO);
    f.ok(RUN, run("hello.ail"));
    f.ok(RUN, run("hello.ail"));
    assert_eq!(f.ran("policy-tool", Some("summary")), 1);
    assert_eq!(f.ran("run", None), 2);
    // Someone edits the file: it is rewritten and verified again before the next use.
    let file = f.policy("ep.run-IO-FS.toml");
    fs::write(&file, "security_mode = \"trusted_host\"\n").unwrap();
    let out = f.ok(RUN, run("hello.ail"));
    assert_eq!(out["admitted"], true);
    assert_eq!(f.ran("policy-tool", Some("summary")), 2);
    assert_eq!(
        fs::read(&file).unwrap(),
        PolicySpec::base().text(&f.worktree()).as_bytes()
    );
}

#[test]
fn a_summary_that_does_not_match_fails_the_effect_before_anything_runs() {
    let f = Fixture::new();
    f.put("hello.ail", HELLO);
    let cases = [
        (json!({"summary": {"security_mode": "trusted_host"}}),
         "broker: Ailang.Run failed: the policy-tool summary does not match the episode's policy: security_mode is \"trusted_host\", expected \"restricted\"; nothing ran"),
        (json!({"summary": {"policy_digest": "00"}}),
         "the policy-tool summary does not match the episode's policy: policy_digest is \"00\", expected the SHA-256 of the file written"),
        (json!({"summary": {"fs_sandbox": "/"}}),
         "the policy-tool summary does not match the episode's policy: fs_sandbox is not the episode's worktree; nothing ran"),
        (json!({"summary": {"caps": ["IO", "FS", "Net"]}}),
         "caps are [FS, IO, Net], expected [FS, IO]"),
        (json!({"summary": {"net_allow": ["127.0.0.1:1"]}}),
         "net_allow is [127.0.0.1:1], expected []"),
        (json!({"summary_rc": 2}),
         "broker: Ailang.Run failed: the policy summary failed: ailang policy-tool exited with rc 2: policy-tool: summary failed (control); nothing ran"),
    ];
    for (control, message) in cases {
        f.control(control);
        let got = f.failed(RUN, run("hello.ail"));
        assert!(got.contains(message), "{got}\nwanted: {message}");
    }
    assert_eq!(f.ran("run", None), 0);
}

/// A program that allocates 1 GiB runs under the default `memoryMiB` (4096); under 256 its
/// allocation fails inside ailang, which ends as the Go runtime does. The agent gets the
/// contract's failure; the operator's log carries ailang's own error.
#[test]
fn a_run_past_the_memory_limit_fails_and_the_log_says_why() {
    let f = Fixture::new();
    f.put("hog.ail", &program("hog", "IO"));
    let out = f.ok(RUN, run("hog.ail"));
    assert_eq!(
        (out["exit_code"].clone(), out["stdout"].clone()),
        (json!(0), json!("allocated 1024 MiB\n"))
    );

    let logs = Arc::new(LogLines::default());
    let f = Fixture::hosted(json!({"memoryMiB": 256}), Host::from_services(logs.clone()));
    f.put("hog.ail", &program("hog", "IO"));
    assert_eq!(
        f.failed(RUN, run("hog.ail")),
        "broker: ailang run produced no recognised outcome envelope (rc 2)"
    );
    let logged = logs.lines();
    assert!(
        logged.contains(
            &"warn: ailang: run in episode \"ep\" produced no recognised outcome envelope (rc 2); stderr: fatal error: runtime: out of memory"
                .to_string()
        ),
        "{logged:?}"
    );
}
