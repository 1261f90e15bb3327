//! The plugin loader: find effect-handler libraries, load them through the stable ABI, build
//! their handlers from the operator's config, and adapt them to broker-core's handler trait.
//!
//! Every library in the plugin directory is loaded with abi_stable's
//! `lib_header_from_path` + `init_root_module` (never the per-type cached loaders). Any
//! problem — not a plugin, a wrong ABI or layout, two plugins claiming one effect, name or tool
//! id, a config the plugin rejects or a constructor that panics, a transition document that does
//! not validate or a manifest mistake (`authored`) — stops start-up with one line naming the
//! file and the cause.
//!
//! Provenance names the exact build that ran an effect: each library is opened once, its bytes
//! are copied into a sealed memory file and hashed as they are copied, and the dynamic loader
//! is handed that copy (`/proc/self/fd/N`), never the path again ([`image`]). Neither
//! replacing the file at the path nor rewriting it in place, before or after it was loaded,
//! can change the code that runs under the hash. Where the system has no sealed memory files
//! (not Linux), the loader maps the hashed file itself.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use broker_core::coordinator::{EffectHandler, Handlers};
use broker_core::object::Ref;
use broker_core::transition::Transition;
use handler_api::{EffectClass, Manifest};
use serde_json::{Map, Value};

use crate::cli::terminal::{head, one_line};
use crate::limits::Limits;
use crate::metrics::Metrics;

mod adapter;
mod authored;
mod deadline;
mod host;
pub mod image;
mod library;
pub mod log;
mod request;
mod scan;
pub(crate) mod writers;

pub use deadline::{exit, Stops};
pub(crate) use host::publisher;
pub use host::{Publisher, PUBLISH_EFFECT};
pub use library::OpenedLibrary;
pub use scan::{default_dir, scan, PluginInfo, Scanned};

use adapter::PluginHandler;
use deadline::within;
use host::PluginHost;

/// One line naming the file and the cause.
#[derive(Debug, thiserror::Error)]
#[error("plugin {path}: {cause}")]
pub struct PluginError {
    pub path: String,
    pub cause: String,
}

impl PluginError {
    /// The path and the cause each as one line: both may carry what a plugin wrote (its file
    /// name, its manifest's words, its constructor's error), and a line break there would add
    /// a line of its own to `worldd handlers` or the log (a `problem: none` that never was).
    fn new(path: &Path, cause: impl Into<String>) -> PluginError {
        PluginError {
            path: one_line(&path.display().to_string()).into_owned(),
            cause: one_line(&cause.into()).into_owned(),
        }
    }
}

/// [`one_line`] of `text` cut to at most `max` bytes (at a character's edge), saying how long
/// it was: `worldd handlers` shows what a plugin wrote, even past the bound the checks then
/// refuse it for, without printing megabytes of it.
fn shown(text: &str, max: usize) -> String {
    let start = head(text, max);
    if start.len() == text.len() {
        return one_line(text).into_owned();
    }
    format!("{}… ({} bytes in all)", one_line(start), text.len())
}

/// What the operator chose.
#[derive(Clone, Default)]
pub struct PluginOptions {
    pub dir: PathBuf,
    /// `--handler NAME` (repeatable); empty = every plugin in the directory.
    pub selected: Vec<String>,
    /// One config object per plugin name.
    pub configs: BTreeMap<String, Value>,
    /// Where plugins that declare a `stateDir` config key keep their files
    /// (`<state_root>/<plugin name>`).
    pub state_root: Option<PathBuf>,
    /// Given to the plugin that handles `Registry.Publish`, and to no other.
    pub publisher: Option<Publisher>,
    /// The limits in force (what a plugin may write to the log among them).
    pub limits: Limits,
    /// Where the plugins' limit trips are counted.
    pub metrics: Metrics,
}

impl PluginOptions {
    /// Whether the plugin `name` is enabled: every plugin when no `--handler` was given.
    pub fn is_selected(&self, name: &str) -> bool {
        self.selected.is_empty() || self.selected.iter().any(|s| s == name)
    }
}

impl std::fmt::Debug for PluginOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginOptions")
            .field("dir", &self.dir)
            .field("selected", &self.selected)
            .field("configs", &self.configs)
            .field("state_root", &self.state_root)
            .finish()
    }
}

/// The effective config of one plugin: the operator's table plus `stateDir` when the plugin
/// declares that key and the operator did not set it.
pub fn effective_config(opts: &PluginOptions, manifest: &Manifest) -> Value {
    let mut config = opts
        .configs
        .get(&manifest.name)
        .cloned()
        .unwrap_or_else(|| Value::Object(Map::new()));
    let wants_state = manifest
        .config_schema
        .get("properties")
        .and_then(|p| p.get("stateDir"))
        .is_some();
    if let (true, Some(root), Some(obj)) = (wants_state, &opts.state_root, config.as_object_mut()) {
        obj.entry("stateDir")
            .or_insert_with(|| Value::String(root.join(&manifest.name).display().to_string()));
    }
    config
}

