//! `worldd session mint|new|list|revoke`: sessions at the operator's terminal.
//!
//! Minting needs one human act: a `y` typed on the controlling terminal. It works while the
//! daemon runs (LMDB serialises writers across processes).

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use broker_core::grant::Grant;
use broker_core::session::{self, Session};
use broker_core::store::{Store, StoreError, StoreOptions};
use clap::{Args, Subcommand};

use super::held_signals::HeldSignals;
use super::secret_file::SecretFile;
use super::{now, CliResult, DbArg, Failure, StoreDir};

/// The eight se-tools effects granted by `--preset se-tools`.
pub const SE_TOOLS_EFFECTS: [&str; 8] = [
    "Workspace.Read",
    "Workspace.Write",
    "Ailang.Check",
    "Ailang.Run",
    "Ailang.RunEnv",
    "Ailang.RunNet",
    "Ailang.Discover",
    "Ailang.CLI",
];

#[derive(Subcommand, Debug)]
pub enum SessionCommand {
    /// Mint a session credential (asks for confirmation on the terminal).
    #[command(
        after_help = "Examples:\n  worldd session mint --episode demo --grant Workspace.Read=worktree:20 --grant Workspace.Write=worktree:5 --out .world/demo.session\n  worldd session mint --episode ci --grant Workspace.Read=worktree:100 --ttl 600\n  worldd session mint --episode demo --preset se-tools --budget 20 --out .world/demo2.session"
    )]
    Mint(MintArgs),
    /// Create an episode's worktree and mint a credential for it.
    #[command(
        after_help = "Examples:\n  worldd session new demo --preset se-tools --out .world/demo.session\n  worldd session new feat-1 --repo ~/src/project --preset se-tools --grant Git.Commit=worktree:5 --out .world/feat-1.session"
    )]
    New(NewArgs),
    /// List session credentials (never the tokens).
    #[command(after_help = "Examples:\n  worldd session list\n  worldd session list --json")]
    List(ListArgs),
    /// Revoke a credential by id, or every credential of an episode.
    #[command(
        after_help = "Examples:\n  worldd session revoke 9b61e1df1743e50ede6511a82ddd3fae574318612d8a82850901b7c0f65bee51\n  worldd session revoke .world/demo.session\n  worldd session revoke --episode demo"
    )]
    Revoke(RevokeArgs),
}

#[derive(Args, Debug)]
pub struct MintArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// The episode: ^[a-z0-9][a-z0-9-]{0,63}$
    #[arg(long)]
    pub episode: String,
    /// EFFECT=SCOPE:BUDGET (repeatable; each effect and scope once; a budget is at most
    /// 9007199254740991).
    #[arg(long = "grant")]
    pub grants: Vec<String>,
    #[command(flatten)]
    pub preset: PresetArgs,
    /// Mint an operator credential: it reads every episode and, with a World.Commit grant,
    /// may commit through POST /v1/commit. Grants are optional for operators.
    #[arg(long)]
    pub operator: bool,
    /// The daemon's workspace root (default: `[serve] workspace_root` of --config, else
    /// .world/worktrees): only looked at, to warn before the question when the episode has no
    /// worktree there.
    #[arg(long)]
    pub workspace_root: Option<PathBuf>,
    #[command(flatten)]
    pub credential: CredentialArgs,
}

/// The lifetime of a credential minted without `--ttl`, by `session mint`, `session new` and
/// `quickstart` alike: a working day and night, so a demo set up in the morning still works.
pub const DEFAULT_TTL: i64 = 24 * 3600;

/// Where a minted credential goes and how long it lives (`mint` and `new`).
#[derive(Args, Debug, Clone)]
pub struct CredentialArgs {
    /// Lifetime in seconds (default: 24 hours), 1 to 315360000 (ten years).
    #[arg(long, default_value_t = DEFAULT_TTL)]
    pub ttl: i64,
    /// Write the credential to this file instead of stdout: created (or atomically replaced)
    /// with mode 0600, never through a symbolic link.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct NewArgs {
    /// The episode.
    pub episode: String,
    #[command(flatten)]
    pub db: DbArg,
    /// Worktrees live in <workspace-root>/<episode> (default: `[serve] workspace_root` of
    /// --config, else .world/worktrees).
    #[arg(long)]
    pub workspace_root: Option<PathBuf>,
    /// Create the worktree with `git worktree add --detach` from this repository.
    #[arg(long)]
    pub repo: Option<PathBuf>,
    #[command(flatten)]
    pub preset: PresetArgs,
    /// Extra or overriding grants, EFFECT=SCOPE:BUDGET.
    #[arg(long = "grant")]
    pub grants: Vec<String>,
    #[command(flatten)]
    pub credential: CredentialArgs,
}

/// `--preset NAME --budget N`: a named grant set, for `session new` and `session mint` alike.
#[derive(Args, Debug)]
pub struct PresetArgs {
    /// A named grant set: `se-tools` grants the eight se-tools effects at worktree:<budget>.
    #[arg(long)]
    pub preset: Option<String>,
    /// Budget for each preset grant (at most 9007199254740991).
    #[arg(long, default_value_t = 50, value_parser = budget_arg)]
    pub budget: u64,
}

impl PresetArgs {
    /// The preset's grants with `--grant`s over them: a `--grant` replaces the preset grant of
    /// its effect and scope; two `--grant`s of one are a mistake, not a silent last-wins.
    fn grants_with(&self, given: &[String]) -> Result<Vec<Grant>, Failure> {
        let mut grants: Vec<Grant> = match self.preset.as_deref() {
            None => Vec::new(),
            Some("se-tools") => se_tools_grants(self.budget),
            Some(other) => {
                return Err(Failure::usage(format!(
                    "unknown --preset {other:?}; known: se-tools"
                )))
            }
        };
        let extra = parse_grants(given)?;
        refuse_duplicates(&extra)?;
        for g in extra {
            grants.retain(|x| !(x.effect == g.effect && x.scope == g.scope));
            grants.push(g);
        }
        Ok(grants)
    }
}

#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub db: DbArg,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct RevokeArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// The credential id (64 hex, as `session list` shows it), or a session file holding the
    /// credential (its id is revoked). The credential itself is taken too, and never printed.
    #[arg(value_name = "ID_OR_FILE")]
    pub credential_id: Option<String>,
    /// Revoke every credential of this episode.
    #[arg(long)]
    pub episode: Option<String>,
    /// Revoke every credential that has expired (their records otherwise stay for good).
    #[arg(long)]
    pub expired: bool,
}

pub fn run(cmd: SessionCommand) -> CliResult {
    match cmd {
        SessionCommand::Mint(a) => {
            let grants = a.preset.grants_with(&a.grants)?;
            let paths = a.db.paths(a.workspace_root.as_deref())?;
            mint(
                &paths.db,
                &a.episode,
                grants,
                a.operator,
                a.credential.ttl,
                a.credential.out.as_deref(),
                &paths.workspace_root,
            )
        }
        SessionCommand::New(a) => new(a),
        SessionCommand::List(a) => list(a),
        SessionCommand::Revoke(a) => revoke(a),
    }
}

