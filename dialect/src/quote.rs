//! JSON string literals, written one way everywhere.
//!
//! The escaping is RFC 8785's (and serde_json's): `"` and `\` get a backslash, `\b \t \n \f \r`
//! their short forms, every other control character below U+0020 `\u00xx` (lowercase hex);
//! everything else, U+007F and non-ASCII included, is written as it is. So a literal from
//! [`json_string`] can be pasted into canonical JSON, and a value quoted into a message with
//! [`quote`] can never break the message (no raw quote, newline or control character).
//!
//! | function | gives | for |
//! |---|---|---|
//! | [`json_string`] | the whole string as a JSON literal, quotes included | canonical JSON built by hand (policy digests), names in protocol errors |
//! | [`quote`] | a JSON literal of at most [`MAX_QUOTED_BYTES`] bytes of the value, `…` before the closing quote when cut | values a caller controls, quoted into a refusal |
//! | [`escape`] | the inside of [`quote`], without the quotes | refusal templates that write the quotes themselves (`path "{value}" refused`) |
//! | [`json_string_len`] | the bytes [`json_string`] would produce, without building it | sizing a result before it exists |
//! | [`push_json_string`], [`push_escaped`] | the same, appended to a buffer | canonical JSON (broker-core's `canon`) |
//! | [`push_escaped_bytes`] | [`push_escaped`] appended to bytes | an answer written around JSON already in bytes (the MCP reply's text) |

/// Longest part of a value (in bytes of the value, before escaping) that [`quote`] and
/// [`escape`] write; a longer value is cut at the last character boundary at or below it.
pub const MAX_QUOTED_BYTES: usize = 256;

/// Append `s` to `out` escaped as inside a JSON string (no quotes). Runs of characters that
/// need no escape are copied in one go: canonical JSON writes every string through here. The
/// scan is by byte: every character that needs an escape is ASCII, and no byte of a multi-byte
/// UTF-8 character is below 0x80, so each escape sits at a character boundary. Where none needs
/// an escape, which is nearly all of a call's text (file contents, refs), 32 bytes are tested a
/// step, then eight.
pub fn push_escaped(out: &mut String, s: &str) {
    escape_into(out, s);
}

/// [`push_escaped`] into bytes: for an answer written around JSON that is already bytes (the
/// MCP reply that carries a committed output as text).
pub fn push_escaped_bytes(out: &mut Vec<u8>, s: &str) {
    out.reserve(s.len());
    escape_into(out, s);
}

/// Where escaped text goes: a `String`, or bytes that stay UTF-8 because only whole `str`s
/// are appended.
trait Sink {
    fn push_str(&mut self, s: &str);
}

impl Sink for String {
    fn push_str(&mut self, s: &str) {
        String::push_str(self, s);
    }
}

impl Sink for Vec<u8> {
    fn push_str(&mut self, s: &str) {
        self.extend_from_slice(s.as_bytes());
    }
}

fn escape_into(out: &mut impl Sink, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut run_start = 0;
    for (i, b) in Escapes::new(s) {
        out.push_str(&s[run_start..i]);
        run_start = i + 1;
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x08 => out.push_str("\\b"),
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            0x0c => out.push_str("\\f"),
            b'\r' => out.push_str("\\r"),
            // Remaining control characters: \u00xx with lowercase hex.
            _ => {
                let hex = [
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX[usize::from(b >> 4)],
                    HEX[usize::from(b & 0xf)],
                ];
                // Six ASCII bytes.
                out.push_str(std::str::from_utf8(&hex).unwrap_or_default());
            }
        }
    }
    out.push_str(&s[run_start..]);
}

/// The bytes of a string that need an escape, with their places, in order. 32 bytes are tested
/// a step, then eight; a word holding one is walked byte by byte.
struct Escapes<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Escapes<'a> {
    fn new(s: &'a str) -> Self {
        Escapes {
            bytes: s.as_bytes(),
            at: 0,
        }
    }
}

impl Iterator for Escapes<'_> {
    type Item = (usize, u8);

    // Inlined into each writer: it is called once per escape, and a call's cost is most of
    // what finding an escape a few bytes on costs.
    #[inline(always)]
    fn next(&mut self) -> Option<(usize, u8)> {
        // Four words a step while none of them needs an escape: one test and one branch per
        // 32 bytes of a file's text, instead of one per 8.
        while let Some(block) = self
            .bytes
            .get(self.at..)
            .and_then(<[u8]>::first_chunk::<BLOCK>)
        {
            if block_needs_escape(block) {
                break;
            }
            self.at += BLOCK;
        }
        while self.at < self.bytes.len() {
            if let Some(w) = word_at(self.bytes, self.at) {
                if !word_needs_escape(w) {
                    self.at += WORD;
                    continue;
                }
            }
            let (i, b) = (self.at, self.bytes[self.at]);
            self.at += 1;
            if needs_escape(b) {
                return Some((i, b));
            }
        }
        None
    }
}

