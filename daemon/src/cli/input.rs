//! What the verbs read from files and standard input, read to a bound. A file's size says
//! nothing of a device or a pipe (`--session /dev/zero`, `worldd why - < /dev/zero`), which
//! would otherwise be read until memory ran out.

use std::io::Read;

use super::Failure;

/// A session file: one credential (64 hex digits) and a newline, with room to spare.
pub const SESSION_FILE_BYTES: u64 = 256;
/// A call's arguments, a bundle to publish, the output `why` is given: the daemon takes no
/// request body near this size.
pub const DOCUMENT_BYTES: u64 = 64 << 20;
/// A configuration file.
pub const CONFIG_BYTES: u64 = 1 << 20;

/// Read `from` whole as text, refusing more than `limit` bytes: `what` names it in the
/// refusal (`session file F`, `stdin`).
pub fn text(from: impl Read, limit: u64, what: &str) -> Result<String, Failure> {
    String::from_utf8(bytes(from, limit, what)?)
        .map_err(|_| Failure::usage(format!("{what}: not UTF-8 text")))
}

/// Read `from` whole, refusing more than `limit` bytes.
pub fn bytes(from: impl Read, limit: u64, what: &str) -> Result<Vec<u8>, Failure> {
    let mut out = Vec::new();
    from.take(limit.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| Failure::usage(format!("{what}: {e}")))?;
    if out.len() as u64 > limit {
        return Err(Failure::usage(format!(
            "{what} is larger than {limit} bytes"
        )));
    }
    Ok(out)
}

/// The credential a session file holds: the text trimmed of surrounding whitespace and of a
/// leading byte-order mark, which some editors write at the start of a file saved as UTF-8.
pub fn credential(text: &str) -> &str {
    text.trim_start().trim_start_matches('\u{feff}').trim()
}

/// Open `path` and read it whole as text, refusing more than `limit` bytes.
pub fn file_text(path: &std::path::Path, limit: u64, what: &str) -> Result<String, Failure> {
    let file = std::fs::File::open(path).map_err(|e| Failure::usage(format!("{what}: {e}")))?;
    text(file, limit, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_stops_one_byte_past_its_bound() {
        assert_eq!(text(&b"abc"[..], 3, "x").unwrap(), "abc");
        let e = text(&b"abcd"[..], 3, "session file f").unwrap_err();
        assert_eq!(e.message, "session file f is larger than 3 bytes");
        // An endless source is read no further than the bound.
        let e = bytes(std::io::repeat(0), 1000, "stdin").unwrap_err();
        assert_eq!(e.message, "stdin is larger than 1000 bytes");
        assert_eq!(
            text(&[0xffu8][..], 3, "f").unwrap_err().message,
            "f: not UTF-8 text"
        );
    }
}