/// The loaded set: handlers by effect, the transitions they ship, and the classes of effects.
pub struct PluginSet {
    pub handlers: Handlers,
    pub transitions: Vec<Transition>,
    pub plugins: Vec<PluginInfo>,
    /// Plugins that declined to start, with their reason; their tools are published and
    /// refused by R8.
    pub declined: Vec<(PluginInfo, String)>,
    /// Plugins found but left out by the selection (`--handler`, `[serve] handlers`); their
    /// tools are published and refused by R8 too.
    pub unselected: Vec<PluginInfo>,
    pub classes: HashMap<String, EffectClass>,
}

impl PluginSet {
    /// What the daemon warns of when no plugin was started from `dir`, in the words of what
    /// happened: none found, or found and declined to start. `None` when one was started.
    pub fn nothing_started(&self, dir: &Path) -> Option<String> {
        if !self.plugins.is_empty() {
            return None;
        }
        if self.declined.is_empty() {
            return Some(format!(
                "no plugin loaded from {}: every tool call will be refused (rule R8). Build the plugins \
                 (`cargo build --release` puts them beside worldd) or pass --plugin-dir DIR; \
                 `worldd handlers --plugin-dir DIR` shows what a directory holds",
                dir.display()
            ));
        }
        let names: Vec<&str> = self
            .declined
            .iter()
            .map(|(info, _)| info.manifest.name.as_str())
            .collect();
        Some(format!(
            "no plugin started from {}: every tool call will be refused (rule R8). Found, but declined to start: {} (each says why in its line `plugin NAME not started: declined: …`); give a plugin what its line asks for, then restart",
            dir.display(),
            names.join(", ")
        ))
    }
}

/// Check the operator's config object against the top level of the plugin's schema (unknown
/// keys when `additionalProperties` is false, JSON types, and the `minimum` and `maximum` of
/// numbers). The plugin validates fully.
pub fn check_config(schema: &Value, config: &Value) -> Result<(), String> {
    let Some(obj) = config.as_object() else {
        return Err("config must be a table (a JSON object)".into());
    };
    let props = schema.get("properties").and_then(Value::as_object);
    let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
    for (k, v) in obj {
        match props.and_then(|p| p.get(k)) {
            None if closed => {
                let known: Vec<&str> = props
                    .map(|p| p.keys().map(String::as_str).collect())
                    .unwrap_or_default();
                return Err(format!(
                    "unknown config key {k:?} (known: {})",
                    known.join(", ")
                ));
            }
            None => {}
            Some(p) => {
                // The schema was checked at load (`authored::check_schema`): `t` is a known type.
                if let Some(t) = p.get("type").and_then(Value::as_str) {
                    if !authored::of_type(t, v) {
                        return Err(format!(
                            "config key {k:?} must be of type {t}{}",
                            size_hint(t, v)
                        ));
                    }
                }
                within_bounds(k, v, p)?;
            }
        }
    }
    Ok(())
}

/// For a size written with a unit where a plugin wants an integer: the number to write. The
/// daemon's own tables take units; a plugin's schema says what its keys take.
fn size_hint(wanted: &str, value: &Value) -> String {
    match value.as_str().map(str::parse::<crate::byte_size::ByteSize>) {
        Some(Ok(size)) if wanted == "integer" => format!(
            " (a plugin's keys take plain numbers, not units: write {})",
            size.get()
        ),
        _ => String::new(),
    }
}

/// A plugin table (`[plugins.NAME]`, `--plugin-config NAME.KEY=…`) that names no plugin found
/// here, and whether it is most likely a misspelling of one that is (at most two edits
/// away): that one stops the start, since its plugin would otherwise run on its defaults
/// unnoticed; any other is a table for a plugin this deployment does not have, said and
/// ignored.
fn stray_tables(opts: &PluginOptions, found: &[String]) -> Vec<(String, Option<String>)> {
    opts.configs
        .keys()
        .filter(|name| !found.contains(name))
        .map(|name| {
            let near = crate::spelling::nearest(name, found.iter().map(String::as_str), false);
            (name.clone(), near.map(str::to_owned))
        })
        .collect()
}

/// What [`stray_tables`] says of one table.
fn stray_table_text(name: &str, near: Option<&str>, found: &[String]) -> String {
    match near {
        Some(near) => format!(
            "[plugins.{name}] (or --plugin-config {name}.KEY=…) names no plugin here; did you mean [plugins.{near}]? (found: {})",
            listed(found)
        ),
        None => format!(
            "[plugins.{name}] names no plugin here (found: {}): its keys are ignored",
            listed(found)
        ),
    }
}

/// The names of the plugins found, or `none`.
fn listed(found: &[String]) -> String {
    if found.is_empty() {
        "none".to_owned()
    } else {
        found.join(", ")
    }
}

