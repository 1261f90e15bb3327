//! Protected path names: when two names count as the same name.
//!
//! A worktree may sit on a case-insensitive or normalising file system, and git itself refuses
//! `.GIT` as it refuses `.git`. So a rule about a name (`.git` is read-only, a deny glob) must
//! apply to every name that *could* be that name somewhere. This module fixes the comparison:
//!
//! - [`fold`] maps a name to its **folded** form: Unicode compatibility normalisation (NFKC),
//!   full case folding (Unicode `CaseFolding.txt`, statuses C and F), NFKC again, and removal
//!   of every default-ignorable code point (zero-width spaces and joiners, bidi controls,
//!   variation selectors, `U+00AD`, `U+FEFF`, …; the characters HFS+ ignores are among them).
//!   `．git` (full-width full stop), `.ＧＩＴ`, `.GIT` and `.g` + zero-width space + `it` all
//!   fold to `.git`; an ASCII name folds to its lowercase.
//! - [`is_git_name`]: a path component is **named like `.git`** when its folded form, with
//!   trailing dots and spaces removed (Windows drops them), is `.git`, or is `git~1` (the
//!   8.3 short name of `.git`).
//! - [`fold_path`] folds every `/`-separated component of a relative path; globs are matched
//!   against folded paths with folded patterns.
//!
//! Folding only ever makes more names equal, so a rule applied to folded names refuses a
//! superset of what it refuses on exact names: it can over-refuse a name, never let one through.

use caseless::Caseless;
use unicode_normalization::UnicodeNormalization;

/// The folded form of one name (see the module docs).
pub fn fold(name: &str) -> String {
    // ASCII is its own NFKC form, folds to its lowercase and holds no default-ignorable code
    // point: the names of nearly every path, without the three passes.
    if name.is_ascii() {
        return name.to_ascii_lowercase();
    }
    unicode_fold(name)
}

/// [`fold`] by the Unicode passes themselves, whatever the name.
fn unicode_fold(name: &str) -> String {
    name.nfkc()
        .default_case_fold()
        .nfkc()
        .filter(|c| !default_ignorable(*c))
        .collect()
}

/// Every `/`-separated component of `path` folded; empty components are kept as they are.
pub fn fold_path(path: &str) -> String {
    path.split('/').map(fold).collect::<Vec<_>>().join("/")
}

/// Whether one path component is named like `.git` (see the module docs).
pub fn is_git_name(component: &str) -> bool {
    let folded = fold(component);
    let trimmed = folded.trim_end_matches(['.', ' ']);
    trimmed == ".git" || folded == "git~1"
}

/// The first component of a `/`-separated path that is named like `.git`, as the path up to
/// and including it (`"sub/.GIT"` for `"sub/.GIT/config"`).
pub fn git_component(path: &str) -> Option<&str> {
    let mut end = 0;
    for (i, component) in path.split('/').enumerate() {
        if i > 0 {
            end += 1;
        }
        end += component.len();
        if is_git_name(component) {
            return path.get(..end);
        }
    }
    None
}

/// What the tools that read a worktree say of git's own data, whichever plugin refuses it. A
/// repository's metadata is not part of the worktree an agent reads: a linked worktree's `.git`
/// is a gitfile naming the operator's repository by its absolute host path
/// (`gitdir: /home/…/repo/.git/worktrees/ep`), and a `.git/config` may hold remote URLs with
/// credentials.
pub const GIT_UNREAD: &str =
    ".git/ is git's own data, not worktree content; the lane's tools do not read it";

/// How a plugin that reads a file names why it will not read one with more than one link.
pub const READS_ONE_LINK: &str = "this policy reads only files with one link";

/// The refusal of a regular file with `links` hard links, `so` saying what the plugin does
/// instead ([`READS_ONE_LINK`]): the Workspace plugin's words, which every shipped plugin
/// that reads or records worktree files gives. A hard link planted in the worktree names a
/// file outside it (or in git's own data), which no walk of names can see.
pub fn hard_linked(links: u64, so: &str) -> String {
    format!(
        "the file has {links} hard links; a hard link can name a file outside the worktree, so {so}"
    )
}

/// A refusal's words for `named`, the part of a path [`git_component`] found: `rule` alone for
/// `.git` itself; for a look-alike, that it is named like `.git` (shown as `shown`, in the
/// caller's quoting), then `rule`.
pub fn named_like_git(named: &str, shown: &str, rule: &str) -> String {
    if named == ".git" {
        rule.to_owned()
    } else {
        format!(
            "{shown} is named like .git (names are compared after NFKC and case folding); {rule}"
        )
    }
}

