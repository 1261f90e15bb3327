//! `worldd serve` and `worldd handlers`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use broker_core::coordinator::{Coordinator, CoordinatorConfig, Handlers};
use broker_core::refusal_rate::RefusalRate;
use broker_core::registry;
use broker_core::store::{Store, StoreError, StoreOptions};
use clap::Args;
use handler_api::EffectClass;
use serde::Deserialize;

use super::dir_locks::{
    existing_store_lock, lock_ancestors, lock_state_dirs, lock_store_dir, nobody_serves,
    refuse_inside_another, workspace_lock, writer_lock,
};
use super::paths::{absolute_now, store_lock_file};
use super::placement::{
    make_private_dir, others_may_enter, refuse_loose_dir, refuse_loose_store, refuse_nested,
    refuse_state_dir_in_workspace, remains_of_a_store,
};
use super::plugin_config::{self, DeprecatedFlags, Override};
use super::{startup, CliResult, Failure};
use crate::byte_size::ByteSize;
use crate::catalog::Catalog;
use crate::edge::{self, ServerSection};
use crate::limits::LimitsSection;
use crate::metrics::Metrics;
use crate::plugins::{self, PluginOptions};
use crate::scheduling::{self, Scheduling};
use crate::server;
use crate::state::{AppState, DaemonInfo};

/// How long a stopping daemon waits for handlers past their deadline to return (and journal
/// their outcome) before it exits and leaves their intents indeterminate.
const HUNG_HANDLER_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

pub const DEFAULT_BIND: &str = "127.0.0.1:7644";

#[derive(Args, Debug, Clone, Default)]
pub struct PluginArgs {
    /// Where plugin libraries are (default: the directory of the worldd executable).
    #[arg(long)]
    pub plugin_dir: Option<PathBuf>,
    /// Enable only this plugin (repeatable; default: every plugin found).
    #[arg(long = "handler")]
    pub handlers: Vec<String>,
    /// A TOML file: `[serve]` settings and one `[plugins.NAME]` table per plugin.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Set one key of a plugin's config over its `[plugins.NAME]` table (repeatable); VALUE is
    /// read as JSON when it parses, else as a string.
    #[arg(long = "plugin-config", value_name = "NAME.KEY=VALUE")]
    pub plugin_config: Vec<String>,
    #[command(flatten)]
    pub deprecated: DeprecatedFlags,
}

impl PluginArgs {
    /// `--plugin-config` and the deprecated flags, in the order they apply (the deprecated
    /// flags first, so an explicit `--plugin-config` of the same key wins).
    fn overrides(&self) -> Result<Vec<Override>, String> {
        let mut out = self.deprecated.overrides();
        for text in &self.plugin_config {
            out.push(Override::parse(text).map_err(|e| e.to_string())?);
        }
        Ok(out)
    }
}

