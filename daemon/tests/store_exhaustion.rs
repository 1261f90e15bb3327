//! No session can fill the store, through the real binary: a denial flood in one MCP batch
//! and a store-fill attempt both end in the capacity error, other episodes and the operator's
//! verbs keep working, the store warns on the way, and a full disk reads "disk full".

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const WS: &[&str] = &["worldd_workspace"];
const CAPACITY: &str = "host callback capacity exceeded";
const STORE_FULL: &str =
    "the world store is full; new calls are refused until an operator makes room";

fn revision(d: &Daemon, token: &str) -> u64 {
    let head = get(&d.url("/v1/head"), Some(token)).text();
    get(&d.url(&format!("/v1/worlds/{head}")), Some(token)).json()["revision"]
        .as_u64()
        .unwrap()
}

/// The value of one metrics line (`name` includes any labels).
fn metric(d: &Daemon, name: &str) -> f64 {
    let text = get(&d.url("/v1/metrics"), None).text();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{name} missing from {text}"))
        .parse()
        .unwrap()
}

/// `status` of `GET /v1/health`: a daemon that refused every new call for room said `ok`, so
/// monitoring that polls only health saw nothing wrong.
fn health_status(d: &Daemon) -> String {
    let v: Value = serde_json::from_str(&get(&d.url("/v1/health"), None).text()).unwrap();
    v["status"].as_str().unwrap().to_owned()
}

fn mcp_call(d: &Daemon, token: &str, tool: &str, args: Value) -> Answer {
    mcp(
        d,
        token,
        "tools/call",
        json!({"name": tool, "arguments": args}),
    )
}

#[test]
fn a_denial_flood_in_one_mcp_batch_ends_in_the_capacity_error_and_other_episodes_go_on() {
    // A burst of 5 and practically no refill: the test's outcome cannot depend on its speed.
    let d = Daemon::start(
        WS,
        &["--refusal-burst", "5", "--refusals-per-minute", "0.0001"],
    );
    let flood = d.session("ep-flood", &["Workspace.Read=worktree:0"]);
    let other = d.session("ep-ok", &["Workspace.Read=worktree:5"]);
    let before = revision(&d, &other);
    // Within the batch limit (64 items), far over the burst.
    let batch: Vec<Value> = (0..60)
        .map(|i| {
            json!({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                   "params": {"name": "ailang-read", "arguments": {"path": format!("f{i}")}}})
        })
        .collect();
    let answer = request(
        "POST",
        &d.url("/mcp/"),
        Some(&flood),
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2025-03-26"),
        ],
        Some(&serde_json::to_vec(&batch).unwrap()),
    );
    assert_eq!(
        (answer.status, answer.json()),
        (
            200,
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32603, "message": CAPACITY}})
        )
    );
    // Exactly the burst was committed, every one a budget denial; nothing after it.
    assert_eq!(revision(&d, &other), before + 5);
    for i in before + 1..=before + 5 {
        let e = get(&d.url(&format!("/v1/log/{i}")), Some(&flood));
        assert_eq!(e.status, 200);
    }
    // The same credential over A2A, and a plan refusal: the same error, nothing committed.
    let v = a2a(&d, &flood, "t1", "ailang-read", json!({"path": "x"}));
    assert_eq!(v["error"], json!({"code": -32603, "message": CAPACITY}));
    let v = mcp_call(&d, &flood, "ailang-read", json!({"path": "x", "limit": 1}));
    assert_eq!(
        v.json(),
        json!({"jsonrpc": "2.0", "id": 7, "error": {"code": -32603, "message": CAPACITY}})
    );
    // Where the error carries a classification (MCP 2026-07-28), it is the refusal rate's own,
    // not retryable: the same call can only be refused or denied again. (It said `capacity`,
    // `retryable: true`, which told an agent to resend blindly what had no chance.)
    let v = modern_tools_call(&d, &flood, 8, "ailang-read", json!({"path": "x"}));
    assert_eq!(
        (v.status, v.json()),
        (
            500,
            json!({"jsonrpc": "2.0", "id": 8, "error": {"code": -32603, "message": CAPACITY,
                   "data": {"kind": "refused", "reason": "refusal-rate", "retryable": false}}})
        )
    );
    assert_eq!(revision(&d, &other), before + 5);
    // Another episode is served as before.
    let ok = mcp_call(&d, &other, "ailang-read", json!({"path": "y"})).sse_json();
    assert_eq!(
        ok["result"]["structuredContent"]["world"]["effects"][0]["status"],
        "ok"
    );
    assert_eq!(revision(&d, &other), before + 6);
    assert_eq!(
        metric(
            &d,
            "worldd_calls_total{tool=\"ailang-read\",outcome=\"refusal_rate\"}"
        ),
        4.0
    );
    assert_eq!(
        metric(
            &d,
            "worldd_calls_total{tool=\"ailang-read\",outcome=\"denied\"}"
        ),
        5.0
    );
}

