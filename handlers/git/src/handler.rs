//! `Git.Commit`: request checks, the commit, and the output objects.

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use handler_api::serde_json::{json, Map, Value};
use handler_api::support::output::errno_text;
use handler_api::support::output::Stamp;
use handler_api::support::request::{check, Quote, Rules};
use handler_api::{EffectHandler, Host, LogLevel, Outcome, Request};

use crate::config::Policy;
use crate::git::{Git, Output, RunError};
use crate::tool_ref;

/// The effect this handler serves.
pub const COMMIT: &str = "Git.Commit";

/// The refusal of a commit with no change.
pub const NOTHING_TO_COMMIT: &str = "nothing to commit: the worktree has no changes";

/// The refusal of a commit whose `paths` hold no change.
pub const NOTHING_IN_PATHS: &str = "nothing to commit: the given paths have no changes";

/// Longest commit message, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 4096;

/// Most paths one commit may name.
pub const MAX_PATHS: usize = 256;

/// Longest path, in bytes.
pub const MAX_PATH_BYTES: usize = 4096;

/// Most file names an output lists; the rest are counted in `more_files`.
pub const MAX_LISTED_FILES: usize = 1000;

/// Time kept back from the daemon's deadline, so that a slow git is a clear
/// `failed` before the daemon gives up on the call.
const DEADLINE_MARGIN: Duration = Duration::from_millis(750);

/// The payload keys this handler reads; a key that differs from one of them
/// only by case is refused.
const KNOWN_KEYS: [&str; 3] = ["op", "message", "paths"];

/// The request checks of [`check`].
const RULES: Rules<'static> = Rules {
    ops: &["commit"],
    known_keys: &KNOWN_KEYS,
    quote: Quote::Plain,
};

/// The handler object: the effective policy, the git runner and the identity
/// it stamps.
pub struct GitHandler {
    policy: Policy,
    stamp: Stamp,
    git: Git,
    host: Host,
    /// Keeps a temporary HOME alive (when no `stateDir` was configured).
    _home: Option<tempfile::TempDir>,
}

impl GitHandler {
    /// A handler committing with `policy` through `git`.
    pub fn new(policy: Policy, git: Git, home: Option<tempfile::TempDir>, host: Host) -> Self {
        GitHandler {
            stamp: Stamp::new(tool_ref().0.clone(), policy.digest()),
            policy,
            git,
            host,
            _home: home,
        }
    }

    /// The effective policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The `tool` ref every output carries.
    pub fn tool(&self) -> &str {
        self.stamp.tool()
    }

    /// The `policy_digest` every output carries.
    pub fn policy_digest(&self) -> &str {
        self.stamp.policy_digest()
    }

    /// The empty directory git runs with as `HOME`.
    pub fn home(&self) -> &Path {
        self.git.home()
    }

    /// `{"ok":false,"refused":…}`: the effect ran and said no.
    fn refuse(&self, message: impl Into<String>) -> Outcome {
        self.stamp.refuse(message)
    }
}

/// One checked commit request.
struct Job<'a> {
    worktree: PathBuf,
    ceiling: Option<PathBuf>,
    message: &'a str,
    /// Normalised worktree-relative paths; `None` = every change.
    paths: Option<Vec<String>>,
    deadline: Instant,
}

