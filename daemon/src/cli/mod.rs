//! The `worldd` command line: one clap tree, one reporting edge.
//!
//! Exit codes: 0 ok; 1 usage, client or not-found errors; 2 fatal start-up errors; 3
//! integrity failures (`why` found a broken link, `doctor` found an inconsistency, `call
//! --strict` got `ok:false`); 70 `serve` ended by an `exit()` in plugin code
//! (`exit_guard`).

use std::path::PathBuf;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

/// `println!` for a verb's output, in a function that returns [`CliResult`] (or a `Result`
/// whose error a [`Failure`] converts into): a failed write ends the verb ([`output::write`])
/// instead of panicking.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::output::write(format!("{}\n", format_args!($($arg)*)))?
    };
}

/// `eprintln!` for the command line's messages on stderr, which panics where stderr takes
/// nothing (`2>/dev/full`, a closed pipe): there is then no one to tell, and the exit code
/// still says how the command ended.
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let line = format!($($arg)*);
        let _ = writeln!(std::io::stderr(), "{}", $crate::cli::terminal::shown(&line));
    }};
}

mod backup;
mod client;
mod crash_guard;
mod dir_locks;
mod doctor;
mod held_signals;
mod input;
mod log_fields;
mod log_line;
mod manual;
mod output;
mod paths;
mod placement;
mod plugin_config;
mod quickstart;
mod reconcile;
mod secret_file;
mod serve;
mod session;
mod tail;
/// Text shown on the terminal ([`crate::text`]), by the name the verbs know it by.
pub(crate) use crate::text as terminal;
mod usage;
mod why;
mod why_remote;

/// A failure at the CLI edge: the message printed on stderr and the exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: i32,
    pub message: String,
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure {
            code: 1,
            message: message.into(),
        }
    }

    pub fn fatal(message: impl Into<String>) -> Failure {
        Failure {
            code: 2,
            message: message.into(),
        }
    }

    pub fn integrity(message: impl Into<String>) -> Failure {
        Failure {
            code: 3,
            message: message.into(),
        }
    }
}

pub type CliResult = Result<(), Failure>;

/// A refused start, said at the `stage` it stopped (`config`, `store-open`, …): `serve`'s, and
/// the placement checks' and directory locks' it runs.
fn startup(stage: &str, detail: impl std::fmt::Display) -> Failure {
    Failure::fatal(format!("daemon startup failed at {stage}: {detail}"))
}