/// A refused call stores the caller's arguments whole, and refusals spend no budget: at one
/// token of the refusal rate a refusal, one session sending 1 MB of arguments to a tool that
/// refuses them grew the store by 60 MB a minute, until it was full and every episode was
/// refused. A refusal now takes a token for each started 16 KiB it stores.
#[test]
fn megabyte_arguments_to_a_tool_that_refuses_them_cannot_fill_the_store_at_the_refusal_rate() {
    let d = Daemon::start(WS, &[]);
    let flood = d.session("ep-flood", &["Workspace.Read=worktree:5"]);
    let other = d.session("ep-ok", &["Workspace.Read=worktree:5"]);
    let data = d.db().join("data.mdb");
    let stored = || std::fs::metadata(&data).unwrap().len();
    let before = (stored(), revision(&d, &other));
    // Ten different megabytes (the same one would be stored once; arguments may hold 1 MiB):
    // the first is committed as a refusal from the credential's full bucket of 60 tokens, for
    // 62 of them; the rest find the bucket in debt.
    let mut answers = Vec::new();
    for i in 0..10 {
        let pad = format!("{i}{}", "y".repeat(1_000_000));
        let a = mcp_call(&d, &flood, "ailang-read", json!({"path": "x", "pad": pad}));
        answers.push(a);
    }
    let refused = answers[0].sse_json();
    assert_eq!(refused["result"]["structuredContent"]["ok"], false);
    assert!(refused["result"]["structuredContent"]["refused"]
        .as_str()
        .unwrap()
        .starts_with("unknown argument \"pad\""));
    for a in &answers[1..] {
        assert_eq!(
            a.json()["error"],
            json!({"code": -32603, "message": CAPACITY})
        );
    }
    // A small refusal of the same credential waits for the debt too, over A2A as well.
    let small = mcp_call(&d, &flood, "ailang-read", json!({"path": "x", "limit": 1}));
    assert_eq!(
        small.json()["error"],
        json!({"code": -32603, "message": CAPACITY})
    );
    let v = a2a(
        &d,
        &flood,
        "t1",
        "ailang-read",
        json!({"path": "x", "limit": 1}),
    );
    assert_eq!(v["error"], json!({"code": -32603, "message": CAPACITY}));
    assert_eq!(revision(&d, &other), before.1 + 1);
    let grown = stored() - before.0;
    assert!(
        (1_000_000..3_000_000).contains(&grown),
        "one megabyte refusal stored, not ten: the store grew by {grown} bytes"
    );
    assert_eq!(
        metric(
            &d,
            "worldd_calls_total{tool=\"ailang-read\",outcome=\"refusal_rate\"}"
        ),
        11.0
    );
    // Counted every one, but logged once: the caller paid nothing for them, and one line each
    // let a client write the operator's log as fast as it could send (66 KB/s from one loop).
    // The call's line is logged before its answer, and read by the harness's thread after it
    // may be: waited for, then counted with every line written so far read.
    d.wait_for_log("outcome=refusal_rate");
    let log = d.log_so_far();
    let turned_away = log
        .lines()
        .filter(|l| l.contains("outcome=refusal_rate"))
        .count();
    assert_eq!(turned_away, 1, "{log}");
    // Another credential's refusals, and its calls, go on.
    let theirs = mcp_call(&d, &other, "ailang-read", json!({"path": "x", "limit": 1})).sse_json();
    assert_eq!(theirs["result"]["structuredContent"]["ok"], false);
    let ok = mcp_call(&d, &other, "ailang-read", json!({"path": "y"})).sse_json();
    assert_eq!(
        ok["result"]["structuredContent"]["world"]["effects"][0]["status"],
        "ok"
    );
}

