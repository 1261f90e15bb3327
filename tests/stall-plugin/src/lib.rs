//! TEST CODE, never shipped: a plugin that hangs on request.
//!
//! | effect | class | op | payload | output |
//! |---|---|---|---|---|
//! | `Stall.Wait` | read | `wait` | `{op, ms}` | `{"ok":true,"slept_ms":ms}` after sleeping `ms` |
//!
//! It ships the tool `stall-wait` (argument `ms`, a decimal string up to 600000). The handler
//! deliberately ignores the deadline in its request: it stands for a plugin that hangs.

use std::time::Duration;

use handler_api::serde_json::{self, json, Value};
use handler_api::{
    export_plugin, EffectClass, EffectDecl, EffectHandler, Host, JsonObject, Manifest, Outcome,
    Plugin, Request,
};

/// The effect that sleeps.
pub const WAIT: &str = "Stall.Wait";

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

pub struct StallPlugin;

pub struct Stall;

impl Plugin for StallPlugin {
    type Handler = Stall;

    fn manifest() -> Result<Manifest, String> {
        let transition: Value = serde_json::from_str(TRANSITION)
            .map_err(|e| format!("shipped transition is not valid JSON: {e}"))?;
        Ok(Manifest {
            name: "stall".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "TEST PLUGIN: sleeps on request, ignoring its deadline (stall-wait)."
                .into(),
            effects: vec![EffectDecl {
                name: WAIT.into(),
                class: EffectClass::Read,
                ops: vec!["wait".into()],
                description: "Sleep for the asked milliseconds.".into(),
            }],
            transitions: vec![transition],
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
