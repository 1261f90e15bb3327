//! `Workspace.Read` and `Workspace.Write`: request checks, the three ops, and
//! the output objects.

use std::io;
use std::path::Path;

use handler_kit::output::Stamp;
use handler_kit::protect::{git_component, named_like_git, unshown_char, GIT_UNREAD};
use handler_kit::request::{check, Checked, Quote, Rules};
use handler_kit::serde_json::{json, Map, Value};
use handler_kit::{EffectHandler, Host, LogLevel, Outcome, Preflight, Request};

use crate::config::{Policy, MAX_PATH_BYTES};
use crate::sandbox::{
    errno_text, lexical, PathError, ReadRules, Sandbox, Target, WriteError, TEMP_PREFIX,
};
use crate::tool_ref;

handler_kit::effect! {
    /// Read one UTF-8 file of the worktree.
    pub const READ = "Workspace.Read" { class: Read, ops: &["read"] }
    /// Atomically write a file, or replace one unique occurrence of a text in it.
    pub const WRITE = "Workspace.Write" { class: Write, ops: &["write", "edit"] }
}

/// The payload keys this handler reads; a key that differs from one of them
/// only by case is refused (an alias could otherwise smuggle a second value
/// past a plan that checked the first).
const KNOWN_KEYS: [&str; 5] = ["op", "path", "content", "old_text", "new_text"];

/// Attempts when the tree changes between check and use.
const ATTEMPTS: usize = 3;

/// What writes and edits say of a path in git's own data.
const GIT_READ_ONLY: &str = ".git/ is read-only to the lane's tools";

/// The `world` block the daemon adds to a read's result, as it appears in the result's
/// canonical JSON (`world` sorts last): one effect with status `ok`, two 71-byte refs.
const WORLD_BLOCK: &str = concat!(
    r#","world":{"effects":[{"id":"e1","record":"sha256:"#,
    "0000000000000000000000000000000000000000000000000000000000000000",
    r#"","status":"ok"}],"plan":"sha256:"#,
    "0000000000000000000000000000000000000000000000000000000000000000",
    r#""}"#
);

// Bytes a text takes as a JSON string in canonical JSON, quotes included.
use handler_kit::dialect::quote::json_string_len;

/// The handler object: an effective policy and the identity it stamps.
pub struct WorkspaceHandler {
    policy: Policy,
    stamp: Stamp,
    host: Host,
}

