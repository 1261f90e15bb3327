//! The plan language's use of paths and globs: the `relative-path` rule, and `path-glob`
//! matching in worldd's one glob dialect ([`crate::glob`], the code the workspace plugin's
//! deny globs run).

/// The relative-path rule: non-empty; not starting with `/` or `-`; no `..` segment (the whole
/// path `..`, a leading `../`, a trailing `/..` or an inner `/../`). `..a` is fine.
pub fn relative_path_ok(p: &str) -> bool {
    !p.is_empty()
        && !p.starts_with('/')
        && !p.starts_with('-')
        && p != ".."
        && !p.starts_with("../")
        && !p.ends_with("/..")
        && !p.contains("/../")
}

/// Whether `pattern` matches the whole of `text`, in worldd's one glob dialect (the workspace
/// plugin's deny globs match the same way): see [`crate::glob`].
pub fn glob_match(pattern: &str, text: &str) -> bool {
    crate::glob::matches(pattern, text)
}