#[derive(Args, Debug, Default)]
pub struct ServeArgs {
    /// The store directory (created with its genesis if absent) (default: .world/db).
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// Episode worktrees are <workspace-root>/<episode> (default: .world/worktrees).
    #[arg(long)]
    pub workspace_root: Option<PathBuf>,
    /// Loopback address to listen on; port 0 picks a free port (default: 127.0.0.1:7644).
    #[arg(long)]
    pub bind: Option<String>,
    /// Serve GET /v1/* without a session (by default reads need one).
    #[arg(long)]
    pub open_reads: bool,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// A Host name to answer besides the loopback names (repeatable; `server.allowed_hosts`).
    #[arg(long = "allowed-host")]
    pub allowed_hosts: Vec<String>,
    /// An Origin to answer besides loopback origins (repeatable; `server.allowed_origins`).
    #[arg(long = "allowed-origin")]
    pub allowed_origins: Vec<String>,
    /// The URL the agent card advertises (`server.public_url`; default: the bound address).
    #[arg(long)]
    pub public_url: Option<String>,
    /// Most connections open at once (`server.max_connections`; default: 4096).
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Calls that may execute at once across episodes (`limits.execution_slots`; default:
    /// 128).
    #[arg(long)]
    pub execution_slots: Option<usize>,
    /// How long a handler may run, in milliseconds (`limits.handler_deadline_ms`; default:
    /// 10000).
    #[arg(long)]
    pub handler_deadline_ms: Option<u64>,
    /// Largest POST /v1/commit body, in bytes or a size such as 4MiB
    /// (`limits.commit_body_bytes`; 1 to 8MiB).
    #[arg(long, alias = "max-commit-bytes", value_name = "SIZE")]
    pub commit_body_bytes: Option<ByteSize>,
    /// How the kernel schedules the daemon's threads (`serve.scheduling`; default inherit).
    #[arg(long, value_enum)]
    pub scheduling: Option<Scheduling>,
    #[command(flatten)]
    pub plugins: PluginArgs,
}

/// How large the store may grow and what refused calls cost (`[serve]` keys of the same
/// names, in snake case).
#[derive(Args, Debug, Clone, Default)]
pub struct LimitArgs {
    /// The most the store may occupy (bytes, or a size such as 64GiB); it grows by itself up
    /// to this ceiling (`--map-size` is the old name) (default: 16GiB).
    #[arg(long, value_name = "SIZE")]
    pub store_ceiling: Option<ByteSize>,
    /// The old name of --store-ceiling: a flag of its own, so that both given is said as such
    /// (as an alias, clap called --store-ceiling "used multiple times").
    #[arg(long, value_name = "SIZE", hide = true)]
    pub map_size: Option<ByteSize>,
    /// Room kept below the ceiling for calls in flight and the operator's verbs; past it,
    /// new calls are refused (default: 256MiB, or an eighth of a smaller ceiling).
    #[arg(long, value_name = "SIZE")]
    pub store_reserve: Option<ByteSize>,
    /// Growth of the daemon's file-backed resident memory after which the store's map is
    /// released (its pages stay cached by the kernel); 0 never releases (default: 64MiB).
    #[arg(long, value_name = "SIZE")]
    pub store_resident_bytes: Option<ByteSize>,
    /// Plan refusals and broker denials each credential may have committed per minute,
    /// sustained, each counted once per started 16 KiB it stores; 0 turns the limit off
    /// (default 60).
    #[arg(long)]
    pub refusals_per_minute: Option<f64>,
    /// How many refusals and denials a credential may have committed in a burst (default 60).
    #[arg(long)]
    pub refusal_burst: Option<u32>,
}

#[derive(Args, Debug)]
pub struct HandlersArgs {
    #[command(flatten)]
    pub plugins: PluginArgs,
    /// List nothing: make the checks `serve` makes of these flags and this config before it
    /// opens the store or starts a plugin, and exit 2 with its refusal when it would refuse.
    #[arg(long)]
    pub check: bool,
    /// With --check: the store directory `serve` is given (its --db), for the checks of where
    /// the store and the workspace root lie.
    #[arg(long, requires = "check")]
    pub db: Option<PathBuf>,
    /// With --check: the workspace root `serve` is given (its --workspace-root).
    #[arg(long, requires = "check")]
    pub workspace_root: Option<PathBuf>,
    /// With --check: the address `serve` is given (its --bind), checked against its bind
    /// policy (nothing is bound).
    #[arg(long, requires = "check")]
    pub bind: Option<String>,
}

/// The TOML config file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    #[serde(default)]
    pub serve: ServeSection,
    /// The edge: Host and Origin lists, connections, request timeouts.
    #[serde(default)]
    pub server: ServerSection,
    /// Sizes, counts and deadlines of calls.
    #[serde(default)]
    pub limits: LimitsSection,
    #[serde(default)]
    pub plugins: BTreeMap<String, toml::Table>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeSection {
    pub db: Option<PathBuf>,
    pub workspace_root: Option<PathBuf>,
    pub bind: Option<String>,
    pub plugin_dir: Option<PathBuf>,
    #[serde(default)]
    pub handlers: Vec<String>,
    #[serde(default)]
    pub open_reads: bool,
    /// The old name of `store_ceiling`, a key of its own so that both given is said as such
    /// (an alias made it "duplicate field `store_ceiling`", at the table's header); folded into
    /// `store_ceiling` by [`read_config`].
    pub map_size: Option<toml::Spanned<ByteSize>>,
    pub store_ceiling: Option<ByteSize>,
    pub store_reserve: Option<ByteSize>,
    pub store_resident_bytes: Option<ByteSize>,
    pub refusals_per_minute: Option<f64>,
    pub refusal_burst: Option<u32>,
    pub scheduling: Option<Scheduling>,
}

/// The least store ceiling `serve` accepts: 1 MiB.
const MIN_CEILING: u64 = 1 << 20;

/// Below this reserve a call admitted near the ceiling may not fit: a call stores its
/// arguments (at most [`broker_core::coordinator::MAX_IO_BYTES`]) about three times, plus its
/// outcome and entry.
const MIN_RESERVE: u64 = 4 * broker_core::coordinator::MAX_IO_BYTES as u64;

/// The config file, or what is wrong with it (each verb says it in its own words).
fn read_config(path: &Option<PathBuf>) -> Result<ConfigFile, String> {
    let Some(path) = path else {
        return Ok(ConfigFile::default());
    };
    let text = super::input::file_text(
        path,
        super::input::CONFIG_BYTES,
        &path.display().to_string(),
    )
    .map_err(|f| f.message)?;
    let mut file: ConfigFile = toml::from_str(&text)
        .map_err(|e| format!("{}: {}", path.display(), toml_error(&text, &e)))?;
    if let Some(old) = file.serve.map_size.take() {
        if file.serve.store_ceiling.is_some() {
            let line = text[..old.span().start.min(text.len())]
                .matches('\n')
                .count()
                + 1;
            return Err(format!(
                "{}: line {line}: map_size is the old name of store_ceiling: give one",
                path.display()
            ));
        }
        file.serve.store_ceiling = Some(old.into_inner());
    }
    Ok(file)
}

/// `[serve] db` and `workspace_root` of the config file at `path`, for the store-side verbs'
/// `--config`: read by the loader `serve` reads it with (every table checked), and a path no
/// shell expanded refused as `serve` refuses it.
pub(super) fn config_store_paths(
    path: &Path,
) -> Result<(Option<PathBuf>, Option<PathBuf>), String> {
    let file = read_config(&Some(path.to_path_buf()))?;
    for (key, given) in [
        ("[serve] db", &file.serve.db),
        ("[serve] workspace_root", &file.serve.workspace_root),
    ] {
        if let Some(given) = given {
            unexpanded(&given.to_string_lossy(), key)?;
        }
    }
    Ok((file.serve.db, file.serve.workspace_root))
}

/// The parser's account of a config file that does not parse: as the parser gives it (the
/// line it stopped at, and a caret under the place), unless that line is too long to show,
/// when only where and why (a file of one 200 KB line would otherwise be printed whole).
fn toml_error(text: &str, e: &toml::de::Error) -> String {
    const LONGEST_SHOWN_LINE: usize = 200;
    let Some(at) = e
        .span()
        .map(|s| s.start)
        .filter(|&at| text.is_char_boundary(at))
    else {
        return e.to_string();
    };
    let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let end = text[at..].find('\n').map_or(text.len(), |i| at + i);
    if end - start <= LONGEST_SHOWN_LINE {
        return e.to_string();
    }
    let line = text[..at].matches('\n').count() + 1;
    let column = text[start..at].chars().count() + 1;
    format!(
        "TOML parse error at line {line}, column {column}: {} (the line is {} bytes long, not shown)",
        e.message().trim_end(),
        end - start
    )
}

/// A plugin's config value as the JSON the plugin is given. TOML has values JSON has not: a
/// datetime went to the plugin as the TOML library's own marker object, and `nan` or `inf` as
/// `null`. Refused instead, `Err` saying where below the key (`.a[2]: …`) and what.
fn json_of_toml(value: &toml::Value) -> Result<serde_json::Value, String> {
    use serde_json::Value as J;
    Ok(match value {
        toml::Value::String(s) => J::String(s.clone()),
        toml::Value::Integer(i) => J::from(*i),
        toml::Value::Boolean(b) => J::Bool(*b),
        toml::Value::Float(f) => match serde_json::Number::from_f64(*f) {
            Some(n) => J::Number(n),
            None => {
                return Err(format!(
                    ": {f} has no JSON value; give a finite number (or a string)"
                ))
            }
        },
        toml::Value::Datetime(d) => {
            return Err(format!(
                ": the TOML date-time {d} has no JSON value; quote it to give a string"
            ))
        }
        toml::Value::Array(items) => J::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| json_of_toml(item).map_err(|why| format!("[{i}]{why}")))
                .collect::<Result<_, _>>()?,
        ),
        toml::Value::Table(table) => J::Object(
            table
                .iter()
                .map(|(k, item)| {
                    json_of_toml(item)
                        .map(|v| (k.clone(), v))
                        .map_err(|why| format!(".{k}{why}"))
                })
                .collect::<Result<_, _>>()?,
        ),
    })
}

/// Plugin options from the flags over the config file. `Err` names the table or flag that
/// cannot be read.
pub fn plugin_options(args: &PluginArgs, file: &ConfigFile) -> Result<PluginOptions, String> {
    let mut configs = BTreeMap::new();
    for (name, table) in &file.plugins {
        let mut value = serde_json::Map::new();
        for (key, item) in table {
            let item = json_of_toml(item).map_err(|why| format!("[plugins.{name}] {key}{why}"))?;
            value.insert(key.clone(), item);
        }
        configs.insert(name.clone(), serde_json::Value::Object(value));
    }
    plugin_config::apply(&mut configs, args.overrides()?);
    for (name, config) in &configs {
        if let Some(dir) = config.get("stateDir").and_then(serde_json::Value::as_str) {
            unexpanded(dir, &format!("[plugins.{name}] stateDir"))?;
        }
    }
    match (&args.plugin_dir, &file.serve.plugin_dir) {
        (Some(dir), _) => unexpanded(&dir.to_string_lossy(), "--plugin-dir")?,
        (None, Some(dir)) => unexpanded(&dir.to_string_lossy(), "[serve] plugin_dir")?,
        (None, None) => {}
    }
    Ok(PluginOptions {
        dir: args
            .plugin_dir
            .clone()
            .or_else(|| file.serve.plugin_dir.clone())
            .unwrap_or_else(plugins::default_dir),
        selected: if args.handlers.is_empty() {
            file.serve.handlers.clone()
        } else {
            args.handlers.clone()
        },
        selected_in_file: args.handlers.is_empty() && !file.serve.handlers.is_empty(),
        configs,
        state_root: None,
        publisher: None,
        // `[limits]` of the file: `plugin_start_ms` bounds `worldd handlers` as it bounds
        // `serve` (which sets the limits again with its flags over them). Checked where they
        // are in force: by `serve` once its flags are applied, by `handlers` as they are.
        limits: file.limits.values(),
        metrics: Default::default(),
    })
}

