//! Where the store and the workspace root may be: each made private (0700), refused where
//! another user could write it or swap a directory above it, the one never inside the other,
//! and a plugin's `stateDir` outside the root; each path taken as it will be once made.

use std::path::PathBuf;

use super::paths::{absolute_now, real_so_far, store_lock_file};
use super::{startup, CliResult};
use crate::plugins::PluginOptions;

/// Make `dir` and the parents it lacks with mode 0700, whatever the umask (which can only
/// narrow it): the workspace root and each worktree. Under `umask 000` they were 0777, and any
/// local user could swap an episode's worktree for one of their own, which the agent then
/// wrote into; under 0022 every user could read every episode's files, which the store's
/// per-episode read rules do not cover. (The store makes its own directory the same way.)
pub(super) fn create_private_dir_all(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Make `dir` (mode 0700, its missing parents too, as [`create_private_dir_all`]) with an
/// exclusive `mkdir`: `Ok(true)` when this call made it, `Ok(false)` when it was a directory
/// already. The parents it made are added to `above`, deepest first.
pub(super) fn make_private_dir(
    dir: &std::path::Path,
    above: &mut Vec<PathBuf>,
) -> std::io::Result<bool> {
    use std::os::unix::fs::DirBuilderExt;
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        let missing: Vec<PathBuf> = parent
            .ancestors()
            .take_while(|p| !p.as_os_str().is_empty() && std::fs::symlink_metadata(p).is_err())
            .map(absolute_now)
            .collect();
        create_private_dir_all(parent)?;
        above.extend(missing);
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(false),
        Err(e) => Err(e),
    }
}

/// Refuse the store directory and its `plugin-state` when they exist and another user could
/// have written them ([`refuse_loose_dir`]): the daemon runs what plugins keep there (the
/// ailang plugin's archived binary), and trusts the store's every row.
pub(super) fn refuse_loose_store(db: &std::path::Path) -> Result<(), String> {
    refuse_loose_dir("store", db)?;
    refuse_loose_dir("plugin state", &db.join(crate::backup::PLUGIN_STATE))
}

/// Refuse `dir` (`what` names it: the store, its plugin state, the workspace root) when it
/// exists and another user could have written it, by the rules the daemon applies to plugin
/// libraries and their directory (`plugins::writers`): every user may write `dir`, or it
/// belongs to a user other than this process's and root (whose write is the owner's grant,
/// allowed as for a library; a sticky bit does not help, since in a sticky directory anyone
/// may still make a name not yet there, such as `plugin-state` or a new episode's worktree);
/// or every user may write a directory above it (at any depth), which is not sticky, so anyone
/// could swap `dir` or the subtree it lies in. A `dir` not there yet is made by this process,
/// 0700: only the directories above it are looked at.
pub(super) fn refuse_loose_dir(what: &str, dir: &std::path::Path) -> Result<(), String> {
    use crate::plugins::writers::{another_could_write, OtherWriter};
    use std::os::unix::fs::MetadataExt;
    let shown = dir.display();
    let meta = std::fs::metadata(dir).ok();
    // A file, a device or a FIFO in its place is said by the store's open (or the root's
    // check) as not a directory: /dev/null is 0666, and `chmod 700` of it breaks the machine.
    if meta.as_ref().is_some_and(|m| !m.is_dir()) {
        return Ok(());
    }
    let pasted = crate::text::shell_path(dir);
    let writer = meta
        .as_ref()
        .and_then(|m| Some((another_could_write(m)?, m.mode() & 0o7777)));
    match writer {
        Some((OtherWriter::Everyone { mode }, _)) => {
            return Err(format!(
                "{what} {shown}: refusing a directory every user may write (mode {mode:04o}): another user could put or swap what worldd keeps and runs there; `chmod 700 {pasted}`"
            ))
        }
        Some((OtherWriter::Owner { uid, me }, mode)) => {
            return Err(format!(
                "{what} {shown}: refusing a directory owned by uid {uid}, neither this process's user (uid {me}) nor root (mode {mode:04o}): that user could put or swap what worldd keeps and runs there; run worldd as its owner, or if what it holds is yours, `chown -R {me} {pasted}`"
            ))
        }
        None => {}
    }
    // Any directory above, not only the parent: anyone could swap the subtree it lies in. A
    // `dir` not made yet too: it would be made there.
    if let Some((parent, mode)) = crate::backup::swappable_above(dir) {
        return Err(format!(
            "{what} {shown}: refusing it inside {}, a directory every user may write, without the sticky bit (mode {mode:04o}): anyone could swap it for their own; `chmod o-w {}`",
            parent.display(),
            crate::text::shell_path(&parent)
        ));
    }
    Ok(())
}

