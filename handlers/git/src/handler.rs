//! `Git.Commit`: request checks, the commit, and the output objects.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cap_std::fs::Dir;
use handler_kit::file_identity::FileIdentity;
use handler_kit::output::errno_text;
use handler_kit::output::Stamp;
use handler_kit::protect::git_component;
use handler_kit::request::{check, Checked, Quote, Rules};
use handler_kit::serde_json::{json, Map, Value};
use handler_kit::worktree;
use handler_kit::{EffectHandler, Host, LogLevel, Outcome, Request};

use crate::config::Policy;
use crate::git::{Git, Output, Place, RunError};
use crate::locks::{self, Locks, TempObjects};
use crate::nested::{self, ScanError};
use crate::tool_ref;

/// The ops `Git.Commit` accepts.
const OPS: &[&str] = &["commit"];

handler_kit::effect! {
    /// Stage the worktree's changes (or the given paths) and record one new commit.
    pub const COMMIT = "Git.Commit" { class: Write, ops: OPS }
}

/// The refusal of a commit with no change.
pub const NOTHING_TO_COMMIT: &str = "nothing to commit: the worktree has no changes";

/// The refusal of a commit whose `paths` hold no change.
pub const NOTHING_IN_PATHS: &str = "nothing to commit: the given paths have no changes";

/// The refusal of a commit whose staged changes git lists in more than the handler reads
/// (8 MiB of `git diff --cached --raw`, tens of thousands of files): it cannot show that no
/// gitlink is among them.
pub const TOO_MANY_STAGED: &str = "commit: the staged changes are too many to check for gitlinks (git diff --cached --raw gave more than 8 MiB); commit them in parts with paths";

/// The refusal of a commit whose changes `git status` lists in more than the handler reads:
/// it cannot show that none of them is a file with a second hard link.
pub const TOO_MANY_CHANGED: &str = "commit: the changes are too many to check for hard links (git status gave more than 8 MiB); commit them in parts with paths";

/// What a refusal adds when git left ignored files out.
const IGNORED_NOT_ADDED: &str =
    "; git-commit never adds an ignored file (take away the rule that ignores it to commit it)";

/// Most bytes of git's words a refusal passes on.
const MAX_GIT_SAYS: usize = 1000;

/// The refusal of a commit whose staged files' `filter` attributes git lists in more than the
/// handler reads.
pub const TOO_MANY_STAGED_FILTERS: &str = "commit: the staged files are too many to check for filters (git check-attr gave more than 8 MiB); commit them in parts with paths";

/// Longest commit message, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 4096;

/// The exclude pathspec that keeps the workspace plugin's temporary files (`.worldd-tmp-<pid>-…`,
/// at any depth below the worktree's top) out of every commit.
const WORKSPACE_TEMPORARIES: &str = ":(top,exclude,glob)**/.worldd-tmp-*";

/// Most paths one commit may name.
pub const MAX_PATHS: usize = 256;

/// Longest path, in bytes.
pub const MAX_PATH_BYTES: usize = 4096;

/// Most file names an output lists; the rest are counted in `more_files`.
pub const MAX_LISTED_FILES: usize = 1000;

/// The coordinator's cap on a whole tool answer: its canonical JSON, `world` block included.
pub const RESULT_CAP: usize = 1 << 20;

/// What an output leaves of [`RESULT_CAP`] for the `world` block the daemon adds (one
/// effect's is under 200 bytes; the same room the ailang plugin keeps). An answer past the
/// cap is recorded `failed` by the daemon, and a commit that was made must never be.
pub const WORLD_ROOM: usize = 4 << 10;

/// Time kept back from the daemon's deadline, so that a slow git is a clear
/// `failed` before the daemon gives up on the call.
const DEADLINE_MARGIN: Duration = Duration::from_millis(750);

/// The payload keys this handler reads; a key that differs from one of them
/// only by case is refused.
const KNOWN_KEYS: [&str; 3] = ["op", "message", "paths"];

/// The request checks of [`check`].
const RULES: Rules<'static> = Rules {
    ops: OPS,
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
    /// The worktree, opened once without following a symlink at its place: every look and
    /// every git run starts from it, not from the path.
    root: Dir,
    /// Where `root` is, as the kernel names the opened directory (symbolic links resolved).
    worktree: PathBuf,
    ceiling: Option<PathBuf>,
    message: &'a str,
    /// Normalised worktree-relative paths; `None` = every change.
    paths: Option<Vec<String>>,
    deadline: Instant,
    /// The time limit in force, as messages name it.
    limit: TimeLimit,
    /// The repository's git directory and common directory once found: host paths that
    /// git's messages are cleared of, as the worktree's is.
    git_dirs: std::cell::OnceCell<(PathBuf, PathBuf)>,
    /// The temporary object files of the repository before git first ran on it.
    temp_objects: std::cell::OnceCell<TempObjects>,
    /// A git run of this job was stopped before it ended.
    stopped_a_run: std::cell::Cell<bool>,
}

/// Which bound set a job's deadline: the plugin's `timeoutMs`, or the daemon's deadline for
/// the call less [`DEADLINE_MARGIN`], whichever is shorter.
#[derive(Debug, Clone, Copy)]
enum TimeLimit {
    Plugin(Duration),
    Daemon(Duration),
}

impl std::fmt::Display for TimeLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TimeLimit::Plugin(d) => write!(f, "{} ms", d.as_millis()),
            TimeLimit::Daemon(d) => write!(
                f,
                "{} ms: the daemon's deadline for the call less {} ms",
                d.as_millis(),
                DEADLINE_MARGIN.as_millis()
            ),
        }
    }
}

/// The repository a job commits to, once git has found it.
struct Repo {
    /// The absolute git directory (`<worktree>/.git`, or a linked worktree's
    /// `<repository>/.git/worktrees/<name>`): every later run is pinned to it.
    git_dir: PathBuf,
    /// Where the refs live (the git directory, or the main repository's).
    common_dir: PathBuf,
    /// The private index every later run stages into (removed with it).
    index: PathBuf,
    /// The repository's own index as it was when the private one was made from it (`None`:
    /// there was none): one that differs when the private index is installed was changed
    /// during the commit, and is not replaced.
    index_seen: Option<FileIdentity>,
    _scratch: tempfile::TempDir,
}

/// A step of a commit: its value, or the outcome that ends the commit there.
type Step<T> = Result<T, Outcome>;

