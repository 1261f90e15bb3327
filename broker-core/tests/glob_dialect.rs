//! One glob dialect for the whole project: the plan language's `path-glob` (broker-core's
//! `glob` module) must match exactly as the workspace plugin's deny globs, which globset
//! compiles with `literal_separator(true)` and `backslash_escape(true)`. One corpus of
//! (glob, path, expected) runs through both, then random globs and paths over a small alphabet.

use broker_core::glob;
use broker_core::plan::glob_match;
use globset::{GlobBuilder, GlobSetBuilder};
use proptest::prelude::*;

/// The workspace plugin's deny-glob compilation (handlers/workspace/src/config.rs), as a set.
fn globset_matches(pattern: &str, path: &str) -> bool {
    let glob = GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .unwrap_or_else(|e| panic!("globset refused {pattern:?}: {e}"));
    let mut set = GlobSetBuilder::new();
    set.add(glob);
    set.build().unwrap().is_match(path)
}

/// (glob, path, expected).
const CORPUS: &[(&str, &str, bool)] = &[
    // The case: `/**/` matches zero directories.
    ("docs/**/*.md", "docs/a.md", true),
    ("docs/**/*.md", "docs/x/a.md", true),
    ("docs/**/*.md", "docs/x/y/a.md", true),
    ("docs/**/*.md", "docsa.md", false),
    ("docs/**/*.md", "docs/a.txt", false),
    ("docs/**", "docs/", true),
    ("docs/**", "docs/a", true),
    ("docs/**", "docs/a/b", true),
    ("docs/**", "docs", false),
    ("docs/**", "src/docs/a", false),
    ("docs/*.md", "docs/a.md", true),
    ("docs/*.md", "docs/x/a.md", false),
    ("docs/*.md", "docs/.md", true),
    ("*", "", true),
    ("*", "a", true),
    ("*", "a/b", false),
    ("**", "", true),
    ("**", "a/b/c", true),
    ("**/", "a", true),
    ("**/**", "a/b", true),
    ("**/a.md", "a.md", true),
    ("**/a.md", "/a.md", true),
    ("**/a.md", "x/y/a.md", true),
    ("**/a.md", "xa.md", false),
    ("**/.github/**", "sub/.github/x", true),
    ("**/.github/**", ".github/workflows/ci.yml", true),
    ("**/.github/**", ".github", false),
    ("**/.gitattributes", "a/b/.gitattributes", true),
    ("a**", "abc", true),
    ("a**", "a/b", false),
    ("**a", "bca", true),
    ("**a", "b/a", false),
    ("a/**b", "a/xb", true),
    ("a/**b", "a/x/b", false),
    ("a/**/", "a/", true),
    ("a/**/", "a/x/", true),
    ("a/**/", "a/x", false),
    ("a/**/**", "a/x", true),
    ("a/**/**/b", "a/b", true),
    ("a/**/**/b", "a/x/y/b", true),
    ("a/***", "a/x", true),
    ("a/***", "a/x/y", false),
    ("/**", "/", true),
    ("/**", "/a/b", true),
    ("/**", "a", false),
    ("?", "a", true),
    ("?", "/", false),
    ("?", "\u{e9}", false),
    ("??", "\u{e9}", true),
    ("\u{e9}*", "\u{e9}t\u{e9}", true),
    ("a?c", "abc", true),
    ("a?c", "a/c", false),
    ("", "", true),
    ("", "a", false),
    ("a,b", "a,b", true),
    (".ailang/**", ".ailang/x.ail", true),
    (".gitmodules", ".gitmodules", true),
    (".gitmodules", "x/.gitmodules", false),
];

#[test]
fn the_corpus_agrees_in_both_matchers() {
    for &(pattern, path, expected) in CORPUS {
        assert_eq!(
            globset_matches(pattern, path),
            expected,
            "globset: {pattern:?} on {path:?}"
        );
        assert_eq!(
            glob_match(pattern, path),
            expected,
            "plan language: {pattern:?} on {path:?}"
        );
    }
    assert!(CORPUS.len() >= 50);
}

#[test]
fn reserved_characters_are_what_globset_would_read_as_syntax() {
    // Each reserved character changes globset's reading (or is an error there), which is why
    // the dialect refuses it rather than reading it as a literal.
    for (pattern, path) in [("[ab]", "[ab]"), ("{a,b}", "{a,b}"), ("a\\*", "a\\*")] {
        assert!(glob::check(pattern).is_err(), "{pattern}");
        assert!(
            GlobBuilder::new(pattern)
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .map(|g| !g.compile_matcher().is_match(path))
                .unwrap_or(true),
            "{pattern}"
        );
    }
    for pattern in ["]", "}", "a[", "\\"] {
        assert!(glob::check(pattern).is_err(), "{pattern}");
    }
}

fn glob_strategy() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just("a"),
            Just("b"),
            Just("/"),
            Just("."),
            Just("*"),
            Just("**"),
            Just("?"),
            Just(","),
            Just("\u{e9}"),
        ],
        0..8,
    )
    .prop_map(|parts| parts.concat())
}

fn path_strategy() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just("a"),
            Just("b"),
            Just("/"),
            Just("."),
            Just("*"),
            Just("?"),
            Just("\u{e9}")
        ],
        0..10,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn random_globs_agree_with_globset(pattern in glob_strategy(), path in path_strategy()) {
        prop_assert_eq!(
            glob_match(&pattern, &path),
            globset_matches(&pattern, &path),
            "{:?} on {:?}", pattern, path
        );
    }
}
