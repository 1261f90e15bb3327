//! Canonical JSON: RFC 8785, the JSON Canonicalization Scheme (JCS).
//!
//! Every JSON document the broker hashes, signs, chains or compares is first
//! put into exactly one byte form, and that form is what gets stored and sent.
//! There is deliberately no second "pretty" or "compact" variant: the bytes a
//! client receives are exactly the bytes that were hashed, so anyone can
//! re-hash what they were given without re-serialising it, and two parties
//! that hold the same logical document always hold the same bytes.
//!
//! RFC 8785 was chosen because it is a published, independently implemented
//! scheme (JavaScript's `JSON.stringify` produces it for sorted input), so
//! clients in any language can reproduce the hashes. Its rules:
//!
//! * no insignificant whitespace;
//! * object members sorted by the UTF-16 code units of their names (not by
//!   UTF-8 bytes — the two orders differ for characters above U+FFFF versus
//!   U+E000..=U+FFFF);
//! * strings escape only `"`, `\` and control characters below U+0020
//!   (`\b \t \n \f \r` in short form, others as lowercase `\u00xx`); every
//!   other character, including U+007F, U+2028, U+2029 and `/`, is literal UTF-8;
//! * numbers are printed as ECMAScript's `Number.prototype.toString` prints
//!   an IEEE 754 double: shortest round-trip digits, `-0` as `0`, exponent form
//!   (`1e+21`, `1e-7`) only outside the plain-decimal range.
//!
//! Because a canonical number is a double, integers are restricted to the
//! range a double holds exactly, ±(2^53−1). Rather than silently rounding a
//! larger integer (and so hashing a different value than the caller meant),
//! both [`to_vec`] and [`parse`] reject it with [`CanonError::UnsafeInteger`].
//! For the same reason [`to_vec`] refuses a double whose canonical text would
//! be such an integer (`1e20` prints as `100000000000000000000`): that text
//! could not be parsed back, and everything [`to_vec`] emits must be valid
//! canonical input. [`number_to_string`] exposes the bare ECMAScript rule.
//!
//! [`parse`] is the strict entry point for untrusted bytes. It has its own
//! small recursive-descent parser instead of `serde_json::from_slice` because
//! `serde_json::Value` silently keeps the last of duplicate keys, caps nesting
//! at 127 rather than our 128, and reports lone surrogates and big integers
//! only as untyped errors. Nothing in this module panics on any input.

use serde_json::{Map, Number, Value};
use std::cmp::Ordering;
use std::fmt::Write as _;

/// Maximum nesting depth of arrays and objects, on input and on output.
///
/// `[]` has depth 1. The same limit applies to [`to_vec`] so that everything
/// it produces is accepted by [`parse`].
pub const MAX_DEPTH: usize = 128;

/// Largest integer magnitude a double represents exactly: 2^53 − 1.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Longest number text quoted verbatim in an error; longer ones are shortened
/// so that a hostile megabyte of digits does not become a megabyte of error.
const MAX_ERROR_NUMBER_LEN: usize = 64;

/// Why a document could not be parsed or canonicalised.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum CanonError {
    /// The input bytes are not valid UTF-8.
    #[error("input is not valid UTF-8")]
    NotUtf8,
    /// The input violates the RFC 8259 grammar; `message` says what and where.
    #[error("invalid JSON: {message}")]
    Syntax { message: String },
    /// An object has the same member name twice. The message quotes at most
    /// [`dialect::quote::MAX_QUOTED_BYTES`] bytes of it: it may be shown to whoever sent it.
    #[error("duplicate key {}", dialect::quote::quote(key))]
    DuplicateKey { key: String },
    /// A `\u` escape encodes a UTF-16 surrogate without its partner.
    #[error("unpaired UTF-16 surrogate in \\u escape")]
    LoneSurrogate,
    /// An integer outside ±(2^53−1), which a double cannot hold exactly.
    #[error("number {text} is outside the exact integer range of canonical JSON (±2^53−1)")]
    UnsafeInteger { text: String },
    /// NaN or an infinity, which JSON cannot express.
    #[error("non-finite number (NaN or infinity) has no JSON form")]
    NonFinite,
    /// A number literal whose magnitude overflows a double (e.g. `1e400`).
    #[error("number {text} is too large for a 64-bit float")]
    NumberOutOfRange { text: String },
    /// Arrays/objects nested more than `limit` levels deep.
    #[error("nesting deeper than {limit} levels")]
    TooDeep { limit: usize },
    /// More than `limit` values (scalars, arrays and objects, at any depth): the text would
    /// build more than the caller is willing to hold ([`parse_bounded`]).
    #[error("more than {limit} JSON values")]
    TooManyValues { limit: usize },
    /// Something other than whitespace follows the JSON value.
    #[error("trailing data after the JSON value")]
    TrailingData,
}

/// Serialises `value` in RFC 8785 canonical form.
///
/// Fails on integers outside ±(2^53−1) — including integral doubles such as
/// `1e20`, which ECMAScript would print as a plain integer literal — on
/// non-finite floats (which `serde_json::Value` cannot normally hold) and on
/// nesting deeper than [`MAX_DEPTH`]. Whatever it returns is accepted by
/// [`parse`] and satisfies [`is_canonical`].
pub fn to_vec(value: &Value) -> Result<Vec<u8>, CanonError> {
    to_string(value).map(String::into_bytes)
}

