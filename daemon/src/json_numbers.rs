//! Number literals of a JSON text that a reader cannot take, found and blanked on the text
//! itself: both JSON-RPC surfaces use this to tell where such a number lies (inside a
//! request's `params`, or in its envelope) without the parse that refused it.
//!
//! A body is read twice with each such literal blanked (same length, so a real syntax error
//! later in it is reported where it is), once as `null` and once as `0`; what differs between
//! the two readings is where the literals were ([`same_but_params`]).

use std::ops::Range;

use serde_json::Value;

/// Where each number literal of `body` that `keep` holds lies (outside strings).
pub(crate) fn literals(body: &[u8], keep: impl Fn(&str) -> bool) -> Vec<Range<usize>> {
    let mut found = Vec::new();
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b'"' => {
                // Past the string: a backslash takes the byte after it along.
                i += 1;
                while i < body.len() && body[i] != b'"' {
                    i += if body[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < body.len()
                    && matches!(body[i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
                {
                    i += 1;
                }
                let kept = std::str::from_utf8(&body[start..i]).is_ok_and(&keep);
                if kept {
                    found.push(start..i);
                }
            }
            _ => i += 1,
        }
    }
    found
}

/// `body` with each of `literals` replaced by `with`, padded with spaces to its length
/// (every literal that overflows a double has at least five bytes: `1e309`).
pub(crate) fn blanked(body: &[u8], literals: &[Range<usize>], with: &[u8]) -> Vec<u8> {
    let mut out = body.to_vec();
    for r in literals {
        let slot = &mut out[r.clone()];
        slot.fill(b' ');
        let n = with.len().min(slot.len());
        slot[..n].copy_from_slice(&with[..n]);
    }
    out
}

/// Whether two readings of one request differ only inside `params`.
pub(crate) fn same_but_params(mut a: Value, mut b: Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object_mut(), b.as_object_mut()) else {
        return false;
    };
    a.remove("params");
    b.remove("params");
    a == b
}

/// Whether `text`, a number literal, overflows a double.
pub(crate) fn infinite(text: &str) -> bool {
    text.parse::<f64>().is_ok_and(f64::is_infinite)
}

/// Whether `text`, a number literal, is an integer outside −2^63 to 2^64−1.
pub(crate) fn wider_than_64_bits(text: &str) -> bool {
    !text.contains(['.', 'e', 'E']) && text.parse::<i64>().is_err() && text.parse::<u64>().is_err()
}