pub fn handlers(a: HandlersArgs) -> CliResult {
    if a.check {
        return would_serve_start(a);
    }
    // `handlers` starts nothing: a file it cannot read is its own failure, exit 1.
    let file = read_config(&a.plugins.config).map_err(Failure::usage)?;
    let opts = plugin_options(&a.plugins, &file).map_err(Failure::usage)?;
    file.limits.resolve().map_err(Failure::usage)?;
    // Plugin code that calls `exit()` while its library loads ends the command with 70 and a
    // line, not with its own status (0 would pass for a complete report).
    let armed = crate::exit_guard::arm_for(
        crate::exit_guard::Who::Command("worldd handlers"),
        "loaded its plugins",
    );
    let hint = plugin_dir_hint(&opts.dir, &a.plugins, &file);
    let text = plugins::report(&opts).map_err(|e| Failure::usage(format!("{e}{hint}")))?;
    drop(armed);
    super::output::write(text)
}

/// `worldd handlers --check`: `serve`'s own checks of `plugins` and the config they name, in
/// its order and words (`daemon startup failed at <stage>: …`, exit 2), up to the point where
/// it would open the store or run a plugin's constructor: a pre-flight before a restart, which
/// must not take the store's or the plugins' locks the running daemon holds.
fn would_serve_start(a: HandlersArgs) -> CliResult {
    let plugins = &a.plugins;
    let serve = ServeArgs {
        plugins: plugins.clone(),
        db: a.db,
        workspace_root: a.workspace_root,
        bind: a.bind,
        ..ServeArgs::default()
    };
    // In `run_with`'s order, up to where it would bind or open anything.
    let file = read_config(&plugins.config).map_err(|e| startup("config", e))?;
    let mut opts = plugin_options(plugins, &file).map_err(|e| startup("config", e))?;
    let settings = Settings::resolve(&serve, &file)?;
    // The bind policy only parses the address: a `[serve] bind` of 0.0.0.0 or a port out of
    // range passed the check while the restart exited 2 at bind-policy.
    resolve_bind_as(&settings.bind, settings.bind_key)?;
    refuse_inside_another(&settings.db, &settings.workspace_root)?;
    opts.limits = settings.limits;
    refuse_state_dir_in_workspace(&opts, &settings.workspace_root)?;
    // As `handlers` without `--check`: an `exit()` while a library loads is no verdict.
    let armed = crate::exit_guard::arm_for(
        crate::exit_guard::Who::Command("worldd handlers"),
        "loaded its plugins",
    );
    let hint = plugin_dir_hint(&opts.dir, plugins, &file);
    let checked =
        plugins::check_before_start(&opts).map_err(|e| startup("plugins", format!("{e}{hint}")));
    drop(armed);
    checked
}

/// How `serve` gets its socket and where it announces readiness.
#[derive(Debug, Default)]
pub struct Launch {
    /// A listener bound beforehand (quickstart binds before it creates anything).
    pub listener: Option<std::net::TcpListener>,
    /// Announce `worldd listening on …` on stderr instead of stdout (quickstart keeps stdout
    /// for the client configuration).
    pub ready_on_stderr: bool,
    /// The store's lock, taken beforehand ([`existing_store_lock`]: quickstart checks that no
    /// other daemon serves the store before it mints and prints).
    pub store_lock: Option<std::fs::File>,
}

pub fn run(a: ServeArgs) -> CliResult {
    run_with(a, Launch::default())
}

/// Bind `addr` now, before anything is created: a taken port leaves no store behind.
pub fn bind_now(addr: SocketAddr) -> Result<std::net::TcpListener, Failure> {
    crate::edge::listener::bind(addr).map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
            "; is another worldd already serving here? Stop it, or pick a free port with --bind 127.0.0.1:PORT (nothing was created)"
        } else {
            ""
        };
        startup("listen", format!("{addr}: {e}{hint}"))
    })
}

/// The `[serve]` table of `--config` (an empty one without it), for `quickstart`, which
/// decides the address, the store and the workspace root itself.
pub fn config_serve_section(config: &Option<PathBuf>) -> Result<ServeSection, Failure> {
    read_config(config)
        .map(|file| file.serve)
        .map_err(|e| startup("config", e))
}

/// What `run_with` reads before it makes anything, read alone: for `quickstart`, which makes a
/// store and mints a credential before it serves, so that a mistake in `--config` or
/// `--plugin-config` stops it before anything is made or asked.
pub fn check_settings(a: &ServeArgs) -> CliResult {
    let file = read_config(&a.plugins.config).map_err(|e| startup("config", e))?;
    plugin_options(&a.plugins, &file).map_err(|e| startup("config", e))?;
    let settings = Settings::resolve(a, &file)?;
    refuse_inside_another(&settings.db, &settings.workspace_root)
}

/// The plugins `run_with` would start, started once and dropped, their state kept in a scratch
/// directory removed after: for `quickstart`, so that a config a plugin itself refuses (an
/// `ailang.bin` that is not there) stops it before it makes a store and mints a credential.
/// `serve` starts them again.
pub fn try_plugins(a: &ServeArgs) -> CliResult {
    let file = read_config(&a.plugins.config).map_err(|e| startup("config", e))?;
    let mut opts = plugin_options(&a.plugins, &file).map_err(|e| startup("config", e))?;
    let settings = Settings::resolve(a, &file)?;
    opts.limits = settings.limits.clone();
    // What `serve` refuses of a `stateDir` the operator set, refused now too: inside the
    // workspace root, or held by another daemon.
    refuse_state_dir_in_workspace(&opts, &settings.workspace_root)?;
    let _held = lock_state_dirs(&opts, &[])?;
    let scratch = tempfile::Builder::new()
        .prefix("worldd-quickstart-")
        .tempdir()
        .map_err(|e| {
            startup(
                "plugins",
                format!("a scratch directory for a trial start: {e}"),
            )
        })?;
    opts.state_root = Some(scratch.path().join("plugin-state"));
    // As `serve` does before a plugin's constructor can start a program.
    crate::descriptors::keep_from_programs();
    tracing::info!("trying the plugins before anything is made (serving starts them again)");
    let armed = crate::exit_guard::arm_for(
        crate::exit_guard::Who::Command("worldd quickstart"),
        "tried its plugins",
    );
    // Stopped (their handlers dropped, each plugin's Drop run) while an `exit()` in them is
    // still said: left alive, a trial handler kept what it holds (a port, a lock) beside the
    // one serving builds again, and a plugin holding anything exclusive failed the real start.
    let deadline = opts.limits.plugin_start;
    let started = plugins::load(&opts)
        .map(|set| set.stop(deadline))
        .map_err(|e| startup("plugins", e));
    drop(armed);
    started
}

pub fn run_with(a: ServeArgs, launch: Launch) -> CliResult {
    // First, while this is the only thread: it takes the variable out of the environment.
    let manager = crate::service_manager::Notifier::from_env();
    let (ready, held) = start(&a, launch)?;
    let stopped = serve(ready, manager);
    let served = drain(stopped);
    // Only after the drain: the calls it waited for commit under these locks.
    held.release();
    served
}

/// What [`start`] made for [`serve`]: the bound socket, the open store, the plugins' handlers
/// and the runtime they run on, with the settings they run under.
struct Ready {
    listener: std::net::TcpListener,
    store: Store,
    handlers: Handlers,
    classes: HashMap<String, EffectClass>,
    catalog: Catalog,
    runtime: tokio::runtime::Runtime,
    settings: Settings,
    /// The workspace root, resolved before any plugin code ran.
    root_at: PathBuf,
    metrics: Metrics,
    ready_on_stderr: bool,
}

/// What the daemon holds from its start until its calls are drained ([`Held::release`]).
struct Held {
    /// The store directory's lock ([`lock_store_dir`]).
    store_dir: Option<std::fs::File>,
    /// The plugins, their handlers taken for the coordinator: each plugin's `Drop` runs as its
    /// last handler goes.
    plugins: plugins::PluginSet,
    /// The store's writer lock, the workspace root's, the plugins' `stateDir`s' and the
    /// ancestors' ([`lock_ancestors`]), released in that order.
    locks: (
        std::fs::File,
        Option<std::fs::File>,
        Vec<std::fs::File>,
        Vec<std::fs::File>,
    ),
    /// The exit guard ([`crate::exit_guard::arm`]).
    armed: crate::exit_guard::Armed,
    /// The plugin options, whose publisher holds a handle on the store.
    opts: PluginOptions,
}