#[derive(Parser, Debug)]
#[command(
    name = "worldd",
    version,
    about = "World effect broker: tools for AI agents over MCP and A2A, every call durable and verifiable"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// One value a process, parsed once: boxing `serve`'s flags would save nothing worth having.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the daemon.
    #[command(
        after_help = "Examples:\n  worldd serve\n  worldd serve --db /srv/world/db --workspace-root /srv/world/wt --handler workspace\n  worldd serve --config world.toml --bind 127.0.0.1:0\n  worldd serve --plugin-config hello.greeting=hi --plugin-config hello.limits='[1,2]'"
    )]
    Serve(serve::ServeArgs),
    /// Create ./.world, a demo episode and credential, print the MCP client configuration,
    /// and serve.
    #[command(
        after_help = "Examples:\n  worldd quickstart\n  worldd quickstart > mcp.json            # the client configuration alone on stdout (it holds the credential: umask 077 first)\n  worldd quickstart --print-only          # set up and print, do not serve\n  worldd quickstart --bind 127.0.0.1:7700"
    )]
    Quickstart(quickstart::QuickstartArgs),
    /// Mint, list and revoke session credentials.
    #[command(subcommand)]
    Session(session::SessionCommand),
    /// Explain and re-verify one call's provenance.
    #[command(
        after_help = "Examples:\n  worldd call ailang-read --arg path=hello.txt --json-out | worldd why -\n  worldd why head --addr http://127.0.0.1:7644 --session .world/demo.session\n  worldd why 42 --json --db .world/db\n  worldd why mcp:demo:write-7"
    )]
    Why(why::WhyArgs),
    /// Check a store offline: every entry's links, spend against the journal, the head and the
    /// registry heads, the content-address index.
    #[command(
        after_help = "Examples:\n  worldd doctor\n  worldd doctor --db /srv/world/db --json"
    )]
    Doctor(doctor::DoctorArgs),
    /// Copy a store, and its plugins' state, into a new directory while the daemon serves it;
    /// then check the copy as doctor does.
    #[command(
        after_help = "Examples:\n  worldd backup /backup/world-db-2026-12-06\n  worldd backup --db /srv/world/db --compact /backup/world-db"
    )]
    Backup(backup::BackupArgs),
    /// How full the store is, and which episodes' calls filled it: each episode's objects and
    /// their bytes, and those no other episode holds.
    #[command(after_help = "Examples:\n  worldd usage\n  worldd usage --db /srv/world/db --json")]
    Usage(usage::UsageArgs),
    /// List the plugin libraries, their effects and tools, and why a library would not load.
    #[command(
        after_help = "Examples:\n  worldd handlers\n  worldd handlers --plugin-dir target/release --handler workspace\n  worldd handlers --config world.toml"
    )]
    Handlers(serve::HandlersArgs),
    /// Ask a running daemon for its health.
    #[command(
        after_help = "Examples:\n  worldd health\n  worldd health --addr http://127.0.0.1:7700"
    )]
    Health(client::ClientArgs),
    /// Print the selected world head of a running daemon.
    #[command(after_help = "Examples:\n  worldd head --session .world/demo.session")]
    Head(client::ClientArgs),
    /// Read log entries from a running daemon.
    #[command(subcommand)]
    Log(client::LogCommand),
    /// Read stored objects from a running daemon.
    #[command(subcommand)]
    Object(client::ObjectCommand),
    /// List the tools your session sees.
    #[command(subcommand)]
    Tools(client::ToolsCommand),
    /// Call a tool through a running daemon (MCP).
    #[command(
        after_help = "Examples:\n  worldd call ailang-write --arg path=hello.txt --arg content='hi there'\n  worldd call ailang-write --arg path=notes.md --arg content=draft --idempotency-key notes-1\n  worldd call ailang-read --json '{\"path\":\"hello.txt\"}'\n  worldd call ailang-run --arg path=main.ail --arg args_json='{\"n\": 3}' --strict\n  worldd call ailang-read --arg path=hello.txt --json-out | worldd why -"
    )]
    Call(client::CallArgs),
    /// Publish a transition bundle through the broker (needs a Registry.Publish grant).
    #[command(
        after_help = "Examples:\n  worldd publish docs-read.bundle.json --session .world/publisher.session"
    )]
    Publish(client::PublishArgs),
    /// Did my call land? Reconcile one call by idempotency key or invocation id.
    #[command(subcommand)]
    Calls(reconcile::CallsCommand),
    /// Your episode's budget per grant: granted, spent, remaining.
    #[command(after_help = "Examples:\n  worldd budget\n  worldd budget --json")]
    Budget(reconcile::BudgetArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(
        after_help = "Examples:\n  worldd completions bash > ~/.local/share/bash-completion/completions/worldd\n  worldd completions zsh > ~/.zfunc/_worldd\n  worldd completions fish > ~/.config/fish/completions/worldd.fish"
    )]
    Completions(manual::CompletionsArgs),
    /// Print the man page (roff), or write one page per verb with --out DIR.
    #[command(after_help = "Examples:\n  worldd man | man -l -\n  worldd man --out target/man")]
    Man(manual::ManArgs),
}

/// Where the store-side verbs look for the store unless `--db` says otherwise.
pub const DEFAULT_DB: &str = ".world/db";

