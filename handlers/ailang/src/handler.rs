//! The handler object: start-up (archive and probe the binary, make the state directory) and
//! `execute` (request checks, operator gates, per-episode policies, the ailang child, the
//! output objects).

use std::ffi::OsString;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use handler_kit::beneath::{self, End, HostDir, Kind as EntryKind, WalkError};
use handler_kit::file_identity::FileIdentity;
use handler_kit::identity::sha256_file;
use handler_kit::output::{errno_text, refusal, stamped};
use handler_kit::protect::{git_component, named_like_git, GIT_UNREAD};
use handler_kit::request::{
    check, json_quote as quote, op_not_allowed, Checked as CheckedRequest, Quote, Rules,
};
use handler_kit::serde_json::{self, json, Map, Value};
use handler_kit::{
    EffectHandler, FinishInput, Host, JsonObject, LogLevel, Outcome, Preflight, Request,
};

use crate::config::{Config, CAPS};
use crate::cut::{self, Keep};
use crate::finish;
use crate::policy::{self, PolicySpec, Verified, VerifiedFiles};
use crate::process::{self, child_env, excerpt, Spec, OUTPUT_CAP};
use crate::run;

/// The op of the three run effects.
const RUN_OPS: &[&str] = &["run"];

handler_kit::effect! {
    /// Type-check and verify one AILANG file (ailang policy-tool ai_check).
    pub const CHECK = "Ailang.Check" { class: Read, ops: &["ai_check"] }
    /// Run one AILANG program with IO, FS and/or Declassify under the episode's restricted
    /// policy.
    pub const RUN = "Ailang.Run" { class: Unknown, ops: RUN_OPS }
    /// Run one AILANG program with Env (trusted_host policy); the operator must enable Env.
    pub const RUN_ENV = "Ailang.RunEnv" { class: Unknown, ops: RUN_OPS }
    /// Run one AILANG program with Net to the operator's loopback hosts; the operator must
    /// enable Net.
    pub const RUN_NET = "Ailang.RunNet" { class: Unknown, ops: RUN_OPS }
    /// List the binary's builtins or search the operator's examples corpus.
    pub const DISCOVER = "Ailang.Discover" { class: Read, ops: &["builtins_list", "examples_search"] }
    /// One allowlisted ailang CLI operation (some, like test, run code); never writes the
    /// worktree.
    pub const CLI = "Ailang.CLI" { class: Unknown, ops: &CLI_OPS }
}

/// The ailang-cli ops this plugin knows. Ailang.CLI's allowlist is this list intersected
/// with the `cli` list of the policy-tool's summary, so an op a newer `ailang` adds is not
/// served until this plugin (and its manifest) names it.
pub const CLI_OPS: [&str; 20] = [
    "agent_prompt",
    "ai_check",
    "axioms",
    "builtins_list",
    "builtins_show",
    "check",
    "devtools_prompt",
    "docs_search",
    "examples_list",
    "examples_search",
    "examples_show",
    "examples_tags",
    "fmt",
    "iface",
    "pkg_docs",
    "policy_check",
    "prompt",
    "test",
    "tree",
    "version",
];

/// The handler's hard cap on one effect (summary check plus the operation); the request's
/// deadline shortens it.
pub const HARD_CAP: Duration = Duration::from_secs(10);

/// What the handler keeps of the request's deadline for itself (a quarter of a deadline under
/// 2 s): a child killed at the time limit must still be reaped, its pipes collected and the
/// answer returned before the daemon's own deadline, or the call ends as a host timeout and
/// the effect is never committed as the failure it is.
pub const ANSWER_MARGIN: Duration = Duration::from_millis(500);

/// ailang-run's limits (the plan enforces them first; the handler re-checks, since an
/// operator may publish another transition for these effects).
pub const MAX_STDIN: usize = 65536;
/// See [`MAX_STDIN`].
pub const MAX_ARGV_ITEMS: usize = 32;
/// See [`MAX_STDIN`].
pub const MAX_ARGV_ITEM: usize = 1024;

/// The payload keys this handler reads. A key that differs from one of them only by case is
/// refused: an alias could smuggle a second value past a plan that checked the first.
const KNOWN_KEYS: [&str; 10] = [
    "op",
    "path",
    "module",
    "query",
    "package",
    "flags",
    "args_json",
    "stdin",
    "argv",
    "caps",
];

/// The examples-search refusal when no corpus is configured (the reference's text, with our
/// command name).
pub const NO_CORPUS: &str = "no examples corpus configured: start worldd serve with --plugin-config ailang.examplesDir=DIR (an AILANG examples corpus: manifest.json plus runnable/; `ailang examples download` makes one at ~/.ailang/examples)";

/// The fix for an archived binary that is gone or not executable: each start copies `bin`
/// into `stateDir/bin/<sha256>/ailang` again.
pub const RESTART: &str = "restart worldd to archive bin again";

/// The agent's answer when the archived binary cannot be run (the log names the file).
pub const UNRUNNABLE: &str = "the ailang binary this daemon runs is missing or not executable; an operator must restart worldd to archive it again";

/// The agent's answer when the archived binary's bytes are no longer those `tool` names (the
/// log names the file and both digests).
pub const ARCHIVE_CHANGED: &str = "the ailang binary this daemon runs was changed after it was archived, so no output could name the bytes that ran; an operator must restart worldd to archive it again";

/// Why `ailang policy-tool` gave no reply.
#[derive(Debug)]
enum ToolError {
    /// Its child started and could not be waited for: whether it ran to its end is unknown.
    Unwaited(String),
    /// Anything else.
    Failed(String),
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ToolError::Unwaited(e) | ToolError::Failed(e) => f.write_str(e),
        }
    }
}

impl From<String> for ToolError {
    fn from(e: String) -> ToolError {
        ToolError::Failed(e)
    }
}

/// Which effect family a request belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Check,
    Discover,
    Cli,
    Run,
}

/// The handler (see the crate docs).
pub struct AilangHandler {
    /// The archived copy of the operator's binary: what actually runs.
    bin: PathBuf,
    /// The archived copy as `stat` saw it when its bytes were last hashed, and their digest
    /// (`sha256:…`, `tool` or not): a copy `stat` says is unchanged since is not hashed again,
    /// whether its bytes were `tool`'s or another's.
    seen: Mutex<Option<(FileIdentity, String)>>,
    tool: String,
    version: String,
    examples_dir: Option<PathBuf>,
    run_allow_caps: Vec<&'static str>,
    run_net_allow: Vec<String>,
    run_net_allow_http: bool,
    /// Whether a path argument may name a file with more than one hard link
    /// (`allowHardLinks`, as the Workspace plugin's switch).
    allow_hard_links: bool,
    /// Each child's `RLIMIT_DATA`, in bytes (`memoryMiB`).
    memory: u64,
    /// Canonical.
    state_dir: PathBuf,
    /// Policy files whose summary matched, by path. A file is re-verified when its expected
    /// text changes or its bytes on disk differ from what was verified.
    verified: Mutex<VerifiedFiles>,
    host: Host,
}

