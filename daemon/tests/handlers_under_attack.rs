//! Handlers under attack, through the real `worldd` binary, real plugins and real HTTP: bad
//! arguments that must not look like possible effects, reads whose escaped result would be
//! too big, and plugin children that must not outlive a daemon killed with SIGKILL. Each test
//! is named for the attack it pins.
//!
//! The plugin libraries must be built (`cargo build --workspace`).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine;
use common::*;
use serde_json::{json, Value};

const WS: &[&str] = &["worldd_workspace"];

/// The world ref at the head of the log.
fn head(d: &Daemon, token: &str) -> String {
    let a = get(&d.url("/v1/head"), Some(token));
    assert_eq!(a.status, 200, "{}", a.text());
    a.text()
}

#[test]
fn unsafe_integer_argument_is_invalid_params_over_mcp_and_a2a() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let before = head(&d, &token);
    // Over MCP: the body is sent as text, so the integer arrives exactly.
    let body = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"ailang-read","arguments":{"path":9007199254740993}}}"#;
    let a = mcp_text(&d, &token, "2025-11-25", body.as_bytes());
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(
        a.sse_json(),
        json!({"jsonrpc": "2.0", "id": 7, "error": {"code": -32602,
               "message": "invalid params: number 9007199254740993 is outside the exact integer range of canonical JSON (±2^53−1)"}})
    );
    // Over A2A: the contract's invalid-params error.
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tasks/send","params":{"id":"t1","metadata":{"skill_id":"ailang-read"},"message":{"role":"user","parts":[{"type":"data","data":{"path":-9007199254740993}}]}}}"#;
    let a = request(
        "POST",
        &d.url("/a2a/"),
        Some(&token),
        &[("Content-Type", "application/json")],
        Some(body.as_bytes()),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(
        a.json(),
        json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "invalid params",
               "data": {"why": "params: number -9007199254740993 is outside the exact integer range of canonical JSON (±2^53−1)"}}})
    );
    // Nothing was committed (nor journaled: admission refuses before the journal).
    assert_eq!(head(&d, &token), before);
    // The same task id is still free: nothing recorded it.
    let v = a2a(&d, &token, "t1", "ailang-read", json!({"path": "nope"}));
    assert_eq!(v["result"]["status"]["state"], "completed", "{v}");
}

/// An integer literal too wide for `u64` (which serde_json reads as the nearest double, so
/// that `1000000000000000000000` and `1000000000000000000001` were both run as `1e21`, the
/// second replayed as the first's call under one idempotency key) is refused over MCP as the
/// narrower ones are, quoted as sent; a float of the same size still runs; a batch holding one
/// runs nothing.
#[test]
fn integers_too_wide_for_u64_are_invalid_params_over_mcp_not_rounded_into_another_call() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let before = head(&d, &token);
    let post = |version: &str, body: String| {
        let a = mcp_text(&d, &token, version, body.as_bytes());
        assert_eq!(a.status, 200, "{}", a.text());
        a.sse_json()
    };
    let call = |n: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"ailang-read","arguments":{{"path":"nope","n":{n}}},"_meta":{{"world/idempotencyKey":"wide-1"}}}}}}"#
        )
    };
    for n in [
        "1000000000000000000000",
        "1000000000000000000001",
        "18446744073709551616",
        "-9223372036854775809",
    ] {
        assert_eq!(
            post("2025-11-25", call(n)),
            json!({"jsonrpc": "2.0", "id": 3, "error": {"code": -32602, "message": format!(
                "invalid params: number {n} is outside the exact integer range of canonical JSON (±2^53−1)")}}),
            "{n}"
        );
    }
    let long = "9".repeat(300);
    let v = post("2025-11-25", call(&long));
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.ends_with(
            "… (300 characters) is outside the exact integer range of canonical JSON (±2^53−1)"
        ),
        "{message}"
    );
    // In a batch, the number cannot be told to one request: nothing runs, and the refusal
    // names the rule broken there, the 64-bit range in which integers are read exactly.
    let batch = format!(
        r#"[{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"ailang-read","arguments":{{"path":"nope"}}}}}},{}]"#,
        call("1000000000000000000001")
    );
    assert_eq!(
        post("2025-03-26", batch),
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message":
               "invalid request: number 1000000000000000000001 is outside the 64-bit integer range (−2^63 to 2^64−1) in which this server reads integers exactly; nothing was run"}})
    );
    // Nothing was committed, and the key is still free.
    assert_eq!(head(&d, &token), before);
    // A float of the same size is a number like any other: the call is taken (and its plan
    // refuses the argument `n`, which ailang-read does not admit), under the key still free.
    let v = post("2025-11-25", call("1e21"));
    let meta = &v["result"]["_meta"];
    assert_eq!(meta["world/replayed"], false, "{v}");
    assert_eq!(meta["world/invocationId"], "mcp:ep1:wide-1", "{v}");
    assert_eq!(
        v["result"]["structuredContent"]["refused"],
        "unknown argument \"n\"; ailang-read admits only: path"
    );
    assert_ne!(head(&d, &token), before);
}

