//! worldd's one glob dialect: the plan language's `path-glob` rule and the workspace plugin's
//! deny globs are both this code.
//!
//! The dialect is globset's reading of a glob with `literal_separator(true)` and
//! `backslash_escape(true)`, restricted to the syntax below; a differential test
//! (`tests/glob_agreement.rs`) holds this matcher to globset on a corpus and on random globs.
//!
//! The dialect, matched against the whole path, byte by byte:
//!
//! | glob | matches |
//! |---|---|
//! | any character but the ones below | itself |
//! | `?` | one byte other than `/` (so one ASCII character; a multi-byte character is not matched by one `?`) |
//! | `*` | any run of bytes without `/` (possibly empty) |
//! | `**` as the whole glob (also `**/`, `**/**`) | everything |
//! | `**/` at the start | nothing, a lone leading `/`, or any run of whole components each followed by `/` (`**/a.md` matches `a.md`, `/a.md` and `x/y/a.md`) |
//! | `/**` at the end | `/` followed by anything (`docs/**` matches `docs/` and `docs/x/y`, not `docs`) |
//! | `/**/` inside | `/` or `/…/` (`docs/**/*.md` matches `docs/a.md` and `docs/x/y/a.md`) |
//! | `**` anywhere else (`a**`, `**a`, `a/**b`) | the same as `*` |
//!
//! `[`, `]`, `{`, `}` and `\` are reserved (globset's classes, alternatives and escapes) and
//! refused in every glob ([`check`], [`Glob::new`]), so the dialect has no syntax errors beyond
//! them.
//!
//! ```
//! use dialect::glob::{matches, Glob};
//!
//! assert!(matches("docs/**/*.md", "docs/a.md"));
//! let deny = Glob::new("**/.github/**").unwrap();
//! assert!(deny.is_match("sub/.github/workflows/ci.yml"));
//! assert!(Glob::new("[ab]").is_err());
//! ```

/// The reserved characters.
pub const RESERVED: [char; 5] = ['[', ']', '{', '}', '\\'];

/// `Err(text)` when `pattern` uses a reserved character.
pub fn check(pattern: &str) -> Result<(), String> {
    match pattern.chars().find(|c| RESERVED.contains(c)) {
        Some(c) => Err(format!(
            "uses the reserved character {:?}; worldd globs have only *, ** and ? (no classes, alternatives or escapes)",
            c.to_string()
        )),
        None => Ok(()),
    }
}

/// A glob checked and tokenised once, for matching many paths.
#[derive(Debug, Clone, PartialEq)]
pub struct Glob {
    toks: Vec<Tok>,
}

impl Glob {
    /// Check `pattern` ([`check`]) and tokenise it.
    pub fn new(pattern: &str) -> Result<Glob, String> {
        check(pattern)?;
        Ok(Glob {
            toks: tokens(pattern),
        })
    }

