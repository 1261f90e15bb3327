//! The real `worldd` binary with the real workspace plugin over real HTTP.

mod common;

use common::*;
use serde_json::json;
use sha2::Digest;

const WS: &[&str] = &["worldd_workspace"];

/// `ailang-read` of `path` over MCP.
fn read_over_mcp(d: &Daemon, token: &str, path: &str) -> Answer {
    mcp(
        d,
        token,
        "tools/call",
        json!({"name": "ailang-read", "arguments": {"path": path}}),
    )
}

#[test]
fn serve_prints_one_ready_line_and_answers_health() {
    let d = Daemon::start(WS, &[]);
    let h = get(&d.url("/v1/health"), None);
    assert_eq!(h.status, 200);
    let v = h.json();
    assert_eq!(v["status"], "ok");
    assert_eq!(v["daemon_version"], env!("CARGO_PKG_VERSION"));
    assert!(v["interpreter_ref"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));
    let status = d.stop();
    assert!(status.success(), "{status:?}");
}

/// A supervisor that stops the daemon as soon as it has said it is ready must get a drain and
/// exit 0, not a process killed by the signal's default action: the daemon catches SIGTERM
/// before it prints the ready line. (Found as a rare `ExitStatus(15)` of the test above under
/// load.)
#[test]
fn sigterm_right_after_the_ready_line_drains_instead_of_killing_the_daemon() {
    for attempt in 0..12 {
        let d = Daemon::start(WS, &[]);
        let status = d.stop();
        assert!(status.success(), "attempt {attempt}: {status:?}");
    }
}

/// A terminal that closes sends its processes SIGHUP, whose default action ended the daemon
/// mid-call: it drains and exits 0 as on SIGTERM. A daemon started under `nohup` (SIGHUP
/// ignored) keeps serving through a hangup, and one a script started in the background
/// (SIGINT ignored) through the script's Ctrl-C.
#[test]
fn a_hangup_drains_the_daemon_and_a_signal_ignored_at_start_stays_ignored() {
    // Both daemons get the dispositions the test names, whatever this test was started with
    // (a suite run under `nohup` ignores SIGHUP in every process it starts).
    let started_with = |action: libc::sighandler_t| {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Daemon::serve_command(&dir, WS);
        // SAFETY: signal(2) is async-signal-safe, as pre_exec requires.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(move || {
                libc::signal(libc::SIGHUP, action);
                libc::signal(libc::SIGINT, action);
                Ok(())
            });
        }
        Daemon::spawn(dir, cmd)
    };
    let d = started_with(libc::SIG_DFL);
    let (status, log) = d.stop_by(libc::SIGHUP, std::time::Duration::from_secs(5));
    assert!(status.success(), "{status:?}\n{log}");
    assert!(
        log.contains("shutting down: draining in-flight calls"),
        "{log}"
    );

    let d = started_with(libc::SIG_IGN);
    d.signal(libc::SIGHUP);
    d.signal(libc::SIGINT);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(get(&d.url("/v1/health"), None).status, 200);
    assert!(!d.log().contains("shutting down"), "{}", d.log());
    let status = d.stop();
    assert!(status.success(), "{status:?}");
}

/// `kill -USR1` (or `-USR2`), a log-rotation habit ("reopen your logs"), ended the daemon at
/// once with their default action: calls in flight cut, no drain, no line. Each is said and
/// ignored; the daemon serves on and still drains on SIGTERM.
#[test]
fn sigusr1_or_sigusr2_from_a_log_rotation_habit_is_said_and_the_daemon_serves_on() {
    let d = Daemon::start(WS, &[]);
    for (signal, name) in [(libc::SIGUSR1, "SIGUSR1"), (libc::SIGUSR2, "SIGUSR2")] {
        d.signal(signal);
        d.wait_for_log(&format!(
            "{name} ignored: worldd does not reopen its log; rotate a log it writes with 2>>FILE by copying and truncating it (logrotate's copytruncate), and stop it with SIGTERM"
        ));
        assert_eq!(get(&d.url("/v1/health"), None).status, 200, "{name}");
    }
    let status = d.stop();
    assert!(status.success(), "{status:?}");
}

/// An IPv4 loopback written as IPv6 (`[::ffff:127.0.0.1]`, a dual-stack socket reached over
/// 127.0.0.1) is loopback: the daemon binds it and answers a client that names it in `Host`.
/// A mapped address that is not loopback is refused as any other.
#[test]
fn an_ipv4_loopback_mapped_into_ipv6_is_loopback_for_the_bind_and_the_host_check() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = worldd(
        &[
            "serve",
            "--db",
            path_str(&dir.path().join("db")),
            "--bind",
            "[::ffff:10.0.0.1]:7644",
        ],
        None,
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("at bind-policy: --bind \"[::ffff:10.0.0.1]:7644\": host \"::ffff:10.0.0.1\" is not loopback: the daemon binds loopback only"),
        "{err}"
    );
    if std::net::TcpListener::bind("[::ffff:127.0.0.1]:0").is_err() {
        eprintln!("*** no IPv6 here: a mapped loopback bind is not tried ***");
        return;
    }
    let root = dir.path().join("worktrees");
    let cmd = Daemon::serve_command_on(&dir, WS, "[::ffff:127.0.0.1]:0", &root);
    let d = Daemon::spawn(dir, cmd);
    assert!(
        d.url("/").starts_with("http://[::ffff:127.0.0.1]:"),
        "{}",
        d.url("/")
    );
    assert_eq!(get(&d.url("/v1/health"), None).status, 200);
}

#[test]
fn non_loopback_bind_is_refused_at_startup() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let (code, out, err) = worldd(
        &["serve", "--db", path_str(&db), "--bind", "0.0.0.0:7644"],
        None,
    );
    assert_eq!(code, 2, "{out} {err}");
    assert!(
        err.contains("daemon startup failed at bind-policy: --bind \"0.0.0.0:7644\": host \"0.0.0.0\" is not loopback: the daemon binds loopback only"),
        "{err}"
    );
    assert!(out.is_empty());
    assert!(
        !db.exists(),
        "nothing may be created before the bind policy passes"
    );
}

#[test]
fn a2a_write_then_read_through_the_workspace_plugin_and_why_verifies() {
    let d = Daemon::start(WS, &[]);
    let token = d.session(
        "ep1",
        &["Workspace.Read=worktree:5", "Workspace.Write=worktree:5"],
    );
    let w = a2a(
        &d,
        &token,
        "w1",
        "ailang-write",
        json!({"path": "notes/hello.txt", "content": "hi there\n"}),
    );
    let data = &w["result"]["artifacts"][0]["parts"][0]["data"];
    assert_eq!(data["ok"], true, "{w}");
    assert_eq!(data["world"]["effects"][0]["status"], "ok");
    assert_eq!(w["result"]["metadata"]["invocation_id"], "a2a:ep1:w1");
    assert_eq!(w["result"]["status"]["state"], "completed");
    assert_eq!(
        std::fs::read_to_string(d.root().join("ep1/notes/hello.txt")).unwrap(),
        "hi there\n"
    );

    let r = a2a(
        &d,
        &token,
        "r1",
        "ailang-read",
        json!({"path": "notes/hello.txt"}),
    );
    let data = &r["result"]["artifacts"][0]["parts"][0]["data"];
    assert_eq!(data["ok"], true);
    assert_eq!(data["content"], "hi there\n");
    let entry = r["result"]["metadata"]["entry_index"].as_u64().unwrap();

    // Escapes are refused by the plugin: the effect ran (status ok) and said no.
    let e = a2a(
        &d,
        &token,
        "r2",
        "ailang-read",
        json!({"path": "../../etc/hosts"}),
    );
    let data = &e["result"]["artifacts"][0]["parts"][0]["data"];
    assert_eq!(data["ok"], false);
    assert!(
        data["refused"]
            .as_str()
            .unwrap()
            .contains("must be relative"),
        "{data}"
    );

    // why against the live daemon's store, by entry index and by invocation id.
    let db = d.db();
    let (code, out, err) = worldd(&["why", "--db", path_str(&db), &entry.to_string()], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("all 10 link(s) verified"), "{out}");
    // The coordinator's journal, the plan's replay and the plugin that ran the effect.
    assert!(
        out.contains("\n  ✓ journal -  a2a:ep1:r1: committed at #"),
        "{out}"
    );
    assert!(
        out.contains("; journal: intent e1 Workspace.Read@worktree cost 1, outcome succeeded\n"),
        "{out}"
    );
    assert!(
        out.contains("recomputed from ailang-read (")
            && out.contains("by this build's interpreter: e1 Workspace.Read@worktree cost 1\n"),
        "{out}"
    );
    let library = format!(
        "sha256:{}",
        hex::encode(sha2::Sha256::digest(
            std::fs::read(plugin_library("worldd_workspace")).unwrap()
        ))
    );
    assert!(
        out.contains(&format!(
            "\n  ✓ plugin  {}…  workspace {} ran e1\n",
            &library[..15],
            env!("CARGO_PKG_VERSION")
        )),
        "{out}"
    );
    let (code, out, _) = worldd(&["why", "--db", path_str(&db), "a2a:ep1:w1"], None);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("why: entry "), "{out}");

    // Resending a committed task id returns the committed result; nothing runs again.
    let again = a2a(
        &d,
        &token,
        "w1",
        "ailang-write",
        json!({"path": "notes/hello.txt", "content": "hi there\n"}),
    );
    assert_eq!(
        again["result"]["metadata"]["entry_index"],
        w["result"]["metadata"]["entry_index"]
    );
    let other = a2a(
        &d,
        &token,
        "w1",
        "ailang-write",
        json!({"path": "x", "content": ""}),
    );
    assert_eq!(other["error"]["code"], -32602);
    assert_eq!(
        other["error"]["message"],
        "task id already used in this session"
    );
}