/// A git argument.
fn os(s: &'static str) -> &'static OsStr {
    OsStr::new(s)
}

/// The refusal for another repository found at `found` (`leak1/.git`).
fn nested_refusal(path: Option<&str>, found: &str) -> String {
    let subject = path.map_or(String::new(), |p| format!(" {p}"));
    let hint = if path.is_none() {
        " (name paths that leave it out)"
    } else {
        ""
    };
    match found.rsplit_once('/') {
        Some((holder, _)) => format!(
            "commit{subject}: \"{found}\" makes \"{holder}\" a repository of its own (a .git directory or gitfile); git-commit never records another repository{hint}"
        ),
        // A look-alike beside the worktree's own `.git`.
        None => format!(
            "commit{subject}: \"{found}\" is named like .git (names are compared after NFKC and case folding); git-commit never commits git's own data or another repository{hint}"
        ),
    }
}

/// The gitlinks among `git diff --cached --raw -z` records (`:<mode> <mode> <id> <id> <S>\0<path>\0`).
fn staged_gitlinks(raw: &[u8]) -> Result<Vec<String>, ()> {
    let mut fields = raw.split(|b| *b == 0).filter(|f| !f.is_empty());
    let mut links = Vec::new();
    while let Some(header) = fields.next() {
        let header = std::str::from_utf8(header).map_err(|_| ())?;
        let path = fields.next().ok_or(())?;
        let mut modes = header.strip_prefix(':').ok_or(())?.split(' ').take(2);
        if modes.any(|m| m == "160000") {
            links.push(String::from_utf8_lossy(path).into_owned());
        }
    }
    Ok(links)
}

/// The paths of `git diff --cached --raw -z` records that stage a regular file's content
/// (mode 100644 or 100755 after the change).
fn staged_files(raw: &[u8]) -> Vec<&[u8]> {
    let mut fields = raw.split(|b| *b == 0).filter(|f| !f.is_empty());
    let mut files = Vec::new();
    while let (Some(header), Some(path)) = (fields.next(), fields.next()) {
        let mode = header.split(|b| *b == b' ').nth(1);
        if matches!(mode, Some(b"100644") | Some(b"100755")) {
            files.push(path);
        }
    }
    files
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
    /// What git said on stderr, its lines joined (its first `fatal:` or `error:` line first, `hint:`
    /// lines left out: they suggest what git-commit cannot do), host paths replaced, at most
    /// [`MAX_GIT_SAYS`] bytes. Whole, not its first line: "The following paths are ignored by
    /// one of your .gitignore files:" names the paths on the lines after it.
    fn git_says(&self, job: &Job<'_>, stderr: &[u8]) -> String {
        let text = String::from_utf8_lossy(stderr);
        let said: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("hint:"))
            .collect();
        let first = said
            .iter()
            .position(|l| l.starts_with("fatal:") || l.starts_with("error:"))
            .unwrap_or(0);
        let mut line = String::new();
        for l in said.get(first).into_iter().chain(
            said.iter()
                .enumerate()
                .filter(|(i, _)| *i != first)
                .map(|(_, l)| l),
        ) {
            // git wraps its prose: its lines read as one text.
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(l);
        }
        if line.is_empty() {
            line.push_str("no message");
        }
        // Longest first: a linked worktree's git directory lies inside the common one.
        let mut places: Vec<(&Path, &str)> = vec![(&job.worktree, "<worktree>")];
        if let Some((git_dir, common_dir)) = job.git_dirs.get() {
            places.push((git_dir, "<git-dir>"));
            places.push((common_dir, "<git-common-dir>"));
        }
        places.sort_by_key(|(p, _)| std::cmp::Reverse(p.as_os_str().len()));
        for (place, name) in places {
            line = line.replace(&*place.to_string_lossy(), name);
        }
        line = line.replace(&*self.git.home().to_string_lossy(), "<home>");
        if line.len() > MAX_GIT_SAYS {
            line = format!(
                "{}…",
                handler_kit::dialect::quote::head(&line, MAX_GIT_SAYS)
            );
        }
        line
    }

    /// A run that discovers the repository from the worktree (no higher than
    /// its parent).
    fn run(
        &self,
        job: &Job<'_>,
        args: &[&OsStr],
        stdin: Option<&[u8]>,
    ) -> Result<Output, RunError> {
        let place = Place {
            cwd: &job.worktree,
            ceiling: job.ceiling.as_deref(),
            git_dir: None,
            index_file: None,
            dir: Some(job.root.as_fd()),
            pathspec_magic: false,
        };
        self.noting_kills(job, self.git.run(&place, args, stdin, job.deadline))
    }

    /// `result`, noting in `job` a run that was stopped before it ended (at the deadline, or
    /// when it could no longer be waited for): git may have left temporary files.
    fn noting_kills(
        &self,
        job: &Job<'_>,
        result: Result<Output, RunError>,
    ) -> Result<Output, RunError> {
        if matches!(result, Err(RunError::Timeout | RunError::Io(_))) {
            job.stopped_a_run.set(true);
        }
        result
    }

    /// A run pinned to the repository found and staging into the private index.
    fn run_in(
        &self,
        job: &Job<'_>,
        repo: &Repo,
        args: &[&OsStr],
        stdin: Option<&[u8]>,
    ) -> Result<Output, RunError> {
        self.run_in_at(job, repo, args, stdin, false)
    }

    /// [`Self::run_in`], reading pathspec magic when `pathspec_magic` (see [`Place`]).
    fn run_in_at(
        &self,
        job: &Job<'_>,
        repo: &Repo,
        args: &[&OsStr],
        stdin: Option<&[u8]>,
        pathspec_magic: bool,
    ) -> Result<Output, RunError> {
        let place = Place {
            cwd: &job.worktree,
            ceiling: job.ceiling.as_deref(),
            git_dir: Some(&repo.git_dir),
            index_file: Some(&repo.index),
            dir: Some(job.root.as_fd()),
            pathspec_magic,
        };
        self.noting_kills(job, self.git.run(&place, args, stdin, job.deadline))
    }

    /// A copy of the repository's index that this commit stages into: whatever
    /// happens to the commit (a refusal, a timeout), the repository's own index
    /// and its lock are never touched until the commit is made.
    /// Also the copied index's identity, taken from the file opened (`None`: no index yet).
    fn private_index(
        &self,
        git_dir: &Path,
    ) -> io::Result<(tempfile::TempDir, PathBuf, Option<FileIdentity>)> {
        let (scratch, index) = self.scratch_index()?;
        let seen = match std::fs::File::open(git_dir.join("index")) {
            Ok(mut real) => {
                let seen = FileIdentity::of(&real.metadata()?);
                let mut copy = std::fs::File::create_new(&index)?;
                io::copy(&mut real, &mut copy)?;
                Some(seen)
            }
            // No index yet (a fresh repository): git starts from an empty one.
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        Ok((scratch, index, seen))
    }

    /// A place for a private index, with no index in it yet.
    fn scratch_index(&self) -> io::Result<(tempfile::TempDir, PathBuf)> {
        let scratch = tempfile::Builder::new()
            .prefix("worldd-git-index-")
            .tempdir_in(self.git.scratch())?;
        let index = scratch.path().join("index");
        Ok((scratch, index))
    }

    /// Remove the lock files a killed run left in the repository (see [`crate::locks`]), and
    /// tell the operator; returns whether the index's lock was one of them.
    fn clear_stale_locks(&self, git_dir: &Path, common_dir: &Path) -> bool {
        let max_age = Duration::from_millis(self.policy.timeout_ms);
        let cleared = locks::clear_stale(git_dir, common_dir, max_age);
        for path in locks::clear_stale_temp_objects(common_dir, max_age) {
            self.host.log(
                LogLevel::Warn,
                &format!(
                    "git: removed {}, a temporary object file left by a git run that was killed (not written to for longer than timeoutMs)",
                    path.display()
                ),
            );
        }
        for path in &cleared.removed {
            self.host.log(
                LogLevel::Warn,
                &format!(
                    "git: removed {}, a lock file left by a git run or index update that was killed (no git of this plugin holds it)",
                    path.display()
                ),
            );
        }
        if cleared.index {
            self.host.log(
                LogLevel::Warn,
                "git: the repository's index may be older than HEAD (its update was killed); this commit stages into an index read from HEAD, and the worktree's index is replaced by it once the commit is made",
            );
        }
        cleared.index
    }

    /// Fill the private index from `HEAD` (none for an unborn branch): the repository's own
    /// index is not trusted after its update was killed.
    fn index_from_head(&self, job: &Job<'_>, repo: &Repo) -> Step<()> {
        let head = match self.run_in(
            job,
            repo,
            &[
                os("rev-parse"),
                os("--verify"),
                os("--quiet"),
                os("HEAD^{commit}"),
            ],
            None,
        ) {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
            Ok(_) => return Ok(()),
            Err(e) => return Err(self.broken(job, "rev-parse", e)),
        };
        match self.run_in(job, repo, &[os("read-tree"), OsStr::new(&head)], None) {
            Ok(o) if o.status.success() => Ok(()),
            Ok(o) => Err(Outcome::failed(format!(
                "commit: the index could not be read from HEAD: {}; nothing was committed",
                self.git_says(job, &o.stderr)
            ))),
            Err(e) => Err(self.broken(job, "read-tree", e)),
        }
    }

    /// Make the private index the repository's, under git's own lock protocol
    /// (create `index.lock` exclusively, write, rename). If someone holds the
    /// lock, or the index changed since the private one was made from it, the
    /// repository keeps its index and the operator is told.
    fn install_index(&self, repo: &Repo) {
        let real = repo.git_dir.join("index");
        let lock = repo.git_dir.join("index.lock");
        let result = (|| -> io::Result<bool> {
            let bytes = std::fs::read(&repo.index)?;
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&lock)?;
            // Under the lock no git changes the index. One that changed since it was copied
            // holds what was staged (or refreshed) during the commit, which the private index
            // does not: replacing it would silently undo that.
            let written = index_identity(&real).and_then(|now| {
                if now != repo.index_seen {
                    return Ok(false);
                }
                io::Write::write_all(&mut file, &bytes)?;
                file.sync_all()?;
                std::fs::rename(&lock, &real).map(|()| true)
            });
            if !matches!(written, Ok(true)) {
                let _ = std::fs::remove_file(&lock);
            }
            written
        })();
        let why = match result {
            Ok(true) => return,
            Ok(false) => "it changed during the commit (something staged into it or refreshed it), and is left as it is".to_owned(),
            Err(e) => errno_text(&e),
        };
        self.host.log(
            LogLevel::Warn,
            &format!(
                "git: the commit was made but the worktree's index was not updated ({why}); git status may show the committed changes as staged"
            ),
        );
    }

    /// A git run that could not complete, before anything was committed.
    fn broken(&self, job: &Job<'_>, step: &str, error: RunError) -> Outcome {
        let message = match error {
            RunError::Spawn(e) => format!("commit: git could not be started ({step}): {}", errno_text(&e)),
            RunError::NotStarted => format!(
                "commit: git {step} was not started: the time limit ({}) had run out; nothing was committed",
                job.limit
            ),
            RunError::Timeout => format!(
                "commit: git {step} did not finish within the time limit ({}); nothing was committed",
                job.limit
            ),
            RunError::Io(e) => format!("commit: git {step}: {}", errno_text(&e)),
        };
        self.host.log(LogLevel::Warn, &message);
        Outcome::failed(message)
    }

    fn commit(&self, job: Job<'_>) -> Outcome {
        let outcome = self.commit_steps(&job).unwrap_or_else(|ended| ended);
        // A git stopped before it ended may have been writing objects (one that exits of its
        // own accord cleans up after itself).
        if job.stopped_a_run.get() {
            if let Some(before) = job.temp_objects.get() {
                for path in before.sweep() {
                    self.host.log(
                        LogLevel::Warn,
                        &format!(
                            "git: removed {}, a temporary object file of a git run that was stopped",
                            path.display()
                        ),
                    );
                }
            }
        }
        outcome
    }

    /// A commit, step by step; each step may end it early with its outcome.
    fn commit_steps(&self, job: &Job<'_>) -> Step<Outcome> {
        let (git_dir, common_dir) = self.repository(job)?;
        let _ = job.git_dirs.set((git_dir.clone(), common_dir.clone()));
        let stale_index = self.clear_stale_locks(&git_dir, &common_dir);
        let _ = job.temp_objects.set(TempObjects::before(&common_dir));
        self.no_other_repository(job)?;
        let repo = self.private_repo(git_dir, common_dir, stale_index)?;
        if stale_index {
            self.index_from_head(job, &repo)?;
        }
        self.no_hard_links(job, &repo)?;
        self.stage(job, &repo)?;
        self.check_staged(job, &repo)?;
        self.make_commit(job, &repo)?;
        self.install_index(&repo);
        // From here on the commit exists: the effect happened, whatever fails in describing
        // it, so the outcome is `ok` with what is known and a note of what is not.
        Ok(self.describe(job))
    }

    /// The output of the commit just made: its id and files, or a note of what could not be
    /// read.
    fn describe(&self, job: &Job<'_>) -> Outcome {
        let head = match self.head(job) {
            Ok(head) => head,
            Err(gap) => return self.made(None, Vec::new(), 0, Some(gap)),
        };
        match self.files(job, &head) {
            Ok((files, total)) => self.made(Some(head), files, total, None),
            Err(gap) => self.made(Some(head), Vec::new(), 0, Some(gap)),
        }
    }

    /// 1. The worktree must be the top level of a git working tree; its git directory (and
    ///    where its refs live) is found once, and every later run is pinned to it.
    fn repository(&self, job: &Job<'_>) -> Step<(PathBuf, PathBuf)> {
        let top = self
            .run(
                job,
                &[
                    os("rev-parse"),
                    os("--show-toplevel"),
                    os("--absolute-git-dir"),
                    os("--git-common-dir"),
                ],
                None,
            )
            .map_err(|e| self.broken(job, "rev-parse", e))?;
        if !top.status.success() {
            let said = self.git_says(job, &top.stderr);
            // `cannot use bare repository`: the worktree itself looked like a bare repository
            // (safe.bareRepository): no repository of the operator's.
            if said.contains("not a git repository") || said.contains("cannot use bare repository")
            {
                if let Some(refusal) = self.unreachable_git_dir(job) {
                    return Err(refusal);
                }
                return Err(self.refuse(
                    "commit: the worktree is not a git repository (the operator must make it one, e.g. with git init or git worktree add)",
                ));
            }
            return Err(self.refuse(format!(
                "commit: the worktree is not a git working tree: {said}"
            )));
        }
        let stdout = String::from_utf8_lossy(&top.stdout).into_owned();
        let mut lines = stdout.lines();
        let (Some(toplevel), Some(git_dir), Some(common_dir)) =
            (lines.next(), lines.next(), lines.next())
        else {
            return Err(Outcome::failed(
                "commit: git rev-parse gave no repository; nothing was committed",
            ));
        };
        if Path::new(toplevel) != job.worktree {
            return Err(self.refuse(
                "commit: the worktree is inside a git repository but is not its top level; only a repository or linked worktree of its own is committed",
            ));
        }
        let (git_dir, common_dir) = (PathBuf::from(git_dir), job.worktree.join(common_dir));
        // The repository must be the one the worktree's own `.git` names: a `.git` directory,
        // or a linked worktree's gitfile pointing outside it. Anything else in the worktree was
        // written by the agent (its tools keep `.git` read-only, not `HEAD` or `config`), and a
        // repository made of it would run git with the agent's config.
        let dot_git = job.worktree.join(".git");
        let the_agents = |dir: &Path| dir.starts_with(&job.worktree) && !dir.starts_with(&dot_git);
        if job.root.symlink_metadata(".git").is_err()
            || the_agents(&git_dir)
            || the_agents(&common_dir)
        {
            return Err(self.refuse(
                "commit: the worktree is not a git repository (the operator must make it one, e.g. with git init or git worktree add)",
            ));
        }
        Ok((git_dir, common_dir))
    }

    /// The refusal for a linked worktree whose `.git` file names a git directory this process
    /// cannot reach, where git only says "not a git repository": the operator did make one
    /// (`git worktree add`, `worldd session new --repo`), but the daemon runs where that
    /// repository is out of sight (a service unit's `ProtectHome`, `PrivateTmp`, a mount
    /// namespace) or it was moved. The agent is told why without the host path; the operator's
    /// log gets the path.
    fn unreachable_git_dir(&self, job: &Job<'_>) -> Option<Outcome> {
        use std::io::Read;
        let mut file = job.root.open(".git").ok()?;
        if !file.metadata().ok()?.is_file() {
            return None;
        }
        // A gitfile is one short line; anything longer is not one.
        let mut text = String::new();
        file.by_ref().take(4096).read_to_string(&mut text).ok()?;
        let named = Path::new(text.strip_prefix("gitdir:")?.trim());
        if !named.is_absolute() {
            return None;
        }
        let err = std::fs::metadata(named).err()?;
        // `<common dir>/worktrees/<name>`: a repository in sight whose record of this worktree
        // is gone (`git worktree prune`, or removed by hand) is not out of the daemon's sight.
        let common = named
            .parent()
            .filter(|dir| dir.file_name() == Some(std::ffi::OsStr::new("worktrees")))
            .and_then(Path::parent);
        if let Some(common) = common.filter(|dir| dir.is_dir()) {
            self.host.log(
                LogLevel::Warn,
                &format!(
                    "git: the worktree {} has a .git file naming {}, which its repository {} no longer has ({}): the repository no longer lists this worktree (git worktree prune removes the record of a worktree it finds missing)",
                    job.worktree.display(),
                    named.display(),
                    common.display(),
                    errno_text(&err)
                ),
            );
            return Some(self.refuse(
                "commit: the worktree's repository no longer lists it as a worktree (its record there was removed, as git worktree prune does); nothing was committed (the operator must make it a worktree of the repository again)",
            ));
        }
        self.host.log(
            LogLevel::Warn,
            &format!(
                "git: the worktree {} has a .git file naming {}, which this daemon cannot reach ({}): a service unit's ProtectHome= or PrivateTmp= hides /home and /tmp, and a repository the daemon commits to must be where it can read and write (its ReadWritePaths)",
                job.worktree.display(),
                named.display(),
                errno_text(&err)
            ),
        );
        Some(self.refuse(format!(
            "commit: the worktree's .git names a git directory this daemon cannot reach ({}); nothing was committed (the operator must keep the repository where the daemon can read and write it)",
            errno_text(&err)
        )))
    }

    /// 2. No other repository on the way to or below what is committed (before git runs, so
    ///    that git never follows a gitfile).
    fn no_other_repository(&self, job: &Job<'_>) -> Step<()> {
        let root = &job.root;
        let targets: Vec<Option<&str>> = match &job.paths {
            None => vec![None],
            Some(paths) => paths.iter().map(|p| Some(p.as_str())).collect(),
        };
        for target in targets {
            let parts: Vec<&str> = match target {
                Some(".") | None => Vec::new(),
                Some(p) => p.split('/').collect(),
            };
            match nested::find(root, &parts, job.deadline) {
                Ok(None) => {}
                Ok(Some(found)) => return Err(self.refuse(nested_refusal(target, &found))),
                Err(ScanError::Timeout) => {
                    let message = format!(
                        "commit: looking for other repositories in the worktree did not finish within the time limit ({}); nothing was committed",
                        job.limit
                    );
                    self.host.log(LogLevel::Warn, &message);
                    return Err(Outcome::failed(message));
                }
                Err(ScanError::Io(dir, e)) => {
                    return Err(self.refuse(format!(
                        "commit: \"{}\" cannot be listed: {}",
                        if dir.as_os_str().is_empty() {
                            Path::new(".")
                        } else {
                            &dir
                        }
                        .display(),
                        errno_text(&e)
                    )))
                }
            }
        }
        Ok(())
    }

    /// The repository found, with the private index this commit stages into.
    fn private_repo(&self, git_dir: PathBuf, common_dir: PathBuf, fresh: bool) -> Step<Repo> {
        let index = if fresh {
            // Not copied, but replaced all the same once the commit is made: unless it changes.
            self.scratch_index().and_then(|(scratch, index)| {
                Ok((scratch, index, index_identity(&git_dir.join("index"))?))
            })
        } else {
            self.private_index(&git_dir)
        };
        let (scratch, index, index_seen) = index.map_err(|e| {
            Outcome::failed(format!(
                "commit: the index could not be copied: {}; nothing was committed",
                errno_text(&e)
            ))
        })?;
        Ok(Repo {
            git_dir,
            common_dir,
            index,
            index_seen,
            _scratch: scratch,
        })
    }

    /// 3a. No file git would stage has a second hard link: the workspace plugin's rule for
    ///     reads, since a link planted in the worktree can name a file outside it. Checked
    ///     before `git add`, which would copy the file into the repository's objects.
    fn no_hard_links(&self, job: &Job<'_>, repo: &Repo) -> Step<()> {
        let mut status: Vec<&OsStr> = vec![
            os("status"),
            os("--porcelain=v1"),
            os("-z"),
            os("--untracked-files=all"),
            os("--no-renames"),
            os("--ignore-submodules=none"),
        ];
        if let Some(paths) = &job.paths {
            status.push(os("--"));
            status.extend(paths.iter().map(OsStr::new));
        }
        let listed = match self.run_in(job, repo, &status, None) {
            Ok(o) if o.status.success() && !o.stdout_cut => o.stdout,
            Ok(o) if o.status.success() => return Err(self.refuse(TOO_MANY_CHANGED)),
            Ok(o) => {
                return Err(self.refuse(format!(
                    "commit: git status refused: {}",
                    self.git_says(job, &o.stderr)
                )))
            }
            Err(e) => return Err(self.broken(job, "status", e)),
        };
        // `XY <path>\0` records; with --no-renames no second path follows.
        let paths = listed
            .split(|b| *b == 0)
            .filter_map(|record| record.get(3..))
            .filter(|path| !path.is_empty());
        self.first_hard_linked(job, paths)
    }

    /// The refusal for the first of `paths` (worktree-relative) that is a regular file with
    /// more than one hard link.
    fn first_hard_linked<'p>(
        &self,
        job: &Job<'_>,
        paths: impl Iterator<Item = &'p [u8]>,
    ) -> Step<()> {
        use std::os::unix::ffi::OsStrExt;
        for path in paths {
            let Ok(md) = job.root.symlink_metadata(OsStr::from_bytes(path)) else {
                // Gone (a deletion) or unreadable: git records no content of it.
                continue;
            };
            let links = cap_std::fs::MetadataExt::nlink(&md);
            if md.is_file() && links > 1 {
                return Err(self.refuse(format!(
                    "commit {}: {}",
                    String::from_utf8_lossy(path),
                    handler_kit::protect::hard_linked(
                        links,
                        "git-commit records only files with one link"
                    )
                )));
            }
        }
        Ok(())
    }

    /// 3. Stage, into the private index, leaving out the workspace plugin's temporary files
    ///    (`.worldd-tmp-…`, at any depth): one left by a write killed part-way holds part of
    ///    a file's content, and is the daemon's debris, not the agent's change. An exclude
    ///    pathspec, so the repository's own ignore files are neither read for it nor changed.
    fn stage(&self, job: &Job<'_>, repo: &Repo) -> Step<()> {
        let literal: Vec<OsString> = job
            .paths
            .iter()
            .flatten()
            .map(|p| OsString::from(format!(":(literal){p}")))
            .collect();
        let mut add: Vec<&OsStr> = vec![os("add"), os("-A"), os("--")];
        add.extend(literal.iter().map(OsString::as_os_str));
        add.push(os(WORKSPACE_TEMPORARIES));
        match self.run_in_at(job, repo, &add, None, true) {
            Ok(o) if o.status.success() => Ok(()),
            Ok(o) => {
                // git quotes a pathspec as given: the agent's path, as the agent gave it.
                let said = self.git_says(job, &o.stderr).replace("':(literal)", "'");
                let ignored = if said.contains("are ignored by one of your .gitignore files") {
                    IGNORED_NOT_ADDED
                } else {
                    ""
                };
                Err(self.refuse(format!("commit: git add refused: {said}{ignored}")))
            }
            Err(e) => Err(self.broken(job, "add", e)),
        }
    }

    /// 4. Anything to commit, and no gitlink among it (a repository that appeared after the
    ///    scan).
    fn check_staged(&self, job: &Job<'_>, repo: &Repo) -> Step<()> {
        let mut diff: Vec<&OsStr> = vec![
            os("diff"),
            os("--cached"),
            os("--raw"),
            os("-z"),
            os("--no-abbrev"),
            os("--no-renames"),
            os("--no-ext-diff"),
            os("--no-textconv"),
        ];
        if let Some(paths) = &job.paths {
            diff.push(os("--"));
            diff.extend(paths.iter().map(OsStr::new));
        }
        match self.run_in(job, repo, &diff, None) {
            Ok(o) if o.status.success() && o.stdout.is_empty() => {
                let nothing = if job.paths.is_some() {
                    NOTHING_IN_PATHS
                } else {
                    NOTHING_TO_COMMIT
                };
                let left_out = self.left_out(job, repo);
                Err(self.refuse(if left_out.is_empty() {
                    nothing.to_string()
                } else {
                    format!("{nothing} git tracks ({})", left_out.join("; "))
                }))
            }
            // Only a whole list can show that no gitlink is in it.
            Ok(o) if o.status.success() && o.stdout_cut => Err(self.refuse(TOO_MANY_STAGED)),
            Ok(o) if o.status.success() => match staged_gitlinks(&o.stdout) {
                // Again on what was staged: a link made since the look before `git add`.
                Ok(links) if links.is_empty() => {
                    self.first_hard_linked(job, staged_files(&o.stdout).into_iter())?;
                    self.filters_defined(job, repo, &staged_files(&o.stdout))
                }
                Ok(links) => Err(self.refuse(format!(
                    "commit: the staged changes hold a gitlink (\"{}\"); git-commit never records another repository",
                    links[0]
                ))),
                Err(()) => Err(Outcome::failed(
                    "commit: git diff gave output the handler cannot read; nothing was committed",
                )),
            },
            Ok(o) => Err(self.refuse(format!(
                "commit: git diff refused: {}",
                self.git_says(job, &o.stderr)
            ))),
            Err(e) => Err(self.broken(job, "diff", e)),
        }
    }

    /// Why files that are there were not staged, when nothing was: entries that are neither a
    /// file, a directory nor a symbolic link (a FIFO, a socket, a device), which git skips
    /// without a word, and ignored files (`.gitignore`, `.git/info/exclude`). Empty when there
    /// are none or git cannot list them.
    fn left_out(&self, job: &Job<'_>, repo: &Repo) -> Vec<String> {
        let mut reasons = Vec::new();
        let starts: Vec<&Path> = match &job.paths {
            None => vec![Path::new("")],
            Some(paths) => paths
                .iter()
                .map(|p| Path::new(if p == "." { "" } else { p.as_str() }))
                .collect(),
        };
        let mut special: Vec<String> = starts
            .into_iter()
            .flat_map(|start| nested::special_files(&job.root, start, job.deadline))
            .collect();
        special.sort();
        if let Some(named) = listed(&special, 3) {
            reasons.push(if special.len() == 1 {
                format!("{named} is not a regular file, a directory or a symbolic link, and git records none of those")
            } else {
                format!("{named} are not regular files, directories or symbolic links, and git records none of those")
            });
        }
        let mut status: Vec<&OsStr> = vec![
            os("status"),
            os("--porcelain=v1"),
            os("-z"),
            os("--ignored=matching"),
            os("--untracked-files=all"),
            os("--no-renames"),
        ];
        if let Some(paths) = &job.paths {
            status.push(os("--"));
            status.extend(paths.iter().map(OsStr::new));
        }
        if let Ok(o) = self.run_in(job, repo, &status, None) {
            if o.status.success() {
                let ignored: Vec<String> = o
                    .stdout
                    .split(|b| *b == 0)
                    .filter_map(|record| record.strip_prefix(b"!! "))
                    .map(|path| String::from_utf8_lossy(path).into_owned())
                    .collect();
                if let Some(named) = listed(&ignored, 3) {
                    let verb = if ignored.len() == 1 { "is" } else { "are" };
                    reasons.push(format!(
                        "{named} {verb} ignored by .gitignore or .git/info/exclude{IGNORED_NOT_ADDED}"
                    ));
                }
            }
        }
        reasons
    }

    /// 4b. No staged file has a `filter` attribute whose driver the config git sees here (the
    ///     repository's own: no user or system config) leaves undefined: git would commit the
    ///     file as it is in the worktree, which a checkout with that filter (from the
    ///     operator's user config, `git lfs install`'s) smudged, and the repository would get
    ///     smudged content instead of what the filter's `clean` makes.
    fn filters_defined(&self, job: &Job<'_>, repo: &Repo, files: &[&[u8]]) -> Step<()> {
        if files.is_empty() {
            return Ok(());
        }
        let mut input = Vec::new();
        for path in files {
            input.extend_from_slice(path);
            input.push(0);
        }
        let attrs = match self.run_in(
            job,
            repo,
            &[os("check-attr"), os("-z"), os("--stdin"), os("filter")],
            Some(&input),
        ) {
            Ok(o) if o.status.success() && !o.stdout_cut => o.stdout,
            Ok(o) if o.status.success() => return Err(self.refuse(TOO_MANY_STAGED_FILTERS)),
            Ok(o) => {
                return Err(self.refuse(format!(
                    "commit: git check-attr refused: {}",
                    self.git_says(job, &o.stderr)
                )))
            }
            Err(e) => return Err(self.broken(job, "check-attr", e)),
        };
        // `<path>\0filter\0<value>\0` records.
        let fields: Vec<&[u8]> = attrs.split(|b| *b == 0).collect();
        let mut checked: Vec<&[u8]> = Vec::new();
        for record in fields.chunks_exact(3) {
            let (path, driver) = (record[0], record[2]);
            if matches!(driver, b"unspecified" | b"unset" | b"set") || checked.contains(&driver) {
                continue;
            }
            let driver_text = String::from_utf8_lossy(driver);
            let mut defined = false;
            for key in ["clean", "process"] {
                let name = format!("filter.{driver_text}.{key}");
                match self.run_in(
                    job,
                    repo,
                    &[os("config"), os("--get"), OsStr::new(&name)],
                    None,
                ) {
                    Ok(o) if o.status.success() => {
                        defined = true;
                        break;
                    }
                    // Exit status 1 alone means "not set"; any other (3, a config git cannot
                    // parse) is git failing, and a run that failed says nothing either way.
                    Ok(o) if o.status.code() == Some(1) => {}
                    Ok(o) => {
                        return Err(self.refuse(format!(
                            "commit: git config --get {name} failed ({}): {}",
                            o.status,
                            self.git_says(job, &o.stderr)
                        )))
                    }
                    Err(e) => return Err(self.broken(job, "config", e)),
                }
            }
            if !defined {
                return Err(self.refuse(format!(
                    "commit {}: its attributes give it filter \"{driver_text}\", which the repository's own config does not define (git-commit reads no user or system config, so the file would be committed as the worktree holds it, not cleaned); the operator defines filter.{driver_text} in the repository's config (git lfs install --local for LFS)",
                    String::from_utf8_lossy(path)
                )));
            }
            checked.push(driver);
        }
        Ok(())
    }

    /// 5. Commit: a new commit on the current branch, nothing else. With paths, `--only`
    ///    leaves anything else that was staged out of it.
    fn make_commit(&self, job: &Job<'_>, repo: &Repo) -> Step<()> {
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
        let locks = Locks::before(&repo.git_dir, &repo.common_dir);
        match self.run_in(job, repo, &commit, Some(job.message.as_bytes())) {
            Ok(o) if o.status.success() => Ok(()),
            Ok(o) => Err(self.refuse(format!(
                "commit: git commit refused: {}",
                self.git_says(job, &o.stderr)
            ))),
            // Only a git that never started proves that nothing was committed.
            Err(e @ (RunError::Spawn(_) | RunError::NotStarted)) => {
                Err(self.broken(job, "commit", e))
            }
            Err(e) => {
                // git was killed (at the deadline, or when it could no longer be waited for)
                // holding whatever it held: release it, so that the repository stays usable.
                let removed = locks.sweep();
                let message = unfinished_commit(&e, job.limit);
                self.host.log(
                    LogLevel::Error,
                    &format!("{message} (lock files removed: {})", removed.len()),
                );
                Err(Outcome::indeterminate(message))
            }
        }
    }

    /// 6. The id of the commit made, or why it is not known.
    fn head(&self, job: &Job<'_>) -> Result<String, String> {
        let head = match self.run(
            job,
            &[os("rev-parse"), os("--verify"), os("HEAD^{commit}")],
            None,
        ) {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
            Ok(o) => {
                return Err(format!(
                    "the commit was made but its id could not be read: {}",
                    self.git_says(job, &o.stderr)
                ))
            }
            Err(e) => return Err(after_commit("rev-parse", "its id is not known", e)),
        };
        if !(head.len() == 40 || head.len() == 64) || !head.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err("the commit was made but git reported an unreadable id".into());
        }
        Ok(head)
    }

    /// The files of commit `head`: at most [`MAX_LISTED_FILES`] names, and how many there are
    /// ([`GitHandler::made`] keeps those that fit the answer).
    fn files(&self, job: &Job<'_>, head: &str) -> Result<(Vec<String>, usize), String> {
        let files = match self.run(
            job,
            &[
                os("diff-tree"),
                os("--no-commit-id"),
                os("--name-only"),
                os("--no-renames"),
                os("--root"),
                os("-r"),
                os("-z"),
                OsStr::new(head),
            ],
            None,
        ) {
            Ok(o) if o.status.success() => o,
            Ok(o) => {
                return Err(format!(
                    "the commit was made but its files could not be listed: {}",
                    self.git_says(job, &o.stderr)
                ))
            }
            Err(e) => return Err(after_commit("diff-tree", "its files are not listed", e)),
        };
        // Every name ends in a NUL, so the count holds past what was kept of the listing.
        let total = files.stdout_records;
        let names = files
            .stdout
            .split(|b| *b == 0)
            .filter(|f| !f.is_empty())
            .take(MAX_LISTED_FILES)
            .map(|f| String::from_utf8_lossy(f).into_owned())
            .collect();
        Ok((names, total))
    }

    /// The output of a commit made: its id (`null` when it could not be read) and its files,
    /// and `note`, what could not be read, when something could not.
    fn made(
        &self,
        head: Option<String>,
        files: Vec<String>,
        total: usize,
        note: Option<String>,
    ) -> Outcome {
        let mut fields = Map::new();
        fields.insert("ok".into(), json!(true));
        fields.insert("commit".into(), json!(head));
        if let Some(note) = &note {
            fields.insert("note".into(), json!(note));
        }
        let files = self.fitting(&fields, files, total);
        let listed = files.len();
        fields.insert("files".into(), json!(files));
        if total > listed {
            fields.insert("more_files".into(), json!(total - listed));
        }
        let head = head.as_deref().unwrap_or("a commit");
        match &note {
            Some(note) => self
                .host
                .log(LogLevel::Warn, &format!("git: committed {head}; {note}")),
            None => self.host.log(
                LogLevel::Debug,
                &format!("git: committed {head} ({total} file(s))"),
            ),
        }
        self.stamp.ok(fields)
    }

    /// The first of `files` that fit, with `fields`, the stamps and a `more_files` count, in
    /// [`RESULT_CAP`] less [`WORLD_ROOM`]. A name's JSON may be six times its bytes (control
    /// characters; `"` is two), so a thousand long names can pass the cap.
    fn fitting(
        &self,
        fields: &Map<String, Value>,
        mut files: Vec<String>,
        total: usize,
    ) -> Vec<String> {
        let mut rest = fields.clone();
        rest.insert("files".into(), json!([]));
        // The count is at most `total`, so its digits are at most these.
        rest.insert("more_files".into(), json!(total));
        rest.insert("tool".into(), json!(self.stamp.tool()));
        rest.insert("policy_digest".into(), json!(self.stamp.policy_digest()));
        // serde_json escapes strings as the canonical form does (only `"`, the backslash and
        // control characters below U+0020), so its length is the canonical length.
        let mut used = json_len(&Value::Object(rest));
        let room = RESULT_CAP - WORLD_ROOM;
        let fit = files
            .iter()
            .take_while(|name| {
                // The name between quotes, and the comma before it (one too many for the first).
                used = used.saturating_add(json_len(&json!(name)) + 1);
                used <= room
            })
            .count();
        files.truncate(fit);
        files
    }
}