/// A misspelled plugin table stops the start; a table for an absent plugin is warned of.
fn check_tables(opts: &PluginOptions, found: &[String]) -> Result<(), PluginError> {
    for (name, near) in stray_tables(opts, found) {
        let text = stray_table_text(&name, near.as_deref(), found);
        if near.is_some() {
            return Err(PluginError::new(&opts.dir, text));
        }
        tracing::warn!("{text}");
    }
    Ok(())
}

/// A number against its property's `minimum` and `maximum`, so that `worldd handlers` names an
/// out-of-range value before `serve` would stop on it.
fn within_bounds(key: &str, value: &Value, property: &Value) -> Result<(), String> {
    let Some(n) = value.as_f64() else {
        return Ok(());
    };
    let bound = |name: &str| property.get(name).filter(|b| b.is_number());
    if let Some(min) = bound("minimum").filter(|m| m.as_f64().is_some_and(|m| n < m)) {
        return Err(format!("config key {key:?} must be at least {min}"));
    }
    if let Some(max) = bound("maximum").filter(|m| m.as_f64().is_some_and(|m| n > m)) {
        return Err(format!("config key {key:?} must be at most {max}"));
    }
    Ok(())
}

/// A constructor error starting with this means "not started", not "bad config".
pub const DECLINED: &str = "declined: ";

fn shipped_transitions(info: &PluginInfo) -> Result<Vec<Transition>, PluginError> {
    info.manifest
        .transitions
        .iter()
        .map(|doc| {
            Transition::from_value(doc.clone())
                .map_err(|e| PluginError::new(&info.path, format!("shipped transition: {e}")))
        })
        .collect()
}

/// What the plugins checked before one hold, for the checks across plugins: their names and
/// tool ids (every plugin's), and the effects the selected ones claim.
#[derive(Debug, Default)]
pub struct Seen {
    names: HashMap<String, (PathBuf, Ref)>,
    tools: HashMap<String, (String, PathBuf)>,
    claimed: HashMap<String, PathBuf>,
}

/// What `serve` checks of one plugin before it runs any of the plugin's code beyond the
/// manifest, and what `worldd handlers` reports: its name is a plugin name no plugin before it
/// carries; the transitions it ships are valid documents, whose ids no plugin before it ships,
/// naming only effects it declares, with payload ops they accept; and, when it is selected, its
/// config schema is one the daemon can read, its effective config passes the top level of that
/// schema, and no plugin selected before it claims one of its effects. `seen` collects what the
/// plugins hold, in scan order. (The plugin's constructor then validates its config fully and
/// may decline; only `serve` runs it.)
pub fn check(
    info: &PluginInfo,
    opts: &PluginOptions,
    seen: &mut Seen,
) -> Result<Checked, PluginError> {
    let fail = |cause: String| PluginError::new(&info.path, cause);
    let name = &info.manifest.name;
    authored::check_name(name).map_err(fail)?;
    authored::check_manifest(&info.manifest).map_err(fail)?;
    // A name is what the operator selects and configures a plugin by: two plugins under one
    // name would both be selected and configured, and could not be told apart in the log.
    if let Some((other, library)) = seen.names.get(name) {
        return Err(fail(if *library == info.file_ref {
            format!(
                "this is the same library as {} (both {library}), under another file name: remove one",
                other.display()
            )
        } else {
            format!(
                "plugin name {name} is also the name of {}: --handler {name} and [plugins.{name}] would select and configure both; remove one, or give one another name",
                other.display()
            )
        }));
    }
    seen.names
        .insert(name.clone(), (info.path.clone(), info.file_ref));
    let transitions = shipped_transitions(info)?;
    // All found plugins' tools are published together, selected or not.
    for t in &transitions {
        if let Some((plugin, other)) = seen.tools.get(&t.id) {
            return Err(fail(if other == &info.path {
                format!("ships transition {} twice", dialect::quote::quote(&t.id))
            } else {
                format!(
                    "shipped transition {} is also shipped by plugin {plugin} ({}): tool ids are one namespace; one of the two must go",
                    dialect::quote::quote(&t.id),
                    other.display()
                )
            }));
        }
        seen.tools
            .insert(t.id.clone(), (name.clone(), info.path.clone()));
    }
    for (doc, t) in info.manifest.transitions.iter().zip(&transitions) {
        authored::check_transition(&info.manifest, doc, t).map_err(fail)?;
    }
    let config = effective_config(opts, &info.manifest);
    let selected = opts.is_selected(name);
    if selected {
        authored::check_schema(&info.manifest.config_schema)
            .map_err(|e| fail(format!("configSchema of plugin {name}: {e}")))?;
        check_config(&info.manifest.config_schema, &config)
            .map_err(|e| fail(format!("[plugins.{name}]: {e}")))?;
        for e in &info.manifest.effects {
            if let Some(other) = seen.claimed.get(&e.name) {
                return Err(fail(format!(
                    "effect {} is already claimed by {}",
                    e.name,
                    other.display()
                )));
            }
        }
        for e in &info.manifest.effects {
            seen.claimed.insert(e.name.clone(), info.path.clone());
        }
    }
    Ok(Checked {
        config,
        transitions,
        selected,
    })
}