#[test]
fn a2a_error_table() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let send =
        |t: Option<&str>, body: serde_json::Value| post_json(&d.url("/a2a/"), t, &body).json();
    let ok_body = json!({"jsonrpc":"2.0","id":1,"method":"tasks/send","params":{"id":"t","metadata":{"skill_id":"ailang-read"},"message":{"role":"user","parts":[{"type":"data","data":{"path":"a"}}]}}});
    let v = send(None, ok_body.clone());
    assert_eq!(v["error"]["code"], -32001);
    let v = post_json(&d.url("/a2a/"), Some("nothex"), &ok_body).json();
    assert_eq!(v["error"]["code"], -32600);
    let v = send(Some(&"ab".repeat(32)), ok_body.clone());
    assert_eq!(
        (v["error"]["code"].as_i64(), v["error"]["message"].as_str()),
        (Some(-32001), Some("unknown session credential"))
    );
    let v = send(
        Some(&token),
        json!({"jsonrpc":"1.0","id":1,"method":"tasks/send"}),
    );
    assert_eq!(v["error"]["code"], -32600);
    // A method no A2A version names; `tasks/get` is 0.3's, and reads a task back.
    let v = send(
        Some(&token),
        json!({"jsonrpc":"2.0","id":1,"method":"tasks/list"}),
    );
    assert_eq!(
        (v["error"]["code"].as_i64(), v["error"]["message"].as_str()),
        (Some(-32601), Some("method not found"))
    );
    let v = send(
        Some(&token),
        json!({"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"t"}}),
    );
    assert_eq!(
        (v["error"]["code"].as_i64(), v["error"]["message"].as_str()),
        (Some(-32001), Some("Task not found"))
    );
    let mut two_parts = ok_body.clone();
    two_parts["params"]["message"]["parts"] =
        json!([{"type":"data","data":{}},{"type":"data","data":{}}]);
    let v = send(Some(&token), two_parts);
    assert_eq!(
        (v["error"]["code"].as_i64(), v["error"]["message"].as_str()),
        (Some(-32602), Some("invalid params"))
    );
    let mut bad_task = ok_body.clone();
    bad_task["params"]["id"] = json!("has space");
    assert_eq!(
        send(Some(&token), bad_task)["error"]["message"],
        "invalid params"
    );
    let mut hidden = ok_body.clone();
    hidden["params"]["metadata"]["skill_id"] = json!("ailang-write");
    assert_eq!(
        send(Some(&token), hidden)["error"]["message"],
        "not authorized"
    );
    let mut pinned = ok_body.clone();
    pinned["params"]["metadata"]["transition_fn"] = json!(format!("sha256:{}", "0".repeat(64)));
    assert_eq!(
        send(Some(&token), pinned)["error"]["message"],
        "proposal does not match the registered transition"
    );
    let v = send(Some(&token), ok_body);
    assert_eq!(v["result"]["status"]["state"], "completed", "{v}");
    // An oversized body: authorization is answered first, from the headers alone, then the
    // declared size; neither waits for a byte of the body.
    let head = |auth: &str| {
        format!("POST /a2a/ HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n{auth}Content-Length: 2500000\r\n\r\n", d.addr)
    };
    let a = raw_exchange(&d.addr, head("").as_bytes());
    assert_eq!(
        (a.status, a.json()["error"]["code"].as_i64()),
        (200, Some(-32001))
    );
    let a = raw_exchange(
        &d.addr,
        head(&format!("Authorization: Bearer {token}\r\n")).as_bytes(),
    );
    assert_eq!(
        a.json()["error"]["message"],
        "invalid JSON-RPC request: body exceeds 1048576 bytes"
    );
}

#[test]
fn r8_refuses_tools_whose_handler_is_not_loaded() {
    // No plugins at all: the se-tools are not even published, so publish them by a
    // daemon with the workspace plugin, then restart without it.
    let d = Daemon::start(WS, &[]).restart(&[], &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let v = a2a(&d, &token, "t1", "ailang-read", json!({"path": "a"}));
    assert_eq!(v["error"]["code"], -32603);
    assert_eq!(
        v["error"]["message"],
        "transition declares an effect this daemon has no handler for"
    );
}

#[test]
fn reads_need_a_session_unless_open_reads() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let a = get(&d.url("/v1/head"), None);
    assert_eq!(a.status, 401);
    assert_eq!(
        a.json(),
        json!({"error":{"class":"SessionAbsent","message":"a session credential is required: no Authorization Bearer header was present"}})
    );
    let a = get(&d.url("/v1/head"), Some("xyz"));
    assert_eq!(a.status, 400);
    assert_eq!(a.json()["error"]["class"], "InvalidSession");
    let head = get(&d.url("/v1/head"), Some(&token));
    assert_eq!(head.status, 200);
    assert!(head.text().starts_with("sha256:"));
    let e0 = get(&d.url("/v1/log/0"), Some(&token)).json();
    assert_eq!(e0["header"]["entryIndex"], 0);
    assert_eq!(
        e0["header"]["prevEntryHash"],
        format!("sha256:{}", "0".repeat(64))
    );
    let bad = get(&d.url("/v1/log/x"), Some(&token));
    assert_eq!(
        (bad.status, bad.json()["error"]["message"].as_str().unwrap()),
        (400, "log index must be a non-negative integer")
    );
    let missing = get(&d.url("/v1/log/999"), Some(&token));
    assert_eq!(
        (
            missing.status,
            missing.json()["error"]["message"].as_str().unwrap()
        ),
        (404, "log entry not found")
    );
    let limit = get(&d.url("/v1/log?from=0&limit=x"), Some(&token));
    assert_eq!(limit.json()["error"]["message"], "limit must be an integer");
    let page = get(&d.url("/v1/log?from=0"), Some(&token)).json();
    assert_eq!(page["items"][0]["header"]["entryIndex"], 0);
    let badref = get(&d.url("/v1/objects/sha256:xyz"), Some(&token));
    assert_eq!(badref.status, 400);
    assert_eq!(
        badref.json()["error"]["message"],
        "ref: hashref: digest must be 64 lowercase hex digits: \"sha256:xyz\""
    );
    let world = get(&d.url(&format!("/v1/worlds/{}", head.text())), Some(&token)).json();
    assert_eq!(world["revision"], 0);
    let obj = get(
        &d.url(&format!(
            "/v1/objects/{}?payload=true",
            world["stateRoot"].as_str().unwrap()
        )),
        Some(&token),
    )
    .json();
    assert_eq!(obj["semanticId"], "world/genesis/v1");
    // Receipts of `rest:` commits are the operator's; an agent session reads none of them.
    let operator = d.operator_session("ops", &[]);
    let receipt = get(&d.url("/v1/receipts/rest:none"), Some(&operator)).json();
    assert_eq!(
        receipt,
        json!({"invocationId":"rest:none","state":"not-started","resultRef":""})
    );
    let agent_receipt = get(&d.url("/v1/receipts/rest:none"), Some(&token));
    assert_eq!(
        (agent_receipt.status, agent_receipt.json()),
        (
            404,
            json!({"error":{"class":"NotFound","message":"receipt not found"}})
        )
    );
    let bad_receipt = get(&d.url("/v1/receipts/mcp:x"), Some(&token));
    assert_eq!(
        bad_receipt.json()["error"]["message"],
        "receipt id must be rest:<id>"
    );
    let reg = get(&d.url("/v1/registry/tools"), Some(&token)).json();
    assert!(reg["head"].as_str().unwrap().starts_with("sha256:"));
    drop(d);

    let d = Daemon::start(WS, &["--open-reads"]);
    assert_eq!(get(&d.url("/v1/head"), None).status, 200);
    let metrics = get(&d.url("/v1/metrics"), None).text();
    let value = |name: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("{name} missing from {metrics}"))
            .parse()
            .unwrap()
    };
    // Publishing the shipped transitions at start-up already went through the writer.
    assert!(value("worldd_commit_batches_total") >= 1.0);
    assert!(value("worldd_commit_operations_total") >= value("worldd_commit_batches_total"));
    assert!(value("worldd_commit_build_seconds_total") > 0.0);
    assert!(value("worldd_commit_sync_seconds_total") > 0.0);
}

