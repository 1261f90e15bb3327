//! One member of a JSON object, found by walking the object's top level instead of parsing it;
//! how many values a text holds, found by one pass ([`values`]); and the first integer literal
//! no double holds exactly ([`first_inexact_integer`]).
//!
//! The daemon asks the same question of every call's committed output twice (the metrics'
//! outcome label and the answer's classification): does its top-level `ok` say `false`? A
//! read's output carries a whole file, and a parser walks every byte of it, building nothing
//! but still looking at each. Here a string is skipped with one search for its closing quote
//! or a backslash, so the question costs a few hundred instructions instead of thousands.
//!
//! The walk checks the shape it steps through (an object of `"name": value` members, strings
//! and brackets closed, nothing after the object) and not the rest of JSON's grammar: a
//! number or literal is taken as the bytes up to the next delimiter. On JSON a serializer
//! wrote, which is what it reads (committed outputs are canonical), it answers as
//! `serde_json` does; on anything else it answers `None` or some value, and never panics.

/// The raw bytes of the value of member `name` of the JSON object `json`, whitespace around
/// it excluded. `None` when `json` is not one object, when no member or more than one has that
/// name, or when the walk finds it malformed. The name is compared as written: a serializer
/// escapes nothing a member name needs to match (`"ok"`).
pub fn top_level_member<'a>(json: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    walk(json, name).flatten()
}

/// Whether `json` is one object whose shape the walk finds well formed (see the module's
/// note on what it checks): bytes that can stand as a JSON value inside an answer written
/// around them without unbalancing it.
pub fn is_one_object(json: &[u8]) -> bool {
    walk(json, b"").is_some()
}

/// Walk the object's top level: `None` when the shape is malformed or `json` is not one
/// object; otherwise the value of the one member named `name`, or `Some(None)` when no member
/// or more than one has that name.
fn walk<'a>(json: &'a [u8], name: &[u8]) -> Option<Option<&'a [u8]>> {
    let mut at = skip_ws(json, 0);
    if json.get(at) != Some(&b'{') {
        return None;
    }
    at = skip_ws(json, at + 1);
    let mut found = None;
    let mut named_twice = false;
    if json.get(at) == Some(&b'}') {
        return finished(json, at + 1, found);
    }
    loop {
        if json.get(at) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(json, at + 1)?;
        let key = &json[at + 1..key_end];
        at = skip_ws(json, key_end + 1);
        if json.get(at) != Some(&b':') {
            return None;
        }
        let start = skip_ws(json, at + 1);
        let end = value_end(json, start)?;
        if key == name {
            named_twice |= found.is_some();
            found = Some(&json[start..end]);
        }
        at = skip_ws(json, end);
        match json.get(at) {
            Some(b',') => at = skip_ws(json, at + 1),
            Some(b'}') => return finished(json, at + 1, found.filter(|_| !named_twice)),
            _ => return None,
        }
    }
}

/// How many values a parser builds from `json` (every scalar, array and object, at any depth),
/// found by one pass over its bytes: what a request body's parse will build is counted in the
/// body budget before it is parsed, so that a refusal for want of room costs a scan, not a
/// parse. Strings are counted, and one taken back at each `:`
/// (its key); arrays and objects at their opening bracket; other scalars at their first byte
/// after a `[`, `,` or `:`. Exact on JSON; on bytes that are not, some count and no panic
/// (the parse refuses them, and builds no more than `[limits] json_values` meanwhile).
pub fn values(json: &[u8]) -> usize {
    let (mut count, mut keys) = (0usize, 0usize);
    // At the start, or after a `[`, `{`, `,` or `:` and whitespace: a scalar may start here.
    let mut may_start = true;
    let mut i = 0;
    while let Some(&b) = json.get(i) {
        match b {
            b'"' => {
                count += 1;
                let Some(end) = string_end(json, i + 1) else {
                    // An unclosed string: nothing after it is a value.
                    break;
                };
                i = end;
                may_start = false;
            }
            b'[' | b'{' => {
                count += 1;
                may_start = true;
            }
            b',' => may_start = true,
            b':' => {
                keys += 1;
                may_start = true;
            }
            b' ' | b'\t' | b'\n' | b'\r' => {}
            b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => {
                count += usize::from(may_start);
                may_start = false;
            }
            _ => may_start = false,
        }
        i += 1;
    }
    count.saturating_sub(keys)
}

