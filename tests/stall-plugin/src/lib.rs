//! TEST CODE, never shipped: a plugin that hangs, or floods the log, on request.
//!
//! | effect | class | op | payload | output |
//! |---|---|---|---|---|
//! | `Stall.Wait` | read | `wait` | `{op, ms}` | `{"ok":true,"slept_ms":ms}` after sleeping `ms` |
//! | `Stall.Log` | read | `log` | `{op, lines, bytes, text}` | `{"ok":true}` after logging `lines` messages |
//!
//! It ships the tool `stall-wait` (argument `ms`, a decimal string up to 600000). The handler
//! deliberately ignores the deadline in its request: it stands for a plugin that hangs.
//!
//! `stall-finish` runs `Stall.Wait` for 0 ms and then the finish function `sleep`, which sleeps
//! the tool's own `ms` argument: a plugin whose finish function hangs after its effect returned.
//!
//! Its config key `startMs` makes its constructor sleep that long first: a plugin that hangs
//! while the daemon starts.
//!
//! `stall-log` (effect `Stall.Log`, op `log`) sends the host `lines` log messages, each `text`
//! followed by `bytes` bytes of `x`: a plugin that floods the daemon's log, or forges lines in
//! it.
//!
//! It also ships `stall-wrong-op`, whose plan sends `Stall.Wait` the op `sleep`, which the
//! effect's allowlist does not hold. The handler reads no op at all (it would sleep and answer
//! `ok`): only the daemon's own check of the manifest's `ops`, before `execute`, refuses it.

// No unwrap or expect outside tests: a panic here is a bug, never an answer.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::time::Duration;

use handler_kit::serde_json::{self, json, Value};
use handler_kit::{
    export_plugin, EffectHandler, FinishInput, Host, JsonObject, LogLevel, Manifest, Outcome,
    Plugin, Request,
};

handler_kit::effect! {
    /// Sleep for the asked milliseconds.
    pub const WAIT = "Stall.Wait" { class: Read, ops: &["wait"] }
}

handler_kit::effect! {
    /// Send the host log messages.
    pub const LOG_EFFECT = "Stall.Log" { class: Read, ops: &["log"] }
}

/// Longest sleep a call may ask for.
const MAX_MS: u64 = 600_000;

const TRANSITION: &str = r#"{
  "id": "stall-wait",
  "title": "Sleep, ignoring the deadline",
  "description": "TEST TOOL. Sleeps `ms` milliseconds (a decimal string, at most 600000) inside the handler, ignoring the handler deadline, then returns {ok:true, slept_ms}.",
  "inputSchema": {
    "type": "object",
    "properties": {"ms": {"type": "string", "description": "Milliseconds to sleep"}},
    "required": ["ms"],
    "additionalProperties": false
  },
  "outputSchema": {"type": "object", "required": ["world"]},
  "access": {"effect": "Stall.Wait", "scope": "any", "cost": 0},
  "declaredEffects": [{"effect": "Stall.Wait", "scope": "any", "cost": 1}],
  "plan": {
    "language": "world/plan-language/v1",
    "arguments": [
      {"name": "ms", "type": "string", "required": true, "rules": [{"rule": "max-bytes", "limit": 16}]}
    ],
    "effect": {"effect": "Stall.Wait", "scope": "any", "cost": 1},
    "payload": {"fields": {"op": {"const": "wait"}, "ms": {"argument": "ms"}}}
  }
}"#;

/// A tool whose effect returns at once and whose finish function sleeps `ms`.
const FINISH: &str = r#"{
  "id": "stall-finish",
  "title": "Return at once, then sleep in the finish function",
  "description": "TEST TOOL. Stall.Wait sleeps 0 ms; the finish function `sleep` then sleeps `ms` milliseconds (a decimal string, at most 600000), ignoring the handler deadline.",
  "inputSchema": {
    "type": "object",
    "properties": {"ms": {"type": "string", "description": "Milliseconds the finish function sleeps"}},
    "required": ["ms"],
    "additionalProperties": false
  },
  "outputSchema": {"type": "object", "required": ["world"]},
  "access": {"effect": "Stall.Wait", "scope": "any", "cost": 0},
  "declaredEffects": [{"effect": "Stall.Wait", "scope": "any", "cost": 1}],
  "finish": "sleep",
  "plan": {
    "language": "world/plan-language/v1",
    "arguments": [
      {"name": "ms", "type": "string", "required": true, "rules": [{"rule": "max-bytes", "limit": 16}]}
    ],
    "effect": {"effect": "Stall.Wait", "scope": "any", "cost": 1},
    "payload": {"fields": {"op": {"const": "wait"}, "ms": {"const": "0"}}}
  }
}"#;

/// A tool whose handler sends the host `lines` messages of `bytes` bytes each.
const LOG: &str = r#"{
  "id": "stall-log",
  "title": "Flood the daemon's log",
  "description": "TEST TOOL. Sends the host `lines` warnings (a decimal string, at most 1000000), each `text` followed by `bytes` bytes of x (at most 16777216), then returns {ok:true}.",
  "inputSchema": {
    "type": "object",
    "properties": {
      "lines": {"type": "string", "description": "How many messages"},
      "bytes": {"type": "string", "description": "Bytes of x after the text"},
      "text": {"type": "string", "description": "The start of each message"}
    },
    "required": ["lines", "bytes", "text"],
    "additionalProperties": false
  },
  "outputSchema": {"type": "object", "required": ["world"]},
  "access": {"effect": "Stall.Log", "scope": "any", "cost": 0},
  "declaredEffects": [{"effect": "Stall.Log", "scope": "any", "cost": 1}],
  "plan": {
    "language": "world/plan-language/v1",
    "arguments": [
      {"name": "lines", "type": "string", "required": true, "rules": [{"rule": "max-bytes", "limit": 16}]},
      {"name": "bytes", "type": "string", "required": true, "rules": [{"rule": "max-bytes", "limit": 16}]},
      {"name": "text", "type": "string", "required": true, "rules": [{"rule": "max-bytes", "limit": 4096}]}
    ],
    "effect": {"effect": "Stall.Log", "scope": "any", "cost": 1},
    "payload": {"fields": {"op": {"const": "log"}, "lines": {"argument": "lines"}, "bytes": {"argument": "bytes"}, "text": {"argument": "text"}}}
  }
}"#;