#[test]
fn agent_card_is_filtered_by_grants() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let card = get(&d.url("/.well-known/agent.json"), Some(&token));
    assert_eq!(card.status, 200);
    let v = card.json();
    let ids: Vec<&str> = v["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["ailang-read"]);
    assert_eq!(v["capabilities"]["streaming"], false);
    let absent = get(&d.url("/.well-known/agent.json"), None);
    assert_eq!(
        (
            absent.status,
            absent.json()["error"]["class"].as_str().unwrap()
        ),
        (401, "SessionAbsent")
    );
}

#[test]
fn mcp_call_returns_the_committed_bytes() {
    let d = Daemon::start(WS, &[]);
    let token = d.session(
        "ep1",
        &["Workspace.Read=worktree:5", "Workspace.Write=worktree:5"],
    );
    std::fs::write(d.root().join("ep1/a.txt"), "alpha").unwrap();
    let a = read_over_mcp(&d, &token, "a.txt");
    assert_eq!(a.status, 200, "{}", a.text());
    assert!(
        a.content_type.starts_with("text/event-stream"),
        "{}",
        a.content_type
    );
    let v = a.sse_json();
    let text = v["result"]["content"][0]["text"].as_str().unwrap();
    assert_eq!(v["result"]["structuredContent"]["content"], "alpha");
    // The text is exactly the committed output: `why -` finds it by its sha256.
    let r = format!(
        "sha256:{}",
        hex::encode(sha2::Sha256::digest(text.as_bytes()))
    );
    let (code, out, _) = worldd(&["why", "--db", path_str(&d.db()), &r], None);
    assert_eq!(code, 0, "{out}");
    let (code, out, err) = worldd(
        &["why", "--db", path_str(&d.db()), "-"],
        Some(format!("{text}\n").as_bytes()),
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("matched by output (sha256 of the result)"),
        "{out}"
    );
}

#[test]
fn handlers_lists_the_workspace_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let lib = plugin_library("worldd_workspace");
    std::fs::copy(&lib, dir.path().join(lib.file_name().unwrap())).unwrap();
    std::fs::write(dir.path().join("libnot_a_plugin.so"), b"not an elf").unwrap();
    let (code, out, err) = worldd(&["handlers", "--plugin-dir", path_str(dir.path())], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("workspace "), "{out}");
    assert!(
        out.contains("effect Workspace.Read [read] ops: read"),
        "{out}"
    );
    assert!(
        out.contains("effect Workspace.Write [write] ops: write, edit"),
        "{out}"
    );
    assert!(
        out.contains("tools: ailang-read, ailang-write, ailang-edit"),
        "{out}"
    );
    assert!(
        out.contains("libnot_a_plugin.so\n  not loadable: "),
        "{out}"
    );
    assert!(
        out.contains("1 plugin(s), 1 library(ies) not loadable"),
        "{out}"
    );
    // The same broken library stops `serve` with one line naming the file.
    let (code, _, err) = worldd(
        &[
            "serve",
            "--db",
            path_str(&dir.path().join("db")),
            "--workspace-root",
            path_str(&dir.path().join("wt")),
            "--bind",
            "127.0.0.1:0",
            "--plugin-dir",
            path_str(dir.path()),
        ],
        None,
    );
    assert_eq!(code, 2);
    let line = err
        .lines()
        .find(|l| l.contains("daemon startup failed"))
        .unwrap();
    assert!(
        line.contains("at plugins: plugin ") && line.contains("libnot_a_plugin.so"),
        "{line}"
    );
}