    /// Whether this glob matches the whole of `text`.
    pub fn is_match(&self, text: &str) -> bool {
        run(&self.toks, text)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Tok {
    Lit(u8),
    /// `?`
    One,
    /// `*`
    Star,
    /// `**/` at the start: `(?:/?|.*/)`.
    Prefix,
    /// `/**` at the end: `/.*`.
    Suffix,
    /// `/**/` inside: `(?:/|/.*/)`.
    Middle,
}

/// Tokens of `pattern`, with globset's reading of `**`.
fn tokens(pattern: &str) -> Vec<Tok> {
    let bytes = pattern.as_bytes();
    let mut toks: Vec<Tok> = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        i += 1;
        match b {
            b'?' => toks.push(Tok::One),
            b'*' => {
                if bytes.get(i) != Some(&b'*') {
                    toks.push(Tok::Star);
                    continue;
                }
                // The byte before the two stars (None at the start).
                let before = (i >= 2).then(|| bytes[i - 2]);
                i += 1;
                let next = bytes.get(i).copied();
                if toks.is_empty() {
                    match next {
                        None | Some(b'/') => {
                            toks.push(Tok::Prefix);
                            if next.is_some() {
                                i += 1;
                            }
                        }
                        Some(_) => toks.extend([Tok::Star, Tok::Star]),
                    }
                    continue;
                }
                if before != Some(b'/') {
                    toks.extend([Tok::Star, Tok::Star]);
                    continue;
                }
                let suffix = match next {
                    None => true,
                    Some(b'/') => {
                        i += 1;
                        false
                    }
                    Some(_) => {
                        toks.extend([Tok::Star, Tok::Star]);
                        continue;
                    }
                };
                // Replace the `/` (or recursive token) the stars follow.
                let replaced = match toks.pop() {
                    Some(Tok::Prefix) => Tok::Prefix,
                    Some(Tok::Suffix) => Tok::Suffix,
                    _ if suffix => Tok::Suffix,
                    _ => Tok::Middle,
                };
                toks.push(replaced);
            }
            b => toks.push(Tok::Lit(b)),
        }
    }
    toks
}

/// Whether `pattern` matches the whole of `text` (see the module docs), in
/// O(pattern × text).
pub fn matches(pattern: &str, text: &str) -> bool {
    run(&tokens(pattern), text)
}

fn run(toks: &[Tok], text: &str) -> bool {
    let text = text.as_bytes();
    if toks == [Tok::Prefix] {
        return true;
    }
    let n = text.len();
    // cur[i]: the tokens so far match text[..i]. Two rows, reused token after token: a deny
    // list is matched against every path a write names.
    let mut cur = vec![false; n + 1];
    let mut next = vec![false; n + 1];
    cur[0] = true;
    for tok in toks {
        // No prefix of the text matches the tokens so far: nothing after can match either.
        if !cur.contains(&true) {
            return false;
        }
        next.fill(false);
        match *tok {
            Tok::Lit(c) => {
                for i in 0..n {
                    next[i + 1] = cur[i] && text[i] == c;
                }
            }
            Tok::One => {
                for i in 0..n {
                    next[i + 1] = cur[i] && text[i] != b'/';
                }
            }
            Tok::Star => {
                let mut run = false;
                for i in 0..=n {
                    run = cur[i] || (run && i > 0 && text[i - 1] != b'/');
                    next[i] = run;
                }
            }
            Tok::Prefix => {
                // Empty, or anything ending in `/` (which covers a lone `/`). `seen`: some
                // match at k < i, so that text[k..i] can end with the `/` at i - 1.
                let mut seen = false;
                for i in 0..=n {
                    if cur[i] || (seen && i > 0 && text[i - 1] == b'/') {
                        next[i] = true;
                    }
                    seen |= cur[i];
                }
            }
            Tok::Suffix => {
                // `/` then anything: once a `/` follows a match, every later end matches.
                let mut open = false;
                for i in 0..n {
                    if cur[i] && text[i] == b'/' {
                        open = true;
                    }
                    if open {
                        next[i + 1] = true;
                    }
                }
            }
            Tok::Middle => {
                // `/` or `/` anything `/`: a match at i with text[i] == '/' opens; every later
                // `/` closes.
                let mut open = false;
                for i in 0..n {
                    if text[i] == b'/' && open {
                        next[i + 1] = true;
                    }
                    if cur[i] && text[i] == b'/' {
                        next[i + 1] = true;
                        open = true;
                    }
                }
            }
        }
        std::mem::swap(&mut cur, &mut next);
    }
    cur[n]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_of_the_module_docs() {
        assert!(matches("a.md", "a.md"));
        assert!(matches("?.md", "a.md"));
        assert!(!matches("?.md", "\u{e9}.md"));
        assert!(matches("??.md", "\u{e9}.md"));
        assert!(!matches("?", "/"));
        assert!(matches("*.md", ".md"));
        assert!(!matches("*.md", "a/b.md"));
        for all in ["**", "**/", "**/**"] {
            for t in ["", "a", "a/b", "/"] {
                assert!(matches(all, t), "{all} {t}");
            }
        }
        for t in ["a.md", "/a.md", "x/y/a.md"] {
            assert!(matches("**/a.md", t), "{t}");
        }
        assert!(!matches("**/a.md", "xa.md"));
        assert!(matches("docs/**", "docs/"));
        assert!(matches("docs/**", "docs/x/y"));
        assert!(!matches("docs/**", "docs"));
        assert!(matches("docs/**/*.md", "docs/a.md"));
        assert!(matches("docs/**/*.md", "docs/x/y/a.md"));
        assert!(!matches("docs/**/*.md", "docsa.md"));
        assert!(matches("a**", "abc"));
        assert!(!matches("a**", "a/b"));
        assert!(matches("**a", "ba"));
        assert!(matches("a/**b", "a/xb"));
        assert!(!matches("a/**b", "a/x/b"));
        assert!(matches("", ""));
        assert!(!matches("", "a"));
    }

    #[test]
    fn reserved_characters_are_refused() {
        for g in ["[ab]", "{a,b}", "a\\*", "]"] {
            assert!(check(g).is_err(), "{g}");
        }
        assert!(check("docs/**/*.md").is_ok());
    }
}