/// When the store fills up, the operator's first question is whose calls filled it:
/// `worldd usage` names the episode whose own objects are the largest first, beside a running
/// daemon, and counts an object two episodes made as held by both and owned by neither.
#[test]
fn worldd_usage_names_the_episode_that_filled_the_store_first() {
    let d = Daemon::start(WS, &[]);
    let hoarder = d.session(
        "hoarder",
        &["Workspace.Write=worktree:10", "Workspace.Read=worktree:5"],
    );
    let quiet = d.session("quiet", &["Workspace.Read=worktree:5"]);
    for i in 0..4 {
        let content = format!("{i}{}", "h".repeat(300_000));
        let v = mcp_call(
            &d,
            &hoarder,
            "ailang-write",
            json!({"path": format!("big-{i}.txt"), "content": content}),
        )
        .sse_json();
        assert_eq!(v["result"]["structuredContent"]["ok"], true, "{v}");
    }
    // The same arguments from both, answered the same: objects held by both, owned by neither.
    for token in [&hoarder, &quiet] {
        mcp_call(&d, token, "ailang-read", json!({"path": "absent.txt"})).sse_json();
    }
    let db = d.db();
    let (code, out, err) = worldd(&["usage", "--db", path_str(&db), "--json"], None);
    assert_eq!(code, 0, "{err}");
    let usage: Value = serde_json::from_str(&out).unwrap();
    let episodes = usage["episodes"].as_array().unwrap();
    let names: Vec<&str> = episodes
        .iter()
        .map(|e| e["episode"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["hoarder", "quiet"], "{out}");
    let calls: Vec<u64> = episodes
        .iter()
        .map(|e| e["calls"].as_u64().unwrap())
        .collect();
    assert_eq!(calls, [5, 1], "four writes and a read, one read: {out}");
    let n = |e: &Value, k: &str| e[k].as_u64().unwrap();
    // Each write stores its content in its input, its plan and its request.
    assert!(n(&episodes[0], "ownBytes") > 3 * 4 * 300_000, "{out}");
    assert!(n(&episodes[1], "ownBytes") < 20_000, "{out}");
    assert!(
        n(&episodes[1], "bytes") > n(&episodes[1], "ownBytes"),
        "{out}"
    );
    // The same read refused the same way: its input, plan, request, result and record.
    assert!(
        n(&episodes[1], "objects") > n(&episodes[1], "ownObjects"),
        "{out}"
    );
    assert!(n(&usage, "usedBytes") > n(&episodes[0], "bytes"), "{out}");
    assert_eq!(n(&usage, "ceilingBytes"), 16 << 30, "{out}");
    let (code, text, err) = worldd(&["usage", "--db", path_str(&db)], None);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].ends_with("used of its 16.0 GiB ceiling (0.0 %)"),
        "{text}"
    );
    assert!(lines[1].starts_with("episode  calls  objects"), "{text}");
    assert!(
        lines[2].starts_with("hoarder") && lines[2].ends_with(" MiB"),
        "{text}"
    );
    assert!(lines[3].starts_with("quiet  "), "{text}");
    assert!(lines[4].starts_with("2 episode(s) hold "), "{text}");
}

