//! The live log through the real `worldd` binary: `GET /v1/log/stream` over real HTTP, the
//! daemon's shutdown with streams open, and `worldd log tail [--follow]`.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::process::{Command, Stdio};

use common::*;
use serde_json::{json, Value};

const WS: &[&str] = &["worldd_workspace"];

fn write_private(path: &std::path::Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

fn read_file(d: &Daemon, token: &str, path: &str) {
    let a = mcp(
        d,
        token,
        "tools/call",
        json!({"name": "ailang-read", "arguments": {"path": path}}),
    );
    assert_eq!(a.status, 200, "{}", a.text());
}

#[test]
fn sigterm_ends_open_log_streams_and_the_daemon_exits() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    std::fs::write(d.root().join("ep1/a.txt"), "a").unwrap();
    let mut conn = TcpStream::connect(&d.addr).unwrap();
    write!(
        conn,
        "GET /v1/log/stream?from=0 HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n\r\n",
        d.addr
    )
    .unwrap();
    let rx = lines_of(conn.try_clone().unwrap());
    assert_eq!(next_line(&rx, "status line"), "HTTP/1.1 200 OK");
    // The genesis arrives, then a call's entry, live.
    loop {
        if next_line(&rx, "genesis").starts_with("id: 0 sha256:") {
            break;
        }
    }
    read_file(&d, &token, "a.txt");
    loop {
        if next_line(&rx, "entry 1").starts_with("id: 1 sha256:") {
            break;
        }
    }
    // An open stream must not keep the daemon from draining.
    let status = d.stop();
    assert!(status.success(), "{status:?}");
    // The stream ended cleanly: the chunked body's last chunk, then end of file.
    let rest: Vec<String> = rx.iter().collect();
    assert_eq!(
        rest.iter()
            .rev()
            .find(|l| !l.is_empty())
            .map(String::as_str),
        Some("0"),
        "{rest:?}"
    );
}