/// An agent sends arguments just over the coordinator's 1 MiB limit (the MCP body may be
/// 4 MiB): refused as invalid params before anything is journaled, spent or committed, and
/// its idempotency key stays free.
#[test]
fn arguments_over_1_mib_are_invalid_params_and_nothing_is_written() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let before = head(&d, &token);
    // {"path":"…"} canonically: 11 bytes around the path.
    let path = "a".repeat((1 << 20) - 10);
    let a = mcp(
        &d,
        &token,
        "tools/call",
        json!({"name": "ailang-read", "arguments": {"path": path},
               "_meta": {"world/idempotencyKey": "k1"}}),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(
        a.sse_json(),
        json!({"jsonrpc": "2.0", "id": 7, "error": {"code": -32602,
               "message": "invalid params: arguments are 1048577 bytes; the limit is 1048576"}})
    );
    assert_eq!(head(&d, &token), before);
    assert_eq!(spent(&d, &token), 0);
    // The key was never recorded: the same key with small arguments runs.
    let v = mcp(
        &d,
        &token,
        "tools/call",
        json!({"name": "ailang-read", "arguments": {"path": "nope"},
               "_meta": {"world/idempotencyKey": "k1"}}),
    )
    .sse_json();
    assert!(v["result"]["structuredContent"]["world"].is_object(), "{v}");
    assert_ne!(head(&d, &token), before);
}

/// The structured result of an MCP tools/call, and the exact text the client received.
fn mcp_read(d: &Daemon, token: &str, path: &str) -> (Value, String) {
    let v = mcp(
        d,
        token,
        "tools/call",
        json!({"name": "ailang-read", "arguments": {"path": path}}),
    )
    .sse_json();
    let text = v["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{v}"))
        .to_owned();
    (v["result"]["structuredContent"].clone(), text)
}

/// Units spent on the session's first grant.
fn spent(d: &Daemon, token: &str) -> u64 {
    let b = get(&d.url("/v1/budget"), Some(token)).json();
    b["grants"][0]["spent"]
        .as_u64()
        .unwrap_or_else(|| panic!("{b}"))
}