/// `--budget N`: a budget a grant can hold (at most 2^53−1), refused by the flag before anything
/// is made or asked rather than by the store after the question.
pub fn budget_arg(text: &str) -> Result<u64, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "{text:?} is not a budget: want a whole number of calls, 0 or more"
        ));
    }
    let max = broker_core::grant::MAX_BUDGET;
    text.parse::<u64>()
        .ok()
        .filter(|b| *b <= max)
        .ok_or_else(|| {
            format!("the budget is at most {max} (2^53−1, the largest integer a session record stores exactly)")
        })
}

/// Effects of the shipped plugins and the daemon beyond the se-tools set, and the scopes
/// their tools use: what a grant's effect or scope a letter or two away from one is most
/// likely a typo of.
const OTHER_SHIPPED_EFFECTS: [&str; 3] = ["Git.Commit", "Registry.Publish", "World.Commit"];
const KNOWN_SCOPES: [&str; 3] = ["worktree", "log", "any"];

/// The scope the shipped tools of a shipped `effect` use.
fn shipped_scope(effect: &str) -> Option<&'static str> {
    match effect {
        "World.Commit" => Some("log"),
        e if SE_TOOLS_EFFECTS.contains(&e) || OTHER_SHIPPED_EFFECTS.contains(&e) => {
            Some("worktree")
        }
        _ => None,
    }
}

fn known_effects() -> Vec<&'static str> {
    SE_TOOLS_EFFECTS
        .iter()
        .chain(&OTHER_SHIPPED_EFFECTS)
        .copied()
        .collect()
}

/// Parse `--grant`s. An effect or scope no tool could ask for (not a name) is refused; one
/// that is a letter or two from a shipped one is said on stderr before the question, since a
/// grant for a misspelled effect silently gives nothing (`0 tool(s)`).
fn parse_grants(texts: &[String]) -> Result<Vec<Grant>, Failure> {
    texts
        .iter()
        .map(|text| {
            let grant = text
                .parse::<Grant>()
                .map_err(|e| Failure::usage(e.to_string()))?;
            if !broker_core::plan::valid_effect_name(&grant.effect) {
                return Err(Failure::usage(format!(
                    "invalid --grant {text:?}: the effect must be dot-separated names of letters, digits and _ (Workspace.Read)"
                )));
            }
            if !broker_core::plan::valid_name(&grant.scope) {
                return Err(Failure::usage(format!(
                    "invalid --grant {text:?}: the scope {:?} {}: a scope starts with a letter or digit, then letters, digits and . _ / - (at most 128 bytes), e.g. worktree (the episode's worktree; a scope is no filesystem path)",
                    grant.scope,
                    scope_fault(&grant.scope)
                )));
            }
            let effects = known_effects();
            for (what, given, known) in [
                ("effect", &grant.effect, &effects[..]),
                ("scope", &grant.scope, &KNOWN_SCOPES[..]),
            ] {
                if let Some(near) = near_miss(given, known) {
                    errln!(
                        "worldd session: warning: --grant {text}: no shipped tool uses the {what} {given}; did you mean {near}? (a third-party plugin's {what} is fine: answer n to stop here)"
                    );
                }
            }
            // A shipped effect at a scope its shipped tools do not use gives them nothing:
            // `worktree/src` read as "writes under src/ only" made a credential with no tool.
            if let Some(used) = shipped_scope(&grant.effect) {
                if grant.scope != used && near_miss(&grant.scope, &KNOWN_SCOPES).is_none() {
                    errln!(
                        "worldd session: warning: --grant {text}: no shipped tool uses {} at scope {}; its tools use {used} (a scope is a label, not a path: worktree is the whole worktree), so this grant gives them nothing (a tool you published at that scope is fine: answer n to stop here)",
                        grant.effect, grant.scope
                    );
                }
            }
            Ok(grant)
        })
        .collect()
}

/// What breaks the scope rule (`^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$`) in `scope`.
fn scope_fault(scope: &str) -> String {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | '-');
    match scope.chars().next() {
        None => "is empty".to_owned(),
        Some(c) if !c.is_ascii_alphanumeric() => format!("starts with {c:?}"),
        _ => match scope.chars().find(|c| !allowed(*c)) {
            Some(c) => format!("holds {c:?}"),
            None => format!("has {} bytes", scope.len()),
        },
    }
}

/// Two grants of one effect and scope, refused before the question: the broker would take the
/// first that allows a call while budget reports list both, so what is left would disagree.
fn refuse_duplicates(grants: &[Grant]) -> CliResult {
    match session::duplicate_grant(grants) {
        None => Ok(()),
        Some((a, b)) => Err(Failure::usage(format!(
            "--grant {a} and --grant {b} both grant {} at scope {}: give each effect and scope once",
            a.effect, a.scope
        ))),
    }
}

/// The known name `given` is most likely a misspelling of: not one of them, and at most two
/// edits from one, case aside.
fn near_miss<'k>(given: &str, known: &[&'k str]) -> Option<&'k str> {
    if known.contains(&given) {
        return None;
    }
    crate::spelling::nearest(given, known.iter().copied(), true)
}

/// Before printing what was read from a store the daemon may be writing: wait until all of it
/// is durable. A commit is visible a moment before its sync, and a power cut in that moment
/// would take back what was printed.
pub fn seen_is_durable(store: &Store) -> CliResult {
    store
        .sync_seen()
        .map_err(|e| Failure::fatal(format!("cannot make what was read durable: {e}")))
}

/// Open an existing store; never create one here.
pub fn open_existing(db: &StoreDir) -> Result<Store, Failure> {
    // As for the verbs that only read: the calls a serving daemon has in flight are no
    // indeterminate effects, and minting beside it must not say they "are never retried".
    if super::doctor::daemon_serves(db) {
        return super::doctor::without_pending_warning(|| open_with(db, StoreOptions::default()));
    }
    open_with(db, StoreOptions::default())
}

/// Open an existing store for a verb that only reads it (`doctor`, `why --db`, `usage`,
/// `session list`, `backup`): read-only where its filesystem is read-only (a snapshot, a backup
/// medium), which LMDB reads without its lock file; as [`open_existing`] elsewhere, except that
/// an older schema is never upgraded. Builds of that schema cannot open an upgraded store, and
/// the operator may be backing it up, or checking it, before upgrading: a schema-2, 3, 4 or 5
/// store is read as it is (said once on stderr), a schema-1 store is refused, and
/// `worldd serve` upgrades either.
pub fn open_to_read(db: &StoreDir) -> Result<Store, Failure> {
    let read_only = broker_core::store::refuses_writes(db);
    let open = || {
        open_with(
            db,
            StoreOptions {
                read_only,
                ..StoreOptions::default()
            },
        )
    };
    // A serving daemon's calls in flight are no indeterminate effects: not warned of as such.
    let (opened, older) = if super::doctor::daemon_serves(db) {
        super::doctor::without_pending_warning(|| broker_core::migrate::keeping_schema(open))
    } else {
        broker_core::migrate::keeping_schema(open)
    };
    match (older, opened) {
        (Some(1), _) => Err(Failure::usage(format!(
            "world store {} uses schema 1, which this build reads only once it is migrated to schema {} (its rows move); nothing was changed: back it up first (a stopped store copies whole with `cp -a`: builds that know only schema 1 cannot open a migrated store), then `worldd serve --db {}` migrates it",
            db.display(),
            broker_core::store::SCHEMA_VERSION,
            db.display()
        ))),
        (Some(found), Ok(store)) => {
            errln!(
                "worldd: world store {} uses schema {found}: read as it is, not upgraded; `worldd serve --db {}` upgrades it to schema {} (builds that know only schema {found} cannot open it then: back it up first)",
                db.display(),
                db.display(),
                broker_core::store::SCHEMA_VERSION
            );
            Ok(store)
        }
        (_, opened) => opened,
    }
}

