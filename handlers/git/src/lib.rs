//! worldd plugin `git`: `Git.Commit`, one new commit of the episode's
//! worktree, authored by the operator's configured identity.
//!
//! Serves the tool `git-commit`, whose transition document
//! (`transitions/git/git-commit.json`) it ships in its manifest.
//!
//! # Effect and payload
//!
//! | effect | class | op | payload | success output |
//! |---|---|---|---|---|
//! | `Git.Commit` | write | `commit` | `{op, message, paths?}` | `{"ok":true,"commit":"<hex id>","files":[…]}` |
//!
//! Without `paths` every change of the worktree is staged (`git add -A`) and
//! committed; with `paths` only those (files or directories, new, changed or
//! deleted) are staged and committed (`git commit --only`), and anything
//! else stays as it was. `files` lists the paths the new commit changed
//! (at most 1000; `more_files` counts the rest). Every output also carries
//! `tool` (`sha256:` of the plugin library that ran, found with `dladdr`) and
//! `policy_digest` (hex SHA-256 of the canonical JSON of
//! `{"author","gitlinks":false,"hooks":false,"policy":"worldd/git-policy/v2","push":false,
//! "rewrite":false,"sandbox":"worktree","timeoutMs"}`).
//!
//! # What it never does
//!
//! It never pushes or fetches, never rewrites history (no amend, reset,
//! rebase, checkout), never runs hooks, and only ever runs git with the
//! episode's worktree as its working directory, which must be the top level
//! of a repository or linked worktree of its own.
//!
//! # How git runs
//!
//! The system `git` (found on the daemon's `PATH` at start-up) runs with a
//! cleared environment: `PATH`, `HOME` = an empty directory
//! (`<stateDir>/home`, or a temporary one), `GIT_CONFIG_NOSYSTEM=1`,
//! `GIT_CONFIG_GLOBAL=/dev/null`, `GIT_TERMINAL_PROMPT=0`,
//! `GIT_AUTHOR_*`/`GIT_COMMITTER_*` from `author`, `GIT_CEILING_DIRECTORIES`
//! = the worktree's parent, then `GIT_DIR`/`GIT_WORK_TREE` pinned to the
//! repository the first run found and `GIT_INDEX_FILE` = a private copy of
//! the index, `LC_ALL=C`; with `--literal-pathspecs` (`git add`: each path
//! `:(literal)PATH`, and `:(top,exclude,glob)**/.worldd-tmp-*`, the workspace plugin's
//! temporary files) and
//! `-c core.hooksPath=/dev/null -c core.fsmonitor=false
//! -c commit.gpgSign=false -c gc.auto=0 -c protocol.allow=never
//! -c safe.bareRepository=explicit …`; killed
//! when the commit's time budget (`timeoutMs`, and the daemon's deadline
//! minus a margin) runs out, as a whole process group that also dies with
//! the daemon (`handler_kit::child`). Before git runs, the worktree
//! is searched for other repositories (entries named like `.git`, see
//! `handler_kit::protect`) on the way to and below what is
//! committed; any is refused, as is a staged gitlink.
//!
//! # Refusals and failures
//!
//! A refusal is an `ok` outcome `{"ok":false,"refused":"…"}`:
//!
//! - `nothing to commit: the worktree has no changes` (no `paths`), or
//!   `nothing to commit: the given paths have no changes`; when git left files
//!   out (ignored ones, a FIFO), `… no changes git tracks (…)`
//!   says which and why
//! - `commit /etc/passwd: path "/etc/passwd" escapes sandbox "<worktree>"`
//!   (absolute paths, `..` above the root)
//! - `commit a/../b: the path has a ".." segment; name the file directly`
//! - `commit link/x: "link" is a symbolic link; git commits a link itself,
//!   never what lies beyond it`
//! - `commit .git/config: .git/ is git's own data, not worktree content`
//! - `commit: the worktree is not a git repository (the operator must make
//!   it one, e.g. with git init or git worktree add)`
//! - `commit: git add refused: fatal: pathspec 'nope' did not match any files`
//!   (what git said, its first error line first and its hints left out, at
//!   most 1000 bytes, host paths replaced by `<worktree>`)
//! - an empty or whitespace-only message, one over 4096 bytes or with a NUL,
//!   an empty `paths` list, more than 256 paths.
//!
//! A `failed` outcome means the request itself was wrong and nothing was
//! touched, in the workspace plugin's words: `broker: Git.Commit refused:
//! scope "x" is not "worktree"`, `broker: Git.Commit refuses op "push": not
//! in this effect's op allowlist`, `broker: Git.Commit refused: key
//! "MESSAGE" aliases "message"`; or git could not run or timed out before
//! committing. A timeout *during* `git commit` (or a `git commit` that could
//! not be waited for) is `indeterminate`; a git step failing after the commit
//! is `ok`, with a `note` of what is not known.
//!
//! # Config
//!
//! ```json
//! {"author": "World Test <world@example.invalid>", "stateDir": "/srv/world/db/plugin-state/git", "timeoutMs": 8000}
//! ```
//!
//! Without an `author` key the plugin takes the identity `git config user.name` /
//! `user.email` gives in the directory the daemon started in, and says so in the daemon's log.
//! With neither, the constructor declines (`declined: no commit author configured (start
//! worldd serve with --plugin-config git.author="Name <email>")`) and the daemon starts
//! without the plugin. `stateDir` is injected by the daemon. Unknown keys are refused.