/// Like [`to_vec`], for an object held as its map (no `Value` built around it).
pub fn object_to_vec(map: &Map<String, Value>) -> Result<Vec<u8>, CanonError> {
    let mut out = String::with_capacity(256);
    write_object(&mut out, map, 0)?;
    Ok(out.into_bytes())
}

/// [`object_to_vec`] of `map` with the member `name` set to `member`, canonical JSON text
/// written where canonical order puts it (a member of `map` with that name is replaced, as
/// inserting it into the map would): for an answer whose reserved member the broker adds to
/// what a handler returned, without copying the handler's members into a new map first.
pub(crate) fn object_with_member_to_vec(
    map: &Map<String, Value>,
    name: &str,
    member: &str,
) -> Result<Vec<u8>, CanonError> {
    let depth = enter(0)?;
    let mut out = String::with_capacity(256 + member.len());
    out.push('{');
    if in_utf16_order(map) {
        write_members_with(&mut out, map.iter(), depth, name, member)?;
    } else {
        let mut members: Vec<(&String, &Value)> = map.iter().collect();
        members.sort_by(|a, b| utf16_cmp(a.0, b.0));
        write_members_with(&mut out, members.into_iter(), depth, name, member)?;
    }
    out.push('}');
    Ok(out.into_bytes())
}

/// [`write_members`] of members in canonical order, with `name` and its written `member` in
/// its place among them.
fn write_members_with<'a>(
    out: &mut String,
    members: impl Iterator<Item = (&'a String, &'a Value)>,
    depth: usize,
    name: &str,
    member: &str,
) -> Result<(), CanonError> {
    let mut pending = Some(member);
    let mut first = true;
    let mut separate = |out: &mut String| {
        if !std::mem::take(&mut first) {
            out.push(',');
        }
    };
    for (key, value) in members {
        if key == name {
            continue;
        }
        if utf16_cmp(name, key) == Ordering::Less {
            if let Some(member) = pending.take() {
                separate(out);
                write_string(out, name);
                out.push(':');
                out.push_str(member);
            }
        }
        separate(out);
        write_string(out, key);
        out.push(':');
        write_value(out, value, depth)?;
    }
    if let Some(member) = pending {
        separate(out);
        write_string(out, name);
        out.push(':');
        out.push_str(member);
    }
    Ok(())
}

/// Like [`to_vec`], as a `String` (canonical JSON is always UTF-8).
pub fn to_string(value: &Value) -> Result<String, CanonError> {
    // Most documents stored per call are a few hundred bytes: start there instead of growing
    // through every small size.
    let mut out = String::with_capacity(256);
    write_value(&mut out, value, 0)?;
    Ok(out)
}

/// Strictly parses untrusted JSON bytes.
///
/// Accepts exactly RFC 8259 JSON text in UTF-8, optionally surrounded by
/// JSON whitespace, and additionally rejects duplicate member names, escaped
/// lone surrogates, integers outside ±(2^53−1), number literals that overflow
/// a double, and nesting deeper than [`MAX_DEPTH`].
pub fn parse(bytes: &[u8]) -> Result<Value, CanonError> {
    parse_bounded(bytes, usize::MAX)
}

/// [`parse`], refusing a text of more than `max_values` values (every scalar, array and
/// object counts one, member names none) with [`CanonError::TooManyValues`] as soon as it
/// meets the next one.
///
/// A value costs far more built than written: `{"a":0}` is 7 bytes of text and several
/// hundred of `Value`. A body limit in bytes alone would let a megabyte of such objects
/// take hundreds of megabytes; this bounds what a parse can build whatever its bytes.
///
/// ```
/// use broker_core::canon::{parse_bounded, CanonError};
/// assert!(parse_bounded(br#"{"a":[1,2]}"#, 4).is_ok());
/// assert_eq!(
///     parse_bounded(br#"{"a":[1,2,3]}"#, 4).unwrap_err(),
///     CanonError::TooManyValues { limit: 4 }
/// );
/// ```
pub fn parse_bounded(bytes: &[u8], max_values: usize) -> Result<Value, CanonError> {
    let src = std::str::from_utf8(bytes).map_err(|_| CanonError::NotUtf8)?;
    let mut parser = Parser {
        src,
        pos: 0,
        values_left: max_values,
        max_values,
    };
    parser.skip_ws();
    let value = parser.parse_value(0)?;
    parser.skip_ws();
    if parser.pos < src.len() {
        return Err(CanonError::TrailingData);
    }
    Ok(value)
}

/// Strictly parses `bytes` and returns their canonical form.
pub fn canonicalize(bytes: &[u8]) -> Result<Vec<u8>, CanonError> {
    to_vec(&parse(bytes)?)
}

/// True iff `bytes` parse strictly and are byte-identical to their canonical form.
pub fn is_canonical(bytes: &[u8]) -> bool {
    canonicalize(bytes).is_ok_and(|canon| canon == bytes)
}

