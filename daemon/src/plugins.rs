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
//!
//! | module | what |
//! |---|---|
//! | `scan` | the libraries in the plugin directory, each loaded and describing itself |
//! | `library`, [`image`], `writers` | opening one library: who may have written it, its bytes sealed, hashed and loaded |
//! | `deadline` | a plugin's code run against `[limits] plugin_start_ms` ([`exit`]) |
//! | `checks`, `authored` | what a plugin declares, checked at load against itself and the plugins before it |
//! | `config` | the operator's `[plugins.NAME]` tables and `--handler` names, against what was found |
//! | `host`, [`log`] | what a plugin's code is offered: its log, and publishing for `Registry.Publish` |
//! | `adapter`, `request` | a started plugin as broker-core's [`EffectHandler`] |
//! | `report` | the text of `worldd handlers` |

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use broker_core::coordinator::{EffectHandler, Handlers};
use broker_core::transition::Transition;
use handler_api::EffectClass;
use serde_json::Value;

use crate::limits::Limits;
use crate::metrics::Metrics;
use crate::text::one_line;

mod adapter;
mod authored;
mod checks;
mod config;
mod deadline;
mod host;
pub mod image;
mod library;
pub mod log;
mod report;
mod request;
mod scan;
pub(crate) mod writers;

pub use checks::{check, Checked, Seen};
pub use config::{check_config, effective_config};
pub use deadline::{exit, Stops};
pub(crate) use host::publisher;
pub use host::{Publisher, PUBLISH_EFFECT};
pub use library::OpenedLibrary;
pub use report::report;
pub use scan::{default_dir, scan, PluginInfo, Scanned};

use adapter::PluginHandler;
use config::{check_selected, check_tables};
use deadline::within;
use host::PluginHost;

/// One line naming the file and the cause.
#[derive(Debug, thiserror::Error)]
#[error("plugin {path}: {cause}")]
pub struct PluginError {
    pub path: String,
    pub cause: String,
    /// The other library of a clash (a tool id or an effect two plugins take), which `path`
    /// (the plugin directory) does not name: `worldd handlers` lists the problem under both.
    pub clash_with: Option<PathBuf>,
}

impl PluginError {
    /// The path and the cause each as one line: both may carry what a plugin wrote (its file
    /// name, its manifest's words, its constructor's error), and a line break there would add
    /// a line of its own to `worldd handlers` or the log (a `problem: none` that never was).
    fn new(path: &Path, cause: impl Into<String>) -> PluginError {
        PluginError {
            path: one_line(&path.display().to_string()).into_owned(),
            cause: one_line(&cause.into()).into_owned(),
            clash_with: None,
        }
    }

    /// A clash between two libraries, said of the plugin directory `dir` (neither library is
    /// more at fault), carrying the earlier one, `other`.
    fn clash(dir: &Path, cause: impl Into<String>, other: &Path) -> PluginError {
        PluginError {
            clash_with: Some(other.to_path_buf()),
            ..PluginError::new(dir, cause)
        }
    }
}

/// What the operator chose.
#[derive(Clone, Default)]
pub struct PluginOptions {
    pub dir: PathBuf,
    /// `--handler NAME` (repeatable); empty = every plugin in the directory.
    pub selected: Vec<String>,
    /// The selection is the config file's `[serve] handlers`, not flags: refusals name the key.
    pub selected_in_file: bool,
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
    /// The handlers this set started, each with its library's path, for [`PluginSet::stop`].
    started: Vec<(PathBuf, Arc<PluginHandler>)>,
}