/// The identity of the index file at `path` (`None`: there is none).
fn index_identity(path: &Path) -> io::Result<Option<FileIdentity>> {
    match std::fs::metadata(path) {
        Ok(md) => Ok(Some(FileIdentity::of(&md))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The length of `value` as compact JSON.
fn json_len(value: &Value) -> usize {
    handler_kit::serde_json::to_string(value).map_or(usize::MAX / 2, |t| t.len())
}

/// The first `most` of `names`, quoted as they are and joined, with a count of the rest; `None`
/// for no names.
fn listed(names: &[String], most: usize) -> Option<String> {
    let (first, rest) = names.split_at(names.len().min(most));
    if first.is_empty() {
        return None;
    }
    let mut text = first.join(", ");
    if !rest.is_empty() {
        text.push_str(&format!(" and {} more", rest.len()));
    }
    Some(text)
}

/// The `indeterminate` message of a `git commit` run that started and was not seen to its end
/// (killed at the deadline, or no longer waited for): it may have committed.
fn unfinished_commit(error: &RunError, limit: TimeLimit) -> String {
    match error {
        // A run never started is `failed` in `make_commit` and does not come here.
        RunError::Timeout | RunError::NotStarted => format!(
            "commit: git commit did not finish within the time limit ({limit}) and was stopped; the commit may or may not have been made"
        ),
        RunError::Spawn(e) | RunError::Io(e) => format!(
            "commit: waiting for git commit failed ({}) and it was stopped; the commit may or may not have been made",
            errno_text(e)
        ),
    }
}

/// Why something about a commit made is not known: git `step` did not complete.
fn after_commit(step: &str, unknown: &str, error: RunError) -> String {
    let cause = match error {
        RunError::Spawn(e) | RunError::Io(e) => errno_text(&e),
        RunError::Timeout | RunError::NotStarted => "the time limit was reached".to_string(),
    };
    format!("the commit was made but git {step} failed afterwards ({cause}): {unknown}; git log in the worktree shows it")
}

/// The effect asked for, when it is the one this plugin handles.
fn handled_effect(request: &Request) -> Step<&str> {
    let effect = request.effect.as_str();
    if effect != COMMIT {
        return Err(Outcome::failed(format!(
            "broker: the git plugin does not handle effect \"{effect}\""
        )));
    }
    Ok(effect)
}

/// The payload's `paths` as given (`None`: absent), when it is an array of strings.
fn requested_paths<'r>(checked: &Checked<'r>) -> Step<Option<Vec<&'r str>>> {
    let effect = checked.effect;
    let not_strings = || {
        Outcome::failed(format!(
            "broker: {effect} refused: payload key \"paths\" of op \"commit\" must be an array of strings"
        ))
    };
    match checked.payload.get("paths") {
        None => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .map(Value::as_str)
            .collect::<Option<Vec<&str>>>()
            .map(Some)
            .ok_or_else(not_strings),
        Some(_) => Err(not_strings()),
    }
}

/// Where the opened worktree is, symbolic links resolved: the kernel's name for the directory
/// (`/proc/self/fd`), not the request's path looked up again.
fn resolved_worktree(effect: &str, root: &Dir) -> Step<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", root.as_raw_fd())).map_err(|e| {
        Outcome::failed(format!(
            "broker: {effect} failed: the episode's worktree cannot be resolved: {}",
            errno_text(&e)
        ))
    })
}