fn make_dir(path: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(path)?;
    // An existing directory keeps its mode under DirBuilder: tighten it.
    fs::set_permissions(path, fs::Permissions::from_mode(0o700))
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Write `bytes` to `path` atomically (temp file in the same directory, fsync, rename,
/// directory fsync) with `mode`.
fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::other("no parent directory"))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{name}.tmp-{}-{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.set_permissions(fs::Permissions::from_mode(mode))?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Copy the operator's binary to `<bin_dir>/<sha256>/ailang` (mode 0555) unless an intact
/// copy is there. Runs use the copy, so `tool` names exactly the bytes that run even if the
/// operator's file changes later.
fn archive(bin: &Path, bin_dir: &Path) -> Result<(PathBuf, String), String> {
    let bytes = fs::read(bin).map_err(|e| format!("ailang config: bin {}: {e}", bin.display()))?;
    let hex = policy::digest(&bytes);
    let dir = bin_dir.join(&hex);
    let target = dir.join("ailang");
    if sha256_file(&target).ok().as_deref() == Some(hex.as_str()) {
        return Ok((target, hex));
    }
    make_dir(&dir)
        .and_then(|()| write_atomic(&target, &bytes, 0o555))
        .map_err(|e| {
            format!(
                "ailang plugin: cannot archive the binary into {}: {e}",
                dir.display()
            )
        })?;
    Ok((target, hex))
}

/// Refuse a `bin` another user could have written or could swap, by the rule the daemon
/// applies to plugin libraries: it runs as the daemon's user, beside the store and every
/// worktree. Every user may write it, or it belongs to a user other than this process's and
/// root; or every user may write the directory holding it (the link's, and the file's when
/// `bin` is a symlink) and that directory is not sticky. A group's write is the owner's grant.
fn refuse_loose_bin(bin: &Path, meta: &fs::Metadata) -> Result<(), String> {
    let shown = bin.display();
    let mode = meta.mode() & 0o7777;
    if mode & 0o002 != 0 {
        return Err(format!(
            "ailang config: bin {shown}: refusing to run a binary every user may write (mode {mode:04o}); `chmod o-w {shown}`"
        ));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me && meta.uid() != 0 {
        return Err(format!(
            "ailang config: bin {shown}: refusing to run a binary owned by uid {}, neither this process's user (uid {me}) nor root",
            meta.uid()
        ));
    }
    let holder = |p: &Path| match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut dirs = vec![holder(bin)];
    if let Ok(real) = bin.canonicalize() {
        let dir = holder(&real);
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    for dir in dirs {
        let Ok(m) = fs::metadata(&dir) else { continue };
        let mode = m.mode() & 0o7777;
        if mode & 0o002 != 0 && mode & 0o1000 == 0 {
            return Err(format!(
                "ailang config: bin {shown}: refusing it inside {}, a directory every user may write, without the sticky bit (mode {mode:04o}): anyone could swap it for their own; `chmod o-w {}`",
                dir.display(),
                dir.display()
            ));
        }
    }
    Ok(())
}

/// Whether one of two canonical paths lies inside the other.
fn overlaps(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

fn valid_episode(ep: &str) -> bool {
    let b = ep.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// A JSON object with its keys inserted in sorted order at every level, so the request piped
/// to the policy-tool is the same bytes whatever map implementation serde_json uses.
fn sorted(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let mut out = Map::new();
            for k in keys {
                out.insert(k.clone(), sorted(&m[k]));
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// A request that passed every check and is ready to run.
struct Checked<'a> {
    effect: &'a str,
    op: &'a str,
    payload: &'a JsonObject,
    episode: &'a str,
    worktree: &'a str,
    /// The worktree opened by descriptor: every child starts in it.
    dir: Arc<OwnedFd>,
    deadline: Instant,
    /// The effect's time limit: min(10 s, the request's deadline less the margin).
    limit: Duration,
    /// Half the margin before the daemon's deadline: waiting for pipes ends there.
    answer_by: Option<Instant>,
}

impl AilangHandler {
    /// Resolve the config against the file system and start: the binary must be an
    /// executable regular file (it is archived under `stateDir/bin/` and probed with
    /// `--version`), the corpus a directory, the state directories creatable.
    pub fn new(config: Config, host: Host) -> Result<AilangHandler, String> {
        let bin_text = config.bin.display().to_string();
        let meta = fs::metadata(&config.bin).map_err(|e| {
            // `bin=ailang` is not looked up in PATH: say so, and how to give the whole path.
            let relative = if config.bin.is_relative() {
                format!(
                    "; a relative bin is taken from the daemon's working directory, not looked up in PATH: give its absolute path (--plugin-config ailang.bin=$(command -v {bin_text}))"
                )
            } else {
                String::new()
            };
            format!("ailang config: bin {bin_text}: {e}{relative}")
        })?;
        if !meta.is_file() {
            return Err(format!(
                "ailang config: bin {bin_text} is not a regular file"
            ));
        }
        if meta.permissions().mode() & 0o111 == 0 {
            return Err(format!("ailang config: bin {bin_text} is not executable"));
        }
        refuse_loose_bin(&config.bin, &meta)?;
        let examples_dir = match &config.examples_dir {
            None => None,
            Some(d) => {
                let canonical = d
                    .canonicalize()
                    .map_err(|e| format!("ailang config: examplesDir {}: {e}", d.display()))?;
                if !canonical.is_dir() {
                    return Err(format!(
                        "ailang config: examplesDir {} is not a directory",
                        d.display()
                    ));
                }
                Some(canonical)
            }
        };
        let state_err = |e: io::Error| {
            format!(
                "ailang config: stateDir {}: {e}",
                config.state_dir.display()
            )
        };
        make_dir(&config.state_dir).map_err(state_err)?;
        let state_dir = config.state_dir.canonicalize().map_err(state_err)?;
        for sub in ["policies", "cache", "bin", "cache/_startup"] {
            make_dir(&state_dir.join(sub)).map_err(state_err)?;
        }
        let (bin, hex) = archive(&config.bin, &state_dir.join("bin"))?;
        // Stat'ed after the hash: a change in between shows as a difference at the first call.
        let seen = fs::metadata(&bin)
            .ok()
            .map(|m| (FileIdentity::of(&m), format!("sha256:{hex}")));
        let memory = config.memory_mib << 20;

        // Probe: a binary that cannot even report its version would fail every call; say so
        // once, at start-up. `_startup` cannot collide with an episode (no `_` in episodes).
        let probe = process::run(Spec {
            program: bin.clone(),
            args: vec!["--version".into()],
            cwd: state_dir.clone(),
            dir: None,
            env: child_env(&state_dir.join("cache/_startup"), examples_dir.as_deref()),
            stdin: Vec::new(),
            deadline: Instant::now() + HARD_CAP,
            limit: HARD_CAP,
            answer_by: None,
            cap: OUTPUT_CAP,
            memory,
        })
        .map_err(|e| match e {
            process::Failure::Timeout(limit) => format!(
                "ailang plugin: {bin_text} --version did not answer within {} ms; its process group was killed",
                limit.as_millis()
            ),
            e => format!("ailang plugin: {bin_text} --version {e}"),
        })?;
        let stdout = String::from_utf8_lossy(&probe.stdout);
        let version = stdout
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(str::to_string);
        let version = match (probe.status.success(), version) {
            (true, Some(v)) => v,
            _ => {
                return Err(format!(
                    "ailang plugin: {bin_text} --version did not print a version ({}; stderr: {})",
                    probe.rc_text(),
                    excerpt(&String::from_utf8_lossy(&probe.stderr))
                ))
            }
        };
        host.log(
            LogLevel::Info,
            &format!("ailang: {version}, {bin_text} archived as sha256:{hex}"),
        );
        Ok(AilangHandler {
            bin,
            seen: Mutex::new(seen),
            tool: format!("sha256:{hex}"),
            version,
            examples_dir,
            run_allow_caps: config.run_allow_caps,
            run_net_allow: config.run_net_allow,
            run_net_allow_http: config.run_net_allow_http,
            allow_hard_links: config.allow_hard_links,
            memory,
            state_dir,
            verified: Mutex::new(VerifiedFiles::default()),
            host,
        })
    }

    /// `sha256:` + hex SHA-256 of the binary: the `tool` every policy-tool output carries.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The first line of `ailang --version`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The archived binary that runs.
    pub fn binary(&self) -> &Path {
        &self.bin
    }

    /// `what` and why its child did not give a result. A child that could not be started
    /// names the archived copy (the file that was to run, not the operator's `bin`) and, when
    /// the copy is gone or not executable, the fix: a start archives `bin` again.
    fn child_failed(&self, what: &str, e: &process::Failure) -> String {
        match e {
            process::Failure::Spawn { error, .. }
                if matches!(
                    error.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied
                ) =>
            {
                format!("{what} {e}; {RESTART}")
            }
            e => format!("{what} {e}"),
        }
    }

    /// Why the archived binary cannot be run now (removed, or its execute bit taken, while
    /// the daemon serves), if it cannot: every call would fail before anything ran.
    fn unrunnable(&self) -> Option<String> {
        let path = std::ffi::CString::new(self.bin.as_os_str().as_encoded_bytes()).ok()?;
        // SAFETY: `path` is a NUL-terminated string that outlives the call.
        if unsafe { libc::access(path.as_ptr(), libc::X_OK) } == 0 {
            return None;
        }
        Some(io::Error::last_os_error().to_string())
    }

    /// The archived copy's digest now (`sha256:…`), when its bytes are no longer those `tool`
    /// names (rewritten in place, or swapped, since start). `stat` first: only a change in what
    /// it says costs a hash. A copy that cannot be stat'ed or read is left to [`Self::unrunnable`]
    /// and the spawn, which say what is wrong with it.
    fn archive_changed(&self) -> Option<String> {
        let now = FileIdentity::of(&fs::metadata(&self.bin).ok()?);
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let digest = match &*seen {
            Some((at, digest)) if *at == now => digest.clone(),
            // Changed since it was last hashed (or never stat'ed): hashed once for this state,
            // changed bytes included, so a copy that stays changed costs a `stat` per call,
            // not a hash of the whole binary.
            _ => {
                let digest = format!("sha256:{}", sha256_file(&self.bin).ok()?);
                *seen = Some((now, digest.clone()));
                digest
            }
        };
        // Equal to `tool`: touched, not changed (a chmod, a copy of the same bytes).
        (digest != self.tool).then_some(digest)
    }

    /// The log's line for an archived copy whose bytes are now `digest`.
    fn archive_changed_log(&self, effect: &str, digest: &str, what: &str) {
        self.host.log(
            LogLevel::Error,
            &format!(
                "ailang: {effect} {what}: the archived binary {} was changed after it was archived: its bytes are {digest}, not the {} its outputs are stamped with; {RESTART}",
                self.bin.display(),
                self.tool
            ),
        );
    }

    /// The canonical state directory.
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    fn cache_dir(&self, episode: &str) -> PathBuf {
        self.state_dir.join("cache").join(episode)
    }

    fn spec(&self, c: &Checked<'_>, args: Vec<OsString>, stdin: Vec<u8>) -> Spec {
        Spec {
            program: self.bin.clone(),
            args,
            cwd: PathBuf::from(c.worktree),
            dir: Some(Arc::clone(&c.dir)),
            env: child_env(&self.cache_dir(c.episode), self.examples_dir.as_deref()),
            stdin,
            deadline: c.deadline,
            limit: c.limit,
            answer_by: c.answer_by,
            cap: OUTPUT_CAP,
            memory: self.memory,
        }
    }

    /// Run `ailang policy-tool --policy <file>` with one request; the reply object.
    fn policy_tool(
        &self,
        c: &Checked<'_>,
        policy_file: &Path,
        request: &Value,
    ) -> Result<JsonObject, ToolError> {
        let args = vec![
            OsString::from("policy-tool"),
            "--policy".into(),
            policy_file.as_os_str().to_owned(),
        ];
        let stdin = serde_json::to_vec(&sorted(request)).map_err(|e| e.to_string())?;
        let done = process::run(self.spec(c, args, stdin)).map_err(|e| match e {
            process::Failure::Wait(_) => {
                ToolError::Unwaited(self.child_failed("ailang policy-tool", &e))
            }
            e => ToolError::Failed(self.child_failed("ailang policy-tool", &e)),
        })?;
        if !done.status.success() {
            let stderr = excerpt(&String::from_utf8_lossy(&done.stderr));
            return Err(ToolError::Failed(format!(
                "ailang policy-tool exited with {}: {}",
                done.rc_text(),
                if stderr.is_empty() {
                    "(no stderr)"
                } else {
                    &stderr
                }
            )));
        }
        // The reply becomes the tool's result, which the coordinator caps at RESULT_CAP after
        // the effect: a larger one is refused here, before it is parsed into a tree that can
        // take many times its size.
        if done.stdout.len() > cut::RESULT_CAP {
            return Err(ToolError::Failed(format!(
                "ailang policy-tool replied with {} bytes; a reply is at most {} (the most a tool's result may hold)",
                done.stdout.len(),
                cut::RESULT_CAP
            )));
        }
        match serde_json::from_slice::<Value>(&done.stdout) {
            Ok(Value::Object(reply)) => Ok(reply),
            _ => Err(ToolError::Failed(format!(
                "ailang policy-tool replied with something that is not one JSON object: {:?}",
                excerpt(&String::from_utf8_lossy(&done.stdout))
            ))),
        }
    }

    /// Write the episode's policy file for `spec` (0600, atomically) and have the
    /// policy-tool's summary confirm it, unless this exact file was verified before.
    fn ensure_policy(
        &self,
        c: &Checked<'_>,
        spec: &PolicySpec,
    ) -> Result<(PathBuf, Verified), Outcome> {
        let text = spec.text(c.worktree);
        let digest = policy::digest(text.as_bytes());
        let path = self
            .state_dir
            .join("policies")
            .join(spec.file_name(c.episode));
        let known = self
            .verified
            .lock()
            .ok()
            .and_then(|m| m.get(&path).cloned())
            .filter(|v| v.digest == digest);
        if let Some(v) = known {
            if fs::read(&path).ok().as_deref() == Some(text.as_bytes()) {
                return Ok((path, v));
            }
        }
        let unavailable = |why: String| {
            self.host.log(
                LogLevel::Error,
                &format!(
                    "ailang: tools unavailable for episode \"{}\": {why}",
                    c.episode
                ),
            );
            Outcome::failed(format!("broker: {} failed: {why}; nothing ran", c.effect))
        };
        make_dir(&self.cache_dir(c.episode)).map_err(|e| {
            unavailable(format!("the episode's cache directory cannot be made: {e}"))
        })?;
        write_atomic(&path, text.as_bytes(), 0o600).map_err(|e| {
            unavailable(format!("the episode's policy file cannot be written: {e}"))
        })?;
        let reply = self
            .policy_tool(c, &path, &json!({"op": "summary"}))
            .map_err(|e| unavailable(format!("the policy summary failed: {e}")))?;
        let verified = policy::verify_summary(&Value::Object(reply), spec, c.worktree, &digest)
            .map_err(|e| {
                unavailable(format!(
                    "the policy-tool summary does not match the episode's policy: {e}"
                ))
            })?;
        if let Ok(mut m) = self.verified.lock() {
            m.insert(path.clone(), verified.clone());
        }
        Ok((path, verified))
    }

    fn stamp(&self, output: JsonObject, policy_digest: &str) -> Outcome {
        stamped(output, &self.tool, policy_digest)
    }

    /// A policy-tool op: base policy, checked payload on stdin, reply stamped.
    fn policy_tool_op(&self, c: &Checked<'_>, cli: bool) -> Outcome {
        let (path, verified) = match self.ensure_policy(c, &PolicySpec::base()) {
            Ok(p) => p,
            Err(outcome) => return outcome,
        };
        if cli && !verified.cli.iter().any(|o| o == c.op) {
            return op_not_allowed(c.effect, c.op, Quote::Json);
        }
        let reply = match self.policy_tool(c, &path, &Value::Object(c.payload.clone())) {
            Ok(r) => r,
            // An Ailang.CLI op may run code (`test`): one whose child started and could not be
            // waited for may have run to its end. A read's failure changed nothing either way.
            Err(ToolError::Unwaited(e)) if cli => {
                return Outcome::indeterminate(format!(
                    "broker: {} indeterminate: the op was started, then {e}; it may have run",
                    c.effect
                ))
            }
            Err(e) => return Outcome::failed(format!("broker: {} failed: {e}", c.effect)),
        };
        if !matches!(reply.get("ok"), Some(Value::Bool(_))) {
            return Outcome::failed(format!(
                "broker: {} failed: the policy-tool reply has no boolean \"ok\"",
                c.effect
            ));
        }
        if let Some(key) = ["tool", "policy_digest", "world"]
            .into_iter()
            .find(|k| reply.contains_key(*k))
        {
            return Outcome::failed(format!(
                "broker: {} failed: the policy-tool reply carries the reserved key \"{key}\"",
                c.effect
            ));
        }
        // The reply was measured before the stamps; the result is what must fit, with room
        // for the daemon's `world` block.
        let stamped = self.stamp(reply, &verified.digest);
        if let Outcome::Ok { output } = &stamped {
            let len = serde_json::to_string(output).map_or(usize::MAX, |t| t.len());
            let cap = cut::RESULT_CAP - cut::WORLD_ROOM;
            if len > cap {
                return Outcome::failed(format!(
                    "broker: {} failed: ailang policy-tool's reply is {len} bytes as the tool's result (with its tool and policy_digest stamps); a result may take at most {cap}, leaving {} of the {} a tool's answer may hold for the daemon's world block",
                    c.effect,
                    cut::WORLD_ROOM,
                    cut::RESULT_CAP
                ));
            }
        }
        stamped
    }

    /// The examples refusal: no child runs, the output is still stamped with the base
    /// policy's digest (computed, not verified: nothing uses the file).
    fn no_corpus(&self, c: &Checked<'_>) -> Outcome {
        let digest = policy::digest(PolicySpec::base().text(c.worktree).as_bytes());
        let mut out = Map::new();
        out.insert("ok".into(), json!(false));
        out.insert("refused".into(), json!(NO_CORPUS));
        self.stamp(out, &digest)
    }

    fn run(&self, c: &Checked<'_>, run: RunArgs<'_>) -> Outcome {
        let spec = PolicySpec::for_run(&run.caps, &self.run_net_allow, self.run_net_allow_http);
        let (path, verified) = match self.ensure_policy(c, &spec) {
            Ok(p) => p,
            Err(outcome) => return outcome,
        };
        let mut args: Vec<OsString> = vec!["run".into(), "--policy".into(), path.into()];
        if let Some(j) = run.args_json {
            args.push("--args-json".into());
            args.push(j.into());
        }
        args.push("--".into());
        args.push(run.path.into());
        if !run.argv.is_empty() {
            args.push("--".into());
            args.extend(run.argv.iter().map(OsString::from));
        }
        let done = match process::run(self.spec(c, args, run.stdin.as_bytes().to_vec())) {
            Ok(d) => d,
            // Waiting for the started child failed: the program may have run to its end (its
            // writes made), so the handler cannot say it did not complete.
            Err(e @ process::Failure::Wait(_)) => {
                return Outcome::indeterminate(format!(
                    "broker: {} indeterminate: the program was started, then ailang run {e}; it may have run",
                    c.effect
                ))
            }
            Err(e) => {
                let why = self.child_failed("ailang run", &e);
                return Outcome::failed(format!("broker: {} failed: {why}", c.effect));
            }
        };
        let Some(envelope) = run::parse(done.status.code(), &done.stdout, &done.stderr) else {
            // The agent's message is the contract's; the operator's log says what ailang said
            // (a run past `memoryMiB` ends here, with the runtime's out-of-memory error).
            self.host.log(
                LogLevel::Warn,
                &format!(
                    "ailang: run in episode \"{}\" produced no recognised outcome envelope ({}); stderr: {}",
                    c.episode,
                    done.rc_text(),
                    // The excerpt is 200 characters: decode only the start of 8 MiB.
                    excerpt(&String::from_utf8_lossy(
                        &done.stderr[..done.stderr.len().min(4096)]
                    ))
                ),
            );
            return Outcome::failed(format!(
                "broker: ailang run produced no recognised outcome envelope ({})",
                done.rc_text()
            ));
        };
        let mut out = Map::new();
        if !envelope.admitted {
            // Outcome (c): the program never ran. `ok: false` makes the call the refusal it is
            // (the daemon classifies it `refused`, not a successful run).
            out.insert("ok".into(), json!(false));
            out.insert("refused".into(), json!(not_admitted(&envelope.decision)));
        }
        out.insert("admitted".into(), json!(envelope.admitted));
        out.insert("exit_code".into(), json!(envelope.exit_code));
        out.insert("decision".into(), envelope.decision);
        out.insert("limit".into(), envelope.limit);
        out.insert(
            "policy".into(),
            json!({
                "digest": verified.digest,
                "security_mode": spec.security_mode(),
                "caps": spec.caps,
                "net_allow": spec.net_allow,
            }),
        );
        match with_streams(out, &done.stdout, &done.stderr) {
            Ok(out) => Outcome::ok(out),
            Err(why) => Outcome::failed(format!("broker: {} failed: {why}", c.effect)),
        }
    }
}

/// The `refused` text of a run `ailang` refused before it started (outcome (c)), from its
/// decision: the message (at most 200 characters) and what the policy lacks.
fn not_admitted(decision: &Value) -> String {
    let message = decision
        .get("message")
        .and_then(Value::as_str)
        .map(excerpt)
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| "no reason given".to_string());
    let missing: Vec<&str> = decision
        .get("missing_from_policy")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .take(CAPS.len())
                .collect()
        })
        .unwrap_or_default();
    let missing = if missing.is_empty() {
        String::new()
    } else {
        format!(
            " (missing from the policy: {})",
            excerpt(&missing.join(", "))
        )
    };
    format!("ailang run refused the program before it ran: {message}{missing}; see decision")
}

/// A run's result: `out` (the envelope) plus the two streams, each whole or cut so that the
/// result fits [`cut::RESULT_CAP`] by construction (stdout keeps its start, stderr its end,
/// `cut` says how many bytes of each were left out). Nothing larger than the result is built.
fn with_streams(mut out: JsonObject, stdout: &[u8], stderr: &[u8]) -> Result<JsonObject, String> {
    let envelope = serde_json::to_string(&out).map_or(usize::MAX, |t| t.len());
    if envelope > cut::ENVELOPE_MAX {
        return Err(format!(
            "ailang run's outcome envelope is {envelope} bytes as JSON; at most {} fit a result",
            cut::ENVELOPE_MAX
        ));
    }
    let room = cut::RESULT_CAP - cut::RESERVED - envelope;
    let (out_len, err_len) = (cut::quoted_len(stdout), cut::quoted_len(stderr));
    let (out_share, err_share) = cut::shares(out_len, err_len, room);
    let stream = |bytes: &[u8], len: usize, share: usize, end: Keep| {
        if len <= share {
            cut::Kept {
                text: String::from_utf8_lossy(bytes).into_owned(),
                dropped: 0,
            }
        } else {
            cut::keep(bytes, share, end)
        }
    };
    let kept_out = stream(stdout, out_len, out_share, Keep::Start);
    let kept_err = stream(stderr, err_len, err_share, Keep::End);
    if kept_out.dropped + kept_err.dropped > 0 {
        out.insert(
            "cut".into(),
            json!({"stdout": kept_out.dropped, "stderr": kept_err.dropped}),
        );
    }
    out.insert("stdout".into(), Value::String(kept_out.text));
    out.insert("stderr".into(), Value::String(kept_err.text));
    Ok(out)
}

/// ailang-run's checked payload.
struct RunArgs<'a> {
    path: &'a str,
    args_json: Option<&'a str>,
    stdin: &'a str,
    argv: Vec<&'a str>,
    caps: Vec<&'a str>,
}

/// Payload field checks; `Err` is the finished `failed` outcome.
struct Fields<'a> {
    request: CheckedRequest<'a>,
}

impl<'a> Fields<'a> {
    fn refused(&self, why: String) -> Outcome {
        self.request.refused(why)
    }

    fn admit(&self, keys: &[&str]) -> Result<(), Outcome> {
        match self
            .request
            .payload
            .keys()
            .find(|k| !keys.contains(&k.as_str()))
        {
            Some(k) => Err(self.refused(format!(
                "payload key {} is not admitted by op {}",
                quote(k),
                quote(self.request.op)
            ))),
            None => Ok(()),
        }
    }

    fn string(&self, key: &str, required: bool) -> Result<Option<&'a str>, Outcome> {
        if required {
            self.request.string(key).map(Some)
        } else {
            self.request.optional_string(key)
        }
    }

    fn strings(&self, key: &str) -> Result<Option<Vec<&'a str>>, Outcome> {
        let bad = || {
            self.refused(format!(
                "payload key \"{key}\" of op {} must be an array of strings",
                quote(self.request.op)
            ))
        };
        match self.request.payload.get(key) {
            None => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().ok_or_else(bad))
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(_) => Err(bad()),
        }
    }

    fn string_map(&self, key: &str) -> Result<Option<&'a JsonObject>, Outcome> {
        match self.request.payload.get(key) {
            None => Ok(None),
            Some(Value::Object(m)) if m.values().all(Value::is_string) => Ok(Some(m)),
            Some(_) => Err(self.refused(format!(
                "payload key \"{key}\" of op {} must be an object of string values",
                quote(self.request.op)
            ))),
        }
    }

    /// The payload of a policy-tool op (check, discover, cli): admitted keys and their types.
    fn tool_args(&self, kind: Kind) -> Result<(), Outcome> {
        match (kind, self.request.op) {
            (Kind::Check, _) => {
                self.admit(&["op", "path"])?;
                self.string("path", true).map(drop)
            }
            (Kind::Discover, "builtins_list") => self.admit(&["op"]),
            (Kind::Discover, _) => {
                self.admit(&["op", "query"])?;
                self.string("query", true).map(drop)
            }
            _ => {
                self.admit(&["op", "path", "module", "query", "package", "flags"])?;
                for key in ["path", "module", "query", "package"] {
                    self.string(key, false)?;
                }
                match self.string_map("flags")?.and_then(flag_refusal) {
                    Some(why) => Err(self.refused(why)),
                    None => Ok(()),
                }
            }
        }
    }

    /// ailang-run's arguments, re-checked with the plan's rules and texts.
    fn run_args(&self) -> Result<RunArgs<'a>, Outcome> {
        self.admit(&["op", "path", "args_json", "stdin", "argv", "caps"])?;
        let path = self.string("path", true)?.unwrap_or_default();
        let args_json = self.string("args_json", false)?;
        let stdin = self.string("stdin", false)?.unwrap_or("");
        let argv = self.strings("argv")?.unwrap_or_default();
        let caps = self.strings("caps")?.unwrap_or_else(|| vec!["IO", "FS"]);
        if path.is_empty() || path.contains('\0') {
            return Err(self.refused("payload key \"path\" is empty or contains a NUL byte".into()));
        }
        if args_json.is_some_and(|j| serde_json::from_str::<Value>(j).is_err()) {
            return Err(self.refused("argument \"args_json\" must be a string holding JSON".into()));
        }
        if let Some(why) = args_json.and_then(args_json_refusal) {
            return Err(self.refused(why));
        }
        if stdin.len() > MAX_STDIN {
            return Err(self.refused(format!(
                "argument \"stdin\" is {} bytes; the limit is {MAX_STDIN}",
                stdin.len()
            )));
        }
        if argv.len() > MAX_ARGV_ITEMS {
            return Err(self.refused(format!(
                "argument \"argv\" has {} items; the limit is {MAX_ARGV_ITEMS}",
                argv.len()
            )));
        }
        for item in &argv {
            if item.len() > MAX_ARGV_ITEM {
                return Err(self.refused(format!(
                    "an argv item is {} bytes; the limit is {MAX_ARGV_ITEM}",
                    item.len()
                )));
            }
            if item.contains('\0') {
                return Err(self.refused("an argv item contains a NUL byte".into()));
            }
        }
        for (i, cap) in caps.iter().enumerate() {
            if !CAPS.contains(cap) {
                return Err(self.refused(format!(
                    "unknown capability {}; caps admits only: Declassify, Env, FS, IO, Net",
                    quote(cap)
                )));
            }
            if caps[..i].contains(cap) {
                return Err(self.refused(format!("capability {} is listed twice", quote(cap))));
            }
        }
        if caps.is_empty() {
            return Err(self.refused("argument \"caps\" names no capability".into()));
        }
        if caps.contains(&"Env") && caps.contains(&"Net") {
            return Err(self
                .refused("caps names both Env and Net; one run takes at most one of them".into()));
        }
        // The grant that pays must be the one the caps call for: otherwise a session holding
        // only Ailang.Run could run Env or Net programs through another transition's plan.
        let expected = if caps.contains(&"Env") {
            RUN_ENV
        } else if caps.contains(&"Net") {
            RUN_NET
        } else {
            RUN
        };
        if expected != self.request.effect {
            return Err(self.refused(format!(
                "caps [{}] make this run the {expected} effect",
                caps.join(", ")
            )));
        }
        Ok(RunArgs {
            path,
            args_json,
            stdin,
            argv,
            caps,
        })
    }
}