/// A tool whose plan sends an op outside `Stall.Wait`'s allowlist.
const WRONG_OP: &str = r#"{
  "id": "stall-wrong-op",
  "title": "Send Stall.Wait an op it does not accept",
  "description": "TEST TOOL. Plans Stall.Wait with op \"sleep\", which the effect's op allowlist does not hold: the daemon refuses it before the handler runs.",
  "inputSchema": {
    "type": "object",
    "properties": {"ms": {"type": "string", "description": "Milliseconds the handler would sleep"}},
    "required": ["ms"],
    "additionalProperties": false
  },
  "outputSchema": {"type": "object", "required": ["world"]},
  "access": {"effect": "Stall.Wait", "scope": "any", "cost": 0},
  "declaredEffects": [{"effect": "Stall.Wait", "scope": "any", "cost": 1}],
  "plan": {
    "language": "world/plan-language/v1",
    "arguments": [
      {"name": "ms", "type": "string", "required": true, "rules": [{"rule": "max-bytes", "limit": 16}]}
    ],
    "effect": {"effect": "Stall.Wait", "scope": "any", "cost": 1},
    "payload": {"fields": {"op": {"const": "sleep"}, "ms": {"argument": "ms"}}}
  }
}"#;

pub struct StallPlugin;

pub struct Stall {
    host: Host,
}

/// Most messages `stall-log` sends per call, and their largest size.
const MAX_LINES: u64 = 1_000_000;
const MAX_BYTES: u64 = 16 << 20;

/// The decimal string `key` of `object`, if it is at most `max`.
fn decimal(object: &JsonObject, key: &str, max: u64) -> Option<u64> {
    object
        .get(key)
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|n| *n <= max)
}

fn slept(ms: u64) -> JsonObject {
    std::thread::sleep(Duration::from_millis(ms));
    let mut output = JsonObject::new();
    output.insert("ok".into(), json!(true));
    output.insert("slept_ms".into(), json!(ms));
    output
}

impl Plugin for StallPlugin {
    type Handler = Stall;

    fn manifest() -> Result<Manifest, String> {
        let transitions = [TRANSITION, WRONG_OP, FINISH, LOG]
            .iter()
            .map(|text| serde_json::from_str::<Value>(text))
            .collect::<Result<Vec<Value>, _>>()
            .map_err(|e| format!("shipped transition is not valid JSON: {e}"))?;
        Ok(Manifest {
            name: "stall".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description:
                "TEST PLUGIN: sleeps on request, ignoring its deadline (stall-wait, stall-wrong-op, stall-finish); floods the log (stall-log)."
                    .into(),
            effects: handler_kit::declared_effects!(),
            transitions,
            finish: vec!["sleep".into()],
            config_schema: json!({
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "startMs": {"type": "integer", "minimum": 0, "maximum": MAX_MS, "description": "Milliseconds the constructor sleeps"}
                }
            }),
            ..Manifest::default()
        })
    }

    fn new(config: Value, host: Host) -> Result<Stall, String> {
        if let Some(ms) = config.get("startMs").and_then(Value::as_u64) {
            std::thread::sleep(Duration::from_millis(ms.min(MAX_MS)));
        }
        Ok(Stall { host })
    }
}

impl EffectHandler for Stall {
    fn execute(&self, request: Request) -> Outcome {
        let payload = match request.payload.as_object() {
            Some(p) => p,
            None => return Outcome::failed("payload must be an object"),
        };
        // `Stall.Wait` reads no op (any op sleeps), so that only the daemon's check of the
        // manifest's `ops` refuses `stall-wrong-op`.
        if request.effect == LOG_EFFECT {
            let (Some(lines), Some(bytes)) = (
                decimal(payload, "lines", MAX_LINES),
                decimal(payload, "bytes", MAX_BYTES),
            ) else {
                return Outcome::failed(format!(
                    "lines must be a decimal string up to {MAX_LINES}, bytes up to {MAX_BYTES}"
                ));
            };
            let text = payload.get("text").and_then(Value::as_str).unwrap_or("");
            let message = format!("{text}{}", "x".repeat(bytes as usize));
            for _ in 0..lines {
                self.host.log(LogLevel::Warn, &message);
            }
            let mut output = JsonObject::new();
            output.insert("ok".into(), json!(true));
            return Outcome::ok(output);
        }
        match decimal(payload, "ms", MAX_MS) {
            Some(ms) => Outcome::ok(slept(ms)),
            None => Outcome::failed(format!("ms must be a decimal string up to {MAX_MS}")),
        }
    }

    fn finish(&self, name: &str, input: FinishInput) -> Result<JsonObject, String> {
        if name != "sleep" {
            return Err(format!("no finish function {name:?}"));
        }
        let args = input.args.as_object().cloned().unwrap_or_default();
        match decimal(&args, "ms", MAX_MS) {
            Some(ms) => Ok(slept(ms)),
            None => Err(format!("ms must be a decimal string up to {MAX_MS}")),
        }
    }
}

export_plugin!(StallPlugin);