/// One plugin that passed [`check`].
#[derive(Debug)]
pub struct Checked {
    /// Its effective config.
    pub config: Value,
    /// The transitions it ships, validated.
    pub transitions: Vec<Transition>,
    /// Whether it is enabled here (`--handler`).
    pub selected: bool,
}

/// Every `--handler NAME` names a plugin that was found; else the error lists what was found
/// and the libraries that would not load.
fn check_selected(
    opts: &PluginOptions,
    found: &[String],
    broken: &[String],
) -> Result<(), PluginError> {
    match opts.selected.iter().find(|s| !found.contains(s)) {
        None => Ok(()),
        Some(s) => Err(PluginError::new(
            &opts.dir,
            format!(
                "--handler {s}: no plugin of that name here (found: {}){}{}",
                listed(found),
                // A plugin a letter or two away, as a misspelled [plugins.NAME] table gets.
                crate::spelling::nearest(s, found.iter().map(String::as_str), false)
                    .map(|near| format!("; did you mean {near}?"))
                    .unwrap_or_default(),
                if broken.is_empty() {
                    String::new()
                } else {
                    format!("; not loadable: {}", broken.join("; "))
                }
            ),
        )),
    }
}

/// Load the selected plugins and build their handlers.
pub fn load(opts: &PluginOptions) -> Result<PluginSet, PluginError> {
    let mut handlers = Handlers::new();
    let mut transitions = Vec::new();
    let mut plugins = Vec::new();
    let mut classes = HashMap::new();
    let mut seen = Seen::default();
    let mut found = Vec::new();
    let mut declined = Vec::new();
    let mut unselected = Vec::new();
    let mut broken = Vec::new();
    let deadline = opts.limits.plugin_start;
    for scanned in scan(&opts.dir, deadline, Stops::Serve)? {
        let (info, plugin) = match scanned {
            Scanned::Plugin(i, p) => (i, p),
            // Without --handler every library must load. With it, a broken library that is not
            // selected is reported and skipped; a selected name it might have carried is then
            // reported as missing, with the broken libraries named.
            Scanned::Broken(e) if opts.selected.is_empty() => return Err(e),
            Scanned::Broken(e) => {
                tracing::warn!("skipping {e}");
                broken.push(e.to_string());
                continue;
            }
        };
        found.push(info.manifest.name.clone());
        let checked = check(&info, opts, &mut seen)?;
        if !checked.selected {
            // Not enabled here: its tools are still published, so a call to one is refused
            // by R8 ("not enabled for this daemon") rather than looking like an unknown tool.
            transitions.extend(checked.transitions);
            unselected.push(info);
            continue;
        }
        let name = info.manifest.name.clone();
        let host = Arc::new(PluginHost::new(&info.manifest, opts));
        let config = checked.config.clone();
        let started = within(deadline, &info.path, "starting", Stops::Serve, move || {
            plugin.new_handler(&config, handler_api::host_callbacks(host))
        })?;
        let handler = match started {
            Ok(h) => h,
            // A plugin may decline to start (e.g. a tool binary is not configured): its tools
            // are still published, and refused by R8 when called.
            Err(e) if e.starts_with(DECLINED) => {
                tracing::warn!(plugin = %name, path = %info.path.display(), "plugin {name} not started: {e}");
                transitions.extend(checked.transitions);
                declined.push((info, e));
                continue;
            }
            Err(e) => {
                return Err(PluginError::new(
                    &info.path,
                    match e.strip_prefix(handler_api::NEW_PANICKED) {
                        // A bug in the plugin, not a refusal of what the operator wrote.
                        Some(panic) => {
                            format!("the plugin's constructor (Plugin::new) panicked: {panic}")
                        }
                        None => format!("the plugin rejected its config: {e}"),
                    },
                ));
            }
        };
        let adapter: Arc<dyn EffectHandler> = Arc::new(PluginHandler::new(&info, handler));
        for e in &info.manifest.effects {
            classes.insert(e.name.clone(), e.class);
            handlers
                .insert(&e.name, adapter.clone())
                .map_err(|m| PluginError::new(&info.path, m))?;
            if e.class == EffectClass::Read {
                handlers.mark_read_only(&e.name);
            }
        }
        transitions.extend(checked.transitions);
        tracing::info!(plugin = %name, version = %info.manifest.version, path = %info.path.display(), "loaded plugin");
        plugins.push(info);
    }
    check_selected(opts, &found, &broken)?;
    check_tables(opts, &found)?;
    Ok(PluginSet {
        handlers,
        transitions,
        plugins,
        declined,
        unselected,
        classes,
    })
}