impl AilangHandler {
    /// Why the operator's gates stop a run with these caps, if they do (nothing runs). The
    /// preflight declines such a run before anything is spent; the effect refuses it again.
    fn gate(&self, caps: &[&str]) -> Option<String> {
        for cap in CAPS.iter().filter(|c| caps.contains(c)) {
            if !matches!(*cap, "IO" | "FS") && !self.run_allow_caps.contains(cap) {
                return Some(format!(
                    "capability \"{cap}\" is not enabled by the operator (ailang config runAllowCaps)"
                ));
            }
        }
        if caps.contains(&"Net") && self.run_net_allow.is_empty() {
            return Some(
                "Net names no reachable host:port (ailang config runNetAllow)".to_string(),
            );
        }
        None
    }

    /// Why the request is declined before anything is spent, if it is: a path argument the
    /// binary may not see, a value it would read as an option, an ailang-cli flag key it may
    /// not get, an examples op without a corpus, an `args_json` too large to start the run, an
    /// operator gate. `execute` refuses each of them again (the examples op with its stamped
    /// answer).
    fn declined(&self, request: &Request) -> Option<String> {
        // Walked beneath the opened worktree (`/proc/self/fd/N`), as the effect walks: a walk
        // from the worktree's full path would meet PATH_MAX sooner under a long workspace root
        // and refuse a link the effect accepts. One that cannot be opened is judged by its
        // path here and fails in the effect.
        let opened = request
            .worktree
            .as_deref()
            .filter(|w| Path::new(w).is_absolute())
            .and_then(|w| handler_kit::worktree::open(Path::new(w)).ok());
        let by_fd = opened.as_ref().map(fd_path);
        let worktree = by_fd.as_deref().or(request.worktree.as_deref());
        if let Some(why) = self.argument_refusal(&request.payload, worktree) {
            return Some(why);
        }
        let (kind, rules) = handled(&request.effect).ok()?;
        if kind == Kind::Cli {
            // A flag that may not reach the binary is known before anything runs; flags that
            // are not an object of strings fail in `execute`, as they always have.
            if let Some(why) = match request.payload.get("flags") {
                Some(Value::Object(flags)) => flag_refusal(flags),
                _ => None,
            } {
                return Some(why);
            }
        }
        if matches!(kind, Kind::Cli | Kind::Discover) {
            // An examples op without a corpus is answered without running anything: known
            // now, so it is declined before its unit is spent.
            let op = request.payload.get("op").and_then(Value::as_str);
            return (op.is_some_and(|op| op.starts_with("examples_"))
                && self.examples_dir.is_none())
            .then(|| NO_CORPUS.to_string());
        }
        if kind != Kind::Run {
            return None;
        }
        if let Some(why) = request
            .payload
            .get("args_json")
            .and_then(Value::as_str)
            .and_then(args_json_refusal)
        {
            return Some(why);
        }
        // A payload the run's checks refuse fails in `execute`, as it always has.
        let checked = check(request, &rules).ok()?;
        let run = Fields { request: checked }.run_args().ok()?;
        self.gate(&run.caps)
    }