#[test]
fn session_mint_needs_a_terminal_and_works_beside_the_daemon() {
    let d = Daemon::start(WS, &[]);
    let db = d.db();
    // No controlling terminal (setsid detaches it): refused, nothing minted.
    let out = std::process::Command::new("setsid")
        .args([
            WORLDD,
            "session",
            "mint",
            "--db",
            path_str(&db),
            "--episode",
            "ep2",
            "--grant",
            "Workspace.Read=worktree:3",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refusing: no controlling terminal ("), "{err}");
    assert!(
        err.contains("minting a session credential requires one human act at a terminal"),
        "{err}"
    );
    // With a terminal (script gives the child a pty), answering y mints while the daemon runs.
    let token_file = d.dir.path().join("ep2.session");
    let cmd = format!(
        "{WORLDD} session mint --db {} --episode ep2 --grant Workspace.Read=worktree:3 --out {}",
        db.display(),
        token_file.display()
    );
    let mut child = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut sin = child.stdin.take().unwrap();
        sin.write_all(b"y\n").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("Confirm mint for episode ep2 (1 grant(s), expiry +86400s) with a session credential? [y/N]"), "{text}");
    assert!(
        text.contains("minted session credential for episode ep2: 1 grant(s), expires epoch "),
        "{text}"
    );
    let token = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_owned();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&token_file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    std::fs::create_dir_all(d.root().join("ep2")).unwrap();
    let v = a2a(&d, &token, "t", "ailang-read", json!({"path": "nope"}));
    assert_eq!(
        v["result"]["artifacts"][0]["parts"][0]["data"]["ok"], false,
        "{v}"
    );
    // list and revoke
    let (code, out, _) = worldd(&["session", "list", "--db", path_str(&db)], None);
    assert_eq!(code, 0);
    assert!(out.contains("  ep2  live  expires "), "{out}");
    assert!(out.trim_end().ends_with("1 session credential(s)"), "{out}");
    let (code, _, _) = worldd(
        &[
            "session",
            "revoke",
            "--db",
            path_str(&db),
            "--episode",
            "ep2",
        ],
        None,
    );
    assert_eq!(code, 0);
    let v = a2a(&d, &token, "t2", "ailang-read", json!({"path": "nope"}));
    assert_eq!(v["error"]["message"], "unknown session credential");
    let (code, _, err) = worldd(
        &["session", "revoke", "--db", path_str(&db), &"0".repeat(64)],
        None,
    );
    assert_eq!(code, 1);
    assert!(
        err.contains("refusing: no session credential 0000"),
        "{err}"
    );
}

#[test]
fn call_json_out_piped_to_why_verifies_and_tampering_exits_3() {
    let d = Daemon::start(WS, &[]);
    let token = d.session(
        "ep1",
        &["Workspace.Read=worktree:5", "Workspace.Write=worktree:5"],
    );
    let token_file = d.dir.path().join("token");
    std::fs::write(&token_file, &token).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let addr = format!("http://{}", d.addr);
    let (code, out, err) = worldd(
        &[
            "call",
            "ailang-write",
            "--arg",
            "path=a.txt",
            "--arg",
            "content=alpha",
            "--addr",
            &addr,
            "--session",
            path_str(&token_file),
        ],
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    let (code, result, err) = worldd(
        &[
            "call",
            "ailang-read",
            "--arg",
            "path=a.txt",
            "--json-out",
            "--addr",
            &addr,
            "--session",
            path_str(&token_file),
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(result.trim_end()).unwrap();
    assert_eq!(v["content"], "alpha");
    let (code, out, err) = worldd(
        &["why", "--db", path_str(&d.db()), "-"],
        Some(result.as_bytes()),
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("all 10 link(s) verified"), "{out}");
    // --strict turns ok:false into exit 3.
    let (code, _, _) = worldd(
        &[
            "call",
            "ailang-read",
            "--arg",
            "path=missing.txt",
            "--strict",
            "--addr",
            &addr,
            "--session",
            path_str(&token_file),
        ],
        None,
    );
    assert_eq!(code, 3);

    // Stop the daemon, flip one byte of the output object, and ask again.
    let kept = d.halt();
    let dir = kept.path().join("db");
    let output_ref = format!(
        "sha256:{}",
        hex::encode(sha2::Sha256::digest(result.trim_end().as_bytes()))
    );
    {
        let store = broker_core::store::Store::open(&dir, Default::default()).unwrap();
        let r: broker_core::object::Ref = output_ref.parse().unwrap();
        let table = broker_core::store::RawTable::Objects;
        let mut bytes = store.raw_get(table, r.as_bytes()).unwrap().unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        store
            .raw_overwrite(table, r.as_bytes().to_vec(), bytes)
            .unwrap();
    }
    let (code, out, err) = worldd(&["why", "--db", path_str(&dir), &output_ref], None);
    assert_eq!(code, 3, "{out}{err}");
    assert!(out.contains("✗ output"), "{out}");
    assert!(err.contains("link(s) broken"), "{err}");
}

#[test]
fn budget_zero_grant_is_listed_and_its_call_is_denied_over_mcp() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:0"]);
    let list = mcp(&d, &token, "tools/list", json!({})).sse_json();
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ailang-read"]);
    let call = read_over_mcp(&d, &token, "a").sse_json();
    let out = &call["result"]["structuredContent"];
    assert_eq!(out.as_object().unwrap().len(), 1, "{out}");
    assert_eq!(out["world"]["effects"][0]["status"], "denied");
    let record = out["world"]["effects"][0]["record"].as_str().unwrap();
    let obj = get(
        &d.url(&format!("/v1/objects/{record}?payload=true")),
        Some(&token),
    )
    .json();
    use base64::Engine;
    let payload = base64::engine::general_purpose::STANDARD
        .decode(obj["payload"].as_str().unwrap())
        .unwrap();
    let rec: serde_json::Value = serde_json::from_slice(&payload).unwrap();
    assert_eq!(rec["denial"], "denied:budget");
    assert_eq!(
        (
            rec["allowed"].as_bool(),
            rec["failed"].as_bool(),
            rec["resultRef"].as_str()
        ),
        (Some(false), Some(false), Some(""))
    );
    // A plan refusal is a result too, with the contract's text.
    let refused = mcp(
        &d,
        &token,
        "tools/call",
        json!({"name": "ailang-read", "arguments": {"path": "a", "limit": 1}}),
    )
    .sse_json();
    assert_eq!(
        refused["result"]["structuredContent"]["refused"],
        "unknown argument \"limit\"; ailang-read admits only: path"
    );
    // MCP auth rows through the real binary.
    let absent = request(
        "POST",
        &d.url("/mcp/"),
        None,
        &[("Content-Type", "application/json")],
        Some(b"{}"),
    );
    assert_eq!(
        (absent.status, absent.text().as_str()),
        (
            401,
            "session credential is absent: send Authorization: Bearer <session-credential>"
        )
    );
    let unknown = request(
        "POST",
        &d.url("/mcp/"),
        Some(&"cd".repeat(32)),
        &[("Content-Type", "application/json")],
        Some(b"{}"),
    );
    assert_eq!(
        (unknown.status, unknown.text().as_str()),
        (401, "unknown session credential")
    );
    // R8 over MCP: the fixed envelope, plain JSON.
    let d = d.restart(&[], &[]);
    let r8 = read_over_mcp(&d, &token, "a");
    assert!(
        r8.content_type.starts_with("application/json"),
        "{}",
        r8.content_type
    );
    assert_eq!(
        r8.json(),
        json!({"jsonrpc":"2.0","id":7,"error":{"code":-32603,"message":"host callback failed"}})
    );
}

#[test]
fn an_idempotent_task_id_leaves_one_log_entry() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let before = get(&d.url("/v1/head"), Some(&token)).text();
    let args = json!({"path": "x.txt", "content": "once"});
    let first = a2a(&d, &token, "same-task", "ailang-write", args.clone());
    let second = a2a(&d, &token, "same-task", "ailang-write", args);
    assert_eq!(first["result"]["artifacts"], second["result"]["artifacts"]);
    assert_eq!(
        first["result"]["metadata"]["entry_index"],
        second["result"]["metadata"]["entry_index"]
    );
    let head = get(
        &d.url(&format!(
            "/v1/worlds/{}",
            get(&d.url("/v1/head"), Some(&token)).text()
        )),
        Some(&token),
    )
    .json();
    let genesis = get(&d.url(&format!("/v1/worlds/{before}")), Some(&token)).json();
    assert_eq!(
        head["revision"].as_u64().unwrap(),
        genesis["revision"].as_u64().unwrap() + 1
    );
}

#[test]
fn rest_commit_checks_the_head_and_answers_receipts() {
    use base64::Engine;
    let d = Daemon::start(WS, &[]);
    let token = d.operator_session("ops", &["World.Commit=log:5"]);
    let head = get(&d.url("/v1/head"), Some(&token)).text();
    let world0 = get(&d.url(&format!("/v1/worlds/{head}")), Some(&token)).json();
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let sha = |b: &[u8]| format!("sha256:{}", hex::encode(sha2::Sha256::digest(b)));
    let out = br#"{"rest":true}"#.to_vec();
    let rec = br#"{"record":"rest"}"#.to_vec();
    let obj = |p: &[u8], sid: &str| json!({"hash": sha(p), "interfaceHash": sha(sid.as_bytes()), "semanticId": sid, "provenance": "rest:test", "payload": b64(p)});
    let entry_fields = json!({
        "entryIndex": 1, "semanticsEpoch": 1, "transitionFn": sha(b"fn"), "interpreter": sha(b"interp"),
        "prevEntryHash": world0["logHead"], "writtenBy": "rest:test", "transitionRef": sha(&rec),
    });
    let entry_hash = sha(&broker_core::canon::to_vec(&entry_fields).unwrap());
    let world = json!({"revision": 1, "stateRoot": sha(&out), "logHead": entry_hash});
    let world_ref = sha(&broker_core::canon::to_vec(&world).unwrap());
    let mut header = entry_fields.clone();
    header.as_object_mut().unwrap().remove("transitionRef");
    let body = |observed: &str| {
        json!({
            "invocationId": "rest:c1",
            "observedHead": observed,
            "objects": [obj(&out, "world/invocation-output/v1"), obj(&rec, "world/invocation-record/v2")],
            "nextWorld": {"ref": world_ref, "revision": 1, "stateRoot": sha(&out), "logHead": entry_hash},
            "entry": {"header": header, "entryHash": entry_hash, "transitionRef": sha(&rec)},
        })
    };
    let stale = format!("sha256:{}", "1".repeat(64));
    let conflict = post_json(&d.url("/v1/commit"), Some(&token), &body(&stale));
    assert_eq!(conflict.status, 409, "{}", conflict.text());
    let e = conflict.json();
    assert_eq!(e["error"]["class"], "HeadConflict");
    assert_eq!(e["error"]["observedHead"], stale);
    assert_eq!(e["error"]["selectedHead"], head);
    assert_eq!(
        e["error"]["message"],
        format!("conflict: observed {stale} selected {head}")
    );
    let ok = post_json(&d.url("/v1/commit"), Some(&token), &body(&head));
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(ok.json(), json!({"selectedHead": world_ref}));
    let operator = d.operator_session("ops", &[]);
    let receipt = get(&d.url("/v1/receipts/rest:c1"), Some(&operator)).json();
    assert_eq!(
        receipt,
        json!({"invocationId": "rest:c1", "state": "resolved", "resultRef": world_ref})
    );
    // An agent session learns nothing of it, exactly as of an id never used.
    let agent = d.session("ep1", &["Workspace.Read=worktree:1"]);
    for id in ["rest:c1", "rest:never"] {
        let a = get(&d.url(&format!("/v1/receipts/{id}")), Some(&agent));
        assert_eq!(
            (a.status, a.json()["error"]["class"].clone()),
            (404, json!("NotFound"))
        );
    }
    // Unknown fields are refused; so is a commit without a session.
    let mut extra = body(&world_ref);
    extra["surprise"] = json!(1);
    let bad = post_json(&d.url("/v1/commit"), Some(&token), &extra);
    assert_eq!(bad.status, 400);
    assert!(bad.json()["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("invalid commit JSON: "));
    assert_eq!(
        post_json(&d.url("/v1/commit"), None, &body(&world_ref)).status,
        401
    );
}

#[test]
fn doctor_passes_a_healthy_store_and_exits_3_on_damage() {
    let d = Daemon::start(WS, &[]);
    let token = d.session(
        "ep1",
        &["Workspace.Read=worktree:5", "Workspace.Write=worktree:5"],
    );
    for i in 0..3 {
        a2a(
            &d,
            &token,
            &format!("w{i}"),
            "ailang-write",
            json!({"path": format!("f{i}.txt"), "content": "x"}),
        );
    }
    a2a(&d, &token, "bad", "ailang-read", json!({"nope": 1}));
    // Doctor runs beside the live daemon.
    let (code, out, err) = worldd(&["doctor", "--db", path_str(&d.db())], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("✓ 5 entr(ies) checked, 0 broken"), "{out}");
    assert!(
        out.contains("spend counters equal the sum of intents"),
        "{out}"
    );
    assert!(out.contains("0 indeterminate intent(s)"), "{out}");
    let kept = d.halt();
    let db = kept.path().join("db");
    {
        let store = broker_core::store::Store::open(&db, Default::default()).unwrap();
        let e2 = store
            .raw_get(broker_core::store::RawTable::Log, &2u64.to_be_bytes())
            .unwrap()
            .unwrap();
        // Flip one letter of `writtenBy`: still valid JSON, so exactly this entry's hash breaks.
        let mut damaged = e2.clone();
        let at = damaged
            .windows(11)
            .position(|w| w == b"coordinator")
            .unwrap();
        damaged[at] ^= 1;
        store
            .raw_overwrite(
                broker_core::store::RawTable::Log,
                2u64.to_be_bytes().to_vec(),
                damaged,
            )
            .unwrap();
    }
    let (code, out, err) = worldd(&["doctor", "--db", path_str(&db)], None);
    assert_eq!(code, 3, "{out}{err}");
    assert!(out.contains("1 broken"), "{out}");
    assert!(out.contains("entry 2: entry"), "{out}");
    assert!(err.contains("doctor: the store is inconsistent"), "{err}");
}

#[test]
fn authentication_and_transport_rows_through_the_real_binary() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let expired = d.expired_session("ep1");
    let unknown = "ef".repeat(32);
    let mcp_headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    let ping = br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    // MCP: plain-text 401s, before any transport check.
    for (t, text) in [
        (
            None,
            "session credential is absent: send Authorization: Bearer <session-credential>",
        ),
        (
            Some("not-a-token"),
            "malformed Authorization header: expected Bearer <64-hex-credential>",
        ),
        (Some(unknown.as_str()), "unknown session credential"),
        (Some(expired.as_str()), "session credential has expired"),
    ] {
        let a = request(
            "POST",
            &d.url("/mcp/"),
            t,
            &[("Content-Type", "text/plain")],
            Some(ping),
        );
        assert_eq!((a.status, a.text().as_str()), (401, text));
    }
    // A2A: JSON-RPC errors in HTTP 200.
    let a2a_body = br#"{"jsonrpc":"2.0","id":9,"method":"tasks/send","params":{}}"#;
    for (t, code, text) in [
        (
            None,
            -32001,
            "session credential is absent: send Authorization: Bearer <session-credential>",
        ),
        (
            Some("not-a-token"),
            -32600,
            "malformed Authorization header: expected Bearer <64-hex-credential>",
        ),
        (Some(unknown.as_str()), -32001, "unknown session credential"),
        (
            Some(expired.as_str()),
            -32001,
            "session credential has expired",
        ),
    ] {
        let a = request(
            "POST",
            &d.url("/a2a/"),
            t,
            &[("Content-Type", "application/json")],
            Some(a2a_body),
        );
        assert_eq!(a.status, 200);
        // The body is never read for an unauthorized caller, so its id is unknown.
        assert_eq!(
            a.json(),
            json!({"jsonrpc":"2.0","id":null,"error":{"code":code,"message":text}})
        );
    }
    // The agent card and the REST routes: the REST envelope, and every 401 with its challenge
    // (they had none, which RFC 9110 requires of a 401).
    for (t, status, class, challenge) in [
        (None, 401, "SessionAbsent", Some(r#"Bearer realm="worldd""#)),
        (Some("not-a-token"), 400, "InvalidSession", None),
        (
            Some(unknown.as_str()),
            401,
            "SessionUnknown",
            Some(
                r#"Bearer realm="worldd", error="invalid_token", error_description="unknown session credential""#,
            ),
        ),
        (
            Some(expired.as_str()),
            401,
            "SessionExpired",
            Some(
                r#"Bearer realm="worldd", error="invalid_token", error_description="session credential has expired""#,
            ),
        ),
    ] {
        for route in ["/.well-known/agent.json", "/v1/head"] {
            let a = get(&d.url(route), t);
            assert_eq!(
                (
                    a.status,
                    a.json()["error"]["class"].as_str().unwrap(),
                    a.field("www-authenticate")
                ),
                (status, class, challenge),
                "{route}"
            );
        }
    }
    // MCP header rules, notifications and batches.
    let a = request(
        "POST",
        &d.url("/mcp/"),
        Some(&token),
        &[("Content-Type", "text/plain")],
        Some(ping),
    );
    assert_eq!(
        (a.status, a.text().as_str()),
        (400, "Content-Type must be application/json")
    );
    let a = request(
        "POST",
        &d.url("/mcp/"),
        Some(&token),
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json"),
        ],
        Some(ping),
    );
    assert_eq!(
        (a.status, a.text().as_str()),
        (
            400,
            "Accept must list both application/json and text/event-stream"
        )
    );
    let mut with_version = mcp_headers.to_vec();
    with_version.push(("MCP-Protocol-Version", "1999-01-01"));
    let a = request(
        "POST",
        &d.url("/mcp/"),
        Some(&token),
        &with_version,
        Some(ping),
    );
    assert_eq!(a.status, 400);
    assert!(
        a.text()
            .starts_with("unsupported MCP-Protocol-Version \"1999-01-01\""),
        "{}",
        a.text()
    );
    let a = request(
        "POST",
        &d.url("/mcp/"),
        Some(&token),
        &mcp_headers,
        Some(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
    );
    assert_eq!((a.status, a.body.len()), (202, 0));
    let batch =
        br#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]"#;
    let a = request(
        "POST",
        &d.url("/mcp/"),
        Some(&token),
        &mcp_headers,
        Some(batch),
    );
    assert_eq!(a.status, 200);
    assert_eq!(
        a.sse_json(),
        json!([{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","id":2,"result":{}}])
    );
    let mut newer = mcp_headers.to_vec();
    newer.push(("MCP-Protocol-Version", "2025-06-18"));
    let a = request("POST", &d.url("/mcp/"), Some(&token), &newer, Some(batch));
    assert_eq!(a.status, 400);
}

/// The scheduling policy of every thread of process `pid` (field 41 of each task's `stat`),
/// by thread name.
fn thread_policies(pid: u32) -> Vec<(String, i32)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let Ok(stat) = std::fs::read_to_string(task.unwrap().path().join("stat")) else {
            continue; // a thread that ended meanwhile
        };
        let (head, rest) = stat.rsplit_once(')').unwrap();
        let name = head.split_once('(').unwrap().1.to_owned();
        let policy = rest
            .split_whitespace()
            .nth(41 - 3)
            .unwrap()
            .parse()
            .unwrap();
        out.push((name, policy));
    }
    out
}

/// With `--scheduling batch` every thread of a serving daemon runs under `SCHED_BATCH` (3):
/// the runtime's, the store's writer and syncing threads, the blocking thread a call ran on.
/// The policy is set before any of them starts; one set later would leave the earlier threads
/// at 0. By default they keep the policy the daemon was started with (this test's, 0).
#[test]
fn a_serving_daemon_schedules_every_thread_as_batch_when_told_and_inherits_by_default() {
    for (flags, want) in [
        (&["--scheduling", "batch"][..], libc::SCHED_BATCH),
        (&[][..], 0),
    ] {
        let d = Daemon::start(WS, flags);
        let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
        std::fs::write(d.root().join("ep1/a.txt"), "alpha").unwrap();
        let a = read_over_mcp(&d, &token, "a.txt");
        assert_eq!(
            a.sse_json()["result"]["structuredContent"]["content"],
            "alpha"
        );
        let threads = thread_policies(d.child.id());
        let names: Vec<&str> = threads.iter().map(|(n, _)| n.as_str()).collect();
        for expected in ["worldd-store-wr", "worldd-store-sy", "tokio-rt-worker"] {
            assert!(
                names.contains(&expected),
                "{flags:?}: no {expected} in {names:?}"
            );
        }
        assert!(
            threads.iter().all(|(_, p)| *p == want),
            "{flags:?}: {threads:?}"
        );
        assert!(d.stop().success());
    }
}

/// An operator backs the store up while agents' writes are committed, without stopping the
/// daemon: the copy is one commit's state (it opens, `doctor` finds it consistent and `why`
/// verifies its head's chain), the plugins' state comes with it, and a daemon started on the
/// copy serves the credentials minted before it.
#[test]
fn a_backup_taken_while_writes_are_committed_restores_to_a_daemon_that_serves_and_verifies() {
    let d = Daemon::start(WS, &[]);
    let token = d.session(
        "ep1",
        &[
            "Workspace.Read=worktree:1000",
            "Workspace.Write=worktree:1000",
        ],
    );
    let state = d.db().join("plugin-state/example/deep");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("kept.json"), "{\"n\":1}").unwrap();
    std::os::unix::fs::symlink("kept.json", state.join("link")).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (url, token, stop) = (d.url("/mcp/"), token.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut acked = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let body = json!({"jsonrpc": "2.0", "id": acked, "method": "tools/call",
                    "params": {"name": "ailang-write", "arguments": {"path": format!("f{acked}.txt"), "content": "x"}}});
                let a = request(
                    "POST",
                    &url,
                    Some(&token),
                    &[
                        ("Content-Type", "application/json"),
                        ("Accept", "application/json, text/event-stream"),
                        ("MCP-Protocol-Version", "2025-11-25"),
                    ],
                    Some(&serde_json::to_vec(&body).unwrap()),
                );
                assert_eq!(a.sse_json()["result"]["structuredContent"]["ok"], true);
                acked += 1;
            }
            acked
        })
    };
    while d.log().matches("outcome=ok").count() < 20 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let backups = tempfile::tempdir().unwrap();
    let dest = backups.path().join("db");
    let (code, out, err) = worldd(
        &["backup", "--db", path_str(&d.db()), path_str(&dest)],
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let acked = writer.join().unwrap();
    assert!(acked >= 20, "{acked}");
    assert!(
        out.starts_with(&format!(
            "backup: {} -> {}\n  data.mdb: ",
            d.db().display(),
            dest.display()
        )),
        "{out}"
    );
    assert!(
        out.contains("\n  plugin-state: 1 file(s), 7 bytes\n"),
        "{out}"
    );
    let entries: u64 = out
        .split("\n  ✓ the copy opens and doctor's checks pass: ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        entries > 20 && entries <= acked + 3,
        "{entries} of {acked}: {out}"
    );
    assert_eq!(
        std::fs::read_to_string(dest.join("plugin-state/example/deep/kept.json")).unwrap(),
        "{\"n\":1}"
    );
    assert_eq!(
        std::fs::read_link(dest.join("plugin-state/example/deep/link")).unwrap(),
        std::path::Path::new("kept.json")
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dest), 0o700);
    assert_eq!(mode(&dest.join("data.mdb")), 0o600);
    d.stop();

    let (code, out, err) = worldd(&["doctor", "--db", path_str(&dest)], None);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = worldd(&["why", "--db", path_str(&dest), "head"], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("link(s) verified"), "{out}");
    let restored = Daemon::start_in(backups, WS, &[]);
    std::fs::create_dir_all(restored.root().join("ep1")).unwrap();
    std::fs::write(restored.root().join("ep1/a.txt"), "after").unwrap();
    let a = read_over_mcp(&restored, &token, "a.txt");
    assert_eq!(
        a.sse_json()["result"]["structuredContent"]["content"],
        "after",
        "{}",
        a.text()
    );
}

/// LMDB shares its locks and its map only between processes of one host: a store on a network
/// filesystem (two replicas of a service sharing a volume) could be written by two daemons at
/// once. `serve` refuses such a store before making anything, and so does every verb that opens
/// a store for writing; a backup may still be written onto a network share and checked there.
/// The kernel's answer is faked by a preloaded `statfs` (no NFS server here).
#[test]
fn a_store_on_a_network_filesystem_is_refused_and_a_backup_onto_one_is_taken() {
    let dir = tempfile::tempdir().unwrap();
    let shim = nfs_shim(dir.path());
    let nfs = dir.path().join("nfs");
    std::fs::create_dir(&nfs).unwrap();
    let plugins = plugin_dir_with(dir.path(), WS);
    let db = nfs.join("db");
    let out = run_to_exit(
        worldd_on_nfs(&shim, &nfs)
            .args(["serve", "--bind", "127.0.0.1:0", "--db"])
            .arg(&db)
            .arg("--workspace-root")
            .arg(dir.path().join("wt"))
            .arg("--plugin-dir")
            .arg(&plugins),
        std::time::Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        format!(
            "worldd: daemon startup failed at store-open: world store {} lies on a network filesystem (nfs): LMDB shares its locks and its map only between processes of one host, so a process on another host could write the store at the same time and corrupt it; put the store on a local disk (to read a copy where it is, mount it read-only)",
            db.display()
        )
    );
    assert!(!db.exists(), "nothing is made on the share");

    // A store on a local disk, backed up onto the share: the copy is written and checked there.
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let v = a2a(
        &d,
        &token,
        "w1",
        "ailang-write",
        json!({"path": "a.txt", "content": "x"}),
    );
    assert_eq!(v["result"]["status"]["state"], "completed", "{v}");
    let dest = nfs.join("backup");
    let out = run_to_exit(
        worldd_on_nfs(&shim, &nfs)
            .arg("backup")
            .arg("--db")
            .arg(d.db())
            .arg(&dest),
        std::time::Duration::from_secs(60),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("✓ the copy opens and doctor's checks pass"),
        "{stdout}"
    );
    // The copy on the share is refused to a verb that would open it for writing; the store
    // off the share opens as before under the same preload.
    let session_list = |db: &std::path::Path| {
        let out = run_to_exit(
            worldd_on_nfs(&shim, &nfs)
                .args(["session", "list", "--db"])
                .arg(db),
            std::time::Duration::from_secs(30),
        );
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), stderr)
    };
    let (code, stderr) = session_list(&dest);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("lies on a network filesystem (nfs)"),
        "{stderr}"
    );
    let (code, stderr) = session_list(&d.db());
    assert_eq!(code, Some(0), "{stderr}");
}

