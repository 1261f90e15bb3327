//! Text others wrote, shown on the operator's terminal, never acted on: by the verbs (as
//! `cli::terminal`) and by what the daemon prints of its plugins.
//!
//! Much of what the verbs print was written by someone else: a tool's description by its
//! publisher, a call's arguments by an agent, an entry's `writtenBy` by a client, and every
//! answer by the daemon the verb asked, which `why --addr` does not even trust. A terminal
//! acts on control characters and bidirectional formatting
//! ([`broker_core::plain_text::acted_on`]): an escape sequence can clear the screen, retitle
//! the window or hide a link, a carriage return can write over a line, and a line break inside
//! a value can add a line of its own (a log entry that never was). So everything the verbs
//! write passes through [`shown`] at the edge, and a value printed inside a line through
//! [`one_line`]. The escapes are JSON's (`\u001b`, `\n`), so JSON output means what it did,
//! though its bytes differ: the committed bytes `call --json-out` promises go into a pipe or
//! a file untouched (`cli::output::write_committed`), and are escaped only on a terminal.

use std::borrow::Cow;
use std::fmt::Write as _;

use broker_core::plain_text::acted_on;

/// `text` with every character a terminal acts on, other than line breaks and tabs, escaped.
pub fn shown(text: &str) -> Cow<'_, str> {
    escaped(text, |c| c != '\n' && c != '\t' && acted_on(c))
}

/// `text` as one line: its line breaks and tabs escaped too, for a value inside a line.
pub fn one_line(text: &str) -> Cow<'_, str> {
    escaped(text, acted_on)
}

/// `text` cut to at most `max` bytes (at a character's edge), saying how much was left out.
pub fn cut(text: &str, max: usize) -> Cow<'_, str> {
    let shown = head(text, max);
    if shown.len() == text.len() {
        return Cow::Borrowed(text);
    }
    Cow::Owned(format!(
        "{shown}… ({} more bytes not shown)",
        text.len() - shown.len()
    ))
}

/// The longest start of `text` of at most `max` bytes that ends at a character's edge.
pub use dialect::quote::head;

/// `path` as one word of a shell command ([`shell_word`]); a path that is not UTF-8 in
/// bash's `$'…'` quoting, its other bytes as `\xHH`, since any text shown for it would name
/// another file.
pub fn shell_path(path: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    match path.to_str() {
        Some(text) => shell_word(text).into_owned(),
        None => dollar_quoted(path.as_os_str().as_bytes()),
    }
}

/// `text` as one word of a shell command, for the lines messages give to paste (`chmod 700
/// PATH`, `export WORLD_SESSION=PATH`): as it is when it holds only characters no shell reads
/// specially, else in single quotes (a `'` in it as `'\''`). A path with a space printed bare
/// was split in two by the paste, and one holding `;` or `$(…)` ran commands. Text holding a
/// character the terminal filter escapes ([`shown`]: a line break, ESC, a bidi control) is in
/// `$'…'` quoting instead, its bytes as `\xHH`: quoted raw, the filter would print another
/// word than the one that names the file.
pub fn shell_word(text: &str) -> Cow<'_, str> {
    if text.chars().any(acted_on) {
        return Cow::Owned(dollar_quoted(text.as_bytes()));
    }
    // A relative path starting with `-` would be read as options: `./` keeps it a path.
    if text.starts_with('-') {
        return Cow::Owned(shell_word(&format!("./{text}")).into_owned());
    }
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+,:@%=".contains(c);
    // A leading `=` is a command's path to zsh.
    if !text.is_empty() && text.chars().all(plain) && !text.starts_with('=') {
        return Cow::Borrowed(text);
    }
    Cow::Owned(format!("'{}'", text.replace('\'', "'\\''")))
}