/// `--db DIR` and `--config FILE`, shared by the store-side verbs.
#[derive(Args, Debug, Clone)]
pub struct DbArg {
    /// The store directory (default: `[serve] db` of --config, else .world/db).
    #[arg(long)]
    db: Option<PathBuf>,
    /// The daemon's config file: its `[serve] db` and `workspace_root` are used where --db and
    /// --workspace-root are not given, as `worldd serve --config FILE` uses them.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

/// The store a store-side verb works on, and the workspace root of the daemon serving it.
#[derive(Debug)]
pub struct StorePaths {
    pub db: StoreDir,
    pub workspace_root: PathBuf,
}

/// A store directory as a verb was given it, and the config file whose `[serve] db` named it,
/// if one did: a verb run in another directory than the daemon's takes a relative path against
/// its own, so the missing-store message says where the path came from ([`StoreDir::origin`]).
#[derive(Debug, Clone)]
pub struct StoreDir {
    path: PathBuf,
    named_by: Option<PathBuf>,
}

impl StoreDir {
    /// Where the path came from when `[serve] db` of a config file gave it: the key as
    /// written, the file, and (for a relative path) that it is taken against the working
    /// directory.
    pub(super) fn origin(&self) -> Option<String> {
        let config = self.named_by.as_ref()?;
        let config = std::path::absolute(config).unwrap_or_else(|_| config.clone());
        Some(format!(
            "`[serve] db = {:?}` of {}{}",
            self.path.to_string_lossy(),
            config.display(),
            if self.path.is_relative() {
                ", taken against the working directory, as worldd serve takes it"
            } else {
                ""
            }
        ))
    }
}

impl From<PathBuf> for StoreDir {
    fn from(path: PathBuf) -> StoreDir {
        StoreDir {
            path,
            named_by: None,
        }
    }
}

impl std::ops::Deref for StoreDir {
    type Target = std::path::Path;

    fn deref(&self) -> &std::path::Path {
        &self.path
    }
}

impl AsRef<std::path::Path> for StoreDir {
    fn as_ref(&self) -> &std::path::Path {
        &self.path
    }
}

impl DbArg {
    /// The store: `--db`, else `[serve] db` of `--config`, else [`DEFAULT_DB`].
    pub fn db(&self) -> Result<StoreDir, Failure> {
        Ok(self.paths(None)?.db)
    }

