//! `ailang` children that misbehave, through the real `worldd` binary, the real
//! `worldd_ailang` plugin and real HTTP: what they cost the daemon (memory, threads,
//! descriptors) and how their calls end. Each test is named for the attack it pins.
//!
//! The `ailang` here is a small shell script written by each test: `run` does what the file
//! `mode` beside it says, everything else (and a `run` without a mode) is the stand-in's
//! (`tests/ailang-standin/ailang`, test code only). The plugin library must be built:
//! `cargo build -p worldd-handler-ailang`.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

const PLUGINS: &[&str] = &["worldd_workspace", "worldd_ailang"];

/// A misbehaving `ailang` in `dir` (see the file's docs); its modes write their escaped
/// descendants' pids to `<dir>/escaped`.
fn misbehaving_ailang(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let here = dir.display();
    let standin = fixtures::ailang_standin();
    let standin = standin.display();
    let script = format!(
        r#"#!/bin/sh
mode=$(cat '{here}/mode' 2>/dev/null)
if [ "$1" = run ]; then
  case "$mode" in
    control-bytes|not-utf8)
      # 8 MiB less 64 bytes on stdout, 8 MiB less 4 KiB on stderr, under the 8 MiB cap: NUL
      # and \001 (six bytes each once escaped as JSON), or \377 (not UTF-8: three bytes
      # each as U+FFFD). Then the stand-in's policy line.
      if [ "$mode" = control-bytes ]; then out='\000' err='\001'; else out='\377' err='\377'; fi
      head -c 8388544 /dev/zero | tr '\000' "$out"
      head -c 8384512 /dev/zero | tr '\000' "$err" >&2
      echo >&2
      exec '{standin}' "$@" >/dev/null ;;
    leave-group)
      # A descendant that leaves the process group and keeps stderr open.
      setsid sleep 60 >/dev/null &
      echo $! >> '{here}/escaped'
      # Exit only once it has left, or the group kill would still reach it.
      i=0
      while [ $i -lt 500 ] && [ "$(cut -d' ' -f5 /proc/$!/stat)" = "$(cut -d' ' -f5 /proc/$$/stat)" ]; do
        sleep 0.01; i=$((i+1))
      done
      echo ok
      exit 0 ;;
    ignore-term)
      trap '' TERM
      while :; do sleep 1; done ;;
  esac
fi
exec '{standin}' "$@"
"#
    );
    let bin = dir.join("ailang");
    std::fs::write(&bin, script).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// A daemon whose ailang plugin runs a misbehaving `ailang` (in `bin_dir`), with `config` as
/// its TOML file, and a credential of episode `ep1` holding `hello.ail`.
fn start(bin_dir: &Path, config: &str) -> (Daemon, String) {
    let bin = misbehaving_ailang(bin_dir);
    let file = bin_dir.join("world.toml");
    std::fs::write(&file, config).unwrap();
    let bin = format!("ailang.bin={}", path_str(&bin));
    let d = Daemon::start(
        PLUGINS,
        &["--config", path_str(&file), "--plugin-config", &bin],
    );
    let token = d.session("ep1", &["Ailang.Run=worktree:50"]);
    std::fs::write(d.root().join("ep1/hello.ail"), fixtures::AILANG_HELLO).unwrap();
    (d, token)
}

fn set_mode(bin_dir: &Path, mode: &str) {
    std::fs::write(bin_dir.join("mode"), mode).unwrap();
}