/// Lexical normalisation of one path: `Ok(components)` or the refusal text.
fn normalise(path: &str) -> Result<Vec<&str>, String> {
    let escape = || format!("commit {path}: path \"{path}\" escapes sandbox \"<worktree>\"");
    if path.starts_with('/') {
        return Err(escape());
    }
    let mut out: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                if out.pop().is_none() {
                    return Err(escape());
                }
                return Err(format!(
                    "commit {path}: the path has a \"..\" segment; name the file directly"
                ));
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

/// Refuse a path whose existing directories include a symbolic link, using
/// the worktree as a cap-std capability (nothing outside it is looked at).
fn check_components(root: &Dir, path: &str, parts: &[&str]) -> Result<(), String> {
    let mut prefix = PathBuf::new();
    // Every component but the last: a link as the last component is
    // committed as a link (git never follows it).
    for part in parts.iter().take(parts.len().saturating_sub(1)) {
        prefix.push(part);
        match root.symlink_metadata(&prefix) {
            Ok(md) if md.file_type().is_symlink() => {
                return Err(format!(
                    "commit {path}: \"{}\" is a symbolic link; git commits a link itself, never what lies beyond it",
                    prefix.display()
                ))
            }
            Ok(md) if md.is_dir() => {}
            // A file or a missing directory: nothing below it exists on disk
            // (git may still know it as deleted).
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(format!("commit {path}: {}", errno_text(&e))),
        }
    }
    Ok(())
}

impl GitHandler {
    /// The first meaningful line of git's stderr, host paths replaced.
    fn git_says(&self, job: &Job<'_>, stderr: &[u8]) -> String {
        let text = String::from_utf8_lossy(stderr);
        let line = text
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with("fatal:") || l.starts_with("error:"))
            .or_else(|| text.lines().map(str::trim).find(|l| !l.is_empty()))
            .unwrap_or("no message");
        let mut line = line.replace(&*job.worktree.to_string_lossy(), "<worktree>");
        line = line.replace(&*self.git.home().to_string_lossy(), "<home>");
        if line.len() > 300 {
            let mut cut = 300;
            while !line.is_char_boundary(cut) {
                cut -= 1;
            }
            line.truncate(cut);
            line.push('…');
        }
        line
    }

    fn run(
        &self,
        job: &Job<'_>,
        args: &[&OsStr],
        stdin: Option<&[u8]>,
    ) -> Result<Output, RunError> {
        self.git.run(
            &job.worktree,
            job.ceiling.as_deref(),
            args,
            stdin,
            job.deadline,
        )
    }

    /// A git run that could not complete, before anything was committed.
    fn broken(&self, step: &str, error: RunError) -> Outcome {
        let message = match error {
            RunError::Spawn(e) => format!("commit: git could not be started ({step}): {}", errno_text(&e)),
            RunError::Timeout => format!(
                "commit: git {step} did not finish within the time limit ({} ms); nothing was committed",
                self.policy.timeout_ms
            ),
            RunError::Io(e) => format!("commit: git {step}: {}", errno_text(&e)),
        };
        self.host.log(LogLevel::Warn, &message);
        Outcome::failed(message)
    }

    fn commit(&self, job: Job<'_>) -> Outcome {
        let os = |s: &'static str| OsStr::new(s);
        // 1. The worktree must be the top level of a git working tree.
        let top = match self.run(&job, &[os("rev-parse"), os("--show-toplevel")], None) {
            Ok(o) => o,
            Err(e) => return self.broken("rev-parse", e),
        };
        if !top.status.success() {
            let said = self.git_says(&job, &top.stderr);
            if said.contains("not a git repository") {
                return self.refuse(
                    "commit: the worktree is not a git repository (the operator must make it one, e.g. with git init or git worktree add)",
                );
            }
            return self.refuse(format!(
                "commit: the worktree is not a git working tree: {said}"
            ));
        }
        let toplevel = String::from_utf8_lossy(&top.stdout)
            .trim_end_matches('\n')
            .to_string();
        if Path::new(&toplevel) != job.worktree {
            return self.refuse(
                "commit: the worktree is inside a git repository but is not its top level; only a repository or linked worktree of its own is committed",
            );
        }

        // 2. Stage.
        let mut add: Vec<&OsStr> = vec![os("add"), os("-A")];
        if let Some(paths) = &job.paths {
            add.push(os("--"));
            add.extend(paths.iter().map(OsStr::new));
        }
        match self.run(&job, &add, None) {
            Ok(o) if o.status.success() => {}
            Ok(o) => {
                return self.refuse(format!(
                    "commit: git add refused: {}",
                    self.git_says(&job, &o.stderr)
                ))
            }
            Err(e) => return self.broken("add", e),
        }

        // 3. Anything to commit? (`--quiet`: exit 1 = differences.)
        let mut diff: Vec<&OsStr> = vec![
            os("diff"),
            os("--cached"),
            os("--quiet"),
            os("--no-ext-diff"),
            os("--no-textconv"),
        ];
        if let Some(paths) = &job.paths {
            diff.push(os("--"));
            diff.extend(paths.iter().map(OsStr::new));
        }
        match self.run(&job, &diff, None) {
            Ok(o) if o.status.code() == Some(0) => {
                return self.refuse(if job.paths.is_some() {
                    NOTHING_IN_PATHS
                } else {
                    NOTHING_TO_COMMIT
                })
            }
            Ok(o) if o.status.code() == Some(1) => {}
            Ok(o) => {
                return self.refuse(format!(
                    "commit: git diff refused: {}",
                    self.git_says(&job, &o.stderr)
                ))
            }
            Err(e) => return self.broken("diff", e),
        }

        // 4. Commit: a new commit on the current branch, nothing else. With
        // paths, `--only` leaves anything else that was staged out of it.
        let mut commit: Vec<&OsStr> = vec![
            os("commit"),
            os("--quiet"),
            os("--no-verify"),
            os("--no-edit"),
            os("--file=-"),
        ];
        if let Some(paths) = &job.paths {
            commit.push(os("--only"));
            commit.push(os("--"));
            commit.extend(paths.iter().map(OsStr::new));
        }
        match self.run(&job, &commit, Some(job.message.as_bytes())) {
            Ok(o) if o.status.success() => {}
            Ok(o) => {
                return self.refuse(format!(
                    "commit: git commit refused: {}",
                    self.git_says(&job, &o.stderr)
                ))
            }
            Err(RunError::Timeout) => {
                let message = format!(
                    "commit: git commit did not finish within the time limit ({} ms) and was stopped; the commit may or may not have been made",
                    self.policy.timeout_ms
                );
                self.host.log(LogLevel::Error, &message);
                return Outcome::indeterminate(message);
            }
            Err(e) => return self.broken("commit", e),
        }

        // 5. What was made. From here on the commit exists: a failure to
        // describe it is `failed` with the reason, never a silent success.
        let head = match self.run(
            &job,
            &[os("rev-parse"), os("--verify"), os("HEAD^{commit}")],
            None,
        ) {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
            Ok(o) => {
                return Outcome::failed(format!(
                    "commit: the commit was made but its id could not be read: {}",
                    self.git_says(&job, &o.stderr)
                ))
            }
            Err(e) => return self.after_commit("rev-parse", e),
        };
        if !(head.len() == 40 || head.len() == 64) || !head.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Outcome::failed(
                "commit: the commit was made but git reported an unreadable id",
            );
        }
        let files = match self.run(
            &job,
            &[
                os("diff-tree"),
                os("--no-commit-id"),
                os("--name-only"),
                os("--no-renames"),
                os("--root"),
                os("-r"),
                os("-z"),
                OsStr::new(&head),
            ],
            None,
        ) {
            Ok(o) if o.status.success() => o.stdout,
            Ok(o) => {
                return Outcome::failed(format!(
                    "commit: commit {head} was made but its files could not be listed: {}",
                    self.git_says(&job, &o.stderr)
                ))
            }
            Err(e) => return self.after_commit("diff-tree", e),
        };
        let files: Vec<String> = files
            .split(|b| *b == 0)
            .filter(|f| !f.is_empty())
            .map(|f| String::from_utf8_lossy(f).into_owned())
            .collect();
        let total = files.len();
        let mut fields = Map::new();
        fields.insert("ok".into(), json!(true));
        fields.insert("commit".into(), json!(head));
        fields.insert(
            "files".into(),
            json!(files.into_iter().take(MAX_LISTED_FILES).collect::<Vec<_>>()),
        );
        if total > MAX_LISTED_FILES {
            fields.insert("more_files".into(), json!(total - MAX_LISTED_FILES));
        }
        self.host.log(
            LogLevel::Debug,
            &format!("git: committed {head} ({total} file(s))"),
        );
        self.stamp.ok(fields)
    }

    fn after_commit(&self, step: &str, error: RunError) -> Outcome {
        let cause = match error {
            RunError::Spawn(e) | RunError::Io(e) => errno_text(&e),
            RunError::Timeout => "the time limit was reached".to_string(),
        };
        Outcome::failed(format!(
            "commit: the commit was made but git {step} failed afterwards: {cause}"
        ))
    }
}

