//! `worldd quickstart`: a working deployment in one command.
//!
//! Checks its arguments and that it can listen, and asks for confirmation at the terminal,
//! before it touches anything; then creates `./.world` (store, worktrees), a `demo` episode
//! with its worktree, mints a demo credential, prints the MCP client configuration on stdout (everything else goes to
//! stderr, so `worldd quickstart > mcp.json` captures just the configuration) and serves with
//! the shipped plugins. `--print-only` does the same without serving.

use std::path::{Path, PathBuf};

use clap::Args;

use super::dir_locks;
use super::held_signals::HeldSignals;
use super::serve::{self, ServeArgs};
use super::{CliResult, Failure};
use crate::text::{shell_path, shell_word};

#[derive(Args, Debug)]
pub struct QuickstartArgs {
    /// Where to put the store, worktrees and credential.
    #[arg(long, default_value = ".world")]
    pub dir: PathBuf,
    /// The demo episode.
    #[arg(long, default_value = "demo")]
    pub episode: String,
    /// Loopback address to listen on (default: `[serve] bind` of --config, else
    /// 127.0.0.1:7644).
    #[arg(long)]
    pub bind: Option<String>,
    /// Budget for each se-tools grant of a credential it mints (default 50; at most
    /// 9007199254740991). A live credential it reuses keeps its own.
    #[arg(long, value_parser = super::session::budget_arg)]
    pub budget: Option<u64>,
    /// Set up (store, episode, credential) and print the client configuration, without
    /// serving.
    #[arg(long)]
    pub print_only: bool,
    #[command(flatten)]
    pub plugins: serve::PluginArgs,
}