impl TimeLimit {
    /// The time the job may take, whichever bound set it.
    fn budget(self) -> Duration {
        let (TimeLimit::Plugin(budget) | TimeLimit::Daemon(budget)) = self;
        budget
    }
}

impl GitHandler {
    /// The job a request asks for, step by step; each step may end it early with its outcome.
    fn job<'r>(&self, request: &'r Request, started: Instant) -> Step<Job<'r>> {
        let effect = handled_effect(request)?;
        let checked = check(request, &RULES)?;
        checked.only_keys(&KNOWN_KEYS)?;
        let worktree = checked.worktree()?;
        let message = checked.string("message")?;
        let paths = requested_paths(&checked)?;
        // The handler's own rules (the plan checks them too; never trusted).
        self.check_message(message)?;
        // Opened once, never through a symlink at its place: one swapped in since the daemon
        // checked the worktree would have git commit, and the checks look, where it leads.
        let root = worktree::open(Path::new(worktree))
            .map(|fd| Dir::from_std_file(std::fs::File::from(fd)))
            .map_err(|e| e.outcome(effect))?;
        let paths = paths
            .map(|paths| self.checked_paths(&root, &paths))
            .transpose()?;
        // git reports its top level with symbolic links resolved: compare
        // and stop repository discovery on the resolved path.
        let worktree = resolved_worktree(effect, &root)?;
        let ceiling = worktree.parent().map(Path::to_path_buf);
        let limit = self.time_limit(request.deadline_ms);
        Ok(Job {
            root,
            worktree,
            ceiling,
            message,
            paths,
            deadline: started + limit.budget(),
            limit,
            git_dirs: std::cell::OnceCell::new(),
            temp_objects: std::cell::OnceCell::new(),
            stopped_a_run: std::cell::Cell::new(false),
        })
    }

    /// The commit message: not blank, not too long, no NUL byte.
    fn check_message(&self, message: &str) -> Step<()> {
        if message.trim().is_empty() {
            return Err(self.refuse("commit: the message is empty; a commit needs a message"));
        }
        if message.len() > MAX_MESSAGE_BYTES {
            return Err(self.refuse(format!(
                "commit: the message is {} bytes; the limit is {MAX_MESSAGE_BYTES}",
                message.len()
            )));
        }
        if message.contains('\0') {
            return Err(self.refuse("commit: the message contains a NUL byte"));
        }
        Ok(())
    }

    /// The `paths` of a commit: some, not too many, each one checked; duplicates once.
    fn checked_paths(&self, root: &Dir, paths: &[&str]) -> Step<Vec<String>> {
        if paths.is_empty() {
            return Err(
                self.refuse("commit: \"paths\" names no path; omit it to commit every change")
            );
        }
        if paths.len() > MAX_PATHS {
            return Err(self.refuse(format!(
                "commit: \"paths\" has {} items; the limit is {MAX_PATHS}",
                paths.len()
            )));
        }
        let mut list = Vec::with_capacity(paths.len());
        for path in paths {
            let joined = self.checked_path(root, path)?;
            if !list.contains(&joined) {
                list.push(joined);
            }
        }
        Ok(list)
    }

    /// One path, normalised (`.` for the worktree itself): not empty, no NUL byte, not too
    /// long, inside the worktree, not git's own data, no symbolic link on the way.
    fn checked_path(&self, root: &Dir, path: &str) -> Step<String> {
        if path.is_empty() {
            return Err(self.refuse("commit: a path is empty"));
        }
        // The length first: its text does not repeat the path, which may be megabytes long.
        if path.len() > MAX_PATH_BYTES {
            return Err(self.refuse(format!(
                "commit: a path is {} bytes; the limit is {MAX_PATH_BYTES}",
                path.len()
            )));
        }
        if path.contains('\0') {
            return Err(self.refuse(format!(
                "commit {}: the path contains a NUL byte",
                path.replace('\0', "\\0")
            )));
        }
        let parts = normalise(path).map_err(|refusal| self.refuse(refusal))?;
        if let Some(named) = git_component(&parts.join("/")) {
            return Err(self.refuse(if named == ".git" {
                format!("commit {path}: .git/ is git's own data, not worktree content")
            } else {
                format!(
                    "commit {path}: \"{named}\" is named like .git (names are compared after NFKC and case folding); git-commit never commits git's own data or another repository"
                )
            }));
        }
        check_components(root, path, &parts).map_err(|refusal| self.refuse(refusal))?;
        Ok(if parts.is_empty() {
            ".".to_string()
        } else {
            parts.join("/")
        })
    }

    /// The plugin's `timeoutMs`, or the daemon's deadline for the call (`0`: none) less
    /// [`DEADLINE_MARGIN`] when that is shorter.
    fn time_limit(&self, deadline_ms: u64) -> TimeLimit {
        let plugin = Duration::from_millis(self.policy.timeout_ms);
        if deadline_ms > 0 {
            let daemon = Duration::from_millis(deadline_ms).saturating_sub(DEADLINE_MARGIN);
            if daemon < plugin {
                return TimeLimit::Daemon(daemon);
            }
        }
        TimeLimit::Plugin(plugin)
    }
}