impl EffectHandler for GitHandler {
    fn execute(&self, request: Request) -> Outcome {
        let started = Instant::now();
        let effect = request.effect.as_str();
        if effect != COMMIT {
            return Outcome::failed(format!(
                "broker: the git plugin does not handle effect \"{effect}\""
            ));
        }
        let checked = match check(&request, &RULES) {
            Ok(checked) => checked,
            Err(outcome) => return outcome,
        };
        if let Err(outcome) = checked.only_keys(&KNOWN_KEYS) {
            return outcome;
        }
        let worktree = match checked.worktree() {
            Ok(w) => w,
            Err(outcome) => return outcome,
        };
        let message = match checked.string("message") {
            Ok(m) => m,
            Err(outcome) => return outcome,
        };
        let payload = checked.payload;
        let paths: Option<Vec<&str>> = match payload.get("paths") {
            None => None,
            Some(Value::Array(items)) => {
                let strings: Option<Vec<&str>> = items.iter().map(Value::as_str).collect();
                match strings {
                    Some(s) => Some(s),
                    None => {
                        return Outcome::failed(format!(
                            "broker: {effect} refused: payload key \"paths\" of op \"commit\" must be an array of strings"
                        ))
                    }
                }
            }
            Some(_) => {
                return Outcome::failed(format!(
                    "broker: {effect} refused: payload key \"paths\" of op \"commit\" must be an array of strings"
                ))
            }
        };

        // The handler's own rules (the plan checks them too; never trusted).
        if message.trim().is_empty() {
            return self.refuse("commit: the message is empty; a commit needs a message");
        }
        if message.len() > MAX_MESSAGE_BYTES {
            return self.refuse(format!(
                "commit: the message is {} bytes; the limit is {MAX_MESSAGE_BYTES}",
                message.len()
            ));
        }
        if message.contains('\0') {
            return self.refuse("commit: the message contains a NUL byte");
        }
        let mut normalised: Option<Vec<String>> = None;
        let root = match Dir::open_ambient_dir(worktree, ambient_authority()) {
            Ok(d) => d,
            Err(e) => return checked.worktree_unopenable(&e),
        };
        if let Some(paths) = paths {
            if paths.is_empty() {
                return self
                    .refuse("commit: \"paths\" names no path; omit it to commit every change");
            }
            if paths.len() > MAX_PATHS {
                return self.refuse(format!(
                    "commit: \"paths\" has {} items; the limit is {MAX_PATHS}",
                    paths.len()
                ));
            }
            let mut list = Vec::with_capacity(paths.len());
            for path in paths {
                if path.is_empty() {
                    return self.refuse("commit: a path is empty");
                }
                if path.contains('\0') {
                    return self.refuse(format!(
                        "commit {}: the path contains a NUL byte",
                        path.replace('\0', "\\0")
                    ));
                }
                if path.len() > MAX_PATH_BYTES {
                    return self.refuse(format!(
                        "commit: a path is {} bytes; the limit is {MAX_PATH_BYTES}",
                        path.len()
                    ));
                }
                let parts = match normalise(path) {
                    Ok(p) => p,
                    Err(refusal) => return self.refuse(refusal),
                };
                if parts.first() == Some(&".git") {
                    return self.refuse(format!(
                        "commit {path}: .git/ is git's own data, not worktree content"
                    ));
                }
                if let Err(refusal) = check_components(&root, path, &parts) {
                    return self.refuse(refusal);
                }
                let joined = if parts.is_empty() {
                    ".".to_string()
                } else {
                    parts.join("/")
                };
                if !list.contains(&joined) {
                    list.push(joined);
                }
            }
            normalised = Some(list);
        }
        drop(root);

        // git reports its top level with symbolic links resolved: compare
        // and stop repository discovery on the resolved path.
        let canonical = match std::fs::canonicalize(worktree) {
            Ok(p) => p,
            Err(e) => {
                return Outcome::failed(format!(
                    "broker: {effect} failed: the episode's worktree cannot be resolved: {}",
                    errno_text(&e)
                ))
            }
        };
        let ceiling = canonical.parent().map(Path::to_path_buf);
        let mut budget = Duration::from_millis(self.policy.timeout_ms);
        if request.deadline_ms > 0 {
            let daemon = Duration::from_millis(request.deadline_ms).saturating_sub(DEADLINE_MARGIN);
            budget = budget.min(daemon);
        }
        self.commit(Job {
            worktree: canonical,
            ceiling,
            message,
            paths: normalised,
            deadline: started + budget,
        })
    }
}
