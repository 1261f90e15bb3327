//! `worldd quickstart`: a working deployment in one command.
//!
//! Checks its arguments and that it can listen, and asks for confirmation at the terminal,
//! before it touches anything; then creates `./.world` (store, worktrees), a `demo` episode
//! with its worktree, mints a demo credential, prints the MCP client configuration on stdout (everything else goes to
//! stderr, so `worldd quickstart > mcp.json` captures just the configuration) and serves with
//! the shipped plugins. `--print-only` does the same without serving.

use std::path::{Path, PathBuf};

use clap::Args;

use super::serve::{self, ServeArgs};
use super::{CliResult, Failure};

#[derive(Args, Debug)]
pub struct QuickstartArgs {
    /// Where to put the store, worktrees and credential.
    #[arg(long, default_value = ".world")]
    pub dir: PathBuf,
    /// The demo episode.
    #[arg(long, default_value = "demo")]
    pub episode: String,
    /// Loopback address to listen on.
    #[arg(long, default_value = serve::DEFAULT_BIND)]
    pub bind: String,
    /// Budget for each se-tools grant (at most 9007199254740991).
    #[arg(long, default_value_t = 50, value_parser = super::session::budget_arg)]
    pub budget: u64,
    /// Set up (store, episode, credential) and print the client configuration, without
    /// serving.
    #[arg(long)]
    pub print_only: bool,
    #[command(flatten)]
    pub plugins: serve::PluginArgs,
}

pub fn run(a: QuickstartArgs) -> CliResult {
    if a.bind.ends_with(":0") {
        return Err(Failure::usage(
            "quickstart prints a client configuration, so it needs a fixed port (not :0)",
        ));
    }
    // Every argument is checked before anything is made: the episode names a directory (and
    // the credential file), and `../x` would make one outside `--dir`.
    broker_core::session::validate_episode(&a.episode)
        .map_err(|e| Failure::usage(e.to_string()))?;
    // The address goes into the printed configuration even with `--print-only`: one `serve`
    // would refuse is refused now, as `serve` refuses it.
    let addr = serve::resolve_bind(&a.bind)?;
    crate::server::check_loopback(&addr)
        .map_err(|e| Failure::fatal(format!("daemon startup failed at bind-policy: {e}")))?;
    // `--dir` is made after the question: a file in its way is said before it.
    let standing = a
        .dir
        .ancestors()
        .find(|p| !p.as_os_str().is_empty() && std::fs::symlink_metadata(p).is_ok());
    if let Some(file) = standing.filter(|p| !p.is_dir()) {
        return Err(Failure::usage(format!(
            "--dir {}: {} is not a directory",
            a.dir.display(),
            file.display()
        )));
    }
    let db = a.dir.join("db");
    // The port first: a taken port must not leave a store and a credential behind. And before
    // it, as `serve` does, a store another daemon serves: quickstart would mint a credential
    // and print a configuration for an address where nothing will serve. (`--print-only`
    // serves nothing: it may set up a store a daemon serves.)
    let (listener, store_lock) = if a.print_only {
        (None, None)
    } else {
        let store_lock = serve::existing_store_lock(&db)?;
        (Some(serve::bind_now(addr)?), store_lock)
    };
    let root = a.dir.join("worktrees");
    let worktree = root.join(&a.episode);
    let token_file = a.dir.join(format!("{}.session", a.episode));
    // Checked and asked before anything is made, as `session new` does: a question left
    // unanswered (Ctrl-C, a closed terminal, a killed process) leaves nothing behind.
    let minting = if live_credential(&db, &token_file, &a.episode)? {
        None
    } else {
        let minting =
            super::session::Minting::check_before_making(&db, &a.episode, a.budget, &token_file)?;
        minting.confirm()?;
        Some(minting)
    };
    // What this run makes, so that a failure from here on leaves nothing of it behind.
    let made = Made::noted(&a.dir, &root, &worktree, &db);
    let undone = |mut f: Failure| {
        if let Some(removed) = made.undo() {
            f.message.push_str(&format!(
                "; quickstart removed what it had just made ({removed})"
            ));
        }
        f
    };
    // The directories are the daemon's user's alone, whatever the umask (see serve).
    serve::create_private_dir_all(&worktree)
        .map_err(|e| undone(Failure::usage(format!("{}: {e}", root.display()))))?;
    if let Some(minting) = minting {
        if !minting.has_store() {
            // Made and closed here; the mint opens it as every verb does.
            broker_core::store::Store::create(&db).map_err(|e| {
                undone(Failure::fatal(format!(
                    "cannot create {}: {e}",
                    db.display()
                )))
            })?;
        }
        minting.deliver().map_err(undone)?;
    }
    let token = super::input::file_text(
        &token_file,
        super::input::SESSION_FILE_BYTES,
        &token_file.display().to_string(),
    )?
    .trim()
    .to_owned();
    let config = serde_json::json!({
        "mcpServers": {
            "worldd": {
                "type": "http",
                "url": format!("http://{}/mcp/", a.bind),
                "headers": {"Authorization": format!("Bearer {token}")},
            }
        }
    });
    errln!(
        "worldd quickstart: episode {} with worktree {}; credential in {}\nworldd quickstart: the MCP client configuration follows on stdout; A2A clients POST http://{}/a2a/ with the same Authorization header",
        a.episode,
        worktree.display(),
        token_file.display(),
        a.bind
    );
    outln!(
        "{}",
        serde_json::to_string_pretty(&config).unwrap_or_default()
    );
    // The client verbs default to 127.0.0.1:7644 and no session: what to export for them,
    // from any directory (the session file's path made absolute).
    let mut exports = String::new();
    if a.bind != serve::DEFAULT_BIND {
        exports.push_str(&format!("\n  export WORLD_ADDR=http://{}", a.bind));
    }
    exports.push_str(&format!(
        "\n  export WORLD_SESSION={}",
        std::path::absolute(&token_file)
            .unwrap_or_else(|_| token_file.clone())
            .display()
    ));
    errln!(
        "worldd quickstart: for the client verbs (worldd tools list, call, why) in another terminal:{exports}"
    );
    warn_when_stdout_is_readable();
    if a.print_only {
        return Ok(());
    }
    let launch = serve::Launch {
        listener,
        ready_on_stderr: true,
        store_lock,
    };
    serve::run_with(
        ServeArgs {
            db: Some(db),
            workspace_root: Some(root),
            bind: Some(a.bind),
            open_reads: false,
            plugins: a.plugins,
            ..ServeArgs::default()
        },
        launch,
    )
}

