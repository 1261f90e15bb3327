//! Text a terminal shows as it is written.
//!
//! A terminal acts on some characters instead of showing them: the control characters (C0,
//! DEL and C1: escape sequences that move the cursor, clear the screen, set the window's
//! title or make a link; a carriage return that writes over the line), the bidirectional
//! formatting characters (which reorder what follows, so that text reads other than it is),
//! and Unicode's own line and paragraph separators (U+2028, U+2029: a line break to editors,
//! pagers and log viewers, so a value holding one makes a line of its own).
//! Strings the log keeps for people to read (who wrote an entry, what kind of object it is)
//! hold none of them ([`crate::commit`] refuses a commit whose do), and what the command line
//! prints of anything else escapes them.

/// Whether a terminal acts on `c` instead of showing it.
///
/// ```
/// use broker_core::plain_text::acted_on;
/// assert!(acted_on('\u{1b}') && acted_on('\n') && acted_on('\u{9b}') && acted_on('\u{202e}'));
/// assert!(acted_on('\u{2028}') && acted_on('\u{2029}'));
/// assert!(!acted_on('a') && !acted_on('é') && !acted_on('…') && !acted_on('✓'));
/// ```
pub fn acted_on(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// The first character of `text` a terminal acts on, if any.
pub fn first_acted_on(text: &str) -> Option<char> {
    text.chars().find(|c| acted_on(*c))
}