impl WorkspaceHandler {
    /// A handler enforcing `policy`.
    pub fn new(policy: Policy, host: Host) -> WorkspaceHandler {
        WorkspaceHandler {
            stamp: Stamp::new(tool_ref().0.clone(), policy.digest()),
            policy,
            host,
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

    /// `{"ok":false,"refused":…}`: the effect ran and said no.
    fn refuse(&self, message: String) -> Outcome {
        self.stamp.refuse(message)
    }

    fn success(&self, extra: &[(&str, Value)]) -> Outcome {
        let mut fields = Map::new();
        fields.insert("ok".into(), json!(true));
        for (k, v) in extra {
            fields.insert((*k).to_string(), v.clone());
        }
        self.stamp.ok(fields)
    }

    /// The refusal for a path problem, in the reference's words. A filesystem that cannot take
    /// the operation (full, read-only, failing) is not the agent's to fix by another path or
    /// content: that is a failed effect, said as what it is, not an `openat` refusal.
    fn path_refusal(&self, op: &str, path: &str, error: PathError) -> Outcome {
        if let PathError::Io(e) = &error {
            if matches!(
                e.raw_os_error(),
                Some(libc::ENOSPC | libc::EDQUOT | libc::EROFS | libc::EIO)
            ) {
                let message = format!(
                    "{op} {path}: {}: the worktree's filesystem cannot take it; nothing was changed",
                    errno_text(e)
                );
                self.host
                    .log(LogLevel::Warn, &format!("workspace: {message}"));
                return Outcome::failed(message);
            }
        }
        let message = match error {
            PathError::Escape => {
                format!("{op} {path}: path \"{path}\" escapes sandbox \"<worktree>\"")
            }
            PathError::IsADirectory => format!("{op} {path}: {path} is a directory, not a file"),
            // The ending that says "a directory" is the path's own, or a symlink's target's.
            PathError::EndsInSlash => match ["/", "/."].into_iter().rfind(|end| path.ends_with(end)) {
                Some(end) => format!(
                    "{op} {path}: a path ending in {end} names a directory, and nothing is there; give the file's path, without the trailing {end}"
                ),
                None => format!(
                    "{op} {path}: the path leads through a symbolic link whose target ends in / or /., which names a directory, and nothing is there; give the file's path"
                ),
            },
            PathError::NotAFile => format!("{op} {path}: {path} is not a regular file"),
            PathError::TooLong => format!("{op} {path}: {}", handler_kit::beneath::TOO_LONG),
            PathError::Changed => format!(
                "{op} {path}: the path kept changing while it was being opened; nothing was done, try again"
            ),
            PathError::HardLinked(links) => format!(
                "{op} {path}: {} (the operator can allow them with allowHardLinks)",
                handler_kit::protect::hard_linked(links, handler_kit::protect::READS_ONE_LINK)
            ),
            PathError::TooLarge(size) => self.too_large(op, path, size),
            PathError::Refused(message) => message,
            PathError::Modified => format!(
                "{op} {path}: the file changed while it was being edited (something else wrote, replaced or removed it after it was read); nothing was changed: read it again and retry"
            ),
            PathError::Io(e) => format!("{op} {path}: openat {path}: {}", errno_text(&e)),
        };
        self.refuse(message)
    }

    /// A file over the op's limit, by its size.
    fn too_large(&self, op: &str, path: &str, size: u64) -> String {
        let limit = if op == "read" {
            self.policy.max_read_bytes
        } else {
            self.policy.max_write_bytes
        };
        format!("{op} {path}: file is {size} bytes; the limit is {limit}")
    }

    /// A path no file can have: empty, too long for the worktree's own tools (see
    /// [`MAX_PATH_BYTES`]), or holding a NUL byte; or a new file's name that would not show as
    /// itself ([`unshown_char`]). The length is checked first and its text
    /// gives the length, not the path: an attacker's path may be megabytes long, NUL bytes
    /// included, and the answer is committed to the log.
    fn unusable_path(op: &str, path: &str) -> Option<String> {
        if path.is_empty() {
            Some(format!("{op}: the path is empty"))
        } else if path.len() > MAX_PATH_BYTES {
            Some(format!(
                "{op}: the path is {} bytes; the limit is {MAX_PATH_BYTES}",
                path.len()
            ))
        } else if path.contains('\0') {
            Some(format!("{op} {path}: the path contains a NUL byte"))
        } else if let Some(message) = Self::temporary_name(op, path, path.rsplit('/').next()) {
            Some(message)
        } else {
            // A name made here can pass for another in every listing, diff and review (the
            // operator's included); names already in the worktree are still read and edited.
            Self::unshown_in_new_name(op, path).map(|c| {
                format!(
                    "write {path:?}: the path holds U+{:04X}, a character that is not shown as itself (a control, bidi or invisible character); a new file's name may hold none",
                    c as u32
                )
            })
        }
    }

    /// The refusal of a write or edit whose file is `name`d like the temporary files of a write
    /// (`.worldd-tmp-…`): the first write into its directory after a start sweeps such names
    /// away as a killed write's debris, so the file would be reported written, then be gone.
    /// Reads of them are allowed: such a file is in the worktree like any other.
    fn temporary_name(op: &str, path: &str, name: Option<&str>) -> Option<String> {
        let name = name?;
        // A path named like `.git` is refused as that, the more useful answer.
        let temporary = name.starts_with(TEMP_PREFIX) && git_component(path).is_none();
        (op != "read" && temporary).then(|| {
            format!(
                "{op} {path}: \"{name}\" is named like the workspace's temporary files ({TEMP_PREFIX}…), which it removes as what a killed write left; give the file another name"
            )
        })
    }

    /// A write's new file and new directories, where the path resolves (a dangling symlink can
    /// name them): the first character of their names that is not shown as itself, in the
    /// words of [`Self::unusable_path`]. Nothing when the file exists (it is not made).
    fn unshown_where_resolved(path: &str, target: &Target) -> Option<String> {
        if target.exists() {
            return None;
        }
        let made = target
            .missing
            .iter()
            .chain(std::iter::once(&target.name))
            .find_map(|c| unshown_char(&c.to_string_lossy()))?;
        Some(format!(
            "write {path:?}: the path resolves to {:?}, which holds U+{:04X}, a character that is not shown as itself (a control, bidi or invisible character); a new file's name may hold none",
            target.canonical(),
            made as u32
        ))
    }

    /// The first character of a write's path that is not shown as itself, unless the path is
    /// named like `.git` (refused as that, the more useful answer).
    fn unshown_in_new_name(op: &str, path: &str) -> Option<char> {
        if op != "write" || git_component(path).is_some() {
            return None;
        }
        unshown_char(path)
    }

    /// Why a write of `content` is over the write limit, if it is.
    fn oversized_write(&self, path: &str, content: &str) -> Option<String> {
        let size = content.len() as u64;
        (size > self.policy.max_write_bytes).then(|| {
            format!(
                "write {path}: content is {size} bytes; the limit is {}",
                self.policy.max_write_bytes
            )
        })
    }

    /// The request checks every op shares (effect, scope, op allowlist, keys).
    fn checked<'r>(&self, request: &'r Request) -> Result<Checked<'r>, Outcome> {
        let Some(effect) = handler_kit::declared!(&request.effect) else {
            return Err(Outcome::failed(format!(
                "broker: the workspace plugin does not handle effect \"{}\"",
                request.effect
            )));
        };
        let rules = Rules {
            ops: effect.ops,
            known_keys: &KNOWN_KEYS,
            quote: Quote::Plain,
        };
        check(request, &rules)
    }