/// One ailang-run of `hello.ail` over MCP: the whole JSON-RPC answer.
fn run_hello(d: &Daemon, token: &str) -> Value {
    let a = mcp(
        d,
        token,
        "tools/call",
        json!({"name": "ailang-run", "arguments": {"path": "hello.ail"}}),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    // An error (such as a host timeout) comes as plain JSON, a result as an event stream.
    if a.content_type.contains("event-stream") {
        a.sse_json()
    } else {
        a.json()
    }
}

/// A line of `/proc/<pid>/status`, in kB.
fn status_kb(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {status}"))
}

fn entries(dir: String) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

/// The daemon's (threads, open descriptors).
fn threads_and_fds(pid: u32) -> (usize, usize) {
    (
        entries(format!("/proc/{pid}/task")),
        entries(format!("/proc/{pid}/fd")),
    )
}

/// A daemon whose `ailang` stand-in lives in `bins`, after one plain run: it, its session
/// credential and its pid.
fn served_once(bins: &Path) -> (Daemon, String, u32) {
    let (d, token) = start(bins, "");
    let pid = d.child.id();
    let v = run_hello(&d, &token);
    assert_eq!(
        v["result"]["structuredContent"]["stdout"], "hello from pi\n",
        "{v}"
    );
    (d, token, pid)
}

/// A program writes 8 MiB of NUL to stdout and 8 MiB of \x01 to stderr: under the output
/// cap, but each byte is six once escaped as JSON. The plugin used to build a 100 MB answer
/// the host then refused (the effect failed after all that work, about 100 MB of the
/// daemon's memory per call). The answer now keeps what fits, says how much it left out, and
/// the call is answered. The same with 8 MiB that is not UTF-8 (each byte three as U+FFFD).
#[test]
fn control_byte_output_is_answered_cut_and_does_not_cost_the_daemon_100_mb() {
    let bins = tempfile::tempdir().unwrap();
    // A plain run first: the daemon's memory once it has served one.
    let (d, token, pid) = served_once(bins.path());
    let before = status_kb(pid, "VmHWM");
    for (mode, out_char, err_char) in [
        ("control-bytes", '\u{0}', '\u{1}'),
        ("not-utf8", '\u{fffd}', '\u{fffd}'),
    ] {
        set_mode(bins.path(), mode);
        let v = run_hello(&d, &token);
        let peak = status_kb(pid, "VmHWM");
        eprintln!("{mode}: the daemon's VmHWM: {before} kB -> {peak} kB");
        let out = &v["result"]["structuredContent"];
        assert_eq!(
            out["world"]["effects"][0]["status"], "ok",
            "{mode}: {v:.2000}"
        );
        assert_eq!(out["admitted"], true);
        assert_eq!(out["exit_code"], 0);
        let stdout = out["stdout"].as_str().unwrap();
        let stderr = out["stderr"].as_str().unwrap();
        assert!(
            stdout.chars().all(|c| c == out_char),
            "{mode}: stdout is the program's"
        );
        assert!(stderr.starts_with(err_char), "{mode}: stderr keeps its end");
        let (rest, policy) = stderr.trim_end().rsplit_once('\n').unwrap();
        assert!(
            policy.starts_with("policy: {\"ok\":true"),
            "{mode}: {policy}"
        );
        // What was left out, in bytes the program wrote (one per character kept here).
        let cut = &out["cut"];
        assert_eq!(
            cut["stdout"].as_u64().unwrap() + stdout.chars().count() as u64,
            8_388_544,
            "{mode}: {cut}"
        );
        assert_eq!(
            cut["stderr"].as_u64().unwrap() + rest.chars().count() as u64,
            8_384_512,
            "{mode}: {cut}"
        );
        // The streams share what the result may hold (1 MiB with `world`, less what the
        // plugin keeps aside), half each.
        let escaped = serde_json::to_string(out).unwrap().len();
        assert!(escaped < 1 << 20, "{mode}: {escaped}");
        assert!(escaped > 800 << 10, "{mode}: {escaped}");
        // 16 MiB of output read, less than 2 MiB answered: nowhere near the 100 MB it was.
        assert!(
            peak < before + 48 * 1024,
            "{mode}: the daemon's peak RSS went from {before} kB to {peak} kB"
        );
    }
}

/// A program starts a descendant that leaves its process group (`setsid`) and keeps stderr
/// open, then exits. Each call is failed after the drain grace, but the plugin's reader
/// threads stayed blocked on the pipe the descendant holds: every call leaked a thread and a
/// descriptor until the descendant exited (under a low descriptor limit, other episodes'
/// calls then failed). Now nothing of a call outlives it.
#[test]
fn a_descendant_leaving_the_group_leaks_no_thread_or_descriptor_of_the_daemon() {
    let bins = tempfile::tempdir().unwrap();
    let (d, token, pid) = served_once(bins.path());
    // Let threads that served the first call settle.
    std::thread::sleep(Duration::from_millis(300));
    let before = threads_and_fds(pid);
    set_mode(bins.path(), "leave-group");
    const CALLS: usize = 4;
    for _ in 0..CALLS {
        let v = run_hello(&d, &token);
        let out = &v["result"]["structuredContent"];
        assert_eq!(out["world"]["effects"][0]["status"], "failed", "{v}");
    }
    let escaped: Vec<i32> = std::fs::read_to_string(bins.path().join("escaped"))
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(escaped.len(), CALLS);
    // The descendants still live (and hold their pipes)…
    let alive = |p: i32| Path::new(&format!("/proc/{p}")).exists();
    assert!(escaped.iter().all(|p| alive(*p)), "{escaped:?}");
    // …and the daemon holds nothing of those calls any more.
    let until = Instant::now() + Duration::from_secs(3);
    let mut after = threads_and_fds(pid);
    while (after.0 > before.0 || after.1 > before.1) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
        after = threads_and_fds(pid);
    }
    for p in &escaped {
        // SAFETY: plain kill(2) of an escaped `sleep` this test's script started.
        unsafe { libc::kill(*p, libc::SIGKILL) };
    }
    eprintln!("(threads, fds) {before:?} -> {after:?}");
    assert!(
        after.0 <= before.0 && after.1 <= before.1,
        "(threads, descriptors) went from {before:?} to {after:?} after {CALLS} calls"
    );
    // Each failure is logged before its answer, and read by the harness's thread after it may
    // be: waited for, then counted with every line written so far read.
    let said = "ailang run failed: its output pipes stayed open after its process group was killed (a descendant left the group)";
    d.wait_for_log_count(said, CALLS);
    let log = d.log_so_far();
    assert_eq!(log.matches(said).count(), CALLS, "{log}");
}