#[test]
fn log_tail_prints_the_newest_entries_and_follows_new_ones() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    std::fs::write(d.root().join("ep1/a.txt"), "a").unwrap();
    let session_file = d.dir.path().join("session");
    write_private(&session_file, &token);
    let addr = d.url("");
    read_file(&d, &token, "a.txt");
    read_file(&d, &token, "/etc/passwd");

    let (code, out, err) = worldd(
        &[
            "log",
            "tail",
            "-n",
            "2",
            "--addr",
            &addr,
            "--session",
            path_str(&session_file),
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[0].trim_start().starts_with("1  ok"), "{out}");
    assert!(
        lines[0].contains("ailang-read") && lines[0].contains("ep1"),
        "{out}"
    );
    assert!(lines[1].trim_start().starts_with("2  refused"), "{out}");

    let mut child = Command::new(WORLDD)
        .args([
            "log",
            "tail",
            "--follow",
            "--json",
            "-n",
            "1",
            "--addr",
            &addr,
            "--session",
            path_str(&session_file),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = lines_of(child.stdout.take().unwrap());
    let first: Value = serde_json::from_str(&next_line(&rx, "the newest entry")).unwrap();
    assert_eq!(first["header"]["entryIndex"], 2);
    assert_eq!(first["outcome"], "refused");
    assert_eq!(first["reason"], "plan");
    read_file(&d, &token, "a.txt");
    let live: Value = serde_json::from_str(&next_line(&rx, "the new entry")).unwrap();
    assert_eq!(live["header"]["entryIndex"], 3);
    assert_eq!(live["tool"], "ailang-read");
    assert_eq!(live["outcome"], "ok");
    assert!(live["worldRef"].as_str().unwrap().starts_with("sha256:"));
    let _ = child.kill();
    let _ = child.wait();
}

/// Attack (a busy daemon, as every long-running one is): `log tail -n N` scanned only the
/// newest N log positions and printed the entries among them this session may see, so once
/// other episodes had committed N entries since the agent's, it printed nothing, exit 0, and
/// `worldd call` sends an agent there to see whether its write committed before retrying it.
/// It now reads back, 500 positions a page, until it has N of the agent's entries or reaches
/// entry 0.
#[test]
fn log_tail_finds_the_agents_newest_entries_behind_other_episodes_entries() {
    // Refusals unmetered: the other episode's entries are plan refusals, quick to make.
    let d = Daemon::start(WS, &["--refusals-per-minute", "0"]);
    let mine = d.session("mine", &["Workspace.Read=worktree:5"]);
    let theirs = d.session("theirs", &["Workspace.Read=worktree:5"]);
    std::fs::write(d.root().join("mine/a.txt"), "a").unwrap();
    let session_file = d.dir.path().join("session");
    write_private(&session_file, &mine);
    let addr = d.url("");
    read_file(&d, &mine, "a.txt");
    read_file(&d, &mine, "/etc/passwd");
    // More than a page of another episode's entries after them (plan refusals: quick).
    for _ in 0..520 {
        read_file(&d, &theirs, "/etc/passwd");
    }
    let head = get(&d.url("/v1/log/summaries?limit=1"), Some(&theirs)).json();
    assert_eq!(head["head"], 522, "{head}");
    let tail = |n: &str| {
        let (code, out, err) = worldd(
            &[
                "log",
                "tail",
                "-n",
                n,
                "--addr",
                &addr,
                "--session",
                path_str(&session_file),
            ],
            None,
        );
        assert_eq!(code, 0, "{err}");
        out
    };
    let out = tail("2");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[0].trim_start().starts_with("1  ok"), "{out}");
    assert!(lines[1].trim_start().starts_with("2  refused"), "{out}");
    assert!(lines.iter().all(|l| l.contains("mine")), "{out}");
    // Asked for more than there are: all of them (and entry 0, the genesis, everyone's).
    let out = tail("10");
    assert_eq!(out.lines().count(), 3, "{out}");
    assert!(out.lines().next().unwrap().contains("genesis"), "{out}");
}

#[test]
fn log_tail_follow_reports_a_revoked_credential_and_exits_1() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let session_file = d.dir.path().join("session");
    write_private(&session_file, &token);
    let mut child = Command::new(WORLDD)
        .args([
            "log",
            "tail",
            "-f",
            "--addr",
            &d.url(""),
            "--session",
            path_str(&session_file),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = lines_of(child.stdout.take().unwrap());
    assert!(next_line(&rx, "the genesis").contains("genesis"));
    // An entry that can only come through the stream: the stream is open.
    read_file(&d, &token, "x.txt");
    assert!(next_line(&rx, "entry 1").trim_start().starts_with("1 "));
    let store = broker_core::store::Store::open(&d.db(), Default::default()).unwrap();
    broker_core::session::revoke(&store, &broker_core::session::credential_id(&token)).unwrap();
    drop(store);
    // The revocation is another process's commit: the daemon's stream learns of it at its
    // next commit.
    let other = d.session("ep2", &["Workspace.Read=worktree:5"]);
    read_file(&d, &other, "x.txt");
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "worldd: the log stream ended: SessionUnknown: unknown session credential"
    );
}

/// Open `GET /v1/log/stream` (only new entries) with `token`; the status line and the lines
/// that follow.
fn open_stream(d: &Daemon, token: &str) -> (String, std::sync::mpsc::Receiver<String>) {
    let mut conn = TcpStream::connect(&d.addr).unwrap();
    write!(
        conn,
        "GET /v1/log/stream HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n\r\n",
        d.addr
    )
    .unwrap();
    let rx = lines_of(conn);
    let status = next_line(&rx, "status line");
    (status, rx)
}

/// The `data:` line of the stream's `error` event (nothing else is committed meanwhile),
/// within 30 s: keep-alive comments alone do not keep the test waiting.
fn error_event_of(rx: &std::sync::mpsc::Receiver<String>) -> Value {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        assert!(
            std::time::Instant::now() < until,
            "no error event within 30 s: the stream outlived its credential"
        );
        if next_line(rx, "the error event") == "event: error" {
            let data = next_line(rx, "its data");
            return serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
        }
    }
}

