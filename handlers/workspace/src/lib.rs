//! worldd plugin `workspace`: `Workspace.Read` and `Workspace.Write`, confined
//! to the episode's worktree.
//!
//! Serves the se-tools `ailang-read`, `ailang-write` and `ailang-edit`, whose
//! transition documents (`transitions/se-tools/ailang-{read,write,edit}.json`)
//! it ships in its manifest.
//!
//! # Effects and payloads
//!
//! | effect | class | op | payload | success output |
//! |---|---|---|---|---|
//! | `Workspace.Read` | read | `read` | `{op, path}` | `{"ok":true,"content":…}` |
//! | `Workspace.Write` | write | `write` | `{op, path, content}` | `{"ok":true,"bytes":n}` |
//! | `Workspace.Write` | write | `edit` | `{op, path, old_text, new_text}` | `{"ok":true,"replacements":1}` |
//!
//! Every output also carries `tool` and `policy_digest`:
//!
//! - `tool` = `sha256:` + hex SHA-256 of the file the handler's code was
//!   loaded from, found with `dladdr` (the plugin library when the daemon
//!   loaded it; the executable when the crate is linked in, as in tests). If
//!   that file cannot be read, the SHA-256 of `"worldd-handler-workspace@<version>"`.
//! - `policy_digest` = hex SHA-256 of the canonical JSON (RFC 8785) of the
//!   effective policy: `{"allowHardLinks":b,"denyWrite":[…],"maxReadBytes":n,
//!   "maxWriteBytes":n,"names":"nfkc-casefold","noRead":[".git/"],
//!   "policy":"worldd/workspace-policy/v3","readOnly":[".git/"],"sandbox":"worktree"}`.
//!
//! # Refusals and failures
//!
//! A refusal is an `ok` outcome whose output is `{"ok":false,"refused":"…"}`
//! (the effect ran and said no; it costs its budget unit), in the reference's
//! words:
//!
//! - `read /etc/hosts: path "/etc/hosts" escapes sandbox "<worktree>"` (the
//!   literal `<worktree>`: no host path leaks to the agent)
//! - `read nope.ail: openat nope.ail: no such file or directory`
//! - `read big.txt: file is 2000000 bytes; the limit is 1048576`
//! - `read ctl.txt: the result would be 1620412 bytes: 270002 of the file, 1350010 of JSON escaping and 400 of the result's other fields (ok, tool, policy_digest, world); the limit is 1048576, so a file of plain text can be read up to 1048176 bytes`
//! - `read notes.txt: the file has 2 hard links; …` (also for edits)
//! - `read .git: .git/ is git's own data, not worktree content; the lane's
//!   tools do not read it`, and for any other component named like `.git`:
//!   `read sub/.GIT/config: "sub/.GIT" is named like .git (names are compared
//!   after NFKC and case folding); .git/ is git's own data, not worktree
//!   content; the lane's tools do not read it` (declined before any budget is
//!   spent, see *Confinement*)
//! - `write .git/config: .git/ is read-only to the lane's tools`, and for any
//!   other component named like `.git`: `write sub/.GIT/x: "sub/.GIT" is named
//!   like .git (names are compared after NFKC and case folding); .git/ is
//!   read-only to the lane's tools`
//! - `write .ailang/x.ail: matches fs_deny_write ".ailang/**" — read-only under this policy`
//! - `edit hello.ail: old_text occurs 8 times; include more context so it is unique`
//! - `edit hello.ail: old_text not found — the file may have changed; read it again`
//! - `edit hello.ail: the file changed while it was being edited (something else wrote,
//!   replaced or removed it after it was read); nothing was changed: read it again and retry`
//!   (the edit is installed only over the file it read: same device, inode, size, mtime,
//!   ctime. It is exchanged with the name in one step, `renameat2(RENAME_EXCHANGE)`, and
//!   anything but that file found swapped out is exchanged back; where the filesystem cannot
//!   exchange, a check just before a plain rename narrows the window, but does not close it)
//! - `write notes/.worldd-tmp-1-x: ".worldd-tmp-1-x" is named like the workspace's temporary
//!   files (.worldd-tmp-…), which it removes as what a killed write left; give the file another
//!   name` (writes and edits, as requested or where a link leads; reads are not refused)
//!
//! plus non-UTF-8 files, empty `old_text`, an `old_text` whose only match
//! overlaps another (`"aa"` in `"aaa"`: ambiguous, refused), content over
//! the write limit,
//! directories, FIFOs, NUL bytes, over-long names (`file name too long`) and
//! paths over 1024 bytes (`write: the path is 40005 bytes; the limit is 1024`).
//!
//! A `failed` outcome means the request itself was wrong, and nothing was
//! touched: scope not `worktree` (`broker: Workspace.Read refused: scope "x"
//! is not "worktree"`), an op outside the effect's allowlist (`broker:
//! Workspace.Read refuses op "write": not in this effect's op allowlist`), a
//! case-variant key (`broker: Workspace.Write refused: key "OP" aliases
//! "op"`), a payload that is not an object, a missing argument or worktree;
//! or the worktree's filesystem could not take the operation (full, out of
//! inodes, read-only, failing), which is not the agent's to fix: `write f.txt:
//! read-only file system: the worktree's filesystem cannot take it; nothing
//! was changed`. The one `failed` after a change: a write whose rename
//! succeeded but whose directory fsync failed.
//!
//! # Confinement
//!
//! All file access goes through a cap-std `Dir` opened on the worktree, and
//! the handler resolves every path itself, component by component, then
//! re-opens the resolved chain with `O_NOFOLLOW` (see the `sandbox` module's
//! docs). Consequences:
//!
//! - Absolute paths, `..` above the root, and symlinks whose target is
//!   absolute or climbs out are refused as escapes, including dangling ones
//!   and chains. `/proc/self/root/…` is just an absolute path.
//! - Symlinks that stay inside the worktree are followed (for reads *and*
//!   writes: writing through `link -> a.txt` replaces `a.txt`); the `.git/`
//!   and deny rules apply to both the requested path and where it resolves.
//! - A symlink swapped in between the check and the use makes the no-follow
//!   open fail and the operation start again; it is never followed.
//! - Names like `.git` are git's own data at every depth, neither written nor
//!   read: a component whose folded
//!   form (NFKC, full case folding, NFKC, default-ignorable characters
//!   dropped; `handler_kit::protect`) is `.git` after trailing dots
//!   and spaces, or `git~1`. So `.GIT/x`, `．git/x` (U+FF0E), `sub/.git` (a
//!   nested repository or gitfile) and `.git./x` are refused. A read of one
//!   is refused too: a linked worktree's `.git` is a gitfile naming the
//!   operator's repository by its absolute host path, and `.git/config` may
//!   hold remote URLs with credentials. The read's preflight declines it (as
//!   requested, or where a symlink resolves), so nothing is spent; the effect
//!   refuses it again, for a symlink swapped in between. No op of this plugin
//!   needs git's data: commits go through the git plugin.
//! - Deny globs (worldd's glob dialect: `*`, `?`, `**`; `[ ] { } \` reserved)
//!   are folded like the path and match the whole path or any tail of it that
//!   starts at a component (`**/G`): `.github/**` refuses `sub/.github/x`.
//! - Other Unicode look-alikes (`∕` U+2215, `．．` U+FF0E twice) are ordinary
//!   names: the resolver splits on `/` only.
//! - Writes are atomic (temp file, fsync, rename, directory fsync) and keep
//!   an existing file's permission bits, except setuid and setgid, which they
//!   drop (the new file is the daemon's, with the agent's content). The temporary file is
//!   created with the bits it will have, never wider while the content goes in. A crash can
//!   leave a `.worldd-tmp-*` file beside the target, never a partial target; a write that
//!   fails removes the directories it made for its path.
//! - Hard links are not path-confined by any resolver: a hard link placed in
//!   the worktree may name an outside file. Reads and edits refuse a file
//!   whose link count (on the opened file) is above one unless the config
//!   allows them (`allowHardLinks`); a write replaces the link instead of
//!   changing the outside file.
//!
//! # Config
//!
//! ```json
//! {"denyWrite": [".github/**", ".pi/**", ".claude/**", ".gitmodules", ".gitattributes", ".ailang/**"],
//!  "maxReadBytes": 1048576, "maxWriteBytes": 8388608, "allowHardLinks": false}
//! ```
//!
//! All keys optional; unknown keys are refused. `maxReadBytes` bounds the
//! *result* of a read (canonical JSON with the escaped content, the stamps and
//! the `world` block the daemon adds), at most the coordinator's 1 MiB cap on
//! a tool result: a read over it is refused with both sizes before anything is
//! returned, rather than dropped by the coordinator after the effect.
//! `maxWriteBytes` is at most 1 GiB.