/// A program that ignores SIGTERM runs until the time limit. The plugin's limit used to be
/// the whole handler deadline, so killing and reaping the group ended just after the
/// daemon's own deadline: the call was sometimes the documented failed effect, sometimes
/// `host callback timed out` and left uncommitted. The plugin now keeps a margin (a quarter of
/// a 1.5 s deadline) for killing, reaping and answering, so it is the failed effect every time.
#[test]
fn a_program_ignoring_sigterm_is_the_documented_failed_effect_every_time_not_a_host_timeout() {
    let bins = tempfile::tempdir().unwrap();
    let (d, token) = start(bins.path(), "[limits]\nhandler_deadline_ms = 1500\n");
    set_mode(bins.path(), "ignore-term");
    const CALLS: usize = 6;
    for i in 0..CALLS {
        let started = Instant::now();
        let v = run_hello(&d, &token);
        let took = started.elapsed();
        let out = &v["result"]["structuredContent"];
        assert_eq!(
            out["world"]["effects"][0]["status"], "failed",
            "call {i} after {took:?}: {v}"
        );
    }
    // Each failure is logged before its answer, and read by the harness's thread after it may
    // be: waited for, then counted with every line written so far read.
    let said = "effect failed: broker: Ailang.Run failed: ailang run did not finish within the effect's time limit of 1125 ms; its process group was killed";
    d.wait_for_log_count(said, CALLS);
    let log = d.log_so_far();
    assert_eq!(log.matches(said).count(), CALLS, "{log}");
    assert!(!log.contains("timed out"), "{log}");
}
