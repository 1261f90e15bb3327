//! Shared fixtures: a worktree with a canary directory *beside* it, and a
//! handler driven through the safe `EffectHandler` trait.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

use handler_kit::serde_json::{json, Value};
use handler_kit::{EffectHandler, Host, JsonObject, Outcome, Plugin, Preflight, Request};
use worldd_workspace::{WorkspaceHandler, WorkspacePlugin};

/// The canary file's content: must never show up in any output.
pub const CANARY: &str = "CANARY-outside-the-worktree-7f3a";

pub struct Fixture {
    /// Holds both directories; removed on drop.
    pub tmp: tempfile::TempDir,
    /// The episode's worktree.
    pub root: PathBuf,
    /// A directory outside the worktree holding `canary.txt`.
    pub outside: PathBuf,
    pub handler: WorkspaceHandler,
}

impl Fixture {
    pub fn new() -> Fixture {
        Fixture::with_config(json!({}))
    }

    pub fn with_config(config: Value) -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("wt");
        let outside = tmp.path().join("outside");
        fs::create_dir(&root).unwrap();
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("canary.txt"), CANARY).unwrap();
        let handler = WorkspacePlugin::new(config, Host::noop()).unwrap();
        Fixture {
            tmp,
            root,
            outside,
            handler,
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    pub fn put(&self, rel: &str, content: &str) {
        let p = self.path(rel);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).unwrap();
        }
        fs::write(p, content).unwrap();
    }

    pub fn link(&self, rel: &str, target: impl AsRef<Path>) {
        let p = self.path(rel);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).unwrap();
        }
        std::os::unix::fs::symlink(target, p).unwrap();
    }

    pub fn request(&self, effect: &str, payload: Value) -> Request {
        Request {
            invocation_id: "inv-test".into(),
            episode: "ep".into(),
            worktree: Some(self.root.to_string_lossy().into_owned()),
            effect: effect.into(),
            scope: "worktree".into(),
            cost: 1,
            payload,
            deadline_ms: 10_000,
        }
    }

    pub fn run(&self, effect: &str, payload: Value) -> Outcome {
        self.handler.execute(self.request(effect, payload))
    }

    /// Run and require an `ok` outcome; returns its output object.
    pub fn out(&self, effect: &str, payload: Value) -> JsonObject {
        match self.run(effect, payload.clone()) {
            Outcome::Ok { output } => output,
            other => panic!("{effect} {payload} gave {other:?}"),
        }
    }

    /// The handler's preflight for one request: the decline's `refused` text, or `None` when
    /// it proceeds.
    pub fn preflight(&self, effect: &str, payload: Value) -> Option<String> {
        match self.handler.preflight(&self.request(effect, payload)) {
            Preflight::Proceed => None,
            Preflight::Decline(out) => {
                assert_eq!(out["ok"], json!(false), "{out:?}");
                assert_eq!(
                    out["tool"],
                    json!(self.handler.tool()),
                    "declines are stamped"
                );
                Some(out["refused"].as_str().unwrap().to_owned())
            }
        }
    }

    pub fn read(&self, path: &str) -> JsonObject {
        self.out("Workspace.Read", json!({"op": "read", "path": path}))
    }

    pub fn write(&self, path: &str, content: &str) -> JsonObject {
        self.out(
            "Workspace.Write",
            json!({"op": "write", "path": path, "content": content}),
        )
    }

    pub fn edit(&self, path: &str, old: &str, new: &str) -> JsonObject {
        self.out(
            "Workspace.Write",
            json!({"op": "edit", "path": path, "old_text": old, "new_text": new}),
        )
    }

    /// Every file under `outside` with its content, to prove nothing changed.
    pub fn outside_snapshot(&self) -> Vec<(PathBuf, Vec<u8>)> {
        let mut all = Vec::new();
        snapshot(&self.outside, &mut all);
        all.sort();
        all
    }
}

fn snapshot(dir: &Path, all: &mut Vec<(PathBuf, Vec<u8>)>) {
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let ft = entry.file_type().unwrap();
        if ft.is_dir() {
            snapshot(&entry.path(), all);
        } else if ft.is_file() {
            all.push((entry.path(), fs::read(entry.path()).unwrap()));
        } else {
            all.push((entry.path(), b"<special>".to_vec()));
        }
    }
}

pub fn refused(output: &JsonObject) -> &str {
    assert_eq!(output["ok"], json!(false), "expected a refusal: {output:?}");
    output["refused"].as_str().expect("refused text")
}

pub fn is_ok(output: &JsonObject) -> bool {
    output["ok"] == json!(true)
}

pub fn failed(outcome: Outcome) -> String {
    match outcome {
        Outcome::Failed { message } => message,
        other => panic!("expected failed, got {other:?}"),
    }
}