/// A backup never writes over anything, nor into the store it copies; one that fails midway
/// (its disk fills) says so and leaves nothing that could pass for a backup.
#[test]
fn a_backup_refuses_an_occupied_destination_and_leaves_nothing_when_its_disk_fills() {
    let d = Daemon::start(WS, &[]);
    let dir = tempfile::tempdir().unwrap();
    let occupied = dir.path().join("occupied");
    std::fs::create_dir(&occupied).unwrap();
    std::fs::write(occupied.join("mine"), "keep").unwrap();
    let db = path_str(&d.db()).to_owned();
    let (code, out, err) = worldd(&["backup", "--db", &db, path_str(&occupied)], None);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert_eq!(
        err,
        format!(
            "worldd: backup: destination {} exists and is not an empty directory; refusing to write over it\n",
            occupied.display()
        )
    );
    assert_eq!(
        std::fs::read_to_string(occupied.join("mine")).unwrap(),
        "keep"
    );
    let a_file = dir.path().join("a-file");
    std::fs::write(&a_file, "keep").unwrap();
    let (code, _, err) = worldd(&["backup", "--db", &db, path_str(&a_file)], None);
    assert_eq!(code, 1, "{err}");
    assert_eq!(std::fs::read_to_string(&a_file).unwrap(), "keep");
    let inside = d.db().join("copy");
    let (code, _, err) = worldd(&["backup", "--db", &db, path_str(&inside)], None);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(" is inside the store ") && !d.db().join("copy").exists(),
        "{err}"
    );

    // Half the data file's size: its copy cannot fit (the file is a few pages: how many
    // depends on how full the store's writes leave its pages).
    let data = std::fs::metadata(d.db().join("data.mdb")).unwrap().len();
    let Some(fs) = Tmpfs::mount((data / 2).max(8 << 10)) else {
        eprintln!("*** not root: a backup onto a full disk is not tried ***");
        return;
    };
    // A tmpfs is made open to all (1777), which a destination may not be.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(fs.dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    for dest in [fs.dir.path().join("new"), fs.dir.path().to_path_buf()] {
        let (code, out, err) = worldd(&["backup", "--db", &db, path_str(&dest)], None);
        assert_eq!((code, out.as_str()), (2, ""), "{err}");
        assert!(
            err.starts_with(&format!(
                "worldd: backup: copying the store into {}: disk full: the destination's filesystem has no space left (",
                dest.display()
            )) && err.ends_with(&format!("; nothing was left in {}\n", dest.display())),
            "{err}"
        );
        assert_eq!(
            std::fs::read_dir(fs.dir.path()).unwrap().count(),
            0,
            "{err}"
        );
    }
}

