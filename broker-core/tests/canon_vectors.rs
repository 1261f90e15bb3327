//! Test vectors for `broker_core::canon` (RFC 8785 canonical JSON).
//!
//! Expected outputs are written from the RFC 8785 / ECMA-262 rules (and the
//! RFC's own published examples), never copied from the implementation.

use broker_core::canon::{self, CanonError, MAX_DEPTH};
use proptest::prelude::*;
use serde_json::{json, Map, Number, Value};

fn canon_str(input: &str) -> Result<String, CanonError> {
    canon::canonicalize(input.as_bytes())
        .map(|bytes| String::from_utf8(bytes).expect("canonical output is UTF-8"))
}

fn float(f: f64) -> Value {
    Value::Number(Number::from_f64(f).expect("finite test float"))
}

fn nested_arrays(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

// ---------------------------------------------------------------------------
// RFC 8785 examples
// ---------------------------------------------------------------------------

/// RFC 8785 §3.2.3: members sorted by UTF-16 code units. U+1F600 (D83D DE00)
/// sorts before U+FB33, although its UTF-8 bytes sort after.
#[test]
fn rfc8785_sorting_example() {
    let input = r#"{
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\ud83d\ude00": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis"
    }"#;
    let expected = concat!(
        "{",
        "\"\\r\":\"Carriage Return\",",
        "\"1\":\"One\",",
        "\"\u{80}\":\"Control\",",
        "\"\u{f6}\":\"Latin Small Letter O With Diaeresis\",",
        "\"\u{20ac}\":\"Euro Sign\",",
        "\"\u{1f600}\":\"Emoji: Grinning Face\",",
        "\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"",
        "}"
    );
    assert_eq!(canon_str(input).unwrap(), expected);

    // Same document built directly as a Value.
    let value = json!({
        "\u{20ac}": "Euro Sign",
        "\r": "Carriage Return",
        "\u{fb33}": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\u{1f600}": "Emoji: Grinning Face",
        "\u{80}": "Control",
        "\u{f6}": "Latin Small Letter O With Diaeresis",
    });
    assert_eq!(canon::to_string(&value).unwrap(), expected);
    assert!(canon::is_canonical(expected.as_bytes()));
}

/// RFC 8785 §3.2.3: sorting applies recursively, arrays keep their order.
#[test]
fn rfc8785_nested_sorting_example() {
    assert_eq!(
        canon_str(r#"[56, {"d": true, "10": null, "1": [ ]}]"#).unwrap(),
        r#"[56,{"1":[],"10":null,"d":true}]"#
    );
}

/// RFC 8785 §3.2.4 example with numbers, a string and literals.
#[test]
fn rfc8785_numbers_string_literals_example() {
    let input = r#"{
        "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
        "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
        "literals": [null, true, false]
    }"#;
    let expected = concat!(
        r#"{"literals":[null,true,false],"#,
        r#""numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"#,
        "\"string\":\"\u{20ac}$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}"
    );
    assert_eq!(canon_str(input).unwrap(), expected);
    assert!(canon::is_canonical(expected.as_bytes()));
    assert!(!canon::is_canonical(input.as_bytes()));
}

// ---------------------------------------------------------------------------
// Numbers (ECMAScript Number::toString)
// ---------------------------------------------------------------------------

#[test]
fn es6_number_vectors() {
    let vectors: &[(f64, &str)] = &[
        (0.0, "0"),
        (-0.0, "0"),
        (1.0, "1"),
        (0.1, "0.1"),
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (1e-6, "0.000001"),
        (1e-7, "1e-7"),
        (123456789.0, "123456789"),
        (5e-324, "5e-324"),
        // ECMAScript always signs the exponent: "e+308", not "e308".
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (-1.5e-9, "-1.5e-9"),
        (333333333.3333333, "333333333.3333333"),
        (4.5, "4.5"),
        (2e-3, "0.002"),
        (9007199254740991.0, "9007199254740991"),
        (1e22, "1e+22"),
        (0.000001234, "0.000001234"),
        (1.234e-7, "1.234e-7"),
        (-1.0, "-1"),
        (100.0, "100"),
        (123.456, "123.456"),
    ];
    for &(f, expected) in vectors {
        assert_eq!(
            canon::number_to_string(f).unwrap(),
            expected,
            "f64 {f:e} (bits {:#018x})",
            f.to_bits()
        );
        check_to_vec_number(f, expected);
    }
}

