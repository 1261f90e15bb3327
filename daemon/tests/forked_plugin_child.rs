//! A child that plugin code forks without `exec` (`tests/fixtures/unruly-plugin`'s
//! `fork-and-linger`) kept the daemon's listening socket, its store's files and its directory
//! `flock`s past the daemon's end: the next daemon on the store was refused ("another worldd
//! already serves"), clients connected to the orphan and hung, and a plain `kill` of the
//! orphan did nothing (it had the daemon's SIGTERM handler). The daemon's fork handler puts
//! them over with `/dev/null` in the child and sets the shutdown signals back to default.

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::fixtures::{cargo_build, share_echo_lock};
use common::*;
use serde_json::json;

const WS: &[&str] = &["worldd_workspace"];

/// `tests/fixtures/unruly-plugin`, built once per test process.
fn unruly_library() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let crate_dir = repo_root().join("tests/fixtures/unruly-plugin");
        share_echo_lock(&crate_dir);
        cargo_build(&crate_dir.join("Cargo.toml"), "worldd_unruly")
    })
}

/// A forked child's pid, killed (SIGKILL) when the test ends, whatever happens in it.
struct Orphan(libc::pid_t);

impl Drop for Orphan {
    fn drop(&mut self) {
        // SAFETY: a plain kill(2) of the child the test made the daemon fork.
        unsafe { libc::kill(self.0, libc::SIGKILL) };
    }
}

impl Orphan {
    /// Still running: there, and not a zombie nobody reaps.
    fn running(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.0))
            .ok()
            .and_then(|stat| {
                let state = stat.rsplit_once(") ")?.1.chars().next()?;
                Some(state != 'Z' && state != 'X')
            })
            .unwrap_or(false)
    }
}

/// The inode of the socket listening on `port` (IPv4, /proc/net/tcp).
fn listening_inode(port: u16) -> String {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    table
        .lines()
        .skip(1)
        .find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local_port = fields[1].rsplit_once(':')?.1;
            (u16::from_str_radix(local_port, 16).ok()? == port && fields[3] == "0A")
                .then(|| fields[9].to_owned())
        })
        .unwrap_or_else(|| panic!("nothing listens on port {port}:\n{table}"))
}

/// What each descriptor of process `pid` names, and whether it holds a lock (its fdinfo's
/// `lock:` lines: a `flock` taken through that open file).
fn descriptors_of(pid: libc::pid_t) -> Vec<(String, String, bool)> {
    let mut held = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let Ok(target) = std::fs::read_link(format!("/proc/{pid}/fd/{name}")) else {
            continue;
        };
        let locked = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{name}"))
            .is_ok_and(|info| info.lines().any(|l| l.starts_with("lock:")));
        held.push((name, target.to_string_lossy().into_owned(), locked));
    }
    held
}

#[test]
fn a_forked_plugin_child_keeps_neither_the_store_nor_the_port_and_ends_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = Daemon::serve_command(&dir, WS);
    let plugins = dir.path().join("plugins");
    std::fs::copy(
        unruly_library(),
        plugins.join(unruly_library().file_name().unwrap()),
    )
    .unwrap();
    let mut d = Daemon::spawn(dir, cmd);
    let token = d.session("ep1", &["Unruly.Process=any:5"]);
    let result = tools_call(
        &d,
        &token,
        "unruly-process",
        json!({"what": "fork-and-linger"}),
    )["result"]
        .clone();
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(
        result["structuredContent"]["did"], "fork-and-linger",
        "{result}"
    );
    let orphan = Orphan(
        result["structuredContent"]["child"]
            .as_i64()
            .unwrap_or_else(|| panic!("no child pid: {result}")) as libc::pid_t,
    );
    assert!(orphan.running());

    // What the child holds: neither the listener, nor the store's files, nor a lock.
    let port: u16 = d.addr.rsplit_once(':').unwrap().1.parse().unwrap();
    let listener = format!("socket:[{}]", listening_inode(port));
    let db = std::fs::canonicalize(d.db()).unwrap();
    let db = db.to_string_lossy();
    let store_files = [
        db.to_string(),
        format!("{db}/data.mdb"),
        format!("{db}/lock.mdb"),
    ];
    // The daemon does hold them: the check below looks in the right places.
    let daemons = descriptors_of(d.child.id() as libc::pid_t);
    assert!(
        daemons.iter().any(|(_, t, _)| *t == listener),
        "{daemons:?}"
    );
    assert!(
        daemons.iter().any(|(_, t, _)| store_files.contains(t)),
        "{daemons:?}"
    );
    assert!(daemons.iter().any(|(_, _, locked)| *locked), "{daemons:?}");
    let childs = descriptors_of(orphan.0);
    let kept: Vec<_> = childs
        .iter()
        .filter(|(_, target, locked)| {
            *locked || *target == listener || store_files.contains(target)
        })
        .collect();
    assert!(
        kept.is_empty(),
        "the forked child keeps the daemon's {kept:?} (all: {childs:?})"
    );

    // The daemon drains and ends; the child lives on.
    d.signal(libc::SIGTERM);
    let until = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = d.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < until, "the daemon did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    assert!(orphan.running());
    // Its log is not waited for: the child holds the write end of its stderr too.
    let dir = std::mem::replace(&mut d.dir, tempfile::tempdir().unwrap());
    let addr = d.addr.clone();
    drop(d);

    // At once, on the same store and the same port: it starts and serves.
    let root = dir.path().join("worktrees");
    let cmd = Daemon::serve_command_on(&dir, WS, &addr, &root);
    let again = Daemon::spawn(dir, cmd);
    assert_eq!(again.addr, addr);
    let health = get(&again.url("/v1/health"), None);
    assert_eq!(health.status, 200, "{}", health.text());
    let token = again.session("ep2", &["Workspace.Read=worktree:5"]);
    std::fs::write(root.join("ep2/a.txt"), "hello\n").unwrap();
    let read =
        tools_call(&again, &token, "ailang-read", json!({"path": "a.txt"}))["result"].clone();
    assert_eq!(read["isError"], false, "{read}");
    assert_eq!(read["structuredContent"]["content"], "hello\n", "{read}");

    // A plain kill ends the orphan: SIGTERM is back to its default action in it.
    // SAFETY: a plain kill(2) of the child the daemon forked.
    unsafe { libc::kill(orphan.0, libc::SIGTERM) };
    let until = Instant::now() + Duration::from_secs(5);
    while orphan.running() {
        assert!(
            Instant::now() < until,
            "the forked child did not end on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(again);
}