    /// The store and workspace root, each from its flag (`workspace_root` is the verb's
    /// `--workspace-root`), else `--config`'s `[serve]` key, else its default: as `serve`
    /// resolves them, relative paths against the working directory, so that a verb given the
    /// daemon's config file finds the daemon's store and worktrees.
    pub fn paths(&self, workspace_root: Option<&std::path::Path>) -> Result<StorePaths, Failure> {
        let (file_db, file_root) = match &self.config {
            Some(config) => serve::config_store_paths(config).map_err(Failure::usage)?,
            None => (None, None),
        };
        let db = match (&self.db, file_db) {
            (Some(given), _) => StoreDir::from(given.clone()),
            (None, Some(path)) => StoreDir {
                path,
                named_by: self.config.clone(),
            },
            (None, None) => StoreDir::from(PathBuf::from(DEFAULT_DB)),
        };
        Ok(StorePaths {
            db,
            workspace_root: workspace_root
                .map(std::path::Path::to_path_buf)
                .or(file_root)
                .unwrap_or_else(|| PathBuf::from(session::DEFAULT_WORKSPACE_ROOT)),
        })
    }
}

/// The command line, with a leading `-` followed by a digit read as a value wherever a flag
/// takes one: `--ttl -5` is then refused by the flag's own parser (`invalid value '-5' for
/// '--ttl <TTL>'`) and `--refusals-per-minute -1` by the rate's own check, instead of clap
/// calling the number an unexpected argument.
pub fn command_line() -> clap::Command {
    fn negatives(cmd: clap::Command) -> clap::Command {
        cmd.mut_args(|arg| {
            if arg.get_action().takes_values() {
                arg.allow_negative_numbers(true)
            } else {
                arg
            }
        })
        .mut_subcommands(negatives)
    }
    negatives(Cli::command())
}

/// Entry point used by `main`: parse, run, report.
pub fn main() -> i32 {
    let mut cmd = command_line();
    let parsed = cmd
        .try_get_matches_from_mut(std::env::args_os())
        .and_then(|matches| Cli::from_arg_matches(&matches))
        .map_err(|e| e.format(&mut cmd));
    let cli = match parsed {
        Ok(c) => c,
        Err(mut e) => {
            port_tip(&mut e, std::env::args_os().nth(1).as_deref());
            return clap_said(&e);
        }
    };
    // The daemon logs at info; one-shot verbs only say what went wrong.
    init_tracing(matches!(
        cli.command,
        Command::Serve(_) | Command::Quickstart(_)
    ));
    // The verbs that read a store themselves run guarded against a store LMDB crashes on.
    let guarded = match &cli.command {
        Command::Session(_) => Some("worldd session"),
        Command::Why(_) => Some("worldd why"),
        Command::Doctor(_) => Some("worldd doctor"),
        Command::Backup(_) => Some("worldd backup"),
        Command::Usage(_) => Some("worldd usage"),
        _ => None,
    };
    match guarded {
        Some(verb) => crash_guard::guarded(verb, move || run(cli.command)),
        None => run(cli.command),
    }
}

/// `serve --port N` (or `quickstart`'s) is what a newcomer tries first; clap said only that
/// `--port` is unexpected. Its refusal gets a tip naming the flag that sets the port.
fn port_tip(e: &mut clap::Error, verb: Option<&std::ffi::OsStr>) {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::UnknownArgument
        || !verb.is_some_and(|v| v == "serve" || v == "quickstart")
    {
        return;
    }
    let port = matches!(
        e.get(ContextKind::InvalidArg),
        Some(ContextValue::String(arg)) if arg == "--port" || arg.starts_with("--port=")
    );
    if !port {
        return;
    }
    let tip = clap::builder::StyledStr::from(format!(
        "the port is part of the address: --bind 127.0.0.1:PORT (default {})",
        serve::DEFAULT_BIND
    ));
    let tips = match e.remove(ContextKind::Suggested) {
        Some(ContextValue::StyledStrs(mut tips)) => {
            tips.push(tip);
            tips
        }
        _ => vec![tip],
    };
    e.insert(ContextKind::Suggested, ContextValue::StyledStrs(tips));
}

/// What clap made of the command line, said, and the exit code: a usage error on stderr
/// (exit 1); `--help` or `--version` on stdout (exit 0), unless stdout does not take it (a full
/// disk under `> file`), which is said as every verb says it (exit 1) instead of clap's silence.
fn clap_said(e: &clap::Error) -> i32 {
    use std::io::Write as _;
    if e.kind() == clap::error::ErrorKind::InvalidUtf8 {
        // clap names no argument; a variable the client verbs read is the likely one.
        if std::env::var_os("WORLD_ADDR").is_some_and(|v| v.to_str().is_none()) {
            errln!("worldd: $WORLD_ADDR is not UTF-8 text: give the daemon's address as http://HOST:PORT, e.g. {}", client::DEFAULT_ADDR);
            return 1;
        }
    }
    if e.use_stderr() {
        let _ = e.print();
        return 1;
    }
    match e.print().and_then(|()| std::io::stdout().flush()) {
        Ok(()) => 0,
        Err(io) => {
            let f = output::failure(io);
            if !f.message.is_empty() {
                errln!("worldd: {}", f.message);
            }
            f.code
        }
    }
}

/// Run one verb and report its failure: the command line's one reporting edge.
fn run(command: Command) -> i32 {
    let result = match command {
        Command::Serve(a) => serve::run(a),
        Command::Quickstart(a) => quickstart::run(a),
        Command::Session(c) => session::run(c),
        Command::Why(a) => why::run(a),
        Command::Doctor(a) => doctor::run(a),
        Command::Backup(a) => backup::run(a),
        Command::Usage(a) => usage::run(a),
        Command::Handlers(a) => serve::handlers(a),
        Command::Health(a) => client::health(a),
        Command::Head(a) => client::head(a),
        Command::Log(c) => client::log(c),
        Command::Object(c) => client::object(c),
        Command::Tools(c) => client::tools(c),
        Command::Call(a) => client::call(a),
        Command::Publish(a) => client::publish(a),
        Command::Calls(c) => reconcile::calls(c),
        Command::Budget(a) => reconcile::budget(a),
        Command::Completions(a) => manual::completions(a),
        Command::Man(a) => manual::man(a),
    };
    match result {
        Ok(()) => 0,
        Err(f) => {
            if !f.message.is_empty() {
                errln!("worldd: {}", terminal::cut(&f.message, MESSAGE_BYTES));
            }
            f.code
        }
    }
}

/// The most of a failure's message the edge prints: a message quotes what the daemon
/// answered, and a daemon that answers endlessly must not make a line of megabytes.
const MESSAGE_BYTES: usize = 8192;

fn init_tracing(daemon: bool) {
    // Before anything else: descriptors 0-2 kept (a closed one opened on /dev/null), a private
    // copy of stderr for the log, SIGCHLD and SIGPIPE as the daemon needs them.
    crate::process_state::settle();
    let default = if daemon { "info" } else { "warn" };
    let (filter, complaint) = log_filter(std::env::var("WORLDD_LOG").ok(), default);
    // Said on stderr itself: the filter may let no warning through.
    if let Some(complaint) = complaint {
        errln!("worldd: {complaint}");
    }
    let (json, complaint) = log_format(std::env::var("WORLDD_LOG_FORMAT").ok());
    if let Some(complaint) = complaint {
        errln!("worldd: {complaint}");
    }
    let lines = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // A line stderr does not take (a pipe whose reader has gone, a full disk) is lost,
        // and nothing else: by default the writer reports its own failure with `eprintln!`,
        // which panics there, in the task that was answering a call after its commit.
        .log_internal_errors(false)
        .with_writer(LogOut::new);
    if json {
        // One JSON object a line for a log collector: the event's fields beside its time,
        // level and module, each string escaped by JSON's own rules.
        let _ = lines
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init();
        return;
    }
    let _ = lines
        // Colours only for a person at a terminal, not for log files and collectors.
        .with_ansi(
            LogOut::new().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        )
        .with_target(false)
        .fmt_fields(log_fields::fields())
        .try_init();
}

/// Where log lines are written: the private copy of stderr made at start, which plugin code
/// that closes descriptor 2 does not take away (the next connection accepted would otherwise
/// get that number, and every log line after it); stderr itself where there is no copy. Each
/// event's writer ends a line an event before it left torn ([`log_line`]).
struct LogOut(log_line::EventWriter<LogFile>);

enum LogFile {
    Private(&'static std::fs::File),
    Stderr(std::io::Stderr),
}

impl LogOut {
    fn new() -> LogOut {
        LogOut(log_line::EventWriter::new(
            match crate::process_state::log_destination() {
                Some(file) => LogFile::Private(file),
                None => LogFile::Stderr(std::io::stderr()),
            },
        ))
    }