impl Held {
    /// Let go of it all, in the order a daemon always has: the store directory's lock, the
    /// plugins, the locks, then the exit guard, after the plugins' handlers.
    fn release(self) {
        let Held {
            store_dir,
            plugins,
            locks,
            armed,
            opts,
        } = self;
        drop(store_dir);
        drop(plugins);
        drop(locks);
        drop(armed);
        drop(opts);
    }
}

/// Read the settings, take the locks, make or open the store, start the plugins and build the
/// runtime: everything before serving, in an order that is deliberate step by step. A failure
/// here exits with its stage and leaves nothing this start made.
fn start(a: &ServeArgs, launch: Launch) -> Result<(Ready, Held), Failure> {
    let file = read_config(&a.plugins.config).map_err(|e| startup("config", e))?;
    // Before anything is created: a setting that cannot be read stops here.
    let mut opts = plugin_options(&a.plugins, &file).map_err(|e| startup("config", e))?;
    let settings = Settings::resolve(a, &file)?;
    // Before the store, the runtime or a plugin starts a thread: they all inherit it.
    if let Err(e) = scheduling::apply(settings.scheduling) {
        tracing::warn!(
            "the daemon's threads keep their scheduling policy: setting {} was refused: {e}",
            settings.scheduling.name()
        );
    }

    // From here to the daemon's end, an `exit()` by plugin code or a library is said and is no
    // clean exit (`exit_guard`); dropped last, after the plugins' handlers ([`Held::release`]).
    let armed = crate::exit_guard::arm("started");
    // Resolved now, before any plugin code runs: a chdir by plugin code (or a library) must
    // not move the paths the daemon resolves again later (the worktrees under the root, the
    // plugins' state directory). The store resolves its own path when it opens it.
    let db_at = absolute_now(&settings.db);
    let root_at = absolute_now(&settings.workspace_root);

    // Bind policy first: nothing else happens for a non-loopback address (refused there, an
    // IP by `check_loopback` and `localhost` taken as 127.0.0.1).
    let addr = resolve_bind_as(&settings.bind, settings.bind_key)?;
    // Before anything is opened or made: a refused start must not have written a store into
    // another daemon's worktree, nor advised removing one there as a store's remains.
    refuse_inside_another(&settings.db, &settings.workspace_root)?;
    // A store another daemon serves is said so before the port, which that daemon may hold
    // too: "already serves" is certain where "address in use" is a guess. Only a store that
    // exists can be held, so this creates nothing.
    let held_early = match launch.store_lock {
        Some(lock) => Some(lock),
        None => existing_store_lock(&settings.db)?,
    };
    // Tried now only where the root exists; a root without `flock` is tried (and warned of)
    // once.
    let root_early = settings
        .workspace_root
        .is_dir()
        .then(|| workspace_lock(&settings.workspace_root))
        .transpose()?;
    let listener = match launch.listener {
        Some(l) => l,
        None => bind_now(addr)?,
    };

    // A start that fails from here on leaves nothing it made: not a new store, not a new
    // workspace root (a mistyped flag would otherwise leave a store where none was meant).
    let mut fresh = Fresh::default();
    // A daemon that dies on a corrupt page of its store says so (the verbs run in a child
    // that does; a daemon has its supervisor instead).
    broker_core::store::say_faults_in_store_maps("worldd serve");
    broker_core::capacity::log_thresholds();
    let metrics = Metrics::default();
    let started = (|| {
        let store = open_store(&settings, &mut fresh)?;
        // One daemon per store: the per-episode ordering of calls lives in its memory.
        let lock = match held_early {
            Some(lock) => lock,
            None => writer_lock(&settings.db)?,
        };
        let root_lock = match root_early {
            Some(tried) => tried,
            None => workspace_lock(&settings.workspace_root)?,
        };
        // Neither inside another daemon's root or store, nor holding one (see there).
        let above = lock_ancestors(&settings.db, &settings.workspace_root)?;
        // Before any plugin code runs (its constructor may fork): in a child it forks without
        // exec, these and the store's files (the guard finds them) are put over with /dev/null.
        crate::fork_guard::arm(
            &db_at,
            std::iter::once(&lock)
                .chain(&root_lock)
                .chain(&above)
                .chain(&fresh.store_dir)
                .map(std::os::fd::AsFd::as_fd)
                .chain([std::os::fd::AsFd::as_fd(&listener)]),
        );
        store.report_indeterminate_each();
        // Reader slots of killed readers cleared, a replaced store seen, while it serves.
        store
            .watch_every(Store::WATCH_EVERY)
            .map_err(|e| startup("store-open", e))?;
        // Before a plugin's constructor can start a program, and again once their libraries
        // have opened what they open.
        crate::descriptors::keep_from_programs();
        opts.limits = settings.limits.clone();
        opts.metrics = metrics.clone();
        refuse_state_dir_in_workspace(&opts, &root_at)?;
        let hint = plugin_dir_hint(&opts.dir, &a.plugins, &file);
        let set = load_plugins(&mut opts, &store, &db_at, &hint)?;
        let started: Vec<String> = set
            .plugins
            .iter()
            .map(|p| p.manifest.name.clone())
            .collect();
        let state_locks = lock_state_dirs(&opts, &started)?;
        crate::fork_guard::arm(&db_at, state_locks.iter().map(std::os::fd::AsFd::as_fd));
        crate::descriptors::keep_from_programs();
        Ok((store, (lock, root_lock, state_locks, above), set))
    })();
    let (store, locks, mut set) = match started {
        Ok(started) => started,
        Err(failure) => {
            fresh.undo();
            return Err(failure);
        }
    };
    let store_dir = fresh.store_dir;
    let catalog = catalog_of(&set);
    let classes = std::mem::take(&mut set.classes);
    // Last of the start, before anything is handed on: a runtime that cannot be built lets go
    // of the socket, the locks and the plugins in the order every failed start does.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| startup("listen", e))?;
    let ready = Ready {
        listener,
        store,
        handlers: std::mem::take(&mut set.handlers),
        classes,
        catalog,
        runtime,
        settings,
        root_at,
        metrics,
        ready_on_stderr: launch.ready_on_stderr,
    };
    let held = Held {
        store_dir,
        plugins: set,
        locks,
        armed,
        opts,
    };
    Ok((ready, held))
}