/// The first integer literal in `json`, outside strings, beyond ±(2^53−1): the range in
/// which every integer has a double of its own, and so the range canonical JSON keeps. A
/// number with a fraction or an exponent is no integer literal. serde_json reads such a
/// literal as the nearest double when it is too wide for `u64` or `i64`, so only the text
/// says it was sent; it is looked for only when a parse built a whole double that large
/// ([`dialect::json::parse_noting_wide`]). On bytes that are not JSON, some answer and no
/// panic.
pub fn first_inexact_integer(json: &[u8]) -> Option<&[u8]> {
    let mut i = 0;
    while let Some(&b) = json.get(i) {
        match b {
            b'"' => i = string_end(json, i + 1)? + 1,
            b'-' | b'0'..=b'9' => {
                let digits_from = i + usize::from(b == b'-');
                let mut end = digits_from;
                while json.get(end).is_some_and(u8::is_ascii_digit) {
                    end += 1;
                }
                let digits = &json[digits_from..end];
                let fraction_or_exponent = matches!(json.get(end), Some(b'.' | b'e' | b'E'));
                // 9007199254740991 has 16 digits; JSON writes no leading zeros.
                let inexact = digits.len() > 16
                    || (digits.len() == 16 && digits > b"9007199254740991".as_slice());
                if inexact && !fraction_or_exponent {
                    return Some(&json[i..end]);
                }
                // Past the number, its fraction and exponent included.
                i = end;
                while json.get(i).is_some_and(|c| {
                    c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'E' | b'+' | b'-')
                }) {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    None
}

/// The first integer literal in `json`, outside strings, that is no 64-bit integer (below
/// −2^63 or above 2^64−1): the one serde_json read as the nearest double. Literals before it
/// beyond ±(2^53−1) but within 64 bits (an MCP id of 2^60) were read exactly.
pub fn first_wider_than_64_bits(json: &[u8]) -> Option<&[u8]> {
    let mut at = 0;
    while let Some(literal) = json.get(at..).and_then(first_inexact_integer) {
        let text = std::str::from_utf8(literal).ok()?;
        if text.parse::<i64>().is_err() && text.parse::<u64>().is_err() {
            return Some(literal);
        }
        // On after this literal: where a number ends, no string has begun.
        at = literal.as_ptr() as usize - json.as_ptr() as usize + literal.len();
    }
    None
}

/// `Some(found)`, if nothing but whitespace follows the object.
fn finished<'a>(json: &[u8], at: usize, found: Option<&'a [u8]>) -> Option<Option<&'a [u8]>> {
    (skip_ws(json, at) == json.len()).then_some(found)
}

fn skip_ws(json: &[u8], mut at: usize) -> usize {
    while json
        .get(at)
        .is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
    {
        at += 1;
    }
    at
}

/// The place of the quote that closes the string whose content starts at `at`.
fn string_end(json: &[u8], mut at: usize) -> Option<usize> {
    loop {
        at += memchr::memchr2(b'"', b'\\', json.get(at..)?)?;
        if json[at] == b'"' {
            return Some(at);
        }
        // A backslash and the byte it escapes; `\uXXXX`'s digits need no care.
        at += 2;
    }
}

/// The deepest nesting of a member's value the walk follows: serde_json's own limit, so no
/// JSON it parsed is refused.
const MAX_DEPTH: u32 = u128::BITS;

/// Where the value starting at `at` ends (one past its last byte).
fn value_end(json: &[u8], at: usize) -> Option<usize> {
    match json.get(at)? {
        b'"' => Some(string_end(json, at + 1)? + 1),
        b'{' | b'[' => {
            // Which brackets are open, one bit each (set for a brace), so that a bracket
            // closed by the other kind is malformed. Deeper than `MAX_DEPTH` is refused, as
            // serde_json refuses it.
            let (mut open, mut depth) = (0u128, 0u32);
            let mut i = at;
            loop {
                match *json.get(i)? {
                    b'"' => i = string_end(json, i + 1)?,
                    b @ (b'{' | b'[') => {
                        if depth == MAX_DEPTH {
                            return None;
                        }
                        open = open << 1 | u128::from(b == b'{');
                        depth += 1;
                    }
                    b @ (b'}' | b']') => {
                        if (open & 1 == 1) != (b == b'}') {
                            return None;
                        }
                        open >>= 1;
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        _ => {
            let len = json[at..]
                .iter()
                .position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
                .unwrap_or(json.len() - at);
            (len > 0).then_some(at + len)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn the_first_integer_literal_past_the_exact_range_is_found_and_floats_are_not() {
        let first = |text: &str| first_inexact_integer(text.as_bytes()).map(|b| b.to_vec());
        assert_eq!(
            first(r#"{"n":9007199254740991,"m":-9007199254740991}"#),
            None
        );
        assert_eq!(
            first(r#"{"n":9007199254740992}"#),
            Some(b"9007199254740992".to_vec())
        );
        assert_eq!(
            first(r#"[1e21, 1.5, 1000000000000000000000.0, 2E+300, -1000000000000000000001, 7]"#),
            Some(b"-1000000000000000000001".to_vec())
        );
        // Inside a string, digits are text.
        assert_eq!(first(r#"{"s":"1000000000000000000001","n":1}"#), None);
        assert_eq!(
            first(r#"{"s\"":"\\","n":[99999999999999999999]}"#),
            Some(b"99999999999999999999".to_vec())
        );
        // Not JSON: some answer, no panic.
        for junk in ["-", "--1", "1e", "\"", "[1,", "12345678901234567890x"] {
            first(junk);
            first_wider_than_64_bits(junk.as_bytes());
        }
        // Past 64 bits: literals within them, however wide, are passed over.
        let wider = |text: &str| first_wider_than_64_bits(text.as_bytes()).map(|b| b.to_vec());
        assert_eq!(
            wider(
                r#"{"id":1152921504606846976,"n":-9223372036854775808,"m":18446744073709551615}"#
            ),
            None
        );
        assert_eq!(
            wider(
                r#"{"id":1152921504606846976,"s":"18446744073709551616","x":[1e30,-9223372036854775809]}"#
            ),
            Some(b"-9223372036854775809".to_vec())
        );
    }

    /// What `serde_json` says of member `ok`: the oracle for JSON a serializer wrote.
    fn parsed_ok(json: &[u8]) -> Option<bool> {
        #[derive(serde::Deserialize)]
        struct Head {
            ok: Option<bool>,
        }
        serde_json::from_slice::<Head>(json).ok().and_then(|h| h.ok)
    }

    fn scanned_ok(json: &[u8]) -> Option<bool> {
        match top_level_member(json, b"ok")? {
            b"true" => Some(true),
            b"false" => Some(false),
            _ => None,
        }
    }

    #[test]
    fn the_top_level_member_is_found_past_strings_and_nested_values_that_look_like_it() {
        let cases: [(&str, Option<&str>); 12] = [
            (r#"{"ok":false}"#, Some("false")),
            (r#" { "ok" : true } "#, Some("true")),
            (r#"{"a":{"ok":false},"ok":true}"#, Some("true")),
            (
                r#"{"a":"\"ok\":false","b":["ok",{"ok":1}],"ok":null}"#,
                Some("null"),
            ),
            (r#"{"content":"x\\","ok":false,"z":[1,2]}"#, Some("false")),
            (r#"{"a":1}"#, None),
            (r#"{}"#, None),
            (r#"{"ok":false,"ok":false}"#, None),
            (r#"{"ok":false"#, None),
            (r#"{"ok":false} x"#, None),
            (r#"[{"ok":false}]"#, None),
            (r#"{"ok":"a"#, None),
        ];
        for (json, expected) in cases {
            assert_eq!(
                top_level_member(json.as_bytes(), b"ok"),
                expected.map(str::as_bytes),
                "{json}"
            );
        }
    }

    #[test]
    fn one_object_is_told_from_bytes_that_would_unbalance_an_answer_around_them() {
        for json in [
            r#"{}"#,
            r#"{"a":{"b":["}",1]},"c":"\\\""}"#,
            " {\"ok\":true}\n",
        ] {
            assert!(is_one_object(json.as_bytes()), "{json}");
        }
        for json in [
            "",
            "[]",
            r#""a""#,
            r#"{"a":"x}"#,
            r#"{"a":1}}"#,
            r#"{"a":1},{"b":2}"#,
            r#"{"a":[1}"#,
            r#"{"a":[1}}"#,
            r#"{"a":{"b":1]}"#,
            r#"{"a"}"#,
            r#"{"a":1,}"#,
        ] {
            assert!(!is_one_object(json.as_bytes()), "{json}");
        }
        // The deepest value serde_json parses is followed; one past the walk's limit is not.
        let nested = |depth: usize| format!("{{\"a\":{}{}}}", "[".repeat(depth), "]".repeat(depth));
        let deepest = nested(126);
        assert!(serde_json::from_str::<Value>(&deepest).is_ok());
        assert!(is_one_object(deepest.as_bytes()));
        assert!(serde_json::from_str::<Value>(&nested(127)).is_err());
        assert!(!is_one_object(nested(129).as_bytes()));
    }

    proptest::proptest! {
        /// Any JSON object a serializer writes, compact or pretty, answers as the parser does.
        #[test]
        fn any_written_object_answers_as_the_parser_does(
            members in proptest::collection::vec((key(), value()), 0..6),
            pretty in proptest::bool::ANY,
        ) {
            let object: serde_json::Map<String, Value> = members.into_iter().collect();
            let json = if pretty {
                serde_json::to_vec_pretty(&object).unwrap()
            } else {
                serde_json::to_vec(&object).unwrap()
            };
            proptest::prop_assert_eq!(scanned_ok(&json), parsed_ok(&json));
            proptest::prop_assert!(is_one_object(&json));
        }

        /// Bytes of any kind are answered without a panic.
        #[test]
        fn any_bytes_are_walked_without_a_panic(bytes in proptest::collection::vec(
            proptest::sample::select(b"{}[]\",:\\ oktruefalse0\n".to_vec()), 0..40)) {
            let _ = top_level_member(&bytes, b"ok");
            let _ = values(&bytes);
        }

        /// The scan counts the values the parser builds, compact or pretty.
        #[test]
        fn the_scan_counts_the_values_the_parser_builds(
            v in value(),
            pretty in proptest::bool::ANY,
        ) {
            let json = if pretty {
                serde_json::to_vec_pretty(&v).unwrap()
            } else {
                serde_json::to_vec(&v).unwrap()
            };
            proptest::prop_assert_eq!(values(&json), crate::json_bounds::values(&v));
        }
    }

    fn key() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        proptest::sample::select(vec![
            "ok", "okay", "o", "content", "\"ok\"", "\\", "k\n", ":", "a,[b",
        ])
        .prop_map(String::from)
    }

    fn value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            (-1e300f64..1e300).prop_map(Value::from),
            "(\\PC|[\"\\\\:,\\[\\]]|ok|\\{|\\}){0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::vec((key(), inner), 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }
}