impl PluginSet {
    /// Stop the plugins this set started: each handler dropped (the plugin's `Drop` runs, a
    /// panic in it caught by handler-api), within `deadline` each. For quickstart's trial
    /// start: its handlers, left alive, kept what they hold (a port, a lock, a child) beside
    /// the ones serving builds again, and a plugin that holds anything exclusive failed the
    /// real start. The libraries stay loaded: plugins are never unloaded.
    pub fn stop(self, deadline: std::time::Duration) {
        let PluginSet {
            handlers, started, ..
        } = self;
        // The adapters' other owners, so that each is the set's alone.
        drop(handlers);
        for (path, adapter) in started {
            let Ok(adapter) = Arc::try_unwrap(adapter) else {
                // Held elsewhere still: its Drop does not run, and what it holds stays held.
                tracing::warn!(
                    path = %path.display(),
                    "a plugin the trial start built is still held elsewhere and is not stopped; the start that follows may find what it holds taken"
                );
                continue;
            };
            let handler = adapter.into_handler();
            if let Err(e) = within(deadline, &path, "stopping", Stops::Trial, move || {
                drop(handler)
            }) {
                tracing::warn!("{e}");
            }
        }
    }

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

/// A constructor error starting with this means "not started", not "bad config".
pub const DECLINED: &str = "declined: ";

/// The most of a plugin's own text the daemon passes on, in bytes: its decline reason (logged,
/// and served by `GET /v1/handlers` to every credential), a constructor's error, its manifest's
/// error. Cut as the broker cuts a handler's failure message, and for the same reason: a
/// plugin's 20 MB reason must not be a 20 MB log line and a 20 MB answer to each request.
pub const MAX_PLUGIN_TEXT_BYTES: usize = 4096;

/// `text` cut to [`MAX_PLUGIN_TEXT_BYTES`] (at a character's edge), saying how many bytes were
/// left out.
pub fn cut_plugin_text(text: String) -> String {
    if text.len() <= MAX_PLUGIN_TEXT_BYTES {
        return text;
    }
    let shown = crate::text::head(&text, MAX_PLUGIN_TEXT_BYTES);
    format!(
        "{shown}… ({} bytes more; the daemon passes on at most {MAX_PLUGIN_TEXT_BYTES} of a plugin's text)",
        text.len() - shown.len()
    )
}

/// Load the selected plugins and build their handlers.
///
/// Every library is scanned and checked, and the operator's selection and `[plugins.NAME]`
/// tables are set against the names found, before any plugin's constructor runs: a mistake
/// that needs no plugin code (a misspelled table, a `--handler` typo) is then said as itself,
/// not hidden behind a constructor refusing the empty config the typo left it, and no plugin
/// is started (its state directory made, its tools looked up) for a start that stops anyway.
pub fn load(opts: &PluginOptions) -> Result<PluginSet, PluginError> {
    let ready = checked(opts)?;
    let deadline = opts.limits.plugin_start;
    let mut handlers = Handlers::new();
    let mut transitions = Vec::new();
    let mut plugins = Vec::new();
    let mut classes = HashMap::new();
    let mut declined = Vec::new();
    let mut unselected = Vec::new();
    let mut running = Vec::new();
    for (info, plugin, checked) in ready {
        if !checked.selected {
            // Not enabled here: its tools are still published, so a call to one is refused
            // by R8 ("not enabled for this daemon") rather than looking like an unknown tool,
            // whatever serves the effects they name.
            for t in &checked.transitions {
                handlers.ship_not_running(&t.id, &info.manifest.name);
            }
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
        let handler = match started.map_err(cut_plugin_text) {
            Ok(h) => h,
            // A plugin may decline to start (e.g. a tool binary is not configured): its tools
            // are still published, and refused by R8 when called.
            Err(e) if e.starts_with(DECLINED) => {
                tracing::warn!(plugin = %name, path = %info.path.display(), "plugin {name} not started: {e}");
                for t in &checked.transitions {
                    handlers.ship_not_running(&t.id, &name);
                }
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
        let plugin_handler = Arc::new(PluginHandler::new(&info, handler));
        running.push((info.path.clone(), plugin_handler.clone()));
        let adapter: Arc<dyn EffectHandler> = plugin_handler;
        for e in &info.manifest.effects {
            classes.insert(e.name.clone(), e.class);
            handlers
                .insert(&e.name, adapter.clone())
                .map_err(|e| PluginError::new(&info.path, e.to_string()))?;
            if e.class == EffectClass::Read {
                handlers.mark_read_only(&e.name);
            }
        }
        transitions.extend(checked.transitions);
        tracing::info!(plugin = %name, version = %info.manifest.version, path = %info.path.display(), "loaded plugin");
        plugins.push(info);
    }
    Ok(PluginSet {
        handlers,
        transitions,
        plugins,
        declined,
        unselected,
        classes,
        started: running,
    })
}

/// What [`load`] checks before it runs any plugin's constructor, alone: for `worldd handlers
/// --check`, whose verdict is then `serve`'s, in its words.
pub fn check_before_start(opts: &PluginOptions) -> Result<(), PluginError> {
    checked(opts).map(drop)
}

/// Every library scanned and checked, and the selection and `[plugins.NAME]` tables set
/// against the names found: the libraries to start, or why `serve` would not start.
fn checked(
    opts: &PluginOptions,
) -> Result<Vec<(PluginInfo, handler_api::LoadedPlugin, Checked)>, PluginError> {
    let mut seen = Seen::default();
    let mut found = Vec::new();
    let mut broken = Vec::new();
    let mut ready = Vec::new();
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
        ready.push((info, plugin, checked));
    }
    check_selected(opts, &found, &broken)?;
    check_tables(opts, &found)?;
    Ok(ready)
}

#[cfg(test)]
mod tests {
    use super::*;

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