/// A warning when users other than its owner may list or enter the workspace root: they may
/// then read every episode's worktree, which the store's per-episode read rules do not cover.
/// Only a warning: a root made before worldd made it 0700 is 0755 under the usual umask, and
/// what other users could read there is not what the daemon runs or trusts.
pub(super) fn others_may_enter(root: &std::path::Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let mode = std::fs::metadata(root).ok()?.mode() & 0o7777;
    (mode & 0o077 != 0).then(|| {
        format!(
            "the workspace root {} (mode {mode:04o}) may be listed or entered by users other than its owner, who may then read every episode's worktree; `chmod 700 {}`",
            root.display(),
            crate::text::shell_path(root)
        )
    })
}

/// The store must not live where agents can write, nor the worktrees where the store is
/// (agents would write beside its data file and its plugins' state, in the directory `backup`
/// copies; a fresh start took the root it made there for the remains of a lost store).
pub(super) fn refuse_nested(db: &std::path::Path, root: &std::path::Path) -> CliResult {
    nested(db, root).map_or(Ok(()), |why| Err(startup("config", why)))
}

/// [`refuse_nested`]'s finding, for `session new` too: the store inside the workspace root, or
/// the root inside the store, each path taken as it will be once made (a `..` after a part not
/// made yet goes back up).
pub(super) fn nested(db: &std::path::Path, root: &std::path::Path) -> Option<String> {
    let (root, db) = (real_so_far(root), real_so_far(db));
    if db.starts_with(&root) {
        Some(format!(
            "the store {} is inside the workspace root {}",
            db.display(),
            root.display()
        ))
    } else if root.starts_with(&db) {
        Some(format!(
            "the workspace root {} is inside the store {}",
            root.display(),
            db.display()
        ))
    } else {
        None
    }
}

/// A `stateDir` the operator set for a plugin that overlaps the workspace root is refused: agents
/// write their worktrees there and could rewrite what the plugin keeps (the ailang plugin's
/// policies among it). The ailang plugin refused each call for it, every episode's, a unit
/// spent each time; it is said once, at start.
pub(super) fn refuse_state_dir_in_workspace(
    opts: &PluginOptions,
    root: &std::path::Path,
) -> CliResult {
    let resolved = |p: &std::path::Path| {
        p.canonicalize()
            .unwrap_or_else(|_| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()))
    };
    let root = resolved(root);
    for (name, config) in &opts.configs {
        let Some(dir) = config.get("stateDir").and_then(serde_json::Value::as_str) else {
            continue;
        };
        let state = resolved(std::path::Path::new(dir));
        if opts.is_selected(name) && (state.starts_with(&root) || root.starts_with(&state)) {
            return Err(startup(
                "config",
                format!(
                    "[plugins.{name}] stateDir {dir} overlaps the workspace root {}: agents write their worktrees there and could rewrite what the plugin keeps; put it outside the workspace root, or leave it out (it is then <db>/plugin-state/{name})",
                    root.display()
                ),
            ));
        }
    }
    Ok(())
}

/// What a store directory holds besides `data.mdb`, sorted, directories with a `/`.
pub(super) fn beside_data_file(db: &std::path::Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(db) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name() != "data.mdb")
        .map(|e| {
            let slash = if e.file_type().is_ok_and(|t| t.is_dir()) {
                "/"
            } else {
                ""
            };
            format!("{}{slash}", e.file_name().to_string_lossy())
        })
        .collect();
    names.sort();
    names
}

/// Why `db` holds what is left of a store and no store: a `data.mdb` that is empty, or none
/// beside other files (`lock.mdb`, `plugin-state/`). `None` for a store, and for a directory
/// that is absent or empty, where a new store is made.
pub(super) fn remains_of_a_store(db: &std::path::Path) -> Option<String> {
    const REFUSAL: &str = "refusing to make a new store in its place: restore the directory from a backup, or remove it to start a new world";
    match std::fs::metadata(store_lock_file(db)) {
        Ok(m) if m.len() > 0 || !m.is_file() => None,
        Ok(_) => Some(format!(
            "world store {} has an empty data.mdb: no store was ever written there, or the file was emptied; {REFUSAL}",
            db.display()
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let beside = beside_data_file(db);
            (!beside.is_empty()).then(|| {
                format!(
                    "world store {} has no data.mdb, only {}: its data file was lost (a restore or copy gone wrong?); {REFUSAL}",
                    db.display(),
                    beside.join(", ")
                )
            })
        }
        Err(_) => None,
    }
}