fn open_with(db: &StoreDir, options: StoreOptions) -> Result<Store, Failure> {
    // As `serve` does: a store or plugin state another user could have written is refused.
    super::placement::refuse_loose_store(db).map_err(Failure::fatal)?;
    // Before the open makes a `lock.mdb`: one beside a daemon that lost its own would not
    // share its write lock (a read-only open makes none, and writes nothing).
    if !options.read_only {
        super::dir_locks::refuse_beside_lockless_daemon(db)?;
    }
    Store::open(db, options).map_err(|e| match e {
        StoreError::NotFound(_) => match crate::backup::interrupted_copy(db) {
            // A backup's destination whose copy was cut short: the store is not there, and why.
            Some(partial) => Failure::usage(format!(
                "{} holds no store, only the unfinished copy of a backup that was interrupted ({}); run the backup again (worldd backup says what it finds there), or remove the directory",
                db.display(),
                partial.display()
            )),
            // The directory is there, its data file is not: say that, and what else is there
            // (the remains of a store, or nothing). The remains of a store are a store that is
            // there and does not open (exit 2, as `serve` says it), not a mistyped path (exit
            // 1): a check keyed on the exit code must not file a lost world under a typo.
            None if db.is_dir() => {
                let beside = super::placement::beside_data_file(db);
                let shown = std::path::absolute(db).unwrap_or_else(|_| db.to_path_buf());
                if beside.is_empty() {
                    Failure::usage(format!(
                        "world store {} is an empty directory (no data.mdb); refusing to create one: run this in the directory the daemon was started in, or pass --db with the daemon's store (worldd serve creates a store, for a new world only)",
                        shown.display()
                    ))
                } else {
                    Failure::fatal(format!(
                        "world store {} has no data.mdb, only {}: its data file was lost (a restore or copy gone wrong?); refusing to create one: restore the directory from a backup, or pass --db with the daemon's store",
                        shown.display(),
                        beside.join(", ")
                    ))
                }
            }
            // Something other than a directory is in its place (a file): not "does not exist",
            // which would send the operator looking for a missing directory.
            None if db.exists() => Failure::usage(StoreError::NotADirectory(db.to_path_buf()).to_string()),
            // The store says it is absent (it never creates one unless asked): a usage error
            // here. Most often the verb runs in another directory than the daemon's (a second
            // terminal), where `worldd serve` would fail on the daemon's port: say where it
            // looked, and what to do; a path from a config file as written there too, since a
            // relative one is taken against this directory, not the file's.
            None => Failure::usage(format!(
                "world store {} does not exist{}; refusing to create one: run this in the directory the daemon was started in, or pass --db with the daemon's store (worldd serve creates a store, for a new world only)",
                std::path::absolute(db).unwrap_or_else(|_| db.to_path_buf()).display(),
                db.origin()
                    .map(|from| format!(" ({from})"))
                    .unwrap_or_default()
            )),
        },
        e => Failure::fatal(format!("cannot open {}: {e}", db.display())),
    })
}

/// Ask on the controlling terminal; `Ok(())` only for `y` or `yes`.
fn confirm(question: &str) -> CliResult {
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .map_err(|e| {
            Failure::usage(format!(
                "refusing: no controlling terminal ({e}); minting a session credential requires one human act at a terminal"
            ))
        })?;
    let mut writer = tty.try_clone().map_err(|e| Failure::usage(e.to_string()))?;
    write!(writer, "{question}").map_err(|e| Failure::usage(e.to_string()))?;
    writer.flush().map_err(|e| Failure::usage(e.to_string()))?;
    let mut line = String::new();
    std::io::BufReader::new(tty)
        .read_line(&mut line)
        .map_err(|e| Failure::usage(e.to_string()))?;
    match line.trim() {
        "y" | "yes" => Ok(()),
        _ => Err(Failure::usage("aborted (not confirmed)")),
    }
}

/// Whether a call under `grants` can need the episode's worktree: only the `worktree` scope
/// binds it (the daemon checks it exists for such an effect); `any`, `log` and a third-party
/// plugin's own scopes name none.
fn needs_worktree(grants: &[Grant]) -> bool {
    grants.iter().any(|g| g.scope == "worktree")
}

/// Where `session new` makes worktrees, and `session mint` looks for them, unless told.
pub(crate) const DEFAULT_WORKSPACE_ROOT: &str = ".world/worktrees";

/// A credential file inside the workspace root is where the agents' tools read files as the
/// daemon's user: an operator's credential (it reads every episode) is refused there, any other
/// warned of before the question.
fn check_out_beside_agents(out: Option<&Path>, root: &Path, operator: bool) -> CliResult {
    let Some(out) = out.filter(|out| crate::backup::lies_within(out, root)) else {
        return Ok(());
    };
    if operator {
        return Err(Failure::usage(format!(
            "refusing to write the credential to {}: it is inside the workspace root {}, where agents' tools read files, and an operator credential reads every episode; write it outside the root",
            out.display(),
            root.display()
        )));
    }
    errln!(
        "worldd session: warning: {} is inside the workspace root {}, where agents' tools read files: an agent may read this credential; answer n and write it outside the root",
        out.display(),
        root.display()
    );
    Ok(())
}

/// `path` made absolute for a message (as it was given when that fails).
fn shown_path(path: &Path) -> String {
    std::path::absolute(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}

fn mint(
    db: &StoreDir,
    episode: &str,
    grants: Vec<Grant>,
    operator: bool,
    ttl: i64,
    out: Option<&Path>,
    root: &Path,
) -> CliResult {
    // Only an operator's credential may commit: an agent's World.Commit grant gives nothing.
    if let Some(commit) = grants
        .iter()
        .find(|g| g.effect == "World.Commit" && !operator)
    {
        errln!(
            "worldd session: warning: --grant {commit}: only an operator credential (--operator) may commit, so this grant gives an agent's credential nothing (answer n to stop here)"
        );
    }
    let minting = Minting::check(db, episode, grants, operator, ttl, out)?;
    check_out_beside_agents(out, root, operator)?;
    minting.warn_of_spent_grants();
    // A credential whose grants need the episode's worktree has every call refused while it
    // is missing: say so, and how to fix it, before the question (an operator's credential
    // reads every episode: no one; a grant of another scope, such as `any`, needs none, nor
    // one that no published tool uses at that scope: it gives nothing, which is said instead).
    let unmatched = minting.warn_of_unmatched_scopes();
    let useful: Vec<Grant> = minting
        .grants
        .iter()
        .filter(|g| !unmatched.contains(g))
        .cloned()
        .collect();
    let needs_worktree = needs_worktree(&useful);
    let worktree = root.join(episode);
    let link = std::fs::symlink_metadata(&worktree).is_ok_and(|m| m.file_type().is_symlink());
    if !operator && needs_worktree && link {
        errln!(
            "worldd session: warning: episode {episode}'s worktree {} is a symbolic link: every call of this credential is refused while it is one (a worktree must be a directory in the workspace root itself, which no link can redirect); put the directory there in place of the link",
            shown_path(&worktree)
        );
    } else if !operator && needs_worktree && !worktree.is_dir() {
        errln!(
            "worldd session: warning: episode {episode} has no worktree {}: every call of this credential is refused until it exists; `worldd session new {episode}` creates one, or pass --workspace-root with the daemon's root if it serves another",
            shown_path(&worktree)
        );
    }
    minting.confirm()?;
    // From the answer until the credential is written: Ctrl-C, SIGTERM or a closed terminal
    // between the mint and the file would leave a live credential nobody holds.
    let _held = HeldSignals::hold();
    minting.deliver()
}

/// A mint checked and not yet confirmed: nothing is made until the operator says `y`, so an
/// interrupt at the prompt leaves nothing behind.
pub(crate) struct Minting<'a> {
    db: &'a StoreDir,
    /// `None` only for quickstart's store, made after the answer.
    store: Option<Store>,
    episode: &'a str,
    grants: Vec<Grant>,
    operator: bool,
    ttl: i64,
    out: Option<&'a Path>,
}