    /// Why an argument of `payload` may not reach the binary: a path argument that leads out
    /// of the worktree, into git's own data or to a hard-linked file ([`path_refusal`]), or a
    /// value the binary would read as an option ([`option_refusal`]).
    fn argument_refusal(&self, payload: &Value, worktree: Option<&str>) -> Option<String> {
        option_refusal(payload)
            .or_else(|| path_refusal_in(payload, worktree, self.allow_hard_links))
    }
}

/// Ailang.CLI's refusal of a `write` flag.
pub const WRITE_FLAG: &str =
    "flag \"write\" writes the worktree; Ailang.CLI never writes (use Workspace.Write)";

/// The refusal of the first key of ailang-cli's `flags` that may not reach the binary: the
/// `write` flag, however spelled (any case, dashes before it, blanks or `=value` after it:
/// Ailang.CLI never writes), or a key that is not a plain flag name (lower-case letters,
/// digits and `-`, not first). The policy-tool writes each flag as `--name=value`, so a key
/// such as `write=true` or `write ` would otherwise reach the binary as a flag no comparison
/// of whole names caught.
fn flag_refusal(flags: &JsonObject) -> Option<String> {
    flags.keys().find_map(|key| {
        let name = key.trim_start_matches('-');
        let name = name.split('=').next().unwrap_or(name).trim();
        if name.eq_ignore_ascii_case("write") {
            return Some(WRITE_FLAG.to_string());
        }
        let plain = key.bytes().next().is_some_and(|b| b != b'-')
            && key
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        (!plain).then(|| {
            format!(
                "flag {} is not a plain flag name (lower-case letters, digits and \"-\", not first); nothing ran",
                quote(key)
            )
        })
    })
}