/// Serve until a signal stops the daemon: build the coordinator, listen, announce readiness and
/// answer requests until every one is answered. What the server ended with is in [`Stopped`].
fn serve(ready: Ready, manager: crate::service_manager::Notifier) -> Stopped {
    let Ready {
        listener,
        store,
        handlers,
        classes,
        catalog,
        runtime,
        mut settings,
        root_at,
        metrics,
        ready_on_stderr,
    } = ready;
    let coordinator = Arc::new(Coordinator::new(
        store.clone(),
        handlers,
        CoordinatorConfig {
            workspace_root: Some(root_at),
            handler_deadline: settings.limits.handler_deadline,
            // Handlers run inline on the blocking thread of their call, watched by its task
            // (`State::invoke`), so no spawner is needed here.
            refusal_rate: settings.refusal_rate,
            // The writer lock `start` took makes this daemon the store's only spender: reads
            // run while their intent is on its way to the disk.
            sole_spender: true,
            ..CoordinatorConfig::default()
        },
    ));
    let info = DaemonInfo {
        db_path: settings.db.display().to_string(),
        version: env!("CARGO_PKG_VERSION"),
        open_reads: settings.open_reads,
    };
    fit_connections_to_fds(&mut settings.server);
    for warning in &settings.said {
        tracing::warn!("{warning}");
    }

    let overruns = coordinator.clone();
    let call_deadline = settings.limits.call_deadline;
    let Settings {
        mut server, limits, ..
    } = settings;
    let served = runtime.block_on(async move {
        listener
            .set_nonblocking(true)
            .map_err(|e| startup("listen", e))?;
        let listener =
            tokio::net::TcpListener::from_std(listener).map_err(|e| startup("listen", e))?;
        let local = listener.local_addr().map_err(|e| startup("listen", e))?;
        if server.public_url.is_none() {
            server.public_url = Some(format!("http://{local}"));
        }
        let state = AppState::builder(store, coordinator, info)
            .classes(classes)
            .limits(limits)
            .server(server)
            .metrics(metrics)
            .catalog(catalog)
            .build();
        let signals = server::ShutdownSignals::listen().telling(manager.clone());
        crate::exit_guard::doing("served");
        announce(local, ready_on_stderr);
        manager.tell("READY=1");
        server::serve(listener, state, signals)
            .await
            .map_err(|e| Failure::fatal(format!("server error: {e}")))
    });
    crate::exit_guard::doing("stopped");
    Stopped {
        served,
        runtime,
        overruns,
        call_deadline,
    }
}

/// A daemon whose server has returned: what it served with, still running the calls that
/// outlived their requests.
struct Stopped {
    /// The server's end: what the daemon exits with once drained.
    served: CliResult,
    runtime: tokio::runtime::Runtime,
    /// The coordinator, for the handlers still running past their deadline.
    overruns: Arc<Coordinator>,
    /// How long a call may take: the most the drain waits for calls without a client.
    call_deadline: std::time::Duration,
}

/// Wait, within bounds, for what still runs once every request is answered, then shut the
/// runtime down; the server's end.
fn drain(stopped: Stopped) -> CliResult {
    let Stopped {
        served,
        runtime,
        overruns,
        call_deadline,
    } = stopped;
    // Every request was answered; calls whose client left run on without one, and are waited
    // for as requests are (up to a call's deadline): the runtime's shutdown would drop them
    // unpolled, their effects run and their intents left indeterminate.
    let detached = crate::watched::detached();
    if detached > 0 {
        tracing::info!("waiting for {detached} call(s) whose client left to finish and commit");
        let left = crate::watched::wait_for_detached(std::time::Instant::now() + call_deadline);
        if left > 0 {
            tracing::warn!("{left} call(s) whose client left did not finish within the call deadline; their intents stay indeterminate");
        }
    }
    // What may still run are handlers past their deadline. Give them a moment to return and
    // journal their outcome, then leave them: their intents stay indeterminate and are
    // reported at the next start.
    let hung = overruns.overruns().running();
    if hung > 0 {
        tracing::warn!(
            "{hung} handler(s) past their deadline still run; waiting up to {} s for them",
            HUNG_HANDLER_GRACE.as_secs()
        );
    }
    runtime.shutdown_timeout(HUNG_HANDLER_GRACE);
    served
}

/// The store directory and workspace root this start made: what it may take away again when
/// it fails. "Made" is decided by the start's own exclusive `mkdir`, never by "it was absent
/// when I looked", which two starts at once both see: the one refused then removed the store
/// the other had just made and served.
#[derive(Default)]
struct Fresh {
    /// The store directory (absolute), when this start made it.
    db: Option<PathBuf>,
    /// The store directory (absolute), when it was there but empty and this start made its
    /// store in it: what it put there (`data.mdb`, `lock.mdb`, `plugin-state`) goes again, the
    /// directory stays.
    filled: Option<PathBuf>,
    /// The workspace root (absolute), when this start made it.
    root: Option<PathBuf>,
    /// The store directory's lock ([`lock_store_dir`]), held from before the store is looked
    /// at to the daemon's end.
    store_dir: Option<std::fs::File>,
    /// The start went as far as taking that lock, and the store directory was there but not
    /// locked: another daemon may be making or serving it, and its root.
    store_unlocked: bool,
    /// The directories above the store and the root that this start made (`.world` of the
    /// defaults), deepest first: removed again while empty, so that the command fixed and run
    /// again starts as the first attempt would have.
    above: Vec<PathBuf>,
}