pub fn run(mut a: QuickstartArgs) -> CliResult {
    // The config's `[serve]` keys for what quickstart decides itself: its `bind` is taken as
    // `serve` takes it (a flag wins), and a store or workspace root elsewhere than `--dir` is
    // refused rather than ignored (quickstart keeps its world in `--dir`).
    let own = serve::config_serve_section(&a.plugins.config)?;
    let (bind, bind_key) = match (a.bind.take(), own.bind) {
        (Some(flag), _) => (flag, "--bind"),
        (None, Some(file)) => (file, "[serve] bind"),
        (None, None) => (serve::DEFAULT_BIND.to_owned(), "--bind"),
    };
    for (key, given, ours) in [
        ("db", own.db, a.dir.join("db")),
        (
            "workspace_root",
            own.workspace_root,
            a.dir.join("worktrees"),
        ),
    ] {
        // Compared as resolved: `./.world/db` or its absolute path name what `.world/db` does.
        let resolved = |p: &Path| {
            p.canonicalize()
                .or_else(|_| std::path::absolute(p))
                .unwrap_or_else(|_| p.to_path_buf())
        };
        if let Some(given) = given.filter(|given| resolved(given) != resolved(&ours)) {
            return Err(Failure::usage(format!(
                "[serve] {key} = {:?} in --config: quickstart keeps its world in --dir ({} here); remove the key, give the --dir that holds it, or run `worldd serve --config` for that store",
                given.display().to_string(),
                ours.display()
            )));
        }
    }
    if bind.ends_with(":0") {
        return Err(Failure::usage(
            "quickstart prints a client configuration, so it needs a fixed port (not :0)",
        ));
    }
    // Every argument is checked before anything is made: the episode names a directory (and
    // the credential file), and `../x` would make one outside `--dir`.
    broker_core::session::validate_episode(&a.episode)
        .map_err(|e| Failure::usage(e.to_string()))?;
    // The address goes into the printed configuration even with `--print-only`: one `serve`
    // would refuse is refused now, as `serve` refuses it (`resolve_bind_as` checks it is
    // loopback, naming where it came from).
    let addr = serve::resolve_bind_as(&bind, bind_key)?;
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
    let root = a.dir.join("worktrees");
    // The settings `serve` will read, read now: a mistake in `--config` or `--plugin-config`
    // must not leave a store and a credential behind (`--print-only` too: the printed
    // configuration is for a `serve` with the same flags).
    let serving = ServeArgs {
        db: Some(db.clone()),
        workspace_root: Some(root.clone()),
        bind: Some(bind.clone()),
        open_reads: false,
        plugins: a.plugins,
        ..ServeArgs::default()
    };
    serve::check_settings(&serving)?;
    // The port first: a taken port must not leave a store and a credential behind. And before
    // it, as `serve` does, a store another daemon serves: quickstart would mint a credential
    // and print a configuration for an address where nothing will serve. (`--print-only`
    // serves nothing: it may set up a store a daemon serves.)
    let (listener, store_lock) = if a.print_only {
        (None, None)
    } else {
        let store_lock = dir_locks::existing_store_lock(&db)?;
        (Some(serve::bind_now(addr)?), store_lock)
    };
    let worktree = root.join(&a.episode);
    let token_file = a.dir.join(format!("{}.session", a.episode));
    // What is in the way of the worktree and the store is said before the question, as
    // `session new` says it: after it, the answer was spent on a run that could not succeed.
    check_worktree(&worktree, &a.episode)?;
    check_can_make(&worktree)?;
    if !db.join("data.mdb").exists() {
        if std::fs::symlink_metadata(&db).is_ok_and(|m| !m.is_dir()) {
            return Err(Failure::usage(format!(
                "{} is not a directory, and quickstart puts the store there; remove it first, or give another --dir",
                db.display()
            )));
        }
        check_can_make(&db.join("data.mdb"))?;
    }
    // Checked and asked before anything is made, as `session new` does: a question left
    // unanswered (Ctrl-C, a closed terminal, a killed process) leaves nothing behind.
    let store_dir = super::StoreDir::from(db.clone());
    let minting = if let Some(reused) = live_credential(&store_dir, &token_file, &a.episode)? {
        reused.say(&token_file, &a.episode, a.budget);
        None
    } else {
        let minting = super::session::Minting::check_before_making(
            &store_dir,
            &a.episode,
            a.budget.unwrap_or(DEFAULT_BUDGET),
            &token_file,
        )?;
        minting.confirm()?;
        Some(minting)
    };
    // After the question, whose screen its log lines would crowd, and before anything is made:
    // a config the plugins themselves refuse stops the run here, with nothing made. (The
    // threads the trial leaves need no care for the hold below: it holds the signals for the
    // whole process, whichever thread one is delivered to.)
    serve::try_plugins(&serving)?;
    // From the answer until the credential is written, Ctrl-C, SIGTERM and a closed
    // terminal wait: they would otherwise end the run between the store and the credential,
    // and leave a store and a worktree the next run takes for not its own.
    let held = HeldSignals::hold();
    let made = make(&worktree, &db, minting);
    drop(held);
    made?;
    let token = super::input::file_text(
        &token_file,
        super::input::SESSION_FILE_BYTES,
        &token_file.display().to_string(),
    )
    .map(|t| super::input::credential(&t).to_owned())?;
    let config = serde_json::json!({
        "mcpServers": {
            "worldd": {
                "type": "http",
                "url": format!("http://{bind}/mcp/"),
                "headers": {"Authorization": format!("Bearer {token}")},
            }
        }
    });
    errln!(
        "worldd quickstart: episode {} with worktree {}; credential in {}\nworldd quickstart: the MCP client configuration follows on stdout; A2A clients POST http://{}/a2a/ with the same Authorization header",
        a.episode,
        worktree.display(),
        token_file.display(),
        bind
    );
    outln!(
        "{}",
        serde_json::to_string_pretty(&config).unwrap_or_default()
    );
    // The client verbs default to 127.0.0.1:7644 and no session: what to export for them,
    // from any directory (the session file's path made absolute).
    // Each value one shell word: the lines are pasted into a shell, and a directory with a
    // space (or a `;`) in its name split the path, or ran the rest as a command.
    let mut exports = String::new();
    if bind != serve::DEFAULT_BIND {
        exports.push_str(&format!(
            "\n  export WORLD_ADDR={}",
            shell_word(&format!("http://{bind}"))
        ));
    }
    exports.push_str(&format!(
        "\n  export WORLD_SESSION={}",
        shell_path(&std::path::absolute(&token_file).unwrap_or_else(|_| token_file.clone()))
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
    serve::run_with(serving, launch)
}

/// `--budget` when not given.
const DEFAULT_BUDGET: u64 = 50;

/// The live credential quickstart prints again instead of minting one.
struct Reused {
    grants: Vec<broker_core::grant::Grant>,
    /// Its grants the episode has already spent, with what it spent on each.
    spent: Vec<(broker_core::grant::Grant, u64)>,
}

impl Reused {
    /// Said on stderr: `--budget` is for a credential minted, and a reused one may have
    /// nothing left (budgets belong to the episode), which the agent would learn only from
    /// its calls denied one by one.
    fn say(&self, file: &Path, episode: &str, budget: Option<u64>) {
        let budgets: Vec<u64> = self.grants.iter().map(|g| g.budget).collect();
        let held = match budgets.first() {
            Some(b) if budgets.iter().all(|x| x == b) => {
                format!("budget {b} for each of its {} grant(s)", budgets.len())
            }
            _ => format!(
                "grants {}",
                self.grants
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        };
        errln!(
            "worldd quickstart: reusing the live credential in {} ({held}); delete the file to have quickstart mint a new one",
            file.display()
        );
        if let Some(budget) = budget {
            errln!(
                "worldd quickstart: --budget {budget} applies only to a credential quickstart mints, not to the one it reuses: delete {} and run quickstart again to mint one with it",
                file.display()
            );
        }
        for (g, used) in &self.spent {
            errln!(
                "worldd quickstart: warning: the reused credential's grant {g}: episode {episode} has already spent {used} of {}@{}, so every call of it is denied:budget (budgets belong to the episode): delete {} and run quickstart again with a --budget above {used}",
                g.effect,
                g.scope,
                file.display()
            );
        }
    }
}

/// The credential file's session when it exists and has not expired, for quickstart to print
/// again without minting. It must be an agent's credential of `episode`:
/// a live operator credential there (`.world/ops.session`, as operators.md names one) or
/// another episode's was printed into the agent's configuration as it was, and an operator
/// credential reads every episode. Such a file is refused, nothing made or printed.
/// The store is opened as `session mint` opens it ([`super::session::open_existing`]), so a
/// store it would refuse (beside a daemon that lost its `lock.mdb`, say) is refused here too,
/// `--print-only` included, before its open makes a `lock.mdb`; the mint that follows a
/// credential not reused would say the same.
fn live_credential(
    db: &super::StoreDir,
    token_file: &std::path::Path,
    episode: &str,
) -> Result<Option<Reused>, Failure> {
    let Ok(token) = super::input::file_text(
        token_file,
        super::input::SESSION_FILE_BYTES,
        "the credential file",
    ) else {
        return Ok(None);
    };
    // No store yet: no credential in it (the mint makes one).
    if !db.join("data.mdb").is_file() {
        return Ok(None);
    }
    let store = super::session::open_existing(db)?;
    let id = broker_core::session::credential_id(super::input::credential(&token));
    let session = match broker_core::session::lookup(&store, &id) {
        Ok(Some(s)) if s.is_valid(super::now()) => s,
        _ => return Ok(None),
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
    let spent = super::session::spent_grants(&store, episode, &session.grants)
        .into_iter()
        .map(|(g, used)| (g.clone(), used))
        .collect();
    Ok(Some(Reused {
        grants: session.grants,
        spent,
    }))
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

/// Make the worktree and the store, and mint into the store: on a failure, what this run
/// made is removed again and said.
fn make(worktree: &Path, db: &Path, minting: Option<super::session::Minting<'_>>) -> CliResult {
    let mut made = Made::default();
    let undone = |made: &Made, mut f: Failure| {
        if let Some(removed) = made.undo() {
            f.message.push_str(&format!(
                "; quickstart removed what it had just made ({removed})"
            ));
        }
        f
    };
    // The directories are the daemon's user's alone, whatever the umask (see serve).
    if let Err(e) = made.dirs_to(worktree) {
        return Err(undone(&made, Failure::usage(e)));
    }
    if let Some(minting) = minting {
        if !minting.has_store() {
            // Made and closed here; the mint opens it as every verb does. The store is this
            // run's only when this run's mkdir made its directory: another quickstart on the
            // same --dir may have made it (and minted into it) since the question.
            match private_dir(db) {
                Ok(()) => made.store = Some(db.to_path_buf()),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    return Err(undone(
                        &made,
                        Failure::usage(format!("cannot create {}: {e}", db.display())),
                    ))
                }
            }
            if let Err(e) = broker_core::store::Store::create(db) {
                return Err(undone(
                    &made,
                    Failure::fatal(format!("cannot create {}: {e}", db.display())),
                ));
            }
        }
        minting.deliver().map_err(|f| undone(&made, f))?;
    }
    Ok(())
}

/// `dir`, made 0700 by this process, failing if something is there already.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().mode(0o700).create(dir)
}

/// A worktree that is a file or a symbolic link: refused as `session new` refuses it (a
/// daemon refuses every call in a linked worktree, so the credential would be of no use).
fn check_worktree(worktree: &Path, episode: &str) -> CliResult {
    let Ok(meta) = std::fs::symlink_metadata(worktree) else {
        return Ok(());
    };
    if meta.file_type().is_symlink() {
        return Err(Failure::usage(format!(
            "worktree {} is a symbolic link, and a worktree must be a directory in the workspace root itself (a daemon refuses every call in a linked one); remove the link first, or put the directory it names there in its place, then run quickstart --episode {episode} again",
            worktree.display()
        )));
    }
    if !meta.is_dir() {
        return Err(Failure::usage(format!(
            "{} is a file, not a worktree (a worktree is a directory); remove it first",
            worktree.display()
        )));
    }
    Ok(())
}

/// `path` does not exist yet: the nearest directory above it that does must be one this user
/// may write, or the run would fail after its question, naming a path that does not exist.
fn check_can_make(path: &Path) -> CliResult {
    use std::os::unix::ffi::OsStrExt;
    let Some(standing) = path
        .ancestors()
        .filter(|p| !p.as_os_str().is_empty())
        .find(|p| std::fs::symlink_metadata(p).is_ok())
    else {
        return Ok(());
    };
    if standing == path {
        return Ok(());
    }
    if !standing.is_dir() {
        return Err(Failure::usage(format!(
            "cannot make {}: {} is not a directory; remove it first, or give another --dir",
            path.display(),
            standing.display()
        )));
    }
    let Ok(c) = std::ffi::CString::new(standing.as_os_str().as_bytes()) else {
        return Ok(());
    };
    // SAFETY: `c` is a valid NUL-terminated path for the call's duration.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(Failure::usage(format!(
            "cannot make {}: the directory {} is not writable by you ({e})",
            path.display(),
            standing.display()
        )));
    }
    Ok(())
}