/// Bytes tested at once by [`word_needs_escape`].
const WORD: usize = std::mem::size_of::<u64>();

/// Bytes tested at once by [`block_needs_escape`].
const BLOCK: usize = 4 * WORD;

/// Whether any byte of `block` [`needs_escape`]: its four words' marks joined, then tested once.
fn block_needs_escape(block: &[u8; BLOCK]) -> bool {
    let word = |i: usize| {
        let mut w = [0u8; WORD];
        w.copy_from_slice(&block[i * WORD..(i + 1) * WORD]);
        escape_marks(u64::from_le_bytes(w))
    };
    word(0) | word(1) | word(2) | word(3) != 0
}

/// The `WORD` bytes of `bytes` from `i`, if there are that many.
fn word_at(bytes: &[u8], i: usize) -> Option<u64> {
    let chunk = bytes.get(i..i.checked_add(WORD)?)?;
    Some(u64::from_le_bytes(chunk.try_into().ok()?))
}

/// A byte JSON escapes: a control character below 0x20, `"` or `\`.
fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// Whether any of the eight bytes of `w` [`needs_escape`]. The classic has-zero-byte and
/// has-byte-less-than tests: a borrow can mark bytes after the first match wrongly, but the
/// whole word is marked exactly when one of its bytes matches (the bound 0x20 is at most 0x80,
/// as the less-than test needs).
fn word_needs_escape(w: u64) -> bool {
    escape_marks(w) != 0
}

/// The high bits [`word_needs_escape`] tests: not zero exactly when a byte of `w` needs an
/// escape.
fn escape_marks(w: u64) -> u64 {
    const ONES: u64 = u64::from_le_bytes([0x01; WORD]);
    const HIGH: u64 = u64::from_le_bytes([0x80; WORD]);
    let has_zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let below_space = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
    let quote = has_zero(w ^ (ONES * u64::from(b'"')));
    let backslash = has_zero(w ^ (ONES * u64::from(b'\\')));
    below_space | quote | backslash
}

/// Append `s` to `out` as a JSON string literal, quotes included.
pub fn push_json_string(out: &mut String, s: &str) {
    // One reservation for the common case of nothing to escape, instead of a doubling per
    // power of two of a long string.
    out.reserve(s.len() + 2);
    out.push('"');
    push_escaped(out, s);
    out.push('"');
}

/// The longest start of `s` of at most `max` bytes that ends at a character's edge: where
/// every layer cuts a text it shows only the start of (a character is never split, so the cut
/// is still UTF-8).
///
/// ```
/// assert_eq!(dialect::quote::head("héllo", 2), "h");
/// assert_eq!(dialect::quote::head("héllo", 3), "hé");
/// assert_eq!(dialect::quote::head("hi", 10), "hi");
/// ```
pub fn head(s: &str, max: usize) -> &str {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `s` cut at the last character boundary at or below [`MAX_QUOTED_BYTES`], and whether it was
/// cut.
fn bounded(s: &str) -> (&str, bool) {
    let shown = head(s, MAX_QUOTED_BYTES);
    (shown, shown.len() < s.len())
}

/// The whole of `s` as a JSON string literal, quotes included.
pub fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    push_json_string(&mut out, s);
    out
}

/// `s` escaped as inside a JSON string (no quotes), cut after [`MAX_QUOTED_BYTES`] bytes of
/// `s` with `…` appended when it was cut.
pub fn escape(s: &str) -> String {
    let (part, cut) = bounded(s);
    let mut out = String::with_capacity(part.len() + 4);
    push_escaped(&mut out, part);
    if cut {
        out.push('…');
    }
    out
}

/// `s` as a JSON string literal for a message: [`escape`] between double quotes, so at most
/// [`MAX_QUOTED_BYTES`] bytes of `s` and `…` before the closing quote when it was cut.
pub fn quote(s: &str) -> String {
    format!("\"{}\"", escape(s))
}