/// The most `args_json` may hold, in bytes. It reaches `ailang run` as one argv string, which
/// Linux caps at 128 KiB (`MAX_ARG_STRLEN`): past that the run cannot even start. The limit
/// is stdin's, which carries the same kind of input.
pub const MAX_ARGS_JSON: usize = 65536;

/// The refusal of an `args_json` over [`MAX_ARGS_JSON`].
fn args_json_refusal(args_json: &str) -> Option<String> {
    (args_json.len() > MAX_ARGS_JSON).then(|| {
        format!(
            "argument \"args_json\" is {} bytes; the limit is {MAX_ARGS_JSON}",
            args_json.len()
        )
    })
}

/// The payload keys whose values reach the binary as words of its command line (the
/// policy-tool puts them there; flags go as `--name=value`).
const WORD_KEYS: [&str; 4] = ["path", "module", "query", "package"];

/// The refusal of the first value of [`WORD_KEYS`] that starts with `-`: the binary's command
/// line would take it as an option, not as the file, module or search it names. The plugin
/// cannot put `--` before it (the policy-tool builds that command line), so it never passes.
fn option_refusal(payload: &Value) -> Option<String> {
    WORD_KEYS.iter().find_map(|key| {
        let value = payload.get(*key)?.as_str()?;
        value.starts_with('-').then(|| {
            argument_refusal(
                key,
                value,
                "begins with \"-\", which the ailang command line would read as an option; nothing ran",
            )
        })
    })
}