#[test]
fn read_whose_escaped_result_exceeds_the_cap_is_declined_before_any_budget_is_spent() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let wt = d.root().join("ep1");
    // 270,002 bytes of U+0001: each escapes to `\u0001`, six bytes. The file is under the
    // read limit; its result would not be.
    std::fs::write(wt.join("ctl.txt"), "\u{1}".repeat(270_002)).unwrap();
    let v = mcp(
        &d,
        &token,
        "tools/call",
        json!({"name": "ailang-read", "arguments": {"path": "ctl.txt"}}),
    )
    .sse_json();
    let out = &v["result"]["structuredContent"];
    assert_eq!(out["ok"], false, "{out}");
    assert_eq!(
        out["refused"],
        "read ctl.txt: the result would be 1620412 bytes: 270002 of the file, 1350010 of JSON escaping and 400 of the result's other fields (ok, tool, policy_digest, world); the limit is 1048576, so a file of plain text can be read up to 1048176 bytes"
    );
    // Declined by the handler before admission: committed as a denial, nothing spent.
    assert_eq!(out["world"]["effects"][0]["status"], "denied", "{out}");
    assert_eq!(
        v["result"]["_meta"]["world/outcome"],
        json!({"kind": "denied", "reason": "denied:handler", "retryable": false}),
        "{v}"
    );
    assert_eq!(spent(&d, &token), 0);
    // A file over the limit itself is declined the same way, without being read.
    std::fs::write(wt.join("big.txt"), "a".repeat(2_000_000)).unwrap();
    let (out, _) = mcp_read(&d, &token, "big.txt");
    assert_eq!(
        out["refused"],
        "read big.txt: file is 2000000 bytes; the limit is 1048576"
    );
    assert_eq!(out["world"]["effects"][0]["status"], "denied");
    assert_eq!(spent(&d, &token), 0);

    // The record names the plugin that declined; `why` verifies the whole chain.
    let record = out["world"]["effects"][0]["record"].as_str().unwrap();
    let r = get(
        &d.url(&format!("/v1/objects/{record}?payload=true")),
        Some(&token),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let payload = base64::engine::general_purpose::STANDARD
        .decode(r.json()["payload"].as_str().unwrap())
        .unwrap();
    let r: Value = serde_json::from_slice(&payload).unwrap();
    assert_eq!(
        (&r["allowed"], &r["failed"], &r["denial"], &r["resultRef"]),
        (
            &json!(false),
            &json!(false),
            &json!("denied:handler"),
            &json!("")
        )
    );
    assert_eq!(
        (&r["budgetBefore"], &r["budgetAfter"]),
        (&json!(5), &json!(5))
    );
    assert_eq!(r["handler"]["plugin"], "workspace", "{r}");
    let (code, why, err) = worldd(&["why", "--db", path_str(&d.db()), record], None);
    assert_eq!(code, 0, "{why}{err}");
    assert!(why.contains("denied:handler"), "{why}");
    assert!(why.contains("declined (nothing ran) e1"), "{why}");

    // The handler's count is the coordinator's: a result of exactly 1 MiB commits, byte for
    // byte, and one byte more is refused up front.
    let overhead = 188 + 212; // the result's envelope and the world block (see the plugin)
    let fits = "a".repeat(1_048_576 - overhead);
    std::fs::write(wt.join("fits.txt"), &fits).unwrap();
    let (out, text) = mcp_read(&d, &token, "fits.txt");
    assert_eq!(out["ok"], true, "{}", &text[..200.min(text.len())]);
    assert_eq!(text.len(), 1_048_576);
    std::fs::write(wt.join("over.txt"), format!("{fits}a")).unwrap();
    let (out, _) = mcp_read(&d, &token, "over.txt");
    assert_eq!(
        out["refused"],
        "read over.txt: the result would be 1048577 bytes: 1048177 of the file, 0 of JSON escaping and 400 of the result's other fields (ok, tool, policy_digest, world); the limit is 1048576, so a file of plain text can be read up to 1048176 bytes"
    );
    assert_eq!(out["world"]["effects"][0]["status"], "denied");
    // Only the read that ran was spent.
    assert_eq!(spent(&d, &token), 1);
}

