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

const HELLO: &str = "module hello\n\nimport std/io (println)\n\nexport func main() -> () ! {IO} {\n  println(\"hello from pi\")\n}\n";

fn standin() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/ailang-standin/ailang")
        .canonicalize()
        .expect("tests/ailang-standin/ailang exists")
}

/// A misbehaving `ailang` in `dir` (see the file's docs); its modes write their escaped
/// descendants' pids to `<dir>/escaped`.
fn misbehaving_ailang(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let here = dir.display();
    let standin = standin();
    let standin = standin.display();
    let script = format!(
        r#"#!/bin/sh
if [ "$1" = run ]; then
  case "$(cat '{here}/mode' 2>/dev/null)" in
    control-bytes)
      # 8 MiB less 64 bytes of NUL on stdout, 8 MiB less 4 KiB of \001 on stderr: under the
      # 8 MiB cap, six times that once escaped as JSON. Then the stand-in's policy line.
      head -c 8388544 /dev/zero
      head -c 8384512 /dev/zero | tr '\000' '\001' >&2
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
    std::fs::write(d.root().join("ep1/hello.ail"), HELLO).unwrap();
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

/// A program starts a descendant that leaves its process group (`setsid`) and keeps stderr
/// open, then exits. Each call is failed after the drain grace, but the plugin's reader
/// threads stayed blocked on the pipe the descendant holds: every call leaked a thread and a
/// descriptor until the descendant exited (under a low descriptor limit, other episodes'
/// calls then failed). Now nothing of a call outlives it.
#[test]
fn a_descendant_leaving_the_group_leaks_no_thread_or_descriptor_of_the_daemon() {
    let bins = tempfile::tempdir().unwrap();
    let (d, token) = start(bins.path(), "");
    let pid = d.child.id();
    let v = run_hello(&d, &token);
    assert_eq!(
        v["result"]["structuredContent"]["stdout"], "hello from pi\n",
        "{v}"
    );
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
    let log = d.log();
    assert_eq!(
        log.matches("ailang run failed: its output pipes stayed open after its process group was killed (a descendant left the group)").count(),
        CALLS,
        "{log}"
    );
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
    let log = d.log();
    assert_eq!(
        log.matches("effect failed: broker: Ailang.Run failed: ailang run did not finish within the effect's time limit of 1125 ms; its process group was killed").count(),
        CALLS,
        "{log}"
    );
    assert!(!log.contains("timed out"), "{log}");
}