    /// The `.git/` rule for one worktree-relative path (as requested or as resolved), in the
    /// op's words: every component is checked, after folding (NFKC, case folding), so a
    /// nested repository's `.git` and look-alikes such as `.GIT` count too. Reads refuse it
    /// as writes do: git's own data is not worktree content.
    fn git_rule(op: &str, path: &str, relative: &str) -> Option<String> {
        let named = git_component(relative)?;
        let rule = if op == "read" {
            GIT_UNREAD
        } else {
            GIT_READ_ONLY
        };
        let said = named_like_git(named, &format!("\"{named}\""), rule);
        Some(format!("{op} {path}: {said}"))
    }

    /// The `.git/` rule for a read's path *as requested*, before touching the file system
    /// (`a/../.git` is refused even when `a` does not exist). `..` above the root is left to
    /// the resolver, which calls it an escape.
    fn requested_read_rule(path: &str) -> Option<String> {
        lexical(path).and_then(|relative| Self::git_rule("read", path, &relative))
    }

    /// The `.git/` rule for where a read's path *resolves* (a symlink cannot launder git's
    /// data into a readable name).
    fn resolved_read_rule(path: &str, target: &Target) -> Option<String> {
        Self::git_rule("read", path, &target.canonical())
    }

    /// `.git/` and deny-glob rules for one worktree-relative path: every
    /// component is checked, after folding (NFKC, case folding).
    fn rule_for(&self, op: &str, path: &str, relative: &str) -> Option<Outcome> {
        if let Some(message) = Self::git_rule(op, path, relative) {
            return Some(self.refuse(message));
        }
        self.policy.denied_by(&[relative]).map(|glob| {
            self.refuse(format!(
                "{op} {path}: matches fs_deny_write \"{glob}\" \u{2014} read-only under this policy"
            ))
        })
    }

    /// The rules applied to the path *as requested*, before touching the file
    /// system (so `a/../.git/x` is refused even when `a` does not exist).
    /// `..` above the root is left to the resolver, which calls it an escape.
    fn requested_rule(&self, op: &str, path: &str) -> Option<Outcome> {
        lexical(path).and_then(|relative| self.rule_for(op, path, &relative))
    }

    /// The rules applied to where the path *resolves* (a symlink cannot
    /// launder a protected destination).
    fn resolved_rule(&self, op: &str, path: &str, target: &Target) -> Option<Outcome> {
        self.rule_for(op, path, &target.canonical())
    }