#[test]
fn oversized_write_is_declined_before_any_budget_is_spent() {
    let d = Daemon::start(WS, &["--plugin-config", "workspace.maxWriteBytes=100"]);
    let token = d.session("ep1", &["Workspace.Write=worktree:2"]);
    let content = "a".repeat(101);
    let v = a2a(
        &d,
        &token,
        "w1",
        "ailang-write",
        json!({"path": "big.txt", "content": content}),
    );
    let artifact = &v["result"]["artifacts"][0]["parts"][0]["data"];
    assert_eq!(
        artifact["refused"], "write big.txt: content is 101 bytes; the limit is 100",
        "{artifact}"
    );
    assert_eq!(artifact["world"]["effects"][0]["status"], "denied");
    assert_eq!(spent(&d, &token), 0);
    assert!(!d.root().join("ep1/big.txt").exists());
}

#[test]
fn a_write_twenty_thousand_directories_deep_is_declined_over_mcp_and_makes_nothing() {
    // It made 20,000 nested directories in one call, whose deepest file git could not open.
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:2"]);
    let v = mcp(
        &d,
        &token,
        "tools/call",
        json!({"name": "ailang-write",
               "arguments": {"path": "a/".repeat(20_000) + "x.txt", "content": "x"}}),
    )
    .sse_json();
    let out = &v["result"]["structuredContent"];
    assert_eq!(
        out["refused"], "write: the path is 40005 bytes; the limit is 1024",
        "{out}"
    );
    assert_eq!(out["world"]["effects"][0]["status"], "denied", "{out}");
    assert_eq!(spent(&d, &token), 0);
    assert!(!d.root().join("ep1/a").exists());
}

// ------------------------------------------------------------- children and a killed daemon

fn alive(pid: i32) -> bool {
    // A zombie has exited; only a process that can still run counts.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        }
        Err(_) => false,
    }
}

/// The process group of `pid` (field 5 of /proc/<pid>/stat).
fn pgid(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = stat.rsplit(')').next().unwrap();
    after.split_whitespace().nth(2).unwrap().parse().unwrap()
}

/// Wait for a gate file to hold `n` pids (the test's children announce themselves).
fn wait_for_pids(file: &Path, n: usize) -> Vec<i32> {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(text) = std::fs::read_to_string(file) {
            let pids: Vec<i32> = text
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect();
            if pids.len() >= n && text.ends_with('\n') {
                return pids;
            }
        }
        assert!(Instant::now() < until, "{} never appeared", file.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGKILL kills the daemon at once; the kernel then has to deliver the parent-death signal
/// and the watchdog's end-of-file: wait (bounded) for every process to be gone.
fn assert_all_die(pids: &[i32]) {
    let until = Instant::now() + Duration::from_secs(15);
    for &pid in pids {
        while alive(pid) {
            assert!(
                Instant::now() < until,
                "process {pid} outlived the killed daemon"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Send `body` to the daemon on another thread; the answer never comes (the daemon dies).
fn call_in_background(url: String, token: String, body: Value) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let _ = ureq::post(&url)
            .set("Authorization", &format!("Bearer {token}"))
            .set("Content-Type", "application/json")
            .set("Accept", "application/json, text/event-stream")
            .set("MCP-Protocol-Version", "2025-11-25")
            .send_bytes(&serde_json::to_vec(&body).unwrap());
    })
}

/// A daemon whose ailang plugin runs the stand-in, and a credential of episode `ep1` that
/// may run programs.
fn ailang_daemon() -> (Daemon, String) {
    let bin = fixtures::ailang_standin();
    let d = Daemon::start(
        &["worldd_workspace", "worldd_ailang"],
        &["--tool-ailang-bin", path_str(&bin)],
    );
    let token = d.session("ep1", &["Ailang.Run=worktree:5"]);
    (d, token)
}

/// Write `<mode>.ail` into `ep1`'s worktree: a program whose stand-in run does `mode`.
fn put_standin_program(d: &Daemon, mode: &str) {
    std::fs::write(
        d.root().join(format!("ep1/{mode}.ail")),
        format!("-- standin: {mode}\nmodule m\n\nexport func main() -> () ! {{IO}} {{\n  ()\n}}\n"),
    )
    .unwrap();
}

#[test]
fn killed_daemon_leaves_no_ailang_child_or_grandchild() {
    let (mut d, token) = ailang_daemon();
    let wt = d.root().join("ep1");
    // The stand-in's `hang` mode starts a `sleep` grandchild, writes "<pid> <grandchild>" to
    // ./hang.pids and sleeps.
    put_standin_program(&d, "hang");
    let caller = call_in_background(
        d.url("/mcp/"),
        token,
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "ailang-run", "arguments": {"path": "hang.ail"}}}),
    );
    let pids = wait_for_pids(&wt.join("hang.pids"), 2);
    let watchdog = pgid(pids[0]);
    assert_eq!(
        pgid(pids[1]),
        watchdog,
        "the grandchild is in the child's group"
    );
    assert_ne!(watchdog, pids[0], "the group is led by the watchdog");
    assert!(alive(pids[0]) && alive(pids[1]) && alive(watchdog));
    d.child.kill().unwrap(); // SIGKILL
    d.child.wait().unwrap();
    assert_all_die(&[pids[0], pids[1], watchdog]);
    caller.join().unwrap();
}