impl<'a> Minting<'a> {
    fn check(
        db: &'a StoreDir,
        episode: &'a str,
        grants: Vec<Grant>,
        operator: bool,
        ttl: i64,
        out: Option<&'a Path>,
    ) -> Result<Minting<'a>, Failure> {
        let mut minting = Minting::check_arguments(db, episode, grants, operator, ttl, out)?;
        minting.store = Some(open_existing(db)?);
        if let Some(path) = out {
            SecretFile::check(path).map_err(|e| Failure::usage(e.to_string()))?;
        }
        Ok(minting)
    }

    /// `quickstart`'s mint of the se-tools grants into `out`, checked before the store, the
    /// worktree and the directory of `out` are made (after the answer, by quickstart): what
    /// exists of them is checked now, the rest when [`Minting::deliver`] makes the credential.
    pub(crate) fn check_before_making(
        db: &'a StoreDir,
        episode: &'a str,
        budget: u64,
        out: &'a Path,
    ) -> Result<Minting<'a>, Failure> {
        let grants = se_tools_grants(budget);
        let mut minting =
            Minting::check_arguments(db, episode, grants, false, DEFAULT_TTL, Some(out))?;
        if db.join("data.mdb").is_file() {
            minting.store = Some(open_existing(db)?);
            minting.warn_of_spent_grants();
        }
        let dir = out.parent().filter(|d| !d.as_os_str().is_empty());
        if dir.is_none_or(Path::is_dir) {
            SecretFile::check(out).map_err(|e| Failure::usage(e.to_string()))?;
        }
        Ok(minting)
    }

    /// Whether the store was there when the mint was checked.
    pub(crate) fn has_store(&self) -> bool {
        self.store.is_some()
    }

    /// Everything but the store and `out`, which no mint makes.
    fn check_arguments(
        db: &'a StoreDir,
        episode: &'a str,
        grants: Vec<Grant>,
        operator: bool,
        ttl: i64,
        out: Option<&'a Path>,
    ) -> Result<Minting<'a>, Failure> {
        session::validate_episode(episode).map_err(|e| Failure::usage(e.to_string()))?;
        if grants.is_empty() && !operator {
            return Err(Failure::usage(
                "at least one --grant EFFECT=SCOPE:BUDGET is required",
            ));
        }
        if ttl < 1 {
            return Err(Failure::usage("--ttl must be at least 1 second"));
        }
        if ttl > session::MAX_TTL_SECS {
            return Err(Failure::usage(
                session::SessionError::TtlTooLong(ttl).to_string(),
            ));
        }
        refuse_duplicates(&grants)?;
        Ok(Minting {
            db,
            store: None,
            episode,
            grants,
            operator,
            ttl,
            out,
        })
    }

    /// Budgets belong to the episode: a grant whose budget the episode has already spent
    /// gives the new credential nothing of that effect (every call `denied:budget`). Said
    /// before the question; a store that cannot tell is not held against the mint.
    fn warn_of_spent_grants(&self) {
        let Some(store) = &self.store else {
            return;
        };
        for (g, used) in spent_grants(store, self.episode, &self.grants) {
            errln!(
                "worldd session: warning: --grant {g}: episode {} has already spent {used} of {}@{}, so this budget of {} leaves it none and every call of it is denied:budget (budgets belong to the episode: a budget above {used} allows more; answer n to stop here)",
                self.episode,
                g.effect,
                g.scope,
                g.budget
            );
        }
    }

    /// Grants whose effect the store's published tools use, but none at the grant's scope:
    /// such a grant shows its credential none of them (`0 tool(s)`). Each is said before the
    /// question, with the scopes the tools use; the shipped effects' are said by
    /// [`parse_grants`] already, from what the shipped tools use. A store that has published
    /// no tool of the effect (or none yet) says nothing: the tools may come later.
    fn warn_of_unmatched_scopes(&self) -> Vec<Grant> {
        let Some(store) = &self.store else {
            return Vec::new();
        };
        let Ok(registry) =
            broker_core::registry::load(store, broker_core::registry::DEFAULT_REGISTRY)
        else {
            return Vec::new();
        };
        let mut unmatched = Vec::new();
        for g in self
            .grants
            .iter()
            .filter(|g| shipped_scope(&g.effect).is_none())
        {
            // A tool's plan may ask for any effect it declares, not only its access
            // (ailang-run asks for Ailang.RunEnv beside Ailang.Run): a grant for one of them
            // at a scope declared there is used.
            let scopes: std::collections::BTreeSet<&str> = registry
                .entries()
                .flat_map(|e| {
                    std::iter::once(&e.transition.access).chain(&e.transition.declared_effects)
                })
                .filter(|a| a.effect == g.effect)
                .map(|a| a.scope.as_str())
                .collect();
            if scopes.is_empty() || scopes.contains(g.scope.as_str()) {
                continue;
            }
            let used: Vec<&str> = scopes.into_iter().collect();
            errln!(
                "worldd session: warning: --grant {g}: no published tool uses {} at scope {}; its tools use {} (a scope is the label a tool declares, not a place), so this grant gives them nothing (answer n to stop here)",
                g.effect,
                g.scope,
                used.join(", ")
            );
            unmatched.push(g.clone());
        }
        unmatched
    }

    pub(crate) fn confirm(&self) -> CliResult {
        let kind = if self.operator {
            "an OPERATOR credential (reads every episode)"
        } else {
            "a session credential"
        };
        confirm(&format!(
            "Confirm mint for episode {} ({} grant(s), expiry +{}s) with {kind}? [y/N] ",
            self.episode,
            self.grants.len(),
            self.ttl
        ))
    }

    /// Mint, and hand the credential over: into the file (created now, before the mint, so
    /// that a file that cannot be made mints nothing) or onto stdout. Undelivered, it is
    /// revoked.
    pub(crate) fn deliver(self) -> CliResult {
        let Minting {
            db,
            store,
            episode,
            grants,
            operator,
            ttl,
            out,
        } = self;
        let store = match store {
            Some(store) => store,
            None => open_existing(db)?,
        };
        let file = out
            .map(SecretFile::prepare)
            .transpose()
            .map_err(|e| Failure::usage(e.to_string()))?;
        let n = grants.len();
        let minted = if operator {
            session::mint_operator(&store, episode, grants, ttl, now())
        } else {
            session::mint(&store, episode, grants, ttl, now())
        }
        .map_err(|e| Failure::fatal(e.to_string()))?;
        let s = &minted.session;
        errln!(
            "worldd session mint: credential_id={} (episode {episode}, {n} grant(s), expires {})",
            s.credential_id,
            rfc3339(s.expires_at)
        );
        match (out, file) {
            (Some(path), Some(file)) => {
                if let Err(e) = file.commit(format!("{}\n", minted.token).as_bytes()) {
                    // Undelivered, so unusable: revoke it rather than leave a live credential
                    // nobody holds.
                    let revoked = session::revoke(&store, &s.credential_id);
                    return Err(undelivered(e.to_string(), &s.credential_id, revoked));
                }
                // On stderr, as a report: stdout carries only data (the credential, without
                // `--out`), so that `quickstart > mcp.json` holds the configuration alone.
                errln!(
                    "minted session credential for episode {episode}: {n} grant(s), expires epoch {} ({}), written to {}",
                    s.expires_at,
                    rfc3339(s.expires_at),
                    path.display()
                );
            }
            _ => {
                if let Err(e) = super::output::try_write(format!("{}\n", minted.token)) {
                    // Undelivered, as above; and said, even for a closed pipe.
                    let revoked = session::revoke(&store, &s.credential_id);
                    return Err(undelivered(
                        super::output::unwritten(&e),
                        &s.credential_id,
                        revoked,
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The failure of a credential minted but not delivered (`why` says why not), given what
/// revoking it came to. A full or failing disk that refused the credential's file often
/// refuses the revoke's durable write too: then the credential is live, and said so.
fn undelivered(
    why: String,
    credential_id: &str,
    revoked: Result<bool, session::SessionError>,
) -> Failure {
    match revoked {
        Ok(_) => Failure::usage(format!("{why}; the credential was revoked")),
        Err(e) => Failure::fatal(format!(
            "{why}; it could not be revoked ({e}): run worldd session revoke {credential_id} once there is room"
        )),
    }
}

/// The grants among `grants` whose budget `episode` has already spent, each with what it
/// spent: a credential holding one gets nothing of that effect (every call `denied:budget`).
/// A store that cannot tell names none.
pub(crate) fn spent_grants<'g>(
    store: &Store,
    episode: &str,
    grants: &'g [Grant],
) -> Vec<(&'g Grant, u64)> {
    let Ok(spent) = store.read(|r| broker_core::journal::spent(r, episode)) else {
        return Vec::new();
    };
    grants
        .iter()
        .map(|g| (g, broker_core::journal::spent_on(&spent, g)))
        .filter(|(g, used)| *used >= g.budget)
        .collect()
}

/// The eight se-tools effects at `worktree:<budget>` (`--preset se-tools`, quickstart).
fn se_tools_grants(budget: u64) -> Vec<Grant> {
    SE_TOOLS_EFFECTS
        .iter()
        .map(|e| Grant {
            effect: (*e).into(),
            scope: "worktree".into(),
            budget,
        })
        .collect()
}

fn new(a: NewArgs) -> CliResult {
    let super::StorePaths {
        db,
        workspace_root: root,
    } = a.db.paths(a.workspace_root.as_deref())?;
    session::validate_episode(&a.episode).map_err(|e| Failure::usage(e.to_string()))?;
    let grants = a.preset.grants_with(&a.grants)?;
    if grants.is_empty() {
        return Err(Failure::usage(
            "give --preset se-tools or at least one --grant",
        ));
    }
    let needs_worktree = needs_worktree(&grants);
    // Everything is checked, then asked, before anything is made: an interrupt at the
    // prompt leaves no worktree (which would make the same command fail next time).
    let minting = Minting::check(
        &db,
        &a.episode,
        grants,
        false,
        a.credential.ttl,
        a.credential.out.as_deref(),
    )?;
    check_out_beside_agents(a.credential.out.as_deref(), &root, false)?;
    // Budgets belong to the episode, as for `session mint`: a new worktree refills nothing.
    minting.warn_of_spent_grants();
    if let Some(repo) = &a.repo {
        check_repo(repo)?;
    }
    let worktree = root.join(&a.episode);
    // Another store, but the default workspace root: the worktree is made under this
    // directory, where a daemon serving that store may not look (which matters only to grants
    // that need the worktree).
    // A daemon serves the store but holds no lock on this workspace root (`serve` flocks the
    // root it serves): its root is another, and it would never look in this worktree.
    if needs_worktree && super::doctor::daemon_serves(&db) && !super::doctor::flock_held(&root) {
        errln!(
            "worldd session: warning: the daemon serving {} does not serve the workspace root {}: it would never look in the worktree {} made there; answer n and pass --workspace-root with the daemon's",
            db.display(),
            root.display(),
            shown_path(&worktree)
        );
    } else if needs_worktree
        && root == Path::new(DEFAULT_WORKSPACE_ROOT)
        && *db != *Path::new(super::DEFAULT_DB)
    {
        errln!(
            "worldd session: warning: the worktree goes to {} (the default --workspace-root, under this directory) while the store is {}: if the daemon serves another workspace root, answer n and pass --workspace-root with it",
            shown_path(&worktree),
            db.display()
        );
    }
    // A file where the root should be was told to `chmod 700` it, asked, and only then failed.
    if std::fs::metadata(&root).is_ok_and(|m| !m.is_dir()) {
        return Err(Failure::usage(format!(
            "--workspace-root {} is not a directory (the workspace root holds one directory per episode)",
            root.display()
        )));
    }
    // Not followed: a link there is no worktree a daemon serves ([`worktree_of`]).
    if let Ok(meta) = std::fs::symlink_metadata(&worktree) {
        if !meta.is_dir() && !meta.file_type().is_symlink() {
            return Err(Failure::usage(format!(
                "{} is a file, not a worktree (a worktree is a directory); remove it first",
                worktree.display()
            )));
        }
        if meta.file_type().is_symlink() {
            return Err(Failure::usage(format!(
                "worktree {} is a symbolic link, and a worktree must be a directory in the workspace root itself (a daemon refuses every call in a linked one); remove the link first, or put the directory it names there in its place and run worldd session mint --episode {} --grant EFFECT=SCOPE:BUDGET",
                worktree.display(),
                a.episode
            )));
        }
        // Removing the directory starts no episode afresh: its spend, its used keys and its
        // other credentials stay with its name, so a new credential of it may be dead on
        // arrival.
        return Err(Failure::usage(format!(
            "worktree {} already exists; to give episode {ep} another credential, run worldd session mint --episode {ep} --grant EFFECT=SCOPE:BUDGET (its worktree stays); to start afresh, give a new episode name (what episode {ep} has spent stays with it, whatever becomes of its worktree)",
            worktree.display(),
            ep = a.episode
        )));
    }
    // A worktree of `--repo` removed by hand is still registered in the repository: git would
    // refuse the path after the question. An unlocked registration of this very path (under the
    // workspace root, its directory gone) is replaced; a locked one is the operator's to lift.
    let replace = match a
        .repo
        .as_deref()
        .map(|repo| (repo, stale_registration(repo, &worktree)))
    {
        Some((repo, StaleRegistration::Locked)) => {
            let at = shown_path(&worktree);
            return Err(Failure::usage(format!(
                "--repo {} still registers a locked worktree at {at}, whose directory is gone; nothing was made: run git -C {} worktree unlock {}, then session new again (it replaces the registration)",
                repo.display(),
                crate::text::shell_path(repo),
                crate::text::shell_path(
                    &std::path::absolute(&worktree).unwrap_or_else(|_| worktree.clone())
                )
            )));
        }
        Some((repo, StaleRegistration::Unlocked)) => {
            errln!(
                "worldd session new: --repo {} still registers the worktree {}, whose directory was removed: the registration is replaced",
                repo.display(),
                shown_path(&worktree)
            );
            true
        }
        _ => false,
    };
    // As `serve` refuses such a root at start, before anything is made or asked: a worktree
    // inside the store (beside its data file and plugins' state, in what `backup` copies), a
    // store inside the workspace root, or a root inside a directory another running worldd
    // holds as its own (a daemon's worktree, its store, a plugin's stateDir).
    if let Some(why) = super::placement::nested(&db, &root) {
        return Err(Failure::usage(format!(
            "{why}: a daemon refuses to serve them so, and no worktree is made there; nothing was made: pass a --workspace-root outside the store (and the store outside it)"
        )));
    }
    // The root itself held by a process that does not serve this store: another daemon's own
    // workspace root (or store), whose agents write there (serve refuses it for the root's
    // lock). The daemon serving this store holds its own root: that one is ours.
    let root_holder = crate::proc_locks::exclusive_holder(&root);
    if root_holder.is_some()
        && root_holder != crate::proc_locks::exclusive_holder(&db.join("data.mdb"))
    {
        return Err(Failure::usage(format!(
            "the workspace root {} is held by another running worldd as its own (its workspace root or its store), not by a daemon serving {}: no daemon serving this store would serve a worktree made there; nothing was made: pass that daemon's --db, or a --workspace-root of this store's",
            super::paths::real_so_far(&root).display(),
            db.display()
        )));
    }
    if let Some(held) = super::dir_locks::held_above(&db, &root) {
        return Err(Failure::usage(format!(
            "the {} {} is inside {}, which another running worldd process holds as its own (a daemon's workspace root or store, a plugin's stateDir, a backup's destination): no daemon would serve a worktree made there; nothing was made: pass a {} outside it",
            held.what,
            held.real.display(),
            held.above.display(),
            held.flag
        )));
    }
    // As `serve` does: a root another user could have written is refused (they could swap
    // the worktree for theirs), one others may read is warned of.
    super::placement::refuse_loose_dir("workspace root", &root).map_err(Failure::fatal)?;
    if let Some(warning) = super::placement::others_may_enter(&root) {
        errln!("worldd session: warning: {warning}");
    }
    minting.confirm()?;
    // From the answer until the credential is written (or what was made is removed again),
    // Ctrl-C, SIGTERM and a closed terminal wait: mid-checkout they left a worktree the next
    // run refuses as existing and no credential, after the mint a credential nobody holds.
    let held = HeldSignals::hold();
    super::placement::create_private_dir_all(&root)
        .map_err(|e| Failure::usage(format!("cannot create {}: {e}", root.display())))?;
    create_worktree(&worktree, a.repo.as_deref(), replace, &held)?;
    let result = minting.deliver();
    if result.is_err() {
        // Leave nothing half-made behind.
        remove_worktree(&worktree, a.repo.as_deref(), &held);
    } else {
        errln!("worldd session new: worktree {}", worktree.display());
    }
    drop(held);
    result
}

/// `git -C REPO` as `session new --repo` runs it, as the git plugin runs git: none of git's own
/// environment variables (`GIT_DIR`, `GIT_WORK_TREE`, `GIT_INDEX_FILE`, `GIT_CONFIG_PARAMETERS`,
/// …, which beat `-C`: a `GIT_DIR` in the operator's shell checked out another repository), no
/// system or user config and no user attributes file (the plugin commits with none, so a
/// user-config filter or attribute that smudged the checkout would never clean what it
/// commits), and no hooks or fsmonitor program of the
/// repository (which would run as the operator). `GIT_EXEC_PATH` says only where git's own
/// programs are.
fn repo_git(repo: &Path) -> std::process::Command {
    let mut git = std::process::Command::new("git");
    for (name, _) in std::env::vars_os() {
        let name_text = name.to_string_lossy();
        if name_text.starts_with("GIT_") && name_text != "GIT_EXEC_PATH" {
            git.env_remove(&name);
        }
    }
    git.env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
            // git reads the user's attributes file ($XDG_CONFIG_HOME/git/attributes, else
            // ~/.config/git/attributes) whatever GIT_CONFIG_GLOBAL says.
            "-c",
            "core.attributesFile=/dev/null",
        ])
        .arg("-C")
        .arg(repo)
        .stdin(std::process::Stdio::null());
    git
}

/// `--repo` names a git repository: checked before the question, which a repository git cannot
/// check a worktree out of would otherwise spend on a command that fails after it.
fn check_repo(repo: &Path) -> CliResult {
    let answer = repo_git(repo)
        .args(["rev-parse", "--git-dir"])
        .output()
        .map_err(|e| Failure::usage(format!("--repo {}: cannot run git: {e}", repo.display())))?;
    if answer.status.success() {
        // A repository with no commit (HEAD unborn, as `git init` leaves it) passes the check
        // above, and `git worktree add --detach` then fails after the question.
        let head = repo_git(repo)
            .args(["rev-parse", "--verify", "-q", "HEAD^{commit}"])
            .output()
            .map_err(|e| {
                Failure::usage(format!("--repo {}: cannot run git: {e}", repo.display()))
            })?;
        if !head.status.success() {
            return Err(Failure::usage(format!(
                "--repo {}: has no commit to check out (its HEAD is unborn); commit something first, or give a repository with a commit; nothing was made",
                repo.display()
            )));
        }
        return Ok(());
    }
    let said = String::from_utf8_lossy(&answer.stderr);
    let said = said.lines().next().unwrap_or_default().trim();
    Err(Failure::usage(format!(
        "--repo {}: not a git repository (git says: {}); give the repository the worktree is checked out from",
        repo.display(),
        if said.is_empty() { "nothing" } else { said }
    )))
}

/// How `repo` still registers a worktree at `path` whose directory is gone (removed by hand):
/// git refuses to add one there again ("missing but already registered worktree") unless told
/// to replace the registration, twice over for a locked one.
#[derive(Debug, PartialEq)]
enum StaleRegistration {
    None,
    Unlocked,
    Locked,
}

/// Asked before the question (`git worktree list --porcelain`): a repository git cannot list
/// the worktrees of has none in the way.
fn stale_registration(repo: &Path, path: &Path) -> StaleRegistration {
    let Ok(answer) = repo_git(repo)
        .args(["worktree", "list", "--porcelain"])
        .output()
    else {
        return StaleRegistration::None;
    };
    if !answer.status.success() {
        return StaleRegistration::None;
    }
    // git keeps the absolute path it was given; the directory above may be spelt through a
    // symbolic link either way.
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let resolved = match (absolute.parent(), absolute.file_name()) {
        (Some(parent), Some(name)) => parent
            .canonicalize()
            .map(|p| p.join(name))
            .unwrap_or_else(|_| absolute.clone()),
        _ => absolute.clone(),
    };
    let text = String::from_utf8_lossy(&answer.stdout);
    for block in text.split("\n\n") {
        let Some(at) = block
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("worktree "))
        else {
            continue;
        };
        if Path::new(at) != absolute && Path::new(at) != resolved {
            continue;
        }
        return if block
            .lines()
            .any(|l| l == "locked" || l.starts_with("locked "))
        {
            StaleRegistration::Locked
        } else {
            StaleRegistration::Unlocked
        };
    }
    StaleRegistration::None
}

/// The worktree is made with mode 0700 whatever the umask (which can only narrow it), and
/// never taken over when it exists: under `umask 000` it was 0777, and other users could write
/// or read the episode's files (see `serve::create_private_dir_all`). With `--repo`, git
/// checks out into the empty directory made so; `replace` replaces the registration git still
/// holds for the path (its directory gone: see [`stale_registration`]).
fn create_worktree(
    path: &Path,
    repo: Option<&Path>,
    replace: bool,
    held: &HeldSignals,
) -> CliResult {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(path)
        .map_err(|e| Failure::usage(format!("cannot create {}: {e}", path.display())))?;
    match repo {
        None => Ok(()),
        Some(repo) => {
            let mut git = repo_git(repo);
            held.also_in(&mut git);
            git.args(["worktree", "add", "--detach"]);
            if replace {
                git.arg("--force");
            }
            let status = git
                .arg(std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()))
                .status();
            let failed = match status {
                Ok(status) if status.success() => return Ok(()),
                Ok(status) => format!("git worktree add failed ({status})"),
                Err(e) => format!("cannot run git: {e}"),
            };
            // The empty directory made for git goes again: the next try would find it.
            let _ = std::fs::remove_dir(path);
            Err(Failure::usage(failed))
        }
    }
}

fn remove_worktree(path: &Path, repo: Option<&Path>, held: &HeldSignals) {
    if let Some(repo) = repo {
        let mut git = repo_git(repo);
        held.also_in(&mut git);
        let _ = git
            .args(["worktree", "remove", "--force"])
            .arg(std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()))
            .status();
    }
    let _ = std::fs::remove_dir_all(path);
}

