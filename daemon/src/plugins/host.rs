//! What the daemon offers a plugin's code (`handler_api::HostServices`): a log of its own,
//! gated (`log`), and, to the plugin that handles `Registry.Publish` alone, publishing
//! transition bundles to the default registry.

use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};

use broker_core::registry;
use broker_core::store::Store;
use handler_api::{HostServices, LogLevel, Manifest};
use serde_json::Value;

use super::log::PluginLog;
use super::PluginOptions;

/// The effect whose plugin may publish transition bundles through the host.
pub const PUBLISH_EFFECT: &str = "Registry.Publish";

/// Publishes a transition bundle on behalf of a plugin; answers JSON text.
pub type Publisher = Arc<dyn Fn(&str) -> Result<String, String> + Send + Sync>;

/// Logs plugin messages under the plugin's name; publishes only for the plugin that handles
/// `Registry.Publish`.
pub(super) struct PluginHost {
    log: PluginLog,
    publisher: Option<Publisher>,
}

impl PluginHost {
    /// The host of the plugin `manifest` describes: its log, gated by the limits in force, and
    /// the publisher only when it declares [`PUBLISH_EFFECT`].
    pub(super) fn new(manifest: &Manifest, opts: &PluginOptions) -> PluginHost {
        let publishes = manifest.effects.iter().any(|e| e.name == PUBLISH_EFFECT);
        PluginHost {
            log: PluginLog::new(&manifest.name, &opts.limits, opts.metrics.clone()),
            publisher: if publishes {
                opts.publisher.clone()
            } else {
                None
            },
        }
    }
}

impl HostServices for PluginHost {
    fn publish(&self, bundle_json: &str) -> Result<String, String> {
        match &self.publisher {
            Some(p) => p(bundle_json),
            None => Err(handler_api::NO_PUBLISH.to_string()),
        }
    }

    fn log(&self, level: LogLevel, message: &str) {
        self.log.log(level, message);
    }

    fn logs(&self, level: LogLevel) -> bool {
        PluginLog::shown(level)
    }
}

/// Publishing for the plugin that handles `Registry.Publish`: validate a bundle
/// (`{"transitions":[…]}`), publish it as a new registry revision, and say which tools need
/// an effect no loaded plugin serves (they are listed, and refused by R8 when called).
/// `served` is set to the effects the plugins serve once they are loaded; until then every
/// tool is listed.
pub(crate) fn publisher(store: Store, served: Arc<OnceLock<BTreeSet<String>>>) -> Publisher {
    Arc::new(move |bundle: &str| {
        let v = broker_core::canon::parse(bundle.as_bytes())
            .map_err(|e| format!("bundle is not JSON: {e}"))?;
        let docs = v
            .get("transitions")
            .and_then(Value::as_array)
            .filter(|a| !a.is_empty())
            .ok_or_else(|| {
                "bundle must be {\"transitions\":[…]} with at least one document".to_string()
            })?;
        let mut transitions = Vec::with_capacity(docs.len());
        for (i, d) in docs.iter().enumerate() {
            let t = registry::entering(d.clone()).map_err(|e| format!("transitions[{i}]: {e}"))?;
            let name = crate::tools::mcp_name(&t.id);
            if name.len() > crate::tools::MAX_MCP_NAME {
                return Err(format!(
                    "transitions[{i}]: tool {:?} has an MCP name of {} bytes; the limit is {}",
                    t.id,
                    name.len(),
                    crate::tools::MAX_MCP_NAME
                ));
            }
            transitions.push(t);
        }
        let empty = BTreeSet::new();
        let effects = served.get().unwrap_or(&empty);
        let unserved: Vec<String> = transitions
            .iter()
            .filter(|t| {
                t.declared_effects
                    .iter()
                    .any(|e| !effects.contains(&e.effect))
            })
            .map(|t| t.id.clone())
            .collect();
        let ids: Vec<String> = transitions.iter().map(|t| t.id.clone()).collect();
        let published = registry::publish(
            &store,
            registry::DEFAULT_REGISTRY,
            transitions,
            "worldd:registry-publish",
        )
        .map_err(|e| match e {
            // The bundle is what is too large: a refusal the agent reads, like the validator's.
            registry::RegistryError::TooLarge { .. }
            | registry::RegistryError::NotEntering { .. } => e.to_string(),
            other => format!("publishing failed: {other}"),
        })?;
        Ok(serde_json::json!({
            "registry": published.reference,
            "revision": published.revision,
            "changed": published.changed,
            "published": ids,
            "unserved": unserved,
        })
        .to_string())
    })
}