impl Fresh {
    /// Remove the store directory and the workspace root this start made (the root only while
    /// empty), and only while no other daemon can have them: this start holds the store
    /// directory's lock, nothing holds the store's own, and nothing the root's. Called once
    /// the store is closed.
    fn undo(self) {
        // Without the lock, another daemon may be making or serving the store, and its root.
        if self.store_unlocked {
            return;
        }
        if let Some(db) = self.db.filter(|db| nobody_serves(db)) {
            let removed = std::fs::remove_dir_all(&db);
            if let Some(e) = removed
                .err()
                .filter(|e| e.kind() != std::io::ErrorKind::NotFound)
            {
                tracing::warn!(
                    "could not remove the store {} this failed start made: {e}",
                    db.display()
                );
            }
        }
        // Only the names a store is made of: anything else put there since the directory was
        // found empty (a backup copied in by hand) is not this start's to remove.
        if let Some(db) = self.filled.filter(|db| nobody_serves(db)) {
            for name in ["data.mdb", "lock.mdb", "plugin-state"] {
                let path = db.join(name);
                let removed = match std::fs::symlink_metadata(&path) {
                    Ok(md) if md.is_dir() => std::fs::remove_dir_all(&path),
                    Ok(_) => std::fs::remove_file(&path),
                    Err(_) => continue,
                };
                if let Err(e) = removed {
                    tracing::warn!(
                        "could not remove {} this failed start made: {e}",
                        path.display()
                    );
                }
            }
        }
        if let Some(root) = self.root {
            let unheld = std::fs::File::open(&root)
                .is_ok_and(|f| matches!(crate::flock::exclusive(&f), Ok(true)));
            if unheld {
                let _ = std::fs::remove_dir(&root);
            }
        }
        for dir in self.above {
            // Only while empty: anything another process put there since stays.
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// What `serve` runs with: each setting from its flag, else the config file, else its default.
struct Settings {
    db: PathBuf,
    workspace_root: PathBuf,
    bind: String,
    /// Where `bind` was given: the flag, or the config file's key.
    bind_key: &'static str,
    open_reads: bool,
    server: edge::ServerConfig,
    limits: crate::limits::Limits,
    /// What is said once at start of the limits in force ([`crate::limits::Limits::fit`]).
    said: Vec<String>,
    ceiling: u64,
    reserve: Option<u64>,
    resident: u64,
    refusal_rate: RefusalRate,
    scheduling: Scheduling,
}

impl Settings {
    fn resolve(a: &ServeArgs, file: &ConfigFile) -> Result<Settings, Failure> {
        let db =
            a.db.clone()
                .or_else(|| file.serve.db.clone())
                .unwrap_or_else(|| PathBuf::from(".world/db"));
        let workspace_root = a
            .workspace_root
            .clone()
            .or_else(|| file.serve.workspace_root.clone())
            .unwrap_or_else(|| PathBuf::from(".world/worktrees"));
        let from_file =
            |flag: &Option<PathBuf>, key: &Option<PathBuf>| flag.is_none() && key.is_some();
        checked_path(
            &db,
            if from_file(&a.db, &file.serve.db) {
                "[serve] db"
            } else {
                "--db"
            },
        )?;
        checked_path(
            &workspace_root,
            if from_file(&a.workspace_root, &file.serve.workspace_root) {
                "[serve] workspace_root"
            } else {
                "--workspace-root"
            },
        )?;
        let bind = a
            .bind
            .clone()
            .or_else(|| file.serve.bind.clone())
            .unwrap_or_else(|| DEFAULT_BIND.into());
        let bind_key = if a.bind.is_none() && file.serve.bind.is_some() {
            "[serve] bind"
        } else {
            "--bind"
        };
        let (server, limits, mut said) = edge_settings(a, file)?;
        let store_limits = &a.limits;
        if store_limits.map_size.is_some() && store_limits.store_ceiling.is_some() {
            return Err(startup(
                "config",
                "--map-size is the old name of --store-ceiling: give one",
            ));
        }
        let ceiling = store_limits
            .store_ceiling
            .or(store_limits.map_size)
            .or(file.serve.store_ceiling)
            .map_or(broker_core::capacity::DEFAULT_CEILING, ByteSize::get);
        let reserve = store_limits
            .store_reserve
            .or(file.serve.store_reserve)
            .map(ByteSize::get);
        // A ceiling of a few bytes is a unit mistaken (`--store-ceiling 100` for 100 MB): the
        // store would be made and every call refused as full. Said before the reserve, which
        // the operator may not have given (a zero ceiling was said as a reserve too large).
        if ceiling < MIN_CEILING {
            return Err(startup(
                "config",
                format!("the store ceiling ({ceiling} bytes) is below {MIN_CEILING} bytes, the least a store is given (a size without a unit is in bytes: write 64GiB, for example)"),
            ));
        }
        let capacity = broker_core::capacity::Limits::new(ceiling, reserve)
            .map_err(|e| startup("config", e))?;
        // Below what one large call stores, the reserve cannot hold a call admitted near the
        // ceiling: its effect runs and its commit meets a full map, unrecorded.
        if capacity.reserve < MIN_RESERVE {
            said.push(format!(
                "the store reserve is {} bytes ({}), below the {MIN_RESERVE} bytes one large call can store (its arguments about three times): a write admitted near the ceiling may run and be left unrecorded; set --store-reserve {}MiB or more, under a larger --store-ceiling if need be",
                capacity.reserve,
                match reserve {
                    Some(_) => "--store-reserve or [serve] store_reserve",
                    None => "its default, an eighth of the ceiling",
                },
                MIN_RESERVE >> 20,
            ));
        }
        let refusal_rate = RefusalRate::new(
            store_limits
                .refusals_per_minute
                .or(file.serve.refusals_per_minute)
                .unwrap_or(broker_core::refusal_rate::DEFAULT_PER_MINUTE),
            store_limits
                .refusal_burst
                .or(file.serve.refusal_burst)
                .unwrap_or(broker_core::refusal_rate::DEFAULT_BURST),
        )
        .map_err(|e| startup("config", e))?;
        Ok(Settings {
            db,
            workspace_root,
            bind,
            bind_key,
            open_reads: a.open_reads || file.serve.open_reads,
            server,
            limits,
            said,
            ceiling,
            reserve,
            resident: store_limits
                .store_resident_bytes
                .or(file.serve.store_resident_bytes)
                .map_or(broker_core::store::DEFAULT_RESIDENT_BYTES, ByteSize::get),
            refusal_rate,
            scheduling: a.scheduling.or(file.serve.scheduling).unwrap_or_default(),
        })
    }
}

/// A store or workspace root path the daemon can hand on: plugins are told paths as text, so
/// one that is not UTF-8 (here or in the directory it is relative to) would send them to
/// another directory; and a `~` or `$VAR` no shell expanded ([`unexpanded`]) would make a new,
/// empty world in a directory of that name.
fn checked_path(path: &Path, key: &str) -> Result<(), Failure> {
    let whole = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    if whole.to_str().is_none() {
        return Err(startup(
            "config",
            format!(
                "{key} {}: the path is not UTF-8, and plugins are given paths as text; rename it (or the directory it is in)",
                whole.display()
            ),
        ));
    }
    unexpanded(&path.to_string_lossy(), key).map_err(|e| startup("config", e))
}

/// A path that holds what a shell would have expanded, `~` first or `$VAR`, refused: no shell
/// read it (a config file, or a service manager's command line), and it would name a directory
/// called `~` or `$HOME` (a new, empty world; plugin state nobody finds). `key` names where it
/// was given.
fn unexpanded(text: &str, key: &str) -> Result<(), String> {
    let tilde = text.starts_with('~');
    let variable = text.match_indices('$').any(|(at, _)| {
        text[at + 1..]
            .chars()
            .next()
            .is_some_and(|c| c == '{' || c == '_' || c.is_ascii_alphabetic())
    });
    if !tilde && !variable {
        return Ok(());
    }
    let what = if tilde {
        "`~` is a directory named ~ here"
    } else {
        "`$` names no variable here"
    };
    Err(if key.starts_with('[') {
        format!(
            "{key} {text:?}: a config file's paths are not expanded as a shell would ({what}); write the path in full"
        )
    } else {
        format!(
            "{key} {text:?}: no shell expanded this path ({what}: a service manager's command line, or a quoted argument); write the path in full"
        )
    })
}

/// The workspace root made, and the store opened outside it: each refused when another user
/// could have written it ([`refuse_loose_dir`]).
fn open_store(settings: &Settings, fresh: &mut Fresh) -> Result<Store, Failure> {
    let root = &settings.workspace_root;
    let made_root = make_private_dir(root, &mut fresh.above).map_err(|e| {
        let e = if root.exists() && !root.is_dir() {
            "it exists and is not a directory".to_owned()
        } else {
            e.to_string()
        };
        startup("config", format!("workspace root {}: {e}", root.display()))
    })?;
    if made_root {
        fresh.root = Some(absolute_now(root));
    }
    refuse_loose_dir("workspace root", root).map_err(|e| startup("config", e))?;
    if let Some(warning) = others_may_enter(root) {
        tracing::warn!("{warning}");
    }
    refuse_nested(&settings.db, root)?;
    refuse_loose_store(&settings.db).map_err(|e| startup("store-open", e))?;
    // A restored backup copy whose check never passed is served, but not without a word.
    if let Some(warning) = crate::backup::unverified_warning(&settings.db) {
        tracing::warn!("{warning}");
    }
    // An interrupted backup's destination is no store: making a new one beside its copy would
    // give an operator restoring from it an empty world, with nothing said.
    if let Some(partial) = crate::backup::interrupted_copy(&settings.db) {
        return Err(startup(
            "store-open",
            format!(
                "{} holds no store, only the unfinished copy of a backup that was interrupted ({}): serve makes no new store beside it; run the backup again, or remove the directory, or give another --db",
                settings.db.display(),
                partial.display()
            ),
        ));
    }
    // A directory that cannot be made is said by the store's open below, in its words.
    let made = make_private_dir(&settings.db, &mut fresh.above).unwrap_or(false);
    fresh.store_unlocked = true;
    fresh.store_dir = lock_store_dir(&settings.db).map_err(|(failure, served)| {
        // A directory above another daemon's paths is no store it serves: what this start
        // made (the root) goes again.
        fresh.store_unlocked = served;
        failure
    })?;
    // No directory (a file is in its way): no daemon makes or serves a store there, so the
    // root this start made goes again as after any other failure.
    fresh.store_unlocked = fresh.store_dir.is_none() && settings.db.is_dir();
    if made && fresh.store_dir.is_some() {
        fresh.db = Some(absolute_now(&settings.db));
    }
    // What is left of a store (its data file lost or emptied, by a restore gone wrong) is no
    // place for a new one: every credential, budget and task id would start again, unsaid.
    if let Some(remains) = remains_of_a_store(&settings.db) {
        return Err(startup("store-open", remains));
    }
    let new = !std::fs::metadata(store_lock_file(&settings.db)).is_ok_and(|m| m.len() > 0);
    // Made by this start in a directory that was there, empty: a refused start leaves it so.
    let empty = std::fs::read_dir(&settings.db).is_ok_and(|mut d| d.next().is_none());
    if !made && empty && fresh.store_dir.is_some() {
        fresh.filled = Some(absolute_now(&settings.db));
    }
    let store = Store::open(
        &settings.db,
        StoreOptions {
            ceiling: Some(settings.ceiling),
            reserve: settings.reserve,
            create: true,
            on_failing: Some(failing_writes_said),
            ..StoreOptions::default()
        },
    )
    .map_err(|e| startup("store-open", e))?;
    // Every append continues the newest entry: a damaged one is refused before any is made.
    store.check_head().map_err(|e| startup("store-open", e))?;
    // One daemon per store (its lock is held): this process alone appends to the log.
    store.appends_the_log();
    if new {
        tracing::info!(
            "made a new world store in {}",
            absolute_now(&settings.db).display()
        );
    }
    store.keep_resident_under(settings.resident);
    Ok(store)
}

/// What to add to a plugin failure when the plugin directory given does not exist: which key
/// named it and what belongs there (`cannot read the plugin directory: No such file or
/// directory` left both to guess). Empty otherwise.
fn plugin_dir_hint(dir: &Path, args: &PluginArgs, file: &ConfigFile) -> String {
    let key = match (&args.plugin_dir, &file.serve.plugin_dir) {
        (Some(_), _) => "--plugin-dir",
        (None, Some(_)) => "[serve] plugin_dir",
        // The executable's own directory exists.
        (None, None) => return String::new(),
    };
    match std::fs::metadata(dir) {
        Err(missing) if missing.kind() == std::io::ErrorKind::NotFound => format!(
            "; {key} names no directory: give the directory that holds the plugin libraries (libworldd_*.so), or leave it out to load those beside the worldd executable ({})",
            plugins::default_dir().display()
        ),
        _ => String::new(),
    }
}

/// The plugins loaded, and the transitions they ship published to the default registry.
fn load_plugins(
    opts: &mut PluginOptions,
    store: &Store,
    db: &std::path::Path,
    hint: &str,
) -> Result<plugins::PluginSet, Failure> {
    // Plugins get absolute paths: their working directory is the daemon's, and theirs to
    // change.
    let state_root =
        std::path::absolute(db.join("plugin-state")).unwrap_or_else(|_| db.join("plugin-state"));
    opts.state_root = Some(state_root);
    let served = Arc::new(OnceLock::new());
    opts.publisher = Some(plugins::publisher(store.clone(), served.clone()));
    let set = plugins::load(opts).map_err(|e| startup("plugins", format!("{e}{hint}")))?;
    warn_when_nothing_serves(&opts.dir, &set);
    let _ = served.set(
        set.handlers
            .effects()
            .map(str::to_owned)
            .collect::<BTreeSet<_>>(),
    );
    if !set.transitions.is_empty() {
        let published = registry::publish_shipped(
            store,
            registry::DEFAULT_REGISTRY,
            set.transitions.clone(),
            "worldd:plugins",
        )
        .map_err(|e| startup("registry-bootstrap", e))?;
        tracing::info!(
            revision = published.revision,
            changed = published.changed,
            "published plugin transitions"
        );
    }
    Ok(set)
}

/// Raise the soft descriptor limit, and lower `max_connections` below what it allows, and the
/// log streams to leave room under it.
fn fit_connections_to_fds(server: &mut edge::ServerConfig) {
    match edge::listener::raise_fd_limit() {
        Ok(fds) => {
            let allowed = edge::listener::connection_limit(server.max_connections, fds);
            if allowed < server.max_connections {
                tracing::warn!(
                    "max_connections lowered from {} to {allowed} to stay below the file descriptor limit ({fds})",
                    server.max_connections
                );
                server.max_connections = allowed;
            }
        }
        Err(e) => tracing::warn!("could not read the file descriptor limit: {e}"),
    }
    if let Some(warning) = server.fit_log_streams() {
        tracing::warn!("{warning}");
    }
}

/// Exactly one line on stdout when ready (stderr under `quickstart`); everything else goes to
/// stderr. The line only tells: where stdout takes nothing (a closed pipe, a full disk) the
/// daemon says so on stderr and serves.
fn announce(local: SocketAddr, on_stderr: bool) {
    let line = format!("worldd listening on http://{local}");
    if on_stderr {
        errln!("{line}");
    } else if let Err(e) = super::output::try_write(format!("{line}\n")) {
        let why = if super::output::reader_gone(&e) {
            "its reader has closed it".to_owned()
        } else {
            super::output::unwritten(&e)
        };
        tracing::warn!("could not print the ready line on stdout ({why}); serving: {line}");
    }
}

/// `[server]` and `[limits]` from the file, with the flags over them, and what is to be said
/// of them at start.
fn edge_settings(
    a: &ServeArgs,
    file: &ConfigFile,
) -> Result<(edge::ServerConfig, crate::limits::Limits, Vec<String>), Failure> {
    // The file's keys, then the flags over them, then one check of what is in force.
    let mut server = file.server.values();
    server.allowed_hosts.extend(a.allowed_hosts.iter().cloned());
    server
        .allowed_origins
        .extend(a.allowed_origins.iter().cloned());
    if let Some(u) = &a.public_url {
        server.public_url = Some(u.clone());
    }
    if let Some(n) = a.max_connections {
        server.max_connections = n;
    }
    let flags = [
        (
            "[server] max_connections",
            "--max-connections",
            a.max_connections.is_some(),
        ),
        (
            "[limits] execution_slots",
            "--execution-slots",
            a.execution_slots.is_some(),
        ),
        (
            "[limits] handler_deadline_ms",
            "--handler-deadline-ms",
            a.handler_deadline_ms.is_some(),
        ),
        (
            "[limits] commit_body_bytes",
            "--commit-body-bytes",
            a.commit_body_bytes.is_some(),
        ),
    ];
    server
        .check()
        .map_err(|e| startup("config", by_flag(e, &flags)))?;
    let mut limits = file.limits.values();
    if let Some(n) = a.execution_slots {
        limits.execution_slots = n;
    }
    if let Some(ms) = a.handler_deadline_ms {
        limits.handler_deadline = std::time::Duration::from_millis(ms);
    }
    if let Some(n) = a.commit_body_bytes {
        limits.commit_body_bytes = n.get_usize();
    }
    // Unset, `reply_bytes` follows a smaller reply budget; set, one too large is lowered
    // below, and said.
    if file.limits.reply_bytes.is_none() {
        limits.reply_bytes = limits
            .reply_bytes
            .min(crate::limits::most_reply_bytes(&server));
    }
    limits
        .check()
        .map_err(|e| startup("config", by_flag(e, &flags)))?;
    let mut given = crate::limits::Given::of(&file.limits, &file.server);
    if a.handler_deadline_ms.is_some() {
        given = given.flag("[limits] handler_deadline_ms", "--handler-deadline-ms");
    }
    let said = limits.fit(&mut server, &given);
    Ok((server, limits, said))
}

/// A refusal of a setting said under the flag that gave it, as `--bind` is: `[limits]
/// execution_slots must be at least 1` from `--execution-slots 0` sent the operator looking
/// for a config file that does not set it. `flags` pairs each key with its flag and whether
/// the flag was given; a refusal that names no given flag's key first is as the check said it.
fn by_flag(refusal: String, flags: &[(&str, &str, bool)]) -> String {
    for (key, flag, given) in flags {
        if let Some(rest) = refusal.strip_prefix(key).filter(|r| r.starts_with(' ')) {
            if *given {
                return format!("{flag}{rest}");
            }
        }
    }
    refusal
}

/// A daemon with no plugin serves tools that all fail by rule R8: say so once, loudly.
fn warn_when_nothing_serves(dir: &std::path::Path, set: &plugins::PluginSet) {
    if let Some(warning) = set.nothing_started(dir) {
        tracing::warn!("{warning}");
    }
}

/// What `GET /v1/handlers` reports: the plugins that loaded and those that declined.
fn catalog_of(set: &plugins::PluginSet) -> crate::catalog::Catalog {
    use crate::catalog::{Catalog, DeclinedPlugin, LoadedPlugin, PluginEffect, UnselectedPlugin};
    let abs = |p: &std::path::Path| {
        std::path::absolute(p)
            .unwrap_or_else(|_| p.to_path_buf())
            .display()
            .to_string()
    };
    let effects = |info: &plugins::PluginInfo| -> Vec<PluginEffect> {
        info.manifest
            .effects
            .iter()
            .map(|e| PluginEffect {
                effect: e.name.clone(),
                class: e.class,
            })
            .collect()
    };
    Catalog {
        plugins: set
            .plugins
            .iter()
            .map(|info| LoadedPlugin {
                name: info.manifest.name.clone(),
                version: info.manifest.version.clone(),
                identity: info.identity().to_string(),
                library: info.identity().library.to_string(),
                path: abs(&info.path),
                effects: effects(info),
            })
            .collect(),
        declined: set
            .declined
            .iter()
            .map(|(info, reason)| DeclinedPlugin {
                name: info.manifest.name.clone(),
                path: abs(&info.path),
                reason: reason.clone(),
                effects: effects(info),
            })
            .collect(),
        unselected: set
            .unselected
            .iter()
            .map(|info| UnselectedPlugin {
                name: info.manifest.name.clone(),
                path: abs(&info.path),
                effects: effects(info),
            })
            .collect(),
    }
}

/// The daemon's words when its store's writes start failing for the disk (`Some`) and when they
/// succeed again (`None`): what that does to calls and to health ([`StoreOptions::on_failing`]).
fn failing_writes_said(fault: Option<&StoreError>) {
    match fault {
        Some(fault) => tracing::error!("the store's writes fail ({fault}): new calls are answered as failed until a write succeeds, nothing run or spent for them (a call whose effect ran before its commit failed is answered as not confirmed committed, its effect may have run: reconcile it); health says store-failing meanwhile. {}", capitalized(broker_core::store::DISK_ADVICE)),
        None => tracing::warn!("the store's writes succeed again: calls commit as before"),
    }
}

/// `text` with its first letter upper case (a clause made a sentence).
fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// The address to listen on, given as `key` (`--bind`, or the config file's `[serve] bind`),
/// which its refusals name: a loopback address, whatever was given (every other is refused
/// here).
pub(super) fn resolve_bind_as(bind: &str, key: &str) -> Result<SocketAddr, Failure> {
    if let Ok(a) = bind.parse::<SocketAddr>() {
        // Refused here, where the flag or file key it came from is known (`0.0.0.0:PORT` is
        // the usual first try at reaching the daemon from elsewhere, and is told the fix).
        server::check_loopback(&a)
            .map_err(|why| startup("bind-policy", format!("{key} {bind:?}: {why}")))?;
        return Ok(a);
    }
    // A host and a number that is no port: the port is what is wrong, not the shape.
    if let Some((_, port)) = bind.rsplit_once(':') {
        if !port.is_empty()
            && port.bytes().all(|b| b.is_ascii_digit())
            && port.parse::<u16>().is_err()
        {
            return Err(startup(
                "bind-policy",
                format!("{key} {bind:?}: port {port} is out of range (0 to 65535)"),
            ));
        }
    }
    // `localhost:PORT` is allowed (in any letter case, as host names are read); it must
    // resolve to loopback.
    let localhost = bind
        .split_once(':')
        .filter(|(host, _)| host.eq_ignore_ascii_case("localhost"));
    if let Some((_, port)) = localhost {
        let port: u16 = port
            .parse()
            .map_err(|_| startup("bind-policy", format!("bad port in {bind:?}")))?;
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    // `7644` or `:7644`: a port alone, which a listener needs a host for.
    let port = bind.strip_prefix(':').unwrap_or(bind);
    if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(startup(
            "bind-policy",
            format!("{key} {bind:?} names a port alone: give HOST:PORT, e.g. 127.0.0.1:{port}"),
        ));
    }
    // A name and a port: the shape is right, the host is what the policy refuses (only
    // `localhost` is a name the daemon binds, to 127.0.0.1).
    if let Some((host, port)) = bind.rsplit_once(':') {
        let name = !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
        if name && !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) {
            return Err(startup(
                "bind-policy",
                format!(
                    "{key} {bind:?}: host {host:?} is not loopback: {}",
                    server::LOOPBACK_ONLY
                ),
            ));
        }
    }
    Err(startup(
        "bind-policy",
        format!("{key} {bind:?} is not HOST:PORT"),
    ))
}

#[cfg(test)]
mod tests {
    use super::{toml_error, ConfigFile};

    /// `LocalHost:80` was told "host is not loopback": a host name is read without regard to
    /// letter case (RFC 4343), as the Host check already reads `localhost`.
    #[test]
    fn localhost_in_any_letter_case_binds_loopback() {
        for bind in ["localhost:7644", "LocalHost:7644", "LOCALHOST:7644"] {
            let addr =
                super::resolve_bind_as(bind, "--bind").unwrap_or_else(|f| panic!("{bind}: {f:?}"));
            assert_eq!(addr, std::net::SocketAddr::from(([127, 0, 0, 1], 7644)));
        }
        assert!(super::resolve_bind_as("localhostx:7644", "--bind").is_err());
    }

    /// `serve --help` gave no defaults for its paths, address and limits; it now says them,
    /// and they must be the ones the daemon uses.
    #[test]
    fn serve_help_names_the_defaults_the_daemon_uses() {
        let mut cmd = super::super::command_line();
        let help = cmd
            .find_subcommand_mut("serve")
            .unwrap()
            .render_long_help()
            .to_string();
        let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
        for said in [
            "(default: .world/db)".to_owned(),
            "(default: .world/worktrees)".to_owned(),
            format!("(default: {})", super::DEFAULT_BIND),
            format!("default: {})", crate::edge::DEFAULT_MAX_CONNECTIONS),
            format!("default: {})", crate::limits::DEFAULT_EXECUTION_SLOTS),
            format!(
                "default: {})",
                broker_core::coordinator::HANDLER_DEADLINE.as_millis()
            ),
            format!(
                "(default: {}GiB)",
                broker_core::capacity::DEFAULT_CEILING >> 30
            ),
        ] {
            assert!(help.contains(&said), "{said} in {help}");
        }
    }

    /// A config file that does not parse is shown as the parser shows it, the line and a caret
    /// under the place; a line too long to show (a file of one nested line of 200 KB) is only
    /// placed and explained, not printed whole.
    #[test]
    fn a_config_error_on_a_line_too_long_to_show_says_where_and_why_only() {
        let short = "[serve]\nbind = \n";
        let e = toml::from_str::<ConfigFile>(short).unwrap_err();
        assert_eq!(toml_error(short, &e), e.to_string());
        assert!(toml_error(short, &e).contains("2 | bind = "), "{e}");

        let deep = format!("a = {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
        let e = toml::from_str::<ConfigFile>(&deep).unwrap_err();
        let shown = toml_error(&deep, &e);
        assert!(
            shown.starts_with("TOML parse error at line 1, column ")
                && shown.ends_with(" (the line is 200004 bytes long, not shown)"),
            "{}",
            &shown[..shown.len().min(400)]
        );
        assert!(shown.contains("recursion limit exceeded"), "{shown}");
        assert!(shown.len() < 200, "{}", shown.len());
    }
}
