//! The default author: the identity git itself would use for a commit made where the daemon
//! started (the repository's `user.name` / `user.email` there, else the operator's global
//! ones), for a deployment that sets no `author`.

use std::path::Path;
use std::process::{Command, Stdio};

/// `git config --get KEY` run in `dir`, trimmed; `None` when unset or git fails.
fn git_config(program: &Path, dir: &Path, key: &str) -> Option<String> {
    let mut git = Command::new(program);
    git.args(["config", "--get", key])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stderr(Stdio::null());
    handler_kit::child::inherit_only_stdio(&mut git);
    let out = git.output().ok()?;
    let value = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (out.status.success() && !value.is_empty()).then_some(value)
}

/// `"Name <email>"` from git's configuration as seen from `dir`, when both halves are set.
pub fn configured(program: &Path, dir: &Path) -> Option<String> {
    Some(format!(
        "{} <{}>",
        git_config(program, dir, "user.name")?,
        git_config(program, dir, "user.email")?
    ))
}
