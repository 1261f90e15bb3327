//! A call whose deadline passes while its intent is on its way to the disk (a store whose
//! syncs stall): its handler is never started, its intent is closed `withdrawn` with its unit
//! given back, and every way an agent asks about it says so: `GET /v1/calls`, A2A
//! `tasks/get`, `/v1/budget`, and a resend of its key. They all said "an effect ran … do not
//! retry", its record showed the unit spent, and a resend was answered as unrecorded.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// Why strace may not attach to the daemon here, which is our child and not strace's: under
/// Yama's `kernel.yama.ptrace_scope` 1 or 2 (Ubuntu's default is 1) that takes
/// `CAP_SYS_PTRACE`, and 3 forbids it to everyone.
fn ptrace_attach_refused() -> Option<String> {
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").ok()?;
    let scope: u8 = scope.trim().parse().ok()?;
    // CAP_SYS_PTRACE is capability 19.
    let cap_sys_ptrace = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
            u64::from_str_radix(hex.trim(), 16).ok()
        })
        .is_some_and(|caps| caps & (1 << 19) != 0);
    match scope {
        0 => None,
        1 | 2 if cap_sys_ptrace => None,
        3 => Some("kernel.yama.ptrace_scope is 3".to_owned()),
        _ => Some(format!(
            "kernel.yama.ptrace_scope is {scope} and this process lacks CAP_SYS_PTRACE"
        )),
    }
}

/// Skip the test for `why`, or fail it where `WORLDD_TESTS_REQUIRE_STRACE` is set (CI).
fn attach_not_permitted(why: &str) {
    assert!(
        std::env::var_os("WORLDD_TESTS_REQUIRE_STRACE").is_none(),
        "strace is required (WORLDD_TESTS_REQUIRE_STRACE) and ptrace attach is not permitted here: {why}"
    );
    eprintln!("skipped: ptrace attach is not permitted here: {why}");
}

/// Every thread of process `pid` is traced.
fn traced(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|t| {
        std::fs::read_to_string(t.path().join("status")).is_ok_and(|s| {
            s.lines()
                .any(|l| l.starts_with("TracerPid:") && l.trim_end() != "TracerPid:\t0")
        })
    })
}

#[test]
fn a_call_withdrawn_at_its_deadline_is_said_so_everywhere_and_spends_nothing() {
    if !have_strace() {
        eprintln!("skipped: no strace here");
        return;
    }
    if let Some(why) = ptrace_attach_refused() {
        attach_not_permitted(&why);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("worldd.toml");
    std::fs::write(
        &config,
        "[limits]\ncall_deadline_ms = 2000\nhandler_deadline_ms = 1900\n[server]\nbody_timeout_ms = 1500\n",
    )
    .unwrap();
    let mut cmd = Daemon::serve_command(&dir, &["worldd_workspace"]);
    cmd.arg("--config").arg(&config);
    let d = Daemon::spawn(dir, cmd);
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    // From here every sync of the daemon's takes 2.5 s: the intent's outlasts the call.
    let mut strace = Command::new("strace")
        .args([
            "-qq",
            "-f",
            "-o",
            "/dev/null",
            "-e",
            "trace=fdatasync,fsync",
        ])
        .args(["-e", "inject=fdatasync,fsync:delay_enter=2500000"])
        .arg("-p")
        .arg(d.child.id().to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while !traced(d.child.id()) {
        // Refused the attach (a container's seccomp profile, an LSM), strace says so and ends.
        if let Some(status) = strace.try_wait().unwrap() {
            let mut said = String::new();
            let _ = std::io::Read::read_to_string(&mut strace.stderr.take().unwrap(), &mut said);
            attach_not_permitted(&format!("strace -p ended ({status}): {}", said.trim()));
            return;
        }
        assert!(Instant::now() < until, "strace did not attach");
        std::thread::sleep(Duration::from_millis(20));
    }
    let args = json!({"path": "a.txt", "content": "x"});
    let first = a2a(&d, &token, "w1", "ailang-write", args.clone());
    assert_eq!(first["error"]["code"], -32603, "{first}");
    // The coordinator closes the intent once its sync returns, after the answer.
    d.wait_for_log("the call's deadline passed before its handler could start");
    let _ = strace.kill();
    let _ = strace.wait();

    let call = get(&d.url("/v1/calls/a2a/w1"), Some(&token));
    assert_eq!(call.status, 200, "{}", call.text());
    let call = call.json();
    assert_eq!(call["state"], "withdrawn", "{call}");
    assert_eq!(
        call["outcome"],
        json!({"kind": "refused", "reason": "deadline", "retryable": true})
    );
    assert_eq!(call["effects"][0]["status"], "failed", "{call}");
    assert_eq!(call["effects"][0]["budgetAfter"], 5, "{call}");
    let budget = get(&d.url("/v1/budget"), Some(&token)).json();
    assert_eq!(budget["grants"][0]["spent"], 0, "{budget}");

    let task = post_json(
        &d.url("/a2a/"),
        Some(&token),
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": "w1"}}),
    )
    .json();
    let status = &task["result"]["status"];
    assert_eq!(status["state"], "failed", "{task}");
    assert!(
        status.to_string().contains("its handler was never started: nothing ran, nothing was spent, and nothing was committed; send it again as a new task"),
        "{task}"
    );
    // The key stays used: a resend runs nothing and is told why.
    let again: Value = a2a(&d, &token, "w1", "ailang-write", args);
    assert_eq!(
        again["error"],
        json!({"code": -32602, "message": "task id already used: its call was withdrawn at its deadline (its handler was never started): nothing ran and nothing was spent; send it again as a new task"}),
        "{again}"
    );
    assert!(!d.root().join("ep1/a.txt").exists());
    let budget = get(&d.url("/v1/budget"), Some(&token)).json();
    assert_eq!(budget["grants"][0]["spent"], 0, "{budget}");
}