#[test]
fn a_store_fill_attempt_ends_in_the_capacity_error_while_the_operators_verbs_still_work() {
    let ceiling = 16u64 << 20;
    let d = Daemon::start(
        WS,
        &[
            "--store-ceiling",
            &ceiling.to_string(),
            "--store-reserve",
            "524288",
        ],
    );
    let filler = d.session("ep-fill", &["Workspace.Write=worktree:1000"]);
    let other = d.session("ep-other", &["Workspace.Read=worktree:5"]);
    assert_eq!(metric(&d, "worldd_store_ceiling_bytes"), ceiling as f64);
    assert_eq!(metric(&d, "worldd_store_reserve_bytes"), 524288.0);
    assert_eq!(metric(&d, "worldd_store_warning{threshold=\"80\"}"), 0.0);

    // Each write stores its 60 kB content three times (input, plan, request): about 1.5 % of
    // the ceiling a call, so the 80-95 % band cannot be jumped over, and the reserve holds
    // more than one call (a reserve smaller than a call could let the call admitted last
    // reach the ceiling itself).
    let content = "x".repeat(60_000);
    let mut seen = Vec::new();
    let refused = (0..100).find_map(|i| {
        let a = mcp_call(
            &d,
            &filler,
            "ailang-write",
            json!({"path": format!("f{i}.txt"), "content": content}),
        );
        if a.content_type.starts_with("text/event-stream") {
            assert_eq!(
                a.sse_json()["result"]["structuredContent"]["ok"],
                true,
                "call {i}"
            );
            seen.push((
                metric(&d, "worldd_store_warning{threshold=\"80\"}"),
                metric(&d, "worldd_store_warning{threshold=\"95\"}"),
                metric(&d, "worldd_store_refusing"),
            ));
            None
        } else {
            Some(a.json())
        }
    });
    assert_eq!(
        refused,
        Some(json!({"jsonrpc": "2.0", "id": 7, "error": {"code": -32603, "message": CAPACITY}}))
    );
    assert!(seen.contains(&(0.0, 0.0, 0.0)), "{seen:?}");
    assert!(seen.contains(&(1.0, 0.0, 0.0)), "{seen:?}");
    assert_eq!(seen.last(), Some(&(1.0, 1.0, 1.0)), "{seen:?}");
    assert!(metric(&d, "worldd_store_used_ratio") > 0.95);

    // Every episode's new work is refused, before anything is written or spent.
    let head = revision(&d, &other);
    let v = a2a(&d, &other, "t1", "ailang-read", json!({"path": "a"}));
    assert_eq!(v["error"]["code"], -32603);
    assert_eq!(v["error"]["message"], STORE_FULL);
    let budget = get(&d.url("/v1/budget"), Some(&other)).json();
    assert_eq!(budget["grants"][0]["spent"], 0);
    assert_eq!(revision(&d, &other), head);
    let operator = d.operator_session("ops", &["World.Commit=log:5"]);
    let commit = post_json(&d.url("/v1/commit"), Some(&operator), &json!({}));
    assert_eq!(
        (commit.status, commit.json()),
        (
            507,
            json!({"error": {"class": "StoreFull", "message": STORE_FULL}})
        )
    );
    // Reads are served.
    let own = get(&d.url("/v1/log?from=0"), Some(&filler)).json();
    assert_eq!(own["next"].as_u64(), Some(head + 1));

    // The operator's verbs still work.
    let (code, out, err) = worldd(&["doctor", "--db", path_str(&d.db())], None);
    assert_eq!(code, 0, "{out}{err}");
    let (code, shown) = mint_at_terminal(
        &d.db(),
        "--episode ep-later --grant Workspace.Read=worktree:1",
    );
    assert_eq!(code, 0, "{shown}");
    let (code, _, err) = worldd(
        &[
            "session",
            "revoke",
            "--db",
            path_str(&d.db()),
            "--episode",
            "ep-fill",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(get(&d.url("/v1/head"), Some(&filler)).status, 401);

    // The log said so, once per threshold crossed.
    let (dir, log) = d.halt_with_log();
    let lines = |needle: &str| log.lines().filter(|l| l.contains(needle)).count();
    assert_eq!(lines("(warning threshold 80%)"), 1, "{log}");
    assert_eq!(
        lines("store full: new client calls are refused"),
        1,
        "{log}"
    );

    // A larger ceiling takes calls again.
    let d = Daemon::start_in(dir, WS, &["--store-ceiling", &(64u64 << 20).to_string()]);
    let v = a2a(&d, &other, "t2", "ailang-read", json!({"path": "a"}));
    assert!(v["result"].is_object(), "{v}");
    assert_eq!(metric(&d, "worldd_store_refusing"), 0.0);
}

/// A daemon whose store directory lies on `fs` (its worktrees do not), with a ceiling of 1 GiB,
/// far above the disk, and `extra` arguments.
fn with_store_on(fs: &Tmpfs, extra: &[&str]) -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(fs.dir.path().join("db")).unwrap();
    std::os::unix::fs::symlink(fs.dir.path().join("db"), dir.path().join("db")).unwrap();
    let ceiling = (1u64 << 30).to_string();
    let args = [&["--store-ceiling", ceiling.as_str()], extra].concat();
    Daemon::start_in(dir, WS, &args)
}

#[test]
fn a_full_disk_reads_disk_full_in_the_daemons_log() {
    let Some(fs) = Tmpfs::mount(6 << 20) else {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    };
    // No reserve and a ceiling far above the disk: the filesystem is what runs out.
    let d = with_store_on(&fs, &["--store-reserve", "0"]);
    let filler = d.session("ep-fill", &["Workspace.Write=worktree:1000"]);
    let content = "x".repeat(200_000);
    let error = (0..100)
        .find_map(|i| {
            let v = a2a(
                &d,
                &filler,
                &format!("t{i}"),
                "ailang-write",
                json!({"path": format!("f{i}.txt"), "content": content}),
            );
            v.get("error").cloned()
        })
        .expect("a 6 MiB disk fills up");
    // Before the effect: the store-full text; after it: the effect is reported unrecorded.
    let message = error["message"].as_str().unwrap();
    assert!(
        message == STORE_FULL
            || message.starts_with(
                "effects were requested but the invocation was not confirmed committed"
            ),
        "{error}"
    );
    let (_dir, log) = d.halt_with_log();
    assert!(
        log.contains("disk full: the store's filesystem has no space left ("),
        "{log}"
    );
    assert!(!log.contains("store I/O error"), "{log}");
}

/// A disk that fills up while the daemon makes its store (its lock file, LMDB's meta pages, the tables, the
/// first sync) or publishes the shipped tools into it stops the start with "disk full" at
/// whichever stage it stopped, never a bare I/O error: LMDB reports a write that stopped short
/// as EIO, which the store took for "disk full" only in its writer's commits. A store made on
/// a 16 KiB disk was refused with `store I/O error: Input/output error (os error 5)`.
#[test]
fn a_disk_that_fills_while_the_store_is_made_says_disk_full_wherever_it_stops() {
    let plugins = tempfile::tempdir().unwrap();
    let plugins = plugin_dir_with(plugins.path(), WS);
    let mut stages = std::collections::BTreeSet::new();
    let mut wrong = Vec::new();
    // The lock file takes its 68 KiB first (allocated before LMDB maps it); the store's pages
    // and then the shipped tools need about 28 and 28 KiB more: a disk of 128 KiB starts (the
    // log's and journal's appended rows fill their pages, and a registry revision lists its
    // tools by ref).
    for kib in (8..=120).step_by(8) {
        let Some(fs) = Tmpfs::mount(kib << 10) else {
            eprintln!("skipped: mounting a tmpfs needs root");
            return;
        };
        let on = |p: &str| fs.dir.path().join(p).display().to_string();
        let refusal = refused_start(
            &[
                "--db",
                &on("db"),
                "--workspace-root",
                &on("wt"),
                "--bind",
                "127.0.0.1:0",
                "--plugin-dir",
                path_str(&plugins),
            ],
            fs.dir.path(),
        );
        let last = refusal.line.as_str();
        let stage = ["store-open", "registry-bootstrap"].into_iter().find(|stage| {
            last.starts_with(&format!(
                "worldd: daemon startup failed at {stage}: disk full: the store's filesystem has no space left ("
            ))
        });
        match stage {
            Some(stage) if refusal.code == Some(2) => {
                stages.insert(stage);
            }
            _ => wrong.push(format!(
                "{kib} KiB: exit {:?}: {}",
                refusal.code,
                refusal.stderr.trim_end()
            )),
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert_eq!(
        stages.into_iter().collect::<Vec<_>>(),
        ["registry-bootstrap", "store-open"],
        "disks of 8 to 120 KiB stop the start at both stages"
    );
}

#[test]
fn a_disk_with_less_room_than_the_reserve_refuses_new_calls_before_it_fills() {
    let Some(fs) = Tmpfs::mount(6 << 20) else {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    };
    // The default reserve of a 1 GiB ceiling is 128 MiB: more than this disk holds.
    let d = with_store_on(&fs, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let before = revision(&d, &token);
    let v = a2a(&d, &token, "t", "ailang-read", json!({"path": "a"}));
    assert_eq!(v["error"]["message"], STORE_FULL, "{v}");
    assert_eq!(revision(&d, &token), before);
    assert_eq!(metric(&d, "worldd_store_refusing"), 1.0);
    assert_eq!(health_status(&d), "store-full");
    assert!(metric(&d, "worldd_store_disk_free_bytes") < (6 << 20) as f64);
    let (_dir, log) = d.halt_with_log();
    assert!(
        log.contains("store full: new client calls are refused: the store's filesystem has "),
        "{log}"
    );
}

/// Bytes free on the filesystem holding `path`.
fn free_bytes(path: &std::path::Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path and an out-struct statvfs fills.
    let st = unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        assert_eq!(libc::statvfs(c.as_ptr(), &mut st), 0);
        st
    };
    st.f_bavail as u64 * st.f_frsize as u64
}

/// A daemon that refused calls because its disk was short learned of the disk only from its
/// own commits, and makes none while it refuses: after the operator freed space it went on
/// refusing every call (25 to 47 s in a probe, until another process happened to write to the
/// store). It now reads the disk again while it refuses, and takes calls once there is room.
#[test]
fn a_daemon_refusing_for_a_full_disk_takes_calls_again_once_space_is_freed() {
    let Some(fs) = Tmpfs::mount(8 << 20) else {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    };
    let d = with_store_on(&fs, &["--store-reserve", "1MiB"]);
    let token = d.session("ep1", &["Workspace.Read=worktree:50"]);
    std::fs::write(d.root().join("ep1/a.txt"), "a").unwrap();
    let read = |task: &str| a2a(&d, &token, task, "ailang-read", json!({"path": "a.txt"}));
    // Fill the disk to half a MiB of free space, under the reserve.
    let filler = fs.dir.path().join("filler");
    let room = free_bytes(fs.dir.path()).saturating_sub(512 << 10);
    std::fs::write(&filler, vec![0u8; room as usize]).unwrap();
    // A commit makes the daemon measure the disk; from then on it refuses.
    let refused = (0..5)
        .map(|i| read(&format!("r{i}")))
        .find(|v| v.get("error").is_some())
        .expect("a disk under the reserve refuses calls");
    assert_eq!(refused["error"]["message"], STORE_FULL, "{refused}");
    assert_eq!(metric(&d, "worldd_store_refusing"), 1.0);
    assert_eq!(health_status(&d), "store-full");
    // The operator frees space; nothing else writes to the store.
    std::fs::remove_file(&filler).unwrap();
    let taken = (0..50).find_map(|i| {
        std::thread::sleep(Duration::from_millis(100));
        let v = read(&format!("after{i}"));
        v.get("result").is_some().then_some(v)
    });
    assert!(
        taken.is_some(),
        "calls are still refused 5 s after space was freed"
    );
    assert_eq!(metric(&d, "worldd_store_refusing"), 0.0);
    assert_eq!(health_status(&d), "ok");
}

/// Fill the filesystem holding `dir` to its last byte.
fn fill_up(dir: &std::path::Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(dir.join("filler")).unwrap();
    let chunk = vec![0u8; 4096];
    while f.write_all(&chunk).is_ok() {}
    let _ = f.sync_all();
}

/// LMDB sizes its lock file without allocating it and writes its reader table through a map:
/// on a disk with no byte left, a daemon making a new store, or opening a copy whose lock file
/// was never written, died by SIGBUS without a word, and `doctor` called such a sound copy
/// damaged. The lock file is now allocated first: a full disk is said as one.
#[test]
fn a_store_opened_on_a_disk_with_no_byte_left_says_disk_full_instead_of_dying_by_sigbus() {
    let Some(fs) = Tmpfs::mount(1 << 20) else {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    };
    let plugins = tempfile::tempdir().unwrap();
    let plugins = plugin_dir_with(plugins.path(), WS);
    // A sound store, copied onto the small disk with a lock file that holds no blocks.
    let d = Daemon::start(WS, &[]);
    let sound = d.db();
    let kept = d.halt();
    let copy = fs.dir.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    std::fs::copy(sound.join("data.mdb"), copy.join("data.mdb")).unwrap();
    std::fs::File::create(copy.join("lock.mdb"))
        .unwrap()
        .set_len(65664)
        .unwrap();
    fill_up(fs.dir.path());
    let on = |p: &str| fs.dir.path().join(p).display().to_string();
    for db in ["new", "copy"] {
        let refusal = refused_start(
            &[
                "--db",
                &on(db),
                "--workspace-root",
                &on("wt"),
                "--bind",
                "127.0.0.1:0",
                "--plugin-dir",
                path_str(&plugins),
            ],
            fs.dir.path(),
        );
        assert_eq!(refusal.code, Some(2), "{db}: {}", refusal.stderr);
        assert!(
            refusal.line.starts_with(
                "worldd: daemon startup failed at store-open: disk full: the store's filesystem has no space left ("
            ),
            "{db}: {}",
            refusal.stderr
        );
    }
    let (code, _, err) = worldd(&["doctor", "--db", &on("copy")], None);
    assert!(!err.contains("store is damaged"), "{err}");
    assert!(err.contains("disk full"), "{err}");
    assert_eq!(code, 2, "{err}");
    drop(kept);
}

#[test]
fn limits_that_cannot_work_stop_startup_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let root = dir.path().join("wt");
    let serve = |extra: &[&str]| {
        let r = refused_serve_on(&db, &root, extra, dir.path());
        (r.code.unwrap_or(-1), r.stderr)
    };
    let (code, err) = serve(&["--store-ceiling", "1048576", "--store-reserve", "1048576"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("daemon startup failed at config: the store reserve (1048576 bytes) must be smaller than its ceiling (1048576 bytes)"), "{err}");
    let (code, err) = serve(&["--refusal-burst", "0"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("daemon startup failed at config: the refusal burst must be at least 1"),
        "{err}"
    );
    assert!(!db.join("data.mdb").exists());
    // The same keys in the config file.
    let config = dir.path().join("world.toml");
    std::fs::write(&config, "[serve]\nrefusals_per_minute = -1\n").unwrap();
    let (code, err) = serve(&["--config", path_str(&config)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("the refusal rate must be a finite number of refusals per minute, 0 or more (0 turns the limit off), not -1"), "{err}");
    // `map_size`, the old name of the ceiling, still reads.
    std::fs::write(
        &config,
        "[serve]\nmap_size = 1048576\nstore_reserve = 1048576\n",
    )
    .unwrap();
    let (code, err) = serve(&["--config", path_str(&config)]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("must be smaller than its ceiling (1048576 bytes)"),
        "{err}"
    );
}

/// The operator's verbs open a store with default limits, not the daemon's, and take no client
/// calls: on a disk smaller than the default reserve, `doctor` and `session list` printed
/// `ERROR store full: new client calls are refused: …` about a store that was fine.
#[test]
fn the_operators_verbs_on_a_small_disk_say_nothing_of_refusing_client_calls() {
    let Some(fs) = Tmpfs::mount(8 << 20) else {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    };
    let db = fs.dir.path().join("db");
    drop(broker_core::store::Store::create(&db).unwrap());
    for args in [
        vec!["doctor", "--db", path_str(&db)],
        vec!["session", "list", "--db", path_str(&db)],
    ] {
        let (code, _, err) = worldd(&args, None);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(!err.contains("store full"), "{args:?}: {err}");
        assert!(!err.contains("refused"), "{args:?}: {err}");
    }
}

/// A write to a worktree whose filesystem cannot take it (remounted read-only here; a full disk
/// or no inode left answer the same way at `openat`) was a policy refusal worded `write f.txt:
/// openat f.txt: read-only file system` (status ok, as if the agent had asked for something
/// not allowed). The filesystem is not the agent's to fix: it is a failed effect, said as what
/// it is, and nothing is left behind.
#[test]
fn a_write_to_a_worktree_whose_filesystem_cannot_take_it_is_a_failed_effect_not_a_refusal() {
    let Some(fs) = Tmpfs::mount(1 << 20) else {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(fs.dir.path(), dir.path().join("worktrees")).unwrap();
    let d = Daemon::start_in(dir, WS, &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let remounted = std::process::Command::new("mount")
        .args(["-o", "remount,ro"])
        .arg(fs.dir.path())
        .status()
        .unwrap();
    assert!(remounted.success());
    let v = a2a(
        &d,
        &token,
        "w",
        "ailang-write",
        json!({"path": "f.txt", "content": "x"}),
    );
    let effect = &v["result"]["metadata"]["effects"][0];
    assert_eq!(effect["status"], "failed", "{v}");
    assert!(!v.to_string().contains("openat"), "{v}");
    assert!(!d.root().join("ep1/f.txt").exists());
    let (_dir, log) = d.halt_with_log();
    assert!(
        log.contains("workspace: write f.txt: read-only file system: the worktree's filesystem cannot take it; nothing was changed"),
        "{log}"
    );
}

/// One-shot verbs turned the store writer's whole log off to leave out the daemon's line for
/// failing writes (of calls answered as failed and of health): every other line of the writer
/// went with it. The writer now knows whether its process serves calls: `session mint` on a
/// full disk prints its own line about the disk, and nothing of calls or health.
#[test]
fn a_one_shot_verb_on_a_full_disk_still_prints_the_store_writers_lines_without_the_daemons_words() {
    let Some(fs) = Tmpfs::mount(4 << 20) else {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    };
    let db = fs.dir.path().join("db");
    drop(broker_core::store::Store::create(&db).unwrap());
    fill_up(fs.dir.path());
    // Pages freed by earlier commits may take a mint or two: the disk refuses one soon.
    // Colourless: the terminal would have the level coloured.
    let err = (0..20)
        .map(|i| {
            at_terminal(
                &format!(
                    "NO_COLOR=1 {WORLDD} session mint --db {} --episode ep{i} --grant Workspace.Read=worktree:1",
                    db.display()
                ),
                b"y\n",
            )
        })
        .find(|(code, _)| *code != 0)
        .map(|(code, err)| {
            assert_eq!(code, 2, "{err}");
            err
        })
        .expect("a full disk refuses a mint");
    assert!(
        err.contains(
            "WARN the store's writes fail (disk full: the store's filesystem has no space left ("
        ),
        "{err}"
    );
    assert!(
        err.contains("): check the disk (a full or thin-provisioned volume, a filesystem remounted read-only after an I/O error: see the kernel's log): make room, or copy the store off a disk turned read-only and check the copy with worldd doctor\r\n"),
        "{err}"
    );
    assert!(!err.contains("new calls are answered"), "{err}");
    assert!(!err.contains("health says"), "{err}");
}