#[test]
fn killed_daemon_leaves_no_git_child_or_filter() {
    let mut d = Daemon::start(
        &["worldd_workspace", "worldd_git"],
        &["--git-author", "World Test <world@example.invalid>"],
    );
    let token = d.session("ep1", &["Git.Commit=worktree:5"]);
    let wt = d.root().join("ep1");
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(["-c", "user.name=T", "-c", "user.email=t@example.invalid"])
            .args(args)
            .current_dir(&wt)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    git(&["init", "-q"]);
    // The operator's clean filter runs for *.txt; this one announces "<its pid> <git's pid>"
    // and hangs, so `git add` (a child of the daemon) and the filter (its child) are running
    // when the daemon is killed.
    let pids_file = d.dir.path().join("filter.pids");
    let filter = format!("echo $$ $PPID >> {}; sleep 300; cat", pids_file.display());
    git(&["config", "filter.slow.clean", &filter]);
    std::fs::write(wt.join(".git/info/attributes"), "*.txt filter=slow\n").unwrap();
    std::fs::write(wt.join("a.txt"), "a\n").unwrap();
    let caller = call_in_background(
        d.url("/mcp/"),
        token,
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "git-commit", "arguments": {"message": "m"}}}),
    );
    let pids = wait_for_pids(&pids_file, 2);
    let (filter_pid, git_pid) = (pids[0], pids[1]);
    let watchdog = pgid(git_pid);
    assert_eq!(pgid(filter_pid), watchdog);
    assert!(alive(git_pid) && alive(filter_pid) && alive(watchdog));
    d.child.kill().unwrap(); // SIGKILL
    d.child.wait().unwrap();
    assert_all_die(&[git_pid, filter_pid, watchdog]);
    caller.join().unwrap();
    // The repository's own index was never locked: git staged into a private copy.
    assert!(!wt.join(".git/index.lock").exists());
}

