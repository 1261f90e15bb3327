//! `Registry.Publish`: request checks, reading the bundle, the host call, and
//! the output objects.

use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::path::Path;

use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};
use handler_kit::beneath::{self, HostDir, WalkError};
use handler_kit::output::{errno_text, Stamp};
use handler_kit::protect::{
    git_component, hard_linked, named_like_git, GIT_UNREAD, READS_ONE_LINK,
};
use handler_kit::request::{check, Checked, Quote, Rules};
use handler_kit::serde_json::{json, Map, Value};
use handler_kit::worktree;
use handler_kit::{EffectHandler, Host, LogLevel, Outcome, Request, NO_PUBLISH};

use crate::bundle;
use crate::config::Policy;
use crate::tool_ref;

/// The ops `Registry.Publish` accepts.
const OPS: &[&str] = &["publish"];

handler_kit::effect! {
    /// Validate a bundle of transition documents and publish it as a new registry revision.
    pub const PUBLISH = "Registry.Publish" { class: Write, ops: OPS }
}

/// The payload keys this handler reads; a key that differs from one of them
/// only by case is refused.
const KNOWN_KEYS: [&str; 3] = ["op", "path", "bundle"];

/// The request checks of [`check`].
const RULES: Rules<'static> = Rules {
    ops: OPS,
    known_keys: &KNOWN_KEYS,
    quote: Quote::Plain,
};

/// Output keys the handler owns; a host answer cannot overwrite them.
const RESERVED: [&str; 5] = ["ok", "refused", "tool", "policy_digest", "world"];

/// The host's error prefix for a failure of the store (nothing published).
const HOST_FAILED: &str = "publishing failed: ";

/// The longest bundle path `publish` accepts, in bytes: the kernel's `PATH_MAX`, past which no
/// file can be opened by its name. It is checked before anything else in the path, and its
/// refusal gives the length, not the path: the answer is committed to the log, and an
/// attacker's path may be megabytes long.
pub const MAX_PATH_BYTES: usize = 4096;

/// The handler object: an effective policy, the host it publishes through,
/// and the identity it stamps.
pub struct RegistryHandler {
    policy: Policy,
    stamp: Stamp,
    host: Host,
}

/// Whether `path` climbs above the root lexically (or is absolute).
/// Walks of the path while the worktree keeps changing under it.
const RESOLVE_ATTEMPTS: usize = 3;

/// Why `path` may not be read as a bundle because it is, as spelled or where it lands (each
/// symlink read, not followed: `handler_kit::beneath`), in git's own data: the Workspace
/// plugin's rule and words. Opening `.git/config` would tell the agent, in the refusal,
/// whether the file exists, its size and where its first line stops being JSON. What the walk
/// cannot finish (a missing file, a loop) is left to the open, which answers it.
fn git_data(worktree: &str, path: &str) -> Option<String> {
    let refusal = |named: &str| named_like_git(named, &format!("\"{named}\""), GIT_UNREAD);
    if let Some(named) = beneath::lexical(path).as_deref().and_then(git_component) {
        return Some(refusal(named));
    }
    for _ in 0..RESOLVE_ATTEMPTS {
        return match beneath::walk(&HostDir(std::path::Path::new(worktree)), path) {
            Ok(walked) => git_component(&walked.reached()).map(refusal),
            Err(WalkError::Changed) => continue,
            // A path too long to check could lead anywhere: refused, not left to the open.
            Err(WalkError::TooLong) => Some(beneath::TOO_LONG.into()),
            Err(_) => None,
        };
    }
    Some("the path kept changing while it was being resolved; nothing was read, try again".into())
}

/// Why the file just opened may not be read because it lies, as the kernel has it now, in git's
/// own data. [`git_data`] judged the path before the open, and the open follows links itself:
/// a link swapped in between would land it there. `root` is the opened worktree's
/// `/proc/self/fd/N`: both names are read from descriptors, never resolved again by path (a
/// worktree renamed between the two reads is read again). `None`: it lies elsewhere in the
/// worktree.
fn opened_in_git_data(file: &impl AsRawFd, root: &str) -> Option<String> {
    let unsure = |why: String| {
        Some(format!(
            "cannot tell where the opened file lies ({why}); nothing was read"
        ))
    };
    for _ in 0..RESOLVE_ATTEMPTS {
        let (at, before, after) = match (
            std::fs::read_link(root),
            std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())),
            std::fs::read_link(root),
        ) {
            (Ok(before), Ok(at), Ok(after)) => (at, before, after),
            (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return unsure(errno_text(&e)),
        };
        if before != after {
            continue;
        }
        let Ok(beneath) = at.strip_prefix(&before) else {
            return unsure("not beneath the worktree".into());
        };
        let refusal = |named: &str| named_like_git(named, &format!("\"{named}\""), GIT_UNREAD);
        return git_component(&beneath.to_string_lossy()).map(refusal);
    }
    unsure("the worktree kept being renamed".into())
}

