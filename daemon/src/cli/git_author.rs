//! A sensible default author for the git plugin: the identity git itself would use for a
//! commit made where `worldd` starts (the repository's `user.name` / `user.email`, else the
//! operator's global ones). Without one the plugin declines to start and names the flag to
//! pass; `--git-author` or `[plugins.git] author` always win.

use std::collections::BTreeMap;
use std::process::Command;

use serde_json::Value;

/// `git config --get KEY` in the current directory, trimmed; `None` when unset or git fails.
fn git_config(key: &str) -> Option<String> {
    let out = Command::new("git")
        .args(["config", "--get", key])
        .output()
        .ok()?;
    let value = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (out.status.success() && !value.is_empty()).then_some(value)
}

/// `"Name <email>"` from git's configuration here, when both halves are set.
pub fn configured_identity() -> Option<String> {
    Some(format!(
        "{} <{}>",
        git_config("user.name")?,
        git_config("user.email")?
    ))
}

/// Give the git plugin's config an `author` from git's configuration when the operator set
/// none; returns the author it chose.
pub fn fill_default(configs: &mut BTreeMap<String, Value>) -> Option<String> {
    let has_author = configs
        .get("git")
        .is_some_and(|c| c.get("author").is_some());
    if has_author {
        return None;
    }
    let author = configured_identity()?;
    let entry = configs
        .entry("git".to_owned())
        .or_insert_with(|| Value::Object(Default::default()));
    entry
        .as_object_mut()?
        .insert("author".to_owned(), Value::String(author.clone()));
    Some(author)
}
