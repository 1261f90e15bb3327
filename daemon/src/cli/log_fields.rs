//! How the fields of a log line are written: each on the line it belongs to.
//!
//! A log line carries text the daemon does not control: a plugin's message, a handler's
//! failure (an `ailang` diagnostic quoting the agent's program), a path an agent chose. Written
//! as it is, a newline in such text starts what looks like a line of the daemon's own
//! (`2026-12-03T16:00:00Z  INFO worldd: …`), and an escape sequence reaches the operator's
//! terminal. tracing's own formatter escapes escape sequences but not line breaks, so every
//! field is written through [`escape`]: line breaks and other control characters become
//! visible escapes, one event stays one line.

use std::fmt::Write;

use broker_core::plain_text::acted_on;

use tracing_subscriber::field::MakeExt;
use tracing_subscriber::fmt::format::{self, Writer};
use tracing_subscriber::fmt::FormatFields;

/// The field formatter `init_tracing` installs: the message as it is, other fields
/// `name=value`, space-separated, each escaped.
pub fn fields() -> impl for<'w> FormatFields<'w> + Send + Sync + 'static {
    format::debug_fn(
        |w: &mut Writer<'_>, field: &tracing::field::Field, value: &dyn std::fmt::Debug| {
            let raw = format!("{value:?}");
            let text = escape(&raw);
            if field.name() == "message" {
                w.write_str(&text)
            } else {
                write!(w, "{}={}", field.name(), text)
            }
        },
    )
    .delimited(" ")
}

/// `text` with every character a terminal acts on but the tab written as an escape: `\n`,
/// `\r`, and `\u{xx}` for the rest. The characters are those the CLI escapes (`crate::text`,
/// [`acted_on`]): the controls (DEL and the C1 controls included), and the bidirectional
/// overrides and isolates and Unicode's line and paragraph separators, which a log viewer
/// acts on too (a U+202E shows the rest of the line, the daemon's own fields included,
/// reversed; a U+2028 breaks it).
pub fn escape(text: &str) -> std::borrow::Cow<'_, str> {
    let control = |c: char| c != '\t' && acted_on(c);
    if !text.chars().any(control) {
        return text.into();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if control(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_breaks_and_controls_are_escaped_and_plain_text_is_kept() {
        assert_eq!(escape("plain text, tab\there é"), "plain text, tab\there é");
        assert_eq!(
            escape("a\n2026-12-03T16:00:00Z  INFO worldd: forged\r\n"),
            "a\\n2026-12-03T16:00:00Z  INFO worldd: forged\\r\\n"
        );
        assert_eq!(
            escape("\u{1b}[31mred\u{7}\u{7f}\u{9b}"),
            "\\u{1b}[31mred\\u{7}\\u{7f}\\u{9b}"
        );
    }

    /// A plugin's message holding U+202E (RIGHT-TO-LEFT OVERRIDE) reached the log raw: a
    /// bidi-aware viewer showed the rest of the line, ` plugin=NAME` included, reversed. And
    /// U+2028 broke the line in viewers that honour it. They are escaped as the CLI escapes
    /// them.
    #[test]
    fn bidi_overrides_isolates_and_unicode_line_separators_are_escaped_in_the_log() {
        assert_eq!(
            escape("a\u{202a}\u{202b}\u{202c}\u{202d}\u{202e}evil\u{2066}\u{2067}\u{2068}\u{2069}b\u{2028}c\u{2029}d"),
            "a\\u{202a}\\u{202b}\\u{202c}\\u{202d}\\u{202e}evil\\u{2066}\\u{2067}\\u{2068}\\u{2069}b\\u{2028}c\\u{2029}d"
        );
        assert_eq!(escape("tab\tand é ✓"), "tab\tand é ✓");
    }
}