#[test]
fn plan_sending_an_op_outside_the_manifest_allowlist_never_reaches_the_plugin() {
    // `stall-wrong-op` plans Stall.Wait with op "sleep"; the stall plugin's manifest allows only
    // "wait", and its handler reads no op at all: had it been called, it would answer ok.
    let d = Daemon::start(&["worldd_stall"], &[]);
    let token = d.session("ep1", &["Stall.Wait=any:5"]);
    let a = mcp(
        &d,
        &token,
        "tools/call",
        json!({"name": "stall-wrong-op", "arguments": {"ms": "0"}}),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    let v = a.sse_json();
    let out = &v["result"]["structuredContent"];
    assert_eq!(out["world"]["effects"][0]["status"], "failed", "{v}");
    assert!(out.get("slept_ms").is_none(), "{v}");
    // The budget unit is spent, as for any failed effect.
    let b = get(&d.url("/v1/budget"), Some(&token)).json();
    assert_eq!(b["grants"][0]["spent"], 1, "{b}");
    let (_dir, log) = d.halt_with_log();
    assert!(
        log.contains("effect failed: broker: Stall.Wait refuses op \"sleep\": not in the op allowlist of plugin stall's manifest (wait)"),
        "{log}"
    );
}

/// A program the agent wrote runs in the `ailang` child: it must find none of the daemon's
/// descriptors there (the listening socket, other agents' connections, the store's files),
/// only its own three pipes. It is the OOM killer's first choice, writes no core file, and
/// may allocate at most the default `memoryMiB` (4096 MiB).
/// A plugin that starts a program with plain `std::process::Command`, not the kit's `child`
/// module, hands it no descriptor of the daemon's: not the store's data file, which LMDB opens
/// read-write without close-on-exec (a program an agent steers could rewrite the log with
/// it), nor one the daemon inherited from whoever started it, nor a client's connection.
#[test]
fn a_program_a_plugin_starts_with_plain_command_inherits_no_descriptor_not_even_the_stores() {
    use std::os::fd::AsRawFd;
    // What a careless supervisor leaves open when it starts the daemon.
    let stray = tempfile::tempfile().unwrap();
    // SAFETY: clears the close-on-exec flag of the descriptor `stray` owns.
    let cleared = unsafe { libc::fcntl(stray.as_raw_fd(), libc::F_SETFD, 0) };
    assert_eq!(cleared, 0);
    let d = Daemon::start(&["worldd_stall"], &[]);
    drop(stray);
    let token = d.session("spawner", &["Stall.Spawn=any:5"]);
    let _other = std::net::TcpStream::connect(&d.addr).unwrap();
    let a = mcp(
        &d,
        &token,
        "tools/call",
        json!({"name": "stall-spawn", "arguments": {}}),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    let out = &a.sse_json()["result"]["structuredContent"];
    assert_eq!(out["ok"], true, "{out}");
    let held: Vec<&str> = out["descriptors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let numbers: Vec<&str> = held.iter().map(|h| h.split(' ').next().unwrap()).collect();
    assert_eq!(numbers, ["0", "1", "2"], "{held:?}");
    assert!(
        held.iter()
            .all(|h| !h.contains("data.mdb") && !h.contains("socket:")),
        "{held:?}"
    );
    // stdin and stdout are the plugin's own pipes; stderr is the daemon's.
    assert!(
        held[0].starts_with("0 pipe:[") && held[1].starts_with("1 pipe:["),
        "{held:?}"
    );
}

#[test]
fn an_ailang_child_inherits_no_descriptor_of_the_daemon_and_goes_first_when_memory_runs_out() {
    let (d, token) = ailang_daemon();
    // Another client's connection is open meanwhile.
    let _other = std::net::TcpStream::connect(&d.addr).unwrap();
    put_standin_program(&d, "env");
    let a = mcp(
        &d,
        &token,
        "tools/call",
        json!({"name": "ailang-run", "arguments": {"path": "env.ail"}}),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    let result = a.sse_json();
    let out = &result["result"]["structuredContent"];
    let seen: Value = serde_json::from_str(out["stdout"].as_str().unwrap()).unwrap();
    let fds = seen["fds"].as_object().unwrap();
    let numbers: Vec<&str> = fds.keys().map(String::as_str).collect();
    assert_eq!(numbers, ["0", "1", "2"], "{fds:?}");
    for (fd, target) in fds {
        assert!(
            target.as_str().unwrap().starts_with("pipe:["),
            "{fd} → {target}"
        );
    }
    assert_eq!(seen["oom_score_adj"], 1000, "{seen}");
    assert_eq!(
        seen["rlimits"],
        json!({"core": [0, 0], "data": [4096u64 << 20, 4096u64 << 20]}),
        "{seen}"
    );
}
