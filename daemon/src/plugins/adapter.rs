//! A plugin's handler as broker-core sees it (`EffectHandler`): the manifest's op allowlist
//! enforced before the plugin runs, and each request written as the plugin reads it
//! (`request`).

use std::collections::HashMap;
use std::mem::ManuallyDrop;

use broker_core::broker::HandlerIdentity;
use broker_core::coordinator::{EffectHandler, EffectRequest, HandlerOutcome};
use handler_api::{FinishInput, LoadedHandler, Outcome, Preflight};
use serde_json::{Map, Value};

use super::request;
use super::scan::PluginInfo;

/// A plugin's handler as broker-core sees it.
pub(super) struct PluginHandler {
    identity: HandlerIdentity,
    /// The plugin's manifest name, for messages.
    plugin: String,
    /// Each effect's op allowlist, from the manifest.
    ops: HashMap<String, Vec<String>>,
    /// Never dropped by the daemon that serves: plugins are never unloaded, and a handler's
    /// drop is the plugin's code, which may panic (across the boundary, an abort: a plugin
    /// built against an older handler-api does not catch it) or block, when another plugin
    /// stops start-up or at shutdown. The process's end frees it. Only quickstart's trial start
    /// drops its handlers ([`super::PluginSet::stop`]), under the start deadline.
    handler: ManuallyDrop<LoadedHandler>,
}

impl PluginHandler {
    /// The handler the plugin `info` describes built, with its identity and op allowlists.
    pub(super) fn new(info: &PluginInfo, handler: LoadedHandler) -> PluginHandler {
        PluginHandler {
            identity: info.identity(),
            plugin: info.manifest.name.clone(),
            ops: info
                .manifest
                .effects
                .iter()
                .map(|e| (e.name.clone(), e.ops.clone()))
                .collect(),
            handler: ManuallyDrop::new(handler),
        }
    }

    /// The plugin's handler, to be dropped after all: only for a trial start (quickstart's),
    /// whose handlers would otherwise live on beside those serving builds again.
    pub(super) fn into_handler(self) -> LoadedHandler {
        ManuallyDrop::into_inner(self.handler)
    }

    /// The manifest's op allowlist, enforced before the plugin runs: a payload whose `op` is
    /// not one of the effect's `ops` (or that has an `op` where the effect declares none) is a
    /// failed effect, and the plugin is never called.
    fn refuse_op(&self, effect: &str, payload: &Map<String, Value>) -> Option<String> {
        let allowed = self.ops.get(effect).map(Vec::as_slice).unwrap_or_default();
        let why = match (payload.get("op"), allowed.is_empty()) {
            (None, true) => return None,
            (Some(Value::String(op)), false) if allowed.iter().any(|a| a == op) => return None,
            (Some(Value::String(op)), false) => format!(
                "refuses op {}: not in the op allowlist of plugin {}'s manifest ({})",
                dialect::quote::quote(op),
                self.plugin,
                allowed.join(", ")
            ),
            (Some(_), true) => format!(
                "refuses the payload key \"op\": plugin {}'s manifest declares no ops for it",
                self.plugin
            ),
            (None, false) => "refused: payload has no \"op\"".to_string(),
            (Some(_), false) => "refused: payload key \"op\" must be a string".to_string(),
        };
        Some(format!("broker: {effect} {why}"))
    }
}

impl PluginHandler {
    /// After the plugin's `entry` (for `effect`) returned: what it changed of the whole
    /// process (descriptors 0-2, signal dispositions) put back and said.
    fn returned(&self, entry: &str, effect: &str) {
        crate::process_state::check(|| format!("plugin {}'s {entry} ({effect})", self.plugin));
    }
}

impl EffectHandler for PluginHandler {
    fn identity(&self) -> HandlerIdentity {
        self.identity.clone()
    }

    fn preflight(&self, req: &EffectRequest<'_>) -> Option<Map<String, Value>> {
        // An op outside the allowlist never reaches the plugin, not even its preflight.
        if self.refuse_op(req.effect, req.payload).is_some() {
            return None;
        }
        let answer = self.handler.preflight_request_json(&request::write(req));
        self.returned("preflight", req.effect);
        match answer {
            Preflight::Decline(output) => Some(output),
            Preflight::Proceed => None,
        }
    }

    fn execute(&self, req: &EffectRequest<'_>) -> HandlerOutcome {
        if let Some(message) = self.refuse_op(req.effect, req.payload) {
            return HandlerOutcome::Failed(message);
        }
        let outcome = self.handler.execute_request_json(&request::write(req));
        self.returned("execute", req.effect);
        match outcome {
            Outcome::Ok { output } => HandlerOutcome::Ok(output),
            Outcome::Failed { message } => HandlerOutcome::Failed(message),
            Outcome::Indeterminate { message } => HandlerOutcome::Indeterminate(message),
        }
    }

    fn finish(&self, name: &str, input: &Value) -> Result<Map<String, Value>, String> {
        let input = FinishInput {
            args: input.get("args").cloned().unwrap_or(Value::Null),
            output: input
                .get("output")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
        };
        let finished = self.handler.finish(name, &input);
        self.returned("finish", name);
        finished
    }
}