/// Two daemons started in one directory on different stores shared `.world/worktrees`: each
/// wrote the same episodes' worktrees and recorded only its own calls. The second is refused
/// before it makes its store or takes a port, and starts once the first has stopped.
#[test]
fn a_second_daemon_on_another_store_is_refused_the_workspace_root_the_first_serves() {
    let first = Daemon::start(WS, &[]);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let root = path_str(&first.root()).to_owned();
    let args = ["--db", path_str(&db), "--workspace-root", &root];
    let refusal = refused_start(&args, dir.path());
    assert_eq!(refusal.code, Some(2), "{}", refusal.stderr);
    assert_eq!(
        refusal.line,
        format!("worldd: daemon startup failed at config: another worldd already serves the workspace root {root} (one daemon per workspace root: each records only its own calls to a worktree); give this daemon its own --workspace-root")
    );
    assert!(!db.exists());
    assert!(first.stop().success());
    let cmd = Daemon::serve_command_on(&dir, WS, "127.0.0.1:0", std::path::Path::new(&root));
    let second = Daemon::spawn(dir, cmd);
    assert_eq!(get(&second.url("/v1/health"), None).status, 200);
}

/// The systemd unit the operator guide gives starts the daemon as written (its paths moved to a
/// scratch directory), and the daemon tells the manager `NOTIFY_SOCKET` names that it is ready
/// once it answers, and that it is stopping when SIGTERM comes, as `Type=notify` needs. A
/// SIGHUP (an operator's reload habit, logrotate) drained it and exited 0, which the unit's
/// `Restart=on-failure` never restarts: under a manager it is now logged and ignored.
#[test]
fn the_systemd_units_daemon_tells_its_manager_when_it_is_ready_and_when_it_stops() {
    let unit = std::fs::read_to_string(repo_root().join("docs/worldd.service")).unwrap();
    let service = |key: &str| {
        unit.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("the unit has no {key}="))
            .to_owned()
    };
    assert_eq!(service("Type"), "notify");
    assert_eq!(service("NotifyAccess"), "main");
    // A refused start (exit 2) is not retried until the start limit.
    assert_eq!(service("RestartPreventExitStatus"), "2");
    let exec = service("ExecStart");
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("lib");
    let plugins = plugin_dir_with(dir.path(), WS);
    // /etc/worldd/world.toml as the unit's comment says to install it, moved likewise.
    let config = dir.path().join("world.toml");
    std::fs::write(
        &config,
        format!(
            "[serve]\ndb = \"{0}/db\"\nworkspace_root = \"{0}/worktrees\"\nbind = \"127.0.0.1:0\"\n",
            lib.display()
        ),
    )
    .unwrap();
    assert_eq!(
        exec,
        "/opt/worldd/worldd serve --config /etc/worldd/world.toml"
    );
    let line = exec
        .replace("/opt/worldd/worldd ", &format!("{WORLDD} "))
        .replace("/etc/worldd/world.toml", path_str(&config));
    let mut words = line.split(' ');
    let mut cmd = std::process::Command::new(words.next().unwrap());
    cmd.args(words)
        .arg("--plugin-dir")
        .arg(&plugins)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let manager = std::os::unix::net::UnixDatagram::bind(dir.path().join("notify")).unwrap();
    manager
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    cmd.env("NOTIFY_SOCKET", dir.path().join("notify"));
    // SIGHUP caught by default, as systemd starts a service, whatever this test was started
    // with (a suite run under `nohup` ignores SIGHUP in every process it starts, and a daemon
    // started so keeps it ignored, saying nothing).
    // SAFETY: signal(2) is async-signal-safe, as pre_exec requires.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_DFL);
            Ok(())
        });
    }
    let d = Daemon::spawn(dir, cmd);
    let mut notice = [0u8; 64];
    let n = manager.recv(&mut notice).unwrap();
    assert_eq!(&notice[..n], b"READY=1");
    assert_eq!(get(&d.url("/v1/health"), None).status, 200);
    assert!(lib.join("db/data.mdb").is_file() && lib.join("worktrees").is_dir());
    d.signal(libc::SIGHUP);
    d.wait_for_log("SIGHUP ignored: a service manager runs this daemon, so there is no terminal to lose; stop it with SIGTERM (systemctl stop)");
    assert_eq!(
        get(&d.url("/v1/health"), None).status,
        200,
        "SIGHUP stopped it"
    );
    let (status, log) = d.stop_by(libc::SIGTERM, std::time::Duration::from_secs(10));
    assert!(status.success(), "{status:?}\n{log}");
    let n = manager.recv(&mut notice).unwrap();
    assert_eq!(&notice[..n], b"STOPPING=1");
    assert!(!log.contains("could not tell the service manager"), "{log}");
}