/// A stream whose credential expired, or was revoked by `worldd session revoke` (another
/// process: no commit this daemon sees), stayed open on a quiet daemon, holding its episode's
/// places, until something else was committed. Now it ends with its error event at the
/// expiry, or at the next recheck after the revocation, and its place is free.
#[test]
fn a_quiet_stream_ends_when_its_credential_expires_or_is_revoked_elsewhere_and_frees_its_place() {
    let conf = tempfile::tempdir().unwrap();
    let path = conf.path().join("world.toml");
    std::fs::write(&path, "[server]\nlog_streams_per_episode = 1\n").unwrap();
    let d = Daemon::start(WS, &["--config", path_str(&path)]);
    let short_lived = {
        let store = broker_core::store::Store::open(&d.db(), Default::default()).unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let grants = vec!["Workspace.Read=worktree:1".parse().unwrap()];
        broker_core::session::mint(&store, "quiet", grants, 2, now)
            .unwrap()
            .token
    };
    let other = d.session("quiet", &["Workspace.Read=worktree:1"]);
    let (status, expiring) = open_stream(&d, &short_lived);
    assert_eq!(status, "HTTP/1.1 200 OK");
    // The episode's one place is taken.
    let (status, _) = open_stream(&d, &other);
    assert_eq!(status, "HTTP/1.1 503 Service Unavailable");
    assert_eq!(
        error_event_of(&expiring),
        json!({"error": {"class": "SessionExpired", "message": "session credential has expired"}})
    );
    // Its place is free again.
    let (status, revoked) = open_stream(&d, &other);
    assert_eq!(status, "HTTP/1.1 200 OK");
    d.revoke_by_cli(&other);
    assert_eq!(
        error_event_of(&revoked),
        json!({"error": {"class": "SessionUnknown", "message": "unknown session credential"}})
    );
}

/// The stream's next `id:` line within 30 s (keep-alive comments do not keep the test waiting
/// longer), which must be entry `index`'s.
fn id_line(rx: &std::sync::mpsc::Receiver<String>, index: u64) -> String {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let left = until.saturating_duration_since(std::time::Instant::now());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|e| panic!("no event for entry {index} within 30 s: {e}"));
        if line.starts_with("id:") {
            assert!(
                line == format!("id: {index}") || line.starts_with(&format!("id: {index} ")),
                "{line}"
            );
            return line;
        }
    }
}

/// Every line until the stream ends, which it must within 30 s.
fn lines_until_the_end(rx: &std::sync::mpsc::Receiver<String>) -> Vec<String> {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut lines = Vec::new();
    loop {
        let left = until.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            // The chunked body's last chunk: the stream has ended.
            Ok(line) if line == "0" => {
                lines.push(line);
                return lines;
            }
            Ok(line) => lines.push(line),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return lines,
            Err(e) => panic!("the stream did not end within 30 s ({e}): {lines:?}"),
        }
    }
}

/// `GET /v1/log/stream` with `Last-Event-ID: last_event_id`; the lines that follow the status
/// line, which is checked.
fn resume_stream(
    d: &Daemon,
    token: &str,
    last_event_id: &str,
) -> std::sync::mpsc::Receiver<String> {
    let mut conn = TcpStream::connect(&d.addr).unwrap();
    write!(
        conn,
        "GET /v1/log/stream HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nLast-Event-ID: {last_event_id}\r\n\r\n",
        d.addr
    )
    .unwrap();
    let rx = lines_of(conn);
    assert_eq!(next_line(&rx, "status line"), "HTTP/1.1 200 OK");
    rx
}