/// `bytes` in bash's `$'…'` quoting: printable ASCII as it is (`\` and `'` escaped), every
/// other byte as `\xHH`; `./` first where a leading `-` would be read as options.
fn dollar_quoted(bytes: &[u8]) -> String {
    let mut out = String::from("$'");
    if bytes.first() == Some(&b'-') {
        out.push_str("./");
    }
    for &b in bytes {
        match b {
            b'\\' | b'\'' => {
                out.push('\\');
                out.push(char::from(b));
            }
            0x20..=0x7e => out.push(char::from(b)),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    out.push('\'');
    out
}

fn escaped(text: &str, escape: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(&escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            c if !escape(c) => out.push(c),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fix command's path printed bare split at a space when pasted; one a shell would split
    /// or read is single-quoted now, and a plain one is printed as it is.
    /// A path that is not UTF-8 was shown with U+FFFD in place of its bytes, so the command
    /// pasted named another file: it is given in bash's `$'…'` quoting, byte for byte.
    #[test]
    fn a_path_that_is_not_utf8_is_given_to_paste_byte_for_byte() {
        use std::os::unix::ffi::OsStrExt;
        let path = std::path::Path::new(std::ffi::OsStr::from_bytes(b"/tmp/bad\xff/it's db"));
        assert_eq!(shell_path(path), "$'/tmp/bad\\xff/it\\'s db'");
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("printf %s {}", shell_path(path)))
            .output()
            .unwrap();
        assert_eq!(out.stdout, path.as_os_str().as_bytes());
        assert_eq!(shell_path(std::path::Path::new("/srv/db")), "/srv/db");
    }

    #[test]
    fn a_path_to_paste_is_quoted_only_where_a_shell_would_split_or_read_it() {
        for (path, word) in [
            ("/srv/world/db", "/srv/world/db"),
            (".world/plugin-state", ".world/plugin-state"),
            ("http://127.0.0.1:7644", "http://127.0.0.1:7644"),
            ("/tmp/sp ace/db", "'/tmp/sp ace/db'"),
            ("/tmp/it's", "'/tmp/it'\\''s'"),
            ("/tmp/x;touch PWNED;", "'/tmp/x;touch PWNED;'"),
            ("/tmp/$(id)", "'/tmp/$(id)'"),
            ("~/db", "'~/db'"),
            ("=ls", "'=ls'"),
            ("-d/db", "./-d/db"),
            ("-x y", "'./-x y'"),
            ("/tmp/a\nb", "$'/tmp/a\\x0ab'"),
            ("/tmp/\u{202e}x", "$'/tmp/\\xe2\\x80\\xaex'"),
            ("", "''"),
        ] {
            assert_eq!(shell_word(path), word, "{path:?}");
        }
    }

    #[test]
    fn escape_sequences_carriage_returns_and_bidi_overrides_are_shown_not_acted_on() {
        let hostile = "D\u{1b}]0;pwned\u{7}\u{1b}[2J\r\u{8}\u{202e}evil\u{9b}2J\nline2\té…✓";
        assert_eq!(
            shown(hostile),
            "D\\u001b]0;pwned\\u0007\\u001b[2J\\r\\u0008\\u202eevil\\u009b2J\nline2\té…✓"
        );
        assert_eq!(
            one_line(hostile),
            "D\\u001b]0;pwned\\u0007\\u001b[2J\\r\\u0008\\u202eevil\\u009b2J\\nline2\\té…✓"
        );
        // Plain text is handed back as it is, without a copy.
        assert!(matches!(shown("plain ✓ text\n"), Cow::Borrowed(_)));
    }

    /// A tool's description holding U+2028 or U+2029 (Unicode's line and paragraph
    /// separators) went out raw in `tools list`, a line break to every viewer that reads
    /// Unicode: a summary line of the publisher's making. They are escaped as `\n` is.
    #[test]
    fn unicode_line_and_paragraph_separators_are_escaped_too() {
        let text = "one\u{2028}two\u{2029}three";
        assert_eq!(one_line(text), "one\\u2028two\\u2029three");
        assert_eq!(shown(text), "one\\u2028two\\u2029three");
    }

    #[test]
    fn a_long_message_is_cut_at_a_characters_edge_and_says_so() {
        assert_eq!(cut("short", 8), "short");
        assert_eq!(cut("ééééé", 5), "éé… (6 more bytes not shown)");
    }

    #[test]
    fn json_escaped_for_the_terminal_is_the_same_json() {
        let value = serde_json::json!({"s": "a\u{9b}b\u{202e}c\u{7f}", "t": "x"});
        let text = value.to_string();
        assert_ne!(shown(&text), text);
        let back: serde_json::Value = serde_json::from_str(&shown(&text)).unwrap();
        assert_eq!(back, value);
    }
}