fn rfc3339(t: i64) -> String {
    // Civil-from-days (Howard Hinnant's algorithm), UTC.
    let days = t.div_euclid(86_400);
    let secs = t.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60
    )
}

fn list(a: ListArgs) -> CliResult {
    let store = open_to_read(&a.db.db()?)?;
    let session::Listing { sessions, damaged } = session::list(&store).map_err(|e| match e {
        // Damage met reading, past the open: exit 3 and the way out, as `doctor` and `why` say
        // it (2 is a store that does not open at all).
        session::SessionError::Store(StoreError::Corrupt(_) | StoreError::Truncated { .. }) => {
            Failure::integrity(format!(
                "{e}; run worldd doctor, and restore the store from a backup"
            ))
        }
        e => Failure::fatal(e.to_string()),
    })?;
    seen_is_durable(&store)?;
    let t = now();
    if a.json {
        let items: Vec<serde_json::Value> = sessions
            .iter()
            .map(|s| session_json(s, t))
            .chain(
                damaged
                    .iter()
                    .map(|id| serde_json::json!({"credentialId": id, "damaged": true})),
            )
            .collect();
        outln!("{}", serde_json::Value::Array(items));
        return Ok(());
    }
    for s in &sessions {
        let grants: Vec<String> = s.grants.iter().map(Grant::to_string).collect();
        outln!(
            "{}  {}  {}  expires {}  {}{}",
            s.credential_id,
            s.episode,
            if s.is_valid(t) { "live" } else { "expired" },
            rfc3339(s.expires_at),
            grants.join(","),
            if s.operator { "  operator" } else { "" }
        );
    }
    // A damaged record authenticates nothing, but the operator should know it is there.
    for id in &damaged {
        outln!("{id}  damaged: the record does not decode and authenticates nothing; `worldd session revoke {id}` removes it");
    }
    if damaged.is_empty() {
        outln!("{} session credential(s)", sessions.len());
    } else {
        outln!(
            "{} session credential(s), {} damaged",
            sessions.len(),
            damaged.len()
        );
    }
    Ok(())
}