/// A step of a call: its value, or the outcome that ends the call there.
type Step<T> = Result<T, Outcome>;

/// What a request that passed every check runs.
enum Task<'a> {
    /// ailang run, with its checked arguments.
    Run(RunArgs<'a>),
    /// One policy-tool op; `cli` for Ailang.CLI's (the summary's allowlist applies).
    PolicyTool { cli: bool },
}

/// The family of an effect this plugin handles, and the request checks of its ops.
fn handled(effect: &str) -> Step<(Kind, Rules<'static>)> {
    let unhandled = || {
        Outcome::failed(format!(
            "broker: the ailang plugin does not handle effect {}",
            quote(effect)
        ))
    };
    let kind = match effect {
        CHECK => Kind::Check,
        DISCOVER => Kind::Discover,
        CLI => Kind::Cli,
        RUN | RUN_ENV | RUN_NET => Kind::Run,
        _ => return Err(unhandled()),
    };
    let declared = handler_kit::declared!(effect).ok_or_else(unhandled)?;
    Ok((
        kind,
        Rules {
            ops: declared.ops,
            known_keys: &KNOWN_KEYS,
            quote: Quote::Json,
        },
    ))
}

/// The episode's name, when it is a valid one (it names the episode's policy file and cache).
fn check_episode(effect: &str, episode: &str) -> Step<()> {
    if !valid_episode(episode) {
        return Err(Outcome::failed(format!(
            "broker: {effect} refused: episode {} is not a valid episode name",
            quote(episode)
        )));
    }
    Ok(())
}

/// The worktree, opened once without following a symlink at its place
/// (`handler_kit::worktree::open`): the path arguments are walked beneath this descriptor and
/// every child starts in it, so a worktree swapped for a symlink after the daemon checked it
/// fails the call instead of leading the binary elsewhere.
fn opened_worktree(effect: &str, worktree: &str) -> Step<Arc<OwnedFd>> {
    handler_kit::worktree::open(Path::new(worktree))
        .map(Arc::new)
        .map_err(|e| e.outcome(effect))
}

/// A path that names the directory `dir` holds, whatever became of its own path since:
/// `/proc/self/fd/N`.
fn fd_path(dir: &OwnedFd) -> String {
    format!("/proc/self/fd/{}", dir.as_raw_fd())
}

/// Where the opened worktree is now, with symbolic links resolved (for the overlap checks).
fn resolved_worktree(effect: &str, dir: &OwnedFd) -> Step<PathBuf> {
    fs::read_link(fd_path(dir)).map_err(|e| {
        Outcome::failed(format!(
            "broker: {effect} failed: the episode's worktree cannot be resolved: {}",
            errno_text(&e)
        ))
    })
}