    fn read(&self, sandbox: &Sandbox, path: &str) -> Outcome {
        if let Some(message) = Self::requested_read_rule(path) {
            return self.refuse(message);
        }
        let rules = ReadRules {
            limit: self.policy.max_read_bytes,
            hard_links: self.policy.allow_hard_links,
        };
        let vet = |target: &Target| Self::resolved_read_rule(path, target);
        let content = match sandbox.read(path, rules, &vet) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(content) => content,
                Err(e) => return self.refuse(format!(
                    "read {path}: the file is not UTF-8 text (invalid byte at offset {}); this tool reads text files only",
                    e.utf8_error().valid_up_to()
                )),
            },
            Err(e) => return self.path_refusal("read", path, e),
        };
        // The limit bounds the result the agent receives, not the file: JSON escaping can
        // make a result six times the file's size. Preflight declines such a read before any
        // budget is spent; this check covers a file that grew in between, so an oversized
        // read is a refusal, never a result the coordinator must drop after the effect.
        if let Some(message) = self.oversized_result(path, &content) {
            return self.refuse(message);
        }
        self.success(&[("content", json!(content))])
    }

    /// Why a read of `content` would exceed the read limit, if it would.
    fn oversized_result(&self, path: &str, content: &str) -> Option<String> {
        let size = self.result_len(content);
        let limit = self.policy.max_read_bytes;
        // Said apart: a result over the limit with nothing escaped is the envelope's doing,
        // and an agent told "escaping" looks for characters that are not there.
        let file = content.len() as u64;
        let envelope = self.result_len("");
        let escaping = size - file - envelope;
        (size > limit).then(|| format!(
            "read {path}: the result would be {size} bytes: {file} of the file, {escaping} of JSON escaping and {envelope} of the result's other fields (ok, tool, policy_digest, world); the limit is {limit}, so a file of plain text can be read up to {} bytes",
            limit.saturating_sub(envelope)
        ))
    }

    /// A read's preflight: declines a path that resolves into git's own data (`.git/`), a file
    /// over the read limit, or one whose result would be. A file small enough that even
    /// six-byte escapes of every byte fit is not read at all.
    fn preflight_read(&self, sandbox: &Sandbox, path: &str) -> Preflight {
        let limit = self.policy.max_read_bytes;
        let rules = ReadRules {
            limit,
            hard_links: self.policy.allow_hard_links,
        };
        let always_fits = limit.saturating_sub(self.result_len("")) / 6;
        let vet = |target: &Target| Self::resolved_read_rule(path, target);
        match sandbox.read_if_larger(path, rules, always_fits, &vet) {
            Err(PathError::Refused(message)) => self.stamp.decline(message),
            Err(PathError::TooLarge(size)) => {
                self.stamp.decline(self.too_large("read", path, size))
            }
            Ok(Some(bytes)) => match std::str::from_utf8(&bytes)
                .ok()
                .and_then(|content| self.oversized_result(path, content))
            {
                Some(message) => self.stamp.decline(message),
                None => Preflight::Proceed,
            },
            // Everything else is the effect's to refuse, at its usual cost.
            Ok(None) | Err(_) => Preflight::Proceed,
        }
    }

    /// The bytes of a successful read's result as committed: the canonical JSON of
    /// `{content, ok, policy_digest, tool}` plus the daemon's `world` block.
    fn result_len(&self, content: &str) -> u64 {
        // `{"content":` + string + `,"ok":true,"policy_digest":` + string + `,"tool":` + string
        // + world block + `}`.
        let fixed = r#"{"content":,"ok":true,"policy_digest":,"tool":}"#.len() as u64;
        fixed
            + json_string_len(content)
            + json_string_len(self.policy_digest())
            + json_string_len(self.tool())
            + WORLD_BLOCK.len() as u64
    }

    fn write(&self, sandbox: &Sandbox, path: &str, content: &str) -> Outcome {
        if let Some(message) = self.oversized_write(path, content) {
            return self.refuse(message);
        }
        let size = content.len() as u64;
        if let Some(refusal) = self.requested_rule("write", path) {
            return refusal;
        }
        for _ in 0..ATTEMPTS {
            let target = match sandbox.resolve(path, true) {
                Ok(t) => t,
                // Swapped while it was walked: walk it again.
                Err(PathError::Changed) => continue,
                Err(e) => return self.path_refusal("write", path, e),
            };
            if let Some(refusal) = self.resolved_rule("write", path, &target) {
                return refusal;
            }
            if let Some(message) = Self::unshown_where_resolved(path, &target)
                .or_else(|| Self::temporary_name("write", path, target.name.to_str()))
            {
                return self.refuse(message);
            }
            match sandbox.write(&target, content.as_bytes()) {
                Ok(()) => return self.success(&[("bytes", json!(size))]),
                Err(WriteError::Before(PathError::Changed)) => continue,
                Err(WriteError::Before(e)) => return self.path_refusal("write", path, e),
                Err(WriteError::After(e)) => return self.unsynced("write", path, e),
                // Only an edit (a write over a file read) exchanges, and can strand a save or
                // see it moved away.
                Err(WriteError::Stranded { kept, cause }) => {
                    return self.stranded("write", path, &kept, &cause)
                }
                Err(WriteError::Displaced { was_at }) => {
                    return self.displaced("write", path, &was_at)
                }
            }
        }
        self.path_refusal("write", path, PathError::Changed)
    }

    fn edit(&self, sandbox: &Sandbox, path: &str, old_text: &str, new_text: &str) -> Outcome {
        if old_text.is_empty() {
            return self.refuse(format!(
                "edit {path}: old_text is empty; give the exact text to replace (to create or overwrite a file, write it whole instead of editing it)"
            ));
        }
        if let Some(refusal) = self.requested_rule("edit", path) {
            return refusal;
        }
        for _ in 0..ATTEMPTS {
            let target = match sandbox.resolve(path, false) {
                Ok(t) => t,
                // Swapped while it was walked: walk it again.
                Err(PathError::Changed) => continue,
                Err(e) => return self.path_refusal("edit", path, e),
            };
            if let Some(refusal) = self.resolved_rule("edit", path, &target) {
                return refusal;
            }
            if let Some(message) = Self::temporary_name("edit", path, target.name.to_str()) {
                return self.refuse(message);
            }
            let rules = ReadRules {
                limit: self.policy.max_write_bytes,
                hard_links: self.policy.allow_hard_links,
            };
            let (bytes, read) = match sandbox.read_target_for_edit(&target, rules) {
                Ok(b) => b,
                Err(PathError::Changed) => continue,
                Err(e) => return self.path_refusal("edit", path, e),
            };
            let Ok(text) = String::from_utf8(bytes) else {
                return self.refuse(format!(
                    "edit {path}: the file is not UTF-8 text; this tool edits text files only"
                ));
            };
            match text.matches(old_text).count() {
                0 => {
                    return self.refuse(format!(
                        "edit {path}: old_text not found \u{2014} the file may have changed; read it again"
                    ))
                }
                1 if overlaps(&text, old_text) => {
                    return self.refuse(format!(
                        "edit {path}: old_text occurs more than once (its occurrences overlap); include more context so it is unique"
                    ))
                }
                1 => {}
                n => {
                    return self.refuse(format!(
                        "edit {path}: old_text occurs {n} times; include more context so it is unique"
                    ))
                }
            }
            let edited = text.replacen(old_text, new_text, 1);
            let size = edited.len() as u64;
            if size > self.policy.max_write_bytes {
                return self.refuse(format!(
                    "edit {path}: the edited file would be {size} bytes; the limit is {}",
                    self.policy.max_write_bytes
                ));
            }
            match sandbox.write_over(&target, edited.as_bytes(), Some(read)) {
                Ok(()) => return self.success(&[("replacements", json!(1))]),
                Err(WriteError::Before(PathError::Changed)) => continue,
                Err(WriteError::Before(e)) => return self.path_refusal("edit", path, e),
                Err(WriteError::After(e)) => return self.unsynced("edit", path, e),
                Err(WriteError::Stranded { kept, cause }) => {
                    return self.stranded("edit", path, &kept, &cause)
                }
                Err(WriteError::Displaced { was_at }) => {
                    return self.displaced("edit", path, &was_at)
                }
            }
        }
        self.path_refusal("edit", path, PathError::Changed)
    }

    /// An edit swapped another writer's save out of the name and could not give it back: the
    /// save is kept at `kept`, which the operator must move back (this process never removes
    /// it; the next daemon's sweep of orphaned temporaries would). `failed`: the file at the
    /// name is not what either writer meant it to hold.
    fn stranded(&self, op: &str, path: &str, kept: &str, cause: &io::Error) -> Outcome {
        let cause = errno_text(cause);
        let message = format!(
            "{op} {path}: something else saved the file while the {op} was being installed, and that save could not be given its name back ({cause}); it is kept at {kept}: move it back to {path} by hand before the daemon restarts (the workspace then removes files named so)"
        );
        self.host
            .log(LogLevel::Error, &format!("workspace: {message}"));
        Outcome::failed(message)
    }

    /// An edit swapped another writer's save out of the name, and something else moved or
    /// removed it from where it was set aside before it could be given its name back: the
    /// edit holds the name. `failed`, never "nothing was changed": the edit is in place, and
    /// the save is where this process cannot see.
    fn displaced(&self, op: &str, path: &str, was_at: &str) -> Outcome {
        let message = format!(
            "{op} {path}: something else saved the file while the {op} was being installed, and that save, set aside at {was_at} to be given its name back, was moved or removed from there by something else first; {path} holds the {op}'s content, not that save's"
        );
        self.host
            .log(LogLevel::Error, &format!("workspace: {message}"));
        Outcome::failed(message)
    }

    /// The file was replaced but may not survive a crash: the effect ran and
    /// did not fully succeed, so `failed` (budget stays debited).
    fn unsynced(&self, op: &str, path: &str, error: PathError) -> Outcome {
        let cause = match error {
            PathError::Io(e) => errno_text(&e),
            other => format!("{other:?}"),
        };
        self.host.log(
            LogLevel::Error,
            &format!("workspace: {op} {path}: directory sync failed after rename: {cause}"),
        );
        Outcome::failed(format!(
            "{op} {path}: the file was replaced but its directory could not be synced ({cause}); the change may not survive a crash"
        ))
    }
}