/// `to_vec` prints a double exactly as `number_to_string` does, except that
/// it refuses text that reads as an integer beyond ±(2^53−1), because
/// `parse` would reject that text.
fn check_to_vec_number(f: f64, expected: &str) {
    let unsafe_integer_text = expected
        .trim_start_matches('-')
        .parse::<u128>()
        .is_ok_and(|magnitude| magnitude > 9_007_199_254_740_991);
    let result = canon::to_string(&float(f));
    if unsafe_integer_text {
        assert_eq!(
            result,
            Err(CanonError::UnsafeInteger {
                text: expected.to_owned()
            }),
            "{expected}"
        );
        assert!(matches!(
            canon::parse(expected.as_bytes()),
            Err(CanonError::UnsafeInteger { .. })
        ));
    } else {
        assert_eq!(result.as_deref(), Ok(expected));
        let back = canon::parse(expected.as_bytes()).unwrap();
        assert_eq!(back.as_f64(), Some(f), "round trip of {expected}");
        assert!(canon::is_canonical(expected.as_bytes()), "{expected}");
    }
}

#[test]
fn non_finite_numbers_are_rejected() {
    for f in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        assert_eq!(canon::number_to_string(f), Err(CanonError::NonFinite));
    }
}

/// RFC 8785 Appendix B: IEEE 754 bit patterns and their canonical text.
#[test]
fn rfc8785_appendix_b_number_vectors() {
    let vectors: &[(u64, &str)] = &[
        (0x0000000000000000, "0"),
        (0x8000000000000000, "0"),
        (0x0000000000000001, "5e-324"),
        (0x8000000000000001, "-5e-324"),
        (0x7fefffffffffffff, "1.7976931348623157e+308"),
        (0xffefffffffffffff, "-1.7976931348623157e+308"),
        (0x4340000000000000, "9007199254740992"),
        (0xc340000000000000, "-9007199254740992"),
        (0x4430000000000000, "295147905179352830000"),
        (0x44b52d02c7e14af5, "9.999999999999997e+22"),
        (0x44b52d02c7e14af6, "1e+23"),
        (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
        (0x444b1ae4d6e2ef4e, "999999999999999700000"),
        (0x444b1ae4d6e2ef4f, "999999999999999900000"),
        (0x444b1ae4d6e2ef50, "1e+21"),
        (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
        (0x3eb0c6f7a0b5ed8d, "0.000001"),
        (0x41b3de4355555553, "333333333.3333332"),
        (0x41b3de4355555554, "333333333.33333325"),
        (0x41b3de4355555555, "333333333.3333333"),
        (0x41b3de4355555556, "333333333.3333334"),
        (0x41b3de4355555557, "333333333.33333343"),
        (0xbecbf647612f3696, "-0.0000033333333333333333"),
        (0x43143ff3c1cb0959, "1424953923781206.2"),
    ];
    for &(bits, expected) in vectors {
        let f = f64::from_bits(bits);
        assert_eq!(
            canon::number_to_string(f).unwrap(),
            expected,
            "bits {bits:#018x}"
        );
        // The text denotes exactly that double (-0 aside).
        assert_eq!(expected.parse::<f64>().unwrap(), f, "{expected}");
        check_to_vec_number(f, expected);
    }
    // Appendix B's NaN and Infinity rows: errors.
    assert_eq!(
        canon::number_to_string(f64::from_bits(0x7fffffffffffffff)),
        Err(CanonError::NonFinite)
    );
    assert_eq!(
        canon::number_to_string(f64::from_bits(0x7ff0000000000000)),
        Err(CanonError::NonFinite)
    );
}

#[test]
fn integers_at_the_safe_boundary() {
    let max = 9_007_199_254_740_991_i64;
    assert_eq!(
        canon::to_string(&Value::from(max)).unwrap(),
        "9007199254740991"
    );
    assert_eq!(
        canon::to_string(&Value::from(-max)).unwrap(),
        "-9007199254740991"
    );
    assert_eq!(
        canon::to_string(&Value::from(max + 1)),
        Err(CanonError::UnsafeInteger {
            text: "9007199254740992".into()
        })
    );
    assert_eq!(
        canon::to_string(&Value::from(-max - 1)),
        Err(CanonError::UnsafeInteger {
            text: "-9007199254740992".into()
        })
    );
    assert!(matches!(
        canon::to_vec(&Value::from(u64::MAX)),
        Err(CanonError::UnsafeInteger { .. })
    ));
    assert!(matches!(
        canon::to_vec(&Value::from(i64::MIN)),
        Err(CanonError::UnsafeInteger { .. })
    ));
    // Nested inside a document, too.
    assert!(matches!(
        canon::to_vec(&json!({"a": [1, 9007199254740993_u64]})),
        Err(CanonError::UnsafeInteger { .. })
    ));

    assert_eq!(canon::parse(b"9007199254740991").unwrap(), json!(max));
    assert_eq!(canon::parse(b"-9007199254740991").unwrap(), json!(-max));
    assert_eq!(
        canon::parse(b"9007199254740992"),
        Err(CanonError::UnsafeInteger {
            text: "9007199254740992".into()
        })
    );
    assert_eq!(
        canon::parse(b"[-9007199254740992]"),
        Err(CanonError::UnsafeInteger {
            text: "-9007199254740992".into()
        })
    );
    // Beyond u64 as well: no overflow, no panic.
    assert_eq!(
        canon::parse(b"184467440737095516160"),
        Err(CanonError::UnsafeInteger {
            text: "184467440737095516160".into()
        })
    );
    // A float literal is a double: it is rounded like any other double and
    // printed in ECMAScript form ...
    assert_eq!(canon_str("9007199254740991.0").unwrap(), "9007199254740991");
    assert_eq!(
        canon_str("-9.007199254740991e15").unwrap(),
        "-9007199254740991"
    );
    assert_eq!(canon_str("1e300").unwrap(), "1e+300");
    assert_eq!(canon_str("1e21").unwrap(), "1e+21");
    // ... unless that form is an integer literal beyond the safe range, which
    // could not be parsed back (here 2^53 + 1 rounds to 2^53).
    assert_eq!(
        canon_str("9007199254740993.0"),
        Err(CanonError::UnsafeInteger {
            text: "9007199254740992".into()
        })
    );
    assert_eq!(
        canon_str("[-1e20]"),
        Err(CanonError::UnsafeInteger {
            text: "-100000000000000000000".into()
        })
    );
}

#[test]
fn unsafe_integer_message() {
    let err = canon::parse(b"9007199254740993").unwrap_err();
    assert_eq!(
        err.to_string(),
        "number 9007199254740993 is outside the exact integer range of canonical JSON (±2^53−1)"
    );
}

// ---------------------------------------------------------------------------
// Strings
// ---------------------------------------------------------------------------

#[test]
fn string_escaping() {
    let cases: &[(&str, &str)] = &[
        ("\u{8}\t\n\u{c}\r", r#""\b\t\n\f\r""#),
        ("\u{0}\u{1}\u{b}\u{1f}", r#""\u0000\u0001\u000b\u001f""#),
        ("\u{7f}", "\"\u{7f}\""),
        ("\"\\", r#""\"\\""#),
        ("a/b", r#""a/b""#),
        ("\u{1f600}", "\"\u{1f600}\""),
        ("\u{2028}\u{2029}", "\"\u{2028}\u{2029}\""),
        ("é€", "\"é€\""),
        ("", r#""""#),
    ];
    for &(raw, expected) in cases {
        assert_eq!(
            canon::to_string(&Value::from(raw)).unwrap(),
            expected,
            "{raw:?}"
        );
        assert!(canon::is_canonical(expected.as_bytes()), "{expected}");
    }
    // Escapes in the input are normalised away (or to the canonical form).
    assert_eq!(
        canon_str(r#""\u0041\/\u001F\u00e9\uD83D\uDE00""#).unwrap(),
        "\"A/\\u001fé\u{1f600}\""
    );
}

// ---------------------------------------------------------------------------
// Strict parsing
// ---------------------------------------------------------------------------

#[test]
fn rejects_duplicate_keys() {
    assert_eq!(
        canon::parse(br#"{"a":1,"a":2}"#),
        Err(CanonError::DuplicateKey { key: "a".into() })
    );
    assert_eq!(
        canon::parse(br#"{"x":[{"b":1,"c":2,"b":1}]}"#),
        Err(CanonError::DuplicateKey { key: "b".into() })
    );
    // Duplicates are detected after unescaping.
    assert_eq!(
        canon::parse(br#"{"a":1,"\u0061":2}"#),
        Err(CanonError::DuplicateKey { key: "a".into() })
    );
    assert_eq!(
        CanonError::DuplicateKey { key: "a".into() }.to_string(),
        r#"duplicate key "a""#
    );
    // Same key in sibling objects is fine.
    assert!(canon::parse(br#"[{"a":1},{"a":2}]"#).is_ok());
}

#[test]
fn rejects_invalid_utf8() {
    let cases: &[&[u8]] = &[
        b"\"\xff\"",
        b"[\"\xc3\"]",
        b"\"\xc0\xaf\"",     // overlong '/'
        b"\"\xed\xa0\x80\"", // UTF-8-encoded surrogate U+D800
        b"\xfe",
        b"{\"a\":1}\x80",
    ];
    for &bytes in cases {
        assert_eq!(canon::parse(bytes), Err(CanonError::NotUtf8), "{bytes:?}");
        assert!(!canon::is_canonical(bytes));
    }
}

#[test]
fn rejects_trailing_data() {
    for input in ["{} x", "{}{}", "1 2", "[1]]", "null,", "\"a\"\"b\""] {
        assert_eq!(
            canon::parse(input.as_bytes()),
            Err(CanonError::TrailingData),
            "{input}"
        );
    }
    // Trailing JSON whitespace is allowed.
    assert_eq!(canon_str(" \t\r\n{} \n").unwrap(), "{}");
}

#[test]
fn rejects_lone_surrogates() {
    for input in [
        r#""\ud800""#,
        r#""\udc00""#,
        r#""\uDBFF x""#,
        r#""\ud800\u0041""#,
        r#""\ud800\ud800""#,
        r#""\ud800\n""#,
        r#"{"\udfff":1}"#,
    ] {
        assert_eq!(
            canon::parse(input.as_bytes()),
            Err(CanonError::LoneSurrogate),
            "{input}"
        );
    }
    assert_eq!(
        canon::parse(br#""\ud83d\ude00""#).unwrap(),
        json!("\u{1f600}")
    );
}

/// Every scalar, array and object counts one value, member names none; the parse stops at the
/// first value past the bound, before building it, whatever follows.
#[test]
fn value_limit() {
    // The object, its array and the array's three items, and the empty object: 6.
    let text = br#"{"a":[1,"x",null],"b":{}}"#;
    let want = json!({"a": [1, "x", null], "b": {}});
    assert_eq!(canon::parse_bounded(text, 6), Ok(want));
    assert_eq!(
        canon::parse_bounded(text, 5),
        Err(CanonError::TooManyValues { limit: 5 })
    );
    assert_eq!(
        CanonError::TooManyValues { limit: 6 }.to_string(),
        "more than 6 JSON values"
    );
    // The bound is met before anything after it is read: a megabyte of small objects, then
    // text that does not parse.
    let mut hostile = String::from("[");
    hostile.push_str(&r#"{"a":0},"#.repeat(150_000));
    hostile.push_str("oops");
    assert_eq!(
        canon::parse_bounded(hostile.as_bytes(), 16_384),
        Err(CanonError::TooManyValues { limit: 16_384 })
    );
    // Errors met before the bound are reported as they were.
    assert_eq!(
        canon::parse_bounded(br#"[1,2,{"a":1,"a":2}]"#, 100),
        Err(CanonError::DuplicateKey { key: "a".into() })
    );
    // Unbounded, `parse` takes them all.
    assert!(canon::parse(&hostile.as_bytes()[..hostile.len() - 5]).is_err());
    let whole = format!("{}]", &hostile[..hostile.len() - 5]);
    assert_eq!(
        canon::parse(whole.as_bytes())
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        150_000
    );
}

#[test]
fn depth_limit() {
    assert_eq!(MAX_DEPTH, 128);
    let ok = nested_arrays(128);
    assert_eq!(canon_str(&ok).unwrap(), ok);

    let too_deep = nested_arrays(129);
    assert_eq!(
        canon::parse(too_deep.as_bytes()),
        Err(CanonError::TooDeep { limit: 128 })
    );
    assert_eq!(
        CanonError::TooDeep { limit: 128 }.to_string(),
        "nesting deeper than 128 levels"
    );

    // Objects count too, mixed with arrays.
    let mixed_ok = format!("{}{}", r#"{"a":["#.repeat(64), "]}".repeat(64));
    assert!(canon::parse(mixed_ok.as_bytes()).is_ok());
    let mixed_deep = format!(
        "{}1{}",
        r#"{"a":["#.repeat(64) + "[",
        "]".to_owned() + &"]}".repeat(64)
    );
    assert_eq!(
        canon::parse(mixed_deep.as_bytes()),
        Err(CanonError::TooDeep { limit: 128 })
    );

    // Hostile depth fails cleanly instead of exhausting the stack.
    let hostile = "[".repeat(1_000_000);
    assert_eq!(
        canon::parse(hostile.as_bytes()),
        Err(CanonError::TooDeep { limit: 128 })
    );

    // The serialiser enforces the same limit, so its output always parses.
    let mut value = json!([]);
    for _ in 1..128 {
        value = json!([value]);
    }
    assert_eq!(canon::to_string(&value).unwrap(), ok);
    value = json!([value]);
    assert_eq!(
        canon::to_vec(&value),
        Err(CanonError::TooDeep { limit: 128 })
    );
}

#[test]
fn rejects_grammar_violations() {
    let cases = [
        "",
        "   ",
        "{",
        "[1,]",
        "{\"a\":1,}",
        "{\"a\" 1}",
        "{a:1}",
        "{1:1}",
        "'a'",
        "\"abc",
        "\"tab\there\"",
        "\"bad \\x escape\"",
        "\"\\u12G4\"",
        "tru",
        "nul",
        "True",
        "NaN",
        "Infinity",
        "-Infinity",
        "01",
        "1.",
        ".1",
        "+1",
        "1e",
        "[0x1F]",
        "\u{feff}{}",
        "\u{a0}{}",
        "[1\u{b}]",
        "/* c */ 1",
    ];
    for input in cases {
        assert!(
            matches!(
                canon::parse(input.as_bytes()),
                Err(CanonError::Syntax { .. })
            ),
            "{input:?} gave {:?}",
            canon::parse(input.as_bytes())
        );
    }
    assert!(matches!(
        canon::parse(b"1e400"),
        Err(CanonError::NumberOutOfRange { .. })
    ));
    assert!(matches!(
        canon::parse(b"-1e400"),
        Err(CanonError::NumberOutOfRange { .. })
    ));
}

#[test]
fn is_canonical_distinguishes_forms() {
    for yes in [
        r#"{"a":1}"#,
        "[]",
        "{}",
        "null",
        "0",
        "-1",
        "1e+21",
        "0.5",
        r#"{"a":{"b":[true,false,null]},"b":"c"}"#,
    ] {
        assert!(canon::is_canonical(yes.as_bytes()), "{yes}");
    }
    for no in [
        r#"{ "a":1}"#,
        r#"{"b":1,"a":2}"#,
        "1.0",
        "1E+21",
        "1e21",
        "-0",
        "0.50",
        r#""\u0041""#,
        r#""\/""#,
        "[1, 2]",
        "null\n",
        r#"{"a":1,"a":1}"#,
        "",
    ] {
        assert!(!canon::is_canonical(no.as_bytes()), "{no}");
    }
}

// ---------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------

/// Strings drawn from characters that stress escaping and UTF-16 ordering.
fn tricky_string() -> impl Strategy<Value = String> {
    let chars = prop::sample::select(vec![
        'a',
        'b',
        'Z',
        '0',
        '"',
        '\\',
        '/',
        '\u{0}',
        '\u{1f}',
        '\u{7f}',
        '\n',
        'é',
        '\u{2028}',
        '\u{e000}',
        '\u{fb33}',
        '\u{ffff}',
        '\u{10000}',
        '\u{1f600}',
        '\u{10ffff}',
    ]);
    prop::collection::vec(chars, 0..4).prop_map(|cs| cs.into_iter().collect())
}

fn any_string() -> impl Strategy<Value = String> {
    prop_oneof![any::<String>(), tricky_string()]
}

fn arb_json() -> impl Strategy<Value = Value> {
    const MAX_SAFE: i64 = (1 << 53) - 1;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-MAX_SAFE..=MAX_SAFE).prop_map(Value::from),
        (-1000_i64..=1000).prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
        any_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 96, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::vec((any_string(), inner), 0..8)
                .prop_map(|members| Value::Object(members.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Rust's shortest formatting rounds exact ties up where ECMAScript picks the
/// even digit, so `ours` may differ from `reference` in the last mantissa
/// digit by one — and then it must be the even one.
fn same_up_to_tie(ours: &str, reference: &str) -> bool {
    if ours == reference {
        return true;
    }
    let split = |s: &str| -> (String, String) {
        let (m, e) = s.split_once('e').unwrap_or((s, ""));
        (m.to_owned(), e.to_owned())
    };
    let ((m1, e1), (m2, e2)) = (split(ours), split(reference));
    let (Some(d1), Some(d2)) = (m1.bytes().last(), m2.bytes().last()) else {
        return false;
    };
    e1 == e2
        && m1.len() == m2.len()
        && m1[..m1.len() - 1] == m2[..m2.len() - 1]
        && d1.abs_diff(d2) == 1
        && d1 % 2 == 0
}

fn has_big_integral_float(value: &Value) -> bool {
    match value {
        Value::Number(n) => {
            n.is_f64()
                && n.as_f64().is_some_and(|f| {
                    f.fract() == 0.0 && f.abs() > 9007199254740991.0 && f.abs() < 1e21
                })
        }
        Value::Array(items) => items.iter().any(has_big_integral_float),
        Value::Object(members) => members.values().any(has_big_integral_float),
        _ => false,
    }
}

/// Equality of JSON values where numbers compare as doubles (an integral
/// float and the integer it prints as are the same canonical number).
fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(xs), Value::Array(ys)) => {
            xs.len() == ys.len() && xs.iter().zip(ys).all(|(x, y)| same_json(x, y))
        }
        (Value::Object(xs), Value::Object(ys)) => {
            xs.len() == ys.len()
                && xs
                    .iter()
                    .all(|(k, x)| ys.get(k).is_some_and(|y| same_json(x, y)))
        }
        _ => a == b,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Output parses strictly, means the same value, re-serialises to the
    /// same bytes, and is recognised as canonical.
    #[test]
    fn canonical_output_is_idempotent(value in arb_json()) {
        let bytes = match canon::to_vec(&value) {
            Ok(bytes) => bytes,
            Err(err) => {
                // The only refusal possible here: an integral double beyond
                // 2^53−1 that would print as an unparseable integer.
                prop_assert!(matches!(err, CanonError::UnsafeInteger { .. }), "{err}");
                prop_assert!(has_big_integral_float(&value));
                return Ok(());
            }
        };
        let reparsed = canon::parse(&bytes).unwrap();
        prop_assert!(same_json(&value, &reparsed));
        prop_assert_eq!(canon::to_vec(&reparsed).unwrap(), bytes.clone());
        prop_assert!(canon::is_canonical(&bytes));
        prop_assert_eq!(canon::canonicalize(&bytes).unwrap(), bytes);
    }

    /// Pretty-printed input (serde_json's own formatting, whitespace and
    /// member order) canonicalises to the same bytes as the value.
    #[test]
    fn canonicalize_ignores_formatting(value in arb_json()) {
        let pretty = serde_json::to_vec_pretty(&value).unwrap();
        prop_assert_eq!(canon::canonicalize(&pretty), canon::to_vec(&value));
    }

    /// Integral doubles are the one place where ECMAScript's number form and
    /// the integer range meet: exactly those beyond 2^53−1 and below 1e21
    /// are refused.
    #[test]
    fn integral_doubles(i in -(1_i64 << 62)..(1_i64 << 62), shift in 0_i32..80) {
        let f = (i as f64) * 2f64.powi(shift);
        let result = canon::to_string(&float(f));
        if f.abs() <= 9007199254740991.0 {
            prop_assert_eq!(result, Ok(format!("{}", f + 0.0)));
        } else if f.abs() < 1e21 {
            prop_assert!(
                matches!(result, Err(CanonError::UnsafeInteger { .. })),
                "{f:e} gave {result:?}"
            );
        } else {
            prop_assert!(result.unwrap().contains("e+"));
        }
    }

    /// Strings: RFC 8785 escaping coincides with serde_json's default string
    /// escaping (an independent implementation), and round-trips.
    #[test]
    fn string_escaping_matches_reference(s in any_string()) {
        let ours = canon::to_string(&Value::String(s.clone())).unwrap();
        prop_assert_eq!(&ours, &serde_json::to_string(&s).unwrap());
        prop_assert_eq!(canon::parse(ours.as_bytes()).unwrap(), Value::String(s));
    }

    /// Members are ordered by UTF-16 code units, whatever the keys.
    #[test]
    fn members_sorted_by_utf16(keys in prop::collection::btree_set(any_string(), 0..12)) {
        let value = Value::Object(keys.iter().map(|k| (k.clone(), Value::Null)).collect());
        let mut sorted: Vec<&String> = keys.iter().collect();
        sorted.sort_by_key(|k| k.encode_utf16().collect::<Vec<u16>>());
        let members: Vec<String> = sorted
            .into_iter()
            .map(|k| format!("{}:null", serde_json::to_string(k).unwrap()))
            .collect();
        let expected = format!("{{{}}}", members.join(","));
        prop_assert_eq!(canon::to_string(&value).unwrap(), expected);
    }

    /// An object written from its map is the object written as a value, byte for byte.
    #[test]
    fn an_object_written_from_its_map_is_the_value_written(
        keys in prop::collection::btree_set(any_string(), 0..12),
        value in arb_json(),
    ) {
        let map: Map<String, Value> = keys.into_iter().map(|k| (k, value.clone())).collect();
        prop_assert_eq!(
            canon::object_to_vec(&map).ok(),
            canon::to_vec(&Value::Object(map.clone())).ok()
        );
    }

    /// Doubles: the text round-trips exactly; inside the plain range it is
    /// Rust's shortest plain decimal, outside it the shortest scientific form
    /// with an explicit exponent sign — up to ECMAScript's ties-to-even rule
    /// (see `same_up_to_tie`).
    #[test]
    fn doubles_follow_ecmascript(f in any::<f64>().prop_filter("finite", |f| f.is_finite())) {
        let text = canon::number_to_string(f).unwrap();
        let back: f64 = text.parse().unwrap();
        prop_assert_eq!(back, f);
        if f == 0.0 {
            prop_assert_eq!(text, "0");
        } else {
            // n is the ECMAScript decimal exponent: 10^(n-1) <= |f| < 10^n.
            let sci = format!("{:e}", f);
            let (mantissa, exp) = sci.split_once('e').unwrap();
            let n = exp.parse::<i32>().unwrap() + 1;
            let reference = if -6 < n && n <= 21 {
                format!("{}", f)
            } else {
                let sign = if n - 1 < 0 { "-" } else { "+" };
                format!("{mantissa}e{sign}{}", (n - 1).abs())
            };
            prop_assert!(same_up_to_tie(&text, &reference), "{text} vs {reference}");
        }
    }

    /// Exact ties: between 2^50 and 2^51 doubles are spaced 0.25 apart, so
    /// i + 0.25 is halfway between i.2 and i.3 and i + 0.75 halfway between
    /// i.7 and i.8; ECMAScript picks the even last digit.
    #[test]
    fn ties_round_to_even(i in (1_u64 << 50)..(1_u64 << 51)) {
        let base = i as f64;
        prop_assert_eq!(canon::number_to_string(base + 0.25).unwrap(), format!("{i}.2"));
        prop_assert_eq!(canon::number_to_string(base + 0.5).unwrap(), format!("{i}.5"));
        prop_assert_eq!(canon::number_to_string(base + 0.75).unwrap(), format!("{i}.8"));
        prop_assert_eq!(canon::number_to_string(-(base + 0.25)).unwrap(), format!("-{i}.2"));
    }

    /// Arbitrary bytes never panic, and anything accepted is canonicalisable.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        if let Ok(value) = canon::parse(&bytes) {
            let out = canon::to_vec(&value).unwrap();
            prop_assert!(canon::is_canonical(&out));
        }
        let _ = canon::is_canonical(&bytes);
    }

    /// Mutated JSON-ish text (more likely to reach deep parser states).
    #[test]
    fn jsonish_text_never_panics(text in r#"[\[\]{}",:0-9eE+\-. a\\u]{0,40}"#) {
        if let Ok(value) = canon::parse(text.as_bytes()) {
            prop_assert!(canon::to_vec(&value).is_ok());
        }
    }
}