/// A store on a read-only filesystem (a snapshot, a backup medium) is checked where it is:
/// `doctor`, `why --db`, `session list` and `backup` read it without its lock file, and change
/// nothing; a verb that writes is refused naming the cause, and so is `serve`.
#[test]
fn a_store_on_a_read_only_mount_is_read_where_it_is_and_written_by_nothing() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let w = mcp(
        &d,
        &token,
        "tools/call",
        json!({"name": "ailang-write", "arguments": {"path": "a.txt", "content": "kept"}}),
    );
    assert_eq!(w.sse_json()["result"]["structuredContent"]["ok"], true);
    let (status, _, _, dir) = d.stop_with_log(std::time::Duration::from_secs(10));
    assert!(status.success());
    let db = dir.path().join("db");
    let mount_point = tempfile::tempdir().unwrap();
    let Some(_mount) = BindMount::read_only(&db, mount_point.path()) else {
        eprintln!("*** not root: a store on a read-only mount is not tried ***");
        return;
    };
    let ro = path_str(mount_point.path());
    let before = std::fs::read(db.join("data.mdb")).unwrap();

    let (code, out, err) = worldd(&["doctor", "--db", ro], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(" 0 broken ") && out.contains("✓ head"),
        "{out}"
    );
    let (code, out, err) = worldd(&["why", "--db", ro, "head"], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("link(s) verified"), "{out}");
    let (code, out, err) = worldd(&["session", "list", "--db", ro], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("ep1"), "{out}");
    let copy = dir.path().join("copy");
    let (code, out, err) = worldd(&["backup", "--db", ro, path_str(&copy)], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("✓ the copy opens and doctor's checks pass"),
        "{out}"
    );

    let (code, _, err) = worldd(&["session", "revoke", "--db", ro, "--episode", "ep1"], None);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("{ro}: Read-only file system (os error 30): worldd opens a store for reading and writing")),
        "{err}"
    );
    let refusal = refused_start(&["--db", ro, "--bind", "127.0.0.1:0"], dir.path());
    assert_eq!(refusal.code, Some(2), "{}", refusal.stderr);
    assert!(
        refusal.line.contains("Read-only file system (os error 30)"),
        "{}",
        refusal.line
    );
    assert_eq!(std::fs::read(db.join("data.mdb")).unwrap(), before);
}