/// A store restored from a backup (as operators.md says: stop, put the copy at `--db`, start)
/// reuses the indexes of the entries made after the backup for new ones. A stream client that
/// resumes with the id it last saw (index and entry hash) is told `rewound` and the stream
/// ends, instead of being sent on from an index whose entries it never saw; `worldd log tail
/// -f`, following across the restore, says so and exits 1.
#[test]
fn a_stream_resumed_across_a_restore_from_backup_is_told_the_log_was_rewound() {
    let d = Daemon::start(WS, &[]);
    let addr = d.addr.clone();
    let token = d.session("ep1", &["Workspace.Read=worktree:20"]);
    let session_file = d.dir.path().join("session");
    write_private(&session_file, &token);
    read_file(&d, &token, "a.txt"); // 1
    let backup = d.dir.path().join("backup");
    let (code, _, err) = worldd(
        &["backup", "--db", path_str(&d.db()), path_str(&backup)],
        None,
    );
    assert_eq!(code, 0, "{err}");

    let mut tail = Command::new(WORLDD)
        .args([
            "log",
            "tail",
            "-f",
            "--json",
            "-n",
            "1",
            "--addr",
            &d.url(""),
            "--session",
            path_str(&session_file),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let tailed = lines_of(tail.stdout.take().unwrap());
    let first: Value = serde_json::from_str(&next_line(&tailed, "entry 1")).unwrap();
    assert_eq!(first["header"]["entryIndex"], 1);

    let rx = resume_stream(&d, &token, "1");
    for name in ["gone-2.txt", "gone-3.txt", "gone-4.txt"] {
        read_file(&d, &token, name);
    }
    for i in 2..4 {
        id_line(&rx, i);
    }
    let seen = id_line(&rx, 4);
    let seen = seen
        .strip_prefix("id: 4 ")
        .expect("an id names index and hash")
        .to_owned();
    for i in 2..=4 {
        let v: Value = serde_json::from_str(&next_line(&tailed, "a live entry")).unwrap();
        assert_eq!(v["header"]["entryIndex"], i);
    }

    // Stopped, restored as the operator's guide says, started again on the same address.
    let dir = d.halt();
    drop(rx);
    std::fs::remove_dir_all(dir.path().join("db")).unwrap();
    std::fs::rename(&backup, dir.path().join("db")).unwrap();
    let _ = std::fs::remove_dir_all(dir.path().join("plugins"));
    let free = (0..200).any(|_| {
        std::net::TcpListener::bind(&addr).is_ok() || {
            std::thread::sleep(std::time::Duration::from_millis(25));
            false
        }
    });
    assert!(free, "{addr} never came free");
    let root = dir.path().join("worktrees");
    let cmd = Daemon::serve_command_on(&dir, WS, &addr, &root);
    let d = Daemon::spawn(dir, cmd);
    for name in ["new-2.txt", "new-3.txt", "new-4.txt"] {
        read_file(&d, &token, name);
    }
    let now = get(&d.url("/v1/log/4"), Some(&token)).json()["entryHash"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(now, seen);

    // Resumed with the id it last saw: told, and the stream ends.
    let rx = resume_stream(&d, &token, &format!("4 {seen}"));
    let lines = lines_until_the_end(&rx);
    let events: Vec<&String> = lines
        .iter()
        .filter(|l| l.starts_with("event:") || l.starts_with("data:") || l.starts_with("id:"))
        .collect();
    let message = format!(
        "entry 4 is no longer the one this client saw ({seen}): entry 4 is now {now}; the log \
         was rolled back (a restore from a backup?), so entries this client saw may no longer \
         exist and new ones may stand at their indexes; re-read the log from an index you trust"
    );
    let data = json!({"entryIndex": 4, "seen": seen, "now": now, "head": 4, "message": message});
    assert_eq!(
        events,
        [&"event: rewound".to_owned(), &format!("data: {data}")],
        "{lines:?}"
    );
    assert_eq!(
        lines
            .iter()
            .rev()
            .find(|l| !l.is_empty())
            .map(String::as_str),
        Some("0"),
        "the stream ended: {lines:?}"
    );
    // A bare index still resumes after it, unchecked: the next entry, not a rewind.
    let rx = resume_stream(&d, &token, "3");
    assert_eq!(id_line(&rx, 4), format!("id: 4 {now}"));

    // The tail that followed across the restore says so and exits 1 (whether it came back
    // before the new entries or after them: either way entry 4 is not the one it printed).
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while tail.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > until {
            let _ = tail.kill();
            panic!("log tail -f did not end within 30 s of the restore");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = tail.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let said = format!(
        "worldd: the log stream ended: entry 4 is no longer the one this client saw ({seen}): "
    );
    assert!(err.trim().starts_with(&said), "{err}");
    assert!(
        err.trim().ends_with(
            "the log was rolled back (a restore from a backup?), so entries this client saw may \
             no longer exist and new ones may stand at their indexes; re-read the log from an \
             index you trust"
        ),
        "{err}"
    );
    let printed: Vec<String> = tailed.iter().collect();
    assert!(
        printed.is_empty(),
        "nothing of the new log was printed: {printed:?}"
    );
}