fn session_json(s: &Session, now: i64) -> serde_json::Value {
    serde_json::json!({
        "credentialId": s.credential_id,
        "episode": s.episode,
        "live": s.is_valid(now),
        "createdAt": rfc3339(s.created_at),
        "expiresAt": rfc3339(s.expires_at),
        "grants": s.grants.iter().map(Grant::to_string).collect::<Vec<_>>(),
        "operator": s.operator,
    })
}

fn revoke(a: RevokeArgs) -> CliResult {
    let db = a.db.db()?;
    let store = open_existing(&db)?;
    match (a.credential_id, a.episode, a.expired) {
        (Some(given), None, false) => revoke_one(&store, &db, &given),
        (None, None, true) => revoke_expired(&store, &db),
        (None, Some(ep), false) => {
            let ids =
                session::revoke_episode(&store, &ep).map_err(|e| Failure::fatal(e.to_string()))?;
            if ids.is_empty() {
                return Err(Failure::usage(format!(
                    "refusing: no session credential for episode {ep} in {}; nothing was revoked",
                    db.display()
                )));
            }
            for id in ids {
                outln!("revoked session credential {id}");
            }
            Ok(())
        }
        _ => Err(Failure::usage(
            "give one of: a credential id, --episode EP, --expired",
        )),
    }
}