// No unwrap or expect outside tests: a panic here is a bug, never an answer.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod config;
mod handler;
mod sandbox;

use handler_kit::manifest::embedded_transitions;
use handler_kit::serde_json::Value;
use handler_kit::{export_plugin, Host, Manifest, Plugin};

pub use config::{
    compile as compile_deny_glob, config_schema, Policy, DEFAULT_DENY_WRITE,
    DEFAULT_MAX_READ_BYTES, DEFAULT_MAX_WRITE_BYTES, LIMIT_CEILING, MAX_PATH_BYTES, RESULT_CAP,
};
pub use handler::{WorkspaceHandler, READ, WRITE};
pub use handler_kit::identity::ToolSource;

/// `sha256:` + 64 hex identifying this handler build (the library the code
/// was loaded from, see the crate docs), and its source. Computed once per
/// process.
pub fn tool_ref() -> &'static (String, ToolSource) {
    handler_kit::tool_ref!()
}

/// The transition documents this plugin ships, by file name.
const TRANSITIONS: [(&str, &str); 3] = [
    (
        "ailang-read.json",
        include_str!("../../../transitions/se-tools/ailang-read.json"),
    ),
    (
        "ailang-write.json",
        include_str!("../../../transitions/se-tools/ailang-write.json"),
    ),
    (
        "ailang-edit.json",
        include_str!("../../../transitions/se-tools/ailang-edit.json"),
    ),
];

/// The plugin (see the crate docs).
pub struct WorkspacePlugin;

impl Plugin for WorkspacePlugin {
    type Handler = WorkspaceHandler;

    fn manifest() -> Result<Manifest, String> {
        let transitions = embedded_transitions(&TRANSITIONS)?;
        Ok(Manifest {
            name: "workspace".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            abi: handler_kit::ABI_VERSION,
            description: "Reads and writes files inside the episode's worktree (ailang-read, ailang-write, ailang-edit)."
                .into(),
            effects: handler_kit::declared_effects!(),
            transitions,
            finish: Vec::new(),
            config_schema: config_schema(),
        })
    }

    fn new(config: Value, host: Host) -> Result<WorkspaceHandler, String> {
        Ok(WorkspaceHandler::new(Policy::from_config(&config)?, host))
    }
}

export_plugin!(WorkspacePlugin);