fn escapes(path: &str) -> bool {
    if path.starts_with('/') {
        return true;
    }
    let mut depth: usize = 0;
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return true,
            },
            _ => depth += 1,
        }
    }
    false
}

impl RegistryHandler {
    /// A handler enforcing `policy`, publishing through `host`.
    pub fn new(policy: Policy, host: Host) -> RegistryHandler {
        RegistryHandler {
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
    fn refuse(&self, message: impl Into<String>) -> Outcome {
        self.stamp.refuse(message)
    }

    /// Read and parse a bundle file of the worktree, confined to it by a
    /// cap-std capability (no `..`, absolute path or symlink leads out).
    fn read_bundle(
        &self,
        request: &Checked<'_>,
        worktree: &str,
        path: &str,
    ) -> Result<Value, Outcome> {
        if path.is_empty() {
            return Err(self.refuse("publish: the path is empty"));
        }
        if path.len() > MAX_PATH_BYTES {
            return Err(self.refuse(format!(
                "publish: the path is {} bytes; the limit is {MAX_PATH_BYTES}",
                path.len()
            )));
        }
        if path.contains('\0') {
            return Err(self.refuse(format!(
                "publish {}: the path contains a NUL byte",
                path.replace('\0', "\\0")
            )));
        }
        let escape = || {
            self.refuse(format!(
                "publish {path}: path \"{path}\" escapes sandbox \"<worktree>\""
            ))
        };
        if escapes(path) {
            return Err(escape());
        }
        // The worktree is opened once, never through a symlink at its place (one swapped in
        // since the daemon checked it would redirect the read), and looked at only through
        // that descriptor from here on: `/proc/self/fd/N` names the directory opened, not
        // whatever the path leads to now.
        let root = worktree::open(Path::new(worktree))
            .map(|fd| Dir::from_std_file(std::fs::File::from(fd)))
            .map_err(|e| e.outcome(request.effect))?;
        let opened = format!("/proc/self/fd/{}", root.as_raw_fd());
        if let Some(why) = git_data(&opened, path) {
            return Err(self.refuse(format!("publish {path}: {why}")));
        }
        let mut options = OpenOptions::new();
        // Non-blocking: a FIFO planted in the worktree must not hang the call.
        options.read(true).custom_flags(libc::O_NONBLOCK);
        let file = match root.open_with(path, &options) {
            Ok(f) => f,
            Err(e)
                if e.kind() == io::ErrorKind::PermissionDenied
                    && e.to_string().contains("outside of the filesystem") =>
            {
                return Err(escape())
            }
            Err(e) => {
                return Err(
                    self.refuse(format!("publish {path}: openat {path}: {}", errno_text(&e)))
                )
            }
        };
        if let Some(why) = opened_in_git_data(&file, &opened) {
            return Err(self.refuse(format!("publish {path}: {why}")));
        }
        let metadata = file.metadata().map_err(|e| {
            self.refuse(format!("publish {path}: fstat {path}: {}", errno_text(&e)))
        })?;
        if metadata.is_dir() {
            return Err(self.refuse(format!("publish {path}: {path} is a directory, not a file")));
        }
        if !metadata.is_file() {
            return Err(self.refuse(format!("publish {path}: {path} is not a regular file")));
        }
        // The Workspace plugin's rule and words: a hard link planted in the worktree names a
        // file outside it, whose contents a refusal would quote (key names) or publish.
        let links = cap_std::fs::MetadataExt::nlink(&metadata);
        if links > 1 {
            return Err(self.refuse(format!(
                "publish {path}: {}",
                hard_linked(links, READS_ONE_LINK)
            )));
        }
        let limit = self.policy.max_bundle_bytes;
        if metadata.len() > limit {
            return Err(self.refuse(format!(
                "publish {path}: file is {} bytes; the limit is {limit}",
                metadata.len()
            )));
        }
        let bytes = match read_at_most(file, limit) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => {
                return Err(self.refuse(format!(
                    "publish {path}: file grew past the limit of {limit} bytes while being read"
                )))
            }
            Err(e) => {
                return Err(self.refuse(format!("publish {path}: read {path}: {}", errno_text(&e))))
            }
        };
        // A member named twice would let the file say one thing to whoever reviewed it and
        // another to what is published: refused, like any text that is not JSON.
        handler_kit::dialect::json::parse(&bytes)
            .map_err(|e| self.refuse(format!("publish {path}: the file is not JSON: {e}")))
    }

    fn publish(&self, bundle: &Value) -> Outcome {
        if let Err(refusal) = bundle::check(bundle, self.policy.max_documents) {
            return self.refuse(refusal);
        }
        let text = match handler_kit::serde_json::to_string(bundle) {
            Ok(t) => t,
            Err(e) => {
                return Outcome::failed(format!("publish: the bundle cannot be serialised: {e}"))
            }
        };
        let answer = match self.host.publish(&text) {
            Ok(answer) => answer,
            Err(message)
                if message == NO_PUBLISH
                    || message.starts_with(HOST_FAILED)
                    || message.starts_with("host publish panicked") =>
            {
                self.host
                    .log(LogLevel::Error, &format!("registry: {message}"));
                return Outcome::failed(format!("broker: {PUBLISH} failed: {message}"));
            }
            // The host's validator said no: nothing was published.
            Err(message) => return self.refuse(message),
        };
        let mut fields = Map::new();
        fields.insert("ok".into(), json!(true));
        match handler_kit::serde_json::from_str::<Value>(&answer) {
            Ok(Value::Object(object)) => {
                for (k, v) in object {
                    if !RESERVED.contains(&k.as_str()) {
                        fields.insert(k, v);
                    }
                }
            }
            // Published, but the answer is unreadable: say so, keep it.
            _ => {
                self.host.log(
                    LogLevel::Warn,
                    "registry: the host's publish answer is not a JSON object",
                );
                fields.insert("answer".into(), json!(answer));
            }
        }
        self.stamp.ok(fields)
    }
}

impl EffectHandler for RegistryHandler {
    fn execute(&self, request: Request) -> Outcome {
        let effect = request.effect.as_str();
        if effect != PUBLISH {
            return Outcome::failed(format!(
                "broker: the registry plugin does not handle effect \"{effect}\""
            ));
        }
        let checked = match check(&request, &RULES) {
            Ok(checked) => checked,
            Err(outcome) => return outcome,
        };
        if let Err(outcome) = checked.only_keys(&KNOWN_KEYS) {
            return outcome;
        }
        let payload = checked.payload;
        match (payload.get("path"), payload.get("bundle")) {
            (Some(Value::String(path)), None) => {
                let worktree = match checked.worktree() {
                    Ok(w) => w,
                    Err(outcome) => return outcome,
                };
                match self.read_bundle(&checked, worktree, path) {
                    Ok(bundle) => self.publish(&bundle),
                    Err(outcome) => outcome,
                }
            }
            (None, Some(bundle @ Value::Object(_))) => self.publish(bundle),
            (Some(_), None) => {
                checked.refused("payload key \"path\" of op \"publish\" must be a string")
            }
            (None, Some(_)) => {
                checked.refused("payload key \"bundle\" of op \"publish\" must be a JSON object")
            }
            _ => checked.refused(
                "op \"publish\" needs exactly one of payload keys \"path\" and \"bundle\"",
            ),
        }
    }
}

/// All of `file` if it holds at most `limit` bytes; `None` if it holds more (it grew after
/// its size was checked). Never reads more than one byte past the limit.
fn read_at_most(file: impl Read, limit: u64) -> io::Result<Option<Vec<u8>>> {
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= limit).then_some(bytes))
}

#[cfg(test)]
mod tests {
    use super::{escapes, read_at_most};
    use std::io::Read;

    #[test]
    fn lexical_escapes() {
        assert!(escapes("/etc/x"));
        assert!(escapes(".."));
        assert!(escapes("a/../../b"));
        assert!(!escapes("a/../b"));
        assert!(!escapes("./a"));
        assert!(!escapes("..a"));
    }

    /// A file that grows between its size check and its read: whatever it grew to, at most
    /// one byte past the limit is read and the publication is refused.
    #[test]
    fn a_file_that_grew_past_the_limit_while_being_read_is_not_taken() {
        struct Counted<R>(R, usize);
        impl<R: Read> Read for Counted<R> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = self.0.read(buf)?;
                self.1 += n;
                Ok(n)
            }
        }
        let mut endless = Counted(std::io::repeat(b'x'), 0);
        assert_eq!(read_at_most(&mut endless, 64).unwrap(), None);
        assert_eq!(endless.1, 65);
        let exact = std::io::Cursor::new(vec![b'y'; 64]);
        assert_eq!(read_at_most(exact, 64).unwrap(), Some(vec![b'y'; 64]));
    }
}