// ---------------------------------------------------------------------------
// Serialisation
// ---------------------------------------------------------------------------

fn write_value(out: &mut String, value: &Value, depth: usize) -> Result<(), CanonError> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(out, n)?,
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            let depth = enter(depth)?;
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item, depth)?;
            }
            out.push(']');
        }
        Value::Object(map) => write_object(out, map, depth)?,
    }
    Ok(())
}

fn write_object(
    out: &mut String,
    map: &Map<String, Value>,
    depth: usize,
) -> Result<(), CanonError> {
    let depth = enter(depth)?;
    out.push('{');
    // RFC 8785 wants UTF-16 order. A map whose names ascend bytewise and hold no character
    // from U+E000 up (whose UTF-8 order can differ from UTF-16's) is in it already: nearly
    // every document, written without collecting and sorting its members.
    if in_utf16_order(map) {
        write_members(out, map.iter(), depth)?;
    } else {
        let mut members: Vec<(&String, &Value)> = map.iter().collect();
        members.sort_by(|a, b| utf16_cmp(a.0, b.0));
        write_members(out, members.into_iter(), depth)?;
    }
    out.push('}');
    Ok(())
}

/// True when the map iterates its names in strictly ascending UTF-16 order, judged without
/// transcoding (see [`write_object`]).
fn in_utf16_order(map: &Map<String, Value>) -> bool {
    let mut previous: Option<&str> = None;
    for name in map.keys() {
        // 0xEE is the first UTF-8 lead byte of U+E000..=U+FFFF; 0xF0 and up lead characters
        // above U+FFFF. Without either, bytewise order is UTF-16 order.
        if name.bytes().any(|b| b >= 0xEE) || previous.is_some_and(|p| p >= name) {
            return false;
        }
        previous = Some(name);
    }
    true
}

fn write_members<'a>(
    out: &mut String,
    members: impl Iterator<Item = (&'a String, &'a Value)>,
    depth: usize,
) -> Result<(), CanonError> {
    for (i, (key, member)) in members.enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(out, key);
        out.push(':');
        write_value(out, member, depth)?;
    }
    Ok(())
}

/// Returns the depth inside a container opened at `depth`, or `TooDeep`.
fn enter(depth: usize) -> Result<usize, CanonError> {
    let inner = depth.saturating_add(1);
    if inner > MAX_DEPTH {
        return Err(CanonError::TooDeep { limit: MAX_DEPTH });
    }
    Ok(inner)
}

