//! worldd plugin `registry`: `Registry.Publish`, publishing transition
//! bundles (tools defined as data) into the daemon's tool registry.
//!
//! Serves the tool `registry-publish`, whose transition document
//! (`transitions/registry/registry-publish.json`) it ships in its manifest.
//! The daemon gives this plugin, and no other, a host whose `publish`
//! callback really publishes: the host validates every document with the
//! broker's validator, publishes one new registry revision (documents are
//! added, or replace the tool with the same id), and answers
//! `{"registry","revision","changed","published","unserved"}`.
//!
//! # Effect and payload
//!
//! | effect | class | op | payload | success output |
//! |---|---|---|---|---|
//! | `Registry.Publish` | write | `publish` | `{op, path}` or `{op, bundle}` | `{"ok":true,"registry","revision","changed","published","unserved"}` |
//!
//! `path` is a worktree-relative bundle file (read through a cap-std
//! capability on the worktree, at most `maxBundleBytes`); `bundle` is the
//! bundle object itself. Every output also carries `tool` (`sha256:` of the
//! plugin library that ran, found with `dladdr`) and `policy_digest` (hex
//! SHA-256 of the canonical JSON of `{"maxBundleBytes","maxDocuments",
//! "policy":"worldd/registry-policy/v1","sandbox":"worktree"}`).
//!
//! # The handler's own check
//!
//! Before calling the host, the bundle must be `{"transitions":[…]}` (no
//! other key) with 1 to `maxDocuments` documents, each a JSON object with a
//! string `id` matching `^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$`, unique in the
//! bundle, whose MCP name (`_`→`_u`, `.`→`_d`, `/`→`_s`) is at most 64 bytes,
//! and with a non-empty `declaredEffects` array. Refusals name the index:
//!
//! - `bundle must be {"transitions":[…]} with at least one document`
//! - `bundle has key "tools"; a bundle holds only "transitions"`
//! - `bundle holds 300 documents; the limit is 256`
//! - `transitions[1]: a transition document must be a JSON object`
//! - `transitions[0]: id is missing` / `transitions[0]: id must be a string`
//! - `transitions[0]: id "a b" must match ^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$`
//! - `transitions[2]: id "x" is also the id of transitions[0]; a bundle names each tool once`
//! - `transitions[0]: tool "…" has an MCP name of 70 bytes; the limit is 64`
//! - `transitions[0] ("x"): declaredEffects is missing; list every effect the tool may request`
//!
//! Then the host's own refusal, verbatim (`transitions[0]: transition "x":
//! plan.language is …`). File problems read like the workspace plugin's:
//! `publish /etc/x: path "/etc/x" escapes sandbox "<worktree>"`, `publish
//! b.json: openat b.json: no such file or directory`, `publish b.json: file
//! is 2000000 bytes; the limit is 1048576`, `publish b.json: the file is not
//! JSON: …`, and a path over [`MAX_PATH_BYTES`] by its length alone
//! (`publish: the path is 5000 bytes; the limit is 4096`).
//!
//! A `failed` outcome: the request was malformed (scope, op allowlist, key
//! aliases, both or neither of `path`/`bundle`, in the workspace plugin's
//! words), or the host could not publish at all (`publishing is not
//! available to this plugin`, a store failure).
//!
//! # Config
//!
//! ```json
//! {"maxBundleBytes": 1048576, "maxDocuments": 256}
//! ```
//!
//! All keys optional; unknown keys are refused.

// No unwrap or expect outside tests: a panic here is a bug, never an answer.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod bundle;
mod config;
mod handler;

use handler_kit::manifest::embedded_transitions;
use handler_kit::serde_json::Value;
use handler_kit::{export_plugin, Host, Manifest, Plugin};

pub use bundle::{check as check_bundle, mcp_name, valid_id, MAX_MCP_NAME};
pub use config::{
    config_schema, Policy, DEFAULT_MAX_BUNDLE_BYTES, DEFAULT_MAX_DOCUMENTS,
    MAX_BUNDLE_BYTES_CEILING, MAX_DOCUMENTS_CEILING,
};
pub use handler::{RegistryHandler, MAX_PATH_BYTES, PUBLISH};
pub use handler_kit::identity::ToolSource;

/// `sha256:` + 64 hex identifying this handler build (the plugin library
/// that ran, found with `dladdr`), and its source. Computed once per process.
pub fn tool_ref() -> &'static (String, ToolSource) {
    handler_kit::tool_ref!()
}

/// The transition document this plugin ships.
pub const REGISTRY_PUBLISH_DOCUMENT: &str =
    include_str!("../../../transitions/registry/registry-publish.json");

/// The plugin (see the crate docs).
pub struct RegistryPlugin;

impl Plugin for RegistryPlugin {
    type Handler = RegistryHandler;

    fn manifest() -> Result<Manifest, String> {
        let transitions =
            embedded_transitions(&[("registry-publish.json", REGISTRY_PUBLISH_DOCUMENT)])?;
        Ok(Manifest {
            name: "registry".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            abi: handler_kit::ABI_VERSION,
            description:
                "Publishes transition bundles (tools as data) into the daemon's registry (registry-publish)."
                    .into(),
            effects: handler_kit::declared_effects!(),
            transitions,
            finish: Vec::new(),
            config_schema: config_schema(),
        })
    }

    fn new(config: Value, host: Host) -> Result<RegistryHandler, String> {
        Ok(RegistryHandler::new(Policy::from_config(&config)?, host))
    }
}

export_plugin!(RegistryPlugin);