/// Whether the store at `db` holds no session record. This run's own credential is revoked
/// (its record gone) when it could not be delivered, so a record left is another run's: a
/// quickstart on the same `--dir` that minted into this store after it was made. A store that
/// does not open holds none a client could use, unless a daemon serves it: one started on it
/// since is its own (its open here is refused when that daemon lost its `lock.mdb`, and would
/// otherwise make one beside it).
fn holds_no_credential(db: &Path) -> bool {
    if super::doctor::daemon_serves(db) {
        return false;
    }
    let Ok(store) = super::session::open_existing(&super::StoreDir::from(db.to_path_buf())) else {
        return true;
    };
    broker_core::session::list(&store).is_ok_and(|l| l.sessions.is_empty() && l.damaged.is_empty())
}

/// What a quickstart run made: the store and the directories this run's own mkdir made
/// (what another run made meanwhile is not this run's to remove).
#[derive(Default)]
struct Made {
    store: Option<PathBuf>,
    /// Outermost first; each removed only if nothing else is in it.
    dirs: Vec<PathBuf>,
}

impl Made {
    /// Make `worktree` and the directories above it that are missing.
    fn dirs_to(&mut self, worktree: &Path) -> Result<(), String> {
        let missing: Vec<&Path> = worktree
            .ancestors()
            .filter(|p| !p.as_os_str().is_empty())
            .take_while(|p| std::fs::symlink_metadata(p).is_err())
            .collect();
        for d in missing.into_iter().rev() {
            match private_dir(d) {
                Ok(()) => self.dirs.push(d.to_path_buf()),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && d.is_dir() => {}
                Err(e) => return Err(format!("{}: {e}", d.display())),
            }
        }
        Ok(())
    }

    /// Remove what was made: what was removed, if anything.
    fn undo(&self) -> Option<String> {
        let store = self
            .store
            .iter()
            .filter(|db| holds_no_credential(db) && std::fs::remove_dir_all(db).is_ok());
        let dirs = self
            .dirs
            .iter()
            .rev()
            .filter(|d| std::fs::remove_dir(d).is_ok());
        let removed: Vec<String> = store.chain(dirs).map(|d| d.display().to_string()).collect();
        (!removed.is_empty()).then(|| removed.join(", "))
    }
}