/// Whether the single non-overlapping occurrence of `needle` overlaps
/// another one (`"aa"` in `"aaa"`): then the place to edit is ambiguous.
/// One extra linear search: a second occurrence must start inside the first.
fn overlaps(haystack: &str, needle: &str) -> bool {
    let Some(at) = haystack.find(needle) else {
        return false;
    };
    let step = haystack[at..].chars().next().map_or(1, char::len_utf8);
    haystack[at + step..]
        .find(needle)
        .is_some_and(|next| at + step + next < at + needle.len())
}

impl EffectHandler for WorkspaceHandler {
    /// Declines, before any budget is spent, the requests whose path or size alone makes them
    /// refusals: an empty path, a path with a NUL byte or over the path limit, a write whose
    /// content is over the write limit, a read of git's own data (a path as requested or as
    /// resolved with a component named like `.git`), a read whose file or result is over the
    /// read limit.
    /// Anything else proceeds to `execute`, which checks it all again.
    fn preflight(&self, request: &Request) -> Preflight {
        let Ok(checked) = self.checked(request) else {
            return Preflight::Proceed;
        };
        let (Ok(path), Ok(worktree)) = (checked.string("path"), checked.worktree()) else {
            return Preflight::Proceed;
        };
        if let Some(message) = Self::unusable_path(checked.op, path) {
            return self.stamp.decline(message);
        }
        match checked.op {
            "write" => match checked
                .string("content")
                .ok()
                .and_then(|content| self.oversized_write(path, content))
            {
                Some(message) => self.stamp.decline(message),
                // Where the path resolves names what the write would make (a dangling link).
                None => match Sandbox::open(Path::new(worktree))
                    .ok()
                    .and_then(|sandbox| sandbox.resolve(path, true).ok())
                    .filter(|target| self.resolved_rule("write", path, target).is_none())
                    .and_then(|target| {
                        Self::unshown_where_resolved(path, &target)
                            .or_else(|| Self::temporary_name("write", path, target.name.to_str()))
                    }) {
                    Some(message) => self.stamp.decline(message),
                    None => Preflight::Proceed,
                },
            },
            "read" => {
                if let Some(message) = Self::requested_read_rule(path) {
                    return self.stamp.decline(message);
                }
                match Sandbox::open(Path::new(worktree)) {
                    Ok(sandbox) => self.preflight_read(&sandbox, path),
                    Err(_) => Preflight::Proceed,
                }
            }
            _ => Preflight::Proceed,
        }
    }