/// The effect's time limit: [`HARD_CAP`], or the request's deadline (`0`: none) less
/// [`ANSWER_MARGIN`] when that is shorter; and how long after its start the handler must be
/// answering at the latest (half the margin before the deadline).
fn time_budget(deadline_ms: u64) -> (Duration, Option<Duration>) {
    match deadline_ms {
        0 => (HARD_CAP, None),
        ms => {
            let deadline = Duration::from_millis(ms);
            let margin = ANSWER_MARGIN.min(deadline / 4);
            (HARD_CAP.min(deadline - margin), Some(deadline - margin / 2))
        }
    }
}

impl AilangHandler {
    /// The job a request asks for, step by step; each step may end it early with its outcome.
    fn job<'r>(&self, request: &'r Request, started: Instant) -> Step<(Checked<'r>, Task<'r>)> {
        let effect = request.effect.as_str();
        let (kind, rules) = handled(effect)?;
        let checked = check(request, &rules)?;
        let worktree = checked.worktree()?;
        check_episode(effect, &request.episode)?;
        let dir = opened_worktree(effect, worktree)?;
        // The preflight declined these; a daemon that skips the preflight still runs nothing,
        // and a link planted since is seen here, beneath the worktree the child will run in.
        if let Some(why) = self.argument_refusal(&request.payload, Some(&fd_path(&dir))) {
            return Err(checked.refused(why));
        }
        // Per-op payload checks (a payload the plan should never have built is a failure),
        // then the operator gates: all before anything runs.
        let task = self.task(kind, checked)?;
        let canonical = resolved_worktree(effect, &dir)?;
        self.apart_from_worktree(effect, &canonical)?;
        let (budget, answer_by) = time_budget(request.deadline_ms);
        let c = Checked {
            effect,
            op: checked.op,
            payload: checked.payload,
            episode: &request.episode,
            worktree,
            dir,
            deadline: started + budget,
            limit: budget,
            answer_by: answer_by.map(|d| started + d),
        };
        self.corpus_configured(&c)?;
        Ok((c, task))
    }

    /// What the request runs, once its payload passed the op's checks and a run's caps the
    /// operator's gates.
    fn task<'r>(&self, kind: Kind, checked: CheckedRequest<'r>) -> Step<Task<'r>> {
        let fields = Fields { request: checked };
        match kind {
            Kind::Run => {
                let run = fields.run_args()?;
                match self.gate(&run.caps) {
                    Some(why) => Err(checked.refused(why)),
                    None => Ok(Task::Run(run)),
                }
            }
            _ => {
                fields.tool_args(kind)?;
                Ok(Task::PolicyTool {
                    cli: kind == Kind::Cli,
                })
            }
        }
    }

    /// Neither the stateDir nor the examples corpus overlaps the resolved worktree.
    fn apart_from_worktree(&self, effect: &str, canonical: &Path) -> Step<()> {
        // An agent can write its worktree: a policy file, cache or corpus inside it would
        // let the agent rewrite its own rules.
        if overlaps(&self.state_dir, canonical) {
            return Err(Outcome::failed(format!(
                "broker: {effect} refused: the ailang plugin's stateDir overlaps the episode's worktree; an agent could rewrite its own policy"
            )));
        }
        if self
            .examples_dir
            .as_deref()
            .is_some_and(|d| overlaps(d, canonical))
        {
            return Err(Outcome::failed(format!(
                "broker: {effect} refused: the examples corpus overlaps the episode's worktree"
            )));
        }
        Ok(())
    }

    /// An examples op needs the corpus: without one it ends with the stamped refusal.
    fn corpus_configured(&self, c: &Checked<'_>) -> Step<()> {
        if c.op.starts_with("examples_") && self.examples_dir.is_none() {
            return Err(self.no_corpus(c));
        }
        Ok(())
    }
}

/// The payload keys that name a file or a directory of the worktree to the binary.
const PATH_KEYS: [&str; 3] = ["path", "module", "package"];

/// Walks of one path argument while the worktree keeps changing under it.
const RESOLVE_ATTEMPTS: usize = 3;

/// What a path argument in git's own data is told (the Workspace plugin's rule and words): the
/// binary would read it and show it in its answer (a check's diagnostics, an op's output). This
/// only covers the arguments: a program run with `FS` can still `readFile` them, which the
/// binary's policy cannot deny.
fn git_refusal(key: &str, path: &str) -> Option<String> {
    let named = git_component(path)?;
    Some(argument_refusal(
        key,
        path,
        &named_like_git(named, &quote(named), GIT_UNREAD),
    ))
}

fn argument_refusal(key: &str, path: &str, why: &str) -> String {
    format!("argument {} {}: {why}", quote(key), quote(path))
}

/// What a path argument is told when the walk could not finish (a chain whose expansion is too
/// long for the look, a loop, a directory that cannot be read): nothing vouches for where the
/// binary, which resolves the path again, would be led, so it never sees the argument.
fn unchecked(key: &str, path: &str, why: &str) -> String {
    argument_refusal(
        key,
        path,
        &format!("path {} cannot be checked: {why}; nothing ran", quote(path)),
    )
}

/// What a path argument with a `..` segment is told. The walk resolves `..` as the kernel
/// does (after the name before it, a symlink's target included), but the binary may shorten
/// the path as text first (Go's `filepath.Clean`): `missing/../lnk/x` fails the kernel at
/// `missing` and is `lnk/x` to the binary, `lnk/../../x` stays inside by the kernel and is
/// `../x` as text. No single walk vouches for both readings, so none is admitted; the plans
/// refuse `..` in `path` and `package` already.
pub const DOT_DOT: &str = "a \"..\" segment is not admitted in a path argument (the binary may shorten the path as text, not as the kernel resolves it); nothing ran";

/// Why a path argument may not reach the binary, if it may not: in git's own data as spelled,
/// holding a `..` segment ([`DOT_DOT`]), or, resolved beneath the worktree the way the
/// Workspace plugin resolves its paths (`handler_kit::beneath`: each symlink read, not
/// followed), leading out of the worktree (absolute, a link to another episode or the host,
/// a link that climbs) or into git's own data,
/// or naming a regular file with more than one hard link (unless `hard_links`), which can be
/// a file outside the worktree, or naming something that is neither a regular file nor a
/// directory (a FIFO, a socket, a device). The binary follows symlinks, so this is the check that keeps
/// `lnk -> ../other-episode` from being read. The walk fails closed: a path it cannot finish
/// is refused, all but a missing name (the binary's to answer: with no `..` after it, nothing
/// beneath a missing name exists, by the kernel's reading or the text's).
fn path_refusal(
    worktree: Option<&Path>,
    hard_links: bool,
    key: &str,
    path: &str,
) -> Option<String> {
    if let Some(why) = git_refusal(key, path) {
        return Some(why);
    }
    if path.split('/').any(|segment| segment == "..") {
        return Some(argument_refusal(key, path, DOT_DOT));
    }
    let worktree = worktree?;
    let escapes = || {
        argument_refusal(
            key,
            path,
            &format!("path {} escapes sandbox \"<worktree>\"", quote(path)),
        )
    };
    for _ in 0..RESOLVE_ATTEMPTS {
        let walked = match beneath::walk(&HostDir(worktree), path) {
            Ok(walked) => walked,
            Err(WalkError::Escape) => return Some(escapes()),
            Err(WalkError::Changed) => continue,
            // An empty link target is ENOENT to the kernel too: a missing name.
            Err(WalkError::EmptyLink) => return None,
            Err(WalkError::Io(e)) if e.kind() == io::ErrorKind::NotFound => return None,
            Err(WalkError::TooManyLinks) => {
                let loop_ = io::Error::from_raw_os_error(libc::ELOOP);
                return Some(unchecked(key, path, &errno_text(&loop_)));
            }
            Err(WalkError::Io(e)) => return Some(unchecked(key, path, &errno_text(&e))),
            Err(WalkError::TooLong) => {
                return Some(argument_refusal(
                    key,
                    path,
                    &format!("{}; nothing ran", beneath::TOO_LONG),
                ))
            }
            // Whatever else the walk may come to say: it did not finish, so nothing vouches.
            #[allow(unreachable_patterns)]
            Err(_) => {
                return Some(unchecked(
                    key,
                    path,
                    "it could not be resolved beneath the worktree",
                ))
            }
        };
        let reached = walked.reached();
        if let Some(named) = git_component(&reached) {
            let said = named_like_git(named, &quote(named), GIT_UNREAD);
            return Some(argument_refusal(key, path, &said));
        }
        if beneath::lexical(&reached).is_none() {
            return Some(escapes());
        }
        // A FIFO blocks the binary until the effect's time limit, a device feeds it without
        // end: refused in the workspace plugin's words, as its reads refuse them.
        if let End::Entry {
            kind: EntryKind::Other,
            rest,
            ..
        } = &walked.end
        {
            if rest.is_empty() {
                return Some(argument_refusal(
                    key,
                    path,
                    &format!("{path} is not a regular file"),
                ));
            }
        }
        if hard_links {
            return None;
        }
        return match &walked.end {
            End::Entry {
                kind: EntryKind::File { .. },
                rest,
                ..
            } if rest.is_empty() => hard_link_refusal(worktree, key, path, &reached),
            _ => None,
        };
    }
    Some(argument_refusal(
        key,
        path,
        "the path kept changing while it was being resolved; nothing ran, try again",
    ))
}