/// The length in bytes of [`json_string`]`(s)`, computed without building it.
pub fn json_string_len(s: &str) -> u64 {
    let escapes: u64 = Escapes::new(s)
        .map(|(_, b)| match b {
            b'"' | b'\\' | 0x08 | b'\t' | b'\n' | 0x0c | b'\r' => 1,
            _ => 5,
        })
        .sum();
    s.len() as u64 + escapes + 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_character_below_0x80_is_escaped_as_serde_json_does() {
        for n in 0u32..0x80 {
            let c = char::from_u32(n).unwrap_or('?');
            let s = format!("a{c}b");
            let expected = serde_json::to_string(&s).unwrap_or_default();
            assert_eq!(json_string(&s), expected, "U+{n:04X}");
            assert_eq!(json_string_len(&s), expected.len() as u64, "U+{n:04X}");
            let mut bytes = Vec::new();
            push_escaped_bytes(&mut bytes, &s);
            assert_eq!(
                bytes,
                expected.as_bytes()[1..expected.len() - 1],
                "U+{n:04X}"
            );
        }
        let s = "é\u{7f}\u{2028}😀";
        assert_eq!(json_string(s), serde_json::to_string(s).unwrap_or_default());
    }

    #[test]
    fn an_escape_is_found_at_any_place_in_a_long_run_without_one() {
        for len in [31, 32, 33, 64, 100] {
            for at in 0..len {
                for c in ['"', '\\', '\n', '\u{1f}'] {
                    let mut s: String = "x".repeat(len);
                    s.replace_range(at..=at, &c.to_string());
                    let expected = serde_json::to_string(&s).unwrap_or_default();
                    assert_eq!(json_string(&s), expected, "{len} {at} {c:?}");
                    assert_eq!(
                        json_string_len(&s),
                        expected.len() as u64,
                        "{len} {at} {c:?}"
                    );
                }
            }
        }
    }

    proptest::proptest! {
        /// Any string, escapes and multi-byte characters mixed, is quoted as serde_json does.
        #[test]
        fn any_string_is_quoted_as_serde_json_does(s in "(\\PC|[\\x00-\\x1f\"\\\\]|é|😀){0,40}|x{30,70}[\\x00-\\x1f\"\\\\]x{0,40}") {
            let expected = serde_json::to_string(&s).unwrap_or_default();
            proptest::prop_assert_eq!(json_string(&s), expected.clone());
            proptest::prop_assert_eq!(json_string_len(&s), expected.len() as u64);
            let mut bytes = b"x".to_vec();
            push_escaped_bytes(&mut bytes, &s);
            proptest::prop_assert_eq!(&bytes[1..], &expected.as_bytes()[1..expected.len() - 1]);
        }

        /// Long runs that need no escape, broken anywhere by one that does: the eight-byte
        /// test skips exactly the words with nothing to escape, wherever the escapes fall
        /// against the words' boundaries.
        #[test]
        fn escapes_between_long_plain_runs_are_quoted_as_serde_json_does(
            s in "([ -~]{0,19}|[\\x00-\\x1f\"\\\\\\x7f]|é|😀){0,24}",
        ) {
            let expected = serde_json::to_string(&s).unwrap_or_default();
            proptest::prop_assert_eq!(json_string(&s), expected.clone());
            proptest::prop_assert_eq!(json_string_len(&s), expected.len() as u64);
            let mut bytes = b"x".to_vec();
            push_escaped_bytes(&mut bytes, &s);
            proptest::prop_assert_eq!(&bytes[1..], &expected.as_bytes()[1..expected.len() - 1]);
        }
    }

    #[test]
    fn a_word_needs_an_escape_exactly_when_one_of_its_bytes_does() {
        // Fillers that need no escape, ASCII and not, around every byte at every place.
        for filler in [b'x', b' ', b'#', b']', 0x21, 0x7f, 0x80, 0x9f, 0xc3, 0xff] {
            for place in 0..WORD {
                for b in 0..=u8::MAX {
                    let mut word = [filler; WORD];
                    word[place] = b;
                    assert_eq!(
                        word_needs_escape(u64::from_le_bytes(word)),
                        needs_escape(b),
                        "byte {b:#04x} at {place} among {filler:#04x}"
                    );
                }
            }
        }
    }

    #[test]
    fn quoted_values_are_cut_at_a_character_boundary() {
        assert_eq!(quote("a\"b\\c\nd\u{1}"), r#""a\"b\\c\nd\u0001""#);
        assert_eq!(escape("a\"b"), r#"a\"b"#);
        let exact = "x".repeat(MAX_QUOTED_BYTES);
        assert_eq!(quote(&exact), format!("\"{exact}\""));
        let long = format!("{}é", "x".repeat(MAX_QUOTED_BYTES - 1));
        assert_eq!(
            quote(&long),
            format!("\"{}…\"", "x".repeat(MAX_QUOTED_BYTES - 1))
        );
        // Escapes do not count against the bound: it is the value's bytes that are cut.
        let quotes = "\"".repeat(MAX_QUOTED_BYTES + 1);
        assert_eq!(
            escape(&quotes),
            format!("{}…", "\\\"".repeat(MAX_QUOTED_BYTES))
        );
    }
}
