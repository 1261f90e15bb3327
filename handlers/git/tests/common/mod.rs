//! Real repositories in temp dirs, made with the `git` CLI, and a handler
//! built the way the daemon builds it.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use handler_kit::serde_json::{json, Value};
use handler_kit::{
    EffectHandler, Host, HostServices, JsonObject, LogLevel, Outcome, Plugin, Request,
};
use worldd_git::{GitHandler, GitPlugin};

pub const AUTHOR: &str = "World Test <world@example.invalid>";

/// `git <args>` in `dir` for test set-up (its own identity, no user config);
/// panics on failure, returns stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = git_raw(dir, args);
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn git_raw(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .args([
            "-c",
            "user.name=Setup Person",
            "-c",
            "user.email=setup@example.invalid",
            "-c",
            "init.defaultBranch=main",
            "-c",
            "protocol.file.allow=always",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("HOME", dir)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .output()
        .unwrap()
}

pub struct Fixture {
    pub tmp: tempfile::TempDir,
    pub handler: GitHandler,
}

impl Fixture {
    /// `repo/` with one commit (README.md) on `main`, pushed to the bare
    /// `remote.git` as `origin`.
    pub fn new() -> Fixture {
        Fixture::with_config(default_config)
    }

    /// [`Fixture::new`] whose handler's host keeps what it logs.
    pub fn logged() -> (Fixture, Arc<Log>) {
        let (log, host) = Log::host();
        (Fixture::build(default_config, host), log)
    }

    pub fn with_config(config: impl FnOnce(&str) -> Value) -> Fixture {
        Fixture::build(config, Host::noop())
    }

    fn build(config: impl FnOnce(&str) -> Value, host: Host) -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        fs::create_dir_all(&repo).unwrap();
        git(&repo, &["init", "-q"]);
        fs::write(repo.join("README.md"), "# hello\n").unwrap();
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "initial"]);
        let remote = tmp.path().join("remote.git");
        git(tmp.path(), &["init", "-q", "--bare", "remote.git"]);
        git(
            &repo,
            &["remote", "add", "origin", remote.to_str().unwrap()],
        );
        git(&repo, &["push", "-q", "origin", "main"]);
        let state = tmp.path().join("state");
        let handler =
            GitPlugin::new(config(state.to_str().unwrap()), host).unwrap_or_else(|e| panic!("{e}"));
        Fixture { tmp, handler }
    }

    pub fn repo(&self) -> PathBuf {
        self.tmp.path().join("repo")
    }

    pub fn remote(&self) -> PathBuf {
        self.tmp.path().join("remote.git")
    }

    pub fn put(&self, rel: &str, content: &str) {
        let p = self.repo().join(rel);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).unwrap();
        }
        fs::write(p, content).unwrap();
    }

    pub fn head(&self) -> String {
        git(&self.repo(), &["rev-parse", "HEAD"]).trim().to_string()
    }

    pub fn status(&self) -> String {
        git(&self.repo(), &["status", "--porcelain"])
    }

    /// `git worktree add -q HOW… <tmp>/name` on the fixture's repository (`how`: `-b BRANCH`
    /// or `--detach`), as `worldd session new --repo` makes one; its path.
    pub fn linked_worktree(&self, name: &str, how: &[&str]) -> PathBuf {
        let at = self.tmp.path().join(name);
        let args = [&["worktree", "add", "-q"][..], how, &[at.to_str().unwrap()]].concat();
        git(&self.repo(), &args);
        at
    }

    /// Execute a commit payload against `worktree`.
    pub fn run_in(&self, worktree: &Path, payload: Value) -> Outcome {
        self.handler.execute(request(worktree, payload))
    }

    pub fn run(&self, payload: Value) -> Outcome {
        self.run_in(&self.repo(), payload)
    }

    /// The output of an `ok` outcome (panics otherwise).
    pub fn commit(&self, payload: Value) -> JsonObject {
        match self.run(payload) {
            Outcome::Ok { output } => output,
            other => panic!("expected ok, got {other:?}"),
        }
    }
}

/// The fixture's handler config: its author, and `stateDir` at `state`.
fn default_config(state: &str) -> Value {
    json!({"author": AUTHOR, "stateDir": state})
}

/// A host that keeps every line a handler logs, for a test to read back.
pub struct Log(Mutex<Vec<String>>);

impl HostServices for Log {
    fn log(&self, _level: LogLevel, message: &str) {
        self.0.lock().unwrap().push(message.to_owned());
    }
}

impl Log {
    /// A kept log and the host that writes to it.
    pub fn host() -> (Arc<Log>, Host) {
        let log = Arc::new(Log(Mutex::default()));
        (log.clone(), Host::from_services(log))
    }

    /// What was logged so far.
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

pub fn request(worktree: &Path, payload: Value) -> Request {
    Request {
        invocation_id: "inv-1".into(),
        episode: "ep".into(),
        worktree: Some(worktree.to_string_lossy().into_owned()),
        effect: "Git.Commit".into(),
        scope: "worktree".into(),
        cost: 1,
        payload,
        deadline_ms: 10_000,
    }
}

/// The `refused` text of an ok:false output.
pub fn refused(out: &JsonObject) -> &str {
    assert_eq!(out["ok"], json!(false), "{out:?}");
    out["refused"].as_str().unwrap()
}

/// The message of a `failed` outcome.
pub fn failed(outcome: Outcome) -> String {
    match outcome {
        Outcome::Failed { message } => message,
        other => panic!("expected failed, got {other:?}"),
    }
}

pub fn ok_output(outcome: Outcome) -> JsonObject {
    match outcome {
        Outcome::Ok { output } => output,
        other => panic!("expected ok, got {other:?}"),
    }
}

pub fn is_hex_id(s: &str) -> bool {
    s.len() == 40
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `count` new files with 3,214-byte paths in `repo`: twelve 250-byte directory names, then a
/// 200-byte file name. Lists of them (`git status`, `--raw`) outgrow what the handler keeps.
pub fn deep_files(repo: &std::path::Path, count: usize) {
    let deep: std::path::PathBuf = (0..12).map(|i| format!("{i}{}", "d".repeat(249))).collect();
    std::fs::create_dir_all(repo.join(&deep)).unwrap();
    for i in 0..count {
        let name = format!("{i:05}{}", "f".repeat(195));
        std::fs::write(repo.join(&deep).join(name), "x").unwrap();
    }
}