/// The Workspace plugin's hard-link rule for the regular file a path argument reached (at
/// `reached`, canonical beneath the worktree): a second link can name a file outside the
/// worktree (or in git's own data), which no walk of names can see.
fn hard_link_refusal(worktree: &Path, key: &str, path: &str, reached: &str) -> Option<String> {
    match file_links(worktree, reached) {
        Ok(Some(links)) if links > 1 => Some(argument_refusal(
            key,
            path,
            &format!(
                "{} (the operator can allow them with allowHardLinks)",
                handler_kit::protect::hard_linked(links, handler_kit::protect::READS_ONE_LINK)
            ),
        )),
        Ok(_) => None,
        // Gone since the walk: the binary's to answer, as a missing name is.
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => Some(unchecked(key, path, &errno_text(&e))),
    }
}

/// The hard links of the regular file at `reached` beneath `worktree` (`None`: not a regular
/// file), looked at relative to the opened worktree when the two paths together pass
/// `PATH_MAX`, as the walk that reached it looks.
fn file_links(worktree: &Path, reached: &str) -> io::Result<Option<u64>> {
    match fs::symlink_metadata(worktree.join(reached)) {
        Ok(md) => return Ok(md.is_file().then(|| md.nlink())),
        Err(e) if e.raw_os_error() != Some(libc::ENAMETOOLONG) => return Err(e),
        Err(_) => {}
    }
    let root = File::open(worktree)?;
    let rel =
        std::ffi::CString::new(reached).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: an all-zero `stat` is a valid value for fstatat to overwrite.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `root` is an open directory, `rel` NUL-terminated, `st` a valid out-pointer.
    let rc = unsafe {
        libc::fstatat(
            root.as_raw_fd(),
            rel.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((st.st_mode & libc::S_IFMT == libc::S_IFREG).then_some(st.st_nlink))
}

/// The refusal of the first path argument of `payload` that may not reach the binary
/// ([`path_refusal`]); `worktree` is the bound one, when the request has an absolute one.
fn path_refusal_in(payload: &Value, worktree: Option<&str>, hard_links: bool) -> Option<String> {
    let worktree = worktree.map(Path::new).filter(|w| w.is_absolute());
    PATH_KEYS.iter().find_map(|key| {
        payload
            .get(*key)
            .and_then(Value::as_str)
            .and_then(|p| path_refusal(worktree, hard_links, key, p))
    })
}

impl EffectHandler for AilangHandler {
    /// A request the handler would refuse for its arguments or the operator's gates is declined
    /// before anything is spent ([`AilangHandler::declined`]).
    fn preflight(&self, request: &Request) -> Preflight {
        if let Some(e) = self.unrunnable() {
            // The operator's log names the file and the fix; the agent's answer names no host
            // path.
            self.host.log(
                LogLevel::Error,
                &format!(
                    "ailang: {} declined: the archived binary {} cannot be run: {e}; {RESTART}",
                    request.effect,
                    self.bin.display()
                ),
            );
            return Preflight::Decline(refusal(UNRUNNABLE.to_string()));
        }
        if let Some(digest) = self.archive_changed() {
            self.archive_changed_log(&request.effect, &digest, "declined");
            return Preflight::Decline(refusal(ARCHIVE_CHANGED.to_string()));
        }
        match self.declined(request) {
            Some(why) => Preflight::Decline(refusal(why)),
            None => Preflight::Proceed,
        }
    }

    fn execute(&self, request: Request) -> Outcome {
        let started = Instant::now();
        // Checked again for a daemon that skips the preflight, and for a change since it.
        if let Some(digest) = self.archive_changed() {
            self.archive_changed_log(&request.effect, &digest, "failed");
            return Outcome::failed(format!(
                "broker: {} failed: {ARCHIVE_CHANGED}; nothing ran",
                request.effect
            ));
        }
        match self.job(&request, started) {
            Ok((c, Task::Run(run))) => self.run(&c, run),
            Ok((c, Task::PolicyTool { cli })) => self.policy_tool_op(&c, cli),
            Err(ended) => ended,
        }
    }

    fn finish(&self, name: &str, input: FinishInput) -> Result<JsonObject, String> {
        match name {
            finish::CHECK_REPORT => Ok(finish::check_report(&input)),
            finish::BUILTINS_INVENTORY => Ok(finish::builtins_inventory(&input)),
            other => Err(format!("no finish function {other:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(limit: Value) -> JsonObject {
        let mut out = Map::new();
        out.insert("admitted".into(), json!(true));
        out.insert("limit".into(), limit);
        out
    }

    #[test]
    fn streams_that_fit_are_whole_and_carry_no_cut() {
        let out = with_streams(envelope(Value::Null), b"hi\n\xff", b"policy: {}\n").unwrap();
        assert_eq!(out["stdout"], "hi\n\u{fffd}");
        assert_eq!(out["stderr"], "policy: {}\n");
        assert!(!out.contains_key("cut"));
    }

    #[test]
    fn a_forged_limit_too_large_for_a_result_fails_instead_of_crowding_out_the_streams() {
        let big = json!({"reason": "x".repeat(cut::ENVELOPE_MAX)});
        let err = with_streams(envelope(big), b"", b"").unwrap_err();
        assert!(
            err.starts_with("ailang run's outcome envelope is 65")
                && err.ends_with("bytes as JSON; at most 65536 fit a result"),
            "{err}"
        );
    }

    #[test]
    fn a_result_with_escaped_output_stays_under_the_cap_whatever_the_streams_hold() {
        let nul = vec![0u8; 8 << 20];
        let out = with_streams(envelope(Value::Null), &nul, b"").unwrap();
        // The room, plus the two stream keys and the cut report (inside what is reserved).
        let len = serde_json::to_string(&out).unwrap().len();
        let room = cut::RESULT_CAP - cut::RESERVED;
        assert!(len <= room + 100, "{len}");
        // stderr needed nothing: stdout had all the room.
        assert!(len > room, "{len}");
        let kept = out["stdout"].as_str().unwrap().len();
        assert_eq!(out["cut"], json!({"stdout": (8 << 20) - kept, "stderr": 0}));
    }
}