/// Revoke every expired credential: none is not a failure (a periodic clean-up finds none
/// most days).
fn revoke_expired(store: &Store, db: &Path) -> CliResult {
    let expired =
        session::revoke_expired(store, now()).map_err(|e| Failure::fatal(e.to_string()))?;
    if expired.is_empty() {
        outln!(
            "no session credential in {} has expired; nothing was revoked",
            db.display()
        );
    }
    for s in expired {
        outln!(
            "revoked session credential {} (episode {}, expired {})",
            s.credential_id,
            s.episode,
            rfc3339(s.expires_at)
        );
    }
    Ok(())
}

/// The fewest hex digits of an id's start that `revoke` answers with the whole id.
const ID_PREFIX_DIGITS: usize = 8;

/// Revoke what `given` names: a credential id; the credential itself (64 hex as well: its id
/// is revoked, and it is never printed, since it is the secret); a session file; or the start
/// of an id, answered with the whole id to give.
fn revoke_one(store: &Store, db: &Path, given: &str) -> CliResult {
    let fatal = |e: session::SessionError| Failure::fatal(e.to_string());
    let given = given.trim();
    let hex = !given.is_empty() && given.bytes().all(|b| b.is_ascii_hexdigit());
    if session::is_64_hex(given) {
        let id = given.to_ascii_lowercase();
        if session::revoke(store, &id).map_err(fatal)? {
            outln!("revoked session credential {id}");
            return Ok(());
        }
        let derived = session::credential_id(given);
        if session::revoke(store, &derived).map_err(fatal)? {
            outln!("revoked session credential {derived} (given the credential itself, not its id: keep credentials out of command lines)");
            return Ok(());
        }
        // Only its start is shown, enough to tell it from the ids `session list` shows.
        return Err(Failure::usage(format!(
            "refusing: no session credential {}… in {}, by that id or as the credential itself (already revoked, or minted in another store); nothing was revoked (only the first {ID_PREFIX_DIGITS} digits are shown: the value may be a credential)",
            &id[..ID_PREFIX_DIGITS],
            db.display()
        )));
    }
    let path = Path::new(given);
    if path.is_file() {
        let text = super::input::file_text(
            path,
            super::input::SESSION_FILE_BYTES,
            &format!("session file {given}"),
        )?;
        let token = super::input::credential(&text);
        if !session::is_64_hex(token) {
            return Err(Failure::usage(format!(
                "session file {given} does not hold a session credential (64 hex digits); nothing was revoked"
            )));
        }
        let id = session::credential_id(token);
        if session::revoke(store, &id).map_err(fatal)? {
            outln!("revoked session credential {id} (the credential in {given})");
            return Ok(());
        }
        return Err(Failure::usage(format!(
            "refusing: the credential in {given} (id {id}) is not in {} (already revoked, or minted in another store); nothing was revoked",
            db.display()
        )));
    }
    if hex && given.len() >= ID_PREFIX_DIGITS && given.len() < 64 {
        let start = given.to_ascii_lowercase();
        let listing = session::list(store).map_err(fatal)?;
        let mut matching: Vec<(String, String)> = listing
            .sessions
            .iter()
            .map(|s| (s.credential_id.clone(), s.episode.clone()))
            .chain(
                listing
                    .damaged
                    .iter()
                    .map(|id| (id.clone(), "damaged".to_owned())),
            )
            .filter(|(id, _)| id.starts_with(&start))
            .collect();
        return Err(Failure::usage(match matching.len() {
            0 => format!(
                "refusing: no session credential id in {} starts with {start}; nothing was revoked (`worldd session list` shows the ids)",
                db.display()
            ),
            1 => {
                let (id, episode) = matching.remove(0);
                format!(
                    "refusing: {start} is the start of credential {id} (episode {episode}); give the whole id: worldd session revoke {id}"
                )
            }
            n => format!(
                "refusing: {start} is the start of {n} credential ids; give the whole id (from `worldd session list`); nothing was revoked"
            ),
        }));
    }
    Err(Failure::usage(format!(
        "refusing: {} is neither a credential id (64 hex digits, from `worldd session list`) nor a session file; nothing was revoked",
        dialect::quote::quote(given)
    )))
}