/// True when the credential file holds a session that exists and has not expired, for
/// quickstart to print again without minting. It must be an agent's credential of `episode`:
/// a live operator credential there (`.world/ops.session`, as operators.md names one) or
/// another episode's was printed into the agent's configuration as it was, and an operator
/// credential reads every episode. Such a file is refused, nothing made or printed.
fn live_credential(
    db: &std::path::Path,
    token_file: &std::path::Path,
    episode: &str,
) -> Result<bool, Failure> {
    let Ok(token) = super::input::file_text(
        token_file,
        super::input::SESSION_FILE_BYTES,
        "the credential file",
    ) else {
        return Ok(false);
    };
    let Ok(store) = broker_core::store::Store::open(db, Default::default()) else {
        return Ok(false);
    };
    let id = broker_core::session::credential_id(token.trim());
    let session = match broker_core::session::lookup(&store, &id) {
        Ok(Some(s)) if s.is_valid(super::now()) => s,
        _ => return Ok(false),
    };
    let refused = |what: String| {
        Failure::usage(format!(
            "{} holds {what}, which quickstart does not hand to episode {episode}'s agent; nothing was made or printed: move the file away (quickstart then mints one for {episode}), or give another --episode",
            token_file.display()
        ))
    };
    if session.operator {
        return Err(refused(format!(
            "a live OPERATOR credential (episode {}; it reads every episode)",
            session.episode
        )));
    }
    if session.episode != episode {
        return Err(refused(format!(
            "a live credential of episode {}",
            session.episode
        )));
    }
    Ok(true)
}

/// The configuration holds a bearer credential; `quickstart > mcp.json` under umask 022 makes
/// a file everyone on the machine can read. Said when stdout is such a regular file.
fn warn_when_stdout_is_readable() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let Ok(meta) = std::fs::metadata("/proc/self/fd/1") else {
        return;
    };
    let mode = meta.permissions().mode() & 0o777;
    if meta.is_file() && meta.mode() & 0o044 != 0 {
        errln!(
            "worldd quickstart: warning: stdout is a file others can read (mode {mode:04o}), and the configuration holds the credential: chmod 600 it, or write it with umask 077"
        );
    }
}

/// What a quickstart run is about to make: the store and the directories that did not exist
/// before it.
struct Made {
    store: Option<PathBuf>,
    /// The worktree, then its parents: each removed only if nothing else is in it.
    dirs: Vec<PathBuf>,
}

impl Made {
    fn noted(dir: &Path, root: &Path, worktree: &Path, db: &Path) -> Made {
        let absent = |d: &Path| (!d.exists()).then(|| d.to_path_buf());
        Made {
            store: absent(db),
            dirs: [worktree, root, dir]
                .into_iter()
                .filter_map(absent)
                .collect(),
        }
    }

    /// Remove what was made: what was removed, if anything.
    fn undo(&self) -> Option<String> {
        let store = self
            .store
            .iter()
            .filter(|db| std::fs::remove_dir_all(db).is_ok());
        let dirs = self.dirs.iter().filter(|d| std::fs::remove_dir(d).is_ok());
        let removed: Vec<String> = store.chain(dirs).map(|d| d.display().to_string()).collect();
        (!removed.is_empty()).then(|| removed.join(", "))
    }
}