/// Orders strings by their UTF-16 code units (RFC 8785 §3.2.3).
fn utf16_cmp(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

fn write_number(out: &mut String, n: &Number) -> Result<(), CanonError> {
    // Without serde_json's `arbitrary_precision`, a Number is exactly one of
    // u64, i64 (negative) or finite f64; check them in that order.
    if let Some(u) = n.as_u64() {
        if u > MAX_SAFE_INTEGER {
            return Err(CanonError::UnsafeInteger {
                text: u.to_string(),
            });
        }
        out.push_str(&u.to_string());
    } else if let Some(i) = n.as_i64() {
        if i.unsigned_abs() > MAX_SAFE_INTEGER {
            return Err(CanonError::UnsafeInteger {
                text: i.to_string(),
            });
        }
        out.push_str(&i.to_string());
    } else {
        let f = n.as_f64().ok_or(CanonError::NonFinite)?;
        let text = number_to_string(f)?;
        // ECMAScript prints integral doubles below 1e21 as plain integers, so
        // e.g. 1e20 becomes "100000000000000000000". Beyond 2^53−1 such text
        // is indistinguishable from a rounded integer literal, which `parse`
        // rejects; refuse to emit it, so every output of `to_vec` is itself
        // canonical input.
        if f.abs() > MAX_SAFE_INTEGER as f64 && !text.contains(['.', 'e']) {
            return Err(CanonError::UnsafeInteger { text });
        }
        out.push_str(&text);
    }
    Ok(())
}

/// Formats a double as ECMAScript's `Number.prototype.toString` does, the
/// number form RFC 8785 uses (e.g. `1e+21`, `1e-7`, `0.000001`, `-0` → `0`).
///
/// This is the bare formatting rule: unlike [`to_vec`], it does not refuse
/// integral values beyond ±(2^53−1), which it prints as plain integers.
pub fn number_to_string(f: f64) -> Result<String, CanonError> {
    es_number_to_string(f).ok_or(CanonError::NonFinite)
}

/// Formats a double as ECMAScript `Number.prototype.toString` does
/// (ECMA-262 Number::toString, radix 10). `None` for NaN and infinities.
fn es_number_to_string(f: f64) -> Option<String> {
    if !f.is_finite() {
        return None;
    }
    if f == 0.0 {
        // Covers -0, which ECMAScript prints as "0".
        return Some("0".to_owned());
    }
    // Rust's `{:e}` yields the shortest digit string that round-trips,
    // closest to the exact value — ECMAScript's `s` (with `k` digits) and
    // exponent `n`, except on exact ties, fixed up below.
    let (digits, exponent) = sci_digits(&format!("{:e}", f.abs()))?;
    let digits = break_tie_to_even(f.abs(), digits, exponent)?;
    let n = exponent.checked_add(1)?;
    let k = i32::try_from(digits.len()).ok()?;

    let mut out = String::with_capacity(digits.len() + 8);
    if f < 0.0 {
        out.push('-');
    }
    if k <= n && n <= 21 {
        // Integer: all digits, then n - k zeros.
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', usize::try_from(n - k).ok()?));
    } else if 0 < n && n <= 21 {
        // Decimal point inside the digits.
        let (int_part, frac_part) = digits.split_at_checked(usize::try_from(n).ok()?)?;
        out.push_str(int_part);
        out.push('.');
        out.push_str(frac_part);
    } else if -6 < n && n <= 0 {
        // Small fraction: "0." then -n zeros, then the digits.
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', usize::try_from(-n).ok()?));
        out.push_str(&digits);
    } else {
        // Exponent form: d[.ddd]e±x with x = |n - 1|.
        let (first, rest) = digits.split_at_checked(1)?;
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        let e = n - 1;
        out.push('e');
        out.push(if e < 0 { '-' } else { '+' });
        out.push_str(&e.unsigned_abs().to_string());
    }
    Some(out)
}

/// Splits Rust's `{:e}` output (`d[.ddd]e[-]x`) into its significant digits,
/// without trailing zeros, and the exponent `x`.
fn sci_digits(sci: &str) -> Option<(String, i32)> {
    let (mantissa, exponent) = sci.split_once('e')?;
    let mut digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    // Trailing zeros do not change the value or the exponent.
    while digits.len() > 1 && digits.ends_with('0') {
        digits.pop();
    }
    if digits.is_empty() {
        return None;
    }
    Some((digits, exponent.parse().ok()?))
}

/// Applies ECMAScript's tie rule to Rust's shortest digits.
///
/// When the double `f` (positive, finite) lies exactly halfway between two
/// shortest candidates, ECMA-262 picks the one with an even last digit;
/// Rust's shortest formatting does not promise that (it rounds the RFC's
/// example up), so ties are detected and settled here. RFC 8785 Appendix B's
/// 1424953923781206.25 is such a tie: ECMAScript prints …206.2, not …206.3.
/// `digits` × 10^(exponent + 1 − k) is the shortest candidate from Rust.
fn break_tie_to_even(f: f64, digits: String, exponent: i32) -> Option<String> {
    let k = digits.len();
    // A tie means the exact value has k + 1 significant digits, ending in 5.
    // Rounding to k + 1 digits is a cheap filter before the exact expansion.
    let (probe, probe_exp) = sci_digits(&format!("{:.*e}", k, f))?;
    if probe_exp != exponent || probe.len() != k + 1 || !probe.ends_with('5') {
        return Some(digits);
    }
    // Confirm the expansion stops there: first with 20 more digits (cheap,
    // rules out nearly every non-tie), then exactly — 800 fractional digits
    // hold every double's full decimal expansion (at most 767 significant).
    for precision in [k + 20, 800] {
        let (longer, longer_exp) = sci_digits(&format!("{:.*e}", precision, f))?;
        if longer != probe || longer_exp != exponent {
            return Some(digits);
        }
    }
    // Candidates: truncated ("lo") and incremented ("hi") k-digit strings;
    // exactly one of them is even. Keep it if it reads back as `f`.
    let lo = probe.get(..k)?.to_owned();
    let hi = decimal_increment(&lo);
    let scale = i64::from(exponent) + 1 - i64::try_from(k).ok()?;
    let even = [Some(lo), hi]
        .into_iter()
        .flatten()
        .find(|c| c.bytes().last().is_some_and(|d| d % 2 == 0))?;
    let reads_back = format!("{even}e{scale}").parse::<f64>().ok() == Some(f);
    if reads_back && even.len() == k {
        let (even, _) = sci_digits(&format!("{even}e0"))?;
        Some(even)
    } else {
        Some(digits)
    }
}

/// Adds one to a string of decimal digits; `None` if it would grow longer.
fn decimal_increment(digits: &str) -> Option<String> {
    let mut bytes = digits.as_bytes().to_vec();
    for b in bytes.iter_mut().rev() {
        if *b == b'9' {
            *b = b'0';
        } else {
            *b += 1;
            return String::from_utf8(bytes).ok();
        }
    }
    None
}

/// Writes `s` as a JSON string with RFC 8785 §3.2.2.2 minimal escaping: worldd's one JSON
/// string writer, [`dialect::quote::push_json_string`].
fn write_string(out: &mut String, s: &str) {
    dialect::quote::push_json_string(out, s);
}

/// Writes one canonical object of fixed member names without building a [`Value`]: for the
/// records the store's writer encodes on every call (worlds, entries, task states, journal
/// records), where building the tree and freeing it cost more than writing the bytes.
///
/// Members must be given in canonical order, and names must be plain ASCII that needs no
/// escape (a debug build checks both). The bytes equal [`to_vec`] of the same object; each
/// caller's tests compare the two.
pub(crate) struct Members {
    out: String,
    last: Option<&'static str>,
}

impl Members {
    pub(crate) fn new() -> Members {
        // An entry, with five refs, takes about 520 bytes: one allocation, not two.
        Members::with(String::with_capacity(640))
    }

    /// An object written after what `out` already holds (a nested member's value).
    fn with(mut out: String) -> Members {
        out.push('{');
        Members { out, last: None }
    }

    fn name(&mut self, name: &'static str) {
        debug_assert!(
            self.last.is_none_or(|last| last < name),
            "{name:?} is out of canonical order"
        );
        debug_assert!(name
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\'));
        if self.last.is_some() {
            self.out.push(',');
        }
        self.last = Some(name);
        self.out.push('"');
        self.out.push_str(name);
        self.out.push_str("\":");
    }

    pub(crate) fn string(mut self, name: &'static str, value: &str) -> Members {
        self.name(name);
        write_string(&mut self.out, value);
        self
    }

    /// A value whose text needs no escape inside quotes (a `Ref`, an enum's name).
    pub(crate) fn plain(mut self, name: &'static str, value: impl Plain) -> Members {
        self.name(name);
        self.out.push('"');
        value.push_plain(&mut self.out);
        self.out.push('"');
        self
    }

    /// [`Members::plain`], or `null` for `None` (as serde writes it).
    pub(crate) fn plain_or_null(self, name: &'static str, value: Option<impl Plain>) -> Members {
        match value {
            Some(v) => self.plain(name, v),
            None => self.null(name),
        }
    }

    /// An integer; `Err` beyond 2^53−1, as [`to_vec`].
    pub(crate) fn integer(mut self, name: &'static str, n: u64) -> Result<Members, CanonError> {
        if n > MAX_SAFE_INTEGER {
            return Err(CanonError::UnsafeInteger {
                text: n.to_string(),
            });
        }
        self.name(name);
        push_decimal(&mut self.out, n);
        Ok(self)
    }

    /// [`Members::integer`], or `null` for `None` (as serde writes it).
    pub(crate) fn integer_or_null(
        self,
        name: &'static str,
        n: Option<u64>,
    ) -> Result<Members, CanonError> {
        match n {
            Some(n) => self.integer(name, n),
            None => Ok(self.null(name)),
        }
    }

    pub(crate) fn boolean(mut self, name: &'static str, value: bool) -> Members {
        self.name(name);
        self.out.push_str(if value { "true" } else { "false" });
        self
    }

    pub(crate) fn null(mut self, name: &'static str) -> Members {
        self.name(name);
        self.out.push_str("null");
        self
    }

    /// An array of values that need no escape inside quotes.
    pub(crate) fn plain_array<T: Plain>(mut self, name: &'static str, items: &[T]) -> Members {
        self.name(name);
        self.out.push('[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            self.out.push('"');
            item.push_plain(&mut self.out);
            self.out.push('"');
        }
        self.out.push(']');
        self
    }

    /// An object held as its map, at `depth` (the nesting of the member's value in the whole
    /// document, so that [`MAX_DEPTH`] is counted as [`to_vec`] counts it).
    pub(crate) fn map(
        mut self,
        name: &'static str,
        map: &Map<String, Value>,
        depth: usize,
    ) -> Result<Members, CanonError> {
        self.name(name);
        write_object(&mut self.out, map, depth)?;
        Ok(self)
    }

    /// An array of objects, each written by `inner`.
    pub(crate) fn object_array<T>(
        mut self,
        name: &'static str,
        items: &[T],
        inner: impl Fn(Members, &T) -> Result<Members, CanonError>,
    ) -> Result<Members, CanonError> {
        self.name(name);
        let last = self.last;
        let mut out = self.out;
        out.push('[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out = inner(Members::with(out), item)?.finish();
        }
        out.push(']');
        Ok(Members { out, last })
    }

    /// A nested object, written by `inner`.
    pub(crate) fn object(
        mut self,
        name: &'static str,
        inner: impl FnOnce(Members) -> Result<Members, CanonError>,
    ) -> Result<Members, CanonError> {
        self.name(name);
        let last = self.last;
        let nested = inner(Members::with(self.out))?;
        Ok(Members {
            out: nested.finish(),
            last,
        })
    }

    pub(crate) fn finish(mut self) -> String {
        self.out.push('}');
        self.out
    }
}

/// A value [`Members`] writes between quotes as it is: its text needs no escape. Refs (their
/// impl is beside `Ref`) and names are pushed as they are; anything else goes through `fmt`.
/// The writer encodes a dozen refs and integers per call, and `write!` cost it about 4 % of
/// its time.
pub(crate) trait Plain {
    fn push_plain(&self, out: &mut String);
}

impl Plain for str {
    fn push_plain(&self, out: &mut String) {
        out.push_str(self);
    }
}

impl Plain for std::fmt::Arguments<'_> {
    fn push_plain(&self, out: &mut String) {
        let _ = out.write_fmt(*self);
    }
}

impl<T: Plain + ?Sized> Plain for &T {
    fn push_plain(&self, out: &mut String) {
        (**self).push_plain(out);
    }
}

/// `n` in decimal, as `write!("{n}")` writes it.
fn push_decimal(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // Only ASCII digits were written.
    out.push_str(std::str::from_utf8(&digits[at..]).unwrap_or_default());
}

// ---------------------------------------------------------------------------
// Strict parser
// ---------------------------------------------------------------------------

/// Recursive-descent RFC 8259 parser over already-validated UTF-8.
///
/// Recursion is bounded by [`MAX_DEPTH`], so hostile nesting cannot exhaust
/// the stack. `pos` only ever stops on ASCII bytes or at the end of input,
/// so slicing `src` at it always lands on a character boundary.
struct Parser<'a> {
    src: &'a str,
    pos: usize,
    /// How many more values the text may hold before [`CanonError::TooManyValues`].
    values_left: usize,
    max_values: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.src.as_bytes().get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    /// Consumes `byte` or fails with "expected {what}".
    fn expect(&mut self, byte: u8, what: &str) -> Result<(), CanonError> {
        if self.peek() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.unexpected(what))
        }
    }

    /// A syntax error at the current position, with line and column.
    fn syntax(&self, what: &str) -> CanonError {
        let before = self.src.get(..self.pos).unwrap_or(self.src);
        let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before.get(line_start..).map_or(0, |l| l.chars().count()) + 1;
        CanonError::Syntax {
            message: format!("{what} at line {line}, column {column} (byte {})", self.pos),
        }
    }

    /// "expected {what}, found {the character here}".
    fn unexpected(&self, what: &str) -> CanonError {
        let found = match self.src.get(self.pos..).and_then(|s| s.chars().next()) {
            None => "end of input".to_owned(),
            Some('\u{feff}') if self.pos == 0 => "a byte order mark".to_owned(),
            Some(c) => format!("{c:?}"),
        };
        self.syntax(&format!("expected {what}, found {found}"))
    }

    fn parse_value(&mut self, depth: usize) -> Result<Value, CanonError> {
        self.values_left = self
            .values_left
            .checked_sub(1)
            .ok_or(CanonError::TooManyValues {
                limit: self.max_values,
            })?;
        match self.peek() {
            Some(b'{') => self.parse_object(depth),
            Some(b'[') => self.parse_array(depth),
            Some(b'"') => self.parse_string().map(Value::String),
            Some(b't') => self.parse_literal("true", Value::Bool(true)),
            Some(b'f') => self.parse_literal("false", Value::Bool(false)),
            Some(b'n') => self.parse_literal("null", Value::Null),
            Some(b'-' | b'0'..=b'9') => self.parse_number(),
            _ => Err(self.unexpected("a JSON value")),
        }
    }

    fn parse_literal(&mut self, word: &str, value: Value) -> Result<Value, CanonError> {
        let end = self.pos.saturating_add(word.len());
        if self.src.as_bytes().get(self.pos..end) == Some(word.as_bytes()) {
            self.pos = end;
            Ok(value)
        } else {
            Err(self.syntax(&format!("invalid literal, expected `{word}`")))
        }
    }

    fn parse_array(&mut self, depth: usize) -> Result<Value, CanonError> {
        let depth = enter(depth)?;
        self.pos += 1; // '['
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.skip_ws();
            items.push(self.parse_value(depth)?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(self.unexpected("`,` or `]`")),
            }
        }
    }

    fn parse_object(&mut self, depth: usize) -> Result<Value, CanonError> {
        let depth = enter(depth)?;
        self.pos += 1; // '{'
        let mut map = Map::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Value::Object(map));
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.unexpected("a string member name"));
            }
            let key = self.parse_string()?;
            // Checked before the value is parsed so the error names the
            // first offending key rather than something nested inside it.
            if map.contains_key(&key) {
                return Err(CanonError::DuplicateKey { key });
            }
            self.skip_ws();
            self.expect(b':', "`:`")?;
            self.skip_ws();
            let value = self.parse_value(depth)?;
            map.insert(key, value);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Value::Object(map));
                }
                _ => return Err(self.unexpected("`,` or `}`")),
            }
        }
    }

    /// Parses a string starting at its opening quote.
    fn parse_string(&mut self) -> Result<String, CanonError> {
        self.pos += 1; // '"'
        let mut out = String::new();
        loop {
            // Copy the run of plain characters up to the next special byte.
            let start = self.pos;
            while let Some(b) = self.peek() {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            out.push_str(self.src.get(start..self.pos).unwrap_or_default());
            match self.peek() {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.pos += 1;
                    self.parse_escape(&mut out)?;
                }
                Some(_) => {
                    return Err(self.syntax("unescaped control character in string"));
                }
                None => return Err(self.syntax("unterminated string")),
            }
        }
    }

    /// Parses one escape, positioned just after its backslash.
    fn parse_escape(&mut self, out: &mut String) -> Result<(), CanonError> {
        let c = match self.peek() {
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\u{08}',
            Some(b'f') => '\u{0c}',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => {
                self.pos += 1;
                let unit = self.parse_hex4()?;
                let c = match unit {
                    0xD800..=0xDBFF => {
                        // A high surrogate must be followed by `\u` + low surrogate.
                        let end = self.pos.saturating_add(2);
                        if self.src.as_bytes().get(self.pos..end) != Some(b"\\u") {
                            return Err(CanonError::LoneSurrogate);
                        }
                        self.pos = end;
                        let low = self.parse_hex4()?;
                        if !(0xDC00..=0xDFFF).contains(&low) {
                            return Err(CanonError::LoneSurrogate);
                        }
                        let scalar = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
                        char::from_u32(scalar).ok_or(CanonError::LoneSurrogate)?
                    }
                    0xDC00..=0xDFFF => return Err(CanonError::LoneSurrogate),
                    _ => char::from_u32(unit).ok_or(CanonError::LoneSurrogate)?,
                };
                out.push(c);
                return Ok(());
            }
            _ => return Err(self.syntax("invalid escape in string")),
        };
        self.pos += 1;
        out.push(c);
        Ok(())
    }

    /// Parses the four hex digits of a `\u` escape.
    fn parse_hex4(&mut self) -> Result<u32, CanonError> {
        let mut unit = 0u32;
        for _ in 0..4 {
            let digit = self
                .peek()
                .and_then(|b| char::from(b).to_digit(16))
                .ok_or_else(|| self.syntax("invalid \\u escape, expected 4 hex digits"))?;
            unit = (unit << 4) | digit;
            self.pos += 1;
        }
        Ok(unit)
    }

    fn skip_digits(&mut self) -> usize {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        self.pos - start
    }

    /// Parses `-? (0 | [1-9][0-9]*) (.[0-9]+)? ([eE][+-]?[0-9]+)?`.
    fn parse_number(&mut self) -> Result<Value, CanonError> {
        let start = self.pos;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.pos += 1;
        }
        let int_start = self.pos;
        match self.peek() {
            Some(b'0') => {
                self.pos += 1;
                if let Some(b'0'..=b'9') = self.peek() {
                    return Err(self.syntax("leading zeros are not allowed in numbers"));
                }
            }
            Some(b'1'..=b'9') => {
                self.skip_digits();
            }
            _ => return Err(self.unexpected("a digit")),
        }
        let int_end = self.pos;
        let mut is_integer = true;
        if self.peek() == Some(b'.') {
            is_integer = false;
            self.pos += 1;
            if self.skip_digits() == 0 {
                return Err(self.unexpected("a digit after the decimal point"));
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            is_integer = false;
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if self.skip_digits() == 0 {
                return Err(self.unexpected("a digit in the exponent"));
            }
        }
        let text = self.src.get(start..self.pos).unwrap_or_default();

        if is_integer {
            let digits = self.src.get(int_start..int_end).unwrap_or_default();
            let magnitude = digits
                .bytes()
                .try_fold(0u64, |acc, d| {
                    let digit = char::from(d).to_digit(10)?;
                    acc.checked_mul(10)?.checked_add(u64::from(digit))
                })
                .filter(|&m| m <= MAX_SAFE_INTEGER)
                .ok_or_else(|| CanonError::UnsafeInteger {
                    text: shorten(text),
                })?;
            let number = if negative {
                // magnitude <= 2^53 - 1, so the conversion cannot fail.
                let signed = i64::try_from(magnitude).map_err(|_| CanonError::UnsafeInteger {
                    text: shorten(text),
                })?;
                Number::from(-signed)
            } else {
                Number::from(magnitude)
            };
            return Ok(Value::Number(number));
        }

        // The grammar was checked above; Rust's float parser is correctly
        // rounded, so the double is the one the text denotes.
        let f: f64 = text.parse().map_err(|_| self.syntax("invalid number"))?;
        if !f.is_finite() {
            return Err(CanonError::NumberOutOfRange {
                text: shorten(text),
            });
        }
        Number::from_f64(f)
            .map(Value::Number)
            .ok_or(CanonError::NonFinite)
    }
}