#[cfg(test)]
mod tests {
    use broker_core::session::SessionError;
    use broker_core::store::StoreError;

    /// The revoke of a credential that could not be written was said done whatever it came
    /// to: when the disk that refused the file refused the revoke too, the credential stayed
    /// live while the operator was told it was revoked.
    #[test]
    fn an_undelivered_credential_is_said_revoked_only_when_the_revoke_succeeded() {
        let id = "ab".repeat(32);
        let why = || "cannot write to stdout: No space left on device (os error 28)".to_owned();
        let done = super::undelivered(why(), &id, Ok(true));
        assert_eq!(
            (done.code, done.message.as_str()),
            (
                1,
                "cannot write to stdout: No space left on device (os error 28); the credential was revoked"
            )
        );
        let failed = super::undelivered(
            why(),
            &id,
            Err(SessionError::Store(StoreError::DiskFull(
                "No space left on device (os error 28)".into(),
            ))),
        );
        assert_eq!(
            (failed.code, failed.message),
            (
                2,
                format!("cannot write to stdout: No space left on device (os error 28); it could not be revoked (disk full: the store's filesystem has no space left (No space left on device (os error 28))): run worldd session revoke {id} once there is room")
            )
        );
    }

    #[test]
    fn a_grant_a_letter_or_two_from_a_shipped_one_is_named_as_its_likely_typo() {
        let effects = super::known_effects();
        let near = |given| super::near_miss(given, &effects);
        assert_eq!(near("Workspace.Raed"), Some("Workspace.Read"));
        assert_eq!(near("workspace.read"), Some("Workspace.Read"));
        assert_eq!(near("Workspace.Read"), None);
        assert_eq!(near("Hello.Greet"), None);
        assert_eq!(
            super::near_miss("worktre", &super::KNOWN_SCOPES),
            Some("worktree")
        );
        assert_eq!(super::near_miss("repo/main", &super::KNOWN_SCOPES), None);
    }

    #[test]
    fn grants_no_tool_could_ask_for_are_refused_with_their_text_escaped() {
        let refused = |text: &str| super::parse_grants(&[text.to_owned()]).unwrap_err().message;
        assert_eq!(
            refused("Workspace.Read=work\u{1b}]0;x\u{7}tree:1"),
            "invalid --grant \"Workspace.Read=work\\u{1b}]0;x\\u{7}tree:1\": the scope \"work\\u{1b}]0;x\\u{7}tree\" holds '\\u{1b}': a scope starts with a letter or digit, then letters, digits and . _ / - (at most 128 bytes), e.g. worktree (the episode's worktree; a scope is no filesystem path)"
        );
        assert!(refused("Work space=worktree:1").contains("the effect must be"));
        assert!(super::parse_grants(&["Hello.Greet=any:3".into()]).is_ok());
    }

    #[test]
    fn the_help_gives_the_bounds_the_checks_apply() {
        let cmd = super::super::command_line();
        let help = |verb: &str, flag: &str| {
            let mut path = verb.split(' ');
            let first = path.next().unwrap();
            let mut sub = cmd.find_subcommand(first).unwrap();
            for name in path {
                sub = sub.find_subcommand(name).unwrap();
            }
            let arg = sub.get_arguments().find(|a| a.get_id() == flag).unwrap();
            arg.get_help().unwrap().to_string()
        };
        let max_ttl = broker_core::session::MAX_TTL_SECS.to_string();
        let max_budget = broker_core::grant::MAX_BUDGET.to_string();
        assert!(help("session mint", "ttl").contains(&max_ttl));
        assert!(help("session new", "ttl").contains(&max_ttl));
        assert!(help("session mint", "grants").contains(&max_budget));
        assert!(help("session new", "budget").contains(&max_budget));
        assert!(help("quickstart", "budget").contains(&max_budget));
        assert_eq!(
            super::budget_arg(&max_budget),
            Ok(broker_core::grant::MAX_BUDGET)
        );
        assert!(super::budget_arg("9007199254740992").is_err());
        assert!(super::budget_arg("-1").is_err());
    }

    #[test]
    fn rfc3339_formats_utc() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(super::rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }
}