    fn is_terminal(&self) -> bool {
        match self.0.inner() {
            LogFile::Private(file) => std::io::IsTerminal::is_terminal(*file),
            LogFile::Stderr(err) => std::io::IsTerminal::is_terminal(err),
        }
    }
}

impl std::io::Write for LogOut {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl std::io::Write for LogFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            LogFile::Private(file) => file.write(buf),
            LogFile::Stderr(err) => err.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            LogFile::Private(file) => file.flush(),
            LogFile::Stderr(err) => err.flush(),
        }
    }
}

/// Whether `WORLDD_LOG_FORMAT` asks for JSON lines (`json`) rather than text (`text`, or
/// unset); and what to tell the operator when it names neither.
fn log_format(value: Option<String>) -> (bool, Option<String>) {
    let Some(value) = value.filter(|v| !v.trim().is_empty()) else {
        return (false, None);
    };
    match value.trim().to_ascii_lowercase().as_str() {
        "json" => (true, None),
        "text" => (false, None),
        _ => (
            false,
            Some(format!(
                "WORLDD_LOG_FORMAT={} is neither text nor json; logging text",
                dialect::quote::quote(&value)
            )),
        ),
    }
}

/// Modules whose name alone is a sensible `WORLDD_LOG` directive (every line of that module).
const LOG_TARGETS: &[&str] = &[
    "worldd",
    "broker_core",
    "dialect",
    "handler_api",
    "handler_kit",
    "axum",
    "hyper",
    "hyper_util",
    "tower",
    "tower_http",
    "tokio",
    "heed",
    "abi_stable",
];