/// The first character of `name` that is not shown as itself: a control character (C0, DEL,
/// C1: a newline, an escape) or a default-ignorable code point (zero-width characters, bidi
/// controls such as U+202E, which reverses how the text after it is shown). A name holding
/// one can pass for another (`\u{202e}sr.niam` shows as `main.rs`), in a listing, a diff or
/// a review.
pub fn unshown_char(name: &str) -> Option<char> {
    name.chars()
        .find(|&c| c.is_control() || default_ignorable(c))
}

/// Unicode's `Default_Ignorable_Code_Point` property (DerivedCoreProperties.txt, stable since
/// Unicode 6): characters with no visible rendering that file systems and renderers may drop.
fn default_ignorable(c: char) -> bool {
    matches!(
        c as u32,
        0x00AD
            | 0x034F
            | 0x061C
            | 0x115F..=0x1160
            | 0x17B4..=0x17B5
            | 0x180B..=0x180F
            | 0x200B..=0x200F
            | 0x202A..=0x202E
            | 0x2060..=0x206F
            | 0x3164
            | 0xFE00..=0xFE0F
            | 0xFEFF
            | 0xFFA0
            | 0xFFF0..=0xFFF8
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0000..=0xE0FFF
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_show_as_another_are_found_by_their_first_unshown_character() {
        assert_eq!(unshown_char("src/main.rs"), None);
        assert_eq!(unshown_char("notes/caf\u{e9}.txt"), None);
        assert_eq!(unshown_char("\u{202e}sr.niam\u{202c}"), Some('\u{202e}'));
        assert_eq!(unshown_char("ma\u{200b}in.rs"), Some('\u{200b}'));
        assert_eq!(unshown_char("a\u{2067}b"), Some('\u{2067}'));
        assert_eq!(unshown_char("line\nbreak"), Some('\n'));
        assert_eq!(unshown_char("esc\u{1b}[31m"), Some('\u{1b}'));
        assert_eq!(unshown_char("c1\u{9b}"), Some('\u{9b}'));
        assert_eq!(unshown_char("tag\u{e0041}"), Some('\u{e0041}'));
    }

    #[test]
    fn look_alikes_of_dot_git_are_named_like_it() {
        for name in [
            ".git",
            ".GIT",
            ".Git",
            "\u{ff0e}git",               // full-width full stop
            ".\u{ff27}\u{ff29}\u{ff34}", // full-width GIT
            ".g\u{200b}it",              // zero-width space
            ".g\u{200c}it",              // zero-width non-joiner (HFS+ ignores it)
            "\u{feff}.git",              // byte order mark
            ".git.",
            ".git ",
            ".git. .",
            "GIT~1",
            "git~1",
            ".g\u{0131}t", // dotless i does not fold to i ...
        ] {
            let expected = !name.contains('\u{0131}');
            assert_eq!(is_git_name(name), expected, "{name:?}");
        }
        for name in [
            "git",
            ".gitx",
            "x.git",
            ".gitignore",
            ".g-it",
            "",
            ".",
            "..",
        ] {
            assert!(!is_git_name(name), "{name:?}");
        }
    }

    #[test]
    fn an_ascii_name_folds_as_the_unicode_passes_fold_it() {
        let every: String = (0u8..0x80).map(char::from).collect();
        assert_eq!(fold(&every), unicode_fold(&every));
        for name in [".GIT", "Makefile", "a b.TXT", "GIT~1", "\u{7f}x"] {
            assert_eq!(fold(name), unicode_fold(name), "{name:?}");
        }
    }

    #[test]
    fn folding_is_nfkc_and_full_case_folding() {
        assert_eq!(fold("Stra\u{df}e"), "strasse");
        assert_eq!(fold("\u{212a}elvin"), "kelvin"); // Kelvin sign
        assert_eq!(fold("\u{fb01}le"), "file"); // ligature
        assert_eq!(fold("\u{17f}"), "s"); // long s
        assert_eq!(fold("ABC.md"), "abc.md");
        assert_eq!(
            fold_path(".GitHub/Work\u{ff26}lows/x"),
            ".github/workflows/x"
        );
        assert_eq!(fold_path("a//B"), "a//b");
    }

    #[test]
    fn git_component_names_the_prefix() {
        assert_eq!(git_component("sub/.GIT/config"), Some("sub/.GIT"));
        assert_eq!(git_component(".git"), Some(".git"));
        assert_eq!(git_component("a/b/\u{ff0e}git"), Some("a/b/\u{ff0e}git"));
        assert_eq!(git_component("a/.gitignore"), None);
    }
}
