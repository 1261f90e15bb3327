//! TEST CODE, never shipped: a plugin that hangs on request.
//!
//! | effect | class | op | payload | output |
//! |---|---|---|---|---|
//! | `Stall.Wait` | read | `wait` | `{op, ms}` | `{"ok":true,"slept_ms":ms}` after sleeping `ms` |
//!
//! It ships the tool `stall-wait` (argument `ms`, a decimal string up to 600000). The handler
//! deliberately ignores the deadline in its request: it stands for a plugin that hangs.
//!
//! It also ships `stall-wrong-op`, whose plan sends `Stall.Wait` the op `sleep`, which the
//! effect's allowlist does not hold. The handler reads no op at all (it would sleep and answer
//! `ok`): only the daemon's own check of the manifest's `ops`, before `execute`, refuses it.

// No unwrap or expect outside tests: a panic here is a bug, never an answer.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::time::Duration;

use handler_kit::serde_json::{self, json, Value};
use handler_kit::{
    export_plugin, EffectHandler, Host, JsonObject, Manifest, Outcome, Plugin, Request,
};

handler_kit::effect! {
    /// Sleep for the asked milliseconds.
    pub const WAIT = "Stall.Wait" { class: Read, ops: &["wait"] }
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

pub struct Stall;

impl Plugin for StallPlugin {
    type Handler = Stall;

    fn manifest() -> Result<Manifest, String> {
        let transitions = [TRANSITION, WRONG_OP]
            .iter()
            .map(|text| serde_json::from_str::<Value>(text))
            .collect::<Result<Vec<Value>, _>>()
            .map_err(|e| format!("shipped transition is not valid JSON: {e}"))?;
        Ok(Manifest {
            name: "stall".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description:
                "TEST PLUGIN: sleeps on request, ignoring its deadline (stall-wait, stall-wrong-op)."
                    .into(),
            effects: handler_kit::declared_effects!(),
            transitions,
            config_schema: json!({"type": "object", "additionalProperties": false, "properties": {}}),
            ..Manifest::default()
        })
    }

    fn new(_config: Value, _host: Host) -> Result<Stall, String> {
        Ok(Stall)
    }
}

impl EffectHandler for Stall {
    fn execute(&self, request: Request) -> Outcome {
        let Some(ms) = request
            .payload
            .get("ms")
            .and_then(Value::as_str)
            .and_then(|s| s.parse::<u64>().ok())
            .filter(|ms| *ms <= MAX_MS)
        else {
            return Outcome::failed(format!("ms must be a decimal string up to {MAX_MS}"));
        };
        std::thread::sleep(Duration::from_millis(ms));
        let mut output = JsonObject::new();
        output.insert("ok".into(), json!(true));
        output.insert("slept_ms".into(), json!(ms));
        Outcome::ok(output)
    }
}

export_plugin!(StallPlugin);