/// The log filter `WORLDD_LOG` gives, or `default`; and what to tell the operator about it. A
/// value that does not parse would otherwise be dropped without a word, and a bare word that is
/// no level (`warning`, `debg`) reads as a module's name, which leaves the daemon silent.
fn log_filter(
    value: Option<String>,
    default: &str,
) -> (tracing_subscriber::EnvFilter, Option<String>) {
    use tracing_subscriber::filter::LevelFilter;
    use tracing_subscriber::EnvFilter;
    let Some(value) = value.filter(|v| !v.trim().is_empty()) else {
        return (EnvFilter::new(default), None);
    };
    let filter = match EnvFilter::try_new(&value) {
        Ok(filter) => filter,
        Err(e) => {
            let shown = dialect::quote::quote(&value);
            let complaint =
                format!("WORLDD_LOG={shown} does not parse ({e}); logging at {default}");
            return (EnvFilter::new(default), Some(complaint));
        }
    };
    let stray = value.split(',').map(str::trim).find(|item| {
        !item.is_empty()
            && !item.contains(['=', '['])
            && item.parse::<LevelFilter>().is_err()
            && !LOG_TARGETS.contains(&item.split("::").next().unwrap_or(item))
    });
    let complaint = stray.map(|item| {
        format!(
            "WORLDD_LOG: {} is no level (off, error, warn, info, debug, trace), so it names a module, and only that module's lines are logged; for a level write e.g. WORLDD_LOG=warn",
            dialect::quote::quote(item)
        )
    });
    (filter, complaint)
}

/// Seconds since the Unix epoch.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::{command_line, log_filter, log_format};

    #[test]
    fn the_log_format_is_text_or_json_and_anything_else_is_said() {
        assert_eq!(log_format(None), (false, None));
        assert_eq!(log_format(Some(" ".into())), (false, None));
        assert_eq!(log_format(Some("json".into())), (true, None));
        assert_eq!(log_format(Some("JSON".into())), (true, None));
        assert_eq!(log_format(Some("text".into())), (false, None));
        assert_eq!(
            log_format(Some("logfmt".into())),
            (
                false,
                Some("WORLDD_LOG_FORMAT=\"logfmt\" is neither text nor json; logging text".into())
            )
        );
    }

    /// A `WORLDD_LOG` that does not parse, or names a level that does not exist, is said once on
    /// stderr instead of leaving the daemon silent without a word; levels, module names and
    /// `module=level` directives pass quietly.
    #[test]
    fn a_log_filter_that_is_no_level_or_does_not_parse_is_said() {
        let said = |v: &str| log_filter(Some(v.to_owned()), "info").1;
        for quiet in [
            "",
            "debug",
            "WARN",
            "info,worldd=debug",
            "worldd",
            "broker_core::storage",
            "off",
            "hyper=trace,warn",
        ] {
            assert_eq!(said(quiet), None, "{quiet:?}");
        }
        assert_eq!(
            said("warning").as_deref(),
            Some("WORLDD_LOG: \"warning\" is no level (off, error, warn, info, debug, trace), so it names a module, and only that module's lines are logged; for a level write e.g. WORLDD_LOG=warn")
        );
        assert!(said("info,debg")
            .unwrap()
            .starts_with("WORLDD_LOG: \"debg\" is no level"));
        let broken = said("worldd=[").unwrap();
        assert!(
            broken.starts_with("WORLDD_LOG=\"worldd=[\" does not parse (")
                && broken.ends_with("); logging at info"),
            "{broken}"
        );
        assert_eq!(log_filter(None, "warn").1, None);
    }

    /// Every `worldd …` command line in every verb's `Examples:` help: each part of a pipeline
    /// that runs `worldd`, without its redirection or trailing comment.
    fn help_examples(cmd: &clap::Command, out: &mut Vec<String>) {
        if let Some(help) = cmd.get_after_help() {
            for line in help.to_string().lines() {
                for part in line.split(" | ") {
                    let part = part.split(" #").next().unwrap_or("");
                    let part = part.split(" > ").next().unwrap_or("").trim();
                    if part.starts_with("worldd ") {
                        out.push(part.to_owned());
                    }
                }
            }
        }
        for sub in cmd.get_subcommands() {
            help_examples(sub, out);
        }
    }

    /// A flag renamed or dropped cannot leave an example in `--help` that the binary refuses:
    /// every example parses as the command line it shows.
    #[test]
    fn every_example_in_the_help_parses() {
        let mut examples = Vec::new();
        help_examples(&command_line(), &mut examples);
        assert!(examples.len() > 40, "only {} examples", examples.len());
        let refused: Vec<String> = examples
            .iter()
            .filter_map(|example| {
                let Some(words) = shlex::split(example) else {
                    return Some(format!("{example}\nan unclosed quote"));
                };
                command_line()
                    .try_get_matches_from(&words)
                    .err()
                    .map(|e| format!("{example}\n{e}"))
            })
            .collect();
        assert!(refused.is_empty(), "{}", refused.join("\n"));
    }
}