/// A backup killed midway (Ctrl-C, a lost terminal, the OOM killer) leaves its partial copy
/// apart, and no `data.mdb`: nothing opens it as a store or restores it by mistake, and the next
/// backup into it says what it is.
#[test]
fn a_backup_killed_midway_leaves_no_store_where_it_was_writing() {
    let d = Daemon::start(WS, &[]);
    // Plugin state that takes a while to copy: a sparse file of 4 GiB, read as zeros.
    let state = d.db().join("plugin-state/bulky");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::File::create(state.join("sparse"))
        .unwrap()
        .set_len(4 << 30)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("copy");
    let mut backup = std::process::Command::new(WORLDD)
        .args(["backup", "--db", path_str(&d.db()), path_str(&dest)])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let copying = dest.join(".partial/plugin-state/bulky/sparse");
    let started = std::time::Instant::now();
    while !copying.exists() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "the backup never reached the plugins' state"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    backup.kill().unwrap();
    let status = backup.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    if status.signal() != Some(libc::SIGKILL) {
        // A filesystem that copies by reference copies the file at once.
        eprintln!("*** the backup finished before it was killed ({status:?}): not tried ***");
        return;
    }
    // Nothing goes on copying: the verb dies with the process that was killed.
    let still_copying = || {
        std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            std::fs::read(e.path().join("cmdline")).is_ok_and(|c| {
                c.split(|b| *b == 0)
                    .any(|a| a == dest.as_os_str().as_encoded_bytes())
            })
        })
    };
    let started = std::time::Instant::now();
    while still_copying() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "the backup went on after its worldd was killed"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(dest.join(".partial/data.mdb").is_file());
    assert!(!dest.join("data.mdb").exists());
    let (code, _, err) = worldd(&["doctor", "--db", path_str(&dest)], None);
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        err,
        format!(
            "worldd: {} holds no store, only the unfinished copy of a backup that was interrupted ({}); run the backup again (worldd backup says what it finds there), or remove the directory\n",
            dest.display(),
            dest.join(".partial").display()
        )
    );
    let (code, _, err) = worldd(
        &["backup", "--db", path_str(&d.db()), path_str(&dest)],
        None,
    );
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        err,
        format!("worldd: backup: destination {} holds an interrupted backup (its .partial directory, and no store); remove the directory, then back up again\n", dest.display())
    );
    // `serve` made a new, empty world beside the partial copy: an operator restoring from this
    // directory got an empty store, with nothing said. It is refused now, and makes nothing.
    let root = dir.path().join("worktrees");
    let (code, _, err) = worldd(
        &[
            "serve",
            "--db",
            path_str(&dest),
            "--workspace-root",
            path_str(&root),
            "--bind",
            "127.0.0.1:0",
        ],
        None,
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "daemon startup failed at store-open: {} holds no store, only the unfinished copy of a backup that was interrupted ({}): serve makes no new store beside it; run the backup again, or remove the directory, or give another --db",
            dest.display(),
            dest.join(".partial").display()
        )),
        "{err}"
    );
    assert!(!dest.join("data.mdb").exists());
}

/// `POST path` on the real daemon with `fields` written as they are (so that the HTTP parser
/// of the daemon, not a client library, reads them).
fn raw_post(d: &Daemon, path: &str, token: &str, fields: &str, body: &str) -> Answer {
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\n{fields}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        d.addr,
        body.len()
    );
    raw_exchange(&d.addr, request.as_bytes())
}

#[test]
fn an_a2a_version_with_trailing_text_is_version_not_supported_through_the_real_binary() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let send_message = |id: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":"r2","method":"SendMessage","params":{{"message":{{"messageId":"{id}","role":"ROLE_USER","parts":[{{"data":{{"path":"{id}.txt","content":"x"}}}}],"metadata":{{"skillId":"ailang-write"}}}},"configuration":{{}}}}}}"#
        )
    };
    for (field, asked) in [
        ("A2A-Version: 1.0abc\r\n", "1.0abc"),
        ("A2A-Version: 1.0 \t beta\r\n", "1.0 \t beta"),
        ("A2A-Version: 1\r\n", "1"),
        ("A2A-Version: 1.2\r\n", "1.2"),
    ] {
        let a = raw_post(&d, "/a2a/", &token, field, &send_message("m-1"));
        assert_eq!(
            a.json(),
            json!({"jsonrpc": "2.0", "id": "r2", "error": {"code": -32009, "message": format!(
                "A2A version {} is not supported by SendMessage; send A2A-Version: 1.0 (or use message/send for 0.3)",
                json!(asked)
            ), "data": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                         "reason": "VERSION_NOT_SUPPORTED", "domain": "a2a-protocol.org",
                         "metadata": {"requested": asked, "supported": "1.0, 0.3"}}]}}),
            "{field:?}"
        );
    }
    assert!(!d.root().join("ep1/m-1.txt").exists());
    // The whitespace around the value is not part of it.
    let a = raw_post(
        &d,
        "/a2a/",
        &token,
        "A2A-Version: \t 1.0  \r\n",
        &send_message("m-2"),
    );
    assert_eq!(
        a.json()["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{}",
        a.text()
    );
    assert!(d.root().join("ep1/m-2.txt").is_file());
}

#[test]
fn an_mcp_initialize_without_params_is_invalid_params_through_the_real_binary() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let a = raw_post(
        &d,
        "/mcp/",
        &token,
        "Accept: application/json, text/event-stream\r\n",
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#,
    );
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(
        a.text(),
        "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32602,\"message\":\"invalid params: initialize params must be an object with \\\"protocolVersion\\\", \\\"capabilities\\\" and \\\"clientInfo\\\"\"}}\n\n"
    );
    assert_eq!(a.field("mcp-session-id"), None);
}

/// One key, raced by calls with other arguments: the loser that arrived while the winner was
/// planning (its mark taken, its first row not yet written) was told `in-flight` ("do not
/// resend yet: reconcile"), and reconciling then said `committed`, so it took the winner's
/// write for its own. The running call's tool and input are now kept beside its mark, and every
/// loser is told its key was used with other arguments, run after run.
#[test]
fn racing_resends_of_one_key_with_other_arguments_are_conflicts_not_in_flight() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("race", &["Workspace.Write=worktree:100"]);
    for round in 0..3 {
        let task = format!("race-{round}");
        let answers: Vec<serde_json::Value> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|i| {
                    let (d, token, task) = (&d, &token, &task);
                    s.spawn(move || {
                        let body = json!({
                            "jsonrpc": "2.0", "id": i, "method": "message/send",
                            "params": {"message": {"role": "user", "messageId": format!("m{i}"),
                                "taskId": task, "metadata": {"skill_id": "ailang-write"},
                                "parts": [{"kind": "data", "data": {"path": "r.txt", "content": format!("c{i}")}}]}}
                        });
                        let a = post_json(&d.url("/a2a/"), Some(token), &body);
                        assert_eq!(a.status, 200, "{}", a.text());
                        a.json()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let won: Vec<_> = answers
            .iter()
            .filter(|a| a.get("result").is_some())
            .collect();
        assert_eq!(won.len(), 1, "round {round}: {answers:#?}");
        for a in answers.iter().filter(|a| a.get("error").is_some()) {
            assert_eq!(
                (&a["error"]["code"], &a["error"]["data"]["reason"]),
                (&json!(-32602), &json!("key-conflict")),
                "round {round}: {a}"
            );
        }
    }
}

/// A call of an episode whose worktree does not exist was logged as `host callback failed:
/// transition declares an effect this daemon has no handler for`, though the handler was
/// loaded: the operator reading the log looked for a missing plugin. The log line now names
/// the missing worktree, and the agent's envelope is unchanged (the contract's fixed text).
#[test]
fn a_call_refused_for_a_missing_worktree_is_logged_as_that_not_as_a_missing_handler() {
    let d = Daemon::start(WS, &[]);
    let token = d.session_without_worktree("nowhere", &["Workspace.Read=worktree:5"]);
    let a = mcp(
        &d,
        &token,
        "tools/call",
        json!({"name": "ailang-read", "arguments": {"path": "a.txt"}}),
    );
    let v = if a.content_type.starts_with("text/event-stream") {
        a.sse_json()
    } else {
        a.json()
    };
    assert_eq!(v["error"]["message"], "host callback failed", "{v}");
    d.wait_for_log("mcp tools/call: host callback failed: episode nowhere's worktree does not exist: an operator creates it (the directory nowhere in the workspace root;");
    d.wait_for_log("outcome=no_handler");
}