    fn execute(&self, request: Request) -> Outcome {
        let checked = match self.checked(&request) {
            Ok(checked) => checked,
            Err(outcome) => return outcome,
        };
        let op = checked.op;
        let worktree = match checked.worktree() {
            Ok(w) => w,
            Err(outcome) => return outcome,
        };
        let path = match checked.string("path") {
            Ok(p) => p,
            Err(outcome) => return outcome,
        };
        // Path checks that need no file system, before opening anything.
        if let Some(message) = Self::unusable_path(op, path) {
            return self.refuse(message);
        }
        let sandbox = match Sandbox::open(Path::new(worktree)) {
            Ok(s) => s,
            // The daemon checked the worktree when it bound it; if it is gone (or
            // a symlink) now, the effect could not run at all. No host path in the text.
            Err(e) => return e.outcome(checked.effect),
        };
        match op {
            "read" => self.read(&sandbox, path),
            "write" => match checked.string("content") {
                Ok(content) => self.write(&sandbox, path, content),
                Err(outcome) => outcome,
            },
            // The only op left after the allowlist check.
            _ => {
                let old_text = match checked.string("old_text") {
                    Ok(s) => s,
                    Err(outcome) => return outcome,
                };
                let new_text = match checked.string("new_text") {
                    Ok(s) => s,
                    Err(outcome) => return outcome,
                };
                self.edit(&sandbox, path, old_text, new_text)
            }
        }
    }
}
