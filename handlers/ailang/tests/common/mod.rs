//! Shared fixtures: a worktree, a state directory beside it, and a handler running the
//! `ailang` stand-in (`tests/ailang-standin/ailang`, test code only), driven through the safe
//! `EffectHandler` trait.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

use handler_kit::serde_json::{json, Value};
use handler_kit::{EffectHandler, Host, JsonObject, Outcome, Plugin, Request};
pub use handler_test_support::sha256_hex;
use worldd_ailang::{AilangHandler, AilangPlugin};

/// The stand-in script (never shipped).
pub fn standin() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/ailang-standin/ailang")
        .canonicalize()
        .expect("tests/ailang-standin/ailang exists")
}

/// A program printing one line with IO.
pub const HELLO: &str = "module hello\n\nimport std/io (println)\n\nexport func main() -> () ! {IO} {\n  println(\"hello from pi\")\n}\n";

/// A program with a stand-in mode and an effect row.
pub fn program(mode: &str, row: &str) -> String {
    format!("-- standin: {mode}\nmodule m\n\nexport func main() -> () ! {{{row}}} {{\n  ()\n}}\n")
}

pub struct Fixture {
    pub tmp: tempfile::TempDir,
    /// The episode's worktree (`<tmp>/worktrees/ep`).
    pub root: PathBuf,
    /// The plugin's stateDir (`<tmp>/state`), outside the worktree.
    pub state: PathBuf,
    pub handler: AilangHandler,
}

pub const EPISODE: &str = "ep";

impl Fixture {
    pub fn new() -> Fixture {
        Fixture::with(json!({}))
    }

    /// A fixture whose config is `extra` plus `bin` (the stand-in) and `stateDir`.
    pub fn with(extra: Value) -> Fixture {
        Fixture::hosted(extra, Host::noop())
    }

    /// [`Fixture::with`], logging to `host`.
    pub fn hosted(extra: Value, host: Host) -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("worktrees").join(EPISODE);
        fs::create_dir_all(&root).unwrap();
        let state = tmp.path().join("state");
        let handler = AilangPlugin::new(Fixture::config(&state, extra), host)
            .unwrap_or_else(|e| panic!("handler: {e}"));
        Fixture {
            tmp,
            root,
            state,
            handler,
        }
    }

    pub fn config(state: &Path, extra: Value) -> Value {
        let mut config = json!({
            "bin": standin().display().to_string(),
            "stateDir": state.display().to_string(),
        });
        for (k, v) in extra.as_object().unwrap() {
            config[k] = v.clone();
        }
        config
    }

    pub fn worktree(&self) -> String {
        self.root.display().to_string()
    }

    pub fn put(&self, rel: &str, content: &str) {
        let p = self.root.join(rel);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).unwrap();
        }
        fs::write(p, content).unwrap();
    }

    /// Write `standin-control.json` into the worktree (stand-in test hook).
    pub fn control(&self, v: Value) {
        self.put("standin-control.json", &v.to_string());
    }

    pub fn request(&self, effect: &str, payload: Value) -> Request {
        Request {
            invocation_id: "inv-test".into(),
            episode: EPISODE.into(),
            worktree: Some(self.worktree()),
            effect: effect.into(),
            scope: "worktree".into(),
            cost: 1,
            payload,
            deadline_ms: 10_000,
        }
    }

    pub fn exec(&self, effect: &str, payload: Value) -> Outcome {
        self.handler.execute(self.request(effect, payload))
    }

    /// The output of an effect that must end ok.
    pub fn ok(&self, effect: &str, payload: Value) -> JsonObject {
        match self.exec(effect, payload) {
            Outcome::Ok { output } => output,
            other => panic!("expected ok, got {other:?}"),
        }
    }

    /// The message of an effect that must fail.
    pub fn failed(&self, effect: &str, payload: Value) -> String {
        match self.exec(effect, payload) {
            Outcome::Failed { message } => message,
            other => panic!("expected failed, got {other:?}"),
        }
    }

    pub fn cache(&self) -> PathBuf {
        self.state.join("cache").join(EPISODE)
    }

    pub fn policy(&self, name: &str) -> PathBuf {
        self.state.join("policies").join(name)
    }

    /// Every stand-in invocation of this episode, in order.
    pub fn log(&self) -> Vec<Value> {
        fs::read_to_string(self.cache().join("standin.log"))
            .unwrap_or_default()
            .lines()
            .map(|l| handler_kit::serde_json::from_str(l).unwrap())
            .collect()
    }

    /// How many times the stand-in ran `cmd` (`run`, `policy-tool`) with `op`.
    pub fn ran(&self, cmd: &str, op: Option<&str>) -> usize {
        self.log()
            .iter()
            .filter(|l| l["cmd"] == cmd && op.is_none_or(|o| l["op"] == o))
            .count()
    }

    /// The `tool` stamp: sha256 of the binary as configured.
    pub fn tool(&self) -> String {
        format!("sha256:{}", sha256_hex(&fs::read(standin()).unwrap()))
    }
}