impl EffectHandler for GitHandler {
    fn execute(&self, request: Request) -> Outcome {
        let started = Instant::now();
        match self.job(&request, started) {
            Ok(job) => self.commit(job),
            Err(ended) => ended,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{staged_gitlinks, unfinished_commit, GitHandler, RunError, TimeLimit};
    use handler_kit::serde_json::json;
    use handler_kit::{Host, Outcome, Request};
    use handler_test_support::LogLines;
    use std::path::Path;
    use std::sync::Arc;
    use std::time::Instant;

    /// `git <args>` in `dir` for set-up, with an identity and no user config.
    fn git(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .args([
                "-c",
                "user.name=Setup",
                "-c",
                "user.email=setup@example.invalid",
            ])
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("HOME", dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// A repository with one commit and a change staged into a commit's private index, the
    /// handler (logging into the lines returned), and the commit request.
    fn staged() -> (tempfile::TempDir, GitHandler, Arc<LogLines>, Request) {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q"]);
        std::fs::write(repo.join("a.txt"), "one\n").unwrap();
        git(&repo, &["add", "a.txt"]);
        git(&repo, &["commit", "-q", "-m", "initial"]);
        std::fs::write(repo.join("a.txt"), "two\n").unwrap();
        let lines = Arc::new(LogLines::default());
        let state = tmp.path().join("state");
        let handler = crate::GitPlugin::build(
            json!({"author": "T <t@example.invalid>", "stateDir": state.to_str().unwrap()}),
            Host::from_services(lines.clone()),
            || None,
        )
        .unwrap();
        let request = Request {
            invocation_id: "inv-1".into(),
            episode: "ep".into(),
            worktree: Some(repo.to_string_lossy().into_owned()),
            effect: "Git.Commit".into(),
            scope: "worktree".into(),
            cost: 1,
            payload: json!({"op": "commit", "message": "m"}),
            deadline_ms: 0,
        };
        (tmp, handler, lines, request)
    }

    /// The outcome of `make_commit` for `request`, its change staged first; `at_commit` runs
    /// on the job just before. Whether a run of the job was stopped, too.
    fn make_commit(
        handler: &GitHandler,
        request: &Request,
        at_commit: impl FnOnce(&mut super::Job<'_>),
    ) -> (Outcome, bool) {
        let mut job = handler.job(request, Instant::now()).unwrap();
        let (git_dir, common_dir) = handler.repository(&job).unwrap();
        let repo = handler.private_repo(git_dir, common_dir, false).unwrap();
        handler.stage(&job, &repo).unwrap();
        at_commit(&mut job);
        let outcome = handler.make_commit(&job, &repo).unwrap_err();
        (outcome, job.stopped_a_run.get())
    }

    /// `git commit` reached with the deadline already past was refused before it started, but
    /// said as a run stopped at the deadline: `indeterminate` ("the commit may or may not have
    /// been made"), an ERROR line and a sweep of lock files, though nothing had run.
    #[test]
    fn a_git_commit_never_started_for_the_deadline_is_failed_and_nothing_is_swept() {
        let (tmp, handler, lines, request) = staged();
        let repo = tmp.path().join("repo");
        let head = git(&repo, &["rev-parse", "HEAD"]);
        let (outcome, stopped) = make_commit(&handler, &request, |job| {
            job.deadline = Instant::now();
        });
        let message = "commit: git commit was not started: the time limit (8000 ms) had run out; nothing was committed";
        assert_eq!(outcome, Outcome::failed(message));
        assert_eq!(git(&repo, &["rev-parse", "HEAD"]), head);
        // No run was stopped: no temporary object is swept, and no lock file either (its
        // sweep is said in an ERROR line).
        assert!(!stopped);
        assert_eq!(lines.lines(), vec![format!("warn: {message}")]);
    }

    /// A reader thread of git's output the OS refused (a pids limit) panicked after git had
    /// started: `failed` "handler panicked" though git ran, and git left unwaited, a zombie.
    /// The readers start before git: the commit is `failed`, and git never ran.
    #[test]
    fn a_git_commit_whose_reader_thread_is_refused_is_failed_and_never_started() {
        let (tmp, handler, lines, request) = staged();
        let repo = tmp.path().join("repo");
        let head = git(&repo, &["rev-parse", "HEAD"]);
        let (outcome, stopped) = make_commit(&handler, &request, |_| {
            crate::git::refuse_capture_threads(true);
        });
        crate::git::refuse_capture_threads(false);
        let message = "commit: git could not be started (commit): resource temporarily unavailable";
        assert_eq!(outcome, Outcome::failed(message));
        assert_eq!(git(&repo, &["rev-parse", "HEAD"]), head);
        assert!(!stopped);
        assert_eq!(lines.lines(), vec![format!("warn: {message}")]);
    }

    /// An error waiting for a `git commit` that had started (ECHILD, when another part of the
    /// process reaps children) was `failed`, "nothing was committed", though git had
    /// committed: it is the same uncertainty as a run stopped at the deadline.
    #[test]
    fn a_git_commit_that_could_not_be_waited_for_may_have_committed() {
        let lost = std::io::Error::from_raw_os_error(libc::ECHILD);
        assert_eq!(
            unfinished_commit(&RunError::Io(lost), TimeLimit::Plugin(std::time::Duration::from_secs(8))),
            "commit: waiting for git commit failed (no child processes) and it was stopped; the commit may or may not have been made"
        );
    }

    #[test]
    fn gitlinks_are_found_in_raw_diff_records() {
        let id = "0".repeat(40);
        let raw = format!(
            ":000000 100644 {id} {id} A\0a.txt\0:000000 160000 {id} {id} A\0leak1\0:160000 000000 {id} {id} D\0old\0"
        );
        assert_eq!(
            staged_gitlinks(raw.as_bytes()),
            Ok(vec!["leak1".to_string(), "old".to_string()])
        );
        // A path that looks like a gitlink header is still a path.
        let raw = format!(":100644 100644 {id} {id} M\0:160000 x\0");
        assert_eq!(staged_gitlinks(raw.as_bytes()), Ok(vec![]));
        assert_eq!(staged_gitlinks(b""), Ok(vec![]));
        assert_eq!(staged_gitlinks(b"no header\0"), Err(()));
        assert_eq!(staged_gitlinks(b":100644 100644 a b M\0"), Err(()));
    }
}