// No unwrap or expect outside tests: a panic here is a bug, never an answer.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod config;
mod git;
mod handler;
mod identity;
mod locks;
mod nested;

use std::ffi::OsStr;
use std::time::{Duration, Instant};

use handler_kit::manifest::embedded_transitions;
use handler_kit::serde_json::Value;
use handler_kit::{export_plugin, Host, LogLevel, Manifest, Plugin};

pub use config::{
    config_schema, Author, Policy, DECLINED, DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS, NO_AUTHOR,
};
pub use handler::{
    GitHandler, COMMIT, MAX_LISTED_FILES, MAX_MESSAGE_BYTES, MAX_PATHS, NOTHING_IN_PATHS,
    NOTHING_TO_COMMIT, RESULT_CAP, TOO_MANY_CHANGED, TOO_MANY_STAGED, TOO_MANY_STAGED_FILTERS,
    WORLD_ROOM,
};
pub use handler_kit::identity::ToolSource;

/// `sha256:` + 64 hex identifying this handler build (the plugin library
/// that ran, found with `dladdr`), and its source. Computed once per process.
pub fn tool_ref() -> &'static (String, ToolSource) {
    handler_kit::tool_ref!()
}

/// The transition document this plugin ships.
pub const GIT_COMMIT_DOCUMENT: &str = include_str!("../../../transitions/git/git-commit.json");

/// The plugin (see the crate docs).
pub struct GitPlugin;

impl Plugin for GitPlugin {
    type Handler = GitHandler;

    fn manifest() -> Result<Manifest, String> {
        let transitions = embedded_transitions(&[("git-commit.json", GIT_COMMIT_DOCUMENT)])?;
        Ok(Manifest {
            name: "git".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            abi: handler_kit::ABI_VERSION,
            description:
                "Commits the episode's worktree with the operator's author; never pushes or rewrites history (git-commit)."
                    .into(),
            effects: handler_kit::declared_effects!(),
            transitions,
            finish: Vec::new(),
            config_schema: config_schema(),
        })
    }

    fn new(config: Value, host: Host) -> Result<GitHandler, String> {
        let program = git::find_program(std::env::var_os("PATH").as_deref());
        GitPlugin::build(config, host, || {
            identity::configured(program.as_deref()?, std::path::Path::new("."))
        })
    }
}

impl GitPlugin {
    /// [`Plugin::new`] with the default author taken from `default_author` instead of git's
    /// configuration where the daemon runs: called only when the config has no `author` key,
    /// and the author it gives is logged.
    pub fn build(
        config: Value,
        host: Host,
        default_author: impl FnOnce() -> Option<String>,
    ) -> Result<GitHandler, String> {
        let config = with_default_author(config, default_author, &host);
        let policy = Policy::from_config(&config)?;
        let path_var = std::env::var_os("PATH");
        let Some(program) = git::find_program(path_var.as_deref()) else {
            return Err("declined: the git program was not found on the daemon's PATH".into());
        };
        let (home, scratch, temp) = match &policy.state_dir {
            Some(dir) => {
                let home = dir.join("home");
                let scratch = dir.join("scratch");
                for d in [&home, &scratch] {
                    create_private_dir(d)
                        .map_err(|e| format!("git: cannot create {}: {e}", d.display()))?;
                }
                (home, scratch, None)
            }
            None => {
                let temp = tempfile::Builder::new()
                    .prefix("worldd-git-home-")
                    .tempdir()
                    .map_err(|e| format!("git: cannot create a temporary HOME: {e}"))?;
                (temp.path().to_path_buf(), std::env::temp_dir(), Some(temp))
            }
        };
        let runner = git::Git::new(program, path_var, home, scratch, policy.author.clone());
        // One run proves the program works before the daemon advertises it.
        let tmp = std::env::temp_dir();
        let version = runner.run(
            &git::Place {
                cwd: &tmp,
                ceiling: None,
                git_dir: None,
                index_file: None,
                dir: None,
                pathspec_magic: false,
            },
            &[OsStr::new("--version")],
            None,
            Instant::now() + Duration::from_secs(10),
        );
        match version {
            Ok(o) if o.status.success() => {}
            Ok(o) => {
                return Err(format!(
                    "declined: git --version failed: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                ))
            }
            Err(e) => return Err(format!("declined: the git program cannot run: {e}")),
        }
        Ok(GitHandler::new(policy, runner, temp, host))
    }
}

/// `config` with an `author` from `default_author` when it has no `author` key; says so in the
/// daemon's log.
fn with_default_author(
    config: Value,
    default_author: impl FnOnce() -> Option<String>,
    host: &Host,
) -> Value {
    let mut object = match config {
        Value::Null => handler_kit::JsonObject::new(),
        Value::Object(o) if !o.contains_key("author") => o,
        other => return other,
    };
    let Some(author) = default_author() else {
        return Value::Object(object);
    };
    host.log(
        LogLevel::Info,
        &format!(
            "git plugin: commits are authored by {author}, the identity `git config user.name` / `user.email` gives here (--plugin-config git.author=\"Name <email>\" or [plugins.git] author chooses another)"
        ),
    );
    object.insert("author".into(), Value::String(author));
    Value::Object(object)
}

fn create_private_dir(path: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
}

export_plugin!(GitPlugin);