/// The text of `worldd handlers`: every library, its effects and tools, or why it would not
/// load.
pub fn report(opts: &PluginOptions) -> Result<String, PluginError> {
    use std::fmt::Write;
    let mut out = String::new();
    let scanned = scan(&opts.dir, opts.limits.plugin_start, Stops::Handlers)?;
    let _ = writeln!(out, "plugin directory {}", opts.dir.display());
    let mut n = 0;
    let mut seen = Seen::default();
    let mut found = Vec::new();
    let mut broken = Vec::new();
    for s in &scanned {
        match s {
            Scanned::Broken(e) => {
                let _ = writeln!(out, "\n{}\n  not loadable: {}", e.path, e.cause);
                broken.push(e.to_string());
            }
            Scanned::Plugin(info, _) => {
                n += 1;
                let m = &info.manifest;
                found.push(m.name.clone());
                let selected = opts.is_selected(&m.name);
                // What the plugin wrote is printed one line each, whatever it holds: the
                // checks below say what is wrong with it.
                let _ = writeln!(
                    out,
                    "\n{} {} (abi {}){}\n  file {}\n  library {}",
                    shown(&m.name, authored::MAX_VERSION_BYTES),
                    shown(&m.version, authored::MAX_VERSION_BYTES),
                    m.abi,
                    if selected { "" } else { "  [not selected]" },
                    one_line(&info.path.display().to_string()),
                    info.file_ref
                );
                if !m.description.is_empty() {
                    let _ = writeln!(
                        out,
                        "  {}",
                        shown(&m.description, authored::MAX_DESCRIPTION_BYTES)
                    );
                }
                for e in &m.effects {
                    let class = serde_json::to_value(e.class)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default();
                    let _ = writeln!(
                        out,
                        "  effect {} [{}] ops: {}",
                        shown(&e.name, broker_core::plan::MAX_NAME_BYTES),
                        class,
                        shown(&e.ops.join(", "), authored::MAX_DESCRIPTION_BYTES)
                    );
                }
                let ids: Vec<String> = m
                    .transitions
                    .iter()
                    .map(|t| {
                        t.get("id").and_then(Value::as_str).map_or_else(
                            || "?".to_owned(),
                            |id| shown(id, broker_core::plan::MAX_NAME_BYTES),
                        )
                    })
                    .collect();
                let _ = writeln!(
                    out,
                    "  tools: {}",
                    if ids.is_empty() {
                        "(none)".into()
                    } else {
                        ids.join(", ")
                    }
                );
                if !m.finish.is_empty() {
                    let _ = writeln!(
                        out,
                        "  finish functions: {}",
                        shown(&m.finish.join(", "), authored::MAX_DESCRIPTION_BYTES)
                    );
                }
                let _ = writeln!(out, "  config {}", effective_config(opts, m));
                // Exactly the checks `serve` makes before it builds the handler.
                if let Err(e) = check(info, opts, &mut seen) {
                    let _ = writeln!(out, "  problem: {}", e.cause);
                }
            }
        }
    }
    if let Err(e) = check_selected(opts, &found, &broken) {
        let _ = writeln!(out, "\nproblem: {}", e.cause);
    }
    for (name, near) in stray_tables(opts, &found) {
        let text = stray_table_text(&name, near.as_deref(), &found);
        let kind = if near.is_some() { "problem" } else { "note" };
        let _ = writeln!(out, "\n{kind}: {text}");
    }
    let _ = writeln!(
        out,
        "\n{n} plugin(s), {} library(ies) not loadable",
        broken.len()
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plugin as the scan finds it: `name`, effect `Notes.Append` (op `append`), the tool
    /// `notes-append`, and the schema `{"type":"object"}`; `change` edits the manifest's JSON.
    fn plugin(file: &str, name: &str, change: impl FnOnce(&mut Value)) -> PluginInfo {
        let mut manifest = serde_json::json!({
            "name": name, "version": "0.1.0", "abi": handler_api::ABI_VERSION,
            "effects": [{"name": "Notes.Append", "class": "write", "ops": ["append"]}],
            "transitions": [{
                "id": "notes-append", "title": "t", "description": "d",
                "inputSchema": {"type": "object", "additionalProperties": false},
                "outputSchema": {"type": "object"},
                "access": {"effect": "Notes.Append", "scope": "any", "cost": 0},
                "declaredEffects": [{"effect": "Notes.Append", "scope": "any", "cost": 1}],
                "plan": {"language": "world/plan-language/v1",
                         "effect": {"effect": "Notes.Append", "scope": "any", "cost": 1},
                         "payload": {"fields": {"op": {"const": "append"}}}}
            }],
            "configSchema": {"type": "object"}
        });
        change(&mut manifest);
        PluginInfo {
            path: PathBuf::from(format!("/plugins/{file}")),
            file_ref: Ref::of(file.as_bytes()),
            manifest: serde_json::from_value(manifest).unwrap(),
        }
    }

    /// The problem `check` finds in `infos`, checked in order, or "" when there is none.
    fn problem(infos: &[PluginInfo]) -> String {
        let opts = PluginOptions::default();
        let mut seen = Seen::default();
        for info in infos {
            if let Err(e) = check(info, &opts, &mut seen) {
                return e.to_string();
            }
        }
        String::new()
    }

    fn one(change: impl FnOnce(&mut Value)) -> String {
        problem(&[plugin("libnotes.so", "notes", change)])
    }

    #[test]
    fn the_fixture_plugin_of_these_tests_passes_every_check() {
        assert_eq!(one(|_| {}), "");
    }

    #[test]
    fn a_shipped_tool_naming_an_effect_its_plugin_does_not_declare_is_refused_at_load() {
        let delete = |m: &mut Value| {
            let doc = serde_json::to_string(&m["transitions"][0]).unwrap();
            let doc = doc
                .replace("Notes.Append", "Notes.Delete")
                .replace("notes-append", "notes-delete");
            m["transitions"][0] = serde_json::from_str(&doc).unwrap();
        };
        assert_eq!(
            one(delete),
            r#"plugin /plugins/libnotes.so: shipped transition "notes-delete" names effect Notes.Delete, which plugin notes does not declare (it declares Notes.Append)"#
        );
    }

    #[test]
    fn a_payload_op_constant_outside_the_effects_allowlist_is_refused_at_load() {
        let op = |value: Value| {
            move |m: &mut Value| {
                m["transitions"][0]["plan"]["payload"]["fields"]["op"]["const"] = value
            }
        };
        assert_eq!(
            one(op("apend".into())),
            r#"plugin /plugins/libnotes.so: shipped transition "notes-append" sends Notes.Append the op "apend", which is not in its op allowlist (append): the daemon would refuse every call"#
        );
        assert!(one(op(7.into())).ends_with("sends Notes.Append the op 7, which is not a string: the daemon would refuse every call"));
        let no_ops = |m: &mut Value| m["effects"][0]["ops"] = serde_json::json!([]);
        assert!(one(no_ops).ends_with(r#"sends Notes.Append the op "append", but plugin notes declares no ops for it: the daemon would refuse every call"#));
        let no_op = |m: &mut Value| m["transitions"][0]["plan"]["payload"] = serde_json::json!({});
        assert!(one(no_op).ends_with(r#"sends Notes.Append a payload without "op", but it accepts only the ops append: the daemon would refuse every call"#));
        // An op from an argument is the agent's: checked on each call, not at load.
        let from_argument = |m: &mut Value| {
            m["transitions"][0]["plan"]["arguments"] =
                serde_json::json!([{"name": "op", "type": "string", "default": "x"}]);
            m["transitions"][0]["plan"]["payload"] = serde_json::json!({"arguments": "all"});
            m["transitions"][0]["inputSchema"]["properties"] =
                serde_json::json!({"op": {"type": "string"}});
        };
        assert_eq!(one(from_argument), "");
    }

    #[test]
    fn a_config_schema_the_daemon_would_misread_is_refused_at_load() {
        let schema = |s: Value| move |m: &mut Value| m["configSchema"] = s;
        let at = "plugin /plugins/libnotes.so: configSchema of plugin notes: ";
        for (s, problem) in [
            (
                serde_json::json!({"type": "object", "properties": {"maxLineBytes": {"type": "integer", "default": "4096"}}}),
                r#"key "maxLineBytes": its default "4096" is not of its type integer"#,
            ),
            (
                serde_json::json!({"type": "object", "properties": {"maxLineBytes": {"type": "integr"}}}),
                r#"key "maxLineBytes": type "integr" is not one the daemon knows (string, integer, number, boolean, array, object); did you mean integer?"#,
            ),
            (
                serde_json::json!({"type": "object", "additionalPropertes": false}),
                r#"keyword "additionalPropertes" is not one the daemon's config check knows; did you mean additionalProperties? (known here: type, properties, additionalProperties, $schema, title, description, default, examples)"#,
            ),
            (
                serde_json::json!({"properties": {"n": {"type": "integer", "maximum": 10, "default": 11}}}),
                r#"key "n": its default 11 must be at most 10"#,
            ),
            (
                serde_json::json!({"properties": {"n": {"type": "integer", "minimum": "1"}}}),
                r#"key "n": "minimum" must be a number"#,
            ),
            (
                serde_json::json!({"additionalProperties": {"type": "string"}}),
                r#""additionalProperties" is {"type":"string"}; the daemon reads only true or false"#,
            ),
        ] {
            assert_eq!(one(schema(s)), format!("{at}{problem}"));
        }
    }

    #[test]
    fn a_hostile_schema_nested_far_past_the_bound_is_refused_without_recursing_into_it() {
        // Far deeper than any JSON text the daemon parses could nest: built here, not parsed.
        // (Not with `json!`, which would serialise each level again.)
        let wrap =
            |key: &str, inner: Value| Value::Object(Map::from_iter([(key.to_owned(), inner)]));
        let deep = (0..100_000).fold(Value::Object(Map::new()), |s, _| wrap("items", s));
        let schema = wrap("properties", wrap("k", deep));
        let problem = authored::check_schema(&schema);
        // Dropping it would recurse as deep as it nests.
        std::mem::forget(schema);
        assert_eq!(
            problem,
            Err(format!(
                r#"key "k"{}: schemas nested more than 8 deep; the daemon's config check reads no deeper"#,
                ".items".repeat(9)
            ))
        );
    }

    #[test]
    fn a_manifest_name_no_operator_could_type_is_refused_at_load() {
        for bad in [
            "My Notes!",
            "",
            "notes.v2",
            "-notes",
            "Notes",
            &"n".repeat(65),
        ] {
            assert_eq!(
                problem(&[plugin("libnotes.so", bad, |_| {})]),
                format!(
                    "plugin /plugins/libnotes.so: manifest name {} is not a plugin name: it must match ^[a-z0-9][a-z0-9-]{{0,63}}$ (operators type it in --handler NAME and [plugins.NAME])",
                    dialect::quote::quote(bad)
                )
            );
        }
        assert_eq!(problem(&[plugin("libnotes.so", "notes-2", |_| {})]), "");
    }

    #[test]
    fn two_plugins_of_one_name_are_refused_naming_both_files() {
        let other_tool = |m: &mut Value| {
            let doc = serde_json::to_string(&m["transitions"][0]).unwrap();
            m["transitions"][0] =
                serde_json::from_str(&doc.replace("notes-append", "notes-other")).unwrap();
            m["effects"][0]["name"] = "Notes.Other".into();
            let doc = serde_json::to_string(&m["transitions"][0]).unwrap();
            m["transitions"][0] =
                serde_json::from_str(&doc.replace("Notes.Append", "Notes.Other")).unwrap();
        };
        assert_eq!(
            problem(&[plugin("liba.so", "notes", |_| {}), plugin("libb.so", "notes", other_tool)]),
            "plugin /plugins/libb.so: plugin name notes is also the name of /plugins/liba.so: --handler notes and [plugins.notes] would select and configure both; remove one, or give one another name"
        );
        // The same bytes under two file names: one library, twice.
        let mut twice = plugin("liba.so", "notes", |_| {});
        twice.path = PathBuf::from("/plugins/libcopy.so");
        assert_eq!(
            problem(&[plugin("liba.so", "notes", |_| {}), twice]),
            format!(
                "plugin /plugins/libcopy.so: this is the same library as /plugins/liba.so (both {}), under another file name: remove one",
                Ref::of(b"liba.so")
            )
        );
    }

    #[test]
    fn one_tool_id_shipped_by_two_plugins_is_refused_naming_both_files() {
        let other_effect = |m: &mut Value| {
            m["effects"][0]["name"] = "Other.Append".into();
            let doc = serde_json::to_string(&m["transitions"][0]).unwrap();
            m["transitions"][0] =
                serde_json::from_str(&doc.replace("Notes.Append", "Other.Append")).unwrap();
        };
        assert_eq!(
            problem(&[
                plugin("liba.so", "notes", |_| {}),
                plugin("libb.so", "other", other_effect)
            ]),
            r#"plugin /plugins/libb.so: shipped transition "notes-append" is also shipped by plugin notes (/plugins/liba.so): tool ids are one namespace; one of the two must go"#
        );
        let twice = |m: &mut Value| {
            let t = m["transitions"][0].clone();
            m["transitions"].as_array_mut().unwrap().push(t);
        };
        assert_eq!(
            one(twice),
            r#"plugin /plugins/libnotes.so: ships transition "notes-append" twice"#
        );
    }

    #[test]
    fn a_handler_name_with_nothing_found_says_none_not_an_empty_list() {
        let opts = PluginOptions {
            dir: PathBuf::from("/plugins"),
            selected: vec!["notes".into()],
            ..PluginOptions::default()
        };
        assert_eq!(
            check_selected(&opts, &[], &[]).unwrap_err().to_string(),
            "plugin /plugins: --handler notes: no plugin of that name here (found: none)"
        );
    }

    #[test]
    fn a_tool_id_too_long_for_an_mcp_name_is_refused_at_load_not_on_every_tools_list() {
        // 63 bytes with one `.` (two bytes in an MCP name): 64, the most; then 65.
        let id = |tail: &str| format!("notes.{}{tail}", "a".repeat(57));
        let rename = |to: String| {
            move |m: &mut Value| {
                let doc = serde_json::to_string(&m["transitions"][0]).unwrap();
                m["transitions"][0] =
                    serde_json::from_str(&doc.replace("notes-append", &to)).unwrap();
            }
        };
        assert_eq!(one(rename(id(""))), "");
        assert_eq!(
            one(rename(id("b"))),
            format!(
                r#"plugin /plugins/libnotes.so: shipped transition "{}" has an MCP name of 65 bytes (notes_d{}b); the limit is 64: every session granted its access effect would be refused its tool list; give it a shorter id"#,
                id("b"),
                "a".repeat(57)
            )
        );
    }

    #[test]
    fn a_plugin_declaring_the_daemons_reserved_world_commit_effect_is_refused_at_load() {
        let world = |effect: &'static str| {
            move |m: &mut Value| {
                let doc = serde_json::to_string(&m).unwrap();
                *m = serde_json::from_str(&doc.replace("Notes.Append", effect)).unwrap();
            }
        };
        for effect in ["World.Commit", "World.Anything", "world.Commit"] {
            assert_eq!(
                one(world(effect)),
                format!("plugin /plugins/libnotes.so: plugin notes declares the effect {effect}, in the namespace World, which the daemon reserves for its own effects (a World.Commit=log:N grant pays for operator commits): name it under your plugin's own namespace")
            );
        }
        assert_eq!(one(world("Worldly.Commit")), "");
    }

    #[test]
    fn an_effect_declared_twice_in_one_manifest_is_refused_as_such_not_as_claimed_by_itself() {
        let twice = |m: &mut Value| {
            let e = m["effects"][0].clone();
            m["effects"].as_array_mut().unwrap().push(e);
        };
        assert_eq!(
            one(twice),
            "plugin /plugins/libnotes.so: plugin notes declares the effect Notes.Append twice: declare each effect once"
        );
    }

    #[test]
    fn a_manifest_that_lies_about_its_abi_or_carries_unbounded_or_unprintable_fields_is_refused() {
        let set = |key: &'static str, v: Value| move |m: &mut Value| m[key] = v;
        let at = "plugin /plugins/libnotes.so: ";
        assert_eq!(
            one(set("abi", 99.into())),
            format!("{at}plugin notes's manifest says abi 99, but its library answers abi_version() {}: the manifest must name the ABI it was built for (handler-api's export_plugin! sets it)", handler_api::ABI_VERSION)
        );
        let version = |v: &str| {
            format!("{at}plugin notes's version {v} is not a version: it must be 1 to 64 bytes of letters, digits and . + - _ (such as 0.1.0; every effect record carries it)")
        };
        assert_eq!(one(set("version", "v".repeat(64).into())), "");
        assert_eq!(
            one(set("version", "v".repeat(3 << 20).into())),
            version(&format!("\"{}\"… (3145728 bytes in all)", "v".repeat(64)))
        );
        assert_eq!(one(set("version", "".into())), version("\"\""));
        assert_eq!(
            one(set("version", "1.0\nproblem: none".into())),
            version(r#""1.0\nproblem: none""#)
        );
        assert_eq!(one(set("description", "d".repeat(1024).into())), "");
        assert_eq!(
            one(set("description", "d".repeat(1025).into())),
            format!("{at}plugin notes's description is 1025 bytes, more than the 1024 it may be: make it one sentence")
        );
        let effect = |name: &str| {
            let name = name.to_owned();
            move |m: &mut Value| m["effects"][0]["name"] = name.into()
        };
        for (bad, shown) in [
            ("", r#""""#),
            (
                "Notes.Append\nproblem: none",
                r#""Notes.Append\nproblem: none""#,
            ),
            ("Notes=x", r#""Notes=x""#),
            ("Notes..Append", r#""Notes..Append""#),
        ] {
            assert_eq!(
                one(effect(bad)),
                format!("{at}plugin notes declares the effect {shown}, which is not an effect name: it must be dot-separated names, each a letter and then letters, digits and _, at most 128 bytes in all (such as Notes.Append), as grants name it")
            );
        }
        let described =
            |n: usize| move |m: &mut Value| m["effects"][0]["description"] = "d".repeat(n).into();
        assert!(one(described(1024)).is_empty());
        assert_eq!(
            one(described(1025)),
            format!("{at}plugin notes's description of the effect Notes.Append is 1025 bytes, more than the 1024 it may be: make it one sentence")
        );
    }

    #[test]
    fn what_a_plugin_wrote_is_printed_one_line_each_never_a_line_of_its_own() {
        assert_eq!(
            one_line("evil\n  problem: none\r\u{1b}[31m\t\u{202e}ok"),
            r"evil\n  problem: none\r\u001b[31m\t\u202eok"
        );
        let e = PluginError::new(Path::new("/plugins/lib\nx.so"), "declined:\nnot today");
        assert_eq!(
            e.to_string(),
            r"plugin /plugins/lib\nx.so: declined:\nnot today"
        );
    }
}