/// Shortens over-long number text for error messages.
fn shorten(text: &str) -> String {
    match text.get(..MAX_ERROR_NUMBER_LEN) {
        Some(head) if text.len() > MAX_ERROR_NUMBER_LEN => {
            format!("{head}… ({} characters)", text.len())
        }
        _ => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn es(f: f64) -> String {
        es_number_to_string(f).unwrap_or_else(|| "<none>".to_owned())
    }

    #[test]
    fn es_number_covers_each_branch() {
        // k <= n <= 21: integer with padding zeros.
        assert_eq!(es(1.5e3), "1500");
        // 0 < n <= 21: point inside the digits.
        assert_eq!(es(12.25), "12.25");
        // -6 < n <= 0: leading "0.000".
        assert_eq!(es(0.00125), "0.00125");
        // Exponent form, one digit and several digits, both signs.
        assert_eq!(es(1e-7), "1e-7");
        assert_eq!(es(-2.5e30), "-2.5e+30");
        assert_eq!(es(f64::NAN), "<none>");
        assert_eq!(es(f64::INFINITY), "<none>");
        assert_eq!(es(f64::NEG_INFINITY), "<none>");
        assert_eq!(es(-0.0), "0");
    }

    #[test]
    fn es_number_boundaries_of_plain_range() {
        // n = 21 is the last plain integer; n = 22 switches to exponent.
        assert_eq!(es(1.2e20), "120000000000000000000");
        assert_eq!(es(1.2e21), "1.2e+21");
        // n = -5 is the last plain fraction; n = -6 switches to exponent.
        assert_eq!(es(1.5e-6), "0.0000015");
        assert_eq!(es(1.5e-7), "1.5e-7");
    }

    #[test]
    fn ties_break_to_even() {
        // 1424953923781206.25 exactly: 17-digit candidates …206.2 and …206.3
        // are equally close; ECMAScript takes the even one.
        assert_eq!(es(1_424_953_923_781_206.0 + 0.25), "1424953923781206.2");
        // A tie whose even candidate is the upper one: 1424953923781206.75
        // lies between …206.7 and …206.8 (ulp here is 0.25).
        assert_eq!(es(1_424_953_923_781_206.0 + 0.75), "1424953923781206.8");
        // Not ties: unaffected.
        assert_eq!(es(1_424_953_923_781_206.0 + 0.5), "1424953923781206.5");
        assert_eq!(es(0.5), "0.5");
        assert_eq!(es(2.5), "2.5");
    }

    #[test]
    fn sci_digits_and_increment() {
        assert_eq!(sci_digits("1.2500e-7"), Some(("125".to_owned(), -7)));
        assert_eq!(sci_digits("0e0"), Some(("0".to_owned(), 0)));
        assert_eq!(sci_digits("e5"), None);
        assert_eq!(sci_digits("15"), None);
        assert_eq!(decimal_increment("129"), Some("130".to_owned()));
        assert_eq!(decimal_increment("99"), None);
    }

    #[test]
    fn utf16_order_differs_from_utf8_order() {
        let supplementary = "\u{1F600}"; // UTF-16: D83D DE00
        let private_use = "\u{E000}"; // UTF-16: E000
        assert!(supplementary > private_use, "UTF-8/code point order");
        assert_eq!(utf16_cmp(supplementary, private_use), Ordering::Less);
        assert_eq!(utf16_cmp("a", "ab"), Ordering::Less);
        assert_eq!(utf16_cmp("b", "ab"), Ordering::Greater);
        assert_eq!(utf16_cmp("", ""), Ordering::Equal);
    }

    #[test]
    fn write_string_escapes_minimally() {
        let mut out = String::new();
        write_string(&mut out, "a\u{0}\u{1f}\u{7f}\u{8}\u{c}\"\\/\u{2028}é");
        assert_eq!(out, "\"a\\u0000\\u001f\u{7f}\\b\\f\\\"\\\\/\u{2028}é\"");
    }

    #[test]
    fn syntax_errors_carry_line_and_column() {
        let err = parse(b"{\n  \"a\" 1}").unwrap_err();
        assert_eq!(
            err,
            CanonError::Syntax {
                message: "expected `:`, found '1' at line 2, column 7 (byte 8)".to_owned()
            }
        );
        let err = parse("[\"é\", x]".as_bytes()).unwrap_err();
        let CanonError::Syntax { message } = err else {
            panic!("expected a syntax error, got {err:?}");
        };
        assert!(message.contains("line 1, column 7"), "{message}");
    }

    #[test]
    fn byte_order_mark_is_named() {
        let err = parse("\u{feff}{}".as_bytes()).unwrap_err();
        assert!(err.to_string().contains("byte order mark"), "{err}");
    }

    #[test]
    fn long_numbers_are_shortened_in_errors() {
        let text = "9".repeat(1000);
        let err = parse(text.as_bytes()).unwrap_err();
        let CanonError::UnsafeInteger { text: quoted } = err else {
            panic!("expected UnsafeInteger, got {err:?}");
        };
        assert!(quoted.len() < 100, "{quoted}");
        assert!(quoted.ends_with("(1000 characters)"), "{quoted}");
        assert_eq!(shorten("123"), "123");
    }

    #[test]
    fn number_grammar_edges() {
        for bad in [
            "01", "-", "-a", "1.", ".5", "1e", "1e+", "+1", "0x10", "1.e5",
        ] {
            assert!(parse(bad.as_bytes()).is_err(), "{bad} should be rejected");
        }
        assert_eq!(parse(b"-0").ok(), Some(Value::from(0u64)));
        assert_eq!(canonicalize(b"-0.0").ok(), Some(b"0".to_vec()));
        assert_eq!(canonicalize(b"1E2").ok(), Some(b"100".to_vec()));
        assert_eq!(canonicalize(b"1e-400").ok(), Some(b"0".to_vec()));
        assert_eq!(
            parse(b"1e400"),
            Err(CanonError::NumberOutOfRange {
                text: "1e400".to_owned()
            })
        );
    }

    #[test]
    fn error_display_texts() {
        assert_eq!(
            CanonError::DuplicateKey { key: "a".into() }.to_string(),
            "duplicate key \"a\""
        );
        assert_eq!(
            CanonError::UnsafeInteger {
                text: "9007199254740993".into()
            }
            .to_string(),
            "number 9007199254740993 is outside the exact integer range of canonical JSON (±2^53−1)"
        );
        assert_eq!(
            CanonError::TooDeep { limit: 128 }.to_string(),
            "nesting deeper than 128 levels"
        );
    }
}
