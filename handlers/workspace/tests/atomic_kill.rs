//! Atomic writes under SIGKILL: a child process (this test binary, re-run
//! with an environment variable) rewrites one large file in a loop; the
//! parent kills it at random moments. The file must always hold one complete
//! version, never a prefix or a mix.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use handler_kit::serde_json::json;
use handler_kit::{EffectHandler, Host, Outcome, Plugin, Request};
use worldd_workspace::WorkspacePlugin;

const CHILD_ENV: &str = "WORLDD_WORKSPACE_ATOMIC_CHILD";
const TARGET: &str = "big/file.txt";

fn version_a() -> String {
    "a".repeat(3 << 20)
}

fn version_b() -> String {
    "b".repeat(5 << 20)
}

fn write_request(worktree: &Path, content: &str) -> Request {
    Request {
        invocation_id: "inv".into(),
        episode: "ep".into(),
        worktree: Some(worktree.to_string_lossy().into_owned()),
        effect: "Workspace.Write".into(),
        scope: "worktree".into(),
        cost: 1,
        payload: json!({"op": "write", "path": TARGET, "content": content}),
        deadline_ms: 0,
    }
}

/// The child: runs only when re-executed by the parent test below.
#[test]
fn atomic_child_writer() {
    let Some(worktree) = std::env::var_os(CHILD_ENV).map(PathBuf::from) else {
        return; // Not the child: nothing to do.
    };
    let handler = WorkspacePlugin::new(json!({}), Host::noop()).unwrap();
    let (a, b) = (version_a(), version_b());
    fs::write(worktree.with_extension("started"), b"1").unwrap();
    loop {
        for content in [&b, &a] {
            match handler.execute(write_request(&worktree, content)) {
                Outcome::Ok { output } if output["ok"] == json!(true) => {}
                other => panic!("child write failed: {other:?}"),
            }
        }
    }
}

fn pseudo_random_millis(bound: u64) -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64;
    (nanos / 1000) % bound
}

#[test]
fn a_killed_writer_never_leaves_a_partial_file() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return; // The child runs only the writer.
    }
    let tmp = tempfile::tempdir().unwrap();
    let worktree = tmp.path().join("wt");
    fs::create_dir_all(worktree.join("big")).unwrap();
    let (a, b) = (version_a(), version_b());
    fs::write(worktree.join(TARGET), &a).unwrap();
    let marker = worktree.with_extension("started");
    let exe = std::env::current_exe().unwrap();
    let (mut saw_a, mut saw_b) = (0, 0);
    for round in 0..10 {
        let _ = fs::remove_file(&marker);
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "atomic_child_writer",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &worktree)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while !marker.exists() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the child never started"
            );
            if let Some(status) = child.try_wait().unwrap() {
                panic!("the child exited early: {status}");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(5 + pseudo_random_millis(120)));
        if let Some(status) = child.try_wait().unwrap() {
            panic!("round {round}: the child exited on its own: {status}");
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let content = fs::read(worktree.join(TARGET)).unwrap();
        if content == a.as_bytes() {
            saw_a += 1;
        } else if content == b.as_bytes() {
            saw_b += 1;
        } else {
            panic!(
                "round {round}: partial file: {} bytes, starting {:?}",
                content.len(),
                String::from_utf8_lossy(&content[..content.len().min(16)])
            );
        }
    }
    let leftovers = fs::read_dir(worktree.join("big")).unwrap().count() - 1;
    eprintln!("atomic: {saw_a} x version a, {saw_b} x version b, {leftovers} orphaned temp files");
    // The next write in that directory sweeps the dead children's temp files.
    let handler = WorkspacePlugin::new(json!({}), Host::noop()).unwrap();
    assert!(matches!(
        handler.execute(write_request(&worktree, "done")),
        Outcome::Ok { .. }
    ));
    let names: Vec<_> = fs::read_dir(worktree.join("big"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("file.txt")]);
    assert_eq!(fs::read_to_string(worktree.join(TARGET)).unwrap(), "done");
}
